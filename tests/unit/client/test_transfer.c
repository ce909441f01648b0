/* Unit tests for client/transfer's file side (the RPC side runs against the real
 * kilnd in tests/integration/test_cli_compile.py): atomic writes (content, replace,
 * nothing left behind on success or failure, the missing-directory error names
 * the temp file's path); mkdirs (nested, idempotent, trailing slash, a file in
 * the way is FAILED_PRECONDITION); the digest of a stream and of a file (SHA-256
 * vectors, a directory refused); read_all's limit; --source resolution (a digest
 * stays as is, a file is hashed, neither is INVALID_ARGUMENT with a hint for a
 * "sha256:" prefix); and the partial-download name.
 * Fixture: a fresh temporary directory per test. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <dirent.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "base/alloc.h"
#include "base/mlir_text.h"
#include "base/digest.h"
#include "client/transfer.h"
#include "tests/unit/support/testing.h"

#define SHA_ABC   "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad"
#define SHA_EMPTY "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855"

static int setup(void **state) {
  char *dir = kiln_test_tmpdir("kiln-test-transfer");
  if (!dir) return -1;
  *state = dir;
  return 0;
}

static int teardown(void **state) {
  char *dir = *state;
  int rc = kiln_test_remove_tree(dir);
  free(dir);
  return rc;
}

static char *path_in(const char *dir, const char *name) {
  size_t n = strlen(dir) + strlen(name) + 2;
  char *p = kiln_malloc(n);
  snprintf(p, n, "%s/%s", dir, name);
  return p;
}

static char *slurp(const char *path) {
  FILE *f = fopen(path, "rb");
  if (!f) return NULL;
  uint8_t *data = NULL;
  size_t len = 0;
  kiln_status_t st = kiln_cli_read_all(f, path, 1 << 20, &data, &len);
  fclose(f);
  assert_null(st);
  return (char *)data;
}

static size_t entries(const char *dir) {
  DIR *d = opendir(dir);
  assert_non_null(d);
  size_t n = 0;
  struct dirent *e;
  while ((e = readdir(d))) n += strcmp(e->d_name, ".") != 0 && strcmp(e->d_name, "..") != 0;
  closedir(d);
  return n;
}

static void test_write_atomic(void **state) {
  const char *dir = *state;
  char *p = path_in(dir, "manifest.json");
  assert_null(kiln_cli_write_atomic(p, "{\"a\": 1}\n", 9));
  char *text = slurp(p);
  assert_string_equal(text, "{\"a\": 1}\n");
  kiln_free(text);
  assert_null(kiln_cli_write_atomic(p, "x", 1)); /* replaces */
  text = slurp(p);
  assert_string_equal(text, "x");
  kiln_free(text);
  assert_int_equal(entries(dir), 1); /* no temporary left */
  char *bad = path_in(dir, "missing/manifest.json");
  kiln_status_t st = kiln_cli_write_atomic(bad, "x", 1);
  assert_int_equal(kiln_status_code(st), KILN_STATUS_NOT_FOUND);
  assert_non_null(strstr(kiln_status_message(st), "missing/manifest.json"));
  kiln_status_free(st);
  assert_int_equal(entries(dir), 1);
  kiln_free(bad);
  kiln_free(p);
}

static void test_mkdirs(void **state) {
  const char *dir = *state;
  char *deep = path_in(dir, "a/b/c/");
  assert_null(kiln_cli_mkdirs(deep));
  assert_null(kiln_cli_mkdirs(deep)); /* again: fine */
  struct stat st;
  assert_int_equal(stat(deep, &st), 0);
  assert_true(S_ISDIR(st.st_mode));
  char *file = path_in(dir, "a/file");
  assert_null(kiln_cli_write_atomic(file, "x", 1));
  kiln_status_t s = kiln_cli_mkdirs(file);
  assert_int_equal(kiln_status_code(s), KILN_STATUS_FAILED_PRECONDITION);
  kiln_status_free(s);
  char *under = path_in(dir, "a/file/sub");
  s = kiln_cli_mkdirs(under);
  assert_non_null(s);
  kiln_status_free(s);
  kiln_free(under);
  kiln_free(file);
  kiln_free(deep);
}

static void test_digests(void **state) {
  const char *dir = *state;
  FILE *f = fmemopen("abc", 3, "rb");
  kiln_digest_hex_t hex;
  uint64_t size = 99;
  assert_null(kiln_cli_stream_digest(f, "abc", &hex, &size));
  fclose(f);
  assert_string_equal(hex.text, SHA_ABC);
  assert_int_equal(size, 3);
  char *p = path_in(dir, "empty.mlir");
  assert_null(kiln_cli_write_atomic(p, "", 0));
  assert_null(kiln_cli_file_digest(p, &hex, &size));
  assert_string_equal(hex.text, SHA_EMPTY);
  assert_int_equal(size, 0);
  kiln_status_t st = kiln_cli_file_digest(dir, &hex, &size);
  assert_int_equal(kiln_status_code(st), KILN_STATUS_INVALID_ARGUMENT);
  kiln_status_free(st);
  kiln_free(p);
}

static void test_read_all_limit(void **state) {
  (void)state;
  unsigned char *data = kiln_test_make_data(600 * 1024, false, 7);
  FILE *f = fmemopen(data, 600 * 1024, "rb");
  uint8_t *out = NULL;
  size_t len = 0;
  assert_null(kiln_cli_read_all(f, "in", 600 * 1024, &out, &len));
  assert_int_equal(len, 600 * 1024);
  assert_memory_equal(out, data, len);
  assert_int_equal(out[len], 0);
  kiln_free(out);
  rewind(f);
  kiln_status_t st = kiln_cli_read_all(f, "in", 600 * 1024 - 1, &out, &len);
  assert_int_equal(kiln_status_code(st), KILN_STATUS_RESOURCE_EXHAUSTED);
  assert_null(out);
  kiln_status_free(st);
  fclose(f);
  free(data);
}

static void test_source_resolve(void **state) {
  const char *dir = *state;
  kiln_digest_hex_t hex;
  assert_null(kiln_cli_source_resolve(SHA_ABC, &hex));
  assert_string_equal(hex.text, SHA_ABC);
  char *p = path_in(dir, "abc.mlir");
  assert_null(kiln_cli_write_atomic(p, "abc", 3));
  assert_null(kiln_cli_source_resolve(p, &hex));
  kiln_digest_hex_t form;
  kiln_mlir_text_digest("abc", 3, &form); /* a file: the digest the cache keys it on */
  assert_string_equal(hex.text, form.text);
  assert_string_not_equal(hex.text, SHA_ABC);
  kiln_status_t st = kiln_cli_source_resolve("sha256:" SHA_ABC, &hex);
  assert_int_equal(kiln_status_code(st), KILN_STATUS_INVALID_ARGUMENT);
  assert_non_null(strstr(kiln_status_message(st), "sha256:"));
  kiln_status_free(st);
  st = kiln_cli_source_resolve("BA7816BF8F01CFEA414140DE5DAE2223B00361A396177A9CB410FF61F20015AD", &hex);
  assert_int_equal(kiln_status_code(st), KILN_STATUS_INVALID_ARGUMENT); /* upper case is no digest */
  kiln_status_free(st);
  kiln_free(p);
}

static void test_part_path(void **state) {
  (void)state;
  char *p = kiln_cli_part_path("out/sm_89.vmfb", SHA_ABC);
  assert_string_equal(p, "out/sm_89.vmfb.kiln-ba7816bf8f01.part");
  kiln_free(p);
}

int main(void) {
#define T(f) cmocka_unit_test_setup_teardown(f, setup, teardown)
  const struct CMUnitTest tests[] = {
      T(test_write_atomic),   T(test_mkdirs),         T(test_digests),
      T(test_read_all_limit), T(test_source_resolve), T(test_part_path),
  };
#undef T
  return cmocka_run_group_tests(tests, NULL, NULL);
}
