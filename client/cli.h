/* The kiln CLI's shared pieces: settings (one config table: --flags, KILN_*
 * variables, the config file), documented exit codes, and error reporting.
 * Single-threaded. */
#ifndef KILN_CLIENT_CLI_H
#define KILN_CLIENT_CLI_H

#include <stdbool.h>
#include <stdint.h>

#include "base/config.h"
#include "base/status.h"
#include "client/rpc.h"

/* Exit codes, one per failure class (documented in `kiln --help` and the README). */
#define KILN_EXIT_OK 0
#define KILN_EXIT_FAILED 1      /* kilnd answered with an error */
#define KILN_EXIT_USAGE 2       /* bad command, flag or value */
#define KILN_EXIT_UNREACHABLE 3 /* kilnd could not be reached (UNAVAILABLE) */
#define KILN_EXIT_TIMEOUT 4     /* no answer within --timeout (DEADLINE_EXCEEDED) */
#define KILN_EXIT_NOT_SERVING 5 /* kilnd is up but reports NOT_SERVING */
#define KILN_EXIT_LEGACY 6      /* inspect: a file is a legacy (pre-HAL 0.7) VMFB */
#define KILN_EXIT_INVALID 7     /* inspect: a file is not a readable VMFB */

#define KILN_CLI_DEFAULT_ADDR "127.0.0.1:7477"
#define KILN_CLI_DEFAULT_TIMEOUT_MS 10000
#define KILN_CLI_LONG_TIMEOUT_MS (3600 * 1000) /* cache verify and gc read the whole store */

typedef struct kiln_cli_settings_s {
  char *config;
  char *addr;
  int64_t timeout_ms; /* 0: not given, each command uses its default */
  uint64_t max_message_bytes;
  char *service;
  bool dry_run;
  uint64_t max_bytes;
  bool json;
  bool help;
  bool version;
} kiln_cli_settings_t;

const kiln_config_table_t *kiln_cli_settings_table(void);

/* A command: runs with the parsed settings and its positional arguments (after the
 * command name); returns an exit code. */
typedef int (*kiln_cli_command_fn_t)(const kiln_cli_settings_t *settings, kiln_client_t *client,
                                     int argc, const char **argv);

/* Calls `method` through kiln_client_unary. On failure reports it as `what`
 * (kiln_cli_report) and returns the exit code; on success returns KILN_EXIT_OK and
 * *out_response is owned by the caller (protobuf_c_message_free_unpacked). */
int kiln_cli_call(const kiln_cli_settings_t *settings, kiln_client_t *client, const char *what,
                  const char *method, const ProtobufCMessage *request,
                  const ProtobufCMessageDescriptor *response_descriptor,
                  ProtobufCMessage **out_response);

/* The exit code for a failed RPC status. */
int kiln_cli_exit_code(const kiln_status_t status);

/* Prints "kiln: <what>: <message>" (with the hint for unreachable daemons and
 * timeouts; `timeout_ms` is the deadline the call had) to stderr, frees `status`
 * and returns its exit code. */
int kiln_cli_report(const kiln_cli_settings_t *settings, const char *what, int64_t timeout_ms,
                    kiln_status_t status);

int kiln_cli_info(const kiln_cli_settings_t *settings, kiln_client_t *client, int argc, const char **argv);
int kiln_cli_health(const kiln_cli_settings_t *settings, kiln_client_t *client, int argc, const char **argv);
/* `kiln inspect FILE...`: local, no kilnd; exit status is the worst class seen. */
int kiln_cli_inspect(const kiln_cli_settings_t *settings, int argc, const char **argv);
/* `kiln cache stats|verify|gc|pin|unpin`. */
int kiln_cli_cache(const kiln_cli_settings_t *settings, kiln_client_t *client, int argc, const char **argv);
/* The deadline a command uses: --timeout when given, else its default. */
int64_t kiln_cli_timeout_ms(const kiln_cli_settings_t *settings, bool long_running);
int kiln_cli_stats(const kiln_cli_settings_t *settings, kiln_client_t *client, int argc, const char **argv);

#endif /* KILN_CLIENT_CLI_H */
