/* The job engine: Compile requests become jobs, jobs become work for the workers.
 *
 * A job is one Compile request: one source, N canonical targets, normalized
 * flags, a priority, a client. Each target is either answered from the cache at
 * admission or needs a work item, keyed by its cache key. A work item already
 * queued or running for another job is shared (merged): one compile, every waiting
 * job gets its result. New items of one admission form one task, so a worker runs
 * their target-independent half once (the compiler's fan-out).
 *
 *   job:   QUEUED -> RUNNING -> DONE | FAILED | CANCELLED
 *          QUEUED -> DONE (every target cached) | CANCELLED
 *   item:  QUEUED -> RUNNING -> DONE | FAILED; dropped when its last waiter leaves
 *
 * Scheduling: three classes (INTERACTIVE > BATCH > BULK); inside a class, clients
 * take turns (round robin over per-client FIFOs), so one client's burst cannot
 * starve another. A task taken by a worker absorbs queued tasks of the same class,
 * source and flags (their targets share one front half); BULK tasks wait 25 ms
 * after they were queued, so that one-target jobs of one model fuse. Each class holds at most
 * `queue_capacity` queued tasks; more is RESOURCE_EXHAUSTED.
 *
 * Per-client limits (0: none): a client (the request's `client`) may have at most
 * `client_max_jobs` unfinished jobs (QUEUED or RUNNING; a job answered wholly from
 * the cache at admission is never counted, a merged one counts for its own client,
 * one restored from the job store counts from start-up), and hold at most
 * `client_queue_share` percent of a class's `queue_capacity` queued tasks (at least
 * one). Either refusal is RESOURCE_EXHAUSTED naming the setting. Both are issued
 * only while the client itself has unfinished work, so each clears by waiting.
 *
 * Every job keeps its events (sequence 1, 2, ...) for WatchJob until it has been
 * finished for `retention_ms`, or until 10000 newer jobs have finished.
 *
 * Threads: admission (kilnd_jobs_submit) runs on libuv's thread pool (it hashes,
 * stores the source and looks targets up in the cache); everything else runs on
 * the loop. Shared state is under one mutex, never held while the engine calls out
 * (to the worker pool, a stream or a listener): those calls happen on the loop,
 * after the lock is released (daemon/jobs/jobs_impl.h).
 */
#ifndef KILN_DAEMON_JOBS_H
#define KILN_DAEMON_JOBS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <uv.h>

#include "base/status.h"
#include "cache/cache.h"
#include "cache/jobstore.h"
#include "daemon/stream.h"
#include "daemon/workers.h"

typedef struct kilnd_jobs_s kilnd_jobs_t;

#define KILND_JOB_ID_LEN 26 /* "j-" + 24 hex */

typedef enum kilnd_priority_e {
  KILND_PRIORITY_INTERACTIVE = 1,
  KILND_PRIORITY_BATCH = 2,
  KILND_PRIORITY_BULK = 3,
} kilnd_priority_t;

typedef enum kilnd_job_state_e {
  KILND_JOB_QUEUED = 1,
  KILND_JOB_RUNNING = 2,
  KILND_JOB_DONE = 3,
  KILND_JOB_FAILED = 4,
  KILND_JOB_CANCELLED = 5,
} kilnd_job_state_t;

typedef struct kilnd_jobs_options_s {
  size_t queue_capacity; /* queued tasks per priority class */
  int64_t retention_ms;  /* finished jobs are forgotten after this */
  const char *compiler;  /* compiler identity, part of every cache key */
  uint32_t hal_version;
  uint32_t bytecode_version;
  bool embed_source;            /* artifacts carry their source */
  kiln_jobstore_t *store;       /* job records across restarts (borrowed; may be NULL) */
  size_t client_max_jobs;       /* unfinished jobs per client; 0: no limit */
  unsigned client_queue_share;  /* percent (1..100) of queue_capacity per client and class; 0: no limit */
  unsigned client_worker_share; /* percent (1..100) of the workers one client's tasks may run on at once
                                   (at least one); 0: no limit */
} kilnd_jobs_options_t;

/* The per-client limits, as /metrics labels them (the settings' names). */
typedef enum kilnd_limit_e {
  KILND_LIMIT_REQUEST_BYTES = 0, /* client-max-request-bytes (enforced by the RPC layer) */
  KILND_LIMIT_JOBS = 1,          /* client-max-jobs */
  KILND_LIMIT_QUEUE_SHARE = 2,   /* client-queue-share */
  KILND_LIMIT_DOWNLOADS = 3,     /* client-max-downloads (enforced by GetArtifact) */
} kilnd_limit_t;
#define KILND_LIMIT_COUNT 4

/* The setting's name ("client-max-jobs"); static storage. Thread-safe. */
const char *kilnd_limit_name(kilnd_limit_t limit);

/* Targets in one Compile request (or one Recompile item): more is refused. */
#define KILND_MAX_TARGETS 16

/* One Compile request, resolved: canonical targets, normalized flags. Borrowed. */
typedef struct kilnd_job_request_s {
  const uint8_t *source; /* inline bytes, or NULL with source_digest */
  size_t source_len;
  const char *source_digest; /* hex; with source == NULL: load it from the cache */
  const char *source_name;
  const char *const *targets; /* canonical ids, duplicates removed, in request order */
  size_t n_targets;
  const char *const *flags; /* normalized */
  size_t n_flags;
  kilnd_priority_t priority;
  const char *client;            /* fairness key: the peer, or a client-supplied id */
  const char *request_id;        /* idempotency key, may be NULL */
  int64_t deadline_monotonic_ns; /* the job fails DEADLINE_EXCEEDED past it; INT64_MAX: none */
  const kiln_index_label_t *labels;
  size_t n_labels;
} kilnd_job_request_t;

/* Admission's answer, per target in request order. Owned by the caller
 * (kilnd_job_admission_deinit). */
typedef struct kilnd_job_admitted_target_s {
  char *target;
  char cache_key[65];
  char artifact_digest[65]; /* empty unless cached */
  uint64_t size_bytes;
  bool cached;
  bool merged;
} kilnd_job_admitted_target_t;

typedef struct kilnd_job_admission_s {
  char job_id[KILND_JOB_ID_LEN + 1];
  char source_digest[65];
  kilnd_job_state_t state;
  int64_t created_unix_ms;
  kilnd_job_admitted_target_t *targets;
  size_t n_targets;
} kilnd_job_admission_t;

void kilnd_job_admission_deinit(kilnd_job_admission_t *admission);

/* Creates the engine and its worker pool on `loop`. `cache` is borrowed. With a
 * job store, finished jobs younger than the retention come back watchable and
 * unfinished ones are admitted again (under their ids) once a worker is ready. */
KILN_MUST_USE kiln_status_t kilnd_jobs_create(uv_loop_t *loop, kiln_cache_t *cache,
                                              const kilnd_jobs_options_t *options,
                                              const kilnd_workers_options_t *worker_options,
                                              kilnd_jobs_t **out_jobs);

/* Admits a request (thread pool: blocks on the cache). NOT_FOUND / DATA_LOSS for
 * a source digest the cache cannot give; RESOURCE_EXHAUSTED when the priority
 * class's queue is full or a per-client limit is hit (the message names the
 * setting; the refusal is counted and logged here); ALREADY_EXISTS for a reused request_id with another
 * request; UNAVAILABLE while draining. Thread-safe. */
KILN_MUST_USE kiln_status_t kilnd_jobs_submit(kilnd_jobs_t *jobs, const kilnd_job_request_t *request,
                                              kilnd_job_admission_t *out_admission);

/* Records a per-client refusal made outside the engine (the RPC layer's
 * client-max-request-bytes): counts it for /metrics and logs `limit_hit`.
 * Thread-safe. */
void kilnd_jobs_limit_refused(kilnd_jobs_t *jobs, kilnd_limit_t limit, const char *client);

/* client-max-request-bytes: NULL when a request of `bytes` from `client` is
 * within `max` (0: no limit); else RESOURCE_EXHAUSTED naming the setting, counted
 * and logged (kilnd_jobs_limit_refused; `jobs` may be NULL: then only the
 * status). Thread-safe. */
KILN_MUST_USE kiln_status_t kilnd_jobs_check_request_bytes(kilnd_jobs_t *jobs, const char *client,
                                                           uint64_t bytes, uint64_t max);

/* For a caller that retries a RESOURCE_EXHAUSTED admission (Recompile):
 * *out_at_limit is true while `client` is at client-max-jobs (a retry now would be
 * refused: wait without resubmitting); *out_can_clear is false when neither the
 * client nor anyone else has unfinished work, so that no refusal can clear by
 * waiting (then stop retrying). Thread-safe. */
void kilnd_jobs_client_wait_state(kilnd_jobs_t *jobs, const char *client, bool *out_at_limit,
                                  bool *out_can_clear);

/* kilnd_jobs_submit without blocking, for the loop thread: admits a request the
 * cache's memory answers whole (every target a memoized hit) at once; for any
 * other it sets *out_would_block, returns NULL and changes nothing: then call
 * kilnd_jobs_submit off the loop. Thread-safe. */
KILN_MUST_USE kiln_status_t kilnd_jobs_try_submit(kilnd_jobs_t *jobs, const kilnd_job_request_t *request,
                                                  kilnd_job_admission_t *out_admission,
                                                  bool *out_would_block);

/* A finished job, as kilnd_jobs_listen reports it. Borrowed for the callback. */
typedef struct kilnd_job_outcome_target_s {
  const char *target;          /* canonical id */
  const char *artifact_digest; /* "" when this target failed */
  uint64_t size_bytes;
  bool cache_hit;      /* answered from the cache, not compiled for this job */
  int code;            /* kiln_status_code_t; 0 when it succeeded */
  const char *message; /* "" when it succeeded; else the reason (compiler diagnostics
                          for INVALID_ARGUMENT) */
} kilnd_job_outcome_target_t;

typedef struct kilnd_job_outcome_s {
  const char *job_id;
  /* DONE, FAILED or CANCELLED; QUEUED or RUNNING with `shutdown` set when kilnd closes
   * under a live job (the job is kept in the store and resumes after a restart). */
  kilnd_job_state_t state;
  bool shutdown;
  const char *message;
  const kilnd_job_outcome_target_t *targets; /* in the job's target order */
  size_t n_targets;
} kilnd_job_outcome_t;

typedef void (*kilnd_job_finished_fn_t)(void *user, const kilnd_job_outcome_t *outcome);
typedef struct kilnd_job_listener_s kilnd_job_listener_t;

/* Calls `fn` once on the loop when job `job_id` has finished (or kilnd closes under
 * it): at once, before this returns, when it already has. Otherwise *out_listener
 * (may be NULL) is a handle for kilnd_jobs_unlisten, valid until `fn` runs. The
 * callback runs with the engine's lock released: it may call any function here
 * (nothing that blocks). NOT_FOUND for an unknown job. Loop thread. */
KILN_MUST_USE kiln_status_t kilnd_jobs_listen(kilnd_jobs_t *jobs, const char *job_id,
                                              kilnd_job_finished_fn_t fn, void *user,
                                              kilnd_job_listener_t **out_listener);

/* Drops a listener whose callback has not run (it never will). Loop thread. */
void kilnd_jobs_unlisten(kilnd_jobs_t *jobs, kilnd_job_listener_t *listener);

/* Cancels a job (loop thread). NOT_FOUND for an unknown job. */
KILN_MUST_USE kiln_status_t kilnd_jobs_cancel(kilnd_jobs_t *jobs, const char *job_id, const char *reason,
                                              kilnd_job_state_t *out_state, bool *out_cancelled);

/* Streams a job's events to `stream` (loop thread), replaying from `after_sequence`
 * (0 with from_start false: the job's current status; see WatchJob in kiln.proto),
 * then live, and finishes the stream after the Terminal event. NOT_FOUND for an
 * unknown job, CANCELLED for a call already cancelled (the caller finishes the
 * stream with it). */
KILN_MUST_USE kiln_status_t kilnd_jobs_watch(kilnd_jobs_t *jobs, const char *job_id, bool from_start,
                                             uint64_t after_sequence, kilnd_stream_t *stream);

/* The compiler identity of the workers (from the first worker's Hello), the
 * compiler part of every cache key; NULL until a worker is ready. Borrowed, set
 * once. Thread-safe. */
const char *kilnd_jobs_compiler(kilnd_jobs_t *jobs);

/* The cache key parts of (source, target, flags) under `compiler`: `key_digest`
 * is the source's key digest (kiln_cache_source_key_digest), `target` a canonical
 * target id (NULL for kiln_cache_keys_compute, which takes the targets apart),
 * `flags` normalized (base/flags.h); the HAL and bytecode versions are the
 * engine's. The one place kilnd assembles a key: admission, storing a result,
 * GetArtifact and Recompile all come through here. The parts borrow the
 * arguments. Thread-safe. */
void kilnd_jobs_key_parts(const kilnd_jobs_t *jobs, const char *compiler, const char *key_digest,
                          const char *target, const char *const *flags, size_t n_flags,
                          kiln_cache_key_parts_t *out_parts);

/* The same, waiting up to `timeout_ms` for the first worker (thread pool only: it
 * blocks). NULL when none came. */
const char *kilnd_jobs_compiler_wait(kilnd_jobs_t *jobs, int64_t timeout_ms);

/* The workers' compiler field by field (workers.h: kilnd_compiler_info_t), from
 * the first worker's Hello: copied into *out_info (caller-owned) under the lock,
 * returning true; false, with *out_info cleared, while no worker has said Hello.
 * kilnd itself links no compiler, so this is the only truthful identity it has.
 * Thread-safe. */
bool kilnd_jobs_identity(kilnd_jobs_t *jobs, kilnd_compiler_info_t *out_info);

typedef struct kilnd_jobs_stats_s {
  uint64_t queued, running, done, failed, cancelled, submitted, merged_requests;
  uint64_t targets_compiled, targets_failed, compile_ms_total;
  uint64_t queue_depth;
  uint64_t queued_by_class[3]; /* queue_depth by class: interactive, batch, bulk */
  uint64_t tasks_fused;        /* queued tasks folded into another of the same source and flags */
  uint64_t limit_refusals[KILND_LIMIT_COUNT]; /* per-client refusals, by kilnd_limit_t */
  kilnd_workers_stats_t workers;
} kilnd_jobs_stats_t;

/* Counters (loop thread). */
void kilnd_jobs_stats(kilnd_jobs_t *jobs, kilnd_jobs_stats_t *out_stats);

/* Copies the compile durations by target (metrics.h) that complete_item counted:
 * one observation per target compiled and stored. Loop thread. */
struct kilnd_histograms_s;
void kilnd_jobs_compile_histograms(kilnd_jobs_t *jobs, struct kilnd_histograms_s *out);

/* Calls fn(user) on the loop once, when the first compile worker is ready (at
 * once, before this returns, when one already is); a later call replaces the hook.
 * kilnd's readiness (sd_notify READY=1) waits for it. Loop thread. */
void kilnd_jobs_on_ready(kilnd_jobs_t *jobs, void (*fn)(void *user), void *user);

/* Cancels everything, closes the pool and the engine's handles, then runs `done`
 * (loop thread). The closed engine stays valid for calls still in flight (they
 * are refused UNAVAILABLE or find no job) until kilnd_jobs_destroy. */
void kilnd_jobs_close(kilnd_jobs_t *jobs, void (*done)(void *user), void *user);

/* Frees a closed engine, once nothing can call it any more (after the loop's last
 * run). An engine not yet closed is left alone (logged: a leak, not a crash). */
void kilnd_jobs_destroy(kilnd_jobs_t *jobs);

#endif /* KILN_DAEMON_JOBS_H */
