/* compiler/source.c: parsing with diagnostics and the semantic fingerprint.
 * The fingerprint must ignore what does not change a module's meaning
 * (whitespace, comments, SSA names, locations, text vs bytecode) and change with
 * anything that does. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cmocka.h>

#include "base/buf.h"
#include "compiler/source.h"
#include "tests/unit/support/testing.h"

static const char *const base_ir =
    "func.func @mlp(%x: tensor<4xf32>, %b: tensor<4xf32>) -> tensor<4xf32> {\n"
    "  %0 = arith.addf %x, %b : tensor<4xf32>\n"
    "  return %0 : tensor<4xf32>\n"
    "}\n";

static const char *const reformatted_ir =
    "// the same model, reformatted and annotated\n"
    "func.func @mlp(%input: tensor<4xf32>,   %bias: tensor<4xf32>) -> tensor<4xf32> {\n"
    "\n"
    "  %sum = arith.addf %input, %bias : tensor<4xf32> loc(\"model.py\":12:3)\n"
    "  return %sum : tensor<4xf32>   // done\n"
    "} loc(\"model.py\":10:1)\n";

static const char *const changed_ir =
    "func.func @mlp(%x: tensor<4xf32>, %b: tensor<4xf32>) -> tensor<4xf32> {\n"
    "  %0 = arith.mulf %x, %b : tensor<4xf32>\n"
    "  return %0 : tensor<4xf32>\n"
    "}\n";

static int setup(void **state) {
  kiln_compiler_context_t *ctx = NULL;
  kiln_status_t st = kiln_compiler_context_create(&ctx);
  if (st) return -1;
  *state = ctx;
  return 0;
}

static int teardown(void **state) {
  kiln_compiler_context_destroy(*state);
  return 0;
}

static void fingerprint(void **state, const char *ir, kiln_digest_hex_t *out) {
  kiln_status_t st = kiln_compiler_fingerprint(*state, ir, strlen(ir), "model.mlir", out);
  if (st) fail_msg("fingerprint failed: %s", kiln_status_message(st));
}

static void test_formatting_does_not_change_the_fingerprint(void **state) {
  kiln_digest_hex_t a, b;
  fingerprint(state, base_ir, &a);
  fingerprint(state, reformatted_ir, &b);
  assert_string_equal(a.text, b.text);
  assert_true(kiln_digest_is_valid_hex(a.text));
}

static void test_meaning_changes_the_fingerprint(void **state) {
  kiln_digest_hex_t a, b;
  fingerprint(state, base_ir, &a);
  fingerprint(state, changed_ir, &b);
  assert_string_not_equal(a.text, b.text);
}

static void test_fingerprint_is_stable_across_contexts(void **state) {
  kiln_compiler_context_t *other = NULL;
  assert_null(kiln_compiler_context_create(&other));
  kiln_digest_hex_t a, b;
  fingerprint(state, base_ir, &a);
  assert_null(kiln_compiler_fingerprint(other, base_ir, strlen(base_ir), "x", &b));
  assert_string_equal(a.text, b.text);
  kiln_compiler_context_destroy(other);
}

static void test_syntax_error_has_file_line_col(void **state) {
  const char *bad = "func.func @f() {\n  %0 = arith.constant 1 : i32\n  return %1 : i32\n}\n";
  kiln_digest_hex_t out;
  kiln_status_t st = kiln_compiler_fingerprint(*state, bad, strlen(bad), "bad.mlir", &out);
  assert_int_equal(kiln_status_code(st), KILN_STATUS_INVALID_ARGUMENT);
  const char *msg = kiln_status_message(st);
  if (!strstr(msg, "bad.mlir:3:")) fail_msg("no file:line in: %s", msg);
  if (!strstr(msg, "error:")) fail_msg("no severity in: %s", msg);
  kiln_status_free(st);
}

static void test_verifier_failure_is_invalid_argument(void **state) {
  /* Parses, but the return type does not match the function type. */
  const char *bad = "func.func @f(%a: i32) -> f32 {\n  return %a : i32\n}\n";
  kiln_digest_hex_t out;
  kiln_status_t st = kiln_compiler_fingerprint(*state, bad, strlen(bad), "v.mlir", &out);
  assert_int_equal(kiln_status_code(st), KILN_STATUS_INVALID_ARGUMENT);
  if (!strstr(kiln_status_message(st), "v.mlir:2:")) {
    fail_msg("no location in: %s", kiln_status_message(st));
  }
  kiln_status_free(st);
}

static void test_garbage_and_empty_inputs(void **state) {
  const char *inputs[] = {"\x01\x02\x03 not mlir at all", "ML\xefR\x00\x01garbage-bytecode", "}"};
  size_t lens[] = {strlen(inputs[0]), 14, 1};
  for (size_t i = 0; i < 3; i++) {
    kiln_digest_hex_t out;
    kiln_status_t st = kiln_compiler_fingerprint(*state, inputs[i], lens[i], "g.mlir", &out);
    assert_int_equal(kiln_status_code(st), KILN_STATUS_INVALID_ARGUMENT);
    kiln_status_free(st);
  }
  /* An empty source is an empty module: valid, with a fingerprint. */
  kiln_digest_hex_t empty;
  assert_null(kiln_compiler_fingerprint(*state, "", 0, "e.mlir", &empty));
}

/* Nesting that would overflow the parser's stack is refused before parsing, with
 * the line where it passed the limit; brackets in strings and comments do not
 * count; the deepest nesting a model could want still parses. */
static void test_deep_nesting_is_refused(void **state) {
  kiln_buf_t b;
  kiln_buf_init(&b);
  kiln_buf_append_str(&b, "func.func @f() {\n  return\n}\nfunc.func @g() attributes {x = ");
  for (int i = 0; i < 100000; i++) kiln_buf_append_str(&b, "[");
  for (int i = 0; i < 100000; i++) kiln_buf_append_str(&b, "]");
  kiln_buf_append_str(&b, "} {\n  return\n}\n");
  kiln_digest_hex_t out;
  kiln_status_t st = kiln_compiler_fingerprint(*state, b.data, b.len, "deep.mlir", &out);
  assert_int_equal(kiln_status_code(st), KILN_STATUS_INVALID_ARGUMENT);
  if (!strstr(kiln_status_message(st), "deep.mlir:4: nesting deeper than")) {
    fail_msg("no line or reason in: %s", kiln_status_message(st));
  }
  kiln_status_free(st);
  /* 20,000 nested regions. */
  kiln_buf_clear(&b);
  kiln_buf_append_str(&b, "func.func @f() {\n");
  for (int i = 0; i < 20000; i++) kiln_buf_append_str(&b, "scf.execute_region {\n");
  for (int i = 0; i < 20000; i++) kiln_buf_append_str(&b, "scf.yield\n}\n");
  kiln_buf_append_str(&b, "return\n}\n");
  st = kiln_compiler_fingerprint(*state, b.data, b.len, "regions.mlir", &out);
  assert_int_equal(kiln_status_code(st), KILN_STATUS_INVALID_ARGUMENT);
  kiln_status_free(st);
  /* 300 levels of a nested array attribute, with 1000 '[' in a string and a
   * comment beside them: accepted. */
  kiln_buf_clear(&b);
  kiln_buf_append_str(&b, "// ");
  for (int i = 0; i < 1000; i++) kiln_buf_append_str(&b, "[");
  kiln_buf_append_str(&b, "\nfunc.func @g() attributes {s = \"");
  for (int i = 0; i < 1000; i++) kiln_buf_append_str(&b, "{");
  kiln_buf_append_str(&b, "\", x = ");
  for (int i = 0; i < 300; i++) kiln_buf_append_str(&b, "[");
  for (int i = 0; i < 300; i++) kiln_buf_append_str(&b, "]");
  kiln_buf_append_str(&b, "} {\n  return\n}\n");
  kiln_test_assert_ok(kiln_compiler_fingerprint(*state, b.data, b.len, "ok.mlir", &out));
  kiln_buf_deinit(&b);
}

/* The bytecode of a module fingerprints like its text. Bytecode comes from the
 * real mlir-opt-22 (mlir-22-tools, installed by deploy/deps.sh). */
static void test_bytecode_matches_text(void **state) {
  char path[] = "/tmp/kiln-fp-XXXXXX";
  int fd = mkstemp(path);
  assert_true(fd >= 0);
  assert_int_equal(write(fd, base_ir, strlen(base_ir)), (ssize_t)strlen(base_ir));
  close(fd);
  char cmd[256];
  snprintf(cmd, sizeof cmd, "/usr/lib/llvm-22/bin/mlir-opt --emit-bytecode %s 2>/dev/null", path);
  FILE *p = popen(cmd, "r");
  assert_non_null(p);
  unsigned char bytecode[65536];
  size_t n = fread(bytecode, 1, sizeof bytecode, p);
  int rc = pclose(p);
  unlink(path);
  if (rc != 0 || n < 4) skip(); /* no mlir-opt here: nothing to compare against */
  assert_memory_equal(bytecode, "ML\xefR", 4);
  kiln_digest_hex_t text, binary;
  fingerprint(state, base_ir, &text);
  assert_null(kiln_compiler_fingerprint(*state, bytecode, n, "model.mlirbc", &binary));
  assert_string_equal(text.text, binary.text);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_formatting_does_not_change_the_fingerprint),
      cmocka_unit_test(test_meaning_changes_the_fingerprint),
      cmocka_unit_test(test_fingerprint_is_stable_across_contexts),
      cmocka_unit_test(test_syntax_error_has_file_line_col),
      cmocka_unit_test(test_verifier_failure_is_invalid_argument),
      cmocka_unit_test(test_garbage_and_empty_inputs),
      cmocka_unit_test(test_bytecode_matches_text),
      cmocka_unit_test(test_deep_nesting_is_refused),
  };
  return cmocka_run_group_tests(tests, setup, teardown);
}
