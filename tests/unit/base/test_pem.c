/* Unit tests for base/pem: a PEM file's text comes back whole and NUL-terminated;
 * a missing file is NOT_FOUND, an empty one, one without a "-----BEGIN " line and
 * one over KILN_PEM_MAX_BYTES are INVALID_ARGUMENT, each message naming the setting
 * and the path; kiln_pem_free takes NULL. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/pem.h"
#include "tests/unit/support/testing.h"

typedef struct fixture_s {
  char *dir;
  char path[512];
} fixture_t;

static int setup(void **state) {
  fixture_t *f = calloc(1, sizeof *f);
  f->dir = kiln_test_tmpdir("kiln-pem-");
  if (!f->dir) return -1;
  snprintf(f->path, sizeof f->path, "%s/file.pem", f->dir);
  *state = f;
  return 0;
}

static int teardown(void **state) {
  fixture_t *f = *state;
  kiln_test_remove_tree(f->dir);
  free(f->dir);
  free(f);
  return 0;
}

static void write_bytes(const char *path, const void *data, size_t len) {
  FILE *out = fopen(path, "wb");
  assert_non_null(out);
  assert_int_equal(fwrite(data, 1, len, out), len);
  assert_int_equal(fclose(out), 0);
}

/* Reads f->path as "tls-key" and expects `code` with `words` in the message. */
static void expect_refused(fixture_t *f, kiln_status_code_t code, const char *words) {
  char *text = (char *)"untouched";
  kiln_status_t st = kiln_pem_read("tls-key", f->path, &text);
  assert_non_null(st);
  assert_null(text);
  assert_int_equal(kiln_status_code(st), code);
  assert_non_null(strstr(kiln_status_message(st), "tls-key"));
  assert_non_null(strstr(kiln_status_message(st), f->path));
  assert_non_null(strstr(kiln_status_message(st), words));
  kiln_status_free(st);
}

static void test_reads_pem(void **state) {
  fixture_t *f = *state;
  static const char PEM[] =
      "# a comment first\n-----BEGIN CERTIFICATE-----\nMIIB\n-----END CERTIFICATE-----\n";
  write_bytes(f->path, PEM, sizeof PEM - 1);
  char *text = NULL;
  assert_null(kiln_pem_read("tls-cert", f->path, &text));
  assert_string_equal(text, PEM);
  kiln_pem_free(text);
  kiln_pem_free(NULL);
}

static void test_refusals(void **state) {
  fixture_t *f = *state;
  expect_refused(f, KILN_STATUS_NOT_FOUND, "cannot open it");
  write_bytes(f->path, "", 0);
  expect_refused(f, KILN_STATUS_INVALID_ARGUMENT, "empty");
  write_bytes(f->path, "just text\n", 10);
  expect_refused(f, KILN_STATUS_INVALID_ARGUMENT, "not a PEM file");
  size_t big = KILN_PEM_MAX_BYTES + 4096;
  char *bytes = malloc(big);
  memset(bytes, 'A', big);
  memcpy(bytes, "-----BEGIN CERTIFICATE-----\n", 28);
  write_bytes(f->path, bytes, big);
  free(bytes);
  expect_refused(f, KILN_STATUS_INVALID_ARGUMENT, "over 1 MiB");
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test_setup_teardown(test_reads_pem, setup, teardown),
      cmocka_unit_test_setup_teardown(test_refusals, setup, teardown),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
