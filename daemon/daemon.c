/* kilnd as a whole (daemon.h): the loop and its handles, signals, reloads, the
 * cache GC timer, and the wiring of the parts in their start-up order.
 *
 * Under systemd (NOTIFY_SOCKET set) the daemon sends READY=1 once the gRPC server
 * listens and a compile worker is ready (the /readyz condition), STATUS= lines,
 * and STOPPING=1 when the drain starts; without NOTIFY_SOCKET sd_notify does
 * nothing.
 *
 * SIGHUP queues one reload on the pool (the TLS files, the token file); its
 * completion swaps the token set into the server on the loop, so calls read the
 * set without a lock. A failed reload keeps the old set and files and logs why
 * (event=reload_failed); a SIGHUP during a reload runs one more after it.
 */
#include "daemon/daemon.h"

#include <inttypes.h>
#include <openssl/crypto.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <systemd/sd-daemon.h>
#include <unistd.h>
#include <uv.h>

#include "base/alloc.h"
#include "base/buf.h"
#include "base/log.h"
#include "base/time.h"
#include "cache/jobstore.h"
#include "compiler/identity.h" /* the ABI version macros only: kilnd links no compiler */
#include "daemon/auth.h"
#include "daemon/client_text.h"
#include "daemon/http.h"
#include "daemon/jobs.h"
#include "daemon/server.h"
#include "daemon/signals.h"
#include "daemon/statedir.h"
#include "daemon/tls.h"

struct kilnd_daemon_s {
  const kilnd_settings_t *settings;
  uv_loop_t loop;
  bool loop_initialized;
  uv_signal_t sigterm, sigint, sighup;
  kilnd_signal_thread_t *signals; /* from the loop's first run to the end of destroy */
  bool signals_tried;             /* started, or failed to: not tried again */
  uv_timer_t gc_timer;
  bool handles_closed;

  kilnd_statedir_t state;
  kiln_cache_t *cache;
  kiln_jobstore_t *store;
  kilnd_server_t *server;
  kilnd_jobs_t *jobs;
  kilnd_http_t *http;
  char *worker_path;
  char *crash_dir;
  bool jobs_closed; /* the engine is closing or gone: read it no more */
  bool ran;         /* kilnd_daemon_run started the server */
  bool ready_sent;
  char compiler[256]; /* the workers' compiler (kilnd_jobs_compiler); "" until known */

  /* Reload (SIGHUP). */
  kilnd_tls_t *tls; /* owned; NULL: plaintext */
  bool has_tokens;  /* token-file is set: reload re-reads it */
  uv_work_t reload_work;
  bool reload_running;
  bool reload_again; /* a SIGHUP came while a reload ran */
  kiln_status_t reload_tls_status;
  kiln_status_t reload_tokens_status;
  kilnd_tokens_t *reload_tokens;

  /* Background eviction. */
  uv_work_t gc_work;
  bool gc_running;
  kiln_cache_gc_report_t gc_report;
  kiln_status_t gc_status;
};

/* ---- parts ------------------------------------------------------------------------ */

/* The memory this process may use: the machine's, or its cgroup's when lower. */
static uint64_t memory_available(void) {
  long pages = sysconf(_SC_PHYS_PAGES), page = sysconf(_SC_PAGE_SIZE);
  uint64_t total = pages > 0 && page > 0 ? (uint64_t)pages * (uint64_t)page : 0;
  static const char *const limits[] = {"/sys/fs/cgroup/memory.max",
                                       "/sys/fs/cgroup/memory/memory.limit_in_bytes"};
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

char *kilnd_daemon_worker_path(const char *setting) {
  if (setting && *setting) return kiln_strdup(setting);
  char self[4096];
  ssize_t n = readlink("/proc/self/exe", self, sizeof self - 1);
  if (n <= 0) return kiln_strdup("kiln-worker");
  self[n] = '\0';
  char *slash = strrchr(self, '/');
  kiln_buf_t path;
  kiln_buf_init(&path);
  kiln_buf_appendf(&path, "%.*s/kiln-worker", slash ? (int)(slash - self) : 0, self);
  return kiln_buf_take(&path);
}

/* STATE/cache, repaired on open unless `skip_repair` (--verify does the
 * reconciling itself, and reports it). */
static KILN_MUST_USE kiln_status_t open_cache(const kilnd_settings_t *settings, const kilnd_statedir_t *state,
                                              bool skip_repair, kiln_cache_t **out_cache) {
  kiln_buf_t dir;
  kiln_buf_init(&dir);
  kiln_buf_appendf(&dir, "%s/cache", state->path);
  kiln_cache_options_t options = {
      .capacity_bytes = settings->cache_capacity,
      .compression = strcmp(settings->cache_compression, "off") == 0 ? KILN_BLOB_COMPRESSION_OFF
                                                                     : KILN_BLOB_COMPRESSION_AUTO,
      .skip_repair = skip_repair,
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

/* ---- hooks of the parts (loop thread) ------------------------------------------------ */

/* The drain started (first SIGTERM/SIGINT): no new jobs; watchers end
 * UNAVAILABLE; workers stop; no more GC passes. */
static void on_drain(void *user) {
  kilnd_daemon_t *d = user;
  sd_notify(0, "STOPPING=1\nSTATUS=draining: finishing in-flight calls, taking no new work");
  uv_timer_stop(&d->gc_timer);
  if (d->jobs_closed) return; /* start-up failed and destroy closed it already */
  d->jobs_closed = true;
  kilnd_jobs_close(d->jobs, NULL, NULL);
}

static void close_handles(kilnd_daemon_t *d) {
  if (d->handles_closed) return;
  d->handles_closed = true;
  uv_close((uv_handle_t *)&d->sigterm, NULL);
  uv_close((uv_handle_t *)&d->sigint, NULL);
  uv_close((uv_handle_t *)&d->sighup, NULL);
  uv_close((uv_handle_t *)&d->gc_timer, NULL);
}

/* The server has drained and closed: with the daemon's handles closed too, the
 * loop ends (the engine closed its own at the drain). */
static void on_server_stopped(void *user) { close_handles(user); }

/* The first compile worker is ready: with the gRPC server already listening, kilnd
 * is ready (the /readyz condition). Runs on the loop, the engine's lock released. */
static void on_jobs_ready(void *user) {
  kilnd_daemon_t *d = user;
  if (d->ready_sent || kilnd_server_draining(d->server)) return;
  d->ready_sent = true;
  sd_notifyf(0, "READY=1\nSTATUS=serving on %s", kilnd_server_bind_address(d->server));
}

/* http.c's collect: the loop-thread state of a metrics snapshot. */
static void collect_metrics(void *user, kilnd_metrics_snapshot_t *snap) {
  kilnd_daemon_t *d = user;
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

/* ---- signals ---------------------------------------------------------------------- */

static void on_stop_signal(uv_signal_t *handle, int signum) {
  kilnd_daemon_t *d = handle->data;
  kiln_log(KILN_LOG_INFO, "signal", "signal=%s", signum == SIGTERM ? "SIGTERM" : "SIGINT");
  kilnd_server_request_stop(d->server);
}

/* ---- reload on SIGHUP ----------------------------------------------------------------- */

static void on_reload_work(uv_work_t *work) {
  kilnd_daemon_t *d = work->data;
  if (d->tls) d->reload_tls_status = kilnd_tls_reload(d->tls);
  if (d->has_tokens) d->reload_tokens_status = kilnd_tokens_load(d->settings->token_file, &d->reload_tokens);
  /* OpenSSL keeps per-thread state (the error queue a refused PEM filled); libuv's
   * pool threads live until exit and would keep it past OpenSSL's cleanup. */
  OPENSSL_thread_stop();
}

static void start_reload(kilnd_daemon_t *d);

static void on_reload_done(uv_work_t *work, int status) {
  (void)status;
  kilnd_daemon_t *d = work->data;
  d->reload_running = false;
  if (d->tls) {
    if (d->reload_tls_status) {
      kiln_log_status(KILN_LOG_ERROR, "reload_failed", d->reload_tls_status,
                      "what=tls kept=previous_certificate");
      kiln_status_free(d->reload_tls_status);
      d->reload_tls_status = NULL;
    } else {
      char describe[512];
      kilnd_tls_describe(d->tls, describe, sizeof describe);
      kiln_buf_t fields;
      kiln_buf_init(&fields);
      kiln_buf_appendf(&fields, "what=tls");
      kiln_log_kv_str(&fields, "cert", describe);
      kiln_log_fields(KILN_LOG_INFO, "reload", &fields);
      kiln_buf_deinit(&fields);
    }
  }
  if (d->has_tokens) {
    if (d->reload_tokens_status) {
      kiln_log_status(KILN_LOG_ERROR, "reload_failed", d->reload_tokens_status,
                      "what=tokens kept=previous_tokens");
      kiln_status_free(d->reload_tokens_status);
      d->reload_tokens_status = NULL;
    } else {
      size_t count = kilnd_tokens_count(d->reload_tokens);
      kilnd_server_set_tokens(d->server, d->reload_tokens);
      d->reload_tokens = NULL;
      kiln_log(KILN_LOG_INFO, "reload", "what=tokens tokens=%zu", count);
    }
  }
  if (d->reload_again && !d->handles_closed) {
    d->reload_again = false;
    start_reload(d);
  }
}

static void start_reload(kilnd_daemon_t *d) {
  if (d->reload_running) {
    d->reload_again = true; /* the files may have changed after it read them */
    return;
  }
  if (!d->tls && !d->has_tokens) {
    kiln_log(KILN_LOG_INFO, "reload", "what=nothing (no tls-cert, no token-file)");
    return;
  }
  d->reload_running = true;
  d->reload_work.data = d;
  if (uv_queue_work(&d->loop, &d->reload_work, on_reload_work, on_reload_done) != 0) {
    d->reload_running = false;
    kiln_log(KILN_LOG_ERROR, "reload_failed", "msg=\"cannot queue the reload\"");
  }
}

static void on_sighup(uv_signal_t *handle, int signum) {
  (void)signum;
  kiln_log(KILN_LOG_INFO, "signal", "signal=SIGHUP");
  start_reload(handle->data);
}

/* ---- background eviction ---------------------------------------------------------- */

static void on_gc_work(uv_work_t *work) {
  kilnd_daemon_t *d = work->data;
  d->gc_status = kiln_cache_gc(d->cache, 0, &d->gc_report);
}

static void on_gc_done(uv_work_t *work, int status) {
  kilnd_daemon_t *d = work->data;
  d->gc_running = false;
  if (d->gc_status) {
    kiln_log_status(KILN_LOG_ERROR, "cache_gc_failed", d->gc_status, NULL);
    kiln_status_free(d->gc_status);
    d->gc_status = NULL;
  } else if (status == 0 && (d->gc_report.artifacts_evicted || d->gc_report.sources_evicted)) {
    kiln_log(KILN_LOG_INFO, "cache_gc",
             "artifacts_evicted=%" PRIu64 " sources_evicted=%" PRIu64 " bytes_freed=%" PRIu64
             " bytes_stored=%" PRIu64,
             d->gc_report.artifacts_evicted, d->gc_report.sources_evicted, d->gc_report.bytes_freed,
             d->gc_report.bytes_stored);
  }
}

static void on_gc_timer(uv_timer_t *timer) {
  kilnd_daemon_t *d = timer->data;
  if (d->gc_running || kilnd_server_draining(d->server)) return; /* one pass at a time */
  d->gc_running = true;
  d->gc_work.data = d;
  if (uv_queue_work(&d->loop, &d->gc_work, on_gc_work, on_gc_done) != 0) d->gc_running = false;
}

/* ---- the daemon -------------------------------------------------------------------- */

/* The job store, the worker pool's and engine's options, and the engine. */
static KILN_MUST_USE kiln_status_t start_jobs(kilnd_daemon_t *d) {
  const kilnd_settings_t *settings = d->settings;
  kiln_buf_t path;
  kiln_buf_init(&path);
  kiln_buf_appendf(&path, "%s/jobs.db", d->state.path);
  kiln_status_t status = kiln_jobstore_open(path.data, &d->store);
  kiln_buf_deinit(&path);
  if (status) return status;
  d->worker_path = kilnd_daemon_worker_path(settings->worker_path);
  kiln_buf_init(&path);
  kiln_buf_appendf(&path, "%s/crashes", d->state.path);
  d->crash_dir = kiln_buf_take(&path);
  kilnd_workers_options_t wo = {
      .count = (size_t)settings->workers,
      .worker_path = d->worker_path,
      .task_timeout_ms = settings->worker_timeout_ms,
      .memory_limit_bytes = worker_memory_limit(settings),
      .crash_keep = (uint32_t)settings->crash_keep,
      .crash_dir = d->crash_dir,
      .external_compiler = *settings->external_compiler ? settings->external_compiler : NULL,
      .external_args = *settings->external_compiler_args ? settings->external_compiler_args : NULL,
      .test_hooks = settings->test_hooks,
  };
  kilnd_jobs_options_t jo = {
      .queue_capacity = (size_t)settings->queue_capacity,
      .retention_ms = settings->job_retention_ms,
      .client_max_jobs = (size_t)settings->client_max_jobs,
      .client_queue_share = (unsigned)settings->client_queue_share,
      .client_worker_share = (unsigned)settings->client_worker_share,
      .hal_version = kiln_compiler_hal_module_version(),
      .bytecode_version = kiln_compiler_vm_bytecode_version(),
      .embed_source = settings->embed_source,
      .store = d->store,
  };
  KILN_RETURN_IF_ERROR(kilnd_jobs_create(&d->loop, d->cache, &jo, &wo, &d->jobs));
  kilnd_server_set_jobs(d->server, d->jobs);
  kilnd_server_on_drain(d->server, on_drain, d);
  sd_notify(0, "STATUS=starting compile workers");
  kilnd_jobs_on_ready(d->jobs, on_jobs_ready, d);
  return NULL;
}

static void log_listening(const kilnd_daemon_t *d) {
  kiln_buf_t fields;
  kiln_buf_init(&fields);
  kiln_log_kv_str(&fields, "addr", kilnd_server_address(d->server));
  kiln_log_kv_str(&fields, "bind", kilnd_server_bind_address(d->server));
  kiln_log_kv_str(&fields, "state_dir", d->state.path);
  kiln_buf_appendf(&fields, " pid=%ld version=%s max_message_bytes=%llu", (long)getpid(), KILN_VERSION,
                   (unsigned long long)d->settings->max_message_bytes);
  if (d->http) kiln_log_kv_str(&fields, "metrics_addr", kilnd_http_address(d->http));
  kiln_log_fields(KILN_LOG_INFO, "listening", &fields);
  kiln_buf_deinit(&fields);
}

kiln_status_t kilnd_daemon_create(const kilnd_settings_t *settings, kilnd_tls_t *tls, kilnd_tokens_t *tokens,
                                  kilnd_daemon_t **out_daemon) {
  *out_daemon = NULL;
  kilnd_daemon_t *d = kiln_calloc(1, sizeof *d);
  d->settings = settings;
  d->tls = tls;
  d->has_tokens = tokens != NULL;
  d->state = (kilnd_statedir_t){NULL, -1};
  uv_loop_init(&d->loop);
  d->loop_initialized = true;
  uv_signal_init(&d->loop, &d->sigterm);
  uv_signal_init(&d->loop, &d->sigint);
  uv_signal_init(&d->loop, &d->sighup);
  uv_timer_init(&d->loop, &d->gc_timer);
  d->sigterm.data = d->sigint.data = d->sighup.data = d->gc_timer.data = d;

  kiln_status_t status = kilnd_statedir_open(settings->state_dir, &d->state);
  if (!status) kilnd_client_text_init(d->state.path); /* hidden from clients' messages */
  if (!status) status = open_cache(settings, &d->state, false, &d->cache);
  if (!status) {
    status = kilnd_server_create(&d->loop, settings, d->cache, tls, tokens, &d->server);
    if (!status) kilnd_server_on_stopped(d->server, on_server_stopped, d);
  } else {
    kilnd_tokens_destroy(tokens);
  }
  if (!status) status = start_jobs(d);
  if (!status && strcmp(settings->metrics_listen, "off") != 0) {
    status = kilnd_http_create(&d->loop, settings->metrics_listen, d->cache, collect_metrics, d, &d->http);
    if (!status) status = kilnd_statedir_publish_metrics_address(&d->state, kilnd_http_address(d->http));
  }
  if (!status) status = kilnd_statedir_publish_address(&d->state, kilnd_server_address(d->server));
  if (status) {
    kilnd_daemon_destroy(d);
    return status;
  }
  uv_signal_start(&d->sigterm, on_stop_signal, SIGTERM);
  uv_signal_start(&d->sigint, on_stop_signal, SIGINT);
  uv_signal_start(&d->sighup, on_sighup, SIGHUP);
  if (settings->cache_capacity && settings->gc_interval_ms > 0) {
    uint64_t every = (uint64_t)settings->gc_interval_ms;
    uv_timer_start(&d->gc_timer, on_gc_timer, every, every);
  }
  log_listening(d);
  *out_daemon = d;
  return NULL;
}

/* Runs the loop on this thread, with the signal thread taking the loop's
 * signals (signals.h), which main.c blocked before any library started a thread.
 * Also on the paths where start-up failed: a pool closing there waits for its
 * workers' SIGCHLD like any other. Without a signal thread, this thread takes
 * them, as kilnd did before it had one. */
static void run_loop(kilnd_daemon_t *d) {
  if (!d->signals_tried) {
    d->signals_tried = true;
    kiln_status_t st = kilnd_signal_thread_start(&d->signals);
    if (st) {
      kiln_log_status(KILN_LOG_WARN, "signal_thread_failed", st, NULL);
      kiln_status_free(st);
      sigset_t loop_signals;
      kilnd_loop_signals(&loop_signals);
      pthread_sigmask(SIG_UNBLOCK, &loop_signals, NULL);
    }
  }
  uv_run(&d->loop, UV_RUN_DEFAULT);
}

kiln_status_t kilnd_daemon_run(kilnd_daemon_t *d) {
  KILN_RETURN_IF_ERROR(kilnd_server_start(d->server));
  d->ran = true;
  run_loop(d);
  return NULL;
}

void kilnd_daemon_destroy(kilnd_daemon_t *d) {
  if (!d) return;
  if (d->jobs && !d->jobs_closed) {
    /* Start-up failed after the engine existed: close it on the loop. */
    d->jobs_closed = true;
    kilnd_jobs_close(d->jobs, NULL, NULL);
  }
  if (d->server && !d->ran) {
    /* Start-up failed after the server began listening: stop it the normal way,
     * on the loop, so a call it accepted meanwhile can finish (an offloaded
     * handler replies from the loop). If the queue thread cannot start,
     * kilnd_server_destroy drains by pumping the queue itself. */
    kiln_status_t started = kilnd_server_start(d->server);
    if (!started) {
      d->ran = true;
      kilnd_server_request_stop(d->server);
      run_loop(d);
    }
    kiln_status_free(started);
  }
  kilnd_http_destroy(d->http);     /* freed by the loop's last run, below */
  kilnd_server_destroy(d->server); /* likewise */
  if (d->loop_initialized) {
    close_handles(d);
    run_loop(d);
    uv_loop_close(&d->loop);
  }
  kilnd_signal_thread_stop(d->signals); /* no loop to wake any more */
  kilnd_jobs_destroy(d->jobs);          /* after the loop's last run: no call can reach it now */
  kilnd_tls_destroy(d->tls);            /* after the server: gRPC's handshakes fetch from it */
  kilnd_tokens_destroy(d->reload_tokens);
  kiln_jobstore_close(d->store);
  kiln_free(d->worker_path);
  kiln_free(d->crash_dir);
  kiln_cache_close(d->cache);
  kilnd_statedir_close(&d->state);
  kilnd_client_text_init(NULL);
  kiln_free(d);
}

kiln_status_t kilnd_daemon_verify(const kilnd_settings_t *settings, bool dry_run,
                                  kiln_cache_verify_report_t *out_report) {
  kilnd_statedir_t state = {NULL, -1};
  kiln_cache_t *cache = NULL;
  kiln_status_t status = kilnd_statedir_open(settings->state_dir, &state);
  if (!status) status = open_cache(settings, &state, true, &cache);
  if (!status) {
    status = kiln_cache_verify(cache, dry_run, NULL, NULL, out_report);
    if (status) status = kiln_status_annotate(status, "cannot verify %s", kiln_cache_path(cache));
  }
  kiln_cache_close(cache);
  kilnd_statedir_close(&state);
  return status;
}
