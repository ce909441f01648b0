/* bench_compile: kiln's in-process compile against the same passes run as mlir-opt
 * processes, and one N-target fan-out against N independent compiles.
 *
 * Everything is measured side by side in one run and printed as ratios, so the numbers
 * mean the same on a laptop and on a 2-core CI VM:
 *
 * 1. Per example model (examples/mlp.mlir, convnet.mlir, attention.mlir) and per GPU
 *    target of the registry: kiln_compiler_compile for that one target on a warm
 *    context, against the shell replay of the same pass pipelines
 *    (kiln_compiler_pipeline_text):
 *      mlir-opt-22 MODEL --pass-pipeline=FRONT | mlir-opt-22 --pass-pipeline=BACK -o /dev/null
 *    The two processes start together (the second one's start-up overlaps the first
 *    one's work, as in a shell pipe); the benchmark sits in the pipe and adds to each
 *    gpu.func the workgroup-size attributes kiln writes in C between the halves
 *    (known_block_size; spirv.entry_point_abi for Vulkan, without which
 *    convert-gpu-to-spirv fails). That edit costs microseconds. kiln also serializes
 *    Vulkan's SPIR-V after BACK; the replay does not, which favours mlir-opt.
 *    Goal: mlir-opt/kiln >= 3.0x summed over all targets of a model.
 * 2. Fan-out: one kiln_compiler_compile for the six mission targets against six
 *    single-target compiles (same warm context). The shared front half runs once
 *    instead of six times, so with front share f of a single compile the best ratio
 *    for N targets is (f + (1-f)N)/N; that bound is printed beside the measured ratio.
 *    Goal: fan-out/independent <= 0.6x.
 * 3. Peak RSS of this process and of the mlir-opt processes, and CPU/wall of each side.
 *
 * Method: one context, created untimed; each model is compiled once for every target
 * untimed (warm-up: LLVM backends, the HIP toolkit directory, allocator) before any
 * timed run. kiln and mlir-opt runs alternate, and which goes first alternates too, so
 * drift hits both alike; each number is a median. A target kiln fails prints the first
 * line of its error in its row and leaves the totals; a missing mlir-opt skips the
 * baseline columns. Goals are reported as PASS/MISS, never asserted: the program exits
 * 0 unless the benchmark itself cannot run (then 1).
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
#include "compiler/identity.h"
#include "compiler/pipeline.h"
#include "compiler/source.h"
#include "compiler/targets.h"

#ifndef KILN_SOURCE_DIR
#error "KILN_SOURCE_DIR must name the source tree (bench/CMakeLists.txt defines it)"
#endif

#define SPEEDUP_GOAL 3.0 /* mlir-opt/kiln, summed over a model's targets */
#define FANOUT_GOAL 0.6  /* fan-out/independent for the mission targets */
#define MAX_TARGETS 32
#define ERR_COLS 60      /* how much of an error line fits in a row */

extern char **environ;

static const char *const all_models[] = {"mlp", "convnet", "attention"};
static const char *const mission_ids[] = {"sm_89",   "sm_120",  "gfx950",
                                          "gfx1100", "arm5gen", "videocore_vii"};
#define N_MISSION (sizeof mission_ids / sizeof mission_ids[0])

typedef struct plan_s {
  bool quick;
  size_t kiln_runs;     /* timed kiln compiles per row (median) */
  size_t opt_runs;      /* timed mlir-opt replays per row (median) */
  size_t n_models;      /* section 1: the first n_models of all_models */
  size_t n_fan_models;  /* section 2: the first n_fan_models of all_models */
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
          kiln_status_code_name(kiln_status_code(st)), kiln_status_message(st),
          kiln_status_where(st));
  kiln_status_free(st);
  kiln_compiler_context_destroy(context);
  exit(1);
}

/* ---- small helpers ---- */

static int cmp_i64(const void *a, const void *b) {
  int64_t x = *(const int64_t *)a, y = *(const int64_t *)b;
  return (x > y) - (x < y);
}

/* Sorts in place. */
static int64_t median_i64(int64_t *v, size_t n) {
  qsort(v, n, sizeof *v, cmp_i64);
  return (v[(n - 1) / 2] + v[n / 2]) / 2;
}

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
    out->items[i].module_name = kiln_strdup(t->kernels[i].module_name);
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
    if (strlen(s->module_name) == module_len && !memcmp(s->module_name, module, module_len) &&
        strlen(s->name) == name_len && !memcmp(s->name, name, name_len)) {
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
    if (f && (size_t)(eol - line) > tail_len && !memcmp(eol - tail_len, tail, tail_len)) {
      s = find_shape(shapes, module, module_len, f + 10, symbol_len(f + 10, eol));
    }
    if (s) {
      kiln_buf_append(out, line, (size_t)(eol - line) - 2); /* drops " {" */
      kiln_buf_appendf(out, " attributes {known_block_size = array<i32: %u, %u, %u>", s->block[0],
                       s->block[1], s->block[2]);
      if (spirv) {
        kiln_buf_appendf(out, ", spirv.entry_point_abi = #spirv.entry_point_abi<workgroup_size = "
                         "[%u, %u, %u]>", s->block[0], s->block[1], s->block[2]);
      }
      kiln_buf_append_str(out, "} {");
    } else {
      kiln_buf_append(out, line, (size_t)(eol - line));
    }
    if (nl) kiln_buf_append_char(out, '\n');
    line = eol + 1;
  }
}

/* What the mlir-opt processes cost, over the whole run. */
typedef struct opt_totals_s {
  size_t processes;
  long max_rss_kib; /* largest single mlir-opt process */
  double cpu_s;
  int64_t wall_ns;
} opt_totals_t;

static opt_totals_t opt_totals;

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

static int reap(pid_t pid) {
  int status;
  struct rusage ru;
  while (wait4(pid, &status, 0, &ru) < 0) {
    if (errno != EINTR) die("wait4: %s", strerror(errno));
  }
  opt_totals.processes++;
  if (ru.ru_maxrss > opt_totals.max_rss_kib) opt_totals.max_rss_kib = ru.ru_maxrss;
  opt_totals.cpu_s += cpu_s(&ru);
  return status;
}

/* Runs FRONT | (annotate) | BACK once. Returns true and the wall time when both
 * processes exit 0; otherwise false and the first error line in `err`. */
static bool opt_run(const char *mlir_opt, const char *model_path, const char *front,
                    const char *back, const shapes_t *shapes, bool spirv, int64_t *out_ns,
                    char *err, size_t err_cap) {
  kiln_buf_t front_arg, back_arg, ir, edited;
  kiln_buf_init(&front_arg);
  kiln_buf_init(&back_arg);
  kiln_buf_init(&ir);
  kiln_buf_init(&edited);
  kiln_buf_appendf(&front_arg, "--pass-pipeline=%s", front);
  kiln_buf_appendf(&back_arg, "--pass-pipeline=%s", back);
  const char *front_argv[] = {mlir_opt, model_path, front_arg.data, NULL};
  const char *back_argv[] = {mlir_opt, back_arg.data, "-o", "/dev/null", NULL};
  stderr_file_reset(stderr_fd[0]);
  stderr_file_reset(stderr_fd[1]);
  int p1[2], p2[2]; /* front -> bench, bench -> back */
  if (pipe2(p1, O_CLOEXEC) != 0 || pipe2(p2, O_CLOEXEC) != 0) die("pipe: %s", strerror(errno));

  int64_t t0 = kiln_time_monotonic_ns();
  pid_t front_pid = spawn(front_argv, -1, p1[1], stderr_fd[0]);
  pid_t back_pid = spawn(back_argv, p2[0], -1, stderr_fd[1]);
  close(p1[1]);
  close(p2[0]);
  char chunk[65536];
  for (;;) {
    ssize_t n = read(p1[0], chunk, sizeof chunk);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) die("cannot read from mlir-opt: %s", strerror(errno));
    if (n == 0) break;
    kiln_buf_append(&ir, chunk, (size_t)n);
  }
  close(p1[0]);
  annotate(ir.data, ir.len, shapes, spirv, &edited);
  /* A back process that died early shows as EPIPE (SIGPIPE is ignored); its exit
   * status tells the story. */
  for (size_t off = 0; off < edited.len;) {
    ssize_t n = write(p2[1], edited.data + off, edited.len - off);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) break;
    off += (size_t)n;
  }
  close(p2[1]);
  int front_status = reap(front_pid);
  int back_status = reap(back_pid);
  int64_t t1 = kiln_time_monotonic_ns();
  opt_totals.wall_ns += t1 - t0;

  bool front_ok = WIFEXITED(front_status) && WEXITSTATUS(front_status) == 0;
  bool back_ok = WIFEXITED(back_status) && WEXITSTATUS(back_status) == 0;
  if (!front_ok || !back_ok) {
    kiln_buf_t text;
    kiln_buf_init(&text);
    stderr_file_read(stderr_fd[front_ok ? 1 : 0], &text);
    char line[200];
    first_error_line(text.len ? text.data : "(no output)", line, sizeof line);
    snprintf(err, err_cap, "%s half: %s", front_ok ? "back" : "front", line);
    kiln_buf_deinit(&text);
  }
  *out_ns = t1 - t0;
  kiln_buf_deinit(&front_arg);
  kiln_buf_deinit(&back_arg);
  kiln_buf_deinit(&ir);
  kiln_buf_deinit(&edited);
  return front_ok && back_ok;
}

/* ---- kiln ---- */

/* kiln's side of the run, for section 3. */
static double kiln_cpu_s;
static int64_t kiln_wall_ns;

/* One timed kiln_compiler_compile. Returns its wall time; `out` is the caller's to
 * deinit. A failed front half leaves `out` empty and returns the status. */
static int64_t kiln_run(const char *src, size_t len, const char *name,
                        const kiln_target_t *const *targets, size_t n, kiln_compiler_output_t *out,
                        kiln_status_t *out_status) {
  struct rusage r0, r1;
  getrusage(RUSAGE_SELF, &r0);
  int64_t t0 = kiln_time_monotonic_ns();
  *out_status = kiln_compiler_compile(context, src, len, name, targets, n, out);
  int64_t t1 = kiln_time_monotonic_ns();
  getrusage(RUSAGE_SELF, &r1);
  kiln_cpu_s += cpu_s(&r1) - cpu_s(&r0);
  kiln_wall_ns += t1 - t0;
  return t1 - t0;
}

/* ---- sections ---- */

static void print_header(const plan_t *plan, const char *mlir_opt) {
  long cores = sysconf(_SC_NPROCESSORS_ONLN);
  long pages = sysconf(_SC_PHYS_PAGES), page = sysconf(_SC_PAGESIZE);
  char cpu[128] = "unknown";
  FILE *f = fopen("/proc/cpuinfo", "r");
  if (f) {
    char line[256];
    while (fgets(line, sizeof line, f)) {
      char *colon = strchr(line, ':');
      if (strncmp(line, "model name", 10) == 0 && colon) {
        snprintf(cpu, sizeof cpu, "%s", colon + 2);
        cpu[strcspn(cpu, "\n")] = '\0';
        break;
      }
    }
    fclose(f);
  }
  kiln_compiler_identity_t id;
  kiln_compiler_identity_get(&id);
  printf("kiln compile benchmark (%s): in-process compile vs mlir-opt processes, and fan-out vs\n"
         "independent compiles, side by side in one run\n",
         plan->quick ? "--quick" : "full");
  printf("what decides these numbers on this machine:\n");
  printf("  cores %ld (%s), memory %.1f GiB; MLIR's thread pool and mlir-opt's use them all\n",
         cores, cpu, (double)pages * (double)page / (double)(1024.0 * 1024 * 1024));
  printf("  %s %s linked against LLVM/MLIR %s; baseline %s\n", id.name, id.version, id.llvm_version,
         mlir_opt ? mlir_opt : "(mlir-opt-22 not found: baseline columns skipped; "
                               "install mlir-22-tools)");
  double load[3] = {0, 0, 0};
  if (getloadavg(load, 3) > 0) {
    printf("  load average %.1f over %ld cores before the run: other work shares this machine, so\n"
           "  compare ratios (measured side by side), not absolute times, across machines\n",
           load[0], cores);
  }
  printf("  medians of %zu kiln / %zu mlir-opt runs per row, after one untimed warm-up compile\n",
         plan->kiln_runs, plan->opt_runs);
  printf("goals are reported as PASS/MISS, never asserted\n\n");
}

/* Per-kind subtotals and the total of section 1's table. */
typedef struct sums_s {
  int64_t kiln_ns, opt_ns;
  size_t rows;
} sums_t;

static void print_sum_row(const char *label, const sums_t *s, bool have_opt, bool goal) {
  char name[32];
  snprintf(name, sizeof name, "%s (%zu)", label, s->rows);
  if (s->rows == 0) {
    printf("  %-22s %10s\n", name, "-");
    return;
  }
  if (!have_opt) {
    printf("  %-22s %10.1f\n", name, ms(s->kiln_ns));
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

static void bench_model_table(const plan_t *plan, const char *model, const char *mlir_opt,
                              const kiln_target_t *const *targets, size_t n_targets) {
  char path[PATH_MAX];
  size_t len;
  char *src = read_model(model, &len, path, sizeof path);
  char name[64];
  snprintf(name, sizeof name, "%s.mlir", model);
  printf("1. examples/%s: kiln warm compile, one target per call, vs the same passes as\n"
         "   mlir-opt-22 %s --pass-pipeline=FRONT | mlir-opt-22 --pass-pipeline=BACK -o /dev/null\n",
         name, name);
  shapes_t shapes;
  if (!warm_up(src, len, name, targets, n_targets, &shapes)) {
    kiln_free(src);
    return;
  }
  if (mlir_opt) printf("  %-14s %-7s %10s %12s %8s\n", "target", "kind", "kiln ms", "mlir-opt ms", "ratio");
  else printf("  %-14s %-7s %10s\n", "target", "kind", "kiln ms");
  fflush(stdout);

  sums_t total = {0}, by_kind[KILN_TARGET_KIND_CPU + 1];
  memset(by_kind, 0, sizeof by_kind);
  size_t rounds = plan->kiln_runs > plan->opt_runs ? plan->kiln_runs : plan->opt_runs;
  int64_t *kiln_ns = kiln_calloc(plan->kiln_runs, sizeof *kiln_ns);
  int64_t *opt_ns = kiln_calloc(plan->opt_runs ? plan->opt_runs : 1, sizeof *opt_ns);
  for (size_t i = 0; i < n_targets; i++) {
    const kiln_target_t *t = targets[i];
    const char *kind = kiln_compiler_target_kind_name(t->kind);
    char *front = NULL, *back = NULL;
    char kiln_err[256] = "", opt_err[256] = "";
    kiln_status_t st = mlir_opt ? kiln_compiler_pipeline_text(context, t, &front, &back) : NULL;
    if (st) {
      first_error_line(kiln_status_message(st), opt_err, sizeof opt_err);
      kiln_status_free(st);
    }
    bool opt_on = mlir_opt && !opt_err[0];
    for (size_t r = 0; r < rounds && !kiln_err[0]; r++) {
      for (int k = 0; k < 2; k++) {
        bool kiln_turn = (k == 0) == (r % 2 == 0);
        if (kiln_turn && r < plan->kiln_runs) {
          kiln_compiler_output_t out;
          kiln_ns[r] = kiln_run(src, len, name, &targets[i], 1, &out, &st);
          const char *msg = st ? kiln_status_message(st)
                                : out.targets[0].status ? kiln_status_message(out.targets[0].status)
                                                        : NULL;
          if (msg) first_error_line(msg, kiln_err, sizeof kiln_err);
          if (st) kiln_status_free(st);
          else kiln_compiler_output_deinit(&out);
          if (kiln_err[0]) break;
        } else if (!kiln_turn && opt_on && r < plan->opt_runs) {
          if (!opt_run(mlir_opt, path, front, back, &shapes, t->kind == KILN_TARGET_KIND_VULKAN,
                       &opt_ns[r], opt_err, sizeof opt_err)) {
            opt_on = false;
          }
        }
      }
    }
    kiln_free(front);
    kiln_free(back);
    if (kiln_err[0]) {
      printf("  %-14s %-7s kiln failed: %.*s\n", t->id, kind, ERR_COLS, kiln_err);
      fflush(stdout);
      continue;
    }
    int64_t k_med = median_i64(kiln_ns, plan->kiln_runs);
    if (!mlir_opt) {
      printf("  %-14s %-7s %10.1f\n", t->id, kind, ms(k_med));
    } else if (opt_err[0]) {
      printf("  %-14s %-7s %10.1f  mlir-opt failed: %.*s\n", t->id, kind, ms(k_med), ERR_COLS,
             opt_err);
    } else {
      int64_t o_med = median_i64(opt_ns, plan->opt_runs);
      printf("  %-14s %-7s %10.1f %12.1f %7.2fx\n", t->id, kind, ms(k_med), ms(o_med),
             (double)o_med / (double)k_med);
      sums_t *s = &by_kind[t->kind];
      s->kiln_ns += k_med;
      s->opt_ns += o_med;
      s->rows++;
    }
    if (!mlir_opt) {
      by_kind[t->kind].kiln_ns += k_med;
      by_kind[t->kind].rows++;
    }
    fflush(stdout);
  }
  for (int k = KILN_TARGET_KIND_CUDA; k <= KILN_TARGET_KIND_VULKAN; k++) {
    print_sum_row(kiln_compiler_target_kind_name((kiln_target_kind_t)k), &by_kind[k],
                  mlir_opt != NULL, false);
    total.kiln_ns += by_kind[k].kiln_ns;
    total.opt_ns += by_kind[k].opt_ns;
    total.rows += by_kind[k].rows;
  }
  print_sum_row("TOTAL", &total, mlir_opt != NULL, true);
  if (total.rows < n_targets) {
    printf("  (TOTAL and the kind rows count only the %zu of %zu targets where both sides compiled)\n",
           total.rows, n_targets);
  }
  printf("\n");
  kiln_free(kiln_ns);
  kiln_free(opt_ns);
  shapes_deinit(&shapes);
  kiln_free(src);
}

static void print_table_notes(void) {
  printf("  notes on section 1: ratio = mlir-opt/kiln. Both sides run the same pass pipelines\n"
         "  (kiln_compiler_pipeline_text). The mlir-opt side pays process start-up, printing and\n"
         "  re-parsing the IR between the halves; the benchmark adds the workgroup-size attributes\n"
         "  kiln sets in C between the halves (without spirv.entry_point_abi, Vulkan's BACK fails\n"
         "  in mlir-opt). For Vulkan, BACK stops before serialization: kiln additionally moves the\n"
         "  spirv.modules and serializes SPIR-V words, so those rows favour mlir-opt. Both sides\n"
         "  link HIP code objects with ld.lld-22 processes.\n\n");
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
    printf("  %-16s %10.1f %11.1f %7.2fx %9.1f %10.1f %5.1f%% %7.2fx   %s\n", name, ms(fan),
           ms(indep), ratio, front, mean_single, 100.0 * f, bound,
           ratio <= FANOUT_GOAL ? "PASS" : "MISS");
  }
  fflush(stdout);
  kiln_free(fan_ns);
  kiln_free(indep_ns);
  kiln_free(front_ms);
  kiln_free(src);
}

static void print_rss(void) {
  struct rusage self, children;
  getrusage(RUSAGE_SELF, &self);
  getrusage(RUSAGE_CHILDREN, &children);
  printf("3. peak RSS (getrusage ru_maxrss)\n");
  printf("  bench_compile process (one MLIR context, every model and target): %8.1f MiB\n",
         (double)self.ru_maxrss / 1024.0);
  if (opt_totals.processes) {
    printf("  largest mlir-opt process (wait4, %zu processes):               %8.1f MiB\n",
           opt_totals.processes, (double)opt_totals.max_rss_kib / 1024.0);
  }
  printf("  largest child of any kind (RUSAGE_CHILDREN; also kiln's ld.lld): %8.1f MiB\n",
         (double)children.ru_maxrss / 1024.0);
  printf("  CPU/wall over the timed runs: kiln %.2f", kiln_wall_ns ? kiln_cpu_s / ((double)kiln_wall_ns / 1e9) : 0.0);
  if (opt_totals.wall_ns) printf(", mlir-opt pipelines %.2f", opt_totals.cpu_s / ((double)opt_totals.wall_ns / 1e9));
  printf(" (above 1.0: threads or overlapping processes; kiln's ld.lld children not counted)\n\n");
}

/* ---- main ---- */

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
  for (int i = 1; i < argc; i++) {
    if (strcmp(argv[i], "--quick") == 0) {
      plan.quick = true;
    } else if (strcmp(argv[i], "--help") == 0 || strcmp(argv[i], "-h") == 0) {
      usage();
      return 0;
    } else {
      usage();
      return 2;
    }
  }
  if (plan.quick) {
    plan.kiln_runs = 2;
    plan.opt_runs = 1;
    plan.n_models = 1;
    plan.n_fan_models = 1;
  }
  kiln_log_configure(KILN_LOG_WARN, STDERR_FILENO);
  signal(SIGPIPE, SIG_IGN); /* a failed mlir-opt must not kill the benchmark mid-write */
  int64_t t0 = kiln_time_monotonic_ns();

  char mlir_opt_path[PATH_MAX];
  const char *mlir_opt = find_mlir_opt(mlir_opt_path, sizeof mlir_opt_path) ? mlir_opt_path : NULL;
  if (mlir_opt) stderr_files_open();
  print_header(&plan, mlir_opt);
  fflush(stdout);

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

  int64_t marks[3];
  for (size_t m = 0; m < plan.n_models; m++) {
    bench_model_table(&plan, all_models[m], mlir_opt, targets, n_targets);
  }
  if (mlir_opt) print_table_notes();
  marks[0] = kiln_time_monotonic_ns();

  printf("2. fan-out: one kiln_compiler_compile for the %zu mission targets (", N_MISSION);
  for (size_t i = 0; i < N_MISSION; i++) printf("%s%s", i ? ", " : "", mission_ids[i]);
  printf(")\n   vs %zu single-target compiles, same warm context; median of %zu runs each\n",
         N_MISSION, plan.kiln_runs);
  printf("  %-16s %10s %11s %8s %9s %10s %6s %8s   goal <= %.1fx\n", "model", "fan-out ms",
         "indep. ms", "ratio", "front ms", "single ms", "front", "bound", FANOUT_GOAL);
  for (size_t m = 0; m < plan.n_fan_models; m++) bench_fanout(&plan, all_models[m], mission);
  printf("  front ms: the shared front half (parse included) of one compile, from\n"
         "  kiln_compiler_output_t.front_ms; single ms: the mean single-target compile; front =\n"
         "  front/single = f. The front half is all a fan-out saves, so with N = %zu targets the\n"
         "  ratio cannot go below bound = (f + (1-f)N)/N; the goal needs f >= %.2f.\n\n",
         N_MISSION, (1.0 - FANOUT_GOAL) * (double)N_MISSION / (double)(N_MISSION - 1));
  marks[1] = kiln_time_monotonic_ns();

  print_rss();
  kiln_compiler_context_destroy(context);
  context = NULL;
  marks[2] = kiln_time_monotonic_ns();
  printf("total %.1f s (per-target tables %.1f, fan-out %.1f)\n", (double)(marks[2] - t0) / 1e9,
         (double)(marks[0] - t0) / 1e9, (double)(marks[1] - marks[0]) / 1e9);
  return 0;
}
