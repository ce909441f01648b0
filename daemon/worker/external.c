/* kiln-worker's external mode (--external): runs an iree-compile-compatible
 * executable once per target. The argument template (ExternalCompiler in
 * worker.proto) is expanded per target; the source is written into a private
 * task folder in the worker's scratch directory (scratch.c: <scratch>/task-N),
 * the compiler runs there as a child (stdin /dev/null, stdout discarded, stderr
 * captured, killed with the worker through PR_SET_PDEATHSIG, stopped a little
 * before the task timeout), and the VMFB it wrote is read back and sent. */
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
#include "base/file.h"
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

/* What is kept of an external compiler's stderr for the failure message. */
#define MAX_STDERR_BYTES (32 * 1024)

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
static KILN_MUST_USE kiln_status_t template_expand(const char *tmpl, const vars_t *vars, strv_t *out) {
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

typedef struct run_result_s {
  bool started;   /* exec worked */
  int exec_errno; /* why it did not */
  bool timed_out;
  int wstatus;
  kiln_buf_t err; /* stderr, first MAX_STDERR_BYTES */
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
  bool mlir =
      (len > 5 && !strcmp(b.data + len - 5, ".mlir")) || (len > 7 && !strcmp(b.data + len - 7, ".mlirbc"));
  if (!mlir) kiln_buf_append_str(&b, ".mlir");
  return kiln_buf_take(&b);
}

/* Compiles one target with the external compiler; sends its TargetDone/Failed. */
static void external_target(worker_t *w, const Kiln__Worker__V1__CompileTask *task, const char *dir,
                            const char *input, const char *target_name, const kiln_target_t *t,
                            int64_t deadline_ns) {
  worker_send_progress(task->task_id, target_name, "compile", 0, 1);
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
    worker_send_failed(task->task_id, target_name, kiln_status_code(st), kiln_status_message(st));
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
    kiln_buf_appendf(&msg, "the external compiler %s failed on %s (exit status %d)", w->opt.external, t->id,
                     WIFEXITED(r.wstatus) ? WEXITSTATUS(r.wstatus) : -1);
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
    st = kiln_file_read(out_path.data, MAX_FRAME_BYTES, &vmfb);
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
    worker_send_done(task->task_id, target_name, vmfb.data, vmfb.len, worker_elapsed_ms_since(start));
  } else {
    worker_send_failed(task->task_id, target_name, code, msg.data);
  }
  kiln_buf_deinit(&out_path);
  kiln_buf_deinit(&vmfb);
  kiln_buf_deinit(&msg);
  kiln_buf_deinit(&r.err);
  strv_free(&argv);
  kiln_buf_deinit(&output);
}

/* What `path --version` prints, whitespace collapsed to single spaces and cut at
 * 256 bytes, for the identity (empty when it printed nothing). iree-compile's
 * version is on its second line, so the whole text is kept, not the first line. */
char *worker_external_version(const char *path) {
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

kiln_status_t worker_external_setup(worker_t *w) {
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
  w->external_version = worker_external_version(w->external_path);
  return NULL;
}

void worker_external_task(worker_t *w, const Kiln__Worker__V1__CompileTask *task, const char *const *names,
                          const kiln_target_t *const *targets, size_t n, int64_t start_ns) {
  kiln_buf_t dir;
  kiln_buf_init(&dir);
  kiln_buf_appendf(&dir, "%s/task-%" PRIu64, w->scratch, task->task_id);
  char *input = input_file_name(task->source_name);
  kiln_buf_t in_path;
  kiln_buf_init(&in_path);
  kiln_buf_appendf(&in_path, "%s/%s", dir.data, input);
  kiln_status_t st = NULL;
  if (mkdir(dir.data, 0700) != 0 && errno != EEXIST) st = KILN_STATUS_ERRNO(errno, "creating %s", dir.data);
  if (!st) st = kiln_file_write(in_path.data, task->source.data, task->source.len, 0600);
  int64_t deadline = 0;
  if (task->timeout_ms) {
    /* Stop the compiler a little before kilnd kills this worker, so the target
     * fails with a message that names the compiler. */
    int64_t budget = (int64_t)task->timeout_ms * 1000000;
    int64_t margin = budget / 10 < 1000000000 ? budget / 10 : 1000000000;
    deadline = start_ns + budget - margin;
  }
  for (size_t i = 0; i < n; i++) {
    if (st) {
      worker_send_failed(task->task_id, names[i], kiln_status_code(st), kiln_status_message(st));
    } else {
      external_target(w, task, dir.data, input, names[i], targets[i], deadline);
    }
  }
  kiln_status_free(st);
  kiln_status_free(kiln_file_tree_remove(dir.data));
  kiln_buf_deinit(&in_path);
  kiln_free(input);
  kiln_buf_deinit(&dir);
}

void worker_external_cleanup(worker_t *w) {
  kiln_free(w->external_path);
  kiln_free(w->external_version);
}
