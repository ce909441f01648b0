/* Reading VMFB files: any layout, any IREE version since HAL 0.5, hostile input.
 *
 * kiln_vmfb_read parses a whole file held in memory: the container (zip or flat),
 * the BytecodeModuleDef (verified field by field against IREE's schema before any
 * use), the HAL executables found in its rodata (with or without the 64-byte
 * executable header) and kiln's provenance attrs. It then classifies the file:
 *   CURRENT  hal >= 7, bytecode 17.x, every executable behind its header;
 *   LEGACY   loads on an IREE runtime older than 3.12 only: hal < 7, the 0.6
 *            dispatch import, bytecode < 17, or executables without the header;
 *   INVALID  not a VMFB, damaged, or from a newer IREE than this reader knows.
 * The reason is in words either way. Nothing here trusts an offset, length or
 * count from the file; work and memory are bounded by the file's size.
 * Thread-safe: no shared state.
 */
#ifndef KILN_COMPILER_VMFB_READER_H_
#define KILN_COMPILER_VMFB_READER_H_

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "base/status.h"
#include "compiler/vmfb/vm.h"

typedef enum kiln_vmfb_class_e {
  KILN_VMFB_CLASS_CURRENT = 0,
  KILN_VMFB_CLASS_LEGACY = 1,
  KILN_VMFB_CLASS_INVALID = 2,
} kiln_vmfb_class_t;

/* "current", "legacy", "invalid". */
const char *kiln_vmfb_class_name(kiln_vmfb_class_t c);

typedef struct kiln_vmfb_dependency_s {
  char *name;
  uint32_t minimum_version;
  uint32_t flags; /* 1 REQUIRED, 2 OPTIONAL */
} kiln_vmfb_dependency_t;

typedef struct kiln_vmfb_export_s {
  char *name;
  char *cconv; /* of its signature; NULL when absent */
} kiln_vmfb_export_t;

typedef struct kiln_vmfb_rodata_info_s {
  uint64_t size;
  bool external; /* stored outside the FlatBuffer (its own zip entry) */
} kiln_vmfb_rodata_info_t;

/* A HAL executable found in a rodata segment. */
typedef struct kiln_vmfb_executable_info_s {
  uint32_t rodata;    /* its rodata ordinal */
  char identifier[5]; /* "CDA1", "HIP1", "VKE1", ..., "ELF" for a CPU executable */
  const char *format; /* "cuda-nvptx-fb", ... or NULL when the identifier is unknown */
  bool has_header;    /* behind the 64-byte executable header (IREE >= 3.9) */
  uint32_t header_version;
  char **kernels; /* export names (CUDA/HIP kernel_name, Vulkan entry_point) */
  size_t n_kernels;
  uint32_t *block_dims;      /* 3 per kernel, when the format has them (else NULL) */
  uint32_t *constant_counts; /* per kernel, when the format has them (else NULL) */
  size_t n_modules;          /* device code modules (PTX/HSACO/SPIR-V) */
  uint64_t code_bytes;       /* their total size */
  char *chip;                /* from the code: PTX .target, HSACO e_flags, the ELF's
                                machine ("x86_64", "aarch64"); NULL if unknown */
  char *code_kind;           /* "ptx", "cubin", "hsaco", "spirv", "elf" */
  char *problem;             /* NULL, or why this executable would not load */
} kiln_vmfb_executable_info_t;

typedef struct kiln_vmfb_info_s {
  int layout; /* kiln_vmfb_archive_layout_t: 1 zip, 2 flat; 0 unknown */
  uint64_t file_size;
  char *name;
  uint32_t version;
  uint32_t bytecode_version; /* major << 16 | minor */
  kiln_vmfb_dependency_t *dependencies;
  size_t n_dependencies;
  kiln_vmfb_vm_import_t *imports;
  size_t n_imports;
  kiln_vmfb_export_t *exports;
  size_t n_exports;
  size_t n_functions; /* internal functions (descriptors) */
  uint64_t bytecode_bytes;
  kiln_vmfb_rodata_info_t *rodata;
  size_t n_rodata;
  kiln_vmfb_executable_info_t *executables;
  size_t n_executables;
  kiln_vmfb_attr_t *attrs; /* module attrs; kiln's provenance keys start "kiln." */
  size_t n_attrs;
  char **entries; /* zip entry names, in file order (zip layout) */
  size_t n_entries;
  bool has_source;      /* kiln's embedded source entry is present */
  uint32_t hal_version; /* the hal dependency's minimum version; 0 when none */

  kiln_vmfb_class_t cls;
  char *reason; /* why this class, in words */
} kiln_vmfb_info_t;

/* Reads and classifies `len` bytes. Always fills *out_info (cls/reason say
 * INVALID for a damaged file) and returns NULL; a non-NULL status is for the
 * caller's own misuse only. Free with kiln_vmfb_info_deinit. */
KILN_MUST_USE kiln_status_t kiln_vmfb_read(const uint8_t *file, size_t len, kiln_vmfb_info_t *out_info);

/* The attr value for `key`, or NULL. Borrowed. */
const char *kiln_vmfb_info_attr(const kiln_vmfb_info_t *info, const char *key);

/* Decompresses kiln's embedded source from `file` (as read by kiln_vmfb_read).
 * NOT_FOUND when the file carries none; DATA_LOSS when it does not decompress or
 * its digest does not match the kiln.source.sha256 attr. *out_source is owned. */
KILN_MUST_USE kiln_status_t kiln_vmfb_source_extract(const uint8_t *file, size_t len, uint8_t **out_source,
                                                     size_t *out_len);

void kiln_vmfb_info_deinit(kiln_vmfb_info_t *info);

#endif /* KILN_COMPILER_VMFB_READER_H_ */
