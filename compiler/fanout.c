/* Fan-out: the back halves of one compile in parallel child processes.
 *
 * After the shared front half, each target's back half is independent work on a
 * clone of the same module. MLIR's and LLVM's GPU serializers are not safe to run
 * on threads of one context (tried: they crash), so kiln forks: each child
 * inherits the warm context and the front half's module (copy-on-write), compiles
 * one target, writes the result down a pipe and _exits. The parent reads every
 * pipe with poll (a child blocked on a full pipe would otherwise deadlock the
 * parent's waitpid) and rebuilds the outputs.
 *
 * Invariants:
 *  - fork happens only from a process whose MLIR context runs single-threaded
 *    (kiln_compiler_context_create disables MLIR's thread pool), so no lock can be
 *    held by a thread that does not exist in the child;
 *  - a child that crashes, is killed or writes a short record fails only its own
 *    target, with the signal or exit status in the message and the end of what
 *    it wrote to stderr (LLVM reports a fatal error, "no libcall available for
 *    ftanh", on stderr and exits the process): each child's stderr is an
 *    unnamed temporary file the parent reads back;
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
#include <stdio.h>
#include <string.h>
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

typedef struct child_s {
  pid_t pid;
  int fd;
  int err_fd; /* the child's stderr: an unnamed temporary file, or -1 */
  size_t target;
  kiln_buf_t data;
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

static void finish_child(child_t *c, kiln_compiler_target_output_t *out, const char *name) {
  int wstatus = 0;
  while (waitpid(c->pid, &wstatus, 0) < 0 && errno == EINTR) {
  }
  const char *target = out->target->id;
  char said[512];
  stderr_tail(c->err_fd, said, sizeof said);
  if (c->err_fd >= 0) close(c->err_fd);
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
  } else if (!deserialize((const uint8_t *)c->data.data, c->data.len, out)) {
    kiln_compiler_target_output_clear(out);
    out->status =
        KILN_STATUS(KILN_STATUS_INTERNAL, "%s: code generation for %s returned a damaged result (%zu bytes)",
                    name, target, c->data.len);
  }
  kiln_buf_deinit(&c->data);
}

void kiln_compiler_fanout_run(size_t n, size_t jobs, kiln_compiler_fanout_fn_t fn, void *user,
                              kiln_compiler_target_output_t *outs, const char *name,
                              void (*ready)(void *user, size_t index)) {
  if (jobs < 1) jobs = 1;
  if (jobs > 64) jobs = 64; /* the poll set below holds 64 */
  child_t *children = kiln_calloc(jobs, sizeof *children);
  struct pollfd *fds = kiln_calloc(jobs, sizeof *fds);
  size_t next = 0, running = 0;
  fflush(NULL); /* a child's _exit must not flush the parent's buffered output twice */
  while (next < n || running > 0) {
    while (running < jobs && next < n) {
      int p[2];
      pid_t pid = -1;
      int err_fd = -1;
      if (pipe(p) == 0) {
        err_fd = stderr_file();
        pid = fork();
        if (pid < 0) {
          close(p[0]);
          close(p[1]);
          if (err_fd >= 0) close(err_fd);
          err_fd = -1;
        }
      }
      if (pid == 0) {
        close(p[0]);
        if (err_fd >= 0) dup2(err_fd, STDERR_FILENO);
        kiln_compiler_target_output_t mine = outs[next];
        fn(user, next, &mine);
        kiln_buf_t b;
        kiln_buf_init(&b);
        serialize(&mine, &b);
        write_all(p[1], b.data, b.len);
        _exit(0);
      }
      if (pid < 0) {
        /* No process to spare: compile this one here, in order. */
        fn(user, next, &outs[next]);
        if (ready) ready(user, next);
        next++;
        continue;
      }
      close(p[1]);
      child_t *c = NULL;
      for (size_t s = 0; s < jobs && !c; s++) {
        if (children[s].pid == 0) c = &children[s];
      }
      c->pid = pid;
      c->fd = p[0];
      c->err_fd = err_fd;
      c->target = next++;
      kiln_buf_init(&c->data);
      running++;
    }
    size_t nf = 0;
    size_t slot_of[64];
    for (size_t s = 0; s < jobs && nf < 64; s++) {
      if (children[s].pid == 0) continue;
      fds[nf] = (struct pollfd){.fd = children[s].fd, .events = POLLIN};
      slot_of[nf++] = s;
    }
    if (poll(fds, nf, -1) < 0 && errno != EINTR) break;
    for (size_t f = 0; f < nf; f++) {
      if (!(fds[f].revents & (POLLIN | POLLHUP | POLLERR))) continue;
      child_t *c = &children[slot_of[f]];
      char chunk[65536];
      ssize_t r = read(c->fd, chunk, sizeof chunk);
      if (r < 0 && errno == EINTR) continue;
      if (r > 0) {
        kiln_buf_append(&c->data, chunk, (size_t)r);
        continue;
      }
      close(c->fd);
      size_t done = c->target;
      finish_child(c, &outs[done], name);
      memset(c, 0, sizeof *c);
      running--;
      if (ready) ready(user, done);
    }
  }
  kiln_free(children);
  kiln_free(fds);
}

int kiln_compiler_run_command(const char *cmd, char *said, size_t cap) {
  FILE *p = popen(cmd, "r");
  size_t n = p && cap ? fread(said, 1, cap - 1, p) : 0;
  if (cap) said[n] = '\0';
  return p ? pclose(p) : -1;
}
