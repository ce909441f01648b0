/* Writing VMFB files IREE 3.12's runtime loads (HAL 0.7, bytecode 17.0).
 *
 * Two steps, both pure functions of their inputs (same input, same bytes):
 *  - kiln_vmfb_executable_serialize: one target's device code and kernel metadata
 *    as its HAL executable FlatBuffer (cuda-nvptx-fb / rocm-hsaco-fb /
 *    vulkan-spirv-fb), behind the 64-byte executable header;
 *  - kiln_vmfb_write: the host plan's VM program (hostprog.h) around that
 *    executable, as a BytecodeModuleDef in the polyglot zip (or flat) layout, with
 *    kiln's provenance in the module attrs and, optionally, the source itself.
 * The legacy knobs (hal_version 6, no executable header, older bytecode version,
 * no dependency list) exist to build fixtures of pre-3.12 files; kiln never
 * serves such files.
 * Thread-safe: no shared state.
 */
#ifndef KILN_COMPILER_VMFB_WRITER_H_
#define KILN_COMPILER_VMFB_WRITER_H_

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "base/buf.h"
#include "base/status.h"
#include "compiler/vmfb/plan.h"

typedef enum kiln_vmfb_format_e {
  KILN_VMFB_FORMAT_CUDA = 1,   /* cuda-nvptx-fb, CDA1: PTX text (or a cubin) */
  KILN_VMFB_FORMAT_HIP = 2,    /* rocm-hsaco-fb, HIP1: an AMDGPU code object */
  KILN_VMFB_FORMAT_VULKAN = 3, /* vulkan-spirv-fb, VKE1: SPIR-V words */
  KILN_VMFB_FORMAT_ELF = 4,    /* embedded-elf-<arch> (or system-elf-<arch>): the
                                  ELF shared object itself, no FlatBuffer, no header;
                                  the executable's format_name says which */
} kiln_vmfb_format_t;

/* "cuda-nvptx-fb", ...; the 4-byte FlatBuffer identifier ("CDA1", ...). For
 * KILN_VMFB_FORMAT_ELF, "embedded-elf" and NULL (no FlatBuffer). */
const char *kiln_vmfb_format_name(kiln_vmfb_format_t format);
const char *kiln_vmfb_format_identifier(kiln_vmfb_format_t format);

/* One kernel (an export of the executable). */
typedef struct kiln_vmfb_kernel_s {
  const char *name;       /* the entry point symbol */
  uint32_t module;        /* index into the executable's modules */
  uint32_t block_size[3]; /* workgroup size */
  uint32_t n_bindings;    /* buffer arguments, in order */
  const bool *read_only;  /* n_bindings flags (may be NULL: none read-only) */
  uint32_t n_constants;   /* 32-bit push constants */
} kiln_vmfb_kernel_t;

typedef struct kiln_vmfb_code_s {
  const uint8_t *data; /* PTX text (no NUL needed), HSACO ELF, SPIR-V words */
  size_t len;
} kiln_vmfb_code_t;

typedef struct kiln_vmfb_executable_s {
  kiln_vmfb_format_t format;
  const kiln_vmfb_kernel_t *kernels;
  size_t n_kernels;
  const kiln_vmfb_code_t *modules;
  size_t n_modules;
  uint32_t subgroup_size;  /* Vulkan: the pipelines' required subgroup size (0 = any) */
  const char *format_name; /* ELF: IREE's format string, "embedded-elf-x86_64"; one
                              module, the ELF, whose exports are the kernels in order */
} kiln_vmfb_executable_t;

/* Serializes one executable; with `header`, behind IREE's 64-byte header
 * {magic = identifier, version 0, content size}. INVALID_ARGUMENT for an
 * executable that cannot be described (a kernel naming a missing module, SPIR-V
 * not a whole number of words, no kernels). */
KILN_MUST_USE kiln_status_t kiln_vmfb_executable_serialize(const kiln_vmfb_executable_t *exe, bool header,
                                                           kiln_buf_t *out);

/* Provenance recorded in the module attrs under "kiln.*" keys. All optional. */
typedef struct kiln_vmfb_provenance_s {
  const char *source_sha256; /* hex */
  const char *target;        /* canonical target id */
  const char *flags;         /* normalized compile flags */
  const char *compiler;      /* "kiln 0.x (LLVM/MLIR 22.1.8)" */
  const char *created;       /* RFC 3339; leave NULL for reproducible bytes */
} kiln_vmfb_provenance_t;

typedef struct kiln_vmfb_write_options_s {
  bool flat; /* the flat layout instead of the polyglot zip */
  const kiln_vmfb_provenance_t *provenance;
  const uint8_t *source; /* embedded (zstd) as kiln/source.mlir.zst when set; zip
                            layout only (INVALID_ARGUMENT with `flat`) */
  size_t source_len;
  /* Legacy fixtures only (zeros mean current): */
  uint32_t hal_version;      /* 0 = 7 */
  uint32_t bytecode_version; /* 0 = 17.0 */
  bool no_executable_header;
  bool no_dependencies; /* no dependency list at all (IREE before HAL 0.5) */
} kiln_vmfb_write_options_t;

/* Writes the module `module_name` whose host program is `plan` and whose kernels
 * are in `exe`, appended to `out` (left as it was on error). `options` may be
 * NULL (current defaults). INVALID_ARGUMENT when the plan and the executable
 * disagree (a step naming a kernel the executable lacks, a binding count that
 * differs from the kernel's) or names are unusable. */
KILN_MUST_USE kiln_status_t kiln_vmfb_write(const char *module_name, const kiln_vmfb_plan_t *plan,
                                            const kiln_vmfb_executable_t *exe,
                                            const kiln_vmfb_write_options_t *options, kiln_buf_t *out);

#endif /* KILN_COMPILER_VMFB_WRITER_H_ */
