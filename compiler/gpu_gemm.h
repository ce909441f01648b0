/* Tiled matrix-multiply kernels for GPU targets (gpu_gemm.c). Inside compiler/
 * only (includes mlir-c). One thread at a time per context.
 *
 * The front half gives every target the same kernels: a contraction becomes a
 * kernel in which each invocation owns one output element and reads both
 * operands from device memory on every k step (2 global loads per
 * multiply-add). GPU targets replace such a kernel with a tiled one: a
 * workgroup owns a TILE_M x TILE_N output tile, stages TILE_K slices of both
 * operands through workgroup memory with 128-bit loads (one per invocation per
 * operand per slice), and each invocation keeps a 4x4 register tile of
 * accumulators, so a multiply-add costs 2/256 global loads. CPU targets keep
 * the kernel they share with the front half (their workgroups are loops).
 *
 * What is matched (kiln_compiler_gemm_match) is the front half's own lowering of
 * linalg.matmul / batch_matmul (what tosa.matmul becomes), read from the kernel:
 *   for k in 0..K: C[b,i,j] += A[b,i,k] * B[b,k,j]      (A, B f32, or f16/bf16/f8 widened)
 * with i, j the tile's invocation indices and the grid exactly the output, so
 * the replacement computes the same sums in the same k order. Shapes the tile
 * does not divide keep the kernel they have.
 *
 * Convolutions are matched too, as the front half lowers an NHWC conv with the
 * filter in HWCF (what tosa.conv2d becomes), stride s, batch folded into the
 * workgroup's x (host.c collapses a loop's leading dimensions):
 *   for kh, kw, c: out[n,oh,ow,f] += in[n, oh*s+kh, ow*s+kw, c] * filter[kh,kw,c,f]
 * which is a matmul with an implicit A (im2col, never stored): the tiled
 * kernel's A loader computes each row's input pixel instead of reading a row.
 */
#ifndef KILN_COMPILER_GPU_GEMM_H_
#define KILN_COMPILER_GPU_GEMM_H_

#include <mlir-c/IR.h>
#include <stdbool.h>
#include <stdint.h>

#include "base/status.h"
#include "compiler/targets.h"

/* The output tile of a workgroup, the k slice staged per step, and the
 * workgroup (TILE_N / 4 x TILE_M / 4 invocations, each a 4x4 register tile). */
#define KILN_GEMM_TILE_M 64
#define KILN_GEMM_TILE_N 64
#define KILN_GEMM_TILE_K 16

/* The 8-bit float formats the matrix units multiply (OCP FP8: E4M3 without
 * infinities, and E5M2). */
typedef enum kiln_gemm_f8_e {
  KILN_GEMM_F8_NONE,
  KILN_GEMM_F8_E4M3FN,
  KILN_GEMM_F8_E5M2,
} kiln_gemm_f8_t;

typedef struct kiln_compiler_gemm_s {
  bool found;
  int rank; /* of the operands: 2 (matmul) or 3 (batch_matmul) */
  int64_t batch, m, n, k;
  unsigned a_arg, b_arg, c_arg; /* the kernel's arguments (a_arg may equal b_arg) */
  unsigned n_args;
  unsigned operand_bits; /* A and B: 32 (f32), 16 (f16 or bf16) or 8 (f8), widened to f32 */
  bool bf16;             /* 16-bit operands are bf16: the kernels read their bits */
  kiln_gemm_f8_t f8;     /* 8-bit operands' format; kernels read their bits */
  /* A convolution as an implicit GEMM (conv_h > 0): an NHWC conv of stride
   * conv_stride over an already padded input of images of in_h x in_w x conv_c,
   * filter conv_h x conv_w x conv_c x N (HWCF), output images of out_h x out_w x
   * N: row m of A is output pixel (m / (out_h out_w), its row, its column),
   * column k is (kh, kw, c) in that order, so B is the filter as it lies and C
   * the output as it lies. rank 2, batch 1 (the images are rows of M). */
  int64_t conv_h, conv_w, conv_c, in_h, in_w, out_h, out_w, conv_stride;
  /* The fewest workgroups the SIMT kernel's larger tiles may leave (0: 64, the
   * conv goal of issue 17); tests set 1 to reach the 128x128 tile cheaply. */
  int64_t min_workgroups;
} kiln_compiler_gemm_t;

/* Whether kernel `func` (a gpu.func from the front half, launched on `grid`
 * workgroups of `block` invocations) is a contraction the tiled kernel
 * computes, in *out. */
bool kiln_compiler_gemm_match(MlirOperation func, const uint32_t grid[3], const uint32_t block[3],
                              kiln_compiler_gemm_t *out);

/* Whether target `t` takes the tiled kernel for `g`: its workgroup limits and
 * workgroup memory hold the tile, and its code generator stores and computes
 * the operands' type. */
bool kiln_compiler_gemm_fits(const kiln_compiler_gemm_t *g, const kiln_target_t *t);

/* Arguments a tiled kernel takes after its own (an epilogue's buffers,
 * gpu_epilogue.h), as type text; NULL types one as the kernel types C, with
 * the element `c_like_elem` for C's f32 where that is not NULL ("f16", "i16"). */
typedef struct kiln_compiler_gemm_extra_s {
  const char *const *types;
  unsigned n;
  const char *c_like_elem;
} kiln_compiler_gemm_extra_t;

/* Replaces kernel `func` (matched as `g`) by the tiled kernel for target `t`,
 * same symbol; the arguments it tiles become buffers of vector<4xT> (the same
 * bytes: 128-bit loads in every backend, SPIR-V's logical addressing
 * included), and `extra` (NULL: none) follow its own. Launches of the old
 * kernel are erased from host functions (the host plan, read before, launches
 * the new one on out_grid). Writes the new grid and workgroup size, and the new
 * kernel in *out_new where out_new is not NULL. */
KILN_MUST_USE kiln_status_t kiln_compiler_gemm_replace(MlirContext context, MlirModule module,
                                                       MlirOperation func, const kiln_compiler_gemm_t *g,
                                                       const kiln_target_t *t,
                                                       const kiln_compiler_gemm_extra_t *extra,
                                                       uint32_t out_grid[3], uint32_t out_block[3],
                                                       MlirOperation *out_new);

/* The text of the tiled kernel for `g` on `t` (a gpu.module holding gpu.func
 * @gemm(A, B, C) with A, B and C as kiln_compiler_gemm_replace types them) and
 * its workgroup size and grid: for tools and tests that check the kernel's arithmetic
 * without a GPU (tests/tools/gemm_emulate.py). Owned by the caller. */
char *kiln_compiler_gemm_text(const kiln_compiler_gemm_t *g, const kiln_target_t *t, uint32_t out_block[3],
                              uint32_t out_grid[3]);

#endif  // KILN_COMPILER_GPU_GEMM_H_
