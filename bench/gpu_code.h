/* What a GPU kernel's generated code does, read from the code itself: the
 * figures issue 17 measures kiln's GPU kernels by on a machine without a GPU.
 *
 * The code is the one kiln ships: PTX text (CUDA), an AMDGPU code object (read
 * through llvm-objdump and llvm-readobj) or SPIR-V words (read through
 * spirv-dis). Its hottest loop is the innermost loop with the most
 * multiply-adds; the per-iteration counts are per invocation (thread), so
 * loads / multiply-adds is the global traffic a multiply-add costs one thread.
 */
#ifndef KILN_BENCH_GPU_CODE_H_
#define KILN_BENCH_GPU_CODE_H_

#include <stdbool.h>
#include <stddef.h>

#include "base/status.h"
#include "compiler/targets.h"

typedef struct kiln_gpu_code_stats_s {
  bool has_loop;              /* the kernel has a loop; without one the loop_ figures
                                 are the whole kernel's (a fully unrolled reduction) */
  unsigned loop_loads;        /* global (device memory) loads in the hottest loop */
  unsigned loop_stores;       /* global stores in it */
  unsigned loop_shared_loads; /* workgroup-memory loads in it */
  double loop_madds;          /* multiply-adds in it, per invocation (a matrix
                                 instruction counts its share of the product) */
  unsigned load_bits;         /* the widest global load anywhere in the kernel */
  unsigned shared_bytes;      /* workgroup memory the kernel declares (SPIR-V: the
                                 number of Workgroup variables, bytes unknown) */
  bool matrix;                /* mma / wgmma, MFMA, WMMA, cooperative-matrix ops */
  unsigned shuffles;          /* subgroup shuffles anywhere in the kernel (shfl.sync;
                                 ds_bpermute, ds_swizzle, v_permlane or DPP moves;
                                 OpGroupNonUniformShuffle*) */
  unsigned barriers;          /* workgroup barriers anywhere in the kernel */
  int registers;              /* per invocation; -1 when unknown (no ptxas) */
  int spill_bytes;            /* spill stores (bytes) or AMDGPU spilled registers; -1
                                 when unknown */
} kiln_gpu_code_stats_t;

/* Reads kernel `kernel` of `binary` (the compiler's output for target `t`).
 * INVALID_ARGUMENT when the kernel is not in it; UNAVAILABLE when a reader
 * (llvm-objdump-22, llvm-readobj-22, spirv-dis) is not installed. */
KILN_MUST_USE kiln_status_t kiln_gpu_code_read(const kiln_target_t *t, const unsigned char *binary,
                                               size_t len, const char *kernel, kiln_gpu_code_stats_t *out);

/* The same over text the reader already has (PTX, llvm-objdump's disassembly of
 * one kernel, or spirv-dis's text of one module): the parsing alone, for tests. */
void kiln_gpu_code_read_ptx(const char *ptx, const char *kernel, kiln_gpu_code_stats_t *out);
void kiln_gpu_code_read_amdgpu(const char *disassembly, const char *kernel, kiln_gpu_code_stats_t *out);
void kiln_gpu_code_read_spirv(const char *text, const char *kernel, kiln_gpu_code_stats_t *out);

#endif  // KILN_BENCH_GPU_CODE_H_
