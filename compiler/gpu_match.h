/* What the GPU back halves' own kernels share (gpu_gemm.c, gpu_reduce.c):
 * reading the front half's kernels, and swapping one for a kernel of kiln's own
 * text. Inside compiler/ only (includes mlir-c). One thread at a time per
 * context. */
#ifndef KILN_COMPILER_GPU_MATCH_H_
#define KILN_COMPILER_GPU_MATCH_H_

#include <mlir-c/IR.h>
#include <stdbool.h>
#include <stdint.h>

#include "base/status.h"
#include "compiler/targets.h"

/* The op defining `v`; null for a block argument. */
MlirOperation kiln_compiler_gpu_def_of(MlirValue v);

/* Whether `attr` prints as `text` ("affine_map<()[s0] -> (s0 * 4)>"). */
bool kiln_compiler_gpu_attr_is(MlirAttribute attr, const char *text);

/* Whether `v` is gpu.<what> ("gpu.thread_id", "gpu.block_id") along `dim`
 * ('x', 'y', 'z'). */
bool kiln_compiler_gpu_is_id(MlirValue v, const char *what, char dim);

/* Whether `v` is thread_id(tdim) + tile * block_id(bdim), as the front half's
 * tiling writes it: arith.addi(thread id, affine.apply (s0 * tile)[block id]). */
bool kiln_compiler_gpu_is_tile_index(MlirValue v, char tdim, char bdim, uint32_t tile);

/* The argument number of `v` when it is an argument of `entry`, else -1. */
int kiln_compiler_gpu_arg_of(MlirValue v, MlirBlock entry);

/* A static memref with the identity layout in the default memory space. */
bool kiln_compiler_gpu_plain_memref(MlirType t);

/* Whether `loop` is scf.for 0 to *out_ub step 1 with no results. */
bool kiln_compiler_gpu_counted_loop(MlirOperation loop, int64_t *out_ub);

/* Whether `v` is the index or integer constant 0. */
bool kiln_compiler_gpu_is_zero(MlirValue v);

/* `t` as MLIR prints it. Owned by the caller. */
char *kiln_compiler_gpu_type_text(MlirType t);

/* Replaces kernel `func` by the gpu.func in `text` (a gpu.module holding one,
 * with the same symbol) and erases the old kernel's launches from the host
 * functions (their argument types are the old ones; the host plan was read
 * before). `what` and `t` name the kernel in errors: INTERNAL when the text does
 * not parse, a kiln bug. */
kiln_status_t kiln_compiler_gpu_kernel_swap(MlirContext context, MlirModule module, MlirOperation func,
                                            const char *text, const char *what, const kiln_target_t *t);

#endif  // KILN_COMPILER_GPU_MATCH_H_
