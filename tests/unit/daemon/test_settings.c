/* Unit tests for daemon/settings: kilnd's config table. Defaults load and have the
 * documented values; every option has a unique name, a unique short name, help
 * text and a metavar exactly when it takes a value; the program is "kilnd" and
 * the environment prefix "KILND_"; the default listen address parses and is
 * loopback; log-level accepts only its four choices; max-message-bytes and
 * drain-timeout bounds are enforced (both ends, from flags, variables and the
 * config file); KILND_* variables are read and CLI-only options are not. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "base/config.h"
#include "base/status.h"
#include "daemon/listen.h"
#include "daemon/settings.h"
#include "tests/unit/support/testing.h"

/* ---- Fixture: defaults loaded into a fresh struct ------------------------ */

static char tmpdir[256];

static int group_setup(void **state) {
  (void)state;
  snprintf(tmpdir, sizeof tmpdir, "/tmp/kiln-settings-XXXXXX");
  return mkdtemp(tmpdir) ? 0 : -1;
}

static int group_teardown(void **state) {
  (void)state;
  char cmd[300];
  snprintf(cmd, sizeof cmd, "rm -rf '%s'", tmpdir);
  return system(cmd) == 0 ? 0 : -1;
}

static const char *const env_vars[] = {
    "KILND_LISTEN", "KILND_STATE_DIR", "KILND_LOG_LEVEL", "KILND_MAX_MESSAGE_BYTES", "KILND_DRAIN_TIMEOUT",
    "KILND_CONFIG", "KILND_HELP",      "KILND_VERSION",   "KILND_PRINT_CONFIG",      NULL,
};

static void clear_env(void) {
  for (size_t i = 0; env_vars[i]; i++) unsetenv(env_vars[i]);
}

static int setup(void **state) {
  clear_env();
  kilnd_settings_t *s = calloc(1, sizeof *s);
  if (!s) return -1;
  kiln_status_t st = kiln_config_set_defaults(kilnd_settings_table(), s);
  if (st) {
    kiln_status_free(st);
    free(s);
    return -1;
  }
  *state = s;
  return 0;
}

static int teardown(void **state) {
  kilnd_settings_t *s = *state;
  kiln_config_deinit(kilnd_settings_table(), s);
  free(s);
  clear_env();
  return 0;
}

#define assert_code kiln_test_assert_code

static KILN_MUST_USE kiln_status_t set(kilnd_settings_t *s, const char *name, const char *value) {
  return kiln_config_set(kilnd_settings_table(), s, name, value, "test");
}

/* ---- Table shape --------------------------------------------------------- */

static void test_table_identity(void **state) {
  (void)state;
  const kiln_config_table_t *t = kilnd_settings_table();
  assert_non_null(t);
  assert_ptr_equal(t, kilnd_settings_table()); /* static, stable */
  assert_string_equal(t->program, "kilnd");
  assert_string_equal(t->env_prefix, "KILND_");
  assert_true(t->count >= 6);
}

static void test_every_option_documented(void **state) {
  (void)state;
  const kiln_config_table_t *t = kilnd_settings_table();
  for (size_t i = 0; i < t->count; i++) {
    const kiln_config_option_t *o = &t->options[i];
    assert_non_null(o->name);
    if (!o->help || strlen(o->help) < 10) fail_msg("option %s has no real help text", o->name);
    /* Options with a value show it in --help; booleans do not take one. */
    if (o->type == KILN_CONFIG_BOOL) {
      if (o->metavar) fail_msg("boolean option %s has a metavar", o->name);
    } else if (!o->metavar || !*o->metavar) {
      fail_msg("option %s takes a value but has no metavar", o->name);
    }
    /* Names are flag-shaped: lower case, digits and '-'. */
    for (const char *p = o->name; *p; p++) {
      if (!((*p >= 'a' && *p <= 'z') || (*p >= '0' && *p <= '9') || *p == '-')) {
        fail_msg("option name '%s' is not lower-case-with-dashes", o->name);
      }
    }
    for (size_t j = 0; j < i; j++) {
      if (strcmp(o->name, t->options[j].name) == 0) fail_msg("duplicate option %s", o->name);
      if (o->short_name && o->short_name == t->options[j].short_name) {
        fail_msg("options %s and %s share -%c", o->name, t->options[j].name, o->short_name);
      }
    }
    /* Every default is itself a valid value. */
    if (o->default_value) {
      kilnd_settings_t scratch;
      memset(&scratch, 0, sizeof scratch);
      kiln_status_t st = kiln_config_set(t, &scratch, o->name, o->default_value, "test");
      if (st) fail_msg("default of %s rejected: %s", o->name, kiln_status_message(st));
      kiln_config_deinit(t, &scratch);
    }
  }
}

static void test_expected_options_present(void **state) {
  (void)state;
  static const char *const names[] = {
      "config",        "listen",       "state-dir", "log-level", "max-message-bytes",
      "drain-timeout", "print-config", "help",      "version"};
  const kiln_config_table_t *t = kilnd_settings_table();
  for (size_t n = 0; n < sizeof names / sizeof names[0]; n++) {
    size_t i = 0;
    while (i < t->count && strcmp(t->options[i].name, names[n]) != 0) i++;
    if (i == t->count) fail_msg("option %s missing", names[n]);
  }
}

/* ---- Defaults ------------------------------------------------------------ */

static void test_defaults(void **state) {
  kilnd_settings_t *s = *state;
  assert_null(s->config);
  assert_string_equal(s->listen, KILN_DEFAULT_LISTEN);
  assert_string_equal(s->listen, "127.0.0.1:7477");
  assert_non_null(s->state_dir);
  assert_true(strlen(s->state_dir) > 0);
  assert_string_equal(s->log_level, "info");
  assert_int_equal(s->max_message_bytes, 64ull * 1024 * 1024);
  assert_int_equal(s->drain_timeout_ms, 10000);
  assert_false(s->print_config);
  assert_false(s->help);
  assert_false(s->version);
}

static void test_default_listen_is_loopback(void **state) {
  kilnd_settings_t *s = *state;
  kilnd_listen_addr_t a;
  kiln_status_t st = kilnd_listen_parse(s->listen, &a);
  if (st) fail_msg("default listen '%s' does not parse: %s", s->listen, kiln_status_message(st));
  assert_false(a.is_unix);
  if (strcmp(a.host, "127.0.0.1") != 0 && strcmp(a.host, "::1") != 0 && strcmp(a.host, "localhost") != 0) {
    fail_msg("default listen host '%s' is not loopback", a.host);
  }
  assert_true(a.port > 0);
  kilnd_listen_addr_deinit(&a);
}

/* ---- Validation ---------------------------------------------------------- */

static void test_log_level_choices(void **state) {
  kilnd_settings_t *s = *state;
  static const char *const good[] = {"debug", "info", "warn", "error"};
  for (size_t i = 0; i < 4; i++) {
    assert_code(set(s, "log-level", good[i]), KILN_STATUS_OK);
    assert_string_equal(s->log_level, good[i]);
  }
  static const char *const bad[] = {"verbose", "", "INFO", "warning", "trace", "info "};
  for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
    kiln_status_t st = set(s, "log-level", bad[i]);
    if (kiln_status_code(st) != KILN_STATUS_INVALID_ARGUMENT) {
      fail_msg("log-level '%s' accepted", bad[i]);
    }
    kiln_status_free(st);
    assert_string_equal(s->log_level, "error"); /* unchanged by the rejected value */
  }
}

static const kiln_config_option_t *option(const char *name) {
  const kiln_config_table_t *t = kilnd_settings_table();
  for (size_t i = 0; i < t->count; i++) {
    if (strcmp(t->options[i].name, name) == 0) return &t->options[i];
  }
  fail_msg("option %s missing", name);
  return NULL;
}

static void test_max_message_bytes_bounds(void **state) {
  kilnd_settings_t *s = *state;
  const kiln_config_option_t *o = option("max-message-bytes");
  /* Bounded at both ends: at least 1 KiB (a GetServerInfo answer must fit) and at
   * most INT32_MAX (gRPC's message size limits are ints). */
  assert_int_equal(o->type, KILN_CONFIG_SIZE);
  assert_true(o->min >= 1024);
  assert_true(o->max > o->min);
  assert_true(o->max <= INT32_MAX);
  char text[32];

  snprintf(text, sizeof text, "%lld", (long long)o->min);
  assert_code(set(s, "max-message-bytes", text), KILN_STATUS_OK);
  assert_int_equal(s->max_message_bytes, (uint64_t)o->min);
  snprintf(text, sizeof text, "%lld", (long long)o->max);
  assert_code(set(s, "max-message-bytes", text), KILN_STATUS_OK);
  assert_int_equal(s->max_message_bytes, (uint64_t)o->max);
  assert_code(set(s, "max-message-bytes", "4MiB"), KILN_STATUS_OK);
  assert_int_equal(s->max_message_bytes, 4u << 20);

  char below[32], above[32];
  snprintf(below, sizeof below, "%lld", (long long)o->min - 1);
  snprintf(above, sizeof above, "%lld", (long long)o->max + 1);
  const char *const bad[] = {below,  above, "1023", "0", "2147483648",          "2GiB",
                             "1TiB", "-1",  "lots", "",  "18446744073709551616"};
  for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
    kiln_status_t st = set(s, "max-message-bytes", bad[i]);
    if (kiln_status_code(st) != KILN_STATUS_INVALID_ARGUMENT) {
      fail_msg("max-message-bytes '%s' accepted (now %llu)", bad[i],
               (unsigned long long)s->max_message_bytes);
    }
    kiln_status_free(st);
    assert_int_equal(s->max_message_bytes, 4u << 20);
  }
}

static void test_drain_timeout_bounds(void **state) {
  kilnd_settings_t *s = *state;
  assert_code(set(s, "drain-timeout", "0"), KILN_STATUS_OK);
  assert_int_equal(s->drain_timeout_ms, 0);
  assert_code(set(s, "drain-timeout", "250ms"), KILN_STATUS_OK);
  assert_int_equal(s->drain_timeout_ms, 250);
  assert_code(set(s, "drain-timeout", "1h"), KILN_STATUS_OK);
  assert_int_equal(s->drain_timeout_ms, 3600 * 1000);
  assert_code(set(s, "drain-timeout", "61m"), KILN_STATUS_INVALID_ARGUMENT);
  assert_code(set(s, "drain-timeout", "3601s"), KILN_STATUS_INVALID_ARGUMENT);
  assert_code(set(s, "drain-timeout", "soon"), KILN_STATUS_INVALID_ARGUMENT);
  assert_int_equal(s->drain_timeout_ms, 3600 * 1000);
}

static void test_unknown_setting_rejected(void **state) {
  kilnd_settings_t *s = *state;
  assert_code(set(s, "listen-address", "x:1"), KILN_STATUS_INVALID_ARGUMENT);
  assert_code(set(s, "no-such-thing", "1"), KILN_STATUS_INVALID_ARGUMENT);
  assert_string_equal(s->listen, KILN_DEFAULT_LISTEN);
}

/* ---- Sources ------------------------------------------------------------- */

static void test_env_prefix_kilnd(void **state) {
  kilnd_settings_t *s = *state;
  setenv("KILND_LISTEN", "unix:/run/kilnd.sock", 1);
  setenv("KILND_LOG_LEVEL", "debug", 1);
  setenv("KILND_MAX_MESSAGE_BYTES", "8MiB", 1);
  setenv("KILND_STATE_DIR", "/var/lib/kiln", 1);
  setenv("KILN_LISTEN", "10.0.0.1:1", 1); /* the client's prefix is not kilnd's */
  kiln_status_t st = kiln_config_load_env(kilnd_settings_table(), s);
  unsetenv("KILN_LISTEN");
  if (st) fail_msg("load_env: %s", kiln_status_message(st));
  assert_string_equal(s->listen, "unix:/run/kilnd.sock");
  assert_string_equal(s->log_level, "debug");
  assert_int_equal(s->max_message_bytes, 8u << 20);
  assert_string_equal(s->state_dir, "/var/lib/kiln");
}

static void test_env_bad_values_rejected(void **state) {
  kilnd_settings_t *s = *state;
  setenv("KILND_LOG_LEVEL", "loud", 1);
  assert_code(kiln_config_load_env(kilnd_settings_table(), s), KILN_STATUS_INVALID_ARGUMENT);
  unsetenv("KILND_LOG_LEVEL");
  setenv("KILND_MAX_MESSAGE_BYTES", "1000", 1); /* below any sane minimum */
  assert_code(kiln_config_load_env(kilnd_settings_table(), s), KILN_STATUS_INVALID_ARGUMENT);
  assert_int_equal(s->max_message_bytes, 64ull << 20);
}

static void test_cli_only_options_ignore_env(void **state) {
  kilnd_settings_t *s = *state;
  setenv("KILND_HELP", "true", 1);
  setenv("KILND_VERSION", "true", 1);
  setenv("KILND_PRINT_CONFIG", "true", 1);
  assert_code(kiln_config_load_env(kilnd_settings_table(), s), KILN_STATUS_OK);
  assert_false(s->help);
  assert_false(s->version);
  assert_false(s->print_config);
}

static void test_full_load_precedence(void **state) {
  kilnd_settings_t *s = *state;
  kiln_config_deinit(kilnd_settings_table(), s);
  memset(s, 0, sizeof *s);

  char conf[320];
  snprintf(conf, sizeof conf, "%s/kilnd.conf", tmpdir);
  FILE *f = fopen(conf, "w");
  assert_non_null(f);
  fprintf(f,
          "# kilnd test config\nlisten = 127.0.0.1:1111\nlog-level = warn\n"
          "max_message_bytes = 1MiB\n");
  fclose(f);

  setenv("KILND_LOG_LEVEL", "error", 1); /* env beats the file */
  char *argv[] = {"kilnd", "--config", conf, "-l", "[::1]:2222", NULL};
  kiln_status_t st = kiln_config_load(kilnd_settings_table(), s, "config", 5, argv, NULL, 0, NULL);
  if (st) fail_msg("load: %s", kiln_status_message(st));
  assert_string_equal(s->listen, "[::1]:2222"); /* flag beats the file */
  assert_string_equal(s->log_level, "error");
  assert_int_equal(s->max_message_bytes, 1u << 20);
  assert_string_equal(s->config, conf);
  assert_non_null(s->state_dir); /* default kept */
  unlink(conf);
}

static void test_config_file_bounds(void **state) {
  kilnd_settings_t *s = *state;
  char conf[320];
  snprintf(conf, sizeof conf, "%s/bad.conf", tmpdir);
  FILE *f = fopen(conf, "w");
  assert_non_null(f);
  fprintf(f, "max-message-bytes = 100\n");
  fclose(f);
  assert_code(kiln_config_load_file(kilnd_settings_table(), s, conf), KILN_STATUS_INVALID_ARGUMENT);
  /* help is CLI-only: it is not a config-file key. */
  f = fopen(conf, "w");
  assert_non_null(f);
  fprintf(f, "help = true\n");
  fclose(f);
  assert_code(kiln_config_load_file(kilnd_settings_table(), s, conf), KILN_STATUS_INVALID_ARGUMENT);
  assert_false(s->help);
  unlink(conf);
}

int main(void) {
#define T(f) cmocka_unit_test_setup_teardown(f, setup, teardown)
  const struct CMUnitTest tests[] = {
      T(test_table_identity),
      T(test_every_option_documented),
      T(test_expected_options_present),
      T(test_defaults),
      T(test_default_listen_is_loopback),
      T(test_log_level_choices),
      T(test_max_message_bytes_bounds),
      T(test_drain_timeout_bounds),
      T(test_unknown_setting_rejected),
      T(test_env_prefix_kilnd),
      T(test_env_bad_values_rejected),
      T(test_cli_only_options_ignore_env),
      T(test_full_load_precedence),
      T(test_config_file_bounds),
  };
#undef T
  return cmocka_run_group_tests(tests, group_setup, group_teardown);
}
