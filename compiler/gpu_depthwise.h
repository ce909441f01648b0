/* Depthwise convolutions in 128-bit vectors on GPU targets (gpu_depthwise.c).
 * Inside compiler/ only (includes mlir-c). One thread at a time per context.
 *
 * The front half runs a depthwise conv (tosa.depthwise_conv2d, channel
 * multiplier 1) as one invocation per output element, each reading its taps as
 * 32-bit scalars: 2 global loads per multiply-add. GPU targets replace that
 * kernel: each invocation computes 4 channels (one vector<4>) of a strip of up
 * to 4 neighbouring output pixels along the row, loading each input vector its
 * strip's taps share once and the filter's vectors once per strip.
 *
 * What is matched, read from the kernel (the front half's 4x32 tile over output
 * rows, columns and channels; NHWC input, filter [KH][KW][C][1]):
 *   for kh, kw: out[n, oh, ow, c, 0] += in[n, oh*S + kh, ow*S + kw, c] * filter[kh, kw, c, 0]
 * with n and oh the workgroup's x (one image, or the front half's folded batch),
 * ow and c the tile's y and x indices (or the thread's own where one tile holds
 * the dimension), S a stride of 1 to 8, at most 64 taps, f32 throughout, and C a
 * multiple of 4. Where the tiles overhang the output, the loops sit in a guard
 * that must bound each overhanging dimension by the output's size.
 */
#ifndef KILN_COMPILER_GPU_DEPTHWISE_H_
#define KILN_COMPILER_GPU_DEPTHWISE_H_

#include <mlir-c/IR.h>
#include <stdbool.h>
#include <stdint.h>

#include "base/status.h"
#include "compiler/targets.h"

typedef struct kiln_compiler_depthwise_s {
  bool found;
  int64_t batch, in_h, in_w, out_h, out_w, channels, kh, kw, stride;
  unsigned in_arg, filter_arg, out_arg, n_args;
} kiln_compiler_depthwise_t;

/* Whether kernel `func` (launched on `grid` workgroups of `block`) is a
 * depthwise conv of that form, in *out. */
bool kiln_compiler_depthwise_match(MlirOperation func, const uint32_t grid[3], const uint32_t block[3],
                                   kiln_compiler_depthwise_t *out);

/* Whether target `t` takes the vector kernel for `d` (its workgroup size and
 * grid hold it). */
bool kiln_compiler_depthwise_fits(const kiln_compiler_depthwise_t *d, const kiln_target_t *t);

/* Replaces kernel `func` (matched as `d`) by the vector kernel for `t`; writes
 * its grid and workgroup size. */
KILN_MUST_USE kiln_status_t kiln_compiler_depthwise_replace(MlirContext context, MlirModule module,
                                                            MlirOperation func,
                                                            const kiln_compiler_depthwise_t *d,
                                                            const kiln_target_t *t, uint32_t out_grid[3],
                                                            uint32_t out_block[3]);

#endif  // KILN_COMPILER_GPU_DEPTHWISE_H_
