/* Unit tests for base/digest: SHA-256's published values (one shot, streamed and
 * across threads' reused contexts), and hex parsing: the round trip of every byte
 * value, and each kind of text that is not a digest (NULL, short, long, uppercase,
 * a non-digit in either half of a pair, an embedded NUL) refused.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <string.h>

#include "base/digest.h"

/* FIPS 180-2's examples. */
static const char ABC[] = "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad";
static const char EMPTY[] = "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855";

static void test_sha256_published_values(void **state) {
  (void)state;
  kiln_digest_t d;
  kiln_digest_hex_t hex;
  kiln_digest_of("abc", 3, &d);
  kiln_digest_to_hex(&d, &hex);
  assert_string_equal(hex.text, ABC);
  kiln_digest_of("", 0, &d);
  kiln_digest_to_hex(&d, &hex);
  assert_string_equal(hex.text, EMPTY);
  kiln_hasher_t *h = kiln_hasher_create();
  kiln_hasher_update(h, "a", 1);
  kiln_hasher_update(h, "bc", 2);
  kiln_hasher_finish(h, &d);
  kiln_digest_to_hex(&d, &hex);
  assert_string_equal(hex.text, ABC);
  kiln_hasher_finish(h, &d); /* reset by the last finish: the empty input */
  kiln_digest_to_hex(&d, &hex);
  assert_string_equal(hex.text, EMPTY);
  kiln_hasher_destroy(h);
}

static void test_hex_round_trip(void **state) {
  (void)state;
  kiln_digest_t d, back;
  for (int base = 0; base < 256; base += KILN_DIGEST_BYTES) {
    for (size_t i = 0; i < KILN_DIGEST_BYTES; i++) d.bytes[i] = (unsigned char)(base + (int)i);
    kiln_digest_hex_t hex;
    kiln_digest_to_hex(&d, &hex);
    assert_int_equal(strlen(hex.text), KILN_DIGEST_HEX_LEN);
    assert_true(kiln_digest_from_hex(hex.text, &back));
    assert_true(kiln_digest_equal(&d, &back));
    assert_true(kiln_digest_is_valid_hex(hex.text));
  }
}

static void test_hex_refusals(void **state) {
  (void)state;
  kiln_digest_t d;
  assert_false(kiln_digest_from_hex(NULL, &d));
  assert_false(kiln_digest_is_valid_hex(""));
  char text[KILN_DIGEST_HEX_LEN + 2];
  memcpy(text, ABC, sizeof ABC);
  text[KILN_DIGEST_HEX_LEN - 1] = '\0'; /* 63 digits */
  assert_false(kiln_digest_is_valid_hex(text));
  memcpy(text, ABC, sizeof ABC);
  text[KILN_DIGEST_HEX_LEN] = '0'; /* 65 digits */
  text[KILN_DIGEST_HEX_LEN + 1] = '\0';
  assert_false(kiln_digest_is_valid_hex(text));
  const char bad[] = {'A', 'F', 'g', 'G', 'x', ' ', '-', ':', '/', '@', '`', '{', (char)0xc3, (char)0xff};
  for (size_t b = 0; b < sizeof bad; b++) {
    for (size_t at = 0; at < 2; at++) { /* the high and the low digit of a pair */
      memcpy(text, ABC, sizeof ABC);
      text[10 + at] = bad[b];
      assert_false(kiln_digest_is_valid_hex(text));
    }
  }
  memcpy(text, ABC, sizeof ABC);
  text[31] = '\0'; /* a NUL inside: 31 digits, whatever follows */
  assert_false(kiln_digest_is_valid_hex(text));
  memcpy(text, ABC, sizeof ABC);
  assert_true(kiln_digest_from_hex(text, &d)); /* the fixture itself is fine */
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_sha256_published_values),
      cmocka_unit_test(test_hex_round_trip),
      cmocka_unit_test(test_hex_refusals),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
