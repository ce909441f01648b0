/* Unit tests for base/alloc: every wrapper (malloc, calloc, realloc, free, strdup,
 * strndup, memdup) goes through installed hooks and balances; zero-size requests
 * return usable non-NULL pointers; strndup truncates; calloc zeroes; restoring the
 * libc allocator; and the abort paths (calloc count*size overflow, a failing malloc
 * or realloc hook) checked in forked children that must die of SIGABRT. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "base/alloc.h"
#include "tests/unit/support/testing.h"

/* Counting allocator: the fixture. `fill` poisons fresh blocks so that a test of
 * zeroing can fail. */
static struct {
  int mallocs, reallocs, frees;
  long live; /* blocks handed out and not yet freed */
  size_t last_size;
  int fill;
} counts;

static void *count_malloc(size_t size) {
  counts.mallocs++;
  counts.last_size = size;
  void *p = malloc(size);
  if (p) {
    counts.live++;
    if (counts.fill) memset(p, 0xA5, size);
  }
  return p;
}

static void *count_realloc(void *ptr, size_t size) {
  counts.reallocs++;
  counts.last_size = size;
  void *p = realloc(ptr, size);
  if (p && !ptr) counts.live++;
  return p;
}

static void count_free(void *ptr) {
  counts.frees++;
  counts.live--;
  free(ptr);
}

static const kiln_alloc_hooks_t counting_hooks = {count_malloc, count_realloc, count_free};

static void *failing_malloc(size_t size) {
  (void)size;
  return NULL;
}

static void *failing_realloc(void *ptr, size_t size) {
  (void)ptr;
  (void)size;
  return NULL;
}

static int group_setup(void **state) {
  (void)state;
  kiln_alloc_set_hooks(&counting_hooks);
  return 0;
}

static int group_teardown(void **state) {
  (void)state;
  kiln_alloc_set_hooks(NULL);
  return 0;
}

static int reset_counts(void **state) {
  (void)state;
  memset(&counts, 0, sizeof counts);
  kiln_alloc_set_hooks(&counting_hooks);
  return 0;
}

static int check_balanced(void **state) {
  (void)state;
  /* Every test frees what it allocates through the wrappers. */
  assert_int_equal(counts.live, 0);
  return 0;
}

static void test_malloc_free_use_hooks(void **state) {
  (void)state;
  char *p = kiln_malloc(10);
  assert_non_null(p);
  assert_int_equal(counts.mallocs, 1);
  assert_int_equal(counts.last_size, 10);
  memcpy(p, "123456789", 10);
  kiln_free(p);
  assert_int_equal(counts.frees, 1);
  assert_int_equal(counts.reallocs, 0);
}

static void test_free_null_is_noop(void **state) {
  (void)state;
  kiln_free(NULL);
  assert_int_equal(counts.frees, 0);
}

static void test_realloc_uses_hook_and_keeps_content(void **state) {
  (void)state;
  char *p = kiln_realloc(NULL, 4);
  assert_non_null(p);
  assert_int_equal(counts.reallocs, 1);
  assert_int_equal(counts.live, 1);
  memcpy(p, "abc", 4);
  p = kiln_realloc(p, 100000);
  assert_int_equal(counts.reallocs, 2);
  assert_int_equal(counts.last_size, 100000);
  assert_string_equal(p, "abc");
  p[99999] = 'z';
  p = kiln_realloc(p, 3);
  assert_memory_equal(p, "abc", 3);
  assert_int_equal(counts.reallocs, 3);
  kiln_free(p);
  assert_int_equal(counts.frees, 1);
}

static void test_string_helpers_use_hooks(void **state) {
  (void)state;
  char *a = kiln_strdup("hello");
  char *b = kiln_strndup("hello world", 5);
  char *c = kiln_memdup("xyz", 3);
  int *d = kiln_calloc(4, sizeof *d);
  assert_int_equal(counts.mallocs, 4);
  assert_int_equal(counts.live, 4);
  assert_string_equal(a, "hello");
  assert_string_equal(b, "hello");
  assert_memory_equal(c, "xyz", 3);
  for (int i = 0; i < 4; i++) assert_int_equal(d[i], 0);
  kiln_free(a);
  kiln_free(b);
  kiln_free(c);
  kiln_free(d);
  assert_int_equal(counts.frees, 4);
  assert_int_equal(counts.reallocs, 0);
}

static void test_strdup_copies(void **state) {
  (void)state;
  char src[] = "mutable";
  char *copy = kiln_strdup(src);
  assert_ptr_not_equal(copy, src);
  src[0] = 'X';
  assert_string_equal(copy, "mutable");
  kiln_free(copy);

  char *empty = kiln_strdup("");
  assert_non_null(empty);
  assert_string_equal(empty, "");
  kiln_free(empty);
}

static void test_null_strings_give_null(void **state) {
  (void)state;
  assert_null(kiln_strdup(NULL));
  assert_null(kiln_strndup(NULL, 4));
  assert_int_equal(counts.mallocs, 0);
}

static void test_strndup_truncates(void **state) {
  (void)state;
  char *s = kiln_strndup("hello", 3);
  assert_string_equal(s, "hel");
  kiln_free(s);

  s = kiln_strndup("hi", 10);
  assert_string_equal(s, "hi");
  kiln_free(s);

  s = kiln_strndup("hello", 5);
  assert_string_equal(s, "hello");
  kiln_free(s);

  s = kiln_strndup("hello", 0);
  assert_non_null(s);
  assert_string_equal(s, "");
  kiln_free(s);

  /* Not NUL-terminated: must read no more than n bytes (ASan checks). */
  char *raw = malloc(3);
  assert_non_null(raw);
  memcpy(raw, "abc", 3);
  s = kiln_strndup(raw, 3);
  assert_string_equal(s, "abc");
  kiln_free(s);
  s = kiln_strndup(raw, 2);
  assert_string_equal(s, "ab");
  kiln_free(s);
  free(raw);
}

static void test_memdup_copies_bytes(void **state) {
  (void)state;
  static const unsigned char bytes[] = {0, 1, 2, 0xff, 0, 42};
  unsigned char *copy = kiln_memdup(bytes, sizeof bytes);
  assert_non_null(copy);
  assert_ptr_not_equal(copy, bytes);
  assert_memory_equal(copy, bytes, sizeof bytes);
  assert_int_equal(counts.last_size, sizeof bytes);
  kiln_free(copy);
}

static void test_zero_size_returns_non_null(void **state) {
  (void)state;
  void *ptrs[7];
  ptrs[0] = kiln_malloc(0);
  ptrs[1] = kiln_calloc(0, 8);
  ptrs[2] = kiln_calloc(8, 0);
  ptrs[3] = kiln_calloc(0, 0);
  ptrs[4] = kiln_realloc(NULL, 0);
  ptrs[5] = kiln_memdup("x", 0);
  ptrs[6] = kiln_malloc(16);
  assert_non_null(ptrs[6]);
  /* Shrinking a live block to zero keeps a freeable block (libc may free and
   * return NULL here; the wrapper must not). */
  ptrs[6] = kiln_realloc(ptrs[6], 0);
  for (size_t i = 0; i < 7; i++) {
    if (!ptrs[i]) fail_msg("zero-size allocation %zu returned NULL", i);
  }
  assert_int_equal(counts.live, 7);
  for (size_t i = 0; i < 7; i++) kiln_free(ptrs[i]);
  assert_int_equal(counts.frees, 7);
}

static void test_calloc_zeroes(void **state) {
  (void)state;
  counts.fill = 1;
  /* Control: the poisoning hook really leaves garbage in a plain malloc. */
  unsigned char *dirty = kiln_malloc(64);
  assert_int_equal(dirty[0], 0xA5);
  assert_int_equal(dirty[63], 0xA5);
  kiln_free(dirty);

  size_t count = 1000, size = sizeof(uint64_t);
  uint64_t *p = kiln_calloc(count, size);
  assert_int_equal(counts.last_size, count * size);
  for (size_t i = 0; i < count; i++) {
    if (p[i] != 0) fail_msg("calloc left word %zu non-zero", i);
  }
  kiln_free(p);
}

static void test_restore_libc(void **state) {
  (void)state;
  kiln_alloc_set_hooks(NULL);
  void *p = kiln_malloc(32);
  char *s = kiln_strdup("libc");
  p = kiln_realloc(p, 64);
  kiln_free(p);
  kiln_free(s);
  assert_int_equal(counts.mallocs, 0);
  assert_int_equal(counts.reallocs, 0);
  assert_int_equal(counts.frees, 0);
  /* And the hooks take effect again once reinstalled. */
  kiln_alloc_set_hooks(&counting_hooks);
  kiln_free(kiln_malloc(1));
  assert_int_equal(counts.mallocs, 1);
  assert_int_equal(counts.frees, 1);
}

static void child_allocates_normally(void) {
  kiln_free(kiln_calloc(16, 16));
  kiln_free(kiln_malloc(16));
}

static void child_calloc_overflow(void) { (void)kiln_calloc(SIZE_MAX / 2 + 1, 2); }
static void child_calloc_overflow_max(void) { (void)kiln_calloc(SIZE_MAX, SIZE_MAX); }
static void child_calloc_overflow_just(void) { (void)kiln_calloc(SIZE_MAX / 16 + 1, 16); }

static void child_failing_malloc(void) {
  kiln_alloc_hooks_t h = {failing_malloc, count_realloc, count_free};
  kiln_alloc_set_hooks(&h);
  (void)kiln_malloc(16);
}

static void child_failing_malloc_strdup(void) {
  kiln_alloc_hooks_t h = {failing_malloc, count_realloc, count_free};
  kiln_alloc_set_hooks(&h);
  (void)kiln_strdup("x");
}

static void child_failing_malloc_zero(void) {
  kiln_alloc_hooks_t h = {failing_malloc, count_realloc, count_free};
  kiln_alloc_set_hooks(&h);
  (void)kiln_malloc(0);
}

static void child_failing_realloc(void) {
  kiln_alloc_hooks_t h = {count_malloc, failing_realloc, count_free};
  kiln_alloc_set_hooks(&h);
  (void)kiln_realloc(NULL, 8);
}

static void test_child_harness_control(void **state) {
  (void)state;
  /* The harness tells a clean exit from an abort. */
  int wstatus = kiln_test_run_in_child(child_allocates_normally);
  assert_true(WIFEXITED(wstatus));
  assert_int_equal(WEXITSTATUS(wstatus), 0);
}

static void test_calloc_overflow_aborts(void **state) {
  (void)state;
  kiln_test_assert_died_of_sigabrt(kiln_test_run_in_child(child_calloc_overflow));
  kiln_test_assert_died_of_sigabrt(kiln_test_run_in_child(child_calloc_overflow_max));
  kiln_test_assert_died_of_sigabrt(kiln_test_run_in_child(child_calloc_overflow_just));
}

static void test_failing_malloc_hook_aborts(void **state) {
  (void)state;
  kiln_test_assert_died_of_sigabrt(kiln_test_run_in_child(child_failing_malloc));
  kiln_test_assert_died_of_sigabrt(kiln_test_run_in_child(child_failing_malloc_strdup));
  kiln_test_assert_died_of_sigabrt(kiln_test_run_in_child(child_failing_malloc_zero));
}

static void test_failing_realloc_hook_aborts(void **state) {
  (void)state;
  kiln_test_assert_died_of_sigabrt(kiln_test_run_in_child(child_failing_realloc));
}

int main(void) {
#define T(f) cmocka_unit_test_setup_teardown(f, reset_counts, check_balanced)
  const struct CMUnitTest tests[] = {
      T(test_malloc_free_use_hooks),
      T(test_free_null_is_noop),
      T(test_realloc_uses_hook_and_keeps_content),
      T(test_string_helpers_use_hooks),
      T(test_strdup_copies),
      T(test_null_strings_give_null),
      T(test_strndup_truncates),
      T(test_memdup_copies_bytes),
      T(test_zero_size_returns_non_null),
      T(test_calloc_zeroes),
      T(test_restore_libc),
      T(test_child_harness_control),
      T(test_calloc_overflow_aborts),
      T(test_failing_malloc_hook_aborts),
      T(test_failing_realloc_hook_aborts),
  };
#undef T
  return cmocka_run_group_tests(tests, group_setup, group_teardown);
}
