/* Unit tests for daemon/flags: the allow-list refuses target-choosing and
 * path-touching flags with a message naming the flag; normalization keeps the last
 * spelling of each name and sorts by name, so equivalent lists are identical; the
 * limits on count and length. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <string.h>

#include "daemon/flags.h"

static void expect_refused(const char *flag, const char *why) {
  char **out = NULL;
  size_t n = 0;
  const char *flags[] = {"--iree-opt-level=O2", flag};
  kiln_status_t st = kilnd_flags_normalize(flags, 2, &out, &n);
  assert_non_null(st);
  assert_int_equal(kiln_status_code(st), KILN_STATUS_INVALID_ARGUMENT);
  assert_non_null(strstr(kiln_status_message(st), why));
  assert_null(out);
  assert_int_equal(n, 0);
  kiln_status_free(st);
}

static void test_refused(void **state) {
  (void)state;
  expect_refused("--iree-hal-target-device=cuda", "chooses the device or target");
  expect_refused("--iree-cuda-target=sm_89", "chooses the device or target");
  expect_refused("--iree-rocm-target=gfx950", "chooses the device or target");
  expect_refused("--iree-vulkan-target=valhall4", "chooses the device or target");
  expect_refused("--iree-hal-dump-executable-files-to=/tmp/x", "file system");
  expect_refused("--iree-opt-level=/etc/passwd", "'/'");
  expect_refused("-o", "start with --iree-");
  expect_refused("--mlir-print-ir-after-all", "start with --iree-");
  expect_refused("--iree-opt-level=O2 --iree-x", "space");
  expect_refused("", "1 to");
}

static void test_normalized(void **state) {
  (void)state;
  const char *a[] = {"--iree-opt-level=O1", "--iree-stream-resource-max-allocation-size=1024",
                     "--iree-opt-level=O3", "--iree-opt-strip-assertions"};
  const char *b[] = {"--iree-opt-strip-assertions", "--iree-opt-level=O3",
                     "--iree-stream-resource-max-allocation-size=1024"};
  char **x = NULL, **y = NULL;
  size_t nx = 0, ny = 0;
  assert_null(kilnd_flags_normalize(a, 4, &x, &nx));
  assert_null(kilnd_flags_normalize(b, 3, &y, &ny));
  assert_int_equal(nx, 3);
  assert_int_equal(ny, 3);
  for (size_t i = 0; i < nx; i++) assert_string_equal(x[i], y[i]);
  assert_string_equal(x[0], "--iree-opt-level=O3"); /* the last spelling won */
  assert_string_equal(x[1], "--iree-opt-strip-assertions");
  assert_string_equal(x[2], "--iree-stream-resource-max-allocation-size=1024");
  kilnd_flags_free(x, nx);
  kilnd_flags_free(y, ny);
  char **z = NULL;
  size_t nz = 7;
  assert_null(kilnd_flags_normalize(NULL, 0, &z, &nz));
  assert_int_equal(nz, 0);
  kilnd_flags_free(z, nz);
}

static void test_limits(void **state) {
  (void)state;
  const char *many[KILND_MAX_FLAGS + 1];
  for (size_t i = 0; i < KILND_MAX_FLAGS + 1; i++) many[i] = "--iree-opt-level=O2";
  char **out = NULL;
  size_t n = 0;
  kiln_status_t st = kilnd_flags_normalize(many, KILND_MAX_FLAGS + 1, &out, &n);
  assert_int_equal(kiln_status_consume_code(st), KILN_STATUS_INVALID_ARGUMENT);
  assert_null(kilnd_flags_normalize(many, KILND_MAX_FLAGS, &out, &n));
  assert_int_equal(n, 1); /* one name: one flag */
  kilnd_flags_free(out, n);
  static char longflag[KILND_MAX_FLAG_BYTES + 16];
  memset(longflag, 'x', sizeof longflag - 1);
  memcpy(longflag, "--iree-x=", 9);
  const char *one[] = {longflag};
  st = kilnd_flags_normalize(one, 1, &out, &n);
  assert_int_equal(kiln_status_consume_code(st), KILN_STATUS_INVALID_ARGUMENT);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_refused),
      cmocka_unit_test(test_normalized),
      cmocka_unit_test(test_limits),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
