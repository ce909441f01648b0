/* Elementwise kernels in 128-bit vectors on GPU targets (gpu_elementwise.h).
 *
 * The kernel is read first and left untouched unless every condition holds;
 * then it is rewritten in place (argument and result types set to vectors,
 * broadcasts inserted, the guard's bound divided by 4), printed, and swapped in
 * through kiln_compiler_gpu_kernel_swap, whose parse verifies the result. A
 * rewrite that does not parse puts the kernel's original text back: the kernel
 * stays scalar, never wrong.
 */
#include "compiler/gpu_elementwise.h"

#include <mlir-c/BuiltinAttributes.h>
#include <mlir-c/BuiltinTypes.h>
#include <mlir-c/Diagnostics.h>
#include <stdio.h>
#include <string.h>

#include "base/alloc.h"
#include "base/buf.h"
#include "compiler/gpu_match.h"
#include "compiler/internal.h"
#include "compiler/kernel_types.h"

#define VEC    4
#define TILE_X 32 /* the front half's tile along thread x (pipeline.c: FRONT_TILE) */

/* Index arithmetic the front half writes around the body. */
static const char *const index_ops[] = {"arith.constant", "gpu.block_id", "gpu.thread_id", "affine.apply",
                                        "arith.addi",     "arith.muli",   "arith.cmpi",    "arith.andi",
                                        "arith.divui",    "arith.remui",  "arith.subi"};

/* Index or i1 (a guard's compare) throughout. */
static bool index_or_i1(MlirType t) {
  return mlirTypeIsAIndex(t) || (mlirTypeIsAInteger(t) && mlirIntegerTypeGetWidth(t) == 1);
}

static bool all_index(MlirOperation op) {
  for (intptr_t i = 0; i < mlirOperationGetNumOperands(op); i++) {
    if (!index_or_i1(mlirValueGetType(mlirOperationGetOperand(op, i)))) return false;
  }
  for (intptr_t i = 0; i < mlirOperationGetNumResults(op); i++) {
    if (!index_or_i1(mlirValueGetType(mlirOperationGetResult(op, i)))) return false;
  }
  return true;
}

static bool one_use(MlirValue v) {
  MlirOpOperand u = mlirValueGetFirstUse(v);
  return !mlirOpOperandIsNull(u) && mlirOpOperandIsNull(mlirOpOperandGetNextUse(u));
}

/* What reading the kernel found. */
typedef struct shape_s {
  MlirBlock entry, body;
  MlirValue x;             /* the contiguous index */
  int bdim;                /* the grid dimension of its block id */
  int64_t n;               /* the contiguous extent */
  MlirOperation bound_cmp; /* the guard's x < n, or null */
  bool add_guard;          /* no guard, and the vectors fill no whole tile */
  signed char *use;        /* per argument: 0 unused, 1 vector, 2 scalar */
} shape_t;

/* An f32 buffer argument of `s->entry` whose last dimension is s->n. */
static int vector_arg(const shape_t *s, MlirValue memref) {
  int a = kiln_compiler_gpu_arg_of(memref, s->entry);
  MlirType t = mlirValueGetType(memref);
  if (a < 0 || !kiln_compiler_gpu_plain_memref(t) || !mlirTypeIsAF32(mlirShapedTypeGetElementType(t)) ||
      mlirShapedTypeGetDimSize(t, mlirShapedTypeGetRank(t) - 1) != s->n) {
    return -1;
  }
  return a;
}

/* Marks argument a used as `kind`; false when it is used both ways. */
static bool mark(shape_t *s, int a, signed char kind) {
  if (s->use[a] && s->use[a] != kind) return false;
  s->use[a] = kind;
  return true;
}

static bool uses_value(MlirOperation op, MlirValue v, intptr_t from) {
  for (intptr_t i = from; i < mlirOperationGetNumOperands(op); i++) {
    if (mlirValueEqual(mlirOperationGetOperand(op, i), v)) return true;
  }
  return false;
}

/* Reads the kernel into *s; false when it is not of the form taken. */
static bool read_kernel(MlirOperation func, const uint32_t grid[3], shape_t *s) {
  s->entry = kiln_compiler_gpu_kernel_entry(func);
  if (mlirBlockIsNull(s->entry)) return false;
  MlirOperation guard = {NULL};
  for (MlirOperation op = mlirBlockGetFirstOperation(s->entry); !mlirOperationIsNull(op);
       op = mlirOperationGetNextInBlock(op)) {
    if (kiln_compiler_op_is(op, "scf.if")) {
      if (!mlirOperationIsNull(guard) || mlirOperationGetNumResults(op) != 0 ||
          !mlirBlockIsNull(mlirRegionGetFirstBlock(mlirOperationGetRegion(op, 1)))) {
        return false;
      }
      guard = op;
    }
  }
  s->body = mlirOperationIsNull(guard) ? s->entry : mlirRegionGetFirstBlock(mlirOperationGetRegion(guard, 0));
  /* The stores fix x and N. */
  for (MlirOperation op = mlirBlockGetFirstOperation(s->body); !mlirOperationIsNull(op);
       op = mlirOperationGetNextInBlock(op)) {
    if (!kiln_compiler_op_is(op, "memref.store")) continue;
    intptr_t n_ops = mlirOperationGetNumOperands(op);
    MlirValue last = mlirOperationGetOperand(op, n_ops - 1);
    MlirType t = mlirValueGetType(mlirOperationGetOperand(op, 1));
    if (n_ops < 3 || !mlirTypeIsAShaped(t)) return false;
    int64_t n = mlirShapedTypeGetDimSize(t, mlirShapedTypeGetRank(t) - 1);
    if (mlirValueIsNull(s->x)) {
      s->x = last, s->n = n;
    } else if (!mlirValueEqual(s->x, last) || s->n != n) {
      return false;
    }
  }
  if (mlirValueIsNull(s->x) || s->n <= 0 || s->n % VEC) return false;
  s->bdim = -1;
  for (int d = 0; d < 3 && s->bdim < 0; d++) {
    if (kiln_compiler_gpu_is_tile_index(s->x, 'x', "xyz"[d], TILE_X)) s->bdim = d;
  }
  if (s->bdim < 0) return false;
  /* x's block id feeds x alone (the grid along it changes). */
  MlirOperation add = kiln_compiler_gpu_def_of(s->x);
  for (int i = 0; i < 2; i++) {
    MlirOperation apply = kiln_compiler_gpu_def_of(mlirOperationGetOperand(add, i));
    if (mlirOperationIsNull(apply) || !kiln_compiler_op_is(apply, "affine.apply")) continue;
    if (!one_use(mlirOperationGetResult(apply, 0)) || !one_use(mlirOperationGetOperand(apply, 0)))
      return false;
  }
  /* The entry around the body: index arithmetic (and the guard). */
  for (MlirOperation op = mlirBlockGetFirstOperation(s->entry);
       !mlirOperationIsNull(op) && !mlirOperationIsNull(guard); op = mlirOperationGetNextInBlock(op)) {
    bool index = kiln_compiler_gpu_op_is_one_of(op, index_ops, sizeof index_ops / sizeof index_ops[0]) &&
                 all_index(op);
    if (!mlirOperationEqual(op, guard) && !kiln_compiler_op_is(op, "gpu.return") &&
        !kiln_compiler_op_is(op, "arith.constant") && !index) {
      return false;
    }
  }
  /* The body. */
  for (MlirOperation op = mlirBlockGetFirstOperation(s->body); !mlirOperationIsNull(op);
       op = mlirOperationGetNextInBlock(op)) {
    bool load = kiln_compiler_op_is(op, "memref.load"), store = kiln_compiler_op_is(op, "memref.store");
    if (load || store) {
      intptr_t first = load ? 1 : 2, n_ops = mlirOperationGetNumOperands(op);
      MlirValue memref = mlirOperationGetOperand(op, first - 1);
      bool along = n_ops > first && mlirValueEqual(mlirOperationGetOperand(op, n_ops - 1), s->x);
      if (uses_value(op, s->x, first) && !along) return false; /* x elsewhere: not elementwise */
      int a = along ? vector_arg(s, memref) : kiln_compiler_gpu_arg_of(memref, s->entry);
      if (a < 0 || !mark(s, a, along ? 1 : 2) || (store && !along) || uses_value(op, s->x, 0) != along) {
        return false;
      }
      continue;
    }
    if (kiln_compiler_op_is(op, "scf.yield") || kiln_compiler_op_is(op, "gpu.return")) continue;
    bool index = kiln_compiler_gpu_op_is_one_of(op, index_ops, sizeof index_ops / sizeof index_ops[0]) &&
                 all_index(op) && mlirOperationIsNull(guard);
    if (!index && !kiln_compiler_gpu_value_op(op)) return false;
  }
  /* x: the loads' and stores' last index and the guard's bound alone. */
  if (!mlirOperationIsNull(guard)) {
    MlirOperation leaves[KILN_COMPILER_GPU_MAX_LEAVES];
    size_t n_leaves = 0;
    if (!kiln_compiler_gpu_and_leaves(mlirOperationGetOperand(guard, 0), leaves, &n_leaves)) return false;
    for (size_t i = 0; i < n_leaves; i++) {
      int64_t b = 0;
      if (kiln_compiler_gpu_is_below(leaves[i], s->x, &b)) {
        if (b != s->n || !mlirOperationIsNull(s->bound_cmp)) return false;
        s->bound_cmp = leaves[i];
      }
    }
    if (mlirOperationIsNull(s->bound_cmp)) return false;
  } else if ((uint64_t)grid[s->bdim] * TILE_X != (uint64_t)s->n) {
    return false;
  } else {
    s->add_guard = (s->n / VEC) % TILE_X != 0;
  }
  for (MlirOpOperand u = mlirValueGetFirstUse(s->x); !mlirOpOperandIsNull(u);
       u = mlirOpOperandGetNextUse(u)) {
    MlirOperation owner = mlirOpOperandGetOwner(u);
    bool memory = kiln_compiler_op_is(owner, "memref.load") || kiln_compiler_op_is(owner, "memref.store");
    if (!(memory && mlirOpOperandGetOperandNumber(u) == (unsigned)(mlirOperationGetNumOperands(owner) - 1)) &&
        !(!mlirOperationIsNull(s->bound_cmp) && mlirOperationEqual(owner, s->bound_cmp))) {
      return false;
    }
  }
  return true;
}

static MlirType vec_of(MlirType t) {
  int64_t shape[1] = {VEC};
  return mlirVectorTypeGet(1, shape, t);
}

static bool is_vec(MlirValue v) { return mlirTypeIsAVector(mlirValueGetType(v)); }

/* Replaces operand i of `op` by its broadcast to vector<4>, made just before `op`. */
static void broadcast_operand(MlirOperation op, intptr_t i) {
  MlirValue v = mlirOperationGetOperand(op, i);
  mlirOperationSetOperand(op, i,
                          kiln_compiler_build1("vector.broadcast", op, v, vec_of(mlirValueGetType(v))));
}

/* Replaces vector op `op` by its scalar form per lane: vector.extract of each
 * operand, a clone of `op` on scalars, vector.from_elements of the results. For
 * math ops the ROCDL lowering takes only on scalars. */
static void unroll(MlirContext context, MlirOperation op) {
  MlirValue result = mlirOperationGetResult(op, 0);
  MlirValue lanes[VEC];
  for (int j = 0; j < VEC; j++) {
    MlirOperation scalar = mlirOperationClone(op);
    for (intptr_t i = 0; i < mlirOperationGetNumOperands(op); i++) {
      MlirValue v = mlirOperationGetOperand(op, i);
      MlirValue lane =
          kiln_compiler_build1("vector.extract", op, v, mlirShapedTypeGetElementType(mlirValueGetType(v)));
      int64_t pos[1] = {j};
      mlirOperationSetAttributeByName(kiln_compiler_gpu_def_of(lane),
                                      mlirStringRefCreateFromCString("static_position"),
                                      mlirDenseI64ArrayGet(context, 1, pos));
      mlirOperationSetOperand(scalar, i, lane);
    }
    mlirValueSetType(mlirOperationGetResult(scalar, 0),
                     mlirShapedTypeGetElementType(mlirValueGetType(result)));
    mlirBlockInsertOwnedOperationBefore(mlirOperationGetBlock(op), op, scalar);
    lanes[j] = mlirOperationGetResult(scalar, 0);
  }
  mlirValueReplaceAllUsesOfWith(
      result, kiln_compiler_build_before("vector.from_elements", op, lanes, VEC, mlirValueGetType(result)));
  mlirOperationDestroy(op);
}

/* Wraps the loads, stores and value ops of guard-less kernel `s` in
 * `if x < n/4`, just before its gpu.return: a grid of whole tiles of
 * vectors overhangs the N/4 there are. */
static void add_guard(MlirContext context, shape_t *s) {
  MlirOperation ret = {NULL};
  for (MlirOperation op = mlirBlockGetFirstOperation(s->entry); !mlirOperationIsNull(op);
       op = mlirOperationGetNextInBlock(op)) {
    if (kiln_compiler_op_is(op, "gpu.return")) ret = op;
  }
  MlirLocation loc = mlirOperationGetLocation(ret);
  MlirValue bound = kiln_compiler_int_const_before(context, ret, mlirIndexTypeGet(context), s->n / VEC);
  MlirValue cond = kiln_compiler_build2("arith.cmpi", ret, s->x, bound, mlirIntegerTypeGet(context, 1));
  MlirOperation cmp = kiln_compiler_gpu_def_of(cond);
  mlirOperationSetAttributeByName(cmp, mlirStringRefCreateFromCString("predicate"),
                                  mlirIntegerAttrGet(mlirIntegerTypeGet(context, 64), 6 /* ult */));
  MlirRegion regions[2] = {mlirRegionCreate(), mlirRegionCreate()};
  MlirBlock then = mlirBlockCreate(0, NULL, NULL);
  mlirRegionAppendOwnedBlock(regions[0], then);
  MlirOperationState ys = mlirOperationStateGet(mlirStringRefCreateFromCString("scf.yield"), loc);
  MlirOperation yield = mlirOperationCreate(&ys);
  mlirBlockAppendOwnedOperation(then, yield);
  MlirOperationState is = mlirOperationStateGet(mlirStringRefCreateFromCString("scf.if"), loc);
  mlirOperationStateAddOperands(&is, 1, &cond);
  mlirOperationStateAddOwnedRegions(&is, 2, regions);
  MlirOperation guard = mlirOperationCreate(&is);
  mlirBlockInsertOwnedOperationBefore(s->entry, ret, guard);
  MlirOperation next = {NULL};
  for (MlirOperation op = mlirBlockGetFirstOperation(s->entry); !mlirOperationEqual(op, cmp); op = next) {
    next = mlirOperationGetNextInBlock(op);
    if (kiln_compiler_op_is(op, "memref.load") || kiln_compiler_op_is(op, "memref.store") ||
        (kiln_compiler_gpu_value_op(op) && !kiln_compiler_op_is(op, "arith.constant"))) {
      mlirOperationMoveBefore(op, yield);
    }
  }
  s->body = then;
}

/* Diagnostics of a rewrite that does not verify are not the user's: the
 * original kernel goes back and the compile goes on. */
static MlirLogicalResult swallow(MlirDiagnostic diag, void *user) {
  (void)diag, (void)user;
  return mlirLogicalResultSuccess();
}

static void print_cb(MlirStringRef s, void *user) { kiln_buf_append(user, s.data, s.length); }

/* The kernel's text inside a gpu.module, as kiln_compiler_gpu_kernel_swap takes it. */
static char *module_text(MlirOperation func) {
  kiln_buf_t b;
  kiln_buf_init(&b);
  kiln_buf_append_str(&b, "gpu.module @kiln_elementwise {\n");
  mlirOperationPrint(func, print_cb, &b);
  kiln_buf_append_str(&b, "\n}\n");
  return kiln_buf_take(&b);
}

/* Rewrites the kernel read as `s` in place; math ops per lane where
 * `scalar_math`. */
static void rewrite(MlirContext context, MlirOperation func, shape_t *s, bool scalar_math) {
  intptr_t n_args = mlirBlockGetNumArguments(s->entry);
  MlirType *inputs = kiln_calloc((size_t)n_args + 1, sizeof *inputs);
  for (intptr_t a = 0; a < n_args; a++) {
    MlirValue arg = mlirBlockGetArgument(s->entry, a);
    MlirType t = mlirValueGetType(arg);
    if (s->use[a] == 1) {
      intptr_t rank = mlirShapedTypeGetRank(t);
      int64_t *dims = kiln_calloc((size_t)rank, sizeof *dims);
      for (intptr_t d = 0; d < rank; d++) dims[d] = mlirShapedTypeGetDimSize(t, d);
      dims[rank - 1] /= VEC;
      t = mlirMemRefTypeContiguousGet(vec_of(mlirShapedTypeGetElementType(t)), rank, dims,
                                      mlirAttributeGetNull());
      kiln_free(dims);
      mlirBlockArgumentSetType(arg, t);
    }
    inputs[a] = t;
  }
  mlirOperationSetAttributeByName(func, mlirStringRefCreateFromCString("function_type"),
                                  mlirTypeAttrGet(mlirFunctionTypeGet(context, n_args, inputs, 0, NULL)));
  kiln_free(inputs);
  mlirOperationRemoveAttributeByName(func, mlirStringRefCreateFromCString("known_grid_size"));
  if (s->add_guard) add_guard(context, s);
  MlirOperation next = {NULL};
  for (MlirOperation op = mlirBlockGetFirstOperation(s->body); !mlirOperationIsNull(op); op = next) {
    next = mlirOperationGetNextInBlock(op);
    if (kiln_compiler_op_is(op, "memref.load")) {
      MlirValue r = mlirOperationGetResult(op, 0);
      if (mlirTypeIsAVector(mlirShapedTypeGetElementType(mlirValueGetType(mlirOperationGetOperand(op, 0))))) {
        mlirValueSetType(r, vec_of(mlirValueGetType(r)));
      }
      continue;
    }
    if (kiln_compiler_op_is(op, "memref.store")) {
      MlirType et = mlirShapedTypeGetElementType(mlirValueGetType(mlirOperationGetOperand(op, 1)));
      if (mlirTypeIsAVector(et) && !is_vec(mlirOperationGetOperand(op, 0))) broadcast_operand(op, 0);
      continue;
    }
    if (!kiln_compiler_gpu_name_starts(op, "arith.") && !kiln_compiler_gpu_name_starts(op, "math.")) continue;
    bool any = false;
    for (intptr_t i = 0; i < mlirOperationGetNumOperands(op) && !any; i++)
      any = is_vec(mlirOperationGetOperand(op, i));
    if (!any) continue;
    for (intptr_t i = 0; i < mlirOperationGetNumOperands(op); i++) {
      if (!is_vec(mlirOperationGetOperand(op, i))) broadcast_operand(op, i);
    }
    for (intptr_t i = 0; i < mlirOperationGetNumResults(op); i++) {
      MlirValue r = mlirOperationGetResult(op, i);
      mlirValueSetType(r, vec_of(mlirValueGetType(r)));
    }
    if (scalar_math && kiln_compiler_gpu_name_starts(op, "math.") && mlirOperationGetNumResults(op) == 1)
      unroll(context, op);
  }
  if (!mlirOperationIsNull(s->bound_cmp)) {
    MlirValue quarter =
        kiln_compiler_int_const_before(context, s->bound_cmp, mlirIndexTypeGet(context), s->n / VEC);
    mlirOperationSetOperand(s->bound_cmp, 1, quarter);
  }
}

kiln_status_t kiln_compiler_elementwise_vectorize(MlirContext context, MlirModule module, MlirOperation func,
                                                  const uint32_t grid[3], const uint32_t block[3],
                                                  const kiln_target_t *t, uint32_t out_grid[3],
                                                  uint32_t out_block[3], bool *done) {
  *done = false;
  if (t->kind == KILN_TARGET_KIND_CPU || block[0] != TILE_X) return NULL;
  MlirBlock entry = kiln_compiler_gpu_kernel_entry(func);
  if (mlirBlockIsNull(entry)) return NULL;
  shape_t s = {.x = {NULL}, .bound_cmp = {NULL}};
  s.use = kiln_calloc((size_t)mlirBlockGetNumArguments(entry) + 1, 1);
  bool taken = read_kernel(func, grid, &s);
  for (intptr_t a = 0; taken && a < mlirBlockGetNumArguments(entry); a++) {
    /* Only buffers: a kernel taking push constants keeps its form. */
    if (!mlirTypeIsAMemRef(mlirValueGetType(mlirBlockGetArgument(entry, a)))) taken = false;
  }
  if (!taken) {
    kiln_free(s.use);
    return NULL;
  }
  char *original = module_text(func);
  rewrite(context, func, &s, t->kind == KILN_TARGET_KIND_HIP);
  kiln_free(s.use);
  char *text = module_text(func);
  MlirDiagnosticHandlerID quiet = mlirContextAttachDiagnosticHandler(context, swallow, NULL, NULL);
  kiln_status_t st =
      kiln_compiler_gpu_kernel_swap(context, module, func, text, "vector elementwise", t, NULL);
  mlirContextDetachDiagnosticHandler(context, quiet);
  if (st) {
    /* The rewrite did not verify (an op without a vector form): the kernel as it was. */
    kiln_status_free(st);
    st = kiln_compiler_gpu_kernel_swap(context, module, func, original, "elementwise", t, NULL);
  } else {
    *done = true;
    memcpy(out_grid, grid, 3 * sizeof *out_grid);
    memcpy(out_block, block, 3 * sizeof *out_block);
    uint64_t vecs = (uint64_t)(s.n / VEC);
    out_grid[s.bdim] = (uint32_t)((vecs + TILE_X - 1) / TILE_X);
  }
  kiln_free(text);
  kiln_free(original);
  return st;
}
