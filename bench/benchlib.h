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

#endif /* KILN_BENCH_BENCHLIB_H */
