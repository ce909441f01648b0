/* Unit tests for base/config, driven by a test table that has every type: STRING with
 * and without choices, BOOL, INT with and without bounds, SIZE, DURATION, plus a
 * NO_DUMP secret and a CLI_ONLY flag. Covers defaults; kiln_config_set; config files
 * (comments, blank lines, quotes, '_' keys, CRLF, bad lines and unknown keys reported
 * as INVALID_ARGUMENT with "file:line", a missing file -> NOT_FOUND); the environment
 * (prefix, '-' -> '_', CLI_ONLY skipped); argv (--x=v, --x v, -c v, --bool, --no-bool,
 * "--", positionals and their capacity, unknown flags, missing values); precedence
 * default < file < env < args through kiln_config_load with the config path given
 * by flag and by environment; the size and duration parsers; the dump re-parsing to
 * the same settings (unset strings included); --help text; deinit freeing strings
 * (ASan's leak check); regression tests for a directory given as the config file, a
 * string set from its own value, and an over-long environment prefix; LIST options
 * (repeatable: append per occurrence, a higher source replaces a lower one, choices
 * per item, dump round trip, "(repeatable)" in the help) on a second table.
 * Fixture: a mkdtemp directory for config files (group), fresh defaults and a clean
 * KILNTEST_* environment (each test). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <signal.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "base/alloc.h"
#include "base/buf.h"
#include "base/config.h"
#include "base/status.h"
#include "tests/unit/support/testing.h"

extern char **environ;

/* ---- the test table ---- */

typedef struct settings_s {
  char *config;
  char *listen;
  char *log_level;
  bool verbose;
  bool cache;
  int64_t workers;
  int64_t nice;
  uint64_t cache_size;
  uint64_t max_message;
  int64_t request_timeout_ms;
  int64_t idle_timeout_ms;
  char *token;
  bool help;
} settings_t;

static const char *const log_levels[] = {"debug", "info", "warn", "error", NULL};

#define OPT(name, short_name, type, field, def, metavar, help, min, max, choices, flags) \
  { name, short_name, type, offsetof(settings_t, field), def, metavar, help, min, max, choices, flags }

static const kiln_config_option_t options[] = {
    OPT("config", 'c', KILN_CONFIG_STRING, config, NULL, "FILE", "config file", 0, 0, NULL,
        KILN_CONFIG_NO_DUMP),
    OPT("listen", 'l', KILN_CONFIG_STRING, listen, "unix:/run/kiln/kilnd.sock", "ADDR", "where to listen", 0,
        0, NULL, 0),
    OPT("log-level", 0, KILN_CONFIG_STRING, log_level, "info", "LEVEL", "log level", 0, 0, log_levels, 0),
    OPT("verbose", 'v', KILN_CONFIG_BOOL, verbose, NULL, NULL, "say more", 0, 0, NULL, 0),
    OPT("cache", 0, KILN_CONFIG_BOOL, cache, "true", NULL, "use the cache", 0, 0, NULL, 0),
    OPT("workers", 'j', KILN_CONFIG_INT, workers, "4", "N", "compile workers", 1, 64, NULL, 0),
    OPT("nice", 0, KILN_CONFIG_INT, nice, "-5", "N", "niceness", 0, 0, NULL, 0),
    OPT("cache-size", 0, KILN_CONFIG_SIZE, cache_size, "64MiB", "BYTES", "cache size", 0, 0, NULL,
        KILN_CONFIG_AUTO),
    OPT("max-message", 0, KILN_CONFIG_SIZE, max_message, "4MiB", "BYTES", "largest message", 1024, 1 << 30,
        NULL, 0),
    OPT("request-timeout", 0, KILN_CONFIG_DURATION, request_timeout_ms, "30s", "DURATION",
        "per-request deadline", 1, 3600000, NULL, 0),
    OPT("idle-timeout", 0, KILN_CONFIG_DURATION, idle_timeout_ms, "250ms", "DURATION", "idle timeout", 0, 0,
        NULL, 0),
    OPT("token", 0, KILN_CONFIG_STRING, token, NULL, "SECRET", "auth token", 0, 0, NULL, KILN_CONFIG_NO_DUMP),
    OPT("help", 'h', KILN_CONFIG_BOOL, help, NULL, NULL, "show help", 0, 0, NULL, KILN_CONFIG_CLI_ONLY),
};

static const kiln_config_table_t table = {"kilntest", "KILNTEST_", options,
                                          sizeof options / sizeof options[0]};

#define ARGC(argv) ((int)(sizeof(argv) / sizeof((argv)[0])))

/* ---- fixture ---- */

static char *tmpdir; /* made in group_setup, removed in group_teardown */
static settings_t settings;
static settings_t defaults_copy; /* scalar fields only; strings compared by value */

/* Removes every KILNTEST_* / OTHERTEST_* variable. */
static void clear_env(void) {
  for (;;) {
    char name[256] = "";
    for (char **e = environ; e && *e; e++) {
      if (strncmp(*e, "KILNTEST_", 9) == 0 || strncmp(*e, "OTHERTEST_", 10) == 0) {
        const char *eq = strchr(*e, '=');
        size_t n = eq ? (size_t)(eq - *e) : strlen(*e);
        if (n >= sizeof name) n = sizeof name - 1;
        memcpy(name, *e, n);
        name[n] = '\0';
        break;
      }
    }
    if (!name[0]) return;
    unsetenv(name);
  }
}

static int group_setup(void **state) {
  (void)state;
  if (!(tmpdir = kiln_test_tmpdir("kiln-test-config"))) return -1;
  clear_env();
  return 0;
}

static int group_teardown(void **state) {
  (void)state;
  clear_env();
  int rc = kiln_test_remove_tree(tmpdir);
  free(tmpdir);
  tmpdir = NULL;
  return rc;
}

static int test_setup(void **state) {
  clear_env();
  memset(&settings, 0, sizeof settings);
  kiln_status_t st = kiln_config_set_defaults(&table, &settings);
  if (st) {
    kiln_status_free(st);
    return -1;
  }
  defaults_copy = settings;
  *state = &settings;
  return 0;
}

static int test_teardown(void **state) {
  (void)state;
  kiln_config_deinit(&table, &settings);
  clear_env();
  return 0;
}

/* ---- helpers ---- */

/* <tmpdir>/<name> into `out_path` (PATH_MAX bytes). */
static void path_in_tmp(const char *name, char *out_path) {
  int n = snprintf(out_path, PATH_MAX, "%s/%s", tmpdir, name);
  assert_true(n > 0 && n < PATH_MAX);
}

/* Writes `text` to <tmpdir>/<name>; the path goes to `out_path`. */
static void write_file(const char *name, const char *text, char *out_path) {
  path_in_tmp(name, out_path);
  FILE *f = fopen(out_path, "w");
  assert_non_null(f);
  assert_int_equal(fputs(text, f) >= 0, 1);
  assert_int_equal(fclose(f), 0);
}

/* Consumes `st`; it must be INVALID_ARGUMENT and its message must contain `needle`. */
static void expect_invalid(kiln_status_t st, const char *needle) {
  if (!st) fail_msg("expected INVALID_ARGUMENT containing '%s', got OK", needle);
  int code_ok = kiln_status_code(st) == KILN_STATUS_INVALID_ARGUMENT;
  int has = !needle || strstr(kiln_status_message(st), needle) != NULL;
  if (!code_ok || !has) {
    print_error("status %s: %s\n", kiln_status_code_name(kiln_status_code(st)), kiln_status_message(st));
  }
  kiln_status_free(st);
  if (!code_ok) fail_msg("wrong code (wanted INVALID_ARGUMENT)");
  if (!has) fail_msg("message lacks '%s'", needle);
}

static void expect_ok(kiln_status_t st) {
  if (st) {
    print_error("unexpected status %s: %s\n", kiln_status_code_name(kiln_status_code(st)),
                kiln_status_message(st));
    kiln_status_free(st);
    fail();
  }
}

static int str_eq(const char *a, const char *b) {
  if (!a || !b) return a == b;
  return strcmp(a, b) == 0;
}

/* Compares the dumpable fields (everything but config, token, help). */
static void assert_dumpable_equal(const settings_t *a, const settings_t *b) {
  assert_true(str_eq(a->listen, b->listen));
  assert_true(str_eq(a->log_level, b->log_level));
  assert_int_equal(a->verbose, b->verbose);
  assert_int_equal(a->cache, b->cache);
  assert_int_equal(a->workers, b->workers);
  assert_int_equal(a->nice, b->nice);
  assert_int_equal(a->cache_size, b->cache_size);
  assert_int_equal(a->max_message, b->max_message);
  assert_int_equal(a->request_timeout_ms, b->request_timeout_ms);
  assert_int_equal(a->idle_timeout_ms, b->idle_timeout_ms);
}

static void assert_settings_equal(const settings_t *a, const settings_t *b) {
  assert_dumpable_equal(a, b);
  assert_true(str_eq(a->config, b->config));
  assert_true(str_eq(a->token, b->token));
  assert_int_equal(a->help, b->help);
}

/* A settings_t holding the defaults, for comparisons (deinit it after). */
static void fresh_defaults(settings_t *s) {
  memset(s, 0, sizeof *s);
  expect_ok(kiln_config_set_defaults(&table, s));
}

/* ---- defaults and kiln_config_set ---- */

static void test_defaults(void **state) {
  settings_t *s = *state;
  assert_null(s->config);
  assert_string_equal(s->listen, "unix:/run/kiln/kilnd.sock");
  assert_string_equal(s->log_level, "info");
  assert_false(s->verbose);
  assert_true(s->cache);
  assert_int_equal(s->workers, 4);
  assert_int_equal(s->nice, -5);
  assert_int_equal(s->cache_size, 64ull << 20);
  assert_int_equal(s->max_message, 4ull << 20);
  assert_int_equal(s->request_timeout_ms, 30000);
  assert_int_equal(s->idle_timeout_ms, 250);
  assert_null(s->token);
  assert_false(s->help);
}

static void test_set_defaults_twice_does_not_leak(void **state) {
  settings_t *s = *state;
  expect_ok(kiln_config_set(&table, s, "listen", "elsewhere", "test"));
  expect_ok(kiln_config_set_defaults(&table, s));
  assert_string_equal(s->listen, "unix:/run/kiln/kilnd.sock");
}

static void test_bad_default_is_reported(void **state) {
  (void)state;
  static const kiln_config_option_t bad_opts[] = {
      OPT("workers", 0, KILN_CONFIG_INT, workers, "many", "N", "", 0, 0, NULL, 0),
  };
  static const kiln_config_table_t bad = {"kilntest", "KILNTEST_", bad_opts, 1};
  settings_t s;
  memset(&s, 0, sizeof s);
  expect_invalid(kiln_config_set_defaults(&bad, &s), "default");
}

static void test_set_each_type(void **state) {
  settings_t *s = *state;
  expect_ok(kiln_config_set(&table, s, "listen", "tcp:0.0.0.0:9000", "test"));
  expect_ok(kiln_config_set(&table, s, "log-level", "debug", "test"));
  expect_ok(kiln_config_set(&table, s, "verbose", "yes", "test"));
  expect_ok(kiln_config_set(&table, s, "cache", "off", "test"));
  expect_ok(kiln_config_set(&table, s, "workers", "64", "test"));
  expect_ok(kiln_config_set(&table, s, "nice", "-100", "test"));
  expect_ok(kiln_config_set(&table, s, "cache-size", "1GiB", "test"));
  expect_ok(kiln_config_set(&table, s, "max-message", "1024", "test"));
  expect_ok(kiln_config_set(&table, s, "request-timeout", "1h", "test"));
  expect_ok(kiln_config_set(&table, s, "idle-timeout", "5m", "test"));
  expect_ok(kiln_config_set(&table, s, "token", "", "test"));
  assert_string_equal(s->listen, "tcp:0.0.0.0:9000");
  assert_string_equal(s->log_level, "debug");
  assert_true(s->verbose);
  assert_false(s->cache);
  assert_int_equal(s->workers, 64);
  assert_int_equal(s->nice, -100);
  assert_int_equal(s->cache_size, 1ull << 30);
  assert_int_equal(s->max_message, 1024);
  assert_int_equal(s->request_timeout_ms, 3600000);
  assert_int_equal(s->idle_timeout_ms, 300000);
  assert_non_null(s->token);
  assert_string_equal(s->token, "");

  /* Bounds are inclusive at both ends. */
  expect_ok(kiln_config_set(&table, s, "workers", "1", "test"));
  assert_int_equal(s->workers, 1);
  expect_ok(kiln_config_set(&table, s, "max-message", "1GiB", "test"));
  assert_int_equal(s->max_message, 1ull << 30);
  expect_ok(kiln_config_set(&table, s, "request-timeout", "1ms", "test"));
  assert_int_equal(s->request_timeout_ms, 1);
  /* Unbounded INT takes the whole int64 range. */
  expect_ok(kiln_config_set(&table, s, "nice", "-9223372036854775808", "test"));
  assert_true(s->nice == INT64_MIN);
  expect_ok(kiln_config_set(&table, s, "nice", "9223372036854775807", "test"));
  assert_true(s->nice == INT64_MAX);
}

static void test_bool_spellings(void **state) {
  settings_t *s = *state;
  static const char *const yes[] = {"1", "true", "yes", "on", "TRUE", "Yes", "ON"};
  static const char *const no[] = {"0", "false", "no", "off", "FALSE", "No", "Off"};
  for (size_t i = 0; i < sizeof yes / sizeof yes[0]; i++) {
    s->verbose = false;
    expect_ok(kiln_config_set(&table, s, "verbose", yes[i], "test"));
    assert_true(s->verbose);
    s->verbose = true;
    expect_ok(kiln_config_set(&table, s, "verbose", no[i], "test"));
    assert_false(s->verbose);
  }
}

static void test_set_rejects_bad_values_and_keeps_old(void **state) {
  settings_t *s = *state;
  static const struct {
    const char *name, *value;
  } bad[] = {
      {"log-level", "trace"},
      {"log-level", ""},
      {"verbose", "maybe"},
      {"verbose", ""},
      {"verbose", "2"},
      {"workers", "0"},
      {"workers", "65"},
      {"workers", "-1"},
      {"workers", "abc"},
      {"workers", "4x"},
      {"workers", ""},
      {"workers", "99999999999999999999"},
      {"nice", "1.5"},
      {"nice", "-9223372036854775809"},
      {"cache-size", "-1"},
      {"cache-size", "12 parsecs"},
      {"cache-size", ""},
      {"cache-size", "18446744073709551616"},
      {"cache-size", "9223372036854775808"}, /* fits uint64 but not the int64 range */
      {"cache-size", "16EiB"},
      {"max-message", "1023"},
      {"max-message", "2GiB"},
      {"request-timeout", "0"},
      {"request-timeout", "2h"},
      {"request-timeout", "soon"},
      {"request-timeout", "-1s"},
      {"idle-timeout", "10y"},
  };
  for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
    kiln_status_t st = kiln_config_set(&table, s, bad[i].name, bad[i].value, "SRC-42");
    if (!st) fail_msg("%s=%s accepted", bad[i].name, bad[i].value);
    /* The message names the source and the setting. */
    assert_int_equal(kiln_status_code(st), KILN_STATUS_INVALID_ARGUMENT);
    assert_non_null(strstr(kiln_status_message(st), "SRC-42"));
    assert_non_null(strstr(kiln_status_message(st), bad[i].name));
    kiln_status_free(st);
    assert_settings_equal(s, &defaults_copy);
  }
}

static void test_set_unknown_setting(void **state) {
  settings_t *s = *state;
  expect_invalid(kiln_config_set(&table, s, "nope", "1", "test"), "nope");
  expect_invalid(kiln_config_set(&table, s, "", "1", "test"), NULL);
  expect_invalid(kiln_config_set(&table, s, "work", "1", "test"), "work");
  expect_invalid(kiln_config_set(&table, s, "workers2", "1", "test"), "workers2");
  assert_settings_equal(s, &defaults_copy);
}

static void test_set_string_replaces_and_copies(void **state) {
  settings_t *s = *state;
  char value[] = "first";
  expect_ok(kiln_config_set(&table, s, "listen", value, "test"));
  value[0] = 'X'; /* the setting owns a copy */
  assert_string_equal(s->listen, "first");
  expect_ok(kiln_config_set(&table, s, "listen", "second", "test"));
  assert_string_equal(s->listen, "second");
}

/* ---- config files ---- */

static void test_load_file_parses(void **state) {
  settings_t *s = *state;
  char path[PATH_MAX];
  write_file("good.conf",
             "# kilnd test config\n"
             "\n"
             "   \n"
             "listen = \"tcp:127.0.0.1:7000\"\n"
             "  log_level=debug   \n"
             "verbose = yes\n"
             "cache = 'off'\n"
             "\tworkers\t=\t8\t\n"
             "cache_size = 16MiB\n"
             "max-message = 64KiB\n"
             "request_timeout = 250ms\n"
             "idle-timeout = 5m\n"
             "token = \"a = b # not a comment\"\n"
             "   # an indented comment = still a comment\n"
             "nice=-3",
             path);
  expect_ok(kiln_config_load_file(&table, s, path));
  assert_string_equal(s->listen, "tcp:127.0.0.1:7000");
  assert_string_equal(s->log_level, "debug");
  assert_true(s->verbose);
  assert_false(s->cache);
  assert_int_equal(s->workers, 8);
  assert_int_equal(s->cache_size, 16ull << 20);
  assert_int_equal(s->max_message, 64ull << 10);
  assert_int_equal(s->request_timeout_ms, 250);
  assert_int_equal(s->idle_timeout_ms, 300000);
  assert_string_equal(s->token, "a = b # not a comment");
  assert_int_equal(s->nice, -3); /* last line without '\n' */
}

static void test_load_file_quotes(void **state) {
  settings_t *s = *state;
  static const struct {
    const char *line, *want;
  } cases[] = {
      {"listen = \"  padded  \"\n", "  padded  "},
      {"listen = 'single'\n", "single"},
      {"listen = \"\"\n", ""},
      {"listen = unquoted value\n", "unquoted value"},
      {"listen = \"inner \"quotes\" kept\"\n", "inner \"quotes\" kept"},
      {"listen = \"mismatched'\n", "\"mismatched'"},
      {"listen = \"\n", "\""},
      {"listen = 'it\"s'\n", "it\"s"},
      {"listen = a=b=c\n", "a=b=c"},
  };
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
    char path[PATH_MAX];
    write_file("quotes.conf", cases[i].line, path);
    expect_ok(kiln_config_load_file(&table, s, path));
    if (strcmp(s->listen, cases[i].want) != 0) {
      fail_msg("line [%s]: got [%s], want [%s]", cases[i].line, s->listen, cases[i].want);
    }
  }
}

static void test_load_file_crlf_and_empty(void **state) {
  settings_t *s = *state;
  char path[PATH_MAX];
  write_file("crlf.conf", "# windows\r\nworkers = 3\r\nlisten = x\r\n\r\n", path);
  expect_ok(kiln_config_load_file(&table, s, path));
  assert_int_equal(s->workers, 3);
  assert_string_equal(s->listen, "x");

  settings_t d;
  fresh_defaults(&d);
  kiln_config_deinit(&table, s);
  memset(s, 0, sizeof *s);
  expect_ok(kiln_config_set_defaults(&table, s));
  write_file("empty.conf", "", path);
  expect_ok(kiln_config_load_file(&table, s, path));
  write_file("comments.conf", "# only\n\n  # comments\n", path);
  expect_ok(kiln_config_load_file(&table, s, path));
  assert_settings_equal(s, &d);
  kiln_config_deinit(&table, &d);
}

/* The message must contain "<path>:<line>". */
static void expect_file_error(const char *name, const char *text, int line, const char *also) {
  char path[PATH_MAX], where[PATH_MAX + 16];
  write_file(name, text, path);
  snprintf(where, sizeof where, "%s:%d", path, line);
  kiln_status_t st = kiln_config_load_file(&table, &settings, path);
  if (also && st && !strstr(kiln_status_message(st), also)) {
    print_error("message: %s\n", kiln_status_message(st));
    kiln_status_free(st);
    fail_msg("message lacks '%s'", also);
  }
  expect_invalid(st, where);
}

static void test_load_file_bad_lines(void **state) {
  (void)state;
  expect_file_error("noeq.conf", "workers = 2\n\nthis line has no equals\n", 3, NULL);
  expect_file_error("unknown.conf", "# c\nbogus = 1\nworkers = 2\n", 2, "bogus");
  expect_file_error("badval.conf", "workers = 1\nworkers = 100\n", 2, "workers");
  expect_file_error("badchoice.conf", "\n\n\n\nlog-level = loud\n", 5, "loud");
  expect_file_error("emptykey.conf", "= 5\n", 1, NULL);
  expect_file_error("dashkey.conf", "workers-count = 5\n", 1, "workers-count");
  /* CLI_ONLY settings cannot come from a file. */
  expect_file_error("clionly.conf", "verbose = true\nhelp = true\n", 2, "help");
}

static void test_load_file_missing_is_not_found(void **state) {
  settings_t *s = *state;
  char path[PATH_MAX];
  path_in_tmp("does-not-exist.conf", path);
  kiln_status_t st = kiln_config_load_file(&table, s, path);
  assert_int_equal(kiln_status_code(st), KILN_STATUS_NOT_FOUND);
  assert_non_null(strstr(kiln_status_message(st), path));
  kiln_status_free(st);
  assert_settings_equal(s, &defaults_copy);
}

/* A config file that cannot be read is an error. Regression test: a directory
 * opens with fopen(), getline() then fails with EISDIR, and load_file used to take
 * the read error for end of file and return OK with nothing loaded. */
static void test_load_file_directory_is_an_error(void **state) {
  settings_t *s = *state;
  char path[PATH_MAX];
  path_in_tmp("a-directory.conf", path);
  assert_int_equal(mkdir(path, 0700), 0);
  kiln_status_t st = kiln_config_load_file(&table, s, path);
  if (!st) fail_msg("loading the directory %s as a config file returned OK", path);
  assert_int_not_equal(kiln_status_code(st), KILN_STATUS_OK);
  kiln_status_free(st);
}

/* ---- environment ---- */

static void test_env(void **state) {
  settings_t *s = *state;
  setenv("KILNTEST_WORKERS", "12", 1);
  setenv("KILNTEST_LOG_LEVEL", "warn", 1);
  setenv("KILNTEST_CACHE_SIZE", "4k", 1);
  setenv("KILNTEST_REQUEST_TIMEOUT", "2m", 1);
  setenv("KILNTEST_VERBOSE", "on", 1);
  setenv("KILNTEST_LISTEN", "from env", 1);
  setenv("KILNTEST_HELP", "1", 1);       /* CLI_ONLY: ignored */
  setenv("KILNTEST_CACHE-SIZE", "1", 1); /* not the name: '-' becomes '_' */
  expect_ok(kiln_config_load_env(&table, s));
  assert_int_equal(s->workers, 12);
  assert_string_equal(s->log_level, "warn");
  assert_int_equal(s->cache_size, 4096);
  assert_int_equal(s->request_timeout_ms, 120000);
  assert_true(s->verbose);
  assert_string_equal(s->listen, "from env");
  assert_false(s->help);
  /* Untouched ones keep their defaults. */
  assert_int_equal(s->nice, -5);
  assert_int_equal(s->max_message, 4ull << 20);
  assert_true(s->cache);
}

static void test_env_unset_changes_nothing(void **state) {
  settings_t *s = *state;
  setenv("WORKERS", "50", 1); /* no prefix: not ours */
  setenv("KILNTEST_workers", "51", 1);
  expect_ok(kiln_config_load_env(&table, s));
  unsetenv("WORKERS");
  unsetenv("KILNTEST_workers");
  assert_settings_equal(s, &defaults_copy);
}

static void test_env_bad_value_names_variable(void **state) {
  settings_t *s = *state;
  setenv("KILNTEST_WORKERS", "zero", 1);
  expect_invalid(kiln_config_load_env(&table, s), "KILNTEST_WORKERS");
  setenv("KILNTEST_WORKERS", "8", 1);
  setenv("KILNTEST_IDLE_TIMEOUT", "forever", 1);
  expect_invalid(kiln_config_load_env(&table, s), "KILNTEST_IDLE_TIMEOUT");
}

static void test_env_other_prefix(void **state) {
  settings_t *s = *state;
  static const kiln_config_table_t other = {"other", "OTHERTEST_", options,
                                            sizeof options / sizeof options[0]};
  setenv("KILNTEST_WORKERS", "9", 1);
  setenv("OTHERTEST_WORKERS", "10", 1);
  setenv("OTHERTEST_MAX_MESSAGE", "2048", 1);
  expect_ok(kiln_config_load_env(&other, s));
  assert_int_equal(s->workers, 10);
  assert_int_equal(s->max_message, 2048);
}

/* ---- argv ---- */

static void test_args_forms(void **state) {
  settings_t *s = *state;
  char *argv[] = {"kilnd",
                  "--workers=8",
                  "--listen",
                  "tcp:x",
                  "-j",
                  "3",
                  "-v",
                  "--no-cache",
                  "--log-level=error",
                  "--cache-size",
                  "2GiB",
                  "pos1",
                  "--request-timeout=10s",
                  "-",
                  "--nice",
                  "-7",
                  "--token=",
                  "pos2",
                  "-l",
                  "short:y"};
  const char *pos[4] = {0};
  size_t npos = 99;
  expect_ok(kiln_config_parse_args(&table, s, ARGC(argv), argv, pos, 4, &npos));
  assert_int_equal(s->workers, 3); /* the last one wins */
  assert_string_equal(s->listen, "short:y");
  assert_true(s->verbose);
  assert_false(s->cache);
  assert_string_equal(s->log_level, "error");
  assert_int_equal(s->cache_size, 2ull << 30);
  assert_int_equal(s->request_timeout_ms, 10000);
  assert_int_equal(s->nice, -7);
  assert_string_equal(s->token, "");
  assert_int_equal(npos, 3);
  /* Positionals are borrowed from argv, in order; a lone "-" is one. */
  assert_ptr_equal(pos[0], argv[11]);
  assert_string_equal(pos[1], "-");
  assert_string_equal(pos[2], "pos2");
}

static void test_args_value_with_equals(void **state) {
  settings_t *s = *state;
  char *argv[] = {"kilnd", "--listen=a=b", "--token", "--looks-like-a-flag"};
  expect_ok(kiln_config_parse_args(&table, s, ARGC(argv), argv, NULL, 0, NULL));
  assert_string_equal(s->listen, "a=b");
  assert_string_equal(s->token, "--looks-like-a-flag");
}

static void test_args_bools(void **state) {
  settings_t *s = *state;
  static const struct {
    const char *arg;
    bool verbose;
  } cases[] = {
      {"--verbose", true}, {"--no-verbose", false}, {"--verbose=false", false}, {"--verbose=yes", true},
      {"-v", true},        {"--verbose=0", false},
  };
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
    s->verbose = !cases[i].verbose;
    char *argv[] = {"kilnd", (char *)cases[i].arg};
    expect_ok(kiln_config_parse_args(&table, s, 2, argv, NULL, 0, NULL));
    if (s->verbose != cases[i].verbose) fail_msg("%s gave %d", cases[i].arg, s->verbose);
  }
  /* A bool flag does not take the next word as its value. */
  char *argv[] = {"kilnd", "--no-cache", "--cache", "--verbose", "false"};
  const char *pos[2];
  size_t npos = 0;
  expect_ok(kiln_config_parse_args(&table, s, ARGC(argv), argv, pos, 2, &npos));
  assert_true(s->cache);
  assert_true(s->verbose);
  assert_int_equal(npos, 1);
  assert_string_equal(pos[0], "false");

  char *bad[] = {"kilnd", "--verbose=maybe"};
  expect_invalid(kiln_config_parse_args(&table, s, 2, bad, NULL, 0, NULL), "maybe");
}

/* --help ends the command line: what follows it is not checked (`kilnd --help
 * --bogus` prints the usage), while a bad flag before it is still refused. */
static void test_args_help_ends_flags(void **state) {
  settings_t *s = *state;
  char *argv[] = {"kilnd", "-v", "--help", "--bogus", "--workers=x", "word"};
  const char *pos[2];
  size_t npos = 99;
  expect_ok(kiln_config_parse_args(&table, s, ARGC(argv), argv, pos, 2, &npos));
  assert_true(s->help); /* CLI_ONLY works on the command line */
  assert_true(s->verbose);
  assert_int_equal(s->workers, 4);
  assert_int_equal(npos, 0);

  s->help = false;
  char *shorter[] = {"kilnd", "-h", "-x"};
  expect_ok(kiln_config_parse_args(&table, s, ARGC(shorter), shorter, NULL, 0, NULL));
  assert_true(s->help);

  s->help = false;
  char *after[] = {"kilnd", "--bogus", "--help"};
  expect_invalid(kiln_config_parse_args(&table, s, ARGC(after), after, NULL, 0, NULL), "--bogus");

  s->help = false;
  char *negated[] = {"kilnd", "--no-help", "--bogus"};
  expect_invalid(kiln_config_parse_args(&table, s, ARGC(negated), negated, NULL, 0, NULL), "--bogus");
}

static void test_args_double_dash(void **state) {
  settings_t *s = *state;
  char *argv[] = {"kilnd", "-v", "--", "--workers=9", "-j", "2", "--", "file"};
  const char *pos[8];
  size_t npos = 0;
  expect_ok(kiln_config_parse_args(&table, s, ARGC(argv), argv, pos, 8, &npos));
  assert_true(s->verbose);
  assert_int_equal(s->workers, 4);
  assert_int_equal(npos, 5);
  assert_string_equal(pos[0], "--workers=9");
  assert_string_equal(pos[1], "-j");
  assert_string_equal(pos[2], "2");
  assert_string_equal(pos[3], "--");
  assert_string_equal(pos[4], "file");
}

static void test_args_positional_capacity(void **state) {
  settings_t *s = *state;
  char *argv[] = {"kilnd", "a", "-v", "b", "c"};
  const char *pos[3] = {0};
  size_t npos = 0;
  expect_ok(kiln_config_parse_args(&table, s, ARGC(argv), argv, pos, 3, &npos));
  assert_int_equal(npos, 3);
  assert_string_equal(pos[2], "c");

  /* One more than fits: the extra word is named. */
  const char *small[2] = {0};
  npos = 99;
  expect_invalid(kiln_config_parse_args(&table, s, ARGC(argv), argv, small, 2, &npos), "'c'");
  /* No room at all. */
  expect_invalid(kiln_config_parse_args(&table, s, ARGC(argv), argv, NULL, 0, NULL), "'a'");
  /* The count may be omitted. */
  expect_ok(kiln_config_parse_args(&table, s, ARGC(argv), argv, pos, 3, NULL));

  char *none[] = {"kilnd"};
  npos = 99;
  expect_ok(kiln_config_parse_args(&table, s, 1, none, pos, 3, &npos));
  assert_int_equal(npos, 0);
}

static void test_args_unknown_flags(void **state) {
  settings_t *s = *state;
  static const char *const bad[] = {"--bogus",      "--bogus=1",  "-x",   "-vj",
                                    "--no-workers", "--no-bogus", "--=x", "--no-verbose=1",
                                    "---workers=2", "--work=2"};
  for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
    char *argv[] = {"kilnd", (char *)bad[i], "1"};
    kiln_status_t st = kiln_config_parse_args(&table, s, 3, argv, NULL, 0, NULL);
    if (kiln_status_code(st) != KILN_STATUS_INVALID_ARGUMENT) {
      kiln_status_free(st);
      fail_msg("flag %s not rejected as INVALID_ARGUMENT", bad[i]);
    }
    kiln_status_free(st);
  }
  char *argv[] = {"kilnd", "--bogus=1"};
  expect_invalid(kiln_config_parse_args(&table, s, 2, argv, NULL, 0, NULL), "--bogus");
  assert_settings_equal(s, &defaults_copy);
}

static void test_args_missing_value(void **state) {
  settings_t *s = *state;
  static const char *const last[] = {"--workers",         "-j", "--listen", "--cache-size",
                                     "--request-timeout", "-c"};
  for (size_t i = 0; i < sizeof last / sizeof last[0]; i++) {
    char *argv[] = {"kilnd", "-v", (char *)last[i]};
    kiln_status_t st = kiln_config_parse_args(&table, s, 3, argv, NULL, 0, NULL);
    if (kiln_status_code(st) != KILN_STATUS_INVALID_ARGUMENT) {
      kiln_status_free(st);
      fail_msg("%s without a value not rejected", last[i]);
    }
    assert_non_null(strstr(kiln_status_message(st), last[i]));
    kiln_status_free(st);
  }
  /* A trailing bool needs no value. */
  char *argv[] = {"kilnd", "--verbose"};
  expect_ok(kiln_config_parse_args(&table, s, 2, argv, NULL, 0, NULL));
}

static void test_args_bad_values_name_flag(void **state) {
  settings_t *s = *state;
  char *a1[] = {"kilnd", "--workers=0"};
  expect_invalid(kiln_config_parse_args(&table, s, 2, a1, NULL, 0, NULL), "--workers");
  char *a2[] = {"kilnd", "-j", "abc"};
  expect_invalid(kiln_config_parse_args(&table, s, 3, a2, NULL, 0, NULL), "-j");
  char *a3[] = {"kilnd", "--log-level", "trace"};
  expect_invalid(kiln_config_parse_args(&table, s, 3, a3, NULL, 0, NULL), "trace");
  char *a4[] = {"kilnd", "--max-message=1"};
  expect_invalid(kiln_config_parse_args(&table, s, 2, a4, NULL, 0, NULL), "max-message");
}

/* ---- kiln_config_load: precedence and the config path ---- */

static const char precedence_file[] =
    "workers = 2\n"
    "listen = from-file\n"
    "cache-size = 1k\n"
    "idle-timeout = 1s\n"
    "log-level = warn\n";

static void set_precedence_env(void) {
  setenv("KILNTEST_WORKERS", "3", 1);
  setenv("KILNTEST_LISTEN", "from-env", 1);
  setenv("KILNTEST_LOG_LEVEL", "error", 1);
}

static void assert_precedence_result(const settings_t *s) {
  assert_int_equal(s->workers, 5);                /* args > env > file */
  assert_string_equal(s->listen, "from-env");     /* env > file */
  assert_string_equal(s->log_level, "error");     /* env > file */
  assert_int_equal(s->cache_size, 1024);          /* file > default */
  assert_int_equal(s->idle_timeout_ms, 1000);     /* file > default */
  assert_int_equal(s->request_timeout_ms, 30000); /* default */
  assert_int_equal(s->nice, -5);
  assert_true(s->cache);
}

static void run_load(settings_t *s, int argc, char **argv, kiln_status_code_t want) {
  kiln_config_deinit(&table, s);
  memset(s, 0, sizeof *s);
  const char *pos[4];
  size_t npos = 0;
  kiln_status_t st = kiln_config_load(&table, s, "config", argc, argv, pos, 4, &npos);
  if (kiln_status_code(st) != want) {
    print_error("load: %s: %s\n", kiln_status_code_name(kiln_status_code(st)), kiln_status_message(st));
    kiln_status_free(st);
    fail_msg("wanted %s", kiln_status_code_name(want));
  }
  kiln_status_free(st);
}

static void test_load_precedence_config_by_flag(void **state) {
  settings_t *s = *state;
  char path[PATH_MAX], eq[PATH_MAX + 16];
  write_file("prec.conf", precedence_file, path);
  snprintf(eq, sizeof eq, "--config=%s", path);
  set_precedence_env();

  char *a1[] = {"kilnd", eq, "--workers=5"};
  run_load(s, ARGC(a1), a1, KILN_STATUS_OK);
  assert_precedence_result(s);
  assert_string_equal(s->config, path);

  char *a2[] = {"kilnd", "--workers", "5", "--config", path};
  run_load(s, ARGC(a2), a2, KILN_STATUS_OK);
  assert_precedence_result(s);

  char *a3[] = {"kilnd", "-c", path, "-j", "5"};
  run_load(s, ARGC(a3), a3, KILN_STATUS_OK);
  assert_precedence_result(s);
}

static void test_load_precedence_config_by_env(void **state) {
  settings_t *s = *state;
  char path[PATH_MAX];
  write_file("prec-env.conf", precedence_file, path);
  set_precedence_env();
  setenv("KILNTEST_CONFIG", path, 1);
  char *argv[] = {"kilnd", "--workers=5", "x"};
  const char *pos[2];
  size_t npos = 0;
  kiln_config_deinit(&table, s);
  memset(s, 0, sizeof *s);
  expect_ok(kiln_config_load(&table, s, "config", ARGC(argv), argv, pos, 2, &npos));
  assert_precedence_result(s);
  assert_int_equal(npos, 1);
  assert_string_equal(pos[0], "x");
}

static void test_load_flag_beats_env_for_config_path(void **state) {
  settings_t *s = *state;
  char good[PATH_MAX], other[PATH_MAX], eq[PATH_MAX + 16];
  write_file("flag.conf", "workers = 7\n", good);
  write_file("env.conf", "workers = 6\nnice = 1\n", other);
  setenv("KILNTEST_CONFIG", other, 1);
  snprintf(eq, sizeof eq, "--config=%s", good);
  char *argv[] = {"kilnd", eq};
  run_load(s, ARGC(argv), argv, KILN_STATUS_OK);
  assert_int_equal(s->workers, 7);
  assert_int_equal(s->nice, -5); /* env.conf was not read */

  /* Even when the environment's file does not exist. */
  char missing[PATH_MAX];
  path_in_tmp("missing.conf", missing);
  setenv("KILNTEST_CONFIG", missing, 1);
  run_load(s, ARGC(argv), argv, KILN_STATUS_OK);
  assert_int_equal(s->workers, 7);
}

static void test_load_last_config_flag_wins(void **state) {
  settings_t *s = *state;
  char a[PATH_MAX], b[PATH_MAX];
  write_file("a.conf", "workers = 6\n", a);
  write_file("b.conf", "workers = 7\n", b);
  char *argv[] = {"kilnd", "-c", a, "--config", b};
  run_load(s, ARGC(argv), argv, KILN_STATUS_OK);
  assert_int_equal(s->workers, 7);
  assert_string_equal(s->config, b);
}

static void test_load_missing_config_is_not_found(void **state) {
  settings_t *s = *state;
  char missing[PATH_MAX], eq[PATH_MAX + 16];
  path_in_tmp("nope/kilnd.conf", missing);
  snprintf(eq, sizeof eq, "--config=%s", missing);
  char *a1[] = {"kilnd", eq};
  run_load(s, ARGC(a1), a1, KILN_STATUS_NOT_FOUND);
  char *a2[] = {"kilnd", "-c", missing};
  run_load(s, ARGC(a2), a2, KILN_STATUS_NOT_FOUND);
  char *a3[] = {"kilnd"};
  setenv("KILNTEST_CONFIG", missing, 1);
  run_load(s, ARGC(a3), a3, KILN_STATUS_NOT_FOUND);
}

static void test_load_without_config(void **state) {
  settings_t *s = *state;
  settings_t d;
  fresh_defaults(&d);
  char *a1[] = {"kilnd"};
  run_load(s, 1, a1, KILN_STATUS_OK);
  assert_settings_equal(s, &d);

  /* An empty path in the environment means "no file". */
  setenv("KILNTEST_CONFIG", "", 1);
  run_load(s, 1, a1, KILN_STATUS_OK);
  unsetenv("KILNTEST_CONFIG");

  /* A config flag after "--" is a positional, not a file to read. */
  char *a2[] = {"kilnd", "--", "--config=/nonexistent/kiln.conf"};
  run_load(s, ARGC(a2), a2, KILN_STATUS_OK);
  assert_null(s->config);

  /* config_option NULL: files are skipped; --config is then only a setting. */
  kiln_config_deinit(&table, s);
  memset(s, 0, sizeof *s);
  char *a3[] = {"kilnd", "--config=/nonexistent/kiln.conf"};
  expect_ok(kiln_config_load(&table, s, NULL, ARGC(a3), a3, NULL, 0, NULL));
  assert_string_equal(s->config, "/nonexistent/kiln.conf");
  kiln_config_deinit(&table, &d);
}

static void test_load_reports_errors_from_each_source(void **state) {
  settings_t *s = *state;
  char path[PATH_MAX], eq[PATH_MAX + 16], where[PATH_MAX + 16];
  write_file("bad-load.conf", "workers = 2\nunknown_key = 1\n", path);
  snprintf(eq, sizeof eq, "--config=%s", path);
  snprintf(where, sizeof where, "%s:2", path);
  char *a1[] = {"kilnd", eq};
  kiln_config_deinit(&table, s);
  memset(s, 0, sizeof *s);
  expect_invalid(kiln_config_load(&table, s, "config", 2, a1, NULL, 0, NULL), where);

  setenv("KILNTEST_MAX_MESSAGE", "1", 1);
  char *a2[] = {"kilnd"};
  kiln_config_deinit(&table, s);
  memset(s, 0, sizeof *s);
  expect_invalid(kiln_config_load(&table, s, "config", 1, a2, NULL, 0, NULL), "KILNTEST_MAX_MESSAGE");
  unsetenv("KILNTEST_MAX_MESSAGE");

  char *a3[] = {"kilnd", "--bogus"};
  kiln_config_deinit(&table, s);
  memset(s, 0, sizeof *s);
  expect_invalid(kiln_config_load(&table, s, "config", 2, a3, NULL, 0, NULL), "--bogus");

  /* After --help the bad file is not read (the parse stops there too); before it, it is. */
  char *a4[] = {"kilnd", "--help", eq};
  kiln_config_deinit(&table, s);
  memset(s, 0, sizeof *s);
  expect_ok(kiln_config_load(&table, s, "config", ARGC(a4), a4, NULL, 0, NULL));
  assert_true(s->help);
  char *a5[] = {"kilnd", eq, "-h"};
  kiln_config_deinit(&table, s);
  memset(s, 0, sizeof *s);
  expect_invalid(kiln_config_load(&table, s, "config", ARGC(a5), a5, NULL, 0, NULL), where);
}

/* ---- size and duration parsers ---- */

static void test_parse_size(void **state) {
  (void)state;
  static const struct {
    const char *text;
    uint64_t want;
  } ok[] = {
      {"0", 0},
      {"4096", 4096},
      {"4k", 4096},
      {"4K", 4096},
      {"4kb", 4000},
      {"64KiB", 64 << 10},
      {"64kib", 64 << 10},
      {"16MiB", 16ull << 20},
      {"16m", 16ull << 20},
      {"2MB", 2000000},
      {"1GB", 1000000000},
      {"1GiB", 1ull << 30},
      {"3g", 3ull << 30},
      {"1t", 1ull << 40},
      {"2TiB", 2ull << 40},
      {"10b", 10},
      {"8 MiB", 8ull << 20},
      {"18446744073709551615", UINT64_MAX},
      {"16777215TiB", 16777215ull << 40},
  };
  for (size_t i = 0; i < sizeof ok / sizeof ok[0]; i++) {
    uint64_t v = 12345;
    if (kiln_config_parse_size(ok[i].text, &v) != 0) fail_msg("rejected size '%s'", ok[i].text);
    if (v != ok[i].want) fail_msg("size '%s' = %llu", ok[i].text, (unsigned long long)v);
  }
  static const char *const bad[] = {
      "",
      "-1",
      "+1",
      " 1",
      "abc",
      "k",
      "1.5M",
      "12q",
      "1 k ",
      "0x10",
      "1kibibyte",
      "MiB4",
      "4 4",
      "1e3",
      "18446744073709551616",    /* UINT64_MAX + 1 */
      "99999999999999999999999", /* way over */
      "17179869184GiB",          /* 2^34 * 2^30 = 2^64 */
      "16777216TiB",             /* 2^24 * 2^40 = 2^64 */
      "18446744073709551615k",
  };
  for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
    uint64_t v = 12345;
    if (kiln_config_parse_size(bad[i], &v) != -1) fail_msg("accepted size '%s'", bad[i]);
    assert_int_equal(v, 12345);
  }
  uint64_t v = 12345;
  assert_int_equal(kiln_config_parse_size(NULL, &v), -1);
  assert_int_equal(v, 12345);
}

static void test_parse_duration(void **state) {
  (void)state;
  static const struct {
    const char *text;
    int64_t want;
  } ok[] = {
      {"0", 0},
      {"250ms", 250},
      {"30s", 30000},
      {"5m", 300000},
      {"5min", 300000},
      {"1h", 3600000},
      {"10", 10000},
      {"7 s", 7000},
      {"0ms", 0},
      {"9223372036854775807ms", INT64_MAX},
      {"9223372036854775s", 9223372036854775000LL},
      {"2562047788015h", 2562047788015LL * 3600000},
  };
  for (size_t i = 0; i < sizeof ok / sizeof ok[0]; i++) {
    int64_t v = 12345;
    if (kiln_config_parse_duration_ms(ok[i].text, &v) != 0) {
      fail_msg("rejected duration '%s'", ok[i].text);
    }
    if (v != ok[i].want) fail_msg("duration '%s' = %lld", ok[i].text, (long long)v);
  }
  static const char *const bad[] = {
      "",
      "abc",
      "-1s",
      "+1s",
      " 1s",
      "1.5s",
      "1d",
      "10sec",
      "s",
      "ms",
      "1 h ",
      "1hour",
      "5mins",
      "9223372036854775808ms",  /* INT64_MAX + 1 */
      "9223372036854776s",      /* INT64_MAX / 1000 + 1 seconds */
      "9223372036854776",       /* bare seconds overflow */
      "2562047788016h",         /* INT64_MAX / 3600000 + 1 hours */
      "153722867280913m",       /* INT64_MAX / 60000 + 1 minutes */
      "99999999999999999999ms", /* over ULLONG_MAX */
  };
  for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
    int64_t v = 12345;
    if (kiln_config_parse_duration_ms(bad[i], &v) != -1) fail_msg("accepted duration '%s'", bad[i]);
    assert_int_equal(v, 12345);
  }
  int64_t v = 12345;
  assert_int_equal(kiln_config_parse_duration_ms(NULL, &v), -1);
  assert_int_equal(v, 12345);
}

/* "auto" where an option says so (KILN_CONFIG_AUTO), and only there; dumped as
 * written so the dump re-parses. */
static void test_size_auto(void **state) {
  settings_t *s = *state;
  expect_ok(kiln_config_set(&table, s, "cache-size", "auto", "test"));
  assert_true(s->cache_size == KILN_CONFIG_SIZE_AUTO);
  expect_ok(kiln_config_set(&table, s, "cache-size", "AUTO", "test"));
  assert_true(s->cache_size == KILN_CONFIG_SIZE_AUTO);
  kiln_status_t st = kiln_config_set(&table, s, "max-message", "auto", "test");
  assert_int_equal(kiln_status_code(st), KILN_STATUS_INVALID_ARGUMENT);
  kiln_status_free(st);
  kiln_buf_t dump;
  kiln_buf_init(&dump);
  kiln_config_dump(&table, s, &dump);
  assert_non_null(strstr(dump.data, "cache-size = auto\n"));
  kiln_buf_deinit(&dump);
  expect_ok(kiln_config_set(&table, s, "cache-size", "2GiB", "test"));
  assert_int_equal(s->cache_size, 2ull << 30);
}

/* ---- dump, help, deinit ---- */

static void dump_to_file(const kiln_config_table_t *t, const void *s, const char *name, char *out_path,
                         kiln_buf_t *out_text) {
  kiln_buf_init(out_text);
  kiln_config_dump(t, s, out_text);
  write_file(name, out_text->data, out_path);
}

static void test_dump_round_trips(void **state) {
  settings_t *s = *state;
  expect_ok(kiln_config_set(&table, s, "listen", " tcp:[::1]:9 \"x\" # y = z ", "test"));
  expect_ok(kiln_config_set(&table, s, "log-level", "warn", "test"));
  expect_ok(kiln_config_set(&table, s, "verbose", "true", "test"));
  expect_ok(kiln_config_set(&table, s, "cache", "false", "test"));
  expect_ok(kiln_config_set(&table, s, "workers", "17", "test"));
  expect_ok(kiln_config_set(&table, s, "nice", "-9223372036854775808", "test"));
  expect_ok(kiln_config_set(&table, s, "cache-size", "9223372036854775807", "test"));
  expect_ok(kiln_config_set(&table, s, "max-message", "3MiB", "test"));
  expect_ok(kiln_config_set(&table, s, "request-timeout", "59m", "test"));
  expect_ok(kiln_config_set(&table, s, "idle-timeout", "1ms", "test"));
  expect_ok(kiln_config_set(&table, s, "token", "s3cret-token", "test"));
  expect_ok(kiln_config_set(&table, s, "config", "/etc/kiln.conf", "test"));
  s->help = true;

  char path[PATH_MAX];
  kiln_buf_t text;
  dump_to_file(&table, s, "dump.conf", path, &text);
  /* Secrets, actions and the config path itself stay out of the dump. */
  assert_null(strstr(text.data, "s3cret"));
  assert_null(strstr(text.data, "token"));
  assert_null(strstr(text.data, "help"));
  assert_null(strstr(text.data, "/etc/kiln.conf"));
  /* One "name = value" line per dumpable option. */
  int lines = 0;
  for (const char *p = text.data; *p; p++) lines += *p == '\n';
  assert_int_equal(lines, 10);
  assert_non_null(strstr(text.data, "workers = 17\n"));
  kiln_buf_deinit(&text);

  settings_t back;
  memset(&back, 0, sizeof back);
  expect_ok(kiln_config_set_defaults(&table, &back));
  expect_ok(kiln_config_load_file(&table, &back, path));
  assert_dumpable_equal(&back, s);
  assert_null(back.token);
  assert_false(back.help);
  kiln_config_deinit(&table, &back);
}

static void test_dump_of_defaults_round_trips(void **state) {
  settings_t *s = *state;
  char path[PATH_MAX];
  kiln_buf_t text;
  dump_to_file(&table, s, "defaults.conf", path, &text);
  kiln_buf_deinit(&text);
  /* Load into a zeroed struct with no defaults applied: the dump alone must
   * reproduce every dumpable field. */
  settings_t back;
  memset(&back, 0, sizeof back);
  expect_ok(kiln_config_load_file(&table, &back, path));
  assert_dumpable_equal(&back, s);
  kiln_config_deinit(&table, &back);
}

/* Regression test: a STRING with no default and no value is NULL, but
 * kiln_config_dump used to write it as `name = ""`. Loading that back turned NULL
 * into "" and, for a STRING with choices, failed outright ("" is not a choice). */
static void test_dump_of_unset_strings_round_trips(void **state) {
  (void)state;
  typedef struct {
    char *mode;
    char *label;
  } mini_t;
  static const char *const modes[] = {"fast", "safe", NULL};
  static const kiln_config_option_t mini_opts[] = {
      {"mode", 0, KILN_CONFIG_STRING, offsetof(mini_t, mode), NULL, "MODE", "", 0, 0, modes, 0},
      {"label", 0, KILN_CONFIG_STRING, offsetof(mini_t, label), NULL, "TEXT", "", 0, 0, NULL, 0},
  };
  static const kiln_config_table_t mini = {"mini", "KILNTEST_MINI_", mini_opts, 2};
  mini_t m;
  memset(&m, 0, sizeof m);
  expect_ok(kiln_config_set_defaults(&mini, &m));
  char path[PATH_MAX];
  kiln_buf_t text;
  dump_to_file(&mini, &m, "unset.conf", path, &text);
  kiln_buf_deinit(&text);

  mini_t back;
  memset(&back, 0, sizeof back);
  kiln_status_t st = kiln_config_load_file(&mini, &back, path);
  const char *label = back.label;
  int label_null = label == NULL;
  if (st) print_error("reload: %s\n", kiln_status_message(st));
  int reload_ok = st == NULL;
  kiln_status_free(st);
  kiln_config_deinit(&mini, &back);
  kiln_config_deinit(&mini, &m);
  if (!reload_ok) fail_msg("the dump of unset strings does not re-parse");
  assert_true(label_null);
}

static void test_print_help(void **state) {
  (void)state;
  char *text = NULL;
  size_t len = 0;
  FILE *f = open_memstream(&text, &len);
  assert_non_null(f);
  kiln_config_print_help(&table, f);
  assert_int_equal(fclose(f), 0);
  int lines = 0;
  for (size_t i = 0; i < len; i++) lines += text[i] == '\n';
  assert_int_equal(lines, (int)table.count);
  assert_non_null(strstr(text, "-j, --workers N"));
  assert_non_null(strstr(text, "--cache-size BYTES"));
  assert_non_null(strstr(text, "[default: 4]"));
  assert_non_null(strstr(text, "(env KILNTEST_WORKERS)"));
  assert_non_null(strstr(text, "(env KILNTEST_REQUEST_TIMEOUT)"));
  assert_non_null(strstr(text, "compile workers"));
  /* CLI_ONLY options have no variable. */
  assert_null(strstr(text, "KILNTEST_HELP"));
  free(text);
}

static void test_deinit_frees_and_clears(void **state) {
  settings_t *s = *state;
  expect_ok(kiln_config_set(&table, s, "token", "t", "test"));
  expect_ok(kiln_config_set(&table, s, "config", "c", "test"));
  kiln_config_deinit(&table, s);
  assert_null(s->listen);
  assert_null(s->log_level);
  assert_null(s->token);
  assert_null(s->config);
  /* Scalars are left alone; a second deinit is harmless. */
  assert_int_equal(s->workers, 4);
  kiln_config_deinit(&table, s);
}

/* ---- bugs that corrupt memory: run in a child so one failure cannot take the
 * rest of the program down; under ASan the child exits non-zero. ---- */

static void assert_child_clean(int wstatus, const char *what) {
  if (WIFSIGNALED(wstatus)) fail_msg("%s: child died of signal %d", what, WTERMSIG(wstatus));
  if (WEXITSTATUS(wstatus) != 0) {
    fail_msg("%s: child exited with %d (ASan report or wrong value)", what, WEXITSTATUS(wstatus));
  }
}

static void child_set_string_to_itself(void) {
  settings_t s;
  memset(&s, 0, sizeof s);
  kiln_status_t st = kiln_config_set_defaults(&table, &s);
  if (st) _exit(3);
  /* Re-setting a string from its own current value (e.g. re-applying a setting). */
  st = kiln_config_set(&table, &s, "listen", s.listen, "self");
  if (st) _exit(4);
  if (strcmp(s.listen, "unix:/run/kiln/kilnd.sock") != 0) _exit(2);
  kiln_config_deinit(&table, &s);
  _exit(0);
}

/* Regression test: set_option used to free the old string before copying the new
 * one, so a value aliasing the current string was read after free (ASan reports it;
 * without ASan the copy is usually garbage, which the child checks). */
static void test_set_string_from_own_value(void **state) {
  (void)state;
  assert_child_clean(kiln_test_run_in_child(child_set_string_to_itself), "set listen = listen");
}

static void child_long_env_prefix(void) {
  /* Just past the buffer, where ASan's redzone is (far past may land unseen). */
  static char prefix[131];
  memset(prefix, 'P', 129);
  prefix[129] = '_';
  prefix[130] = '\0';
  static const kiln_config_option_t one[] = {
      OPT("workers", 0, KILN_CONFIG_INT, workers, "4", "N", "", 0, 0, NULL, 0),
  };
  kiln_config_table_t t = {"kilntest", prefix, one, 1};
  settings_t s;
  memset(&s, 0, sizeof s);
  kiln_status_t st = kiln_config_load_env(&t, &s);
  _exit(st ? 5 : 0);
}

/* Regression test: env_name() used snprintf's return value (the length it wanted,
 * not what it wrote) as its index, so a prefix of 128 characters or more wrote the
 * terminating NUL past the 128-byte stack buffer (ASan: stack-buffer-overflow). */
static void test_long_env_prefix_stays_in_bounds(void **state) {
  (void)state;
  assert_child_clean(kiln_test_run_in_child(child_long_env_prefix), "130-character env prefix");
}

/* ---- LIST options (a second table: the main one has no list) ---- */

typedef struct list_settings_s {
  kiln_config_list_t label;
  kiln_config_list_t mode;
  kiln_config_list_t tag;
} list_settings_t;

static const char *const modes[] = {"fast", "slow", NULL};

static const kiln_config_option_t list_options[] = {
    {"label", 'L', KILN_CONFIG_LIST, offsetof(list_settings_t, label), NULL, "K=V", "labels", 0, 0, NULL, 0},
    {"mode", 0, KILN_CONFIG_LIST, offsetof(list_settings_t, mode), NULL, "MODE", "modes", 0, 0, modes, 0},
    {"tag", 0, KILN_CONFIG_LIST, offsetof(list_settings_t, tag), "base", "TAG", "tags", 0, 0, NULL, 0},
};

static const kiln_config_table_t list_table = {"kilntest", "KILNTEST_", list_options,
                                               sizeof list_options / sizeof list_options[0]};

static void assert_list(const kiln_config_list_t *list, size_t n, const char *const *want) {
  if (list->count != n) fail_msg("list has %zu item(s), expected %zu", list->count, n);
  for (size_t i = 0; i < n; i++) assert_string_equal(list->items[i], want[i]);
}

/* Each occurrence on the command line adds one item, in order, whatever form it
 * takes; the default is one item and is replaced by the first occurrence. */
static void test_list_args_append_in_order(void **state) {
  (void)state;
  list_settings_t ls;
  memset(&ls, 0, sizeof ls);
  expect_ok(kiln_config_set_defaults(&list_table, &ls));
  assert_list(&ls.tag, 1, (const char *const[]){"base"});
  assert_list(&ls.label, 0, NULL);
  char *argv[] = {"prog", "--label", "a=1", "-L", "b=2", "--label=c=3", "--tag", "x", "--tag=--y"};
  expect_ok(kiln_config_parse_args(&list_table, &ls, ARGC(argv), argv, NULL, 0, NULL));
  assert_list(&ls.label, 3, (const char *const[]){"a=1", "b=2", "c=3"});
  assert_list(&ls.tag, 2, (const char *const[]){"x", "--y"});
  /* Setting defaults again (e.g. a reload) starts over instead of piling up. */
  expect_ok(kiln_config_set_defaults(&list_table, &ls));
  assert_list(&ls.tag, 1, (const char *const[]){"base"});
  kiln_config_deinit(&list_table, &ls);
  assert_null(ls.label.items);
  assert_int_equal(ls.label.count, 0);
}

/* File lines append within the file; the environment is one item; a source that
 * names the list replaces what a lower one gave; a source that does not name it
 * leaves it alone. */
static void test_list_sources_replace(void **state) {
  (void)state;
  char path[PATH_MAX];
  write_file("list.conf", "label = f=1\nlabel = f=2\n", path);
  list_settings_t ls;
  memset(&ls, 0, sizeof ls);
  expect_ok(kiln_config_set_defaults(&list_table, &ls));
  expect_ok(kiln_config_load_file(&list_table, &ls, path));
  assert_list(&ls.label, 2, (const char *const[]){"f=1", "f=2"});
  expect_ok(kiln_config_load_env(&list_table, &ls)); /* KILNTEST_LABEL unset: kept */
  assert_list(&ls.label, 2, (const char *const[]){"f=1", "f=2"});
  setenv("KILNTEST_LABEL", "e=1,e=2", 1);
  expect_ok(kiln_config_load_env(&list_table, &ls));
  assert_list(&ls.label, 1, (const char *const[]){"e=1,e=2"});
  char *argv[] = {"prog", "--label", "c=1"};
  expect_ok(kiln_config_parse_args(&list_table, &ls, ARGC(argv), argv, NULL, 0, NULL));
  assert_list(&ls.label, 1, (const char *const[]){"c=1"});
  char *none[] = {"prog"};
  expect_ok(kiln_config_parse_args(&list_table, &ls, ARGC(none), none, NULL, 0, NULL));
  assert_list(&ls.label, 1, (const char *const[]){"c=1"});
  kiln_config_deinit(&list_table, &ls);
}

/* Choices are checked per item; kiln_config_set appends; the dump writes one line
 * per item and re-parses to the same lists; help says "repeatable". */
static void test_list_choices_set_dump_help(void **state) {
  (void)state;
  list_settings_t ls;
  memset(&ls, 0, sizeof ls);
  expect_ok(kiln_config_set_defaults(&list_table, &ls));
  char *bad[] = {"prog", "--mode", "fast", "--mode", "medium"};
  expect_invalid(kiln_config_parse_args(&list_table, &ls, ARGC(bad), bad, NULL, 0, NULL),
                 "one of fast, slow");
  expect_ok(kiln_config_set(&list_table, &ls, "mode", "slow", "test"));
  expect_ok(kiln_config_set(&list_table, &ls, "label", "k=v", "test"));
  expect_ok(kiln_config_set(&list_table, &ls, "label", "k2=v2", "test"));
  kiln_buf_t dump;
  kiln_buf_init(&dump);
  kiln_config_dump(&list_table, &ls, &dump);
  char path[PATH_MAX];
  write_file("list-dump.conf", dump.data, path);
  kiln_buf_deinit(&dump);
  list_settings_t again;
  memset(&again, 0, sizeof again);
  expect_ok(kiln_config_set_defaults(&list_table, &again));
  expect_ok(kiln_config_load_file(&list_table, &again, path));
  assert_list(&again.label, 2, (const char *const[]){"k=v", "k2=v2"});
  assert_list(&again.mode, 2, (const char *const[]){"fast", "slow"});
  assert_list(&again.tag, 1, (const char *const[]){"base"});
  kiln_config_deinit(&list_table, &again);
  kiln_config_deinit(&list_table, &ls);

  char *text = NULL;
  size_t len = 0;
  FILE *mem = open_memstream(&text, &len);
  assert_non_null(mem);
  kiln_config_print_help(&list_table, mem);
  fclose(mem);
  assert_non_null(strstr(text, "--label K=V"));
  assert_non_null(strstr(text, "labels (repeatable)"));
  free(text);
}

int main(void) {
#define T(f) cmocka_unit_test_setup_teardown(f, test_setup, test_teardown)
  const struct CMUnitTest tests[] = {
      T(test_defaults),
      T(test_set_defaults_twice_does_not_leak),
      T(test_bad_default_is_reported),
      T(test_set_each_type),
      T(test_size_auto),
      T(test_bool_spellings),
      T(test_set_rejects_bad_values_and_keeps_old),
      T(test_set_unknown_setting),
      T(test_set_string_replaces_and_copies),
      T(test_load_file_parses),
      T(test_load_file_quotes),
      T(test_load_file_crlf_and_empty),
      T(test_load_file_bad_lines),
      T(test_load_file_missing_is_not_found),
      T(test_load_file_directory_is_an_error),
      T(test_env),
      T(test_env_unset_changes_nothing),
      T(test_env_bad_value_names_variable),
      T(test_env_other_prefix),
      T(test_args_forms),
      T(test_args_value_with_equals),
      T(test_args_bools),
      T(test_args_help_ends_flags),
      T(test_args_double_dash),
      T(test_args_positional_capacity),
      T(test_args_unknown_flags),
      T(test_args_missing_value),
      T(test_args_bad_values_name_flag),
      T(test_load_precedence_config_by_flag),
      T(test_load_precedence_config_by_env),
      T(test_load_flag_beats_env_for_config_path),
      T(test_load_last_config_flag_wins),
      T(test_load_missing_config_is_not_found),
      T(test_load_without_config),
      T(test_load_reports_errors_from_each_source),
      T(test_parse_size),
      T(test_parse_duration),
      T(test_dump_round_trips),
      T(test_dump_of_defaults_round_trips),
      T(test_dump_of_unset_strings_round_trips),
      T(test_print_help),
      T(test_deinit_frees_and_clears),
      T(test_set_string_from_own_value),
      T(test_long_env_prefix_stays_in_bounds),
      T(test_list_args_append_in_order),
      T(test_list_sources_replace),
      T(test_list_choices_set_dump_help),
  };
#undef T
  return cmocka_run_group_tests(tests, group_setup, group_teardown);
}
