/* Model IR to device code: the compile pipeline.
 *
 * One call compiles one module for N targets. The target-independent front half
 * runs once: verify, TOSA to linalg, canonicalize, fuse elementwise ops,
 * bufferize, lower to parallel loops, tile them to workgroups, map them to the GPU
 * grid and outline kernels. Each target then lowers a clone of that module:
 *   CUDA (sm_89, sm_120, sm_121): NVVM, then PTX text for the chip with its PTX
 *     ISA version (.target / .version);
 *   HIP (gfx950, gfx942, gfx1100, ...): ROCDL, then an AMDGPU code object (HSACO
 *     ELF) linked by ld.lld from lld-22;
 *   Vulkan (arm5gen, valhall1..4, videocore_vii): SPIR-V for the device's version,
 *     each kernel an entry point with its workgroup size.
 * The host CPU target is not produced by this pipeline yet.
 *
 * Errors: bad IR is INVALID_ARGUMENT for the whole call, carrying MLIR's
 * diagnostics with file:line:col. A failure in one target's back half fails only
 * that target (its output's status), with the diagnostics.
 * One thread at a time per context.
 */
#ifndef KILN_COMPILER_PIPELINE_H
#define KILN_COMPILER_PIPELINE_H

#include <stddef.h>
#include <stdint.h>

#include "base/status.h"
#include "compiler/source.h"
#include "compiler/targets.h"

/* One kernel of the host program, with the device code of the module that holds
 * it (each kernel is outlined into a module of its own). */
typedef struct kiln_compiler_kernel_s {
  char *name;             /* the kernel's symbol (entry point) */
  char *module_name;      /* the gpu.module it was outlined into */
  uint32_t block_size[3]; /* workgroup size x, y, z */
  unsigned char *binary;  /* PTX text, HSACO ELF, or SPIR-V words */
  size_t binary_len;
} kiln_compiler_kernel_t;

typedef struct kiln_compiler_target_output_s {
  const kiln_target_t *target;
  kiln_status_t status; /* owned; NULL when the target compiled */
  kiln_compiler_kernel_t *kernels;
  size_t n_kernels;
  int64_t backend_ms;
} kiln_compiler_target_output_t;

typedef struct kiln_compiler_output_s {
  kiln_compiler_target_output_t *targets;
  size_t n_targets;
  int64_t front_ms; /* the shared, target-independent half */
} kiln_compiler_output_t;

/* Compiles `len` bytes of MLIR (text or bytecode) named `name` for `targets`
 * (CUDA, HIP or Vulkan kinds). On success (the front half worked) *out_output has
 * one entry per target, each with its own status; free with
 * kiln_compiler_output_deinit. */
kiln_status_t kiln_compiler_compile(kiln_compiler_context_t *context, const void *source,
                                    size_t len, const char *name,
                                    const kiln_target_t *const *targets, size_t n_targets,
                                    kiln_compiler_output_t *out_output);

void kiln_compiler_output_deinit(kiln_compiler_output_t *output);

#endif /* KILN_COMPILER_PIPELINE_H */
