/* kiln-worker: one compile process of kilnd's worker pool (daemon/workers.c).
 *
 *   kiln-worker [--jobs N] [--memory-limit BYTES] [--log-level L]
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
 * context is created in this mode. Scratch directories are
 * $TMPDIR/kiln-worker-<pid>; a worker that is killed cannot remove its own, so
 * each new worker removes those of workers that are no longer alive.
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

#define EXIT_PEER 1
#define EXIT_SETUP 2

/* worker.proto: a frame longer than this is a protocol violation. */
#define MAX_FRAME_BYTES (1u << 30)
#define MAX_TARGETS 64
/* What is kept of an external compiler's stderr for the failure message. */
#define MAX_STDERR_BYTES (32 * 1024)
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

typedef struct options_s {
  size_t jobs;
  uint64_t memory_limit;
  const char *external;
  const char *external_args;
  bool test_hooks;
  bool version; /* --version: print the compiler identity and exit */
  kiln_log_level_t log_level;
} options_t;

typedef struct worker_s {
  options_t opt;
  kiln_compiler_context_t *context; /* built-in mode */
  char *external_path;              /* external mode: absolute, or a bare name for PATH */
  char *external_version;
  char *scratch;                    /* external mode: $TMPDIR/kiln-worker-<pid> */
  uint64_t applied_limit;
} worker_t;

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
  uint32_t len = (uint32_t)hdr[0] | (uint32_t)hdr[1] << 8 | (uint32_t)hdr[2] << 16 |
                 (uint32_t)hdr[3] << 24;
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

static void send_progress(uint64_t task, const char *target, const char *stage, uint32_t index,
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

static void send_failed(uint64_t task, const char *target, kiln_status_code_t code,
                        const char *message) {
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

static void send_done(uint64_t task, const char *target, const void *vmfb, size_t len,
                      int64_t compile_ms) {
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

static int64_t elapsed_ms_since(int64_t start_ns) {
  return (kiln_time_monotonic_ns() - start_ns) / 1000000;
}

/* ---- External compiler: the argument template ------------------------------------ */

typedef struct vars_s {
  const char *input, *output, *device, *backend, *target_flag, *chip, *target;
  char *const *flags;
  size_t n_flags;
} vars_t;

typedef struct strv_s {
  char **v;
  size_t n, cap;
} strv_t;

static void strv_push(strv_t *s, char *owned) {
  if (s->n + 2 > s->cap) {
    s->cap = s->cap ? s->cap * 2 : 16;
    s->v = kiln_realloc(s->v, s->cap * sizeof *s->v);
  }
  s->v[s->n++] = owned;
  s->v[s->n] = NULL;
}

static void strv_free(strv_t *s) {
  for (size_t i = 0; i < s->n; i++) kiln_free(s->v[i]);
  kiln_free(s->v);
  memset(s, 0, sizeof *s);
}

/* The value of placeholder `name` (length `len`); NULL when unknown. {flags} is
 * joined by spaces into `scratch`. */
static const char *var_value(const vars_t *vars, const char *name, size_t len, kiln_buf_t *scratch) {
#define IS(lit) (len == sizeof(lit) - 1 && memcmp(name, lit, len) == 0)
  if (IS("input")) return vars->input;
  if (IS("output")) return vars->output;
  if (IS("device")) return vars->device;
  if (IS("backend")) return vars->backend;
  if (IS("target_flag")) return vars->target_flag;
  if (IS("chip")) return vars->chip;
  if (IS("target")) return vars->target;
  if (IS("flags")) {
    kiln_buf_clear(scratch);
    for (size_t i = 0; i < vars->n_flags; i++) {
      if (i) kiln_buf_append_char(scratch, ' ');
      kiln_buf_append_str(scratch, vars->flags[i]);
    }
    return scratch->data;
  }
#undef IS
  return NULL;
}

/* Expands `tmpl` (worker.proto's ExternalCompiler) into `out`, one argument per
 * word. INVALID_ARGUMENT for an unknown placeholder or an unmatched brace. */
static kiln_status_t template_expand(const char *tmpl, const vars_t *vars, strv_t *out) {
  kiln_buf_t word, scratch;
  kiln_buf_init(&word);
  kiln_buf_init(&scratch);
  kiln_status_t st = NULL;
  const char *p = tmpl;
  while (*p && !st) {
    while (*p == ' ' || *p == '\t') p++;
    if (!*p) break;
    const char *start = p;
    while (*p && *p != ' ' && *p != '\t') p++;
    size_t wlen = (size_t)(p - start);
    if (wlen == 7 && memcmp(start, "{flags}", 7) == 0) {
      for (size_t i = 0; i < vars->n_flags; i++) strv_push(out, kiln_strdup(vars->flags[i]));
      continue;
    }
    kiln_buf_clear(&word);
    for (const char *c = start; c < p && !st; c++) {
      if (c[0] == '{' && c + 1 < p && c[1] == '{') {
        kiln_buf_append_char(&word, '{');
        c++;
      } else if (c[0] == '}' && c + 1 < p && c[1] == '}') {
        kiln_buf_append_char(&word, '}');
        c++;
      } else if (c[0] == '{') {
        const char *close = memchr(c, '}', (size_t)(p - c));
        const char *value = close ? var_value(vars, c + 1, (size_t)(close - c - 1), &scratch) : NULL;
        if (!value) {
          st = KILN_STATUS(KILN_STATUS_INVALID_ARGUMENT,
                           "external compiler arguments: '%.*s' is not a placeholder (known: {input} "
                           "{output} {device} {backend} {target_flag} {chip} {target} {flags}; {{ and "
                           "}} for braces)",
                           (int)(close ? close - c + 1 : p - c), c);
          break;
        }
        kiln_buf_append_str(&word, value);
        c = close;
      } else if (c[0] == '}') {
        st = KILN_STATUS(KILN_STATUS_INVALID_ARGUMENT,
                         "external compiler arguments: unmatched '}' in '%.*s' (write }} for a brace)",
                         (int)wlen, start);
      } else {
        kiln_buf_append_char(&word, c[0]);
      }
    }
    if (!st && word.len) strv_push(out, kiln_buf_take(&word));
  }
  kiln_buf_deinit(&word);
  kiln_buf_deinit(&scratch);
  return st;
}

/* "iree-cuda-target" -> "cuda", "iree-llvmcpu-target-cpu" -> "llvmcpu". */
static void backend_word(const kiln_target_t *t, char *out, size_t size) {
  const char *p = t->chip_flag;
  if (!strncmp(p, "iree-", 5)) p += 5;
  const char *end = strstr(p, "-target");
  size_t n = end ? (size_t)(end - p) : strlen(p);
  snprintf(out, size, "%.*s", (int)n, p);
}

/* ---- External compiler: files and the child -------------------------------------- */

static int remove_tree(const char *path) {
  struct stat sb;
  if (lstat(path, &sb) != 0) return errno == ENOENT ? 0 : -1;
  if (S_ISDIR(sb.st_mode)) {
    DIR *d = opendir(path);
    if (d) {
      struct dirent *e;
      kiln_buf_t child;
      kiln_buf_init(&child);
      while ((e = readdir(d)) != NULL) {
        if (!strcmp(e->d_name, ".") || !strcmp(e->d_name, "..")) continue;
        kiln_buf_clear(&child);
        kiln_buf_appendf(&child, "%s/%s", path, e->d_name);
        remove_tree(child.data);
      }
      kiln_buf_deinit(&child);
      closedir(d);
    }
    return rmdir(path);
  }
  return unlink(path);
}

static const char *tmp_base(void) {
  const char *t = getenv("TMPDIR");
  return t && *t ? t : "/tmp";
}

/* Removes kiln-worker-<pid> directories of workers no longer alive (killed ones
 * cannot clean up after themselves). */
static void remove_stale_scratch(void) {
  DIR *d = opendir(tmp_base());
  if (!d) return;
  struct dirent *e;
  kiln_buf_t path;
  kiln_buf_init(&path);
  while ((e = readdir(d)) != NULL) {
    if (strncmp(e->d_name, "kiln-worker-", 12) != 0) continue;
    char *end = NULL;
    long pid = strtol(e->d_name + 12, &end, 10);
    if (pid <= 0 || *end || pid == (long)getpid()) continue;
    if (kill((pid_t)pid, 0) == 0 || errno != ESRCH) continue;
    kiln_buf_clear(&path);
    kiln_buf_appendf(&path, "%s/%s", tmp_base(), e->d_name);
    remove_tree(path.data);
  }
  kiln_buf_deinit(&path);
  closedir(d);
}

static kiln_status_t write_file(const char *path, const void *data, size_t len) {
  int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
  if (fd < 0) return KILN_STATUS_ERRNO(errno, "creating %s", path);
  const uint8_t *p = data;
  size_t left = len;
  while (left > 0) {
    ssize_t n = write(fd, p, left);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) {
      int err = errno;
      close(fd);
      return KILN_STATUS_ERRNO(err, "writing %s", path);
    }
    p += n;
    left -= (size_t)n;
  }
  if (close(fd) != 0) return KILN_STATUS_ERRNO(errno, "writing %s", path);
  return NULL;
}

static kiln_status_t read_file(const char *path, kiln_buf_t *out) {
  int fd = open(path, O_RDONLY | O_CLOEXEC);
  if (fd < 0) return KILN_STATUS_ERRNO(errno, "opening %s", path);
  char chunk[65536];
  for (;;) {
    ssize_t n = read(fd, chunk, sizeof chunk);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) {
      int err = errno;
      close(fd);
      return KILN_STATUS_ERRNO(err, "reading %s", path);
    }
    if (n == 0) break;
    if (out->len + (size_t)n > MAX_FRAME_BYTES) {
      close(fd);
      return KILN_STATUS(KILN_STATUS_RESOURCE_EXHAUSTED, "%s is over 1 GiB", path);
    }
    kiln_buf_append(out, chunk, (size_t)n);
  }
  close(fd);
  return NULL;
}

typedef struct run_result_s {
  bool started;     /* exec worked */
  int exec_errno;   /* why it did not */
  bool timed_out;
  int wstatus;
  kiln_buf_t err;   /* stderr, first MAX_STDERR_BYTES */
  bool err_truncated;
} run_result_t;

/* Runs argv[0] (PATH searched for a bare name) in `cwd`, capturing stderr, until it
 * exits or `deadline_ns` (0: none) passes, when it is killed. */
static void run_child(char *const *argv, const char *cwd, int64_t deadline_ns, run_result_t *r) {
  memset(r, 0, sizeof *r);
  kiln_buf_init(&r->err);
  int errp[2], execp[2];
  if (pipe2(errp, O_CLOEXEC) != 0) {
    r->exec_errno = errno;
    return;
  }
  if (pipe2(execp, O_CLOEXEC) != 0) {
    r->exec_errno = errno;
    close(errp[0]);
    close(errp[1]);
    return;
  }
  pid_t parent = getpid();
  pid_t pid = fork();
  if (pid < 0) {
    r->exec_errno = errno;
    close(errp[0]);
    close(errp[1]);
    close(execp[0]);
    close(execp[1]);
    return;
  }
  if (pid == 0) {
    /* Only async-signal-safe calls from here to exec. */
    prctl(PR_SET_PDEATHSIG, SIGKILL);
    if (getppid() != parent) _exit(127);
    signal(SIGPIPE, SIG_DFL);
    int devnull = open("/dev/null", O_RDWR);
    if (devnull < 0 || dup2(devnull, STDIN_FILENO) < 0 || dup2(devnull, STDOUT_FILENO) < 0 ||
        dup2(errp[1], STDERR_FILENO) < 0 || (cwd && chdir(cwd) != 0)) {
      int err = errno;
      ssize_t ignored = write(execp[1], &err, sizeof err);
      (void)ignored;
      _exit(127);
    }
    execvp(argv[0], argv);
    int err = errno;
    ssize_t ignored = write(execp[1], &err, sizeof err);
    (void)ignored;
    _exit(127);
  }
  close(errp[1]);
  close(execp[1]);
  int err = 0;
  ssize_t n;
  while ((n = read(execp[0], &err, sizeof err)) < 0 && errno == EINTR) {
  }
  close(execp[0]);
  if (n == (ssize_t)sizeof err) {
    r->exec_errno = err;
  } else {
    r->started = true;
  }
  bool open_err = true;
  while (open_err) {
    int timeout = -1;
    if (deadline_ns) {
      int64_t left = deadline_ns - kiln_time_monotonic_ns();
      if (left <= 0) {
        r->timed_out = true;
        break;
      }
      timeout = (int)(left / 1000000) + 1;
    }
    struct pollfd pfd = {.fd = errp[0], .events = POLLIN};
    int pr = poll(&pfd, 1, timeout);
    if (pr < 0 && errno == EINTR) continue;
    if (pr < 0) break;
    if (pr == 0) continue; /* the deadline check above decides */
    char chunk[4096];
    ssize_t got = read(errp[0], chunk, sizeof chunk);
    if (got < 0 && errno == EINTR) continue;
    if (got <= 0) {
      open_err = false;
      break;
    }
    size_t room = MAX_STDERR_BYTES - r->err.len;
    if ((size_t)got > room) r->err_truncated = true;
    kiln_buf_append(&r->err, chunk, (size_t)got < room ? (size_t)got : room);
  }
  close(errp[0]);
  if (r->timed_out) kill(pid, SIGKILL);
  /* stderr closed does not mean it exited (it may have closed fd 2): the deadline
   * still holds while waiting. */
  for (;;) {
    pid_t w = waitpid(pid, &r->wstatus, r->timed_out ? 0 : WNOHANG);
    if (w == pid) break;
    if (w < 0 && errno != EINTR) break;
    if (w < 0 || r->timed_out) continue;
    if (deadline_ns && kiln_time_monotonic_ns() >= deadline_ns) {
      r->timed_out = true;
      kill(pid, SIGKILL);
      continue;
    }
    struct timespec ts = {0, 10 * 1000 * 1000};
    nanosleep(&ts, NULL);
  }
}

static void trim_trailing_space(kiln_buf_t *b) {
  while (b->len && (b->data[b->len - 1] == '\n' || b->data[b->len - 1] == ' ' ||
                    b->data[b->len - 1] == '\r' || b->data[b->len - 1] == '\t')) {
    b->data[--b->len] = '\0';
  }
}

/* True when `text` holds "<name>:<digits>:" (a diagnostic about the input). */
static bool mentions_location(const char *text, const char *name) {
  size_t n = strlen(name);
  for (const char *p = strstr(text, name); p; p = strstr(p + 1, name)) {
    const char *q = p + n;
    if (*q != ':' || q[1] < '0' || q[1] > '9') continue;
    q++;
    while (*q >= '0' && *q <= '9') q++;
    if (*q == ':') return true;
  }
  return false;
}

/* "model.mlir" from source_name's last component, made safe as a file name. */
static char *input_file_name(const char *source_name) {
  const char *base = source_name ? strrchr(source_name, '/') : NULL;
  base = base ? base + 1 : source_name;
  kiln_buf_t b;
  kiln_buf_init(&b);
  for (const char *p = base; p && *p && b.len < 100; p++) {
    char c = *p;
    bool ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '.' ||
              c == '_' || c == '-';
    kiln_buf_append_char(&b, ok ? c : '_');
  }
  if (b.len == 0 || b.data[0] == '.') {
    kiln_buf_clear(&b);
    kiln_buf_append_str(&b, "source");
  }
  size_t len = b.len;
  bool mlir = (len > 5 && !strcmp(b.data + len - 5, ".mlir")) ||
              (len > 7 && !strcmp(b.data + len - 7, ".mlirbc"));
  if (!mlir) kiln_buf_append_str(&b, ".mlir");
  return kiln_buf_take(&b);
}

/* Compiles one target with the external compiler; sends its TargetDone/Failed. */
static void external_target(worker_t *w, const Kiln__Worker__V1__CompileTask *task, const char *dir,
                            const char *input, const char *target_name, const kiln_target_t *t,
                            int64_t deadline_ns) {
  send_progress(task->task_id, target_name, "compile", 0, 1);
  int64_t start = kiln_time_monotonic_ns();
  char backend[32];
  backend_word(t, backend, sizeof backend);
  kiln_buf_t output;
  kiln_buf_init(&output);
  kiln_buf_appendf(&output, "%s.vmfb", t->id);
  vars_t vars = {.input = input,
                 .output = output.data,
                 .device = t->hal_device,
                 .backend = backend,
                 .target_flag = t->chip_flag,
                 .chip = t->chip,
                 .target = t->id,
                 .flags = task->flags,
                 .n_flags = task->n_flags};
  strv_t argv = {0};
  strv_push(&argv, kiln_strdup(w->external_path));
  kiln_status_t st = template_expand(w->opt.external_args, &vars, &argv);
  if (st) {
    send_failed(task->task_id, target_name, kiln_status_code(st), kiln_status_message(st));
    kiln_status_free(st);
    strv_free(&argv);
    kiln_buf_deinit(&output);
    return;
  }
  run_result_t r;
  run_child(argv.v, dir, deadline_ns, &r);
  trim_trailing_space(&r.err);
  if (r.err_truncated) kiln_buf_append_str(&r.err, "\n[stderr truncated]");
  kiln_buf_t msg;
  kiln_buf_init(&msg);
  kiln_status_code_t code = KILN_STATUS_OK;
  if (!r.started) {
    code = KILN_STATUS_FAILED_PRECONDITION;
    kiln_buf_appendf(&msg,
                     "cannot run the external compiler %s: %s; check kilnd's external-compiler "
                     "setting",
                     w->opt.external, strerror(r.exec_errno));
  } else if (r.timed_out) {
    code = KILN_STATUS_DEADLINE_EXCEEDED;
    kiln_buf_appendf(&msg,
                     "the external compiler %s ran past the task timeout of %" PRIu64
                     " ms on %s and was stopped; raise kilnd's worker-timeout for models this big",
                     w->opt.external, task->timeout_ms, t->id);
  } else if (WIFSIGNALED(r.wstatus)) {
    code = KILN_STATUS_INTERNAL;
    kiln_buf_appendf(&msg, "the external compiler %s crashed (signal %d, %s) on %s", w->opt.external,
                     WTERMSIG(r.wstatus), strsignal(WTERMSIG(r.wstatus)), t->id);
  } else if (!WIFEXITED(r.wstatus) || WEXITSTATUS(r.wstatus) != 0) {
    code = mentions_location(r.err.data, input) ? KILN_STATUS_INVALID_ARGUMENT : KILN_STATUS_INTERNAL;
    kiln_buf_appendf(&msg, "the external compiler %s failed on %s (exit status %d)", w->opt.external,
                     t->id, WIFEXITED(r.wstatus) ? WEXITSTATUS(r.wstatus) : -1);
  }
  if (code != KILN_STATUS_OK && r.err.len) kiln_buf_appendf(&msg, ":\n%s", r.err.data);
  if (code == KILN_STATUS_INTERNAL) {
    /* Not the model's fault: show what was run, to check against external-args. */
    kiln_buf_append_str(&msg, "\ncommand:");
    for (size_t i = 0; i < argv.n; i++) kiln_buf_appendf(&msg, " %s", argv.v[i]);
  }
  kiln_buf_t vmfb;
  kiln_buf_init(&vmfb);
  kiln_buf_t out_path;
  kiln_buf_init(&out_path);
  kiln_buf_appendf(&out_path, "%s/%s", dir, output.data);
  if (code == KILN_STATUS_OK) {
    st = read_file(out_path.data, &vmfb);
    if (st || vmfb.len == 0) {
      code = KILN_STATUS_INTERNAL;
      kiln_buf_appendf(&msg, "the external compiler %s exited 0 but wrote no %s for %s (%s)%s%s",
                       w->opt.external, output.data, t->id,
                       st ? kiln_status_message(st) : "the file is empty", r.err.len ? ":\n" : "",
                       r.err.data);
      kiln_status_free(st);
    }
  }
  unlink(out_path.data);
  if (code == KILN_STATUS_OK) {
    send_done(task->task_id, target_name, vmfb.data, vmfb.len, elapsed_ms_since(start));
  } else {
    send_failed(task->task_id, target_name, code, msg.data);
  }
  kiln_buf_deinit(&out_path);
  kiln_buf_deinit(&vmfb);
  kiln_buf_deinit(&msg);
  kiln_buf_deinit(&r.err);
  strv_free(&argv);
  kiln_buf_deinit(&output);
}

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
    case HOOK_NONE:
      return true;
    case HOOK_CRASH:
      kiln_log(KILN_LOG_WARN, "test_hook", "hook=crash task=%" PRIu64, task->task_id);
      abort();
    case HOOK_HANG:
      kiln_log(KILN_LOG_WARN, "test_hook", "hook=hang task=%" PRIu64, task->task_id);
      for (;;) pause();
    case HOOK_OOM:
      if (!w->applied_limit) {
        for (size_t i = 0; i < task->n_targets; i++) {
          send_failed(task->task_id, task->targets[i], KILN_STATUS_FAILED_PRECONDITION,
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
  send_progress(id, r->names[i], "serialize", 3, 4);
  kiln_buf_t vmfb;
  kiln_buf_init(&vmfb);
  kiln_status_t st = kiln_compiler_artifact_write(out, i, &r->ao, &vmfb);
  if (st && out->targets[i].status) {
    /* The target's own failure, not the packaging's consequence of it. */
    kiln_status_free(st);
    send_failed(id, r->names[i], kiln_status_code(out->targets[i].status),
                kiln_status_message(out->targets[i].status));
  } else if (st) {
    send_failed(id, r->names[i], kiln_status_code(st), kiln_status_message(st));
    kiln_status_free(st);
  } else {
    int64_t ms = out->front_ms + out->targets[i].backend_ms + elapsed_ms_since(t0);
    send_done(id, r->names[i], vmfb.data, vmfb.len, ms);
  }
  kiln_buf_deinit(&vmfb);
}

/* Stage boundaries of the compile (optimize, codegen): Progress for every target
 * not yet sent. */
static void send_stage(void *user, const char *stage, uint32_t index) {
  ready_t *r = user;
  for (size_t i = 0; i < r->n; i++) {
    if (!r->sent[i]) send_progress(r->task->task_id, r->names[i], stage, index, 4);
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
      send_failed(task->task_id, task->targets[i], kiln_status_code(st), kiln_status_message(st));
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
      for (size_t i = 0; i < n; i++) send_failed(task->task_id, names[i], KILN_STATUS_DATA_LOSS, m.data);
      kiln_buf_deinit(&m);
    }
  }

  if (digest_ok && n > 0) {
    const bool external = w->opt.external != NULL;
    for (size_t i = 0; i < n && !external; i++) send_progress(task->task_id, names[i], "parse", 0, 4);
    bool go = !w->opt.test_hooks || run_hook(w, task, find_hook(task->source.data, task->source.len));
    if (go && external) {
      kiln_buf_t dir;
      kiln_buf_init(&dir);
      kiln_buf_appendf(&dir, "%s/task-%" PRIu64, w->scratch, task->task_id);
      char *input = input_file_name(task->source_name);
      kiln_buf_t in_path;
      kiln_buf_init(&in_path);
      kiln_buf_appendf(&in_path, "%s/%s", dir.data, input);
      kiln_status_t st = NULL;
      if (mkdir(dir.data, 0700) != 0 && errno != EEXIST) st = KILN_STATUS_ERRNO(errno, "creating %s", dir.data);
      if (!st) st = write_file(in_path.data, task->source.data, task->source.len);
      int64_t deadline = 0;
      if (task->timeout_ms) {
        /* Stop the compiler a little before kilnd kills this worker, so the target
         * fails with a message that names the compiler. */
        int64_t budget = (int64_t)task->timeout_ms * 1000000;
        int64_t margin = budget / 10 < 1000000000 ? budget / 10 : 1000000000;
        deadline = start + budget - margin;
      }
      for (size_t i = 0; i < n; i++) {
        if (st) {
          send_failed(task->task_id, names[i], kiln_status_code(st), kiln_status_message(st));
        } else {
          external_target(w, task, dir.data, input, names[i], targets[i], deadline);
        }
      }
      kiln_status_free(st);
      remove_tree(dir.data);
      kiln_buf_deinit(&in_path);
      kiln_free(input);
      kiln_buf_deinit(&dir);
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
      kiln_compiler_context_set_jobs(w->context, task->jobs && task->jobs <= KILN_COMPILER_MAX_JOBS ? task->jobs
                                                                                                : w->opt.jobs);
      kiln_compiler_output_t out;
      kiln_status_t st = kiln_compiler_compile(w->context, task->source.data, task->source.len, name,
                                               targets, n, &out);
      kiln_compiler_context_on_target(w->context, NULL, NULL);
      kiln_compiler_context_on_stage(w->context, NULL, NULL);
      if (st) {
        /* Bad IR (MLIR's diagnostics with file:line:col): every target fails alike. */
        for (size_t i = 0; i < n; i++) {
          send_failed(task->task_id, names[i], kiln_status_code(st), kiln_status_message(st));
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
  int64_t ms = elapsed_ms_since(start);
  send_finished(task->task_id, ms);
  kiln_log(KILN_LOG_DEBUG, "task_done", "task=%" PRIu64 " ms=%" PRId64, task->task_id, ms);
}

/* ---- Start-up ------------------------------------------------------------------- */

static void usage(void) {
  fputs("usage: kiln-worker [--jobs N] [--memory-limit BYTES] [--log-level L]\n"
        "                   [--external COMPILER [--external-args TEMPLATE]] [--test-hooks]\n"
        "       kiln-worker [--external COMPILER] --version\n"
        "A compile worker of kilnd: reads kiln.worker.v1 tasks on stdin, answers on stdout.\n"
        "It is started by kilnd, not by hand. --version prints the compiler it runs.\n",
        stderr);
}

static bool parse_u64(const char *s, uint64_t *out) {
  if (!s || !*s || *s == '-') return false;
  char *end = NULL;
  errno = 0;
  unsigned long long v = strtoull(s, &end, 10);
  if (errno || *end) return false;
  *out = v;
  return true;
}

static int parse_options(int argc, char **argv, options_t *o) {
  memset(o, 0, sizeof *o);
  o->jobs = 1;
  o->log_level = KILN_LOG_INFO;
  for (int i = 1; i < argc; i++) {
    const char *a = argv[i];
    const char *v = i + 1 < argc ? argv[i + 1] : NULL;
    uint64_t n = 0;
    if (!strcmp(a, "--test-hooks")) {
      o->test_hooks = true;
      continue;
    }
    if (!strcmp(a, "--version")) {
      o->version = true;
      continue;
    }
    if (!strcmp(a, "--help")) {
      usage();
      exit(0);
    }
    if (!v) {
      fprintf(stderr, "kiln-worker: unknown argument or missing value: %s\n", a);
      return -1;
    }
    i++;
    if (!strcmp(a, "--jobs") && parse_u64(v, &n) && n >= 1 && n <= KILN_COMPILER_MAX_JOBS) {
      o->jobs = (size_t)n;
    } else if (!strcmp(a, "--memory-limit") && parse_u64(v, &n)) {
      o->memory_limit = n;
    } else if (!strcmp(a, "--log-level") && kiln_log_level_parse(v, &o->log_level) == 0) {
    } else if (!strcmp(a, "--external") && *v) {
      o->external = v;
    } else if (!strcmp(a, "--external-args")) {
      o->external_args = v;
    } else {
      fprintf(stderr, "kiln-worker: bad argument: %s %s\n", a, v);
      return -1;
    }
  }
  if (!o->external_args || !*o->external_args) o->external_args = DEFAULT_EXTERNAL_ARGS;
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

static kiln_status_t apply_memory_limit(worker_t *w) {
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

/* What `path --version` prints, whitespace collapsed to single spaces and cut at
 * 256 bytes, for the identity (empty when it printed nothing). iree-compile's
 * version is on its second line, so the whole text is kept, not the first line. */
static char *external_version(const char *path) {
  int outp[2];
  if (pipe2(outp, O_CLOEXEC) != 0) return kiln_strdup("");
  pid_t pid = fork();
  if (pid == 0) {
    prctl(PR_SET_PDEATHSIG, SIGKILL);
    int devnull = open("/dev/null", O_RDWR);
    if (devnull >= 0) {
      dup2(devnull, STDIN_FILENO);
      dup2(devnull, STDERR_FILENO);
    }
    dup2(outp[1], STDOUT_FILENO);
    execlp(path, path, "--version", (char *)NULL);
    _exit(127);
  }
  close(outp[1]);
  kiln_buf_t out;
  kiln_buf_init(&out);
  if (pid > 0) {
    int64_t deadline = kiln_time_monotonic_ns() + 10LL * 1000000000;
    for (;;) {
      int64_t left = deadline - kiln_time_monotonic_ns();
      struct pollfd pfd = {.fd = outp[0], .events = POLLIN};
      if (left <= 0 || poll(&pfd, 1, (int)(left / 1000000) + 1) <= 0) break;
      char chunk[1024];
      ssize_t got = read(outp[0], chunk, sizeof chunk);
      if (got <= 0 || out.len > 4096) break;
      kiln_buf_append(&out, chunk, (size_t)got);
    }
    kill(pid, SIGKILL);
    while (waitpid(pid, NULL, 0) < 0 && errno == EINTR) {
    }
  }
  close(outp[0]);
  kiln_buf_t text;
  kiln_buf_init(&text);
  bool space = false;
  for (size_t i = 0; i < out.len && text.len < 256; i++) {
    unsigned char c = (unsigned char)out.data[i];
    if (c == ' ' || c == '\t' || c == '\n' || c == '\r') {
      space = text.len > 0;
      continue;
    }
    if (c < 0x20) continue;
    if (space) kiln_buf_append_char(&text, ' ');
    space = false;
    kiln_buf_append_char(&text, (char)c);
  }
  kiln_buf_deinit(&out);
  return kiln_buf_take(&text);
}

static kiln_status_t setup_external(worker_t *w) {
  const char *path = w->opt.external;
  if (strchr(path, '/')) {
    char *abs = realpath(path, NULL);
    if (!abs) return KILN_STATUS_ERRNO(errno, "the external compiler %s", path);
    if (access(abs, X_OK) != 0) {
      kiln_status_t st = KILN_STATUS_ERRNO(errno, "the external compiler %s is not executable", path);
      free(abs);
      return st;
    }
    w->external_path = kiln_strdup(abs);
    free(abs);
  } else {
    w->external_path = kiln_strdup(path); /* found on PATH by execvp */
  }
  /* The template is checked now so that a bad one stops the worker at start. */
  vars_t dummy = {"", "", "", "", "", "", "", NULL, 0};
  strv_t argv = {0};
  kiln_status_t st = template_expand(w->opt.external_args, &dummy, &argv);
  strv_free(&argv);
  if (st) return st;
  w->external_version = external_version(w->external_path);
  remove_stale_scratch();
  kiln_buf_t dir;
  kiln_buf_init(&dir);
  kiln_buf_appendf(&dir, "%s/kiln-worker-%ld", tmp_base(), (long)getpid());
  remove_tree(dir.data);
  if (mkdir(dir.data, 0700) != 0) {
    st = KILN_STATUS_ERRNO(errno, "creating the scratch directory %s", dir.data);
    kiln_buf_deinit(&dir);
    return st;
  }
  w->scratch = kiln_buf_take(&dir);
  return NULL;
}

/* --version: the compiler identity the Hello would carry, in the one-line form the
 * design block shows (kilnd --version parses it). Exit status for main. */
static int print_version(const options_t *o) {
  if (o->external) {
    char *v = external_version(o->external);
    printf("kiln-worker %s (compiler external %s (%s))\n", KILN_VERSION, o->external,
           *v ? v : "no --version");
    kiln_free(v);
  } else {
    kiln_compiler_identity_t id;
    kiln_compiler_identity_get(&id);
    printf("kiln-worker %s (compiler %s %s, LLVM %s)\n", KILN_VERSION, id.name, id.version,
           id.llvm_version);
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
  /* kilnd gone: a write to stdout must fail with EPIPE, not kill us silently. */
  signal(SIGPIPE, SIG_IGN);
  pid_t parent = getppid();
  prctl(PR_SET_PDEATHSIG, SIGKILL);
  if (getppid() != parent) return EXIT_PEER; /* kilnd died before the line above */

  worker_t w;
  memset(&w, 0, sizeof w);
  if (parse_options(argc, argv, &w.opt) != 0) {
    usage();
    return EXIT_SETUP;
  }
  if (w.opt.version) return print_version(&w.opt);
  kiln_log_configure(w.opt.log_level, STDERR_FILENO);
  kiln_status_t st = apply_memory_limit(&w);
  if (!st && w.opt.external) {
    st = setup_external(&w);
  } else if (!st) {
    st = kiln_compiler_context_create(&w.context);
    if (!st) kiln_compiler_context_set_jobs(w.context, w.opt.jobs);
    /* Tensors over the limit are refused by name before the pipeline meets it:
     * the configured limit (under ASan the applied one also holds the shadow). */
    if (!st) kiln_compiler_context_set_memory_limit(w.context, w.opt.memory_limit);
  }
  if (st) {
    kiln_log_status(KILN_LOG_ERROR, "worker_setup_failed", st, "pid=%ld", (long)getpid());
    kiln_status_free(st);
    return EXIT_SETUP;
  }
  kiln_log(KILN_LOG_DEBUG, "worker_ready", "pid=%ld jobs=%zu memory_limit=%" PRIu64 " external=%s",
           (long)getpid(), w.opt.jobs, w.applied_limit, w.opt.external ? "yes" : "no");
  send_hello(&w);

  Kiln__Worker__V1__WorkerRequest *req;
  while ((req = read_request()) != NULL) {
    if (req->kind_case != KILN__WORKER__V1__WORKER_REQUEST__KIND_COMPILE || !req->compile ||
        req->compile->task_id == 0) {
      kiln_log(KILN_LOG_ERROR, "worker_exit", "reason=\"unexpected request\" kind=%d", (int)req->kind_case);
      protobuf_c_message_free_unpacked(&req->base, NULL);
      return EXIT_PEER;
    }
    compile_task(&w, req->compile);
    protobuf_c_message_free_unpacked(&req->base, NULL);
  }
  kiln_compiler_context_destroy(w.context);
  if (w.scratch) remove_tree(w.scratch);
  kiln_free(w.scratch);
  kiln_free(w.external_path);
  kiln_free(w.external_version);
  return 0;
}
