/* Settings table, exit-code mapping and error reporting for the kiln CLI. */
#include "client/cli.h"

#include <stddef.h>
#include <stdio.h>

static const kiln_config_option_t options[] = {
    {"config", 'c', KILN_CONFIG_STRING, offsetof(kiln_cli_settings_t, config), NULL, "FILE",
     "read settings from FILE (name = value lines)", 0, 0, NULL, KILN_CONFIG_CLI_ONLY},
    {"addr", 'a', KILN_CONFIG_STRING, offsetof(kiln_cli_settings_t, addr), KILN_CLI_DEFAULT_ADDR,
     "ADDR", "kilnd to talk to: HOST:PORT, [IPV6]:PORT or unix:PATH", 0, 0, NULL, 0},
    {"timeout", 't', KILN_CONFIG_DURATION, offsetof(kiln_cli_settings_t, timeout_ms), NULL,
     "DURATION", "deadline of each call to kilnd (default 10s; 1h for cache verify and gc)", 1,
     24 * 3600 * 1000, NULL, 0},
    {"max-message-bytes", 0, KILN_CONFIG_SIZE, offsetof(kiln_cli_settings_t, max_message_bytes),
     "64MiB", "SIZE", "largest answer accepted from kilnd", 1024, 2147483647, NULL, 0},
    {"service", 0, KILN_CONFIG_STRING, offsetof(kiln_cli_settings_t, service), "", "NAME",
     "health: the service to check (\"\" = the whole server)", 0, 0, NULL, KILN_CONFIG_CLI_ONLY},
    {"dry-run", 0, KILN_CONFIG_BOOL, offsetof(kiln_cli_settings_t, dry_run), NULL, NULL,
     "cache verify: report problems without repairing them", 0, 0, NULL, KILN_CONFIG_CLI_ONLY},
    {"max-bytes", 0, KILN_CONFIG_SIZE, offsetof(kiln_cli_settings_t, max_bytes), NULL, "SIZE",
     "cache gc: evict down to SIZE on disk (default: kilnd's cache-capacity)", 0, 0, NULL,
     KILN_CONFIG_CLI_ONLY},
    {"json", 'j', KILN_CONFIG_BOOL, offsetof(kiln_cli_settings_t, json), NULL, NULL,
     "print machine-readable JSON (field names as in kiln.proto)", 0, 0, NULL, 0},
    {"help", 'h', KILN_CONFIG_BOOL, offsetof(kiln_cli_settings_t, help), NULL, NULL,
     "show this help and exit", 0, 0, NULL, KILN_CONFIG_CLI_ONLY},
    {"version", 'V', KILN_CONFIG_BOOL, offsetof(kiln_cli_settings_t, version), NULL, NULL,
     "print the client version and exit", 0, 0, NULL, KILN_CONFIG_CLI_ONLY},
};

static const kiln_config_table_t table = {"kiln", "KILN_", options,
                                          sizeof options / sizeof options[0]};

const kiln_config_table_t *kiln_cli_settings_table(void) { return &table; }

int kiln_cli_call(const kiln_cli_settings_t *settings, kiln_client_t *client, const char *what,
                  const char *method, const ProtobufCMessage *request,
                  const ProtobufCMessageDescriptor *response_descriptor,
                  ProtobufCMessage **out_response) {
  kiln_status_t status = kiln_client_unary(client, method, request, response_descriptor, out_response);
  return status ? kiln_cli_report(settings, what, kiln_client_timeout(client), status)
                : KILN_EXIT_OK;
}

int64_t kiln_cli_timeout_ms(const kiln_cli_settings_t *settings, bool long_running) {
  if (settings->timeout_ms > 0) return settings->timeout_ms;
  return long_running ? KILN_CLI_LONG_TIMEOUT_MS : KILN_CLI_DEFAULT_TIMEOUT_MS;
}

int kiln_cli_exit_code(const kiln_status_t status) {
  switch (kiln_status_code(status)) {
    case KILN_STATUS_OK: return KILN_EXIT_OK;
    case KILN_STATUS_UNAVAILABLE: return KILN_EXIT_UNREACHABLE;
    case KILN_STATUS_DEADLINE_EXCEEDED: return KILN_EXIT_TIMEOUT;
    default: return KILN_EXIT_FAILED;
  }
}

int kiln_cli_report(const kiln_cli_settings_t *settings, const char *what, int64_t timeout_ms,
                    kiln_status_t status) {
  int code = kiln_cli_exit_code(status);
  kiln_status_code_t grpc_code = kiln_status_code(status);
  if (code == KILN_EXIT_UNREACHABLE) {
    fprintf(stderr,
            "kiln: %s: cannot reach kilnd at %s (%s).\n"
            "kiln: is kilnd running? Start it with `kilnd --listen %s`, or point --addr or "
            "KILN_ADDR at a running one.\n",
            what, settings->addr, kiln_status_message(status), settings->addr);
  } else if (code == KILN_EXIT_TIMEOUT) {
    fprintf(stderr, "kiln: %s: kilnd at %s did not answer within %lld ms (%s); raise --timeout?\n",
            what, settings->addr, (long long)timeout_ms, kiln_status_message(status));
  } else {
    fprintf(stderr, "kiln: %s failed: %s: %s\n", what, kiln_status_code_name(grpc_code),
            kiln_status_message(status));
  }
  kiln_status_free(status);
  return code;
}
