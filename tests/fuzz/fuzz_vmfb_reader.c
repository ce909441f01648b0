/* libFuzzer target for the VMFB reader and the two layers under it.
 *
 * Every input goes through three entry points, so each layer is fuzzed both on
 * its own and behind the layers that normally filter its input:
 *   1. the reader: kiln_vmfb_read + kiln_vmfb_info_deinit, then
 *      kiln_vmfb_source_extract when the file reads as loadable. Zip entries
 *      carry CRC-32s that a mutation almost always breaks, and the reader stops
 *      at a mismatch; so when the archive parses with a mismatch the reader runs
 *      again on a copy whose CRCs are recomputed, which lets mutations of the
 *      module FlatBuffer and the executables in zip files reach layers 2 and 3;
 *   2. the container: kiln_vmfb_archive_parse, entry_find, entry_verify and
 *      rodata_resolve, checking every range it reports against the input;
 *   3. the FlatBuffer verifier against IREE's root schemas (BytecodeModuleDef
 *      and the CUDA, HIP and Vulkan executables): a buffer carrying one of their
 *      identifiers where the reader looks for it (bytes 4..7, 8..11 when
 *      size-prefixed, or 0..3 before a 64-byte executable header) is verified
 *      as that schema; any other input's first byte picks the schema, the
 *      framing and whether to use tiny depth/visit budgets, with no identifier
 *      check (schema confusion). The buffer is then walked field by field with
 *      the accessors whether or not it verified (they promise to stay in
 *      bounds either way; a verified buffer must also yield every present
 *      string, table and union member).
 * Beyond the sanitizers, CHECK aborts on any broken promise of the headers
 * (a range outside the input, a class that contradicts its facts, a status
 * code the contract does not allow).
 *
 * Built two ways (tests/fuzz/CMakeLists.txt): with -fsanitize=fuzzer in a
 * KILN_FUZZ tree, and with KILN_FUZZ_STANDALONE, where the main() at the end
 * replays files and folders (the committed corpus) once, under gcc and ASan.
 */
#include <dirent.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <zlib.h>

#include "base/alloc.h"
#include "base/status.h"
#include "compiler/vmfb/archive.h"
#include "compiler/vmfb/flatbuf.h"
#include "compiler/vmfb/reader.h"
#include "compiler/vmfb/schema.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

#define CHECK(cond)                                                                                \
  do {                                                                                             \
    if (!(cond)) {                                                                                 \
      fprintf(stderr, "fuzz_vmfb_reader: %s:%d: broken promise: %s\n", __FILE__, __LINE__, #cond); \
      abort();                                                                                     \
    }                                                                                              \
  } while (0)

/* Reads land here so that the compiler keeps them (and ASan checks them). */
static volatile uint8_t sink;

/* True when [p, p + n) lies inside [lo, lo + size). */
static bool inside(const uint8_t *lo, size_t size, const void *p, uint64_t n) {
  const uint8_t *q = p;
  return q >= lo && (uint64_t)(q - lo) <= size && n <= size - (uint64_t)(q - lo);
}

/* Reads the first and last byte of a range the library says is inside the input. */
static void touch(const uint8_t *lo, size_t size, const void *p, uint64_t n) {
  CHECK(inside(lo, size, p, n));
  if (n) sink ^= ((const uint8_t *)p)[0] ^ ((const uint8_t *)p)[n - 1];
}

static void touch_string(const char *s) {
  CHECK(s != NULL);
  sink ^= (uint8_t)strlen(s);
}

static void expect_status(kiln_status_t st, kiln_status_code_t a, kiln_status_code_t b) {
  if (!st) return;
  kiln_status_code_t code = kiln_status_code(st);
  CHECK(code == a || code == b);
  touch_string(kiln_status_message(st));
  kiln_status_free(st);
}

/* ---- 1. the reader ---- */

static void check_info(const kiln_vmfb_info_t *info, size_t size) {
  CHECK(info->reason != NULL);
  touch_string(info->reason);
  CHECK(info->cls == KILN_VMFB_CLASS_CURRENT || info->cls == KILN_VMFB_CLASS_LEGACY ||
        info->cls == KILN_VMFB_CLASS_INVALID);
  touch_string(kiln_vmfb_class_name(info->cls));
  CHECK(info->file_size == size);
  CHECK(info->layout >= 0 && info->layout <= 2);
  if (info->name) touch_string(info->name);
  for (size_t i = 0; i < info->n_dependencies; i++) touch_string(info->dependencies[i].name);
  for (size_t i = 0; i < info->n_imports; i++) {
    touch_string(info->imports[i].full_name);
    if (info->imports[i].cconv) touch_string(info->imports[i].cconv);
  }
  for (size_t i = 0; i < info->n_exports; i++) {
    touch_string(info->exports[i].name);
    if (info->exports[i].cconv) touch_string(info->exports[i].cconv);
  }
  for (size_t i = 0; i < info->n_attrs; i++) {
    touch_string(info->attrs[i].key);
    touch_string(info->attrs[i].value);
  }
  bool source_entry = false;
  for (size_t i = 0; i < info->n_entries; i++) {
    touch_string(info->entries[i]);
    if (strcmp(info->entries[i], "kiln/source.mlir.zst") == 0) source_entry = true;
  }
  CHECK(info->has_source == source_entry);
  CHECK(info->n_executables <= info->n_rodata);
  for (size_t i = 0; i < info->n_rodata; i++) {
    CHECK(info->rodata[i].size <= size);
  }
  bool all_current = true;
  for (size_t i = 0; i < info->n_executables; i++) {
    const kiln_vmfb_executable_info_t *e = &info->executables[i];
    CHECK(e->rodata < info->n_rodata);
    /* a flatbuffer file identifier, or "ELF" for a CPU executable (reader.h) */
    CHECK(strlen(e->identifier) == 4 || strcmp(e->identifier, "ELF") == 0);
    if (e->format) touch_string(e->format);
    for (size_t k = 0; k < e->n_kernels; k++) {
      touch_string(e->kernels[k]);
      if (e->block_dims) sink ^= (uint8_t)(e->block_dims[3 * k] + e->block_dims[3 * k + 2]);
      if (e->constant_counts) sink ^= (uint8_t)e->constant_counts[k];
    }
    if (e->chip) touch_string(e->chip);
    if (e->code_kind) touch_string(e->code_kind);
    if (e->problem) touch_string(e->problem);
    if (!e->has_header || e->problem) all_current = false;
  }
  if (info->cls == KILN_VMFB_CLASS_CURRENT) {
    /* reader.h: hal >= 7, bytecode 17.x, every executable behind its header
     * (a module without a hal dependency and without hal imports counts too). */
    CHECK(info->bytecode_version >> 16 == 17);
    CHECK(info->hal_version == 0 || info->hal_version == 7);
    CHECK(all_current);
    CHECK(info->name != NULL);
  }
  const char *digest = kiln_vmfb_info_attr(info, "kiln.source.sha256");
  if (digest) touch_string(digest);
}

static void fuzz_reader(const uint8_t *data, size_t size) {
  kiln_vmfb_info_t info;
  /* A status is for the caller's misuse only; a hostile file is never misuse. */
  CHECK(kiln_vmfb_read(data, size, &info) == NULL);
  check_info(&info, size);
  bool loadable = info.cls != KILN_VMFB_CLASS_INVALID;
  bool has_source = info.has_source;
  kiln_vmfb_info_deinit(&info);
  kiln_vmfb_info_deinit(&info); /* idempotent on the cleared struct */
  if (!loadable) return;

  static uint8_t sentinel; /* the out-params must be cleared even on failure */
  uint8_t *source = &sentinel;
  size_t source_len = 1;
  kiln_status_t st = kiln_vmfb_source_extract(data, size, &source, &source_len);
  if (st) {
    CHECK(source == NULL && source_len == 0);
    CHECK(has_source || kiln_status_code(st) == KILN_STATUS_NOT_FOUND);
    expect_status(st, KILN_STATUS_NOT_FOUND, KILN_STATUS_DATA_LOSS);
    return;
  }
  CHECK(has_source && source != NULL);
  if (source_len) sink ^= source[0] ^ source[source_len - 1];
  kiln_free(source);
}

/* ---- 2. the container ---- */

/* A copy of the file whose stored entries' CRC-32s are what their data hashes to,
 * in the local headers and in every central directory record with the entry's
 * name (found by signature: good enough for a file that already parses). NULL
 * when no entry mismatched. Owned by the caller. */
static uint8_t *crc_fixed_copy(const kiln_vmfb_archive_t *a, const uint8_t *data, size_t size) {
  uint8_t *copy = NULL;
  for (size_t i = 0; i < a->entry_count; i++) {
    const kiln_vmfb_archive_entry_t *e = &a->entries[i];
    if (e->crc != KILN_VMFB_ARCHIVE_CRC_MISMATCH) continue;
    if (!copy) copy = kiln_memdup(data, size);
    uint32_t crc = (uint32_t)crc32(0L, data + e->data_offset, (uInt)e->size);
    uint8_t le[4] = {(uint8_t)crc, (uint8_t)(crc >> 8), (uint8_t)(crc >> 16), (uint8_t)(crc >> 24)};
    if (e->header_offset + 18 <= size) memcpy(copy + e->header_offset + 14, le, 4);
    for (size_t p = 0; p + 46 + e->name_length <= size; p++) {
      if (memcmp(copy + p, "PK\1\2", 4) != 0) continue;
      if (kiln_vmfb_flatbuf_load_u16(copy + p + 28) != e->name_length) continue;
      if (memcmp(copy + p + 46, e->name, e->name_length) != 0) continue;
      memcpy(copy + p + 16, le, 4);
    }
  }
  return copy;
}

/* Parses and checks every promise archive.h makes about the result. Returns the
 * CRC-fixed copy for fuzz_reader (see crc_fixed_copy), or NULL. */
static uint8_t *fuzz_archive(const uint8_t *data, size_t size) {
  kiln_vmfb_archive_t a;
  kiln_status_t st = kiln_vmfb_archive_parse(data, size, KILN_VMFB_ARCHIVE_VERIFY_CRC, &a);
  if (st) {
    expect_status(st, KILN_STATUS_INVALID_ARGUMENT, KILN_STATUS_INVALID_ARGUMENT);
    kiln_vmfb_archive_deinit(&a); /* cleared on entry: a no-op */
    return NULL;
  }
  CHECK(a.file == data && a.file_size == size);
  CHECK(a.flatbuffer_size >= 4 && a.flatbuffer == data + a.flatbuffer_offset);
  touch(data, size, a.flatbuffer, a.flatbuffer_size);
  CHECK(kiln_vmfb_flatbuf_load_u32(a.flatbuffer) == a.flatbuffer_size - 4);
  CHECK(a.rodata_base == ((a.flatbuffer_offset + a.flatbuffer_size + 63) & ~(uint64_t)63));
  CHECK(a.has_iree_identifier ==
        (a.flatbuffer_size >= 12 && memcmp(a.flatbuffer + 8, KILN_VM_FILE_IDENTIFIER, 4) == 0));
  if (a.layout == KILN_VMFB_ARCHIVE_LAYOUT_FLAT) {
    CHECK(a.entry_count == 0 && a.flatbuffer_offset == 0);
    CHECK(kiln_vmfb_archive_entry_find(&a, KILN_VMFB_ARCHIVE_MODULE_NAME) == -1);
  } else {
    CHECK(a.layout == KILN_VMFB_ARCHIVE_LAYOUT_ZIP);
    CHECK(a.entry_count >= 1 && a.entry_count <= KILN_VMFB_ARCHIVE_MAX_ENTRIES);
    CHECK(a.module_entry < a.entry_count && a.entries[a.module_entry].header_offset == 0);
    CHECK(a.entries[a.module_entry].stored);
  }
  for (size_t i = 0; i < a.entry_count; i++) {
    const kiln_vmfb_archive_entry_t *e = &a.entries[i];
    CHECK(e->name != NULL && strlen(e->name) == e->name_length);
    CHECK(e->name_length >= 1 && e->name_length <= KILN_VMFB_ARCHIVE_NAME_MAX);
    CHECK(e->header_offset < e->data_offset);
    touch(data, size, data + e->header_offset, e->data_offset - e->header_offset);
    touch(data, size, data + e->data_offset, e->size);
    CHECK(!e->stored || e->method == 0);
    if (e->stored) {
      CHECK(e->crc == KILN_VMFB_ARCHIVE_CRC_OK || e->crc == KILN_VMFB_ARCHIVE_CRC_MISMATCH);
    } else {
      CHECK(e->crc == KILN_VMFB_ARCHIVE_CRC_COMPRESSED);
    }
    CHECK(kiln_vmfb_archive_entry_find(&a, e->name) == (ptrdiff_t)i);
    /* entry_verify recomputes what parse recorded. */
    st = kiln_vmfb_archive_entry_verify(&a, i);
    if (!e->stored) {
      CHECK(st && kiln_status_code(st) == KILN_STATUS_UNIMPLEMENTED);
    } else if (e->crc == KILN_VMFB_ARCHIVE_CRC_OK) {
      CHECK(st == NULL);
    } else {
      CHECK(st && kiln_status_code(st) == KILN_STATUS_DATA_LOSS);
    }
    expect_status(st, KILN_STATUS_UNIMPLEMENTED, KILN_STATUS_DATA_LOSS);
  }
  st = kiln_vmfb_archive_entry_verify(&a, a.entry_count);
  CHECK(st != NULL);
  expect_status(st, KILN_STATUS_OUT_OF_RANGE, KILN_STATUS_OUT_OF_RANGE);

  /* External rodata ranges: a few fixed probes and two from the input's tail. */
  uint64_t probes[][2] = {
      {0, 0},
      {0, size},
      {UINT64_MAX, 2},
      {1, UINT64_MAX},
      {size >= 16 ? kiln_vmfb_flatbuf_load_u64(data + size - 16) % (size + 1) : 0,
       size >= 16 ? kiln_vmfb_flatbuf_load_u64(data + size - 8) % (size + 1) : 0},
      {size >= 16 ? kiln_vmfb_flatbuf_load_u64(data + size - 16) : 0,
       size >= 16 ? kiln_vmfb_flatbuf_load_u64(data + size - 8) : 0},
  };
  for (size_t i = 0; i < sizeof probes / sizeof probes[0]; i++) {
    const uint8_t *p = NULL;
    st = kiln_vmfb_archive_rodata_resolve(&a, probes[i][0], probes[i][1], &p);
    if (st) {
      CHECK(p == NULL);
      expect_status(st, KILN_STATUS_OUT_OF_RANGE, KILN_STATUS_OUT_OF_RANGE);
      continue;
    }
    CHECK(p == data + a.rodata_base + probes[i][0]);
    touch(data, size, p, probes[i][1]);
  }

  uint8_t *fixed = a.layout == KILN_VMFB_ARCHIVE_LAYOUT_ZIP ? crc_fixed_copy(&a, data, size) : NULL;
  kiln_vmfb_archive_deinit(&a);
  kiln_vmfb_archive_deinit(&a);
  return fixed;
}

/* ---- 3. the FlatBuffer verifier and accessors ---- */

typedef struct walk_s {
  const uint8_t *lo; /* the buffer given to the verifier */
  size_t size;
  bool verified;
  uint64_t budget; /* objects left to visit: unverified buffers may share and loop */
} walk_t;

static bool spend(walk_t *w) {
  if (!w->budget) return false;
  w->budget--;
  return true;
}

static void walk_table(walk_t *w, kiln_vmfb_flatbuf_table_t t, unsigned depth);

static void walk_string(walk_t *w, const char *s, size_t len, bool present) {
  if (!s) {
    CHECK(len == 0);
    CHECK(!(w->verified && present));
    return;
  }
  touch(w->lo, w->size, s, (uint64_t)len + 1);
  CHECK(s[len] == '\0');
}

static void walk_vector(walk_t *w, kiln_vmfb_flatbuf_table_t t, const kiln_vmfb_flatbuf_field_desc_t *f,
                        unsigned depth) {
  kiln_vmfb_flatbuf_vector_t v = kiln_vmfb_flatbuf_table_get_vector(t, f->slot);
  size_t n = kiln_vmfb_flatbuf_vector_count(v);
  if (n) touch(w->lo, w->size, v.data + v.pos, (uint64_t)n * v.elem_size);
  const uint8_t *raw = kiln_vmfb_flatbuf_vector_data(v);
  if (raw) touch(w->lo, w->size, raw, (uint64_t)n * v.elem_size);
  /* Out of range reads as zero/absent for every element kind. */
  CHECK(kiln_vmfb_flatbuf_vector_get_int(v, n) == 0);
  CHECK(kiln_vmfb_flatbuf_vector_get_struct(v, n) == NULL);
  CHECK(kiln_vmfb_flatbuf_vector_get_string(v, n, NULL) == NULL);
  CHECK(!kiln_vmfb_flatbuf_table_exists(kiln_vmfb_flatbuf_vector_get_table(v, n)));
  switch (f->kind) {
    case KILN_FLATBUF_VECTOR:
    case KILN_FLATBUF_VECTOR_UNION_TYPE:
      if (n) {
        sink ^= (uint8_t)kiln_vmfb_flatbuf_vector_get_uint(v, 0);
        sink ^= (uint8_t)kiln_vmfb_flatbuf_vector_get_int(v, n - 1);
        sink ^= (uint8_t)kiln_vmfb_flatbuf_vector_get_float(v, n - 1);
      }
      break;
    case KILN_FLATBUF_VECTOR_STRUCT:
      if (n) {
        touch(w->lo, w->size, kiln_vmfb_flatbuf_vector_get_struct(v, 0), f->struct_size);
        touch(w->lo, w->size, kiln_vmfb_flatbuf_vector_get_struct(v, n - 1), f->struct_size);
      }
      break;
    case KILN_FLATBUF_VECTOR_STRING:
      for (size_t i = 0; i < n && spend(w); i++) {
        size_t len = 0;
        const char *s = kiln_vmfb_flatbuf_vector_get_string(v, i, &len);
        walk_string(w, s, len, true);
      }
      break;
    case KILN_FLATBUF_VECTOR_TABLE:
      for (size_t i = 0; i < n && spend(w); i++) {
        kiln_vmfb_flatbuf_table_t e = kiln_vmfb_flatbuf_vector_get_table(v, i);
        CHECK(!w->verified || kiln_vmfb_flatbuf_table_exists(e));
        walk_table(w, e, depth + 1);
      }
      break;
    case KILN_FLATBUF_VECTOR_UNION: {
      size_t count = kiln_vmfb_flatbuf_table_get_union_count(t, f->slot);
      CHECK(count <= n);
      for (size_t i = 0; i < count && spend(w); i++) {
        kiln_vmfb_flatbuf_table_t e;
        uint8_t type = kiln_vmfb_flatbuf_table_get_union_at(t, f->slot, i, &e);
        CHECK(!w->verified || !type || kiln_vmfb_flatbuf_table_exists(e));
        walk_table(w, e, depth + 1);
      }
      CHECK(kiln_vmfb_flatbuf_table_get_union_at(t, f->slot, count, &(kiln_vmfb_flatbuf_table_t){0}) == 0);
      break;
    }
    default: CHECK(false);
  }
}

static void walk_table(walk_t *w, kiln_vmfb_flatbuf_table_t t, unsigned depth) {
  if (!kiln_vmfb_flatbuf_table_exists(t) || depth > KILN_VMFB_FLATBUF_MAX_DEPTH || !spend(w)) return;
  CHECK(t.desc != NULL);
  touch(w->lo, w->size, t.data + t.pos, 4);
  for (uint16_t slot = 0; slot < t.desc->field_count; slot++) {
    const kiln_vmfb_flatbuf_field_desc_t *f = &t.desc->fields[slot];
    if (f->deprecated) continue;
    bool has = kiln_vmfb_flatbuf_table_has(t, slot);
    switch (f->kind) {
      case KILN_FLATBUF_BOOL:
      case KILN_FLATBUF_U8:
      case KILN_FLATBUF_I8:
      case KILN_FLATBUF_U16:
      case KILN_FLATBUF_I16:
      case KILN_FLATBUF_U32:
      case KILN_FLATBUF_I32:
      case KILN_FLATBUF_U64:
      case KILN_FLATBUF_I64:
      case KILN_FLATBUF_UNION_TYPE: {
        int64_t value = kiln_vmfb_flatbuf_table_get_int(t, slot);
        CHECK(has || value == f->default_int);
        CHECK(kiln_vmfb_flatbuf_table_get_uint(t, slot) == (uint64_t)value);
        CHECK(kiln_vmfb_flatbuf_table_get_bool(t, slot) == (value != 0));
        CHECK(kiln_vmfb_flatbuf_table_get_float(t, slot) == 0.0);
        break;
      }
      case KILN_FLATBUF_F32:
      case KILN_FLATBUF_F64: {
        double value = kiln_vmfb_flatbuf_table_get_float(t, slot);
        CHECK(has || value == f->default_float || (value != value && f->default_float != f->default_float));
        CHECK(kiln_vmfb_flatbuf_table_get_int(t, slot) == 0);
        break;
      }
      case KILN_FLATBUF_STRUCT: {
        const uint8_t *s = kiln_vmfb_flatbuf_table_get_struct(t, slot);
        CHECK((s != NULL) == has);
        if (s) touch(w->lo, w->size, s, f->struct_size);
        break;
      }
      case KILN_FLATBUF_STRING: {
        size_t len = 0;
        const char *s = kiln_vmfb_flatbuf_table_get_string(t, slot, &len);
        walk_string(w, s, len, has);
        break;
      }
      case KILN_FLATBUF_TABLE: {
        kiln_vmfb_flatbuf_table_t sub = kiln_vmfb_flatbuf_table_get_table(t, slot);
        CHECK(!w->verified || kiln_vmfb_flatbuf_table_exists(sub) == has);
        walk_table(w, sub, depth + 1);
        break;
      }
      case KILN_FLATBUF_UNION: {
        kiln_vmfb_flatbuf_table_t sub;
        uint8_t type = kiln_vmfb_flatbuf_table_get_union(t, slot, &sub);
        CHECK(type == (uint8_t)kiln_vmfb_flatbuf_table_get_uint(t, (uint16_t)(slot - 1)));
        CHECK(!w->verified || kiln_vmfb_flatbuf_table_exists(sub) == (type != 0));
        walk_table(w, sub, depth + 1);
        break;
      }
      case KILN_FLATBUF_VECTOR:
      case KILN_FLATBUF_VECTOR_STRUCT:
      case KILN_FLATBUF_VECTOR_STRING:
      case KILN_FLATBUF_VECTOR_TABLE:
      case KILN_FLATBUF_VECTOR_UNION_TYPE:
      case KILN_FLATBUF_VECTOR_UNION: walk_vector(w, t, f, depth); break;
      default: CHECK(false);
    }
  }
  /* Slots past the descriptor read as absent. */
  CHECK(!kiln_vmfb_flatbuf_table_has(t, t.desc->field_count));
  CHECK(kiln_vmfb_flatbuf_table_get_uint(t, t.desc->field_count) == 0);
}

typedef struct root_s {
  const kiln_vmfb_flatbuf_table_desc_t *desc;
  const char *identifier;
} root_t;

static const root_t roots[] = {
    {&kiln_vmfb_schema_vm_bytecode_module_def, KILN_VM_FILE_IDENTIFIER},
    {&kiln_vmfb_schema_cuda_executable_def, KILN_CUDA_FILE_IDENTIFIER},
    {&kiln_vmfb_schema_hip_executable_def, KILN_HIP_FILE_IDENTIFIER},
    {&kiln_vmfb_schema_vk_executable_def, KILN_VK_FILE_IDENTIFIER},
};

static void verify_and_walk(const uint8_t *p, size_t n, const kiln_vmfb_flatbuf_table_desc_t *desc,
                            const kiln_vmfb_flatbuf_verify_options_t *options) {
  kiln_status_t st = kiln_vmfb_flatbuf_verify(p, n, options, desc);
  walk_t w = {.lo = p, .size = n, .verified = st == NULL, .budget = 4096 + (uint64_t)n};
  expect_status(st, KILN_STATUS_INVALID_ARGUMENT, KILN_STATUS_INVALID_ARGUMENT);
  kiln_vmfb_flatbuf_table_t root = kiln_vmfb_flatbuf_root(p, n, options->size_prefixed, desc);
  CHECK(!w.verified || kiln_vmfb_flatbuf_table_exists(root));
  walk_table(&w, root, 1);
}

static void fuzz_flatbuf(const uint8_t *data, size_t size) {
  bool matched = false;
  for (size_t i = 0; i < sizeof roots / sizeof roots[0]; i++) {
    const root_t *r = &roots[i];
    kiln_vmfb_flatbuf_verify_options_t o = {.identifier = r->identifier};
    if (size >= 8 && memcmp(data + 4, r->identifier, 4) == 0) {
      verify_and_walk(data, size, r->desc, &o);
      matched = true;
    }
    if (size >= 12 && memcmp(data + 8, r->identifier, 4) == 0) {
      o.size_prefixed = true;
      verify_and_walk(data, size, r->desc, &o);
      o.size_prefixed = false;
      matched = true;
    }
    if (size >= 64 && memcmp(data, r->identifier, 4) == 0) {
      verify_and_walk(data + 64, size - 64, r->desc, &o);
      matched = true;
    }
  }
  if (matched || size == 0) return;
  uint8_t sel = data[0];
  kiln_vmfb_flatbuf_verify_options_t o = {.size_prefixed = (sel & 4) != 0};
  if (sel & 8) {
    o.max_depth = 1 + (sel >> 4);
    o.max_objects = 1 + (sel >> 4);
  }
  verify_and_walk(data, size, roots[sel & 3].desc, &o);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  uint8_t *fixed = fuzz_archive(data, size);
  fuzz_reader(data, size);
  if (fixed) {
    fuzz_reader(fixed, size);
    kiln_free(fixed);
  }
  fuzz_flatbuf(data, size);
  return 0;
}

#ifdef KILN_FUZZ_STANDALONE
/* Replays each file named, and each file in each folder named, once. */
static int replay_file(const char *path) {
  FILE *f = fopen(path, "rb");
  if (!f) {
    perror(path);
    return 1;
  }
  struct stat sb;
  if (fstat(fileno(f), &sb) != 0 || !S_ISREG(sb.st_mode)) {
    fclose(f);
    return 0;
  }
  size_t size = (size_t)sb.st_size;
  /* An exact-size heap block, as libFuzzer passes, so ASan sees any overread. */
  uint8_t *data = malloc(size ? size : 1);
  if (!data || fread(data, 1, size, f) != size) {
    fprintf(stderr, "%s: short read\n", path);
    free(data);
    fclose(f);
    return 1;
  }
  fclose(f);
  LLVMFuzzerTestOneInput(data, size);
  free(data);
  return 0;
}

int main(int argc, char **argv) {
  size_t files = 0;
  int failed = 0;
  for (int i = 1; i < argc; i++) {
    DIR *d = opendir(argv[i]);
    if (!d) {
      failed |= replay_file(argv[i]);
      files++;
      continue;
    }
    struct dirent *de;
    while ((de = readdir(d)) != NULL) {
      if (de->d_name[0] == '.') continue;
      char path[4096];
      snprintf(path, sizeof path, "%s/%s", argv[i], de->d_name);
      failed |= replay_file(path);
      files++;
    }
    closedir(d);
  }
  if (files == 0) {
    fprintf(stderr, "usage: %s FILE|DIR...: replays each input once (no inputs found)\n", argv[0]);
    return 2;
  }
  printf("fuzz_vmfb_reader: replayed %zu input(s)\n", files);
  return failed;
}
#endif
