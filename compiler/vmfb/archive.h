/* The VMFB file container: IREE's "polyglot zip" and flat layouts, written and read.
 *
 * A VMFB is a size-prefixed FlatBuffer (BytecodeModuleDef: [u32 length][u32 root]
 * ["IREE"]...) followed by external rodata segments (HAL executables, large
 * constants). The FlatBuffer stores each external segment's position as
 * external_data_offset, relative to the rodata base:
 *
 *     rodata base = align64(file offset of the size prefix + 4 + prefix value)
 *
 * which is exactly how IREE's runtime computes it
 * (iree_vm_bytecode_archive_parse_header).
 *
 * ZIP layout (IREE's default; a valid zip64 file of STORED entries that unzip and
 * Python's zipfile list, test and extract; everything little-endian):
 *   0      local header "module.fb" (30 + 9 bytes, then extra fields: a 0xCAFE
 *          padding field of 1 byte and the zip64 sizes field, 4 + 1 + 20 bytes)
 *   64     the size-prefixed FlatBuffer (u32 size prefix; "IREE" at 72 when the
 *          FlatBuffer carries the identifier), then zeros up to the rodata base;
 *          the module.fb entry covers both, so no byte of the file is outside an
 *          entry
 *   base   = align64(64 + FlatBuffer size). For each segment in order: a local
 *          header starting where the previous entry's data ended, whose 0xCAFE
 *          extra field pads it so the data starts aligned (absolute file offset)
 *   ...    then each extra entry the same way
 *   ...    central directory (one zip64 record per entry, in file order), zip64
 *          end of central directory record, zip64 locator, end of central
 *          directory record (22 bytes, no comment) ending the file
 * Every timestamp is 1980-01-01 00:00 (DOS date 0x21, time 0) and every byte is a
 * function of the inputs: the same inputs give the same file on any host.
 *
 * Flat layout: the size-prefixed FlatBuffer at offset 0 ("IREE" at 8..11), zeros up
 * to base = align64(FlatBuffer size), then each segment at its alignment (zeros
 * between). No names and no extra entries: there is nowhere to keep them.
 *
 * Building a VMFB (the FlatBuffer holds the offsets, and its size moves the base):
 *   1. Put every external_data_offset/length into the FlatBuffer as a u64 field
 *      with a placeholder (e.g. UINT64_MAX) that is written even when it would be
 *      the default, so the value never changes the FlatBuffer's size.
 *   2. Finish the FlatBuffer once to learn its size (or know it exactly), call
 *      kiln_vmfb_archive_plan with that size, and patch/rebuild with the offsets.
 *   3. Call kiln_vmfb_archive_write with the final FlatBuffer and the same offsets:
 *      it recomputes the layout and fails with FAILED_PRECONDITION if any
 *      segment would not land at the offset the FlatBuffer claims, so a FlatBuffer
 *      whose size changed after planning is caught, never written.
 *   With 64-byte alignments the relative offsets do not depend on the FlatBuffer's
 *   size at all (the base is 64-aligned and each header starts at the base or
 *   after the previous segment); larger alignments are absolute file positions
 *   and so depend on the base.
 *
 * Reading: kiln_vmfb_archive_parse takes a whole file in memory and bounds-checks
 * everything against it: a hostile file gets an INVALID_ARGUMENT naming the
 * structure and the offset, never a crash, a hang, or an allocation beyond a
 * small multiple of the file's own size (the entry count is capped and bounded
 * by the central directory's size).
 *
 * Thread-safe: every function works only on its arguments; a parsed archive is
 * read-only and may be shared between threads once parse has returned.
 */
#ifndef KILN_COMPILER_VMFB_ARCHIVE_H_
#define KILN_COMPILER_VMFB_ARCHIVE_H_

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "base/buf.h"
#include "base/status.h"

/* IREE_VM_ARCHIVE_SEGMENT_ALIGNMENT: the writer aligns the FlatBuffer, the rodata
 * base and every entry's data to at least this (the reader requires it of none). */
#define KILN_VMFB_ARCHIVE_ALIGNMENT 64u
/* The largest segment alignment: the padding before aligned data lives in one zip
 * extra field, whose length is a u16. */
#define KILN_VMFB_ARCHIVE_MAX_ALIGNMENT 32768u
/* The longest entry name written or read, in bytes. */
#define KILN_VMFB_ARCHIVE_NAME_MAX 1024u
/* The most entries (module.fb included) written or read. */
#define KILN_VMFB_ARCHIVE_MAX_ENTRIES 65535u
/* The name of the first zip entry, the FlatBuffer's. */
#define KILN_VMFB_ARCHIVE_MODULE_NAME "module.fb"

typedef enum kiln_vmfb_archive_layout_e {
  KILN_VMFB_ARCHIVE_LAYOUT_ZIP = 1,  /* polyglot zip64 (IREE's default) */
  KILN_VMFB_ARCHIVE_LAYOUT_FLAT = 2, /* bare FlatBuffer + rodata */
} kiln_vmfb_archive_layout_t;

/* One file to place after the FlatBuffer: an external rodata segment or an extra
 * entry. Everything is borrowed for the duration of the call. */
typedef struct kiln_vmfb_archive_file_s {
  /* The zip entry name: 1..KILN_VMFB_ARCHIVE_NAME_MAX printable ASCII bytes, no
   * backslash, no leading '/', no ".." component, unique in the archive and not
   * "module.fb" ("_sm_89.bin", "kiln/source.mlir.zst"). Ignored (may be NULL) for
   * segments in the flat layout. */
  const char *name;
  /* The bytes: `size` of them. May be NULL for kiln_vmfb_archive_plan. */
  const void *data;
  uint64_t size;
  /* Power of two up to KILN_VMFB_ARCHIVE_MAX_ALIGNMENT; 0 means 64, and anything
   * below 64 is raised to 64. The data's absolute file offset is a multiple. */
  uint32_t alignment;
} kiln_vmfb_archive_file_t;

/* What goes into one VMFB file. Borrowed by every call that takes it. */
typedef struct kiln_vmfb_archive_contents_s {
  kiln_vmfb_archive_layout_t layout;
  /* The size-prefixed FlatBuffer: flatbuffer_size bytes, whose u32 little-endian
   * prefix must be flatbuffer_size - 4. At least 12 bytes (a root offset, an
   * identifier and a table), at most 4 GiB + 3.
   * `flatbuffer` may be NULL for kiln_vmfb_archive_plan. */
  const void *flatbuffer;
  uint64_t flatbuffer_size;
  /* External rodata segments, in file order; their offsets are what the
   * FlatBuffer's external_data_offset fields hold. */
  const kiln_vmfb_archive_file_t *segments;
  size_t segment_count;
  /* Extra zip entries after the segments (ZIP only; the runtime ignores them). */
  const kiln_vmfb_archive_file_t *extras;
  size_t extra_count;
} kiln_vmfb_archive_contents_t;

/* Where things land in the file. */
typedef struct kiln_vmfb_archive_plan_s {
  uint64_t flatbuffer_offset; /* of the size prefix: 64 (ZIP) or 0 (FLAT) */
  uint64_t rodata_base;       /* align64(flatbuffer_offset + flatbuffer_size) */
  uint64_t file_size;         /* of the whole file */
} kiln_vmfb_archive_plan_t;

/* Lays out `contents` (data pointers unused) without writing anything.
 * `out_segment_offsets` (segment_count entries; may be NULL when segment_count is
 * 0) receives each segment's data offset relative to the rodata base: the value
 * for its external_data_offset. `out_plan` may be NULL. Both are written only on
 * success.
 * Errors: INVALID_ARGUMENT naming the bad field (layout, FlatBuffer size, a
 * segment's name or alignment, extras in the flat layout, too many entries),
 * OUT_OF_RANGE when the file would not fit in 64 bits / size_t. Thread-safe. */
KILN_MUST_USE kiln_status_t kiln_vmfb_archive_plan(const kiln_vmfb_archive_contents_t *contents,
                                                   kiln_vmfb_archive_plan_t *out_plan,
                                                   uint64_t *out_segment_offsets);

/* Writes the whole file for `contents` into `out` (an initialized buffer; it is
 * cleared first and holds the file from offset 0 on success, nothing on failure).
 * `expected_segment_offsets` (segment_count entries, or NULL to skip the check)
 * are the offsets the FlatBuffer holds, normally kiln_vmfb_archive_plan's output.
 * Errors: as kiln_vmfb_archive_plan; INVALID_ARGUMENT when a data pointer is NULL
 * with a nonzero size or the FlatBuffer's size prefix is not flatbuffer_size - 4;
 * FAILED_PRECONDITION when a segment would land elsewhere than its expected
 * offset (the FlatBuffer changed size after planning: plan again). Thread-safe
 * (distinct buffers). */
KILN_MUST_USE kiln_status_t kiln_vmfb_archive_write(const kiln_vmfb_archive_contents_t *contents,
                                                    const uint64_t *expected_segment_offsets,
                                                    kiln_buf_t *out);

/* ---- reading ---- */

typedef enum kiln_vmfb_archive_crc_e {
  KILN_VMFB_ARCHIVE_CRC_UNCHECKED = 0, /* parsed without KILN_VMFB_ARCHIVE_VERIFY_CRC */
  KILN_VMFB_ARCHIVE_CRC_OK = 1,
  KILN_VMFB_ARCHIVE_CRC_MISMATCH = 2,
  KILN_VMFB_ARCHIVE_CRC_COMPRESSED = 3, /* not stored: not inflated, not checked */
} kiln_vmfb_archive_crc_t;

/* One zip entry, from the central directory (cross-checked with its local
 * header). All offsets are file offsets and every range lies inside the file. */
typedef struct kiln_vmfb_archive_entry_s {
  const char *name;       /* NUL-terminated; owned by the archive; no NUL inside */
  size_t name_length;     /* bytes, without the NUL */
  uint64_t header_offset; /* of the local file header */
  uint64_t data_offset;   /* first byte of the (possibly compressed) data */
  uint64_t size;          /* bytes of data in the file (compressed size) */
  uint64_t uncompressed_size;
  uint16_t method;             /* zip compression method: 0 = stored, 8 = deflate, 93 = zstd */
  uint16_t flags;              /* zip general purpose flags (bit 0: encrypted) */
  uint32_t crc32;              /* as recorded in the central directory */
  bool stored;                 /* method 0 and not encrypted: the data is the content */
  kiln_vmfb_archive_crc_t crc; /* see KILN_VMFB_ARCHIVE_VERIFY_CRC */
} kiln_vmfb_archive_entry_t;

/* A parsed file. Embedded lifecycle: kiln_vmfb_archive_parse fills it,
 * kiln_vmfb_archive_deinit frees what it owns. It borrows the file's bytes: they
 * must outlive it and not change. Read-only after parse: thread-safe to share. */
typedef struct kiln_vmfb_archive_s {
  kiln_vmfb_archive_layout_t layout;
  const uint8_t *file; /* borrowed: the bytes given to parse */
  size_t file_size;
  /* The size-prefixed FlatBuffer (pointer into `file`): 4 + prefix bytes starting
   * at flatbuffer_offset, all inside the file. */
  const uint8_t *flatbuffer;
  size_t flatbuffer_size;
  uint64_t flatbuffer_offset;
  /* True when bytes 4..7 after the size prefix are "IREE" (the identifier
   * BytecodeModuleDef carries); the archive does not require it. */
  bool has_iree_identifier;
  /* align64(flatbuffer_offset + flatbuffer_size), as the runtime computes it. May
   * exceed file_size when there is no external rodata (e.g. flat files that end
   * with the FlatBuffer). */
  uint64_t rodata_base;
  /* ZIP: every central directory entry, in directory order; entries[i] with
   * header_offset 0 is the module's. FLAT: none. Owned. */
  kiln_vmfb_archive_entry_t *entries;
  size_t entry_count;
  /* ZIP: the index of the entry whose local header is at offset 0. */
  size_t module_entry;
  char *name_storage; /* owned: the block the entry names point into */
} kiln_vmfb_archive_t;

/* Flags for kiln_vmfb_archive_parse. */
enum {
  /* Compute the CRC-32 of every stored entry and record the outcome in
   * entry.crc (a mismatch is reported there, not as a parse failure). Costs one
   * pass over the file. */
  KILN_VMFB_ARCHIVE_VERIFY_CRC = 1u << 0,
};

/* Parses `size` bytes at `file` (borrowed; must stay valid and unchanged while
 * the archive is used). The layout is ZIP when the file starts with a zip local
 * file header signature ("PK\3\4", as the runtime decides), FLAT otherwise.
 * `flags`: KILN_VMFB_ARCHIVE_VERIFY_CRC or 0. `out_archive` is cleared on entry
 * and filled only on success; release it with kiln_vmfb_archive_deinit.
 * Errors: INVALID_ARGUMENT with the problem and its file offset: a file too short
 * for a FlatBuffer, a size prefix past the end of the file, no end of central
 * directory record in the last 64 KiB + 22 bytes, a broken zip64 locator or
 * record, multi-disk archives, a central directory outside the file or whose
 * entry count cannot fit in it or exceeds KILN_VMFB_ARCHIVE_MAX_ENTRIES, a record
 * with a bad signature, a name that is empty, too long or holds a NUL, duplicate
 * names, a missing zip64 field, a local header that is outside the file or
 * disagrees with its directory record (signature, name, method), data past the
 * end of the file or into the central directory, overlapping entries, no entry
 * for the local header at offset 0, or a compressed/encrypted module entry.
 * Compressed entries other than the module's are reported (stored == false),
 * never inflated. Thread-safe. */
KILN_MUST_USE kiln_status_t kiln_vmfb_archive_parse(const void *file, size_t size, uint32_t flags,
                                                    kiln_vmfb_archive_t *out_archive);

/* Frees what the archive owns (not the file) and clears it; idempotent; a cleared
 * (zeroed) archive is fine. */
void kiln_vmfb_archive_deinit(kiln_vmfb_archive_t *archive);

/* The index of the entry named `name` (NUL-terminated, borrowed), or -1 when
 * there is none (always -1 for the flat layout). Thread-safe. */
ptrdiff_t kiln_vmfb_archive_entry_find(const kiln_vmfb_archive_t *archive, const char *name);

/* Computes the CRC-32 of entry `index` now and compares it with its directory
 * record. Errors: OUT_OF_RANGE for a bad index; UNIMPLEMENTED for an entry that
 * is not stored (compressed or encrypted: kiln does not inflate); DATA_LOSS
 * naming the entry, both CRCs and the data's range when they differ.
 * Thread-safe. */
KILN_MUST_USE kiln_status_t kiln_vmfb_archive_entry_verify(const kiln_vmfb_archive_t *archive, size_t index);

/* Resolves an external rodata segment (external_data_offset, external_data_length
 * from the FlatBuffer) to its bytes: *out_data = file + rodata_base + offset.
 * Errors: OUT_OF_RANGE when the range overflows or ends past the end of the file,
 * with both numbers. `out_data` is written only on success. Thread-safe. */
KILN_MUST_USE kiln_status_t kiln_vmfb_archive_rodata_resolve(const kiln_vmfb_archive_t *archive,
                                                             uint64_t offset, uint64_t length,
                                                             const uint8_t **out_data);

#endif /* KILN_COMPILER_VMFB_ARCHIVE_H_ */
