/* kilnd: the kiln compile daemon.
 *
 * Start-up order: settings (defaults < config file < KILND_* environment < flags),
 * logging, the state directory (created and locked before binding, so a second
 * kilnd on the same state fails on the lock and never touches the socket), the
 * gRPC server, the job engine and its compile workers (kiln-worker processes), the
 * published address; then the loop runs until SIGTERM/SIGINT has drained
 * in-flight calls.
 *
 * Operators: unless metrics-listen is off, an HTTP endpoint (http.c) serves
 * /metrics, /healthz and /readyz and publishes its address in
 * STATE/kilnd.metrics-addr. Under systemd (NOTIFY_SOCKET set), kilnd sends
 * READY=1 once the gRPC server listens and a compile worker is ready (the same
 * condition as /readyz), STATUS= lines, and STOPPING=1 when the drain starts;
 * without NOTIFY_SOCKET sd_notify does nothing.
 *
 * The artifact cache lives in STATE/cache; opening it repairs what a crash left
 * (see cache/cache.h). `kilnd --verify` checks it offline instead of serving.
 *
 * Security: kilnd refuses to run as root unless allow-root is set (it needs no
 * privilege: its state directory, an unprivileged port, its own workers). The TLS
 * files and the token file are read and checked before anything else starts; a
 * half configuration or a bad file is a settings error (exit 2).
 *
 * kilnd links no compiler (kiln-worker does; kilnd takes only target tables and
 * the VMFB reader from kiln_compiler, so it never maps libLLVM). The compiler
 * identity it reports is therefore the workers': GetServerInfo and the
 * kiln_build_info metric take it from the first worker's Hello, and --version
 * runs the worker it would spawn with --version.
 *
 * Exit codes: 0 clean stop (also after --help, --version, --print-config, and a
 * --verify that found nothing wrong); 1 could not start (address in use, state
 * directory or cache unusable) or failed while running; 2 bad flags, environment
 * or config file (also: unusable TLS or token files, or running as root without
 * allow-root); 3 --verify found problems (repaired unless --dry-run).
 */
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <spawn.h>
#include <stdio.h>
#include <systemd/sd-daemon.h>
#include <stdbool.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "base/alloc.h"
#include "base/buf.h"
#include "base/log.h"
#include "base/time.h"
#include "cache/cache.h"
#include "cache/jobstore.h"
#include "compiler/identity.h" /* the ABI version macros only: kilnd links no compiler */
#include "daemon/auth.h"
#include "daemon/client_text.h"
#include "daemon/http.h"
#include "daemon/jobs.h"
#include "daemon/server.h"
#include "daemon/settings.h"
#include "daemon/statedir.h"
#include "daemon/tls.h"

#define EXIT_START_FAILURE 1
#define EXIT_USAGE 2
#define EXIT_VERIFY_PROBLEMS 3

static const char *const problem_names[] = {"?", "corrupt blob", "missing blob", "orphan blob",
                                            "stray file", "damaged index"};

/* The memory this process may use: the machine's, or its cgroup's when lower. */
static uint64_t memory_available(void) {
  long pages = sysconf(_SC_PHYS_PAGES), page = sysconf(_SC_PAGE_SIZE);
  uint64_t total = pages > 0 && page > 0 ? (uint64_t)pages * (uint64_t)page : 0;
  static const char *const limits[] = {"/sys/fs/cgroup/memory.max", "/sys/fs/cgroup/memory/memory.limit_in_bytes"};
  for (size_t i = 0; i < sizeof limits / sizeof limits[0]; i++) {
    FILE *f = fopen(limits[i], "r");
    if (!f) continue;
    unsigned long long v = 0;
    if (fscanf(f, "%llu", &v) == 1 && v > 0 && (total == 0 || v < total)) total = v; /* "max": no number */
    fclose(f);
  }
  return total;
}

/* worker-memory-limit, with auto resolved: three quarters of the memory there
 * is, shared among the workers, at least 2 GiB; none under AddressSanitizer or
 * ThreadSanitizer, whose shadow memory needs an unlimited address space. */
static uint64_t worker_memory_limit(const kilnd_settings_t *settings) {
  if (settings->worker_memory_limit != KILN_CONFIG_SIZE_AUTO) return settings->worker_memory_limit;
  bool shadow = false;
#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
  shadow = true;
#endif
  uint64_t total = shadow ? 0 : memory_available();
  long cpus = sysconf(_SC_NPROCESSORS_ONLN);
  uint64_t workers = settings->workers > 0 ? (uint64_t)settings->workers : cpus > 0 ? (uint64_t)cpus : 1;
  uint64_t share = total / 4 * 3 / workers, floor = 2ull << 30;
  return total == 0 ? 0 : share > floor ? share : floor;
}

/* The kiln-worker executable: the setting, or the one installed next to kilnd. */
static char *default_worker_path(const char *setting) {
  if (setting && *setting) return kiln_strdup(setting);
  char self[4096];
  ssize_t n = readlink("/proc/self/exe", self, sizeof self - 1);
  if (n <= 0) return kiln_strdup("kiln-worker");
  self[n] = '\0';
  char *slash = strrchr(self, '/');
  kiln_buf_t path;
  kiln_buf_init(&path);
  kiln_buf_appendf(&path, "%.*s/kiln-worker", slash ? (int)(slash - self) : 0, self);
  char *out = kiln_buf_take(&path);
  kiln_buf_deinit(&path);
  return out;
}

/* What the loop-thread hooks below share. Loop thread only. */
typedef struct daemon_s {
  kilnd_server_t *server;
  kilnd_jobs_t *jobs;
  kiln_cache_t *cache;
  bool jobs_closed; /* the engine is closing or gone: read it no more */
  bool ready_sent;
  char compiler[256]; /* the workers' compiler (kilnd_jobs_compiler); "" until known */
} daemon_t;

/* On SIGTERM: no new jobs; watchers end UNAVAILABLE; workers stop. Unfinished
 * jobs are in the job store and run again at the next start. */
static void on_drain(void *user) {
  daemon_t *d = user;
  sd_notify(0, "STOPPING=1\nSTATUS=draining: finishing in-flight calls, taking no new work");
  d->jobs_closed = true;
  kilnd_jobs_close(d->jobs, NULL, NULL);
}

/* The first compile worker is ready: with the gRPC server already listening, kilnd
 * is ready (the /readyz condition). Runs on the loop, the engine's lock released. */
static void on_jobs_ready(void *user) {
  daemon_t *d = user;
  if (d->ready_sent || kilnd_server_draining(d->server)) return;
  d->ready_sent = true;
  sd_notifyf(0, "READY=1\nSTATUS=serving on %s", kilnd_server_bind_address(d->server));
}

/* http.c's collect: the loop-thread state of a metrics snapshot. */
static void collect_metrics(void *user, kilnd_metrics_snapshot_t *snap) {
  daemon_t *d = user;
  snap->version = KILN_VERSION;
  if (!d->compiler[0] && d->jobs && !d->jobs_closed) {
    const char *compiler = kilnd_jobs_compiler(d->jobs); /* set once, at the first Hello */
    if (compiler) snprintf(d->compiler, sizeof d->compiler, "%s", compiler);
  }
  snprintf(snap->compiler, sizeof snap->compiler, "%s", d->compiler);
  snap->start_unix_ms = kilnd_server_start_unix_ms(d->server);
  snap->uptime_ms = kiln_time_unix_ms() - snap->start_unix_ms;
  snap->draining = kilnd_server_draining(d->server);
  snap->listening = !snap->draining; /* bound since create; shutdown stops accepting */
  snap->calls = *kilnd_server_stats(d->server);
  if (d->jobs && !d->jobs_closed) {
    /* After close the last counters stay (a restart of the series would read as a reset). */
    snap->has_jobs = true;
    kilnd_jobs_stats(d->jobs, &snap->jobs);
    kilnd_jobs_compile_histograms(d->jobs, &snap->compile);
  } else {
    snap->jobs.workers.ready = 0;
  }
  if (d->cache) {
    snap->has_cache = true;
    kiln_cache_counters(d->cache, &snap->cache); /* a mutex; http.c adds the totals off the loop */
  }
}

/* kilnd --verify: the offline check. */
static int verify_offline(kiln_cache_t *cache, bool dry_run) {
  kiln_cache_verify_report_t report;
  kiln_status_t status = kiln_cache_verify(cache, dry_run, NULL, NULL, &report);
  if (status) {
    fprintf(stderr, "kilnd: cannot verify %s: %s\n", kiln_cache_path(cache),
            kiln_status_message(status));
    kiln_status_free(status);
    return EXIT_START_FAILURE;
  }
  printf("verified %llu blob(s), %llu bytes, in %lld ms: %zu problem(s)%s\n",
         (unsigned long long)report.blobs_checked, (unsigned long long)report.bytes_checked,
         (long long)report.duration_ms, report.n_problems, dry_run ? " (dry run: nothing changed)" : "");
  for (size_t i = 0; i < report.n_problems; i++) {
    const kiln_cache_problem_t *p = &report.problems[i];
    printf("  %-13s %s %s%s\n", problem_names[p->kind <= 5 ? p->kind : 0],
           *p->digest ? p->digest : "-", p->detail, p->repaired ? "" : " (not repaired)");
  }
  int code = report.n_problems ? EXIT_VERIFY_PROBLEMS : 0;
  kiln_cache_verify_report_deinit(&report);
  return code;
}

static kiln_status_t open_cache(const kilnd_settings_t *settings, const kilnd_statedir_t *state,
                                kiln_cache_t **out_cache) {
  kiln_buf_t dir;
  kiln_buf_init(&dir);
  kiln_buf_appendf(&dir, "%s/cache", state->path);
  kiln_cache_options_t options = {
      .capacity_bytes = settings->cache_capacity,
      .compression = strcmp(settings->cache_compression, "off") == 0 ? KILN_BLOB_COMPRESSION_OFF
                                                                     : KILN_BLOB_COMPRESSION_AUTO,
      /* --verify does the reconciling itself, and reports it (or, with --dry-run,
       * only reports it). */
      .skip_repair = settings->verify,
  };
  kiln_cache_repair_t repair;
  kiln_status_t status = kiln_cache_open(dir.data, &options, out_cache, &repair);
  if (!status) {
    kiln_buf_t fields;
    kiln_buf_init(&fields);
    kiln_log_kv_str(&fields, "path", dir.data);
    kiln_buf_appendf(&fields,
                     " dangling_rows=%llu orphan_blobs=%llu stray_files=%llu repair_ms=%lld "
                     "capacity_bytes=%llu",
                     (unsigned long long)repair.dangling_rows, (unsigned long long)repair.orphan_blobs,
                     (unsigned long long)repair.stray_files, (long long)repair.duration_ms,
                     (unsigned long long)settings->cache_capacity);
    kiln_log_fields(KILN_LOG_INFO, "cache_open", &fields);
    kiln_buf_deinit(&fields);
  }
  kiln_buf_deinit(&dir);
  return status;
}

/* How long `kiln-worker --version` may take (it loads libLLVM: well under a second). */
#define WORKER_VERSION_TIMEOUT_MS 10000

/* Runs `worker [--external COMPILER] --version` (stdin /dev/null, stdout and
 * stderr into one pipe) and returns what it printed (heap, caller frees) on exit
 * status 0; otherwise NULL with *out_why (heap) saying what went wrong. */
static char *run_worker_version(const char *worker, const char *external, char **out_why) {
  *out_why = NULL;
  kiln_buf_t why;
  kiln_buf_init(&why);
  int fds[2];
  if (pipe2(fds, O_CLOEXEC) != 0) {
    kiln_buf_appendf(&why, "cannot make a pipe: %s", strerror(errno));
    *out_why = kiln_buf_take(&why);
    return NULL;
  }
  posix_spawn_file_actions_t fa;
  posix_spawn_file_actions_init(&fa);
  posix_spawn_file_actions_addopen(&fa, STDIN_FILENO, "/dev/null", O_RDONLY, 0);
  posix_spawn_file_actions_adddup2(&fa, fds[1], STDOUT_FILENO);
  posix_spawn_file_actions_adddup2(&fa, fds[1], STDERR_FILENO);
  char *argv[5];
  int argc = 0;
  argv[argc++] = (char *)worker;
  if (external) {
    argv[argc++] = "--external";
    argv[argc++] = (char *)external;
  }
  argv[argc++] = "--version";
  argv[argc] = NULL;
  extern char **environ;
  pid_t pid;
  /* main() blocks the loop's signals until the loop runs; the worker must not
   * inherit that. */
  posix_spawnattr_t attr;
  posix_spawnattr_init(&attr);
  sigset_t none;
  sigemptyset(&none);
  posix_spawnattr_setsigmask(&attr, &none);
  posix_spawnattr_setflags(&attr, POSIX_SPAWN_SETSIGMASK);
  int err = posix_spawn(&pid, worker, &fa, &attr, argv, environ);
  posix_spawnattr_destroy(&attr);
  posix_spawn_file_actions_destroy(&fa);
  close(fds[1]);
  if (err) {
    close(fds[0]);
    kiln_buf_appendf(&why, "cannot run %s: %s; install kiln-worker next to kilnd or set worker-path",
                     worker, strerror(err));
    *out_why = kiln_buf_take(&why);
    return NULL;
  }
  kiln_buf_t out;
  kiln_buf_init(&out);
  int64_t deadline = kiln_time_monotonic_ns() + (int64_t)WORKER_VERSION_TIMEOUT_MS * 1000000;
  bool timed_out = false;
  for (;;) {
    int64_t left_ms = (deadline - kiln_time_monotonic_ns()) / 1000000;
    struct pollfd pfd = {.fd = fds[0], .events = POLLIN};
    int ready = left_ms > 0 ? poll(&pfd, 1, (int)left_ms + 1) : 0;
    if (ready < 0 && errno == EINTR) continue;
    if (ready <= 0) {
      timed_out = true;
      kill(pid, SIGKILL);
      break;
    }
    char chunk[4096];
    ssize_t got = read(fds[0], chunk, sizeof chunk);
    if (got < 0 && errno == EINTR) continue;
    if (got <= 0) break;
    if (out.len < 65536) kiln_buf_append(&out, chunk, (size_t)got);
  }
  close(fds[0]);
  int wstatus = 0;
  while (waitpid(pid, &wstatus, 0) < 0 && errno == EINTR) {
  }
  /* The first line, for the reasons below. */
  const char *text = out.data ? out.data : "";
  int first_len = (int)strcspn(text, "\n");
  if (timed_out) {
    kiln_buf_appendf(&why, "%s --version did not finish within %d s", worker,
                     WORKER_VERSION_TIMEOUT_MS / 1000);
  } else if (WIFSIGNALED(wstatus)) {
    kiln_buf_appendf(&why, "%s --version was killed by signal %d (%s)", worker, WTERMSIG(wstatus),
                     strsignal(WTERMSIG(wstatus)));
  } else if (!WIFEXITED(wstatus) || WEXITSTATUS(wstatus) != 0) {
    kiln_buf_appendf(&why, "%s --version exited with status %d%s%.*s", worker,
                     WIFEXITED(wstatus) ? WEXITSTATUS(wstatus) : -1, first_len ? ": " : "", first_len, text);
  }
  if (why.len) {
    kiln_buf_deinit(&out);
    *out_why = kiln_buf_take(&why);
    return NULL;
  }
  kiln_buf_deinit(&why);
  char *result = kiln_strdup(text);
  kiln_buf_deinit(&out);
  return result;
}

/* kilnd --version: kilnd's own line, then the compiler it would use. kilnd links
 * no compiler, so that is whatever the worker it would spawn reports
 * (daemon/worker/main.c: "kiln-worker 0.1.0 (compiler IDENTITY)"). A worker that
 * cannot say makes it "compiler: unavailable (REASON)"; the exit status stays 0. */
static void print_version(const kilnd_settings_t *settings) {
  char *worker = default_worker_path(settings->worker_path);
  const char *external = *settings->external_compiler ? settings->external_compiler : NULL;
  char *why = NULL;
  char *out = run_worker_version(worker, external, &why);
  printf("kilnd %s (HAL module version %u, VM bytecode %u.%u); ", KILN_VERSION, KILN_HAL_MODULE_VERSION,
         KILN_VM_BYTECODE_VERSION_MAJOR, KILN_VM_BYTECODE_VERSION_MINOR);
  if (out) {
    static const char marker[] = "(compiler ";
    char *identity = strstr(out, marker);
    if (identity) {
      identity[strcspn(identity, "\n")] = '\0';
      identity += sizeof marker - 1;
    }
    char *close = identity ? strrchr(identity, ')') : NULL; /* the last: identities nest them */
    if (close && close > identity) {
      printf("compiler: %.*s (%s)\n", (int)(close - identity), identity, worker);
    } else {
      out[strcspn(out, "\n")] = '\0';
      printf("compiler: unavailable (%s --version printed no compiler identity, \"%s\": set worker-path "
             "to kiln-worker)\n", worker, out);
    }
  } else {
    printf("compiler: unavailable (%s)\n", why);
  }
  kiln_free(out);
  kiln_free(why);
  kiln_free(worker);
}

static void print_usage(const kiln_config_table_t *table) {
  printf("usage: kilnd [--listen ADDR] [--state-dir DIR] [--config FILE] [options]\n\n"
         "The kiln compile daemon: serves the kiln.v1.Kiln gRPC service.\n\n"
         "options:\n");
  kiln_config_print_help(table, stdout);
  printf("\nEvery setting can also be a line `name = value` in the config file or a KILND_*\n"
         "environment variable; flags win over the environment, which wins over the file.\n"
         "Exit status: 0 stopped cleanly (or --verify found nothing wrong), 1 could not start\n"
         "or failed, 2 bad settings, 3 --verify found problems (repaired unless --dry-run).\n");
}

/* SIGTERM, SIGINT and SIGHUP, which the loop handles (drain, reload). */
static void stop_signals(sigset_t *out_set) {
  sigemptyset(out_set);
  sigaddset(out_set, SIGTERM);
  sigaddset(out_set, SIGINT);
  sigaddset(out_set, SIGHUP);
}

int main(int argc, char **argv) {
  /* A client that disconnects mid-write must not kill the daemon. */
  signal(SIGPIPE, SIG_IGN);
  /* The loop's signals never reach a gRPC, abseil or libmicrohttpd thread: blocked
   * here, before those libraries start threads (which inherit the mask), and
   * unblocked on this thread when the loop runs (libuv's pool threads, started
   * from it later, may take them too: their waits are libc's). A signal the kernel
   * hands to a thread waiting in a library's own futex may otherwise wait there
   * (under ThreadSanitizer, which defers signals to the next intercepted call, a
   * SIGTERM was never seen). One arriving before the loop runs stays pending
   * until then. Processes kilnd spawns get an empty mask (libuv resets it; the
   * --version probe sets it). */
  sigset_t loop_signals;
  stop_signals(&loop_signals);
  pthread_sigmask(SIG_BLOCK, &loop_signals, NULL);

  const kiln_config_table_t *table = kilnd_settings_table();
  kilnd_settings_t settings;
  memset(&settings, 0, sizeof settings);
  size_t npos = 0;
  const char *positional[1];
  kiln_status_t status = kiln_config_load(table, &settings, "config", argc, argv, positional, 0, &npos);
  if (status) {
    fprintf(stderr, "kilnd: %s\n", kiln_status_message(status));
    kiln_status_free(status);
    kiln_config_deinit(table, &settings);
    return EXIT_USAGE;
  }
  if (settings.help || settings.version || settings.print_config) {
    if (settings.help) {
      print_usage(table);
    } else if (settings.version) {
      print_version(&settings);
    } else {
      kiln_buf_t dump;
      kiln_buf_init(&dump);
      kiln_config_dump(table, &settings, &dump);
      fputs(dump.data, stdout);
      kiln_buf_deinit(&dump);
    }
    kiln_config_deinit(table, &settings);
    return 0;
  }

  kiln_log_level_t level = KILN_LOG_INFO;
  kiln_log_level_parse(settings.log_level, &level); /* validated by the table's choices */
  kiln_log_configure(level, STDERR_FILENO);

  if (geteuid() == 0 && !settings.allow_root) {
    fprintf(stderr,
            "kilnd: refusing to run as root (uid 0): kilnd needs no privilege, and a compile "
            "daemon that parses untrusted input should not have it. Run it as an unprivileged "
            "user (the systemd unit's `kiln`, the container image's uid 10001). Where root is "
            "unavoidable (a container whose root maps to an unprivileged host uid), pass "
            "--allow-root or set KILND_ALLOW_ROOT=1.\n");
    kiln_config_deinit(table, &settings);
    return EXIT_USAGE;
  }
  kilnd_tls_t *tls = NULL;
  kilnd_tokens_t *tokens = NULL;
  status = kilnd_tls_create(settings.tls_cert, settings.tls_key, settings.tls_client_ca, &tls);
  if (!status && *settings.token_file) status = kilnd_tokens_load(settings.token_file, &tokens);
  if (status) {
    fprintf(stderr, "kilnd: %s\n", kiln_status_message(status));
    kiln_status_free(status);
    kilnd_tls_destroy(tls);
    kiln_config_deinit(table, &settings);
    return EXIT_USAGE;
  }

  int exit_code = 0;
  kilnd_statedir_t state = {NULL, -1};
  kilnd_server_t *server = NULL;
  kiln_cache_t *cache = NULL;
  status = kilnd_statedir_open(settings.state_dir, &state);
  if (!status) kilnd_client_text_init(state.path); /* hidden from clients' messages */
  if (!status) status = open_cache(&settings, &state, &cache);
  if (!status && settings.verify) {
    pthread_sigmask(SIG_UNBLOCK, &loop_signals, NULL); /* no loop: Ctrl-C stops the verify */
    exit_code = verify_offline(cache, settings.dry_run);
    kilnd_tokens_destroy(tokens);
    kilnd_tls_destroy(tls);
    kiln_cache_close(cache);
    kilnd_statedir_close(&state);
    kiln_config_deinit(table, &settings);
    return exit_code;
  }
  if (!status) {
    status = kilnd_server_create(&settings, cache, tls, tokens, &server);
  } else {
    kilnd_tokens_destroy(tokens);
  }
  kilnd_jobs_t *jobs = NULL;
  kilnd_http_t *http = NULL;
  daemon_t kd = {.server = server, .cache = cache};
  kiln_jobstore_t *store = NULL;
  char *worker_path = NULL, *crash_dir = NULL;
  if (!status) {
    kiln_buf_t db;
    kiln_buf_init(&db);
    kiln_buf_appendf(&db, "%s/jobs.db", state.path);
    status = kiln_jobstore_open(db.data, &store);
    kiln_buf_deinit(&db);
  }
  if (!status) {
    worker_path = default_worker_path(settings.worker_path);
    kiln_buf_t crashes;
    kiln_buf_init(&crashes);
    kiln_buf_appendf(&crashes, "%s/crashes", state.path);
    crash_dir = kiln_buf_take(&crashes);
    kiln_buf_deinit(&crashes);
    kilnd_workers_options_t wo = {
        .count = (size_t)settings.workers,
        .worker_path = worker_path,
        .task_timeout_ms = settings.worker_timeout_ms,
        .memory_limit_bytes = worker_memory_limit(&settings),
        .crash_keep = (uint32_t)settings.crash_keep,
        .crash_dir = crash_dir,
        .external_compiler = *settings.external_compiler ? settings.external_compiler : NULL,
        .external_args = *settings.external_compiler_args ? settings.external_compiler_args : NULL,
        .test_hooks = settings.test_hooks,
    };
    kilnd_jobs_options_t jo = {
        .queue_capacity = (size_t)settings.queue_capacity,
        .retention_ms = settings.job_retention_ms,
        .client_max_jobs = (size_t)settings.client_max_jobs,
        .client_queue_share = (unsigned)settings.client_queue_share,
        .client_worker_share = (unsigned)settings.client_worker_share,
        .hal_version = kiln_compiler_hal_module_version(),
        .bytecode_version = kiln_compiler_vm_bytecode_version(),
        .embed_source = settings.embed_source,
        .store = store,
    };
    status = kilnd_jobs_create(kilnd_server_loop(server), cache, &jo, &wo, &jobs);
    if (!status) {
      kd.jobs = jobs;
      kilnd_server_set_jobs(server, jobs);
      kilnd_server_on_drain(server, on_drain, &kd);
      sd_notify(0, "STATUS=starting compile workers");
      kilnd_jobs_on_ready(jobs, on_jobs_ready, &kd);
    }
  }
  if (!status && strcmp(settings.metrics_listen, "off") != 0) {
    status = kilnd_http_create(kilnd_server_loop(server), settings.metrics_listen, cache, collect_metrics,
                               &kd, &http);
    if (!status) status = kilnd_statedir_publish_metrics_address(&state, kilnd_http_address(http));
  }
  if (!status) status = kilnd_statedir_publish_address(&state, kilnd_server_address(server));
  if (status) {
    fprintf(stderr, "kilnd: cannot start: %s\n", kiln_status_message(status));
    exit_code = EXIT_START_FAILURE;
  } else {
    kiln_buf_t fields;
    kiln_buf_init(&fields);
    kiln_log_kv_str(&fields, "addr", kilnd_server_address(server));
    kiln_log_kv_str(&fields, "bind", kilnd_server_bind_address(server));
    kiln_log_kv_str(&fields, "state_dir", state.path);
    kiln_buf_appendf(&fields, " pid=%ld version=%s max_message_bytes=%llu", (long)getpid(),
                     KILN_VERSION, (unsigned long long)settings.max_message_bytes);
    if (http) kiln_log_kv_str(&fields, "metrics_addr", kilnd_http_address(http));
    kiln_log_fields(KILN_LOG_INFO, "listening", &fields);
    kiln_buf_deinit(&fields);
    pthread_sigmask(SIG_UNBLOCK, &loop_signals, NULL);
    status = kilnd_server_run(server);
    if (status) {
      kiln_log_status(KILN_LOG_ERROR, "run_failed", status, NULL);
      exit_code = EXIT_START_FAILURE;
    }
  }
  kiln_status_free(status);
  if (jobs && !kd.jobs_closed) {
    /* Start-up failed after the engine existed: close it on the loop. */
    kilnd_jobs_close(jobs, NULL, NULL);
  }
  kilnd_http_destroy(http); /* before the server's last loop run, which frees it */
  kilnd_server_destroy(server);
  kilnd_jobs_destroy(jobs); /* after the loop's last run: no call can reach it now */
  kilnd_tls_destroy(tls); /* after the server: gRPC's handshakes fetch from it */
  kiln_jobstore_close(store);
  kiln_free(worker_path);
  kiln_free(crash_dir);
  kiln_cache_close(cache);
  kilnd_statedir_close(&state);
  kilnd_client_text_init(NULL);
  if (exit_code == 0) kiln_log(KILN_LOG_INFO, "stopped", NULL);
  kiln_config_deinit(table, &settings);
  return exit_code;
}
