/* What the GPU back halves' own kernels share (gpu_match.h). */
#include "compiler/gpu_match.h"

#include <mlir-c/AffineMap.h>
#include <mlir-c/BuiltinAttributes.h>
#include <mlir-c/BuiltinTypes.h>
#include <stdio.h>
#include <string.h>

#include "base/alloc.h"
#include "base/buf.h"
#include "compiler/kernel_types.h"

static void print_cb(MlirStringRef s, void *user) { kiln_buf_append(user, s.data, s.length); }

MlirOperation kiln_compiler_gpu_def_of(MlirValue v) {
  return mlirValueIsAOpResult(v) ? mlirOpResultGetOwner(v) : (MlirOperation){NULL};
}

bool kiln_compiler_gpu_attr_is(MlirAttribute attr, const char *text) {
  if (mlirAttributeIsNull(attr)) return false;
  kiln_buf_t b;
  kiln_buf_init(&b);
  mlirAttributePrint(attr, print_cb, &b);
  kiln_buf_append(&b, "", 1);
  bool same = strcmp(b.data, text) == 0;
  kiln_buf_deinit(&b);
  return same;
}

bool kiln_compiler_gpu_is_id(MlirValue v, const char *what, char dim) {
  MlirOperation d = kiln_compiler_gpu_def_of(v);
  if (mlirOperationIsNull(d) || !kiln_compiler_op_is(d, what)) return false;
  char text[32];
  snprintf(text, sizeof text, "#gpu<dim %c>", dim);
  return kiln_compiler_gpu_attr_is(mlirOperationGetAttributeByName(d, mlirStringRefCreateFromCString("dimension")),
                                   text);
}

bool kiln_compiler_gpu_is_tile_index(MlirValue v, char tdim, char bdim, uint32_t tile) {
  MlirOperation add = kiln_compiler_gpu_def_of(v);
  if (mlirOperationIsNull(add) || !kiln_compiler_op_is(add, "arith.addi")) return false;
  for (int s = 0; s < 2; s++) {
    MlirValue tid = mlirOperationGetOperand(add, s), off = mlirOperationGetOperand(add, 1 - s);
    MlirOperation apply = kiln_compiler_gpu_def_of(off);
    if (!kiln_compiler_gpu_is_id(tid, "gpu.thread_id", tdim) || mlirOperationIsNull(apply) ||
        !kiln_compiler_op_is(apply, "affine.apply") || mlirOperationGetNumOperands(apply) != 1 ||
        !kiln_compiler_gpu_is_id(mlirOperationGetOperand(apply, 0), "gpu.block_id", bdim)) {
      continue;
    }
    char map[64];
    snprintf(map, sizeof map, "affine_map<()[s0] -> (s0 * %u)>", tile);
    if (kiln_compiler_gpu_attr_is(mlirOperationGetAttributeByName(apply, mlirStringRefCreateFromCString("map")), map)) {
      return true;
    }
  }
  return false;
}

int kiln_compiler_gpu_arg_of(MlirValue v, MlirBlock entry) {
  if (!mlirValueIsABlockArgument(v) || !mlirBlockEqual(mlirBlockArgumentGetOwner(v), entry)) return -1;
  return (int)mlirBlockArgumentGetArgNumber(v);
}

bool kiln_compiler_gpu_plain_memref(MlirType t) {
  return mlirTypeIsAMemRef(t) && mlirShapedTypeHasStaticShape(t) &&
         mlirAttributeIsNull(mlirMemRefTypeGetMemorySpace(t)) && mlirAffineMapIsIdentity(mlirMemRefTypeGetAffineMap(t));
}

bool kiln_compiler_gpu_counted_loop(MlirOperation loop, int64_t *out_ub) {
  int64_t lb = -1, ub = -1, step = -1;
  if (!kiln_compiler_op_is(loop, "scf.for") || mlirOperationGetNumOperands(loop) != 3 ||
      mlirOperationGetNumResults(loop) != 0 ||
      !kiln_compiler_int_constant_value(mlirOperationGetOperand(loop, 0), &lb) ||
      !kiln_compiler_int_constant_value(mlirOperationGetOperand(loop, 1), &ub) ||
      !kiln_compiler_int_constant_value(mlirOperationGetOperand(loop, 2), &step) || lb != 0 || step != 1 || ub < 1) {
    return false;
  }
  *out_ub = ub;
  return true;
}

bool kiln_compiler_gpu_is_zero(MlirValue v) {
  int64_t z = -1;
  return kiln_compiler_int_constant_value(v, &z) && z == 0;
}

char *kiln_compiler_gpu_type_text(MlirType t) {
  kiln_buf_t b;
  kiln_buf_init(&b);
  mlirTypePrint(t, print_cb, &b);
  return kiln_buf_take(&b);
}

typedef struct launches_of_s {
  MlirStringRef module, kernel;
  kiln_compiler_ops_t found;
} launches_of_t;

static bool ref_is(MlirStringRef a, MlirStringRef b) { return a.length == b.length && !memcmp(a.data, b.data, a.length); }

static MlirWalkResult find_launches(MlirOperation op, void *user) {
  if (!kiln_compiler_op_is(op, "gpu.launch_func")) return MlirWalkResultAdvance;
  launches_of_t *l = user;
  MlirAttribute k = mlirOperationGetAttributeByName(op, mlirStringRefCreateFromCString("kernel"));
  if (!mlirAttributeIsNull(k) && mlirSymbolRefAttrGetNumNestedReferences(k) == 1 &&
      ref_is(mlirSymbolRefAttrGetRootReference(k), l->module) &&
      ref_is(mlirFlatSymbolRefAttrGetValue(mlirSymbolRefAttrGetNestedReference(k, 0)), l->kernel)) {
    kiln_compiler_ops_push(&l->found, op);
  }
  return MlirWalkResultAdvance;
}

kiln_status_t kiln_compiler_gpu_kernel_swap(MlirContext context, MlirModule module, MlirOperation func,
                                            const char *text, const char *what, const kiln_target_t *t) {
  MlirModule parsed = mlirModuleCreateParse(context, mlirStringRefCreateFromCString(text));
  if (mlirModuleIsNull(parsed)) {
    return KILN_STATUS(KILN_STATUS_INTERNAL, "the %s kernel for %s does not parse (kiln bug)", what, t->id);
  }
  MlirOperation gm = kiln_compiler_first_op(mlirModuleGetBody(parsed), "gpu.module");
  MlirOperation mine = mlirOperationIsNull(gm)
                           ? gm
                           : kiln_compiler_first_op(mlirRegionGetFirstBlock(mlirOperationGetRegion(gm, 0)), "gpu.func");
  if (mlirOperationIsNull(mine)) {
    mlirModuleDestroy(parsed);
    return KILN_STATUS(KILN_STATUS_INTERNAL, "the %s kernel for %s has no gpu.func (kiln bug)", what, t->id);
  }
  /* The old kernel's launches go first: they name it, and their argument types
   * are the old ones. */
  MlirOperation parent = mlirOperationGetParentOperation(func);
  launches_of_t l = {
      mlirStringAttrGetValue(mlirOperationGetAttributeByName(parent, mlirStringRefCreateFromCString("sym_name"))),
      mlirStringAttrGetValue(mlirOperationGetAttributeByName(func, mlirStringRefCreateFromCString("sym_name"))),
      {0}};
  mlirOperationWalk(mlirModuleGetOperation(module), find_launches, &l, MlirWalkPreOrder);
  for (size_t i = 0; i < l.found.n; i++) mlirOperationDestroy(l.found.items[i]);
  kiln_free(l.found.items);
  mlirBlockInsertOwnedOperationBefore(mlirOperationGetBlock(func), func, mlirOperationClone(mine));
  mlirOperationDestroy(func);
  mlirModuleDestroy(parsed);
  return NULL;
}
