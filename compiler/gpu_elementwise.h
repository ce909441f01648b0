/* Elementwise kernels in 128-bit vectors on GPU targets (gpu_elementwise.c).
 * Inside compiler/ only (includes mlir-c). One thread at a time per context.
 *
 * The front half runs an elementwise kernel (a fused chain of tosa.add, exp,
 * a bias broadcast ...) as one invocation per element, each loading and storing
 * 32-bit scalars along the contiguous dimension on thread x. GPU targets rewrite
 * such a kernel in place so that each invocation handles 4 neighbouring
 * elements: the buffers indexed by that dimension become memrefs of vector<4>
 * (128-bit loads and stores), the body's arith and math ops compute on
 * vector<4>, values that do not vary along it (a bias row read once per
 * invocation, a constant) are broadcast, and the grid along it shrinks by 4.
 *
 * What is taken, read from the kernel after the target's type preparation:
 *   - every store's last index is one value x = thread x + 32 * block id (the
 *     front half's tile of the contiguous dimension), of an f32 buffer whose
 *     last dimension N is a multiple of 4;
 *   - every load either has x as its last index (an f32 buffer of last
 *     dimension N) or does not use x at all, and no buffer is read both ways;
 *   - the body holds loads, stores and arith/math ops on 32-bit or narrower
 *     scalars only (no index arithmetic on values, no calls, no loops);
 *   - x is used by those loads and stores and the guard alone, and its block
 *     id by x alone; without a guard the tiles are exact and N/4 a multiple of
 *     32, with one, its bound on x is N (it becomes N/4).
 * Anything else keeps its kernel. The arithmetic is the same per element.
 */
#ifndef KILN_COMPILER_GPU_ELEMENTWISE_H_
#define KILN_COMPILER_GPU_ELEMENTWISE_H_

#include <mlir-c/IR.h>
#include <stdbool.h>
#include <stdint.h>

#include "base/status.h"
#include "compiler/targets.h"

/* Rewrites kernel `func` (launched on `grid` workgroups of `block`) in vectors
 * for GPU target `t` when it has the form above: *done set, its new grid and
 * workgroup size in out_grid and out_block. A kernel of another form is left
 * as it was (*done false, no error). */
KILN_MUST_USE kiln_status_t kiln_compiler_elementwise_vectorize(MlirContext context, MlirModule module,
                                                                MlirOperation func, const uint32_t grid[3],
                                                                const uint32_t block[3],
                                                                const kiln_target_t *t, uint32_t out_grid[3],
                                                                uint32_t out_block[3], bool *done);

#endif  // KILN_COMPILER_GPU_ELEMENTWISE_H_
