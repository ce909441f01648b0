/* kilnd's settings: one struct, described once by the config table in settings.c,
 * which serves the config file, KILND_* variables and command-line flags alike.
 * Loop thread only (read-only after start-up, so any thread may read it then). */
#ifndef KILN_DAEMON_SETTINGS_H
#define KILN_DAEMON_SETTINGS_H

#include <stdbool.h>
#include <stdint.h>

#include "base/config.h"

#define KILN_DEFAULT_LISTEN         "127.0.0.1:7477"
#define KILN_DEFAULT_METRICS_LISTEN "127.0.0.1:7478"

typedef struct kilnd_settings_s {
  char *config;                      /* --config FILE (read before everything but defaults) */
  char *listen;                      /* HOST:PORT, [V6]:PORT or unix:PATH */
  char *metrics_listen;              /* HTTP /metrics, /healthz, /readyz: HOST:PORT, [V6]:PORT or "off" */
  char *state_dir;                   /* cache, index, lock and address files */
  char *log_level;                   /* debug|info|warn|error */
  uint64_t max_message_bytes;        /* largest gRPC message received or sent */
  int64_t drain_timeout_ms;          /* grace for in-flight calls on SIGTERM */
  uint64_t cache_capacity;           /* on-disk size the cache is kept under; 0: unlimited */
  char *cache_compression;           /* auto|off */
  int64_t gc_interval_ms;            /* how often eviction runs; 0: never on its own */
  int64_t workers;                   /* compile worker processes; 0: the online CPUs */
  int64_t worker_timeout_ms;         /* a compile task running longer is killed; 0: none */
  uint64_t worker_memory_limit;      /* address-space limit of each worker; 0: none */
  int64_t crash_keep;                /* crash files kept in STATE/crashes, newest first */
  char *worker_path;                 /* the kiln-worker executable; "": next to kilnd */
  char *external_compiler;           /* an iree-compile-compatible executable; "": built-in compiler */
  char *external_compiler_args;      /* its argument template (see README) */
  int64_t queue_capacity;            /* queued compile tasks per priority class */
  int64_t job_retention_ms;          /* finished jobs stay watchable this long */
  uint64_t client_max_request_bytes; /* largest request (and PutSource upload) per client; 0: none */
  int64_t client_max_jobs;           /* unfinished jobs per client; 0: none */
  int64_t client_max_downloads;      /* GetArtifact calls open at once per client */
  int64_t download_stall_timeout_ms; /* a download whose client reads nothing this long ends; 0: never */
  int64_t client_queue_share;        /* percent of a class's queue-capacity one client may hold; 0: none */
  int64_t client_worker_share;       /* percent of the workers one client's tasks may run on; 0: none */
  bool embed_source;                 /* artifacts carry their source (zstd) */
  char *tls_cert;                    /* PEM certificate chain of the gRPC port; "": plaintext */
  char *tls_key;                     /* its PEM private key */
  char *tls_client_ca;               /* PEM CA that signs client certificates: mutual TLS; "": none */
  char *token_file;                  /* NAME ROLE TOKEN lines (auth.h); "": no bearer tokens */
  bool allow_root;                   /* start even as uid 0 */
  bool test_hooks;                   /* tests only: honour the workers' crash/hang markers */
  bool verify;                       /* verify the cache offline and exit */
  bool dry_run;                      /* with verify: report, change nothing */
  bool print_config;
  bool help;
  bool version;
} kilnd_settings_t;

/* The table; borrowed, static storage. Thread-safe. */
const kiln_config_table_t *kilnd_settings_table(void);

#endif /* KILN_DAEMON_SETTINGS_H */
