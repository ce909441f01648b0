/* kilnd: the kiln compile daemon. main() turns settings into a daemon
 * (daemon.c: the loop, its parts and their start-up order) and the daemon's end
 * into an exit code.
 *
 * Settings: defaults < config file < KILND_* environment < flags (settings.c).
 * `kilnd --verify` checks the cache offline instead of serving.
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
#include <stdbool.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "base/alloc.h"
#include "base/buf.h"
#include "base/log.h"
#include "base/time.h"
#include "cache/cache.h"
#include "compiler/identity.h" /* the ABI version macros only: kilnd links no compiler */
#include "daemon/auth.h"
#include "daemon/daemon.h"
#include "daemon/settings.h"
#include "daemon/signals.h"
#include "daemon/tls.h"

#define EXIT_START_FAILURE   1
#define EXIT_USAGE           2
#define EXIT_VERIFY_PROBLEMS 3

static const char *const problem_names[] = {"?",           "corrupt blob", "missing blob",
                                            "orphan blob", "stray file",   "damaged index"};

/* kilnd --verify: the offline check and its report. Exit status for main. */
static int verify_offline(const kilnd_settings_t *settings) {
  kiln_cache_verify_report_t report;
  kiln_status_t status = kilnd_daemon_verify(settings, settings->dry_run, &report);
  if (status) {
    fprintf(stderr, "kilnd: --verify: %s\n", kiln_status_message(status));
    kiln_status_free(status);
    return EXIT_START_FAILURE;
  }
  printf("verified %llu blob(s), %llu bytes, in %lld ms: %zu problem(s)%s\n",
         (unsigned long long)report.blobs_checked, (unsigned long long)report.bytes_checked,
         (long long)report.duration_ms, report.n_problems,
         settings->dry_run ? " (dry run: nothing changed)" : "");
  for (size_t i = 0; i < report.n_problems; i++) {
    const kiln_cache_problem_t *p = &report.problems[i];
    printf("  %-13s %s %s%s\n", problem_names[p->kind <= 5 ? p->kind : 0], *p->digest ? p->digest : "-",
           p->detail, p->repaired ? "" : " (not repaired)");
  }
  int code = report.n_problems ? EXIT_VERIFY_PROBLEMS : 0;
  kiln_cache_verify_report_deinit(&report);
  return code;
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
  /* main() blocks the loop's signals (they are the signal thread's); the worker
   * must not inherit that. */
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
    kiln_buf_appendf(&why, "cannot run %s: %s; install kiln-worker next to kilnd or set worker-path", worker,
                     strerror(err));
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
  char *worker = kilnd_daemon_worker_path(settings->worker_path);
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
      printf(
          "compiler: unavailable (%s --version printed no compiler identity, \"%s\": set worker-path "
          "to kiln-worker)\n",
          worker, out);
    }
  } else {
    printf("compiler: unavailable (%s)\n", why);
  }
  kiln_free(out);
  kiln_free(why);
  kiln_free(worker);
}

static void print_usage(const kiln_config_table_t *table) {
  printf(
      "usage: kilnd [--listen ADDR] [--state-dir DIR] [--config FILE] [options]\n\n"
      "The kiln compile daemon: serves the kiln.v1.Kiln gRPC service.\n\n"
      "options:\n");
  kiln_config_print_help(table, stdout);
  printf(
      "\nEvery setting can also be a line `name = value` in the config file or a KILND_*\n"
      "environment variable; flags win over the environment, which wins over the file.\n"
      "Exit status: 0 stopped cleanly (or --verify found nothing wrong), 1 could not start\n"
      "or failed, 2 bad settings, 3 --verify found problems (repaired unless --dry-run).\n");
}

int main(int argc, char **argv) {
  kiln_alloc_tune_for_transfers(); /* downloads reuse their chunk buffers' pages */
  /* A client that disconnects mid-write must not kill the daemon. */
  signal(SIGPIPE, SIG_IGN);
  /* The loop's signals (kilnd_loop_signals: SIGTERM, SIGINT, SIGHUP and the
   * SIGCHLD of a worker's exit) are blocked here, before any library starts a
   * thread, and so in every thread (each inherits its starter's mask) but the
   * signal thread that daemon.c starts when the loop first runs (signals.h).
   * Processes kilnd spawns get an empty mask (libuv resets it; the --version
   * probe sets it). */
  sigset_t loop_signals;
  kilnd_loop_signals(&loop_signals);
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

  if (settings.verify) {
    kilnd_tokens_destroy(tokens);
    kilnd_tls_destroy(tls);
    pthread_sigmask(SIG_UNBLOCK, &loop_signals, NULL); /* no loop: Ctrl-C stops the verify */
    int code = verify_offline(&settings);
    kiln_config_deinit(table, &settings);
    return code;
  }

  int exit_code = 0;
  kilnd_daemon_t *daemon = NULL;
  status = kilnd_daemon_create(&settings, tls, tokens, &daemon);
  if (status) {
    fprintf(stderr, "kilnd: cannot start: %s\n", kiln_status_message(status));
    exit_code = EXIT_START_FAILURE;
  } else {
    status = kilnd_daemon_run(daemon);
    if (status) {
      kiln_log_status(KILN_LOG_ERROR, "run_failed", status, NULL);
      exit_code = EXIT_START_FAILURE;
    }
  }
  kiln_status_free(status);
  kilnd_daemon_destroy(daemon);
  if (exit_code == 0) kiln_log(KILN_LOG_INFO, "stopped", NULL);
  kiln_config_deinit(table, &settings);
  return exit_code;
}
