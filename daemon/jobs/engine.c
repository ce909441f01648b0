/* The job engine's life cycle and its small API: create, close and destroy; the
 * lock and the outbox (jobs_impl.h states the rules); the job index; retention
 * and deadlines (the sweep); cancel, listen, stats and the compiler identity.
 */
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "base/alloc.h"
#include "base/digest.h"
#include "base/log.h"
#include "base/time.h"
#include "daemon/jobs/jobs_impl.h"

/* ---- the lock ---- */

void engine_lock(kilnd_jobs_t *jobs) { uv_mutex_lock(&jobs->mu); }

void engine_unlock(kilnd_jobs_t *jobs) {
  effect_t *effects = outbox_take_locked(jobs);
  uv_mutex_unlock(&jobs->mu);
  run_effects(jobs, effects);
}

void engine_unlock_off_loop(kilnd_jobs_t *jobs) {
  bool wake = jobs->outbox != NULL;
  uv_mutex_unlock(&jobs->mu);
  if (wake) uv_async_send(&jobs->kick);
}

/* ---- small helpers ---- */

void source_release(source_t *s) {
  if (!s || --s->refs > 0) return;
  kiln_free(s->data);
  kiln_free(s->name);
  kiln_free(s);
}

kiln_index_label_t *labels_copy(const kiln_index_label_t *labels, size_t n) {
  kiln_index_label_t *out = kiln_calloc(n ? n : 1, sizeof *out);
  for (size_t i = 0; i < n; i++) {
    out[i].key = kiln_strdup(labels[i].key);
    out[i].value = kiln_strdup(labels[i].value);
  }
  return out;
}

void labels_free(kiln_index_label_t *labels, size_t n) {
  for (size_t i = 0; i < n; i++) {
    kiln_free(labels[i].key);
    kiln_free(labels[i].value);
  }
  kiln_free(labels);
}

bool job_terminal(const job_t *job) {
  return job->state == KILND_JOB_DONE || job->state == KILND_JOB_FAILED || job->state == KILND_JOB_CANCELLED;
}

/* ---- the job index: ids and request ids in O(1) (10,000 finished jobs are kept) ---- */

/* `job` is on the list; puts it in the index (its id and request_id must not
 * change while it is there). A request_id's jobs form a chain, newest first. */
void index_add_locked(kilnd_jobs_t *jobs, job_t *job) {
  kiln_strmap_put(&jobs->by_id, job->id, job);
  job->rid_older = NULL;
  if (!job->request_id) return;
  job_t *head = kiln_strmap_get(&jobs->by_rid, job->request_id);
  if (!head || job->created_unix_ms >= head->created_unix_ms) {
    job->rid_older = head;
    kiln_strmap_put(&jobs->by_rid, job->request_id, job);
    return;
  }
  job_t *at = head;
  while (at->rid_older && at->rid_older->created_unix_ms > job->created_unix_ms) at = at->rid_older;
  job->rid_older = at->rid_older;
  at->rid_older = job;
}

void index_remove_locked(kilnd_jobs_t *jobs, job_t *job) {
  if (kiln_strmap_get(&jobs->by_id, job->id) == job) kiln_strmap_remove(&jobs->by_id, job->id);
  if (!job->request_id) return;
  job_t *head = kiln_strmap_get(&jobs->by_rid, job->request_id);
  if (head == job) {
    if (job->rid_older)
      kiln_strmap_put(&jobs->by_rid, job->request_id, job->rid_older);
    else
      kiln_strmap_remove(&jobs->by_rid, job->request_id);
  } else {
    for (job_t *at = head; at; at = at->rid_older) {
      if (at->rid_older == job) {
        at->rid_older = job->rid_older;
        break;
      }
    }
  }
  job->rid_older = NULL;
}

/* A new job, newest first on the list, and indexed. */
void job_link_locked(kilnd_jobs_t *jobs, job_t *job) {
  job->next = jobs->jobs;
  jobs->jobs = job;
  index_add_locked(jobs, job);
}

job_t *find_job_locked(kilnd_jobs_t *jobs, const char *id) { return kiln_strmap_get(&jobs->by_id, id); }

/* The newest job with this request_id. */
job_t *find_request_locked(kilnd_jobs_t *jobs, const char *request_id) {
  return kiln_strmap_get(&jobs->by_rid, request_id);
}

/* Job ids: 8 random bytes read once per process, then a counter mixed in (a
 * bijective 32-bit mix, so ids look unrelated yet never collide within a process,
 * and a restart draws a new prefix). */
void random_id_locked(kilnd_jobs_t *jobs, char *out) {
  if (!jobs->id_seeded) {
    int fd = open("/dev/urandom", O_RDONLY | O_CLOEXEC);
    ssize_t n = fd >= 0 ? read(fd, jobs->id_prefix, sizeof jobs->id_prefix) : -1;
    if (fd >= 0) close(fd);
    if (n != (ssize_t)sizeof jobs->id_prefix) {
      uint64_t t = (uint64_t)kiln_time_unix_ms() ^ (uint64_t)getpid() << 32;
      memcpy(jobs->id_prefix, &t, sizeof jobs->id_prefix);
    }
    jobs->id_seeded = true;
  }
  uint32_t x = ++jobs->id_counter;
  x ^= x >> 16;
  x *= 0x7feb352dU;
  x ^= x >> 15;
  x *= 0x846ca68bU;
  x ^= x >> 16;
  /* No printf: every Compile, cache hits included, makes an id. */
  uint8_t id[sizeof jobs->id_prefix + 4];
  memcpy(id, jobs->id_prefix, sizeof jobs->id_prefix);
  for (int i = 0; i < 4; i++) id[sizeof jobs->id_prefix + i] = (uint8_t)(x >> (24 - 8 * i));
  out[0] = 'j';
  out[1] = '-';
  kiln_hex_encode(id, sizeof id, out + 2);
}

/* ---- job completion ---- */

/* Every job's turn to a terminal state passes here once. */
static void count_terminal(kilnd_jobs_t *jobs, job_t *job) {
  kilnd_job_state_t state = job->state;
  if (state == KILND_JOB_DONE)
    jobs->stats.done++;
  else if (state == KILND_JOB_FAILED)
    jobs->stats.failed++;
  else if (state == KILND_JOB_CANCELLED)
    jobs->stats.cancelled++;
  usage_drop_locked(jobs, job);
}

void maybe_finish_job_locked(kilnd_jobs_t *jobs, job_t *job) {
  if (job_terminal(job)) return;
  size_t failed = 0;
  for (size_t i = 0; i < job->n_targets; i++) {
    if (job->targets[i].state == TARGET_PENDING) return;
    failed += job->targets[i].state == TARGET_FAILED;
  }
  job->state = failed ? KILND_JOB_FAILED : KILND_JOB_DONE;
  job->finished_monotonic_ns = kiln_time_monotonic_ns();
  count_terminal(jobs, job);
  char message[128];
  if (failed) {
    snprintf(message, sizeof message, "%zu of %zu target(s) failed", failed, job->n_targets);
  } else {
    snprintf(message, sizeof message, "%zu target(s) done", job->n_targets);
  }
  emit_terminal_locked(jobs, job, message);
}

/* Settles target `t` of `job` as failed (if still pending). */
static void fail_target(kilnd_jobs_t *jobs, job_t *job, size_t t, kiln_status_code_t code,
                        const char *message) {
  job_target_t *jt = &job->targets[t];
  if (jt->state != TARGET_PENDING) return;
  jt->state = TARGET_FAILED;
  item_t *item = jt->item;
  jt->item = NULL;
  if (item) leave_item_locked(jobs, item, job);
  emit_target_failed_locked(jobs, job, t, code, message);
}

void stop_job_locked(kilnd_jobs_t *jobs, job_t *job, kilnd_job_state_t state, kiln_status_code_t code,
                     const char *message) {
  for (size_t t = 0; t < job->n_targets; t++) fail_target(jobs, job, t, code, message);
  if (job_terminal(job)) return;
  job->state = state;
  job->finished_monotonic_ns = kiln_time_monotonic_ns();
  count_terminal(jobs, job);
  emit_terminal_locked(jobs, job, message);
}

/* ---- retention and deadlines ---- */

static void job_free(job_t *job) {
  while (job->listeners) { /* none by then: they go when the job ends or kilnd closes */
    kilnd_job_listener_t *l = job->listeners;
    job->listeners = l->next;
    kiln_free(l);
  }
  for (size_t i = 0; i < job->n_events; i++) kiln_free(job->events[i].packed);
  kiln_free(job->events);
  kiln_free(job->flags);
  kiln_free(job->source_name);
  kiln_free(job->terminal_message);
  labels_free(job->labels, job->n_labels);
  for (size_t i = 0; i < job->n_targets; i++) kiln_free(job->targets[i].message);
  for (size_t i = 0; i < job->n_targets; i++) kiln_free(job->targets[i].target);
  kiln_free(job->targets);
  kiln_free(job->client);
  kiln_free(job->request_id);
  source_release(job->source);
  kiln_free(job);
}

static void on_sweep(uv_timer_t *timer) {
  kilnd_jobs_t *jobs = timer->data;
  int64_t now = kiln_time_monotonic_ns();
  engine_lock(jobs);
  size_t finished = 0; /* the list runs newest first: past the cap, the oldest go */
  for (job_t **p = &jobs->jobs; *p;) {
    job_t *job = *p;
    if (!job_terminal(job) && job->deadline_monotonic_ns != INT64_MAX && now > job->deadline_monotonic_ns) {
      stop_job_locked(jobs, job, KILND_JOB_FAILED, KILN_STATUS_DEADLINE_EXCEEDED,
                      "the job's deadline (the Compile call's gRPC deadline) passed before it finished");
    }
    finished += job_terminal(job);
    if (job_terminal(job) && !job->watchers &&
        (finished > MAX_FINISHED_JOBS ||
         now - job->finished_monotonic_ns > jobs->options.retention_ms * 1000000)) {
      *p = job->next;
      index_remove_locked(jobs, job);
      job_free(job);
      continue;
    }
    p = &job->next;
  }
  engine_unlock(jobs);
}

/* The loop's wake-up: the outbox left by admission on the pool, the queue, and
 * the job store's pending snapshots. */
static void on_kick(uv_async_t *handle) {
  kilnd_jobs_t *jobs = handle->data;
  engine_lock(jobs);
  if (!jobs->closing) start_flush_locked(jobs);
  engine_unlock(jobs);
  schedule(jobs);
}

/* ---- the rest of the API ---- */

/* Takes mu and finds job `job_id`; on an error mu is released again. */
static KILN_MUST_USE kiln_status_t lock_job(kilnd_jobs_t *jobs, const char *job_id, job_t **out_job) {
  engine_lock(jobs);
  if (jobs->closing) {
    /* Its watchers and listeners were told already; a new one would never be. */
    *out_job = NULL;
    engine_unlock(jobs);
    return KILN_STATUS(KILN_STATUS_UNAVAILABLE, "%s", SHUTDOWN_MESSAGE);
  }
  *out_job = find_job_locked(jobs, job_id);
  if (*out_job) return NULL;
  engine_unlock(jobs);
  return KILN_STATUS(KILN_STATUS_NOT_FOUND,
                     "no job %s on this server (or it finished long ago and was forgotten)", job_id);
}

kiln_status_t kilnd_jobs_cancel(kilnd_jobs_t *jobs, const char *job_id, const char *reason,
                                kilnd_job_state_t *out_state, bool *out_cancelled) {
  *out_cancelled = false;
  job_t *job = NULL;
  KILN_RETURN_IF_ERROR(lock_job(jobs, job_id, &job));
  if (!job_terminal(job)) {
    char message[1200];
    snprintf(message, sizeof message, "cancelled%s%s", reason && *reason ? ": " : "", reason ? reason : "");
    stop_job_locked(jobs, job, KILND_JOB_CANCELLED, KILN_STATUS_CANCELLED, message);
    *out_cancelled = true;
  }
  *out_state = job->state;
  engine_unlock(jobs);
  return NULL;
}

kiln_status_t kilnd_jobs_listen(kilnd_jobs_t *jobs, const char *job_id, kilnd_job_finished_fn_t fn,
                                void *user, kilnd_job_listener_t **out_listener) {
  if (out_listener) *out_listener = NULL;
  job_t *job = NULL;
  KILN_RETURN_IF_ERROR(lock_job(jobs, job_id, &job));
  kilnd_job_listener_t *l = kiln_calloc(1, sizeof *l);
  l->job = job;
  l->fn = fn;
  l->user = user;
  l->next = job->listeners;
  job->listeners = l;
  if (job_terminal(job)) {
    notify_listeners_locked(jobs, job, false, job->terminal_message); /* runs at the unlock below */
  } else if (out_listener) {
    *out_listener = l;
  }
  engine_unlock(jobs);
  return NULL;
}

void kilnd_jobs_unlisten(kilnd_jobs_t *jobs, kilnd_job_listener_t *listener) {
  if (!listener) return;
  engine_lock(jobs);
  if (!listener->job) {
    listener->dropped = true; /* in the outbox: run_effects frees it */
  } else {
    for (kilnd_job_listener_t **p = &listener->job->listeners; *p; p = &(*p)->next) {
      if (*p == listener) {
        *p = listener->next;
        kiln_free(listener);
        break;
      }
    }
  }
  engine_unlock(jobs);
}

void kilnd_jobs_stats(kilnd_jobs_t *jobs, kilnd_jobs_stats_t *out) {
  kilnd_workers_stats_t workers = {0};
  if (jobs->pool.self) jobs->pool.stats(jobs->pool.self, &workers); /* NULL once closed */
  engine_lock(jobs);
  *out = jobs->stats;
  out->queued = out->running = 0;
  for (job_t *j = jobs->jobs; j; j = j->next) {
    out->queued += j->state == KILND_JOB_QUEUED;
    out->running += j->state == KILND_JOB_RUNNING;
  }
  out->queue_depth = jobs->queued_tasks[1] + jobs->queued_tasks[2] + jobs->queued_tasks[3];
  for (int c = 0; c < 3; c++) out->queued_by_class[c] = jobs->queued_tasks[c + 1];
  uint64_t tasks = jobs->stats.workers.tasks;
  if (jobs->pool.self) out->workers = workers;
  out->workers.tasks = tasks;
  engine_unlock(jobs);
}

void kilnd_jobs_compile_histograms(kilnd_jobs_t *jobs, kilnd_histograms_t *out) {
  engine_lock(jobs);
  *out = jobs->compile_seconds;
  engine_unlock(jobs);
}

void kilnd_jobs_on_ready(kilnd_jobs_t *jobs, void (*fn)(void *user), void *user) {
  engine_lock(jobs);
  jobs->on_ready = fn;
  jobs->on_ready_user = user;
  bool already = jobs->compiler != NULL;
  engine_unlock(jobs);
  if (already && fn) fn(user);
}

const char *kilnd_jobs_compiler_wait(kilnd_jobs_t *jobs, int64_t timeout_ms) {
  uv_mutex_lock(&jobs->mu);
  int64_t give_up = kiln_time_monotonic_ns() + timeout_ms * 1000000;
  while (!jobs->compiler && !jobs->draining && kiln_time_monotonic_ns() < give_up) {
    uv_cond_timedwait(&jobs->ready, &jobs->mu, 100 * 1000000ull);
  }
  const char *c = jobs->compiler;
  uv_mutex_unlock(&jobs->mu);
  return c;
}

const char *kilnd_jobs_compiler(kilnd_jobs_t *jobs) {
  uv_mutex_lock(&jobs->mu);
  const char *c = jobs->compiler;
  uv_mutex_unlock(&jobs->mu);
  return c;
}

void kilnd_jobs_key_parts(const kilnd_jobs_t *jobs, const char *compiler, const char *key_digest,
                          const char *target, const char *const *flags, size_t n_flags,
                          kiln_cache_key_parts_t *out_parts) {
  *out_parts = (kiln_cache_key_parts_t){.source_digest = key_digest,
                                        .target = target,
                                        .flags = flags,
                                        .n_flags = n_flags,
                                        .compiler = compiler,
                                        .hal_version = jobs->options.hal_version,
                                        .bytecode_version = jobs->options.bytecode_version};
}

bool kilnd_jobs_identity(kilnd_jobs_t *jobs, kilnd_compiler_info_t *out_info) {
  memset(out_info, 0, sizeof *out_info);
  uv_mutex_lock(&jobs->mu);
  bool known = jobs->compiler != NULL;
  if (known) *out_info = jobs->identity;
  uv_mutex_unlock(&jobs->mu);
  return known;
}

/* ---- life cycle ---- */

static size_t real_idle(void *self) { return kilnd_workers_idle(self); }
static KILN_MUST_USE kiln_status_t real_submit(void *self, const kilnd_task_t *task) {
  return kilnd_workers_submit(self, task);
}
static void real_cancel(void *self, uint64_t task_id) { kilnd_workers_cancel(self, task_id); }
static void real_stats(void *self, kilnd_workers_stats_t *out) { kilnd_workers_stats(self, out); }
static const char *real_compiler(void *self) { return kilnd_workers_compiler(self); }
static bool real_identity(void *self, kilnd_compiler_info_t *out) {
  return kilnd_workers_identity(self, out);
}
static void real_close(void *self, void (*done)(void *user), void *user) {
  kilnd_workers_close(self, done, user);
}

static kilnd_jobs_t *engine_new(uv_loop_t *loop, kiln_cache_t *cache, const kilnd_jobs_options_t *options) {
  kilnd_jobs_t *jobs = kiln_calloc(1, sizeof *jobs);
  jobs->loop = loop;
  jobs->cache = cache;
  jobs->options = *options;
  if (!jobs->options.queue_capacity) jobs->options.queue_capacity = 1024;
  if (!jobs->options.retention_ms) jobs->options.retention_ms = 3600 * 1000;
  /* The compiler identity comes from the first worker's Hello (it differs in
   * external mode); admission waits for it. */
  jobs->options.compiler = NULL;
  kiln_strmap_init(&jobs->by_id);
  kiln_strmap_init(&jobs->by_rid);
  kiln_strmap_init(&jobs->usage);
  uv_mutex_init(&jobs->mu);
  uv_mutex_init(&jobs->key_memo.mu);
  uv_cond_init(&jobs->ready);
  return jobs;
}

static void engine_free(kilnd_jobs_t *jobs) {
  uv_cond_destroy(&jobs->ready);
  uv_mutex_destroy(&jobs->key_memo.mu);
  uv_mutex_destroy(&jobs->mu);
  kiln_free(jobs->compiler);
  kiln_free(jobs);
}

/* The handles, and the job store's contents; the pool is set. */
static void engine_start(kilnd_jobs_t *jobs) {
  uv_async_init(jobs->loop, &jobs->kick, on_kick);
  jobs->kick.data = jobs;
  uv_timer_init(jobs->loop, &jobs->sweep);
  uv_timer_init(jobs->loop, &jobs->gather);
  jobs->gather.data = jobs;
  jobs->sweep.data = jobs;
  uv_timer_start(&jobs->sweep, on_sweep, SWEEP_INTERVAL_MS, SWEEP_INTERVAL_MS);
  jobs->store = jobs->options.store;
  if (jobs->store) {
    engine_lock(jobs);
    load_store(jobs);
    engine_unlock(jobs);
  }
}

kiln_status_t kilnd_jobs_create(uv_loop_t *loop, kiln_cache_t *cache, const kilnd_jobs_options_t *options,
                                const kilnd_workers_options_t *worker_options, kilnd_jobs_t **out_jobs) {
  *out_jobs = NULL;
  kilnd_jobs_t *jobs = engine_new(loop, cache, options);
  kilnd_workers_t *workers = NULL;
  kiln_status_t st = kilnd_workers_create(loop, worker_options, kilnd_jobs_task_event, jobs, &workers);
  if (st) {
    engine_free(jobs);
    return st;
  }
  jobs->pool = (kilnd_jobs_pool_t){.self = workers,
                                   .idle = real_idle,
                                   .submit = real_submit,
                                   .cancel = real_cancel,
                                   .stats = real_stats,
                                   .compiler = real_compiler,
                                   .identity = real_identity,
                                   .close = real_close};
  engine_start(jobs);
  *out_jobs = jobs;
  return NULL;
}

kiln_status_t kilnd_jobs_create_on(uv_loop_t *loop, kiln_cache_t *cache, const kilnd_jobs_options_t *options,
                                   const kilnd_jobs_pool_t *pool, kilnd_jobs_t **out_jobs) {
  *out_jobs = NULL;
  if (!pool || !pool->self || !pool->idle || !pool->submit || !pool->cancel || !pool->stats ||
      !pool->compiler || !pool->identity || !pool->close) {
    return KILN_STATUS(KILN_STATUS_INVALID_ARGUMENT, "the job engine needs a pool with every operation");
  }
  kilnd_jobs_t *jobs = engine_new(loop, cache, options);
  jobs->pool = *pool;
  engine_start(jobs);
  *out_jobs = jobs;
  return NULL;
}

/* Under mu: the engine's jobs, queues and indexes. */
static void free_everything_locked(kilnd_jobs_t *jobs) {
  kiln_jobstore_jobs_free(jobs->persist, jobs->n_persist);
  kiln_jobstore_jobs_free(jobs->readmit, jobs->n_readmit);
  jobs->persist = jobs->readmit = NULL;
  jobs->n_persist = jobs->n_readmit = 0;
  while (jobs->jobs) {
    job_t *j = jobs->jobs;
    jobs->jobs = j->next;
    while (j->watchers) watcher_remove_locked(j->watchers);
    job_free(j);
  }
  kiln_strmap_deinit(&jobs->by_id); /* find_job and find_request find nothing from now on */
  kiln_strmap_deinit(&jobs->by_rid);
  const char *client;
  void *usage;
  for (size_t i = 0; kiln_strmap_next(&jobs->usage, &i, &client, &usage);) {
    kiln_free(((client_usage_t *)usage)->client);
    kiln_free(usage);
  }
  kiln_strmap_deinit(&jobs->usage);
  while (jobs->items) {
    item_t *it = jobs->items;
    jobs->items = it->next;
    item_free(it);
  }
  for (int p = 1; p <= 3; p++) {
    while (jobs->queues[p]) {
      client_queue_t *q = jobs->queues[p];
      jobs->queues[p] = q->next;
      while (q->head) {
        task_t *t = q->head;
        q->head = t->next;
        task_free(t);
      }
      kiln_free(q->client);
      kiln_free(q);
    }
  }
  while (jobs->running) {
    task_t *t = jobs->running;
    jobs->running = t->next;
    task_free(t);
  }
}

/* The engine's work is over: its jobs, queues and indexes go, under the lock (a
 * call still in flight on the thread pool may be asking for a job). The struct,
 * its lock and the compiler identity stay until kilnd_jobs_destroy: calls that
 * outlive the drain (a Recompile's items on the pool, a /metrics scrape) find a
 * closed engine, not freed memory. */
void maybe_closed(kilnd_jobs_t *jobs) {
  if (jobs->handles_open > 0) return;
  engine_lock(jobs);
  bool ready = jobs->closing && !jobs->closed;
  if (ready) {
    free_everything_locked(jobs);
    jobs->closed = true;
  }
  effect_t *left = ready ? outbox_take_locked(jobs) : NULL;
  uv_mutex_unlock(&jobs->mu);
  drop_effects(left); /* nothing is left to do them for */
  if (ready && jobs->close_done) jobs->close_done(jobs->close_user);
}

void kilnd_jobs_destroy(kilnd_jobs_t *jobs) {
  if (!jobs) return;
  if (!jobs->closed) {
    /* Its handles are still on the loop: freeing it now would crash later. */
    kiln_log(KILN_LOG_ERROR, "jobs_destroy_open", "msg=\"the job engine was not closed; leaking it\"");
    return;
  }
  engine_free(jobs);
}

static void on_handle_closed(uv_handle_t *handle) {
  kilnd_jobs_t *jobs = handle->data;
  jobs->handles_open--;
  maybe_closed(jobs);
}

static void on_pool_closed(void *user) {
  kilnd_jobs_t *jobs = user;
  jobs->pool.self = NULL;
  jobs->handles_open--;
  maybe_closed(jobs);
}

void kilnd_jobs_close(kilnd_jobs_t *jobs, void (*done)(void *user), void *user) {
  engine_lock(jobs);
  /* Snapshots not yet written: write them now (a few small SQLite writes, once). */
  kiln_status_t st = jobs->store ? kiln_jobstore_put_many(jobs->store, jobs->persist, jobs->n_persist) : NULL;
  if (st) {
    kiln_log_status(KILN_LOG_WARN, "job_store_put_failed", st, NULL);
    kiln_status_free(st);
  }
  kiln_jobstore_jobs_free(jobs->persist, jobs->n_persist);
  jobs->persist = NULL;
  jobs->n_persist = 0;
  jobs->closing = true;
  jobs->draining = true;
  uv_cond_broadcast(&jobs->ready);
  jobs->close_done = done;
  jobs->close_user = user;
  /* Every live job ends UNAVAILABLE for its watchers; they get the Terminal event
   * only if their stream can still take it, so finish the streams here. */
  for (job_t *j = jobs->jobs; j; j = j->next) {
    for (watcher_t *w = j->watchers, *next; w; w = next) {
      next = w->next;
      if (!w->sending) {
        outbox_finish_stream_locked(jobs, w->stream,
                                    KILN_STATUS(KILN_STATUS_UNAVAILABLE, "%s", SHUTDOWN_MESSAGE));
        watcher_remove_locked(w);
      } else {
        /* Its send completes later: detach it from the job (freed below) and
         * let its send's callback finish and free it. */
        w->done = true;
        w->job = NULL;
        jobs->handles_open++;
      }
    }
  }
  /* In-process listeners of live jobs hear that kilnd closes under them. */
  for (job_t *j = jobs->jobs; j; j = j->next) notify_listeners_locked(jobs, j, true, SHUTDOWN_MESSAGE);
  /* Detached watchers are off their jobs' lists now. */
  for (job_t *j = jobs->jobs; j; j = j->next) {
    for (watcher_t **p = &j->watchers; *p;) {
      if (!(*p)->job)
        *p = (*p)->next;
      else
        p = &(*p)->next;
    }
  }
  jobs->handles_open += 4;
  engine_unlock(jobs); /* the finishes and the listeners, and what admission left */
  uv_close((uv_handle_t *)&jobs->kick, on_handle_closed);
  uv_close((uv_handle_t *)&jobs->sweep, on_handle_closed);
  uv_close((uv_handle_t *)&jobs->gather, on_handle_closed);
  jobs->pool.close(jobs->pool.self, on_pool_closed, jobs);
}
