/* Unit tests for base/time: the monotonic clock never goes backwards and measures
 * a real sleep; the unix-millisecond clock agrees with time(NULL). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <time.h>

#include "base/time.h"

static void test_monotonic_non_decreasing(void **state) {
  (void)state;
  int64_t prev = kiln_time_monotonic_ns();
  assert_true(prev >= 0);
  for (int i = 0; i < 100000; i++) {
    int64_t now = kiln_time_monotonic_ns();
    assert_true(now >= prev);
    prev = now;
  }
}

static void test_monotonic_measures_sleep(void **state) {
  (void)state;
  struct timespec nap = {0, 20 * 1000 * 1000}; /* 20 ms */
  int64_t start = kiln_time_monotonic_ns();
  while (nanosleep(&nap, &nap) != 0) {
  }
  int64_t elapsed = kiln_time_monotonic_ns() - start;
  /* Nanoseconds: at least the 20 ms slept, and not wildly more (units are ns, not us). */
  assert_true(elapsed >= 20 * 1000 * 1000);
  assert_true(elapsed < 10LL * 1000 * 1000 * 1000);
}

static void test_unix_ms_matches_time(void **state) {
  (void)state;
  time_t before = time(NULL);
  int64_t ms = kiln_time_unix_ms();
  time_t after = time(NULL);
  /* Within a second of time(NULL)*1000; a little slack because glibc's time() may
   * read a coarser clock that lags CLOCK_REALTIME by a tick. */
  assert_true(ms >= (int64_t)before * 1000 - 50);
  assert_true(ms < ((int64_t)after + 1) * 1000 + 50);
}

static void test_unix_ms_advances(void **state) {
  (void)state;
  int64_t a = kiln_time_unix_ms();
  struct timespec nap = {0, 15 * 1000 * 1000};
  while (nanosleep(&nap, &nap) != 0) {
  }
  int64_t b = kiln_time_unix_ms();
  assert_true(b - a >= 10);
  assert_true(b - a < 10000);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_monotonic_non_decreasing),
      cmocka_unit_test(test_monotonic_measures_sleep),
      cmocka_unit_test(test_unix_ms_matches_time),
      cmocka_unit_test(test_unix_ms_advances),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
