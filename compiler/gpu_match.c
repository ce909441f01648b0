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
  return kiln_compiler_gpu_attr_is(
      mlirOperationGetAttributeByName(d, mlirStringRefCreateFromCString("dimension")), text);
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
    if (kiln_compiler_gpu_attr_is(
            mlirOperationGetAttributeByName(apply, mlirStringRefCreateFromCString("map")), map)) {
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
         mlirAttributeIsNull(mlirMemRefTypeGetMemorySpace(t)) &&
         mlirAffineMapIsIdentity(mlirMemRefTypeGetAffineMap(t));
}

bool kiln_compiler_gpu_counted_loop(MlirOperation loop, int64_t *out_ub) {
  int64_t lb = -1, ub = -1, step = -1;
  if (!kiln_compiler_op_is(loop, "scf.for") || mlirOperationGetNumOperands(loop) != 3 ||
      mlirOperationGetNumResults(loop) != 0 ||
      !kiln_compiler_int_constant_value(mlirOperationGetOperand(loop, 0), &lb) ||
      !kiln_compiler_int_constant_value(mlirOperationGetOperand(loop, 1), &ub) ||
      !kiln_compiler_int_constant_value(mlirOperationGetOperand(loop, 2), &step) || lb != 0 || step != 1 ||
      ub < 1) {
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

bool kiln_compiler_gpu_name_starts(MlirOperation op, const char *prefix) {
  MlirStringRef n = mlirIdentifierStr(mlirOperationGetName(op));
  size_t len = strlen(prefix);
  return n.length > len && memcmp(n.data, prefix, len) == 0;
}

/* A scalar of at most 32 bits, integer or float (not index). */
static bool small_scalar(MlirType t) {
  if (mlirTypeIsAInteger(t)) return mlirIntegerTypeGetWidth(t) <= 32;
  return mlirTypeIsAF32(t) || mlirTypeIsAF16(t) || mlirTypeIsABF16(t);
}

bool kiln_compiler_gpu_value_op(MlirOperation op) {
  if ((!kiln_compiler_gpu_name_starts(op, "arith.") && !kiln_compiler_gpu_name_starts(op, "math.")) ||
      kiln_compiler_op_is(op, "arith.index_cast") || kiln_compiler_op_is(op, "arith.index_castui") ||
      mlirOperationGetNumRegions(op) != 0) {
    return false;
  }
  for (intptr_t i = 0; i < mlirOperationGetNumOperands(op); i++) {
    if (!small_scalar(mlirValueGetType(mlirOperationGetOperand(op, i)))) return false;
  }
  for (intptr_t i = 0; i < mlirOperationGetNumResults(op); i++) {
    if (!small_scalar(mlirValueGetType(mlirOperationGetResult(op, i)))) return false;
  }
  return true;
}

bool kiln_compiler_gpu_op_is_one_of(MlirOperation op, const char *const *names, size_t n) {
  for (size_t i = 0; i < n; i++) {
    if (kiln_compiler_op_is(op, names[i])) return true;
  }
  return false;
}

MlirBlock kiln_compiler_gpu_kernel_entry(MlirOperation func) {
  if (!kiln_compiler_op_is(func, "gpu.func")) return (MlirBlock){NULL};
  MlirBlock entry = mlirRegionGetFirstBlock(mlirOperationGetRegion(func, 0));
  if (mlirBlockIsNull(entry) || !mlirBlockIsNull(mlirBlockGetNextInRegion(entry))) return (MlirBlock){NULL};
  return entry;
}

void kiln_compiler_gpu_kernel_open_named(kiln_buf_t *b, const char *module, const char *name, size_t name_len,
                                         const char *const *types, size_t n) {
  kiln_buf_appendf(b, "gpu.module @%s {\ngpu.func @%.*s(", module, (int)name_len, name);
  for (size_t i = 0; i < n; i++) kiln_buf_appendf(b, "%s%%arg%zu: %s", i ? ", " : "", i, types[i]);
  kiln_buf_append_str(b, ")");
}

void kiln_compiler_gpu_kernel_open(kiln_buf_t *b, MlirOperation func, const char *module,
                                   const char *const *types, size_t n) {
  MlirBlock entry = mlirRegionGetFirstBlock(mlirOperationGetRegion(func, 0));
  MlirStringRef name = mlirStringAttrGetValue(
      mlirOperationGetAttributeByName(func, mlirStringRefCreateFromCString("sym_name")));
  size_t count = (size_t)mlirBlockGetNumArguments(entry);
  const char **all = kiln_calloc(count ? count : 1, sizeof *all);
  char **own = kiln_calloc(count ? count : 1, sizeof *own);
  for (size_t i = 0; i < count; i++) {
    if (i < n && types[i]) {
      all[i] = types[i];
    } else {
      all[i] = own[i] =
          kiln_compiler_gpu_type_text(mlirValueGetType(mlirBlockGetArgument(entry, (intptr_t)i)));
    }
  }
  kiln_compiler_gpu_kernel_open_named(b, module, name.data, name.length, all, count);
  for (size_t i = 0; i < count; i++) kiln_free(own[i]);
  kiln_free(own);
  kiln_free(all);
}

#define CMPI_ULT 6 /* arith.cmpi's predicate number for ult */

bool kiln_compiler_gpu_and_leaves(MlirValue v, MlirOperation *leaves, size_t *n) {
  MlirOperation d = kiln_compiler_gpu_def_of(v);
  if (mlirOperationIsNull(d)) return false;
  if (kiln_compiler_op_is(d, "arith.andi")) {
    return kiln_compiler_gpu_and_leaves(mlirOperationGetOperand(d, 0), leaves, n) &&
           kiln_compiler_gpu_and_leaves(mlirOperationGetOperand(d, 1), leaves, n);
  }
  if (*n == KILN_COMPILER_GPU_MAX_LEAVES) return false;
  leaves[(*n)++] = d;
  return true;
}

bool kiln_compiler_gpu_is_below(MlirOperation cmp, MlirValue v, int64_t *out) {
  if (!kiln_compiler_op_is(cmp, "arith.cmpi")) return false;
  MlirAttribute pred = mlirOperationGetAttributeByName(cmp, mlirStringRefCreateFromCString("predicate"));
  return !mlirAttributeIsNull(pred) && mlirAttributeIsAInteger(pred) &&
         mlirIntegerAttrGetValueInt(pred) == CMPI_ULT && mlirValueEqual(mlirOperationGetOperand(cmp, 0), v) &&
         kiln_compiler_int_constant_value(mlirOperationGetOperand(cmp, 1), out);
}

MlirOperation kiln_compiler_gpu_only_inner_loop(MlirOperation loop) {
  MlirBlock body = mlirRegionGetFirstBlock(mlirOperationGetRegion(loop, 0));
  MlirOperation first = mlirBlockGetFirstOperation(body);
  MlirOperation second = mlirOperationIsNull(first) ? first : mlirOperationGetNextInBlock(first);
  if (!kiln_compiler_op_is(first, "scf.for") || mlirOperationIsNull(second) ||
      !kiln_compiler_op_is(second, "scf.yield") || mlirOperationGetNumOperands(second) != 0 ||
      !mlirOperationIsNull(mlirOperationGetNextInBlock(second))) {
    return (MlirOperation){NULL};
  }
  return first;
}

int64_t kiln_compiler_gpu_sum_stride(MlirValue v, MlirValue d0, MlirValue s0) {
  MlirOperation apply = kiln_compiler_gpu_def_of(v);
  if (mlirOperationIsNull(apply) || !kiln_compiler_op_is(apply, "affine.apply") ||
      mlirOperationGetNumOperands(apply) != 2 || !mlirValueEqual(mlirOperationGetOperand(apply, 0), d0) ||
      !mlirValueEqual(mlirOperationGetOperand(apply, 1), s0)) {
    return 0;
  }
  MlirAttribute map = mlirOperationGetAttributeByName(apply, mlirStringRefCreateFromCString("map"));
  if (kiln_compiler_gpu_attr_is(map, "affine_map<(d0)[s0] -> (d0 + s0)>")) return 1;
  for (int64_t stride = 2; stride <= 8; stride++) {
    char text[64];
    snprintf(text, sizeof text, "affine_map<(d0)[s0] -> (d0 + s0 * %lld)>", (long long)stride);
    if (kiln_compiler_gpu_attr_is(map, text)) return stride;
  }
  return 0;
}

/* Whether `v` is arith.<name> `a`, <constant c>. */
static bool is_binary(MlirValue v, const char *name, MlirValue a, int64_t c) {
  MlirOperation op = kiln_compiler_gpu_def_of(v);
  int64_t got = -1;
  return !mlirOperationIsNull(op) && kiln_compiler_op_is(op, name) &&
         mlirValueEqual(mlirOperationGetOperand(op, 0), a) &&
         kiln_compiler_int_constant_value(mlirOperationGetOperand(op, 1), &got) && got == c;
}

bool kiln_compiler_gpu_image_rows(MlirValue nb, MlirValue oh, int64_t batch, int64_t out_h) {
  if (batch == 1) return kiln_compiler_gpu_is_zero(nb) && kiln_compiler_gpu_is_id(oh, "gpu.block_id", 'x');
  MlirOperation rem = kiln_compiler_gpu_def_of(oh);
  if (mlirOperationIsNull(rem)) return false;
  MlirValue bx = mlirOperationGetOperand(rem, 0);
  return kiln_compiler_gpu_is_id(bx, "gpu.block_id", 'x') && is_binary(oh, "arith.remui", bx, out_h) &&
         is_binary(nb, "arith.divui", bx, out_h);
}

bool kiln_compiler_gpu_read_madd(MlirBlock body, const char *extra, size_t max_extra,
                                 kiln_compiler_gpu_madd_t *out) {
  memset(out, 0, sizeof *out);
  size_t n_loads = 0;
  for (MlirOperation op = mlirBlockGetFirstOperation(body); !mlirOperationIsNull(op);
       op = mlirOperationGetNextInBlock(op)) {
    if (kiln_compiler_op_is(op, "memref.load") && n_loads < 3) {
      out->loads[n_loads++] = op;
    } else if (kiln_compiler_op_is(op, extra) && out->n_extra < max_extra) {
      out->n_extra++;
    } else if (kiln_compiler_op_is(op, "arith.mulf") && mlirOperationIsNull(out->mul)) {
      out->mul = op;
    } else if (kiln_compiler_op_is(op, "arith.addf") && mlirOperationIsNull(out->add)) {
      out->add = op;
    } else if (kiln_compiler_op_is(op, "memref.store") && mlirOperationIsNull(out->store)) {
      out->store = op;
    } else if (!kiln_compiler_op_is(op, "scf.yield") || mlirOperationGetNumOperands(op) != 0) {
      return false;
    }
  }
  return n_loads == 3 && !mlirOperationIsNull(out->mul) && !mlirOperationIsNull(out->add) &&
         !mlirOperationIsNull(out->store);
}

/* Whether `a` and `b` are `x` and `y` in either order. */
static bool either_order(MlirValue a, MlirValue b, MlirValue x, MlirValue y) {
  return (mlirValueEqual(a, x) && mlirValueEqual(b, y)) || (mlirValueEqual(a, y) && mlirValueEqual(b, x));
}

bool kiln_compiler_gpu_madd_in_place(const kiln_compiler_gpu_madd_t *mb, MlirOperation x, MlirOperation y,
                                     MlirOperation acc) {
  MlirOperation mul = mb->mul, add = mb->add, store = mb->store;
  intptr_t rank = mlirOperationGetNumOperands(acc) - 1;
  if (!either_order(mlirOperationGetOperand(mul, 0), mlirOperationGetOperand(mul, 1),
                    mlirOperationGetResult(x, 0), mlirOperationGetResult(y, 0)) ||
      !either_order(mlirOperationGetOperand(add, 0), mlirOperationGetOperand(add, 1),
                    mlirOperationGetResult(acc, 0), mlirOperationGetResult(mul, 0)) ||
      mlirOperationGetNumOperands(store) != rank + 2 ||
      !mlirValueEqual(mlirOperationGetOperand(store, 0), mlirOperationGetResult(add, 0)) ||
      !mlirValueEqual(mlirOperationGetOperand(store, 1), mlirOperationGetOperand(acc, 0))) {
    return false;
  }
  for (intptr_t d = 0; d < rank; d++) {
    if (!mlirValueEqual(mlirOperationGetOperand(store, d + 2), mlirOperationGetOperand(acc, d + 1)))
      return false;
  }
  return true;
}

typedef struct launches_of_s {
  MlirStringRef module, kernel;
  kiln_compiler_ops_t found;
} launches_of_t;

static bool ref_is(MlirStringRef a, MlirStringRef b) {
  return a.length == b.length && !memcmp(a.data, b.data, a.length);
}

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
                                            const char *text, const char *what, const kiln_target_t *t,
                                            MlirOperation *out_new) {
  MlirModule parsed = mlirModuleCreateParse(context, mlirStringRefCreateFromCString(text));
  if (mlirModuleIsNull(parsed)) {
    return KILN_STATUS(KILN_STATUS_INTERNAL, "the %s kernel for %s does not parse (kiln bug)", what, t->id);
  }
  MlirOperation gm = kiln_compiler_first_op(mlirModuleGetBody(parsed), "gpu.module");
  MlirOperation mine =
      mlirOperationIsNull(gm)
          ? gm
          : kiln_compiler_first_op(mlirRegionGetFirstBlock(mlirOperationGetRegion(gm, 0)), "gpu.func");
  if (mlirOperationIsNull(mine)) {
    mlirModuleDestroy(parsed);
    return KILN_STATUS(KILN_STATUS_INTERNAL, "the %s kernel for %s has no gpu.func (kiln bug)", what, t->id);
  }
  /* The old kernel's launches go first: they name it, and their argument types
   * are the old ones. */
  MlirOperation parent = mlirOperationGetParentOperation(func);
  launches_of_t l = {mlirStringAttrGetValue(
                         mlirOperationGetAttributeByName(parent, mlirStringRefCreateFromCString("sym_name"))),
                     mlirStringAttrGetValue(
                         mlirOperationGetAttributeByName(func, mlirStringRefCreateFromCString("sym_name"))),
                     {0}};
  mlirOperationWalk(mlirModuleGetOperation(module), find_launches, &l, MlirWalkPreOrder);
  for (size_t i = 0; i < l.found.n; i++) mlirOperationDestroy(l.found.items[i]);
  kiln_free(l.found.items);
  MlirOperation copy = mlirOperationClone(mine);
  mlirBlockInsertOwnedOperationBefore(mlirOperationGetBlock(func), func, copy);
  mlirOperationDestroy(func);
  if (out_new) *out_new = copy;
  mlirModuleDestroy(parsed);
  return NULL;
}
