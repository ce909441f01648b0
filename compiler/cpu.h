/* CPU executables: kiln's kernels as an IREE HAL executable library (embedded ELF).
 *
 * The kernels are the GPU front half's: every gpu.func of the merged gpu.module
 * becomes a function that runs one workgroup, its invocations as loops (thread z,
 * the contiguous tile dimension, innermost), and each gets a dispatch function
 * with IREE's ABI (executable_library.h, version 6) that reads the binding
 * pointers, push constants, workgroup id and count from IREE's dispatch and
 * workgroup state. The library's query function is the ELF's one exported
 * symbol; ld.lld links the object into an ET_DYN shared object with no imports,
 * so IREE's own loader (which applies only relative and absolute relocations)
 * and the system's dlopen both load it. */
#ifndef KILN_COMPILER_CPU_H
#define KILN_COMPILER_CPU_H

#include <mlir-c/IR.h>
#include <stddef.h>

#include "base/status.h"
#include "compiler/targets.h"

/* Runs a textual pass pipeline on `module` (the pipeline's own runner, with its
 * diagnostics capture). */
typedef kiln_status_t (*kiln_compiler_run_fn_t)(void *user, MlirModule module, const char *pipeline);

/* Builds the library from `module`, which holds one gpu.module of kernels (host
 * functions are ignored). Kernels are exported in `n_kernels` `kernel_names`
 * order, with the workgroup sizes in `blocks`; where `noalias[k]` (may be NULL),
 * kernel k's buffers are known not to overlap one it writes (the host plan
 * binds them so), and LLVM may keep values in registers across stores.
 * Multiplies and adds may contract into FMAs. *out_elf is the linked ELF
 * (kiln_malloc'd, NUL-terminated past *out_len). UNIMPLEMENTED for kernels that
 * use workgroup memory, barriers or subgroup operations, or that call a function
 * the ELF cannot import (a math function with no kiln or MLIR expansion). */
KILN_MUST_USE kiln_status_t kiln_compiler_cpu_library(
    MlirContext context, MlirModule module, const kiln_target_t *target, const char *const *kernel_names,
    const uint32_t (*blocks)[3], const bool *noalias, size_t n_kernels, kiln_compiler_run_fn_t run,
    void *run_user, const char *name, unsigned char **out_elf, size_t *out_len);

#endif /* KILN_COMPILER_CPU_H */
