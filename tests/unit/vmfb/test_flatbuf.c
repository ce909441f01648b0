/* Unit tests for compiler/vmfb/flatbuf: a test schema with every field kind
 * (all scalars with zero and nonzero defaults, 4- and 8-aligned structs, strings
 * with embedded NULs, a subtable, scalar/struct/string/table vectors, a union, a
 * vector of unions, a deprecated slot, a recursive table). Round trips of every
 * kind, plain and size-prefixed, appended after other bytes; defaults omitted
 * unless forced; byte-identical output for the same input built in a different
 * order; aligned byte vectors at 16/32/64 for many preceding sizes; vtable dedupe;
 * shared values written once; builder misuse (kinds, ranges, descriptors, union
 * members, deprecated and unknown slots, missing required fields, cycles, nesting
 * past 64, bad options) and its sticky error; descriptor checks. The verifier:
 * every truncation, a bad identifier, bad size prefixes, out-of-bounds and
 * misaligned offsets, bad vtable and table sizes, fields outside their table,
 * unterminated strings, huge vector counts, unknown union types, NONE unions with
 * values, missing required fields, null vector elements, nesting past max_depth, a
 * shared-subtree DAG bomb (must fail fast), each with the path in the message. The
 * reader on absent fields, wrong kinds and corrupt buffers; and every byte of a
 * valid buffer flipped (and random buffers), verified and then read field by field
 * whatever the verdict, which must never crash (the suite also runs under ASan). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <math.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "base/alloc.h"
#include "base/buf.h"
#include "base/status.h"
#include "compiler/vmfb/flatbuf.h"
#include "tests/unit/support/testing.h"

/* ---- the test schema ---- */

enum { LEAF_NAME, LEAF_VALUE };
enum { M1_X };
enum { M2_S };
enum { NODE_KIDS };
enum {
  A_BOOL,
  A_U8,
  A_I8,
  A_U16,
  A_I16,
  A_U32,
  A_I32,
  A_U64,
  A_I64,
  A_F32,
  A_F64,
  A_POS,
  A_BIG,
  A_NAME,
  A_CHILD,
  A_BYTES,
  A_WORDS,
  A_LONGS,
  A_DOUBLES,
  A_VEC3S,
  A_NAMES,
  A_LEAVES,
  A_U_TYPE,
  A_U,
  A_LOCS_TYPE,
  A_LOCS,
  A_OLD,
  A_NEXT,
  A_SHORTS,
  A_COUNT
};

static const kiln_vmfb_flatbuf_field_desc_t leaf_fields[] = {
    {.name = "name", .slot = LEAF_NAME, .kind = KILN_FLATBUF_STRING},
    {.name = "value", .slot = LEAF_VALUE, .kind = KILN_FLATBUF_I32},
};
static const kiln_vmfb_flatbuf_table_desc_t leaf_desc = {"Leaf", leaf_fields, 2};

static const kiln_vmfb_flatbuf_field_desc_t m1_fields[] = {
    {.name = "x", .slot = M1_X, .kind = KILN_FLATBUF_U32},
};
static const kiln_vmfb_flatbuf_table_desc_t m1_desc = {"M1", m1_fields, 1};
static const kiln_vmfb_flatbuf_field_desc_t m2_fields[] = {
    {.name = "s", .slot = M2_S, .kind = KILN_FLATBUF_STRING},
};
static const kiln_vmfb_flatbuf_table_desc_t m2_desc = {"M2", m2_fields, 1};
static const kiln_vmfb_flatbuf_table_desc_t *const u_members[] = {&m1_desc, &m2_desc};
static const kiln_vmfb_flatbuf_union_desc_t u_desc = {"U", u_members, 2};

static const kiln_vmfb_flatbuf_table_desc_t node_desc;
static const kiln_vmfb_flatbuf_field_desc_t node_fields[] = {
    {.name = "kids", .slot = NODE_KIDS, .kind = KILN_FLATBUF_VECTOR_TABLE, .table = &node_desc},
};
static const kiln_vmfb_flatbuf_table_desc_t node_desc = {"Node", node_fields, 1};

static const kiln_vmfb_flatbuf_table_desc_t all_desc;
static const kiln_vmfb_flatbuf_field_desc_t all_fields[A_COUNT] = {
    {.name = "b", .slot = A_BOOL, .kind = KILN_FLATBUF_BOOL, .default_int = 1},
    {.name = "u8", .slot = A_U8, .kind = KILN_FLATBUF_U8, .default_int = 7},
    {.name = "i8", .slot = A_I8, .kind = KILN_FLATBUF_I8, .default_int = -3},
    {.name = "u16", .slot = A_U16, .kind = KILN_FLATBUF_U16},
    {.name = "i16", .slot = A_I16, .kind = KILN_FLATBUF_I16},
    {.name = "u32", .slot = A_U32, .kind = KILN_FLATBUF_U32},
    {.name = "i32", .slot = A_I32, .kind = KILN_FLATBUF_I32, .default_int = -1},
    {.name = "u64", .slot = A_U64, .kind = KILN_FLATBUF_U64},
    {.name = "i64", .slot = A_I64, .kind = KILN_FLATBUF_I64},
    {.name = "f32", .slot = A_F32, .kind = KILN_FLATBUF_F32, .default_float = 1.5},
    {.name = "f64", .slot = A_F64, .kind = KILN_FLATBUF_F64},
    {.name = "pos", .slot = A_POS, .kind = KILN_FLATBUF_STRUCT, .struct_size = 12, .struct_align = 4},
    {.name = "big", .slot = A_BIG, .kind = KILN_FLATBUF_STRUCT, .struct_size = 16, .struct_align = 8},
    {.name = "name", .slot = A_NAME, .kind = KILN_FLATBUF_STRING, .required = true},
    {.name = "child", .slot = A_CHILD, .kind = KILN_FLATBUF_TABLE, .table = &leaf_desc},
    {.name = "bytes", .slot = A_BYTES, .kind = KILN_FLATBUF_VECTOR, .elem_kind = KILN_FLATBUF_U8},
    {.name = "words", .slot = A_WORDS, .kind = KILN_FLATBUF_VECTOR, .elem_kind = KILN_FLATBUF_U32},
    {.name = "longs", .slot = A_LONGS, .kind = KILN_FLATBUF_VECTOR, .elem_kind = KILN_FLATBUF_I64},
    {.name = "doubles", .slot = A_DOUBLES, .kind = KILN_FLATBUF_VECTOR, .elem_kind = KILN_FLATBUF_F64},
    {.name = "vec3s",
     .slot = A_VEC3S,
     .kind = KILN_FLATBUF_VECTOR_STRUCT,
     .struct_size = 12,
     .struct_align = 4},
    {.name = "names", .slot = A_NAMES, .kind = KILN_FLATBUF_VECTOR_STRING},
    {.name = "leaves", .slot = A_LEAVES, .kind = KILN_FLATBUF_VECTOR_TABLE, .table = &leaf_desc},
    {.name = "u_type", .slot = A_U_TYPE, .kind = KILN_FLATBUF_UNION_TYPE, .union_desc = &u_desc},
    {.name = "u", .slot = A_U, .kind = KILN_FLATBUF_UNION, .union_desc = &u_desc},
    {.name = "locs_type", .slot = A_LOCS_TYPE, .kind = KILN_FLATBUF_VECTOR_UNION_TYPE, .union_desc = &u_desc},
    {.name = "locs", .slot = A_LOCS, .kind = KILN_FLATBUF_VECTOR_UNION, .union_desc = &u_desc},
    {.name = "old", .slot = A_OLD, .kind = KILN_FLATBUF_U32, .deprecated = true},
    {.name = "next", .slot = A_NEXT, .kind = KILN_FLATBUF_TABLE, .table = &all_desc},
    {.name = "shorts", .slot = A_SHORTS, .kind = KILN_FLATBUF_VECTOR, .elem_kind = KILN_FLATBUF_I16},
};
static const kiln_vmfb_flatbuf_table_desc_t all_desc = {"All", all_fields, A_COUNT};

/* ---- helpers ---- */

#define assert_ok    kiln_test_assert_ok

#define assert_fails kiln_test_assert_fails

static KILN_MUST_USE kiln_status_t verify(const void *p, size_t len, bool prefixed, const char *id,
                                          const kiln_vmfb_flatbuf_table_desc_t *desc) {
  kiln_vmfb_flatbuf_verify_options_t o = {.identifier = id, .size_prefixed = prefixed};
  return kiln_vmfb_flatbuf_verify(p, len, &o, desc);
}

static void put_f32(uint8_t *p, float f) {
  uint32_t u;
  memcpy(&u, &f, 4);
  kiln_vmfb_flatbuf_store_u32(p, u);
}

static float get_f32(const uint8_t *p) {
  uint32_t u = kiln_vmfb_flatbuf_load_u32(p);
  float f;
  memcpy(&f, &u, 4);
  return f;
}

static kiln_vmfb_flatbuf_ref_t leaf(kiln_vmfb_flatbuf_builder_t *b, const char *name, int32_t value) {
  kiln_vmfb_flatbuf_ref_t t = kiln_vmfb_flatbuf_builder_add_table(b, &leaf_desc);
  kiln_vmfb_flatbuf_builder_set_ref(b, t, LEAF_NAME, kiln_vmfb_flatbuf_builder_add_str(b, name));
  kiln_vmfb_flatbuf_builder_set_int(b, t, LEAF_VALUE, value);
  return t;
}

enum { BYTES_LEN = 100 };

/* Builds the All value every round-trip test reads back with check_all. `reorder`
 * creates the same values in another order and sets fields in reverse: the output
 * must not change. */
static kiln_vmfb_flatbuf_ref_t build_all(kiln_vmfb_flatbuf_builder_t *b, bool reorder) {
  kiln_vmfb_flatbuf_ref_t inner = 0, root, l1, l2, m1, m2a, m2b, child;
  if (reorder) {
    m2a = kiln_vmfb_flatbuf_builder_add_table(b, &m2_desc);
    l2 = leaf(b, "second", -7);
    l1 = leaf(b, "first", 1);
    child = leaf(b, "child", 42);
    root = kiln_vmfb_flatbuf_builder_add_table(b, &all_desc);
  } else {
    root = kiln_vmfb_flatbuf_builder_add_table(b, &all_desc);
    child = leaf(b, "child", 42);
    l1 = leaf(b, "first", 1);
    l2 = leaf(b, "second", -7);
    m2a = kiln_vmfb_flatbuf_builder_add_table(b, &m2_desc);
  }
  kiln_vmfb_flatbuf_builder_set_ref(b, m2a, M2_S, kiln_vmfb_flatbuf_builder_add_str(b, "member two"));
  m1 = kiln_vmfb_flatbuf_builder_add_table(b, &m1_desc);
  kiln_vmfb_flatbuf_builder_set_uint(b, m1, M1_X, 5);
  m2b = kiln_vmfb_flatbuf_builder_add_table(b, &m2_desc);
  kiln_vmfb_flatbuf_builder_set_ref(b, m2b, M2_S, kiln_vmfb_flatbuf_builder_add_str(b, "z"));
  inner = kiln_vmfb_flatbuf_builder_add_table(b, &all_desc);
  kiln_vmfb_flatbuf_builder_set_ref(b, inner, A_NAME, kiln_vmfb_flatbuf_builder_add_str(b, "inner"));
  kiln_vmfb_flatbuf_builder_set_uint(b, inner, A_U8, 9);

  uint8_t pos[12], big[16] = {0}, vec3s[24];
  put_f32(pos, 1.0f);
  put_f32(pos + 4, 2.0f);
  put_f32(pos + 8, 3.0f);
  kiln_vmfb_flatbuf_store_u64(big, UINT64_C(0x1122334455667788));
  kiln_vmfb_flatbuf_store_u32(big + 8, 0x99AABBCCu);
  for (int i = 0; i < 6; i++) put_f32(vec3s + 4 * i, (float)i * 0.5f);
  uint8_t bytes[BYTES_LEN];
  for (int i = 0; i < BYTES_LEN; i++) bytes[i] = (uint8_t)(i * 7 + 1);
  const uint32_t words[] = {1, UINT32_MAX, 3};
  const int64_t longs[] = {-1, INT64_MAX};
  const double doubles[] = {0.5, -1e-300};
  const int16_t shorts[] = {-1, 2, -3};
  kiln_vmfb_flatbuf_ref_t names[3] = {kiln_vmfb_flatbuf_builder_add_str(b, "a"),
                                      kiln_vmfb_flatbuf_builder_add_str(b, ""),
                                      kiln_vmfb_flatbuf_builder_add_string(b, "with\0nul", 8)};
  kiln_vmfb_flatbuf_ref_t leaves[3] = {l1, l2, l1}; /* l1 shared: written once */
  const uint8_t loc_types[3] = {1, 0, 2};
  const kiln_vmfb_flatbuf_ref_t loc_values[3] = {m1, 0, m2b};

  for (int step = 0; step < 2; step++) {
    if ((step == 0) == reorder) {
      /* Offsets and tables. */
      kiln_vmfb_flatbuf_builder_set_ref(b, root, A_NEXT, inner);
      kiln_vmfb_flatbuf_builder_set_union_vector(b, root, A_LOCS, loc_types, loc_values, 3);
      kiln_vmfb_flatbuf_builder_set_union(b, root, A_U, 2, m2a);
      kiln_vmfb_flatbuf_builder_set_ref(b, root, A_LEAVES,
                                        kiln_vmfb_flatbuf_builder_add_vector(b, leaves, 3));
      kiln_vmfb_flatbuf_builder_set_ref(b, root, A_NAMES, kiln_vmfb_flatbuf_builder_add_vector(b, names, 3));
      kiln_vmfb_flatbuf_builder_set_ref(b, root, A_VEC3S,
                                        kiln_vmfb_flatbuf_builder_add_structs(b, vec3s, 2, 12, 4));
      kiln_vmfb_flatbuf_builder_set_ref(
          b, root, A_DOUBLES, kiln_vmfb_flatbuf_builder_add_scalars(b, KILN_FLATBUF_F64, doubles, 2));
      kiln_vmfb_flatbuf_builder_set_ref(b, root, A_LONGS,
                                        kiln_vmfb_flatbuf_builder_add_scalars(b, KILN_FLATBUF_I64, longs, 2));
      kiln_vmfb_flatbuf_builder_set_ref(b, root, A_WORDS,
                                        kiln_vmfb_flatbuf_builder_add_scalars(b, KILN_FLATBUF_U32, words, 3));
      kiln_vmfb_flatbuf_builder_set_ref(
          b, root, A_SHORTS, kiln_vmfb_flatbuf_builder_add_scalars(b, KILN_FLATBUF_I16, shorts, 3));
      kiln_vmfb_flatbuf_builder_set_ref(b, root, A_BYTES,
                                        kiln_vmfb_flatbuf_builder_add_bytes(b, bytes, BYTES_LEN, 64));
      kiln_vmfb_flatbuf_builder_set_ref(b, root, A_CHILD, child);
      kiln_vmfb_flatbuf_builder_set_ref(b, root, A_NAME, kiln_vmfb_flatbuf_builder_add_str(b, "all-kinds"));
    } else {
      /* Inline values. */
      kiln_vmfb_flatbuf_builder_set_struct(b, root, A_BIG, big, sizeof big);
      kiln_vmfb_flatbuf_builder_set_struct(b, root, A_POS, pos, sizeof pos);
      kiln_vmfb_flatbuf_builder_set_float(b, root, A_F64, -2.5e300);
      kiln_vmfb_flatbuf_builder_set_float(b, root, A_F32, 3.25);
      kiln_vmfb_flatbuf_builder_set_int(b, root, A_I64, INT64_MIN + 1);
      kiln_vmfb_flatbuf_builder_set_uint(b, root, A_U64, UINT64_C(0xFEDCBA9876543210));
      kiln_vmfb_flatbuf_builder_set_int(b, root, A_I32, -2000000000);
      kiln_vmfb_flatbuf_builder_set_uint(b, root, A_U32, 4000000000u);
      kiln_vmfb_flatbuf_builder_set_int(b, root, A_I16, -30000);
      kiln_vmfb_flatbuf_builder_set_uint(b, root, A_U16, 60000);
      kiln_vmfb_flatbuf_builder_set_int(b, root, A_I8, -100);
      kiln_vmfb_flatbuf_builder_set_uint(b, root, A_U8, 200);
      kiln_vmfb_flatbuf_builder_set_bool(b, root, A_BOOL, false);
    }
  }
  return root;
}

static void finish_all(kiln_buf_t *out, bool prefixed, bool reorder) {
  kiln_vmfb_flatbuf_builder_t *b = kiln_vmfb_flatbuf_builder_create();
  kiln_vmfb_flatbuf_ref_t root = build_all(b, reorder);
  kiln_vmfb_flatbuf_finish_options_t o = {
      .identifier = "TEST", .size_prefixed = prefixed, .base_alignment = 64};
  assert_ok(kiln_vmfb_flatbuf_builder_finish(b, root, &o, out));
  kiln_vmfb_flatbuf_builder_destroy(b);
}

static void check_string(const char *got, size_t got_len, const char *want, size_t want_len) {
  assert_non_null(got);
  assert_int_equal(got_len, want_len);
  assert_memory_equal(got, want, want_len);
  assert_int_equal(got[got_len], '\0');
}

static void check_leaf(kiln_vmfb_flatbuf_table_t t, const char *name, int32_t value) {
  assert_true(kiln_vmfb_flatbuf_table_exists(t));
  assert_ptr_equal(t.desc, &leaf_desc);
  size_t len;
  const char *s = kiln_vmfb_flatbuf_table_get_string(t, LEAF_NAME, &len);
  check_string(s, len, name, strlen(name));
  assert_int_equal(kiln_vmfb_flatbuf_table_get_int(t, LEAF_VALUE), value);
}

/* Reads back everything build_all set. `base` is the buffer start (alignment). */
static void check_all(kiln_vmfb_flatbuf_table_t t, const uint8_t *base) {
  assert_true(kiln_vmfb_flatbuf_table_exists(t));
  assert_false(kiln_vmfb_flatbuf_table_get_bool(t, A_BOOL));
  assert_true(kiln_vmfb_flatbuf_table_has(t, A_BOOL));
  assert_int_equal(kiln_vmfb_flatbuf_table_get_uint(t, A_U8), 200);
  assert_int_equal(kiln_vmfb_flatbuf_table_get_int(t, A_I8), -100);
  assert_int_equal(kiln_vmfb_flatbuf_table_get_uint(t, A_U16), 60000);
  assert_int_equal(kiln_vmfb_flatbuf_table_get_int(t, A_I16), -30000);
  assert_int_equal(kiln_vmfb_flatbuf_table_get_uint(t, A_U32), 4000000000u);
  assert_int_equal(kiln_vmfb_flatbuf_table_get_int(t, A_I32), -2000000000);
  assert_true(kiln_vmfb_flatbuf_table_get_uint(t, A_U64) == UINT64_C(0xFEDCBA9876543210));
  assert_true(kiln_vmfb_flatbuf_table_get_int(t, A_I64) == INT64_MIN + 1);
  assert_true(kiln_vmfb_flatbuf_table_get_float(t, A_F32) == 3.25);
  assert_true(kiln_vmfb_flatbuf_table_get_float(t, A_F64) == -2.5e300);

  const uint8_t *pos = kiln_vmfb_flatbuf_table_get_struct(t, A_POS);
  assert_non_null(pos);
  assert_true(get_f32(pos) == 1.0f && get_f32(pos + 4) == 2.0f && get_f32(pos + 8) == 3.0f);
  const uint8_t *big = kiln_vmfb_flatbuf_table_get_struct(t, A_BIG);
  assert_non_null(big);
  assert_int_equal((size_t)(big - base) % 8, 0);
  assert_true(kiln_vmfb_flatbuf_load_u64(big) == UINT64_C(0x1122334455667788));
  assert_int_equal(kiln_vmfb_flatbuf_load_u32(big + 8), 0x99AABBCCu);

  size_t len;
  {
    const char *got_ = kiln_vmfb_flatbuf_table_get_string(t, A_NAME, &len);
    check_string(got_, len, "all-kinds", 9);
  }
  check_leaf(kiln_vmfb_flatbuf_table_get_table(t, A_CHILD), "child", 42);

  kiln_vmfb_flatbuf_vector_t v = kiln_vmfb_flatbuf_table_get_vector(t, A_BYTES);
  assert_int_equal(kiln_vmfb_flatbuf_vector_count(v), BYTES_LEN);
  const uint8_t *bytes = kiln_vmfb_flatbuf_vector_data(v);
  assert_non_null(bytes);
  assert_int_equal((size_t)(bytes - base) % 64, 0);
  for (int i = 0; i < BYTES_LEN; i++) {
    assert_int_equal(bytes[i], (uint8_t)(i * 7 + 1));
    assert_int_equal(kiln_vmfb_flatbuf_vector_get_uint(v, (size_t)i), (uint8_t)(i * 7 + 1));
  }

  v = kiln_vmfb_flatbuf_table_get_vector(t, A_WORDS);
  assert_int_equal(kiln_vmfb_flatbuf_vector_count(v), 3);
  assert_int_equal(kiln_vmfb_flatbuf_vector_get_uint(v, 0), 1);
  assert_int_equal(kiln_vmfb_flatbuf_vector_get_uint(v, 1), UINT32_MAX);
  assert_int_equal(kiln_vmfb_flatbuf_vector_get_uint(v, 2), 3);
  assert_int_equal(kiln_vmfb_flatbuf_vector_get_uint(v, 3), 0); /* past the end */

  v = kiln_vmfb_flatbuf_table_get_vector(t, A_LONGS);
  assert_int_equal(kiln_vmfb_flatbuf_vector_count(v), 2);
  assert_int_equal((size_t)(kiln_vmfb_flatbuf_vector_data(v) - base) % 8, 0);
  assert_true(kiln_vmfb_flatbuf_vector_get_int(v, 0) == -1);
  assert_true(kiln_vmfb_flatbuf_vector_get_int(v, 1) == INT64_MAX);

  v = kiln_vmfb_flatbuf_table_get_vector(t, A_DOUBLES);
  assert_int_equal(kiln_vmfb_flatbuf_vector_count(v), 2);
  assert_true(kiln_vmfb_flatbuf_vector_get_float(v, 0) == 0.5);
  assert_true(kiln_vmfb_flatbuf_vector_get_float(v, 1) == -1e-300);

  v = kiln_vmfb_flatbuf_table_get_vector(t, A_SHORTS);
  assert_int_equal(kiln_vmfb_flatbuf_vector_count(v), 3);
  assert_int_equal(kiln_vmfb_flatbuf_vector_get_int(v, 0), -1);
  assert_int_equal(kiln_vmfb_flatbuf_vector_get_int(v, 1), 2);
  assert_int_equal(kiln_vmfb_flatbuf_vector_get_int(v, 2), -3);
  assert_true(kiln_vmfb_flatbuf_vector_get_uint(v, 0) == UINT64_MAX); /* C-cast semantics */

  v = kiln_vmfb_flatbuf_table_get_vector(t, A_VEC3S);
  assert_int_equal(kiln_vmfb_flatbuf_vector_count(v), 2);
  for (int i = 0; i < 2; i++) {
    const uint8_t *s = kiln_vmfb_flatbuf_vector_get_struct(v, (size_t)i);
    assert_non_null(s);
    for (int k = 0; k < 3; k++) assert_true(get_f32(s + 4 * k) == (float)(3 * i + k) * 0.5f);
  }
  assert_null(kiln_vmfb_flatbuf_vector_get_struct(v, 2));

  v = kiln_vmfb_flatbuf_table_get_vector(t, A_NAMES);
  assert_int_equal(kiln_vmfb_flatbuf_vector_count(v), 3);
  {
    const char *got_ = kiln_vmfb_flatbuf_vector_get_string(v, 0, &len);
    check_string(got_, len, "a", 1);
  }
  {
    const char *got_ = kiln_vmfb_flatbuf_vector_get_string(v, 1, &len);
    check_string(got_, len, "", 0);
  }
  {
    const char *got_ = kiln_vmfb_flatbuf_vector_get_string(v, 2, &len);
    check_string(got_, len, "with\0nul", 8);
  }

  v = kiln_vmfb_flatbuf_table_get_vector(t, A_LEAVES);
  assert_int_equal(kiln_vmfb_flatbuf_vector_count(v), 3);
  check_leaf(kiln_vmfb_flatbuf_vector_get_table(v, 0), "first", 1);
  check_leaf(kiln_vmfb_flatbuf_vector_get_table(v, 1), "second", -7);
  check_leaf(kiln_vmfb_flatbuf_vector_get_table(v, 2), "first", 1);
  /* The shared leaf is one table. */
  assert_int_equal(kiln_vmfb_flatbuf_vector_get_table(v, 0).pos,
                   kiln_vmfb_flatbuf_vector_get_table(v, 2).pos);

  kiln_vmfb_flatbuf_table_t m;
  assert_int_equal(kiln_vmfb_flatbuf_table_get_union(t, A_U, &m), 2);
  assert_ptr_equal(m.desc, &m2_desc);
  {
    const char *got_ = kiln_vmfb_flatbuf_table_get_string(m, M2_S, &len);
    check_string(got_, len, "member two", 10);
  }
  assert_int_equal(kiln_vmfb_flatbuf_table_get_uint(t, A_U_TYPE), 2);

  assert_int_equal(kiln_vmfb_flatbuf_table_get_union_count(t, A_LOCS), 3);
  assert_int_equal(kiln_vmfb_flatbuf_table_get_union_at(t, A_LOCS, 0, &m), 1);
  assert_ptr_equal(m.desc, &m1_desc);
  assert_int_equal(kiln_vmfb_flatbuf_table_get_uint(m, M1_X), 5);
  assert_int_equal(kiln_vmfb_flatbuf_table_get_union_at(t, A_LOCS, 1, &m), 0);
  assert_false(kiln_vmfb_flatbuf_table_exists(m));
  assert_int_equal(kiln_vmfb_flatbuf_table_get_union_at(t, A_LOCS, 2, &m), 2);
  {
    const char *got_ = kiln_vmfb_flatbuf_table_get_string(m, M2_S, &len);
    check_string(got_, len, "z", 1);
  }
  assert_int_equal(kiln_vmfb_flatbuf_table_get_union_at(t, A_LOCS, 3, &m), 0);

  assert_false(kiln_vmfb_flatbuf_table_has(t, A_OLD));
  kiln_vmfb_flatbuf_table_t inner = kiln_vmfb_flatbuf_table_get_table(t, A_NEXT);
  assert_ptr_equal(inner.desc, &all_desc);
  {
    const char *got_ = kiln_vmfb_flatbuf_table_get_string(inner, A_NAME, &len);
    check_string(got_, len, "inner", 5);
  }
  assert_int_equal(kiln_vmfb_flatbuf_table_get_uint(inner, A_U8), 9);
  /* Unset fields of the inner table read as their defaults. */
  assert_true(kiln_vmfb_flatbuf_table_get_bool(inner, A_BOOL));
  assert_int_equal(kiln_vmfb_flatbuf_table_get_int(inner, A_I8), -3);
  assert_int_equal(kiln_vmfb_flatbuf_table_get_int(inner, A_I32), -1);
  assert_true(kiln_vmfb_flatbuf_table_get_float(inner, A_F32) == 1.5);
  assert_null(kiln_vmfb_flatbuf_table_get_struct(inner, A_POS));
  assert_false(kiln_vmfb_flatbuf_table_exists(kiln_vmfb_flatbuf_table_get_table(inner, A_NEXT)));
  assert_int_equal(kiln_vmfb_flatbuf_vector_count(kiln_vmfb_flatbuf_table_get_vector(inner, A_LEAVES)), 0);
  assert_int_equal(kiln_vmfb_flatbuf_table_get_union(inner, A_U, &m), 0);
}

/* Reads every field of `t` by its descriptor, recursing into subtables, whatever
 * the buffer holds: the accessors must stay in bounds. `*budget` bounds the walk
 * (a corrupt buffer may be a DAG). Returns a checksum so nothing is optimized out. */
static uint64_t walk(kiln_vmfb_flatbuf_table_t t, int depth, int *budget) {
  if (!kiln_vmfb_flatbuf_table_exists(t) || depth > 70 || --*budget < 0) return 0;
  uint64_t sum = 0;
  size_t len;
  for (uint16_t s = 0; s < t.desc->field_count; s++) {
    const kiln_vmfb_flatbuf_field_desc_t *f = &t.desc->fields[s];
    sum += kiln_vmfb_flatbuf_table_has(t, s);
    sum += kiln_vmfb_flatbuf_table_get_uint(t, s) + (uint64_t)kiln_vmfb_flatbuf_table_get_int(t, s);
    double d = kiln_vmfb_flatbuf_table_get_float(t, s);
    sum += d == d ? (uint64_t)(d != 0) : 1;
    const char *str = kiln_vmfb_flatbuf_table_get_string(t, s, &len);
    if (str) sum += (uint8_t)str[0] + (uint8_t)str[len] + len;
    const uint8_t *st = kiln_vmfb_flatbuf_table_get_struct(t, s);
    if (st) sum += st[0] + st[f->struct_size - 1];
    sum += walk(kiln_vmfb_flatbuf_table_get_table(t, s), depth + 1, budget);
    kiln_vmfb_flatbuf_table_t m;
    sum += kiln_vmfb_flatbuf_table_get_union(t, s, &m);
    sum += walk(m, depth + 1, budget);
    size_t n = kiln_vmfb_flatbuf_table_get_union_count(t, s);
    for (size_t i = 0; i < n + 1 && *budget > 0; i++) {
      sum += kiln_vmfb_flatbuf_table_get_union_at(t, s, i, &m);
      sum += walk(m, depth + 1, budget);
    }
    kiln_vmfb_flatbuf_vector_t v = kiln_vmfb_flatbuf_table_get_vector(t, s);
    n = kiln_vmfb_flatbuf_vector_count(v);
    const uint8_t *data = kiln_vmfb_flatbuf_vector_data(v);
    if (data && n) sum += data[0] + data[n * v.elem_size - 1];
    for (size_t i = 0; i < n + 1 && *budget > 0; i++, --*budget) {
      sum += kiln_vmfb_flatbuf_vector_get_uint(v, i);
      d = kiln_vmfb_flatbuf_vector_get_float(v, i);
      sum += d == d ? (uint64_t)(d != 0) : 1;
      str = kiln_vmfb_flatbuf_vector_get_string(v, i, &len);
      if (str) sum += (uint8_t)str[0] + (uint8_t)str[len] + len;
      st = kiln_vmfb_flatbuf_vector_get_struct(v, i);
      if (st) sum += st[0] + st[v.elem_size - 1];
      sum += walk(kiln_vmfb_flatbuf_vector_get_table(v, i), depth + 1, budget);
    }
  }
  return sum;
}

/* Copies `len` bytes into an exact-size heap block, so ASan sees any overread. */
static uint8_t *exact_copy(const void *p, size_t len) {
  uint8_t *q = malloc(len ? len : 1);
  assert_non_null(q);
  if (len) memcpy(q, p, len);
  return q;
}

/* Positions inside a built buffer, for corrupting it on purpose. */
static size_t raw_vtable(const uint8_t *p, size_t table) {
  return (size_t)((int64_t)table - (int32_t)kiln_vmfb_flatbuf_load_u32(p + table));
}

/* Position of the vtable entry for `slot` of the table at `table`. */
static size_t raw_vt_entry(const uint8_t *p, size_t table, uint16_t slot) {
  size_t vt = raw_vtable(p, table);
  assert_true(4 + 2 * (size_t)slot < kiln_vmfb_flatbuf_load_u16(p + vt));
  return vt + 4 + 2 * (size_t)slot;
}

static size_t raw_field(const uint8_t *p, size_t table, uint16_t slot) {
  size_t vo = kiln_vmfb_flatbuf_load_u16(p + raw_vt_entry(p, table, slot));
  assert_true(vo != 0);
  return table + vo;
}

static size_t raw_follow(const uint8_t *p, size_t at) { return at + kiln_vmfb_flatbuf_load_u32(p + at); }

static double now_seconds(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

/* ---- descriptors ---- */

static void test_desc_check(void **state) {
  (void)state;
  assert_ok(kiln_vmfb_flatbuf_desc_check(&all_desc));
  assert_ok(kiln_vmfb_flatbuf_desc_check(&node_desc));

  kiln_vmfb_flatbuf_field_desc_t f[3];
  kiln_vmfb_flatbuf_table_desc_t t = {"Bad", f, 1};
  const struct {
    kiln_vmfb_flatbuf_field_desc_t field;
    const char *needle;
  } bad[] = {
      {{.name = "x", .slot = 1, .kind = KILN_FLATBUF_U32}, "declared slot 1 at index 0"},
      {{.name = "x", .slot = 0, .kind = KILN_FLATBUF_U32, .required = true}, "can be required"},
      {{.name = "x", .slot = 0, .kind = KILN_FLATBUF_U8, .default_int = 300}, "does not fit"},
      {{.name = "x", .slot = 0, .kind = KILN_FLATBUF_STRING, .default_int = 1}, "has no default"},
      {{.name = "x", .slot = 0, .kind = KILN_FLATBUF_STRUCT, .struct_size = 6, .struct_align = 4},
       "struct size 6"},
      {{.name = "x", .slot = 0, .kind = KILN_FLATBUF_VECTOR, .elem_kind = KILN_FLATBUF_STRING},
       "scalar elem_kind"},
      {{.name = "x", .slot = 0, .kind = KILN_FLATBUF_TABLE}, "needs `table`"},
      {{.name = "x", .slot = 0, .kind = KILN_FLATBUF_UNION_TYPE, .union_desc = &u_desc},
       "must be followed by"},
      {{.name = "x", .slot = 0, .kind = KILN_FLATBUF_UNION, .union_desc = &u_desc}, "must follow"},
      {{.name = NULL, .slot = 0, .kind = KILN_FLATBUF_U32}, "has no name"},
      {{.name = "x", .slot = 0, .kind = (kiln_vmfb_flatbuf_kind_t)99}, "unknown kind"},
  };
  for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
    f[0] = bad[i].field;
    assert_fails(kiln_vmfb_flatbuf_desc_check(&t), KILN_STATUS_INVALID_ARGUMENT, bad[i].needle);
  }
  /* A union type followed by a value of another union. */
  static const kiln_vmfb_flatbuf_union_desc_t other = {"Other", u_members, 1};
  f[0] = (kiln_vmfb_flatbuf_field_desc_t){
      .name = "u_type", .slot = 0, .kind = KILN_FLATBUF_UNION_TYPE, .union_desc = &u_desc};
  f[1] = (kiln_vmfb_flatbuf_field_desc_t){
      .name = "u", .slot = 1, .kind = KILN_FLATBUF_UNION, .union_desc = &other};
  t.field_count = 2;
  assert_fails(kiln_vmfb_flatbuf_desc_check(&t), KILN_STATUS_INVALID_ARGUMENT, "same union");
  f[1].union_desc = &u_desc;
  assert_ok(kiln_vmfb_flatbuf_desc_check(&t));
  assert_fails(kiln_vmfb_flatbuf_desc_check(NULL), KILN_STATUS_INVALID_ARGUMENT, NULL);
}

/* ---- round trips ---- */

static void test_round_trip_all_kinds(void **state) {
  (void)state;
  for (int prefixed = 0; prefixed < 2; prefixed++) {
    kiln_buf_t out;
    kiln_buf_init(&out);
    finish_all(&out, prefixed, false);
    const uint8_t *p = (const uint8_t *)out.data;
    if (prefixed) assert_int_equal(kiln_vmfb_flatbuf_load_u32(p), out.len - 4);
    assert_memory_equal(p + (prefixed ? 8 : 4), "TEST", 4);
    assert_int_equal(out.len % 64, 0); /* padded to the largest alignment used */
    assert_ok(verify(p, out.len, prefixed, "TEST", &all_desc));
    assert_ok(verify(p, out.len, prefixed, NULL, &all_desc));
    check_all(kiln_vmfb_flatbuf_root(p, out.len, prefixed, &all_desc), p);
    /* Bytes after the size the prefix states are not part of the buffer. */
    if (prefixed) {
      kiln_buf_append(&out, "trailing", 8);
      assert_ok(verify(out.data, out.len, true, "TEST", &all_desc));
      check_all(kiln_vmfb_flatbuf_root(out.data, out.len, true, &all_desc), p);
    }
    kiln_buf_deinit(&out);
  }
}

static void test_empty_values(void **state) {
  (void)state;
  kiln_vmfb_flatbuf_builder_t *b = kiln_vmfb_flatbuf_builder_create();
  kiln_vmfb_flatbuf_ref_t root = kiln_vmfb_flatbuf_builder_add_table(b, &all_desc);
  kiln_vmfb_flatbuf_builder_set_ref(b, root, A_NAME, kiln_vmfb_flatbuf_builder_add_string(b, NULL, 0));
  kiln_vmfb_flatbuf_builder_set_ref(b, root, A_BYTES, kiln_vmfb_flatbuf_builder_add_bytes(b, NULL, 0, 16));
  kiln_vmfb_flatbuf_builder_set_ref(b, root, A_LEAVES, kiln_vmfb_flatbuf_builder_add_vector(b, NULL, 0));
  kiln_vmfb_flatbuf_builder_set_union(b, root, A_U, 1, kiln_vmfb_flatbuf_builder_add_table(b, &m1_desc));
  kiln_vmfb_flatbuf_builder_set_union_vector(b, root, A_LOCS, NULL, NULL, 0);
  kiln_buf_t out;
  kiln_buf_init(&out);
  assert_ok(kiln_vmfb_flatbuf_builder_finish(b, root, NULL, &out));
  assert_ok(verify(out.data, out.len, false, NULL, &all_desc));
  kiln_vmfb_flatbuf_table_t t = kiln_vmfb_flatbuf_root(out.data, out.len, false, &all_desc);
  size_t len = 99;
  const char *s = kiln_vmfb_flatbuf_table_get_string(t, A_NAME, &len);
  assert_non_null(s);
  assert_int_equal(len, 0);
  assert_true(kiln_vmfb_flatbuf_table_has(t, A_BYTES));
  kiln_vmfb_flatbuf_vector_t v = kiln_vmfb_flatbuf_table_get_vector(t, A_BYTES);
  assert_int_equal(kiln_vmfb_flatbuf_vector_count(v), 0);
  assert_null(kiln_vmfb_flatbuf_vector_data(v));
  assert_true(kiln_vmfb_flatbuf_table_has(t, A_LEAVES));
  assert_int_equal(kiln_vmfb_flatbuf_table_get_union_count(t, A_LOCS), 0);
  assert_true(kiln_vmfb_flatbuf_table_has(t, A_LOCS));
  kiln_vmfb_flatbuf_table_t m;
  assert_int_equal(kiln_vmfb_flatbuf_table_get_union(t, A_U, &m), 1);
  assert_true(kiln_vmfb_flatbuf_table_exists(m));
  assert_false(kiln_vmfb_flatbuf_table_has(m, M1_X)); /* a table with no fields */
  assert_int_equal(kiln_vmfb_flatbuf_table_get_uint(m, M1_X), 0);
  kiln_buf_deinit(&out);
  kiln_vmfb_flatbuf_builder_destroy(b);
}

static void test_defaults_omitted_unless_forced(void **state) {
  (void)state;
  size_t sizes[2];
  for (int force = 0; force < 2; force++) {
    kiln_vmfb_flatbuf_builder_t *b = kiln_vmfb_flatbuf_builder_create();
    kiln_vmfb_flatbuf_ref_t root = kiln_vmfb_flatbuf_builder_add_table(b, &all_desc);
    kiln_vmfb_flatbuf_builder_set_ref(b, root, A_NAME, kiln_vmfb_flatbuf_builder_add_str(b, "d"));
    kiln_vmfb_flatbuf_builder_set_bool(b, root, A_BOOL, true);
    kiln_vmfb_flatbuf_builder_set_uint(b, root, A_U8, 7);
    kiln_vmfb_flatbuf_builder_set_int(b, root, A_I8, -3);
    kiln_vmfb_flatbuf_builder_set_int(b, root, A_I32, -1);
    kiln_vmfb_flatbuf_builder_set_uint(b, root, A_U64, 0);
    kiln_vmfb_flatbuf_builder_set_float(b, root, A_F32, 1.5);
    kiln_vmfb_flatbuf_builder_set_union(b, root, A_U, 0, 0); /* NONE */
    if (force) {
      kiln_vmfb_flatbuf_builder_force(b, root, A_U8);
      kiln_vmfb_flatbuf_builder_force(b, root, A_U16); /* never set: writes the default */
      kiln_vmfb_flatbuf_builder_force(b, root, A_F32);
    }
    kiln_buf_t out;
    kiln_buf_init(&out);
    kiln_vmfb_flatbuf_finish_options_t o = {.base_alignment = 4};
    assert_ok(kiln_vmfb_flatbuf_builder_finish(b, root, &o, &out));
    assert_ok(verify(out.data, out.len, false, NULL, &all_desc));
    kiln_vmfb_flatbuf_table_t t = kiln_vmfb_flatbuf_root(out.data, out.len, false, &all_desc);
    for (uint16_t s = A_BOOL; s <= A_F64; s++) {
      bool want = force && (s == A_U8 || s == A_U16 || s == A_F32);
      if (kiln_vmfb_flatbuf_table_has(t, s) != want) fail_msg("slot %u present=%d", s, !want);
    }
    assert_false(kiln_vmfb_flatbuf_table_has(t, A_U_TYPE));
    assert_true(kiln_vmfb_flatbuf_table_get_bool(t, A_BOOL));
    assert_int_equal(kiln_vmfb_flatbuf_table_get_uint(t, A_U8), 7);
    assert_int_equal(kiln_vmfb_flatbuf_table_get_int(t, A_I8), -3);
    assert_int_equal(kiln_vmfb_flatbuf_table_get_int(t, A_I32), -1);
    assert_true(kiln_vmfb_flatbuf_table_get_float(t, A_F32) == 1.5);
    sizes[force] = out.len;
    kiln_buf_deinit(&out);
    kiln_vmfb_flatbuf_builder_destroy(b);
  }
  assert_true(sizes[0] < sizes[1]);
}

static void test_deterministic_output(void **state) {
  (void)state;
  kiln_buf_t a, b, c;
  kiln_buf_init(&a);
  kiln_buf_init(&b);
  kiln_buf_init(&c);
  finish_all(&a, true, false);
  finish_all(&b, true, false);
  finish_all(&c, true, true); /* same values, created and set in another order */
  assert_int_equal(a.len, b.len);
  assert_memory_equal(a.data, b.data, a.len);
  assert_int_equal(a.len, c.len);
  assert_memory_equal(a.data, c.data, a.len);
  /* Finishing one builder twice gives the same bytes too. */
  kiln_vmfb_flatbuf_builder_t *bl = kiln_vmfb_flatbuf_builder_create();
  kiln_vmfb_flatbuf_ref_t root = build_all(bl, false);
  kiln_vmfb_flatbuf_finish_options_t o = {.identifier = "TEST", .size_prefixed = true, .base_alignment = 64};
  for (int i = 0; i < 2; i++) {
    kiln_buf_clear(&b);
    assert_ok(kiln_vmfb_flatbuf_builder_finish(bl, root, &o, &b));
    assert_int_equal(a.len, b.len);
    assert_memory_equal(a.data, b.data, a.len);
  }
  kiln_vmfb_flatbuf_builder_destroy(bl);
  kiln_buf_deinit(&a);
  kiln_buf_deinit(&b);
  kiln_buf_deinit(&c);
}

static void test_aligned_byte_vectors(void **state) {
  (void)state;
  const size_t aligns[] = {16, 32, 64};
  uint8_t data[200];
  kiln_test_fill_random(data, sizeof data, 5);
  for (size_t ai = 0; ai < 3; ai++) {
    for (size_t pre = 0; pre < 70; pre += 3) {
      for (int prefixed = 0; prefixed < 2; prefixed++) {
        kiln_vmfb_flatbuf_builder_t *b = kiln_vmfb_flatbuf_builder_create();
        kiln_vmfb_flatbuf_ref_t root = kiln_vmfb_flatbuf_builder_add_table(b, &all_desc);
        /* A string of `pre` bytes and a u8 field shift everything before the data. */
        char name[80];
        memset(name, 'n', pre);
        kiln_vmfb_flatbuf_builder_set_ref(b, root, A_NAME,
                                          kiln_vmfb_flatbuf_builder_add_string(b, name, pre));
        kiln_vmfb_flatbuf_builder_set_uint(b, root, A_U8, pre);
        kiln_vmfb_flatbuf_builder_set_ref(b, root, A_BYTES,
                                          kiln_vmfb_flatbuf_builder_add_bytes(b, data, pre + 1, aligns[ai]));
        kiln_vmfb_flatbuf_ref_t names[1] = {kiln_vmfb_flatbuf_builder_add_string(b, name, pre / 2)};
        kiln_vmfb_flatbuf_builder_set_ref(b, root, A_NAMES,
                                          kiln_vmfb_flatbuf_builder_add_vector(b, names, 1));
        /* Appended after 64 bytes of something else (the VMFB zip header). */
        kiln_buf_t out;
        kiln_buf_init(&out);
        kiln_buf_append(&out, data, 64);
        kiln_vmfb_flatbuf_finish_options_t o = {
            .identifier = "ALGN", .size_prefixed = prefixed, .base_alignment = aligns[ai]};
        assert_ok(kiln_vmfb_flatbuf_builder_finish(b, root, &o, &out));
        const uint8_t *fb = (const uint8_t *)out.data + 64;
        size_t len = out.len - 64;
        assert_ok(verify(fb, len, prefixed, "ALGN", &all_desc));
        kiln_vmfb_flatbuf_vector_t v =
            kiln_vmfb_flatbuf_table_get_vector(kiln_vmfb_flatbuf_root(fb, len, prefixed, &all_desc), A_BYTES);
        assert_int_equal(kiln_vmfb_flatbuf_vector_count(v), pre + 1);
        const uint8_t *d = kiln_vmfb_flatbuf_vector_data(v);
        if ((size_t)(d - fb) % aligns[ai]) {
          fail_msg("align %zu, pre %zu: data at %zu", aligns[ai], pre, (size_t)(d - fb));
        }
        assert_memory_equal(d, data, pre + 1);
        assert_int_equal(len % aligns[ai], 0);
        kiln_buf_deinit(&out);
        kiln_vmfb_flatbuf_builder_destroy(b);
      }
    }
  }
}

static void test_vtables_deduplicated(void **state) {
  (void)state;
  enum { N = 50 };
  kiln_vmfb_flatbuf_builder_t *b = kiln_vmfb_flatbuf_builder_create();
  kiln_vmfb_flatbuf_ref_t root = kiln_vmfb_flatbuf_builder_add_table(b, &all_desc);
  kiln_vmfb_flatbuf_builder_set_ref(b, root, A_NAME, kiln_vmfb_flatbuf_builder_add_str(b, "v"));
  kiln_vmfb_flatbuf_ref_t leaves[N];
  char name[16];
  for (int i = 0; i < N; i++) {
    snprintf(name, sizeof name, "leaf%d", i);
    leaves[i] = leaf(b, name, i + 1);
  }
  kiln_vmfb_flatbuf_builder_set_ref(b, root, A_LEAVES, kiln_vmfb_flatbuf_builder_add_vector(b, leaves, N));
  kiln_buf_t out;
  kiln_buf_init(&out);
  assert_ok(kiln_vmfb_flatbuf_builder_finish(b, root, NULL, &out));
  assert_ok(verify(out.data, out.len, false, NULL, &all_desc));
  const uint8_t *p = (const uint8_t *)out.data;
  kiln_vmfb_flatbuf_vector_t v =
      kiln_vmfb_flatbuf_table_get_vector(kiln_vmfb_flatbuf_root(p, out.len, false, &all_desc), A_LEAVES);
  size_t vt0 = raw_vtable(p, kiln_vmfb_flatbuf_vector_get_table(v, 0).pos);
  for (size_t i = 0; i < N; i++) {
    kiln_vmfb_flatbuf_table_t t = kiln_vmfb_flatbuf_vector_get_table(v, i);
    assert_int_equal(raw_vtable(p, t.pos), vt0);
    snprintf(name, sizeof name, "leaf%zu", i);
    check_leaf(t, name, (int32_t)i + 1);
  }
  kiln_buf_deinit(&out);
  kiln_vmfb_flatbuf_builder_destroy(b);
}

/* ---- builder misuse ---- */

typedef void (*misuse_fn_t)(kiln_vmfb_flatbuf_builder_t *b, kiln_vmfb_flatbuf_ref_t root);

static void misuse_uint_on_string(kiln_vmfb_flatbuf_builder_t *b, kiln_vmfb_flatbuf_ref_t r) {
  kiln_vmfb_flatbuf_builder_set_uint(b, r, A_NAME, 1);
}
static void misuse_u8_range(kiln_vmfb_flatbuf_builder_t *b, kiln_vmfb_flatbuf_ref_t r) {
  kiln_vmfb_flatbuf_builder_set_uint(b, r, A_U8, 256);
}
static void misuse_negative_unsigned(kiln_vmfb_flatbuf_builder_t *b, kiln_vmfb_flatbuf_ref_t r) {
  kiln_vmfb_flatbuf_builder_set_int(b, r, A_U32, -1);
}
static void misuse_i8_range(kiln_vmfb_flatbuf_builder_t *b, kiln_vmfb_flatbuf_ref_t r) {
  kiln_vmfb_flatbuf_builder_set_int(b, r, A_I8, -129);
}
static void misuse_bool_range(kiln_vmfb_flatbuf_builder_t *b, kiln_vmfb_flatbuf_ref_t r) {
  kiln_vmfb_flatbuf_builder_set_uint(b, r, A_BOOL, 2);
}
static void misuse_float_on_int(kiln_vmfb_flatbuf_builder_t *b, kiln_vmfb_flatbuf_ref_t r) {
  kiln_vmfb_flatbuf_builder_set_float(b, r, A_I32, 1.0);
}
static void misuse_string_into_table(kiln_vmfb_flatbuf_builder_t *b, kiln_vmfb_flatbuf_ref_t r) {
  kiln_vmfb_flatbuf_builder_set_ref(b, r, A_CHILD, kiln_vmfb_flatbuf_builder_add_str(b, "x"));
}
static void misuse_wrong_table(kiln_vmfb_flatbuf_builder_t *b, kiln_vmfb_flatbuf_ref_t r) {
  kiln_vmfb_flatbuf_builder_set_ref(b, r, A_CHILD, kiln_vmfb_flatbuf_builder_add_table(b, &m1_desc));
}
static void misuse_elem_size(kiln_vmfb_flatbuf_builder_t *b, kiln_vmfb_flatbuf_ref_t r) {
  const uint32_t w[2] = {1, 2};
  kiln_vmfb_flatbuf_builder_set_ref(b, r, A_BYTES,
                                    kiln_vmfb_flatbuf_builder_add_scalars(b, KILN_FLATBUF_U32, w, 2));
}
static void misuse_strings_into_tables(kiln_vmfb_flatbuf_builder_t *b, kiln_vmfb_flatbuf_ref_t r) {
  kiln_vmfb_flatbuf_ref_t s = kiln_vmfb_flatbuf_builder_add_str(b, "x");
  kiln_vmfb_flatbuf_builder_set_ref(b, r, A_LEAVES, kiln_vmfb_flatbuf_builder_add_vector(b, &s, 1));
}
static void misuse_ref_on_union(kiln_vmfb_flatbuf_builder_t *b, kiln_vmfb_flatbuf_ref_t r) {
  kiln_vmfb_flatbuf_builder_set_ref(b, r, A_U, kiln_vmfb_flatbuf_builder_add_table(b, &m1_desc));
}
static void misuse_union_member(kiln_vmfb_flatbuf_builder_t *b, kiln_vmfb_flatbuf_ref_t r) {
  kiln_vmfb_flatbuf_builder_set_union(b, r, A_U, 2, kiln_vmfb_flatbuf_builder_add_table(b, &m1_desc));
}
static void misuse_union_type(kiln_vmfb_flatbuf_builder_t *b, kiln_vmfb_flatbuf_ref_t r) {
  kiln_vmfb_flatbuf_builder_set_union(b, r, A_U, 3, kiln_vmfb_flatbuf_builder_add_table(b, &m1_desc));
}
static void misuse_union_vector(kiln_vmfb_flatbuf_builder_t *b, kiln_vmfb_flatbuf_ref_t r) {
  const uint8_t types[1] = {0};
  const kiln_vmfb_flatbuf_ref_t values[1] = {kiln_vmfb_flatbuf_builder_add_table(b, &m1_desc)};
  kiln_vmfb_flatbuf_builder_set_union_vector(b, r, A_LOCS, types, values, 1);
}
static void misuse_deprecated(kiln_vmfb_flatbuf_builder_t *b, kiln_vmfb_flatbuf_ref_t r) {
  kiln_vmfb_flatbuf_builder_set_uint(b, r, A_OLD, 1);
}
static void misuse_unknown_slot(kiln_vmfb_flatbuf_builder_t *b, kiln_vmfb_flatbuf_ref_t r) {
  kiln_vmfb_flatbuf_builder_set_uint(b, r, A_COUNT, 1);
}
static void misuse_not_a_table(kiln_vmfb_flatbuf_builder_t *b, kiln_vmfb_flatbuf_ref_t r) {
  kiln_vmfb_flatbuf_builder_set_uint(b, kiln_vmfb_flatbuf_builder_add_str(b, "x"), 0, 1);
}
static void misuse_struct_size(kiln_vmfb_flatbuf_builder_t *b, kiln_vmfb_flatbuf_ref_t r) {
  uint8_t s[8] = {0};
  kiln_vmfb_flatbuf_builder_set_struct(b, r, A_POS, s, sizeof s);
}
static void misuse_bad_align(kiln_vmfb_flatbuf_builder_t *b, kiln_vmfb_flatbuf_ref_t r) {
  kiln_vmfb_flatbuf_builder_add_bytes(b, "x", 1, 24);
}
static void misuse_missing_required(kiln_vmfb_flatbuf_builder_t *b, kiln_vmfb_flatbuf_ref_t r) {
  kiln_vmfb_flatbuf_builder_set_ref(b, r, A_NAME, 0);
}
static void misuse_cycle(kiln_vmfb_flatbuf_builder_t *b, kiln_vmfb_flatbuf_ref_t r) {
  kiln_vmfb_flatbuf_ref_t other = kiln_vmfb_flatbuf_builder_add_table(b, &all_desc);
  kiln_vmfb_flatbuf_builder_set_ref(b, other, A_NAME, kiln_vmfb_flatbuf_builder_add_str(b, "o"));
  kiln_vmfb_flatbuf_builder_set_ref(b, r, A_NEXT, other);
  kiln_vmfb_flatbuf_builder_set_ref(b, other, A_NEXT, r);
}

static void test_builder_misuse(void **state) {
  (void)state;
  const struct {
    misuse_fn_t fn;
    const char *needle;
  } cases[] = {
      {misuse_uint_on_string, "All.name is a string field"},
      {misuse_u8_range, "256 does not fit All.u8"},
      {misuse_negative_unsigned, "-1 does not fit All.u32"},
      {misuse_i8_range, "-129 does not fit All.i8"},
      {misuse_bool_range, "does not fit All.b"},
      {misuse_float_on_int, "All.i32 is a i32 field"},
      {misuse_string_into_table, "All.child is a table field of Leaf but got a string"},
      {misuse_wrong_table, "but got M1"},
      {misuse_elem_size, "element size differs"},
      {misuse_strings_into_tables, "All.leaves is a table vector field"},
      {misuse_ref_on_union, "use set_union"},
      {misuse_union_member, "type 2"},
      {misuse_union_type, "type 3"},
      {misuse_union_vector, "All.locs[0]"},
      {misuse_deprecated, "All.old is deprecated"},
      {misuse_unknown_slot, "no slot 29"},
      {misuse_not_a_table, "is not a table"},
      {misuse_struct_size, "All.pos is 12 bytes, got 8"},
      {misuse_bad_align, "alignment 24"},
      {misuse_missing_required, "All.name is required but was not set"},
      {misuse_cycle, "cycle"},
  };
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
    kiln_vmfb_flatbuf_builder_t *b = kiln_vmfb_flatbuf_builder_create();
    kiln_vmfb_flatbuf_ref_t root = kiln_vmfb_flatbuf_builder_add_table(b, &all_desc);
    kiln_vmfb_flatbuf_builder_set_ref(b, root, A_NAME, kiln_vmfb_flatbuf_builder_add_str(b, "r"));
    cases[i].fn(b, root);
    bool sticky = cases[i].fn != misuse_missing_required && cases[i].fn != misuse_cycle;
    if (sticky) assert_int_equal(kiln_vmfb_flatbuf_builder_add_str(b, "after"), 0);
    kiln_buf_t out;
    kiln_buf_init(&out);
    kiln_buf_append_str(&out, "keep");
    assert_fails(kiln_vmfb_flatbuf_builder_finish(b, root, NULL, &out), KILN_STATUS_INVALID_ARGUMENT,
                 cases[i].needle);
    assert_int_equal(out.len, 4);
    assert_string_equal(out.data, "keep");
    if (sticky) {
      assert_fails(kiln_vmfb_flatbuf_builder_finish(b, root, NULL, &out), KILN_STATUS_FAILED_PRECONDITION,
                   NULL);
    }
    kiln_buf_deinit(&out);
    kiln_vmfb_flatbuf_builder_destroy(b);
  }
}

static void test_finish_options(void **state) {
  (void)state;
  kiln_vmfb_flatbuf_builder_t *b = kiln_vmfb_flatbuf_builder_create();
  kiln_vmfb_flatbuf_ref_t root = build_all(b, false);
  kiln_buf_t out;
  kiln_buf_init(&out);
  kiln_vmfb_flatbuf_finish_options_t o = {.base_alignment = 3};
  assert_fails(kiln_vmfb_flatbuf_builder_finish(b, root, &o, &out), KILN_STATUS_INVALID_ARGUMENT,
               "base_alignment 3");
  o = (kiln_vmfb_flatbuf_finish_options_t){.identifier = "ABC"};
  assert_fails(kiln_vmfb_flatbuf_builder_finish(b, root, &o, &out), KILN_STATUS_INVALID_ARGUMENT,
               "not 4 characters");
  /* The 64-aligned byte vector does not fit a buffer placed at multiples of 16. */
  o = (kiln_vmfb_flatbuf_finish_options_t){.base_alignment = 16};
  assert_fails(kiln_vmfb_flatbuf_builder_finish(b, root, &o, &out), KILN_STATUS_INVALID_ARGUMENT,
               "needs 64-byte alignment");
  assert_int_equal(out.len, 0);
  assert_fails(kiln_vmfb_flatbuf_builder_finish(b, 0, NULL, &out), KILN_STATUS_INVALID_ARGUMENT,
               "not a table");
  /* The builder is still usable: none of those were value errors. */
  o.base_alignment = 64;
  assert_ok(kiln_vmfb_flatbuf_builder_finish(b, root, &o, &out));
  assert_ok(verify(out.data, out.len, false, NULL, &all_desc));
  kiln_buf_deinit(&out);
  kiln_vmfb_flatbuf_builder_destroy(b);
}

/* A chain of `n` All tables linked by `next`. */
static kiln_vmfb_flatbuf_ref_t chain(kiln_vmfb_flatbuf_builder_t *b, int n) {
  kiln_vmfb_flatbuf_ref_t prev = 0, t = 0;
  kiln_vmfb_flatbuf_ref_t name = kiln_vmfb_flatbuf_builder_add_str(b, "c");
  for (int i = 0; i < n; i++) {
    t = kiln_vmfb_flatbuf_builder_add_table(b, &all_desc);
    kiln_vmfb_flatbuf_builder_set_ref(b, t, A_NAME, name);
    kiln_vmfb_flatbuf_builder_set_ref(b, t, A_NEXT, prev);
    prev = t;
  }
  return t;
}

static void test_nesting_limits(void **state) {
  (void)state;
  kiln_vmfb_flatbuf_builder_t *b = kiln_vmfb_flatbuf_builder_create();
  kiln_vmfb_flatbuf_ref_t deep = chain(b, KILN_VMFB_FLATBUF_MAX_DEPTH);
  kiln_buf_t out;
  kiln_buf_init(&out);
  assert_ok(kiln_vmfb_flatbuf_builder_finish(b, deep, NULL, &out));
  assert_ok(verify(out.data, out.len, false, NULL, &all_desc));
  kiln_vmfb_flatbuf_verify_options_t o = {.max_depth = KILN_VMFB_FLATBUF_MAX_DEPTH - 1};
  assert_fails(kiln_vmfb_flatbuf_verify(out.data, out.len, &o, &all_desc), KILN_STATUS_INVALID_ARGUMENT,
               "tables nest deeper than 63");
  o.max_depth = 2000;
  assert_fails(kiln_vmfb_flatbuf_verify(out.data, out.len, &o, &all_desc), KILN_STATUS_INVALID_ARGUMENT,
               "max_depth");
  kiln_vmfb_flatbuf_builder_destroy(b);

  b = kiln_vmfb_flatbuf_builder_create();
  kiln_vmfb_flatbuf_ref_t too_deep = chain(b, KILN_VMFB_FLATBUF_MAX_DEPTH + 1);
  kiln_buf_clear(&out);
  assert_fails(kiln_vmfb_flatbuf_builder_finish(b, too_deep, NULL, &out), KILN_STATUS_INVALID_ARGUMENT,
               "nest 65 deep");
  kiln_vmfb_flatbuf_builder_destroy(b);
  /* A long chain fails without deep recursion in the builder. */
  b = kiln_vmfb_flatbuf_builder_create();
  too_deep = chain(b, 100000);
  assert_fails(kiln_vmfb_flatbuf_builder_finish(b, too_deep, NULL, &out), KILN_STATUS_INVALID_ARGUMENT,
               "deeper than 64");
  kiln_vmfb_flatbuf_builder_destroy(b);
  kiln_buf_deinit(&out);
}

/* ---- verifier ---- */

static void test_verify_truncated_at_every_length(void **state) {
  (void)state;
  for (int prefixed = 0; prefixed < 2; prefixed++) {
    kiln_buf_t out;
    kiln_buf_init(&out);
    finish_all(&out, prefixed, false);
    /* Trailing zeros may be padding; every other byte belongs to some object. */
    size_t content = out.len;
    while (content > 0 && out.data[content - 1] == 0) content--;
    for (size_t len = 0; len < out.len; len++) {
      uint8_t *p = exact_copy(out.data, len);
      kiln_status_t s = verify(p, len, prefixed, "TEST", &all_desc);
      if (len < content || prefixed) {
        if (!s) fail_msg("prefixed=%d: truncated to %zu of %zu bytes verified", prefixed, len, out.len);
        assert_int_equal(kiln_status_code(s), KILN_STATUS_INVALID_ARGUMENT);
      }
      kiln_status_free(s);
      int budget = 10000;
      walk(kiln_vmfb_flatbuf_root(p, len, prefixed, &all_desc), 0, &budget);
      free(p);
    }
    kiln_buf_deinit(&out);
  }
  assert_fails(verify(NULL, 0, false, NULL, &all_desc), KILN_STATUS_INVALID_ARGUMENT,
               "too small for a FlatBuffer header");
  assert_fails(verify("\0\0\0", 3, true, NULL, &all_desc), KILN_STATUS_INVALID_ARGUMENT,
               "no room for its size prefix");
}

/* Verifies a copy of `base` after `mutate` with options and asserts the outcome. */
typedef struct corruption_s {
  const char *what;
  size_t at;          /* byte position to overwrite */
  uint32_t value;     /* new value */
  size_t width;       /* 1, 2 or 4 bytes */
  const char *needle; /* expected message part */
} corruption_t;

static void apply(uint8_t *p, const corruption_t *c) {
  if (c->width == 1) p[c->at] = (uint8_t)c->value;
  if (c->width == 2) kiln_vmfb_flatbuf_store_u16(p + c->at, (uint16_t)c->value);
  if (c->width == 4) kiln_vmfb_flatbuf_store_u32(p + c->at, c->value);
}

static void test_verify_rejects_corruption(void **state) {
  (void)state;
  kiln_buf_t out;
  kiln_buf_init(&out);
  finish_all(&out, false, false);
  const uint8_t *p = (const uint8_t *)out.data;
  size_t len = out.len;
  kiln_vmfb_flatbuf_table_t root = kiln_vmfb_flatbuf_root(p, len, false, &all_desc);
  size_t t = root.pos;
  size_t vt = raw_vtable(p, t);
  size_t tsize = kiln_vmfb_flatbuf_load_u16(p + vt + 2);
  size_t name_str = raw_follow(p, raw_field(p, t, A_NAME));
  size_t name_len = kiln_vmfb_flatbuf_load_u32(p + name_str);
  size_t words = raw_follow(p, raw_field(p, t, A_WORDS));
  size_t leaves = raw_follow(p, raw_field(p, t, A_LEAVES));
  kiln_vmfb_flatbuf_table_t leaf1 =
      kiln_vmfb_flatbuf_vector_get_table(kiln_vmfb_flatbuf_table_get_vector(root, A_LEAVES), 1);
  size_t leaf1_name = raw_follow(p, raw_field(p, leaf1.pos, LEAF_NAME));
  size_t locs_types = raw_follow(p, raw_field(p, t, A_LOCS_TYPE));
  char buf_words[128];
  snprintf(buf_words, sizeof buf_words,
           "All.words: vector extends past the end of the buffer (offset %zu, length 1073741823 "
           "x 4 bytes, buffer %zu)",
           words, len);

  const corruption_t cases[] = {
      {"root offset past the end", 0, (uint32_t)len, 4, "All: offset at 0 points to"},
      {"root offset misaligned", 0, (uint32_t)t + 2, 4, "misaligned"},
      {"root offset null", 0, 0, 4, "null offset"},
      {"vtable outside the buffer", t, 0x80000000u, 4, "outside the buffer"},
      {"vtable after the end", t, (uint32_t) - (int32_t)len, 4, "outside the buffer"},
      {"vtable misaligned", t, (uint32_t)(t - vt + 1), 4, "misaligned vtable"},
      {"vtable too big", vt, 0xFFFE, 2, "bad size 65534"},
      {"vtable odd", vt, 7, 2, "bad size 7"},
      {"vtable too small", vt, 2, 2, "bad size 2"},
      {"table too big", vt + 2, 0xFFFF, 2, "claims 65535 inline bytes"},
      {"table too small", vt + 2, 2, 2, "claims 2 inline bytes"},
      {"field past the table", raw_vt_entry(p, t, A_U64), (uint32_t)tsize - 4, 2,
       "All.u64: field at table offset"},
      {"field over the soffset", raw_vt_entry(p, t, A_U32), 2, 2, "All.u32: field at table offset 2"},
      {"misaligned u64", raw_vt_entry(p, t, A_U64), (uint32_t)(raw_field(p, t, A_U64) - t + 4), 2,
       "All.u64: field at"},
      {"unterminated string", name_str + 4 + name_len, 'x', 1, "All.name: string is not NUL-terminated"},
      {"string too long", name_str, 0x7FFFFFFF, 4, "All.name: string extends past the end"},
      {"huge vector count", words, 0x3FFFFFFF, 4, buf_words},
      {"max vector count", words, 0xFFFFFFFF, 4, "All.words: vector extends past the end"},
      {"null element", leaves + 4 + 4, 0, 4, "All.leaves[1]: null offset"},
      {"nested string", leaf1_name + 4 + 6, 'x', 1, "All.leaves[1].name: string is not NUL"},
      {"unknown union type", raw_field(p, t, A_U_TYPE), 7, 1,
       "All.u_type: unknown union type 7 (U has 2 members)"},
      {"union NONE with a value", raw_field(p, t, A_U_TYPE), 0, 1,
       "All.u: union value present but its type is NONE"},
      {"union type without value", raw_vt_entry(p, t, A_U), 0, 2, "All.u: union type 2 (M2) without"},
      {"unknown union vector type", locs_types + 4, 9, 1, "All.locs[0]: unknown union type 9"},
      {"union vector NONE with value", locs_types + 4, 0, 1, "All.locs[0]: union value present"},
      {"union vector type without value", locs_types + 5, 1, 1, "All.locs[1]: union type 1 (M1)"},
      {"union vector count mismatch", locs_types, 2, 4, "All.locs: 3 union values but 2 types"},
      {"union types without values", raw_vt_entry(p, t, A_LOCS), 0, 2,
       "All.locs: union types are present but the values are missing"},
      {"missing required", raw_vt_entry(p, t, A_NAME), 0, 2, "All.name: required field is missing"},
      {"subtable past the end", raw_field(p, t, A_CHILD), (uint32_t)len, 4, "All.child: offset"},
  };
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
    uint8_t *q = exact_copy(p, len);
    apply(q, &cases[i]);
    kiln_status_t s = verify(q, len, false, "TEST", &all_desc);
    if (!s) fail_msg("%s: verified", cases[i].what);
    if (!strstr(kiln_status_message(s), cases[i].needle)) {
      fail_msg("%s: want \"%s\" in \"%s\"", cases[i].what, cases[i].needle, kiln_status_message(s));
    }
    assert_int_equal(kiln_status_code(s), KILN_STATUS_INVALID_ARGUMENT);
    kiln_status_free(s);
    int budget = 10000;
    walk(kiln_vmfb_flatbuf_root(q, len, false, &all_desc), 0, &budget);
    free(q);
  }

  assert_fails(verify(p, len, false, "IREE", &all_desc), KILN_STATUS_INVALID_ARGUMENT,
               "All: file identifier is \"TEST\", expected \"IREE\"");
  uint8_t *q = exact_copy(p, len);
  memcpy(q + 4, "\x01\"\\z", 4);
  assert_fails(verify(q, len, false, "TEST", &all_desc), KILN_STATUS_INVALID_ARGUMENT,
               "file identifier is \"\\x01\\x22\\x5cz\"");
  free(q);
  /* The caller picks the code, e.g. DATA_LOSS for bytes it stored itself. */
  kiln_vmfb_flatbuf_verify_options_t o = {.identifier = "IREE", .error_code = KILN_STATUS_DATA_LOSS};
  assert_fails(kiln_vmfb_flatbuf_verify(p, len, &o, &all_desc), KILN_STATUS_DATA_LOSS, "identifier");
  kiln_buf_deinit(&out);

  /* Size prefixes: larger than the buffer. */
  kiln_buf_init(&out);
  finish_all(&out, true, false);
  q = exact_copy(out.data, out.len);
  kiln_vmfb_flatbuf_store_u32(q, (uint32_t)out.len - 3);
  assert_fails(verify(q, out.len, true, "TEST", &all_desc), KILN_STATUS_INVALID_ARGUMENT, "size prefix says");
  assert_false(kiln_vmfb_flatbuf_table_exists(kiln_vmfb_flatbuf_root(q, out.len, true, &all_desc)));
  /* Smaller than the content: objects now end past the end. */
  kiln_vmfb_flatbuf_store_u32(q, 16);
  assert_fails(verify(q, out.len, true, "TEST", &all_desc), KILN_STATUS_INVALID_ARGUMENT, NULL);
  free(q);
  kiln_buf_deinit(&out);
}

static void test_verify_dag_bomb_is_fast(void **state) {
  (void)state;
  /* 40 levels, each a Node whose kids are 64 references to the level below:
   * 64^40 paths in a buffer of a few KiB. */
  enum { LEVELS = 40, FAN = 64 };
  kiln_vmfb_flatbuf_builder_t *b = kiln_vmfb_flatbuf_builder_create();
  kiln_vmfb_flatbuf_ref_t below = kiln_vmfb_flatbuf_builder_add_table(b, &node_desc);
  kiln_vmfb_flatbuf_ref_t kids[FAN];
  for (int level = 0; level < LEVELS; level++) {
    for (int k = 0; k < FAN; k++) kids[k] = below;
    kiln_vmfb_flatbuf_ref_t t = kiln_vmfb_flatbuf_builder_add_table(b, &node_desc);
    kiln_vmfb_flatbuf_builder_set_ref(b, t, NODE_KIDS, kiln_vmfb_flatbuf_builder_add_vector(b, kids, FAN));
    below = t;
  }
  kiln_buf_t out;
  kiln_buf_init(&out);
  assert_ok(kiln_vmfb_flatbuf_builder_finish(b, below, NULL, &out));
  assert_true(out.len < 16384);
  double start = now_seconds();
  assert_fails(verify(out.data, out.len, false, NULL, &node_desc), KILN_STATUS_INVALID_ARGUMENT, "visited");
  /* Even a generous explicit budget ends quickly. */
  kiln_vmfb_flatbuf_verify_options_t o = {.max_objects = 2000000};
  assert_fails(kiln_vmfb_flatbuf_verify(out.data, out.len, &o, &node_desc), KILN_STATUS_INVALID_ARGUMENT,
               "more than 2000000");
  double elapsed = now_seconds() - start;
  if (elapsed > 2.0) fail_msg("DAG bomb took %.2f s", elapsed);
  /* The reader on it is only as slow as the caller's own loops. */
  kiln_vmfb_flatbuf_table_t t = kiln_vmfb_flatbuf_root(out.data, out.len, false, &node_desc);
  assert_int_equal(kiln_vmfb_flatbuf_vector_count(kiln_vmfb_flatbuf_table_get_vector(t, NODE_KIDS)), FAN);
  kiln_buf_deinit(&out);
  kiln_vmfb_flatbuf_builder_destroy(b);
}

static void test_flip_every_byte(void **state) {
  (void)state;
  static const uint8_t masks[] = {0x01, 0x10, 0x80, 0xFF};
  for (int prefixed = 0; prefixed < 2; prefixed++) {
    kiln_buf_t out;
    kiln_buf_init(&out);
    finish_all(&out, prefixed, false);
    size_t verified = 0;
    for (size_t i = 0; i < out.len; i++) {
      for (size_t m = 0; m < sizeof masks; m++) {
        uint8_t *q = exact_copy(out.data, out.len);
        q[i] ^= masks[m];
        kiln_status_t s = verify(q, out.len, prefixed, "TEST", &all_desc);
        if (!s) verified++;
        kiln_status_free(s);
        int budget = 20000;
        walk(kiln_vmfb_flatbuf_root(q, out.len, prefixed, &all_desc), 0, &budget);
        free(q);
      }
    }
    /* Payload bytes (string and vector contents, scalars) still verify. */
    assert_true(verified > 0);
    kiln_buf_deinit(&out);
  }
}

static void test_random_buffers(void **state) {
  (void)state;
  uint64_t rng = 12345;
  for (int i = 0; i < 3000; i++) {
    size_t len = kiln_test_random_next(&rng) % 300;
    uint8_t *q = malloc(len ? len : 1);
    assert_non_null(q);
    kiln_test_fill_random(q, len, (uint64_t)i + 1);
    /* Plausible headers reach deeper into the verifier. */
    if (len >= 8 && (i & 1))
      kiln_vmfb_flatbuf_store_u32(q, (uint32_t)(4 * (kiln_test_random_next(&rng) % (len / 4))));
    for (int prefixed = 0; prefixed < 2; prefixed++) {
      kiln_status_t s = verify(q, len, prefixed, NULL, &all_desc);
      kiln_status_free(s);
      int budget = 20000;
      walk(kiln_vmfb_flatbuf_root(q, len, prefixed, &all_desc), 0, &budget);
    }
    free(q);
  }
}

/* ---- reader ---- */

static void test_reader_defensive(void **state) {
  (void)state;
  kiln_vmfb_flatbuf_table_t none = {0};
  kiln_vmfb_flatbuf_table_t m;
  size_t len = 5;
  assert_false(kiln_vmfb_flatbuf_table_exists(none));
  assert_false(kiln_vmfb_flatbuf_table_has(none, A_U8));
  assert_int_equal(kiln_vmfb_flatbuf_table_get_uint(none, A_U8), 0);
  assert_null(kiln_vmfb_flatbuf_table_get_string(none, A_NAME, &len));
  assert_int_equal(len, 0);
  assert_int_equal(kiln_vmfb_flatbuf_table_get_union(none, A_U, &m), 0);
  assert_false(kiln_vmfb_flatbuf_table_exists(kiln_vmfb_flatbuf_root(NULL, 0, false, &all_desc)));
  assert_false(kiln_vmfb_flatbuf_table_exists(kiln_vmfb_flatbuf_root("\x08\0\0", 3, false, &all_desc)));
  assert_false(kiln_vmfb_flatbuf_table_exists(kiln_vmfb_flatbuf_root("\0\0\0\0", 4, false, &all_desc)));

  kiln_buf_t out;
  kiln_buf_init(&out);
  finish_all(&out, false, false);
  kiln_vmfb_flatbuf_table_t t = kiln_vmfb_flatbuf_root(out.data, out.len, false, &all_desc);
  /* Accessors of the wrong kind read as absent. */
  assert_int_equal(kiln_vmfb_flatbuf_table_get_uint(t, A_NAME), 0);
  assert_true(kiln_vmfb_flatbuf_table_get_float(t, A_U32) == 0.0);
  assert_null(kiln_vmfb_flatbuf_table_get_string(t, A_U32, NULL));
  assert_false(kiln_vmfb_flatbuf_table_exists(kiln_vmfb_flatbuf_table_get_table(t, A_NAME)));
  assert_null(kiln_vmfb_flatbuf_table_get_struct(t, A_NAME));
  assert_int_equal(kiln_vmfb_flatbuf_vector_count(kiln_vmfb_flatbuf_table_get_vector(t, A_NAME)), 0);
  assert_int_equal(kiln_vmfb_flatbuf_table_get_uint(t, A_COUNT), 0); /* unknown slot */
  kiln_vmfb_flatbuf_vector_t words = kiln_vmfb_flatbuf_table_get_vector(t, A_WORDS);
  assert_null(kiln_vmfb_flatbuf_vector_get_string(words, 0, NULL));
  assert_false(kiln_vmfb_flatbuf_table_exists(kiln_vmfb_flatbuf_vector_get_table(words, 0)));
  assert_null(kiln_vmfb_flatbuf_vector_get_struct(words, 0));

  /* An unverified buffer with a huge count reads as an empty vector. */
  uint8_t *q = exact_copy(out.data, out.len);
  size_t w = raw_follow(q, raw_field(q, t.pos, A_WORDS));
  kiln_vmfb_flatbuf_store_u32(q + w, 0x3FFFFFFF);
  t = kiln_vmfb_flatbuf_root(q, out.len, false, &all_desc);
  words = kiln_vmfb_flatbuf_table_get_vector(t, A_WORDS);
  assert_int_equal(kiln_vmfb_flatbuf_vector_count(words), 0);
  assert_null(kiln_vmfb_flatbuf_vector_data(words));
  /* And an unterminated string as absent. */
  size_t s = raw_follow(q, raw_field(q, t.pos, A_NAME));
  q[s + 4 + kiln_vmfb_flatbuf_load_u32(q + s)] = 'x';
  assert_null(kiln_vmfb_flatbuf_table_get_string(t, A_NAME, &len));
  free(q);
  kiln_buf_deinit(&out);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_desc_check),
      cmocka_unit_test(test_round_trip_all_kinds),
      cmocka_unit_test(test_empty_values),
      cmocka_unit_test(test_defaults_omitted_unless_forced),
      cmocka_unit_test(test_deterministic_output),
      cmocka_unit_test(test_aligned_byte_vectors),
      cmocka_unit_test(test_vtables_deduplicated),
      cmocka_unit_test(test_builder_misuse),
      cmocka_unit_test(test_finish_options),
      cmocka_unit_test(test_nesting_limits),
      cmocka_unit_test(test_verify_truncated_at_every_length),
      cmocka_unit_test(test_verify_rejects_corruption),
      cmocka_unit_test(test_verify_dag_bomb_is_fast),
      cmocka_unit_test(test_flip_every_byte),
      cmocka_unit_test(test_random_buffers),
      cmocka_unit_test(test_reader_defensive),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
