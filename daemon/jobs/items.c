/* The job engine's work items and the pool's events: a task starts, its targets
 * progress, finish (the VMFB is stored on the thread pool, then the item
 * completes) or fail, and the task finishes; an item whose last waiter leaves is
 * dropped or its task cancelled.
 */
#include <stdio.h>
#include <string.h>

#include "base/alloc.h"
#include "base/buf.h"
#include "base/log.h"
#include "base/time.h"
#include "daemon/jobs/jobs_impl.h"

/* ---- items ---- */

item_t *find_item_locked(kilnd_jobs_t *jobs, const char *key) {
  for (item_t *it = jobs->items; it; it = it->next) {
    if (!it->abandoned && strcmp(it->key, key) == 0) return it;
  }
  return NULL;
}

static void unlink_item_locked(kilnd_jobs_t *jobs, item_t *item) {
  for (item_t **p = &jobs->items; *p; p = &(*p)->next) {
    if (*p == item) {
      *p = item->next;
      return;
    }
  }
}

void item_free(item_t *item) {
  kiln_free(item->target);
  kiln_free(item->waiters);
  kiln_free(item);
}

/* Removes `item` from its task's list (the task may become empty). */
static void task_remove_item(task_t *task, item_t *item) {
  for (size_t i = 0; i < task->n_items; i++) {
    if (task->items[i] != item) continue;
    memmove(&task->items[i], &task->items[i + 1], (task->n_items - i - 1) * sizeof *task->items);
    task->n_items--;
    return;
  }
}

void leave_item_locked(kilnd_jobs_t *jobs, item_t *item, job_t *job) {
  for (size_t i = 0; i < item->n_waiters; i++) {
    if (item->waiters[i].job != job) continue;
    memmove(&item->waiters[i], &item->waiters[i + 1], (item->n_waiters - i - 1) * sizeof *item->waiters);
    item->n_waiters--;
    i--;
  }
  if (item->owner == job) item->owner = NULL;
  if (item->n_waiters > 0) return;
  task_t *task = item->task;
  if (item->state == ITEM_QUEUED && task && !task->running) {
    unlink_item_locked(jobs, item);
    task_remove_item(task, item);
    item_free(item);
    if (task->n_items == 0) {
      dequeue_task_locked(jobs, task);
      task_free(task);
    }
    return;
  }
  if (item->state == ITEM_RUNNING && task && task->running) {
    for (size_t i = 0; i < task->n_items; i++) {
      if (task->items[i]->n_waiters > 0) return;
    }
    for (size_t i = 0; i < task->n_items; i++) {
      if (task->items[i]->state != ITEM_STORING) task->items[i]->abandoned = true;
    }
    outbox_cancel_task_locked(jobs, task->id); /* the pool reports failures, then FINISHED */
  }
}

static void complete_item_locked(kilnd_jobs_t *jobs, item_t *item, const char *digest, uint64_t size,
                                 int64_t ms) {
  item->state = ITEM_DONE;
  jobs->stats.targets_compiled++;
  jobs->stats.compile_ms_total += (uint64_t)(ms > 0 ? ms : 0);
  kilnd_histograms_observe(&jobs->compile_seconds, item->target, (double)(ms > 0 ? ms : 0) / 1000.0);
  unlink_item_locked(jobs, item);
  if (item->task) task_remove_item(item->task, item);
  int64_t now = kiln_time_monotonic_ns();
  for (size_t i = 0; i < item->n_waiters; i++) {
    job_t *job = item->waiters[i].job;
    size_t t = item->waiters[i].target;
    job->targets[t].item = NULL;
    if (job->deadline_monotonic_ns != INT64_MAX && now > job->deadline_monotonic_ns) {
      /* The sweep ends jobs at their deadline every 500 ms; a target done between
       * the deadline and the next sweep is late all the same (and cached). */
      job->targets[t].state = TARGET_FAILED;
      emit_target_failed_locked(
          jobs, job, t, KILN_STATUS_DEADLINE_EXCEEDED,
          "the job's deadline (the Compile call's gRPC deadline) passed before this target "
          "finished; it is cached now: compile again to get it");
    } else {
      job->targets[t].state = TARGET_DONE;
      emit_target_done_locked(jobs, job, t, digest, size, job != item->owner, (uint64_t)ms);
    }
    maybe_finish_job_locked(jobs, job);
  }
  item_free(item);
}

static void fail_item_locked(kilnd_jobs_t *jobs, item_t *item, kiln_status_code_t code, const char *message) {
  item->state = ITEM_FAILED;
  jobs->stats.targets_failed++;
  unlink_item_locked(jobs, item);
  if (item->task) task_remove_item(item->task, item);
  for (size_t i = 0; i < item->n_waiters; i++) {
    job_t *job = item->waiters[i].job;
    size_t t = item->waiters[i].target;
    job->targets[t].state = TARGET_FAILED;
    job->targets[t].item = NULL;
    emit_target_failed_locked(jobs, job, t, code, message);
    maybe_finish_job_locked(jobs, job);
  }
  item_free(item);
}

/* ---- the artifact store ---- */

typedef struct store_s {
  uv_work_t work;
  kilnd_jobs_t *jobs;
  char key[65];
  char *target;
  char **flags; /* the task's, as the cache key has them */
  size_t n_flags;
  char source_digest[65];
  const char *compiler; /* the engine's (set once, lives until destroy) */
  uint8_t *bytes;
  size_t len;
  int64_t compile_ms;
  char *submitter;
  kiln_index_label_t *labels;
  size_t n_labels;
  char *job_id; /* the owner job's: the artifact's provenance */
  char *source_name;
  kiln_status_t status;
  kiln_index_artifact_t record;
} store_t;

static void store_free(store_t *s) {
  kiln_free(s->target);
  for (size_t i = 0; i < s->n_flags; i++) kiln_free(s->flags[i]);
  kiln_free(s->flags);
  kiln_free(s->bytes);
  kiln_free(s->submitter);
  labels_free(s->labels, s->n_labels);
  kiln_free(s->job_id);
  kiln_free(s->source_name);
  kiln_free(s);
}

/* Thread pool: the VMFB into the cache, under the key the item was admitted by. */
static void on_store(uv_work_t *work) {
  store_t *s = work->data;
  kiln_cache_key_parts_t parts;
  kilnd_jobs_key_parts(s->jobs, s->compiler, s->source_digest, s->target, (const char *const *)s->flags,
                       s->n_flags, &parts);
  kiln_cache_provenance_t prov = {.submitter = s->submitter,
                                  .labels = s->labels,
                                  .n_labels = s->n_labels,
                                  .job_id = s->job_id,
                                  .source_name = s->source_name};
  s->status = kiln_cache_artifact_put(s->jobs->cache, &parts, s->bytes, s->len, &prov, &s->record);
}

static void on_store_done(uv_work_t *work, int status) {
  (void)status;
  store_t *s = work->data;
  kilnd_jobs_t *jobs = s->jobs;
  engine_lock(jobs);
  item_t *item = jobs->closing ? NULL : find_item_locked(jobs, s->key);
  if (item && item->state == ITEM_STORING) {
    if (s->status) {
      fail_item_locked(jobs, item, kiln_status_code(s->status), kiln_status_message(s->status));
    } else {
      complete_item_locked(jobs, item, s->record.artifact_digest, s->record.size, s->compile_ms);
    }
  }
  engine_unlock(jobs);
  if (!s->status) kiln_index_artifact_deinit(&s->record);
  kiln_status_free(s->status);
  store_free(s);
  jobs->handles_open--;
  maybe_closed(jobs);
}

/* Under mu: a target's VMFB came; the item stores it (thread pool). */
static void store_item_locked(kilnd_jobs_t *jobs, task_t *task, item_t *item,
                              const kilnd_task_event_t *event) {
  item->state = ITEM_STORING;
  store_t *s = kiln_calloc(1, sizeof *s);
  s->jobs = jobs;
  memcpy(s->key, item->key, sizeof s->key);
  s->target = kiln_strdup(item->target);
  s->n_flags = task->n_flags;
  s->flags = kiln_calloc(task->n_flags ? task->n_flags : 1, sizeof *s->flags);
  for (size_t i = 0; i < task->n_flags; i++) s->flags[i] = kiln_strdup(task->flags[i]);
  memcpy(s->source_digest, task->source->key_digest, sizeof s->source_digest);
  s->compiler = jobs->compiler;
  s->bytes = kiln_memdup(event->artifact, event->artifact_len ? event->artifact_len : 1);
  s->len = event->artifact_len;
  s->compile_ms = event->compile_ms;
  job_t *owner = item->owner ? item->owner : (item->n_waiters ? item->waiters[0].job : NULL);
  if (owner) {
    s->submitter = kiln_strdup(owner->client ? owner->client : "");
    s->n_labels = owner->n_labels;
    s->labels = labels_copy(owner->labels, owner->n_labels);
    s->job_id = kiln_strdup(owner->id);
    s->source_name = kiln_strdup(owner->source_name ? owner->source_name : task->source->name);
  }
  s->work.data = s;
  jobs->handles_open++; /* a store in flight keeps the engine alive through close */
  if (uv_queue_work(jobs->loop, &s->work, on_store, on_store_done) != 0) {
    jobs->handles_open--;
    fail_item_locked(jobs, item, KILN_STATUS_INTERNAL, "cannot queue the artifact store");
    store_free(s);
  }
}

/* ---- the pool's events ---- */

static task_t *find_running_locked(kilnd_jobs_t *jobs, uint64_t id) {
  for (task_t *t = jobs->running; t; t = t->next) {
    if (t->id == id) return t;
  }
  return NULL;
}

static item_t *task_item(task_t *task, const char *target) {
  for (size_t i = 0; task && target && i < task->n_items; i++) {
    if (strcmp(task->items[i]->target, target) == 0) return task->items[i];
  }
  return NULL;
}

/* Under mu: the pool reported FINISHED. */
static void task_finished_locked(kilnd_jobs_t *jobs, task_t *task) {
  unlink_running_locked(jobs, task);
  /* Items the worker never reported (it should have): fail them. */
  while (task->n_items > 0) {
    item_t *left = task->items[0];
    if (left->state == ITEM_STORING) {
      task_remove_item(task, left); /* the store completes it */
      left->task = NULL;
      continue;
    }
    fail_item_locked(jobs, left, KILN_STATUS_INTERNAL, "the worker finished without reporting this target");
  }
  task_free(task);
}

void kilnd_jobs_task_event(void *user, uint64_t task_id, const kilnd_task_event_t *event) {
  kilnd_jobs_t *jobs = user;
  /* What the pool knows, read before the lock (nothing is called under it). */
  const char *compiler = NULL;
  kilnd_compiler_info_t identity;
  if (event->kind == KILND_TASK_WORKER_READY && jobs->pool.self) {
    compiler = jobs->pool.compiler(jobs->pool.self);
    if (compiler && !jobs->pool.identity(jobs->pool.self, &identity)) compiler = NULL;
  }
  bool dispatch = false;
  void (*ready_fn)(void *) = NULL;
  void *ready_user = NULL;

  engine_lock(jobs);
  task_t *task = find_running_locked(jobs, task_id);
  item_t *item = task ? task_item(task, event->target) : NULL;
  switch (event->kind) {
    case KILND_TASK_STARTED:
      for (size_t i = 0; task && i < task->n_items; i++) {
        for (size_t w = 0; w < task->items[i]->n_waiters; w++) {
          job_t *job = task->items[i]->waiters[w].job;
          if (job->state == KILND_JOB_QUEUED) {
            job->state = KILND_JOB_RUNNING;
            emit_started_locked(jobs, job, event->worker);
          }
        }
      }
      break;
    case KILND_TASK_PROGRESS:
      for (size_t w = 0; item && w < item->n_waiters; w++) {
        emit_progress_locked(jobs, item->waiters[w].job, item->target, event);
      }
      break;
    case KILND_TASK_TARGET_DONE:
      if (item && item->state == ITEM_RUNNING) store_item_locked(jobs, task, item, event);
      break;
    case KILND_TASK_TARGET_FAILED:
      if (item && item->state == ITEM_RUNNING) fail_item_locked(jobs, item, event->code, event->message);
      break;
    case KILND_TASK_WORKER_READY:
      if (!jobs->compiler && compiler) {
        jobs->compiler = kiln_strdup(compiler);
        jobs->identity = identity;
        uv_cond_broadcast(&jobs->ready);
        start_readmit_locked(jobs);
        ready_fn = jobs->on_ready;
        ready_user = jobs->on_ready_user;
      }
      dispatch = true;
      break;
    case KILND_TASK_FINISHED:
      if (task) task_finished_locked(jobs, task);
      jobs->stats.workers.tasks++;
      dispatch = true;
      break;
  }
  engine_unlock(jobs);
  if (ready_fn) ready_fn(ready_user);
  if (dispatch) schedule(jobs);
}
