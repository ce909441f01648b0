/* Unit tests for compiler/vmfb/reader.c: classification and hostile input.
 *
 * Every file is built in-process with the real writer from the shared sample
 * (tests/unit/support/vmfb_sample.h: a small host plan with two inputs, one 4 KiB
 * constant, two dispatches, one result; fake but well-formed PTX / AMDGPU ELF /
 * SPIR-V), then damaged on purpose where a test needs it.
 * Checked: each class with the facts behind it (CURRENT: zip and flat, each
 * format, with source; LEGACY: hal 0.6 in both layouts, the pre-0.7 dispatch
 * import under a hal 7 dependency, no executable header, bytecode 16.0, no
 * dependency list; INVALID: truncated, CRC mismatch, bytecode 18.0, hal 0.8,
 * external rodata past the end of the file, executable header version or size
 * wrong, garbage, empty, text); every truncation of a zip and a flat file;
 * 20k random single-byte flips and random garbage (some shaped like a zip or a
 * FlatBuffer) read without a crash; zips whose central directory lies;
 * FlatBuffers whose vectors and strings claim huge counts; hostile rodata (fake
 * executable headers, a FlatBuffer that references one table 50k times, a whole
 * VMFB nested inside a constant); rodata that merely contains an identifier
 * (kernel names, constants) read as data, not as an executable; and kiln_vmfb_source_extract's NOT_FOUND and
 * DATA_LOSS cases. Every read gets a heap copy of exactly its bytes, so ASan
 * sees any over-read.
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
#include <zlib.h>

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

#define assert_ok   kiln_test_assert_ok

#define assert_code kiln_test_assert_code

static uint32_t rd32(const uint8_t *p) {
  return (uint32_t)p[0] | ((uint32_t)p[1] << 8) | ((uint32_t)p[2] << 16) | ((uint32_t)p[3] << 24);
}
static void wr32(uint8_t *p, uint32_t v) {
  for (int i = 0; i < 4; i++) p[i] = (uint8_t)(v >> (8 * i));
}
static void wr64(uint8_t *p, uint64_t v) {
  for (int i = 0; i < 8; i++) p[i] = (uint8_t)(v >> (8 * i));
}

/* Reads a heap copy of exactly `len` bytes; checks what every result must hold. */
static void read_copy(const void *data, size_t len, kiln_vmfb_info_t *info) {
  uint8_t *copy = malloc(len ? len : 1);
  assert_non_null(copy);
  if (len) memcpy(copy, data, len);
  assert_ok(kiln_vmfb_read(copy, len, info));
  free(copy);
  assert_non_null(info->reason);
  assert_true(info->cls == KILN_VMFB_CLASS_CURRENT || info->cls == KILN_VMFB_CLASS_LEGACY ||
              info->cls == KILN_VMFB_CLASS_INVALID);
  assert_int_equal(info->file_size, len);
  for (size_t i = 0; i < info->n_executables; i++) {
    const kiln_vmfb_executable_info_t *e = &info->executables[i];
    assert_true(e->rodata < info->n_rodata);
    assert_true(e->n_kernels <= len);
    for (size_t k = 0; k < e->n_kernels; k++) assert_non_null(e->kernels[k]);
  }
  for (size_t i = 0; i < info->n_rodata; i++) assert_true(info->rodata[i].size <= len);
}

static kiln_vmfb_class_t class_of(const void *data, size_t len) {
  kiln_vmfb_info_t info;
  read_copy(data, len, &info);
  kiln_vmfb_class_t c = info.cls;
  kiln_vmfb_info_deinit(&info);
  return c;
}

static void assert_reason_has(const kiln_vmfb_info_t *info, const char *needle) {
  if (!strstr(info->reason, needle)) fail_msg("reason \"%s\" does not mention \"%s\"", info->reason, needle);
}

/* ---- the sample module (tests/unit/support/vmfb_sample.h) ---- */

static const char SOURCE[] =
    "func.func @main(%x: tensor<1024xf32>) -> tensor<1024xf32> {\n"
    "  return %x : tensor<1024xf32>\n"
    "}\n";

typedef struct fixture_s {
  kiln_test_vmfb_sample_t sample;
  kiln_digest_hex_t source_hex;
  kiln_vmfb_provenance_t prov;
  kiln_buf_t zip;  /* a current CUDA zip with source */
  kiln_buf_t flat; /* a current CUDA flat file */
} fixture_t;

/* Replaces the constant buffer's bytes (owned by the plan). */
static void set_constant(fixture_t *f, const void *data, size_t len) {
  kiln_vmfb_buffer_t *b = &f->sample.plan.functions[0].buffers[2];
  kiln_free(b->data);
  b->data = kiln_memdup(data, len);
  b->size_bytes = len;
  for (int s = 0; s < 2; s++) {
    for (int k = 0; k < 3; k++) {
      kiln_vmfb_binding_t *bd = &f->sample.plan.functions[0].steps[s].bindings[k];
      if (bd->buffer == 2) bd->length = len;
    }
  }
}

static void write_ok(fixture_t *f, kiln_vmfb_format_t format, const kiln_vmfb_write_options_t *o,
                     kiln_buf_t *out) {
  kiln_buf_init(out);
  assert_ok(kiln_vmfb_write("fixture", &f->sample.plan, &f->sample.exe[format - 1], o, out));
}

static int setup(void **state) {
  fixture_t *f = calloc(1, sizeof *f);
  if (!f) return -1;
  kiln_test_vmfb_sample_init(&f->sample);
  kiln_digest_t d;
  kiln_digest_of(SOURCE, sizeof SOURCE - 1, &d);
  kiln_digest_to_hex(&d, &f->source_hex);
  f->prov = (kiln_vmfb_provenance_t){
      .source_sha256 = f->source_hex.text, .target = "sm_89", .compiler = "kiln (test)"};
  *state = f;
  kiln_vmfb_write_options_t zo = {
      .provenance = &f->prov, .source = (const uint8_t *)SOURCE, .source_len = sizeof SOURCE - 1};
  kiln_buf_init(&f->zip);
  kiln_buf_init(&f->flat);
  kiln_status_t st = kiln_vmfb_write("fixture", &f->sample.plan, &f->sample.exe[0], &zo, &f->zip);
  kiln_vmfb_write_options_t fo = {.flat = true, .provenance = &f->prov};
  if (!st) st = kiln_vmfb_write("fixture", &f->sample.plan, &f->sample.exe[0], &fo, &f->flat);
  if (st) {
    fprintf(stderr, "setup: %s\n", kiln_status_message(st));
    kiln_status_free(st);
    return -1;
  }
  return 0;
}

static int teardown(void **state) {
  fixture_t *f = *state;
  kiln_test_vmfb_sample_deinit(&f->sample);
  kiln_buf_deinit(&f->zip);
  kiln_buf_deinit(&f->flat);
  free(f);
  return 0;
}

/* ---- patching written files ---- */

/* File offset of `slot`'s stored value in table `t` (whose buffer lies inside
 * `file`), or 0 when the field is not stored. */
static size_t field_offset(const uint8_t *file, table_t t, uint16_t slot) {
  assert_true(kiln_vmfb_flatbuf_table_exists(t));
  const uint8_t *p = t.data;
  int32_t soffset = (int32_t)rd32(p + t.pos);
  size_t vt = (size_t)((int64_t)t.pos - soffset);
  uint16_t vt_size = (uint16_t)(p[vt] | (p[vt + 1] << 8));
  if (4u + 2u * slot + 2u > vt_size) return 0;
  uint16_t off = (uint16_t)(p[vt + 4 + 2 * slot] | (p[vt + 5 + 2 * slot] << 8));
  return off ? (size_t)(p - file) + t.pos + off : 0;
}

/* The module root of `file` (which must stay alive); the archive in *a. */
static table_t module_root(const uint8_t *file, size_t len, kiln_vmfb_archive_t *a) {
  assert_ok(kiln_vmfb_archive_parse(file, len, 0, a));
  return kiln_vmfb_flatbuf_root(a->flatbuffer, a->flatbuffer_size, true,
                                &kiln_vmfb_schema_vm_bytecode_module_def);
}

/* Recomputes `entry`'s CRC-32 in its local header and directory record. */
static void zip_fix_crc(uint8_t *file, size_t len, const char *entry) {
  kiln_vmfb_archive_t a;
  assert_ok(kiln_vmfb_archive_parse(file, len, 0, &a));
  ptrdiff_t i = kiln_vmfb_archive_entry_find(&a, entry);
  assert_true(i >= 0);
  const kiln_vmfb_archive_entry_t *e = &a.entries[i];
  uint32_t crc = (uint32_t)crc32(0L, file + e->data_offset, (uInt)e->size);
  wr32(file + e->header_offset + 14, crc);
  size_t n = strlen(entry), fixed = 0;
  for (size_t p = 0; p + 46 + n <= len; p++) {
    if (rd32(file + p) == 0x02014b50u && (size_t)(file[p + 28] | (file[p + 29] << 8)) == n &&
        memcmp(file + p + 46, entry, n) == 0) {
      wr32(file + p + 16, crc);
      fixed++;
    }
  }
  assert_int_equal(fixed, 1);
  kiln_vmfb_archive_deinit(&a);
}

/* The file offset of the first directory record (after the last entry's data). */
static size_t zip_directory(const uint8_t *file, size_t len) {
  for (size_t p = len - 22; p > 0; p--) {
    if (rd32(file + p) == 0x06064b50u) { /* zip64 end of central directory */
      return (size_t)(rd32(file + p + 48) | ((uint64_t)rd32(file + p + 52) << 32));
    }
  }
  fail_msg("no zip64 end of central directory record");
  return 0;
}

/* ---- classification ---- */

static void test_current_files(void **state) {
  fixture_t *f = *state;
  kiln_vmfb_info_t info;
  for (int k = 1; k <= 3; k++) {
    for (int flat = 0; flat < 2; flat++) {
      kiln_vmfb_write_options_t o = {.flat = flat};
      kiln_buf_t file;
      write_ok(f, (kiln_vmfb_format_t)k, &o, &file);
      read_copy(file.data, file.len, &info);
      if (info.cls != KILN_VMFB_CLASS_CURRENT) fail_msg("format %d flat %d: %s", k, flat, info.reason);
      assert_int_equal(info.layout, flat ? KILN_VMFB_ARCHIVE_LAYOUT_FLAT : KILN_VMFB_ARCHIVE_LAYOUT_ZIP);
      assert_int_equal(info.hal_version, 7);
      assert_int_equal(info.bytecode_version, 17u << 16);
      assert_int_equal(info.n_executables, 1);
      assert_true(info.executables[0].has_header);
      assert_null(info.executables[0].problem);
      kiln_vmfb_info_deinit(&info);
      kiln_buf_deinit(&file);
    }
  }
  read_copy(f->zip.data, f->zip.len, &info);
  assert_int_equal(info.cls, KILN_VMFB_CLASS_CURRENT);
  assert_true(info.has_source);
  assert_string_equal(kiln_vmfb_info_attr(&info, "kiln.target"), "sm_89");
  kiln_vmfb_info_deinit(&info);
}

static void test_legacy_files(void **state) {
  fixture_t *f = *state;
  kiln_vmfb_info_t info;
  kiln_buf_t file;

  /* hal 0.6, both layouts. */
  for (int flat = 0; flat < 2; flat++) {
    kiln_vmfb_write_options_t o = {.flat = flat, .hal_version = 6};
    write_ok(f, KILN_VMFB_FORMAT_HIP, &o, &file);
    read_copy(file.data, file.len, &info);
    assert_int_equal(info.cls, KILN_VMFB_CLASS_LEGACY);
    assert_int_equal(info.hal_version, 6);
    assert_true(info.executables[0].has_header);
    assert_reason_has(&info, "hal");
    assert_reason_has(&info, "6");
    kiln_vmfb_info_deinit(&info);

    /* The same file claiming hal 7 still imports the 0.6 dispatch: legacy. */
    if (flat) {
      uint8_t *p = (uint8_t *)file.data;
      kiln_vmfb_archive_t a;
      table_t root = module_root(p, file.len, &a);
      vector_t deps = get_vector(root, KILN_VM_MODULE_DEPENDENCIES);
      size_t at = field_offset(p, vector_table(deps, 0), KILN_VM_DEPENDENCY_MINIMUM_VERSION);
      kiln_vmfb_archive_deinit(&a);
      assert_true(at > 0);
      assert_int_equal(rd32(p + at), 6);
      wr32(p + at, 7);
      read_copy(file.data, file.len, &info);
      assert_int_equal(info.cls, KILN_VMFB_CLASS_LEGACY);
      assert_int_equal(info.hal_version, 7);
      assert_reason_has(&info, "hal.command_buffer.dispatch");
      assert_reason_has(&info, "0rriiiiICiDCiirIID_v");
      kiln_vmfb_info_deinit(&info);
    }
    kiln_buf_deinit(&file);
  }

  /* No executable header, hal 7 otherwise. */
  kiln_vmfb_write_options_t noheader = {.hal_version = 7, .no_executable_header = true};
  write_ok(f, KILN_VMFB_FORMAT_VULKAN, &noheader, &file);
  read_copy(file.data, file.len, &info);
  assert_int_equal(info.cls, KILN_VMFB_CLASS_LEGACY);
  assert_int_equal(info.hal_version, 7);
  assert_int_equal(info.n_executables, 1);
  assert_false(info.executables[0].has_header);
  assert_string_equal(info.executables[0].identifier, "VKE1");
  assert_reason_has(&info, "header");
  kiln_vmfb_info_deinit(&info);
  kiln_buf_deinit(&file);

  /* Bytecode 16.0. */
  kiln_vmfb_write_options_t bc16 = {.bytecode_version = 16u << 16};
  write_ok(f, KILN_VMFB_FORMAT_CUDA, &bc16, &file);
  read_copy(file.data, file.len, &info);
  assert_int_equal(info.cls, KILN_VMFB_CLASS_LEGACY);
  assert_int_equal(info.bytecode_version, 16u << 16);
  assert_reason_has(&info, "16.0");
  kiln_vmfb_info_deinit(&info);
  kiln_buf_deinit(&file);

  /* No dependency list at all (before HAL 0.5). */
  kiln_vmfb_write_options_t nodeps = {.no_dependencies = true};
  write_ok(f, KILN_VMFB_FORMAT_CUDA, &nodeps, &file);
  read_copy(file.data, file.len, &info);
  assert_int_equal(info.cls, KILN_VMFB_CLASS_LEGACY);
  assert_int_equal(info.n_dependencies, 0);
  assert_int_equal(info.hal_version, 0);
  assert_reason_has(&info, "dependency");
  kiln_vmfb_info_deinit(&info);
  kiln_buf_deinit(&file);
}

static void test_invalid_files(void **state) {
  fixture_t *f = *state;
  kiln_vmfb_info_t info;
  kiln_buf_t file;

  /* Newer than this reader: bytecode 18.0, hal 0.8. */
  kiln_vmfb_write_options_t bc18 = {.bytecode_version = 18u << 16};
  write_ok(f, KILN_VMFB_FORMAT_CUDA, &bc18, &file);
  read_copy(file.data, file.len, &info);
  assert_int_equal(info.cls, KILN_VMFB_CLASS_INVALID);
  assert_int_equal(info.bytecode_version, 18u << 16);
  assert_reason_has(&info, "18.0");
  kiln_vmfb_info_deinit(&info);
  kiln_buf_deinit(&file);

  write_ok(f, KILN_VMFB_FORMAT_CUDA, NULL, &file);
  uint8_t *p = (uint8_t *)file.data;
  kiln_vmfb_archive_t a;
  table_t root = module_root(p, file.len, &a);
  vector_t deps = get_vector(root, KILN_VM_MODULE_DEPENDENCIES);
  size_t hal_at = field_offset(p, vector_table(deps, 0), KILN_VM_DEPENDENCY_MINIMUM_VERSION);
  vector_t rodata = get_vector(root, KILN_VM_MODULE_RODATA_SEGMENTS);
  size_t off_at = field_offset(p, vector_table(rodata, 0), KILN_VM_RODATA_EXTERNAL_DATA_OFFSET);
  uint64_t base = a.rodata_base;
  size_t exe_at =
      (size_t)a.rodata_base + (size_t)get_uint(vector_table(rodata, 0), KILN_VM_RODATA_EXTERNAL_DATA_OFFSET);
  kiln_vmfb_archive_deinit(&a);
  assert_true(hal_at > 0 && off_at > 0);
  assert_memory_equal(p + exe_at, "CDA1", 4);

  /* hal 0.8, with module.fb's CRC repaired so that this is the only fault. */
  wr32(p + hal_at, 8);
  zip_fix_crc(p, file.len, "module.fb");
  read_copy(p, file.len, &info);
  assert_int_equal(info.cls, KILN_VMFB_CLASS_INVALID);
  assert_int_equal(info.hal_version, 8);
  assert_reason_has(&info, "hal");
  kiln_vmfb_info_deinit(&info);
  wr32(p + hal_at, 7);
  zip_fix_crc(p, file.len, "module.fb");
  assert_int_equal(class_of(p, file.len), KILN_VMFB_CLASS_CURRENT);

  /* External rodata past the end of the file (offset, and offset + length). */
  uint64_t good_offset = rd32(p + off_at) | ((uint64_t)rd32(p + off_at + 4) << 32);
  const uint64_t bad_offsets[] = {file.len, file.len - base - 8, UINT64_MAX - 16, UINT64_MAX};
  for (size_t i = 0; i < sizeof bad_offsets / sizeof bad_offsets[0]; i++) {
    wr64(p + off_at, bad_offsets[i]);
    zip_fix_crc(p, file.len, "module.fb");
    read_copy(p, file.len, &info);
    assert_int_equal(info.cls, KILN_VMFB_CLASS_INVALID);
    assert_reason_has(&info, "rodata");
    kiln_vmfb_info_deinit(&info);
  }
  wr64(p + off_at, good_offset);
  zip_fix_crc(p, file.len, "module.fb");

  /* The executable's header: a version from the future, a size that does not fit. */
  kiln_vmfb_archive_t b;
  assert_ok(kiln_vmfb_archive_parse(p, file.len, 0, &b));
  const char *exe_entry = b.entries[1].name;
  char entry[128];
  snprintf(entry, sizeof entry, "%s", exe_entry);
  kiln_vmfb_archive_deinit(&b);
  wr32(p + exe_at + 4, 1);
  zip_fix_crc(p, file.len, entry);
  read_copy(p, file.len, &info);
  assert_int_equal(info.cls, KILN_VMFB_CLASS_INVALID);
  assert_true(info.executables[0].has_header);
  assert_int_equal(info.executables[0].header_version, 1);
  assert_non_null(info.executables[0].problem);
  kiln_vmfb_info_deinit(&info);
  wr32(p + exe_at + 4, 0);
  const uint64_t sizes[] = {0, UINT64_MAX, 1ull << 32};
  for (size_t i = 0; i < 3; i++) {
    wr64(p + exe_at + 8, sizes[i]);
    zip_fix_crc(p, file.len, entry);
    read_copy(p, file.len, &info);
    assert_int_equal(info.cls, KILN_VMFB_CLASS_INVALID);
    assert_non_null(info.executables[0].problem);
    kiln_vmfb_info_deinit(&info);
  }

  /* One flipped executable byte: the CRC says so. */
  kiln_buf_deinit(&file);
  kiln_buf_init(&file);
  kiln_buf_append(&file, f->zip.data, f->zip.len);
  p = (uint8_t *)file.data;
  assert_ok(kiln_vmfb_archive_parse(p, file.len, 0, &b));
  p[b.entries[1].data_offset + b.entries[1].size / 2] ^= 0x01;
  kiln_vmfb_archive_deinit(&b);
  read_copy(p, file.len, &info);
  assert_int_equal(info.cls, KILN_VMFB_CLASS_INVALID);
  assert_reason_has(&info, "CRC");
  kiln_vmfb_info_deinit(&info);
  kiln_buf_deinit(&file);

  /* Truncated, empty, garbage, text. */
  read_copy(f->zip.data, f->zip.len / 2, &info);
  assert_int_equal(info.cls, KILN_VMFB_CLASS_INVALID);
  assert_null(info.name);
  kiln_vmfb_info_deinit(&info);
  assert_int_equal(class_of("", 0), KILN_VMFB_CLASS_INVALID);
  unsigned char noise[4096];
  kiln_test_fill_random(noise, sizeof noise, 42);
  assert_int_equal(class_of(noise, sizeof noise), KILN_VMFB_CLASS_INVALID);
  static const char text[] = "This is a text file, not an IREE VMFB module.\n";
  assert_int_equal(class_of(text, sizeof text - 1), KILN_VMFB_CLASS_INVALID);
}

static void test_class_names(void **state) {
  (void)state;
  assert_string_equal(kiln_vmfb_class_name(KILN_VMFB_CLASS_CURRENT), "current");
  assert_string_equal(kiln_vmfb_class_name(KILN_VMFB_CLASS_LEGACY), "legacy");
  assert_string_equal(kiln_vmfb_class_name(KILN_VMFB_CLASS_INVALID), "invalid");
  assert_string_equal(kiln_vmfb_class_name((kiln_vmfb_class_t)17), "invalid");
}

/* ---- hostile input ---- */

static void test_every_truncation(void **state) {
  fixture_t *f = *state;
  const kiln_buf_t *files[2] = {&f->zip, &f->flat};
  for (int i = 0; i < 2; i++) {
    assert_int_equal(class_of(files[i]->data, files[i]->len), KILN_VMFB_CLASS_CURRENT);
    for (size_t n = 0; n < files[i]->len; n++) {
      kiln_vmfb_class_t c = class_of(files[i]->data, n);
      if (c != KILN_VMFB_CLASS_INVALID) {
        fail_msg("%s file cut to %zu bytes reads as %s", i ? "flat" : "zip", n, kiln_vmfb_class_name(c));
      }
    }
  }
}

static void test_random_byte_flips(void **state) {
  fixture_t *f = *state;
  const kiln_buf_t *files[2] = {&f->zip, &f->flat};
  uint64_t rng = 0x5eed5eed5eedull;
  size_t counts[3] = {0};
  for (int i = 0; i < 2; i++) {
    uint8_t *copy = malloc(files[i]->len);
    assert_non_null(copy);
    for (int round = 0; round < 10000; round++) {
      memcpy(copy, files[i]->data, files[i]->len);
      size_t at = (size_t)(kiln_test_random_next(&rng) % files[i]->len);
      copy[at] ^= (uint8_t)(1 + kiln_test_random_next(&rng) % 255);
      kiln_vmfb_info_t info;
      read_copy(copy, files[i]->len, &info);
      counts[info.cls]++;
      kiln_vmfb_info_deinit(&info);
      if (i == 0 && round % 8 == 0) {
        uint8_t *src = NULL;
        size_t len = 0;
        kiln_status_t st = kiln_vmfb_source_extract(copy, files[i]->len, &src, &len);
        if (st) {
          kiln_status_code_t code = kiln_status_code(st);
          assert_true(code == KILN_STATUS_DATA_LOSS || code == KILN_STATUS_NOT_FOUND ||
                      code == KILN_STATUS_INVALID_ARGUMENT);
          kiln_status_free(st);
        } else {
          /* Anything extracted passed the digest check: it is the source. */
          assert_int_equal(len, sizeof SOURCE - 1);
          assert_memory_equal(src, SOURCE, len);
          kiln_free(src);
        }
      }
    }
    free(copy);
  }
  /* Zip flips are nearly all caught (CRC, structure); both kinds happened. */
  assert_true(counts[KILN_VMFB_CLASS_INVALID] > 5000);
  assert_true(counts[KILN_VMFB_CLASS_CURRENT] > 0);
}

static void test_random_garbage(void **state) {
  fixture_t *f = *state;
  uint64_t rng = 0xbadc0ffeeull;
  uint8_t *buf = malloc(8192);
  assert_non_null(buf);
  for (int round = 0; round < 3000; round++) {
    size_t len = (size_t)(kiln_test_random_next(&rng) % 8192);
    kiln_test_fill_random(buf, len, (uint64_t)round + 1);
    int shape = round % 4;
    if (shape == 1 && len >= 4) {
      memcpy(buf, "PK\3\4", 4); /* looks like a zip */
    } else if (shape == 2 && len >= 12) {
      wr32(buf, (uint32_t)(len - 4)); /* a FlatBuffer with a believable size prefix */
      memcpy(buf + 8, "IREE", 4);
      wr32(buf + 4, 12 + (uint32_t)(kiln_test_random_next(&rng) % 64) * 4);
    } else if (shape == 3 && len > 64) {
      /* The real file's head, noise after it. */
      size_t keep = (size_t)(kiln_test_random_next(&rng) % (len < f->flat.len ? len : f->flat.len));
      memcpy(buf, f->flat.data, keep);
    }
    kiln_vmfb_info_t info;
    read_copy(buf, len, &info);
    assert_int_equal(info.cls, KILN_VMFB_CLASS_INVALID);
    kiln_vmfb_info_deinit(&info);
  }
  free(buf);
}

static void test_lying_central_directory(void **state) {
  fixture_t *f = *state;
  size_t len = f->zip.len;
  const uint8_t *orig = (const uint8_t *)f->zip.data;
  size_t dir = zip_directory(orig, len);
  size_t eocd64 = 0;
  for (size_t p = len - 22; p > dir; p--) {
    if (rd32(orig + p) == 0x06064b50u) {
      eocd64 = p;
      break;
    }
  }
  assert_true(eocd64 > dir);
  assert_int_equal(rd32(orig + dir), 0x02014b50u);
  /* The second record follows the first: 46 bytes, then name, extra, comment. */
  size_t rec1 = dir + 46 + (orig[dir + 28] | (orig[dir + 29] << 8)) +
                (orig[dir + 30] | (orig[dir + 31] << 8)) + (orig[dir + 32] | (orig[dir + 33] << 8));
  assert_int_equal(rd32(orig + rec1), 0x02014b50u);

  uint8_t *p = malloc(len);
  assert_non_null(p);
  /* must_fail: the lie leaves the file unreadable; otherwise any class will do
   * (IREE's runtime never reads the directory), as long as nothing breaks. */
  struct {
    const char *what;
    size_t at;
    int width;
    uint64_t value;
    bool must_fail;
  } lies[] = {
      {"more entries on this disk than the directory holds", eocd64 + 24, 8, 1000, true},
      {"more entries in total than the directory holds", eocd64 + 32, 8, 1000, true},
      {"fewer entries", eocd64 + 32, 8, 1, false},
      {"directory size past the end", eocd64 + 40, 8, UINT64_MAX / 2, true},
      {"directory offset 0", eocd64 + 48, 8, 0, true},
      {"directory offset past the end", eocd64 + 48, 8, len + 100, true},
      {"directory offset at the zip64 record", eocd64 + 48, 8, eocd64, true},
      {"second entry's method is deflate", rec1 + 10, 2, 8, true},
      {"module.fb's method is deflate", dir + 10, 2, 8, true},
      {"second entry's name length runs into the next record", rec1 + 28, 2, 400, true},
      {"second entry's extra length runs past the directory", rec1 + 30, 2, 0xFFFF, true},
      {"second entry's signature", rec1, 4, 0x12345678, true},
      {"module.fb flagged encrypted", dir + 8, 2, 1, true},
  };
  for (size_t i = 0; i < sizeof lies / sizeof lies[0]; i++) {
    memcpy(p, orig, len);
    for (int b = 0; b < lies[i].width; b++) p[lies[i].at + b] = (uint8_t)(lies[i].value >> (8 * b));
    kiln_vmfb_info_t info;
    read_copy(p, len, &info);
    if (lies[i].must_fail && info.cls != KILN_VMFB_CLASS_INVALID) {
      fail_msg("%s: read as %s", lies[i].what, kiln_vmfb_class_name(info.cls));
    }
    kiln_vmfb_info_deinit(&info);
  }

  /* The directory renames the executable's entry as module.fb (a duplicate), and
   * points the second record at the first local header. */
  memcpy(p, orig, len);
  size_t n1 = (size_t)(p[rec1 + 28] | (p[rec1 + 29] << 8));
  assert_true(n1 >= 9);
  memcpy(p + rec1 + 46, "module.fb", 9);
  memset(p + rec1 + 46 + 9, '_', n1 - 9);
  assert_int_equal(class_of(p, len), KILN_VMFB_CLASS_INVALID);
  free(p);
}

static void test_huge_counts(void **state) {
  fixture_t *f = *state;
  size_t len = f->flat.len;
  uint8_t *p = malloc(len);
  assert_non_null(p);
  memcpy(p, f->flat.data, len);
  kiln_vmfb_archive_t a;
  table_t root = module_root(p, len, &a);
  /* The length word in front of each vector or string. */
  const uint16_t vectors[] = {KILN_VM_MODULE_TYPES,
                              KILN_VM_MODULE_DEPENDENCIES,
                              KILN_VM_MODULE_IMPORTED_FUNCTIONS,
                              KILN_VM_MODULE_EXPORTED_FUNCTIONS,
                              KILN_VM_MODULE_FUNCTION_SIGNATURES,
                              KILN_VM_MODULE_RODATA_SEGMENTS,
                              KILN_VM_MODULE_FUNCTION_DESCRIPTORS,
                              KILN_VM_MODULE_BYTECODE_DATA,
                              KILN_VM_MODULE_ATTRS};
  size_t at[16];
  size_t n = 0;
  for (size_t i = 0; i < sizeof vectors / sizeof vectors[0]; i++) {
    vector_t v = get_vector(root, vectors[i]);
    assert_true(count_of(v) > 0);
    at[n++] = (size_t)(v.data - p) + v.pos - 4;
  }
  size_t name_len = 0;
  const char *name = get_string(root, KILN_VM_MODULE_NAME, &name_len);
  at[n++] = (size_t)((const uint8_t *)name - p) - 4;
  vector_t rodata = get_vector(root, KILN_VM_MODULE_RODATA_SEGMENTS);
  for (size_t i = 0; i < count_of(rodata); i++) {
    vector_t bytes = get_vector(vector_table(rodata, i), KILN_VM_RODATA_EMBEDDED_DATA);
    if (count_of(bytes)) {
      at[n++] = (size_t)(bytes.data - p) + bytes.pos - 4;
      break;
    }
  }
  kiln_vmfb_archive_deinit(&a);
  const uint32_t counts[] = {0xFFFFFFFFu, 0x7FFFFFFFu, 0x40000000u, (uint32_t)len};
  for (size_t i = 0; i < n; i++) {
    uint32_t saved = rd32(p + at[i]);
    for (size_t c = 0; c < sizeof counts / sizeof counts[0]; c++) {
      wr32(p + at[i], counts[c]);
      kiln_vmfb_info_t info;
      read_copy(p, len, &info);
      if (info.cls != KILN_VMFB_CLASS_INVALID) {
        fail_msg("count %u at %zu: read as %s", counts[c], at[i], info.reason);
      }
      kiln_vmfb_info_deinit(&info);
    }
    wr32(p + at[i], saved);
  }
  assert_int_equal(class_of(p, len), KILN_VMFB_CLASS_CURRENT);
  free(p);
}

/* A CUDA ExecutableDef whose exports vector names one export table `count`
 * times: tiny to store, huge to walk naively. Its one module is `ptx`. Behind a
 * 64-byte header. */
static void shared_export_bomb(const kiln_vmfb_code_t *ptx, size_t count, kiln_buf_t *out) {
  kiln_vmfb_flatbuf_builder_t *b = kiln_vmfb_flatbuf_builder_create();
  kiln_vmfb_flatbuf_ref_t e = kiln_vmfb_flatbuf_builder_add_table(b, &kiln_vmfb_schema_cuda_export_def);
  kiln_vmfb_flatbuf_builder_set_ref(b, e, KILN_CUDA_EXPORT_KERNEL_NAME,
                                    kiln_vmfb_flatbuf_builder_add_str(b, "k"));
  uint64_t flags[4] = {1, 1, 1, 1};
  kiln_vmfb_flatbuf_builder_set_ref(b, e, KILN_CUDA_EXPORT_BINDING_FLAGS,
                                    kiln_vmfb_flatbuf_builder_add_scalars(b, KILN_FLATBUF_U64, flags, 4));
  kiln_vmfb_flatbuf_ref_t *refs = malloc(count * sizeof *refs);
  assert_non_null(refs);
  for (size_t i = 0; i < count; i++) refs[i] = e;
  kiln_vmfb_flatbuf_ref_t m = kiln_vmfb_flatbuf_builder_add_table(b, &kiln_vmfb_schema_cuda_module_def);
  kiln_vmfb_flatbuf_builder_set_ref(
      b, m, KILN_CUDA_MODULE_PTX_IMAGE,
      kiln_vmfb_flatbuf_builder_add_string(b, (const char *)ptx->data, ptx->len));
  kiln_vmfb_flatbuf_ref_t root =
      kiln_vmfb_flatbuf_builder_add_table(b, &kiln_vmfb_schema_cuda_executable_def);
  kiln_vmfb_flatbuf_builder_set_ref(b, root, KILN_CUDA_EXECUTABLE_EXPORTS,
                                    kiln_vmfb_flatbuf_builder_add_vector(b, refs, count));
  kiln_vmfb_flatbuf_builder_set_ref(b, root, KILN_CUDA_EXECUTABLE_MODULES,
                                    kiln_vmfb_flatbuf_builder_add_vector(b, &m, 1));
  free(refs);
  kiln_buf_init(out);
  uint8_t header[64] = {'C', 'D', 'A', '1'};
  kiln_buf_append(out, header, sizeof header);
  kiln_vmfb_flatbuf_finish_options_t fo = {.identifier = "CDA1"};
  assert_ok(kiln_vmfb_flatbuf_builder_finish(b, root, &fo, out));
  kiln_vmfb_flatbuf_builder_destroy(b);
  wr64((uint8_t *)out->data + 8, out->len - 64);
}

static void test_hostile_rodata(void **state) {
  fixture_t *f = *state;
  kiln_vmfb_info_t info;
  kiln_buf_t file;
  uint8_t blob[KILN_TEST_VMFB_BYTES];

  /* A constant that claims to be an executable (a header's shape: magic, version
   * 0, zero reserved words): with an impossible size, then with a believable one
   * over noise. Both are unloadable executables. */
  kiln_test_fill_random(blob, sizeof blob, 7);
  memset(blob + 16, 0, 48);
  memcpy(blob, "HIP1", 4);
  wr32(blob + 4, 0);
  wr64(blob + 8, UINT64_MAX);
  set_constant(f, blob, sizeof blob);
  write_ok(f, KILN_VMFB_FORMAT_CUDA, NULL, &file);
  read_copy(file.data, file.len, &info);
  assert_int_equal(info.cls, KILN_VMFB_CLASS_INVALID);
  assert_int_equal(info.n_executables, 2);
  assert_non_null(info.executables[1].problem);
  kiln_vmfb_info_deinit(&info);
  kiln_buf_deinit(&file);

  wr64(blob + 8, sizeof blob - 64);
  set_constant(f, blob, sizeof blob);
  write_ok(f, KILN_VMFB_FORMAT_CUDA, NULL, &file);
  read_copy(file.data, file.len, &info);
  assert_int_equal(info.cls, KILN_VMFB_CLASS_INVALID);
  assert_non_null(info.executables[1].problem);
  kiln_vmfb_info_deinit(&info);
  kiln_buf_deinit(&file);

  /* One export table referenced 50k times: read in bounded time and memory. */
  kiln_buf_t bomb;
  shared_export_bomb(&f->sample.code[0], 50000, &bomb);
  set_constant(f, bomb.data, bomb.len);
  kiln_buf_deinit(&bomb);
  write_ok(f, KILN_VMFB_FORMAT_HIP, NULL, &file);
  read_copy(file.data, file.len, &info);
  assert_int_equal(info.n_executables, 2);
  assert_string_equal(info.executables[1].identifier, "CDA1");
  /* The verifier's visit budget stops the walk: an unloadable executable. */
  assert_non_null(info.executables[1].problem);
  assert_int_equal(info.cls, KILN_VMFB_CLASS_INVALID);
  kiln_vmfb_info_deinit(&info);
  kiln_buf_deinit(&file);

  /* A whole VMFB nested inside a constant is data, not a second module. */
  set_constant(f, f->flat.data, f->flat.len);
  write_ok(f, KILN_VMFB_FORMAT_VULKAN, NULL, &file);
  read_copy(file.data, file.len, &info);
  assert_int_equal(info.cls, KILN_VMFB_CLASS_CURRENT);
  assert_int_equal(info.n_executables, 1);
  kiln_vmfb_info_deinit(&info);
  kiln_buf_deinit(&file);
  set_constant(f, f->zip.data, f->zip.len);
  write_ok(f, KILN_VMFB_FORMAT_VULKAN, NULL, &file);
  assert_int_equal(class_of(file.data, file.len), KILN_VMFB_CLASS_CURRENT);
  kiln_buf_deinit(&file);

  /* Every prefix of a real executable, as a constant: never a crash. */
  kiln_buf_t exe;
  kiln_buf_init(&exe);
  assert_ok(kiln_vmfb_executable_serialize(&f->sample.exe[2], true, &exe));
  for (size_t n = 1; n < exe.len; n += 7) {
    set_constant(f, exe.data, n);
    write_ok(f, KILN_VMFB_FORMAT_CUDA, NULL, &file);
    read_copy(file.data, file.len, &info);
    assert_true(info.n_executables >= 1);
    kiln_vmfb_info_deinit(&info);
    kiln_buf_deinit(&file);
  }
  kiln_buf_deinit(&exe);
}

/* Rodata that only resembles a header-less executable is data: kernel names (HAL
 * 0.7 keeps them as rodata strings for lookup.function) and constants with an
 * identifier at bytes 4..11. */
static void test_lookalike_rodata_is_data(void **state) {
  fixture_t *f = *state;
  kiln_vmfb_info_t info;
  kiln_buf_t file;
  f->sample.kernels[0].name = "convAMD1_kernel";
  f->sample.kernels[1].name = "testCDA1";
  uint8_t blob[256];
  kiln_test_fill_random(blob, sizeof blob, 3);
  memcpy(blob + 4, "VKE1", 4);
  memcpy(blob + 128 + 8, "HIP1", 4);
  set_constant(f, blob, sizeof blob);
  for (int k = 1; k <= 3; k++) {
    write_ok(f, (kiln_vmfb_format_t)k, NULL, &file);
    read_copy(file.data, file.len, &info);
    if (info.cls != KILN_VMFB_CLASS_CURRENT) fail_msg("format %d: %s", k, info.reason);
    assert_int_equal(info.n_executables, 1);
    assert_int_equal(info.executables[0].rodata, 0);
    assert_string_equal(info.executables[0].kernels[0], "convAMD1_kernel");
    kiln_vmfb_info_deinit(&info);
    kiln_buf_deinit(&file);
  }
  /* A real header-less executable as a constant is still recognized. */
  kiln_buf_t exe;
  kiln_buf_init(&exe);
  assert_ok(kiln_vmfb_executable_serialize(&f->sample.exe[1], false, &exe));
  set_constant(f, exe.data, exe.len);
  kiln_buf_deinit(&exe);
  write_ok(f, KILN_VMFB_FORMAT_CUDA, NULL, &file);
  read_copy(file.data, file.len, &info);
  assert_int_equal(info.cls, KILN_VMFB_CLASS_LEGACY);
  assert_int_equal(info.n_executables, 2);
  assert_false(info.executables[1].has_header);
  assert_string_equal(info.executables[1].identifier, "HIP1");
  kiln_vmfb_info_deinit(&info);
  kiln_buf_deinit(&file);
}

/* ---- the embedded source ---- */

static KILN_MUST_USE kiln_status_t extract(const kiln_buf_t *file, uint8_t **out, size_t *out_len) {
  return kiln_vmfb_source_extract((const uint8_t *)file->data, file->len, out, out_len);
}

static void test_source_extract(void **state) {
  fixture_t *f = *state;
  static uint8_t sentinel;
  uint8_t *src = NULL;
  size_t len = 0;

  /* The good case, then a file without source (zip, and flat which cannot
   * carry one). */
  assert_ok(kiln_vmfb_source_extract((const uint8_t *)f->zip.data, f->zip.len, &src, &len));
  assert_int_equal(len, sizeof SOURCE - 1);
  assert_memory_equal(src, SOURCE, len);
  kiln_free(src);
  kiln_buf_t file;
  write_ok(f, KILN_VMFB_FORMAT_CUDA, NULL, &file);
  src = &sentinel;
  len = 99;
  assert_code(extract(&file, &src, &len), KILN_STATUS_NOT_FOUND);
  assert_null(src);
  assert_int_equal(len, 0);
  kiln_buf_deinit(&file);
  /* The flat layout cannot carry a source: the writer refuses rather than drop it,
   * and a flat file has none to extract. */
  kiln_vmfb_write_options_t flat = {
      .flat = true, .source = (const uint8_t *)SOURCE, .source_len = sizeof SOURCE - 1};
  kiln_buf_init(&file);
  assert_code(kiln_vmfb_write("fixture", &f->sample.plan, &f->sample.exe[0], &flat, &file),
              KILN_STATUS_INVALID_ARGUMENT);
  assert_int_equal(file.len, 0);
  kiln_buf_deinit(&file);
  flat.source = NULL;
  flat.source_len = 0;
  write_ok(f, KILN_VMFB_FORMAT_CUDA, &flat, &file);
  assert_code(extract(&file, &src, &len), KILN_STATUS_NOT_FOUND);
  kiln_buf_deinit(&file);

  /* Not a VMFB at all. */
  assert_code(kiln_vmfb_source_extract((const uint8_t *)"nope", 4, &src, &len), KILN_STATUS_DATA_LOSS);

  /* A damaged source entry: the CRC catches it; with the CRC repaired, zstd or the
   * digest does. */
  kiln_buf_init(&file);
  kiln_buf_append(&file, f->zip.data, f->zip.len);
  uint8_t *p = (uint8_t *)file.data;
  kiln_vmfb_archive_t a;
  assert_ok(kiln_vmfb_archive_parse(p, file.len, 0, &a));
  ptrdiff_t i = kiln_vmfb_archive_entry_find(&a, "kiln/source.mlir.zst");
  assert_true(i >= 0);
  size_t start = (size_t)a.entries[i].data_offset, size = (size_t)a.entries[i].size;
  kiln_vmfb_archive_deinit(&a);
  for (size_t at = start; at < start + size; at += 5) {
    p[at] ^= 0x5a;
    assert_code(kiln_vmfb_source_extract(p, file.len, &src, &len), KILN_STATUS_DATA_LOSS);
    zip_fix_crc(p, file.len, "kiln/source.mlir.zst");
    assert_code(kiln_vmfb_source_extract(p, file.len, &src, &len), KILN_STATUS_DATA_LOSS);
    assert_null(src);
    p[at] ^= 0x5a;
    zip_fix_crc(p, file.len, "kiln/source.mlir.zst");
  }
  assert_ok(kiln_vmfb_source_extract(p, file.len, &src, &len));
  kiln_free(src);
  kiln_buf_deinit(&file);

  /* A recorded digest that does not match the source. */
  char wrong[65];
  memset(wrong, '0', 64);
  wrong[64] = 0;
  kiln_vmfb_provenance_t prov = {.source_sha256 = wrong};
  kiln_vmfb_write_options_t o = {
      .provenance = &prov, .source = (const uint8_t *)SOURCE, .source_len = sizeof SOURCE - 1};
  write_ok(f, KILN_VMFB_FORMAT_CUDA, &o, &file);
  assert_code(extract(&file, &src, &len), KILN_STATUS_DATA_LOSS);
  kiln_buf_deinit(&file);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test_setup_teardown(test_current_files, setup, teardown),
      cmocka_unit_test_setup_teardown(test_legacy_files, setup, teardown),
      cmocka_unit_test_setup_teardown(test_invalid_files, setup, teardown),
      cmocka_unit_test_setup_teardown(test_class_names, setup, teardown),
      cmocka_unit_test_setup_teardown(test_every_truncation, setup, teardown),
      cmocka_unit_test_setup_teardown(test_random_byte_flips, setup, teardown),
      cmocka_unit_test_setup_teardown(test_random_garbage, setup, teardown),
      cmocka_unit_test_setup_teardown(test_lying_central_directory, setup, teardown),
      cmocka_unit_test_setup_teardown(test_huge_counts, setup, teardown),
      cmocka_unit_test_setup_teardown(test_hostile_rodata, setup, teardown),
      cmocka_unit_test_setup_teardown(test_lookalike_rodata_is_data, setup, teardown),
      cmocka_unit_test_setup_teardown(test_source_extract, setup, teardown),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
