/* Unit tests for base/strmap: put, get, replace and remove against a plain array
 * model over 20,000 random operations on 300 keys (growth, tombstones reused and
 * cleared by rehashing), iteration visiting each live entry once, keys copied
 * (the caller's buffer may change), an empty map, FNV-1a's published values, and
 * a steady count of keys under churn keeping its table size.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <stdio.h>
#include <string.h>

#include "base/strmap.h"
#include "tests/unit/support/testing.h"

static void test_fnv1a_published_values(void **state) {
  (void)state;
  assert_true(kiln_hash_bytes("", 0) == 0xcbf29ce484222325ULL);
  assert_true(kiln_hash_bytes("a", 1) == 0xaf63dc4c8601ec8cULL);
  assert_true(kiln_hash_bytes("foobar", 6) == 0x85944171f73967e8ULL);
}

static void test_empty_and_copied_keys(void **state) {
  (void)state;
  kiln_strmap_t m;
  kiln_strmap_init(&m);
  assert_null(kiln_strmap_get(&m, "x"));
  assert_null(kiln_strmap_remove(&m, "x"));
  size_t cursor = 0;
  const char *k;
  void *v;
  assert_false(kiln_strmap_next(&m, &cursor, &k, &v));
  char key[8] = "abc";
  int one = 1, two = 2;
  assert_null(kiln_strmap_put(&m, key, &one));
  key[0] = 'z'; /* the map kept its own copy */
  assert_ptr_equal(kiln_strmap_get(&m, "abc"), &one);
  assert_null(kiln_strmap_get(&m, "zbc"));
  assert_ptr_equal(kiln_strmap_put(&m, "abc", &two), &one);
  assert_int_equal(m.count, 1);
  kiln_strmap_deinit(&m);
  kiln_strmap_deinit(&m); /* a deinit'd map is empty */
  assert_null(kiln_strmap_get(&m, "abc"));
}

#define KEYS 300

static void test_against_a_model(void **state) {
  (void)state;
  kiln_strmap_t m;
  kiln_strmap_init(&m);
  static int values[KEYS];
  void *model[KEYS] = {0};
  char names[KEYS][16];
  for (int i = 0; i < KEYS; i++) snprintf(names[i], sizeof names[i], "job-%d", i * 7919);
  uint64_t rng = 42;
  for (int op = 0; op < 20000; op++) {
    int i = (int)(kiln_test_random_next(&rng) % KEYS);
    switch (kiln_test_random_next(&rng) % 3) {
      case 0:
        assert_ptr_equal(kiln_strmap_put(&m, names[i], &values[i]), model[i]);
        model[i] = &values[i];
        break;
      case 1:
        assert_ptr_equal(kiln_strmap_remove(&m, names[i]), model[i]);
        model[i] = NULL;
        break;
      default: assert_ptr_equal(kiln_strmap_get(&m, names[i]), model[i]);
    }
    assert_true(m.used * 2 <= m.cap);
  }
  size_t live = 0;
  for (int i = 0; i < KEYS; i++) live += model[i] != NULL;
  assert_int_equal(m.count, live);
  size_t seen = 0, cursor = 0;
  const char *k;
  void *v;
  while (kiln_strmap_next(&m, &cursor, &k, &v)) {
    int i = (int)((int *)v - values);
    assert_string_equal(k, names[i]);
    assert_ptr_equal(model[i], v);
    seen++;
  }
  assert_int_equal(seen, live);
  kiln_strmap_deinit(&m);
}

/* kilnd's job index: a steady count of live keys while new ones keep replacing
 * the oldest. The table must stay the size that count needs (tombstones reused by
 * rehashing at the same size), and every live key stay reachable. */
static void test_churn_at_a_steady_count(void **state) {
  (void)state;
  enum { LIVE = 1000, ROUNDS = 50000 };
  kiln_strmap_t m;
  kiln_strmap_init(&m);
  static int value;
  char name[32];
  for (int i = 0; i < ROUNDS; i++) {
    snprintf(name, sizeof name, "job-%d", i);
    assert_null(kiln_strmap_put(&m, name, &value));
    if (i >= LIVE) {
      snprintf(name, sizeof name, "job-%d", i - LIVE);
      assert_ptr_equal(kiln_strmap_remove(&m, name), &value);
    }
    assert_true(m.used * 2 <= m.cap);
    assert_true(m.cap <= 8 * LIVE); /* live keys fill a quarter at least, after any rehash */
  }
  assert_int_equal(m.count, LIVE);
  for (int i = ROUNDS - LIVE; i < ROUNDS; i++) {
    snprintf(name, sizeof name, "job-%d", i);
    assert_ptr_equal(kiln_strmap_get(&m, name), &value);
  }
  snprintf(name, sizeof name, "job-%d", ROUNDS - LIVE - 1);
  assert_null(kiln_strmap_get(&m, name));
  kiln_strmap_deinit(&m);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_fnv1a_published_values),
      cmocka_unit_test(test_empty_and_copied_keys),
      cmocka_unit_test(test_against_a_model),
      cmocka_unit_test(test_churn_at_a_steady_count),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
