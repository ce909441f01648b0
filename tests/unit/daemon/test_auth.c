/* Unit tests for daemon/auth: the token-file parser (fields, roles, lengths,
 * names, duplicates, comments, the line named in each error, never the token), the
 * role table (every served method listed; read < submit < admin; health needs
 * nothing; unlisted kiln methods need admin) and authorize's codes. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <stdio.h>
#include <string.h>

#include "daemon/auth.h"
#include "daemon/rpc.h"
#include "kiln/v1/kiln.pb-c.h"

#define READ_TOKEN   "read-token-0123456789"
#define SUBMIT_TOKEN "submit-token-0123456789"
#define ADMIN_TOKEN  "admin-token-0123456789"

static const char *const good_file =
    "# tokens\n"
    "\n"
    "  ci-read   read   " READ_TOKEN
    "  \n"
    "ci-submit\tsubmit\t" SUBMIT_TOKEN
    "\r\n"
    "   # indented comment\n"
    "ops admin " ADMIN_TOKEN; /* no final newline */

static kilnd_tokens_t *parse_ok(const char *text) {
  kilnd_tokens_t *tokens = NULL;
  kiln_status_t st = kilnd_tokens_parse(text, strlen(text), "tokens", &tokens);
  if (st) fail_msg("unexpected: %s", kiln_status_message(st));
  assert_non_null(tokens);
  return tokens;
}

static void expect_bad(const char *text, const char *where, const char *why) {
  kilnd_tokens_t *tokens = (kilnd_tokens_t *)1;
  kiln_status_t st = kilnd_tokens_parse(text, strlen(text), "tokens", &tokens);
  assert_non_null(st);
  assert_null(tokens);
  assert_int_equal(kiln_status_code(st), KILN_STATUS_INVALID_ARGUMENT);
  const char *msg = kiln_status_message(st);
  if (!strstr(msg, where) || !strstr(msg, why)) fail_msg("'%s' lacks '%s' or '%s'", msg, where, why);
  assert_null(strstr(msg, "SECRETSECRETSECRET")); /* never the token */
  kiln_status_free(st);
}

static void test_parse(void **state) {
  (void)state;
  kilnd_tokens_t *tokens = parse_ok(good_file);
  assert_int_equal(kilnd_tokens_count(tokens), 3);
  kilnd_tokens_destroy(tokens);
  /* One name with two tokens: rotation. */
  tokens = parse_ok("ci read " READ_TOKEN "\nci read " READ_TOKEN "-new\n");
  assert_int_equal(kilnd_tokens_count(tokens), 2);
  kilnd_tokens_destroy(tokens);
  /* Exactly 16 characters is enough. */
  tokens = parse_ok("a read 0123456789abcdef\n");
  kilnd_tokens_destroy(tokens);
}

static void test_parse_errors(void **state) {
  (void)state;
  expect_bad("a read 0123456789abcde\n", "tokens:1:", "16 to 4096");
  expect_bad("# c\na read SECRETSECRETSECRET\nb write SECRETSECRETSECRET2\n",
             "tokens:3:", "unknown role 'write'");
  expect_bad("a read\n", "tokens:1:", "three fields");
  expect_bad("a read SECRETSECRETSECRET extra\n", "tokens:1:", "three fields");
  expect_bad("a/b read SECRETSECRETSECRET\n", "tokens:1:", "name 'a/b'");
  expect_bad("a read SECRETSECRETSECRET\nb admin SECRETSECRETSECRET\n", "tokens:2:", "distinct");
  expect_bad("a read SECRETSECRET\x01SECRET\n", "tokens:1:", "visible ASCII");
  expect_bad("# nothing here\n\n", "tokens", "no tokens");
  expect_bad("", "tokens", "no tokens");
  char long_name[100];
  memset(long_name, 'n', 65);
  snprintf(long_name + 65, sizeof long_name - 65, " read SECRETSECRETSECRET\n");
  expect_bad(long_name, "tokens:1:", "longer than 64");
}

static void test_load(void **state) {
  (void)state;
  kilnd_tokens_t *tokens = (kilnd_tokens_t *)1;
  kiln_status_t st = kilnd_tokens_load("/nonexistent/kiln/tokens", &tokens);
  assert_non_null(st);
  assert_null(tokens);
  assert_int_equal(kiln_status_code(st), KILN_STATUS_NOT_FOUND);
  assert_non_null(strstr(kiln_status_message(st), "token-file /nonexistent/kiln/tokens"));
  kiln_status_free(st);
}

static void test_role_table(void **state) {
  (void)state;
  /* Each method of the table needs the role of its row, and every kiln.v1 method
   * of the contract is in one of the lists below. */
  size_t n = 0;
  const kilnd_method_t *methods = kilnd_rpc_methods(&n);
  for (size_t i = 0; i < n; i++) {
    assert_int_equal(kilnd_auth_method_role(methods[i].path), methods[i].role);
  }
  assert_int_equal(kilnd_auth_method_role("/grpc.health.v1.Health/Watch"), KILND_ROLE_NONE);
  assert_int_equal(kilnd_auth_method_role("/grpc.health.v1.Health/Check"), KILND_ROLE_NONE);
  const char *read[] = {"GetServerInfo", "GetStats",      "WatchJob",
                        "GetArtifact",   "FindArtifacts", "GetCacheStats"};
  const char *submit[] = {"Compile", "PutSource", "CancelJob", "Recompile"};
  const char *admin[] = {"VerifyCache", "CollectGarbage", "PinArtifact", "UnpinArtifact"};
  char path[128];
  for (size_t i = 0; i < sizeof read / sizeof *read; i++) {
    snprintf(path, sizeof path, "/kiln.v1.Kiln/%s", read[i]);
    assert_int_equal(kilnd_auth_method_role(path), KILND_ROLE_READ);
  }
  for (size_t i = 0; i < sizeof submit / sizeof *submit; i++) {
    snprintf(path, sizeof path, "/kiln.v1.Kiln/%s", submit[i]);
    assert_int_equal(kilnd_auth_method_role(path), KILND_ROLE_SUBMIT);
  }
  for (size_t i = 0; i < sizeof admin / sizeof *admin; i++) {
    snprintf(path, sizeof path, "/kiln.v1.Kiln/%s", admin[i]);
    assert_int_equal(kilnd_auth_method_role(path), KILND_ROLE_ADMIN);
  }
  assert_int_equal(sizeof read / sizeof *read + sizeof submit / sizeof *submit + sizeof admin / sizeof *admin,
                   kiln__v1__kiln__descriptor.n_methods);
  /* A kiln path outside the contract fails closed; anything else is not ours. */
  assert_int_equal(kilnd_auth_method_role("/kiln.v1.Kiln/SomethingNew"), KILND_ROLE_ADMIN);
  assert_int_equal(kilnd_auth_method_role("/other.Service/Method"), KILND_ROLE_READ);
  assert_string_equal(kilnd_role_name(KILND_ROLE_SUBMIT), "submit");
}

static void expect_authorize(const kilnd_tokens_t *tokens, const char *path, const char *value,
                             kiln_status_code_t code, const char *name_or_text) {
  const char *name = (const char *)1;
  kiln_status_t st = kilnd_tokens_authorize(tokens, path, value, value ? strlen(value) : 0, &name);
  assert_int_equal(kiln_status_code(st), code);
  if (code == KILN_STATUS_OK) {
    if (name_or_text) {
      assert_non_null(name);
      assert_string_equal(name, name_or_text);
    } else {
      assert_null(name);
    }
  } else {
    assert_null(name);
    if (!strstr(kiln_status_message(st), name_or_text)) {
      fail_msg("'%s' lacks '%s'", kiln_status_message(st), name_or_text);
    }
  }
  kiln_status_free(st);
}

static void test_authorize(void **state) {
  (void)state;
  kilnd_tokens_t *tokens = parse_ok(good_file);
  const char *compile = "/kiln.v1.Kiln/Compile";
  const char *gc = "/kiln.v1.Kiln/CollectGarbage";
  const char *info = "/kiln.v1.Kiln/GetServerInfo";
  expect_authorize(tokens, "/grpc.health.v1.Health/Check", NULL, KILN_STATUS_OK, NULL);
  expect_authorize(tokens, info, NULL, KILN_STATUS_UNAUTHENTICATED, "no valid bearer token");
  expect_authorize(tokens, info, "Bearer nope-nope-nope-nope", KILN_STATUS_UNAUTHENTICATED,
                   "no valid bearer token");
  expect_authorize(tokens, info, READ_TOKEN, KILN_STATUS_UNAUTHENTICATED, "Bearer <token>");
  expect_authorize(tokens, info, "Bearer " READ_TOKEN "x", KILN_STATUS_UNAUTHENTICATED, "no valid");
  expect_authorize(tokens, info, "Bearer " READ_TOKEN, KILN_STATUS_OK, "ci-read");
  expect_authorize(tokens, info, "bearer " READ_TOKEN, KILN_STATUS_OK, "ci-read");
  expect_authorize(tokens, compile, "Bearer " READ_TOKEN, KILN_STATUS_PERMISSION_DENIED,
                   "token 'ci-read' has role read; /kiln.v1.Kiln/Compile needs role submit");
  expect_authorize(tokens, compile, "Bearer " SUBMIT_TOKEN, KILN_STATUS_OK, "ci-submit");
  expect_authorize(tokens, gc, "Bearer " SUBMIT_TOKEN, KILN_STATUS_PERMISSION_DENIED, "needs role admin");
  expect_authorize(tokens, gc, "Bearer " ADMIN_TOKEN, KILN_STATUS_OK, "ops");
  expect_authorize(tokens, compile, "Bearer " ADMIN_TOKEN, KILN_STATUS_OK, "ops");
  kilnd_tokens_destroy(tokens);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_parse),      cmocka_unit_test(test_parse_errors), cmocka_unit_test(test_load),
      cmocka_unit_test(test_role_table), cmocka_unit_test(test_authorize),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
