/* Shared pieces of the benchmarks (benchlib.h). The scratch directory and the
 * guarded kilnd and child pids are process-wide so that signal handlers can clean
 * up after them. */
#include "bench/benchlib.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <signal.h>
#include <spawn.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "base/alloc.h"
#include "base/buf.h"
#include "base/file.h"
#include "base/time.h"

extern char **environ;

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
    printf(
        "  load average %.1f over %ld cores before the run: other work shares this machine, so\n"
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

void kiln_bench_scratch_remove(void) {
  if (!scratch[0]) return;
  kiln_status_t st = kiln_file_tree_remove(scratch);
  if (st) fprintf(stderr, "bench: %s\n", kiln_status_message(st));
  kiln_status_free(st);
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
    snprintf(err, err_cap, "cannot create a temporary directory in %s: %s; pass a writable DIR", base,
             strerror(e));
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

/* ---- failing ---- */

static const char *die_name = "bench";
static void (*die_cleanup)(void);
/* kiln_bench_begin's (or kiln_bench_begin_fleet's) kilnd and other children. */
static kiln_bench_kilnd_t *guarded;
static size_t n_guarded;
static volatile pid_t *guarded_pids;
static size_t n_guarded_pids;
static atomic_flag dying = ATOMIC_FLAG_INIT;

void kiln_bench_die_setup(const char *name, void (*cleanup)(void)) {
  die_name = name;
  die_cleanup = cleanup;
}

_Noreturn void kiln_bench_die(const char *fmt, ...) {
  if (atomic_flag_test_and_set(&dying)) {
    for (;;) pause();
  }
  va_list ap;
  va_start(ap, fmt);
  fprintf(stderr, "%s: ", die_name);
  vfprintf(stderr, fmt, ap);
  fputc('\n', stderr);
  va_end(ap);
  if (die_cleanup) die_cleanup();
  exit(1);
}

/* ---- files and processes ---- */

int kiln_bench_write_file(const char *path, const void *data, size_t len) {
  FILE *f = fopen(path, "wb");
  if (!f) return -1;
  bool ok = fwrite(data, 1, len, f) == len;
  int e = errno;
  if (fclose(f) != 0) return -1;
  if (!ok) errno = e;
  return ok ? 0 : -1;
}

pid_t kiln_bench_spawn(const char *const *argv, const char *out_path, const char *err_path) {
  return kiln_bench_spawn_env(argv, NULL, out_path, err_path);
}

pid_t kiln_bench_spawn_env(const char *const *argv, const char *const *env_add, const char *out_path,
                           const char *err_path) {
  size_t n_env = 0, n_add = 0;
  while (environ[n_env]) n_env++;
  while (env_add && env_add[n_add]) n_add++;
  char **env = kiln_calloc(n_env + n_add + 1, sizeof *env);
  size_t k = 0;
  for (size_t i = 0; i < n_env; i++) {
    if (strncmp(environ[i], "KILN_", 5) != 0 && strncmp(environ[i], "KILND_", 6) != 0) env[k++] = environ[i];
  }
  for (size_t i = 0; i < n_add; i++) env[k++] = (char *)env_add[i];
  posix_spawn_file_actions_t fa;
  posix_spawn_file_actions_init(&fa);
  posix_spawn_file_actions_addopen(&fa, STDIN_FILENO, "/dev/null", O_RDONLY, 0);
  posix_spawn_file_actions_addopen(&fa, STDOUT_FILENO, out_path ? out_path : "/dev/null",
                                   O_WRONLY | O_CREAT | O_TRUNC, 0644);
  if (err_path) {
    posix_spawn_file_actions_addopen(&fa, STDERR_FILENO, err_path, O_WRONLY | O_CREAT | O_TRUNC, 0644);
  } else {
    posix_spawn_file_actions_adddup2(&fa, STDOUT_FILENO, STDERR_FILENO);
  }
  pid_t pid;
  int rc = posix_spawn(&pid, argv[0], &fa, NULL, (char *const *)argv, env);
  posix_spawn_file_actions_destroy(&fa);
  kiln_free(env);
  if (rc != 0) {
    errno = rc;
    return -1;
  }
  return pid;
}

int kiln_bench_wait(pid_t pid) {
  int status;
  while (waitpid(pid, &status, 0) < 0) {
    if (errno != EINTR) return -1;
  }
  return status;
}

/* ---- /proc ---- */

/* The fields of /proc/PID/stat after the command name (which may hold spaces),
 * into `buf`; NULL when the process is gone. */
static const char *proc_stat_fields(pid_t pid, char *buf, size_t cap) {
  char path[64];
  snprintf(path, sizeof path, "/proc/%d/stat", (int)pid);
  FILE *f = fopen(path, "r");
  if (!f) return NULL;
  size_t n = fread(buf, 1, cap - 1, f);
  fclose(f);
  buf[n] = '\0';
  const char *p = strrchr(buf, ')');
  return p && p[1] == ' ' ? p + 2 : NULL;
}

int64_t kiln_bench_proc_cpu_ns(pid_t pid, bool reaped) {
  char text[1024];
  const char *p = proc_stat_fields(pid, text, sizeof text);
  unsigned long long utime = 0, stime = 0, cutime = 0, cstime = 0;
  if (!p || sscanf(p, "%*c %*d %*d %*d %*d %*d %*u %*u %*u %*u %*u %llu %llu %llu %llu", &utime, &stime,
                   &cutime, &cstime) != 4) {
    return 0;
  }
  unsigned long long ticks = utime + stime + (reaped ? cutime + cstime : 0);
  return (int64_t)(ticks * (1000000000ull / (unsigned long long)sysconf(_SC_CLK_TCK)));
}

size_t kiln_bench_proc_children(pid_t parent, pid_t *out, size_t cap) {
  DIR *d = opendir("/proc");
  if (!d) return 0;
  size_t n = 0;
  struct dirent *e;
  while ((e = readdir(d)) != NULL) {
    char *end, text[1024];
    long pid = strtol(e->d_name, &end, 10);
    if (*end || pid <= 0) continue;
    const char *p = proc_stat_fields((pid_t)pid, text, sizeof text);
    int ppid = 0;
    if (!p || sscanf(p, "%*c %d", &ppid) != 1 || ppid != parent) continue;
    if (n < cap) out[n] = (pid_t)pid;
    n++;
  }
  closedir(d);
  return n;
}

/* ---- a kilnd of the benchmark's own ---- */

int kiln_bench_kilnd_start(kiln_bench_kilnd_t *d, const char *kilnd_path, const char *state_dir,
                           const char *log_path, const char *const *extra_args, int64_t timeout_ms, char *err,
                           size_t err_cap) {
  d->pid = 0;
  d->addr[0] = '\0';
  if (state_dir != d->state_dir) snprintf(d->state_dir, sizeof d->state_dir, "%s", state_dir);
  if (log_path != d->log_path) snprintf(d->log_path, sizeof d->log_path, "%s", log_path);
  /* No metrics endpoint: its default port would collide between benchmarks run at
   * once (ctest -j) and with a kilnd the user runs. */
  const char *argv[32] = {kilnd_path,    "--listen", "127.0.0.1:0",      "--state-dir", d->state_dir,
                          "--log-level", "warn",     "--metrics-listen", "off"};
  size_t n = 9;
  for (size_t i = 0; extra_args && extra_args[i]; i++) {
    if (n + 1 >= sizeof argv / sizeof argv[0]) {
      snprintf(err, err_cap, "too many kilnd arguments");
      return -1;
    }
    argv[n++] = extra_args[i];
  }
  argv[n] = NULL;
  /* kilnd refuses to run as root unless allowed; a benchmark runs as whoever runs it
   * (CI containers run as root). The environment, not --allow-root, so that a kilnd
   * without that setting ignores it. */
  const char *env[] = {"KILND_ALLOW_ROOT=1", NULL};
  pid_t pid = kiln_bench_spawn_env(argv, geteuid() == 0 ? env : NULL, d->log_path, NULL);
  if (pid < 0) {
    snprintf(err, err_cap, "cannot start %s: %s; build it (cmake --build build --target kilnd)", kilnd_path,
             strerror(errno));
    return -1;
  }
  d->pid = pid;
  char addr_path[PATH_MAX + 16];
  snprintf(addr_path, sizeof addr_path, "%s/kilnd.addr", d->state_dir);
  int64_t until = kiln_time_monotonic_ns() + timeout_ms * 1000000;
  while (kiln_time_monotonic_ns() < until) {
    int status;
    if (waitpid(pid, &status, WNOHANG) == pid) {
      d->pid = 0;
      snprintf(err, err_cap, "kilnd exited (status 0x%x) before it published its address", status);
      return -1;
    }
    FILE *f = fopen(addr_path, "r");
    if (f) {
      size_t got = fread(d->addr, 1, sizeof d->addr - 1, f);
      fclose(f);
      d->addr[got] = '\0';
      if (got > 0 && d->addr[got - 1] == '\n') {
        d->addr[got - 1] = '\0';
        return 0;
      }
    }
    struct timespec ts = {0, 10000000};
    nanosleep(&ts, NULL);
  }
  kiln_bench_kilnd_stop(d, 1000);
  snprintf(err, err_cap, "kilnd did not publish its address in %s within %lld s", addr_path,
           (long long)(timeout_ms / 1000));
  return -1;
}

int kiln_bench_kilnd_stop(kiln_bench_kilnd_t *d, int64_t grace_ms) {
  pid_t pid = d->pid;
  if (pid <= 0) return 0;
  kill(pid, SIGTERM);
  int status = 0;
  int64_t until = kiln_time_monotonic_ns() + grace_ms * 1000000;
  for (;;) {
    pid_t r = waitpid(pid, &status, WNOHANG);
    if (r == pid || (r < 0 && errno != EINTR)) break;
    if (kiln_time_monotonic_ns() > until) {
      kill(pid, SIGKILL);
      waitpid(pid, &status, 0);
      break;
    }
    usleep(10000);
  }
  d->pid = 0;
  return status;
}

void kiln_bench_kilnd_print_log_tail(const kiln_bench_kilnd_t *d, const char *who) {
  FILE *f = d->log_path[0] ? fopen(d->log_path, "r") : NULL;
  if (!f) return;
  fseek(f, 0, SEEK_END);
  long size = ftell(f);
  fseek(f, size > 4000 ? size - 4000 : 0, SEEK_SET);
  char buf[4001];
  size_t n = fread(buf, 1, sizeof buf - 1, f);
  buf[n] = '\0';
  fclose(f);
  if (n) fprintf(stderr, "%s: the end of kilnd's log:\n%s\n", who, buf);
}

/* ---- model variants ---- */

char *kiln_bench_model_variant(const char *model, size_t model_len, const char *tag, const char *needle,
                               double base, uint64_t serial, size_t *out_len) {
  const char *at = strstr(model, needle);
  size_t cap = model_len + strlen(tag) + 128;
  char *text = kiln_malloc(cap);
  int n = snprintf(text, cap, "// %s variant %llu\n", tag, (unsigned long long)serial);
  if (at) {
    n += snprintf(text + n, cap - (size_t)n, "%.*sdense<%.10g>%s", (int)(at - model), model,
                  base - (double)serial / 1024.0, at + strlen(needle));
  } else {
    n += snprintf(text + n, cap - (size_t)n, "%s", model);
  }
  *out_len = (size_t)n;
  return text;
}

/* ---- the run's begin and end ---- */

void kiln_bench_end(void) {
  for (size_t i = 0; i < n_guarded; i++) kiln_bench_kilnd_stop(&guarded[i], 5000);
  for (size_t i = 0; i < n_guarded_pids; i++) {
    pid_t pid = guarded_pids[i];
    if (pid <= 0) continue;
    kill(pid, SIGTERM);
    kiln_bench_wait(pid);
    guarded_pids[i] = 0;
  }
  kiln_bench_scratch_remove();
}

static void end_after_failure(void) {
  for (size_t i = 0; i < n_guarded; i++) kiln_bench_kilnd_print_log_tail(&guarded[i], die_name);
  kiln_bench_end();
}

/* Async-signal-safe: the scratch handler runs it before removing the directory. */
static void kill_guarded(void) {
  for (size_t i = 0; i < n_guarded; i++) {
    if (guarded[i].pid > 0) kill(guarded[i].pid, SIGKILL);
  }
  for (size_t i = 0; i < n_guarded_pids; i++) {
    if (guarded_pids[i] > 0) kill(guarded_pids[i], SIGKILL);
  }
}

const char *kiln_bench_begin(const char *name, const char *base, kiln_bench_kilnd_t *kilnd) {
  return kiln_bench_begin_fleet(name, base, kilnd, 1, NULL, 0);
}

const char *kiln_bench_begin_fleet(const char *name, const char *base, kiln_bench_kilnd_t *kilnds, size_t n,
                                   volatile pid_t *pids, size_t n_pids) {
  guarded = kilnds;
  n_guarded = n;
  guarded_pids = pids;
  n_guarded_pids = n_pids;
  kiln_bench_die_setup(name, end_after_failure);
  char err[PATH_MAX + 200];
  const char *made = kiln_bench_scratch_make(base, kill_guarded, false, err, sizeof err);
  if (!made) kiln_bench_die("%s", err);
  return made;
}

/* ---- files ---- */

char *kiln_bench_read_file(const char *path, size_t *out_len) {
  FILE *f = fopen(path, "rb");
  if (!f) return NULL;
  kiln_buf_t b;
  kiln_buf_init(&b);
  char chunk[65536];
  size_t n;
  while ((n = fread(chunk, 1, sizeof chunk, f)) > 0) kiln_buf_append(&b, chunk, n);
  int err = ferror(f) ? (errno ? errno : EIO) : 0;
  fclose(f);
  if (err) {
    kiln_buf_deinit(&b);
    errno = err;
    return NULL;
  }
  if (out_len) *out_len = b.len;
  return kiln_buf_take(&b);
}

char *kiln_bench_read_file_or_die(const char *path, size_t *out_len) {
  char *text = kiln_bench_read_file(path, out_len);
  if (!text) kiln_bench_die("cannot read %s: %s", path, strerror(errno));
  return text;
}

void kiln_bench_pathf(char *out, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  int n = vsnprintf(out, PATH_MAX, fmt, ap);
  va_end(ap);
  if (n < 0 || n >= PATH_MAX)
    kiln_bench_die("a path is longer than PATH_MAX (%.120s...); pick a shorter DIR", out);
}
