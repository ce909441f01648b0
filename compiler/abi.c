/* The runtime ABI versions of compiler/identity.h, in an object of their own and
 * free of LLVM: kiln_compiler is a static archive, linked object by object, so
 * kilnd (which links no compiler: it never maps libLLVM) can call these without
 * pulling identity.c and its LLVMGetVersion in. Constants; nothing to initialise. */
#include "compiler/identity.h"

uint32_t kiln_compiler_hal_module_version(void) { return KILN_HAL_MODULE_VERSION; }

uint32_t kiln_compiler_vm_bytecode_version(void) {
  return (KILN_VM_BYTECODE_VERSION_MAJOR << 16) | KILN_VM_BYTECODE_VERSION_MINOR;
}
