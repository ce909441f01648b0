/* The job engine. See jobs.h for the model; this block covers the mechanics.
 *
 *   job (per Compile)          item (per cache key)           task (per admission)
 *   QUEUED ──> RUNNING ──> DONE     QUEUED ──> RUNNING ──> STORING ──> DONE
 *     │          │    ╲──> FAILED     │          ╲──> FAILED
 *     ╰──────────┴──────> CANCELLED   ╰── dropped when its last waiter leaves
 *     ╰──> DONE (all cached)
 *
 * Ownership. The engine owns jobs, items, tasks and sources (ref-counted: one
 * source serves every task and job made from it). An item belongs to the task that
 * will compile it and lists its waiters (job, target index); a job target points
 * at its item until the item finishes. Items leave the live list when they finish
 * or lose their last waiter; tasks leave when the worker reports FINISHED (or, for
 * queued ones, when their last item is dropped).
 *
 * Locking. `mu` guards everything below it in kilnd_jobs_s. Admission holds it only
 * for the in-memory part (after the cache work). Loop callbacks hold it while they
 * update state and push events to watchers; kilnd_stream_send and
 * kilnd_workers_submit/cancel never call back synchronously, so holding `mu` across
 * them cannot deadlock.
 *
 * Per-client usage. `usage` counts each client's unfinished jobs: usage_add when a
 * job that needs a compile is admitted (or restored unfinished from the store),
 * usage_drop when it turns terminal (count_terminal: every terminal transition
 * passes there); job->usage marks a counted job, so each is dropped exactly once.
 * Each client queue counts its queued tasks beside the class total (queue_count,
 * the one place either changes). Both only under `mu`.
 *
 * Artifacts. A worker's TARGET_DONE carries the VMFB bytes; storing them (SQLite,
 * disk) runs on the thread pool, then the item completes on the loop.
 */
#include "daemon/jobs.h"

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "base/alloc.h"
#include "base/buf.h"
#include "base/digest.h"
#include "base/log.h"
#include "base/mlir_text.h"
#include "base/time.h"
#include "daemon/client_text.h"
#include "daemon/diags.h"
#include "daemon/metrics.h"
#include "kiln/v1/kiln.pb-c.h"

#define SWEEP_INTERVAL_MS 500
#define COMPILER_WAIT_MS 30000
/* Finished jobs kept in memory at most (a few KiB each): under sustained cache-hit
 * traffic retention alone would grow without bound. Older ones are forgotten sooner
 * (WatchJob: NOT_FOUND); what they produced stays in the cache. */
#define MAX_FINISHED_JOBS 10000
/* What a watcher hears when kilnd stops under it (the job lives on in the store). */
#define SHUTDOWN_MESSAGE                                                                      \
  "kilnd is shutting down; the job is kept: watch it again (resume with after_sequence) once " \
  "kilnd is back"

typedef struct job_s job_t;
typedef struct task_s task_t;

typedef struct source_s {
  int refs;
  uint8_t *data;
  size_t len;
  char digest[65];     /* of the bytes: the stored source, the VMFB's provenance */
  char key_digest[65]; /* of their normal form: the cache key's part (kiln_cache_source_key_digest) */
  char *name;
} source_t;

typedef enum item_state_e { ITEM_QUEUED, ITEM_RUNNING, ITEM_STORING, ITEM_DONE, ITEM_FAILED } item_state_t;

typedef struct waiter_s {
  job_t *job;
  size_t target; /* index into job->targets */
} waiter_t;

typedef struct item_s {
  char key[65];
  char *target;
  item_state_t state;
  task_t *task;
  waiter_t *waiters;
  size_t n_waiters;
  job_t *owner; /* the job whose admission created it: its result is no cache hit */
  /* Its last waiter left and its task is being cancelled: it only waits for the
   * worker's failure report now. Admission never merges into it (a job for the same
   * key gets a fresh item instead of the cancellation). */
  bool abandoned;
  struct item_s *next; /* live list */
} item_t;

typedef struct task_s {
  uint64_t id;
  kilnd_priority_t priority;
  char *client;
  source_t *source;
  char **flags;
  size_t n_flags;
  item_t **items;
  size_t n_items;
  bool running;
  int64_t queued_ns; /* when it was queued (monotonic): BULK tasks wait BULK_GATHER_MS */
  struct task_s *next; /* in its client's FIFO while queued; in `running` while running */
} task_t;

typedef struct client_queue_s {
  char *client;
  task_t *head, *tail;
  size_t n_queued; /* tasks in the FIFO: client-queue-share */
  struct client_queue_s *next;
} client_queue_t;

typedef enum target_state_e { TARGET_PENDING, TARGET_DONE, TARGET_FAILED } target_state_t;

typedef struct job_target_s {
  char *target;
  char key[65];
  target_state_t state;
  item_t *item;
  /* The outcome, kept for the job store. */
  char digest[65];
  uint64_t size;
  bool cache_hit;
  uint64_t compile_ms;
  int code;
  char *message;
} job_target_t;

typedef struct event_s {
  uint64_t seq;
  Kiln__V1__JobEvent__EventCase kind;
  uint8_t *packed;
  size_t len;
} event_t;

typedef struct watcher_s {
  kilnd_jobs_t *jobs;
  job_t *job;
  kilnd_stream_t *stream;
  size_t *replay; /* event indices to send first */
  size_t n_replay, replay_at;
  size_t live_at; /* then every event from this index on */
  bool sending;
  bool done; /* the terminal event was handed over, or the stream is gone */
  struct watcher_s *next;
} watcher_t;

/* Someone waiting in-process for a job to end (kilnd_jobs_listen). */
struct kilnd_job_listener_s {
  job_t *job;
  kilnd_job_finished_fn_t fn;
  void *user;
  struct kilnd_job_listener_s *next;
};

/* One client's unfinished jobs (client-max-jobs); freed when the count drops to 0. */
typedef struct client_usage_s {
  char *client;
  size_t jobs;
  struct client_usage_s *next;
} client_usage_t;
#define USAGE_BUCKETS 64

struct job_s {
  char id[KILND_JOB_ID_LEN + 1];
  kilnd_job_state_t state;
  kilnd_priority_t priority;
  char *client;
  char *request_id;
  char request_hash[65];
  source_t *source;
  job_target_t *targets;
  size_t n_targets;
  int64_t created_unix_ms;
  int64_t finished_unix_ms;
  char *flags;         /* normalized, one per line: for the job store */
  char *source_name;
  char source_digest[65];
  char *terminal_message;
  bool ephemeral; /* every target was cached at admission: not written to the store */
  client_usage_t *usage; /* counted in its client's unfinished jobs (usage_add) until terminal */
  kiln_index_label_t *labels; /* recorded on the artifacts its compiles produce */
  size_t n_labels;
  int64_t finished_monotonic_ns; /* 0 while live */
  int64_t deadline_monotonic_ns;
  event_t *events;
  size_t n_events, cap_events;
  /* A job answered wholly from the cache keeps no event log until someone watches
   * it (most never are): materialize() builds it then from the job's fields. */
  bool events_deferred;
  int64_t event_time_ms; /* non-zero: the time materialize() stamps on events */
  watcher_t *watchers;
  kilnd_job_listener_t *listeners;
  kilnd_job_admission_t admission; /* the original answer, for request_id retries */
  struct job_s *next;
  struct job_s *id_next, *rid_next; /* hash chains (index_*) */
};

/* Key digests of recent sources, by the digest of their bytes: a repeated Compile
 * of the same bytes (a cache hit, mostly) skips the normal form's pass over them.
 * Direct-mapped; its own mutex (admission runs on the loop and on the pool). */
#define KEY_MEMO_SLOTS 64

typedef struct key_memo_s {
  uv_mutex_t mu;
  struct {
    char raw[65], key[65];
  } slot[KEY_MEMO_SLOTS];
} key_memo_t;

struct kilnd_jobs_s {
  uv_loop_t *loop;
  kiln_cache_t *cache;
  key_memo_t key_memo;
  kilnd_jobs_options_t options;
  char *compiler;
  kilnd_compiler_info_t identity; /* the same compiler, field by field; set with it */
  kilnd_workers_t *workers;
  uv_async_t kick;
  uv_timer_t sweep;
  uv_timer_t gather; /* dispatches BULK tasks once their gathering time is over */
  bool closing;
  bool closed; /* free_everything ran: no jobs, queues or indexes; kilnd_jobs_destroy frees */
  void (*close_done)(void *user);
  void *close_user;
  int handles_open;

  uv_mutex_t mu;    /* recursive: the pool calls back from inside submit */
  uv_cond_t ready;  /* signalled when the compiler identity becomes known */
  bool draining;
  job_t *jobs;       /* newest first */
  job_t **by_id;     /* hash index of `jobs` by id, and by request_id where set */
  job_t **by_rid;
  size_t n_buckets;  /* a power of two */
  size_t n_jobs;
  item_t *items;
  client_queue_t *queues[4]; /* by priority class 1..3 */
  client_queue_t *turn[4];   /* whose turn it is in each class */
  size_t queued_tasks[4];
  client_usage_t *usage[USAGE_BUCKETS]; /* unfinished jobs by client, hashed */
  task_t *running;
  uint64_t next_task_id;
  kilnd_jobs_stats_t stats;
  kilnd_histograms_t compile_seconds; /* by target, for /metrics */
  void (*on_ready)(void *user);       /* kilnd_jobs_on_ready: once, at the first ready worker */
  void *on_ready_user;
  uint8_t id_prefix[8];
  uint32_t id_counter;
  bool id_seeded;

  /* The job store (may be NULL): snapshots wait here for the loop to hand them to
   * the thread pool (admission runs off the loop, where uv_queue_work may not be
   * called), one flush at a time. */
  kiln_jobstore_t *store;
  kiln_jobstore_job_t *persist;
  size_t n_persist;
  bool flushing;
  kiln_jobstore_job_t *readmit; /* unfinished jobs from the store, admitted once a worker is ready */
  size_t n_readmit;
};

/* ---- small helpers ---- */

static void source_release(source_t *s) {
  if (!s || --s->refs > 0) return;
  kiln_free(s->data);
  kiln_free(s->name);
  kiln_free(s);
}

static kiln_index_label_t *labels_copy(const kiln_index_label_t *labels, size_t n) {
  kiln_index_label_t *out = kiln_calloc(n ? n : 1, sizeof *out);
  for (size_t i = 0; i < n; i++) {
    out[i].key = kiln_strdup(labels[i].key);
    out[i].value = kiln_strdup(labels[i].value);
  }
  return out;
}

static void labels_free(kiln_index_label_t *labels, size_t n) {
  for (size_t i = 0; i < n; i++) {
    kiln_free(labels[i].key);
    kiln_free(labels[i].value);
  }
  kiln_free(labels);
}

static Kiln__V1__JobState proto_state(kilnd_job_state_t s) { return (Kiln__V1__JobState)s; }

static bool job_terminal(const job_t *job) {
  return job->state == KILND_JOB_DONE || job->state == KILND_JOB_FAILED || job->state == KILND_JOB_CANCELLED;
}

/* ---- the job index: ids and request ids in O(1) (10,000 finished jobs are kept) ---- */

static size_t str_hash(const char *s) {
  uint64_t h = 1469598103934665603ULL; /* FNV-1a */
  for (; *s; s++) h = (h ^ (uint8_t)*s) * 1099511628211ULL;
  return (size_t)(h ^ (h >> 32));
}

static void index_add(kilnd_jobs_t *jobs, job_t *job);

static void index_grow(kilnd_jobs_t *jobs) {
  kiln_free(jobs->by_id);
  kiln_free(jobs->by_rid);
  jobs->n_buckets = jobs->n_buckets ? jobs->n_buckets * 2 : 256;
  jobs->by_id = kiln_calloc(jobs->n_buckets, sizeof *jobs->by_id);
  jobs->by_rid = kiln_calloc(jobs->n_buckets, sizeof *jobs->by_rid);
  jobs->n_jobs = 0;
  for (job_t *j = jobs->jobs; j; j = j->next) index_add(jobs, j);
}

/* Under mu: `job` is on the list; puts it in the index (its id and request_id
 * must not change while it is there). */
static void index_add(kilnd_jobs_t *jobs, job_t *job) {
  if (jobs->n_jobs >= jobs->n_buckets) {
    index_grow(jobs); /* re-adds every listed job, this one included */
    return;
  }
  size_t mask = jobs->n_buckets - 1;
  job_t **b = &jobs->by_id[str_hash(job->id) & mask];
  job->id_next = *b;
  *b = job;
  if (job->request_id) {
    b = &jobs->by_rid[str_hash(job->request_id) & mask];
    job->rid_next = *b;
    *b = job;
  }
  jobs->n_jobs++;
}

static void index_remove(kilnd_jobs_t *jobs, job_t *job) {
  if (!jobs->n_buckets) return;
  size_t mask = jobs->n_buckets - 1;
  for (job_t **p = &jobs->by_id[str_hash(job->id) & mask]; *p; p = &(*p)->id_next) {
    if (*p == job) {
      *p = job->id_next;
      jobs->n_jobs--;
      break;
    }
  }
  if (job->request_id) {
    for (job_t **p = &jobs->by_rid[str_hash(job->request_id) & mask]; *p; p = &(*p)->rid_next) {
      if (*p == job) {
        *p = job->rid_next;
        break;
      }
    }
  }
  job->id_next = job->rid_next = NULL;
}

/* Under mu: a new job, newest first on the list, and indexed. */
static void job_link(kilnd_jobs_t *jobs, job_t *job) {
  job->next = jobs->jobs;
  jobs->jobs = job;
  index_add(jobs, job);
}

static job_t *find_job(kilnd_jobs_t *jobs, const char *id) {
  if (!jobs->n_buckets) return NULL;
  for (job_t *j = jobs->by_id[str_hash(id) & (jobs->n_buckets - 1)]; j; j = j->id_next) {
    if (strcmp(j->id, id) == 0) return j;
  }
  return NULL;
}

/* The newest job with this request_id. */
static job_t *find_request(kilnd_jobs_t *jobs, const char *request_id) {
  if (!jobs->n_buckets) return NULL;
  job_t *found = NULL;
  for (job_t *j = jobs->by_rid[str_hash(request_id) & (jobs->n_buckets - 1)]; j; j = j->rid_next) {
    if (strcmp(j->request_id, request_id) == 0 && (!found || j->created_unix_ms > found->created_unix_ms)) found = j;
  }
  return found;
}

/* Job ids: 8 random bytes read once per process, then a counter mixed in (a
 * bijective 32-bit mix, so ids look unrelated yet never collide within a process,
 * and a restart draws a new prefix). Under the engine's mutex. */
static void random_id(kilnd_jobs_t *jobs, char *out) {
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
  out[0] = 'j';
  out[1] = '-';
  for (size_t i = 0; i < sizeof jobs->id_prefix; i++) snprintf(out + 2 + 2 * i, 3, "%02x", jobs->id_prefix[i]);
  snprintf(out + 2 + 2 * sizeof jobs->id_prefix, 9, "%08x", x);
}

static void flush_watchers(kilnd_jobs_t *jobs, job_t *job);

/* Appends an event to the job's log (packed) and pushes it to watchers. */
static void emit(kilnd_jobs_t *jobs, job_t *job, Kiln__V1__JobEvent *ev) {
  if (job->events_deferred) return;
  ev->sequence = job->n_events + 1;
  ev->time_unix_ms = job->event_time_ms ? job->event_time_ms : kiln_time_unix_ms();
  ev->job_id = job->id;
  size_t len = protobuf_c_message_get_packed_size(&ev->base);
  if (job->n_events == job->cap_events) {
    /* A job answered from the cache has 2 + targets events; grow from there. */
    job->cap_events = job->cap_events ? job->cap_events * 2 : 2 + job->n_targets;
    job->events = kiln_realloc(job->events, job->cap_events * sizeof *job->events);
  }
  event_t *e = &job->events[job->n_events++];
  e->seq = ev->sequence;
  e->kind = ev->event_case;
  e->packed = kiln_malloc(len ? len : 1);
  e->len = protobuf_c_message_pack(&ev->base, e->packed);
  flush_watchers(jobs, job);
}

static void emit_queued(kilnd_jobs_t *jobs, job_t *job, uint32_t position) {
  Kiln__V1__JobEvent__Queued q = KILN__V1__JOB_EVENT__QUEUED__INIT;
  q.position = position;
  q.priority = (Kiln__V1__Priority)job->priority;
  Kiln__V1__JobEvent ev = KILN__V1__JOB_EVENT__INIT;
  ev.event_case = KILN__V1__JOB_EVENT__EVENT_QUEUED;
  ev.queued = &q;
  emit(jobs, job, &ev);
}

static void emit_started(kilnd_jobs_t *jobs, job_t *job, const char *worker) {
  Kiln__V1__JobEvent__Started s = KILN__V1__JOB_EVENT__STARTED__INIT;
  s.worker = (char *)(worker ? worker : "");
  Kiln__V1__JobEvent ev = KILN__V1__JOB_EVENT__INIT;
  ev.event_case = KILN__V1__JOB_EVENT__EVENT_STARTED;
  ev.started = &s;
  emit(jobs, job, &ev);
}

static void emit_target_done(kilnd_jobs_t *jobs, job_t *job, size_t t, const char *digest, uint64_t size,
                             bool hit, uint64_t compile_ms) {
  Kiln__V1__JobEvent__TargetDone d = KILN__V1__JOB_EVENT__TARGET_DONE__INIT;
  d.target = job->targets[t].target;
  d.artifact_digest = (char *)digest;
  d.size_bytes = size;
  d.cache_hit = hit;
  d.compile_ms = hit ? 0 : compile_ms;
  d.cache_key = job->targets[t].key;
  job_target_t *jt = &job->targets[t];
  snprintf(jt->digest, sizeof jt->digest, "%s", digest ? digest : "");
  jt->size = size;
  jt->cache_hit = hit;
  jt->compile_ms = hit ? 0 : compile_ms;
  Kiln__V1__JobEvent ev = KILN__V1__JOB_EVENT__INIT;
  ev.event_case = KILN__V1__JOB_EVENT__EVENT_TARGET_DONE;
  ev.target_done = &d;
  emit(jobs, job, &ev);
}

static void emit_target_failed(kilnd_jobs_t *jobs, job_t *job, size_t t, kiln_status_code_t code,
                               const char *message) {
  /* As a client may read it: no server paths, no PERMISSION_DENIED (client_text.h). */
  char context[96];
  snprintf(context, sizeof context, "job %s", job->id);
  int client_code = (int)code;
  char *client_message = kilnd_message_for_client(&client_code, message, context);
  if (client_message) message = client_message;
  code = (kiln_status_code_t)client_code;
  Kiln__V1__JobEvent__TargetFailed f = KILN__V1__JOB_EVENT__TARGET_FAILED__INIT;
  f.target = job->targets[t].target;
  f.code = (int32_t)code;
  f.message = (char *)(message ? message : "");
  /* The compiler's diagnostics, structured: sent first as Diagnostic events, then
   * again inside TargetFailed (kiln.proto). */
  kilnd_diags_t diags = {0};
  if (code == KILN_STATUS_INVALID_ARGUMENT) kilnd_diags_parse(&diags, f.message, job->targets[t].target);
  for (size_t i = 0; i < diags.n; i++) {
    Kiln__V1__JobEvent dev = KILN__V1__JOB_EVENT__INIT;
    dev.event_case = KILN__V1__JOB_EVENT__EVENT_DIAGNOSTIC;
    dev.diagnostic = diags.items[i];
    emit(jobs, job, &dev);
  }
  f.n_diagnostics = diags.n;
  f.diagnostics = diags.items;
  job->targets[t].code = (int)code;
  kiln_free(job->targets[t].message);
  job->targets[t].message = kiln_strdup(f.message);
  Kiln__V1__JobEvent ev = KILN__V1__JOB_EVENT__INIT;
  ev.event_case = KILN__V1__JOB_EVENT__EVENT_TARGET_FAILED;
  ev.target_failed = &f;
  emit(jobs, job, &ev);
  kilnd_diags_free(&diags);
  kiln_free(client_message);
}

static void persist_later(kilnd_jobs_t *jobs, job_t *job);

/* The Terminal event for the job's current state, and nothing else. */
static void emit_terminal_event(kilnd_jobs_t *jobs, job_t *job, const char *message) {
  Kiln__V1__JobEvent__Terminal t = KILN__V1__JOB_EVENT__TERMINAL__INIT;
  t.state = proto_state(job->state);
  t.message = (char *)(message ? message : "");
  Kiln__V1__JobEvent ev = KILN__V1__JOB_EVENT__INIT;
  ev.event_case = KILN__V1__JOB_EVENT__EVENT_TERMINAL;
  ev.terminal = &t;
  emit(jobs, job, &ev);
}

/* Under mu: tells every listener how `job` ended (or that kilnd closes under it)
 * and forgets them. Each is unlinked before its callback runs. */
static void notify_listeners(job_t *job, bool shutdown, const char *message) {
  if (!job->listeners) return;
  kilnd_job_outcome_target_t stack[16];
  kilnd_job_outcome_target_t *targets =
      job->n_targets <= 16 ? stack : kiln_malloc(job->n_targets * sizeof *targets);
  for (size_t i = 0; i < job->n_targets; i++) {
    const job_target_t *jt = &job->targets[i];
    bool ok = jt->state == TARGET_DONE;
    targets[i] = (kilnd_job_outcome_target_t){.target = jt->target,
                                              .artifact_digest = ok ? jt->digest : "",
                                              .size_bytes = ok ? jt->size : 0,
                                              .cache_hit = ok && jt->cache_hit,
                                              .code = ok ? 0 : jt->code,
                                              .message = ok || !jt->message ? "" : jt->message};
  }
  kilnd_job_outcome_t outcome = {.job_id = job->id,
                                 .state = job->state,
                                 .shutdown = shutdown,
                                 .message = message ? message : "",
                                 .targets = targets,
                                 .n_targets = job->n_targets};
  while (job->listeners) {
    kilnd_job_listener_t *l = job->listeners;
    job->listeners = l->next;
    l->fn(l->user, &outcome);
    kiln_free(l);
  }
  if (targets != stack) kiln_free(targets);
}

static void emit_terminal(kilnd_jobs_t *jobs, job_t *job, const char *message) {
  job->finished_unix_ms = kiln_time_unix_ms();
  kiln_free(job->terminal_message);
  job->terminal_message = kiln_strdup(message ? message : "");
  persist_later(jobs, job);
  emit_terminal_event(jobs, job, message);
  notify_listeners(job, false, job->terminal_message);
}

/* ---- job completion ---- */

static void usage_drop(kilnd_jobs_t *jobs, job_t *job);

/* Every job's turn to a terminal state passes here once. */
static void count_terminal(kilnd_jobs_t *jobs, job_t *job) {
  kilnd_job_state_t state = job->state;
  if (state == KILND_JOB_DONE) jobs->stats.done++;
  else if (state == KILND_JOB_FAILED) jobs->stats.failed++;
  else if (state == KILND_JOB_CANCELLED) jobs->stats.cancelled++;
  usage_drop(jobs, job);
}

/* Ends the job when every target is settled. */
static void maybe_finish_job(kilnd_jobs_t *jobs, job_t *job) {
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
  emit_terminal(jobs, job, message);
}

/* ---- per-client usage ---- */

static client_usage_t **usage_slot(kilnd_jobs_t *jobs, const char *client) {
  client_usage_t **p = &jobs->usage[str_hash(client) & (USAGE_BUCKETS - 1)];
  while (*p && strcmp((*p)->client, client) != 0) p = &(*p)->next;
  return p;
}

static size_t usage_jobs(kilnd_jobs_t *jobs, const char *client) {
  client_usage_t *u = *usage_slot(jobs, client);
  return u ? u->jobs : 0;
}

/* Under mu: counts `job` (unfinished, not yet counted) for its client. The only
 * increment. */
static void usage_add(kilnd_jobs_t *jobs, job_t *job) {
  if (job->usage) return;
  client_usage_t **p = usage_slot(jobs, job->client);
  if (!*p) {
    *p = kiln_calloc(1, sizeof **p);
    (*p)->client = kiln_strdup(job->client);
  }
  (*p)->jobs++;
  job->usage = *p;
}

/* Under mu: `job` ended (or is freed): it no longer counts. The only decrement. */
static void usage_drop(kilnd_jobs_t *jobs, job_t *job) {
  client_usage_t *u = job->usage;
  if (!u) return;
  job->usage = NULL;
  if (--u->jobs > 0) return;
  for (client_usage_t **p = usage_slot(jobs, u->client); *p; p = &(*p)->next) {
    if (*p == u) {
      *p = u->next;
      break;
    }
  }
  kiln_free(u->client);
  kiln_free(u);
}

const char *kilnd_limit_name(kilnd_limit_t limit) {
  switch (limit) {
    case KILND_LIMIT_REQUEST_BYTES: return "client-max-request-bytes";
    case KILND_LIMIT_JOBS: return "client-max-jobs";
    case KILND_LIMIT_QUEUE_SHARE: return "client-queue-share";
    case KILND_LIMIT_DOWNLOADS: return "client-max-downloads";
  }
  return "?";
}

/* Under mu (recursive): counts and logs one refusal. */
static void limit_refused(kilnd_jobs_t *jobs, kilnd_limit_t limit, const char *client) {
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
  limit_refused(jobs, limit, client);
  uv_mutex_unlock(&jobs->mu);
}

kiln_status_t kilnd_jobs_check_request_bytes(kilnd_jobs_t *jobs, const char *client, uint64_t bytes,
                                             uint64_t max) {
  if (!max || bytes <= max) return NULL;
  if (jobs) kilnd_jobs_limit_refused(jobs, KILND_LIMIT_REQUEST_BYTES, client);
  return KILN_STATUS(KILN_STATUS_RESOURCE_EXHAUSTED,
                     "request of %" PRIu64 " bytes is over this client's limit client-max-request-bytes = %" PRIu64
                     "; send less per request (a large source goes through PutSource, up to the same limit)",
                     bytes, max);
}

void kilnd_jobs_client_wait_state(kilnd_jobs_t *jobs, const char *client, bool *out_at_limit,
                                  bool *out_can_clear) {
  const char *who = client && *client ? client : "anonymous";
  uv_mutex_lock(&jobs->mu);
  size_t mine = usage_jobs(jobs, who);
  *out_at_limit = jobs->options.client_max_jobs && mine >= jobs->options.client_max_jobs;
  bool busy = jobs->running || jobs->queued_tasks[1] || jobs->queued_tasks[2] || jobs->queued_tasks[3];
  for (job_t *j = jobs->jobs; !busy && j; j = j->next) busy = !job_terminal(j);
  *out_can_clear = mine > 0 || busy;
  uv_mutex_unlock(&jobs->mu);
}

/* ---- items and tasks ---- */

static item_t *find_item(kilnd_jobs_t *jobs, const char *key) {
  for (item_t *it = jobs->items; it; it = it->next) {
    if (!it->abandoned && strcmp(it->key, key) == 0) return it;
  }
  return NULL;
}

static void unlink_item(kilnd_jobs_t *jobs, item_t *item) {
  for (item_t **p = &jobs->items; *p; p = &(*p)->next) {
    if (*p == item) {
      *p = item->next;
      return;
    }
  }
}

static void item_free(item_t *item) {
  kiln_free(item->target);
  kiln_free(item->waiters);
  kiln_free(item);
}

static void task_free(task_t *task) {
  kiln_free(task->client);
  source_release(task->source);
  for (size_t i = 0; i < task->n_flags; i++) kiln_free(task->flags[i]);
  kiln_free(task->flags);
  kiln_free(task->items);
  kiln_free(task);
}

static client_queue_t *client_queue(kilnd_jobs_t *jobs, kilnd_priority_t p, const char *client, bool create) {
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

/* Under mu: the one place queued-task counts change (the class's and the
 * client's). */
static void queue_count(kilnd_jobs_t *jobs, client_queue_t *q, kilnd_priority_t p, int delta) {
  if (delta > 0) {
    jobs->queued_tasks[p]++;
    q->n_queued++;
  } else {
    jobs->queued_tasks[p]--;
    q->n_queued--;
  }
}

static void enqueue_task(kilnd_jobs_t *jobs, task_t *task) {
  client_queue_t *q = client_queue(jobs, task->priority, task->client, true);
  task->next = NULL;
  task->queued_ns = kiln_time_monotonic_ns();
  if (q->tail) q->tail->next = task;
  else q->head = task;
  q->tail = task;
  queue_count(jobs, q, task->priority, +1);
}

/* Removes a queued task from its client's FIFO (the queue itself stays). */
static void dequeue_task(kilnd_jobs_t *jobs, task_t *task) {
  client_queue_t *q = client_queue(jobs, task->priority, task->client, false);
  if (!q) return;
  task_t *prev = NULL;
  for (task_t *t = q->head; t; prev = t, t = t->next) {
    if (t != task) continue;
    if (prev) prev->next = t->next;
    else q->head = t->next;
    if (q->tail == t) q->tail = prev;
    queue_count(jobs, q, task->priority, -1);
    return;
  }
}

/* BULK work is for throughput, not latency: a BULK task waits this long after it
 * was queued before a worker may take it, so that the one-target jobs of one model
 * a bulk recompile submits within milliseconds are queued together and fuse into
 * one task (fuse_queued) instead of the first few starting alone on idle workers. */
#define BULK_GATHER_MS 25

/* Under mu: the tasks one client may run at once (client-worker-share, at least
 * one); 0: no limit. */
static size_t worker_share_cap(kilnd_jobs_t *jobs) {
  unsigned share = jobs->options.client_worker_share;
  if (!share || !jobs->workers) return 0;
  kilnd_workers_stats_t ws;
  kilnd_workers_stats(jobs->workers, &ws);
  size_t cap = ws.count * share / 100;
  return cap < 1 ? 1 : cap;
}

/* Under mu: may `client` start one more task under `cap`? Its running tasks are
 * counted on the running list (at most one per worker). */
static bool under_worker_share(kilnd_jobs_t *jobs, const char *client, size_t cap) {
  if (!cap) return true;
  size_t running = 0;
  for (task_t *t = jobs->running; t; t = t->next) running += strcmp(t->client, client) == 0;
  return running < cap;
}

/* Round robin inside the highest non-empty class, over the clients under their
 * worker share. A BULK task still gathering is not taken; *out_wait_ms (when not
 * NULL) is then how long until one is ready. A client at its share is passed over
 * (its tasks wait for one of its own to finish: a worker becoming ready schedules
 * again). */
static task_t *pop_next_task(kilnd_jobs_t *jobs, int64_t *out_wait_ms) {
  int64_t now = kiln_time_monotonic_ns();
  size_t cap = worker_share_cap(jobs);
  for (int p = KILND_PRIORITY_INTERACTIVE; p <= KILND_PRIORITY_BULK; p++) {
    if (!jobs->queued_tasks[p]) continue;
    client_queue_t *start = jobs->turn[p] ? jobs->turn[p] : jobs->queues[p];
    client_queue_t *q = start;
    do {
      if (!q) q = jobs->queues[p];
      if (q->head && !under_worker_share(jobs, q->client, cap)) {
        /* at its share: the next client */
      } else if (q->head && p == KILND_PRIORITY_BULK && now - q->head->queued_ns < (int64_t)BULK_GATHER_MS * 1000000) {
        int64_t wait_ms = BULK_GATHER_MS - (now - q->head->queued_ns) / 1000000;
        if (out_wait_ms && (*out_wait_ms < 0 || wait_ms < *out_wait_ms)) *out_wait_ms = wait_ms > 0 ? wait_ms : 1;
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

/* Position of a task: queued tasks that will be taken before it (approximate for
 * round robin: every task of higher classes plus its own class's earlier ones). */
static uint32_t queue_position(kilnd_jobs_t *jobs, kilnd_priority_t p) {
  uint64_t n = 0;
  for (int c = KILND_PRIORITY_INTERACTIVE; c <= (int)p; c++) n += jobs->queued_tasks[c];
  return n > 0 ? (uint32_t)(n - 1) : 0;
}

static void unlink_running(kilnd_jobs_t *jobs, task_t *task);

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
 * target) would otherwise parse and optimize it once per target. */
#define FUSE_MAX_ITEMS 16
static void fuse_queued(kilnd_jobs_t *jobs, task_t *task) {
  for (client_queue_t *q = jobs->queues[task->priority]; q; q = q->next) {
    for (task_t *t = q->head, *next; t; t = next) {
      next = t->next;
      if (task->n_items + t->n_items > FUSE_MAX_ITEMS) continue;
      if (strcmp(t->source->digest, task->source->digest) != 0 || !same_flags(t, task)) continue;
      dequeue_task(jobs, t);
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

static void on_gather(uv_timer_t *timer);

/* Under mu: the back halves `task` may fork, given the idle workers (this one
 * included): the cores of every idle worker spread over the tasks waiting for
 * them, so a lone job uses the machine the way `kilnc -t` does, and a full queue
 * gives each task its worker's share (the pool's default, 0). */
static size_t task_jobs(kilnd_jobs_t *jobs, const task_t *task) {
  kilnd_workers_stats_t ws;
  kilnd_workers_stats(jobs->workers, &ws);
  size_t idle = kilnd_workers_idle(jobs->workers);
  size_t waiting = 1;
  for (int p = KILND_PRIORITY_INTERACTIVE; p <= KILND_PRIORITY_BULK; p++) waiting += jobs->queued_tasks[p];
  long cpus = sysconf(_SC_NPROCESSORS_ONLN);
  if (!ws.count || cpus < 1 || waiting >= idle) return 0;
  size_t n = (size_t)cpus * idle / (ws.count * waiting);
  if (n > task->n_items) n = task->n_items;
  return n > 1 ? n : 0;
}

static void schedule(kilnd_jobs_t *jobs) {
  while (!jobs->closing && kilnd_workers_idle(jobs->workers) > 0) {
    int64_t wait_ms = -1;
    task_t *task = pop_next_task(jobs, &wait_ms);
    if (!task) {
      if (wait_ms >= 0) uv_timer_start(&jobs->gather, on_gather, (uint64_t)wait_ms, 0);
      return;
    }
    fuse_queued(jobs, task);
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
                       .jobs = task_jobs(jobs, task)};
    /* Running before submit: the pool reports STARTED from inside it. */
    task->running = true;
    task->next = jobs->running;
    jobs->running = task;
    for (size_t i = 0; i < task->n_items; i++) task->items[i]->state = ITEM_RUNNING;
    kiln_status_t st = kilnd_workers_submit(jobs->workers, &wt);
    kiln_free(targets);
    if (st) {
      /* Not expected (we checked for an idle worker): put it back, first in line. */
      kiln_log_status(KILN_LOG_ERROR, "task_submit_failed", st, NULL);
      kiln_status_free(st);
      unlink_running(jobs, task);
      task->running = false;
      for (size_t i = 0; i < task->n_items; i++) task->items[i]->state = ITEM_QUEUED;
      client_queue_t *q = client_queue(jobs, task->priority, task->client, true);
      task->next = q->head;
      q->head = task;
      if (!q->tail) q->tail = task;
      queue_count(jobs, q, task->priority, +1);
      return;
    }
  }
}

static void on_gather(uv_timer_t *timer) {
  kilnd_jobs_t *jobs = timer->data;
  uv_mutex_lock(&jobs->mu);
  schedule(jobs);
  uv_mutex_unlock(&jobs->mu);
}

static task_t *find_running(kilnd_jobs_t *jobs, uint64_t id) {
  for (task_t *t = jobs->running; t; t = t->next) {
    if (t->id == id) return t;
  }
  return NULL;
}

static void unlink_running(kilnd_jobs_t *jobs, task_t *task) {
  for (task_t **p = &jobs->running; *p; p = &(*p)->next) {
    if (*p == task) {
      *p = task->next;
      return;
    }
  }
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

/* The job leaves the item; an item with no waiters left stops (queued: dropped;
 * running: its task is cancelled once none of the task's items has a waiter). */
static void leave_item(kilnd_jobs_t *jobs, item_t *item, job_t *job) {
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
    unlink_item(jobs, item);
    task_remove_item(task, item);
    item_free(item);
    if (task->n_items == 0) {
      dequeue_task(jobs, task);
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
    kilnd_workers_cancel(jobs->workers, task->id); /* reports failures, then FINISHED */
  }
}

/* Settles target `t` of `job` as failed (if still pending). */
static void fail_target(kilnd_jobs_t *jobs, job_t *job, size_t t, kiln_status_code_t code, const char *message) {
  job_target_t *jt = &job->targets[t];
  if (jt->state != TARGET_PENDING) return;
  jt->state = TARGET_FAILED;
  item_t *item = jt->item;
  jt->item = NULL;
  if (item) leave_item(jobs, item, job);
  emit_target_failed(jobs, job, t, code, message);
}

/* Ends every pending target of `job` with `code` and the job with `state`. */
static void stop_job(kilnd_jobs_t *jobs, job_t *job, kilnd_job_state_t state, kiln_status_code_t code,
                     const char *message) {
  for (size_t t = 0; t < job->n_targets; t++) fail_target(jobs, job, t, code, message);
  if (job_terminal(job)) return;
  job->state = state;
  job->finished_monotonic_ns = kiln_time_monotonic_ns();
  count_terminal(jobs, job);
  emit_terminal(jobs, job, message);
}

/* ---- watchers ---- */

static void watcher_sent(kilnd_stream_t *stream, bool ok, void *user);

static void watcher_remove(watcher_t *w) {
  job_t *job = w->job;
  for (watcher_t **p = &job->watchers; *p; p = &(*p)->next) {
    if (*p == w) {
      *p = w->next;
      break;
    }
  }
  kiln_free(w->replay);
  kiln_free(w);
}

/* Sends the watcher's next event if none is in flight; finishes after Terminal. */
static void watcher_pump(watcher_t *w) {
  job_t *job = w->job;
  if (w->sending || w->done) return;
  size_t index;
  if (w->replay_at < w->n_replay) {
    index = w->replay[w->replay_at++];
  } else if (w->live_at < job->n_events) {
    index = w->live_at++;
  } else {
    return;
  }
  event_t *e = &job->events[index];
  Kiln__V1__JobEvent *ev =
      (Kiln__V1__JobEvent *)protobuf_c_message_unpack(&kiln__v1__job_event__descriptor, NULL, e->len, e->packed);
  kiln_status_t st = ev ? kilnd_stream_send(w->stream, &ev->base, watcher_sent, w)
                        : KILN_STATUS(KILN_STATUS_INTERNAL, "job %s: event %" PRIu64 " does not decode", job->id, e->seq);
  if (ev) protobuf_c_message_free_unpacked(&ev->base, NULL);
  if (st) {
    w->done = true;
    kilnd_stream_finish(w->stream, st);
    watcher_remove(w);
    return;
  }
  w->sending = true;
  if (e->kind == KILN__V1__JOB_EVENT__EVENT_TERMINAL) w->done = true;
}

static void maybe_closed(kilnd_jobs_t *jobs);

static void watcher_sent(kilnd_stream_t *stream, bool ok, void *user) {
  watcher_t *w = user;
  kilnd_jobs_t *jobs = w->jobs;
  uv_mutex_lock(&jobs->mu);
  w->sending = false;
  if (jobs->closing) {
    /* Counted in handles_open by kilnd_jobs_close; the job may be gone already. */
    kilnd_stream_finish(stream, KILN_STATUS(KILN_STATUS_UNAVAILABLE, "%s", SHUTDOWN_MESSAGE));
    if (w->job) watcher_remove(w);
    else kiln_free(w->replay), kiln_free(w);
    uv_mutex_unlock(&jobs->mu);
    jobs->handles_open--;
    maybe_closed(jobs);
    return;
  }
  if (!ok) {
    kilnd_stream_finish(stream, KILN_STATUS(KILN_STATUS_CANCELLED, "the watcher went away"));
    watcher_remove(w);
  } else if (w->done) {
    kilnd_stream_finish(stream, NULL); /* the Terminal event went out: OK */
    watcher_remove(w);
  } else {
    watcher_pump(w);
  }
  uv_mutex_unlock(&jobs->mu);
}

static void watcher_cancelled(kilnd_stream_t *stream, void *user) {
  watcher_t *w = user;
  kilnd_jobs_t *jobs = w->jobs;
  uv_mutex_lock(&jobs->mu);
  if (!w->sending) {
    /* Nothing in flight will call back: end it here. */
    kilnd_stream_finish(stream, KILN_STATUS(KILN_STATUS_CANCELLED, "the client cancelled the watch"));
    watcher_remove(w);
  } else {
    w->done = true; /* watcher_sent finishes it (its send completes with ok = false) */
  }
  uv_mutex_unlock(&jobs->mu);
}

static void flush_watchers(kilnd_jobs_t *jobs, job_t *job) {
  (void)jobs;
  for (watcher_t *w = job->watchers, *next; w; w = next) {
    next = w->next;
    watcher_pump(w);
  }
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
  kilnd_job_admission_deinit(&job->admission);
  kiln_free(job);
}

static void on_sweep(uv_timer_t *timer) {
  kilnd_jobs_t *jobs = timer->data;
  int64_t now = kiln_time_monotonic_ns();
  uv_mutex_lock(&jobs->mu);
  size_t finished = 0; /* the list runs newest first: past the cap, the oldest go */
  for (job_t **p = &jobs->jobs; *p;) {
    job_t *job = *p;
    if (!job_terminal(job) && job->deadline_monotonic_ns != INT64_MAX && now > job->deadline_monotonic_ns) {
      stop_job(jobs, job, KILND_JOB_FAILED, KILN_STATUS_DEADLINE_EXCEEDED,
               "the job's deadline (the Compile call's gRPC deadline) passed before it finished");
    }
    finished += job_terminal(job);
    if (job_terminal(job) && !job->watchers &&
        (finished > MAX_FINISHED_JOBS || now - job->finished_monotonic_ns > jobs->options.retention_ms * 1000000)) {
      *p = job->next;
      index_remove(jobs, job);
      job_free(job);
      continue;
    }
    p = &job->next;
  }
  uv_mutex_unlock(&jobs->mu);
}

/* ---- worker events ---- */

typedef struct store_s {
  uv_work_t work;
  kilnd_jobs_t *jobs;
  char key[65];
  char *target;
  char *flags_joined;
  char source_digest[65];
  uint8_t *bytes;
  size_t len;
  int64_t compile_ms;
  char *submitter;
  kiln_index_label_t *labels;
  size_t n_labels;
  char *job_id;      /* the owner job's: the artifact's provenance */
  char *source_name;
  kiln_status_t status;
  kiln_index_artifact_t record;
} store_t;

static void store_free(store_t *s) {
  kiln_free(s->target);
  kiln_free(s->flags_joined);
  kiln_free(s->bytes);
  kiln_free(s->submitter);
  labels_free(s->labels, s->n_labels);
  kiln_free(s->job_id);
  kiln_free(s->source_name);
  kiln_free(s);
}

static void on_store(uv_work_t *work) {
  store_t *s = work->data;
  kilnd_jobs_t *jobs = s->jobs;
  /* The key's parts again: flags as the task had them. */
  const char *flags[64];
  size_t n_flags = 0;
  for (char *p = s->flags_joined; p && *p && n_flags < 64;) {
    char *nl = strchr(p, '\n');
    if (nl) *nl = '\0';
    flags[n_flags++] = p;
    p = nl ? nl + 1 : NULL;
  }
  kiln_cache_key_parts_t parts = {.source_digest = s->source_digest,
                                  .target = s->target,
                                  .flags = flags,
                                  .n_flags = n_flags,
                                  .compiler = jobs->compiler,
                                  .hal_version = jobs->options.hal_version,
                                  .bytecode_version = jobs->options.bytecode_version};
  kiln_cache_provenance_t prov = {.submitter = s->submitter,
                                  .labels = s->labels,
                                  .n_labels = s->n_labels,
                                  .job_id = s->job_id,
                                  .source_name = s->source_name};
  s->status = kiln_cache_artifact_put(jobs->cache, &parts, s->bytes, s->len, &prov, &s->record);
}

static void complete_item(kilnd_jobs_t *jobs, item_t *item, const char *digest, uint64_t size, int64_t ms) {
  item->state = ITEM_DONE;
  jobs->stats.targets_compiled++;
  jobs->stats.compile_ms_total += (uint64_t)(ms > 0 ? ms : 0);
  kilnd_histograms_observe(&jobs->compile_seconds, item->target, (double)(ms > 0 ? ms : 0) / 1000.0);
  unlink_item(jobs, item);
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
      emit_target_failed(jobs, job, t, KILN_STATUS_DEADLINE_EXCEEDED,
                         "the job's deadline (the Compile call's gRPC deadline) passed before this target "
                         "finished; it is cached now: compile again to get it");
    } else {
      job->targets[t].state = TARGET_DONE;
      emit_target_done(jobs, job, t, digest, size, job != item->owner, (uint64_t)ms);
    }
    maybe_finish_job(jobs, job);
  }
  item_free(item);
}

static void fail_item(kilnd_jobs_t *jobs, item_t *item, kiln_status_code_t code, const char *message) {
  item->state = ITEM_FAILED;
  jobs->stats.targets_failed++;
  unlink_item(jobs, item);
  if (item->task) task_remove_item(item->task, item);
  for (size_t i = 0; i < item->n_waiters; i++) {
    job_t *job = item->waiters[i].job;
    size_t t = item->waiters[i].target;
    job->targets[t].state = TARGET_FAILED;
    job->targets[t].item = NULL;
    emit_target_failed(jobs, job, t, code, message);
    maybe_finish_job(jobs, job);
  }
  item_free(item);
}

static void maybe_closed(kilnd_jobs_t *jobs);

static void on_store_done(uv_work_t *work, int status) {
  (void)status;
  store_t *s = work->data;
  kilnd_jobs_t *jobs = s->jobs;
  uv_mutex_lock(&jobs->mu);
  item_t *item = jobs->closing ? NULL : find_item(jobs, s->key);
  if (item && item->state == ITEM_STORING) {
    if (s->status) {
      fail_item(jobs, item, kiln_status_code(s->status), kiln_status_message(s->status));
    } else {
      complete_item(jobs, item, s->record.artifact_digest, s->record.size, s->compile_ms);
    }
  }
  uv_mutex_unlock(&jobs->mu);
  if (!s->status) kiln_index_artifact_deinit(&s->record);
  kiln_status_free(s->status);
  store_free(s);
  jobs->handles_open--;
  if (jobs->closing) maybe_closed(jobs);
}

static item_t *task_item(task_t *task, const char *target) {
  for (size_t i = 0; task && target && i < task->n_items; i++) {
    if (strcmp(task->items[i]->target, target) == 0) return task->items[i];
  }
  return NULL;
}

static void start_readmit(kilnd_jobs_t *jobs);

static void on_task_event(void *user, uint64_t task_id, const kilnd_task_event_t *event) {
  kilnd_jobs_t *jobs = user;
  uv_mutex_lock(&jobs->mu);
  task_t *task = find_running(jobs, task_id);
  item_t *item = task ? task_item(task, event->target) : NULL;
  switch (event->kind) {
    case KILND_TASK_STARTED:
      for (size_t i = 0; task && i < task->n_items; i++) {
        for (size_t w = 0; w < task->items[i]->n_waiters; w++) {
          job_t *job = task->items[i]->waiters[w].job;
          if (job->state == KILND_JOB_QUEUED) {
            job->state = KILND_JOB_RUNNING;
            emit_started(jobs, job, event->worker);
          }
        }
      }
      break;
    case KILND_TASK_PROGRESS:
      for (size_t w = 0; item && w < item->n_waiters; w++) {
        Kiln__V1__JobEvent__TargetProgress pr = KILN__V1__JOB_EVENT__TARGET_PROGRESS__INIT;
        pr.target = item->target;
        pr.stage = (char *)(event->stage ? event->stage : "");
        pr.stage_index = event->stage_index;
        pr.stage_count = event->stage_count;
        pr.fraction = event->stage_count ? (float)(event->stage_index + 1) / (float)event->stage_count : 0.0f;
        Kiln__V1__JobEvent ev = KILN__V1__JOB_EVENT__INIT;
        ev.event_case = KILN__V1__JOB_EVENT__EVENT_PROGRESS;
        ev.progress = &pr;
        emit(jobs, item->waiters[w].job, &ev);
      }
      break;
    case KILND_TASK_TARGET_DONE:
      if (item && item->state == ITEM_RUNNING) {
        item->state = ITEM_STORING;
        store_t *s = kiln_calloc(1, sizeof *s);
        s->jobs = jobs;
        memcpy(s->key, item->key, sizeof s->key);
        s->target = kiln_strdup(item->target);
        kiln_buf_t flags;
        kiln_buf_init(&flags);
        for (size_t i = 0; i < task->n_flags; i++) kiln_buf_appendf(&flags, "%s%s", i ? "\n" : "", task->flags[i]);
        s->flags_joined = kiln_buf_take(&flags);
        kiln_buf_deinit(&flags);
        memcpy(s->source_digest, task->source->key_digest, sizeof s->source_digest);
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
          fail_item(jobs, item, KILN_STATUS_INTERNAL, "cannot queue the artifact store");
          store_free(s);
        }
      }
      break;
    case KILND_TASK_TARGET_FAILED:
      if (item && item->state == ITEM_RUNNING) fail_item(jobs, item, event->code, event->message);
      break;
    case KILND_TASK_WORKER_READY:
      if (!jobs->compiler && kilnd_workers_compiler(jobs->workers)) {
        jobs->compiler = kiln_strdup(kilnd_workers_compiler(jobs->workers));
        kilnd_workers_identity(jobs->workers, &jobs->identity);
        uv_cond_broadcast(&jobs->ready);
        start_readmit(jobs);
        if (jobs->on_ready) jobs->on_ready(jobs->on_ready_user);
      }
      schedule(jobs);
      break;
    case KILND_TASK_FINISHED:
      if (task) {
        unlink_running(jobs, task);
        /* Items the worker never reported (it should have): fail them. */
        while (task->n_items > 0) {
          item_t *left = task->items[0];
          if (left->state == ITEM_STORING) {
            task_remove_item(task, left); /* the store completes it */
            left->task = NULL;
            continue;
          }
          fail_item(jobs, left, KILN_STATUS_INTERNAL, "the worker finished without reporting this target");
        }
        task_free(task);
      }
      jobs->stats.workers.tasks++;
      schedule(jobs);
      break;
  }
  uv_mutex_unlock(&jobs->mu);
}

/* ---- the job store ---- */

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

/* Under mu; any thread. */
static void persist_later(kilnd_jobs_t *jobs, job_t *job) {
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

static void start_flush(kilnd_jobs_t *jobs);

static void on_flush_done(uv_work_t *work, int status) {
  (void)status;
  flush_t *f = work->data;
  kilnd_jobs_t *jobs = f->jobs;
  kiln_jobstore_jobs_free(f->records, f->n);
  kiln_free(f);
  uv_mutex_lock(&jobs->mu);
  jobs->flushing = false;
  if (!jobs->closing) start_flush(jobs);
  uv_mutex_unlock(&jobs->mu);
  jobs->handles_open--;
  maybe_closed(jobs);
}

/* Loop thread, under mu. */
static void start_flush(kilnd_jobs_t *jobs) {
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

static kiln_status_t admit(kilnd_jobs_t *jobs, const kilnd_job_request_t *r, const char *forced_id,
                           int64_t created_unix_ms, kilnd_job_admission_t *out, bool *would_block);

/* The key digest (base/mlir_text.h) of `len` bytes whose own digest is `raw`:
 * from the memo, or (when `data` is not NULL) computed and remembered. False when
 * the memo does not have it and `data` is NULL (the loop must not take the pass). */
static bool source_key_digest(kilnd_jobs_t *jobs, const char *raw, const void *data, size_t len, char out[65]) {
  char head[9];
  memcpy(head, raw, 8);
  head[8] = '\0';
  size_t slot = (size_t)strtoul(head, NULL, 16) % KEY_MEMO_SLOTS;
  uv_mutex_lock(&jobs->key_memo.mu);
  bool hit = strcmp(jobs->key_memo.slot[slot].raw, raw) == 0;
  if (hit) memcpy(out, jobs->key_memo.slot[slot].key, 65);
  uv_mutex_unlock(&jobs->key_memo.mu);
  if (hit || !data) return hit;
  kiln_digest_hex_t key;
  kiln_mlir_text_digest(data, len, &key);
  memcpy(out, key.text, 65);
  uv_mutex_lock(&jobs->key_memo.mu);
  memcpy(jobs->key_memo.slot[slot].raw, raw, 65);
  memcpy(jobs->key_memo.slot[slot].key, key.text, 65);
  uv_mutex_unlock(&jobs->key_memo.mu);
  return true;
}

typedef struct readmit_s {
  uv_work_t work;
  kilnd_jobs_t *jobs;
  kiln_jobstore_job_t *records;
  size_t n;
  kiln_status_t *failed; /* per record: why it could not be admitted again (owned), or NULL */
} readmit_t;

/* Thread pool: admits the jobs a restart interrupted, under their old ids. Their
 * finished targets are cache hits now, so only unfinished work runs again. */
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
    kiln_status_t st = admit(ra->jobs, &r, rec->id, rec->created_unix_ms, &adm, NULL);
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
  uv_mutex_lock(&jobs->mu);
  for (size_t i = 0; i < ra->n; i++) {
    if (!ra->failed[i]) continue;
    job_t *job = jobs->closing ? NULL : find_job(jobs, ra->records[i].id);
    if (job && !job_terminal(job)) {
      char message[512];
      snprintf(message, sizeof message, "kilnd restarted and could not run the job again: %s",
               kiln_status_message(ra->failed[i]));
      stop_job(jobs, job, KILND_JOB_FAILED, kiln_status_code(ra->failed[i]), message);
    }
    kiln_status_free(ra->failed[i]);
  }
  uv_mutex_unlock(&jobs->mu);
  kiln_free(ra->failed);
  kiln_jobstore_jobs_free(ra->records, ra->n);
  kiln_free(ra);
  jobs->handles_open--;
  maybe_closed(jobs);
}

/* Loop thread, under mu: once the compiler is known. */
static void start_readmit(kilnd_jobs_t *jobs) {
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

static void on_kick(uv_async_t *handle) {
  kilnd_jobs_t *jobs = handle->data;
  uv_mutex_lock(&jobs->mu);
  schedule(jobs);
  if (!jobs->closing) start_flush(jobs);
  uv_mutex_unlock(&jobs->mu);
}

/* ---- admission ---- */

static void request_hash(const kilnd_job_request_t *r, const char *source_digest, char out[65]) {
  kiln_hasher_t *h = kiln_hasher_create();
  kiln_hasher_update(h, source_digest, strlen(source_digest) + 1);
  for (size_t i = 0; i < r->n_targets; i++) kiln_hasher_update(h, r->targets[i], strlen(r->targets[i]) + 1);
  kiln_hasher_update(h, "\x01", 1);
  for (size_t i = 0; i < r->n_flags; i++) kiln_hasher_update(h, r->flags[i], strlen(r->flags[i]) + 1);
  uint8_t p = (uint8_t)r->priority;
  kiln_hasher_update(h, &p, 1);
  kiln_digest_t d;
  kiln_digest_hex_t hex;
  kiln_hasher_finish(h, &d);
  kiln_hasher_destroy(h);
  kiln_digest_to_hex(&d, &hex);
  memcpy(out, hex.text, 65);
}

void kilnd_job_admission_deinit(kilnd_job_admission_t *admission) {
  for (size_t i = 0; i < admission->n_targets; i++) kiln_free(admission->targets[i].target);
  kiln_free(admission->targets);
  admission->targets = NULL;
  admission->n_targets = 0;
}

static void admission_copy(const kilnd_job_admission_t *from, kilnd_job_admission_t *to) {
  *to = *from;
  to->targets = kiln_calloc(from->n_targets ? from->n_targets : 1, sizeof *to->targets);
  for (size_t i = 0; i < from->n_targets; i++) {
    to->targets[i] = from->targets[i];
    to->targets[i].target = kiln_strdup(from->targets[i].target);
  }
}

kiln_status_t kilnd_jobs_submit(kilnd_jobs_t *jobs, const kilnd_job_request_t *r,
                                kilnd_job_admission_t *out) {
  return admit(jobs, r, NULL, 0, out, NULL);
}

kiln_status_t kilnd_jobs_try_submit(kilnd_jobs_t *jobs, const kilnd_job_request_t *r, kilnd_job_admission_t *out,
                                    bool *out_would_block) {
  *out_would_block = false;
  return admit(jobs, r, NULL, 0, out, out_would_block);
}

/* Under mu: the per-client limits for a request that needs `misses` compiles,
 * `new_items` of them not yet queued or running for anyone, at class `p`. NULL
 * when they allow it; else RESOURCE_EXHAUSTED naming the limit (counted, logged). */
static kiln_status_t client_limits(kilnd_jobs_t *jobs, const kilnd_job_request_t *r, kilnd_priority_t p,
                                   size_t misses, size_t new_items) {
  const char *client = r->client && *r->client ? r->client : "anonymous";
  size_t max_jobs = jobs->options.client_max_jobs;
  if (max_jobs && misses > 0) {
    size_t mine = usage_jobs(jobs, client);
    if (mine >= max_jobs) {
      limit_refused(jobs, KILND_LIMIT_JOBS, client);
      return KILN_STATUS(KILN_STATUS_RESOURCE_EXHAUSTED,
                         "client %s has %zu unfinished jobs, the limit client-max-jobs = %zu; wait for some to "
                         "finish",
                         client, mine, max_jobs);
    }
  }
  unsigned share = jobs->options.client_queue_share;
  if (share && new_items > 0) {
    size_t cap = jobs->options.queue_capacity * share / 100;
    if (cap < 1) cap = 1;
    client_queue_t *q = client_queue(jobs, p, client, false);
    if (q && q->n_queued >= cap) {
      static const char *const names[] = {"", "INTERACTIVE", "BATCH", "BULK"};
      limit_refused(jobs, KILND_LIMIT_QUEUE_SHARE, client);
      return KILN_STATUS(KILN_STATUS_RESOURCE_EXHAUSTED,
                         "client %s holds %zu queued compiles of the %s queue, the limit client-queue-share = "
                         "%u%% of queue-capacity %zu (%zu); wait for some to start",
                         client, q->n_queued, names[p], share, jobs->options.queue_capacity, cap);
    }
  }
  return NULL;
}

/* Admission; `forced_id` and `created_unix_ms` (non-zero) restore a job the store
 * remembers. With `would_block` non-NULL nothing may block (the caller is the
 * loop): admission goes ahead only for a request the cache's memory answers
 * whole, and otherwise sets *would_block and returns NULL having done nothing. */
static kiln_status_t admit(kilnd_jobs_t *jobs, const kilnd_job_request_t *r, const char *forced_id,
                           int64_t created_unix_ms, kilnd_job_admission_t *out, bool *would_block) {
  memset(out, 0, sizeof *out);
  if (r->n_targets == 0) return KILN_STATUS(KILN_STATUS_INVALID_ARGUMENT, "no targets to compile for");
  uv_mutex_lock(&jobs->mu);
  bool draining = jobs->draining;
  uv_mutex_unlock(&jobs->mu);
  /* The first worker's Hello names the compiler (a part of every cache key). */
  const char *known = would_block ? kilnd_jobs_compiler(jobs) : kilnd_jobs_compiler_wait(jobs, COMPILER_WAIT_MS);
  if (would_block && !known && !draining) {
    *would_block = true;
    return NULL;
  }
  if (draining) return KILN_STATUS(KILN_STATUS_UNAVAILABLE, "kilnd is shutting down; retry on another server");
  char *compiler = known ? kiln_strdup(known) : NULL;
  if (!compiler) {
    return KILN_STATUS(KILN_STATUS_UNAVAILABLE,
                       "no compile worker has started yet (kiln-worker or the external compiler is failing "
                       "to start: see kilnd's log); retry");
  }

  /* 1. The source: stored (inline) or named (by digest). Its bytes are copied or
   * loaded only once a target is known to need a compile (step 2b): a cache hit
   * never touches them. */
  source_t *source = kiln_calloc(1, sizeof *source);
  source->refs = 1;
  source->name = kiln_strdup(r->source_name && *r->source_name ? r->source_name : "<source>");
  kiln_status_t st = NULL;
  if (r->source) {
    /* One hash of the bytes (the memo's); the normal form's pass only on the pool,
     * and only for bytes the key memo does not know. */
    kiln_digest_hex_t digest;
    bool stored = kiln_cache_source_memo(jobs->cache, r->source, r->source_len, &digest);
    memcpy(source->digest, digest.text, sizeof source->digest);
    if (would_block) {
      *would_block = !stored || !source_key_digest(jobs, source->digest, NULL, 0, source->key_digest);
    } else {
      source_key_digest(jobs, source->digest, r->source, r->source_len, source->key_digest);
      if (!stored) {
        st = kiln_cache_source_put(jobs->cache, r->source, r->source_len, NULL, source->name, 0,
                                   source->key_digest, &digest);
      }
    }
  } else if (would_block) {
    *would_block = true; /* its key digest is in the index: the blocking admission reads it */
  } else {
    snprintf(source->digest, sizeof source->digest, "%s", r->source_digest);
    kiln_digest_hex_t key;
    st = kiln_cache_source_key_digest(jobs->cache, r->source_digest, &key);
    if (!st) memcpy(source->key_digest, key.text, sizeof source->key_digest);
  }
  if (st || (would_block && *would_block)) {
    source_release(source);
    kiln_free(compiler);
    return st;
  }

  /* 2. Cache lookups, one per target. */
  kilnd_job_admitted_target_t *at = kiln_calloc(r->n_targets, sizeof *at);
  for (size_t i = 0; i < r->n_targets && !st && !(would_block && *would_block); i++) {
    at[i].target = kiln_strdup(r->targets[i]);
    kiln_cache_key_parts_t parts = {.source_digest = source->key_digest,
                                    .target = r->targets[i],
                                    .flags = r->flags,
                                    .n_flags = r->n_flags,
                                    .compiler = compiler,
                                    .hal_version = jobs->options.hal_version,
                                    .bytecode_version = jobs->options.bytecode_version};
    kiln_digest_hex_t key;
    st = kiln_cache_key_compute(&parts, &key);
    if (st) break;
    memcpy(at[i].cache_key, key.text, sizeof at[i].cache_key);
    if (would_block) {
      at[i].cached = kiln_cache_artifact_memo(jobs->cache, key.text, false, at[i].artifact_digest, &at[i].size_bytes);
      *would_block = !at[i].cached;
      continue;
    }
    kiln_status_t lk = kiln_cache_artifact_probe(jobs->cache, key.text, at[i].artifact_digest, &at[i].size_bytes);
    if (!lk) {
      at[i].cached = true;
    } else if (kiln_status_code(lk) == KILN_STATUS_NOT_FOUND) {
      kiln_status_free(lk);
    } else {
      st = lk;
    }
  }
  /* All in memory: now record the hits. (Only if a removal or a due flush slips in
   * between does this fail part-way; the blocking admission then records those
   * hits a second time, which only nudges the LRU order.) */
  for (size_t i = 0; would_block && !*would_block && i < r->n_targets; i++) {
    *would_block = !kiln_cache_artifact_memo(jobs->cache, at[i].cache_key, true, at[i].artifact_digest,
                                             &at[i].size_bytes);
  }
  if (would_block && *would_block) {
    for (size_t i = 0; i < r->n_targets; i++) kiln_free(at[i].target);
    kiln_free(at);
    source_release(source);
    kiln_free(compiler);
    return NULL;
  }
  /* 2b. Some target needs a compile: the worker will need the bytes. */
  bool any_miss = false;
  for (size_t i = 0; i < r->n_targets; i++) any_miss = any_miss || !at[i].cached;
  if (!st && any_miss) {
    if (r->source) {
      source->data = kiln_memdup(r->source, r->source_len ? r->source_len : 1);
      source->len = r->source_len;
    } else {
      void *data = NULL;
      size_t len = 0;
      st = kiln_cache_get_blob(jobs->cache, r->source_digest, &data, &len);
      if (st && kiln_status_code(st) == KILN_STATUS_NOT_FOUND) {
        kiln_status_free(st);
        st = KILN_STATUS(KILN_STATUS_NOT_FOUND,
                         "source %s is not stored on this server (never uploaded, or evicted): upload it "
                         "with PutSource and retry",
                         r->source_digest);
      }
      if (!st) {
        source->data = data;
        source->len = len;
      }
    }
  }
  char hash[65];
  request_hash(r, source->digest, hash);

  /* 3. In memory, under the lock. */
  uv_mutex_lock(&jobs->mu);
  job_t *job = NULL;
  if (!st && r->request_id && *r->request_id && !forced_id) {
    job_t *j = find_request(jobs, r->request_id);
    if (j) {
      if (strcmp(j->request_hash, hash) != 0) {
        st = KILN_STATUS(KILN_STATUS_ALREADY_EXISTS,
                         "request_id %s was already used for a different request (job %s)", r->request_id, j->id);
      } else {
        admission_copy(&j->admission, out);
        job = j;
      }
    }
  }
  if (!st && !job) {
    size_t misses = 0, new_items = 0;
    for (size_t i = 0; i < r->n_targets; i++) {
      if (at[i].cached) continue;
      misses++;
      if (!find_item(jobs, at[i].cache_key)) new_items++;
    }
    kilnd_priority_t p = r->priority >= KILND_PRIORITY_INTERACTIVE && r->priority <= KILND_PRIORITY_BULK
                             ? r->priority
                             : KILND_PRIORITY_INTERACTIVE;
    if (new_items && jobs->queued_tasks[p] >= jobs->options.queue_capacity) {
      static const char *const names[] = {"", "INTERACTIVE", "BATCH", "BULK"};
      st = KILN_STATUS(KILN_STATUS_RESOURCE_EXHAUSTED,
                       "the %s queue is full (%zu queued compiles, queue-capacity %zu): retry later or at "
                       "another priority",
                       names[p], jobs->queued_tasks[p], jobs->options.queue_capacity);
    } else if (!forced_id && (st = client_limits(jobs, r, p, misses, new_items)) != NULL) {
      /* refused (a job restored from the store was admitted before: never refused) */
    } else {
      /* A job restored from the store as a placeholder (watchable since start-up)
       * is filled in place, keeping its events and watchers. */
      job_t *placeholder = forced_id ? find_job(jobs, forced_id) : NULL;
      if (placeholder && job_terminal(placeholder)) placeholder = NULL;
      if (placeholder) {
        job = placeholder;
        index_remove(jobs, job); /* its request_id is replaced below */
        for (size_t i = 0; i < job->n_targets; i++) {
          kiln_free(job->targets[i].target);
          kiln_free(job->targets[i].message);
        }
        kiln_free(job->targets);
        kiln_free(job->client);
        kiln_free(job->request_id);
        kiln_free(job->source_name);
        kiln_free(job->flags);
        source_release(job->source);
        kilnd_job_admission_deinit(&job->admission);
      } else {
        job = kiln_calloc(1, sizeof *job);
        if (forced_id) snprintf(job->id, sizeof job->id, "%s", forced_id);
        else random_id(jobs, job->id);
      }
      job->priority = p;
      job->client = kiln_strdup(r->client && *r->client ? r->client : "anonymous");
      job->request_id = r->request_id && *r->request_id ? kiln_strdup(r->request_id) : NULL;
      memcpy(job->request_hash, hash, sizeof hash);
      job->source = source;
      source->refs++;
      job->created_unix_ms = created_unix_ms ? created_unix_ms : kiln_time_unix_ms();
      job->deadline_monotonic_ns = r->deadline_monotonic_ns;
      memcpy(job->source_digest, source->digest, sizeof job->source_digest);
      job->source_name = kiln_strdup(source->name);
      kiln_buf_t fj;
      kiln_buf_init(&fj);
      for (size_t f = 0; f < r->n_flags; f++) kiln_buf_appendf(&fj, "%s%s", f ? "\n" : "", r->flags[f]);
      job->flags = kiln_buf_take(&fj);
      kiln_buf_deinit(&fj);
      job->n_labels = r->n_labels;
      job->labels = labels_copy(r->labels, r->n_labels);
      job->state = KILND_JOB_QUEUED;
      job->n_targets = r->n_targets;
      job->targets = kiln_calloc(r->n_targets, sizeof *job->targets);
      if (!placeholder) {
        job_link(jobs, job);
        jobs->stats.submitted++;
      } else {
        index_add(jobs, job);
      }
      if (misses > 0) usage_add(jobs, job); /* a placeholder was counted at start-up */

      task_t *task = NULL;
      bool merged_running = false;
      for (size_t i = 0; i < r->n_targets; i++) {
        job_target_t *jt = &job->targets[i];
        jt->target = kiln_strdup(r->targets[i]);
        memcpy(jt->key, at[i].cache_key, sizeof jt->key);
        if (at[i].cached) {
          jt->state = TARGET_DONE;
          continue;
        }
        item_t *item = find_item(jobs, at[i].cache_key);
        if (item) {
          at[i].merged = true;
          jobs->stats.merged_requests++;
          merged_running = merged_running || item->state != ITEM_QUEUED;
        } else {
          if (!task) {
            task = kiln_calloc(1, sizeof *task);
            task->id = ++jobs->next_task_id;
            task->priority = p;
            task->client = kiln_strdup(job->client);
            task->source = source;
            source->refs++;
            task->n_flags = r->n_flags;
            task->flags = kiln_calloc(r->n_flags ? r->n_flags : 1, sizeof *task->flags);
            for (size_t f = 0; f < r->n_flags; f++) task->flags[f] = kiln_strdup(r->flags[f]);
            task->items = kiln_calloc(r->n_targets, sizeof *task->items);
          }
          item = kiln_calloc(1, sizeof *item);
          memcpy(item->key, at[i].cache_key, sizeof item->key);
          item->target = kiln_strdup(r->targets[i]);
          item->state = ITEM_QUEUED;
          item->task = task;
          item->owner = job;
          item->next = jobs->items;
          jobs->items = item;
          task->items[task->n_items++] = item;
        }
        item->waiters = kiln_realloc(item->waiters, (item->n_waiters + 1) * sizeof *item->waiters);
        item->waiters[item->n_waiters++] = (waiter_t){job, i};
        jt->item = item;
      }
      if (task) enqueue_task(jobs, task);

      /* The answer, and the first events. */
      memcpy(out->job_id, job->id, sizeof out->job_id);
      memcpy(out->source_digest, source->digest, sizeof out->source_digest);
      out->created_unix_ms = job->created_unix_ms;
      out->n_targets = r->n_targets;
      out->targets = at;
      at = NULL;
      if (misses == 0) {
        job->state = KILND_JOB_QUEUED;
        job->ephemeral = true;
        job->events_deferred = !placeholder; /* a placeholder may have watchers */
      } else if (merged_running && !task) {
        job->state = KILND_JOB_RUNNING;
      }
      emit_queued(jobs, job, queue_position(jobs, p));
      if (job->state == KILND_JOB_RUNNING) emit_started(jobs, job, "");
      for (size_t i = 0; i < job->n_targets; i++) {
        if (out->targets[i].cached) {
          emit_target_done(jobs, job, i, out->targets[i].artifact_digest, out->targets[i].size_bytes, true, 0);
        }
      }
      maybe_finish_job(jobs, job);
      out->state = job->state == KILND_JOB_DONE ? KILND_JOB_DONE : job->state;
      admission_copy(out, &job->admission);
      if (!job_terminal(job)) persist_later(jobs, job); /* a finished one was persisted by its Terminal */
    }
  }
  uv_mutex_unlock(&jobs->mu);
  if (at) {
    for (size_t i = 0; i < r->n_targets; i++) kiln_free(at[i].target);
    kiln_free(at);
  }
  source_release(source);
  kiln_free(compiler);
  if (st) {
    kilnd_job_admission_deinit(out);
    return st;
  }
  uv_async_send(&jobs->kick);
  return NULL;
}

/* ---- the rest of the API ---- */

/* Takes mu and finds job `job_id`; on NOT_FOUND mu is released again. */
static kiln_status_t lock_job(kilnd_jobs_t *jobs, const char *job_id, job_t **out_job) {
  uv_mutex_lock(&jobs->mu);
  if (jobs->closing) {
    /* Its watchers and listeners were told already; a new one would never be. */
    *out_job = NULL;
    uv_mutex_unlock(&jobs->mu);
    return KILN_STATUS(KILN_STATUS_UNAVAILABLE, "%s", SHUTDOWN_MESSAGE);
  }
  *out_job = find_job(jobs, job_id);
  if (*out_job) return NULL;
  uv_mutex_unlock(&jobs->mu);
  return KILN_STATUS(KILN_STATUS_NOT_FOUND, "no job %s on this server (or it finished long ago and was forgotten)",
                     job_id);
}

kiln_status_t kilnd_jobs_cancel(kilnd_jobs_t *jobs, const char *job_id, const char *reason,
                                kilnd_job_state_t *out_state, bool *out_cancelled) {
  *out_cancelled = false;
  job_t *job = NULL;
  KILN_RETURN_IF_ERROR(lock_job(jobs, job_id, &job));
  if (!job_terminal(job)) {
    char message[1200];
    snprintf(message, sizeof message, "cancelled%s%s", reason && *reason ? ": " : "", reason ? reason : "");
    stop_job(jobs, job, KILND_JOB_CANCELLED, KILN_STATUS_CANCELLED, message);
    *out_cancelled = true;
  }
  *out_state = job->state;
  uv_mutex_unlock(&jobs->mu);
  return NULL;
}

kiln_status_t kilnd_jobs_listen(kilnd_jobs_t *jobs, const char *job_id, kilnd_job_finished_fn_t fn, void *user,
                                kilnd_job_listener_t **out_listener) {
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
    notify_listeners(job, false, job->terminal_message);
  } else if (out_listener) {
    *out_listener = l;
  }
  uv_mutex_unlock(&jobs->mu);
  return NULL;
}

void kilnd_jobs_unlisten(kilnd_jobs_t *jobs, kilnd_job_listener_t *listener) {
  if (!listener) return;
  uv_mutex_lock(&jobs->mu);
  job_t *job = listener->job;
  for (kilnd_job_listener_t **p = &job->listeners; *p; p = &(*p)->next) {
    if (*p == listener) {
      *p = listener->next;
      kiln_free(listener);
      break;
    }
  }
  uv_mutex_unlock(&jobs->mu);
}

/* Under mu: the event log a job answered from the cache did not keep, as admission
 * would have written it (Queued, a TargetDone per target, Terminal), stamped with
 * the job's own times. */
static void materialize(kilnd_jobs_t *jobs, job_t *job) {
  if (!job->events_deferred) return;
  job->events_deferred = false;
  job->event_time_ms = job->created_unix_ms;
  emit_queued(jobs, job, 0);
  for (size_t i = 0; i < job->n_targets; i++) {
    job_target_t *jt = &job->targets[i];
    char digest[sizeof jt->digest];
    memcpy(digest, jt->digest, sizeof digest);
    emit_target_done(jobs, job, i, digest, jt->size, true, 0);
  }
  job->event_time_ms = job->finished_unix_ms ? job->finished_unix_ms : job->created_unix_ms;
  emit_terminal_event(jobs, job, job->terminal_message);
  job->event_time_ms = 0;
}

kiln_status_t kilnd_jobs_watch(kilnd_jobs_t *jobs, const char *job_id, bool from_start,
                               uint64_t after_sequence, kilnd_stream_t *stream) {
  job_t *job = NULL;
  KILN_RETURN_IF_ERROR(lock_job(jobs, job_id, &job));
  materialize(jobs, job);
  watcher_t *w = kiln_calloc(1, sizeof *w);
  w->jobs = jobs;
  w->job = job;
  w->stream = stream;
  w->live_at = job->n_events;
  w->replay = kiln_calloc(job->n_events ? job->n_events : 1, sizeof *w->replay);
  if (after_sequence > 0 || from_start) {
    uint64_t after = after_sequence > 0 ? after_sequence : 0;
    for (size_t i = 0; i < job->n_events; i++) {
      if (job->events[i].seq > after) w->replay[w->n_replay++] = i;
    }
  } else {
    /* The current status: the latest Queued or Started, then every target result. */
    ptrdiff_t latest = -1;
    for (size_t i = 0; i < job->n_events; i++) {
      Kiln__V1__JobEvent__EventCase k = job->events[i].kind;
      if (k == KILN__V1__JOB_EVENT__EVENT_QUEUED || k == KILN__V1__JOB_EVENT__EVENT_STARTED) latest = (ptrdiff_t)i;
    }
    for (size_t i = 0; i < job->n_events; i++) {
      Kiln__V1__JobEvent__EventCase k = job->events[i].kind;
      if ((ptrdiff_t)i == latest || k == KILN__V1__JOB_EVENT__EVENT_TARGET_DONE ||
          k == KILN__V1__JOB_EVENT__EVENT_TARGET_FAILED || k == KILN__V1__JOB_EVENT__EVENT_TERMINAL) {
        w->replay[w->n_replay++] = i;
      }
    }
  }
  /* Every stream ends with the Terminal event: a finished job sends it even to a
   * client resuming past it (after_sequence >= its sequence), whose stream would
   * otherwise wait forever for an event that never comes. */
  if (job_terminal(job) && job->n_events > 0 &&
      (w->n_replay == 0 || w->replay[w->n_replay - 1] != job->n_events - 1)) {
    w->replay[w->n_replay++] = job->n_events - 1;
  }
  w->next = job->watchers;
  job->watchers = w;
  kilnd_stream_on_cancel(stream, watcher_cancelled, w);
  watcher_pump(w);
  uv_mutex_unlock(&jobs->mu);
  return NULL;
}

void kilnd_jobs_stats(kilnd_jobs_t *jobs, kilnd_jobs_stats_t *out) {
  uv_mutex_lock(&jobs->mu);
  *out = jobs->stats;
  out->queued = out->running = 0;
  for (job_t *j = jobs->jobs; j; j = j->next) {
    out->queued += j->state == KILND_JOB_QUEUED;
    out->running += j->state == KILND_JOB_RUNNING;
  }
  out->queue_depth = jobs->queued_tasks[1] + jobs->queued_tasks[2] + jobs->queued_tasks[3];
  for (int c = 0; c < 3; c++) out->queued_by_class[c] = jobs->queued_tasks[c + 1];
  uint64_t tasks = jobs->stats.workers.tasks;
  if (jobs->workers) kilnd_workers_stats(jobs->workers, &out->workers); /* NULL once closed */
  out->workers.tasks = tasks;
  uv_mutex_unlock(&jobs->mu);
}

void kilnd_jobs_compile_histograms(kilnd_jobs_t *jobs, kilnd_histograms_t *out) {
  uv_mutex_lock(&jobs->mu);
  *out = jobs->compile_seconds;
  uv_mutex_unlock(&jobs->mu);
}

void kilnd_jobs_on_ready(kilnd_jobs_t *jobs, void (*fn)(void *user), void *user) {
  uv_mutex_lock(&jobs->mu);
  jobs->on_ready = fn;
  jobs->on_ready_user = user;
  bool already = jobs->compiler != NULL;
  uv_mutex_unlock(&jobs->mu);
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

bool kilnd_jobs_identity(kilnd_jobs_t *jobs, kilnd_compiler_info_t *out_info) {
  memset(out_info, 0, sizeof *out_info);
  uv_mutex_lock(&jobs->mu);
  bool known = jobs->compiler != NULL;
  if (known) *out_info = jobs->identity;
  uv_mutex_unlock(&jobs->mu);
  return known;
}

void kilnd_jobs_drain(kilnd_jobs_t *jobs) {
  uv_mutex_lock(&jobs->mu);
  jobs->draining = true;
  uv_mutex_unlock(&jobs->mu);
}

/* A finished job from the store, with the events a watcher would have seen. */
static void restore(kilnd_jobs_t *jobs, const kiln_jobstore_job_t *rec) {
  job_t *job = kiln_calloc(1, sizeof *job);
  snprintf(job->id, sizeof job->id, "%s", rec->id);
  job->state = (kilnd_job_state_t)rec->state;
  job->priority = (kilnd_priority_t)rec->priority;
  job->client = kiln_strdup(rec->client ? rec->client : "");
  job->request_id = rec->request_id ? kiln_strdup(rec->request_id) : NULL;
  memcpy(job->request_hash, rec->request_hash, sizeof job->request_hash);
  memcpy(job->source_digest, rec->source_digest, sizeof job->source_digest);
  job->source_name = kiln_strdup(rec->source_name ? rec->source_name : "");
  job->flags = kiln_strdup(rec->flags ? rec->flags : "");
  job->created_unix_ms = rec->created_unix_ms;
  job->finished_unix_ms = rec->finished_unix_ms;
  job->finished_monotonic_ns = kiln_time_monotonic_ns() - (kiln_time_unix_ms() - rec->finished_unix_ms) * 1000000;
  job->deadline_monotonic_ns = INT64_MAX;
  job->n_targets = rec->n_targets;
  job->targets = kiln_calloc(rec->n_targets ? rec->n_targets : 1, sizeof *job->targets);
  job->admission.n_targets = rec->n_targets;
  job->admission.targets = kiln_calloc(rec->n_targets ? rec->n_targets : 1, sizeof *job->admission.targets);
  snprintf(job->admission.job_id, sizeof job->admission.job_id, "%s", rec->id);
  memcpy(job->admission.source_digest, rec->source_digest, sizeof job->admission.source_digest);
  job->admission.state = job->state;
  job->admission.created_unix_ms = rec->created_unix_ms;
  for (size_t i = 0; i < rec->n_targets; i++) {
    job->targets[i].target = kiln_strdup(rec->targets[i].target);
    memcpy(job->targets[i].key, rec->targets[i].cache_key, sizeof job->targets[i].key);
    job->targets[i].state = rec->targets[i].state == KILN_JOBSTORE_TARGET_DONE ? TARGET_DONE : TARGET_FAILED;
    job->admission.targets[i].target = kiln_strdup(rec->targets[i].target);
    memcpy(job->admission.targets[i].cache_key, rec->targets[i].cache_key, 65);
  }
  job_link(jobs, job);
  emit_queued(jobs, job, 0);
  for (size_t i = 0; i < rec->n_targets; i++) {
    const kiln_jobstore_target_t *t = &rec->targets[i];
    if (t->state == KILN_JOBSTORE_TARGET_DONE) {
      emit_target_done(jobs, job, i, t->artifact_digest, t->size_bytes, t->cache_hit, t->compile_ms);
    } else {
      emit_target_failed(jobs, job, i, (kiln_status_code_t)(t->code ? t->code : KILN_STATUS_UNAVAILABLE),
                         t->message ? t->message : "the job ended before kilnd restarted");
    }
  }
  emit_terminal_event(jobs, job, rec->message); /* not emit_terminal: it is already in the store */
  job->terminal_message = kiln_strdup(rec->message ? rec->message : "");
}

/* An unfinished job from the store, QUEUED until a worker is ready and admission
 * fills it in (admit with its id): watchable from the first moment. */
static void placeholder(kilnd_jobs_t *jobs, const kiln_jobstore_job_t *rec) {
  job_t *job = kiln_calloc(1, sizeof *job);
  snprintf(job->id, sizeof job->id, "%s", rec->id);
  job->state = KILND_JOB_QUEUED;
  job->priority = (kilnd_priority_t)rec->priority;
  job->client = kiln_strdup(rec->client && *rec->client ? rec->client : "anonymous");
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
  job_link(jobs, job);
  usage_add(jobs, job); /* unfinished: it counts from start-up, before it is admitted again */
  emit_queued(jobs, job, 0);
}

/* Start-up: forget what is past its retention, restore the finished, keep the
 * unfinished for re-admission. */
static void load_store(kilnd_jobs_t *jobs) {
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
      restore(jobs, &recs[i]);
      restored++;
      continue;
    }
    placeholder(jobs, &recs[i]);
    jobs->readmit = kiln_realloc(jobs->readmit, (jobs->n_readmit + 1) * sizeof *jobs->readmit);
    jobs->readmit[jobs->n_readmit++] = recs[i];
    memset(&recs[i], 0, sizeof recs[i]);
  }
  kiln_jobstore_jobs_free(recs, n);
  if (n) kiln_log(KILN_LOG_INFO, "job_store_loaded", "finished=%zu to_readmit=%zu", restored, jobs->n_readmit);
}

kiln_status_t kilnd_jobs_create(uv_loop_t *loop, kiln_cache_t *cache, const kilnd_jobs_options_t *options,
                                const kilnd_workers_options_t *worker_options, kilnd_jobs_t **out_jobs) {
  *out_jobs = NULL;
  kilnd_jobs_t *jobs = kiln_calloc(1, sizeof *jobs);
  jobs->loop = loop;
  jobs->cache = cache;
  jobs->options = *options;
  if (!jobs->options.queue_capacity) jobs->options.queue_capacity = 1024;
  if (!jobs->options.retention_ms) jobs->options.retention_ms = 3600 * 1000;
  /* The compiler identity comes from the first worker's Hello (it differs in
   * external mode); admission waits for it. */
  jobs->compiler = NULL;
  jobs->options.compiler = NULL;
  uv_mutex_init_recursive(&jobs->mu);
  uv_mutex_init(&jobs->key_memo.mu);
  uv_cond_init(&jobs->ready);
  kiln_status_t st = kilnd_workers_create(loop, worker_options, on_task_event, jobs, &jobs->workers);
  if (st) {
    uv_cond_destroy(&jobs->ready);
    uv_mutex_destroy(&jobs->key_memo.mu);
    uv_mutex_destroy(&jobs->mu);
    kiln_free(jobs->compiler);
    kiln_free(jobs);
    return st;
  }
  uv_async_init(loop, &jobs->kick, on_kick);
  jobs->kick.data = jobs;
  uv_timer_init(loop, &jobs->sweep);
  uv_timer_init(loop, &jobs->gather);
  jobs->gather.data = jobs;
  jobs->sweep.data = jobs;
  uv_timer_start(&jobs->sweep, on_sweep, SWEEP_INTERVAL_MS, SWEEP_INTERVAL_MS);
  jobs->store = options->store;
  if (jobs->store) load_store(jobs);
  *out_jobs = jobs;
  return NULL;
}

static void free_everything(kilnd_jobs_t *jobs) {
  kiln_jobstore_jobs_free(jobs->persist, jobs->n_persist);
  kiln_jobstore_jobs_free(jobs->readmit, jobs->n_readmit);
  while (jobs->jobs) {
    job_t *j = jobs->jobs;
    jobs->jobs = j->next;
    while (j->watchers) watcher_remove(j->watchers);
    job_free(j);
  }
  kiln_free(jobs->by_id);
  kiln_free(jobs->by_rid);
  jobs->by_id = jobs->by_rid = NULL;
  jobs->n_buckets = 0; /* find_job and find_request find nothing from now on */
  for (size_t b = 0; b < USAGE_BUCKETS; b++) {
    while (jobs->usage[b]) {
      client_usage_t *u = jobs->usage[b];
      jobs->usage[b] = u->next;
      kiln_free(u->client);
      kiln_free(u);
    }
  }
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
static void maybe_closed(kilnd_jobs_t *jobs) {
  if (!jobs->closing || jobs->handles_open > 0 || jobs->closed) return;
  void (*done)(void *) = jobs->close_done;
  void *user = jobs->close_user;
  uv_mutex_lock(&jobs->mu);
  free_everything(jobs);
  jobs->closed = true;
  uv_mutex_unlock(&jobs->mu);
  if (done) done(user);
}

void kilnd_jobs_destroy(kilnd_jobs_t *jobs) {
  if (!jobs) return;
  if (!jobs->closed) {
    /* Its handles are still on the loop: freeing it now would crash later. */
    kiln_log(KILN_LOG_ERROR, "jobs_destroy_open", "msg=\"the job engine was not closed; leaking it\"");
    return;
  }
  uv_cond_destroy(&jobs->ready);
  uv_mutex_destroy(&jobs->key_memo.mu);
  uv_mutex_destroy(&jobs->mu);
  kiln_free(jobs->compiler);
  kiln_free(jobs);
}

static void on_handle_closed(uv_handle_t *handle) {
  kilnd_jobs_t *jobs = handle->data;
  jobs->handles_open--;
  maybe_closed(jobs);
}

static void on_workers_closed(void *user) {
  kilnd_jobs_t *jobs = user;
  jobs->workers = NULL;
  jobs->handles_open--;
  maybe_closed(jobs);
}

void kilnd_jobs_close(kilnd_jobs_t *jobs, void (*done)(void *user), void *user) {
  uv_mutex_lock(&jobs->mu);
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
  jobs->close_done = done;
  jobs->close_user = user;
  /* Every live job ends UNAVAILABLE for its watchers; they get the Terminal event
   * only if their stream can still take it, so finish the streams here. */
  for (job_t *j = jobs->jobs; j; j = j->next) {
    for (watcher_t *w = j->watchers, *next; w; w = next) {
      next = w->next;
      if (!w->sending) {
        kilnd_stream_finish(w->stream, KILN_STATUS(KILN_STATUS_UNAVAILABLE, "%s", SHUTDOWN_MESSAGE));
        watcher_remove(w);
      } else {
        /* Its send completes later: detach it from the job (freed below) and
         * let watcher_sent finish and free it. */
        w->done = true;
        w->job = NULL;
        jobs->handles_open++;
      }
    }
  }
  /* In-process listeners of live jobs hear that kilnd closes under them. */
  for (job_t *j = jobs->jobs; j; j = j->next) notify_listeners(j, true, SHUTDOWN_MESSAGE);
  /* Detached watchers are off their jobs' lists now. */
  for (job_t *j = jobs->jobs; j; j = j->next) {
    for (watcher_t **p = &j->watchers; *p;) {
      if (!(*p)->job) *p = (*p)->next;
      else p = &(*p)->next;
    }
  }
  uv_mutex_unlock(&jobs->mu);
  jobs->handles_open += 4;
  uv_close((uv_handle_t *)&jobs->kick, on_handle_closed);
  uv_close((uv_handle_t *)&jobs->sweep, on_handle_closed);
  uv_close((uv_handle_t *)&jobs->gather, on_handle_closed);
  kilnd_workers_close(jobs->workers, on_workers_closed, jobs);
}
