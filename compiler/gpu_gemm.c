/* Tiled matrix-multiply kernels for GPU targets (gpu_gemm.h).
 *
 * The tiled kernel, per workgroup (TILE_N/4 x TILE_M/4 = 16 x 16 invocations
 * (tx, ty)) and output tile (block y: rows, block x: columns, block z: batch):
 *
 *   acc[i] = C[b, m0 + 4ty + i, n0/4 + tx]          i = 0..3, each a vector<4>
 *   for kt in 0..K/TILE_K:
 *     As[t/4][t%4] = A[b, m0 + t/4, 4kt + t%4]      t = 16ty + tx: the 64 x 16
 *     Bs[ty][tx]   = B[b, 16kt + ty, n0/4 + tx]       slices, one 128-bit load
 *     barrier                                         each per invocation
 *     for kk in 0..TILE_K (unrolled):
 *       acc[i] += broadcast(As[4ty + i][kk/4][kk%4]) * Bs[kk][tx]
 *     barrier
 *   C[b, m0 + 4ty + i, n0/4 + tx] = acc[i]
 *
 * Each output's sum runs over k in increasing order from C's value, as the
 * kernel it replaces did. Workgroup memory is 2 x 4 KiB. Vector elements make
 * every load of A, B and C one 128-bit access (64-bit for f16 operands, widened
 * as they are staged) on every backend: SPIR-V declares the buffers as arrays
 * of vectors, so no pointer casts, which logical addressing forbids.
 */
#include "compiler/gpu_gemm.h"

#include <mlir-c/AffineMap.h>
#include <mlir-c/BuiltinAttributes.h>
#include <mlir-c/BuiltinTypes.h>
#include <stdio.h>
#include <string.h>

#include "base/alloc.h"
#include "base/buf.h"
#include "compiler/internal.h"
#include "compiler/gpu_match.h"
#include "compiler/kernel_types.h"

#define MAX_GRID 65535
/* The SIMT kernel's tile: tm x tn outputs per workgroup of (tn / 4gn) x (tm / 4gm)
 * invocations, each holding gm x gn blocks of 4x4 accumulators (rows ty*4 + i of
 * each of the gm row bands, column vectors tx of each of the gn column bands, so
 * neighbouring invocations touch neighbouring vectors). Large: 128x128, 8x8 per
 * invocation (4 workgroup-memory vector loads per 64 multiply-adds), where the
 * grid still has least_workgroups(); else 64x64, 4x4 each; else 32 rows
 * (a 56x56 conv's 3136 rows x 64 filters: 49 workgroups -> 98), or where 64 does
 * not divide M. */
#define SIMT_TILE_M_MIN (KILN_GEMM_TILE_M / 2)
#define MIN_WORKGROUPS  64

typedef struct simt_tile_s {
  int64_t tm, tn;
  int gm, gn;
} simt_tile_t;

/* The workgroups a kernel for `t` should keep busy: MIN_WORKGROUPS, or the
 * chip's compute units where it has more (gemm_text's override first). */
static int64_t least_workgroups(const kiln_compiler_gemm_t *g, const kiln_target_t *t) {
  if (g->min_workgroups > 0) return g->min_workgroups;
  return t->compute_units > MIN_WORKGROUPS ? (int64_t)t->compute_units : MIN_WORKGROUPS;
}

static simt_tile_t simt_tile(const kiln_compiler_gemm_t *g, const kiln_target_t *t) {
  int64_t least = least_workgroups(g, t);
  int64_t large = g->m % 128 == 0 && g->n % 128 == 0 ? (g->m / 128) * (g->n / 128) * g->batch : 0;
  if (large >= least) return (simt_tile_t){128, 128, 2, 2};
  int64_t full =
      g->m % KILN_GEMM_TILE_M ? 0 : (g->m / KILN_GEMM_TILE_M) * (g->n / KILN_GEMM_TILE_N) * g->batch;
  if (full >= least) return (simt_tile_t){KILN_GEMM_TILE_M, KILN_GEMM_TILE_N, 1, 1};
  return (simt_tile_t){SIMT_TILE_M_MIN, KILN_GEMM_TILE_N, 1, 1};
}

static uint32_t simt_threads_x(simt_tile_t s) { return (uint32_t)(s.tn / (4 * s.gn)); }
static uint32_t simt_threads_y(simt_tile_t s) { return (uint32_t)(s.tm / (4 * s.gm)); }

/* ---- matching ---- */

typedef struct load_s {
  MlirOperation op;
  int arg;
  int iv_at; /* the index position that is the loop's induction variable, -1 if none */
} load_t;

static bool read_load(MlirOperation op, MlirBlock entry, MlirValue iv, load_t *out) {
  out->op = op;
  out->arg = kiln_compiler_gpu_arg_of(mlirOperationGetOperand(op, 0), entry);
  out->iv_at = -1;
  if (out->arg < 0) return false;
  for (intptr_t i = 1; i < mlirOperationGetNumOperands(op); i++) {
    if (!mlirValueEqual(mlirOperationGetOperand(op, i), iv)) continue;
    if (out->iv_at >= 0) return false;
    out->iv_at = (int)i - 1;
  }
  return true;
}

static bool same_index(MlirOperation a, int ia, MlirOperation b, int ib) {
  return mlirValueEqual(mlirOperationGetOperand(a, ia + 1), mlirOperationGetOperand(b, ib + 1));
}

/* The operand of a multiply: the load itself (f32) or its widening (f16). */
static bool operand_is(MlirValue v, const load_t *load, unsigned bits) {
  MlirOperation d = kiln_compiler_gpu_def_of(v);
  if (mlirOperationIsNull(d)) return false;
  if (bits < 32) {
    if (!kiln_compiler_op_is(d, "arith.extf")) return false;
    d = kiln_compiler_gpu_def_of(mlirOperationGetOperand(d, 0));
    if (mlirOperationIsNull(d)) return false;
  }
  return mlirOperationEqual(d, load->op);
}

static MlirValue index_of(MlirOperation load, int i) { return mlirOperationGetOperand(load, i + 1); }

/* The convolution form (gpu_gemm.h): loops kh, kw, c around
 *   out[0,oh,ow,f] += in[0, oh+kh, ow+kw, c] * filter[kh,kw,c,f]
 * with oh the workgroup's x, ow and f the front half's tile indices. */
static bool match_conv(MlirBlock entry, MlirOperation loop_h, int64_t kh_n, const uint32_t grid[3],
                       const uint32_t block[3], kiln_compiler_gemm_t *out) {
  /* A 1x1 filter's kh and kw loops are gone (single iterations, canonicalized
   * away): one loop over c, the filter read at [0, 0, c, f], the input at
   * [0, oh, ow, c]. */
  bool taps = !mlirOperationIsNull(kiln_compiler_gpu_only_inner_loop(loop_h));
  int64_t kw_n = 1, c_n = kh_n;
  MlirOperation loop_w = taps ? kiln_compiler_gpu_only_inner_loop(loop_h) : loop_h;
  MlirOperation loop_c = taps ? kiln_compiler_gpu_only_inner_loop(loop_w) : loop_h;
  if (!taps) kh_n = 1;
  if (mlirOperationIsNull(loop_c) || (taps && (!kiln_compiler_gpu_counted_loop(loop_w, &kw_n) ||
                                               !kiln_compiler_gpu_counted_loop(loop_c, &c_n)))) {
    return false;
  }
  MlirValue kh = mlirBlockGetArgument(mlirRegionGetFirstBlock(mlirOperationGetRegion(loop_h, 0)), 0);
  MlirValue kw = mlirBlockGetArgument(mlirRegionGetFirstBlock(mlirOperationGetRegion(loop_w, 0)), 0);
  MlirBlock body = mlirRegionGetFirstBlock(mlirOperationGetRegion(loop_c, 0));
  MlirValue c = mlirBlockGetArgument(body, 0);
  kiln_compiler_gpu_madd_t mb;
  if (!kiln_compiler_gpu_read_madd(body, "affine.apply", 2, &mb)) return false;
  MlirOperation *loads = mb.loads;
  /* in[0, oh+kh, ow+kw, c], filter[kh, kw, c, f], out[0, oh, ow, f]: told apart by
   * their last index. */
  MlirOperation in = {NULL}, filter = {NULL}, acc = {NULL};
  for (int i = 0; i < 3; i++) {
    if (mlirOperationGetNumOperands(loads[i]) != 5 ||
        !kiln_compiler_gpu_plain_memref(mlirValueGetType(mlirOperationGetOperand(loads[i], 0))) ||
        kiln_compiler_gpu_arg_of(mlirOperationGetOperand(loads[i], 0), entry) < 0) {
      return false;
    }
    if (mlirValueEqual(index_of(loads[i], 3), c))
      in = loads[i];
    else if (mlirValueEqual(index_of(loads[i], 2), c))
      filter = loads[i];
    else
      acc = loads[i];
  }
  if (mlirOperationIsNull(in) || mlirOperationIsNull(filter) || mlirOperationIsNull(acc)) return false;
  MlirValue nb = index_of(acc, 0), oh = index_of(acc, 1), ow = index_of(acc, 2), f = index_of(acc, 3);
  int64_t stride = taps ? kiln_compiler_gpu_sum_stride(index_of(in, 1), kh, oh) : 1;
  bool in_at = taps ? stride > 0 && kiln_compiler_gpu_sum_stride(index_of(in, 2), kw, ow) == stride
                    : mlirValueEqual(index_of(in, 1), oh) && mlirValueEqual(index_of(in, 2), ow);
  bool filter_at =
      taps ? mlirValueEqual(index_of(filter, 0), kh) && mlirValueEqual(index_of(filter, 1), kw)
           : kiln_compiler_gpu_is_zero(index_of(filter, 0)) && kiln_compiler_gpu_is_zero(index_of(filter, 1));
  MlirType to = mlirValueGetType(mlirOperationGetOperand(acc, 0));
  if (!mlirShapedTypeHasStaticShape(to) || mlirShapedTypeGetRank(to) != 4) return false;
  int64_t batch = mlirShapedTypeGetDimSize(to, 0), out_h = mlirShapedTypeGetDimSize(to, 1);
  if (!kiln_compiler_gpu_image_rows(nb, oh, batch, out_h) || !mlirValueEqual(index_of(in, 0), nb) ||
      !kiln_compiler_gpu_is_tile_index(ow, 'y', 'y', block[1]) ||
      !kiln_compiler_gpu_is_tile_index(f, 'x', 'z', block[0]) || !in_at || !filter_at ||
      !mlirValueEqual(index_of(filter, 3), f)) {
    return false;
  }
  if (!kiln_compiler_gpu_madd_in_place(&mb, in, filter, acc)) return false;
  MlirType ti = mlirValueGetType(mlirOperationGetOperand(in, 0));
  MlirType tf = mlirValueGetType(mlirOperationGetOperand(filter, 0));
  if (!mlirTypeIsAF32(mlirShapedTypeGetElementType(ti)) ||
      !mlirTypeIsAF32(mlirShapedTypeGetElementType(tf)) ||
      !mlirTypeIsAF32(mlirShapedTypeGetElementType(to))) {
    return false;
  }
  int64_t out_w = mlirShapedTypeGetDimSize(to, 2);
  int64_t n = mlirShapedTypeGetDimSize(to, 3);
  int64_t in_h = mlirShapedTypeGetDimSize(ti, 1), in_w = mlirShapedTypeGetDimSize(ti, 2);
  if (mlirShapedTypeGetDimSize(ti, 0) != batch || mlirShapedTypeGetDimSize(ti, 3) != c_n ||
      mlirShapedTypeGetDimSize(tf, 0) != kh_n || mlirShapedTypeGetDimSize(tf, 1) != kw_n ||
      mlirShapedTypeGetDimSize(tf, 2) != c_n || mlirShapedTypeGetDimSize(tf, 3) != n ||
      in_h < (out_h - 1) * stride + kh_n || in_w < (out_w - 1) * stride + kw_n) {
    return false;
  }
  if ((int64_t)grid[0] != batch * out_h || (int64_t)grid[1] * block[1] != out_w ||
      (int64_t)grid[2] * block[0] != n) {
    return false;
  }
  int64_t m = batch * out_h * out_w, k = kh_n * kw_n * c_n;
  int a = kiln_compiler_gpu_arg_of(mlirOperationGetOperand(in, 0), entry),
      b = kiln_compiler_gpu_arg_of(mlirOperationGetOperand(filter, 0), entry);
  int co = kiln_compiler_gpu_arg_of(mlirOperationGetOperand(acc, 0), entry);
  if (co == a || co == b || c_n % 4 || m % SIMT_TILE_M_MIN || n % KILN_GEMM_TILE_N || k % KILN_GEMM_TILE_K ||
      m / SIMT_TILE_M_MIN > MAX_GRID || n / KILN_GEMM_TILE_N > MAX_GRID) {
    return false;
  }
  *out = (kiln_compiler_gemm_t){.found = true,
                                .rank = 2,
                                .batch = 1,
                                .m = m,
                                .n = n,
                                .k = k,
                                .a_arg = (unsigned)a,
                                .b_arg = (unsigned)b,
                                .c_arg = (unsigned)co,
                                .n_args = (unsigned)mlirBlockGetNumArguments(entry),
                                .operand_bits = 32,
                                .conv_h = kh_n,
                                .conv_w = kw_n,
                                .conv_c = c_n,
                                .in_h = in_h,
                                .in_w = in_w,
                                .out_h = out_h,
                                .out_w = out_w,
                                .conv_stride = stride};
  return true;
}

bool kiln_compiler_gemm_match(MlirOperation func, const uint32_t grid[3], const uint32_t block[3],
                              kiln_compiler_gemm_t *out) {
  memset(out, 0, sizeof *out);
  MlirBlock entry = kiln_compiler_gpu_kernel_entry(func);
  if (mlirBlockIsNull(entry) || block[2] != 1) return false;
  /* Straight-line index code around one loop. */
  static const char *const allowed[] = {"arith.constant", "gpu.block_id", "gpu.thread_id", "gpu.block_dim",
                                        "gpu.grid_dim",   "affine.apply", "arith.addi",    "arith.divui",
                                        "arith.remui",    "gpu.return"};
  MlirOperation loop = {NULL};
  for (MlirOperation op = mlirBlockGetFirstOperation(entry); !mlirOperationIsNull(op);
       op = mlirOperationGetNextInBlock(op)) {
    if (kiln_compiler_op_is(op, "scf.for")) {
      if (!mlirOperationIsNull(loop)) return false;
      loop = op;
      continue;
    }
    if (!kiln_compiler_gpu_op_is_one_of(op, allowed, sizeof allowed / sizeof allowed[0])) return false;
  }
  int64_t ub = 0;
  if (mlirOperationIsNull(loop) || !kiln_compiler_gpu_counted_loop(loop, &ub)) return false;
  MlirBlock body = mlirRegionGetFirstBlock(mlirOperationGetRegion(loop, 0));
  /* Convolutions: a loop nest, or (1x1) loads of rank 4. */
  MlirOperation first = mlirBlockGetFirstOperation(body);
  if (kiln_compiler_op_is(first, "scf.for") ||
      (kiln_compiler_op_is(first, "memref.load") && mlirOperationGetNumOperands(first) == 5)) {
    return match_conv(entry, loop, ub, grid, block, out);
  }
  MlirValue iv = mlirBlockGetArgument(body, 0);
  kiln_compiler_gpu_madd_t mb;
  if (!kiln_compiler_gpu_read_madd(body, "arith.extf", 2, &mb)) return false;
  load_t loads[3];
  for (int i = 0; i < 3; i++) {
    if (!read_load(mb.loads[i], entry, iv, &loads[i])) return false;
  }
  size_t n_ext = mb.n_extra;
  MlirOperation mul = mb.mul, add = mb.add, store = mb.store;
  /* A reads k last, B second to last, C not at all. */
  const load_t *a = NULL, *b = NULL, *c = NULL;
  MlirType ta = {NULL};
  int rank = 0;
  for (size_t i = 0; i < 3; i++) {
    MlirType t = mlirValueGetType(mlirOperationGetOperand(loads[i].op, 0));
    if (!kiln_compiler_gpu_plain_memref(t)) return false;
    int r = (int)mlirShapedTypeGetRank(t);
    if (i == 0) rank = r;
    if (r != rank || (r != 2 && r != 3)) return false;
    if (loads[i].iv_at == r - 1 && !a) {
      a = &loads[i];
      ta = t;
    } else if (loads[i].iv_at == r - 2 && !b) {
      b = &loads[i];
    } else if (loads[i].iv_at < 0 && !c) {
      c = &loads[i];
    } else {
      return false;
    }
  }
  if (!a || !b || !c || c->arg == a->arg || c->arg == b->arg) return false;
  MlirType tb = mlirValueGetType(mlirOperationGetOperand(b->op, 0));
  MlirType tc = mlirValueGetType(mlirOperationGetOperand(c->op, 0));
  MlirType ea = mlirShapedTypeGetElementType(ta), eb = mlirShapedTypeGetElementType(tb);
  if (!mlirTypeIsAF32(mlirShapedTypeGetElementType(tc)) || !mlirTypeEqual(ea, eb)) return false;
  kiln_gemm_f8_t f8 = mlirTypeIsAFloat8E4M3FN(ea) ? KILN_GEMM_F8_E4M3FN
                      : mlirTypeIsAFloat8E5M2(ea) ? KILN_GEMM_F8_E5M2
                                                  : KILN_GEMM_F8_NONE;
  unsigned bits = mlirTypeIsAF32(ea) ? 32 : mlirTypeIsAF16(ea) || mlirTypeIsABF16(ea) ? 16 : f8 ? 8 : 0;
  if (!bits || n_ext != (bits < 32 ? 2u : 0u)) return false;
  /* c = c + a * b, stored where it was read. */
  MlirValue m0 = mlirOperationGetOperand(mul, 0), m1 = mlirOperationGetOperand(mul, 1);
  if (!((operand_is(m0, a, bits) && operand_is(m1, b, bits)) ||
        (operand_is(m0, b, bits) && operand_is(m1, a, bits)))) {
    return false;
  }
  MlirValue s0 = mlirOperationGetOperand(add, 0), s1 = mlirOperationGetOperand(add, 1);
  MlirValue product = mlirOperationGetResult(mul, 0), old = mlirOperationGetResult(c->op, 0);
  if (!((mlirValueEqual(s0, old) && mlirValueEqual(s1, product)) ||
        (mlirValueEqual(s0, product) && mlirValueEqual(s1, old)))) {
    return false;
  }
  if (mlirOperationGetNumOperands(store) != (intptr_t)rank + 2 ||
      !mlirValueEqual(mlirOperationGetOperand(store, 0), mlirOperationGetResult(add, 0)) ||
      kiln_compiler_gpu_arg_of(mlirOperationGetOperand(store, 1), entry) != c->arg) {
    return false;
  }
  for (int d = 0; d < rank; d++) {
    if (!mlirValueEqual(mlirOperationGetOperand(store, d + 2), mlirOperationGetOperand(c->op, d + 1)))
      return false;
  }
  /* Shapes [batch,] M x K, K x N, M x N. */
  int o = rank - 2;
  int64_t m = mlirShapedTypeGetDimSize(tc, o), n = mlirShapedTypeGetDimSize(tc, o + 1);
  int64_t k = mlirShapedTypeGetDimSize(ta, o + 1);
  int64_t batch = rank == 3 ? mlirShapedTypeGetDimSize(tc, 0) : 1;
  if (mlirShapedTypeGetDimSize(ta, o) != m || mlirShapedTypeGetDimSize(tb, o) != k ||
      mlirShapedTypeGetDimSize(tb, o + 1) != n || k != ub) {
    return false;
  }
  if (rank == 3 && (mlirShapedTypeGetDimSize(ta, 0) != batch || mlirShapedTypeGetDimSize(tb, 0) != batch))
    return false;
  /* Indices: the row i and column j of the front half's tile, the batch the
   * workgroup's x (or 0), and a grid that is exactly the output. */
  MlirValue i = mlirOperationGetOperand(c->op, o + 1), j = mlirOperationGetOperand(c->op, o + 2);
  if (!same_index(a->op, o, c->op, o) || !same_index(b->op, o + 1, c->op, o + 1) ||
      !kiln_compiler_gpu_is_tile_index(i, 'y', 'y', block[1]) ||
      !kiln_compiler_gpu_is_tile_index(j, 'x', 'z', block[0])) {
    return false;
  }
  if (rank == 3) {
    MlirValue bi = mlirOperationGetOperand(c->op, 1);
    int64_t zero = -1;
    bool batch_ok = kiln_compiler_gpu_is_id(bi, "gpu.block_id", 'x') ||
                    (batch == 1 && kiln_compiler_int_constant_value(bi, &zero) && zero == 0);
    if (!batch_ok || !same_index(a->op, 0, c->op, 0) || !same_index(b->op, 0, c->op, 0)) return false;
  }
  if ((int64_t)grid[0] != batch || (int64_t)grid[1] * block[1] != m || (int64_t)grid[2] * block[0] != n)
    return false;
  /* The tiled kernel's own constraints. */
  if (m % SIMT_TILE_M_MIN || n % KILN_GEMM_TILE_N || k % KILN_GEMM_TILE_K || batch > MAX_GRID ||
      m / SIMT_TILE_M_MIN > MAX_GRID || n / KILN_GEMM_TILE_N > MAX_GRID) {
    return false;
  }
  *out = (kiln_compiler_gemm_t){.found = true,
                                .rank = rank,
                                .batch = batch,
                                .m = m,
                                .n = n,
                                .k = k,
                                .a_arg = (unsigned)a->arg,
                                .b_arg = (unsigned)b->arg,
                                .c_arg = (unsigned)c->arg,
                                .n_args = (unsigned)mlirBlockGetNumArguments(entry),
                                .operand_bits = bits,
                                .bf16 = mlirTypeIsABF16(ea),
                                .f8 = f8};
  return true;
}

/* ---- the tiled kernel's text ---- */

typedef struct emit_s {
  kiln_buf_t *b;
  int64_t consts[32];
  size_t n_consts;
} emit_t;

/* %cN, defined once. */
static void need_const(emit_t *e, int64_t v) {
  for (size_t i = 0; i < e->n_consts; i++) {
    if (e->consts[i] == v) return;
  }
  if (e->n_consts < sizeof e->consts / sizeof e->consts[0]) e->consts[e->n_consts++] = v;
  kiln_buf_appendf(e->b, "  %%c%lld = arith.constant %lld : index\n", (long long)v, (long long)v);
}

/* memref<[batch x] rows x cols/lanes x vector<lanes x T>> */
static void vec_memref(kiln_buf_t *b, const kiln_compiler_gemm_t *g, int64_t rows, int64_t cols, int lanes,
                       const char *elem) {
  kiln_buf_append_str(b, "memref<");
  if (g->rank == 3) kiln_buf_appendf(b, "%lldx", (long long)g->batch);
  kiln_buf_appendf(b, "%lldx%lldxvector<%dx%s>>", (long long)rows, (long long)(cols / lanes), lanes, elem);
}

/* The SIMT kernel's A or B: rows x cols operands in vectors of 4, as
 * vector<4xf32>, vector<4xf16>, or their bits: bf16 as vector<2xi32>, f8 as
 * i32 (no 8- or 16-bit type reaches the backend, so every SPIR-V profile
 * takes them). */
static void operand_memref(kiln_buf_t *b, const kiln_compiler_gemm_t *g, int64_t rows, int64_t cols) {
  if (g->f8) {
    kiln_buf_append_str(b, "memref<");
    if (g->rank == 3) kiln_buf_appendf(b, "%lldx", (long long)g->batch);
    kiln_buf_appendf(b, "%lldx%lldxi32>", (long long)rows, (long long)(cols / 4));
    return;
  }
  if (!g->bf16) {
    vec_memref(b, g, rows, cols, 4, g->operand_bits == 16 ? "f16" : "f32");
    return;
  }
  kiln_buf_append_str(b, "memref<");
  if (g->rank == 3) kiln_buf_appendf(b, "%lldx", (long long)g->batch);
  kiln_buf_appendf(b, "%lldx%lldxvector<2xi32>>", (long long)rows, (long long)(cols / 4));
}

/* %dst = the vector<4xf32> of the four operands loaded as %src (operand_memref).
 * bf16 widens exactly by moving its bits to the top of an f32: element 2i of
 * word i is its low half, element 2i + 1 its high half (%bf_sh = dense<16>,
 * %bf_hi = dense<0xffff0000> : vector<2xi32>). */
/* f8's widening: the constants (at the kernel's top) and the steps. Byte j of
 * the word is element j. With mag the byte's low 7 bits, an f8 of m mantissa
 * bits and bias B is, exactly,
 *   normal:    the f32 bits (mag << (23 - m)) + ((127 - B) << 23)
 *   subnormal: (mag < 2^m) mag * 2^(1 - B - m), a normal f32
 *   E4M3FN:    mag = 0x7f is NaN (no infinity)
 *   E5M2:      mag >= 0x7c is infinity or NaN: the normal bits rebiased to 255
 * and the sign is bit 7 moved to bit 31. */
static void f8_constants(kiln_buf_t *b, kiln_gemm_f8_t f8) {
  bool e4 = f8 == KILN_GEMM_F8_E4M3FN;
  kiln_buf_appendf(b,
                   "  %%f8_lane = arith.constant dense<[0, 8, 16, 24]> : vector<4xi32>\n"
                   "  %%f8_mag = arith.constant dense<127> : vector<4xi32>\n"
                   "  %%f8_sgn = arith.constant dense<128> : vector<4xi32>\n"
                   "  %%f8_24 = arith.constant dense<24> : vector<4xi32>\n"
                   "  %%f8_sh = arith.constant dense<%d> : vector<4xi32>\n"
                   "  %%f8_bias = arith.constant dense<%d> : vector<4xi32>\n"
                   "  %%f8_min = arith.constant dense<%d> : vector<4xi32>\n"
                   "  %%f8_sub = arith.constant dense<%s> : vector<4xf32>\n"
                   "  %%f8_top = arith.constant dense<%d> : vector<4xi32>\n"
                   "  %%f8_special = arith.constant dense<%d> : vector<4xi32>\n",
                   e4 ? 20 : 21, (e4 ? 120 : 112) << 23, e4 ? 8 : 4, e4 ? "0.001953125" : "1.52587890625e-05",
                   e4 ? 0x7f : 0x7c, e4 ? 0x7fc00000 : 224 << 23);
}

static void widen_f8(kiln_buf_t *b, kiln_gemm_f8_t f8, const char *dst, const char *src) {
  const char *v = "vector<4xi32>";
  kiln_buf_appendf(b,
                   "    %sw = vector.broadcast %s : i32 to %s\n    %sb = arith.shrui %sw, %%f8_lane : %s\n"
                   "    %sm = arith.andi %sb, %%f8_mag : %s\n    %ss0 = arith.andi %sb, %%f8_sgn : %s\n"
                   "    %ss = arith.shli %ss0, %%f8_24 : %s\n    %sn0 = arith.shli %sm, %%f8_sh : %s\n"
                   "    %sn = arith.addi %sn0, %%f8_bias : %s\n"
                   "    %suf = arith.uitofp %sm : %s to vector<4xf32>\n    %suv = arith.mulf %suf, %%f8_sub "
                   ": vector<4xf32>\n"
                   "    %sub = arith.bitcast %suv : vector<4xf32> to %s\n"
                   "    %slo = arith.cmpi ult, %sm, %%f8_min : %s\n    %sv0 = arith.select %slo, %sub, %sn : "
                   "vector<4xi1>, %s\n",
                   src, src, v, src, src, v, src, src, v, src, src, v, src, src, v, src, src, v, src, src, v,
                   src, src, v, src, src, src, src, v, src, src, v, src, src, src, src, v);
  if (f8 == KILN_GEMM_F8_E4M3FN) {
    kiln_buf_appendf(b,
                     "    %shi = arith.cmpi eq, %sm, %%f8_top : %s\n"
                     "    %sv1 = arith.select %shi, %%f8_special, %sv0 : vector<4xi1>, %s\n",
                     src, src, v, src, src, src, v);
  } else {
    kiln_buf_appendf(
        b,
        "    %shi = arith.cmpi uge, %sm, %%f8_top : %s\n    %sin = arith.addi %sn0, %%f8_special : %s\n"
        "    %sv1 = arith.select %shi, %sin, %sv0 : vector<4xi1>, %s\n",
        src, src, v, src, src, v, src, src, src, src, v);
  }
  kiln_buf_appendf(b,
                   "    %sv = arith.ori %sv1, %ss : %s\n    %s = arith.bitcast %sv : %s to vector<4xf32>\n",
                   src, src, src, v, dst, src, v);
}

static void widen_operands(kiln_buf_t *b, const kiln_compiler_gemm_t *g, const char *dst, const char *src) {
  if (g->operand_bits == 32) return;
  if (g->f8) {
    widen_f8(b, g->f8, dst, src);
    return;
  }
  if (!g->bf16) {
    kiln_buf_appendf(b, "    %s = arith.extf %s : vector<4xf16> to vector<4xf32>\n", dst, src);
    return;
  }
  kiln_buf_appendf(
      b,
      "    %sl = arith.shli %s, %%bf_sh : vector<2xi32>\n    %sh = arith.andi %s, %%bf_hi : vector<2xi32>\n"
      "    %slf = arith.bitcast %sl : vector<2xi32> to vector<2xf32>\n"
      "    %shf = arith.bitcast %sh : vector<2xi32> to vector<2xf32>\n"
      "    %s = vector.shuffle %slf, %shf [0, 2, 1, 3] : vector<2xf32>, vector<2xf32>\n",
      src, src, src, src, src, src, src, src, dst, src, src);
}

/* Indices [%bz,] row, col. */
static void at(kiln_buf_t *b, const kiln_compiler_gemm_t *g, const char *row, const char *col) {
  kiln_buf_appendf(b, "[%s%s, %s]", g->rank == 3 ? "%bz, " : "", row, col);
}

/* The old kernel's name and the types of the arguments the tiled kernel keeps
 * as they were (NULL for A, B and C). */
typedef struct kernel_sig_s {
  char *name;
  char **types;
  const kiln_compiler_gemm_extra_t *extra; /* arguments after the kernel's own, or NULL */
} kernel_sig_t;

static void sig_of(MlirOperation func, const kiln_compiler_gemm_t *g, kernel_sig_t *out) {
  MlirBlock entry = mlirRegionGetFirstBlock(mlirOperationGetRegion(func, 0));
  MlirStringRef name = mlirStringAttrGetValue(
      mlirOperationGetAttributeByName(func, mlirStringRefCreateFromCString("sym_name")));
  out->name = kiln_strndup(name.data, name.length);
  out->types = kiln_calloc(g->n_args ? g->n_args : 1, sizeof *out->types);
  for (unsigned i = 0; i < g->n_args; i++) {
    if (i != g->a_arg && i != g->b_arg && i != g->c_arg) {
      out->types[i] = kiln_compiler_gpu_type_text(mlirValueGetType(mlirBlockGetArgument(entry, i)));
    }
  }
}

static void sig_deinit(const kiln_compiler_gemm_t *g, kernel_sig_t *sig) {
  for (unsigned i = 0; i < g->n_args; i++) kiln_free(sig->types[i]);
  kiln_free(sig->types);
  kiln_free(sig->name);
}

/* "gpu.module @kiln_gemm {\ngpu.func @NAME(args)", A, B and C with the types given,
 * then the extra arguments (one typed NULL as C). */
static void signature(kiln_buf_t *b, const kernel_sig_t *sig, const kiln_compiler_gemm_t *g, const char *ta,
                      const char *tb, const char *tc) {
  unsigned n_extra = sig->extra ? sig->extra->n : 0, n = g->n_args + n_extra;
  const char **types = kiln_calloc(n ? n : 1, sizeof *types);
  for (unsigned i = 0; i < g->n_args; i++) {
    types[i] = i == g->a_arg ? ta : i == g->b_arg ? tb : i == g->c_arg ? tc : sig->types[i];
  }
  /* C's type with another element: its last "f32" (memref<..xvector<4xf32>>,
   * memref<..xf32>) replaced. */
  char *c_like = NULL;
  const char *elem = sig->extra ? sig->extra->c_like_elem : NULL;
  const char *f32 = NULL;
  for (const char *p = strstr(tc, "f32"); p; p = strstr(p + 1, "f32")) f32 = p;
  if (elem && f32) {
    c_like = kiln_buf_sprintf("%.*s%s%s", (int)(f32 - tc), tc, elem, f32 + 3);
  }
  for (unsigned i = 0; i < n_extra; i++) {
    types[g->n_args + i] = sig->extra->types[i] ? sig->extra->types[i] : c_like ? c_like : tc;
  }
  kiln_compiler_gpu_kernel_open_named(b, "kiln_gemm", sig->name, strlen(sig->name), types, n);
  kiln_free(c_like);
  kiln_free(types);
}

static char *kernel_text(const kernel_sig_t *sig, const kiln_compiler_gemm_t *g, const kiln_target_t *t) {
  bool spirv = t->kind == KILN_TARGET_KIND_VULKAN;
  const char *ws = spirv ? "3" : "#gpu.address_space<workgroup>";
  const char *fm = spirv ? "" : " fastmath<contract>"; /* FMA on the LLVM backends */
  simt_tile_t st = simt_tile(g, t);
  uint32_t tx_n = simt_threads_x(st), ty_n = simt_threads_y(st), threads = tx_n * ty_n;
  int rows = 4 * st.gm, cols = st.gn; /* accumulators: rows x cols vectors */
  int a_rounds = (int)(st.tm * (KILN_GEMM_TILE_K / 4) / threads);
  int b_rounds = (int)(KILN_GEMM_TILE_K * (st.tn / 4) / threads);
  kiln_buf_t ta, tb, tc, as, bs;
  kiln_buf_init(&ta), kiln_buf_init(&tb), kiln_buf_init(&tc), kiln_buf_init(&as), kiln_buf_init(&bs);
  /* A convolution's A is its (padded) input as [pixel][channel/4]. */
  if (g->conv_h)
    operand_memref(&ta, g, g->m / (g->out_h * g->out_w) * g->in_h * g->in_w, g->conv_c);
  else
    operand_memref(&ta, g, g->m, g->k);
  operand_memref(&tb, g, g->k, g->n);
  vec_memref(&tc, g, g->m, g->n, 4, "f32");
  kiln_buf_appendf(&as, "memref<%lldx%dxvector<4xf32>, %s>", (long long)st.tm, KILN_GEMM_TILE_K / 4, ws);
  kiln_buf_appendf(&bs, "memref<%dx%lldxvector<4xf32>, %s>", KILN_GEMM_TILE_K, (long long)(st.tn / 4), ws);
  kiln_buf_t text;
  kiln_buf_init(&text);
  kiln_buf_t *b = &text;
  signature(b, sig, g, ta.data, tb.data, tc.data);
  if (!spirv) kiln_buf_appendf(b, " workgroup(%%As : %s, %%Bs : %s)", as.data, bs.data);
  kiln_buf_appendf(b, " kernel attributes {known_block_size = array<i32: %u, %u, 1>", tx_n, ty_n);
  if (spirv) {
    kiln_buf_appendf(b, ", spirv.entry_point_abi = #spirv.entry_point_abi<workgroup_size = [%u, %u, 1]>",
                     tx_n, ty_n);
  }
  kiln_buf_append_str(b, "} {\n");
  if (spirv)
    kiln_buf_appendf(b, "  %%As = memref.alloc() : %s\n  %%Bs = memref.alloc() : %s\n", as.data, bs.data);
  emit_t e = {.b = b};
  int64_t consts[] = {0,
                      1,
                      2,
                      3,
                      4,
                      tx_n,
                      st.tm,
                      st.tn / 4,
                      threads,
                      KILN_GEMM_TILE_K,
                      g->k / KILN_GEMM_TILE_K,
                      st.tm / st.gm,
                      st.tn / 4 / st.gn};
  for (size_t i = 0; i < sizeof consts / sizeof consts[0]; i++) need_const(&e, consts[i]);
  for (int r = 0; r < (a_rounds > b_rounds ? a_rounds : b_rounds); r++) need_const(&e, (int64_t)r * threads);
  if (g->conv_h) {
    int64_t more[] = {g->conv_c / 4,       g->conv_w,      g->in_w, g->out_w,
                      g->out_h * g->out_w, g->conv_stride, g->in_h};
    for (size_t i = 0; i < sizeof more / sizeof more[0]; i++) need_const(&e, more[i]);
  }
  char A[16], B[16], C[16];
  snprintf(A, sizeof A, "%%arg%u", g->a_arg);
  snprintf(B, sizeof B, "%%arg%u", g->b_arg);
  snprintf(C, sizeof C, "%%arg%u", g->c_arg);
  kiln_buf_appendf(b,
                   "  %%tx = gpu.thread_id x\n  %%ty = gpu.thread_id y\n  %%bx = gpu.block_id x\n"
                   "  %%by = gpu.block_id y\n  %%bz = gpu.block_id z\n"
                   "  %%t0 = arith.muli %%ty, %%c%u : index\n  %%t = arith.addi %%t0, %%tx : index\n"
                   "  %%m0 = arith.muli %%by, %%c%lld : index\n  %%n0 = arith.muli %%bx, %%c%lld : index\n"
                   "  %%ty4 = arith.muli %%ty, %%c4 : index\n",
                   tx_n, (long long)st.tm, (long long)(st.tn / 4));
  if (g->f8) f8_constants(b, g->f8);
  if (g->bf16) {
    kiln_buf_append_str(b,
                        "  %bf_sh = arith.constant dense<16> : vector<2xi32>\n"
                        "  %bf_hi = arith.constant dense<-65536> : vector<2xi32>\n");
  }
  /* The loaders: invocation t moves vectors t, t + threads, ... of each slice. */
  for (int r = 0; r < a_rounds; r++) {
    kiln_buf_appendf(
        b,
        "  %%ai%d = arith.addi %%t, %%c%lld : index\n"
        "  %%arow%d = arith.divui %%ai%d, %%c4 : index\n  %%akq%d = arith.remui %%ai%d, %%c4 : index\n"
        "  %%garow%d = arith.addi %%m0, %%arow%d : index\n",
        r, (long long)r * threads, r, r, r, r, r, r);
    if (g->conv_h) {
      /* Row m is output pixel (image m / (OH OW), row, column); its window
       * starts at input row image * IH + row * stride, column column * stride. */
      kiln_buf_appendf(
          b,
          "  %%img%d = arith.divui %%garow%d, %%c%lld : index\n  %%pm%d = arith.remui %%garow%d, %%c%lld : "
          "index\n"
          "  %%ohm%d = arith.divui %%pm%d, %%c%lld : index\n  %%owm%d = arith.remui %%pm%d, %%c%lld : index\n"
          "  %%ohs%d = arith.muli %%ohm%d, %%c%lld : index\n  %%imh%d = arith.muli %%img%d, %%c%lld : index\n"
          "  %%ohb%d = arith.addi %%ohs%d, %%imh%d : index\n  %%ows%d = arith.muli %%owm%d, %%c%lld : "
          "index\n",
          r, r, (long long)(g->out_h * g->out_w), r, r, (long long)(g->out_h * g->out_w), r, r,
          (long long)g->out_w, r, r, (long long)g->out_w, r, r, (long long)g->conv_stride, r, r,
          (long long)g->in_h, r, r, r, r, r, (long long)g->conv_stride);
    }
  }
  for (int r = 0; r < b_rounds; r++) {
    kiln_buf_appendf(
        b,
        "  %%bi%d = arith.addi %%t, %%c%lld : index\n"
        "  %%bkr%d = arith.divui %%bi%d, %%c%lld : index\n  %%bcq%d = arith.remui %%bi%d, %%c%lld : index\n"
        "  %%bcol%d = arith.addi %%n0, %%bcq%d : index\n",
        r, (long long)r * threads, r, r, (long long)(st.tn / 4), r, r, (long long)(st.tn / 4), r, r);
  }
  /* The accumulators' rows (in the tile and in C) and column vectors. */
  for (int i = 0; i < rows; i++) {
    kiln_buf_appendf(
        b,
        "  %%ar%d0 = arith.addi %%ty4, %%c%d : index\n  %%ar%d = arith.addi %%ar%d0, %%c%lld : index\n"
        "  %%cr%d = arith.addi %%m0, %%ar%d : index\n",
        i, i % 4, i, i, (long long)(i / 4) * (st.tm / st.gm), i, i);
    need_const(&e, (int64_t)(i / 4) * (st.tm / st.gm));
  }
  for (int j = 0; j < cols; j++) {
    kiln_buf_appendf(
        b, "  %%bc%d = arith.addi %%tx, %%c%lld : index\n  %%gc%d = arith.addi %%n0, %%bc%d : index\n", j,
        (long long)j * (st.tn / 4 / st.gn), j, j);
  }
  for (int i = 0; i < rows; i++) {
    for (int j = 0; j < cols; j++) {
      char row[32], col[32];
      snprintf(row, sizeof row, "%%cr%d", i);
      snprintf(col, sizeof col, "%%gc%d", j);
      kiln_buf_appendf(b, "  %%acc%d_%d = memref.load %s", i, j, C);
      at(b, g, row, col);
      kiln_buf_appendf(b, " : %s\n", tc.data);
    }
  }
  const char *v4 = "vector<4xf32>";
  int n_acc = rows * cols;
  kiln_buf_appendf(b, "  %%r:%d = scf.for %%kt = %%c0 to %%c%lld step %%c1 iter_args(", n_acc,
                   (long long)(g->k / KILN_GEMM_TILE_K));
  for (int a = 0; a < n_acc; a++)
    kiln_buf_appendf(b, "%s%%x%d_%d = %%acc%d_%d", a ? ", " : "", a / cols, a % cols, a / cols, a % cols);
  kiln_buf_append_str(b, ") -> (");
  for (int a = 0; a < n_acc; a++) kiln_buf_appendf(b, "%s%s", a ? ", " : "", v4);
  kiln_buf_appendf(
      b, ") {\n    %%kt4 = arith.muli %%kt, %%c4 : index\n    %%kt16 = arith.muli %%kt, %%c%d : index\n",
      KILN_GEMM_TILE_K);
  for (int r = 0; r < a_rounds; r++) {
    kiln_buf_appendf(b, "    %%kv%d = arith.addi %%kt4, %%akq%d : index\n", r, r);
    if (g->conv_h) {
      /* Column k = 4 kv of A is (kh, kw, c) of the pixel row m stands for. */
      kiln_buf_appendf(
          b,
          "    %%cq%d = arith.remui %%kv%d, %%c%lld : index\n    %%kk%d = arith.divui %%kv%d, %%c%lld : "
          "index\n"
          "    %%kh%d = arith.divui %%kk%d, %%c%lld : index\n    %%kw%d = arith.remui %%kk%d, %%c%lld : "
          "index\n"
          "    %%ih%d = arith.addi %%ohb%d, %%kh%d : index\n    %%iw%d = arith.addi %%ows%d, %%kw%d : index\n"
          "    %%ihw%d = arith.muli %%ih%d, %%c%lld : index\n    %%pix%d = arith.addi %%ihw%d, %%iw%d : "
          "index\n"
          "    %%av%d = memref.load %s[%%pix%d, %%cq%d] : %s\n",
          r, r, (long long)(g->conv_c / 4), r, r, (long long)(g->conv_c / 4), r, r, (long long)g->conv_w, r,
          r, (long long)g->conv_w, r, r, r, r, r, r, r, r, (long long)g->in_w, r, r, r, r, A, r, r, ta.data);
    } else {
      char row[32], col[32];
      snprintf(row, sizeof row, "%%garow%d", r);
      snprintf(col, sizeof col, "%%kv%d", r);
      kiln_buf_appendf(b, "    %%av%d = memref.load %s", r, A);
      at(b, g, row, col);
      kiln_buf_appendf(b, " : %s\n", ta.data);
    }
    char dst[32], src[32];
    snprintf(dst, sizeof dst, "%%avw%d", r);
    snprintf(src, sizeof src, "%%av%d", r);
    widen_operands(b, g, dst, src);
    kiln_buf_appendf(b, "    memref.store %%av%s%d, %%As[%%arow%d, %%akq%d] : %s\n",
                     g->operand_bits < 32 ? "w" : "", r, r, r, as.data);
  }
  for (int r = 0; r < b_rounds; r++) {
    char row[32], col[32];
    snprintf(row, sizeof row, "%%kr%d", r);
    snprintf(col, sizeof col, "%%bcol%d", r);
    kiln_buf_appendf(b, "    %%kr%d = arith.addi %%kt16, %%bkr%d : index\n    %%bv%d = memref.load %s", r, r,
                     r, B);
    at(b, g, row, col);
    kiln_buf_appendf(b, " : %s\n", tb.data);
    char dst[32], src[32];
    snprintf(dst, sizeof dst, "%%bvw%d", r);
    snprintf(src, sizeof src, "%%bv%d", r);
    widen_operands(b, g, dst, src);
    kiln_buf_appendf(b, "    memref.store %%bv%s%d, %%Bs[%%bkr%d, %%bcq%d] : %s\n",
                     g->operand_bits < 32 ? "w" : "", r, r, r, bs.data);
  }
  kiln_buf_append_str(b, "    gpu.barrier\n");
  char(*cur)[48] = kiln_calloc((size_t)n_acc, sizeof *cur);
  for (int a = 0; a < n_acc; a++) snprintf(cur[a], sizeof cur[a], "%%x%d_%d", a / cols, a % cols);
  for (int kk = 0; kk < KILN_GEMM_TILE_K; kk++) {
    if (kk % 4 == 0) {
      kiln_buf_appendf(b, "    %%q%d = arith.constant %d : index\n", kk, kk / 4);
      for (int i = 0; i < rows; i++) {
        kiln_buf_appendf(b, "    %%a%d_%d = memref.load %%As[%%ar%d, %%q%d] : %s\n", kk, i, i, kk, as.data);
      }
    }
    kiln_buf_appendf(b, "    %%k%d = arith.constant %d : index\n", kk, kk);
    for (int j = 0; j < cols; j++) {
      kiln_buf_appendf(b, "    %%b%d_%d = memref.load %%Bs[%%k%d, %%bc%d] : %s\n", kk, j, kk, j, bs.data);
    }
    for (int i = 0; i < rows; i++) {
      int g4 = kk - kk % 4;
      kiln_buf_appendf(b,
                       "    %%e%d_%d = vector.extract %%a%d_%d[%d] : f32 from %s\n"
                       "    %%s%d_%d = vector.broadcast %%e%d_%d : f32 to %s\n",
                       kk, i, g4, i, kk % 4, v4, kk, i, kk, i, v4);
      for (int j = 0; j < cols; j++) {
        int a = i * cols + j;
        kiln_buf_appendf(b,
                         "    %%p%d_%d_%d = arith.mulf %%s%d_%d, %%b%d_%d%s : %s\n"
                         "    %%y%d_%d_%d = arith.addf %s, %%p%d_%d_%d%s : %s\n",
                         kk, i, j, kk, i, kk, j, fm, v4, kk, i, j, cur[a], kk, i, j, fm, v4);
        snprintf(cur[a], sizeof cur[a], "%%y%d_%d_%d", kk, i, j);
      }
    }
  }
  kiln_buf_append_str(b, "    gpu.barrier\n    scf.yield ");
  for (int a = 0; a < n_acc; a++) kiln_buf_appendf(b, "%s%s", a ? ", " : "", cur[a]);
  kiln_buf_append_str(b, " : ");
  for (int a = 0; a < n_acc; a++) kiln_buf_appendf(b, "%s%s", a ? ", " : "", v4);
  kiln_buf_append_str(b, "\n  }\n");
  kiln_free(cur);
  for (int i = 0; i < rows; i++) {
    for (int j = 0; j < cols; j++) {
      char row[32], col[32];
      snprintf(row, sizeof row, "%%cr%d", i);
      snprintf(col, sizeof col, "%%gc%d", j);
      kiln_buf_appendf(b, "  memref.store %%r#%d, %s", i * cols + j, C);
      at(b, g, row, col);
      kiln_buf_appendf(b, " : %s\n", tc.data);
    }
  }
  kiln_buf_append_str(b, "  gpu.return\n}\n}\n");
  kiln_buf_deinit(&ta), kiln_buf_deinit(&tb), kiln_buf_deinit(&tc), kiln_buf_deinit(&as),
      kiln_buf_deinit(&bs);
  return kiln_buf_take(&text);
}

/* The matrix-unit kernels' slices: MMA_SLICE_BYTES of k per row of A and B
 * (32 halves or 64 f8), staged in workgroup memory as A[m][k] and B transposed
 * as B[n][k], each row padded to MMA_PITCH_BYTES (80: the 8 rows a fragment
 * load reads fall in 8 different bank quads). */
#define MMA_SLICE_BYTES 64
#define MMA_PITCH_BYTES 80
#define MMA_THREADS     128

/* How a matrix kernel holds its operands: as f16, or as their bits (bf16 as
 * i16, f8 as i8) cast back for the matrix op. */
typedef struct mma_fmt_s {
  const char *h; /* the element type in memory and workgroup memory */
  const char *f; /* the type the matrix op takes */
  int bytes;     /* an element's */
  int vec;       /* elements per 128-bit global access: 8 or 16 */
  int depth;     /* k per staged slice: 32 or 64 */
  int pitch;     /* a workgroup row, in elements */
} mma_fmt_t;

static mma_fmt_t mma_fmt(const kiln_compiler_gemm_t *g) {
  int bytes = (int)g->operand_bits / 8;
  const char *f = g->f8 == KILN_GEMM_F8_E4M3FN ? "f8E4M3FN"
                  : g->f8 == KILN_GEMM_F8_E5M2 ? "f8E5M2"
                  : g->bf16                    ? "bf16"
                                               : "f16";
  return (mma_fmt_t){g->f8     ? "i8"
                     : g->bf16 ? "i16"
                               : "f16",
                     f,
                     bytes,
                     16 / bytes,
                     MMA_SLICE_BYTES / bytes,
                     MMA_PITCH_BYTES / bytes};
}

/* The matrix-unit kernels' staging: in `rounds` rounds of `threads`
 * invocations, each moves one 128-bit vector of the 64-row A slice into
 * As[m][k] and one of the B slice, transposed, into Bs[n][k] (each slice is
 * 256 vectors). stage_setup emits the invocation's indices (before the loop;
 * needs %t, %m0 and %bx), stage_slice a slice's loads and stores and the
 * barrier after them (in the loop; needs %kt4 = 4kt and %ktd = depth kt). */
static void stage_setup(kiln_buf_t *b, int rounds, int threads, const mma_fmt_t *f) {
  int per_row = KILN_GEMM_TILE_N / f->vec; /* B's vectors in one k row of the tile */
  kiln_buf_appendf(b, "  %%bxv = arith.muli %%bx, %%c%d : index\n", per_row);
  for (int it = 0; it < rounds; it++) {
    kiln_buf_appendf(
        b,
        "  %%st%d = arith.constant %d : index\n  %%i%d = arith.addi %%t, %%st%d : index\n"
        "  %%arow%d = arith.divui %%i%d, %%c4 : index\n  %%akq%d = arith.remui %%i%d, %%c4 : index\n"
        "  %%ak8%d = arith.muli %%akq%d, %%c%d : index\n  %%garow%d = arith.addi %%m0, %%arow%d : index\n"
        "  %%bk%d = arith.divui %%i%d, %%c%d : index\n  %%bnq%d = arith.remui %%i%d, %%c%d : index\n"
        "  %%bn8%d = arith.muli %%bnq%d, %%c%d : index\n  %%gbcol%d = arith.addi %%bxv, %%bnq%d : index\n",
        it, it * threads, it, it, it, it, it, it, it, it, f->vec, it, it, it, it, per_row, it, it, per_row,
        it, it, f->vec, it, it);
    for (int i = 0; i < f->vec; i++) {
      kiln_buf_appendf(b, "  %%bn%d_%d = arith.addi %%bn8%d, %%c%d : index\n", it, i, it, i);
    }
  }
}

static void stage_slice(kiln_buf_t *b, int rounds, const char *A, const char *B, const char *bi,
                        const char *ta, const char *tb, const char *ws, const mma_fmt_t *f) {
  for (int it = 0; it < rounds; it++) {
    kiln_buf_appendf(b,
                     "    %%kv%d = arith.addi %%kt4, %%akq%d : index\n"
                     "    %%va%d = memref.load %s[%s%%garow%d, %%kv%d] : %s\n"
                     "    vector.store %%va%d, %%As[%%arow%d, %%ak8%d] {alignment = 16} : %s, vector<%dx%s>\n"
                     "    %%kr%d = arith.addi %%ktd, %%bk%d : index\n"
                     "    %%vb%d = memref.load %s[%s%%kr%d, %%gbcol%d] : %s\n",
                     it, it, it, A, bi, it, it, ta, it, it, it, ws, f->vec, f->h, it, it, it, B, bi, it, it,
                     tb);
    for (int i = 0; i < f->vec; i++) {
      kiln_buf_appendf(b,
                       "    %%vb%d_%d = vector.extract %%vb%d[%d] : %s from vector<%dx%s>\n"
                       "    memref.store %%vb%d_%d, %%Bs[%%bn%d_%d, %%bk%d] : %s\n",
                       it, i, it, i, f->h, f->vec, f->h, it, i, it, i, it, ws);
    }
  }
  kiln_buf_append_str(b, "    gpu.barrier\n");
}

/* ---- CUDA: f16, bf16 and f8 operands on the tensor cores ---- */

/* The workgroup: 4 warps (32 x 4), each a 32x32 quarter of the 64x64 tile as
 * 2 x 4 m16n8 mma.sync tiles (f32 accumulators) over the staged slices.
 * Fragments follow PTX's layouts (g = lane / 4, c = lane % 4), for m16n8k16
 * (f16, bf16):
 *   A: {a0a1, a2a3, a4a5, a6a7} = A[g][2c..], A[g+8][2c..], A[g][2c+8..], A[g+8][2c+8..]
 *   B: {b0b1, b2b3}             = B[2c..][g], B[2c+8..][g]
 *   C: {c0c1, c2c3}             = C[g][2c..], C[g+8][2c..]
 * and for m16n8k32 (f8: e4m3, e5m2), four to a register:
 *   A: A[g][4c..], A[g+8][4c..], A[g][4c+16..], A[g+8][4c+16..]
 *   B: B[4c..][g], B[4c+16..][g]
 *   C: as m16n8k16's
 * Global accesses: A and B in 128-bit vectors (two each per invocation per
 * slice), C in 64-bit pairs. */

/* PTX has the f8 mma.sync for sm_89 from ISA 8.4 on; IREE 3.12 pins sm_89 to
 * PTX 7.8 (targets.c), where its f8 matmuls take the SIMT tile. */
static bool use_mma(const kiln_compiler_gemm_t *g, const kiln_target_t *t) {
  mma_fmt_t f = mma_fmt(g);
  return t->kind == KILN_TARGET_KIND_CUDA && (g->operand_bits == 16 || (g->f8 && t->ptx_version >= 84)) &&
         !g->conv_h && g->k % f.depth == 0 && g->m % KILN_GEMM_TILE_M == 0;
}

/* %<m>i<ks><i>_<r>: the register of 32 bits (two bf16 or four f8) at
 * <S>s[%<row>, %k<kc><ks>] as one i32. */
static void mma_word(kiln_buf_t *b, const mma_fmt_t *f, char m, int ks, int i, int r, const char *row,
                     char kc, const char *ws) {
  kiln_buf_appendf(b,
                   "    %%%c%d%d_%d = vector.load %%%cs[%%%s, %%k%c%d] {alignment = 4} : %s, vector<%dx%s>\n"
                   "    %%%cw%d%d_%d = vector.bitcast %%%c%d%d_%d : vector<%dx%s> to vector<1xi32>\n"
                   "    %%%ci%d%d_%d = vector.extract %%%cw%d%d_%d[0] : i32 from vector<1xi32>\n",
                   m, ks, i, r, m == 'a' ? 'A' : 'B', row, kc, ks, ws, 4 / f->bytes, f->h, m, ks, i, r, m, ks,
                   i, r, 4 / f->bytes, f->h, m, ks, i, r, m, ks, i, r);
}

/* One k step of the bf16 and f8 kernels on registers of 32 bits (the lower k
 * in the low bits), the accumulators vector<2x2xf32> as in the f16 kernel.
 * nvgpu.mma.sync has neither type: bf16 takes nvvm.mma.sync, f8 (which
 * nvvm.mma.sync refuses) PTX's own instruction as inline assembly. */
static void mma_word_step(kiln_buf_t *b, const mma_fmt_t *f, int ks, const char *ws, char cur[8][24]) {
  const char *ptx = strcmp(f->f, "f8E5M2") ? "e4m3" : "e5m2"; /* f8's in PTX */
  static const char *const rows[4] = {"ra", "rb", "ra", "rb"};
  static const char *const st4 = "!llvm.struct<(f32, f32, f32, f32)>";
  char row[16];
  for (int mi = 0; mi < 2; mi++) {
    for (int r = 0; r < 4; r++) {
      snprintf(row, sizeof row, "%s%d", rows[r], mi);
      mma_word(b, f, 'a', ks, mi, r, row, r < 2 ? 'b' : 'c', ws);
    }
  }
  for (int ni = 0; ni < 4; ni++) {
    for (int r = 0; r < 2; r++) {
      snprintf(row, sizeof row, "nb%d", ni);
      mma_word(b, f, 'b', ks, ni, r, row, r ? 'c' : 'b', ws);
    }
  }
  for (int mi = 0; mi < 2; mi++) {
    for (int ni = 0; ni < 4; ni++) {
      int a = mi * 4 + ni;
      for (int r = 0; r < 2; r++) {
        kiln_buf_appendf(b,
                         "    %%cr%d_%d_%d = vector.extract %s[%d] : vector<2xf32> from vector<2x2xf32>\n"
                         "    %%cs%d_%d_%d = vector.extract %%cr%d_%d_%d[0] : f32 from vector<2xf32>\n"
                         "    %%cs%d_%d_%d = vector.extract %%cr%d_%d_%d[1] : f32 from vector<2xf32>\n",
                         ks, a, r, cur[a], r, ks, a, 2 * r, ks, a, r, ks, a, 2 * r + 1, ks, a, r);
      }
      if (f->bytes == 1) {
        kiln_buf_appendf(
            b,
            "    %%mm%d_%d = llvm.inline_asm asm_dialect = att "
            "\"mma.sync.aligned.m16n8k32.row.col.f32.%s.%s.f32 "
            "{$0, $1, $2, $3}, {$4, $5, $6, $7}, {$8, $9}, {$10, $11, $12, $13};\", "
            "\"=f,=f,=f,=f,r,r,r,r,r,r,f,f,f,f\" %%ai%d%d_0, %%ai%d%d_1, %%ai%d%d_2, %%ai%d%d_3, "
            "%%bi%d%d_0, %%bi%d%d_1, %%cs%d_%d_0, %%cs%d_%d_1, %%cs%d_%d_2, %%cs%d_%d_3 : "
            "(i32, i32, i32, i32, i32, i32, f32, f32, f32, f32) -> %s\n",
            ks, a, ptx, ptx, ks, mi, ks, mi, ks, mi, ks, mi, ks, ni, ks, ni, ks, a, ks, a, ks, a, ks, a, st4);
      } else {
        kiln_buf_appendf(
            b,
            "    %%mm%d_%d = nvvm.mma.sync A[%%ai%d%d_0, %%ai%d%d_1, %%ai%d%d_2, %%ai%d%d_3] "
            "B[%%bi%d%d_0, %%bi%d%d_1] C[%%cs%d_%d_0, %%cs%d_%d_1, %%cs%d_%d_2, %%cs%d_%d_3] "
            "{layoutA = #nvvm.mma_layout<row>, layoutB = #nvvm.mma_layout<col>, "
            "multiplicandAPtxType = #nvvm.mma_type<bf16>, multiplicandBPtxType = #nvvm.mma_type<bf16>, "
            "shape = #nvvm.shape<m = 16, n = 8, k = 16>} : (i32, i32, f32) -> %s\n",
            ks, a, ks, mi, ks, mi, ks, mi, ks, mi, ks, ni, ks, ni, ks, a, ks, a, ks, a, ks, a, st4);
      }
      for (int i = 0; i < 4; i++) {
        kiln_buf_appendf(b, "    %%md%d_%d_%d = llvm.extractvalue %%mm%d_%d[%d] : %s\n", ks, a, i, ks, a, i,
                         st4);
      }
      kiln_buf_appendf(
          b,
          "    %%ml%d_%d = vector.from_elements %%md%d_%d_0, %%md%d_%d_1 : vector<2xf32>\n"
          "    %%mh%d_%d = vector.from_elements %%md%d_%d_2, %%md%d_%d_3 : vector<2xf32>\n"
          "    %%mv%d_%d = vector.insert %%ml%d_%d, %%zc[0] : vector<2xf32> into vector<2x2xf32>\n"
          "    %%m%d_%d = vector.insert %%mh%d_%d, %%mv%d_%d[1] : vector<2xf32> into vector<2x2xf32>\n",
          ks, a, ks, a, ks, a, ks, a, ks, a, ks, a, ks, a, ks, a, ks, a, ks, a, ks, a);
      snprintf(cur[a], 24, "%%m%d_%d", ks, a);
    }
  }
}

static char *mma_kernel_text(const kernel_sig_t *sig, const kiln_compiler_gemm_t *g) {
  mma_fmt_t f = mma_fmt(g);
  const char *h = f.h;
  kiln_buf_t ta, tb, tc;
  kiln_buf_init(&ta), kiln_buf_init(&tb), kiln_buf_init(&tc);
  vec_memref(&ta, g, g->m, g->k, f.vec, h);
  vec_memref(&tb, g, g->k, g->n, f.vec, h);
  vec_memref(&tc, g, g->m, g->n, 2, "f32");
  char ws[96];
  snprintf(ws, sizeof ws, "memref<%dx%dx%s, #gpu.address_space<workgroup>>", KILN_GEMM_TILE_M, f.pitch, h);
  kiln_buf_t text;
  kiln_buf_init(&text);
  kiln_buf_t *b = &text;
  signature(b, sig, g, ta.data, tb.data, tc.data);
  kiln_buf_appendf(
      b, " workgroup(%%As : %s, %%Bs : %s) kernel attributes {known_block_size = array<i32: 32, 4, 1>} {\n",
      ws, ws);
  emit_t e = {.b = b};
  int64_t consts[] = {0,  1,  2,  3,  4,  5,  6,  7,  8,  9,   10,
                      11, 12, 13, 14, 15, 16, 24, 32, 64, 128, g->k / f.depth};
  for (size_t i = 0; i < sizeof consts / sizeof consts[0]; i++) need_const(&e, consts[i]);
  char A[16], B[16], C[16];
  snprintf(A, sizeof A, "%%arg%u", g->a_arg);
  snprintf(B, sizeof B, "%%arg%u", g->b_arg);
  snprintf(C, sizeof C, "%%arg%u", g->c_arg);
  kiln_buf_append_str(b,
                      "  %lane = gpu.thread_id x\n  %warp = gpu.thread_id y\n  %bx = gpu.block_id x\n"
                      "  %by = gpu.block_id y\n  %bz = gpu.block_id z\n"
                      "  %g = arith.divui %lane, %c4 : index\n  %q = arith.remui %lane, %c4 : index\n"
                      "  %q2 = arith.muli %q, %c2 : index\n"
                      "  %w32 = arith.muli %warp, %c32 : index\n  %t = arith.addi %w32, %lane : index\n"
                      "  %wm = arith.divui %warp, %c2 : index\n  %wn = arith.remui %warp, %c2 : index\n"
                      "  %m0 = arith.muli %by, %c64 : index\n"
                      "  %wm32 = arith.muli %wm, %c32 : index\n  %wn32 = arith.muli %wn, %c32 : index\n"
                      "  %bx32 = arith.muli %bx, %c32 : index\n  %wn16 = arith.muli %wn, %c16 : index\n"
                      "  %cb = arith.addi %bx32, %wn16 : index\n  %cb2 = arith.addi %cb, %q : index\n"
                      "  %q4 = arith.muli %q, %c4 : index\n");
  stage_setup(b, 2, MMA_THREADS, &f);
  /* The fragments' rows and columns in the tile. */
  for (int mi = 0; mi < 2; mi++) {
    kiln_buf_appendf(
        b,
        "  %%ra%d0 = arith.addi %%wm32, %%c%d : index\n  %%ra%d = arith.addi %%ra%d0, %%g : index\n"
        "  %%rb%d = arith.addi %%ra%d, %%c8 : index\n"
        "  %%gra%d = arith.addi %%m0, %%ra%d : index\n  %%grb%d = arith.addi %%m0, %%rb%d : index\n",
        mi, mi * 16, mi, mi, mi, mi, mi, mi, mi, mi);
  }
  for (int ni = 0; ni < 4; ni++) {
    kiln_buf_appendf(
        b,
        "  %%nb%d0 = arith.addi %%wn32, %%c%d : index\n  %%nb%d = arith.addi %%nb%d0, %%g : index\n"
        "  %%cc%d = arith.addi %%cb2, %%c%d : index\n",
        ni, ni * 8, ni, ni, ni, ni * 4);
  }
  kiln_buf_append_str(b, "  %zc = arith.constant dense<0.0> : vector<2x2xf32>\n");
  if (!strcmp(f.f, "f16")) {
    kiln_buf_append_str(b,
                        "  %za = arith.constant dense<0.0> : vector<4x2xf16>\n"
                        "  %zb = arith.constant dense<0.0> : vector<2x2xf16>\n");
  }
  const char *bi = g->rank == 3 ? "%bz, " : "";
  for (int mi = 0; mi < 2; mi++) {
    for (int ni = 0; ni < 4; ni++) {
      kiln_buf_appendf(
          b,
          "  %%ci%d%d_0 = memref.load %s[%s%%gra%d, %%cc%d] : %s\n"
          "  %%ci%d%d_1 = memref.load %s[%s%%grb%d, %%cc%d] : %s\n"
          "  %%cv%d%d_0 = vector.insert %%ci%d%d_0, %%zc[0] : vector<2xf32> into vector<2x2xf32>\n"
          "  %%acc%d%d = vector.insert %%ci%d%d_1, %%cv%d%d_0[1] : vector<2xf32> into vector<2x2xf32>\n",
          mi, ni, C, bi, mi, ni, tc.data, mi, ni, C, bi, mi, ni, tc.data, mi, ni, mi, ni, mi, ni, mi, ni, mi,
          ni);
    }
  }
  kiln_buf_appendf(b, "  %%r:8 = scf.for %%kt = %%c0 to %%c%lld step %%c1 iter_args(",
                   (long long)(g->k / f.depth));
  for (int a = 0; a < 8; a++) kiln_buf_appendf(b, "%s%%x%d = %%acc%d%d", a ? ", " : "", a, a / 4, a % 4);
  kiln_buf_append_str(b, ") -> (");
  for (int a = 0; a < 8; a++) kiln_buf_appendf(b, "%svector<2x2xf32>", a ? ", " : "");
  kiln_buf_appendf(
      b, ") {\n    %%kt4 = arith.muli %%kt, %%c4 : index\n    %%ktd = arith.muli %%kt, %%c%d : index\n",
      f.depth);
  stage_slice(b, 2, A, B, bi, ta.data, tb.data, ws, &f);
  char cur[8][24];
  for (int a = 0; a < 8; a++) snprintf(cur[a], sizeof cur[a], "%%x%d", a);
  /* k steps of 16 (f16, bf16: lane c's k from 2c, then 2c + 8) or 32 (f8: 4c,
   * then 4c + 16). */
  int kstep = 32 / f.bytes;
  for (int ks = 0; ks < f.depth / kstep; ks++) {
    kiln_buf_appendf(
        b, "    %%kb%d = arith.addi %s, %%c%d : index\n    %%kc%d = arith.addi %%kb%d, %%c%d : index\n", ks,
        f.bytes == 1 ? "%q4" : "%q2", ks * kstep, ks, ks, kstep / 2);
    if (strcmp(f.f, "f16")) {
      mma_word_step(b, &f, ks, ws, cur);
      continue;
    }
    for (int mi = 0; mi < 2; mi++) {
      static const char *const rows[4] = {"ra", "rb", "ra", "rb"};
      char prev[24] = "%za";
      for (int r = 0; r < 4; r++) {
        kiln_buf_appendf(
            b,
            "    %%a%d%d_%d = vector.load %%As[%%%s%d, %%k%c%d] {alignment = 4} : %s, vector<2xf16>\n"
            "    %%af%d%d_%d = vector.insert %%a%d%d_%d, %s[%d] : vector<2xf16> into vector<4x2xf16>\n",
            ks, mi, r, rows[r], mi, r < 2 ? 'b' : 'c', ks, ws, ks, mi, r, ks, mi, r, prev, r);
        snprintf(prev, sizeof prev, "%%af%d%d_%d", ks, mi, r);
      }
    }
    for (int ni = 0; ni < 4; ni++) {
      kiln_buf_appendf(
          b,
          "    %%b%d%d_0 = vector.load %%Bs[%%nb%d, %%kb%d] {alignment = 4} : %s, vector<2xf16>\n"
          "    %%b%d%d_1 = vector.load %%Bs[%%nb%d, %%kc%d] {alignment = 4} : %s, vector<2xf16>\n"
          "    %%bg%d%d = vector.insert %%b%d%d_0, %%zb[0] : vector<2xf16> into vector<2x2xf16>\n"
          "    %%bf%d%d = vector.insert %%b%d%d_1, %%bg%d%d[1] : vector<2xf16> into vector<2x2xf16>\n",
          ks, ni, ni, ks, ws, ks, ni, ni, ks, ws, ks, ni, ks, ni, ks, ni, ks, ni, ks, ni);
    }
    for (int mi = 0; mi < 2; mi++) {
      for (int ni = 0; ni < 4; ni++) {
        int a = mi * 4 + ni;
        kiln_buf_appendf(
            b,
            "    %%m%d_%d = nvgpu.mma.sync (%%af%d%d_3, %%bf%d%d, %s) {mmaShape = [16, 8, 16]} : "
            "(vector<4x2xf16>, vector<2x2xf16>, vector<2x2xf32>) -> vector<2x2xf32>\n",
            ks, a, ks, mi, ks, ni, cur[a]);
        snprintf(cur[a], sizeof cur[a], "%%m%d_%d", ks, a);
      }
    }
  }
  kiln_buf_append_str(b, "    gpu.barrier\n    scf.yield ");
  for (int a = 0; a < 8; a++) kiln_buf_appendf(b, "%s%s", a ? ", " : "", cur[a]);
  kiln_buf_append_str(b, " : ");
  for (int a = 0; a < 8; a++) kiln_buf_appendf(b, "%svector<2x2xf32>", a ? ", " : "");
  kiln_buf_append_str(b, "\n  }\n");
  for (int mi = 0; mi < 2; mi++) {
    for (int ni = 0; ni < 4; ni++) {
      int a = mi * 4 + ni;
      kiln_buf_appendf(b,
                       "  %%o%d_0 = vector.extract %%r#%d[0] : vector<2xf32> from vector<2x2xf32>\n"
                       "  %%o%d_1 = vector.extract %%r#%d[1] : vector<2xf32> from vector<2x2xf32>\n"
                       "  memref.store %%o%d_0, %s[%s%%gra%d, %%cc%d] : %s\n"
                       "  memref.store %%o%d_1, %s[%s%%grb%d, %%cc%d] : %s\n",
                       a, a, a, a, a, C, bi, mi, ni, tc.data, a, C, bi, mi, ni, tc.data);
    }
  }
  kiln_buf_append_str(b, "  gpu.return\n}\n}\n");
  kiln_buf_deinit(&ta), kiln_buf_deinit(&tb), kiln_buf_deinit(&tc);
  return kiln_buf_take(&text);
}

/* ---- AMD: f16, bf16 and f8 operands on the matrix cores (MFMA, WMMA) ---- */

/* The workgroup: 4 waves (64 x 4 on CDNA, 32 x 4 on RDNA), each a 32x32
 * quarter of the 64x64 tile as 2 x 2 16x16 matrix tiles, over the same slices
 * and workgroup layout as the CUDA kernel (A as [m][k], B transposed as
 * [n][k]). Each lane's A and B fragments are one workgroup load (64-bit for
 * MFMA, 128-bit for RDNA4's f16 WMMA, two for RDNA3's); C is read and written
 * once, as scalars. The fragment layouts are at amd_matrix_kernel_text. f8
 * (OCP E4M3 and E5M2) has MFMA on gfx950 (16x16x32; gfx942's f8 are the FNUZ
 * formats) and WMMA on RDNA4 (16x16x16); RDNA3 has none. */

/* Which AMD matrix instruction a kernel uses; each lays its fragments out
 * otherwise (amd_matrix_kernel_text). */
typedef enum amd_matrix_e {
  AMD_MATRIX_NONE,
  AMD_MATRIX_MFMA,  /* CDNA (gfx9, wave64): v_mfma_f32_16x16x16_f16, _16x16x32_fp8_fp8 */
  AMD_MATRIX_WMMA3, /* RDNA3 (gfx11, wave32): v_wmma_f32_16x16x16_f16 */
  AMD_MATRIX_WMMA4, /* RDNA4 (gfx12, wave32): v_wmma_f32_16x16x16_f16, _fp8_fp8; 8-element fragments */
} amd_matrix_t;

static amd_matrix_t amd_matrix(const kiln_compiler_gemm_t *g, const kiln_target_t *t) {
  if (t->kind != KILN_TARGET_KIND_HIP || g->operand_bits == 32 || g->conv_h || g->k % mma_fmt(g).depth ||
      g->m % KILN_GEMM_TILE_M) {
    return AMD_MATRIX_NONE;
  }
  if (t->limits.subgroup_size == 64)
    return !g->f8 || !strcmp(t->chip, "gfx950") ? AMD_MATRIX_MFMA : AMD_MATRIX_NONE;
  if (t->limits.subgroup_size != 32) return AMD_MATRIX_NONE;
  if (!strncmp(t->chip, "gfx11", 5)) return g->f8 ? AMD_MATRIX_NONE : AMD_MATRIX_WMMA3;
  if (!strncmp(t->chip, "gfx12", 5)) return AMD_MATRIX_WMMA4;
  return AMD_MATRIX_NONE;
}

static char *amd_matrix_kernel_text(const kernel_sig_t *sig, const kiln_compiler_gemm_t *g,
                                    amd_matrix_t kind) {
  /* Per lane (r = lane % 16, s = lane / 16), element j of its fragments:
   *   MFMA  (wave64): A[r][4s + j]  B[4s + j][r]  C[4s + j][r]   j < 4
   *   MFMA f8 16x16x32: A[r][8s + j]  B[8s + j][r]  C[4s + j][r]   j < 8 (A, B), 4 (C)
   *   WMMA3 (wave32): A[r][j]       B[j][r]       C[2j + s][r]   j < 16 (A, B), 8 (C);
   *                   lanes 16-31 repeat lanes 0-15's A and B
   *   WMMA4 (wave32): A[r][8s + j]  B[8s + j][r]  C[8s + j][r]   j < 8
   * (RDNA4's hardware pairs the halves of k across the two half-waves
   * differently, the same way for A and B, so the sums are the same.) */
  mma_fmt_t f = mma_fmt(g);
  bool wmma = kind != AMD_MATRIX_MFMA, f8 = f.bytes == 1;
  int lanes = wmma ? 32 : 64, threads = 4 * lanes;
  int frag = kind == AMD_MATRIX_MFMA ? (f8 ? 8 : 4) : kind == AMD_MATRIX_WMMA3 ? 16 : 8, n_c = wmma ? 8 : 4;
  int kstep = kind == AMD_MATRIX_MFMA && f8 ? 32 : 16; /* k of one matrix op */
  /* Where lane s's k range starts and its C rows step. */
  const char *k_of_s = kind == AMD_MATRIX_MFMA && !f8 ? "%s4" : kind == AMD_MATRIX_WMMA3 ? "%c0" : "%s8";
  const char *row_of_s = kind == AMD_MATRIX_MFMA ? "%s4" : kind == AMD_MATRIX_WMMA3 ? "%s" : "%s8";
  int row_step = kind == AMD_MATRIX_WMMA3 ? 2 : 1;
  /* Fragment loads: rows of 80 bytes, k offsets of a fragment's size. */
  int align = frag * f.bytes >= 16 ? 16 : frag * f.bytes;
  int rounds = 256 / threads; /* 128-bit vectors of each slice per invocation */
  kiln_buf_t ta, tb, tc;
  kiln_buf_init(&ta), kiln_buf_init(&tb), kiln_buf_init(&tc);
  const char *h = f.h; /* bf16 and f8 move as their bits, and are cast back for the op */
  bool bits = strcmp(f.f, "f16") != 0;
  vec_memref(&ta, g, g->m, g->k, f.vec, h);
  vec_memref(&tb, g, g->k, g->n, f.vec, h);
  kiln_buf_append_str(&tc, "memref<");
  if (g->rank == 3) kiln_buf_appendf(&tc, "%lldx", (long long)g->batch);
  kiln_buf_appendf(&tc, "%lldx%lldxf32>", (long long)g->m, (long long)g->n);
  char ws[96], vf[24], vl[24], vc[24];
  snprintf(ws, sizeof ws, "memref<%dx%dx%s, #gpu.address_space<workgroup>>", KILN_GEMM_TILE_M, f.pitch, h);
  snprintf(vf, sizeof vf, "vector<%dx%s>", frag, f.f);
  snprintf(vl, sizeof vl, "vector<%dx%s>", frag, h);
  snprintf(vc, sizeof vc, "vector<%dxf32>", n_c);
  kiln_buf_t text;
  kiln_buf_init(&text);
  kiln_buf_t *b = &text;
  signature(b, sig, g, ta.data, tb.data, tc.data);
  kiln_buf_appendf(
      b, " workgroup(%%As : %s, %%Bs : %s) kernel attributes {known_block_size = array<i32: %d, 4, 1>} {\n",
      ws, ws, lanes);
  emit_t e = {.b = b};
  for (int64_t c = 0; c <= 16; c++) need_const(&e, c);
  int64_t consts[] = {32, 48, 64, 128, g->k / f.depth};
  for (size_t i = 0; i < sizeof consts / sizeof consts[0]; i++) need_const(&e, consts[i]);
  char A[16], B[16], C[16];
  snprintf(A, sizeof A, "%%arg%u", g->a_arg);
  snprintf(B, sizeof B, "%%arg%u", g->b_arg);
  snprintf(C, sizeof C, "%%arg%u", g->c_arg);
  const char *bi = g->rank == 3 ? "%bz, " : "";
  kiln_buf_appendf(b,
                   "  %%lane = gpu.thread_id x\n  %%wave = gpu.thread_id y\n  %%bx = gpu.block_id x\n"
                   "  %%by = gpu.block_id y\n  %%bz = gpu.block_id z\n"
                   "  %%r = arith.remui %%lane, %%c16 : index\n  %%s = arith.divui %%lane, %%c16 : index\n"
                   "  %%s4 = arith.muli %%s, %%c4 : index\n  %%s8 = arith.muli %%s, %%c8 : index\n"
                   "  %%wl = arith.muli %%wave, %%c%d : index\n  %%t = arith.addi %%wl, %%lane : index\n"
                   "  %%wm = arith.divui %%wave, %%c2 : index\n  %%wn = arith.remui %%wave, %%c2 : index\n"
                   "  %%m0 = arith.muli %%by, %%c64 : index\n  %%n0 = arith.muli %%bx, %%c64 : index\n"
                   "  %%wm32 = arith.muli %%wm, %%c32 : index\n  %%wn32 = arith.muli %%wn, %%c32 : index\n",
                   lanes);
  stage_setup(b, rounds, threads, &f);
  for (int x = 0; x < 2; x++) {
    kiln_buf_appendf(
        b,
        "  %%ra%d0 = arith.addi %%wm32, %%c%d : index\n  %%ra%d = arith.addi %%ra%d0, %%r : index\n"
        "  %%nb%d0 = arith.addi %%wn32, %%c%d : index\n  %%nb%d = arith.addi %%nb%d0, %%r : index\n"
        "  %%gcol%d = arith.addi %%n0, %%nb%d : index\n  %%crow%d0 = arith.addi %%m0, %%ra%d0 : index\n",
        x, x * 16, x, x, x, x * 16, x, x, x, x, x, x);
    kiln_buf_appendf(b, "  %%crow%d = arith.addi %%crow%d0, %s : index\n", x, x, row_of_s);
    for (int j = 0; j < n_c; j++) {
      kiln_buf_appendf(b, "  %%crow%d_%d = arith.addi %%crow%d, %%c%d : index\n", x, j, x, row_step * j);
    }
  }
  kiln_buf_appendf(b, "  %%zc = arith.constant dense<0.0> : %s\n", vc);
  for (int mi = 0; mi < 2; mi++) {
    for (int ni = 0; ni < 2; ni++) {
      char prev[24] = "%zc";
      for (int j = 0; j < n_c; j++) {
        kiln_buf_appendf(b,
                         "  %%ci%d%d_%d = memref.load %s[%s%%crow%d_%d, %%gcol%d] : %s\n"
                         "  %%cv%d%d_%d = vector.insert %%ci%d%d_%d, %s[%d] : f32 into %s\n",
                         mi, ni, j, C, bi, mi, j, ni, tc.data, mi, ni, j, mi, ni, j, prev, j, vc);
        snprintf(prev, sizeof prev, "%%cv%d%d_%d", mi, ni, j);
      }
    }
  }
  kiln_buf_appendf(b, "  %%acc:4 = scf.for %%kt = %%c0 to %%c%lld step %%c1 iter_args(",
                   (long long)(g->k / f.depth));
  for (int a = 0; a < 4; a++)
    kiln_buf_appendf(b, "%s%%x%d = %%cv%d%d_%d", a ? ", " : "", a, a / 2, a % 2, n_c - 1);
  kiln_buf_appendf(b,
                   ") -> (%s, %s, %s, %s) {\n    %%kt4 = arith.muli %%kt, %%c4 : index\n"
                   "    %%ktd = arith.muli %%kt, %%c%d : index\n",
                   vc, vc, vc, vc, f.depth);
  stage_slice(b, rounds, A, B, bi, ta.data, tb.data, ws, &f);
  char cur[4][24];
  for (int a = 0; a < 4; a++) snprintf(cur[a], sizeof cur[a], "%%x%d", a);
  for (int ks = 0; ks < f.depth / kstep; ks++) {
    kiln_buf_appendf(b, "    %%kb%d = arith.addi %s, %%c%d : index\n", ks, k_of_s, ks * kstep);
    for (int x = 0; x < 2; x++) {
      kiln_buf_appendf(b,
                       "    %%a%s%d%d = vector.load %%As[%%ra%d, %%kb%d] {alignment = %d} : %s, %s\n"
                       "    %%b%s%d%d = vector.load %%Bs[%%nb%d, %%kb%d] {alignment = %d} : %s, %s\n",
                       bits ? "l" : "f", ks, x, x, ks, align, ws, vl, bits ? "l" : "f", ks, x, x, ks, align,
                       ws, vl);
      if (bits) {
        kiln_buf_appendf(b,
                         "    %%af%d%d = arith.bitcast %%al%d%d : %s to %s\n"
                         "    %%bf%d%d = arith.bitcast %%bl%d%d : %s to %s\n",
                         ks, x, ks, x, vl, vf, ks, x, ks, x, vl, vf);
      }
    }
    for (int a = 0; a < 4; a++) {
      if (wmma) {
        kiln_buf_appendf(b, "    %%m%d_%d = amdgpu.wmma 16x16x16 %%af%d%d * %%bf%d%d + %s : %s, %s, %s\n", ks,
                         a, ks, a / 2, ks, a % 2, cur[a], vf, vf, vc);
      } else {
        kiln_buf_appendf(
            b, "    %%m%d_%d = amdgpu.mfma 16x16x%d %%af%d%d * %%bf%d%d + %s blgp = none : %s, %s, %s\n", ks,
            a, kstep, ks, a / 2, ks, a % 2, cur[a], vf, vf, vc);
      }
      snprintf(cur[a], sizeof cur[a], "%%m%d_%d", ks, a);
    }
  }
  kiln_buf_appendf(b, "    gpu.barrier\n    scf.yield %s, %s, %s, %s : %s, %s, %s, %s\n  }\n", cur[0], cur[1],
                   cur[2], cur[3], vc, vc, vc, vc);
  for (int a = 0; a < 4; a++) {
    for (int j = 0; j < n_c; j++) {
      kiln_buf_appendf(b,
                       "  %%o%d_%d = vector.extract %%acc#%d[%d] : f32 from %s\n"
                       "  memref.store %%o%d_%d, %s[%s%%crow%d_%d, %%gcol%d] : %s\n",
                       a, j, a, j, vc, a, j, C, bi, a / 2, j, a % 2, tc.data);
    }
  }
  kiln_buf_append_str(b, "  gpu.return\n}\n}\n");
  kiln_buf_deinit(&ta), kiln_buf_deinit(&tb), kiln_buf_deinit(&tc);
  return kiln_buf_take(&text);
}

/* The kernel for `g` on `t` and its workgroup size. */
static char *tiled_text(const kernel_sig_t *sig, const kiln_compiler_gemm_t *g, const kiln_target_t *t,
                        uint32_t out_block[3], uint32_t out_grid[3]) {
  out_block[2] = 1;
  out_grid[0] = (uint32_t)(g->n / KILN_GEMM_TILE_N);
  out_grid[1] = (uint32_t)(g->m / KILN_GEMM_TILE_M);
  out_grid[2] = (uint32_t)g->batch;
  if (use_mma(g, t)) {
    out_block[0] = 32, out_block[1] = MMA_THREADS / 32;
    return mma_kernel_text(sig, g);
  }
  amd_matrix_t amd = amd_matrix(g, t);
  if (amd != AMD_MATRIX_NONE) {
    out_block[0] = amd == AMD_MATRIX_MFMA ? 64 : 32, out_block[1] = 4;
    return amd_matrix_kernel_text(sig, g, amd);
  }
  simt_tile_t st = simt_tile(g, t);
  out_block[0] = simt_threads_x(st), out_block[1] = simt_threads_y(st);
  out_grid[0] = (uint32_t)(g->n / st.tn), out_grid[1] = (uint32_t)(g->m / st.tm);
  return kernel_text(sig, g, t);
}

bool kiln_compiler_gemm_fits(const kiln_compiler_gemm_t *g, const kiln_target_t *t) {
  if (!g->found || t->kind == KILN_TARGET_KIND_CPU) return false;
  /* Invocations and workgroup memory of the kernel the target would take. */
  amd_matrix_t amd = amd_matrix(g, t);
  bool matrix = use_mma(g, t) || amd != AMD_MATRIX_NONE;
  simt_tile_t st = simt_tile(g, t);
  uint32_t x = matrix ? (amd == AMD_MATRIX_MFMA ? 64 : 32) : simt_threads_x(st),
           y = matrix ? 4 : simt_threads_y(st);
  uint64_t shared =
      matrix ? 2ull * KILN_GEMM_TILE_M * MMA_PITCH_BYTES : (uint64_t)(st.tm + st.tn) * KILN_GEMM_TILE_K * 4;
  const kiln_target_gpu_limits_t *lim = &t->limits;
  if (lim->max_workgroup_invocations < x * y || lim->max_workgroup_size[0] < x ||
      lim->max_workgroup_size[1] < y || lim->max_shared_memory_bytes < shared) {
    return false;
  }
  /* f16 operands are stored as f16: SPIR-V needs the profile's 16-bit storage
   * and Float16 (VideoCore VII has neither; its kernels keep f16 as bits).
   * bf16 operands are read as 32-bit words on every profile. */
  if (g->operand_bits == 16 && !g->bf16 && t->kind == KILN_TARGET_KIND_VULKAN) {
    return kiln_compiler_list_has(t->spirv_capabilities, "Float16") &&
           kiln_compiler_list_has(t->spirv_capabilities, "StorageBuffer16BitAccess");
  }
  return true;
}

/* ---- the replacement ---- */

kiln_status_t kiln_compiler_gemm_replace(MlirContext context, MlirModule module, MlirOperation func,
                                         const kiln_compiler_gemm_t *g, const kiln_target_t *t,
                                         const kiln_compiler_gemm_extra_t *extra, uint32_t out_grid[3],
                                         uint32_t out_block[3], MlirOperation *out_new) {
  kernel_sig_t sig;
  sig_of(func, g, &sig);
  sig.extra = extra;
  char *text = tiled_text(&sig, g, t, out_block, out_grid);
  sig_deinit(g, &sig);
  kiln_status_t st = kiln_compiler_gpu_kernel_swap(context, module, func, text, "tiled matmul", t, out_new);
  kiln_free(text);
  return st;
}

char *kiln_compiler_gemm_text(const kiln_compiler_gemm_t *g, const kiln_target_t *t, uint32_t out_block[3],
                              uint32_t out_grid[3]) {
  char *types[3] = {NULL, NULL, NULL};
  kiln_compiler_gemm_t plain = *g;
  plain.a_arg = 0, plain.b_arg = 1, plain.c_arg = 2, plain.n_args = 3;
  kernel_sig_t sig = {"gemm", types, NULL};
  return tiled_text(&sig, &plain, t, out_block, out_grid);
}
