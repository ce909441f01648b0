/* The host program: a host plan (plan.h) as a VM bytecode module (vm.h) that
 * drives IREE's HAL module.
 *
 * kiln_vmfb_host_program_build fills a kiln_vmfb_vm_module_t with the types, the
 * HAL imports the program calls (exact calling conventions of the runtime it
 * targets), globals, rodata (the executable as an external segment, strings,
 * constant data) and functions:
 *   - one exported function per plan function, named like it, taking one
 *     !hal.buffer_view per input and returning one per result (cconv "0rr_r",
 *     "0v_r", ...), with IREE's reflection attr "iree.abi.declaration"
 *     ("sync func @main(%input0: tensor<4xf32>) -> (%output0: tensor<4xf32>)");
 *   - "__init" (exported; the runtime runs it when the module joins a context):
 *     hal.devices.get 0, hal.device.allocator, hal.executable.create over the
 *     rodata executable, and on HAL 0.7 hal.executable.lookup.function for every
 *     kernel the plan dispatches; results land in module globals.
 * Each call asserts its inputs (hal.buffer_view.assert + hal.buffer.assert),
 * allocates transients (hal.allocator.allocate, device-local), records one
 * one-shot command buffer (every step in plan order, an execution barrier
 * between steps, dispatches with their bindings and push constants, copies),
 * submits it (hal.device.queue.execute signalling a fresh fence), waits
 * (hal.fence.await, a yieldable call) and wraps the results in buffer views.
 * CONSTANT buffers are uploaded once, by the first call that finds them missing
 * (hal.ex.file.from_memory over their rodata + hal.device.queue.read, which the
 * submission waits on: iree-compile's path for constants, with no size limit),
 * and kept in globals; the call marks them uploaded after its wait succeeds.
 *
 * The module is self-verified (kiln_vmfb_bytecode_verify) before it is returned.
 * Thread-safe: no shared state.
 */
#ifndef KILN_COMPILER_VMFB_HOSTPROG_H_
#define KILN_COMPILER_VMFB_HOSTPROG_H_

#include <stddef.h>
#include <stdint.h>

#include "base/status.h"
#include "compiler/vmfb/plan.h"
#include "compiler/vmfb/vm.h"

/* HAL module versions (iree_hal_module's .version; a module's "hal" dependency
 * carries the minimum it needs). 7 is IREE 3.12's; 6 is 3.4 .. 3.11's, whose
 * hal.command_buffer.dispatch takes an i32 export ordinal and which has no
 * hal.executable.lookup.function. */
#define KILN_VMFB_HAL_VERSION_0_6    6u
#define KILN_VMFB_HAL_VERSION_0_7    7u
#define KILN_VMFB_HAL_VERSION_LATEST KILN_VMFB_HAL_VERSION_0_7

/* The executable the plan's dispatches run, already serialized (writer.h). All
 * pointers are borrowed for the duration of the call; the bytes are copied. */
typedef struct kiln_vmfb_host_executable_s {
  const char *format;  /* HAL executable format, "cuda-nvptx-fb" */
  const uint8_t *data; /* the executable FlatBuffer (behind its header) */
  size_t len;
  const char *const *kernels; /* export names, indexed by a step's `kernel` */
  size_t n_kernels;
} kiln_vmfb_host_executable_t;

typedef struct kiln_vmfb_host_options_s {
  const char *module_name; /* NULL: "module" (iree-compile's default) */
  uint32_t hal_version;    /* 0: KILN_VMFB_HAL_VERSION_LATEST; or 6 for legacy fixtures */
} kiln_vmfb_host_options_t;

/* Builds the host program of `plan` (borrowed) around `exe` into *out_module,
 * which is zeroed on entry and, on success, owns everything it points to
 * (free with kiln_vmfb_vm_module_deinit). `options` may be NULL.
 * Errors: INVALID_ARGUMENT naming the function and step/buffer/result when the
 * plan is inconsistent (an index out of range, a byte range outside its buffer,
 * a copy between overlapping ranges, a kernel the executable does not name, an
 * unusable or duplicate function name); UNIMPLEMENTED for an unknown hal_version
 * or element type; RESOURCE_EXHAUSTED when a function outgrows the VM's register
 * or block limits. On error *out_module is left zeroed. */
KILN_MUST_USE kiln_status_t kiln_vmfb_host_program_build(const kiln_vmfb_plan_t *plan,
                                                         const kiln_vmfb_host_executable_t *exe,
                                                         const kiln_vmfb_host_options_t *options,
                                                         kiln_vmfb_vm_module_t *out_module);

#endif /* KILN_COMPILER_VMFB_HOSTPROG_H_ */
