/* Unit tests for base/buf: init state, growth across many appends, appendf with
 * formatted text that crosses the capacity (including the exact boundary), reserve,
 * take (which leaves the buffer empty and holding no memory) and appends after it,
 * clear, logfmt value quoting (bare words, "", spaces, quotes, backslashes, newlines,
 * tabs, control characters as \xHH, '='), and impossible reservations aborting. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "base/alloc.h"
#include "base/buf.h"
#include "base/file.h"

/* The documented invariants hold after every operation. */
static void assert_invariants(const kiln_buf_t *b) {
  assert_non_null(b->data);
  assert_true(b->len < b->capacity);
  assert_int_equal(b->data[b->len], '\0');
  assert_int_equal(strlen(b->data) <= b->len, 1);
}

static int setup_buf(void **state) {
  kiln_buf_t *b = malloc(sizeof *b);
  if (!b) return -1;
  kiln_buf_init(b);
  *state = b;
  return 0;
}

static int teardown_buf(void **state) {
  kiln_buf_t *b = *state;
  kiln_buf_deinit(b);
  assert_null(b->data);
  assert_int_equal(b->len, 0);
  free(b);
  return 0;
}

static void test_init_is_empty_string(void **state) {
  kiln_buf_t *b = *state;
  assert_int_equal(b->len, 0);
  assert_string_equal(b->data, "");
  assert_true(b->capacity > 0);
  assert_invariants(b);
}

static void test_append_many_chars_grows(void **state) {
  kiln_buf_t *b = *state;
  enum { N = 100000 };
  for (int i = 0; i < N; i++) {
    kiln_buf_append_char(b, (char)('a' + i % 26));
    if (i % 997 == 0) assert_invariants(b);
  }
  assert_int_equal(b->len, N);
  assert_int_equal(strlen(b->data), N);
  assert_invariants(b);
  for (int i = 0; i < N; i++) {
    if (b->data[i] != (char)('a' + i % 26)) fail_msg("wrong byte at %d", i);
  }
}

static void test_append_bytes_and_strings(void **state) {
  kiln_buf_t *b = *state;
  kiln_buf_append_str(b, "hello");
  kiln_buf_append(b, ", world", 7);
  kiln_buf_append(b, "IGNORED", 0);
  kiln_buf_append_str(b, "");
  kiln_buf_append_char(b, '!');
  assert_string_equal(b->data, "hello, world!");
  assert_int_equal(b->len, 13);

  /* Binary data with an embedded NUL is kept byte for byte. */
  kiln_buf_clear(b);
  static const char bin[] = {'a', '\0', 'b', '\xff'};
  kiln_buf_append(b, bin, sizeof bin);
  assert_int_equal(b->len, 4);
  assert_memory_equal(b->data, bin, sizeof bin);
  assert_int_equal(b->data[4], '\0');
  assert_invariants(b);

  /* Large single appends, repeatedly. */
  kiln_buf_clear(b);
  char chunk[3000];
  memset(chunk, 'z', sizeof chunk);
  for (int i = 0; i < 50; i++) kiln_buf_append(b, chunk, sizeof chunk);
  assert_int_equal(b->len, 50 * sizeof chunk);
  assert_invariants(b);
  for (size_t i = 0; i < b->len; i++) {
    if (b->data[i] != 'z') fail_msg("wrong byte at %zu", i);
  }
}

static void test_appendf_long_crosses_capacity(void **state) {
  kiln_buf_t *b = *state;
  kiln_buf_append_str(b, "prefix:");
  size_t cap_before = b->capacity;
  char word[2000];
  memset(word, 'w', sizeof word - 1);
  word[sizeof word - 1] = '\0';
  kiln_buf_appendf(b, "[%s|%d|%s]", word, 12345, "tail");
  assert_true(b->capacity > cap_before);
  char *expected = malloc(4096);
  assert_non_null(expected);
  int n = snprintf(expected, 4096, "prefix:[%s|%d|%s]", word, 12345, "tail");
  assert_int_equal(b->len, (size_t)n);
  assert_string_equal(b->data, expected);
  free(expected);
  assert_invariants(b);
}

static void test_appendf_many_small(void **state) {
  kiln_buf_t *b = *state;
  kiln_buf_t want;
  kiln_buf_init(&want);
  char item[32];
  for (int i = 0; i < 20000; i++) {
    kiln_buf_appendf(b, "%05d,%c;", i, (char)('A' + i % 26));
    int n = snprintf(item, sizeof item, "%05d,%c;", i, (char)('A' + i % 26));
    kiln_buf_append(&want, item, (size_t)n);
  }
  assert_int_equal(b->len, want.len);
  assert_string_equal(b->data, want.data);
  assert_invariants(b);
  kiln_buf_deinit(&want);
}

static void test_appendf_at_exact_boundary(void **state) {
  kiln_buf_t *b = *state;
  /* For each starting fill, append formatted text whose length is one below, equal
   * to and one above the remaining room: the three sides of the grow decision. */
  for (int delta = -2; delta <= 2; delta++) {
    kiln_buf_clear(b);
    kiln_buf_append_str(b, "0123456789");
    size_t room = b->capacity - b->len;
    size_t want_len = (size_t)((long)room + delta);
    char *text = malloc(want_len + 1);
    assert_non_null(text);
    memset(text, 'q', want_len);
    text[want_len] = '\0';
    kiln_buf_appendf(b, "%s", text);
    assert_int_equal(b->len, 10 + want_len);
    assert_memory_equal(b->data, "0123456789", 10);
    assert_memory_equal(b->data + 10, text, want_len);
    assert_invariants(b);
    free(text);
  }
}

static void test_appendf_empty_format(void **state) {
  kiln_buf_t *b = *state;
  kiln_buf_append_str(b, "x");
  kiln_buf_appendf(b, "%s", "");
  assert_string_equal(b->data, "x");
  assert_int_equal(b->len, 1);
}

static void test_reserve_prevents_reallocation(void **state) {
  kiln_buf_t *b = *state;
  kiln_buf_append_str(b, "abc");
  kiln_buf_reserve(b, 5000);
  assert_true(b->capacity >= b->len + 5000 + 1);
  char *before = b->data;
  char chunk[5000];
  memset(chunk, 'r', sizeof chunk);
  kiln_buf_append(b, chunk, sizeof chunk);
  assert_ptr_equal(b->data, before);
  assert_int_equal(b->len, 5003);
  assert_invariants(b);
  /* Reserving what is already there changes nothing. */
  size_t cap = b->capacity;
  kiln_buf_reserve(b, 0);
  assert_int_equal(b->capacity, cap);
  assert_string_equal(b->data + 5003, "");
}

static void test_take_hands_over_and_empties(void **state) {
  kiln_buf_t *b = *state;
  char big[300];
  memset(big, 'T', sizeof big - 1);
  big[sizeof big - 1] = '\0';
  kiln_buf_appendf(b, "take-me:%s", big);
  char *s = kiln_buf_take(b);
  assert_non_null(s);
  assert_int_equal(strncmp(s, "take-me:", 8), 0);
  assert_int_equal(strlen(s), 8 + sizeof big - 1);
  /* The buffer is left empty, holding no memory. */
  assert_null(b->data);
  assert_int_equal(b->len, 0);
  assert_int_equal(b->capacity, 0);
  /* It can be appended to again, independently of the taken string. */
  kiln_buf_append_str(b, "again");
  assert_string_equal(b->data, "again");
  assert_int_equal(b->len, 5);
  assert_invariants(b);
  assert_int_equal(strncmp(s, "take-me:", 8), 0);
  kiln_free(s);

  /* Taking a cleared buffer gives an empty, freeable string. */
  kiln_buf_clear(b);
  s = kiln_buf_take(b);
  assert_non_null(s);
  assert_string_equal(s, "");
  kiln_free(s);
}

static void test_every_append_works_after_take(void **state) {
  kiln_buf_t *b = *state;
  kiln_buf_append_str(b, "x");
  kiln_free(kiln_buf_take(b));
  kiln_buf_clear(b); /* harmless on a taken buffer */
  assert_int_equal(b->len, 0);

  kiln_buf_appendf(b, "%d-%s", 7, "seven");
  assert_string_equal(b->data, "7-seven");
  assert_invariants(b);
  kiln_free(kiln_buf_take(b));

  /* An empty formatted append still leaves a valid empty string. */
  kiln_buf_appendf(b, "%s", "");
  assert_non_null(b->data);
  assert_string_equal(b->data, "");
  assert_invariants(b);
  kiln_free(kiln_buf_take(b));

  kiln_buf_append(b, "ab", 2);
  assert_string_equal(b->data, "ab");
  kiln_free(kiln_buf_take(b));

  kiln_buf_append_char(b, 'c');
  assert_string_equal(b->data, "c");
  kiln_free(kiln_buf_take(b));

  kiln_buf_append_logfmt_value(b, "a b");
  assert_string_equal(b->data, "\"a b\"");
  kiln_free(kiln_buf_take(b));

  kiln_buf_reserve(b, 10);
  assert_non_null(b->data);
  assert_true(b->capacity >= 11);
  kiln_buf_append_str(b, "0123456789");
  assert_string_equal(b->data, "0123456789");
  assert_invariants(b);
  char *s = kiln_buf_take(b);
  /* deinit of a taken buffer is a no-op (the teardown deinits it again). */
  kiln_buf_deinit(b);
  assert_null(b->data);
  kiln_free(s);
}

static void test_clear_keeps_memory(void **state) {
  kiln_buf_t *b = *state;
  for (int i = 0; i < 1000; i++) kiln_buf_append_str(b, "0123456789");
  size_t cap = b->capacity;
  char *data = b->data;
  kiln_buf_clear(b);
  assert_int_equal(b->len, 0);
  assert_string_equal(b->data, "");
  assert_int_equal(b->capacity, cap);
  assert_ptr_equal(b->data, data);
  kiln_buf_append_str(b, "new");
  assert_string_equal(b->data, "new");
  assert_invariants(b);
}

/* Appends `in` as a logfmt value to a fresh buffer and compares with `want`. */
static void check_logfmt(const char *in, const char *want) {
  kiln_buf_t b;
  kiln_buf_init(&b);
  kiln_buf_append_logfmt_value(&b, in);
  int same = strcmp(b.data, want) == 0 && b.len == strlen(want);
  if (!same) print_error("logfmt(%s): got [%s], want [%s]\n", in ? in : "(null)", b.data, want);
  kiln_buf_deinit(&b);
  assert_true(same);
}

static void test_logfmt_bare_values(void **state) {
  (void)state;
  check_logfmt("abc", "abc");
  check_logfmt("/kiln.v1.Kiln/GetStats", "/kiln.v1.Kiln/GetStats");
  check_logfmt("status.c:123", "status.c:123");
  check_logfmt("12.5ms", "12.5ms");
  check_logfmt("a-b_c,d;e'f", "a-b_c,d;e'f");
  /* UTF-8 bytes are not control characters. */
  check_logfmt("caf\xc3\xa9", "caf\xc3\xa9");
}

static void test_logfmt_quoted_values(void **state) {
  (void)state;
  check_logfmt("", "\"\"");
  check_logfmt(NULL, "\"\"");
  check_logfmt("a b", "\"a b\"");
  check_logfmt(" ", "\" \"");
  check_logfmt("say \"hi\"", "\"say \\\"hi\\\"\"");
  check_logfmt("\"", "\"\\\"\"");
  check_logfmt("C:\\dir", "\"C:\\\\dir\"");
  check_logfmt("line1\nline2", "\"line1\\nline2\"");
  check_logfmt("a\tb", "\"a\\tb\"");
  check_logfmt("k=v", "\"k=v\"");
  check_logfmt("=", "\"=\"");
  check_logfmt("\r", "\"\\x0d\"");
  check_logfmt("\x01x", "\"\\x01x\"");
  check_logfmt("\x1b[31m", "\"\\x1b[31m\"");
  check_logfmt("\x7f", "\"\\x7f\"");
  check_logfmt("\x1f", "\"\\x1f\"");
  /* Everything at once, in order. */
  check_logfmt("a \"b\" \\c\n=\x02", "\"a \\\"b\\\" \\\\c\\n=\\x02\"");
}

static void test_logfmt_appends(void **state) {
  kiln_buf_t *b = *state;
  kiln_buf_append_str(b, "k=");
  kiln_buf_append_logfmt_value(b, "two words");
  kiln_buf_append_str(b, " j=");
  kiln_buf_append_logfmt_value(b, "bare");
  assert_string_equal(b->data, "k=\"two words\" j=bare");
  assert_invariants(b);

  /* A long value that needs quoting crosses the capacity correctly. */
  kiln_buf_clear(b);
  char big[1000];
  for (size_t i = 0; i < sizeof big - 1; i++) big[i] = (i % 10 == 0) ? ' ' : 'v';
  big[sizeof big - 1] = '\0';
  kiln_buf_append_logfmt_value(b, big);
  assert_int_equal(b->len, sizeof big - 1 + 2);
  assert_int_equal(b->data[0], '"');
  assert_int_equal(b->data[b->len - 1], '"');
  assert_memory_equal(b->data + 1, big, sizeof big - 1);
}

/* Impossible sizes take the abort path every other allocation takes. Regression
 * tests: kiln_buf_reserve once doubled `cap` without an overflow check, so more than
 * SIZE_MAX/2 bytes wrapped cap to 0 and looped forever, and `len + extra + 1`
 * wrapped for extra near SIZE_MAX, so nothing was reserved at all. Each child gets
 * two seconds; a hang shows up as death by SIGALRM. */
static void reserve_in_child(size_t extra, const char *what) {
  fflush(NULL);
  pid_t pid = fork();
  assert_true(pid >= 0);
  if (pid == 0) {
    int devnull = open("/dev/null", O_WRONLY);
    if (devnull >= 0) dup2(devnull, STDERR_FILENO);
    alarm(2);
    kiln_buf_t b;
    kiln_buf_init(&b);
    kiln_buf_append_str(&b, "abc");
    kiln_buf_reserve(&b, extra);
    _exit(0); /* reserving exabytes cannot have succeeded */
  }
  int wstatus;
  assert_int_equal(waitpid(pid, &wstatus, 0), pid);
  if (WIFSIGNALED(wstatus)) {
    if (WTERMSIG(wstatus) == SIGALRM) {
      fail_msg("kiln_buf_reserve(%s) hung (killed by SIGALRM after 2 s) instead of aborting", what);
    }
    assert_int_equal(WTERMSIG(wstatus), SIGABRT);
  } else {
    /* Under ASan an impossible allocation is reported and exits non-zero. */
    assert_true(WIFEXITED(wstatus));
    if (WEXITSTATUS(wstatus) == 0) fail_msg("kiln_buf_reserve(%s) returned", what);
  }
}

/* A whole file is appended, bytes as they are (a NUL and more than one read's worth
 * included); a missing file is -1 with errno and leaves the buffer as it was. */
static void test_append_file(void **state) {
  kiln_buf_t *b = *state;
  char path[] = "/tmp/kiln-buf-XXXXXX";
  int fd = mkstemp(path);
  assert_true(fd >= 0);
  size_t n = 200000;
  char *data = malloc(n);
  for (size_t i = 0; i < n; i++) data[i] = (char)(i * 7);
  assert_int_equal(write(fd, data, n), (ssize_t)n);
  close(fd);
  kiln_buf_append_str(b, "head:");
  assert_int_equal(kiln_buf_append_file(b, path), 0);
  assert_int_equal(b->len, 5 + n);
  assert_memory_equal(b->data, "head:", 5);
  assert_memory_equal(b->data + 5, data, n);
  assert_int_equal(b->data[b->len], '\0');
  unlink(path);
  errno = 0;
  assert_int_equal(kiln_buf_append_file(b, path), -1);
  assert_int_equal(errno, ENOENT);
  assert_int_equal(b->len, 5 + n);
  free(data);
}

static void test_reserve_impossible_sizes_abort(void **state) {
  (void)state;
  reserve_in_child(SIZE_MAX / 2 + 1, "SIZE_MAX/2 + 1");
  reserve_in_child(SIZE_MAX - 2, "SIZE_MAX - 2");
  reserve_in_child(SIZE_MAX, "SIZE_MAX");
}

int main(void) {
#define T(f) cmocka_unit_test_setup_teardown(f, setup_buf, teardown_buf)
  const struct CMUnitTest tests[] = {
      T(test_init_is_empty_string),
      T(test_append_many_chars_grows),
      T(test_append_bytes_and_strings),
      T(test_appendf_long_crosses_capacity),
      T(test_appendf_many_small),
      T(test_appendf_at_exact_boundary),
      T(test_appendf_empty_format),
      T(test_reserve_prevents_reallocation),
      T(test_take_hands_over_and_empties),
      T(test_every_append_works_after_take),
      T(test_clear_keeps_memory),
      T(test_append_file),
      cmocka_unit_test(test_logfmt_bare_values),
      cmocka_unit_test(test_logfmt_quoted_values),
      T(test_logfmt_appends),
      cmocka_unit_test(test_reserve_impossible_sizes_abort),
  };
#undef T
  return cmocka_run_group_tests(tests, NULL, NULL);
}
