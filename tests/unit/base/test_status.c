/* Unit tests for base/status: making statuses (code, message, "basename:line"),
 * OK-as-NULL everywhere, annotate, code names and their case-insensitive parse,
 * the errno mapping, consume_code and KILN_RETURN_IF_ERROR. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <errno.h>
#include <stdio.h>
#include <string.h>

#include "base/status.h"

/* The "basename:line" a status made at `line` of this file must report. */
static void assert_where(kiln_status_t st, int line) {
  char expected[64];
  snprintf(expected, sizeof expected, "test_status.c:%d", line);
  assert_string_equal(kiln_status_where(st), expected);
}

static void test_make_carries_code_message_where(void **state) {
  (void)state;
  int line = __LINE__ + 1;
  kiln_status_t st = KILN_STATUS(KILN_STATUS_NOT_FOUND, "artifact %s (%d bytes) missing", "abc", 42);
  assert_non_null(st);
  assert_int_equal(kiln_status_code(st), KILN_STATUS_NOT_FOUND);
  assert_string_equal(kiln_status_message(st), "artifact abc (42 bytes) missing");
  assert_where(st, line);
  kiln_status_free(st);
}

static void test_make_direct_with_path_keeps_basename(void **state) {
  (void)state;
  kiln_status_t st = kiln_status_make(KILN_STATUS_INTERNAL, "/a/b/c/some_file.c", 1234, "boom");
  assert_string_equal(kiln_status_where(st), "some_file.c:1234");
  kiln_status_free(st);

  st = kiln_status_make(KILN_STATUS_INTERNAL, "plain.c", 7, "boom");
  assert_string_equal(kiln_status_where(st), "plain.c:7");
  kiln_status_free(st);

  /* A NULL file must not crash; the line still shows. */
  st = kiln_status_make(KILN_STATUS_INTERNAL, NULL, 9, "boom");
  assert_non_null(strstr(kiln_status_where(st), ":9"));
  kiln_status_free(st);
}

static void test_make_with_ok_code_still_fails(void **state) {
  (void)state;
  /* A made status is a failure: asking for OK must not produce a non-NULL "OK". */
  kiln_status_t st = KILN_STATUS(KILN_STATUS_OK, "oops");
  assert_non_null(st);
  assert_int_not_equal(kiln_status_code(st), KILN_STATUS_OK);
  kiln_status_free(st);
}

static void test_long_message(void **state) {
  (void)state;
  char big[5000];
  memset(big, 'x', sizeof big - 1);
  big[sizeof big - 1] = '\0';
  kiln_status_t st = KILN_STATUS(KILN_STATUS_DATA_LOSS, "[%s]", big);
  const char *msg = kiln_status_message(st);
  assert_int_equal(strlen(msg), sizeof big - 1 + 2);
  assert_int_equal(msg[0], '[');
  assert_int_equal(msg[strlen(msg) - 1], ']');
  kiln_status_free(st);
}

static void test_empty_message_is_empty_string(void **state) {
  (void)state;
  kiln_status_t st = KILN_STATUS(KILN_STATUS_CANCELLED, "%s", "");
  assert_non_null(kiln_status_message(st));
  assert_string_equal(kiln_status_message(st), "");
  assert_non_null(kiln_status_where(st));
  st = kiln_status_annotate(st, "%s", "ctx");
  assert_string_equal(kiln_status_message(st), "ctx: ");
  kiln_status_free(st);

  st = kiln_status_annotate(KILN_STATUS(KILN_STATUS_ABORTED, "inner"), "%s", "");
  assert_string_equal(kiln_status_message(st), ": inner");
  kiln_status_free(st);
}

static void test_null_is_ok_everywhere(void **state) {
  (void)state;
  assert_int_equal(kiln_status_code(NULL), KILN_STATUS_OK);
  assert_string_equal(kiln_status_message(NULL), "");
  assert_string_equal(kiln_status_where(NULL), "");
  assert_null(kiln_status_annotate(NULL, "context %d", 1));
  kiln_status_free(NULL);
  assert_int_equal(kiln_status_consume_code(NULL), KILN_STATUS_OK);
}

static void test_annotate_prefixes_and_keeps_code(void **state) {
  (void)state;
  int line = __LINE__ + 1;
  kiln_status_t st = KILN_STATUS(KILN_STATUS_PERMISSION_DENIED, "open failed");
  kiln_status_t same = kiln_status_annotate(st, "loading %s", "cfg");
  assert_ptr_equal(same, st);
  assert_int_equal(kiln_status_code(st), KILN_STATUS_PERMISSION_DENIED);
  assert_string_equal(kiln_status_message(st), "loading cfg: open failed");
  /* Nested annotation stacks outermost first; where stays the origin. */
  st = kiln_status_annotate(st, "job %d", 7);
  assert_string_equal(kiln_status_message(st), "job 7: loading cfg: open failed");
  assert_where(st, line);
  assert_int_equal(kiln_status_code(st), KILN_STATUS_PERMISSION_DENIED);
  kiln_status_free(st);
}

static void test_code_names(void **state) {
  (void)state;
  static const struct {
    kiln_status_code_t code;
    const char *name;
  } cases[] = {
      {KILN_STATUS_OK, "OK"},
      {KILN_STATUS_CANCELLED, "CANCELLED"},
      {KILN_STATUS_UNKNOWN, "UNKNOWN"},
      {KILN_STATUS_INVALID_ARGUMENT, "INVALID_ARGUMENT"},
      {KILN_STATUS_DEADLINE_EXCEEDED, "DEADLINE_EXCEEDED"},
      {KILN_STATUS_NOT_FOUND, "NOT_FOUND"},
      {KILN_STATUS_ALREADY_EXISTS, "ALREADY_EXISTS"},
      {KILN_STATUS_PERMISSION_DENIED, "PERMISSION_DENIED"},
      {KILN_STATUS_RESOURCE_EXHAUSTED, "RESOURCE_EXHAUSTED"},
      {KILN_STATUS_FAILED_PRECONDITION, "FAILED_PRECONDITION"},
      {KILN_STATUS_ABORTED, "ABORTED"},
      {KILN_STATUS_OUT_OF_RANGE, "OUT_OF_RANGE"},
      {KILN_STATUS_UNIMPLEMENTED, "UNIMPLEMENTED"},
      {KILN_STATUS_INTERNAL, "INTERNAL"},
      {KILN_STATUS_UNAVAILABLE, "UNAVAILABLE"},
      {KILN_STATUS_DATA_LOSS, "DATA_LOSS"},
      {KILN_STATUS_UNAUTHENTICATED, "UNAUTHENTICATED"},
  };
  assert_int_equal(sizeof cases / sizeof cases[0], KILN_STATUS_CODE_COUNT);
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
    /* gRPC numbering: the enum value is the index. */
    assert_int_equal((int)cases[i].code, (int)i);
    assert_string_equal(kiln_status_code_name(cases[i].code), cases[i].name);
  }
  assert_string_equal(kiln_status_code_name((kiln_status_code_t)KILN_STATUS_CODE_COUNT), "UNKNOWN_CODE");
  assert_string_equal(kiln_status_code_name((kiln_status_code_t)-1), "UNKNOWN_CODE");
  assert_string_equal(kiln_status_code_name((kiln_status_code_t)1000), "UNKNOWN_CODE");
}

static void test_code_parse_round_trip(void **state) {
  (void)state;
  for (int i = 0; i < KILN_STATUS_CODE_COUNT; i++) {
    const char *name = kiln_status_code_name((kiln_status_code_t)i);
    kiln_status_code_t code = (kiln_status_code_t)-1;
    assert_int_equal(kiln_status_code_parse(name, &code), 0);
    assert_int_equal(code, i);

    /* Lower case and mixed case parse too. */
    char lower[64];
    size_t n = strlen(name);
    assert_true(n < sizeof lower);
    for (size_t j = 0; j <= n; j++) {
      char c = name[j];
      lower[j] = (c >= 'A' && c <= 'Z') ? (char)(c - 'A' + 'a') : c;
    }
    code = (kiln_status_code_t)-1;
    assert_int_equal(kiln_status_code_parse(lower, &code), 0);
    assert_int_equal(code, i);
    lower[0] = name[0];
    code = (kiln_status_code_t)-1;
    assert_int_equal(kiln_status_code_parse(lower, &code), 0);
    assert_int_equal(code, i);
  }
}

static void test_code_parse_rejects_non_names(void **state) {
  (void)state;
  static const char *const bad[] = {"",  "UNKNOWN_CODE", "NOT FOUND",         "NOTFOUND", "NOT_FOUND ", " OK",
                                    "5", "INVALID",      "INVALID_ARGUMENTS", "ok!"};
  for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
    kiln_status_code_t code = KILN_STATUS_ABORTED;
    assert_int_equal(kiln_status_code_parse(bad[i], &code), -1);
    /* Out-param untouched on failure. */
    assert_int_equal(code, KILN_STATUS_ABORTED);
  }
  kiln_status_code_t code = KILN_STATUS_ABORTED;
  assert_int_equal(kiln_status_code_parse(NULL, &code), -1);
  assert_int_equal(code, KILN_STATUS_ABORTED);
}

static void test_errno_mapping(void **state) {
  (void)state;
  static const struct {
    int err;
    kiln_status_code_t code;
  } cases[] = {
      {ENOENT, KILN_STATUS_NOT_FOUND},
      {EACCES, KILN_STATUS_PERMISSION_DENIED},
      {EPERM, KILN_STATUS_PERMISSION_DENIED},
      {EROFS, KILN_STATUS_PERMISSION_DENIED},
      {ENOSPC, KILN_STATUS_RESOURCE_EXHAUSTED},
      {EDQUOT, KILN_STATUS_RESOURCE_EXHAUSTED},
      {ENOMEM, KILN_STATUS_RESOURCE_EXHAUSTED},
      {EEXIST, KILN_STATUS_ALREADY_EXISTS},
      {EADDRINUSE, KILN_STATUS_UNAVAILABLE},
      {EINVAL, KILN_STATUS_INVALID_ARGUMENT},
      {ETIMEDOUT, KILN_STATUS_DEADLINE_EXCEEDED},
      {ENOTSUP, KILN_STATUS_INTERNAL},
      {EPIPE, KILN_STATUS_INTERNAL},
      {0, KILN_STATUS_INTERNAL},
  };
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
    assert_int_equal(kiln_status_code_from_errno(cases[i].err), cases[i].code);
  }
}

static void test_from_errno_message_and_code(void **state) {
  (void)state;
  int line = __LINE__ + 1;
  kiln_status_t st = KILN_STATUS_ERRNO(ENOENT, "cannot open %s", "/x/y");
  assert_int_equal(kiln_status_code(st), KILN_STATUS_NOT_FOUND);
  char expected[256];
  snprintf(expected, sizeof expected, "cannot open /x/y: %s", strerror(ENOENT));
  assert_string_equal(kiln_status_message(st), expected);
  assert_where(st, line);
  kiln_status_free(st);

  st = KILN_STATUS_ERRNO(EADDRINUSE, "bind %s:%d", "127.0.0.1", 80);
  assert_int_equal(kiln_status_code(st), KILN_STATUS_UNAVAILABLE);
  snprintf(expected, sizeof expected, "bind 127.0.0.1:80: %s", strerror(EADDRINUSE));
  assert_string_equal(kiln_status_message(st), expected);
  kiln_status_free(st);

  st = KILN_STATUS_ERRNO(ENOSPC, "write");
  assert_int_equal(kiln_status_code(st), KILN_STATUS_RESOURCE_EXHAUSTED);
  kiln_status_free(st);
  st = KILN_STATUS_ERRNO(EACCES, "write");
  assert_int_equal(kiln_status_code(st), KILN_STATUS_PERMISSION_DENIED);
  kiln_status_free(st);
}

static void test_consume_code(void **state) {
  (void)state;
  /* Under ASan, a leak here would fail the run: consume must free. */
  assert_int_equal(kiln_status_consume_code(KILN_STATUS(KILN_STATUS_ABORTED, "x")), KILN_STATUS_ABORTED);
  assert_int_equal(kiln_status_consume_code(KILN_STATUS_ERRNO(EEXIST, "y")), KILN_STATUS_ALREADY_EXISTS);
}

static int steps_after_check;

static KILN_MUST_USE kiln_status_t fail_with(kiln_status_code_t code) {
  return code == KILN_STATUS_OK ? NULL : KILN_STATUS(code, "failed with %d", (int)code);
}

static KILN_MUST_USE kiln_status_t two_steps(kiln_status_code_t first) {
  steps_after_check = 0;
  KILN_RETURN_IF_ERROR(fail_with(first));
  steps_after_check++;
  KILN_RETURN_IF_ERROR(fail_with(KILN_STATUS_OK));
  steps_after_check++;
  return NULL;
}

static void test_return_if_error(void **state) {
  (void)state;
  assert_null(two_steps(KILN_STATUS_OK));
  assert_int_equal(steps_after_check, 2);

  kiln_status_t st = two_steps(KILN_STATUS_UNAVAILABLE);
  assert_int_equal(steps_after_check, 0);
  assert_int_equal(kiln_status_code(st), KILN_STATUS_UNAVAILABLE);
  assert_string_equal(kiln_status_message(st), "failed with 14");
  kiln_status_free(st);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_make_carries_code_message_where),
      cmocka_unit_test(test_make_direct_with_path_keeps_basename),
      cmocka_unit_test(test_make_with_ok_code_still_fails),
      cmocka_unit_test(test_long_message),
      cmocka_unit_test(test_empty_message_is_empty_string),
      cmocka_unit_test(test_null_is_ok_everywhere),
      cmocka_unit_test(test_annotate_prefixes_and_keeps_code),
      cmocka_unit_test(test_code_names),
      cmocka_unit_test(test_code_parse_round_trip),
      cmocka_unit_test(test_code_parse_rejects_non_names),
      cmocka_unit_test(test_errno_mapping),
      cmocka_unit_test(test_from_errno_message_and_code),
      cmocka_unit_test(test_consume_code),
      cmocka_unit_test(test_return_if_error),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
