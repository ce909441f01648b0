/* Unit tests for daemon/stats: init state; record then find by exact path (found
 * by content, not by pointer); per-code counting and totals; entries kept in
 * first-call order; the NULL method counted under "(unknown)"; codes outside
 * 0..16 (negative, 17, huge) folded into UNKNOWN; and the capacity contract: a
 * full table never grows past KILND_STATS_MAX_METHODS, methods beyond it fold into
 * "(unknown)" and never inflate another method's counters. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "daemon/stats.h"

#define GET_SERVER_INFO "/kiln.v1.Kiln/GetServerInfo"
#define GET_STATS       "/kiln.v1.Kiln/GetStats"
#define HEALTH_CHECK    "/grpc.health.v1.Health/Check"

/* Method names with static storage, as kilnd_stats_record requires. */
static char many_names[KILND_STATS_MAX_METHODS + 8][48];

static int group_setup(void **state) {
  (void)state;
  for (size_t i = 0; i < sizeof many_names / sizeof many_names[0]; i++) {
    snprintf(many_names[i], sizeof many_names[i], "/test.Service/Method%zu", i);
  }
  return 0;
}

static int setup_stats(void **state) {
  kilnd_stats_t *stats = malloc(sizeof *stats);
  if (!stats) return -1;
  memset(stats, 0xA5, sizeof *stats); /* so that init has something to clear */
  kilnd_stats_init(stats);
  *state = stats;
  return 0;
}

static int teardown_stats(void **state) {
  free(*state);
  return 0;
}

static uint64_t sum_by_code(const kilnd_method_stats_t *m) {
  uint64_t sum = 0;
  for (int c = 0; c < KILN_STATUS_CODE_COUNT; c++) sum += m->by_code[c];
  return sum;
}

static void test_init_is_empty(void **state) {
  kilnd_stats_t *stats = *state;
  assert_int_equal(stats->method_count, 0);
  assert_int_equal(stats->calls_in_flight, 0);
  assert_null(kilnd_stats_find(stats, GET_SERVER_INFO));
  assert_null(kilnd_stats_find(stats, KILND_STATS_UNKNOWN_METHOD));
}

static void test_record_then_find(void **state) {
  kilnd_stats_t *stats = *state;
  kilnd_stats_record(stats, GET_SERVER_INFO, KILN_STATUS_OK);
  assert_int_equal(stats->method_count, 1);

  const kilnd_method_stats_t *m = kilnd_stats_find(stats, GET_SERVER_INFO);
  assert_non_null(m);
  assert_string_equal(m->method, GET_SERVER_INFO);
  assert_int_equal(m->total, 1);
  assert_int_equal(m->by_code[KILN_STATUS_OK], 1);
  assert_int_equal(sum_by_code(m), 1);

  /* Lookup is by content: a different buffer with the same text finds it. */
  char copy[64];
  snprintf(copy, sizeof copy, "%s", GET_SERVER_INFO);
  assert_ptr_equal(kilnd_stats_find(stats, copy), m);

  /* Methods without calls, and prefixes of known ones, are not found. */
  assert_null(kilnd_stats_find(stats, GET_STATS));
  assert_null(kilnd_stats_find(stats, "/kiln.v1.Kiln/GetServer"));
  assert_null(kilnd_stats_find(stats, ""));
}

static void test_per_code_counting(void **state) {
  kilnd_stats_t *stats = *state;
  for (int i = 0; i < 5; i++) kilnd_stats_record(stats, GET_STATS, KILN_STATUS_OK);
  for (int i = 0; i < 3; i++) kilnd_stats_record(stats, GET_STATS, KILN_STATUS_UNAVAILABLE);
  kilnd_stats_record(stats, GET_STATS, KILN_STATUS_INVALID_ARGUMENT);
  kilnd_stats_record(stats, GET_STATS, KILN_STATUS_UNAUTHENTICATED); /* the last code, 16 */
  kilnd_stats_record(stats, GET_STATS, KILN_STATUS_CANCELLED);

  /* The same method with a second pointer (copied text) counts into one entry. */
  static const char copy[] = GET_STATS;
  kilnd_stats_record(stats, copy, KILN_STATUS_OK);

  assert_int_equal(stats->method_count, 1);
  const kilnd_method_stats_t *m = kilnd_stats_find(stats, GET_STATS);
  assert_non_null(m);
  assert_int_equal(m->total, 12);
  assert_int_equal(m->by_code[KILN_STATUS_OK], 6);
  assert_int_equal(m->by_code[KILN_STATUS_UNAVAILABLE], 3);
  assert_int_equal(m->by_code[KILN_STATUS_INVALID_ARGUMENT], 1);
  assert_int_equal(m->by_code[KILN_STATUS_UNAUTHENTICATED], 1);
  assert_int_equal(m->by_code[KILN_STATUS_CANCELLED], 1);
  assert_int_equal(m->by_code[KILN_STATUS_UNKNOWN], 0);
  assert_int_equal(m->by_code[KILN_STATUS_INTERNAL], 0);
  assert_int_equal(sum_by_code(m), m->total);
}

static void test_methods_are_separate_and_in_first_call_order(void **state) {
  kilnd_stats_t *stats = *state;
  kilnd_stats_record(stats, HEALTH_CHECK, KILN_STATUS_OK);
  kilnd_stats_record(stats, GET_SERVER_INFO, KILN_STATUS_OK);
  kilnd_stats_record(stats, HEALTH_CHECK, KILN_STATUS_NOT_FOUND);
  kilnd_stats_record(stats, GET_STATS, KILN_STATUS_OK);
  kilnd_stats_record(stats, GET_SERVER_INFO, KILN_STATUS_OK);

  assert_int_equal(stats->method_count, 3);
  assert_string_equal(stats->methods[0].method, HEALTH_CHECK);
  assert_string_equal(stats->methods[1].method, GET_SERVER_INFO);
  assert_string_equal(stats->methods[2].method, GET_STATS);

  const kilnd_method_stats_t *health = kilnd_stats_find(stats, HEALTH_CHECK);
  const kilnd_method_stats_t *info = kilnd_stats_find(stats, GET_SERVER_INFO);
  const kilnd_method_stats_t *st = kilnd_stats_find(stats, GET_STATS);
  assert_int_equal(health->total, 2);
  assert_int_equal(health->by_code[KILN_STATUS_OK], 1);
  assert_int_equal(health->by_code[KILN_STATUS_NOT_FOUND], 1);
  assert_int_equal(info->total, 2);
  assert_int_equal(info->by_code[KILN_STATUS_OK], 2);
  assert_int_equal(info->by_code[KILN_STATUS_NOT_FOUND], 0);
  assert_int_equal(st->total, 1);
}

static void test_null_method_goes_to_unknown_bucket(void **state) {
  kilnd_stats_t *stats = *state;
  kilnd_stats_record(stats, NULL, KILN_STATUS_UNIMPLEMENTED);
  kilnd_stats_record(stats, GET_STATS, KILN_STATUS_OK);
  kilnd_stats_record(stats, NULL, KILN_STATUS_UNIMPLEMENTED);
  kilnd_stats_record(stats, NULL, KILN_STATUS_OK);

  assert_int_equal(stats->method_count, 2);
  const kilnd_method_stats_t *u = kilnd_stats_find(stats, KILND_STATS_UNKNOWN_METHOD);
  assert_non_null(u);
  assert_string_equal(u->method, "(unknown)");
  assert_int_equal(u->total, 3);
  assert_int_equal(u->by_code[KILN_STATUS_UNIMPLEMENTED], 2);
  assert_int_equal(u->by_code[KILN_STATUS_OK], 1);
  assert_int_equal(kilnd_stats_find(stats, GET_STATS)->total, 1);
}

static void test_out_of_range_codes_fold_to_unknown(void **state) {
  kilnd_stats_t *stats = *state;
  kilnd_stats_record(stats, GET_SERVER_INFO, (kiln_status_code_t)-1);
  kilnd_stats_record(stats, GET_SERVER_INFO, (kiln_status_code_t)KILN_STATUS_CODE_COUNT);
  kilnd_stats_record(stats, GET_SERVER_INFO, (kiln_status_code_t)1000);
  kilnd_stats_record(stats, GET_SERVER_INFO, (kiln_status_code_t)INT32_MIN);
  kilnd_stats_record(stats, GET_SERVER_INFO, KILN_STATUS_UNKNOWN);

  const kilnd_method_stats_t *m = kilnd_stats_find(stats, GET_SERVER_INFO);
  assert_non_null(m);
  assert_int_equal(m->total, 5);
  assert_int_equal(m->by_code[KILN_STATUS_UNKNOWN], 5);
  assert_int_equal(sum_by_code(m), 5);
  assert_int_equal(stats->method_count, 1);
}

static void test_table_fills_to_capacity(void **state) {
  kilnd_stats_t *stats = *state;
  for (size_t i = 0; i < KILND_STATS_MAX_METHODS - 1; i++) {
    kilnd_stats_record(stats, many_names[i], KILN_STATUS_OK);
  }
  assert_int_equal(stats->method_count, KILND_STATS_MAX_METHODS - 1);
  /* Every one of them is its own entry with its own count. */
  for (size_t i = 0; i < KILND_STATS_MAX_METHODS - 1; i++) {
    const kilnd_method_stats_t *m = kilnd_stats_find(stats, many_names[i]);
    assert_non_null(m);
    assert_ptr_equal(m->method, many_names[i]);
    assert_int_equal(m->total, 1);
  }
  /* Calls to known entries still count once the table is nearly full. */
  kilnd_stats_record(stats, many_names[0], KILN_STATUS_INTERNAL);
  assert_int_equal(kilnd_stats_find(stats, many_names[0])->total, 2);
  assert_int_equal(stats->method_count, KILND_STATS_MAX_METHODS - 1);
}

static void test_full_table_folds_into_unknown(void **state) {
  kilnd_stats_t *stats = *state;
  /* Fill every slot with a distinct known method, one call each. */
  for (size_t i = 0; i < KILND_STATS_MAX_METHODS; i++) {
    kilnd_stats_record(stats, many_names[i], KILN_STATUS_OK);
  }
  assert_true(stats->method_count <= KILND_STATS_MAX_METHODS);

  /* More distinct methods than the table holds. */
  for (size_t i = KILND_STATS_MAX_METHODS; i < KILND_STATS_MAX_METHODS + 8; i++) {
    kilnd_stats_record(stats, many_names[i], KILN_STATUS_NOT_FOUND);
  }
  kilnd_stats_record(stats, NULL, KILN_STATUS_UNIMPLEMENTED);

  /* The table never grows past its capacity, and every call is counted once. */
  assert_true(stats->method_count <= KILND_STATS_MAX_METHODS);
  uint64_t total = 0;
  for (size_t i = 0; i < stats->method_count; i++) {
    assert_int_equal(sum_by_code(&stats->methods[i]), stats->methods[i].total);
    total += stats->methods[i].total;
  }
  assert_int_equal(total, KILND_STATS_MAX_METHODS + 8 + 1);

  /* The overflow went to "(unknown)" (stats.h: "Methods past
   * KILND_STATS_MAX_METHODS fold into "(unknown)""), so no method that has an
   * entry of its own shows calls it never received. */
  for (size_t i = 0; i < KILND_STATS_MAX_METHODS + 8; i++) {
    const kilnd_method_stats_t *m = kilnd_stats_find(stats, many_names[i]);
    if (!m) continue;
    if (m->total != 1 || m->by_code[KILN_STATUS_NOT_FOUND] != 0) {
      fail_msg(
          "%s was counted %llu times (NOT_FOUND %llu) after 1 OK call: overflow calls were "
          "charged to it instead of \"(unknown)\"",
          m->method, (unsigned long long)m->total, (unsigned long long)m->by_code[KILN_STATUS_NOT_FOUND]);
    }
  }
  const kilnd_method_stats_t *u = kilnd_stats_find(stats, KILND_STATS_UNKNOWN_METHOD);
  if (!u) fail_msg("no \"(unknown)\" entry after overflowing the table");
  assert_true(u->by_code[KILN_STATUS_UNIMPLEMENTED] >= 1);
  assert_true(u->by_code[KILN_STATUS_NOT_FOUND] >= 8);
}

static void test_unknown_bucket_survives_full_table(void **state) {
  kilnd_stats_t *stats = *state;
  /* "(unknown)" exists first, then the table fills up: overflow joins it. */
  enum { EXTRA = 4 };
  kilnd_stats_record(stats, NULL, KILN_STATUS_UNIMPLEMENTED);
  for (size_t i = 0; i < KILND_STATS_MAX_METHODS + EXTRA; i++) {
    kilnd_stats_record(stats, many_names[i], KILN_STATUS_OK);
  }
  assert_true(stats->method_count <= KILND_STATS_MAX_METHODS);
  assert_true(stats->method_count >= KILND_STATS_MAX_METHODS - 1);
  const kilnd_method_stats_t *u = kilnd_stats_find(stats, KILND_STATS_UNKNOWN_METHOD);
  assert_non_null(u);
  assert_ptr_equal(u, &stats->methods[0]); /* still where it was created */

  /* The methods that got an entry are the first ones called, one call each. */
  size_t found = 0;
  while (found < KILND_STATS_MAX_METHODS + EXTRA && kilnd_stats_find(stats, many_names[found])) {
    assert_int_equal(kilnd_stats_find(stats, many_names[found])->total, 1);
    found++;
  }
  assert_int_equal(found, stats->method_count - 1);
  for (size_t i = found; i < KILND_STATS_MAX_METHODS + EXTRA; i++) {
    assert_null(kilnd_stats_find(stats, many_names[i]));
  }
  /* One UNIMPLEMENTED call, plus one OK call per method that found no slot. */
  assert_int_equal(u->by_code[KILN_STATUS_UNIMPLEMENTED], 1);
  assert_int_equal(u->by_code[KILN_STATUS_OK], KILND_STATS_MAX_METHODS + EXTRA - found);
  assert_int_equal(u->total, 1 + KILND_STATS_MAX_METHODS + EXTRA - found);
}

int main(void) {
#define T(f) cmocka_unit_test_setup_teardown(f, setup_stats, teardown_stats)
  const struct CMUnitTest tests[] = {
      T(test_init_is_empty),
      T(test_record_then_find),
      T(test_per_code_counting),
      T(test_methods_are_separate_and_in_first_call_order),
      T(test_null_method_goes_to_unknown_bucket),
      T(test_out_of_range_codes_fold_to_unknown),
      T(test_table_fills_to_capacity),
      T(test_full_table_folds_into_unknown),
      T(test_unknown_bucket_survives_full_table),
  };
#undef T
  return cmocka_run_group_tests(tests, group_setup, NULL);
}
