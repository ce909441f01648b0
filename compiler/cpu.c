/* CPU executables (cpu.h): gpu.func kernels -> workgroup functions -> an IREE HAL
 * executable library in an ELF shared object.
 *
 * The ABI (IREE's runtime/src/iree/hal/local/executable_library.h, read, not
 * copied; offsets for 64-bit targets):
 *   dispatch state:  workgroup_size x y z at 0 4 8 (u32 u32 u16), constant_count
 *                    at 10, workgroup_count x y z at 12 16 20 (u32 u32 u16),
 *                    constants at 24, binding_ptrs at 32, binding_lengths at 40
 *   workgroup state: workgroup_id x y z at 0 4 8 (u32 u32 u16)
 *   dispatch:        int fn(environment*, dispatch_state*, workgroup_state*)
 *   header:          {u32 version = 6, const char *name, u32 features, i32 sanitizer}
 *   library v0:      {header*, imports {u32, ptr}, exports {u32 count, ptrs, attrs,
 *                    params, occupancy, names, tags, parameter_names,
 *                    source_locations, stage_locations}, constants {u32},
 *                    sources {u32, ptr}}
 *   attrs:           {u64 flags, u16 local_memory_pages, u8 constant_count,
 *                    u8 binding_count, u32 wg x, u32 wg y, u16 wg z,
 *                    u16 parameter_count, u64 reserved[5]} (64 bytes)
 *   query:           const header **iree_hal_executable_library_query(u32
 *                    max_version, const environment *)
 * LLVM lays the structs out as C does, so the tables are LLVM-dialect globals. */
#include "compiler/cpu.h"

#include <errno.h>
#include <llvm-c/Core.h>
#include <llvm-c/TargetMachine.h>
#include <llvm-c/Transforms/PassBuilder.h>
#include <mlir-c/BuiltinAttributes.h>
#include <mlir-c/BuiltinTypes.h>
#include <mlir-c/Target/LLVMIR.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "base/alloc.h"
#include "base/buf.h"
#include "base/file.h"
#include "compiler/internal.h"
#include "compiler/kernel_types.h"

#define LIBRARY_VERSION 6
#define QUERY_SYMBOL    "iree_hal_executable_library_query"
#define LLD             "/usr/lib/llvm-22/bin/ld.lld"

static MlirStringRef sref(const char *s) { return mlirStringRefCreateFromCString(s); }

static void print_cb(MlirStringRef s, void *user) { kiln_buf_append(user, s.data, s.length); }

static void append_type(kiln_buf_t *b, MlirType t) { mlirTypePrint(t, print_cb, b); }

/* A kernel argument as the bare-pointer calling convention passes it. */
static void append_llvm_type(kiln_buf_t *b, MlirType t) {
  if (mlirTypeIsAMemRef(t)) {
    kiln_buf_append_str(b, "!llvm.ptr");
  } else if (mlirTypeIsAIndex(t)) {
    kiln_buf_append_str(b, "i64");
  } else {
    append_type(b, t);
  }
}

static char *symbol_of(MlirOperation op) {
  MlirAttribute sym = mlirOperationGetAttributeByName(op, sref("sym_name"));
  if (mlirAttributeIsNull(sym)) return NULL;
  MlirStringRef s = mlirStringAttrGetValue(sym);
  return kiln_strndup(s.data, s.length);
}

/* "x", "y" or "z" of a gpu dimension attribute (#gpu<dim x>); -1 if unreadable. */
static int dimension_of(MlirOperation op) {
  MlirAttribute a = mlirOperationGetAttributeByName(op, sref("dimension"));
  if (mlirAttributeIsNull(a)) return -1;
  kiln_buf_t text;
  kiln_buf_init(&text);
  mlirAttributePrint(a, print_cb, &text);
  int d = -1;
  for (size_t i = text.len; i-- > 0 && d < 0;) {
    if (text.data[i] >= 'x' && text.data[i] <= 'z') d = text.data[i] - 'x';
  }
  kiln_buf_deinit(&text);
  return d;
}

static MlirBlock body_of(MlirOperation op) { return mlirRegionGetFirstBlock(mlirOperationGetRegion(op, 0)); }

typedef struct gpu_ops_s {
  kiln_compiler_ops_t ids;   /* thread_id, block_id, block_dim, grid_dim */
  MlirOperation unsupported; /* the first op a CPU workgroup cannot run */
} gpu_ops_t;

static MlirWalkResult collect_gpu_ops(MlirOperation op, void *user) {
  gpu_ops_t *g = user;
  MlirStringRef n = mlirIdentifierStr(mlirOperationGetName(op));
  if (n.length < 4 || memcmp(n.data, "gpu.", 4) != 0) return MlirWalkResultAdvance;
  if (kiln_compiler_op_is(op, "gpu.thread_id") || kiln_compiler_op_is(op, "gpu.block_id") ||
      kiln_compiler_op_is(op, "gpu.block_dim") || kiln_compiler_op_is(op, "gpu.grid_dim")) {
    kiln_compiler_ops_push(&g->ids, op);
  } else if (mlirOperationIsNull(g->unsupported)) {
    g->unsupported = op;
  }
  return MlirWalkResultAdvance;
}

/* KILN_CPU_NAIVE (a benchmark hook, never set in production): the kernels as
 * the GPUs' invocations in plain loops, without the reordering, noalias or
 * contraction below, so bench_kernels can show what they gain in one run. */
static bool naive(void) {
  const char *v = getenv("KILN_CPU_NAIVE");
  return v && *v && strcmp(v, "0") != 0;
}

/* ---- the contiguous dimension inside the uniform loops ---- */

/* An op that may run again and again with the same result and no effect: index
 * and float arithmetic, never memory. */
static bool pure_op(MlirOperation op) {
  if (mlirOperationGetNumRegions(op) != 0) return false;
  MlirStringRef n = mlirIdentifierStr(mlirOperationGetName(op));
  static const char *const prefixes[] = {"arith.",       "index.",     "math.",
                                         "affine.apply", "affine.min", "affine.max"};
  for (size_t i = 0; i < sizeof prefixes / sizeof prefixes[0]; i++) {
    size_t len = strlen(prefixes[i]);
    if (n.length >= len && memcmp(n.data, prefixes[i], len) == 0) return true;
  }
  return false;
}

static bool inside(MlirOperation op, MlirOperation ancestor) {
  for (MlirOperation p = op; !mlirOperationIsNull(p); p = mlirOperationGetParentOperation(p)) {
    if (mlirOperationEqual(p, ancestor)) return true;
  }
  return false;
}

/* Whether `v` depends on `iv` through ops inside `scope` (depth-bounded: a
 * chain deeper than that counts as dependent). */
static bool depends_on(MlirValue v, MlirValue iv, MlirOperation scope, int depth) {
  if (mlirValueEqual(v, iv)) return true;
  if (depth > 64) return true;
  if (!mlirValueIsAOpResult(v)) return false;
  MlirOperation def = mlirOpResultGetOwner(v);
  if (!inside(def, scope)) return false;
  for (intptr_t i = 0; i < mlirOperationGetNumOperands(def); i++) {
    if (depends_on(mlirOperationGetOperand(def, i), iv, scope, depth + 1)) return true;
  }
  return false;
}

/* The perfect nest of scf.for loops whose bounds do not depend on thread x,
 * under the tx loop: its body is pure ops then (at most one scf.if with no
 * results and no else, whose then-block is likewise) a loop, then the yield;
 * each loop's body again. Returns how many loops (0: the kernel keeps its form). */
static size_t uniform_nest(MlirOperation tx, MlirOperation stop, MlirOperation *loops, size_t max) {
  MlirValue iv = mlirBlockGetArgument(body_of(tx), 0);
  MlirBlock block = body_of(tx);
  bool allow_if = true;
  size_t n = 0;
  while (n < max) {
    MlirOperation x = mlirBlockGetFirstOperation(block);
    while (!mlirOperationIsNull(x) && pure_op(x)) x = mlirOperationGetNextInBlock(x);
    if (mlirOperationIsNull(x)) break;
    MlirOperation after = mlirOperationGetNextInBlock(x);
    if (mlirOperationIsNull(after) || !kiln_compiler_op_is(after, "scf.yield") ||
        !mlirOperationIsNull(mlirOperationGetNextInBlock(after)) || mlirOperationGetNumResults(x) != 0) {
      break;
    }
    if (kiln_compiler_op_is(x, "scf.if") && allow_if && n == 0) {
      MlirBlock otherwise = mlirRegionGetFirstBlock(mlirOperationGetRegion(x, 1));
      if (!mlirBlockIsNull(otherwise) &&
          !kiln_compiler_op_is(mlirBlockGetFirstOperation(otherwise), "scf.yield")) {
        break;
      }
      allow_if = false;
      block = body_of(x);
      continue;
    }
    if (!kiln_compiler_op_is(x, "scf.for") || mlirOperationGetNumOperands(x) != 3 ||
        (!mlirOperationIsNull(stop) && mlirOperationEqual(x, stop))) {
      break;
    }
    bool uniform = true;
    for (intptr_t i = 0; i < 3 && uniform; i++)
      uniform = !depends_on(mlirOperationGetOperand(x, i), iv, tx, 0);
    if (!uniform) break;
    loops[n++] = x;
    block = body_of(x);
  }
  return n;
}

typedef kiln_compiler_vmap_t vmap_t;
#define vmap_put  kiln_compiler_vmap_put
#define vmap_find kiln_compiler_vmap_find

/* `v` as seen before `before`, outside `scope`: itself when defined outside,
 * else its (pure) defining ops cloned there. */
static MlirValue hoisted(MlirValue v, MlirOperation scope, MlirOperation before, vmap_t *map) {
  MlirValue out = v;
  if (vmap_find(map, v, &out)) return out;
  if (!mlirValueIsAOpResult(v) || !inside(mlirOpResultGetOwner(v), scope)) return v;
  MlirOperation def = mlirOpResultGetOwner(v);
  MlirOperation clone = mlirOperationClone(def);
  for (intptr_t i = 0; i < mlirOperationGetNumOperands(def); i++) {
    mlirOperationSetOperand(clone, i, hoisted(mlirOperationGetOperand(def, i), scope, before, map));
  }
  mlirBlockInsertOwnedOperationBefore(mlirOperationGetBlock(before), before, clone);
  for (intptr_t i = 0; i < mlirOperationGetNumResults(def); i++) {
    vmap_put(map, mlirOperationGetResult(def, i), mlirOperationGetResult(clone, i));
  }
  vmap_find(map, v, &out);
  return out;
}

/* An scf.for with no results or carried values, inserted before `before`. */
static MlirOperation make_for(MlirContext ctx, MlirOperation before, MlirValue lb, MlirValue ub,
                              MlirValue step) {
  MlirLocation loc = mlirOperationGetLocation(before);
  MlirType index = mlirIndexTypeGet(ctx);
  MlirRegion region = mlirRegionCreate();
  MlirBlock block = mlirBlockCreate(1, &index, &loc);
  mlirRegionAppendOwnedBlock(region, block);
  MlirOperationState ys = mlirOperationStateGet(sref("scf.yield"), loc);
  mlirBlockAppendOwnedOperation(block, mlirOperationCreate(&ys));
  MlirOperationState fs = mlirOperationStateGet(sref("scf.for"), loc);
  MlirValue operands[3] = {lb, ub, step};
  mlirOperationStateAddOperands(&fs, 3, operands);
  mlirOperationStateAddOwnedRegions(&fs, 1, &region);
  MlirOperation op = mlirOperationCreate(&fs);
  mlirBlockInsertOwnedOperationBefore(mlirOperationGetBlock(before), before, op);
  return op;
}

/* Moves an invocation loop (thread x: the contiguous dimension of kiln's
 * tiles) inside the perfect nest of loops every invocation runs alike (a
 * matmul's k, a reduction's axis), so LLVM's loop vectorizer sees the unit-stride
 * loop innermost, with the in-bounds guard as a mask:
 *   for tx { pure; if (in) { pure; for k { body } } }
 * becomes
 *   for k { for tx { pure; if (in) { pure; body } } }
 * Sound because the invocations of a kernel without barriers are independent and
 * the pure ops only compute (running them once per k changes nothing); each
 * invocation still runs its k iterations in order. */
typedef struct stores_s {
  MlirValue iv;
  MlirOperation scope;
  bool all_along; /* every store's last index depends on iv */
  size_t n;
} stores_t;

static MlirWalkResult check_store(MlirOperation op, void *user) {
  stores_t *s = user;
  if (!kiln_compiler_op_is(op, "memref.store")) return MlirWalkResultAdvance;
  intptr_t n = mlirOperationGetNumOperands(op);
  s->n++;
  if (n < 3 || !depends_on(mlirOperationGetOperand(op, n - 1), s->iv, s->scope, 0)) s->all_along = false;
  /* A row too short to fill vectors (a reduction's single column) is better
   * left to each invocation's own loop. */
  MlirType t = mlirValueGetType(mlirOperationGetOperand(op, 1));
  intptr_t rank = mlirShapedTypeGetRank(t);
  int64_t last = rank ? mlirShapedTypeGetDimSize(t, rank - 1) : 1;
  if (!mlirShapedTypeIsDynamicSize(last) && last < 8) s->all_along = false;
  return MlirWalkResultAdvance;
}

/* Whether every store under `loop` moves along memory with its variable (the
 * last index depends on it): the loop worth vectorizing. */
static bool stores_along(MlirOperation loop) {
  stores_t s = {mlirBlockGetArgument(body_of(loop), 0), loop, true, 0};
  mlirOperationWalk(loop, check_store, &s, MlirWalkPreOrder);
  return s.n > 0 && s.all_along;
}

static bool sink_invocation_loop(MlirContext ctx, MlirOperation tx, MlirOperation stop) {
  MlirOperation loops[8];
  size_t n = uniform_nest(tx, stop, loops, 8);
  if (!n) return false;
  vmap_t map = {0};
  MlirOperation before = tx, made[8];
  for (size_t i = 0; i < n; i++) {
    MlirValue b[3];
    for (intptr_t k = 0; k < 3; k++) b[k] = hoisted(mlirOperationGetOperand(loops[i], k), tx, before, &map);
    made[i] = make_for(ctx, before, b[0], b[1], b[2]);
    vmap_put(&map, mlirBlockGetArgument(body_of(loops[i]), 0), mlirBlockGetArgument(body_of(made[i]), 0));
    before = mlirBlockGetTerminator(body_of(made[i]));
  }
  mlirOperationMoveBefore(tx, before);
  for (size_t i = n; i-- > 0;) {
    MlirBlock body = body_of(loops[i]);
    mlirValueReplaceAllUsesOfWith(mlirBlockGetArgument(body, 0), mlirBlockGetArgument(body_of(made[i]), 0));
    for (MlirOperation op = mlirBlockGetFirstOperation(body); !mlirOperationIsNull(op);) {
      MlirOperation next = mlirOperationGetNextInBlock(op);
      if (!kiln_compiler_op_is(op, "scf.yield")) mlirOperationMoveBefore(op, loops[i]);
      op = next;
    }
    mlirOperationDestroy(loops[i]);
  }
  kiln_compiler_vmap_deinit(&map);
  return true;
}

typedef struct remap_s {
  const vmap_t *map;
} remap_t;

static MlirWalkResult remap_operands(MlirOperation op, void *user) {
  const vmap_t *map = ((remap_t *)user)->map;
  for (intptr_t i = 0; i < mlirOperationGetNumOperands(op); i++) {
    MlirValue to;
    if (vmap_find(map, mlirOperationGetOperand(op, i), &to)) mlirOperationSetOperand(op, i, to);
  }
  return MlirWalkResultAdvance;
}

/* Replaces `loop` (constant bounds, at most `max_trip` iterations) by copies of
 * its body, one per iteration, its variable a constant in each. */
static bool unroll_fully(MlirContext ctx, MlirOperation loop, int64_t max_trip) {
  int64_t lb, ub, step;
  if (!kiln_compiler_int_constant_value(mlirOperationGetOperand(loop, 0), &lb) ||
      !kiln_compiler_int_constant_value(mlirOperationGetOperand(loop, 1), &ub) ||
      !kiln_compiler_int_constant_value(mlirOperationGetOperand(loop, 2), &step) || step <= 0 ||
      (ub - lb + step - 1) / step > max_trip) {
    return false;
  }
  MlirBlock body = body_of(loop);
  MlirValue iv = mlirBlockGetArgument(body, 0);
  for (int64_t v = lb; v < ub; v += step) {
    vmap_t map = {0};
    vmap_put(&map, iv, kiln_compiler_int_const_before(ctx, loop, mlirIndexTypeGet(ctx), v));
    for (MlirOperation op = mlirBlockGetFirstOperation(body); !mlirOperationIsNull(op);
         op = mlirOperationGetNextInBlock(op)) {
      if (kiln_compiler_op_is(op, "scf.yield")) break;
      MlirOperation clone = mlirOperationClone(op);
      remap_t r = {&map};
      mlirOperationWalk(clone, remap_operands, &r, MlirWalkPreOrder);
      mlirBlockInsertOwnedOperationBefore(mlirOperationGetBlock(loop), loop, clone);
      for (intptr_t i = 0; i < mlirOperationGetNumResults(op); i++) {
        vmap_put(&map, mlirOperationGetResult(op, i), mlirOperationGetResult(clone, i));
      }
    }
    kiln_compiler_vmap_deinit(&map);
  }
  mlirOperationDestroy(loop);
  return true;
}

/* Thread z, when the kernel's stores run along it (a convolution's run along
 * its filters, a loop inside every invocation, and stays as it is); then thread
 * y inside the same loops, unrolled, so the rows of a tile share each loaded
 * value of the other operand and keep their sums in registers. */
static void sink_thread_loops(MlirContext ctx, MlirOperation ty, MlirOperation tx) {
  if (!stores_along(tx) || !sink_invocation_loop(ctx, tx, (MlirOperation){NULL})) return;
  if (sink_invocation_loop(ctx, ty, tx)) unroll_fully(ctx, ty, 8);
}

/* One gpu.func as func.func @name(args..., wid x y z, wcount x y z: index): its
 * body inside loops over the workgroup's invocations, thread z outermost and x,
 * the contiguous dimension (host.h), innermost. */
static KILN_MUST_USE kiln_status_t workgroup_function(MlirContext ctx, MlirOperation kernel,
                                                      const uint32_t block[3], MlirBlock into,
                                                      const char *name) {
  char *sym = symbol_of(kernel);
  MlirBlock entry = body_of(kernel);
  MlirAttribute fty = mlirOperationGetAttributeByName(kernel, sref("function_type"));
  intptr_t n_in = mlirAttributeIsNull(fty) ? -1 : mlirFunctionTypeGetNumInputs(mlirTypeAttrGetValue(fty));
  kiln_status_t st = NULL;
  if (!mlirBlockIsNull(mlirBlockGetNextInRegion(entry)) || n_in != mlirBlockGetNumArguments(entry)) {
    st = KILN_STATUS(KILN_STATUS_UNIMPLEMENTED,
                     "%s: kernel %s uses workgroup memory or several blocks; kiln's CPU code runs neither",
                     name, sym ? sym : "?");
    kiln_free(sym);
    return st;
  }
  kiln_buf_t t;
  kiln_buf_init(&t);
  kiln_buf_appendf(&t, "func.func @%s(", sym);
  for (intptr_t i = 0; i < n_in; i++) {
    kiln_buf_appendf(&t, "%%a%ld: ", (long)i);
    append_type(&t, mlirValueGetType(mlirBlockGetArgument(entry, i)));
    kiln_buf_append_str(&t, ", ");
  }
  kiln_buf_appendf(&t,
                   "%%wx: index, %%wy: index, %%wz: index, %%nx: index, %%ny: index, %%nz: index) {\n"
                   "  %%bx = arith.constant %u : index\n  %%by = arith.constant %u : index\n"
                   "  %%bz = arith.constant %u : index\n  %%c0 = arith.constant 0 : index\n"
                   "  %%c1 = arith.constant 1 : index\n"
                   "  scf.for %%tz = %%c0 to %%bz step %%c1 {\n    scf.for %%ty = %%c0 to %%by step %%c1 {\n"
                   "      scf.for %%tx = %%c0 to %%bx step %%c1 {\n      }\n    }\n  }\n  return\n}",
                   block[0], block[1], block[2]);
  MlirOperation func = mlirOperationCreateParse(ctx, mlirStringRefCreate(t.data, t.len), sref("kiln-cpu"));
  kiln_buf_deinit(&t);
  if (mlirOperationIsNull(func)) {
    kiln_free(sym);
    return KILN_STATUS(KILN_STATUS_INTERNAL, "%s: kiln's CPU workgroup function does not parse", name);
  }
  mlirBlockAppendOwnedOperation(into, func);
  MlirBlock fbody = body_of(func);
  MlirOperation consts[3];
  MlirOperation c = mlirBlockGetFirstOperation(fbody);
  for (int d = 0; d < 3; d++, c = mlirOperationGetNextInBlock(c)) consts[d] = c;
  MlirOperation loop[3];
  loop[0] = kiln_compiler_first_op(fbody, "scf.for");
  loop[1] = kiln_compiler_first_op(body_of(loop[0]), "scf.for");
  loop[2] = kiln_compiler_first_op(body_of(loop[1]), "scf.for");
  MlirOperation yield = mlirBlockGetTerminator(body_of(loop[2]));
  for (MlirOperation op = mlirBlockGetFirstOperation(entry); !mlirOperationIsNull(op);) {
    MlirOperation next = mlirOperationGetNextInBlock(op);
    if (!kiln_compiler_op_is(op, "gpu.return")) mlirOperationMoveBefore(op, yield);
    op = next;
  }
  for (intptr_t i = 0; i < n_in; i++) {
    mlirValueReplaceAllUsesOfWith(mlirBlockGetArgument(entry, i), mlirBlockGetArgument(fbody, i));
  }
  gpu_ops_t g = {0};
  mlirOperationWalk(func, collect_gpu_ops, &g, MlirWalkPreOrder);
  if (!mlirOperationIsNull(g.unsupported)) {
    MlirStringRef op = mlirIdentifierStr(mlirOperationGetName(g.unsupported));
    st = KILN_STATUS(KILN_STATUS_UNIMPLEMENTED,
                     "%s: kernel %s uses %.*s, which kiln's CPU code does not run yet", name, sym,
                     (int)op.length, op.data);
  }
  for (size_t i = 0; i < g.ids.n && !st; i++) {
    MlirOperation op = g.ids.items[i];
    int d = dimension_of(op);
    if (d < 0) {
      st = KILN_STATUS(KILN_STATUS_INTERNAL, "%s: kernel %s: a gpu id op without a dimension", name, sym);
      break;
    }
    MlirValue v;
    if (kiln_compiler_op_is(op, "gpu.thread_id")) {
      v = mlirBlockGetArgument(body_of(loop[2 - d]), 0); /* loop[0] is z, loop[2] x */
    } else if (kiln_compiler_op_is(op, "gpu.block_id")) {
      v = mlirBlockGetArgument(fbody, n_in + d);
    } else if (kiln_compiler_op_is(op, "gpu.grid_dim")) {
      v = mlirBlockGetArgument(fbody, n_in + 3 + d);
    } else {
      v = mlirOperationGetResult(consts[d], 0);
    }
    mlirValueReplaceAllUsesOfWith(mlirOperationGetResult(op, 0), v);
    mlirOperationDestroy(op);
  }
  kiln_free(g.ids.items);
  kiln_free(sym);
  if (!st && !naive()) sink_thread_loops(ctx, loop[1], loop[2]);
  return st;
}

/* ---- the library, in the LLVM dialect ---- */

static void append_string_global(kiln_buf_t *t, const char *sym, const char *value) {
  size_t n = strlen(value) + 1;
  kiln_buf_appendf(
      t,
      "  llvm.mlir.global internal constant @%s(\"%s\\00\") {addr_space = 0 : i32} : !llvm.array<%zu x i8>\n",
      sym, value, n);
}

typedef struct kernel_sig_s {
  char *name;
  MlirType *args; /* the gpu.func's argument types */
  size_t n_args;
  uint32_t block[3];
  uint32_t n_bindings, n_constants;
} kernel_sig_t;

/* The dispatch function of one kernel, its declaration for the parser, and the
 * text pieces of the tables. */
static void append_dispatch(kiln_buf_t *t, const kernel_sig_t *k) {
  kiln_buf_appendf(t, "  llvm.func @%s(", k->name);
  for (size_t i = 0; i < k->n_args; i++) {
    append_llvm_type(t, k->args[i]);
    kiln_buf_append_str(t, ", ");
  }
  kiln_buf_append_str(t, "i64, i64, i64, i64, i64, i64)\n");
  kiln_buf_appendf(t,
                   "  llvm.func @%s__dispatch(%%env: !llvm.ptr, %%ds: !llvm.ptr, %%ws: !llvm.ptr) -> i32 {\n"
                   "    %%cpa = llvm.getelementptr %%ds[24] : (!llvm.ptr) -> !llvm.ptr, i8\n"
                   "    %%cp = llvm.load %%cpa : !llvm.ptr -> !llvm.ptr\n"
                   "    %%bpa = llvm.getelementptr %%ds[32] : (!llvm.ptr) -> !llvm.ptr, i8\n"
                   "    %%bp = llvm.load %%bpa : !llvm.ptr -> !llvm.ptr\n",
                   k->name);
  static const struct {
    const char *base, *type;
    int offset;
  } ids[6] = {{"ws", "i32", 0},  {"ws", "i32", 4},  {"ws", "i16", 8},
              {"ds", "i32", 12}, {"ds", "i32", 16}, {"ds", "i16", 20}};
  for (int i = 0; i < 6; i++) {
    kiln_buf_appendf(t,
                     "    %%g%da = llvm.getelementptr %%%s[%d] : (!llvm.ptr) -> !llvm.ptr, i8\n"
                     "    %%g%dn = llvm.load %%g%da : !llvm.ptr -> %s\n"
                     "    %%g%d = llvm.zext %%g%dn : %s to i64\n",
                     i, ids[i].base, ids[i].offset, i, i, ids[i].type, i, i, ids[i].type);
  }
  uint32_t binding = 0, word = 0;
  for (size_t i = 0; i < k->n_args; i++) {
    MlirType a = k->args[i];
    if (mlirTypeIsAMemRef(a)) {
      kiln_buf_appendf(t,
                       "    %%p%zua = llvm.getelementptr %%bp[%u] : (!llvm.ptr) -> !llvm.ptr, !llvm.ptr\n"
                       "    %%p%zu = llvm.load %%p%zua : !llvm.ptr -> !llvm.ptr\n",
                       i, binding++, i, i);
      continue;
    }
    /* A push constant: one 32-bit word, or two (low first) for 64-bit values. */
    kiln_buf_t ty;
    kiln_buf_init(&ty);
    append_llvm_type(&ty, a);
    kiln_buf_appendf(t,
                     "    %%p%zua = llvm.getelementptr %%cp[%u] : (!llvm.ptr) -> !llvm.ptr, i32\n"
                     "    %%p%zu = llvm.load %%p%zua {alignment = 4 : i64} : !llvm.ptr -> %s\n",
                     i, word, i, i, ty.data);
    word += (mlirTypeIsAIndex(a) || (mlirTypeIsAInteger(a) && mlirIntegerTypeGetWidth(a) > 32) ||
             (mlirTypeIsAFloat(a) && mlirFloatTypeGetWidth(a) > 32))
                ? 2
                : 1;
    kiln_buf_deinit(&ty);
  }
  kiln_buf_appendf(t, "    llvm.call @%s(", k->name);
  for (size_t i = 0; i < k->n_args; i++) kiln_buf_appendf(t, "%%p%zu, ", i);
  kiln_buf_append_str(t, "%g0, %g1, %g2, %g3, %g4, %g5) : (");
  for (size_t i = 0; i < k->n_args; i++) {
    append_llvm_type(t, k->args[i]);
    kiln_buf_append_str(t, ", ");
  }
  kiln_buf_append_str(t,
                      "i64, i64, i64, i64, i64, i64) -> ()\n"
                      "    %z = llvm.mlir.constant(0 : i32) : i32\n    llvm.return %z : i32\n  }\n");
}

#define ATTRS_TYPE  "!llvm.struct<(i64, i16, i8, i8, i32, i32, i16, i16, array<5 x i64>)>"
#define HEADER_TYPE "!llvm.struct<(i32, ptr, i32, i32)>"
#define LIBRARY_TYPE                                                                                    \
  "!llvm.struct<(ptr, struct<(i32, ptr)>, struct<(i32, ptr, ptr, ptr, ptr, ptr, ptr, ptr, ptr, ptr)>, " \
  "struct<(i32)>, struct<(i32, ptr)>)>"

static char *library_text(const kernel_sig_t *ks, size_t n, const char *library_name) {
  kiln_buf_t t;
  kiln_buf_init(&t);
  kiln_buf_append_str(&t, "module {\n");
  for (size_t i = 0; i < n; i++) append_dispatch(&t, &ks[i]);
  for (size_t i = 0; i < n; i++) {
    char sym[48];
    snprintf(sym, sizeof sym, "__kiln_export_name_%zu", i);
    append_string_global(&t, sym, ks[i].name);
  }
  append_string_global(&t, "__kiln_library_name", library_name);
  /* export pointers */
  kiln_buf_appendf(&t,
                   "  llvm.mlir.global internal constant @__kiln_export_ptrs() {addr_space = 0 : i32} : "
                   "!llvm.array<%zu x ptr> {\n    %%r0 = llvm.mlir.undef : !llvm.array<%zu x ptr>\n",
                   n, n);
  for (size_t i = 0; i < n; i++) {
    kiln_buf_appendf(&t,
                     "    %%f%zu = llvm.mlir.addressof @%s__dispatch : !llvm.ptr\n"
                     "    %%r%zu = llvm.insertvalue %%f%zu, %%r%zu[%zu] : !llvm.array<%zu x ptr>\n",
                     i, ks[i].name, i + 1, i, i, i, n);
  }
  kiln_buf_appendf(&t, "    llvm.return %%r%zu : !llvm.array<%zu x ptr>\n  }\n", n, n);
  /* export names */
  kiln_buf_appendf(&t,
                   "  llvm.mlir.global internal constant @__kiln_export_names() {addr_space = 0 : i32} : "
                   "!llvm.array<%zu x ptr> {\n    %%r0 = llvm.mlir.undef : !llvm.array<%zu x ptr>\n",
                   n, n);
  for (size_t i = 0; i < n; i++) {
    kiln_buf_appendf(&t,
                     "    %%f%zu = llvm.mlir.addressof @__kiln_export_name_%zu : !llvm.ptr\n"
                     "    %%r%zu = llvm.insertvalue %%f%zu, %%r%zu[%zu] : !llvm.array<%zu x ptr>\n",
                     i, i, i + 1, i, i, i, n);
  }
  kiln_buf_appendf(&t, "    llvm.return %%r%zu : !llvm.array<%zu x ptr>\n  }\n", n, n);
  /* export attributes */
  kiln_buf_appendf(&t,
                   "  llvm.mlir.global internal constant @__kiln_export_attrs() {addr_space = 0 : i32} : "
                   "!llvm.array<%zu x " ATTRS_TYPE
                   "> {\n    %%r0 = llvm.mlir.undef : !llvm.array<%zu x " ATTRS_TYPE ">\n",
                   n, n);
  for (size_t i = 0; i < n; i++) {
    /* The fields kiln sets (the rest stay zero): constant and binding counts,
     * workgroup size. */
    static const struct {
      int index;
      const char *type;
    } fields[] = {{2, "i8"}, {3, "i8"}, {4, "i32"}, {5, "i32"}, {6, "i16"}};
    const uint32_t values[] = {ks[i].n_constants, ks[i].n_bindings, ks[i].block[0], ks[i].block[1],
                               ks[i].block[2]};
    kiln_buf_appendf(&t, "    %%a%zu_0 = llvm.mlir.zero : " ATTRS_TYPE "\n", i);
    for (int f = 0; f < 5; f++) {
      kiln_buf_appendf(&t,
                       "    %%v%zu_%d = llvm.mlir.constant(%u : %s) : %s\n"
                       "    %%a%zu_%d = llvm.insertvalue %%v%zu_%d, %%a%zu_%d[%d] : " ATTRS_TYPE "\n",
                       i, f, values[f], fields[f].type, fields[f].type, i, f + 1, i, f, i, f,
                       fields[f].index);
    }
    kiln_buf_appendf(
        &t, "    %%r%zu = llvm.insertvalue %%a%zu_5, %%r%zu[%zu] : !llvm.array<%zu x " ATTRS_TYPE ">\n",
        i + 1, i, i, i, n);
  }
  kiln_buf_appendf(&t, "    llvm.return %%r%zu : !llvm.array<%zu x " ATTRS_TYPE ">\n  }\n", n, n);
  /* header */
  kiln_buf_append_str(
      &t, "  llvm.mlir.global internal constant @__kiln_header() {addr_space = 0 : i32} : " HEADER_TYPE
          " {\n    %zero = llvm.mlir.zero : " HEADER_TYPE "\n");
  kiln_buf_appendf(&t,
                   "    %%v = llvm.mlir.constant(%d : i32) : i32\n"
                   "    %%nm = llvm.mlir.addressof @__kiln_library_name : !llvm.ptr\n"
                   "    %%h0 = llvm.insertvalue %%v, %%zero[0] : " HEADER_TYPE
                   "\n"
                   "    %%h1 = llvm.insertvalue %%nm, %%h0[1] : " HEADER_TYPE
                   "\n"
                   "    llvm.return %%h1 : " HEADER_TYPE "\n  }\n",
                   LIBRARY_VERSION);
  /* library */
  kiln_buf_appendf(
      &t,
      "  llvm.mlir.global internal constant @__kiln_library() {addr_space = 0 : i32} : " LIBRARY_TYPE
      " {\n    %%zero = llvm.mlir.zero : " LIBRARY_TYPE
      "\n"
      "    %%h = llvm.mlir.addressof @__kiln_header : !llvm.ptr\n"
      "    %%n = llvm.mlir.constant(%zu : i32) : i32\n"
      "    %%p = llvm.mlir.addressof @__kiln_export_ptrs : !llvm.ptr\n"
      "    %%a = llvm.mlir.addressof @__kiln_export_attrs : !llvm.ptr\n"
      "    %%nm = llvm.mlir.addressof @__kiln_export_names : !llvm.ptr\n"
      "    %%l0 = llvm.insertvalue %%h, %%zero[0] : " LIBRARY_TYPE
      "\n"
      "    %%l1 = llvm.insertvalue %%n, %%l0[2, 0] : " LIBRARY_TYPE
      "\n"
      "    %%l2 = llvm.insertvalue %%p, %%l1[2, 1] : " LIBRARY_TYPE
      "\n"
      "    %%l3 = llvm.insertvalue %%a, %%l2[2, 2] : " LIBRARY_TYPE
      "\n"
      "    %%l4 = llvm.insertvalue %%nm, %%l3[2, 5] : " LIBRARY_TYPE
      "\n"
      "    llvm.return %%l4 : " LIBRARY_TYPE "\n  }\n",
      n);
  /* the query: the library for readers of version 6 or later, else NULL */
  kiln_buf_appendf(&t,
                   "  llvm.func @" QUERY_SYMBOL
                   "(%%v: i32, %%env: !llvm.ptr) -> !llvm.ptr {\n"
                   "    %%six = llvm.mlir.constant(%d : i32) : i32\n"
                   "    %%ok = llvm.icmp \"uge\" %%v, %%six : i32\n"
                   "    %%l = llvm.mlir.addressof @__kiln_library : !llvm.ptr\n"
                   "    %%z = llvm.mlir.zero : !llvm.ptr\n"
                   "    %%r = llvm.select %%ok, %%l, %%z : i1, !llvm.ptr\n"
                   "    llvm.return %%r : !llvm.ptr\n  }\n}\n",
                   LIBRARY_VERSION);
  return kiln_buf_take(&t);
}

/* Moves every op of `from`'s body but declarations of functions `into` defines. */
static void merge_into(MlirModule into, MlirModule from) {
  MlirBlock dst = mlirModuleGetBody(into);
  for (MlirOperation op = mlirBlockGetFirstOperation(mlirModuleGetBody(from)); !mlirOperationIsNull(op);) {
    MlirOperation next = mlirOperationGetNextInBlock(op);
    bool declaration = kiln_compiler_op_is(op, "llvm.func") && mlirBlockIsNull(body_of(op));
    if (!declaration) {
      mlirOperationRemoveFromParent(op);
      mlirBlockAppendOwnedOperation(dst, op);
    }
    op = next;
  }
}

/* ---- LLVM IR -> object -> ELF ---- */

/* A floating-point add, subtract or multiply that carries a loop's value: an
 * operand or a user is a phi (the accumulator of a reduction). */
static bool carries_phi(LLVMValueRef inst) {
  LLVMOpcode op = LLVMGetInstructionOpcode(inst);
  if (op != LLVMFAdd && op != LLVMFSub && op != LLVMFMul) return false;
  for (int i = 0; i < LLVMGetNumOperands(inst); i++) {
    LLVMValueRef v = LLVMGetOperand(inst, (unsigned)i);
    if (LLVMIsAInstruction(v) && LLVMGetInstructionOpcode(v) == LLVMPHI) return true;
  }
  for (LLVMUseRef u = LLVMGetFirstUse(inst); u; u = LLVMGetNextUse(u)) {
    LLVMValueRef user = LLVMGetUser(u);
    if (LLVMIsAInstruction(user) && LLVMGetInstructionOpcode(user) == LLVMPHI) return true;
  }
  return false;
}

/* noalias on every pointer parameter of kernel functions the plan binds without
 * overlap (inlining into the dispatch function turns it into scopes);
 * contraction (FMA) on every floating-point instruction, and reassociation only
 * on the ones that carry a loop's accumulator, so the vectorizer can split a
 * reduction into lanes. Reassociating everything let LLVM regroup exact
 * power-of-two scalings (x * 2^63 * 2^64 * 64 became x * inf) and would undo
 * rounding by adding and taking away 1.5 * 2^23. */
static void annotate(LLVMModuleRef ir, LLVMContextRef llvm, const kernel_sig_t *ks, const bool *noalias,
                     size_t n) {
  unsigned kind = LLVMGetEnumAttributeKindForName("noalias", 7);
  LLVMAttributeRef attr = LLVMCreateEnumAttribute(llvm, kind, 0);
  for (size_t k = 0; noalias && k < n; k++) {
    LLVMValueRef f = noalias[k] ? LLVMGetNamedFunction(ir, ks[k].name) : NULL;
    for (unsigned i = 0; f && i < LLVMCountParams(f); i++) {
      if (LLVMGetTypeKind(LLVMTypeOf(LLVMGetParam(f, i))) == LLVMPointerTypeKind) {
        LLVMAddAttributeAtIndex(f, i + 1, attr);
      }
    }
  }
  for (LLVMValueRef f = LLVMGetFirstFunction(ir); f; f = LLVMGetNextFunction(f)) {
    for (LLVMBasicBlockRef bb = LLVMGetFirstBasicBlock(f); bb; bb = LLVMGetNextBasicBlock(bb)) {
      for (LLVMValueRef inst = LLVMGetFirstInstruction(bb); inst; inst = LLVMGetNextInstruction(inst)) {
        if (LLVMCanValueUseFastMathFlags(inst)) {
          LLVMSetFastMathFlags(inst, LLVMGetFastMathFlags(inst) | LLVMFastMathAllowContract |
                                         (carries_phi(inst) ? LLVMFastMathAllowReassoc : 0));
        }
      }
    }
  }
}

static KILN_MUST_USE kiln_status_t emit(MlirModule module, const kiln_target_t *t, const kernel_sig_t *ks,
                                        const bool *noalias, size_t n_kernels, const char *name,
                                        kiln_buf_t *object) {
  LLVMContextRef llvm = LLVMContextCreate();
  LLVMModuleRef ir = mlirTranslateModuleToLLVMIR(mlirModuleGetOperation(module), llvm);
  kiln_status_t st = NULL;
  if (!ir) {
    LLVMContextDispose(llvm);
    return KILN_STATUS(KILN_STATUS_INTERNAL, "%s: translation to LLVM IR failed for %s", name, t->id);
  }
  LLVMTargetRef target = NULL;
  char *error = NULL;
  if (LLVMGetTargetFromTriple(t->llvm_triple, &target, &error)) {
    st = KILN_STATUS(KILN_STATUS_INTERNAL, "%s: no LLVM target for %s: %s", name, t->llvm_triple,
                     error ? error : "?");
    LLVMDisposeMessage(error);
    LLVMDisposeModule(ir);
    LLVMContextDispose(llvm);
    return st;
  }
  LLVMTargetMachineOptionsRef tm_options = LLVMCreateTargetMachineOptions();
  LLVMTargetMachineOptionsSetCPU(tm_options, t->chip);
  if (t->cpu_features) LLVMTargetMachineOptionsSetFeatures(tm_options, t->cpu_features);
  if (t->cpu_abi) LLVMTargetMachineOptionsSetABI(tm_options, t->cpu_abi);
  LLVMTargetMachineOptionsSetCodeGenOptLevel(tm_options, LLVMCodeGenLevelAggressive);
  LLVMTargetMachineOptionsSetRelocMode(tm_options, LLVMRelocPIC);
  LLVMTargetMachineRef tm = LLVMCreateTargetMachineWithOptions(target, t->llvm_triple, tm_options);
  LLVMDisposeTargetMachineOptions(tm_options);
  LLVMSetTarget(ir, t->llvm_triple);
  LLVMTargetDataRef layout = LLVMCreateTargetDataLayout(tm);
  LLVMSetModuleDataLayout(ir, layout);
  /* Everything but the query stays inside the ELF; no function may become a
   * call into a C library the loader does not have (memset, memcpy). */
  if (!naive()) annotate(ir, llvm, ks, noalias, n_kernels);
  LLVMAttributeRef cpu =
      LLVMCreateStringAttribute(llvm, "target-cpu", 10, t->chip, (unsigned)strlen(t->chip));
  LLVMAttributeRef no_builtins = LLVMCreateStringAttribute(llvm, "no-builtins", 11, "", 0);
  for (LLVMValueRef f = LLVMGetFirstFunction(ir); f; f = LLVMGetNextFunction(f)) {
    if (LLVMIsDeclaration(f)) continue;
    size_t len = 0;
    const char *fname = LLVMGetValueName2(f, &len);
    if (len != strlen(QUERY_SYMBOL) || memcmp(fname, QUERY_SYMBOL, len) != 0) {
      LLVMSetLinkage(f, LLVMInternalLinkage);
    }
    LLVMAddAttributeAtIndex(f, LLVMAttributeFunctionIndex, cpu);
    if (t->cpu_features) {
      LLVMAddAttributeAtIndex(f, LLVMAttributeFunctionIndex,
                              LLVMCreateStringAttribute(llvm, "target-features", 15, t->cpu_features,
                                                        (unsigned)strlen(t->cpu_features)));
    }
    LLVMAddAttributeAtIndex(f, LLVMAttributeFunctionIndex, no_builtins);
    if (t->vector_bits) {
      char bits[16];
      snprintf(bits, sizeof bits, "%u", t->vector_bits);
      LLVMAddAttributeAtIndex(
          f, LLVMAttributeFunctionIndex,
          LLVMCreateStringAttribute(llvm, "prefer-vector-width", 19, bits, (unsigned)strlen(bits)));
    }
  }
  LLVMPassBuilderOptionsRef options = LLVMCreatePassBuilderOptions();
  LLVMErrorRef err = LLVMRunPasses(ir, "default<O3>", tm, options);
  LLVMDisposePassBuilderOptions(options);
  if (err) {
    char *msg = LLVMGetErrorMessage(err);
    st = KILN_STATUS(KILN_STATUS_INTERNAL, "%s: LLVM's optimizer failed for %s: %s", name, t->id, msg);
    LLVMDisposeErrorMessage(msg);
  }
  LLVMMemoryBufferRef buffer = NULL;
  if (!st && LLVMTargetMachineEmitToMemoryBuffer(tm, ir, LLVMObjectFile, &error, &buffer)) {
    st = KILN_STATUS(KILN_STATUS_INTERNAL, "%s: code generation for %s failed: %s", name, t->id,
                     error ? error : "?");
    LLVMDisposeMessage(error);
  }
  if (!st) {
    kiln_buf_append(object, LLVMGetBufferStart(buffer), LLVMGetBufferSize(buffer));
    LLVMDisposeMemoryBuffer(buffer);
  }
  LLVMDisposeTargetData(layout);
  LLVMDisposeTargetMachine(tm);
  LLVMDisposeModule(ir);
  LLVMContextDispose(llvm);
  return st;
}

/* ld.lld: a shared object with no imports, no libc, and the query exported. */
static KILN_MUST_USE kiln_status_t link_elf(const kiln_buf_t *object, const kiln_target_t *t,
                                            const char *name, kiln_buf_t *elf) {
  if (access(LLD, X_OK) != 0) {
    return KILN_STATUS(KILN_STATUS_FAILED_PRECONDITION,
                       "CPU executables are linked with %s, which is missing: install lld-22", LLD);
  }
  const char *tmp = getenv("TMPDIR");
  kiln_buf_t dir, obj, out;
  kiln_buf_init(&dir);
  kiln_buf_init(&obj);
  kiln_buf_init(&out);
  kiln_buf_appendf(&dir, "%s/kiln-lld-XXXXXX", tmp && *tmp ? tmp : "/tmp");
  kiln_status_t st = NULL;
  if (!mkdtemp(dir.data)) {
    st = KILN_STATUS_ERRNO(errno, "cannot create %s", dir.data);
    kiln_buf_deinit(&dir);
    return st;
  }
  kiln_buf_appendf(&obj, "%s/k.o", dir.data);
  kiln_buf_appendf(&out, "%s/k.so", dir.data);
  st = kiln_file_write(obj.data, object->data, object->len, 0600);
  if (!st) {
    const char *argv[] = {LLD,        "-shared",       "-nostdlib",     "--no-undefined",
                          "--build-id=none", "--gc-sections", "-z",        "now",
                          "-z",       "relro",         "-z",            "noexecstack",
                          "--hash-style=sysv", "--discard-all", "--export-dynamic-symbol=" QUERY_SYMBOL,
                          "-o",       out.data,        obj.data,        NULL};
    char said[2048];
    size_t n;
    if (kiln_compiler_run_command(argv, said, sizeof said) != 0) {
      /* An undefined symbol is a function the kernels call that the ELF lacks. */
      st = KILN_STATUS(strstr(said, "undefined symbol") ? KILN_STATUS_UNIMPLEMENTED : KILN_STATUS_INTERNAL,
                       "%s: linking the %s executable failed (kiln's CPU kernels may call only what they "
                       "define): %s",
                       name, t->id, said);
    } else {
      FILE *f = fopen(out.data, "rb");
      char chunk[65536];
      while (f && (n = fread(chunk, 1, sizeof chunk, f)) > 0) kiln_buf_append(elf, chunk, n);
      if (!f) st = KILN_STATUS_ERRNO(errno, "cannot read %s", out.data);
      if (f) fclose(f);
    }
  }
  unlink(obj.data);
  unlink(out.data);
  rmdir(dir.data);
  kiln_buf_deinit(&dir);
  kiln_buf_deinit(&obj);
  kiln_buf_deinit(&out);
  return st;
}

/* Kernels to LLVM: loops, memrefs as bare pointers (static shapes: dynamic.c
 * flattened the dynamic ones), index as i64. */
#define CPU_LOWERING                                                                    \
  "builtin.module(lower-affine,convert-scf-to-cf,expand-strided-metadata,lower-affine," \
  "arith-expand,finalize-memref-to-llvm,convert-math-to-llvm,convert-arith-to-llvm,"    \
  "convert-index-to-llvm,convert-func-to-llvm{use-bare-ptr-memref-call-conv=true},"     \
  "convert-cf-to-llvm,reconcile-unrealized-casts,canonicalize)"

kiln_status_t kiln_compiler_cpu_library(MlirContext context, MlirModule module, const kiln_target_t *target,
                                        const char *const *kernel_names, const uint32_t (*blocks)[3],
                                        const bool *noalias, size_t n_kernels, kiln_compiler_run_fn_t run,
                                        void *run_user, const char *name, unsigned char **out_elf,
                                        size_t *out_len) {
  *out_elf = NULL;
  *out_len = 0;
  MlirOperation gpu = kiln_compiler_first_op(mlirModuleGetBody(module), "gpu.module");
  if (mlirOperationIsNull(gpu) || n_kernels == 0) {
    return KILN_STATUS(KILN_STATUS_INTERNAL, "%s: no kernels for the %s executable", name, target->id);
  }
  MlirModule cpu = mlirModuleCreateEmpty(mlirOperationGetLocation(gpu));
  MlirBlock into = mlirModuleGetBody(cpu);
  kernel_sig_t *sigs = kiln_calloc(n_kernels, sizeof *sigs);
  kiln_status_t st = NULL;
  size_t found = 0;
  for (MlirOperation op = mlirBlockGetFirstOperation(body_of(gpu)); !mlirOperationIsNull(op) && !st;
       op = mlirOperationGetNextInBlock(op)) {
    if (!kiln_compiler_op_is(op, "gpu.func")) {
      mlirBlockAppendOwnedOperation(into, mlirOperationClone(op));
      continue;
    }
    char *sym = symbol_of(op);
    size_t k = 0;
    while (k < n_kernels && (!sym || strcmp(kernel_names[k], sym) != 0)) k++;
    kiln_free(sym);
    if (k == n_kernels) continue; /* never launched */
    kernel_sig_t *s = &sigs[k];
    MlirBlock entry = body_of(op);
    s->name = kiln_strdup(kernel_names[k]);
    s->n_args = (size_t)mlirBlockGetNumArguments(entry);
    s->args = kiln_calloc(s->n_args ? s->n_args : 1, sizeof *s->args);
    for (size_t a = 0; a < s->n_args; a++) {
      s->args[a] = mlirValueGetType(mlirBlockGetArgument(entry, (intptr_t)a));
      if (mlirTypeIsAMemRef(s->args[a])) {
        s->n_bindings++;
      } else {
        s->n_constants += mlirTypeIsAIndex(s->args[a]) ||
                                  (mlirTypeIsAInteger(s->args[a]) && mlirIntegerTypeGetWidth(s->args[a]) > 32)
                              ? 2
                              : 1;
      }
    }
    memcpy(s->block, blocks[k], sizeof s->block);
    st = workgroup_function(context, op, blocks[k], into, name);
    found++;
  }
  if (!st && found != n_kernels) {
    st = KILN_STATUS(KILN_STATUS_INTERNAL, "%s: %zu of %zu kernels found for %s", name, found, n_kernels,
                     target->id);
  }
  if (!st) st = run(run_user, cpu, CPU_LOWERING);
  char *text = st ? NULL : library_text(sigs, n_kernels, name);
  if (text) {
    MlirModule lib = mlirModuleCreateParse(context, sref(text));
    if (mlirModuleIsNull(lib)) {
      st = KILN_STATUS(KILN_STATUS_INTERNAL, "%s: kiln's CPU library tables do not parse", name);
    } else {
      merge_into(cpu, lib);
      mlirModuleDestroy(lib);
    }
    kiln_free(text);
  }
  kiln_buf_t object, elf;
  kiln_buf_init(&object);
  kiln_buf_init(&elf);
  if (!st) st = emit(cpu, target, sigs, noalias, n_kernels, name, &object);
  if (!st) st = link_elf(&object, target, name, &elf);
  if (!st) {
    *out_len = elf.len; /* kiln_buf keeps a NUL past the end */
    *out_elf = (unsigned char *)kiln_buf_take(&elf);
  }
  kiln_buf_deinit(&object);
  kiln_buf_deinit(&elf);
  for (size_t k = 0; k < n_kernels; k++) {
    kiln_free(sigs[k].name);
    kiln_free(sigs[k].args);
  }
  kiln_free(sigs);
  mlirModuleDestroy(cpu);
  return st;
}
