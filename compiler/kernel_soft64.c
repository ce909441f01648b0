/* f64 on SPIR-V profiles without Float64 (every Vulkan profile kiln has: Mali and
 * VideoCore GPUs have no 64-bit floats): each f64 value becomes the i64 of its
 * bits and each f64 op kiln_compiler_soft_f64_helper's integer code, which
 * arith-emulate-wide-int then splits into i32 pairs like any other i64 code.
 *
 * The rewrite runs in three steps so that nothing is changed half way when a
 * kernel holds something it cannot convert: check every op first (an op outside
 * the lists below or an f64 vector is refused with the op's file:line:col); then
 * retype every f64 value and buffer in place (buffers keep their bytes, so neither
 * the host plan nor the VMFB's interface changes) and fix the casts at the edges;
 * last, put a copy of the helper's body in place of each arithmetic op.
 */
#include <mlir-c/BuiltinAttributes.h>
#include <mlir-c/BuiltinTypes.h>
#include <string.h>

#include "base/alloc.h"
#include "compiler/kernel_types.h"

static MlirStringRef sref(const char *s) { return mlirStringRefCreateFromCString(s); }

/* Ops that only move f64 values or buffers around: their types change, nothing else. */
static const char *const movers[] = {
    "arith.select", "arith.bitcast", "arith.constant", "memref.load", "memref.store", "memref.subview",
    "memref.reinterpret_cast", "memref.cast", "memref.alloca", "memref.alloc", "memref.dealloc",
    "memref.collapse_shape", "memref.expand_shape", "gpu.func", "gpu.return", "func.return", "scf.yield",
    "scf.condition",
    /* carried f64 becomes carried i64, which kiln_compiler_kernels_split_carried_i64 splits */
    "scf.for", "scf.while", "scf.if", NULL};

/* Ops a helper replaces, and the helper's name (kernel_math64.c). */
static const struct {
  const char *op, *helper;
} converted[] = {
    {"arith.addf", "addf"},          {"arith.subf", "subf"},         {"arith.mulf", "mulf"},
    {"arith.divf", "divf"},          {"arith.negf", "negf"},         {"arith.cmpf", "cmpf"},
    {"arith.maximumf", "maximumf"},  {"arith.minimumf", "minimumf"}, {"arith.maxnumf", "maxnumf"},
    {"arith.minnumf", "minnumf"},    {"arith.sitofp", "sitofp"},     {"arith.uitofp", "uitofp"},
    {"arith.fptosi", "fptosi"},      {"arith.fptoui", "fptoui"},     {"arith.extf", "extf"},
    {"arith.truncf", "truncf"},      {"math.sqrt", "sqrt"},          {"math.rsqrt", "rsqrt"},
    {"math.absf", "absf"},           {"math.copysign", "copysign"},  {"math.floor", "floor"},
    {"math.ceil", "ceil"},           {"math.trunc", "trunc"},        {"math.round", "round"},
    {"math.roundeven", "roundeven"}, {"math.isnan", "isnan"},        {"math.isinf", "isinf"},
    {"math.isfinite", "isfinite"},   {"math.isnormal", "isnormal"},  {"math.fma", "fma"},
};
#define N_CONVERTED (sizeof converted / sizeof converted[0])

static bool is_f64(MlirType t) { return mlirTypeIsAF64(t); }
static bool holds_f64(MlirType t) { return mlirTypeIsAShaped(t) && is_f64(mlirShapedTypeGetElementType(t)); }

static bool touches_f64(MlirOperation op) {
  for (intptr_t i = 0; i < mlirOperationGetNumOperands(op); i++) {
    MlirType t = mlirValueGetType(mlirOperationGetOperand(op, i));
    if (is_f64(t) || holds_f64(t)) return true;
  }
  for (intptr_t i = 0; i < mlirOperationGetNumResults(op); i++) {
    MlirType t = mlirValueGetType(mlirOperationGetResult(op, i));
    if (is_f64(t) || holds_f64(t)) return true;
  }
  return false;
}

static int converted_index(MlirOperation op) {
  for (size_t i = 0; i < N_CONVERTED; i++) {
    if (kiln_compiler_op_is(op, converted[i].op)) return (int)i;
  }
  return -1;
}

static bool is_mover(MlirOperation op) {
  for (size_t i = 0; movers[i]; i++) {
    if (kiln_compiler_op_is(op, movers[i])) return true;
  }
  return false;
}

/* Why `op` cannot be converted, or NULL. */
static const char *unconvertible(MlirOperation op) {
  if (!touches_f64(op)) return NULL;
  for (intptr_t i = 0; i < mlirOperationGetNumOperands(op); i++) {
    MlirType t = mlirValueGetType(mlirOperationGetOperand(op, i));
    if (holds_f64(t) && !mlirTypeIsAMemRef(t)) return "an f64 vector or tensor";
  }
  for (intptr_t i = 0; i < mlirOperationGetNumResults(op); i++) {
    MlirType t = mlirValueGetType(mlirOperationGetResult(op, i));
    if (holds_f64(t) && !mlirTypeIsAMemRef(t)) return "an f64 vector or tensor";
  }
  if (kiln_compiler_op_is(op, "arith.constant")) {
    MlirAttribute v = mlirOperationGetAttributeByName(op, sref("value"));
    return mlirAttributeIsAFloat(v) ? NULL : "a constant that is not one f64";
  }
  if (converted_index(op) >= 0 || is_mover(op)) return NULL;
  return "an op kiln's f64 emulation has no code for";
}

/* f64 -> i64; memref<...xf64> -> memref<...xi64> (shape, layout and space kept). */
static MlirType soft_type(MlirContext ctx, MlirType t) {
  if (is_f64(t)) return mlirIntegerTypeGet(ctx, 64);
  if (!mlirTypeIsAMemRef(t) || !holds_f64(t)) return (MlirType){NULL};
  return kiln_compiler_memref_with_element(t, mlirIntegerTypeGet(ctx, 64));
}

static void retype_value(MlirContext ctx, MlirValue v) {
  MlirType t = soft_type(ctx, mlirValueGetType(v));
  if (!mlirTypeIsNull(t)) mlirValueSetType(v, t);
}

static void retype_func(MlirContext ctx, MlirOperation func) {
  MlirAttribute ft_attr = mlirOperationGetAttributeByName(func, sref("function_type"));
  MlirBlock entry = mlirRegionGetFirstBlock(mlirOperationGetRegion(func, 0));
  if (mlirAttributeIsNull(ft_attr) || mlirBlockIsNull(entry)) return;
  MlirType ft = mlirTypeAttrGetValue(ft_attr);
  /* the arguments, then the workgroup and private attributions */
  intptr_t n = mlirFunctionTypeGetNumInputs(ft);
  MlirType *inputs = kiln_calloc(n ? (size_t)n : 1, sizeof *inputs);
  for (intptr_t i = 0; i < mlirBlockGetNumArguments(entry); i++) {
    retype_value(ctx, mlirBlockGetArgument(entry, i));
    if (i < n) inputs[i] = mlirValueGetType(mlirBlockGetArgument(entry, i));
  }
  mlirOperationSetInherentAttributeByName(func, sref("function_type"),
                                          mlirTypeAttrGet(mlirFunctionTypeGet(ctx, n, inputs, 0, NULL)));
  kiln_free(inputs);
}

/* The result of `op` becomes `now` (type), and what used it sees it through the
 * casts `names` (a NULL-ended list, each to the next type of `types`). */
static void result_through(MlirOperation op, MlirType now, const char *const *names, const MlirType *types) {
  MlirValue r = mlirOperationGetResult(op, 0);
  mlirValueSetType(r, now);
  MlirValue v = r;
  MlirOperation first = {NULL};
  /* op is never a terminator: something follows it */
  MlirOperation next = mlirOperationGetNextInBlock(op);
  for (size_t i = 0; names[i]; i++) {
    v = kiln_compiler_build1(names[i], next, v, types[i]);
    if (mlirOperationIsNull(first)) first = mlirOpResultGetOwner(v);
  }
  mlirValueReplaceAllUsesExcept(r, v, 1, &first);
}

typedef struct bucket_s {
  const char *helper;
  int pred;
  kiln_compiler_ops_t ops;
} bucket_t;

/* Step two for one op: types in place, edge casts; returns the helper index of an
 * op step three replaces, else -1. */
static int retype_op(MlirContext ctx, MlirOperation op, bool touched, int *pred) {
  MlirType i64 = mlirIntegerTypeGet(ctx, 64), i32 = mlirIntegerTypeGet(ctx, 32), f32 = mlirF32TypeGet(ctx);
  if (kiln_compiler_op_is(op, "gpu.func")) retype_func(ctx, op);
  for (intptr_t r = 0; r < mlirOperationGetNumRegions(op); r++) {
    for (MlirBlock b = mlirRegionGetFirstBlock(mlirOperationGetRegion(op, r)); !mlirBlockIsNull(b);
         b = mlirBlockGetNextInRegion(b)) {
      for (intptr_t i = 0; i < mlirBlockGetNumArguments(b); i++)
        retype_value(ctx, mlirBlockGetArgument(b, i));
    }
  }
  if (!touched) return -1;
  int c = converted_index(op);
  MlirType res =
      mlirOperationGetNumResults(op) ? mlirValueGetType(mlirOperationGetResult(op, 0)) : (MlirType){NULL};
  if (kiln_compiler_op_is(op, "arith.constant")) {
    double d = mlirFloatAttrGetValueDouble(mlirOperationGetAttributeByName(op, sref("value")));
    int64_t bits;
    memcpy(&bits, &d, sizeof bits);
    MlirValue k = kiln_compiler_int_const_before(ctx, op, i64, bits);
    mlirValueReplaceAllUsesOfWith(mlirOperationGetResult(op, 0), k);
    mlirOperationDestroy(op);
    return -1;
  }
  for (intptr_t i = 0; i < mlirOperationGetNumResults(op); i++)
    retype_value(ctx, mlirOperationGetResult(op, i));
  if (kiln_compiler_op_is(op, "arith.bitcast")) {
    /* f64 <-> i64: now i64 both sides */
    mlirValueReplaceAllUsesOfWith(mlirOperationGetResult(op, 0), mlirOperationGetOperand(op, 0));
    mlirOperationDestroy(op);
    return -1;
  }
  if (c < 0) return -1;
  MlirValue in = mlirOperationGetOperand(op, 0);
  MlirType in_t = mlirValueGetType(in);
  if ((kiln_compiler_op_is(op, "arith.sitofp") || kiln_compiler_op_is(op, "arith.uitofp")) &&
      mlirIntegerTypeGetWidth(in_t) < 64) {
    const char *ext = kiln_compiler_op_is(op, "arith.sitofp") ? "arith.extsi" : "arith.extui";
    mlirOperationSetOperand(op, 0, kiln_compiler_build1(ext, op, in, i64));
  } else if ((kiln_compiler_op_is(op, "arith.fptosi") || kiln_compiler_op_is(op, "arith.fptoui")) &&
             mlirIntegerTypeGetWidth(res) < 64) {
    static const char *const names[] = {"arith.trunci", NULL};
    result_through(op, i64, names, &res);
  } else if (kiln_compiler_op_is(op, "arith.extf")) {
    /* from f32's bits; f16 and bf16 through f32 (exact) */
    if (!mlirTypeIsAF32(in_t)) in = kiln_compiler_build1("arith.extf", op, in, f32);
    mlirOperationSetOperand(op, 0, kiln_compiler_build1("arith.bitcast", op, in, i32));
  } else if (kiln_compiler_op_is(op, "arith.truncf")) {
    /* to f32's bits; to f16 and bf16 through f32 rounded to odd, then to nearest
     * even: one correct rounding */
    if (mlirTypeIsAF32(res)) {
      static const char *const names[] = {"arith.bitcast", NULL};
      result_through(op, i32, names, &f32);
    } else {
      static const char *const names[] = {"arith.bitcast", "arith.truncf", NULL};
      MlirType types[] = {f32, res};
      result_through(op, i32, names, types);
      *pred = -1;
      return c;
    }
  } else if (kiln_compiler_op_is(op, "arith.cmpf")) {
    *pred = (int)mlirIntegerAttrGetValueInt(mlirOperationGetAttributeByName(op, sref("predicate")));
    return c;
  }
  *pred = 0;
  return c;
}

kiln_status_t kiln_compiler_kernels_soft_f64(MlirContext context, MlirModule module, const char *name,
                                             const char *target) {
  kiln_compiler_ops_t all = {0};
  mlirOperationWalk(mlirModuleGetOperation(module), kiln_compiler_ops_collect_all, &all, MlirWalkPreOrder);
  kiln_status_t st = NULL;
  /* whether each op had f64 before step two changed its operands' types */
  bool *touched = kiln_calloc(all.n ? all.n : 1, sizeof *touched);
  for (size_t i = 0; i < all.n && !st; i++) {
    touched[i] = touches_f64(all.items[i]);
    const char *why = unconvertible(all.items[i]);
    if (!why) continue;
    int line = 0, col = 0;
    kiln_compiler_op_line_col(all.items[i], &line, &col);
    MlirStringRef op = mlirIdentifierStr(mlirOperationGetName(all.items[i]));
    st = KILN_STATUS(KILN_STATUS_UNIMPLEMENTED,
                     "%s:%d:%d: %s: a kernel's %.*s works on f64, which %s's Vulkan profile has no "
                     "instructions for (Float64), and kiln's f64 emulation does not cover it: %s. "
                     "Convert the model to f32 for this target, or compile it for a CPU, CUDA or AMD target",
                     name, line, col, target, (int)op.length, op.data, target, why);
  }
  /* one per helper, cmpf once per predicate (16), truncf_odd beside truncf */
  bucket_t buckets[N_CONVERTED + 17] = {{0}};
  size_t n_buckets = 0;
  for (size_t i = 0; i < all.n && !st; i++) {
    int pred = 0;
    int c = retype_op(context, all.items[i], touched[i], &pred);
    if (c < 0) continue;
    const char *helper = pred == -1 ? "truncf_odd" : converted[c].helper;
    size_t b = 0;
    while (b < n_buckets && !(strcmp(buckets[b].helper, helper) == 0 && buckets[b].pred == pred)) b++;
    if (b == n_buckets) buckets[n_buckets++] = (bucket_t){helper, pred, {0}};
    kiln_compiler_ops_push(&buckets[b].ops, all.items[i]);
  }
  for (size_t b = 0; b < n_buckets; b++) {
    if (!st) {
      char *text =
          kiln_compiler_soft_f64_helper(buckets[b].helper, buckets[b].pred < 0 ? 0 : buckets[b].pred);
      st = text ? kiln_compiler_kernels_replace_with_helper(context, buckets[b].ops.items, buckets[b].ops.n,
                                                            text)
                : KILN_STATUS(KILN_STATUS_INTERNAL, "no soft f64 helper %s", buckets[b].helper);
      kiln_free(text);
    }
    kiln_free(buckets[b].ops.items);
  }
  kiln_free(touched);
  kiln_free(all.items);
  return st;
}
