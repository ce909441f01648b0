/* The compile worker pool: separate processes running the compiler library.
 *
 * kilnd never compiles in its own process. It spawns `count` workers (the
 * kiln-worker executable) and talks to each over its stdin/stdout with
 * length-prefixed protobuf messages (proto/kiln/worker/v1/worker.proto). A worker
 * keeps one warm MLIR context for its whole life and compiles one task at a time;
 * a task is one source for one or more targets, whose target-independent half runs
 * once (the compiler's fan-out).
 *
 * A worker that crashes, aborts, exceeds its memory limit (RLIMIT_AS) or runs past
 * the task timeout fails only the targets of its task still unfinished, with a
 * clear message (the IR that triggered it is kept under `crash_dir`), and is
 * replaced. Cancelling a task kills its worker (SIGKILL) and replaces it.
 * Workers are process-group leaders, and "kill" means the whole group: the
 * fan-out children and an external compiler die with their worker. A worker that
 * dies before it is ready (a missing library, a bad external template) is
 * respawned with exponential backoff (100 ms doubling to 30 s), so kilnd stays up
 * with no workers rather than spinning; each failure is logged.
 *
 * Each worker's stderr (logfmt lines) is forwarded into kilnd's log as
 * event=worker_log lines tagged worker=worker-3 pid=1234, each cut at 2 KiB
 * and at most about 20 a second per worker (a burst of 100; a count of the lines
 * dropped follows).
 *
 * The process must ignore SIGPIPE (kilnd's main does): a worker that dies while
 * a task is being written to it must not take kilnd down.
 *
 * Loop thread only: every call and every callback happens on the libuv loop the
 * pool was created on. Only KILND_TASK_STARTED is delivered from inside a call
 * (kilnd_workers_submit); every other event comes from the loop. Callbacks may
 * call submit, cancel, stats and close.
 */
#ifndef KILN_DAEMON_WORKERS_H
#define KILN_DAEMON_WORKERS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <uv.h>

#include "base/status.h"

typedef struct kilnd_workers_s kilnd_workers_t;

typedef struct kilnd_workers_options_s {
  size_t count;                /* processes; 0: the number of online CPUs */
  const char *worker_path;     /* the kiln-worker executable */
  size_t jobs;                 /* back halves one worker runs at once (forked children);
                                  0: online CPUs / count, at least 1, so the default
                                  pool (one worker per CPU) never forks N*N processes */
  int64_t task_timeout_ms;     /* a task running longer is killed; 0: none */
  uint64_t memory_limit_bytes; /* RLIMIT_AS of each worker (and of the compilers it
                                  runs); 0: none; else at least 256 MiB */
  const char *crash_dir;       /* where the IR of a task that killed its worker is kept,
                                  as <crash_dir>/<task id>.mlir (the directory is made
                                  on first use); NULL: not kept */
  uint32_t crash_keep;         /* the newest this many crash files are kept (and at most
                                  CRASH_KEEP_BYTES of them, the newest always); older
                                  ones are removed as new ones come; 0: 32 */
  /* External compiler driver (NULL: the built-in compiler): an
   * iree-compile-compatible executable run once per target, with `external_args`
   * as its argument template (see worker.proto's ExternalCompiler; NULL: the
   * default, iree-compile's own command line). A bare name is looked up on PATH. */
  const char *external_compiler;
  const char *external_args;
  bool test_hooks; /* honour the test-only crash/hang/oom markers
                      (daemon/worker/main.c; tests only) */
} kilnd_workers_options_t;

/* One compile task. Everything is borrowed for the call to submit (copied). */
typedef struct kilnd_task_s {
  uint64_t id; /* unique, chosen by the caller */
  const uint8_t *source;
  size_t source_len;
  const char *source_name;    /* for diagnostics ("model.mlir") */
  const char *source_digest;  /* hex SHA-256: provenance in the artifact */
  const char *const *targets; /* canonical target ids */
  size_t n_targets;
  const char *const *flags; /* normalized compile flags */
  size_t n_flags;
  bool embed_source; /* carry the source inside each VMFB */
  size_t jobs;       /* back halves the worker may fork at once for it; 0: its --jobs */
} kilnd_task_t;

typedef enum kilnd_task_event_kind_e {
  KILND_TASK_STARTED = 1,       /* a worker took the task: `worker` names it */
  KILND_TASK_PROGRESS = 2,      /* target, stage, stage_index/stage_count */
  KILND_TASK_TARGET_DONE = 3,   /* target, artifact (the VMFB bytes), compile_ms */
  KILND_TASK_TARGET_FAILED = 4, /* target, code, message (diagnostics with file:line:col) */
  KILND_TASK_FINISHED = 5,      /* last event: every target was reported */
  KILND_TASK_WORKER_READY = 6,  /* task_id 0, not a task's: a worker became idle (started,
                                   replaced after a death, or done with a task and not
                                   given another from the FINISHED callback): the job
                                   engine submits queued work here */
} kilnd_task_event_kind_t;

/* Valid only during the callback. */
typedef struct kilnd_task_event_s {
  kilnd_task_event_kind_t kind;
  const char *worker; /* "worker-3": what clients may see */
  int pid;            /* its process, for kilnd's own log (and tests); 0 when it has none */
  const char *target;
  const char *stage;
  uint32_t stage_index;
  uint32_t stage_count;
  const uint8_t *artifact;
  size_t artifact_len;
  int64_t compile_ms;
  kiln_status_code_t code;
  const char *message;
} kilnd_task_event_t;

typedef void (*kilnd_task_event_fn_t)(void *user, uint64_t task_id, const kilnd_task_event_t *event);

typedef struct kilnd_workers_stats_s {
  size_t count;      /* configured workers */
  size_t busy;       /* running a task now */
  size_t ready;      /* past their Hello: idle or busy */
  uint64_t tasks;    /* tasks finished */
  uint64_t restarts; /* workers replaced after a crash, kill, timeout or cancel */
  uint64_t crashes;  /* of which died on their own (signal or bad exit) */
  size_t scratch_left; /* dead workers' scratch folders a removal could not remove
                        * yet (each failure logged; tried again at the next death) */
} kilnd_workers_stats_t;

/* Starts the pool's processes (they become idle once each has said Hello: watch
 * for KILND_TASK_WORKER_READY). Events of every task go to `fn` on `loop`. The
 * option strings are copied. It first lists the scratch directories a killed
 * kilnd left in $TMPDIR and queues their removal on the thread pool (workers.c).
 * INVALID_ARGUMENT for a worker_path that is not executable, an external_args
 * template with an unknown {placeholder}, a memory limit under 256 MiB (the
 * warm compiler alone needs about 150 MB), or a TMPDIR that is not the absolute
 * path of a writable folder (the message names it and why);
 * INTERNAL when a process cannot be spawned (the processes already started are
 * killed and the pool frees itself on the loop: keep running it). */
KILN_MUST_USE kiln_status_t kilnd_workers_create(uv_loop_t *loop, const kilnd_workers_options_t *options,
                                                 kilnd_task_event_fn_t fn, void *user,
                                                 kilnd_workers_t **out_workers);

/* Workers free to take a task now. */
size_t kilnd_workers_idle(const kilnd_workers_t *workers);

/* Hands `task` to an idle worker (FAILED_PRECONDITION when none is idle: the job
 * engine owns the queue and submits only when kilnd_workers_idle() > 0; also after
 * close). KILND_TASK_STARTED is delivered before this returns. INVALID_ARGUMENT
 * for id 0, an id already running, no targets, more than 64, or an empty or
 * repeated target. The source is copied and kept until the task finishes (for the
 * crash report). */
KILN_MUST_USE kiln_status_t kilnd_workers_submit(kilnd_workers_t *workers, const kilnd_task_t *task);

/* Stops a running task: its worker is killed and replaced; the unfinished targets
 * are reported TARGET_FAILED with CANCELLED, then FINISHED. No-op for an unknown id. */
void kilnd_workers_cancel(kilnd_workers_t *workers, uint64_t task_id);

void kilnd_workers_stats(const kilnd_workers_t *workers, kilnd_workers_stats_t *out_stats);

/* The compiler the workers run, from the first worker's Hello, for provenance and
 * cache keys: "kiln-mlir 0.1.0 llvm 22.1.8" (the cache index's form), or in external mode
 * "external /opt/iree/bin/iree-compile (IREE (https://iree.dev): IREE compiler
 * version 3.12.0 ...)", the output of its --version with whitespace collapsed.
 * NULL until a worker is ready. Borrowed: valid until close. */
const char *kilnd_workers_compiler(const kilnd_workers_t *workers);

/* The compiler the workers run, field by field, as GetServerInfo reports it: from
 * the first worker's Hello, the built-in compiler's name, version and LLVM and
 * MLIR releases ("kiln-mlir", "0.1.0", "22.1.8", "22.1.8"); in external mode name
 * "external", version "<path> (<its --version>)" (kilnd_workers_compiler without
 * the "external " prefix) and empty LLVM and MLIR versions (they are the external
 * compiler's business). Each field is a copy, cut to fit its array. */
typedef struct kilnd_compiler_info_s {
  char name[64];
  char version[1024];
  char llvm_version[64];
  char mlir_version[64];
} kilnd_compiler_info_t;

/* Fills *out_info (caller-owned) with the compiler the workers run and returns
 * true; before the first worker's Hello clears it and returns false. Loop thread
 * only. */
bool kilnd_workers_identity(const kilnd_workers_t *workers, kilnd_compiler_info_t *out_info);

/* Stops every worker and closes the pool's handles; `done` (may be NULL) runs on
 * the loop once all are closed and every worker reaped, after which the pool is
 * freed. Idle workers are told to exit (end of file on their stdin) and killed if
 * they take more than a second; busy and starting ones are killed at once (their
 * process groups, SIGKILL). Running tasks get no more events, nor does anything
 * else: the pool must not be used after this call. */
void kilnd_workers_close(kilnd_workers_t *workers, void (*done)(void *user), void *user);

#endif /* KILN_DAEMON_WORKERS_H */
