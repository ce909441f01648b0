/* Kernels of dynamic shapes (host.h: Dynamic shapes).
 *
 * After outlining, a kernel may take memrefs of dynamic shape (memref<?x16xf32>)
 * and scalars (a loop bound the host computed from a dimension). Neither crosses
 * the HAL's kernel ABI as it is: kernels take bare buffer pointers, which need
 * static shapes, and kiln passes no scalars. So, for each launch and its kernel:
 *
 *  1. Every dynamic memref argument becomes a flat static memref<N x T> (N =
 *     FLAT_ELEMENTS, a bound no binding reaches), whose loads and stores use the
 *     row-major linear index; its dynamic dimensions become index arguments,
 *     which the host computes with memref.dim, and the kernel's memref.dim ops
 *     read them. The launch passes a memref.reinterpret_cast of its buffer.
 *  2. Every scalar argument becomes a 32-bit word of the function's kernel
 *     argument buffer (memref<M x i32>, allocated at the top of the host function
 *     and marked kiln.args): the host stores the word before the launch, and the
 *     kernel loads it from a buffer argument added last.
 *
 * The host plan (host.c) reads the argument buffer as an ARGS buffer whose words
 * are expressions over the inputs' dimensions.
 */
#include <mlir-c/AffineMap.h>
#include <mlir-c/BuiltinAttributes.h>
#include <mlir-c/BuiltinTypes.h>
#include <stdio.h>
#include <string.h>

#include "base/alloc.h"
#include "compiler/host.h"
#include "compiler/kernel_types.h"

/* Elements of a flat kernel buffer: past any tensor a 32-bit index reaches, and
 * small enough that 8-byte elements stay under 2^31 bytes. */
#define FLAT_ELEMENTS (INT64_C(1) << 28)

static MlirAttribute attr(MlirOperation op, const char *name) {
  return mlirOperationGetAttributeByName(op, mlirStringRefCreateFromCString(name));
}

static MlirOperation insert_before(MlirOperation before, MlirOperation op) {
  mlirBlockInsertOwnedOperationBefore(mlirOperationGetBlock(before), before, op);
  return op;
}

static MlirValue index_const(MlirContext ctx, MlirOperation before, int64_t v) {
  return kiln_compiler_int_const_before(ctx, before, mlirIndexTypeGet(ctx), v);
}

/* One-result op `name` of `operands` and result type `type` before `before`. */
#define make kiln_compiler_build_before

typedef struct launch_s {
  MlirOperation launch;
  MlirOperation func;      /* the gpu.func */
  MlirOperation host_func; /* the func.func holding the launch */
  size_t n_scalars;        /* its scalar arguments (after step 1) */
  size_t first_slot;       /* its first word in the host function's argument buffer */
  int64_t words;           /* the words of that buffer */
} launch_t;

typedef struct state_s {
  MlirContext ctx;
  MlirModule module;
  const char *name;
  launch_t *launches;
  size_t n_launches;
  kiln_status_t status;
} state_t;

static KILN_MUST_USE kiln_status_t refuse(const state_t *st, MlirOperation func, const char *what) {
  MlirAttribute sym = attr(func, "sym_name");
  MlirStringRef s =
      mlirAttributeIsNull(sym) ? mlirStringRefCreateFromCString("?") : mlirStringAttrGetValue(sym);
  return KILN_STATUS(KILN_STATUS_UNIMPLEMENTED, "%s: kernel %.*s %s (dynamic shapes)", st->name,
                     (int)s.length, s.data, what);
}

/* [first, count) of the launch's kernel operands. */
static void kernel_operands(MlirOperation launch, intptr_t *first, intptr_t *count) {
  MlirAttribute seg = attr(launch, "operandSegmentSizes");
  intptr_t n = mlirDenseArrayGetNumElements(seg);
  *first = 0;
  for (intptr_t i = 0; i < n - 2; i++) *first += mlirDenseI32ArrayGetElement(seg, i);
  *count = mlirDenseI32ArrayGetElement(seg, n - 2);
}

/* Replaces the launch's kernel operands with `ops` (updating the segment sizes). */
static void set_kernel_operands(MlirContext ctx, MlirOperation launch, const MlirValue *ops, intptr_t n) {
  intptr_t first, count;
  kernel_operands(launch, &first, &count);
  intptr_t total = mlirOperationGetNumOperands(launch);
  intptr_t rest = total - first - count;
  MlirValue *all = kiln_calloc((size_t)(first + n + rest) + 1, sizeof *all);
  for (intptr_t i = 0; i < first; i++) all[i] = mlirOperationGetOperand(launch, i);
  for (intptr_t i = 0; i < n; i++) all[first + i] = ops[i];
  for (intptr_t i = 0; i < rest; i++) all[first + n + i] = mlirOperationGetOperand(launch, first + count + i);
  mlirOperationSetOperands(launch, first + n + rest, all);
  kiln_free(all);
  MlirAttribute seg = attr(launch, "operandSegmentSizes");
  intptr_t ns = mlirDenseArrayGetNumElements(seg);
  int32_t *sizes = kiln_calloc((size_t)ns, sizeof *sizes);
  for (intptr_t i = 0; i < ns; i++) sizes[i] = mlirDenseI32ArrayGetElement(seg, i);
  sizes[ns - 2] = (int32_t)n;
  mlirOperationSetAttributeByName(launch, mlirStringRefCreateFromCString("operandSegmentSizes"),
                                  mlirDenseI32ArrayGet(ctx, ns, sizes));
  kiln_free(sizes);
}

/* Rewrites the gpu.func's function_type from its entry block's arguments. */
static void sync_function_type(MlirContext ctx, MlirOperation func) {
  MlirBlock entry = mlirRegionGetFirstBlock(mlirOperationGetRegion(func, 0));
  intptr_t n = mlirBlockGetNumArguments(entry);
  MlirType *types = kiln_calloc((size_t)n + 1, sizeof *types);
  for (intptr_t i = 0; i < n; i++) types[i] = mlirValueGetType(mlirBlockGetArgument(entry, i));
  MlirType ft = mlirFunctionTypeGet(ctx, n, types, 0, NULL);
  mlirOperationSetAttributeByName(func, mlirStringRefCreateFromCString("function_type"), mlirTypeAttrGet(ft));
  kiln_free(types);
}

static MlirOperation find_gpu_func(MlirModule module, MlirAttribute kernel) {
  MlirStringRef mod = mlirSymbolRefAttrGetRootReference(kernel);
  MlirStringRef fn = mlirFlatSymbolRefAttrGetValue(mlirSymbolRefAttrGetNestedReference(kernel, 0));
  for (MlirOperation m = mlirBlockGetFirstOperation(mlirModuleGetBody(module)); !mlirOperationIsNull(m);
       m = mlirOperationGetNextInBlock(m)) {
    if (!kiln_compiler_op_is(m, "gpu.module")) continue;
    MlirStringRef ms = mlirStringAttrGetValue(attr(m, "sym_name"));
    if (ms.length != mod.length || memcmp(ms.data, mod.data, mod.length) != 0) continue;
    MlirBlock body = mlirRegionGetFirstBlock(mlirOperationGetRegion(m, 0));
    for (MlirOperation f = mlirBlockGetFirstOperation(body); !mlirOperationIsNull(f);
         f = mlirOperationGetNextInBlock(f)) {
      if (!kiln_compiler_op_is(f, "gpu.func")) continue;
      MlirStringRef fs = mlirStringAttrGetValue(attr(f, "sym_name"));
      if (fs.length == fn.length && memcmp(fs.data, fn.data, fn.length) == 0) return f;
    }
  }
  return (MlirOperation){NULL};
}

static MlirWalkResult collect(MlirOperation op, void *user) {
  state_t *st = user;
  if (!kiln_compiler_op_is(op, "gpu.launch_func")) return MlirWalkResultAdvance;
  MlirAttribute kernel = attr(op, "kernel");
  MlirOperation f = mlirAttributeIsNull(kernel) || mlirSymbolRefAttrGetNumNestedReferences(kernel) != 1
                        ? (MlirOperation){NULL}
                        : find_gpu_func(st->module, kernel);
  if (mlirOperationIsNull(f)) return MlirWalkResultAdvance;
  MlirOperation host = mlirOperationGetParentOperation(op);
  while (!mlirOperationIsNull(host) && !kiln_compiler_op_is(host, "func.func"))
    host = mlirOperationGetParentOperation(host);
  st->launches = kiln_realloc(st->launches, (st->n_launches + 1) * sizeof *st->launches);
  st->launches[st->n_launches++] = (launch_t){.launch = op, .func = f, .host_func = host};
  return MlirWalkResultAdvance;
}

/* ---- 1. dynamic memrefs to flat ones ---- */

typedef struct flat_s {
  MlirValue arg;
  intptr_t rank;
  MlirValue sizes[8]; /* per dimension: an index value in the kernel */
  bool strided;       /* a static strided layout (else row-major over sizes) */
  int64_t strides[8], offset;
} flat_t;

/* The linear index of `indices` (operands [first, first + rank) of op): row-major
 * over the sizes, or the layout's static offset and strides. */
static MlirValue linear_index(MlirContext ctx, const flat_t *f, MlirOperation op, intptr_t first) {
  MlirType index = mlirIndexTypeGet(ctx);
  if (f->strided) {
    MlirValue lin = index_const(ctx, op, f->offset);
    for (intptr_t d = 0; d < f->rank; d++) {
      MlirValue mul[2] = {mlirOperationGetOperand(op, first + d), index_const(ctx, op, f->strides[d])};
      MlirValue add[2] = {lin, make("arith.muli", op, mul, 2, index)};
      lin = make("arith.addi", op, add, 2, index);
    }
    return lin;
  }
  if (f->rank == 0) return index_const(ctx, op, 0);
  MlirValue lin = mlirOperationGetOperand(op, first);
  for (intptr_t d = 1; d < f->rank; d++) {
    MlirValue mul[2] = {lin, f->sizes[d]};
    lin = make("arith.muli", op, mul, 2, index);
    MlirValue add[2] = {lin, mlirOperationGetOperand(op, first + d)};
    lin = make("arith.addi", op, add, 2, index);
  }
  return lin;
}

/* Replaces op's operands [first, first + rank) with one linear index. */
static void linearize(MlirContext ctx, const flat_t *f, MlirOperation op, intptr_t first) {
  MlirValue lin = linear_index(ctx, f, op, first);
  intptr_t n = mlirOperationGetNumOperands(op);
  MlirValue *ops = kiln_calloc((size_t)n + 1, sizeof *ops);
  intptr_t k = 0;
  for (intptr_t i = 0; i < first; i++) ops[k++] = mlirOperationGetOperand(op, i);
  ops[k++] = lin;
  for (intptr_t i = first + f->rank; i < n; i++) ops[k++] = mlirOperationGetOperand(op, i);
  mlirOperationSetOperands(op, k, ops);
  kiln_free(ops);
}

/* The users of `v` (collected first: rewriting them changes the use list). */
static size_t users_of(MlirValue v, MlirOperation **out) {
  size_t n = 0;
  for (MlirOpOperand u = mlirValueGetFirstUse(v); !mlirOpOperandIsNull(u); u = mlirOpOperandGetNextUse(u))
    n++;
  *out = kiln_calloc(n + 1, sizeof **out);
  size_t i = 0;
  for (MlirOpOperand u = mlirValueGetFirstUse(v); !mlirOpOperandIsNull(u); u = mlirOpOperandGetNextUse(u)) {
    (*out)[i++] = mlirOpOperandGetOwner(u);
  }
  return n;
}

static KILN_MUST_USE kiln_status_t flatten_uses(state_t *st, MlirOperation func, const flat_t *f) {
  MlirOperation *users = NULL;
  size_t n = users_of(f->arg, &users);
  kiln_status_t status = NULL;
  for (size_t i = 0; i < n && !status; i++) {
    MlirOperation u = users[i];
    if (kiln_compiler_op_is(u, "memref.dim")) {
      int64_t d = -1;
      MlirValue dv = mlirOperationGetOperand(u, 1);
      MlirOperation def = mlirValueIsAOpResult(dv) ? mlirOpResultGetOwner(dv) : (MlirOperation){NULL};
      MlirAttribute a = mlirOperationIsNull(def) || !kiln_compiler_op_is(def, "arith.constant")
                            ? (MlirAttribute){NULL}
                            : attr(def, "value");
      if (!mlirAttributeIsNull(a) && mlirAttributeIsAInteger(a)) d = mlirIntegerAttrGetValueInt(a);
      if (d < 0 || d >= f->rank) {
        status = refuse(st, func, "reads a dimension that is not a constant");
        break;
      }
      mlirValueReplaceAllUsesOfWith(mlirOperationGetResult(u, 0), f->sizes[d]);
      mlirOperationDestroy(u);
    } else if (kiln_compiler_op_is(u, "memref.load") || kiln_compiler_op_is(u, "memref.generic_atomic_rmw")) {
      linearize(st->ctx, f, u, 1);
    } else if (kiln_compiler_op_is(u, "memref.store") || kiln_compiler_op_is(u, "memref.atomic_rmw")) {
      linearize(st->ctx, f, u, 2);
    } else {
      MlirStringRef s = mlirIdentifierStr(mlirOperationGetName(u));
      char what[160];
      snprintf(what, sizeof what, "uses a buffer of dynamic shape in %.*s, which kiln cannot flatten yet",
               (int)s.length, s.data);
      status = refuse(st, func, what);
    }
  }
  kiln_free(users);
  return status;
}

/* A memref.reinterpret_cast of `v` (identity layout) to memref<N x T>, before op. */
static MlirValue host_flat_view(MlirContext ctx, MlirOperation before, MlirValue v, MlirType flat) {
  int64_t zero = 0, size = FLAT_ELEMENTS, one = 1;
  int32_t segments[4] = {1, 0, 0, 0};
  MlirNamedAttribute attrs[4] = {
      kiln_compiler_named_attr(ctx, "static_offsets", mlirDenseI64ArrayGet(ctx, 1, &zero)),
      kiln_compiler_named_attr(ctx, "static_sizes", mlirDenseI64ArrayGet(ctx, 1, &size)),
      kiln_compiler_named_attr(ctx, "static_strides", mlirDenseI64ArrayGet(ctx, 1, &one)),
      kiln_compiler_named_attr(ctx, "operandSegmentSizes", mlirDenseI32ArrayGet(ctx, 4, segments)),
  };
  MlirOperationState s = mlirOperationStateGet(mlirStringRefCreateFromCString("memref.reinterpret_cast"),
                                               mlirOperationGetLocation(before));
  mlirOperationStateAddOperands(&s, 1, &v);
  mlirOperationStateAddResults(&s, 1, &flat);
  mlirOperationStateAddAttributes(&s, 4, attrs);
  return mlirOperationGetResult(insert_before(before, mlirOperationCreate(&s)), 0);
}

static KILN_MUST_USE kiln_status_t flatten_launch(state_t *st, launch_t *l) {
  MlirContext ctx = st->ctx;
  MlirBlock entry = mlirRegionGetFirstBlock(mlirOperationGetRegion(l->func, 0));
  MlirOperation first_op = mlirBlockGetFirstOperation(entry);
  intptr_t first, count;
  kernel_operands(l->launch, &first, &count);
  if (count != mlirBlockGetNumArguments(entry)) return refuse(st, l->func, "does not match its launch");
  MlirValue *ops = kiln_calloc((size_t)count + 1, sizeof *ops);
  size_t n_ops = (size_t)count;
  for (intptr_t i = 0; i < count; i++) ops[i] = mlirOperationGetOperand(l->launch, first + i);
  kiln_status_t status = NULL;
  for (intptr_t i = 0; i < count && !status; i++) {
    MlirValue arg = mlirBlockGetArgument(entry, i);
    MlirType t = mlirValueGetType(arg);
    if (!mlirTypeIsAMemRef(t) || mlirShapedTypeHasStaticShape(t)) continue;
    flat_t f = {.arg = arg, .rank = mlirShapedTypeGetRank(t)};
    if (f.rank > 8) {
      status = refuse(st, l->func, "takes a buffer of rank above 8");
      break;
    }
    if (!mlirAffineMapIsIdentity(mlirMemRefTypeGetAffineMap(t))) {
      /* A view (a slice a concatenation writes): its layout must be static. */
      f.strided = mlirLogicalResultIsSuccess(mlirMemRefTypeGetStridesAndOffset(t, f.strides, &f.offset)) &&
                  !mlirShapedTypeIsDynamicStrideOrOffset(f.offset);
      for (intptr_t d = 0; f.strided && d < f.rank; d++) {
        f.strided = !mlirShapedTypeIsDynamicStrideOrOffset(f.strides[d]);
      }
      if (!f.strided) {
        status = refuse(st, l->func, "takes a view of dynamic strides or offset");
        break;
      }
    }
    for (intptr_t d = 0; d < f.rank; d++) {
      int64_t size = mlirShapedTypeGetDimSize(t, d);
      if (!mlirShapedTypeIsDynamicSize(size)) {
        f.sizes[d] = index_const(ctx, first_op, size);
        continue;
      }
      /* host: memref.dim %buffer, d; kernel: a new index argument */
      MlirValue dims[2] = {ops[i], index_const(ctx, l->launch, d)};
      ops = kiln_realloc(ops, (n_ops + 2) * sizeof *ops);
      ops[n_ops++] = make("memref.dim", l->launch, dims, 2, mlirIndexTypeGet(ctx));
      MlirLocation loc = mlirOperationGetLocation(l->func);
      f.sizes[d] = mlirBlockAddArgument(entry, mlirIndexTypeGet(ctx), loc);
    }
    int64_t n = FLAT_ELEMENTS;
    MlirType flat = mlirMemRefTypeGet(mlirShapedTypeGetElementType(t), 1, &n, mlirAttributeGetNull(),
                                      mlirMemRefTypeGetMemorySpace(t));
    status = flatten_uses(st, l->func, &f);
    mlirBlockArgumentSetType(arg, flat);
    ops[i] = host_flat_view(ctx, l->launch, ops[i], flat);
  }
  if (!status) {
    set_kernel_operands(ctx, l->launch, ops, (intptr_t)n_ops);
    sync_function_type(ctx, l->func);
  }
  kiln_free(ops);
  return status;
}

/* ---- 2. scalars to the argument buffer ---- */

static size_t count_scalars(MlirOperation func) {
  MlirBlock entry = mlirRegionGetFirstBlock(mlirOperationGetRegion(func, 0));
  size_t n = 0;
  for (intptr_t i = 0; i < mlirBlockGetNumArguments(entry); i++) {
    if (!mlirTypeIsAMemRef(mlirValueGetType(mlirBlockGetArgument(entry, i)))) n++;
  }
  return n;
}

/* A 32-bit word of `v` (index, i1..i64, f32) on the host, and the kernel's way back. */
static bool word_of(MlirContext ctx, MlirOperation before, MlirValue v, MlirValue *out) {
  MlirType t = mlirValueGetType(v);
  MlirType i32 = mlirIntegerTypeGet(ctx, 32);
  if (mlirTypeIsAIndex(t)) {
    *out = make("arith.index_cast", before, &v, 1, i32);
  } else if (mlirTypeIsAInteger(t) && mlirIntegerTypeGetWidth(t) == 32) {
    *out = v;
  } else if (mlirTypeIsAInteger(t) && mlirIntegerTypeGetWidth(t) > 32) {
    *out = make("arith.trunci", before, &v, 1, i32);
  } else if (mlirTypeIsAInteger(t)) {
    *out = make("arith.extsi", before, &v, 1, i32);
  } else {
    return false;
  }
  return true;
}

static MlirValue value_of_word(MlirContext ctx, MlirOperation before, MlirValue w, MlirType t) {
  if (mlirTypeIsAIndex(t)) return make("arith.index_cast", before, &w, 1, t);
  unsigned width = mlirIntegerTypeGetWidth(t);
  if (width == 32) return w;
  return make(width > 32 ? "arith.extsi" : "arith.trunci", before, &w, 1, t);
}

static KILN_MUST_USE kiln_status_t scalars_to_buffer(state_t *st, launch_t *l, MlirValue args,
                                                     int64_t words) {
  MlirContext ctx = st->ctx;
  MlirBlock entry = mlirRegionGetFirstBlock(mlirOperationGetRegion(l->func, 0));
  intptr_t first, count;
  kernel_operands(l->launch, &first, &count);
  int64_t shape = words;
  MlirType i32 = mlirIntegerTypeGet(ctx, 32);
  MlirType buf_type = mlirMemRefTypeGet(i32, 1, &shape, mlirAttributeGetNull(), mlirAttributeGetNull());
  MlirValue kargs = mlirBlockAddArgument(entry, buf_type, mlirOperationGetLocation(l->func));
  MlirOperation first_op = mlirBlockGetFirstOperation(entry);
  MlirValue *ops = kiln_calloc((size_t)count + 2, sizeof *ops);
  intptr_t n_ops = 0;
  size_t slot = l->first_slot;
  for (intptr_t i = 0; i < count; i++) {
    MlirValue v = mlirOperationGetOperand(l->launch, first + i);
    MlirValue arg = mlirBlockGetArgument(entry, i);
    if (mlirTypeIsAMemRef(mlirValueGetType(v))) {
      ops[n_ops++] = v;
      continue;
    }
    MlirValue w;
    if (!word_of(ctx, l->launch, v, &w)) {
      kiln_free(ops);
      return refuse(st, l->func, "takes a scalar that is not an integer or index");
    }
    MlirValue store[3] = {w, args, index_const(ctx, l->launch, (int64_t)slot)};
    MlirOperationState s = mlirOperationStateGet(mlirStringRefCreateFromCString("memref.store"),
                                                 mlirOperationGetLocation(l->launch));
    mlirOperationStateAddOperands(&s, 3, store);
    insert_before(l->launch, mlirOperationCreate(&s));
    MlirValue load[2] = {kargs, index_const(ctx, first_op, (int64_t)slot)};
    MlirValue loaded = make("memref.load", first_op, load, 2, i32);
    mlirValueReplaceAllUsesOfWith(arg, value_of_word(ctx, first_op, loaded, mlirValueGetType(arg)));
    slot++;
  }
  ops[n_ops++] = args;
  for (intptr_t i = count - 1; i >= 0; i--) {
    if (!mlirTypeIsAMemRef(mlirValueGetType(mlirBlockGetArgument(entry, i)))) {
      mlirBlockEraseArgument(entry, (unsigned)i);
    }
  }
  set_kernel_operands(ctx, l->launch, ops, n_ops);
  sync_function_type(ctx, l->func);
  kiln_free(ops);
  return NULL;
}

static MlirValue args_buffer(MlirContext ctx, MlirOperation host_func, int64_t words) {
  MlirBlock entry = mlirRegionGetFirstBlock(mlirOperationGetRegion(host_func, 0));
  MlirOperation first = mlirBlockGetFirstOperation(entry);
  MlirType type = mlirMemRefTypeGet(mlirIntegerTypeGet(ctx, 32), 1, &words, mlirAttributeGetNull(),
                                    mlirAttributeGetNull());
  MlirOperation alloc = kiln_compiler_static_alloc(ctx, mlirOperationGetLocation(host_func), type);
  mlirOperationSetDiscardableAttributeByName(alloc, mlirStringRefCreateFromCString("kiln.args"),
                                             mlirUnitAttrGet(ctx));
  return mlirOperationGetResult(insert_before(first, alloc), 0);
}

kiln_status_t kiln_compiler_dynamic_kernel_args(MlirContext context, MlirModule module, const char *name) {
  state_t st = {.ctx = context, .module = module, .name = name};
  mlirOperationWalk(mlirModuleGetOperation(module), collect, &st, MlirWalkPreOrder);
  kiln_status_t status = NULL;
  for (size_t i = 0; i < st.n_launches && !status; i++) {
    for (size_t k = 0; k < i; k++) {
      if (mlirOperationEqual(st.launches[k].func, st.launches[i].func)) {
        status = refuse(&st, st.launches[i].func, "is launched twice");
      }
    }
    if (!status) status = flatten_launch(&st, &st.launches[i]);
  }
  /* Words per host function: each launch's scalars, in launch order. */
  for (size_t i = 0; i < st.n_launches && !status; i++)
    st.launches[i].n_scalars = count_scalars(st.launches[i].func);
  for (size_t i = 0; i < st.n_launches && !status; i++) {
    launch_t *l = &st.launches[i];
    for (size_t k = 0; k < st.n_launches; k++) {
      if (!mlirOperationEqual(st.launches[k].host_func, l->host_func)) continue;
      if (k < i) l->first_slot += st.launches[k].n_scalars;
      l->words += (int64_t)st.launches[k].n_scalars;
    }
  }
  /* One buffer per host function that has scalars, then the stores and loads. */
  MlirOperation *hosts = kiln_calloc(st.n_launches + 1, sizeof *hosts);
  MlirValue *buffers = kiln_calloc(st.n_launches + 1, sizeof *buffers);
  size_t n_hosts = 0;
  for (size_t i = 0; i < st.n_launches && !status; i++) {
    launch_t *l = &st.launches[i];
    if (mlirOperationIsNull(l->host_func) || l->n_scalars == 0) continue;
    size_t h = 0;
    while (h < n_hosts && !mlirOperationEqual(hosts[h], l->host_func)) h++;
    if (h == n_hosts) {
      hosts[n_hosts] = l->host_func;
      buffers[n_hosts++] = args_buffer(context, l->host_func, l->words);
    }
    status = scalars_to_buffer(&st, l, buffers[h], l->words);
  }
  kiln_free(hosts);
  kiln_free(buffers);
  kiln_free(st.launches);
  return status;
}
