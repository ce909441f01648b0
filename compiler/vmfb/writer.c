/* The VMFB writer: HAL executables and BytecodeModuleDef modules, deterministic.
 *
 * Order of work in kiln_vmfb_write:
 *   1. the executable FlatBuffer (behind its 64-byte header);
 *   2. the host program around it (hostprog.c): types, imports, globals, rodata
 *      (the executable is an external segment), functions;
 *   3. the BytecodeModuleDef, serialized twice: external rodata offsets are u64
 *      fields written even when zero, so the FlatBuffer's size does not depend on
 *      their values; the first pass measures it, the archive plan turns the size
 *      into offsets, the second pass writes them (and must come out the same size);
 *   4. the container: module.fb (64-byte aligned), one STORED entry per external
 *      segment, then kiln's extras (the compressed source).
 * Nothing host-dependent reaches the bytes: provenance carries no time unless the
 * caller passes one.
 */
#include "compiler/vmfb/writer.h"

#include <stdio.h>
#include <string.h>
#include <zstd.h>

#include "base/alloc.h"
#include "compiler/vmfb/archive.h"
#include "compiler/vmfb/flatbuf.h"
#include "compiler/vmfb/hostprog.h"
#include "compiler/vmfb/schema.h"
#include "compiler/vmfb/vm.h"

#define EXECUTABLE_HEADER_BYTES 64
#define BYTECODE_VERSION_17_0   ((17u << 16) | 0u)
#define SOURCE_ENTRY            "kiln/source.mlir.zst"
#define VK_SHADER_STAGE_COMPUTE 0x20u

const char *kiln_vmfb_format_name(kiln_vmfb_format_t format) {
  switch (format) {
    case KILN_VMFB_FORMAT_CUDA: return "cuda-nvptx-fb";
    case KILN_VMFB_FORMAT_HIP: return "rocm-hsaco-fb";
    case KILN_VMFB_FORMAT_VULKAN: return "vulkan-spirv-fb";
    case KILN_VMFB_FORMAT_ELF: return "embedded-elf";
  }
  return NULL;
}

/* The format string the host program matches against the device's. */
static const char *executable_format_name(const kiln_vmfb_executable_t *exe) {
  return exe->format == KILN_VMFB_FORMAT_ELF && exe->format_name ? exe->format_name
                                                                 : kiln_vmfb_format_name(exe->format);
}

const char *kiln_vmfb_format_identifier(kiln_vmfb_format_t format) {
  switch (format) {
    case KILN_VMFB_FORMAT_CUDA: return KILN_CUDA_FILE_IDENTIFIER;
    case KILN_VMFB_FORMAT_HIP: return KILN_HIP_FILE_IDENTIFIER;
    case KILN_VMFB_FORMAT_VULKAN: return KILN_VK_FILE_IDENTIFIER;
    case KILN_VMFB_FORMAT_ELF: return NULL;
  }
  return NULL;
}

/* ---- executables ---- */

typedef kiln_vmfb_flatbuf_builder_t builder_t;
typedef kiln_vmfb_flatbuf_ref_t ref_t;

/* CUDA and HIP share one shape (exports, modules) under their own descriptors. */
static ref_t gpu_executable(builder_t *b, const kiln_vmfb_executable_t *exe) {
  bool cuda = exe->format == KILN_VMFB_FORMAT_CUDA;
  const kiln_vmfb_flatbuf_table_desc_t *export_desc =
      cuda ? &kiln_vmfb_schema_cuda_export_def : &kiln_vmfb_schema_hip_export_def;
  const kiln_vmfb_flatbuf_table_desc_t *module_desc =
      cuda ? &kiln_vmfb_schema_cuda_module_def : &kiln_vmfb_schema_hip_module_def;
  ref_t *exports = kiln_calloc(exe->n_kernels, sizeof *exports);
  for (size_t i = 0; i < exe->n_kernels; i++) {
    const kiln_vmfb_kernel_t *k = &exe->kernels[i];
    ref_t e = kiln_vmfb_flatbuf_builder_add_table(b, export_desc);
    kiln_vmfb_flatbuf_builder_set_uint(b, e, KILN_CUDA_EXPORT_MODULE_ORDINAL, k->module);
    kiln_vmfb_flatbuf_builder_set_ref(b, e, KILN_CUDA_EXPORT_KERNEL_NAME,
                                      kiln_vmfb_flatbuf_builder_add_str(b, k->name));
    uint8_t dims[KILN_GPU_BLOCK_DIMS_SIZEOF];
    kiln_vmfb_flatbuf_store_u32(dims + KILN_GPU_BLOCK_DIMS_X, k->block_size[0]);
    kiln_vmfb_flatbuf_store_u32(dims + KILN_GPU_BLOCK_DIMS_Y, k->block_size[1]);
    kiln_vmfb_flatbuf_store_u32(dims + KILN_GPU_BLOCK_DIMS_Z, k->block_size[2]);
    kiln_vmfb_flatbuf_builder_set_struct(b, e, KILN_CUDA_EXPORT_BLOCK_DIMS, dims, sizeof dims);
    kiln_vmfb_flatbuf_builder_set_uint(b, e, KILN_CUDA_EXPORT_CONSTANT_COUNT, k->n_constants);
    uint64_t *flags = kiln_calloc(k->n_bindings ? k->n_bindings : 1, sizeof *flags);
    for (uint32_t j = 0; j < k->n_bindings; j++) {
      flags[j] = k->read_only && k->read_only[j] ? KILN_GPU_BINDING_READ_ONLY : 0;
    }
    kiln_vmfb_flatbuf_builder_set_ref(
        b, e, KILN_CUDA_EXPORT_BINDING_FLAGS,
        kiln_vmfb_flatbuf_builder_add_scalars(b, KILN_FLATBUF_U64, flags, k->n_bindings));
    kiln_free(flags);
    exports[i] = e;
  }
  ref_t *modules = kiln_calloc(exe->n_modules, sizeof *modules);
  for (size_t i = 0; i < exe->n_modules; i++) {
    modules[i] = kiln_vmfb_flatbuf_builder_add_table(b, module_desc);
    kiln_vmfb_flatbuf_builder_set_ref(
        b, modules[i], KILN_CUDA_MODULE_PTX_IMAGE,
        kiln_vmfb_flatbuf_builder_add_string(b, (const char *)exe->modules[i].data, exe->modules[i].len));
  }
  ref_t root = kiln_vmfb_flatbuf_builder_add_table(
      b, cuda ? &kiln_vmfb_schema_cuda_executable_def : &kiln_vmfb_schema_hip_executable_def);
  kiln_vmfb_flatbuf_builder_set_ref(b, root, KILN_CUDA_EXECUTABLE_EXPORTS,
                                    kiln_vmfb_flatbuf_builder_add_vector(b, exports, exe->n_kernels));
  kiln_vmfb_flatbuf_builder_set_ref(b, root, KILN_CUDA_EXECUTABLE_MODULES,
                                    kiln_vmfb_flatbuf_builder_add_vector(b, modules, exe->n_modules));
  kiln_free(exports);
  kiln_free(modules);
  return root;
}

/* Vulkan: one pipeline per kernel; descriptor set 0 holds the kernel's bindings
 * 0..n-1 as storage buffers (as MLIR's SPIR-V lowering assigns them); layouts are
 * shared between kernels with the same binding count and constants. */
static ref_t vulkan_executable(builder_t *b, const kiln_vmfb_executable_t *exe) {
  ref_t *set_layouts = kiln_calloc(exe->n_kernels, sizeof *set_layouts);
  ref_t *pipeline_layouts = kiln_calloc(exe->n_kernels, sizeof *pipeline_layouts);
  uint32_t *layout_of = kiln_calloc(exe->n_kernels, sizeof *layout_of);
  uint32_t *layout_bindings = kiln_calloc(exe->n_kernels, sizeof *layout_bindings);
  uint32_t *layout_constants = kiln_calloc(exe->n_kernels, sizeof *layout_constants);
  size_t n_layouts = 0;
  for (size_t i = 0; i < exe->n_kernels; i++) {
    const kiln_vmfb_kernel_t *k = &exe->kernels[i];
    size_t l = 0;
    while (l < n_layouts && (layout_bindings[l] != k->n_bindings || layout_constants[l] != k->n_constants))
      l++;
    if (l == n_layouts) {
      ref_t *bindings = kiln_calloc(k->n_bindings ? k->n_bindings : 1, sizeof *bindings);
      for (uint32_t j = 0; j < k->n_bindings; j++) {
        bindings[j] =
            kiln_vmfb_flatbuf_builder_add_table(b, &kiln_vmfb_schema_vk_descriptor_set_layout_binding_def);
        kiln_vmfb_flatbuf_builder_set_uint(b, bindings[j], KILN_VK_DESCRIPTOR_SET_LAYOUT_BINDING_BINDING, j);
        kiln_vmfb_flatbuf_builder_set_uint(b, bindings[j],
                                           KILN_VK_DESCRIPTOR_SET_LAYOUT_BINDING_DESCRIPTOR_TYPE,
                                           KILN_VK_DESCRIPTOR_TYPE_STORAGE_BUFFER);
        kiln_vmfb_flatbuf_builder_set_uint(b, bindings[j],
                                           KILN_VK_DESCRIPTOR_SET_LAYOUT_BINDING_DESCRIPTOR_COUNT, 1);
        kiln_vmfb_flatbuf_builder_set_uint(b, bindings[j], KILN_VK_DESCRIPTOR_SET_LAYOUT_BINDING_STAGE_FLAGS,
                                           VK_SHADER_STAGE_COMPUTE);
      }
      set_layouts[l] = kiln_vmfb_flatbuf_builder_add_table(b, &kiln_vmfb_schema_vk_descriptor_set_layout_def);
      kiln_vmfb_flatbuf_builder_set_ref(b, set_layouts[l], KILN_VK_DESCRIPTOR_SET_LAYOUT_BINDINGS,
                                        kiln_vmfb_flatbuf_builder_add_vector(b, bindings, k->n_bindings));
      kiln_free(bindings);
      pipeline_layouts[l] = kiln_vmfb_flatbuf_builder_add_table(b, &kiln_vmfb_schema_vk_pipeline_layout_def);
      uint32_t set_ordinal = (uint32_t)l;
      kiln_vmfb_flatbuf_builder_set_ref(
          b, pipeline_layouts[l], KILN_VK_PIPELINE_LAYOUT_DESCRIPTOR_SET_LAYOUT_ORDINALS,
          kiln_vmfb_flatbuf_builder_add_scalars(b, KILN_FLATBUF_U32, &set_ordinal, 1));
      if (k->n_constants) {
        uint8_t range[KILN_VK_PUSH_CONSTANT_RANGE_SIZEOF];
        kiln_vmfb_flatbuf_store_u32(range + KILN_VK_PUSH_CONSTANT_RANGE_STAGE_FLAGS, VK_SHADER_STAGE_COMPUTE);
        kiln_vmfb_flatbuf_store_u32(range + KILN_VK_PUSH_CONSTANT_RANGE_OFFSET, 0);
        kiln_vmfb_flatbuf_store_u32(range + KILN_VK_PUSH_CONSTANT_RANGE_SIZE, 4 * k->n_constants);
        kiln_vmfb_flatbuf_builder_set_ref(
            b, pipeline_layouts[l], KILN_VK_PIPELINE_LAYOUT_PUSH_CONSTANT_RANGES,
            kiln_vmfb_flatbuf_builder_add_structs(b, range, 1, sizeof range,
                                                  KILN_VK_PUSH_CONSTANT_RANGE_ALIGNOF));
      }
      layout_bindings[l] = k->n_bindings;
      layout_constants[l] = k->n_constants;
      n_layouts++;
    }
    layout_of[i] = (uint32_t)l;
  }
  ref_t *pipelines = kiln_calloc(exe->n_kernels, sizeof *pipelines);
  for (size_t i = 0; i < exe->n_kernels; i++) {
    const kiln_vmfb_kernel_t *k = &exe->kernels[i];
    pipelines[i] = kiln_vmfb_flatbuf_builder_add_table(b, &kiln_vmfb_schema_vk_pipeline_def);
    kiln_vmfb_flatbuf_builder_set_uint(b, pipelines[i], KILN_VK_PIPELINE_SHADER_MODULE_ORDINAL, k->module);
    kiln_vmfb_flatbuf_builder_set_ref(b, pipelines[i], KILN_VK_PIPELINE_ENTRY_POINT,
                                      kiln_vmfb_flatbuf_builder_add_str(b, k->name));
    kiln_vmfb_flatbuf_builder_set_uint(b, pipelines[i], KILN_VK_PIPELINE_PIPELINE_LAYOUT_ORDINAL,
                                       layout_of[i]);
    kiln_vmfb_flatbuf_builder_set_uint(b, pipelines[i], KILN_VK_PIPELINE_SUBGROUP_SIZE, exe->subgroup_size);
  }
  ref_t *shaders = kiln_calloc(exe->n_modules, sizeof *shaders);
  for (size_t i = 0; i < exe->n_modules; i++) {
    size_t words = exe->modules[i].len / 4;
    uint32_t *code = kiln_malloc(words ? words * 4 : 4);
    memcpy(code, exe->modules[i].data, words * 4);
    shaders[i] = kiln_vmfb_flatbuf_builder_add_table(b, &kiln_vmfb_schema_vk_shader_module_def);
    kiln_vmfb_flatbuf_builder_set_ref(
        b, shaders[i], KILN_VK_SHADER_MODULE_SPIRV_CODE,
        kiln_vmfb_flatbuf_builder_add_scalars(b, KILN_FLATBUF_U32, code, words));
    kiln_free(code);
  }
  ref_t root = kiln_vmfb_flatbuf_builder_add_table(b, &kiln_vmfb_schema_vk_executable_def);
  kiln_vmfb_flatbuf_builder_set_ref(b, root, KILN_VK_EXECUTABLE_PIPELINES,
                                    kiln_vmfb_flatbuf_builder_add_vector(b, pipelines, exe->n_kernels));
  kiln_vmfb_flatbuf_builder_set_ref(b, root, KILN_VK_EXECUTABLE_DESCRIPTOR_SET_LAYOUTS,
                                    kiln_vmfb_flatbuf_builder_add_vector(b, set_layouts, n_layouts));
  kiln_vmfb_flatbuf_builder_set_ref(b, root, KILN_VK_EXECUTABLE_PIPELINE_LAYOUTS,
                                    kiln_vmfb_flatbuf_builder_add_vector(b, pipeline_layouts, n_layouts));
  kiln_vmfb_flatbuf_builder_set_ref(b, root, KILN_VK_EXECUTABLE_SHADER_MODULES,
                                    kiln_vmfb_flatbuf_builder_add_vector(b, shaders, exe->n_modules));
  kiln_free(set_layouts);
  kiln_free(pipeline_layouts);
  kiln_free(layout_of);
  kiln_free(layout_bindings);
  kiln_free(layout_constants);
  kiln_free(pipelines);
  kiln_free(shaders);
  return root;
}

kiln_status_t kiln_vmfb_executable_serialize(const kiln_vmfb_executable_t *exe, bool header,
                                             kiln_buf_t *out) {
  if (exe->format == KILN_VMFB_FORMAT_ELF) {
    /* IREE's ELF loaders read the rodata as the ELF itself. */
    static const uint8_t magic[4] = {0x7f, 'E', 'L', 'F'};
    if (exe->n_kernels == 0 || exe->n_modules != 1 || exe->modules[0].len < 64 ||
        memcmp(exe->modules[0].data, magic, 4) != 0) {
      return KILN_STATUS(KILN_STATUS_INVALID_ARGUMENT,
                         "a %s executable is one ELF holding at least one kernel",
                         executable_format_name(exe));
    }
    kiln_buf_append(out, exe->modules[0].data, exe->modules[0].len);
    return NULL;
  }
  const char *identifier = kiln_vmfb_format_identifier(exe->format);
  if (!identifier)
    return KILN_STATUS(KILN_STATUS_INVALID_ARGUMENT, "unknown executable format %d", (int)exe->format);
  if (exe->n_kernels == 0 || exe->n_modules == 0) {
    return KILN_STATUS(KILN_STATUS_INVALID_ARGUMENT,
                       "a %s executable needs at least one kernel and one module",
                       kiln_vmfb_format_name(exe->format));
  }
  for (size_t i = 0; i < exe->n_kernels; i++) {
    const kiln_vmfb_kernel_t *k = &exe->kernels[i];
    if (!k->name || !*k->name || k->module >= exe->n_modules) {
      return KILN_STATUS(KILN_STATUS_INVALID_ARGUMENT,
                         "kernel %zu (%s) names module %u of an executable with %zu module(s)", i,
                         k->name ? k->name : "(unnamed)", k->module, exe->n_modules);
    }
  }
  for (size_t i = 0; i < exe->n_modules; i++) {
    if (exe->modules[i].len == 0 || (exe->format == KILN_VMFB_FORMAT_VULKAN && exe->modules[i].len % 4)) {
      return KILN_STATUS(KILN_STATUS_INVALID_ARGUMENT, "module %zu of the %s executable is %zu bytes: %s", i,
                         kiln_vmfb_format_name(exe->format), exe->modules[i].len,
                         exe->modules[i].len ? "SPIR-V must be whole 32-bit words" : "empty");
    }
  }
  builder_t *b = kiln_vmfb_flatbuf_builder_create();
  ref_t root = exe->format == KILN_VMFB_FORMAT_VULKAN ? vulkan_executable(b, exe) : gpu_executable(b, exe);
  size_t start = out->len;
  if (header) {
    uint8_t zeros[EXECUTABLE_HEADER_BYTES] = {0};
    kiln_buf_append(out, zeros, sizeof zeros);
  }
  kiln_vmfb_flatbuf_finish_options_t fo = {.identifier = identifier, .base_alignment = 16};
  kiln_status_t st = kiln_vmfb_flatbuf_builder_finish(b, root, &fo, out);
  kiln_vmfb_flatbuf_builder_destroy(b);
  if (st) {
    out->len = start;
    return kiln_status_annotate(st, "serializing the %s executable", kiln_vmfb_format_name(exe->format));
  }
  if (header) {
    /* {u32 magic = identifier, u32 version = 0, u64 content size, u64 reserved[6]} */
    uint8_t *h = (uint8_t *)out->data + start;
    memcpy(h, identifier, 4);
    kiln_vmfb_flatbuf_store_u32(h + 4, 0);
    kiln_vmfb_flatbuf_store_u64(h + 8, (uint64_t)(out->len - start - EXECUTABLE_HEADER_BYTES));
  }
  return NULL;
}

/* ---- the module ---- */

static ref_t attrs_vector(builder_t *b, const kiln_vmfb_attr_t *attrs, size_t n) {
  if (n == 0) return 0;
  ref_t *refs = kiln_calloc(n, sizeof *refs);
  for (size_t i = 0; i < n; i++) {
    refs[i] = kiln_vmfb_flatbuf_builder_add_table(b, &kiln_vmfb_schema_vm_attr_def);
    kiln_vmfb_flatbuf_builder_set_ref(b, refs[i], KILN_VM_ATTR_KEY,
                                      kiln_vmfb_flatbuf_builder_add_str(b, attrs[i].key));
    kiln_vmfb_flatbuf_builder_set_ref(b, refs[i], KILN_VM_ATTR_VALUE,
                                      kiln_vmfb_flatbuf_builder_add_str(b, attrs[i].value));
  }
  ref_t v = kiln_vmfb_flatbuf_builder_add_vector(b, refs, n);
  kiln_free(refs);
  return v;
}

static ref_t signature(builder_t *b, const char *cconv, const kiln_vmfb_attr_t *attrs, size_t n_attrs) {
  ref_t s = kiln_vmfb_flatbuf_builder_add_table(b, &kiln_vmfb_schema_vm_function_signature_def);
  if (cconv) {
    kiln_vmfb_flatbuf_builder_set_ref(b, s, KILN_VM_SIGNATURE_CALLING_CONVENTION,
                                      kiln_vmfb_flatbuf_builder_add_str(b, cconv));
  }
  ref_t a = attrs_vector(b, attrs, n_attrs);
  if (a) kiln_vmfb_flatbuf_builder_set_ref(b, s, KILN_VM_SIGNATURE_ATTRS, a);
  return s;
}

/* Serializes the module with the given external offsets (u64 fields always written).
 * Without `dependencies` the module has no dependency list, as before HAL 0.5. */
static KILN_MUST_USE kiln_status_t serialize_module(const kiln_vmfb_vm_module_t *m, bool dependencies,
                                                    const uint64_t *external_offsets, kiln_buf_t *out) {
  builder_t *b = kiln_vmfb_flatbuf_builder_create();
  ref_t root = kiln_vmfb_flatbuf_builder_add_table(b, &kiln_vmfb_schema_vm_bytecode_module_def);
  kiln_vmfb_flatbuf_builder_set_ref(b, root, KILN_VM_MODULE_NAME,
                                    kiln_vmfb_flatbuf_builder_add_str(b, m->name));
  kiln_vmfb_flatbuf_builder_set_uint(b, root, KILN_VM_MODULE_VERSION, m->version);
  ref_t attrs = attrs_vector(b, m->attrs, m->n_attrs);
  if (attrs) kiln_vmfb_flatbuf_builder_set_ref(b, root, KILN_VM_MODULE_ATTRS, attrs);

  ref_t *refs = kiln_calloc(m->n_types + m->n_imports + 2 * m->n_functions + m->n_rodata + 1, sizeof *refs);
  for (size_t i = 0; i < m->n_types; i++) {
    refs[i] = kiln_vmfb_flatbuf_builder_add_table(b, &kiln_vmfb_schema_vm_type_def);
    kiln_vmfb_flatbuf_builder_set_ref(b, refs[i], KILN_VM_TYPE_FULL_NAME,
                                      kiln_vmfb_flatbuf_builder_add_str(b, m->types[i]));
  }
  kiln_vmfb_flatbuf_builder_set_ref(b, root, KILN_VM_MODULE_TYPES,
                                    kiln_vmfb_flatbuf_builder_add_vector(b, refs, m->n_types));

  if (dependencies) {
    ref_t dep = kiln_vmfb_flatbuf_builder_add_table(b, &kiln_vmfb_schema_vm_module_dependency_def);
    kiln_vmfb_flatbuf_builder_set_ref(b, dep, KILN_VM_DEPENDENCY_NAME,
                                      kiln_vmfb_flatbuf_builder_add_str(b, "hal"));
    kiln_vmfb_flatbuf_builder_set_uint(b, dep, KILN_VM_DEPENDENCY_MINIMUM_VERSION, m->hal_minimum_version);
    kiln_vmfb_flatbuf_builder_set_uint(b, dep, KILN_VM_DEPENDENCY_FLAGS, KILN_VM_DEPENDENCY_FLAG_REQUIRED);
    kiln_vmfb_flatbuf_builder_force(b, dep, KILN_VM_DEPENDENCY_FLAGS);
    kiln_vmfb_flatbuf_builder_set_ref(b, root, KILN_VM_MODULE_DEPENDENCIES,
                                      kiln_vmfb_flatbuf_builder_add_vector(b, &dep, 1));
  }

  for (size_t i = 0; i < m->n_imports; i++) {
    const kiln_vmfb_vm_import_t *imp = &m->imports[i];
    refs[i] = kiln_vmfb_flatbuf_builder_add_table(b, &kiln_vmfb_schema_vm_import_function_def);
    kiln_vmfb_flatbuf_builder_set_ref(b, refs[i], KILN_VM_IMPORT_FULL_NAME,
                                      kiln_vmfb_flatbuf_builder_add_str(b, imp->full_name));
    kiln_vmfb_flatbuf_builder_set_ref(b, refs[i], KILN_VM_IMPORT_SIGNATURE,
                                      signature(b, imp->cconv, NULL, 0));
    kiln_vmfb_flatbuf_builder_set_uint(b, refs[i], KILN_VM_IMPORT_FLAGS,
                                       imp->flags ? imp->flags : KILN_VM_IMPORT_FLAG_REQUIRED);
  }
  kiln_vmfb_flatbuf_builder_set_ref(b, root, KILN_VM_MODULE_IMPORTED_FUNCTIONS,
                                    kiln_vmfb_flatbuf_builder_add_vector(b, refs, m->n_imports));

  size_t n_exports = 0;
  for (size_t i = 0; i < m->n_functions; i++) {
    if (!m->functions[i].export_name) continue;
    ref_t e = kiln_vmfb_flatbuf_builder_add_table(b, &kiln_vmfb_schema_vm_export_function_def);
    kiln_vmfb_flatbuf_builder_set_ref(b, e, KILN_VM_EXPORT_LOCAL_NAME,
                                      kiln_vmfb_flatbuf_builder_add_str(b, m->functions[i].export_name));
    kiln_vmfb_flatbuf_builder_set_uint(b, e, KILN_VM_EXPORT_INTERNAL_ORDINAL, i);
    refs[n_exports++] = e;
  }
  kiln_vmfb_flatbuf_builder_set_ref(b, root, KILN_VM_MODULE_EXPORTED_FUNCTIONS,
                                    kiln_vmfb_flatbuf_builder_add_vector(b, refs, n_exports));

  for (size_t i = 0; i < m->n_functions; i++) {
    const kiln_vmfb_vm_function_t *f = &m->functions[i];
    refs[i] = signature(b, f->cconv, f->attrs, f->n_attrs);
  }
  kiln_vmfb_flatbuf_builder_set_ref(b, root, KILN_VM_MODULE_FUNCTION_SIGNATURES,
                                    kiln_vmfb_flatbuf_builder_add_vector(b, refs, m->n_functions));

  size_t ext = 0;
  for (size_t i = 0; i < m->n_rodata; i++) {
    const kiln_vmfb_vm_rodata_t *r = &m->rodata[i];
    refs[i] = kiln_vmfb_flatbuf_builder_add_table(b, &kiln_vmfb_schema_vm_rodata_segment_def);
    if (r->external) {
      kiln_vmfb_flatbuf_builder_set_uint(b, refs[i], KILN_VM_RODATA_EXTERNAL_DATA_OFFSET,
                                         external_offsets[ext++]);
      kiln_vmfb_flatbuf_builder_force(b, refs[i], KILN_VM_RODATA_EXTERNAL_DATA_OFFSET);
      kiln_vmfb_flatbuf_builder_set_uint(b, refs[i], KILN_VM_RODATA_EXTERNAL_DATA_LENGTH, r->len);
      kiln_vmfb_flatbuf_builder_force(b, refs[i], KILN_VM_RODATA_EXTERNAL_DATA_LENGTH);
    } else {
      kiln_vmfb_flatbuf_builder_set_ref(
          b, refs[i], KILN_VM_RODATA_EMBEDDED_DATA,
          kiln_vmfb_flatbuf_builder_add_bytes(b, r->data, r->len, r->alignment > 64 ? 64 : r->alignment));
    }
  }
  kiln_vmfb_flatbuf_builder_set_ref(b, root, KILN_VM_MODULE_RODATA_SEGMENTS,
                                    kiln_vmfb_flatbuf_builder_add_vector(b, refs, m->n_rodata));

  ref_t state = kiln_vmfb_flatbuf_builder_add_table(b, &kiln_vmfb_schema_vm_module_state_def);
  kiln_vmfb_flatbuf_builder_set_uint(b, state, KILN_VM_STATE_GLOBAL_BYTES_CAPACITY, m->global_bytes_capacity);
  kiln_vmfb_flatbuf_builder_set_uint(b, state, KILN_VM_STATE_GLOBAL_REF_COUNT, m->global_ref_count);
  kiln_vmfb_flatbuf_builder_set_ref(b, root, KILN_VM_MODULE_MODULE_STATE, state);

  /* Function descriptors and the concatenated bytecode (each function 8-aligned). */
  kiln_buf_t code, descs;
  kiln_buf_init(&code);
  kiln_buf_init(&descs);
  for (size_t i = 0; i < m->n_functions; i++) {
    const kiln_vmfb_vm_function_t *f = &m->functions[i];
    while (code.len % 8) kiln_buf_append_char(&code, 0);
    uint8_t d[KILN_VM_FUNCTION_DESCRIPTOR_SIZEOF] = {0};
    kiln_vmfb_flatbuf_store_u32(d + KILN_VM_FUNCTION_DESCRIPTOR_BYTECODE_OFFSET, (uint32_t)code.len);
    kiln_vmfb_flatbuf_store_u32(d + KILN_VM_FUNCTION_DESCRIPTOR_BYTECODE_LENGTH, (uint32_t)f->bytecode_len);
    kiln_vmfb_flatbuf_store_u32(d + KILN_VM_FUNCTION_DESCRIPTOR_REQUIREMENTS, f->requirements);
    kiln_vmfb_flatbuf_store_u16(d + KILN_VM_FUNCTION_DESCRIPTOR_BLOCK_COUNT, f->block_count);
    kiln_vmfb_flatbuf_store_u16(d + KILN_VM_FUNCTION_DESCRIPTOR_I32_REGISTER_COUNT, f->i32_register_count);
    kiln_vmfb_flatbuf_store_u16(d + KILN_VM_FUNCTION_DESCRIPTOR_REF_REGISTER_COUNT, f->ref_register_count);
    kiln_buf_append(&descs, d, sizeof d);
    kiln_buf_append(&code, f->bytecode, f->bytecode_len);
  }
  kiln_vmfb_flatbuf_builder_set_ref(
      b, root, KILN_VM_MODULE_FUNCTION_DESCRIPTORS,
      kiln_vmfb_flatbuf_builder_add_structs(b, descs.data, m->n_functions, KILN_VM_FUNCTION_DESCRIPTOR_SIZEOF,
                                            KILN_VM_FUNCTION_DESCRIPTOR_ALIGNOF));
  kiln_vmfb_flatbuf_builder_set_uint(b, root, KILN_VM_MODULE_BYTECODE_VERSION, m->bytecode_version);
  kiln_vmfb_flatbuf_builder_force(b, root, KILN_VM_MODULE_BYTECODE_VERSION);
  kiln_vmfb_flatbuf_builder_set_ref(b, root, KILN_VM_MODULE_BYTECODE_DATA,
                                    kiln_vmfb_flatbuf_builder_add_bytes(b, code.data, code.len, 16));
  kiln_buf_deinit(&code);
  kiln_buf_deinit(&descs);
  kiln_free(refs);

  kiln_vmfb_flatbuf_finish_options_t fo = {
      .identifier = KILN_VM_FILE_IDENTIFIER, .size_prefixed = true, .base_alignment = 64};
  kiln_status_t st = kiln_vmfb_flatbuf_builder_finish(b, root, &fo, out);
  kiln_vmfb_flatbuf_builder_destroy(b);
  return st;
}

/* The plan and executable must agree before a host program is built on them. */
static KILN_MUST_USE kiln_status_t check_agreement(const char *module_name, const kiln_vmfb_plan_t *plan,
                                                   const kiln_vmfb_executable_t *exe) {
  for (size_t f = 0; f < plan->n_functions; f++) {
    const kiln_vmfb_function_t *fn = &plan->functions[f];
    for (size_t s = 0; s < fn->n_steps; s++) {
      const kiln_vmfb_step_t *step = &fn->steps[s];
      if (step->kind != KILN_VMFB_STEP_DISPATCH) continue;
      if (step->kernel >= exe->n_kernels) {
        return KILN_STATUS(KILN_STATUS_INVALID_ARGUMENT,
                           "%s: function %s step %zu dispatches kernel %u; the executable has %zu",
                           module_name, fn->name, s, step->kernel, exe->n_kernels);
      }
      const kiln_vmfb_kernel_t *k = &exe->kernels[step->kernel];
      if (k->n_bindings != step->n_bindings || k->n_constants != step->n_constants) {
        return KILN_STATUS(KILN_STATUS_INVALID_ARGUMENT,
                           "%s: function %s step %zu binds %zu buffer(s) and %zu constant(s); kernel %s "
                           "takes %u and %u",
                           module_name, fn->name, s, step->n_bindings, step->n_constants, k->name,
                           k->n_bindings, k->n_constants);
      }
    }
  }
  return NULL;
}

kiln_status_t kiln_vmfb_write(const char *module_name, const kiln_vmfb_plan_t *plan,
                              const kiln_vmfb_executable_t *exe, const kiln_vmfb_write_options_t *options,
                              kiln_buf_t *out) {
  kiln_vmfb_write_options_t defaults = {0};
  if (!options) options = &defaults;
  if (!module_name || !*module_name) module_name = "module";
  KILN_RETURN_IF_ERROR(check_agreement(module_name, plan, exe));

  kiln_buf_t exe_bytes;
  kiln_buf_init(&exe_bytes);
  /* A module that dispatches nothing carries no executable (hostprog.c). */
  kiln_status_t st = exe->n_kernels == 0
                         ? NULL
                         : kiln_vmfb_executable_serialize(exe, !options->no_executable_header, &exe_bytes);
  const char **kernel_names = kiln_calloc(exe->n_kernels ? exe->n_kernels : 1, sizeof *kernel_names);
  for (size_t i = 0; i < exe->n_kernels; i++) kernel_names[i] = exe->kernels[i].name;
  kiln_vmfb_vm_module_t m;
  memset(&m, 0, sizeof m);
  if (!st) {
    kiln_vmfb_host_executable_t hx = {.format = executable_format_name(exe),
                                      .data = (const uint8_t *)exe_bytes.data,
                                      .len = exe_bytes.len,
                                      .kernels = kernel_names,
                                      .n_kernels = exe->n_kernels};
    kiln_vmfb_host_options_t ho = {.module_name = module_name, .hal_version = options->hal_version};
    st = kiln_vmfb_host_program_build(plan, &hx, &ho, &m);
  }
  kiln_free(kernel_names);
  kiln_buf_deinit(&exe_bytes);
  if (st) return st;
  if (options->bytecode_version) m.bytecode_version = options->bytecode_version;
  if (!m.bytecode_version) m.bytecode_version = BYTECODE_VERSION_17_0;

  /* Provenance, and the embedded source when asked for. */
  const kiln_vmfb_provenance_t *p = options->provenance;
  if (p && p->source_sha256)
    kiln_vmfb_attrs_add(&m.attrs, &m.n_attrs, "kiln.source.sha256", p->source_sha256);
  if (p && p->target) kiln_vmfb_attrs_add(&m.attrs, &m.n_attrs, "kiln.target", p->target);
  if (p && p->flags) kiln_vmfb_attrs_add(&m.attrs, &m.n_attrs, "kiln.flags", p->flags);
  if (p && p->compiler) kiln_vmfb_attrs_add(&m.attrs, &m.n_attrs, "kiln.compiler", p->compiler);
  if (p && p->created) kiln_vmfb_attrs_add(&m.attrs, &m.n_attrs, "kiln.created", p->created);
  kiln_vmfb_archive_file_t extra = {0};
  void *compressed = NULL;
  if (options->source && options->flat) {
    st = KILN_STATUS(KILN_STATUS_INVALID_ARGUMENT,
                     "%s: the flat layout has no place for an embedded source; use the zip layout",
                     module_name);
  }
  if (!st && options->source) {
    size_t cap = ZSTD_compressBound(options->source_len);
    compressed = kiln_malloc(cap);
    size_t n = ZSTD_compress(compressed, cap, options->source, options->source_len, 19);
    if (ZSTD_isError(n)) {
      st = KILN_STATUS(KILN_STATUS_INTERNAL, "compressing the embedded source: %s", ZSTD_getErrorName(n));
    } else {
      extra =
          (kiln_vmfb_archive_file_t){.name = SOURCE_ENTRY, .data = compressed, .size = n, .alignment = 64};
      char bytes[32];
      snprintf(bytes, sizeof bytes, "%zu", options->source_len);
      kiln_vmfb_attrs_add(&m.attrs, &m.n_attrs, "kiln.source.entry", SOURCE_ENTRY);
      kiln_vmfb_attrs_add(&m.attrs, &m.n_attrs, "kiln.source.bytes", bytes);
    }
  }

  /* External segments in rodata order. */
  size_t n_ext = 0;
  for (size_t i = 0; i < m.n_rodata; i++) n_ext += m.rodata[i].external;
  kiln_vmfb_archive_file_t *segments = kiln_calloc(n_ext ? n_ext : 1, sizeof *segments);
  uint64_t *offsets = kiln_calloc(n_ext ? n_ext : 1, sizeof *offsets);
  for (size_t i = 0, j = 0; i < m.n_rodata; i++) {
    if (!m.rodata[i].external) continue;
    segments[j++] = (kiln_vmfb_archive_file_t){.name = m.rodata[i].name,
                                               .data = m.rodata[i].data,
                                               .size = m.rodata[i].len,
                                               .alignment = m.rodata[i].alignment};
  }
  kiln_buf_t fb;
  kiln_buf_init(&fb);
  if (!st) st = serialize_module(&m, !options->no_dependencies, offsets, &fb);
  kiln_vmfb_archive_contents_t contents = {
      .layout = options->flat ? KILN_VMFB_ARCHIVE_LAYOUT_FLAT : KILN_VMFB_ARCHIVE_LAYOUT_ZIP,
      .flatbuffer = fb.data,
      .flatbuffer_size = fb.len,
      .segments = segments,
      .segment_count = n_ext,
      .extras = extra.name ? &extra : NULL,
      .extra_count = extra.name ? 1 : 0,
  };
  kiln_vmfb_archive_plan_t aplan;
  if (!st) st = kiln_vmfb_archive_plan(&contents, &aplan, offsets);
  if (!st) {
    size_t measured = fb.len;
    kiln_buf_clear(&fb);
    st = serialize_module(&m, !options->no_dependencies, offsets, &fb);
    if (!st && fb.len != measured) {
      st = KILN_STATUS(KILN_STATUS_INTERNAL,
                       "%s: the module FlatBuffer changed size (%zu -> %zu bytes) when its rodata "
                       "offsets were filled in",
                       module_name, measured, fb.len);
    }
    contents.flatbuffer = fb.data;
  }
  /* archive_write replaces its buffer's contents; the caller's are kept (appended). */
  kiln_buf_t file;
  kiln_buf_init(&file);
  if (!st) st = kiln_vmfb_archive_write(&contents, offsets, &file);
  if (!st) kiln_buf_append(out, file.data, file.len);
  kiln_buf_deinit(&file);
  kiln_buf_deinit(&fb);
  kiln_free(segments);
  kiln_free(offsets);
  kiln_free(compressed);
  kiln_vmfb_vm_module_deinit(&m);
  return st;
}
