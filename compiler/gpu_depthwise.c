/* Depthwise convolutions in 128-bit vectors on GPU targets (gpu_depthwise.h).
 *
 * The kernel, per invocation (tx, ty) of a workgroup (bx, by, bz), with CV = C/4
 * channel vectors, WT output pixels per strip and S the stride:
 *
 *   cv = bx * TX + tx                      a channel vector: neighbouring lanes
 *   strip = by * TY + ty                   read neighbouring 16 bytes
 *   if strip < OW / WT:
 *     n, oh = bz / OH, bz % OH;  ow_j = strip * WT + j      j < WT
 *     acc_j = out[n, oh, ow_j, cv]
 *     for kh, kw (unrolled):
 *       acc_j += in[n, oh*S + kh, ow_j*S + kw, cv] * filter[kh, kw, cv]
 *     out[n, oh, ow_j, cv] = acc_j
 *
 * Each input vector is loaded once per kh however many of the strip's taps
 * share it ((WT - 1) * S + KW columns of the row instead of WT * KW), and each
 * filter vector once per strip. Every output's sum runs over (kh, kw) in the
 * order of the kernel it replaces, from the value it held. The buffers become
 * memrefs of vector<4xf32> over the same bytes (SPIR-V's logical addressing
 * forbids pointer casts), which is what makes every access 128 bits.
 */
#include "compiler/gpu_depthwise.h"

#include <mlir-c/BuiltinAttributes.h>
#include <mlir-c/BuiltinTypes.h>
#include <stdio.h>
#include <string.h>

#include "base/alloc.h"
#include "base/buf.h"
#include "compiler/gpu_match.h"
#include "compiler/kernel_types.h"

#define MAX_GRID       65535
#define THREADS        128
#define MAX_STRIP      4
#define MIN_WORKGROUPS 64 /* issue 17's floor for a conv, raised to the chip's compute units */
#define MAX_TAPS       64 /* kh * kw unrolled: an 8x8 filter at most */

bool kiln_compiler_depthwise_match(MlirOperation func, const uint32_t grid[3], const uint32_t block[3],
                                   kiln_compiler_depthwise_t *out) {
  memset(out, 0, sizeof *out);
  MlirBlock entry = kiln_compiler_gpu_kernel_entry(func);
  if (mlirBlockIsNull(entry) || block[2] != 1) return false;
  /* Straight-line index code around the kh loop, or around a guard holding it
   * alone (where the tiles overhang the output). */
  static const char *const allowed[] = {"arith.constant", "gpu.block_id", "gpu.thread_id", "affine.apply",
                                        "arith.addi",     "arith.divui",  "arith.remui",   "arith.cmpi",
                                        "arith.andi",     "gpu.return"};
  enum { N_ALLOWED = sizeof allowed / sizeof allowed[0] };
  MlirOperation loop_h = {NULL}, guard = {NULL};
  for (MlirOperation op = mlirBlockGetFirstOperation(entry); !mlirOperationIsNull(op);
       op = mlirOperationGetNextInBlock(op)) {
    if (kiln_compiler_op_is(op, "scf.for") || kiln_compiler_op_is(op, "scf.if")) {
      if (!mlirOperationIsNull(loop_h) || !mlirOperationIsNull(guard)) return false;
      *(kiln_compiler_op_is(op, "scf.for") ? &loop_h : &guard) = op;
      continue;
    }
    if (!kiln_compiler_gpu_op_is_one_of(op, allowed, N_ALLOWED)) return false;
  }
  if (!mlirOperationIsNull(guard)) {
    if (mlirOperationGetNumResults(guard) != 0 ||
        !mlirBlockIsNull(mlirRegionGetFirstBlock(mlirOperationGetRegion(guard, 1)))) {
      return false;
    }
    /* Index code (a folded batch's image and row), the loop, the yield. */
    MlirOperation op = mlirBlockGetFirstOperation(mlirRegionGetFirstBlock(mlirOperationGetRegion(guard, 0)));
    for (; !mlirOperationIsNull(op) && !kiln_compiler_op_is(op, "scf.for");
         op = mlirOperationGetNextInBlock(op)) {
      if (!kiln_compiler_gpu_op_is_one_of(op, allowed, N_ALLOWED) || kiln_compiler_op_is(op, "gpu.return")) {
        return false;
      }
    }
    MlirOperation yield = mlirOperationIsNull(op) ? op : mlirOperationGetNextInBlock(op);
    if (mlirOperationIsNull(op) || !kiln_compiler_op_is(yield, "scf.yield") ||
        !mlirOperationIsNull(mlirOperationGetNextInBlock(yield))) {
      return false;
    }
    loop_h = op;
  }
  int64_t kh_n = 0, kw_n = 0;
  if (mlirOperationIsNull(loop_h) || !kiln_compiler_gpu_counted_loop(loop_h, &kh_n)) return false;
  MlirOperation loop_w = kiln_compiler_gpu_only_inner_loop(loop_h);
  if (mlirOperationIsNull(loop_w) || !kiln_compiler_gpu_counted_loop(loop_w, &kw_n) ||
      !mlirOperationIsNull(kiln_compiler_gpu_only_inner_loop(loop_w)) || kh_n * kw_n > MAX_TAPS) {
    return false;
  }
  MlirValue kh = mlirBlockGetArgument(mlirRegionGetFirstBlock(mlirOperationGetRegion(loop_h, 0)), 0);
  MlirBlock body = mlirRegionGetFirstBlock(mlirOperationGetRegion(loop_w, 0));
  MlirValue kw = mlirBlockGetArgument(body, 0);
  kiln_compiler_gpu_madd_t mb;
  if (!kiln_compiler_gpu_read_madd(body, "affine.apply", 2, &mb)) return false;
  /* in[n, ih, iw, c] (rank 4, not indexed by kh), filter[kh, kw, c, 0] (rank 4,
   * indexed by kh first), out[n, oh, ow, c, 0] (rank 5). */
  MlirOperation in = {NULL}, filter = {NULL}, acc = {NULL};
  for (int i = 0; i < 3; i++) {
    MlirOperation l = mb.loads[i];
    MlirValue memref = mlirOperationGetOperand(l, 0);
    if (!kiln_compiler_gpu_plain_memref(mlirValueGetType(memref)) ||
        kiln_compiler_gpu_arg_of(memref, entry) < 0 ||
        !mlirTypeIsAF32(mlirShapedTypeGetElementType(mlirValueGetType(memref)))) {
      return false;
    }
    intptr_t n = mlirOperationGetNumOperands(l);
    if (n == 6)
      acc = l;
    else if (n == 5 && mlirValueEqual(mlirOperationGetOperand(l, 1), kh))
      filter = l;
    else if (n == 5)
      in = l;
  }
  if (mlirOperationIsNull(in) || mlirOperationIsNull(filter) || mlirOperationIsNull(acc) ||
      !kiln_compiler_gpu_madd_in_place(&mb, in, filter, acc)) {
    return false;
  }
#define AT(load, i) mlirOperationGetOperand(load, (i) + 1)
  MlirValue nb = AT(acc, 0), oh = AT(acc, 1), ow = AT(acc, 2), c = AT(acc, 3);
  MlirType ti = mlirValueGetType(mlirOperationGetOperand(in, 0));
  MlirType tf = mlirValueGetType(mlirOperationGetOperand(filter, 0));
  MlirType to = mlirValueGetType(mlirOperationGetOperand(acc, 0));
  int64_t batch = mlirShapedTypeGetDimSize(to, 0), out_h = mlirShapedTypeGetDimSize(to, 1);
  int64_t out_w = mlirShapedTypeGetDimSize(to, 2), channels = mlirShapedTypeGetDimSize(to, 3);
  int64_t stride = kiln_compiler_gpu_sum_stride(AT(in, 1), kh, oh);
  /* Columns and channels: the front half's tile indices, or the thread's own
   * where one tile holds them all. */
  bool ow_tiled = kiln_compiler_gpu_is_tile_index(ow, 'y', 'y', block[1]);
  bool c_tiled = kiln_compiler_gpu_is_tile_index(c, 'x', 'z', block[0]);
  if (!kiln_compiler_gpu_image_rows(nb, oh, batch, out_h) ||
      !(ow_tiled || (grid[1] == 1 && kiln_compiler_gpu_is_id(ow, "gpu.thread_id", 'y'))) ||
      !(c_tiled || (grid[2] == 1 && kiln_compiler_gpu_is_id(c, "gpu.thread_id", 'x'))) ||
      !kiln_compiler_gpu_is_zero(AT(acc, 4)) || !mlirValueEqual(AT(in, 0), nb) || stride < 1 ||
      kiln_compiler_gpu_sum_stride(AT(in, 2), kw, ow) != stride || !mlirValueEqual(AT(in, 3), c) ||
      !mlirValueEqual(AT(filter, 1), kw) || !mlirValueEqual(AT(filter, 2), c) ||
      !kiln_compiler_gpu_is_zero(AT(filter, 3))) {
    return false;
  }
#undef AT
  int64_t in_h = mlirShapedTypeGetDimSize(ti, 1), in_w = mlirShapedTypeGetDimSize(ti, 2);
  if (mlirShapedTypeGetDimSize(to, 4) != 1 || mlirShapedTypeGetDimSize(ti, 0) != batch ||
      mlirShapedTypeGetDimSize(ti, 3) != channels || mlirShapedTypeGetDimSize(tf, 0) != kh_n ||
      mlirShapedTypeGetDimSize(tf, 1) != kw_n || mlirShapedTypeGetDimSize(tf, 2) != channels ||
      mlirShapedTypeGetDimSize(tf, 3) != 1 || in_h < (out_h - 1) * stride + kh_n ||
      in_w < (out_w - 1) * stride + kw_n || channels % 4) {
    return false;
  }
  /* The grid covers the output (rows on x, columns and channels tiled), and
   * where it overhangs a dimension the guard bounds it by the output's size,
   * and bounds nothing else. */
  MlirValue rows_v = batch == 1 ? oh : mlirOperationGetOperand(kiln_compiler_gpu_def_of(oh), 0);
  int64_t rows = batch * out_h, cols = (int64_t)grid[1] * block[1], chans = (int64_t)grid[2] * block[0];
  if ((int64_t)grid[0] != rows || cols < out_w || chans < channels || rows > MAX_GRID) return false;
  bool cols_bounded = false, chans_bounded = false;
  if (!mlirOperationIsNull(guard)) {
    MlirOperation leaves[KILN_COMPILER_GPU_MAX_LEAVES];
    size_t n_leaves = 0;
    if (!kiln_compiler_gpu_and_leaves(mlirOperationGetOperand(guard, 0), leaves, &n_leaves)) return false;
    for (size_t i = 0; i < n_leaves; i++) {
      int64_t bound = -1;
      if (kiln_compiler_gpu_is_below(leaves[i], rows_v, &bound) && bound == rows) continue; /* always true */
      if (kiln_compiler_gpu_is_below(leaves[i], ow, &bound) && bound == out_w)
        cols_bounded = true;
      else if (kiln_compiler_gpu_is_below(leaves[i], c, &bound) && bound == channels)
        chans_bounded = true;
      else
        return false;
    }
  }
  if ((cols > out_w && !cols_bounded) || (chans > channels && !chans_bounded)) return false;
  int ia = kiln_compiler_gpu_arg_of(mlirOperationGetOperand(in, 0), entry);
  int fa = kiln_compiler_gpu_arg_of(mlirOperationGetOperand(filter, 0), entry);
  int oa = kiln_compiler_gpu_arg_of(mlirOperationGetOperand(acc, 0), entry);
  if (oa == ia || oa == fa) return false;
  *out = (kiln_compiler_depthwise_t){.found = true,
                                     .batch = batch,
                                     .in_h = in_h,
                                     .in_w = in_w,
                                     .out_h = out_h,
                                     .out_w = out_w,
                                     .channels = channels,
                                     .kh = kh_n,
                                     .kw = kw_n,
                                     .stride = stride,
                                     .in_arg = (unsigned)ia,
                                     .filter_arg = (unsigned)fa,
                                     .out_arg = (unsigned)oa,
                                     .n_args = (unsigned)mlirBlockGetNumArguments(entry)};
  return true;
}

/* The kernel's shape: TX x TY invocations, WT pixels per strip, the grid. */
typedef struct shape_s {
  uint32_t tx, ty, wt;
  uint32_t grid[3];
} shape_t;

static shape_t shape_of(const kiln_compiler_depthwise_t *d, const kiln_target_t *t) {
  shape_t s = {0};
  uint64_t least = t->compute_units > MIN_WORKGROUPS ? t->compute_units : MIN_WORKGROUPS;
  int64_t vecs = d->channels / 4;
  s.tx = 16;
  while (vecs % s.tx) s.tx /= 2;
  /* The widest strip dividing the row that still leaves `least` workgroups,
   * else one pixel per invocation. */
  for (uint32_t wt = MAX_STRIP; wt >= 1; wt /= 2) {
    if (d->out_w % wt) continue;
    int64_t strips = d->out_w / wt;
    s.wt = wt, s.ty = 1;
    while (s.ty < THREADS / s.tx && s.ty < strips) s.ty *= 2;
    s.grid[0] = (uint32_t)(vecs / s.tx);
    s.grid[1] = (uint32_t)((strips + s.ty - 1) / s.ty);
    s.grid[2] = (uint32_t)(d->batch * d->out_h);
    if ((uint64_t)s.grid[0] * s.grid[1] * s.grid[2] >= least) break;
  }
  return s;
}

bool kiln_compiler_depthwise_fits(const kiln_compiler_depthwise_t *d, const kiln_target_t *t) {
  if (!d->found || t->kind == KILN_TARGET_KIND_CPU) return false;
  shape_t s = shape_of(d, t);
  const kiln_target_gpu_limits_t *lim = &t->limits;
  return s.grid[0] <= MAX_GRID && s.grid[1] <= MAX_GRID && lim->max_workgroup_invocations >= s.tx * s.ty &&
         lim->max_workgroup_size[0] >= s.tx && lim->max_workgroup_size[1] >= s.ty;
}

static void vec_type(kiln_buf_t *b, const int64_t *dims, size_t n) {
  kiln_buf_append_str(b, "memref<");
  for (size_t i = 0; i < n; i++) kiln_buf_appendf(b, "%lldx", (long long)dims[i]);
  kiln_buf_append_str(b, "vector<4xf32>>");
}

kiln_status_t kiln_compiler_depthwise_replace(MlirContext context, MlirModule module, MlirOperation func,
                                              const kiln_compiler_depthwise_t *d, const kiln_target_t *t,
                                              uint32_t out_grid[3], uint32_t out_block[3]) {
  bool spirv = t->kind == KILN_TARGET_KIND_VULKAN;
  const char *fm = spirv ? "" : " fastmath<contract>"; /* FMA on the LLVM backends */
  shape_t s = shape_of(d, t);
  int64_t vecs = d->channels / 4, strips = d->out_w / s.wt, stride = d->stride;
  kiln_buf_t ti, tf, to;
  kiln_buf_init(&ti), kiln_buf_init(&tf), kiln_buf_init(&to);
  vec_type(&ti, (int64_t[]){d->batch, d->in_h, d->in_w, vecs}, 4);
  vec_type(&tf, (int64_t[]){d->kh, d->kw, vecs}, 3);
  vec_type(&to, (int64_t[]){d->batch, d->out_h, d->out_w, vecs}, 4);
  const char **types = kiln_calloc(d->n_args, sizeof *types);
  types[d->in_arg] = ti.data, types[d->filter_arg] = tf.data, types[d->out_arg] = to.data;
  kiln_buf_t text;
  kiln_buf_init(&text);
  kiln_buf_t *b = &text;
  kiln_compiler_gpu_kernel_open(b, func, "kiln_depthwise", types, d->n_args);
  kiln_free(types);
  kiln_buf_appendf(b, " kernel attributes {known_block_size = array<i32: %u, %u, 1>", s.tx, s.ty);
  if (spirv) {
    kiln_buf_appendf(b, ", spirv.entry_point_abi = #spirv.entry_point_abi<workgroup_size = [%u, %u, 1]>",
                     s.tx, s.ty);
  }
  kiln_buf_appendf(b,
                   "} {\n  %%tx = gpu.thread_id x\n  %%ty = gpu.thread_id y\n  %%bx = gpu.block_id x\n"
                   "  %%by = gpu.block_id y\n  %%bz = gpu.block_id z\n"
                   "  %%ctx = arith.constant %u : index\n  %%cty = arith.constant %u : index\n"
                   "  %%cstrips = arith.constant %lld : index\n  %%coh = arith.constant %lld : index\n"
                   "  %%cwt = arith.constant %u : index\n  %%cs = arith.constant %lld : index\n"
                   "  %%bxt = arith.muli %%bx, %%ctx : index\n  %%cv = arith.addi %%bxt, %%tx : index\n"
                   "  %%byt = arith.muli %%by, %%cty : index\n  %%strip = arith.addi %%byt, %%ty : index\n"
                   "  %%inside = arith.cmpi ult, %%strip, %%cstrips : index\n  scf.if %%inside {\n"
                   "    %%n = arith.divui %%bz, %%coh : index\n    %%oh = arith.remui %%bz, %%coh : index\n"
                   "    %%owb = arith.muli %%strip, %%cwt : index\n"
                   "    %%ihb = arith.muli %%oh, %%cs : index\n    %%iwb = arith.muli %%owb, %%cs : index\n",
                   s.tx, s.ty, (long long)strips, (long long)d->out_h, s.wt, (long long)stride);
  /* Constants 0 .. the widest input offset a strip reads. */
  int64_t span = (int64_t)(s.wt - 1) * stride + d->kw;
  int64_t most = span > d->kh ? span : d->kh;
  for (int64_t v = 0; v < most || v < (int64_t)s.wt; v++) {
    kiln_buf_appendf(b, "    %%k%lld = arith.constant %lld : index\n", (long long)v, (long long)v);
  }
  for (uint32_t j = 0; j < s.wt; j++) {
    kiln_buf_appendf(b,
                     "    %%ow%u = arith.addi %%owb, %%k%u : index\n"
                     "    %%acc%u_0 = memref.load %%arg%u[%%n, %%oh, %%ow%u, %%cv] : %s\n",
                     j, j, j, d->out_arg, j, to.data);
  }
  /* The offsets d = j * S + kw a strip's taps read. */
  bool used[MAX_STRIP * 8 + MAX_TAPS] = {false};
  for (uint32_t j = 0; j < s.wt; j++) {
    for (int64_t w = 0; w < d->kw; w++) used[j * stride + w] = true;
  }
  int tap = 0;
  for (int64_t h = 0; h < d->kh; h++) {
    kiln_buf_appendf(b, "    %%ih%lld = arith.addi %%ihb, %%k%lld : index\n", (long long)h, (long long)h);
    for (int64_t o = 0; o < span; o++) {
      if (!used[o]) continue;
      kiln_buf_appendf(b,
                       "    %%iw%lld_%lld = arith.addi %%iwb, %%k%lld : index\n"
                       "    %%x%lld_%lld = memref.load %%arg%u[%%n, %%ih%lld, %%iw%lld_%lld, %%cv] : %s\n",
                       (long long)h, (long long)o, (long long)o, (long long)h, (long long)o, d->in_arg,
                       (long long)h, (long long)h, (long long)o, ti.data);
    }
    for (int64_t w = 0; w < d->kw; w++, tap++) {
      kiln_buf_appendf(b, "    %%f%lld_%lld = memref.load %%arg%u[%%k%lld, %%k%lld, %%cv] : %s\n",
                       (long long)h, (long long)w, d->filter_arg, (long long)h, (long long)w, tf.data);
      for (uint32_t j = 0; j < s.wt; j++) {
        long long o = (long long)(j * stride + w);
        kiln_buf_appendf(b,
                         "    %%p%u_%d = arith.mulf %%x%lld_%lld, %%f%lld_%lld%s : vector<4xf32>\n"
                         "    %%acc%u_%d = arith.addf %%acc%u_%d, %%p%u_%d%s : vector<4xf32>\n",
                         j, tap, (long long)h, o, (long long)h, (long long)w, fm, j, tap + 1, j, tap, j, tap,
                         fm);
      }
    }
  }
  for (uint32_t j = 0; j < s.wt; j++) {
    kiln_buf_appendf(b, "    memref.store %%acc%u_%d, %%arg%u[%%n, %%oh, %%ow%u, %%cv] : %s\n", j, tap,
                     d->out_arg, j, to.data);
  }
  kiln_buf_append_str(b, "  }\n  gpu.return\n}\n}\n");
  kiln_status_t st =
      kiln_compiler_gpu_kernel_swap(context, module, func, text.data, "depthwise conv", t, NULL);
  kiln_buf_deinit(&text);
  kiln_buf_deinit(&ti), kiln_buf_deinit(&tf), kiln_buf_deinit(&to);
  memcpy(out_grid, s.grid, sizeof s.grid);
  out_block[0] = s.tx, out_block[1] = s.ty, out_block[2] = 1;
  return st;
}
