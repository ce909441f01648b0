/* SHA-256 over libcrypto's EVP interface (the low-level SHA256_* calls are
 * deprecated in OpenSSL 3). */
#include "base/digest.h"

#include "base/alloc.h"

#include <openssl/evp.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

/* The SHA-256 implementation, fetched once. EVP_sha256() makes every init do an
 * implicit fetch (a provider lookup under a lock): that cost more than hashing a
 * cache key, and it serialized the threads that hash. */
static EVP_MD *sha256_md;
static pthread_once_t sha256_once = PTHREAD_ONCE_INIT;

static void fetch_sha256(void) {
  sha256_md = EVP_MD_fetch(NULL, "SHA256", NULL);
  if (!sha256_md) abort(); /* libcrypto without its default provider */
}

static const EVP_MD *sha256(void) {
  pthread_once(&sha256_once, fetch_sha256);
  return sha256_md;
}

struct kiln_hasher_s {
  EVP_MD_CTX *ctx;
};

static void reset(EVP_MD_CTX *ctx) {
  if (EVP_DigestInit_ex(ctx, sha256(), NULL) != 1) abort(); /* cannot fail for SHA-256 */
}

kiln_hasher_t *kiln_hasher_create(void) {
  kiln_hasher_t *h = kiln_malloc(sizeof *h);
  if (!(h->ctx = EVP_MD_CTX_new())) abort(); /* OpenSSL out of memory */
  reset(h->ctx);
  return h;
}

void kiln_hasher_update(kiln_hasher_t *hasher, const void *data, size_t len) {
  if (len) EVP_DigestUpdate(hasher->ctx, data, len);
}

void kiln_hasher_finish(kiln_hasher_t *hasher, kiln_digest_t *out_digest) {
  unsigned int n = 0;
  EVP_DigestFinal_ex(hasher->ctx, out_digest->bytes, &n);
  reset(hasher->ctx);
}

void kiln_hasher_destroy(kiln_hasher_t *hasher) {
  if (!hasher) return;
  EVP_MD_CTX_free(hasher->ctx);
  kiln_free(hasher);
}

/* One reusable context per thread for kiln_digest_of: EVP_Digest allocates and
 * frees a context per call, which cost half the time of hashing a cache key. */
static pthread_key_t ctx_key;
static pthread_once_t ctx_key_once = PTHREAD_ONCE_INIT;

static void free_thread_ctx(void *ctx) { EVP_MD_CTX_free(ctx); }

static void make_ctx_key(void) {
  if (pthread_key_create(&ctx_key, free_thread_ctx) != 0) abort();
}

void kiln_digest_of(const void *data, size_t len, kiln_digest_t *out_digest) {
  pthread_once(&ctx_key_once, make_ctx_key);
  EVP_MD_CTX *ctx = pthread_getspecific(ctx_key);
  if (!ctx) {
    if (!(ctx = EVP_MD_CTX_new())) abort(); /* OpenSSL out of memory */
    if (pthread_setspecific(ctx_key, ctx) != 0) abort();
  }
  unsigned int n = 0;
  if (EVP_DigestInit_ex(ctx, sha256(), NULL) != 1 || (len && EVP_DigestUpdate(ctx, data, len) != 1) ||
      EVP_DigestFinal_ex(ctx, out_digest->bytes, &n) != 1) {
    abort(); /* cannot fail for SHA-256 */
  }
}

void kiln_hex_encode(const void *bytes, size_t n, char *out) {
  static const char hex[] = "0123456789abcdef";
  const unsigned char *b = bytes;
  for (size_t i = 0; i < n; i++) {
    out[2 * i] = hex[b[i] >> 4];
    out[2 * i + 1] = hex[b[i] & 15];
  }
  out[2 * n] = '\0';
}

void kiln_digest_to_hex(const kiln_digest_t *digest, kiln_digest_hex_t *out_hex) {
  kiln_hex_encode(digest->bytes, KILN_DIGEST_BYTES, out_hex->text);
}

/* One more than each lowercase hex digit's value; 0 for every other byte. Digests
 * are validated for every target of every Compile, twice. */
static const unsigned char hex_value_plus_1[256] = {
    ['0'] = 1, ['1'] = 2,  ['2'] = 3,  ['3'] = 4,  ['4'] = 5,  ['5'] = 6,  ['6'] = 7,  ['7'] = 8,
    ['8'] = 9, ['9'] = 10, ['a'] = 11, ['b'] = 12, ['c'] = 13, ['d'] = 14, ['e'] = 15, ['f'] = 16,
};

bool kiln_digest_from_hex(const char *text, kiln_digest_t *out_digest) {
  if (!text) return false;
  const unsigned char *t = (const unsigned char *)text;
  kiln_digest_t d;
  for (size_t i = 0; i < KILN_DIGEST_BYTES; i++) {
    /* A NUL is no digit: the pair loop stops at it, never reading past it. */
    unsigned hi = hex_value_plus_1[t[2 * i]];
    if (!hi) return false;
    unsigned lo = hex_value_plus_1[t[2 * i + 1]];
    if (!lo) return false;
    d.bytes[i] = (unsigned char)((hi - 1) << 4 | (lo - 1));
  }
  if (t[KILN_DIGEST_HEX_LEN] != '\0') return false;
  *out_digest = d;
  return true;
}

bool kiln_digest_is_valid_hex(const char *text) {
  kiln_digest_t ignored;
  return kiln_digest_from_hex(text, &ignored);
}

bool kiln_digest_equal(const kiln_digest_t *a, const kiln_digest_t *b) {
  return memcmp(a->bytes, b->bytes, KILN_DIGEST_BYTES) == 0;
}
