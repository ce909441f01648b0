/* bench_recompile: issue 7's bulk recompile as an operator runs it, `kiln
 * recompile` over a directory tree of legacy VMFBs, against the unique compiles
 * that fleet stands for, side by side in one run.
 *
 * The fleet: S sources (examples/convnet.mlir with one splat constant varied per
 * source: distinct digests, the same compile work) x T GPU targets x K copies,
 * written by `vmfb_fixtures fleet --embed` (tests/tools/vmfb_fixtures.c): legacy
 * files in five legacy shapes, each copy stamped differently (distinct bytes and
 * digests), each carrying its source, so an empty kilnd can find it. Full run:
 * 10 x 5 x 20 = 1,000 files sharing 50 unique (source, target) pairs; --quick:
 * 2 x 2 x 5 = 20 files, 4 pairs.
 *
 * 1. Deduplication: `kiln recompile FLEET -o OUT --json` into an empty kilnd
 *    state against the same S x T compiles submitted directly: S `kiln compile
 *    SOURCE --target T1,...,TT -o DIR` processes started at once, into another
 *    empty state, same kilnd settings (--workers N, N = cores). Both write their
 *    VMFBs to disk. Goal: recompile / unique <= 1.2x. Beside it, the number of
 *    targets kilnd compiled in each run (GetStats targets_compiled, through `kiln
 *    stats --json`): S x T on both sides means the fleet cost unique work only.
 *    Beside them, the same recompile again on that kilnd with every pair cached:
 *    the per-file cost alone (in the first pass it overlaps the compiles).
 * 2. Workers: the same recompile, and the unique compiles, with kilnd --workers 1
 *    against --workers N: the speed-up from 1 to N workers. Each row also shows
 *    kilnd's CPU time (its workers and their fan-out children included, from
 *    /proc) over the wall time: the cores it kept busy. A worker forks a job's
 *    back halves on CPUs / workers processes, so one worker can still use every
 *    core for a multi-target job.
 *
 * Method: every timed run starts its own kilnd (the built binary, --listen
 * 127.0.0.1:0, a fresh --state-dir, as bench_service does through benchlib) so
 * every run starts from an empty state, waits a second for its workers to load
 * the compiler, then times from the client processes' start to their exit. Arms
 * alternate, and which goes first rotates, so drift hits all alike; each figure
 * is a median. Goals are reported as PASS/MISS, never asserted: the program
 * exits 0 unless the pipeline itself fails (a command fails, an item fails or
 * finds no source, a count is wrong): then 1; 2 for a usage error.
 *
 * All files live in one mkdtemp directory under DIR (argv), $TMPDIR or /tmp; it
 * and kilnd go away at the end, on failure and on SIGINT/SIGTERM/SIGHUP.
 * Usage: bench_recompile [--quick] [DIR]. Single-threaded.
 */
#include <errno.h>
#include <json-c/json.h>
#include <limits.h>
#include <signal.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/statfs.h>
#include <sys/wait.h>
#include <unistd.h>

#include "base/alloc.h"
#include "base/buf.h"
#include "base/time.h"
#include "bench/benchlib.h"

#ifndef KILN_SOURCE_DIR
#error "KILN_SOURCE_DIR must name the source tree (bench/CMakeLists.txt defines it)"
#endif
#if !defined(KILND_PATH) || !defined(KILN_PATH) || !defined(VMFB_FIXTURES_PATH)
#error \
    "KILND_PATH, KILN_PATH and VMFB_FIXTURES_PATH must name the built binaries (bench/CMakeLists.txt defines them)"
#endif

#define DEDUP_GOAL       1.2 /* recompile of the fleet / the unique compiles alone */
#define START_TIMEOUT_MS 60000
#define WORKER_WARMUP_US 1000000 /* after kilnd publishes its address */

/* --quick takes the first two: a CUDA and a HIP target. */
static const char *const all_targets[] = {"sm_89", "gfx950", "arm5gen", "sm_120", "gfx1100"};
#define MAX_TARGETS (sizeof all_targets / sizeof all_targets[0])
#define MAX_SOURCES 16

typedef struct plan_s {
  bool quick;
  size_t n_sources, n_targets, copies;
  size_t rounds; /* timed runs of each arm */
} plan_t;

/* The four arms; a run of one is a fresh kilnd, the client processes, GetStats. */
typedef enum arm_e { ARM_UNIQUE_N, ARM_RECOMPILE_N, ARM_RECOMPILE_1, ARM_UNIQUE_1, N_ARMS } arm_t;

typedef struct run_s {
  int64_t ns;                /* client processes' start to their exit */
  int64_t cpu_ns;            /* kilnd's and its workers' CPU time (fan-out children included) meanwhile */
  int64_t warm_ns;           /* ARM_RECOMPILE_N: the same recompile again on that kilnd, all cached */
  uint64_t targets_compiled; /* kilnd's GetStats after the run */
  uint64_t tasks_fused;      /* queued tasks folded into another of the same model */
  /* Recompile arms: the summary `kiln recompile --json` printed. */
  uint64_t files, recompiled, cached, current, no_source, failed, invalid, not_processed;
  uint64_t fetched, copied; /* artifacts fetched from kilnd, and copied locally from those */
} run_t;

/* ---- state shared with cleanup ---- */

static const char *scratch = ""; /* benchlib's temporary directory; "" when none */
static kiln_bench_kilnd_t kilnd; /* the kilnd of the run in progress */
static plan_t plan;
static char sources[MAX_SOURCES][PATH_MAX];
static char fleet_dir[PATH_MAX];
static char targets_csv[128];
static long cores;

/* ---- small helpers ---- */

static double ms(int64_t ns) { return (double)ns / 1e6; }
static double secs(int64_t ns) { return (double)ns / 1e9; }

static void make_dir(const char *path) {
  if (mkdir(path, 0700) != 0) kiln_bench_die("cannot create %s: %s", path, strerror(errno));
}

/* The first lines of a command's stderr, for the message that it failed. */
static void print_head(const char *path) {
  FILE *f = fopen(path, "r");
  if (!f) return;
  char buf[1201];
  size_t n = fread(buf, 1, sizeof buf - 1, f);
  buf[n] = '\0';
  fclose(f);
  if (n) fprintf(stderr, "bench_recompile: %s says:\n%s\n", path, buf);
}

static pid_t spawn_or_die(const char *const *argv, const char *out_path, const char *err_path) {
  pid_t pid = kiln_bench_spawn(argv, out_path, err_path);
  if (pid < 0) kiln_bench_die("cannot start %s: %s", argv[0], strerror(errno));
  return pid;
}

/* Waits for a child that must exit 0; otherwise shows its stderr and ends the run. */
static void wait_ok(pid_t pid, const char *what, const char *err_path) {
  int status = kiln_bench_wait(pid);
  if (status < 0) kiln_bench_die("waitpid: %s", strerror(errno));
  if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) {
    print_head(err_path);
    kiln_bench_die("%s failed (%s %d)", what, WIFEXITED(status) ? "exit status" : "signal",
                   WIFEXITED(status) ? WEXITSTATUS(status) : WTERMSIG(status));
  }
}

static void remove_tree(const char *path) {
  const char *argv[] = {"/bin/rm", "-rf", "--", path, NULL};
  wait_ok(spawn_or_die(argv, NULL, NULL), "rm -rf", "/dev/null");
}

/* ---- JSON from the CLI ---- */

/* Every JSON value in `path`, one after another (a file may hold one document or
 * JSON lines). Owned by the caller (json_object_put). */
static json_object *read_json_values(const char *path) {
  size_t text_len = 0;
  char *text = kiln_bench_read_file_or_die(path, &text_len);
  json_object *all = json_object_new_array();
  json_tokener *tok = json_tokener_new();
  const char *p = text, *end = text + text_len;
  while (p < end) {
    while (p < end && (*p == ' ' || *p == '\n' || *p == '\r' || *p == '\t')) p++;
    if (p == end) break;
    json_object *v = json_tokener_parse_ex(tok, p, (int)(end - p));
    if (!v) kiln_bench_die("%s is not JSON at byte %zu", path, (size_t)(p - text));
    json_object_array_add(all, v);
    p += json_tokener_get_parse_end(tok);
    json_tokener_reset(tok);
  }
  json_tokener_free(tok);
  kiln_free(text);
  return all;
}

/* obj[key] as an unsigned count (numbers and the decimal strings of proto3's JSON
 * mapping alike); 0 when absent. */
static uint64_t json_count(json_object *obj, const char *key) {
  json_object *v;
  if (!obj || !json_object_object_get_ex(obj, key, &v)) return 0;
  return (uint64_t)json_object_get_int64(v);
}

/* The first object among `values` holding `key`, or one nested one level down. */
static json_object *json_find(json_object *values, const char *key) {
  for (size_t i = 0; i < json_object_array_length(values); i++) {
    json_object *o = json_object_array_get_idx(values, i), *v;
    if (json_object_is_type(o, json_type_object) && json_object_object_get_ex(o, key, &v)) return v;
  }
  return NULL;
}

/* ---- one run ---- */

static void kilnd_start_fresh(const char *run_dir, int workers) {
  char state[PATH_MAX], log[PATH_MAX], err[PATH_MAX + 200], w[16];
  kiln_bench_pathf(state, "%s/state", run_dir);
  kiln_bench_pathf(log, "%s/kilnd.log", run_dir);
  make_dir(state);
  snprintf(w, sizeof w, "%d", workers);
  const char *extra[] = {"--workers", w, NULL};
  if (kiln_bench_kilnd_start(&kilnd, KILND_PATH, state, log, extra, START_TIMEOUT_MS, err, sizeof err) != 0) {
    kiln_bench_die("%s", err);
  }
  usleep(WORKER_WARMUP_US); /* the workers start and load the compiler */
}

/* GetStats' jobs.targets_compiled and jobs.tasks_fused, through `kiln stats --json`. */
static void read_stats(const char *run_dir, run_t *run) {
  char out[PATH_MAX], err[PATH_MAX];
  kiln_bench_pathf(out, "%s/stats.json", run_dir);
  kiln_bench_pathf(err, "%s/stats.err", run_dir);
  const char *argv[] = {KILN_PATH, "--addr", kilnd.addr, "--json", "stats", NULL};
  wait_ok(spawn_or_die(argv, out, err), "kiln stats --json", err);
  json_object *values = read_json_values(out);
  run->targets_compiled = json_count(json_find(values, "jobs"), "targets_compiled");
  run->tasks_fused = json_count(json_find(values, "jobs"), "tasks_fused");
  json_object_put(values);
}

/* S `kiln compile SOURCE --target ALL -o DIR` processes at once. */
static void unique_compiles(const char *run_dir) {
  pid_t pids[MAX_SOURCES];
  char errs[MAX_SOURCES][PATH_MAX];
  for (size_t s = 0; s < plan.n_sources; s++) {
    char out_dir[PATH_MAX];
    kiln_bench_pathf(out_dir, "%s/out-%zu", run_dir, s);
    kiln_bench_pathf(errs[s], "%s/compile-%zu.err", run_dir, s);
    const char *argv[] = {KILN_PATH,  "--addr",    kilnd.addr, "compile", sources[s],
                          "--target", targets_csv, "-o",       out_dir,   NULL};
    pids[s] = spawn_or_die(argv, NULL, errs[s]);
  }
  for (size_t s = 0; s < plan.n_sources; s++) wait_ok(pids[s], "kiln compile", errs[s]);
}

/* CPU time of kilnd and its workers, the fan-out children each worker has reaped
 * included: the whole compile service. */
static int64_t kilnd_tree_cpu_ns(void) {
  pid_t kids[64];
  size_t n = kiln_bench_proc_children(kilnd.pid, kids, 64);
  int64_t sum = kiln_bench_proc_cpu_ns(kilnd.pid, true);
  for (size_t i = 0; i < n && i < 64; i++) sum += kiln_bench_proc_cpu_ns(kids[i], true);
  return sum;
}

/* `kiln recompile FLEET -o OUT<pass> --json`; its summary into *run. */
static void recompile(const char *run_dir, int pass, run_t *run) {
  char out_dir[PATH_MAX], json[PATH_MAX], err[PATH_MAX];
  kiln_bench_pathf(out_dir, "%s/out%d", run_dir, pass);
  kiln_bench_pathf(json, "%s/recompile%d.json", run_dir, pass);
  kiln_bench_pathf(err, "%s/recompile%d.err", run_dir, pass);
  const char *argv[] = {KILN_PATH, "--addr", kilnd.addr, "recompile", fleet_dir,
                        "-o",      out_dir,  "--json",   NULL};
  wait_ok(spawn_or_die(argv, json, err), "kiln recompile", err);
  json_object *values = read_json_values(json);
  json_object *summary = json_find(values, "summary");
  if (!summary) {
    json_object_put(values);
    kiln_bench_die("kiln recompile --json printed no summary (in %s)", json);
  }
  run->files = json_count(summary, "files");
  run->recompiled = json_count(summary, "recompiled");
  run->cached = json_count(summary, "cached");
  run->current = json_count(summary, "current");
  run->no_source = json_count(summary, "no_source");
  run->failed = json_count(summary, "failed");
  run->invalid = json_count(summary, "invalid");
  run->not_processed = json_count(summary, "not_processed");
  run->fetched = json_count(summary, "artifacts_fetched");
  run->copied = json_count(summary, "artifacts_copied");
  json_object_put(values);
  size_t files = plan.n_sources * plan.n_targets * plan.copies;
  if (run->files != files || run->recompiled + run->cached != files) {
    kiln_bench_die(
        "kiln recompile of %zu legacy files reported %llu files: %llu recompiled, %llu cached, %llu "
        "current, %llu without a source, %llu failed, %llu invalid, %llu not processed (see %s)",
        files, (unsigned long long)run->files, (unsigned long long)run->recompiled,
        (unsigned long long)run->cached, (unsigned long long)run->current, (unsigned long long)run->no_source,
        (unsigned long long)run->failed, (unsigned long long)run->invalid,
        (unsigned long long)run->not_processed, json);
  }
}

static run_t run_arm(arm_t arm, size_t serial) {
  static const char *const names[N_ARMS] = {"unique-n", "recompile-n", "recompile-1", "unique-1"};
  char run_dir[PATH_MAX];
  kiln_bench_pathf(run_dir, "%s/run-%zu-%s", scratch, serial, names[arm]);
  make_dir(run_dir);
  bool one = arm == ARM_RECOMPILE_1 || arm == ARM_UNIQUE_1;
  kilnd_start_fresh(run_dir, one ? 1 : (int)cores);
  run_t run = {0};
  int64_t cpu0 = kilnd_tree_cpu_ns();
  int64_t t0 = kiln_time_monotonic_ns();
  if (arm == ARM_UNIQUE_N || arm == ARM_UNIQUE_1) {
    unique_compiles(run_dir);
  } else {
    recompile(run_dir, 1, &run);
  }
  run.ns = kiln_time_monotonic_ns() - t0;
  run.cpu_ns = kilnd_tree_cpu_ns() - cpu0;
  if (arm == ARM_RECOMPILE_N) {
    /* Every pair is cached now: what is left is the cost of the files themselves. */
    run_t again = {0};
    int64_t t1 = kiln_time_monotonic_ns();
    recompile(run_dir, 2, &again);
    run.warm_ns = kiln_time_monotonic_ns() - t1;
  }
  read_stats(run_dir, &run);
  int status = kiln_bench_kilnd_stop(&kilnd, 30000);
  if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) {
    kiln_bench_die("kilnd did not exit cleanly after the %s run (status 0x%x)", names[arm], status);
  }
  remove_tree(run_dir);
  return run;
}

/* ---- setup ---- */

/* S variants of examples/convnet.mlir under scratch/sources. */
static void write_sources(void) {
  char path[PATH_MAX], dir[PATH_MAX];
  kiln_bench_pathf(path, "%s/examples/convnet.mlir", KILN_SOURCE_DIR);
  size_t model_len = 0;
  char *model = kiln_bench_read_file_or_die(path, &model_len);
  if (!strstr(model, "dense<0.01>"))
    kiln_bench_die("%s no longer holds dense<0.01>: pick another constant", path);
  kiln_bench_pathf(dir, "%s/sources", scratch);
  make_dir(dir);
  for (size_t s = 0; s < plan.n_sources; s++) {
    size_t len;
    char *text =
        kiln_bench_model_variant(model, model_len, "bench_recompile", "dense<0.01>", 0.01, s + 1, &len);
    kiln_bench_pathf(sources[s], "%s/convnet_%zu.mlir", dir, s);
    if (kiln_bench_write_file(sources[s], text, len) != 0) {
      kiln_bench_die("cannot write %s: %s", sources[s], strerror(errno));
    }
    kiln_free(text);
  }
  kiln_free(model);
}

/* The fleet, by vmfb_fixtures in one process; returns the time it took. */
static int64_t write_fleet(void) {
  kiln_buf_t list;
  kiln_buf_init(&list);
  for (size_t s = 0; s < plan.n_sources; s++) kiln_buf_appendf(&list, "%s%s", s ? "," : "", sources[s]);
  char copies[24], out[PATH_MAX], err[PATH_MAX];
  snprintf(copies, sizeof copies, "%zu", plan.copies);
  kiln_bench_pathf(fleet_dir, "%s/fleet", scratch);
  kiln_bench_pathf(out, "%s/fleet.out", scratch);
  kiln_bench_pathf(err, "%s/fleet.err", scratch);
  const char *argv[] = {VMFB_FIXTURES_PATH, "fleet",    fleet_dir, "--sources", list.data, "--targets",
                        targets_csv,        "--copies", copies,    "--embed",   NULL};
  int64_t t0 = kiln_time_monotonic_ns();
  wait_ok(spawn_or_die(argv, out, err), "vmfb_fixtures fleet", err);
  int64_t t = kiln_time_monotonic_ns() - t0;
  kiln_buf_deinit(&list);
  return t;
}

/* Whether this kiln has the recompile command at all (it came with issue 7). */
static void require_recompile_command(void) {
  char out[PATH_MAX];
  kiln_bench_pathf(out, "%s/recompile-help.txt", scratch);
  const char *argv[] = {KILN_PATH, "recompile", "--help", NULL};
  int status = kiln_bench_wait(spawn_or_die(argv, out, NULL));
  FILE *f = fopen(out, "r");
  char text[8192] = "";
  if (f) {
    text[fread(text, 1, sizeof text - 1, f)] = '\0';
    fclose(f);
  }
  if (!WIFEXITED(status) || WEXITSTATUS(status) != 0 || !strstr(text, "  recompile ")) {
    kiln_bench_die("%s has no `recompile` command (kiln recompile --help exited with status 0x%x)", KILN_PATH,
                   status);
  }
}

static void print_header(int64_t fleet_ns) {
  long pages = sysconf(_SC_PHYS_PAGES), page = sysconf(_SC_PAGESIZE);
  char cpu[128];
  kiln_bench_cpu_model(cpu, sizeof cpu);
  struct statfs fs;
  if (statfs(scratch, &fs) != 0) kiln_bench_die("cannot statfs %s: %s", scratch, strerror(errno));
  printf(
      "kiln bulk recompile benchmark (%s): `kiln recompile` of a legacy fleet vs the unique\n"
      "compiles it stands for, side by side in one run\n",
      plan.quick ? "--quick" : "full");
  printf("what decides these numbers on this machine:\n");
  printf(
      "  cores %ld (%s), memory %.1f GiB,\n"
      "  shared by kilnd, its compile workers and the kiln client processes\n",
      cores, cpu, (double)pages * (double)page / (1024.0 * 1024 * 1024));
  printf(
      "  kilnd: %s, default settings but --workers,\n"
      "  a fresh state dir per run (on %s)\n",
      KILND_PATH, kiln_bench_fs_name((long)fs.f_type));
  kiln_bench_print_load("times");
  printf(
      "fleet: %zu legacy VMFBs = %zu sources (examples/convnet.mlir, one constant varied)\n"
      "  x %zu targets (%s)\n"
      "  x %zu copies (five legacy shapes, each copy stamped: distinct bytes), sources embedded;\n"
      "  written in %.1f s by vmfb_fixtures fleet\n",
      plan.n_sources * plan.n_targets * plan.copies, plan.n_sources, plan.n_targets, targets_csv, plan.copies,
      secs(fleet_ns));
  printf(
      "method: medians of %zu alternating runs per arm, each on a fresh kilnd (empty state,\n"
      "1 s for its workers to start); goals are reported as PASS/MISS, never asserted\n\n",
      plan.rounds);
}

/* The table rows of sections 1 and 2: wall time, targets compiled, and kilnd's
 * CPU time over the wall time (cores kept busy). cpu_ns < 0: not measured. */
static void print_row_head(void) {
  printf("  %-58s %10s %9s %9s %6s\n", "medians", "ms", "compiled", "kilnd CPU", "busy");
}

static void print_row(const char *what, int64_t ns, uint64_t compiled, int64_t cpu_ns) {
  if (cpu_ns < 0) {
    printf("    %-56s %10.1f\n", what, ms(ns));
    return;
  }
  printf("    %-56s %10.1f %9llu %8.1fs %5.2fx\n", what, ms(ns), (unsigned long long)compiled, secs(cpu_ns),
         (double)cpu_ns / (double)ns);
}

static const char *verdict(bool pass) { return pass ? "PASS" : "MISS"; }

static void usage(void) {
  fprintf(stderr,
          "usage: bench_recompile [--quick] [DIR]\n"
          "  Writes a fleet of legacy VMFBs (vmfb_fixtures fleet) in a temporary directory\n"
          "  under DIR ($TMPDIR or /tmp by default), then times `kiln recompile` of it against\n"
          "  the unique compiles alone (`kiln compile`), each into a fresh kilnd (%s),\n"
          "  with kilnd --workers N and --workers 1; removes the directory at the end.\n"
          "  --quick  smoke run: 2 sources x 2 targets x 5 copies, one run per arm\n",
          KILND_PATH);
}

int main(int argc, char **argv) {
  plan = (plan_t){.n_sources = 10, .n_targets = 5, .copies = 20, .rounds = 3};
  const char *base = NULL;
  int rc = kiln_bench_parse_args(argc, argv, true, usage, &plan.quick, &base);
  if (rc >= 0) return rc;
  if (plan.quick) plan = (plan_t){.quick = true, .n_sources = 2, .n_targets = 2, .copies = 5, .rounds = 1};
  signal(SIGPIPE, SIG_IGN);
  cores = sysconf(_SC_NPROCESSORS_ONLN);
  if (cores < 1) cores = 1;
  scratch = kiln_bench_begin("bench_recompile", base, &kilnd);
  int64_t t0 = kiln_time_monotonic_ns();
  for (size_t t = 0; t < plan.n_targets; t++) {
    snprintf(targets_csv + strlen(targets_csv), sizeof targets_csv - strlen(targets_csv), "%s%s",
             t ? "," : "", all_targets[t]);
  }
  require_recompile_command();
  write_sources();
  int64_t fleet_ns = write_fleet();
  print_header(fleet_ns);
  fflush(stdout);

  size_t files = plan.n_sources * plan.n_targets * plan.copies, pairs = plan.n_sources * plan.n_targets;
  run_t *runs = kiln_calloc(plan.rounds * N_ARMS, sizeof *runs);
  size_t serial = 0;
  for (size_t r = 0; r < plan.rounds; r++) {
    for (size_t k = 0; k < N_ARMS; k++) {
      arm_t arm = (arm_t)((k + r) % N_ARMS);
      runs[r * N_ARMS + arm] = run_arm(arm, serial++);
      fprintf(stderr, ".");
    }
  }
  fprintf(stderr, "\n");
  int64_t med[N_ARMS], cpu[N_ARMS];
  uint64_t compiled_max[N_ARMS] = {0};
  int64_t *v = kiln_calloc(plan.rounds, sizeof *v), *c = kiln_calloc(plan.rounds, sizeof *c);
  for (size_t a = 0; a < N_ARMS; a++) {
    for (size_t r = 0; r < plan.rounds; r++) {
      const run_t *run = &runs[r * N_ARMS + a];
      v[r] = run->ns;
      c[r] = run->cpu_ns;
      if (run->targets_compiled > compiled_max[a]) compiled_max[a] = run->targets_compiled;
    }
    med[a] = kiln_bench_median(v, plan.rounds);
    cpu[a] = kiln_bench_median(c, plan.rounds);
  }
  for (size_t r = 0; r < plan.rounds; r++) v[r] = runs[r * N_ARMS + ARM_RECOMPILE_N].warm_ns;
  int64_t warm = kiln_bench_median(v, plan.rounds);
  kiln_free(v);
  kiln_free(c);
  const run_t *last = &runs[(plan.rounds - 1) * N_ARMS + ARM_RECOMPILE_N];

  double dedup = (double)med[ARM_RECOMPILE_N] / (double)med[ARM_UNIQUE_N];
  printf(
      "1. recompile of %zu legacy files vs the %zu unique compiles alone (kilnd --workers %ld,\n"
      "   an empty state each run)\n",
      files, pairs, cores);
  print_row_head();
  char what[120];
  snprintf(what, sizeof what, "kiln recompile FLEET -o OUT --json (%zu files)", files);
  print_row(what, med[ARM_RECOMPILE_N], compiled_max[ARM_RECOMPILE_N], cpu[ARM_RECOMPILE_N]);
  snprintf(what, sizeof what, "%zu kiln compile -t <%zu targets> -o DIR at once (%zu pairs)", plan.n_sources,
           plan.n_targets, pairs);
  print_row(what, med[ARM_UNIQUE_N], compiled_max[ARM_UNIQUE_N], cpu[ARM_UNIQUE_N]);
  print_row("(kiln recompile again on that kilnd, every pair cached)", warm, 0, -1);
  printf("  recompile / unique = %.2fx   goal <= %.1fx %s\n", dedup, DEDUP_GOAL,
         verdict(dedup <= DEDUP_GOAL));
  bool unique_only = compiled_max[ARM_RECOMPILE_N] == pairs;
  printf("  kilnd compiled %llu targets for %zu files (most in any run): %s\n",
         (unsigned long long)compiled_max[ARM_RECOMPILE_N], files,
         unique_only ? "the unique pairs only" : "NOT the unique pairs only");
  printf(
      "  beyond the unique work: %.2f ms per file; with every pair cached: %.2f ms per file;\n"
      "  the unique work: %.1f ms per (source, target)\n",
      ms(med[ARM_RECOMPILE_N] - med[ARM_UNIQUE_N]) / (double)files, ms(warm) / (double)files,
      ms(med[ARM_UNIQUE_N]) / (double)pairs);
  printf(
      "  kiln recompile's summary (last run): %llu files, %llu recompiled, %llu cached; %llu artifacts\n"
      "  fetched from kilnd, %llu copied locally from those; %llu one-target tasks fused with\n"
      "  queued work of the same model (one parse and optimization for their targets)\n\n",
      (unsigned long long)last->files, (unsigned long long)last->recompiled, (unsigned long long)last->cached,
      (unsigned long long)last->fetched, (unsigned long long)last->copied,
      (unsigned long long)last->tasks_fused);

  double speedup_re = (double)med[ARM_RECOMPILE_1] / (double)med[ARM_RECOMPILE_N];
  double speedup_un = (double)med[ARM_UNIQUE_1] / (double)med[ARM_UNIQUE_N];
  printf("2. workers: kilnd --workers 1 vs --workers %ld (%ld cores)\n", cores, cores);
  print_row_head();
  print_row("kiln recompile, --workers 1", med[ARM_RECOMPILE_1], compiled_max[ARM_RECOMPILE_1],
            cpu[ARM_RECOMPILE_1]);
  snprintf(what, sizeof what, "kiln recompile, --workers %ld (section 1)", cores);
  print_row(what, med[ARM_RECOMPILE_N], compiled_max[ARM_RECOMPILE_N], cpu[ARM_RECOMPILE_N]);
  print_row("unique compiles, --workers 1", med[ARM_UNIQUE_1], compiled_max[ARM_UNIQUE_1], cpu[ARM_UNIQUE_1]);
  snprintf(what, sizeof what, "unique compiles, --workers %ld (section 1)", cores);
  print_row(what, med[ARM_UNIQUE_N], compiled_max[ARM_UNIQUE_N], cpu[ARM_UNIQUE_N]);
  printf("  speed-up 1 -> %ld workers: recompile %.2fx, unique compiles %.2fx (%ld cores: at most %ld.00x)\n",
         cores, speedup_re, speedup_un, cores, cores);
  printf(
      "  a worker forks each job's back halves on CPUs / workers processes (compiler/fanout.c), so\n"
      "  --workers 1 runs up to %ld at once too: the busy column shows how many cores each arm kept busy\n\n",
      cores);

  char buf[64];
  printf("summary (goals from the issue)\n");
  printf("  %-60s %10s %10s\n", "measurement", "value", "goal");
  snprintf(buf, sizeof buf, "%.2fx", dedup);
  snprintf(what, sizeof what, "recompile of %zu files / %zu unique compiles", files, pairs);
  printf("  %-60s %10s %10s %s\n", what, buf, "<= 1.2x", verdict(dedup <= DEDUP_GOAL));
  snprintf(buf, sizeof buf, "%llu", (unsigned long long)compiled_max[ARM_RECOMPILE_N]);
  snprintf(what, sizeof what, "targets kilnd compiled for the %zu files", files);
  char goal[32];
  snprintf(goal, sizeof goal, "%zu", pairs);
  printf("  %-60s %10s %10s %s\n", what, buf, goal, verdict(unique_only));
  snprintf(buf, sizeof buf, "%.2fx", speedup_re);
  snprintf(what, sizeof what, "recompile speed-up, 1 -> %ld workers", cores);
  printf("  %-60s %10s %10s\n", what, buf, "(none given)");
  printf("\n");

  char where[PATH_MAX];
  snprintf(where, sizeof where, "%s", scratch);
  kiln_bench_end();
  printf("total %.1f s; removed %s\n", secs(kiln_time_monotonic_ns() - t0), where);
  kiln_free(runs);
  return 0;
}
