/* Unit tests for compiler/vmfb/plan: every element type code kiln writes is
 * IREE's (iree_hal_element_type_t = numerical type << 24 | bits, with the
 * numerical types of runtime/src/iree/hal/buffer_view.h spelled out here again,
 * independently of plan.h), names round-trip, and tensor sizes pack i2/i4 as IREE
 * does while i1 takes a byte per element. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <stdbool.h>
#include <string.h>

#include "compiler/vmfb/plan.h"

/* IREE's numerical types (iree_hal_numerical_type_bits_t). */
enum {
  INTEGER = 0x10,
  BOOLEAN = 0x13,
  FLOAT_IEEE = 0x21,
  FLOAT_BRAIN = 0x22,
  FLOAT_8_E5M2 = 0x24,
  FLOAT_8_E4M3_FN = 0x25,
  FLOAT_8_E5M2_FNUZ = 0x26,
  FLOAT_8_E4M3_FNUZ = 0x27,
  FLOAT_8_E8M0_FNU = 0x28,
};

static uint32_t make(uint32_t numerical, uint32_t bits) { return numerical << 24 | bits; }

static void test_codes_are_irees(void **state) {
  (void)state;
  static const struct {
    const char *name;
    uint32_t code;
  } want[] = {
      {"i1", 0x13000008u}, /* what iree-run-module's "i1" parses to */
      {"i2", 0},           {"i4", 0},       {"i8", 0},         {"i16", 0},        {"i32", 0},
      {"i64", 0},          {"f16", 0},      {"f32", 0},        {"f64", 0},        {"bf16", 0},
      {"f8E5M2", 0},       {"f8E4M3FN", 0}, {"f8E5M2FNUZ", 0}, {"f8E4M3FNUZ", 0}, {"f8E8M0FNU", 0},
  };
  uint32_t codes[] = {
      make(BOOLEAN, 8),          make(INTEGER, 2),           make(INTEGER, 4),
      make(INTEGER, 8),          make(INTEGER, 16),          make(INTEGER, 32),
      make(INTEGER, 64),         make(FLOAT_IEEE, 16),       make(FLOAT_IEEE, 32),
      make(FLOAT_IEEE, 64),      make(FLOAT_BRAIN, 16),      make(FLOAT_8_E5M2, 8),
      make(FLOAT_8_E4M3_FN, 8),  make(FLOAT_8_E5M2_FNUZ, 8), make(FLOAT_8_E4M3_FNUZ, 8),
      make(FLOAT_8_E8M0_FNU, 8),
  };
  assert_int_equal(codes[0], want[0].code);
  for (size_t i = 0; i < sizeof codes / sizeof codes[0]; i++) {
    const char *name = kiln_vmfb_element_name(codes[i]);
    if (!name || strcmp(name, want[i].name) != 0) {
      fail_msg("code 0x%08x: want %s, got %s", codes[i], want[i].name, name ? name : "(none)");
    }
  }
  assert_int_equal(KILN_VMFB_ELEMENT_BOOL_8, make(BOOLEAN, 8));
  assert_int_equal(KILN_VMFB_ELEMENT_INT_8, make(INTEGER, 8));
  assert_int_equal(KILN_VMFB_ELEMENT_BFLOAT_16, make(FLOAT_BRAIN, 16));
  /* Not an element type kiln writes: the old, wrong boolean code among them. */
  assert_null(kiln_vmfb_element_name(0x01000008u));
  assert_null(kiln_vmfb_element_name(make(INTEGER, 3)));
  assert_null(kiln_vmfb_element_name(0));
}

static void test_sizes(void **state) {
  (void)state;
  uint64_t n = 0;
  kiln_vmfb_tensor_type_t t = {.element_type = KILN_VMFB_ELEMENT_BOOL_8, .rank = 1, .dims = {3}};
  assert_true(kiln_vmfb_tensor_type_bytes(&t, &n));
  assert_int_equal(n, 3); /* a byte per i1 */
  t = (kiln_vmfb_tensor_type_t){.element_type = KILN_VMFB_ELEMENT_INT_4, .rank = 2, .dims = {3, 3}};
  assert_true(kiln_vmfb_tensor_type_bytes(&t, &n));
  assert_int_equal(n, 5); /* 9 nibbles */
  t = (kiln_vmfb_tensor_type_t){.element_type = KILN_VMFB_ELEMENT_INT_2, .rank = 1, .dims = {5}};
  assert_true(kiln_vmfb_tensor_type_bytes(&t, &n));
  assert_int_equal(n, 2);
  t = (kiln_vmfb_tensor_type_t){.element_type = KILN_VMFB_ELEMENT_FLOAT_16, .rank = 3, .dims = {2, 3, 5}};
  assert_true(kiln_vmfb_tensor_type_bytes(&t, &n));
  assert_int_equal(n, 60);
  t = (kiln_vmfb_tensor_type_t){.element_type = KILN_VMFB_ELEMENT_INT_8, .rank = 0};
  assert_true(kiln_vmfb_tensor_type_bytes(&t, &n));
  assert_int_equal(n, 1); /* a scalar */
  t = (kiln_vmfb_tensor_type_t){.element_type = KILN_VMFB_ELEMENT_FLOAT_32, .rank = 1, .dims = {-1}};
  assert_false(kiln_vmfb_tensor_type_bytes(&t, &n));
  t = (kiln_vmfb_tensor_type_t){
      .element_type = KILN_VMFB_ELEMENT_FLOAT_64, .rank = 2, .dims = {INT64_C(1) << 31, INT64_C(1) << 30}};
  assert_false(kiln_vmfb_tensor_type_bytes(&t, &n)); /* 2^64 bytes */
  t.rank = KILN_VMFB_MAX_RANK + 1;
  assert_false(kiln_vmfb_tensor_type_bytes(&t, &n));
}

/* Expressions evaluate as the host program computes them: ceil-division of a
 * dimension by a tile, a broadcast's select, unsigned compare; malformed ones
 * (an operand not earlier, a division by zero) are refused. */
static void test_exprs_eval(void **state) {
  (void)state;
  kiln_vmfb_tensor_type_t inputs[1] = {{.element_type = 0x21000020u, .rank = 2, .dims = {-1, 16}}};
  kiln_vmfb_expr_t x[] = {
      {.kind = KILN_VMFB_EXPR_INPUT_DIM, .a = 0, .b = 0},      /* 1: d */
      {.kind = KILN_VMFB_EXPR_CONST, .value = 4},              /* 2 */
      {.kind = KILN_VMFB_EXPR_CONST, .value = 3},              /* 3 */
      {.kind = KILN_VMFB_EXPR_ADD, .a = 1, .b = 3},            /* 4: d + 3 */
      {.kind = KILN_VMFB_EXPR_DIV_U, .a = 4, .b = 2},          /* 5: (d + 3) / 4 */
      {.kind = KILN_VMFB_EXPR_CONST, .value = 1},              /* 6 */
      {.kind = KILN_VMFB_EXPR_EQ, .a = 1, .b = 6},             /* 7: d == 1 */
      {.kind = KILN_VMFB_EXPR_SELECT, .a = 7, .b = 2, .c = 5}, /* 8 */
      {.kind = KILN_VMFB_EXPR_CONST, .value = -1},             /* 9 */
      {.kind = KILN_VMFB_EXPR_LT_U, .a = 1, .b = 9},           /* 10: unsigned: d < 2^64-1 */
      {.kind = KILN_VMFB_EXPR_REM_S, .a = 9, .b = 3},          /* 11: -1 % 3 = -1 */
  };
  kiln_vmfb_function_t fn = {
      .name = "f", .inputs = inputs, .n_inputs = 1, .exprs = x, .n_exprs = sizeof x / sizeof x[0]};
  int64_t dims[1][KILN_VMFB_MAX_RANK] = {{9, 16}};
  int64_t v[16];
  assert_true(kiln_vmfb_exprs_eval(&fn, (const int64_t(*)[KILN_VMFB_MAX_RANK])dims, v));
  assert_int_equal(v[4], 3); /* ceil(9 / 4) */
  assert_int_equal(v[6], 0);
  assert_int_equal(v[7], 3);
  assert_int_equal(v[9], 1);
  assert_int_equal(v[10], -1);
  dims[0][0] = 1;
  assert_true(kiln_vmfb_exprs_eval(&fn, (const int64_t(*)[KILN_VMFB_MAX_RANK])dims, v));
  assert_int_equal(v[7], 4);
  x[4].b = 5; /* not earlier */
  assert_false(kiln_vmfb_exprs_eval(&fn, (const int64_t(*)[KILN_VMFB_MAX_RANK])dims, v));
  x[4].b = 2;
  x[1].value = 0; /* division by zero */
  assert_false(kiln_vmfb_exprs_eval(&fn, (const int64_t(*)[KILN_VMFB_MAX_RANK])dims, v));
  x[1].value = 4;
  x[0].a = 1; /* no such input */
  assert_false(kiln_vmfb_exprs_eval(&fn, (const int64_t(*)[KILN_VMFB_MAX_RANK])dims, v));
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_codes_are_irees),
      cmocka_unit_test(test_sizes),
      cmocka_unit_test(test_exprs_eval),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
