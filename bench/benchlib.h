/* What every benchmark in bench/ shares: the machine description in its header,
 * medians, the command line, the scratch directory, failing, child processes and
 * a kilnd (or several) of its own, model variants, and gRPC calls with request
 * metadata. Single-threaded use, except where a declaration says otherwise. */
#ifndef KILN_BENCH_BENCHLIB_H
#define KILN_BENCH_BENCHLIB_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <limits.h>
#include <sys/types.h>

/* The CPU's model name from /proc/cpuinfo ("unknown" when absent). */
void kiln_bench_cpu_model(char *out, size_t cap);

/* Prints the "load average ... compare ratios, not absolute <what>" lines (when the
 * load is known): measurements here share the machine with other work. */
void kiln_bench_print_load(const char *what);

/* Sorts `n` values ascending, in place. */
void kiln_bench_sort(int64_t *v, size_t n);

/* The median of `n` values; sorts `v` in place. */
int64_t kiln_bench_median(int64_t *v, size_t n);

/* The command line every benchmark takes: [--quick] [DIR] (DIR only when
 * `takes_dir`), and --help. Returns -1 to go on (with *out_quick and *out_dir
 * set), or the exit status to return at once (0 after --help, 2 on bad usage,
 * after calling `usage`). */
int kiln_bench_parse_args(int argc, char **argv, bool takes_dir, void (*usage)(void), bool *out_quick,
                          const char **out_dir);

/* splitmix64 from `*state`: fast, and random enough that zstd finds nothing to
 * compress. fill_random fills `len` bytes. */
uint64_t kiln_bench_rng_next(uint64_t *state);
void kiln_bench_fill_random(unsigned char *buf, size_t len, uint64_t *state);

/* A filesystem's name from statfs's f_type ("unknown" for others). */
const char *kiln_bench_fs_name(long type);

/* The benchmark's scratch directory, "<base>/kiln-bench-XXXXXX" (base: $TMPDIR or
 * /tmp when NULL). Ctrl-C, SIGTERM, SIGHUP (and SIGPIPE with `on_sigpipe`) must
 * not leave it behind: the handler first calls `before_signal` (may be NULL; it
 * must be async-signal-safe, e.g. kill a child), then removes the directory with
 * rm(1) through fork and exec (nftw is not async-signal-safe) and dies of the same
 * signal. Returns the path, or NULL with the reason in `err`. */
const char *kiln_bench_scratch_make(const char *base, void (*before_signal)(void), bool on_sigpipe, char *err,
                                    size_t err_cap);

/* Removes the scratch directory and its contents; afterwards the path reads "". */
void kiln_bench_scratch_remove(void);

/* ---- files ---- */

/* The whole file at `path`, NUL-terminated (free with kiln_free), its length in
 * *out_len (may be NULL); NULL with errno set when it cannot be opened or read. */
char *kiln_bench_read_file(const char *path, size_t *out_len);

/* kiln_bench_read_file, or kiln_bench_die naming the file and why. */
char *kiln_bench_read_file_or_die(const char *path, size_t *out_len);

/* Formats a path into `out` (PATH_MAX bytes); a longer one ends the run
 * (kiln_bench_die: pick a shorter scratch DIR). */
void kiln_bench_pathf(char *out, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

/* ---- failing ---- */

/* Names the benchmark for kiln_bench_die's messages and registers what it runs
 * before exiting (may be NULL): stop kilnd, print its log, remove the scratch
 * directory. */
void kiln_bench_die_setup(const char *name, void (*cleanup)(void));

/* Prints "<name>: <message>" to stderr, runs the cleanup and exits 1: the
 * benchmark itself cannot go on. Thread-safe: the first caller cleans up and
 * exits, later ones wait for it. */
_Noreturn void kiln_bench_die(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

/* ---- files and processes ---- */

/* Writes `len` bytes to `path` (created or truncated). 0, or -1 with errno. */
int kiln_bench_write_file(const char *path, const void *data, size_t len);

/* Starts argv[0] (a path) with stdin from /dev/null, stdout to `out_path` (NULL:
 * /dev/null) and stderr to `err_path` (NULL: where stdout goes), both truncated.
 * KILN_* and KILND_* variables are dropped from its environment, so the shell that
 * runs the benchmark cannot change the settings of what it measures. Returns the
 * child's pid, or -1 with errno set. */
pid_t kiln_bench_spawn(const char *const *argv, const char *out_path, const char *err_path);

/* kiln_bench_spawn with `env_add` ("NAME=VALUE" strings, NULL-terminated; may be
 * NULL) added to the environment after the KILN_* and KILND_* variables were
 * dropped: settings the benchmark itself chooses for the child. */
pid_t kiln_bench_spawn_env(const char *const *argv, const char *const *env_add, const char *out_path,
                           const char *err_path);

/* Waits for child `pid` (through EINTR); returns its wait status, or -1 with errno. */
int kiln_bench_wait(pid_t pid);

/* ---- /proc ---- */

/* User + system CPU time of process `pid`, all its threads, in nanoseconds; with
 * `reaped`, plus that of the children it has waited for. 0 when it is gone. */
int64_t kiln_bench_proc_cpu_ns(pid_t pid, bool reaped);

/* The direct children of `parent` (kilnd's workers), up to `cap` of them into
 * `out`; returns how many there are (more than `cap` when they did not fit). */
size_t kiln_bench_proc_children(pid_t parent, pid_t *out, size_t cap);

/* ---- a kilnd of the benchmark's own ---- */

typedef struct kiln_bench_kilnd_s {
  volatile pid_t pid; /* 0 when not running; read by signal handlers */
  char addr[256];     /* "127.0.0.1:PORT" once started */
  char state_dir[PATH_MAX];
  char log_path[PATH_MAX];
} kiln_bench_kilnd_t;

/* Starts `kilnd_path` --listen 127.0.0.1:0 --state-dir STATE --log-level warn
 * --metrics-listen off (and KILND_ALLOW_ROOT=1 when run as root),
 * then `extra_args` (NULL-terminated; may be NULL), its stdout and stderr to
 * LOG, and waits up to `timeout_ms` for the address it publishes in
 * STATE/kilnd.addr. `state_dir` and `log_path` are copied into *d (they may be
 * d->state_dir and d->log_path themselves). 0 on success;
 * -1 with the reason in `err` (kilnd then is not running). */
int kiln_bench_kilnd_start(kiln_bench_kilnd_t *d, const char *kilnd_path, const char *state_dir,
                           const char *log_path, const char *const *extra_args, int64_t timeout_ms, char *err,
                           size_t err_cap);

/* Stops kilnd: SIGTERM, then SIGKILL when it has not exited within `grace_ms`.
 * Returns its wait status (0 when it was not running). */
int kiln_bench_kilnd_stop(kiln_bench_kilnd_t *d, int64_t grace_ms);

/* Prints the last lines of kilnd's log to stderr under "<who>: the end of
 * kilnd's log:": why it did not answer. */
void kiln_bench_kilnd_print_log_tail(const kiln_bench_kilnd_t *d, const char *who);

/* The usual start and end of a benchmark with one kilnd at a time: names it for
 * kiln_bench_die, makes the scratch directory under `base` (NULL: the default),
 * and arranges that a failure prints the end of `kilnd`'s log, stops it and
 * removes the scratch directory, and that a signal kills kilnd first. Returns the
 * scratch path, or dies. `kilnd` is borrowed for the whole run. */
const char *kiln_bench_begin(const char *name, const char *base, kiln_bench_kilnd_t *kilnd);

/* kiln_bench_begin for several kilnd (`n` of them at `kilnds`) and `n_pids` other
 * child processes (a proxy: their pids in `pids`, each 0 while not running): a
 * failure prints the end of every kilnd's log and stops them all; a signal kills
 * them all first. Both arrays are borrowed for the whole run. */
const char *kiln_bench_begin_fleet(const char *name, const char *base, kiln_bench_kilnd_t *kilnds, size_t n,
                                   volatile pid_t *pids, size_t n_pids);

/* Stops the kilnd given to kiln_bench_begin or kiln_bench_begin_fleet (those
 * running: SIGTERM, SIGKILL after 5 s), SIGTERMs and reaps the other children of
 * kiln_bench_begin_fleet, and removes the scratch directory: the end of a
 * successful run. */
void kiln_bench_end(void);

/* ---- model variants ---- */

/* `model` with a first line "// <tag> variant <serial>" and the first `needle`
 * (a splat such as "dense<-0.2>") replaced by dense<base - serial/1024>: the
 * bytes differ (kilnd keys on the bytes' digest) and so does the IR's meaning (in
 * case it keys on a semantic fingerprint later), while the compile work stays
 * the same. Without the needle only the comment is added. Owned by the caller
 * (kiln_free). */
char *kiln_bench_model_variant(const char *model, size_t model_len, const char *tag, const char *needle,
                               double base, uint64_t serial, size_t *out_len);

#endif /* KILN_BENCH_BENCHLIB_H */
