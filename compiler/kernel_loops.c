/* Loop rewrites inside GPU kernels (kernel_loops.h). */
#include "compiler/kernel_loops.h"

#include <string.h>

#include <mlir-c/BuiltinAttributes.h>
#include <mlir-c/BuiltinTypes.h>

#include "base/alloc.h"
#include "compiler/kernel_types.h"

static MlirStringRef sref(const char *s) { return mlirStringRefCreateFromCString(s); }

static MlirWalkResult collect_for(MlirOperation op, void *user) {
  if (kiln_compiler_op_is(op, "scf.for")) kiln_compiler_ops_push(user, op);
  return MlirWalkResultAdvance;
}

static bool inside(MlirOperation op, MlirOperation ancestor) {
  for (MlirOperation p = op; !mlirOperationIsNull(p); p = mlirOperationGetParentOperation(p)) {
    if (mlirOperationEqual(p, ancestor)) return true;
  }
  return false;
}

/* Whether `v` is defined inside `loop` (by an op in it, or as one of its blocks'
 * arguments). */
static bool defined_inside(MlirValue v, MlirOperation loop) {
  if (mlirValueIsAOpResult(v)) return inside(mlirOpResultGetOwner(v), loop);
  MlirOperation owner = mlirBlockGetParentOperation(mlirBlockArgumentGetOwner(v));
  return !mlirOperationIsNull(owner) && inside(owner, loop);
}

/* The buffer a memref value views: through subviews, casts and reshapes to an
 * allocation, a global or an argument. */
static MlirValue root_of(MlirValue v) {
  static const char *const views[] = {
      "memref.subview",      "memref.cast", "memref.reinterpret_cast", "memref.collapse_shape",
      "memref.expand_shape", "memref.view", "memref.reshape",          "memref.memory_space_cast"};
  for (int depth = 0; depth < 64 && mlirValueIsAOpResult(v); depth++) {
    MlirOperation def = mlirOpResultGetOwner(v);
    bool view = false;
    for (size_t i = 0; i < sizeof views / sizeof views[0] && !view; i++)
      view = kiln_compiler_op_is(def, views[i]);
    if (!view || mlirOperationGetNumOperands(def) == 0) break;
    v = mlirOperationGetOperand(def, 0);
  }
  return v;
}

static bool fresh_buffer(MlirValue root) {
  if (!mlirValueIsAOpResult(root)) return false;
  MlirOperation def = mlirOpResultGetOwner(root);
  return kiln_compiler_op_is(def, "memref.alloc") || kiln_compiler_op_is(def, "memref.alloca") ||
         kiln_compiler_op_is(def, "memref.get_global");
}

/* Whether buffers rooted at `a` and `b` may overlap. */
static bool may_alias(MlirValue a, MlirValue b, bool distinct_arguments) {
  if (mlirValueEqual(a, b)) return true;
  if (fresh_buffer(a) || fresh_buffer(b)) return false; /* distinct allocations, or one and an argument */
  return !(distinct_arguments && mlirValueIsABlockArgument(a) && mlirValueIsABlockArgument(b));
}

typedef struct scan_s {
  MlirValue root;            /* the accumulator's buffer */
  MlirOperation load, store; /* its one load and store */
  bool distinct_arguments;
  bool clean; /* nothing else touches a buffer that may be it */
} scan_t;

static MlirWalkResult scan_uses(MlirOperation op, void *user) {
  scan_t *s = user;
  if (mlirOperationEqual(op, s->load) || mlirOperationEqual(op, s->store)) return MlirWalkResultAdvance;
  for (intptr_t i = 0; i < mlirOperationGetNumOperands(op); i++) {
    MlirValue v = mlirOperationGetOperand(op, i);
    if (!mlirTypeIsAMemRef(mlirValueGetType(v))) continue;
    if (may_alias(root_of(v), s->root, s->distinct_arguments)) {
      s->clean = false;
      return MlirWalkResultInterrupt;
    }
  }
  return MlirWalkResultAdvance;
}

/* memref.load %m[%i...] and memref.store %v, %m[%i...] on the same element. */
static bool same_element(MlirOperation load, MlirOperation store) {
  intptr_t n = mlirOperationGetNumOperands(load);
  if (mlirOperationGetNumOperands(store) != n + 1) return false;
  for (intptr_t i = 0; i < n; i++) {
    if (!mlirValueEqual(mlirOperationGetOperand(load, i), mlirOperationGetOperand(store, i + 1)))
      return false;
  }
  return true;
}

/* A load/store pair of `loop`'s body that can become an iteration argument. */
static bool find_pair(MlirOperation loop, bool distinct_arguments, MlirOperation *out_load,
                      MlirOperation *out_store) {
  MlirBlock body = mlirRegionGetFirstBlock(mlirOperationGetRegion(loop, 0));
  for (MlirOperation l = mlirBlockGetFirstOperation(body); !mlirOperationIsNull(l);
       l = mlirOperationGetNextInBlock(l)) {
    if (!kiln_compiler_op_is(l, "memref.load")) continue;
    bool outside = true;
    for (intptr_t i = 0; i < mlirOperationGetNumOperands(l) && outside; i++) {
      outside = !defined_inside(mlirOperationGetOperand(l, i), loop);
    }
    if (!outside) continue;
    for (MlirOperation s = mlirOperationGetNextInBlock(l); !mlirOperationIsNull(s);
         s = mlirOperationGetNextInBlock(s)) {
      if (!kiln_compiler_op_is(s, "memref.store") || !same_element(l, s)) continue;
      scan_t scan = {root_of(mlirOperationGetOperand(l, 0)), l, s, distinct_arguments, true};
      mlirOperationWalk(loop, scan_uses, &scan, MlirWalkPreOrder);
      if (!scan.clean) break;
      *out_load = l;
      *out_store = s;
      return true;
    }
  }
  return false;
}

/* Rewrites `loop` with the pair carried; returns the new loop. */
static MlirOperation carry(MlirOperation loop, MlirOperation load, MlirOperation store) {
  MlirLocation loc = mlirOperationGetLocation(loop);
  MlirBlock body = mlirRegionGetFirstBlock(mlirOperationGetRegion(loop, 0));
  MlirOperation old_yield = mlirBlockGetTerminator(body);
  intptr_t n_iter = mlirOperationGetNumResults(loop);
  /* The new body: the induction variable, the old iteration arguments, the value. */
  MlirValue loaded = mlirOperationGetResult(load, 0);
  intptr_t n_args = n_iter + 2;
  MlirType *types = kiln_calloc((size_t)n_args, sizeof *types);
  MlirLocation *locs = kiln_calloc((size_t)n_args, sizeof *locs);
  for (intptr_t i = 0; i < n_args; i++) {
    types[i] = i + 1 < n_args ? mlirValueGetType(mlirBlockGetArgument(body, i)) : mlirValueGetType(loaded);
    locs[i] = loc;
  }
  MlirBlock nb = mlirBlockCreate(n_args, types, locs);
  mlirOperationMoveBefore(load, loop);
  mlirValueReplaceAllUsesOfWith(loaded, mlirBlockGetArgument(nb, n_args - 1));
  for (intptr_t i = 0; i + 1 < n_args; i++) {
    mlirValueReplaceAllUsesOfWith(mlirBlockGetArgument(body, i), mlirBlockGetArgument(nb, i));
  }
  MlirValue stored = mlirOperationGetOperand(store, 0);
  mlirOperationMoveAfter(store, loop);
  for (MlirOperation op = mlirBlockGetFirstOperation(body); !mlirOperationIsNull(op);) {
    MlirOperation next = mlirOperationGetNextInBlock(op);
    if (!mlirOperationEqual(op, old_yield)) {
      mlirOperationRemoveFromParent(op);
      mlirBlockAppendOwnedOperation(nb, op);
    }
    op = next;
  }
  MlirValue *yielded = kiln_calloc((size_t)n_iter + 1, sizeof *yielded);
  for (intptr_t i = 0; i < n_iter; i++) yielded[i] = mlirOperationGetOperand(old_yield, i);
  yielded[n_iter] = stored;
  MlirOperationState ys = mlirOperationStateGet(sref("scf.yield"), loc);
  mlirOperationStateAddOperands(&ys, n_iter + 1, yielded);
  mlirBlockAppendOwnedOperation(nb, mlirOperationCreate(&ys));
  /* The new loop: bounds, the old inits and the loaded value. */
  intptr_t n_operands = mlirOperationGetNumOperands(loop) + 1;
  MlirValue *operands = kiln_calloc((size_t)n_operands, sizeof *operands);
  for (intptr_t i = 0; i + 1 < n_operands; i++) operands[i] = mlirOperationGetOperand(loop, i);
  operands[n_operands - 1] = loaded;
  MlirType *results = kiln_calloc((size_t)n_iter + 1, sizeof *results);
  for (intptr_t i = 0; i <= n_iter; i++) results[i] = types[i + 1];
  MlirRegion region = mlirRegionCreate();
  mlirRegionAppendOwnedBlock(region, nb);
  MlirOperationState fs = mlirOperationStateGet(sref("scf.for"), loc);
  mlirOperationStateAddOperands(&fs, n_operands, operands);
  mlirOperationStateAddResults(&fs, n_iter + 1, results);
  mlirOperationStateAddOwnedRegions(&fs, 1, &region);
  MlirOperation nf = mlirOperationCreate(&fs);
  mlirBlockInsertOwnedOperationBefore(mlirOperationGetBlock(loop), loop, nf);
  for (intptr_t i = 0; i < n_iter; i++) {
    mlirValueReplaceAllUsesOfWith(mlirOperationGetResult(loop, i), mlirOperationGetResult(nf, i));
  }
  mlirOperationSetOperand(store, 0, mlirOperationGetResult(nf, n_iter));
  mlirOperationDestroy(loop);
  kiln_free(types);
  kiln_free(locs);
  kiln_free(yielded);
  kiln_free(operands);
  kiln_free(results);
  return nf;
}

int kiln_compiler_kernel_accumulators_to_registers(MlirOperation kernel, bool distinct_arguments) {
  kiln_compiler_ops_t loops = {0};
  mlirOperationWalk(kernel, collect_for, &loops, MlirWalkPostOrder);
  int rewritten = 0;
  for (size_t i = 0; i < loops.n; i++) {
    MlirOperation loop = loops.items[i];
    MlirOperation load, store;
    for (int pairs = 0; pairs < 16 && find_pair(loop, distinct_arguments, &load, &store); pairs++) {
      loop = carry(loop, load, store);
      rewritten++;
    }
  }
  kiln_free(loops.items);
  return rewritten;
}

typedef struct contract_s {
  MlirAttribute flag, none;
} contract_t;

static MlirWalkResult mark_contract(MlirOperation op, void *user) {
  contract_t *c = user;
  if (!kiln_compiler_op_is(op, "arith.mulf") && !kiln_compiler_op_is(op, "arith.addf") &&
      !kiln_compiler_op_is(op, "arith.subf")) {
    return MlirWalkResultAdvance;
  }
  MlirAttribute now = mlirOperationGetInherentAttributeByName(op, sref("fastmath"));
  if (mlirAttributeIsNull(now) || mlirAttributeEqual(now, c->none)) {
    mlirOperationSetInherentAttributeByName(op, sref("fastmath"), c->flag);
  }
  return MlirWalkResultAdvance;
}

static MlirWalkResult contract_in_kernels(MlirOperation op, void *user) {
  if (!kiln_compiler_op_is(op, "gpu.module")) return MlirWalkResultAdvance;
  mlirOperationWalk(op, mark_contract, user, MlirWalkPreOrder);
  return MlirWalkResultSkip;
}

void kiln_compiler_kernels_allow_contraction(MlirContext context, MlirModule module) {
  contract_t c = {mlirAttributeParseGet(context, sref("#arith.fastmath<contract>")),
                  mlirAttributeParseGet(context, sref("#arith.fastmath<none>"))};
  mlirOperationWalk(mlirModuleGetOperation(module), contract_in_kernels, &c, MlirWalkPreOrder);
}
