/* Shared pieces of the benchmarks' output. */
#include "bench/benchlib.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

void kiln_bench_cpu_model(char *out, size_t cap) {
  snprintf(out, cap, "unknown");
  FILE *f = fopen("/proc/cpuinfo", "r");
  if (!f) return;
  char line[256];
  while (fgets(line, sizeof line, f)) {
    char *colon = strchr(line, ':');
    if (strncmp(line, "model name", 10) == 0 && colon) {
      snprintf(out, cap, "%s", colon + 2);
      out[strcspn(out, "\n")] = '\0';
      break;
    }
  }
  fclose(f);
}

void kiln_bench_print_load(const char *what) {
  double load[3] = {0, 0, 0};
  if (getloadavg(load, 3) > 0) {
    printf("  load average %.1f over %ld cores before the run: other work shares this machine, so\n"
           "  compare ratios (measured side by side), not absolute %s, across machines\n",
           load[0], sysconf(_SC_NPROCESSORS_ONLN), what);
  }
}

static int cmp_i64(const void *a, const void *b) {
  int64_t x = *(const int64_t *)a, y = *(const int64_t *)b;
  return (x > y) - (x < y);
}

void kiln_bench_sort(int64_t *v, size_t n) { qsort(v, n, sizeof *v, cmp_i64); }

int64_t kiln_bench_median(int64_t *v, size_t n) {
  kiln_bench_sort(v, n);
  return (v[(n - 1) / 2] + v[n / 2]) / 2;
}

int kiln_bench_parse_args(int argc, char **argv, bool takes_dir, void (*usage)(void), bool *out_quick,
                          const char **out_dir) {
  *out_quick = false;
  if (out_dir) *out_dir = NULL;
  for (int i = 1; i < argc; i++) {
    if (strcmp(argv[i], "--quick") == 0) {
      *out_quick = true;
    } else if (strcmp(argv[i], "--help") == 0 || strcmp(argv[i], "-h") == 0) {
      usage();
      return 0;
    } else if (argv[i][0] == '-' || !takes_dir || !out_dir || *out_dir) {
      usage();
      return 2;
    } else {
      *out_dir = argv[i];
    }
  }
  return -1;
}
