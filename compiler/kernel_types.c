/* Kernel element types a SPIR-V profile cannot store or compute on (see the
 * header for why). Rewrites go in two steps so that no walk mutates what it is
 * walking: collect the ops, then change them.
 *
 * Invariant after kiln_compiler_kernels_floats_as_bits: no memref inside a kernel
 * has a rewritten float element type, so MLIR's type conversion never sees one;
 * the float values that remain are SSA values between a load's bitcast and a
 * store's, which arith-emulate-unsupported-floats widens to f32 and the expansions
 * (arith-expand for bf16, kiln_compiler_kernels_expand_f16 for f16) turn into
 * integer code, leaving bitcast pairs that canonicalize folds away.
 */
#include "compiler/kernel_types.h"

#include <mlir-c/BuiltinAttributes.h>
#include <mlir-c/AffineMap.h>
#include <mlir-c/BuiltinTypes.h>
#include <stdio.h>
#include <string.h>

#include "base/alloc.h"
#include "base/buf.h"

bool kiln_compiler_op_is(MlirOperation op, const char *name) {
  MlirStringRef s = mlirIdentifierStr(mlirOperationGetName(op));
  return s.length == strlen(name) && memcmp(s.data, name, s.length) == 0;
}

bool kiln_compiler_int_constant_value(MlirValue v, int64_t *out) {
  if (!mlirValueIsAOpResult(v)) return false;
  MlirOperation def = mlirOpResultGetOwner(v);
  if (!kiln_compiler_op_is(def, "arith.constant")) return false;
  MlirAttribute value = mlirOperationGetAttributeByName(def, mlirStringRefCreateFromCString("value"));
  if (mlirAttributeIsNull(value) || !mlirAttributeIsAInteger(value)) return false;
  *out = mlirIntegerAttrGetValueInt(value);
  return true;
}

MlirOperation kiln_compiler_first_op(MlirBlock block, const char *name) {
  for (MlirOperation op = mlirBlockGetFirstOperation(block); !mlirOperationIsNull(op);
       op = mlirOperationGetNextInBlock(op)) {
    if (kiln_compiler_op_is(op, name)) return op;
  }
  return (MlirOperation){NULL};
}

static void append_print(MlirStringRef s, void *user) { kiln_buf_append(user, s.data, s.length); }

void kiln_compiler_op_line_col(MlirOperation op, int *line, int *col) {
  kiln_buf_t where;
  kiln_buf_init(&where);
  mlirLocationPrint(mlirOperationGetLocation(op), append_print, &where);
  /* loc("file":line:col) */
  const char *lc = where.len ? strstr(where.data, "\":") : NULL;
  if (!lc || sscanf(lc, "\":%d:%d", line, col) != 2) *line = *col = 0;
  kiln_buf_deinit(&where);
}

MlirNamedAttribute kiln_compiler_named_attr(MlirContext context, const char *name, MlirAttribute a) {
  return mlirNamedAttributeGet(mlirIdentifierGet(context, mlirStringRefCreateFromCString(name)), a);
}

static MlirStringRef sref(const char *s) { return mlirStringRefCreateFromCString(s); }

void kiln_compiler_kernels_only(MlirModule module) {
  MlirBlock body = mlirModuleGetBody(module);
  for (MlirOperation op = mlirBlockGetFirstOperation(body); !mlirOperationIsNull(op);) {
    MlirOperation next = mlirOperationGetNextInBlock(op);
    if (!kiln_compiler_op_is(op, "gpu.module")) mlirOperationDestroy(op);
    op = next;
  }
}

/* ---- floats as bits ---- */

typedef kiln_compiler_ops_t ops_t;

void kiln_compiler_ops_push(kiln_compiler_ops_t *ops, MlirOperation op) {
  ops->items = kiln_realloc(ops->items, (ops->n + 1) * sizeof *ops->items);
  ops->items[ops->n++] = op;
}

static void ops_push(ops_t *ops, MlirOperation op) { kiln_compiler_ops_push(ops, op); }

MlirWalkResult kiln_compiler_ops_collect_all(MlirOperation op, void *user) {
  ops_push(user, op);
  return MlirWalkResultAdvance;
}

typedef struct retype_s {
  MlirContext ctx;
  unsigned which; /* KILN_FLOATS_* */
} retype_t;

bool kiln_compiler_is_small_float(MlirType t) {
  return mlirTypeIsAFloat8E5M2(t) || mlirTypeIsAFloat8E4M3FN(t) || mlirTypeIsAFloat8E5M2FNUZ(t) ||
         mlirTypeIsAFloat8E4M3FNUZ(t) || mlirTypeIsAFloat8E4M3B11FNUZ(t) || mlirTypeIsAFloat8E4M3(t) ||
         mlirTypeIsAFloat8E3M4(t) || mlirTypeIsAFloat8E8M0FNU(t) || mlirTypeIsAFloat4E2M1FN(t) ||
         mlirTypeIsAFloat6E2M3FN(t) || mlirTypeIsAFloat6E3M2FN(t);
}

static bool rewritten_float(const retype_t *r, MlirType t) {
  return ((r->which & KILN_FLOATS_BF16) && mlirTypeIsABF16(t)) ||
         ((r->which & KILN_FLOATS_F16) && mlirTypeIsAF16(t)) ||
         ((r->which & KILN_FLOATS_SMALL) && kiln_compiler_is_small_float(t));
}

/* The integer type of a rewritten float's bits (i16 for bf16, i8 for f8E4M3FN,
 * i6 for the f6 types). */
static MlirType bits_of(const retype_t *r, MlirType f) {
  return mlirIntegerTypeGet(r->ctx, mlirFloatTypeGetWidth(f));
}

/* The integer type a buffer of them holds: the bits, except that an f6 takes a
 * byte (its bits in the low six), as the host plan sizes it (host.c). */
static MlirType storage_of(const retype_t *r, MlirType f) {
  unsigned w = mlirFloatTypeGetWidth(f);
  return mlirIntegerTypeGet(r->ctx, w == 6 ? 8 : w);
}

MlirType kiln_compiler_memref_with_element(MlirType t, MlirType element) {
  intptr_t rank = mlirShapedTypeGetRank(t);
  int64_t *shape = kiln_calloc(rank ? (size_t)rank : 1, sizeof *shape);
  for (intptr_t d = 0; d < rank; d++) shape[d] = mlirShapedTypeGetDimSize(t, d);
  MlirType out =
      mlirMemRefTypeGet(element, rank, shape, mlirMemRefTypeGetLayout(t), mlirMemRefTypeGetMemorySpace(t));
  kiln_free(shape);
  return out;
}

/* memref<...xbf16, layout, space> -> memref<...xi16, layout, space>; else null. */
static MlirType bits_memref(const retype_t *r, MlirType t) {
  if (!mlirTypeIsAMemRef(t) || !rewritten_float(r, mlirShapedTypeGetElementType(t))) {
    return (MlirType){NULL};
  }
  return kiln_compiler_memref_with_element(t, storage_of(r, mlirShapedTypeGetElementType(t)));
}

/* A one-operand, one-result op (a cast) at `loc`, not yet in any block. */
static MlirOperation cast_op(const char *name, MlirValue v, MlirType to, MlirLocation loc) {
  MlirOperationState state = mlirOperationStateGet(sref(name), loc);
  mlirOperationStateAddOperands(&state, 1, &v);
  mlirOperationStateAddResults(&state, 1, &to);
  return mlirOperationCreate(&state);
}

static void retype_func(const retype_t *r, MlirOperation func) {
  MlirBlock entry = mlirRegionGetFirstBlock(mlirOperationGetRegion(func, 0));
  if (mlirBlockIsNull(entry)) return;
  intptr_t n = mlirBlockGetNumArguments(entry);
  MlirType *inputs = kiln_calloc(n ? (size_t)n : 1, sizeof *inputs);
  bool changed = false;
  for (intptr_t i = 0; i < n; i++) {
    MlirValue arg = mlirBlockGetArgument(entry, i);
    MlirType t = bits_memref(r, mlirValueGetType(arg));
    if (!mlirTypeIsNull(t)) {
      mlirValueSetType(arg, t);
      changed = true;
    }
    inputs[i] = mlirValueGetType(arg);
  }
  if (changed) {
    mlirOperationSetInherentAttributeByName(func, sref("function_type"),
                                            mlirTypeAttrGet(mlirFunctionTypeGet(r->ctx, n, inputs, 0, NULL)));
  }
  kiln_free(inputs);
}

static void retype_op(const retype_t *r, MlirOperation op) {
  for (intptr_t i = 0; i < mlirOperationGetNumResults(op); i++) {
    MlirValue v = mlirOperationGetResult(op, i);
    MlirType t = bits_memref(r, mlirValueGetType(v));
    if (!mlirTypeIsNull(t)) mlirValueSetType(v, t);
  }
  MlirLocation loc = mlirOperationGetLocation(op);
  if (kiln_compiler_op_is(op, "memref.load")) {
    MlirValue v = mlirOperationGetResult(op, 0);
    MlirType f = mlirValueGetType(v);
    if (!rewritten_float(r, f)) return;
    MlirType bits = bits_of(r, f), storage = storage_of(r, f);
    mlirValueSetType(v, storage);
    MlirOperation first = mlirTypeEqual(bits, storage) ? cast_op("arith.bitcast", v, f, loc)
                                                       : cast_op("arith.trunci", v, bits, loc);
    mlirBlockInsertOwnedOperationAfter(mlirOperationGetBlock(op), op, first);
    MlirOperation last = first;
    if (!mlirTypeEqual(bits, storage)) {
      last = cast_op("arith.bitcast", mlirOperationGetResult(first, 0), f, loc);
      mlirBlockInsertOwnedOperationAfter(mlirOperationGetBlock(op), first, last);
    }
    mlirValueReplaceAllUsesExcept(v, mlirOperationGetResult(last, 0), 1, &first);
  } else if (kiln_compiler_op_is(op, "memref.store")) {
    MlirValue v = mlirOperationGetOperand(op, 0);
    MlirType f = mlirValueGetType(v);
    if (!rewritten_float(r, f)) return;
    MlirType bits = bits_of(r, f), storage = storage_of(r, f);
    MlirOperation cast = cast_op("arith.bitcast", v, bits, loc);
    mlirBlockInsertOwnedOperationBefore(mlirOperationGetBlock(op), op, cast);
    MlirValue stored = mlirOperationGetResult(cast, 0);
    if (!mlirTypeEqual(bits, storage)) {
      MlirOperation ext = cast_op("arith.extui", stored, storage, loc);
      mlirBlockInsertOwnedOperationBefore(mlirOperationGetBlock(op), op, ext);
      stored = mlirOperationGetResult(ext, 0);
    }
    mlirOperationSetOperand(op, 0, stored);
  }
}

/* Ops arith-emulate-unsupported-floats leaves alone (it widens arith's float
 * arithmetic only): the math dialect, the int/float casts, select. */
static bool widened_elsewhere(MlirOperation op) {
  MlirStringRef n = mlirIdentifierStr(mlirOperationGetName(op));
  if (n.length > 5 && memcmp(n.data, "math.", 5) == 0) return true;
  return kiln_compiler_op_is(op, "arith.sitofp") || kiln_compiler_op_is(op, "arith.uitofp") ||
         kiln_compiler_op_is(op, "arith.fptosi") || kiln_compiler_op_is(op, "arith.fptoui") ||
         kiln_compiler_op_is(op, "arith.select");
}

/* The op again on f32: rewritten-float operands extended, results truncated back. */
static void widen_op(const retype_t *r, MlirOperation op) {
  intptr_t n_in = mlirOperationGetNumOperands(op), n_out = mlirOperationGetNumResults(op);
  bool any = false;
  for (intptr_t i = 0; i < n_in; i++)
    any = any || rewritten_float(r, mlirValueGetType(mlirOperationGetOperand(op, i)));
  for (intptr_t i = 0; i < n_out; i++)
    any = any || rewritten_float(r, mlirValueGetType(mlirOperationGetResult(op, i)));
  if (!any || mlirOperationGetNumRegions(op) != 0) return;
  MlirLocation loc = mlirOperationGetLocation(op);
  MlirBlock block = mlirOperationGetBlock(op);
  MlirType f32 = mlirF32TypeGet(r->ctx);
  MlirValue *operands = kiln_calloc(n_in ? (size_t)n_in : 1, sizeof *operands);
  MlirType *results = kiln_calloc(n_out ? (size_t)n_out : 1, sizeof *results);
  for (intptr_t i = 0; i < n_in; i++) {
    operands[i] = mlirOperationGetOperand(op, i);
    if (rewritten_float(r, mlirValueGetType(operands[i]))) {
      MlirOperation ext = cast_op("arith.extf", operands[i], f32, loc);
      mlirBlockInsertOwnedOperationBefore(block, op, ext);
      operands[i] = mlirOperationGetResult(ext, 0);
    }
  }
  for (intptr_t i = 0; i < n_out; i++) {
    MlirType t = mlirValueGetType(mlirOperationGetResult(op, i));
    results[i] = rewritten_float(r, t) ? f32 : t;
  }
  MlirOperationState state = mlirOperationStateGet(mlirIdentifierStr(mlirOperationGetName(op)), loc);
  mlirOperationStateAddOperands(&state, n_in, operands);
  mlirOperationStateAddResults(&state, n_out, results);
  for (intptr_t i = 0; i < mlirOperationGetNumAttributes(op); i++) {
    MlirNamedAttribute a = mlirOperationGetAttribute(op, i);
    mlirOperationStateAddAttributes(&state, 1, &a);
  }
  MlirOperation wide = mlirOperationCreate(&state);
  mlirBlockInsertOwnedOperationBefore(block, op, wide);
  for (intptr_t i = 0; i < n_out; i++) {
    MlirValue old = mlirOperationGetResult(op, i);
    MlirValue now = mlirOperationGetResult(wide, i);
    MlirType t = mlirValueGetType(old);
    if (rewritten_float(r, t)) {
      MlirOperation trunc = cast_op("arith.truncf", now, t, loc);
      mlirBlockInsertOwnedOperationBefore(block, op, trunc);
      now = mlirOperationGetResult(trunc, 0);
    }
    mlirValueReplaceAllUsesOfWith(old, now);
  }
  mlirOperationDestroy(op);
  kiln_free(operands);
  kiln_free(results);
}

void kiln_compiler_widen_half_op(MlirContext context, MlirOperation op) {
  retype_t r = {context, KILN_FLOATS_F16 | KILN_FLOATS_BF16};
  widen_op(&r, op);
}

void kiln_compiler_kernels_floats_as_bits(MlirContext context, MlirModule module, unsigned which) {
  retype_t r = {context, which};
  ops_t ops = {0};
  mlirOperationWalk(mlirModuleGetOperation(module), kiln_compiler_ops_collect_all, &ops, MlirWalkPreOrder);
  for (size_t i = 0; i < ops.n; i++) {
    if (kiln_compiler_op_is(ops.items[i], "gpu.func")) retype_func(&r, ops.items[i]);
  }
  for (size_t i = 0; i < ops.n; i++) {
    if (widened_elsewhere(ops.items[i]))
      widen_op(&r, ops.items[i]);
    else
      retype_op(&r, ops.items[i]);
  }
  kiln_free(ops.items);
}

typedef struct leftover_s {
  retype_t r;
  MlirOperation found;
} leftover_t;

static MlirWalkResult find_leftover(MlirOperation op, void *user) {
  leftover_t *l = user;
  for (intptr_t i = 0; i < mlirOperationGetNumResults(op); i++) {
    MlirType t = mlirValueGetType(mlirOperationGetResult(op, i));
    if (rewritten_float(&l->r, t) ||
        (mlirTypeIsAShaped(t) && rewritten_float(&l->r, mlirShapedTypeGetElementType(t)))) {
      l->found = op;
      return MlirWalkResultInterrupt;
    }
  }
  return MlirWalkResultAdvance;
}

kiln_status_t kiln_compiler_kernels_check_floats(MlirContext context, MlirModule module, unsigned which,
                                                 const char *name, const char *target) {
  leftover_t l = {{context, which}, {NULL}};
  mlirOperationWalk(mlirModuleGetOperation(module), find_leftover, &l, MlirWalkPreOrder);
  if (mlirOperationIsNull(l.found)) return NULL;
  MlirStringRef op = mlirIdentifierStr(mlirOperationGetName(l.found));
  return KILN_STATUS(KILN_STATUS_UNIMPLEMENTED,
                     "%s: %s: a kernel's %.*s computes on a float type %s has no instructions for "
                     "(%s%s%s) and kiln does not yet emulate for this op",
                     name, target, (int)op.length, op.data, target, (which & KILN_FLOATS_BF16) ? "bf16 " : "",
                     (which & KILN_FLOATS_F16) ? "f16 " : "", (which & KILN_FLOATS_SMALL) ? "f8/f6/f4" : "");
}

static bool is_f64(MlirType t) {
  return mlirTypeIsAF64(t) || (mlirTypeIsAShaped(t) && mlirTypeIsAF64(mlirShapedTypeGetElementType(t)));
}

static MlirWalkResult find_f64(MlirOperation op, void *user) {
  for (intptr_t i = 0; i < mlirOperationGetNumResults(op); i++) {
    if (is_f64(mlirValueGetType(mlirOperationGetResult(op, i)))) {
      *(MlirOperation *)user = op;
      return MlirWalkResultInterrupt;
    }
  }
  return MlirWalkResultAdvance;
}

bool kiln_compiler_kernels_have_f64(MlirModule module) {
  MlirOperation found = {NULL};
  mlirOperationWalk(mlirModuleGetOperation(module), find_f64, &found, MlirWalkPreOrder);
  return !mlirOperationIsNull(found);
}

/* ---- f64 <-> f16/bf16 through f32 ---- */

static bool is_half(MlirType t) { return mlirTypeIsAF16(t) || mlirTypeIsABF16(t); }

static MlirWalkResult find_f64_half_casts(MlirOperation op, void *user) {
  bool ext = kiln_compiler_op_is(op, "arith.extf"), trunc = kiln_compiler_op_is(op, "arith.truncf");
  if (!ext && !trunc) return MlirWalkResultAdvance;
  MlirType from = mlirValueGetType(mlirOperationGetOperand(op, 0));
  MlirType to = mlirValueGetType(mlirOperationGetResult(op, 0));
  if ((ext && is_half(from) && mlirTypeIsAF64(to)) || (trunc && mlirTypeIsAF64(from) && is_half(to))) {
    kiln_compiler_ops_push(user, op);
  }
  return MlirWalkResultAdvance;
}

static MlirValue select_before(MlirOperation before, MlirValue c, MlirValue a, MlirValue b) {
  MlirValue ops[3] = {c, a, b};
  return kiln_compiler_build_before("arith.select", before, ops, 3, mlirValueGetType(a));
}
/* arith.cmpf or arith.cmpi (`name`) with predicate number `pred`, before `before`. */
static MlirValue compare_before(MlirContext ctx, const char *name, MlirOperation before, int64_t pred,
                                MlirValue a, MlirValue b) {
  MlirValue ops[2] = {a, b};
  MlirType i1 = mlirIntegerTypeGet(ctx, 1);
  MlirOperationState st = mlirOperationStateGet(sref(name), mlirOperationGetLocation(before));
  mlirOperationStateAddOperands(&st, 2, ops);
  mlirOperationStateAddResults(&st, 1, &i1);
  MlirNamedAttribute p =
      kiln_compiler_named_attr(ctx, "predicate", mlirIntegerAttrGet(mlirIntegerTypeGet(ctx, 64), pred));
  mlirOperationStateAddAttributes(&st, 1, &p);
  MlirOperation op = mlirOperationCreate(&st);
  mlirBlockInsertOwnedOperationBefore(mlirOperationGetBlock(before), before, op);
  return mlirOperationGetResult(op, 0);
}

MlirValue kiln_compiler_cmpf_before(MlirContext ctx, MlirOperation before, int64_t pred, MlirValue a,
                                    MlirValue b) {
  return compare_before(ctx, "arith.cmpf", before, pred, a, b);
}

void kiln_compiler_kernels_f64_half_casts(MlirContext context, MlirModule module) {
  kiln_compiler_ops_t ops = {0};
  mlirOperationWalk(mlirModuleGetOperation(module), find_f64_half_casts, &ops, MlirWalkPreOrder);
  MlirType f32 = mlirF32TypeGet(context), f64 = mlirF64TypeGet(context),
           i32 = mlirIntegerTypeGet(context, 32);
  enum { OGT = 2, ONE = 6 }; /* arith.cmpf predicates */
  for (size_t i = 0; i < ops.n; i++) {
    MlirOperation op = ops.items[i];
    MlirValue x = mlirOperationGetOperand(op, 0);
    MlirType to = mlirValueGetType(mlirOperationGetResult(op, 0));
    MlirValue r;
    if (kiln_compiler_op_is(op, "arith.extf")) {
      r = kiln_compiler_build1("arith.extf", op, kiln_compiler_build1("arith.extf", op, x, f32),
                               f64); /* both exact */
    } else {
      /* f64 -> f32 rounded to odd, then to nearest even: one correct rounding
       * (f32 keeps more than two bits beyond f16's and bf16's mantissas). Round
       * to odd: toward zero, then the last bit set if anything was lost. */
      MlirValue t = kiln_compiler_build1("arith.truncf", op, x, f32);
      MlirValue back = kiln_compiler_build1("arith.extf", op, t, f64);
      MlirValue bits = kiln_compiler_build1("arith.bitcast", op, t, i32);
      MlirValue one = kiln_compiler_int_const_before(context, op, i32, 1);
      MlirValue away =
          kiln_compiler_cmpf_before(context, op, OGT, kiln_compiler_build1("math.absf", op, back, f64),
                                    kiln_compiler_build1("math.absf", op, x, f64));
      MlirValue toward =
          select_before(op, away, kiln_compiler_build2("arith.subi", op, bits, one, i32), bits);
      MlirValue tz =
          kiln_compiler_build1("arith.extf", op, kiln_compiler_build1("arith.bitcast", op, toward, f32), f64);
      MlirValue lost = kiln_compiler_cmpf_before(context, op, ONE, tz, x);
      MlirValue odd =
          select_before(op, lost, kiln_compiler_build2("arith.ori", op, toward, one, i32), toward);
      r = kiln_compiler_build1("arith.truncf", op, kiln_compiler_build1("arith.bitcast", op, odd, f32), to);
    }
    mlirValueReplaceAllUsesOfWith(mlirOperationGetResult(op, 0), r);
    mlirOperationDestroy(op);
  }
  kiln_free(ops.items);
}

/* ---- f16 conversions in integer code ---- */

/* f16 bits -> f32: sign moves up 16 bits; normals rebias the exponent (15 -> 127,
 * +112) and widen the mantissa; exponent 31 is infinity or NaN (mantissa kept);
 * exponent 0 is zero or a subnormal, exactly mantissa * 2^-24, computed in f32. */
static const char f16_to_f32[] =
    "func.func private @__kiln_f16_to_f32(%h: f16) -> f32 {\n"
    "  %c10 = arith.constant 10 : i32\n"
    "  %c13 = arith.constant 13 : i32\n"
    "  %c16 = arith.constant 16 : i32\n"
    "  %c23 = arith.constant 23 : i32\n"
    "  %c0 = arith.constant 0 : i32\n"
    "  %c31 = arith.constant 31 : i32\n"
    "  %c112 = arith.constant 112 : i32\n"
    "  %sign_mask = arith.constant 32768 : i32\n"
    "  %man_mask = arith.constant 1023 : i32\n"
    "  %inf = arith.constant 2139095040 : i32\n"
    "  %ulp = arith.constant 5.9604644775390625e-08 : f32\n"
    "  %b = arith.bitcast %h : f16 to i16\n"
    "  %x = arith.extui %b : i16 to i32\n"
    "  %s0 = arith.andi %x, %sign_mask : i32\n"
    "  %sign = arith.shli %s0, %c16 : i32\n"
    "  %e0 = arith.shrui %x, %c10 : i32\n"
    "  %exp = arith.andi %e0, %c31 : i32\n"
    "  %man = arith.andi %x, %man_mask : i32\n"
    "  %man23 = arith.shli %man, %c13 : i32\n"
    "  %e1 = arith.addi %exp, %c112 : i32\n"
    "  %e2 = arith.shli %e1, %c23 : i32\n"
    "  %normal = arith.ori %e2, %man23 : i32\n"
    "  %special = arith.ori %inf, %man23 : i32\n"
    "  %mf = arith.uitofp %man : i32 to f32\n"
    "  %sf = arith.mulf %mf, %ulp : f32\n"
    "  %sub = arith.bitcast %sf : f32 to i32\n"
    "  %is_special = arith.cmpi eq, %exp, %c31 : i32\n"
    "  %is_small = arith.cmpi eq, %exp, %c0 : i32\n"
    "  %r0 = arith.select %is_special, %special, %normal : i32\n"
    "  %r1 = arith.select %is_small, %sub, %r0 : i32\n"
    "  %r = arith.ori %r1, %sign : i32\n"
    "  %f = arith.bitcast %r : i32 to f32\n"
    "  return %f : f32\n"
    "}";

/* f32 -> f16 bits, rounding to nearest even: NaN stays a (quiet) NaN, infinity and
 * everything from 65520 up becomes infinity; below 2^-14 the f16 subnormal is read
 * off an f32 addition of 0.5 (whose ulp is 2^-24, an f16 subnormal's unit); normals
 * rebias by -112 << 23 and add the rounding bias 0xfff plus the mantissa's lowest
 * kept bit before the shift, which carries into the exponent when it must. */
static const char f32_to_f16[] =
    "func.func private @__kiln_f32_to_f16(%f: f32) -> f16 {\n"
    "  %c1 = arith.constant 1 : i32\n"
    "  %c13 = arith.constant 13 : i32\n"
    "  %c16 = arith.constant 16 : i32\n"
    "  %sign_mask = arith.constant 32768 : i32\n"
    "  %abs_mask = arith.constant 2147483647 : i32\n"
    "  %inf32 = arith.constant 2139095040 : i32\n"
    "  %over = arith.constant 1199570944 : i32\n"
    "  %min_normal = arith.constant 947912704 : i32\n"
    "  %half_bits = arith.constant 1056964608 : i32\n"
    "  %bias = arith.constant -939520001 : i32\n"
    "  %inf16 = arith.constant 31744 : i32\n"
    "  %nan16 = arith.constant 32256 : i32\n"
    "  %half = arith.constant 0.5 : f32\n"
    "  %x = arith.bitcast %f : f32 to i32\n"
    "  %s0 = arith.shrui %x, %c16 : i32\n"
    "  %sign = arith.andi %s0, %sign_mask : i32\n"
    "  %ax = arith.andi %x, %abs_mask : i32\n"
    "  %is_naninf = arith.cmpi uge, %ax, %inf32 : i32\n"
    "  %is_nan = arith.cmpi ugt, %ax, %inf32 : i32\n"
    "  %naninf = arith.select %is_nan, %nan16, %inf16 : i32\n"
    "  %is_over = arith.cmpi uge, %ax, %over : i32\n"
    "  %is_sub = arith.cmpi ult, %ax, %min_normal : i32\n"
    "  %axf = arith.bitcast %ax : i32 to f32\n"
    "  %sf = arith.addf %axf, %half : f32\n"
    "  %sb = arith.bitcast %sf : f32 to i32\n"
    "  %sub = arith.subi %sb, %half_bits : i32\n"
    "  %o0 = arith.shrui %ax, %c13 : i32\n"
    "  %odd = arith.andi %o0, %c1 : i32\n"
    "  %n0 = arith.addi %ax, %bias : i32\n"
    "  %n1 = arith.addi %n0, %odd : i32\n"
    "  %normal = arith.shrui %n1, %c13 : i32\n"
    "  %r0 = arith.select %is_sub, %sub, %normal : i32\n"
    "  %r1 = arith.select %is_over, %inf16, %r0 : i32\n"
    "  %r2 = arith.select %is_naninf, %naninf, %r1 : i32\n"
    "  %r3 = arith.ori %r2, %sign : i32\n"
    "  %t = arith.trunci %r3 : i32 to i16\n"
    "  %h = arith.bitcast %t : i16 to f16\n"
    "  return %h : f16\n"
    "}";

typedef struct expand_s {
  ops_t ext, trunc;
} expand_t;

static MlirWalkResult collect_f16_casts(MlirOperation op, void *user) {
  expand_t *x = user;
  if (kiln_compiler_op_is(op, "arith.extf")) {
    if (mlirTypeIsAF16(mlirValueGetType(mlirOperationGetOperand(op, 0))) &&
        mlirTypeIsAF32(mlirValueGetType(mlirOperationGetResult(op, 0)))) {
      ops_push(&x->ext, op);
    }
  } else if (kiln_compiler_op_is(op, "arith.truncf")) {
    if (mlirTypeIsAF32(mlirValueGetType(mlirOperationGetOperand(op, 0))) &&
        mlirTypeIsAF16(mlirValueGetType(mlirOperationGetResult(op, 0)))) {
      ops_push(&x->trunc, op);
    }
  }
  return MlirWalkResultAdvance;
}

void kiln_compiler_vmap_put(kiln_compiler_vmap_t *m, MlirValue from, MlirValue to) {
  m->from = kiln_realloc(m->from, (m->n + 1) * sizeof *m->from);
  m->to = kiln_realloc(m->to, (m->n + 1) * sizeof *m->to);
  m->from[m->n] = from;
  m->to[m->n++] = to;
}

bool kiln_compiler_vmap_find(const kiln_compiler_vmap_t *m, MlirValue v, MlirValue *out) {
  for (size_t i = 0; i < m->n; i++) {
    if (mlirValueEqual(m->from[i], v)) {
      *out = m->to[i];
      return true;
    }
  }
  return false;
}

void kiln_compiler_vmap_deinit(kiln_compiler_vmap_t *m) {
  kiln_free(m->from);
  kiln_free(m->to);
  memset(m, 0, sizeof *m);
}

typedef kiln_compiler_vmap_t vmap_t;
#define vmap_put kiln_compiler_vmap_put

static MlirValue vmap_get(const vmap_t *m, MlirValue v) {
  MlirValue to = v;
  kiln_compiler_vmap_find(m, v, &to);
  return to;
}

/* Replaces `op` (N operands, one result) with a copy of the body of `helper`, a
 * parsed N-argument func.func: the ops are cloned before `op` with the arguments
 * bound to op's operands, and op's result replaced by what the helper returns. */
static void inline_helper(MlirOperation helper, MlirOperation op) {
  MlirBlock body = mlirRegionGetFirstBlock(mlirOperationGetRegion(helper, 0));
  MlirBlock site = mlirOperationGetBlock(op);
  vmap_t map = {0};
  for (intptr_t i = 0; i < mlirBlockGetNumArguments(body) && i < mlirOperationGetNumOperands(op); i++) {
    vmap_put(&map, mlirBlockGetArgument(body, i), mlirOperationGetOperand(op, i));
  }
  for (MlirOperation h = mlirBlockGetFirstOperation(body); !mlirOperationIsNull(h);
       h = mlirOperationGetNextInBlock(h)) {
    if (kiln_compiler_op_is(h, "func.return")) {
      for (intptr_t i = 0; i < mlirOperationGetNumResults(op) && i < mlirOperationGetNumOperands(h); i++) {
        mlirValueReplaceAllUsesOfWith(mlirOperationGetResult(op, i),
                                      vmap_get(&map, mlirOperationGetOperand(h, i)));
      }
      break;
    }
    MlirOperation clone = mlirOperationClone(h);
    for (intptr_t i = 0; i < mlirOperationGetNumOperands(clone); i++) {
      mlirOperationSetOperand(clone, i, vmap_get(&map, mlirOperationGetOperand(h, i)));
    }
    mlirBlockInsertOwnedOperationBefore(site, op, clone);
    for (intptr_t i = 0; i < mlirOperationGetNumResults(h); i++) {
      vmap_put(&map, mlirOperationGetResult(h, i), mlirOperationGetResult(clone, i));
    }
  }
  mlirOperationDestroy(op);
  kiln_free(map.from);
  kiln_free(map.to);
}

kiln_status_t kiln_compiler_kernels_replace_with_helper(MlirContext context, MlirOperation *ops, size_t n,
                                                        const char *helper_text) {
  if (!n) return NULL;
  MlirOperation helper = mlirOperationCreateParse(context, sref(helper_text), sref("kiln-helpers"));
  if (mlirOperationIsNull(helper)) {
    return KILN_STATUS(KILN_STATUS_INTERNAL, "a kiln kernel helper does not parse");
  }
  for (size_t i = 0; i < n; i++) inline_helper(helper, ops[i]);
  mlirOperationDestroy(helper);
  return NULL;
}

kiln_status_t kiln_compiler_kernels_expand_f16(MlirContext context, MlirModule module) {
  expand_t x = {0};
  mlirOperationWalk(mlirModuleGetOperation(module), collect_f16_casts, &x, MlirWalkPreOrder);
  kiln_status_t st = kiln_compiler_kernels_replace_with_helper(context, x.ext.items, x.ext.n, f16_to_f32);
  if (!st) st = kiln_compiler_kernels_replace_with_helper(context, x.trunc.items, x.trunc.n, f32_to_f16);
  kiln_free(x.ext.items);
  kiln_free(x.trunc.items);
  return st;
}

/* ---- i64 buffers as pairs of i32 ---- */

MlirOperation kiln_compiler_int_constant(MlirContext context, MlirLocation loc, MlirType type,
                                         int64_t value) {
  MlirNamedAttribute attr =
      mlirNamedAttributeGet(mlirIdentifierGet(context, sref("value")), mlirIntegerAttrGet(type, value));
  MlirOperationState st = mlirOperationStateGet(sref("arith.constant"), loc);
  mlirOperationStateAddResults(&st, 1, &type);
  mlirOperationStateAddAttributes(&st, 1, &attr);
  return mlirOperationCreate(&st);
}

MlirOperation kiln_compiler_static_alloc(MlirContext context, MlirLocation loc, MlirType type) {
  int32_t segments[2] = {0, 0}; /* no dynamic sizes, no symbols */
  MlirNamedAttribute seg = mlirNamedAttributeGet(mlirIdentifierGet(context, sref("operandSegmentSizes")),
                                                 mlirDenseI32ArrayGet(context, 2, segments));
  MlirOperationState st = mlirOperationStateGet(sref("memref.alloc"), loc);
  mlirOperationStateAddResults(&st, 1, &type);
  mlirOperationStateAddAttributes(&st, 1, &seg);
  return mlirOperationCreate(&st);
}

MlirValue kiln_compiler_build_before(const char *name, MlirOperation before, const MlirValue *operands,
                                     intptr_t n, MlirType type) {
  MlirOperationState st = mlirOperationStateGet(sref(name), mlirOperationGetLocation(before));
  mlirOperationStateAddOperands(&st, n, operands);
  mlirOperationStateAddResults(&st, 1, &type);
  MlirOperation op = mlirOperationCreate(&st);
  mlirBlockInsertOwnedOperationBefore(mlirOperationGetBlock(before), before, op);
  return mlirOperationGetResult(op, 0);
}

MlirValue kiln_compiler_build1(const char *name, MlirOperation before, MlirValue a, MlirType type) {
  return kiln_compiler_build_before(name, before, &a, 1, type);
}

MlirValue kiln_compiler_build2(const char *name, MlirOperation before, MlirValue a, MlirValue b,
                               MlirType type) {
  MlirValue operands[2] = {a, b};
  return kiln_compiler_build_before(name, before, operands, 2, type);
}

MlirValue kiln_compiler_int_const_before(MlirContext context, MlirOperation before, MlirType type,
                                         int64_t value) {
  MlirOperation c = kiln_compiler_int_constant(context, mlirOperationGetLocation(before), type, value);
  mlirBlockInsertOwnedOperationBefore(mlirOperationGetBlock(before), before, c);
  return mlirOperationGetResult(c, 0);
}

static MlirValue int_const(MlirContext ctx, MlirBlock block, MlirOperation before, MlirType t, int64_t v) {
  MlirOperation c = kiln_compiler_int_constant(ctx, mlirOperationGetLocation(before), t, v);
  mlirBlockInsertOwnedOperationBefore(block, before, c);
  return mlirOperationGetResult(c, 0);
}

static MlirValue index_const(MlirContext ctx, MlirBlock block, MlirOperation before, int64_t v) {
  return int_const(ctx, block, before, mlirIndexTypeGet(ctx), v);
}

/* A two-operand arith op inserted before `before`. */
static MlirValue binop(const char *name, MlirValue a, MlirValue b, MlirType t, MlirBlock block,
                       MlirOperation before) {
  MlirOperationState st = mlirOperationStateGet(sref(name), mlirOperationGetLocation(before));
  MlirValue operands[2] = {a, b};
  mlirOperationStateAddOperands(&st, 2, operands);
  mlirOperationStateAddResults(&st, 1, &t);
  MlirOperation op = mlirOperationCreate(&st);
  mlirBlockInsertOwnedOperationBefore(block, before, op);
  return mlirOperationGetResult(op, 0);
}

static MlirValue unop(const char *name, MlirValue a, MlirType t, MlirBlock block, MlirOperation before) {
  MlirOperation op = cast_op(name, a, t, mlirOperationGetLocation(before));
  mlirBlockInsertOwnedOperationBefore(block, before, op);
  return mlirOperationGetResult(op, 0);
}

/* memref.load or memref.store on `mem` (the new i32 pair buffer) at the old
 * indices plus `half` (0 low word, 1 high word). */
static MlirOperation pair_access(MlirOperation old, bool store, MlirValue value, MlirValue mem,
                                 MlirValue half, MlirType i32) {
  intptr_t first_index = store ? 2 : 1;
  intptr_t n = mlirOperationGetNumOperands(old) - first_index;
  MlirValue *operands = kiln_calloc((size_t)n + 3, sizeof *operands);
  size_t k = 0;
  if (store) operands[k++] = value;
  operands[k++] = mem;
  for (intptr_t i = 0; i < n; i++) operands[k++] = mlirOperationGetOperand(old, first_index + i);
  operands[k++] = half;
  MlirOperationState st =
      mlirOperationStateGet(sref(store ? "memref.store" : "memref.load"), mlirOperationGetLocation(old));
  mlirOperationStateAddOperands(&st, (intptr_t)k, operands);
  if (!store) mlirOperationStateAddResults(&st, 1, &i32);
  kiln_free(operands);
  MlirOperation op = mlirOperationCreate(&st);
  mlirBlockInsertOwnedOperationBefore(mlirOperationGetBlock(old), old, op);
  return op;
}

/* Whether every use of `v` is as the buffer of a memref.load or memref.store. */
static bool only_loads_and_stores(MlirValue v, ops_t *users) {
  for (MlirOpOperand u = mlirValueGetFirstUse(v); !mlirOpOperandIsNull(u); u = mlirOpOperandGetNextUse(u)) {
    MlirOperation owner = mlirOpOperandGetOwner(u);
    unsigned at = mlirOpOperandGetOperandNumber(u);
    bool ok = (kiln_compiler_op_is(owner, "memref.load") && at == 0) ||
              (kiln_compiler_op_is(owner, "memref.store") && at == 1);
    if (!ok) return false;
    ops_push(users, owner);
  }
  return true;
}

static MlirWalkResult collect_gpu_funcs(MlirOperation op, void *user) {
  if (!kiln_compiler_op_is(op, "gpu.func")) return MlirWalkResultAdvance;
  ops_push(user, op);
  return MlirWalkResultSkip; /* no gpu.func inside another */
}

void kiln_compiler_kernels_split_i64(MlirContext context, MlirModule module) {
  /* Only the functions: the loads and stores rewritten below are destroyed, and a
   * list of every op would then hold freed ones. */
  ops_t funcs = {0};
  mlirOperationWalk(mlirModuleGetOperation(module), collect_gpu_funcs, &funcs, MlirWalkPreOrder);
  MlirType i32 = mlirIntegerTypeGet(context, 32), i64 = mlirIntegerTypeGet(context, 64);
  for (size_t f = 0; f < funcs.n; f++) {
    MlirOperation func = funcs.items[f];
    if (!kiln_compiler_op_is(func, "gpu.func")) continue;
    MlirBlock entry = mlirRegionGetFirstBlock(mlirOperationGetRegion(func, 0));
    intptr_t n_args = mlirBlockGetNumArguments(entry);
    bool changed = false;
    for (intptr_t a = 0; a < n_args; a++) {
      MlirValue arg = mlirBlockGetArgument(entry, a);
      MlirType t = mlirValueGetType(arg);
      if (!mlirTypeIsAMemRef(t) || !mlirTypeIsAInteger(mlirShapedTypeGetElementType(t)) ||
          mlirIntegerTypeGetWidth(mlirShapedTypeGetElementType(t)) != 64) {
        continue;
      }
      /* The layout in i32 words: an identity one stays identity; a static strided
       * one (a slice of a buffer, folded into the argument) doubles its strides
       * and offset, the new innermost dimension of 2 at stride 1. */
      intptr_t rank = mlirShapedTypeGetRank(t);
      MlirAttribute layout = mlirAttributeGetNull();
      if (!mlirAffineMapIsIdentity(mlirMemRefTypeGetAffineMap(t))) {
        int64_t *strides = kiln_calloc((size_t)rank + 1, sizeof *strides);
        int64_t offset = 0;
        bool ok = mlirLogicalResultIsSuccess(mlirMemRefTypeGetStridesAndOffset(t, strides, &offset)) &&
                  !mlirShapedTypeIsDynamicStrideOrOffset(offset);
        for (intptr_t d = 0; ok && d < rank; d++) {
          ok = !mlirShapedTypeIsDynamicStrideOrOffset(strides[d]);
          strides[d] *= 2;
        }
        strides[rank] = 1;
        if (ok) layout = mlirStridedLayoutAttrGet(context, offset * 2, rank + 1, strides);
        kiln_free(strides);
        if (!ok) continue; /* left to the emulation, whose error names the op */
      }
      ops_t users = {0};
      if (!only_loads_and_stores(arg, &users)) {
        kiln_free(users.items);
        continue; /* left to the emulation, whose error names the op */
      }
      int64_t *shape = kiln_calloc((size_t)rank + 1, sizeof *shape);
      for (intptr_t d = 0; d < rank; d++) shape[d] = mlirShapedTypeGetDimSize(t, d);
      shape[rank] = 2;
      MlirType pair = mlirMemRefTypeGet(i32, rank + 1, shape, layout, mlirMemRefTypeGetMemorySpace(t));
      kiln_free(shape);
      mlirValueSetType(arg, pair);
      changed = true;
      for (size_t u = 0; u < users.n; u++) {
        MlirOperation old = users.items[u];
        MlirBlock block = mlirOperationGetBlock(old);
        MlirValue c0 = index_const(context, block, old, 0), c1 = index_const(context, block, old, 1);
        if (kiln_compiler_op_is(old, "memref.load")) {
          MlirValue lo = mlirOperationGetResult(pair_access(old, false, (MlirValue){NULL}, arg, c0, i32), 0);
          MlirValue hi = mlirOperationGetResult(pair_access(old, false, (MlirValue){NULL}, arg, c1, i32), 0);
          MlirValue lo64 = unop("arith.extui", lo, i64, block, old);
          MlirValue hi64 = unop("arith.extui", hi, i64, block, old);
          MlirValue shifted =
              binop("arith.shli", hi64, int_const(context, block, old, i64, 32), i64, block, old);
          MlirValue v = binop("arith.ori", shifted, lo64, i64, block, old);
          mlirValueReplaceAllUsesOfWith(mlirOperationGetResult(old, 0), v);
        } else {
          MlirValue v = mlirOperationGetOperand(old, 0);
          MlirValue lo = unop("arith.trunci", v, i32, block, old);
          MlirValue high = binop("arith.shrui", v, int_const(context, block, old, i64, 32), i64, block, old);
          MlirValue hi = unop("arith.trunci", high, i32, block, old);
          pair_access(old, true, lo, arg, c0, i32);
          pair_access(old, true, hi, arg, c1, i32);
        }
        mlirOperationDestroy(old);
      }
      kiln_free(users.items);
    }
    if (changed) {
      MlirType *inputs = kiln_calloc(n_args ? (size_t)n_args : 1, sizeof *inputs);
      for (intptr_t a = 0; a < n_args; a++) inputs[a] = mlirValueGetType(mlirBlockGetArgument(entry, a));
      mlirOperationSetInherentAttributeByName(
          func, sref("function_type"),
          mlirTypeAttrGet(mlirFunctionTypeGet(context, n_args, inputs, 0, NULL)));
      kiln_free(inputs);
    }
  }
  kiln_free(funcs.items);
}

/* ---- i64 shifts by zero ---- */

static MlirWalkResult collect_i64_shifts(MlirOperation op, void *user) {
  if ((kiln_compiler_op_is(op, "arith.shli") || kiln_compiler_op_is(op, "arith.shrui") ||
       kiln_compiler_op_is(op, "arith.shrsi"))) {
    MlirType t = mlirValueGetType(mlirOperationGetResult(op, 0));
    int64_t amount;
    if (mlirTypeIsAInteger(t) && mlirIntegerTypeGetWidth(t) == 64 &&
        !kiln_compiler_int_constant_value(mlirOperationGetOperand(op, 1), &amount)) {
      ops_push(user, op);
    }
  }
  return MlirWalkResultAdvance;
}

void kiln_compiler_kernels_guard_i64_shifts(MlirContext context, MlirModule module) {
  ops_t shifts = {0};
  mlirOperationWalk(mlirModuleGetOperation(module), collect_i64_shifts, &shifts, MlirWalkPreOrder);
  MlirType i64 = mlirIntegerTypeGet(context, 64);
  for (size_t i = 0; i < shifts.n; i++) {
    MlirOperation op = shifts.items[i];
    MlirOperation next = mlirOperationGetNextInBlock(op);
    MlirValue x = mlirOperationGetOperand(op, 0), s = mlirOperationGetOperand(op, 1);
    MlirValue shifted = mlirOperationGetResult(op, 0);
    MlirValue zero = kiln_compiler_int_const_before(context, next, i64, 0);
    MlirValue operands[3] = {compare_before(context, "arith.cmpi", next, 0 /* eq */, s, zero), x, shifted};
    MlirValue r = kiln_compiler_build_before("arith.select", next, operands, 3, i64);
    MlirOperation sel = mlirOpResultGetOwner(r);
    mlirValueReplaceAllUsesExcept(shifted, r, 1, &sel);
  }
  kiln_free(shifts.items);
}

/* ---- i64 carried by scf loops and branches ---- */

static bool is_i64(MlirType t) { return mlirTypeIsAInteger(t) && mlirIntegerTypeGetWidth(t) == 64; }

/* v's low and high words, computed before `before`. */
static void split_before(MlirContext ctx, MlirOperation before, MlirValue v, MlirValue *lo, MlirValue *hi) {
  MlirType i32 = mlirIntegerTypeGet(ctx, 32), i64 = mlirIntegerTypeGet(ctx, 64);
  *lo = kiln_compiler_build1("arith.trunci", before, v, i32);
  MlirValue c32 = kiln_compiler_int_const_before(ctx, before, i64, 32);
  MlirValue shifted = kiln_compiler_build2("arith.shrui", before, v, c32, i64);
  *hi = kiln_compiler_build1("arith.trunci", before, shifted, i32);
}

/* The i64 of two words, computed before `before`. */
static MlirValue join_before(MlirContext ctx, MlirOperation before, MlirValue lo, MlirValue hi) {
  MlirType i64 = mlirIntegerTypeGet(ctx, 64);
  MlirValue l = kiln_compiler_build1("arith.extui", before, lo, i64);
  MlirValue h = kiln_compiler_build1("arith.extui", before, hi, i64);
  MlirValue c32 = kiln_compiler_int_const_before(ctx, before, i64, 32);
  MlirValue hs = kiln_compiler_build2("arith.shli", before, h, c32, i64);
  return kiln_compiler_build2("arith.ori", before, hs, l, i64);
}

/* `values` (n) with each i64 from position `skip` on replaced by its two words,
 * split before `before`; returns the new count (out holds up to 2n). */
static intptr_t split_list(MlirContext ctx, MlirOperation before, const MlirValue *values, intptr_t n,
                           intptr_t skip, MlirValue *out) {
  intptr_t m = 0;
  for (intptr_t i = 0; i < n; i++) {
    if (i >= skip && is_i64(mlirValueGetType(values[i]))) {
      split_before(ctx, before, values[i], &out[m], &out[m + 1]);
      m += 2;
    } else {
      out[m++] = values[i];
    }
  }
  return m;
}

/* A block's i64 arguments from position `skip` on become two i32 arguments each,
 * joined at the top of the block for the code that used them. */
static void split_block_args(MlirContext ctx, MlirBlock b, intptr_t skip) {
  MlirType i32 = mlirIntegerTypeGet(ctx, 32);
  for (intptr_t j = mlirBlockGetNumArguments(b) - 1; j >= skip; j--) {
    MlirValue old = mlirBlockGetArgument(b, j);
    if (!is_i64(mlirValueGetType(old))) continue;
    MlirLocation loc = mlirValueGetLocation(old);
    MlirValue lo = mlirBlockInsertArgument(b, (unsigned)j + 1, i32, loc);
    MlirValue hi = mlirBlockInsertArgument(b, (unsigned)j + 2, i32, loc);
    MlirValue v = join_before(ctx, mlirBlockGetFirstOperation(b), lo, hi);
    mlirValueReplaceAllUsesOfWith(old, v);
    mlirBlockEraseArgument(b, (unsigned)j);
  }
}

static void split_terminator(MlirContext ctx, MlirOperation term, intptr_t skip) {
  intptr_t n = mlirOperationGetNumOperands(term);
  MlirValue *in = kiln_calloc(n ? (size_t)n : 1, sizeof *in),
            *out = kiln_calloc(n ? 2 * (size_t)n : 1, sizeof *out);
  for (intptr_t i = 0; i < n; i++) in[i] = mlirOperationGetOperand(term, i);
  intptr_t m = split_list(ctx, term, in, n, skip, out);
  mlirOperationSetOperands(term, m, out);
  kiln_free(in);
  kiln_free(out);
}

static MlirWalkResult collect_i64_carriers(MlirOperation op, void *user) {
  if (kiln_compiler_op_is(op, "scf.for") || kiln_compiler_op_is(op, "scf.while") ||
      kiln_compiler_op_is(op, "scf.if")) {
    for (intptr_t i = 0; i < mlirOperationGetNumResults(op); i++) {
      if (is_i64(mlirValueGetType(mlirOperationGetResult(op, i)))) {
        ops_push(user, op);
        break;
      }
    }
  }
  return MlirWalkResultAdvance;
}

/* One scf.for (lower, upper, step, then the carried values; the body's first
 * argument the induction variable), scf.while (everything carried; the before
 * region's scf.condition has the condition first) or scf.if (the condition, then
 * results only) rebuilt with its i64s as pairs, its regions moved over. */
static void split_carrier(MlirContext ctx, MlirOperation op) {
  bool is_for = kiln_compiler_op_is(op, "scf.for"), is_if = kiln_compiler_op_is(op, "scf.if");
  intptr_t skip = is_for ? 3 : is_if ? 1 : 0;
  intptr_t n_in = mlirOperationGetNumOperands(op), n_out = mlirOperationGetNumResults(op);
  MlirValue *in = kiln_calloc((size_t)n_in + 1, sizeof *in),
            *ops = kiln_calloc(2 * (size_t)n_in + 1, sizeof *ops);
  for (intptr_t i = 0; i < n_in; i++) in[i] = mlirOperationGetOperand(op, i);
  intptr_t m = split_list(ctx, op, in, n_in, skip, ops);
  MlirType i32 = mlirIntegerTypeGet(ctx, 32);
  MlirType *types = kiln_calloc(2 * (size_t)n_out + 1, sizeof *types);
  intptr_t k = 0;
  for (intptr_t i = 0; i < n_out; i++) {
    MlirType t = mlirValueGetType(mlirOperationGetResult(op, i));
    if (is_i64(t)) {
      types[k++] = i32;
      types[k++] = i32;
    } else {
      types[k++] = t;
    }
  }
  intptr_t n_regions = mlirOperationGetNumRegions(op);
  MlirRegion *regions = kiln_calloc((size_t)n_regions + 1, sizeof *regions);
  for (intptr_t r = 0; r < n_regions; r++) regions[r] = mlirRegionCreate();
  MlirOperationState state =
      mlirOperationStateGet(mlirIdentifierStr(mlirOperationGetName(op)), mlirOperationGetLocation(op));
  mlirOperationStateAddOperands(&state, m, ops);
  mlirOperationStateAddResults(&state, k, types);
  for (intptr_t i = 0; i < mlirOperationGetNumAttributes(op); i++) {
    MlirNamedAttribute a = mlirOperationGetAttribute(op, i);
    mlirOperationStateAddAttributes(&state, 1, &a);
  }
  mlirOperationStateAddOwnedRegions(&state, n_regions, regions);
  MlirOperation now = mlirOperationCreate(&state);
  mlirBlockInsertOwnedOperationBefore(mlirOperationGetBlock(op), op, now);
  for (intptr_t r = 0; r < n_regions; r++) {
    MlirRegion region = mlirOperationGetRegion(now, r);
    mlirRegionTakeBody(region, mlirOperationGetRegion(op, r));
    for (MlirBlock b = mlirRegionGetFirstBlock(region); !mlirBlockIsNull(b);
         b = mlirBlockGetNextInRegion(b)) {
      split_block_args(ctx, b, is_for ? 1 : 0);
      MlirOperation term = mlirBlockGetTerminator(b);
      if (mlirOperationIsNull(term)) continue;
      /* scf.condition passes its condition first; the rest carry values */
      split_terminator(ctx, term, kiln_compiler_op_is(term, "scf.condition") ? 1 : 0);
    }
  }
  MlirOperation after = mlirOperationGetNextInBlock(op);
  for (intptr_t i = 0, j = 0; i < n_out; i++) {
    MlirValue old = mlirOperationGetResult(op, i);
    if (is_i64(mlirValueGetType(old))) {
      mlirValueReplaceAllUsesOfWith(
          old, join_before(ctx, after, mlirOperationGetResult(now, j), mlirOperationGetResult(now, j + 1)));
      j += 2;
    } else {
      mlirValueReplaceAllUsesOfWith(old, mlirOperationGetResult(now, j++));
    }
  }
  mlirOperationDestroy(op);
  kiln_free(in);
  kiln_free(ops);
  kiln_free(types);
  kiln_free(regions);
}

void kiln_compiler_kernels_split_carried_i64(MlirContext context, MlirModule module) {
  ops_t carriers = {0};
  mlirOperationWalk(mlirModuleGetOperation(module), collect_i64_carriers, &carriers, MlirWalkPreOrder);
  for (size_t i = 0; i < carriers.n; i++) split_carrier(context, carriers.items[i]);
  kiln_free(carriers.items);
}
