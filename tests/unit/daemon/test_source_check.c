/* Unit tests for daemon/source_check: text must be RFC 3629 UTF-8 without NULs,
 * bytecode starts with "ML\xefR"; a declared format the bytes contradict is
 * refused; the same bytes give the same answer whole or in any chunking (UTF-8
 * sequences and the magic split across chunks); the refusal names the byte, its
 * line and column, and packs as a DiagnosticList. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <string.h>

#include "daemon/source_check.h"
#include "kiln/v1/kiln.pb-c.h"

enum {
  UNSPECIFIED = KILN__V1__SOURCE_FORMAT__SOURCE_FORMAT_UNSPECIFIED,
  TEXT = KILN__V1__SOURCE_FORMAT__SOURCE_FORMAT_MLIR_TEXT,
  BYTECODE = KILN__V1__SOURCE_FORMAT__SOURCE_FORMAT_MLIR_BYTECODE,
};

/* Runs the checker over `data` in pieces of `chunk` bytes (0: all at once);
 * returns the refusal (NULL when accepted) and the decided format. */
static KILN_MUST_USE kiln_status_t run(const void *data, size_t len, int declared, size_t chunk,
                                       kilnd_source_check_t *check) {
  kilnd_source_check_init(check, declared);
  const unsigned char *p = data;
  size_t step = chunk ? chunk : (len ? len : 1);
  for (size_t at = 0; at < len; at += step) {
    size_t n = len - at < step ? len - at : step;
    kiln_status_t st = kilnd_source_check_feed(check, p + at, n, "src");
    if (st) return st;
  }
  return kilnd_source_check_finish(check, "src");
}

/* Every chunking from 1 byte up gives `want_ok` and, when refused, `words`. */
static void expect(const void *data, size_t len, int declared, bool want_ok, int want_format,
                   const char *words) {
  for (size_t chunk = 0; chunk <= len + 1; chunk++) {
    kilnd_source_check_t check;
    kiln_status_t st = run(data, len, declared, chunk, &check);
    if (want_ok) {
      if (st) fail_msg("chunk %zu: refused: %s", chunk, kiln_status_message(st));
      assert_int_equal(check.format, want_format);
    } else {
      if (!st) fail_msg("chunk %zu: accepted", chunk);
      assert_int_equal(kiln_status_code(st), KILN_STATUS_INVALID_ARGUMENT);
      if (!strstr(kiln_status_message(st), words)) {
        fail_msg("chunk %zu: '%s' not in: %s", chunk, words, kiln_status_message(st));
      }
      assert_non_null(strstr(kiln_status_message(st), "src: "));
      kiln_status_free(st);
    }
  }
}

#define EXPECT_OK(lit, declared, format) expect(lit, sizeof lit - 1, declared, true, format, NULL)
#define EXPECT_BAD(lit, declared, words) expect(lit, sizeof lit - 1, declared, false, 0, words)

static void test_text(void **state) {
  (void)state;
  EXPECT_OK("module {}\n", UNSPECIFIED, TEXT);
  EXPECT_OK("module {}\n", TEXT, TEXT);
  EXPECT_OK("// caf\xc3\xa9 \xe2\x82\xac \xf0\x9f\x94\xa5\nmodule {}", UNSPECIFIED, TEXT);
  EXPECT_OK("M", UNSPECIFIED, TEXT); /* shorter than the magic: text */
  EXPECT_BAD("module {\xff}", UNSPECIFIED, "byte 8 is not valid UTF-8 (line 1, column 9)");
  EXPECT_BAD("a\nbc\n\xc0\xaf", UNSPECIFIED, "byte 5 is not valid UTF-8 (line 3, column 1)"); /* overlong */
  EXPECT_BAD("\xed\xa0\x80", UNSPECIFIED, "byte 1 is not valid UTF-8");                       /* surrogate */
  EXPECT_BAD("\xf4\x90\x80\x80", UNSPECIFIED, "byte 1 is not valid UTF-8");                   /* > U+10FFFF */
  EXPECT_BAD("ok\n\xc3(", UNSPECIFIED, "byte 4 is not valid UTF-8 (line 2, column 2)");
  EXPECT_BAD("ok \xe2\x82", UNSPECIFIED, "byte 5 is not valid UTF-8"); /* cut off by the end */
  EXPECT_BAD("module {}\n\0", UNSPECIFIED, "byte 10 is a NUL (line 2, column 1)");
  /* A NUL inside an 8-byte ASCII run (the scanner's word-at-a-time path let it by). */
  EXPECT_BAD("func.fu\0nc @f() {}\n", UNSPECIFIED, "byte 7 is a NUL (line 1, column 8)");
  EXPECT_BAD("\0module {}", UNSPECIFIED, "byte 0 is a NUL");
  EXPECT_BAD("module {}", BYTECODE, "format is MLIR_BYTECODE but the bytes do not start");
}

/* The one-shot form, for protobuf string fields. */
static void test_text_is_utf8(void **state) {
  (void)state;
  size_t at = 99;
  assert_true(kilnd_text_is_utf8("sm_89", 5, &at));
  assert_int_equal(at, 5);
  assert_true(kilnd_text_is_utf8("mod\xc3\xa8le", 7, &at));
  assert_false(kilnd_text_is_utf8("sm_89\0evil", 10, &at));
  assert_int_equal(at, 5);
  assert_false(kilnd_text_is_utf8("abcdefgh\xff", 9, &at));
  assert_int_equal(at, 8);
  assert_false(kilnd_text_is_utf8("ab\xe2\x82", 4, &at)); /* ends inside a sequence */
  assert_int_equal(at, 4);
  assert_true(kilnd_text_is_utf8("", 0, &at));
}

static void test_bytecode(void **state) {
  (void)state;
  EXPECT_OK("ML\xefR\x01\xff\x00\xfe", UNSPECIFIED, BYTECODE); /* anything after the magic */
  EXPECT_OK("ML\xefR", BYTECODE, BYTECODE);
  EXPECT_BAD("ML\xefR\x01", TEXT, "format is MLIR_TEXT but the bytes start with the MLIR bytecode magic");
  EXPECT_BAD("ML\xef", BYTECODE, "format is MLIR_BYTECODE but the bytes do not start");
}

static void test_refusal_repeats_and_packs(void **state) {
  (void)state;
  static const char src[] = "line one\nline \xff two\n";
  kilnd_source_check_t check;
  kiln_status_t st = run(src, sizeof src - 1, UNSPECIFIED, 4, &check);
  assert_non_null(st);
  kiln_status_free(st);
  /* Once refused, it keeps refusing with the same words. */
  st = kilnd_source_check_feed(&check, "fine", 4, "again");
  assert_non_null(strstr(kiln_status_message(st), "again: byte 14 is not valid UTF-8 (line 2, column 6)"));
  kiln_status_free(st);

  kiln_arena_t arena;
  kiln_arena_init(&arena);
  size_t len = 0;
  const uint8_t *packed = kilnd_source_check_diagnostics(&check, "m.mlir", &arena, &len);
  assert_non_null(packed);
  Kiln__V1__DiagnosticList *list = kiln__v1__diagnostic_list__unpack(NULL, len, packed);
  assert_non_null(list);
  assert_int_equal(list->n_diagnostics, 1);
  const Kiln__V1__Diagnostic *d = list->diagnostics[0];
  assert_int_equal(d->severity, KILN__V1__SEVERITY__SEVERITY_ERROR);
  assert_string_equal(d->location->file, "m.mlir");
  assert_int_equal(d->location->line, 2);
  assert_int_equal(d->location->column, 6);
  assert_non_null(strstr(d->message, "not valid UTF-8"));
  kiln__v1__diagnostic_list__free_unpacked(list, NULL);

  /* Nothing to report for accepted bytes. */
  assert_null(run("module {}", 9, UNSPECIFIED, 0, &check));
  assert_null(kilnd_source_check_diagnostics(&check, "m.mlir", &arena, &len));
  assert_int_equal(len, 0);
  kiln_arena_deinit(&arena);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_text),
      cmocka_unit_test(test_text_is_utf8),
      cmocka_unit_test(test_bytecode),
      cmocka_unit_test(test_refusal_repeats_and_packs),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
