/* IREE's FlatBuffer schemas as kiln_vmfb_flatbuf descriptors.
 *
 * Source of truth: iree-org/iree at commit b48a5955575cf8924ffc191f3b0804976e5738b9
 * (2026-08-21), files
 *   runtime/src/iree/schemas/bytecode_module_def.fbs    (iree.vm, "IREE")
 *   runtime/src/iree/schemas/executable_debug_info.fbs  (iree.hal.debug)
 *   runtime/src/iree/schemas/cuda_executable_def.fbs    (iree.hal.cuda, "CDA1")
 *   runtime/src/iree/schemas/hip_executable_def.fbs     (iree.hal.hip, "HIP1")
 *   runtime/src/iree/schemas/vulkan_executable_def.fbs  (iree.hal.vulkan, "VKE1")
 * Slots follow declaration order; a union (or vector of unions) takes two slots,
 * "<name>_type" then "<name>". None of these tables has a deprecated field at that
 * commit. When IREE changes a schema, change the enum, the descriptor in schema.c and
 * the commit above together; test_schema pins every slot.
 *
 * The descriptors are immutable static data: Thread-safe.
 */
#ifndef KILN_COMPILER_VMFB_SCHEMA_H_
#define KILN_COMPILER_VMFB_SCHEMA_H_

#include "compiler/vmfb/flatbuf.h"

#define KILN_VMFB_SCHEMA_IREE_COMMIT "b48a5955575cf8924ffc191f3b0804976e5738b9"

/* File identifiers. */
#define KILN_VM_FILE_IDENTIFIER   "IREE"
#define KILN_CUDA_FILE_IDENTIFIER "CDA1"
#define KILN_HIP_FILE_IDENTIFIER  "HIP1"
#define KILN_VK_FILE_IDENTIFIER   "VKE1"

/* ======================= iree.vm (bytecode_module_def.fbs) ======================= */

/* FeatureBits (uint32 bit_flags): values, not bit numbers. */
enum {
  KILN_VM_FEATURE_EXT_F32 = 1u << 0,
  KILN_VM_FEATURE_EXT_F64 = 1u << 1,
  KILN_VM_FEATURE_YIELD = 1u << 2,
  KILN_VM_FEATURE_UNWIND = 1u << 3,
};

/* ModuleDependencyFlagBits and ImportFlagBits (uint32 bit_flags). REQUIRED is 1,
 * not 0, and it is the fields' default; the runtime tests `flags & OPTIONAL`. */
enum {
  KILN_VM_DEPENDENCY_FLAG_REQUIRED = 1u << 0,
  KILN_VM_DEPENDENCY_FLAG_OPTIONAL = 1u << 1,
  KILN_VM_IMPORT_FLAG_REQUIRED = 1u << 0,
  KILN_VM_IMPORT_FLAG_OPTIONAL = 1u << 1,
};

/* AttrDef */
enum { KILN_VM_ATTR_KEY = 0, KILN_VM_ATTR_VALUE = 1 };
/* TypeDef */
enum { KILN_VM_TYPE_FULL_NAME = 0 };
/* FunctionSignatureDef */
enum { KILN_VM_SIGNATURE_CALLING_CONVENTION = 0, KILN_VM_SIGNATURE_ATTRS = 1 };
/* ModuleDependencyDef */
enum {
  KILN_VM_DEPENDENCY_NAME = 0,
  KILN_VM_DEPENDENCY_MINIMUM_VERSION = 1,
  KILN_VM_DEPENDENCY_FLAGS = 2, /* default KILN_VM_DEPENDENCY_FLAG_REQUIRED (1) */
};
/* ImportFunctionDef */
enum {
  KILN_VM_IMPORT_FULL_NAME = 0,
  KILN_VM_IMPORT_SIGNATURE = 1,
  KILN_VM_IMPORT_FLAGS = 2, /* default KILN_VM_IMPORT_FLAG_REQUIRED (1) */
};
/* ExportFunctionDef */
enum { KILN_VM_EXPORT_LOCAL_NAME = 0, KILN_VM_EXPORT_INTERNAL_ORDINAL = 1 };
/* UncompressedDataDef: no fields. CompressionTypeDef union member codes: */
enum { KILN_VM_COMPRESSION_NONE = 0, KILN_VM_COMPRESSION_UNCOMPRESSED = 1 };
/* RodataSegmentDef: the compression union takes slots 0 and 1. */
enum {
  KILN_VM_RODATA_COMPRESSION_TYPE_TYPE = 0,
  KILN_VM_RODATA_COMPRESSION_TYPE = 1,
  KILN_VM_RODATA_EMBEDDED_DATA = 2,
  KILN_VM_RODATA_EXTERNAL_DATA_OFFSET = 3,
  KILN_VM_RODATA_EXTERNAL_DATA_LENGTH = 4,
};
/* RwdataSegmentDef */
enum { KILN_VM_RWDATA_BYTE_SIZE = 0 };
/* ModuleStateDef */
enum { KILN_VM_STATE_GLOBAL_BYTES_CAPACITY = 0, KILN_VM_STATE_GLOBAL_REF_COUNT = 1 };

/* struct FunctionDescriptor: 20 bytes, 4-aligned; then each member's byte offset. */
enum {
  KILN_VM_FUNCTION_DESCRIPTOR_SIZEOF = 20,
  KILN_VM_FUNCTION_DESCRIPTOR_ALIGNOF = 4,
  KILN_VM_FUNCTION_DESCRIPTOR_BYTECODE_OFFSET = 0,     /* i32 */
  KILN_VM_FUNCTION_DESCRIPTOR_BYTECODE_LENGTH = 4,     /* i32 */
  KILN_VM_FUNCTION_DESCRIPTOR_REQUIREMENTS = 8,        /* u32 FeatureBits */
  KILN_VM_FUNCTION_DESCRIPTOR_RESERVED = 12,           /* i16, must be 0 */
  KILN_VM_FUNCTION_DESCRIPTOR_BLOCK_COUNT = 14,        /* i16 */
  KILN_VM_FUNCTION_DESCRIPTOR_I32_REGISTER_COUNT = 16, /* i16 */
  KILN_VM_FUNCTION_DESCRIPTOR_REF_REGISTER_COUNT = 18, /* i16 */
};

/* Debug database. CallSiteLocDef */
enum { KILN_VM_CALL_SITE_LOC_CALLEE = 0, KILN_VM_CALL_SITE_LOC_CALLER = 1 };
/* FileLineColLocDef */
enum {
  KILN_VM_FILE_LINE_COL_LOC_FILENAME = 0,
  KILN_VM_FILE_LINE_COL_LOC_LINE = 1,
  KILN_VM_FILE_LINE_COL_LOC_COLUMN = 2,
};
/* FusedLocDef */
enum { KILN_VM_FUSED_LOC_METADATA = 0, KILN_VM_FUSED_LOC_LOCATIONS = 1 };
/* NameLocDef */
enum { KILN_VM_NAME_LOC_NAME = 0, KILN_VM_NAME_LOC_CHILD_LOCATION = 1 };
/* LocationTypeDef union member codes. */
enum {
  KILN_VM_LOCATION_NONE = 0,
  KILN_VM_LOCATION_CALL_SITE = 1,
  KILN_VM_LOCATION_FILE_LINE_COL = 2,
  KILN_VM_LOCATION_FUSED = 3,
  KILN_VM_LOCATION_NAME = 4,
};
/* struct BytecodeLocationDef: 8 bytes, 4-aligned. */
enum {
  KILN_VM_BYTECODE_LOCATION_SIZEOF = 8,
  KILN_VM_BYTECODE_LOCATION_ALIGNOF = 4,
  KILN_VM_BYTECODE_LOCATION_BYTECODE_OFFSET = 0, /* i32 */
  KILN_VM_BYTECODE_LOCATION_LOCATION = 4,        /* i32 */
};
/* FunctionSourceMapDef */
enum { KILN_VM_SOURCE_MAP_LOCAL_NAME = 0, KILN_VM_SOURCE_MAP_LOCATIONS = 1 };
/* DebugDatabaseDef: location_table is a vector of unions (slots 0 and 1). */
enum {
  KILN_VM_DEBUG_LOCATION_TABLE_TYPE = 0,
  KILN_VM_DEBUG_LOCATION_TABLE = 1,
  KILN_VM_DEBUG_FUNCTIONS = 2,
};

/* BytecodeModuleDef (root) */
enum {
  KILN_VM_MODULE_NAME = 0, /* required */
  KILN_VM_MODULE_VERSION = 1,
  KILN_VM_MODULE_REQUIREMENTS = 2,
  KILN_VM_MODULE_ATTRS = 3,
  KILN_VM_MODULE_TYPES = 4,
  KILN_VM_MODULE_DEPENDENCIES = 5,
  KILN_VM_MODULE_IMPORTED_FUNCTIONS = 6,
  KILN_VM_MODULE_EXPORTED_FUNCTIONS = 7,
  KILN_VM_MODULE_FUNCTION_SIGNATURES = 8,
  KILN_VM_MODULE_RODATA_SEGMENTS = 9,
  KILN_VM_MODULE_RWDATA_SEGMENTS = 10,
  KILN_VM_MODULE_MODULE_STATE = 11,
  KILN_VM_MODULE_FUNCTION_DESCRIPTORS = 12,
  KILN_VM_MODULE_BYTECODE_VERSION = 13,
  KILN_VM_MODULE_BYTECODE_DATA = 14,
  KILN_VM_MODULE_DEBUG_DATABASE = 15,
};

extern const kiln_vmfb_flatbuf_table_desc_t kiln_vmfb_schema_vm_attr_def;
extern const kiln_vmfb_flatbuf_table_desc_t kiln_vmfb_schema_vm_type_def;
extern const kiln_vmfb_flatbuf_table_desc_t kiln_vmfb_schema_vm_function_signature_def;
extern const kiln_vmfb_flatbuf_table_desc_t kiln_vmfb_schema_vm_module_dependency_def;
extern const kiln_vmfb_flatbuf_table_desc_t kiln_vmfb_schema_vm_import_function_def;
extern const kiln_vmfb_flatbuf_table_desc_t kiln_vmfb_schema_vm_export_function_def;
extern const kiln_vmfb_flatbuf_table_desc_t kiln_vmfb_schema_vm_uncompressed_data_def;
extern const kiln_vmfb_flatbuf_union_desc_t kiln_vmfb_schema_vm_compression_type_def;
extern const kiln_vmfb_flatbuf_table_desc_t kiln_vmfb_schema_vm_rodata_segment_def;
extern const kiln_vmfb_flatbuf_table_desc_t kiln_vmfb_schema_vm_rwdata_segment_def;
extern const kiln_vmfb_flatbuf_table_desc_t kiln_vmfb_schema_vm_module_state_def;
extern const kiln_vmfb_flatbuf_table_desc_t kiln_vmfb_schema_vm_call_site_loc_def;
extern const kiln_vmfb_flatbuf_table_desc_t kiln_vmfb_schema_vm_file_line_col_loc_def;
extern const kiln_vmfb_flatbuf_table_desc_t kiln_vmfb_schema_vm_fused_loc_def;
extern const kiln_vmfb_flatbuf_table_desc_t kiln_vmfb_schema_vm_name_loc_def;
extern const kiln_vmfb_flatbuf_union_desc_t kiln_vmfb_schema_vm_location_type_def;
extern const kiln_vmfb_flatbuf_table_desc_t kiln_vmfb_schema_vm_function_source_map_def;
extern const kiln_vmfb_flatbuf_table_desc_t kiln_vmfb_schema_vm_debug_database_def;
extern const kiln_vmfb_flatbuf_table_desc_t kiln_vmfb_schema_vm_bytecode_module_def;

/* ================= iree.hal.debug (executable_debug_info.fbs) ================= */

/* FileLineLocDef */
enum { KILN_HAL_DEBUG_FILE_LINE_LOC_FILENAME = 0, KILN_HAL_DEBUG_FILE_LINE_LOC_LINE = 1 };
/* StageLocationDef */
enum { KILN_HAL_DEBUG_STAGE_LOCATION_STAGE = 0, KILN_HAL_DEBUG_STAGE_LOCATION_LOCATION = 1 };
/* ExportDef (debug info of an export; not the CUDA/HIP ExportDef) */
enum {
  KILN_HAL_DEBUG_EXPORT_NAME = 0,
  KILN_HAL_DEBUG_EXPORT_LOCATION = 1,
  KILN_HAL_DEBUG_EXPORT_STAGE_LOCATIONS = 2,
};
/* SourceFileDef */
enum { KILN_HAL_DEBUG_SOURCE_FILE_PATH = 0, KILN_HAL_DEBUG_SOURCE_FILE_CONTENT = 1 };

extern const kiln_vmfb_flatbuf_table_desc_t kiln_vmfb_schema_hal_debug_file_line_loc_def;
extern const kiln_vmfb_flatbuf_table_desc_t kiln_vmfb_schema_hal_debug_stage_location_def;
extern const kiln_vmfb_flatbuf_table_desc_t kiln_vmfb_schema_hal_debug_export_def;
extern const kiln_vmfb_flatbuf_table_desc_t kiln_vmfb_schema_hal_debug_source_file_def;

/* ============ iree.hal.cuda / iree.hal.hip (same shape, own descriptors) ============ */

/* struct BlockDims {x, y, z: u32}: 12 bytes, 4-aligned (both namespaces). */
enum {
  KILN_GPU_BLOCK_DIMS_SIZEOF = 12,
  KILN_GPU_BLOCK_DIMS_ALIGNOF = 4,
  KILN_GPU_BLOCK_DIMS_X = 0,
  KILN_GPU_BLOCK_DIMS_Y = 4,
  KILN_GPU_BLOCK_DIMS_Z = 8,
};
/* BindingBits (uint64 bit_flags): binding_flags is a [u64] vector. */
#define KILN_GPU_BINDING_READ_ONLY (UINT64_C(1) << 0)
#define KILN_GPU_BINDING_INDIRECT  (UINT64_C(1) << 1)

/* ExportDef */
enum {
  KILN_CUDA_EXPORT_MODULE_ORDINAL = 0,
  KILN_CUDA_EXPORT_KERNEL_NAME = 1,
  KILN_CUDA_EXPORT_BLOCK_DIMS = 2,
  KILN_CUDA_EXPORT_BLOCK_SHARED_MEMORY_SIZE = 3,
  KILN_CUDA_EXPORT_CONSTANT_COUNT = 4,
  KILN_CUDA_EXPORT_BINDING_FLAGS = 5,
  KILN_CUDA_EXPORT_DEBUG_INFO = 6,
};
/* ModuleDef */
enum { KILN_CUDA_MODULE_PTX_IMAGE = 0 };
/* ExecutableDef (root) */
enum {
  KILN_CUDA_EXECUTABLE_EXPORTS = 0,
  KILN_CUDA_EXECUTABLE_MODULES = 1,
  KILN_CUDA_EXECUTABLE_SOURCE_FILES = 2,
};

extern const kiln_vmfb_flatbuf_table_desc_t kiln_vmfb_schema_cuda_export_def;
extern const kiln_vmfb_flatbuf_table_desc_t kiln_vmfb_schema_cuda_module_def;
extern const kiln_vmfb_flatbuf_table_desc_t kiln_vmfb_schema_cuda_executable_def;

enum {
  KILN_HIP_EXPORT_MODULE_ORDINAL = 0,
  KILN_HIP_EXPORT_KERNEL_NAME = 1,
  KILN_HIP_EXPORT_BLOCK_DIMS = 2,
  KILN_HIP_EXPORT_BLOCK_SHARED_MEMORY_SIZE = 3,
  KILN_HIP_EXPORT_CONSTANT_COUNT = 4,
  KILN_HIP_EXPORT_BINDING_FLAGS = 5,
  KILN_HIP_EXPORT_DEBUG_INFO = 6,
};
enum { KILN_HIP_MODULE_HSACO_IMAGE = 0 };
enum {
  KILN_HIP_EXECUTABLE_EXPORTS = 0,
  KILN_HIP_EXECUTABLE_MODULES = 1,
  KILN_HIP_EXECUTABLE_SOURCE_FILES = 2,
};

extern const kiln_vmfb_flatbuf_table_desc_t kiln_vmfb_schema_hip_export_def;
extern const kiln_vmfb_flatbuf_table_desc_t kiln_vmfb_schema_hip_module_def;
extern const kiln_vmfb_flatbuf_table_desc_t kiln_vmfb_schema_hip_executable_def;

/* ================ iree.hal.vulkan (vulkan_executable_def.fbs) ================ */

/* struct PushConstantRange {stage_flags, offset, size: u32}: 12 bytes, 4-aligned. */
enum {
  KILN_VK_PUSH_CONSTANT_RANGE_SIZEOF = 12,
  KILN_VK_PUSH_CONSTANT_RANGE_ALIGNOF = 4,
  KILN_VK_PUSH_CONSTANT_RANGE_STAGE_FLAGS = 0,
  KILN_VK_PUSH_CONSTANT_RANGE_OFFSET = 4,
  KILN_VK_PUSH_CONSTANT_RANGE_SIZE = 8,
};
/* VkDescriptorType (uint32). */
enum {
  KILN_VK_DESCRIPTOR_TYPE_SAMPLER = 0,
  KILN_VK_DESCRIPTOR_TYPE_UNIFORM_BUFFER = 6,
  KILN_VK_DESCRIPTOR_TYPE_STORAGE_BUFFER = 7,
};
/* DispatchAbi (uint8). */
enum { KILN_VK_DISPATCH_ABI_DESCRIPTOR = 0, KILN_VK_DISPATCH_ABI_BDA_V1 = 1 };
/* BdaBindingTableEntryType (uint8). */
enum { KILN_VK_BDA_ENTRY_ADDRESS64 = 0, KILN_VK_BDA_ENTRY_ADDRESS64_LENGTH64 = 1 };

/* DescriptorSetLayoutBindingDef */
enum {
  KILN_VK_DESCRIPTOR_SET_LAYOUT_BINDING_BINDING = 0,
  KILN_VK_DESCRIPTOR_SET_LAYOUT_BINDING_DESCRIPTOR_TYPE = 1,
  KILN_VK_DESCRIPTOR_SET_LAYOUT_BINDING_DESCRIPTOR_COUNT = 2,
  KILN_VK_DESCRIPTOR_SET_LAYOUT_BINDING_STAGE_FLAGS = 3,
};
/* DescriptorSetLayoutDef */
enum { KILN_VK_DESCRIPTOR_SET_LAYOUT_BINDINGS = 0 };
/* PipelineLayoutDef */
enum {
  KILN_VK_PIPELINE_LAYOUT_DESCRIPTOR_SET_LAYOUT_ORDINALS = 0,
  KILN_VK_PIPELINE_LAYOUT_PUSH_CONSTANT_RANGES = 1,
};
/* BdaBindingDef: minimum_alignment defaults to 1. */
enum { KILN_VK_BDA_BINDING_MINIMUM_ALIGNMENT = 0, KILN_VK_BDA_BINDING_MINIMUM_LENGTH = 1 };
/* BdaDispatchLayoutDef: several nonzero defaults (abi_version 1,
 * root_push_constant_length 32, constant_push_constant_offset 32). */
enum {
  KILN_VK_BDA_LAYOUT_ABI_VERSION = 0,
  KILN_VK_BDA_LAYOUT_ROOT_PUSH_CONSTANT_OFFSET = 1,
  KILN_VK_BDA_LAYOUT_ROOT_PUSH_CONSTANT_LENGTH = 2,
  KILN_VK_BDA_LAYOUT_CONSTANT_PUSH_CONSTANT_OFFSET = 3,
  KILN_VK_BDA_LAYOUT_CONSTANT_COUNT = 4,
  KILN_VK_BDA_LAYOUT_BINDING_TABLE_ENTRY_TYPE = 5, /* u8 */
  KILN_VK_BDA_LAYOUT_BINDING_COUNT = 6,
  KILN_VK_BDA_LAYOUT_BINDINGS = 7,
};
/* ShaderModuleDef: spirv_code is [u32]. */
enum { KILN_VK_SHADER_MODULE_SPIRV_CODE = 0 };
/* PipelineDef */
enum {
  KILN_VK_PIPELINE_SHADER_MODULE_ORDINAL = 0,
  KILN_VK_PIPELINE_ENTRY_POINT = 1,
  KILN_VK_PIPELINE_PIPELINE_LAYOUT_ORDINAL = 2,
  KILN_VK_PIPELINE_SUBGROUP_SIZE = 3,
  KILN_VK_PIPELINE_DEBUG_INFO = 4,
  KILN_VK_PIPELINE_DISPATCH_ABI = 5, /* u8 */
  KILN_VK_PIPELINE_BDA_DISPATCH_LAYOUT = 6,
};
/* ExecutableDef (root) */
enum {
  KILN_VK_EXECUTABLE_PIPELINES = 0,
  KILN_VK_EXECUTABLE_DESCRIPTOR_SET_LAYOUTS = 1,
  KILN_VK_EXECUTABLE_PIPELINE_LAYOUTS = 2,
  KILN_VK_EXECUTABLE_SHADER_MODULES = 3,
  KILN_VK_EXECUTABLE_SOURCE_FILES = 4,
};

extern const kiln_vmfb_flatbuf_table_desc_t kiln_vmfb_schema_vk_descriptor_set_layout_binding_def;
extern const kiln_vmfb_flatbuf_table_desc_t kiln_vmfb_schema_vk_descriptor_set_layout_def;
extern const kiln_vmfb_flatbuf_table_desc_t kiln_vmfb_schema_vk_pipeline_layout_def;
extern const kiln_vmfb_flatbuf_table_desc_t kiln_vmfb_schema_vk_bda_binding_def;
extern const kiln_vmfb_flatbuf_table_desc_t kiln_vmfb_schema_vk_bda_dispatch_layout_def;
extern const kiln_vmfb_flatbuf_table_desc_t kiln_vmfb_schema_vk_shader_module_def;
extern const kiln_vmfb_flatbuf_table_desc_t kiln_vmfb_schema_vk_pipeline_def;
extern const kiln_vmfb_flatbuf_table_desc_t kiln_vmfb_schema_vk_executable_def;

#endif /* KILN_COMPILER_VMFB_SCHEMA_H_ */
