/* Unit tests for daemon/flags: the allow-list refuses target-choosing and
 * path-touching flags with a message naming the flag; normalization keeps the last
 * spelling of each name and sorts by name, so equivalent lists are identical; the
 * limits on count and length. One rule: for every order of a list with a repeated
 * name, kilnd's normalizer, base/flags.h's (which `kiln explain` calls) and the
 * cache's stored form give the list worked out here independently (the last
 * spelling of the name, in name order), and the cache key of the list as given
 * equals the key of that list. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <string.h>

#include "base/alloc.h"
#include "base/buf.h"
#include "base/flags.h"
#include "cache/cache.h"
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

static void key_of(const char *const *flags, size_t n, char out[65]) {
  kiln_cache_key_parts_t parts = {
      .source_digest = "0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef",
      .target = "sm_89",
      .flags = flags,
      .n_flags = n,
      .compiler = "kiln-mlir 0.1.0 llvm 22.1.8",
      .hal_version = 7,
      .bytecode_version = 17};
  kiln_digest_hex_t key;
  assert_null(kiln_cache_key_compute(&parts, &key));
  memcpy(out, key.text, 65);
}

/* What the rule gives for `flags`, worked out here without base/flags.h: the
 * spelling of `twice` (a name given twice) that comes last, in its sorted place
 * among the `others` (already in name order, none before `twice` unless
 * `after` of them). */
static size_t expected(const char *const *flags, size_t n, const char *twice, const char *const *others,
                       size_t n_others, size_t after, const char **out) {
  const char *last = NULL;
  size_t len = strlen(twice);
  for (size_t i = 0; i < n; i++) {
    if (strncmp(flags[i], twice, len) == 0 && (flags[i][len] == '\0' || flags[i][len] == '='))
      last = flags[i];
  }
  size_t k = 0;
  for (size_t i = 0; i < after; i++) out[k++] = others[i];
  out[k++] = last;
  for (size_t i = after; i < n_others; i++) out[k++] = others[i];
  return k;
}

/* One list through kilnd's normalizer, base's (kiln explain's), the cache's
 * stored form and the cache key: each agrees with the expected list. */
static void check_agree(const char *const *flags, size_t n, const char *const *want, size_t n_want,
                        int *checked) {
  char **kd = NULL, **base = NULL;
  size_t n_kd = 0;
  assert_null(kilnd_flags_normalize(flags, n, &kd, &n_kd));
  size_t n_base = kiln_flags_normalize(flags, n, &base);
  assert_int_equal(n_kd, n_want);
  assert_int_equal(n_base, n_want);
  kiln_buf_t joined;
  kiln_buf_init(&joined);
  for (size_t i = 0; i < n_want; i++) {
    assert_string_equal(kd[i], want[i]);
    assert_string_equal(base[i], want[i]);
    kiln_buf_appendf(&joined, "%s%s", i ? "\n" : "", want[i]);
  }
  char *stored = kiln_cache_flags_normalize(flags, n);
  assert_string_equal(stored, joined.data ? joined.data : "");
  char raw_key[65], want_key[65];
  key_of(flags, n, raw_key);
  key_of(want, n_want, want_key);
  assert_string_equal(raw_key, want_key);
  kiln_free(stored);
  kiln_buf_deinit(&joined);
  kilnd_flags_free(kd, n_kd);
  kiln_flags_free(base, n_base);
  (*checked)++;
}

typedef struct case_s {
  const char *twice;
  const char *const *others;
  size_t n_others, after;
} case_t;

static void permute(const char **a, size_t n, size_t k, const case_t *c, int *checked) {
  if (k == 1) {
    const char *want[8];
    size_t n_want = expected(a, n, c->twice, c->others, c->n_others, c->after, want);
    check_agree(a, n, want, n_want, checked);
    return;
  }
  for (size_t i = 0; i < k; i++) {
    permute(a, n, k - 1, c, checked);
    size_t j = k % 2 ? 0 : i;
    const char *t = a[j];
    a[j] = a[k - 1];
    a[k - 1] = t;
  }
}

static void test_one_rule_everywhere(void **state) {
  (void)state;
  /* Every order of two spellings of one name among other names (sorted: the
   * `others` lists are in name order), and of a name's bare and valued spelling. */
  const char *a[] = {"--iree-opt-level=O1", "--iree-opt-level=O3", "--iree-opt-strip-assertions",
                     "--iree-opt-const-eval=false", "--iree-stream-resource-max-allocation-size=1024"};
  const char *const a_others[] = {"--iree-opt-const-eval=false", "--iree-opt-strip-assertions",
                                  "--iree-stream-resource-max-allocation-size=1024"};
  const char *b[] = {"--iree-opt-const-eval", "--iree-opt-const-eval=true", "--iree-opt-level=O2",
                     "--iree-opt-strip-assertions"};
  const char *const b_others[] = {"--iree-opt-level=O2", "--iree-opt-strip-assertions"};
  case_t ca = {"--iree-opt-level", a_others, 3, 1};
  case_t cb = {"--iree-opt-const-eval", b_others, 2, 0};
  int checked = 0;
  permute(a, 5, 5, &ca, &checked);
  permute(b, 4, 4, &cb, &checked);
  assert_int_equal(checked, 120 + 24);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_refused),
      cmocka_unit_test(test_normalized),
      cmocka_unit_test(test_limits),
      cmocka_unit_test(test_one_rule_everywhere),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
