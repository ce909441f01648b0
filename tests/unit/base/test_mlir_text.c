/* base/mlir_text: the lexical normal form the cache keys on. What must not change
 * the digest (whitespace, comments, SSA and block names, locations) and what must
 * (any token of meaning), on the shipped examples and on small cases. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/alloc.h"
#include "base/buf.h"
#include "base/file.h"
#include "base/mlir_text.h"
#include "tests/unit/support/testing.h"

static void digest_of(const char *text, kiln_digest_hex_t *out) {
  kiln_mlir_text_digest(text, strlen(text), out);
}

static bool same(const char *a, const char *b) {
  kiln_digest_hex_t x, y;
  digest_of(a, &x);
  digest_of(b, &y);
  return strcmp(x.text, y.text) == 0;
}

static void test_form(void **state) {
  (void)state;
  static const char text[] =
      "#loc1 = loc(\"m.mlir\":3:5)\n"
      "func.func @f(%a: tensor<4xf32>, %b-c: tensor<4xf32>) -> tensor<4xf32> {  // adds\n"
      "  %sum = arith.addf %a,   %b-c : tensor<4xf32> loc(#loc1)\n"
      "  %r:2 = \"x.op\"(%sum) {s = \"a // b  c\"} : (tensor<4xf32>) -> (i32, i32)\n"
      "  return %sum : tensor<4xf32> loc(fused[\"a)\", callsite(\"f\" at \"g\":1:2)])\n"
      "}\n";
  kiln_buf_t form;
  kiln_buf_init(&form);
  kiln_mlir_text_normalize(text, strlen(text), &form);
  assert_string_equal(form.data,
                      "func.func@f(%0:tensor<4xf32>,%1:tensor<4xf32>)->tensor<4xf32>{"
                      "%2=arith.addf%0,%1:tensor<4xf32>"
                      "%3:2=\"x.op\"(%2){s=\"a // b  c\"}:(tensor<4xf32>)->(i32,i32)"
                      "return%2:tensor<4xf32>}");
  kiln_buf_deinit(&form);
}

/* The issue's case: examples/mlp.mlir with a comment line added and runs of
 * spaces collapsed, and further with its names changed and locations added. */
static void test_reformatted_examples_agree(void **state) {
  (void)state;
  static const char *const models[] = {"mlp", "attention", "convnet"};
  for (size_t m = 0; m < sizeof models / sizeof models[0]; m++) {
    char path[512];
    snprintf(path, sizeof path, "%s/examples/%s.mlir", KILN_SOURCE_DIR, models[m]);
    size_t len = 0;
    char *text = kiln_read_file(path, &len);
    assert_non_null(text);
    kiln_buf_t other;
    kiln_buf_init(&other);
    kiln_buf_append_str(&other, "// reformatted by hand\n#loc7 = loc(\"x.mlir\":1:1)\n");
    for (size_t i = 0; i < len; i++) {
      if (text[i] == ' ' && i + 1 < len && text[i + 1] == ' ') continue; /* collapse runs */
      if (text[i] == '%') {
        kiln_buf_append_str(&other, "%v_"); /* every SSA name renamed */
        continue;
      }
      if (text[i] == '\n') kiln_buf_append_str(&other, " loc(#loc7)");
      kiln_buf_append_char(&other, text[i]);
    }
    kiln_digest_hex_t a, b;
    kiln_mlir_text_digest(text, len, &a);
    kiln_mlir_text_digest(other.data, other.len, &b);
    if (strcmp(a.text, b.text) != 0) fail_msg("%s: the reformatted copy has another digest", models[m]);
    kiln_buf_deinit(&other);
    kiln_free(text);
  }
}

static void test_meaning_changes_the_digest(void **state) {
  (void)state;
  static const char base[] =
      "func.func @f(%a: f32, %b: f32) -> f32 {\n  %c = arith.subf %a, %b : f32\n  return %c : f32\n}\n";
  assert_true(
      same(base, "func.func @f(%x: f32, %y: f32) -> f32 {\n%z = arith.subf %x,%y : f32 return %z : f32 }"));
  static const char *const different[] = {
      /* operands swapped: a renaming cannot explain it */
      "func.func @f(%a: f32, %b: f32) -> f32 {\n  %c = arith.subf %b, %a : f32\n  return %c : f32\n}\n",
      "func.func @g(%a: f32, %b: f32) -> f32 {\n  %c = arith.subf %a, %b : f32\n  return %c : f32\n}\n",
      "func.func @f(%a: f32, %b: f32) -> f32 {\n  %c = arith.addf %a, %b : f32\n  return %c : f32\n}\n",
      "func.func @f(%a: f64, %b: f32) -> f32 {\n  %c = arith.subf %a, %b : f32\n  return %c : f32\n}\n",
      /* two names made one */
      "func.func @f(%a: f32, %a: f32) -> f32 {\n  %c = arith.subf %a, %a : f32\n  return %c : f32\n}\n",
  };
  for (size_t i = 0; i < sizeof different / sizeof different[0]; i++) {
    if (same(base, different[i])) fail_msg("case %zu hashed like the original", i);
  }
  /* words stay apart: "arith.constant 1" is not "arith.constant1" */
  assert_false(same("%0 = arith.constant 1 : i32", "%0 = arith.constant1 : i32"));
  /* a string's inside is meaning */
  assert_false(same("x.op {s = \"a  b\"}", "x.op {s = \"a b\"}"));
  assert_false(same("x.op {s = \"// c\"}", "x.op {s = \"\"}"));
  /* the digest is never that of the bytes */
  kiln_digest_hex_t d;
  digest_of("x", &d);
  kiln_digest_t raw;
  kiln_digest_hex_t raw_hex;
  kiln_digest_of("x", 1, &raw);
  kiln_digest_to_hex(&raw, &raw_hex);
  assert_string_not_equal(d.text, raw_hex.text);
}

/* Bytecode is hashed as it is; an unterminated string or group ends the form. */
static void test_bytecode_and_truncated_text(void **state) {
  (void)state;
  static const unsigned char bc[] = {'M', 'L', 0xef, 'R', 1, 2, 3};
  kiln_digest_hex_t a, b;
  kiln_mlir_text_digest(bc, sizeof bc, &a);
  kiln_digest_t raw;
  kiln_digest_of(bc, sizeof bc, &raw);
  kiln_digest_to_hex(&raw, &b);
  assert_string_equal(a.text, b.text);
  static const char *const truncated[] = {"x \"abc", "y loc(\"a\"", "#loc1 = loc(", "%", "^", "@", "\"\\"};
  for (size_t i = 0; i < sizeof truncated / sizeof truncated[0]; i++) {
    kiln_buf_t form;
    kiln_buf_init(&form);
    kiln_mlir_text_normalize(truncated[i], strlen(truncated[i]), &form);
    assert_true(form.len <= strlen(truncated[i]));
    kiln_buf_deinit(&form);
  }
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_form),
      cmocka_unit_test(test_reformatted_examples_agree),
      cmocka_unit_test(test_meaning_changes_the_digest),
      cmocka_unit_test(test_bytecode_and_truncated_text),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
