/* Row reductions as workgroup reductions on GPU targets (gpu_reduce.h).
 *
 * The kernel, per row (workgroup x) and T invocations (t):
 *
 *   a = X[row, 0, t]                                  a vector<4>: K/4 vectors
 *   for i in 1 .. K/4T: a = op(a, X[row, 0, iT + t])   per row, T a power of two
 *   S[t] = op(op(a0, a1), op(a2, a3))                  dividing it, at most 256
 *   barrier; for s = T/2 .. 1: if t < s: S[t] = op(S[t], S[t + s]); barrier
 *   if t == 0: O[row, 0] = op(S[0], O[row, 0])
 *
 * No identity element is needed: every invocation starts from its first
 * vector. Loads are coalesced 128-bit (neighbouring invocations read
 * neighbouring vectors), and a row's K elements cost K/4T loads per invocation
 * instead of K loads in one.
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
#define MAX_ROWS 65535

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
  if (mlirOperationIsNull(guard) || !mlirBlockIsNull(mlirRegionGetFirstBlock(mlirOperationGetRegion(guard, 1)))) {
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
  MlirType tx = mlirValueGetType(mlirOperationGetOperand(x, 0)), to = mlirValueGetType(mlirOperationGetOperand(o, 0));
  if (xa < 0 || oa < 0 || xa == oa || !kiln_compiler_gpu_plain_memref(tx) || !kiln_compiler_gpu_plain_memref(to) ||
      !mlirTypeIsAF32(mlirShapedTypeGetElementType(tx)) || !mlirTypeIsAF32(mlirShapedTypeGetElementType(to)) ||
      !mlirValueEqual(mlirOperationGetOperand(x, 1), row) || !mlirValueEqual(mlirOperationGetOperand(x, 2), col) ||
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
  if (!((mlirValueEqual(a0, vx) && mlirValueEqual(a1, vo)) || (mlirValueEqual(a0, vo) && mlirValueEqual(a1, vx))) ||
      mlirOperationGetNumOperands(store) != 4 ||
      !mlirValueEqual(mlirOperationGetOperand(store, 0), mlirOperationGetResult(comb, 0)) ||
      !mlirValueEqual(mlirOperationGetOperand(store, 1), mlirOperationGetOperand(o, 0)) ||
      !mlirValueEqual(mlirOperationGetOperand(store, 2), row) || !mlirValueEqual(mlirOperationGetOperand(store, 3), col)) {
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

bool kiln_compiler_reduce_fits(const kiln_compiler_reduce_t *r, const kiln_target_t *t) {
  if (!r->found || t->kind == KILN_TARGET_KIND_CPU) return false;
  uint32_t n = threads_for(r->len);
  return n && t->limits.max_workgroup_invocations >= n && t->limits.max_workgroup_size[0] >= n &&
         t->limits.max_shared_memory_bytes >= n * 4;
}

kiln_status_t kiln_compiler_reduce_replace(MlirContext context, MlirModule module, MlirOperation func,
                                           const kiln_compiler_reduce_t *r, const kiln_target_t *t,
                                           uint32_t out_grid[3], uint32_t out_block[3]) {
  bool spirv = t->kind == KILN_TARGET_KIND_VULKAN;
  uint32_t n = threads_for(r->len);
  long long vecs = (long long)(r->len / 4), rounds = vecs / n;
  char ws[80];
  snprintf(ws, sizeof ws, "memref<%uxf32, %s>", n, spirv ? "3" : "#gpu.address_space<workgroup>");
  char xt[96];
  snprintf(xt, sizeof xt, "memref<%lldx1x%lldxvector<4xf32>>", (long long)r->rows, vecs);
  MlirBlock entry = mlirRegionGetFirstBlock(mlirOperationGetRegion(func, 0));
  char *ot = kiln_compiler_gpu_type_text(mlirValueGetType(mlirBlockGetArgument(entry, r->o_arg)));
  const char **types = kiln_calloc(r->n_args, sizeof *types);
  types[r->x_arg] = xt;
  kiln_buf_t text;
  kiln_buf_init(&text);
  kiln_buf_t *b = &text;
  kiln_compiler_gpu_kernel_open(b, func, "kiln_reduce", types, r->n_args);
  kiln_free(types);
  if (!spirv) kiln_buf_appendf(b, " workgroup(%%S : %s)", ws);
  kiln_buf_appendf(b, " kernel attributes {known_block_size = array<i32: %u, 1, 1>", n);
  if (spirv) kiln_buf_appendf(b, ", spirv.entry_point_abi = #spirv.entry_point_abi<workgroup_size = [%u, 1, 1]>", n);
  kiln_buf_append_str(b, "} {\n");
  if (spirv) kiln_buf_appendf(b, "  %%S = memref.alloc() : %s\n", ws);
  const char *op = r->op;
  kiln_buf_appendf(b,
                   "  %%c0 = arith.constant 0 : index\n  %%c1 = arith.constant 1 : index\n"
                   "  %%cn = arith.constant %u : index\n  %%rounds = arith.constant %lld : index\n"
                   "  %%t = gpu.thread_id x\n  %%row = gpu.block_id x\n"
                   "  %%first = memref.load %%arg%u[%%row, %%c0, %%t] : %s\n",
                   n, rounds, r->x_arg, xt);
  if (rounds > 1) {
    kiln_buf_appendf(b,
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
  kiln_buf_appendf(b,
                   "  %%p01 = %s %%e0, %%e1 : f32\n  %%p23 = %s %%e2, %%e3 : f32\n  %%p = %s %%p01, %%p23 : f32\n"
                   "  memref.store %%p, %%S[%%t] : %s\n  gpu.barrier\n",
                   op, op, op, ws);
  for (uint32_t s = n / 2; s >= 1; s /= 2) {
    kiln_buf_appendf(b,
                     "  %%s%u = arith.constant %u : index\n  %%lt%u = arith.cmpi ult, %%t, %%s%u : index\n"
                     "  scf.if %%lt%u {\n    %%ts%u = arith.addi %%t, %%s%u : index\n"
                     "    %%x%u = memref.load %%S[%%t] : %s\n    %%y%u = memref.load %%S[%%ts%u] : %s\n"
                     "    %%z%u = %s %%x%u, %%y%u : f32\n    memref.store %%z%u, %%S[%%t] : %s\n  }\n  gpu.barrier\n",
                     s, s, s, s, s, s, s, s, ws, s, s, ws, s, op, s, s, s, ws);
  }
  kiln_buf_appendf(b,
                   "  %%first_t = arith.cmpi eq, %%t, %%c0 : index\n  scf.if %%first_t {\n"
                   "    %%all = memref.load %%S[%%c0] : %s\n    %%old = memref.load %%arg%u[%%row, %%c0] : %s\n"
                   "    %%new = %s %%all, %%old : f32\n    memref.store %%new, %%arg%u[%%row, %%c0] : %s\n  }\n"
                   "  gpu.return\n}\n}\n",
                   ws, r->o_arg, ot, op, r->o_arg, ot);
  kiln_free(ot);
  kiln_status_t st = kiln_compiler_gpu_kernel_swap(context, module, func, text.data, "workgroup reduction", t);
  kiln_buf_deinit(&text);
  out_grid[0] = (uint32_t)r->rows, out_grid[1] = out_grid[2] = 1;
  out_block[0] = n, out_block[1] = out_block[2] = 1;
  return st;
}
