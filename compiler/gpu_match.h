/* What the GPU back halves' own kernels share (gpu_gemm.c, gpu_reduce.c,
 * gpu_depthwise.c): reading the front half's kernels, and swapping one for a
 * kernel of kiln's own text. Inside compiler/ only (includes mlir-c). One thread at a time per
 * context. */
#ifndef KILN_COMPILER_GPU_MATCH_H_
#define KILN_COMPILER_GPU_MATCH_H_

#include <mlir-c/IR.h>
#include <stdbool.h>
#include <stdint.h>

#include "base/buf.h"
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

/* Whether `op`'s name starts with `prefix` ("arith.") and goes on after it. */
bool kiln_compiler_gpu_name_starts(MlirOperation op, const char *prefix);

/* Whether `op` is an arith or math op (no region, no index cast) on integer or
 * float scalars of at most 32 bits: elementwise by definition. */
bool kiln_compiler_gpu_value_op(MlirOperation op);

/* Whether `op` is named one of `names[0..n)`. */
bool kiln_compiler_gpu_op_is_one_of(MlirOperation op, const char *const *names, size_t n);

/* The one block of gpu.func `func`, or null when `func` is no gpu.func or has
 * more blocks. */
MlirBlock kiln_compiler_gpu_kernel_entry(MlirOperation func);

/* Appends "gpu.module @<module> {\ngpu.func @<name>(%arg0: types[0], ...)", the
 * n arguments typed as given (gemm_text writes kernels with no func to read). */
void kiln_compiler_gpu_kernel_open_named(kiln_buf_t *b, const char *module, const char *name, size_t name_len,
                                         const char *const *types, size_t n);

/* Appends "gpu.module @<module> {\ngpu.func @<func's name>(%arg0: T0, ...)":
 * argument i typed types[i] where that is not NULL (i < n), else as in `func`. */
void kiln_compiler_gpu_kernel_open(kiln_buf_t *b, MlirOperation func, const char *module,
                                   const char *const *types, size_t n);

/* Collects the leaves of the arith.andi tree that defines `v` into `leaves`
 * (room for KILN_COMPILER_GPU_MAX_LEAVES; *n of them used on entry); false when
 * there are more or a leaf is a block argument. */
#define KILN_COMPILER_GPU_MAX_LEAVES 8
bool kiln_compiler_gpu_and_leaves(MlirValue v, MlirOperation *leaves, size_t *n);

/* Whether `cmp` is arith.cmpi ult, `v`, <constant bound>; the bound in *out. */
bool kiln_compiler_gpu_is_below(MlirOperation cmp, MlirValue v, int64_t *out);

/* The one loop directly in `loop`'s body (beside an empty scf.yield), or null. */
MlirOperation kiln_compiler_gpu_only_inner_loop(MlirOperation loop);

/* S when `v` is affine.apply (d0)[s0] -> (d0 + s0 * S) of (`d0`)[`s0`] (S = 1:
 * d0 + s0), the stride a conv's tap and output pixel make an input index with
 * (2 to 8 recognised); else 0. */
int64_t kiln_compiler_gpu_sum_stride(MlirValue v, MlirValue d0, MlirValue s0);

/* Whether `nb` and `oh` (a conv's image and output row) come from the
 * workgroup's x as the front half writes them: 0 and block_id x for one image;
 * for `batch` > 1 (its leading dimensions folded into one) x / `out_h` and
 * x % `out_h`. */
bool kiln_compiler_gpu_image_rows(MlirValue nb, MlirValue oh, int64_t batch, int64_t out_h);

/* A multiply-accumulate loop body: three loads, one arith.mulf, one arith.addf,
 * one store, an empty scf.yield, and up to `max_extra` ops named `extra` (the
 * index arithmetic or widenings between them); nothing else. */
typedef struct kiln_compiler_gpu_madd_s {
  MlirOperation loads[3];
  size_t n_extra;
  MlirOperation mul, add, store;
} kiln_compiler_gpu_madd_t;

/* Whether `body` is such a body, its ops in *out. */
bool kiln_compiler_gpu_read_madd(MlirBlock body, const char *extra, size_t max_extra,
                                 kiln_compiler_gpu_madd_t *out);

/* Whether `mb` computes acc = acc + x * y (either order of each) from loads `x`,
 * `y` and `acc`, and stores it where `acc` was read. */
bool kiln_compiler_gpu_madd_in_place(const kiln_compiler_gpu_madd_t *mb, MlirOperation x, MlirOperation y,
                                     MlirOperation acc);

/* `t` as MLIR prints it. Owned by the caller. */
char *kiln_compiler_gpu_type_text(MlirType t);

/* Replaces kernel `func` by the gpu.func in `text` (a gpu.module holding one,
 * with the same symbol) and erases the old kernel's launches from the host
 * functions (their argument types are the old ones; the host plan was read
 * before); the new kernel in *out_new when out_new is not NULL. `what` and `t`
 * name the kernel in errors: INTERNAL when the text does not parse, a kiln bug. */
KILN_MUST_USE kiln_status_t kiln_compiler_gpu_kernel_swap(MlirContext context, MlirModule module,
                                                          MlirOperation func, const char *text,
                                                          const char *what, const kiln_target_t *t,
                                                          MlirOperation *out_new);

#endif  // KILN_COMPILER_GPU_MATCH_H_
