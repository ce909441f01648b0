/* The sample module the VMFB tests and the fixtures tool write: one host plan
 * (plan.h) and one executable per format around fake but well-formed device code.
 *
 *   main(x: tensor<1024xf32>, y: tensor<1024xf32>) -> tensor<1024xf32>:
 *     t = add_kernel(x, w, n)    w a 4 KiB constant (an external rodata segment)
 *     r = mul_kernel(t, y, n, 3)
 *
 * Device code: PTX text for sm_89, an AMDGPU ELF header for gfx1100 (HSACO), and
 * SPIR-V words with one OpEntryPoint per kernel. Everything here is a function of
 * this file alone, so vmfb_fixtures writes the same bytes on every run and host:
 * changing a byte of it changes every fixture. Test code only (library
 * kiln_testsupport_vmfb, linked into the vmfb unit tests and vmfb_fixtures); it
 * uses no cmocka, so tools can link it.
 */
#ifndef KILN_TESTS_UNIT_SUPPORT_VMFB_SAMPLE_H
#define KILN_TESTS_UNIT_SUPPORT_VMFB_SAMPLE_H

#include <stdint.h>

#include "compiler/vmfb/plan.h"
#include "compiler/vmfb/writer.h"

enum {
  KILN_TEST_VMFB_ELEMS = 1024,                     /* elements of every tensor */
  KILN_TEST_VMFB_BYTES = 4 * KILN_TEST_VMFB_ELEMS, /* bytes of every buffer, the constant's too */
  KILN_TEST_VMFB_HSACO_BYTES = 128,                /* the AMDGPU ELF header and its zero padding */
};

typedef struct kiln_test_vmfb_sample_s {
  /* The plan (heap; kiln_test_vmfb_sample_deinit frees it). buffers[2] is the
   * constant: bytes i * 7 + 1. Tests may change it in place (the plan owns what
   * it points at, as plan.h says). */
  kiln_vmfb_plan_t plan;
  uint8_t hsaco[KILN_TEST_VMFB_HSACO_BYTES];
  /* add_kernel (1 constant) and mul_kernel (2 constants): block {64, 1, 1}, three
   * bindings, the first two read-only. One array for all three executables, so a
   * change here shows in every format. */
  kiln_vmfb_kernel_t kernels[2];
  kiln_vmfb_code_t code[3];      /* [format - 1]; code[1] points at hsaco */
  kiln_vmfb_executable_t exe[3]; /* [format - 1]; Vulkan with subgroup size 16 */
} kiln_test_vmfb_sample_t;

/* Builds the sample into *out_sample. The executables point into the struct
 * itself, so it must stay where it was built (embed it or allocate it; do not copy
 * it and use the copy). Aborts when memory runs out (kiln_calloc). Free with
 * kiln_test_vmfb_sample_deinit. Thread-safe for distinct samples. */
void kiln_test_vmfb_sample_init(kiln_test_vmfb_sample_t *out_sample);

/* Frees the plan (and whatever a test put in it); the rest is inline. The sample
 * may be initialized again afterwards. Thread-safe for distinct samples. */
void kiln_test_vmfb_sample_deinit(kiln_test_vmfb_sample_t *sample);

#endif /* KILN_TESTS_UNIT_SUPPORT_VMFB_SAMPLE_H */
