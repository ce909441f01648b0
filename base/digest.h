/* SHA-256 digests: the content address of every blob kiln stores or serves.
 * Backed by OpenSSL's libcrypto (SHA-NI where the CPU has it), not hand-written.
 * Text form: exactly 64 lowercase hex characters, no prefix (kiln.proto's rule).
 * Thread-safe: hashers are independent objects.
 */
#ifndef KILN_BASE_DIGEST_H
#define KILN_BASE_DIGEST_H

#include <stdbool.h>
#include <stddef.h>

#define KILN_DIGEST_BYTES   32
#define KILN_DIGEST_HEX_LEN 64

typedef struct kiln_digest_s {
  unsigned char bytes[KILN_DIGEST_BYTES];
} kiln_digest_t;

/* Hex text with its NUL. */
typedef struct kiln_digest_hex_s {
  char text[KILN_DIGEST_HEX_LEN + 1];
} kiln_digest_hex_t;

typedef struct kiln_hasher_s kiln_hasher_t;

/* A streaming SHA-256. Owned by the caller: kiln_hasher_destroy. */
kiln_hasher_t *kiln_hasher_create(void);
void kiln_hasher_update(kiln_hasher_t *hasher, const void *data, size_t len);
/* Writes the digest; the hasher is reset and may be reused. */
void kiln_hasher_finish(kiln_hasher_t *hasher, kiln_digest_t *out_digest);
void kiln_hasher_destroy(kiln_hasher_t *hasher);

/* One-shot digest of `len` bytes. */
void kiln_digest_of(const void *data, size_t len, kiln_digest_t *out_digest);

void kiln_digest_to_hex(const kiln_digest_t *digest, kiln_digest_hex_t *out_hex);
/* Writes the n bytes as 2n lowercase hex characters and a NUL into out (room for
 * 2n + 1). */
void kiln_hex_encode(const void *bytes, size_t n, char *out);
/* Parses exactly 64 lowercase hex characters; false for anything else. */
bool kiln_digest_from_hex(const char *text, kiln_digest_t *out_digest);
/* True when `text` is a well-formed digest. */
bool kiln_digest_is_valid_hex(const char *text);
bool kiln_digest_equal(const kiln_digest_t *a, const kiln_digest_t *b);

#endif /* KILN_BASE_DIGEST_H */
