/* Unit tests for proto/wire: varints and keys against protobuf-c's own encoder
 * (a uint64 field packed by the generated code must carry exactly our bytes) at
 * every length from 1 to 10 bytes, decoding whole and byte by byte, and the
 * malformed cases: a varint cut short, and one running past 10 bytes. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <string.h>

#include "kiln/v1/kiln.pb-c.h"
#include "proto/wire.h"

/* 0, 1, 127, 128, then values that need each length up to 10 bytes. */
static const uint64_t values[] = {
    0,          1,          127,        128,        16383,      16384,     (1u << 21), (1u << 28) - 1,
    1ull << 35, 1ull << 42, 1ull << 49, 1ull << 56, 1ull << 63, UINT64_MAX};

static void test_put_matches_protobuf_c(void **state) {
  (void)state;
  for (size_t i = 0; i < sizeof values / sizeof values[0]; i++) {
    /* ArtifactChunk.offset is field 2, a uint64: the generated code writes the key
     * and the varint and nothing else when data is empty (and nothing at all for
     * proto3's default 0). */
    Kiln__V1__ArtifactChunk chunk = KILN__V1__ARTIFACT_CHUNK__INIT;
    chunk.offset = values[i];
    uint8_t want[32];
    size_t want_len = kiln__v1__artifact_chunk__pack(&chunk, want);
    uint8_t got[2 * KILN_WIRE_VARINT_MAX];
    size_t n = 0;
    if (values[i]) {
      n = kiln_wire_put_key(got, 2, KILN_WIRE_VARINT);
      n += kiln_wire_put_varint(got + n, values[i]);
    }
    assert_int_equal(n, want_len);
    assert_memory_equal(got, want, n);
  }
}

static void test_roundtrip_whole_and_fed(void **state) {
  (void)state;
  for (size_t i = 0; i < sizeof values / sizeof values[0]; i++) {
    uint8_t buf[KILN_WIRE_VARINT_MAX];
    size_t n = kiln_wire_put_varint(buf, values[i]);
    assert_true(n >= 1 && n <= KILN_WIRE_VARINT_MAX);
    const uint8_t *p = buf;
    uint64_t v = 0;
    assert_true(kiln_wire_get_varint(&p, buf + n, &v));
    assert_true(v == values[i]);
    assert_ptr_equal(p, buf + n);
    /* Cut one byte short: not a varint. */
    p = buf;
    assert_false(kiln_wire_get_varint(&p, buf + n - 1, &v));
    /* Fed one byte at a time: 0 until the last, then 1. */
    uint64_t acc = 0;
    unsigned shift = 0;
    for (size_t k = 0; k < n; k++) {
      int r = kiln_wire_varint_feed(&acc, &shift, buf[k]);
      assert_int_equal(r, k + 1 == n ? 1 : 0);
    }
    assert_true(acc == values[i]);
  }
  assert_int_equal(kiln_wire_put_varint((uint8_t[KILN_WIRE_VARINT_MAX]){0}, UINT64_MAX),
                   KILN_WIRE_VARINT_MAX);
}

static void test_overlong_is_malformed(void **state) {
  (void)state;
  uint8_t buf[12];
  memset(buf, 0x80, sizeof buf);
  buf[11] = 0x01; /* ends at byte 12: two bytes too long */
  const uint8_t *p = buf;
  uint64_t v;
  assert_false(kiln_wire_get_varint(&p, buf + sizeof buf, &v));
  uint64_t acc = 0;
  unsigned shift = 0;
  int r = 0;
  size_t k = 0;
  while (k < sizeof buf && (r = kiln_wire_varint_feed(&acc, &shift, buf[k])) == 0) k++;
  assert_int_equal(r, -1);
  assert_int_equal(k, KILN_WIRE_VARINT_MAX - 1); /* the tenth byte still continues */
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_put_matches_protobuf_c),
      cmocka_unit_test(test_roundtrip_whole_and_fed),
      cmocka_unit_test(test_overlong_is_malformed),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
