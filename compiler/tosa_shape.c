/* TOSA 1.1's shape operators (host.h: kiln_compiler_tosa_fold_shapes).
 *
 * A !tosa.shape<N> is a list of N sizes that only shape-taking operands
 * (reshape's shape, tile's multiples, pad's padding, slice's start and size)
 * read. MLIR 22 folds tosa.const_shape and nothing else, and no conversion
 * lowers the other shape ops, so a model that computes a shape (a reshape to
 * tosa.mul_shape of two tosa.dim) failed as "failed to legalize". kiln
 * evaluates them at compile time, in one pass in program order (a shape op's
 * operands are defined before it), each into a tosa.const_shape that the TOSA
 * lowering then reads as before. The semantics are the TOSA 1.1 pseudocode's:
 * elementwise add, sub, mul, min, max; div_floor, div_ceil and mod refuse a
 * zero divisor; exp2 takes exponents in [0, 62]; log2_floor and log2_ceil
 * positive sizes; concat_shape concatenates; slice_shape takes
 * input[start, start + size) (start and size are i32 tosa.const scalars);
 * tosa.dim is the input's size along `axis`.
 *
 * What cannot be known at compile time (tosa.dim of a dynamic dimension, a
 * shape from a function argument) is refused with UNIMPLEMENTED naming the op:
 * kiln's dynamic shapes come from the tensors' own types (host.h). */
#include <mlir-c/BuiltinAttributes.h>
#include <mlir-c/BuiltinTypes.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include "base/alloc.h"
#include "base/buf.h"
#include "compiler/host.h"
#include "compiler/kernel_types.h"

#define MAX_SHAPE 64 /* sizes in one !tosa.shape: TOSA's MAX_RANK is 6 */

static MlirStringRef sref(const char *s) { return mlirStringRefCreateFromCString(s); }

static bool is_shape_op(MlirOperation op) {
  MlirStringRef n = mlirIdentifierStr(mlirOperationGetName(op));
  if (n.length < 5 || memcmp(n.data, "tosa.", 5) != 0) return false;
  if (kiln_compiler_op_is(op, "tosa.dim")) return true;
  return n.length > 11 && memcmp(n.data + n.length - 6, "_shape", 6) == 0 &&
         !kiln_compiler_op_is(op, "tosa.const_shape");
}

static MlirWalkResult collect_shape_ops(MlirOperation op, void *user) {
  if (is_shape_op(op)) kiln_compiler_ops_push(user, op);
  return MlirWalkResultAdvance;
}

/* The sizes of a tosa.const_shape result; false for anything else. */
static bool const_shape(MlirValue v, int64_t *out, intptr_t *n) {
  if (!mlirValueIsAOpResult(v)) return false;
  MlirOperation def = mlirOpResultGetOwner(v);
  if (!kiln_compiler_op_is(def, "tosa.const_shape")) return false;
  MlirAttribute a = mlirOperationGetAttributeByName(def, sref("values"));
  if (mlirAttributeIsNull(a) || !mlirAttributeIsADenseElements(a)) return false;
  *n = mlirElementsAttrGetNumElements(a);
  if (*n > MAX_SHAPE) return false;
  for (intptr_t i = 0; i < *n; i++) out[i] = mlirDenseElementsAttrGetIndexValue(a, i);
  return true;
}

/* The value of an i32 tosa.const scalar (rank 0, or one element). */
static bool const_i32(MlirValue v, int64_t *out) {
  if (!mlirValueIsAOpResult(v)) return false;
  MlirOperation def = mlirOpResultGetOwner(v);
  if (!kiln_compiler_op_is(def, "tosa.const")) return false;
  MlirAttribute a = mlirOperationGetAttributeByName(def, sref("values"));
  if (mlirAttributeIsNull(a) || !mlirAttributeIsADenseElements(a) || mlirElementsAttrGetNumElements(a) != 1) {
    return false;
  }
  *out = mlirDenseElementsAttrGetInt32Value(a, 0);
  return true;
}

static int64_t floor_div(int64_t a, int64_t b) {
  int64_t q = a / b;
  return (a % b != 0 && ((a < 0) != (b < 0))) ? q - 1 : q;
}

static int64_t log2_floor(int64_t a) {
  int64_t r = 0;
  while (a > 1) a >>= 1, r++;
  return r;
}

typedef struct fold_s {
  const char *name; /* the model's, for messages */
  MlirOperation op;
  int line, col;
} fold_t;

static KILN_MUST_USE kiln_status_t refuse(const fold_t *f, const char *why) {
  MlirStringRef n = mlirIdentifierStr(mlirOperationGetName(f->op));
  return KILN_STATUS(KILN_STATUS_UNIMPLEMENTED, "%s:%d:%d: %.*s: %s", f->name, f->line, f->col, (int)n.length,
                     n.data, why);
}

static KILN_MUST_USE kiln_status_t bad(const fold_t *f, const char *why) {
  MlirStringRef n = mlirIdentifierStr(mlirOperationGetName(f->op));
  return KILN_STATUS(KILN_STATUS_INVALID_ARGUMENT, "%s:%d:%d: %.*s: %s", f->name, f->line, f->col,
                     (int)n.length, n.data, why);
}

/* One elementwise operation; NULL, or the status for a value TOSA forbids. */
static KILN_MUST_USE kiln_status_t apply(const fold_t *f, const char *op, int64_t a, int64_t b,
                                         int64_t *out) {
  if (!strcmp(op, "add_shape")) {
    if (__builtin_add_overflow(a, b, out)) return bad(f, "the sum overflows 64 bits");
  } else if (!strcmp(op, "sub_shape")) {
    if (__builtin_sub_overflow(a, b, out)) return bad(f, "the difference overflows 64 bits");
  } else if (!strcmp(op, "mul_shape")) {
    if (__builtin_mul_overflow(a, b, out)) return bad(f, "the product overflows 64 bits");
  } else if (!strcmp(op, "max_shape")) {
    *out = a > b ? a : b;
  } else if (!strcmp(op, "min_shape")) {
    *out = a < b ? a : b;
  } else if (!strcmp(op, "div_floor_shape") || !strcmp(op, "div_ceil_shape") || !strcmp(op, "mod_shape")) {
    if (b == 0) return bad(f, "divides by zero");
    if (a == INT64_MIN && b == -1) return bad(f, "the quotient overflows 64 bits");
    if (!strcmp(op, "div_floor_shape")) {
      *out = floor_div(a, b);
    } else if (!strcmp(op, "div_ceil_shape")) {
      *out = -floor_div(-a, b);
    } else {
      *out = a - floor_div(a, b) * b;
    }
  } else if (!strcmp(op, "exp2_shape")) {
    if (a < 0 || a > 62) return bad(f, "the exponent is outside [0, 62]");
    *out = (int64_t)1 << a;
  } else if (!strcmp(op, "log2_floor_shape") || !strcmp(op, "log2_ceil_shape")) {
    if (a <= 0) return bad(f, "the logarithm of a size <= 0");
    *out = log2_floor(a);
    if (!strcmp(op, "log2_ceil_shape") && ((int64_t)1 << *out) != a) ++*out;
  } else {
    return refuse(f, "kiln does not know this shape operator");
  }
  return NULL;
}

/* The op's sizes, evaluated from constant operands. */
static KILN_MUST_USE kiln_status_t evaluate(const fold_t *f, int64_t *out, intptr_t *n_out) {
  MlirOperation op = f->op;
  MlirStringRef full = mlirIdentifierStr(mlirOperationGetName(op));
  char name[48];
  snprintf(name, sizeof name, "%.*s", (int)(full.length - 5), full.data + 5);
  int64_t a[MAX_SHAPE], b[MAX_SHAPE];
  intptr_t na = 0, nb = 0;
  if (!strcmp(name, "dim")) {
    MlirType t = mlirValueGetType(mlirOperationGetOperand(op, 0));
    int64_t axis = mlirIntegerAttrGetValueInt(mlirOperationGetAttributeByName(op, sref("axis")));
    if (!mlirShapedTypeHasRank(t) || axis < 0 || axis >= mlirShapedTypeGetRank(t)) {
      return bad(f, "the axis is not a dimension of the input");
    }
    if (mlirShapedTypeIsDynamicDim(t, (intptr_t)axis)) {
      return refuse(
          f,
          "the dimension is dynamic: kiln evaluates shape operators at compile time, so its sizes must "
          "be static (a dynamic tensor's own type carries its sizes to every op that needs them)");
    }
    out[0] = mlirShapedTypeGetDimSize(t, (intptr_t)axis);
    *n_out = 1;
    return NULL;
  }
  for (intptr_t i = 0; i < mlirOperationGetNumOperands(op); i++) {
    MlirValue v = mlirOperationGetOperand(op, i);
    int64_t tmp[MAX_SHAPE];
    intptr_t nt = 0;
    if (mlirTypeIsAShaped(mlirValueGetType(v))) continue; /* slice_shape's scalars, read below */
    if (!const_shape(v, tmp, &nt)) {
      return refuse(f, "an operand is not known at compile time (kiln evaluates shape operators then)");
    }
    if (!strcmp(name, "concat_shape")) {
      if (na + nt > MAX_SHAPE) return bad(f, "the shape is too long");
      memcpy(a + na, tmp, (size_t)nt * sizeof *tmp);
      na += nt;
    } else if (i == 0) {
      memcpy(a, tmp, (size_t)nt * sizeof *tmp);
      na = nt;
    } else {
      memcpy(b, tmp, (size_t)nt * sizeof *tmp);
      nb = nt;
    }
  }
  if (!strcmp(name, "concat_shape")) {
    memcpy(out, a, (size_t)na * sizeof *a);
    *n_out = na;
    return NULL;
  }
  if (!strcmp(name, "slice_shape")) {
    int64_t start, size;
    if (!const_i32(mlirOperationGetOperand(op, 1), &start) ||
        !const_i32(mlirOperationGetOperand(op, 2), &size)) {
      return refuse(f, "start and size must be tosa.const scalars");
    }
    if (start < 0 || size < 0 || start + size > na) return bad(f, "the slice is outside the shape");
    memcpy(out, a + start, (size_t)size * sizeof *a);
    *n_out = size;
    return NULL;
  }
  bool unary =
      !strcmp(name, "exp2_shape") || !strcmp(name, "log2_floor_shape") || !strcmp(name, "log2_ceil_shape");
  if (!unary && na != nb) return bad(f, "the shapes have different lengths");
  for (intptr_t i = 0; i < na; i++) KILN_RETURN_IF_ERROR(apply(f, name, a[i], unary ? 0 : b[i], &out[i]));
  *n_out = na;
  return NULL;
}

static MlirOperation make_const_shape(MlirContext context, MlirOperation before, const int64_t *v,
                                      intptr_t n) {
  kiln_buf_t text;
  kiln_buf_init(&text);
  kiln_buf_append_str(&text, n ? "dense<[" : "dense<");
  for (intptr_t i = 0; i < n; i++) kiln_buf_appendf(&text, "%s%lld", i ? ", " : "", (long long)v[i]);
  kiln_buf_appendf(&text, "%s> : tensor<%ldxindex>", n ? "]" : "", (long)n);
  MlirAttribute values = mlirAttributeParseGet(context, sref(text.data));
  kiln_buf_clear(&text);
  kiln_buf_appendf(&text, "!tosa.shape<%ld>", (long)n);
  MlirType type = mlirTypeParseGet(context, sref(text.data));
  kiln_buf_deinit(&text);
  MlirNamedAttribute attr = kiln_compiler_named_attr(context, "values", values);
  MlirOperationState st = mlirOperationStateGet(sref("tosa.const_shape"), mlirOperationGetLocation(before));
  mlirOperationStateAddResults(&st, 1, &type);
  mlirOperationStateAddAttributes(&st, 1, &attr);
  MlirOperation c = mlirOperationCreate(&st);
  mlirBlockInsertOwnedOperationBefore(mlirOperationGetBlock(before), before, c);
  return c;
}

kiln_status_t kiln_compiler_tosa_fold_shapes(MlirContext context, MlirModule module, const char *name) {
  kiln_compiler_ops_t ops = {0};
  mlirOperationWalk(mlirModuleGetOperation(module), collect_shape_ops, &ops, MlirWalkPreOrder);
  kiln_status_t st = NULL;
  for (size_t i = 0; i < ops.n && !st; i++) {
    fold_t f = {name, ops.items[i], 0, 0};
    kiln_compiler_op_line_col(f.op, &f.line, &f.col);
    int64_t v[MAX_SHAPE];
    intptr_t n = 0;
    st = evaluate(&f, v, &n);
    if (st) break;
    MlirOperation c = make_const_shape(context, f.op, v, n);
    mlirValueReplaceAllUsesOfWith(mlirOperationGetResult(f.op, 0), mlirOperationGetResult(c, 0));
    mlirOperationDestroy(f.op);
  }
  kiln_free(ops.items);
  return st;
}
