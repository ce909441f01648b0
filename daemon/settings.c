/* kilnd's config table: the single description of every daemon setting. */
#include "daemon/settings.h"

#include <stddef.h>

static const char *const log_levels[] = {"debug", "info", "warn", "error", NULL};
static const char *const compressions[] = {"auto", "off", NULL};

#define OPT(name, s, type, field, def, meta, help) \
  {name, s, type, offsetof(kilnd_settings_t, field), def, meta, help, 0, 0, NULL, 0}

static const kiln_config_option_t options[] = {
    {"config", 'c', KILN_CONFIG_STRING, offsetof(kilnd_settings_t, config), NULL, "FILE",
     "read settings from FILE (name = value lines)", 0, 0, NULL, KILN_CONFIG_CLI_ONLY},
    OPT("listen", 'l', KILN_CONFIG_STRING, listen, KILN_DEFAULT_LISTEN, "ADDR",
        "listen on HOST:PORT, [IPV6]:PORT or unix:PATH (port 0 picks a free port)"),
    OPT("state-dir", 's', KILN_CONFIG_STRING, state_dir, "kiln-state", "DIR",
        "state directory: cache, index, lock and address files (created if missing)"),
    {"log-level", 0, KILN_CONFIG_STRING, offsetof(kilnd_settings_t, log_level), "info", "LEVEL",
     "debug, info, warn or error", 0, 0, log_levels, 0},
    {"max-message-bytes", 0, KILN_CONFIG_SIZE, offsetof(kilnd_settings_t, max_message_bytes),
     "64MiB", "SIZE", "largest gRPC message accepted or sent (larger sources go through PutSource)",
     64 * 1024, 2147483647, NULL, 0},
    {"drain-timeout", 0, KILN_CONFIG_DURATION, offsetof(kilnd_settings_t, drain_timeout_ms), "10s",
     "DURATION", "on SIGTERM/SIGINT, how long in-flight calls may finish before they are cancelled",
     0, 3600 * 1000, NULL, 0},
    {"cache-capacity", 0, KILN_CONFIG_SIZE, offsetof(kilnd_settings_t, cache_capacity), "0",
     "SIZE", "keep the artifact cache under SIZE on disk by evicting least recently used "
     "entries (0: unlimited)", 0, 0, NULL, 0},
    {"cache-compression", 0, KILN_CONFIG_STRING, offsetof(kilnd_settings_t, cache_compression),
     "auto", "MODE", "auto: zstd-compress blobs at rest when a sample shows it pays; off",
     0, 0, compressions, 0},
    {"gc-interval", 0, KILN_CONFIG_DURATION, offsetof(kilnd_settings_t, gc_interval_ms), "5m",
     "DURATION", "how often eviction runs when cache-capacity is set (0: only on request)",
     0, 0, NULL, 0},
    {"verify", 0, KILN_CONFIG_BOOL, offsetof(kilnd_settings_t, verify), NULL, NULL,
     "offline: check every cached blob against its digest, repair the index, report, exit",
     0, 0, NULL, KILN_CONFIG_CLI_ONLY},
    {"dry-run", 0, KILN_CONFIG_BOOL, offsetof(kilnd_settings_t, dry_run), NULL, NULL,
     "with --verify: report problems without repairing them", 0, 0, NULL, KILN_CONFIG_CLI_ONLY},
    {"print-config", 0, KILN_CONFIG_BOOL, offsetof(kilnd_settings_t, print_config), NULL, NULL,
     "print the effective settings and exit", 0, 0, NULL, KILN_CONFIG_CLI_ONLY},
    {"help", 'h', KILN_CONFIG_BOOL, offsetof(kilnd_settings_t, help), NULL, NULL,
     "show this help and exit", 0, 0, NULL, KILN_CONFIG_CLI_ONLY},
    {"version", 'V', KILN_CONFIG_BOOL, offsetof(kilnd_settings_t, version), NULL, NULL,
     "print the version and exit", 0, 0, NULL, KILN_CONFIG_CLI_ONLY},
};

static const kiln_config_table_t table = {
    "kilnd", "KILND_", options, sizeof options / sizeof options[0],
};

const kiln_config_table_t *kilnd_settings_table(void) { return &table; }
