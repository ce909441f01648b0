/* Unit tests for compiler/vmfb/writer.c: the shared sample module
 * (tests/unit/support/vmfb_sample.h: a small hand-made host plan with two inputs,
 * one 4 KiB constant, two dispatches, one result, around fake but well-formed
 * device code for each format: PTX for sm_89, an AMDGPU ELF header for gfx1100,
 * SPIR-V words), written with kiln_vmfb_write and read back with kiln_vmfb_read:
 * every field the reader reports (module, versions, the hal dependency, the HAL
 * 0.7 imports and their calling conventions, exports, rodata, the executable and
 * its kernels, provenance attrs, the embedded source and its digest); the golden
 * layout of the raw bytes (zip local header at 0, size prefix at 64, "IREE" at 72,
 * 64-aligned external rodata holding the executable header; flat "IREE" at 8);
 * determinism (identical bytes for identical input; other provenance of the same
 * length changes only the attr strings and module.fb's CRC); the legacy knobs
 * each doing what they say; kiln_vmfb_executable_serialize for each format,
 * verified against IREE's schema and read back field by field; appending to a
 * non-empty buffer; and the INVALID_ARGUMENT cases (plan and executable
 * disagreeing, SPIR-V not whole words, a kernel naming a missing module, ...).
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/alloc.h"
#include "base/buf.h"
#include "base/digest.h"
#include "base/status.h"
#include "compiler/vmfb/archive.h"
#include "compiler/vmfb/flatbuf.h"
#include "compiler/vmfb/reader.h"
#include "compiler/vmfb/schema.h"
#include "compiler/vmfb/writer.h"
#include "tests/unit/support/testing.h"
#include "tests/unit/support/vmfb_sample.h"

/* ---- helpers ---- */
/* Short names for the FlatBuffer accessors the checks below use. */
typedef kiln_vmfb_flatbuf_table_t table_t;
typedef kiln_vmfb_flatbuf_vector_t vector_t;
static vector_t get_vector(table_t t, uint16_t slot) { return kiln_vmfb_flatbuf_table_get_vector(t, slot); }
static table_t vector_table(vector_t v, size_t i) { return kiln_vmfb_flatbuf_vector_get_table(v, i); }
static uint64_t get_uint(table_t t, uint16_t slot) { return kiln_vmfb_flatbuf_table_get_uint(t, slot); }
static const char *get_string(table_t t, uint16_t slot, size_t *len) {
  return kiln_vmfb_flatbuf_table_get_string(t, slot, len);
}
static size_t count_of(vector_t v) { return kiln_vmfb_flatbuf_vector_count(v); }
static uint64_t vector_uint(vector_t v, size_t i) { return kiln_vmfb_flatbuf_vector_get_uint(v, i); }

#define assert_ok   kiln_test_assert_ok

#define assert_code kiln_test_assert_code

static uint32_t rd32(const uint8_t *p) {
  return (uint32_t)p[0] | ((uint32_t)p[1] << 8) | ((uint32_t)p[2] << 16) | ((uint32_t)p[3] << 24);
}
static uint64_t rd64(const uint8_t *p) { return (uint64_t)rd32(p) | ((uint64_t)rd32(p + 4) << 32); }
static uint64_t align64(uint64_t v) { return (v + 63) & ~(uint64_t)63; }

/* ---- the sample module (tests/unit/support/vmfb_sample.h) ---- */

static const char SOURCE[] =
    "func.func @main(%x: tensor<1024xf32>, %y: tensor<1024xf32>) -> tensor<1024xf32> {\n"
    "  %r = tosa.add %x, %y : (tensor<1024xf32>, tensor<1024xf32>) -> tensor<1024xf32>\n"
    "  return %r : tensor<1024xf32>\n"
    "}\n";

typedef struct fixture_s {
  kiln_test_vmfb_sample_t sample;
  kiln_digest_hex_t source_hex;
  kiln_vmfb_provenance_t prov;
} fixture_t;

static int setup(void **state) {
  fixture_t *f = calloc(1, sizeof *f);
  if (!f) return -1;
  kiln_test_vmfb_sample_init(&f->sample);
  /* mul_kernel's block differs from add_kernel's, so a mixed-up export shows. */
  f->sample.kernels[1].block_size[0] = 32;
  f->sample.kernels[1].block_size[1] = 2;
  kiln_digest_t d;
  kiln_digest_of(SOURCE, sizeof SOURCE - 1, &d);
  kiln_digest_to_hex(&d, &f->source_hex);
  f->prov = (kiln_vmfb_provenance_t){.source_sha256 = f->source_hex.text,
                                     .target = "sm_89",
                                     .flags = "--iree-opt-level=O2",
                                     .compiler = "kiln 0.1 (test)"};
  *state = f;
  return 0;
}

static int teardown(void **state) {
  fixture_t *f = *state;
  kiln_test_vmfb_sample_deinit(&f->sample);
  free(f);
  return 0;
}

static const kiln_vmfb_executable_t *exe_of(fixture_t *f, kiln_vmfb_format_t format) {
  return &f->sample.exe[format - 1];
}

static void write_ok(fixture_t *f, kiln_vmfb_format_t format, const kiln_vmfb_write_options_t *o,
                     kiln_buf_t *out) {
  kiln_buf_init(out);
  assert_ok(kiln_vmfb_write("fixture", &f->sample.plan, exe_of(f, format), o, out));
  assert_true(out->len > 0);
}

static void read_ok(const kiln_buf_t *file, kiln_vmfb_info_t *info) {
  assert_ok(kiln_vmfb_read((const uint8_t *)file->data, file->len, info));
  assert_non_null(info->reason);
}

static const kiln_vmfb_vm_import_t *find_import(const kiln_vmfb_info_t *info, const char *name) {
  for (size_t i = 0; i < info->n_imports; i++) {
    if (strcmp(info->imports[i].full_name, name) == 0) return &info->imports[i];
  }
  return NULL;
}

static const kiln_vmfb_export_t *find_export(const kiln_vmfb_info_t *info, const char *name) {
  for (size_t i = 0; i < info->n_exports; i++) {
    if (strcmp(info->exports[i].name, name) == 0) return &info->exports[i];
  }
  return NULL;
}

/* The root BytecodeModuleDef of a written file (parsed archive in *a). */
static table_t module_root(const kiln_buf_t *file, kiln_vmfb_archive_t *a) {
  assert_ok(kiln_vmfb_archive_parse(file->data, file->len, 0, a));
  kiln_vmfb_flatbuf_verify_options_t vo = {.identifier = "IREE", .size_prefixed = true};
  assert_ok(kiln_vmfb_flatbuf_verify(a->flatbuffer, a->flatbuffer_size, &vo,
                                     &kiln_vmfb_schema_vm_bytecode_module_def));
  table_t root = kiln_vmfb_flatbuf_root(a->flatbuffer, a->flatbuffer_size, true,
                                        &kiln_vmfb_schema_vm_bytecode_module_def);
  assert_true(kiln_vmfb_flatbuf_table_exists(root));
  return root;
}

static kiln_buf_t serialize_ok(const kiln_vmfb_executable_t *exe, bool header) {
  kiln_buf_t b;
  kiln_buf_init(&b);
  assert_ok(kiln_vmfb_executable_serialize(exe, header, &b));
  return b;
}

/* ---- round trips ---- */

static void check_common(fixture_t *f, const kiln_vmfb_info_t *info, kiln_vmfb_format_t format) {
  assert_int_equal(info->cls, KILN_VMFB_CLASS_CURRENT);
  assert_string_equal(info->name, "fixture");
  assert_int_equal(info->version, 0);
  assert_int_equal(info->bytecode_version, 17u << 16);
  assert_int_equal(info->n_dependencies, 1);
  assert_string_equal(info->dependencies[0].name, "hal");
  assert_int_equal(info->dependencies[0].minimum_version, 7);
  assert_int_equal(info->dependencies[0].flags, KILN_VM_DEPENDENCY_FLAG_REQUIRED);
  assert_int_equal(info->hal_version, 7);

  const kiln_vmfb_vm_import_t *imp = find_import(info, "hal.executable.lookup.function");
  assert_non_null(imp);
  assert_string_equal(imp->cconv, "0rr_I");
  imp = find_import(info, "hal.command_buffer.dispatch");
  assert_non_null(imp);
  assert_string_equal(imp->cconv, "0rrIiiiICiDCiirIID_v");
  imp = find_import(info, "hal.executable.create");
  assert_non_null(imp);
  assert_string_equal(imp->cconv, "0rIrrr_r");
  for (size_t i = 0; i < info->n_imports; i++) {
    assert_int_equal(info->imports[i].flags, KILN_VM_IMPORT_FLAG_REQUIRED);
    assert_non_null(info->imports[i].cconv);
    if (i) assert_true(strcmp(info->imports[i - 1].full_name, info->imports[i].full_name) < 0);
  }

  assert_int_equal(info->n_exports, 2);
  assert_int_equal(info->n_functions, 2);
  assert_true(info->bytecode_bytes > 0);
  const kiln_vmfb_export_t *e = find_export(info, "main");
  assert_non_null(e);
  assert_string_equal(e->cconv, "0rr_r");
  e = find_export(info, "__init");
  assert_non_null(e);
  assert_string_equal(e->cconv, "0v_v");

  /* rodata 0 is the executable (external, exactly the serialized bytes); the
   * 4 KiB constant is external too; small strings are embedded. */
  kiln_buf_t exe_bytes = serialize_ok(exe_of(f, format), true);
  assert_true(info->n_rodata >= 3);
  assert_true(info->rodata[0].external);
  assert_int_equal(info->rodata[0].size, exe_bytes.len);
  size_t n_external = 0, n_constant = 0;
  for (size_t i = 0; i < info->n_rodata; i++) {
    n_external += info->rodata[i].external;
    n_constant += info->rodata[i].external && info->rodata[i].size == KILN_TEST_VMFB_BYTES;
  }
  assert_int_equal(n_external, 2);
  assert_int_equal(n_constant, 1);
  kiln_buf_deinit(&exe_bytes);

  assert_int_equal(info->n_executables, 1);
  const kiln_vmfb_executable_info_t *x = &info->executables[0];
  assert_int_equal(x->rodata, 0);
  assert_string_equal(x->identifier, kiln_vmfb_format_identifier(format));
  assert_string_equal(x->format, kiln_vmfb_format_name(format));
  assert_true(x->has_header);
  assert_int_equal(x->header_version, 0);
  assert_int_equal(x->n_kernels, 2);
  assert_string_equal(x->kernels[0], "add_kernel");
  assert_string_equal(x->kernels[1], "mul_kernel");
  assert_int_equal(x->n_modules, 1);
  assert_int_equal(x->code_bytes, exe_of(f, format)->modules[0].len);
  assert_null(x->problem);
  if (format == KILN_VMFB_FORMAT_VULKAN) {
    assert_null(x->block_dims);
    assert_string_equal(x->code_kind, "spirv");
    assert_null(x->chip);
  } else {
    assert_non_null(x->block_dims);
    assert_non_null(x->constant_counts);
    const uint32_t want[6] = {64, 1, 1, 32, 2, 1};
    assert_memory_equal(x->block_dims, want, sizeof want);
    assert_int_equal(x->constant_counts[0], 1);
    assert_int_equal(x->constant_counts[1], 2);
    assert_string_equal(x->code_kind, format == KILN_VMFB_FORMAT_CUDA ? "ptx" : "hsaco");
    assert_string_equal(x->chip, format == KILN_VMFB_FORMAT_CUDA ? "sm_89" : "gfx1100");
  }
}

static void test_round_trip_each_format(void **state) {
  fixture_t *f = *state;
  for (int k = 1; k <= 3; k++) {
    kiln_vmfb_format_t format = (kiln_vmfb_format_t)k;
    kiln_vmfb_write_options_t o = {.provenance = &f->prov};
    kiln_buf_t file;
    write_ok(f, format, &o, &file);
    kiln_vmfb_info_t info;
    read_ok(&file, &info);
    check_common(f, &info, format);
    assert_int_equal(info.layout, KILN_VMFB_ARCHIVE_LAYOUT_ZIP);
    assert_int_equal(info.file_size, file.len);
    assert_false(info.has_source);
    /* Zip entries: module.fb first, then the external segments in rodata order. */
    assert_int_equal(info.n_entries, 3);
    assert_string_equal(info.entries[0], "module.fb");
    char want[64];
    snprintf(want, sizeof want, "fixture_%s.fb", kiln_vmfb_format_name(format));
    for (char *p = want; *p; p++) {
      if (*p == '-') *p = '_';
    }
    assert_string_equal(info.entries[1], want);
    assert_string_equal(info.entries[2], "main_constant0.bin");
    kiln_vmfb_info_deinit(&info);
    kiln_buf_deinit(&file);
  }
}

static void test_round_trip_provenance_and_source(void **state) {
  fixture_t *f = *state;
  kiln_vmfb_provenance_t prov = f->prov;
  prov.created = "2026-08-21T10:00:00Z";
  kiln_vmfb_write_options_t o = {
      .provenance = &prov, .source = (const uint8_t *)SOURCE, .source_len = sizeof SOURCE - 1};
  kiln_buf_t file;
  write_ok(f, KILN_VMFB_FORMAT_CUDA, &o, &file);
  kiln_vmfb_info_t info;
  read_ok(&file, &info);
  check_common(f, &info, KILN_VMFB_FORMAT_CUDA);
  assert_string_equal(kiln_vmfb_info_attr(&info, "kiln.source.sha256"), f->source_hex.text);
  assert_string_equal(kiln_vmfb_info_attr(&info, "kiln.target"), "sm_89");
  assert_string_equal(kiln_vmfb_info_attr(&info, "kiln.flags"), "--iree-opt-level=O2");
  assert_string_equal(kiln_vmfb_info_attr(&info, "kiln.compiler"), "kiln 0.1 (test)");
  assert_string_equal(kiln_vmfb_info_attr(&info, "kiln.created"), "2026-08-21T10:00:00Z");
  assert_string_equal(kiln_vmfb_info_attr(&info, "kiln.source.entry"), "kiln/source.mlir.zst");
  char bytes[32];
  snprintf(bytes, sizeof bytes, "%zu", sizeof SOURCE - 1);
  assert_string_equal(kiln_vmfb_info_attr(&info, "kiln.source.bytes"), bytes);
  assert_null(kiln_vmfb_info_attr(&info, "kiln.nonexistent"));
  assert_true(info.has_source);
  assert_string_equal(info.entries[info.n_entries - 1], "kiln/source.mlir.zst");

  uint8_t *src = NULL;
  size_t len = 0;
  assert_ok(kiln_vmfb_source_extract((const uint8_t *)file.data, file.len, &src, &len));
  assert_int_equal(len, sizeof SOURCE - 1);
  assert_memory_equal(src, SOURCE, len);
  kiln_digest_t d;
  kiln_digest_hex_t hex;
  kiln_digest_of(src, len, &d);
  kiln_digest_to_hex(&d, &hex);
  assert_string_equal(hex.text, kiln_vmfb_info_attr(&info, "kiln.source.sha256"));
  kiln_free(src);

  /* The exported function carries IREE's reflection declaration. */
  kiln_vmfb_archive_t a;
  table_t root = module_root(&file, &a);
  vector_t sigs = get_vector(root, KILN_VM_MODULE_FUNCTION_SIGNATURES);
  vector_t attrs = get_vector(vector_table(sigs, 0), KILN_VM_SIGNATURE_ATTRS);
  bool declared = false;
  for (size_t i = 0; i < count_of(attrs); i++) {
    table_t kv = vector_table(attrs, i);
    const char *key = get_string(kv, KILN_VM_ATTR_KEY, NULL);
    const char *value = get_string(kv, KILN_VM_ATTR_VALUE, NULL);
    if (key && strcmp(key, "iree.abi.declaration") == 0) {
      declared = true;
      assert_non_null(strstr(value, "@main("));
      assert_non_null(strstr(value, "tensor<1024xf32>"));
    }
  }
  assert_true(declared);
  kiln_vmfb_archive_deinit(&a);
  kiln_vmfb_info_deinit(&info);
  kiln_buf_deinit(&file);

  /* Without provenance there are no kiln.* attrs at all. */
  write_ok(f, KILN_VMFB_FORMAT_CUDA, NULL, &file);
  read_ok(&file, &info);
  assert_int_equal(info.cls, KILN_VMFB_CLASS_CURRENT);
  for (size_t i = 0; i < info.n_attrs; i++) assert_true(strncmp(info.attrs[i].key, "kiln.", 5) != 0);
  kiln_vmfb_info_deinit(&info);
  kiln_buf_deinit(&file);
}

static void test_round_trip_flat(void **state) {
  fixture_t *f = *state;
  kiln_vmfb_write_options_t o = {.flat = true, .provenance = &f->prov};
  kiln_buf_t file;
  write_ok(f, KILN_VMFB_FORMAT_HIP, &o, &file);
  kiln_vmfb_info_t info;
  read_ok(&file, &info);
  check_common(f, &info, KILN_VMFB_FORMAT_HIP);
  assert_int_equal(info.layout, KILN_VMFB_ARCHIVE_LAYOUT_FLAT);
  assert_int_equal(info.n_entries, 0);
  assert_string_equal(kiln_vmfb_info_attr(&info, "kiln.target"), "sm_89");
  kiln_vmfb_info_deinit(&info);
  kiln_buf_deinit(&file);
}

/* ---- golden layout ---- */

/* Every external segment: 64-aligned relative and absolute, inside the file; the
 * first holds the executable behind its header, byte for byte. */
static void check_external_segments(fixture_t *f, const kiln_buf_t *file, uint64_t base) {
  kiln_vmfb_archive_t a;
  table_t root = module_root(file, &a);
  assert_int_equal(a.rodata_base, base);
  const uint8_t *bytes = (const uint8_t *)file->data;
  vector_t rodata = get_vector(root, KILN_VM_MODULE_RODATA_SEGMENTS);
  size_t n_external = 0;
  for (size_t i = 0; i < count_of(rodata); i++) {
    table_t r = vector_table(rodata, i);
    if (!kiln_vmfb_flatbuf_table_has(r, KILN_VM_RODATA_EXTERNAL_DATA_OFFSET)) {
      assert_true(kiln_vmfb_flatbuf_table_has(r, KILN_VM_RODATA_EMBEDDED_DATA));
      continue;
    }
    n_external++;
    uint64_t off = get_uint(r, KILN_VM_RODATA_EXTERNAL_DATA_OFFSET);
    uint64_t len = get_uint(r, KILN_VM_RODATA_EXTERNAL_DATA_LENGTH);
    assert_int_equal(off % 64, 0);
    assert_int_equal((base + off) % 64, 0);
    assert_true(base + off + len <= file->len);
    if (i == 0) {
      kiln_buf_t exe = serialize_ok(exe_of(f, KILN_VMFB_FORMAT_CUDA), true);
      assert_int_equal(len, exe.len);
      assert_memory_equal(bytes + base + off, "CDA1", 4);
      assert_int_equal(rd32(bytes + base + off + 4), 0);
      assert_int_equal(rd64(bytes + base + off + 8), len - 64);
      assert_memory_equal(bytes + base + off + 64 + 4, "CDA1", 4); /* the FlatBuffer's identifier */
      assert_memory_equal(bytes + base + off, exe.data, exe.len);
      kiln_buf_deinit(&exe);
    } else {
      assert_int_equal(len, KILN_TEST_VMFB_BYTES);
      assert_memory_equal(bytes + base + off, f->sample.plan.functions[0].buffers[2].data, len);
    }
  }
  assert_int_equal(n_external, 2);
  kiln_vmfb_archive_deinit(&a);
}

static void test_golden_zip_layout(void **state) {
  fixture_t *f = *state;
  kiln_buf_t file;
  write_ok(f, KILN_VMFB_FORMAT_CUDA, NULL, &file);
  const uint8_t *p = (const uint8_t *)file.data;
  assert_memory_equal(p, "PK\3\4", 4);
  assert_int_equal(p[26] | (p[27] << 8), 9);
  assert_memory_equal(p + 30, "module.fb", 9);
  uint32_t prefix = rd32(p + 64);
  assert_true(64 + 4 + (uint64_t)prefix <= file.len);
  assert_memory_equal(p + 72, "IREE", 4);
  assert_memory_equal(p + file.len - 22, "PK\5\6", 4);
  check_external_segments(f, &file, align64(64 + 4 + (uint64_t)prefix));
  kiln_buf_deinit(&file);
}

static void test_golden_flat_layout(void **state) {
  fixture_t *f = *state;
  kiln_vmfb_write_options_t o = {.flat = true};
  kiln_buf_t file;
  write_ok(f, KILN_VMFB_FORMAT_CUDA, &o, &file);
  const uint8_t *p = (const uint8_t *)file.data;
  assert_memory_not_equal(p, "PK\3\4", 4);
  uint32_t prefix = rd32(p);
  assert_memory_equal(p + 8, "IREE", 4);
  check_external_segments(f, &file, align64(4 + (uint64_t)prefix));
  kiln_buf_deinit(&file);
}

/* ---- determinism ---- */

/* [start, end) file ranges where two writes that differ only in provenance values
 * of the same lengths may differ: the kiln.* attr strings and module.fb's CRC. */
typedef struct range_s {
  size_t start, end;
} range_t;

static size_t allowed_ranges(const kiln_buf_t *file, range_t *out, size_t cap) {
  const uint8_t *bytes = (const uint8_t *)file->data;
  kiln_vmfb_archive_t a;
  table_t root = module_root(file, &a);
  size_t n = 0;
  vector_t attrs = get_vector(root, KILN_VM_MODULE_ATTRS);
  for (size_t i = 0; i < count_of(attrs) && n < cap; i++) {
    table_t kv = vector_table(attrs, i);
    size_t len = 0;
    const char *key = get_string(kv, KILN_VM_ATTR_KEY, NULL);
    const char *value = get_string(kv, KILN_VM_ATTR_VALUE, &len);
    assert_non_null(key);
    if (strncmp(key, "kiln.", 5) != 0) continue;
    size_t at = (size_t)((const uint8_t *)value - bytes);
    out[n++] = (range_t){at, at + len};
  }
  /* module.fb's CRC-32: local header +14, central directory record +16. */
  out[n++] = (range_t){14, 18};
  for (size_t p = 0; p + 55 <= file->len; p++) {
    if (rd32(bytes + p) == 0x02014b50u && memcmp(bytes + p + 46, "module.fb", 9) == 0) {
      out[n++] = (range_t){p + 16, p + 20};
    }
  }
  kiln_vmfb_archive_deinit(&a);
  return n;
}

static void test_deterministic(void **state) {
  fixture_t *f = *state;
  kiln_vmfb_write_options_t o = {
      .provenance = &f->prov, .source = (const uint8_t *)SOURCE, .source_len = sizeof SOURCE - 1};
  kiln_buf_t a, b;
  write_ok(f, KILN_VMFB_FORMAT_VULKAN, &o, &a);
  write_ok(f, KILN_VMFB_FORMAT_VULKAN, &o, &b);
  assert_int_equal(a.len, b.len);
  assert_memory_equal(a.data, b.data, a.len);
  kiln_buf_deinit(&b);

  /* Other provenance values of the same lengths: only those strings and the
   * module entry's CRC change. */
  char sha[65];
  memset(sha, 'f', 64);
  sha[64] = 0;
  kiln_vmfb_provenance_t other = {
      .source_sha256 = sha, .target = "sm_90", .flags = "--iree-opt-level=O3", .compiler = "kiln 0.2 (test)"};
  kiln_vmfb_write_options_t o2 = {
      .provenance = &other, .source = (const uint8_t *)SOURCE, .source_len = sizeof SOURCE - 1};
  write_ok(f, KILN_VMFB_FORMAT_VULKAN, &o2, &b);
  assert_int_equal(a.len, b.len);
  range_t ranges[16];
  size_t n = allowed_ranges(&a, ranges, 14);
  assert_int_equal(n, 8); /* six kiln.* attrs, two CRC fields */
  size_t differing = 0;
  for (size_t i = 0; i < a.len; i++) {
    if (a.data[i] == b.data[i]) continue;
    differing++;
    bool allowed = false;
    for (size_t r = 0; r < n && !allowed; r++) allowed = i >= ranges[r].start && i < ranges[r].end;
    if (!allowed) fail_msg("byte %zu differs outside the provenance attrs and the CRC", i);
  }
  assert_true(differing >= 4);
  kiln_buf_deinit(&b);

  /* Provenance of other lengths moves things, but nothing else changes. */
  kiln_vmfb_provenance_t longer = {.target = "a-much-longer-target-name", .compiler = "x"};
  kiln_vmfb_write_options_t o3 = {
      .provenance = &longer, .source = (const uint8_t *)SOURCE, .source_len = sizeof SOURCE - 1};
  write_ok(f, KILN_VMFB_FORMAT_VULKAN, &o3, &b);
  kiln_vmfb_info_t ia, ib;
  read_ok(&a, &ia);
  read_ok(&b, &ib);
  assert_int_equal(ia.cls, ib.cls);
  assert_int_equal(ia.n_imports, ib.n_imports);
  for (size_t i = 0; i < ia.n_imports; i++) {
    assert_string_equal(ia.imports[i].full_name, ib.imports[i].full_name);
    assert_string_equal(ia.imports[i].cconv, ib.imports[i].cconv);
  }
  assert_int_equal(ia.n_functions, ib.n_functions);
  assert_int_equal(ia.bytecode_bytes, ib.bytecode_bytes);
  assert_int_equal(ia.n_rodata, ib.n_rodata);
  for (size_t i = 0; i < ia.n_rodata; i++) assert_int_equal(ia.rodata[i].size, ib.rodata[i].size);
  assert_string_equal(kiln_vmfb_info_attr(&ib, "kiln.target"), "a-much-longer-target-name");
  assert_null(kiln_vmfb_info_attr(&ib, "kiln.flags"));
  kiln_vmfb_info_deinit(&ia);
  kiln_vmfb_info_deinit(&ib);
  kiln_buf_deinit(&a);
  kiln_buf_deinit(&b);
}

static void test_appends_to_buffer(void **state) {
  fixture_t *f = *state;
  kiln_buf_t fresh, out;
  write_ok(f, KILN_VMFB_FORMAT_CUDA, NULL, &fresh);
  kiln_buf_init(&out);
  kiln_buf_append(&out, "HDR", 3);
  assert_ok(kiln_vmfb_write("fixture", &f->sample.plan, exe_of(f, KILN_VMFB_FORMAT_CUDA), NULL, &out));
  assert_int_equal(out.len, 3 + fresh.len);
  assert_memory_equal(out.data, "HDR", 3);
  assert_memory_equal(out.data + 3, fresh.data, fresh.len);
  /* A failure leaves the caller's bytes alone. */
  kiln_vmfb_write_options_t bad = {.hal_version = 5};
  assert_code(kiln_vmfb_write("fixture", &f->sample.plan, exe_of(f, KILN_VMFB_FORMAT_CUDA), &bad, &out),
              KILN_STATUS_UNIMPLEMENTED);
  assert_int_equal(out.len, 3 + fresh.len);
  kiln_buf_deinit(&out);
  kiln_buf_deinit(&fresh);
}

/* ---- the legacy knobs ---- */

static void test_legacy_knobs(void **state) {
  fixture_t *f = *state;
  kiln_buf_t file;
  kiln_vmfb_info_t info;

  kiln_vmfb_write_options_t hal6 = {.hal_version = 6};
  write_ok(f, KILN_VMFB_FORMAT_CUDA, &hal6, &file);
  read_ok(&file, &info);
  assert_int_equal(info.cls, KILN_VMFB_CLASS_LEGACY);
  assert_int_equal(info.hal_version, 6);
  assert_int_equal(info.dependencies[0].minimum_version, 6);
  assert_null(find_import(&info, "hal.executable.lookup.function"));
  assert_string_equal(find_import(&info, "hal.command_buffer.dispatch")->cconv, "0rriiiiICiDCiirIID_v");
  assert_true(info.executables[0].has_header);
  kiln_vmfb_info_deinit(&info);
  kiln_buf_deinit(&file);

  kiln_vmfb_write_options_t noheader = {.no_executable_header = true};
  write_ok(f, KILN_VMFB_FORMAT_HIP, &noheader, &file);
  read_ok(&file, &info);
  assert_int_equal(info.cls, KILN_VMFB_CLASS_LEGACY);
  assert_int_equal(info.hal_version, 7);
  assert_int_equal(info.n_executables, 1);
  assert_false(info.executables[0].has_header);
  assert_string_equal(info.executables[0].identifier, "HIP1");
  assert_int_equal(info.executables[0].n_kernels, 2);
  kiln_buf_t bare = serialize_ok(exe_of(f, KILN_VMFB_FORMAT_HIP), false);
  assert_int_equal(info.rodata[0].size, bare.len);
  kiln_buf_deinit(&bare);
  kiln_vmfb_info_deinit(&info);
  kiln_buf_deinit(&file);

  kiln_vmfb_write_options_t bc16 = {.bytecode_version = 16u << 16};
  write_ok(f, KILN_VMFB_FORMAT_CUDA, &bc16, &file);
  read_ok(&file, &info);
  assert_int_equal(info.cls, KILN_VMFB_CLASS_LEGACY);
  assert_int_equal(info.bytecode_version, 16u << 16);
  kiln_vmfb_info_deinit(&info);
  kiln_buf_deinit(&file);

  kiln_vmfb_write_options_t nodeps = {.no_dependencies = true};
  write_ok(f, KILN_VMFB_FORMAT_CUDA, &nodeps, &file);
  read_ok(&file, &info);
  assert_int_equal(info.cls, KILN_VMFB_CLASS_LEGACY);
  assert_int_equal(info.n_dependencies, 0);
  assert_int_equal(info.hal_version, 0);
  assert_non_null(find_import(&info, "hal.executable.lookup.function"));
  kiln_vmfb_info_deinit(&info);
  kiln_buf_deinit(&file);
}

/* ---- executables ---- */

static table_t exe_root(const kiln_buf_t *b, kiln_vmfb_format_t format, bool header) {
  const kiln_vmfb_flatbuf_table_desc_t *desc =
      format == KILN_VMFB_FORMAT_CUDA  ? &kiln_vmfb_schema_cuda_executable_def
      : format == KILN_VMFB_FORMAT_HIP ? &kiln_vmfb_schema_hip_executable_def
                                       : &kiln_vmfb_schema_vk_executable_def;
  const uint8_t *p = (const uint8_t *)b->data;
  size_t skip = header ? 64 : 0;
  assert_true(b->len > skip + 8);
  assert_memory_equal(p + skip + 4, kiln_vmfb_format_identifier(format), 4);
  kiln_vmfb_flatbuf_verify_options_t vo = {.identifier = kiln_vmfb_format_identifier(format)};
  assert_ok(kiln_vmfb_flatbuf_verify(p + skip, b->len - skip, &vo, desc));
  table_t root = kiln_vmfb_flatbuf_root(p + skip, b->len - skip, false, desc);
  assert_true(kiln_vmfb_flatbuf_table_exists(root));
  return root;
}

static void check_gpu_executable(fixture_t *f, kiln_vmfb_format_t format, bool header) {
  kiln_buf_t b = serialize_ok(exe_of(f, format), header);
  const uint8_t *p = (const uint8_t *)b.data;
  if (header) {
    assert_memory_equal(p, kiln_vmfb_format_identifier(format), 4);
    assert_int_equal(rd32(p + 4), 0);
    assert_int_equal(rd64(p + 8), b.len - 64);
    for (int i = 16; i < 64; i++) assert_int_equal(p[i], 0);
  }
  table_t root = exe_root(&b, format, header);
  vector_t exports = get_vector(root, KILN_CUDA_EXECUTABLE_EXPORTS);
  assert_int_equal(count_of(exports), 2);
  for (size_t i = 0; i < 2; i++) {
    const kiln_vmfb_kernel_t *k = &f->sample.kernels[i];
    table_t e = vector_table(exports, i);
    assert_string_equal(get_string(e, KILN_CUDA_EXPORT_KERNEL_NAME, NULL), k->name);
    assert_int_equal(get_uint(e, KILN_CUDA_EXPORT_MODULE_ORDINAL), 0);
    const uint8_t *dims = kiln_vmfb_flatbuf_table_get_struct(e, KILN_CUDA_EXPORT_BLOCK_DIMS);
    assert_non_null(dims);
    assert_int_equal(rd32(dims + KILN_GPU_BLOCK_DIMS_X), k->block_size[0]);
    assert_int_equal(rd32(dims + KILN_GPU_BLOCK_DIMS_Y), k->block_size[1]);
    assert_int_equal(rd32(dims + KILN_GPU_BLOCK_DIMS_Z), k->block_size[2]);
    assert_int_equal(get_uint(e, KILN_CUDA_EXPORT_CONSTANT_COUNT), k->n_constants);
    vector_t flags = get_vector(e, KILN_CUDA_EXPORT_BINDING_FLAGS);
    assert_int_equal(count_of(flags), 3);
    assert_int_equal(vector_uint(flags, 0), KILN_GPU_BINDING_READ_ONLY);
    assert_int_equal(vector_uint(flags, 1), KILN_GPU_BINDING_READ_ONLY);
    assert_int_equal(vector_uint(flags, 2), 0);
  }
  vector_t modules = get_vector(root, KILN_CUDA_EXECUTABLE_MODULES);
  assert_int_equal(count_of(modules), 1);
  size_t len = 0;
  const char *image = get_string(vector_table(modules, 0), KILN_CUDA_MODULE_PTX_IMAGE, &len);
  assert_non_null(image);
  assert_int_equal(len, f->sample.code[format - 1].len);
  assert_memory_equal(image, f->sample.code[format - 1].data, len);
  kiln_buf_deinit(&b);
}

static void test_serialize_cuda_and_hip(void **state) {
  fixture_t *f = *state;
  check_gpu_executable(f, KILN_VMFB_FORMAT_CUDA, true);
  check_gpu_executable(f, KILN_VMFB_FORMAT_CUDA, false);
  check_gpu_executable(f, KILN_VMFB_FORMAT_HIP, true);
  check_gpu_executable(f, KILN_VMFB_FORMAT_HIP, false);

  /* Two modules: each kernel points at its own, binary bytes survive (NULs). */
  static const uint8_t cubin0[] = {0x7f, 'E', 'L', 'F', 2, 1, 0, 0, 0, 0, 0xff};
  static const uint8_t cubin1[] = {0, 1, 2, 3, 0, 5};
  kiln_vmfb_code_t code[2] = {{cubin0, sizeof cubin0}, {cubin1, sizeof cubin1}};
  kiln_vmfb_kernel_t kernels[2] = {f->sample.kernels[0], f->sample.kernels[1]};
  kernels[1].module = 1;
  kernels[1].read_only = NULL;
  kiln_vmfb_executable_t exe = {KILN_VMFB_FORMAT_CUDA, kernels, 2, code, 2, 0, NULL};
  kiln_buf_t b = serialize_ok(&exe, true);
  table_t root = exe_root(&b, KILN_VMFB_FORMAT_CUDA, true);
  vector_t exports = get_vector(root, KILN_CUDA_EXECUTABLE_EXPORTS);
  table_t e1 = vector_table(exports, 1);
  assert_int_equal(get_uint(e1, KILN_CUDA_EXPORT_MODULE_ORDINAL), 1);
  vector_t flags = get_vector(e1, KILN_CUDA_EXPORT_BINDING_FLAGS);
  assert_int_equal(count_of(flags), 3);
  for (size_t i = 0; i < 3; i++) assert_int_equal(vector_uint(flags, i), 0);
  vector_t modules = get_vector(root, KILN_CUDA_EXECUTABLE_MODULES);
  assert_int_equal(count_of(modules), 2);
  for (size_t m = 0; m < 2; m++) {
    size_t len = 0;
    const char *image = get_string(vector_table(modules, m), KILN_CUDA_MODULE_PTX_IMAGE, &len);
    assert_int_equal(len, code[m].len);
    assert_memory_equal(image, code[m].data, len);
  }
  kiln_buf_deinit(&b);
}

static void test_serialize_vulkan(void **state) {
  fixture_t *f = *state;
  for (int header = 0; header < 2; header++) {
    kiln_buf_t b = serialize_ok(exe_of(f, KILN_VMFB_FORMAT_VULKAN), header);
    if (header) assert_memory_equal(b.data, "VKE1", 4);
    table_t root = exe_root(&b, KILN_VMFB_FORMAT_VULKAN, header);
    vector_t pipelines = get_vector(root, KILN_VK_EXECUTABLE_PIPELINES);
    assert_int_equal(count_of(pipelines), 2);
    vector_t layouts = get_vector(root, KILN_VK_EXECUTABLE_PIPELINE_LAYOUTS);
    vector_t sets = get_vector(root, KILN_VK_EXECUTABLE_DESCRIPTOR_SET_LAYOUTS);
    /* Different constant counts: two layouts. */
    assert_int_equal(count_of(layouts), 2);
    assert_int_equal(count_of(sets), 2);
    for (size_t i = 0; i < 2; i++) {
      const kiln_vmfb_kernel_t *k = &f->sample.kernels[i];
      table_t p = vector_table(pipelines, i);
      assert_string_equal(get_string(p, KILN_VK_PIPELINE_ENTRY_POINT, NULL), k->name);
      assert_int_equal(get_uint(p, KILN_VK_PIPELINE_SHADER_MODULE_ORDINAL), 0);
      assert_int_equal(get_uint(p, KILN_VK_PIPELINE_SUBGROUP_SIZE), 16);
      uint64_t l = get_uint(p, KILN_VK_PIPELINE_PIPELINE_LAYOUT_ORDINAL);
      assert_int_equal(l, i);
      table_t layout = vector_table(layouts, (size_t)l);
      vector_t ranges = get_vector(layout, KILN_VK_PIPELINE_LAYOUT_PUSH_CONSTANT_RANGES);
      assert_int_equal(count_of(ranges), 1);
      const uint8_t *range = kiln_vmfb_flatbuf_vector_get_struct(ranges, 0);
      assert_int_equal(rd32(range + KILN_VK_PUSH_CONSTANT_RANGE_SIZE), 4 * k->n_constants);
      vector_t ordinals = get_vector(layout, KILN_VK_PIPELINE_LAYOUT_DESCRIPTOR_SET_LAYOUT_ORDINALS);
      assert_int_equal(count_of(ordinals), 1);
      table_t set = vector_table(sets, (size_t)vector_uint(ordinals, 0));
      vector_t bindings = get_vector(set, KILN_VK_DESCRIPTOR_SET_LAYOUT_BINDINGS);
      assert_int_equal(count_of(bindings), 3);
      for (size_t j = 0; j < 3; j++) {
        table_t bd = vector_table(bindings, j);
        assert_int_equal(get_uint(bd, KILN_VK_DESCRIPTOR_SET_LAYOUT_BINDING_BINDING), j);
        assert_int_equal(get_uint(bd, KILN_VK_DESCRIPTOR_SET_LAYOUT_BINDING_DESCRIPTOR_TYPE),
                         KILN_VK_DESCRIPTOR_TYPE_STORAGE_BUFFER);
      }
    }
    vector_t shaders = get_vector(root, KILN_VK_EXECUTABLE_SHADER_MODULES);
    assert_int_equal(count_of(shaders), 1);
    vector_t words = get_vector(vector_table(shaders, 0), KILN_VK_SHADER_MODULE_SPIRV_CODE);
    const kiln_vmfb_code_t *spirv = &f->sample.code[KILN_VMFB_FORMAT_VULKAN - 1];
    size_t n = spirv->len / 4;
    assert_int_equal(count_of(words), n);
    for (size_t i = 0; i < n; i++) {
      uint32_t word; /* host order, as the executable hands the words over */
      memcpy(&word, spirv->data + 4 * i, 4);
      assert_int_equal(vector_uint(words, i), word);
    }
    kiln_buf_deinit(&b);
  }

  /* Same bindings and constants: one shared layout. */
  kiln_vmfb_kernel_t kernels[2] = {f->sample.kernels[0], f->sample.kernels[0]};
  kernels[1].name = "other";
  kiln_vmfb_executable_t exe = {KILN_VMFB_FORMAT_VULKAN, kernels, 2, &f->sample.code[2], 1, 0, NULL};
  kiln_buf_t b = serialize_ok(&exe, true);
  table_t root = exe_root(&b, KILN_VMFB_FORMAT_VULKAN, true);
  assert_int_equal(count_of(get_vector(root, KILN_VK_EXECUTABLE_PIPELINE_LAYOUTS)), 1);
  kiln_buf_deinit(&b);
}

static void test_format_names(void **state) {
  (void)state;
  assert_string_equal(kiln_vmfb_format_name(KILN_VMFB_FORMAT_CUDA), "cuda-nvptx-fb");
  assert_string_equal(kiln_vmfb_format_name(KILN_VMFB_FORMAT_HIP), "rocm-hsaco-fb");
  assert_string_equal(kiln_vmfb_format_name(KILN_VMFB_FORMAT_VULKAN), "vulkan-spirv-fb");
  assert_string_equal(kiln_vmfb_format_identifier(KILN_VMFB_FORMAT_CUDA), "CDA1");
  assert_string_equal(kiln_vmfb_format_identifier(KILN_VMFB_FORMAT_HIP), "HIP1");
  assert_string_equal(kiln_vmfb_format_identifier(KILN_VMFB_FORMAT_VULKAN), "VKE1");
  assert_null(kiln_vmfb_format_name((kiln_vmfb_format_t)9));
  assert_null(kiln_vmfb_format_identifier((kiln_vmfb_format_t)0));
}

/* ---- errors ---- */

static void expect_write_error(fixture_t *f, const kiln_vmfb_executable_t *exe, kiln_status_code_t want) {
  kiln_buf_t out;
  kiln_buf_init(&out);
  assert_code(kiln_vmfb_write("fixture", &f->sample.plan, exe, NULL, &out), want);
  assert_int_equal(out.len, 0);
  kiln_buf_deinit(&out);
}

static void expect_serialize_error(const kiln_vmfb_executable_t *exe) {
  kiln_buf_t out;
  kiln_buf_init(&out);
  kiln_buf_append(&out, "keep", 4);
  assert_code(kiln_vmfb_executable_serialize(exe, true, &out), KILN_STATUS_INVALID_ARGUMENT);
  assert_int_equal(out.len, 4);
  kiln_buf_deinit(&out);
}

static void test_plan_and_executable_disagree(void **state) {
  fixture_t *f = *state;
  kiln_vmfb_step_t *steps = f->sample.plan.functions[0].steps;

  /* A step dispatching a kernel the executable lacks. */
  steps[1].kernel = 2;
  expect_write_error(f, exe_of(f, KILN_VMFB_FORMAT_CUDA), KILN_STATUS_INVALID_ARGUMENT);
  steps[1].kernel = 1;

  /* Binding and constant counts that differ from the kernel's. */
  steps[0].n_bindings = 2;
  expect_write_error(f, exe_of(f, KILN_VMFB_FORMAT_HIP), KILN_STATUS_INVALID_ARGUMENT);
  steps[0].n_bindings = 3;
  steps[1].n_constants = 1;
  expect_write_error(f, exe_of(f, KILN_VMFB_FORMAT_VULKAN), KILN_STATUS_INVALID_ARGUMENT);
  steps[1].n_constants = 2;

  /* An executable with one kernel for a plan that dispatches two. */
  kiln_vmfb_executable_t one = *exe_of(f, KILN_VMFB_FORMAT_CUDA);
  one.n_kernels = 1;
  expect_write_error(f, &one, KILN_STATUS_INVALID_ARGUMENT);

  /* Restored: writes again. */
  kiln_buf_t out;
  write_ok(f, KILN_VMFB_FORMAT_CUDA, NULL, &out);
  kiln_buf_deinit(&out);
}

static void test_bad_executables(void **state) {
  fixture_t *f = *state;
  /* SPIR-V that is not a whole number of words. */
  kiln_vmfb_code_t odd = f->sample.code[KILN_VMFB_FORMAT_VULKAN - 1];
  odd.len -= 2;
  kiln_vmfb_executable_t exe = *exe_of(f, KILN_VMFB_FORMAT_VULKAN);
  exe.modules = &odd;
  expect_serialize_error(&exe);
  expect_write_error(f, &exe, KILN_STATUS_INVALID_ARGUMENT);

  /* A kernel naming a module the executable does not have. */
  kiln_vmfb_kernel_t kernels[2] = {f->sample.kernels[0], f->sample.kernels[1]};
  kernels[1].module = 1;
  exe = *exe_of(f, KILN_VMFB_FORMAT_CUDA);
  exe.kernels = kernels;
  expect_serialize_error(&exe);
  expect_write_error(f, &exe, KILN_STATUS_INVALID_ARGUMENT);

  /* No kernels, no modules, an empty module, an unnamed kernel, an unknown format. */
  exe = *exe_of(f, KILN_VMFB_FORMAT_HIP);
  exe.n_kernels = 0;
  expect_serialize_error(&exe);
  exe = *exe_of(f, KILN_VMFB_FORMAT_HIP);
  exe.n_modules = 0;
  expect_serialize_error(&exe);
  kiln_vmfb_code_t empty = {(const uint8_t *)"", 0};
  exe = *exe_of(f, KILN_VMFB_FORMAT_HIP);
  exe.modules = &empty;
  expect_serialize_error(&exe);
  kernels[1] = f->sample.kernels[1];
  kernels[0].name = "";
  exe = *exe_of(f, KILN_VMFB_FORMAT_CUDA);
  exe.kernels = kernels;
  expect_serialize_error(&exe);
  exe = *exe_of(f, KILN_VMFB_FORMAT_CUDA);
  exe.format = (kiln_vmfb_format_t)7;
  expect_serialize_error(&exe);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test_setup_teardown(test_round_trip_each_format, setup, teardown),
      cmocka_unit_test_setup_teardown(test_round_trip_provenance_and_source, setup, teardown),
      cmocka_unit_test_setup_teardown(test_round_trip_flat, setup, teardown),
      cmocka_unit_test_setup_teardown(test_golden_zip_layout, setup, teardown),
      cmocka_unit_test_setup_teardown(test_golden_flat_layout, setup, teardown),
      cmocka_unit_test_setup_teardown(test_deterministic, setup, teardown),
      cmocka_unit_test_setup_teardown(test_appends_to_buffer, setup, teardown),
      cmocka_unit_test_setup_teardown(test_legacy_knobs, setup, teardown),
      cmocka_unit_test_setup_teardown(test_serialize_cuda_and_hip, setup, teardown),
      cmocka_unit_test_setup_teardown(test_serialize_vulkan, setup, teardown),
      cmocka_unit_test_setup_teardown(test_format_names, setup, teardown),
      cmocka_unit_test_setup_teardown(test_plan_and_executable_disagree, setup, teardown),
      cmocka_unit_test_setup_teardown(test_bad_executables, setup, teardown),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
