/* Unit tests for client/cli: kiln_cli_exit_code maps OK to 0, UNAVAILABLE to 3
 * (unreachable), DEADLINE_EXCEEDED to 4 (timeout) and every other code to 1;
 * kiln_cli_report returns the same code and consumes the status; the settings
 * table (program "kiln", prefix "KILN_", unique names, help on every option);
 * defaults (addr 127.0.0.1:7477, timeout 10 s, or 1 h for long-running commands,
 * unless given; 64 MiB, service "", json off);
 * KILN_ADDR and KILN_TIMEOUT override the defaults, --addr / -a / --addr= override
 * KILN_ADDR, a config file sits between defaults and the environment, CLI-only
 * options ignore the environment, bad values are INVALID_ARGUMENT, and positional
 * words (the command) are collected with options before or after them. The
 * compile/fetch/find options: --target and --flag repeatable (values that start
 * with "--" included), --priority restricted to its classes and read from
 * KILN_PRIORITY, CLI-only options ignoring the environment, --limit bounds;
 * kiln_cli_timeout_or; the argument helpers: targets split at commas (blanks and
 * empties dropped), labels parsed (last value of a key wins, '=' in values,
 * missing '=' or key rejected), priority values, UUIDs (version 4, distinct), and
 * the positional-count check. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "base/config.h"
#include "base/status.h"
#include "client/cli.h"

/* ---- Fixture ------------------------------------------------------------- */

static char tmpdir[256];

static const char *const env_vars[] = {
    "KILN_ADDR", "KILN_TIMEOUT", "KILN_MAX_MESSAGE_BYTES", "KILN_SERVICE", "KILN_JSON", "KILN_CONFIG",
    "KILN_HELP", "KILN_VERSION", "KILN_PRIORITY",          "KILN_TARGET",  "KILN_FLAG", "KILN_OUTPUT",
    NULL};

static void clear_env(void) {
  for (size_t i = 0; env_vars[i]; i++) unsetenv(env_vars[i]);
}

static int group_setup(void **state) {
  (void)state;
  snprintf(tmpdir, sizeof tmpdir, "/tmp/kiln-cli-XXXXXX");
  return mkdtemp(tmpdir) ? 0 : -1;
}

static int group_teardown(void **state) {
  (void)state;
  clear_env();
  char cmd[300];
  snprintf(cmd, sizeof cmd, "rm -rf '%s'", tmpdir);
  return system(cmd) == 0 ? 0 : -1;
}

static int setup(void **state) {
  clear_env();
  kiln_cli_settings_t *s = calloc(1, sizeof *s);
  if (!s) return -1;
  *state = s;
  return 0;
}

static int teardown(void **state) {
  kiln_cli_settings_t *s = *state;
  kiln_config_deinit(kiln_cli_settings_table(), s);
  free(s);
  clear_env();
  return 0;
}

/* Runs the CLI's whole settings sequence on argv (NULL-terminated, argv[0] "kiln"). */
static KILN_MUST_USE kiln_status_t load(kiln_cli_settings_t *s, char **argv, const char **positional,
                                        size_t max_positional, size_t *out_count) {
  int argc = 0;
  while (argv[argc]) argc++;
  return kiln_config_load(kiln_cli_settings_table(), s, "config", argc, argv, positional, max_positional,
                          out_count);
}

#define assert_load_ok(s, ...)                                        \
  do {                                                                \
    char *argv__[] = {"kiln", __VA_ARGS__};                           \
    kiln_status_t st__ = load((s), argv__, NULL, 0, NULL);            \
    if (st__) fail_msg("load failed: %s", kiln_status_message(st__)); \
  } while (0)

/* ---- Exit codes ---------------------------------------------------------- */

static void test_exit_code_mapping(void **state) {
  (void)state;
  assert_int_equal(kiln_cli_exit_code(NULL), KILN_EXIT_OK);
  assert_int_equal(KILN_EXIT_OK, 0);
  for (int c = 1; c < KILN_STATUS_CODE_COUNT; c++) {
    kiln_status_t st = KILN_STATUS((kiln_status_code_t)c, "code %d", c);
    int expected = c == KILN_STATUS_UNAVAILABLE         ? KILN_EXIT_UNREACHABLE
                   : c == KILN_STATUS_DEADLINE_EXCEEDED ? KILN_EXIT_TIMEOUT
                   : (c == KILN_STATUS_UNAUTHENTICATED || c == KILN_STATUS_PERMISSION_DENIED)
                       ? KILN_EXIT_DENIED
                       : KILN_EXIT_FAILED;
    int got = kiln_cli_exit_code(st);
    if (got != expected) {
      fail_msg("%s: exit code %d, expected %d", kiln_status_code_name((kiln_status_code_t)c), got, expected);
    }
    kiln_status_free(st);
  }
  /* The documented numbers. */
  assert_int_equal(KILN_EXIT_FAILED, 1);
  assert_int_equal(KILN_EXIT_USAGE, 2);
  assert_int_equal(KILN_EXIT_UNREACHABLE, 3);
  assert_int_equal(KILN_EXIT_TIMEOUT, 4);
  assert_int_equal(KILN_EXIT_NOT_SERVING, 5);
}

static void test_report_returns_exit_code(void **state) {
  kiln_cli_settings_t *s = *state;
  assert_load_ok(s, NULL);
  /* kiln_cli_report consumes the status (ASan checks the leak) and returns the
   * same code kiln_cli_exit_code gives. */
  assert_int_equal(kiln_cli_report(s, "info", 10000, KILN_STATUS(KILN_STATUS_UNAVAILABLE, "refused")),
                   KILN_EXIT_UNREACHABLE);
  assert_int_equal(kiln_cli_report(s, "info", 10000, KILN_STATUS(KILN_STATUS_DEADLINE_EXCEEDED, "too slow")),
                   KILN_EXIT_TIMEOUT);
  assert_int_equal(kiln_cli_report(s, "info", 10000, KILN_STATUS(KILN_STATUS_NOT_FOUND, "nope")),
                   KILN_EXIT_FAILED);
  assert_int_equal(kiln_cli_report(s, "info", 10000, KILN_STATUS(KILN_STATUS_INTERNAL, "bug")),
                   KILN_EXIT_FAILED);
}

/* ---- Table and defaults -------------------------------------------------- */

static void test_table_shape(void **state) {
  (void)state;
  const kiln_config_table_t *t = kiln_cli_settings_table();
  assert_non_null(t);
  assert_string_equal(t->program, "kiln");
  assert_string_equal(t->env_prefix, "KILN_");
  bool has_addr = false, has_timeout = false;
  for (size_t i = 0; i < t->count; i++) {
    const kiln_config_option_t *o = &t->options[i];
    if (!o->help || !*o->help) fail_msg("option %s has no help", o->name);
    for (size_t j = 0; j < i; j++) {
      assert_string_not_equal(o->name, t->options[j].name);
      if (o->short_name) assert_true(o->short_name != t->options[j].short_name);
    }
    has_addr |= strcmp(o->name, "addr") == 0;
    has_timeout |= strcmp(o->name, "timeout") == 0;
  }
  assert_true(has_addr);
  assert_true(has_timeout);
}

static void test_defaults(void **state) {
  kiln_cli_settings_t *s = *state;
  assert_load_ok(s, NULL);
  assert_string_equal(s->addr, "127.0.0.1:7477");
  assert_string_equal(s->addr, KILN_CLI_DEFAULT_ADDR);
  /* No --timeout: each command uses its default, 10 s (1 h for long ones). */
  assert_int_equal(kiln_cli_timeout_ms(s, false), 10000);
  assert_int_equal(kiln_cli_timeout_ms(s, true), 3600 * 1000);
  assert_int_equal(s->max_message_bytes, 64ull << 20);
  assert_string_equal(s->service, "");
  assert_false(s->json);
  assert_false(s->help);
  assert_false(s->version);
  assert_null(s->config);
}

/* ---- Sources and precedence ---------------------------------------------- */

static void test_env_overrides_default(void **state) {
  kiln_cli_settings_t *s = *state;
  setenv("KILN_ADDR", "unix:/run/kilnd.sock", 1);
  setenv("KILN_TIMEOUT", "250ms", 1);
  setenv("KILN_JSON", "yes", 1);
  assert_load_ok(s, NULL);
  assert_string_equal(s->addr, "unix:/run/kilnd.sock");
  assert_int_equal(s->timeout_ms, 250);
  /* A timeout that was given applies to every command. */
  assert_int_equal(kiln_cli_timeout_ms(s, false), 250);
  assert_int_equal(kiln_cli_timeout_ms(s, true), 250);
  assert_true(s->json);
}

static void test_flag_overrides_env(void **state) {
  kiln_cli_settings_t *s = *state;
  setenv("KILN_ADDR", "10.0.0.1:1", 1);
  assert_load_ok(s, "--addr", "[::1]:7000", NULL);
  assert_string_equal(s->addr, "[::1]:7000");
  kiln_config_deinit(kiln_cli_settings_table(), s);
  memset(s, 0, sizeof *s);

  assert_load_ok(s, "--addr=127.0.0.1:9", NULL);
  assert_string_equal(s->addr, "127.0.0.1:9");
  kiln_config_deinit(kiln_cli_settings_table(), s);
  memset(s, 0, sizeof *s);

  assert_load_ok(s, "-a", "127.0.0.1:10", NULL);
  assert_string_equal(s->addr, "127.0.0.1:10");
  kiln_config_deinit(kiln_cli_settings_table(), s);
  memset(s, 0, sizeof *s);

  /* Without the flag the variable stands. */
  assert_load_ok(s, NULL);
  assert_string_equal(s->addr, "10.0.0.1:1");
}

static void test_last_flag_wins(void **state) {
  kiln_cli_settings_t *s = *state;
  assert_load_ok(s, "--addr", "a:1", "--addr", "b:2", "--timeout", "5s", "-t", "2m", NULL);
  assert_string_equal(s->addr, "b:2");
  assert_int_equal(s->timeout_ms, 120000);
}

static void test_config_file_between_default_and_env(void **state) {
  kiln_cli_settings_t *s = *state;
  char conf[320];
  snprintf(conf, sizeof conf, "%s/kiln.conf", tmpdir);
  FILE *f = fopen(conf, "w");
  assert_non_null(f);
  fprintf(f, "addr = file-host:1\ntimeout = 3s\n");
  fclose(f);

  assert_load_ok(s, "--config", conf, NULL);
  assert_string_equal(s->addr, "file-host:1");
  assert_int_equal(s->timeout_ms, 3000);
  kiln_config_deinit(kiln_cli_settings_table(), s);
  memset(s, 0, sizeof *s);

  setenv("KILN_ADDR", "env-host:2", 1);
  assert_load_ok(s, "-c", conf, NULL);
  assert_string_equal(s->addr, "env-host:2"); /* environment beats the file */
  assert_int_equal(s->timeout_ms, 3000);      /* the file beats the default */
  unlink(conf);
}

static void test_cli_only_options_ignore_env(void **state) {
  kiln_cli_settings_t *s = *state;
  setenv("KILN_SERVICE", "kiln.v1.Kiln", 1);
  setenv("KILN_HELP", "1", 1);
  setenv("KILN_VERSION", "1", 1);
  assert_load_ok(s, NULL);
  assert_string_equal(s->service, "");
  assert_false(s->help);
  assert_false(s->version);
  kiln_config_deinit(kiln_cli_settings_table(), s);
  memset(s, 0, sizeof *s);
  assert_load_ok(s, "--service", "kiln.v1.Kiln", "--json", NULL);
  assert_string_equal(s->service, "kiln.v1.Kiln");
  assert_true(s->json);
}

static void test_bad_values_rejected(void **state) {
  kiln_cli_settings_t *s = *state;
  static const char *const bad[][2] = {
      {"--timeout", "0"},
      {"--timeout", "soon"},
      {"--timeout", "25h"},
      {"--max-message-bytes", "10"},
      {"--max-message-bytes", "4GiB"},
      {"--no-such-flag", "x"},
  };
  for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
    kiln_config_deinit(kiln_cli_settings_table(), s);
    memset(s, 0, sizeof *s);
    char *argv[] = {"kiln", (char *)bad[i][0], (char *)bad[i][1], NULL};
    kiln_status_t st = load(s, argv, NULL, 0, NULL);
    if (kiln_status_code(st) != KILN_STATUS_INVALID_ARGUMENT) {
      fail_msg("%s %s: expected INVALID_ARGUMENT, got %s", bad[i][0], bad[i][1],
               kiln_status_code_name(kiln_status_code(st)));
    }
    kiln_status_free(st);
  }
  /* A bad variable fails the same way. */
  kiln_config_deinit(kiln_cli_settings_table(), s);
  memset(s, 0, sizeof *s);
  setenv("KILN_TIMEOUT", "forever", 1);
  char *argv[] = {"kiln", NULL};
  kiln_status_t st = load(s, argv, NULL, 0, NULL);
  assert_int_equal(kiln_status_code(st), KILN_STATUS_INVALID_ARGUMENT);
  kiln_status_free(st);
  /* A missing value. */
  unsetenv("KILN_TIMEOUT");
  kiln_config_deinit(kiln_cli_settings_table(), s);
  memset(s, 0, sizeof *s);
  char *argv2[] = {"kiln", "--addr", NULL};
  st = load(s, argv2, NULL, 0, NULL);
  assert_int_equal(kiln_status_code(st), KILN_STATUS_INVALID_ARGUMENT);
  kiln_status_free(st);
}

static void test_command_and_options_in_any_order(void **state) {
  kiln_cli_settings_t *s = *state;
  const char *positional[4];
  size_t n = 99;
  char *argv[] = {"kiln", "--json", "stats", "--addr", "h:1", "extra", NULL};
  kiln_status_t st = load(s, argv, positional, 4, &n);
  if (st) fail_msg("load: %s", kiln_status_message(st));
  assert_int_equal(n, 2);
  assert_string_equal(positional[0], "stats");
  assert_string_equal(positional[1], "extra");
  assert_true(s->json);
  assert_string_equal(s->addr, "h:1");
}

/* ---- compile / fetch / find options -------------------------------------- */

static void assert_items(const kiln_config_list_t *list, size_t n, const char *const *want) {
  if (list->count != n) fail_msg("%zu item(s), expected %zu", list->count, n);
  for (size_t i = 0; i < n; i++) assert_string_equal(list->items[i], want[i]);
}

static void test_compile_options(void **state) {
  kiln_cli_settings_t *s = *state;
  const char *positional[4];
  size_t n = 0;
  char *argv[] = {"kiln",
                  "compile",
                  "model.mlir",
                  "--target",
                  "sm_89,gfx950",
                  "--target=ada",
                  "--flag",
                  "--iree-opt-level=O3",
                  "--flag=--iree-x",
                  "-o",
                  "out",
                  "--label",
                  "model=mlp",
                  "--label",
                  "ci.run=7",
                  "--priority",
                  "batch",
                  "--request-id",
                  "abc",
                  NULL};
  kiln_status_t st = load(s, argv, positional, 4, &n);
  if (st) fail_msg("load: %s", kiln_status_message(st));
  assert_int_equal(n, 2);
  assert_string_equal(positional[0], "compile");
  assert_string_equal(positional[1], "model.mlir");
  assert_items(&s->target, 2, (const char *const[]){"sm_89,gfx950", "ada"});
  assert_items(&s->flag, 2, (const char *const[]){"--iree-opt-level=O3", "--iree-x"});
  assert_items(&s->label, 2, (const char *const[]){"model=mlp", "ci.run=7"});
  assert_string_equal(s->output, "out");
  assert_string_equal(s->priority, "batch");
  assert_int_equal(kiln_cli_priority_value(s->priority), 2);
  assert_string_equal(s->request_id, "abc");
  /* The compile default is 30 minutes unless --timeout says otherwise. */
  assert_int_equal(kiln_cli_timeout_or(s, KILN_CLI_COMPILE_TIMEOUT_MS), 30 * 60 * 1000);
}

static void test_find_options_and_bounds(void **state) {
  kiln_cli_settings_t *s = *state;
  assert_load_ok(s, "--source", "x.mlir", "--limit", "1000", "--all", "--page-token", "t1", "--timeout", "5s",
                 NULL);
  assert_string_equal(s->source, "x.mlir");
  assert_int_equal(s->limit, 1000);
  assert_true(s->all);
  assert_string_equal(s->page_token, "t1");
  assert_int_equal(kiln_cli_timeout_or(s, KILN_CLI_COMPILE_TIMEOUT_MS), 5000);
  static const char *const bad[][2] = {
      {"--limit", "0"},
      {"--limit", "1001"},
      {"--priority", "urgent"},
      {"--limit", "ten"},
  };
  for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
    kiln_config_deinit(kiln_cli_settings_table(), s);
    memset(s, 0, sizeof *s);
    char *argv[] = {"kiln", (char *)bad[i][0], (char *)bad[i][1], NULL};
    kiln_status_t st = load(s, argv, NULL, 0, NULL);
    if (kiln_status_code(st) != KILN_STATUS_INVALID_ARGUMENT) {
      fail_msg("%s %s: expected INVALID_ARGUMENT", bad[i][0], bad[i][1]);
    }
    kiln_status_free(st);
  }
}

static void test_priority_from_env_targets_not(void **state) {
  kiln_cli_settings_t *s = *state;
  setenv("KILN_PRIORITY", "bulk", 1);
  setenv("KILN_TARGET", "sm_89", 1); /* CLI-only: ignored */
  setenv("KILN_OUTPUT", "/tmp/nowhere", 1);
  assert_load_ok(s, NULL);
  assert_string_equal(s->priority, "bulk");
  assert_int_equal(kiln_cli_priority_value(s->priority), 3);
  assert_int_equal(s->target.count, 0);
  assert_null(s->output);
  /* The flag beats the variable. */
  kiln_config_deinit(kiln_cli_settings_table(), s);
  memset(s, 0, sizeof *s);
  assert_load_ok(s, "--priority", "interactive", NULL);
  assert_int_equal(kiln_cli_priority_value(s->priority), 1);
  assert_int_equal(kiln_cli_priority_value(NULL), 0);
  assert_int_equal(kiln_cli_priority_value(""), 0);
}

static void test_targets_split(void **state) {
  (void)state;
  char *items[] = {"sm_89, gfx950", ",,", " ada ", "x86_64,", ""};
  kiln_config_list_t list = {items, 5};
  char **names = NULL;
  size_t n = 99;
  kiln_cli_targets_split(&list, &names, &n);
  assert_int_equal(n, 4);
  assert_string_equal(names[0], "sm_89");
  assert_string_equal(names[1], "gfx950");
  assert_string_equal(names[2], "ada");
  assert_string_equal(names[3], "x86_64");
  kiln_cli_strings_free(names, n);
  kiln_config_list_t empty = {NULL, 0};
  kiln_cli_targets_split(&empty, &names, &n);
  assert_int_equal(n, 0);
  assert_null(names);
}

static void test_labels_parse(void **state) {
  (void)state;
  char *items[] = {"model=mlp", "ci.run=1", "expr=a=b", "empty=", "model=resnet"};
  kiln_config_list_t list = {items, 5};
  kiln_cli_label_t *labels = NULL;
  size_t n = 0;
  kiln_status_t st = kiln_cli_labels_parse(&list, &labels, &n);
  assert_null(st);
  assert_int_equal(n, 4);
  assert_string_equal(labels[0].key, "model");
  assert_string_equal(labels[0].value, "resnet"); /* the last value wins, first position */
  assert_string_equal(labels[1].key, "ci.run");
  assert_string_equal(labels[2].key, "expr");
  assert_string_equal(labels[2].value, "a=b");
  assert_string_equal(labels[3].value, "");
  kiln_cli_labels_free(labels, n);

  char *bad1[] = {"model=mlp", "novalue"};
  kiln_config_list_t l1 = {bad1, 2};
  st = kiln_cli_labels_parse(&l1, &labels, &n);
  assert_int_equal(kiln_status_code(st), KILN_STATUS_INVALID_ARGUMENT);
  assert_non_null(strstr(kiln_status_message(st), "novalue"));
  assert_null(labels);
  assert_int_equal(n, 0);
  kiln_status_free(st);
  char *bad2[] = {"=x"};
  kiln_config_list_t l2 = {bad2, 1};
  st = kiln_cli_labels_parse(&l2, &labels, &n);
  assert_int_equal(kiln_status_code(st), KILN_STATUS_INVALID_ARGUMENT);
  kiln_status_free(st);
}

static void test_uuid(void **state) {
  (void)state;
  char a[37], b[37];
  kiln_cli_uuid(a);
  kiln_cli_uuid(b);
  assert_int_equal(strlen(a), 36);
  assert_string_not_equal(a, b);
  for (int i = 0; i < 36; i++) {
    if (i == 8 || i == 13 || i == 18 || i == 23)
      assert_int_equal(a[i], '-');
    else
      assert_non_null(strchr("0123456789abcdef", a[i]));
  }
  assert_int_equal(a[14], '4');
  assert_non_null(strchr("89ab", a[19]));
}

static void test_expect_args(void **state) {
  (void)state;
  assert_int_equal(kiln_cli_expect_args("fetch", 0, 0, 1, "fetch DIGEST"), 0);
  assert_int_equal(kiln_cli_expect_args("fetch", 1, 0, 1, "fetch DIGEST"), 0);
  assert_int_equal(kiln_cli_expect_args("fetch", 2, 0, 1, "fetch DIGEST"), KILN_EXIT_USAGE);
  assert_int_equal(kiln_cli_expect_args("status", 0, 1, 1, "status JOB"), KILN_EXIT_USAGE);
}

int main(void) {
#define T(f) cmocka_unit_test_setup_teardown(f, setup, teardown)
  const struct CMUnitTest tests[] = {
      T(test_exit_code_mapping),
      T(test_report_returns_exit_code),
      T(test_table_shape),
      T(test_defaults),
      T(test_env_overrides_default),
      T(test_flag_overrides_env),
      T(test_last_flag_wins),
      T(test_config_file_between_default_and_env),
      T(test_cli_only_options_ignore_env),
      T(test_bad_values_rejected),
      T(test_command_and_options_in_any_order),
      T(test_compile_options),
      T(test_find_options_and_bounds),
      T(test_priority_from_env_targets_not),
      T(test_targets_split),
      T(test_labels_parse),
      T(test_uuid),
      T(test_expect_args),
  };
#undef T
  return cmocka_run_group_tests(tests, group_setup, group_teardown);
}
