/* The cache index: SQLite (WAL) rows for sources and artifacts, with the parts of
 * each artifact's cache key kept as columns so a miss can be explained.
 *
 * One kiln_index_t is one SQLite connection. A connection is used by one thread at
 * a time (the cache façade keeps a pool and hands each operation its own); WAL lets
 * many connections read while one writes. Every statement is prepared once per
 * connection and reset after use; no SQL text is built from values.
 *
 * Schema: numbered migrations (index_schema.c) applied in order inside one
 * transaction each; PRAGMA user_version holds the number of the last one applied.
 * A database from a newer kiln (user_version above what this build knows) is
 * FAILED_PRECONDITION: never downgrade silently.
 *
 * Errors: SQLITE_BUSY/LOCKED -> UNAVAILABLE (after the 5 s busy timeout),
 * SQLITE_FULL -> RESOURCE_EXHAUSTED, SQLITE_CORRUPT/NOTADB -> DATA_LOSS,
 * SQLITE_READONLY/PERM/CANTOPEN (permissions) -> PERMISSION_DENIED, a missing row ->
 * NOT_FOUND, others -> INTERNAL; each message names the operation and SQLite's text.
 * Thread-safety: see above; functions on one kiln_index_t are not thread-safe.
 */
#ifndef KILN_CACHE_INDEX_H
#define KILN_CACHE_INDEX_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "base/status.h"

#define KILN_INDEX_DIGEST_LEN 64
/* A blob check as the blob store makes it (kiln_blob_check_t's bytes). */
#define KILN_INDEX_CHECK_BYTES 16

typedef struct kiln_index_s kiln_index_t;

/* Opens or creates the database at `path`, sets WAL, synchronous=NORMAL (durable
 * across process crashes; the blob files themselves are fsynced), busy_timeout 5000,
 * foreign_keys=ON, and applies pending migrations. */
KILN_MUST_USE kiln_status_t kiln_index_open(const char *path, kiln_index_t **out_index);
void kiln_index_close(kiln_index_t *index);
/* PRAGMA user_version after migrations. */
int kiln_index_schema_version(kiln_index_t *index);
/* The number of migrations this build knows (the version a fresh database gets). */
int kiln_index_latest_schema_version(void);

/* For tests only: replaces the 5 s busy timeout of this connection, so a test of
 * lock contention need not wait 5 s. Production code never calls it. */
void kiln_index_set_busy_timeout_ms(kiln_index_t *index, int ms);

/* Explicit write transactions (BEGIN IMMEDIATE ... COMMIT) for multi-row changes.
 * Single-row functions below are atomic on their own; put and drop_digest, which
 * run their own transaction, join an open one (as a savepoint) instead.
 * begin: FAILED_PRECONDITION when a transaction is already open; UNAVAILABLE when
 * another connection holds the write lock past the busy timeout.
 * commit: FAILED_PRECONDITION when none is open; on any failure the transaction has
 * been rolled back. rollback: no-op when none is open. */
KILN_MUST_USE kiln_status_t kiln_index_begin(kiln_index_t *index);
KILN_MUST_USE kiln_status_t kiln_index_commit(kiln_index_t *index);
void kiln_index_rollback(kiln_index_t *index);

typedef struct kiln_index_label_s {
  char *key;
  char *value;
} kiln_index_label_t;

/* An artifact row. Strings are owned by the record when it comes from the index
 * (free with kiln_index_artifact_deinit); when passed in, they are borrowed. */
typedef struct kiln_index_artifact_s {
  char cache_key[KILN_INDEX_DIGEST_LEN + 1];
  char artifact_digest[KILN_INDEX_DIGEST_LEN + 1];
  char source_digest[KILN_INDEX_DIGEST_LEN + 1]; /* the key's source part (semantic digest) */
  char *target;                                  /* canonical target id */
  char *flags;                                   /* normalized flags, one per line */
  char *compiler;                                /* compiler identity string */
  uint32_t hal_version;
  uint32_t bytecode_version; /* major << 16 | minor */
  uint64_t size;             /* uncompressed bytes */
  uint64_t stored_size;      /* bytes on disk */
  char *submitter;           /* who asked for it; may be NULL */
  int64_t created_ms;
  int64_t last_access_ms;
  uint64_t hits;
  bool pinned;
  kiln_index_label_t *labels;
  size_t n_labels;
  char *job_id;      /* the job that produced it; "" when unknown (imported, or stored
                        before the index kept it) */
  char *source_name; /* source_name of the request that produced it; "" when unknown */
} kiln_index_artifact_t;

void kiln_index_artifact_deinit(kiln_index_artifact_t *record);
/* Frees an array returned by find_page/lru. */
void kiln_index_artifacts_free(kiln_index_artifact_t *records, size_t count);

/* Inserts or replaces the row for record->cache_key (labels replaced too). A
 * replaced row keeps its pin and hit count; a new row takes record->pinned and
 * record->hits. INVALID_ARGUMENT for a malformed digest, an empty target or
 * compiler, a size above INT64_MAX, or a label key that is empty or given twice.
 * flags, job_id and source_name NULL are stored as "". */
KILN_MUST_USE kiln_status_t kiln_index_artifact_put(kiln_index_t *index, const kiln_index_artifact_t *record);
/* The row for `cache_key`, labels sorted by key; flags, job_id and source_name are
 * "" (never NULL) when empty. *out_record is zeroed on entry and filled only on
 * success (free it with kiln_index_artifact_deinit). NOT_FOUND when no row has
 * this key. */
KILN_MUST_USE kiln_status_t kiln_index_artifact_get(kiln_index_t *index, const char *cache_key,
                                                    kiln_index_artifact_t *out_record);
/* The newest row whose artifact_digest is `digest`; NOT_FOUND when none. */
KILN_MUST_USE kiln_status_t kiln_index_artifact_get_by_digest(kiln_index_t *index, const char *digest,
                                                              kiln_index_artifact_t *out_record);
/* Adds `hits` to the row's hit count and moves last_access_ms forward to
 * `last_access_ms` (never back), so hits counted in memory can be written in one
 * batch. A missing row is not an error (it may have been evicted since the hits
 * happened). */
KILN_MUST_USE kiln_status_t kiln_index_artifact_record_hits(kiln_index_t *index, const char *cache_key,
                                                            int64_t last_access_ms, uint64_t hits);
/* Pins or unpins every row whose cache_key OR artifact_digest equals `key_or_digest`;
 * *out_changed (may be NULL) counts matching rows. NOT_FOUND when none match. */
KILN_MUST_USE kiln_status_t kiln_index_artifact_set_pinned(kiln_index_t *index, const char *key_or_digest,
                                                           bool pinned, size_t *out_changed);
/* The most labels one page query can match (INVALID_ARGUMENT above it): the
 * contract's per-request label limit. */
#define KILN_INDEX_PAGE_MAX_LABELS 32

/* Where a page starts: the last row of the previous page (keyset paging, so rows
 * stored or deleted between pages shift nothing). */
typedef struct kiln_index_page_cursor_s {
  int64_t created_ms;
  char artifact_digest[KILN_INDEX_DIGEST_LEN + 1];
  char cache_key[KILN_INDEX_DIGEST_LEN + 1];
} kiln_index_page_cursor_t;

/* One page of artifact rows (FindArtifacts). Every set field must match; strings
 * and arrays are borrowed for the call. */
typedef struct kiln_index_page_query_s {
  const char *source_digest;        /* NULL: any */
  const char *target;               /* canonical id; NULL: any */
  uint32_t hal_version;             /* exactly this; 0: any */
  uint32_t hal_below;               /* hal_version < hal_below; 0: no bound */
  int64_t created_after_ms;         /* created_ms >= this; 0: no bound */
  int64_t created_before_ms;        /* created_ms < this; 0: no bound */
  const kiln_index_label_t *labels; /* every (key, value) must be on the row */
  size_t n_labels;
  const kiln_index_page_cursor_t *after; /* NULL: the first page */
  size_t limit;                          /* rows at most; 0: 100 */
} kiln_index_page_query_t;

/* Matching rows, newest first: created_ms descending, then artifact_digest, then
 * cache_key ascending (a total order, so pages never overlap or skip a row that
 * existed throughout), each with its labels, starting after `query->after`. More
 * than KILN_INDEX_PAGE_MAX_LABELS labels, a label without key or value, or a
 * malformed digest in the query or cursor is INVALID_ARGUMENT. The array is owned
 * by the caller (kiln_index_artifacts_free); *out_records is NULL when there are
 * none. */
KILN_MUST_USE kiln_status_t kiln_index_artifact_find_page(kiln_index_t *index,
                                                          const kiln_index_page_query_t *query,
                                                          kiln_index_artifact_t **out_records,
                                                          size_t *out_count);

/* Up to `limit` unpinned artifact rows, least recently accessed first (ties by
 * cache_key): eviction candidates. limit 0 returns none. */
KILN_MUST_USE kiln_status_t kiln_index_artifact_lru(kiln_index_t *index, size_t limit,
                                                    kiln_index_artifact_t **out_records, size_t *out_count);

/* Eviction's delete: removes the row only if it is (still) unpinned; for a source,
 * only if it is also (still) unpinned and no artifact names it. A row that was
 * pinned, deleted or referenced since the LRU query is left alone: *out_evicted
 * false, status OK. */
KILN_MUST_USE kiln_status_t kiln_index_artifact_evict(kiln_index_t *index, const char *cache_key,
                                                      bool *out_evicted);
KILN_MUST_USE kiln_status_t kiln_index_source_evict(kiln_index_t *index, const char *digest,
                                                    bool *out_evicted);

/* A source row (the uploaded IR). */
typedef struct kiln_index_source_s {
  char digest[KILN_INDEX_DIGEST_LEN + 1];          /* of the bytes as uploaded */
  char semantic_digest[KILN_INDEX_DIGEST_LEN + 1]; /* of its meaning; "" if unknown */
  char *name;                                      /* file name for diagnostics; may be NULL */
  int format;                                      /* kiln.v1.SourceFormat value */
  uint64_t size;
  uint64_t stored_size;
  int64_t created_ms;
  int64_t last_access_ms;
  bool pinned;
} kiln_index_source_t;

void kiln_index_source_deinit(kiln_index_source_t *record);
void kiln_index_sources_free(kiln_index_source_t *records, size_t count);
/* Inserts, or refreshes last_access_ms of, the row for record->digest (an existing
 * row keeps every other field, pinned included). INVALID_ARGUMENT for a malformed
 * digest or semantic_digest. */
KILN_MUST_USE kiln_status_t kiln_index_source_put(kiln_index_t *index, const kiln_index_source_t *record);
KILN_MUST_USE kiln_status_t kiln_index_source_get(kiln_index_t *index, const char *digest,
                                                  kiln_index_source_t *out_record);
/* touch sets last_access_ms = now_ms; get and touch are NOT_FOUND when no row has
 * `digest`. */
KILN_MUST_USE kiln_status_t kiln_index_source_touch(kiln_index_t *index, const char *digest, int64_t now_ms);
/* Unpinned sources that no artifact row names (no artifact's source_digest equals
 * the source's digest or its non-empty semantic_digest), least recently accessed
 * first (ties by digest): evicted after artifacts. limit 0 returns none. */
KILN_MUST_USE kiln_status_t kiln_index_source_lru(kiln_index_t *index, size_t limit,
                                                  kiln_index_source_t **out_records, size_t *out_count);

/* Whether any artifact or source row refers to blob `digest`: an artifact's
 * artifact_digest or a source's digest (source_digest and semantic_digest name
 * meanings, not blobs). */
KILN_MUST_USE kiln_status_t kiln_index_digest_referenced(kiln_index_t *index, const char *digest,
                                                         bool *out_referenced);

/* Calls fn once per distinct blob digest the index refers to (artifacts and
 * sources), in ascending order. Used by repair to find rows whose blob is missing.
 * The digests are read before the first call, so fn may use this same index (e.g.
 * drop_digest). Stops at, and returns, the first failure fn returns. */
typedef kiln_status_t (*kiln_index_digest_fn_t)(void *user, const char *digest);
KILN_MUST_USE kiln_status_t kiln_index_visit_digests(kiln_index_t *index, kiln_index_digest_fn_t fn,
                                                     void *user);

/* Deletes every artifact and source row that refers to blob `digest`, and its
 * check, and records it in the quarantine table with `reason` (when reason is
 * NULL, nothing is recorded: a dangling row dropped by repair), all in one
 * transaction. *out_rows (may be NULL) counts deleted artifact and source rows
 * (not their labels or check). */
KILN_MUST_USE kiln_status_t kiln_index_drop_digest(kiln_index_t *index, const char *digest,
                                                   const char *reason, int64_t now_ms, size_t *out_rows);

/* Blob checks: the XXH3-128 of a blob's content (KILN_INDEX_CHECK_BYTES bytes,
 * opaque here), which streaming reads verify instead of SHA-256. A check belongs
 * to the content, not to a row: equal digests have equal checks, so a put may
 * overwrite one freely, and one left behind by a removed blob is right again for
 * any blob later stored under the same digest.
 * put: inserts or replaces (INVALID_ARGUMENT for a malformed digest).
 * get: NOT_FOUND when none is recorded (a blob stored before migration 4 and not
 * read since, or never stored).
 * drop_unreferenced: deletes the check of `digest` unless an artifact or source row
 * names the blob (after its blob was removed); absent is not an error. */
KILN_MUST_USE kiln_status_t kiln_index_blob_check_put(kiln_index_t *index, const char *digest,
                                                      const unsigned char check[KILN_INDEX_CHECK_BYTES]);
KILN_MUST_USE kiln_status_t kiln_index_blob_check_get(kiln_index_t *index, const char *digest,
                                                      unsigned char out_check[KILN_INDEX_CHECK_BYTES]);
KILN_MUST_USE kiln_status_t kiln_index_blob_check_drop_unreferenced(kiln_index_t *index, const char *digest);

typedef struct kiln_index_totals_s {
  uint64_t artifacts;
  uint64_t artifact_bytes;        /* uncompressed */
  uint64_t artifact_stored_bytes; /* on disk, counting each blob once */
  uint64_t sources;
  uint64_t source_bytes;
  uint64_t source_stored_bytes;
  uint64_t pinned;      /* pinned artifact rows */
  uint64_t hits;        /* summed over artifact rows */
  uint64_t quarantined; /* quarantine rows */
} kiln_index_totals_t;
/* All read in one snapshot, so they agree with each other. */
KILN_MUST_USE kiln_status_t kiln_index_totals(kiln_index_t *index, kiln_index_totals_t *out_totals);

/* True when this connection changed rows since the last call (the first call:
 * since it was opened). */
bool kiln_index_wrote(kiln_index_t *index);

/* SQLite's own check of the index file: PRAGMA quick_check, or with `full`
 * integrity_check (also every index against its table). *out_problem gets what
 * is wrong (kiln_free it), or NULL when the file is sound; a file too damaged for
 * the check to run is a problem too. The status is for failures to ask (busy). */
KILN_MUST_USE kiln_status_t kiln_index_check_integrity(kiln_index_t *index, bool full, char **out_problem);

#endif /* KILN_CACHE_INDEX_H */
