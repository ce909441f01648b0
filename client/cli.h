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
#include "compiler/vmfb/reader.h"

/* Exit codes, one per failure class (documented in `kiln --help` and the README). */
#define KILN_EXIT_OK                  0
#define KILN_EXIT_FAILED              1 /* kilnd answered with an error */
#define KILN_EXIT_USAGE               2 /* bad command, flag or value */
#define KILN_EXIT_UNREACHABLE         3 /* kilnd could not be reached (UNAVAILABLE) */
#define KILN_EXIT_TIMEOUT             4 /* no answer within --timeout (DEADLINE_EXCEEDED) */
#define KILN_EXIT_NOT_SERVING         5 /* kilnd is up but reports NOT_SERVING */
#define KILN_EXIT_LEGACY              6 /* inspect: a file is a legacy (pre-HAL 0.7) VMFB */
#define KILN_EXIT_INVALID             7 /* inspect: a file is not a readable VMFB */
#define KILN_EXIT_INCOMPLETE          8 /* recompile: a file failed, had no source or was invalid */
#define KILN_EXIT_DENIED              9 /* kilnd refused the credentials (UNAUTHENTICATED, PERMISSION_DENIED) */
#define KILN_EXIT_INTERRUPTED         130 /* recompile: stopped by SIGINT or SIGTERM (128 + SIGINT) */

#define KILN_CLI_DEFAULT_ADDR         "127.0.0.1:7477"
#define KILN_CLI_DEFAULT_TIMEOUT_MS   10000
#define KILN_CLI_LONG_TIMEOUT_MS      (3600 * 1000)      /* cache verify and gc read the whole store; watch */
#define KILN_CLI_COMPILE_TIMEOUT_MS   (30 * 60 * 1000)   /* the whole compile, job included */
#define KILN_CLI_RECOMPILE_TIMEOUT_MS (24 * 3600 * 1000) /* a whole fleet on one Recompile stream */

typedef struct kiln_cli_settings_s {
  char *config;
  char *addr;
  int64_t timeout_ms; /* 0: not given, each command uses its default */
  uint64_t max_message_bytes;
  char *service;
  bool dry_run;
  uint64_t max_bytes;
  bool json;
  /* How to reach and prove ourselves to kilnd (rpc.h kiln_client_options_t). */
  bool tls;
  char *tls_ca;
  char *tls_cert;
  char *tls_key;
  char *tls_server_name;
  char *token_file; /* its first line is the token; else KILN_TOKEN */
  bool help;
  bool version;
  /* compile, fetch, find, explain */
  kiln_config_list_t target; /* each item may hold a comma-separated list */
  kiln_config_list_t flag;
  kiln_config_list_t label; /* "key=value" */
  char *output;             /* compile: a directory; fetch: a file */
  char *priority;           /* "", interactive, batch, bulk */
  char *request_id;
  char *source;  /* fetch, find, explain: a source digest or a file */
  int64_t limit; /* find: page size, 0 = kilnd's default */
  char *page_token;
  bool all;
  char *reason; /* cancel */
  /* recompile */
  bool in_place;
  bool backup;
  char *manifest;
  bool allow_outside; /* recompile: manifest sources may lie outside its folder */
  int64_t jobs;       /* items unanswered on the stream at most; 0: the default */
  bool force;
} kiln_cli_settings_t;

const kiln_config_table_t *kiln_cli_settings_table(void);

/* A command: runs with the parsed settings and its positional arguments (after the
 * command name); returns an exit code. */
typedef int (*kiln_cli_command_fn_t)(const kiln_cli_settings_t *settings, kiln_client_t *client, int argc,
                                     const char **argv);

/* Calls `method` through kiln_client_unary. On failure reports it as `what`
 * (kiln_cli_report) and returns the exit code; on success returns KILN_EXIT_OK and
 * *out_response is owned by the caller (protobuf_c_message_free_unpacked). */
int kiln_cli_call(const kiln_cli_settings_t *settings, kiln_client_t *client, const char *what,
                  const char *method, const ProtobufCMessage *request,
                  const ProtobufCMessageDescriptor *response_descriptor, ProtobufCMessage **out_response);

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
/* `kiln scan PATH...`: local, no kilnd; finds VMFBs under each PATH and says which
 * are legacy and whether their source can be found; exit status as inspect's. */
int kiln_cli_scan(const kiln_cli_settings_t *settings, int argc, const char **argv);
/* One file found by kiln_cli_vmfb_find: its path and the index of the argument
 * it was found under. */
typedef struct kiln_cli_found_s {
  char *path;
  int arg;
} kiln_cli_found_t;
/* The VMFBs under argv[0..argc) as `scan` and `recompile` see them: a directory
 * is walked without following links and only its *.vmfb files count (sorted by
 * path within each directory argument); a file named on the command line counts
 * whatever its name. Each argument that cannot be read or walked is named on
 * stderr ("kiln: <command>: ..."), the rest is still listed, and the result is
 * KILN_EXIT_USAGE; else KILN_EXIT_OK. *out_found (an array of *out_n) is owned by
 * the caller: kiln_cli_found_free. */
int kiln_cli_vmfb_find(const char *command, int argc, const char **argv, kiln_cli_found_t **out_found,
                       size_t *out_n);
void kiln_cli_found_free(kiln_cli_found_t *found, size_t n);
/* The target a VMFB was built for, into out[cap]: kiln's provenance (kiln.target),
 * else its executables' chips or formats, comma-separated; "-" when none. */
void kiln_cli_vmfb_target_describe(const kiln_vmfb_info_t *info, char *out, size_t cap);
/* Reads and classifies one file (at most 4 GiB): always fills *out_info (a file that
 * cannot be read is INVALID, the reason saying why); *out_data (owned, may be NULL)
 * holds its bytes. Free both. */
void kiln_cli_vmfb_load(const char *path, uint8_t **out_data, size_t *out_len, kiln_vmfb_info_t *out_info);
/* The exit status so far combined with one more file's class: invalid beats legacy
 * beats current. */
int kiln_cli_vmfb_worst(int worst, kiln_vmfb_class_t cls);
/* `kiln recompile PATH... [-o DIR | --in-place [--backup]] [--manifest FILE]
 * [--jobs N] [--dry-run] [--force]`: bulk recompile of legacy VMFBs on one
 * Recompile stream (cmd_recompile.c says how). */
int kiln_cli_recompile(const kiln_cli_settings_t *settings, kiln_client_t *client, int argc,
                       const char **argv);
/* `kiln cache stats|verify|gc|pin|unpin`. */
int kiln_cli_cache(const kiln_cli_settings_t *settings, kiln_client_t *client, int argc, const char **argv);
/* The deadline a command uses: --timeout when given, else its default. */
int64_t kiln_cli_timeout_ms(const kiln_cli_settings_t *settings, bool long_running);
/* --timeout when given, else `default_ms`. */
int64_t kiln_cli_timeout_or(const kiln_cli_settings_t *settings, int64_t default_ms);
int kiln_cli_stats(const kiln_cli_settings_t *settings, kiln_client_t *client, int argc, const char **argv);

/* `kiln compile FILE --target T[,T...] [-o DIR] [--flag F]... [--label K=V]...`. */
int kiln_cli_compile(const kiln_cli_settings_t *settings, kiln_client_t *client, int argc, const char **argv);
/* `kiln fetch DIGEST | --source S --target T [--flag F]... [-o FILE]`. */
int kiln_cli_fetch(const kiln_cli_settings_t *settings, kiln_client_t *client, int argc, const char **argv);
/* `kiln find [--source S] [--target T] [--label K=V]... [--limit N] [--page-token X|--all]`. */
int kiln_cli_find(const kiln_cli_settings_t *settings, kiln_client_t *client, int argc, const char **argv);
/* `kiln status JOB`, `kiln watch JOB`, `kiln cancel JOB [--reason TEXT]`. */
int kiln_cli_status(const kiln_cli_settings_t *settings, kiln_client_t *client, int argc, const char **argv);
int kiln_cli_watch(const kiln_cli_settings_t *settings, kiln_client_t *client, int argc, const char **argv);
int kiln_cli_cancel(const kiln_cli_settings_t *settings, kiln_client_t *client, int argc, const char **argv);
/* `kiln explain FILE|--source S --target T[,T...] [--flag F]...`: would Compile hit
 * the cache, and if not, which part of the key differs from the nearest entry. */
int kiln_cli_explain(const kiln_cli_settings_t *settings, kiln_client_t *client, int argc, const char **argv);

/* ---- Following a job (shared by compile and watch) ----------------------- */

struct kiln_cli_job_s;

/* How job progress is shown on stdout: nothing (--json), one plain line per event
 * worth seeing (stdout is not a terminal), or a live per-target display redrawn in
 * place (a terminal). Diagnostics and failures go to stderr in every mode. */
typedef enum kiln_cli_show_e {
  KILN_CLI_SHOW_NONE,
  KILN_CLI_SHOW_PLAIN,
  KILN_CLI_SHOW_LIVE,
} kiln_cli_show_t;

/* The mode for these settings and this stdout. */
kiln_cli_show_t kiln_cli_show_mode(const kiln_cli_settings_t *settings);

/* True when `fd` is a terminal that takes cursor movement (not TERM=dumb): where
 * a live display may be drawn. */
bool kiln_cli_is_live_terminal(int fd);
/* The columns a live display may use on terminal `fd` (its width less one, so
 * that no line wraps); 79 when unknown. */
size_t kiln_cli_terminal_width(int fd);

/* Catches SIGINT and SIGTERM into a flag (on) or restores the previous handlers
 * (off). `compile` turns it on before it submits, so an interrupt at any point
 * after can still cancel the job it created. */
void kiln_cli_interrupts_catch(bool on);
/* True when a caught SIGINT or SIGTERM arrived since the catch was turned on. */
bool kiln_cli_interrupted(void);

/* Streams the job's events (WatchJob; `from_start` replays them all) into `job`
 * until its Terminal event, showing them as `show` says; reconnects after a
 * dropped stream (UNAVAILABLE) from the last sequence seen, up to 3 times. The
 * stream's deadline is the client's timeout. With `cancel_on_interrupt` (and
 * kiln_cli_interrupts_catch on), an interrupt, also one caught before the call,
 * cancels the job on kilnd (CancelJob) and returns KILN_EXIT_FAILED. Returns
 * KILN_EXIT_OK once the job finished (whatever its state), else reports the
 * failure as `what` and returns its exit code. */
int kiln_cli_job_follow(const kiln_cli_settings_t *settings, kiln_client_t *client,
                        struct kiln_cli_job_s *job, bool from_start, kiln_cli_show_t show,
                        bool cancel_on_interrupt, const char *what);

/* ---- Argument helpers (pure; unit-tested) -------------------------------- */

/* The --target items split at commas, blanks trimmed, empty names dropped, in
 * order. *out_names is an array of *out_n strings, each and the array owned by the
 * caller (kiln_cli_strings_free). Never fails. */
void kiln_cli_targets_split(const kiln_config_list_t *targets, char ***out_names, size_t *out_n);

/* Appends the items of `text` split at any character of `seps` ("" keeps it
 * whole) to (*items, *n), each trimmed of blanks, empty ones dropped; `text` NULL
 * appends nothing. The strings and the array belong to the caller
 * (kiln_cli_strings_free). Never fails. */
void kiln_cli_strings_split(const char *text, const char *seps, char ***items, size_t *n);

/* One label. */
typedef struct kiln_cli_label_s {
  char *key;
  char *value;
} kiln_cli_label_t;

/* Parses --label KEY=VALUE items (the value may be empty or hold '='; a key given
 * twice keeps its last value, in the position of its first). INVALID_ARGUMENT
 * naming the item when it has no '=' or an empty key. On success *out_labels (an
 * array of *out_n) belongs to the caller (kiln_cli_labels_free). */
KILN_MUST_USE kiln_status_t kiln_cli_labels_parse(const kiln_config_list_t *labels,
                                                  kiln_cli_label_t **out_labels, size_t *out_n);
void kiln_cli_labels_free(kiln_cli_label_t *labels, size_t n);

/* --priority as the proto enum value: "" -> 0 (kilnd's default), interactive 1,
 * batch 2, bulk 3 (the table restricts the spelling). */
int kiln_cli_priority_value(const char *priority);

/* Frees an array of n strings and the array. NULL is fine. */
void kiln_cli_strings_free(char **strings, size_t n);

/* A random (version 4) UUID, "xxxxxxxx-xxxx-4xxx-yxxx-xxxxxxxxxxxx", into out[37]
 * (getrandom; the idempotency key of a Compile). */
void kiln_cli_uuid(char out[37]);

/* Checks the number of positional arguments of `command`: INVALID_ARGUMENT-style
 * message on stderr and KILN_EXIT_USAGE when argc is outside [min, max], else 0. */
int kiln_cli_expect_args(const char *command, int argc, int min, int max, const char *usage);

#endif /* KILN_CLIENT_CLI_H */
