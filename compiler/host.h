/* The host side of a compiled model, inside compiler/ only (includes mlir-c).
 *
 * Two jobs on the bufferized module:
 *  - kiln_compiler_copies_to_kernels: every memref.copy in a host function becomes
 *    a linalg.generic, so a padded convolution's interior copy runs as a GPU kernel
 *    instead of a host loop;
 *  - kiln_compiler_host_plan_read: after kernel outlining, the host functions'
 *    buffers and launches as a kiln_vmfb_plan_t (compiler/vmfb/plan.h), which the
 *    VMFB writer turns into the VM host program.
 * One thread at a time per context, like the rest of the compiler.
 */
#ifndef KILN_COMPILER_HOST_H_
#define KILN_COMPILER_HOST_H_

#include <mlir-c/IR.h>

#include "base/status.h"
#include "compiler/vmfb/plan.h"

/* Rewrites each memref.copy directly inside a func.func into an elementwise
 * linalg.generic (identity maps, all parallel), which the loop and GPU passes then
 * tile and map like any other kernel. */
void kiln_compiler_copies_to_kernels(MlirContext context, MlirModule module);

/* Fusion bounds. linalg-fuse-elementwise-ops copies the producer's body into the
 * consumer at every step, so a chain of N elementwise ops costs O(N^2) (5,000
 * tosa.add took 10.8 s, 20,000 did not finish in 100 s). Before fusion,
 * kiln_compiler_fusion_barriers_insert walks each function's linalg.generic ops in
 * order, tracking the longest chain of generics behind each, and every `limit`
 * generics along a chain gives the result a second use (a
 * bufferization.dealloc_tensor, which has an effect, so nothing folds or erases
 * it): the pass fuses only single-use producers, so no fused kernel holds a chain
 * longer than `limit`, and fusion costs O(N * limit). After fusion,
 * kiln_compiler_fusion_barriers_remove erases the barriers. */
void kiln_compiler_fusion_barriers_insert(MlirContext context, MlirModule module, int64_t limit);
void kiln_compiler_fusion_barriers_remove(MlirModule module);

/* Control flow (control.c). tosa.cond_if and tosa.while_loop run on the host:
 * they become scf.if and scf.while, their regions' ops become kernels,
 * and the host program reads each condition back from the device.
 *  - kiln_compiler_tosa_control_to_scf, before the TOSA lowering: tosa.cond_if
 *    and tosa.while_loop become scf.if and scf.while over tensors, the condition
 *    (tensor<i1> or tensor<1xi1>) read with tensor.extract (upstream tosa-to-scf
 *    fails on nested loops and on one-element rank-1 conditions);
 *  - kiln_compiler_carried_buffers_fix, right after one-shot-bufferize: every
 *    buffer an scf.if yields or an scf.while carries gets a fixed buffer
 *    allocated before the op, which the region copies its value into, so the ops
 *    yield nothing and the host plan's buffers stay one set per call. Ops that
 *    carry scalars or dynamic shapes are left as they are (the plan refuses them). */
void kiln_compiler_tosa_control_to_scf(MlirContext context, MlirModule module);

/* Marks every tensor argument of every func.func bufferization.writable = false:
 * a caller's inputs are read, never written (one-shot-bufferize otherwise writes
 * a result into an argument it no longer reads: a scatter, a linalg outs that is
 * an argument). */
void kiln_compiler_arguments_read_only(MlirContext context, MlirModule module);

/* TOSA's stateful variables, before bufferization: each tosa.variable becomes a
 * mutable memref.global holding its initial value; a variable_read a copy of the
 * global's memory where it stands (bufferization.to_tensor + alloc_tensor copy:
 * a later write must not change what was read), a variable_write
 * bufferization.materialize_in_destination into it. The host plan keeps each
 * variable in a module global across calls. INVALID_ARGUMENT for an access that
 * names no variable; UNIMPLEMENTED for a variable of dynamic shape. */
KILN_MUST_USE kiln_status_t kiln_compiler_tosa_variables(MlirContext context, MlirModule module,
                                                         const char *name);

/* TOSA 1.1's shape operators (tosa.dim, add/sub/mul/min/max/div_floor/div_ceil/
 * mod/exp2/log2_floor/log2_ceil/concat/slice_shape), which MLIR 22 neither folds
 * nor lowers, evaluated at compile time into tosa.const_shape (tosa_shape.c).
 * UNIMPLEMENTED naming the op when an operand is not known then (a dynamic
 * dimension); INVALID_ARGUMENT for what TOSA forbids (a zero divisor). */
KILN_MUST_USE kiln_status_t kiln_compiler_tosa_fold_shapes(MlirContext context, MlirModule module,
                                                           const char *name);

/* TOSA 1.1's block-scaled (MX) ops, which MLIR 22 does not lower, as kiln's
 * linalg (control.c): tosa.matmul_t_block_scaled as one linalg.generic, out[n,h,w]
 * = sum over k of scaling_extf(a[n,h,k], sa[n,h,k/bs]) * scaling_extf(b[n,w,k],
 * sb[n,w,k/bs]) accumulated in f32; cast_to_block_scaled (max |x| per block, the
 * E8M0 scale, the data rounded) and cast_from_block_scaled (each value times its
 * block's scale). !tosa.mxint8 becomes i8 everywhere first. UNIMPLEMENTED for
 * dynamic or uneven shapes. */
KILN_MUST_USE kiln_status_t kiln_compiler_tosa_block_scaled(MlirContext context, MlirModule module,
                                                            const char *name);

/* The index dialect's arithmetic (tosa.fft2d's lowering writes index.mul and
 * index.remu) as the same arith ops, which every backend converts; SPIR-V's
 * conversion of the index dialect leaves casts its GPU conversion refuses.
 * UNIMPLEMENTED naming an index op with no arith twin (index.cmp, sizeof). */
KILN_MUST_USE kiln_status_t kiln_compiler_index_to_arith(MlirContext context, MlirModule module,
                                                         const char *name);
void kiln_compiler_carried_buffers_fix(MlirContext context, MlirModule module);

/* Dynamic shapes (dynamic.c), after kernel outlining: kernels take no memref of
 * dynamic shape and no scalar. Each dynamic memref argument becomes a flat static
 * one indexed row-major, its dynamic sizes index arguments the host computes
 * (memref.dim); then every scalar argument becomes a 32-bit word of a kiln.args
 * buffer (memref<M x i32> at the top of the host function) that the host stores
 * before the launch and the kernel loads. UNIMPLEMENTED naming the kernel when a
 * dynamic buffer is used other than by load, store, atomics and memref.dim, or a
 * scalar is not an integer. */
KILN_MUST_USE kiln_status_t kiln_compiler_dynamic_kernel_args(MlirContext context, MlirModule module,
                                                              const char *name);

/* Loops left on the host. convert-linalg-to-parallel-loops turns a linalg op with
 * no parallel dimension (a full reduction: tosa.reduce_sum of every axis, a dot
 * product) into a bare scf.for nest, which no GPU pass touches: it stayed a host
 * loop and the VMFB was refused. Each scf.for directly in a host function's body
 * that produces no values is wrapped in a one-iteration scf.parallel, so it
 * becomes a kernel of one invocation that runs the loop on the device. (Serial;
 * a workgroup tree reduction is kernel quality, issue 17.) */
void kiln_compiler_host_loops_to_kernels(MlirContext context, MlirModule module);

/* Parallel loops of rank 1 and 2 as rank 3, before the tiling (FRONT_TILE 1,4,32
 * tiles the leading dimensions): a rank-2 loop gains a leading unit dimension,
 * so its rows and columns get the 4x32 tile a batched op has (they got 1x4);
 * a rank-1 loop of static bounds becomes (1, ceil(n/32), 32) with the index
 * a*32 + b and a guard where 32 does not divide n, so a workgroup runs 128
 * invocations (it ran 1, and a vector past 65,535 elements had too many
 * workgroups to compile). Dynamic rank-1 loops, and those of 32 iterations or
 * fewer, keep their form. */
/* Loops above rank 3 lose their unit dimensions (leading ones first, down to
 * rank 3) and then fold their first two dimensions while above rank 3 (static
 * bounds): a batched NHWC op's (n, h, w, c) is (n*h, w, c) and a depthwise conv's
 * (1, oh, ow, c, 1) is (oh, ow, c), so the 1x4x32 tile covers the last three
 * dimensions with the contiguous one on thread x. */
void kiln_compiler_parallel_loops_to_rank3(MlirContext context, MlirModule module);

/* The contiguous dimension on x. gpu-map-parallel-loops puts a loop's first
 * dimension on x and its third on z, so kiln's 1x4x32 tile ran its contiguous
 * dimension (the last) along thread z: a warp read 4 rows of 8 elements, and a
 * convolution's neighbouring lanes read pixels 256 bytes apart. Each tiled
 * parallel loop of rank 1 to 3 is mapped here instead, before the pass (which
 * leaves mapped loops alone): its tile loop's last dimension on thread x, so a
 * warp's lanes run along the contiguous dimension and the workgroup is 32x4x1;
 * the grid as the pass maps it. Loops above rank 3 keep the pass's mapping. CPU workgroups nest their
 * invocation loops z, y, x, so x stays innermost there (cpu.c). */
void kiln_compiler_map_contiguous_to_x(MlirContext context, MlirModule module);

/* Reads the plan of every public host func.func of an outlined module: inputs,
 * results, buffers (arguments, constants from memref.global, allocations) and one
 * dispatch step per gpu.launch_func, numbered in walk (program) order, the numbering
 * the compiler uses for its kernels. `name` names the source in errors.
 * UNIMPLEMENTED naming the op when the host function does something a VMFB host
 * program cannot express yet (dynamic shapes, host loops, non-constant kernel
 * scalars). On success *out_plan is owned by the caller (kiln_vmfb_plan_deinit). */
KILN_MUST_USE kiln_status_t kiln_compiler_host_plan_read(MlirModule module, const char *name,
                                                         kiln_vmfb_plan_t *out_plan);

#endif /* KILN_COMPILER_HOST_H_ */
