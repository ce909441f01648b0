/* The job engine and the job store (cache/jobstore.h): snapshots of jobs written
 * on the thread pool, one flush at a time; at start-up, finished jobs come back
 * watchable and unfinished ones come back as placeholders, admitted again under
 * their ids once a worker is ready (their finished targets are cache hits by
 * then, so only unfinished work runs again).
 */
#include <stdio.h>
#include <string.h>

#include "base/alloc.h"
#include "base/log.h"
#include "base/time.h"
#include "daemon/jobs/jobs_impl.h"

/* ---- snapshots ---- */

static void snapshot(const job_t *job, kiln_jobstore_job_t *out) {
  memset(out, 0, sizeof *out);
  out->id = kiln_strdup(job->id);
  out->state = (int)job->state;
  out->priority = (int)job->priority;
  out->client = kiln_strdup(job->client ? job->client : "");
  out->request_id = job->request_id ? kiln_strdup(job->request_id) : NULL;
  memcpy(out->request_hash, job->request_hash, sizeof out->request_hash);
  memcpy(out->source_digest, job->source_digest, sizeof out->source_digest);
  out->source_name = kiln_strdup(job->source_name ? job->source_name : "");
  out->flags = kiln_strdup(job->flags ? job->flags : "");
  out->created_unix_ms = job->created_unix_ms;
  out->finished_unix_ms = job_terminal(job) ? job->finished_unix_ms : 0;
  out->message = kiln_strdup(job->terminal_message ? job->terminal_message : "");
  out->n_targets = job->n_targets;
  out->targets = kiln_calloc(job->n_targets ? job->n_targets : 1, sizeof *out->targets);
  for (size_t i = 0; i < job->n_targets; i++) {
    const job_target_t *jt = &job->targets[i];
    kiln_jobstore_target_t *t = &out->targets[i];
    t->target = kiln_strdup(jt->target);
    memcpy(t->cache_key, jt->key, sizeof t->cache_key);
    t->state = jt->state == TARGET_DONE     ? KILN_JOBSTORE_TARGET_DONE
               : jt->state == TARGET_FAILED ? KILN_JOBSTORE_TARGET_FAILED
                                            : KILN_JOBSTORE_TARGET_PENDING;
    memcpy(t->artifact_digest, jt->digest, sizeof t->artifact_digest);
    t->size_bytes = jt->size;
    t->cache_hit = jt->cache_hit;
    t->compile_ms = jt->compile_ms;
    t->code = jt->code;
    t->message = jt->message ? kiln_strdup(jt->message) : NULL;
  }
}

void persist_later_locked(kilnd_jobs_t *jobs, job_t *job) {
  /* A job answered wholly from the cache has nothing a restart could lose: its
   * results are the cache's. Skipping it keeps hits off SQLite's write path. */
  if (!jobs->store || jobs->closing || job->ephemeral) return;
  jobs->persist = kiln_realloc(jobs->persist, (jobs->n_persist + 1) * sizeof *jobs->persist);
  snapshot(job, &jobs->persist[jobs->n_persist++]);
  uv_async_send(&jobs->kick);
}

typedef struct flush_s {
  uv_work_t work;
  kilnd_jobs_t *jobs;
  kiln_jobstore_job_t *records;
  size_t n;
} flush_t;

static void on_flush(uv_work_t *work) {
  flush_t *f = work->data;
  /* Everything that piled up since the last flush, as one transaction. A job may
   * appear twice (admitted, then finished): the later record wins. */
  kiln_status_t st = kiln_jobstore_put_many(f->jobs->store, f->records, f->n);
  if (st) {
    /* The jobs themselves are unaffected; only a restart would not know them. */
    kiln_log_status(KILN_LOG_WARN, "job_store_put_failed", st, "jobs=%zu", f->n);
    kiln_status_free(st);
  }
}

static void on_flush_done(uv_work_t *work, int status) {
  (void)status;
  flush_t *f = work->data;
  kilnd_jobs_t *jobs = f->jobs;
  kiln_jobstore_jobs_free(f->records, f->n);
  kiln_free(f);
  engine_lock(jobs);
  jobs->flushing = false;
  if (!jobs->closing) start_flush_locked(jobs);
  engine_unlock(jobs);
  jobs->handles_open--;
  maybe_closed(jobs);
}

void start_flush_locked(kilnd_jobs_t *jobs) {
  if (jobs->flushing || jobs->n_persist == 0) return;
  flush_t *f = kiln_calloc(1, sizeof *f);
  f->jobs = jobs;
  f->records = jobs->persist;
  f->n = jobs->n_persist;
  jobs->persist = NULL;
  jobs->n_persist = 0;
  f->work.data = f;
  jobs->flushing = true;
  jobs->handles_open++;
  if (uv_queue_work(jobs->loop, &f->work, on_flush, on_flush_done) != 0) {
    jobs->flushing = false;
    jobs->handles_open--;
    kiln_jobstore_jobs_free(f->records, f->n);
    kiln_free(f);
  }
}

/* ---- start-up ---- */

/* A job as a stored record describes it, unlinked: what a finished and an
 * unfinished record have in common. */
static job_t *job_from_record(const kiln_jobstore_job_t *rec) {
  job_t *job = kiln_calloc(1, sizeof *job);
  snprintf(job->id, sizeof job->id, "%s", rec->id);
  job->priority = (kilnd_priority_t)rec->priority;
  job->request_id = rec->request_id ? kiln_strdup(rec->request_id) : NULL;
  memcpy(job->request_hash, rec->request_hash, sizeof job->request_hash);
  memcpy(job->source_digest, rec->source_digest, sizeof job->source_digest);
  job->source_name = kiln_strdup(rec->source_name ? rec->source_name : "");
  job->flags = kiln_strdup(rec->flags ? rec->flags : "");
  job->created_unix_ms = rec->created_unix_ms;
  job->deadline_monotonic_ns = INT64_MAX;
  job->n_targets = rec->n_targets;
  job->targets = kiln_calloc(rec->n_targets ? rec->n_targets : 1, sizeof *job->targets);
  for (size_t i = 0; i < rec->n_targets; i++) {
    job->targets[i].target = kiln_strdup(rec->targets[i].target);
    memcpy(job->targets[i].key, rec->targets[i].cache_key, sizeof job->targets[i].key);
  }
  return job;
}

/* A finished job from the store, with the events a watcher would have seen. */
static void restore_locked(kilnd_jobs_t *jobs, const kiln_jobstore_job_t *rec) {
  job_t *job = job_from_record(rec);
  job->state = (kilnd_job_state_t)rec->state;
  job->client = kiln_strdup(rec->client ? rec->client : "");
  job->finished_unix_ms = rec->finished_unix_ms;
  job->finished_monotonic_ns =
      kiln_time_monotonic_ns() - (kiln_time_unix_ms() - rec->finished_unix_ms) * 1000000;
  job->admitted_state = job->state; /* a retry after a restart learns where the job ended */
  for (size_t i = 0; i < rec->n_targets; i++) {
    job->targets[i].state = rec->targets[i].state == KILN_JOBSTORE_TARGET_DONE ? TARGET_DONE : TARGET_FAILED;
  }
  job_link_locked(jobs, job);
  emit_queued_locked(jobs, job, 0);
  for (size_t i = 0; i < rec->n_targets; i++) {
    const kiln_jobstore_target_t *t = &rec->targets[i];
    if (t->state == KILN_JOBSTORE_TARGET_DONE) {
      emit_target_done_locked(jobs, job, i, t->artifact_digest, t->size_bytes, t->cache_hit, t->compile_ms);
    } else {
      emit_target_failed_locked(jobs, job, i,
                                (kiln_status_code_t)(t->code ? t->code : KILN_STATUS_UNAVAILABLE),
                                t->message ? t->message : "the job ended before kilnd restarted");
    }
  }
  emit_terminal_event_locked(jobs, job, rec->message); /* not emit_terminal: it is already in the store */
  job->terminal_message = kiln_strdup(rec->message ? rec->message : "");
}

/* An unfinished job from the store, QUEUED until a worker is ready and admission
 * fills it in (admit with its id): watchable from the first moment. */
static void placeholder_locked(kilnd_jobs_t *jobs, const kiln_jobstore_job_t *rec) {
  job_t *job = job_from_record(rec);
  job->state = KILND_JOB_QUEUED;
  job->admitted_state = KILND_JOB_QUEUED; /* a retry before readmission: queued, as it is */
  job->client = kiln_strdup(rec->client && *rec->client ? rec->client : "anonymous");
  job_link_locked(jobs, job);
  usage_add_locked(jobs, job); /* unfinished: it counts from start-up, before it is admitted again */
  emit_queued_locked(jobs, job, 0);
}

/* Under mu (at create): forget what is past its retention, restore the finished,
 * keep the unfinished for readmission. */
void load_store(kilnd_jobs_t *jobs) {
  int64_t cut = kiln_time_unix_ms() - jobs->options.retention_ms;
  kiln_status_t st = kiln_jobstore_prune(jobs->store, cut, NULL);
  kiln_jobstore_job_t *recs = NULL;
  size_t n = 0;
  if (!st) st = kiln_jobstore_load(jobs->store, cut, &recs, &n);
  if (st) {
    kiln_log_status(KILN_LOG_WARN, "job_store_load_failed", st, NULL);
    kiln_status_free(st);
    return;
  }
  size_t restored = 0;
  for (size_t i = 0; i < n; i++) {
    if (recs[i].finished_unix_ms) {
      restore_locked(jobs, &recs[i]);
      restored++;
      continue;
    }
    placeholder_locked(jobs, &recs[i]);
    jobs->readmit = kiln_realloc(jobs->readmit, (jobs->n_readmit + 1) * sizeof *jobs->readmit);
    jobs->readmit[jobs->n_readmit++] = recs[i];
    memset(&recs[i], 0, sizeof recs[i]);
  }
  kiln_jobstore_jobs_free(recs, n);
  if (n)
    kiln_log(KILN_LOG_INFO, "job_store_loaded", "finished=%zu to_readmit=%zu", restored, jobs->n_readmit);
}

/* ---- readmission ---- */

typedef struct readmit_s {
  uv_work_t work;
  kilnd_jobs_t *jobs;
  kiln_jobstore_job_t *records;
  size_t n;
  kiln_status_t *failed; /* per record: why it could not be admitted again (owned), or NULL */
} readmit_t;

/* Thread pool: admits the jobs a restart interrupted, under their old ids. */
static void on_readmit(uv_work_t *work) {
  readmit_t *ra = work->data;
  for (size_t i = 0; i < ra->n; i++) {
    kiln_jobstore_job_t *rec = &ra->records[i];
    const char **targets = kiln_calloc(rec->n_targets ? rec->n_targets : 1, sizeof *targets);
    for (size_t t = 0; t < rec->n_targets; t++) targets[t] = rec->targets[t].target;
    const char *flags[128];
    size_t n_flags = 0;
    char *copy = kiln_strdup(rec->flags ? rec->flags : "");
    for (char *p = copy; *p && n_flags < 128;) {
      char *nl = strchr(p, '\n');
      if (nl) *nl = '\0';
      if (*p) flags[n_flags++] = p;
      if (!nl) break;
      p = nl + 1;
    }
    kilnd_job_request_t r = {.source_digest = rec->source_digest,
                             .source_name = rec->source_name,
                             .targets = targets,
                             .n_targets = rec->n_targets,
                             .flags = flags,
                             .n_flags = n_flags,
                             .priority = (kilnd_priority_t)rec->priority,
                             .client = rec->client,
                             .request_id = rec->request_id,
                             .deadline_monotonic_ns = INT64_MAX};
    kilnd_job_admission_t adm;
    kiln_status_t st = admit_blocking(ra->jobs, &r, rec->id, rec->created_unix_ms, &adm);
    if (st) {
      kiln_log_status(KILN_LOG_WARN, "job_readmit_failed", st, "job=%s", rec->id);
      ra->failed[i] = st; /* the loop fails the placeholder with it */
    } else {
      kiln_log(KILN_LOG_INFO, "job_readmitted", "job=%s targets=%zu", rec->id, rec->n_targets);
      kilnd_job_admission_deinit(&adm);
    }
    kiln_free(copy);
    kiln_free(targets);
  }
}

static void on_readmit_done(uv_work_t *work, int status) {
  (void)status;
  readmit_t *ra = work->data;
  kilnd_jobs_t *jobs = ra->jobs;
  engine_lock(jobs);
  for (size_t i = 0; i < ra->n; i++) {
    if (!ra->failed[i]) continue;
    job_t *job = jobs->closing ? NULL : find_job_locked(jobs, ra->records[i].id);
    if (job && !job_terminal(job)) {
      char message[512];
      snprintf(message, sizeof message, "kilnd restarted and could not run the job again: %s",
               kiln_status_message(ra->failed[i]));
      stop_job_locked(jobs, job, KILND_JOB_FAILED, kiln_status_code(ra->failed[i]), message);
    }
    kiln_status_free(ra->failed[i]);
  }
  engine_unlock(jobs);
  kiln_free(ra->failed);
  kiln_jobstore_jobs_free(ra->records, ra->n);
  kiln_free(ra);
  jobs->handles_open--;
  maybe_closed(jobs);
}

/* Loop thread, under mu: once the compiler is known. */
void start_readmit_locked(kilnd_jobs_t *jobs) {
  if (!jobs->n_readmit || !jobs->compiler) return;
  readmit_t *ra = kiln_calloc(1, sizeof *ra);
  ra->jobs = jobs;
  ra->records = jobs->readmit;
  ra->n = jobs->n_readmit;
  ra->failed = kiln_calloc(ra->n ? ra->n : 1, sizeof *ra->failed);
  jobs->readmit = NULL;
  jobs->n_readmit = 0;
  ra->work.data = ra;
  jobs->handles_open++;
  if (uv_queue_work(jobs->loop, &ra->work, on_readmit, on_readmit_done) != 0) {
    jobs->handles_open--;
    kiln_free(ra->failed);
    kiln_jobstore_jobs_free(ra->records, ra->n);
    kiln_free(ra);
  }
}
