/* kilnd's config table: the single description of every daemon setting. */
#include "daemon/settings.h"

#include <stddef.h>

static const char *const log_levels[] = {"debug", "info", "warn", "error", NULL};
static const char *const compressions[] = {"auto", "off", NULL};

#define OPT(name, s, type, field, def, meta, help) \
  { name, s, type, offsetof(kilnd_settings_t, field), def, meta, help, 0, 0, NULL, 0 }

static const kiln_config_option_t options[] = {
    {"config", 'c', KILN_CONFIG_STRING, offsetof(kilnd_settings_t, config), NULL, "FILE",
     "read settings from FILE (name = value lines)", 0, 0, NULL, KILN_CONFIG_CLI_ONLY},
    OPT("listen", 'l', KILN_CONFIG_STRING, listen, KILN_DEFAULT_LISTEN, "ADDR",
        "listen on HOST:PORT, [IPV6]:PORT or unix:PATH (port 0 picks a free port)"),
    OPT("metrics-listen", 0, KILN_CONFIG_STRING, metrics_listen, KILN_DEFAULT_METRICS_LISTEN, "ADDR",
        "serve HTTP GET /metrics (Prometheus), /healthz and /readyz on HOST:PORT or [IPV6]:PORT "
        "(port 0 picks a free port; off: no HTTP endpoint)"),
    OPT("state-dir", 's', KILN_CONFIG_STRING, state_dir, "kiln-state", "DIR",
        "state directory: cache, index, lock and address files (created if missing)"),
    {"log-level", 0, KILN_CONFIG_STRING, offsetof(kilnd_settings_t, log_level), "info", "LEVEL",
     "debug, info, warn or error", 0, 0, log_levels, 0},
    {"max-message-bytes", 0, KILN_CONFIG_SIZE, offsetof(kilnd_settings_t, max_message_bytes), "64MiB", "SIZE",
     "largest gRPC message accepted or sent (larger sources go through PutSource)", 64 * 1024, 2147483647,
     NULL, 0},
    {"drain-timeout", 0, KILN_CONFIG_DURATION, offsetof(kilnd_settings_t, drain_timeout_ms), "10s",
     "DURATION", "on SIGTERM/SIGINT, how long in-flight calls may finish before they are cancelled", 0,
     3600 * 1000, NULL, 0},
    {"cache-capacity", 0, KILN_CONFIG_SIZE, offsetof(kilnd_settings_t, cache_capacity), "0", "SIZE",
     "keep the artifact cache under SIZE on disk by evicting least recently used "
     "entries (0: unlimited)",
     0, 0, NULL, 0},
    {"cache-compression", 0, KILN_CONFIG_STRING, offsetof(kilnd_settings_t, cache_compression), "auto",
     "MODE", "auto: zstd-compress blobs at rest when a sample shows it pays; off", 0, 0, compressions, 0},
    {"gc-interval", 0, KILN_CONFIG_DURATION, offsetof(kilnd_settings_t, gc_interval_ms), "5m", "DURATION",
     "how often eviction runs when cache-capacity is set (0: only on request)", 0, 0, NULL, 0},
    {"workers", 'w', KILN_CONFIG_INT, offsetof(kilnd_settings_t, workers), "0", "N",
     "compile worker processes (0: one per online CPU)", 0, 256, NULL, 0},
    {"worker-timeout", 0, KILN_CONFIG_DURATION, offsetof(kilnd_settings_t, worker_timeout_ms), "30m",
     "DURATION",
     "a compile task running longer is killed and its targets fail DEADLINE_EXCEEDED "
     "(0: no limit)",
     0, 0, NULL, 0},
    {"worker-memory-limit", 0, KILN_CONFIG_SIZE, offsetof(kilnd_settings_t, worker_memory_limit), "auto",
     "SIZE",
     "address-space limit of each worker; a model with a tensor over it, or a task that needs more, "
     "fails RESOURCE_EXHAUSTED (auto: three quarters of the machine's (or cgroup's) memory shared among the "
     "workers, at least 2 GiB; none in sanitized builds; 0: no limit)",
     0, 0, NULL, KILN_CONFIG_AUTO},
    {"crash-keep", 0, KILN_CONFIG_INT, offsetof(kilnd_settings_t, crash_keep), "32", "N",
     "crash files (the IR of a compile that killed its worker) kept in STATE/crashes: the newest N, "
     "at most 64 MiB of them; older ones are removed",
     1, 100000, NULL, 0},
    {"worker-path", 0, KILN_CONFIG_STRING, offsetof(kilnd_settings_t, worker_path), "", "FILE",
     "the kiln-worker executable (default: next to kilnd)", 0, 0, NULL, 0},
    {"external-compiler", 0, KILN_CONFIG_STRING, offsetof(kilnd_settings_t, external_compiler), "", "FILE",
     "compile with this iree-compile-compatible executable instead of the built-in compiler", 0, 0, NULL, 0},
    {"external-compiler-args", 0, KILN_CONFIG_STRING, offsetof(kilnd_settings_t, external_compiler_args), "",
     "TEMPLATE", "argument template of external-compiler (default: iree-compile's command line)", 0, 0, NULL,
     0},
    {"queue-capacity", 0, KILN_CONFIG_INT, offsetof(kilnd_settings_t, queue_capacity), "1024", "N",
     "queued compile tasks per priority class; more is RESOURCE_EXHAUSTED", 1, 1000000, NULL, 0},
    {"client-max-request-bytes", 0, KILN_CONFIG_SIZE, offsetof(kilnd_settings_t, client_max_request_bytes),
     "0", "SIZE",
     "per client: the largest request message, and the largest PutSource upload; more is "
     "RESOURCE_EXHAUSTED (0: no limit beyond max-message-bytes)",
     0, 0, NULL, 0},
    {"client-max-jobs", 0, KILN_CONFIG_INT, offsetof(kilnd_settings_t, client_max_jobs), "0", "N",
     "per client: unfinished compile jobs (queued or running; cache hits do not count); more is "
     "RESOURCE_EXHAUSTED (0: no limit)",
     0, 1000000, NULL, 0},
    {"client-max-downloads", 0, KILN_CONFIG_INT, offsetof(kilnd_settings_t, client_max_downloads), "16", "N",
     "per client: GetArtifact downloads open at once; more is RESOURCE_EXHAUSTED (each holds up to three "
     "chunks of the artifact in memory while its client reads)",
     1, 100000, NULL, 0},
    {"download-stall-timeout", 0, KILN_CONFIG_DURATION, offsetof(kilnd_settings_t, download_stall_timeout_ms),
     "60s", "DURATION",
     "a download whose client has not taken the last chunk for this long is ended "
     "(DEADLINE_EXCEEDED; resume with offset), freeing its memory (0: never)",
     0, 0, NULL, 0},
    {"client-queue-share", 0, KILN_CONFIG_INT, offsetof(kilnd_settings_t, client_queue_share), "0", "PERCENT",
     "per client: the share of each priority class's queue-capacity one client may hold (at least one "
     "task); more is RESOURCE_EXHAUSTED (0: no limit)",
     0, 100, NULL, 0},
    {"client-worker-share", 0, KILN_CONFIG_INT, offsetof(kilnd_settings_t, client_worker_share), "0",
     "PERCENT",
     "per client: the share of the workers one client's compiles may run on at once (at least one), so "
     "long compiles of one client never hold every worker; its further tasks wait in the queue (0: no limit)",
     0, 100, NULL, 0},
    {"job-retention", 0, KILN_CONFIG_DURATION, offsetof(kilnd_settings_t, job_retention_ms), "1h", "DURATION",
     "how long a finished job stays watchable", 1000, 30LL * 24 * 3600 * 1000, NULL, 0},
    {"embed-source", 0, KILN_CONFIG_BOOL, offsetof(kilnd_settings_t, embed_source), NULL, NULL,
     "artifacts carry their source (zstd), so they can be recompiled with nothing else", 0, 0, NULL, 0},
    {"tls-cert", 0, KILN_CONFIG_STRING, offsetof(kilnd_settings_t, tls_cert), "", "FILE",
     "serve gRPC over TLS with this PEM certificate (chain); needs tls-key; SIGHUP re-reads it", 0, 0, NULL,
     0},
    {"tls-key", 0, KILN_CONFIG_STRING, offsetof(kilnd_settings_t, tls_key), "", "FILE",
     "the PEM private key of tls-cert (unencrypted; keep it readable by kilnd's user only)", 0, 0, NULL, 0},
    {"tls-client-ca", 0, KILN_CONFIG_STRING, offsetof(kilnd_settings_t, tls_client_ca), "", "FILE",
     "mutual TLS: clients must present a certificate signed by this PEM CA; the certificate's "
     "CN (or first SAN) becomes the client's name",
     0, 0, NULL, 0},
    {"token-file", 0, KILN_CONFIG_STRING, offsetof(kilnd_settings_t, token_file), "", "FILE",
     "require `authorization: Bearer TOKEN` on every call but health checks; lines `NAME ROLE "
     "TOKEN`, ROLE read, submit or admin; SIGHUP re-reads it",
     0, 0, NULL, 0},
    {"allow-root", 0, KILN_CONFIG_BOOL, offsetof(kilnd_settings_t, allow_root), NULL, NULL,
     "start even when running as root (uid 0), e.g. in a container whose root is unprivileged "
     "on the host; otherwise kilnd refuses",
     0, 0, NULL, 0},
    {"test-hooks", 0, KILN_CONFIG_BOOL, offsetof(kilnd_settings_t, test_hooks), NULL, NULL,
     "tests only: workers honour crash/hang/oom markers in sources", 0, 0, NULL, KILN_CONFIG_CLI_ONLY},
    {"verify", 0, KILN_CONFIG_BOOL, offsetof(kilnd_settings_t, verify), NULL, NULL,
     "offline: check every cached blob against its digest, repair the index, report, exit", 0, 0, NULL,
     KILN_CONFIG_CLI_ONLY},
    {"dry-run", 0, KILN_CONFIG_BOOL, offsetof(kilnd_settings_t, dry_run), NULL, NULL,
     "with --verify: report problems without repairing them", 0, 0, NULL, KILN_CONFIG_CLI_ONLY},
    {"print-config", 0, KILN_CONFIG_BOOL, offsetof(kilnd_settings_t, print_config), NULL, NULL,
     "print the effective settings and exit", 0, 0, NULL, KILN_CONFIG_CLI_ONLY},
    {"help", 'h', KILN_CONFIG_BOOL, offsetof(kilnd_settings_t, help), NULL, NULL, "show this help and exit",
     0, 0, NULL, KILN_CONFIG_CLI_ONLY},
    {"version", 'V', KILN_CONFIG_BOOL, offsetof(kilnd_settings_t, version), NULL, NULL,
     "print the version and exit", 0, 0, NULL, KILN_CONFIG_CLI_ONLY},
};

static const kiln_config_table_t table = {
    "kilnd",
    "KILND_",
    options,
    sizeof options / sizeof options[0],
};

const kiln_config_table_t *kilnd_settings_table(void) { return &table; }
