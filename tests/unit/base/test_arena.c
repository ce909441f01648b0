/* Unit tests for base/arena: an empty arena deinits cleanly; many small allocations
 * are distinct, 16-byte aligned and never overlap (every byte written and checked
 * back); zero-size requests; large (> 1 KiB) allocations interleaved with small
 * ones keep both kinds working; used_bytes accounting; calloc zeroes poisoned
 * memory; strdup (NULL, "", long) and sprintf (short, empty, longer than a chunk);
 * deinit frees every block (a counting allocator behind kiln_alloc_set_hooks must
 * balance) and leaves the arena reusable; size overflows abort in a forked child. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "base/alloc.h"
#include "base/arena.h"
#include "tests/unit/support/testing.h"

/* Counting allocator: proves deinit returns every block, and poisons fresh blocks
 * so that the calloc test can fail. */
static struct {
  long live;
  long mallocs;
} counts;

static void *count_malloc(size_t size) {
  void *p = malloc(size);
  if (p) {
    counts.live++;
    counts.mallocs++;
    memset(p, 0xA5, size);
  }
  return p;
}

static void *count_realloc(void *ptr, size_t size) {
  void *p = realloc(ptr, size);
  if (p && !ptr) counts.live++;
  return p;
}

static void count_free(void *ptr) {
  if (ptr) counts.live--;
  free(ptr);
}

static const kiln_alloc_hooks_t counting_hooks = {count_malloc, count_realloc, count_free};

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

/* Per-test fixture: a fresh arena on the heap (libc malloc, not counted). */
static int setup_arena(void **state) {
  counts.live = 0;
  counts.mallocs = 0;
  kiln_arena_t *arena = malloc(sizeof *arena);
  if (!arena) return -1;
  kiln_arena_init(arena);
  *state = arena;
  return 0;
}

static int teardown_arena(void **state) {
  kiln_arena_t *arena = *state;
  kiln_arena_deinit(arena);
  assert_null(arena->chunks);
  assert_int_equal(arena->used_bytes, 0);
  /* Everything the arena took from the allocator went back. */
  assert_int_equal(counts.live, 0);
  free(arena);
  return 0;
}

static void assert_aligned(const void *p) {
  assert_non_null(p);
  if ((uintptr_t)p % 16 != 0) fail_msg("pointer %p is not 16-byte aligned", p);
}

static void test_init_is_empty(void **state) {
  kiln_arena_t *arena = *state;
  assert_null(arena->chunks);
  assert_int_equal(arena->used_bytes, 0);
  assert_int_equal(counts.mallocs, 0);
}

static void test_many_small_allocations(void **state) {
  kiln_arena_t *arena = *state;
  enum { N = 5000 };
  static unsigned char *ptrs[N];
  static size_t sizes[N];
  for (size_t i = 0; i < N; i++) {
    sizes[i] = 1 + (i * 7) % 200; /* 1..200 bytes, all below a quarter chunk */
    ptrs[i] = kiln_arena_alloc(arena, sizes[i]);
    assert_aligned(ptrs[i]);
    memset(ptrs[i], (int)(i & 0xff), sizes[i]);
  }
  /* No allocation overlapped another: every byte still holds its own pattern. */
  for (size_t i = 0; i < N; i++) {
    for (size_t k = 0; k < sizes[i]; k++) {
      if (ptrs[i][k] != (unsigned char)(i & 0xff)) {
        fail_msg("allocation %zu byte %zu was overwritten", i, k);
      }
    }
  }
  assert_true(counts.mallocs > 1);      /* more than one chunk was needed */
  assert_true(counts.mallocs < N / 10); /* but small requests share chunks */
}

static void test_alignment_of_odd_sizes(void **state) {
  kiln_arena_t *arena = *state;
  for (size_t size = 1; size <= 300; size++) {
    void *p = kiln_arena_alloc(arena, size);
    assert_aligned(p);
    memset(p, 0x5A, size);
  }
  /* Alignment survives a large allocation in between as well. */
  assert_aligned(kiln_arena_alloc(arena, 3));
  assert_aligned(kiln_arena_alloc(arena, 5000));
  assert_aligned(kiln_arena_alloc(arena, 7));
  assert_aligned(kiln_arena_alloc(arena, 1025));
  assert_aligned(kiln_arena_alloc(arena, 1));
}

static void test_zero_size_allocations_are_distinct(void **state) {
  kiln_arena_t *arena = *state;
  void *a = kiln_arena_alloc(arena, 0);
  void *b = kiln_arena_alloc(arena, 0);
  assert_aligned(a);
  assert_aligned(b);
  assert_ptr_not_equal(a, b);
}

static void test_used_bytes_accounting(void **state) {
  kiln_arena_t *arena = *state;
  kiln_arena_alloc(arena, 1); /* rounds to 16 */
  assert_int_equal(arena->used_bytes, 16);
  kiln_arena_alloc(arena, 16); /* 16 */
  assert_int_equal(arena->used_bytes, 32);
  kiln_arena_alloc(arena, 17); /* 32 */
  assert_int_equal(arena->used_bytes, 64);
  kiln_arena_alloc(arena, 2000); /* dedicated chunk, 2000 rounded to 2000 */
  assert_int_equal(arena->used_bytes, 2064);
}

static void test_large_interleaved_with_small(void **state) {
  kiln_arena_t *arena = *state;
  enum { ROUNDS = 200 };
  static unsigned char *small[ROUNDS][3];
  static unsigned char *large[ROUNDS];
  static size_t large_size[ROUNDS];
  for (size_t r = 0; r < ROUNDS; r++) {
    small[r][0] = kiln_arena_alloc(arena, 24);
    large_size[r] = 1025 + r * 97; /* 1025 .. ~20 KiB: each gets its own chunk */
    large[r] = kiln_arena_alloc(arena, large_size[r]);
    small[r][1] = kiln_arena_alloc(arena, 8);
    small[r][2] = kiln_arena_alloc(arena, 100);
    assert_aligned(large[r]);
    for (int k = 0; k < 3; k++) assert_aligned(small[r][k]);
    memset(large[r], (int)(0x80 | (r & 0x7f)), large_size[r]);
    memset(small[r][0], (int)(r & 0x7f), 24);
    memset(small[r][1], (int)(r & 0x7f), 8);
    memset(small[r][2], (int)(r & 0x7f), 100);
  }
  for (size_t r = 0; r < ROUNDS; r++) {
    for (size_t k = 0; k < large_size[r]; k++) {
      if (large[r][k] != (unsigned char)(0x80 | (r & 0x7f))) fail_msg("large %zu byte %zu", r, k);
    }
    static const size_t ss[3] = {24, 8, 100};
    for (int s = 0; s < 3; s++) {
      for (size_t k = 0; k < ss[s]; k++) {
        if (small[r][s][k] != (unsigned char)(r & 0x7f)) fail_msg("small %zu/%d byte %zu", r, s, k);
      }
    }
  }
  /* Small requests kept sharing chunks: the large ones did not force a new small
   * chunk each time (one chunk per large request, plus a handful of 4 KiB ones). */
  assert_true(counts.mallocs < ROUNDS + ROUNDS / 4);
}

static void test_large_first_then_small(void **state) {
  kiln_arena_t *arena = *state;
  /* A large request into an empty arena, then small ones. */
  unsigned char *big = kiln_arena_alloc(arena, 64 * 1024);
  memset(big, 0x11, 64 * 1024);
  unsigned char *a = kiln_arena_alloc(arena, 10);
  unsigned char *b = kiln_arena_alloc(arena, 10);
  assert_aligned(a);
  assert_aligned(b);
  memset(a, 0x22, 10);
  memset(b, 0x33, 10);
  for (size_t k = 0; k < 64 * 1024; k++) {
    if (big[k] != 0x11) fail_msg("big byte %zu overwritten", k);
  }
  for (size_t k = 0; k < 10; k++) {
    assert_int_equal(a[k], 0x22);
    assert_int_equal(b[k], 0x33);
  }
}

static void test_calloc_zeroes(void **state) {
  kiln_arena_t *arena = *state;
  /* Fresh chunks are poisoned with 0xA5 by the counting allocator. */
  static const size_t shapes[][2] = {{1, 1}, {3, 7}, {16, 16}, {100, 8}, {1, 5000}, {0, 8}, {8, 0}};
  for (size_t s = 0; s < sizeof shapes / sizeof shapes[0]; s++) {
    size_t count = shapes[s][0], size = shapes[s][1];
    unsigned char *p = kiln_arena_calloc(arena, count, size);
    assert_aligned(p);
    for (size_t k = 0; k < count * size; k++) {
      if (p[k] != 0) fail_msg("calloc(%zu, %zu) byte %zu is 0x%02x", count, size, k, p[k]);
    }
    memset(p, 0xEE, count * size); /* dirty it for the next shape */
  }
}

static void test_strdup(void **state) {
  kiln_arena_t *arena = *state;
  assert_null(kiln_arena_strdup(arena, NULL));
  char *empty = kiln_arena_strdup(arena, "");
  assert_non_null(empty);
  assert_string_equal(empty, "");

  static const char text[] = "kiln arena";
  char *copy = kiln_arena_strdup(arena, text);
  assert_string_equal(copy, text);
  assert_ptr_not_equal(copy, text);
  assert_aligned(copy);

  char longer[3000];
  memset(longer, 'x', sizeof longer - 1);
  longer[sizeof longer - 1] = '\0';
  char *long_copy = kiln_arena_strdup(arena, longer);
  assert_string_equal(long_copy, longer);
  assert_string_equal(copy, text); /* earlier copies stay intact */
}

static void test_sprintf(void **state) {
  kiln_arena_t *arena = *state;
  char *s = kiln_arena_sprintf(arena, "%s-%d-%05.1f", "job", 42, 3.14159);
  assert_string_equal(s, "job-42-003.1");
  assert_aligned(s);

  char *empty = kiln_arena_sprintf(arena, "%s", "");
  assert_non_null(empty);
  assert_string_equal(empty, "");

  /* Longer than a whole chunk: the formatted length is measured, not guessed. */
  char *big = kiln_arena_sprintf(arena, "%05000d|%s", 7, "end");
  assert_int_equal(strlen(big), 5004);
  assert_int_equal(big[0], '0');
  assert_int_equal(big[4999], '7');
  assert_string_equal(big + 5000, "|end");
  assert_string_equal(s, "job-42-003.1");
}

static void test_deinit_frees_and_arena_is_reusable(void **state) {
  kiln_arena_t *arena = *state;
  for (int i = 0; i < 100; i++) {
    kiln_arena_alloc(arena, 100);
    kiln_arena_alloc(arena, 3000);
  }
  assert_true(counts.live > 100);
  kiln_arena_deinit(arena);
  assert_int_equal(counts.live, 0);
  assert_null(arena->chunks);
  assert_int_equal(arena->used_bytes, 0);

  /* Deinit leaves an empty arena that can be used again (and deinit twice is fine). */
  kiln_arena_deinit(arena);
  char *s = kiln_arena_strdup(arena, "again");
  assert_string_equal(s, "again");
  assert_true(counts.live > 0);
}

/* ---- Abort paths, each in a forked child --------------------------------- */

static void child_calloc_overflow(void) {
  kiln_alloc_set_hooks(NULL); /* the parent may have a counting allocator in */
  kiln_arena_t a;
  kiln_arena_init(&a);
  kiln_arena_calloc(&a, SIZE_MAX / 2, 4);
}

static void child_alloc_huge(void) {
  kiln_alloc_set_hooks(NULL); /* the parent may have a counting allocator in */
  kiln_arena_t a;
  kiln_arena_init(&a);
  kiln_arena_alloc(&a, SIZE_MAX - 3);
}

static void child_control(void) {
  kiln_alloc_set_hooks(NULL); /* the parent may have a counting allocator in */
  kiln_arena_t a;
  kiln_arena_init(&a);
  kiln_arena_calloc(&a, 4, 4);
  kiln_arena_deinit(&a);
}

static void test_overflow_aborts(void **state) {
  (void)state;
  /* The harness itself can tell a clean exit from an abort. */
  int control = kiln_test_run_in_child(child_control);
  assert_true(WIFEXITED(control));
  assert_int_equal(WEXITSTATUS(control), 0);
  kiln_test_assert_died_of_sigabrt(kiln_test_run_in_child(child_calloc_overflow));
  kiln_test_assert_died_of_sigabrt(kiln_test_run_in_child(child_alloc_huge));
}

int main(void) {
#define T(f) cmocka_unit_test_setup_teardown(f, setup_arena, teardown_arena)
  const struct CMUnitTest tests[] = {
      T(test_init_is_empty),
      T(test_many_small_allocations),
      T(test_alignment_of_odd_sizes),
      T(test_zero_size_allocations_are_distinct),
      T(test_used_bytes_accounting),
      T(test_large_interleaved_with_small),
      T(test_large_first_then_small),
      T(test_calloc_zeroes),
      T(test_strdup),
      T(test_sprintf),
      T(test_deinit_frees_and_arena_is_reusable),
      T(test_overflow_aborts),
  };
#undef T
  return cmocka_run_group_tests(tests, group_setup, group_teardown);
}
