/* Moving bytes between files and kilnd: hashing a source, uploading it with
 * PutSource in chunks, downloading an artifact with GetArtifact (verified against
 * its SHA-256, written atomically, resumable), and writing small files atomically.
 *
 * Atomic means: written to a temporary file beside the destination, flushed to
 * disk, then renamed over it, so a reader (or a crash) sees the old file or the
 * whole new one, never a torn one. A download's temporary file is named after the
 * artifact's digest ("<path>.kiln-<12 hex>.part") and is kept when the transfer is
 * interrupted, so the next download of the same artifact to the same path resumes
 * from where it stopped (GetArtifact offset); its bytes are only trusted after the
 * whole file hashes to the digest. Single-threaded (uses the client's queue).
 */
#ifndef KILN_CLIENT_TRANSFER_H
#define KILN_CLIENT_TRANSFER_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "base/digest.h"
#include "base/status.h"
#include "client/rpc.h"
#include "kiln/v1/kiln.pb-c.h"

/* A local file's error from its errno, as KILN_STATUS_ERRNO makes it, except
 * that a refused permission (EACCES, EPERM, EROFS) is FAILED_PRECONDITION: for
 * the CLI, PERMISSION_DENIED means kilnd refused the call (exit 9, and advice
 * about tokens), which a read-only output folder is not. Every file error the
 * client makes goes through it. */
KILN_MUST_USE kiln_status_t kiln_cli_local_error_at(int err, const char *file, int line, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));
#define KILN_CLI_LOCAL_ERRNO(err, ...) kiln_cli_local_error_at((err), __FILE__, __LINE__, __VA_ARGS__)

/* SHA-256 and size of everything `f` yields from its current position to the end.
 * Leaves `f` at its end. INTERNAL-class status from errno on a read error. */
KILN_MUST_USE kiln_status_t kiln_cli_stream_digest(FILE *f, const char *name, kiln_digest_hex_t *out_hex,
                                                   uint64_t *out_size);

/* The digest of the file at `path`: NOT_FOUND / PERMISSION_DENIED / ... naming it. */
KILN_MUST_USE kiln_status_t kiln_cli_file_digest(const char *path, kiln_digest_hex_t *out_hex,
                                                 uint64_t *out_size);

/* Reads all of `f` (at most `max_bytes`; more is RESOURCE_EXHAUSTED naming `name`).
 * *out_data (kiln_malloc'd, one spare NUL byte after the data) belongs to the
 * caller. */
KILN_MUST_USE kiln_status_t kiln_cli_read_all(FILE *f, const char *name, uint64_t max_bytes,
                                              uint8_t **out_data, size_t *out_len);

/* Uploads `size` bytes read from `f` (from its current position) as a source with
 * `digest` (hex), in data chunks of at most `chunk_bytes`, naming it `name` for
 * diagnostics. On OK *out_response (owned by the caller) says whether kilnd
 * already had it. Failures are kilnd's status (INVALID_ARGUMENT carries the
 * source's diagnostics, from `kiln-diagnostics-bin`, appended to its message as
 * FILE:LINE:COL lines) or the read error. */
KILN_MUST_USE kiln_status_t kiln_cli_source_upload(kiln_client_t *client, FILE *f, const char *digest,
                                                   uint64_t size, uint64_t chunk_bytes, const char *name,
                                                   Kiln__V1__PutSourceResponse **out_response);

/* What to download: by `digest`, or (digest NULL) by key: source digest, target
 * name, flags. Borrowed strings. */
typedef struct kiln_cli_artifact_ref_s {
  const char *digest;
  const char *source_digest;
  const char *target;
  const char *const *flags;
  size_t n_flags;
} kiln_cli_artifact_ref_t;

/* Downloads one artifact to `path` (NULL: "<digest>.vmfb" when fetched by digest,
 * "<canonical target>.vmfb" by key, in the current directory). Retries an
 * interrupted stream (UNAVAILABLE) from where it stopped, twice; restarts from
 * byte 0 once when a resumed file does not hash right. On OK: *out_metadata (the
 * artifact's metadata chunk) and *out_path (the file written) belong to the
 * caller; *out_resumed_from is the offset a leftover partial file let it start at
 * (0 when none). Errors: kilnd's status (NOT_FOUND, INVALID_ARGUMENT, ...),
 * DATA_LOSS when the bytes do not match the digest (the partial file is removed),
 * or the file system's error naming the path. Either out pointer may be NULL. */
KILN_MUST_USE kiln_status_t kiln_cli_artifact_download(kiln_client_t *client,
                                                       const kiln_cli_artifact_ref_t *ref, const char *path,
                                                       Kiln__V1__ArtifactChunk **out_metadata,
                                                       char **out_path, uint64_t *out_resumed_from);

/* Writes `len` bytes to `path` atomically (temp file beside it, fsync, rename). */
KILN_MUST_USE kiln_status_t kiln_cli_write_atomic(const char *path, const void *data, size_t len);

/* Copies the file `from` to `to` atomically (temp file beside `to`, the kernel's
 * copy_file_range where it can, fsync, rename). Errors name the file. */
KILN_MUST_USE kiln_status_t kiln_cli_copy_atomic(const char *from, const char *to);

/* Keeps the file at `path` as `backup` unless `backup` already exists (the first,
 * oldest one is never overwritten): a hard link, or a copy where the file system
 * has none. `path` itself is left as it is. Errors name the file. */
KILN_MUST_USE kiln_status_t kiln_cli_backup_keep(const char *path, const char *backup);

/* Creates `dir` and any missing parents (mode 0777 before umask); an existing
 * directory is fine, an existing non-directory is FAILED_PRECONDITION. */
KILN_MUST_USE kiln_status_t kiln_cli_mkdirs(const char *dir);

/* A --source argument as a digest: `source` itself when it is a well-formed digest
 * (64 lowercase hex: a source as uploaded, or the digest of its normal form; kilnd
 * takes either), else the digest of the normal form of the file it names
 * (base/mlir_text.h), which is what artifacts carry, so a reformatted copy of a
 * compiled model finds its artifacts. INVALID_ARGUMENT when it is neither (naming
 * both readings), or the file's read error. */
KILN_MUST_USE kiln_status_t kiln_cli_source_resolve(const char *source, kiln_digest_hex_t *out_hex);

/* The partial-download path for `path` and artifact `digest` (hex), kiln_malloc'd. */
char *kiln_cli_part_path(const char *path, const char *digest);

#endif /* KILN_CLIENT_TRANSFER_H */
