/* Unit tests for base/flags: the compile-flag normal form, the one rule kilnd's
 * admission, the cache key and `kiln explain` share.
 *
 * Covered: the last spelling of a name wins ("--a" and "--a=3" are one name);
 * sorted by name, a name that prefixes another first; whitespace at the ends
 * trimmed, empty flags dropped, NULL entries and no flags at all; every order of
 * a set of spellings normalizes alike. (tests/unit/daemon/test_flags.c checks
 * that kilnd's normalizer and the cache key agree through it.)
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <string.h>

#include "base/alloc.h"
#include "base/flags.h"

static void assert_flags(const char *const *in, size_t n, const char *const *want, size_t n_want) {
  char **out = NULL;
  size_t got = kiln_flags_normalize(in, n, &out);
  assert_int_equal(got, n_want);
  for (size_t i = 0; i < got; i++) assert_string_equal(out[i], want[i]);
  kiln_flags_free(out, got);
}

static void test_last_spelling_wins_sorted_by_name(void **state) {
  (void)state;
  const char *const in[] = {"--iree-b=1", "--iree-a", "--iree-b=2", "--iree-ab=x", "--iree-a=3"};
  const char *const want[] = {"--iree-a=3", "--iree-ab=x", "--iree-b=2"};
  assert_flags(in, 5, want, 3);
}

static void test_whitespace_empties_and_nothing(void **state) {
  (void)state;
  const char *const in[] = {"  --iree-x=1 ", "", "\t--iree-y\n", NULL, "   ", "--iree-x=2", "\r\n"};
  const char *const want[] = {"--iree-x=2", "--iree-y"};
  assert_flags(in, 7, want, 2);
  assert_flags(NULL, 0, NULL, 0);
  const char *const blanks[] = {"", " ", "\t"};
  assert_flags(blanks, 3, NULL, 0);
}

/* Heap's algorithm: every permutation of `a` (n <= 6) normalizes to `want`. */
static void permute(const char **a, size_t n, size_t k, const char *const *want, size_t n_want, int *count) {
  if (k == 1) {
    assert_flags(a, n, want, n_want);
    (*count)++;
    return;
  }
  for (size_t i = 0; i < k; i++) {
    permute(a, n, k - 1, want, n_want, count);
    size_t j = k % 2 ? 0 : i;
    const char *t = a[j];
    a[j] = a[k - 1];
    a[k - 1] = t;
  }
}

static void test_every_order_alike(void **state) {
  (void)state;
  /* Distinct names only: with a repeated name, which spelling is last is the
   * request's meaning, and order does matter. */
  const char *a[] = {"--iree-opt-level=O3",
                     "--iree-stream-resource-max-allocation-size=1",
                     "--iree-opt-const-eval",
                     " --iree-global-opt-propagate-transposes=true",
                     "--iree-opt",
                     "--iree-dispatch-creation-enable-aggressive-fusion"};
  const char *const want[] = {"--iree-dispatch-creation-enable-aggressive-fusion",
                              "--iree-global-opt-propagate-transposes=true",
                              "--iree-opt",
                              "--iree-opt-const-eval",
                              "--iree-opt-level=O3",
                              "--iree-stream-resource-max-allocation-size=1"};
  int count = 0;
  permute(a, 6, 6, want, 6, &count);
  assert_int_equal(count, 720);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_last_spelling_wins_sorted_by_name),
      cmocka_unit_test(test_whitespace_empties_and_nothing),
      cmocka_unit_test(test_every_order_alike),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
