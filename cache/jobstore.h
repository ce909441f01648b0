/* The job store: kilnd's job records in SQLite (state-dir/jobs.db), so a restart
 * neither loses nor repeats finished work.
 *
 * A record is written when a job is admitted and again when it ends: its request
 * (source digest, name, canonical targets, normalized flags, priority, client,
 * request id) and, per target, the outcome (artifact digest and size, or the
 * failure's code and message). On start-up kilnd loads the records: finished ones
 * come back watchable (their events rebuilt from the outcomes) until their
 * retention ends; unfinished ones are admitted again (targets that finished before
 * the restart are cache hits, so no work repeats).
 *
 * Its own file, apart from the artifact index, so job bookkeeping never waits on
 * cache maintenance. Thread-safe: one connection behind a mutex (two short
 * transactions per job).
 */
#ifndef KILN_CACHE_JOBSTORE_H
#define KILN_CACHE_JOBSTORE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "base/status.h"

typedef struct kiln_jobstore_s kiln_jobstore_t;

typedef enum kiln_jobstore_target_state_e {
  KILN_JOBSTORE_TARGET_PENDING = 0,
  KILN_JOBSTORE_TARGET_DONE = 1,
  KILN_JOBSTORE_TARGET_FAILED = 2,
} kiln_jobstore_target_state_t;

typedef struct kiln_jobstore_target_s {
  char *target; /* canonical id */
  char cache_key[65];
  kiln_jobstore_target_state_t state;
  char artifact_digest[65]; /* DONE */
  uint64_t size_bytes;      /* DONE */
  bool cache_hit;           /* DONE */
  uint64_t compile_ms;      /* DONE */
  int code;                 /* FAILED: gRPC code */
  char *message;            /* FAILED */
} kiln_jobstore_target_t;

typedef struct kiln_jobstore_job_s {
  char *id;
  int state;    /* kilnd_job_state_t values (1 queued .. 5 cancelled) */
  int priority; /* 1 interactive, 2 batch, 3 bulk */
  char *client;
  char *request_id; /* may be NULL */
  char request_hash[65];
  char source_digest[65];
  char *source_name;
  char *flags; /* normalized, one per line */
  int64_t created_unix_ms;
  int64_t finished_unix_ms; /* 0 while unfinished */
  char *message;            /* the Terminal event's message, when finished */
  kiln_jobstore_target_t *targets;
  size_t n_targets;
} kiln_jobstore_job_t;

/* Opens (creating and migrating) the store at `path`. INTERNAL / DATA_LOSS with
 * SQLite's message when the file cannot be opened or is damaged. */
KILN_MUST_USE kiln_status_t kiln_jobstore_open(const char *path, kiln_jobstore_t **out_store);
void kiln_jobstore_close(kiln_jobstore_t *store);

/* Writes `count` jobs and their targets in one transaction: all of them, or on an
 * error none. Each replaces an earlier record of the same id. */
KILN_MUST_USE kiln_status_t kiln_jobstore_put_many(kiln_jobstore_t *store, const kiln_jobstore_job_t *jobs,
                                                   size_t count);

/* Every unfinished job and every job finished at or after `since_unix_ms`, oldest
 * first. *out_jobs is owned by the caller (kiln_jobstore_jobs_free). */
KILN_MUST_USE kiln_status_t kiln_jobstore_load(kiln_jobstore_t *store, int64_t since_unix_ms,
                                               kiln_jobstore_job_t **out_jobs, size_t *out_count);

/* Deletes jobs finished before `before_unix_ms`; *out_deleted (optional) counts them. */
KILN_MUST_USE kiln_status_t kiln_jobstore_prune(kiln_jobstore_t *store, int64_t before_unix_ms,
                                                size_t *out_deleted);

void kiln_jobstore_job_deinit(kiln_jobstore_job_t *job);
void kiln_jobstore_jobs_free(kiln_jobstore_job_t *jobs, size_t count);

#endif /* KILN_CACHE_JOBSTORE_H */
