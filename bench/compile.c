/* bench_compile: kiln's in-process compile against the same passes run as mlir-opt
 * processes, and one N-target fan-out against N independent compiles.
 *
 * Everything is measured side by side in one run and printed as ratios, so the numbers
 * mean the same on a laptop and on a 2-core CI VM:
 *
 * 1. Per example model (examples/mlp.mlir, convnet.mlir, attention.mlir) and per GPU
 *    target of the registry: kiln_compiler_compile for that one target on a warm
 *    context, against a replay of the same pass pipelines (kiln_compiler_pipeline_text)
 *    as processes:
 *      mlir-opt-22 MODEL --pass-pipeline=BUFFERIZE | mlir-opt-22 --pass-pipeline=REST |
 *      mlir-opt-22 --pass-pipeline=BACK -o /dev/null
 *    (kiln_compiler_pipeline_stages). Between the first two the benchmark rewrites
 *    each host memref.copy into a linalg.copy as text, the step kiln does in C, so
 *    both sides make the same kernels (a padded convolution's interior copy is one).
 *    The two processes start together (the second one's start-up overlaps the first
 *    one's work, as in a shell pipe); the benchmark sits in the pipe and adds to each
 *    gpu.func the workgroup-size attributes kiln writes in C between the halves
 *    (known_block_size; spirv.entry_point_abi for Vulkan, without which
 *    convert-gpu-to-spirv fails). That edit costs microseconds. kiln also serializes
 *    Vulkan's SPIR-V after BACK and analyses kernel arguments; the replay does
 *    neither, which favours mlir-opt. kiln's ptxas step (CUDA cubins, when ptxas is
 *    installed) has no counterpart in the replay, so it is off for the tables
 *    (KILN_PTXAS names no file) and timed on the first CUDA row on its own.
 *    Goal: mlir-opt/kiln >= 3.0x summed over all targets of a model.
 * 2. Fan-out: one kiln_compiler_compile for the six mission targets against six
 *    single-target compiles (same warm context). The shared front half runs once
 *    instead of six times, so with front share f of a single compile the best ratio
 *    for N targets is (f + (1-f)N)/N; that bound is printed beside the measured ratio.
 *    Goal: fan-out/independent <= 0.6x.
 * 3. Compile time against op count (bench_scaling): per-op time of a 20,000-op chain of
 *    tosa.add against a 1,000-op one (goal <= 2x), and of 1,000 matmuls against 100.
 * 4. Peak RSS of this process and of the mlir-opt processes, and CPU/wall of each side.
 *    mlir-opt runs under a small runner process forked before MLIR is loaded, so its
 *    ru_maxrss is its own (see "the runner" below).
 *
 * Method: one context, created untimed. Before any timed run the first model is
 * compiled once for every target, untimed (loads each LLVM backend, makes the HIP
 * toolkit directory); later models warm up on one target. kiln and mlir-opt runs
 * alternate, in an order that rotates every round, so drift hits both alike; each
 * number is a median. A target kiln fails prints the first line of its error in its
 * row and leaves the totals; so does a failed replay; a missing mlir-opt skips the
 * baseline columns. Goals are reported as PASS/MISS, never asserted: the program
 * exits 0 unless the benchmark itself cannot run (then 1).
 *
 * Usage: bench_compile [--quick]. --quick (CI smoke): mlp.mlir only, fewer runs.
 * Single-threaded (MLIR may use its thread pool inside a compile).
 */
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <signal.h>
#include <spawn.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/time.h>
#include <sys/wait.h>
#include <unistd.h>

#include "base/alloc.h"
#include "base/buf.h"
#include "base/log.h"
#include "base/status.h"
#include "base/time.h"
#include "bench/benchlib.h"
#include "compiler/identity.h"
#include "compiler/pipeline.h"
#include "compiler/source.h"
#include "compiler/targets.h"

#ifndef KILN_SOURCE_DIR
#error "KILN_SOURCE_DIR must name the source tree (bench/CMakeLists.txt defines it)"
#endif

#define SPEEDUP_GOAL 3.0 /* mlir-opt/kiln, summed over a model's targets */
#define FANOUT_GOAL  0.6 /* fan-out/independent for the mission targets */
#define MAX_TARGETS  32
#define ERR_COLS     60 /* how much of an error line fits in a row */

extern char **environ;

static const char *const all_models[] = {"mlp", "convnet", "attention"};
static const char *const mission_ids[] = {"sm_89", "sm_120", "gfx950", "gfx1100", "arm5gen", "videocore_vii"};
#define N_MISSION (sizeof mission_ids / sizeof mission_ids[0])

typedef struct plan_s {
  bool quick;
  size_t kiln_runs;    /* timed kiln compiles per row (median) */
  size_t opt_runs;     /* timed mlir-opt replays per row (median) */
  size_t n_models;     /* section 1: the first n_models of all_models */
  size_t n_fan_models; /* section 2: the first n_fan_models of all_models */
} plan_t;

static kiln_compiler_context_t *context; /* the one warm context */

/* ---- failure ---- */

static _Noreturn void die(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static _Noreturn void die(const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  fputs("bench_compile: ", stderr);
  vfprintf(stderr, fmt, ap);
  fputc('\n', stderr);
  va_end(ap);
  kiln_compiler_context_destroy(context); /* removes the HIP toolkit directory */
  exit(1);
}

/* Consumes `st`; on failure reports what failed and exits 1. */
static void check(kiln_status_t st, const char *what) {
  if (!st) return;
  fprintf(stderr, "bench_compile: %s failed: %s: %s (at %s)\n", what,
          kiln_status_code_name(kiln_status_code(st)), kiln_status_message(st), kiln_status_where(st));
  kiln_status_free(st);
  kiln_compiler_context_destroy(context);
  exit(1);
}

/* ---- small helpers ---- */

/* Sorts in place. */
static int64_t median_i64(int64_t *v, size_t n) { return kiln_bench_median(v, n); }

static double ms(int64_t ns) { return (double)ns / 1e6; }

static double timeval_s(struct timeval tv) { return (double)tv.tv_sec + (double)tv.tv_usec / 1e6; }

static double cpu_s(const struct rusage *ru) { return timeval_s(ru->ru_utime) + timeval_s(ru->ru_stime); }

/* The first line of `text` that says "error", else its first line, cut to `cap`. */
static void first_error_line(const char *text, char *out, size_t cap) {
  const char *line = text;
  for (const char *p = text; p && *p;) {
    const char *nl = strchr(p, '\n');
    size_t len = nl ? (size_t)(nl - p) : strlen(p);
    if (memmem(p, len, "error", 5)) {
      line = p;
      break;
    }
    p = nl ? nl + 1 : NULL;
  }
  size_t len = strcspn(line, "\n");
  if (len >= cap) len = cap - 1;
  memcpy(out, line, len);
  out[len] = '\0';
}

static char *read_model(const char *model, size_t *out_len, char *path, size_t path_cap) {
  snprintf(path, path_cap, "%s/examples/%s.mlir", KILN_SOURCE_DIR, model);
  FILE *f = fopen(path, "rb");
  if (!f) die("cannot open %s: %s", path, strerror(errno));
  kiln_buf_t buf;
  kiln_buf_init(&buf);
  char chunk[8192];
  size_t n;
  while ((n = fread(chunk, 1, sizeof chunk, f)) > 0) kiln_buf_append(&buf, chunk, n);
  if (ferror(f)) die("cannot read %s", path);
  fclose(f);
  *out_len = buf.len;
  return kiln_buf_take(&buf);
}

/* /usr/lib/llvm-22/bin/mlir-opt, else mlir-opt-22 on PATH; false when neither. */
static bool find_mlir_opt(char *out, size_t cap) {
  static const char fixed[] = "/usr/lib/llvm-22/bin/mlir-opt";
  if (access(fixed, X_OK) == 0) {
    snprintf(out, cap, "%s", fixed);
    return true;
  }
  const char *path = getenv("PATH");
  while (path && *path) {
    size_t len = strcspn(path, ":");
    if (len > 0 && (size_t)snprintf(out, cap, "%.*s/mlir-opt-22", (int)len, path) < cap &&
        access(out, X_OK) == 0) {
      return true;
    }
    path += len + (path[len] == ':');
  }
  return false;
}

/* ---- the mlir-opt replay ---- */

/* A kernel's workgroup size, as kiln read it back from its gpu.launch_func. */
typedef struct shape_s {
  char *module_name;
  char *name;
  uint32_t block[3];
} shape_t;

typedef struct shapes_s {
  shape_t *items;
  size_t n;
} shapes_t;

static void shapes_from(const kiln_compiler_target_output_t *t, shapes_t *out) {
  out->items = kiln_calloc(t->n_kernels ? t->n_kernels : 1, sizeof *out->items);
  out->n = t->n_kernels;
  for (size_t i = 0; i < t->n_kernels; i++) {
    /* kiln merges the outlined modules into one and names each kernel after the
     * module it came from; the replay keeps one module per kernel, so the kernel's
     * name is the replay's module name. */
    out->items[i].module_name = kiln_strdup(t->kernels[i].name);
    out->items[i].name = kiln_strdup(t->kernels[i].name);
    memcpy(out->items[i].block, t->kernels[i].block_size, sizeof out->items[i].block);
  }
}

static void shapes_deinit(shapes_t *shapes) {
  for (size_t i = 0; i < shapes->n; i++) {
    kiln_free(shapes->items[i].module_name);
    kiln_free(shapes->items[i].name);
  }
  kiln_free(shapes->items);
  memset(shapes, 0, sizeof *shapes);
}

static const shape_t *find_shape(const shapes_t *shapes, const char *module, size_t module_len,
                                 const char *name, size_t name_len) {
  for (size_t i = 0; i < shapes->n; i++) {
    const shape_t *s = &shapes->items[i];
    (void)name, (void)name_len; /* one kernel per replay module: the module decides */
    if (strlen(s->module_name) == module_len && !memcmp(s->module_name, module, module_len)) {
      return s;
    }
  }
  return NULL;
}

/* Length of the symbol name at `p` (after '@'). */
static size_t symbol_len(const char *p, const char *end) {
  size_t n = 0;
  while (p + n < end && (p[n] == '_' || p[n] == '.' || p[n] == '$' || (p[n] >= '0' && p[n] <= '9') ||
                         (p[n] >= 'a' && p[n] <= 'z') || (p[n] >= 'A' && p[n] <= 'Z'))) {
    n++;
  }
  return n;
}

/* Copies the front half's printed IR to `out`, adding to each kernel's gpu.func line
 * ("gpu.func @k(...) kernel {") the attributes kiln sets through the C API between the
 * halves. mlir-opt prints each gpu.func header on one line. */
static void annotate(const char *ir, size_t len, const shapes_t *shapes, bool spirv, kiln_buf_t *out) {
  static const char tail[] = ") kernel {";
  const char *module = "";
  size_t module_len = 0;
  const char *end = ir + len;
  for (const char *line = ir; line < end;) {
    const char *nl = memchr(line, '\n', (size_t)(end - line));
    const char *eol = nl ? nl : end;
    const char *m = memmem(line, (size_t)(eol - line), "gpu.module @", 12);
    const char *f = memmem(line, (size_t)(eol - line), "gpu.func @", 10);
    size_t tail_len = sizeof tail - 1;
    if (m) {
      module = m + 12;
      module_len = symbol_len(module, eol);
    }
    const shape_t *s = NULL;
    /* Outlining with constant launch sizes already wrote known_block_size:
     * "gpu.func @k(...) kernel attributes {known_block_size = ...} {". Vulkan still
     * needs the entry point ABI, added first inside those attributes. */
    static const char attrs[] = " kernel attributes {";
    const char *a = f ? memmem(f, (size_t)(eol - f), attrs, sizeof attrs - 1) : NULL;
    if (a && (size_t)(eol - line) > 3 && !memcmp(eol - 3, "} {", 3)) {
      s = find_shape(shapes, module, module_len, f + 10, symbol_len(f + 10, eol));
      const char *insert = a + sizeof attrs - 1;
      kiln_buf_append(out, line, (size_t)(insert - line));
      if (s && spirv) {
        kiln_buf_appendf(out,
                         "spirv.entry_point_abi = #spirv.entry_point_abi<workgroup_size = "
                         "[%u, %u, %u]>, ",
                         s->block[0], s->block[1], s->block[2]);
      }
      kiln_buf_append(out, insert, (size_t)(eol - insert));
      s = NULL;
    } else if (f && (size_t)(eol - line) > tail_len && !memcmp(eol - tail_len, tail, tail_len)) {
      s = find_shape(shapes, module, module_len, f + 10, symbol_len(f + 10, eol));
      if (!s) kiln_buf_append(out, line, (size_t)(eol - line));
    } else {
      kiln_buf_append(out, line, (size_t)(eol - line));
    }
    if (s) {
      kiln_buf_append(out, line, (size_t)(eol - line) - 2); /* drops " {" */
      kiln_buf_appendf(out, " attributes {known_block_size = array<i32: %u, %u, %u>", s->block[0],
                       s->block[1], s->block[2]);
      if (spirv) {
        kiln_buf_appendf(out,
                         ", spirv.entry_point_abi = #spirv.entry_point_abi<workgroup_size = "
                         "[%u, %u, %u]>",
                         s->block[0], s->block[1], s->block[2]);
      }
      kiln_buf_append_str(out, "} {");
    }
    if (nl) kiln_buf_append_char(out, '\n');
    line = eol + 1;
  }
}

/* kiln's C step between the front stages (kiln_compiler_copies_to_kernels), as a
 * text edit: "memref.copy %a, %b : T to U" becomes "linalg.copy ins(%a : T) outs(%b :
 * U)", which the loop passes then turn into a kernel exactly as kiln's does. */
static void rewrite_copies(const char *ir, size_t len, kiln_buf_t *out) {
  const char *end = ir + len;
  for (const char *line = ir; line < end;) {
    const char *nl = memchr(line, '\n', (size_t)(end - line));
    const char *eol = nl ? nl : end;
    const char *c = memmem(line, (size_t)(eol - line), "memref.copy %", 13);
    const char *comma = c ? memchr(c, ',', (size_t)(eol - c)) : NULL;
    const char *colon = comma ? memmem(comma, (size_t)(eol - comma), " : ", 3) : NULL;
    const char *to = colon ? memmem(colon, (size_t)(eol - colon), " to ", 4) : NULL;
    if (to) {
      kiln_buf_append(out, line, (size_t)(c - line));
      kiln_buf_append_str(out, "linalg.copy ins(");
      kiln_buf_append(out, c + 12, (size_t)(comma - (c + 12)));
      kiln_buf_append_str(out, " : ");
      kiln_buf_append(out, colon + 3, (size_t)(to - (colon + 3)));
      kiln_buf_append_str(out, ") outs(");
      const char *dst = comma + 1;
      while (*dst == ' ') dst++;
      kiln_buf_append(out, dst, (size_t)(colon - dst));
      kiln_buf_append_str(out, " : ");
      kiln_buf_append(out, to + 4, (size_t)(eol - (to + 4)));
      kiln_buf_append_char(out, ')');
    } else {
      kiln_buf_append(out, line, (size_t)(eol - line));
    }
    if (nl) kiln_buf_append_char(out, '\n');
    line = eol + 1;
  }
}

/* One replay's outcome, as the runner reports it. */
typedef struct opt_result_s {
  int32_t ok;          /* both processes exited 0 */
  int64_t ns;          /* wall time, first spawn to last reap */
  int64_t max_rss_kib; /* the larger of the two processes' ru_maxrss */
  double cpu_s;        /* user + system of both (and of their children: HIP's ld.lld) */
  char err[200];       /* when !ok: "front|back half: <first error line>" */
} opt_result_t;

/* One stderr file per process, reused: a pipe could fill up with diagnostics. */
static int stderr_fd[2] = {-1, -1};

static void stderr_files_open(void) {
  for (int i = 0; i < 2; i++) {
    FILE *f = tmpfile();
    if (!f) die("cannot create a temporary file: %s", strerror(errno));
    stderr_fd[i] = dup(fileno(f));
    fclose(f);
    if (stderr_fd[i] < 0) die("cannot dup a temporary file: %s", strerror(errno));
    fcntl(stderr_fd[i], F_SETFD, FD_CLOEXEC);
  }
}

static void stderr_file_reset(int fd) {
  if (ftruncate(fd, 0) != 0 || lseek(fd, 0, SEEK_SET) != 0) {
    die("cannot reset a temporary file: %s", strerror(errno));
  }
}

static void stderr_file_read(int fd, kiln_buf_t *out) {
  char chunk[4096];
  if (lseek(fd, 0, SEEK_SET) != 0) die("cannot rewind a temporary file: %s", strerror(errno));
  ssize_t n;
  while ((n = read(fd, chunk, sizeof chunk)) > 0) kiln_buf_append(out, chunk, (size_t)n);
}

static pid_t spawn(const char *const *argv, int in_fd, int out_fd, int err_fd) {
  posix_spawn_file_actions_t fa;
  posix_spawn_file_actions_init(&fa);
  if (in_fd >= 0) posix_spawn_file_actions_adddup2(&fa, in_fd, STDIN_FILENO);
  if (out_fd >= 0) posix_spawn_file_actions_adddup2(&fa, out_fd, STDOUT_FILENO);
  posix_spawn_file_actions_adddup2(&fa, err_fd, STDERR_FILENO);
  pid_t pid;
  int err = posix_spawn(&pid, argv[0], &fa, NULL, (char *const *)argv, environ);
  posix_spawn_file_actions_destroy(&fa);
  if (err) die("cannot start %s: %s", argv[0], strerror(err));
  return pid;
}

static int reap(pid_t pid, opt_result_t *res) {
  int status;
  struct rusage ru;
  while (wait4(pid, &status, 0, &ru) < 0) {
    if (errno != EINTR) die("wait4: %s", strerror(errno));
  }
  if (ru.ru_maxrss > res->max_rss_kib) res->max_rss_kib = ru.ru_maxrss;
  res->cpu_s += cpu_s(&ru);
  return status;
}

static void write_whole(int fd, const char *data, size_t len) {
  for (size_t off = 0; off < len;) {
    ssize_t n = write(fd, data + off, len - off);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) break; /* the reader died early: its exit status tells the story */
    off += (size_t)n;
  }
}

static void read_whole(int fd, kiln_buf_t *out) {
  char chunk[65536];
  for (;;) {
    ssize_t n = read(fd, chunk, sizeof chunk);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) die("cannot read from mlir-opt: %s", strerror(errno));
    if (n == 0) break;
    kiln_buf_append(out, chunk, (size_t)n);
  }
}

/* Runs FRONT | (annotate) | BACK once, in the runner; when `front` holds two
 * pipelines ("BUFFERIZE\nREST", kiln_compiler_pipeline_stages), the front runs as
 * BUFFERIZE | (copies to linalg.copy) | REST, as kiln does in one process. */
static void opt_run(const char *mlir_opt, const char *model_path, const char *front, const char *back,
                    const shapes_t *shapes, bool spirv, opt_result_t *res) {
  memset(res, 0, sizeof *res);
  kiln_buf_t front_arg, back_arg, ir, edited;
  kiln_buf_init(&front_arg);
  kiln_buf_init(&back_arg);
  kiln_buf_init(&ir);
  kiln_buf_init(&edited);
  const char *split = strchr(front, '\n');
  kiln_buf_t rest_arg;
  kiln_buf_init(&rest_arg);
  if (split) {
    kiln_buf_appendf(&front_arg, "--pass-pipeline=%.*s", (int)(split - front), front);
    kiln_buf_appendf(&rest_arg, "--pass-pipeline=%s", split + 1);
  } else {
    kiln_buf_appendf(&front_arg, "--pass-pipeline=%s", front);
  }
  kiln_buf_appendf(&back_arg, "--pass-pipeline=%s", back);
  const char *front_argv[] = {mlir_opt, model_path, front_arg.data, NULL};
  const char *rest_argv[] = {mlir_opt, rest_arg.data, NULL};
  const char *back_argv[] = {mlir_opt, back_arg.data, "-o", "/dev/null", NULL};
  stderr_file_reset(stderr_fd[0]);
  stderr_file_reset(stderr_fd[1]);
  int p1[2], p2[2]; /* front -> runner, runner -> back */
  if (pipe2(p1, O_CLOEXEC) != 0 || pipe2(p2, O_CLOEXEC) != 0) die("pipe: %s", strerror(errno));

  int64_t t0 = kiln_time_monotonic_ns();
  pid_t front_pid = spawn(front_argv, -1, p1[1], stderr_fd[0]);
  pid_t back_pid = spawn(back_argv, p2[0], -1, stderr_fd[1]);
  close(p1[1]);
  close(p2[0]);
  read_whole(p1[0], &ir);
  close(p1[0]);
  int rest_status = 0;
  bool rest_ok = true;
  if (split) {
    /* FRONT's output, copies rewritten, through REST (it reads all its input before
     * it writes, so writing everything first cannot deadlock). */
    kiln_buf_t rewritten;
    kiln_buf_init(&rewritten);
    rewrite_copies(ir.data, ir.len, &rewritten);
    int p3[2], p4[2];
    if (pipe2(p3, O_CLOEXEC) != 0 || pipe2(p4, O_CLOEXEC) != 0) die("pipe: %s", strerror(errno));
    pid_t rest_pid = spawn(rest_argv, p3[0], p4[1], stderr_fd[0]);
    close(p3[0]);
    close(p4[1]);
    write_whole(p3[1], rewritten.data, rewritten.len);
    close(p3[1]);
    kiln_buf_clear(&ir);
    read_whole(p4[0], &ir);
    close(p4[0]);
    rest_status = reap(rest_pid, res);
    rest_ok = WIFEXITED(rest_status) && WEXITSTATUS(rest_status) == 0;
    kiln_buf_deinit(&rewritten);
  }
  annotate(ir.data, ir.len, shapes, spirv, &edited);
  /* A back process that died early shows as EPIPE (SIGPIPE is ignored); its exit
   * status tells the story. */
  write_whole(p2[1], edited.data, edited.len);
  close(p2[1]);
  int front_status = reap(front_pid, res);
  int back_status = reap(back_pid, res);
  res->ns = kiln_time_monotonic_ns() - t0;

  bool front_ok = WIFEXITED(front_status) && WEXITSTATUS(front_status) == 0 && rest_ok;
  bool back_ok = WIFEXITED(back_status) && WEXITSTATUS(back_status) == 0;
  res->ok = front_ok && back_ok;
  if (!res->ok) {
    kiln_buf_t text;
    kiln_buf_init(&text);
    stderr_file_read(stderr_fd[front_ok ? 1 : 0], &text);
    char line[160];
    first_error_line(text.len ? text.data : "(no output)", line, sizeof line);
    snprintf(res->err, sizeof res->err, "%s half: %s", front_ok ? "back" : "front", line);
    kiln_buf_deinit(&text);
  }
  kiln_buf_deinit(&front_arg);
  kiln_buf_deinit(&rest_arg);
  kiln_buf_deinit(&back_arg);
  kiln_buf_deinit(&ir);
  kiln_buf_deinit(&edited);
}

/* ---- the runner: the process that starts mlir-opt ----
 *
 * Linux charges a child the spawner's peak RSS: posix_spawn shares the spawner's
 * memory until exec, and exec keeps the old high-water mark in ru_maxrss. Spawned
 * from this process (an MLIR context, hundreds of MiB), every mlir-opt would report
 * at least that. So a runner forked before MLIR is loaded starts them: requests
 * (model path, the two pipelines, kernel shapes) go down one pipe, opt_result_t
 * comes back up another. On EOF it reports its RUSAGE_CHILDREN and its own peak
 * RSS (a floor under every child's number) and exits. */

typedef struct runner_s {
  pid_t pid;
  int to_fd, from_fd;
} runner_t;

static void write_all(int fd, const void *data, size_t len) {
  const unsigned char *p = data;
  while (len > 0) {
    ssize_t n = write(fd, p, len);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) die("cannot write to the runner pipe: %s", strerror(errno));
    p += n;
    len -= (size_t)n;
  }
}

/* False on EOF before the first byte. */
static bool read_all(int fd, void *data, size_t len) {
  unsigned char *p = data;
  size_t got = 0;
  while (got < len) {
    ssize_t n = read(fd, p + got, len - got);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) die("cannot read from the runner pipe: %s", strerror(errno));
    if (n == 0) {
      if (got == 0) return false;
      die("the runner pipe closed mid-message");
    }
    got += (size_t)n;
  }
  return true;
}

static void put_u32(kiln_buf_t *b, uint32_t x) { kiln_buf_append(b, &x, sizeof x); }

static void put_str(kiln_buf_t *b, const char *s) {
  put_u32(b, (uint32_t)strlen(s));
  kiln_buf_append(b, s, strlen(s));
}

static uint32_t get_u32(const char **p) {
  uint32_t x;
  memcpy(&x, *p, sizeof x);
  *p += sizeof x;
  return x;
}

static char *get_str(const char **p) {
  uint32_t n = get_u32(p);
  char *s = kiln_strndup(*p, n);
  *p += n;
  return s;
}

/* The end-of-run report of the runner. */
typedef struct runner_report_s {
  int64_t children_max_rss_kib; /* getrusage(RUSAGE_CHILDREN) */
  int64_t self_max_rss_kib;
} runner_report_t;

static _Noreturn void runner_main(const char *mlir_opt, int from_fd, int to_fd) {
  stderr_files_open();
  uint64_t len;
  while (read_all(from_fd, &len, sizeof len)) {
    char *msg = kiln_malloc(len ? len : 1);
    if (!read_all(from_fd, msg, len)) die("the runner pipe closed mid-message");
    const char *p = msg;
    char *model_path = get_str(&p), *front = get_str(&p), *back = get_str(&p);
    bool spirv = get_u32(&p) != 0;
    shapes_t shapes = {.n = get_u32(&p)};
    shapes.items = kiln_calloc(shapes.n ? shapes.n : 1, sizeof *shapes.items);
    for (size_t i = 0; i < shapes.n; i++) {
      shapes.items[i].module_name = get_str(&p);
      shapes.items[i].name = get_str(&p);
      for (int d = 0; d < 3; d++) shapes.items[i].block[d] = get_u32(&p);
    }
    opt_result_t res;
    opt_run(mlir_opt, model_path, front, back, &shapes, spirv, &res);
    write_all(to_fd, &res, sizeof res);
    shapes_deinit(&shapes);
    kiln_free(model_path);
    kiln_free(front);
    kiln_free(back);
    kiln_free(msg);
  }
  struct rusage children, self;
  getrusage(RUSAGE_CHILDREN, &children);
  getrusage(RUSAGE_SELF, &self);
  runner_report_t report = {children.ru_maxrss, self.ru_maxrss};
  write_all(to_fd, &report, sizeof report);
  _exit(0);
}

/* Forks the runner; call before any MLIR context exists. */
static void runner_start(runner_t *runner, const char *mlir_opt) {
  int down[2], up[2];
  if (pipe2(down, O_CLOEXEC) != 0 || pipe2(up, O_CLOEXEC) != 0) die("pipe: %s", strerror(errno));
  fflush(NULL); /* nothing buffered may be written twice */
  pid_t pid = fork();
  if (pid < 0) die("fork: %s", strerror(errno));
  if (pid == 0) {
    close(down[1]);
    close(up[0]);
    runner_main(mlir_opt, down[0], up[1]);
  }
  close(down[0]);
  close(up[1]);
  runner->pid = pid;
  runner->to_fd = down[1];
  runner->from_fd = up[0];
}

/* Ends the runner and collects its report. */
static void runner_stop(runner_t *runner, runner_report_t *out_report) {
  close(runner->to_fd);
  if (!read_all(runner->from_fd, out_report, sizeof *out_report)) die("the runner died");
  close(runner->from_fd);
  waitpid(runner->pid, NULL, 0);
}

/* What the mlir-opt replays cost over the whole run, for section 3. */
static struct {
  size_t runs;
  int64_t max_rss_kib;
  double cpu_s;
  int64_t wall_ns;
} opt_totals;

/* The replay's fixed cost: an empty pipeline pair on an empty module; 0 if it fails. */
static int64_t opt_startup_ns;

/* One replay through the runner. Returns true and the wall time when both processes
 * exited 0; otherwise false and the first error line in `err`. */
static bool opt_replay(runner_t *runner, const char *model_path, const char *front, const char *back,
                       const shapes_t *shapes, bool spirv, int64_t *out_ns, char *err, size_t err_cap) {
  kiln_buf_t msg;
  kiln_buf_init(&msg);
  put_str(&msg, model_path);
  put_str(&msg, front);
  put_str(&msg, back);
  put_u32(&msg, spirv);
  put_u32(&msg, (uint32_t)shapes->n);
  for (size_t i = 0; i < shapes->n; i++) {
    put_str(&msg, shapes->items[i].module_name);
    put_str(&msg, shapes->items[i].name);
    for (int d = 0; d < 3; d++) put_u32(&msg, shapes->items[i].block[d]);
  }
  uint64_t len = msg.len;
  write_all(runner->to_fd, &len, sizeof len);
  write_all(runner->to_fd, msg.data, msg.len);
  kiln_buf_deinit(&msg);
  opt_result_t res;
  if (!read_all(runner->from_fd, &res, sizeof res)) die("the runner died");
  opt_totals.runs++;
  if (res.max_rss_kib > opt_totals.max_rss_kib) opt_totals.max_rss_kib = res.max_rss_kib;
  opt_totals.cpu_s += res.cpu_s;
  opt_totals.wall_ns += res.ns;
  *out_ns = res.ns;
  if (!res.ok) snprintf(err, err_cap, "%s", res.err);
  return res.ok;
}

/* ---- kiln ---- */

/* kiln's side of the run, for section 3. */
static double kiln_cpu_s;
static int64_t kiln_wall_ns;

/* One timed kiln_compiler_compile. Returns its wall time; `out` is the caller's to
 * deinit. A failed front half leaves `out` empty and returns the status. */
static int64_t kiln_run(const char *src, size_t len, const char *name, const kiln_target_t *const *targets,
                        size_t n, kiln_compiler_output_t *out, kiln_status_t *out_status) {
  /* ld.lld, which the HIP serializer runs, is reaped inside the call: its CPU shows
   * in RUSAGE_CHILDREN (the runner is reaped only at the end). */
  struct rusage s0, s1, c0, c1;
  getrusage(RUSAGE_SELF, &s0);
  getrusage(RUSAGE_CHILDREN, &c0);
  int64_t t0 = kiln_time_monotonic_ns();
  *out_status = kiln_compiler_compile(context, src, len, name, targets, n, out);
  int64_t t1 = kiln_time_monotonic_ns();
  getrusage(RUSAGE_SELF, &s1);
  getrusage(RUSAGE_CHILDREN, &c1);
  kiln_cpu_s += cpu_s(&s1) - cpu_s(&s0) + cpu_s(&c1) - cpu_s(&c0);
  kiln_wall_ns += t1 - t0;
  return t1 - t0;
}

/* One single-target compile: its wall time, and on failure the first error line.
 * `out_cubins` (may be NULL) gets how many kernels came with a cubin. */
static bool kiln_once(const char *src, size_t len, const char *name, const kiln_target_t *target,
                      int64_t *out_ns, char *err, size_t err_cap, size_t *out_cubins) {
  kiln_compiler_output_t out;
  kiln_status_t st;
  *out_ns = kiln_run(src, len, name, &target, 1, &out, &st);
  if (st) {
    first_error_line(kiln_status_message(st), err, err_cap);
    kiln_status_free(st);
    return false;
  }
  bool ok = !out.targets[0].status;
  if (!ok) first_error_line(kiln_status_message(out.targets[0].status), err, err_cap);
  if (out_cubins) {
    *out_cubins = 0;
    for (size_t k = 0; k < out.targets[0].n_kernels; k++)
      *out_cubins += out.targets[0].kernels[k].cubin != NULL;
  }
  kiln_compiler_output_deinit(&out);
  return ok;
}

/* kiln assembles CUDA kernels with ptxas when it finds one ($KILN_PTXAS, PATH,
 * /usr/local/cuda/bin), one process per kernel; the mlir-opt replay has no such
 * step. The tables run with it off (KILN_PTXAS naming no file) so both sides do
 * the same work, and time it separately. The compile reads the variable on each
 * call, on this thread, between calls. */
static char *ptxas_env; /* the user's KILN_PTXAS, NULL when unset */

static void ptxas_set(bool on) {
  if (!on)
    setenv("KILN_PTXAS", "/nonexistent/ptxas (turned off by bench_compile)", 1);
  else if (ptxas_env)
    setenv("KILN_PTXAS", ptxas_env, 1);
  else
    unsetenv("KILN_PTXAS");
}

/* ---- sections ---- */

static void print_header(const plan_t *plan, const char *mlir_opt) {
  long cores = sysconf(_SC_NPROCESSORS_ONLN);
  long pages = sysconf(_SC_PHYS_PAGES), page = sysconf(_SC_PAGESIZE);
  char cpu[128];
  kiln_bench_cpu_model(cpu, sizeof cpu);
  kiln_compiler_identity_t id;
  kiln_compiler_identity_get(&id);
  printf(
      "kiln compile benchmark (%s): in-process compile vs mlir-opt processes, and fan-out vs\n"
      "independent compiles, side by side in one run\n",
      plan->quick ? "--quick" : "full");
  printf("what decides these numbers on this machine:\n");
  printf("  cores %ld (%s), memory %.1f GiB; MLIR's thread pool and mlir-opt's use them all\n", cores, cpu,
         (double)pages * (double)page / (double)(1024.0 * 1024 * 1024));
  printf("  %s %s linked against LLVM/MLIR %s; baseline %s\n", id.name, id.version, id.llvm_version,
         mlir_opt ? mlir_opt
                  : "(mlir-opt-22 not found: baseline columns skipped; "
                    "install mlir-22-tools)");
  kiln_bench_print_load("times");
  printf("  medians of %zu kiln / %zu mlir-opt runs per row, after an untimed warm-up per model\n",
         plan->kiln_runs, plan->opt_runs);
  printf("goals are reported as PASS/MISS, never asserted\n\n");
}

/* Per-kind subtotals and the total of section 1's table. */
typedef struct sums_s {
  int64_t kiln_ns, opt_ns;
  size_t rows;
} sums_t;

/* Section 1 over every model: the issue's "in total". */
static sums_t models_total;

static void print_sum_row(const char *label, const sums_t *s, bool have_opt, bool goal) {
  char name[32];
  snprintf(name, sizeof name, "%s (%zu)", label, s->rows);
  if (s->rows == 0) {
    printf("  %-22s %10s\n", name, "-");
    return;
  }
  if (!have_opt) {
    printf("  %-22s %10.1f%s\n", name, ms(s->kiln_ns), goal ? "   goal not measured (no mlir-opt-22)" : "");
    return;
  }
  double ratio = (double)s->opt_ns / (double)s->kiln_ns;
  printf("  %-22s %10.1f %12.1f %7.2fx", name, ms(s->kiln_ns), ms(s->opt_ns), ratio);
  if (goal) printf("   goal >= %.1fx %s", SPEEDUP_GOAL, ratio >= SPEEDUP_GOAL ? "PASS" : "MISS");
  printf("\n");
}

/* Warm-up: compiles `src` once for every target, untimed. Returns false (printing the
 * error) when the front half fails; writes the kernel shapes of the first target that
 * compiled. */
static bool warm_up(const char *src, size_t len, const char *name, const kiln_target_t *const *targets,
                    size_t n, shapes_t *out_shapes) {
  kiln_compiler_output_t out;
  kiln_status_t st = kiln_compiler_compile(context, src, len, name, targets, n, &out);
  if (st) {
    char line[256];
    first_error_line(kiln_status_message(st), line, sizeof line);
    printf("  %s does not compile: %s\n\n", name, line);
    kiln_status_free(st);
    return false;
  }
  memset(out_shapes, 0, sizeof *out_shapes);
  for (size_t i = 0; i < out.n_targets; i++) {
    if (!out.targets[i].status) {
      shapes_from(&out.targets[i], out_shapes);
      break;
    }
  }
  kiln_compiler_output_deinit(&out);
  return true;
}

/* `warm_all`: the warm-up compiles every target (the first model: loads each LLVM
 * backend); later models warm up on one cheap target. */
static void bench_model_table(const plan_t *plan, const char *model, runner_t *runner,
                              const kiln_target_t *const *targets, size_t n_targets, bool warm_all) {
  char path[PATH_MAX];
  size_t len;
  char *src = read_model(model, &len, path, sizeof path);
  char name[64];
  snprintf(name, sizeof name, "%s.mlir", model);
  printf(
      "1. examples/%s: kiln warm compile, one target per call, vs the same passes as\n"
      "   mlir-opt-22 %s --pass-pipeline=BUFFERIZE | mlir-opt-22 --pass-pipeline=REST |\n"
      "   mlir-opt-22 --pass-pipeline=BACK -o /dev/null\n",
      name, name);
  shapes_t shapes;
  size_t warm_first = 0, warm_n = n_targets;
  if (!warm_all) {
    warm_n = 1;
    for (size_t i = 0; i < n_targets; i++) {
      if (targets[i]->kind == KILN_TARGET_KIND_VULKAN) {
        warm_first = i;
        break;
      }
    }
  }
  if (!warm_up(src, len, name, targets + warm_first, warm_n, &shapes)) {
    kiln_free(src);
    return;
  }
  bool have_opt = runner != NULL;
  if (have_opt)
    printf("  %-14s %-7s %10s %12s %8s\n", "target", "kind", "kiln ms", "mlir-opt ms", "ratio");
  else
    printf("  %-14s %-7s %10s\n", "target", "kind", "kiln ms");
  fflush(stdout);

  sums_t total = {0}, by_kind[KILN_TARGET_KIND_CPU + 1];
  memset(by_kind, 0, sizeof by_kind);
  size_t rounds = plan->kiln_runs > plan->opt_runs ? plan->kiln_runs : plan->opt_runs;
  int64_t *kiln_ns = kiln_calloc(plan->kiln_runs, sizeof *kiln_ns);
  int64_t *opt_ns = kiln_calloc(plan->opt_runs ? plan->opt_runs : 1, sizeof *opt_ns);
  int64_t *ptxas_ns = kiln_calloc(plan->kiln_runs, sizeof *ptxas_ns);
  struct {
    const kiln_target_t *target; /* the first CUDA row */
    size_t runs, cubins;
    int64_t ns, plain_ns; /* with ptxas; the row's own (PTX only) */
    char err[256];
  } ptxas_row = {0};
  for (size_t i = 0; i < n_targets; i++) {
    const kiln_target_t *t = targets[i];
    const char *kind = kiln_compiler_target_kind_name(t->kind);
    char *front = NULL, *back = NULL;
    char kiln_err[256] = "", opt_err[256] = "";
    char *bufferize = NULL, *rest = NULL;
    kiln_status_t st = have_opt ? kiln_compiler_pipeline_stages(context, t, &bufferize, &rest, &back) : NULL;
    if (!st && have_opt) {
      kiln_buf_t f;
      kiln_buf_init(&f);
      kiln_buf_appendf(&f, "%s\n%s", bufferize, rest);
      front = kiln_buf_take(&f);
      kiln_buf_deinit(&f);
    }
    kiln_free(bufferize);
    kiln_free(rest);
    if (st) {
      first_error_line(kiln_status_message(st), opt_err, sizeof opt_err);
      kiln_status_free(st);
    }
    bool opt_on = have_opt && !opt_err[0];
    /* The first CUDA row also times the compile as shipped, with ptxas. */
    bool ptxas_arm = t->kind == KILN_TARGET_KIND_CUDA && !ptxas_row.target;
    size_t cubins = 0;
    for (size_t r = 0; r < rounds && !kiln_err[0]; r++) {
      /* kiln, mlir-opt (and kiln with ptxas) in an order that rotates every round */
      for (size_t k = 0; k < 3 && !kiln_err[0]; k++) {
        size_t arm = (k + r) % 3;
        if (arm == 0 && r < plan->kiln_runs) {
          kiln_once(src, len, name, t, &kiln_ns[r], kiln_err, sizeof kiln_err, NULL);
        } else if (arm == 1 && opt_on && r < plan->opt_runs) {
          opt_on = opt_replay(runner, path, front, back, &shapes, t->kind == KILN_TARGET_KIND_VULKAN,
                              &opt_ns[r], opt_err, sizeof opt_err);
        } else if (arm == 2 && ptxas_arm && r < plan->kiln_runs) {
          ptxas_set(true);
          ptxas_arm =
              kiln_once(src, len, name, t, &ptxas_ns[r], ptxas_row.err, sizeof ptxas_row.err, &cubins);
          ptxas_set(false);
          if (ptxas_arm) ptxas_row.runs = r + 1;
        }
      }
    }
    if (t->kind == KILN_TARGET_KIND_CUDA && !ptxas_row.target) {
      ptxas_row.target = t;
      ptxas_row.cubins = cubins;
      if (ptxas_row.runs == plan->kiln_runs) ptxas_row.ns = median_i64(ptxas_ns, plan->kiln_runs);
    }
    kiln_free(front);
    kiln_free(back);
    if (kiln_err[0]) {
      printf("  %-14s %-7s kiln failed: %.*s\n", t->id, kind, ERR_COLS, kiln_err);
      fflush(stdout);
      continue;
    }
    int64_t k_med = median_i64(kiln_ns, plan->kiln_runs);
    if (ptxas_row.target == t) ptxas_row.plain_ns = k_med;
    if (!have_opt) {
      printf("  %-14s %-7s %10.1f\n", t->id, kind, ms(k_med));
    } else if (opt_err[0]) {
      printf("  %-14s %-7s %10.1f  mlir-opt failed: %.*s\n", t->id, kind, ms(k_med), ERR_COLS, opt_err);
    } else {
      int64_t o_med = median_i64(opt_ns, plan->opt_runs);
      printf("  %-14s %-7s %10.1f %12.1f %7.2fx\n", t->id, kind, ms(k_med), ms(o_med),
             (double)o_med / (double)k_med);
      sums_t *s = &by_kind[t->kind];
      s->kiln_ns += k_med;
      s->opt_ns += o_med;
      s->rows++;
    }
    if (!have_opt) {
      by_kind[t->kind].kiln_ns += k_med;
      by_kind[t->kind].rows++;
    }
    fflush(stdout);
  }
  for (int k = KILN_TARGET_KIND_CUDA; k <= KILN_TARGET_KIND_VULKAN; k++) {
    print_sum_row(kiln_compiler_target_kind_name((kiln_target_kind_t)k), &by_kind[k], have_opt, false);
    total.kiln_ns += by_kind[k].kiln_ns;
    total.opt_ns += by_kind[k].opt_ns;
    total.rows += by_kind[k].rows;
  }
  print_sum_row("TOTAL", &total, have_opt, true);
  models_total.kiln_ns += total.kiln_ns;
  models_total.opt_ns += total.opt_ns;
  models_total.rows += total.rows;
  if (total.rows < n_targets) {
    printf("  (TOTAL and the kind rows count only the %zu of %zu targets where both sides compiled)\n",
           total.rows, n_targets);
  }
  if (have_opt && opt_startup_ns > 0 && total.rows > 0) {
    /* What process start-up alone explains, if the passes cost the same on both sides. */
    int64_t fixed = opt_startup_ns * (int64_t)total.rows;
    int64_t passes = total.opt_ns - fixed;
    printf("  mlir-opt start-up (an empty replay, %.1f ms) is %.0f of its %.0f ms TOTAL", ms(opt_startup_ns),
           ms(fixed), ms(total.opt_ns));
    if (passes > 0) {
      printf(
          ";\n  at equal pass speed the ratio would be %.2fx; %.1fx needs kiln's passes at %.2fx"
          " mlir-opt's time\n",
          (double)total.opt_ns / (double)passes, SPEEDUP_GOAL,
          (double)total.opt_ns / SPEEDUP_GOAL / (double)passes);
    } else {
      printf("\n");
    }
  }
  if (ptxas_row.target && ptxas_row.err[0]) {
    printf("  %s with ptxas on failed: %.*s\n", ptxas_row.target->id, ERR_COLS, ptxas_row.err);
  } else if (ptxas_row.target && ptxas_row.ns && ptxas_row.cubins == 0) {
    printf("  ptxas not found: kiln ships PTX only for CUDA, as timed above\n");
  } else if (ptxas_row.target && ptxas_row.ns && ptxas_row.plain_ns) {
    printf("  %s as shipped, ptxas assembling %zu cubins: %.1f ms, %.2fx the PTX-only row\n",
           ptxas_row.target->id, ptxas_row.cubins, ms(ptxas_row.ns),
           (double)ptxas_row.ns / (double)ptxas_row.plain_ns);
  }
  printf("\n");
  kiln_free(kiln_ns);
  kiln_free(opt_ns);
  kiln_free(ptxas_ns);
  shapes_deinit(&shapes);
  kiln_free(src);
}

static void print_table_notes(void) {
  printf(
      "  notes on section 1: ratio = mlir-opt/kiln. Both sides run the same pass pipelines\n"
      "  (kiln_compiler_pipeline_text). The mlir-opt side pays process start-up, printing and\n"
      "  re-parsing the IR between the halves; the benchmark adds the workgroup-size attributes\n"
      "  kiln sets in C between the halves (without spirv.entry_point_abi, Vulkan's BACK fails\n"
      "  in mlir-opt). kiln also merges the outlined kernel modules into one device module\n"
      "  per target in C (one codegen, link and assembly per target instead of per kernel);\n"
      "  the replay keeps one module per kernel, as the pass pipeline alone leaves them.\n"
      "  For Vulkan, BACK stops before serialization: kiln additionally moves the\n"
      "  spirv.modules and serializes SPIR-V words, so those rows favour mlir-opt. Both sides\n"
      "  link HIP code objects with ld.lld-22 processes. kiln's optional ptxas step (CUDA\n"
      "  cubins) is off in the tables, which the replay has no counterpart for; the line under\n"
      "  each table times it. kiln also analyses kernel arguments and checks device limits.\n\n");
}

static void bench_fanout(const plan_t *plan, const char *model, const kiln_target_t *const *mission) {
  char path[PATH_MAX];
  size_t len;
  char *src = read_model(model, &len, path, sizeof path);
  char name[64];
  snprintf(name, sizeof name, "%s.mlir", model);
  size_t runs = plan->kiln_runs;
  int64_t *fan_ns = kiln_calloc(runs, sizeof *fan_ns);
  int64_t *indep_ns = kiln_calloc(runs, sizeof *indep_ns);
  int64_t *front_ms = kiln_calloc(runs * N_MISSION, sizeof *front_ms);
  char err[256] = "";
  for (size_t r = 0; r < runs && !err[0]; r++) {
    for (int k = 0; k < 2 && !err[0]; k++) {
      bool fan_turn = (k == 0) == (r % 2 == 0);
      kiln_compiler_output_t out;
      kiln_status_t st;
      if (fan_turn) {
        fan_ns[r] = kiln_run(src, len, name, mission, N_MISSION, &out, &st);
        for (size_t i = 0; !st && i < out.n_targets && !err[0]; i++) {
          if (out.targets[i].status) {
            char line[200];
            first_error_line(kiln_status_message(out.targets[i].status), line, sizeof line);
            snprintf(err, sizeof err, "%s: %s", mission[i]->id, line);
          }
        }
        if (st) {
          first_error_line(kiln_status_message(st), err, sizeof err);
          kiln_status_free(st);
        } else {
          kiln_compiler_output_deinit(&out);
        }
      } else {
        indep_ns[r] = 0;
        for (size_t i = 0; i < N_MISSION && !err[0]; i++) {
          int64_t ns = kiln_run(src, len, name, &mission[i], 1, &out, &st);
          if (st) {
            first_error_line(kiln_status_message(st), err, sizeof err);
            kiln_status_free(st);
            break;
          }
          if (out.targets[0].status) {
            char line[200];
            first_error_line(kiln_status_message(out.targets[0].status), line, sizeof line);
            snprintf(err, sizeof err, "%s: %s", mission[i]->id, line);
          }
          indep_ns[r] += ns;
          front_ms[r * N_MISSION + i] = out.front_ms;
          kiln_compiler_output_deinit(&out);
        }
      }
    }
  }
  if (err[0]) {
    printf("  %-16s kiln failed: %.*s\n", name, ERR_COLS, err);
  } else {
    int64_t fan = median_i64(fan_ns, runs), indep = median_i64(indep_ns, runs);
    /* front_ms is whole milliseconds (truncated): the mean over all single compiles
     * plus half a millisecond estimates it without that bias. */
    double front = 0.5;
    for (size_t i = 0; i < runs * N_MISSION; i++) front += (double)front_ms[i] / (double)(runs * N_MISSION);
    double mean_single = ms(indep) / (double)N_MISSION;
    double f = front / mean_single;
    if (f > 1.0) f = 1.0;
    double bound = (f + (1.0 - f) * (double)N_MISSION) / (double)N_MISSION;
    double ratio = (double)fan / (double)indep;
    printf("  %-16s %10.1f %11.1f %7.2fx %9.1f %10.1f %5.1f%% %7.2fx   %s\n", name, ms(fan), ms(indep), ratio,
           front, mean_single, 100.0 * f, bound, ratio <= FANOUT_GOAL ? "PASS" : "MISS");
  }
  fflush(stdout);
  kiln_free(fan_ns);
  kiln_free(indep_ns);
  kiln_free(front_ms);
  kiln_free(src);
}

static void print_rss(const runner_report_t *runner) {
  struct rusage self;
  getrusage(RUSAGE_SELF, &self);
  printf("4. peak RSS (getrusage ru_maxrss) and CPU\n");
  printf("  bench_compile (one MLIR context, every model and target, K runs): %7.1f MiB\n",
         (double)self.ru_maxrss / 1024.0);
  if (runner) {
    printf("  mlir-opt processes (RUSAGE_CHILDREN of the runner, %zu replays):  %7.1f MiB\n", opt_totals.runs,
           (double)runner->children_max_rss_kib / 1024.0);
    printf(
        "  (each process's own peak; the runner that starts them peaked at %.1f MiB, a floor\n"
        "  under that number: Linux charges a spawned child its spawner's peak until exec)\n",
        (double)runner->self_max_rss_kib / 1024.0);
  }
  printf("  CPU/wall over the timed runs: kiln %.2f",
         kiln_wall_ns ? kiln_cpu_s / ((double)kiln_wall_ns / 1e9) : 0.0);
  if (opt_totals.wall_ns) {
    printf(", mlir-opt replays %.2f", opt_totals.cpu_s / ((double)opt_totals.wall_ns / 1e9));
  }
  printf(" (ld.lld children included;\n  above 1.0: threads or overlapping processes)\n\n");
}

/* ---- main ---- */

/* 3. Compile time against op count: a chain of N elementwise tosa.add (which fuses
 * into kernels of up to 64 ops) and a chain of N tosa.matmul (a kernel each), made
 * in memory, compiled for one target on the warm context. Per-op time at the large
 * N against the small one shows how compile time grows; the goal (issue 15) is the
 * add chain's per-op time at 20,000 ops within 2x of that at 1,000. */
static char *op_chain(bool matmul, size_t n, size_t *out_len) {
  kiln_buf_t b;
  kiln_buf_init(&b);
  if (matmul) {
    kiln_buf_append_str(
        &b,
        "func.func @chain(%a: tensor<1x8x8xf32>, %b: tensor<1x8x8xf32>) -> tensor<1x8x8xf32> {\n"
        "  %z = \"tosa.const\"() {values = dense<0.0> : tensor<1xf32>} : () -> tensor<1xf32>\n");
  } else {
    kiln_buf_append_str(&b, "func.func @chain(%a: tensor<16xf32>, %b: tensor<16xf32>) -> tensor<16xf32> {\n");
  }
  for (size_t i = 0; i < n; i++) {
    char prev[32];
    snprintf(prev, sizeof prev, i ? "%%v%zu" : "%%a", i - 1);
    if (matmul) {
      kiln_buf_appendf(&b,
                       "  %%v%zu = tosa.matmul %s, %%b, %%z, %%z : (tensor<1x8x8xf32>, tensor<1x8x8xf32>, "
                       "tensor<1xf32>, tensor<1xf32>) -> tensor<1x8x8xf32>\n",
                       i, prev);
    } else {
      kiln_buf_appendf(
          &b, "  %%v%zu = tosa.add %s, %%b : (tensor<16xf32>, tensor<16xf32>) -> tensor<16xf32>\n", i, prev);
    }
  }
  kiln_buf_appendf(&b, "  return %%v%zu : %s\n}\n", n - 1, matmul ? "tensor<1x8x8xf32>" : "tensor<16xf32>");
  *out_len = b.len;
  char *text = kiln_buf_take(&b);
  kiln_buf_deinit(&b);
  return text;
}

static void bench_scaling(const plan_t *plan) {
  const kiln_target_t *target = kiln_compiler_target_find("arm5gen");
  const size_t adds[2] = {1000, plan->quick ? 5000 : 20000};
  const size_t mms[2] = {100, plan->quick ? 200 : 1000};
  printf("3. compile time against op count: one compile for %s, single run each\n", target->id);
  printf("  %-28s %10s %10s %12s %10s\n", "model", "ops", "ms", "us per op", "vs small");
  for (int kind = 0; kind < 2; kind++) {
    double per_op[2] = {0, 0};
    for (int i = 0; i < 2; i++) {
      size_t n = kind ? mms[i] : adds[i];
      size_t len = 0;
      char *src = op_chain(kind == 1, n, &len);
      kiln_compiler_output_t out;
      int64_t t0 = kiln_time_monotonic_ns();
      kiln_status_t st = kiln_compiler_compile(context, src, len, "chain.mlir", &target, 1, &out);
      int64_t ns = kiln_time_monotonic_ns() - t0;
      const char *label = kind ? "chain of tosa.matmul" : "chain of tosa.add";
      if (st || out.targets[0].status) {
        char line[200];
        first_error_line(kiln_status_message(st ? st : out.targets[0].status), line, sizeof line);
        printf("  %-28s %10zu   failed: %s\n", label, n, line);
      } else {
        per_op[i] = (double)ns / 1e3 / (double)n;
        printf("  %-28s %10zu %10.1f %12.1f", label, n, ms(ns), per_op[i]);
        if (i == 1 && per_op[0] > 0) {
          double ratio = per_op[1] / per_op[0];
          printf(" %9.2fx", ratio);
          if (!kind && !plan->quick) printf("   goal <= 2.0x %s", ratio <= 2.0 ? "PASS" : "MISS");
        }
        printf("\n");
      }
      if (!st) kiln_compiler_output_deinit(&out);
      kiln_status_free(st);
      kiln_free(src);
      fflush(stdout);
    }
  }
  printf(
      "  the add chains fuse into kernels of at most 64 ops (host.h: Fusion bounds); each\n"
      "  matmul is a kernel of its own, and MLIR's bufferization, sinking and canonicalization\n"
      "  passes still grow faster than linearly with the kernel count\n\n");
}

static void usage(void) {
  fprintf(stderr,
          "usage: bench_compile [--quick]\n"
          "  Measures kiln's in-process compile of examples/*.mlir for every GPU target against\n"
          "  the same passes run by mlir-opt-22 processes, and a six-target fan-out against six\n"
          "  independent compiles.\n"
          "  --quick  smoke run: mlp.mlir only, fewer runs\n");
}

int main(int argc, char **argv) {
  plan_t plan = {.kiln_runs = 5, .opt_runs = 3, .n_models = 3, .n_fan_models = 3};
  int rc = kiln_bench_parse_args(argc, argv, false, usage, &plan.quick, NULL);
  if (rc >= 0) return rc;
  if (plan.quick) {
    plan.kiln_runs = 2;
    plan.opt_runs = 1;
    plan.n_models = 1;
    plan.n_fan_models = 1;
  }
  kiln_log_configure(KILN_LOG_WARN, STDERR_FILENO);
  signal(SIGPIPE, SIG_IGN); /* a failed mlir-opt must not kill the benchmark mid-write */
  const char *env = getenv("KILN_PTXAS");
  ptxas_env = env ? kiln_strdup(env) : NULL;
  ptxas_set(false);
  int64_t t0 = kiln_time_monotonic_ns();

  char mlir_opt_path[PATH_MAX];
  const char *mlir_opt = find_mlir_opt(mlir_opt_path, sizeof mlir_opt_path) ? mlir_opt_path : NULL;
  print_header(&plan, mlir_opt);
  fflush(stdout);
  runner_t runner_storage, *runner = NULL;
  if (mlir_opt) {
    runner_start(&runner_storage, mlir_opt);
    runner = &runner_storage;
  }

  check(kiln_compiler_context_create(&context), "kiln_compiler_context_create");
  const kiln_target_t *targets[MAX_TARGETS];
  size_t n_targets = 0;
  for (size_t i = 0; i < kiln_compiler_target_count(); i++) {
    const kiln_target_t *t = kiln_compiler_target_at(i);
    if (t->kind != KILN_TARGET_KIND_CPU && n_targets < MAX_TARGETS) targets[n_targets++] = t;
  }
  const kiln_target_t *mission[N_MISSION];
  for (size_t i = 0; i < N_MISSION; i++) {
    mission[i] = kiln_compiler_target_find(mission_ids[i]);
    if (!mission[i]) die("mission target %s is not in the registry", mission_ids[i]);
  }

  if (runner) {
    /* The fixed cost of a replay: two processes, an empty module, empty pipelines. */
    shapes_t none = {0};
    int64_t *ns = kiln_calloc(plan.opt_runs, sizeof *ns);
    char err[200] = "";
    size_t ok = 0;
    for (size_t r = 0; r < plan.opt_runs; r++) {
      ok += opt_replay(runner, "/dev/null", "builtin.module()", "builtin.module()", &none, false, &ns[r], err,
                       sizeof err);
    }
    if (ok == plan.opt_runs) opt_startup_ns = median_i64(ns, plan.opt_runs);
    kiln_free(ns);
    if (ok == plan.opt_runs) {
      printf("mlir-opt start-up: an empty replay (both processes, empty module) takes %.1f ms\n\n",
             ms(opt_startup_ns));
    } else {
      printf("mlir-opt start-up not measured: an empty replay failed: %s\n\n", err);
    }
  }
  int64_t marks[3];
  for (size_t m = 0; m < plan.n_models; m++) {
    bench_model_table(&plan, all_models[m], runner, targets, n_targets, m == 0);
  }
  if (plan.n_models > 1) {
    printf("1. all %zu models, every target, in total:\n", plan.n_models);
    printf("  %-22s %10s %12s %8s\n", "", "kiln ms", "mlir-opt ms", "ratio");
    print_sum_row("ALL", &models_total, mlir_opt != NULL, true);
    printf("\n");
  }
  if (mlir_opt) print_table_notes();
  marks[0] = kiln_time_monotonic_ns();

  printf(
      "2. fan-out: one kiln_compiler_compile for the %zu mission targets vs %zu single-target\n"
      "   compiles (",
      N_MISSION, N_MISSION);
  for (size_t i = 0; i < N_MISSION; i++) printf("%s%s", i ? ", " : "", mission_ids[i]);
  printf("),\n   same warm context, alternating, ptxas off; median of %zu runs each\n", plan.kiln_runs);
  printf("  %-16s %10s %11s %8s %9s %10s %6s %8s   goal <= %.1fx\n", "model", "fan-out ms", "indep. ms",
         "ratio", "front ms", "single ms", "front", "bound", FANOUT_GOAL);
  for (size_t m = 0; m < plan.n_fan_models; m++) bench_fanout(&plan, all_models[m], mission);
  printf(
      "  front ms: the shared front half (parse included) of one compile, from\n"
      "  kiln_compiler_output_t.front_ms; single ms: the mean single-target compile; front =\n"
      "  front/single = f. The front half is all a fan-out saves, so with N = %zu targets the\n"
      "  ratio cannot go below bound = (f + (1-f)N)/N (a ratio below it is noise between\n"
      "  runs); the goal needs f >= %.2f.\n\n",
      N_MISSION, (1.0 - FANOUT_GOAL) * (double)N_MISSION / (double)(N_MISSION - 1));
  bench_scaling(&plan);
  marks[1] = kiln_time_monotonic_ns();

  runner_report_t report;
  if (runner) runner_stop(runner, &report);
  print_rss(runner ? &report : NULL);
  kiln_compiler_context_destroy(context);
  context = NULL;
  kiln_free(ptxas_env);
  marks[2] = kiln_time_monotonic_ns();
  printf("total %.1f s (per-target tables %.1f, fan-out %.1f)\n", (double)(marks[2] - t0) / 1e9,
         (double)(marks[0] - t0) / 1e9, (double)(marks[1] - marks[0]) / 1e9);
  return 0;
}
