/* kiln's artifact cache: a content-addressed blob store (blobstore.h) indexed in
 * SQLite (index.h), behind one thread-safe object.
 *
 * Guarantees (docs/design/cache.md has the reasoning):
 * - Never serves a bad byte: every read is verified as it streams, against the
 *   blob's check (XXH3-128, recorded in the index by the put) or, for a blob with
 *   none yet, against its digest (SHA-256, and the check is then recorded); a blob
 *   whose bytes do not match is DATA_LOSS, is quarantined at once (rows dropped,
 *   file moved aside, digest recorded) and is never served again. verify always
 *   re-hashes with SHA-256.
 * - No index row points at a missing blob and no half-written blob is visible:
 *   blobs are made durable and renamed into place before their row is inserted;
 *   rows are deleted before their blob. Open repairs what a crash can leave: rows
 *   whose blob is missing are dropped, blob files no row names are removed, tmp/
 *   is emptied.
 * - Eviction (kiln_cache_gc) removes least recently used unpinned artifacts, then
 *   sources no artifact needs, never a pinned entry or a blob being read.
 * - Many readers and one writer at a time: each operation borrows its own SQLite
 *   connection from a pool (WAL); no lock is held across blob I/O.
 *
 * Layout: DIR/index.db (+ WAL files) and the blob store's blobs/, tmp/,
 * quarantine/ under DIR.
 *
 * Thread-safe: every function may be called from any thread, concurrently.
 */
#ifndef KILN_CACHE_CACHE_H
#define KILN_CACHE_CACHE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "base/digest.h"
#include "base/status.h"
#include "cache/blobstore.h"
#include "cache/index.h"

typedef struct kiln_cache_s kiln_cache_t;

typedef struct kiln_cache_options_s {
  uint64_t capacity_bytes;             /* on-disk size limit for gc; 0: unlimited */
  kiln_blob_compression_t compression; /* default KILN_BLOB_COMPRESSION_AUTO */
  int64_t (*now_ms)(void);             /* clock; NULL: wall clock (tests pass a fake) */
  bool skip_repair;                    /* open without reconciling index and blobs
                                          (an offline verify does it, or reports it) */
} kiln_cache_options_t;

/* What open's repair did. */
typedef struct kiln_cache_repair_s {
  uint64_t dangling_rows; /* rows dropped because their blob was missing */
  uint64_t orphan_blobs;  /* blob files removed because no row named them */
  uint64_t stray_files;   /* non-blob files removed from blobs/ */
  int64_t duration_ms;
} kiln_cache_repair_t;

/* Opens (creating) the cache in `dir` and repairs it. out_repair may be NULL.
 * Errors name the directory: PERMISSION_DENIED when it cannot be written,
 * FAILED_PRECONDITION for an index from a newer kiln, DATA_LOSS for a corrupt
 * index. */
KILN_MUST_USE kiln_status_t kiln_cache_open(const char *dir, const kiln_cache_options_t *options,
                                            kiln_cache_t **out_cache, kiln_cache_repair_t *out_repair);
void kiln_cache_close(kiln_cache_t *cache);
/* The directory. Borrowed. */
const char *kiln_cache_path(const kiln_cache_t *cache);
uint64_t kiln_cache_capacity(const kiln_cache_t *cache);

/* ---- cache keys ---- */

/* What an artifact depends on. Two requests with equal parts share an artifact. */
typedef struct kiln_cache_key_parts_s {
  const char *source_digest; /* digest of the source's meaning (compiler fingerprint) */
  const char *target;        /* canonical target id */
  const char *const *flags;  /* compile flags as given; normalized by the key */
  size_t n_flags;
  const char *compiler;      /* compiler identity, e.g. "kiln-mlir 0.1.0 llvm 22.1.8" */
  uint32_t hal_version;      /* 7 */
  uint32_t bytecode_version; /* major << 16 | minor */
} kiln_cache_key_parts_t;

/* Normalizes flags by the one rule of base/flags.h (trimmed, empties dropped, the
 * last spelling of a name kept, sorted by name), the rule kilnd's admission and
 * `kiln explain` use. Returns them joined by '\n' (kiln_malloc'd, owned by the
 * caller). */
char *kiln_cache_flags_normalize(const char *const *flags, size_t n_flags);

/* The cache key: SHA-256 over a versioned, unambiguous encoding of the parts with
 * normalized flags. INVALID_ARGUMENT when a part is missing or malformed. */
KILN_MUST_USE kiln_status_t kiln_cache_key_compute(const kiln_cache_key_parts_t *parts,
                                                   kiln_digest_hex_t *out_key);
/* The keys of one source, compiler and flag list for each of `n` targets
 * (parts->target is not read): out_keys[i] is what kiln_cache_key_compute gives
 * for targets[i]. The shared parts are checked and the flags normalized once.
 * `targets` and `out_keys` hold `n` entries, borrowed; out_keys is written only
 * on success. INVALID_ARGUMENT, naming the part, when a shared part or any
 * target is missing or malformed. */
KILN_MUST_USE kiln_status_t kiln_cache_keys_compute(const kiln_cache_key_parts_t *parts,
                                                    const char *const *targets, size_t n,
                                                    kiln_digest_hex_t *out_keys);

/* ---- artifacts ---- */

/* Who and what produced an artifact. Every field is borrowed for the call. */
typedef struct kiln_cache_provenance_s {
  const char *submitter;            /* may be NULL */
  const kiln_index_label_t *labels; /* borrowed */
  size_t n_labels;
  const char *job_id;      /* the job that compiled it; NULL: "" */
  const char *source_name; /* its request's source_name; NULL: "" */
} kiln_cache_provenance_t;

/* Stores `len` bytes as the artifact for `parts` and indexes it. The record
 * (optional) receives the row as stored (free with kiln_index_artifact_deinit).
 * When the key already has a row, the provenance (submitter, labels, job_id,
 * source_name) replaces the old one; pin and hit count stay.
 * RESOURCE_EXHAUSTED when the disk is full (nothing stored is lost). */
KILN_MUST_USE kiln_status_t kiln_cache_artifact_put(kiln_cache_t *cache, const kiln_cache_key_parts_t *parts,
                                                    const void *data, size_t len,
                                                    const kiln_cache_provenance_t *provenance,
                                                    kiln_index_artifact_t *out_record);

/* Looks up the artifact for a cache key and records a hit (or NOT_FOUND, counted
 * as a miss). The record is owned by the caller. */
KILN_MUST_USE kiln_status_t kiln_cache_artifact_lookup(kiln_cache_t *cache, const char *cache_key,
                                                       kiln_index_artifact_t *out_record);

/* The newest artifact row whose artifact digest is `digest` (GetArtifact by
 * digest); records no hit. NOT_FOUND when no row has it (never stored, evicted or
 * quarantined); INVALID_ARGUMENT for a malformed digest. The record is owned by
 * the caller (kiln_index_artifact_deinit). */
KILN_MUST_USE kiln_status_t kiln_cache_artifact_get_by_digest(kiln_cache_t *cache, const char *digest,
                                                              kiln_index_artifact_t *out_record);

/* One page of artifact rows matching `query`, newest first (see
 * kiln_index_artifact_find_page for the order, the cursor and the errors). The
 * array is owned by the caller (kiln_index_artifacts_free). Hits not yet flushed
 * are not reflected in the rows' hits and last_access_ms. */
KILN_MUST_USE kiln_status_t kiln_cache_artifact_find_page(kiln_cache_t *cache,
                                                          const kiln_index_page_query_t *query,
                                                          kiln_index_artifact_t **out_records,
                                                          size_t *out_count);

/* The artifact digest and size for a cache key, for admission's hot path: recent
 * answers are remembered in memory (a removal of any artifact row or blob forgets
 * them all), so a repeated hit costs a stat of the blob instead of SQLite queries.
 * Records the hit like kiln_cache_artifact_lookup; NOT_FOUND on a miss. */
KILN_MUST_USE kiln_status_t kiln_cache_artifact_probe(kiln_cache_t *cache, const char *cache_key,
                                                      char out_digest[KILN_DIGEST_HEX_LEN + 1],
                                                      uint64_t *out_size);

/* One key's answer from kiln_cache_artifact_memo. */
typedef struct kiln_cache_memo_answer_s {
  char artifact_digest[KILN_DIGEST_HEX_LEN + 1];
  uint64_t size;
} kiln_cache_memo_answer_t;

/* The most keys one kiln_cache_artifact_memo call answers (Compile's target limit). */
#define KILN_CACHE_MEMO_MAX_KEYS 16

/* kiln_cache_artifact_probe from memory alone, for the `n` keys of one request,
 * for callers that must not block (an event loop): true when the memo knows every
 * key and saw each blob within the last second; the hits are then recorded, all
 * under one lock, as the probe would. False, with nothing recorded, when only the
 * probe can tell for some key (not memoized, malformed, or due a stat of its blob)
 * or when recording the hits would call for a flush, and for more than
 * KILN_CACHE_MEMO_MAX_KEYS keys. Never touches the disk. */
bool kiln_cache_artifact_memo(kiln_cache_t *cache, const char *const *cache_keys, size_t n,
                              kiln_cache_memo_answer_t *out);

/* A verifying stream over an artifact or source blob. While it is open the blob is
 * protected from eviction. */
typedef struct kiln_cache_reader_s kiln_cache_reader_t;

/* Opens blob `digest` (artifact or source), verifying with its recorded check when
 * there is one (one indexed query), else with SHA-256. NOT_FOUND when unknown or
 * quarantined. */
KILN_MUST_USE kiln_status_t kiln_cache_open_blob(kiln_cache_t *cache, const char *digest,
                                                 kiln_cache_reader_t **out_reader);
/* As kiln_blob_reader_read. On DATA_LOSS the blob has already been quarantined.
 * The read that ends a blob verified by SHA-256 records its check (a failure to
 * record is logged, not returned). */
KILN_MUST_USE kiln_status_t kiln_cache_reader_read(kiln_cache_reader_t *reader, void *buf, size_t cap,
                                                   size_t *out_len);
uint64_t kiln_cache_reader_size(const kiln_cache_reader_t *reader);
void kiln_cache_reader_close(kiln_cache_reader_t *reader);

/* Reads a whole blob, verified (quarantined on DATA_LOSS). Owned by the caller. */
KILN_MUST_USE kiln_status_t kiln_cache_get_blob(kiln_cache_t *cache, const char *digest, void **out_data,
                                                size_t *out_len);

/* Pins or unpins every artifact whose digest or cache key is `key_or_digest`.
 * NOT_FOUND when none; INVALID_ARGUMENT for a malformed digest. */
KILN_MUST_USE kiln_status_t kiln_cache_pin(kiln_cache_t *cache, const char *key_or_digest, bool pinned,
                                           size_t *out_count);

/* ---- sources ---- */

/* Stores a source (the IR as uploaded). `semantic_digest` (may be NULL) is the
 * compiler's fingerprint of its meaning. If `expected_digest` is non-NULL the
 * bytes must hash to it (INVALID_ARGUMENT otherwise). out_digest is the digest of
 * the bytes. Idempotent. */
KILN_MUST_USE kiln_status_t kiln_cache_source_put(kiln_cache_t *cache, const void *data, size_t len,
                                                  const char *expected_digest, const char *name, int format,
                                                  const char *semantic_digest, kiln_digest_hex_t *out_digest);

/* The digest of `data` (always set), and true when the bytes are known to be stored
 * already (a put of them lately, its blob seen within the last second): then a
 * kiln_cache_source_put of them would do nothing. From memory alone: never blocks. */
bool kiln_cache_source_memo(kiln_cache_t *cache, const void *data, size_t len, kiln_digest_hex_t *out_digest);

/* The row of stored source `digest`, if its blob is present too (a row whose blob
 * was removed behind the cache's back is dropped and reads as missing). NOT_FOUND
 * when not stored (never uploaded, evicted or quarantined); INVALID_ARGUMENT for a
 * malformed digest. The record is owned by the caller (kiln_index_source_deinit). */
KILN_MUST_USE kiln_status_t kiln_cache_source_get(kiln_cache_t *cache, const char *digest,
                                                  kiln_index_source_t *out_record);

/* The digest the cache keys `digest`'s artifacts on (an artifact's source_digest):
 * the digest of a source's lexical normal form (base/mlir_text.h), so that a
 * reformatted copy of a model hits. For a stored source, its row's (computed
 * from its blob, and recorded, for a row written before kiln recorded it); any
 * other well-formed digest is taken to be a key digest already (a client that
 * computed the normal form itself). INVALID_ARGUMENT for a malformed digest;
 * blocking (SQLite, and the blob once for an old row). */
KILN_MUST_USE kiln_status_t kiln_cache_source_key_digest(kiln_cache_t *cache, const char *digest,
                                                         kiln_digest_hex_t *out);

/* A source upload spooled to disk (PutSource): bytes go to a temporary file in the
 * store's tmp/ and are hashed as they arrive, so memory stays bounded whatever the
 * size (the blob writer buffers at most 8 MiB of a compressible source to
 * compress it). Nothing is visible until commit; abort, a failed write and a
 * failed commit leave nothing behind. One owner at a time (any thread). */
typedef struct kiln_cache_upload_s kiln_cache_upload_t;

/* Starts an upload of `size` (> 0) bytes that must hash to `expected_digest`.
 * INVALID_ARGUMENT for a malformed digest or size 0; errors of the tmp file
 * (RESOURCE_EXHAUSTED, PERMISSION_DENIED) name it. On success *out_upload is owned
 * by the caller until commit or abort. */
KILN_MUST_USE kiln_status_t kiln_cache_source_upload_begin(kiln_cache_t *cache, const char *expected_digest,
                                                           uint64_t size, kiln_cache_upload_t **out_upload);
/* Appends `len` bytes (borrowed). INVALID_ARGUMENT when they would take the upload
 * past its declared size (the message gives both sizes); RESOURCE_EXHAUSTED when
 * the disk is full. After a failure the upload only fails; abort it. */
KILN_MUST_USE kiln_status_t kiln_cache_source_upload_write(kiln_cache_upload_t *upload, const void *data,
                                                           size_t len);
/* Checks the size and the digest, makes the blob durable and visible under its
 * digest and indexes the source (as kiln_cache_source_put: idempotent, a
 * concurrent upload of the same digest stores it once), then frees the upload,
 * also on failure. INVALID_ARGUMENT when fewer bytes arrived than declared, or
 * they hash to another digest (each message gives both values); nothing is
 * stored then. `out_record` (may be NULL) receives the row as stored, which for a
 * source already present is the earlier row (its name and format win). */
KILN_MUST_USE kiln_status_t kiln_cache_source_upload_commit(kiln_cache_upload_t *upload, const char *name,
                                                            int format, const char *semantic_digest,
                                                            kiln_index_source_t *out_record);
/* Discards an upload that was not committed and removes its tmp file. NULL is a
 * no-op. */
void kiln_cache_source_upload_abort(kiln_cache_upload_t *upload);

/* ---- maintenance ---- */

typedef struct kiln_cache_stats_s {
  kiln_index_totals_t totals;
  uint64_t capacity_bytes;
  int schema_version;
  /* Counters since open. */
  uint64_t hits;
  uint64_t misses;
  uint64_t evictions;
  uint64_t quarantined;
  uint64_t bytes_served;
} kiln_cache_stats_t;

KILN_MUST_USE kiln_status_t kiln_cache_stats(kiln_cache_t *cache, kiln_cache_stats_t *out_stats);

/* The same without touching SQLite or the disk: the counters, and the totals as of
 * the last open, stats, gc or verify. Takes only a mutex: safe on an event loop. */
void kiln_cache_counters(kiln_cache_t *cache, kiln_cache_stats_t *out_stats);

typedef enum kiln_cache_problem_kind_e {
  KILN_CACHE_PROBLEM_CORRUPT_BLOB = 1,
  KILN_CACHE_PROBLEM_MISSING_BLOB = 2,
  KILN_CACHE_PROBLEM_ORPHAN_BLOB = 3,
  KILN_CACHE_PROBLEM_STRAY_FILE = 4,
  KILN_CACHE_PROBLEM_DAMAGED_INDEX = 5, /* index.db fails SQLite's integrity check */
} kiln_cache_problem_kind_t;            /* numerically kiln.v1.CacheProblem.Kind */

typedef struct kiln_cache_problem_s {
  kiln_cache_problem_kind_t kind;
  char digest[KILN_DIGEST_HEX_LEN + 1]; /* "" for stray files */
  char *detail;
  bool repaired;
} kiln_cache_problem_t;

typedef struct kiln_cache_verify_report_s {
  uint64_t blobs_checked;
  uint64_t bytes_checked;
  kiln_cache_problem_t *problems;
  size_t n_problems;
  int64_t duration_ms;
} kiln_cache_verify_report_t;

/* Re-reads every blob, hashing it with SHA-256 whatever check is recorded (the
 * audit of the content addresses), and reconciles index and blobs (see kiln.proto
 * VerifyCache); the check of every intact blob is recorded, or corrected when the
 * recorded one differs. With dry_run nothing is changed. `should_stop` (may be
 * NULL) is polled between blobs; when it returns true the scan ends early with
 * CANCELLED. */
KILN_MUST_USE kiln_status_t kiln_cache_verify(kiln_cache_t *cache, bool dry_run, bool (*should_stop)(void *),
                                              void *stop_user, kiln_cache_verify_report_t *out_report);
void kiln_cache_verify_report_deinit(kiln_cache_verify_report_t *report);

typedef struct kiln_cache_gc_report_s {
  uint64_t artifacts_evicted;
  uint64_t sources_evicted;
  uint64_t bytes_freed;
  uint64_t bytes_stored;
  bool target_unreachable;
} kiln_cache_gc_report_t;

/* Evicts until the store is at most `max_bytes` on disk (0: the capacity; then
 * INVALID_ARGUMENT when unlimited). */
KILN_MUST_USE kiln_status_t kiln_cache_gc(kiln_cache_t *cache, uint64_t max_bytes,
                                          kiln_cache_gc_report_t *out_report);

#endif /* KILN_CACHE_CACHE_H */
