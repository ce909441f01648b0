/* Unit tests for compiler/vmfb/archive: the golden byte layout of the zip and flat
 * layouts for a small module (every header offset and field, as IREE's
 * ZIPArchiveWriter lays them out); plan/write round trips through the reader for
 * both layouts, extra entries included; plan offsets that stop matching after the
 * FlatBuffer grows (FAILED_PRECONDITION) and that stay valid when only 64-byte
 * alignments are used; writer argument validation; determinism; the written zip
 * accepted by unzip (-t, -Z1 listing, extraction) and by python3 -m zipfile -t
 * when those are installed, and an Info-ZIP `zip -0` archive read back; a file
 * laid out the way iree-compile writes it (its rewritten size prefix and 4-byte
 * gap) read with the runtime's rodata base; every truncation of both layouts and
 * thousands of random byte flips parsed without a crash, each accepted result
 * checked for in-bounds ranges; and hostile archives: lying entry counts,
 * directories outside the file, names with NUL, overlong and duplicate names,
 * data past the end (the exact message), data into the directory, overlapping
 * entries, zip64 fields missing or running past their record, a broken zip64
 * locator, multi-disk markers, mismatched local headers, no module entry,
 * compressed and encrypted entries (reported, never inflated), CRC mismatches,
 * end records hidden beyond the 64 KiB search window, comments, and size
 * prefixes past the end of the file. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>
#include <zlib.h>

#include "base/alloc.h"
#include "base/buf.h"
#include "base/file.h"
#include "base/status.h"
#include "compiler/vmfb/archive.h"
#include "tests/unit/support/testing.h"

/* The standard example: a 100-byte FlatBuffer, two segments, one extra entry. */
enum {
  FB_SIZE = 100,
  SEG0_SIZE = 5000,
  SEG1_SIZE = 300,
  SEG1_ALIGN = 256,
  EXTRA_SIZE = 77,
  /* Its golden zip layout (see test_golden_zip_layout for the derivation). */
  ZIP_BASE = 192,
  SEG0_HEADER = 192,
  SEG0_DATA = 256,
  SEG1_HEADER = 5256,
  SEG1_DATA = 5376,
  EXTRA_HEADER = 5676,
  EXTRA_DATA = 5760,
  DIR_OFFSET = 5837,
  DIR_SIZE = 346,
  EOCD64_OFFSET = 6183,
  LOCATOR_OFFSET = 6239,
  EOCD_OFFSET = 6259,
  ZIP_FILE_SIZE = 6281,
  /* Directory records of the example, in order. */
  CD0 = DIR_OFFSET, /* module.fb: 46 + 9 + 28 */
  CD1 = CD0 + 83,   /* _sm_89.bin: 46 + 10 + 28 */
  CD2 = CD1 + 84,   /* weights.bin */
  CD3 = CD2 + 85,   /* kiln/source.mlir.zst */
  /* Its golden flat layout. */
  FLAT_BASE = 128,
  FLAT_SEG1_DATA = 5376,
  FLAT_FILE_SIZE = 5676,
};

static const char SEG0_NAME[] = "_sm_89.bin";
static const char SEG1_NAME[] = "weights.bin";
static const char EXTRA_NAME[] = "kiln/source.mlir.zst";

typedef struct fixture_s {
  uint8_t *fb;
  uint8_t *seg0, *seg1, *extra;
  kiln_vmfb_archive_file_t segments[2];
  kiln_vmfb_archive_file_t extras[1];
  kiln_vmfb_archive_contents_t zip;  /* ZIP with the extra entry */
  kiln_vmfb_archive_contents_t flat; /* FLAT, no extras */
  uint64_t offsets[2];               /* zip plan */
  uint64_t flat_offsets[2];          /* flat plan */
  kiln_buf_t zip_file;
  kiln_buf_t flat_file;
  char *root; /* temp dir, removed in teardown */
} fixture_t;

/* ---- helpers ---- */

#define assert_ok    kiln_test_assert_ok

#define assert_fails kiln_test_assert_fails

static uint16_t rd16(const uint8_t *p) { return (uint16_t)(p[0] | (p[1] << 8)); }
static uint32_t rd32(const uint8_t *p) {
  return (uint32_t)p[0] | ((uint32_t)p[1] << 8) | ((uint32_t)p[2] << 16) | ((uint32_t)p[3] << 24);
}
static uint64_t rd64(const uint8_t *p) { return (uint64_t)rd32(p) | ((uint64_t)rd32(p + 4) << 32); }
static void wr16(uint8_t *p, uint16_t v) {
  p[0] = (uint8_t)v;
  p[1] = (uint8_t)(v >> 8);
}
static void wr32(uint8_t *p, uint32_t v) {
  wr16(p, (uint16_t)v);
  wr16(p + 2, (uint16_t)(v >> 16));
}
static void wr64(uint8_t *p, uint64_t v) {
  wr32(p, (uint32_t)v);
  wr32(p + 4, (uint32_t)(v >> 32));
}

static uint32_t crc_of(const void *p, size_t n) { return (uint32_t)crc32(0, p, (uInt)n); }

/* A size-prefixed FlatBuffer-shaped blob: prefix, root offset 12, "IREE", noise. */
static uint8_t *make_flatbuffer(size_t size, uint64_t seed) {
  uint8_t *fb = kiln_test_make_data(size, false, seed);
  wr32(fb, (uint32_t)(size - 4));
  wr32(fb + 4, 12);
  memcpy(fb + 8, "IREE", 4);
  return fb;
}

static uint8_t *copy_of(const void *p, size_t n) {
  uint8_t *c = malloc(n ? n : 1);
  assert_non_null(c);
  if (n) memcpy(c, p, n);
  return c;
}

/* Parses exactly `n` bytes from a fresh heap copy (so ASan sees any over-read). */
static KILN_MUST_USE kiln_status_t parse_copy(const void *p, size_t n, uint32_t flags,
                                              kiln_vmfb_archive_t *out, uint8_t **out_copy) {
  uint8_t *c = copy_of(p, n);
  kiln_status_t status = kiln_vmfb_archive_parse(c, n, flags, out);
  *out_copy = c;
  return status;
}

/* Checks what every accepted parse must guarantee. */
static void assert_sane(const kiln_vmfb_archive_t *a, const uint8_t *file, size_t size) {
  assert_ptr_equal(a->file, file);
  assert_int_equal(a->file_size, size);
  assert_true(a->flatbuffer >= file && a->flatbuffer_size >= 12);
  assert_true(a->flatbuffer_offset + a->flatbuffer_size <= size);
  assert_ptr_equal(a->flatbuffer, file + a->flatbuffer_offset);
  assert_int_equal(a->rodata_base % 64, 0);
  assert_true(a->rodata_base >= a->flatbuffer_offset + a->flatbuffer_size);
  for (size_t i = 0; i < a->entry_count; i++) {
    const kiln_vmfb_archive_entry_t *e = &a->entries[i];
    assert_int_equal(strlen(e->name), e->name_length);
    assert_true(e->header_offset < e->data_offset);
    assert_true(e->data_offset <= size && e->size <= size - e->data_offset);
    kiln_status_t status = kiln_vmfb_archive_entry_verify(a, i);
    if (status) {
      kiln_status_code_t code = kiln_status_code(status);
      assert_true(code == KILN_STATUS_DATA_LOSS || code == KILN_STATUS_UNIMPLEMENTED);
      kiln_status_free(status);
    }
  }
  if (a->layout == KILN_VMFB_ARCHIVE_LAYOUT_ZIP) {
    assert_true(a->module_entry < a->entry_count);
    assert_int_equal(a->entries[a->module_entry].header_offset, 0);
    assert_int_equal(a->entries[a->module_entry].data_offset, a->flatbuffer_offset);
  } else {
    assert_int_equal(a->entry_count, 0);
  }
}

static bool have_tool(const char *name) {
  char cmd[256];
  snprintf(cmd, sizeof cmd, "command -v %s >/dev/null 2>&1", name);
  return system(cmd) == 0;
}

static int run(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static int run(const char *fmt, ...) {
  char cmd[2048];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(cmd, sizeof cmd, fmt, ap);
  va_end(ap);
  int rc = system(cmd);
  return rc == -1 ? -1 : WIFEXITED(rc) ? WEXITSTATUS(rc) : 128;
}

static void write_file(const char *path, const void *data, size_t len) {
  FILE *fp = fopen(path, "wb");
  assert_non_null(fp);
  assert_int_equal(fwrite(data, 1, len, fp), len);
  assert_int_equal(fclose(fp), 0);
}

static uint8_t *read_file(const char *path, size_t *out_len) {
  char *data = kiln_read_file(path, out_len);
  if (!data) fail_msg("cannot read %s", path);
  return (uint8_t *)data;
}

/* ---- a test-side zip builder, for files kiln's writer would never produce ---- */

typedef struct tzip_entry_s {
  const char *name;
  size_t name_len; /* may cover NUL bytes */
  const uint8_t *data;
  size_t size;
  uint16_t method;
  uint16_t flags;
  size_t gap_before; /* zero bytes before the local header */
  size_t align;      /* data alignment through an 0xCAFE padding field (0: none) */
  bool zip64;        /* sizes and offset through zip64 fields */
  bool omit;         /* leave it out of the central directory */
  bool bad_crc;
  uint32_t size_override; /* nonzero: the directory's 32-bit sizes */
} tzip_entry_t;

typedef struct tzip_s {
  bool zip64_end; /* zip64 EOCD + locator, sentinels in the EOCD */
  size_t comment_len;
  bool count_sentinel; /* classic EOCD count 0xFFFF without zip64 */
  size_t gap_after;    /* zero bytes between the last entry and the directory */
} tzip_t;

static void put_zeros(kiln_buf_t *b, size_t n) {
  for (size_t i = 0; i < n; i++) kiln_buf_append_char(b, 0);
}

static void build_zip(const tzip_t *z, const tzip_entry_t *entries, size_t n, kiln_buf_t *out) {
  kiln_buf_clear(out);
  uint64_t *offsets = calloc(n, sizeof *offsets);
  assert_non_null(offsets);
  uint8_t h[64];
  for (size_t i = 0; i < n; i++) {
    const tzip_entry_t *e = &entries[i];
    put_zeros(out, e->gap_before);
    offsets[i] = out->len;
    size_t fixed = 30 + e->name_len + (e->zip64 ? 20 : 0) + (e->align ? 4 : 0);
    size_t pad = e->align ? (e->align - (out->len + fixed) % e->align) % e->align : 0;
    size_t extra_len = (e->align ? 4 + pad : 0) + (e->zip64 ? 20 : 0);
    uint32_t crc = crc_of(e->data, e->size) ^ (e->bad_crc ? 1u : 0u);
    wr32(h, 0x04034B50u);
    wr16(h + 4, 20);
    wr16(h + 6, e->flags);
    wr16(h + 8, e->method);
    wr16(h + 10, 0);
    wr16(h + 12, 0x21);
    wr32(h + 14, crc);
    wr32(h + 18, e->zip64 ? UINT32_MAX : (uint32_t)e->size);
    wr32(h + 22, e->zip64 ? UINT32_MAX : (uint32_t)e->size);
    wr16(h + 26, (uint16_t)e->name_len);
    wr16(h + 28, (uint16_t)extra_len);
    kiln_buf_append(out, h, 30);
    kiln_buf_append(out, e->name, e->name_len);
    if (e->align) {
      wr16(h, 0xFECA);
      wr16(h + 2, (uint16_t)pad);
      kiln_buf_append(out, h, 4);
      put_zeros(out, pad);
    }
    if (e->zip64) {
      wr16(h, 1);
      wr16(h + 2, 16);
      wr64(h + 4, e->size);
      wr64(h + 12, e->size);
      kiln_buf_append(out, h, 20);
    }
    kiln_buf_append(out, e->data, e->size);
  }
  put_zeros(out, z->gap_after);
  uint64_t dir = out->len;
  size_t count = 0;
  for (size_t i = 0; i < n; i++) {
    const tzip_entry_t *e = &entries[i];
    if (e->omit) continue;
    count++;
    uint32_t crc = crc_of(e->data, e->size) ^ (e->bad_crc ? 1u : 0u);
    uint32_t size32 = e->size_override ? e->size_override : e->zip64 ? UINT32_MAX : (uint32_t)e->size;
    wr32(h, 0x02014B50u);
    wr16(h + 4, 0x031E);
    wr16(h + 6, 20);
    wr16(h + 8, e->flags);
    wr16(h + 10, e->method);
    wr16(h + 12, 0);
    wr16(h + 14, 0x21);
    wr32(h + 16, crc);
    wr32(h + 20, size32);
    wr32(h + 24, size32);
    wr16(h + 28, (uint16_t)e->name_len);
    wr16(h + 30, e->zip64 ? 28 : 0);
    wr16(h + 32, 0);
    wr16(h + 34, 0);
    wr16(h + 36, 0);
    wr32(h + 38, 0);
    wr32(h + 42, e->zip64 ? UINT32_MAX : (uint32_t)offsets[i]);
    kiln_buf_append(out, h, 46);
    kiln_buf_append(out, e->name, e->name_len);
    if (e->zip64) {
      wr16(h, 1);
      wr16(h + 2, 24);
      wr64(h + 4, e->size);
      wr64(h + 12, e->size);
      wr64(h + 20, offsets[i]);
      kiln_buf_append(out, h, 28);
    }
  }
  uint64_t dir_size = out->len - dir;
  if (z->zip64_end) {
    uint64_t record = out->len;
    wr32(h, 0x06064B50u);
    wr64(h + 4, 44);
    wr16(h + 12, 45);
    wr16(h + 14, 45);
    wr32(h + 16, 0);
    wr32(h + 20, 0);
    wr64(h + 24, count);
    wr64(h + 32, count);
    wr64(h + 40, dir_size);
    wr64(h + 48, dir);
    kiln_buf_append(out, h, 56);
    wr32(h, 0x07064B50u);
    wr32(h + 4, 0);
    wr64(h + 8, record);
    wr32(h + 16, 1);
    kiln_buf_append(out, h, 20);
  }
  uint16_t count16 = z->count_sentinel || z->zip64_end ? UINT16_MAX : (uint16_t)count;
  wr32(h, 0x06054B50u);
  wr16(h + 4, 0);
  wr16(h + 6, 0);
  wr16(h + 8, count16);
  wr16(h + 10, count16);
  wr32(h + 12, z->zip64_end ? UINT32_MAX : (uint32_t)dir_size);
  wr32(h + 16, z->zip64_end ? UINT32_MAX : (uint32_t)dir);
  wr16(h + 20, (uint16_t)z->comment_len);
  kiln_buf_append(out, h, 22);
  for (size_t i = 0; i < z->comment_len; i++) kiln_buf_append_char(out, 'c');
  free(offsets);
}

/* ---- fixture ---- */

static int setup(void **state) {
  fixture_t *f = calloc(1, sizeof *f);
  if (!f) return -1;
  f->fb = make_flatbuffer(FB_SIZE, 1);
  f->seg0 = kiln_test_make_data(SEG0_SIZE, false, 2);
  f->seg1 = kiln_test_make_data(SEG1_SIZE, false, 3);
  f->extra = kiln_test_make_data(EXTRA_SIZE, true, 4);
  f->segments[0] = (kiln_vmfb_archive_file_t){SEG0_NAME, f->seg0, SEG0_SIZE, 64};
  f->segments[1] = (kiln_vmfb_archive_file_t){SEG1_NAME, f->seg1, SEG1_SIZE, SEG1_ALIGN};
  f->extras[0] = (kiln_vmfb_archive_file_t){EXTRA_NAME, f->extra, EXTRA_SIZE, 0};
  f->zip = (kiln_vmfb_archive_contents_t){
      .layout = KILN_VMFB_ARCHIVE_LAYOUT_ZIP,
      .flatbuffer = f->fb,
      .flatbuffer_size = FB_SIZE,
      .segments = f->segments,
      .segment_count = 2,
      .extras = f->extras,
      .extra_count = 1,
  };
  f->flat = f->zip;
  f->flat.layout = KILN_VMFB_ARCHIVE_LAYOUT_FLAT;
  f->flat.extras = NULL;
  f->flat.extra_count = 0;
  kiln_buf_init(&f->zip_file);
  kiln_buf_init(&f->flat_file);
  kiln_status_t status = kiln_vmfb_archive_plan(&f->zip, NULL, f->offsets);
  if (!status) status = kiln_vmfb_archive_write(&f->zip, f->offsets, &f->zip_file);
  if (!status) status = kiln_vmfb_archive_plan(&f->flat, NULL, f->flat_offsets);
  if (!status) status = kiln_vmfb_archive_write(&f->flat, f->flat_offsets, &f->flat_file);
  if (!status && !(f->root = kiln_test_tmpdir("kiln-archive")))
    status = KILN_STATUS(KILN_STATUS_INTERNAL, "tmpdir");
  if (status) {
    fprintf(stderr, "setup: %s\n", kiln_status_message(status));
    kiln_status_free(status);
    return -1;
  }
  *state = f;
  return 0;
}

static int teardown(void **state) {
  fixture_t *f = *state;
  kiln_buf_deinit(&f->zip_file);
  kiln_buf_deinit(&f->flat_file);
  free(f->fb);
  free(f->seg0);
  free(f->seg1);
  free(f->extra);
  if (f->root) {
    kiln_test_remove_tree(f->root);
    free(f->root);
  }
  free(f);
  return 0;
}

static const uint8_t *zbytes(fixture_t *f) { return (const uint8_t *)f->zip_file.data; }

/* Checks a local header as kiln (and IREE) writes it. */
static void assert_local_header(const uint8_t *file, size_t at, const char *name, size_t padding,
                                uint64_t size, uint32_t crc) {
  const uint8_t *h = file + at;
  size_t n = strlen(name);
  assert_int_equal(rd32(h), 0x04034B50u);
  assert_int_equal(rd16(h + 4), 0x2D);  /* version needed 4.5 */
  assert_int_equal(rd16(h + 6), 0);     /* flags */
  assert_int_equal(rd16(h + 8), 0);     /* STORED */
  assert_int_equal(rd16(h + 10), 0);    /* time 00:00 */
  assert_int_equal(rd16(h + 12), 0x21); /* date 1980-01-01 */
  assert_int_equal(rd32(h + 14), crc);
  assert_int_equal(rd32(h + 18), UINT32_MAX);
  assert_int_equal(rd32(h + 22), UINT32_MAX);
  assert_int_equal(rd16(h + 26), n);
  assert_int_equal(rd16(h + 28), 4 + padding + 20);
  assert_memory_equal(h + 30, name, n);
  const uint8_t *x = h + 30 + n;
  assert_int_equal(x[0], 0xCA); /* IREE's padding field, bytes "CA FE" */
  assert_int_equal(x[1], 0xFE);
  assert_int_equal(rd16(x + 2), padding);
  for (size_t i = 0; i < padding; i++) assert_int_equal(x[4 + i], 0);
  x += 4 + padding;
  assert_int_equal(rd16(x), 1); /* zip64 */
  assert_int_equal(rd16(x + 2), 16);
  assert_int_equal(rd64(x + 4), size);
  assert_int_equal(rd64(x + 12), size);
}

static void assert_central_record(const uint8_t *file, size_t at, const char *name, uint64_t header,
                                  uint64_t size, uint32_t crc) {
  const uint8_t *h = file + at;
  size_t n = strlen(name);
  assert_int_equal(rd32(h), 0x02014B50u);
  assert_int_equal(rd16(h + 4), 0x031E);
  assert_int_equal(rd16(h + 6), 0x2D);
  assert_int_equal(rd16(h + 8), 0);
  assert_int_equal(rd16(h + 10), 0);
  assert_int_equal(rd16(h + 12), 0);
  assert_int_equal(rd16(h + 14), 0x21);
  assert_int_equal(rd32(h + 16), crc);
  assert_int_equal(rd32(h + 20), UINT32_MAX);
  assert_int_equal(rd32(h + 24), UINT32_MAX);
  assert_int_equal(rd16(h + 28), n);
  assert_int_equal(rd16(h + 30), 28);
  assert_int_equal(rd16(h + 32), 0);
  assert_int_equal(rd16(h + 34), 0);
  assert_int_equal(rd16(h + 36), 0);
  assert_int_equal(rd32(h + 38), 0100644u << 16);
  assert_int_equal(rd32(h + 42), UINT32_MAX);
  assert_memory_equal(h + 46, name, n);
  const uint8_t *x = h + 46 + n;
  assert_int_equal(rd16(x), 1);
  assert_int_equal(rd16(x + 2), 24);
  assert_int_equal(rd64(x + 4), size);
  assert_int_equal(rd64(x + 12), size);
  assert_int_equal(rd64(x + 20), header);
}

/* ---- golden layouts ---- */

/* The derivation: module.fb's header is 30 + 9 + 4 + 1 (padding) + 20 = 64 bytes,
 * so the FlatBuffer's prefix is at 64 and "IREE" at 72; it ends at 164 and the
 * rodata base is align64(164) = 192. _sm_89.bin's header starts at the base and
 * is exactly 54 + 10 = 64 bytes (no padding): data at 256, offset 64, end 5256.
 * weights.bin's header at 5256 needs 65 bytes; 5321 rounded up to 256 is 5376
 * (padding 55), offset 5184, end 5676. The extra entry's header at 5676 needs
 * 74 bytes; 5750 rounds to 5760 (padding 10), end 5837: the directory, 83 + 84 +
 * 85 + 94 = 346 bytes, then the zip64 record at 6183, the locator at 6239 and
 * the end record at 6259; 6281 bytes in all. */
static void test_golden_zip_layout(void **state) {
  fixture_t *f = *state;
  kiln_vmfb_archive_plan_t plan;
  uint64_t offsets[2] = {99, 99};
  assert_ok(kiln_vmfb_archive_plan(&f->zip, &plan, offsets));
  assert_int_equal(plan.flatbuffer_offset, 64);
  assert_int_equal(plan.rodata_base, ZIP_BASE);
  assert_int_equal(plan.file_size, ZIP_FILE_SIZE);
  assert_int_equal(offsets[0], SEG0_DATA - ZIP_BASE);
  assert_int_equal(offsets[1], SEG1_DATA - ZIP_BASE);
  assert_int_equal(f->zip_file.len, ZIP_FILE_SIZE);
  const uint8_t *z = zbytes(f);

  /* module.fb: the FlatBuffer plus zeros up to the base, one entry. */
  uint8_t module[ZIP_BASE - 64] = {0};
  memcpy(module, f->fb, FB_SIZE);
  uint32_t module_crc = crc_of(module, sizeof module);
  assert_local_header(z, 0, "module.fb", 1, sizeof module, module_crc);
  static const uint8_t head[44] = {
      0x50, 0x4B, 0x03, 0x04,                              /* local file header signature */
      0x2D, 0,    0,    0,    0,    0,                     /* version 4.5, flags, STORED */
      0,    0,    0x21, 0,                                 /* 00:00, 1980-01-01 */
      0,    0,    0,    0,                                 /* CRC-32 (checked below) */
      0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF,      /* sizes: in the zip64 field */
      9,    0,    25,   0,                                 /* name and extra field lengths */
      'm',  'o',  'd',  'u',  'l',  'e',  '.',  'f',  'b', /* name */
      0xCA, 0xFE, 1,    0,    0,                           /* padding field: 1 zero byte */
  };
  assert_memory_equal(z, head, 14);
  assert_memory_equal(z + 18, head + 18, sizeof head - 18);
  assert_int_equal(rd32(z + 64), FB_SIZE - 4);
  assert_memory_equal(z + 72, "IREE", 4);
  assert_memory_equal(z + 64, f->fb, FB_SIZE);
  for (size_t i = 64 + FB_SIZE; i < ZIP_BASE; i++) assert_int_equal(z[i], 0);

  assert_local_header(z, SEG0_HEADER, SEG0_NAME, 0, SEG0_SIZE, crc_of(f->seg0, SEG0_SIZE));
  assert_memory_equal(z + SEG0_DATA, f->seg0, SEG0_SIZE);
  assert_local_header(z, SEG1_HEADER, SEG1_NAME, 55, SEG1_SIZE, crc_of(f->seg1, SEG1_SIZE));
  assert_int_equal(SEG1_DATA % SEG1_ALIGN, 0);
  assert_memory_equal(z + SEG1_DATA, f->seg1, SEG1_SIZE);
  assert_local_header(z, EXTRA_HEADER, EXTRA_NAME, 10, EXTRA_SIZE, crc_of(f->extra, EXTRA_SIZE));
  assert_memory_equal(z + EXTRA_DATA, f->extra, EXTRA_SIZE);

  assert_central_record(z, CD0, "module.fb", 0, sizeof module, module_crc);
  assert_central_record(z, CD1, SEG0_NAME, SEG0_HEADER, SEG0_SIZE, crc_of(f->seg0, SEG0_SIZE));
  assert_central_record(z, CD2, SEG1_NAME, SEG1_HEADER, SEG1_SIZE, crc_of(f->seg1, SEG1_SIZE));
  assert_central_record(z, CD3, EXTRA_NAME, EXTRA_HEADER, EXTRA_SIZE, crc_of(f->extra, EXTRA_SIZE));
  assert_int_equal(CD3 + 94, EOCD64_OFFSET);

  const uint8_t *r = z + EOCD64_OFFSET;
  assert_int_equal(rd32(r), 0x06064B50u);
  assert_int_equal(rd64(r + 4), 44);
  assert_int_equal(rd16(r + 12), 0x2D);
  assert_int_equal(rd16(r + 14), 0x2D);
  assert_int_equal(rd32(r + 16), 0);
  assert_int_equal(rd32(r + 20), 0);
  assert_int_equal(rd64(r + 24), 4);
  assert_int_equal(rd64(r + 32), 4);
  assert_int_equal(rd64(r + 40), DIR_SIZE);
  assert_int_equal(rd64(r + 48), DIR_OFFSET);
  const uint8_t *l = z + LOCATOR_OFFSET;
  assert_int_equal(rd32(l), 0x07064B50u);
  assert_int_equal(rd32(l + 4), 0);
  assert_int_equal(rd64(l + 8), EOCD64_OFFSET);
  assert_int_equal(rd32(l + 16), 1);
  const uint8_t *e = z + EOCD_OFFSET;
  assert_int_equal(rd32(e), 0x06054B50u);
  assert_int_equal(rd16(e + 4), 0);
  assert_int_equal(rd16(e + 6), 0);
  assert_int_equal(rd16(e + 8), 4);
  assert_int_equal(rd16(e + 10), 4);
  assert_int_equal(rd32(e + 12), DIR_SIZE);
  assert_int_equal(rd32(e + 16), UINT32_MAX);
  assert_int_equal(rd16(e + 20), 0);
}

/* FlatBuffer at 0, base align64(100) = 128, _sm_89.bin at 128 (offset 0), ends at
 * 5128; weights.bin at 5376 (the next multiple of 256, offset 5248), ends at 5676. */
static void test_golden_flat_layout(void **state) {
  fixture_t *f = *state;
  kiln_vmfb_archive_plan_t plan;
  assert_ok(kiln_vmfb_archive_plan(&f->flat, &plan, f->flat_offsets));
  assert_int_equal(plan.flatbuffer_offset, 0);
  assert_int_equal(plan.rodata_base, FLAT_BASE);
  assert_int_equal(plan.file_size, FLAT_FILE_SIZE);
  assert_int_equal(f->flat_offsets[0], 0);
  assert_int_equal(f->flat_offsets[1], FLAT_SEG1_DATA - FLAT_BASE);
  const uint8_t *p = (const uint8_t *)f->flat_file.data;
  assert_int_equal(f->flat_file.len, FLAT_FILE_SIZE);
  assert_memory_equal(p, f->fb, FB_SIZE);
  assert_memory_equal(p + 8, "IREE", 4);
  for (size_t i = FB_SIZE; i < FLAT_BASE; i++) assert_int_equal(p[i], 0);
  assert_memory_equal(p + FLAT_BASE, f->seg0, SEG0_SIZE);
  for (size_t i = FLAT_BASE + SEG0_SIZE; i < FLAT_SEG1_DATA; i++) assert_int_equal(p[i], 0);
  assert_memory_equal(p + FLAT_SEG1_DATA, f->seg1, SEG1_SIZE);
}

/* ---- round trips ---- */

static void test_round_trip_zip(void **state) {
  fixture_t *f = *state;
  kiln_vmfb_archive_t a;
  assert_ok(kiln_vmfb_archive_parse(f->zip_file.data, f->zip_file.len, KILN_VMFB_ARCHIVE_VERIFY_CRC, &a));
  assert_sane(&a, zbytes(f), f->zip_file.len);
  assert_int_equal(a.layout, KILN_VMFB_ARCHIVE_LAYOUT_ZIP);
  assert_int_equal(a.flatbuffer_offset, 64);
  assert_int_equal(a.flatbuffer_size, FB_SIZE);
  assert_memory_equal(a.flatbuffer, f->fb, FB_SIZE);
  assert_true(a.has_iree_identifier);
  assert_int_equal(a.rodata_base, ZIP_BASE);
  assert_int_equal(a.entry_count, 4);
  assert_int_equal(a.module_entry, 0);
  static const char *names[] = {"module.fb", SEG0_NAME, SEG1_NAME, EXTRA_NAME};
  static const uint64_t headers[] = {0, SEG0_HEADER, SEG1_HEADER, EXTRA_HEADER};
  static const uint64_t datas[] = {64, SEG0_DATA, SEG1_DATA, EXTRA_DATA};
  static const uint64_t sizes[] = {ZIP_BASE - 64, SEG0_SIZE, SEG1_SIZE, EXTRA_SIZE};
  for (size_t i = 0; i < 4; i++) {
    const kiln_vmfb_archive_entry_t *e = &a.entries[i];
    assert_string_equal(e->name, names[i]);
    assert_int_equal(e->header_offset, headers[i]);
    assert_int_equal(e->data_offset, datas[i]);
    assert_int_equal(e->size, sizes[i]);
    assert_int_equal(e->uncompressed_size, sizes[i]);
    assert_int_equal(e->method, 0);
    assert_true(e->stored);
    assert_int_equal(e->crc, KILN_VMFB_ARCHIVE_CRC_OK);
    assert_int_equal(kiln_vmfb_archive_entry_find(&a, names[i]), (ptrdiff_t)i);
    assert_ok(kiln_vmfb_archive_entry_verify(&a, i));
  }
  assert_int_equal(kiln_vmfb_archive_entry_find(&a, "missing.bin"), -1);
  assert_int_equal(kiln_vmfb_archive_entry_find(&a, "module.f"), -1);
  assert_fails(kiln_vmfb_archive_entry_verify(&a, 4), KILN_STATUS_OUT_OF_RANGE, NULL);

  /* The planned offsets find the segments from the rodata base, like the runtime. */
  const uint8_t *data = NULL;
  assert_ok(kiln_vmfb_archive_rodata_resolve(&a, f->offsets[0], SEG0_SIZE, &data));
  assert_memory_equal(data, f->seg0, SEG0_SIZE);
  assert_ok(kiln_vmfb_archive_rodata_resolve(&a, f->offsets[1], SEG1_SIZE, &data));
  assert_memory_equal(data, f->seg1, SEG1_SIZE);
  const uint8_t *untouched = (const uint8_t *)"x";
  data = untouched;
  assert_fails(kiln_vmfb_archive_rodata_resolve(&a, ZIP_FILE_SIZE, 1, &data), KILN_STATUS_OUT_OF_RANGE,
               "past the end of the file");
  assert_fails(kiln_vmfb_archive_rodata_resolve(&a, UINT64_MAX - 10, 100, &data), KILN_STATUS_OUT_OF_RANGE,
               NULL);
  assert_fails(kiln_vmfb_archive_rodata_resolve(&a, 0, UINT64_MAX, &data), KILN_STATUS_OUT_OF_RANGE, NULL);
  assert_ptr_equal(data, untouched);

  /* Without the flag the CRCs are left unchecked. */
  kiln_vmfb_archive_t b;
  assert_ok(kiln_vmfb_archive_parse(f->zip_file.data, f->zip_file.len, 0, &b));
  for (size_t i = 0; i < b.entry_count; i++)
    assert_int_equal(b.entries[i].crc, KILN_VMFB_ARCHIVE_CRC_UNCHECKED);
  kiln_vmfb_archive_deinit(&b);
  kiln_vmfb_archive_deinit(&a);
  kiln_vmfb_archive_deinit(&a); /* idempotent */
}

static void test_round_trip_flat(void **state) {
  fixture_t *f = *state;
  kiln_vmfb_archive_t a;
  assert_ok(kiln_vmfb_archive_parse(f->flat_file.data, f->flat_file.len, KILN_VMFB_ARCHIVE_VERIFY_CRC, &a));
  assert_sane(&a, (const uint8_t *)f->flat_file.data, f->flat_file.len);
  assert_int_equal(a.layout, KILN_VMFB_ARCHIVE_LAYOUT_FLAT);
  assert_int_equal(a.flatbuffer_offset, 0);
  assert_int_equal(a.flatbuffer_size, FB_SIZE);
  assert_true(a.has_iree_identifier);
  assert_int_equal(a.rodata_base, FLAT_BASE);
  assert_int_equal(a.entry_count, 0);
  assert_int_equal(kiln_vmfb_archive_entry_find(&a, "module.fb"), -1);
  const uint8_t *data;
  assert_ok(kiln_vmfb_archive_rodata_resolve(&a, f->flat_offsets[0], SEG0_SIZE, &data));
  assert_memory_equal(data, f->seg0, SEG0_SIZE);
  assert_ok(kiln_vmfb_archive_rodata_resolve(&a, f->flat_offsets[1], SEG1_SIZE, &data));
  assert_memory_equal(data, f->seg1, SEG1_SIZE);
  kiln_vmfb_archive_deinit(&a);

  /* No segments: the file is the FlatBuffer padded to 64, as IREE's flat writer. */
  kiln_vmfb_archive_contents_t bare = f->flat;
  bare.segment_count = 0;
  kiln_buf_t out;
  kiln_buf_init(&out);
  assert_ok(kiln_vmfb_archive_write(&bare, NULL, &out));
  assert_int_equal(out.len, FLAT_BASE);
  assert_ok(kiln_vmfb_archive_parse(out.data, out.len, 0, &a));
  assert_int_equal(a.rodata_base, FLAT_BASE);
  kiln_vmfb_archive_deinit(&a);

  /* A FlatBuffer without the identifier still parses; the flag says so. */
  uint8_t *fb = make_flatbuffer(FB_SIZE, 9);
  memcpy(fb + 8, "NOPE", 4);
  bare.flatbuffer = fb;
  assert_ok(kiln_vmfb_archive_write(&bare, NULL, &out));
  assert_ok(kiln_vmfb_archive_parse(out.data, out.len, 0, &a));
  assert_false(a.has_iree_identifier);
  kiln_vmfb_archive_deinit(&a);
  free(fb);
  kiln_buf_deinit(&out);
}

/* A zip with no segments and no extras: just module.fb and the directory. */
static void test_round_trip_zip_minimal(void **state) {
  fixture_t *f = *state;
  kiln_vmfb_archive_contents_t c = f->zip;
  c.segment_count = 0;
  c.extra_count = 0;
  c.flatbuffer_size = 12;
  uint8_t fb[12];
  wr32(fb, 8);
  wr32(fb + 4, 8);
  memcpy(fb + 8, "IREE", 4);
  c.flatbuffer = fb;
  kiln_buf_t out;
  kiln_buf_init(&out);
  assert_ok(kiln_vmfb_archive_write(&c, NULL, &out));
  assert_int_equal(out.len, 128 + 83 + 98);
  kiln_vmfb_archive_t a;
  assert_ok(kiln_vmfb_archive_parse(out.data, out.len, KILN_VMFB_ARCHIVE_VERIFY_CRC, &a));
  assert_int_equal(a.entry_count, 1);
  assert_int_equal(a.rodata_base, 128);
  assert_int_equal(a.flatbuffer_size, 12);
  assert_int_equal(a.entries[0].crc, KILN_VMFB_ARCHIVE_CRC_OK);
  kiln_vmfb_archive_deinit(&a);
  kiln_buf_deinit(&out);
}

static void test_deterministic(void **state) {
  fixture_t *f = *state;
  kiln_buf_t again;
  kiln_buf_init(&again);
  assert_ok(kiln_vmfb_archive_write(&f->zip, f->offsets, &again));
  assert_int_equal(again.len, f->zip_file.len);
  assert_memory_equal(again.data, f->zip_file.data, again.len);
  /* The buffer is cleared first: writing into a used one gives the same file. */
  assert_ok(kiln_vmfb_archive_write(&f->zip, NULL, &again));
  assert_int_equal(again.len, f->zip_file.len);
  assert_memory_equal(again.data, f->zip_file.data, again.len);
  kiln_buf_deinit(&again);
}

/* ---- planning against a FlatBuffer that changes size ---- */

static void test_plan_detects_moved_segments(void **state) {
  fixture_t *f = *state;
  /* Grow the FlatBuffer from 100 to 200 bytes after planning: the base moves from
   * 192 to 320, and weights.bin (256-aligned) moves from offset 5184 to 5312. */
  uint8_t *big = make_flatbuffer(200, 5);
  kiln_vmfb_archive_contents_t c = f->zip;
  c.flatbuffer = big;
  c.flatbuffer_size = 200;
  kiln_buf_t out;
  kiln_buf_init(&out);
  kiln_buf_append_str(&out, "stale");
  assert_fails(kiln_vmfb_archive_write(&c, f->offsets, &out), KILN_STATUS_FAILED_PRECONDITION,
               "segment 1 (\"weights.bin\") lands at rodata offset 5312 but the FlatBuffer says 5184");
  assert_int_equal(out.len, 0); /* nothing written */
  uint64_t fresh[2];
  kiln_vmfb_archive_plan_t plan;
  assert_ok(kiln_vmfb_archive_plan(&c, &plan, fresh));
  assert_int_equal(plan.rodata_base, 320);
  assert_int_equal(fresh[0], 64);
  assert_int_equal(fresh[1], 5312);
  assert_ok(kiln_vmfb_archive_write(&c, fresh, &out));

  /* With 64-byte alignments only, relative offsets do not depend on the
   * FlatBuffer's size: any size gives the same offsets (the documented property
   * that lets a caller plan before the FlatBuffer's final size is known). */
  kiln_vmfb_archive_file_t segs[2] = {f->segments[0], f->segments[1]};
  segs[1].alignment = 64;
  c.segments = segs;
  uint64_t first[2], other[2];
  c.flatbuffer_size = 12;
  assert_ok(kiln_vmfb_archive_plan(&c, NULL, first));
  for (uint64_t size = 13; size < 400; size += 7) {
    c.flatbuffer_size = size;
    assert_ok(kiln_vmfb_archive_plan(&c, NULL, other));
    assert_int_equal(other[0], first[0]);
    assert_int_equal(other[1], first[1]);
  }
  free(big);
  kiln_buf_deinit(&out);
}

/* ---- writer validation ---- */

static void test_write_validation(void **state) {
  fixture_t *f = *state;
  kiln_buf_t out;
  kiln_buf_init(&out);
  uint64_t offsets[2];
  kiln_vmfb_archive_contents_t c;
  kiln_vmfb_archive_file_t segs[2];

  c = f->flat;
  c.extras = f->extras;
  c.extra_count = 1;
  assert_fails(kiln_vmfb_archive_write(&c, NULL, &out), KILN_STATUS_INVALID_ARGUMENT, "need the zip layout");
  assert_fails(kiln_vmfb_archive_plan(&c, NULL, offsets), KILN_STATUS_INVALID_ARGUMENT, "zip layout");

  c = f->zip;
  c.layout = (kiln_vmfb_archive_layout_t)7;
  assert_fails(kiln_vmfb_archive_plan(&c, NULL, offsets), KILN_STATUS_INVALID_ARGUMENT, "unknown layout");

  c = f->zip;
  c.flatbuffer_size = 11;
  assert_fails(kiln_vmfb_archive_plan(&c, NULL, offsets), KILN_STATUS_INVALID_ARGUMENT, "12 bytes");
  c.flatbuffer_size = 5 + (uint64_t)UINT32_MAX;
  assert_fails(kiln_vmfb_archive_plan(&c, NULL, offsets), KILN_STATUS_INVALID_ARGUMENT, NULL);

  c = f->zip;
  c.flatbuffer_size = FB_SIZE - 1; /* the prefix says 96 */
  assert_fails(kiln_vmfb_archive_write(&c, NULL, &out), KILN_STATUS_INVALID_ARGUMENT, "size prefix is 96");
  c.flatbuffer = NULL;
  assert_fails(kiln_vmfb_archive_write(&c, NULL, &out), KILN_STATUS_INVALID_ARGUMENT, "no FlatBuffer");

  static const uint32_t bad_alignments[] = {3, 96, 65536, 1u << 31};
  for (size_t i = 0; i < sizeof bad_alignments / sizeof *bad_alignments; i++) {
    memcpy(segs, f->segments, sizeof segs);
    segs[1].alignment = bad_alignments[i];
    c = f->zip;
    c.segments = segs;
    assert_fails(kiln_vmfb_archive_plan(&c, NULL, offsets), KILN_STATUS_INVALID_ARGUMENT,
                 "segment 1 has alignment");
  }
  /* 0, 1 .. 32 mean 64; 32768 is the largest. */
  static const uint32_t fine[] = {0, 1, 16, 32, 64, 4096, 32768};
  for (size_t i = 0; i < sizeof fine / sizeof *fine; i++) {
    memcpy(segs, f->segments, sizeof segs);
    segs[1].alignment = fine[i];
    c = f->zip;
    c.segments = segs;
    assert_ok(kiln_vmfb_archive_plan(&c, NULL, offsets));
    uint64_t want = fine[i] < 64 ? 64 : fine[i];
    assert_int_equal((ZIP_BASE + offsets[1]) % want, 0);
    assert_ok(kiln_vmfb_archive_write(&c, offsets, &out));
    kiln_vmfb_archive_t a;
    assert_ok(kiln_vmfb_archive_parse(out.data, out.len, KILN_VMFB_ARCHIVE_VERIFY_CRC, &a));
    assert_int_equal(a.entries[2].crc, KILN_VMFB_ARCHIVE_CRC_OK);
    assert_int_equal(a.entries[2].data_offset % want, 0);
    kiln_vmfb_archive_deinit(&a);
  }

  char longname[KILN_VMFB_ARCHIVE_NAME_MAX + 2];
  memset(longname, 'a', sizeof longname - 1);
  longname[sizeof longname - 1] = '\0';
  const char *bad_names[] = {"",     "module.fb", "/abs",        "a/../b",      "..",
                             "x/..", "tab\there", "back\\slash", "caf\xc3\xa9", longname};
  for (size_t i = 0; i < sizeof bad_names / sizeof *bad_names; i++) {
    memcpy(segs, f->segments, sizeof segs);
    segs[0].name = bad_names[i];
    c = f->zip;
    c.segments = segs;
    assert_fails(kiln_vmfb_archive_plan(&c, NULL, offsets), KILN_STATUS_INVALID_ARGUMENT,
                 "the name of segment 0");
  }
  longname[KILN_VMFB_ARCHIVE_NAME_MAX] = '\0'; /* exactly the limit: fine */
  memcpy(segs, f->segments, sizeof segs);
  segs[0].name = longname;
  c = f->zip;
  c.segments = segs;
  assert_ok(kiln_vmfb_archive_plan(&c, NULL, offsets));
  /* Names that only look suspicious are fine. */
  static const char *ok_names[] = {"a..b", "..a/b", "dir/x.bin", "a b"};
  for (size_t i = 0; i < sizeof ok_names / sizeof *ok_names; i++) {
    segs[0].name = ok_names[i];
    assert_ok(kiln_vmfb_archive_plan(&c, NULL, offsets));
  }

  memcpy(segs, f->segments, sizeof segs);
  segs[1].name = SEG0_NAME;
  c = f->zip;
  c.segments = segs;
  assert_fails(kiln_vmfb_archive_plan(&c, NULL, offsets), KILN_STATUS_INVALID_ARGUMENT,
               "\"_sm_89.bin\" is used twice");
  kiln_vmfb_archive_file_t dup_extra = {SEG1_NAME, f->extra, EXTRA_SIZE, 0};
  c = f->zip;
  c.extras = &dup_extra;
  assert_fails(kiln_vmfb_archive_plan(&c, NULL, offsets), KILN_STATUS_INVALID_ARGUMENT, "used twice");

  memcpy(segs, f->segments, sizeof segs);
  segs[0].name = NULL;
  c = f->zip;
  c.segments = segs;
  assert_fails(kiln_vmfb_archive_plan(&c, NULL, offsets), KILN_STATUS_INVALID_ARGUMENT, "has no name");
  c.layout = KILN_VMFB_ARCHIVE_LAYOUT_FLAT; /* flat segments need no names */
  c.extra_count = 0;
  assert_ok(kiln_vmfb_archive_plan(&c, NULL, offsets));

  memcpy(segs, f->segments, sizeof segs);
  segs[0].data = NULL;
  c = f->zip;
  c.segments = segs;
  assert_ok(kiln_vmfb_archive_plan(&c, NULL, offsets)); /* planning needs no data */
  assert_fails(kiln_vmfb_archive_write(&c, NULL, &out), KILN_STATUS_INVALID_ARGUMENT,
               "has 5000 bytes but no data");
  segs[0].size = 0; /* an empty segment is fine */
  assert_ok(kiln_vmfb_archive_plan(&c, NULL, offsets));
  assert_ok(kiln_vmfb_archive_write(&c, offsets, &out));

  memcpy(segs, f->segments, sizeof segs);
  segs[1].size = UINT64_MAX - 100;
  c = f->zip;
  c.segments = segs;
  assert_fails(kiln_vmfb_archive_plan(&c, NULL, offsets), KILN_STATUS_OUT_OF_RANGE, NULL);

  c = f->zip;
  assert_fails(kiln_vmfb_archive_plan(&c, NULL, NULL), KILN_STATUS_INVALID_ARGUMENT, "no array");
  c.segment_count = KILN_VMFB_ARCHIVE_MAX_ENTRIES;
  assert_fails(kiln_vmfb_archive_plan(&c, NULL, NULL), KILN_STATUS_INVALID_ARGUMENT, "exceed");
  assert_fails(kiln_vmfb_archive_plan(NULL, NULL, NULL), KILN_STATUS_INVALID_ARGUMENT, NULL);
  assert_fails(kiln_vmfb_archive_write(&f->zip, NULL, NULL), KILN_STATUS_INVALID_ARGUMENT, NULL);
  kiln_buf_deinit(&out);
}

/* ---- zip tools ---- */

static void test_zip_tools_accept(void **state) {
  fixture_t *f = *state;
  bool unzip = have_tool("unzip"), python = have_tool("python3");
  if (!unzip && !python) skip(); /* neither checker is installed */
  char path[512];
  snprintf(path, sizeof path, "%s/model.vmfb", f->root);
  write_file(path, f->zip_file.data, f->zip_file.len);
  if (unzip) {
    assert_int_equal(run("unzip -tqq '%s' >/dev/null 2>&1", path), 0);
    /* The listing, in order. */
    char cmd[600];
    snprintf(cmd, sizeof cmd, "unzip -Z1 '%s'", path);
    FILE *p = popen(cmd, "r");
    assert_non_null(p);
    char listing[512] = {0};
    size_t n = fread(listing, 1, sizeof listing - 1, p);
    listing[n] = '\0';
    assert_int_equal(pclose(p), 0);
    assert_string_equal(listing, "module.fb\n_sm_89.bin\nweights.bin\nkiln/source.mlir.zst\n");
    /* Extraction gives back every entry. */
    assert_int_equal(run("cd '%s' && unzip -qq -o model.vmfb -d out >/dev/null 2>&1", f->root), 0);
    const struct {
      const char *name;
      const uint8_t *data;
      size_t len;
    } want[] = {
        {SEG0_NAME, f->seg0, SEG0_SIZE}, {SEG1_NAME, f->seg1, SEG1_SIZE}, {EXTRA_NAME, f->extra, EXTRA_SIZE}};
    for (size_t i = 0; i < 3; i++) {
      char out[700];
      snprintf(out, sizeof out, "%s/out/%s", f->root, want[i].name);
      size_t len;
      uint8_t *got = read_file(out, &len);
      assert_int_equal(len, want[i].len);
      assert_memory_equal(got, want[i].data, len);
      kiln_free(got);
    }
    char out[700];
    snprintf(out, sizeof out, "%s/out/module.fb", f->root);
    size_t len;
    uint8_t *got = read_file(out, &len);
    assert_int_equal(len, ZIP_BASE - 64);
    assert_memory_equal(got, f->fb, FB_SIZE);
    kiln_free(got);
  }
  if (python) {
    assert_int_equal(run("python3 -m zipfile -t '%s' >/dev/null 2>&1", path), 0);
  }
}

/* An archive made by Info-ZIP's zip (classic headers, no alignment) still reads:
 * the FlatBuffer is wherever the first local header's data starts. */
static void test_info_zip_archive_reads(void **state) {
  fixture_t *f = *state;
  if (!have_tool("zip")) skip(); /* Info-ZIP zip is not installed */
  char path[600];
  snprintf(path, sizeof path, "%s/module.fb", f->root);
  write_file(path, f->fb, FB_SIZE);
  snprintf(path, sizeof path, "%s/%s", f->root, SEG0_NAME);
  write_file(path, f->seg0, SEG0_SIZE);
  assert_int_equal(run("cd '%s' && zip -q -0 -X info.zip module.fb %s", f->root, SEG0_NAME), 0);
  snprintf(path, sizeof path, "%s/info.zip", f->root);
  size_t len;
  uint8_t *file = read_file(path, &len);
  kiln_vmfb_archive_t a;
  assert_ok(kiln_vmfb_archive_parse(file, len, KILN_VMFB_ARCHIVE_VERIFY_CRC, &a));
  assert_sane(&a, file, len);
  assert_int_equal(a.entry_count, 2);
  assert_int_equal(a.flatbuffer_offset, 30 + 9);
  assert_memory_equal(a.flatbuffer, f->fb, FB_SIZE);
  assert_int_equal(a.entries[1].crc, KILN_VMFB_ARCHIVE_CRC_OK);
  assert_memory_equal(file + a.entries[1].data_offset, f->seg0, SEG0_SIZE);
  kiln_vmfb_archive_deinit(&a);
  kiln_free(file);
}

/* A file laid out the way iree-compile's ZIPArchiveWriter writes it: the size
 * prefix rewritten to align(S + 4, 64) - 4 (S = the size-prefixed FlatBuffer's
 * length), the module.fb entry that long, 4 bytes of zeros outside any entry up
 * to the base, then the segment's header at the base. The runtime (and kiln's
 * reader) takes the base from the rewritten prefix: 68 + prefix. */
static void test_reads_iree_compile_layout(void **state) {
  fixture_t *f = *state;
  uint32_t padded = ((FB_SIZE + 4 + 63) & ~63u) - 4; /* 124 */
  uint8_t module[124] = {0};
  assert_int_equal(padded, sizeof module);
  memcpy(module, f->fb, FB_SIZE);
  wr32(module, padded);
  tzip_entry_t entries[] = {
      {.name = "module.fb", .name_len = 9, .data = module, .size = padded, .align = 64, .zip64 = true},
      {.name = SEG0_NAME,
       .name_len = 10,
       .data = f->seg0,
       .size = SEG0_SIZE,
       .align = 64,
       .zip64 = true,
       .gap_before = 4},
  };
  tzip_t z = {.zip64_end = true};
  kiln_buf_t out;
  kiln_buf_init(&out);
  build_zip(&z, entries, 2, &out);
  const uint8_t *p = (const uint8_t *)out.data;
  assert_int_equal(rd32(p + 64), padded);
  kiln_vmfb_archive_t a;
  assert_ok(kiln_vmfb_archive_parse(out.data, out.len, KILN_VMFB_ARCHIVE_VERIFY_CRC, &a));
  assert_sane(&a, p, out.len);
  assert_int_equal(a.flatbuffer_offset, 64);
  assert_int_equal(a.flatbuffer_size, 4 + padded); /* 4 bytes past the module.fb entry */
  assert_int_equal(a.rodata_base, 192);
  assert_int_equal(a.entries[1].header_offset, 192);
  const uint8_t *data;
  assert_ok(kiln_vmfb_archive_rodata_resolve(&a, a.entries[1].data_offset - a.rodata_base, SEG0_SIZE, &data));
  assert_memory_equal(data, f->seg0, SEG0_SIZE);
  kiln_vmfb_archive_deinit(&a);
  kiln_buf_deinit(&out);
}

/* ---- robustness ---- */

static void test_every_truncation(void **state) {
  fixture_t *f = *state;
  for (size_t len = 0; len < f->zip_file.len; len++) {
    kiln_vmfb_archive_t a;
    uint8_t *copy;
    kiln_status_t status = parse_copy(f->zip_file.data, len, KILN_VMFB_ARCHIVE_VERIFY_CRC, &a, &copy);
    if (!status) fail_msg("a zip truncated to %zu of %zu bytes parsed", len, f->zip_file.len);
    assert_int_equal(kiln_status_code(status), KILN_STATUS_INVALID_ARGUMENT);
    assert_null(a.entries);
    kiln_status_free(status);
    free(copy);
  }
  /* Flat files have no directory: a truncation parses exactly while the size
   * prefix still fits, and then the rodata no longer resolves. */
  for (size_t len = 0; len < f->flat_file.len; len++) {
    kiln_vmfb_archive_t a;
    uint8_t *copy;
    kiln_status_t status = parse_copy(f->flat_file.data, len, 0, &a, &copy);
    if (len >= FB_SIZE) {
      assert_ok(status);
      assert_sane(&a, copy, len);
      const uint8_t *data;
      kiln_status_t resolved = kiln_vmfb_archive_rodata_resolve(&a, f->flat_offsets[1], SEG1_SIZE, &data);
      assert_int_equal(kiln_status_code(resolved), KILN_STATUS_OUT_OF_RANGE);
      kiln_status_free(resolved);
      kiln_vmfb_archive_deinit(&a);
    } else {
      assert_fails(status, KILN_STATUS_INVALID_ARGUMENT, len < 16 ? "fewer than 16 bytes" : "size prefix");
    }
    free(copy);
  }
}

/* Structural bytes of the example zip (headers, directory, end records). */
static size_t structural_position(uint64_t *rng) {
  static const size_t ranges[][2] = {{0, 68},
                                     {SEG0_HEADER, SEG0_DATA},
                                     {SEG1_HEADER, SEG1_DATA},
                                     {EXTRA_HEADER, EXTRA_DATA},
                                     {DIR_OFFSET, ZIP_FILE_SIZE}};
  size_t r = kiln_test_random_next(rng) % 5;
  return ranges[r][0] + kiln_test_random_next(rng) % (ranges[r][1] - ranges[r][0]);
}

static void test_random_byte_flips(void **state) {
  fixture_t *f = *state;
  uint64_t rng = 0x5eed;
  size_t accepted = 0, rejected = 0, crc_caught = 0;
  uint8_t *file = malloc(f->zip_file.len);
  assert_non_null(file);
  for (int iter = 0; iter < 20000; iter++) {
    memcpy(file, f->zip_file.data, f->zip_file.len);
    int flips = 1 + (int)(kiln_test_random_next(&rng) % 4);
    bool structural = kiln_test_random_next(&rng) % 4 != 0;
    for (int i = 0; i < flips; i++) {
      size_t pos = structural ? structural_position(&rng) : kiln_test_random_next(&rng) % f->zip_file.len;
      uint8_t v = (uint8_t)kiln_test_random_next(&rng);
      file[pos] ^= v ? v : 0x80;
    }
    kiln_vmfb_archive_t a;
    kiln_status_t status = kiln_vmfb_archive_parse(file, f->zip_file.len, KILN_VMFB_ARCHIVE_VERIFY_CRC, &a);
    if (status) {
      assert_true(kiln_status_message(status)[0] != '\0');
      kiln_status_free(status);
      rejected++;
      continue;
    }
    accepted++;
    assert_sane(&a, file, f->zip_file.len);
    for (size_t i = 0; i < a.entry_count; i++)
      crc_caught += a.entries[i].crc == KILN_VMFB_ARCHIVE_CRC_MISMATCH;
    kiln_vmfb_archive_deinit(&a);
  }
  free(file);
  /* Both outcomes happen: flips in data are CRC mismatches, flips in headers are
   * mostly structural errors. */
  assert_true(rejected > 1000);
  assert_true(accepted > 100);
  assert_true(crc_caught > 100);
}

/* ---- hostile archives (patches of the example, or test-built zips) ---- */

static KILN_MUST_USE kiln_status_t parse_patched(fixture_t *f, void (*patch)(uint8_t *file), uint32_t flags,
                                                 kiln_vmfb_archive_t *out, uint8_t **out_copy) {
  uint8_t *c = copy_of(f->zip_file.data, f->zip_file.len);
  patch(c);
  *out_copy = c;
  return kiln_vmfb_archive_parse(c, f->zip_file.len, flags, out);
}

static void expect_patched(fixture_t *f, void (*patch)(uint8_t *file), const char *needle) {
  kiln_vmfb_archive_t a;
  uint8_t *copy;
  kiln_status_t status = parse_patched(f, patch, KILN_VMFB_ARCHIVE_VERIFY_CRC, &a, &copy);
  assert_fails(status, KILN_STATUS_INVALID_ARGUMENT, needle);
  assert_null(a.entries);
  free(copy);
}

/* zip64 field offsets inside the example's directory records. */
#define CD_ZIP64(rec, name_len) ((rec) + 46 + (name_len) + 4)

static void patch_count_huge(uint8_t *z) {
  wr64(z + EOCD64_OFFSET + 24, 1000000000);
  wr64(z + EOCD64_OFFSET + 32, 1000000000);
}
static void patch_count_too_many(uint8_t *z) {
  wr64(z + EOCD64_OFFSET + 24, 5000);
  wr64(z + EOCD64_OFFSET + 32, 5000);
}
static void patch_count_short(uint8_t *z) {
  wr64(z + EOCD64_OFFSET + 24, 3);
  wr64(z + EOCD64_OFFSET + 32, 3);
}
static void patch_count_long(uint8_t *z) {
  wr64(z + EOCD64_OFFSET + 24, 5);
  wr64(z + EOCD64_OFFSET + 32, 5);
}
static void patch_dir_offset_past_end(uint8_t *z) { wr64(z + EOCD64_OFFSET + 48, ZIP_FILE_SIZE); }
static void patch_dir_offset_wraps(uint8_t *z) { wr64(z + EOCD64_OFFSET + 48, UINT64_MAX - 100); }
static void patch_dir_size_huge(uint8_t *z) { wr64(z + EOCD64_OFFSET + 40, UINT64_MAX); }
static void patch_dir_offset_inside(uint8_t *z) { wr64(z + EOCD64_OFFSET + 48, DIR_OFFSET + 1); }
static void patch_seg0_past_end(uint8_t *z) {
  wr64(z + CD_ZIP64(CD1, 10), 10000);
  wr64(z + CD_ZIP64(CD1, 10) + 8, 10000);
}
static void patch_seg0_wraps(uint8_t *z) {
  wr64(z + CD_ZIP64(CD1, 10), UINT64_MAX - 8);
  wr64(z + CD_ZIP64(CD1, 10) + 8, UINT64_MAX - 8);
}
static void patch_seg1_into_directory(uint8_t *z) {
  wr64(z + CD_ZIP64(CD2, 11), 500);
  wr64(z + CD_ZIP64(CD2, 11) + 8, 500);
}
static void patch_seg0_overlaps_seg1(uint8_t *z) {
  wr64(z + CD_ZIP64(CD1, 10), 5100);
  wr64(z + CD_ZIP64(CD1, 10) + 8, 5100);
}
static void patch_stored_sizes_differ(uint8_t *z) { wr64(z + CD_ZIP64(CD1, 10), 4999); }
static void patch_name_nul(uint8_t *z) { z[CD1 + 46 + 3] = 0; }
static void patch_header_offset_mid_data(uint8_t *z) { wr64(z + CD_ZIP64(CD1, 10) + 16, 3000); }
static void patch_header_offset_past_end(uint8_t *z) { wr64(z + CD_ZIP64(CD1, 10) + 16, ZIP_FILE_SIZE - 10); }
static void patch_local_name(uint8_t *z) { z[SEG0_HEADER + 30] = 'X'; }
static void patch_local_method(uint8_t *z) { wr16(z + SEG0_HEADER + 8, 8); }
static void patch_local_extra_len_huge(uint8_t *z) { wr16(z + EXTRA_HEADER + 28, 0xFFFF); }
static void patch_cd_signature(uint8_t *z) { z[CD2] = 'Q'; }
static void patch_cd_name_len_huge(uint8_t *z) { wr16(z + CD3 + 28, 2000); }
static void patch_cd_extra_too_long(uint8_t *z) { wr16(z + CD1 + 46 + 10 + 2, 200); }
static void patch_cd_zip64_short(uint8_t *z) { wr16(z + CD1 + 46 + 10 + 2, 8); }
static void patch_cd_zip64_id(uint8_t *z) { wr16(z + CD1 + 46 + 10, 0x7777); }
static void patch_cd_disk(uint8_t *z) { wr16(z + CD1 + 34, 1); }
static void patch_locator_past(uint8_t *z) { wr64(z + LOCATOR_OFFSET + 8, ZIP_FILE_SIZE); }
static void patch_locator_to_zero(uint8_t *z) { wr64(z + LOCATOR_OFFSET + 8, 0); }
static void patch_locator_disks(uint8_t *z) { wr32(z + LOCATOR_OFFSET + 16, 3); }
static void patch_eocd64_body(uint8_t *z) { wr64(z + EOCD64_OFFSET + 4, 1000); }
static void patch_eocd64_disk(uint8_t *z) { wr32(z + EOCD64_OFFSET + 16, 1); }
static void patch_eocd64_on_disk(uint8_t *z) { wr64(z + EOCD64_OFFSET + 24, 2); }
static void patch_locator_signature(uint8_t *z) { z[LOCATOR_OFFSET] = 0; }
static void patch_eocd_comment(uint8_t *z) { wr16(z + EOCD_OFFSET + 20, 1); }
static void patch_module_offset(uint8_t *z) { wr64(z + CD_ZIP64(CD0, 9) + 16, EXTRA_HEADER); }
static void patch_module_prefix(uint8_t *z) { wr32(z + 64, 100000); }
static void patch_module_prefix_tiny(uint8_t *z) { wr32(z + 64, 4); }
static void patch_module_method(uint8_t *z) {
  wr16(z + 8, 8);
  wr16(z + CD0 + 10, 8);
}
static void patch_module_encrypted(uint8_t *z) { wr16(z + CD0 + 8, 1); }

static void test_hostile_directories(void **state) {
  fixture_t *f = *state;
  expect_patched(f, patch_count_huge, "claims 1000000000 entries; kiln reads at most 65535");
  expect_patched(f, patch_count_too_many, "claims 5000 entries but its 346 bytes at 5837 hold at most 7");
  expect_patched(f, patch_count_short, "its 3 entries take 252");
  expect_patched(f, patch_count_long,
                 "entry 4 at 6183: its 46-byte record runs past the end of the directory");
  expect_patched(f, patch_dir_offset_past_end, "does not end before the end records at 6183");
  expect_patched(f, patch_dir_offset_wraps, "does not end before");
  expect_patched(f, patch_dir_size_huge, "does not end before");
  expect_patched(f, patch_dir_offset_inside, NULL);
  {
    kiln_vmfb_archive_t a;
    uint8_t *copy;
    kiln_status_t status = parse_patched(f, patch_seg0_past_end, 0, &a, &copy);
    assert_int_equal(kiln_status_code(status), KILN_STATUS_INVALID_ARGUMENT);
    assert_string_equal(kiln_status_message(status),
                        "zip central directory entry 1 (\"_sm_89.bin\"): data ends at 10256, past the end of "
                        "the file (6281 bytes)");
    kiln_status_free(status);
    free(copy);
  }
  expect_patched(f, patch_seg0_wraps, "past the end of the file (6281 bytes)");
  expect_patched(f, patch_seg1_into_directory,
                 "entry 2 (\"weights.bin\"): data [5376, 5876) runs into the central directory at 5837");
  expect_patched(f, patch_seg0_overlaps_seg1,
                 "entries 1 (\"_sm_89.bin\", header 192, data ends at 5356) and 2 "
                 "(\"weights.bin\", header 5256) overlap");
  expect_patched(f, patch_stored_sizes_differ,
                 "stored entry with compressed size 5000 but uncompressed size 4999");
  expect_patched(f, patch_name_nul, "entry 1 (\"_sm\\x0089.bin\"): its name holds a NUL byte at 3");
  expect_patched(f, patch_header_offset_mid_data, "no local header signature at 3000");
  expect_patched(f, patch_header_offset_past_end, "local header at 6271 is past the end of the file");
  expect_patched(f, patch_local_name, "the local header at 192 names \"Xsm_89.bin\"");
  expect_patched(f, patch_local_method,
                 "compression method 0 in the directory but 8 in the local header at 192");
  expect_patched(f, patch_local_extra_len_huge,
                 "the local header at 5676 ends at 71261, past the end of the file (6281 bytes)");
  expect_patched(f, patch_cd_signature, "entry 2 at 6004: signature 0x");
  expect_patched(f, patch_cd_name_len_huge, "entry 3 at 6089: its 2074-byte record");
  expect_patched(f, patch_cd_extra_too_long,
                 "extra field 0x0001 at 5976 (200 bytes) runs past its record at 6004");
  expect_patched(f, patch_cd_zip64_short,
                 "zip64 extra field at 5976 has 8 bytes; the record defers 24 bytes");
  expect_patched(f, patch_cd_zip64_id, "no zip64 extra field");
  expect_patched(f, patch_cd_disk, "multi-disk");
  expect_patched(f, patch_locator_past, "points at 6281, where no 56-byte zip64 record fits");
  expect_patched(f, patch_locator_to_zero,
                 "zip64 end of central directory record at 0: signature 0x04034b50");
  expect_patched(f, patch_locator_disks, "multi-disk");
  expect_patched(f, patch_eocd64_body, "its size 1000");
  expect_patched(f, patch_eocd64_disk, "multi-disk");
  expect_patched(f, patch_eocd64_on_disk, "multi-disk");
  expect_patched(f, patch_locator_signature, "defers to zip64 values but no zip64 locator precedes it");
  expect_patched(f, patch_eocd_comment, "no end of central directory record in the last 6281 bytes");
  expect_patched(f, patch_module_offset, NULL); /* duplicate header offset: overlap or mismatch */
  expect_patched(
      f, patch_module_prefix,
      "size prefix at offset 64 says 100000 bytes follow, but the file (6281 bytes) has only 6213");
  expect_patched(f, patch_module_prefix_tiny, "size prefix at offset 64 is 4, too small");
  expect_patched(f, patch_module_method, "module entry \"module.fb\" is compressed (method 8)");
  expect_patched(f, patch_module_encrypted, "is encrypted");
}

static void test_crc_mismatch_is_reported(void **state) {
  fixture_t *f = *state;
  uint8_t *z = copy_of(f->zip_file.data, f->zip_file.len);
  z[SEG1_DATA + 17] ^= 0x40;
  kiln_vmfb_archive_t a;
  assert_ok(kiln_vmfb_archive_parse(z, f->zip_file.len, 0, &a));
  assert_int_equal(a.entries[2].crc, KILN_VMFB_ARCHIVE_CRC_UNCHECKED);
  assert_ok(kiln_vmfb_archive_entry_verify(&a, 1));
  assert_fails(kiln_vmfb_archive_entry_verify(&a, 2), KILN_STATUS_DATA_LOSS,
               "zip entry 2 (\"weights.bin\"): the CRC-32 of its data [5376, 5676) is 0x");
  kiln_vmfb_archive_deinit(&a);
  assert_ok(kiln_vmfb_archive_parse(z, f->zip_file.len, KILN_VMFB_ARCHIVE_VERIFY_CRC, &a));
  assert_int_equal(a.entries[1].crc, KILN_VMFB_ARCHIVE_CRC_OK);
  assert_int_equal(a.entries[2].crc, KILN_VMFB_ARCHIVE_CRC_MISMATCH);
  kiln_vmfb_archive_deinit(&a);
  /* A flipped module byte too (the module.fb CRC covers FlatBuffer and padding). */
  z[SEG1_DATA + 17] ^= 0x40;
  z[ZIP_BASE - 1] = 1;
  assert_ok(kiln_vmfb_archive_parse(z, f->zip_file.len, KILN_VMFB_ARCHIVE_VERIFY_CRC, &a));
  assert_int_equal(a.entries[0].crc, KILN_VMFB_ARCHIVE_CRC_MISMATCH);
  kiln_vmfb_archive_deinit(&a);
  free(z);
}

/* Built with the test-side writer: things kiln never writes. */
static void test_hostile_built_archives(void **state) {
  fixture_t *f = *state;
  kiln_buf_t out;
  kiln_buf_init(&out);
  kiln_vmfb_archive_t a;
  uint8_t payload[64];
  memset(payload, 'p', sizeof payload);
  tzip_t classic = {0};

  /* A classic (non-zip64) archive with a compressed and an encrypted entry:
   * reported, never inflated; verify says UNIMPLEMENTED. */
  tzip_entry_t e1[] = {
      {.name = "module.fb", .name_len = 9, .data = f->fb, .size = FB_SIZE},
      {.name = "deflated.bin", .name_len = 12, .data = payload, .size = 40, .method = 8},
      {.name = "zstd.bin", .name_len = 8, .data = payload, .size = 20, .method = 93},
      {.name = "secret.bin", .name_len = 10, .data = payload, .size = 10, .flags = 1},
  };
  build_zip(&classic, e1, 4, &out);
  assert_ok(kiln_vmfb_archive_parse(out.data, out.len, KILN_VMFB_ARCHIVE_VERIFY_CRC, &a));
  assert_sane(&a, (const uint8_t *)out.data, out.len);
  assert_int_equal(a.entry_count, 4);
  assert_int_equal(a.flatbuffer_offset, 39);
  assert_true(a.entries[0].stored);
  assert_int_equal(a.entries[0].crc, KILN_VMFB_ARCHIVE_CRC_OK);
  for (size_t i = 1; i < 4; i++) {
    assert_false(a.entries[i].stored);
    assert_int_equal(a.entries[i].crc, KILN_VMFB_ARCHIVE_CRC_COMPRESSED);
  }
  assert_int_equal(a.entries[1].method, 8);
  assert_int_equal(a.entries[2].method, 93);
  assert_fails(kiln_vmfb_archive_entry_verify(&a, 1), KILN_STATUS_UNIMPLEMENTED, "compressed (method 8)");
  assert_fails(kiln_vmfb_archive_entry_verify(&a, 3), KILN_STATUS_UNIMPLEMENTED, "encrypted");
  kiln_vmfb_archive_deinit(&a);

  /* A comment after the end record (65535 bytes, the most there can be) is fine;
   * an end record hidden behind more trailing data than that is not found. */
  tzip_t commented = {.comment_len = 65535};
  build_zip(&commented, e1, 1, &out);
  assert_ok(kiln_vmfb_archive_parse(out.data, out.len, 0, &a));
  kiln_vmfb_archive_deinit(&a);
  build_zip(&classic, e1, 1, &out);
  for (size_t i = 0; i < 70000; i++) kiln_buf_append_char(&out, 'T');
  assert_fails(kiln_vmfb_archive_parse(out.data, out.len, 0, &a), KILN_STATUS_INVALID_ARGUMENT,
               "no end of central directory record in the last 65557 bytes");

  /* Names: overlong, with NUL, duplicated, empty. */
  char *longname = malloc(1100);
  assert_non_null(longname);
  memset(longname, 'n', 1100);
  tzip_entry_t e2[] = {
      {.name = "module.fb", .name_len = 9, .data = f->fb, .size = FB_SIZE},
      {.name = longname, .name_len = 1100, .data = payload, .size = 4},
  };
  build_zip(&classic, e2, 2, &out);
  assert_fails(kiln_vmfb_archive_parse(out.data, out.len, 0, &a), KILN_STATUS_INVALID_ARGUMENT,
               "its name is 1100 bytes, over the limit of 1024");
  e2[1].name_len = 1024;
  build_zip(&classic, e2, 2, &out);
  assert_ok(kiln_vmfb_archive_parse(out.data, out.len, 0, &a));
  assert_int_equal(a.entries[1].name_length, 1024);
  kiln_vmfb_archive_deinit(&a);
  free(longname);
  e2[1].name = "a\0b";
  e2[1].name_len = 3;
  build_zip(&classic, e2, 2, &out);
  assert_fails(kiln_vmfb_archive_parse(out.data, out.len, 0, &a), KILN_STATUS_INVALID_ARGUMENT,
               "(\"a\\x00b\"): its name holds a NUL byte at 1");
  e2[1].name = "";
  e2[1].name_len = 0;
  build_zip(&classic, e2, 2, &out);
  assert_fails(kiln_vmfb_archive_parse(out.data, out.len, 0, &a), KILN_STATUS_INVALID_ARGUMENT, "empty name");
  e2[1].name = "module.fb";
  e2[1].name_len = 9;
  build_zip(&classic, e2, 2, &out);
  assert_fails(kiln_vmfb_archive_parse(out.data, out.len, 0, &a), KILN_STATUS_INVALID_ARGUMENT,
               "entries 0 and 1 are both named \"module.fb\"");

  /* The local header at offset 0 missing from the directory. */
  tzip_entry_t e3[] = {
      {.name = "module.fb", .name_len = 9, .data = f->fb, .size = FB_SIZE, .omit = true},
      {.name = "other.bin", .name_len = 9, .data = payload, .size = 4},
  };
  build_zip(&classic, e3, 2, &out);
  assert_fails(kiln_vmfb_archive_parse(out.data, out.len, 0, &a), KILN_STATUS_INVALID_ARGUMENT,
               "none of the 1 central directory entries is the local header at offset 0");
  /* An empty directory. */
  build_zip(&classic, e3, 1, &out);
  assert_fails(kiln_vmfb_archive_parse(out.data, out.len, 0, &a), KILN_STATUS_INVALID_ARGUMENT,
               "none of the 0 central directory entries");

  /* A zip64 sentinel with no zip64 field; a classic end record with a count
   * sentinel and no locator. */
  tzip_entry_t e4[] = {
      {.name = "module.fb", .name_len = 9, .data = f->fb, .size = FB_SIZE, .size_override = UINT32_MAX},
  };
  build_zip(&classic, e4, 1, &out);
  assert_fails(kiln_vmfb_archive_parse(out.data, out.len, 0, &a), KILN_STATUS_INVALID_ARGUMENT,
               "sizes or offset are 0xFFFFFFFF but the record has no zip64 extra field");
  tzip_t sentinel = {.count_sentinel = true};
  build_zip(&sentinel, e1, 1, &out);
  assert_fails(kiln_vmfb_archive_parse(out.data, out.len, 0, &a), KILN_STATUS_INVALID_ARGUMENT,
               "defers to zip64 values");

  /* A gap between the entries and the directory is legal (IREE leaves one). */
  tzip_t gap = {.gap_after = 7, .zip64_end = true};
  tzip_entry_t e5[] = {
      {.name = "module.fb", .name_len = 9, .data = f->fb, .size = FB_SIZE, .zip64 = true, .align = 64}};
  build_zip(&gap, e5, 1, &out);
  assert_ok(kiln_vmfb_archive_parse(out.data, out.len, KILN_VMFB_ARCHIVE_VERIFY_CRC, &a));
  assert_int_equal(a.flatbuffer_offset, 64);
  assert_int_equal(a.entries[0].crc, KILN_VMFB_ARCHIVE_CRC_OK);
  kiln_vmfb_archive_deinit(&a);

  /* Bad CRC recorded by the writer. */
  e5[0].bad_crc = true;
  build_zip(&gap, e5, 1, &out);
  assert_ok(kiln_vmfb_archive_parse(out.data, out.len, KILN_VMFB_ARCHIVE_VERIFY_CRC, &a));
  assert_int_equal(a.entries[0].crc, KILN_VMFB_ARCHIVE_CRC_MISMATCH);
  assert_fails(kiln_vmfb_archive_entry_verify(&a, 0), KILN_STATUS_DATA_LOSS, "the file is corrupt");
  kiln_vmfb_archive_deinit(&a);
  kiln_buf_deinit(&out);
}

static void test_parse_arguments_and_tiny_files(void **state) {
  (void)state;
  kiln_vmfb_archive_t a;
  memset(&a, 0x5A, sizeof a);
  assert_fails(kiln_vmfb_archive_parse(NULL, 10, 0, &a), KILN_STATUS_INVALID_ARGUMENT, NULL);
  assert_null(a.entries); /* cleared on entry */
  assert_fails(kiln_vmfb_archive_parse("x", 1, 0x80, &a), KILN_STATUS_INVALID_ARGUMENT,
               "unknown parse flags");
  assert_fails(kiln_vmfb_archive_parse(NULL, 0, 0, NULL), KILN_STATUS_INVALID_ARGUMENT, NULL);
  assert_fails(kiln_vmfb_archive_parse(NULL, 0, 0, &a), KILN_STATUS_INVALID_ARGUMENT, "flat layout");
  assert_fails(kiln_vmfb_archive_parse("PK\3\4", 4, 0, &a), KILN_STATUS_INVALID_ARGUMENT,
               "too short for an end of central directory record");
  /* Flat: a prefix larger than the file. */
  uint8_t flat[32] = {0};
  wr32(flat, 29);
  assert_fails(kiln_vmfb_archive_parse(flat, sizeof flat, 0, &a), KILN_STATUS_INVALID_ARGUMENT,
               "says 29 bytes follow, but the file (32 bytes) has only 28 after it");
  wr32(flat, UINT32_MAX);
  assert_fails(kiln_vmfb_archive_parse(flat, sizeof flat, 0, &a), KILN_STATUS_INVALID_ARGUMENT,
               "says 4294967295");
  wr32(flat, 28); /* exactly the file */
  assert_ok(kiln_vmfb_archive_parse(flat, sizeof flat, 0, &a));
  assert_int_equal(a.flatbuffer_size, 32);
  assert_int_equal(a.rodata_base, 64); /* past the end: no rodata */
  kiln_vmfb_archive_deinit(&a);
  /* deinit on a zeroed archive is fine. */
  kiln_vmfb_archive_t zero = {0};
  kiln_vmfb_archive_deinit(&zero);
  kiln_vmfb_archive_deinit(NULL);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test_setup_teardown(test_golden_zip_layout, setup, teardown),
      cmocka_unit_test_setup_teardown(test_golden_flat_layout, setup, teardown),
      cmocka_unit_test_setup_teardown(test_round_trip_zip, setup, teardown),
      cmocka_unit_test_setup_teardown(test_round_trip_flat, setup, teardown),
      cmocka_unit_test_setup_teardown(test_round_trip_zip_minimal, setup, teardown),
      cmocka_unit_test_setup_teardown(test_deterministic, setup, teardown),
      cmocka_unit_test_setup_teardown(test_plan_detects_moved_segments, setup, teardown),
      cmocka_unit_test_setup_teardown(test_write_validation, setup, teardown),
      cmocka_unit_test_setup_teardown(test_zip_tools_accept, setup, teardown),
      cmocka_unit_test_setup_teardown(test_info_zip_archive_reads, setup, teardown),
      cmocka_unit_test_setup_teardown(test_reads_iree_compile_layout, setup, teardown),
      cmocka_unit_test_setup_teardown(test_every_truncation, setup, teardown),
      cmocka_unit_test_setup_teardown(test_random_byte_flips, setup, teardown),
      cmocka_unit_test_setup_teardown(test_hostile_directories, setup, teardown),
      cmocka_unit_test_setup_teardown(test_crc_mismatch_is_reported, setup, teardown),
      cmocka_unit_test_setup_teardown(test_hostile_built_archives, setup, teardown),
      cmocka_unit_test_setup_teardown(test_parse_arguments_and_tiny_files, setup, teardown),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
