/* Elementwise epilogues fused into the tiled matmul that produces their input
 * (gpu_epilogue.c). Inside compiler/ only (includes mlir-c). One thread at a time
 * per context.
 *
 * The front half runs a matmul followed by its bias and activation as two
 * kernels: the matmul writes C, and an elementwise kernel E reads C back,
 * element for element, and writes D = f(C, bias, ...). A GPU target that tiles
 * the matmul its own way (gpu_gemm.h) may instead apply E's arithmetic to each
 * accumulator before it leaves the registers: the tiled kernel takes E's
 * buffers as extra arguments, stores f(acc, ...) to D, and the target's plan
 * drops E's dispatch (kiln_compiler_kernel_t.fused_into). C is still stored
 * where anything after E may read it.
 *
 * What is taken as E, read from the front half's kernel:
 *   - one block of index arithmetic, constants, loads, arith and math ops on
 *     scalars of at most 32 bits, and exactly one store, to an f32, f16 or
 *     bf16 buffer D of rank 2 or 3 (a matmul's C) or 4 (a conv's NHWC output):
 *     an f16 model's cast, bias and activation after its f32-accumulating
 *     matmul write 16-bit floats; no guard, loop
 *     or call (the tiled matmul and conv take exact tiles only, so the front
 *     half gives their epilogues no guard);
 *   - the store's indices cover D exactly once: each is the front half's tile
 *     index (thread id + tile * block id, the grid times the tile equal to
 *     the dimension), block id x for a leading batch dimension (a conv's
 *     images and rows folded into it), or 0 for a dimension of 1, and every
 *     other grid and workgroup dimension is 1;
 *   - at least one load reads an f32 buffer of D's shape at exactly the stored
 *     element (a candidate for C; the plan says which one the matmul wrote);
 *   - what the stored value depends on is loads of other buffers at indices
 *     made of the stored element's indices and constants (a bias row), and
 *     arith and math ops: kiln_compiler_epilogue_fits checks it again on the
 *     target's own kernel, after its type preparation.
 */
#ifndef KILN_COMPILER_GPU_EPILOGUE_H_
#define KILN_COMPILER_GPU_EPILOGUE_H_

#include <mlir-c/IR.h>
#include <stdbool.h>
#include <stdint.h>

#include "base/status.h"

typedef struct kiln_compiler_epilogue_s {
  bool found;
  int rank;        /* of D: 2, 3, or 4 (NHWC) */
  int64_t dims[4]; /* D's shape */
  unsigned d_arg;  /* the argument E stores */
  unsigned n_args;
  uint32_t c_candidates; /* bit a: argument a is read at exactly the stored element */
  unsigned d_bytes;      /* D's element: 4 (f32) or 2 (f16, bf16) */
} kiln_compiler_epilogue_t;

/* Reads kernel `func`, launched on `grid` workgroups of `block`, into *out
 * (found false when it is not of the form above). */
bool kiln_compiler_epilogue_match(MlirOperation func, const uint32_t grid[3], const uint32_t block[3],
                                  kiln_compiler_epilogue_t *out);

/* Whether the target's own copy of E (`func`, after its type preparation) still
 * computes its stored value from argument `c_arg`'s element, other loads and
 * arith and math ops alone, into a D of f32, f16, bf16 or 16-bit floats' bits
 * (i16). */
bool kiln_compiler_epilogue_fits(MlirOperation func, unsigned c_arg);

/* Applies E (`e_func`, whose argument `e_c_arg` is C) to the tiled matmul kernel
 * `g_func`, whose argument `g_c_arg` is C and whose arguments from `g_n_args`
 * on are E's other arguments in order (its D typed as the kernel types C, with
 * D's element for f32: vector<W x f16> where C holds vector<W x f32>). Every
 * store of accumulators to C (a vector<W x f32> at [batch,] row, column / W, or
 * a scalar; a conv's row is a pixel of E's NHWC output) gains a store of E's
 * arithmetic on them, lane by lane, to D at the same place; the store to C
 * stays only where `keep_c`. INTERNAL when the result does not verify (a kiln
 * bug). */
KILN_MUST_USE kiln_status_t kiln_compiler_epilogue_apply(MlirContext context, MlirOperation g_func,
                                                         unsigned g_c_arg, unsigned g_n_args,
                                                         MlirOperation e_func, unsigned e_c_arg, bool keep_c,
                                                         const char *target_id);

#endif  // KILN_COMPILER_GPU_EPILOGUE_H_
