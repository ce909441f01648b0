/* The VMFB container: IREE's polyglot zip64 and flat layouts.
 *
 * Writing follows IREE's ZIPArchiveWriter (compiler/.../VM/Target/Bytecode/
 * ArchiveWriter.cpp) field for field, so the files look like iree-compile's to
 * every zip tool and to the runtime:
 * - Every local header: version needed 4.5 (0x2D), flags 0, method 0 (STORED),
 *   DOS time 0 / date 0x21 (1980-01-01), the entry's CRC-32, both 32-bit sizes
 *   0xFFFFFFFF, and two extra fields in this order: a padding field (id 0xFECA,
 *   bytes "CA FE", zero-filled) sized so the data starts aligned, then the zip64
 *   field (id 1: uncompressed size, compressed size). The padding field comes
 *   first because some tools read the sizes only from the last field. A header is
 *   therefore 54 + name bytes + padding.
 * - Central directory records: made by 0x031E (Unix, 3.0), version needed 0x2D,
 *   sizes and local header offset 0xFFFFFFFF, one zip64 field (uncompressed,
 *   compressed, local header offset); then the zip64 EOCD record (made by and
 *   needed 0x2D, 44-byte body), the zip64 locator (disk 0, total disks 1) and
 *   the classic EOCD with the 16-bit counts, the 32-bit directory size and
 *   directory offset 0xFFFFFFFF, no comment.
 * Deliberate differences from IREE:
 * - IREE rewrites the module's size prefix to align(S + 4, 64) - 4 (S = the
 *   size-prefixed FlatBuffer's length), which makes the runtime's FlatBuffer run
 *   4 bytes past the module.fb entry and wastes 64 bytes when S is a multiple of
 *   64. kiln keeps the caller's prefix; the module.fb entry is the FlatBuffer plus
 *   zeros up to the rodata base, so the base is align64(64 + S) and every byte of
 *   the file is inside an entry or the directory.
 * - IREE aligns segment data relative to the rodata base; kiln aligns absolute
 *   file offsets (the same for alignments <= 64, correct for larger ones when the
 *   file is mapped page-aligned).
 * - External file attributes are 0100644 << 16 (a regular rw-r--r-- file) rather
 *   than 0, so unzip extracts readable files; counts above 65535 would be written
 *   as 0xFFFF rather than truncated (kiln caps entries at 65535 anyway).
 * Layout is computed once (place()) and used both by kiln_vmfb_archive_plan and
 * by the writer, which checks the segment offsets against the ones the caller
 * put in the FlatBuffer before writing a byte.
 *
 * Reading trusts nothing. Every offset is checked against the file with
 * overflow-checked 64-bit arithmetic before any byte is read. The end of central
 * directory record is searched only in the last 65535 + 22 bytes, and only a
 * signature whose comment ends exactly at the end of the file counts. The entry
 * count is capped (KILN_VMFB_ARCHIVE_MAX_ENTRIES) and must fit in the directory
 * at 46 bytes per record before anything is allocated, so memory stays a small
 * multiple of the file size. Each directory record must match its local header
 * (signature, name, method) and its data must lie before the directory; entries
 * may not overlap and names must be unique (sorted checks, O(n log n)). As in
 * the runtime, the FlatBuffer is found through the local header at offset 0 and
 * its size prefix; the rodata base is align64(prefix offset + 4 + prefix).
 */
#include "compiler/vmfb/archive.h"

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <zlib.h>

#include "base/alloc.h"

enum {
  LOCAL_HEADER_SIZE = 30,
  CENTRAL_HEADER_SIZE = 46,
  EOCD_SIZE = 22,
  EOCD64_SIZE = 56,
  EOCD64_BODY_SIZE = EOCD64_SIZE - 12, /* "size of zip64 EOCD record" field */
  LOCATOR_SIZE = 20,
  EXTRA_HEADER_SIZE = 4,
  ZIP64_LOCAL_EXTRA_SIZE = EXTRA_HEADER_SIZE + 16,
  ZIP64_CENTRAL_EXTRA_SIZE = EXTRA_HEADER_SIZE + 24,
  /* A local header as written: fixed part, padding field header, zip64 field. */
  LOCAL_OVERHEAD = LOCAL_HEADER_SIZE + EXTRA_HEADER_SIZE + ZIP64_LOCAL_EXTRA_SIZE,
  CENTRAL_OVERHEAD = CENTRAL_HEADER_SIZE + ZIP64_CENTRAL_EXTRA_SIZE,
  TRAILER_SIZE = EOCD64_SIZE + LOCATOR_SIZE + EOCD_SIZE,
  MAX_COMMENT = 0xFFFF,
  /* Runtime's check: at least 16 bytes from the size prefix to the end of file. */
  MIN_MODULE_BYTES = 16,
  /* Smallest size prefix accepted: a root offset and an identifier slot. */
  MIN_PREFIX = 8,
  QUOTE_MAX_INPUT = 64,
};

static const uint32_t LOCAL_SIG = 0x04034B50u;
static const uint32_t CENTRAL_SIG = 0x02014B50u;
static const uint32_t EOCD_SIG = 0x06054B50u;
static const uint32_t EOCD64_SIG = 0x06064B50u;
static const uint32_t LOCATOR_SIG = 0x07064B50u;
static const uint16_t VERSION_ZIP64 = 0x002D;   /* 4.5 */
static const uint16_t VERSION_MADE_BY = 0x031E; /* Unix, spec 3.0 (as IREE) */
static const uint16_t DOS_TIME = 0;
static const uint16_t DOS_DATE = 0x0021; /* 1980-01-01 */
static const uint16_t EXTRA_ID_ZIP64 = 0x0001;
static const uint16_t EXTRA_ID_PADDING = 0xFECA; /* IREE's "CAFE" field */
static const uint32_t EXTERNAL_ATTRS = 0100644u << 16;
static const uint16_t FLAG_ENCRYPTED = 1u << 0;
static const char MODULE_NAME[] = KILN_VMFB_ARCHIVE_MODULE_NAME;
#define MODULE_NAME_LEN (sizeof(MODULE_NAME) - 1)

/* ---- little helpers ---- */

static uint16_t rd16(const uint8_t *p) { return (uint16_t)(p[0] | (p[1] << 8)); }
static uint32_t rd32(const uint8_t *p) {
  return (uint32_t)p[0] | ((uint32_t)p[1] << 8) | ((uint32_t)p[2] << 16) | ((uint32_t)p[3] << 24);
}
static uint64_t rd64(const uint8_t *p) { return (uint64_t)rd32(p) | ((uint64_t)rd32(p + 4) << 32); }

static uint8_t *put16(uint8_t *p, uint16_t v) {
  p[0] = (uint8_t)v;
  p[1] = (uint8_t)(v >> 8);
  return p + 2;
}
static uint8_t *put32(uint8_t *p, uint32_t v) {
  put16(p, (uint16_t)v);
  put16(p + 2, (uint16_t)(v >> 16));
  return p + 4;
}
static uint8_t *put64(uint8_t *p, uint64_t v) {
  put32(p, (uint32_t)v);
  put32(p + 4, (uint32_t)(v >> 32));
  return p + 8;
}

static bool add_u64(uint64_t a, uint64_t b, uint64_t *out) { return !__builtin_add_overflow(a, b, out); }

/* Rounds v up to a multiple of `align` (a power of two); false on overflow. */
static bool align_u64(uint64_t v, uint64_t align, uint64_t *out) {
  if (!add_u64(v, align - 1, out)) return false;
  *out &= ~(align - 1);
  return true;
}

/* Whether [offset, offset + length) lies inside [0, limit). */
static bool range_within(uint64_t offset, uint64_t length, uint64_t limit) {
  return offset <= limit && length <= limit - offset;
}

static uint32_t crc32_of(uint32_t crc, const void *data, uint64_t len) {
  /* crc32_z takes z_size_t (size_t here); every length passed fits in memory. */
  return (uint32_t)crc32_z(crc, data, (z_size_t)len);
}

/* A name for messages: double-quoted, printable ASCII kept, \" \\ and \xHH
 * escapes, cut at QUOTE_MAX_INPUT bytes with "...". */
typedef struct quoted_s {
  char s[2 + QUOTE_MAX_INPUT * 4 + 4 + 1];
} quoted_t;

static const char *quote(quoted_t *q, const void *name, size_t len) {
  const uint8_t *p = name;
  size_t n = 0;
  q->s[n++] = '"';
  size_t shown = len < QUOTE_MAX_INPUT ? len : QUOTE_MAX_INPUT;
  for (size_t i = 0; i < shown; i++) {
    uint8_t c = p[i];
    if (c == '"' || c == '\\') {
      q->s[n++] = '\\';
      q->s[n++] = (char)c;
    } else if (c >= 0x20 && c < 0x7F) {
      q->s[n++] = (char)c;
    } else {
      n += (size_t)snprintf(q->s + n, 5, "\\x%02x", c);
    }
  }
  if (shown < len) {
    memcpy(q->s + n, "...", 3);
    n += 3;
  }
  q->s[n++] = '"';
  q->s[n] = '\0';
  return q->s;
}

/* ---- layout ---- */

/* Where one file after the FlatBuffer goes. */
typedef struct placed_s {
  const kiln_vmfb_archive_file_t *file;
  size_t name_len;        /* 0 for flat */
  uint64_t header_offset; /* ZIP: of its local header */
  uint64_t data_offset;
} placed_t;

typedef struct layout_s {
  kiln_vmfb_archive_plan_t plan;
  uint64_t module_entry_size; /* ZIP: FlatBuffer + zeros up to the base */
  uint64_t directory_offset;  /* ZIP */
  uint64_t directory_size;    /* ZIP */
  placed_t *files;            /* segments, then extras; owned */
  size_t file_count;
} layout_t;

static void layout_deinit(layout_t *layout) {
  kiln_free(layout->files);
  layout->files = NULL;
}

static uint64_t effective_alignment(uint32_t alignment) {
  return alignment < KILN_VMFB_ARCHIVE_ALIGNMENT ? KILN_VMFB_ARCHIVE_ALIGNMENT : alignment;
}

/* NULL when `name` is acceptable for writing, else what is wrong with it. */
static const char *name_problem(const char *name, size_t *out_len) {
  size_t len = strnlen(name, KILN_VMFB_ARCHIVE_NAME_MAX + 1);
  *out_len = len;
  if (len == 0) return "is empty";
  if (len > KILN_VMFB_ARCHIVE_NAME_MAX) return "is longer than 1024 bytes";
  for (size_t i = 0; i < len; i++) {
    unsigned char c = (unsigned char)name[i];
    if (c < 0x20 || c >= 0x7F || c == '\\') return "has a byte that is not printable ASCII or is '\\'";
  }
  if (name[0] == '/') return "starts with '/'";
  for (const char *p = name; p; p = strchr(p, '/')) {
    if (*p == '/') p++;
    if (p[0] == '.' && p[1] == '.' && (p[2] == '/' || p[2] == '\0')) return "has a \"..\" component";
  }
  if (len == MODULE_NAME_LEN && memcmp(name, MODULE_NAME, len) == 0) {
    return "is reserved for the FlatBuffer's entry";
  }
  return NULL;
}

static int compare_placed_names(const void *a, const void *b) {
  const placed_t *x = *(const placed_t *const *)a, *y = *(const placed_t *const *)b;
  return strcmp(x->file->name, y->file->name);
}

static const char *file_kind(const layout_t *layout, const kiln_vmfb_archive_contents_t *c, const placed_t *p,
                             size_t *out_index) {
  size_t i = (size_t)(p - layout->files);
  if (i < c->segment_count) {
    *out_index = i;
    return "segment";
  }
  *out_index = i - c->segment_count;
  return "extra entry";
}

/* Validates `contents` and computes where everything goes. */
static KILN_MUST_USE kiln_status_t place(const kiln_vmfb_archive_contents_t *c, layout_t *out) {
  memset(out, 0, sizeof *out);
  if (!c) return KILN_STATUS(KILN_STATUS_INVALID_ARGUMENT, "vmfb archive: no contents given");
  bool zip = c->layout == KILN_VMFB_ARCHIVE_LAYOUT_ZIP;
  if (!zip && c->layout != KILN_VMFB_ARCHIVE_LAYOUT_FLAT) {
    return KILN_STATUS(KILN_STATUS_INVALID_ARGUMENT,
                       "vmfb archive: unknown layout %d; use KILN_VMFB_ARCHIVE_LAYOUT_ZIP or _FLAT",
                       (int)c->layout);
  }
  if (c->flatbuffer_size < 4 + MIN_PREFIX || c->flatbuffer_size > 4 + (uint64_t)UINT32_MAX) {
    return KILN_STATUS(KILN_STATUS_INVALID_ARGUMENT,
                       "vmfb archive: the size-prefixed FlatBuffer is %" PRIu64
                       " bytes; it must be 12 bytes to 4 GiB + 3",
                       c->flatbuffer_size);
  }
  if ((c->segment_count && !c->segments) || (c->extra_count && !c->extras)) {
    return KILN_STATUS(KILN_STATUS_INVALID_ARGUMENT,
                       "vmfb archive: %zu segments and %zu extra entries but a NULL array", c->segment_count,
                       c->extra_count);
  }
  if (!zip && c->extra_count) {
    return KILN_STATUS(KILN_STATUS_INVALID_ARGUMENT,
                       "vmfb archive: %zu extra entries (first \"%.64s\") need the zip layout; "
                       "the flat layout has no names to keep them under",
                       c->extra_count, c->extras[0].name ? c->extras[0].name : "");
  }
  if (c->segment_count > KILN_VMFB_ARCHIVE_MAX_ENTRIES - 1 ||
      c->extra_count > KILN_VMFB_ARCHIVE_MAX_ENTRIES - 1 - c->segment_count) {
    return KILN_STATUS(KILN_STATUS_INVALID_ARGUMENT,
                       "vmfb archive: %zu segments + %zu extra entries + module.fb exceed %u entries",
                       c->segment_count, c->extra_count, KILN_VMFB_ARCHIVE_MAX_ENTRIES);
  }

  out->file_count = c->segment_count + c->extra_count;
  out->files = kiln_calloc(out->file_count ? out->file_count : 1, sizeof *out->files);
  for (size_t i = 0; i < out->file_count; i++) {
    placed_t *p = &out->files[i];
    p->file = i < c->segment_count ? &c->segments[i] : &c->extras[i - c->segment_count];
    size_t index;
    const char *kind = file_kind(out, c, p, &index);
    uint32_t a = p->file->alignment;
    if (a > KILN_VMFB_ARCHIVE_MAX_ALIGNMENT || (a & (a - 1)) != 0) {
      layout_deinit(out);
      return KILN_STATUS(KILN_STATUS_INVALID_ARGUMENT,
                         "vmfb archive: %s %zu has alignment %" PRIu32
                         "; use a power of two up to %u (0 means 64)",
                         kind, index, a, KILN_VMFB_ARCHIVE_MAX_ALIGNMENT);
    }
    if (!zip) continue;
    if (!p->file->name) {
      layout_deinit(out);
      return KILN_STATUS(KILN_STATUS_INVALID_ARGUMENT,
                         "vmfb archive: %s %zu has no name; the zip layout needs one", kind, index);
    }
    const char *problem = name_problem(p->file->name, &p->name_len);
    if (problem) {
      quoted_t q;
      kiln_status_t status = KILN_STATUS(
          KILN_STATUS_INVALID_ARGUMENT,
          "vmfb archive: the name of %s %zu (%s) %s; use 1..1024 printable ASCII bytes, a relative "
          "path without \"..\", not \"module.fb\"",
          kind, index, quote(&q, p->file->name, p->name_len), problem);
      layout_deinit(out);
      return status;
    }
  }
  if (zip && out->file_count > 1) {
    const placed_t **order = kiln_malloc(out->file_count * sizeof *order);
    for (size_t i = 0; i < out->file_count; i++) order[i] = &out->files[i];
    qsort(order, out->file_count, sizeof *order, compare_placed_names);
    for (size_t i = 1; i < out->file_count; i++) {
      if (strcmp(order[i - 1]->file->name, order[i]->file->name) == 0) {
        quoted_t q;
        kiln_status_t status =
            KILN_STATUS(KILN_STATUS_INVALID_ARGUMENT,
                        "vmfb archive: the entry name %s is used twice; zip entry names must be unique",
                        quote(&q, order[i]->file->name, order[i]->name_len));
        kiln_free(order);
        layout_deinit(out);
        return status;
      }
    }
    kiln_free(order);
  }

  /* From here on, the only failure is a file too large for 64 bits. Sizes are
   * bounded above, so the FlatBuffer's part cannot overflow. */
  kiln_vmfb_archive_plan_t *plan = &out->plan;
  plan->flatbuffer_offset = zip ? (LOCAL_OVERHEAD + MODULE_NAME_LEN + KILN_VMFB_ARCHIVE_ALIGNMENT - 1) &
                                      ~(uint64_t)(KILN_VMFB_ARCHIVE_ALIGNMENT - 1)
                                : 0;
  uint64_t fb_end = plan->flatbuffer_offset + c->flatbuffer_size;
  plan->rodata_base =
      (fb_end + KILN_VMFB_ARCHIVE_ALIGNMENT - 1) & ~(uint64_t)(KILN_VMFB_ARCHIVE_ALIGNMENT - 1);
  out->module_entry_size = plan->rodata_base - plan->flatbuffer_offset;
  uint64_t tail = plan->rodata_base;
  bool ok = true;
  for (size_t i = 0; ok && i < out->file_count; i++) {
    placed_t *p = &out->files[i];
    uint64_t header_end = tail;
    if (zip) ok = add_u64(tail, LOCAL_OVERHEAD + (uint64_t)p->name_len, &header_end);
    p->header_offset = tail;
    ok = ok && align_u64(header_end, effective_alignment(p->file->alignment), &p->data_offset) &&
         add_u64(p->data_offset, p->file->size, &tail);
  }
  uint64_t file_size = tail;
  if (ok && zip) {
    out->directory_offset = tail;
    out->directory_size = CENTRAL_OVERHEAD + MODULE_NAME_LEN;
    for (size_t i = 0; i < out->file_count; i++) {
      out->directory_size += CENTRAL_OVERHEAD + out->files[i].name_len;
    }
    ok = add_u64(tail, out->directory_size + TRAILER_SIZE, &file_size);
  }
  if (!ok || file_size >= SIZE_MAX) {
    layout_deinit(out);
    return KILN_STATUS(KILN_STATUS_OUT_OF_RANGE,
                       "vmfb archive: the file would be larger than this host can address; "
                       "check the segment sizes");
  }
  plan->file_size = file_size;
  return NULL;
}

kiln_status_t kiln_vmfb_archive_plan(const kiln_vmfb_archive_contents_t *contents,
                                     kiln_vmfb_archive_plan_t *out_plan, uint64_t *out_segment_offsets) {
  layout_t layout;
  KILN_RETURN_IF_ERROR(place(contents, &layout));
  if (contents->segment_count && !out_segment_offsets) {
    layout_deinit(&layout);
    return KILN_STATUS(KILN_STATUS_INVALID_ARGUMENT,
                       "vmfb archive: %zu segments to plan but no array for their offsets",
                       contents->segment_count);
  }
  for (size_t i = 0; i < contents->segment_count; i++) {
    out_segment_offsets[i] = layout.files[i].data_offset - layout.plan.rodata_base;
  }
  if (out_plan) *out_plan = layout.plan;
  layout_deinit(&layout);
  return NULL;
}

/* ---- writing ---- */

static void append_zeros(kiln_buf_t *buf, uint64_t n) {
  kiln_buf_reserve(buf, (size_t)n);
  memset(buf->data + buf->len, 0, (size_t)n);
  buf->len += (size_t)n;
  buf->data[buf->len] = '\0';
}

static uint32_t crc32_zeros(uint32_t crc, uint64_t n) {
  static const uint8_t zeros[256];
  while (n > 0) {
    uint64_t chunk = n < sizeof zeros ? n : sizeof zeros;
    crc = crc32_of(crc, zeros, chunk);
    n -= chunk;
  }
  return crc;
}

/* Appends a local header at buf->len whose data starts `padding` bytes after the
 * minimum (LOCAL_OVERHEAD + name) header. */
static void append_local_header(kiln_buf_t *buf, const char *name, size_t name_len, uint64_t padding,
                                uint64_t size, uint32_t crc) {
  uint8_t h[LOCAL_HEADER_SIZE], *p = h;
  p = put32(p, LOCAL_SIG);
  p = put16(p, VERSION_ZIP64);
  p = put16(p, 0); /* flags: no data descriptor, no encryption */
  p = put16(p, 0); /* STORED */
  p = put16(p, DOS_TIME);
  p = put16(p, DOS_DATE);
  p = put32(p, crc);
  p = put32(p, UINT32_MAX); /* compressed size: in the zip64 field */
  p = put32(p, UINT32_MAX); /* uncompressed size: in the zip64 field */
  p = put16(p, (uint16_t)name_len);
  put16(p, (uint16_t)(EXTRA_HEADER_SIZE + padding + ZIP64_LOCAL_EXTRA_SIZE));
  kiln_buf_append(buf, h, sizeof h);
  kiln_buf_append(buf, name, name_len);

  uint8_t e[EXTRA_HEADER_SIZE];
  put16(put16(e, EXTRA_ID_PADDING), (uint16_t)padding);
  kiln_buf_append(buf, e, sizeof e);
  append_zeros(buf, padding);

  uint8_t z[ZIP64_LOCAL_EXTRA_SIZE];
  p = put16(z, EXTRA_ID_ZIP64);
  p = put16(p, ZIP64_LOCAL_EXTRA_SIZE - EXTRA_HEADER_SIZE);
  p = put64(p, size); /* uncompressed */
  put64(p, size);     /* compressed */
  kiln_buf_append(buf, z, sizeof z);
}

static void append_central_record(kiln_buf_t *buf, const char *name, size_t name_len, uint64_t header_offset,
                                  uint64_t size, uint32_t crc) {
  uint8_t h[CENTRAL_HEADER_SIZE], *p = h;
  p = put32(p, CENTRAL_SIG);
  p = put16(p, VERSION_MADE_BY);
  p = put16(p, VERSION_ZIP64);
  p = put16(p, 0); /* flags */
  p = put16(p, 0); /* STORED */
  p = put16(p, DOS_TIME);
  p = put16(p, DOS_DATE);
  p = put32(p, crc);
  p = put32(p, UINT32_MAX); /* compressed size: in the zip64 field */
  p = put32(p, UINT32_MAX); /* uncompressed size: in the zip64 field */
  p = put16(p, (uint16_t)name_len);
  p = put16(p, ZIP64_CENTRAL_EXTRA_SIZE);
  p = put16(p, 0); /* comment length */
  p = put16(p, 0); /* disk number start */
  p = put16(p, 0); /* internal attributes */
  p = put32(p, EXTERNAL_ATTRS);
  put32(p, UINT32_MAX); /* local header offset: in the zip64 field */
  kiln_buf_append(buf, h, sizeof h);
  kiln_buf_append(buf, name, name_len);

  uint8_t z[ZIP64_CENTRAL_EXTRA_SIZE];
  p = put16(z, EXTRA_ID_ZIP64);
  p = put16(p, ZIP64_CENTRAL_EXTRA_SIZE - EXTRA_HEADER_SIZE);
  p = put64(p, size);
  p = put64(p, size);
  put64(p, header_offset);
  kiln_buf_append(buf, z, sizeof z);
}

static void append_trailer(kiln_buf_t *buf, uint64_t entries, uint64_t dir_offset, uint64_t dir_size) {
  uint64_t eocd64_offset = dir_offset + dir_size;
  uint8_t t[TRAILER_SIZE], *p = t;
  p = put32(p, EOCD64_SIG);
  p = put64(p, EOCD64_BODY_SIZE);
  p = put16(p, VERSION_ZIP64); /* made by: as IREE */
  p = put16(p, VERSION_ZIP64); /* needed */
  p = put32(p, 0);             /* this disk */
  p = put32(p, 0);             /* disk with the directory */
  p = put64(p, entries);       /* on this disk */
  p = put64(p, entries);       /* total */
  p = put64(p, dir_size);
  p = put64(p, dir_offset);

  p = put32(p, LOCATOR_SIG);
  p = put32(p, 0); /* disk with the zip64 EOCD */
  p = put64(p, eocd64_offset);
  p = put32(p, 1); /* total disks */

  uint16_t count16 = entries < UINT16_MAX ? (uint16_t)entries : UINT16_MAX;
  p = put32(p, EOCD_SIG);
  p = put16(p, 0);
  p = put16(p, 0);
  p = put16(p, count16);
  p = put16(p, count16);
  p = put32(p, dir_size < UINT32_MAX ? (uint32_t)dir_size : UINT32_MAX);
  p = put32(p, UINT32_MAX); /* directory offset: in the zip64 record (as IREE) */
  put16(p, 0);              /* comment length */
  kiln_buf_append(buf, t, sizeof t);
}

kiln_status_t kiln_vmfb_archive_write(const kiln_vmfb_archive_contents_t *contents,
                                      const uint64_t *expected_segment_offsets, kiln_buf_t *out) {
  if (!out) return KILN_STATUS(KILN_STATUS_INVALID_ARGUMENT, "vmfb archive: no output buffer");
  kiln_buf_clear(out);
  layout_t layout;
  KILN_RETURN_IF_ERROR(place(contents, &layout));
  const kiln_vmfb_archive_contents_t *c = contents;
  kiln_status_t status = NULL;
  if (!c->flatbuffer) {
    status = KILN_STATUS(KILN_STATUS_INVALID_ARGUMENT, "vmfb archive: no FlatBuffer bytes to write");
  } else if (rd32(c->flatbuffer) != c->flatbuffer_size - 4) {
    status = KILN_STATUS(KILN_STATUS_INVALID_ARGUMENT,
                         "vmfb archive: the FlatBuffer's size prefix is %" PRIu32 " but %" PRIu64
                         " bytes were given (want a prefix of %" PRIu64
                         "); pass exactly the size-prefixed FlatBuffer",
                         rd32(c->flatbuffer), c->flatbuffer_size, c->flatbuffer_size - 4);
  }
  for (size_t i = 0; !status && i < layout.file_count; i++) {
    const placed_t *p = &layout.files[i];
    size_t index;
    const char *kind = file_kind(&layout, c, p, &index);
    if (!p->file->data && p->file->size) {
      status =
          KILN_STATUS(KILN_STATUS_INVALID_ARGUMENT, "vmfb archive: %s %zu has %" PRIu64 " bytes but no data",
                      kind, index, p->file->size);
    } else if (expected_segment_offsets && i < c->segment_count &&
               p->data_offset - layout.plan.rodata_base != expected_segment_offsets[i]) {
      quoted_t q;
      status = KILN_STATUS(KILN_STATUS_FAILED_PRECONDITION,
                           "vmfb archive: segment %zu (%s) lands at rodata offset %" PRIu64
                           " but the FlatBuffer says %" PRIu64 " (FlatBuffer %" PRIu64
                           " bytes, rodata base %" PRIu64 "); plan again with the final FlatBuffer size",
                           i, p->file->name ? quote(&q, p->file->name, p->name_len) : "unnamed",
                           p->data_offset - layout.plan.rodata_base, expected_segment_offsets[i],
                           c->flatbuffer_size, layout.plan.rodata_base);
    }
  }
  if (status) {
    layout_deinit(&layout);
    return status;
  }

  kiln_buf_reserve(out, (size_t)layout.plan.file_size);
  bool zip = c->layout == KILN_VMFB_ARCHIVE_LAYOUT_ZIP;
  uint32_t module_crc = 0;
  uint64_t fb_padding = layout.module_entry_size - c->flatbuffer_size;
  if (zip) {
    module_crc = crc32_zeros(crc32_of(0, c->flatbuffer, c->flatbuffer_size), fb_padding);
    append_local_header(out, MODULE_NAME, MODULE_NAME_LEN,
                        layout.plan.flatbuffer_offset - (LOCAL_OVERHEAD + MODULE_NAME_LEN),
                        layout.module_entry_size, module_crc);
  }
  kiln_buf_append(out, c->flatbuffer, (size_t)c->flatbuffer_size);
  append_zeros(out, fb_padding);

  uint32_t *crcs = kiln_calloc(layout.file_count ? layout.file_count : 1, sizeof *crcs);
  for (size_t i = 0; i < layout.file_count; i++) {
    const placed_t *p = &layout.files[i];
    if (zip) {
      crcs[i] = crc32_of(0, p->file->data, p->file->size);
      append_local_header(out, p->file->name, p->name_len,
                          p->data_offset - p->header_offset - (LOCAL_OVERHEAD + p->name_len), p->file->size,
                          crcs[i]);
    } else {
      append_zeros(out, p->data_offset - out->len);
    }
    if (p->file->size) kiln_buf_append(out, p->file->data, (size_t)p->file->size);
  }
  if (zip) {
    append_central_record(out, MODULE_NAME, MODULE_NAME_LEN, 0, layout.module_entry_size, module_crc);
    for (size_t i = 0; i < layout.file_count; i++) {
      const placed_t *p = &layout.files[i];
      append_central_record(out, p->file->name, p->name_len, p->header_offset, p->file->size, crcs[i]);
    }
    append_trailer(out, 1 + layout.file_count, layout.directory_offset, layout.directory_size);
  }
  kiln_free(crcs);
  if (out->len != layout.plan.file_size) {
    status = KILN_STATUS(KILN_STATUS_INTERNAL,
                         "vmfb archive: wrote %zu bytes but planned %" PRIu64 " (a kiln bug)", out->len,
                         layout.plan.file_size);
    kiln_buf_clear(out);
  }
  layout_deinit(&layout);
  return status;
}

/* ---- reading ---- */

static KILN_MUST_USE kiln_status_t locate_flatbuffer(kiln_vmfb_archive_t *a, uint64_t offset) {
  const char *where = a->layout == KILN_VMFB_ARCHIVE_LAYOUT_ZIP ? "zip layout" : "flat layout";
  uint64_t size = a->file_size;
  if (offset > size || size - offset < MIN_MODULE_BYTES) {
    return KILN_STATUS(KILN_STATUS_INVALID_ARGUMENT,
                       "%s: the FlatBuffer should start at offset %" PRIu64 " but the file (%" PRIu64
                       " bytes) has fewer than %d bytes there; the file is truncated or not a VMFB",
                       where, offset, size, MIN_MODULE_BYTES);
  }
  uint32_t prefix = rd32(a->file + offset);
  if (prefix < MIN_PREFIX) {
    return KILN_STATUS(KILN_STATUS_INVALID_ARGUMENT,
                       "%s: the FlatBuffer size prefix at offset %" PRIu64 " is %" PRIu32
                       ", too small for a FlatBuffer (at least %d)",
                       where, offset, prefix, MIN_PREFIX);
  }
  if (prefix > size - offset - 4) {
    return KILN_STATUS(KILN_STATUS_INVALID_ARGUMENT,
                       "%s: the FlatBuffer size prefix at offset %" PRIu64 " says %" PRIu32
                       " bytes follow, but the file (%" PRIu64 " bytes) has only %" PRIu64
                       " after it; the file is truncated or not a VMFB",
                       where, offset, prefix, size, size - offset - 4);
  }
  a->flatbuffer = a->file + offset;
  a->flatbuffer_size = (size_t)prefix + 4;
  a->flatbuffer_offset = offset;
  a->has_iree_identifier = memcmp(a->flatbuffer + 8, "IREE", 4) == 0;
  uint64_t end = offset + 4 + prefix; /* <= size: no overflow */
  a->rodata_base = (end + KILN_VMFB_ARCHIVE_ALIGNMENT - 1) & ~(uint64_t)(KILN_VMFB_ARCHIVE_ALIGNMENT - 1);
  return NULL;
}

/* The directory as the end records describe it. */
typedef struct directory_s {
  uint64_t offset;
  uint64_t size;
  uint64_t count;
  uint64_t limit; /* where the directory must end: the first end record */
} directory_t;

static KILN_MUST_USE kiln_status_t find_directory(const kiln_vmfb_archive_t *a, directory_t *out) {
  const uint8_t *f = a->file;
  uint64_t size = a->file_size;
  if (size < EOCD_SIZE) {
    return KILN_STATUS(KILN_STATUS_INVALID_ARGUMENT,
                       "zip layout: the file (%" PRIu64
                       " bytes) is too short for an end of central directory record (%d bytes); "
                       "it is truncated",
                       size, EOCD_SIZE);
  }
  uint64_t last = size - EOCD_SIZE;
  uint64_t first = last > MAX_COMMENT ? last - MAX_COMMENT : 0;
  uint64_t eocd = UINT64_MAX;
  for (uint64_t pos = last + 1; pos-- > first;) {
    if (f[pos] == 0x50 && rd32(f + pos) == EOCD_SIG && rd16(f + pos + 20) == last - pos) {
      eocd = pos;
      break;
    }
  }
  if (eocd == UINT64_MAX) {
    return KILN_STATUS(KILN_STATUS_INVALID_ARGUMENT,
                       "zip layout: no end of central directory record in the last %" PRIu64
                       " bytes of the file (%" PRIu64 " bytes); it is truncated or has data appended",
                       size - first, size);
  }
  const uint8_t *e = f + eocd;
  uint32_t disk = rd16(e + 4), dir_disk = rd16(e + 6);
  uint64_t on_disk = rd16(e + 8), count = rd16(e + 10);
  uint64_t dir_size = rd32(e + 12), dir_offset = rd32(e + 16);
  uint64_t limit = eocd;
  if (eocd >= LOCATOR_SIZE && rd32(f + eocd - LOCATOR_SIZE) == LOCATOR_SIG) {
    uint64_t loc = eocd - LOCATOR_SIZE;
    uint32_t record_disk = rd32(f + loc + 4), disks = rd32(f + loc + 16);
    uint64_t record = rd64(f + loc + 8);
    if (record_disk != 0 || disks > 1) {
      return KILN_STATUS(KILN_STATUS_INVALID_ARGUMENT,
                         "zip64 end of central directory locator at %" PRIu64 ": disk %" PRIu32 " of %" PRIu32
                         "; multi-disk archives are not supported",
                         loc, record_disk, disks);
    }
    if (record > loc || loc - record < EOCD64_SIZE) {
      return KILN_STATUS(KILN_STATUS_INVALID_ARGUMENT,
                         "zip64 end of central directory locator at %" PRIu64 " points at %" PRIu64
                         ", where no %d-byte zip64 record fits before it",
                         loc, record, EOCD64_SIZE);
    }
    const uint8_t *r = f + record;
    uint64_t body = rd64(r + 4);
    if (rd32(r) != EOCD64_SIG) {
      return KILN_STATUS(KILN_STATUS_INVALID_ARGUMENT,
                         "zip64 end of central directory record at %" PRIu64 ": signature 0x%08" PRIx32
                         ", expected 0x%08" PRIx32,
                         record, rd32(r), EOCD64_SIG);
    }
    if (body < EOCD64_BODY_SIZE || body > loc - record - 12) {
      return KILN_STATUS(KILN_STATUS_INVALID_ARGUMENT,
                         "zip64 end of central directory record at %" PRIu64 ": its size %" PRIu64
                         " is below %d or runs past the locator at %" PRIu64,
                         record, body, EOCD64_BODY_SIZE, loc);
    }
    disk = rd32(r + 16);
    dir_disk = rd32(r + 20);
    on_disk = rd64(r + 24);
    count = rd64(r + 32);
    dir_size = rd64(r + 40);
    dir_offset = rd64(r + 48);
    limit = record;
  } else if (count == UINT16_MAX || dir_size == UINT32_MAX || dir_offset == UINT32_MAX) {
    return KILN_STATUS(KILN_STATUS_INVALID_ARGUMENT,
                       "zip end of central directory record at %" PRIu64
                       " defers to zip64 values but no zip64 locator precedes it",
                       eocd);
  }
  if (disk != 0 || dir_disk != 0 || on_disk != count) {
    return KILN_STATUS(KILN_STATUS_INVALID_ARGUMENT,
                       "zip end of central directory: disk %" PRIu32 ", directory on disk %" PRIu32
                       ", %" PRIu64 " of %" PRIu64
                       " entries on this disk; multi-disk archives are not supported",
                       disk, dir_disk, on_disk, count);
  }
  if (!range_within(dir_offset, dir_size, limit)) {
    return KILN_STATUS(KILN_STATUS_INVALID_ARGUMENT,
                       "zip central directory at %" PRIu64 " (%" PRIu64
                       " bytes) does not end before the end records at %" PRIu64
                       "; the file is truncated or corrupt",
                       dir_offset, dir_size, limit);
  }
  if (count > KILN_VMFB_ARCHIVE_MAX_ENTRIES) {
    return KILN_STATUS(KILN_STATUS_INVALID_ARGUMENT,
                       "zip central directory claims %" PRIu64 " entries; kiln reads at most %u", count,
                       KILN_VMFB_ARCHIVE_MAX_ENTRIES);
  }
  if (count > dir_size / CENTRAL_HEADER_SIZE) {
    return KILN_STATUS(KILN_STATUS_INVALID_ARGUMENT,
                       "zip central directory claims %" PRIu64 " entries but its %" PRIu64
                       " bytes at %" PRIu64 " hold at most %" PRIu64,
                       count, dir_size, dir_offset, dir_size / CENTRAL_HEADER_SIZE);
  }
  out->offset = dir_offset;
  out->size = dir_size;
  out->count = count;
  out->limit = limit;
  return NULL;
}

/* The zip64 values a directory record defers (fields that are all ones). */
typedef struct zip64_need_s {
  bool uncompressed, compressed, offset, disk;
} zip64_need_t;

static KILN_MUST_USE kiln_status_t read_zip64_field(const uint8_t *f, uint64_t extra, uint64_t extra_len,
                                                    zip64_need_t need, const char *who,
                                                    uint64_t *uncompressed, uint64_t *compressed,
                                                    uint64_t *offset, uint32_t *disk) {
  bool found = false;
  uint64_t pos = extra, end = extra + extra_len;
  while (end - pos >= EXTRA_HEADER_SIZE) {
    uint16_t id = rd16(f + pos), len = rd16(f + pos + 2);
    uint64_t body = pos + EXTRA_HEADER_SIZE;
    if (len > end - body) {
      return KILN_STATUS(KILN_STATUS_INVALID_ARGUMENT,
                         "%s: extra field 0x%04x at %" PRIu64 " (%u bytes) runs past its record at %" PRIu64,
                         who, id, pos, len, end);
    }
    if (id == EXTRA_ID_ZIP64 && !found) {
      found = true;
      uint64_t want = 8u * (need.uncompressed + need.compressed + need.offset) + 4u * need.disk;
      if (len < want) {
        return KILN_STATUS(KILN_STATUS_INVALID_ARGUMENT,
                           "%s: zip64 extra field at %" PRIu64 " has %u bytes; the record defers %" PRIu64
                           " bytes of sizes and offsets to it",
                           who, pos, len, want);
      }
      const uint8_t *p = f + body;
      /* APPNOTE 4.5.3: only the deferred values are present, in this order. */
      if (need.uncompressed) {
        *uncompressed = rd64(p);
        p += 8;
      }
      if (need.compressed) {
        *compressed = rd64(p);
        p += 8;
      }
      if (need.offset) {
        *offset = rd64(p);
        p += 8;
      }
      if (need.disk) *disk = rd32(p);
    }
    pos = body + len;
  }
  if (!found && (need.uncompressed || need.compressed || need.offset || need.disk)) {
    return KILN_STATUS(KILN_STATUS_INVALID_ARGUMENT,
                       "%s: sizes or offset are 0xFFFFFFFF but the record has no zip64 extra field", who);
  }
  return NULL;
}

static int compare_entry_offsets(const void *a, const void *b) {
  const kiln_vmfb_archive_entry_t *x = *(const kiln_vmfb_archive_entry_t *const *)a;
  const kiln_vmfb_archive_entry_t *y = *(const kiln_vmfb_archive_entry_t *const *)b;
  return x->header_offset < y->header_offset ? -1 : x->header_offset > y->header_offset;
}

static int compare_entry_names(const void *a, const void *b) {
  const kiln_vmfb_archive_entry_t *x = *(const kiln_vmfb_archive_entry_t *const *)a;
  const kiln_vmfb_archive_entry_t *y = *(const kiln_vmfb_archive_entry_t *const *)b;
  size_t n = x->name_length < y->name_length ? x->name_length : y->name_length;
  int c = memcmp(x->name, y->name, n);
  return c ? c : (x->name_length > y->name_length) - (x->name_length < y->name_length);
}

/* Reads directory record `index` at `pos` (inside the directory, which ends at
 * dir_end) into `entry`, copying its name to *names. Sets *out_len. */
static KILN_MUST_USE kiln_status_t read_entry(const kiln_vmfb_archive_t *a, const directory_t *dir,
                                              size_t index, uint64_t pos, char **names,
                                              kiln_vmfb_archive_entry_t *entry, uint64_t *out_len) {
  const uint8_t *f = a->file;
  uint64_t size = a->file_size, dir_end = dir->offset + dir->size;
  if (dir_end - pos < CENTRAL_HEADER_SIZE) {
    return KILN_STATUS(KILN_STATUS_INVALID_ARGUMENT,
                       "zip central directory entry %zu at %" PRIu64
                       ": its %d-byte record runs past the end of the directory at %" PRIu64,
                       index, pos, CENTRAL_HEADER_SIZE, dir_end);
  }
  const uint8_t *r = f + pos;
  if (rd32(r) != CENTRAL_SIG) {
    return KILN_STATUS(KILN_STATUS_INVALID_ARGUMENT,
                       "zip central directory entry %zu at %" PRIu64 ": signature 0x%08" PRIx32
                       ", expected 0x%08" PRIx32 "; the directory is corrupt or its count is wrong",
                       index, pos, rd32(r), CENTRAL_SIG);
  }
  uint16_t flags = rd16(r + 8), method = rd16(r + 10);
  uint32_t crc = rd32(r + 16);
  uint64_t compressed = rd32(r + 20), uncompressed = rd32(r + 24);
  uint16_t name_len = rd16(r + 28), extra_len = rd16(r + 30), comment_len = rd16(r + 32);
  uint32_t disk = rd16(r + 34);
  uint64_t header = rd32(r + 42);
  uint64_t record_len = (uint64_t)CENTRAL_HEADER_SIZE + name_len + extra_len + comment_len;
  if (record_len > dir_end - pos) {
    return KILN_STATUS(KILN_STATUS_INVALID_ARGUMENT,
                       "zip central directory entry %zu at %" PRIu64 ": its %" PRIu64
                       "-byte record (name %u, extra %u, comment %u bytes) runs past the end of the "
                       "directory at %" PRIu64,
                       index, pos, record_len, name_len, extra_len, comment_len, dir_end);
  }
  const uint8_t *name = r + CENTRAL_HEADER_SIZE;
  quoted_t q;
  if (name_len == 0) {
    return KILN_STATUS(KILN_STATUS_INVALID_ARGUMENT,
                       "zip central directory entry %zu at %" PRIu64 ": empty name", index, pos);
  }
  if (name_len > KILN_VMFB_ARCHIVE_NAME_MAX) {
    return KILN_STATUS(KILN_STATUS_INVALID_ARGUMENT,
                       "zip central directory entry %zu (%s): its name is %u bytes, over the limit of %u",
                       index, quote(&q, name, name_len), name_len, KILN_VMFB_ARCHIVE_NAME_MAX);
  }
  const uint8_t *nul = memchr(name, 0, name_len);
  if (nul) {
    return KILN_STATUS(KILN_STATUS_INVALID_ARGUMENT,
                       "zip central directory entry %zu (%s): its name holds a NUL byte at %td", index,
                       quote(&q, name, name_len), nul - name);
  }
  char who[sizeof q.s + 64];
  snprintf(who, sizeof who, "zip central directory entry %zu (%s)", index, quote(&q, name, name_len));

  zip64_need_t need = {uncompressed == UINT32_MAX, compressed == UINT32_MAX, header == UINT32_MAX,
                       disk == UINT16_MAX};
  KILN_RETURN_IF_ERROR(read_zip64_field(f, pos + CENTRAL_HEADER_SIZE + name_len, extra_len, need, who,
                                        &uncompressed, &compressed, &header, &disk));
  if (disk != 0) {
    return KILN_STATUS(KILN_STATUS_INVALID_ARGUMENT,
                       "%s: starts on disk %" PRIu32 "; multi-disk archives are not supported", who, disk);
  }
  if (!range_within(header, LOCAL_HEADER_SIZE, size)) {
    return KILN_STATUS(KILN_STATUS_INVALID_ARGUMENT,
                       "%s: its local header at %" PRIu64 " is past the end of the file (%" PRIu64 " bytes)",
                       who, header, size);
  }
  const uint8_t *l = f + header;
  if (rd32(l) != LOCAL_SIG) {
    return KILN_STATUS(KILN_STATUS_INVALID_ARGUMENT,
                       "%s: no local header signature at %" PRIu64 " (found 0x%08" PRIx32 ")", who, header,
                       rd32(l));
  }
  uint16_t local_method = rd16(l + 8), local_name_len = rd16(l + 26), local_extra_len = rd16(l + 28);
  uint64_t data = header + LOCAL_HEADER_SIZE + local_name_len + local_extra_len;
  if (data > size) {
    return KILN_STATUS(KILN_STATUS_INVALID_ARGUMENT,
                       "%s: the local header at %" PRIu64 " ends at %" PRIu64
                       ", past the end of the file (%" PRIu64 " bytes)",
                       who, header, data, size);
  }
  if (local_name_len != name_len || memcmp(l + LOCAL_HEADER_SIZE, name, name_len) != 0) {
    quoted_t lq;
    return KILN_STATUS(KILN_STATUS_INVALID_ARGUMENT, "%s: the local header at %" PRIu64 " names %s instead",
                       who, header, quote(&lq, l + LOCAL_HEADER_SIZE, local_name_len));
  }
  if (local_method != method) {
    return KILN_STATUS(KILN_STATUS_INVALID_ARGUMENT,
                       "%s: compression method %u in the directory but %u in the local header at %" PRIu64,
                       who, method, local_method, header);
  }
  uint64_t data_end;
  if (!add_u64(data, compressed, &data_end) || data_end > size) {
    return KILN_STATUS(KILN_STATUS_INVALID_ARGUMENT,
                       "%s: data ends at %" PRIu64 ", past the end of the file (%" PRIu64 " bytes)", who,
                       data + compressed < data ? UINT64_MAX : data + compressed, size);
  }
  if (data_end > dir->offset) {
    return KILN_STATUS(KILN_STATUS_INVALID_ARGUMENT,
                       "%s: data [%" PRIu64 ", %" PRIu64 ") runs into the central directory at %" PRIu64, who,
                       data, data_end, dir->offset);
  }
  bool stored = method == 0 && !(flags & FLAG_ENCRYPTED);
  if (stored && uncompressed != compressed) {
    return KILN_STATUS(KILN_STATUS_INVALID_ARGUMENT,
                       "%s: a stored entry with compressed size %" PRIu64 " but uncompressed size %" PRIu64,
                       who, compressed, uncompressed);
  }
  memcpy(*names, name, name_len);
  (*names)[name_len] = '\0';
  entry->name = *names;
  entry->name_length = name_len;
  *names += name_len + 1;
  entry->header_offset = header;
  entry->data_offset = data;
  entry->size = compressed;
  entry->uncompressed_size = uncompressed;
  entry->method = method;
  entry->flags = flags;
  entry->crc32 = crc;
  entry->stored = stored;
  entry->crc = stored ? KILN_VMFB_ARCHIVE_CRC_UNCHECKED : KILN_VMFB_ARCHIVE_CRC_COMPRESSED;
  *out_len = record_len;
  return NULL;
}

static KILN_MUST_USE kiln_status_t parse_zip(kiln_vmfb_archive_t *a, uint32_t flags) {
  directory_t dir = {0};
  KILN_RETURN_IF_ERROR(find_directory(a, &dir));
  size_t count = (size_t)dir.count;
  /* Bounded: count <= dir.size / 46 and dir.size <= file size. Each name and its
   * NUL fit in its 46-byte record, so dir.size bytes hold all names. */
  a->entries = kiln_calloc(count ? count : 1, sizeof *a->entries);
  a->name_storage = kiln_malloc(dir.size ? (size_t)dir.size : 1);
  char *names = a->name_storage;
  uint64_t pos = dir.offset;
  for (size_t i = 0; i < count; i++) {
    uint64_t len = 0;
    KILN_RETURN_IF_ERROR(read_entry(a, &dir, i, pos, &names, &a->entries[i], &len));
    a->entry_count = i + 1;
    pos += len;
  }
  if (pos != dir.offset + dir.size) {
    return KILN_STATUS(KILN_STATUS_INVALID_ARGUMENT,
                       "zip central directory at %" PRIu64 " is %" PRIu64
                       " bytes but its %zu entries take %" PRIu64 "; the entry count or the size is wrong",
                       dir.offset, dir.size, count, pos - dir.offset);
  }

  kiln_status_t status = NULL;
  const kiln_vmfb_archive_entry_t **order = kiln_malloc((count ? count : 1) * sizeof *order);
  for (size_t i = 0; i < count; i++) order[i] = &a->entries[i];
  qsort(order, count, sizeof *order, compare_entry_offsets);
  for (size_t i = 1; !status && i < count; i++) {
    const kiln_vmfb_archive_entry_t *x = order[i - 1], *y = order[i];
    if (y->header_offset < x->data_offset + x->size) {
      quoted_t qx, qy;
      status = KILN_STATUS(KILN_STATUS_INVALID_ARGUMENT,
                           "zip central directory entries %td (%s, header %" PRIu64 ", data ends at %" PRIu64
                           ") and %td (%s, header %" PRIu64 ") overlap",
                           x - a->entries, quote(&qx, x->name, x->name_length), x->header_offset,
                           x->data_offset + x->size, y - a->entries, quote(&qy, y->name, y->name_length),
                           y->header_offset);
    }
  }
  const kiln_vmfb_archive_entry_t *module = count && order[0]->header_offset == 0 ? order[0] : NULL;
  if (!status) {
    qsort(order, count, sizeof *order, compare_entry_names);
    for (size_t i = 1; !status && i < count; i++) {
      if (compare_entry_names(&order[i - 1], &order[i]) == 0) {
        quoted_t q;
        status = KILN_STATUS(KILN_STATUS_INVALID_ARGUMENT,
                             "zip central directory entries %td and %td are both named %s",
                             order[i - 1] - a->entries, order[i] - a->entries,
                             quote(&q, order[i]->name, order[i]->name_length));
      }
    }
  }
  kiln_free(order);
  KILN_RETURN_IF_ERROR(status);

  if (!module) {
    return KILN_STATUS(KILN_STATUS_INVALID_ARGUMENT,
                       "zip layout: none of the %zu central directory entries is the local header at "
                       "offset 0, where the runtime reads the FlatBuffer",
                       count);
  }
  if (!module->stored) {
    quoted_t q;
    return KILN_STATUS(KILN_STATUS_INVALID_ARGUMENT,
                       "zip layout: the module entry %s is %s (method %u); the runtime reads the "
                       "FlatBuffer in place, so it must be stored",
                       quote(&q, module->name, module->name_length),
                       module->flags & FLAG_ENCRYPTED ? "encrypted" : "compressed", module->method);
  }
  a->module_entry = (size_t)(module - a->entries);
  KILN_RETURN_IF_ERROR(locate_flatbuffer(a, module->data_offset));

  if (flags & KILN_VMFB_ARCHIVE_VERIFY_CRC) {
    for (size_t i = 0; i < count; i++) {
      kiln_vmfb_archive_entry_t *e = &a->entries[i];
      if (!e->stored) continue;
      uint32_t crc = crc32_of(0, a->file + e->data_offset, e->size);
      e->crc = crc == e->crc32 ? KILN_VMFB_ARCHIVE_CRC_OK : KILN_VMFB_ARCHIVE_CRC_MISMATCH;
    }
  }
  return NULL;
}

kiln_status_t kiln_vmfb_archive_parse(const void *file, size_t size, uint32_t flags,
                                      kiln_vmfb_archive_t *out_archive) {
  if (!out_archive) return KILN_STATUS(KILN_STATUS_INVALID_ARGUMENT, "vmfb archive: no output archive");
  memset(out_archive, 0, sizeof *out_archive);
  if (!file && size)
    return KILN_STATUS(KILN_STATUS_INVALID_ARGUMENT, "vmfb archive: NULL file of %zu bytes", size);
  if (flags & ~(uint32_t)KILN_VMFB_ARCHIVE_VERIFY_CRC) {
    return KILN_STATUS(KILN_STATUS_INVALID_ARGUMENT, "vmfb archive: unknown parse flags 0x%" PRIx32, flags);
  }
  kiln_vmfb_archive_t a = {0};
  a.file = file;
  a.file_size = size;
  kiln_status_t status;
  if (size >= 4 && rd32(a.file) == LOCAL_SIG) {
    a.layout = KILN_VMFB_ARCHIVE_LAYOUT_ZIP;
    status = parse_zip(&a, flags);
  } else {
    a.layout = KILN_VMFB_ARCHIVE_LAYOUT_FLAT;
    status = locate_flatbuffer(&a, 0);
  }
  if (status) {
    kiln_vmfb_archive_deinit(&a);
    return status;
  }
  *out_archive = a;
  return NULL;
}

void kiln_vmfb_archive_deinit(kiln_vmfb_archive_t *archive) {
  if (!archive) return;
  kiln_free(archive->entries);
  kiln_free(archive->name_storage);
  memset(archive, 0, sizeof *archive);
}

ptrdiff_t kiln_vmfb_archive_entry_find(const kiln_vmfb_archive_t *archive, const char *name) {
  if (!archive || !name) return -1;
  size_t len = strlen(name);
  for (size_t i = 0; i < archive->entry_count; i++) {
    const kiln_vmfb_archive_entry_t *e = &archive->entries[i];
    if (e->name_length == len && memcmp(e->name, name, len) == 0) return (ptrdiff_t)i;
  }
  return -1;
}

kiln_status_t kiln_vmfb_archive_entry_verify(const kiln_vmfb_archive_t *archive, size_t index) {
  if (!archive || index >= archive->entry_count) {
    return KILN_STATUS(KILN_STATUS_OUT_OF_RANGE, "vmfb archive: no zip entry %zu (the archive has %zu)",
                       index, archive ? archive->entry_count : 0);
  }
  const kiln_vmfb_archive_entry_t *e = &archive->entries[index];
  quoted_t q;
  if (!e->stored) {
    return KILN_STATUS(KILN_STATUS_UNIMPLEMENTED,
                       "zip entry %zu (%s) is %s (method %u); kiln checks only stored entries", index,
                       quote(&q, e->name, e->name_length),
                       e->flags & FLAG_ENCRYPTED ? "encrypted" : "compressed", e->method);
  }
  uint32_t crc = crc32_of(0, archive->file + e->data_offset, e->size);
  if (crc != e->crc32) {
    return KILN_STATUS(KILN_STATUS_DATA_LOSS,
                       "zip entry %zu (%s): the CRC-32 of its data [%" PRIu64 ", %" PRIu64 ") is 0x%08" PRIx32
                       " but the directory records 0x%08" PRIx32 "; the file is corrupt",
                       index, quote(&q, e->name, e->name_length), e->data_offset, e->data_offset + e->size,
                       crc, e->crc32);
  }
  return NULL;
}

kiln_status_t kiln_vmfb_archive_rodata_resolve(const kiln_vmfb_archive_t *archive, uint64_t offset,
                                               uint64_t length, const uint8_t **out_data) {
  if (!archive || !out_data) {
    return KILN_STATUS(KILN_STATUS_INVALID_ARGUMENT,
                       "vmfb archive: rodata_resolve needs an archive and out_data");
  }
  uint64_t start;
  if (!add_u64(archive->rodata_base, offset, &start) || !range_within(start, length, archive->file_size)) {
    return KILN_STATUS(KILN_STATUS_OUT_OF_RANGE,
                       "vmfb rodata: external data at offset %" PRIu64 " (%" PRIu64
                       " bytes) from the rodata base %" PRIu64 " ends past the end of the file (%zu bytes)",
                       offset, length, archive->rodata_base, archive->file_size);
  }
  *out_data = archive->file + start;
  return NULL;
}
