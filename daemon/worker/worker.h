/* kiln-worker's own parts (not a library interface): the process's options and
 * state, the frames it sends kilnd (main.c), its scratch directory (scratch.c)
 * and the external-compiler driver (external.c). See main.c for the design.
 * Single-threaded. */
#ifndef KILN_DAEMON_WORKER_WORKER_H
#define KILN_DAEMON_WORKER_WORKER_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "base/log.h"
#include "base/status.h"
#include "compiler/pipeline.h"
#include "compiler/targets.h"
#include "kiln/worker/v1/worker.pb-c.h"

/* worker.proto: a frame longer than this is a protocol violation (and no file
 * the worker reads back may be larger). */
#define MAX_FRAME_BYTES (1u << 30)

/* What kilnd passes on the command line (main.c parses it). */
typedef struct options_s {
  int64_t jobs;
  uint64_t memory_limit;
  char *external;      /* NULL: the built-in compiler */
  char *external_args; /* the template; the default when not given */
  char *scratch;       /* --scratch: the directory to create as TMPDIR */
  bool test_hooks;
  bool version; /* --version: print the compiler identity and exit */
  bool help;
  char *log_level_name;
  kiln_log_level_t log_level; /* parsed from log_level_name */
} options_t;

/* The process: its options and what start-up set up. */
typedef struct worker_s {
  options_t opt;
  kiln_compiler_context_t *context; /* built-in mode */
  char *external_path;              /* external mode: absolute, or a bare name for PATH */
  char *external_version;
  char *scratch;      /* the scratch directory, this process's TMPDIR (scratch.c) */
  bool scratch_owned; /* made without --scratch: this process removes it */
  uint64_t applied_limit;
} worker_t;

/* ---- Frames to kilnd (main.c); each exits the process if kilnd is gone ---------- */

void worker_send_progress(uint64_t task, const char *target, const char *stage, uint32_t index,
                          uint32_t count);
/* `code` OK is sent as INTERNAL: a failure always carries an error code. */
void worker_send_failed(uint64_t task, const char *target, kiln_status_code_t code, const char *message);
void worker_send_done(uint64_t task, const char *target, const void *vmfb, size_t len, int64_t compile_ms);
int64_t worker_elapsed_ms_since(int64_t start_ns);

/* ---- The scratch directory (scratch.c) ------------------------------------------- */

/* Creates the scratch directory (--scratch, which must be absolute and must not
 * exist, and which kilnd removes; else a new $TMPDIR/kiln-worker-scratch-XXXXXX,
 * which this process removes, also from an atexit handler when it leaves with
 * exit()), sets w->scratch to it (freed by worker_scratch_cleanup) and points
 * TMPDIR at it with setenv (so call it before any thread starts). INVALID_ARGUMENT for a
 * relative --scratch; the errno status naming the directory when it cannot be
 * made (EEXIST when it is there already: never taken over). */
KILN_MUST_USE kiln_status_t worker_scratch_setup(worker_t *w);
/* Removes the scratch directory this process made for itself (not kilnd's
 * --scratch) and frees w->scratch. */
void worker_scratch_cleanup(worker_t *w);

/* ---- The external compiler (external.c) ----------------------------------------- */

/* Resolves --external, checks the --external-args template and reads the
 * compiler's --version. */
KILN_MUST_USE kiln_status_t worker_external_setup(worker_t *w);
/* What `path --version` prints, whitespace collapsed, at most 256 bytes (empty
 * when it printed nothing); free with kiln_free. */
char *worker_external_version(const char *path);
/* Compiles `task` for its n resolved targets (names[i] as the task spelled them),
 * one child per target, sending each target's TargetDone or TargetFailed. The
 * task started at `start_ns` (its timeout counts from there). */
void worker_external_task(worker_t *w, const Kiln__Worker__V1__CompileTask *task, const char *const *names,
                          const kiln_target_t *const *targets, size_t n, int64_t start_ns);
/* Frees what setup allocated. */
void worker_external_cleanup(worker_t *w);

#endif /* KILN_DAEMON_WORKER_WORKER_H */
