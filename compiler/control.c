/* Host control flow before and after bufferization (host.h: Control flow).
 *
 * tosa.cond_if and tosa.while_loop become scf.if and scf.while (kiln's own
 * rewrite: upstream tosa-to-scf fails on nested loops and on tensor<1xi1>
 * conditions), which one-shot-bufferize turns into memref-valued regions: a branch yields a
 * buffer, a loop carries buffers from one iteration to the next. kiln's host plan
 * has a fixed set of buffers per call, so after bufferization each value that
 * crosses a region boundary gets a fixed buffer of its own, allocated before the
 * op, and the region copies what it yields into it:
 *
 *   scf.if %c -> (memref) { A; yield %a } else { B; yield %b }
 *     =>  %r = alloc; scf.if %c { A; copy %a, %r } else { B; copy %b, %r }
 *
 *   scf.while (%x = %init) { C(%x); condition(%go) %v } do { ^(%y): D(%y); yield %n }
 *     =>  %X = alloc; %Y = alloc; copy %init, %X;
 *         scf.while { C(%X); copy %v, %Y; condition(%go) } do { D(%Y); copy %n, %X }
 *
 * No copy reads a buffer another copy of the same group writes: %X and %Y are new,
 * the before region cannot name %Y and the after region sees %X only through %Y.
 * The copies become kernels (kiln_compiler_copies_to_kernels), and the condition,
 * a memref.load of an i1 a kernel wrote, is what the host program reads back.
 */
#include <mlir-c/BuiltinAttributes.h>
#include <mlir-c/BuiltinTypes.h>
#include <mlir-c/Dialect/Func.h>
#include <math.h>
#include <string.h>

#include "base/alloc.h"
#include "base/buf.h"
#include "compiler/host.h"
#include "compiler/kernel_types.h"

typedef kiln_compiler_ops_t ops_t;
#define ops_push kiln_compiler_ops_push

/* ---- TOSA control flow to scf ---- */

static MlirWalkResult find_tosa_control(MlirOperation op, void *user) {
  if (kiln_compiler_op_is(op, "tosa.cond_if") || kiln_compiler_op_is(op, "tosa.while_loop"))
    ops_push(user, op);
  return MlirWalkResultAdvance;
}

/* %b = tensor.extract %cond[0, ...] : i1, before `before`: the condition of a
 * tensor<i1> or tensor<1xi1> (TOSA allows both). */
static MlirValue condition_scalar(MlirContext ctx, MlirValue cond, MlirOperation before) {
  MlirLocation loc = mlirOperationGetLocation(before);
  MlirBlock block = mlirOperationGetBlock(before);
  MlirType t = mlirValueGetType(cond);
  intptr_t rank = mlirShapedTypeGetRank(t);
  MlirValue *operands = kiln_calloc((size_t)rank + 1, sizeof *operands);
  operands[0] = cond;
  if (rank > 0) {
    MlirOperation zero = kiln_compiler_int_constant(ctx, loc, mlirIndexTypeGet(ctx), 0);
    mlirBlockInsertOwnedOperationBefore(block, before, zero);
    for (intptr_t d = 0; d < rank; d++) operands[1 + d] = mlirOperationGetResult(zero, 0);
  }
  MlirType elem = mlirShapedTypeGetElementType(t);
  MlirOperationState s = mlirOperationStateGet(mlirStringRefCreateFromCString("tensor.extract"), loc);
  mlirOperationStateAddOperands(&s, rank + 1, operands);
  mlirOperationStateAddResults(&s, 1, &elem);
  MlirOperation extract = mlirOperationCreate(&s);
  mlirBlockInsertOwnedOperationBefore(block, before, extract);
  kiln_free(operands);
  return mlirOperationGetResult(extract, 0);
}

/* Replaces terminator `old` (a tosa.yield) with an op `name` whose operands are
 * `first` (when not null) then old's operands. */
static void replace_terminator(MlirOperation old, const char *name, MlirValue first) {
  intptr_t n = mlirOperationGetNumOperands(old);
  MlirValue *operands = kiln_calloc((size_t)n + 2, sizeof *operands);
  intptr_t k = 0;
  if (!mlirValueIsNull(first)) operands[k++] = first;
  for (intptr_t i = 0; i < n; i++) operands[k++] = mlirOperationGetOperand(old, i);
  MlirOperationState s =
      mlirOperationStateGet(mlirStringRefCreateFromCString(name), mlirOperationGetLocation(old));
  mlirOperationStateAddOperands(&s, k, operands);
  mlirBlockInsertOwnedOperationBefore(mlirOperationGetBlock(old), old, mlirOperationCreate(&s));
  mlirOperationDestroy(old);
  kiln_free(operands);
}

/* A new op `name` before `old` with `operands`, old's result types, and old's
 * regions' bodies; old's results are replaced by its results. */
static MlirOperation rebuild_with_results(const char *name, MlirOperation old, const MlirValue *operands,
                                          intptr_t n_operands) {
  intptr_t n_res = mlirOperationGetNumResults(old);
  intptr_t n_regions = mlirOperationGetNumRegions(old);
  MlirType *types = kiln_calloc((size_t)n_res + 1, sizeof *types);
  for (intptr_t i = 0; i < n_res; i++) types[i] = mlirValueGetType(mlirOperationGetResult(old, i));
  MlirRegion regions[2];
  for (intptr_t i = 0; i < n_regions && i < 2; i++) regions[i] = mlirRegionCreate();
  MlirOperationState s =
      mlirOperationStateGet(mlirStringRefCreateFromCString(name), mlirOperationGetLocation(old));
  mlirOperationStateAddOperands(&s, n_operands, operands);
  mlirOperationStateAddResults(&s, n_res, types);
  mlirOperationStateAddOwnedRegions(&s, n_regions, regions);
  MlirOperation op = mlirOperationCreate(&s);
  mlirBlockInsertOwnedOperationBefore(mlirOperationGetBlock(old), old, op);
  for (intptr_t i = 0; i < n_regions; i++) {
    mlirRegionTakeBody(mlirOperationGetRegion(op, i), mlirOperationGetRegion(old, i));
  }
  for (intptr_t i = 0; i < n_res; i++) {
    mlirValueReplaceAllUsesOfWith(mlirOperationGetResult(old, i), mlirOperationGetResult(op, i));
  }
  kiln_free(types);
  return op;
}

/* tosa.cond_if %c (%x = %a) {^(%x): A; yield} else {^(%x): B; yield}
 *   => %b = tensor.extract %c; scf.if %b {A[%x := %a]; scf.yield} else {...} */
static void cond_if_to_scf(MlirContext ctx, MlirOperation op) {
  MlirValue cond = condition_scalar(ctx, mlirOperationGetOperand(op, 0), op);
  MlirOperation fixed = rebuild_with_results("scf.if", op, &cond, 1);
  for (intptr_t r = 0; r < 2; r++) {
    MlirBlock b = mlirRegionGetFirstBlock(mlirOperationGetRegion(fixed, r));
    if (mlirBlockIsNull(b)) continue;
    intptr_t n = mlirBlockGetNumArguments(b);
    for (intptr_t i = 0; i < n; i++) {
      mlirValueReplaceAllUsesOfWith(mlirBlockGetArgument(b, i), mlirOperationGetOperand(op, 1 + i));
    }
    for (intptr_t i = n - 1; i >= 0; i--) mlirBlockEraseArgument(b, (unsigned)i);
    replace_terminator(mlirBlockGetTerminator(b), "scf.yield", (MlirValue){NULL});
  }
  mlirOperationDestroy(op);
}

/* tosa.while_loop (%x = %init) {^(%x): C; yield %go} do {^(%x): D; yield %n}
 *   => scf.while (%x = %init) {^(%x): C; %b = extract %go; scf.condition(%b) %x}
 *      do {^(%x): D; scf.yield %n} */
static void while_to_scf(MlirContext ctx, MlirOperation op) {
  intptr_t n = mlirOperationGetNumOperands(op);
  MlirValue *inits = kiln_calloc((size_t)n + 1, sizeof *inits);
  for (intptr_t i = 0; i < n; i++) inits[i] = mlirOperationGetOperand(op, i);
  MlirOperation fixed = rebuild_with_results("scf.while", op, inits, n);
  mlirOperationDestroy(op);
  kiln_free(inits);
  MlirBlock before = mlirRegionGetFirstBlock(mlirOperationGetRegion(fixed, 0));
  MlirOperation yield = mlirBlockGetTerminator(before);
  MlirValue go = condition_scalar(ctx, mlirOperationGetOperand(yield, 0), yield);
  MlirValue *forwarded = kiln_calloc((size_t)n + 2, sizeof *forwarded);
  forwarded[0] = go;
  for (intptr_t i = 0; i < n; i++) forwarded[1 + i] = mlirBlockGetArgument(before, i);
  MlirOperationState s =
      mlirOperationStateGet(mlirStringRefCreateFromCString("scf.condition"), mlirOperationGetLocation(yield));
  mlirOperationStateAddOperands(&s, n + 1, forwarded);
  mlirBlockInsertOwnedOperationBefore(before, yield, mlirOperationCreate(&s));
  mlirOperationDestroy(yield);
  kiln_free(forwarded);
  MlirBlock after = mlirRegionGetFirstBlock(mlirOperationGetRegion(fixed, 1));
  replace_terminator(mlirBlockGetTerminator(after), "scf.yield", (MlirValue){NULL});
}

void kiln_compiler_tosa_control_to_scf(MlirContext context, MlirModule module) {
  ops_t ops = {0};
  mlirOperationWalk(mlirModuleGetOperation(module), find_tosa_control, &ops, MlirWalkPostOrder);
  for (size_t i = 0; i < ops.n; i++) {
    if (kiln_compiler_op_is(ops.items[i], "tosa.cond_if")) {
      cond_if_to_scf(context, ops.items[i]);
    } else {
      while_to_scf(context, ops.items[i]);
    }
  }
  kiln_free(ops.items);
}

/* ---- fixed buffers for carried values ---- */

static MlirWalkResult find_scf_control(MlirOperation op, void *user) {
  if (kiln_compiler_op_is(op, "scf.if") || kiln_compiler_op_is(op, "scf.while")) ops_push(user, op);
  return MlirWalkResultAdvance;
}

/* Whether every value in `values` is a memref of static shape (what a fixed
 * buffer can hold), and there is at least one. */
static bool all_static_memrefs(const MlirValue *values, intptr_t n) {
  for (intptr_t i = 0; i < n; i++) {
    MlirType t = mlirValueGetType(values[i]);
    if (!mlirTypeIsAMemRef(t) || !mlirShapedTypeHasStaticShape(t)) return false;
  }
  return n > 0;
}

/* %buf = memref.alloc() : memref<shape x elem> (identity layout) before `op`; if
 * `as` differs, a memref.cast to it follows. Returns the cast (or the buffer). */
static MlirValue fixed_buffer(MlirContext ctx, MlirOperation op, MlirType as, MlirValue *out_buffer) {
  MlirLocation loc = mlirOperationGetLocation(op);
  MlirBlock block = mlirOperationGetBlock(op);
  intptr_t rank = mlirShapedTypeGetRank(as);
  int64_t *shape = kiln_calloc(rank ? (size_t)rank : 1, sizeof *shape);
  for (intptr_t d = 0; d < rank; d++) shape[d] = mlirShapedTypeGetDimSize(as, d);
  MlirType plain = mlirMemRefTypeGet(mlirShapedTypeGetElementType(as), rank, shape, mlirAttributeGetNull(),
                                     mlirMemRefTypeGetMemorySpace(as));
  kiln_free(shape);
  MlirOperation alloc = kiln_compiler_static_alloc(ctx, loc, plain);
  mlirBlockInsertOwnedOperationBefore(block, op, alloc);
  MlirValue buffer = mlirOperationGetResult(alloc, 0);
  *out_buffer = buffer;
  if (mlirTypeEqual(plain, as)) return buffer;
  MlirOperationState c = mlirOperationStateGet(mlirStringRefCreateFromCString("memref.cast"), loc);
  mlirOperationStateAddOperands(&c, 1, &buffer);
  mlirOperationStateAddResults(&c, 1, &as);
  MlirOperation cast = mlirOperationCreate(&c);
  mlirBlockInsertOwnedOperationBefore(block, op, cast);
  return mlirOperationGetResult(cast, 0);
}

static void copy_before(MlirOperation before, MlirValue src, MlirValue dst) {
  MlirOperationState s =
      mlirOperationStateGet(mlirStringRefCreateFromCString("memref.copy"), mlirOperationGetLocation(before));
  MlirValue operands[2] = {src, dst};
  mlirOperationStateAddOperands(&s, 2, operands);
  mlirBlockInsertOwnedOperationBefore(mlirOperationGetBlock(before), before, mlirOperationCreate(&s));
}

/* An op named `name` with `operands`, no results and `n_regions` empty regions
 * before `old`, whose region bodies it takes. */
static MlirOperation rebuild(const char *name, MlirOperation old, const MlirValue *operands,
                             intptr_t n_operands) {
  intptr_t n_regions = mlirOperationGetNumRegions(old);
  MlirRegion regions[2];
  for (intptr_t i = 0; i < n_regions && i < 2; i++) regions[i] = mlirRegionCreate();
  MlirOperationState s =
      mlirOperationStateGet(mlirStringRefCreateFromCString(name), mlirOperationGetLocation(old));
  mlirOperationStateAddOperands(&s, n_operands, operands);
  mlirOperationStateAddOwnedRegions(&s, n_regions, regions);
  MlirOperation op = mlirOperationCreate(&s);
  mlirBlockInsertOwnedOperationBefore(mlirOperationGetBlock(old), old, op);
  for (intptr_t i = 0; i < n_regions; i++) {
    mlirRegionTakeBody(mlirOperationGetRegion(op, i), mlirOperationGetRegion(old, i));
  }
  return op;
}

/* The terminator of region `r`'s only block, or null. */
static MlirOperation region_terminator(MlirOperation op, intptr_t r) {
  MlirBlock b = mlirRegionGetFirstBlock(mlirOperationGetRegion(op, r));
  return mlirBlockIsNull(b) ? (MlirOperation){NULL} : mlirBlockGetTerminator(b);
}

/* Whether `v` is defined outside `op` (not in any of its regions). */
static bool defined_outside(MlirValue v, MlirOperation op) {
  MlirOperation owner = mlirValueIsAOpResult(v) ? mlirOpResultGetOwner(v)
                                                : mlirBlockGetParentOperation(mlirBlockArgumentGetOwner(v));
  for (MlirOperation p = owner; !mlirOperationIsNull(p); p = mlirOperationGetParentOperation(p)) {
    if (mlirOperationEqual(p, op)) return false;
  }
  return true;
}

/* Ops that may run whether or not the branch is taken: sizes (not divisions,
 * which the condition may guard) and allocations. */
static bool hoistable(MlirOperation o) {
  MlirStringRef name = mlirIdentifierStr(mlirOperationGetName(o));
  bool divides = false;
  for (size_t i = 0; i + 3 <= name.length; i++) {
    divides = divides || memcmp(name.data + i, "div", 3) == 0 || memcmp(name.data + i, "rem", 3) == 0;
  }
  bool scalar = ((name.length > 6 && memcmp(name.data, "arith.", 6) == 0) ||
                 kiln_compiler_op_is(o, "memref.dim") || kiln_compiler_op_is(o, "affine.apply")) &&
                !divides;
  return (scalar || kiln_compiler_op_is(o, "memref.alloc")) && mlirOperationGetNumRegions(o) == 0;
}

/* An scf.if of dynamic-shape results whose branches only allocate (and compute
 * sizes) before yielding: a dynamic broadcast ("if this dimension is 1, expand
 * the input into a new buffer, else use it as it is"). The sizes and allocations
 * move above the if, which then yields nothing, and each result becomes an
 * arith.select between the two yielded buffers (a SELECT buffer of the plan).
 * Returns false when the branches yield something else. */
static bool fix_dynamic_if(MlirContext ctx, MlirOperation op) {
  (void)ctx;
  for (intptr_t r = 0; r < mlirOperationGetNumRegions(op); r++) {
    MlirBlock b = mlirRegionGetFirstBlock(mlirOperationGetRegion(op, r));
    if (mlirBlockIsNull(b)) return false;
    for (MlirOperation o = mlirBlockGetFirstOperation(b); !mlirOperationIsNull(o);) {
      MlirOperation next = mlirOperationGetNextInBlock(o);
      bool outside = hoistable(o);
      for (intptr_t i = 0; outside && i < mlirOperationGetNumOperands(o); i++) {
        outside = defined_outside(mlirOperationGetOperand(o, i), op);
      }
      if (outside) mlirOperationMoveBefore(o, op);
      o = next;
    }
  }
  MlirOperation yields[2] = {region_terminator(op, 0), region_terminator(op, 1)};
  intptr_t n = mlirOperationGetNumResults(op);
  if (mlirOperationIsNull(yields[0]) || mlirOperationIsNull(yields[1])) return false;
  for (intptr_t i = 0; i < n; i++) {
    if (!defined_outside(mlirOperationGetOperand(yields[0], i), op) ||
        !defined_outside(mlirOperationGetOperand(yields[1], i), op)) {
      return false;
    }
  }
  MlirValue cond = mlirOperationGetOperand(op, 0);
  for (intptr_t i = 0; i < n; i++) {
    MlirValue result = mlirOperationGetResult(op, i);
    MlirType t = mlirValueGetType(result);
    MlirValue operands[3] = {cond, mlirOperationGetOperand(yields[0], i),
                             mlirOperationGetOperand(yields[1], i)};
    MlirOperationState s =
        mlirOperationStateGet(mlirStringRefCreateFromCString("arith.select"), mlirOperationGetLocation(op));
    mlirOperationStateAddOperands(&s, 3, operands);
    mlirOperationStateAddResults(&s, 1, &t);
    MlirOperation sel = mlirOperationCreate(&s);
    mlirBlockInsertOwnedOperationAfter(mlirOperationGetBlock(op), op, sel);
    mlirValueReplaceAllUsesOfWith(result, mlirOperationGetResult(sel, 0));
  }
  MlirOperation fixed = rebuild("scf.if", op, &cond, 1);
  for (intptr_t r = 0; r < 2; r++) mlirOperationSetOperands(region_terminator(fixed, r), 0, NULL);
  mlirOperationDestroy(op);
  return true;
}

static void fix_if(MlirContext ctx, MlirOperation op) {
  intptr_t n = mlirOperationGetNumResults(op);
  MlirValue *results = kiln_calloc((size_t)n + 1, sizeof *results);
  for (intptr_t i = 0; i < n; i++) results[i] = mlirOperationGetResult(op, i);
  if (!all_static_memrefs(results, n)) {
    bool memrefs = n > 0;
    for (intptr_t i = 0; i < n; i++) memrefs = memrefs && mlirTypeIsAMemRef(mlirValueGetType(results[i]));
    kiln_free(results);
    if (memrefs) fix_dynamic_if(ctx, op);
    return;
  }
  MlirValue *buffers = kiln_calloc((size_t)n, sizeof *buffers);
  for (intptr_t i = 0; i < n; i++) {
    MlirValue as = fixed_buffer(ctx, op, mlirValueGetType(results[i]), &buffers[i]);
    mlirValueReplaceAllUsesOfWith(results[i], as);
  }
  MlirValue cond = mlirOperationGetOperand(op, 0);
  MlirOperation fixed = rebuild("scf.if", op, &cond, 1);
  for (intptr_t r = 0; r < 2; r++) {
    MlirOperation yield = region_terminator(fixed, r);
    if (mlirOperationIsNull(yield)) continue;
    for (intptr_t i = 0; i < n; i++) copy_before(yield, mlirOperationGetOperand(yield, i), buffers[i]);
    mlirOperationSetOperands(yield, 0, NULL);
  }
  mlirOperationDestroy(op);
  kiln_free(buffers);
  kiln_free(results);
}

static void fix_while(MlirContext ctx, MlirOperation op) {
  intptr_t n_init = mlirOperationGetNumOperands(op);
  intptr_t n_res = mlirOperationGetNumResults(op);
  MlirBlock before = mlirRegionGetFirstBlock(mlirOperationGetRegion(op, 0));
  MlirBlock after = mlirRegionGetFirstBlock(mlirOperationGetRegion(op, 1));
  if (mlirBlockIsNull(before) || mlirBlockIsNull(after)) return;
  MlirValue *vals = kiln_calloc((size_t)(n_init + n_res) + 1, sizeof *vals);
  for (intptr_t i = 0; i < n_init; i++) vals[i] = mlirBlockGetArgument(before, i);
  for (intptr_t i = 0; i < n_res; i++) vals[n_init + i] = mlirOperationGetResult(op, i);
  if (!all_static_memrefs(vals, n_init + n_res)) {
    kiln_free(vals);
    return;
  }
  MlirValue *carried = kiln_calloc((size_t)n_init + 1, sizeof *carried);
  MlirValue *forwarded = kiln_calloc((size_t)n_res + 1, sizeof *forwarded);
  for (intptr_t i = 0; i < n_init; i++) {
    MlirValue arg = mlirBlockGetArgument(before, i);
    MlirValue as = fixed_buffer(ctx, op, mlirValueGetType(arg), &carried[i]);
    copy_before(op, mlirOperationGetOperand(op, i), carried[i]);
    mlirValueReplaceAllUsesOfWith(arg, as);
  }
  for (intptr_t i = 0; i < n_res; i++) {
    MlirValue res = mlirOperationGetResult(op, i);
    MlirValue as = fixed_buffer(ctx, op, mlirValueGetType(res), &forwarded[i]);
    mlirValueReplaceAllUsesOfWith(res, as);
    MlirValue arg = mlirBlockGetArgument(after, i);
    mlirValueReplaceAllUsesOfWith(arg, as);
  }
  MlirOperation fixed = rebuild("scf.while", op, NULL, 0);
  MlirOperation condition = region_terminator(fixed, 0);
  MlirValue go = mlirOperationGetOperand(condition, 0);
  for (intptr_t i = 0; i < n_res; i++)
    copy_before(condition, mlirOperationGetOperand(condition, 1 + i), forwarded[i]);
  mlirOperationSetOperands(condition, 1, &go);
  MlirOperation yield = region_terminator(fixed, 1);
  for (intptr_t i = 0; i < n_init; i++) copy_before(yield, mlirOperationGetOperand(yield, i), carried[i]);
  mlirOperationSetOperands(yield, 0, NULL);
  for (intptr_t i = n_init - 1; i >= 0; i--) mlirBlockEraseArgument(before, (unsigned)i);
  for (intptr_t i = n_res - 1; i >= 0; i--) mlirBlockEraseArgument(after, (unsigned)i);
  mlirOperationDestroy(op);
  kiln_free(forwarded);
  kiln_free(carried);
  kiln_free(vals);
}

void kiln_compiler_carried_buffers_fix(MlirContext context, MlirModule module) {
  ops_t ops = {0};
  mlirOperationWalk(mlirModuleGetOperation(module), find_scf_control, &ops, MlirWalkPostOrder);
  for (size_t i = 0; i < ops.n; i++) {
    if (kiln_compiler_op_is(ops.items[i], "scf.if")) {
      fix_if(context, ops.items[i]);
    } else {
      fix_while(context, ops.items[i]);
    }
  }
  kiln_free(ops.items);
}

/* ---- read-only arguments ---- */

void kiln_compiler_arguments_read_only(MlirContext context, MlirModule module) {
  MlirAttribute no = mlirBoolAttrGet(context, 0);
  for (MlirOperation op = mlirBlockGetFirstOperation(mlirModuleGetBody(module)); !mlirOperationIsNull(op);
       op = mlirOperationGetNextInBlock(op)) {
    if (!kiln_compiler_op_is(op, "func.func") || mlirOperationGetNumRegions(op) < 1) continue;
    MlirBlock entry = mlirRegionGetFirstBlock(mlirOperationGetRegion(op, 0));
    if (mlirBlockIsNull(entry)) continue;
    for (intptr_t i = 0; i < mlirBlockGetNumArguments(entry); i++) {
      if (!mlirTypeIsARankedTensor(mlirValueGetType(mlirBlockGetArgument(entry, i)))) continue;
      mlirFuncSetArgAttr(op, i, mlirStringRefCreateFromCString("bufferization.writable"), no);
    }
  }
}

/* ---- the index dialect in arith ---- */

static MlirWalkResult collect_index_ops(MlirOperation op, void *user) {
  MlirStringRef s = mlirIdentifierStr(mlirOperationGetName(op));
  if (s.length > 6 && memcmp(s.data, "index.", 6) == 0) ops_push(user, op);
  return MlirWalkResultAdvance;
}

kiln_status_t kiln_compiler_index_to_arith(MlirContext context, MlirModule module, const char *name) {
  (void)context;
  static const struct {
    const char *from, *to;
  } SAME[] = {
      {"index.add", "arith.addi"},           {"index.sub", "arith.subi"},
      {"index.mul", "arith.muli"},           {"index.divs", "arith.divsi"},
      {"index.divu", "arith.divui"},         {"index.rems", "arith.remsi"},
      {"index.remu", "arith.remui"},         {"index.maxs", "arith.maxsi"},
      {"index.maxu", "arith.maxui"},         {"index.mins", "arith.minsi"},
      {"index.minu", "arith.minui"},         {"index.shl", "arith.shli"},
      {"index.shrs", "arith.shrsi"},         {"index.shru", "arith.shrui"},
      {"index.and", "arith.andi"},           {"index.or", "arith.ori"},
      {"index.xor", "arith.xori"},           {"index.ceildivs", "arith.ceildivsi"},
      {"index.ceildivu", "arith.ceildivui"}, {"index.floordivs", "arith.floordivsi"},
      {"index.casts", "arith.index_cast"},   {"index.castu", "arith.index_castui"},
  };
  ops_t ops = {0};
  mlirOperationWalk(mlirModuleGetOperation(module), collect_index_ops, &ops, MlirWalkPreOrder);
  kiln_status_t st = NULL;
  for (size_t i = 0; i < ops.n && !st; i++) {
    MlirOperation op = ops.items[i];
    const char *to = NULL;
    for (size_t k = 0; k < sizeof SAME / sizeof SAME[0] && !to; k++) {
      if (kiln_compiler_op_is(op, SAME[k].from)) to = SAME[k].to;
    }
    if (!to && kiln_compiler_op_is(op, "index.constant")) {
      MlirType t = mlirValueGetType(mlirOperationGetResult(op, 0));
      MlirAttribute v = mlirOperationGetAttributeByName(op, mlirStringRefCreateFromCString("value"));
      MlirOperation c = kiln_compiler_int_constant(mlirOperationGetContext(op), mlirOperationGetLocation(op),
                                                   t, mlirIntegerAttrGetValueInt(v));
      mlirBlockInsertOwnedOperationBefore(mlirOperationGetBlock(op), op, c);
      mlirValueReplaceAllUsesOfWith(mlirOperationGetResult(op, 0), mlirOperationGetResult(c, 0));
      mlirOperationDestroy(op);
      continue;
    }
    if (!to) {
      MlirStringRef s = mlirIdentifierStr(mlirOperationGetName(op));
      st = KILN_STATUS(KILN_STATUS_UNIMPLEMENTED, "%s: %.*s (index dialect) is not lowered by kiln yet", name,
                       (int)s.length, s.data);
      break;
    }
    intptr_t n = mlirOperationGetNumOperands(op);
    MlirValue *operands = kiln_calloc((size_t)n + 1, sizeof *operands);
    for (intptr_t k = 0; k < n; k++) operands[k] = mlirOperationGetOperand(op, k);
    MlirType t = mlirValueGetType(mlirOperationGetResult(op, 0));
    MlirOperationState s =
        mlirOperationStateGet(mlirStringRefCreateFromCString(to), mlirOperationGetLocation(op));
    mlirOperationStateAddOperands(&s, n, operands);
    mlirOperationStateAddResults(&s, 1, &t);
    MlirOperation now = mlirOperationCreate(&s);
    mlirBlockInsertOwnedOperationBefore(mlirOperationGetBlock(op), op, now);
    mlirValueReplaceAllUsesOfWith(mlirOperationGetResult(op, 0), mlirOperationGetResult(now, 0));
    mlirOperationDestroy(op);
    kiln_free(operands);
  }
  kiln_free(ops.items);
  return st;
}

/* ---- TOSA variables ---- */

static MlirWalkResult collect_variable_ops(MlirOperation op, void *user) {
  if (kiln_compiler_op_is(op, "tosa.variable") || kiln_compiler_op_is(op, "tosa.variable_read") ||
      kiln_compiler_op_is(op, "tosa.variable_write")) {
    ops_push(user, op);
  }
  return MlirWalkResultAdvance;
}

/* memref<shape x elem> of a tensor type. */
static MlirType memref_of(MlirType tensor) {
  intptr_t rank = mlirShapedTypeGetRank(tensor);
  int64_t *shape = kiln_calloc((size_t)rank + 1, sizeof *shape);
  for (intptr_t d = 0; d < rank; d++) shape[d] = mlirShapedTypeGetDimSize(tensor, d);
  MlirType t = mlirMemRefTypeGet(mlirShapedTypeGetElementType(tensor), rank, shape, mlirAttributeGetNull(),
                                 mlirAttributeGetNull());
  kiln_free(shape);
  return t;
}

static MlirValue get_global(MlirContext ctx, MlirOperation before, MlirAttribute name, MlirType memref) {
  MlirNamedAttribute a =
      kiln_compiler_named_attr(ctx, "name", mlirFlatSymbolRefAttrGet(ctx, mlirStringAttrGetValue(name)));
  MlirOperationState s = mlirOperationStateGet(mlirStringRefCreateFromCString("memref.get_global"),
                                               mlirOperationGetLocation(before));
  mlirOperationStateAddResults(&s, 1, &memref);
  mlirOperationStateAddAttributes(&s, 1, &a);
  MlirOperation op = mlirOperationCreate(&s);
  mlirBlockInsertOwnedOperationBefore(mlirOperationGetBlock(before), before, op);
  return mlirOperationGetResult(op, 0);
}

static MlirOperation find_global(MlirModule module, MlirStringRef name) {
  for (MlirOperation op = mlirBlockGetFirstOperation(mlirModuleGetBody(module)); !mlirOperationIsNull(op);
       op = mlirOperationGetNextInBlock(op)) {
    MlirAttribute sym = mlirOperationGetAttributeByName(op, mlirStringRefCreateFromCString("sym_name"));
    if (!kiln_compiler_op_is(op, "memref.global") || mlirAttributeIsNull(sym)) continue;
    MlirStringRef s = mlirStringAttrGetValue(sym);
    if (s.length == name.length && memcmp(s.data, name.data, name.length) == 0) return op;
  }
  return (MlirOperation){NULL};
}

kiln_status_t kiln_compiler_tosa_variables(MlirContext context, MlirModule module, const char *name) {
  ops_t ops = {0};
  mlirOperationWalk(mlirModuleGetOperation(module), collect_variable_ops, &ops, MlirWalkPreOrder);
  kiln_status_t st = NULL;
  /* The variables first: each a mutable memref.global with its initial value. */
  for (size_t i = 0; i < ops.n; i++) {
    MlirOperation op = ops.items[i];
    if (!kiln_compiler_op_is(op, "tosa.variable")) continue;
    MlirAttribute sym = mlirOperationGetAttributeByName(op, mlirStringRefCreateFromCString("sym_name"));
    MlirAttribute shape = mlirOperationGetAttributeByName(op, mlirStringRefCreateFromCString("var_shape"));
    MlirAttribute elem = mlirOperationGetAttributeByName(op, mlirStringRefCreateFromCString("type"));
    MlirAttribute init = mlirOperationGetAttributeByName(op, mlirStringRefCreateFromCString("initial_value"));
    intptr_t rank = mlirElementsAttrGetNumElements(shape);
    int64_t *dims = kiln_calloc((size_t)rank + 1, sizeof *dims);
    for (intptr_t d = 0; d < rank; d++) dims[d] = mlirDenseElementsAttrGetInt64Value(shape, d);
    MlirType tensor = mlirRankedTensorTypeGet(rank, dims, mlirTypeAttrGetValue(elem), mlirAttributeGetNull());
    kiln_free(dims);
    if (!mlirShapedTypeHasStaticShape(tensor)) {
      st = KILN_STATUS(KILN_STATUS_UNIMPLEMENTED, "%s: tosa.variable @%.*s has a dynamic shape", name,
                       (int)mlirStringAttrGetValue(sym).length, mlirStringAttrGetValue(sym).data);
      break;
    }
    MlirNamedAttribute attrs[4] = {
        kiln_compiler_named_attr(context, "sym_name", sym),
        kiln_compiler_named_attr(context, "sym_visibility",
                                 mlirStringAttrGet(context, mlirStringRefCreateFromCString("private"))),
        kiln_compiler_named_attr(context, "type", mlirTypeAttrGet(memref_of(tensor))),
        kiln_compiler_named_attr(context, "initial_value",
                                 mlirAttributeIsNull(init) ? mlirUnitAttrGet(context) : init),
    };
    MlirOperationState s =
        mlirOperationStateGet(mlirStringRefCreateFromCString("memref.global"), mlirOperationGetLocation(op));
    mlirOperationStateAddAttributes(&s, 4, attrs);
    mlirBlockInsertOwnedOperationBefore(mlirOperationGetBlock(op), op, mlirOperationCreate(&s));
    mlirOperationDestroy(op);
    ops.items[i] = (MlirOperation){NULL}; /* gone: the accesses below skip it */
  }
  /* A read copies the variable where it stands (a later write must not change
   * it); a write puts the value into the variable's memory. */
  for (size_t i = 0; i < ops.n && !st; i++) {
    MlirOperation op = ops.items[i];
    if (mlirOperationIsNull(op) || kiln_compiler_op_is(op, "tosa.variable")) continue;
    MlirAttribute sym = mlirOperationGetAttributeByName(op, mlirStringRefCreateFromCString("name"));
    MlirOperation global =
        mlirAttributeIsNull(sym) ? (MlirOperation){NULL} : find_global(module, mlirStringAttrGetValue(sym));
    if (mlirOperationIsNull(global)) {
      st = KILN_STATUS(KILN_STATUS_INVALID_ARGUMENT, "%s: a tosa variable access names no tosa.variable",
                       name);
      break;
    }
    MlirType memref =
        mlirTypeAttrGetValue(mlirOperationGetAttributeByName(global, mlirStringRefCreateFromCString("type")));
    MlirValue m = get_global(context, op, sym, memref);
    MlirLocation loc = mlirOperationGetLocation(op);
    if (kiln_compiler_op_is(op, "tosa.variable_read")) {
      MlirValue result = mlirOperationGetResult(op, 0);
      MlirType tensor = mlirValueGetType(result);
      MlirNamedAttribute restrict_attr =
          kiln_compiler_named_attr(context, "restrict", mlirUnitAttrGet(context));
      MlirOperationState ts =
          mlirOperationStateGet(mlirStringRefCreateFromCString("bufferization.to_tensor"), loc);
      mlirOperationStateAddOperands(&ts, 1, &m);
      mlirOperationStateAddResults(&ts, 1, &tensor);
      mlirOperationStateAddAttributes(&ts, 1, &restrict_attr);
      MlirOperation to_tensor = mlirOperationCreate(&ts);
      mlirBlockInsertOwnedOperationBefore(mlirOperationGetBlock(op), op, to_tensor);
      MlirValue view = mlirOperationGetResult(to_tensor, 0);
      int32_t segments[3] = {0, 1, 0}; /* dynamic sizes, copy, size hint */
      MlirNamedAttribute seg = kiln_compiler_named_attr(context, "operandSegmentSizes",
                                                        mlirDenseI32ArrayGet(context, 3, segments));
      MlirOperationState as =
          mlirOperationStateGet(mlirStringRefCreateFromCString("bufferization.alloc_tensor"), loc);
      mlirOperationStateAddOperands(&as, 1, &view);
      mlirOperationStateAddResults(&as, 1, &tensor);
      mlirOperationStateAddAttributes(&as, 1, &seg);
      MlirOperation copy = mlirOperationCreate(&as);
      mlirBlockInsertOwnedOperationBefore(mlirOperationGetBlock(op), op, copy);
      mlirValueReplaceAllUsesOfWith(result, mlirOperationGetResult(copy, 0));
    } else {
      MlirValue operands[2] = {mlirOperationGetOperand(op, 0), m};
      MlirNamedAttribute flags[2] = {kiln_compiler_named_attr(context, "restrict", mlirUnitAttrGet(context)),
                                     kiln_compiler_named_attr(context, "writable", mlirUnitAttrGet(context))};
      MlirOperationState ws = mlirOperationStateGet(
          mlirStringRefCreateFromCString("bufferization.materialize_in_destination"), loc);
      mlirOperationStateAddOperands(&ws, 2, operands);
      mlirOperationStateAddAttributes(&ws, 2, flags);
      mlirBlockInsertOwnedOperationBefore(mlirOperationGetBlock(op), op, mlirOperationCreate(&ws));
    }
    mlirOperationDestroy(op);
  }
  kiln_free(ops.items);
  return st;
}

/* ---- block-scaled matmul ---- */

static MlirWalkResult collect_block_scaled(MlirOperation op, void *user) {
  if (kiln_compiler_op_is(op, "tosa.matmul_t_block_scaled") ||
      kiln_compiler_op_is(op, "tosa.cast_to_block_scaled") ||
      kiln_compiler_op_is(op, "tosa.cast_from_block_scaled")) {
    ops_push(user, op);
  }
  return MlirWalkResultAdvance;
}

static KILN_MUST_USE kiln_status_t cast_to_block_scaled(MlirContext context, MlirOperation op,
                                                        const char *name);
static KILN_MUST_USE kiln_status_t cast_from_block_scaled(MlirContext context, MlirOperation op,
                                                          const char *name);
static void mxint8_to_i8(MlirContext context, MlirModule module);

/* `dst` = the f32 value of MX data `src` (element type `el`) times the E8M0
 * scale `scale`: arith.scaling_extf for the float formats; for mxint8 (its
 * two's-complement bits, held as i8) the integer times 2^-6, exact in f32, times
 * the scale (NaN for a NaN scale, as scaling_extf). */
static void append_dequant(kiln_buf_t *t, const char *dst, const char *src, const char *scale, const char *el,
                           bool mx) {
  if (!mx) {
    kiln_buf_appendf(t, "    %%%s = arith.scaling_extf %%%s, %%%s : %s, f8E8M0FNU to f32\n", dst, src, scale,
                     el);
    return;
  }
  kiln_buf_appendf(
      t,
      "    %%%s_i = arith.sitofp %%%s : i8 to f32\n    %%%s_u = arith.constant 0.015625 : f32\n"
      "    %%%s_v = arith.mulf %%%s_i, %%%s_u : f32\n    %%%s_s = arith.extf %%%s : f8E8M0FNU to f32\n"
      "    %%%s = arith.mulf %%%s_v, %%%s_s : f32\n",
      dst, src, dst, dst, dst, dst, dst, scale, dst, dst, dst);
}

static void print_cb(MlirStringRef s, void *user) { kiln_buf_append(user, s.data, s.length); }

/* "NxHxK" + "x" of a static tensor type's shape. */
static void append_type(kiln_buf_t *b, MlirType t) { mlirTypePrint(t, print_cb, b); }

kiln_status_t kiln_compiler_tosa_block_scaled(MlirContext context, MlirModule module, const char *name) {
  ops_t ops = {0};
  mlirOperationWalk(mlirModuleGetOperation(module), collect_block_scaled, &ops, MlirWalkPreOrder);
  kiln_status_t st = NULL;
  /* mxint8 (a TOSA type no conversion knows) becomes its i8 bits everywhere
   * first: MX data of an integer type is then mxint8. */
  if (ops.n) mxint8_to_i8(context, module);
  for (size_t i = 0; i < ops.n && !st; i++) {
    MlirOperation op = ops.items[i];
    if (kiln_compiler_op_is(op, "tosa.cast_to_block_scaled")) {
      st = cast_to_block_scaled(context, op, name);
      continue;
    }
    if (kiln_compiler_op_is(op, "tosa.cast_from_block_scaled")) {
      st = cast_from_block_scaled(context, op, name);
      continue;
    }
    MlirType ta = mlirValueGetType(mlirOperationGetOperand(op, 0));
    MlirType tsa = mlirValueGetType(mlirOperationGetOperand(op, 1));
    MlirType tb = mlirValueGetType(mlirOperationGetOperand(op, 2));
    MlirType tsb = mlirValueGetType(mlirOperationGetOperand(op, 3));
    MlirType tr = mlirValueGetType(mlirOperationGetResult(op, 0));
    bool ok = mlirShapedTypeHasStaticShape(ta) && mlirShapedTypeHasStaticShape(tsa) &&
              mlirShapedTypeHasStaticShape(tb) && mlirShapedTypeHasStaticShape(tsb) &&
              mlirShapedTypeHasStaticShape(tr) && mlirShapedTypeGetRank(ta) == 3 &&
              mlirShapedTypeGetRank(tsa) == 3;
    int64_t k = ok ? mlirShapedTypeGetDimSize(ta, 2) : 0, kb = ok ? mlirShapedTypeGetDimSize(tsa, 2) : 0;
    if (!ok || kb <= 0 || k % kb != 0) {
      st = KILN_STATUS(
          KILN_STATUS_UNIMPLEMENTED,
          "%s: tosa.matmul_t_block_scaled of dynamic or uneven shapes is not compiled by kiln yet", name);
      break;
    }
    /* out[n,h,w] = sum_k scaling_extf(a[n,h,k], sa[n,h,k/bs]) * scaling_extf(b[n,w,k], sb[n,w,k/bs]) */
    kiln_buf_t t;
    kiln_buf_init(&t);
    kiln_buf_t ea, eb;
    kiln_buf_init(&ea);
    kiln_buf_init(&eb);
    append_type(&ea, mlirShapedTypeGetElementType(ta));
    append_type(&eb, mlirShapedTypeGetElementType(tb));
    kiln_buf_append_str(&t, "func.func private @mm(%a: ");
    append_type(&t, ta);
    kiln_buf_append_str(&t, ", %sa: ");
    append_type(&t, tsa);
    kiln_buf_append_str(&t, ", %b: ");
    append_type(&t, tb);
    kiln_buf_append_str(&t, ", %sb: ");
    append_type(&t, tsb);
    kiln_buf_append_str(&t, ") -> ");
    append_type(&t, tr);
    kiln_buf_append_str(&t, " {\n  %z = arith.constant 0.0 : f32\n  %e = tensor.empty() : ");
    append_type(&t, tr);
    kiln_buf_append_str(&t, "\n  %f = linalg.fill ins(%z : f32) outs(%e : ");
    append_type(&t, tr);
    kiln_buf_append_str(&t, ") -> ");
    append_type(&t, tr);
    kiln_buf_appendf(
        &t,
        "\n  %%r = linalg.generic {indexing_maps = [affine_map<(n, h, w, k) -> (n, h, k)>, "
        "affine_map<(n, h, w, k) -> (n, h, k floordiv %lld)>, affine_map<(n, h, w, k) -> (n, w, k)>, "
        "affine_map<(n, h, w, k) -> (n, w, k floordiv %lld)>, affine_map<(n, h, w, k) -> (n, h, w)>], "
        "iterator_types = [\"parallel\", \"parallel\", \"parallel\", \"reduction\"]} "
        "ins(%%a, %%sa, %%b, %%sb : ",
        (long long)(k / kb), (long long)(k / kb));
    append_type(&t, ta);
    kiln_buf_append_str(&t, ", ");
    append_type(&t, tsa);
    kiln_buf_append_str(&t, ", ");
    append_type(&t, tb);
    kiln_buf_append_str(&t, ", ");
    append_type(&t, tsb);
    kiln_buf_append_str(&t, ") outs(%f : ");
    append_type(&t, tr);
    kiln_buf_appendf(&t, ") {\n  ^bb0(%%x: %s, %%xs: f8E8M0FNU, %%y: %s, %%ys: f8E8M0FNU, %%acc: f32):\n",
                     ea.data, eb.data);
    append_dequant(&t, "fx", "x", "xs", ea.data, mlirTypeIsAInteger(mlirShapedTypeGetElementType(ta)));
    append_dequant(&t, "fy", "y", "ys", eb.data, mlirTypeIsAInteger(mlirShapedTypeGetElementType(tb)));
    kiln_buf_append_str(&t,
                        "    %p = arith.mulf %fx, %fy : f32\n"
                        "    %s = arith.addf %acc, %p : f32\n"
                        "    linalg.yield %s : f32\n  } -> ");
    append_type(&t, tr);
    kiln_buf_append_str(&t, "\n  return %r : ");
    append_type(&t, tr);
    kiln_buf_append_str(&t, "\n}");
    st = kiln_compiler_kernels_replace_with_helper(context, &op, 1, t.data);
    kiln_buf_deinit(&t);
    kiln_buf_deinit(&ea);
    kiln_buf_deinit(&eb);
  }
  kiln_free(ops.items);
  return st;
}

/* ---- mxint8 as i8 ---- */

typedef struct mx_s {
  MlirType mx, i8;
} mx_t;

static MlirType mx_free(const mx_t *m, MlirType t) {
  if (mlirTypeEqual(t, m->mx)) return m->i8;
  if (!mlirTypeIsATensor(t) || !mlirTypeEqual(mlirShapedTypeGetElementType(t), m->mx)) return t;
  if (!mlirTypeIsARankedTensor(t)) return mlirUnrankedTensorTypeGet(m->i8);
  intptr_t rank = mlirShapedTypeGetRank(t);
  int64_t *shape = kiln_calloc(rank ? (size_t)rank : 1, sizeof *shape);
  for (intptr_t d = 0; d < rank; d++) shape[d] = mlirShapedTypeGetDimSize(t, d);
  MlirType out = mlirRankedTensorTypeGet(rank, shape, m->i8, mlirRankedTensorTypeGetEncoding(t));
  kiln_free(shape);
  return out;
}

static MlirWalkResult retype_mx(MlirOperation op, void *user) {
  const mx_t *m = user;
  for (intptr_t i = 0; i < mlirOperationGetNumResults(op); i++) {
    MlirValue v = mlirOperationGetResult(op, i);
    mlirValueSetType(v, mx_free(m, mlirValueGetType(v)));
  }
  for (intptr_t r = 0; r < mlirOperationGetNumRegions(op); r++) {
    for (MlirBlock b = mlirRegionGetFirstBlock(mlirOperationGetRegion(op, r)); !mlirBlockIsNull(b);
         b = mlirBlockGetNextInRegion(b)) {
      for (intptr_t a = 0; a < mlirBlockGetNumArguments(b); a++) {
        MlirValue v = mlirBlockGetArgument(b, a);
        mlirValueSetType(v, mx_free(m, mlirValueGetType(v)));
      }
    }
  }
  MlirAttribute ft =
      kiln_compiler_op_is(op, "func.func")
          ? mlirOperationGetAttributeByName(op, mlirStringRefCreateFromCString("function_type"))
          : (MlirAttribute){NULL};
  if (!mlirAttributeIsNull(ft)) {
    MlirType f = mlirTypeAttrGetValue(ft);
    intptr_t n_in = mlirFunctionTypeGetNumInputs(f), n_out = mlirFunctionTypeGetNumResults(f);
    MlirType *in = kiln_calloc(n_in ? (size_t)n_in : 1, sizeof *in);
    MlirType *out = kiln_calloc(n_out ? (size_t)n_out : 1, sizeof *out);
    for (intptr_t i = 0; i < n_in; i++) in[i] = mx_free(m, mlirFunctionTypeGetInput(f, i));
    for (intptr_t i = 0; i < n_out; i++) out[i] = mx_free(m, mlirFunctionTypeGetResult(f, i));
    mlirOperationSetInherentAttributeByName(
        op, mlirStringRefCreateFromCString("function_type"),
        mlirTypeAttrGet(mlirFunctionTypeGet(mlirTypeGetContext(f), n_in, in, n_out, out)));
    kiln_free(in);
    kiln_free(out);
  }
  return MlirWalkResultAdvance;
}

/* TOSA's mxint8 (OCP MX INT8: two's complement with an implicit 2^-6) has no
 * conversion anywhere in MLIR 22: every value, block argument and function type
 * holding it holds i8 instead, the same bits. The block-scaled ops are the only
 * ones that interpret it (kiln's rewrites below); a function argument or result
 * of it is an i8 buffer view. */
static void mxint8_to_i8(MlirContext context, MlirModule module) {
  mx_t m = {mlirTypeParseGet(context, mlirStringRefCreateFromCString("!tosa.mxint8")),
            mlirIntegerTypeGet(context, 8)};
  if (mlirTypeIsNull(m.mx)) return;
  mlirOperationWalk(mlirModuleGetOperation(module), retype_mx, &m, MlirWalkPreOrder);
}

/* ---- cast_to_block_scaled ---- */

/* TOSA 1.1's CAST_TO_BLOCK_SCALED per block of the last dimension:
 *   max_abs = max |x| (NaN if any x is NaN)
 *   scale   = 2^-127 if max_abs == 0; NaN if max_abs is NaN or infinite; else
 *             2^clip(e, -127, 127) with e = ceil(log2(max_abs / r)) for f8E4M3FN
 *             and floor(log2(max_abs / r)) + 1 for the others, where
 *             r = normal_max + half an ulp of it (the largest magnitude that
 *             still rounds to normal_max)
 *   out     = round_to_nearest(x / scale)
 * kiln computes e without logarithms: r = 1.R * 2^k, max_abs = 1.m * 2^E, so
 * e = E - k, plus one when 1.m > 1.R (ceil) or 1.m >= 1.R (floor + 1). Any
 * max_abs below f32's smallest normal gives e <= -127 for these formats (r >= 7),
 * so the biased exponent field alone decides it, and a GPU that flushes
 * subnormals computes the same scale. x / scale is x times two powers of two of
 * at most 2^64 each, exact where the result is normal. */
typedef struct {
  bool (*is)(MlirType);
  const char *name;
  double normal_max;
  int frac_bits;
  bool ceil;
} block_format_t;

static bool is_i8(MlirType t) { return mlirTypeIsAInteger(t) && mlirIntegerTypeGetWidth(t) == 8; }

/* mxint8 (i8 here, mxint8_to_i8): normal_max 1 + 63/64, its ulp 2^-6. */
static const block_format_t kBlockFormats[] = {
    {mlirTypeIsAFloat8E4M3FN, "f8E4M3FN", 448.0, 3, true},
    {mlirTypeIsAFloat8E5M2, "f8E5M2", 57344.0, 2, false},
    {mlirTypeIsAFloat6E2M3FN, "f6E2M3FN", 7.5, 3, false},
    {mlirTypeIsAFloat6E3M2FN, "f6E3M2FN", 28.0, 2, false},
    {mlirTypeIsAFloat4E2M1FN, "f4E2M1FN", 6.0, 1, false},
    {is_i8, "mxint8", 127.0 / 64.0, 6, false},
};

static void append_dims(kiln_buf_t *b, MlirType t, int64_t last, int64_t extra) {
  intptr_t rank = mlirShapedTypeGetRank(t);
  for (intptr_t d = 0; d + 1 < rank; d++)
    kiln_buf_appendf(b, "%lldx", (long long)mlirShapedTypeGetDimSize(t, d));
  kiln_buf_appendf(b, "%lldx", (long long)last);
  if (extra) kiln_buf_appendf(b, "%lldx", (long long)extra);
}

/* Identity maps over `rank` loops, and the same with the last loop dropped. */
static void append_maps(kiln_buf_t *b, intptr_t rank, bool drop_last) {
  kiln_buf_append_str(b, "affine_map<(");
  for (intptr_t d = 0; d < rank; d++) kiln_buf_appendf(b, "%sd%ld", d ? ", " : "", (long)d);
  kiln_buf_append_str(b, ") -> (");
  for (intptr_t d = 0; d < rank - (drop_last ? 1 : 0); d++)
    kiln_buf_appendf(b, "%sd%ld", d ? ", " : "", (long)d);
  kiln_buf_append_str(b, ")>");
}

static void append_iterators(kiln_buf_t *b, intptr_t rank, bool last_reduces) {
  for (intptr_t d = 0; d < rank; d++) {
    kiln_buf_appendf(b, "%s\"%s\"", d ? ", " : "", last_reduces && d == rank - 1 ? "reduction" : "parallel");
  }
}

/* The rank of MX data `data` and, in its last dimension, its length and the
 * number of blocks `scale` has for it; UNIMPLEMENTED naming the op where either
 * shape is dynamic or the blocks do not divide the length. */
static KILN_MUST_USE kiln_status_t block_geometry(MlirOperation op, MlirType data, MlirType scale,
                                                  const char *name, intptr_t *rank, int64_t *len,
                                                  int64_t *blocks) {
  *rank = mlirShapedTypeHasRank(data) ? mlirShapedTypeGetRank(data) : 0;
  *len = *rank ? mlirShapedTypeGetDimSize(data, *rank - 1) : 0;
  *blocks = *rank ? mlirShapedTypeGetDimSize(scale, *rank - 1) : 0;
  if (*rank && mlirShapedTypeHasStaticShape(data) && mlirShapedTypeHasStaticShape(scale) && *blocks > 0 &&
      *len % *blocks == 0) {
    return NULL;
  }
  int line, col;
  kiln_compiler_op_line_col(op, &line, &col);
  MlirStringRef n = mlirIdentifierStr(mlirOperationGetName(op));
  return KILN_STATUS(KILN_STATUS_UNIMPLEMENTED,
                     "%s:%d:%d: %.*s of dynamic shapes: kiln does not compile it yet", name, line, col,
                     (int)n.length, n.data);
}

static KILN_MUST_USE kiln_status_t cast_to_block_scaled(MlirContext context, MlirOperation op,
                                                        const char *name) {
  MlirType in = mlirValueGetType(mlirOperationGetOperand(op, 0));
  MlirType out = mlirValueGetType(mlirOperationGetResult(op, 0));
  MlirType scale = mlirValueGetType(mlirOperationGetResult(op, 1));
  MlirType in_el = mlirShapedTypeGetElementType(in), out_el = mlirShapedTypeGetElementType(out);
  const block_format_t *f = NULL;
  for (size_t i = 0; i < sizeof kBlockFormats / sizeof kBlockFormats[0]; i++) {
    if (kBlockFormats[i].is(out_el)) f = &kBlockFormats[i];
  }
  kiln_buf_t ot;
  kiln_buf_init(&ot);
  append_type(&ot, out_el);
  int line, col;
  kiln_compiler_op_line_col(op, &line, &col);
  if (!f) {
    kiln_status_t st =
        KILN_STATUS(KILN_STATUS_UNIMPLEMENTED,
                    "%s:%d:%d: tosa.cast_to_block_scaled to %s: not an MX data type (f8E4M3FN, "
                    "f8E5M2, f6E2M3FN, f6E3M2FN, f4E2M1FN or !tosa.mxint8)",
                    name, line, col, ot.data);
    kiln_buf_deinit(&ot);
    return st;
  }
  intptr_t rank;
  int64_t len, blocks;
  kiln_status_t bad = block_geometry(op, in, scale, name, &rank, &len, &blocks);
  if (bad) {
    kiln_buf_deinit(&ot);
    return bad;
  }
  int64_t bs = len / blocks;
  /* r = 1.R * 2^k */
  double r = f->normal_max + 0.5 * ldexp(1.0, ilogb(f->normal_max) - f->frac_bits);
  int k = ilogb(r);
  long long r_frac = (long long)((ldexp(r, -k) - 1.0) * 8388608.0);

  kiln_buf_t it, t, ex, sc;
  kiln_buf_init(&it);
  kiln_buf_init(&t);
  kiln_buf_init(&ex);
  kiln_buf_init(&sc);
  append_type(&it, in_el);
  append_dims(&ex, in, blocks, bs); /* "AxBx..xNBxBSx" */
  append_dims(&sc, in, blocks, 0);  /* "AxBx..xNBx" */
  bool is_f32 = mlirTypeIsAF32(in_el);
  kiln_buf_t reassoc;
  kiln_buf_init(&reassoc);
  for (intptr_t d = 0; d + 1 < rank; d++) kiln_buf_appendf(&reassoc, "[%ld], ", (long)d);
  kiln_buf_appendf(&reassoc, "[%ld, %ld]", (long)(rank - 1), (long)rank);

  kiln_buf_append_str(&t, "func.func private @cast(%x: ");
  append_type(&t, in);
  kiln_buf_append_str(&t, ") -> (");
  append_type(&t, out);
  kiln_buf_append_str(&t, ", ");
  append_type(&t, scale);
  kiln_buf_appendf(&t, ") {\n  %%xe = tensor.expand_shape %%x [%s] output_shape [", reassoc.data);
  for (intptr_t d = 0; d + 1 < rank; d++)
    kiln_buf_appendf(&t, "%lld, ", (long long)mlirShapedTypeGetDimSize(in, d));
  kiln_buf_appendf(&t, "%lld, %lld] : ", (long long)blocks, (long long)bs);
  append_type(&t, in);
  kiln_buf_appendf(&t, " into tensor<%s%s>\n", ex.data, it.data);
  /* max |x| per block, NaN-propagating */
  kiln_buf_appendf(&t,
                   "  %%z = arith.constant 0.0 : f32\n  %%me = tensor.empty() : tensor<%sf32>\n"
                   "  %%mf = linalg.fill ins(%%z : f32) outs(%%me : tensor<%sf32>) -> tensor<%sf32>\n"
                   "  %%m = linalg.generic {indexing_maps = [",
                   sc.data, sc.data, sc.data);
  append_maps(&t, rank + 1, false);
  kiln_buf_append_str(&t, ", ");
  append_maps(&t, rank + 1, true);
  kiln_buf_append_str(&t, "], iterator_types = [");
  append_iterators(&t, rank + 1, true);
  kiln_buf_appendf(
      &t, "]} ins(%%xe : tensor<%s%s>) outs(%%mf : tensor<%sf32>) {\n  ^bb0(%%%s: %s, %%acc: f32):\n",
      ex.data, it.data, sc.data, is_f32 ? "w" : "v", it.data);
  if (!is_f32) kiln_buf_appendf(&t, "    %%w = arith.extf %%v : %s to f32\n", it.data);
  kiln_buf_appendf(&t,
                   "    %%a = math.absf %%w : f32\n    %%n = arith.maximumf %%acc, %%a : f32\n"
                   "    linalg.yield %%n : f32\n  } -> tensor<%sf32>\n",
                   sc.data);
  /* the scale's biased exponent, 255 for NaN */
  kiln_buf_appendf(&t, "  %%ee = tensor.empty() : tensor<%si32>\n  %%eb = linalg.generic {indexing_maps = [",
                   sc.data);
  append_maps(&t, rank, false);
  kiln_buf_append_str(&t, ", ");
  append_maps(&t, rank, false);
  kiln_buf_append_str(&t, "], iterator_types = [");
  append_iterators(&t, rank, false);
  kiln_buf_appendf(
      &t,
      "]} ins(%%m : tensor<%sf32>) outs(%%ee : tensor<%si32>) {\n  ^bb0(%%v: f32, %%o: i32):\n"
      "    %%b = arith.bitcast %%v : f32 to i32\n"
      "    %%c23 = arith.constant 23 : i32\n    %%c255 = arith.constant 255 : i32\n"
      "    %%c0 = arith.constant 0 : i32\n    %%c254 = arith.constant 254 : i32\n"
      "    %%cman = arith.constant 8388607 : i32\n    %%crf = arith.constant %lld : i32\n"
      "    %%ck = arith.constant %d : i32\n    %%c1 = arith.constant 1 : i32\n"
      "    %%sh = arith.shrui %%b, %%c23 : i32\n    %%be = arith.andi %%sh, %%c255 : i32\n"
      "    %%man = arith.andi %%b, %%cman : i32\n    %%up = arith.cmpi %s, %%man, %%crf : i32\n"
      "    %%inc = arith.select %%up, %%c1, %%c0 : i32\n"
      "    %%t0 = arith.subi %%be, %%ck : i32\n    %%t1 = arith.addi %%t0, %%inc : i32\n"
      "    %%t2 = arith.maxsi %%t1, %%c0 : i32\n    %%t3 = arith.minsi %%t2, %%c254 : i32\n"
      "    %%nan = arith.cmpi eq, %%be, %%c255 : i32\n    %%y = arith.select %%nan, %%c255, %%t3 : i32\n"
      "    linalg.yield %%y : i32\n  } -> tensor<%si32>\n",
      sc.data, sc.data, r_frac, k, f->ceil ? "ugt" : "uge", sc.data);
  /* the scale tensor: those exponents as E8M0 codes */
  kiln_buf_append_str(&t, "  %se = tensor.empty() : ");
  append_type(&t, scale);
  kiln_buf_append_str(&t, "\n  %s = linalg.generic {indexing_maps = [");
  append_maps(&t, rank, false);
  kiln_buf_append_str(&t, ", ");
  append_maps(&t, rank, false);
  kiln_buf_append_str(&t, "], iterator_types = [");
  append_iterators(&t, rank, false);
  kiln_buf_appendf(&t, "]} ins(%%eb : tensor<%si32>) outs(%%se : ", sc.data);
  append_type(&t, scale);
  kiln_buf_append_str(
      &t,
      ") {\n  ^bb0(%v: i32, %o: f8E8M0FNU):\n    %c23 = arith.constant 23 : i32\n"
      "    %p = arith.shli %v, %c23 : i32\n    %f = arith.bitcast %p : i32 to f32\n"
      "    %y = arith.truncf %f : f32 to f8E8M0FNU\n    linalg.yield %y : f8E8M0FNU\n  } -> ");
  append_type(&t, scale);
  /* the data: x * 2^(127 - e) in two factors, NaN where the scale is */
  kiln_buf_appendf(&t, "\n  %%de = tensor.empty() : tensor<%s%s>\n  %%d = linalg.generic {indexing_maps = [",
                   ex.data, ot.data);
  append_maps(&t, rank + 1, false);
  kiln_buf_append_str(&t, ", ");
  append_maps(&t, rank + 1, true);
  kiln_buf_append_str(&t, ", ");
  append_maps(&t, rank + 1, false);
  kiln_buf_append_str(&t, "], iterator_types = [");
  append_iterators(&t, rank + 1, false);
  kiln_buf_appendf(&t,
                   "]} ins(%%xe, %%eb : tensor<%s%s>, tensor<%si32>) outs(%%de : tensor<%s%s>) {\n"
                   "  ^bb0(%%%s: %s, %%e: i32, %%o: %s):\n",
                   ex.data, it.data, sc.data, ex.data, ot.data, is_f32 ? "w" : "v", it.data, ot.data);
  if (!is_f32) kiln_buf_appendf(&t, "    %%w = arith.extf %%v : %s to f32\n", it.data);
  kiln_buf_appendf(
      &t,
      "    %%c127 = arith.constant 127 : i32\n    %%c2 = arith.constant 2 : i32\n"
      "    %%c23 = arith.constant 23 : i32\n    %%c255 = arith.constant 255 : i32\n"
      "    %%n = arith.subi %%c127, %%e : i32\n    %%n1 = arith.divsi %%n, %%c2 : i32\n"
      "    %%n2 = arith.subi %%n, %%n1 : i32\n"
      "    %%b1 = arith.addi %%n1, %%c127 : i32\n    %%b2 = arith.addi %%n2, %%c127 : i32\n"
      "    %%s1 = arith.shli %%b1, %%c23 : i32\n    %%s2 = arith.shli %%b2, %%c23 : i32\n"
      "    %%p1 = arith.bitcast %%s1 : i32 to f32\n    %%p2 = arith.bitcast %%s2 : i32 to f32\n"
      "    %%q1 = arith.mulf %%w, %%p1 : f32\n    %%q2 = arith.mulf %%q1, %%p2 : f32\n"
      "    %%nan = arith.cmpi eq, %%e, %%c255 : i32\n    %%cn = arith.constant 0x7FC00000 : f32\n"
      "    %%q = arith.select %%nan, %%cn, %%q2 : f32\n");
  if (is_i8(out_el)) {
    /* round(q * 64) to nearest even (adding and taking away 1.5 * 2^23 rounds an
     * f32 below 2^22 to an integer in the default rounding mode, with no libm
     * call an embedded ELF could not import), saturated to +-127; 0 for NaN */
    kiln_buf_append_str(&t,
                        "    %c64 = arith.constant 64.0 : f32\n    %m0 = arith.mulf %q, %c64 : f32\n"
                        "    %lo = arith.constant -127.0 : f32\n    %hi = arith.constant 127.0 : f32\n"
                        "    %m1 = arith.maximumf %m0, %lo : f32\n    %m2 = arith.minimumf %m1, %hi : f32\n"
                        "    %mg = arith.constant 12582912.0 : f32\n    %r0 = arith.addf %m2, %mg : f32\n"
                        "    %r1 = arith.subf %r0, %mg : f32\n    %un = arith.cmpf uno, %q, %q : f32\n"
                        "    %zf = arith.constant 0.0 : f32\n    %r2 = arith.select %un, %zf, %r1 : f32\n"
                        "    %y = arith.fptosi %r2 : f32 to i8\n");
  } else {
    kiln_buf_appendf(&t, "    %%y = arith.truncf %%q : f32 to %s\n", ot.data);
  }
  kiln_buf_appendf(&t, "    linalg.yield %%y : %s\n  } -> tensor<%s%s>\n", ot.data, ex.data, ot.data);
  kiln_buf_appendf(&t, "  %%r = tensor.collapse_shape %%d [%s] : tensor<%s%s> into ", reassoc.data, ex.data,
                   ot.data);
  append_type(&t, out);
  kiln_buf_append_str(&t, "\n  return %r, %s : ");
  append_type(&t, out);
  kiln_buf_append_str(&t, ", ");
  append_type(&t, scale);
  kiln_buf_append_str(&t, "\n}");
  kiln_status_t st = kiln_compiler_kernels_replace_with_helper(context, &op, 1, t.data);
  kiln_buf_deinit(&t);
  kiln_buf_deinit(&it);
  kiln_buf_deinit(&ex);
  kiln_buf_deinit(&sc);
  kiln_buf_deinit(&ot);
  kiln_buf_deinit(&reassoc);
  return st;
}

/* ---- cast_from_block_scaled ---- */

/* TOSA 1.1's CAST_FROM_BLOCK_SCALED: out = fp32(x) * fp32(scale of x's block),
 * rounded to the output type; one linalg.generic whose scale map divides the
 * last index by the block size. */
static KILN_MUST_USE kiln_status_t cast_from_block_scaled(MlirContext context, MlirOperation op,
                                                          const char *name) {
  MlirType in = mlirValueGetType(mlirOperationGetOperand(op, 0));
  MlirType scale = mlirValueGetType(mlirOperationGetOperand(op, 1));
  MlirType out = mlirValueGetType(mlirOperationGetResult(op, 0));
  MlirType in_el = mlirShapedTypeGetElementType(in), out_el = mlirShapedTypeGetElementType(out);
  intptr_t rank;
  int64_t len, blocks;
  /* the result too (it need only be compatible with the input) */
  KILN_RETURN_IF_ERROR(
      block_geometry(op, mlirShapedTypeHasStaticShape(out) ? in : out, scale, name, &rank, &len, &blocks));
  if (!mlirTypeIsAFloat(out_el)) {
    int line, col;
    kiln_compiler_op_line_col(op, &line, &col);
    return KILN_STATUS(KILN_STATUS_INVALID_ARGUMENT,
                       "%s:%d:%d: tosa.cast_from_block_scaled must produce floats (TOSA 1.1: f32 or bf16)",
                       name, line, col);
  }
  kiln_buf_t t, it, ot;
  kiln_buf_init(&t);
  kiln_buf_init(&it);
  kiln_buf_init(&ot);
  append_type(&it, in_el);
  append_type(&ot, out_el);
  kiln_buf_append_str(&t, "func.func private @cast(%x: ");
  append_type(&t, in);
  kiln_buf_append_str(&t, ", %s: ");
  append_type(&t, scale);
  kiln_buf_append_str(&t, ") -> ");
  append_type(&t, out);
  kiln_buf_append_str(&t, " {\n  %e = tensor.empty() : ");
  append_type(&t, out);
  kiln_buf_append_str(&t, "\n  %r = linalg.generic {indexing_maps = [");
  append_maps(&t, rank, false);
  kiln_buf_append_str(&t, ", affine_map<(");
  for (intptr_t d = 0; d < rank; d++) kiln_buf_appendf(&t, "%sd%ld", d ? ", " : "", (long)d);
  kiln_buf_append_str(&t, ") -> (");
  for (intptr_t d = 0; d + 1 < rank; d++) kiln_buf_appendf(&t, "d%ld, ", (long)d);
  kiln_buf_appendf(&t, "d%ld floordiv %lld)>, ", (long)(rank - 1), (long long)(len / blocks));
  append_maps(&t, rank, false);
  kiln_buf_append_str(&t, "], iterator_types = [");
  append_iterators(&t, rank, false);
  kiln_buf_append_str(&t, "]} ins(%x, %s : ");
  append_type(&t, in);
  kiln_buf_append_str(&t, ", ");
  append_type(&t, scale);
  kiln_buf_append_str(&t, ") outs(%e : ");
  append_type(&t, out);
  kiln_buf_appendf(&t, ") {\n  ^bb0(%%v: %s, %%k: f8E8M0FNU, %%o: %s):\n", it.data, ot.data);
  append_dequant(&t, mlirTypeIsAF32(out_el) ? "y" : "w", "v", "k", it.data, mlirTypeIsAInteger(in_el));
  if (!mlirTypeIsAF32(out_el)) kiln_buf_appendf(&t, "    %%y = arith.truncf %%w : f32 to %s\n", ot.data);
  kiln_buf_appendf(&t, "    linalg.yield %%y : %s\n  } -> ", ot.data);
  append_type(&t, out);
  kiln_buf_append_str(&t, "\n  return %r : ");
  append_type(&t, out);
  kiln_buf_append_str(&t, "\n}");
  kiln_status_t st = kiln_compiler_kernels_replace_with_helper(context, &op, 1, t.data);
  kiln_buf_deinit(&t);
  kiln_buf_deinit(&it);
  kiln_buf_deinit(&ot);
  return st;
}
