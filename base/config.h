/* One config table drives the config file, the environment and the command line.
 *
 * A program describes each setting once (kiln_config_option_t): its name, type,
 * default, help text and where it lives in the program's settings struct. The
 * same entry then serves as
 *   --name VALUE / --name=VALUE (--name / --no-name for booleans), an optional -c,
 *   the environment variable <PREFIX><NAME> (upper case, '-' -> '_'),
 *   the config-file line `name = value` ('#' comments, blank lines, optional quotes),
 *   the --help text and the --print-config dump.
 * Precedence, lowest first: default < config file < environment < command line.
 *
 * Storage by type: STRING -> char * (owned by the settings, freed by
 * kiln_config_deinit), BOOL -> bool, INT -> int64_t, SIZE -> uint64_t bytes
 * ("64MiB", "4k", "1048576"), DURATION -> int64_t milliseconds ("30s", "250ms",
 * "5m", "1h"; a bare number is seconds), LIST -> kiln_config_list_t (repeatable:
 * each occurrence adds one item, in order; a source that names the option at all
 * replaces what a lower source gave, so `--label a=1 --label b=2` on the command
 * line replaces labels from the file; one environment variable is one item; the
 * default, if any, is one item; choices apply to each item).
 *
 * Errors are INVALID_ARGUMENT naming the source (flag, variable or file:line), the
 * setting, the value and what is accepted. Not thread-safe: call at start-up.
 */
#ifndef KILN_BASE_CONFIG_H
#define KILN_BASE_CONFIG_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "base/buf.h"
#include "base/status.h"

typedef enum kiln_config_type_e {
  KILN_CONFIG_STRING,
  KILN_CONFIG_BOOL,
  KILN_CONFIG_INT,
  KILN_CONFIG_SIZE,
  KILN_CONFIG_DURATION,
  KILN_CONFIG_LIST,
} kiln_config_type_t;

/* Storage of a KILN_CONFIG_LIST option: its values in the order given. The
 * strings and the array belong to the settings (kiln_config_deinit frees them). */
typedef struct kiln_config_list_s {
  char **items;
  size_t count;
} kiln_config_list_t;

/* Option flags. */
#define KILN_CONFIG_CLI_ONLY 0x1u /* not read from the file or the environment */
#define KILN_CONFIG_NO_DUMP  0x2u /* left out of kiln_config_dump (secrets, actions) */
/* A SIZE option that also takes "auto": the program picks the value at start
 * (stored as KILN_CONFIG_SIZE_AUTO until then, printed as auto). */
#define KILN_CONFIG_AUTO      0x4u
#define KILN_CONFIG_SIZE_AUTO UINT64_MAX

typedef struct kiln_config_option_s {
  const char *name; /* "state-dir" */
  char short_name;  /* 'c' for -c, or 0 */
  kiln_config_type_t type;
  size_t offset;              /* offsetof(settings struct, field) */
  const char *default_value;  /* text parsed like any source; NULL leaves it zero/NULL */
  const char *metavar;        /* "DIR" in the help; NULL for booleans */
  const char *help;           /* one line */
  int64_t min, max;           /* INT/SIZE/DURATION bounds; min == max == 0: unbounded */
  const char *const *choices; /* STRING: NULL-terminated allowed values, or NULL */
  unsigned flags;
} kiln_config_option_t;

typedef struct kiln_config_table_s {
  const char *program;    /* "kilnd" */
  const char *env_prefix; /* "KILN_" */
  const kiln_config_option_t *options;
  size_t count;
} kiln_config_table_t;

/* Sets every option to its default. Call once on a zeroed settings struct. */
KILN_MUST_USE kiln_status_t kiln_config_set_defaults(const kiln_config_table_t *table, void *settings);

/* Sets one option by name from text; `source` names where the text came from
 * ("flag", "KILN_LISTEN", "kilnd.conf:3") for the error message. A LIST option
 * gets `value` appended. */
KILN_MUST_USE kiln_status_t kiln_config_set(const kiln_config_table_t *table, void *settings,
                                            const char *name, const char *value, const char *source);

/* Reads `name = value` lines. NOT_FOUND when the file is missing,
 * INVALID_ARGUMENT with file:line for a bad line or unknown key. */
KILN_MUST_USE kiln_status_t kiln_config_load_file(const kiln_config_table_t *table, void *settings,
                                                  const char *path);

/* Reads <PREFIX><NAME> variables for every option without KILN_CONFIG_CLI_ONLY. */
KILN_MUST_USE kiln_status_t kiln_config_load_env(const kiln_config_table_t *table, void *settings);

/* Parses argv[1..argc). Non-option words are collected, in order, into
 * out_positional (borrowed pointers into argv; capacity `max_positional`);
 * "--" ends option parsing. */
KILN_MUST_USE kiln_status_t kiln_config_parse_args(const kiln_config_table_t *table, void *settings, int argc,
                                                   char **argv, const char **out_positional,
                                                   size_t max_positional, size_t *out_positional_count);

/* The whole sequence: defaults, then the file named by the option `config_option`
 * (found in argv or the environment; NULL to skip files; a missing file named
 * explicitly is an error), then the environment, then argv. */
KILN_MUST_USE kiln_status_t kiln_config_load(const kiln_config_table_t *table, void *settings,
                                             const char *config_option, int argc, char **argv,
                                             const char **out_positional, size_t max_positional,
                                             size_t *out_positional_count);

/* Writes the option list for --help. */
void kiln_config_print_help(const kiln_config_table_t *table, FILE *out);

/* Appends the effective settings in config-file syntax. */
void kiln_config_dump(const kiln_config_table_t *table, const void *settings, kiln_buf_t *out);

/* Frees the strings the table owns inside `settings`. */
void kiln_config_deinit(const kiln_config_table_t *table, void *settings);

/* Parsers shared with programs that take sizes and durations elsewhere.
 * Return 0 on success, -1 on malformed or overflowing text. */
int kiln_config_parse_size(const char *text, uint64_t *out_bytes);
int kiln_config_parse_duration_ms(const char *text, int64_t *out_ms);

#endif /* KILN_BASE_CONFIG_H */
