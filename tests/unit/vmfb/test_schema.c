/* Unit tests for compiler/vmfb/schema: every descriptor passes the descriptor
 * check; every table's fields (slot, name, kind, element/struct size, child table,
 * default, required) are pinned against a transcription of IREE's .fbs files, so
 * a slot that drifts fails here; a BytecodeModuleDef with every field (both
 * dependency and import flag values, embedded and external rodata, the compression
 * union, 20-byte function descriptors, a debug database with a vector of location
 * unions) is built as IREE lays it out (size-prefixed "IREE" at offset 64 of a
 * file, base alignment 64), verified and read back field by field; CUDA, HIP and
 * Vulkan executables likewise (u64 binding flags, block dims, debug info, source
 * files, SPIR-V words, Vulkan's nonzero BDA defaults); identifiers are checked; and
 * buffers produced by an independent implementation (flatc 2.0.8, from JSON) pass
 * the verifier and read back as written. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

#include "base/buf.h"
#include "base/status.h"
#include "compiler/vmfb/flatbuf.h"
#include "compiler/vmfb/schema.h"
#include "tests/unit/support/testing.h"

typedef kiln_vmfb_flatbuf_builder_t builder_t;
typedef kiln_vmfb_flatbuf_ref_t ref_t;
typedef kiln_vmfb_flatbuf_table_t table_t;
typedef kiln_vmfb_flatbuf_vector_t vector_t;

/* ---- helpers ---- */

#define assert_ok    kiln_test_assert_ok

#define assert_fails kiln_test_assert_fails

static ref_t str(builder_t *b, const char *s) { return kiln_vmfb_flatbuf_builder_add_str(b, s); }

static ref_t table(builder_t *b, const kiln_vmfb_flatbuf_table_desc_t *d) {
  return kiln_vmfb_flatbuf_builder_add_table(b, d);
}

static void set_str(builder_t *b, ref_t t, uint16_t slot, const char *s) {
  kiln_vmfb_flatbuf_builder_set_ref(b, t, slot, str(b, s));
}

static void set_vec(builder_t *b, ref_t t, uint16_t slot, const ref_t *refs, size_t n) {
  kiln_vmfb_flatbuf_builder_set_ref(b, t, slot, kiln_vmfb_flatbuf_builder_add_vector(b, refs, n));
}

static ref_t attr(builder_t *b, const char *key, const char *value) {
  ref_t t = table(b, &kiln_vmfb_schema_vm_attr_def);
  set_str(b, t, KILN_VM_ATTR_KEY, key);
  set_str(b, t, KILN_VM_ATTR_VALUE, value);
  return t;
}

/* Asserts that string field `slot` of `t` is exactly `want`. */
static void assert_str(table_t t, uint16_t slot, const char *want) {
  size_t len = 0;
  const char *got = kiln_vmfb_flatbuf_table_get_string(t, slot, &len);
  if (!got || len != strlen(want) || memcmp(got, want, len) != 0) {
    fail_msg("%s.%s: want \"%s\", got \"%.*s\"", t.desc ? t.desc->name : "?",
             t.desc && slot < t.desc->field_count ? t.desc->fields[slot].name : "?", want, got ? (int)len : 6,
             got ? got : "(null)");
  }
}

static table_t vec_table(table_t t, uint16_t slot, size_t i) {
  return kiln_vmfb_flatbuf_vector_get_table(kiln_vmfb_flatbuf_table_get_vector(t, slot), i);
}

static size_t vec_count(table_t t, uint16_t slot) {
  return kiln_vmfb_flatbuf_vector_count(kiln_vmfb_flatbuf_table_get_vector(t, slot));
}

/* ---- descriptors ---- */

static const kiln_vmfb_flatbuf_table_desc_t *const all_tables[] = {
    &kiln_vmfb_schema_vm_attr_def,
    &kiln_vmfb_schema_vm_type_def,
    &kiln_vmfb_schema_vm_function_signature_def,
    &kiln_vmfb_schema_vm_module_dependency_def,
    &kiln_vmfb_schema_vm_import_function_def,
    &kiln_vmfb_schema_vm_export_function_def,
    &kiln_vmfb_schema_vm_uncompressed_data_def,
    &kiln_vmfb_schema_vm_rodata_segment_def,
    &kiln_vmfb_schema_vm_rwdata_segment_def,
    &kiln_vmfb_schema_vm_module_state_def,
    &kiln_vmfb_schema_vm_call_site_loc_def,
    &kiln_vmfb_schema_vm_file_line_col_loc_def,
    &kiln_vmfb_schema_vm_fused_loc_def,
    &kiln_vmfb_schema_vm_name_loc_def,
    &kiln_vmfb_schema_vm_function_source_map_def,
    &kiln_vmfb_schema_vm_debug_database_def,
    &kiln_vmfb_schema_vm_bytecode_module_def,
    &kiln_vmfb_schema_hal_debug_file_line_loc_def,
    &kiln_vmfb_schema_hal_debug_stage_location_def,
    &kiln_vmfb_schema_hal_debug_export_def,
    &kiln_vmfb_schema_hal_debug_source_file_def,
    &kiln_vmfb_schema_cuda_export_def,
    &kiln_vmfb_schema_cuda_module_def,
    &kiln_vmfb_schema_cuda_executable_def,
    &kiln_vmfb_schema_hip_export_def,
    &kiln_vmfb_schema_hip_module_def,
    &kiln_vmfb_schema_hip_executable_def,
    &kiln_vmfb_schema_vk_descriptor_set_layout_binding_def,
    &kiln_vmfb_schema_vk_descriptor_set_layout_def,
    &kiln_vmfb_schema_vk_pipeline_layout_def,
    &kiln_vmfb_schema_vk_bda_binding_def,
    &kiln_vmfb_schema_vk_bda_dispatch_layout_def,
    &kiln_vmfb_schema_vk_shader_module_def,
    &kiln_vmfb_schema_vk_pipeline_def,
    &kiln_vmfb_schema_vk_executable_def,
};

static void test_descriptors_are_valid(void **state) {
  (void)state;
  for (size_t i = 0; i < sizeof all_tables / sizeof all_tables[0]; i++) {
    assert_ok(kiln_vmfb_flatbuf_desc_check(all_tables[i]));
  }
  assert_int_equal(kiln_vmfb_schema_vm_compression_type_def.member_count, 1);
  assert_ptr_equal(kiln_vmfb_schema_vm_compression_type_def.members[KILN_VM_COMPRESSION_UNCOMPRESSED - 1],
                   &kiln_vmfb_schema_vm_uncompressed_data_def);
  assert_int_equal(kiln_vmfb_schema_vm_location_type_def.member_count, 4);
  assert_ptr_equal(kiln_vmfb_schema_vm_location_type_def.members[KILN_VM_LOCATION_CALL_SITE - 1],
                   &kiln_vmfb_schema_vm_call_site_loc_def);
  assert_ptr_equal(kiln_vmfb_schema_vm_location_type_def.members[KILN_VM_LOCATION_FILE_LINE_COL - 1],
                   &kiln_vmfb_schema_vm_file_line_col_loc_def);
  assert_ptr_equal(kiln_vmfb_schema_vm_location_type_def.members[KILN_VM_LOCATION_FUSED - 1],
                   &kiln_vmfb_schema_vm_fused_loc_def);
  assert_ptr_equal(kiln_vmfb_schema_vm_location_type_def.members[KILN_VM_LOCATION_NAME - 1],
                   &kiln_vmfb_schema_vm_name_loc_def);
}

/* One field as the .fbs declares it. `size`: element size of scalar vectors, struct
 * size of structs and struct vectors, 0 otherwise. */
typedef struct expect_s {
  const kiln_vmfb_flatbuf_table_desc_t *table;
  uint16_t slot;
  const char *name;
  kiln_vmfb_flatbuf_kind_t kind;
  kiln_vmfb_flatbuf_kind_t elem;
  unsigned size;
  const kiln_vmfb_flatbuf_table_desc_t *child;
  int64_t def;
  bool required;
} expect_t;

#define VM(t)  &kiln_vmfb_schema_vm_##t
#define DBG(t) &kiln_vmfb_schema_hal_debug_##t
#define E(t, slot, name, kind) \
  { t, slot, name, KILN_FLATBUF_##kind, 0, 0, NULL, 0, false }
#define E_DEF(t, slot, name, kind, def) \
  { t, slot, name, KILN_FLATBUF_##kind, 0, 0, NULL, def, false }
#define E_VEC(t, slot, name, elem, size) \
  { t, slot, name, KILN_FLATBUF_VECTOR, KILN_FLATBUF_##elem, size, NULL, 0, false }
#define E_SIZED(t, slot, name, kind, size) \
  { t, slot, name, KILN_FLATBUF_##kind, 0, size, NULL, 0, false }
#define E_TABLE(t, slot, name, kind, child) \
  { t, slot, name, KILN_FLATBUF_##kind, 0, 0, child, 0, false }

static const expect_t expected[] = {
    /* bytecode_module_def.fbs */
    E(VM(attr_def), KILN_VM_ATTR_KEY, "key", STRING),
    E(VM(attr_def), KILN_VM_ATTR_VALUE, "value", STRING),
    E(VM(type_def), KILN_VM_TYPE_FULL_NAME, "full_name", STRING),
    E(VM(function_signature_def), KILN_VM_SIGNATURE_CALLING_CONVENTION, "calling_convention", STRING),
    E_TABLE(VM(function_signature_def), KILN_VM_SIGNATURE_ATTRS, "attrs", VECTOR_TABLE, VM(attr_def)),
    E(VM(module_dependency_def), KILN_VM_DEPENDENCY_NAME, "name", STRING),
    E(VM(module_dependency_def), KILN_VM_DEPENDENCY_MINIMUM_VERSION, "minimum_version", U32),
    E_DEF(VM(module_dependency_def), KILN_VM_DEPENDENCY_FLAGS, "flags", U32, 1),
    E(VM(import_function_def), KILN_VM_IMPORT_FULL_NAME, "full_name", STRING),
    E_TABLE(VM(import_function_def), KILN_VM_IMPORT_SIGNATURE, "signature", TABLE,
            VM(function_signature_def)),
    E_DEF(VM(import_function_def), KILN_VM_IMPORT_FLAGS, "flags", U32, 1),
    E(VM(export_function_def), KILN_VM_EXPORT_LOCAL_NAME, "local_name", STRING),
    E(VM(export_function_def), KILN_VM_EXPORT_INTERNAL_ORDINAL, "internal_ordinal", I32),
    E(VM(rodata_segment_def), 0, "compression_type_type", UNION_TYPE),
    E(VM(rodata_segment_def), 1, "compression_type", UNION),
    E_VEC(VM(rodata_segment_def), 2, "embedded_data", U8, 1),
    E(VM(rodata_segment_def), 3, "external_data_offset", U64),
    E(VM(rodata_segment_def), 4, "external_data_length", U64),
    E(VM(rwdata_segment_def), KILN_VM_RWDATA_BYTE_SIZE, "byte_size", I32),
    E(VM(module_state_def), KILN_VM_STATE_GLOBAL_BYTES_CAPACITY, "global_bytes_capacity", I32),
    E(VM(module_state_def), KILN_VM_STATE_GLOBAL_REF_COUNT, "global_ref_count", I32),
    E(VM(call_site_loc_def), KILN_VM_CALL_SITE_LOC_CALLEE, "callee", I32),
    E(VM(call_site_loc_def), KILN_VM_CALL_SITE_LOC_CALLER, "caller", I32),
    E(VM(file_line_col_loc_def), KILN_VM_FILE_LINE_COL_LOC_FILENAME, "filename", STRING),
    E(VM(file_line_col_loc_def), KILN_VM_FILE_LINE_COL_LOC_LINE, "line", I32),
    E(VM(file_line_col_loc_def), KILN_VM_FILE_LINE_COL_LOC_COLUMN, "column", I32),
    E(VM(fused_loc_def), KILN_VM_FUSED_LOC_METADATA, "metadata", STRING),
    E_VEC(VM(fused_loc_def), KILN_VM_FUSED_LOC_LOCATIONS, "locations", I32, 4),
    E(VM(name_loc_def), KILN_VM_NAME_LOC_NAME, "name", STRING),
    E(VM(name_loc_def), KILN_VM_NAME_LOC_CHILD_LOCATION, "child_location", I32),
    E(VM(function_source_map_def), KILN_VM_SOURCE_MAP_LOCAL_NAME, "local_name", STRING),
    E_SIZED(VM(function_source_map_def), KILN_VM_SOURCE_MAP_LOCATIONS, "locations", VECTOR_STRUCT, 8),
    E(VM(debug_database_def), 0, "location_table_type", VECTOR_UNION_TYPE),
    E(VM(debug_database_def), 1, "location_table", VECTOR_UNION),
    E_TABLE(VM(debug_database_def), 2, "functions", VECTOR_TABLE, VM(function_source_map_def)),
    {VM(bytecode_module_def), 0, "name", KILN_FLATBUF_STRING, 0, 0, NULL, 0, true},
    E(VM(bytecode_module_def), 1, "version", U32),
    E(VM(bytecode_module_def), 2, "requirements", U32),
    E_TABLE(VM(bytecode_module_def), 3, "attrs", VECTOR_TABLE, VM(attr_def)),
    E_TABLE(VM(bytecode_module_def), 4, "types", VECTOR_TABLE, VM(type_def)),
    E_TABLE(VM(bytecode_module_def), 5, "dependencies", VECTOR_TABLE, VM(module_dependency_def)),
    E_TABLE(VM(bytecode_module_def), 6, "imported_functions", VECTOR_TABLE, VM(import_function_def)),
    E_TABLE(VM(bytecode_module_def), 7, "exported_functions", VECTOR_TABLE, VM(export_function_def)),
    E_TABLE(VM(bytecode_module_def), 8, "function_signatures", VECTOR_TABLE, VM(function_signature_def)),
    E_TABLE(VM(bytecode_module_def), 9, "rodata_segments", VECTOR_TABLE, VM(rodata_segment_def)),
    E_TABLE(VM(bytecode_module_def), 10, "rwdata_segments", VECTOR_TABLE, VM(rwdata_segment_def)),
    E_TABLE(VM(bytecode_module_def), 11, "module_state", TABLE, VM(module_state_def)),
    E_SIZED(VM(bytecode_module_def), 12, "function_descriptors", VECTOR_STRUCT, 20),
    E(VM(bytecode_module_def), 13, "bytecode_version", U32),
    E_VEC(VM(bytecode_module_def), 14, "bytecode_data", U8, 1),
    E_TABLE(VM(bytecode_module_def), 15, "debug_database", TABLE, VM(debug_database_def)),
    /* executable_debug_info.fbs */
    E(DBG(file_line_loc_def), 0, "filename", STRING),
    E(DBG(file_line_loc_def), 1, "line", I32),
    E(DBG(stage_location_def), 0, "stage", STRING),
    E_TABLE(DBG(stage_location_def), 1, "location", TABLE, DBG(file_line_loc_def)),
    E(DBG(export_def), 0, "name", STRING),
    E_TABLE(DBG(export_def), 1, "location", TABLE, DBG(file_line_loc_def)),
    E_TABLE(DBG(export_def), 2, "stage_locations", VECTOR_TABLE, DBG(stage_location_def)),
    E(DBG(source_file_def), 0, "path", STRING),
    E_VEC(DBG(source_file_def), 1, "content", U8, 1),
    /* cuda_executable_def.fbs */
    E(&kiln_vmfb_schema_cuda_export_def, 0, "module_ordinal", U32),
    E(&kiln_vmfb_schema_cuda_export_def, 1, "kernel_name", STRING),
    E_SIZED(&kiln_vmfb_schema_cuda_export_def, 2, "block_dims", STRUCT, 12),
    E(&kiln_vmfb_schema_cuda_export_def, 3, "block_shared_memory_size", U32),
    E(&kiln_vmfb_schema_cuda_export_def, 4, "constant_count", U32),
    E_VEC(&kiln_vmfb_schema_cuda_export_def, 5, "binding_flags", U64, 8),
    E_TABLE(&kiln_vmfb_schema_cuda_export_def, 6, "debug_info", TABLE, DBG(export_def)),
    E(&kiln_vmfb_schema_cuda_module_def, 0, "ptx_image", STRING),
    E_TABLE(&kiln_vmfb_schema_cuda_executable_def, 0, "exports", VECTOR_TABLE,
            &kiln_vmfb_schema_cuda_export_def),
    E_TABLE(&kiln_vmfb_schema_cuda_executable_def, 1, "modules", VECTOR_TABLE,
            &kiln_vmfb_schema_cuda_module_def),
    E_TABLE(&kiln_vmfb_schema_cuda_executable_def, 2, "source_files", VECTOR_TABLE, DBG(source_file_def)),
    /* hip_executable_def.fbs */
    E(&kiln_vmfb_schema_hip_export_def, 0, "module_ordinal", U32),
    E(&kiln_vmfb_schema_hip_export_def, 1, "kernel_name", STRING),
    E_SIZED(&kiln_vmfb_schema_hip_export_def, 2, "block_dims", STRUCT, 12),
    E(&kiln_vmfb_schema_hip_export_def, 3, "block_shared_memory_size", U32),
    E(&kiln_vmfb_schema_hip_export_def, 4, "constant_count", U32),
    E_VEC(&kiln_vmfb_schema_hip_export_def, 5, "binding_flags", U64, 8),
    E_TABLE(&kiln_vmfb_schema_hip_export_def, 6, "debug_info", TABLE, DBG(export_def)),
    E(&kiln_vmfb_schema_hip_module_def, 0, "hsaco_image", STRING),
    E_TABLE(&kiln_vmfb_schema_hip_executable_def, 0, "exports", VECTOR_TABLE,
            &kiln_vmfb_schema_hip_export_def),
    E_TABLE(&kiln_vmfb_schema_hip_executable_def, 1, "modules", VECTOR_TABLE,
            &kiln_vmfb_schema_hip_module_def),
    E_TABLE(&kiln_vmfb_schema_hip_executable_def, 2, "source_files", VECTOR_TABLE, DBG(source_file_def)),
    /* vulkan_executable_def.fbs */
    E(&kiln_vmfb_schema_vk_descriptor_set_layout_binding_def, 0, "binding", U32),
    E(&kiln_vmfb_schema_vk_descriptor_set_layout_binding_def, 1, "descriptor_type", U32),
    E(&kiln_vmfb_schema_vk_descriptor_set_layout_binding_def, 2, "descriptor_count", U32),
    E(&kiln_vmfb_schema_vk_descriptor_set_layout_binding_def, 3, "stage_flags", U32),
    E_TABLE(&kiln_vmfb_schema_vk_descriptor_set_layout_def, 0, "bindings", VECTOR_TABLE,
            &kiln_vmfb_schema_vk_descriptor_set_layout_binding_def),
    E_VEC(&kiln_vmfb_schema_vk_pipeline_layout_def, 0, "descriptor_set_layout_ordinals", U32, 4),
    E_SIZED(&kiln_vmfb_schema_vk_pipeline_layout_def, 1, "push_constant_ranges", VECTOR_STRUCT, 12),
    E_DEF(&kiln_vmfb_schema_vk_bda_binding_def, 0, "minimum_alignment", U32, 1),
    E(&kiln_vmfb_schema_vk_bda_binding_def, 1, "minimum_length", U64),
    E_DEF(&kiln_vmfb_schema_vk_bda_dispatch_layout_def, 0, "abi_version", U32, 1),
    E(&kiln_vmfb_schema_vk_bda_dispatch_layout_def, 1, "root_push_constant_offset", U32),
    E_DEF(&kiln_vmfb_schema_vk_bda_dispatch_layout_def, 2, "root_push_constant_length", U32, 32),
    E_DEF(&kiln_vmfb_schema_vk_bda_dispatch_layout_def, 3, "constant_push_constant_offset", U32, 32),
    E(&kiln_vmfb_schema_vk_bda_dispatch_layout_def, 4, "constant_count", U32),
    E(&kiln_vmfb_schema_vk_bda_dispatch_layout_def, 5, "binding_table_entry_type", U8),
    E(&kiln_vmfb_schema_vk_bda_dispatch_layout_def, 6, "binding_count", U32),
    E_TABLE(&kiln_vmfb_schema_vk_bda_dispatch_layout_def, 7, "bindings", VECTOR_TABLE,
            &kiln_vmfb_schema_vk_bda_binding_def),
    E_VEC(&kiln_vmfb_schema_vk_shader_module_def, 0, "spirv_code", U32, 4),
    E(&kiln_vmfb_schema_vk_pipeline_def, 0, "shader_module_ordinal", U32),
    E(&kiln_vmfb_schema_vk_pipeline_def, 1, "entry_point", STRING),
    E(&kiln_vmfb_schema_vk_pipeline_def, 2, "pipeline_layout_ordinal", U32),
    E(&kiln_vmfb_schema_vk_pipeline_def, 3, "subgroup_size", U32),
    E_TABLE(&kiln_vmfb_schema_vk_pipeline_def, 4, "debug_info", TABLE, DBG(export_def)),
    E(&kiln_vmfb_schema_vk_pipeline_def, 5, "dispatch_abi", U8),
    E_TABLE(&kiln_vmfb_schema_vk_pipeline_def, 6, "bda_dispatch_layout", TABLE,
            &kiln_vmfb_schema_vk_bda_dispatch_layout_def),
    E_TABLE(&kiln_vmfb_schema_vk_executable_def, 0, "pipelines", VECTOR_TABLE,
            &kiln_vmfb_schema_vk_pipeline_def),
    E_TABLE(&kiln_vmfb_schema_vk_executable_def, 1, "descriptor_set_layouts", VECTOR_TABLE,
            &kiln_vmfb_schema_vk_descriptor_set_layout_def),
    E_TABLE(&kiln_vmfb_schema_vk_executable_def, 2, "pipeline_layouts", VECTOR_TABLE,
            &kiln_vmfb_schema_vk_pipeline_layout_def),
    E_TABLE(&kiln_vmfb_schema_vk_executable_def, 3, "shader_modules", VECTOR_TABLE,
            &kiln_vmfb_schema_vk_shader_module_def),
    E_TABLE(&kiln_vmfb_schema_vk_executable_def, 4, "source_files", VECTOR_TABLE, DBG(source_file_def)),
};

static void test_slots_match_the_fbs(void **state) {
  (void)state;
  size_t n = sizeof expected / sizeof expected[0];
  /* Every field of every table is listed, and nothing else. */
  for (size_t ti = 0; ti < sizeof all_tables / sizeof all_tables[0]; ti++) {
    size_t listed = 0;
    for (size_t i = 0; i < n; i++) listed += expected[i].table == all_tables[ti];
    if (listed != all_tables[ti]->field_count) {
      fail_msg("%s: %u fields, %zu expected", all_tables[ti]->name, all_tables[ti]->field_count, listed);
    }
  }
  for (size_t i = 0; i < n; i++) {
    const expect_t *e = &expected[i];
    assert_true(e->slot < e->table->field_count);
    const kiln_vmfb_flatbuf_field_desc_t *f = &e->table->fields[e->slot];
    bool ok = f->slot == e->slot && strcmp(f->name, e->name) == 0 && f->kind == e->kind &&
              f->default_int == e->def && f->required == e->required && !f->deprecated &&
              f->default_float == 0;
    if (e->kind == KILN_FLATBUF_VECTOR) ok = ok && f->elem_kind == e->elem;
    if (e->kind == KILN_FLATBUF_STRUCT || e->kind == KILN_FLATBUF_VECTOR_STRUCT) {
      ok = ok && f->struct_size == e->size && f->struct_align == 4;
    }
    if (e->child) ok = ok && f->table == e->child;
    if (!ok) fail_msg("%s slot %u: want %s, got %s", e->table->name, e->slot, e->name, f->name);
  }
  assert_int_equal(KILN_VM_FUNCTION_DESCRIPTOR_SIZEOF, 20);
  assert_int_equal(KILN_VM_FUNCTION_DESCRIPTOR_REF_REGISTER_COUNT + 2, 20);
  assert_string_equal(KILN_VM_FILE_IDENTIFIER, "IREE");
  assert_string_equal(KILN_CUDA_FILE_IDENTIFIER, "CDA1");
  assert_string_equal(KILN_HIP_FILE_IDENTIFIER, "HIP1");
  assert_string_equal(KILN_VK_FILE_IDENTIFIER, "VKE1");
}

/* ---- BytecodeModuleDef ---- */

static const uint8_t embedded[40] = {1,  2,  3,  4,  5,  6,  7,  8,  9,  10, 11, 12, 13, 14,
                                     15, 16, 17, 18, 19, 20, 21, 22, 23, 24, 25, 26, 27, 28,
                                     29, 30, 31, 32, 33, 34, 35, 36, 37, 38, 39, 40};

static void put_descriptor(uint8_t *d, int32_t off, int32_t len, uint32_t req, int16_t blocks, int16_t i32s,
                           int16_t refs) {
  memset(d, 0, KILN_VM_FUNCTION_DESCRIPTOR_SIZEOF);
  kiln_vmfb_flatbuf_store_u32(d + KILN_VM_FUNCTION_DESCRIPTOR_BYTECODE_OFFSET, (uint32_t)off);
  kiln_vmfb_flatbuf_store_u32(d + KILN_VM_FUNCTION_DESCRIPTOR_BYTECODE_LENGTH, (uint32_t)len);
  kiln_vmfb_flatbuf_store_u32(d + KILN_VM_FUNCTION_DESCRIPTOR_REQUIREMENTS, req);
  kiln_vmfb_flatbuf_store_u16(d + KILN_VM_FUNCTION_DESCRIPTOR_BLOCK_COUNT, (uint16_t)blocks);
  kiln_vmfb_flatbuf_store_u16(d + KILN_VM_FUNCTION_DESCRIPTOR_I32_REGISTER_COUNT, (uint16_t)i32s);
  kiln_vmfb_flatbuf_store_u16(d + KILN_VM_FUNCTION_DESCRIPTOR_REF_REGISTER_COUNT, (uint16_t)refs);
}

static ref_t signature(builder_t *b, const char *cconv) {
  ref_t t = table(b, &kiln_vmfb_schema_vm_function_signature_def);
  set_str(b, t, KILN_VM_SIGNATURE_CALLING_CONVENTION, cconv);
  return t;
}

static ref_t build_module(builder_t *b) {
  ref_t m = table(b, &kiln_vmfb_schema_vm_bytecode_module_def);
  set_str(b, m, KILN_VM_MODULE_NAME, "module");
  kiln_vmfb_flatbuf_builder_set_uint(b, m, KILN_VM_MODULE_VERSION, 3);
  kiln_vmfb_flatbuf_builder_set_uint(b, m, KILN_VM_MODULE_REQUIREMENTS,
                                     KILN_VM_FEATURE_EXT_F32 | KILN_VM_FEATURE_EXT_F64);
  ref_t attrs[2] = {attr(b, "kiln.version", "0.1.0"), attr(b, "kiln.source", "sha256:ab")};
  set_vec(b, m, KILN_VM_MODULE_ATTRS, attrs, 2);
  ref_t types[2];
  const char *type_names[2] = {"hal.buffer", "hal.device"};
  for (int i = 0; i < 2; i++) {
    types[i] = table(b, &kiln_vmfb_schema_vm_type_def);
    set_str(b, types[i], KILN_VM_TYPE_FULL_NAME, type_names[i]);
  }
  set_vec(b, m, KILN_VM_MODULE_TYPES, types, 2);

  ref_t deps[2] = {table(b, &kiln_vmfb_schema_vm_module_dependency_def),
                   table(b, &kiln_vmfb_schema_vm_module_dependency_def)};
  set_str(b, deps[0], KILN_VM_DEPENDENCY_NAME, "hal");
  kiln_vmfb_flatbuf_builder_set_uint(b, deps[0], KILN_VM_DEPENDENCY_MINIMUM_VERSION, 7);
  kiln_vmfb_flatbuf_builder_set_uint(b, deps[0], KILN_VM_DEPENDENCY_FLAGS,
                                     KILN_VM_DEPENDENCY_FLAG_REQUIRED); /* the default: omitted */
  set_str(b, deps[1], KILN_VM_DEPENDENCY_NAME, "vmvx");
  kiln_vmfb_flatbuf_builder_set_uint(b, deps[1], KILN_VM_DEPENDENCY_FLAGS, KILN_VM_DEPENDENCY_FLAG_OPTIONAL);
  set_vec(b, m, KILN_VM_MODULE_DEPENDENCIES, deps, 2);

  ref_t imports[2] = {table(b, &kiln_vmfb_schema_vm_import_function_def),
                      table(b, &kiln_vmfb_schema_vm_import_function_def)};
  set_str(b, imports[0], KILN_VM_IMPORT_FULL_NAME, "hal.executable.create");
  kiln_vmfb_flatbuf_builder_set_ref(b, imports[0], KILN_VM_IMPORT_SIGNATURE, signature(b, "0rIrrr_r"));
  set_str(b, imports[1], KILN_VM_IMPORT_FULL_NAME, "hal.executable.lookup.function");
  kiln_vmfb_flatbuf_builder_set_ref(b, imports[1], KILN_VM_IMPORT_SIGNATURE, signature(b, "0rr_I"));
  kiln_vmfb_flatbuf_builder_set_uint(b, imports[1], KILN_VM_IMPORT_FLAGS, KILN_VM_IMPORT_FLAG_OPTIONAL);
  set_vec(b, m, KILN_VM_MODULE_IMPORTED_FUNCTIONS, imports, 2);

  ref_t exp = table(b, &kiln_vmfb_schema_vm_export_function_def);
  set_str(b, exp, KILN_VM_EXPORT_LOCAL_NAME, "main");
  kiln_vmfb_flatbuf_builder_set_int(b, exp, KILN_VM_EXPORT_INTERNAL_ORDINAL, 1);
  set_vec(b, m, KILN_VM_MODULE_EXPORTED_FUNCTIONS, &exp, 1);

  ref_t sigs[2] = {signature(b, "0v_v"), signature(b, "0r_r")};
  ref_t abi = attr(b, "iree.abi.declaration", "sync func @main(%input0: tensor<4xf32>)");
  set_vec(b, sigs[1], KILN_VM_SIGNATURE_ATTRS, &abi, 1);
  set_vec(b, m, KILN_VM_MODULE_FUNCTION_SIGNATURES, sigs, 2);

  ref_t ro[2] = {table(b, &kiln_vmfb_schema_vm_rodata_segment_def),
                 table(b, &kiln_vmfb_schema_vm_rodata_segment_def)};
  kiln_vmfb_flatbuf_builder_set_ref(b, ro[0], KILN_VM_RODATA_EMBEDDED_DATA,
                                    kiln_vmfb_flatbuf_builder_add_bytes(b, embedded, sizeof embedded, 16));
  kiln_vmfb_flatbuf_builder_set_union(b, ro[1], KILN_VM_RODATA_COMPRESSION_TYPE,
                                      KILN_VM_COMPRESSION_UNCOMPRESSED,
                                      table(b, &kiln_vmfb_schema_vm_uncompressed_data_def));
  kiln_vmfb_flatbuf_builder_set_uint(b, ro[1], KILN_VM_RODATA_EXTERNAL_DATA_OFFSET, 64);
  kiln_vmfb_flatbuf_builder_set_uint(b, ro[1], KILN_VM_RODATA_EXTERNAL_DATA_LENGTH, UINT64_C(5000000000));
  set_vec(b, m, KILN_VM_MODULE_RODATA_SEGMENTS, ro, 2);

  ref_t rw = table(b, &kiln_vmfb_schema_vm_rwdata_segment_def);
  kiln_vmfb_flatbuf_builder_set_int(b, rw, KILN_VM_RWDATA_BYTE_SIZE, 256);
  set_vec(b, m, KILN_VM_MODULE_RWDATA_SEGMENTS, &rw, 1);

  ref_t st = table(b, &kiln_vmfb_schema_vm_module_state_def);
  kiln_vmfb_flatbuf_builder_set_int(b, st, KILN_VM_STATE_GLOBAL_BYTES_CAPACITY, 16);
  kiln_vmfb_flatbuf_builder_set_int(b, st, KILN_VM_STATE_GLOBAL_REF_COUNT, 2);
  kiln_vmfb_flatbuf_builder_set_ref(b, m, KILN_VM_MODULE_MODULE_STATE, st);

  uint8_t fd[2 * KILN_VM_FUNCTION_DESCRIPTOR_SIZEOF];
  put_descriptor(fd, 0, 12, 0, 1, 3, 2);
  put_descriptor(fd + KILN_VM_FUNCTION_DESCRIPTOR_SIZEOF, 12, 20, KILN_VM_FEATURE_EXT_F32, 2, 4, 0);
  kiln_vmfb_flatbuf_builder_set_ref(
      b, m, KILN_VM_MODULE_FUNCTION_DESCRIPTORS,
      kiln_vmfb_flatbuf_builder_add_structs(b, fd, 2, KILN_VM_FUNCTION_DESCRIPTOR_SIZEOF,
                                            KILN_VM_FUNCTION_DESCRIPTOR_ALIGNOF));
  kiln_vmfb_flatbuf_builder_set_uint(b, m, KILN_VM_MODULE_BYTECODE_VERSION, 17u << 16);
  uint8_t code[32];
  for (int i = 0; i < 32; i++) code[i] = (uint8_t)(0xA0 + i);
  kiln_vmfb_flatbuf_builder_set_ref(b, m, KILN_VM_MODULE_BYTECODE_DATA,
                                    kiln_vmfb_flatbuf_builder_add_bytes(b, code, sizeof code, 16));

  /* Debug database: four locations, one of each union member, and a source map. */
  ref_t flc = table(b, &kiln_vmfb_schema_vm_file_line_col_loc_def);
  set_str(b, flc, KILN_VM_FILE_LINE_COL_LOC_FILENAME, "model.mlir");
  kiln_vmfb_flatbuf_builder_set_int(b, flc, KILN_VM_FILE_LINE_COL_LOC_LINE, 3);
  kiln_vmfb_flatbuf_builder_set_int(b, flc, KILN_VM_FILE_LINE_COL_LOC_COLUMN, 7);
  ref_t nl = table(b, &kiln_vmfb_schema_vm_name_loc_def);
  set_str(b, nl, KILN_VM_NAME_LOC_NAME, "op");
  ref_t cs = table(b, &kiln_vmfb_schema_vm_call_site_loc_def);
  kiln_vmfb_flatbuf_builder_set_int(b, cs, KILN_VM_CALL_SITE_LOC_CALLEE, 1);
  ref_t fu = table(b, &kiln_vmfb_schema_vm_fused_loc_def);
  set_str(b, fu, KILN_VM_FUSED_LOC_METADATA, "m");
  const int32_t fused[2] = {0, 1};
  kiln_vmfb_flatbuf_builder_set_ref(b, fu, KILN_VM_FUSED_LOC_LOCATIONS,
                                    kiln_vmfb_flatbuf_builder_add_scalars(b, KILN_FLATBUF_I32, fused, 2));
  const uint8_t loc_types[4] = {KILN_VM_LOCATION_FILE_LINE_COL, KILN_VM_LOCATION_NAME,
                                KILN_VM_LOCATION_CALL_SITE, KILN_VM_LOCATION_FUSED};
  const ref_t loc_values[4] = {flc, nl, cs, fu};
  ref_t db = table(b, &kiln_vmfb_schema_vm_debug_database_def);
  kiln_vmfb_flatbuf_builder_set_union_vector(b, db, KILN_VM_DEBUG_LOCATION_TABLE, loc_types, loc_values, 4);
  ref_t map = table(b, &kiln_vmfb_schema_vm_function_source_map_def);
  set_str(b, map, KILN_VM_SOURCE_MAP_LOCAL_NAME, "main");
  uint8_t locs[2 * KILN_VM_BYTECODE_LOCATION_SIZEOF];
  for (int i = 0; i < 2; i++) {
    kiln_vmfb_flatbuf_store_u32(locs + 8 * i + KILN_VM_BYTECODE_LOCATION_BYTECODE_OFFSET, (uint32_t)(4 * i));
    kiln_vmfb_flatbuf_store_u32(locs + 8 * i + KILN_VM_BYTECODE_LOCATION_LOCATION, (uint32_t)i);
  }
  kiln_vmfb_flatbuf_builder_set_ref(
      b, map, KILN_VM_SOURCE_MAP_LOCATIONS,
      kiln_vmfb_flatbuf_builder_add_structs(b, locs, 2, KILN_VM_BYTECODE_LOCATION_SIZEOF,
                                            KILN_VM_BYTECODE_LOCATION_ALIGNOF));
  set_vec(b, db, KILN_VM_DEBUG_FUNCTIONS, &map, 1);
  kiln_vmfb_flatbuf_builder_set_ref(b, m, KILN_VM_MODULE_DEBUG_DATABASE, db);
  return m;
}

/* Reads back what build_module wrote. `fb` is the FlatBuffer's first byte, for
 * alignment checks (NULL: none). */
static void check_module(table_t m, const uint8_t *fb, bool with_debug) {
  assert_str(m, KILN_VM_MODULE_NAME, "module");
  assert_int_equal(kiln_vmfb_flatbuf_table_get_uint(m, KILN_VM_MODULE_VERSION), 3);
  assert_int_equal(kiln_vmfb_flatbuf_table_get_uint(m, KILN_VM_MODULE_REQUIREMENTS), 3);
  assert_int_equal(vec_count(m, KILN_VM_MODULE_ATTRS), 2);
  assert_str(vec_table(m, KILN_VM_MODULE_ATTRS, 0), KILN_VM_ATTR_KEY, "kiln.version");
  assert_str(vec_table(m, KILN_VM_MODULE_ATTRS, 0), KILN_VM_ATTR_VALUE, "0.1.0");
  assert_str(vec_table(m, KILN_VM_MODULE_ATTRS, 1), KILN_VM_ATTR_KEY, "kiln.source");
  assert_str(vec_table(m, KILN_VM_MODULE_ATTRS, 1), KILN_VM_ATTR_VALUE, "sha256:ab");
  assert_int_equal(vec_count(m, KILN_VM_MODULE_TYPES), 2);
  assert_str(vec_table(m, KILN_VM_MODULE_TYPES, 0), KILN_VM_TYPE_FULL_NAME, "hal.buffer");
  assert_str(vec_table(m, KILN_VM_MODULE_TYPES, 1), KILN_VM_TYPE_FULL_NAME, "hal.device");

  table_t dep = vec_table(m, KILN_VM_MODULE_DEPENDENCIES, 0);
  assert_str(dep, KILN_VM_DEPENDENCY_NAME, "hal");
  assert_int_equal(kiln_vmfb_flatbuf_table_get_uint(dep, KILN_VM_DEPENDENCY_MINIMUM_VERSION), 7);
  assert_false(kiln_vmfb_flatbuf_table_has(dep, KILN_VM_DEPENDENCY_FLAGS));
  assert_int_equal(kiln_vmfb_flatbuf_table_get_uint(dep, KILN_VM_DEPENDENCY_FLAGS),
                   KILN_VM_DEPENDENCY_FLAG_REQUIRED);
  dep = vec_table(m, KILN_VM_MODULE_DEPENDENCIES, 1);
  assert_str(dep, KILN_VM_DEPENDENCY_NAME, "vmvx");
  assert_int_equal(kiln_vmfb_flatbuf_table_get_uint(dep, KILN_VM_DEPENDENCY_MINIMUM_VERSION), 0);
  assert_int_equal(kiln_vmfb_flatbuf_table_get_uint(dep, KILN_VM_DEPENDENCY_FLAGS),
                   KILN_VM_DEPENDENCY_FLAG_OPTIONAL);

  assert_int_equal(vec_count(m, KILN_VM_MODULE_IMPORTED_FUNCTIONS), 2);
  table_t imp = vec_table(m, KILN_VM_MODULE_IMPORTED_FUNCTIONS, 0);
  assert_str(imp, KILN_VM_IMPORT_FULL_NAME, "hal.executable.create");
  assert_str(kiln_vmfb_flatbuf_table_get_table(imp, KILN_VM_IMPORT_SIGNATURE),
             KILN_VM_SIGNATURE_CALLING_CONVENTION, "0rIrrr_r");
  assert_int_equal(kiln_vmfb_flatbuf_table_get_uint(imp, KILN_VM_IMPORT_FLAGS), KILN_VM_IMPORT_FLAG_REQUIRED);
  imp = vec_table(m, KILN_VM_MODULE_IMPORTED_FUNCTIONS, 1);
  assert_str(imp, KILN_VM_IMPORT_FULL_NAME, "hal.executable.lookup.function");
  assert_str(kiln_vmfb_flatbuf_table_get_table(imp, KILN_VM_IMPORT_SIGNATURE),
             KILN_VM_SIGNATURE_CALLING_CONVENTION, "0rr_I");
  assert_int_equal(kiln_vmfb_flatbuf_table_get_uint(imp, KILN_VM_IMPORT_FLAGS), KILN_VM_IMPORT_FLAG_OPTIONAL);

  table_t exp = vec_table(m, KILN_VM_MODULE_EXPORTED_FUNCTIONS, 0);
  assert_str(exp, KILN_VM_EXPORT_LOCAL_NAME, "main");
  assert_int_equal(kiln_vmfb_flatbuf_table_get_int(exp, KILN_VM_EXPORT_INTERNAL_ORDINAL), 1);

  assert_int_equal(vec_count(m, KILN_VM_MODULE_FUNCTION_SIGNATURES), 2);
  assert_str(vec_table(m, KILN_VM_MODULE_FUNCTION_SIGNATURES, 0), KILN_VM_SIGNATURE_CALLING_CONVENTION,
             "0v_v");
  table_t sig = vec_table(m, KILN_VM_MODULE_FUNCTION_SIGNATURES, 1);
  assert_str(sig, KILN_VM_SIGNATURE_CALLING_CONVENTION, "0r_r");
  assert_str(vec_table(sig, KILN_VM_SIGNATURE_ATTRS, 0), KILN_VM_ATTR_KEY, "iree.abi.declaration");

  assert_int_equal(vec_count(m, KILN_VM_MODULE_RODATA_SEGMENTS), 2);
  table_t ro = vec_table(m, KILN_VM_MODULE_RODATA_SEGMENTS, 0);
  table_t u;
  assert_int_equal(kiln_vmfb_flatbuf_table_get_union(ro, KILN_VM_RODATA_COMPRESSION_TYPE, &u),
                   KILN_VM_COMPRESSION_NONE);
  vector_t data = kiln_vmfb_flatbuf_table_get_vector(ro, KILN_VM_RODATA_EMBEDDED_DATA);
  assert_int_equal(kiln_vmfb_flatbuf_vector_count(data), sizeof embedded);
  assert_memory_equal(kiln_vmfb_flatbuf_vector_data(data), embedded, sizeof embedded);
  if (fb) assert_int_equal((size_t)(kiln_vmfb_flatbuf_vector_data(data) - fb) % 16, 0);
  assert_false(kiln_vmfb_flatbuf_table_has(ro, KILN_VM_RODATA_EXTERNAL_DATA_OFFSET));
  ro = vec_table(m, KILN_VM_MODULE_RODATA_SEGMENTS, 1);
  assert_int_equal(kiln_vmfb_flatbuf_table_get_union(ro, KILN_VM_RODATA_COMPRESSION_TYPE, &u),
                   KILN_VM_COMPRESSION_UNCOMPRESSED);
  assert_ptr_equal(u.desc, &kiln_vmfb_schema_vm_uncompressed_data_def);
  assert_false(kiln_vmfb_flatbuf_table_has(ro, KILN_VM_RODATA_EMBEDDED_DATA));
  assert_int_equal(kiln_vmfb_flatbuf_table_get_uint(ro, KILN_VM_RODATA_EXTERNAL_DATA_OFFSET), 64);
  assert_true(kiln_vmfb_flatbuf_table_get_uint(ro, KILN_VM_RODATA_EXTERNAL_DATA_LENGTH) ==
              UINT64_C(5000000000));

  assert_int_equal(kiln_vmfb_flatbuf_table_get_int(vec_table(m, KILN_VM_MODULE_RWDATA_SEGMENTS, 0),
                                                   KILN_VM_RWDATA_BYTE_SIZE),
                   256);
  table_t st = kiln_vmfb_flatbuf_table_get_table(m, KILN_VM_MODULE_MODULE_STATE);
  assert_int_equal(kiln_vmfb_flatbuf_table_get_int(st, KILN_VM_STATE_GLOBAL_BYTES_CAPACITY), 16);
  assert_int_equal(kiln_vmfb_flatbuf_table_get_int(st, KILN_VM_STATE_GLOBAL_REF_COUNT), 2);

  vector_t fds = kiln_vmfb_flatbuf_table_get_vector(m, KILN_VM_MODULE_FUNCTION_DESCRIPTORS);
  assert_int_equal(kiln_vmfb_flatbuf_vector_count(fds), 2);
  assert_int_equal(fds.elem_size, 20);
  const uint8_t *d = kiln_vmfb_flatbuf_vector_get_struct(fds, 1);
  assert_int_equal(kiln_vmfb_flatbuf_load_u32(d + KILN_VM_FUNCTION_DESCRIPTOR_BYTECODE_OFFSET), 12);
  assert_int_equal(kiln_vmfb_flatbuf_load_u32(d + KILN_VM_FUNCTION_DESCRIPTOR_BYTECODE_LENGTH), 20);
  assert_int_equal(kiln_vmfb_flatbuf_load_u32(d + KILN_VM_FUNCTION_DESCRIPTOR_REQUIREMENTS), 1);
  assert_int_equal(kiln_vmfb_flatbuf_load_u16(d + KILN_VM_FUNCTION_DESCRIPTOR_RESERVED), 0);
  assert_int_equal(kiln_vmfb_flatbuf_load_u16(d + KILN_VM_FUNCTION_DESCRIPTOR_BLOCK_COUNT), 2);
  assert_int_equal(kiln_vmfb_flatbuf_load_u16(d + KILN_VM_FUNCTION_DESCRIPTOR_I32_REGISTER_COUNT), 4);
  assert_int_equal(kiln_vmfb_flatbuf_load_u16(d + KILN_VM_FUNCTION_DESCRIPTOR_REF_REGISTER_COUNT), 0);
  d = kiln_vmfb_flatbuf_vector_get_struct(fds, 0);
  assert_int_equal(kiln_vmfb_flatbuf_load_u16(d + KILN_VM_FUNCTION_DESCRIPTOR_REF_REGISTER_COUNT), 2);

  assert_int_equal(kiln_vmfb_flatbuf_table_get_uint(m, KILN_VM_MODULE_BYTECODE_VERSION), 17u << 16);
  vector_t code = kiln_vmfb_flatbuf_table_get_vector(m, KILN_VM_MODULE_BYTECODE_DATA);
  assert_int_equal(kiln_vmfb_flatbuf_vector_count(code), 32);
  assert_int_equal(kiln_vmfb_flatbuf_vector_data(code)[31], 0xA0 + 31);

  table_t db = kiln_vmfb_flatbuf_table_get_table(m, KILN_VM_MODULE_DEBUG_DATABASE);
  if (!with_debug) {
    assert_false(kiln_vmfb_flatbuf_table_exists(db));
    return;
  }
  assert_int_equal(kiln_vmfb_flatbuf_table_get_union_count(db, KILN_VM_DEBUG_LOCATION_TABLE), 4);
  table_t loc;
  assert_int_equal(kiln_vmfb_flatbuf_table_get_union_at(db, KILN_VM_DEBUG_LOCATION_TABLE, 0, &loc),
                   KILN_VM_LOCATION_FILE_LINE_COL);
  assert_str(loc, KILN_VM_FILE_LINE_COL_LOC_FILENAME, "model.mlir");
  assert_int_equal(kiln_vmfb_flatbuf_table_get_int(loc, KILN_VM_FILE_LINE_COL_LOC_LINE), 3);
  assert_int_equal(kiln_vmfb_flatbuf_table_get_int(loc, KILN_VM_FILE_LINE_COL_LOC_COLUMN), 7);
  assert_int_equal(kiln_vmfb_flatbuf_table_get_union_at(db, KILN_VM_DEBUG_LOCATION_TABLE, 1, &loc),
                   KILN_VM_LOCATION_NAME);
  assert_str(loc, KILN_VM_NAME_LOC_NAME, "op");
  assert_int_equal(kiln_vmfb_flatbuf_table_get_union_at(db, KILN_VM_DEBUG_LOCATION_TABLE, 2, &loc),
                   KILN_VM_LOCATION_CALL_SITE);
  assert_int_equal(kiln_vmfb_flatbuf_table_get_int(loc, KILN_VM_CALL_SITE_LOC_CALLEE), 1);
  assert_int_equal(kiln_vmfb_flatbuf_table_get_union_at(db, KILN_VM_DEBUG_LOCATION_TABLE, 3, &loc),
                   KILN_VM_LOCATION_FUSED);
  vector_t fused = kiln_vmfb_flatbuf_table_get_vector(loc, KILN_VM_FUSED_LOC_LOCATIONS);
  assert_int_equal(kiln_vmfb_flatbuf_vector_get_int(fused, 1), 1);
  table_t map = vec_table(db, KILN_VM_DEBUG_FUNCTIONS, 0);
  assert_str(map, KILN_VM_SOURCE_MAP_LOCAL_NAME, "main");
  vector_t locs = kiln_vmfb_flatbuf_table_get_vector(map, KILN_VM_SOURCE_MAP_LOCATIONS);
  assert_int_equal(kiln_vmfb_flatbuf_vector_count(locs), 2);
  assert_int_equal(kiln_vmfb_flatbuf_load_u32(kiln_vmfb_flatbuf_vector_get_struct(locs, 1)), 4);
}

static void test_bytecode_module_round_trip(void **state) {
  (void)state;
  builder_t *b = kiln_vmfb_flatbuf_builder_create();
  ref_t m = build_module(b);
  /* As in a VMFB: 64 bytes of zip header, then the size-prefixed FlatBuffer. */
  kiln_buf_t file;
  kiln_buf_init(&file);
  for (int i = 0; i < 64; i++) kiln_buf_append_char(&file, 'Z');
  kiln_vmfb_flatbuf_finish_options_t o = {
      .identifier = KILN_VM_FILE_IDENTIFIER, .size_prefixed = true, .base_alignment = 64};
  assert_ok(kiln_vmfb_flatbuf_builder_finish(b, m, &o, &file));
  const uint8_t *fb = (const uint8_t *)file.data + 64;
  size_t len = file.len - 64;
  assert_memory_equal(file.data + 72, "IREE", 4); /* size prefix at 64, identifier at 72 */
  assert_int_equal(kiln_vmfb_flatbuf_load_u32(fb), len - 4);
  kiln_vmfb_flatbuf_verify_options_t vo = {.identifier = KILN_VM_FILE_IDENTIFIER, .size_prefixed = true};
  assert_ok(kiln_vmfb_flatbuf_verify(fb, len, &vo, &kiln_vmfb_schema_vm_bytecode_module_def));
  check_module(kiln_vmfb_flatbuf_root(fb, len, true, &kiln_vmfb_schema_vm_bytecode_module_def), fb, true);
  /* IREE's loader hands flatcc the bytes after the size prefix; flatcc then checks
   * scalar fields against absolute addresses. Alignment here is relative to `data`,
   * so from there the u64 fields sit at 4 mod 8: verify from the prefix. The
   * reader does not care. */
  vo.size_prefixed = false;
  assert_fails(kiln_vmfb_flatbuf_verify(fb + 4, len - 4, &vo, &kiln_vmfb_schema_vm_bytecode_module_def),
               KILN_STATUS_INVALID_ARGUMENT, "external_data_offset: field at");
  check_module(kiln_vmfb_flatbuf_root(fb + 4, len - 4, false, &kiln_vmfb_schema_vm_bytecode_module_def), fb,
               true);
  /* A CUDA executable is not a module. */
  vo = (kiln_vmfb_flatbuf_verify_options_t){.identifier = KILN_CUDA_FILE_IDENTIFIER, .size_prefixed = true};
  assert_fails(kiln_vmfb_flatbuf_verify(fb, len, &vo, &kiln_vmfb_schema_vm_bytecode_module_def),
               KILN_STATUS_INVALID_ARGUMENT, "expected \"CDA1\"");
  kiln_buf_deinit(&file);

  /* The name is required. */
  kiln_vmfb_flatbuf_builder_set_ref(b, m, KILN_VM_MODULE_NAME, 0);
  kiln_buf_init(&file);
  assert_fails(kiln_vmfb_flatbuf_builder_finish(b, m, &o, &file), KILN_STATUS_INVALID_ARGUMENT,
               "BytecodeModuleDef.name is required");
  kiln_buf_deinit(&file);
  kiln_vmfb_flatbuf_builder_destroy(b);
}

/* ---- GPU executables ---- */

static ref_t debug_export(builder_t *b, const char *name) {
  ref_t loc = table(b, &kiln_vmfb_schema_hal_debug_file_line_loc_def);
  set_str(b, loc, KILN_HAL_DEBUG_FILE_LINE_LOC_FILENAME, "model.mlir");
  kiln_vmfb_flatbuf_builder_set_int(b, loc, KILN_HAL_DEBUG_FILE_LINE_LOC_LINE, 10);
  ref_t stage = table(b, &kiln_vmfb_schema_hal_debug_stage_location_def);
  set_str(b, stage, KILN_HAL_DEBUG_STAGE_LOCATION_STAGE, "input");
  kiln_vmfb_flatbuf_builder_set_ref(b, stage, KILN_HAL_DEBUG_STAGE_LOCATION_LOCATION, loc);
  ref_t d = table(b, &kiln_vmfb_schema_hal_debug_export_def);
  set_str(b, d, KILN_HAL_DEBUG_EXPORT_NAME, name);
  kiln_vmfb_flatbuf_builder_set_ref(b, d, KILN_HAL_DEBUG_EXPORT_LOCATION, loc); /* shared */
  set_vec(b, d, KILN_HAL_DEBUG_EXPORT_STAGE_LOCATIONS, &stage, 1);
  return d;
}

static void check_debug_export(table_t d, const char *name) {
  assert_str(d, KILN_HAL_DEBUG_EXPORT_NAME, name);
  table_t loc = kiln_vmfb_flatbuf_table_get_table(d, KILN_HAL_DEBUG_EXPORT_LOCATION);
  assert_str(loc, KILN_HAL_DEBUG_FILE_LINE_LOC_FILENAME, "model.mlir");
  assert_int_equal(kiln_vmfb_flatbuf_table_get_int(loc, KILN_HAL_DEBUG_FILE_LINE_LOC_LINE), 10);
  table_t stage = vec_table(d, KILN_HAL_DEBUG_EXPORT_STAGE_LOCATIONS, 0);
  assert_str(stage, KILN_HAL_DEBUG_STAGE_LOCATION_STAGE, "input");
  loc = kiln_vmfb_flatbuf_table_get_table(stage, KILN_HAL_DEBUG_STAGE_LOCATION_LOCATION);
  assert_str(loc, KILN_HAL_DEBUG_FILE_LINE_LOC_FILENAME, "model.mlir");
  assert_int_equal(kiln_vmfb_flatbuf_table_get_int(loc, KILN_HAL_DEBUG_FILE_LINE_LOC_LINE), 10);
}

static ref_t source_file(builder_t *b) {
  ref_t f = table(b, &kiln_vmfb_schema_hal_debug_source_file_def);
  set_str(b, f, KILN_HAL_DEBUG_SOURCE_FILE_PATH, "model.mlir");
  kiln_vmfb_flatbuf_builder_set_ref(b, f, KILN_HAL_DEBUG_SOURCE_FILE_CONTENT,
                                    kiln_vmfb_flatbuf_builder_add_bytes(b, "func.func @main", 15, 0));
  return f;
}

static void check_source_file(table_t exe, uint16_t slot) {
  table_t f = vec_table(exe, slot, 0);
  assert_str(f, KILN_HAL_DEBUG_SOURCE_FILE_PATH, "model.mlir");
  vector_t c = kiln_vmfb_flatbuf_table_get_vector(f, KILN_HAL_DEBUG_SOURCE_FILE_CONTENT);
  assert_int_equal(kiln_vmfb_flatbuf_vector_count(c), 15);
  assert_memory_equal(kiln_vmfb_flatbuf_vector_data(c), "func.func @main", 15);
}

static const char ptx[] = ".version 8.7\n.target sm_89\n.address_size 64\n";

/* Builds a CUDA (hip = false) or HIP ExecutableDef: their shapes are identical. */
static ref_t build_gpu_executable(builder_t *b, bool hip) {
  const kiln_vmfb_flatbuf_table_desc_t *export_desc =
      hip ? &kiln_vmfb_schema_hip_export_def : &kiln_vmfb_schema_cuda_export_def;
  ref_t exports[2];
  for (int i = 0; i < 2; i++) {
    ref_t e = exports[i] = table(b, export_desc);
    kiln_vmfb_flatbuf_builder_set_uint(b, e, KILN_CUDA_EXPORT_MODULE_ORDINAL, (uint64_t)i);
    set_str(b, e, KILN_CUDA_EXPORT_KERNEL_NAME, i ? "main_dispatch_1" : "main_dispatch_0");
    uint8_t dims[KILN_GPU_BLOCK_DIMS_SIZEOF];
    kiln_vmfb_flatbuf_store_u32(dims + KILN_GPU_BLOCK_DIMS_X, i ? 32u : 64u);
    kiln_vmfb_flatbuf_store_u32(dims + KILN_GPU_BLOCK_DIMS_Y, i ? 4u : 1u);
    kiln_vmfb_flatbuf_store_u32(dims + KILN_GPU_BLOCK_DIMS_Z, 1);
    kiln_vmfb_flatbuf_builder_set_struct(b, e, KILN_CUDA_EXPORT_BLOCK_DIMS, dims, sizeof dims);
    if (i == 0) {
      kiln_vmfb_flatbuf_builder_set_uint(b, e, KILN_CUDA_EXPORT_BLOCK_SHARED_MEMORY_SIZE, 1024);
      kiln_vmfb_flatbuf_builder_set_uint(b, e, KILN_CUDA_EXPORT_CONSTANT_COUNT, 2);
      const uint64_t flags[3] = {KILN_GPU_BINDING_READ_ONLY, 0,
                                 KILN_GPU_BINDING_READ_ONLY | KILN_GPU_BINDING_INDIRECT};
      kiln_vmfb_flatbuf_builder_set_ref(b, e, KILN_CUDA_EXPORT_BINDING_FLAGS,
                                        kiln_vmfb_flatbuf_builder_add_scalars(b, KILN_FLATBUF_U64, flags, 3));
      kiln_vmfb_flatbuf_builder_set_ref(b, e, KILN_CUDA_EXPORT_DEBUG_INFO,
                                        debug_export(b, "main_dispatch_0"));
    }
  }
  ref_t modules[2];
  for (int i = 0; i < 2; i++) {
    modules[i] = table(b, hip ? &kiln_vmfb_schema_hip_module_def : &kiln_vmfb_schema_cuda_module_def);
    kiln_vmfb_flatbuf_builder_set_ref(
        b, modules[i], KILN_CUDA_MODULE_PTX_IMAGE,
        kiln_vmfb_flatbuf_builder_add_string(b, ptx, sizeof ptx - 1 - (size_t)i));
  }
  ref_t exe = table(b, hip ? &kiln_vmfb_schema_hip_executable_def : &kiln_vmfb_schema_cuda_executable_def);
  set_vec(b, exe, KILN_CUDA_EXECUTABLE_EXPORTS, exports, 2);
  set_vec(b, exe, KILN_CUDA_EXECUTABLE_MODULES, modules, 2);
  ref_t sf = source_file(b);
  set_vec(b, exe, KILN_CUDA_EXECUTABLE_SOURCE_FILES, &sf, 1);
  return exe;
}

static void check_gpu_executable(table_t exe, const uint8_t *fb) {
  assert_int_equal(vec_count(exe, KILN_CUDA_EXECUTABLE_EXPORTS), 2);
  for (size_t i = 0; i < 2; i++) {
    table_t e = vec_table(exe, KILN_CUDA_EXECUTABLE_EXPORTS, i);
    assert_int_equal(kiln_vmfb_flatbuf_table_get_uint(e, KILN_CUDA_EXPORT_MODULE_ORDINAL), i);
    assert_str(e, KILN_CUDA_EXPORT_KERNEL_NAME, i ? "main_dispatch_1" : "main_dispatch_0");
    const uint8_t *dims = kiln_vmfb_flatbuf_table_get_struct(e, KILN_CUDA_EXPORT_BLOCK_DIMS);
    assert_non_null(dims);
    assert_int_equal(kiln_vmfb_flatbuf_load_u32(dims + KILN_GPU_BLOCK_DIMS_X), i ? 32 : 64);
    assert_int_equal(kiln_vmfb_flatbuf_load_u32(dims + KILN_GPU_BLOCK_DIMS_Y), i ? 4 : 1);
    assert_int_equal(kiln_vmfb_flatbuf_load_u32(dims + KILN_GPU_BLOCK_DIMS_Z), 1);
    assert_int_equal(kiln_vmfb_flatbuf_table_get_uint(e, KILN_CUDA_EXPORT_BLOCK_SHARED_MEMORY_SIZE),
                     i ? 0 : 1024);
    assert_int_equal(kiln_vmfb_flatbuf_table_get_uint(e, KILN_CUDA_EXPORT_CONSTANT_COUNT), i ? 0 : 2);
    vector_t flags = kiln_vmfb_flatbuf_table_get_vector(e, KILN_CUDA_EXPORT_BINDING_FLAGS);
    assert_int_equal(kiln_vmfb_flatbuf_vector_count(flags), i ? 0 : 3);
    if (i == 0) {
      assert_int_equal((size_t)(kiln_vmfb_flatbuf_vector_data(flags) - fb) % 8, 0);
      assert_int_equal(kiln_vmfb_flatbuf_vector_get_uint(flags, 0), KILN_GPU_BINDING_READ_ONLY);
      assert_int_equal(kiln_vmfb_flatbuf_vector_get_uint(flags, 1), 0);
      assert_int_equal(kiln_vmfb_flatbuf_vector_get_uint(flags, 2), 3);
      check_debug_export(kiln_vmfb_flatbuf_table_get_table(e, KILN_CUDA_EXPORT_DEBUG_INFO),
                         "main_dispatch_0");
    } else {
      assert_false(kiln_vmfb_flatbuf_table_has(e, KILN_CUDA_EXPORT_DEBUG_INFO));
    }
  }
  assert_int_equal(vec_count(exe, KILN_CUDA_EXECUTABLE_MODULES), 2);
  size_t len;
  const char *image = kiln_vmfb_flatbuf_table_get_string(vec_table(exe, KILN_CUDA_EXECUTABLE_MODULES, 0),
                                                         KILN_CUDA_MODULE_PTX_IMAGE, &len);
  assert_int_equal(len, sizeof ptx - 1);
  assert_memory_equal(image, ptx, len);
  check_source_file(exe, KILN_CUDA_EXECUTABLE_SOURCE_FILES);
}

static void test_cuda_and_hip_executables(void **state) {
  (void)state;
  for (int hip = 0; hip < 2; hip++) {
    const char *id = hip ? KILN_HIP_FILE_IDENTIFIER : KILN_CUDA_FILE_IDENTIFIER;
    const kiln_vmfb_flatbuf_table_desc_t *root =
        hip ? &kiln_vmfb_schema_hip_executable_def : &kiln_vmfb_schema_cuda_executable_def;
    builder_t *b = kiln_vmfb_flatbuf_builder_create();
    ref_t exe = build_gpu_executable(b, hip);
    kiln_buf_t out;
    kiln_buf_init(&out);
    kiln_vmfb_flatbuf_finish_options_t o = {.identifier = id, .base_alignment = 16};
    assert_ok(kiln_vmfb_flatbuf_builder_finish(b, exe, &o, &out));
    const uint8_t *fb = (const uint8_t *)out.data;
    assert_memory_equal(fb + 4, id, 4);
    kiln_vmfb_flatbuf_verify_options_t vo = {.identifier = id};
    assert_ok(kiln_vmfb_flatbuf_verify(fb, out.len, &vo, root));
    check_gpu_executable(kiln_vmfb_flatbuf_root(fb, out.len, false, root), fb);
    vo.identifier = hip ? KILN_CUDA_FILE_IDENTIFIER : KILN_HIP_FILE_IDENTIFIER;
    assert_fails(kiln_vmfb_flatbuf_verify(fb, out.len, &vo, root), KILN_STATUS_INVALID_ARGUMENT,
                 "file identifier");
    kiln_buf_deinit(&out);
    kiln_vmfb_flatbuf_builder_destroy(b);
  }
}

static ref_t build_vulkan_executable(builder_t *b) {
  uint32_t spirv[5] = {0x07230203u, 0x00010300u, 0, 42, 0};
  ref_t shader = table(b, &kiln_vmfb_schema_vk_shader_module_def);
  kiln_vmfb_flatbuf_builder_set_ref(b, shader, KILN_VK_SHADER_MODULE_SPIRV_CODE,
                                    kiln_vmfb_flatbuf_builder_add_scalars(b, KILN_FLATBUF_U32, spirv, 5));
  ref_t binding = table(b, &kiln_vmfb_schema_vk_descriptor_set_layout_binding_def);
  kiln_vmfb_flatbuf_builder_set_uint(b, binding, KILN_VK_DESCRIPTOR_SET_LAYOUT_BINDING_BINDING, 1);
  kiln_vmfb_flatbuf_builder_set_uint(b, binding, KILN_VK_DESCRIPTOR_SET_LAYOUT_BINDING_DESCRIPTOR_TYPE,
                                     KILN_VK_DESCRIPTOR_TYPE_STORAGE_BUFFER);
  kiln_vmfb_flatbuf_builder_set_uint(b, binding, KILN_VK_DESCRIPTOR_SET_LAYOUT_BINDING_DESCRIPTOR_COUNT, 1);
  kiln_vmfb_flatbuf_builder_set_uint(b, binding, KILN_VK_DESCRIPTOR_SET_LAYOUT_BINDING_STAGE_FLAGS, 0x20);
  ref_t set_layout = table(b, &kiln_vmfb_schema_vk_descriptor_set_layout_def);
  set_vec(b, set_layout, KILN_VK_DESCRIPTOR_SET_LAYOUT_BINDINGS, &binding, 1);
  ref_t layout = table(b, &kiln_vmfb_schema_vk_pipeline_layout_def);
  const uint32_t ordinals[1] = {0};
  kiln_vmfb_flatbuf_builder_set_ref(b, layout, KILN_VK_PIPELINE_LAYOUT_DESCRIPTOR_SET_LAYOUT_ORDINALS,
                                    kiln_vmfb_flatbuf_builder_add_scalars(b, KILN_FLATBUF_U32, ordinals, 1));
  uint8_t range[KILN_VK_PUSH_CONSTANT_RANGE_SIZEOF];
  kiln_vmfb_flatbuf_store_u32(range + KILN_VK_PUSH_CONSTANT_RANGE_STAGE_FLAGS, 0x20);
  kiln_vmfb_flatbuf_store_u32(range + KILN_VK_PUSH_CONSTANT_RANGE_OFFSET, 0);
  kiln_vmfb_flatbuf_store_u32(range + KILN_VK_PUSH_CONSTANT_RANGE_SIZE, 48);
  kiln_vmfb_flatbuf_builder_set_ref(
      b, layout, KILN_VK_PIPELINE_LAYOUT_PUSH_CONSTANT_RANGES,
      kiln_vmfb_flatbuf_builder_add_structs(b, range, 1, KILN_VK_PUSH_CONSTANT_RANGE_SIZEOF,
                                            KILN_VK_PUSH_CONSTANT_RANGE_ALIGNOF));
  ref_t bda = table(b, &kiln_vmfb_schema_vk_bda_dispatch_layout_def);
  kiln_vmfb_flatbuf_builder_set_uint(b, bda, KILN_VK_BDA_LAYOUT_CONSTANT_COUNT, 4);
  kiln_vmfb_flatbuf_builder_set_uint(b, bda, KILN_VK_BDA_LAYOUT_ROOT_PUSH_CONSTANT_LENGTH, 32); /* default */
  ref_t bda_binding = table(b, &kiln_vmfb_schema_vk_bda_binding_def);
  kiln_vmfb_flatbuf_builder_set_uint(b, bda_binding, KILN_VK_BDA_BINDING_MINIMUM_LENGTH, 1u << 20);
  set_vec(b, bda, KILN_VK_BDA_LAYOUT_BINDINGS, &bda_binding, 1);
  ref_t pipeline = table(b, &kiln_vmfb_schema_vk_pipeline_def);
  set_str(b, pipeline, KILN_VK_PIPELINE_ENTRY_POINT, "main_dispatch_0");
  kiln_vmfb_flatbuf_builder_set_uint(b, pipeline, KILN_VK_PIPELINE_SUBGROUP_SIZE, 16);
  kiln_vmfb_flatbuf_builder_set_uint(b, pipeline, KILN_VK_PIPELINE_DISPATCH_ABI, KILN_VK_DISPATCH_ABI_BDA_V1);
  kiln_vmfb_flatbuf_builder_set_ref(b, pipeline, KILN_VK_PIPELINE_BDA_DISPATCH_LAYOUT, bda);
  kiln_vmfb_flatbuf_builder_set_ref(b, pipeline, KILN_VK_PIPELINE_DEBUG_INFO, debug_export(b, "d0"));
  ref_t exe = table(b, &kiln_vmfb_schema_vk_executable_def);
  set_vec(b, exe, KILN_VK_EXECUTABLE_PIPELINES, &pipeline, 1);
  set_vec(b, exe, KILN_VK_EXECUTABLE_DESCRIPTOR_SET_LAYOUTS, &set_layout, 1);
  set_vec(b, exe, KILN_VK_EXECUTABLE_PIPELINE_LAYOUTS, &layout, 1);
  set_vec(b, exe, KILN_VK_EXECUTABLE_SHADER_MODULES, &shader, 1);
  ref_t sf = source_file(b);
  set_vec(b, exe, KILN_VK_EXECUTABLE_SOURCE_FILES, &sf, 1);
  return exe;
}

static void check_vulkan_executable(table_t t, const uint8_t *fb) {
  vector_t code = kiln_vmfb_flatbuf_table_get_vector(vec_table(t, KILN_VK_EXECUTABLE_SHADER_MODULES, 0),
                                                     KILN_VK_SHADER_MODULE_SPIRV_CODE);
  assert_int_equal(kiln_vmfb_flatbuf_vector_count(code), 5);
  assert_int_equal((size_t)(kiln_vmfb_flatbuf_vector_data(code) - fb) % 4, 0);
  assert_int_equal(kiln_vmfb_flatbuf_vector_get_uint(code, 0), 0x07230203u);
  assert_int_equal(kiln_vmfb_flatbuf_vector_get_uint(code, 3), 42);
  table_t p = vec_table(t, KILN_VK_EXECUTABLE_PIPELINES, 0);
  assert_str(p, KILN_VK_PIPELINE_ENTRY_POINT, "main_dispatch_0");
  assert_int_equal(kiln_vmfb_flatbuf_table_get_uint(p, KILN_VK_PIPELINE_SHADER_MODULE_ORDINAL), 0);
  assert_int_equal(kiln_vmfb_flatbuf_table_get_uint(p, KILN_VK_PIPELINE_SUBGROUP_SIZE), 16);
  assert_int_equal(kiln_vmfb_flatbuf_table_get_uint(p, KILN_VK_PIPELINE_DISPATCH_ABI),
                   KILN_VK_DISPATCH_ABI_BDA_V1);
  check_debug_export(kiln_vmfb_flatbuf_table_get_table(p, KILN_VK_PIPELINE_DEBUG_INFO), "d0");
  table_t l = kiln_vmfb_flatbuf_table_get_table(p, KILN_VK_PIPELINE_BDA_DISPATCH_LAYOUT);
  /* Absent fields read as the schema's nonzero defaults. */
  assert_false(kiln_vmfb_flatbuf_table_has(l, KILN_VK_BDA_LAYOUT_ROOT_PUSH_CONSTANT_LENGTH));
  assert_int_equal(kiln_vmfb_flatbuf_table_get_uint(l, KILN_VK_BDA_LAYOUT_ABI_VERSION), 1);
  assert_int_equal(kiln_vmfb_flatbuf_table_get_uint(l, KILN_VK_BDA_LAYOUT_ROOT_PUSH_CONSTANT_OFFSET), 0);
  assert_int_equal(kiln_vmfb_flatbuf_table_get_uint(l, KILN_VK_BDA_LAYOUT_ROOT_PUSH_CONSTANT_LENGTH), 32);
  assert_int_equal(kiln_vmfb_flatbuf_table_get_uint(l, KILN_VK_BDA_LAYOUT_CONSTANT_PUSH_CONSTANT_OFFSET), 32);
  assert_int_equal(kiln_vmfb_flatbuf_table_get_uint(l, KILN_VK_BDA_LAYOUT_CONSTANT_COUNT), 4);
  assert_int_equal(kiln_vmfb_flatbuf_table_get_uint(l, KILN_VK_BDA_LAYOUT_BINDING_TABLE_ENTRY_TYPE),
                   KILN_VK_BDA_ENTRY_ADDRESS64);
  table_t bb = vec_table(l, KILN_VK_BDA_LAYOUT_BINDINGS, 0);
  assert_int_equal(kiln_vmfb_flatbuf_table_get_uint(bb, KILN_VK_BDA_BINDING_MINIMUM_ALIGNMENT), 1);
  assert_int_equal(kiln_vmfb_flatbuf_table_get_uint(bb, KILN_VK_BDA_BINDING_MINIMUM_LENGTH), 1u << 20);
  table_t bind = vec_table(vec_table(t, KILN_VK_EXECUTABLE_DESCRIPTOR_SET_LAYOUTS, 0),
                           KILN_VK_DESCRIPTOR_SET_LAYOUT_BINDINGS, 0);
  assert_int_equal(kiln_vmfb_flatbuf_table_get_uint(bind, KILN_VK_DESCRIPTOR_SET_LAYOUT_BINDING_BINDING), 1);
  assert_int_equal(
      kiln_vmfb_flatbuf_table_get_uint(bind, KILN_VK_DESCRIPTOR_SET_LAYOUT_BINDING_DESCRIPTOR_TYPE),
      KILN_VK_DESCRIPTOR_TYPE_STORAGE_BUFFER);
  table_t pl = vec_table(t, KILN_VK_EXECUTABLE_PIPELINE_LAYOUTS, 0);
  vector_t ranges = kiln_vmfb_flatbuf_table_get_vector(pl, KILN_VK_PIPELINE_LAYOUT_PUSH_CONSTANT_RANGES);
  assert_int_equal(kiln_vmfb_flatbuf_load_u32(kiln_vmfb_flatbuf_vector_get_struct(ranges, 0) +
                                              KILN_VK_PUSH_CONSTANT_RANGE_SIZE),
                   48);
  check_source_file(t, KILN_VK_EXECUTABLE_SOURCE_FILES);
}

static void test_vulkan_executable(void **state) {
  (void)state;
  builder_t *b = kiln_vmfb_flatbuf_builder_create();
  ref_t exe = build_vulkan_executable(b);
  kiln_buf_t out;
  kiln_buf_init(&out);
  kiln_vmfb_flatbuf_finish_options_t o = {.identifier = KILN_VK_FILE_IDENTIFIER};
  assert_ok(kiln_vmfb_flatbuf_builder_finish(b, exe, &o, &out));
  kiln_vmfb_flatbuf_verify_options_t vo = {.identifier = KILN_VK_FILE_IDENTIFIER};
  assert_ok(kiln_vmfb_flatbuf_verify(out.data, out.len, &vo, &kiln_vmfb_schema_vk_executable_def));
  check_vulkan_executable(
      kiln_vmfb_flatbuf_root(out.data, out.len, false, &kiln_vmfb_schema_vk_executable_def),
      (const uint8_t *)out.data);
  kiln_buf_deinit(&out);
  kiln_vmfb_flatbuf_builder_destroy(b);
}

/* ---- buffers from an independent writer ----
 *
 * Built by flatc 2.0.8 (Debian's flatbuffers-compiler, C++ builder) from IREE's
 * .fbs at the commit named in schema.h, with the JSON that flatc printed for this
 * file's build_module / build_gpu_executable / build_vulkan_executable output:
 *   flatc -b --size-prefixed bytecode_module_def.fbs module.json  (minus
 *     debug_database: flatc's JSON path has no vectors of unions)
 *   flatc -b cuda_executable_def.fbs cuda.json
 *   flatc -b vulkan_executable_def.fbs vulkan.json
 * flatc lays buffers out back to front, places vtables its own way and shares
 * them across tables, so these check the verifier and reader against a writer
 * that is not ours. (The reverse, flatc and its C++ verifier reading our output,
 * was checked by hand when the schemas were written.) */
static const uint8_t flatc_module[952] = {
    0xb4, 0x03, 0x00, 0x00, 0x30, 0x00, 0x00, 0x00, 0x49, 0x52, 0x45, 0x45, 0x00, 0x00, 0x00, 0x00, 0x00,
    0x00, 0x22, 0x00, 0x40, 0x00, 0x04, 0x00, 0x08, 0x00, 0x0c, 0x00, 0x10, 0x00, 0x14, 0x00, 0x18, 0x00,
    0x1c, 0x00, 0x20, 0x00, 0x24, 0x00, 0x28, 0x00, 0x2c, 0x00, 0x30, 0x00, 0x34, 0x00, 0x38, 0x00, 0x3c,
    0x00, 0x22, 0x00, 0x00, 0x00, 0x74, 0x03, 0x00, 0x00, 0x03, 0x00, 0x00, 0x00, 0x03, 0x00, 0x00, 0x00,
    0xfc, 0x02, 0x00, 0x00, 0xb4, 0x02, 0x00, 0x00, 0x6c, 0x02, 0x00, 0x00, 0xc8, 0x01, 0x00, 0x00, 0xa4,
    0x01, 0x00, 0x00, 0x0c, 0x01, 0x00, 0x00, 0x84, 0x00, 0x00, 0x00, 0x70, 0x00, 0x00, 0x00, 0x60, 0x00,
    0x00, 0x00, 0x30, 0x00, 0x00, 0x00, 0x00, 0x00, 0x11, 0x00, 0x04, 0x00, 0x00, 0x00, 0x20, 0x00, 0x00,
    0x00, 0xa0, 0xa1, 0xa2, 0xa3, 0xa4, 0xa5, 0xa6, 0xa7, 0xa8, 0xa9, 0xaa, 0xab, 0xac, 0xad, 0xae, 0xaf,
    0xb0, 0xb1, 0xb2, 0xb3, 0xb4, 0xb5, 0xb6, 0xb7, 0xb8, 0xb9, 0xba, 0xbb, 0xbc, 0xbd, 0xbe, 0xbf, 0x02,
    0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x0c, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00,
    0x01, 0x00, 0x03, 0x00, 0x02, 0x00, 0x0c, 0x00, 0x00, 0x00, 0x14, 0x00, 0x00, 0x00, 0x01, 0x00, 0x00,
    0x00, 0x00, 0x00, 0x02, 0x00, 0x04, 0x00, 0x00, 0x00, 0x4c, 0xfd, 0xff, 0xff, 0x10, 0x00, 0x00, 0x00,
    0x02, 0x00, 0x00, 0x00, 0x01, 0x00, 0x00, 0x00, 0x04, 0x00, 0x00, 0x00, 0xb6, 0xfd, 0xff, 0xff, 0x00,
    0x01, 0x00, 0x00, 0x02, 0x00, 0x00, 0x00, 0x4c, 0x00, 0x00, 0x00, 0x14, 0x00, 0x00, 0x00, 0x00, 0x00,
    0x0e, 0x00, 0x20, 0x00, 0x07, 0x00, 0x08, 0x00, 0x00, 0x00, 0x0c, 0x00, 0x14, 0x00, 0x0e, 0x00, 0x00,
    0x00, 0x00, 0x00, 0x00, 0x01, 0x1c, 0x00, 0x00, 0x00, 0x40, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00,
    0x00, 0xf2, 0x05, 0x2a, 0x01, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x04, 0x00, 0x06, 0x00, 0x04,
    0x00, 0x00, 0x00, 0x00, 0x00, 0x0a, 0x00, 0x08, 0x00, 0x00, 0x00, 0x00, 0x00, 0x04, 0x00, 0x0a, 0x00,
    0x00, 0x00, 0x04, 0x00, 0x00, 0x00, 0x28, 0x00, 0x00, 0x00, 0x01, 0x02, 0x03, 0x04, 0x05, 0x06, 0x07,
    0x08, 0x09, 0x0a, 0x0b, 0x0c, 0x0d, 0x0e, 0x0f, 0x10, 0x11, 0x12, 0x13, 0x14, 0x15, 0x16, 0x17, 0x18,
    0x19, 0x1a, 0x1b, 0x1c, 0x1d, 0x1e, 0x1f, 0x20, 0x21, 0x22, 0x23, 0x24, 0x25, 0x26, 0x27, 0x28, 0x02,
    0x00, 0x00, 0x00, 0x7c, 0x00, 0x00, 0x00, 0x04, 0x00, 0x00, 0x00, 0xf8, 0xfd, 0xff, 0xff, 0x64, 0x00,
    0x00, 0x00, 0x04, 0x00, 0x00, 0x00, 0x01, 0x00, 0x00, 0x00, 0x04, 0x00, 0x00, 0x00, 0x0c, 0xfe, 0xff,
    0xff, 0x34, 0x00, 0x00, 0x00, 0x04, 0x00, 0x00, 0x00, 0x27, 0x00, 0x00, 0x00, 0x73, 0x79, 0x6e, 0x63,
    0x20, 0x66, 0x75, 0x6e, 0x63, 0x20, 0x40, 0x6d, 0x61, 0x69, 0x6e, 0x28, 0x25, 0x69, 0x6e, 0x70, 0x75,
    0x74, 0x30, 0x3a, 0x20, 0x74, 0x65, 0x6e, 0x73, 0x6f, 0x72, 0x3c, 0x34, 0x78, 0x66, 0x33, 0x32, 0x3e,
    0x29, 0x00, 0x14, 0x00, 0x00, 0x00, 0x69, 0x72, 0x65, 0x65, 0x2e, 0x61, 0x62, 0x69, 0x2e, 0x64, 0x65,
    0x63, 0x6c, 0x61, 0x72, 0x61, 0x74, 0x69, 0x6f, 0x6e, 0x00, 0x00, 0x00, 0x00, 0x04, 0x00, 0x00, 0x00,
    0x30, 0x72, 0x5f, 0x72, 0x00, 0x00, 0x00, 0x00, 0xc2, 0xfe, 0xff, 0xff, 0x04, 0x00, 0x00, 0x00, 0x04,
    0x00, 0x00, 0x00, 0x30, 0x76, 0x5f, 0x76, 0x00, 0x00, 0x00, 0x00, 0x01, 0x00, 0x00, 0x00, 0x04, 0x00,
    0x00, 0x00, 0x88, 0xfe, 0xff, 0xff, 0x08, 0x00, 0x00, 0x00, 0x01, 0x00, 0x00, 0x00, 0x04, 0x00, 0x00,
    0x00, 0x6d, 0x61, 0x69, 0x6e, 0x00, 0x00, 0x00, 0x00, 0x02, 0x00, 0x00, 0x00, 0x5c, 0x00, 0x00, 0x00,
    0x10, 0x00, 0x00, 0x00, 0x00, 0x00, 0x0a, 0x00, 0x10, 0x00, 0x04, 0x00, 0x08, 0x00, 0x0c, 0x00, 0x0a,
    0x00, 0x00, 0x00, 0x20, 0x00, 0x00, 0x00, 0x08, 0x00, 0x00, 0x00, 0x02, 0x00, 0x00, 0x00, 0x1e, 0xff,
    0xff, 0xff, 0x04, 0x00, 0x00, 0x00, 0x05, 0x00, 0x00, 0x00, 0x30, 0x72, 0x72, 0x5f, 0x49, 0x00, 0x00,
    0x00, 0x1e, 0x00, 0x00, 0x00, 0x68, 0x61, 0x6c, 0x2e, 0x65, 0x78, 0x65, 0x63, 0x75, 0x74, 0x61, 0x62,
    0x6c, 0x65, 0x2e, 0x6c, 0x6f, 0x6f, 0x6b, 0x75, 0x70, 0x2e, 0x66, 0x75, 0x6e, 0x63, 0x74, 0x69, 0x6f,
    0x6e, 0x00, 0x00, 0x00, 0xff, 0xff, 0xff, 0x20, 0x00, 0x00, 0x00, 0x04, 0x00, 0x00, 0x00, 0x62, 0xff,
    0xff, 0xff, 0x04, 0x00, 0x00, 0x00, 0x08, 0x00, 0x00, 0x00, 0x30, 0x72, 0x49, 0x72, 0x72, 0x72, 0x5f,
    0x72, 0x00, 0x00, 0x00, 0x00, 0x15, 0x00, 0x00, 0x00, 0x68, 0x61, 0x6c, 0x2e, 0x65, 0x78, 0x65, 0x63,
    0x75, 0x74, 0x61, 0x62, 0x6c, 0x65, 0x2e, 0x63, 0x72, 0x65, 0x61, 0x74, 0x65, 0x00, 0x00, 0x00, 0x02,
    0x00, 0x00, 0x00, 0x2c, 0x00, 0x00, 0x00, 0x10, 0x00, 0x00, 0x00, 0x00, 0x00, 0x0a, 0x00, 0x0c, 0x00,
    0x04, 0x00, 0x00, 0x00, 0x08, 0x00, 0x0a, 0x00, 0x00, 0x00, 0x08, 0x00, 0x00, 0x00, 0x02, 0x00, 0x00,
    0x00, 0x04, 0x00, 0x00, 0x00, 0x76, 0x6d, 0x76, 0x78, 0x00, 0x00, 0x00, 0x00, 0x70, 0xff, 0xff, 0xff,
    0x08, 0x00, 0x00, 0x00, 0x07, 0x00, 0x00, 0x00, 0x03, 0x00, 0x00, 0x00, 0x68, 0x61, 0x6c, 0x00, 0x02,
    0x00, 0x00, 0x00, 0x28, 0x00, 0x00, 0x00, 0x04, 0x00, 0x00, 0x00, 0xe6, 0xff, 0xff, 0xff, 0x04, 0x00,
    0x00, 0x00, 0x0a, 0x00, 0x00, 0x00, 0x68, 0x61, 0x6c, 0x2e, 0x64, 0x65, 0x76, 0x69, 0x63, 0x65, 0x00,
    0x00, 0x00, 0x00, 0x06, 0x00, 0x08, 0x00, 0x04, 0x00, 0x06, 0x00, 0x00, 0x00, 0x04, 0x00, 0x00, 0x00,
    0x0a, 0x00, 0x00, 0x00, 0x68, 0x61, 0x6c, 0x2e, 0x62, 0x75, 0x66, 0x66, 0x65, 0x72, 0x00, 0x00, 0x02,
    0x00, 0x00, 0x00, 0x3c, 0x00, 0x00, 0x00, 0x04, 0x00, 0x00, 0x00, 0xd4, 0xff, 0xff, 0xff, 0x18, 0x00,
    0x00, 0x00, 0x04, 0x00, 0x00, 0x00, 0x09, 0x00, 0x00, 0x00, 0x73, 0x68, 0x61, 0x32, 0x35, 0x36, 0x3a,
    0x61, 0x62, 0x00, 0x00, 0x00, 0x0b, 0x00, 0x00, 0x00, 0x6b, 0x69, 0x6c, 0x6e, 0x2e, 0x73, 0x6f, 0x75,
    0x72, 0x63, 0x65, 0x00, 0x08, 0x00, 0x0c, 0x00, 0x04, 0x00, 0x08, 0x00, 0x08, 0x00, 0x00, 0x00, 0x14,
    0x00, 0x00, 0x00, 0x04, 0x00, 0x00, 0x00, 0x05, 0x00, 0x00, 0x00, 0x30, 0x2e, 0x31, 0x2e, 0x30, 0x00,
    0x00, 0x00, 0x0c, 0x00, 0x00, 0x00, 0x6b, 0x69, 0x6c, 0x6e, 0x2e, 0x76, 0x65, 0x72, 0x73, 0x69, 0x6f,
    0x6e, 0x00, 0x00, 0x00, 0x00, 0x06, 0x00, 0x00, 0x00, 0x6d, 0x6f, 0x64, 0x75, 0x6c, 0x65, 0x00, 0x00,
};

static const uint8_t flatc_cuda[536] = {
    0x08, 0x00, 0x00, 0x00, 0x43, 0x44, 0x41, 0x31, 0xb2, 0xfe, 0xff, 0xff, 0xcc, 0x00, 0x00, 0x00, 0x40,
    0x00, 0x00, 0x00, 0x04, 0x00, 0x00, 0x00, 0x01, 0x00, 0x00, 0x00, 0x04, 0x00, 0x00, 0x00, 0x74, 0xfe,
    0xff, 0xff, 0x1c, 0x00, 0x00, 0x00, 0x04, 0x00, 0x00, 0x00, 0x0f, 0x00, 0x00, 0x00, 0x66, 0x75, 0x6e,
    0x63, 0x2e, 0x66, 0x75, 0x6e, 0x63, 0x20, 0x40, 0x6d, 0x61, 0x69, 0x6e, 0x00, 0x0a, 0x00, 0x00, 0x00,
    0x6d, 0x6f, 0x64, 0x65, 0x6c, 0x2e, 0x6d, 0x6c, 0x69, 0x72, 0x00, 0x00, 0x02, 0x00, 0x00, 0x00, 0x48,
    0x00, 0x00, 0x00, 0x04, 0x00, 0x00, 0x00, 0xc6, 0xff, 0xff, 0xff, 0x04, 0x00, 0x00, 0x00, 0x2b, 0x00,
    0x00, 0x00, 0x2e, 0x76, 0x65, 0x72, 0x73, 0x69, 0x6f, 0x6e, 0x20, 0x38, 0x2e, 0x37, 0x0a, 0x2e, 0x74,
    0x61, 0x72, 0x67, 0x65, 0x74, 0x20, 0x73, 0x6d, 0x5f, 0x38, 0x39, 0x0a, 0x2e, 0x61, 0x64, 0x64, 0x72,
    0x65, 0x73, 0x73, 0x5f, 0x73, 0x69, 0x7a, 0x65, 0x20, 0x36, 0x34, 0x00, 0x00, 0x00, 0x06, 0x00, 0x08,
    0x00, 0x04, 0x00, 0x06, 0x00, 0x00, 0x00, 0x04, 0x00, 0x00, 0x00, 0x2c, 0x00, 0x00, 0x00, 0x2e, 0x76,
    0x65, 0x72, 0x73, 0x69, 0x6f, 0x6e, 0x20, 0x38, 0x2e, 0x37, 0x0a, 0x2e, 0x74, 0x61, 0x72, 0x67, 0x65,
    0x74, 0x20, 0x73, 0x6d, 0x5f, 0x38, 0x39, 0x0a, 0x2e, 0x61, 0x64, 0x64, 0x72, 0x65, 0x73, 0x73, 0x5f,
    0x73, 0x69, 0x7a, 0x65, 0x20, 0x36, 0x34, 0x0a, 0x00, 0x00, 0x00, 0x00, 0x02, 0x00, 0x00, 0x00, 0x54,
    0x00, 0x00, 0x00, 0x10, 0x00, 0x00, 0x00, 0x00, 0x00, 0x0a, 0x00, 0x18, 0x00, 0x04, 0x00, 0x08, 0x00,
    0x0c, 0x00, 0x0a, 0x00, 0x00, 0x00, 0x01, 0x00, 0x00, 0x00, 0x10, 0x00, 0x00, 0x00, 0x20, 0x00, 0x00,
    0x00, 0x04, 0x00, 0x00, 0x00, 0x01, 0x00, 0x00, 0x00, 0x0f, 0x00, 0x00, 0x00, 0x6d, 0x61, 0x69, 0x6e,
    0x5f, 0x64, 0x69, 0x73, 0x70, 0x61, 0x74, 0x63, 0x68, 0x5f, 0x31, 0x00, 0x00, 0x00, 0x12, 0x00, 0x26,
    0x00, 0x00, 0x00, 0x04, 0x00, 0x08, 0x00, 0x14, 0x00, 0x18, 0x00, 0x1c, 0x00, 0x20, 0x00, 0x12, 0x00,
    0x00, 0x00, 0xd0, 0x00, 0x00, 0x00, 0x40, 0x00, 0x00, 0x00, 0x01, 0x00, 0x00, 0x00, 0x01, 0x00, 0x00,
    0x00, 0x00, 0x04, 0x00, 0x00, 0x02, 0x00, 0x00, 0x00, 0x98, 0x00, 0x00, 0x00, 0x10, 0x00, 0x00, 0x00,
    0x00, 0x00, 0x0a, 0x00, 0x10, 0x00, 0x04, 0x00, 0x08, 0x00, 0x0c, 0x00, 0x0a, 0x00, 0x00, 0x00, 0x6c,
    0x00, 0x00, 0x00, 0x4c, 0x00, 0x00, 0x00, 0x04, 0x00, 0x00, 0x00, 0x01, 0x00, 0x00, 0x00, 0x04, 0x00,
    0x00, 0x00, 0xcc, 0xff, 0xff, 0xff, 0x24, 0x00, 0x00, 0x00, 0x04, 0x00, 0x00, 0x00, 0xd8, 0xff, 0xff,
    0xff, 0x08, 0x00, 0x00, 0x00, 0x0a, 0x00, 0x00, 0x00, 0x0a, 0x00, 0x00, 0x00, 0x6d, 0x6f, 0x64, 0x65,
    0x6c, 0x2e, 0x6d, 0x6c, 0x69, 0x72, 0x00, 0x00, 0x05, 0x00, 0x00, 0x00, 0x69, 0x6e, 0x70, 0x75, 0x74,
    0x00, 0x00, 0x00, 0x08, 0x00, 0x0c, 0x00, 0x04, 0x00, 0x08, 0x00, 0x08, 0x00, 0x00, 0x00, 0x08, 0x00,
    0x00, 0x00, 0x0a, 0x00, 0x00, 0x00, 0x0a, 0x00, 0x00, 0x00, 0x6d, 0x6f, 0x64, 0x65, 0x6c, 0x2e, 0x6d,
    0x6c, 0x69, 0x72, 0x00, 0x00, 0x0f, 0x00, 0x00, 0x00, 0x6d, 0x61, 0x69, 0x6e, 0x5f, 0x64, 0x69, 0x73,
    0x70, 0x61, 0x74, 0x63, 0x68, 0x5f, 0x30, 0x00, 0x03, 0x00, 0x00, 0x00, 0x01, 0x00, 0x00, 0x00, 0x00,
    0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x03, 0x00, 0x00, 0x00, 0x00, 0x00,
    0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x0f, 0x00, 0x00, 0x00, 0x6d, 0x61, 0x69, 0x6e, 0x5f, 0x64, 0x69,
    0x73, 0x70, 0x61, 0x74, 0x63, 0x68, 0x5f, 0x30, 0x00,
};

static const uint8_t flatc_vulkan[520] = {
    0x1c, 0x00, 0x00, 0x00, 0x56, 0x4b, 0x45, 0x31, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x0e, 0x00, 0x18,
    0x00, 0x04, 0x00, 0x08, 0x00, 0x0c, 0x00, 0x10, 0x00, 0x14, 0x00, 0x0e, 0x00, 0x00, 0x00, 0xe0, 0x00,
    0x00, 0x00, 0x9c, 0x00, 0x00, 0x00, 0x6c, 0x00, 0x00, 0x00, 0x40, 0x00, 0x00, 0x00, 0x04, 0x00, 0x00,
    0x00, 0x01, 0x00, 0x00, 0x00, 0x04, 0x00, 0x00, 0x00, 0x74, 0xfe, 0xff, 0xff, 0x1c, 0x00, 0x00, 0x00,
    0x04, 0x00, 0x00, 0x00, 0x0f, 0x00, 0x00, 0x00, 0x66, 0x75, 0x6e, 0x63, 0x2e, 0x66, 0x75, 0x6e, 0x63,
    0x20, 0x40, 0x6d, 0x61, 0x69, 0x6e, 0x00, 0x0a, 0x00, 0x00, 0x00, 0x6d, 0x6f, 0x64, 0x65, 0x6c, 0x2e,
    0x6d, 0x6c, 0x69, 0x72, 0x00, 0x00, 0x01, 0x00, 0x00, 0x00, 0x04, 0x00, 0x00, 0x00, 0xaa, 0xff, 0xff,
    0xff, 0x04, 0x00, 0x00, 0x00, 0x05, 0x00, 0x00, 0x00, 0x03, 0x02, 0x23, 0x07, 0x00, 0x03, 0x01, 0x00,
    0x00, 0x00, 0x00, 0x00, 0x2a, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x01, 0x00, 0x00, 0x00, 0x04,
    0x00, 0x00, 0x00, 0xd4, 0xfe, 0xff, 0xff, 0x18, 0x00, 0x00, 0x00, 0x04, 0x00, 0x00, 0x00, 0x01, 0x00,
    0x00, 0x00, 0x20, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x30, 0x00, 0x00, 0x00, 0x01, 0x00, 0x00,
    0x00, 0x00, 0x00, 0x00, 0x00, 0x01, 0x00, 0x00, 0x00, 0x0c, 0x00, 0x00, 0x00, 0x00, 0x00, 0x06, 0x00,
    0x08, 0x00, 0x04, 0x00, 0x06, 0x00, 0x00, 0x00, 0x04, 0x00, 0x00, 0x00, 0x01, 0x00, 0x00, 0x00, 0x10,
    0x00, 0x00, 0x00, 0x0c, 0x00, 0x14, 0x00, 0x04, 0x00, 0x08, 0x00, 0x0c, 0x00, 0x10, 0x00, 0x0c, 0x00,
    0x00, 0x00, 0x01, 0x00, 0x00, 0x00, 0x07, 0x00, 0x00, 0x00, 0x01, 0x00, 0x00, 0x00, 0x20, 0x00, 0x00,
    0x00, 0x01, 0x00, 0x00, 0x00, 0x18, 0x00, 0x00, 0x00, 0x00, 0x00, 0x12, 0x00, 0x18, 0x00, 0x00, 0x00,
    0x08, 0x00, 0x00, 0x00, 0x0c, 0x00, 0x10, 0x00, 0x07, 0x00, 0x14, 0x00, 0x12, 0x00, 0x00, 0x00, 0x00,
    0x00, 0x00, 0x01, 0xd0, 0x00, 0x00, 0x00, 0x10, 0x00, 0x00, 0x00, 0x50, 0x00, 0x00, 0x00, 0x18, 0x00,
    0x00, 0x00, 0x14, 0x00, 0x0c, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x04, 0x00, 0x00,
    0x00, 0x00, 0x00, 0x08, 0x00, 0x14, 0x00, 0x00, 0x00, 0x04, 0x00, 0x00, 0x00, 0x04, 0x00, 0x00, 0x00,
    0x01, 0x00, 0x00, 0x00, 0x0c, 0x00, 0x00, 0x00, 0x08, 0x00, 0x0e, 0x00, 0x00, 0x00, 0x04, 0x00, 0x08,
    0x00, 0x00, 0x00, 0x00, 0x00, 0x10, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x0a, 0x00, 0x10, 0x00,
    0x04, 0x00, 0x08, 0x00, 0x0c, 0x00, 0x0a, 0x00, 0x00, 0x00, 0x6c, 0x00, 0x00, 0x00, 0x4c, 0x00, 0x00,
    0x00, 0x04, 0x00, 0x00, 0x00, 0x01, 0x00, 0x00, 0x00, 0x04, 0x00, 0x00, 0x00, 0xcc, 0xff, 0xff, 0xff,
    0x24, 0x00, 0x00, 0x00, 0x04, 0x00, 0x00, 0x00, 0xd8, 0xff, 0xff, 0xff, 0x08, 0x00, 0x00, 0x00, 0x0a,
    0x00, 0x00, 0x00, 0x0a, 0x00, 0x00, 0x00, 0x6d, 0x6f, 0x64, 0x65, 0x6c, 0x2e, 0x6d, 0x6c, 0x69, 0x72,
    0x00, 0x00, 0x05, 0x00, 0x00, 0x00, 0x69, 0x6e, 0x70, 0x75, 0x74, 0x00, 0x00, 0x00, 0x08, 0x00, 0x0c,
    0x00, 0x04, 0x00, 0x08, 0x00, 0x08, 0x00, 0x00, 0x00, 0x08, 0x00, 0x00, 0x00, 0x0a, 0x00, 0x00, 0x00,
    0x0a, 0x00, 0x00, 0x00, 0x6d, 0x6f, 0x64, 0x65, 0x6c, 0x2e, 0x6d, 0x6c, 0x69, 0x72, 0x00, 0x00, 0x02,
    0x00, 0x00, 0x00, 0x64, 0x30, 0x00, 0x00, 0x0f, 0x00, 0x00, 0x00, 0x6d, 0x61, 0x69, 0x6e, 0x5f, 0x64,
    0x69, 0x73, 0x70, 0x61, 0x74, 0x63, 0x68, 0x5f, 0x30, 0x00,
};

static void test_flatc_built_buffers(void **state) {
  (void)state;
  /* A heap copy of exactly the fixture's size, so ASan sees any overread. */
  uint8_t *p = malloc(sizeof flatc_module);
  assert_non_null(p);
  memcpy(p, flatc_module, sizeof flatc_module);
  kiln_vmfb_flatbuf_verify_options_t vo = {.identifier = KILN_VM_FILE_IDENTIFIER, .size_prefixed = true};
  assert_ok(kiln_vmfb_flatbuf_verify(p, sizeof flatc_module, &vo, &kiln_vmfb_schema_vm_bytecode_module_def));
  check_module(kiln_vmfb_flatbuf_root(p, sizeof flatc_module, true, &kiln_vmfb_schema_vm_bytecode_module_def),
               NULL, false);
  free(p);

  p = malloc(sizeof flatc_cuda);
  assert_non_null(p);
  memcpy(p, flatc_cuda, sizeof flatc_cuda);
  vo = (kiln_vmfb_flatbuf_verify_options_t){.identifier = KILN_CUDA_FILE_IDENTIFIER};
  assert_ok(kiln_vmfb_flatbuf_verify(p, sizeof flatc_cuda, &vo, &kiln_vmfb_schema_cuda_executable_def));
  check_gpu_executable(
      kiln_vmfb_flatbuf_root(p, sizeof flatc_cuda, false, &kiln_vmfb_schema_cuda_executable_def), p);
  free(p);

  p = malloc(sizeof flatc_vulkan);
  assert_non_null(p);
  memcpy(p, flatc_vulkan, sizeof flatc_vulkan);
  vo = (kiln_vmfb_flatbuf_verify_options_t){.identifier = KILN_VK_FILE_IDENTIFIER};
  assert_ok(kiln_vmfb_flatbuf_verify(p, sizeof flatc_vulkan, &vo, &kiln_vmfb_schema_vk_executable_def));
  check_vulkan_executable(
      kiln_vmfb_flatbuf_root(p, sizeof flatc_vulkan, false, &kiln_vmfb_schema_vk_executable_def), p);
  free(p);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_descriptors_are_valid),      cmocka_unit_test(test_slots_match_the_fbs),
      cmocka_unit_test(test_bytecode_module_round_trip), cmocka_unit_test(test_cuda_and_hip_executables),
      cmocka_unit_test(test_vulkan_executable),          cmocka_unit_test(test_flatc_built_buffers),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
