/* Row reductions as workgroup reductions on GPU targets (gpu_reduce.c). Inside
 * compiler/ only (includes mlir-c). One thread at a time per context.
 *
 * The front half reduces a row (tosa.reduce_max / reduce_sum / ... over the last
 * axis, a softmax's two reductions) in one invocation per row: its 4x32 tile
 * maps the row's unit dimension to thread x, so 1 lane in 32 runs, each walking
 * its whole row serially. GPU targets replace that kernel: one workgroup per
 * row, each invocation combining a strided share of the row in 128-bit loads,
 * then subgroup shuffles (CUDA, HIP, Vulkan profiles with
 * GroupNonUniformShuffle) or a tree through workgroup memory, and one
 * invocation combining the result into the output element as the old kernel
 * did. The combining op is reordered (the sum of a row in another order), as
 * every GPU reduction is.
 *
 * What is matched, read from the kernel:
 *   if row < R and x < 1: for k in 0..K: O[row, 0] = op(X[row, 0, k], O[row, 0])
 * with op arith.maximumf, minimumf, maxnumf, minnumf, addf or mulf on f32, row
 * the front half's tile index (thread y alone when one tile holds every row),
 * and K a multiple of 128 (32 invocations of 4).
 */
#ifndef KILN_COMPILER_GPU_REDUCE_H_
#define KILN_COMPILER_GPU_REDUCE_H_

#include <mlir-c/IR.h>
#include <stdbool.h>
#include <stdint.h>

#include "base/status.h"
#include "compiler/targets.h"

typedef struct kiln_compiler_reduce_s {
  bool found;
  int64_t rows, len; /* R rows of K elements, reduced along the row */
  unsigned x_arg, o_arg, n_args;
  const char *op; /* the combining op's name ("arith.addf"), a static string */
} kiln_compiler_reduce_t;

/* Whether kernel `func` (launched on `grid` workgroups of `block`) is a row
 * reduction of that form, in *out. */
bool kiln_compiler_reduce_match(MlirOperation func, const uint32_t grid[3], const uint32_t block[3],
                                kiln_compiler_reduce_t *out);

/* Whether target `t` takes the workgroup reduction for `r` (its workgroup size
 * and memory hold it). */
bool kiln_compiler_reduce_fits(const kiln_compiler_reduce_t *r, const kiln_target_t *t);

/* Replaces kernel `func` (matched as `r`) by the workgroup reduction for `t`;
 * writes its grid (one workgroup per row) and workgroup size. */
KILN_MUST_USE kiln_status_t kiln_compiler_reduce_replace(MlirContext context, MlirModule module,
                                                         MlirOperation func, const kiln_compiler_reduce_t *r,
                                                         const kiln_target_t *t, uint32_t out_grid[3],
                                                         uint32_t out_block[3]);

/* The kernel kiln writes for `r` on `t`, as text, for a kernel named "reduce"
 * of arguments X (%arg0) and O (%arg1) (tests/tools/gemm_text prints it); its
 * workgroup size and grid in out_block and out_grid. The caller frees it. */
char *kiln_compiler_reduce_text(const kiln_compiler_reduce_t *r, const kiln_target_t *t,
                                uint32_t out_block[3], uint32_t out_grid[3]);

#endif  // KILN_COMPILER_GPU_REDUCE_H_
