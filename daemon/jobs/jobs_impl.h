/* The job engine's insides, shared by its files in daemon/jobs/ and its unit
 * test; nothing else includes this. jobs.h has the model; this header has the
 * mechanics.
 *
 *   job (per Compile)             item (per cache key)             task (per admission)
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
 * Threads. Admission's cache work (hashing, SQLite, reading a stored source) runs
 * on libuv's thread pool, outside the lock; everything else runs on the loop.
 *
 * The lock. `mu` (not recursive) guards every field below it in kilnd_jobs_s.
 * Functions named *_locked, and the static helpers their comments mark "under mu",
 * need it held. While it is held the engine calls nothing that can call back into
 * it: only the allocator, logging, protobuf-c packing, libuv's handle and work
 * functions, kilnd_stream_on_cancel (it records the callback) and, at create and
 * close only, the job store's SQLite (loading it; writing what is pending).
 * Everything that reaches out of the engine (a stream send or finish, a listener's
 * callback, cancelling a worker's task) is queued in the outbox under the lock and
 * done after it is released:
 *   - on the loop, engine_unlock runs the whole outbox, in order;
 *   - off the loop (admission on the pool), engine_unlock_off_loop leaves it and
 *     wakes the loop (`kick`): the next engine_unlock on the loop runs it, the
 *     kick's own at the latest.
 * Submitting a task to a worker is done by schedule(), on the loop, with the lock
 * released around the call (the pool reports STARTED from inside it); the outbox
 * waits for the pool to know the task. So every callback into the engine finds
 * the lock free, and a callback out of it may call the engine again.
 *
 * Per-client usage. `usage` counts each client's unfinished jobs: usage_add when a
 * job that needs a compile is admitted (or restored unfinished from the store),
 * usage_drop when it turns terminal (count_terminal: every terminal transition
 * passes there); job->usage marks a counted job, so each is dropped exactly once.
 * Each client queue counts its queued tasks beside the class total (queue_count,
 * the one place either changes).
 *
 * Artifacts. A worker's TARGET_DONE carries the VMFB bytes; storing them (SQLite,
 * disk) runs on the thread pool, then the item completes on the loop.
 *
 * Files: engine.c (life cycle, the lock and the outbox, the job index, retention,
 * the small API), admit.c (admission, both modes), schedule.c (queues, round robin,
 * per-client limits, dispatch), items.c (worker events: items and tasks finishing,
 * the artifact store), events.c (the event log, watchers, listeners), persist.c
 * (the job store: snapshots, restore, readmission).
 */
#ifndef KILN_DAEMON_JOBS_JOBS_IMPL_H
#define KILN_DAEMON_JOBS_JOBS_IMPL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <uv.h>

#include "base/strmap.h"
#include "daemon/jobs.h"
#include "daemon/jobs/seam.h"
#include "daemon/metrics.h"
#include "kiln/v1/kiln.pb-c.h"

#define SWEEP_INTERVAL_MS 500
#define COMPILER_WAIT_MS  30000
/* Finished jobs kept in memory at most (a few KiB each): under sustained cache-hit
 * traffic retention alone would grow without bound. Older ones are forgotten sooner
 * (WatchJob: NOT_FOUND); what they produced stays in the cache. */
#define MAX_FINISHED_JOBS 10000
/* What a watcher hears when kilnd stops under it (the job lives on in the store). */
#define SHUTDOWN_MESSAGE                                                                       \
  "kilnd is shutting down; the job is kept: watch it again (resume with after_sequence) once " \
  "kilnd is back"
/* Key digests of recent sources (admit.c), direct-mapped. */
#define KEY_MEMO_SLOTS 64

typedef struct job_s job_t;
typedef struct task_s task_t;
typedef struct effect_s effect_t;

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

struct task_s {
  uint64_t id;
  kilnd_priority_t priority;
  char *client;
  source_t *source;
  char **flags;
  size_t n_flags;
  item_t **items;
  size_t n_items;
  bool running;
  int64_t queued_ns;   /* when it was queued (monotonic): BULK tasks wait BULK_GATHER_MS */
  struct task_s *next; /* in its client's FIFO while queued; in `running` while running */
};

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
  /* What the first answer said of it, for request_id retries (its key is `key`; a
   * cached one's artifact is `digest` and `size`). */
  bool admitted_cached, admitted_merged;
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
  job_t *job; /* NULL once kilnd_jobs_close detached it (its send still in flight) */
  kilnd_stream_t *stream;
  size_t *replay; /* event indices to send first */
  size_t n_replay, replay_at;
  size_t live_at; /* then every event from this index on */
  bool sending;   /* a send is queued in the outbox or in flight */
  bool done;      /* the terminal event was handed over, or the stream is gone */
  struct watcher_s *next;
} watcher_t;

/* Someone waiting in-process for a job to end (kilnd_jobs_listen). On the job's
 * list until the job ends; then in the outbox (job NULL) until its callback ran. */
struct kilnd_job_listener_s {
  job_t *job;
  kilnd_job_finished_fn_t fn;
  void *user;
  bool dropped; /* unlistened while in the outbox: its callback is not run */
  struct kilnd_job_listener_s *next;
};

/* One client's unfinished jobs (client-max-jobs); freed when the count drops to 0. */
typedef struct client_usage_s {
  char *client;
  size_t jobs;
} client_usage_t;

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
  char *flags; /* normalized, one per line: for the job store */
  char *source_name;
  char source_digest[65];
  char *terminal_message;
  bool ephemeral;             /* every target was cached at admission: not written to the store */
  client_usage_t *usage;      /* counted in its client's unfinished jobs (usage_add) until terminal */
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
  kilnd_job_state_t admitted_state; /* the first answer's state: a request_id retry gets it again */
  struct job_s *next;
  struct job_s *rid_older; /* the next older job with this request_id (engine.c's index) */
};

/* Key digests of recent sources, by the digest of their bytes: a repeated Compile
 * of the same bytes (a cache hit, mostly) skips the normal form's pass over them.
 * Its own mutex, taken alone (admission runs on the loop and on the pool). */
typedef struct key_memo_s {
  uv_mutex_t mu;
  struct {
    char raw[65], key[65];
  } slot[KEY_MEMO_SLOTS];
} key_memo_t;

struct kilnd_jobs_s {
  /* Set at create, then read-only (or loop-only, as marked). */
  uv_loop_t *loop;
  kiln_cache_t *cache;
  key_memo_t key_memo;
  kilnd_jobs_options_t options;
  kilnd_jobs_pool_t pool; /* the workers; pool.self is NULL once they closed (loop) */
  uv_async_t kick;
  uv_timer_t sweep;
  uv_timer_t gather;              /* dispatches BULK tasks once their gathering time is over */
  void (*close_done)(void *user); /* loop */
  void *close_user;               /* loop */
  int handles_open;               /* loop: handles, works and detached watchers close waits for */

  uv_mutex_t mu;
  uv_cond_t ready;                /* signalled when the compiler identity becomes known */
  char *compiler;                 /* set once, from the first worker's Hello */
  kilnd_compiler_info_t identity; /* the same compiler, field by field; set with it */
  bool draining;
  bool closing;
  bool closed;          /* free_everything ran: no jobs, queues or indexes; kilnd_jobs_destroy frees */
  job_t *jobs;          /* newest first */
  kiln_strmap_t by_id;  /* every job on `jobs`, by id */
  kiln_strmap_t by_rid; /* the newest job of each request_id (older ones: rid_older) */
  item_t *items;
  client_queue_t *queues[4]; /* by priority class 1..3 */
  client_queue_t *turn[4];   /* whose turn it is in each class */
  size_t queued_tasks[4];
  kiln_strmap_t usage; /* client -> client_usage_t: unfinished jobs by client */
  task_t *running;
  uint64_t next_task_id;
  kilnd_jobs_stats_t stats;
  kilnd_histograms_t compile_seconds; /* by target, for /metrics */
  void (*on_ready)(void *user);       /* kilnd_jobs_on_ready: once, at the first ready worker */
  void *on_ready_user;
  uint8_t id_prefix[8];
  uint32_t id_counter;
  bool id_seeded;
  effect_t *outbox, *outbox_tail; /* calls out of the engine, done after unlock (events.c) */

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

/* ---- engine.c ---- */

/* Takes mu. */
void engine_lock(kilnd_jobs_t *jobs);
/* Releases mu, then does what the outbox holds (loop thread). */
void engine_unlock(kilnd_jobs_t *jobs);
/* Releases mu; anything in the outbox waits for the loop, which is woken (any
 * thread but the loop's). */
void engine_unlock_off_loop(kilnd_jobs_t *jobs);
/* Under mu. */
bool job_terminal(const job_t *job);
void job_link_locked(kilnd_jobs_t *jobs, job_t *job);
void index_add_locked(kilnd_jobs_t *jobs, job_t *job);
void index_remove_locked(kilnd_jobs_t *jobs, job_t *job);
job_t *find_job_locked(kilnd_jobs_t *jobs, const char *id);
job_t *find_request_locked(kilnd_jobs_t *jobs, const char *request_id);
void random_id_locked(kilnd_jobs_t *jobs, char *out);
void source_release(source_t *s);
kiln_index_label_t *labels_copy(const kiln_index_label_t *labels, size_t n);
void labels_free(kiln_index_label_t *labels, size_t n);
/* Ends every pending target of `job` with `code` and the job with `state`. Under mu. */
void stop_job_locked(kilnd_jobs_t *jobs, job_t *job, kilnd_job_state_t state, kiln_status_code_t code,
                     const char *message);
/* Ends the job when every target is settled. Under mu. */
void maybe_finish_job_locked(kilnd_jobs_t *jobs, job_t *job);
/* Once close is over and nothing is in flight: frees the engine's contents, then
 * calls close's `done`. Loop thread, mu not held. */
void maybe_closed(kilnd_jobs_t *jobs);

/* ---- schedule.c ---- */

/* Under mu. */
client_queue_t *client_queue_locked(kilnd_jobs_t *jobs, kilnd_priority_t p, const char *client, bool create);
void enqueue_task_locked(kilnd_jobs_t *jobs, task_t *task);
void dequeue_task_locked(kilnd_jobs_t *jobs, task_t *task);
uint32_t queue_position_locked(kilnd_jobs_t *jobs, kilnd_priority_t p);
size_t usage_jobs_locked(kilnd_jobs_t *jobs, const char *client);
void usage_add_locked(kilnd_jobs_t *jobs, job_t *job);
void usage_drop_locked(kilnd_jobs_t *jobs, job_t *job);
void limit_refused_locked(kilnd_jobs_t *jobs, kilnd_limit_t limit, const char *client);
/* The queue-capacity and per-client limits for a request of class `p` needing
 * `misses` compiles, `new_items` of them new. NULL or RESOURCE_EXHAUSTED naming the
 * setting (a per-client refusal is counted and logged). Under mu. */
KILN_MUST_USE kiln_status_t admission_limits_locked(kilnd_jobs_t *jobs, const char *client,
                                                    kilnd_priority_t p, size_t misses, size_t new_items,
                                                    bool restored);
/* Hands queued tasks to idle workers while there are both. Loop thread, mu not
 * held (it takes it around each step and releases it for the pool's submit). */
void schedule(kilnd_jobs_t *jobs);
void task_free(task_t *task);
void unlink_running_locked(kilnd_jobs_t *jobs, task_t *task);

/* ---- items.c ---- */

/* Under mu. */
item_t *find_item_locked(kilnd_jobs_t *jobs, const char *key);
void item_free(item_t *item);
/* The job leaves the item; an item with no waiters left stops (queued: dropped;
 * running: its task is cancelled once none of the task's items has a waiter).
 * Under mu. */
void leave_item_locked(kilnd_jobs_t *jobs, item_t *item, job_t *job);

/* ---- events.c ---- */

/* Under mu: event log entries, each also queued for the job's watchers. */
void emit_queued_locked(kilnd_jobs_t *jobs, job_t *job, uint32_t position);
void emit_started_locked(kilnd_jobs_t *jobs, job_t *job, const char *worker);
void emit_progress_locked(kilnd_jobs_t *jobs, job_t *job, const char *target,
                          const kilnd_task_event_t *event);
void emit_target_done_locked(kilnd_jobs_t *jobs, job_t *job, size_t t, const char *digest, uint64_t size,
                             bool hit, uint64_t compile_ms);
void emit_target_failed_locked(kilnd_jobs_t *jobs, job_t *job, size_t t, kiln_status_code_t code,
                               const char *message);
/* The Terminal event for the job's current state, and nothing else. */
void emit_terminal_event_locked(kilnd_jobs_t *jobs, job_t *job, const char *message);
/* The job turned terminal: its times, the store, the Terminal event, the listeners. */
void emit_terminal_locked(kilnd_jobs_t *jobs, job_t *job, const char *message);
/* Queues every listener of `job` in the outbox with how it ended (or that kilnd
 * closes under it). Under mu. */
void notify_listeners_locked(kilnd_jobs_t *jobs, job_t *job, bool shutdown, const char *message);
/* Queues a task cancellation for the pool. Under mu. */
void outbox_cancel_task_locked(kilnd_jobs_t *jobs, uint64_t task_id);
/* Queues a stream's finish. Under mu. */
void outbox_finish_stream_locked(kilnd_jobs_t *jobs, kilnd_stream_t *stream, kiln_status_t status);
/* Takes the whole outbox (under mu), to run with run_effects after unlocking. */
effect_t *outbox_take_locked(kilnd_jobs_t *jobs);
/* Does what `effects` hold, in order, and frees them. Loop thread, mu not held. */
void run_effects(kilnd_jobs_t *jobs, effect_t *effects);
/* Frees effects without doing them (the engine closed under them). */
void drop_effects(effect_t *effects);
void watcher_remove_locked(watcher_t *w);

/* ---- persist.c ---- */

/* Under mu; any thread. */
void persist_later_locked(kilnd_jobs_t *jobs, job_t *job);
/* Loop thread, under mu. */
void start_flush_locked(kilnd_jobs_t *jobs);
void start_readmit_locked(kilnd_jobs_t *jobs);
/* Start-up: finished jobs come back watchable, unfinished ones wait for readmission. */
void load_store(kilnd_jobs_t *jobs);

/* ---- admit.c ---- */

/* Admission off the loop (blocks on the cache); `forced_id` and `created_unix_ms`
 * (non-zero) restore a job the store remembers. */
KILN_MUST_USE kiln_status_t admit_blocking(kilnd_jobs_t *jobs, const kilnd_job_request_t *r,
                                           const char *forced_id, int64_t created_unix_ms,
                                           kilnd_job_admission_t *out);

#endif /* KILN_DAEMON_JOBS_JOBS_IMPL_H */
