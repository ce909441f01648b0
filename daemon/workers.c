/* The compile worker pool: kiln-worker processes driven from the libuv loop.
 *
 * Each slot of the pool holds at most one live worker. A worker's life:
 *
 *   STARTING --Hello--> IDLE --submit--> BUSY --TaskFinished--> IDLE
 *      |                  |                |
 *      +------------------+----------------+--> DYING --exit + EOFs--> CLOSING --> freed
 *         (killed: start timeout, task timeout, cancel, protocol violation,
 *          pool close; or it died on its own)
 *
 * Handles: each worker owns five (process, stdin/stdout/stderr pipes, one timer
 * used in turn as start timeout, task timeout and end-of-file grace) and is freed
 * when the fifth close callback has run; each slot owns a respawn timer. The pool
 * is freed, and close's `done` called, when every worker is freed, every slot timer
 * closed, no crash report is being written and no dead worker's scratch directory
 * is being removed.
 *
 * A death is handled once all three of these happened: exit_cb, EOF on stdout and
 * EOF on stderr (so that the last events and the last words on stderr, such as
 * "out_of_memory", are read), or 2 s after exit_cb (a grandchild that escaped the
 * group kill may hold a pipe open). Then the task's unreported targets fail with a
 * code chosen by why the worker died (CANCELLED, DEADLINE_EXCEEDED, RESOURCE_EXHAUSTED
 * when its stderr says it ran out of memory or it was SIGKILLed by someone else,
 * INTERNAL otherwise); for anything but a cancel, the IR is first written to
 * crash_dir/<task>.mlir on libuv's thread pool (disk stays off the loop) and the
 * failures name that file. Its scratch directory (its TMPDIR, which kilnd named
 * with --scratch) is removed on the thread pool, whatever killed it. The slot is
 * then refilled: at once, or after a backoff when the worker died before it was
 * ready.
 *
 * Invariants: every submitted task gets exactly one TARGET_DONE or TARGET_FAILED
 * per target and then FINISHED, unless the pool is closed first; a task is owned by
 * exactly one of a BUSY or DYING worker or a pending crash report; a worker is
 * idle only after its Hello; frames are at most 1 GiB (worker.proto) and anything
 * else the worker sends out of turn is a protocol violation that kills it.
 */
#include "daemon/workers.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <limits.h>
#include <signal.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "base/alloc.h"
#include "base/buf.h"
#include "base/file.h"
#include "base/log.h"
#include "base/time.h"
#include "kiln/worker/v1/worker.pb-c.h"

extern char **environ;

#define MAX_FRAME_BYTES  (1u << 30)
#define MAX_TASK_TARGETS 64
#define MIN_MEMORY_LIMIT ((uint64_t)256 << 20)
#define START_TIMEOUT_MS 60000
#define EOF_GRACE_MS     2000
#define CLOSE_GRACE_MS   1000
#define BACKOFF_FIRST_MS 100
#define BACKOFF_MAX_MS   30000
#define STDERR_LINE_MAX  2048
#define STDERR_TAIL      4096
#define LOG_RATE_PER_S   20.0
#define LOG_BURST        100.0
#define READ_CHUNK       65536

typedef enum wstate_e {
  W_STARTING,
  W_IDLE,
  W_BUSY,
  W_DYING,
  W_CLOSING,
} wstate_t;

typedef enum kill_reason_e {
  KILL_NONE,          /* died on its own */
  KILL_START_TIMEOUT, /* no Hello in time */
  KILL_TIMEOUT,       /* the task ran past task_timeout_ms */
  KILL_CANCEL,
  KILL_PROTOCOL, /* sent something broken */
  KILL_CLOSE,    /* the pool is closing */
} kill_reason_t;

typedef struct task_s {
  uint64_t id;
  char *source_name;
  uint8_t *source; /* kept for the crash report */
  size_t source_len;
  char **targets;
  bool *reported;
  size_t n_targets;
} task_t;

typedef struct slot_s slot_t;
typedef struct worker_s worker_t;

struct worker_s {
  kilnd_workers_t *pool;
  slot_t *slot; /* NULL once its slot was refilled */
  worker_t *prev, *next;
  wstate_t state;
  char name[64];
  int pid;
  int64_t oom_kills_at_task; /* oom_kills() when its task was handed over */
  uv_process_t process;
  uv_pipe_t in, out, err;
  uv_timer_t timer;
  int open_handles;
  bool spawned;
  bool hello;
  bool exited, out_eof, err_eof;
  int64_t exit_status;
  int term_signal;
  kill_reason_t reason;
  char *detail;  /* KILL_PROTOCOL: what was wrong */
  char *scratch; /* its scratch directory (--scratch), removed once it is dead */
  task_t *task;
  /* stdout: frames */
  uint8_t *rx;
  size_t rx_len, rx_cap;
  /* stderr: the current line, the last bytes, the log rate limit */
  kiln_buf_t line;
  bool line_cut;
  char chunk[8192]; /* stderr reads land here */
  char tail[STDERR_TAIL + 1];
  size_t tail_len;
  double tokens;
  int64_t tokens_ns;
  uint64_t dropped;
};

struct slot_s {
  kilnd_workers_t *pool;
  size_t index; /* 1-based: worker-<index> */
  worker_t *worker;
  uv_timer_t respawn;
  unsigned quick_failures;
};

typedef struct write_req_s {
  uv_write_t req;
  uint8_t *frame;
} write_req_t;

/* A crash report being written on the thread pool. */
typedef struct dump_s {
  uv_work_t work;
  kilnd_workers_t *pool;
  task_t *task;
  char worker[64]; /* the name of the worker that died */
  kiln_status_code_t code;
  char *what; /* "<worker>: the compiler crashed (signal 6, Aborted)" */
  char *hint; /* what would fix it: "; raise ..." */
  char *path; /* crash_dir/<task>.mlir */
  int err;    /* errno of writing it; 0 on success */
} dump_t;

struct kilnd_workers_s {
  uv_loop_t *loop;
  char oom_counter[600];       /* oom_counter_path: the file whose oom_kill line is read */
  kilnd_workers_options_t opt; /* strings owned */
  kilnd_task_event_fn_t fn;
  void *user;
  slot_t *slots;
  size_t count;
  size_t jobs;
  worker_t *all; /* every worker not yet freed */
  size_t open_slot_timers;
  size_t pending_dumps;
  size_t pending_removals; /* scratch directory removals on the thread pool */
  char *scratch_base;      /* $TMPDIR, else /tmp: where scratch directories are made */
  char **scratch_left;     /* directories a removal could not remove yet (owned) */
  size_t n_scratch_left;
  bool scratch_final_try; /* closing: they were queued once more */
  char *compiler;
  kilnd_compiler_info_t identity; /* valid once `compiler` is set */
  kilnd_workers_stats_t stats;
  bool closing;
  bool done_called;
  void (*done)(void *user);
  void *done_user;
};

/* worker="worker-3" pid=1234 in a log line: the pid is for the operator's log
 * only; what clients see (job events, messages) names the worker alone. */
static void log_worker(kiln_buf_t *fields, const worker_t *w) {
  kiln_log_kv_str(fields, "worker", w->name);
  if (w->pid > 0) kiln_buf_appendf(fields, " pid=%d", w->pid);
}

/* The number in a "key N" line of a small kernel file; -1 when unreadable. */
static int64_t counter_in(const char *path, const char *key) {
  FILE *f = fopen(path, "re");
  if (!f) return -1;
  char line[256];
  int64_t v = -1;
  size_t klen = strlen(key);
  while (v < 0 && fgets(line, sizeof line, f)) {
    if (strncmp(line, key, klen) == 0 && line[klen] == ' ') v = strtoll(line + klen + 1, NULL, 10);
  }
  fclose(f);
  return v;
}

/* Where the kernel counts the processes its out-of-memory killer ended: kilnd's
 * own cgroup (v2 memory.events, where its workers live) when it has the count,
 * else the machine's /proc/vmstat (Linux 4.13 and later). Found once, at start. */
static void oom_counter_path(char *out, size_t cap) {
  char line[512];
  FILE *f = fopen("/proc/self/cgroup", "re");
  snprintf(out, cap, "/proc/vmstat");
  while (f && fgets(line, sizeof line, f)) {
    if (strncmp(line, "0::", 3) != 0) continue;
    line[strcspn(line, "\n")] = '\0';
    char path[600];
    snprintf(path, sizeof path, "/sys/fs/cgroup%s/memory.events", line + 3);
    if (counter_in(path, "oom_kill") >= 0) snprintf(out, cap, "%s", path);
    break;
  }
  if (f) fclose(f);
}

/* The count (-1 when unreadable): a small in-memory kernel file, read on the loop
 * once when a task starts and once when its worker dies of SIGKILL. */
static int64_t oom_kills(const kilnd_workers_t *pool) { return counter_in(pool->oom_counter, "oom_kill"); }

static void spawn_slot(slot_t *slot);
static void kill_worker(worker_t *w, kill_reason_t reason, const char *detail);
static void maybe_free_pool(kilnd_workers_t *pool);
static void queue_removal(kilnd_workers_t *pool, char *path_owned);

/* ---- Events out ------------------------------------------------------------------ */

static void emit(kilnd_workers_t *pool, uint64_t task_id, const kilnd_task_event_t *ev) {
  if (pool->closing) return;
  pool->fn(pool->user, task_id, ev);
}

static void task_free(task_t *t) {
  if (!t) return;
  for (size_t i = 0; i < t->n_targets; i++) kiln_free(t->targets[i]);
  kiln_free(t->targets);
  kiln_free(t->reported);
  kiln_free(t->source);
  kiln_free(t->source_name);
  kiln_free(t);
}

/* Fails every unreported target of `t` with `code` and "<what> while compiling
 * <target> from <source><suffix>", then FINISHED; frees `t`. */
static void task_fail_rest(kilnd_workers_t *pool, task_t *t, const char *worker, kiln_status_code_t code,
                           const char *what, const char *suffix) {
  kiln_buf_t msg;
  kiln_buf_init(&msg);
  for (size_t i = 0; i < t->n_targets; i++) {
    if (t->reported[i]) continue;
    t->reported[i] = true;
    kiln_buf_clear(&msg);
    kiln_buf_appendf(&msg, "%s while compiling %s from %s%s", what, t->targets[i], t->source_name, suffix);
    kilnd_task_event_t ev = {.kind = KILND_TASK_TARGET_FAILED,
                             .worker = worker,
                             .target = t->targets[i],
                             .code = code,
                             .message = msg.data};
    emit(pool, t->id, &ev);
  }
  kiln_buf_deinit(&msg);
  pool->stats.tasks++;
  kilnd_task_event_t fin = {.kind = KILND_TASK_FINISHED, .worker = worker};
  emit(pool, t->id, &fin);
  task_free(t);
}

static void emit_ready(worker_t *w) {
  if (w->state != W_IDLE || w->pool->closing) return;
  kilnd_task_event_t ev = {.kind = KILND_TASK_WORKER_READY, .worker = w->name, .pid = w->pid};
  emit(w->pool, 0, &ev);
}

/* ---- Handles and freeing ---------------------------------------------------------- */

static void remove_worker(worker_t *w) {
  kilnd_workers_t *pool = w->pool;
  if (w->prev)
    w->prev->next = w->next;
  else
    pool->all = w->next;
  if (w->next) w->next->prev = w->prev;
  task_free(w->task);
  kiln_free(w->detail);
  kiln_free(w->scratch);
  kiln_free(w->rx);
  kiln_buf_deinit(&w->line);
  kiln_free(w);
  maybe_free_pool(pool);
}

static void on_worker_handle_closed(uv_handle_t *h) {
  worker_t *w = h->data;
  if (--w->open_handles == 0) remove_worker(w);
}

static void close_worker_handles(worker_t *w) {
  w->state = W_CLOSING;
  uv_handle_t *handles[] = {(uv_handle_t *)&w->process, (uv_handle_t *)&w->in, (uv_handle_t *)&w->out,
                            (uv_handle_t *)&w->err, (uv_handle_t *)&w->timer};
  for (size_t i = 0; i < sizeof handles / sizeof *handles; i++) {
    if (!uv_is_closing(handles[i])) uv_close(handles[i], on_worker_handle_closed);
  }
}

static void maybe_free_pool(kilnd_workers_t *pool) {
  if (!pool->closing || pool->all || pool->open_slot_timers || pool->pending_dumps ||
      pool->pending_removals || pool->done_called) {
    return;
  }
  if (pool->n_scratch_left && !pool->scratch_final_try) {
    pool->scratch_final_try = true; /* one last time for what earlier removals left */
    queue_removal(pool, NULL);
    return;
  }
  pool->done_called = true;
  void (*done)(void *) = pool->done;
  void *user = pool->done_user;
  kiln_free(pool->slots);
  kiln_free((char *)pool->opt.worker_path);
  kiln_free((char *)pool->opt.crash_dir);
  kiln_free((char *)pool->opt.external_compiler);
  kiln_free((char *)pool->opt.external_args);
  for (size_t i = 0; i < pool->n_scratch_left; i++) {
    kiln_buf_t fields; /* tried at least twice, each failure logged: given up now */
    kiln_buf_init(&fields);
    kiln_log_kv_str(&fields, "dir", pool->scratch_left[i]);
    kiln_log_kv_str(&fields, "reason", "still there when the pool closed");
    kiln_log_fields(KILN_LOG_WARN, "worker_scratch_left", &fields);
    kiln_buf_deinit(&fields);
    kiln_free(pool->scratch_left[i]);
  }
  kiln_free(pool->scratch_left);
  kiln_free(pool->scratch_base);
  kiln_free(pool->compiler);
  kiln_free(pool);
  if (done) done(user);
}

static void on_slot_timer_closed(uv_handle_t *h) {
  slot_t *slot = h->data;
  kilnd_workers_t *pool = slot->pool;
  pool->open_slot_timers--;
  maybe_free_pool(pool);
}

/* ---- Crash reports ---------------------------------------------------------------- */

/* What crash files may hold in all (the newest is kept whatever its size). */
#define CRASH_KEEP_BYTES (64ull << 20)

typedef struct crash_file_s {
  char *name;
  int64_t mtime_ns;
  uint64_t size;
} crash_file_t;

static int newest_first(const void *a, const void *b) {
  const crash_file_t *x = a, *y = b;
  if (x->mtime_ns != y->mtime_ns) return x->mtime_ns > y->mtime_ns ? -1 : 1;
  return strcmp(y->name, x->name);
}

/* Removes crash files past the newest `keep` or past CRASH_KEEP_BYTES. Runs on
 * the thread pool after each dump; two at once only race to unlink the same
 * old file, and ENOENT is fine. */
static void prune_crashes(const char *dir, uint32_t keep) {
  DIR *d = opendir(dir);
  if (!d) return;
  crash_file_t *files = NULL;
  size_t n = 0, cap = 0;
  for (struct dirent *e; (e = readdir(d));) {
    size_t len = strlen(e->d_name);
    if (len < 6 || strcmp(e->d_name + len - 5, ".mlir") != 0) continue;
    struct stat st;
    if (fstatat(dirfd(d), e->d_name, &st, AT_SYMLINK_NOFOLLOW) != 0 || !S_ISREG(st.st_mode)) continue;
    if (n == cap) files = kiln_realloc(files, (cap = cap ? cap * 2 : 64) * sizeof *files);
    files[n++] =
        (crash_file_t){kiln_strdup(e->d_name), (int64_t)st.st_mtim.tv_sec * 1000000000 + st.st_mtim.tv_nsec,
                       (uint64_t)st.st_size};
  }
  qsort(files, n, sizeof *files, newest_first);
  uint64_t bytes = 0;
  for (size_t i = 0; i < n; i++) {
    bytes += files[i].size;
    if (i > 0 && (i >= keep || bytes > CRASH_KEEP_BYTES)) {
      if (unlinkat(dirfd(d), files[i].name, 0) == 0) {
        kiln_log(KILN_LOG_INFO, "crash_file_removed", "file=%s/%s reason=%s", dir, files[i].name,
                 i >= keep ? "count" : "bytes");
      }
    }
    kiln_free(files[i].name);
  }
  kiln_free(files);
  closedir(d);
}

static void dump_work(uv_work_t *req) {
  dump_t *d = req->data;
  const char *dir = d->pool->opt.crash_dir;
  if (mkdir(dir, 0700) != 0 && errno != EEXIST) {
    d->err = errno;
    return;
  }
  int fd = open(d->path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
  if (fd < 0) {
    d->err = errno;
    return;
  }
  const uint8_t *p = d->task->source;
  size_t left = d->task->source_len;
  while (left > 0) {
    ssize_t n = write(fd, p, left);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) {
      d->err = errno;
      break;
    }
    p += n;
    left -= (size_t)n;
  }
  if (close(fd) != 0 && !d->err) d->err = errno;
  prune_crashes(dir, d->pool->opt.crash_keep ? d->pool->opt.crash_keep : 32);
}

static void dump_done(uv_work_t *req, int status) {
  dump_t *d = req->data;
  kilnd_workers_t *pool = d->pool;
  pool->pending_dumps--;
  kiln_buf_t suffix;
  kiln_buf_init(&suffix);
  /* Clients get the file's name, not the server's folders (kilnd's log has the path). */
  const char *name = strrchr(d->path, '/') ? strrchr(d->path, '/') + 1 : d->path;
  if (status < 0) {
    kiln_buf_appendf(&suffix, "; the IR could not be kept (%s)", uv_strerror(status));
  } else if (d->err) {
    kiln_buf_appendf(&suffix, "; the IR could not be kept in kilnd's crash folder (%s)", strerror(d->err));
    kiln_log(KILN_LOG_WARN, "crash_file_failed", "file=%s error=\"%s\"", d->path, strerror(d->err));
  } else {
    kiln_buf_appendf(&suffix, "; the IR is kept in kilnd's crash folder as %s", name);
    kiln_log(KILN_LOG_INFO, "crash_file_kept", "file=%s", d->path);
  }
  kiln_buf_append_str(&suffix, d->hint);
  if (pool->closing) {
    task_free(d->task);
  } else {
    task_fail_rest(pool, d->task, d->worker, d->code, d->what, suffix.data);
  }
  kiln_buf_deinit(&suffix);
  kiln_free(d->what);
  kiln_free(d->hint);
  kiln_free(d->path);
  kiln_free(d);
  maybe_free_pool(pool);
}

/* Fails the rest of `t` (taken) with `what` and `hint`, keeping its IR first when
 * a crash_dir is configured. */
static void fail_with_report(kilnd_workers_t *pool, task_t *t, const char *worker, kiln_status_code_t code,
                             const char *what, const char *hint) {
  if (!pool->opt.crash_dir) {
    kiln_buf_t suffix;
    kiln_buf_init(&suffix);
    kiln_buf_appendf(&suffix, "; the IR was not kept (no crash directory is configured)%s", hint);
    task_fail_rest(pool, t, worker, code, what, suffix.data);
    kiln_buf_deinit(&suffix);
    return;
  }
  dump_t *d = kiln_calloc(1, sizeof *d);
  d->pool = pool;
  d->task = t;
  snprintf(d->worker, sizeof d->worker, "%s", worker);
  d->code = code;
  d->what = kiln_strdup(what);
  d->hint = kiln_strdup(hint);
  kiln_buf_t path;
  kiln_buf_init(&path);
  kiln_buf_appendf(&path, "%s/%" PRIu64 ".mlir", pool->opt.crash_dir, t->id);
  d->path = kiln_buf_take(&path);
  d->work.data = d;
  pool->pending_dumps++;
  int rc = uv_queue_work(pool->loop, &d->work, dump_work, dump_done);
  if (rc < 0) dump_done(&d->work, rc);
}

/* ---- Scratch directories ------------------------------------------------------------ */

/* Each worker gets a new scratch directory, $TMPDIR/kiln-worker-<kilnd pid>-<n>,
 * which it creates (0700) and makes its TMPDIR (daemon/worker/scratch.c): every
 * temporary file of the worker, its children and its tools (the toolkit links,
 * ptxas's files, an external compiler's task folders) lies there. A worker
 * killed in the middle of a task cleans up nothing, so kilnd removes the
 * directory, on the thread pool, once the worker is dead; one that cannot be
 * removed yet (a grandchild that escaped the group kill still writing) is tried
 * again at the next death and once more at close. When a pool starts, before
 * its first worker, it looks for what a killed kilnd left, and removes it the
 * same way: directories of that form whose pid has exited (or is a zombie) and,
 * for the first pool of a process, those of its own pid (a kilnd restarted as
 * pid 1 in a container has the pid of the one before). Only directories that
 * are this user's and private (0700, as workers make them) are ever removed: in
 * a shared /tmp a name of that form may be anyone's, and TMPDIR must not be
 * shared across pid namespaces. */

/* Whether `pid` has exited: no such process, or only a zombie (a killed kilnd's
 * workers stay zombies until their new parent reaps them). A process of another
 * user, or one whose /proc entry cannot be read, counts as alive. */
static bool pid_exited(long pid) {
  if (kill((pid_t)pid, 0) != 0) return errno == ESRCH;
  char path[40], text[512];
  snprintf(path, sizeof path, "/proc/%ld/stat", pid);
  int fd = open(path, O_RDONLY | O_CLOEXEC);
  if (fd < 0) return false;
  ssize_t n = read(fd, text, sizeof text - 1);
  close(fd);
  if (n <= 0) return false;
  text[n] = '\0';
  const char *paren = strrchr(text, ')'); /* "pid (comm) S ...": comm may hold anything */
  return paren && paren[1] == ' ' && (paren[2] == 'Z' || paren[2] == 'X');
}

/* The pid in "kiln-worker-<digits>" or "kiln-worker-<digits>-<digits>" (the first
 * form is what external-mode workers of earlier versions made), else 0. */
static long scratch_pid(const char *name) {
  static const char prefix[] = "kiln-worker-";
  if (strncmp(name, prefix, sizeof prefix - 1) != 0) return 0;
  const char *p = name + sizeof prefix - 1;
  long pid = 0;
  size_t digits = 0;
  for (; *p >= '0' && *p <= '9' && digits < 10; p++, digits++) pid = pid * 10 + (*p - '0');
  if (digits == 0 || pid <= 0 || pid > INT_MAX) return 0;
  if (*p == '-') {
    const char *q = ++p;
    while (*p >= '0' && *p <= '9') p++;
    if (p == q) return 0;
  }
  return *p ? 0 : pid;
}

/* Whether `path` is a directory of this user that no one else may enter (a
 * worker's scratch directory is made 0700). In a sticky /tmp no one else can
 * then rename or remove it, so what is checked stays true. ENOENT: gone. */
static bool private_dir(const char *path, int *out_errno) {
  struct stat sb;
  *out_errno = 0;
  if (lstat(path, &sb) != 0) {
    *out_errno = errno;
    return false;
  }
  return S_ISDIR(sb.st_mode) && sb.st_uid == geteuid() && (sb.st_mode & 077) == 0;
}

/* A removal on the thread pool. What could not be removed comes back in
 * `paths` (its first `n_left`). */
typedef struct removal_s {
  uv_work_t work;
  kilnd_workers_t *pool;
  char **paths; /* owned, each owned */
  size_t n_paths, n_left;
} removal_t;

/* Removes one dead worker's scratch directory (any thread). False when it should
 * be tried again (something of it is left, logged); true when it is gone, or is
 * not a private directory of this user (a name someone else took before the
 * worker could: logged and left alone). */
static bool remove_one(const char *path) {
  int err;
  if (!private_dir(path, &err)) {
    if (err == ENOENT) return true;
    kiln_buf_t fields;
    kiln_buf_init(&fields);
    kiln_log_kv_str(&fields, "dir", path);
    kiln_log_kv_str(&fields, "reason", err ? strerror(err) : "not a directory of this user with mode 0700");
    kiln_log_fields(KILN_LOG_WARN, "worker_scratch_left", &fields);
    kiln_buf_deinit(&fields);
    return err == 0;
  }
  kiln_status_t st = kiln_file_tree_remove(path);
  if (!st) return true;
  kiln_log_status(KILN_LOG_WARN, "worker_scratch_left", st, "retry=later");
  kiln_status_free(st);
  return false;
}

static void removal_work(uv_work_t *req) {
  removal_t *r = req->data;
  size_t kept = 0;
  for (size_t i = 0; i < r->n_paths; i++) {
    if (remove_one(r->paths[i])) {
      kiln_free(r->paths[i]);
    } else {
      r->paths[kept++] = r->paths[i];
    }
  }
  r->n_left = kept;
}

/* Puts `path_owned` on the list the next removal takes. */
static void left_add(kilnd_workers_t *pool, char *path_owned) {
  pool->scratch_left = kiln_realloc(pool->scratch_left, (pool->n_scratch_left + 1) * sizeof(char *));
  pool->scratch_left[pool->n_scratch_left++] = path_owned;
}

static void removal_done(uv_work_t *req, int status) {
  removal_t *r = req->data;
  kilnd_workers_t *pool = r->pool;
  pool->pending_removals--;
  if (status < 0) r->n_left = r->n_paths; /* it never ran */
  /* What is left is tried again with the next removal. */
  for (size_t i = 0; i < r->n_left; i++) left_add(pool, r->paths[i]);
  kiln_free(r->paths);
  kiln_free(r);
  maybe_free_pool(pool);
}

/* Queues the removal of `path_owned` (NULL: none) and of every directory an
 * earlier removal left. */
static void queue_removal(kilnd_workers_t *pool, char *path_owned) {
  removal_t *r = kiln_calloc(1, sizeof *r);
  r->pool = pool;
  r->paths = kiln_calloc(pool->n_scratch_left + 1, sizeof(char *));
  for (size_t i = 0; i < pool->n_scratch_left; i++) r->paths[r->n_paths++] = pool->scratch_left[i];
  pool->n_scratch_left = 0;
  if (path_owned) r->paths[r->n_paths++] = path_owned;
  r->work.data = r;
  pool->pending_removals++;
  int rc = uv_queue_work(pool->loop, &r->work, removal_work, removal_done);
  if (rc < 0) removal_done(&r->work, rc);
}

/* A dead worker's scratch directory (with what earlier removals left). */
static void remove_scratch(worker_t *w) {
  char *path = w->spawned ? w->scratch : NULL;
  if (!path) return;
  w->scratch = NULL;
  queue_removal(w->pool, path);
}

/* The last scratch name this process handed out (0: none yet, so no worker of
 * this process has a directory and the sweep may take its own pid's). */
static _Atomic uint64_t scratch_seq;

/* Finds the stale scratch directories in the pool's base (see above) and queues
 * their removal. The folder is read when the pool starts, before any of its
 * workers exists, so no live worker's directory can be taken for a stale one;
 * removing them is disk work, and runs on the thread pool like any other. */
static void sweep_stale(kilnd_workers_t *pool) {
  bool own = atomic_load(&scratch_seq) == 0;
  DIR *d = opendir(pool->scratch_base);
  if (!d) return;
  size_t found = 0;
  for (struct dirent *e; (e = readdir(d)) != NULL;) {
    long pid = scratch_pid(e->d_name);
    if (!pid || (pid == (long)getpid() ? !own : !pid_exited(pid))) continue;
    char *path = kiln_buf_sprintf("%s/%s", pool->scratch_base, e->d_name);
    int err;
    if (!private_dir(path, &err)) { /* someone else's: not ours to judge */
      kiln_free(path);
      continue;
    }
    left_add(pool, path);
    found++;
  }
  closedir(d);
  if (!found) return;
  kiln_buf_t fields;
  kiln_buf_init(&fields);
  kiln_log_kv_str(&fields, "dir", pool->scratch_base);
  kiln_buf_appendf(&fields, " found=%zu", found);
  kiln_log_fields(KILN_LOG_INFO, "worker_scratch_stale", &fields);
  kiln_buf_deinit(&fields);
  queue_removal(pool, NULL);
}

/* A new scratch directory name for a worker about to start (one not in use). */
static char *next_scratch(kilnd_workers_t *pool) {
  kiln_buf_t path;
  kiln_buf_init(&path);
  struct stat sb;
  do {
    kiln_buf_clear(&path);
    kiln_buf_appendf(&path, "%s/kiln-worker-%ld-%" PRIu64, pool->scratch_base, (long)getpid(), ++scratch_seq);
  } while (lstat(path.data, &sb) == 0); /* a kilnd of the same pid before us, say */
  char *out = kiln_buf_take(&path);
  kiln_buf_deinit(&path);
  return out;
}

/* ---- A worker's death ------------------------------------------------------------- */

static bool tail_says_oom(const worker_t *w) {
  static const char *const needles[] = {"out_of_memory", "out of memory", "bad_alloc",
                                        "Cannot allocate memory", "failed to allocate"};
  for (size_t i = 0; i < sizeof needles / sizeof *needles; i++) {
    if (strstr(w->tail, needles[i])) return true;
  }
  return false;
}

static unsigned backoff_ms(unsigned failures) {
  if (failures == 0) return 0;
  unsigned ms = BACKOFF_FIRST_MS;
  for (unsigned i = 1; i < failures && ms < BACKOFF_MAX_MS; i++) ms *= 2;
  return ms < BACKOFF_MAX_MS ? ms : BACKOFF_MAX_MS;
}

static void on_respawn_timer(uv_timer_t *timer) {
  slot_t *slot = timer->data;
  if (!slot->pool->closing && !slot->worker) spawn_slot(slot);
}

static void schedule_respawn(slot_t *slot, bool young) {
  if (young) slot->quick_failures++;
  unsigned ms = young ? backoff_ms(slot->quick_failures) : 0;
  if (ms == 0) {
    spawn_slot(slot);
    return;
  }
  kiln_log(KILN_LOG_WARN, "worker_respawn_delayed", "slot=%zu failures=%u delay_ms=%u", slot->index,
           slot->quick_failures, ms);
  uv_timer_start(&slot->respawn, on_respawn_timer, ms, 0);
}

/* The worker exited and its pipes are drained (or the grace period ran out):
 * report, close, refill the slot. */
static void finalize(worker_t *w) {
  if (w->state == W_CLOSING) return;
  kilnd_workers_t *pool = w->pool;
  uv_timer_stop(&w->timer);
  slot_t *slot = w->slot;
  w->slot = NULL;
  if (slot && slot->worker == w) slot->worker = NULL;
  task_t *t = w->task;
  w->task = NULL;
  bool young = !w->hello;
  kill_reason_t reason = w->reason;

  char status_text[96];
  if (!w->spawned) {
    snprintf(status_text, sizeof status_text, "not started");
  } else if (w->term_signal) {
    snprintf(status_text, sizeof status_text, "signal %d, %s", w->term_signal, strsignal(w->term_signal));
  } else {
    snprintf(status_text, sizeof status_text, "exit status %" PRId64, w->exit_status);
  }
  static const char *const reason_names[] = {"died",   "start-timeout", "task-timeout",
                                             "cancel", "protocol",      "close"};
  kiln_buf_t fields;
  kiln_buf_init(&fields);
  log_worker(&fields, w);
  kiln_log_kv_str(&fields, "reason", reason_names[reason]);
  kiln_log_kv_str(&fields, "status", status_text);
  if (w->detail) kiln_log_kv_str(&fields, "detail", w->detail);
  if (t) kiln_buf_appendf(&fields, " task=%" PRIu64, t->id);
  bool normal = reason == KILL_CLOSE || reason == KILL_CANCEL;
  kiln_log_fields(normal ? KILN_LOG_INFO : KILN_LOG_WARN, "worker_exit", &fields);
  kiln_buf_deinit(&fields);

  if (!pool->closing) {
    pool->stats.restarts++;
    if (reason == KILL_NONE || reason == KILL_PROTOCOL) pool->stats.crashes++;
  }

  close_worker_handles(w);
  remove_scratch(w);

  if (t && pool->closing) {
    task_free(t);
  } else if (t) {
    kiln_buf_t what;
    kiln_buf_init(&what);
    kiln_status_code_t code = KILN_STATUS_INTERNAL;
    const char *hint = "; please report this compiler crash with the model";
    kiln_buf_appendf(&what, "%s: ", w->name);
    switch (reason) {
      case KILL_CANCEL:
        task_fail_rest(pool, t, w->name, KILN_STATUS_CANCELLED, "the task was cancelled", "");
        t = NULL;
        break;
      case KILL_TIMEOUT:
        code = KILN_STATUS_DEADLINE_EXCEEDED;
        kiln_buf_appendf(&what, "stopped at the task timeout of %" PRId64 " ms", pool->opt.task_timeout_ms);
        hint = "; raise kilnd's worker-timeout if models this big need longer";
        break;
      case KILL_PROTOCOL:
        kiln_buf_appendf(&what, "the worker broke the worker protocol (%s) and was replaced",
                         w->detail ? w->detail : "?");
        hint = "; please report this kiln bug";
        break;
      default:
        int64_t ooms = w->term_signal == SIGKILL ? oom_kills(pool) : -1;
        if (w->term_signal == SIGKILL && ooms >= 0 && w->oom_kills_at_task >= 0 &&
            ooms == w->oom_kills_at_task) {
          /* Our own kills have a reason, and the kernel's OOM killer did not act:
           * an operator or another process killed it. Nothing about the model. */
          code = KILN_STATUS_UNAVAILABLE;
          kiln_buf_append_str(&what,
                              "the compiler was killed (signal 9) from outside kilnd, not by the kernel's "
                              "out-of-memory killer (its count did not move)");
          hint = "; compile again";
        } else if (w->term_signal == SIGKILL) {
          code = KILN_STATUS_RESOURCE_EXHAUSTED;
          kiln_buf_append_str(
              &what, ooms >= 0 ? "the compiler was killed (signal 9) by the kernel's out-of-memory killer"
                               : "the compiler was killed (signal 9, Killed), most likely by the "
                                 "kernel's out-of-memory killer");
          hint = "; the server ran short of memory: run fewer workers or set kilnd's worker-memory-limit";
        } else if ((w->term_signal || w->exit_status) && tail_says_oom(w)) {
          code = KILN_STATUS_RESOURCE_EXHAUSTED;
          kiln_buf_appendf(&what, "the compiler ran out of memory (%s", status_text);
          if (pool->opt.memory_limit_bytes) {
            kiln_buf_appendf(&what,
                             "; the worker memory limit is %" PRIu64 " bytes, kilnd worker-memory-limit",
                             pool->opt.memory_limit_bytes);
          }
          kiln_buf_append_str(&what, ")");
          hint =
              pool->opt.memory_limit_bytes
                  ? "; raise kilnd's worker-memory-limit, or compile fewer targets per request"
                  : "; the server ran short of memory: run fewer workers or set kilnd's worker-memory-limit";
        } else if (w->term_signal) {
          kiln_buf_appendf(&what, "the compiler crashed (%s)", status_text);
        } else if (w->exit_status) {
          kiln_buf_appendf(&what, "the compiler exited with status %" PRId64, w->exit_status);
        } else {
          kiln_buf_append_str(&what, "the worker exited (status 0) in the middle of the task");
        }
        break;
    }
    if (t) fail_with_report(pool, t, w->name, code, what.data, hint);
    kiln_buf_deinit(&what);
  }

  if (slot && !pool->closing && !slot->worker) schedule_respawn(slot, young);
}

static void on_grace_timer(uv_timer_t *timer) { finalize(timer->data); }

static void maybe_finalize(worker_t *w) {
  if (w->state == W_CLOSING || !w->exited) return;
  if (w->pool->closing || (w->out_eof && w->err_eof)) {
    finalize(w);
  } else if (!uv_is_active((uv_handle_t *)&w->timer)) {
    uv_timer_start(&w->timer, on_grace_timer, EOF_GRACE_MS, 0);
  }
}

static void on_worker_exit(uv_process_t *process, int64_t exit_status, int term_signal) {
  worker_t *w = process->data;
  w->exited = true;
  w->exit_status = exit_status;
  w->term_signal = term_signal;
  /* Children of the worker (fan-out, an external compiler) may outlive it. */
  if (w->pid > 0) kill(-w->pid, SIGKILL);
  if (w->state != W_DYING) {
    w->state = W_DYING;
    w->reason = KILL_NONE;
  }
  uv_timer_stop(&w->timer);
  maybe_finalize(w);
}

static void kill_worker(worker_t *w, kill_reason_t reason, const char *detail) {
  if (w->state == W_DYING || w->state == W_CLOSING) return;
  w->state = W_DYING;
  w->reason = reason;
  if (detail && !w->detail) w->detail = kiln_strdup(detail);
  uv_timer_stop(&w->timer);
  /* Never kill(0) or kill(-0): that is kilnd's own process group. */
  if (w->pid > 0 && kill(-w->pid, SIGKILL) != 0) kill(w->pid, SIGKILL);
}

static void protocol_violation(worker_t *w, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void protocol_violation(worker_t *w, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  char *why = kiln_buf_vsprintf(fmt, ap);
  va_end(ap);
  kill_worker(w, KILL_PROTOCOL, why);
  kiln_free(why);
}

/* ---- Timers ---------------------------------------------------------------------- */

static void on_start_timeout(uv_timer_t *timer) {
  worker_t *w = timer->data;
  kill_worker(w, KILL_START_TIMEOUT, "no Hello within 60 s of start");
}

static void on_task_timeout(uv_timer_t *timer) {
  worker_t *w = timer->data;
  kill_worker(w, KILL_TIMEOUT, NULL);
}

static void on_close_grace(uv_timer_t *timer) {
  worker_t *w = timer->data;
  if (w->pid > 0 && kill(-w->pid, SIGKILL) != 0) kill(w->pid, SIGKILL);
}

static void on_eof_without_exit(uv_timer_t *timer) {
  worker_t *w = timer->data;
  kill_worker(w, KILL_PROTOCOL, "closed its stdout but did not exit");
}

/* ---- stdout: framed events --------------------------------------------------------- */

static size_t target_index(const task_t *t, const char *target) {
  for (size_t i = 0; i < t->n_targets; i++) {
    if (target && !strcmp(t->targets[i], target)) return i;
  }
  return SIZE_MAX;
}

static void handle_hello(worker_t *w, const Kiln__Worker__V1__Hello *h) {
  kilnd_workers_t *pool = w->pool;
  if (w->state != W_STARTING) {
    protocol_violation(w, "a second Hello");
    return;
  }
  w->hello = true;
  w->state = W_IDLE;
  uv_timer_stop(&w->timer);
  if (w->slot) w->slot->quick_failures = 0;
  if (!pool->compiler) {
    kiln_buf_t c;
    kiln_buf_init(&c);
    kilnd_compiler_info_t *id = &pool->identity;
    if (h->external) {
      kiln_buf_appendf(&c, "external %s (%s)", h->external->path,
                       h->external->version && *h->external->version ? h->external->version : "no --version");
      snprintf(id->name, sizeof id->name, "external");
      snprintf(id->version, sizeof id->version, "%s", c.data + strlen("external "));
    } else {
      /* The cache index's form of a compiler identity: "<name> <version> llvm <llvm>". */
      kiln_buf_appendf(&c, "%s %s llvm %s", h->compiler_name, h->compiler_version, h->llvm_version);
      snprintf(id->name, sizeof id->name, "%s", h->compiler_name);
      snprintf(id->version, sizeof id->version, "%s", h->compiler_version);
      snprintf(id->llvm_version, sizeof id->llvm_version, "%s", h->llvm_version);
      snprintf(id->mlir_version, sizeof id->mlir_version, "%s", h->mlir_version);
    }
    pool->compiler = kiln_buf_take(&c);
  }
  kiln_buf_t fields;
  kiln_buf_init(&fields);
  log_worker(&fields, w);
  kiln_log_kv_str(&fields, "compiler", pool->compiler);
  kiln_buf_appendf(&fields, " jobs=%" PRIu32 " memory_limit=%" PRIu64, h->jobs, h->memory_limit_bytes);
  kiln_log_fields(KILN_LOG_INFO, "worker_ready", &fields);
  kiln_buf_deinit(&fields);
  emit_ready(w);
}

static void handle_event(worker_t *w, const Kiln__Worker__V1__WorkerEvent *ev) {
  kilnd_workers_t *pool = w->pool;
  if (ev->kind_case == KILN__WORKER__V1__WORKER_EVENT__KIND_HELLO) {
    if (ev->task_id != 0 || !ev->hello) {
      protocol_violation(w, "a Hello with a task id");
      return;
    }
    handle_hello(w, ev->hello);
    return;
  }
  task_t *t = w->task;
  if (w->state != W_BUSY || !t || ev->task_id != t->id) {
    protocol_violation(w, "an event for task %" PRIu64 " while running %" PRIu64, ev->task_id, t ? t->id : 0);
    return;
  }
  kilnd_task_event_t out = {.worker = w->name, .pid = w->pid};
  switch (ev->kind_case) {
    case KILN__WORKER__V1__WORKER_EVENT__KIND_PROGRESS: {
      const Kiln__Worker__V1__Progress *p = ev->progress;
      if (target_index(t, p->target) == SIZE_MAX) {
        protocol_violation(w, "progress for target '%s', not in the task", p->target);
        return;
      }
      out.kind = KILND_TASK_PROGRESS;
      out.target = p->target;
      out.stage = p->stage;
      out.stage_index = p->stage_index;
      out.stage_count = p->stage_count;
      emit(pool, t->id, &out);
      return;
    }
    case KILN__WORKER__V1__WORKER_EVENT__KIND_TARGET_DONE:
    case KILN__WORKER__V1__WORKER_EVENT__KIND_TARGET_FAILED: {
      bool done = ev->kind_case == KILN__WORKER__V1__WORKER_EVENT__KIND_TARGET_DONE;
      const char *target = done ? ev->target_done->target : ev->target_failed->target;
      size_t i = target_index(t, target);
      if (i == SIZE_MAX || t->reported[i]) {
        protocol_violation(w, "a result for target '%s', %s", target,
                           i == SIZE_MAX ? "not in the task" : "reported twice");
        return;
      }
      t->reported[i] = true;
      out.target = t->targets[i];
      if (done) {
        out.kind = KILND_TASK_TARGET_DONE;
        out.artifact = ev->target_done->vmfb.data;
        out.artifact_len = ev->target_done->vmfb.len;
        out.compile_ms = (int64_t)ev->target_done->compile_ms;
      } else {
        uint32_t code = ev->target_failed->code;
        out.kind = KILND_TASK_TARGET_FAILED;
        out.code =
            code == 0 || code >= KILN_STATUS_CODE_COUNT ? KILN_STATUS_INTERNAL : (kiln_status_code_t)code;
        out.message = ev->target_failed->message;
      }
      emit(pool, t->id, &out);
      return;
    }
    case KILN__WORKER__V1__WORKER_EVENT__KIND_FINISHED: {
      /* Idle before FINISHED goes out, so the callback can submit the next task. */
      w->task = NULL;
      w->state = W_IDLE;
      uv_timer_stop(&w->timer);
      bool missing = false;
      for (size_t i = 0; i < t->n_targets; i++) missing = missing || !t->reported[i];
      if (missing) {
        task_fail_rest(pool, t, w->name, KILN_STATUS_INTERNAL,
                       "the worker finished the task without a result", "");
      } else {
        pool->stats.tasks++;
        out.kind = KILND_TASK_FINISHED;
        emit(pool, t->id, &out);
        task_free(t);
      }
      emit_ready(w);
      return;
    }
    default: protocol_violation(w, "an event of unknown kind %d", (int)ev->kind_case); return;
  }
}

static void on_out_alloc(uv_handle_t *h, size_t suggested, uv_buf_t *buf) {
  worker_t *w = h->data;
  (void)suggested;
  if (w->rx_cap - w->rx_len < READ_CHUNK) {
    w->rx_cap = w->rx_len + READ_CHUNK;
    w->rx = kiln_realloc(w->rx, w->rx_cap);
  }
  buf->base = (char *)w->rx + w->rx_len;
  buf->len = w->rx_cap - w->rx_len;
}

static void on_out_read(uv_stream_t *s, ssize_t n, const uv_buf_t *buf) {
  worker_t *w = s->data;
  (void)buf;
  if (n < 0) {
    uv_read_stop(s);
    w->out_eof = true;
    /* A dying process closes stdout a moment before exit_cb runs: give it time to
     * be reaped before calling it broken. */
    if (!w->exited && w->state != W_DYING && w->state != W_CLOSING) {
      uv_timer_start(&w->timer, on_eof_without_exit, EOF_GRACE_MS, 0);
    }
    maybe_finalize(w);
    return;
  }
  w->rx_len += (size_t)n;
  size_t off = 0;
  /* Callbacks may kill this worker or close the pool: stop consuming then. */
  while (w->rx_len - off >= 4 && w->state != W_DYING && w->state != W_CLOSING && !w->pool->closing) {
    const uint8_t *p = w->rx + off;
    uint32_t len = (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
    if (len > MAX_FRAME_BYTES) {
      protocol_violation(w, "a frame of %" PRIu32 " bytes, over the 1 GiB limit", len);
      break;
    }
    if (w->rx_len - off - 4 < len) {
      /* Make room for the whole frame at once, not 64 KiB at a time. */
      size_t need = 4 + (size_t)len + READ_CHUNK;
      if (off) {
        memmove(w->rx, w->rx + off, w->rx_len - off);
        w->rx_len -= off;
        off = 0;
      }
      if (w->rx_cap < need) {
        w->rx_cap = need;
        w->rx = kiln_realloc(w->rx, w->rx_cap);
      }
      break;
    }
    Kiln__Worker__V1__WorkerEvent *ev = kiln__worker__v1__worker_event__unpack(NULL, len, p + 4);
    off += 4 + (size_t)len;
    if (!ev) {
      protocol_violation(w, "a message of %" PRIu32 " bytes that does not decode", len);
      break;
    }
    handle_event(w, ev);
    protobuf_c_message_free_unpacked(&ev->base, NULL);
  }
  if (off) {
    memmove(w->rx, w->rx + off, w->rx_len - off);
    w->rx_len -= off;
  }
}

/* ---- stderr: forwarded log lines ------------------------------------------------- */

static kiln_log_level_t line_level(const char *line, const char **out_rest) {
  *out_rest = line;
  /* "ts=... level=L event=..." from kiln_log, "level=fatal event=..." from
   * kiln_malloc's last words; anything else is raw (an abort message, ASan). */
  const char *lv = NULL;
  if (!strncmp(line, "level=", 6)) {
    lv = line + 6;
  } else if (!strncmp(line, "ts=", 3)) {
    const char *sp = strchr(line, ' ');
    if (sp && !strncmp(sp + 1, "level=", 6)) lv = sp + 7;
  }
  if (!lv) return KILN_LOG_WARN;
  const char *end = strchr(lv, ' ');
  size_t n = end ? (size_t)(end - lv) : strlen(lv);
  *out_rest = end ? end + 1 : lv + n;
  static const struct {
    const char *name;
    kiln_log_level_t level;
  } levels[] = {{"debug", KILN_LOG_DEBUG},
                {"info", KILN_LOG_INFO},
                {"warn", KILN_LOG_WARN},
                {"error", KILN_LOG_ERROR},
                {"fatal", KILN_LOG_ERROR}};
  for (size_t i = 0; i < sizeof levels / sizeof *levels; i++) {
    if (strlen(levels[i].name) == n && !strncmp(lv, levels[i].name, n)) return levels[i].level;
  }
  return KILN_LOG_WARN;
}

static void forward_line(worker_t *w) {
  int64_t now = kiln_time_monotonic_ns();
  w->tokens += (double)(now - w->tokens_ns) / 1e9 * LOG_RATE_PER_S;
  if (w->tokens > LOG_BURST) w->tokens = LOG_BURST;
  w->tokens_ns = now;
  if (w->tokens < 1.0) {
    w->dropped++;
    return;
  }
  w->tokens -= 1.0;
  kiln_buf_t fields;
  kiln_buf_init(&fields);
  if (w->dropped) {
    log_worker(&fields, w);
    kiln_buf_appendf(&fields, " lines=%" PRIu64, w->dropped);
    kiln_log_fields(KILN_LOG_WARN, "worker_log_dropped", &fields);
    kiln_buf_clear(&fields);
    w->dropped = 0;
  }
  const char *rest = NULL;
  kiln_log_level_t level = line_level(w->line.data, &rest);
  log_worker(&fields, w);
  kiln_log_kv_str(&fields, "line", rest);
  if (w->line_cut) kiln_buf_append_str(&fields, " truncated=true");
  kiln_log_fields(level, "worker_log", &fields);
  kiln_buf_deinit(&fields);
}

static void on_err_alloc(uv_handle_t *h, size_t suggested, uv_buf_t *buf) {
  worker_t *w = h->data;
  (void)suggested;
  buf->base = w->chunk;
  buf->len = sizeof w->chunk;
}

static void keep_tail(worker_t *w, const char *p, size_t n) {
  if (n >= STDERR_TAIL) {
    memcpy(w->tail, p + n - STDERR_TAIL, STDERR_TAIL);
    w->tail_len = STDERR_TAIL;
  } else {
    size_t keep = w->tail_len + n > STDERR_TAIL ? STDERR_TAIL - n : w->tail_len;
    memmove(w->tail, w->tail + w->tail_len - keep, keep);
    memcpy(w->tail + keep, p, n);
    w->tail_len = keep + n;
  }
  w->tail[w->tail_len] = '\0';
  /* NULs would hide what follows from strstr. */
  for (size_t i = 0; i < w->tail_len; i++) {
    if (w->tail[i] == '\0') w->tail[i] = ' ';
  }
}

static void on_err_read(uv_stream_t *s, ssize_t n, const uv_buf_t *buf) {
  worker_t *w = s->data;
  if (n < 0) {
    uv_read_stop(s);
    if (w->line.len) forward_line(w);
    kiln_buf_clear(&w->line);
    w->err_eof = true;
    maybe_finalize(w);
    return;
  }
  keep_tail(w, buf->base, (size_t)n);
  for (ssize_t i = 0; i < n; i++) {
    char c = buf->base[i];
    if (c == '\n') {
      if (w->line.len) forward_line(w);
      kiln_buf_clear(&w->line);
      w->line_cut = false;
    } else if (w->line.len < STDERR_LINE_MAX) {
      kiln_buf_append_char(&w->line, c);
    } else {
      w->line_cut = true;
    }
  }
}

/* ---- stdin: tasks ---------------------------------------------------------------- */

static void on_write_failed_alive(uv_timer_t *timer) {
  worker_t *w = timer->data;
  kill_worker(w, KILL_PROTOCOL, "its stdin refused a task but it did not exit");
}

static void on_written(uv_write_t *req, int status) {
  write_req_t *wr = (write_req_t *)req;
  worker_t *w = req->data;
  if (status < 0 && status != UV_ECANCELED && !w->exited && w->state != W_DYING && w->state != W_CLOSING) {
    /* Usually EPIPE from a worker that just died: exit_cb tells why. One that is
     * still alive a moment later is broken. */
    uv_timer_start(&w->timer, on_write_failed_alive, EOF_GRACE_MS, 0);
  }
  kiln_free(wr->frame);
  kiln_free(wr);
}

/* ---- Spawning -------------------------------------------------------------------- */

static char *u64_arg(uint64_t v) {
  char b[24];
  snprintf(b, sizeof b, "%" PRIu64, v);
  return kiln_strdup(b);
}

#define HUGE_HEAP_TUNABLE "glibc.malloc.hugetlb=1"

/* kilnd's environment for a built-in compiler's worker (the array and
 * *out_tunables are the caller's to free; the other strings are environ's), with
 * two settings for a process that forks its back halves from one warm image:
 *  - LD_BIND_NOW=1: every symbol of LLVM and MLIR is bound once when it starts,
 *    and no child binds them again, lazily, on its first calls (a cold six-target
 *    task, medians of 8 in three alternating pairs on 2 cores, one child per
 *    target: 583-719 ms lazy, 554-607 ms bound at start). An LD_BIND_NOW kilnd
 *    already has is passed on as it is (empty keeps binding lazy). The worker
 *    takes it out of its own environment at once, so the tools it runs (ptxas,
 *    ld.lld) start as usual.
 *  - GLIBC_TUNABLES gains glibc.malloc.hugetlb=1: malloc asks for transparent
 *    huge pages (madvise), so a back half's heap grows by 2 MiB faults instead of
 *    4 KiB ones. Page faults are most of what a back half spends in the kernel,
 *    and on a virtual machine each costs an exit (5 cold six-target tasks, 2
 *    cores, four alternating runs: 417-566 ms without, 351-377 ms with, and a
 *    quarter fewer page faults machine-wide). Tunables kilnd already has are
 *    kept; one that sets glibc.malloc.hugetlb itself wins. The worker's tools
 *    inherit it. A kernel without transparent huge pages ignores it. */
static char **worker_env(char **out_tunables) {
  size_t n = 0;
  bool bind_set = false;
  const char *tunables = NULL;
  for (char **e = environ; e && *e; e++, n++) {
    bind_set = bind_set || strncmp(*e, "LD_BIND_NOW=", 12) == 0;
    if (!tunables && strncmp(*e, "GLIBC_TUNABLES=", 15) == 0) tunables = *e + 15; /* the first, as getenv */
  }
  char **env = kiln_calloc(n + 3, sizeof *env);
  size_t k = 0;
  for (char **e = environ; e && *e; e++) {
    if (strncmp(*e, "GLIBC_TUNABLES=", 15) != 0) env[k++] = *e;
  }
  if (!bind_set) env[k++] = (char *)"LD_BIND_NOW=1";
  kiln_buf_t t;
  kiln_buf_init(&t);
  if (tunables && strstr(tunables, "glibc.malloc.hugetlb=")) {
    kiln_buf_appendf(&t, "GLIBC_TUNABLES=%s", tunables);
  } else {
    kiln_buf_appendf(&t, "GLIBC_TUNABLES=%s%s" HUGE_HEAP_TUNABLE, tunables ? tunables : "",
                     tunables && *tunables ? ":" : "");
  }
  *out_tunables = kiln_buf_take(&t);
  kiln_buf_deinit(&t);
  env[k++] = *out_tunables;
  return env;
}

static void spawn_slot(slot_t *slot) {
  kilnd_workers_t *pool = slot->pool;
  worker_t *w = kiln_calloc(1, sizeof *w);
  w->pool = pool;
  w->slot = slot;
  w->state = W_STARTING;
  kiln_buf_init(&w->line);
  w->tokens = LOG_BURST;
  w->tokens_ns = kiln_time_monotonic_ns();
  w->next = pool->all;
  if (pool->all) pool->all->prev = w;
  pool->all = w;
  slot->worker = w;

  uv_pipe_init(pool->loop, &w->in, 0);
  uv_pipe_init(pool->loop, &w->out, 0);
  uv_pipe_init(pool->loop, &w->err, 0);
  uv_timer_init(pool->loop, &w->timer);
  w->process.data = w->in.data = w->out.data = w->err.data = w->timer.data = w;
  w->open_handles = 5;

  char *argv[20]; /* at most 16 arguments, and the NULL */
  size_t argc = 0;
  argv[argc++] = kiln_strdup(pool->opt.worker_path);
  argv[argc++] = kiln_strdup("--jobs");
  argv[argc++] = u64_arg(pool->jobs);
  kiln_log_level_t level = KILN_LOG_DEBUG;
  while (level < KILN_LOG_OFF && !kiln_log_enabled(level)) level++;
  argv[argc++] = kiln_strdup("--log-level");
  argv[argc++] = kiln_strdup(kiln_log_level_name(level));
  if (pool->opt.memory_limit_bytes) {
    argv[argc++] = kiln_strdup("--memory-limit");
    argv[argc++] = u64_arg(pool->opt.memory_limit_bytes);
  }
  if (pool->opt.external_compiler) {
    argv[argc++] = kiln_strdup("--external");
    argv[argc++] = kiln_strdup(pool->opt.external_compiler);
    if (pool->opt.external_args) {
      argv[argc++] = kiln_strdup("--external-args");
      argv[argc++] = kiln_strdup(pool->opt.external_args);
    }
  }
  if (pool->opt.test_hooks) argv[argc++] = kiln_strdup("--test-hooks");
  w->scratch = next_scratch(pool);
  argv[argc++] = kiln_strdup("--scratch");
  argv[argc++] = kiln_strdup(w->scratch);
  argv[argc] = NULL;

  uv_stdio_container_t stdio[3];
  stdio[0].flags = UV_CREATE_PIPE | UV_READABLE_PIPE;
  stdio[0].data.stream = (uv_stream_t *)&w->in;
  stdio[1].flags = UV_CREATE_PIPE | UV_WRITABLE_PIPE;
  stdio[1].data.stream = (uv_stream_t *)&w->out;
  stdio[2].flags = UV_CREATE_PIPE | UV_WRITABLE_PIPE;
  stdio[2].data.stream = (uv_stream_t *)&w->err;
  uv_process_options_t po;
  memset(&po, 0, sizeof po);
  po.exit_cb = on_worker_exit;
  po.file = pool->opt.worker_path;
  po.args = argv;
  po.stdio = stdio;
  po.stdio_count = 3;
  /* An external compiler's worker forks nothing: it keeps kilnd's environment. */
  char *tunables = NULL;
  po.env = pool->opt.external_compiler ? NULL : worker_env(&tunables);
  /* A process group of its own (setsid): killing -pid stops its children too. */
  po.flags = UV_PROCESS_DETACHED;
  int rc = uv_spawn(pool->loop, &w->process, &po);
  kiln_free(po.env);
  kiln_free(tunables);
  for (size_t i = 0; i < argc; i++) kiln_free(argv[i]);
  if (rc < 0) {
    snprintf(w->name, sizeof w->name, "worker-%zu", slot->index);
    kiln_buf_t fields;
    kiln_buf_init(&fields);
    log_worker(&fields, w);
    kiln_log_kv_str(&fields, "path", pool->opt.worker_path);
    kiln_log_kv_str(&fields, "error", uv_strerror(rc));
    kiln_log_fields(KILN_LOG_ERROR, "worker_spawn_failed", &fields);
    kiln_buf_deinit(&fields);
    w->state = W_DYING;
    w->exited = true;
    w->reason = KILL_NONE;
    finalize(w); /* closes the handles and schedules the next try with backoff */
    return;
  }
  w->spawned = true;
  w->pid = w->process.pid;
  snprintf(w->name, sizeof w->name, "worker-%zu", slot->index);
  uv_read_start((uv_stream_t *)&w->out, on_out_alloc, on_out_read);
  uv_read_start((uv_stream_t *)&w->err, on_err_alloc, on_err_read);
  uv_timer_start(&w->timer, on_start_timeout, START_TIMEOUT_MS, 0);
  kiln_buf_t fields;
  kiln_buf_init(&fields);
  log_worker(&fields, w);
  kiln_log_fields(KILN_LOG_DEBUG, "worker_spawned", &fields);
  kiln_buf_deinit(&fields);
}

/* ---- The template check ---------------------------------------------------------- */

/* The placeholders of worker.proto's ExternalCompiler (expanded by
 * daemon/worker/external.c; keep the two lists alike). */
static KILN_MUST_USE kiln_status_t check_template(const char *tmpl) {
  static const char *const known[] = {"input",       "output", "device", "backend",
                                      "target_flag", "chip",   "target", "flags"};
  for (const char *c = tmpl; *c; c++) {
    if ((c[0] == '{' && c[1] == '{') || (c[0] == '}' && c[1] == '}')) {
      c++;
      continue;
    }
    if (c[0] == '}') {
      return KILN_STATUS(KILN_STATUS_INVALID_ARGUMENT,
                         "external compiler arguments '%s': unmatched '}' (write }} for a brace)", tmpl);
    }
    if (c[0] != '{') continue;
    size_t n = strcspn(c + 1, "} \t");
    bool ok = c[1 + n] == '}';
    bool found = false;
    for (size_t i = 0; ok && i < sizeof known / sizeof *known; i++) {
      found = found || (strlen(known[i]) == n && !strncmp(c + 1, known[i], n));
    }
    if (!found) {
      return KILN_STATUS(KILN_STATUS_INVALID_ARGUMENT,
                         "external compiler arguments '%s': '%.*s' is not a placeholder (known: {input} "
                         "{output} {device} {backend} {target_flag} {chip} {target} {flags}; {{ and }} for "
                         "braces)",
                         tmpl, (int)(n + (ok ? 2 : 1)), c);
    }
    c += n + 1;
  }
  return NULL;
}

/* ---- Public ---------------------------------------------------------------------- */

kiln_status_t kilnd_workers_create(uv_loop_t *loop, const kilnd_workers_options_t *options,
                                   kilnd_task_event_fn_t fn, void *user, kilnd_workers_t **out_workers) {
  *out_workers = NULL;
  if (!options->worker_path || access(options->worker_path, X_OK) != 0) {
    return KILN_STATUS(KILN_STATUS_INVALID_ARGUMENT,
                       "the compile worker executable '%s' %s: install kiln-worker beside kilnd or set "
                       "its path",
                       options->worker_path ? options->worker_path : "(none)",
                       options->worker_path ? strerror(errno) : "is not set");
  }
  if (options->memory_limit_bytes && options->memory_limit_bytes < MIN_MEMORY_LIMIT) {
    return KILN_STATUS(KILN_STATUS_INVALID_ARGUMENT,
                       "a worker memory limit of %" PRIu64
                       " bytes is too small: the warm compiler alone needs about 150 MB; use at least "
                       "256 MiB (268435456), or 0 for none",
                       options->memory_limit_bytes);
  }
  if (options->external_compiler && options->external_args) {
    KILN_RETURN_IF_ERROR(check_template(options->external_args));
  }
  if (options->external_compiler && !*options->external_compiler) {
    return KILN_STATUS(KILN_STATUS_INVALID_ARGUMENT, "the external compiler path is empty");
  }
  /* Workers keep their temporary files under TMPDIR (see "Scratch directories"). */
  const char *tmp = getenv("TMPDIR");
  if (!tmp || !*tmp) tmp = "/tmp";
  struct stat tmp_st;
  const char *tmp_bad = NULL;
  if (tmp[0] != '/') {
    tmp_bad = "it is relative";
  } else if (stat(tmp, &tmp_st) != 0) {
    tmp_bad = strerror(errno);
  } else if (!S_ISDIR(tmp_st.st_mode)) {
    tmp_bad = strerror(ENOTDIR);
  } else if (access(tmp, W_OK | X_OK) != 0) {
    tmp_bad = strerror(errno);
  }
  if (tmp_bad) {
    return KILN_STATUS(KILN_STATUS_INVALID_ARGUMENT,
                       "TMPDIR=%s cannot hold the compile workers' scratch folders: it must be the absolute "
                       "path of a folder kilnd may write (%s); set TMPDIR to one, or unset it for /tmp",
                       tmp, tmp_bad);
  }
  kilnd_workers_t *pool = kiln_calloc(1, sizeof *pool);
  oom_counter_path(pool->oom_counter, sizeof pool->oom_counter);
  pool->scratch_base = kiln_strdup(tmp);
  pool->loop = loop;
  sweep_stale(pool);
  pool->fn = fn;
  pool->user = user;
  pool->opt = *options;
  pool->opt.worker_path = kiln_strdup(options->worker_path);
  pool->opt.crash_dir = options->crash_dir && *options->crash_dir ? kiln_strdup(options->crash_dir) : NULL;
  pool->opt.external_compiler = kiln_strdup(options->external_compiler);
  pool->opt.external_args =
      options->external_args && *options->external_args ? kiln_strdup(options->external_args) : NULL;
  long cpus = sysconf(_SC_NPROCESSORS_ONLN);
  if (cpus < 1) cpus = 1;
  pool->count = options->count ? options->count : (size_t)cpus;
  pool->opt.count = pool->count;
  pool->jobs = options->jobs ? options->jobs : (size_t)cpus / pool->count;
  if (pool->jobs < 1) pool->jobs = 1;
  if (pool->jobs > 16) pool->jobs = 16; /* KILN_COMPILER_MAX_JOBS */
  pool->stats.count = pool->count;
  pool->slots = kiln_calloc(pool->count, sizeof *pool->slots);
  for (size_t i = 0; i < pool->count; i++) {
    slot_t *slot = &pool->slots[i];
    slot->pool = pool;
    slot->index = i + 1;
    uv_timer_init(loop, &slot->respawn);
    slot->respawn.data = slot;
    pool->open_slot_timers++;
  }
  for (size_t i = 0; i < pool->count; i++) {
    slot_t *slot = &pool->slots[i];
    spawn_slot(slot);
    if (!slot->worker) {
      /* It failed and was scheduled for a retry: at start-up that is an error. */
      kiln_status_t st = KILN_STATUS(KILN_STATUS_INTERNAL,
                                     "cannot start the compile worker %s (see the worker_spawn_failed log "
                                     "line)",
                                     pool->opt.worker_path);
      kilnd_workers_close(pool, NULL, NULL);
      return st;
    }
  }
  kiln_log(KILN_LOG_INFO, "workers_started",
           "count=%zu jobs=%zu task_timeout_ms=%" PRId64 " memory_limit=%" PRIu64 " external=%s", pool->count,
           pool->jobs, pool->opt.task_timeout_ms, pool->opt.memory_limit_bytes,
           pool->opt.external_compiler ? "yes" : "no");
  *out_workers = pool;
  return NULL;
}

size_t kilnd_workers_idle(const kilnd_workers_t *workers) {
  if (workers->closing) return 0;
  size_t n = 0;
  for (const worker_t *w = workers->all; w; w = w->next) n += w->state == W_IDLE;
  return n;
}

static worker_t *find_running(kilnd_workers_t *pool, uint64_t task_id) {
  for (worker_t *w = pool->all; w; w = w->next) {
    if (w->task && w->task->id == task_id && (w->state == W_BUSY || w->state == W_DYING)) return w;
  }
  return NULL;
}

kiln_status_t kilnd_workers_submit(kilnd_workers_t *workers, const kilnd_task_t *task) {
  kilnd_workers_t *pool = workers;
  if (pool->closing) {
    return KILN_STATUS(KILN_STATUS_FAILED_PRECONDITION, "the worker pool is closing");
  }
  if (task->id == 0) return KILN_STATUS(KILN_STATUS_INVALID_ARGUMENT, "task id 0 is reserved");
  if (task->n_targets == 0 || task->n_targets > MAX_TASK_TARGETS) {
    return KILN_STATUS(KILN_STATUS_INVALID_ARGUMENT, "task %" PRIu64 " has %zu targets; 1 to %d are allowed",
                       task->id, task->n_targets, MAX_TASK_TARGETS);
  }
  for (size_t i = 0; i < task->n_targets; i++) {
    if (!task->targets[i] || !*task->targets[i]) {
      return KILN_STATUS(KILN_STATUS_INVALID_ARGUMENT, "task %" PRIu64 ": target %zu is empty", task->id, i);
    }
    for (size_t k = 0; k < i; k++) {
      if (!strcmp(task->targets[k], task->targets[i])) {
        return KILN_STATUS(KILN_STATUS_INVALID_ARGUMENT, "task %" PRIu64 ": target %s is listed twice",
                           task->id, task->targets[i]);
      }
    }
  }
  if (find_running(pool, task->id)) {
    return KILN_STATUS(KILN_STATUS_INVALID_ARGUMENT, "task %" PRIu64 " is already running", task->id);
  }
  worker_t *w = NULL;
  for (size_t i = 0; i < pool->count && !w; i++) {
    worker_t *c = pool->slots[i].worker;
    if (c && c->state == W_IDLE) w = c;
  }
  if (!w) return KILN_STATUS(KILN_STATUS_FAILED_PRECONDITION, "no compile worker is idle");

  task_t *t = kiln_calloc(1, sizeof *t);
  t->id = task->id;
  t->source_name = kiln_strdup(task->source_name && *task->source_name ? task->source_name : "<source>");
  t->source = kiln_memdup(task->source ? (const void *)task->source : "", task->source_len);
  t->source_len = task->source_len;
  t->n_targets = task->n_targets;
  t->targets = kiln_calloc(task->n_targets, sizeof *t->targets);
  t->reported = kiln_calloc(task->n_targets, sizeof *t->reported);
  for (size_t i = 0; i < task->n_targets; i++) t->targets[i] = kiln_strdup(task->targets[i]);

  Kiln__Worker__V1__CompileTask ct = KILN__WORKER__V1__COMPILE_TASK__INIT;
  ct.task_id = task->id;
  ct.source_name = (char *)(task->source_name ? task->source_name : "");
  ct.source_digest = (char *)(task->source_digest ? task->source_digest : "");
  ct.targets = (char **)task->targets;
  ct.n_targets = task->n_targets;
  ct.flags = (char **)task->flags;
  ct.n_flags = task->n_flags;
  ct.embed_source = task->embed_source;
  ct.jobs = (uint32_t)task->jobs;
  ct.timeout_ms = pool->opt.task_timeout_ms > 0 ? (uint64_t)pool->opt.task_timeout_ms : 0;
  ct.source.data = t->source;
  ct.source.len = t->source_len;
  Kiln__Worker__V1__WorkerRequest req = KILN__WORKER__V1__WORKER_REQUEST__INIT;
  req.kind_case = KILN__WORKER__V1__WORKER_REQUEST__KIND_COMPILE;
  req.compile = &ct;
  size_t len = kiln__worker__v1__worker_request__get_packed_size(&req);
  if (len > MAX_FRAME_BYTES) {
    task_free(t);
    return KILN_STATUS(KILN_STATUS_RESOURCE_EXHAUSTED,
                       "task %" PRIu64 " is %zu bytes; workers take at most 1 GiB", task->id, len);
  }
  write_req_t *wr = kiln_calloc(1, sizeof *wr);
  wr->frame = kiln_malloc(4 + len);
  wr->frame[0] = (uint8_t)len;
  wr->frame[1] = (uint8_t)(len >> 8);
  wr->frame[2] = (uint8_t)(len >> 16);
  wr->frame[3] = (uint8_t)(len >> 24);
  kiln__worker__v1__worker_request__pack(&req, wr->frame + 4);
  wr->req.data = w;
  uv_buf_t b = uv_buf_init((char *)wr->frame, (unsigned)(4 + len));
  int rc = uv_write(&wr->req, (uv_stream_t *)&w->in, &b, 1, on_written);
  if (rc < 0) {
    kiln_free(wr->frame);
    kiln_free(wr);
    task_free(t);
    protocol_violation(w, "its stdin refused a task (%s)", uv_strerror(rc));
    return KILN_STATUS(KILN_STATUS_UNAVAILABLE, "%s could not take task %" PRIu64 " (%s); submit it again",
                       w->name, task->id, uv_strerror(rc));
  }
  w->task = t;
  w->state = W_BUSY;
  w->oom_kills_at_task = oom_kills(pool);
  if (pool->opt.task_timeout_ms > 0) {
    uv_timer_start(&w->timer, on_task_timeout, (uint64_t)pool->opt.task_timeout_ms, 0);
  }
  kilnd_task_event_t ev = {.kind = KILND_TASK_STARTED, .worker = w->name, .pid = w->pid};
  emit(pool, t->id, &ev);
  return NULL;
}

void kilnd_workers_cancel(kilnd_workers_t *workers, uint64_t task_id) {
  if (workers->closing) return;
  worker_t *w = find_running(workers, task_id);
  if (w && w->state == W_BUSY) kill_worker(w, KILL_CANCEL, NULL);
}

void kilnd_workers_stats(const kilnd_workers_t *workers, kilnd_workers_stats_t *out_stats) {
  *out_stats = workers->stats;
  out_stats->scratch_left = workers->n_scratch_left;
  out_stats->busy = out_stats->ready = 0;
  for (const worker_t *w = workers->all; w; w = w->next) {
    out_stats->busy += w->state == W_BUSY;
    out_stats->ready += w->state == W_BUSY || w->state == W_IDLE;
  }
}

const char *kilnd_workers_compiler(const kilnd_workers_t *workers) { return workers->compiler; }

bool kilnd_workers_identity(const kilnd_workers_t *workers, kilnd_compiler_info_t *out_info) {
  memset(out_info, 0, sizeof *out_info);
  if (!workers->compiler) return false;
  *out_info = workers->identity;
  return true;
}

void kilnd_workers_close(kilnd_workers_t *workers, void (*done)(void *user), void *user) {
  kilnd_workers_t *pool = workers;
  if (pool->closing) return;
  pool->closing = true;
  pool->done = done;
  pool->done_user = user;
  for (size_t i = 0; i < pool->count; i++) {
    uv_timer_stop(&pool->slots[i].respawn);
    uv_close((uv_handle_t *)&pool->slots[i].respawn, on_slot_timer_closed);
  }
  /* finalize() may unlink and free nothing synchronously (handles close later), but
   * walk with `next` saved anyway. */
  for (worker_t *w = pool->all, *next; w; w = next) {
    next = w->next;
    if (w->state == W_CLOSING) continue;
    if (w->exited) {
      finalize(w);
    } else if (w->state == W_IDLE) {
      /* End of file on its stdin is an idle worker's cue to exit cleanly (and remove
       * its scratch directory); SIGKILL if it takes longer than a second. */
      w->state = W_DYING;
      w->reason = KILL_CLOSE;
      uv_close((uv_handle_t *)&w->in, on_worker_handle_closed);
      uv_timer_start(&w->timer, on_close_grace, CLOSE_GRACE_MS, 0);
    } else {
      kill_worker(w, KILL_CLOSE, NULL);
      w->reason = KILL_CLOSE; /* already dying for another reason: no events anyway */
    }
  }
  kiln_log(KILN_LOG_INFO, "workers_closing", "count=%zu", pool->count);
}
