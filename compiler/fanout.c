/* Fan-out: the back halves of one compile in parallel child processes.
 *
 * After the shared front half, each target's back half is independent work on a
 * clone of the same module. MLIR's and LLVM's GPU serializers are not safe to run
 * on threads of one context (tried: they crash), so kiln forks: each child
 * inherits the warm context and the front half's module (copy-on-write) and
 * compiles the targets the parent hands it, one at a time, writing each result
 * down its socket; when none are left it _exits. Up to `jobs` children run, and a
 * child takes the next target as soon as it has sent the last one's result, so
 * six targets on two cores cost two forks, not six: each fork, its copy-on-write
 * faults, its fresh heap and its exit are paid once per child (on a 2-core VM a
 * six-target compile spent about a fifth of its CPU time there). The parent polls
 * every socket (a child blocked on a full socket would otherwise deadlock it) and
 * rebuilds the outputs.
 *
 * Invariants:
 *  - fork happens only from a process whose MLIR context runs single-threaded
 *    (kiln_compiler_context_create disables MLIR's thread pool), so no lock can be
 *    held by a thread that does not exist in the child;
 *  - a back half works on its own clone of the module and frees what it made, so
 *    the targets a child compiles one after another cannot see each other's work
 *    (their outputs are byte for byte those of one child per target);
 *  - a child that crashes, is killed or writes a short record fails only the
 *    target it was on, with the signal or exit status in the message and the end
 *    of what it wrote to stderr for that target (LLVM reports a fatal error, "no
 *    libcall available for ftanh", on stderr and exits the process): each child's
 *    stderr is an unnamed temporary file the parent empties before each target
 *    and reads back; the targets still waiting go to a fresh child. A child says
 *    when it starts on a target, so one that was killed while idle (the OOM
 *    killer picks the largest process) costs nothing: the target it was handed
 *    goes to another child, once;
 *  - every target gets exactly one result and one `ready` call, whatever dies;
 *  - back halves always run in children, even one target at -j 1: a fatal error
 *    inside LLVM must cost one target, never the caller's process (kilnc, or a
 *    kilnd worker running its task in-process);
 *  - results land in the caller's array by target index, so the output is the same
 *    whichever child finishes first.
 */
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <stdlib.h>
#include <signal.h>
#include <spawn.h>
#include <stdio.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include "base/alloc.h"
#include "base/buf.h"
#include "compiler/internal.h"

/* ---- one target's output on the wire ---- */

static void put_u64(kiln_buf_t *b, uint64_t v) { kiln_buf_append(b, &v, sizeof v); }

static void put_bytes(kiln_buf_t *b, const void *p, size_t n) {
  put_u64(b, n);
  if (n) kiln_buf_append(b, p, n);
}

static void put_str(kiln_buf_t *b, const char *s) { put_bytes(b, s, s ? strlen(s) : 0); }

static void serialize(const kiln_compiler_target_output_t *t, kiln_buf_t *b) {
  put_u64(b, t->status ? (uint64_t)kiln_status_code(t->status) : 0);
  put_str(b, t->status ? kiln_status_message(t->status) : "");
  put_u64(b, (uint64_t)t->backend_ms);
  put_u64(b, t->n_kernels);
  for (size_t k = 0; k < t->n_kernels; k++) {
    const kiln_compiler_kernel_t *kk = &t->kernels[k];
    put_str(b, kk->name);
    put_str(b, kk->module_name);
    kiln_buf_append(b, kk->block_size, sizeof kk->block_size);
    kiln_buf_append(b, kk->grid, sizeof kk->grid);
    put_u64(b, kk->same_as);
    put_u64(b, kk->fused_into);
    put_u64(b, kk->fused_input);
    if (!kk->same_as) {
      put_bytes(b, kk->binary, kk->binary_len);
      put_bytes(b, kk->cubin, kk->cubin_len);
    }
    put_bytes(b, kk->args, kk->n_args * sizeof *kk->args);
  }
}

typedef struct reader_s {
  const uint8_t *p, *end;
  bool bad;
} reader_t;

static uint64_t get_u64(reader_t *r) {
  uint64_t v = 0;
  if ((size_t)(r->end - r->p) < sizeof v) {
    r->bad = true;
    return 0;
  }
  memcpy(&v, r->p, sizeof v);
  r->p += sizeof v;
  return v;
}

/* A NUL-terminated copy of the next byte string (NULL when empty and `null_if_empty`). */
static uint8_t *get_bytes(reader_t *r, size_t *out_len, bool null_if_empty) {
  uint64_t n = get_u64(r);
  if (r->bad || n > (uint64_t)(r->end - r->p)) {
    r->bad = true;
    *out_len = 0;
    return NULL;
  }
  *out_len = (size_t)n;
  if (n == 0 && null_if_empty) return NULL;
  uint8_t *copy = kiln_malloc((size_t)n + 1);
  memcpy(copy, r->p, (size_t)n);
  copy[n] = '\0';
  r->p += n;
  return copy;
}

static bool deserialize(const uint8_t *data, size_t len, kiln_compiler_target_output_t *t) {
  reader_t r = {data, data + len, false};
  uint64_t code = get_u64(&r);
  size_t n = 0;
  char *message = (char *)get_bytes(&r, &n, false);
  if (!r.bad && code) t->status = KILN_STATUS((kiln_status_code_t)code, "%s", message ? message : "");
  kiln_free(message);
  t->backend_ms = (int64_t)get_u64(&r);
  uint64_t n_kernels = get_u64(&r);
  if (r.bad || n_kernels > len) return false;
  t->kernels = kiln_calloc(n_kernels ? (size_t)n_kernels : 1, sizeof *t->kernels);
  for (size_t k = 0; k < n_kernels && !r.bad; k++) {
    kiln_compiler_kernel_t *kk = &t->kernels[k];
    t->n_kernels++;
    kk->name = (char *)get_bytes(&r, &n, false);
    kk->module_name = (char *)get_bytes(&r, &n, false);
    if ((size_t)(r.end - r.p) < sizeof kk->block_size + sizeof kk->grid) {
      r.bad = true;
      break;
    }
    memcpy(kk->block_size, r.p, sizeof kk->block_size);
    r.p += sizeof kk->block_size;
    memcpy(kk->grid, r.p, sizeof kk->grid);
    r.p += sizeof kk->grid;
    uint64_t same_as = get_u64(&r);
    if (same_as > k) { /* borrows from an earlier kernel only */
      r.bad = true;
      break;
    }
    kk->same_as = (uint32_t)same_as;
    uint64_t fused_into = get_u64(&r), fused_input = get_u64(&r);
    if (fused_into > n_kernels || fused_input > UINT32_MAX) {
      r.bad = true;
      break;
    }
    kk->fused_into = (uint32_t)fused_into;
    kk->fused_input = (uint32_t)fused_input;
    if (same_as) {
      const kiln_compiler_kernel_t *owner = &t->kernels[same_as - 1];
      kk->binary = owner->binary;
      kk->binary_len = owner->binary_len;
      kk->cubin = owner->cubin;
      kk->cubin_len = owner->cubin_len;
    } else {
      kk->binary = get_bytes(&r, &kk->binary_len, false);
      kk->cubin = get_bytes(&r, &kk->cubin_len, true);
    }
    size_t args_bytes = 0;
    kk->args = (kiln_compiler_arg_t *)get_bytes(&r, &args_bytes, false);
    kk->n_args = args_bytes / sizeof *kk->args;
  }
  return !r.bad && r.p == r.end;
}

/* ---- the children ---- */

/* A child compiles the targets the parent sends it, one at a time: the parent
 * writes a target index (8 bytes) down the child's socket; the child answers with
 * one byte as it starts (so a child that died idle is told from one that died
 * compiling), then a record (its length in 8 bytes, then serialize()'s bytes), and
 * waits for the next index; end of input tells it to _exit(0). */
#define STARTED 'S'

typedef struct child_s {
  pid_t pid;     /* 0: the slot is free */
  int fd;        /* the parent's end of the child's socket */
  int err_fd;    /* the child's stderr: an unnamed temporary file, or -1 */
  bool busy;     /* given `target`: its record has not arrived whole */
  bool started;  /* and it said it started on it */
  bool ended;    /* told there is no more work: only its end of input is awaited */
  size_t target;
  kiln_buf_t data; /* what the child wrote of its current record */
} child_t;

/* An unnamed temporary file for a child's stderr (-1 if none can be made: the
 * child then keeps the parent's). */
static int stderr_file(void) {
  const char *tmp = getenv("TMPDIR");
  int fd = open(tmp && *tmp ? tmp : "/tmp", O_TMPFILE | O_RDWR | O_CLOEXEC, 0600);
  if (fd < 0 && tmp && *tmp) fd = open("/tmp", O_TMPFILE | O_RDWR | O_CLOEXEC, 0600);
  return fd;
}

/* The last line or two a failed child wrote to stderr, trimmed, in `out`. */
static void stderr_tail(int fd, char *out, size_t cap) {
  out[0] = '\0';
  if (fd < 0) return;
  off_t end = lseek(fd, 0, SEEK_END);
  if (end <= 0) return;
  off_t start = end > (off_t)(cap - 1) ? end - (off_t)(cap - 1) : 0;
  ssize_t n = pread(fd, out, (size_t)(end - start), start);
  if (n <= 0) {
    out[0] = '\0';
    return;
  }
  out[n] = '\0';
  while (n > 0 && (out[n - 1] == '\n' || out[n - 1] == ' ')) out[--n] = '\0';
  for (ssize_t i = 0; i < n; i++) {
    if (out[i] == '\n') out[i] = ' ';
  }
}

static void write_all(int fd, const void *p, size_t n) {
  const uint8_t *b = p;
  while (n > 0) {
    ssize_t w = write(fd, b, n);
    if (w < 0 && errno == EINTR) continue;
    if (w <= 0) _exit(3);
    b += w;
    n -= (size_t)w;
  }
}

/* Whether all n bytes were read (false at end of input, or on an error). */
static bool read_all(int fd, void *p, size_t n) {
  uint8_t *b = p;
  while (n > 0) {
    ssize_t r = read(fd, b, n);
    if (r < 0 && errno == EINTR) continue;
    if (r <= 0) return false;
    b += r;
    n -= (size_t)r;
  }
  return true;
}

#if defined(__SANITIZE_ADDRESS__)
/* LeakSanitizer's hook: no leak check when a child ends. A child is a copy of the
 * parent's heap that dies with it (the parent is checked); LLVM ends one with
 * exit(1) on a fatal error, and a leak report would bury its message, the end of
 * the child's stderr that becomes the target's error. */
static volatile int in_fanout_child;
int __lsan_is_turned_off(void);
int __lsan_is_turned_off(void) { return in_fanout_child; }
#define MARK_CHILD() (in_fanout_child = 1)
#else
#define MARK_CHILD() ((void)0)
#endif

/* The child's life: targets in, records out, until the parent has no more. */
static _Noreturn void child_main(pid_t parent, int fd, int err_fd, kiln_compiler_fanout_fn_t fn, void *user,
                                 const kiln_compiler_target_output_t *outs, size_t n) {
  MARK_CHILD();
  /* It dies with the process that forked it (kilnc stopped by a signal, a worker
   * killed by kilnd): it would finish its target for no one otherwise. That
   * thread waits in fanout until every child is reaped, so it outlives them. */
  prctl(PR_SET_PDEATHSIG, SIGKILL);
  if (getppid() != parent) _exit(0);
  if (err_fd >= 0) dup2(err_fd, STDERR_FILENO);
  uint64_t index;
  while (read_all(fd, &index, sizeof index) && index < n) {
    const char started = STARTED;
    write_all(fd, &started, 1);
    kiln_compiler_target_output_t mine = outs[index];
    fn(user, (size_t)index, &mine);
    kiln_buf_t b;
    kiln_buf_init(&b);
    put_u64(&b, 0);
    serialize(&mine, &b);
    uint64_t len = b.len - sizeof len;
    memcpy(b.data, &len, sizeof len);
    kiln_compiler_target_output_clear(&mine); /* before the record: a crash here is this target's */
    write_all(fd, b.data, b.len);
    kiln_buf_deinit(&b);
  }
  _exit(0);
}

/* The failure of the target a child died on (or, having exited cleanly, left
 * unfinished), with the signal or status and the end of what it said. */
static void child_died(child_t *c, int wstatus, kiln_compiler_target_output_t *out, const char *name) {
  const char *target = out->target->id;
  char said[512];
  stderr_tail(c->err_fd, said, sizeof said);
  if (WIFSIGNALED(wstatus)) {
    out->status =
        KILN_STATUS(KILN_STATUS_INTERNAL,
                    "%s: code generation for %s crashed (signal %d, %s)%s%s; the other "
                    "targets are unaffected",
                    name, target, WTERMSIG(wstatus), strsignal(WTERMSIG(wstatus)), said[0] ? ": " : "", said);
  } else if (!WIFEXITED(wstatus) || WEXITSTATUS(wstatus) != 0) {
    out->status =
        KILN_STATUS(KILN_STATUS_INTERNAL,
                    "%s: code generation for %s failed inside LLVM (exit status %d)%s%s; "
                    "the other targets are unaffected",
                    name, target, WIFEXITED(wstatus) ? WEXITSTATUS(wstatus) : -1, said[0] ? ": " : "", said);
  } else {
    out->status =
        KILN_STATUS(KILN_STATUS_INTERNAL, "%s: code generation for %s returned a damaged result (%zu bytes)",
                    name, target, c->data.len);
  }
}

/* Whether the child's current record arrived whole; if so it is in *out (a
 * record that does not parse fails the target as damaged). */
static bool record_arrived(child_t *c, kiln_compiler_target_output_t *out, const char *name) {
  if (!c->started && c->data.len > 0) {
    c->started = c->data.data[0] == STARTED;
    memmove(c->data.data, c->data.data + 1, --c->data.len);
  }
  uint64_t len;
  if (!c->started || c->data.len < sizeof len) return false;
  memcpy(&len, c->data.data, sizeof len);
  if (len > c->data.len - sizeof len) return false;
  const uint8_t *record = (const uint8_t *)c->data.data + sizeof len;
  if (len != c->data.len - sizeof len || !deserialize(record, (size_t)len, out)) {
    kiln_compiler_target_output_clear(out);
    out->status = KILN_STATUS(KILN_STATUS_INTERNAL,
                              "%s: code generation for %s returned a damaged result (%zu bytes)", name,
                              out->target->id, c->data.len);
  }
  c->data.len = 0;
  return true;
}

/* Hands target `index` to an idle child: its stderr file starts empty, so a
 * failure quotes only what this target made it say. False when the child is gone
 * (it then only waits to be reaped, and the target to be handed to another). */
static bool assign(child_t *c, size_t index) {
  if (c->err_fd >= 0 && ftruncate(c->err_fd, 0) == 0) lseek(c->err_fd, 0, SEEK_SET);
  uint64_t v = index;
  ssize_t w;
  do {
    w = send(c->fd, &v, sizeof v, MSG_NOSIGNAL);
  } while (w < 0 && errno == EINTR);
  if (w != (ssize_t)sizeof v) {
    shutdown(c->fd, SHUT_WR); /* should it still live: it exits and is reaped */
    c->ended = true;
    return false;
  }
  c->busy = true;
  c->started = false;
  c->target = index;
  c->data.len = 0;
  return true;
}

/* Forks a child into free slot `c`; false when no process can be made. */
static bool spawn(child_t *c, child_t *children, size_t slots, kiln_compiler_fanout_fn_t fn, void *user,
                  const kiln_compiler_target_output_t *outs, size_t n) {
  int sv[2];
  if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv) != 0) return false;
  int err_fd = stderr_file();
  pid_t parent = getpid();
  pid_t pid = fork();
  if (pid < 0) {
    close(sv[0]);
    close(sv[1]);
    if (err_fd >= 0) close(err_fd);
    return false;
  }
  if (pid == 0) {
    close(sv[0]);
    for (size_t s = 0; s < slots; s++) { /* the other children's ends are theirs */
      if (!children[s].pid) continue;
      close(children[s].fd);
      if (children[s].err_fd >= 0) close(children[s].err_fd);
    }
    child_main(parent, sv[1], err_fd, fn, user, outs, n);
  }
  close(sv[1]);
  *c = (child_t){.pid = pid, .fd = sv[0], .err_fd = err_fd};
  kiln_buf_init(&c->data);
  return true;
}

/* The targets still to hand out: the ones a child died before starting (each
 * given one more chance), then the next in order. */
typedef struct work_s {
  size_t next, n;
  size_t *again; /* a stack of targets to hand out once more */
  size_t n_again;
  bool *retried;
} work_t;

static bool work_left(const work_t *w) { return w->n_again > 0 || w->next < w->n; }
static size_t work_take(work_t *w) { return w->n_again ? w->again[--w->n_again] : w->next++; }
static void work_return(work_t *w, size_t index) { w->again[w->n_again++] = index; }

/* A target whose child was gone before it started on it: handed out once more;
 * the second time it fails (children that die at once must not loop forever). */
static void never_started(work_t *w, size_t index, kiln_compiler_target_output_t *outs, const char *name,
                          void (*ready)(void *user, size_t index), void *user) {
  if (!w->retried[index]) {
    w->retried[index] = true;
    work_return(w, index);
    return;
  }
  outs[index].status =
      KILN_STATUS(KILN_STATUS_INTERNAL,
                  "%s: code generation for %s did not start: two processes forked for it died first", name,
                  outs[index].target->id);
  if (ready) ready(user, index);
}

/* The end of a child's output: it exited or died. Its target, if it had one,
 * fails, or goes back to the work when the child never started on it. */
static void child_ended(child_t *c, work_t *work, kiln_compiler_target_output_t *outs, const char *name,
                        void (*ready)(void *user, size_t index), void *user) {
  close(c->fd);
  int wstatus = 0;
  while (waitpid(c->pid, &wstatus, 0) < 0 && errno == EINTR) {
  }
  if (c->busy && !c->started) {
    never_started(work, c->target, outs, name, ready, user);
  } else if (c->busy) {
    child_died(c, wstatus, &outs[c->target], name);
    if (ready) ready(user, c->target);
  }
  if (c->err_fd >= 0) close(c->err_fd);
  kiln_buf_deinit(&c->data);
  memset(c, 0, sizeof *c);
}

void kiln_compiler_fanout_run(size_t n, size_t jobs, kiln_compiler_fanout_fn_t fn, void *user,
                              kiln_compiler_target_output_t *outs, const char *name,
                              void (*ready)(void *user, size_t index)) {
  if (jobs < 1) jobs = 1;
  if (jobs > 64) jobs = 64; /* the poll set below holds 64 */
  if (jobs > n) jobs = n ? n : 1;
  child_t *children = kiln_calloc(jobs, sizeof *children);
  struct pollfd *fds = kiln_calloc(jobs, sizeof *fds);
  work_t work = {.n = n,
                 .again = kiln_calloc(n ? n : 1, sizeof *work.again),
                 .retried = kiln_calloc(n ? n : 1, sizeof *work.retried)};
  size_t live = 0;
  fflush(NULL); /* a child's _exit must not flush the parent's buffered output twice */
  while (work_left(&work) || live > 0) {
    /* Work for the idle children; the end of input for those with none left. */
    for (size_t s = 0; s < jobs; s++) {
      child_t *c = &children[s];
      if (!c->pid || c->busy || c->ended) continue;
      if (!work_left(&work)) {
        shutdown(c->fd, SHUT_WR);
        c->ended = true;
        continue;
      }
      size_t index = work_take(&work);
      if (!assign(c, index)) never_started(&work, index, outs, name, ready, user);
    }
    /* New children for free slots while targets wait. */
    for (size_t s = 0; s < jobs && work_left(&work); s++) {
      child_t *c = &children[s];
      if (c->pid) continue;
      size_t index = work_take(&work);
      if (spawn(c, children, jobs, fn, user, outs, n)) {
        live++;
        if (!assign(c, index)) never_started(&work, index, outs, name, ready, user);
      } else if (live == 0) {
        /* No process to spare and none running: compile this one here. */
        fn(user, index, &outs[index]);
        if (ready) ready(user, index);
      } else {
        work_return(&work, index);
      }
    }
    if (live == 0) continue;
    size_t nf = 0;
    size_t slot_of[64];
    for (size_t s = 0; s < jobs; s++) {
      if (!children[s].pid) continue;
      fds[nf] = (struct pollfd){.fd = children[s].fd, .events = POLLIN};
      slot_of[nf++] = s;
    }
    if (poll(fds, nf, -1) < 0) {
      if (errno == EINTR) continue;
      /* Cannot wait for the children: stop them, and fail what they had and what
       * was left, each target once. */
      int err = errno;
      for (size_t s = 0; s < jobs; s++) {
        if (!children[s].pid) continue;
        kill(children[s].pid, SIGKILL);
        children[s].started = true; /* no second chance: fail it */
        child_ended(&children[s], &work, outs, name, ready, user);
        live--;
      }
      while (work_left(&work)) {
        size_t index = work_take(&work);
        outs[index].status = KILN_STATUS(KILN_STATUS_INTERNAL, "%s: code generation for %s was not run: %s",
                                         name, outs[index].target->id, strerror(err));
        if (ready) ready(user, index);
      }
      break;
    }
    for (size_t f = 0; f < nf; f++) {
      if (!(fds[f].revents & (POLLIN | POLLHUP | POLLERR))) continue;
      child_t *c = &children[slot_of[f]];
      char chunk[65536];
      ssize_t r = read(c->fd, chunk, sizeof chunk);
      if (r < 0 && errno == EINTR) continue;
      if (r > 0) {
        kiln_buf_append(&c->data, chunk, (size_t)r);
        if (c->busy && record_arrived(c, &outs[c->target], name)) {
          c->busy = false;
          if (ready) ready(user, c->target);
        }
        continue;
      }
      child_ended(c, &work, outs, name, ready, user);
      live--;
    }
  }
  kiln_free(work.again);
  kiln_free(work.retried);
  kiln_free(children);
  kiln_free(fds);
}

int kiln_compiler_run_command(const char *const argv[], char *said, size_t cap) {
  if (cap) said[0] = '\0';
  int p[2];
  if (pipe2(p, O_CLOEXEC) != 0) return -1;
  posix_spawn_file_actions_t fa;
  posix_spawn_file_actions_init(&fa);
  posix_spawn_file_actions_addopen(&fa, STDIN_FILENO, "/dev/null", O_RDONLY, 0);
  posix_spawn_file_actions_adddup2(&fa, p[1], STDOUT_FILENO);
  posix_spawn_file_actions_adddup2(&fa, p[1], STDERR_FILENO);
  pid_t pid;
  int rc = posix_spawn(&pid, argv[0], &fa, NULL, (char *const *)argv, environ);
  posix_spawn_file_actions_destroy(&fa);
  close(p[1]);
  if (rc != 0) {
    close(p[0]);
    if (cap) snprintf(said, cap, "cannot run %s: %s", argv[0], strerror(rc));
    return -1;
  }
  /* Keep the first cap - 1 bytes; read the rest away so the tool never blocks. */
  size_t n = 0;
  char sink[4096];
  for (;;) {
    char *to = n + 1 < cap ? said + n : sink;
    size_t room = n + 1 < cap ? cap - 1 - n : sizeof sink;
    ssize_t r = read(p[0], to, room);
    if (r < 0 && errno == EINTR) continue;
    if (r <= 0) break;
    if (to != sink) n += (size_t)r;
  }
  close(p[0]);
  if (cap) said[n] = '\0';
  int wstatus = 0;
  while (waitpid(pid, &wstatus, 0) < 0) {
    if (errno != EINTR) return -1;
  }
  return wstatus;
}
