/* The compile pipeline over the MLIR C API: textual pass pipelines on a warm
 * context, a clone of the front half's module per target, and the device code read
 * back from the gpu.binary ops that gpu-module-to-binary leaves.
 *
 * Workgroup sizes. The front half tiles parallel loops by FRONT_TILE and maps the
 * tiles to the grid; the launch sizes end up as constants on each gpu.launch_func.
 * They are read back from there and written onto each kernel, as
 * `known_block_size` (NVVM turns it into .maxntid, ROCDL into the flat work-group size)
 * and as `spirv.entry_point_abi` (the SPIR-V lowering requires it).
 */
#include "compiler/pipeline.h"

#include <errno.h>
#include <inttypes.h>
#include <mlir-c/BuiltinAttributes.h>
#include <mlir-c/BuiltinTypes.h>
#include <mlir-c/Dialect/GPU.h>
#include <mlir-c/Dialect/Transform/Interpreter.h>
#include <mlir-c/ExecutionEngine.h>
#include <mlir-c/Pass.h>
#include <mlir-c/Target/LLVMIR.h>
#include <llvm-c/Core.h>
#include <llvm-c/TargetMachine.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "base/alloc.h"
#include "base/buf.h"
#include "base/time.h"
#include "compiler/cpu.h"
#include "compiler/gpu_depthwise.h"
#include "compiler/gpu_elementwise.h"
#include "compiler/gpu_epilogue.h"
#include "compiler/gpu_gemm.h"
#include "compiler/gpu_match.h"
#include "compiler/gpu_reduce.h"
#include "compiler/host.h"
#include "compiler/internal.h"
#include "compiler/kernel_loops.h"
#include "compiler/kernel_types.h"

/* Tile sizes of the (up to) three outermost parallel loop dimensions: the
 * workgroup shape. 4 x 32 = 128 invocations fits every target's limits. Tiles
 * have fixed bounds with an in-bounds guard inside (no-min-max-bounds), so a
 * dimension the tile does not divide (an 18-wide padded image) still gets a
 * static workgroup size, which the GPU conversion needs. Loops of rank 1 and 2
 * are made rank 3 first (kiln_compiler_parallel_loops_to_rank3), so they get
 * the same 4x32 tile; its 32 run along thread x (kiln_compiler_map_contiguous_to_x):
 * workgroups of 32x4x1. */
#define FRONT_TILE "1,4,32"

/* The target-independent half, shared by every target (the host CPU too, so the
 * CPU's numerics check the tiling as well), in two pipelines: between them
 * kiln_compiler_copies_to_kernels turns host memref.copy ops (a padded
 * convolution's interior) into linalg.generic, so they become kernels too. */
/* tosa-to-arith also lowers tosa.apply_scale (what tosa.rescale becomes), in 32-bit
 * arithmetic: SPIR-V profiles without Int64 need it, and it is exact. */
#define LINALG_PASSES                                                                       \
  "func.func(tosa-optional-decompositions,tosa-to-scf,tosa-to-linalg-named,tosa-to-linalg," \
  "tosa-to-arith{include-apply-rescale=true use-32-bit=true},tosa-to-tensor,"               \
  "convert-elementwise-to-linalg),"                                                         \
  "canonicalize"
#define FUSE_PASSES "linalg-fuse-elementwise-ops"
/* allow-return-allocs-from-loops: a while loop's body yields new buffers, which
 * kiln_compiler_carried_buffers_fix then turns into fixed ones (host.h). */
#define ONE_SHOT_PASSES                               \
  "one-shot-bufferize{bufferize-function-boundaries " \
  "function-boundary-type-conversion=identity-layout-map allow-return-allocs-from-loops}"
#define DEALLOC_PASSES        "func.func(buffer-hoisting),buffer-deallocation-pipeline,canonicalize"
#define ONLY_BUFFERIZE_PASSES ONE_SHOT_PASSES "," DEALLOC_PASSES
#define BUFFERIZE_PASSES      LINALG_PASSES "," FUSE_PASSES "," ONLY_BUFFERIZE_PASSES

/* The longest chain of elementwise ops one fused kernel may hold (host.h: Fusion
 * bounds): fusion then costs time linear in the op count. */
#define FUSION_CHAIN_LIMIT 64

static const char linalg_pipeline[] = "builtin.module(" LINALG_PASSES ")";
static const char fuse_pipeline[] = "builtin.module(" FUSE_PASSES ")";
static const char one_shot_pipeline[] = "builtin.module(" ONE_SHOT_PASSES ")";
static const char dealloc_pipeline[] = "builtin.module(" DEALLOC_PASSES ")";
#define TO_LOOPS_PASSES "func.func(convert-linalg-to-parallel-loops)"
#define TILE_PASSES \
  "func.func(scf-parallel-loop-tiling{parallel-loop-tile-sizes=" FRONT_TILE " no-min-max-bounds})"
#define LOOP_PASSES TO_LOOPS_PASSES "," TILE_PASSES

static const char bufferize_pipeline[] = "builtin.module(" BUFFERIZE_PASSES ")";
static const char to_loops_pipeline[] = "builtin.module(" TO_LOOPS_PASSES ")";
static const char tile_pipeline[] = "builtin.module(" TILE_PASSES ")";

/* Then, once for all GPU targets: the grid mapping and kernel outlining. Constants
 * the kernels use are sunk into them first (after canonicalize folds the index
 * arithmetic into constants), so kernels take buffers only, as IREE's HAL ABI
 * passes them: one pointer per binding. Views made inside a kernel (a scatter's
 * row, at an offset it reads) fold into the loads and stores, which bare-pointer
 * arguments need. */
#define GPU_FRONT_PASSES                                                         \
  "func.func(gpu-map-parallel-loops,convert-parallel-loops-to-gpu,canonicalize," \
  "gpu-launch-sink-index-computations),gpu-kernel-outlining,canonicalize,cse,"   \
  "gpu.module(fold-memref-alias-ops)"

static const char gpu_front_pipeline[] = "builtin.module(" GPU_FRONT_PASSES ")";

/* The GPU front half after bufferization (and kiln's copy rewrite). */
static const char rest_front_pipeline[] = "builtin.module(" LOOP_PASSES "," GPU_FRONT_PASSES ")";

/* The whole GPU front half as one text, likewise. */
static const char front_pipeline[] =
    "builtin.module(" BUFFERIZE_PASSES "," LOOP_PASSES "," GPU_FRONT_PASSES ")";

/* The host CPU: the tiled loops run sequentially, lowered to the LLVM dialect with
 * C-callable wrappers (_mlir_ciface_<name>) for every function. */
static const char cpu_pipeline[] =
    "builtin.module(func.func(llvm-request-c-wrappers),convert-scf-to-cf,"
    "expand-strided-metadata,lower-affine,finalize-memref-to-llvm,convert-math-to-llvm,"
    "convert-arith-to-llvm,convert-func-to-llvm,convert-cf-to-llvm,"
    "reconcile-unrealized-casts)";

/* Math inside kernels, before each GPU conversion. Each backend lowers some math
 * functions and stops on others: LLVM's AMDGPU backend exits the process on
 * llvm.tanh ("no libcall available"), ROCDL turns the rest into calls into ROCm's
 * device libraries (not installed), NVPTX has no ctlz translation, SPIR-V has no
 * sinh. math-expand-ops rewrites the listed functions into ones the backend has
 * (tanh and the hyperbolics into exp, ctlz into bit tests, fpowi into multiplies);
 * on AMD, what is left becomes LLVM intrinsics where the AMDGPU backend has
 * instructions (exp, sqrt, fma). The functions still missing per backend are
 * listed in docs/design/compiler.md; they fail the target with MLIR's message. */
#define EXPAND_MATH(ops) "math-expand-ops{ops=" ops "}"
static const char cuda_kernel_lowering[] =
    EXPAND_MATH("sinh,cosh,asinh,acosh,atanh,fpowi,ctlz") ",lower-affine,convert-scf-to-cf";
#define HIP_KERNEL_EXPAND \
  "math-extend-to-supported-types," EXPAND_MATH("tanh,sinh,cosh,asinh,acosh,atanh,fpowi,ctlz,powf,exp2")
static const char hip_kernel_lowering[] =
    HIP_KERNEL_EXPAND ",convert-math-to-llvm,lower-affine,convert-scf-to-cf";
#define SPIRV_KERNEL_MATH EXPAND_MATH("sinh,cosh,asinh,acosh,atanh,fpowi,ctlz,exp2")

/* The back half for a CPU: the same kernels as the GPUs', small types and bf16
 * as on the GPUs (integer bits, f32 arithmetic), and every math function as code
 * inside the ELF, since an embedded ELF imports nothing: MLIR's expansions first
 * (tanh, the hyperbolics, powers into exp and log), then kiln's f32 helpers
 * (kernel_math.c, exp and log included); what remains are LLVM intrinsics with
 * instructions (sqrt, fma, floor, ceil, fabs). cpu.c makes the workgroup
 * functions and the library. */
#define CPU_KERNEL_EXPAND                                                  \
  "builtin.module(gpu.module(math-extend-to-supported-types," EXPAND_MATH( \
      "tanh,sinh,cosh,asinh,acosh,atanh,fpowi,powf,exp2,round,ctlz") "))"
#define CPU_KERNEL_MATH_HELPERS \
  "erf,cbrt,atan,atan2,asin,acos,log2,sin,cos,remf,log10,tan,erfc,exp,log,log1p,expm1,ipowi"
/* exp2 in f64 goes before math-expand-ops (whose exp(x ln 2) is 250 ulp off
 * near 2^1023), which still expands the f32 one; fpowi in both widths (its
 * expansion is powf(x, n): NaN for a negative base on the CPUs and SPIR-V). */
#define KILN_MATH_FIRST     "fpowi"
#define KILN_F64_MATH_FIRST "exp2,fpowi"
/* The f64 functions neither a CPU nor AMD has without a library (kernel_math64.c);
 * AMD's ROCDL conversion wants floor and ceil from the library too. */
#define KILN_F64_MATH_HELPERS \
  "exp,log,log2,log10,log1p,expm1,sin,cos,tan,atan,atan2,asin,acos,erf,erfc,cbrt,remf,ipowi"
/* What arith-emulate-wide-int cannot split into i32 pairs, on SPIR-V profiles
 * without Int64: kiln's i64 code from shifts, adds and compares. */
#define SPIRV_I64_HELPERS "divsi,divui,remsi,remui,floordivsi,ceildivsi,absi,ctlz,cttz,ctpop"
/* f16 too on a CPU without f16 conversions (f16_as_bits: RV64GC), as on a Vulkan
 * profile without Float16; no canonicalize before kiln's f16 expansion. */
#define CPU_KERNEL_TYPES(types)                                                    \
  "builtin.module(gpu.module(arith-emulate-unsupported-floats{source-types=" types \
  " "                                                                              \
  "target-type=f32},arith-expand{include-bf16=true}))"

/* ---- pass pipelines ---- */

static void append_cb(MlirStringRef s, void *user) { kiln_buf_append(user, s.data, s.length); }

static KILN_MUST_USE kiln_status_t run_pipeline(kiln_compiler_context_t *context, MlirModule module,
                                                const char *pipeline, const char *name, const char *stage) {
  kiln_diag_capture_t diags;
  kiln_compiler_diag_attach(context, name, &diags);
  MlirPassManager pm = mlirPassManagerCreate(context->mlir);
  kiln_buf_t parse_errors;
  kiln_buf_init(&parse_errors);
  kiln_status_t status = NULL;
  MlirLogicalResult r =
      mlirParsePassPipeline(mlirPassManagerGetAsOpPassManager(pm), mlirStringRefCreateFromCString(pipeline),
                            append_cb, &parse_errors);
  if (mlirLogicalResultIsFailure(r)) {
    status = KILN_STATUS(KILN_STATUS_INTERNAL, "%s: kiln's pass pipeline does not parse: %s", stage,
                         parse_errors.data);
  } else if (mlirLogicalResultIsFailure(mlirPassManagerRunOnOp(pm, mlirModuleGetOperation(module)))) {
    status =
        KILN_STATUS(diags.errors ? KILN_STATUS_INVALID_ARGUMENT : KILN_STATUS_INTERNAL, "%s: %s failed:\n%s",
                    diags.name, stage, diags.text.len ? diags.text.data : "(no diagnostic)");
  }
  mlirPassManagerDestroy(pm);
  kiln_buf_deinit(&parse_errors);
  kiln_compiler_diag_detach(&diags);
  return status;
}

/* Convolutions with the filter's output channels last. TOSA's conv2d becomes
 * linalg.conv_2d_nhwc_fhwc, whose filter holds a channel's taps together: an
 * output element is then a dot product over the input channels, and a vector
 * of them needs a horizontal sum per tap. Upstream's transpose_conv2d (the
 * transform dialect) writes it as a linalg.transpose of the filter (a small
 * kernel of its own) and linalg.conv_2d_nhwc_hwcf, whose output channels are
 * contiguous in the filter as in the output: the innermost tile dimension, one
 * vector FMA per input value on a CPU, coalesced across lanes on a GPU. */
static const char conv_transform[] =
    "module attributes {transform.with_named_sequence} {\n"
    "  transform.named_sequence @__transform_main(%root: !transform.any_op {transform.readonly}) {\n"
    "    %convs = transform.structured.match ops{[\"linalg.conv_2d_nhwc_fhwc\"]} in %root\n"
    "        : (!transform.any_op) -> !transform.any_op\n"
    "    transform.foreach %convs : !transform.any_op {\n"
    "    ^bb0(%conv: !transform.any_op):\n"
    "      %t = transform.structured.transpose_conv2d %conv : (!transform.any_op) -> !transform.any_op\n"
    "    }\n"
    "    transform.yield\n"
    "  }\n"
    "}\n";

static KILN_MUST_USE kiln_status_t conv_filters_last(kiln_compiler_context_t *context, MlirModule module,
                                                     const char *name) {
  kiln_diag_capture_t diags;
  kiln_compiler_diag_attach(context, name, &diags);
  kiln_status_t status = NULL;
  MlirModule script = mlirModuleCreateParse(context->mlir, mlirStringRefCreateFromCString(conv_transform));
  if (mlirModuleIsNull(script)) {
    status = KILN_STATUS(KILN_STATUS_INTERNAL, "kiln's convolution transform does not parse:\n%s",
                         diags.text.len ? diags.text.data : "(no diagnostic)");
  } else {
    MlirOperation root = mlirModuleGetOperation(script);
    MlirOperation entry = mlirBlockGetFirstOperation(mlirModuleGetBody(script));
    MlirTransformOptions options = mlirTransformOptionsCreate();
    if (mlirLogicalResultIsFailure(
            mlirTransformApplyNamedSequence(mlirModuleGetOperation(module), entry, root, options))) {
      status = KILN_STATUS(KILN_STATUS_INTERNAL, "%s: the convolution transform failed:\n%s", diags.name,
                           diags.text.len ? diags.text.data : "(no diagnostic)");
    }
    mlirTransformOptionsDestroy(options);
    mlirModuleDestroy(script);
  }
  kiln_compiler_diag_detach(&diags);
  return status;
}

/* The common half: bufferize, copies to kernels, loops and tiles. */
static KILN_MUST_USE kiln_status_t run_common(kiln_compiler_context_t *context, MlirModule module,
                                              const char *name) {
  kiln_compiler_tosa_control_to_scf(context->mlir, module);
  KILN_RETURN_IF_ERROR(kiln_compiler_tosa_variables(context->mlir, module, name));
  KILN_RETURN_IF_ERROR(kiln_compiler_tosa_fold_shapes(context->mlir, module, name));
  KILN_RETURN_IF_ERROR(kiln_compiler_tosa_block_scaled(context->mlir, module, name));
  kiln_compiler_arguments_read_only(context->mlir, module);
  KILN_RETURN_IF_ERROR(run_pipeline(context, module, linalg_pipeline, name, "the front half"));
  KILN_RETURN_IF_ERROR(conv_filters_last(context, module, name));
  KILN_RETURN_IF_ERROR(kiln_compiler_index_to_arith(context->mlir, module, name));
  kiln_compiler_fusion_barriers_insert(context->mlir, module, FUSION_CHAIN_LIMIT);
  kiln_status_t st = run_pipeline(context, module, fuse_pipeline, name, "the front half");
  kiln_compiler_fusion_barriers_remove(module);
  KILN_RETURN_IF_ERROR(st);
  KILN_RETURN_IF_ERROR(run_pipeline(context, module, one_shot_pipeline, name, "the front half"));
  kiln_compiler_carried_buffers_fix(context->mlir, module);
  KILN_RETURN_IF_ERROR(run_pipeline(context, module, dealloc_pipeline, name, "the front half"));
  kiln_compiler_copies_to_kernels(context->mlir, module);
  KILN_RETURN_IF_ERROR(run_pipeline(context, module, to_loops_pipeline, name, "the front half"));
  kiln_compiler_host_loops_to_kernels(context->mlir, module);
  kiln_compiler_parallel_loops_to_rank3(context->mlir, module);
  return run_pipeline(context, module, tile_pipeline, name, "the front half");
}

/* ---- walking ---- */

static char *string_of(MlirStringRef s) { return kiln_strndup(s.data, s.length); }

typedef struct launch_s {
  char *module_name;
  char *kernel_name;
  uint32_t block[3];
  uint32_t grid[3];
  kiln_compiler_arg_t *args; /* filled from the gpu.func by describe_kernel */
  size_t n_args;
  kiln_compiler_gemm_t gemm;           /* a contraction GPU targets tile their own way (gpu_gemm.h) */
  kiln_compiler_reduce_t reduce;       /* a row reduction they run as a workgroup reduction (gpu_reduce.h) */
  kiln_compiler_depthwise_t depthwise; /* a depthwise conv they run in vectors (gpu_depthwise.h) */
  kiln_compiler_epilogue_t epilogue; /* an elementwise kernel they may fuse into a matmul (gpu_epilogue.h) */
} launch_t;

typedef struct launches_s {
  launch_t *items;
  size_t n;
  /* The first launch whose sizes could not be read as a static grid in the
   * devices' limits, and why; such a model is refused (a launch left out would
   * leave its kernel out of the executable). */
  kiln_status_t refused;
} launches_t;

/* Grid dimensions Vulkan devices commonly allow (maxComputeWorkGroupCount), and
 * the bound on CUDA's y and z and on kiln's one plan shared by every target. */
#define MAX_GRID 65535

/* The value of an index constant, whatever its size. */
static bool raw_index(MlirValue v, int64_t *out) { return kiln_compiler_int_constant_value(v, out); }

/* gpu.launch_func: [async deps..., grid x y z, block x y z, ...] */
static MlirWalkResult collect_launch(MlirOperation op, void *user) {
  if (!kiln_compiler_op_is(op, "gpu.launch_func")) return MlirWalkResultAdvance;
  launches_t *launches = user;
  MlirAttribute kernel = mlirOperationGetAttributeByName(op, mlirStringRefCreateFromCString("kernel"));
  MlirAttribute segments =
      mlirOperationGetAttributeByName(op, mlirStringRefCreateFromCString("operandSegmentSizes"));
  if (mlirAttributeIsNull(kernel) || mlirSymbolRefAttrGetNumNestedReferences(kernel) != 1) {
    return MlirWalkResultAdvance;
  }
  intptr_t first_block = 3;
  if (!mlirAttributeIsNull(segments) && mlirAttributeIsADenseI32Array(segments)) {
    first_block = mlirDenseI32ArrayGetElement(segments, 0) + 3;
  }
  launch_t l = {0};
  MlirStringRef kname = mlirFlatSymbolRefAttrGetValue(mlirSymbolRefAttrGetNestedReference(kernel, 0));
  for (int i = 0; i < 3; i++) {
    int64_t grid = 0, block = 0;
    if (first_block + i >= mlirOperationGetNumOperands(op) ||
        !raw_index(mlirOperationGetOperand(op, first_block + i), &block)) {
      if (!launches->refused) {
        launches->refused = KILN_STATUS(
            KILN_STATUS_UNIMPLEMENTED,
            "kernel %.*s has a workgroup size that is not a constant: kiln's workgroups are fixed tiles",
            (int)kname.length, kname.data);
      }
      return MlirWalkResultAdvance;
    }
    /* A grid sized by a dynamic dimension is computed by the host program. */
    bool dynamic_grid = !raw_index(mlirOperationGetOperand(op, first_block - 3 + i), &grid);
    if (dynamic_grid) grid = 1;
    if (grid < 1 || grid > MAX_GRID || block < 1 || block > MAX_GRID) {
      if (!launches->refused) {
        launches->refused = KILN_STATUS(
            KILN_STATUS_UNIMPLEMENTED,
            "kernel %.*s needs %lld workgroups along %c; kiln plans at most %d per dimension (its "
            "workgroups are fixed tiles of 128 invocations): the tensor is too large for kiln's "
            "tiling",
            (int)kname.length, kname.data, (long long)grid, "xyz"[i], MAX_GRID);
      }
      return MlirWalkResultAdvance;
    }
    l.grid[i] = (uint32_t)grid;
    l.block[i] = (uint32_t)block;
  }
  l.module_name = string_of(mlirSymbolRefAttrGetRootReference(kernel));
  l.kernel_name = string_of(mlirFlatSymbolRefAttrGetValue(mlirSymbolRefAttrGetNestedReference(kernel, 0)));
  launches->items = kiln_realloc(launches->items, (launches->n + 1) * sizeof *launches->items);
  launches->items[launches->n++] = l;
  return MlirWalkResultAdvance;
}

static void launches_deinit(launches_t *launches) {
  kiln_status_free(launches->refused);
  for (size_t i = 0; i < launches->n; i++) {
    kiln_free(launches->items[i].module_name);
    kiln_free(launches->items[i].kernel_name);
    kiln_free(launches->items[i].args);
  }
  kiln_free(launches->items);
}

static const launch_t *find_launch(const launches_t *launches, MlirStringRef module, MlirStringRef kernel) {
  for (size_t i = 0; i < launches->n; i++) {
    const launch_t *l = &launches->items[i];
    if (strlen(l->module_name) == module.length && !memcmp(l->module_name, module.data, module.length) &&
        strlen(l->kernel_name) == kernel.length && !memcmp(l->kernel_name, kernel.data, kernel.length)) {
      return l;
    }
  }
  return NULL;
}

/* Bits of a scalar type (index is 64: kernels lower it at 64 bits), 0 if unknown. */
static uint64_t scalar_bits(MlirType t) {
  if (mlirTypeIsAIndex(t)) return 64;
  if (mlirTypeIsAInteger(t)) return mlirIntegerTypeGetWidth(t);
  if (mlirTypeIsAFloat(t)) return mlirFloatTypeGetWidth(t);
  return 0;
}

typedef struct writes_s {
  MlirBlock entry;
  bool *written;
  size_t n;
} writes_t;

/* Marks kernel arguments that a store (or atomic, or copy) writes through. */
static MlirWalkResult find_writes(MlirOperation op, void *user) {
  writes_t *w = user;
  intptr_t target = -1;
  if (kiln_compiler_op_is(op, "memref.store") || kiln_compiler_op_is(op, "memref.atomic_rmw") ||
      kiln_compiler_op_is(op, "memref.copy") || kiln_compiler_op_is(op, "memref.generic_atomic_rmw")) {
    target = kiln_compiler_op_is(op, "memref.generic_atomic_rmw") ? 0 : 1;
  }
  if (target < 0 || target >= mlirOperationGetNumOperands(op)) return MlirWalkResultAdvance;
  MlirValue v = mlirOperationGetOperand(op, target);
  if (mlirValueIsABlockArgument(v) && mlirBlockEqual(mlirBlockArgumentGetOwner(v), w->entry)) {
    intptr_t i = mlirBlockArgumentGetArgNumber(v);
    if (i >= 0 && (size_t)i < w->n) w->written[i] = true;
  }
  return MlirWalkResultAdvance;
}

/* Fills each launch's argument list from its gpu.func: memrefs are buffers (with
 * their static size and whether the kernel writes them), scalars are constants. */
static MlirWalkResult describe_kernel(MlirOperation op, void *user) {
  if (!kiln_compiler_op_is(op, "gpu.func")) return MlirWalkResultAdvance;
  launches_t *launches = user;
  MlirOperation parent = mlirOperationGetParentOperation(op);
  MlirAttribute module_sym =
      mlirOperationGetAttributeByName(parent, mlirStringRefCreateFromCString("sym_name"));
  MlirAttribute func_sym = mlirOperationGetAttributeByName(op, mlirStringRefCreateFromCString("sym_name"));
  if (mlirAttributeIsNull(module_sym) || mlirAttributeIsNull(func_sym)) return MlirWalkResultAdvance;
  launch_t *l =
      (launch_t *)find_launch(launches, mlirStringAttrGetValue(module_sym), mlirStringAttrGetValue(func_sym));
  if (!l || l->args) return MlirWalkResultAdvance;
  MlirBlock entry = mlirRegionGetFirstBlock(mlirOperationGetRegion(op, 0));
  size_t n = (size_t)mlirBlockGetNumArguments(entry);
  l->args = kiln_calloc(n ? n : 1, sizeof *l->args);
  l->n_args = n;
  writes_t w = {entry, kiln_calloc(n ? n : 1, sizeof(bool)), n};
  mlirOperationWalk(op, find_writes, &w, MlirWalkPreOrder);
  for (size_t i = 0; i < n; i++) {
    MlirType t = mlirValueGetType(mlirBlockGetArgument(entry, (intptr_t)i));
    if (mlirTypeIsAMemRef(t)) {
      l->args[i].kind = KILN_COMPILER_ARG_BUFFER;
      l->args[i].read_only = !w.written[i];
      if (mlirShapedTypeHasStaticShape(t)) {
        uint64_t elems = 1;
        for (intptr_t d = 0; d < mlirShapedTypeGetRank(t); d++)
          elems *= (uint64_t)mlirShapedTypeGetDimSize(t, d);
        l->args[i].size_bytes = elems * (scalar_bits(mlirShapedTypeGetElementType(t)) / 8);
      }
    } else {
      l->args[i].kind = KILN_COMPILER_ARG_CONSTANT;
      l->args[i].size_bytes = scalar_bits(t) > 32 ? 8 : 4;
    }
  }
  kiln_free(w.written);
  if (!kiln_compiler_gemm_match(op, l->grid, l->block, &l->gemm) &&
      !kiln_compiler_reduce_match(op, l->grid, l->block, &l->reduce) &&
      !kiln_compiler_depthwise_match(op, l->grid, l->block, &l->depthwise)) {
    kiln_compiler_epilogue_match(op, l->grid, l->block, &l->epilogue);
  }
  return MlirWalkResultAdvance;
}

typedef struct annotate_s {
  const launches_t *launches;
  MlirContext mlir;
  bool spirv;
} annotate_t;

/* Writes each kernel's workgroup size onto its gpu.func. */
static MlirWalkResult annotate_kernel(MlirOperation op, void *user) {
  if (!kiln_compiler_op_is(op, "gpu.func")) return MlirWalkResultAdvance;
  annotate_t *a = user;
  MlirOperation parent = mlirOperationGetParentOperation(op);
  MlirAttribute module_sym =
      mlirOperationGetAttributeByName(parent, mlirStringRefCreateFromCString("sym_name"));
  MlirAttribute func_sym = mlirOperationGetAttributeByName(op, mlirStringRefCreateFromCString("sym_name"));
  if (mlirAttributeIsNull(module_sym) || mlirAttributeIsNull(func_sym)) return MlirWalkResultAdvance;
  const launch_t *l =
      find_launch(a->launches, mlirStringAttrGetValue(module_sym), mlirStringAttrGetValue(func_sym));
  if (!l) return MlirWalkResultAdvance;
  char text[128];
  snprintf(text, sizeof text, "array<i32: %u, %u, %u>", l->block[0], l->block[1], l->block[2]);
  mlirOperationSetInherentAttributeByName(
      op, mlirStringRefCreateFromCString("known_block_size"),
      mlirAttributeParseGet(a->mlir, mlirStringRefCreateFromCString(text)));
  if (a->spirv) {
    snprintf(text, sizeof text, "#spirv.entry_point_abi<workgroup_size = [%u, %u, %u]>", l->block[0],
             l->block[1], l->block[2]);
    mlirOperationSetDiscardableAttributeByName(
        op, mlirStringRefCreateFromCString("spirv.entry_point_abi"),
        mlirAttributeParseGet(a->mlir, mlirStringRefCreateFromCString(text)));
  }
  return MlirWalkResultAdvance;
}

typedef struct harvest_s {
  const launches_t *launches;
  kiln_compiler_target_output_t *out;
} harvest_t;

/* gpu.binary @name [#gpu.object<target, "bytes">]: one per outlined module. */
static MlirWalkResult harvest_binary(MlirOperation op, void *user) {
  if (!kiln_compiler_op_is(op, "gpu.binary")) return MlirWalkResultAdvance;
  harvest_t *h = user;
  MlirAttribute sym = mlirOperationGetAttributeByName(op, mlirStringRefCreateFromCString("sym_name"));
  MlirAttribute objects = mlirOperationGetAttributeByName(op, mlirStringRefCreateFromCString("objects"));
  if (mlirAttributeIsNull(sym) || mlirAttributeIsNull(objects) || mlirArrayAttrGetNumElements(objects) < 1) {
    return MlirWalkResultAdvance;
  }
  MlirAttribute object = mlirArrayAttrGetElement(objects, 0);
  if (!mlirAttributeIsAGPUObjectAttr(object)) return MlirWalkResultAdvance;
  MlirStringRef bytes = mlirGPUObjectAttrGetObject(object);
  MlirStringRef module = mlirStringAttrGetValue(sym);
  for (size_t i = 0; i < h->launches->n; i++) {
    const launch_t *l = &h->launches->items[i];
    if (strlen(l->module_name) != module.length || memcmp(l->module_name, module.data, module.length)) {
      continue;
    }
    /* Kernel i belongs to launch i: the dispatch list indexes kernels by it. */
    kiln_compiler_target_output_t *o = h->out;
    kiln_compiler_kernel_t *k = &o->kernels[i];
    if (k->binary) continue; /* already harvested */
    /* The first kernel of a module owns its bytes; the others borrow them. */
    const kiln_compiler_kernel_t *owner = NULL;
    for (size_t j = 0; j < i && !owner; j++) {
      const kiln_compiler_kernel_t *p = &o->kernels[j];
      if (p->binary && !p->same_as && p->module_name && strcmp(p->module_name, l->module_name) == 0)
        owner = p;
    }
    o->n_kernels++;
    k->args = kiln_memdup(l->args, (l->n_args ? l->n_args : 1) * sizeof *l->args);
    k->n_args = l->n_args;
    k->name = kiln_strdup(l->kernel_name);
    k->module_name = kiln_strdup(l->module_name);
    memcpy(k->block_size, l->block, sizeof k->block_size);
    if (owner) {
      k->binary = owner->binary;
      k->binary_len = owner->binary_len;
      k->same_as = (uint32_t)(owner - o->kernels) + 1;
      continue;
    }
    /* One byte more, always NUL: PTX is text and may be used as a C string. */
    k->binary = kiln_malloc(bytes.length + 1);
    memcpy(k->binary, bytes.data, bytes.length);
    k->binary[bytes.length] = '\0';
    k->binary_len = bytes.length;
  }
  return MlirWalkResultAdvance;
}

/* ---- one device module per target ---- */

typedef struct rename_s {
  char *old_module; /* the kernel's original gpu.module */
  char *new_name;   /* its function's name in the merged module */
} rename_t;

static MlirWalkResult relink_launch(MlirOperation op, void *user) {
  if (!kiln_compiler_op_is(op, "gpu.launch_func")) return MlirWalkResultAdvance;
  void **args = user;
  MlirContext mlir = *(MlirContext *)args[0];
  const char *merged = args[1];
  const rename_t *renames = args[2];
  size_t n = *(size_t *)args[3];
  MlirStringRef key = mlirStringRefCreateFromCString("kernel");
  MlirAttribute kernel = mlirOperationGetAttributeByName(op, key);
  if (mlirAttributeIsNull(kernel)) return MlirWalkResultAdvance;
  MlirStringRef root = mlirSymbolRefAttrGetRootReference(kernel);
  for (size_t i = 0; i < n; i++) {
    if (strlen(renames[i].old_module) != root.length ||
        memcmp(renames[i].old_module, root.data, root.length) != 0) {
      continue;
    }
    MlirAttribute leaf = mlirFlatSymbolRefAttrGet(mlir, mlirStringRefCreateFromCString(renames[i].new_name));
    mlirOperationSetAttributeByName(
        op, key, mlirSymbolRefAttrGet(mlir, mlirStringRefCreateFromCString(merged), 1, &leaf));
    break;
  }
  return MlirWalkResultAdvance;
}

/* Outlining makes one gpu.module per kernel, every kernel named after the host
 * function. Each target then ran its code generator, linker (ld.lld for HIP) and
 * assembler (ptxas) once per kernel. Merge them: every kernel moves into the
 * first gpu.module under its old module's (unique) name, and the launches are
 * relinked, so a target produces one device module holding every kernel. */
static void merge_kernel_modules(MlirContext mlir, MlirModule module) {
  MlirBlock body = mlirModuleGetBody(module);
  MlirOperation first = {NULL};
  rename_t *renames = NULL;
  size_t n = 0;
  MlirStringRef sym_key = mlirStringRefCreateFromCString("sym_name");
  for (MlirOperation op = mlirBlockGetFirstOperation(body); !mlirOperationIsNull(op);) {
    MlirOperation next = mlirOperationGetNextInBlock(op);
    if (kiln_compiler_op_is(op, "gpu.module")) {
      MlirAttribute name = mlirOperationGetAttributeByName(op, sym_key);
      MlirBlock mbody = mlirRegionGetFirstBlock(mlirOperationGetRegion(op, 0));
      if (mlirOperationIsNull(first)) first = op;
      for (MlirOperation f = mlirBlockGetFirstOperation(mbody); !mlirOperationIsNull(f);) {
        MlirOperation fnext = mlirOperationGetNextInBlock(f);
        if (kiln_compiler_op_is(f, "gpu.func")) {
          renames = kiln_realloc(renames, (n + 1) * sizeof *renames);
          renames[n].old_module = string_of(mlirStringAttrGetValue(name));
          renames[n].new_name = kiln_strdup(renames[n].old_module);
          mlirOperationSetAttributeByName(
              f, sym_key, mlirStringAttrGet(mlir, mlirStringRefCreateFromCString(renames[n].new_name)));
          n++;
          if (!mlirOperationEqual(op, first)) {
            mlirOperationRemoveFromParent(f);
            mlirBlockAppendOwnedOperation(mlirRegionGetFirstBlock(mlirOperationGetRegion(first, 0)), f);
          }
        }
        f = fnext;
      }
      if (!mlirOperationEqual(op, first)) mlirOperationDestroy(op);
    }
    op = next;
  }
  if (n > 0) {
    char *merged = string_of(mlirStringAttrGetValue(mlirOperationGetAttributeByName(first, sym_key)));
    void *args[] = {&mlir, merged, renames, &n};
    mlirOperationWalk(mlirModuleGetOperation(module), relink_launch, args, MlirWalkPreOrder);
    kiln_free(merged);
  }
  for (size_t i = 0; i < n; i++) {
    kiln_free(renames[i].old_module);
    kiln_free(renames[i].new_name);
  }
  kiln_free(renames);
}

/* ---- per-target back halves ---- */

/* The ROCDL serializer runs <toolkit>/llvm/bin/ld.lld: give it Debian's lld-22
 * through a private directory of symlinks. */
static KILN_MUST_USE kiln_status_t toolkit_dir(kiln_compiler_context_t *context, const char **out_dir) {
  if (context->toolkit_dir) {
    *out_dir = context->toolkit_dir;
    return NULL;
  }
  static const char lld[] = "/usr/lib/llvm-22/bin/ld.lld";
  if (access(lld, X_OK) != 0) {
    return KILN_STATUS(KILN_STATUS_FAILED_PRECONDITION,
                       "AMD code objects are linked with %s, which is missing: install lld-22", lld);
  }
  const char *tmp = getenv("TMPDIR");
  kiln_buf_t dir;
  kiln_buf_init(&dir);
  kiln_buf_appendf(&dir, "%s/kiln-toolkit-XXXXXX", tmp && *tmp ? tmp : "/tmp");
  if (!mkdtemp(dir.data)) {
    kiln_status_t st = KILN_STATUS_ERRNO(errno, "cannot create %s", dir.data);
    kiln_buf_deinit(&dir);
    return st;
  }
  kiln_buf_t path;
  kiln_buf_init(&path);
  kiln_buf_appendf(&path, "%s/llvm", dir.data);
  kiln_status_t st = NULL;
  if (mkdir(path.data, 0700) != 0) st = KILN_STATUS_ERRNO(errno, "cannot create %s", path.data);
  kiln_buf_append_str(&path, "/bin");
  if (!st && mkdir(path.data, 0700) != 0) st = KILN_STATUS_ERRNO(errno, "cannot create %s", path.data);
  kiln_buf_append_str(&path, "/ld.lld");
  if (!st && symlink(lld, path.data) != 0) st = KILN_STATUS_ERRNO(errno, "cannot link %s", path.data);
  kiln_buf_deinit(&path);
  context->toolkit_dir = kiln_buf_take(&dir);
  kiln_buf_deinit(&dir);
  *out_dir = context->toolkit_dir;
  return st;
}

void kiln_compiler_toolkit_remove(kiln_compiler_context_t *context) {
  if (!context->toolkit_dir) return;
  kiln_buf_t p;
  kiln_buf_init(&p);
  kiln_buf_appendf(&p, "%s/llvm/bin/ld.lld", context->toolkit_dir);
  unlink(p.data);
  kiln_buf_clear(&p);
  kiln_buf_appendf(&p, "%s/llvm/bin", context->toolkit_dir);
  rmdir(p.data);
  kiln_buf_clear(&p);
  kiln_buf_appendf(&p, "%s/llvm", context->toolkit_dir);
  rmdir(p.data);
  rmdir(context->toolkit_dir);
  kiln_buf_deinit(&p);
  kiln_free(context->toolkit_dir);
  context->toolkit_dir = NULL;
}

static KILN_MUST_USE kiln_status_t back_pipeline(kiln_compiler_context_t *context, const kiln_target_t *t,
                                                 kiln_buf_t *out) {
  switch (t->kind) {
    case KILN_TARGET_KIND_CUDA:
      kiln_buf_appendf(out,
                       "builtin.module(nvvm-attach-target{chip=%s features=+ptx%u O=3},"
                       "gpu.module(%s,convert-nvgpu-to-nvvm,convert-gpu-to-nvvm{index-bitwidth=64 "
                       "use-bare-ptr-memref-call-conv=1},canonicalize,cse,"
                       "reconcile-unrealized-casts),gpu-module-to-binary{format=isa})",
                       t->chip, t->ptx_version, cuda_kernel_lowering);
      return NULL;
    case KILN_TARGET_KIND_HIP: {
      /* Code object v5 (abi=500), as IREE 3.12 pins it: LLVM 22 defaults to v6,
       * which ROCm releases before 6.3 cannot load. */
      const char *toolkit = NULL;
      KILN_RETURN_IF_ERROR(toolkit_dir(context, &toolkit));
      kiln_buf_appendf(out,
                       "builtin.module(rocdl-attach-target{chip=%s O=3 abi=500 wave64=%s},"
                       "gpu.module(%s,convert-amdgpu-to-rocdl{chipset=%s},convert-gpu-to-rocdl{index-"
                       "bitwidth=64 use-bare-ptr-memref-call-conv=1},canonicalize,cse,"
                       "reconcile-unrealized-casts),gpu-module-to-binary{format=bin toolkit=%s})",
                       t->chip, t->limits.subgroup_size == 64 ? "true" : "false", hip_kernel_lowering,
                       t->chip, toolkit);
      return NULL;
    }
    case KILN_TARGET_KIND_VULKAN:
      /* Serialized separately (spirv_serialize): the converted spirv.modules land
       * beside their gpu.modules and must be moved inside first. */
      kiln_buf_appendf(out,
                       "builtin.module(spirv-attach-target{ver=v%u.%u caps=%s exts=%s "
                       "client_api=Vulkan},"
                       "gpu.module(" SPIRV_KERNEL_MATH
                       ",lower-affine,convert-math-to-spirv),"
                       "convert-gpu-to-spirv{use-64bit-index=false},"
                       "spirv.module(spirv-lower-abi-attrs,spirv-update-vce))",
                       t->spirv_version_major, t->spirv_version_minor, t->spirv_capabilities,
                       t->spirv_extensions);
      return NULL;
    case KILN_TARGET_KIND_CPU:
      /* Run from C (compile_cpu): this is its kernel half, then cpu.c's lowering. */
      kiln_buf_append_str(out, CPU_KERNEL_EXPAND);
      return NULL;
  }
  return KILN_STATUS(KILN_STATUS_INTERNAL, "target %s: unknown kind", t->id);
}

static MlirOperation find_symbol(MlirBlock body, const char *op_name, MlirStringRef sym) {
  for (MlirOperation op = mlirBlockGetFirstOperation(body); !mlirOperationIsNull(op);
       op = mlirOperationGetNextInBlock(op)) {
    if (!kiln_compiler_op_is(op, op_name)) continue;
    MlirAttribute name = mlirOperationGetAttributeByName(op, mlirStringRefCreateFromCString("sym_name"));
    if (mlirAttributeIsNull(name)) continue;
    MlirStringRef s = mlirStringAttrGetValue(name);
    if (s.length == sym.length && memcmp(s.data, sym.data, s.length) == 0) return op;
  }
  return (MlirOperation){NULL};
}

/* convert-gpu-to-spirv leaves spirv.module @__spv__X beside gpu.module @X; the
 * SPIR-V serializer of gpu-module-to-binary wants it inside. Move each one in,
 * then serialize. */
/* spirv-update-vce deduces the *minimum* SPIR-V version the code needs; a device
 * profile names the version its driver takes, so the module declares that one
 * (the deduced capabilities and extensions stay). */
static void set_spirv_version(MlirContext mlir, MlirOperation spirv_module, const kiln_target_t *t) {
  MlirStringRef key = mlirStringRefCreateFromCString("vce_triple");
  MlirAttribute vce = mlirOperationGetAttributeByName(spirv_module, key);
  if (mlirAttributeIsNull(vce)) return;
  kiln_buf_t text;
  kiln_buf_init(&text);
  mlirAttributePrint(vce, append_cb, &text);
  /* "#spirv.vce<v1.0, [...], [...]>" */
  char *v = strstr(text.data, "<v");
  char *comma = v ? strchr(v, ',') : NULL;
  if (comma) {
    kiln_buf_t fixed;
    kiln_buf_init(&fixed);
    kiln_buf_append(&fixed, text.data, (size_t)(v - text.data));
    kiln_buf_appendf(&fixed, "<v%u.%u%s", t->spirv_version_major, t->spirv_version_minor, comma);
    MlirAttribute parsed = mlirAttributeParseGet(mlir, mlirStringRefCreate(fixed.data, fixed.len));
    if (!mlirAttributeIsNull(parsed)) mlirOperationSetAttributeByName(spirv_module, key, parsed);
    kiln_buf_deinit(&fixed);
  }
  kiln_buf_deinit(&text);
}

/* Float types SPIR-V cannot hold on this profile keep their bits in 16-bit
 * integers and compute in f32 (kernel_types.h): bf16 everywhere, f16 where the
 * profile lacks Float16. The host code goes first (it is read already). */
/* Whether a value of type t (or its elements) is one kernel_small.c rewrites. */
static bool small_type(MlirType t) {
  if (mlirTypeIsAShaped(t)) t = mlirShapedTypeGetElementType(t);
  return kiln_compiler_is_small_float(t) || kiln_compiler_is_sub_byte_int(t);
}

static MlirWalkResult find_small(MlirOperation op, void *user) {
  bool *found = user;
  for (intptr_t i = 0; i < mlirOperationGetNumResults(op) && !*found; i++) {
    *found = small_type(mlirValueGetType(mlirOperationGetResult(op, i)));
  }
  if (kiln_compiler_op_is(op, "gpu.func")) {
    MlirBlock entry = mlirRegionGetFirstBlock(mlirOperationGetRegion(op, 0));
    for (intptr_t i = 0; i < mlirBlockGetNumArguments(entry) && !*found; i++) {
      *found = small_type(mlirValueGetType(mlirBlockGetArgument(entry, i)));
    }
  }
  return *found ? MlirWalkResultInterrupt : MlirWalkResultAdvance;
}

/* Every GPU target: the host functions go (the plan was read before), then the
 * 8/6/4-bit floats and the i2/i4 buffers, which no backend handles as IREE lays
 * them out (kernel_types.h): floats keep their bits and compute in f32 (the
 * conversions in integer code: arith-expand for f8E8M0FNU, kiln's for the other
 * f8 types and f4E2M1FN, scaling_extf/truncf expanded too), sub-byte buffers
 * become packed 32-bit words. */
static KILN_MUST_USE kiln_status_t prepare_small_types(kiln_compiler_context_t *context, MlirModule module,
                                                       const kiln_target_t *t, const char *name,
                                                       const char *stage) {
  kiln_compiler_kernels_only(module);
  bool found = false;
  mlirOperationWalk(mlirModuleGetOperation(module), find_small, &found, MlirWalkPreOrder);
  if (!found) return NULL;
  kiln_compiler_kernels_floats_as_bits(context->mlir, module, KILN_FLOATS_SMALL);
  KILN_RETURN_IF_ERROR(kiln_compiler_kernels_pack_sub_byte(context->mlir, module, name));
  KILN_RETURN_IF_ERROR(
      run_pipeline(context, module,
                   "builtin.module(gpu.module(arith-expand{include-f8e8m0=true},"
                   "arith-emulate-unsupported-floats{source-types=f8E5M2,f8E4M3,f8E3M4,f8E4M3FN,f8E5M2FNUZ,"
                   "f8E4M3FNUZ,f8E8M0FNU,f6E2M3FN,f6E3M2FN,f4E2M1FN target-type=f32},"
                   "arith-expand{include-f8e8m0=true}))",
                   name, stage));
  KILN_RETURN_IF_ERROR(kiln_compiler_kernels_expand_f8(context->mlir, module));
  KILN_RETURN_IF_ERROR(
      run_pipeline(context, module, "builtin.module(gpu.module(canonicalize))", name, stage));
  if (t->kind == KILN_TARGET_KIND_VULKAN) {
    KILN_RETURN_IF_ERROR(kiln_compiler_kernels_widen_sub_byte(context->mlir, module, name));
  }
  return kiln_compiler_kernels_check_floats(context->mlir, module, KILN_FLOATS_SMALL, name, t->id);
}

/* ---- f64 without Float64 ---- */

/* On a SPIR-V profile without Float64 an f64 kernel computes in integer code
 * (kernel_soft64.c, which also rounds to integers), so every other f64 math
 * function is written as arithmetic first: exp2 as on the CPUs, upstream's
 * expansions of the hyperbolic functions and powf, then kiln's f64 helpers.
 * Upstream's expansions run on f64 alone: tanh and powf of other widths keep
 * their SPIR-V instructions, waiting outside the dialect as kiln.held ops. */
#define F64_UPSTREAM_MATH "tanh,sinh,cosh,asinh,acosh,atanh,powf"
#define F64_SOFT_MATH_HELPERS \
  "exp,log,log2,log10,log1p,expm1,sin,cos,tan,atan,atan2,asin,acos,erf,erfc,cbrt,remf,ipowi"
static const char *const f64_only_math[] = {"math.tanh", "math.powf", NULL};

/* `op` again as `to` (operands, results and attributes kept, `held_as` added
 * unless null, a kiln.held_as attribute dropped), in its place. */
static void rebuild_as(MlirContext ctx, MlirOperation op, MlirStringRef to, MlirAttribute held_as) {
  MlirOperationState state = mlirOperationStateGet(to, mlirOperationGetLocation(op));
  intptr_t n_in = mlirOperationGetNumOperands(op), n_out = mlirOperationGetNumResults(op);
  for (intptr_t i = 0; i < n_in; i++) {
    MlirValue v = mlirOperationGetOperand(op, i);
    mlirOperationStateAddOperands(&state, 1, &v);
  }
  for (intptr_t i = 0; i < n_out; i++) {
    MlirType t = mlirValueGetType(mlirOperationGetResult(op, i));
    mlirOperationStateAddResults(&state, 1, &t);
  }
  for (intptr_t i = 0; i < mlirOperationGetNumAttributes(op); i++) {
    MlirNamedAttribute a = mlirOperationGetAttribute(op, i);
    MlirStringRef an = mlirIdentifierStr(a.name);
    if (an.length == 12 && memcmp(an.data, "kiln.held_as", 12) == 0) continue;
    mlirOperationStateAddAttributes(&state, 1, &a);
  }
  if (!mlirAttributeIsNull(held_as)) {
    MlirNamedAttribute a = kiln_compiler_named_attr(ctx, "kiln.held_as", held_as);
    mlirOperationStateAddAttributes(&state, 1, &a);
  }
  MlirOperation now = mlirOperationCreate(&state);
  mlirBlockInsertOwnedOperationBefore(mlirOperationGetBlock(op), op, now);
  for (intptr_t i = 0; i < n_out; i++) {
    mlirValueReplaceAllUsesOfWith(mlirOperationGetResult(op, i), mlirOperationGetResult(now, i));
  }
  mlirOperationDestroy(op);
}

/* One of f64_only_math on another type than f64. */
static bool held_back(MlirOperation op) {
  for (size_t i = 0; f64_only_math[i]; i++) {
    if (kiln_compiler_op_is(op, f64_only_math[i])) {
      return mlirOperationGetNumResults(op) != 1 ||
             !mlirTypeIsAF64(mlirValueGetType(mlirOperationGetResult(op, 0)));
    }
  }
  return false;
}

static KILN_MUST_USE kiln_status_t expand_f64_upstream(kiln_compiler_context_t *context, MlirModule module,
                                                       const char *name, const char *stage) {
  MlirContext ctx = context->mlir;
  kiln_compiler_ops_t ops = {0};
  mlirOperationWalk(mlirModuleGetOperation(module), kiln_compiler_ops_collect_all, &ops, MlirWalkPreOrder);
  bool allowed = mlirContextGetAllowUnregisteredDialects(ctx);
  mlirContextSetAllowUnregisteredDialects(ctx, true);
  for (size_t i = 0; i < ops.n; i++) {
    if (held_back(ops.items[i])) {
      rebuild_as(ctx, ops.items[i], mlirStringRefCreateFromCString("kiln.held"),
                 mlirStringAttrGet(ctx, mlirIdentifierStr(mlirOperationGetName(ops.items[i]))));
    }
  }
  kiln_status_t st = run_pipeline(
      context, module, "builtin.module(gpu.module(" EXPAND_MATH(F64_UPSTREAM_MATH) "))", name, stage);
  ops.n = 0;
  mlirOperationWalk(mlirModuleGetOperation(module), kiln_compiler_ops_collect_all, &ops, MlirWalkPreOrder);
  for (size_t i = 0; i < ops.n; i++) {
    if (kiln_compiler_op_is(ops.items[i], "kiln.held")) {
      MlirAttribute held =
          mlirOperationGetAttributeByName(ops.items[i], mlirStringRefCreateFromCString("kiln.held_as"));
      rebuild_as(ctx, ops.items[i], mlirStringAttrGetValue(held), (MlirAttribute){NULL});
    }
  }
  mlirContextSetAllowUnregisteredDialects(ctx, allowed);
  kiln_free(ops.items);
  return st;
}

static KILN_MUST_USE kiln_status_t emulate_f64(kiln_compiler_context_t *context, MlirModule module,
                                               const char *name, const char *target, const char *stage) {
  if (!kiln_compiler_kernels_have_f64(module)) return NULL;
  KILN_RETURN_IF_ERROR(kiln_compiler_kernels_expand_math(context->mlir, module, "", KILN_F64_MATH_FIRST));
  KILN_RETURN_IF_ERROR(expand_f64_upstream(context, module, name, stage));
  KILN_RETURN_IF_ERROR(kiln_compiler_kernels_expand_math(context->mlir, module, "", F64_SOFT_MATH_HELPERS));
  return kiln_compiler_kernels_soft_f64(context->mlir, module, name, target);
}

static KILN_MUST_USE kiln_status_t spirv_prepare_types(kiln_compiler_context_t *context, MlirModule module,
                                                       const kiln_target_t *t, const char *name,
                                                       const char *stage) {
  bool float16 = kiln_compiler_list_has(t->spirv_capabilities, "Float16");
  bool int64 = kiln_compiler_list_has(t->spirv_capabilities, "Int64");
  kiln_compiler_kernels_only(module);
  if (!kiln_compiler_list_has(t->spirv_capabilities, "Float64")) {
    KILN_RETURN_IF_ERROR(emulate_f64(context, module, name, t->id, stage));
  }
  /* convert-math-to-spirv, run on its own, reads the profile from a
   * spirv.target_env attribute, not from the gpu.module's targets, and without
   * one converts as if nothing but Shader existed (f16 math became f32). */
  kiln_buf_t env;
  kiln_buf_init(&env);
  kiln_buf_appendf(
      &env, "#spirv.target_env<#spirv.vce<v%u.%u, [%s], [%s]>, api=Vulkan, #spirv.resource_limits<>>",
      t->spirv_version_major, t->spirv_version_minor, t->spirv_capabilities, t->spirv_extensions);
  MlirAttribute env_attr = mlirAttributeParseGet(context->mlir, mlirStringRefCreate(env.data, env.len));
  kiln_buf_deinit(&env);
  if (mlirAttributeIsNull(env_attr)) {
    return KILN_STATUS(KILN_STATUS_INTERNAL, "%s: kiln's SPIR-V profile for %s does not parse", name, t->id);
  }
  MlirBlock body = mlirModuleGetBody(module);
  for (MlirOperation op = mlirBlockGetFirstOperation(body); !mlirOperationIsNull(op);
       op = mlirOperationGetNextInBlock(op)) {
    mlirOperationSetDiscardableAttributeByName(op, mlirStringRefCreateFromCString("spirv.target_env"),
                                               env_attr);
  }
  kiln_compiler_kernels_floats_as_bits(context->mlir, module,
                                       KILN_FLOATS_BF16 | (float16 ? 0u : KILN_FLOATS_F16));
  /* SPIR-V has no erf, cbrt or atan2, and leaves asin/acos and OpFRem precision to
   * the driver (lavapipe's fmod of 1e30 by 3.3 was 0).
   * KILN_TEST_SPIRV_MATH (a test hook, never set in production) widens the list,
   * so the helpers only AMD uses run on lavapipe in CI and their numbers are
   * checked (tests/CMakeLists.txt: corpus.lavapipe_math_helpers). */
  const char *math_ops = getenv("KILN_TEST_SPIRV_MATH");
  KILN_RETURN_IF_ERROR(kiln_compiler_kernels_expand_math(
      context->mlir, module,
      math_ops && *math_ops ? math_ops
                            : "erf,cbrt,atan2,asin,acos,remf,erfc,trunc,ctpop,cttz,ipowi," KILN_MATH_FIRST,
      int64 ? "ipowi" : "ipowi," SPIRV_I64_HELPERS));
  /* i64 without Int64: pairs of i32 (arith-emulate-wide-int; the buffers by kiln). */
  if (!int64) {
    kiln_compiler_kernels_split_i64(context->mlir, module);
    kiln_compiler_kernels_guard_i64_shifts(context->mlir, module);
    kiln_compiler_kernels_split_carried_i64(context->mlir, module);
  }
  kiln_compiler_kernels_widen_unsigned(context->mlir, module,
                                       kiln_compiler_list_has(t->spirv_capabilities, "Int8"),
                                       kiln_compiler_list_has(t->spirv_capabilities, "Int16"));
  kiln_buf_t passes;
  kiln_buf_init(&passes);
  kiln_buf_appendf(&passes,
                   "builtin.module(gpu.module(%sarith-emulate-unsupported-floats{source-types=%s "
                   "target-type=f32},arith-expand{include-bf16=true}))",
                   int64 ? "" : "arith-emulate-wide-int{widest-int-supported=32},",
                   float16 ? "bf16" : "bf16,f16");
  kiln_status_t st = run_pipeline(context, module, passes.data, name, stage);
  kiln_buf_deinit(&passes);
  KILN_RETURN_IF_ERROR(st);
  /* No canonicalize before the f16 expansion: it folds truncf(sitofp) back into an
   * f16 sitofp. After it, canonicalize folds the bitcast pairs. */
  if (!float16) KILN_RETURN_IF_ERROR(kiln_compiler_kernels_expand_f16(context->mlir, module));
  KILN_RETURN_IF_ERROR(
      run_pipeline(context, module, "builtin.module(gpu.module(canonicalize))", name, stage));
  return kiln_compiler_kernels_check_floats(context->mlir, module,
                                            KILN_FLOATS_BF16 | (float16 ? 0u : KILN_FLOATS_F16), name, t->id);
}

static KILN_MUST_USE kiln_status_t spirv_serialize(kiln_compiler_context_t *context, MlirModule module,
                                                   const kiln_target_t *target, const char *name,
                                                   const char *stage) {
  static const char prefix[] = "__spv__";
  MlirBlock body = mlirModuleGetBody(module);
  MlirOperation op = mlirBlockGetFirstOperation(body);
  while (!mlirOperationIsNull(op)) {
    MlirOperation next = mlirOperationGetNextInBlock(op);
    MlirAttribute sym = mlirOperationGetAttributeByName(op, mlirStringRefCreateFromCString("sym_name"));
    if (kiln_compiler_op_is(op, "spirv.module") && !mlirAttributeIsNull(sym)) {
      MlirStringRef s = mlirStringAttrGetValue(sym);
      if (s.length > sizeof prefix - 1 && memcmp(s.data, prefix, sizeof prefix - 1) == 0) {
        MlirStringRef target_name = {s.data + sizeof prefix - 1, s.length - (sizeof prefix - 1)};
        MlirOperation gpu_module = find_symbol(body, "gpu.module", target_name);
        if (!mlirOperationIsNull(gpu_module)) {
          set_spirv_version(context->mlir, op, target);
          mlirOperationRemoveFromParent(op);
          mlirBlockAppendOwnedOperation(mlirRegionGetFirstBlock(mlirOperationGetRegion(gpu_module, 0)), op);
        }
      }
    }
    op = next;
  }
  return run_pipeline(context, module, "builtin.module(gpu-module-to-binary)", name, stage);
}

/* ---- cubin through ptxas (optional) ---- */

/* Returns a path in `found` (or the environment's), or NULL. */
static const char *find_ptxas(char *found, size_t cap) {
  const char *env = getenv("KILN_PTXAS");
  if (env && *env) return access(env, X_OK) == 0 ? env : NULL;
  const char *path = getenv("PATH");
  while (path && *path) {
    const char *colon = strchr(path, ':');
    size_t n = colon ? (size_t)(colon - path) : strlen(path);
    if (n && n + 8 < cap) {
      snprintf(found, cap, "%.*s/ptxas", (int)n, path);
      if (access(found, X_OK) == 0) return found;
    }
    path = colon ? colon + 1 : NULL;
  }
  return access("/usr/local/cuda/bin/ptxas", X_OK) == 0 ? "/usr/local/cuda/bin/ptxas" : NULL;
}

/* Assembles one kernel's PTX; a failure fails the target (ptxas disagreeing with
 * LLVM's PTX is a bug worth seeing), a missing ptxas is not a failure. */
static KILN_MUST_USE kiln_status_t assemble_cubin(const char *ptxas, const kiln_target_t *t,
                                                  kiln_compiler_kernel_t *k) {
  const char *tmp = getenv("TMPDIR");
  kiln_buf_t dir;
  kiln_buf_init(&dir);
  kiln_buf_appendf(&dir, "%s/kiln-ptxas-XXXXXX", tmp && *tmp ? tmp : "/tmp");
  if (!mkdtemp(dir.data)) {
    kiln_status_t st = KILN_STATUS_ERRNO(errno, "cannot create %s", dir.data);
    kiln_buf_deinit(&dir);
    return st;
  }
  kiln_buf_t ptx, cubin, arch;
  kiln_buf_init(&ptx);
  kiln_buf_init(&cubin);
  kiln_buf_init(&arch);
  kiln_buf_appendf(&ptx, "%s/k.ptx", dir.data);
  kiln_buf_appendf(&cubin, "%s/k.cubin", dir.data);
  kiln_status_t st = NULL;
  FILE *f = fopen(ptx.data, "wb");
  if (!f || fwrite(k->binary, 1, k->binary_len, f) != k->binary_len) {
    st = KILN_STATUS_ERRNO(errno, "cannot write %s", ptx.data);
  }
  if (f) fclose(f);
  if (!st) {
    kiln_buf_appendf(&arch, "-arch=%s", t->chip);
    const char *argv[] = {ptxas, arch.data, "-O3", "-o", cubin.data, ptx.data, NULL};
    char out[2048];
    size_t n;
    if (kiln_compiler_run_command(argv, out, sizeof out) != 0) {
      st = KILN_STATUS(KILN_STATUS_INTERNAL, "ptxas (%s) rejected kernel %s for %s: %s", ptxas, k->name,
                       t->chip, out);
    } else {
      FILE *c = fopen(cubin.data, "rb");
      kiln_buf_t bytes;
      kiln_buf_init(&bytes);
      char chunk[65536];
      while (c && (n = fread(chunk, 1, sizeof chunk, c)) > 0) kiln_buf_append(&bytes, chunk, n);
      if (c) fclose(c);
      k->cubin_len = bytes.len;
      k->cubin = (unsigned char *)kiln_buf_take(&bytes);
      kiln_buf_deinit(&bytes);
    }
  }
  unlink(ptx.data);
  unlink(cubin.data);
  rmdir(dir.data);
  kiln_buf_deinit(&ptx);
  kiln_buf_deinit(&cubin);
  kiln_buf_deinit(&arch);
  kiln_buf_deinit(&dir);
  return st;
}

/* Every workgroup must fit the device: per-dimension sizes and invocations. */
static KILN_MUST_USE kiln_status_t check_limits(const kiln_target_t *t, const launches_t *launches,
                                                const char *name) {
  const kiln_target_gpu_limits_t *lim = &t->limits;
  for (size_t i = 0; i < launches->n; i++) {
    const uint32_t *b = launches->items[i].block;
    uint64_t invocations = (uint64_t)b[0] * b[1] * b[2];
    bool dims_ok = true;
    for (int d = 0; d < 3; d++)
      dims_ok = dims_ok && (!lim->max_workgroup_size[d] || b[d] <= lim->max_workgroup_size[d]);
    if (!dims_ok || (lim->max_workgroup_invocations && invocations > lim->max_workgroup_invocations)) {
      return KILN_STATUS(KILN_STATUS_INVALID_ARGUMENT,
                         "%s: kernel %s needs a %ux%ux%u workgroup, over %s's limits (%ux%ux%u, "
                         "%u invocations)",
                         name, launches->items[i].kernel_name, b[0], b[1], b[2], t->id,
                         lim->max_workgroup_size[0], lim->max_workgroup_size[1], lim->max_workgroup_size[2],
                         lim->max_workgroup_invocations);
    }
  }
  return NULL;
}

static void plan_kernels(const kiln_vmfb_plan_t *plan, bool *noalias, bool *aligned, size_t n_kernels);

/* An epilogue fused into a matmul (gpu_epilogue.h), per matmul kernel. */
typedef struct fusion_s {
  unsigned e;     /* 1 + the elementwise kernel whose work the matmul's dispatches take, or 0 */
  unsigned c_arg; /* that kernel's argument holding the matmul's C */
  unsigned d_arg; /* the one it stores */
  bool keep_c;    /* whether C must still be stored (something after it may read C) */
} fusion_t;

static void plan_fusions(const kiln_vmfb_plan_t *plan, const launches_t *launches, const bool *swappable,
                         const kiln_target_t *t, fusion_t *out);

typedef struct carry_s {
  const launches_t *launches;
  const bool *noalias; /* per launch: plan_kernels */
} carry_t;

static MlirWalkResult carry_accumulators(MlirOperation op, void *user) {
  if (!kiln_compiler_op_is(op, "gpu.func")) return MlirWalkResultAdvance;
  carry_t *c = user;
  MlirAttribute module_sym = mlirOperationGetAttributeByName(mlirOperationGetParentOperation(op),
                                                             mlirStringRefCreateFromCString("sym_name"));
  MlirAttribute func_sym = mlirOperationGetAttributeByName(op, mlirStringRefCreateFromCString("sym_name"));
  if (mlirAttributeIsNull(module_sym) || mlirAttributeIsNull(func_sym)) return MlirWalkResultSkip;
  const launch_t *l =
      find_launch(c->launches, mlirStringAttrGetValue(module_sym), mlirStringAttrGetValue(func_sym));
  bool distinct = l && c->noalias[l - c->launches->items];
  kiln_compiler_kernel_accumulators_to_registers(op, distinct);
  return MlirWalkResultSkip;
}

/* GPU kernels' loops (kernel_loops.h): accumulators carried in registers, with
 * the plan's word on which kernels' arguments never alias; and, for the LLVM
 * backends, multiplies and adds that may fuse into FMAs (SPIR-V lets the driver
 * fuse unless told not to). */
static void shape_gpu_loops(kiln_compiler_context_t *context, MlirModule module, const launches_t *launches,
                            const bool *noalias, const kiln_target_t *t) {
  carry_t c = {launches, noalias};
  mlirOperationWalk(mlirModuleGetOperation(module), carry_accumulators, &c, MlirWalkPreOrder);
  if (t->kind == KILN_TARGET_KIND_CUDA || t->kind == KILN_TARGET_KIND_HIP) {
    kiln_compiler_kernels_allow_contraction(context->mlir, module);
  }
}

/* Contractions this target tiles its own way (gpu_gemm.h), row reductions it
 * runs as workgroup reductions (gpu_reduce.h), depthwise convs and elementwise
 * kernels it runs in vectors (gpu_depthwise.h, gpu_elementwise.h): kernel i's
 * new grid and workgroup size in grids[i] and blocks[i] (left 0 where kept).
 * Only kernels marked in `swappable`: whose bindings the plan never overlaps
 * (the tiled kernel reads A and B after other invocations wrote C) and always
 * binds at 16-byte offsets (the new kernels load and store 128-bit vectors,
 * which CUDA and AMD fault on at a misaligned address). */
/* The tiled matmul for launch i with the epilogue `f` fused into it: the
 * epilogue kernel's arguments but C follow the matmul's own (its D typed as C). */
static KILN_MUST_USE kiln_status_t replace_fused(MlirContext mlir, MlirModule module, MlirOperation func,
                                                 MlirOperation e_func, const launch_t *l, const fusion_t *f,
                                                 const kiln_target_t *t, uint32_t grid[3],
                                                 uint32_t block[3]) {
  MlirBlock e_entry = mlirRegionGetFirstBlock(mlirOperationGetRegion(e_func, 0));
  unsigned n_e = (unsigned)mlirBlockGetNumArguments(e_entry);
  char **types = kiln_calloc(n_e, sizeof *types);
  unsigned n = 0;
  for (unsigned a = 0; a < n_e; a++) {
    if (a == f->c_arg) continue;
    types[n++] = a == f->d_arg
                     ? NULL
                     : kiln_compiler_gpu_type_text(mlirValueGetType(mlirBlockGetArgument(e_entry, a)));
  }
  /* D's element as the target's copy types it (f32, f16, bf16 or i16 bits). */
  MlirType d_elem = mlirShapedTypeGetElementType(mlirValueGetType(mlirBlockGetArgument(e_entry, f->d_arg)));
  char *elem = mlirTypeIsAF32(d_elem) ? NULL : kiln_compiler_gpu_type_text(d_elem);
  kiln_compiler_gemm_extra_t extra = {(const char *const *)types, n, elem};
  MlirOperation fused = {NULL};
  kiln_status_t st = kiln_compiler_gemm_replace(mlir, module, func, &l->gemm, t, &extra, grid, block, &fused);
  if (!st) {
    st = kiln_compiler_epilogue_apply(mlir, fused, l->gemm.c_arg, l->gemm.n_args, e_func, f->c_arg, f->keep_c,
                                      t->id);
  }
  for (unsigned i = 0; i < n; i++) kiln_free(types[i]);
  kiln_free(types);
  kiln_free(elem);
  return st;
}

/* A fused epilogue's kernel, never dispatched on this target: its body goes
 * (but the return), so it costs no code generation; it keeps its symbol and
 * arguments, which the executable's exports and the fused matmul's bindings
 * are numbered by. */
static void empty_kernel(MlirOperation func) {
  MlirBlock entry = mlirRegionGetFirstBlock(mlirOperationGetRegion(func, 0));
  MlirOperation last = mlirBlockGetTerminator(entry);
  kiln_compiler_ops_t ops = {0};
  for (MlirOperation op = mlirBlockGetFirstOperation(entry); !mlirOperationEqual(op, last);
       op = mlirOperationGetNextInBlock(op)) {
    kiln_compiler_ops_push(&ops, op);
  }
  /* Last first: an op's users come after it in the block (E has no regions). */
  for (size_t i = ops.n; i-- > 0;) mlirOperationDestroy(ops.items[i]);
  kiln_free(ops.items);
}

static KILN_MUST_USE kiln_status_t tile_contractions(kiln_compiler_context_t *context, MlirModule module,
                                                     const launches_t *launches, const bool *swappable,
                                                     const fusion_t *fusions, const kiln_target_t *t,
                                                     uint32_t (*grids)[3], uint32_t (*blocks)[3],
                                                     uint32_t (*fused)[2]) {
  MlirOperation gm = kiln_compiler_first_op(mlirModuleGetBody(module), "gpu.module");
  if (mlirOperationIsNull(gm)) return NULL;
  MlirBlock body = mlirRegionGetFirstBlock(mlirOperationGetRegion(gm, 0));
  /* Epilogues whose target copy still reads as one: their kernels are left as
   * they are (the plan drops their dispatches). */
  bool *taken = kiln_calloc(launches->n + 1, sizeof *taken);
  for (size_t i = 0; i < launches->n; i++) {
    if (!fusions[i].e) continue;
    const launch_t *e = &launches->items[fusions[i].e - 1];
    MlirOperation e_func = find_symbol(body, "gpu.func", mlirStringRefCreateFromCString(e->kernel_name));
    if (!mlirOperationIsNull(e_func) && kiln_compiler_epilogue_fits(e_func, fusions[i].c_arg)) {
      taken[fusions[i].e - 1] = true;
    }
  }
  kiln_status_t st = NULL;
  for (size_t i = 0; i < launches->n && !st; i++) {
    const launch_t *l = &launches->items[i];
    bool gemm = kiln_compiler_gemm_fits(&l->gemm, t), reduce = kiln_compiler_reduce_fits(&l->reduce, t);
    bool depthwise = kiln_compiler_depthwise_fits(&l->depthwise, t);
    if (!swappable[i] || taken[i]) continue;
    MlirOperation func = find_symbol(body, "gpu.func", mlirStringRefCreateFromCString(l->kernel_name));
    if (mlirOperationIsNull(func)) continue;
    MlirContext mlir = context->mlir;
    if (gemm && fusions[i].e && taken[fusions[i].e - 1]) {
      MlirOperation e_func = find_symbol(
          body, "gpu.func", mlirStringRefCreateFromCString(launches->items[fusions[i].e - 1].kernel_name));
      st = replace_fused(mlir, module, func, e_func, l, &fusions[i], t, grids[i], blocks[i]);
      if (!st) {
        fused[fusions[i].e - 1][0] = (uint32_t)i + 1;
        fused[fusions[i].e - 1][1] = fusions[i].c_arg;
        empty_kernel(e_func);
      }
      continue;
    }
    if (!gemm && !reduce && !depthwise) {
      bool done = false;
      st = kiln_compiler_elementwise_vectorize(mlir, module, func, l->grid, l->block, t, grids[i], blocks[i],
                                               &done);
      continue;
    }
    st = gemm ? kiln_compiler_gemm_replace(mlir, module, func, &l->gemm, t, NULL, grids[i], blocks[i], NULL)
         : reduce
             ? kiln_compiler_reduce_replace(mlir, module, func, &l->reduce, t, grids[i], blocks[i])
             : kiln_compiler_depthwise_replace(mlir, module, func, &l->depthwise, t, grids[i], blocks[i]);
  }
  kiln_free(taken);
  return st;
}

static void compile_target(kiln_compiler_context_t *context, MlirModule front, const launches_t *launches,
                           const kiln_vmfb_plan_t *plan, const char *name,
                           kiln_compiler_target_output_t *out) {
  int64_t t0 = kiln_time_monotonic_ns();
  kiln_buf_t pipeline;
  kiln_buf_init(&pipeline);
  out->status = check_limits(out->target, launches, name);
  if (!out->status) out->status = back_pipeline(context, out->target, &pipeline);
  size_t n_launches = launches->n ? launches->n : 1;
  bool *noalias = kiln_calloc(n_launches, sizeof *noalias);
  bool *swappable = kiln_calloc(n_launches, sizeof *swappable);
  plan_kernels(plan, noalias, swappable, launches->n);
  /* KILN_GPU_NAIVE (a benchmark hook, never set in production): the front
   * half's kernels as they are, none replaced, vectorized or fused, so
   * bench_kernels can print them beside kiln's in one run. */
  const char *naive = getenv("KILN_GPU_NAIVE");
  bool keep_front = naive && *naive && strcmp(naive, "0") != 0;
  for (size_t i = 0; i < launches->n; i++) swappable[i] = swappable[i] && noalias[i] && !keep_front;
  fusion_t *fusions = kiln_calloc(n_launches, sizeof *fusions);
  plan_fusions(plan, launches, swappable, out->target, fusions);
  uint32_t(*grids)[3] = kiln_calloc(n_launches, sizeof *grids);
  uint32_t(*blocks)[3] = kiln_calloc(n_launches, sizeof *blocks);
  uint32_t(*fused)[2] = kiln_calloc(n_launches, sizeof *fused);
  if (!out->status) {
    MlirModule module = mlirModuleFromOperation(mlirOperationClone(mlirModuleGetOperation(front)));
    annotate_t a = {launches, context->mlir, out->target->kind == KILN_TARGET_KIND_VULKAN};
    mlirOperationWalk(mlirModuleGetOperation(module), annotate_kernel, &a, MlirWalkPreOrder);
    char stage[64];
    snprintf(stage, sizeof stage, "code generation for %s", out->target->id);
    out->status = prepare_small_types(context, module, out->target, name, stage);
    if (out->status) {
      /* reported below */
    } else if (out->target->kind == KILN_TARGET_KIND_VULKAN) {
      out->status = spirv_prepare_types(context, module, out->target, name, stage);
    } else if (out->target->kind == KILN_TARGET_KIND_CUDA) {
      /* NVPTX expands frem as x - y*trunc(x/y), wrong past quotients of 2^24 (2^53
       * in f64); libdevice has the rest in f64. Neither translates math.ipowi, nor
       * i64 cttz, ctpop or absi. */
      out->status = kiln_compiler_kernels_expand_math(context->mlir, module, "remf,trunc,ctpop,cttz,ipowi",
                                                      "remf,trunc,ipowi,cttz,ctpop,absi");
    } else if (out->target->kind == KILN_TARGET_KIND_HIP) {
      /* Without ROCm's device libraries the AMDGPU backend has none of these. f16
       * and bf16 math runs in f32 first, so kiln's f32 code covers it too. */
      out->status = kiln_compiler_kernels_expand_math(context->mlir, module, "", KILN_F64_MATH_FIRST);
      if (!out->status) {
        out->status =
            run_pipeline(context, module, "builtin.module(gpu.module(" HIP_KERNEL_EXPAND "))", name, stage);
      }
      if (!out->status) {
        out->status =
            kiln_compiler_kernels_expand_math(context->mlir, module,
                                              "erf,cbrt,atan,atan2,asin,acos,floor,ceil,log2,sin,cos,remf,"
                                              "log10,tan,erfc,ipowi",
                                              KILN_F64_MATH_HELPERS ",floor,ceil");
      }
    }
    /* After the small types became their bits: a carried value has the type
     * the buffer holds. */
    if (!out->status) shape_gpu_loops(context, module, launches, noalias, out->target);
    if (!out->status) {
      out->status =
          tile_contractions(context, module, launches, swappable, fusions, out->target, grids, blocks, fused);
    }
    if (!out->status) out->status = run_pipeline(context, module, pipeline.data, name, stage);
    if (!out->status && out->target->kind == KILN_TARGET_KIND_VULKAN) {
      out->status = spirv_serialize(context, module, out->target, name, stage);
    }
    if (!out->status) {
      harvest_t h = {launches, out};
      out->kernels = kiln_calloc(launches->n ? launches->n : 1, sizeof *out->kernels);
      mlirOperationWalk(mlirModuleGetOperation(module), harvest_binary, &h, MlirWalkPreOrder);
      if (out->n_kernels != launches->n) {
        out->status =
            KILN_STATUS(KILN_STATUS_INTERNAL, "%s: %zu of %zu kernels came out of code generation for %s",
                        name, out->n_kernels, launches->n, out->target->id);
      }
      for (size_t k = 0; !out->status && k < out->n_kernels; k++) {
        out->kernels[k].fused_into = fused[k][0];
        out->kernels[k].fused_input = fused[k][1];
        if (fused[k][0]) {
          /* The matmul takes the epilogue's arguments but C after its own. */
          kiln_compiler_kernel_t *g = &out->kernels[fused[k][0] - 1], *e = &out->kernels[k];
          g->args = kiln_realloc(g->args, (g->n_args + e->n_args) * sizeof *g->args);
          for (size_t x = 0; x < e->n_args; x++) {
            if (x != fused[k][1]) g->args[g->n_args++] = e->args[x];
          }
        }
        if (!blocks[k][0]) continue;
        memcpy(out->kernels[k].block_size, blocks[k], sizeof blocks[k]);
        memcpy(out->kernels[k].grid, grids[k], sizeof grids[k]);
      }
      char found[512];
      const char *ptxas = out->target->kind == KILN_TARGET_KIND_CUDA ? find_ptxas(found, sizeof found) : NULL;
      for (size_t k = 0; ptxas && !out->status && k < out->n_kernels; k++) {
        /* Kernels share their device module: assemble each module once. */
        kiln_compiler_kernel_t *kk = &out->kernels[k];
        if (kk->same_as) {
          kk->cubin = out->kernels[kk->same_as - 1].cubin;
          kk->cubin_len = out->kernels[kk->same_as - 1].cubin_len;
        } else {
          out->status = assemble_cubin(ptxas, out->target, kk);
        }
      }
    }
    mlirModuleDestroy(module);
  }
  kiln_buf_deinit(&pipeline);
  kiln_free(noalias);
  kiln_free(swappable);
  kiln_free(grids);
  kiln_free(blocks);
  kiln_free(fused);
  kiln_free(fusions);
  out->backend_ms = (kiln_time_monotonic_ns() - t0) / 1000000;
}

/* ---- CPU targets ---- */

typedef struct cpu_run_s {
  kiln_compiler_context_t *context;
  const char *name, *stage;
} cpu_run_t;

static KILN_MUST_USE kiln_status_t cpu_run(void *user, MlirModule module, const char *pipeline) {
  cpu_run_t *r = user;
  return run_pipeline(r->context, module, pipeline, r->name, r->stage);
}

/* Whether bindings x and y may touch the same bytes: the same buffer (a SELECT
 * buffer counts as both of its choices), apart only when both ranges are static
 * and disjoint. */
static bool bindings_overlap(const kiln_vmfb_function_t *fn, const kiln_vmfb_binding_t *x,
                             const kiln_vmfb_binding_t *y) {
  uint32_t xs[3] = {x->buffer, UINT32_MAX, UINT32_MAX}, ys[3] = {y->buffer, UINT32_MAX, UINT32_MAX};
  if (x->buffer < fn->n_buffers && fn->buffers[x->buffer].kind == KILN_VMFB_BUFFER_SELECT) {
    xs[1] = fn->buffers[x->buffer].select_a, xs[2] = fn->buffers[x->buffer].select_b;
  }
  if (y->buffer < fn->n_buffers && fn->buffers[y->buffer].kind == KILN_VMFB_BUFFER_SELECT) {
    ys[1] = fn->buffers[y->buffer].select_a, ys[2] = fn->buffers[y->buffer].select_b;
  }
  bool same = false;
  for (int i = 0; i < 3; i++) {
    for (int j = 0; j < 3; j++) same = same || (xs[i] != UINT32_MAX && xs[i] == ys[j]);
  }
  bool apart = !x->length_expr && !y->length_expr && x->length && y->length &&
               (x->offset + x->length <= y->offset || y->offset + y->length <= x->offset);
  return same && !apart;
}

/* What the host plan says of each kernel, in one pass over its dispatches:
 * noalias[k], that no buffer kernel k writes overlaps another binding of the
 * same dispatch (a SELECT buffer counts as both of its choices), so its
 * pointers are noalias (inputs are never written, and the plan allocates
 * whatever a kernel writes); and, where `aligned` is not NULL, aligned[k], that
 * every dispatch binds each buffer at a multiple of 16 bytes (buffers
 * themselves are allocated at least that aligned), so 128-bit accesses stay
 * aligned. */
static void plan_kernels(const kiln_vmfb_plan_t *plan, bool *noalias, bool *aligned, size_t n_kernels) {
  for (size_t k = 0; k < n_kernels; k++) {
    noalias[k] = plan != NULL;
    if (aligned) aligned[k] = plan != NULL;
  }
  for (size_t f = 0; plan && f < plan->n_functions; f++) {
    const kiln_vmfb_function_t *fn = &plan->functions[f];
    for (size_t s = 0; s < fn->n_steps; s++) {
      const kiln_vmfb_step_t *st = &fn->steps[s];
      if (st->kind != KILN_VMFB_STEP_DISPATCH || st->kernel >= n_kernels) continue;
      for (size_t a = 0; a < st->n_bindings; a++) {
        const kiln_vmfb_binding_t *x = &st->bindings[a];
        if (aligned && x->offset % 16) aligned[st->kernel] = false;
        for (size_t b = 0; b < st->n_bindings && noalias[st->kernel]; b++) {
          if (a != b && !x->read_only && bindings_overlap(fn, x, &st->bindings[b]))
            noalias[st->kernel] = false;
        }
      }
    }
  }
}

/* Epilogue fusions the plan allows for target `t` (gpu_epilogue.h): out[g] for
 * a matmul or conv kernel g the target tiles (swappable), when every dispatch
 * of g is directly followed by one of the same elementwise kernel e, of C's
 * shape, binding C where g binds it (exactly one of e's arguments, one e reads
 * at the element it stores), and every dispatch of e directly follows one of g,
 * in functions without branches (their steps are dropped per target); e's other
 * buffers apart from g's where either writes; no push constants. C stays
 * stored unless it is a transient buffer that no result, SELECT buffer or later
 * step touches. */
static void plan_fusions(const kiln_vmfb_plan_t *plan, const launches_t *launches, const bool *swappable,
                         const kiln_target_t *t, fusion_t *out) {
  size_t n = launches->n;
  if (!plan || !n || t->kind == KILN_TARGET_KIND_CPU) return;
  int *pair = kiln_calloc(n, sizeof *pair); /* 1 + the epilogue after each dispatch, -1 when one is not */
  unsigned *uses = kiln_calloc(n, sizeof *uses), *paired = kiln_calloc(n, sizeof *paired);
  unsigned *c_of = kiln_calloc(n, sizeof *c_of);
  bool *keep = kiln_calloc(n, sizeof *keep);
  for (size_t f = 0; f < plan->n_functions; f++) {
    const kiln_vmfb_function_t *fn = &plan->functions[f];
    bool branches = false;
    for (size_t s = 0; s < fn->n_steps; s++) {
      branches =
          branches || fn->steps[s].kind == KILN_VMFB_STEP_BRANCH || fn->steps[s].kind == KILN_VMFB_STEP_JUMP;
    }
    for (size_t s = 0; s < fn->n_steps; s++) {
      const kiln_vmfb_step_t *st = &fn->steps[s], *next = s + 1 < fn->n_steps ? &fn->steps[s + 1] : NULL;
      if (st->kind != KILN_VMFB_STEP_DISPATCH || st->kernel >= n) continue;
      uses[st->kernel]++;
      const kiln_compiler_gemm_t *g = &launches->items[st->kernel].gemm;
      if (!swappable[st->kernel] || !kiln_compiler_gemm_fits(g, t)) continue;
      if (branches || !next || next->kind != KILN_VMFB_STEP_DISPATCH || next->kernel >= n) {
        pair[st->kernel] = -1;
        continue;
      }
      unsigned e = next->kernel;
      const kiln_compiler_epilogue_t *ep = &launches->items[e].epilogue;
      /* E's output is C's shape: [batch,] M x N, or a conv's NHWC output. */
      bool shape = g->conv_h
                       ? ep->rank == 4 && ep->dims[1] == g->out_h && ep->dims[2] == g->out_w &&
                             ep->dims[0] * ep->dims[1] * ep->dims[2] == g->m && ep->dims[3] == g->n
                       : ep->rank == g->rank && ep->dims[ep->rank - 2] == g->m &&
                             ep->dims[ep->rank - 1] == g->n && (g->rank == 2 || ep->dims[0] == g->batch);
      /* E's bindings 16-byte aligned like G's (D is stored in G's vectors); a
       * Vulkan dispatch keeps to 8 storage buffers (devices may allow few),
       * and a 16-bit D needs the profile's 16-bit storage and types (VideoCore
       * VII keeps such an epilogue's kernel). */
      size_t bound = st->n_bindings + next->n_bindings - 1;
      bool narrow_ok = ep->d_bytes != 2 || t->kind != KILN_TARGET_KIND_VULKAN ||
                       (kiln_compiler_list_has(t->spirv_capabilities, "StorageBuffer16BitAccess") &&
                        kiln_compiler_list_has(t->spirv_capabilities, "Float16") &&
                        kiln_compiler_list_has(t->spirv_capabilities, "Int16"));
      bool ok = ep->found && shape && swappable[e] && !st->n_constants && !next->n_constants &&
                g->c_arg < st->n_bindings && next->n_bindings == ep->n_args && narrow_ok &&
                bound <= (t->kind == KILN_TARGET_KIND_VULKAN ? 8u : 32u);
      const kiln_vmfb_binding_t *cb = ok ? &st->bindings[g->c_arg] : NULL;
      int c = -1, at_c = 0;
      for (unsigned a = 0; ok && a < ep->n_args; a++) {
        const kiln_vmfb_binding_t *b = &next->bindings[a];
        if (b->buffer == cb->buffer && b->offset == cb->offset && b->length == cb->length &&
            !b->length_expr && !cb->length_expr) {
          at_c++;
          if (ep->c_candidates >> a & 1u) c = (int)a;
        }
      }
      ok = ok && at_c == 1 && c >= 0;
      for (unsigned a = 0; ok && a < ep->n_args; a++) {
        for (size_t b = 0; ok && (int)a != c && b < st->n_bindings; b++) {
          const kiln_vmfb_binding_t *x = &next->bindings[a], *y = &st->bindings[b];
          ok = (x->read_only && y->read_only) || !bindings_overlap(fn, x, y);
        }
      }
      if (!ok || (pair[st->kernel] && pair[st->kernel] != (int)e + 1) ||
          (paired[st->kernel] && c_of[st->kernel] != (unsigned)c)) {
        pair[st->kernel] = -1;
        continue;
      }
      pair[st->kernel] = (int)e + 1;
      c_of[st->kernel] = (unsigned)c;
      paired[st->kernel]++;
      uint32_t cbuf = cb->buffer;
      bool live = cbuf >= fn->n_buffers || fn->buffers[cbuf].kind != KILN_VMFB_BUFFER_TRANSIENT;
      for (size_t r = 0; r < fn->n_results; r++) live = live || fn->results[r].buffer == cbuf;
      for (size_t b = 0; b < fn->n_buffers; b++) {
        live = live || (fn->buffers[b].kind == KILN_VMFB_BUFFER_SELECT &&
                        (fn->buffers[b].select_a == cbuf || fn->buffers[b].select_b == cbuf));
      }
      for (size_t later = s + 2; later < fn->n_steps && !live; later++) {
        const kiln_vmfb_step_t *l = &fn->steps[later];
        live = l->kind == KILN_VMFB_STEP_COPY && (l->src == cbuf || l->dst == cbuf);
        for (size_t b = 0; b < l->n_bindings; b++) live = live || l->bindings[b].buffer == cbuf;
      }
      keep[st->kernel] = keep[st->kernel] || live;
    }
  }
  for (size_t g = 0; g < n; g++) {
    unsigned e = pair[g] > 0 ? (unsigned)pair[g] - 1 : 0;
    if (pair[g] > 0 && e != g && paired[g] == uses[g] && uses[e] == paired[g]) {
      out[g] = (fusion_t){e + 1, c_of[g], launches->items[e].epilogue.d_arg, keep[g]};
    }
  }
  kiln_free(pair);
  kiln_free(uses);
  kiln_free(paired);
  kiln_free(c_of);
  kiln_free(keep);
}

static void compile_cpu(kiln_compiler_context_t *context, MlirModule front, const launches_t *launches,
                        const kiln_vmfb_plan_t *plan, const char *name, kiln_compiler_target_output_t *out) {
  int64_t t0 = kiln_time_monotonic_ns();
  const kiln_target_t *t = out->target;
  char stage[64];
  snprintf(stage, sizeof stage, "code generation for %s", t->id);
  MlirModule module = mlirModuleFromOperation(mlirOperationClone(mlirModuleGetOperation(front)));
  unsigned as_bits = KILN_FLOATS_BF16 | (t->f16_as_bits ? KILN_FLOATS_F16 : 0u);
  out->status = prepare_small_types(context, module, t, name, stage);
  /* KILN_TEST_CPU_SOFT_F64 (a test hook, never set in production) runs the f64
   * emulation of the Vulkan profiles here, where the host's own f64 checks it bit
   * for bit (tests/CMakeLists.txt: corpus.cpu_soft_f64). */
  if (!out->status && getenv("KILN_TEST_CPU_SOFT_F64")) {
    out->status = emulate_f64(context, module, name, t->id, stage);
  }
  if (!out->status) {
    kiln_compiler_kernels_f64_half_casts(context->mlir, module);
    kiln_compiler_kernels_floats_as_bits(context->mlir, module, as_bits);
    out->status =
        kiln_compiler_kernels_expand_math(context->mlir, module, KILN_MATH_FIRST, KILN_F64_MATH_FIRST);
  }
  if (!out->status) out->status = run_pipeline(context, module, CPU_KERNEL_EXPAND, name, stage);
  /* KILN_TEST_CPU_MATH64 (a test hook, never set in production) widens the f64
   * list, so the helpers only AMD uses run here and their numbers are checked
   * (tests/CMakeLists.txt: corpus.cpu_math64_helpers). */
  const char *math64 = getenv("KILN_TEST_CPU_MATH64");
  if (!out->status) {
    out->status = kiln_compiler_kernels_expand_math(context->mlir, module, CPU_KERNEL_MATH_HELPERS,
                                                    math64 && *math64 ? math64 : KILN_F64_MATH_HELPERS);
  }
  if (!out->status) {
    out->status =
        run_pipeline(context, module,
                     t->f16_as_bits ? CPU_KERNEL_TYPES("bf16,f16") : CPU_KERNEL_TYPES("bf16"), name, stage);
  }
  if (!out->status && t->f16_as_bits) out->status = kiln_compiler_kernels_expand_f16(context->mlir, module);
  if (!out->status)
    out->status = run_pipeline(context, module, "builtin.module(gpu.module(canonicalize))", name, stage);
  if (!out->status)
    out->status = kiln_compiler_kernels_check_floats(context->mlir, module, as_bits, name, t->id);
  const char **names = kiln_calloc(launches->n ? launches->n : 1, sizeof *names);
  uint32_t(*blocks)[3] = kiln_calloc(launches->n ? launches->n : 1, sizeof *blocks);
  bool *noalias = kiln_calloc(launches->n ? launches->n : 1, sizeof *noalias);
  for (size_t i = 0; i < launches->n; i++) {
    names[i] = launches->items[i].kernel_name;
    memcpy(blocks[i], launches->items[i].block, sizeof blocks[i]);
  }
  plan_kernels(plan, noalias, NULL, launches->n);
  unsigned char *elf = NULL;
  size_t elf_len = 0;
  cpu_run_t r = {context, name, stage};
  if (!out->status && launches->n) {
    out->status = kiln_compiler_cpu_library(context->mlir, module, t, names, (const uint32_t(*)[3])blocks,
                                            noalias, launches->n, cpu_run, &r, name, &elf, &elf_len);
  }
  if (!out->status) {
    out->kernels = kiln_calloc(launches->n ? launches->n : 1, sizeof *out->kernels);
    out->n_kernels = launches->n;
    for (size_t i = 0; i < launches->n; i++) {
      const launch_t *l = &launches->items[i];
      kiln_compiler_kernel_t *k = &out->kernels[i];
      k->name = kiln_strdup(l->kernel_name);
      k->module_name = kiln_strdup(l->module_name);
      memcpy(k->block_size, l->block, sizeof k->block_size);
      k->args = kiln_memdup(l->args, (l->n_args ? l->n_args : 1) * sizeof *l->args);
      k->n_args = l->n_args;
      /* One ELF holds every kernel: kernel 0 owns it, the others borrow it. */
      k->binary = elf;
      k->binary_len = elf_len;
      k->same_as = i ? 1 : 0;
    }
  }
  kiln_free(names);
  kiln_free(blocks);
  kiln_free(noalias);
  mlirModuleDestroy(module);
  out->backend_ms = (kiln_time_monotonic_ns() - t0) / 1000000;
}

struct back_job_s {
  kiln_compiler_context_t *context;
  MlirModule common, gpu;
  const launches_t *launches;
  const char *name;
  const kiln_compiler_output_t *output;
};

typedef struct back_job_s back_job_t;
static void target_ready(void *user, size_t index);

static void compile_one(void *user, size_t index, kiln_compiler_target_output_t *out) {
  back_job_t *job = user;
  (void)index;
  if (out->target->kind == KILN_TARGET_KIND_CPU) {
    const kiln_compiler_output_t *o = job->output;
    compile_cpu(job->context, job->gpu, job->launches, o->plan_status ? NULL : &o->plan, job->name, out);
  } else {
    const kiln_compiler_output_t *o = job->output;
    compile_target(job->context, job->gpu, job->launches, o->plan_status ? NULL : &o->plan, job->name, out);
  }
}

/* Unranked tensors are refused up front, naming the function, the argument or
 * result and its type, instead of failing inside every back half. (Dynamic
 * dimensions of ranked tensors compile: host.h, Dynamic shapes.) */
static KILN_MUST_USE kiln_status_t check_static_signatures(MlirModule module, const char *name) {
  for (MlirOperation op = mlirBlockGetFirstOperation(mlirModuleGetBody(module)); !mlirOperationIsNull(op);
       op = mlirOperationGetNextInBlock(op)) {
    if (!kiln_compiler_op_is(op, "func.func")) continue;
    MlirAttribute ft = mlirOperationGetAttributeByName(op, mlirStringRefCreateFromCString("function_type"));
    MlirAttribute sym = mlirOperationGetAttributeByName(op, mlirStringRefCreateFromCString("sym_name"));
    if (mlirAttributeIsNull(ft) || mlirAttributeIsNull(sym)) continue;
    MlirType fn = mlirTypeAttrGetValue(ft);
    for (int results = 0; results < 2; results++) {
      intptr_t n = results ? mlirFunctionTypeGetNumResults(fn) : mlirFunctionTypeGetNumInputs(fn);
      for (intptr_t i = 0; i < n; i++) {
        MlirType t = results ? mlirFunctionTypeGetResult(fn, i) : mlirFunctionTypeGetInput(fn, i);
        if (!mlirTypeIsAShaped(t) || mlirShapedTypeHasRank(t)) continue;
        kiln_buf_t text;
        kiln_buf_init(&text);
        mlirTypePrint(t, append_cb, &text);
        MlirStringRef fname = mlirStringAttrGetValue(sym);
        kiln_status_t st =
            KILN_STATUS(KILN_STATUS_UNIMPLEMENTED,
                        "%s: function @%.*s %s %zd is %s: kiln compiles ranked tensors only (an unranked "
                        "tensor has no rank to plan buffers by); export the model with ranks",
                        name, (int)fname.length, fname.data, results ? "result" : "argument", (ssize_t)i,
                        text.len ? text.data : "?");
        kiln_buf_deinit(&text);
        return st;
      }
    }
  }
  return NULL;
}

/* ---- tensors over the memory limit ---- */

/* Bytes of a statically shaped type (tensor, memref, vector); 0 when dynamic,
 * unranked or of an element type without a bit width. Saturates. */
static uint64_t static_bytes(MlirType t) {
  if (!mlirTypeIsAShaped(t) || !mlirShapedTypeHasRank(t) || !mlirShapedTypeHasStaticShape(t)) return 0;
  MlirType e = mlirShapedTypeGetElementType(t);
  uint64_t bits = mlirTypeIsAInteger(e) ? mlirIntegerTypeGetWidth(e)
                  : mlirTypeIsAFloat(e) ? mlirFloatTypeGetWidth(e)
                  : mlirTypeIsAIndex(e) ? 64
                                        : 0;
  if (!bits) return 0;
  uint64_t n = 1;
  for (intptr_t d = 0; d < mlirShapedTypeGetRank(t); d++) {
    uint64_t dim = (uint64_t)mlirShapedTypeGetDimSize(t, d);
    if (dim && n > UINT64_MAX / dim) return UINT64_MAX;
    n *= dim;
  }
  return n > UINT64_MAX / bits ? UINT64_MAX : (n * bits + 7) / 8;
}

typedef struct oversize_s {
  const char *name;
  uint64_t limit;
  kiln_status_t status;
} oversize_t;

static void check_oversize(oversize_t *o, MlirOperation op, MlirType t, const char *what) {
  uint64_t bytes = static_bytes(t);
  if (bytes <= o->limit || o->status) return;
  kiln_buf_t text;
  kiln_buf_init(&text);
  mlirTypePrint(t, append_cb, &text);
  int line, col;
  kiln_compiler_op_line_col(op, &line, &col);
  MlirStringRef opname = mlirIdentifierStr(mlirOperationGetName(op));
  o->status = KILN_STATUS(
      KILN_STATUS_RESOURCE_EXHAUSTED,
      "%s:%d:%d: %s of %.*s is %s, %" PRIu64 " bytes: over the compile's memory limit of %" PRIu64
      " bytes (kilnd's worker-memory-limit); the model cannot be compiled or run in it",
      o->name, line, col, what, (int)opname.length, opname.data, text.len ? text.data : "?", bytes, o->limit);
  kiln_buf_deinit(&text);
}

static MlirWalkResult find_oversize(MlirOperation op, void *user) {
  oversize_t *o = user;
  for (intptr_t i = 0; i < mlirOperationGetNumResults(op); i++) {
    check_oversize(o, op, mlirValueGetType(mlirOperationGetResult(op, i)), "a result");
  }
  for (intptr_t r = 0; r < mlirOperationGetNumRegions(op); r++) {
    for (MlirBlock b = mlirRegionGetFirstBlock(mlirOperationGetRegion(op, r)); !mlirBlockIsNull(b);
         b = mlirBlockGetNextInRegion(b)) {
      for (intptr_t i = 0; i < mlirBlockGetNumArguments(b); i++) {
        check_oversize(o, op, mlirValueGetType(mlirBlockGetArgument(b, i)), "an argument");
      }
    }
  }
  return o->status ? MlirWalkResultInterrupt : MlirWalkResultAdvance;
}

/* TOSA ops kiln does not compile, refused up front with the reason (they failed
 * inside the front half as "failed to legalize", which read as bad IR). */
static const struct {
  const char *op, *why;
} REFUSED_OPS[] = {
    {"tosa.custom", "a custom op has no definition kiln could compile"},
};

typedef struct refused_s {
  const char *name;
  kiln_status_t status;
} refused_t;

static MlirWalkResult find_refused(MlirOperation op, void *user) {
  refused_t *r = user;
  for (size_t i = 0; i < sizeof REFUSED_OPS / sizeof REFUSED_OPS[0]; i++) {
    if (!kiln_compiler_op_is(op, REFUSED_OPS[i].op)) continue;
    int line, col;
    kiln_compiler_op_line_col(op, &line, &col);
    r->status = KILN_STATUS(KILN_STATUS_UNIMPLEMENTED, "%s:%d:%d: %s: kiln does not compile it yet: %s",
                            r->name, line, col, REFUSED_OPS[i].op, REFUSED_OPS[i].why);
    return MlirWalkResultInterrupt;
  }
  return MlirWalkResultAdvance;
}

kiln_status_t kiln_compiler_compile(kiln_compiler_context_t *context, const void *source, size_t len,
                                    const char *name, const kiln_target_t *const *targets, size_t n_targets,
                                    kiln_compiler_output_t *out_output) {
  memset(out_output, 0, sizeof *out_output);
  if (!name || !*name) name = "<source>";
  int64_t t0 = kiln_time_monotonic_ns();
  MlirModule common;
  KILN_RETURN_IF_ERROR(kiln_compiler_parse(context, source, len, name, &common));
  kiln_status_t shapes = check_static_signatures(common, name);
  if (!shapes) {
    refused_t r = {name, NULL};
    mlirOperationWalk(mlirModuleGetOperation(common), find_refused, &r, MlirWalkPreOrder);
    shapes = r.status;
  }
  if (!shapes && context->memory_limit_bytes) {
    oversize_t o = {name, context->memory_limit_bytes, NULL};
    mlirOperationWalk(mlirModuleGetOperation(common), find_oversize, &o, MlirWalkPreOrder);
    shapes = o.status;
  }
  if (shapes) {
    mlirModuleDestroy(common);
    return shapes;
  }
  if (context->on_stage) context->on_stage(context->on_stage_user, "optimize", 1);
  /* gpu-dialect input (a host function launching gpu.module kernels) is already
   * past the front half: it goes straight to the back halves. */
  bool pre_outlined = !mlirOperationIsNull(kiln_compiler_first_op(mlirModuleGetBody(common), "gpu.module"));
  kiln_status_t status = pre_outlined ? NULL : run_common(context, common, name);
  /* The kernel part of the front half (grid mapping, outlining), also once: CPU
   * targets run the same kernels, a workgroup per call. */
  bool any_gpu = n_targets > 0;
  MlirModule gpu = {NULL};
  launches_t launches = {0};
  if (!status && any_gpu) {
    gpu = mlirModuleFromOperation(mlirOperationClone(mlirModuleGetOperation(common)));
    if (!pre_outlined) {
      kiln_compiler_map_contiguous_to_x(context->mlir, gpu);
      status = run_pipeline(context, gpu, gpu_front_pipeline, name, "the GPU front half");
    }
    if (!status) status = kiln_compiler_dynamic_kernel_args(context->mlir, gpu, name);
    if (!status) merge_kernel_modules(context->mlir, gpu);
    if (!status) {
      mlirOperationWalk(mlirModuleGetOperation(gpu), collect_launch, &launches, MlirWalkPreOrder);
      /* No kernel at all is fine: functions that return constants, their inputs
       * or views of them are host programs without dispatches. */
      mlirOperationWalk(mlirModuleGetOperation(gpu), describe_kernel, &launches, MlirWalkPreOrder);
      if (launches.refused) {
        status = kiln_status_annotate(launches.refused, "%s", name);
        launches.refused = NULL;
      }
    }
  }
  if (status) {
    launches_deinit(&launches);
    if (!mlirModuleIsNull(gpu)) mlirModuleDestroy(gpu);
    mlirModuleDestroy(common);
    return status;
  }
  out_output->front_ms = (kiln_time_monotonic_ns() - t0) / 1000000;
  if (any_gpu) out_output->plan_status = kiln_compiler_host_plan_read(gpu, name, &out_output->plan);
  /* Bindings are read-only where the kernel never writes the argument (kernel i is
   * launch i; its arguments are its bindings, in order). */
  for (size_t f = 0; !out_output->plan_status && f < out_output->plan.n_functions; f++) {
    kiln_vmfb_function_t *fn = &out_output->plan.functions[f];
    for (size_t s = 0; s < fn->n_steps; s++) {
      kiln_vmfb_step_t *step = &fn->steps[s];
      if (step->kind != KILN_VMFB_STEP_DISPATCH || step->kernel >= launches.n) continue;
      const launch_t *l = &launches.items[step->kernel];
      for (size_t b = 0; b < step->n_bindings && b < l->n_args; b++) {
        step->bindings[b].read_only = l->args[b].kind == KILN_COMPILER_ARG_BUFFER && l->args[b].read_only;
      }
    }
  }
  out_output->n_targets = n_targets;
  out_output->targets = kiln_calloc(n_targets ? n_targets : 1, sizeof *out_output->targets);
  for (size_t i = 0; i < n_targets; i++) out_output->targets[i].target = targets[i];
  /* The ROCDL toolkit directory is made once, before any thread needs it. */
  for (size_t i = 0; i < n_targets; i++) {
    if (targets[i]->kind == KILN_TARGET_KIND_HIP) {
      const char *ignored;
      kiln_status_free(toolkit_dir(context, &ignored)); /* a failure resurfaces per target */
      break;
    }
  }
  /* The back halves: in parallel child processes (fanout.c), since threads in one
   * context crash inside the GPU serializers. */
  if (context->on_stage) context->on_stage(context->on_stage_user, "codegen", 2);
  back_job_t job = {context, common, gpu, &launches, name, out_output};
  kiln_compiler_fanout_run(n_targets, context->jobs, compile_one, &job, out_output->targets, name,
                           context->on_target ? target_ready : NULL);
  launches_deinit(&launches);
  if (!mlirModuleIsNull(gpu)) mlirModuleDestroy(gpu);
  mlirModuleDestroy(common);
  return NULL;
}

struct kiln_compiler_jit_s {
  MlirExecutionEngine engine;
};

kiln_status_t kiln_compiler_jit_create(kiln_compiler_context_t *context, const void *source, size_t len,
                                       const char *name, kiln_compiler_jit_t **out_jit) {
  *out_jit = NULL;
  if (!name || !*name) name = "<source>";
  MlirModule module;
  KILN_RETURN_IF_ERROR(kiln_compiler_parse(context, source, len, name, &module));
  kiln_status_t st = run_common(context, module, name);
  if (!st) st = run_pipeline(context, module, cpu_pipeline, name, "code generation for the host");
  if (!st) {
    /* memref.copy between strided views (a padded convolution's interior) lowers
     * to a call of MLIR's runtime helper memrefCopy, which lives here. */
    static const char runtime[] = "/usr/lib/llvm-22/lib/libmlir_c_runner_utils.so";
    MlirStringRef libs[] = {{runtime, sizeof runtime - 1}};
    MlirExecutionEngine engine = mlirExecutionEngineCreate(module, 2, 1, libs, false, false);
    if (mlirExecutionEngineIsNull(engine)) {
      st = KILN_STATUS(KILN_STATUS_INTERNAL, "%s: the MLIR ExecutionEngine could not load it", name);
    } else {
      mlirExecutionEngineInitialize(engine);
      kiln_compiler_jit_t *jit = kiln_calloc(1, sizeof *jit);
      jit->engine = engine;
      *out_jit = jit;
    }
  }
  mlirModuleDestroy(module);
  return st;
}

void *kiln_compiler_jit_lookup(kiln_compiler_jit_t *jit, const char *function) {
  kiln_buf_t sym;
  kiln_buf_init(&sym);
  kiln_buf_appendf(&sym, "_mlir_ciface_%s", function);
  void *fn = mlirExecutionEngineLookup(jit->engine, mlirStringRefCreate(sym.data, sym.len));
  kiln_buf_deinit(&sym);
  return fn;
}

void kiln_compiler_jit_destroy(kiln_compiler_jit_t *jit) {
  if (!jit) return;
  mlirExecutionEngineDestroy(jit->engine);
  kiln_free(jit);
}

kiln_status_t kiln_compiler_pipeline_text(kiln_compiler_context_t *context, const kiln_target_t *target,
                                          char **out_front, char **out_back) {
  *out_front = *out_back = NULL;
  kiln_buf_t back;
  kiln_buf_init(&back);
  kiln_status_t st = back_pipeline(context, target, &back);
  if (st) {
    kiln_buf_deinit(&back);
    return st;
  }
  *out_front = kiln_strdup(front_pipeline);
  *out_back = kiln_buf_take(&back);
  kiln_buf_deinit(&back);
  return NULL;
}

static void target_ready(void *user, size_t index) {
  back_job_t *job = user;
  job->context->on_target(job->context->on_target_user, job->output, index);
}

void kiln_compiler_context_on_target(kiln_compiler_context_t *context, kiln_compiler_target_ready_fn_t fn,
                                     void *user) {
  context->on_target = fn;
  context->on_target_user = user;
}

void kiln_compiler_context_on_stage(kiln_compiler_context_t *context, kiln_compiler_stage_fn_t fn,
                                    void *user) {
  context->on_stage = fn;
  context->on_stage_user = user;
}

void kiln_compiler_target_output_clear(kiln_compiler_target_output_t *t) {
  kiln_status_free(t->status);
  for (size_t k = 0; k < t->n_kernels; k++) {
    kiln_free(t->kernels[k].name);
    kiln_free(t->kernels[k].module_name);
    if (!t->kernels[k].same_as) {
      kiln_free(t->kernels[k].binary);
      kiln_free(t->kernels[k].cubin);
    }
    kiln_free(t->kernels[k].args);
  }
  kiln_free(t->kernels);
  t->status = NULL;
  t->kernels = NULL;
  t->n_kernels = 0;
}

kiln_status_t kiln_compiler_pipeline_stages(kiln_compiler_context_t *context, const kiln_target_t *target,
                                            char **out_bufferize, char **out_rest, char **out_back) {
  *out_bufferize = *out_rest = *out_back = NULL;
  kiln_buf_t back;
  kiln_buf_init(&back);
  kiln_status_t st = back_pipeline(context, target, &back);
  if (st) {
    kiln_buf_deinit(&back);
    return st;
  }
  *out_bufferize = kiln_strdup(bufferize_pipeline);
  *out_rest = kiln_strdup(rest_front_pipeline);
  *out_back = kiln_buf_take(&back);
  kiln_buf_deinit(&back);
  return NULL;
}

void kiln_compiler_output_deinit(kiln_compiler_output_t *output) {
  for (size_t i = 0; i < output->n_targets; i++) kiln_compiler_target_output_clear(&output->targets[i]);
  kiln_free(output->targets);
  kiln_vmfb_plan_deinit(&output->plan);
  kiln_status_free(output->plan_status);
  memset(output, 0, sizeof *output);
}

void kiln_compiler_dispatch_grid(const kiln_compiler_target_output_t *t, const kiln_vmfb_step_t *step,
                                 uint32_t out_grid[3]) {
  const uint32_t *own = step->kernel < t->n_kernels ? t->kernels[step->kernel].grid : NULL;
  memcpy(out_grid, own && own[0] ? own : step->workgroups, 3 * sizeof *out_grid);
}

kiln_status_t kiln_compiler_target_plan(const kiln_vmfb_plan_t *plan, const kiln_compiler_target_output_t *t,
                                        kiln_vmfb_plan_t *out) {
  *out = *plan;
  out->functions =
      plan->n_functions ? kiln_memdup(plan->functions, plan->n_functions * sizeof *plan->functions) : NULL;
  kiln_status_t st = NULL;
  for (size_t f = 0; f < plan->n_functions; f++) {
    const kiln_vmfb_function_t *from = &plan->functions[f];
    kiln_vmfb_function_t *fn = &out->functions[f];
    fn->steps = kiln_calloc(from->n_steps ? from->n_steps : 1, sizeof *fn->steps);
    fn->n_steps = 0;
    for (size_t s = 0; s < from->n_steps; s++) {
      const kiln_vmfb_step_t *step = &from->steps[s];
      const kiln_compiler_kernel_t *k = step->kind == KILN_VMFB_STEP_DISPATCH && step->kernel < t->n_kernels
                                            ? &t->kernels[step->kernel]
                                            : NULL;
      if (k && k->fused_into) {
        kiln_vmfb_step_t *prev = fn->n_steps ? &fn->steps[fn->n_steps - 1] : NULL;
        if (!st && (!prev || prev->kind != KILN_VMFB_STEP_DISPATCH || prev->kernel != k->fused_into - 1 ||
                    k->fused_input >= step->n_bindings)) {
          st = KILN_STATUS(KILN_STATUS_INTERNAL,
                           "%s: a fused dispatch of kernel %s does not follow its matmul's (kiln bug)",
                           t->target->id, k->name);
        }
        if (st) continue;
        prev->bindings =
            kiln_realloc(prev->bindings, (prev->n_bindings + step->n_bindings) * sizeof *prev->bindings);
        for (size_t b = 0; b < step->n_bindings; b++) {
          if (b != k->fused_input) prev->bindings[prev->n_bindings++] = step->bindings[b];
        }
        continue;
      }
      kiln_vmfb_step_t *copy = &fn->steps[fn->n_steps++];
      *copy = *step;
      copy->bindings =
          step->n_bindings ? kiln_memdup(step->bindings, step->n_bindings * sizeof *step->bindings) : NULL;
      if (copy->kind == KILN_VMFB_STEP_DISPATCH) kiln_compiler_dispatch_grid(t, step, copy->workgroups);
    }
  }
  if (st) kiln_compiler_target_plan_free(out);
  return st;
}

void kiln_compiler_target_plan_free(kiln_vmfb_plan_t *plan) {
  for (size_t f = 0; plan->functions && f < plan->n_functions; f++) {
    for (size_t s = 0; s < plan->functions[f].n_steps; s++) kiln_free(plan->functions[f].steps[s].bindings);
    kiln_free(plan->functions[f].steps);
  }
  kiln_free(plan->functions);
  memset(plan, 0, sizeof *plan);
}
