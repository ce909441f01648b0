/* The host side of a compiled model: copies become kernels, and the outlined host
 * function is read into a host plan.
 *
 * Buffers. Every memref value on the host is a view of one root: a function
 * argument (INPUT), a memref.get_global (CONSTANT, its initializer's bytes) or a
 * memref.alloc (TRANSIENT). Views (subview, expand/collapse_shape, cast) keep
 * their static offset in their type; kernels take bare pointers and add that
 * offset themselves, so every binding is its root buffer from byte 0. Results
 * carry their byte offset (a function may return a view).
 *
 * Word padding. SPIR-V kernels on profiles without 8- and 16-bit storage reach
 * i1/i8/i16/f16/bf16 buffers through 32-bit words, and a device drops (robust
 * access) the word that straddles the end of a binding. So every buffer a kernel
 * binds spans whole words: allocations and constants are rounded up to 4 bytes,
 * and an input whose size is not a multiple of 4 is first copied into a rounded
 * transient buffer (one copy step at the start), which the kernels bind. Results
 * keep their exact sizes: a buffer view over the first bytes of a bigger buffer.
 *
 * Kernels. gpu-launch-sink-index-computations moved every constant a kernel uses
 * into it, so launches pass memrefs only; a scalar that is still passed must be a
 * constant (a push constant) or the plan is UNIMPLEMENTED.
 */
#include "compiler/host.h"

#include <mlir-c/AffineExpr.h>
#include <mlir-c/AffineMap.h>
#include <mlir-c/BuiltinAttributes.h>
#include <mlir-c/BuiltinTypes.h>
#include <stdint.h>
#include <string.h>

#include "base/alloc.h"
#include "base/buf.h"
#include "compiler/kernel_types.h"

static void append_cb(MlirStringRef s, void *user) { kiln_buf_append(user, s.data, s.length); }

static bool string_is(MlirStringRef s, const char *want) {
  return s.length == strlen(want) && memcmp(s.data, want, s.length) == 0;
}

static MlirAttribute attr(MlirOperation op, const char *name) {
  return mlirOperationGetAttributeByName(op, mlirStringRefCreateFromCString(name));
}

/* ---- copies to kernels ---- */

static void rewrite_copy(MlirContext ctx, MlirOperation copy) {
  MlirValue src = mlirOperationGetOperand(copy, 0);
  MlirValue dst = mlirOperationGetOperand(copy, 1);
  MlirType type = mlirValueGetType(src);
  intptr_t rank = mlirShapedTypeGetRank(type);
  MlirType elem = mlirShapedTypeGetElementType(type);
  MlirLocation loc = mlirOperationGetLocation(copy);

  MlirAttribute map = mlirAffineMapAttrGet(mlirAffineMapMultiDimIdentityGet(ctx, rank));
  MlirAttribute maps[2] = {map, map};
  MlirAttribute parallel =
      mlirAttributeParseGet(ctx, mlirStringRefCreateFromCString("#linalg.iterator_type<parallel>"));
  MlirAttribute *iters = kiln_calloc(rank ? (size_t)rank : 1, sizeof *iters);
  for (intptr_t i = 0; i < rank; i++) iters[i] = parallel;
  int32_t segments[2] = {1, 1};
  MlirNamedAttribute named[3] = {
      mlirNamedAttributeGet(mlirIdentifierGet(ctx, mlirStringRefCreateFromCString("indexing_maps")),
                            mlirArrayAttrGet(ctx, 2, maps)),
      mlirNamedAttributeGet(mlirIdentifierGet(ctx, mlirStringRefCreateFromCString("iterator_types")),
                            mlirArrayAttrGet(ctx, rank, iters)),
      mlirNamedAttributeGet(mlirIdentifierGet(ctx, mlirStringRefCreateFromCString("operandSegmentSizes")),
                            mlirDenseI32ArrayGet(ctx, 2, segments)),
  };
  kiln_free(iters);

  MlirType arg_types[2] = {elem, elem};
  MlirLocation locs[2] = {loc, loc};
  MlirBlock body = mlirBlockCreate(2, arg_types, locs);
  MlirOperationState yield_state = mlirOperationStateGet(mlirStringRefCreateFromCString("linalg.yield"), loc);
  MlirValue in = mlirBlockGetArgument(body, 0);
  mlirOperationStateAddOperands(&yield_state, 1, &in);
  mlirBlockAppendOwnedOperation(body, mlirOperationCreate(&yield_state));
  MlirRegion region = mlirRegionCreate();
  mlirRegionAppendOwnedBlock(region, body);

  MlirOperationState state = mlirOperationStateGet(mlirStringRefCreateFromCString("linalg.generic"), loc);
  MlirValue operands[2] = {src, dst};
  mlirOperationStateAddOperands(&state, 2, operands);
  mlirOperationStateAddAttributes(&state, 3, named);
  mlirOperationStateAddOwnedRegions(&state, 1, &region);
  MlirOperation generic = mlirOperationCreate(&state);
  mlirBlockInsertOwnedOperationBefore(mlirOperationGetBlock(copy), copy, generic);
  mlirOperationDestroy(copy);
}

/* A memref.copy inside a host loop (a scatter's row copies): a sequential nest of
 * scf.for over its dimensions, loading and storing element by element; the host
 * loop around it then becomes a one-invocation kernel (host loops to kernels). */
static void copy_as_loops(MlirContext ctx, MlirOperation copy) {
  MlirValue src = mlirOperationGetOperand(copy, 0);
  MlirValue dst = mlirOperationGetOperand(copy, 1);
  MlirType type = mlirValueGetType(src);
  intptr_t rank = mlirShapedTypeGetRank(type);
  MlirLocation loc = mlirOperationGetLocation(copy);
  MlirType index = mlirIndexTypeGet(ctx);
  MlirOperation before = copy;
  MlirValue *ivs = kiln_calloc((size_t)rank + 1, sizeof *ivs);
  MlirOperation c0 = kiln_compiler_int_constant(ctx, loc, index, 0);
  MlirOperation c1 = kiln_compiler_int_constant(ctx, loc, index, 1);
  mlirBlockInsertOwnedOperationBefore(mlirOperationGetBlock(copy), copy, c0);
  mlirBlockInsertOwnedOperationBefore(mlirOperationGetBlock(copy), copy, c1);
  for (intptr_t d = 0; d < rank; d++) {
    MlirBlock block = mlirOperationGetBlock(before);
    MlirValue ub;
    int64_t size = mlirShapedTypeGetDimSize(type, d);
    if (mlirShapedTypeIsDynamicSize(size)) {
      MlirOperation cd = kiln_compiler_int_constant(ctx, loc, index, d);
      mlirBlockInsertOwnedOperationBefore(block, before, cd);
      MlirValue dim_ops[2] = {src, mlirOperationGetResult(cd, 0)};
      MlirOperationState ds = mlirOperationStateGet(mlirStringRefCreateFromCString("memref.dim"), loc);
      mlirOperationStateAddOperands(&ds, 2, dim_ops);
      mlirOperationStateAddResults(&ds, 1, &index);
      MlirOperation dim = mlirOperationCreate(&ds);
      mlirBlockInsertOwnedOperationBefore(block, before, dim);
      ub = mlirOperationGetResult(dim, 0);
    } else {
      MlirOperation cs = kiln_compiler_int_constant(ctx, loc, index, size);
      mlirBlockInsertOwnedOperationBefore(block, before, cs);
      ub = mlirOperationGetResult(cs, 0);
    }
    MlirBlock body = mlirBlockCreate(1, &index, &loc);
    MlirRegion region = mlirRegionCreate();
    mlirRegionAppendOwnedBlock(region, body);
    MlirValue bounds[3] = {mlirOperationGetResult(c0, 0), ub, mlirOperationGetResult(c1, 0)};
    MlirOperationState fs = mlirOperationStateGet(mlirStringRefCreateFromCString("scf.for"), loc);
    mlirOperationStateAddOperands(&fs, 3, bounds);
    mlirOperationStateAddOwnedRegions(&fs, 1, &region);
    MlirOperation loop = mlirOperationCreate(&fs);
    mlirBlockInsertOwnedOperationBefore(block, before, loop);
    MlirOperationState ys = mlirOperationStateGet(mlirStringRefCreateFromCString("scf.yield"), loc);
    MlirOperation yield = mlirOperationCreate(&ys);
    mlirBlockAppendOwnedOperation(body, yield);
    ivs[d] = mlirBlockGetArgument(body, 0);
    before = yield;
  }
  MlirBlock inner = mlirOperationGetBlock(before);
  MlirValue *load_ops = kiln_calloc((size_t)rank + 2, sizeof *load_ops);
  load_ops[0] = src;
  for (intptr_t d = 0; d < rank; d++) load_ops[1 + d] = ivs[d];
  MlirType elem = mlirShapedTypeGetElementType(type);
  MlirOperationState ls = mlirOperationStateGet(mlirStringRefCreateFromCString("memref.load"), loc);
  mlirOperationStateAddOperands(&ls, rank + 1, load_ops);
  mlirOperationStateAddResults(&ls, 1, &elem);
  MlirOperation load = mlirOperationCreate(&ls);
  mlirBlockInsertOwnedOperationBefore(inner, before, load);
  MlirValue *store_ops = kiln_calloc((size_t)rank + 3, sizeof *store_ops);
  store_ops[0] = mlirOperationGetResult(load, 0);
  store_ops[1] = dst;
  for (intptr_t d = 0; d < rank; d++) store_ops[2 + d] = ivs[d];
  MlirOperationState ss = mlirOperationStateGet(mlirStringRefCreateFromCString("memref.store"), loc);
  mlirOperationStateAddOperands(&ss, rank + 2, store_ops);
  mlirBlockInsertOwnedOperationBefore(inner, before, mlirOperationCreate(&ss));
  mlirOperationDestroy(copy);
  kiln_free(ivs);
  kiln_free(load_ops);
  kiln_free(store_ops);
}

static MlirWalkResult collect_loop_copies(MlirOperation op, void *user) {
  if (kiln_compiler_op_is(op, "memref.copy")) kiln_compiler_ops_push(user, op);
  return MlirWalkResultAdvance;
}

static void rewrite_block(MlirContext ctx, MlirBlock block) {
  for (MlirOperation op = mlirBlockGetFirstOperation(block); !mlirOperationIsNull(op);) {
    MlirOperation next = mlirOperationGetNextInBlock(op);
    if (kiln_compiler_op_is(op, "memref.copy")) {
      rewrite_copy(ctx, op);
    } else if (kiln_compiler_op_is(op, "scf.for")) {
      kiln_compiler_ops_t copies = {0};
      mlirOperationWalk(op, collect_loop_copies, &copies, MlirWalkPreOrder);
      for (size_t i = 0; i < copies.n; i++) copy_as_loops(ctx, copies.items[i]);
      kiln_free(copies.items);
    }
    op = next;
  }
}

typedef void (*block_fn_t)(MlirContext, MlirBlock, void *);

/* Calls fn on every block of `region`, then on the blocks of the host control
 * flow (scf.if, scf.while) in them: host blocks, whose ops run on the host. */
static void for_each_host_block(MlirContext context, MlirRegion region, block_fn_t fn, void *user) {
  for (MlirBlock b = mlirRegionGetFirstBlock(region); !mlirBlockIsNull(b); b = mlirBlockGetNextInRegion(b)) {
    fn(context, b, user);
    for (MlirOperation op = mlirBlockGetFirstOperation(b); !mlirOperationIsNull(op);
         op = mlirOperationGetNextInBlock(op)) {
      if (!kiln_compiler_op_is(op, "scf.if") && !kiln_compiler_op_is(op, "scf.while")) continue;
      for (intptr_t r = 0; r < mlirOperationGetNumRegions(op); r++) {
        for_each_host_block(context, mlirOperationGetRegion(op, r), fn, user);
      }
    }
  }
}

/* Calls fn on every host block of every func.func at the top of `module`. */
static void for_each_function_block(MlirContext context, MlirModule module, block_fn_t fn, void *user) {
  MlirBlock body = mlirModuleGetBody(module);
  for (MlirOperation op = mlirBlockGetFirstOperation(body); !mlirOperationIsNull(op);
       op = mlirOperationGetNextInBlock(op)) {
    if (!kiln_compiler_op_is(op, "func.func") || mlirOperationGetNumRegions(op) < 1) continue;
    for_each_host_block(context, mlirOperationGetRegion(op, 0), fn, user);
  }
}

static void rewrite_copies_in(MlirContext context, MlirBlock block, void *user) {
  (void)user;
  rewrite_block(context, block);
}

void kiln_compiler_copies_to_kernels(MlirContext context, MlirModule module) {
  for_each_function_block(context, module, rewrite_copies_in, NULL);
}

/* ---- host loops to kernels (host.h) ---- */

/* Wraps the ops from `first` to `last` (a store or loop and the producers
 * gather_producers put before it) in a one-iteration scf.parallel. */
static void wrap_group(MlirContext ctx, MlirBlock block, MlirOperation first, MlirOperation last) {
  MlirLocation loc = mlirOperationGetLocation(last);
  MlirType index = mlirIndexTypeGet(ctx);
  MlirOperation c0 = kiln_compiler_int_constant(ctx, loc, index, 0);
  MlirOperation c1 = kiln_compiler_int_constant(ctx, loc, index, 1);
  mlirBlockInsertOwnedOperationBefore(block, first, c0);
  mlirBlockInsertOwnedOperationBefore(block, first, c1);
  MlirBlock body = mlirBlockCreate(1, &index, &loc);
  MlirRegion region = mlirRegionCreate();
  mlirRegionAppendOwnedBlock(region, body);
  MlirValue bounds[3] = {mlirOperationGetResult(c0, 0), mlirOperationGetResult(c1, 0),
                         mlirOperationGetResult(c1, 0)};
  int32_t segments[4] = {1, 1, 1, 0};
  MlirNamedAttribute seg =
      mlirNamedAttributeGet(mlirIdentifierGet(ctx, mlirStringRefCreateFromCString("operandSegmentSizes")),
                            mlirDenseI32ArrayGet(ctx, 4, segments));
  MlirOperationState ps = mlirOperationStateGet(mlirStringRefCreateFromCString("scf.parallel"), loc);
  mlirOperationStateAddOperands(&ps, 3, bounds);
  mlirOperationStateAddAttributes(&ps, 1, &seg);
  mlirOperationStateAddOwnedRegions(&ps, 1, &region);
  MlirOperation par = mlirOperationCreate(&ps);
  mlirBlockInsertOwnedOperationBefore(block, first, par);
  for (MlirOperation o = first; !mlirOperationIsNull(o);) {
    MlirOperation next = mlirOperationGetNextInBlock(o);
    bool end = mlirOperationEqual(o, last);
    mlirOperationRemoveFromParent(o);
    mlirBlockAppendOwnedOperation(body, o);
    if (end) break;
    o = next;
  }
  MlirOperationState rs = mlirOperationStateGet(mlirStringRefCreateFromCString("scf.reduce"), loc);
  mlirBlockAppendOwnedOperation(body, mlirOperationCreate(&rs));
}

/* The single scf.parallel (no results) that is all of a result-free scf.for's
 * body besides its scf.yield, or null. */
static MlirOperation lone_parallel(MlirOperation loop) {
  if (!kiln_compiler_op_is(loop, "scf.for") || mlirOperationGetNumResults(loop) != 0)
    return (MlirOperation){NULL};
  MlirBlock body = mlirRegionGetFirstBlock(mlirOperationGetRegion(loop, 0));
  MlirOperation first = mlirBlockGetFirstOperation(body);
  if (mlirOperationIsNull(first) || !kiln_compiler_op_is(first, "scf.parallel") ||
      mlirOperationGetNumResults(first) != 0) {
    return (MlirOperation){NULL};
  }
  MlirOperation second = mlirOperationGetNextInBlock(first);
  if (mlirOperationIsNull(second) || !kiln_compiler_op_is(second, "scf.yield") ||
      !mlirOperationIsNull(mlirOperationGetNextInBlock(second))) {
    return (MlirOperation){NULL};
  }
  return first;
}

/* scf.for %i { scf.parallel (%j) { B } } -> scf.parallel (%j) { scf.for %i { B } }.
 * Valid for the loops convert-linalg-to-parallel-loops makes: a linalg op's
 * parallel dimensions are independent, so each %j may run its own %i loop. Done
 * by moving ops: B keeps its uses of %i and %j, which still dominate it. The
 * parallel's bounds are defined above the for (linalg's loops take constants). */
static void interchange(MlirBlock block, MlirOperation loop, MlirOperation par) {
  MlirBlock for_body = mlirRegionGetFirstBlock(mlirOperationGetRegion(loop, 0));
  MlirBlock par_body = mlirRegionGetFirstBlock(mlirOperationGetRegion(par, 0));
  MlirOperation yield = mlirBlockGetTerminator(for_body);
  mlirOperationRemoveFromParent(par);
  mlirBlockInsertOwnedOperationBefore(block, loop, par);
  mlirOperationRemoveFromParent(loop);
  mlirBlockInsertOwnedOperationBefore(par_body, mlirBlockGetFirstOperation(par_body), loop);
  for (MlirOperation op = mlirOperationGetNextInBlock(loop); !mlirOperationIsNull(op);) {
    MlirOperation next = mlirOperationGetNextInBlock(op);
    if (kiln_compiler_op_is(op, "scf.reduce")) break;
    mlirOperationRemoveFromParent(op);
    mlirBlockInsertOwnedOperationBefore(for_body, yield, op);
    op = next;
  }
}

/* Whether `op` is host work a kernel must do: a store, or a loop that makes no
 * values (a reduction with no parallel dimension). */
static bool host_work(MlirOperation op) {
  return (kiln_compiler_op_is(op, "scf.for") && mlirOperationGetNumResults(op) == 0) ||
         kiln_compiler_op_is(op, "memref.store");
}

/* Moves the single-use, non-constant producers of `op`'s scalar operands that sit
 * in `block` (a load feeding a store, arithmetic on it) in front of `op`, so they
 * go into the kernel with it. Returns the first op of the group. */
static MlirOperation gather_producers(MlirBlock block, MlirOperation op) {
  MlirOperation first = op;
  for (intptr_t i = 0; i < mlirOperationGetNumOperands(op); i++) {
    MlirValue v = mlirOperationGetOperand(op, i);
    if (!mlirValueIsAOpResult(v) || mlirTypeIsAMemRef(mlirValueGetType(v))) continue;
    MlirOperation def = mlirOpResultGetOwner(v);
    if (!mlirBlockEqual(mlirOperationGetBlock(def), block) || kiln_compiler_op_is(def, "arith.constant") ||
        mlirOperationGetNumResults(def) != 1) {
      continue;
    }
    MlirOpOperand use = mlirValueGetFirstUse(v);
    if (mlirOpOperandIsNull(use) || !mlirOpOperandIsNull(mlirOpOperandGetNextUse(use))) continue;
    mlirOperationMoveBefore(def, first);
    first = gather_producers(block, def);
  }
  return first;
}

/* The condition operand of host control flow (scf.if, scf.condition), or null. */
static MlirValue host_condition(MlirOperation op) {
  if ((kiln_compiler_op_is(op, "scf.if") || kiln_compiler_op_is(op, "scf.condition")) &&
      mlirOperationGetNumOperands(op) > 0) {
    return mlirOperationGetOperand(op, 0);
  }
  return (MlirValue){NULL};
}

/* A condition the host computes from scalars (arith on a value it loaded):
 * stored into a fresh memref<i1> and loaded back, so the computation becomes a
 * one-invocation kernel (the store is host work) and the host reads an i1 a
 * kernel wrote, which is what its program can branch on. */
static void conditions_to_device(MlirContext ctx, MlirBlock b) {
  for (MlirOperation op = mlirBlockGetFirstOperation(b); !mlirOperationIsNull(op);
       op = mlirOperationGetNextInBlock(op)) {
    MlirValue cond = host_condition(op);
    if (mlirValueIsNull(cond) || !mlirValueIsAOpResult(cond)) continue;
    MlirOperation def = mlirOpResultGetOwner(cond);
    if (kiln_compiler_op_is(def, "memref.load") || !mlirBlockEqual(mlirOperationGetBlock(def), b)) continue;
    MlirLocation loc = mlirOperationGetLocation(op);
    MlirType i1 = mlirValueGetType(cond);
    MlirType buf_type = mlirMemRefTypeGet(i1, 0, NULL, mlirAttributeGetNull(), mlirAttributeGetNull());
    MlirOperation alloc = kiln_compiler_static_alloc(ctx, loc, buf_type);
    mlirBlockInsertOwnedOperationBefore(b, op, alloc);
    MlirValue buf = mlirOperationGetResult(alloc, 0);
    MlirOperationState ss = mlirOperationStateGet(mlirStringRefCreateFromCString("memref.store"), loc);
    MlirValue store_operands[2] = {cond, buf};
    mlirOperationStateAddOperands(&ss, 2, store_operands);
    mlirBlockInsertOwnedOperationBefore(b, op, mlirOperationCreate(&ss));
    MlirOperationState ls = mlirOperationStateGet(mlirStringRefCreateFromCString("memref.load"), loc);
    mlirOperationStateAddOperands(&ls, 1, &buf);
    mlirOperationStateAddResults(&ls, 1, &i1);
    MlirOperation load = mlirOperationCreate(&ls);
    mlirBlockInsertOwnedOperationBefore(b, op, load);
    mlirOperationSetOperand(op, 0, mlirOperationGetResult(load, 0));
  }
}

static void loops_to_kernels_in(MlirContext context, MlirBlock b, void *user) {
  (void)user;
  conditions_to_device(context, b);
  /* Reductions over outer dimensions: the parallel loops go outside. A nest
   * of several reduction loops takes one interchange per loop. */
  for (bool changed = true; changed;) {
    changed = false;
    for (MlirOperation op = mlirBlockGetFirstOperation(b); !mlirOperationIsNull(op);) {
      MlirOperation next = mlirOperationGetNextInBlock(op);
      MlirOperation inner = op;
      /* Find for(...for(par)) at any depth of a for-only nest under op. */
      while (kiln_compiler_op_is(inner, "scf.for") && mlirOperationGetNumResults(inner) == 0) {
        MlirOperation par = lone_parallel(inner);
        if (!mlirOperationIsNull(par)) {
          interchange(mlirOperationGetBlock(inner), inner, par);
          changed = true;
          break;
        }
        MlirBlock ib = mlirRegionGetFirstBlock(mlirOperationGetRegion(inner, 0));
        MlirOperation only = mlirBlockGetFirstOperation(ib);
        MlirOperation after = mlirOperationIsNull(only) ? only : mlirOperationGetNextInBlock(only);
        if (mlirOperationIsNull(after) || !kiln_compiler_op_is(after, "scf.yield")) break;
        inner = only;
      }
      op = next;
    }
  }
  /* What is still host work becomes a one-invocation kernel. */
  for (MlirOperation op = mlirBlockGetFirstOperation(b); !mlirOperationIsNull(op);) {
    MlirOperation next = mlirOperationGetNextInBlock(op);
    if (host_work(op)) wrap_group(context, b, gather_producers(b, op), op);
    op = next;
  }
}

void kiln_compiler_host_loops_to_kernels(MlirContext context, MlirModule module) {
  for_each_function_block(context, module, loops_to_kernels_in, NULL);
}

/* ---- fusion bounds (host.h) ---- */

static const char depth_attr[] = "kiln.chain_depth";
static const char barrier_attr[] = "kiln.fusion_barrier";

/* The chain depth recorded on the generic that defines `v`, or 0. */
static int64_t producer_depth(MlirValue v) {
  if (!mlirValueIsAOpResult(v)) return 0;
  MlirOperation def = mlirOpResultGetOwner(v);
  if (!kiln_compiler_op_is(def, "linalg.generic")) return 0;
  MlirAttribute a = attr(def, depth_attr);
  return mlirAttributeIsNull(a) ? 0 : mlirIntegerAttrGetValueInt(a);
}

static void barriers_in_block(MlirContext ctx, MlirBlock block, int64_t limit) {
  MlirType i64 = mlirIntegerTypeGet(ctx, 64);
  MlirStringRef key = mlirStringRefCreateFromCString(depth_attr);
  for (MlirOperation op = mlirBlockGetFirstOperation(block); !mlirOperationIsNull(op);
       op = mlirOperationGetNextInBlock(op)) {
    if (!kiln_compiler_op_is(op, "linalg.generic")) continue;
    int64_t depth = 0;
    for (intptr_t i = 0; i < mlirOperationGetNumOperands(op); i++) {
      int64_t d = producer_depth(mlirOperationGetOperand(op, i));
      if (d > depth) depth = d;
    }
    depth++;
    if (depth >= limit && mlirOperationGetNumResults(op) > 0) {
      for (intptr_t r = 0; r < mlirOperationGetNumResults(op); r++) {
        MlirValue v = mlirOperationGetResult(op, r);
        MlirOperationState state = mlirOperationStateGet(
            mlirStringRefCreateFromCString("bufferization.dealloc_tensor"), mlirOperationGetLocation(op));
        mlirOperationStateAddOperands(&state, 1, &v);
        MlirOperation barrier = mlirOperationCreate(&state);
        mlirOperationSetDiscardableAttributeByName(barrier, mlirStringRefCreateFromCString(barrier_attr),
                                                   mlirUnitAttrGet(ctx));
        mlirBlockInsertOwnedOperationAfter(block, op, barrier);
      }
      depth = 0;
    }
    mlirOperationSetDiscardableAttributeByName(op, key, mlirIntegerAttrGet(i64, depth));
  }
}

static void barriers_in(MlirContext context, MlirBlock block, void *user) {
  barriers_in_block(context, block, *(const int64_t *)user);
}

void kiln_compiler_fusion_barriers_insert(MlirContext context, MlirModule module, int64_t limit) {
  for_each_function_block(context, module, barriers_in, &limit);
}

typedef struct barriers_s {
  MlirOperation *items;
  size_t n;
} barriers_t;

static MlirWalkResult find_barrier(MlirOperation op, void *user) {
  if (kiln_compiler_op_is(op, "bufferization.dealloc_tensor") &&
      !mlirAttributeIsNull(attr(op, barrier_attr))) {
    barriers_t *b = user;
    b->items = kiln_realloc(b->items, (b->n + 1) * sizeof *b->items);
    b->items[b->n++] = op;
  }
  return MlirWalkResultAdvance;
}

static MlirWalkResult remove_depth(MlirOperation op, void *user) {
  (void)user;
  mlirOperationRemoveDiscardableAttributeByName(op, mlirStringRefCreateFromCString(depth_attr));
  return MlirWalkResultAdvance;
}

void kiln_compiler_fusion_barriers_remove(MlirModule module) {
  barriers_t b = {0};
  mlirOperationWalk(mlirModuleGetOperation(module), find_barrier, &b, MlirWalkPreOrder);
  for (size_t i = 0; i < b.n; i++) mlirOperationDestroy(b.items[i]);
  kiln_free(b.items);
  mlirOperationWalk(mlirModuleGetOperation(module), remove_depth, NULL, MlirWalkPreOrder);
}

/* ---- the host plan ---- */

/* A host value's root buffer and its byte offset from the root's start. */
typedef struct view_s {
  MlirValue value;
  uint32_t buffer;
  uint64_t offset;
  uint32_t dims[KILN_VMFB_MAX_RANK]; /* expressions of dynamic dimensions (0: static) */
} view_t;

/* A host scalar (a dimension, a size, a condition on them) as an expression. */
typedef struct host_value_s {
  MlirValue value;
  uint32_t expr;
} host_value_t;

/* A scalar the host reads back from a device buffer (a condition). */
typedef struct scalar_s {
  MlirValue value;
  uint32_t buffer;
  uint64_t offset; /* bytes */
  uint32_t bytes;
} scalar_t;

typedef struct reader_s {
  MlirModule module;
  const char *name;
  kiln_vmfb_plan_t *plan;
  kiln_vmfb_function_t *fn;
  view_t *views;
  size_t n_views;
  scalar_t *scalars;
  size_t n_scalars;
  host_value_t *values;
  size_t n_values;
  uint32_t next_kernel;
} reader_t;

/* MLIR element types and IREE's codes for them (plan.h): one row per type. */
static KILN_MUST_USE kiln_status_t element_type(const reader_t *r, MlirType t, uint32_t *out) {
  static const struct {
    bool (*is)(MlirType);
    uint32_t code;
  } floats[] = {
      {mlirTypeIsAF16, KILN_VMFB_ELEMENT_FLOAT_16},
      {mlirTypeIsAF32, KILN_VMFB_ELEMENT_FLOAT_32},
      {mlirTypeIsAF64, KILN_VMFB_ELEMENT_FLOAT_64},
      {mlirTypeIsABF16, KILN_VMFB_ELEMENT_BFLOAT_16},
      {mlirTypeIsAFloat8E5M2, KILN_VMFB_ELEMENT_FLOAT_8_E5M2},
      {mlirTypeIsAFloat8E4M3FN, KILN_VMFB_ELEMENT_FLOAT_8_E4M3_FN},
      {mlirTypeIsAFloat8E5M2FNUZ, KILN_VMFB_ELEMENT_FLOAT_8_E5M2_FNUZ},
      {mlirTypeIsAFloat8E4M3FNUZ, KILN_VMFB_ELEMENT_FLOAT_8_E4M3_FNUZ},
      {mlirTypeIsAFloat8E8M0FNU, KILN_VMFB_ELEMENT_FLOAT_8_E8M0_FNU},
  };
  for (size_t i = 0; i < sizeof floats / sizeof floats[0]; i++) {
    if (floats[i].is(t)) {
      *out = floats[i].code;
      return NULL;
    }
  }
  /* IREE has no 4- or 6-bit float: their buffers hold the bits, as the kernels
   * keep them (kernel_types.h): f4 packed two to a byte like i4, f6 one to a byte. */
  if (mlirTypeIsAFloat4E2M1FN(t)) {
    *out = KILN_VMFB_ELEMENT_INT_4;
    return NULL;
  }
  if (mlirTypeIsAFloat6E2M3FN(t) || mlirTypeIsAFloat6E3M2FN(t)) {
    *out = KILN_VMFB_ELEMENT_INT_8;
    return NULL;
  }
  if (mlirTypeIsAInteger(t)) {
    switch (mlirIntegerTypeGetWidth(t)) {
      case 1: *out = KILN_VMFB_ELEMENT_BOOL_8; return NULL;
      case 2: *out = KILN_VMFB_ELEMENT_INT_2; return NULL;
      case 4: *out = KILN_VMFB_ELEMENT_INT_4; return NULL;
      case 8: *out = KILN_VMFB_ELEMENT_INT_8; return NULL;
      case 16: *out = KILN_VMFB_ELEMENT_INT_16; return NULL;
      case 32: *out = KILN_VMFB_ELEMENT_INT_32; return NULL;
      case 64: *out = KILN_VMFB_ELEMENT_INT_64; return NULL;
      default: break;
    }
  }
  kiln_buf_t text;
  kiln_buf_init(&text);
  mlirTypePrint(t, append_cb, &text);
  kiln_status_t st = KILN_STATUS(KILN_STATUS_UNIMPLEMENTED,
                                 "%s: function %s: element type %s has no IREE buffer view type "
                                 "(use i1/i2/i4/i8/i16/i32/i64, f16/bf16/f32/f64, an f8, f6 or f4 type)",
                                 r->name, r->fn->name, text.len ? text.data : "?");
  kiln_buf_deinit(&text);
  return st;
}

/* A memref type as a tensor type; a dynamic dimension is -1 when `dynamic_ok`. */
static KILN_MUST_USE kiln_status_t tensor_type_of(const reader_t *r, MlirType t, bool dynamic_ok,
                                                  kiln_vmfb_tensor_type_t *out) {
  memset(out, 0, sizeof *out);
  if (!mlirTypeIsAMemRef(t) || (!dynamic_ok && !mlirShapedTypeHasStaticShape(t)) ||
      mlirShapedTypeGetRank(t) > KILN_VMFB_MAX_RANK) {
    return KILN_STATUS(KILN_STATUS_UNIMPLEMENTED,
                       "%s: function %s: a buffer here must be of static shape and rank <= %d", r->name,
                       r->fn->name, KILN_VMFB_MAX_RANK);
  }
  out->rank = (uint32_t)mlirShapedTypeGetRank(t);
  for (uint32_t d = 0; d < out->rank; d++) {
    int64_t size = mlirShapedTypeGetDimSize(t, d);
    out->dims[d] = mlirShapedTypeIsDynamicSize(size) ? -1 : size;
  }
  return element_type(r, mlirShapedTypeGetElementType(t), &out->element_type);
}

static KILN_MUST_USE kiln_status_t tensor_type(const reader_t *r, MlirType t, kiln_vmfb_tensor_type_t *out) {
  return tensor_type_of(r, t, false, out);
}

static uint64_t type_bytes(const kiln_vmfb_tensor_type_t *t) {
  uint64_t n = 0;
  (void)kiln_vmfb_tensor_type_bytes(t, &n); /* static MLIR shapes fit: MLIR caps them */
  return n;
}

/* Buffer sizes rounded up to whole 32-bit words (see Word padding). */
static uint64_t word_round(uint64_t bytes) { return (bytes + 3u) & ~(uint64_t)3u; }

static uint32_t add_buffer(kiln_vmfb_function_t *fn, kiln_vmfb_buffer_t b) {
  fn->buffers = kiln_realloc(fn->buffers, (fn->n_buffers + 1) * sizeof *fn->buffers);
  fn->buffers[fn->n_buffers] = b;
  return (uint32_t)fn->n_buffers++;
}

static void add_step(kiln_vmfb_function_t *fn, kiln_vmfb_step_t step) {
  fn->steps = kiln_realloc(fn->steps, (fn->n_steps + 1) * sizeof *fn->steps);
  fn->steps[fn->n_steps++] = step;
}

static void add_view_dims(reader_t *r, MlirValue v, uint32_t buffer, uint64_t offset, const uint32_t *dims) {
  r->views = kiln_realloc(r->views, (r->n_views + 1) * sizeof *r->views);
  view_t *view = &r->views[r->n_views++];
  *view = (view_t){.value = v, .buffer = buffer, .offset = offset};
  if (dims) memcpy(view->dims, dims, sizeof view->dims);
}

static void add_view(reader_t *r, MlirValue v, uint32_t buffer, uint64_t offset) {
  add_view_dims(r, v, buffer, offset, NULL);
}

/* ---- host expressions (plan.h) ---- */

static uint32_t add_expr(reader_t *r, kiln_vmfb_expr_kind_t kind, uint32_t a, uint32_t b, uint32_t c,
                         int64_t value) {
  kiln_vmfb_function_t *fn = r->fn;
  /* Constants and input dimensions are shared. */
  if (kind == KILN_VMFB_EXPR_CONST || kind == KILN_VMFB_EXPR_INPUT_DIM) {
    for (size_t i = 0; i < fn->n_exprs; i++) {
      const kiln_vmfb_expr_t *x = &fn->exprs[i];
      if (x->kind == kind && x->a == a && x->b == b && x->value == value) return (uint32_t)i + 1;
    }
  }
  fn->exprs = kiln_realloc(fn->exprs, (fn->n_exprs + 1) * sizeof *fn->exprs);
  fn->exprs[fn->n_exprs++] = (kiln_vmfb_expr_t){kind, a, b, c, value};
  return (uint32_t)fn->n_exprs;
}

static uint32_t const_expr(reader_t *r, int64_t v) { return add_expr(r, KILN_VMFB_EXPR_CONST, 0, 0, 0, v); }

static uint32_t bin(reader_t *r, kiln_vmfb_expr_kind_t kind, uint32_t a, uint32_t b) {
  return add_expr(r, kind, a, b, 0, 0);
}

static uint32_t not_expr(reader_t *r, uint32_t a) { return bin(r, KILN_VMFB_EXPR_XOR, a, const_expr(r, 1)); }

/* Dimension d of a view of type t: a constant, or the view's expression. */
static uint32_t dim_expr(reader_t *r, const view_t *v, MlirType t, intptr_t d) {
  int64_t size = mlirShapedTypeGetDimSize(t, d);
  if (!mlirShapedTypeIsDynamicSize(size)) return const_expr(r, size);
  return v->dims[d];
}

/* Bytes of a memref of type t (element count from dims, packed as plan.h says). */
static uint32_t bytes_expr(reader_t *r, MlirType t, const uint32_t *dims, uint32_t element_type) {
  uint32_t n = const_expr(r, 1);
  for (intptr_t d = 0; d < mlirShapedTypeGetRank(t); d++) {
    int64_t size = mlirShapedTypeGetDimSize(t, d);
    n = bin(r, KILN_VMFB_EXPR_MUL, n, mlirShapedTypeIsDynamicSize(size) ? dims[d] : const_expr(r, size));
  }
  uint32_t bits = kiln_vmfb_element_bits(element_type);
  if (bits < 8) {
    return bin(
        r, KILN_VMFB_EXPR_DIV_U,
        bin(r, KILN_VMFB_EXPR_ADD, bin(r, KILN_VMFB_EXPR_MUL, n, const_expr(r, bits)), const_expr(r, 7)),
        const_expr(r, 8));
  }
  return bin(r, KILN_VMFB_EXPR_MUL, n, const_expr(r, bits / 8));
}

/* bytes rounded up to whole words, at least one word (see Word padding). */
static uint32_t word_round_expr(reader_t *r, uint32_t bytes) {
  uint32_t words =
      bin(r, KILN_VMFB_EXPR_DIV_U, bin(r, KILN_VMFB_EXPR_ADD, bytes, const_expr(r, 3)), const_expr(r, 4));
  return bin(r, KILN_VMFB_EXPR_MUL, bin(r, KILN_VMFB_EXPR_MAX_U, words, const_expr(r, 1)), const_expr(r, 4));
}

/* A buffer's size in bytes as an expression. */
static uint32_t buffer_size_expr(reader_t *r, uint32_t b) {
  const kiln_vmfb_buffer_t *buf = &r->fn->buffers[b];
  return buf->size_expr ? buf->size_expr : const_expr(r, (int64_t)buf->size_bytes);
}

static void set_value(reader_t *r, MlirValue v, uint32_t expr) {
  r->values = kiln_realloc(r->values, (r->n_values + 1) * sizeof *r->values);
  r->values[r->n_values++] = (host_value_t){v, expr};
}

static const view_t *find_view(const reader_t *r, MlirValue v) {
  for (size_t i = 0; i < r->n_views; i++) {
    if (mlirValueEqual(r->views[i].value, v)) return &r->views[i];
  }
  return NULL;
}

/* The static offset (in elements) a memref type's layout adds, 0 for identity. */
static bool static_offset(MlirType t, uint64_t *out) {
  *out = 0;
  if (mlirAffineMapIsIdentity(mlirMemRefTypeGetAffineMap(t))) return true;
  intptr_t rank = mlirShapedTypeGetRank(t);
  int64_t *strides = kiln_calloc(rank ? (size_t)rank : 1, sizeof *strides);
  int64_t offset = 0;
  bool ok = mlirLogicalResultIsSuccess(mlirMemRefTypeGetStridesAndOffset(t, strides, &offset)) &&
            !mlirShapedTypeIsDynamicStrideOrOffset(offset) && offset >= 0;
  kiln_free(strides);
  if (ok) *out = (uint64_t)offset;
  return ok;
}

/* Whether a static memref's elements lie row-major without gaps (a byte range). */
static bool contiguous(MlirType t) {
  if (!mlirTypeIsAMemRef(t) || !mlirShapedTypeHasStaticShape(t)) return false;
  if (mlirAffineMapIsIdentity(mlirMemRefTypeGetAffineMap(t))) return true;
  intptr_t rank = mlirShapedTypeGetRank(t);
  int64_t *strides = kiln_calloc(rank ? (size_t)rank : 1, sizeof *strides);
  int64_t offset = 0;
  bool ok = mlirLogicalResultIsSuccess(mlirMemRefTypeGetStridesAndOffset(t, strides, &offset));
  int64_t want = 1;
  for (intptr_t d = rank - 1; ok && d >= 0; d--) {
    int64_t size = mlirShapedTypeGetDimSize(t, d);
    if (size != 1 && strides[d] != want) ok = false;
    want *= size;
  }
  kiln_free(strides);
  return ok;
}

static KILN_MUST_USE kiln_status_t unsupported(const reader_t *r, MlirOperation op, const char *why) {
  MlirStringRef s = mlirIdentifierStr(mlirOperationGetName(op));
  return KILN_STATUS(KILN_STATUS_UNIMPLEMENTED,
                     "%s: function %s: host op %.*s %s; kiln's VMFB host program cannot express it", r->name,
                     r->fn->name, (int)s.length, s.data, why);
}

/* The expression of host scalar `v` (an integer or index constant, or a value an
 * earlier host op computed), for op `user`. */
static KILN_MUST_USE kiln_status_t value_expr(reader_t *r, MlirOperation user, MlirValue v, uint32_t *out) {
  for (size_t i = r->n_values; i > 0; i--) {
    if (mlirValueEqual(r->values[i - 1].value, v)) {
      *out = r->values[i - 1].expr;
      return NULL;
    }
  }
  MlirOperation def = mlirValueIsAOpResult(v) ? mlirOpResultGetOwner(v) : (MlirOperation){NULL};
  MlirAttribute a = mlirOperationIsNull(def) || !kiln_compiler_op_is(def, "arith.constant")
                        ? (MlirAttribute){NULL}
                        : attr(def, "value");
  if (!mlirAttributeIsNull(a) && mlirAttributeIsAInteger(a)) {
    MlirType t = mlirValueGetType(v);
    int64_t value = mlirTypeIsAInteger(t) && mlirIntegerTypeGetWidth(t) == 1
                        ? (mlirIntegerAttrGetValueInt(a) & 1)
                        : mlirIntegerAttrGetValueInt(a);
    *out = const_expr(r, value);
    return NULL;
  }
  return unsupported(r, user,
                     "uses a host value kiln cannot compute (only sizes: integer arithmetic on "
                     "dimensions and constants)");
}

/* An affine expression over `operands` (dims, then symbols). */
static KILN_MUST_USE kiln_status_t affine_expr(reader_t *r, MlirOperation op, MlirAffineExpr e,
                                               intptr_t n_dims, uint32_t *out) {
  if (mlirAffineExprIsAConstant(e)) {
    *out = const_expr(r, mlirAffineConstantExprGetValue(e));
    return NULL;
  }
  if (mlirAffineExprIsADim(e)) {
    return value_expr(r, op, mlirOperationGetOperand(op, (intptr_t)mlirAffineDimExprGetPosition(e)), out);
  }
  if (mlirAffineExprIsASymbol(e)) {
    return value_expr(
        r, op, mlirOperationGetOperand(op, n_dims + (intptr_t)mlirAffineSymbolExprGetPosition(e)), out);
  }
  if (!mlirAffineExprIsABinary(e)) return unsupported(r, op, "has an affine expression kiln cannot read");
  uint32_t a = 0, b = 0;
  KILN_RETURN_IF_ERROR(affine_expr(r, op, mlirAffineBinaryOpExprGetLHS(e), n_dims, &a));
  KILN_RETURN_IF_ERROR(affine_expr(r, op, mlirAffineBinaryOpExprGetRHS(e), n_dims, &b));
  if (mlirAffineExprIsAAdd(e)) {
    *out = bin(r, KILN_VMFB_EXPR_ADD, a, b);
  } else if (mlirAffineExprIsAMul(e)) {
    *out = bin(r, KILN_VMFB_EXPR_MUL, a, b);
  } else {
    /* floordiv, ceildiv, mod: affine's divisors are positive constants. */
    uint32_t q = bin(r, KILN_VMFB_EXPR_DIV_S, a, b), m = bin(r, KILN_VMFB_EXPR_REM_S, a, b);
    uint32_t inexact = bin(r, KILN_VMFB_EXPR_NE, m, const_expr(r, 0));
    uint32_t negative = bin(r, KILN_VMFB_EXPR_LT_S, m, const_expr(r, 0));
    if (mlirAffineExprIsAFloorDiv(e)) {
      *out = bin(r, KILN_VMFB_EXPR_SUB, q, bin(r, KILN_VMFB_EXPR_AND, inexact, negative));
    } else if (mlirAffineExprIsACeilDiv(e)) {
      *out = bin(r, KILN_VMFB_EXPR_ADD, q, bin(r, KILN_VMFB_EXPR_AND, inexact, not_expr(r, negative)));
    } else {
      *out = add_expr(r, KILN_VMFB_EXPR_SELECT, negative, bin(r, KILN_VMFB_EXPR_ADD, m, b), m, 0);
    }
  }
  return NULL;
}

static const struct {
  const char *op;
  kiln_vmfb_expr_kind_t kind;
} ARITH_BINARY[] = {
    {"arith.addi", KILN_VMFB_EXPR_ADD},    {"arith.subi", KILN_VMFB_EXPR_SUB},
    {"arith.muli", KILN_VMFB_EXPR_MUL},    {"arith.divsi", KILN_VMFB_EXPR_DIV_S},
    {"arith.divui", KILN_VMFB_EXPR_DIV_U}, {"arith.remsi", KILN_VMFB_EXPR_REM_S},
    {"arith.remui", KILN_VMFB_EXPR_REM_U}, {"arith.minsi", KILN_VMFB_EXPR_MIN_S},
    {"arith.minui", KILN_VMFB_EXPR_MIN_U}, {"arith.maxsi", KILN_VMFB_EXPR_MAX_S},
    {"arith.maxui", KILN_VMFB_EXPR_MAX_U}, {"arith.andi", KILN_VMFB_EXPR_AND},
    {"arith.ori", KILN_VMFB_EXPR_OR},      {"arith.xori", KILN_VMFB_EXPR_XOR},
};

/* Host integer arithmetic (sizes and conditions on them) as expressions; sets
 * *handled when op is such an op. */
static KILN_MUST_USE kiln_status_t read_scalar_op(reader_t *r, MlirOperation op, bool *handled) {
  *handled = true;
  if (mlirOperationGetNumResults(op) != 1) {
    *handled = false;
    return NULL;
  }
  MlirValue result = mlirOperationGetResult(op, 0);
  MlirType rt = mlirValueGetType(result);
  if (!mlirTypeIsAIndex(rt) && !mlirTypeIsAInteger(rt)) {
    *handled = false;
    return NULL;
  }
  uint32_t a = 0, b = 0, c = 0, x = 0;
  for (size_t i = 0; i < sizeof ARITH_BINARY / sizeof ARITH_BINARY[0]; i++) {
    if (!kiln_compiler_op_is(op, ARITH_BINARY[i].op)) continue;
    KILN_RETURN_IF_ERROR(value_expr(r, op, mlirOperationGetOperand(op, 0), &a));
    KILN_RETURN_IF_ERROR(value_expr(r, op, mlirOperationGetOperand(op, 1), &b));
    set_value(r, result, bin(r, ARITH_BINARY[i].kind, a, b));
    return NULL;
  }
  if (kiln_compiler_op_is(op, "arith.index_cast") || kiln_compiler_op_is(op, "arith.index_castui") ||
      kiln_compiler_op_is(op, "arith.extsi") || kiln_compiler_op_is(op, "arith.extui") ||
      kiln_compiler_op_is(op, "arith.trunci")) {
    /* Sizes fit every width kiln uses; words are truncated where they are written. */
    KILN_RETURN_IF_ERROR(value_expr(r, op, mlirOperationGetOperand(op, 0), &a));
    set_value(r, result, a);
    return NULL;
  }
  if (kiln_compiler_op_is(op, "arith.ceildivsi") || kiln_compiler_op_is(op, "arith.ceildivui") ||
      kiln_compiler_op_is(op, "arith.floordivsi")) {
    KILN_RETURN_IF_ERROR(value_expr(r, op, mlirOperationGetOperand(op, 0), &a));
    KILN_RETURN_IF_ERROR(value_expr(r, op, mlirOperationGetOperand(op, 1), &b));
    bool u = kiln_compiler_op_is(op, "arith.ceildivui");
    uint32_t q = bin(r, u ? KILN_VMFB_EXPR_DIV_U : KILN_VMFB_EXPR_DIV_S, a, b);
    uint32_t m = bin(r, u ? KILN_VMFB_EXPR_REM_U : KILN_VMFB_EXPR_REM_S, a, b);
    uint32_t inexact = bin(r, KILN_VMFB_EXPR_NE, m, const_expr(r, 0));
    if (u) {
      x = bin(r, KILN_VMFB_EXPR_ADD, q, inexact);
    } else {
      /* The quotient rounds toward zero; move it when the exact one is not there. */
      uint32_t zero = const_expr(r, 0);
      uint32_t opposite = bin(r, KILN_VMFB_EXPR_NE, bin(r, KILN_VMFB_EXPR_LT_S, a, zero),
                              bin(r, KILN_VMFB_EXPR_LT_S, b, zero));
      if (kiln_compiler_op_is(op, "arith.ceildivsi")) {
        x = bin(r, KILN_VMFB_EXPR_ADD, q, bin(r, KILN_VMFB_EXPR_AND, inexact, not_expr(r, opposite)));
      } else {
        x = bin(r, KILN_VMFB_EXPR_SUB, q, bin(r, KILN_VMFB_EXPR_AND, inexact, opposite));
      }
    }
    set_value(r, result, x);
    return NULL;
  }
  if (kiln_compiler_op_is(op, "arith.cmpi")) {
    KILN_RETURN_IF_ERROR(value_expr(r, op, mlirOperationGetOperand(op, 0), &a));
    KILN_RETURN_IF_ERROR(value_expr(r, op, mlirOperationGetOperand(op, 1), &b));
    switch (mlirIntegerAttrGetValueInt(attr(op, "predicate"))) {
      case 0: x = bin(r, KILN_VMFB_EXPR_EQ, a, b); break;
      case 1: x = bin(r, KILN_VMFB_EXPR_NE, a, b); break;
      case 2: x = bin(r, KILN_VMFB_EXPR_LT_S, a, b); break;
      case 3: x = not_expr(r, bin(r, KILN_VMFB_EXPR_LT_S, b, a)); break;
      case 4: x = bin(r, KILN_VMFB_EXPR_LT_S, b, a); break;
      case 5: x = not_expr(r, bin(r, KILN_VMFB_EXPR_LT_S, a, b)); break;
      case 6: x = bin(r, KILN_VMFB_EXPR_LT_U, a, b); break;
      case 7: x = not_expr(r, bin(r, KILN_VMFB_EXPR_LT_U, b, a)); break;
      case 8: x = bin(r, KILN_VMFB_EXPR_LT_U, b, a); break;
      case 9: x = not_expr(r, bin(r, KILN_VMFB_EXPR_LT_U, a, b)); break;
      default: return unsupported(r, op, "has an unknown predicate");
    }
    set_value(r, result, x);
    return NULL;
  }
  if (kiln_compiler_op_is(op, "arith.select")) {
    KILN_RETURN_IF_ERROR(value_expr(r, op, mlirOperationGetOperand(op, 0), &c));
    KILN_RETURN_IF_ERROR(value_expr(r, op, mlirOperationGetOperand(op, 1), &a));
    KILN_RETURN_IF_ERROR(value_expr(r, op, mlirOperationGetOperand(op, 2), &b));
    set_value(r, result, add_expr(r, KILN_VMFB_EXPR_SELECT, c, a, b, 0));
    return NULL;
  }
  if (kiln_compiler_op_is(op, "affine.apply")) {
    MlirAffineMap map = mlirAffineMapAttrGetValue(attr(op, "map"));
    if (mlirAffineMapGetNumResults(map) != 1) return unsupported(r, op, "has more than one result");
    KILN_RETURN_IF_ERROR(
        affine_expr(r, op, mlirAffineMapGetResult(map, 0), mlirAffineMapGetNumDims(map), &x));
    set_value(r, result, x);
    return NULL;
  }
  *handled = false;
  return NULL;
}

static KILN_MUST_USE kiln_status_t dense_bytes(MlirAttribute init, const kiln_vmfb_tensor_type_t *ttp,
                                               kiln_vmfb_buffer_t *out);

/* The bytes of a memref.global's initializer (splats expanded): a CONSTANT
 * buffer, or for a mutable global (a TOSA variable) a VARIABLE buffer naming the
 * plan's variable of that name (added the first time; no initializer is zeros). */
static KILN_MUST_USE kiln_status_t global_bytes(reader_t *r, MlirOperation get, kiln_vmfb_buffer_t *out) {
  MlirAttribute sym = attr(get, "name");
  MlirSymbolTable table = mlirSymbolTableCreate(mlirModuleGetOperation(r->module));
  MlirOperation global = mlirAttributeIsNull(sym)
                             ? (MlirOperation){NULL}
                             : mlirSymbolTableLookup(table, mlirFlatSymbolRefAttrGetValue(sym));
  mlirSymbolTableDestroy(table);
  MlirAttribute init = mlirOperationIsNull(global) ? (MlirAttribute){NULL} : attr(global, "initial_value");
  MlirType type = mlirValueGetType(mlirOperationGetResult(get, 0));
  kiln_vmfb_tensor_type_t tt;
  KILN_RETURN_IF_ERROR(tensor_type(r, type, &tt));
  bool variable = !mlirOperationIsNull(global) && mlirAttributeIsNull(attr(global, "constant"));
  if (variable) {
    MlirStringRef name = mlirFlatSymbolRefAttrGetValue(sym);
    size_t v = 0;
    while (v < r->plan->n_variables && !string_is(name, r->plan->variables[v].name)) v++;
    if (v == r->plan->n_variables) {
      kiln_vmfb_buffer_t bytes = {0};
      if (!mlirAttributeIsNull(init) && mlirAttributeIsADenseElements(init)) {
        KILN_RETURN_IF_ERROR(dense_bytes(init, &tt, &bytes));
      } else {
        bytes.size_bytes = word_round(type_bytes(&tt));
        bytes.data = kiln_calloc(bytes.size_bytes ? bytes.size_bytes : 1, 1);
      }
      r->plan->variables = kiln_realloc(r->plan->variables, (v + 1) * sizeof *r->plan->variables);
      r->plan->variables[v] =
          (kiln_vmfb_variable_t){kiln_strndup(name.data, name.length), bytes.data, bytes.size_bytes};
      r->plan->n_variables++;
    }
    *out = (kiln_vmfb_buffer_t){.kind = KILN_VMFB_BUFFER_VARIABLE,
                                .variable = (uint32_t)v,
                                .size_bytes = r->plan->variables[v].size_bytes};
    return NULL;
  }
  if (mlirAttributeIsNull(init) || !mlirAttributeIsADenseElements(init)) {
    return unsupported(r, get, "reads a global without a dense initializer");
  }
  return dense_bytes(init, &tt, out);
}

/* A dense initializer as IREE lays the type out (word-rounded). */

static KILN_MUST_USE kiln_status_t dense_bytes(MlirAttribute init, const kiln_vmfb_tensor_type_t *ttp,
                                               kiln_vmfb_buffer_t *out) {
  kiln_vmfb_tensor_type_t tt = *ttp;
  uint64_t size = type_bytes(&tt);
  uint64_t count = (uint64_t)mlirElementsAttrGetNumElements(init);
  uint32_t bits = kiln_vmfb_element_bits(tt.element_type);
  bool splat = mlirDenseElementsAttrIsSplat(init);
  uint8_t *data = kiln_calloc(word_round(size) ? word_round(size) : 1, 1);
  const uint8_t *raw = mlirDenseElementsAttrGetRawData(init);
  if (tt.element_type == KILN_VMFB_ELEMENT_BOOL_8) {
    /* MLIR keeps i1 constants a bit each; IREE's BOOL_8 is a byte each. */
    for (uint64_t i = 0; i < size; i++) {
      data[i] = splat ? mlirDenseElementsAttrGetBoolSplatValue(init)
                      : mlirDenseElementsAttrGetBoolValue(init, (intptr_t)i);
    }
  } else if (bits < 8) {
    /* i2/i4: MLIR keeps a byte per element; IREE packs them, low bits first. */
    for (uint64_t i = 0; i < count; i++) {
      uint8_t v = (uint8_t)(raw[splat ? 0 : i] & ((1u << bits) - 1u));
      data[i * bits / 8] |= (uint8_t)(v << (i * bits % 8));
    }
  } else if (splat) {
    uint64_t elem = bits / 8;
    for (uint64_t i = 0; i < size; i += elem) memcpy(data + i, raw, elem);
  } else {
    memcpy(data, raw, size);
  }
  *out =
      (kiln_vmfb_buffer_t){.kind = KILN_VMFB_BUFFER_CONSTANT, .data = data, .size_bytes = word_round(size)};
  return NULL;
}

static KILN_MUST_USE kiln_status_t read_launch(reader_t *r, MlirOperation op) {
  MlirAttribute segments = attr(op, "operandSegmentSizes");
  if (mlirAttributeIsNull(segments) || !mlirAttributeIsADenseI32Array(segments) ||
      mlirDenseArrayGetNumElements(segments) < 3) {
    return unsupported(r, op, "has no operand segments");
  }
  intptr_t n_seg = mlirDenseArrayGetNumElements(segments);
  /* [async deps, grid xyz, block xyz, (cluster xyz), (shared memory), kernel operands, (async object)] */
  intptr_t first = 0;
  for (intptr_t i = 0; i < n_seg - 2; i++) first += mlirDenseI32ArrayGetElement(segments, i);
  intptr_t count = mlirDenseI32ArrayGetElement(segments, n_seg - 2);
  intptr_t grid0 = mlirDenseI32ArrayGetElement(segments, 0);
  kiln_vmfb_step_t step = {.kind = KILN_VMFB_STEP_DISPATCH, .kernel = r->next_kernel++};
  for (int d = 0; d < 3; d++) {
    MlirValue g = mlirOperationGetOperand(op, grid0 + d);
    MlirOperation def = mlirValueIsAOpResult(g) ? mlirOpResultGetOwner(g) : (MlirOperation){NULL};
    MlirAttribute v = mlirOperationIsNull(def) || !kiln_compiler_op_is(def, "arith.constant")
                          ? (MlirAttribute){NULL}
                          : attr(def, "value");
    if (mlirAttributeIsNull(v)) {
      /* Sized by a dynamic dimension: computed per call. */
      KILN_RETURN_IF_ERROR(value_expr(r, op, g, &step.workgroup_exprs[d]));
      continue;
    }
    if (!mlirAttributeIsAInteger(v) || mlirIntegerAttrGetValueInt(v) < 1 ||
        mlirIntegerAttrGetValueInt(v) > UINT32_MAX) {
      return unsupported(r, op, "has a grid size out of range");
    }
    step.workgroups[d] = (uint32_t)mlirIntegerAttrGetValueInt(v);
  }
  kiln_status_t st = NULL;
  for (intptr_t i = first; i < first + count && !st; i++) {
    MlirValue v = mlirOperationGetOperand(op, i);
    MlirType t = mlirValueGetType(v);
    if (mlirTypeIsAMemRef(t)) {
      const view_t *view = find_view(r, v);
      if (!view) {
        st = unsupported(r, op, "passes a buffer kiln could not trace to an argument, global or allocation");
        break;
      }
      uint32_t buffer = view->buffer;
      const kiln_vmfb_buffer_t *root = &r->fn->buffers[buffer];
      step.bindings = kiln_realloc(step.bindings, (step.n_bindings + 1) * sizeof *step.bindings);
      step.bindings[step.n_bindings++] = (kiln_vmfb_binding_t){
          .buffer = buffer, .offset = 0, .length = root->size_bytes, .length_expr = root->size_expr};
      continue;
    }
    MlirOperation def = mlirValueIsAOpResult(v) ? mlirOpResultGetOwner(v) : (MlirOperation){NULL};
    MlirAttribute value = mlirOperationIsNull(def) || !kiln_compiler_op_is(def, "arith.constant")
                              ? (MlirAttribute){NULL}
                              : attr(def, "value");
    if (mlirAttributeIsNull(value)) {
      st = unsupported(r, op, "passes a scalar that is not a constant");
      break;
    }
    uint64_t bits = 0;
    unsigned width = 32;
    if (mlirAttributeIsAInteger(value)) {
      bits = (uint64_t)mlirIntegerAttrGetValueInt(value);
      width = mlirTypeIsAIndex(t) ? 64 : mlirIntegerTypeGetWidth(t);
    } else if (mlirAttributeIsAFloat(value) && mlirTypeIsAF32(t)) {
      float f = (float)mlirFloatAttrGetValueDouble(value);
      uint32_t w;
      memcpy(&w, &f, sizeof w);
      bits = w;
    } else {
      st = unsupported(r, op, "passes a scalar constant of a type other than i32/i64/index/f32");
      break;
    }
    size_t words = width > 32 ? 2 : 1;
    step.constants = kiln_realloc(step.constants, (step.n_constants + words) * sizeof *step.constants);
    step.constants[step.n_constants++] = (uint32_t)bits;
    if (words == 2) step.constants[step.n_constants++] = (uint32_t)(bits >> 32);
  }
  if (st) {
    kiln_free(step.bindings);
    kiln_free(step.constants);
    return st;
  }
  add_step(r->fn, step);
  return NULL;
}

static KILN_MUST_USE kiln_status_t read_op(reader_t *r, MlirOperation op);

/* memref.dim %buffer, %constant: the view's dimension. */
static KILN_MUST_USE kiln_status_t read_dim(reader_t *r, MlirOperation op) {
  const view_t *found = find_view(r, mlirOperationGetOperand(op, 0));
  if (!found) return unsupported(r, op, "reads a dimension of a buffer kiln could not trace");
  view_t v = *found;
  uint32_t d = 0;
  KILN_RETURN_IF_ERROR(value_expr(r, op, mlirOperationGetOperand(op, 1), &d));
  const kiln_vmfb_expr_t *x = &r->fn->exprs[d - 1];
  MlirType t = mlirValueGetType(mlirOperationGetOperand(op, 0));
  if (x->kind != KILN_VMFB_EXPR_CONST || x->value < 0 || x->value >= mlirShapedTypeGetRank(t)) {
    return unsupported(r, op, "reads a dimension whose index is not a constant in range");
  }
  set_value(r, mlirOperationGetResult(op, 0), dim_expr(r, &v, t, (intptr_t)x->value));
  return NULL;
}

/* memref.alloc(%sizes...): a transient buffer whose size is computed per call. */
static KILN_MUST_USE kiln_status_t read_dynamic_alloc(reader_t *r, MlirOperation op) {
  MlirValue result = mlirOperationGetResult(op, 0);
  MlirType t = mlirValueGetType(result);
  kiln_vmfb_tensor_type_t tt;
  KILN_RETURN_IF_ERROR(tensor_type_of(r, t, true, &tt));
  if (!mlirAffineMapIsIdentity(mlirMemRefTypeGetAffineMap(t))) {
    return unsupported(r, op, "allocates a strided buffer of dynamic shape");
  }
  uint32_t dims[KILN_VMFB_MAX_RANK] = {0};
  intptr_t next = 0;
  for (uint32_t d = 0; d < tt.rank; d++) {
    if (tt.dims[d] >= 0) continue;
    if (next >= mlirOperationGetNumOperands(op))
      return unsupported(r, op, "has fewer sizes than dynamic dimensions");
    KILN_RETURN_IF_ERROR(value_expr(r, op, mlirOperationGetOperand(op, next++), &dims[d]));
  }
  uint32_t size = word_round_expr(r, bytes_expr(r, t, dims, tt.element_type));
  uint32_t b = add_buffer(r->fn, (kiln_vmfb_buffer_t){.kind = KILN_VMFB_BUFFER_TRANSIENT, .size_expr = size});
  add_view_dims(r, result, b, 0, dims);
  return NULL;
}

/* A subview, expand_shape or collapse_shape of dynamic shape: the offset from its
 * type (static), the dimensions from its operands or its source's. */
static KILN_MUST_USE kiln_status_t read_dynamic_view(reader_t *r, MlirOperation op) {
  const view_t *found = find_view(r, mlirOperationGetOperand(op, 0));
  if (!found) return unsupported(r, op, "views a buffer kiln could not trace");
  view_t source = *found;
  MlirType src = mlirValueGetType(mlirOperationGetOperand(op, 0));
  MlirValue result = mlirOperationGetResult(op, 0);
  MlirType t = mlirValueGetType(result);
  uint64_t offset = 0;
  if (!static_offset(t, &offset)) return unsupported(r, op, "makes a view of dynamic offset");
  intptr_t rank = mlirShapedTypeGetRank(t);
  if (rank > KILN_VMFB_MAX_RANK) return unsupported(r, op, "makes a view of rank above 8");
  uint32_t dims[KILN_VMFB_MAX_RANK] = {0};
  if (kiln_compiler_op_is(op, "memref.collapse_shape")) {
    MlirAttribute groups = attr(op, "reassociation");
    for (intptr_t d = 0; d < rank && d < mlirArrayAttrGetNumElements(groups); d++) {
      MlirAttribute g = mlirArrayAttrGetElement(groups, d);
      uint32_t n = const_expr(r, 1);
      for (intptr_t k = 0; k < mlirArrayAttrGetNumElements(g); k++) {
        intptr_t sd = (intptr_t)mlirIntegerAttrGetValueInt(mlirArrayAttrGetElement(g, k));
        n = bin(r, KILN_VMFB_EXPR_MUL, n, dim_expr(r, &source, src, sd));
      }
      dims[d] = n;
    }
  } else {
    /* expand_shape: output_shape operands; subview: its size operands (after the
     * source and the offsets). Both name the dynamic dimensions in order. */
    intptr_t next = 1;
    if (kiln_compiler_op_is(op, "memref.subview")) {
      MlirAttribute seg = attr(op, "operandSegmentSizes");
      next = 1 + mlirDenseI32ArrayGetElement(seg, 1);
      if (mlirShapedTypeGetRank(src) != rank) return unsupported(r, op, "drops dimensions of a dynamic view");
    }
    for (intptr_t d = 0; d < rank; d++) {
      if (!mlirShapedTypeIsDynamicSize(mlirShapedTypeGetDimSize(t, d))) continue;
      if (next >= mlirOperationGetNumOperands(op))
        return unsupported(r, op, "has fewer sizes than dynamic dimensions");
      KILN_RETURN_IF_ERROR(value_expr(r, op, mlirOperationGetOperand(op, next++), &dims[d]));
    }
  }
  uint32_t elem = 0;
  KILN_RETURN_IF_ERROR(element_type(r, mlirShapedTypeGetElementType(t), &elem));
  uint64_t bytes = 0;
  (void)kiln_vmfb_packed_bytes(elem, offset, &bytes);
  add_view_dims(r, result, source.buffer, bytes, dims);
  return NULL;
}

/* arith.select %c, %a, %b on buffers: a SELECT buffer (one of two, per call). */
static KILN_MUST_USE kiln_status_t read_buffer_select(reader_t *r, MlirOperation op) {
  uint32_t cond = 0;
  KILN_RETURN_IF_ERROR(value_expr(r, op, mlirOperationGetOperand(op, 0), &cond));
  const view_t *fa = find_view(r, mlirOperationGetOperand(op, 1));
  const view_t *fb = find_view(r, mlirOperationGetOperand(op, 2));
  if (!fa || !fb) return unsupported(r, op, "selects a buffer kiln could not trace");
  view_t a = *fa, b = *fb;
  if (a.offset != b.offset) return unsupported(r, op, "selects between views at different offsets");
  MlirType t = mlirValueGetType(mlirOperationGetResult(op, 0));
  MlirType ta = mlirValueGetType(mlirOperationGetOperand(op, 1));
  MlirType tb = mlirValueGetType(mlirOperationGetOperand(op, 2));
  uint32_t dims[KILN_VMFB_MAX_RANK] = {0};
  for (intptr_t d = 0; d < mlirShapedTypeGetRank(t) && d < KILN_VMFB_MAX_RANK; d++) {
    if (!mlirShapedTypeIsDynamicSize(mlirShapedTypeGetDimSize(t, d))) continue;
    dims[d] = add_expr(r, KILN_VMFB_EXPR_SELECT, cond, dim_expr(r, &a, ta, d), dim_expr(r, &b, tb, d), 0);
  }
  uint32_t size = add_expr(r, KILN_VMFB_EXPR_SELECT, cond, buffer_size_expr(r, a.buffer),
                           buffer_size_expr(r, b.buffer), 0);
  uint32_t sel = add_buffer(r->fn, (kiln_vmfb_buffer_t){.kind = KILN_VMFB_BUFFER_SELECT,
                                                        .size_expr = size,
                                                        .select_cond = cond,
                                                        .select_a = a.buffer,
                                                        .select_b = b.buffer});
  add_view_dims(r, mlirOperationGetResult(op, 0), sel, a.offset, dims);
  return NULL;
}

/* memref.store %word, %args[%slot]: a word of a kernel argument buffer. */
static KILN_MUST_USE kiln_status_t read_args_store(reader_t *r, MlirOperation op) {
  const view_t *v = find_view(r, mlirOperationGetOperand(op, 1));
  if (!v || r->fn->buffers[v->buffer].kind != KILN_VMFB_BUFFER_ARGS || mlirOperationGetNumOperands(op) != 3) {
    return unsupported(r, op, "stores into a buffer on the host");
  }
  uint32_t value = 0, slot = 0;
  KILN_RETURN_IF_ERROR(value_expr(r, op, mlirOperationGetOperand(op, 0), &value));
  KILN_RETURN_IF_ERROR(value_expr(r, op, mlirOperationGetOperand(op, 2), &slot));
  const kiln_vmfb_expr_t *x = &r->fn->exprs[slot - 1];
  kiln_vmfb_buffer_t *args = &r->fn->buffers[v->buffer];
  if (x->kind != KILN_VMFB_EXPR_CONST || x->value < 0 || (uint64_t)x->value >= args->n_words) {
    return unsupported(r, op, "stores a kernel argument at an index that is not a constant in range");
  }
  args->words[x->value] = value;
  return NULL;
}

static KILN_MUST_USE kiln_status_t read_block(reader_t *r, MlirBlock block) {
  for (MlirOperation op = mlirBlockGetFirstOperation(block); !mlirOperationIsNull(op);
       op = mlirOperationGetNextInBlock(op)) {
    KILN_RETURN_IF_ERROR(read_op(r, op));
  }
  return NULL;
}

/* memref.load %buf[constant indices] : i1 on the host: a condition the host
 * program reads back from the device. */
static KILN_MUST_USE kiln_status_t read_load(reader_t *r, MlirOperation op) {
  MlirValue src = mlirOperationGetOperand(op, 0);
  MlirType t = mlirValueGetType(src);
  const view_t *view = find_view(r, src);
  MlirValue result = mlirOperationGetResult(op, 0);
  MlirType elem = mlirValueGetType(result);
  if (!view) return unsupported(r, op, "reads a buffer kiln could not trace");
  if (!mlirTypeIsAInteger(elem) || mlirIntegerTypeGetWidth(elem) != 1) {
    return unsupported(r, op, "reads a value other than an i1 condition back from the device");
  }
  intptr_t rank = mlirShapedTypeGetRank(t);
  int64_t *strides = kiln_calloc(rank ? (size_t)rank : 1, sizeof *strides);
  int64_t offset = 0;
  bool ok = mlirLogicalResultIsSuccess(mlirMemRefTypeGetStridesAndOffset(t, strides, &offset));
  int64_t element = 0;
  for (intptr_t d = 0; ok && d < rank; d++) {
    int64_t index = 0;
    MlirValue v = mlirOperationGetOperand(op, 1 + d);
    MlirOperation def = mlirValueIsAOpResult(v) ? mlirOpResultGetOwner(v) : (MlirOperation){NULL};
    MlirAttribute a = mlirOperationIsNull(def) || !kiln_compiler_op_is(def, "arith.constant")
                          ? (MlirAttribute){NULL}
                          : attr(def, "value");
    ok = !mlirAttributeIsNull(a) && mlirAttributeIsAInteger(a) &&
         !mlirShapedTypeIsDynamicStrideOrOffset(strides[d]);
    if (ok) index = mlirIntegerAttrGetValueInt(a);
    element += index * (ok ? strides[d] : 0);
  }
  kiln_free(strides);
  if (!ok) return unsupported(r, op, "reads an element at an index that is not a constant");
  /* The view's offset already counts the type's static offset (read_op). */
  r->scalars = kiln_realloc(r->scalars, (r->n_scalars + 1) * sizeof *r->scalars);
  r->scalars[r->n_scalars++] = (scalar_t){result, view->buffer, view->offset + (uint64_t)element, 1};
  return NULL;
}

static const scalar_t *find_scalar(const reader_t *r, MlirValue v) {
  for (size_t i = 0; i < r->n_scalars; i++) {
    if (mlirValueEqual(r->scalars[i].value, v)) return &r->scalars[i];
  }
  return NULL;
}

/* A BRANCH on condition `cond` (of `op`); its target is patched later. */
static KILN_MUST_USE kiln_status_t add_branch(reader_t *r, MlirOperation op, MlirValue cond,
                                              size_t *out_index) {
  const scalar_t *c = find_scalar(r, cond);
  *out_index = r->fn->n_steps;
  if (!c) {
    /* A condition on sizes (a dynamic broadcast's "is this dimension 1?"). */
    uint32_t expr = 0;
    KILN_RETURN_IF_ERROR(value_expr(r, op, cond, &expr));
    add_step(r->fn, (kiln_vmfb_step_t){.kind = KILN_VMFB_STEP_BRANCH, .cond_expr = expr});
    return NULL;
  }
  add_step(r->fn,
           (kiln_vmfb_step_t){
               .kind = KILN_VMFB_STEP_BRANCH, .src = c->buffer, .src_offset = c->offset, .length = c->bytes});
  return NULL;
}

/* The only block of region `i` of op, or null. */
static MlirBlock region_block(MlirOperation op, intptr_t i) {
  return mlirRegionGetFirstBlock(mlirOperationGetRegion(op, i));
}

/* scf.if %c { A } else { B }:  BRANCH %c -> else; A; JUMP -> end; else: B; end: */
static KILN_MUST_USE kiln_status_t read_if(reader_t *r, MlirOperation op) {
  if (mlirOperationGetNumResults(op) != 0) {
    return unsupported(r, op, "yields values kiln could not give fixed buffers (scalars or dynamic shapes)");
  }
  size_t branch = 0;
  KILN_RETURN_IF_ERROR(add_branch(r, op, mlirOperationGetOperand(op, 0), &branch));
  KILN_RETURN_IF_ERROR(read_block(r, region_block(op, 0)));
  MlirBlock other = region_block(op, 1);
  if (!mlirBlockIsNull(other)) {
    size_t jump = r->fn->n_steps;
    add_step(r->fn, (kiln_vmfb_step_t){.kind = KILN_VMFB_STEP_JUMP});
    r->fn->steps[branch].target = (uint32_t)r->fn->n_steps;
    KILN_RETURN_IF_ERROR(read_block(r, other));
    r->fn->steps[jump].target = (uint32_t)r->fn->n_steps;
  } else {
    r->fn->steps[branch].target = (uint32_t)r->fn->n_steps;
  }
  return NULL;
}

/* scf.while { C; condition(%go) } do { D }:  head: C; BRANCH %go -> end; D; JUMP -> head; end: */
static KILN_MUST_USE kiln_status_t read_while(reader_t *r, MlirOperation op) {
  MlirBlock before = region_block(op, 0);
  MlirBlock after = region_block(op, 1);
  if (mlirOperationGetNumResults(op) != 0 || mlirOperationGetNumOperands(op) != 0 ||
      mlirBlockIsNull(before) || mlirBlockIsNull(after)) {
    return unsupported(r, op, "carries values kiln could not give fixed buffers (scalars or dynamic shapes)");
  }
  uint32_t head = (uint32_t)r->fn->n_steps;
  size_t branch = 0;
  for (MlirOperation o = mlirBlockGetFirstOperation(before); !mlirOperationIsNull(o);
       o = mlirOperationGetNextInBlock(o)) {
    if (kiln_compiler_op_is(o, "scf.condition")) {
      if (mlirOperationGetNumOperands(o) != 1) return unsupported(r, o, "forwards values");
      KILN_RETURN_IF_ERROR(add_branch(r, o, mlirOperationGetOperand(o, 0), &branch));
      break;
    }
    KILN_RETURN_IF_ERROR(read_op(r, o));
  }
  KILN_RETURN_IF_ERROR(read_block(r, after));
  add_step(r->fn, (kiln_vmfb_step_t){.kind = KILN_VMFB_STEP_JUMP, .target = head});
  r->fn->steps[branch].target = (uint32_t)r->fn->n_steps;
  return NULL;
}

static KILN_MUST_USE kiln_status_t read_op(reader_t *r, MlirOperation op) {
  kiln_vmfb_function_t *fn = r->fn;
  if (kiln_compiler_op_is(op, "arith.constant") || kiln_compiler_op_is(op, "memref.dealloc")) return NULL;
  if (kiln_compiler_op_is(op, "arith.select") &&
      mlirTypeIsAMemRef(mlirValueGetType(mlirOperationGetResult(op, 0)))) {
    return read_buffer_select(r, op);
  }
  bool handled = false;
  KILN_RETURN_IF_ERROR(read_scalar_op(r, op, &handled));
  if (handled) return NULL;
  if (kiln_compiler_op_is(op, "memref.dim")) return read_dim(r, op);
  if (kiln_compiler_op_is(op, "memref.store")) return read_args_store(r, op);
  if (kiln_compiler_op_is(op, "memref.load")) return read_load(r, op);
  if (kiln_compiler_op_is(op, "scf.if")) return read_if(r, op);
  if (kiln_compiler_op_is(op, "scf.while")) return read_while(r, op);
  if (kiln_compiler_op_is(op, "scf.yield")) {
    return mlirOperationGetNumOperands(op) ? unsupported(r, op, "yields values") : NULL;
  }
  if (kiln_compiler_op_is(op, "memref.alloc") || kiln_compiler_op_is(op, "memref.alloca")) {
    MlirType t = mlirValueGetType(mlirOperationGetResult(op, 0));
    kiln_vmfb_tensor_type_t tt;
    if (!mlirAttributeIsNull(attr(op, "kiln.args"))) {
      KILN_RETURN_IF_ERROR(tensor_type(r, t, &tt));
      size_t words = (size_t)tt.dims[0];
      uint32_t b =
          add_buffer(fn, (kiln_vmfb_buffer_t){.kind = KILN_VMFB_BUFFER_ARGS,
                                              .size_bytes = 4 * words,
                                              .words = kiln_calloc(words ? words : 1, sizeof(uint32_t)),
                                              .n_words = words});
      add_view(r, mlirOperationGetResult(op, 0), b, 0);
      return NULL;
    }
    if (mlirOperationGetNumOperands(op) != 0) return read_dynamic_alloc(r, op);
    KILN_RETURN_IF_ERROR(tensor_type(r, t, &tt));
    uint32_t b = add_buffer(fn, (kiln_vmfb_buffer_t){.kind = KILN_VMFB_BUFFER_TRANSIENT,
                                                     .size_bytes = word_round(type_bytes(&tt))});
    add_view(r, mlirOperationGetResult(op, 0), b, 0);
    return NULL;
  }
  if (kiln_compiler_op_is(op, "memref.get_global")) {
    kiln_vmfb_buffer_t buffer;
    KILN_RETURN_IF_ERROR(global_bytes(r, op, &buffer));
    add_view(r, mlirOperationGetResult(op, 0), add_buffer(fn, buffer), 0);
    return NULL;
  }
  if (kiln_compiler_op_is(op, "memref.cast")) {
    /* A cast moves nothing: the view of its source (even when the cast's type
     * erases the static offset, as a fixed buffer's cast does). */
    const view_t *found = find_view(r, mlirOperationGetOperand(op, 0));
    if (!found) return unsupported(r, op, "views a buffer kiln could not trace");
    view_t source = *found;
    MlirType from = mlirValueGetType(mlirOperationGetOperand(op, 0));
    MlirType to = mlirValueGetType(mlirOperationGetResult(op, 0));
    uint32_t dims[KILN_VMFB_MAX_RANK] = {0};
    for (intptr_t d = 0; d < mlirShapedTypeGetRank(to) && d < KILN_VMFB_MAX_RANK; d++) {
      if (mlirShapedTypeIsDynamicSize(mlirShapedTypeGetDimSize(to, d)))
        dims[d] = dim_expr(r, &source, from, d);
    }
    add_view_dims(r, mlirOperationGetResult(op, 0), source.buffer, source.offset, dims);
    return NULL;
  }
  if ((kiln_compiler_op_is(op, "memref.subview") || kiln_compiler_op_is(op, "memref.expand_shape") ||
       kiln_compiler_op_is(op, "memref.collapse_shape")) &&
      !mlirShapedTypeHasStaticShape(mlirValueGetType(mlirOperationGetResult(op, 0)))) {
    return read_dynamic_view(r, op);
  }
  if (kiln_compiler_op_is(op, "memref.subview") || kiln_compiler_op_is(op, "memref.expand_shape") ||
      kiln_compiler_op_is(op, "memref.collapse_shape") ||
      kiln_compiler_op_is(op, "memref.reinterpret_cast")) {
    const view_t *source = find_view(r, mlirOperationGetOperand(op, 0));
    MlirType t = mlirValueGetType(mlirOperationGetResult(op, 0));
    uint64_t offset = 0;
    if (!source) return unsupported(r, op, "views a buffer kiln could not trace");
    if (!mlirTypeIsAMemRef(t) || !mlirShapedTypeHasStaticShape(t) || !static_offset(t, &offset)) {
      return unsupported(r, op, "makes a view of dynamic shape or offset");
    }
    uint32_t elem = 0;
    KILN_RETURN_IF_ERROR(element_type(r, mlirShapedTypeGetElementType(t), &elem));
    /* The type's offset is from the root's start (views compose their offsets). */
    uint64_t bytes = 0;
    (void)kiln_vmfb_packed_bytes(elem, offset, &bytes);
    add_view(r, mlirOperationGetResult(op, 0), source->buffer, bytes);
    return NULL;
  }
  if (kiln_compiler_op_is(op, "bufferization.clone")) {
    /* The deallocation pipeline clones a buffer the function does not own (an
     * argument, a constant) before returning it or writing into it: a new
     * buffer and one copy step. */
    const view_t *source = find_view(r, mlirOperationGetOperand(op, 0));
    MlirType src_type = mlirValueGetType(mlirOperationGetOperand(op, 0));
    MlirType t = mlirValueGetType(mlirOperationGetResult(op, 0));
    if (!source) return unsupported(r, op, "clones a buffer kiln could not trace");
    if (!contiguous(src_type)) return unsupported(r, op, "clones a strided view");
    kiln_vmfb_tensor_type_t tt;
    KILN_RETURN_IF_ERROR(tensor_type(r, t, &tt));
    uint64_t bytes = type_bytes(&tt);
    uint32_t b = add_buffer(
        fn, (kiln_vmfb_buffer_t){.kind = KILN_VMFB_BUFFER_TRANSIENT, .size_bytes = word_round(bytes)});
    add_step(fn, (kiln_vmfb_step_t){.kind = KILN_VMFB_STEP_COPY,
                                    .src = source->buffer,
                                    .src_offset = source->offset,
                                    .dst = b,
                                    .length = bytes});
    add_view(r, mlirOperationGetResult(op, 0), b, 0);
    return NULL;
  }
  if (kiln_compiler_op_is(op, "gpu.launch_func")) return read_launch(r, op);
  if (kiln_compiler_op_is(op, "func.return")) {
    intptr_t n = mlirOperationGetNumOperands(op);
    fn->results = kiln_calloc(n ? (size_t)n : 1, sizeof *fn->results);
    for (intptr_t i = 0; i < n; i++) {
      MlirValue v = mlirOperationGetOperand(op, i);
      const view_t *found = find_view(r, v);
      if (!found) return unsupported(r, op, "returns a value that is not a traced buffer");
      view_t view_copy = *found;
      const view_t *view = &view_copy;
      kiln_vmfb_result_t *res = &fn->results[fn->n_results];
      MlirType t = mlirValueGetType(v);
      KILN_RETURN_IF_ERROR(tensor_type_of(r, t, true, &res->type));
      res->buffer = view->buffer;
      res->offset = view->offset;
      if (!mlirShapedTypeHasStaticShape(t)) {
        for (uint32_t d = 0; d < res->type.rank; d++) {
          if (res->type.dims[d] < 0) res->dim_exprs[d] = view->dims[d];
        }
        res->size_expr = bytes_expr(r, t, view->dims, res->type.element_type);
        fn->n_results++;
        continue;
      }
      if (fn->buffers[view->buffer].kind == KILN_VMFB_BUFFER_CONSTANT ||
          fn->buffers[view->buffer].kind == KILN_VMFB_BUFFER_VARIABLE) {
        /* A constant (or a view of one) is returned as a copy: the caller owns
         * its results and may write them; the constant serves every call. */
        uint64_t bytes = type_bytes(&res->type);
        uint32_t copy = add_buffer(
            fn, (kiln_vmfb_buffer_t){.kind = KILN_VMFB_BUFFER_TRANSIENT, .size_bytes = word_round(bytes)});
        add_step(fn, (kiln_vmfb_step_t){.kind = KILN_VMFB_STEP_COPY,
                                        .src = view->buffer,
                                        .src_offset = view->offset,
                                        .dst = copy,
                                        .length = bytes});
        res->buffer = copy;
        res->offset = 0;
      }
      fn->n_results++;
    }
    return NULL;
  }
  return unsupported(r, op, "is not a launch, allocation, view or constant");
}

static KILN_MUST_USE kiln_status_t read_function(reader_t *r, MlirOperation func) {
  kiln_vmfb_function_t *fn = r->fn;
  MlirAttribute sym = attr(func, "sym_name");
  MlirStringRef s = mlirStringAttrGetValue(sym);
  fn->name = kiln_strndup(s.data, s.length);
  MlirRegion region = mlirOperationGetRegion(func, 0);
  MlirBlock entry = mlirRegionGetFirstBlock(region);
  if (!mlirBlockIsNull(mlirBlockGetNextInRegion(entry))) {
    return KILN_STATUS(KILN_STATUS_UNIMPLEMENTED,
                       "%s: function %s has control flow on the host (more than one block); kiln's "
                       "VMFB host program records straight-line dispatches only",
                       r->name, fn->name);
  }
  intptr_t n_args = mlirBlockGetNumArguments(entry);
  fn->inputs = kiln_calloc(n_args ? (size_t)n_args : 1, sizeof *fn->inputs);
  for (intptr_t i = 0; i < n_args; i++) {
    MlirValue arg = mlirBlockGetArgument(entry, i);
    MlirType t = mlirValueGetType(arg);
    KILN_RETURN_IF_ERROR(tensor_type_of(r, t, true, &fn->inputs[i]));
    fn->n_inputs++;
    if (!mlirShapedTypeHasStaticShape(t)) {
      /* Dynamic: the dimensions are read from the buffer view per call; the
       * kernels bind a word-rounded copy when the element is narrower than a word. */
      uint32_t dims[KILN_VMFB_MAX_RANK] = {0};
      for (uint32_t d = 0; d < fn->inputs[i].rank; d++) {
        if (fn->inputs[i].dims[d] < 0) dims[d] = add_expr(r, KILN_VMFB_EXPR_INPUT_DIM, (uint32_t)i, d, 0, 0);
      }
      uint32_t bytes = bytes_expr(r, t, dims, fn->inputs[i].element_type);
      uint32_t b = add_buffer(
          fn, (kiln_vmfb_buffer_t){.kind = KILN_VMFB_BUFFER_INPUT, .input = (uint32_t)i, .size_expr = bytes});
      if (kiln_vmfb_element_bits(fn->inputs[i].element_type) < 32) {
        uint32_t padded = add_buffer(fn, (kiln_vmfb_buffer_t){.kind = KILN_VMFB_BUFFER_TRANSIENT,
                                                              .size_expr = word_round_expr(r, bytes)});
        add_step(fn, (kiln_vmfb_step_t){
                         .kind = KILN_VMFB_STEP_COPY, .src = b, .dst = padded, .length_expr = bytes});
        b = padded;
      }
      add_view_dims(r, arg, b, 0, dims);
      continue;
    }
    uint64_t bytes = type_bytes(&fn->inputs[i]);
    uint32_t b = add_buffer(
        fn, (kiln_vmfb_buffer_t){.kind = KILN_VMFB_BUFFER_INPUT, .input = (uint32_t)i, .size_bytes = bytes});
    if (bytes % 4 != 0) {
      uint32_t padded = add_buffer(
          fn, (kiln_vmfb_buffer_t){.kind = KILN_VMFB_BUFFER_TRANSIENT, .size_bytes = word_round(bytes)});
      add_step(fn, (kiln_vmfb_step_t){.kind = KILN_VMFB_STEP_COPY, .src = b, .dst = padded, .length = bytes});
      b = padded;
    }
    add_view(r, arg, b, 0);
  }
  return read_block(r, entry);
}

kiln_status_t kiln_compiler_host_plan_read(MlirModule module, const char *name, kiln_vmfb_plan_t *out_plan) {
  memset(out_plan, 0, sizeof *out_plan);
  kiln_vmfb_plan_t plan = {0};
  reader_t r = {.module = module, .name = name, .plan = &plan};
  kiln_status_t st = NULL;
  MlirBlock body = mlirModuleGetBody(module);
  for (MlirOperation op = mlirBlockGetFirstOperation(body); !mlirOperationIsNull(op) && !st;
       op = mlirOperationGetNextInBlock(op)) {
    if (!kiln_compiler_op_is(op, "func.func") || mlirOperationGetNumRegions(op) < 1 ||
        mlirBlockIsNull(mlirRegionGetFirstBlock(mlirOperationGetRegion(op, 0)))) {
      continue;
    }
    /* Public functions are entry points; no sym_visibility means public, and
     * JAX and StableHLO exports spell it out (func.func public @main). */
    MlirAttribute visibility = attr(op, "sym_visibility");
    if (!mlirAttributeIsNull(visibility) &&
        !(mlirAttributeIsAString(visibility) && string_is(mlirStringAttrGetValue(visibility), "public"))) {
      continue;
    }
    plan.functions = kiln_realloc(plan.functions, (plan.n_functions + 1) * sizeof *plan.functions);
    memset(&plan.functions[plan.n_functions], 0, sizeof *plan.functions);
    r.fn = &plan.functions[plan.n_functions++];
    r.n_views = 0;
    r.n_scalars = 0;
    r.n_values = 0;
    st = read_function(&r, op);
  }
  kiln_free(r.views);
  kiln_free(r.scalars);
  kiln_free(r.values);
  if (!st && plan.n_functions == 0) {
    st = KILN_STATUS(KILN_STATUS_INVALID_ARGUMENT, "%s: no public function to export", name);
  }
  if (st) {
    kiln_vmfb_plan_deinit(&plan);
    return st;
  }
  *out_plan = plan;
  return NULL;
}

/* ---- parallel loops as rank 3 ---- */

static MlirWalkResult collect_outer_parallel(MlirOperation op, void *user) {
  if (!kiln_compiler_op_is(op, "scf.parallel")) return MlirWalkResultAdvance;
  for (MlirOperation p = mlirOperationGetParentOperation(op); !mlirOperationIsNull(p);
       p = mlirOperationGetParentOperation(p)) {
    if (kiln_compiler_op_is(p, "scf.parallel") || kiln_compiler_op_is(p, "gpu.launch"))
      return MlirWalkResultAdvance;
  }
  kiln_compiler_ops_push(user, op);
  return MlirWalkResultAdvance;
}

/* An scf.parallel of rank `rank` over (lbs, ubs, steps), inserted before
 * `before`, its body an empty block of `rank` index arguments. */
static MlirOperation parallel_n(MlirContext ctx, MlirOperation before, intptr_t rank, const MlirValue *lbs,
                                const MlirValue *ubs, const MlirValue *steps) {
  enum { MAX_RANK = 16 };
  MlirLocation loc = mlirOperationGetLocation(before);
  MlirType types[MAX_RANK];
  MlirLocation locs[MAX_RANK];
  MlirValue operands[3 * MAX_RANK];
  for (intptr_t d = 0; d < rank; d++) {
    types[d] = mlirIndexTypeGet(ctx);
    locs[d] = loc;
    operands[d] = lbs[d], operands[rank + d] = ubs[d], operands[2 * rank + d] = steps[d];
  }
  MlirRegion region = mlirRegionCreate();
  mlirRegionAppendOwnedBlock(region, mlirBlockCreate(rank, types, locs));
  int32_t segments[4] = {(int32_t)rank, (int32_t)rank, (int32_t)rank, 0};
  MlirNamedAttribute seg =
      kiln_compiler_named_attr(ctx, "operandSegmentSizes", mlirDenseI32ArrayGet(ctx, 4, segments));
  MlirOperationState st = mlirOperationStateGet(mlirStringRefCreateFromCString("scf.parallel"), loc);
  mlirOperationStateAddOperands(&st, 3 * rank, operands);
  mlirOperationStateAddAttributes(&st, 1, &seg);
  mlirOperationStateAddOwnedRegions(&st, 1, &region);
  MlirOperation op = mlirOperationCreate(&st);
  mlirBlockInsertOwnedOperationBefore(mlirOperationGetBlock(before), before, op);
  return op;
}

static MlirOperation parallel3(MlirContext ctx, MlirOperation before, const MlirValue lbs[3],
                               const MlirValue ubs[3], const MlirValue steps[3]) {
  return parallel_n(ctx, before, 3, lbs, ubs, steps);
}

/* Moves every op of `from` (its terminator too when `with_terminator`) to the end
 * of `to`, or before `before` when it is not null. */
static void move_ops(MlirBlock from, MlirBlock to, MlirOperation before, bool with_terminator) {
  for (MlirOperation op = mlirBlockGetFirstOperation(from); !mlirOperationIsNull(op);) {
    MlirOperation next = mlirOperationGetNextInBlock(op);
    if (!with_terminator && mlirOperationIsNull(next)) break;
    mlirOperationRemoveFromParent(op);
    if (mlirOperationIsNull(before)) {
      mlirBlockAppendOwnedOperation(to, op);
    } else {
      mlirBlockInsertOwnedOperationBefore(to, before, op);
    }
    op = next;
  }
}

/* Whether dimension `d` of a parallel loop of rank `rank` runs exactly once
 * from a constant bound. */
static bool unit_dimension(MlirOperation par, intptr_t rank, intptr_t d) {
  int64_t lb, ub, step;
  return kiln_compiler_int_constant_value(mlirOperationGetOperand(par, d), &lb) &&
         kiln_compiler_int_constant_value(mlirOperationGetOperand(par, rank + d), &ub) &&
         kiln_compiler_int_constant_value(mlirOperationGetOperand(par, 2 * rank + d), &step) && step > 0 &&
         ub > lb && ub - lb <= step;
}

/* A loop of rank above 3 without its leading dimensions of one iteration (a
 * batch of 1), down to rank 3: the tile then falls on the dimensions that have
 * work, the contiguous one last. */
/* A loop above rank 3 without its dimensions that run once (leading ones
 * first, then any other), down to rank 3 at the least: a depthwise conv's (1, oh,
 * ow, c, 1) is (oh, ow, c), so its channels, not a unit dimension, run along
 * thread x. Returns the new loop, or `par` unchanged. */
static MlirOperation drop_unit_dimensions(MlirOperation par, intptr_t rank) {
  if (rank > 16) return par;
  bool drop[16] = {false};
  intptr_t kept = rank;
  for (intptr_t d = 0; d < rank && kept > 3; d++) {
    if (unit_dimension(par, rank, d)) drop[d] = true, kept--;
  }
  if (kept == rank) return par;
  MlirContext ctx = mlirOperationGetContext(par);
  MlirValue lbs[16], ubs[16], steps[16];
  intptr_t n = 0;
  for (intptr_t d = 0; d < rank; d++) {
    if (drop[d]) continue;
    lbs[n] = mlirOperationGetOperand(par, d);
    ubs[n] = mlirOperationGetOperand(par, rank + d);
    steps[n++] = mlirOperationGetOperand(par, 2 * rank + d);
  }
  MlirOperation np = parallel_n(ctx, par, kept, lbs, ubs, steps);
  MlirBlock body = region_block(par, 0), nb = region_block(np, 0);
  for (intptr_t d = 0, k = 0; d < rank; d++) {
    MlirValue to = drop[d] ? mlirOperationGetOperand(par, d) : mlirBlockGetArgument(nb, k++);
    mlirValueReplaceAllUsesOfWith(mlirBlockGetArgument(body, d), to);
  }
  move_ops(body, nb, (MlirOperation){NULL}, true);
  mlirOperationDestroy(par);
  return np;
}

/* The trip count of dimension `d` when its bounds and step are constants, else 0. */
static int64_t static_trips(MlirOperation par, intptr_t rank, intptr_t d, int64_t *out_lb,
                            int64_t *out_step) {
  int64_t lb, ub, step;
  if (!kiln_compiler_int_constant_value(mlirOperationGetOperand(par, d), &lb) ||
      !kiln_compiler_int_constant_value(mlirOperationGetOperand(par, rank + d), &ub) ||
      !kiln_compiler_int_constant_value(mlirOperationGetOperand(par, 2 * rank + d), &step) || step <= 0 ||
      ub <= lb) {
    return 0;
  }
  *out_lb = lb, *out_step = step;
  return (ub - lb + step - 1) / step;
}

/* A loop above rank 3 with its first two dimensions one (static ones only): (n,
 * oh, ow, c) becomes (n*oh, ow, c), so the 1x4x32 tile covers its last three
 * dimensions like a batch-1 loop's (before, the pass mapped the first three and
 * each invocation looped over the contiguous last one serially, its lanes reading
 * a row apart). The old indices are i / trips1 and i % trips1, scaled. Returns
 * the new loop, or `par` unchanged. */
static MlirOperation collapse_leading_dimensions(MlirContext ctx, MlirOperation par, intptr_t rank) {
  int64_t lb0, st0, lb1, st1;
  int64_t t0 = static_trips(par, rank, 0, &lb0, &st0), t1 = static_trips(par, rank, 1, &lb1, &st1);
  if (rank <= 3 || rank > 16 || !t0 || !t1 || t0 > INT32_MAX / t1) return par;
  MlirType index = mlirIndexTypeGet(ctx);
  MlirValue lbs[16], ubs[16], steps[16];
  lbs[0] = kiln_compiler_int_const_before(ctx, par, index, 0);
  ubs[0] = kiln_compiler_int_const_before(ctx, par, index, t0 * t1);
  steps[0] = kiln_compiler_int_const_before(ctx, par, index, 1);
  for (intptr_t d = 2; d < rank; d++) {
    lbs[d - 1] = mlirOperationGetOperand(par, d);
    ubs[d - 1] = mlirOperationGetOperand(par, rank + d);
    steps[d - 1] = mlirOperationGetOperand(par, 2 * rank + d);
  }
  MlirOperation np = parallel_n(ctx, par, rank - 1, lbs, ubs, steps);
  MlirBlock body = region_block(par, 0), nb = region_block(np, 0);
  MlirOperationState rs =
      mlirOperationStateGet(mlirStringRefCreateFromCString("scf.reduce"), mlirOperationGetLocation(par));
  MlirOperation term = mlirOperationCreate(&rs);
  mlirBlockAppendOwnedOperation(nb, term);
  MlirValue i = mlirBlockGetArgument(nb, 0);
  MlirValue t1v = kiln_compiler_int_const_before(ctx, term, index, t1);
  MlirValue qr_ops[2] = {i, t1v};
  MlirValue q = kiln_compiler_build_before("arith.divui", term, qr_ops, 2, index);
  MlirValue r = kiln_compiler_build_before("arith.remui", term, qr_ops, 2, index);
  MlirValue parts[2] = {q, r};
  int64_t lb[2] = {lb0, lb1}, st[2] = {st0, st1};
  for (int d = 0; d < 2; d++) {
    MlirValue v = parts[d];
    if (st[d] != 1) {
      MlirValue ops[2] = {v, kiln_compiler_int_const_before(ctx, term, index, st[d])};
      v = kiln_compiler_build_before("arith.muli", term, ops, 2, index);
    }
    if (lb[d] != 0) {
      MlirValue ops[2] = {v, kiln_compiler_int_const_before(ctx, term, index, lb[d])};
      v = kiln_compiler_build_before("arith.addi", term, ops, 2, index);
    }
    mlirValueReplaceAllUsesOfWith(mlirBlockGetArgument(body, d), v);
  }
  for (intptr_t d = 2; d < rank; d++) {
    mlirValueReplaceAllUsesOfWith(mlirBlockGetArgument(body, d), mlirBlockGetArgument(nb, d - 1));
  }
  move_ops(body, nb, term, false);
  mlirOperationDestroy(par);
  return np;
}

static void reshape_parallel(MlirContext ctx, MlirOperation par) {
  if (mlirOperationGetNumResults(par) != 0) return;
  intptr_t rank = mlirOperationGetNumOperands(par) / 3;
  if (mlirOperationGetNumOperands(par) != 3 * rank) return;
  if (rank > 3) {
    par = drop_unit_dimensions(par, rank);
    for (rank = mlirOperationGetNumOperands(par) / 3; rank > 3; rank--) {
      MlirOperation np = collapse_leading_dimensions(ctx, par, rank);
      if (mlirOperationEqual(np, par)) break;
      par = np;
    }
    return;
  }
  if (rank != 1 && rank != 2) return;
  MlirType index = mlirIndexTypeGet(ctx);
  MlirValue zero = kiln_compiler_int_const_before(ctx, par, index, 0);
  MlirValue one = kiln_compiler_int_const_before(ctx, par, index, 1);
  MlirBlock body = region_block(par, 0);
  if (rank == 2) {
    MlirValue lbs[3] = {zero, mlirOperationGetOperand(par, 0), mlirOperationGetOperand(par, 1)};
    MlirValue ubs[3] = {one, mlirOperationGetOperand(par, 2), mlirOperationGetOperand(par, 3)};
    MlirValue steps[3] = {one, mlirOperationGetOperand(par, 4), mlirOperationGetOperand(par, 5)};
    MlirOperation np = parallel3(ctx, par, lbs, ubs, steps);
    MlirBlock nb = region_block(np, 0);
    for (intptr_t d = 0; d < 2; d++) {
      mlirValueReplaceAllUsesOfWith(mlirBlockGetArgument(body, d), mlirBlockGetArgument(nb, d + 1));
    }
    move_ops(body, nb, (MlirOperation){NULL}, true);
    mlirOperationDestroy(par);
    return;
  }
  int64_t lb, ub, step;
  if (!kiln_compiler_int_constant_value(mlirOperationGetOperand(par, 0), &lb) ||
      !kiln_compiler_int_constant_value(mlirOperationGetOperand(par, 1), &ub) ||
      !kiln_compiler_int_constant_value(mlirOperationGetOperand(par, 2), &step) || step <= 0 || ub <= lb) {
    return;
  }
  int64_t trips = (ub - lb + step - 1) / step, cols = 32, rows = (trips + cols - 1) / cols;
  if (trips <= cols) return; /* one row: nothing to gain (a host loop's one-invocation wrapper) */
  MlirValue lbs[3] = {zero, zero, zero};
  MlirValue ubs[3] = {one, kiln_compiler_int_const_before(ctx, par, index, rows),
                      kiln_compiler_int_const_before(ctx, par, index, cols)};
  MlirValue steps[3] = {one, one, one};
  MlirOperation np = parallel3(ctx, par, lbs, ubs, steps);
  MlirBlock nb = region_block(np, 0);
  /* The old index, lb + (a * 32 + b) * step, computed at the top of the body. */
  MlirOperationState rs =
      mlirOperationStateGet(mlirStringRefCreateFromCString("scf.reduce"), mlirOperationGetLocation(par));
  MlirOperation term = mlirOperationCreate(&rs);
  mlirBlockAppendOwnedOperation(nb, term);
  MlirValue c32 = kiln_compiler_int_const_before(ctx, term, index, cols);
  MlirValue a_b[2] = {mlirBlockGetArgument(nb, 1), c32};
  MlirValue scaled = kiln_compiler_build_before("arith.muli", term, a_b, 2, index);
  MlirValue lin_ops[2] = {scaled, mlirBlockGetArgument(nb, 2)};
  MlirValue lin = kiln_compiler_build_before("arith.addi", term, lin_ops, 2, index);
  MlirValue step_ops[2] = {lin, kiln_compiler_int_const_before(ctx, term, index, step)};
  MlirValue strided = kiln_compiler_build_before("arith.muli", term, step_ops, 2, index);
  MlirValue off_ops[2] = {strided, kiln_compiler_int_const_before(ctx, term, index, lb)};
  MlirValue old_iv = kiln_compiler_build_before("arith.addi", term, off_ops, 2, index);
  mlirValueReplaceAllUsesOfWith(mlirBlockGetArgument(body, 0), old_iv);
  if (trips % cols == 0) {
    move_ops(body, nb, term, false);
  } else {
    /* lin < trips, else this invocation does nothing. */
    MlirValue cmp_ops[2] = {lin, kiln_compiler_int_const_before(ctx, term, index, trips)};
    MlirOperationState cs =
        mlirOperationStateGet(mlirStringRefCreateFromCString("arith.cmpi"), mlirOperationGetLocation(par));
    MlirNamedAttribute pred =
        kiln_compiler_named_attr(ctx, "predicate", mlirIntegerAttrGet(mlirIntegerTypeGet(ctx, 64), 6));
    mlirOperationStateAddOperands(&cs, 2, cmp_ops);
    MlirType i1 = mlirIntegerTypeGet(ctx, 1);
    mlirOperationStateAddResults(&cs, 1, &i1);
    mlirOperationStateAddAttributes(&cs, 1, &pred);
    MlirOperation cmp = mlirOperationCreate(&cs);
    mlirBlockInsertOwnedOperationBefore(nb, term, cmp);
    MlirLocation loc = mlirOperationGetLocation(par);
    MlirRegion then_region = mlirRegionCreate(), else_region = mlirRegionCreate();
    MlirBlock then_block = mlirBlockCreate(0, NULL, NULL);
    mlirRegionAppendOwnedBlock(then_region, then_block);
    MlirOperationState ys = mlirOperationStateGet(mlirStringRefCreateFromCString("scf.yield"), loc);
    MlirOperation yield = mlirOperationCreate(&ys);
    mlirBlockAppendOwnedOperation(then_block, yield);
    MlirRegion regions[2] = {then_region, else_region};
    MlirValue cond = mlirOperationGetResult(cmp, 0);
    MlirOperationState is = mlirOperationStateGet(mlirStringRefCreateFromCString("scf.if"), loc);
    mlirOperationStateAddOperands(&is, 1, &cond);
    mlirOperationStateAddOwnedRegions(&is, 2, regions);
    MlirOperation guard = mlirOperationCreate(&is);
    mlirBlockInsertOwnedOperationBefore(nb, term, guard);
    move_ops(body, then_block, yield, false);
  }
  mlirOperationDestroy(par);
}

/* ---- the contiguous dimension on x ---- */

/* The mapping attribute of a loop of rank `rank` at `level` ("block" or
 * "thread"): with `reversed` its last dimension on x, the one before on y, the one
 * before that on z; else its first on x (what gpu-map-parallel-loops does). */
static MlirAttribute loop_mapping(MlirContext ctx, const char *level, intptr_t rank, bool reversed) {
  kiln_buf_t t;
  kiln_buf_init(&t);
  kiln_buf_append_char(&t, '[');
  for (intptr_t d = 0; d < rank; d++) {
    kiln_buf_appendf(&t, "%s#gpu.loop_dim_map<processor = %s_%c, map = (d0) -> (d0), bound = (d0) -> (d0)>",
                     d ? ", " : "", level, "xyz"[reversed ? rank - 1 - d : d]);
  }
  kiln_buf_append_char(&t, ']');
  MlirAttribute a = mlirAttributeParseGet(ctx, mlirStringRefCreate(t.data, t.len));
  kiln_buf_deinit(&t);
  return a;
}

static MlirWalkResult collect_tiled(MlirOperation op, void *user) {
  if (!kiln_compiler_op_is(op, "scf.parallel")) return MlirWalkResultAdvance;
  kiln_compiler_ops_push(user, op);
  return MlirWalkResultSkip; /* its tile loop is mapped with it */
}

void kiln_compiler_map_contiguous_to_x(MlirContext context, MlirModule module) {
  kiln_compiler_ops_t ops = {0};
  mlirOperationWalk(mlirModuleGetOperation(module), collect_tiled, &ops, MlirWalkPreOrder);
  for (size_t i = 0; i < ops.n; i++) {
    MlirOperation grid = ops.items[i];
    intptr_t rank = mlirOperationGetNumOperands(grid) / 3;
    if (mlirOperationGetNumResults(grid) != 0 || mlirOperationGetNumOperands(grid) != 3 * rank || rank < 1 ||
        rank > 3) {
      continue;
    }
    /* The tile: the one scf.parallel directly in the grid loop's body. */
    MlirOperation tile = {NULL};
    int n_tiles = 0;
    for (MlirOperation op = mlirBlockGetFirstOperation(region_block(grid, 0)); !mlirOperationIsNull(op);
         op = mlirOperationGetNextInBlock(op)) {
      if (kiln_compiler_op_is(op, "scf.parallel")) tile = op, n_tiles++;
    }
    bool tile_ok = n_tiles == 1 && mlirOperationGetNumResults(tile) == 0 &&
                   mlirOperationGetNumOperands(tile) == 3 * rank;
    if (n_tiles > 1 || (n_tiles == 1 && !tile_ok)) continue;
    /* The grid keeps the pass's order: a CPU runs workgroups x fastest, and
     * along the first dimensions (a matmul's rows) neighbours share the
     * columns of B they read (along the last, sgemm 1024 lost a third). */
    MlirAttribute g = loop_mapping(context, "block", rank, false);
    MlirAttribute t = loop_mapping(context, "thread", rank, true);
    if (mlirAttributeIsNull(g) || mlirAttributeIsNull(t)) continue;
    mlirOperationSetDiscardableAttributeByName(grid, mlirStringRefCreateFromCString("mapping"), g);
    if (n_tiles == 1)
      mlirOperationSetDiscardableAttributeByName(tile, mlirStringRefCreateFromCString("mapping"), t);
  }
  kiln_free(ops.items);
}

void kiln_compiler_parallel_loops_to_rank3(MlirContext context, MlirModule module) {
  kiln_compiler_ops_t ops = {0};
  mlirOperationWalk(mlirModuleGetOperation(module), collect_outer_parallel, &ops, MlirWalkPreOrder);
  for (size_t i = 0; i < ops.n; i++) reshape_parallel(context, ops.items[i]);
  kiln_free(ops.items);
}
