/* What every benchmark in bench/ shares: the machine description in its header,
 * and medians. Single-threaded use. */
#ifndef KILN_BENCH_BENCHLIB_H
#define KILN_BENCH_BENCHLIB_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

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

#endif /* KILN_BENCH_BENCHLIB_H */
