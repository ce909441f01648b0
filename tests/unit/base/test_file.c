/* Unit tests for base/file: a 3 MiB file written and read back byte for byte
 * (several read chunks), the mode honoured, truncation of a longer file, the
 * read limit (RESOURCE_EXHAUSTED naming the path and the limit, exactly at the
 * limit still fine), errno statuses naming the path for a missing file and
 * a file that cannot be created, and kiln_file_tree_remove: a nested tree goes,
 * a symlink in it is removed without touching what it points to, a missing path
 * and a plain file are fine, "", "/" and paths ending in "." or ".." are
 * refused, a 0500 folder of ours is opened up and removed, a tree deeper than 64
 * folders is refused, and a path that cannot go (under a file; as a user, also in a folder
 * it may not write) fails naming it and why. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <errno.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "base/alloc.h"
#include "base/buf.h"
#include "base/file.h"
#include "tests/unit/support/testing.h"

static void test_write_then_read_back(void **state) {
  (void)state;
  char *dir = kiln_test_tmpdir("kiln-file");
  kiln_buf_t path;
  kiln_buf_init(&path);
  kiln_buf_appendf(&path, "%s/f.bin", dir);
  size_t len = 3u << 20;
  unsigned char *data = kiln_test_make_data(len, false, 7);
  kiln_test_assert_ok(kiln_file_write(path.data, data, len, 0640));
  struct stat st;
  assert_int_equal(stat(path.data, &st), 0);
  assert_int_equal(st.st_size, (off_t)len);
  assert_int_equal(st.st_mode & 0777 & ~0640, 0); /* at most the mode asked for */
  kiln_buf_t back;
  kiln_buf_init(&back);
  kiln_test_assert_ok(kiln_file_read(path.data, len, &back)); /* exactly at the limit */
  assert_int_equal(back.len, len);
  assert_memory_equal(back.data, data, len);
  /* A shorter write truncates. */
  kiln_test_assert_ok(kiln_file_write(path.data, "abc", 3, 0640));
  kiln_buf_clear(&back);
  kiln_test_assert_ok(kiln_file_read(path.data, 100, &back));
  assert_int_equal(back.len, 3);
  assert_memory_equal(back.data, "abc", 3);
  kiln_buf_deinit(&back);
  free(data);
  kiln_buf_deinit(&path);
  kiln_test_remove_tree(dir);
  free(dir);
}

static void test_limit_and_errors(void **state) {
  (void)state;
  char *dir = kiln_test_tmpdir("kiln-file");
  kiln_buf_t path;
  kiln_buf_init(&path);
  kiln_buf_appendf(&path, "%s/f.bin", dir);
  unsigned char *data = kiln_test_make_data(200000, false, 8);
  kiln_test_assert_ok(kiln_file_write(path.data, data, 200000, 0600));
  kiln_buf_t back;
  kiln_buf_init(&back);
  kiln_status_t st = kiln_file_read(path.data, 199999, &back);
  assert_int_equal(kiln_status_code(st), KILN_STATUS_RESOURCE_EXHAUSTED);
  assert_non_null(strstr(kiln_status_message(st), path.data));
  assert_non_null(strstr(kiln_status_message(st), "199999"));
  kiln_status_free(st);
  kiln_buf_clear(&back);
  kiln_buf_t missing;
  kiln_buf_init(&missing);
  kiln_buf_appendf(&missing, "%s/none", dir);
  st = kiln_file_read(missing.data, 10, &back);
  assert_int_equal(kiln_status_code(st), KILN_STATUS_NOT_FOUND);
  assert_non_null(strstr(kiln_status_message(st), missing.data));
  kiln_status_free(st);
  kiln_buf_appendf(&missing, "/deeper");
  st = kiln_file_write(missing.data, "x", 1, 0600);
  assert_int_equal(kiln_status_code(st), KILN_STATUS_NOT_FOUND);
  assert_non_null(strstr(kiln_status_message(st), "cannot create"));
  kiln_status_free(st);
  kiln_buf_deinit(&missing);
  kiln_buf_deinit(&back);
  free(data);
  kiln_buf_deinit(&path);
  kiln_test_remove_tree(dir);
  free(dir);
}

/* Whether `path` exists (as itself: a dangling link counts). */
static bool exists(const char *path) {
  struct stat st;
  return lstat(path, &st) == 0;
}

static void test_remove_tree(void **state) {
  (void)state;
  char *dir = kiln_test_tmpdir("kiln-file");
  kiln_buf_t tree, outside, p;
  kiln_buf_init(&tree);
  kiln_buf_init(&outside);
  kiln_buf_init(&p);
  kiln_buf_appendf(&tree, "%s/tree", dir);
  kiln_buf_appendf(&outside, "%s/outside", dir);
  assert_int_equal(mkdir(outside.data, 0700), 0);
  kiln_buf_appendf(&p, "%s/keep", outside.data);
  kiln_test_assert_ok(kiln_file_write(p.data, "k", 1, 0600));
  /* tree/a/b/c/f, tree/g, tree/link -> outside (a folder), tree/a/dangling */
  kiln_buf_clear(&p);
  kiln_buf_appendf(&p, "%s/a/b/c", tree.data);
  assert_int_equal(mkdir(tree.data, 0700), 0);
  for (char *slash = strchr(p.data + tree.len + 1, '/');; slash = strchr(slash + 1, '/')) {
    if (slash) *slash = '\0';
    assert_int_equal(mkdir(p.data, 0700), 0);
    if (!slash) break;
    *slash = '/';
  }
  kiln_buf_append_str(&p, "/f");
  kiln_test_assert_ok(kiln_file_write(p.data, "f", 1, 0600));
  kiln_buf_clear(&p);
  kiln_buf_appendf(&p, "%s/g", tree.data);
  kiln_test_assert_ok(kiln_file_write(p.data, "g", 1, 0600));
  kiln_buf_clear(&p);
  kiln_buf_appendf(&p, "%s/link", tree.data);
  assert_int_equal(symlink(outside.data, p.data), 0);
  kiln_buf_clear(&p);
  kiln_buf_appendf(&p, "%s/a/dangling", tree.data);
  assert_int_equal(symlink("/nonexistent/kiln", p.data), 0);

  kiln_test_assert_ok(kiln_file_tree_remove(tree.data));
  assert_false(exists(tree.data));
  kiln_buf_clear(&p);
  kiln_buf_appendf(&p, "%s/keep", outside.data);
  assert_true(exists(p.data));                           /* the link was removed, not followed */
  kiln_test_assert_ok(kiln_file_tree_remove(tree.data)); /* already gone */
  kiln_buf_append_str(&p, "/under");
  kiln_status_t st = kiln_file_tree_remove(p.data); /* a path under a file */
  assert_non_null(st);
  assert_non_null(strstr(kiln_status_message(st), p.data));
  assert_non_null(strstr(kiln_status_message(st), strerror(ENOTDIR)));
  kiln_status_free(st);
  kiln_buf_clear(&p);
  kiln_buf_appendf(&p, "%s/keep", outside.data);
  kiln_test_assert_ok(kiln_file_tree_remove(p.data)); /* a plain file */
  assert_false(exists(p.data));
  kiln_buf_clear(&p);
  kiln_buf_appendf(&p, "%s/empty", dir);
  assert_int_equal(mkdir(p.data, 0700), 0);
  kiln_buf_append_str(&p, "//");
  kiln_test_assert_ok(kiln_file_tree_remove(p.data)); /* trailing slashes name the folder */
  kiln_buf_clear(&p);
  kiln_buf_appendf(&p, "%s/empty", dir);
  assert_false(exists(p.data));
  static const char *const refused[] = {"..", ".", "/", "", "a/..", "a/./"};
  for (size_t i = 0; i < sizeof refused / sizeof *refused; i++) {
    st = kiln_file_tree_remove(refused[i]);
    assert_int_equal(kiln_status_code(st), KILN_STATUS_INVALID_ARGUMENT);
    kiln_status_free(st);
  }
  /* A folder of ours a tool made 0500, with a file in it: opened up and removed. */
  kiln_buf_clear(&p);
  kiln_buf_appendf(&p, "%s/locked", dir);
  assert_int_equal(mkdir(p.data, 0700), 0);
  kiln_buf_append_str(&p, "/f");
  kiln_test_assert_ok(kiln_file_write(p.data, "f", 1, 0600));
  kiln_buf_clear(&p);
  kiln_buf_appendf(&p, "%s/locked", dir);
  assert_int_equal(chmod(p.data, 0500), 0);
  kiln_test_assert_ok(kiln_file_tree_remove(p.data));
  assert_false(exists(p.data));

  /* Deeper than 64 folders: refused (ELOOP), what it could reach is kept. */
  kiln_buf_clear(&p);
  kiln_buf_appendf(&p, "%s/deep", dir);
  for (int i = 0; i < 70; i++) {
    assert_int_equal(mkdir(p.data, 0700), 0);
    kiln_buf_append_str(&p, "/d");
  }
  kiln_buf_clear(&p);
  kiln_buf_appendf(&p, "%s/deep", dir);
  st = kiln_file_tree_remove(p.data);
  assert_non_null(st);
  assert_non_null(strstr(kiln_status_message(st), "nested too deep"));
  kiln_status_free(st);
  assert_true(exists(p.data));
  for (int i = 0; i < 70; i++) kiln_buf_append_str(&p, "/d"); /* removed by hand, deepest first */
  for (int i = 0; i < 70; i++) {
    p.len -= 2;
    p.data[p.len] = '\0';
    assert_int_equal(rmdir(p.data), 0);
  }

  if (geteuid() != 0) { /* root may remove anything: this failure needs a user */
    kiln_buf_clear(&p);
    kiln_buf_appendf(&p, "%s/x", outside.data);
    kiln_test_assert_ok(kiln_file_write(p.data, "x", 1, 0600));
    assert_int_equal(chmod(outside.data, 0500), 0);
    st = kiln_file_tree_remove(outside.data);
    assert_non_null(st);
    assert_non_null(strstr(kiln_status_message(st), strerror(EACCES)));
    kiln_status_free(st);
    assert_true(exists(p.data));
    assert_int_equal(chmod(outside.data, 0700), 0);
  }
  kiln_buf_deinit(&p);
  kiln_buf_deinit(&outside);
  kiln_buf_deinit(&tree);
  kiln_test_remove_tree(dir);
  free(dir);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_write_then_read_back),
      cmocka_unit_test(test_limit_and_errors),
      cmocka_unit_test(test_remove_tree),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
