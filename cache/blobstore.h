/* The blob store: content-addressed files under one directory.
 *
 * Layout (DIR is the cache directory):
 *   DIR/blobs/<first two hex chars>/<64-hex digest>        stored as is
 *   DIR/blobs/<first two hex chars>/<64-hex digest>.zst    stored zstd-compressed
 *   DIR/tmp/        blobs being written (removed by kiln_blobstore_open)
 *   DIR/quarantine/ blobs that failed verification (kept for post-mortems, never served)
 * A blob's digest is the SHA-256 of its uncompressed content; the file name is the
 * only place that says whether it is compressed. Its check is the XXH3-128 of the
 * same content: writers compute both in one pass and hand the check back; the
 * store keeps no copy of it (the cache records it in its index).
 *
 * Invariants:
 * - A blob file under blobs/ is complete and was fsynced before it got its name:
 *   writers write DIR/tmp/<unique>, fsync it, rename(2) it into place, and fsync the
 *   shard directory. So a crash at any point leaves either no blob or a whole one,
 *   plus tmp files that the next open removes.
 * - Every read verifies: readers hash what they return and report DATA_LOSS at the
 *   end of a blob whose content does not match (and on any decompression error).
 *   A reader given the blob's check hashes with XXH3-128 and compares with that
 *   (six to ten times faster than SHA-256, even in Debian's SSE2 build of xxHash);
 *   one without hashes with SHA-256 and compares with the name, computing the
 *   check on the way. Nothing is read twice.
 * - At most one of <digest> and <digest>.zst exists; a put of a digest that is
 *   already present discards the new copy and succeeds (content addressing makes
 *   them equal).
 *
 * Errors: ENOSPC/EDQUOT -> RESOURCE_EXHAUSTED (the partial tmp file is removed,
 * nothing stored is touched), EACCES/EROFS -> PERMISSION_DENIED, a missing blob ->
 * NOT_FOUND, content that does not match its digest -> DATA_LOSS. Messages name the
 * blob (digest) and the file.
 *
 * Compression (AUTO): the writer keeps the first 64 KiB in memory and compresses
 * them as a sample; when that pays it keeps buffering the blob in memory (at most
 * 8 MiB per writer) and compresses it at commit. A longer blob is spilled raw to its
 * tmp file and compressed from there at commit into a second tmp file. Either way a
 * .zst file is one zstd frame that records the uncompressed size.
 *
 * Thread-safety: a kiln_blobstore_t is thread-safe (it holds only the paths and
 * options); each writer and reader has one owner thread. No lock is held across
 * disk I/O. Only one process may use a directory at a time: open empties tmp/.
 */
#ifndef KILN_CACHE_BLOBSTORE_H
#define KILN_CACHE_BLOBSTORE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "base/digest.h"
#include "base/status.h"

/* A blob's check: the XXH3-128 of its uncompressed content in xxHash's canonical
 * (big-endian) byte order. It detects accidental damage (bit rot, torn or
 * misdirected writes, a bad decompression) as surely as SHA-256 in practice, but
 * it is no proof against someone choosing the bytes: the SHA-256 name stays the
 * content address, and kiln_blobstore_verify checks that. */
#define KILN_BLOB_CHECK_BYTES 16
typedef struct kiln_blob_check_s {
  unsigned char bytes[KILN_BLOB_CHECK_BYTES];
} kiln_blob_check_t;

/* Hex text of a check (32 characters and a NUL). */
#define KILN_BLOB_CHECK_HEX_LEN (2 * KILN_BLOB_CHECK_BYTES)
void kiln_blob_check_to_hex(const kiln_blob_check_t *check, char out_hex[KILN_BLOB_CHECK_HEX_LEN + 1]);
/* The check of `len` bytes (one-shot). */
void kiln_blob_check_of(const void *data, size_t len, kiln_blob_check_t *out_check);

typedef struct kiln_blobstore_s kiln_blobstore_t;
typedef struct kiln_blob_writer_s kiln_blob_writer_t;
typedef struct kiln_blob_reader_s kiln_blob_reader_t;

typedef enum kiln_blob_compression_e {
  KILN_BLOB_COMPRESSION_OFF = 0,  /* always store as is */
  KILN_BLOB_COMPRESSION_AUTO = 1, /* zstd when a sample shows it pays (see below) */
} kiln_blob_compression_t;

typedef struct kiln_blobstore_options_s {
  kiln_blob_compression_t compression;
  /* AUTO: blobs smaller than this are stored as is (default 4096 when 0). */
  size_t compress_min_bytes;
  /* AUTO: compress only when the first 64 KiB compress to at most this fraction of
   * their size (default 0.85 when 0). */
  double compress_max_ratio;
  int zstd_level; /* default 3 when 0 */
} kiln_blobstore_options_t;

/* Opens (creating blobs/, tmp/, quarantine/ as needed) the store rooted at `dir`
 * and removes leftovers in tmp/. `options` may be NULL for defaults. */
KILN_MUST_USE kiln_status_t kiln_blobstore_open(const char *dir, const kiln_blobstore_options_t *options,
                                                kiln_blobstore_t **out_store);
void kiln_blobstore_close(kiln_blobstore_t *store);

/* ---- writing ---- */

/* Starts a blob. If `expected` is non-NULL, commit fails with INVALID_ARGUMENT when
 * the content's digest differs (an upload that does not match its claimed digest). */
KILN_MUST_USE kiln_status_t kiln_blob_writer_begin(kiln_blobstore_t *store, const kiln_digest_t *expected,
                                                   kiln_blob_writer_t **out_writer);
/* Appends `len` bytes (borrowed). Errors: RESOURCE_EXHAUSTED (disk full) and other
 * I/O failures; the tmp file is removed at once and the writer is failed: later
 * writes and commit return the same code, so callers may check only commit. */
KILN_MUST_USE kiln_status_t kiln_blob_writer_write(kiln_blob_writer_t *writer, const void *data, size_t len);
/* Makes the blob durable and visible under its digest, then frees the writer (also
 * on failure). out_digest: the content digest; out_check: the content's check (for
 * a duplicate too: equal content, equal check); out_size: uncompressed bytes;
 * out_stored_size: bytes on disk (of the copy already stored, for a duplicate).
 * Any out-param may be NULL. */
KILN_MUST_USE kiln_status_t kiln_blob_writer_commit(kiln_blob_writer_t *writer, kiln_digest_t *out_digest,
                                                    kiln_blob_check_t *out_check, uint64_t *out_size,
                                                    uint64_t *out_stored_size);
/* Discards a writer that has not been committed; its tmp file is removed. */
void kiln_blob_writer_abort(kiln_blob_writer_t *writer);

/* One-shot put of `len` bytes. Blobs of 1 MiB and more are hashed (SHA-256 and
 * check) on a second thread while they are written. */
KILN_MUST_USE kiln_status_t kiln_blobstore_put(kiln_blobstore_t *store, const void *data, size_t len,
                                               kiln_digest_t *out_digest, uint64_t *out_stored_size);
/* The same, failing with INVALID_ARGUMENT (nothing stored) when the bytes do not
 * hash to `expected` (may be NULL); out_check (may be NULL) gets their check. */
KILN_MUST_USE kiln_status_t kiln_blobstore_put_expected(kiln_blobstore_t *store, const void *data, size_t len,
                                                        const kiln_digest_t *expected,
                                                        kiln_digest_t *out_digest,
                                                        kiln_blob_check_t *out_check,
                                                        uint64_t *out_stored_size);

/* ---- reading ---- */

/* Opens blob `digest` for a verified read. With `check` (borrowed, copied; the
 * blob's check as its writer reported it) the content is verified against the
 * check with XXH3-128; with NULL against the digest with SHA-256, and the check is
 * computed on the way (kiln_blob_reader_check). NOT_FOUND when no such blob;
 * DATA_LOSS when a .zst file has no valid frame header. */
KILN_MUST_USE kiln_status_t kiln_blob_reader_open(kiln_blobstore_t *store, const kiln_digest_t *digest,
                                                  const kiln_blob_check_t *check,
                                                  kiln_blob_reader_t **out_reader);
/* Reads up to `cap` (> 0) bytes of uncompressed content, at most 256 KiB a call
 * (so the check hashes them while they are in the CPU cache; loop for more);
 * *out_len == 0 means the end, at which point the content has been verified;
 * reads after that return 0 again. DATA_LOSS when the content does not match its check or digest (reported
 * by the read that reaches the end; the message names the hash that failed) or
 * cannot be decompressed; a failed reader keeps failing. INVALID_ARGUMENT when
 * cap is 0. */
KILN_MUST_USE kiln_status_t kiln_blob_reader_read(kiln_blob_reader_t *reader, void *buf, size_t cap,
                                                  size_t *out_len);
/* Uncompressed size when stored as is; for compressed blobs the size recorded in the
 * zstd frame header (writers always record it). */
uint64_t kiln_blob_reader_size(const kiln_blob_reader_t *reader);
/* True once the reader has verified the whole content, and then *out_check is
 * the content's check: the one it was opened with, or the one it computed beside
 * SHA-256 (which a caller may record so the next read of the blob is fast). False
 * (and *out_check cleared) before the end or after a failure. */
bool kiln_blob_reader_check(const kiln_blob_reader_t *reader, kiln_blob_check_t *out_check);
void kiln_blob_reader_close(kiln_blob_reader_t *reader);

/* Reads a whole blob, verified by SHA-256, into a kiln_malloc'd buffer owned by
 * the caller. */
KILN_MUST_USE kiln_status_t kiln_blobstore_get(kiln_blobstore_t *store, const kiln_digest_t *digest,
                                               void **out_data, size_t *out_len);

/* ---- maintenance ---- */

/* Whether the blob exists, and its size on disk. */
bool kiln_blobstore_contains(kiln_blobstore_t *store, const kiln_digest_t *digest, uint64_t *out_stored_size);
/* Re-reads the blob and hashes it with SHA-256 (never the fast check: this is the
 * audit that proves the content address): NULL when intact, DATA_LOSS when not,
 * NOT_FOUND. out_check (may be NULL) gets the content's check when intact. */
KILN_MUST_USE kiln_status_t kiln_blobstore_verify(kiln_blobstore_t *store, const kiln_digest_t *digest,
                                                  kiln_blob_check_t *out_check);
/* Moves the blob to quarantine/ (never served again). NOT_FOUND when absent. */
KILN_MUST_USE kiln_status_t kiln_blobstore_quarantine(kiln_blobstore_t *store, const kiln_digest_t *digest);
/* Deletes the blob. NOT_FOUND when absent. */
KILN_MUST_USE kiln_status_t kiln_blobstore_remove(kiln_blobstore_t *store, const kiln_digest_t *digest);

/* Calls `fn` for every blob under blobs/ (any order). Entries that are not a blob
 * (not a regular file named <digest> or <digest>.zst in its own shard, or anything
 * in blobs/ that is not a shard directory) are reported through `fn` with digest
 * NULL and their path, so repair can remove them. `fn` may remove what it is
 * given. Stops early and returns `fn`'s status if it fails. */
typedef kiln_status_t (*kiln_blobstore_visit_fn_t)(void *user, const kiln_digest_t *digest, const char *path,
                                                   uint64_t stored_size);
KILN_MUST_USE kiln_status_t kiln_blobstore_visit(kiln_blobstore_t *store, kiln_blobstore_visit_fn_t fn,
                                                 void *user);

#endif /* KILN_CACHE_BLOBSTORE_H */
