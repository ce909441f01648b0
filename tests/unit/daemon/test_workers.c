/* Unit tests for daemon/workers: the compile worker pool on a real libuv loop with
 * real kiln-worker processes (KILN_WORKER_PATH) and, for external mode, the real
 * kilnc (KILN_KILNC_PATH).
 *
 * Covered: the compiler identity from the first Hello (the key string and, field
 * by field, the worker's name, version and LLVM/MLIR 22.x.y; "external" and the
 * external compiler's version; none before any Hello);
 * examples/mlp.mlir for sm_89 + arm5gen (STARTED, PROGRESS, two
 * TARGET_DONE with VMFB bytes "PK\3\4" ... "IREE" at 72, FINISHED last); bad IR
 * (INVALID_ARGUMENT with file:line:col); the test hooks: a crash (INTERNAL naming
 * the signal and the kept IR, worker replaced, next task compiles), a hang past
 * the task timeout (DEADLINE_EXCEEDED naming the limit, replaced), running out of
 * the memory limit (RESOURCE_EXHAUSTED, replaced); cancelling a running task
 * (CANCELLED); two workers running two tasks at once; closing with a task running
 * (no more events, the process is gone, every handle closed); external mode with
 * kilnc and the default template (the same VMFB bytes as the built-in compiler;
 * bad IR is INVALID_ARGUMENT with kilnc's diagnostics), the argument template
 * (each placeholder and the flags, through a stand-in compiler that echoes its
 * argv), the worker's LD_BIND_NOW=1 and its tools' environment without it
 * (through a stand-in that echoes it), an external compiler that hangs (stopped by the worker,
 * DEADLINE_EXCEEDED, the worker kept) or fails without diagnostics (INTERNAL); create's argument checks; a
 * worker that dies at once (respawned with backoff, the pool stays up); a worker that breaks the framing
 * (killed and replaced). Every test ends by closing the pool and checking that uv_loop_close succeeds, i.e.
 * that the pool closed every handle it opened.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <linux/fs.h>
#include <regex.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>
#include <uv.h>

#include "base/buf.h"
#include "base/file.h"
#include "base/status.h"
#include "base/time.h"
#include "compiler/identity.h"
#include "daemon/workers.h"
#include "tests/unit/support/testing.h"

#ifndef KILN_WORKER_PATH
#error "KILN_WORKER_PATH must name the kiln-worker executable"
#endif
#ifndef KILN_KILNC_PATH
#error "KILN_KILNC_PATH must name the kilnc executable"
#endif

#define WAIT_MS 30000
#define MLP     KILN_SOURCE_DIR "/examples/mlp.mlir"
#define BAD_IR  "func.func @f() -> i32 {\n  %0 = arith.constant 1 : i64\n  return %0 : i32\n}\n"

/* ---- Fixture: a loop, a temp dir, and every event the pool delivered ---------- */

typedef struct rec_s {
  uint64_t task;
  kilnd_task_event_kind_t kind;
  char *worker, *target, *stage, *message;
  int pid;
  kiln_status_code_t code;
  unsigned char *artifact;
  size_t artifact_len;
} rec_t;

typedef struct fixture_s {
  uv_loop_t loop;
  uv_timer_t tick; /* wakes the loop while waiting */
  kilnd_workers_t *pool;
  bool closed;
  rec_t *recs;
  size_t n_recs, cap_recs;
  size_t ready;
  char *tmp;
  char *saved_tmpdir; /* the runner's TMPDIR: the pool's is f->tmp */
} fixture_t;

static char *dup_or_null(const char *s) { return s ? strdup(s) : NULL; }

static void on_event(void *user, uint64_t task_id, const kilnd_task_event_t *ev) {
  fixture_t *f = user;
  if (ev->kind == KILND_TASK_WORKER_READY) {
    assert_int_equal(task_id, 0);
    f->ready++;
    return;
  }
  if (f->n_recs == f->cap_recs) {
    f->cap_recs = f->cap_recs ? 2 * f->cap_recs : 64;
    f->recs = realloc(f->recs, f->cap_recs * sizeof *f->recs);
    assert_non_null(f->recs);
  }
  rec_t *r = &f->recs[f->n_recs++];
  memset(r, 0, sizeof *r);
  r->task = task_id;
  r->kind = ev->kind;
  r->worker = dup_or_null(ev->worker);
  r->pid = ev->pid;
  r->target = dup_or_null(ev->target);
  r->stage = dup_or_null(ev->stage);
  r->message = dup_or_null(ev->message);
  r->code = ev->code;
  if (ev->artifact_len) {
    r->artifact = malloc(ev->artifact_len);
    assert_non_null(r->artifact);
    memcpy(r->artifact, ev->artifact, ev->artifact_len);
    r->artifact_len = ev->artifact_len;
  }
}

static void on_tick(uv_timer_t *t) { (void)t; }

static int setup(void **state) {
  fixture_t *f = calloc(1, sizeof *f);
  if (!f || uv_loop_init(&f->loop) != 0) return -1;
  uv_timer_init(&f->loop, &f->tick);
  uv_timer_start(&f->tick, on_tick, 10, 10);
  f->tmp = kiln_test_tmpdir("kiln-workers");
  if (!f->tmp) return -1;
  const char *t = getenv("TMPDIR");
  f->saved_tmpdir = t ? strdup(t) : NULL;
  setenv("TMPDIR", f->tmp, 1); /* the workers' scratch directories go here */
  *state = f;
  return 0;
}

static void on_closed(void *user) { ((fixture_t *)user)->closed = true; }

static void close_pool(fixture_t *f) {
  if (!f->pool) return;
  kilnd_workers_close(f->pool, on_closed, f);
  int64_t deadline = kiln_time_monotonic_ns() + (int64_t)WAIT_MS * 1000000;
  while (!f->closed && kiln_time_monotonic_ns() < deadline) uv_run(&f->loop, UV_RUN_ONCE);
  assert_true(f->closed);
  f->pool = NULL;
  f->closed = false;
}

static void clear_recs(fixture_t *f) {
  for (size_t i = 0; i < f->n_recs; i++) {
    rec_t *r = &f->recs[i];
    free(r->worker);
    free(r->target);
    free(r->stage);
    free(r->message);
    free(r->artifact);
  }
  f->n_recs = 0;
}

/* The runner's GLIBC_TUNABLES while a test changes it (restored by teardown, as
 * a failed assertion skips the rest of the test). */
static bool tunables_saved;
static char *saved_tunables;

static void tunables_save(void) {
  const char *v = getenv("GLIBC_TUNABLES");
  saved_tunables = v ? strdup(v) : NULL;
  tunables_saved = true;
}

static void tunables_restore(void) {
  if (!tunables_saved) return;
  if (saved_tunables)
    setenv("GLIBC_TUNABLES", saved_tunables, 1);
  else
    unsetenv("GLIBC_TUNABLES");
  free(saved_tunables);
  saved_tunables = NULL;
  tunables_saved = false;
}

/* The names in f->tmp that start with `prefix`, sorted, one per line. */
static char *names_with(const fixture_t *f, const char *prefix) {
  kiln_buf_t out;
  kiln_buf_init(&out);
  struct dirent **list = NULL;
  int n = scandir(f->tmp, &list, NULL, alphasort);
  for (int i = 0; i < n; i++) {
    if (!strncmp(list[i]->d_name, prefix, strlen(prefix))) kiln_buf_appendf(&out, "%s\n", list[i]->d_name);
    free(list[i]);
  }
  free(list);
  char *s = strdup(out.data);
  kiln_buf_deinit(&out);
  return s;
}

static void unstick(void);

static int teardown(void **state) {
  fixture_t *f = *state;
  unstick(); /* a test that ended early leaves nothing only root could remove */
  close_pool(f);
  /* Every worker's scratch directory is gone once the pool has closed, whatever
   * happened to the worker. */
  char *left = names_with(f, "kiln-worker-");
  bool clean = !*left;
  if (!clean) fprintf(stderr, "left in TMPDIR after close:\n%s", left);
  free(left);
  if (f->saved_tmpdir) {
    setenv("TMPDIR", f->saved_tmpdir, 1);
  } else {
    unsetenv("TMPDIR");
  }
  free(f->saved_tmpdir);
  tunables_restore();
  uv_close((uv_handle_t *)&f->tick, NULL);
  uv_run(&f->loop, UV_RUN_DEFAULT);
  /* UV_EBUSY here would mean the pool left a handle open. */
  assert_int_equal(uv_loop_close(&f->loop), 0);
  clear_recs(f);
  free(f->recs);
  kiln_test_remove_tree(f->tmp);
  free(f->tmp);
  free(f);
  return clean ? 0 : -1;
}

/* ---- Helpers --------------------------------------------------------------------- */

static kilnd_workers_options_t base_options(size_t count) {
  kilnd_workers_options_t o;
  memset(&o, 0, sizeof o);
  o.count = count;
  o.worker_path = KILN_WORKER_PATH;
  return o;
}

typedef bool (*pred_fn_t)(fixture_t *f, uint64_t arg);

static bool wait_for(fixture_t *f, pred_fn_t pred, uint64_t arg, int64_t timeout_ms) {
  int64_t deadline = kiln_time_monotonic_ns() + timeout_ms * 1000000;
  while (!pred(f, arg)) {
    if (kiln_time_monotonic_ns() > deadline) return false;
    uv_run(&f->loop, UV_RUN_ONCE);
  }
  return true;
}

static bool idle_at_least(fixture_t *f, uint64_t n) { return kilnd_workers_idle(f->pool) >= n; }

static const rec_t *find(const fixture_t *f, uint64_t task, kilnd_task_event_kind_t kind,
                         const char *target) {
  for (size_t i = 0; i < f->n_recs; i++) {
    const rec_t *r = &f->recs[i];
    if (r->task == task && r->kind == kind && (!target || (r->target && !strcmp(r->target, target)))) {
      return r;
    }
  }
  return NULL;
}

static size_t count(const fixture_t *f, uint64_t task, kilnd_task_event_kind_t kind) {
  size_t n = 0;
  for (size_t i = 0; i < f->n_recs; i++) n += f->recs[i].task == task && f->recs[i].kind == kind;
  return n;
}

static bool finished(fixture_t *f, uint64_t task) { return find(f, task, KILND_TASK_FINISHED, NULL) != NULL; }
static bool progressed(fixture_t *f, uint64_t task) {
  return find(f, task, KILND_TASK_PROGRESS, NULL) != NULL;
}
static bool never(fixture_t *f, uint64_t arg) {
  (void)f;
  (void)arg;
  return false;
}

static void start_pool(fixture_t *f, const kilnd_workers_options_t *o) {
  kiln_status_t st = kilnd_workers_create(&f->loop, o, on_event, f, &f->pool);
  if (st) fail_msg("create: %s", kiln_status_message(st));
  assert_non_null(f->pool);
  assert_true(wait_for(f, idle_at_least, o->count, WAIT_MS));
}

static char *read_all(const char *path, size_t *out_len) {
  FILE *fp = fopen(path, "rb");
  if (!fp) return NULL;
  fseek(fp, 0, SEEK_END);
  long n = ftell(fp);
  fseek(fp, 0, SEEK_SET);
  char *b = malloc((size_t)n + 1);
  if (b && fread(b, 1, (size_t)n, fp) != (size_t)n) {
    free(b);
    b = NULL;
  }
  fclose(fp);
  if (b) b[n] = '\0';
  *out_len = (size_t)n;
  return b;
}

/* mlp.mlir, with `extra` appended (a test hook line). */
static char *mlp_source(const char *extra, size_t *out_len) {
  size_t len = 0;
  char *src = read_all(MLP, &len);
  assert_non_null(src);
  size_t elen = extra ? strlen(extra) : 0;
  src = realloc(src, len + elen + 1);
  assert_non_null(src);
  if (elen) memcpy(src + len, extra, elen + 1);
  *out_len = len + elen;
  return src;
}

static void submit(fixture_t *f, uint64_t id, const char *name, const char *src, size_t len,
                   const char *const *targets, size_t n_targets) {
  kilnd_task_t t = {.id = id,
                    .source = (const uint8_t *)src,
                    .source_len = len,
                    .source_name = name,
                    .targets = targets,
                    .n_targets = n_targets};
  kiln_status_t st = kilnd_workers_submit(f->pool, &t);
  if (st) fail_msg("submit %llu: %s", (unsigned long long)id, kiln_status_message(st));
  /* STARTED comes before submit returns. */
  const rec_t *started = find(f, id, KILND_TASK_STARTED, NULL);
  assert_non_null(started);
  assert_true(started->pid > 0);
  assert_null(strstr(started->worker, "pid")); /* clients see the worker's name alone */
}

static void assert_vmfb(const rec_t *r) {
  assert_non_null(r);
  assert_true(r->artifact_len > 76);
  assert_memory_equal(r->artifact, "PK\3\4", 4);
  assert_memory_equal(r->artifact + 72, "IREE", 4);
}

static void assert_contains(const char *haystack, const char *needle) {
  if (!haystack || !strstr(haystack, needle)) {
    fail_msg("expected \"%s\" in: %s", needle, haystack ? haystack : "(null)");
  }
}

static void assert_failed(const fixture_t *f, uint64_t task, const char *target, kiln_status_code_t code) {
  const rec_t *r = find(f, task, KILND_TASK_TARGET_FAILED, target);
  if (!r) fail_msg("no TARGET_FAILED for %s", target);
  if (r->code != code) {
    fail_msg("%s: expected %s, got %s: %s", target, kiln_status_code_name(code),
             kiln_status_code_name(r->code), r->message);
  }
}

/* The FINISHED event is the task's last one. */
static void assert_finished_last(const fixture_t *f, uint64_t task) {
  size_t last = SIZE_MAX;
  for (size_t i = 0; i < f->n_recs; i++) {
    if (f->recs[i].task == task) last = i;
  }
  assert_true(last != SIZE_MAX);
  assert_int_equal(f->recs[last].kind, KILND_TASK_FINISHED);
  assert_int_equal(count(f, task, KILND_TASK_FINISHED), 1);
}

static int pid_of(const rec_t *started) { return started ? started->pid : -1; }

static const char *const TWO[] = {"sm_89", "arm5gen"};
static const char *const SM89[] = {"sm_89"};

/* ---- Built-in compiler ------------------------------------------------------------- */

static void test_compile_two_targets(void **state) {
  fixture_t *f = *state;
  kilnd_workers_options_t o = base_options(1);
  start_pool(f, &o);
  assert_int_equal(f->ready, 1);
  const char *compiler = kilnd_workers_compiler(f->pool);
  assert_non_null(compiler);
  assert_contains(compiler, "kiln-mlir");
  /* The Hello's fields, as GetServerInfo reports them: the worker's own LLVM. */
  kilnd_compiler_info_t info;
  assert_true(kilnd_workers_identity(f->pool, &info));
  kiln_compiler_identity_t id;
  kiln_compiler_identity_get(&id);
  assert_string_equal(info.name, id.name);
  assert_string_equal(info.version, id.version);
  assert_string_equal(info.llvm_version, id.llvm_version);
  assert_string_equal(info.mlir_version, id.mlir_version);
  if (strncmp(info.llvm_version, "22.", 3) != 0) fail_msg("llvm_version '%s' is not 22.x", info.llvm_version);
  unsigned major, minor, patch;
  char extra;
  if (sscanf(info.llvm_version, "%u.%u.%u%c", &major, &minor, &patch, &extra) != 3) {
    fail_msg("llvm_version '%s' is not major.minor.patch", info.llvm_version);
  }
  size_t len = 0;
  char *src = mlp_source(NULL, &len);
  submit(f, 1, "mlp.mlir", src, len, TWO, 2);
  assert_int_equal(kilnd_workers_idle(f->pool), 0);
  assert_true(wait_for(f, finished, 1, WAIT_MS));
  assert_int_equal(f->recs[0].kind, KILND_TASK_STARTED);
  assert_true(count(f, 1, KILND_TASK_PROGRESS) >= 2);
  assert_int_equal(count(f, 1, KILND_TASK_TARGET_DONE), 2);
  assert_int_equal(count(f, 1, KILND_TASK_TARGET_FAILED), 0);
  assert_vmfb(find(f, 1, KILND_TASK_TARGET_DONE, "sm_89"));
  assert_vmfb(find(f, 1, KILND_TASK_TARGET_DONE, "arm5gen"));
  assert_finished_last(f, 1);
  /* Idle again, and said so. */
  assert_int_equal(kilnd_workers_idle(f->pool), 1);
  assert_int_equal(f->ready, 2);
  kilnd_workers_stats_t s;
  kilnd_workers_stats(f->pool, &s);
  assert_int_equal(s.count, 1);
  assert_int_equal(s.busy, 0);
  assert_int_equal(s.tasks, 1);
  assert_int_equal(s.restarts, 0);
  assert_int_equal(s.crashes, 0);
  free(src);
}

static void test_bad_ir(void **state) {
  fixture_t *f = *state;
  kilnd_workers_options_t o = base_options(1);
  start_pool(f, &o);
  submit(f, 2, "bad.mlir", BAD_IR, strlen(BAD_IR), TWO, 2);
  assert_true(wait_for(f, finished, 2, WAIT_MS));
  regex_t re;
  assert_int_equal(regcomp(&re, "bad\\.mlir:[0-9]+:[0-9]+: error", REG_EXTENDED | REG_NOSUB), 0);
  for (size_t i = 0; i < 2; i++) {
    assert_failed(f, 2, TWO[i], KILN_STATUS_INVALID_ARGUMENT);
    const rec_t *r = find(f, 2, KILND_TASK_TARGET_FAILED, TWO[i]);
    if (regexec(&re, r->message, 0, NULL, 0) != 0) fail_msg("no file:line:col in: %s", r->message);
  }
  regfree(&re);
  assert_finished_last(f, 2);
  /* Bad IR is the user's problem, not the worker's: no restart. */
  kilnd_workers_stats_t s;
  kilnd_workers_stats(f->pool, &s);
  assert_int_equal(s.restarts, 0);
  assert_int_equal(kilnd_workers_idle(f->pool), 1);
}

static void test_unknown_target_fails_alone(void **state) {
  fixture_t *f = *state;
  kilnd_workers_options_t o = base_options(1);
  start_pool(f, &o);
  size_t len = 0;
  char *src = mlp_source(NULL, &len);
  const char *const targets[] = {"arm5gen", "no-such-gpu"};
  submit(f, 3, "mlp.mlir", src, len, targets, 2);
  assert_true(wait_for(f, finished, 3, WAIT_MS));
  assert_vmfb(find(f, 3, KILND_TASK_TARGET_DONE, "arm5gen"));
  assert_failed(f, 3, "no-such-gpu", KILN_STATUS_INVALID_ARGUMENT);
  assert_finished_last(f, 3);
  free(src);
}

/* ---- Test hooks: crash, hang, memory ----------------------------------------------- */

static void test_crash_is_reported_and_replaced(void **state) {
  fixture_t *f = *state;
  char crash_dir[512];
  snprintf(crash_dir, sizeof crash_dir, "%s/crashes", f->tmp); /* made on first use */
  kilnd_workers_options_t o = base_options(1);
  o.test_hooks = true;
  o.crash_dir = crash_dir;
  start_pool(f, &o);
  size_t len = 0;
  char *src = mlp_source("// kiln-test: crash\n", &len);
  submit(f, 7, "mlp.mlir", src, len, TWO, 2);
  assert_true(wait_for(f, finished, 7, WAIT_MS));
  char kept[600];
  snprintf(kept, sizeof kept, "%s/7.mlir", crash_dir);
  for (size_t i = 0; i < 2; i++) {
    assert_failed(f, 7, TWO[i], KILN_STATUS_INTERNAL);
    const char *msg = find(f, 7, KILND_TASK_TARGET_FAILED, TWO[i])->message;
    assert_contains(msg, "crashed (signal 6, Aborted)");
    assert_contains(msg, TWO[i]);
    assert_contains(msg, "kept in kilnd's crash folder as 7.mlir");
    assert_true(strstr(msg, crash_dir) == NULL); /* the folder is the server's business */
  }
  assert_finished_last(f, 7);
  /* The IR that did it is kept, byte for byte. */
  size_t kept_len = 0;
  char *kept_src = read_all(kept, &kept_len);
  assert_non_null(kept_src);
  assert_int_equal(kept_len, len);
  assert_memory_equal(kept_src, src, len);
  free(kept_src);
  /* Replaced by a new process that compiles the next task. */
  int old_pid = pid_of(find(f, 7, KILND_TASK_STARTED, NULL));
  assert_true(wait_for(f, idle_at_least, 1, WAIT_MS));
  kilnd_workers_stats_t s;
  kilnd_workers_stats(f->pool, &s);
  assert_int_equal(s.crashes, 1);
  assert_int_equal(s.restarts, 1);
  free(src);
  src = mlp_source(NULL, &len);
  submit(f, 8, "mlp.mlir", src, len, SM89, 1);
  assert_true(wait_for(f, finished, 8, WAIT_MS));
  assert_vmfb(find(f, 8, KILND_TASK_TARGET_DONE, "sm_89"));
  assert_true(pid_of(find(f, 8, KILND_TASK_STARTED, NULL)) != old_pid);
  free(src);
}

static void test_hang_times_out(void **state) {
  fixture_t *f = *state;
  kilnd_workers_options_t o = base_options(1);
  o.test_hooks = true;
  o.task_timeout_ms = 1000;
  o.crash_dir = f->tmp;
  start_pool(f, &o);
  size_t len = 0;
  char *src = mlp_source("// kiln-test: hang\n", &len);
  int64_t t0 = kiln_time_monotonic_ns();
  submit(f, 9, "mlp.mlir", src, len, SM89, 1);
  assert_true(wait_for(f, finished, 9, WAIT_MS));
  int64_t ms = (kiln_time_monotonic_ns() - t0) / 1000000;
  assert_true(ms >= 1000);
  assert_true(ms < 10000);
  assert_failed(f, 9, "sm_89", KILN_STATUS_DEADLINE_EXCEEDED);
  assert_contains(find(f, 9, KILND_TASK_TARGET_FAILED, "sm_89")->message, "1000 ms");
  assert_true(wait_for(f, idle_at_least, 1, WAIT_MS));
  kilnd_workers_stats_t s;
  kilnd_workers_stats(f->pool, &s);
  assert_int_equal(s.restarts, 1);
  assert_int_equal(s.crashes, 0); /* we killed it; it did not die on its own */
  free(src);
}

static void test_memory_limit(void **state) {
  fixture_t *f = *state;
  kilnd_workers_options_t o = base_options(1);
  o.test_hooks = true;
  o.memory_limit_bytes = (uint64_t)1 << 30;
  o.crash_dir = f->tmp;
  start_pool(f, &o);
  size_t len = 0;
  char *src = mlp_source("// kiln-test: oom\n", &len);
  submit(f, 10, "mlp.mlir", src, len, SM89, 1);
  assert_true(wait_for(f, finished, 10, WAIT_MS));
  assert_failed(f, 10, "sm_89", KILN_STATUS_RESOURCE_EXHAUSTED);
  const char *msg = find(f, 10, KILND_TASK_TARGET_FAILED, "sm_89")->message;
  assert_contains(msg, "ran out of memory");
  assert_contains(msg, "1073741824 bytes");
  assert_true(wait_for(f, idle_at_least, 1, WAIT_MS));
  /* The replacement compiles under the same limit. */
  free(src);
  src = mlp_source(NULL, &len);
  submit(f, 11, "mlp.mlir", src, len, TWO, 2);
  assert_true(wait_for(f, finished, 11, WAIT_MS));
  assert_int_equal(count(f, 11, KILND_TASK_TARGET_DONE), 2);
  free(src);
}

static void test_cancel_running_task(void **state) {
  fixture_t *f = *state;
  kilnd_workers_options_t o = base_options(1);
  o.test_hooks = true;
  start_pool(f, &o);
  size_t len = 0;
  char *src = mlp_source("// kiln-test: hang\n", &len);
  submit(f, 12, "mlp.mlir", src, len, TWO, 2);
  assert_true(wait_for(f, progressed, 12, WAIT_MS)); /* it is inside the task */
  kilnd_workers_cancel(f->pool, 12);
  kilnd_workers_cancel(f->pool, 999); /* unknown: no-op */
  assert_true(wait_for(f, finished, 12, WAIT_MS));
  assert_failed(f, 12, "sm_89", KILN_STATUS_CANCELLED);
  assert_failed(f, 12, "arm5gen", KILN_STATUS_CANCELLED);
  assert_finished_last(f, 12);
  assert_true(wait_for(f, idle_at_least, 1, WAIT_MS));
  kilnd_workers_stats_t s;
  kilnd_workers_stats(f->pool, &s);
  assert_int_equal(s.restarts, 1);
  assert_int_equal(s.crashes, 0);
  assert_int_equal(s.tasks, 1);
  free(src);
}

/* A pool of `workers` running hang task `id` (one sm_89 target): the worker's pid.
 * *out_src is the source, for the caller to free. */
static int start_hang(fixture_t *f, uint64_t id, size_t workers, char **out_src) {
  kilnd_workers_options_t o = base_options(workers);
  o.test_hooks = true;
  start_pool(f, &o);
  size_t len = 0;
  *out_src = mlp_source("// kiln-test: hang\n", &len);
  submit(f, id, "mlp.mlir", *out_src, len, SM89, 1);
  assert_true(wait_for(f, progressed, id, WAIT_MS));
  int pid = pid_of(find(f, id, KILND_TASK_STARTED, NULL));
  assert_true(pid > 0);
  return pid;
}

/* A SIGKILL kilnd did not send and the kernel's OOM killer did not either (its
 * count stands still): someone outside killed the worker. It was reported as
 * "out of memory" (issue 18, item 13); now UNAVAILABLE, naming what happened. */
static void test_outside_sigkill_is_not_oom(void **state) {
  fixture_t *f = *state;
  char *src = NULL;
  int pid = start_hang(f, 13, 1, &src);
  assert_int_equal(kill(pid, SIGKILL), 0);
  assert_true(wait_for(f, finished, 13, WAIT_MS));
  const rec_t *r = find(f, 13, KILND_TASK_TARGET_FAILED, "sm_89");
  assert_non_null(r);
  FILE *vm = fopen("/proc/vmstat", "r");
  if (vm) {
    fclose(vm);
    assert_int_equal(r->code, KILN_STATUS_UNAVAILABLE);
    assert_contains(r->message, "from outside kilnd");
    assert_null(strstr(r->message, "pid"));
  } else {
    assert_int_equal(r->code, KILN_STATUS_RESOURCE_EXHAUSTED); /* no count to tell: the likelier cause */
  }
  assert_true(wait_for(f, idle_at_least, 1, WAIT_MS));
  free(src);
}

/* ---- Concurrency and lifecycle -------------------------------------------------- */

static bool both_finished(fixture_t *f, uint64_t arg) {
  (void)arg;
  return finished(f, 21) && finished(f, 22);
}

static void test_two_workers_two_tasks(void **state) {
  fixture_t *f = *state;
  kilnd_workers_options_t o = base_options(2);
  start_pool(f, &o);
  size_t len = 0;
  char *src = mlp_source(NULL, &len);
  submit(f, 21, "a.mlir", src, len, TWO, 2);
  submit(f, 22, "b.mlir", src, len, SM89, 1);
  /* Both running at once, on different processes; no third slot. */
  kilnd_workers_stats_t s;
  kilnd_workers_stats(f->pool, &s);
  assert_int_equal(s.busy, 2);
  assert_int_equal(kilnd_workers_idle(f->pool), 0);
  kilnd_task_t third = {
      .id = 23, .source = (const uint8_t *)src, .source_len = len, .targets = SM89, .n_targets = 1};
  kiln_status_t st = kilnd_workers_submit(f->pool, &third);
  assert_int_equal(kiln_status_code(st), KILN_STATUS_FAILED_PRECONDITION);
  kiln_status_free(st);
  assert_string_not_equal(find(f, 21, KILND_TASK_STARTED, NULL)->worker,
                          find(f, 22, KILND_TASK_STARTED, NULL)->worker);
  assert_true(wait_for(f, both_finished, 0, WAIT_MS));
  assert_int_equal(count(f, 21, KILND_TASK_TARGET_DONE), 2);
  assert_int_equal(count(f, 22, KILND_TASK_TARGET_DONE), 1);
  /* Same source and target on two processes: the same bytes. */
  const rec_t *a = find(f, 21, KILND_TASK_TARGET_DONE, "sm_89");
  const rec_t *b = find(f, 22, KILND_TASK_TARGET_DONE, "sm_89");
  assert_int_equal(a->artifact_len, b->artifact_len);
  assert_memory_equal(a->artifact, b->artifact, a->artifact_len);
  kilnd_workers_stats(f->pool, &s);
  assert_int_equal(s.tasks, 2);
  assert_int_equal(kilnd_workers_idle(f->pool), 2);
  free(src);
}

static void test_submit_checks(void **state) {
  fixture_t *f = *state;
  kilnd_workers_options_t o = base_options(1);
  start_pool(f, &o);
  const char *const dup[] = {"sm_89", "sm_89"};
  kilnd_task_t t = {
      .id = 0, .source = (const uint8_t *)"x", .source_len = 1, .targets = SM89, .n_targets = 1};
  kiln_status_t st = kilnd_workers_submit(f->pool, &t);
  assert_int_equal(kiln_status_consume_code(st), KILN_STATUS_INVALID_ARGUMENT);
  t.id = 5;
  t.n_targets = 0;
  st = kilnd_workers_submit(f->pool, &t);
  assert_int_equal(kiln_status_consume_code(st), KILN_STATUS_INVALID_ARGUMENT);
  t.targets = dup;
  t.n_targets = 2;
  st = kilnd_workers_submit(f->pool, &t);
  assert_int_equal(kiln_status_consume_code(st), KILN_STATUS_INVALID_ARGUMENT);
  assert_int_equal(f->n_recs, 0);
  assert_int_equal(kilnd_workers_idle(f->pool), 1);
}

static void test_close_with_running_task(void **state) {
  fixture_t *f = *state;
  char *src = NULL;
  int pid = start_hang(f, 31, 2, &src);
  size_t before = f->n_recs;
  close_pool(f);
  /* No event after close, and the worker is gone (reaped, not a zombie). */
  assert_int_equal(f->n_recs, before);
  assert_null(find(f, 31, KILND_TASK_FINISHED, NULL));
  assert_int_equal(kill(pid, 0), -1);
  assert_int_equal(errno, ESRCH);
  free(src);
}

/* ---- External compiler (kilnc) ---------------------------------------------------- */

static void test_external_kilnc_same_bytes(void **state) {
  fixture_t *f = *state;
  size_t len = 0;
  char *src = mlp_source(NULL, &len);
  kilnd_workers_options_t o = base_options(1);
  start_pool(f, &o);
  submit(f, 41, "mlp.mlir", src, len, SM89, 1);
  assert_true(wait_for(f, finished, 41, WAIT_MS));
  close_pool(f);

  o.external_compiler = KILN_KILNC_PATH; /* the default template: iree-compile's CLI */
  start_pool(f, &o);
  assert_contains(kilnd_workers_compiler(f->pool), "external ");
  assert_contains(kilnd_workers_compiler(f->pool), "kilnc");
  /* Field by field: "external", the key's version part, no LLVM or MLIR of ours. */
  kilnd_compiler_info_t info;
  assert_true(kilnd_workers_identity(f->pool, &info));
  assert_string_equal(info.name, "external");
  assert_string_equal(info.version, kilnd_workers_compiler(f->pool) + strlen("external "));
  assert_string_equal(info.llvm_version, "");
  assert_string_equal(info.mlir_version, "");
  submit(f, 42, "mlp.mlir", src, len, SM89, 1);
  assert_true(wait_for(f, finished, 42, WAIT_MS));
  const rec_t *builtin = find(f, 41, KILND_TASK_TARGET_DONE, "sm_89");
  const rec_t *external = find(f, 42, KILND_TASK_TARGET_DONE, "sm_89");
  assert_vmfb(builtin);
  if (!external) fail_msg("external: %s", find(f, 42, KILND_TASK_TARGET_FAILED, NULL)->message);
  assert_vmfb(external);
  /* kilnc packages through the same library: identical bytes. */
  assert_int_equal(builtin->artifact_len, external->artifact_len);
  assert_memory_equal(builtin->artifact, external->artifact, builtin->artifact_len);

  /* Bad IR: kilnc's own diagnostics, about the file as the user named it. */
  submit(f, 43, "bad.mlir", BAD_IR, strlen(BAD_IR), SM89, 1);
  assert_true(wait_for(f, finished, 43, WAIT_MS));
  assert_failed(f, 43, "sm_89", KILN_STATUS_INVALID_ARGUMENT);
  assert_contains(find(f, 43, KILND_TASK_TARGET_FAILED, "sm_89")->message, "bad.mlir:");
  assert_finished_last(f, 43);
  free(src);
}

static void test_external_missing_compiler(void **state) {
  fixture_t *f = *state;
  kilnd_workers_options_t o = base_options(1);
  o.external_compiler = "kiln-no-such-compiler"; /* looked up on PATH per target */
  start_pool(f, &o);
  submit(f, 44, "mlp.mlir", "x", 1, SM89, 1);
  assert_true(wait_for(f, finished, 44, WAIT_MS));
  assert_failed(f, 44, "sm_89", KILN_STATUS_FAILED_PRECONDITION);
  assert_contains(find(f, 44, KILND_TASK_TARGET_FAILED, "sm_89")->message, "kiln-no-such-compiler");
}

static void write_script(const char *path, const char *text) {
  FILE *fp = fopen(path, "w");
  assert_non_null(fp);
  fputs(text, fp);
  fclose(fp);
  assert_int_equal(chmod(path, 0755), 0);
}

/* Stand-in compilers: a shell script that finds its -o file, then writes into
 * it its arguments, one a line (ARGV_ECHO), or what it has of LD_BIND_NOW
 * (ENV_ECHO). */
#define STAND_IN_OUTPUT                               \
  "#!/bin/sh\nout=\nprev=\nfor a in \"$@\"; do\n"     \
  "  [ \"$prev\" = -o ] && out=$a\n  prev=$a\ndone\n" \
  "[ -n \"$out\" ] || exit 9\n"
#define ARGV_ECHO STAND_IN_OUTPUT "printf '%s\\n' \"$@\" > \"$out\"\n"
#define ENV_ECHO  STAND_IN_OUTPUT "printf 'LD_BIND_NOW=%s\\n' \"${LD_BIND_NOW-unset}\" > \"$out\"\n"

/* Starts a one-worker pool whose external compiler (default template) is the
 * stand-in `text`, written to f->tmp/name; `script` holds that path and must
 * outlive the pool. Returns the pool's options. */
static kilnd_workers_options_t start_stand_in(fixture_t *f, const char *name, const char *text,
                                              char script[600]) {
  snprintf(script, 600, "%s/%s", f->tmp, name);
  write_script(script, text);
  kilnd_workers_options_t o = base_options(1);
  o.external_compiler = script;
  start_pool(f, &o);
  return o;
}

static void test_external_template_expansion(void **state) {
  fixture_t *f = *state;
  char script[600];
  kilnd_workers_options_t o = start_stand_in(f, "argv-echo", ARGV_ECHO, script);
  const char *const targets[] = {"sm_89", "gfx950", "arm5gen"};
  const char *const flags[] = {"--iree-opt-level=O2", "--iree-stream-resource-index-bits=64"};
  kilnd_task_t t = {.id = 51,
                    .source = (const uint8_t *)"module {}",
                    .source_len = 9,
                    .source_name = "/home/me/models/my model.mlir",
                    .targets = targets,
                    .n_targets = 3,
                    .flags = flags,
                    .n_flags = 2};
  assert_null(kilnd_workers_submit(f->pool, &t));
  assert_true(wait_for(f, finished, 51, WAIT_MS));
  static const char *const want[] = {
      "my_model.mlir\n--iree-hal-target-device=cuda\n--iree-cuda-target=sm_89\n--iree-opt-level=O2\n"
      "--iree-stream-resource-index-bits=64\n-o\nsm_89.vmfb\n",
      "my_model.mlir\n--iree-hal-target-device=hip\n--iree-rocm-target=gfx950\n--iree-opt-level=O2\n"
      "--iree-stream-resource-index-bits=64\n-o\ngfx950.vmfb\n",
      "my_model.mlir\n--iree-hal-target-device=vulkan\n--iree-vulkan-target=arm5gen\n--iree-opt-level=O2\n"
      "--iree-stream-resource-index-bits=64\n-o\narm5gen.vmfb\n",
  };
  for (size_t i = 0; i < 3; i++) {
    const rec_t *r = find(f, 51, KILND_TASK_TARGET_DONE, targets[i]);
    if (!r) fail_msg("%s: %s", targets[i], find(f, 51, KILND_TASK_TARGET_FAILED, targets[i])->message);
    assert_int_equal(r->artifact_len, strlen(want[i]));
    assert_memory_equal(r->artifact, want[i], r->artifact_len);
  }
  close_pool(f);

  /* Every placeholder, braces, and {flags} inside a longer word. */
  o.external_args =
      "-x={backend}:{target}:{chip}:{device}:{target_flag} {{lit}} F=[{flags}] -o {output} {input}";
  start_pool(f, &o);
  t.id = 52;
  t.n_targets = 1;
  assert_null(kilnd_workers_submit(f->pool, &t));
  assert_true(wait_for(f, finished, 52, WAIT_MS));
  const char *want2 =
      "-x=cuda:sm_89:sm_89:cuda:iree-cuda-target\n{lit}\n"
      "F=[--iree-opt-level=O2 --iree-stream-resource-index-bits=64]\n-o\nsm_89.vmfb\nmy_model.mlir\n";
  const rec_t *r = find(f, 52, KILND_TASK_TARGET_DONE, "sm_89");
  assert_non_null(r);
  assert_int_equal(r->artifact_len, strlen(want2));
  assert_memory_equal(r->artifact, want2, r->artifact_len);
}

/* A process's start-up environment (/proc/PID/environ: NUL-separated). */
/* The environment process pid started with: NUL-separated entries (free it). */
static char *read_environ(int pid, size_t *out_len) {
  char path[64];
  snprintf(path, sizeof path, "/proc/%d/environ", pid);
  FILE *fp = fopen(path, "rb");
  assert_non_null(fp);
  size_t len = 0, cap = 4096;
  char *env = malloc(cap);
  for (size_t got; (got = fread(env + len, 1, cap - len - 1, fp)) > 0;) {
    len += got;
    if (cap - len - 1 == 0) env = realloc(env, cap *= 2);
  }
  fclose(fp);
  env[len] = '\0';
  *out_len = len;
  return env;
}

static bool environ_has(int pid, const char *entry) {
  size_t len;
  char *env = read_environ(pid, &len);
  bool found = false;
  for (size_t i = 0; i < len && !found; i += strlen(env + i) + 1) found = strcmp(env + i, entry) == 0;
  free(env);
  return found;
}

/* Whether process pid started with GLIBC_TUNABLES=`value`. The dynamic loader
 * parses the variable where it lies, and glibc 2.36 leaves a NUL for each ':'
 * there (the process itself gets an intact copy), so both spellings count. */
static bool tunables_are(int pid, const char *value) {
  size_t len;
  char *env = read_environ(pid, &len);
  char want[256];
  int n = snprintf(want, sizeof want, "GLIBC_TUNABLES=%s", value);
  size_t entries = 0; /* GLIBC_TUNABLES= once, or a second would be a bug */
  for (size_t i = 0; i < len; i += strlen(env + i) + 1)
    entries += strncmp(env + i, "GLIBC_TUNABLES=", 15) == 0;
  assert_int_equal(entries, 1);
  bool found = false;
  for (int form = 0; form < 2 && !found; form++) {
    char w[256];
    memcpy(w, want, (size_t)n);
    for (int i = 0; form && i < n; i++) {
      if (w[i] == ':') w[i] = '\0';
    }
    /* A whole entry: at the start or after a NUL, and ending in a NUL. */
    for (size_t at = 0; at + (size_t)n < len && !found; at++) {
      found = (at == 0 || env[at - 1] == '\0') && memcmp(env + at, w, (size_t)n) == 0 &&
              env[at + (size_t)n] == '\0';
    }
  }
  free(env);
  return found;
}

/* A built-in compiler's worker starts with LD_BIND_NOW=1 (every symbol bound once,
 * before the back halves fork) and huge pages for malloc, kilnd's own tunables
 * kept; the tools a worker runs never see LD_BIND_NOW. */
/* A pool of one built-in worker started with kilnd's environment as it is now,
 * one task run on it; the worker's pid (the pool is closed by the caller). */
static int worker_pid_for_task(fixture_t *f, uint64_t id) {
  kilnd_workers_options_t o = base_options(1);
  start_pool(f, &o);
  const char *const targets[] = {"sm_89"};
  kilnd_task_t t = {
      .id = id, .source = (const uint8_t *)"module {}", .source_len = 9, .targets = targets, .n_targets = 1};
  assert_null(kilnd_workers_submit(f->pool, &t));
  assert_true(wait_for(f, finished, id, WAIT_MS));
  return pid_of(find(f, id, KILND_TASK_STARTED, NULL));
}

static void test_worker_binds_now_and_its_tools_do_not(void **state) {
  fixture_t *f = *state;
  unsetenv("LD_BIND_NOW"); /* the runner's own choice would be passed on */
  tunables_save();
  unsetenv("GLIBC_TUNABLES");
  int pid = worker_pid_for_task(f, 53);
  assert_true(environ_has(pid, "LD_BIND_NOW=1"));
  assert_true(tunables_are(pid, "glibc.malloc.hugetlb=1")); /* none of kilnd's own */
  close_pool(f);

  /* kilnd's own tunables are kept, in the one variable. */
  setenv("GLIBC_TUNABLES", "glibc.malloc.arena_max=4", 1);
  assert_true(tunables_are(worker_pid_for_task(f, 56), "glibc.malloc.arena_max=4:glibc.malloc.hugetlb=1"));
  close_pool(f);

  /* A choice of its own about huge pages is kilnd's to keep. */
  setenv("GLIBC_TUNABLES", "glibc.malloc.hugetlb=0", 1);
  assert_true(tunables_are(worker_pid_for_task(f, 55), "glibc.malloc.hugetlb=0"));
  close_pool(f);
  tunables_restore();

  /* An external compiler's worker: not bound at start (it forks nothing), and
   * the compiler sees no LD_BIND_NOW even when kilnd has one. */
  setenv("LD_BIND_NOW", "1", 1);
  char script[600];
  start_stand_in(f, "env-echo", ENV_ECHO, script);
  unsetenv("LD_BIND_NOW");
  const char *const targets[] = {"sm_89"};
  kilnd_task_t t = {
      .id = 54, .source = (const uint8_t *)"module {}", .source_len = 9, .targets = targets, .n_targets = 1};
  assert_null(kilnd_workers_submit(f->pool, &t));
  assert_true(wait_for(f, finished, 54, WAIT_MS));
  const rec_t *r = find(f, 54, KILND_TASK_TARGET_DONE, "sm_89");
  if (!r) fail_msg("sm_89: %s", find(f, 54, KILND_TASK_TARGET_FAILED, "sm_89")->message);
  const char *want = "LD_BIND_NOW=unset\n";
  assert_int_equal(r->artifact_len, strlen(want));
  assert_memory_equal(r->artifact, want, r->artifact_len);
}

static void test_external_failures(void **state) {
  fixture_t *f = *state;
  /* A compiler that hangs is stopped by the worker just before the task timeout:
   * its target fails alone, named, and the worker lives on. */
  kilnd_workers_options_t o = base_options(1);
  o.external_compiler = "/bin/sleep";
  o.external_args = "30";
  o.task_timeout_ms = 1500;
  start_pool(f, &o);
  submit(f, 53, "mlp.mlir", "x", 1, SM89, 1);
  assert_true(wait_for(f, finished, 53, WAIT_MS));
  assert_failed(f, 53, "sm_89", KILN_STATUS_DEADLINE_EXCEEDED);
  const char *msg = find(f, 53, KILND_TASK_TARGET_FAILED, "sm_89")->message;
  assert_contains(msg, "/bin/sleep");
  assert_contains(msg, "1500 ms");
  kilnd_workers_stats_t s;
  kilnd_workers_stats(f->pool, &s);
  assert_int_equal(s.restarts, 0);
  close_pool(f);

  /* Exit status 1 and no diagnostics about the input: INTERNAL, not the user's IR. */
  o = base_options(1);
  o.external_compiler = "/bin/false";
  start_pool(f, &o);
  submit(f, 54, "mlp.mlir", "x", 1, SM89, 1);
  assert_true(wait_for(f, finished, 54, WAIT_MS));
  assert_failed(f, 54, "sm_89", KILN_STATUS_INTERNAL);
  assert_contains(find(f, 54, KILND_TASK_TARGET_FAILED, "sm_89")->message, "exit status 1");
}

/* ---- Scratch directories -------------------------------------------------------------- */

/* A pid that has exited (a child reaped at once). */
static long dead_pid(void) {
  pid_t pid = fork();
  if (pid == 0) _exit(0);
  assert_true(pid > 0);
  assert_int_equal(waitpid(pid, NULL, 0), pid);
  return (long)pid;
}

/* f->tmp/<prefix><pid><suffix>. */
static char *tmp_path(const fixture_t *f, const char *prefix, long pid, const char *suffix) {
  kiln_buf_t path;
  kiln_buf_init(&path);
  kiln_buf_appendf(&path, "%s/%s%ld%s", f->tmp, prefix, pid, suffix);
  char *out = strdup(path.data);
  kiln_buf_deinit(&path);
  return out;
}

static char *made_dir(const fixture_t *f, const char *prefix, long pid, const char *suffix, mode_t mode) {
  char *path = tmp_path(f, prefix, pid, suffix);
  assert_int_equal(mkdir(path, 0700), 0);
  assert_int_equal(chmod(path, mode), 0);
  return path;
}

static bool there(const char *path) {
  struct stat st;
  return lstat(path, &st) == 0;
}

/* Must run before any other test starts a pool in this process: a process's
 * first pool also sweeps its own pid's directories (a kilnd restarted as pid 1
 * in a container inherits them). A pool finds, before its first worker, and removes the
 * kiln-worker-<pid>[-<n>] directories of exited pids that are this user's and
 * private; it leaves live pids', other users', open (0755) ones, links and other
 * names alone, and a later pool of the same process leaves its own pid's. */
static void test_scratch_sweep_at_start(void **state) {
  fixture_t *f = *state;
  long dead = dead_pid(), self = (long)getpid();
  char *own = made_dir(f, "kiln-worker-", self, "-5", 0700);
  char *stale = made_dir(f, "kiln-worker-", dead, "-1", 0700);
  char *inner = NULL; /* what a killed worker leaves: stale/kiln-toolkit-x/llvm/bin/ld.lld */
  assert_true(asprintf(&inner, "%s/kiln-toolkit-x/llvm/bin/ld.lld", stale) > 0);
  for (char *slash = strchr(inner + strlen(stale) + 1, '/'); slash; slash = strchr(slash + 1, '/')) {
    *slash = '\0';
    assert_int_equal(mkdir(inner, 0700), 0);
    *slash = '/';
  }
  kiln_test_assert_ok(kiln_file_write(inner, "", 0, 0600));
  char *old_form = made_dir(f, "kiln-worker-", dead, "", 0700);
  char *open_mode = made_dir(f, "kiln-worker-", dead, "-2", 0755);
  char *bad_name = made_dir(f, "kiln-worker-", dead, "-x", 0700);
  char *live = made_dir(f, "kiln-worker-", (long)getppid(), "-1", 0700);
  char *target = made_dir(f, "target-", dead, "", 0700);
  char *keep = NULL;
  assert_true(asprintf(&keep, "%s/keep", target) > 0);
  kiln_test_assert_ok(kiln_file_write(keep, "k", 1, 0600));
  char *link = tmp_path(f, "kiln-worker-", dead, "-3");
  assert_int_equal(symlink(target, link), 0);
  char *foreign = NULL;
  if (geteuid() == 0) { /* only root can give a directory away */
    foreign = made_dir(f, "kiln-worker-", dead, "-4", 0700);
    assert_int_equal(chown(foreign, 65534, 65534), 0);
  }

  kilnd_workers_options_t o = base_options(1);
  start_pool(f, &o);
  close_pool(f);
  assert_false(there(own));
  assert_false(there(stale));
  assert_false(there(old_form));
  assert_true(there(open_mode));
  assert_true(there(bad_name));
  assert_true(there(live));
  assert_true(there(link));
  assert_true(there(keep));
  if (foreign) assert_true(there(foreign));

  /* A second pool of this process: its own pid's directories may be a live
   * pool's, so they stay. */
  char *own2 = made_dir(f, "kiln-worker-", self, "-999999", 0700);
  start_pool(f, &o);
  close_pool(f);
  assert_true(there(own2));

  char *const made[] = {open_mode, bad_name, live, link, foreign, own2};
  for (size_t i = 0; i < sizeof made / sizeof *made; i++) {
    if (made[i]) kiln_test_remove_tree(made[i]);
    free(made[i]);
  }
  free(own);
  free(stale);
  free(inner);
  free(old_form);
  free(keep);
  free(target);
}

static bool gone(fixture_t *f, uint64_t arg) {
  (void)f;
  return !there((const char *)(uintptr_t)arg);
}

static bool one_scratch(fixture_t *f, uint64_t unused) {
  (void)unused;
  char *names = names_with(f, "kiln-worker-");
  char *nl = strchr(names, '\n');
  bool one = nl && nl[1] == '\0';
  free(names);
  return one;
}

/* The one kiln-worker-* directory in f->tmp (owned by the caller). */
static char *only_scratch(fixture_t *f) {
  assert_true(wait_for(f, one_scratch, 0, WAIT_MS)); /* a dead worker's may still be going */
  char *names = names_with(f, "kiln-worker-");
  *strchr(names, '\n') = '\0';
  char *dir = NULL;
  assert_true(asprintf(&dir, "%s/%s", f->tmp, names) > 0);
  free(names);
  return dir;
}

/* A worker killed in the middle of a task cleans up nothing: the pool removes
 * its scratch directory (here holding a file, as a tool would leave) once the
 * worker is dead, and the replacement gets a new one. */
static void test_scratch_removed_when_killed(void **state) {
  fixture_t *f = *state;
  char *src = NULL;
  start_hang(f, 31, 1, &src);
  char *dir = only_scratch(f), *file = NULL; /* one worker, one directory */
  const char *before = strrchr(dir, '/') + 1;
  struct stat st;
  assert_int_equal(lstat(dir, &st), 0);
  assert_true(S_ISDIR(st.st_mode));
  assert_int_equal(st.st_mode & 0777, 0700);
  assert_true(asprintf(&file, "%s/kiln-ptxas-x", dir) > 0);
  kiln_test_assert_ok(kiln_file_write(file, "ptx", 3, 0600));
  kilnd_workers_cancel(f->pool, 31);
  assert_true(wait_for(f, finished, 31, WAIT_MS));
  assert_true(wait_for(f, gone, (uint64_t)(uintptr_t)dir, WAIT_MS));
  assert_true(wait_for(f, idle_at_least, 1, WAIT_MS));
  char *after = names_with(f, "kiln-worker-"); /* one name a line */
  assert_int_not_equal(strlen(after), 0);
  kiln_buf_t line;
  kiln_buf_init(&line);
  kiln_buf_appendf(&line, "%s\n", before);
  assert_null(strstr(after, line.data));
  kiln_buf_deinit(&line);
  free(after);
  free(file);
  free(dir);
  free(src);
}

/* Sets (or clears) a file's immutable flag, which makes even root's unlink fail
 * with EPERM: false where the file system or the user cannot. */
static bool set_immutable(const char *path, bool on) {
  int fd = open(path, O_RDONLY | O_CLOEXEC | O_NONBLOCK);
  if (fd < 0) return false;
  int flags = 0;
  bool ok = ioctl(fd, FS_IOC_GETFLAGS, &flags) == 0;
  if (ok) {
    flags = on ? (flags | FS_IMMUTABLE_FL) : (flags & ~FS_IMMUTABLE_FL);
    ok = ioctl(fd, FS_IOC_SETFLAGS, &flags) == 0;
  }
  close(fd);
  return ok;
}

/* The file a test made immutable, if any: teardown clears the flag should an
 * assertion end the test first (nobody but root could remove it otherwise). */
static char *immutable_file;

static bool scratch_left_is(fixture_t *f, uint64_t n) {
  kilnd_workers_stats_t s;
  kilnd_workers_stats(f->pool, &s);
  return s.scratch_left == n;
}

/* Puts an immutable file in `dir`; false (nothing left) where the flag cannot be
 * set: it needs CAP_LINUX_IMMUTABLE, and a file system that has it. */
static bool make_stuck(const char *dir) {
  char *file = NULL;
  assert_true(asprintf(&file, "%s/kiln-stuck", dir) > 0);
  kiln_test_assert_ok(kiln_file_write(file, "x", 1, 0600));
  if (!set_immutable(file, true)) {
    unlink(file);
    free(file);
    return false;
  }
  immutable_file = file;
  return true;
}

static void unstick(void) {
  if (!immutable_file) return;
  set_immutable(immutable_file, false);
  free(immutable_file);
  immutable_file = NULL;
}

/* A scratch directory that cannot be removed when its worker dies (a file in it
 * is immutable) is counted (and logged) and tried again at the next worker's
 * death; one still there when the pool closes is given up (logged), and the
 * close completes. */
static void test_scratch_removal_retried(void **state) {
  fixture_t *f = *state;
  char *src = NULL;
  start_hang(f, 41, 1, &src);
  char *dir = only_scratch(f);
  if (!make_stuck(dir)) {
    free(dir);
    free(src);
    skip(); /* not root, or a file system without the flag */
  }
  kilnd_workers_cancel(f->pool, 41);
  assert_true(wait_for(f, finished, 41, WAIT_MS));
  assert_true(wait_for(f, scratch_left_is, 1, WAIT_MS)); /* tried and failed */
  assert_true(there(dir));

  /* The next worker death takes it along, once it can go. */
  unstick();
  assert_true(wait_for(f, idle_at_least, 1, WAIT_MS));
  size_t len = strlen(src);
  submit(f, 42, "mlp.mlir", src, len, SM89, 1);
  assert_true(wait_for(f, progressed, 42, WAIT_MS));
  assert_true(there(dir)); /* until a removal runs again */
  kilnd_workers_cancel(f->pool, 42);
  assert_true(wait_for(f, finished, 42, WAIT_MS));
  assert_true(wait_for(f, gone, (uint64_t)(uintptr_t)dir, WAIT_MS));
  assert_true(wait_for(f, scratch_left_is, 0, WAIT_MS));
  assert_true(wait_for(f, idle_at_least, 1, WAIT_MS));

  /* Still stuck at close: tried at the worker's end and once more, then given
   * up; the close ends all the same. */
  char *dir2 = only_scratch(f); /* the replacement's */
  assert_true(make_stuck(dir2));
  close_pool(f);
  assert_true(there(dir2));
  unstick();
  kiln_test_remove_tree(dir2);
  free(dir2);
  free(dir);
  free(src);
}

/* ---- Start-up and broken workers ------------------------------------------------- */

static void test_create_checks(void **state) {
  fixture_t *f = *state;
  kilnd_workers_options_t o = base_options(1);
  o.worker_path = "/nonexistent/kiln-worker";
  kiln_status_t st = kilnd_workers_create(&f->loop, &o, on_event, f, &f->pool);
  assert_int_equal(kiln_status_consume_code(st), KILN_STATUS_INVALID_ARGUMENT);
  assert_null(f->pool);
  o = base_options(1);
  o.external_compiler = KILN_KILNC_PATH;
  o.external_args = "{input} --iree-hal-target-device={device} {chipp} -o {output}";
  st = kilnd_workers_create(&f->loop, &o, on_event, f, &f->pool);
  assert_int_equal(kiln_status_code(st), KILN_STATUS_INVALID_ARGUMENT);
  assert_contains(kiln_status_message(st), "{chipp}");
  kiln_status_free(st);
  o.external_args = "{input} -o {output";
  st = kilnd_workers_create(&f->loop, &o, on_event, f, &f->pool);
  assert_int_equal(kiln_status_consume_code(st), KILN_STATUS_INVALID_ARGUMENT);
  o = base_options(1);
  o.memory_limit_bytes = 1 << 20;
  st = kilnd_workers_create(&f->loop, &o, on_event, f, &f->pool);
  assert_int_equal(kiln_status_consume_code(st), KILN_STATUS_INVALID_ARGUMENT);
  assert_null(f->pool);
  /* The workers' scratch folders need an absolute, writable TMPDIR. */
  o = base_options(1);
  static const char *const bad_tmp[] = {"relative/tmp", "/nonexistent/kiln-tmp", "/dev/null"};
  for (size_t i = 0; i < sizeof bad_tmp / sizeof *bad_tmp; i++) {
    setenv("TMPDIR", bad_tmp[i], 1);
    st = kilnd_workers_create(&f->loop, &o, on_event, f, &f->pool);
    assert_int_equal(kiln_status_code(st), KILN_STATUS_INVALID_ARGUMENT);
    assert_contains(kiln_status_message(st), bad_tmp[i]);
    assert_contains(kiln_status_message(st), "TMPDIR");
    kiln_status_free(st);
    assert_null(f->pool);
  }
  setenv("TMPDIR", f->tmp, 1);
}

static void test_instant_death_backs_off(void **state) {
  fixture_t *f = *state;
  kilnd_workers_options_t o = base_options(1);
  o.worker_path = "/bin/false"; /* spawns fine, dies at once, never says Hello */
  kiln_status_t st = kilnd_workers_create(&f->loop, &o, on_event, f, &f->pool);
  assert_null(st);
  wait_for(f, never, 0, 1300);
  kilnd_workers_stats_t s;
  kilnd_workers_stats(f->pool, &s);
  /* Deaths at about 0, 0.1, 0.3, 0.7 s (then 1.5 s): backoff, not a spin. */
  if (s.crashes < 2 || s.crashes > 6) fail_msg("%llu deaths in 1.3 s", (unsigned long long)s.crashes);
  assert_int_equal(kilnd_workers_idle(f->pool), 0);
  assert_int_equal(f->ready, 0);
  /* No Hello: no compiler identity, and the out-param cleared. */
  assert_null(kilnd_workers_compiler(f->pool));
  kilnd_compiler_info_t info;
  memset(&info, 'x', sizeof info);
  assert_false(kilnd_workers_identity(f->pool, &info));
  assert_string_equal(info.name, "");
  assert_string_equal(info.version, "");
  kilnd_task_t t = {
      .id = 1, .source = (const uint8_t *)"x", .source_len = 1, .targets = SM89, .n_targets = 1};
  st = kilnd_workers_submit(f->pool, &t);
  assert_int_equal(kiln_status_consume_code(st), KILN_STATUS_FAILED_PRECONDITION);
}

static void test_broken_framing_kills_worker(void **state) {
  fixture_t *f = *state;
  char script[600];
  snprintf(script, sizeof script, "%s/bad-worker", f->tmp);
  /* A length of 0xffffffff, over the 1 GiB cap; then it would sit there. */
  write_script(script, "#!/bin/sh\nprintf '\\377\\377\\377\\377'\nexec sleep 60\n");
  kilnd_workers_options_t o = base_options(1);
  o.worker_path = script;
  kiln_status_t st = kilnd_workers_create(&f->loop, &o, on_event, f, &f->pool);
  assert_null(st);
  int64_t t0 = kiln_time_monotonic_ns();
  wait_for(f, never, 0, 600);
  kilnd_workers_stats_t s;
  kilnd_workers_stats(f->pool, &s);
  /* Killed well before its sleep ended, and replaced (again and again). */
  assert_true(s.crashes >= 1);
  assert_true(s.restarts >= 1);
  assert_true(kiln_time_monotonic_ns() - t0 < 5000000000LL);
  assert_int_equal(kilnd_workers_idle(f->pool), 0);
}

int main(void) {
  /* What kilnd's main does: a worker dying mid-write must not kill us. */
  signal(SIGPIPE, SIG_IGN);
  const struct CMUnitTest tests[] = {
      /* First: it checks what the process's first pool sweeps. */
      cmocka_unit_test_setup_teardown(test_scratch_sweep_at_start, setup, teardown),
      cmocka_unit_test_setup_teardown(test_compile_two_targets, setup, teardown),
      cmocka_unit_test_setup_teardown(test_bad_ir, setup, teardown),
      cmocka_unit_test_setup_teardown(test_unknown_target_fails_alone, setup, teardown),
      cmocka_unit_test_setup_teardown(test_crash_is_reported_and_replaced, setup, teardown),
      cmocka_unit_test_setup_teardown(test_hang_times_out, setup, teardown),
      cmocka_unit_test_setup_teardown(test_memory_limit, setup, teardown),
      cmocka_unit_test_setup_teardown(test_cancel_running_task, setup, teardown),
      cmocka_unit_test_setup_teardown(test_two_workers_two_tasks, setup, teardown),
      cmocka_unit_test_setup_teardown(test_submit_checks, setup, teardown),
      cmocka_unit_test_setup_teardown(test_close_with_running_task, setup, teardown),
      cmocka_unit_test_setup_teardown(test_external_kilnc_same_bytes, setup, teardown),
      cmocka_unit_test_setup_teardown(test_external_missing_compiler, setup, teardown),
      cmocka_unit_test_setup_teardown(test_external_template_expansion, setup, teardown),
      cmocka_unit_test_setup_teardown(test_worker_binds_now_and_its_tools_do_not, setup, teardown),
      cmocka_unit_test_setup_teardown(test_external_failures, setup, teardown),
      cmocka_unit_test_setup_teardown(test_create_checks, setup, teardown),
      cmocka_unit_test_setup_teardown(test_instant_death_backs_off, setup, teardown),
      cmocka_unit_test_setup_teardown(test_broken_framing_kills_worker, setup, teardown),
      cmocka_unit_test_setup_teardown(test_outside_sigkill_is_not_oom, setup, teardown),
      cmocka_unit_test_setup_teardown(test_scratch_removed_when_killed, setup, teardown),
      cmocka_unit_test_setup_teardown(test_scratch_removal_retried, setup, teardown),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
