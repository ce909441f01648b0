/* kiln compiler identity: who built an artifact and which runtime ABI it speaks.
 *
 * The identity (kiln's name, version and codegen revision, and the LLVM/MLIR
 * release kiln is linked against) goes into artifact provenance and cache keys, so
 * a compiler upgrade, or any change to what the compiler emits, never serves
 * artifacts built by the old one. The ABI versions are the ones the
 * IREE 3.12 runtime checks when it loads a VMFB.
 * Everything here is Thread-safe and returns static storage.
 */
#ifndef KILN_COMPILER_IDENTITY_H
#define KILN_COMPILER_IDENTITY_H

#include <stdint.h>

/* The HAL module version kiln's VMFBs require (IREE_HAL_MODULE_VERSION_0_7 in
 * runtime/src/iree/modules/hal/module.c; "0.7" is encoded as 7). */
#define KILN_HAL_MODULE_VERSION 7u

/* The VM bytecode version kiln writes: BytecodeModuleDef.bytecode_version is
 * major << 16 | minor, and the runtime demands an exact major match. */
#define KILN_VM_BYTECODE_VERSION_MAJOR 17u
#define KILN_VM_BYTECODE_VERSION_MINOR 0u

typedef struct kiln_compiler_identity_s {
  const char *name;         /* "kiln-mlir" */
  const char *version;      /* kiln's version and codegen revision, "0.1.0+3f2a9c1d7e4b":
                               KILN_VERSION, then 12 hex digits of a digest of the
                               compiler's sources (compiler/codegen_revision.cmake) */
  const char *llvm_version; /* release of the linked libLLVM, "major.minor.patch" */
  const char *mlir_version; /* MLIR ships with LLVM: the same release string */
} kiln_compiler_identity_t;

/* Fills `*out_identity` (caller-owned, must not be NULL). The strings are static
 * storage, valid for the life of the process; the caller must not free them. The
 * LLVM version comes from the linked library (LLVMGetVersion), not from headers,
 * and is computed once. Cannot fail. Thread-safe. */
void kiln_compiler_identity_get(kiln_compiler_identity_t *out_identity);

/* KILN_HAL_MODULE_VERSION: the minimum "hal" module version kiln's VMFBs declare
 * as a dependency. Thread-safe. */
uint32_t kiln_compiler_hal_module_version(void);

/* KILN_VM_BYTECODE_VERSION_MAJOR << 16 | KILN_VM_BYTECODE_VERSION_MINOR, the value of
 * BytecodeModuleDef.bytecode_version in kiln's VMFBs. Thread-safe. */
uint32_t kiln_compiler_vm_bytecode_version(void);

#endif /* KILN_COMPILER_IDENTITY_H */
