/* The cache index over SQLite: one kiln_index_t is one connection.
 *
 * Opening: sqlite3_open_v2 (NOMUTEX: one thread at a time per connection), the
 * connection PRAGMAs (busy_timeout first, so that everything after it waits for
 * other connections instead of failing), then the migrations. Each migration runs
 * in its own BEGIN IMMEDIATE transaction that re-reads user_version under the write
 * lock, so several connections opening one fresh file at once apply each migration
 * exactly once. Only then are the statements prepared: they name tables the
 * migrations create.
 *
 * Statements: every one is prepared once per connection (SQLITE_PREPARE_PERSISTENT)
 * and kept in the kiln_index_t; every use ends in reset + clear_bindings, so no
 * statement holds a read snapshot or borrowed text between calls. find_page's
 * statements (FindArtifacts) are assembled from fixed fragments, one per
 * combination of present filters and label count, and prepared on first use:
 * values are only ever bound, never formatted into SQL. It pages by keyset: each
 * page starts strictly after the previous page's last row in a total order
 * (created_ms descending, artifact_digest, cache_key), never by OFFSET.
 *
 * Transactions: writes that touch several rows (put, drop_digest) run in BEGIN
 * IMMEDIATE ... COMMIT, or inside a SAVEPOINT when the caller already holds a
 * transaction from kiln_index_begin. IMMEDIATE takes the write lock up front, where
 * the busy timeout applies; a deferred transaction that reads first can instead
 * fail at once with SQLITE_BUSY_SNAPSHOT when it tries to write.
 *
 * Errors: SQLite result codes become kiln statuses in exactly one place,
 * sql_failure(); callers add only the name of the operation.
 */
#include "cache/index.h"

#include <sqlite3.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/alloc.h"
#include "base/buf.h"
#include "base/digest.h"
#include "base/time.h"
#include "cache/index_schema.h"
#include "cache/sqlerr.h"

#define DEFAULT_BUSY_TIMEOUT_MS 5000
#define DEFAULT_PAGE_LIMIT      100

/* Columns of an artifact row, in the order read_artifact_row expects. */
#define ARTIFACT_COLUMNS                                                             \
  "a.cache_key, a.artifact_digest, a.source_digest, a.target, a.flags, a.compiler, " \
  "a.hal_version, a.bytecode_version, a.size, a.stored_size, a.submitter, "          \
  "a.created_ms, a.last_access_ms, a.hits, a.pinned, a.job_id, a.source_name"
#define SOURCE_COLUMNS                                                                   \
  "s.digest, s.semantic_digest, s.name, s.format, s.size, s.stored_size, s.created_ms, " \
  "s.last_access_ms, s.pinned"

/* The fixed statements. */
typedef enum stmt_id_e {
  STMT_BEGIN,
  STMT_COMMIT,
  STMT_ROLLBACK,
  STMT_SAVEPOINT,
  STMT_RELEASE,
  STMT_ROLLBACK_TO,
  STMT_ARTIFACT_UPSERT,
  STMT_LABELS_DELETE,
  STMT_LABEL_INSERT,
  STMT_LABELS_GET,
  STMT_ARTIFACT_GET,
  STMT_ARTIFACT_GET_BY_DIGEST,
  STMT_ARTIFACT_EVICT,
  STMT_SOURCE_EVICT,
  STMT_ARTIFACT_RECORD_HITS,
  STMT_ARTIFACT_SET_PINNED,
  STMT_ARTIFACT_LRU,
  STMT_SOURCE_UPSERT,
  STMT_SOURCE_GET,
  STMT_SOURCE_TOUCH,
  STMT_SOURCE_LRU,
  STMT_DIGEST_REFERENCED,
  STMT_DIGESTS,
  STMT_DROP_ARTIFACTS,
  STMT_DROP_SOURCES,
  STMT_DROP_CHECK,
  STMT_QUARANTINE_PUT,
  STMT_CHECK_PUT,
  STMT_CHECK_GET,
  STMT_CHECK_DROP_UNREFERENCED,
  STMT_TOTALS,
  STMT_COUNT
} stmt_id_t;

static const char *const stmt_sql[STMT_COUNT] = {
    [STMT_BEGIN] = "BEGIN IMMEDIATE",
    [STMT_COMMIT] = "COMMIT",
    [STMT_ROLLBACK] = "ROLLBACK",
    [STMT_SAVEPOINT] = "SAVEPOINT kiln_index_op",
    [STMT_RELEASE] = "RELEASE kiln_index_op",
    [STMT_ROLLBACK_TO] = "ROLLBACK TO kiln_index_op",
    /* A replaced row keeps pinned and hits: they belong to the row's history, not
     * to the compile that (re)produced it. Its provenance (submitter, job_id,
     * source_name, labels) is that compile's, so it is replaced. */
    [STMT_ARTIFACT_UPSERT] =
        "INSERT INTO artifacts (cache_key, artifact_digest, source_digest, target, flags, "
        "compiler, hal_version, bytecode_version, size, stored_size, submitter, created_ms, "
        "last_access_ms, hits, pinned, job_id, source_name) "
        "VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12, ?13, ?14, ?15, ?16, ?17) "
        "ON CONFLICT (cache_key) DO UPDATE SET artifact_digest = excluded.artifact_digest, "
        "source_digest = excluded.source_digest, target = excluded.target, "
        "flags = excluded.flags, compiler = excluded.compiler, "
        "hal_version = excluded.hal_version, bytecode_version = excluded.bytecode_version, "
        "size = excluded.size, stored_size = excluded.stored_size, "
        "submitter = excluded.submitter, created_ms = excluded.created_ms, "
        "last_access_ms = excluded.last_access_ms, job_id = excluded.job_id, "
        "source_name = excluded.source_name",
    [STMT_LABELS_DELETE] = "DELETE FROM artifact_labels WHERE cache_key = ?1",
    [STMT_LABEL_INSERT] = "INSERT INTO artifact_labels (cache_key, key, value) VALUES (?1, ?2, ?3)",
    [STMT_LABELS_GET] = "SELECT key, value FROM artifact_labels WHERE cache_key = ?1 ORDER BY key",
    [STMT_ARTIFACT_GET] = "SELECT " ARTIFACT_COLUMNS " FROM artifacts a WHERE a.cache_key = ?1",
    [STMT_ARTIFACT_GET_BY_DIGEST] = "SELECT " ARTIFACT_COLUMNS
                                    " FROM artifacts a WHERE a.artifact_digest = ?1 "
                                    "ORDER BY a.created_ms DESC, a.cache_key LIMIT 1",
    [STMT_ARTIFACT_RECORD_HITS] =
        "UPDATE artifacts SET last_access_ms = max(last_access_ms, ?2), hits = hits + ?3 "
        "WHERE cache_key = ?1",
    [STMT_ARTIFACT_SET_PINNED] =
        "UPDATE artifacts SET pinned = ?2 WHERE cache_key = ?1 OR artifact_digest = ?1",
    [STMT_ARTIFACT_EVICT] = "DELETE FROM artifacts WHERE cache_key = ?1 AND pinned = 0",
    [STMT_SOURCE_EVICT] =
        "DELETE FROM sources WHERE digest = ?1 AND pinned = 0 "
        "AND NOT EXISTS (SELECT 1 FROM artifacts a WHERE a.source_digest = sources.digest) "
        "AND (sources.semantic_digest = '' OR NOT EXISTS "
        "(SELECT 1 FROM artifacts a WHERE a.source_digest = sources.semantic_digest))",
    [STMT_ARTIFACT_LRU] = "SELECT " ARTIFACT_COLUMNS
                          " FROM artifacts a WHERE a.pinned = 0 "
                          "ORDER BY a.last_access_ms, a.cache_key LIMIT ?1",
    [STMT_SOURCE_UPSERT] =
        "INSERT INTO sources (digest, semantic_digest, name, format, size, stored_size, "
        "created_ms, last_access_ms, pinned) VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9) "
        "ON CONFLICT (digest) DO UPDATE SET last_access_ms = excluded.last_access_ms, "
        "semantic_digest = CASE WHEN sources.semantic_digest = '' THEN excluded.semantic_digest "
        "ELSE sources.semantic_digest END",
    [STMT_SOURCE_GET] = "SELECT " SOURCE_COLUMNS " FROM sources s WHERE s.digest = ?1",
    [STMT_SOURCE_TOUCH] = "UPDATE sources SET last_access_ms = ?2 WHERE digest = ?1",
    [STMT_SOURCE_LRU] = "SELECT " SOURCE_COLUMNS
                        " FROM sources s WHERE s.pinned = 0 "
                        "AND NOT EXISTS (SELECT 1 FROM artifacts a WHERE a.source_digest = s.digest) "
                        "AND (s.semantic_digest = '' OR NOT EXISTS "
                        "(SELECT 1 FROM artifacts a WHERE a.source_digest = s.semantic_digest)) "
                        "ORDER BY s.last_access_ms, s.digest LIMIT ?1",
    [STMT_DIGEST_REFERENCED] =
        "SELECT EXISTS (SELECT 1 FROM artifacts WHERE artifact_digest = ?1) "
        "OR EXISTS (SELECT 1 FROM sources WHERE digest = ?1)",
    [STMT_DIGESTS] =
        "SELECT artifact_digest FROM artifacts UNION SELECT digest FROM sources "
        "ORDER BY 1",
    [STMT_DROP_ARTIFACTS] = "DELETE FROM artifacts WHERE artifact_digest = ?1",
    [STMT_DROP_SOURCES] = "DELETE FROM sources WHERE digest = ?1",
    [STMT_DROP_CHECK] = "DELETE FROM blob_checks WHERE digest = ?1",
    [STMT_QUARANTINE_PUT] =
        "INSERT INTO quarantine (digest, reason, quarantined_ms) "
        "VALUES (?1, ?2, ?3) ON CONFLICT (digest) DO UPDATE SET "
        "reason = excluded.reason, quarantined_ms = excluded.quarantined_ms",
    [STMT_CHECK_PUT] =
        "INSERT INTO blob_checks (digest, xxh3) VALUES (?1, ?2) "
        "ON CONFLICT (digest) DO UPDATE SET xxh3 = excluded.xxh3",
    [STMT_CHECK_GET] = "SELECT xxh3 FROM blob_checks WHERE digest = ?1",
    [STMT_CHECK_DROP_UNREFERENCED] =
        "DELETE FROM blob_checks WHERE digest = ?1 "
        "AND NOT EXISTS (SELECT 1 FROM artifacts WHERE artifact_digest = ?1) "
        "AND NOT EXISTS (SELECT 1 FROM sources WHERE digest = ?1)",
    /* One statement, so one snapshot: the numbers agree with each other. Stored
     * bytes count each blob once however many cache keys share it. */
    [STMT_TOTALS] =
        "SELECT (SELECT count(*) FROM artifacts), "
        "(SELECT coalesce(sum(size), 0) FROM artifacts), "
        "(SELECT coalesce(sum(stored), 0) FROM "
        "(SELECT max(stored_size) AS stored FROM artifacts GROUP BY artifact_digest)), "
        "(SELECT count(*) FROM sources), "
        "(SELECT coalesce(sum(size), 0) FROM sources), "
        "(SELECT coalesce(sum(stored_size), 0) FROM sources), "
        "(SELECT count(*) FROM artifacts WHERE pinned = 1), "
        "(SELECT coalesce(sum(hits), 0) FROM artifacts), "
        "(SELECT count(*) FROM quarantine)",
};

/* find_page's parameters: fixed numbers whatever filters are present. The HAL
 * and time bounds are always bound (neutral values when unset); source, target
 * and the cursor are in the SQL only when given, so the indexes on them stay
 * usable. */
enum {
  PAGE_PARAM_SOURCE = 1,
  PAGE_PARAM_TARGET = 2,
  PAGE_PARAM_HAL_MIN = 3,
  PAGE_PARAM_HAL_MAX = 4,
  PAGE_PARAM_AFTER_MS = 5,
  PAGE_PARAM_BEFORE_MS = 6,
  PAGE_PARAM_CURSOR_MS = 7,
  PAGE_PARAM_CURSOR_DIGEST = 8,
  PAGE_PARAM_CURSOR_KEY = 9,
  PAGE_PARAM_LIMIT = 10,
  PAGE_PARAM_LABELS = 11, /* label i: key ?(11 + 2i), value ?(12 + 2i) */
};
#define PAGE_HAS_SOURCE 1u
#define PAGE_HAS_TARGET 2u
#define PAGE_HAS_CURSOR 4u
#define PAGE_SHAPES     8

struct kiln_index_s {
  sqlite3 *db;
  char *path;
  int64_t changes_seen; /* sqlite3_total_changes64 at the last kiln_index_wrote */
  int schema_version;
  int busy_timeout_ms;
  sqlite3_stmt *stmts[STMT_COUNT];
  /* find_page's: [filter-presence mask][label count], prepared on first use. */
  sqlite3_stmt *page_stmts[PAGE_SHAPES][KILN_INDEX_PAGE_MAX_LABELS + 1];
};

/* ---- errors -------------------------------------------------------------- */

/* SQLite result codes become statuses in one place for every kiln SQLite file
 * (cache/sqlerr.c). */
#define sql_failure_at(db, path, busy_ms, rc, op, file, line) \
  kiln_sql_failure_at((db), "cache index", (path), (busy_ms), (rc), (op), (file), (line))

#define sql_failure(index, rc, op) \
  sql_failure_at((index)->db, (index)->path, (index)->busy_timeout_ms, (rc), (op), __FILE__, __LINE__)

/* ---- statement helpers ----------------------------------------------------- */

static void stmt_done(sqlite3_stmt *stmt) {
  /* reset's return value repeats the step's error, which the caller already has. */
  sqlite3_reset(stmt);
  sqlite3_clear_bindings(stmt);
}

/* Binders record the first failure in *rc and do nothing after one, so a run of
 * binds is checked once. Text is SQLITE_STATIC: it outlives the step, which always
 * ends in stmt_done before the caller's strings can go away. */
static void bind_text(sqlite3_stmt *stmt, int i, const char *s, int *rc) {
  if (*rc == SQLITE_OK) *rc = sqlite3_bind_text(stmt, i, s, -1, SQLITE_STATIC);
}
static void bind_int64(sqlite3_stmt *stmt, int i, int64_t v, int *rc) {
  if (*rc == SQLITE_OK) *rc = sqlite3_bind_int64(stmt, i, v);
}
/* size_t counts (limits, offsets) saturate: SQLite's LIMIT is signed. */
static void bind_count(sqlite3_stmt *stmt, int i, size_t v, int *rc) {
  bind_int64(stmt, i, v > (size_t)INT64_MAX ? INT64_MAX : (int64_t)v, rc);
}

/* Steps statement `id` to completion (a write) with ?1 bound to `text` (when not
 * NULL) and ?2 to `*number` (when not NULL). *out_changes (may be NULL) gets the
 * rows it changed. */
static KILN_MUST_USE kiln_status_t exec_write(kiln_index_t *index, stmt_id_t id, const char *text,
                                              const int64_t *number, const char *op, int *out_changes) {
  sqlite3_stmt *stmt = index->stmts[id];
  int rc = SQLITE_OK;
  if (text) bind_text(stmt, 1, text, &rc);
  if (number) bind_int64(stmt, 2, *number, &rc);
  if (rc == SQLITE_OK) rc = sqlite3_step(stmt);
  kiln_status_t status = rc == SQLITE_DONE ? NULL : sql_failure(index, rc, op);
  if (!status && out_changes) *out_changes = sqlite3_changes(index->db);
  stmt_done(stmt);
  return status;
}

static KILN_MUST_USE kiln_status_t exec_text(kiln_index_t *index, stmt_id_t id, const char *text,
                                             const char *op, int *out_changes) {
  return exec_write(index, id, text, NULL, op, out_changes);
}

/* Steps a statement that yields one integer (EXISTS queries). */
static KILN_MUST_USE kiln_status_t query_bool(kiln_index_t *index, stmt_id_t id, const char *text,
                                              const char *op, bool *out) {
  sqlite3_stmt *stmt = index->stmts[id];
  int rc = SQLITE_OK;
  bind_text(stmt, 1, text, &rc);
  if (rc == SQLITE_OK) rc = sqlite3_step(stmt);
  kiln_status_t status = NULL;
  if (rc == SQLITE_ROW)
    *out = sqlite3_column_int64(stmt, 0) != 0;
  else
    status = sql_failure(index, rc == SQLITE_DONE ? SQLITE_INTERNAL : rc, op);
  stmt_done(stmt);
  return status;
}

/* ---- transactions ------------------------------------------------------------ */

/* Our own transaction (BEGIN IMMEDIATE) when the caller has none, a savepoint in
 * the caller's otherwise. *out_own says which, for tx_leave/tx_abort. */
static KILN_MUST_USE kiln_status_t tx_enter(kiln_index_t *index, const char *op, bool *out_own) {
  *out_own = sqlite3_get_autocommit(index->db) != 0;
  return exec_text(index, *out_own ? STMT_BEGIN : STMT_SAVEPOINT, NULL, op, NULL);
}

static void tx_abort(kiln_index_t *index, bool own) {
  /* Some errors (FULL, IOERR, NOMEM, BUSY in a COMMIT) make SQLite roll the whole
   * transaction back itself; then there is nothing left to undo. */
  if (sqlite3_get_autocommit(index->db)) return;
  if (own) {
    kiln_status_free(exec_text(index, STMT_ROLLBACK, NULL, "rollback", NULL));
  } else {
    kiln_status_free(exec_text(index, STMT_ROLLBACK_TO, NULL, "rollback to savepoint", NULL));
    kiln_status_free(exec_text(index, STMT_RELEASE, NULL, "release savepoint", NULL));
  }
}

/* Commits (or releases the savepoint); on failure, undoes and returns why. */
static KILN_MUST_USE kiln_status_t tx_leave(kiln_index_t *index, const char *op, bool own) {
  kiln_status_t status = exec_text(index, own ? STMT_COMMIT : STMT_RELEASE, NULL, op, NULL);
  if (status) tx_abort(index, own);
  return status;
}

kiln_status_t kiln_index_begin(kiln_index_t *index) {
  if (!sqlite3_get_autocommit(index->db))
    return KILN_STATUS(KILN_STATUS_FAILED_PRECONDITION,
                       "cache index %s: begin: a transaction is already open on this "
                       "connection; commit or roll it back first",
                       index->path);
  return exec_text(index, STMT_BEGIN, NULL, "begin transaction", NULL);
}

kiln_status_t kiln_index_commit(kiln_index_t *index) {
  if (sqlite3_get_autocommit(index->db))
    return KILN_STATUS(KILN_STATUS_FAILED_PRECONDITION,
                       "cache index %s: commit: no transaction is open on this connection "
                       "(kiln_index_begin was not called, or the transaction was rolled back "
                       "after an error)",
                       index->path);
  return tx_leave(index, "commit", true);
}

void kiln_index_rollback(kiln_index_t *index) {
  if (index) tx_abort(index, true);
}

/* ---- opening and migrations ------------------------------------------------- */

/* Runs a one-off statement (PRAGMAs at open) and, if it yields a row, copies its
 * first column as text into `out` (may be NULL). */
static KILN_MUST_USE kiln_status_t exec_once(kiln_index_t *index, const char *sql, const char *op, char *out,
                                             size_t out_cap) {
  sqlite3_stmt *stmt = NULL;
  int rc = sqlite3_prepare_v2(index->db, sql, -1, &stmt, NULL);
  if (rc == SQLITE_OK) rc = sqlite3_step(stmt);
  if (rc == SQLITE_ROW && out) {
    const unsigned char *text = sqlite3_column_text(stmt, 0);
    snprintf(out, out_cap, "%s", text ? (const char *)text : "");
  }
  kiln_status_t status = rc == SQLITE_ROW || rc == SQLITE_DONE ? NULL : sql_failure(index, rc, op);
  sqlite3_finalize(stmt);
  return status;
}

static KILN_MUST_USE kiln_status_t read_user_version(kiln_index_t *index, int *out_version) {
  char text[32];
  KILN_RETURN_IF_ERROR(exec_once(index, "PRAGMA user_version", "read schema version", text, sizeof text));
  *out_version = atoi(text);
  return NULL;
}

static KILN_MUST_USE kiln_status_t newer_schema(const kiln_index_t *index, int version) {
  return KILN_STATUS(KILN_STATUS_FAILED_PRECONDITION,
                     "cache index %s has schema version %d, but this kiln knows versions up "
                     "to %d: it was written by a newer kiln; run that version, or move the "
                     "file aside to start a fresh index",
                     index->path, version, kiln_index_schema_migration_count());
}

/* Applies the next pending migration, if any, in its own transaction; sets
 * *out_version to the version the database is at afterwards. */
static KILN_MUST_USE kiln_status_t migrate_one(kiln_index_t *index, int *out_version) {
  KILN_RETURN_IF_ERROR(exec_once(index, "BEGIN IMMEDIATE", "begin migration", NULL, 0));
  int version = 0;
  /* Re-read under the write lock: another connection may have migrated meanwhile. */
  kiln_status_t status = read_user_version(index, &version);
  if (!status && version > kiln_index_schema_migration_count()) status = newer_schema(index, version);
  if (!status && version < kiln_index_schema_migration_count()) {
    int next = version + 1;
    int rc = sqlite3_exec(index->db, kiln_index_schema_migration(next), NULL, NULL, NULL);
    char op[64];
    snprintf(op, sizeof op, "migration %d", next);
    if (rc != SQLITE_OK) status = sql_failure(index, rc, op);
    if (!status) {
      /* A PRAGMA takes no parameters; `next` is our own small integer. */
      char pragma[48];
      snprintf(pragma, sizeof pragma, "PRAGMA user_version = %d", next);
      status = exec_once(index, pragma, op, NULL, 0);
    }
    if (!status) version = next;
  }
  if (!status) status = exec_once(index, "COMMIT", "commit migration", NULL, 0);
  if (status) {
    if (!sqlite3_get_autocommit(index->db)) sqlite3_exec(index->db, "ROLLBACK", NULL, NULL, NULL);
    return status;
  }
  *out_version = version;
  return NULL;
}

static KILN_MUST_USE kiln_status_t migrate(kiln_index_t *index) {
  int version = 0;
  KILN_RETURN_IF_ERROR(read_user_version(index, &version));
  if (version > kiln_index_schema_migration_count()) return newer_schema(index, version);
  while (version < kiln_index_schema_migration_count()) KILN_RETURN_IF_ERROR(migrate_one(index, &version));
  index->schema_version = version;
  return NULL;
}

static KILN_MUST_USE kiln_status_t prepare(kiln_index_t *index, const char *sql, sqlite3_stmt **out_stmt) {
  int rc = sqlite3_prepare_v3(index->db, sql, -1, SQLITE_PREPARE_PERSISTENT, out_stmt, NULL);
  if (rc != SQLITE_OK) {
    *out_stmt = NULL;
    return sql_failure(index, rc, "prepare statement");
  }
  return NULL;
}

static KILN_MUST_USE kiln_status_t configure(kiln_index_t *index) {
  sqlite3_extended_result_codes(index->db, 1);
  sqlite3_busy_timeout(index->db, index->busy_timeout_ms);
  char mode[32];
  /* The first statement to read the file: a non-database fails here, as NOTADB.
   * Turning a fresh file to WAL needs an exclusive lock, and when several
   * connections open one fresh file at once SQLite answers BUSY without calling the
   * busy handler (waiting could deadlock them), so retry the whole statement, with
   * its locks released, until the busy timeout. */
  int64_t deadline = kiln_time_monotonic_ns() + (int64_t)index->busy_timeout_ms * 1000000;
  for (;;) {
    kiln_status_t status = exec_once(index, "PRAGMA journal_mode = WAL", "enable WAL", mode, sizeof mode);
    if (!status) break;
    if (kiln_status_code(status) != KILN_STATUS_UNAVAILABLE || kiln_time_monotonic_ns() >= deadline)
      return status;
    kiln_status_free(status);
    sqlite3_sleep(5);
  }
  /* Temporary and in-memory databases cannot be WAL; files must be, or readers would
   * block behind writers. */
  const char *file = sqlite3_db_filename(index->db, "main");
  if (strcmp(mode, "wal") != 0 && file && *file)
    return KILN_STATUS(KILN_STATUS_FAILED_PRECONDITION,
                       "cache index %s: could not enable WAL (journal mode stays '%s'); "
                       "put the cache directory on a local filesystem",
                       index->path, mode);
  KILN_RETURN_IF_ERROR(exec_once(index, "PRAGMA synchronous = NORMAL", "set synchronous", NULL, 0));
  KILN_RETURN_IF_ERROR(exec_once(index, "PRAGMA foreign_keys = ON", "enable foreign keys", NULL, 0));
  char fk[8];
  KILN_RETURN_IF_ERROR(exec_once(index, "PRAGMA foreign_keys", "check foreign keys", fk, sizeof fk));
  if (strcmp(fk, "1") != 0)
    return KILN_STATUS(KILN_STATUS_FAILED_PRECONDITION,
                       "cache index %s: this SQLite build cannot enforce foreign keys, "
                       "which the index needs to delete labels with their artifact",
                       index->path);
  return NULL;
}

kiln_status_t kiln_index_open(const char *path, kiln_index_t **out_index) {
  *out_index = NULL;
  if (!path || !*path)
    return KILN_STATUS(KILN_STATUS_INVALID_ARGUMENT,
                       "cache index: empty path; pass the file the index lives in");
  if (!sqlite3_threadsafe())
    return KILN_STATUS(KILN_STATUS_FAILED_PRECONDITION,
                       "cache index %s: the linked SQLite was built without thread "
                       "support (SQLITE_THREADSAFE=0); link a threadsafe libsqlite3",
                       path);
  kiln_index_t *index = kiln_calloc(1, sizeof *index);
  index->path = kiln_strdup(path);
  index->busy_timeout_ms = DEFAULT_BUSY_TIMEOUT_MS;
  int rc = sqlite3_open_v2(path, &index->db, SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE | SQLITE_OPEN_NOMUTEX,
                           NULL);
  kiln_status_t status = rc == SQLITE_OK ? NULL : sql_failure(index, rc, "open");
  if (!status) status = configure(index);
  if (!status) status = migrate(index);
  for (int i = 0; !status && i < STMT_COUNT; i++) status = prepare(index, stmt_sql[i], &index->stmts[i]);
  if (status) {
    kiln_index_close(index);
    return status;
  }
  *out_index = index;
  return NULL;
}

void kiln_index_close(kiln_index_t *index) {
  if (!index) return;
  for (int i = 0; i < STMT_COUNT; i++) sqlite3_finalize(index->stmts[i]);
  for (int m = 0; m < PAGE_SHAPES; m++)
    for (int n = 0; n <= KILN_INDEX_PAGE_MAX_LABELS; n++) sqlite3_finalize(index->page_stmts[m][n]);
  /* Every statement is finalized, so this cannot fail with BUSY; an open
   * transaction is rolled back by SQLite. */
  sqlite3_close(index->db);
  kiln_free(index->path);
  kiln_free(index);
}

int kiln_index_schema_version(kiln_index_t *index) { return index->schema_version; }

int kiln_index_latest_schema_version(void) { return kiln_index_schema_migration_count(); }

void kiln_index_set_busy_timeout_ms(kiln_index_t *index, int ms) {
  index->busy_timeout_ms = ms;
  sqlite3_busy_timeout(index->db, ms);
}

/* ---- reading rows ---------------------------------------------------------------- */

static char *column_strdup(sqlite3_stmt *stmt, int col) {
  if (sqlite3_column_type(stmt, col) == SQLITE_NULL) return NULL;
  const unsigned char *text = sqlite3_column_text(stmt, col);
  int len = sqlite3_column_bytes(stmt, col);
  return kiln_strndup(text ? (const char *)text : "", (size_t)len);
}

/* Copies a digest column into `out` (KILN_INDEX_DIGEST_LEN + 1 bytes). The schema's
 * CHECKs make a wrong length impossible short of damage to the file. */
static KILN_MUST_USE kiln_status_t column_digest(kiln_index_t *index, sqlite3_stmt *stmt, int col,
                                                 bool may_be_empty, char *out) {
  const unsigned char *text = sqlite3_column_text(stmt, col);
  int len = sqlite3_column_bytes(stmt, col);
  if (text && (len == KILN_INDEX_DIGEST_LEN || (may_be_empty && len == 0))) {
    memcpy(out, text, (size_t)len);
    out[len] = '\0';
    return NULL;
  }
  return KILN_STATUS(KILN_STATUS_DATA_LOSS,
                     "cache index %s: column %s holds a malformed digest (%d bytes); the "
                     "index is damaged: move it aside to start a fresh index",
                     index->path, sqlite3_column_name(stmt, col), len);
}

static KILN_MUST_USE kiln_status_t load_labels(kiln_index_t *index, kiln_index_artifact_t *record) {
  sqlite3_stmt *stmt = index->stmts[STMT_LABELS_GET];
  int rc = SQLITE_OK;
  bind_text(stmt, 1, record->cache_key, &rc);
  size_t capacity = 0;
  while (rc == SQLITE_OK && (rc = sqlite3_step(stmt)) == SQLITE_ROW) {
    rc = SQLITE_OK;
    if (record->n_labels == capacity) {
      capacity = capacity ? capacity * 2 : 4;
      record->labels = kiln_realloc(record->labels, capacity * sizeof *record->labels);
    }
    kiln_index_label_t *label = &record->labels[record->n_labels++];
    label->key = column_strdup(stmt, 0);
    label->value = column_strdup(stmt, 1);
  }
  kiln_status_t status = rc == SQLITE_DONE ? NULL : sql_failure(index, rc, "read labels");
  stmt_done(stmt);
  return status;
}

/* Reads the current row of a statement selecting ARTIFACT_COLUMNS, then its labels.
 * `out` is zeroed by the caller; on failure it may hold part of a record (the
 * caller deinits it). */
static KILN_MUST_USE kiln_status_t read_artifact_row(kiln_index_t *index, sqlite3_stmt *stmt,
                                                     kiln_index_artifact_t *out) {
  KILN_RETURN_IF_ERROR(column_digest(index, stmt, 0, false, out->cache_key));
  KILN_RETURN_IF_ERROR(column_digest(index, stmt, 1, false, out->artifact_digest));
  KILN_RETURN_IF_ERROR(column_digest(index, stmt, 2, false, out->source_digest));
  out->target = column_strdup(stmt, 3);
  out->flags = column_strdup(stmt, 4);
  out->compiler = column_strdup(stmt, 5);
  out->hal_version = (uint32_t)sqlite3_column_int64(stmt, 6);
  out->bytecode_version = (uint32_t)sqlite3_column_int64(stmt, 7);
  out->size = (uint64_t)sqlite3_column_int64(stmt, 8);
  out->stored_size = (uint64_t)sqlite3_column_int64(stmt, 9);
  out->submitter = column_strdup(stmt, 10);
  out->created_ms = sqlite3_column_int64(stmt, 11);
  out->last_access_ms = sqlite3_column_int64(stmt, 12);
  out->hits = (uint64_t)sqlite3_column_int64(stmt, 13);
  out->pinned = sqlite3_column_int64(stmt, 14) != 0;
  out->job_id = column_strdup(stmt, 15);
  out->source_name = column_strdup(stmt, 16);
  if (!out->flags) out->flags = kiln_strdup("");
  if (!out->job_id) out->job_id = kiln_strdup("");
  if (!out->source_name) out->source_name = kiln_strdup("");
  return load_labels(index, out);
}

static KILN_MUST_USE kiln_status_t read_source_row(kiln_index_t *index, sqlite3_stmt *stmt,
                                                   kiln_index_source_t *out) {
  KILN_RETURN_IF_ERROR(column_digest(index, stmt, 0, false, out->digest));
  KILN_RETURN_IF_ERROR(column_digest(index, stmt, 1, true, out->semantic_digest));
  out->name = column_strdup(stmt, 2);
  out->format = (int)sqlite3_column_int64(stmt, 3);
  out->size = (uint64_t)sqlite3_column_int64(stmt, 4);
  out->stored_size = (uint64_t)sqlite3_column_int64(stmt, 5);
  out->created_ms = sqlite3_column_int64(stmt, 6);
  out->last_access_ms = sqlite3_column_int64(stmt, 7);
  out->pinned = sqlite3_column_int64(stmt, 8) != 0;
  return NULL;
}

/* Reads one row into a zeroed element; on failure the element may be partial. */
typedef kiln_status_t (*read_row_fn_t)(kiln_index_t *index, sqlite3_stmt *stmt, void *out);
/* Frees `count` elements and the array. */
typedef void (*free_rows_fn_t)(void *records, size_t count);

/* Steps a bound query: every row into a caller-owned array of `size`-byte
 * elements. Resets the statement. Artifact rows and their labels come from one
 * read snapshot, because the outer statement keeps its read transaction open while
 * labels are read. */
static KILN_MUST_USE kiln_status_t collect_rows(kiln_index_t *index, sqlite3_stmt *stmt, int rc,
                                                const char *op, size_t size, read_row_fn_t read,
                                                free_rows_fn_t free_rows, void **out_records,
                                                size_t *out_count) {
  char *records = NULL;
  size_t count = 0, capacity = 0;
  kiln_status_t status = NULL;
  while (rc == SQLITE_OK && (rc = sqlite3_step(stmt)) == SQLITE_ROW) {
    rc = SQLITE_OK;
    if (count == capacity) {
      capacity = capacity ? capacity * 2 : 8;
      records = kiln_realloc(records, capacity * size);
    }
    void *row = records + count++ * size;
    memset(row, 0, size);
    status = read(index, stmt, row);
    if (status) break;
  }
  if (!status && rc != SQLITE_DONE) status = sql_failure(index, rc, op);
  stmt_done(stmt);
  if (status) {
    free_rows(records, count);
    return status;
  }
  *out_records = records;
  *out_count = count;
  return NULL;
}

static KILN_MUST_USE kiln_status_t read_artifact_any(kiln_index_t *index, sqlite3_stmt *stmt, void *out) {
  return read_artifact_row(index, stmt, out);
}

static void free_artifacts_any(void *records, size_t count) { kiln_index_artifacts_free(records, count); }

/* Every row of a bound artifact query. */
static KILN_MUST_USE kiln_status_t collect_artifacts(kiln_index_t *index, sqlite3_stmt *stmt, int rc,
                                                     const char *op, kiln_index_artifact_t **out_records,
                                                     size_t *out_count) {
  void *records = NULL;
  KILN_RETURN_IF_ERROR(collect_rows(index, stmt, rc, op, sizeof(kiln_index_artifact_t), read_artifact_any,
                                    free_artifacts_any, &records, out_count));
  *out_records = records;
  return NULL;
}

/* Steps a bound query expected to yield at most one artifact row. */
static KILN_MUST_USE kiln_status_t fetch_artifact(kiln_index_t *index, stmt_id_t id, const char *text,
                                                  const char *op, const char *what,
                                                  kiln_index_artifact_t *out_record) {
  sqlite3_stmt *stmt = index->stmts[id];
  int rc = SQLITE_OK;
  bind_text(stmt, 1, text, &rc);
  kiln_index_artifact_t *records = NULL;
  size_t count = 0;
  KILN_RETURN_IF_ERROR(collect_artifacts(index, stmt, rc, op, &records, &count));
  if (count == 0)
    return KILN_STATUS(KILN_STATUS_NOT_FOUND, "cache index %s: no artifact with %s %s", index->path, what,
                       text);
  *out_record = records[0];
  kiln_free(records);
  return NULL;
}

/* ---- artifacts ---------------------------------------------------------------- */

void kiln_index_artifact_deinit(kiln_index_artifact_t *record) {
  if (!record) return;
  kiln_free(record->target);
  kiln_free(record->flags);
  kiln_free(record->compiler);
  kiln_free(record->submitter);
  kiln_free(record->job_id);
  kiln_free(record->source_name);
  for (size_t i = 0; i < record->n_labels; i++) {
    kiln_free(record->labels[i].key);
    kiln_free(record->labels[i].value);
  }
  kiln_free(record->labels);
  memset(record, 0, sizeof *record);
}

void kiln_index_artifacts_free(kiln_index_artifact_t *records, size_t count) {
  if (!records) return;
  for (size_t i = 0; i < count; i++) kiln_index_artifact_deinit(&records[i]);
  kiln_free(records);
}

static KILN_MUST_USE kiln_status_t invalid(const char *op, const char *what) {
  return KILN_STATUS(KILN_STATUS_INVALID_ARGUMENT, "cache index: %s: %s", op, what);
}

/* NULL when `text` is a 64-character lowercase hex digest. */
static KILN_MUST_USE kiln_status_t check_digest(const char *op, const char *field, const char *text) {
  if (text && kiln_digest_is_valid_hex(text)) return NULL;
  return KILN_STATUS(KILN_STATUS_INVALID_ARGUMENT,
                     "cache index: %s: %s '%.80s' is not a digest (64 lowercase hex "
                     "characters)",
                     op, field, text ? text : "(null)");
}

static KILN_MUST_USE kiln_status_t check_u64(const char *op, const char *field, uint64_t v) {
  if (v <= (uint64_t)INT64_MAX) return NULL;
  return KILN_STATUS(KILN_STATUS_INVALID_ARGUMENT, "cache index: %s: %s %llu is above %lld", op, field,
                     (unsigned long long)v, (long long)INT64_MAX);
}

static KILN_MUST_USE kiln_status_t check_artifact(const kiln_index_artifact_t *r) {
  static const char op[] = "put artifact";
  KILN_RETURN_IF_ERROR(check_digest(op, "cache_key", r->cache_key));
  KILN_RETURN_IF_ERROR(check_digest(op, "artifact_digest", r->artifact_digest));
  KILN_RETURN_IF_ERROR(check_digest(op, "source_digest", r->source_digest));
  if (!r->target || !*r->target) return invalid(op, "target is empty; give the canonical target id");
  if (!r->compiler || !*r->compiler)
    return invalid(op, "compiler is empty; give the compiler identity string");
  KILN_RETURN_IF_ERROR(check_u64(op, "size", r->size));
  KILN_RETURN_IF_ERROR(check_u64(op, "stored_size", r->stored_size));
  KILN_RETURN_IF_ERROR(check_u64(op, "hits", r->hits));
  if (r->n_labels && !r->labels) return invalid(op, "n_labels is set but labels is NULL");
  for (size_t i = 0; i < r->n_labels; i++) {
    const kiln_index_label_t *label = &r->labels[i];
    if (!label->key || !*label->key || !label->value)
      return KILN_STATUS(KILN_STATUS_INVALID_ARGUMENT,
                         "cache index: %s: label %zu needs a non-empty key and a value", op, i);
    for (size_t j = 0; j < i; j++)
      if (strcmp(r->labels[j].key, label->key) == 0)
        return KILN_STATUS(KILN_STATUS_INVALID_ARGUMENT, "cache index: %s: label key '%s' is given twice", op,
                           label->key);
  }
  return NULL;
}

static KILN_MUST_USE kiln_status_t put_artifact_rows(kiln_index_t *index, const kiln_index_artifact_t *r) {
  static const char op[] = "put artifact";
  sqlite3_stmt *stmt = index->stmts[STMT_ARTIFACT_UPSERT];
  int rc = SQLITE_OK;
  bind_text(stmt, 1, r->cache_key, &rc);
  bind_text(stmt, 2, r->artifact_digest, &rc);
  bind_text(stmt, 3, r->source_digest, &rc);
  bind_text(stmt, 4, r->target, &rc);
  bind_text(stmt, 5, r->flags ? r->flags : "", &rc);
  bind_text(stmt, 6, r->compiler, &rc);
  bind_int64(stmt, 7, r->hal_version, &rc);
  bind_int64(stmt, 8, r->bytecode_version, &rc);
  bind_int64(stmt, 9, (int64_t)r->size, &rc);
  bind_int64(stmt, 10, (int64_t)r->stored_size, &rc);
  bind_text(stmt, 11, r->submitter, &rc);
  bind_int64(stmt, 12, r->created_ms, &rc);
  bind_int64(stmt, 13, r->last_access_ms, &rc);
  bind_int64(stmt, 14, (int64_t)r->hits, &rc);
  bind_int64(stmt, 15, r->pinned ? 1 : 0, &rc);
  bind_text(stmt, 16, r->job_id ? r->job_id : "", &rc);
  bind_text(stmt, 17, r->source_name ? r->source_name : "", &rc);
  if (rc == SQLITE_OK) rc = sqlite3_step(stmt);
  kiln_status_t status = rc == SQLITE_DONE ? NULL : sql_failure(index, rc, op);
  stmt_done(stmt);
  if (status) return status;

  KILN_RETURN_IF_ERROR(exec_text(index, STMT_LABELS_DELETE, r->cache_key, op, NULL));
  stmt = index->stmts[STMT_LABEL_INSERT];
  for (size_t i = 0; i < r->n_labels; i++) {
    rc = SQLITE_OK;
    bind_text(stmt, 1, r->cache_key, &rc);
    bind_text(stmt, 2, r->labels[i].key, &rc);
    bind_text(stmt, 3, r->labels[i].value, &rc);
    if (rc == SQLITE_OK) rc = sqlite3_step(stmt);
    status = rc == SQLITE_DONE ? NULL : sql_failure(index, rc, "put artifact label");
    stmt_done(stmt);
    if (status) return status;
  }
  return NULL;
}

kiln_status_t kiln_index_artifact_put(kiln_index_t *index, const kiln_index_artifact_t *record) {
  KILN_RETURN_IF_ERROR(check_artifact(record));
  bool own = false;
  KILN_RETURN_IF_ERROR(tx_enter(index, "put artifact: begin", &own));
  kiln_status_t status = put_artifact_rows(index, record);
  if (status) {
    tx_abort(index, own);
    return status;
  }
  return tx_leave(index, "put artifact: commit", own);
}

kiln_status_t kiln_index_artifact_get(kiln_index_t *index, const char *cache_key,
                                      kiln_index_artifact_t *out_record) {
  memset(out_record, 0, sizeof *out_record);
  if (!cache_key) return invalid("get artifact", "cache key is NULL");
  return fetch_artifact(index, STMT_ARTIFACT_GET, cache_key, "get artifact", "cache key", out_record);
}

kiln_status_t kiln_index_artifact_get_by_digest(kiln_index_t *index, const char *digest,
                                                kiln_index_artifact_t *out_record) {
  memset(out_record, 0, sizeof *out_record);
  if (!digest) return invalid("get artifact by digest", "digest is NULL");
  return fetch_artifact(index, STMT_ARTIFACT_GET_BY_DIGEST, digest, "get artifact by digest",
                        "artifact digest", out_record);
}

kiln_status_t kiln_index_artifact_record_hits(kiln_index_t *index, const char *cache_key,
                                              int64_t last_access_ms, uint64_t hits) {
  if (!cache_key) return invalid("record hits", "cache key is NULL");
  sqlite3_stmt *stmt = index->stmts[STMT_ARTIFACT_RECORD_HITS];
  int rc = SQLITE_OK;
  bind_text(stmt, 1, cache_key, &rc);
  bind_int64(stmt, 2, last_access_ms, &rc);
  bind_int64(stmt, 3, hits > INT64_MAX ? INT64_MAX : (int64_t)hits, &rc);
  if (rc == SQLITE_OK) rc = sqlite3_step(stmt);
  kiln_status_t status = rc == SQLITE_DONE ? NULL : sql_failure(index, rc, "record hits");
  stmt_done(stmt);
  return status; /* a row evicted meanwhile simply takes no update */
}

kiln_status_t kiln_index_artifact_set_pinned(kiln_index_t *index, const char *key_or_digest, bool pinned,
                                             size_t *out_changed) {
  if (out_changed) *out_changed = 0;
  if (!key_or_digest) return invalid("pin artifact", "key or digest is NULL");
  int64_t value = pinned ? 1 : 0;
  int changes = 0;
  KILN_RETURN_IF_ERROR(exec_write(index, STMT_ARTIFACT_SET_PINNED, key_or_digest, &value,
                                  pinned ? "pin artifact" : "unpin artifact", &changes));
  if (changes == 0)
    return KILN_STATUS(KILN_STATUS_NOT_FOUND,
                       "cache index %s: no artifact has cache key or artifact digest %s", index->path,
                       key_or_digest);
  if (out_changed) *out_changed = (size_t)changes;
  return NULL;
}

/* The page statement for one shape, assembled from fixed fragments only. */
static KILN_MUST_USE kiln_status_t page_stmt(kiln_index_t *index, unsigned mask, size_t n_labels,
                                             sqlite3_stmt **out_stmt) {
  sqlite3_stmt **slot = &index->page_stmts[mask][n_labels];
  if (!*slot) {
    kiln_buf_t sql;
    kiln_buf_init(&sql);
    kiln_buf_append_str(&sql, "SELECT " ARTIFACT_COLUMNS
                              " FROM artifacts a "
                              "WHERE a.hal_version BETWEEN ?3 AND ?4 "
                              "AND a.created_ms >= ?5 AND a.created_ms < ?6");
    if (mask & PAGE_HAS_SOURCE) kiln_buf_append_str(&sql, " AND a.source_digest = ?1");
    if (mask & PAGE_HAS_TARGET) kiln_buf_append_str(&sql, " AND a.target = ?2");
    /* Strictly after the cursor in the page order (descending time, then
     * ascending digest and key). */
    if (mask & PAGE_HAS_CURSOR)
      kiln_buf_append_str(&sql,
                          " AND (a.created_ms < ?7 OR (a.created_ms = ?7 AND "
                          "(a.artifact_digest, a.cache_key) > (?8, ?9)))");
    for (size_t i = 0; i < n_labels; i++)
      kiln_buf_appendf(&sql,
                       " AND EXISTS (SELECT 1 FROM artifact_labels l WHERE l.cache_key = "
                       "a.cache_key AND l.key = ?%zu AND l.value = ?%zu)",
                       PAGE_PARAM_LABELS + 2 * i, PAGE_PARAM_LABELS + 2 * i + 1);
    kiln_buf_append_str(&sql, " ORDER BY a.created_ms DESC, a.artifact_digest, a.cache_key LIMIT ?10");
    kiln_status_t status = prepare(index, sql.data, slot);
    kiln_buf_deinit(&sql);
    KILN_RETURN_IF_ERROR(status);
  }
  *out_stmt = *slot;
  return NULL;
}

kiln_status_t kiln_index_artifact_find_page(kiln_index_t *index, const kiln_index_page_query_t *query,
                                            kiln_index_artifact_t **out_records, size_t *out_count) {
  static const char op[] = "find a page of artifacts";
  *out_records = NULL;
  *out_count = 0;
  static const kiln_index_page_query_t any = {0};
  if (!query) query = &any;
  if (query->n_labels > KILN_INDEX_PAGE_MAX_LABELS)
    return KILN_STATUS(KILN_STATUS_INVALID_ARGUMENT,
                       "cache index: %s: %zu labels given, at most %d can be matched at once", op,
                       query->n_labels, KILN_INDEX_PAGE_MAX_LABELS);
  if (query->n_labels && !query->labels) return invalid(op, "n_labels is set but labels is NULL");
  for (size_t i = 0; i < query->n_labels; i++)
    if (!query->labels[i].key || !query->labels[i].value)
      return KILN_STATUS(KILN_STATUS_INVALID_ARGUMENT, "cache index: %s: label %zu needs a key and a value",
                         op, i);
  if (query->source_digest && !kiln_digest_is_valid_hex(query->source_digest))
    return invalid(op, "source digest is not 64 lowercase hex characters");
  const kiln_index_page_cursor_t *after = query->after;
  if (after &&
      (!kiln_digest_is_valid_hex(after->artifact_digest) || !kiln_digest_is_valid_hex(after->cache_key)))
    return invalid(op, "the cursor's digest or cache key is not 64 lowercase hex characters");

  int64_t hal_min = 0, hal_max = UINT32_MAX;
  if (query->hal_version) hal_min = hal_max = query->hal_version;
  if (query->hal_below && (int64_t)query->hal_below - 1 < hal_max) hal_max = (int64_t)query->hal_below - 1;
  int64_t after_ms = query->created_after_ms ? query->created_after_ms : INT64_MIN;
  int64_t before_ms = query->created_before_ms ? query->created_before_ms : INT64_MAX;

  unsigned mask = (query->source_digest ? PAGE_HAS_SOURCE : 0) | (query->target ? PAGE_HAS_TARGET : 0) |
                  (after ? PAGE_HAS_CURSOR : 0);
  sqlite3_stmt *stmt = NULL;
  KILN_RETURN_IF_ERROR(page_stmt(index, mask, query->n_labels, &stmt));
  int rc = SQLITE_OK;
  if (query->source_digest) bind_text(stmt, PAGE_PARAM_SOURCE, query->source_digest, &rc);
  if (query->target) bind_text(stmt, PAGE_PARAM_TARGET, query->target, &rc);
  bind_int64(stmt, PAGE_PARAM_HAL_MIN, hal_min, &rc);
  bind_int64(stmt, PAGE_PARAM_HAL_MAX, hal_max, &rc);
  bind_int64(stmt, PAGE_PARAM_AFTER_MS, after_ms, &rc);
  bind_int64(stmt, PAGE_PARAM_BEFORE_MS, before_ms, &rc);
  if (after) {
    bind_int64(stmt, PAGE_PARAM_CURSOR_MS, after->created_ms, &rc);
    bind_text(stmt, PAGE_PARAM_CURSOR_DIGEST, after->artifact_digest, &rc);
    bind_text(stmt, PAGE_PARAM_CURSOR_KEY, after->cache_key, &rc);
  }
  bind_count(stmt, PAGE_PARAM_LIMIT, query->limit ? query->limit : DEFAULT_PAGE_LIMIT, &rc);
  for (size_t i = 0; i < query->n_labels; i++) {
    bind_text(stmt, PAGE_PARAM_LABELS + 2 * (int)i, query->labels[i].key, &rc);
    bind_text(stmt, PAGE_PARAM_LABELS + 2 * (int)i + 1, query->labels[i].value, &rc);
  }
  return collect_artifacts(index, stmt, rc, op, out_records, out_count);
}

kiln_status_t kiln_index_artifact_lru(kiln_index_t *index, size_t limit, kiln_index_artifact_t **out_records,
                                      size_t *out_count) {
  *out_records = NULL;
  *out_count = 0;
  if (limit == 0) return NULL;
  sqlite3_stmt *stmt = index->stmts[STMT_ARTIFACT_LRU];
  int rc = SQLITE_OK;
  bind_count(stmt, 1, limit, &rc);
  return collect_artifacts(index, stmt, rc, "list eviction candidates", out_records, out_count);
}

/* ---- sources ------------------------------------------------------------------ */

void kiln_index_source_deinit(kiln_index_source_t *record) {
  if (!record) return;
  kiln_free(record->name);
  memset(record, 0, sizeof *record);
}

void kiln_index_sources_free(kiln_index_source_t *records, size_t count) {
  if (!records) return;
  for (size_t i = 0; i < count; i++) kiln_index_source_deinit(&records[i]);
  kiln_free(records);
}

kiln_status_t kiln_index_source_put(kiln_index_t *index, const kiln_index_source_t *record) {
  static const char op[] = "put source";
  KILN_RETURN_IF_ERROR(check_digest(op, "digest", record->digest));
  if (record->semantic_digest[0])
    KILN_RETURN_IF_ERROR(check_digest(op, "semantic_digest", record->semantic_digest));
  KILN_RETURN_IF_ERROR(check_u64(op, "size", record->size));
  KILN_RETURN_IF_ERROR(check_u64(op, "stored_size", record->stored_size));
  sqlite3_stmt *stmt = index->stmts[STMT_SOURCE_UPSERT];
  int rc = SQLITE_OK;
  bind_text(stmt, 1, record->digest, &rc);
  bind_text(stmt, 2, record->semantic_digest, &rc);
  bind_text(stmt, 3, record->name, &rc);
  bind_int64(stmt, 4, record->format, &rc);
  bind_int64(stmt, 5, (int64_t)record->size, &rc);
  bind_int64(stmt, 6, (int64_t)record->stored_size, &rc);
  bind_int64(stmt, 7, record->created_ms, &rc);
  bind_int64(stmt, 8, record->last_access_ms, &rc);
  bind_int64(stmt, 9, record->pinned ? 1 : 0, &rc);
  if (rc == SQLITE_OK) rc = sqlite3_step(stmt);
  kiln_status_t status = rc == SQLITE_DONE ? NULL : sql_failure(index, rc, op);
  stmt_done(stmt);
  return status;
}

kiln_status_t kiln_index_source_get(kiln_index_t *index, const char *digest,
                                    kiln_index_source_t *out_record) {
  memset(out_record, 0, sizeof *out_record);
  if (!digest) return invalid("get source", "digest is NULL");
  sqlite3_stmt *stmt = index->stmts[STMT_SOURCE_GET];
  int rc = SQLITE_OK;
  bind_text(stmt, 1, digest, &rc);
  if (rc == SQLITE_OK) rc = sqlite3_step(stmt);
  kiln_index_source_t record = {0};
  kiln_status_t status = NULL;
  if (rc == SQLITE_ROW)
    status = read_source_row(index, stmt, &record);
  else if (rc == SQLITE_DONE)
    status =
        KILN_STATUS(KILN_STATUS_NOT_FOUND, "cache index %s: no source with digest %s", index->path, digest);
  else
    status = sql_failure(index, rc, "get source");
  stmt_done(stmt);
  if (status) {
    kiln_index_source_deinit(&record);
    return status;
  }
  *out_record = record;
  return NULL;
}

kiln_status_t kiln_index_source_touch(kiln_index_t *index, const char *digest, int64_t now_ms) {
  if (!digest) return invalid("touch source", "digest is NULL");
  int changes = 0;
  KILN_RETURN_IF_ERROR(exec_write(index, STMT_SOURCE_TOUCH, digest, &now_ms, "touch source", &changes));
  if (changes == 0)
    return KILN_STATUS(KILN_STATUS_NOT_FOUND, "cache index %s: no source with digest %s", index->path,
                       digest);
  return NULL;
}

kiln_status_t kiln_index_artifact_evict(kiln_index_t *index, const char *cache_key, bool *out_evicted) {
  *out_evicted = false;
  if (!cache_key) return invalid("evict artifact", "cache key is NULL");
  int changes = 0;
  KILN_RETURN_IF_ERROR(exec_text(index, STMT_ARTIFACT_EVICT, cache_key, "evict artifact", &changes));
  *out_evicted = changes > 0;
  return NULL;
}

kiln_status_t kiln_index_source_evict(kiln_index_t *index, const char *digest, bool *out_evicted) {
  *out_evicted = false;
  if (!digest) return invalid("evict source", "digest is NULL");
  int changes = 0;
  KILN_RETURN_IF_ERROR(exec_text(index, STMT_SOURCE_EVICT, digest, "evict source", &changes));
  *out_evicted = changes > 0;
  return NULL;
}

static KILN_MUST_USE kiln_status_t read_source_any(kiln_index_t *index, sqlite3_stmt *stmt, void *out) {
  return read_source_row(index, stmt, out);
}

static void free_sources_any(void *records, size_t count) { kiln_index_sources_free(records, count); }

kiln_status_t kiln_index_source_lru(kiln_index_t *index, size_t limit, kiln_index_source_t **out_records,
                                    size_t *out_count) {
  *out_records = NULL;
  *out_count = 0;
  if (limit == 0) return NULL;
  sqlite3_stmt *stmt = index->stmts[STMT_SOURCE_LRU];
  int rc = SQLITE_OK;
  bind_count(stmt, 1, limit, &rc);
  void *records = NULL;
  KILN_RETURN_IF_ERROR(collect_rows(index, stmt, rc, "list source eviction candidates",
                                    sizeof(kiln_index_source_t), read_source_any, free_sources_any, &records,
                                    out_count));
  *out_records = records;
  return NULL;
}

/* ---- blobs: references, repair, quarantine ---------------------------------- */

kiln_status_t kiln_index_digest_referenced(kiln_index_t *index, const char *digest, bool *out_referenced) {
  *out_referenced = false;
  if (!digest) return invalid("check digest references", "digest is NULL");
  bool referenced = false;
  KILN_RETURN_IF_ERROR(
      query_bool(index, STMT_DIGEST_REFERENCED, digest, "check digest references", &referenced));
  *out_referenced = referenced;
  return NULL;
}

kiln_status_t kiln_index_visit_digests(kiln_index_t *index, kiln_index_digest_fn_t fn, void *user) {
  /* Collect first, then call: fn may use this same connection (repair drops the
   * rows of a missing blob), which must not happen under a running statement. */
  sqlite3_stmt *stmt = index->stmts[STMT_DIGESTS];
  char(*digests)[KILN_INDEX_DIGEST_LEN + 1] = NULL;
  size_t count = 0, capacity = 0;
  kiln_status_t status = NULL;
  int rc;
  while ((rc = sqlite3_step(stmt)) == SQLITE_ROW) {
    if (count == capacity) {
      capacity = capacity ? capacity * 2 : 64;
      digests = kiln_realloc(digests, capacity * sizeof *digests);
    }
    status = column_digest(index, stmt, 0, false, digests[count++]);
    if (status) break;
  }
  if (!status && rc != SQLITE_DONE) status = sql_failure(index, rc, "list digests");
  stmt_done(stmt);
  for (size_t i = 0; !status && i < count; i++) status = fn(user, digests[i]);
  kiln_free(digests);
  return status;
}

static KILN_MUST_USE kiln_status_t drop_rows(kiln_index_t *index, const char *digest, const char *reason,
                                             int64_t now_ms, size_t *out_rows) {
  static const char op[] = "drop digest";
  int artifacts = 0, sources = 0;
  KILN_RETURN_IF_ERROR(exec_text(index, STMT_DROP_ARTIFACTS, digest, op, &artifacts));
  KILN_RETURN_IF_ERROR(exec_text(index, STMT_DROP_SOURCES, digest, op, &sources));
  KILN_RETURN_IF_ERROR(exec_text(index, STMT_DROP_CHECK, digest, op, NULL));
  if (reason) {
    sqlite3_stmt *stmt = index->stmts[STMT_QUARANTINE_PUT];
    int rc = SQLITE_OK;
    bind_text(stmt, 1, digest, &rc);
    bind_text(stmt, 2, reason, &rc);
    bind_int64(stmt, 3, now_ms, &rc);
    if (rc == SQLITE_OK) rc = sqlite3_step(stmt);
    kiln_status_t status = rc == SQLITE_DONE ? NULL : sql_failure(index, rc, "quarantine digest");
    stmt_done(stmt);
    if (status) return status;
  }
  *out_rows = (size_t)artifacts + (size_t)sources;
  return NULL;
}

kiln_status_t kiln_index_drop_digest(kiln_index_t *index, const char *digest, const char *reason,
                                     int64_t now_ms, size_t *out_rows) {
  if (out_rows) *out_rows = 0;
  KILN_RETURN_IF_ERROR(check_digest("drop digest", "digest", digest));
  bool own = false;
  KILN_RETURN_IF_ERROR(tx_enter(index, "drop digest: begin", &own));
  size_t rows = 0;
  kiln_status_t status = drop_rows(index, digest, reason, now_ms, &rows);
  if (status) {
    tx_abort(index, own);
    return status;
  }
  KILN_RETURN_IF_ERROR(tx_leave(index, "drop digest: commit", own));
  if (out_rows) *out_rows = rows;
  return NULL;
}

/* ---- blob checks ------------------------------------------------------------------ */

kiln_status_t kiln_index_blob_check_put(kiln_index_t *index, const char *digest,
                                        const unsigned char check[KILN_INDEX_CHECK_BYTES]) {
  static const char op[] = "record blob check";
  KILN_RETURN_IF_ERROR(check_digest(op, "digest", digest));
  sqlite3_stmt *stmt = index->stmts[STMT_CHECK_PUT];
  int rc = SQLITE_OK;
  bind_text(stmt, 1, digest, &rc);
  if (rc == SQLITE_OK) rc = sqlite3_bind_blob(stmt, 2, check, KILN_INDEX_CHECK_BYTES, SQLITE_STATIC);
  if (rc == SQLITE_OK) rc = sqlite3_step(stmt);
  kiln_status_t status = rc == SQLITE_DONE ? NULL : sql_failure(index, rc, op);
  stmt_done(stmt);
  return status;
}

kiln_status_t kiln_index_blob_check_get(kiln_index_t *index, const char *digest,
                                        unsigned char out_check[KILN_INDEX_CHECK_BYTES]) {
  static const char op[] = "get blob check";
  memset(out_check, 0, KILN_INDEX_CHECK_BYTES);
  if (!digest) return invalid(op, "digest is NULL");
  sqlite3_stmt *stmt = index->stmts[STMT_CHECK_GET];
  int rc = SQLITE_OK;
  bind_text(stmt, 1, digest, &rc);
  if (rc == SQLITE_OK) rc = sqlite3_step(stmt);
  kiln_status_t status = NULL;
  if (rc == SQLITE_ROW) {
    const void *bytes = sqlite3_column_blob(stmt, 0);
    /* The schema's CHECK holds the length; only damage to the file breaks it. */
    if (bytes && sqlite3_column_bytes(stmt, 0) == KILN_INDEX_CHECK_BYTES)
      memcpy(out_check, bytes, KILN_INDEX_CHECK_BYTES);
    else
      status = KILN_STATUS(KILN_STATUS_DATA_LOSS,
                           "cache index %s: the check of blob %s is %d bytes, not %d; the "
                           "index is damaged: move it aside to start a fresh index",
                           index->path, digest, sqlite3_column_bytes(stmt, 0), KILN_INDEX_CHECK_BYTES);
  } else if (rc == SQLITE_DONE) {
    status = KILN_STATUS(KILN_STATUS_NOT_FOUND, "cache index %s: no check recorded for blob %s", index->path,
                         digest);
  } else {
    status = sql_failure(index, rc, op);
  }
  stmt_done(stmt);
  return status;
}

kiln_status_t kiln_index_blob_check_drop_unreferenced(kiln_index_t *index, const char *digest) {
  if (!digest) return invalid("drop blob check", "digest is NULL");
  return exec_text(index, STMT_CHECK_DROP_UNREFERENCED, digest, "drop blob check", NULL);
}

bool kiln_index_wrote(kiln_index_t *index) {
  int64_t now = sqlite3_total_changes64(index->db);
  bool wrote = now != index->changes_seen;
  index->changes_seen = now;
  return wrote;
}

kiln_status_t kiln_index_totals(kiln_index_t *index, kiln_index_totals_t *out_totals) {
  memset(out_totals, 0, sizeof *out_totals);
  sqlite3_stmt *stmt = index->stmts[STMT_TOTALS];
  int rc = sqlite3_step(stmt);
  kiln_status_t status = NULL;
  if (rc == SQLITE_ROW) {
    kiln_index_totals_t t = {
        .artifacts = (uint64_t)sqlite3_column_int64(stmt, 0),
        .artifact_bytes = (uint64_t)sqlite3_column_int64(stmt, 1),
        .artifact_stored_bytes = (uint64_t)sqlite3_column_int64(stmt, 2),
        .sources = (uint64_t)sqlite3_column_int64(stmt, 3),
        .source_bytes = (uint64_t)sqlite3_column_int64(stmt, 4),
        .source_stored_bytes = (uint64_t)sqlite3_column_int64(stmt, 5),
        .pinned = (uint64_t)sqlite3_column_int64(stmt, 6),
        .hits = (uint64_t)sqlite3_column_int64(stmt, 7),
        .quarantined = (uint64_t)sqlite3_column_int64(stmt, 8),
    };
    *out_totals = t;
  } else {
    status = sql_failure(index, rc == SQLITE_DONE ? SQLITE_INTERNAL : rc, "totals");
  }
  stmt_done(stmt);
  return status;
}

kiln_status_t kiln_index_check_integrity(kiln_index_t *index, bool full, char **out_problem) {
  *out_problem = NULL;
  sqlite3_stmt *stmt = NULL;
  int rc = sqlite3_prepare_v2(index->db, full ? "PRAGMA integrity_check(20)" : "PRAGMA quick_check(20)", -1,
                              &stmt, NULL);
  kiln_buf_t problem;
  kiln_buf_init(&problem);
  bool ok = false;
  if (rc == SQLITE_OK) {
    while ((rc = sqlite3_step(stmt)) == SQLITE_ROW) {
      const char *line = (const char *)sqlite3_column_text(stmt, 0);
      if (!line) continue;
      if (!strcmp(line, "ok") && problem.len == 0) {
        ok = true;
        continue;
      }
      if (problem.len) kiln_buf_append_str(&problem, "; ");
      kiln_buf_append_str(&problem, line);
    }
  }
  kiln_status_t status = NULL;
  if (rc == SQLITE_CORRUPT || rc == SQLITE_NOTADB) {
    /* Too damaged for the check itself to run: that is the answer. */
    if (problem.len) kiln_buf_append_str(&problem, "; ");
    kiln_buf_append_str(&problem, sqlite3_errmsg(index->db));
    ok = false;
  } else if (rc != SQLITE_DONE && rc != SQLITE_OK) {
    status = sql_failure(index, rc, full ? "integrity_check" : "quick_check");
  }
  sqlite3_finalize(stmt);
  if (!status && !ok) *out_problem = kiln_buf_take(&problem);
  kiln_buf_deinit(&problem);
  return status;
}
