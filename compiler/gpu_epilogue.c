/* Elementwise epilogues fused into tiled matmuls (gpu_epilogue.h).
 *
 * E is read twice: on the front half's kernel to decide whether the plan may
 * fuse it (its shape and which arguments may hold C), and on the target's own
 * copy, after type preparation, for the ops to copy: the backward slice of the
 * stored value, which stops at the load of C and at the stored element's
 * indices. Applying it clones that slice before every store of accumulators to
 * C in the tiled kernel, once per vector lane, with E's indices replaced by the
 * accumulator's [batch,] row and column and E's buffers by the kernel's extra
 * arguments; the arithmetic per element is E's, unchanged.
 */
#include "compiler/gpu_epilogue.h"

#include <mlir-c/BuiltinAttributes.h>
#include <mlir-c/BuiltinTypes.h>
#include <string.h>

#include "base/alloc.h"
#include "compiler/gpu_match.h"
#include "compiler/internal.h"
#include "compiler/kernel_types.h"

#define MAX_SLICE 256 /* ops an epilogue may copy */
#define MAX_LANES 8

/* What E may hold: index arithmetic, constants, loads, its store, arith and
 * math ops on values. Anything else (an atomic, a call, a vector store) has
 * effects the fused kernel would not keep. */
static bool allowed(MlirOperation op) {
  static const char *const names[] = {"arith.constant", "gpu.block_id", "gpu.thread_id", "gpu.block_dim",
                                      "gpu.grid_dim",   "affine.apply", "arith.addi",    "arith.muli",
                                      "arith.subi",     "arith.divui",  "arith.remui",   "arith.cmpi",
                                      "arith.andi",     "memref.load",  "memref.store",  "gpu.return"};
  return kiln_compiler_gpu_op_is_one_of(op, names, sizeof names / sizeof names[0]) ||
         kiln_compiler_gpu_value_op(op);
}

/* E's body: its entry block, holding E's one store and nothing with a region
 * (the front half guards a kernel whose tiles overhang its output; the tiled
 * matmul and conv take exact tiles only, so their epilogues have no guard). */
typedef struct body_s {
  MlirBlock entry;
  MlirOperation store;
} body_t;

static bool read_body(MlirOperation func, body_t *b) {
  memset(b, 0, sizeof *b);
  b->entry = kiln_compiler_gpu_kernel_entry(func);
  if (mlirBlockIsNull(b->entry)) return false;
  for (MlirOperation op = mlirBlockGetFirstOperation(b->entry); !mlirOperationIsNull(op);
       op = mlirOperationGetNextInBlock(op)) {
    if (mlirOperationGetNumRegions(op) != 0 || !allowed(op)) return false;
    if (!kiln_compiler_op_is(op, "memref.store")) continue;
    if (!mlirOperationIsNull(b->store)) return false;
    b->store = op;
  }
  return !mlirOperationIsNull(b->store);
}

/* Whether memref.load `load` reads at exactly `store`'s indices. */
static bool load_at(MlirOperation load, MlirOperation store) {
  intptr_t n = mlirOperationGetNumOperands(load);
  if (n != mlirOperationGetNumOperands(store) - 1) return false;
  for (intptr_t i = 1; i < n; i++) {
    if (!mlirValueEqual(mlirOperationGetOperand(load, i), mlirOperationGetOperand(store, i + 1)))
      return false;
  }
  return true;
}

/* Whether memref type `c` could be the matmul's C for an E storing to D of
 * type `d`: a plain f32 buffer of D's shape. */
static bool c_like(MlirType c, MlirType d) {
  if (!kiln_compiler_gpu_plain_memref(c) || !mlirTypeIsAF32(mlirShapedTypeGetElementType(c)) ||
      mlirShapedTypeGetRank(c) != mlirShapedTypeGetRank(d)) {
    return false;
  }
  for (intptr_t k = 0; k < mlirShapedTypeGetRank(c); k++) {
    if (mlirShapedTypeGetDimSize(c, k) != mlirShapedTypeGetDimSize(d, k)) return false;
  }
  return true;
}

/* The store's index as the front half tiles it: its own thread and block
 * dimension, tile * grid equal to the dimension. */
static bool tiled_index(MlirValue v, int64_t dim, const uint32_t grid[3], const uint32_t block[3],
                        bool thread_used[3], bool block_used[3]) {
  static const char xyz[3] = {'x', 'y', 'z'};
  for (int td = 0; td < 3; td++) {
    for (int bd = 0; bd < 3; bd++) {
      if (thread_used[td] || block_used[bd] || (uint64_t)grid[bd] * block[td] != (uint64_t)dim ||
          !kiln_compiler_gpu_is_tile_index(v, xyz[td], xyz[bd], block[td])) {
        continue;
      }
      thread_used[td] = block_used[bd] = true;
      return true;
    }
  }
  return false;
}

bool kiln_compiler_epilogue_match(MlirOperation func, const uint32_t grid[3], const uint32_t block[3],
                                  kiln_compiler_epilogue_t *out) {
  memset(out, 0, sizeof *out);
  body_t b;
  if (!read_body(func, &b)) return false;
  intptr_t n_args = mlirBlockGetNumArguments(b.entry);
  if (n_args < 2 || n_args > 32) return false;
  for (intptr_t a = 0; a < n_args; a++) {
    if (!mlirTypeIsAMemRef(mlirValueGetType(mlirBlockGetArgument(b.entry, a)))) return false;
  }
  MlirOperation store = b.store;
  int d = kiln_compiler_gpu_arg_of(mlirOperationGetOperand(store, 1), b.entry);
  MlirType t = mlirValueGetType(mlirOperationGetOperand(store, 1));
  MlirType d_elem = d < 0 ? (MlirType){NULL} : mlirShapedTypeGetElementType(t);
  if (d < 0 || !kiln_compiler_gpu_plain_memref(t) ||
      !(mlirTypeIsAF32(d_elem) || mlirTypeIsAF16(d_elem) || mlirTypeIsABF16(d_elem))) {
    return false;
  }
  int rank = (int)mlirShapedTypeGetRank(t);
  if (rank < 2 || rank > 4 || mlirOperationGetNumOperands(store) != rank + 2) return false;
  MlirValue idx[4];
  for (int k = 0; k < rank; k++) {
    idx[k] = mlirOperationGetOperand(store, k + 2);
    out->dims[k] = mlirShapedTypeGetDimSize(t, k);
  }
  /* The indices cover D once: each dimension its own thread and block
   * dimension, every other one of size 1. An NHWC output (rank 4, a conv's)
   * has its images and rows folded into block x, as gpu_gemm's conv reads them. */
  bool thread_used[3] = {false, false, false}, block_used[3] = {false, false, false};
  int first = 0;
  if (rank == 4) {
    if (!kiln_compiler_gpu_image_rows(idx[0], idx[1], out->dims[0], out->dims[1]) ||
        (uint64_t)grid[0] != (uint64_t)out->dims[0] * (uint64_t)out->dims[1]) {
      return false;
    }
    block_used[0] = true;
    first = 2;
  }
  for (int k = first; k < rank; k++) {
    if (kiln_compiler_gpu_is_zero(idx[k])) {
      if (out->dims[k] != 1) return false;
    } else if (rank == 3 && k == 0 && kiln_compiler_gpu_is_id(idx[k], "gpu.block_id", 'x')) {
      if (block_used[0] || grid[0] != (uint64_t)out->dims[0]) return false;
      block_used[0] = true;
    } else if (!tiled_index(idx[k], out->dims[k], grid, block, thread_used, block_used)) {
      return false;
    }
  }
  for (int i = 0; i < 3; i++) {
    if ((!thread_used[i] && block[i] != 1) || (!block_used[i] && grid[i] != 1)) return false;
  }
  for (MlirOperation op = mlirBlockGetFirstOperation(b.entry); !mlirOperationIsNull(op);
       op = mlirOperationGetNextInBlock(op)) {
    if (!kiln_compiler_op_is(op, "memref.load")) continue;
    int a = kiln_compiler_gpu_arg_of(mlirOperationGetOperand(op, 0), b.entry);
    if (a >= 0 && a != d && c_like(mlirValueGetType(mlirOperationGetOperand(op, 0)), t) &&
        load_at(op, store)) {
      out->c_candidates |= 1u << a;
    }
  }
  if (!out->c_candidates) return false;
  out->found = true;
  out->rank = rank;
  out->d_arg = (unsigned)d;
  out->n_args = (unsigned)n_args;
  out->d_bytes = mlirTypeIsAF32(d_elem) ? 4 : 2;
  return true;
}

/* ---- the slice ---- */

typedef struct slice_s {
  MlirBlock entry;
  MlirOperation store;
  MlirOperation ops[MAX_SLICE]; /* in block order; loads of C among them */
  size_t n;
} slice_t;

static bool has_value(const MlirValue *vs, size_t n, MlirValue v) {
  for (size_t i = 0; i < n; i++) {
    if (mlirValueEqual(vs[i], v)) return true;
  }
  return false;
}

/* Whether `v` is one of `store`'s indices that is not a constant (those map to
 * the accumulator's). */
static bool is_store_index(MlirOperation store, MlirValue v) {
  if (kiln_compiler_gpu_is_zero(v)) return false;
  for (intptr_t i = 2; i < mlirOperationGetNumOperands(store); i++) {
    if (mlirValueEqual(mlirOperationGetOperand(store, i), v)) return true;
  }
  return false;
}

/* E's ops that the stored value depends on, walking back from the store. */
static bool read_slice(MlirOperation func, unsigned c_arg, slice_t *s) {
  memset(s, 0, sizeof *s);
  body_t b;
  if (!read_body(func, &b)) return false;
  s->entry = b.entry;
  s->store = b.store;
  size_t n_all = 0;
  for (MlirOperation op = mlirBlockGetFirstOperation(b.entry); !mlirOperationIsNull(op);
       op = mlirOperationGetNextInBlock(op)) {
    n_all++;
  }
  MlirOperation *all = kiln_calloc(n_all + 1, sizeof *all);
  n_all = 0;
  for (MlirOperation op = mlirBlockGetFirstOperation(b.entry); !mlirOperationIsNull(op);
       op = mlirOperationGetNextInBlock(op)) {
    all[n_all++] = op;
  }
  MlirValue needed[4 * MAX_SLICE];
  size_t n_needed = 0;
  needed[n_needed++] = mlirOperationGetOperand(s->store, 0);
  MlirOperation picked[MAX_SLICE];
  size_t n_picked = 0;
  bool ok = true;
  for (size_t i = n_all; ok && i-- > 0;) {
    MlirOperation op = all[i];
    bool wanted = false;
    for (intptr_t r = 0; r < mlirOperationGetNumResults(op) && !wanted; r++) {
      wanted = has_value(needed, n_needed, mlirOperationGetResult(op, r));
    }
    if (!wanted) continue;
    if (n_picked == MAX_SLICE) {
      ok = false;
      break;
    }
    picked[n_picked++] = op;
    intptr_t first = 0;
    if (kiln_compiler_op_is(op, "memref.load")) {
      int a = kiln_compiler_gpu_arg_of(mlirOperationGetOperand(op, 0), s->entry);
      /* D read back (an in-place epilogue) is not taken: in the fused kernel D
       * has C's vector form. */
      if (a < 0 || a == kiln_compiler_gpu_arg_of(mlirOperationGetOperand(s->store, 1), s->entry))
        ok = false;
      else if ((unsigned)a == c_arg)
        ok = load_at(op, s->store);
      first = 1;
      if (!ok || (unsigned)a == c_arg) continue;
    } else if (!kiln_compiler_op_is(op, "arith.constant") && !kiln_compiler_gpu_value_op(op)) {
      ok = false;
      break;
    }
    for (intptr_t k = first; k < mlirOperationGetNumOperands(op); k++) {
      MlirValue v = mlirOperationGetOperand(op, k);
      if (first && is_store_index(s->store, v)) continue;
      /* Anything else must come from an op of the slice: a block argument here
       * (a scalar kernel argument) is not taken. */
      if (mlirValueIsABlockArgument(v) || n_needed == sizeof needed / sizeof needed[0]) {
        ok = false;
        break;
      }
      if (!has_value(needed, n_needed, v)) needed[n_needed++] = v;
    }
  }
  /* An index other than the stored element's must be a constant. */
  for (size_t i = 0; ok && i < n_picked; i++) {
    MlirOperation op = picked[i];
    if (!kiln_compiler_op_is(op, "memref.load")) continue;
    for (intptr_t k = 1; ok && k < mlirOperationGetNumOperands(op); k++) {
      MlirValue v = mlirOperationGetOperand(op, k);
      MlirOperation def = kiln_compiler_gpu_def_of(v);
      ok = is_store_index(s->store, v) ||
           (!mlirOperationIsNull(def) && kiln_compiler_op_is(def, "arith.constant"));
    }
  }
  kiln_free(all);
  if (!ok) return false;
  for (size_t i = 0; i < n_picked; i++) s->ops[i] = picked[n_picked - 1 - i];
  s->n = n_picked;
  return true;
}

bool kiln_compiler_epilogue_fits(MlirOperation func, unsigned c_arg) {
  slice_t s;
  if (!read_slice(func, c_arg, &s)) return false;
  /* What applying it relies on: D a buffer of rank 2 to 4, not C, of f32, f16,
   * bf16, or 16-bit floats as bits (i16: bf16 where the target has no bf16). */
  MlirValue d = mlirOperationGetOperand(s.store, 1);
  MlirType t = mlirValueGetType(d);
  int a = kiln_compiler_gpu_arg_of(d, s.entry);
  intptr_t rank = mlirShapedTypeGetRank(t);
  MlirType e = mlirShapedTypeGetElementType(t);
  bool elem = mlirTypeIsAF32(e) || mlirTypeIsAF16(e) || mlirTypeIsABF16(e) ||
              (mlirTypeIsAInteger(e) && mlirIntegerTypeGetWidth(e) == 16);
  return a >= 0 && (unsigned)a != c_arg && kiln_compiler_gpu_plain_memref(t) && elem && rank >= 2 &&
         rank <= 4 && mlirOperationGetNumOperands(s.store) == rank + 2;
}

/* ---- applying it ---- */

typedef struct map_s {
  MlirValue from[4 * MAX_SLICE], to[4 * MAX_SLICE];
  size_t n;
} map_t;

static void map_put(map_t *m, MlirValue from, MlirValue to) {
  if (m->n < sizeof m->from / sizeof m->from[0]) m->from[m->n] = from, m->to[m->n++] = to;
}

static MlirValue map_get(const map_t *m, MlirValue v) {
  for (size_t i = m->n; i-- > 0;) {
    if (mlirValueEqual(m->from[i], v)) return m->to[i];
  }
  return (MlirValue){NULL};
}

typedef struct stores_s {
  MlirValue c;
  MlirOperation *items;
  size_t n, cap;
} stores_t;

static MlirWalkResult collect_stores(MlirOperation op, void *user) {
  stores_t *s = user;
  if (!kiln_compiler_op_is(op, "memref.store") || !mlirValueEqual(mlirOperationGetOperand(op, 1), s->c)) {
    return MlirWalkResultAdvance;
  }
  if (s->n == s->cap) {
    s->cap = s->cap ? 2 * s->cap : 16;
    s->items = kiln_realloc(s->items, s->cap * sizeof *s->items);
  }
  s->items[s->n++] = op;
  return MlirWalkResultAdvance;
}

/* One lane of E's arithmetic before `at`: `m` holds E's buffers and indices;
 * the result stands for E's stored value. */
static MlirValue copy_lane(const slice_t *s, unsigned e_c_arg, map_t *m, MlirValue x, MlirOperation at) {
  for (size_t i = 0; i < s->n; i++) {
    MlirOperation op = s->ops[i];
    if (kiln_compiler_op_is(op, "memref.load") &&
        kiln_compiler_gpu_arg_of(mlirOperationGetOperand(op, 0), s->entry) == (int)e_c_arg) {
      map_put(m, mlirOperationGetResult(op, 0), x);
      continue;
    }
    MlirOperation copy = mlirOperationClone(op);
    for (intptr_t k = 0; k < mlirOperationGetNumOperands(op); k++) {
      MlirValue to = map_get(m, mlirOperationGetOperand(op, k));
      if (mlirValueIsNull(to)) {
        mlirOperationDestroy(copy);
        return (MlirValue){NULL};
      }
      mlirOperationSetOperand(copy, k, to);
    }
    mlirBlockInsertOwnedOperationBefore(mlirOperationGetBlock(at), at, copy);
    for (intptr_t r = 0; r < mlirOperationGetNumResults(op); r++) {
      map_put(m, mlirOperationGetResult(op, r), mlirOperationGetResult(copy, r));
    }
  }
  return map_get(m, mlirOperationGetOperand(s->store, 0));
}

kiln_status_t kiln_compiler_epilogue_apply(MlirContext context, MlirOperation g_func, unsigned g_c_arg,
                                           unsigned g_n_args, MlirOperation e_func, unsigned e_c_arg,
                                           bool keep_c, const char *target_id) {
  slice_t s;
  MlirBlock g_entry = mlirRegionGetFirstBlock(mlirOperationGetRegion(g_func, 0));
  if (!read_slice(e_func, e_c_arg, &s) || mlirBlockIsNull(g_entry)) {
    return KILN_STATUS(KILN_STATUS_INTERNAL, "the fused epilogue for %s no longer reads as one (kiln bug)",
                       target_id);
  }
  intptr_t rank = mlirOperationGetNumOperands(s.store) - 2;
  int d_arg = kiln_compiler_gpu_arg_of(mlirOperationGetOperand(s.store, 1), s.entry);
  intptr_t e_args = mlirBlockGetNumArguments(s.entry);
  if (d_arg < 0 || (unsigned)d_arg == e_c_arg ||
      (intptr_t)g_n_args + e_args - 1 > mlirBlockGetNumArguments(g_entry)) {
    return KILN_STATUS(KILN_STATUS_INTERNAL, "the fused epilogue for %s has the wrong arguments (kiln bug)",
                       target_id);
  }
  stores_t found = {mlirBlockGetArgument(g_entry, g_c_arg), NULL, 0, 0};
  mlirOperationWalk(g_func, collect_stores, &found, MlirWalkPreOrder);
  MlirType index = mlirIndexTypeGet(context);
  kiln_status_t st = found.n ? NULL
                             : KILN_STATUS(KILN_STATUS_INTERNAL,
                                           "the tiled matmul for %s stores no C (kiln bug)", target_id);
  for (size_t i = 0; !st && i < found.n; i++) {
    MlirOperation at = found.items[i];
    MlirValue acc = mlirOperationGetOperand(at, 0);
    MlirType vt = mlirValueGetType(acc);
    int64_t lanes = mlirTypeIsAVector(vt) ? mlirShapedTypeGetDimSize(vt, 0) : 1;
    intptr_t g_rank = mlirOperationGetNumOperands(at) - 2;
    if ((g_rank != rank && !(rank == 4 && g_rank == 2)) || lanes > MAX_LANES ||
        (lanes > 1 && mlirShapedTypeGetRank(vt) != 1)) {
      st = KILN_STATUS(KILN_STATUS_INTERNAL, "the tiled matmul for %s stores C otherwise (kiln bug)",
                       target_id);
      break;
    }
    MlirValue results[MAX_LANES];
    for (int64_t l = 0; !st && l < lanes; l++) {
      map_t *m = kiln_calloc(1, sizeof *m);
      for (intptr_t a = 0; a < e_args; a++) {
        if ((unsigned)a == e_c_arg) continue;
        unsigned g_arg = g_n_args + (unsigned)(a < (intptr_t)e_c_arg ? a : a - 1);
        map_put(m, mlirBlockGetArgument(s.entry, a), mlirBlockGetArgument(g_entry, g_arg));
      }
      /* The accumulator's indices, the column j of lane l being the vector's
       * index times its width, plus l; a conv's row (a pixel of its NHWC
       * output) split into image, row and column. */
      MlirValue at_idx[4];
      for (intptr_t k = 0; k < g_rank; k++) at_idx[k] = mlirOperationGetOperand(at, k + 2);
      if (lanes > 1) {
        MlirValue w = kiln_compiler_int_const_before(context, at, index, lanes);
        MlirValue base = kiln_compiler_build2("arith.muli", at, at_idx[g_rank - 1], w, index);
        at_idx[g_rank - 1] = kiln_compiler_build2(
            "arith.addi", at, base, kiln_compiler_int_const_before(context, at, index, l), index);
      }
      if (g_rank != rank) {
        MlirType dt = mlirValueGetType(mlirOperationGetOperand(s.store, 1));
        int64_t oh = mlirShapedTypeGetDimSize(dt, 1), ow = mlirShapedTypeGetDimSize(dt, 2);
        MlirValue row = at_idx[0], col = at_idx[1];
        MlirValue c_ohw = kiln_compiler_int_const_before(context, at, index, oh * ow);
        MlirValue c_ow = kiln_compiler_int_const_before(context, at, index, ow);
        MlirValue c_oh = kiln_compiler_int_const_before(context, at, index, oh);
        at_idx[0] = kiln_compiler_build2("arith.divui", at, row, c_ohw, index);
        at_idx[1] = kiln_compiler_build2(
            "arith.remui", at, kiln_compiler_build2("arith.divui", at, row, c_ow, index), c_oh, index);
        at_idx[2] = kiln_compiler_build2("arith.remui", at, row, c_ow, index);
        at_idx[3] = col;
      }
      for (intptr_t k = 0; k < rank; k++) {
        MlirValue ev = mlirOperationGetOperand(s.store, k + 2);
        if (!kiln_compiler_gpu_is_zero(ev)) map_put(m, ev, at_idx[k]);
      }
      MlirValue x = acc;
      if (lanes > 1) {
        x = kiln_compiler_build1("vector.extract", at, acc, mlirShapedTypeGetElementType(vt));
        int64_t pos[1] = {l};
        mlirOperationSetAttributeByName(kiln_compiler_gpu_def_of(x),
                                        mlirStringRefCreateFromCString("static_position"),
                                        mlirDenseI64ArrayGet(context, 1, pos));
      }
      results[l] = copy_lane(&s, e_c_arg, m, x, at);
      kiln_free(m);
      if (mlirValueIsNull(results[l])) {
        st = KILN_STATUS(KILN_STATUS_INTERNAL,
                         "the fused epilogue for %s reads a value it does not copy (kiln bug)", target_id);
      }
    }
    if (st) break;
    /* D's vector: C's lanes of D's element (f16 or its bits where C is f32). */
    MlirType dv = lanes > 1 ? mlirVectorTypeGet(1, &lanes, mlirValueGetType(results[0])) : vt;
    MlirValue value =
        lanes > 1 ? kiln_compiler_build_before("vector.from_elements", at, results, (intptr_t)lanes, dv)
                  : results[0];
    MlirOperation to_d = mlirOperationClone(at);
    unsigned g_d = g_n_args + (unsigned)(d_arg < (int)e_c_arg ? d_arg : d_arg - 1);
    mlirOperationSetOperand(to_d, 0, value);
    mlirOperationSetOperand(to_d, 1, mlirBlockGetArgument(g_entry, g_d));
    mlirBlockInsertOwnedOperationBefore(mlirOperationGetBlock(at), at, to_d);
    if (!keep_c) mlirOperationDestroy(at);
  }
  kiln_free(found.items);
  if (!st && !mlirOperationVerify(g_func)) {
    st = KILN_STATUS(KILN_STATUS_INTERNAL,
                     "the tiled matmul with its fused epilogue for %s does not verify (kiln bug)", target_id);
  }
  return st;
}
