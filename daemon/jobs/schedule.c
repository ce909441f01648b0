/* The job engine's queues: three classes (INTERACTIVE > BATCH > BULK), inside a
 * class one FIFO per client taken in turn (round robin), the per-client limits
 * admission checks, and dispatch to idle workers.
 *
 * Dispatch (schedule) runs on the loop and releases the lock around each submit:
 * the pool reports STARTED from inside it, into kilnd_jobs_task_event, which takes
 * the lock itself. A task is on the running list, its items RUNNING, before the
 * lock is released, so that report finds it.
 */
#include <inttypes.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "base/alloc.h"
#include "base/buf.h"
#include "base/log.h"
#include "base/time.h"
#include "daemon/jobs/jobs_impl.h"

/* BULK work is for throughput, not latency: a BULK task waits this long after it
 * was queued before a worker may take it, so that the one-target jobs of one model
 * a bulk recompile submits within milliseconds are queued together and fuse into
 * one task (fuse_queued) instead of the first few starting alone on idle workers. */
#define BULK_GATHER_MS 25
/* Folding queued tasks into the one a worker takes stops at this many items. */
#define FUSE_MAX_ITEMS 16

static const char *const class_names[] = {"", "INTERACTIVE", "BATCH", "BULK"};

/* ---- per-client usage (client-max-jobs) ---- */

size_t usage_jobs_locked(kilnd_jobs_t *jobs, const char *client) {
  client_usage_t *u = kiln_strmap_get(&jobs->usage, client);
  return u ? u->jobs : 0;
}

/* Counts `job` (unfinished, not yet counted) for its client. The only increment. */
void usage_add_locked(kilnd_jobs_t *jobs, job_t *job) {
  if (job->usage) return;
  client_usage_t *u = kiln_strmap_get(&jobs->usage, job->client);
  if (!u) {
    u = kiln_calloc(1, sizeof *u);
    u->client = kiln_strdup(job->client);
    kiln_strmap_put(&jobs->usage, u->client, u);
  }
  u->jobs++;
  job->usage = u;
}

/* `job` ended (or is freed): it no longer counts. The only decrement. */
void usage_drop_locked(kilnd_jobs_t *jobs, job_t *job) {
  client_usage_t *u = job->usage;
  if (!u) return;
  job->usage = NULL;
  if (--u->jobs > 0) return;
  kiln_strmap_remove(&jobs->usage, u->client);
  kiln_free(u->client);
  kiln_free(u);
}

/* ---- per-client limits ---- */

const char *kilnd_limit_name(kilnd_limit_t limit) {
  switch (limit) {
    case KILND_LIMIT_REQUEST_BYTES: return "client-max-request-bytes";
    case KILND_LIMIT_JOBS: return "client-max-jobs";
    case KILND_LIMIT_QUEUE_SHARE: return "client-queue-share";
    case KILND_LIMIT_DOWNLOADS: return "client-max-downloads";
  }
  return "?";
}

/* Counts and logs one refusal. */
void limit_refused_locked(kilnd_jobs_t *jobs, kilnd_limit_t limit, const char *client) {
  if ((unsigned)limit < KILND_LIMIT_COUNT) jobs->stats.limit_refusals[limit]++;
  kiln_buf_t fields;
  kiln_buf_init(&fields);
  kiln_log_kv_str(&fields, "client", client && *client ? client : "anonymous");
  kiln_log_kv_str(&fields, "limit", kilnd_limit_name(limit));
  kiln_log_fields(KILN_LOG_INFO, "limit_hit", &fields);
  kiln_buf_deinit(&fields);
}

void kilnd_jobs_limit_refused(kilnd_jobs_t *jobs, kilnd_limit_t limit, const char *client) {
  uv_mutex_lock(&jobs->mu);
  limit_refused_locked(jobs, limit, client);
  uv_mutex_unlock(&jobs->mu);
}

kiln_status_t kilnd_jobs_check_request_bytes(kilnd_jobs_t *jobs, const char *client, uint64_t bytes,
                                             uint64_t max) {
  if (!max || bytes <= max) return NULL;
  if (jobs) kilnd_jobs_limit_refused(jobs, KILND_LIMIT_REQUEST_BYTES, client);
  return KILN_STATUS(KILN_STATUS_RESOURCE_EXHAUSTED,
                     "request of %" PRIu64
                     " bytes is over this client's limit client-max-request-bytes = %" PRIu64
                     "; send less per request (a large source goes through PutSource, up to the same limit)",
                     bytes, max);
}

void kilnd_jobs_client_wait_state(kilnd_jobs_t *jobs, const char *client, bool *out_at_limit,
                                  bool *out_can_clear) {
  const char *who = client && *client ? client : "anonymous";
  uv_mutex_lock(&jobs->mu);
  size_t mine = usage_jobs_locked(jobs, who);
  *out_at_limit = jobs->options.client_max_jobs && mine >= jobs->options.client_max_jobs;
  bool busy = jobs->running || jobs->queued_tasks[1] || jobs->queued_tasks[2] || jobs->queued_tasks[3];
  for (job_t *j = jobs->jobs; !busy && j; j = j->next) busy = !job_terminal(j);
  *out_can_clear = mine > 0 || busy;
  uv_mutex_unlock(&jobs->mu);
}

kiln_status_t admission_limits_locked(kilnd_jobs_t *jobs, const char *client, kilnd_priority_t p,
                                      size_t misses, size_t new_items, bool restored) {
  if (new_items && jobs->queued_tasks[p] >= jobs->options.queue_capacity) {
    return KILN_STATUS(KILN_STATUS_RESOURCE_EXHAUSTED,
                       "the %s queue is full (%zu queued compiles, queue-capacity %zu): retry later or at "
                       "another priority",
                       class_names[p], jobs->queued_tasks[p], jobs->options.queue_capacity);
  }
  if (restored) return NULL; /* a job from the store was admitted once: never refused by a client limit */
  size_t max_jobs = jobs->options.client_max_jobs;
  if (max_jobs && misses > 0) {
    size_t mine = usage_jobs_locked(jobs, client);
    if (mine >= max_jobs) {
      limit_refused_locked(jobs, KILND_LIMIT_JOBS, client);
      return KILN_STATUS(
          KILN_STATUS_RESOURCE_EXHAUSTED,
          "client %s has %zu unfinished jobs, the limit client-max-jobs = %zu; wait for some to "
          "finish",
          client, mine, max_jobs);
    }
  }
  unsigned share = jobs->options.client_queue_share;
  if (share && new_items > 0) {
    size_t cap = jobs->options.queue_capacity * share / 100;
    if (cap < 1) cap = 1;
    client_queue_t *q = client_queue_locked(jobs, p, client, false);
    if (q && q->n_queued >= cap) {
      limit_refused_locked(jobs, KILND_LIMIT_QUEUE_SHARE, client);
      return KILN_STATUS(
          KILN_STATUS_RESOURCE_EXHAUSTED,
          "client %s holds %zu queued compiles of the %s queue, the limit client-queue-share = "
          "%u%% of queue-capacity %zu (%zu); wait for some to start",
          client, q->n_queued, class_names[p], share, jobs->options.queue_capacity, cap);
    }
  }
  return NULL;
}

/* ---- queues ---- */

void task_free(task_t *task) {
  kiln_free(task->client);
  source_release(task->source);
  for (size_t i = 0; i < task->n_flags; i++) kiln_free(task->flags[i]);
  kiln_free(task->flags);
  kiln_free(task->items);
  kiln_free(task);
}

client_queue_t *client_queue_locked(kilnd_jobs_t *jobs, kilnd_priority_t p, const char *client, bool create) {
  for (client_queue_t *q = jobs->queues[p]; q; q = q->next) {
    if (strcmp(q->client, client) == 0) return q;
  }
  if (!create) return NULL;
  client_queue_t *q = kiln_calloc(1, sizeof *q);
  q->client = kiln_strdup(client);
  q->next = jobs->queues[p];
  jobs->queues[p] = q;
  return q;
}

/* The one place queued-task counts change (the class's and the client's). */
static void queue_count(kilnd_jobs_t *jobs, client_queue_t *q, kilnd_priority_t p, int delta) {
  if (delta > 0) {
    jobs->queued_tasks[p]++;
    q->n_queued++;
  } else {
    jobs->queued_tasks[p]--;
    q->n_queued--;
  }
}

void enqueue_task_locked(kilnd_jobs_t *jobs, task_t *task) {
  client_queue_t *q = client_queue_locked(jobs, task->priority, task->client, true);
  task->next = NULL;
  task->queued_ns = kiln_time_monotonic_ns();
  if (q->tail)
    q->tail->next = task;
  else
    q->head = task;
  q->tail = task;
  queue_count(jobs, q, task->priority, +1);
}

/* Puts a task back first in its client's line (a submit that failed). */
static void requeue_front_locked(kilnd_jobs_t *jobs, task_t *task) {
  client_queue_t *q = client_queue_locked(jobs, task->priority, task->client, true);
  task->next = q->head;
  q->head = task;
  if (!q->tail) q->tail = task;
  queue_count(jobs, q, task->priority, +1);
}

/* Removes a queued task from its client's FIFO (the queue itself stays). */
void dequeue_task_locked(kilnd_jobs_t *jobs, task_t *task) {
  client_queue_t *q = client_queue_locked(jobs, task->priority, task->client, false);
  if (!q) return;
  task_t *prev = NULL;
  for (task_t *t = q->head; t; prev = t, t = t->next) {
    if (t != task) continue;
    if (prev)
      prev->next = t->next;
    else
      q->head = t->next;
    if (q->tail == t) q->tail = prev;
    queue_count(jobs, q, task->priority, -1);
    return;
  }
}

void unlink_running_locked(kilnd_jobs_t *jobs, task_t *task) {
  for (task_t **p = &jobs->running; *p; p = &(*p)->next) {
    if (*p == task) {
      *p = task->next;
      return;
    }
  }
}

/* Position of a task: queued tasks that will be taken before it (approximate for
 * round robin: every task of higher classes plus its own class's earlier ones). */
uint32_t queue_position_locked(kilnd_jobs_t *jobs, kilnd_priority_t p) {
  uint64_t n = 0;
  for (int c = KILND_PRIORITY_INTERACTIVE; c <= (int)p; c++) n += jobs->queued_tasks[c];
  return n > 0 ? (uint32_t)(n - 1) : 0;
}

/* ---- dispatch ---- */

/* The tasks one client may run at once (client-worker-share, at least one) on a
 * pool of `workers`; 0: no limit. */
static size_t worker_share_cap(const kilnd_jobs_t *jobs, size_t workers) {
  unsigned share = jobs->options.client_worker_share;
  if (!share) return 0;
  size_t cap = workers * share / 100;
  return cap < 1 ? 1 : cap;
}

/* May `client` start one more task under `cap`? Its running tasks are counted on
 * the running list (at most one per worker). Under mu. */
static bool under_worker_share(kilnd_jobs_t *jobs, const char *client, size_t cap) {
  if (!cap) return true;
  size_t running = 0;
  for (task_t *t = jobs->running; t; t = t->next) running += strcmp(t->client, client) == 0;
  return running < cap;
}

/* Round robin inside the highest non-empty class, over the clients under their
 * worker share. A BULK task still gathering is not taken; *out_wait_ms is then how
 * long until one is ready. A client at its share is passed over (its tasks wait
 * for one of its own to finish: a worker becoming ready schedules again). Under mu. */
static task_t *pop_next_task_locked(kilnd_jobs_t *jobs, size_t cap, int64_t *out_wait_ms) {
  int64_t now = kiln_time_monotonic_ns();
  for (int p = KILND_PRIORITY_INTERACTIVE; p <= KILND_PRIORITY_BULK; p++) {
    if (!jobs->queued_tasks[p]) continue;
    client_queue_t *start = jobs->turn[p] ? jobs->turn[p] : jobs->queues[p];
    client_queue_t *q = start;
    do {
      if (!q) q = jobs->queues[p];
      if (q->head && !under_worker_share(jobs, q->client, cap)) {
        /* at its share: the next client */
      } else if (q->head && p == KILND_PRIORITY_BULK &&
                 now - q->head->queued_ns < (int64_t)BULK_GATHER_MS * 1000000) {
        int64_t wait_ms = BULK_GATHER_MS - (now - q->head->queued_ns) / 1000000;
        if (*out_wait_ms < 0 || wait_ms < *out_wait_ms) *out_wait_ms = wait_ms > 0 ? wait_ms : 1;
      } else if (q->head) {
        task_t *t = q->head;
        q->head = t->next;
        if (!q->head) q->tail = NULL;
        queue_count(jobs, q, (kilnd_priority_t)p, -1);
        jobs->turn[p] = q->next; /* next time, the next client first */
        t->next = NULL;
        return t;
      }
      q = q->next ? q->next : jobs->queues[p];
    } while (q != start);
  }
  return NULL;
}

static bool same_flags(const task_t *a, const task_t *b) {
  if (a->n_flags != b->n_flags) return false;
  for (size_t i = 0; i < a->n_flags; i++) {
    if (strcmp(a->flags[i], b->flags[i]) != 0) return false;
  }
  return true;
}

/* Folds queued tasks of the same class, source and flags into `task` (just popped),
 * up to FUSE_MAX_ITEMS items: their targets then share one front half (parse,
 * optimize) on one worker, as the targets of one request do. Jobs that asked for
 * the same model one target at a time (a bulk recompile: one legacy file, one
 * target) would otherwise parse and optimize it once per target. Under mu. */
static void fuse_queued_locked(kilnd_jobs_t *jobs, task_t *task) {
  for (client_queue_t *q = jobs->queues[task->priority]; q; q = q->next) {
    for (task_t *t = q->head, *next; t; t = next) {
      next = t->next;
      if (task->n_items + t->n_items > FUSE_MAX_ITEMS) continue;
      if (strcmp(t->source->digest, task->source->digest) != 0 || !same_flags(t, task)) continue;
      dequeue_task_locked(jobs, t);
      task->items = kiln_realloc(task->items, (task->n_items + t->n_items) * sizeof *task->items);
      for (size_t i = 0; i < t->n_items; i++) {
        t->items[i]->task = task;
        task->items[task->n_items++] = t->items[i];
      }
      t->n_items = 0;
      task_free(t);
      jobs->stats.tasks_fused++;
    }
  }
}

/* The back halves `task` may fork, given `idle` idle workers (this one included)
 * of `workers`: the cores of every idle worker spread over the tasks waiting for
 * them, so a lone job uses the machine the way `kilnc -t` does, and a full queue
 * gives each task its worker's share (the pool's default, 0). Under mu. */
static size_t task_jobs_locked(kilnd_jobs_t *jobs, const task_t *task, size_t workers, size_t idle) {
  size_t waiting = 1;
  for (int p = KILND_PRIORITY_INTERACTIVE; p <= KILND_PRIORITY_BULK; p++) waiting += jobs->queued_tasks[p];
  long cpus = sysconf(_SC_NPROCESSORS_ONLN);
  if (!workers || cpus < 1 || waiting >= idle) return 0;
  size_t n = (size_t)cpus * idle / (workers * waiting);
  if (n > task->n_items) n = task->n_items;
  return n > 1 ? n : 0;
}

static void on_gather(uv_timer_t *timer) { schedule(timer->data); }

void schedule(kilnd_jobs_t *jobs) {
  for (;;) {
    if (!jobs->pool.self) return; /* closed */
    size_t idle = jobs->pool.idle(jobs->pool.self);
    if (idle == 0) return;
    kilnd_workers_stats_t ws;
    jobs->pool.stats(jobs->pool.self, &ws);
    engine_lock(jobs);
    if (jobs->closing) {
      engine_unlock(jobs);
      return;
    }
    int64_t wait_ms = -1;
    task_t *task = pop_next_task_locked(jobs, worker_share_cap(jobs, ws.count), &wait_ms);
    if (!task) {
      engine_unlock(jobs);
      if (wait_ms >= 0) uv_timer_start(&jobs->gather, on_gather, (uint64_t)wait_ms, 0);
      return;
    }
    fuse_queued_locked(jobs, task);
    const char **targets = kiln_calloc(task->n_items ? task->n_items : 1, sizeof *targets);
    for (size_t i = 0; i < task->n_items; i++) targets[i] = task->items[i]->target;
    kilnd_task_t wt = {.id = task->id,
                       .source = task->source->data,
                       .source_len = task->source->len,
                       .source_name = task->source->name,
                       .source_digest = task->source->digest,
                       .targets = targets,
                       .n_targets = task->n_items,
                       .flags = (const char *const *)task->flags,
                       .n_flags = task->n_flags,
                       .embed_source = jobs->options.embed_source,
                       .jobs = task_jobs_locked(jobs, task, ws.count, idle)};
    /* Running before submit: the pool reports STARTED from inside it. Only the
     * loop frees a running task, so `task` outlives the unlocked submit. */
    task->running = true;
    task->next = jobs->running;
    jobs->running = task;
    for (size_t i = 0; i < task->n_items; i++) task->items[i]->state = ITEM_RUNNING;
    /* A plain unlock: the outbox waits until the pool knows the task, or a
     * cancellation of it queued there would reach the pool first and be lost. */
    uv_mutex_unlock(&jobs->mu);
    kiln_status_t st = jobs->pool.submit(jobs->pool.self, &wt);
    kiln_free(targets);
    engine_lock(jobs);
    engine_unlock(jobs); /* what waited (STARTED's unlock has usually run it) */
    if (st) {
      /* Not expected (a worker was idle): put it back, first in line. */
      kiln_log_status(KILN_LOG_ERROR, "task_submit_failed", st, NULL);
      kiln_status_free(st);
      engine_lock(jobs);
      unlink_running_locked(jobs, task);
      task->running = false;
      for (size_t i = 0; i < task->n_items; i++) task->items[i]->state = ITEM_QUEUED;
      requeue_front_locked(jobs, task);
      engine_unlock(jobs);
      return;
    }
  }
}
