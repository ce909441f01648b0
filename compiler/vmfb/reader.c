/* The VMFB reader and classifier. Hostile input is the normal case.
 *
 * Layers, each trusting only what the one before it proved:
 *   1. archive.c parses the container (zip64 or flat) with every offset checked;
 *   2. flatbuf.c verifies the whole BytecodeModuleDef against IREE's schema
 *      (bounds, alignment, nesting, a visit budget) before any field is read;
 *   3. here: the cross-field facts the schema cannot state (function descriptors
 *      inside bytecode_data, export ordinals inside the functions, external rodata
 *      inside the file), then each rodata segment that holds a HAL executable is
 *      verified against its own schema;
 *   4. the class follows from the facts, with the first reason in words.
 * Every string copied out is bounded by the (verified) buffer it came from, and
 * every array is sized by a count the verifier already proved fits in the file,
 * so memory stays proportional to the file's size.
 */
#include "compiler/vmfb/reader.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <zstd.h>

#include "base/alloc.h"
#include "base/buf.h"
#include "base/digest.h"
#include "compiler/vmfb/archive.h"
#include "compiler/vmfb/flatbuf.h"
#include "compiler/vmfb/schema.h"

#define EXECUTABLE_HEADER_BYTES 64
#define SOURCE_ENTRY            "kiln/source.mlir.zst"
#define MAX_SOURCE_BYTES        (1ull << 30)
#define SOURCE_RATIO_CAP        1024ull       /* decompressed per compressed byte, unrecorded */
#define SOURCE_FREE_BYTES       (64ull << 20) /* always allowed */
/* The VM's current bytecode major version: a file with another one does not load. */
#define BYTECODE_MAJOR 17
/* HAL 0.5 introduced module dependencies; older files are still legacy, not invalid. */
#define CURRENT_HAL_VERSION 7

typedef kiln_vmfb_flatbuf_table_t table_t;
typedef kiln_vmfb_flatbuf_vector_t vector_t;

const char *kiln_vmfb_class_name(kiln_vmfb_class_t c) {
  switch (c) {
    case KILN_VMFB_CLASS_CURRENT: return "current";
    case KILN_VMFB_CLASS_LEGACY: return "legacy";
    case KILN_VMFB_CLASS_INVALID: return "invalid";
  }
  return "invalid";
}

static char *copy_string(const char *s, size_t len) { return s ? kiln_strndup(s, len) : NULL; }

static char *table_string(table_t t, uint16_t slot) {
  size_t len = 0;
  const char *s = kiln_vmfb_flatbuf_table_get_string(t, slot, &len);
  return copy_string(s, len);
}

/* ---- executables ---- */

typedef struct format_s {
  const char identifier[5];
  const char *format;
  const kiln_vmfb_flatbuf_table_desc_t *desc; /* NULL: recognized, not parsed */
} format_t;

static const format_t formats[] = {
    {"CDA1", "cuda-nvptx-fb", &kiln_vmfb_schema_cuda_executable_def},
    {"HIP1", "rocm-hsaco-fb", &kiln_vmfb_schema_hip_executable_def},
    {"VKE1", "vulkan-spirv-fb", &kiln_vmfb_schema_vk_executable_def},
    {"AMD1", "amdgpu-fb", NULL},
    {"MTL1", "metal-msl-fb", NULL},
    {"WGS1", "webgpu-wgsl-fb", NULL},
};

static const format_t *format_at(const uint8_t *p) {
  for (size_t i = 0; i < sizeof formats / sizeof formats[0]; i++) {
    if (memcmp(p, formats[i].identifier, 4) == 0) return &formats[i];
  }
  return NULL;
}

static const struct {
  uint8_t mach;
  const char *chip;
} amdgpu_machs[] = {
    {0x2c, "gfx900"},  {0x2f, "gfx906"},  {0x30, "gfx908"},  {0x36, "gfx1030"}, {0x3f, "gfx90a"},
    {0x41, "gfx1100"}, {0x43, "gfx1150"}, {0x46, "gfx1101"}, {0x47, "gfx1102"}, {0x48, "gfx1200"},
    {0x4c, "gfx942"},  {0x4e, "gfx1201"}, {0x4f, "gfx950"},
};

/* The chip a code object was built for: PTX's .target line, an AMDGPU ELF's
 * e_flags, or NULL. */
static void describe_code(kiln_vmfb_executable_info_t *e, const uint8_t *code, size_t len) {
  if (len >= 4 && memcmp(code,
                         "\x7f"
                         "ELF",
                         4) == 0) {
    if (len >= 52 && code[4] == 2 /* ELFCLASS64 */ && len >= 0x34) {
      uint16_t machine = kiln_vmfb_flatbuf_load_u16(code + 18);
      uint32_t flags = kiln_vmfb_flatbuf_load_u32(code + 0x30);
      if (machine == 224 /* EM_AMDGPU */) {
        if (!e->code_kind) e->code_kind = kiln_strdup("hsaco");
        for (size_t i = 0; i < sizeof amdgpu_machs / sizeof amdgpu_machs[0] && !e->chip; i++) {
          if (amdgpu_machs[i].mach == (flags & 0xFF)) e->chip = kiln_strdup(amdgpu_machs[i].chip);
        }
      } else if (machine == 190 /* EM_CUDA */) {
        if (!e->code_kind) e->code_kind = kiln_strdup("cubin");
      }
    }
    return;
  }
  if (len >= 4 && kiln_vmfb_flatbuf_load_u32(code) == 0x07230203u) {
    if (!e->code_kind) e->code_kind = kiln_strdup("spirv");
    return;
  }
  /* PTX text: find ".target sm_NN" in the first few KiB. */
  size_t scan = len < 8192 ? len : 8192;
  for (size_t i = 0; i + 8 < scan; i++) {
    if (memcmp(code + i, ".target ", 8) != 0) continue;
    size_t j = i + 8, k = j;
    while (k < scan && k - j < 32 &&
           (code[k] == '_' || (code[k] >= 'a' && code[k] <= 'z') || (code[k] >= '0' && code[k] <= '9'))) {
      k++;
    }
    if (!e->code_kind) e->code_kind = kiln_strdup("ptx");
    if (k > j && !e->chip) e->chip = kiln_strndup((const char *)code + j, k - j);
    return;
  }
}

static void gpu_exports(kiln_vmfb_executable_info_t *e, table_t root) {
  /* CUDA and HIP share slot numbers (schema.h). */
  vector_t exports = kiln_vmfb_flatbuf_table_get_vector(root, KILN_CUDA_EXECUTABLE_EXPORTS);
  size_t n = kiln_vmfb_flatbuf_vector_count(exports);
  e->kernels = kiln_calloc(n ? n : 1, sizeof *e->kernels);
  e->block_dims = kiln_calloc(n ? 3 * n : 1, sizeof *e->block_dims);
  e->constant_counts = kiln_calloc(n ? n : 1, sizeof *e->constant_counts);
  vector_t modules = kiln_vmfb_flatbuf_table_get_vector(root, KILN_CUDA_EXECUTABLE_MODULES);
  e->n_modules = kiln_vmfb_flatbuf_vector_count(modules);
  for (size_t i = 0; i < n; i++) {
    table_t x = kiln_vmfb_flatbuf_vector_get_table(exports, i);
    char *name = table_string(x, KILN_CUDA_EXPORT_KERNEL_NAME);
    e->kernels[i] = name ? name : kiln_strdup("");
    const uint8_t *dims = kiln_vmfb_flatbuf_table_get_struct(x, KILN_CUDA_EXPORT_BLOCK_DIMS);
    if (dims) {
      e->block_dims[3 * i] = kiln_vmfb_flatbuf_load_u32(dims + KILN_GPU_BLOCK_DIMS_X);
      e->block_dims[3 * i + 1] = kiln_vmfb_flatbuf_load_u32(dims + KILN_GPU_BLOCK_DIMS_Y);
      e->block_dims[3 * i + 2] = kiln_vmfb_flatbuf_load_u32(dims + KILN_GPU_BLOCK_DIMS_Z);
    }
    e->constant_counts[i] = (uint32_t)kiln_vmfb_flatbuf_table_get_uint(x, KILN_CUDA_EXPORT_CONSTANT_COUNT);
    uint64_t ordinal = kiln_vmfb_flatbuf_table_get_uint(x, KILN_CUDA_EXPORT_MODULE_ORDINAL);
    if (ordinal >= e->n_modules && !e->problem) {
      kiln_buf_t p;
      kiln_buf_init(&p);
      kiln_buf_appendf(&p, "kernel %s names module %llu of %zu", e->kernels[i], (unsigned long long)ordinal,
                       e->n_modules);
      e->problem = kiln_buf_take(&p);
      kiln_buf_deinit(&p);
    }
    e->n_kernels++;
  }
  for (size_t i = 0; i < e->n_modules; i++) {
    size_t len = 0;
    const char *image = kiln_vmfb_flatbuf_table_get_string(kiln_vmfb_flatbuf_vector_get_table(modules, i),
                                                           KILN_CUDA_MODULE_PTX_IMAGE, &len);
    e->code_bytes += len;
    if (image) describe_code(e, (const uint8_t *)image, len);
  }
}

static void vulkan_exports(kiln_vmfb_executable_info_t *e, table_t root) {
  vector_t pipelines = kiln_vmfb_flatbuf_table_get_vector(root, KILN_VK_EXECUTABLE_PIPELINES);
  size_t n = kiln_vmfb_flatbuf_vector_count(pipelines);
  vector_t shaders = kiln_vmfb_flatbuf_table_get_vector(root, KILN_VK_EXECUTABLE_SHADER_MODULES);
  e->n_modules = kiln_vmfb_flatbuf_vector_count(shaders);
  e->kernels = kiln_calloc(n ? n : 1, sizeof *e->kernels);
  for (size_t i = 0; i < n; i++) {
    table_t p = kiln_vmfb_flatbuf_vector_get_table(pipelines, i);
    char *name = table_string(p, KILN_VK_PIPELINE_ENTRY_POINT);
    e->kernels[i] = name ? name : kiln_strdup("");
    uint64_t ordinal = kiln_vmfb_flatbuf_table_get_uint(p, KILN_VK_PIPELINE_SHADER_MODULE_ORDINAL);
    if (ordinal >= e->n_modules && !e->problem) {
      kiln_buf_t msg;
      kiln_buf_init(&msg);
      kiln_buf_appendf(&msg, "pipeline %s names shader module %llu of %zu", e->kernels[i],
                       (unsigned long long)ordinal, e->n_modules);
      e->problem = kiln_buf_take(&msg);
      kiln_buf_deinit(&msg);
    }
    e->n_kernels++;
  }
  for (size_t i = 0; i < e->n_modules; i++) {
    vector_t code = kiln_vmfb_flatbuf_table_get_vector(kiln_vmfb_flatbuf_vector_get_table(shaders, i),
                                                       KILN_VK_SHADER_MODULE_SPIRV_CODE);
    size_t words = kiln_vmfb_flatbuf_vector_count(code);
    e->code_bytes += 4 * (uint64_t)words;
    if (words) describe_code(e, kiln_vmfb_flatbuf_vector_data(code), 4 * words);
  }
}

/* The 64-byte header's reserved words are zero; a constant that merely starts
 * with an identifier ("CDA1...") almost never has 48 zero bytes there, so it stays
 * data instead of becoming a damaged executable. */
static bool header_shaped(const uint8_t *data) {
  for (size_t i = 16; i < EXECUTABLE_HEADER_BYTES; i++) {
    if (data[i] != 0) return false;
  }
  return true;
}

/* Looks at one rodata segment; returns true (and fills *e) when it is a HAL
 * executable, with or without the 64-byte header. */
/* An ELF shared object at the start of a rodata segment: a CPU executable
 * (IREE's embedded-elf and system-elf formats keep the ELF itself, no header).
 * The chip is the CPU family kiln's generic target for it names. */
static bool read_elf_executable(const uint8_t *data, size_t len, uint32_t ordinal,
                                kiln_vmfb_executable_info_t *e) {
  static const struct {
    uint16_t machine;
    const char *format, *chip;
  } arches[] = {{62, "embedded-elf-x86_64", "x86_64"},
                {183, "embedded-elf-arm_64", "aarch64"},
                {243, "embedded-elf-riscv_64", "riscv64"}};
  if (len < 64 ||
      memcmp(data,
             "\x7f"
             "ELF",
             4) != 0 ||
      data[4] != 2 /* 64-bit */ || data[5] != 1 /* LE */) {
    return false;
  }
  uint16_t type = (uint16_t)(data[16] | data[17] << 8), machine = (uint16_t)(data[18] | data[19] << 8);
  if (type != 3 /* ET_DYN */) return false;
  e->rodata = ordinal;
  memcpy(e->identifier, "ELF", 4);
  for (size_t i = 0; i < sizeof arches / sizeof arches[0]; i++) {
    if (arches[i].machine == machine) {
      e->format = arches[i].format;
      e->chip = kiln_strdup(arches[i].chip);
    }
  }
  if (!e->format) e->problem = kiln_strdup("a shared object for a machine IREE's ELF loaders do not know");
  e->n_modules = 1;
  e->code_bytes = len;
  e->code_kind = kiln_strdup("elf");
  return true;
}

static bool read_executable(const uint8_t *data, size_t len, uint32_t ordinal,
                            kiln_vmfb_executable_info_t *e) {
  memset(e, 0, sizeof *e);
  if (read_elf_executable(data, len, ordinal, e)) return true;
  const format_t *f = NULL;
  const uint8_t *content = NULL;
  size_t content_len = 0;
  bool size_prefixed = false;
  if (len >= EXECUTABLE_HEADER_BYTES && (f = format_at(data)) != NULL && header_shaped(data)) {
    e->has_header = true;
    e->header_version = kiln_vmfb_flatbuf_load_u32(data + 4);
    uint64_t size = kiln_vmfb_flatbuf_load_u64(data + 8);
    content = data + EXECUTABLE_HEADER_BYTES;
    content_len = len - EXECUTABLE_HEADER_BYTES;
    if (size == 0 || size > content_len) {
      kiln_buf_t p;
      kiln_buf_init(&p);
      kiln_buf_appendf(&p, "the executable header says %llu content bytes; %zu follow it",
                       (unsigned long long)size, content_len);
      e->problem = kiln_buf_take(&p);
      kiln_buf_deinit(&p);
    } else {
      content_len = (size_t)size;
    }
    if (!e->problem && e->header_version != 0) {
      e->problem = kiln_strdup("executable header version is not 0 (from a newer IREE?)");
    }
  } else if (len >= 8 && (f = format_at(data + 4)) != NULL) {
    content = data;
    content_len = len;
  } else if (len >= 12 && (f = format_at(data + 8)) != NULL) {
    content = data;
    content_len = len;
    size_prefixed = true;
  } else {
    return false;
  }
  /* Without the header, only a FlatBuffer that verifies as a known format is an
   * executable: rodata strings and constants can hold an identifier at bytes 4..11
   * by chance (a kernel name such as "convAMD1_kernel" or "testCDA1"). */
  if (!e->has_header && !f->desc) return false;
  e->rodata = ordinal;
  memcpy(e->identifier, f->identifier, 5);
  e->format = f->format;
  if (!f->desc || e->problem) return true;
  kiln_vmfb_flatbuf_verify_options_t vo = {.identifier = f->identifier, .size_prefixed = size_prefixed};
  kiln_status_t st = kiln_vmfb_flatbuf_verify(content, content_len, &vo, f->desc);
  if (st && !e->has_header) {
    kiln_status_free(st);
    memset(e, 0, sizeof *e);
    return false;
  }
  if (st) {
    kiln_buf_t p;
    kiln_buf_init(&p);
    kiln_buf_appendf(&p, "%s executable does not verify: %s", f->format, kiln_status_message(st));
    e->problem = kiln_buf_take(&p);
    kiln_buf_deinit(&p);
    kiln_status_free(st);
    return true;
  }
  table_t root = kiln_vmfb_flatbuf_root(content, content_len, size_prefixed, f->desc);
  if (f->desc == &kiln_vmfb_schema_vk_executable_def) {
    vulkan_exports(e, root);
  } else {
    gpu_exports(e, root);
  }
  return true;
}

/* ---- the module ---- */

static void set_reason(kiln_vmfb_info_t *info, kiln_vmfb_class_t cls, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
static void set_reason(kiln_vmfb_info_t *info, kiln_vmfb_class_t cls, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  char *reason = kiln_buf_vsprintf(fmt, ap); /* before the free: an argument may be the old reason */
  va_end(ap);
  kiln_free(info->reason);
  info->reason = reason;
  info->cls = cls;
}

/* Cross-field checks and the copy-out of everything the info reports. Returns
 * false (with INVALID set) on a fact that makes the module unloadable. */
static bool read_module(kiln_vmfb_info_t *info, const kiln_vmfb_archive_t *archive, table_t root) {
  info->name = table_string(root, KILN_VM_MODULE_NAME);
  info->version = (uint32_t)kiln_vmfb_flatbuf_table_get_uint(root, KILN_VM_MODULE_VERSION);
  info->bytecode_version = (uint32_t)kiln_vmfb_flatbuf_table_get_uint(root, KILN_VM_MODULE_BYTECODE_VERSION);

  vector_t attrs = kiln_vmfb_flatbuf_table_get_vector(root, KILN_VM_MODULE_ATTRS);
  size_t n = kiln_vmfb_flatbuf_vector_count(attrs);
  info->attrs = kiln_calloc(n ? n : 1, sizeof *info->attrs);
  for (size_t i = 0; i < n; i++) {
    table_t a = kiln_vmfb_flatbuf_vector_get_table(attrs, i);
    char *k = table_string(a, KILN_VM_ATTR_KEY), *v = table_string(a, KILN_VM_ATTR_VALUE);
    info->attrs[i].key = k ? k : kiln_strdup("");
    info->attrs[i].value = v ? v : kiln_strdup("");
    info->n_attrs++;
  }

  vector_t deps = kiln_vmfb_flatbuf_table_get_vector(root, KILN_VM_MODULE_DEPENDENCIES);
  n = kiln_vmfb_flatbuf_vector_count(deps);
  info->dependencies = kiln_calloc(n ? n : 1, sizeof *info->dependencies);
  for (size_t i = 0; i < n; i++) {
    table_t d = kiln_vmfb_flatbuf_vector_get_table(deps, i);
    kiln_vmfb_dependency_t *dep = &info->dependencies[info->n_dependencies++];
    char *name = table_string(d, KILN_VM_DEPENDENCY_NAME);
    dep->name = name ? name : kiln_strdup("");
    dep->minimum_version = (uint32_t)kiln_vmfb_flatbuf_table_get_uint(d, KILN_VM_DEPENDENCY_MINIMUM_VERSION);
    dep->flags = (uint32_t)kiln_vmfb_flatbuf_table_get_uint(d, KILN_VM_DEPENDENCY_FLAGS);
    if (strcmp(dep->name, "hal") == 0) info->hal_version = dep->minimum_version;
  }

  vector_t imports = kiln_vmfb_flatbuf_table_get_vector(root, KILN_VM_MODULE_IMPORTED_FUNCTIONS);
  n = kiln_vmfb_flatbuf_vector_count(imports);
  info->imports = kiln_calloc(n ? n : 1, sizeof *info->imports);
  for (size_t i = 0; i < n; i++) {
    table_t imp = kiln_vmfb_flatbuf_vector_get_table(imports, i);
    kiln_vmfb_vm_import_t *out = &info->imports[info->n_imports++];
    char *name = table_string(imp, KILN_VM_IMPORT_FULL_NAME);
    out->full_name = name ? name : kiln_strdup("");
    out->cconv = table_string(kiln_vmfb_flatbuf_table_get_table(imp, KILN_VM_IMPORT_SIGNATURE),
                              KILN_VM_SIGNATURE_CALLING_CONVENTION);
    out->flags = (uint32_t)kiln_vmfb_flatbuf_table_get_uint(imp, KILN_VM_IMPORT_FLAGS);
  }

  vector_t descs = kiln_vmfb_flatbuf_table_get_vector(root, KILN_VM_MODULE_FUNCTION_DESCRIPTORS);
  vector_t sigs = kiln_vmfb_flatbuf_table_get_vector(root, KILN_VM_MODULE_FUNCTION_SIGNATURES);
  vector_t code = kiln_vmfb_flatbuf_table_get_vector(root, KILN_VM_MODULE_BYTECODE_DATA);
  info->n_functions = kiln_vmfb_flatbuf_vector_count(descs);
  info->bytecode_bytes = kiln_vmfb_flatbuf_vector_count(code);
  for (size_t i = 0; i < info->n_functions; i++) {
    const uint8_t *d = kiln_vmfb_flatbuf_vector_get_struct(descs, i);
    uint64_t off = kiln_vmfb_flatbuf_load_u32(d + KILN_VM_FUNCTION_DESCRIPTOR_BYTECODE_OFFSET);
    uint64_t len = kiln_vmfb_flatbuf_load_u32(d + KILN_VM_FUNCTION_DESCRIPTOR_BYTECODE_LENGTH);
    if (off > info->bytecode_bytes || len > info->bytecode_bytes - off) {
      set_reason(info, KILN_VMFB_CLASS_INVALID,
                 "function %zu's bytecode (offset %llu, length %llu) is outside the module's %llu "
                 "bytes of bytecode",
                 i, (unsigned long long)off, (unsigned long long)len,
                 (unsigned long long)info->bytecode_bytes);
      return false;
    }
  }
  if (info->n_functions && kiln_vmfb_flatbuf_vector_count(sigs) != info->n_functions) {
    set_reason(info, KILN_VMFB_CLASS_INVALID, "%zu function signature(s) for %zu function(s)",
               kiln_vmfb_flatbuf_vector_count(sigs), info->n_functions);
    return false;
  }

  vector_t exports = kiln_vmfb_flatbuf_table_get_vector(root, KILN_VM_MODULE_EXPORTED_FUNCTIONS);
  n = kiln_vmfb_flatbuf_vector_count(exports);
  info->exports = kiln_calloc(n ? n : 1, sizeof *info->exports);
  for (size_t i = 0; i < n; i++) {
    table_t x = kiln_vmfb_flatbuf_vector_get_table(exports, i);
    kiln_vmfb_export_t *out = &info->exports[info->n_exports++];
    char *name = table_string(x, KILN_VM_EXPORT_LOCAL_NAME);
    out->name = name ? name : kiln_strdup("");
    uint64_t ordinal = kiln_vmfb_flatbuf_table_get_uint(x, KILN_VM_EXPORT_INTERNAL_ORDINAL);
    if (ordinal >= info->n_functions) {
      set_reason(info, KILN_VMFB_CLASS_INVALID, "export %s names function %llu of %zu", out->name,
                 (unsigned long long)ordinal, info->n_functions);
      return false;
    }
    out->cconv = table_string(kiln_vmfb_flatbuf_vector_get_table(sigs, (size_t)ordinal),
                              KILN_VM_SIGNATURE_CALLING_CONVENTION);
  }

  vector_t rodata = kiln_vmfb_flatbuf_table_get_vector(root, KILN_VM_MODULE_RODATA_SEGMENTS);
  n = kiln_vmfb_flatbuf_vector_count(rodata);
  info->rodata = kiln_calloc(n ? n : 1, sizeof *info->rodata);
  info->executables = kiln_calloc(n ? n : 1, sizeof *info->executables);
  for (size_t i = 0; i < n; i++) {
    table_t r = kiln_vmfb_flatbuf_vector_get_table(rodata, i);
    const uint8_t *data = NULL;
    size_t len = 0;
    if (kiln_vmfb_flatbuf_table_has(r, KILN_VM_RODATA_EMBEDDED_DATA)) {
      vector_t bytes = kiln_vmfb_flatbuf_table_get_vector(r, KILN_VM_RODATA_EMBEDDED_DATA);
      data = kiln_vmfb_flatbuf_vector_data(bytes);
      len = kiln_vmfb_flatbuf_vector_count(bytes);
    } else {
      uint64_t off = kiln_vmfb_flatbuf_table_get_uint(r, KILN_VM_RODATA_EXTERNAL_DATA_OFFSET);
      uint64_t ext_len = kiln_vmfb_flatbuf_table_get_uint(r, KILN_VM_RODATA_EXTERNAL_DATA_LENGTH);
      kiln_status_t st = kiln_vmfb_archive_rodata_resolve(archive, off, ext_len, &data);
      if (st) {
        set_reason(info, KILN_VMFB_CLASS_INVALID, "rodata segment %zu: %s", i, kiln_status_message(st));
        kiln_status_free(st);
        return false;
      }
      len = (size_t)ext_len;
      info->rodata[i].external = true;
    }
    info->rodata[i].size = len;
    info->n_rodata++;
    if (data && read_executable(data, len, (uint32_t)i, &info->executables[info->n_executables])) {
      info->n_executables++;
    }
  }
  return true;
}

static void classify(kiln_vmfb_info_t *info) {
  unsigned major = info->bytecode_version >> 16, minor = info->bytecode_version & 0xFFFF;
  for (size_t i = 0; i < info->n_executables; i++) {
    const kiln_vmfb_executable_info_t *e = &info->executables[i];
    if (e->problem) {
      set_reason(info, KILN_VMFB_CLASS_INVALID, "executable in rodata %u (%s): %s", e->rodata,
                 e->format ? e->format : e->identifier, e->problem);
      return;
    }
  }
  if (major > BYTECODE_MAJOR) {
    set_reason(info, KILN_VMFB_CLASS_INVALID,
               "VM bytecode %u.%u is newer than IREE 3.12's (%u.0): written by a newer IREE", major, minor,
               BYTECODE_MAJOR);
    return;
  }
  if (info->hal_version > CURRENT_HAL_VERSION) {
    set_reason(info, KILN_VMFB_CLASS_INVALID,
               "requires hal 0.%u, newer than IREE 3.12's 0.%u: written by a newer IREE", info->hal_version,
               CURRENT_HAL_VERSION);
    return;
  }
  /* Legacy: the first reason in the order the 3.12 runtime would hit it. */
  if (major < BYTECODE_MAJOR) {
    set_reason(info, KILN_VMFB_CLASS_LEGACY,
               "VM bytecode %u.%u: IREE 3.12's runtime loads only %u.x (recompile for HAL 0.7)", major, minor,
               BYTECODE_MAJOR);
    return;
  }
  bool imports_hal = false;
  for (size_t i = 0; i < info->n_imports; i++) {
    if (strncmp(info->imports[i].full_name, "hal.", 4) == 0) imports_hal = true;
  }
  if (info->hal_version && info->hal_version < CURRENT_HAL_VERSION) {
    set_reason(info, KILN_VMFB_CLASS_LEGACY,
               "requires hal 0.%u (IREE before 3.12); the 3.12 runtime (hal 0.7) fails its imports",
               info->hal_version);
    return;
  }
  if (!info->hal_version && imports_hal) {
    set_reason(info, KILN_VMFB_CLASS_LEGACY,
               "imports hal.* without declaring a hal dependency (IREE before HAL 0.5)");
    return;
  }
  for (size_t i = 0; i < info->n_imports; i++) {
    const kiln_vmfb_vm_import_t *imp = &info->imports[i];
    if (strcmp(imp->full_name, "hal.command_buffer.dispatch") == 0 && imp->cconv &&
        strcmp(imp->cconv, "0rrIiiiICiDCiirIID_v") != 0) {
      set_reason(info, KILN_VMFB_CLASS_LEGACY,
                 "imports hal.command_buffer.dispatch with the pre-0.7 signature %s (0.7 takes an i64 "
                 "function id: 0rrIiiiICiDCiirIID_v)",
                 imp->cconv);
      return;
    }
  }
  for (size_t i = 0; i < info->n_executables; i++) {
    const kiln_vmfb_executable_info_t *e = &info->executables[i];
    /* CPU executables are the ELF itself in every IREE version: no header. */
    if (!e->has_header && strcmp(e->identifier, "ELF") != 0) {
      set_reason(info, KILN_VMFB_CLASS_LEGACY,
                 "executable in rodata %u (%s) has no 64-byte executable header (IREE before 3.9)", e->rodata,
                 e->format ? e->format : e->identifier);
      return;
    }
  }
  bool creates_executables = false;
  for (size_t i = 0; i < info->n_imports; i++) {
    if (strcmp(info->imports[i].full_name, "hal.executable.create") == 0) creates_executables = true;
  }
  if (creates_executables && info->n_executables == 0) {
    set_reason(info, KILN_VMFB_CLASS_INVALID,
               "imports hal.executable.create but no rodata segment holds a HAL executable (damaged "
               "or misplaced rodata?)");
    return;
  }
  set_reason(info, KILN_VMFB_CLASS_CURRENT, "hal 0.%u, bytecode %u.%u, %zu executable(s) with headers",
             info->hal_version, major, minor, info->n_executables);
}

kiln_status_t kiln_vmfb_read(const uint8_t *file, size_t len, kiln_vmfb_info_t *out_info) {
  memset(out_info, 0, sizeof *out_info);
  kiln_vmfb_info_t *info = out_info;
  info->file_size = len;
  kiln_vmfb_archive_t archive;
  memset(&archive, 0, sizeof archive);
  kiln_status_t st = kiln_vmfb_archive_parse(file, len, KILN_VMFB_ARCHIVE_VERIFY_CRC, &archive);
  if (st) {
    set_reason(info, KILN_VMFB_CLASS_INVALID, "not a readable VMFB: %s", kiln_status_message(st));
    kiln_status_free(st);
    return NULL;
  }
  info->layout = (int)archive.layout;
  info->entries = kiln_calloc(archive.entry_count ? archive.entry_count : 1, sizeof *info->entries);
  for (size_t i = 0; i < archive.entry_count; i++) {
    const kiln_vmfb_archive_entry_t *e = &archive.entries[i];
    info->entries[info->n_entries++] = kiln_strdup(e->name);
    if (strcmp(e->name, SOURCE_ENTRY) == 0) info->has_source = true;
    if (e->crc == KILN_VMFB_ARCHIVE_CRC_MISMATCH && !info->reason) {
      set_reason(info, KILN_VMFB_CLASS_INVALID,
                 "zip entry %s: its CRC-32 does not match its contents (damaged file)", e->name);
    }
  }
  if (info->reason) {
    kiln_vmfb_archive_deinit(&archive);
    return NULL;
  }
  kiln_vmfb_flatbuf_verify_options_t vo = {.identifier = KILN_VM_FILE_IDENTIFIER, .size_prefixed = true};
  st = kiln_vmfb_flatbuf_verify(archive.flatbuffer, archive.flatbuffer_size, &vo,
                                &kiln_vmfb_schema_vm_bytecode_module_def);
  if (st) {
    set_reason(info, KILN_VMFB_CLASS_INVALID, "module FlatBuffer: %s", kiln_status_message(st));
    kiln_status_free(st);
    kiln_vmfb_archive_deinit(&archive);
    return NULL;
  }
  table_t root = kiln_vmfb_flatbuf_root(archive.flatbuffer, archive.flatbuffer_size, true,
                                        &kiln_vmfb_schema_vm_bytecode_module_def);
  if (read_module(info, &archive, root)) classify(info);
  kiln_vmfb_archive_deinit(&archive);
  return NULL;
}

const char *kiln_vmfb_info_attr(const kiln_vmfb_info_t *info, const char *key) {
  for (size_t i = 0; i < info->n_attrs; i++) {
    if (strcmp(info->attrs[i].key, key) == 0) return info->attrs[i].value;
  }
  return NULL;
}

kiln_status_t kiln_vmfb_source_extract(const uint8_t *file, size_t len, uint8_t **out_source,
                                       size_t *out_len) {
  *out_source = NULL;
  *out_len = 0;
  kiln_vmfb_info_t info;
  kiln_status_t misuse = kiln_vmfb_read(file, len, &info);
  if (misuse) {
    kiln_vmfb_info_deinit(&info);
    return misuse;
  }
  if (info.cls == KILN_VMFB_CLASS_INVALID) {
    kiln_status_t st = KILN_STATUS(KILN_STATUS_DATA_LOSS, "%s", info.reason);
    kiln_vmfb_info_deinit(&info);
    return st;
  }
  char *want_digest = NULL, *want_bytes = NULL;
  const char *d = kiln_vmfb_info_attr(&info, "kiln.source.sha256");
  if (d) want_digest = kiln_strdup(d);
  const char *b = kiln_vmfb_info_attr(&info, "kiln.source.bytes");
  if (b) want_bytes = kiln_strdup(b);
  kiln_vmfb_info_deinit(&info);

  kiln_vmfb_archive_t archive;
  kiln_status_t st = kiln_vmfb_archive_parse(file, len, 0, &archive);
  if (st) {
    kiln_free(want_digest);
    kiln_free(want_bytes);
    return st;
  }
  ptrdiff_t idx = kiln_vmfb_archive_entry_find(&archive, SOURCE_ENTRY);
  if (idx < 0 || !archive.entries[idx].stored) {
    kiln_vmfb_archive_deinit(&archive);
    kiln_free(want_digest);
    kiln_free(want_bytes);
    return KILN_STATUS(KILN_STATUS_NOT_FOUND, "the VMFB carries no embedded source (%s)", SOURCE_ENTRY);
  }
  const uint8_t *z = archive.file + archive.entries[idx].data_offset;
  size_t zlen = (size_t)archive.entries[idx].size;
  unsigned long long size = ZSTD_getFrameContentSize(z, zlen);
  /* Hostile files: a tiny frame can claim a huge size. Beyond a generous ratio
   * (MLIR text compresses 5-30x; splat-heavy text more) the file must prove its
   * size by recording it in kiln.source.bytes. */
  unsigned long long ratio_cap = (unsigned long long)zlen * SOURCE_RATIO_CAP;
  if (ratio_cap < SOURCE_FREE_BYTES) ratio_cap = SOURCE_FREE_BYTES;
  if (size == ZSTD_CONTENTSIZE_ERROR || size == ZSTD_CONTENTSIZE_UNKNOWN || size > MAX_SOURCE_BYTES) {
    st = KILN_STATUS(KILN_STATUS_DATA_LOSS,
                     "the embedded source is not a zstd frame of known size up to 1 GiB");
  } else if (want_bytes && strtoull(want_bytes, NULL, 10) != size) {
    st = KILN_STATUS(KILN_STATUS_DATA_LOSS,
                     "the embedded source's frame says %llu bytes; kiln.source.bytes says %s", size,
                     want_bytes);
  } else if (!want_bytes && size > ratio_cap) {
    st = KILN_STATUS(
        KILN_STATUS_DATA_LOSS,
        "the embedded source claims %llu bytes from %zu compressed, an implausible ratio, and the "
        "file records no kiln.source.bytes",
        size, zlen);
  } else {
    uint8_t *src = kiln_malloc(size ? (size_t)size : 1);
    size_t n = ZSTD_decompress(src, (size_t)size, z, zlen);
    if (ZSTD_isError(n) || n != size) {
      st = KILN_STATUS(KILN_STATUS_DATA_LOSS, "the embedded source does not decompress: %s",
                       ZSTD_isError(n) ? ZSTD_getErrorName(n) : "short");
      kiln_free(src);
    } else {
      kiln_digest_t digest;
      kiln_digest_hex_t hex;
      kiln_digest_of(src, n, &digest);
      kiln_digest_to_hex(&digest, &hex);
      if (want_digest && strcmp(want_digest, hex.text) != 0) {
        st = KILN_STATUS(KILN_STATUS_DATA_LOSS, "the embedded source's SHA-256 %s is not the recorded %s",
                         hex.text, want_digest);
        kiln_free(src);
      } else {
        *out_source = src;
        *out_len = n;
      }
    }
  }
  kiln_vmfb_archive_deinit(&archive);
  kiln_free(want_digest);
  kiln_free(want_bytes);
  return st;
}

void kiln_vmfb_info_deinit(kiln_vmfb_info_t *info) {
  if (!info) return;
  kiln_free(info->name);
  for (size_t i = 0; i < info->n_dependencies; i++) kiln_free(info->dependencies[i].name);
  kiln_free(info->dependencies);
  for (size_t i = 0; i < info->n_imports; i++) {
    kiln_free(info->imports[i].full_name);
    kiln_free(info->imports[i].cconv);
  }
  kiln_free(info->imports);
  for (size_t i = 0; i < info->n_exports; i++) {
    kiln_free(info->exports[i].name);
    kiln_free(info->exports[i].cconv);
  }
  kiln_free(info->exports);
  kiln_free(info->rodata);
  for (size_t i = 0; i < info->n_executables; i++) {
    kiln_vmfb_executable_info_t *e = &info->executables[i];
    for (size_t k = 0; k < e->n_kernels; k++) kiln_free(e->kernels[k]);
    kiln_free(e->kernels);
    kiln_free(e->block_dims);
    kiln_free(e->constant_counts);
    kiln_free(e->chip);
    kiln_free(e->code_kind);
    kiln_free(e->problem);
  }
  kiln_free(info->executables);
  for (size_t i = 0; i < info->n_attrs; i++) {
    kiln_free(info->attrs[i].key);
    kiln_free(info->attrs[i].value);
  }
  kiln_free(info->attrs);
  for (size_t i = 0; i < info->n_entries; i++) kiln_free(info->entries[i]);
  kiln_free(info->entries);
  kiln_free(info->reason);
  memset(info, 0, sizeof *info);
}
