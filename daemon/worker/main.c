/* kiln-worker: one compile process of kilnd's worker pool (daemon/workers.c).
 *
 *   kiln-worker [--jobs N] [--memory-limit BYTES] [--log-level L] [--scratch DIR]
 *               [--external COMPILER [--external-args TEMPLATE]] [--test-hooks]
 *   kiln-worker [--external COMPILER] --version
 *
 * Design. kilnd never compiles in its own process: it runs N of these and talks to
 * each over stdin/stdout with length-prefixed kiln.worker.v1 messages
 * (proto/kiln/worker/v1/worker.proto has the framing and the conversation). The
 * worker is single-threaded and strictly sequential: send Hello, then forever read
 * one CompileTask, answer it (Progress..., one TargetDone or TargetFailed per
 * target, TaskFinished), read the next. End of file on stdin is the normal way to
 * stop (exit 0). Anything kilnd must know goes down stdout as messages; stderr
 * carries logfmt log lines only (one line each), which the pool forwards into
 * kilnd's log, and is also where the last words of a crash end up (abort
 * messages, "out_of_memory"), which the pool reads to tell a memory death from a
 * crash.
 *
 * Built-in mode keeps ONE kiln_compiler_context_t (a warm MLIR context) for the
 * whole life of the process. The back halves of a multi-target task fan out to
 * forked children (compiler/fanout.c) up to --jobs at a time. The default is 1:
 * with kilnd's default of one worker per CPU, every core already has a worker, and
 * fanning out inside each would run up to N*N processes on N cores; kilnd passes
 * jobs = CPUs / workers (at least 1), so a small pool on a big machine still uses
 * every core for one multi-target task.
 *
 * External mode (--external) runs an iree-compile-compatible executable once per
 * target instead (see ExternalCompiler in worker.proto for the template syntax):
 * the source is written into a private scratch directory, the compiler runs there
 * as a child (stdin /dev/null, stdout discarded, stderr captured, killed with the
 * worker through PR_SET_PDEATHSIG), and the VMFB it wrote is read back. No MLIR
 * context is created in this mode.
 *
 * Scratch. Every worker creates its scratch directory (--scratch, which kilnd
 * names) and makes it its own TMPDIR (scratch.c), so whatever temporary files it,
 * its children and its tools make lie there. A killed worker cannot remove it,
 * so kilnd does, once it has reaped the worker, however it ended.
 *
 * Memory. --memory-limit sets RLIMIT_AS on this process before anything big is
 * mapped, so a runaway compile fails an allocation here (kiln_malloc logs
 * event=out_of_memory and aborts; LLVM reports "out of memory") instead of
 * pushing the machine into the OOM killer. Children (fan-out, external compiler,
 * ptxas) inherit the limit. Under AddressSanitizer or ThreadSanitizer, whose
 * shadow memory alone is terabytes of address space, the limit is counted on top
 * of the address space the process has at start-up.
 *
 * Dying with kilnd. The pool starts workers as process-group leaders and kills
 * the whole group (fan-out children and external compilers included) to stop a
 * task. If kilnd itself dies, PR_SET_PDEATHSIG kills the worker.
 *
 * TEST HOOKS (--test-hooks only; kilnd sets it only from tests). A source that
 * contains one of these lines makes the worker misbehave on purpose, right after
 * it reported the "parse" stage, so integration tests can exercise the pool's
 * failure handling without a real compiler bug:
 *   // kiln-test: crash   abort() (SIGABRT), as a crashing compiler would
 *   // kiln-test: hang    sleep forever, until killed (task timeout, cancel)
 *   // kiln-test: oom     allocate 64 MiB blocks (untouched, so no real memory is
 *                         used) until the memory limit makes one fail; without
 *                         --memory-limit it fails the task's targets with
 *                         FAILED_PRECONDITION instead of eating the machine
 *
 * --version prints the compiler this worker would compile with, on one line,
 * and exits: "kiln-worker 0.1.0 (compiler kiln-mlir 0.1.0, LLVM 22.1.8)", or with
 * --external "kiln-worker 0.1.0 (compiler external PATH (ITS --version))". kilnd
 * links no compiler, so `kilnd --version` runs this and reports what is inside
 * "(compiler ...)" (daemon/main.c reads it back: keep the form).
 *
 * Exit status: 0 stdin closed (or --help, --version); 1 kilnd went away or sent
 * something broken; 2 bad arguments or the compiler could not be set up.
 */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <limits.h>
#include <poll.h>
#include <signal.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "base/alloc.h"
#include "base/buf.h"
#include "base/config.h"
#include "base/digest.h"
#include "base/log.h"
#include "base/status.h"
#include "base/time.h"
#include "compiler/artifact.h"
#include "compiler/identity.h"
#include "compiler/pipeline.h"
#include "compiler/source.h"
#include "compiler/targets.h"
#include "kiln/worker/v1/worker.pb-c.h"
#include "daemon/worker/worker.h"

#define EXIT_PEER       1
#define EXIT_SETUP      2

#define MAX_TARGETS     64
#define OOM_BLOCK_BYTES ((size_t)64 << 20)

#define DEFAULT_EXTERNAL_ARGS \
  "{input} --iree-hal-target-device={device} --{target_flag}={chip} {flags} -o {output}"

/* AddressSanitizer and ThreadSanitizer map terabytes of shadow address space at
 * start-up; the memory limit is counted on top of it. */
#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
#define UNDER_SHADOW_SANITIZER 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer) || __has_feature(thread_sanitizer)
#define UNDER_SHADOW_SANITIZER 1
#endif
#endif
#ifndef UNDER_SHADOW_SANITIZER
#define UNDER_SHADOW_SANITIZER 0
#endif

/* ---- Frames on stdin/stdout ---------------------------------------------------- */

static void write_all_or_exit(int fd, const void *data, size_t len) {
  const uint8_t *p = data;
  while (len > 0) {
    ssize_t n = write(fd, p, len);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) {
      /* kilnd closed our stdout: it is gone or done with us. */
      kiln_log(KILN_LOG_WARN, "worker_exit", "reason=\"kilnd closed the pipe\" errno=%d", errno);
      exit(EXIT_PEER);
    }
    p += n;
    len -= (size_t)n;
  }
}

static void send_event(Kiln__Worker__V1__WorkerEvent *event) {
  size_t len = kiln__worker__v1__worker_event__get_packed_size(event);
  if (len > MAX_FRAME_BYTES) {
    /* Cannot happen for anything but an absurd VMFB; never break the framing. */
    kiln_log(KILN_LOG_ERROR, "worker_exit", "reason=\"event over 1 GiB\" bytes=%zu", len);
    exit(EXIT_PEER);
  }
  uint8_t *frame = kiln_malloc(4 + len);
  frame[0] = (uint8_t)len;
  frame[1] = (uint8_t)(len >> 8);
  frame[2] = (uint8_t)(len >> 16);
  frame[3] = (uint8_t)(len >> 24);
  kiln__worker__v1__worker_event__pack(event, frame + 4);
  write_all_or_exit(STDOUT_FILENO, frame, 4 + len);
  kiln_free(frame);
}

/* 0: read `len` bytes; 1: clean end of file before the first byte; -1: error or a
 * short read (errno set, EPIPE for a short read). */
static int read_full(int fd, void *data, size_t len) {
  uint8_t *p = data;
  size_t got = 0;
  while (got < len) {
    ssize_t n = read(fd, p + got, len - got);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) return -1;
    if (n == 0) {
      if (got == 0) return 1;
      errno = EPIPE;
      return -1;
    }
    got += (size_t)n;
  }
  return 0;
}

/* Reads one WorkerRequest; NULL at end of file. Exits on a broken frame. */
static Kiln__Worker__V1__WorkerRequest *read_request(void) {
  uint8_t hdr[4];
  int r = read_full(STDIN_FILENO, hdr, sizeof hdr);
  if (r == 1) return NULL;
  if (r < 0) {
    kiln_log(KILN_LOG_ERROR, "worker_exit", "reason=\"reading a frame header\" errno=%d", errno);
    exit(EXIT_PEER);
  }
  uint32_t len = (uint32_t)hdr[0] | (uint32_t)hdr[1] << 8 | (uint32_t)hdr[2] << 16 | (uint32_t)hdr[3] << 24;
  if (len > MAX_FRAME_BYTES) {
    kiln_log(KILN_LOG_ERROR, "worker_exit", "reason=\"frame over 1 GiB\" bytes=%" PRIu32, len);
    exit(EXIT_PEER);
  }
  uint8_t *body = kiln_malloc(len ? len : 1);
  if (read_full(STDIN_FILENO, body, len) != 0) {
    kiln_log(KILN_LOG_ERROR, "worker_exit", "reason=\"short frame\" bytes=%" PRIu32, len);
    exit(EXIT_PEER);
  }
  Kiln__Worker__V1__WorkerRequest *req = kiln__worker__v1__worker_request__unpack(NULL, len, body);
  kiln_free(body);
  if (!req) {
    kiln_log(KILN_LOG_ERROR, "worker_exit", "reason=\"request does not decode\" bytes=%" PRIu32, len);
    exit(EXIT_PEER);
  }
  return req;
}

void worker_send_progress(uint64_t task, const char *target, const char *stage, uint32_t index,
                          uint32_t count) {
  Kiln__Worker__V1__Progress p = KILN__WORKER__V1__PROGRESS__INIT;
  p.target = (char *)target;
  p.stage = (char *)stage;
  p.stage_index = index;
  p.stage_count = count;
  Kiln__Worker__V1__WorkerEvent ev = KILN__WORKER__V1__WORKER_EVENT__INIT;
  ev.task_id = task;
  ev.kind_case = KILN__WORKER__V1__WORKER_EVENT__KIND_PROGRESS;
  ev.progress = &p;
  send_event(&ev);
}

void worker_send_failed(uint64_t task, const char *target, kiln_status_code_t code, const char *message) {
  Kiln__Worker__V1__TargetFailed f = KILN__WORKER__V1__TARGET_FAILED__INIT;
  f.target = (char *)target;
  f.code = code == KILN_STATUS_OK ? KILN_STATUS_INTERNAL : (uint32_t)code;
  f.message = (char *)message;
  Kiln__Worker__V1__WorkerEvent ev = KILN__WORKER__V1__WORKER_EVENT__INIT;
  ev.task_id = task;
  ev.kind_case = KILN__WORKER__V1__WORKER_EVENT__KIND_TARGET_FAILED;
  ev.target_failed = &f;
  send_event(&ev);
}

void worker_send_done(uint64_t task, const char *target, const void *vmfb, size_t len, int64_t compile_ms) {
  Kiln__Worker__V1__TargetDone d = KILN__WORKER__V1__TARGET_DONE__INIT;
  d.target = (char *)target;
  d.vmfb.data = (uint8_t *)vmfb;
  d.vmfb.len = len;
  d.compile_ms = compile_ms > 0 ? (uint64_t)compile_ms : 0;
  Kiln__Worker__V1__WorkerEvent ev = KILN__WORKER__V1__WORKER_EVENT__INIT;
  ev.task_id = task;
  ev.kind_case = KILN__WORKER__V1__WORKER_EVENT__KIND_TARGET_DONE;
  ev.target_done = &d;
  send_event(&ev);
}

static void send_finished(uint64_t task, int64_t elapsed_ms) {
  Kiln__Worker__V1__TaskFinished f = KILN__WORKER__V1__TASK_FINISHED__INIT;
  f.elapsed_ms = elapsed_ms > 0 ? (uint64_t)elapsed_ms : 0;
  Kiln__Worker__V1__WorkerEvent ev = KILN__WORKER__V1__WORKER_EVENT__INIT;
  ev.task_id = task;
  ev.kind_case = KILN__WORKER__V1__WORKER_EVENT__KIND_FINISHED;
  ev.finished = &f;
  send_event(&ev);
}

int64_t worker_elapsed_ms_since(int64_t start_ns) { return (kiln_time_monotonic_ns() - start_ns) / 1000000; }

/* ---- Test hooks -------------------------------------------------------------------- */

typedef enum hook_e { HOOK_NONE, HOOK_CRASH, HOOK_HANG, HOOK_OOM } hook_t;

static hook_t find_hook(const uint8_t *src, size_t len) {
  static const char marker[] = "// kiln-test: ";
  const size_t mlen = sizeof marker - 1;
  for (size_t i = 0; i + mlen <= len; i++) {
    if (memcmp(src + i, marker, mlen) != 0) continue;
    const char *w = (const char *)src + i + mlen;
    size_t left = len - i - mlen;
    if (left >= 5 && !memcmp(w, "crash", 5)) return HOOK_CRASH;
    if (left >= 4 && !memcmp(w, "hang", 4)) return HOOK_HANG;
    if (left >= 3 && !memcmp(w, "oom", 3)) return HOOK_OOM;
  }
  return HOOK_NONE;
}

/* Returns only for HOOK_NONE, or for HOOK_OOM without a limit (false: the task's
 * targets were failed). */
static bool run_hook(worker_t *w, const Kiln__Worker__V1__CompileTask *task, hook_t hook) {
  switch (hook) {
    case HOOK_NONE: return true;
    case HOOK_CRASH: kiln_log(KILN_LOG_WARN, "test_hook", "hook=crash task=%" PRIu64, task->task_id); abort();
    case HOOK_HANG:
      kiln_log(KILN_LOG_WARN, "test_hook", "hook=hang task=%" PRIu64, task->task_id);
      for (;;) pause();
    case HOOK_OOM:
      if (!w->applied_limit) {
        for (size_t i = 0; i < task->n_targets; i++) {
          worker_send_failed(task->task_id, task->targets[i], KILN_STATUS_FAILED_PRECONDITION,
                             "test hook oom needs kiln-worker --memory-limit");
        }
        return false;
      }
      kiln_log(KILN_LOG_WARN, "test_hook", "hook=oom task=%" PRIu64 " limit=%" PRIu64, task->task_id,
               w->applied_limit);
      for (;;) {
        /* Untouched: address space, not memory. kiln_malloc aborts when one fails. */
        void *volatile block = kiln_malloc(OOM_BLOCK_BYTES);
        (void)block;
      }
  }
  return true;
}

/* ---- One target's result, sent as soon as the compiler reports it ------------- */

typedef struct ready_s {
  const Kiln__Worker__V1__CompileTask *task;
  const char *const *names;
  size_t n;
  bool *sent;
  kiln_compiler_artifact_options_t ao;
} ready_t;

static void send_target(void *user, const kiln_compiler_output_t *out, size_t i) {
  ready_t *r = user;
  if (r->sent[i]) return;
  r->sent[i] = true;
  uint64_t id = r->task->task_id;
  int64_t t0 = kiln_time_monotonic_ns();
  worker_send_progress(id, r->names[i], "serialize", 3, 4);
  kiln_buf_t vmfb;
  kiln_buf_init(&vmfb);
  kiln_status_t st = kiln_compiler_artifact_write(out, i, &r->ao, &vmfb);
  if (st && out->targets[i].status) {
    /* The target's own failure, not the packaging's consequence of it. */
    kiln_status_free(st);
    worker_send_failed(id, r->names[i], kiln_status_code(out->targets[i].status),
                       kiln_status_message(out->targets[i].status));
  } else if (st) {
    worker_send_failed(id, r->names[i], kiln_status_code(st), kiln_status_message(st));
    kiln_status_free(st);
  } else {
    int64_t ms = out->front_ms + out->targets[i].backend_ms + worker_elapsed_ms_since(t0);
    worker_send_done(id, r->names[i], vmfb.data, vmfb.len, ms);
  }
  kiln_buf_deinit(&vmfb);
}

/* Stage boundaries of the compile (optimize, codegen): Progress for every target
 * not yet sent. */
static void send_stage(void *user, const char *stage, uint32_t index) {
  ready_t *r = user;
  for (size_t i = 0; i < r->n; i++) {
    if (!r->sent[i]) worker_send_progress(r->task->task_id, r->names[i], stage, index, 4);
  }
}

/* ---- One task -------------------------------------------------------------------- */

static void compile_task(worker_t *w, const Kiln__Worker__V1__CompileTask *task) {
  int64_t start = kiln_time_monotonic_ns();
  const char *name = task->source_name && *task->source_name ? task->source_name : "<source>";
  kiln_log(KILN_LOG_DEBUG, "task_start", "task=%" PRIu64 " targets=%zu source_bytes=%zu", task->task_id,
           task->n_targets, task->source.len);

  /* Resolve the targets; an unknown or repeated one fails alone. */
  const kiln_target_t *targets[MAX_TARGETS];
  const char *names[MAX_TARGETS];
  size_t n = 0;
  for (size_t i = 0; i < task->n_targets; i++) {
    const kiln_target_t *t = NULL;
    kiln_status_t st = kiln_compiler_target_resolve(task->targets[i], &t);
    for (size_t k = 0; !st && k < n; k++) {
      if (targets[k] == t) {
        st = KILN_STATUS(KILN_STATUS_INVALID_ARGUMENT, "target %s is listed twice in one task",
                         task->targets[i]);
      }
    }
    if (!st && n == MAX_TARGETS) {
      st = KILN_STATUS(KILN_STATUS_INVALID_ARGUMENT, "more than %d targets in one task", MAX_TARGETS);
    }
    if (st) {
      worker_send_failed(task->task_id, task->targets[i], kiln_status_code(st), kiln_status_message(st));
      kiln_status_free(st);
      continue;
    }
    targets[n] = t;
    names[n++] = task->targets[i];
  }

  /* kilnd hashed the bytes it sent: a mismatch is a transport bug, not the user's. */
  bool digest_ok = true;
  if (task->source_digest && *task->source_digest) {
    kiln_digest_t d;
    kiln_digest_hex_t hex;
    kiln_digest_of(task->source.data, task->source.len, &d);
    kiln_digest_to_hex(&d, &hex);
    if (strcmp(hex.text, task->source_digest) != 0) {
      digest_ok = false;
      kiln_buf_t m;
      kiln_buf_init(&m);
      kiln_buf_appendf(&m, "the source reached the worker damaged: its SHA-256 is %s, kilnd sent %s",
                       hex.text, task->source_digest);
      for (size_t i = 0; i < n; i++)
        worker_send_failed(task->task_id, names[i], KILN_STATUS_DATA_LOSS, m.data);
      kiln_buf_deinit(&m);
    }
  }

  if (digest_ok && n > 0) {
    const bool external = w->opt.external != NULL;
    for (size_t i = 0; i < n && !external; i++) worker_send_progress(task->task_id, names[i], "parse", 0, 4);
    bool go = !w->opt.test_hooks || run_hook(w, task, find_hook(task->source.data, task->source.len));
    if (go && external) {
      worker_external_task(w, task, names, targets, n, start);
    } else if (go) {
      kiln_buf_t flags;
      kiln_buf_init(&flags);
      for (size_t i = 0; i < task->n_flags; i++) {
        if (i) kiln_buf_append_char(&flags, ' ');
        kiln_buf_append_str(&flags, task->flags[i]);
      }
      ready_t ready = {.task = task,
                       .names = (const char *const *)names,
                       .n = n,
                       .sent = kiln_calloc(n, sizeof(bool)),
                       .ao = {.source = task->source.data,
                              .source_len = task->source.len,
                              .embed_source = task->embed_source,
                              .flat = false,
                              .flags = flags.data}};
      /* Each target is packaged and sent the moment its back half is done, while
       * the others still compile (kilnd streams it on at once). */
      kiln_compiler_context_on_target(w->context, send_target, &ready);
      kiln_compiler_context_on_stage(w->context, send_stage, &ready);
      kiln_compiler_context_set_jobs(w->context, task->jobs && task->jobs <= KILN_COMPILER_MAX_JOBS
                                                     ? (size_t)task->jobs
                                                     : (size_t)w->opt.jobs);
      kiln_compiler_output_t out;
      kiln_status_t st =
          kiln_compiler_compile(w->context, task->source.data, task->source.len, name, targets, n, &out);
      kiln_compiler_context_on_target(w->context, NULL, NULL);
      kiln_compiler_context_on_stage(w->context, NULL, NULL);
      if (st) {
        /* Bad IR (MLIR's diagnostics with file:line:col): every target fails alike. */
        for (size_t i = 0; i < n; i++) {
          worker_send_failed(task->task_id, names[i], kiln_status_code(st), kiln_status_message(st));
        }
        kiln_status_free(st);
      } else {
        for (size_t i = 0; i < n; i++) {
          if (!ready.sent[i]) send_target(&ready, &out, i);
        }
        kiln_compiler_output_deinit(&out);
      }
      kiln_free(ready.sent);
      kiln_buf_deinit(&flags);
    }
  }
  int64_t ms = worker_elapsed_ms_since(start);
  send_finished(task->task_id, ms);
  kiln_log(KILN_LOG_DEBUG, "task_done", "task=%" PRIu64 " ms=%" PRId64, task->task_id, ms);
}

/* ---- Start-up ------------------------------------------------------------------- */

static const char *const log_levels[] = {"debug", "info", "warn", "error", NULL};

/* kilnd passes these (workers.c); base/config parses them as it does kilnd's and
 * kiln's flags (command line only: a worker reads no file or environment). */
#define FLAG(name, type, field, def, metavar, help, min, max, choices)                \
  {                                                                                   \
    name, 0, type, offsetof(options_t, field), def, metavar, help, min, max, choices, \
        KILN_CONFIG_CLI_ONLY | KILN_CONFIG_NO_DUMP                                    \
  }
static const kiln_config_option_t option_list[] = {
    FLAG("jobs", KILN_CONFIG_INT, jobs, "1", "N", "fork up to N back halves of one task at a time", 1,
         KILN_COMPILER_MAX_JOBS, NULL),
    FLAG("memory-limit", KILN_CONFIG_SIZE, memory_limit, "0", "BYTES",
         "RLIMIT_AS for this process and its children (0: none)", 0, 0, NULL),
    FLAG("log-level", KILN_CONFIG_STRING, log_level_name, "info", "LEVEL", "debug, info, warn or error", 0, 0,
         log_levels),
    FLAG("external", KILN_CONFIG_STRING, external, NULL, "COMPILER",
         "compile with this iree-compile-compatible executable instead of the built-in compiler", 0, 0, NULL),
    FLAG("external-args", KILN_CONFIG_STRING, external_args, NULL, "TEMPLATE",
         "the external compiler's argument template (worker.proto: ExternalCompiler)", 0, 0, NULL),
    FLAG("scratch", KILN_CONFIG_STRING, scratch, NULL, "DIR",
         "create DIR (absolute, new) as this worker's TMPDIR (default: a new "
         "$TMPDIR/kiln-worker-scratch-XXXXXX)",
         0, 0, NULL),
    FLAG("test-hooks", KILN_CONFIG_BOOL, test_hooks, NULL, NULL,
         "obey kiln-test lines in sources (tests only)", 0, 0, NULL),
    FLAG("version", KILN_CONFIG_BOOL, version, NULL, NULL, "print the compiler this worker runs and exit", 0,
         0, NULL),
    FLAG("help", KILN_CONFIG_BOOL, help, NULL, NULL, "print this help and exit", 0, 0, NULL),
};
static const kiln_config_table_t option_table = {"kiln-worker", "", option_list,
                                                 sizeof option_list / sizeof option_list[0]};

static void usage(FILE *out) {
  fputs(
      "usage: kiln-worker [--jobs N] [--memory-limit BYTES] [--log-level L] [--scratch DIR]\n"
      "                   [--external COMPILER [--external-args TEMPLATE]] [--test-hooks]\n"
      "       kiln-worker [--external COMPILER] --version\n"
      "A compile worker of kilnd: reads kiln.worker.v1 tasks on stdin, answers on stdout.\n"
      "It is started by kilnd, not by hand. --version prints the compiler it runs.\n\n",
      out);
  kiln_config_print_help(&option_table, out);
}

/* 0, or -1 after saying what is wrong on stderr. */
static int parse_options(int argc, char **argv, options_t *o) {
  memset(o, 0, sizeof *o);
  const char *positional[1];
  size_t n_positional = 0;
  kiln_status_t st = kiln_config_set_defaults(&option_table, o);
  if (!st) st = kiln_config_parse_args(&option_table, o, argc, argv, positional, 1, &n_positional);
  if (!st && n_positional) {
    st = KILN_STATUS(KILN_STATUS_INVALID_ARGUMENT, "unexpected argument '%s'", positional[0]);
  }
  if (st) {
    fprintf(stderr, "kiln-worker: %s\n", kiln_status_message(st));
    kiln_status_free(st);
    return -1;
  }
  kiln_log_level_parse(o->log_level_name, &o->log_level); /* one of the choices */
  if (o->external && !*o->external) {
    kiln_free(o->external);
    o->external = NULL;
  }
  if (!o->external_args || !*o->external_args) {
    kiln_free(o->external_args);
    o->external_args = kiln_strdup(DEFAULT_EXTERNAL_ARGS);
  }
  return 0;
}

/* Address space mapped now, from /proc/self/status (0 when unknown). */
static uint64_t address_space_now(void) {
  FILE *f = fopen("/proc/self/status", "re");
  if (!f) return 0;
  char line[256];
  uint64_t kb = 0;
  while (fgets(line, sizeof line, f)) {
    if (sscanf(line, "VmSize: %" SCNu64 " kB", &kb) == 1) break;
  }
  fclose(f);
  return kb * 1024;
}

static KILN_MUST_USE kiln_status_t apply_memory_limit(worker_t *w) {
  if (!w->opt.memory_limit) return NULL;
  uint64_t limit = w->opt.memory_limit;
  if (UNDER_SHADOW_SANITIZER) limit += address_space_now();
  struct rlimit rl = {.rlim_cur = limit, .rlim_max = limit};
  if (setrlimit(RLIMIT_AS, &rl) != 0) {
    return KILN_STATUS_ERRNO(errno, "setting the memory limit (RLIMIT_AS) to %" PRIu64 " bytes", limit);
  }
  w->applied_limit = limit;
  return NULL;
}

/* --version: the compiler identity the Hello would carry, in the one-line form the
 * design block shows (kilnd --version parses it). Exit status for main. */
static int print_version(const options_t *o) {
  if (o->external) {
    char *v = worker_external_version(o->external);
    printf("kiln-worker %s (compiler external %s (%s))\n", KILN_VERSION, o->external,
           *v ? v : "no --version");
    kiln_free(v);
  } else {
    kiln_compiler_identity_t id;
    kiln_compiler_identity_get(&id);
    printf("kiln-worker %s (compiler %s %s, LLVM %s)\n", KILN_VERSION, id.name, id.version, id.llvm_version);
  }
  return fflush(stdout) == 0 && !ferror(stdout) ? 0 : EXIT_SETUP;
}

static void send_hello(const worker_t *w) {
  kiln_compiler_identity_t id;
  kiln_compiler_identity_get(&id);
  Kiln__Worker__V1__Hello h = KILN__WORKER__V1__HELLO__INIT;
  h.compiler_name = (char *)id.name;
  h.compiler_version = (char *)id.version;
  h.llvm_version = (char *)id.llvm_version;
  h.mlir_version = (char *)id.mlir_version;
  h.pid = (uint32_t)getpid();
  h.jobs = (uint32_t)w->opt.jobs;
  h.memory_limit_bytes = w->applied_limit;
  Kiln__Worker__V1__ExternalCompiler ext = KILN__WORKER__V1__EXTERNAL_COMPILER__INIT;
  if (w->opt.external) {
    ext.path = (char *)w->opt.external;
    ext.args = (char *)w->opt.external_args;
    ext.version = w->external_version ? w->external_version : "";
    h.external = &ext;
  }
  Kiln__Worker__V1__WorkerEvent ev = KILN__WORKER__V1__WORKER_EVENT__INIT;
  ev.kind_case = KILN__WORKER__V1__WORKER_EVENT__KIND_HELLO;
  ev.hello = &h;
  send_event(&ev);
}

int main(int argc, char **argv) {
  /* kilnd starts built-in workers with LD_BIND_NOW=1 (workers.c: worker_env), so
   * every symbol is bound here, once, and not again in each forked back half. The
   * tools this worker runs (ptxas, ld.lld, an external compiler) start without it,
   * whatever kilnd had. */
  unsetenv("LD_BIND_NOW");
  /* kilnd gone: a write to stdout must fail with EPIPE, not kill us silently. */
  signal(SIGPIPE, SIG_IGN);
  pid_t parent = getppid();
  prctl(PR_SET_PDEATHSIG, SIGKILL);
  if (getppid() != parent) return EXIT_PEER; /* kilnd died before the line above */

  worker_t w;
  memset(&w, 0, sizeof w);
  if (parse_options(argc, argv, &w.opt) != 0) {
    kiln_config_deinit(&option_table, &w.opt);
    return EXIT_SETUP;
  }
  if (w.opt.help || w.opt.version) {
    int code = 0;
    if (w.opt.help) {
      usage(stdout);
    } else {
      code = print_version(&w.opt);
    }
    kiln_config_deinit(&option_table, &w.opt);
    return code;
  }
  kiln_log_configure(w.opt.log_level, STDERR_FILENO);
  kiln_status_t st = apply_memory_limit(&w);
  if (!st) st = worker_scratch_setup(&w);
  if (!st && w.opt.external) {
    st = worker_external_setup(&w);
  } else if (!st) {
    st = kiln_compiler_context_create(&w.context);
    if (!st) kiln_compiler_context_set_jobs(w.context, (size_t)w.opt.jobs);
    /* Tensors over the limit are refused by name before the pipeline meets it:
     * the configured limit (under ASan the applied one also holds the shadow). */
    if (!st) kiln_compiler_context_set_memory_limit(w.context, w.opt.memory_limit);
  }
  int code = 0;
  if (st) {
    kiln_log_status(KILN_LOG_ERROR, "worker_setup_failed", st, "pid=%ld", (long)getpid());
    kiln_status_free(st);
    code = EXIT_SETUP;
  } else {
    kiln_log(KILN_LOG_DEBUG, "worker_ready", "pid=%ld jobs=%" PRId64 " memory_limit=%" PRIu64 " external=%s",
             (long)getpid(), w.opt.jobs, w.applied_limit, w.opt.external ? "yes" : "no");
    send_hello(&w);
    Kiln__Worker__V1__WorkerRequest *req;
    while ((req = read_request()) != NULL) {
      bool compile = req->kind_case == KILN__WORKER__V1__WORKER_REQUEST__KIND_COMPILE && req->compile &&
                     req->compile->task_id != 0;
      if (!compile) {
        kiln_log(KILN_LOG_ERROR, "worker_exit", "reason=\"unexpected request\" kind=%d", (int)req->kind_case);
        protobuf_c_message_free_unpacked(&req->base, NULL);
        code = EXIT_PEER;
        break;
      }
      compile_task(&w, req->compile);
      protobuf_c_message_free_unpacked(&req->base, NULL);
    }
  }
  kiln_compiler_context_destroy(w.context);
  worker_external_cleanup(&w);
  worker_scratch_cleanup(&w);
  kiln_config_deinit(&option_table, &w.opt);
  return code;
}
