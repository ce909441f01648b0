/* The job store over SQLite (see jobstore.h).
 *
 * Schema (user_version 1):
 *   jobs(id PRIMARY KEY, state, priority, client, request_id, request_hash,
 *        source_digest, source_name, flags, created_ms, finished_ms, message)
 *   job_targets(job_id, idx, target, cache_key, state, artifact_digest, size,
 *               cache_hit, compile_ms, code, message; PRIMARY KEY (job_id, idx))
 * A put replaces the job row and all its target rows in one transaction, so a
 * reader never sees a job with half its targets; a batch of puts is one
 * transaction, over statements prepared once. WAL, synchronous NORMAL: a crash
 * may lose the last put, never corrupt the file (the cache still has the
 * artifacts; a lost record only means the job is admitted again or forgotten).
 */
#include "cache/jobstore.h"

#include <sqlite3.h>
#include <stdio.h>
#include <string.h>
#include <pthread.h>

#include "base/alloc.h"
#include "cache/sqlerr.h"

#define BUSY_TIMEOUT_MS 5000
#define WHAT            "job store"

struct kiln_jobstore_s {
  sqlite3 *db;
  char *path;
  pthread_mutex_t mu;
  sqlite3_stmt *put_job, *put_del, *put_target; /* prepare_puts */
};

static const char schema_v1[] =
    "CREATE TABLE IF NOT EXISTS jobs ("
    "  id TEXT PRIMARY KEY, state INTEGER NOT NULL, priority INTEGER NOT NULL, client TEXT NOT NULL,"
    "  request_id TEXT, request_hash TEXT NOT NULL, source_digest TEXT NOT NULL, source_name TEXT NOT NULL,"
    "  flags TEXT NOT NULL, created_ms INTEGER NOT NULL, finished_ms INTEGER NOT NULL, message TEXT NOT NULL"
    ") STRICT;"
    "CREATE INDEX IF NOT EXISTS jobs_finished ON jobs(finished_ms);"
    "CREATE TABLE IF NOT EXISTS job_targets ("
    "  job_id TEXT NOT NULL REFERENCES jobs(id) ON DELETE CASCADE, idx INTEGER NOT NULL,"
    "  target TEXT NOT NULL, cache_key TEXT NOT NULL, state INTEGER NOT NULL,"
    "  artifact_digest TEXT NOT NULL, size INTEGER NOT NULL, cache_hit INTEGER NOT NULL,"
    "  compile_ms INTEGER NOT NULL, code INTEGER NOT NULL, message TEXT NOT NULL,"
    "  PRIMARY KEY (job_id, idx)) STRICT;"
    "PRAGMA user_version = 1;";

#define FAIL(store, rc, op) \
  kiln_sql_failure_at((store)->db, WHAT, (store)->path, BUSY_TIMEOUT_MS, (rc), (op), __FILE__, __LINE__)

kiln_status_t kiln_jobstore_open(const char *path, kiln_jobstore_t **out_store) {
  *out_store = NULL;
  kiln_jobstore_t *s = kiln_calloc(1, sizeof *s);
  s->path = kiln_strdup(path);
  int rc =
      sqlite3_open_v2(path, &s->db, SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE | SQLITE_OPEN_NOMUTEX, NULL);
  kiln_status_t st = NULL;
  if (rc != SQLITE_OK) st = FAIL(s, rc, "open");
  if (!st) {
    sqlite3_busy_timeout(s->db, BUSY_TIMEOUT_MS);
    rc = sqlite3_exec(s->db, "PRAGMA journal_mode=WAL; PRAGMA synchronous=NORMAL; PRAGMA foreign_keys=ON;",
                      NULL, NULL, NULL);
    if (rc != SQLITE_OK) st = FAIL(s, rc, "configure");
  }
  int version = 0;
  if (!st) {
    sqlite3_stmt *v = NULL;
    rc = sqlite3_prepare_v2(s->db, "PRAGMA user_version", -1, &v, NULL);
    if (rc == SQLITE_OK && sqlite3_step(v) == SQLITE_ROW)
      version = sqlite3_column_int(v, 0);
    else
      st = FAIL(s, rc == SQLITE_OK ? SQLITE_CORRUPT : rc, "read the schema version");
    sqlite3_finalize(v);
  }
  if (!st && version > 1) {
    st = KILN_STATUS(
        KILN_STATUS_FAILED_PRECONDITION,
        "job store %s has schema version %d, newer than this kilnd knows (1): it was written by a "
        "newer kilnd; run that one, or move the file aside",
        path, version);
  }
  if (!st && version < 1) {
    rc = sqlite3_exec(s->db, "BEGIN IMMEDIATE;", NULL, NULL, NULL);
    if (rc == SQLITE_OK) rc = sqlite3_exec(s->db, schema_v1, NULL, NULL, NULL);
    if (rc == SQLITE_OK) rc = sqlite3_exec(s->db, "COMMIT;", NULL, NULL, NULL);
    if (rc != SQLITE_OK) {
      st = FAIL(s, rc, "create the schema");
      sqlite3_exec(s->db, "ROLLBACK;", NULL, NULL, NULL);
    }
  }
  if (st) {
    sqlite3_close(s->db);
    kiln_free(s->path);
    kiln_free(s);
    return st;
  }
  pthread_mutex_init(&s->mu, NULL);
  *out_store = s;
  return NULL;
}

void kiln_jobstore_close(kiln_jobstore_t *store) {
  if (!store) return;
  sqlite3_finalize(store->put_job);
  sqlite3_finalize(store->put_del);
  sqlite3_finalize(store->put_target);
  sqlite3_close(store->db);
  pthread_mutex_destroy(&store->mu);
  kiln_free(store->path);
  kiln_free(store);
}

static void bind_text(sqlite3_stmt *s, int i, const char *v) {
  if (v)
    sqlite3_bind_text(s, i, v, -1, SQLITE_TRANSIENT);
  else
    sqlite3_bind_null(s, i);
}

/* The put statements, prepared once (persistent) on first use; under mu. */
static KILN_MUST_USE kiln_status_t prepare_puts(kiln_jobstore_t *store) {
  if (store->put_job) return NULL;
  static const char *const sql[3] = {
      "INSERT OR REPLACE INTO jobs VALUES (?1,?2,?3,?4,?5,?6,?7,?8,?9,?10,?11,?12)",
      "DELETE FROM job_targets WHERE job_id = ?1",
      "INSERT INTO job_targets VALUES (?1,?2,?3,?4,?5,?6,?7,?8,?9,?10,?11)",
  };
  sqlite3_stmt **out[3] = {&store->put_job, &store->put_del, &store->put_target};
  for (int i = 0; i < 3; i++) {
    int rc = sqlite3_prepare_v3(store->db, sql[i], -1, SQLITE_PREPARE_PERSISTENT, out[i], NULL);
    if (rc != SQLITE_OK) {
      kiln_status_t st = FAIL(store, rc, "prepare a put");
      for (int k = 0; k < 3; k++) {
        sqlite3_finalize(*out[k]);
        *out[k] = NULL;
      }
      return st;
    }
  }
  return NULL;
}

static KILN_MUST_USE kiln_status_t put_one(kiln_jobstore_t *store, const kiln_jobstore_job_t *job) {
  sqlite3_stmt *j = store->put_job, *del = store->put_del, *t = store->put_target;
  sqlite3_reset(j);
  bind_text(j, 1, job->id);
  sqlite3_bind_int(j, 2, job->state);
  sqlite3_bind_int(j, 3, job->priority);
  bind_text(j, 4, job->client ? job->client : "");
  bind_text(j, 5, job->request_id);
  bind_text(j, 6, job->request_hash);
  bind_text(j, 7, job->source_digest);
  bind_text(j, 8, job->source_name ? job->source_name : "");
  bind_text(j, 9, job->flags ? job->flags : "");
  sqlite3_bind_int64(j, 10, job->created_unix_ms);
  sqlite3_bind_int64(j, 11, job->finished_unix_ms);
  bind_text(j, 12, job->message ? job->message : "");
  int rc = sqlite3_step(j);
  if (rc != SQLITE_DONE) return FAIL(store, rc, "write a job");
  sqlite3_reset(del);
  bind_text(del, 1, job->id);
  rc = sqlite3_step(del);
  if (rc != SQLITE_DONE) return FAIL(store, rc, "replace a job's targets");
  for (size_t i = 0; i < job->n_targets; i++) {
    const kiln_jobstore_target_t *x = &job->targets[i];
    sqlite3_reset(t);
    bind_text(t, 1, job->id);
    sqlite3_bind_int64(t, 2, (sqlite3_int64)i);
    bind_text(t, 3, x->target);
    bind_text(t, 4, x->cache_key);
    sqlite3_bind_int(t, 5, (int)x->state);
    bind_text(t, 6, x->artifact_digest);
    sqlite3_bind_int64(t, 7, (sqlite3_int64)x->size_bytes);
    sqlite3_bind_int(t, 8, x->cache_hit);
    sqlite3_bind_int64(t, 9, (sqlite3_int64)x->compile_ms);
    sqlite3_bind_int(t, 10, x->code);
    bind_text(t, 11, x->message ? x->message : "");
    rc = sqlite3_step(t);
    if (rc != SQLITE_DONE) return FAIL(store, rc, "write a job target");
  }
  return NULL;
}

kiln_status_t kiln_jobstore_put_many(kiln_jobstore_t *store, const kiln_jobstore_job_t *jobs, size_t count) {
  if (count == 0) return NULL;
  pthread_mutex_lock(&store->mu);
  kiln_status_t st = prepare_puts(store);
  if (!st) {
    int rc = sqlite3_exec(store->db, "BEGIN IMMEDIATE;", NULL, NULL, NULL);
    if (rc != SQLITE_OK) st = FAIL(store, rc, "begin a put");
  }
  bool begun = !st;
  for (size_t i = 0; !st && i < count; i++) st = put_one(store, &jobs[i]);
  if (!st) {
    int rc = sqlite3_exec(store->db, "COMMIT;", NULL, NULL, NULL);
    if (rc != SQLITE_OK) st = FAIL(store, rc, "commit a put");
  }
  if (st && begun) sqlite3_exec(store->db, "ROLLBACK;", NULL, NULL, NULL);
  /* Statements hold no bindings or read locks between puts. */
  if (store->put_job) {
    sqlite3_reset(store->put_job);
    sqlite3_reset(store->put_del);
    sqlite3_reset(store->put_target);
    sqlite3_clear_bindings(store->put_job);
    sqlite3_clear_bindings(store->put_del);
    sqlite3_clear_bindings(store->put_target);
  }
  pthread_mutex_unlock(&store->mu);
  return st;
}

static char *column_text(sqlite3_stmt *s, int i) {
  const unsigned char *v = sqlite3_column_text(s, i);
  return v ? kiln_strdup((const char *)v) : NULL;
}

static void column_fixed(sqlite3_stmt *s, int i, char out[65]) {
  const unsigned char *v = sqlite3_column_text(s, i);
  snprintf(out, 65, "%s", v ? (const char *)v : "");
}

kiln_status_t kiln_jobstore_load(kiln_jobstore_t *store, int64_t since_unix_ms,
                                 kiln_jobstore_job_t **out_jobs, size_t *out_count) {
  *out_jobs = NULL;
  *out_count = 0;
  pthread_mutex_lock(&store->mu);
  kiln_status_t st = NULL;
  sqlite3_stmt *q = NULL, *t = NULL;
  int rc = sqlite3_prepare_v2(store->db,
                              "SELECT id, state, priority, client, request_id, request_hash, source_digest, "
                              "source_name, flags, created_ms, finished_ms, message FROM jobs "
                              "WHERE finished_ms = 0 OR finished_ms >= ?1 ORDER BY created_ms, id",
                              -1, &q, NULL);
  if (rc == SQLITE_OK) {
    rc = sqlite3_prepare_v2(
        store->db,
        "SELECT target, cache_key, state, artifact_digest, size, cache_hit, compile_ms, code, "
        "message FROM job_targets WHERE job_id = ?1 ORDER BY idx",
        -1, &t, NULL);
  }
  if (rc != SQLITE_OK) st = FAIL(store, rc, "prepare a load");
  kiln_jobstore_job_t *jobs = NULL;
  size_t n = 0;
  if (!st) sqlite3_bind_int64(q, 1, since_unix_ms);
  while (!st && (rc = sqlite3_step(q)) == SQLITE_ROW) {
    jobs = kiln_realloc(jobs, (n + 1) * sizeof *jobs);
    kiln_jobstore_job_t *job = &jobs[n++];
    memset(job, 0, sizeof *job);
    job->id = column_text(q, 0);
    job->state = sqlite3_column_int(q, 1);
    job->priority = sqlite3_column_int(q, 2);
    job->client = column_text(q, 3);
    job->request_id = column_text(q, 4);
    column_fixed(q, 5, job->request_hash);
    column_fixed(q, 6, job->source_digest);
    job->source_name = column_text(q, 7);
    job->flags = column_text(q, 8);
    job->created_unix_ms = sqlite3_column_int64(q, 9);
    job->finished_unix_ms = sqlite3_column_int64(q, 10);
    job->message = column_text(q, 11);
    sqlite3_reset(t);
    sqlite3_bind_text(t, 1, job->id ? job->id : "", -1, SQLITE_TRANSIENT);
    while ((rc = sqlite3_step(t)) == SQLITE_ROW) {
      job->targets = kiln_realloc(job->targets, (job->n_targets + 1) * sizeof *job->targets);
      kiln_jobstore_target_t *x = &job->targets[job->n_targets++];
      memset(x, 0, sizeof *x);
      x->target = column_text(t, 0);
      column_fixed(t, 1, x->cache_key);
      x->state = (kiln_jobstore_target_state_t)sqlite3_column_int(t, 2);
      column_fixed(t, 3, x->artifact_digest);
      x->size_bytes = (uint64_t)sqlite3_column_int64(t, 4);
      x->cache_hit = sqlite3_column_int(t, 5) != 0;
      x->compile_ms = (uint64_t)sqlite3_column_int64(t, 6);
      x->code = sqlite3_column_int(t, 7);
      x->message = column_text(t, 8);
    }
    if (rc != SQLITE_DONE) st = FAIL(store, rc, "read a job's targets");
  }
  if (!st && rc != SQLITE_DONE) st = FAIL(store, rc, "read jobs");
  sqlite3_finalize(q);
  sqlite3_finalize(t);
  pthread_mutex_unlock(&store->mu);
  if (st) {
    kiln_jobstore_jobs_free(jobs, n);
    return st;
  }
  *out_jobs = jobs;
  *out_count = n;
  return NULL;
}

kiln_status_t kiln_jobstore_prune(kiln_jobstore_t *store, int64_t before_unix_ms, size_t *out_deleted) {
  if (out_deleted) *out_deleted = 0;
  pthread_mutex_lock(&store->mu);
  sqlite3_stmt *d = NULL;
  kiln_status_t st = NULL;
  int rc = sqlite3_prepare_v2(store->db, "DELETE FROM jobs WHERE finished_ms > 0 AND finished_ms < ?1", -1,
                              &d, NULL);
  if (rc == SQLITE_OK) {
    sqlite3_bind_int64(d, 1, before_unix_ms);
    rc = sqlite3_step(d);
  }
  if (rc != SQLITE_DONE)
    st = FAIL(store, rc, "prune finished jobs");
  else if (out_deleted)
    *out_deleted = (size_t)sqlite3_changes(store->db);
  sqlite3_finalize(d);
  pthread_mutex_unlock(&store->mu);
  return st;
}

void kiln_jobstore_job_deinit(kiln_jobstore_job_t *job) {
  kiln_free(job->id);
  kiln_free(job->client);
  kiln_free(job->request_id);
  kiln_free(job->source_name);
  kiln_free(job->flags);
  kiln_free(job->message);
  for (size_t i = 0; i < job->n_targets; i++) {
    kiln_free(job->targets[i].target);
    kiln_free(job->targets[i].message);
  }
  kiln_free(job->targets);
  memset(job, 0, sizeof *job);
}

void kiln_jobstore_jobs_free(kiln_jobstore_job_t *jobs, size_t count) {
  for (size_t i = 0; i < count; i++) kiln_jobstore_job_deinit(&jobs[i]);
  kiln_free(jobs);
}
