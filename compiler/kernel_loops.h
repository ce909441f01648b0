/* Loop rewrites inside GPU kernels (kernel_loops.c), for the GPU back halves. */
#ifndef KILN_COMPILER_KERNEL_LOOPS_H_
#define KILN_COMPILER_KERNEL_LOOPS_H_

#include <stdbool.h>

#include <mlir-c/IR.h>

/* Accumulators in registers. A reduction lowered from linalg reads and writes
 * its output element on every iteration (load C[i]; C[i] = C[i] + a*b); in
 * `kernel` (a gpu.func) each scf.for whose body loads and stores one element
 * at indices fixed outside the loop, and touches that buffer no other way,
 * carries the value as an iteration argument instead: one load before the
 * loop, one store after it. Innermost loops first, so a nest (a convolution's
 * kh, kw, c) is carried all the way out. `distinct_arguments`: the host plan
 * never binds a written buffer of this kernel over another of its bindings, so
 * different arguments do not alias; without it only buffers the kernel
 * allocates count as distinct. Returns the number of loops rewritten. */
int kiln_compiler_kernel_accumulators_to_registers(MlirOperation kernel, bool distinct_arguments);

/* Marks every arith.mulf, addf and subf in the module's kernels (gpu.module)
 * `contract`, so the LLVM backends fuse a multiply and an add into one FMA (as
 * C compilers do by default, and IREE's kernels do): one rounding instead of
 * two. Ops that carry fast-math flags already keep theirs. */
void kiln_compiler_kernels_allow_contraction(MlirContext context, MlirModule module);

#endif  // KILN_COMPILER_KERNEL_LOOPS_H_
