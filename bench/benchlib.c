/* Shared pieces of the benchmarks' output. */
#include "bench/benchlib.h"

#define _XOPEN_SOURCE 700 /* nftw */
#include <errno.h>
#include <ftw.h>
#include <limits.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
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

/* ---- the scratch directory ---- */

static char scratch[PATH_MAX]; /* "" when none */
static void (*scratch_before_signal)(void);

static int remove_entry(const char *path, const struct stat *sb, int type, struct FTW *ftw) {
  (void)sb, (void)type, (void)ftw;
  if (remove(path) != 0 && errno != ENOENT) fprintf(stderr, "bench: cannot remove %s: %s\n", path, strerror(errno));
  return 0; /* keep going: remove as much as possible */
}

void kiln_bench_scratch_remove(void) {
  if (!scratch[0]) return;
  nftw(scratch, remove_entry, 32, FTW_DEPTH | FTW_PHYS);
  scratch[0] = '\0';
}

static void on_signal(int sig) {
  if (scratch_before_signal) scratch_before_signal();
  if (scratch[0]) {
    pid_t pid = fork();
    if (pid == 0) {
      execl("/bin/rm", "rm", "-rf", "--", scratch, (char *)NULL);
      _exit(127);
    }
    if (pid > 0) waitpid(pid, NULL, 0);
  }
  signal(sig, SIG_DFL);
  raise(sig);
}

const char *kiln_bench_scratch_make(const char *base, void (*before_signal)(void), bool on_sigpipe, char *err,
                                    size_t err_cap) {
  if (!base || !*base) base = getenv("TMPDIR");
  if (!base || !*base) base = "/tmp";
  if ((size_t)snprintf(scratch, sizeof scratch, "%s/kiln-bench-XXXXXX", base) >= sizeof scratch) {
    scratch[0] = '\0';
    snprintf(err, err_cap, "directory name too long: %s", base);
    return NULL;
  }
  if (!mkdtemp(scratch)) {
    int e = errno;
    scratch[0] = '\0';
    snprintf(err, err_cap, "cannot create a temporary directory in %s: %s; pass a writable DIR", base, strerror(e));
    return NULL;
  }
  scratch_before_signal = before_signal;
  const int sigs[] = {SIGINT, SIGTERM, SIGHUP, SIGPIPE};
  size_t n = on_sigpipe ? 4 : 3;
  struct sigaction sa;
  memset(&sa, 0, sizeof sa);
  sa.sa_handler = on_signal;
  sigemptyset(&sa.sa_mask);
  for (size_t i = 0; i < n; i++) sigaddset(&sa.sa_mask, sigs[i]);
  for (size_t i = 0; i < n; i++) sigaction(sigs[i], &sa, NULL);
  return scratch;
}

/* ---- bytes and filesystems ---- */

uint64_t kiln_bench_rng_next(uint64_t *state) {
  uint64_t z = (*state += 0x9e3779b97f4a7c15ull);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}

void kiln_bench_fill_random(unsigned char *buf, size_t len, uint64_t *state) {
  for (size_t i = 0; i < len; i += 8) {
    uint64_t v = kiln_bench_rng_next(state);
    memcpy(buf + i, &v, len - i < 8 ? len - i : 8);
  }
}

const char *kiln_bench_fs_name(long type) {
  switch ((unsigned long)type & 0xffffffffu) {
    case 0xef53: return "ext2/3/4";
    case 0x58465342: return "xfs";
    case 0x9123683e: return "btrfs";
    case 0x01021994: return "tmpfs";
    case 0x794c7630: return "overlayfs";
    case 0x2fc12fc1: return "zfs";
    case 0xf2f52010: return "f2fs";
    case 0x6969: return "nfs";
    case 0x65735546: return "fuse";
    case 0x01021997: return "9p";
    default: return "unknown";
  }
}
