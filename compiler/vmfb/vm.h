/* A VM bytecode module, described before it becomes a FlatBuffer.
 *
 * The host-program generator (hostprog.h) fills one from a host plan; the VMFB
 * writer (writer.h) serializes it as IREE's BytecodeModuleDef. Field meanings
 * follow runtime/src/iree/schemas/bytecode_module_def.fbs. Every pointer is owned
 * by the module (kiln_vmfb_vm_module_deinit frees it all).
 */
#ifndef KILN_COMPILER_VMFB_VM_H_
#define KILN_COMPILER_VMFB_VM_H_

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

typedef struct kiln_vmfb_attr_s {
  char *key;
  char *value;
} kiln_vmfb_attr_t;

/* ImportFunctionDef: `full_name` ("hal.executable.create"), the calling convention
 * string ("0rIrrr_r"), and the schema's ImportFlagBits (1 REQUIRED, 2 OPTIONAL;
 * 0 is written as REQUIRED). */
typedef struct kiln_vmfb_vm_import_s {
  char *full_name;
  char *cconv;
  uint32_t flags;
} kiln_vmfb_vm_import_t;

/* One internal function: its bytecode and the FunctionDescriptor counts. Exported
 * ones also get an ExportFunctionDef under `export_name` with their reflection
 * attrs (IREE's iree.abi.* keys) on the FunctionSignatureDef. */
typedef struct kiln_vmfb_vm_function_s {
  char *name;        /* internal name (debug only) */
  char *export_name; /* NULL: not exported */
  char *cconv;       /* "0r_r" ... */
  kiln_vmfb_attr_t *attrs;
  size_t n_attrs;
  uint8_t *bytecode;
  size_t bytecode_len;
  uint16_t block_count;
  uint16_t i32_register_count;
  uint16_t ref_register_count;
  uint32_t requirements;
} kiln_vmfb_vm_function_t;

/* A rodata segment. `external` segments become their own zip entries (IREE does
 * so for HAL executables and anything >= 4096 bytes); `alignment` is a power of
 * two (the writer aligns external data to at least 64). */
typedef struct kiln_vmfb_vm_rodata_s {
  char *name; /* the zip entry name for external segments ("_sm_89.bin") */
  uint8_t *data;
  size_t len;
  uint32_t alignment;
  bool external;
} kiln_vmfb_vm_rodata_t;

typedef struct kiln_vmfb_vm_module_s {
  char *name;
  uint32_t version;
  uint32_t hal_minimum_version; /* the "hal" dependency (REQUIRED) */
  uint32_t bytecode_version;    /* major << 16 | minor */
  char **types;                 /* TypeDef full names, in type-ordinal order */
  size_t n_types;
  kiln_vmfb_vm_import_t *imports;
  size_t n_imports;
  kiln_vmfb_vm_function_t *functions; /* internal ordinal order */
  size_t n_functions;
  kiln_vmfb_vm_rodata_t *rodata; /* rodata ordinal order */
  size_t n_rodata;
  kiln_vmfb_attr_t *attrs; /* module attrs: reflection and kiln's provenance */
  size_t n_attrs;
  uint32_t global_bytes_capacity;
  uint32_t global_ref_count;
} kiln_vmfb_vm_module_t;

/* Appends a copy of key/value to a (pointer, count) attr array. */
void kiln_vmfb_attrs_add(kiln_vmfb_attr_t **attrs, size_t *n, const char *key, const char *value);

/* Frees everything the module owns; safe on a zeroed module. */
void kiln_vmfb_vm_module_deinit(kiln_vmfb_vm_module_t *module);

#endif /* KILN_COMPILER_VMFB_VM_H_ */
