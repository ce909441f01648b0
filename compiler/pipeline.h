/* Model IR to device code: the compile pipeline.
 *
 * One call compiles one module for N targets. The target-independent front half
 * runs once: verify, TOSA to linalg, canonicalize, fuse elementwise ops,
 * bufferize, lower to parallel loops, tile them to workgroups, map them to the GPU
 * grid and outline kernels. Each target then lowers a clone of that module:
 *   CUDA (sm_89, sm_120, sm_121): NVVM, then PTX text for the chip with its PTX
 *     ISA version (.target / .version), and a cubin when ptxas is found ($KILN_PTXAS,
 *     then PATH, then /usr/local/cuda/bin; optional at run time);
 *   HIP (gfx950, gfx942, gfx1100, ...): ROCDL, then an AMDGPU code object (HSACO
 *     ELF) linked by ld.lld from lld-22;
 *   Vulkan (arm5gen, valhall1..4, videocore_vii): SPIR-V for the device's version,
 *     each kernel an entry point with its workgroup size.
 * The host CPU target is not produced by this pipeline yet.
 *
 * Errors: bad IR is INVALID_ARGUMENT for the whole call, carrying MLIR's
 * diagnostics with file:line:col. A failure in one target's back half fails only
 * that target (its output's status), with the diagnostics.
 * One thread at a time per context.
 */
#ifndef KILN_COMPILER_PIPELINE_H
#define KILN_COMPILER_PIPELINE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "base/status.h"
#include "compiler/source.h"
#include "compiler/targets.h"
#include "compiler/vmfb/plan.h"

/* A kernel argument, in order: a buffer (a binding) or a scalar (a push constant). */
typedef enum kiln_compiler_arg_kind_e {
  KILN_COMPILER_ARG_BUFFER = 1,
  KILN_COMPILER_ARG_CONSTANT = 2,
} kiln_compiler_arg_kind_t;

typedef struct kiln_compiler_arg_s {
  kiln_compiler_arg_kind_t kind;
  bool read_only;      /* buffers: the kernel never writes it */
  uint64_t size_bytes; /* buffers: static size (0 when dynamic); constants: 4 or 8 */
} kiln_compiler_arg_t;

/* One kernel of the host program, with the device code of the module that holds
 * it (each kernel is outlined into a module of its own). */
typedef struct kiln_compiler_kernel_s {
  char *name;             /* the kernel's symbol (entry point) */
  char *module_name;      /* the gpu.module it was outlined into */
  uint32_t block_size[3]; /* workgroup size x, y, z */
  unsigned char *binary;  /* PTX text, HSACO ELF, SPIR-V words, or a CPU executable
                             library (an ELF shared object holding every kernel);
                             followed by a NUL byte not counted in binary_len */
  size_t binary_len;
  unsigned char *cubin; /* CUDA only, when ptxas is installed: the PTX assembled
                           for the chip (an EM_CUDA ELF); NULL otherwise */
  size_t cubin_len;
  uint32_t grid[3];          /* workgroup counts x, y, z where this target tiles the
                                kernel its own way (a GPU's tiled matmul); all 0: the
                                plan's (kiln_compiler_dispatch_grid) */
  uint32_t same_as;          /* 0: this kernel owns `binary` and `cubin`; otherwise they
                                are borrowed from kernel same_as - 1 of the same target,
                                an earlier kernel of the same device module (a module of
                                N kernels is stored once, not N times) */
  kiln_compiler_arg_t *args; /* the kernel's arguments, in order */
  size_t n_args;
  uint32_t fused_into; /* 0; or 1 + the kernel (a tiled matmul, gpu_epilogue.h) whose
                          dispatches do this elementwise kernel's work too: this
                          target's plan drops this kernel's dispatches and appends
                          their bindings, but for argument fused_input (the matmul's
                          output, which it no longer reads), to the dispatch just
                          before (kiln_compiler_target_plan) */
  uint32_t fused_input;
} kiln_compiler_kernel_t;

typedef struct kiln_compiler_target_output_s {
  const kiln_target_t *target;
  kiln_status_t status; /* owned; NULL when the target compiled */
  kiln_compiler_kernel_t *kernels;
  size_t n_kernels;
  int64_t backend_ms;
} kiln_compiler_target_output_t;

typedef struct kiln_compiler_output_s {
  kiln_compiler_target_output_t *targets;
  size_t n_targets;
  /* The host program every GPU target shares: buffers and launches in program
   * order; a dispatch step's `kernel` indexes every GPU target's kernels, which
   * are in launch order. When the host side does something a VMFB host program
   * cannot express, plan is empty and plan_status (owned) says why: the device
   * code is still there, only packaging as a VMFB is refused. */
  kiln_vmfb_plan_t plan;
  kiln_status_t plan_status;
  int64_t front_ms; /* the shared, target-independent half */
} kiln_compiler_output_t;

/* Compiles `len` bytes of MLIR (text or bytecode) named `name` for `targets`
 * (CUDA, HIP or Vulkan kinds). On success (the front half worked) *out_output has
 * one entry per target, each with its own status; free with
 * kiln_compiler_output_deinit. */
KILN_MUST_USE kiln_status_t kiln_compiler_compile(kiln_compiler_context_t *context, const void *source,
                                                  size_t len, const char *name,
                                                  const kiln_target_t *const *targets, size_t n_targets,
                                                  kiln_compiler_output_t *out_output);

void kiln_compiler_output_deinit(kiln_compiler_output_t *output);

/* The workgroup counts target `t` dispatches `step` (a DISPATCH of the shared
 * plan) on: the kernel's own grid where the target tiles it its own way, else
 * the step's. Thread-safe. */
void kiln_compiler_dispatch_grid(const kiln_compiler_target_output_t *t, const kiln_vmfb_step_t *step,
                                 uint32_t out_grid[3]);

/* Target `t`'s own copy of the shared plan `plan`: every dispatch on the
 * target's grid (kiln_compiler_dispatch_grid), and each dispatch of a kernel
 * fused into the one before (kiln_compiler_kernel_t.fused_into) merged into
 * that dispatch. The functions, steps and bindings are the copy's own, the
 * rest is borrowed from `plan`: free it with kiln_compiler_target_plan_free
 * before `plan`. INTERNAL when a fused dispatch does not follow its matmul's (a
 * kiln bug). */
KILN_MUST_USE kiln_status_t kiln_compiler_target_plan(const kiln_vmfb_plan_t *plan,
                                                      const kiln_compiler_target_output_t *t,
                                                      kiln_vmfb_plan_t *out);
void kiln_compiler_target_plan_free(kiln_vmfb_plan_t *plan);

/* Called during kiln_compiler_compile as soon as target `index` of `output` is
 * settled (compiled or failed), in completion order, before the call returns: so a
 * worker can package and send each target the moment it is ready. `output` is the
 * call's, valid for reading during the callback (its plan is final, other targets
 * may still be compiling). */
typedef void (*kiln_compiler_target_ready_fn_t)(void *user, const kiln_compiler_output_t *output,
                                                size_t index);

/* Sets (or, with NULL, clears) the context's target-ready callback. */
void kiln_compiler_context_on_target(kiln_compiler_context_t *context, kiln_compiler_target_ready_fn_t fn,
                                     void *user);

/* Called by kiln_compiler_compile as a compile passes a stage boundary, for every
 * target at once: "optimize" (index 1: the source parsed and verified, the
 * target-independent front half starts) and "codegen" (index 2: the front half is
 * done, the per-target back halves start). Stage 0 is the parse and stage 3 the
 * packaging, which the caller sees for itself. On the calling thread. */
typedef void (*kiln_compiler_stage_fn_t)(void *user, const char *stage, uint32_t index);

/* Sets (or, with NULL, clears) the context's stage callback. */
void kiln_compiler_context_on_stage(kiln_compiler_context_t *context, kiln_compiler_stage_fn_t fn,
                                    void *user);

/* A module compiled for the host and loaded in-process (MLIR ExecutionEngine)
 * through the same front half as every target: how tests check the pipeline's
 * numerics against plain C on machines without a GPU. One thread at a time. */
typedef struct kiln_compiler_jit_s kiln_compiler_jit_t;

/* Compiles and loads `source`. INVALID_ARGUMENT with diagnostics for bad IR. The
 * JIT is owned by the caller and must not outlive `context`. */
KILN_MUST_USE kiln_status_t kiln_compiler_jit_create(kiln_compiler_context_t *context, const void *source,
                                                     size_t len, const char *name,
                                                     kiln_compiler_jit_t **out_jit);
/* The C interface of `function`: `_mlir_ciface_<function>`, which takes pointers
 * to ranked memref descriptors {allocated, aligned, offset, sizes[R], strides[R]},
 * the result's first (filled in; free its `allocated` pointer with free()), then
 * the arguments. NULL when there is no such function. */
void *kiln_compiler_jit_lookup(kiln_compiler_jit_t *jit, const char *function);
void kiln_compiler_jit_destroy(kiln_compiler_jit_t *jit);

/* The textual pass pipelines the compile runs, for benchmarks and tools that
 * replay them elsewhere (mlir-opt): the shared front half, and `target`'s back
 * half up to (not including) serialization for Vulkan, whose spirv.modules are
 * moved between the two steps in C. Strings owned by the caller (kiln_free).
 * Thread-safe except for HIP's toolkit directory, made on first use in `context`. */
/* The same, with the front half in its two stages: `out_bufferize` (TOSA to linalg,
 * fusion, bufferization) and `out_rest` (loops, tiling and, for GPU targets, the grid
 * mapping and outlining). Between them kiln rewrites every host memref.copy into a
 * linalg.copy in C (kiln_compiler_copies_to_kernels), which a replay must do too.
 * Strings owned by the caller. */
KILN_MUST_USE kiln_status_t kiln_compiler_pipeline_stages(kiln_compiler_context_t *context,
                                                          const kiln_target_t *target, char **out_bufferize,
                                                          char **out_rest, char **out_back);

KILN_MUST_USE kiln_status_t kiln_compiler_pipeline_text(kiln_compiler_context_t *context,
                                                        const kiln_target_t *target, char **out_front,
                                                        char **out_back);

#endif /* KILN_COMPILER_PIPELINE_H */
