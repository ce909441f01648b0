/* IREE's FlatBuffer schemas as static descriptor tables (see schema.h for the
 * IREE commit and files they follow).
 *
 * Invariants, which test_schema checks: every table passes
 * kiln_vmfb_flatbuf_desc_check (one entry per slot, in slot order), each slot
 * number equals the one its enum in schema.h names, and each field's kind, width,
 * default and required flag match the .fbs declaration. Enum-typed fields take the
 * enum's underlying type (FeatureBits: u32; BindingBits: u64; DispatchAbi: u8).
 * A union X contributes two entries, "X_type" and "X", as flatc and flatcc name
 * them. Table names are the .fbs names; HAL tables carry their namespace's last
 * component ("cuda.ExportDef"), because several namespaces reuse the same names.
 */
#include "compiler/vmfb/schema.h"

#include <stddef.h>

#define COUNT(a) ((uint16_t)(sizeof(a) / sizeof((a)[0])))

#define SCALAR(n, s, k) \
  { .name = (n), .slot = (s), .kind = KILN_FLATBUF_##k }
#define SCALAR_DEFAULT(n, s, k, d) \
  { .name = (n), .slot = (s), .kind = KILN_FLATBUF_##k, .default_int = (d) }
#define STRING(n, s) \
  { .name = (n), .slot = (s), .kind = KILN_FLATBUF_STRING }
#define STRING_REQUIRED(n, s) \
  { .name = (n), .slot = (s), .kind = KILN_FLATBUF_STRING, .required = true }
#define TABLE(n, s, t) \
  { .name = (n), .slot = (s), .kind = KILN_FLATBUF_TABLE, .table = &(t) }
#define STRUCT(n, s, size, align) \
  { .name = (n), .slot = (s), .kind = KILN_FLATBUF_STRUCT, .struct_size = (size), .struct_align = (align) }
#define VECTOR(n, s, k) \
  { .name = (n), .slot = (s), .kind = KILN_FLATBUF_VECTOR, .elem_kind = KILN_FLATBUF_##k }
#define VECTOR_STRUCT(n, s, size, align)                                                 \
  {                                                                                      \
    .name = (n), .slot = (s), .kind = KILN_FLATBUF_VECTOR_STRUCT, .struct_size = (size), \
    .struct_align = (align)                                                              \
  }
#define VECTOR_TABLE(n, s, t) \
  { .name = (n), .slot = (s), .kind = KILN_FLATBUF_VECTOR_TABLE, .table = &(t) }
/* A union takes two slots: its type at s, its value at s + 1. */
#define UNION(n, s, u)                                                                     \
  {.name = n "_type", .slot = (s), .kind = KILN_FLATBUF_UNION_TYPE, .union_desc = &(u)}, { \
    .name = (n), .slot = (s) + 1, .kind = KILN_FLATBUF_UNION, .union_desc = &(u)           \
  }
#define VECTOR_UNION(n, s, u)                                                                     \
  {.name = n "_type", .slot = (s), .kind = KILN_FLATBUF_VECTOR_UNION_TYPE, .union_desc = &(u)}, { \
    .name = (n), .slot = (s) + 1, .kind = KILN_FLATBUF_VECTOR_UNION, .union_desc = &(u)           \
  }

#define TABLE_DESC(var, name_, fields_)        \
  const kiln_vmfb_flatbuf_table_desc_t var = { \
      .name = (name_), .fields = (fields_), .field_count = COUNT(fields_)}

/* ======================= iree.vm ======================= */

static const kiln_vmfb_flatbuf_field_desc_t vm_attr_fields[] = {
    STRING("key", KILN_VM_ATTR_KEY),
    STRING("value", KILN_VM_ATTR_VALUE),
};
TABLE_DESC(kiln_vmfb_schema_vm_attr_def, "AttrDef", vm_attr_fields);

static const kiln_vmfb_flatbuf_field_desc_t vm_type_fields[] = {
    STRING("full_name", KILN_VM_TYPE_FULL_NAME),
};
TABLE_DESC(kiln_vmfb_schema_vm_type_def, "TypeDef", vm_type_fields);

static const kiln_vmfb_flatbuf_field_desc_t vm_signature_fields[] = {
    STRING("calling_convention", KILN_VM_SIGNATURE_CALLING_CONVENTION),
    VECTOR_TABLE("attrs", KILN_VM_SIGNATURE_ATTRS, kiln_vmfb_schema_vm_attr_def),
};
TABLE_DESC(kiln_vmfb_schema_vm_function_signature_def, "FunctionSignatureDef", vm_signature_fields);

static const kiln_vmfb_flatbuf_field_desc_t vm_dependency_fields[] = {
    STRING("name", KILN_VM_DEPENDENCY_NAME),
    SCALAR("minimum_version", KILN_VM_DEPENDENCY_MINIMUM_VERSION, U32),
    SCALAR_DEFAULT("flags", KILN_VM_DEPENDENCY_FLAGS, U32, KILN_VM_DEPENDENCY_FLAG_REQUIRED),
};
TABLE_DESC(kiln_vmfb_schema_vm_module_dependency_def, "ModuleDependencyDef", vm_dependency_fields);

static const kiln_vmfb_flatbuf_field_desc_t vm_import_fields[] = {
    STRING("full_name", KILN_VM_IMPORT_FULL_NAME),
    TABLE("signature", KILN_VM_IMPORT_SIGNATURE, kiln_vmfb_schema_vm_function_signature_def),
    SCALAR_DEFAULT("flags", KILN_VM_IMPORT_FLAGS, U32, KILN_VM_IMPORT_FLAG_REQUIRED),
};
TABLE_DESC(kiln_vmfb_schema_vm_import_function_def, "ImportFunctionDef", vm_import_fields);

static const kiln_vmfb_flatbuf_field_desc_t vm_export_fields[] = {
    STRING("local_name", KILN_VM_EXPORT_LOCAL_NAME),
    SCALAR("internal_ordinal", KILN_VM_EXPORT_INTERNAL_ORDINAL, I32),
};
TABLE_DESC(kiln_vmfb_schema_vm_export_function_def, "ExportFunctionDef", vm_export_fields);

const kiln_vmfb_flatbuf_table_desc_t kiln_vmfb_schema_vm_uncompressed_data_def = {
    .name = "UncompressedDataDef", .fields = NULL, .field_count = 0};

static const kiln_vmfb_flatbuf_table_desc_t *const vm_compression_members[] = {
    &kiln_vmfb_schema_vm_uncompressed_data_def, /* 1 */
};
const kiln_vmfb_flatbuf_union_desc_t kiln_vmfb_schema_vm_compression_type_def = {
    .name = "CompressionTypeDef",
    .members = vm_compression_members,
    .member_count = COUNT(vm_compression_members),
};

static const kiln_vmfb_flatbuf_field_desc_t vm_rodata_fields[] = {
    UNION("compression_type", KILN_VM_RODATA_COMPRESSION_TYPE_TYPE, kiln_vmfb_schema_vm_compression_type_def),
    VECTOR("embedded_data", KILN_VM_RODATA_EMBEDDED_DATA, U8),
    SCALAR("external_data_offset", KILN_VM_RODATA_EXTERNAL_DATA_OFFSET, U64),
    SCALAR("external_data_length", KILN_VM_RODATA_EXTERNAL_DATA_LENGTH, U64),
};
TABLE_DESC(kiln_vmfb_schema_vm_rodata_segment_def, "RodataSegmentDef", vm_rodata_fields);

static const kiln_vmfb_flatbuf_field_desc_t vm_rwdata_fields[] = {
    SCALAR("byte_size", KILN_VM_RWDATA_BYTE_SIZE, I32),
};
TABLE_DESC(kiln_vmfb_schema_vm_rwdata_segment_def, "RwdataSegmentDef", vm_rwdata_fields);

static const kiln_vmfb_flatbuf_field_desc_t vm_state_fields[] = {
    SCALAR("global_bytes_capacity", KILN_VM_STATE_GLOBAL_BYTES_CAPACITY, I32),
    SCALAR("global_ref_count", KILN_VM_STATE_GLOBAL_REF_COUNT, I32),
};
TABLE_DESC(kiln_vmfb_schema_vm_module_state_def, "ModuleStateDef", vm_state_fields);

static const kiln_vmfb_flatbuf_field_desc_t vm_call_site_fields[] = {
    SCALAR("callee", KILN_VM_CALL_SITE_LOC_CALLEE, I32),
    SCALAR("caller", KILN_VM_CALL_SITE_LOC_CALLER, I32),
};
TABLE_DESC(kiln_vmfb_schema_vm_call_site_loc_def, "CallSiteLocDef", vm_call_site_fields);

static const kiln_vmfb_flatbuf_field_desc_t vm_file_line_col_fields[] = {
    STRING("filename", KILN_VM_FILE_LINE_COL_LOC_FILENAME),
    SCALAR("line", KILN_VM_FILE_LINE_COL_LOC_LINE, I32),
    SCALAR("column", KILN_VM_FILE_LINE_COL_LOC_COLUMN, I32),
};
TABLE_DESC(kiln_vmfb_schema_vm_file_line_col_loc_def, "FileLineColLocDef", vm_file_line_col_fields);

static const kiln_vmfb_flatbuf_field_desc_t vm_fused_fields[] = {
    STRING("metadata", KILN_VM_FUSED_LOC_METADATA),
    VECTOR("locations", KILN_VM_FUSED_LOC_LOCATIONS, I32),
};
TABLE_DESC(kiln_vmfb_schema_vm_fused_loc_def, "FusedLocDef", vm_fused_fields);

static const kiln_vmfb_flatbuf_field_desc_t vm_name_loc_fields[] = {
    STRING("name", KILN_VM_NAME_LOC_NAME),
    SCALAR("child_location", KILN_VM_NAME_LOC_CHILD_LOCATION, I32),
};
TABLE_DESC(kiln_vmfb_schema_vm_name_loc_def, "NameLocDef", vm_name_loc_fields);

static const kiln_vmfb_flatbuf_table_desc_t *const vm_location_members[] = {
    &kiln_vmfb_schema_vm_call_site_loc_def,     /* 1 */
    &kiln_vmfb_schema_vm_file_line_col_loc_def, /* 2 */
    &kiln_vmfb_schema_vm_fused_loc_def,         /* 3 */
    &kiln_vmfb_schema_vm_name_loc_def,          /* 4 */
};
const kiln_vmfb_flatbuf_union_desc_t kiln_vmfb_schema_vm_location_type_def = {
    .name = "LocationTypeDef",
    .members = vm_location_members,
    .member_count = COUNT(vm_location_members),
};

static const kiln_vmfb_flatbuf_field_desc_t vm_source_map_fields[] = {
    STRING("local_name", KILN_VM_SOURCE_MAP_LOCAL_NAME),
    VECTOR_STRUCT("locations", KILN_VM_SOURCE_MAP_LOCATIONS, KILN_VM_BYTECODE_LOCATION_SIZEOF,
                  KILN_VM_BYTECODE_LOCATION_ALIGNOF),
};
TABLE_DESC(kiln_vmfb_schema_vm_function_source_map_def, "FunctionSourceMapDef", vm_source_map_fields);

static const kiln_vmfb_flatbuf_field_desc_t vm_debug_fields[] = {
    VECTOR_UNION("location_table", KILN_VM_DEBUG_LOCATION_TABLE_TYPE, kiln_vmfb_schema_vm_location_type_def),
    VECTOR_TABLE("functions", KILN_VM_DEBUG_FUNCTIONS, kiln_vmfb_schema_vm_function_source_map_def),
};
TABLE_DESC(kiln_vmfb_schema_vm_debug_database_def, "DebugDatabaseDef", vm_debug_fields);

static const kiln_vmfb_flatbuf_field_desc_t vm_module_fields[] = {
    STRING_REQUIRED("name", KILN_VM_MODULE_NAME),
    SCALAR("version", KILN_VM_MODULE_VERSION, U32),
    SCALAR("requirements", KILN_VM_MODULE_REQUIREMENTS, U32),
    VECTOR_TABLE("attrs", KILN_VM_MODULE_ATTRS, kiln_vmfb_schema_vm_attr_def),
    VECTOR_TABLE("types", KILN_VM_MODULE_TYPES, kiln_vmfb_schema_vm_type_def),
    VECTOR_TABLE("dependencies", KILN_VM_MODULE_DEPENDENCIES, kiln_vmfb_schema_vm_module_dependency_def),
    VECTOR_TABLE("imported_functions", KILN_VM_MODULE_IMPORTED_FUNCTIONS,
                 kiln_vmfb_schema_vm_import_function_def),
    VECTOR_TABLE("exported_functions", KILN_VM_MODULE_EXPORTED_FUNCTIONS,
                 kiln_vmfb_schema_vm_export_function_def),
    VECTOR_TABLE("function_signatures", KILN_VM_MODULE_FUNCTION_SIGNATURES,
                 kiln_vmfb_schema_vm_function_signature_def),
    VECTOR_TABLE("rodata_segments", KILN_VM_MODULE_RODATA_SEGMENTS, kiln_vmfb_schema_vm_rodata_segment_def),
    VECTOR_TABLE("rwdata_segments", KILN_VM_MODULE_RWDATA_SEGMENTS, kiln_vmfb_schema_vm_rwdata_segment_def),
    TABLE("module_state", KILN_VM_MODULE_MODULE_STATE, kiln_vmfb_schema_vm_module_state_def),
    VECTOR_STRUCT("function_descriptors", KILN_VM_MODULE_FUNCTION_DESCRIPTORS,
                  KILN_VM_FUNCTION_DESCRIPTOR_SIZEOF, KILN_VM_FUNCTION_DESCRIPTOR_ALIGNOF),
    SCALAR("bytecode_version", KILN_VM_MODULE_BYTECODE_VERSION, U32),
    VECTOR("bytecode_data", KILN_VM_MODULE_BYTECODE_DATA, U8),
    TABLE("debug_database", KILN_VM_MODULE_DEBUG_DATABASE, kiln_vmfb_schema_vm_debug_database_def),
};
TABLE_DESC(kiln_vmfb_schema_vm_bytecode_module_def, "BytecodeModuleDef", vm_module_fields);

/* ======================= iree.hal.debug ======================= */

static const kiln_vmfb_flatbuf_field_desc_t debug_file_line_fields[] = {
    STRING("filename", KILN_HAL_DEBUG_FILE_LINE_LOC_FILENAME),
    SCALAR("line", KILN_HAL_DEBUG_FILE_LINE_LOC_LINE, I32),
};
TABLE_DESC(kiln_vmfb_schema_hal_debug_file_line_loc_def, "debug.FileLineLocDef", debug_file_line_fields);

static const kiln_vmfb_flatbuf_field_desc_t debug_stage_fields[] = {
    STRING("stage", KILN_HAL_DEBUG_STAGE_LOCATION_STAGE),
    TABLE("location", KILN_HAL_DEBUG_STAGE_LOCATION_LOCATION, kiln_vmfb_schema_hal_debug_file_line_loc_def),
};
TABLE_DESC(kiln_vmfb_schema_hal_debug_stage_location_def, "debug.StageLocationDef", debug_stage_fields);

static const kiln_vmfb_flatbuf_field_desc_t debug_export_fields[] = {
    STRING("name", KILN_HAL_DEBUG_EXPORT_NAME),
    TABLE("location", KILN_HAL_DEBUG_EXPORT_LOCATION, kiln_vmfb_schema_hal_debug_file_line_loc_def),
    VECTOR_TABLE("stage_locations", KILN_HAL_DEBUG_EXPORT_STAGE_LOCATIONS,
                 kiln_vmfb_schema_hal_debug_stage_location_def),
};
TABLE_DESC(kiln_vmfb_schema_hal_debug_export_def, "debug.ExportDef", debug_export_fields);

static const kiln_vmfb_flatbuf_field_desc_t debug_source_file_fields[] = {
    STRING("path", KILN_HAL_DEBUG_SOURCE_FILE_PATH),
    VECTOR("content", KILN_HAL_DEBUG_SOURCE_FILE_CONTENT, U8),
};
TABLE_DESC(kiln_vmfb_schema_hal_debug_source_file_def, "debug.SourceFileDef", debug_source_file_fields);

/* ======================= iree.hal.cuda ======================= */

static const kiln_vmfb_flatbuf_field_desc_t cuda_export_fields[] = {
    SCALAR("module_ordinal", KILN_CUDA_EXPORT_MODULE_ORDINAL, U32),
    STRING("kernel_name", KILN_CUDA_EXPORT_KERNEL_NAME),
    STRUCT("block_dims", KILN_CUDA_EXPORT_BLOCK_DIMS, KILN_GPU_BLOCK_DIMS_SIZEOF,
           KILN_GPU_BLOCK_DIMS_ALIGNOF),
    SCALAR("block_shared_memory_size", KILN_CUDA_EXPORT_BLOCK_SHARED_MEMORY_SIZE, U32),
    SCALAR("constant_count", KILN_CUDA_EXPORT_CONSTANT_COUNT, U32),
    VECTOR("binding_flags", KILN_CUDA_EXPORT_BINDING_FLAGS, U64),
    TABLE("debug_info", KILN_CUDA_EXPORT_DEBUG_INFO, kiln_vmfb_schema_hal_debug_export_def),
};
TABLE_DESC(kiln_vmfb_schema_cuda_export_def, "cuda.ExportDef", cuda_export_fields);

static const kiln_vmfb_flatbuf_field_desc_t cuda_module_fields[] = {
    STRING("ptx_image", KILN_CUDA_MODULE_PTX_IMAGE),
};
TABLE_DESC(kiln_vmfb_schema_cuda_module_def, "cuda.ModuleDef", cuda_module_fields);

static const kiln_vmfb_flatbuf_field_desc_t cuda_executable_fields[] = {
    VECTOR_TABLE("exports", KILN_CUDA_EXECUTABLE_EXPORTS, kiln_vmfb_schema_cuda_export_def),
    VECTOR_TABLE("modules", KILN_CUDA_EXECUTABLE_MODULES, kiln_vmfb_schema_cuda_module_def),
    VECTOR_TABLE("source_files", KILN_CUDA_EXECUTABLE_SOURCE_FILES,
                 kiln_vmfb_schema_hal_debug_source_file_def),
};
TABLE_DESC(kiln_vmfb_schema_cuda_executable_def, "cuda.ExecutableDef", cuda_executable_fields);

/* ======================= iree.hal.hip ======================= */

static const kiln_vmfb_flatbuf_field_desc_t hip_export_fields[] = {
    SCALAR("module_ordinal", KILN_HIP_EXPORT_MODULE_ORDINAL, U32),
    STRING("kernel_name", KILN_HIP_EXPORT_KERNEL_NAME),
    STRUCT("block_dims", KILN_HIP_EXPORT_BLOCK_DIMS, KILN_GPU_BLOCK_DIMS_SIZEOF, KILN_GPU_BLOCK_DIMS_ALIGNOF),
    SCALAR("block_shared_memory_size", KILN_HIP_EXPORT_BLOCK_SHARED_MEMORY_SIZE, U32),
    SCALAR("constant_count", KILN_HIP_EXPORT_CONSTANT_COUNT, U32),
    VECTOR("binding_flags", KILN_HIP_EXPORT_BINDING_FLAGS, U64),
    TABLE("debug_info", KILN_HIP_EXPORT_DEBUG_INFO, kiln_vmfb_schema_hal_debug_export_def),
};
TABLE_DESC(kiln_vmfb_schema_hip_export_def, "hip.ExportDef", hip_export_fields);

static const kiln_vmfb_flatbuf_field_desc_t hip_module_fields[] = {
    STRING("hsaco_image", KILN_HIP_MODULE_HSACO_IMAGE),
};
TABLE_DESC(kiln_vmfb_schema_hip_module_def, "hip.ModuleDef", hip_module_fields);

static const kiln_vmfb_flatbuf_field_desc_t hip_executable_fields[] = {
    VECTOR_TABLE("exports", KILN_HIP_EXECUTABLE_EXPORTS, kiln_vmfb_schema_hip_export_def),
    VECTOR_TABLE("modules", KILN_HIP_EXECUTABLE_MODULES, kiln_vmfb_schema_hip_module_def),
    VECTOR_TABLE("source_files", KILN_HIP_EXECUTABLE_SOURCE_FILES,
                 kiln_vmfb_schema_hal_debug_source_file_def),
};
TABLE_DESC(kiln_vmfb_schema_hip_executable_def, "hip.ExecutableDef", hip_executable_fields);

/* ======================= iree.hal.vulkan ======================= */

static const kiln_vmfb_flatbuf_field_desc_t vk_binding_fields[] = {
    SCALAR("binding", KILN_VK_DESCRIPTOR_SET_LAYOUT_BINDING_BINDING, U32),
    SCALAR("descriptor_type", KILN_VK_DESCRIPTOR_SET_LAYOUT_BINDING_DESCRIPTOR_TYPE, U32),
    SCALAR("descriptor_count", KILN_VK_DESCRIPTOR_SET_LAYOUT_BINDING_DESCRIPTOR_COUNT, U32),
    SCALAR("stage_flags", KILN_VK_DESCRIPTOR_SET_LAYOUT_BINDING_STAGE_FLAGS, U32),
};
TABLE_DESC(kiln_vmfb_schema_vk_descriptor_set_layout_binding_def, "vulkan.DescriptorSetLayoutBindingDef",
           vk_binding_fields);

static const kiln_vmfb_flatbuf_field_desc_t vk_set_layout_fields[] = {
    VECTOR_TABLE("bindings", KILN_VK_DESCRIPTOR_SET_LAYOUT_BINDINGS,
                 kiln_vmfb_schema_vk_descriptor_set_layout_binding_def),
};
TABLE_DESC(kiln_vmfb_schema_vk_descriptor_set_layout_def, "vulkan.DescriptorSetLayoutDef",
           vk_set_layout_fields);

static const kiln_vmfb_flatbuf_field_desc_t vk_pipeline_layout_fields[] = {
    VECTOR("descriptor_set_layout_ordinals", KILN_VK_PIPELINE_LAYOUT_DESCRIPTOR_SET_LAYOUT_ORDINALS, U32),
    VECTOR_STRUCT("push_constant_ranges", KILN_VK_PIPELINE_LAYOUT_PUSH_CONSTANT_RANGES,
                  KILN_VK_PUSH_CONSTANT_RANGE_SIZEOF, KILN_VK_PUSH_CONSTANT_RANGE_ALIGNOF),
};
TABLE_DESC(kiln_vmfb_schema_vk_pipeline_layout_def, "vulkan.PipelineLayoutDef", vk_pipeline_layout_fields);

static const kiln_vmfb_flatbuf_field_desc_t vk_bda_binding_fields[] = {
    SCALAR_DEFAULT("minimum_alignment", KILN_VK_BDA_BINDING_MINIMUM_ALIGNMENT, U32, 1),
    SCALAR("minimum_length", KILN_VK_BDA_BINDING_MINIMUM_LENGTH, U64),
};
TABLE_DESC(kiln_vmfb_schema_vk_bda_binding_def, "vulkan.BdaBindingDef", vk_bda_binding_fields);

static const kiln_vmfb_flatbuf_field_desc_t vk_bda_layout_fields[] = {
    SCALAR_DEFAULT("abi_version", KILN_VK_BDA_LAYOUT_ABI_VERSION, U32, 1),
    SCALAR("root_push_constant_offset", KILN_VK_BDA_LAYOUT_ROOT_PUSH_CONSTANT_OFFSET, U32),
    SCALAR_DEFAULT("root_push_constant_length", KILN_VK_BDA_LAYOUT_ROOT_PUSH_CONSTANT_LENGTH, U32, 32),
    SCALAR_DEFAULT("constant_push_constant_offset", KILN_VK_BDA_LAYOUT_CONSTANT_PUSH_CONSTANT_OFFSET, U32,
                   32),
    SCALAR("constant_count", KILN_VK_BDA_LAYOUT_CONSTANT_COUNT, U32),
    SCALAR("binding_table_entry_type", KILN_VK_BDA_LAYOUT_BINDING_TABLE_ENTRY_TYPE, U8),
    SCALAR("binding_count", KILN_VK_BDA_LAYOUT_BINDING_COUNT, U32),
    VECTOR_TABLE("bindings", KILN_VK_BDA_LAYOUT_BINDINGS, kiln_vmfb_schema_vk_bda_binding_def),
};
TABLE_DESC(kiln_vmfb_schema_vk_bda_dispatch_layout_def, "vulkan.BdaDispatchLayoutDef", vk_bda_layout_fields);

static const kiln_vmfb_flatbuf_field_desc_t vk_shader_module_fields[] = {
    VECTOR("spirv_code", KILN_VK_SHADER_MODULE_SPIRV_CODE, U32),
};
TABLE_DESC(kiln_vmfb_schema_vk_shader_module_def, "vulkan.ShaderModuleDef", vk_shader_module_fields);

static const kiln_vmfb_flatbuf_field_desc_t vk_pipeline_fields[] = {
    SCALAR("shader_module_ordinal", KILN_VK_PIPELINE_SHADER_MODULE_ORDINAL, U32),
    STRING("entry_point", KILN_VK_PIPELINE_ENTRY_POINT),
    SCALAR("pipeline_layout_ordinal", KILN_VK_PIPELINE_PIPELINE_LAYOUT_ORDINAL, U32),
    SCALAR("subgroup_size", KILN_VK_PIPELINE_SUBGROUP_SIZE, U32),
    TABLE("debug_info", KILN_VK_PIPELINE_DEBUG_INFO, kiln_vmfb_schema_hal_debug_export_def),
    SCALAR("dispatch_abi", KILN_VK_PIPELINE_DISPATCH_ABI, U8),
    TABLE("bda_dispatch_layout", KILN_VK_PIPELINE_BDA_DISPATCH_LAYOUT,
          kiln_vmfb_schema_vk_bda_dispatch_layout_def),
};
TABLE_DESC(kiln_vmfb_schema_vk_pipeline_def, "vulkan.PipelineDef", vk_pipeline_fields);

static const kiln_vmfb_flatbuf_field_desc_t vk_executable_fields[] = {
    VECTOR_TABLE("pipelines", KILN_VK_EXECUTABLE_PIPELINES, kiln_vmfb_schema_vk_pipeline_def),
    VECTOR_TABLE("descriptor_set_layouts", KILN_VK_EXECUTABLE_DESCRIPTOR_SET_LAYOUTS,
                 kiln_vmfb_schema_vk_descriptor_set_layout_def),
    VECTOR_TABLE("pipeline_layouts", KILN_VK_EXECUTABLE_PIPELINE_LAYOUTS,
                 kiln_vmfb_schema_vk_pipeline_layout_def),
    VECTOR_TABLE("shader_modules", KILN_VK_EXECUTABLE_SHADER_MODULES, kiln_vmfb_schema_vk_shader_module_def),
    VECTOR_TABLE("source_files", KILN_VK_EXECUTABLE_SOURCE_FILES, kiln_vmfb_schema_hal_debug_source_file_def),
};
TABLE_DESC(kiln_vmfb_schema_vk_executable_def, "vulkan.ExecutableDef", vk_executable_fields);
