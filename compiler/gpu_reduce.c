/* Row reductions as workgroup reductions on GPU targets (gpu_reduce.h).
 *
 * The kernel, per row (workgroup x) and T invocations (t):
 *
 *   a = X[row, 0, t]                                  a vector<4>: K/4 vectors
 *   for i in 1 .. K/4T: a = op(a, X[row, 0, iT + t])   per row, T a power of two
 *   p = op(op(a0, a1), op(a2, a3))                     dividing it, at most 256
 *
 * then the T values p meet in one of three ways:
 *   - subgroup shuffles, the subgroup size W known (CUDA warps of 32, AMD waves
 *     of 64 or 32, where T is a multiple of W): a butterfly of gpu.shuffle xor
 *     1, 2 .. W/2 leaves each subgroup's value in every lane; lane 0 of each
 *     writes it to S[subgroup] (T/W floats); one barrier; subgroup 0 reads S
 *     and runs the butterfly again over T/W lanes; lane 0 writes
 *     O[row] = op(that, O[row]). With T == W there is no S and no barrier.
 *   - subgroup shuffles, the size read at run time (Vulkan profiles declaring
 *     GroupNonUniformShuffle): the same, each butterfly step under a uniform
 *     `offset < size` branch up to the largest subgroup Vulkan allows (128), and
 *     subgroup 0 first folding S[l + i*size] when there are more subgroups than
 *     its lanes. It assumes full subgroups, as every driver kiln targets forms
 *     for workgroups of a multiple of their size (T >= 32 >= Mali's 16).
 *   - a tree through workgroup memory (VideoCore VII, and a wave64 chip's
 *     32-invocation workgroup): S[t] = p; barrier; for s = T/2 .. 1: if t < s:
 *     S[t] = op(S[t], S[t + s]); barrier; invocation 0 writes the row.
 *
 * No identity element is needed: every invocation starts from its first
 * vector, and lanes past a butterfly's group hold copies that never reach lane
 * 0. Loads are coalesced 128-bit (neighbouring invocations read neighbouring
 * vectors), and a row's K elements cost K/4T loads per invocation instead of K
 * loads in one. Shuffles move values bit for bit and the op is applied as the
 * front half wrote it, so NaN and signed-zero rules stay the op's.
 */
#include "compiler/gpu_reduce.h"

#include <mlir-c/BuiltinAttributes.h>
#include <mlir-c/BuiltinTypes.h>
#include <stdio.h>
#include <string.h>

#include "base/alloc.h"
#include "base/buf.h"
#include "compiler/gpu_match.h"
#include "compiler/internal.h"
#include "compiler/kernel_types.h"

#define MAX_THREADS 256
#define MIN_THREADS 32
#define MAX_ROWS    65535

static const char *const combiners[] = {"arith.maximumf", "arith.minimumf", "arith.maxnumf",
                                        "arith.minnumf",  "arith.addf",     "arith.mulf"};

/* The invocations per row: the largest power of two up to MAX_THREADS dividing
 * the row's vectors, 0 when under MIN_THREADS. */
static uint32_t threads_for(int64_t len) {
  for (uint32_t t = MAX_THREADS; t >= MIN_THREADS; t /= 2) {
    if ((len / 4) % t == 0) return t;
  }
  return 0;
}

bool kiln_compiler_reduce_match(MlirOperation func, const uint32_t grid[3], const uint32_t block[3],
                                kiln_compiler_reduce_t *out) {
  memset(out, 0, sizeof *out);
  MlirBlock entry = kiln_compiler_gpu_kernel_entry(func);
  if (mlirBlockIsNull(entry)) return false;
  static const char *const allowed[] = {"arith.constant", "gpu.block_id", "gpu.thread_id", "affine.apply",
                                        "arith.addi",     "arith.cmpi",   "arith.andi",    "gpu.return"};
  MlirOperation guard = {NULL};
  for (MlirOperation op = mlirBlockGetFirstOperation(entry); !mlirOperationIsNull(op);
       op = mlirOperationGetNextInBlock(op)) {
    if (kiln_compiler_op_is(op, "scf.if")) {
      if (!mlirOperationIsNull(guard) || mlirOperationGetNumResults(op) != 0) return false;
      guard = op;
      continue;
    }
    if (!kiln_compiler_gpu_op_is_one_of(op, allowed, sizeof allowed / sizeof allowed[0])) return false;
  }
  if (mlirOperationIsNull(guard) ||
      !mlirBlockIsNull(mlirRegionGetFirstBlock(mlirOperationGetRegion(guard, 1)))) {
    return false;
  }
  /* The then block: the loop alone. */
  MlirBlock then = mlirRegionGetFirstBlock(mlirOperationGetRegion(guard, 0));
  MlirOperation loop = mlirBlockGetFirstOperation(then);
  int64_t len = 0;
  if (mlirOperationIsNull(loop) || !kiln_compiler_gpu_counted_loop(loop, &len)) return false;
  MlirOperation after = mlirOperationGetNextInBlock(loop);
  if (mlirOperationIsNull(after) || !kiln_compiler_op_is(after, "scf.yield") ||
      !mlirOperationIsNull(mlirOperationGetNextInBlock(after))) {
    return false;
  }
  MlirBlock body = mlirRegionGetFirstBlock(mlirOperationGetRegion(loop, 0));
  MlirValue k = mlirBlockGetArgument(body, 0);
  MlirOperation loads[2], comb = {NULL}, store = {NULL};
  size_t n_loads = 0;
  for (MlirOperation op = mlirBlockGetFirstOperation(body); !mlirOperationIsNull(op);
       op = mlirOperationGetNextInBlock(op)) {
    bool is_comb = false;
    for (size_t i = 0; i < sizeof combiners / sizeof combiners[0] && !is_comb; i++) {
      is_comb = kiln_compiler_op_is(op, combiners[i]);
      if (is_comb) out->op = combiners[i];
    }
    if (kiln_compiler_op_is(op, "memref.load") && n_loads < 2) {
      loads[n_loads++] = op;
    } else if (is_comb && mlirOperationIsNull(comb)) {
      comb = op;
    } else if (kiln_compiler_op_is(op, "memref.store") && mlirOperationIsNull(store)) {
      store = op;
    } else if (!kiln_compiler_op_is(op, "scf.yield") || mlirOperationGetNumOperands(op) != 0) {
      return false;
    }
  }
  if (n_loads != 2 || mlirOperationIsNull(comb) || mlirOperationIsNull(store)) return false;
  /* X[row, col, k] and O[row, col]. */
  MlirOperation x = mlirOperationGetNumOperands(loads[0]) == 4 ? loads[0] : loads[1];
  MlirOperation o = mlirOperationEqual(x, loads[0]) ? loads[1] : loads[0];
  if (mlirOperationGetNumOperands(x) != 4 || mlirOperationGetNumOperands(o) != 3 ||
      !mlirValueEqual(mlirOperationGetOperand(x, 3), k)) {
    return false;
  }
  MlirValue row = mlirOperationGetOperand(o, 1), col = mlirOperationGetOperand(o, 2);
  int xa = kiln_compiler_gpu_arg_of(mlirOperationGetOperand(x, 0), entry);
  int oa = kiln_compiler_gpu_arg_of(mlirOperationGetOperand(o, 0), entry);
  MlirType tx = mlirValueGetType(mlirOperationGetOperand(x, 0)),
           to = mlirValueGetType(mlirOperationGetOperand(o, 0));
  if (xa < 0 || oa < 0 || xa == oa || !kiln_compiler_gpu_plain_memref(tx) ||
      !kiln_compiler_gpu_plain_memref(to) || !mlirTypeIsAF32(mlirShapedTypeGetElementType(tx)) ||
      !mlirTypeIsAF32(mlirShapedTypeGetElementType(to)) ||
      !mlirValueEqual(mlirOperationGetOperand(x, 1), row) ||
      !mlirValueEqual(mlirOperationGetOperand(x, 2), col) ||
      !(kiln_compiler_gpu_is_tile_index(row, 'y', 'y', block[1]) ||
        (grid[1] == 1 && kiln_compiler_gpu_is_id(row, "gpu.thread_id", 'y'))) ||
      !kiln_compiler_gpu_is_id(col, "gpu.thread_id", 'x')) {
    return false;
  }
  int64_t rows = mlirShapedTypeGetDimSize(to, 0);
  if (mlirShapedTypeGetDimSize(to, 1) != 1 || mlirShapedTypeGetDimSize(tx, 0) != rows ||
      mlirShapedTypeGetDimSize(tx, 1) != 1 || mlirShapedTypeGetDimSize(tx, 2) != len) {
    return false;
  }
  /* The guard: exactly row < R and col < 1. */
  MlirOperation leaves[KILN_COMPILER_GPU_MAX_LEAVES];
  size_t n_leaves = 0;
  int64_t r_bound = -1, c_bound = -1;
  if (!kiln_compiler_gpu_and_leaves(mlirOperationGetOperand(guard, 0), leaves, &n_leaves) || n_leaves != 2) {
    return false;
  }
  bool guarded = false;
  for (int i = 0; i < 2 && !guarded; i++) {
    guarded = kiln_compiler_gpu_is_below(leaves[i], row, &r_bound) &&
              kiln_compiler_gpu_is_below(leaves[1 - i], col, &c_bound);
  }
  if (!guarded || r_bound != rows || c_bound != 1) return false;
  /* o = op(x, o) (or op(o, x)), stored where it was read. */
  MlirValue a0 = mlirOperationGetOperand(comb, 0), a1 = mlirOperationGetOperand(comb, 1);
  MlirValue vx = mlirOperationGetResult(x, 0), vo = mlirOperationGetResult(o, 0);
  if (!((mlirValueEqual(a0, vx) && mlirValueEqual(a1, vo)) ||
        (mlirValueEqual(a0, vo) && mlirValueEqual(a1, vx))) ||
      mlirOperationGetNumOperands(store) != 4 ||
      !mlirValueEqual(mlirOperationGetOperand(store, 0), mlirOperationGetResult(comb, 0)) ||
      !mlirValueEqual(mlirOperationGetOperand(store, 1), mlirOperationGetOperand(o, 0)) ||
      !mlirValueEqual(mlirOperationGetOperand(store, 2), row) ||
      !mlirValueEqual(mlirOperationGetOperand(store, 3), col)) {
    return false;
  }
  if ((uint64_t)grid[1] * block[1] < (uint64_t)rows || grid[0] != 1 || grid[2] != 1 || rows > MAX_ROWS ||
      len % 4 || !threads_for(len)) {
    return false;
  }
  out->found = true;
  out->rows = rows;
  out->len = len;
  out->x_arg = (unsigned)xa;
  out->o_arg = (unsigned)oa;
  out->n_args = (unsigned)mlirBlockGetNumArguments(entry);
  return true;
}

/* How the invocations' partial results meet (the file comment). */
typedef enum {
  COMBINE_TREE,    /* through workgroup memory, halving each round */
  COMBINE_FIXED,   /* subgroup shuffles, the subgroup size known (CUDA warps, AMD waves) */
  COMBINE_RUNTIME, /* subgroup shuffles, the size read at run time (Vulkan) */
} combine_t;

static combine_t combine_for(uint32_t n, const kiln_target_t *t) {
  switch (t->kind) {
    case KILN_TARGET_KIND_CUDA:
    case KILN_TARGET_KIND_HIP:
      /* A wave64 chip's 32-invocation workgroup is half a wave: the tree. */
      return t->limits.subgroup_size && n % t->limits.subgroup_size == 0 ? COMBINE_FIXED : COMBINE_TREE;
    case KILN_TARGET_KIND_VULKAN:
      return kiln_compiler_list_has(t->spirv_capabilities, "GroupNonUniformShuffle") &&
                     n >= t->limits.subgroup_size
                 ? COMBINE_RUNTIME
                 : COMBINE_TREE;
    case KILN_TARGET_KIND_CPU: break;
  }
  return COMBINE_TREE;
}

bool kiln_compiler_reduce_fits(const kiln_compiler_reduce_t *r, const kiln_target_t *t) {
  if (!r->found || t->kind == KILN_TARGET_KIND_CPU) return false;
  uint32_t n = threads_for(r->len);
  return n && t->limits.max_workgroup_invocations >= n && t->limits.max_workgroup_size[0] >= n &&
         t->limits.max_shared_memory_bytes >= n * 4;
}

/* Appends the butterfly that leaves every lane of a group of `width` lanes (a
 * power of two) holding op over the group's values of `from`, for xor offsets
 * 1, 2, 4 ... below `width`; the result's name goes to out[32]. With `width`
 * 0 the group is the runtime value `bound` (an i32 SSA name): each offset up
 * to the largest Vulkan subgroup (128) runs under `offset < bound`, a uniform
 * branch. `%w` is the shuffle's width operand, defined by the caller. */
static void butterfly(kiln_buf_t *b, const char *op, const char *from, const char *tag, uint32_t width,
                      const char *bound, char prev[32]) {
  snprintf(prev, 32, "%s", from);
  uint32_t top = width ? width : 128;
  for (uint32_t off = 1; off < top; off *= 2) {
    kiln_buf_appendf(b, "  %%%s_o%u = arith.constant %u : i32\n", tag, off, off);
    if (width) {
      kiln_buf_appendf(b,
                       "  %%%s_h%u, %%%s_ok%u = gpu.shuffle xor %s, %%%s_o%u, %%w : f32\n"
                       "  %%%s_q%u = %s %s, %%%s_h%u : f32\n",
                       tag, off, tag, off, prev, tag, off, tag, off, op, prev, tag, off);
    } else {
      kiln_buf_appendf(b,
                       "  %%%s_in%u = arith.cmpi ult, %%%s_o%u, %s : i32\n"
                       "  %%%s_q%u = scf.if %%%s_in%u -> (f32) {\n"
                       "    %%%s_h%u, %%%s_ok%u = gpu.shuffle xor %s, %%%s_o%u, %%w : f32\n"
                       "    %%%s_c%u = %s %s, %%%s_h%u : f32\n    scf.yield %%%s_c%u : f32\n"
                       "  } else {\n    scf.yield %s : f32\n  }\n",
                       tag, off, tag, off, bound, tag, off, tag, off, tag, off, tag, off, prev, tag, off, tag,
                       off, op, prev, tag, off, tag, off, prev);
    }
    snprintf(prev, 32, "%%%s_q%u", tag, off);
  }
}

/* Appends "O[row] = op(<value>, O[row])". */
static void store_result(kiln_buf_t *b, const kiln_compiler_reduce_t *r, const char *value, const char *ot) {
  kiln_buf_appendf(b,
                   "    %%old = memref.load %%arg%u[%%row, %%c0] : %s\n"
                   "    %%new = %s %s, %%old : f32\n    memref.store %%new, %%arg%u[%%row, %%c0] : %s\n",
                   r->o_arg, ot, r->op, value, r->o_arg, ot);
}

/* The kernel after its signature: the function's attributes, body and the
 * closing braces of the gpu.func and gpu.module. */
static void reduce_body(kiln_buf_t *b, const kiln_compiler_reduce_t *r, const kiln_target_t *t,
                        const char *xt, const char *ot) {
  bool spirv = t->kind == KILN_TARGET_KIND_VULKAN;
  uint32_t n = threads_for(r->len);
  combine_t how = combine_for(n, t);
  uint32_t sg = t->limits.subgroup_size, groups = how == COMBINE_FIXED ? n / sg : n;
  long long vecs = (long long)(r->len / 4), rounds = vecs / n;
  const char *op = r->op;
  char ws[80];
  snprintf(ws, sizeof ws, "memref<%uxf32, %s>", groups, spirv ? "3" : "#gpu.address_space<workgroup>");
  bool shared = groups > 1;
  if (!spirv && shared) kiln_buf_appendf(b, " workgroup(%%S : %s)", ws);
  kiln_buf_appendf(b, " kernel attributes {known_block_size = array<i32: %u, 1, 1>", n);
  if (spirv)
    kiln_buf_appendf(b, ", spirv.entry_point_abi = #spirv.entry_point_abi<workgroup_size = [%u, 1, 1]>", n);
  kiln_buf_append_str(b, "} {\n");
  if (spirv && shared) kiln_buf_appendf(b, "  %%S = memref.alloc() : %s\n", ws);
  kiln_buf_appendf(b,
                   "  %%c0 = arith.constant 0 : index\n  %%c1 = arith.constant 1 : index\n"
                   "  %%cn = arith.constant %u : index\n  %%rounds = arith.constant %lld : index\n"
                   "  %%t = gpu.thread_id x\n  %%row = gpu.block_id x\n"
                   "  %%first = memref.load %%arg%u[%%row, %%c0, %%t] : %s\n",
                   n, rounds, r->x_arg, xt);
  if (rounds > 1) {
    kiln_buf_appendf(
        b,
        "  %%acc = scf.for %%i = %%c1 to %%rounds step %%c1 iter_args(%%a = %%first) -> (vector<4xf32>) {\n"
        "    %%in = arith.muli %%i, %%cn : index\n    %%ix = arith.addi %%in, %%t : index\n"
        "    %%v = memref.load %%arg%u[%%row, %%c0, %%ix] : %s\n"
        "    %%m = %s %%a, %%v : vector<4xf32>\n    scf.yield %%m : vector<4xf32>\n  }\n",
        r->x_arg, xt, op);
  }
  /* One vector per invocation: no loop (a loop of no iterations with an
   * iteration argument came out of MLIR's SPIR-V lowering reading garbage). */
  const char *acc = rounds > 1 ? "%acc" : "%first";
  for (int j = 0; j < 4; j++) {
    kiln_buf_appendf(b, "  %%e%d = vector.extract %s[%d] : f32 from vector<4xf32>\n", j, acc, j);
  }
  kiln_buf_appendf(
      b, "  %%p01 = %s %%e0, %%e1 : f32\n  %%p23 = %s %%e2, %%e3 : f32\n  %%p = %s %%p01, %%p23 : f32\n", op,
      op, op);
  if (how == COMBINE_TREE) {
    kiln_buf_appendf(b, "  memref.store %%p, %%S[%%t] : %s\n  gpu.barrier\n", ws);
    for (uint32_t s = n / 2; s >= 1; s /= 2) {
      kiln_buf_appendf(
          b,
          "  %%s%u = arith.constant %u : index\n  %%lt%u = arith.cmpi ult, %%t, %%s%u : index\n"
          "  scf.if %%lt%u {\n    %%ts%u = arith.addi %%t, %%s%u : index\n"
          "    %%x%u = memref.load %%S[%%t] : %s\n    %%y%u = memref.load %%S[%%ts%u] : %s\n"
          "    %%z%u = %s %%x%u, %%y%u : f32\n    memref.store %%z%u, %%S[%%t] : %s\n  }\n  gpu.barrier\n",
          s, s, s, s, s, s, s, s, ws, s, s, ws, s, op, s, s, s, ws);
    }
    kiln_buf_appendf(b,
                     "  %%first_t = arith.cmpi eq, %%t, %%c0 : index\n  scf.if %%first_t {\n"
                     "    %%all = memref.load %%S[%%c0] : %s\n",
                     ws);
    store_result(b, r, "%all", ot);
    kiln_buf_append_str(b, "  }\n  gpu.return\n}\n}\n");
    return;
  }
  char a[32], all[32]; /* the subgroup's value, the workgroup's */
  /* Shuffles: each subgroup combines its lanes' values, lane 0 of each writes
   * one value, and subgroup 0 combines those. SPIR-V's shuffle takes no width;
   * MLIR's conversion still wants the operand to equal the target environment's
   * subgroup size, which kiln leaves at its default of 32. */
  kiln_buf_appendf(b, "  %%w = arith.constant %u : i32\n", how == COMBINE_FIXED ? sg : 32u);
  if (how == COMBINE_FIXED) {
    butterfly(b, op, "%p", "a", sg, NULL, a);
    kiln_buf_appendf(b,
                     "  %%csg = arith.constant %u : index\n  %%lane = arith.remui %%t, %%csg : index\n"
                     "  %%sid = arith.divui %%t, %%csg : index\n",
                     sg);
  } else {
    kiln_buf_append_str(b,
                        "  %sg = gpu.subgroup_size : index\n  %sgi = arith.index_cast %sg : index to i32\n");
    butterfly(b, op, "%p", "a", 0, "%sgi", a);
    kiln_buf_append_str(b, "  %lane = gpu.lane_id\n  %sid = gpu.subgroup_id : index\n");
  }
  kiln_buf_append_str(b, "  %lane0 = arith.cmpi eq, %lane, %c0 : index\n");
  if (!shared) { /* one subgroup: its lane 0 has the row */
    kiln_buf_append_str(b, "  scf.if %lane0 {\n");
    store_result(b, r, a, ot);
    kiln_buf_append_str(b, "  }\n  gpu.return\n}\n}\n");
    return;
  }
  kiln_buf_appendf(b,
                   "  scf.if %%lane0 {\n    memref.store %s, %%S[%%sid] : %s\n  }\n  gpu.barrier\n"
                   "  %%sg0 = arith.cmpi eq, %%sid, %%c0 : index\n  scf.if %%sg0 {\n",
                   a, ws);
  if (how == COMBINE_FIXED) {
    /* groups <= sg: lane l reads S[l mod groups]; offsets below groups keep
     * lanes 0 .. groups-1 among themselves. */
    kiln_buf_appendf(b,
                     "  %%gm = arith.constant %u : index\n  %%li = arith.andi %%lane, %%gm : index\n"
                     "  %%r0 = memref.load %%S[%%li] : %s\n",
                     groups - 1, ws);
    butterfly(b, op, "%r0", "b", groups, NULL, all);
  } else {
    /* n / sg values: lane l combines S[l + i*sg] when there are more than the
     * subgroup's lanes, else reads S[l mod count]; then a butterfly over
     * min(count, sg) lanes. */
    kiln_buf_appendf(
        b,
        "  %%cnt = arith.divui %%cn, %%sg : index\n  %%m = arith.minui %%cnt, %%sg : index\n"
        "  %%mi = arith.index_cast %%m : index to i32\n  %%m1 = arith.subi %%m, %%c1 : index\n"
        "  %%li = arith.andi %%lane, %%m1 : index\n  %%r0 = memref.load %%S[%%li] : %s\n"
        "  %%more = arith.divui %%cnt, %%sg : index\n  %%many = arith.cmpi ugt, %%more, %%c1 : index\n"
        "  %%r1 = scf.if %%many -> (f32) {\n"
        "    %%racc = scf.for %%j = %%c1 to %%more step %%c1 iter_args(%%ra = %%r0) -> (f32) {\n"
        "      %%js = arith.muli %%j, %%sg : index\n      %%jx = arith.addi %%js, %%lane : index\n"
        "      %%rv = memref.load %%S[%%jx] : %s\n      %%rm = %s %%ra, %%rv : f32\n"
        "      scf.yield %%rm : f32\n    }\n    scf.yield %%racc : f32\n"
        "  } else {\n    scf.yield %%r0 : f32\n  }\n",
        ws, ws, op);
    butterfly(b, op, "%r1", "b", 0, "%mi", all);
  }
  kiln_buf_append_str(b, "  scf.if %lane0 {\n");
  store_result(b, r, all, ot);
  kiln_buf_append_str(b, "  }\n  }\n  gpu.return\n}\n}\n");
}

kiln_status_t kiln_compiler_reduce_replace(MlirContext context, MlirModule module, MlirOperation func,
                                           const kiln_compiler_reduce_t *r, const kiln_target_t *t,
                                           uint32_t out_grid[3], uint32_t out_block[3]) {
  char xt[96];
  snprintf(xt, sizeof xt, "memref<%lldx1x%lldxvector<4xf32>>", (long long)r->rows, (long long)(r->len / 4));
  MlirBlock entry = mlirRegionGetFirstBlock(mlirOperationGetRegion(func, 0));
  char *ot = kiln_compiler_gpu_type_text(mlirValueGetType(mlirBlockGetArgument(entry, r->o_arg)));
  const char **types = kiln_calloc(r->n_args, sizeof *types);
  types[r->x_arg] = xt;
  kiln_buf_t text;
  kiln_buf_init(&text);
  kiln_compiler_gpu_kernel_open(&text, func, "kiln_reduce", types, r->n_args);
  kiln_free(types);
  reduce_body(&text, r, t, xt, ot);
  kiln_free(ot);
  kiln_status_t st =
      kiln_compiler_gpu_kernel_swap(context, module, func, text.data, "workgroup reduction", t, NULL);
  kiln_buf_deinit(&text);
  out_grid[0] = (uint32_t)r->rows, out_grid[1] = out_grid[2] = 1;
  out_block[0] = threads_for(r->len), out_block[1] = out_block[2] = 1;
  return st;
}

char *kiln_compiler_reduce_text(const kiln_compiler_reduce_t *r, const kiln_target_t *t,
                                uint32_t out_block[3], uint32_t out_grid[3]) {
  char xt[96], ot[64];
  snprintf(xt, sizeof xt, "memref<%lldx1x%lldxvector<4xf32>>", (long long)r->rows, (long long)(r->len / 4));
  snprintf(ot, sizeof ot, "memref<%lldx1xf32>", (long long)r->rows);
  const char *types[2] = {xt, ot};
  kiln_buf_t text;
  kiln_buf_init(&text);
  kiln_compiler_gpu_kernel_open_named(&text, "kiln_reduce", "reduce", 6, types, 2);
  kiln_compiler_reduce_t plain = *r;
  plain.x_arg = 0, plain.o_arg = 1, plain.n_args = 2;
  reduce_body(&text, &plain, t, xt, ot);
  out_grid[0] = (uint32_t)r->rows, out_grid[1] = out_grid[2] = 1;
  out_block[0] = threads_for(r->len), out_block[1] = out_block[2] = 1;
  return kiln_buf_take(&text);
}
