/* Unit tests for cache/blobstore: put/get round trips at 0, 1, 4095, 4096 bytes and
 * 1 MiB (random and compressible) with the file name (raw or .zst) each
 * compression setting must produce; reads of at most 256 KiB however much room
 * they are given; a blob larger than the writer's memory limit
 * (spilled, then compressed from its tmp file); a sample that decides "raw" for a
 * large blob; streaming writes equal to a one-shot put; expected-digest mismatch;
 * idempotent duplicates, also across stores with different compression; readers
 * that detect a flipped byte (raw and .zst), a truncated or extended .zst file and
 * a broken frame header; reads past the end; quarantine (and a second quarantine
 * of the same digest keeping both copies); remove; contains; visit with junk
 * entries, early stop and removal from inside the callback; open removing tmp/
 * leftovers; abort removing the tmp file(s); a deleted shard being recreated;
 * option validation; the SHA-256 known vectors; concurrent writers on one store
 * and on two stores with different compression sharing one directory; and, as
 * root, a full disk (a 256 KiB tmpfs): RESOURCE_EXHAUSTED, nothing left in tmp/,
 * earlier blobs intact and the space usable again. Checks: every way of writing
 * (small and threaded one-shot puts, raw, .zst, spilled, empty, a duplicate)
 * reports the XXH3-128 of the content as xxHash itself computes it; a reader given
 * the check verifies with it (a wrong check fails intact bytes, naming XXH3-128,
 * while SHA-256 passes them) and catches a flipped byte (raw and .zst); a reader
 * without one computes the check beside SHA-256, and hands it out only once the
 * content is verified; verify reports SHA-256 failures and the check of intact
 * blobs. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <unistd.h>
#include <xxhash.h>

#include "base/alloc.h"
#include "base/digest.h"
#include "base/status.h"
#include "cache/blobstore.h"
#include "tests/unit/support/testing.h"

#define MIB (1024 * 1024)
/* Must exceed blobstore.c's in-memory limit for a writer (8 MiB). */
#define SPILL_SIZE (12 * MIB)

typedef struct fixture_s {
  /* Short arrays keep every path built from them provably under PATH_MAX. */
  char *root;              /* kiln_test_tmpdir, removed in teardown */
  char dir[320];           /* root/store: the store's directory */
  char mount[320];         /* a tmpfs mounted by the test, "" when none */
  kiln_blobstore_t *store; /* AUTO with default thresholds */
} fixture_t;

/* ---- helpers ---- */

#define assert_ok   kiln_test_assert_ok

#define assert_code kiln_test_assert_code

static void blob_file(const char *dir, const kiln_digest_t *d, bool zst, char *out, size_t cap) {
  kiln_digest_hex_t hex;
  kiln_digest_to_hex(d, &hex);
  snprintf(out, cap, "%s/blobs/%.2s/%s%s", dir, hex.text, hex.text, zst ? ".zst" : "");
}

static bool exists(const char *path) {
  struct stat st;
  return lstat(path, &st) == 0;
}

static off_t file_size(const char *path) {
  struct stat st;
  assert_int_equal(stat(path, &st), 0);
  return st.st_size;
}

/* Asserts which name the blob has: exactly one of raw and .zst. */
static void assert_stored_as(const char *dir, const kiln_digest_t *d, bool zst) {
  char raw[PATH_MAX], comp[PATH_MAX];
  blob_file(dir, d, false, raw, sizeof raw);
  blob_file(dir, d, true, comp, sizeof comp);
  if (exists(raw) == zst || exists(comp) != zst) {
    fail_msg("want only %s; raw exists=%d, .zst exists=%d", zst ? comp : raw, exists(raw), exists(comp));
  }
}

static size_t count_entries(const char *path) {
  DIR *d = opendir(path);
  assert_non_null(d);
  size_t n = 0;
  struct dirent *e;
  while ((e = readdir(d)) != NULL) {
    if (strcmp(e->d_name, ".") != 0 && strcmp(e->d_name, "..") != 0) n++;
  }
  closedir(d);
  return n;
}

static size_t tmp_entries(const char *dir) {
  char path[PATH_MAX];
  snprintf(path, sizeof path, "%s/tmp", dir);
  return count_entries(path);
}

static void assert_get_equals(kiln_blobstore_t *store, const kiln_digest_t *d, const void *data, size_t len) {
  void *got = NULL;
  size_t got_len = 99;
  assert_ok(kiln_blobstore_get(store, d, &got, &got_len));
  assert_non_null(got);
  assert_int_equal(got_len, len);
  if (len) assert_memory_equal(got, data, len);
  kiln_free(got);
}

static kiln_digest_t put_ok(kiln_blobstore_t *store, const void *data, size_t len, uint64_t *out_stored) {
  kiln_digest_t d, want;
  uint64_t stored = 0;
  assert_ok(kiln_blobstore_put(store, data, len, &d, &stored));
  kiln_digest_of(data, len, &want);
  assert_true(kiln_digest_equal(&d, &want));
  if (out_stored) *out_stored = stored;
  return d;
}

static void flip_byte(const char *path, off_t at) {
  int fd = open(path, O_RDWR);
  assert_true(fd >= 0);
  unsigned char c;
  assert_int_equal(pread(fd, &c, 1, at), 1);
  c ^= 0x20;
  assert_int_equal(pwrite(fd, &c, 1, at), 1);
  close(fd);
}

/* The XXH3-128 of `len` bytes in canonical order, from xxHash itself. */
static kiln_blob_check_t xxh3_of(const void *data, size_t len) {
  XXH128_canonical_t canonical;
  XXH128_canonicalFromHash(&canonical, XXH3_128bits(data, len));
  kiln_blob_check_t check;
  memcpy(check.bytes, canonical.digest, sizeof check.bytes);
  return check;
}

static void assert_check_equal(const kiln_blob_check_t *got, const kiln_blob_check_t *want) {
  if (memcmp(got->bytes, want->bytes, sizeof got->bytes) != 0) {
    char g[KILN_BLOB_CHECK_HEX_LEN + 1], w[KILN_BLOB_CHECK_HEX_LEN + 1];
    kiln_blob_check_to_hex(got, g);
    kiln_blob_check_to_hex(want, w);
    fail_msg("check %s, want %s", g, w);
  }
}

/* Reads the whole blob through a reader opened with `check` (may be NULL) and
 * returns the status of the read that ended it; the bytes must be `data`. With
 * out_check, it receives what kiln_blob_reader_check then says (cleared when it
 * says false). */
static KILN_MUST_USE kiln_status_t read_all(kiln_blobstore_t *store, const kiln_digest_t *d,
                                            const kiln_blob_check_t *check, const void *data, size_t len,
                                            kiln_blob_check_t *out_check, bool *out_has_check) {
  kiln_blob_reader_t *r = NULL;
  assert_ok(kiln_blob_reader_open(store, d, check, &r));
  kiln_blob_check_t early;
  assert_false(kiln_blob_reader_check(r, &early)); /* nothing verified yet */
  unsigned char *buf = malloc(64 * 1024);
  size_t total = 0, n = 0;
  kiln_status_t status;
  while (!(status = kiln_blob_reader_read(r, buf, 64 * 1024, &n)) && n > 0) {
    assert_true(total + n <= len);
    if (data) assert_memory_equal(buf, (const unsigned char *)data + total, n);
    total += n;
  }
  if (!status) assert_int_equal(total, len);
  kiln_blob_check_t got;
  bool has = kiln_blob_reader_check(r, &got);
  if (out_check) *out_check = got;
  if (out_has_check) *out_has_check = has;
  free(buf);
  kiln_blob_reader_close(r);
  return status;
}

static kiln_blobstore_t *open_store(const char *dir, kiln_blob_compression_t compression) {
  kiln_blobstore_options_t o = {.compression = compression};
  kiln_blobstore_t *store = NULL;
  assert_ok(kiln_blobstore_open(dir, &o, &store));
  assert_non_null(store);
  return store;
}

/* ---- fixture ---- */

static int setup(void **state) {
  fixture_t *f = calloc(1, sizeof *f);
  if (!f) return -1;
  if (!(f->root = kiln_test_tmpdir("kiln-blobstore"))) {
    free(f);
    return -1;
  }
  snprintf(f->dir, sizeof f->dir, "%s/store", f->root);
  kiln_blobstore_options_t o = {.compression = KILN_BLOB_COMPRESSION_AUTO};
  kiln_status_t status = kiln_blobstore_open(f->dir, &o, &f->store);
  if (status) {
    kiln_status_free(status);
    kiln_test_remove_tree(f->root);
    free(f->root);
    free(f);
    return -1;
  }
  *state = f;
  return 0;
}

static int teardown(void **state) {
  fixture_t *f = *state;
  kiln_blobstore_close(f->store);
  if (f->mount[0]) umount2(f->mount, MNT_DETACH);
  kiln_test_remove_tree(f->root);
  free(f->root);
  free(f);
  return 0;
}

/* ---- tests ---- */

static void test_known_vectors(void **state) {
  fixture_t *f = *state;
  kiln_digest_t d = put_ok(f->store, "abc", 3, NULL);
  kiln_digest_hex_t hex;
  kiln_digest_to_hex(&d, &hex);
  assert_string_equal(hex.text, "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
  assert_stored_as(f->dir, &d, false);
  assert_get_equals(f->store, &d, "abc", 3);

  d = put_ok(f->store, NULL, 0, NULL);
  kiln_digest_to_hex(&d, &hex);
  assert_string_equal(hex.text, "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855");
}

static void test_round_trip_sizes(void **state) {
  fixture_t *f = *state;
  const struct {
    size_t len;
    bool compressible;
    bool want_zst;
  } cases[] = {
      {0, false, false},
      {1, false, false},
      {4095, false, false},
      {4095, true, false},
      {4096, false, false},
      {4096, true, true},
      {MIB, false, false},
      {MIB, true, true},
      /* Around the 64 KiB sample. */
      {65535, true, true},
      {65536, true, true},
      {65537, true, true},
      {65537, false, false},
  };
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
    unsigned char *data = kiln_test_make_data(cases[i].len, cases[i].compressible, i + 1);
    uint64_t stored = 0;
    kiln_digest_t d = put_ok(f->store, data, cases[i].len, &stored);
    assert_stored_as(f->dir, &d, cases[i].want_zst);

    char path[PATH_MAX];
    blob_file(f->dir, &d, cases[i].want_zst, path, sizeof path);
    assert_int_equal(stored, (uint64_t)file_size(path));
    if (cases[i].want_zst)
      assert_true(stored < cases[i].len);
    else
      assert_int_equal(stored, cases[i].len);

    uint64_t contained = 0;
    assert_true(kiln_blobstore_contains(f->store, &d, &contained));
    assert_int_equal(contained, stored);

    kiln_blob_reader_t *r = NULL;
    assert_ok(kiln_blob_reader_open(f->store, &d, NULL, &r));
    assert_int_equal(kiln_blob_reader_size(r), cases[i].len);
    kiln_blob_reader_close(r);

    assert_get_equals(f->store, &d, data, cases[i].len);
    assert_ok(kiln_blobstore_verify(f->store, &d, NULL));
    free(data);
  }
  assert_int_equal(tmp_entries(f->dir), 0);
}

static void test_compression_off_stores_raw(void **state) {
  fixture_t *f = *state;
  char dir[PATH_MAX];
  snprintf(dir, sizeof dir, "%s/off", f->root);
  kiln_blobstore_t *store = NULL;
  assert_ok(kiln_blobstore_open(dir, NULL, &store)); /* NULL options: OFF */
  unsigned char *data = kiln_test_make_data(MIB, true, 7);
  uint64_t stored = 0;
  kiln_digest_t d = put_ok(store, data, MIB, &stored);
  assert_int_equal(stored, MIB);
  assert_stored_as(dir, &d, false);
  assert_get_equals(store, &d, data, MIB);
  free(data);
  kiln_blobstore_close(store);
}

/* A read hands back at most 256 KiB, whatever room it is given (so the check
 * hashes bytes still in the CPU cache), raw and .zst alike, and the pieces add up. */
static void test_reads_are_at_most_256_kib(void **state) {
  fixture_t *f = *state;
  for (int compressible = 0; compressible < 2; compressible++) {
    unsigned char *data = kiln_test_make_data(MIB + 17, compressible, 61 + compressible);
    kiln_digest_t d = put_ok(f->store, data, MIB + 17, NULL);
    kiln_blob_reader_t *r = NULL;
    assert_ok(kiln_blob_reader_open(f->store, &d, NULL, &r));
    unsigned char *buf = malloc(2 * MIB);
    size_t n = 0, total = 0, reads = 0;
    kiln_status_t status;
    while (!(status = kiln_blob_reader_read(r, buf, 2 * MIB, &n)) && n > 0) {
      assert_true(n <= 256 * 1024);
      assert_memory_equal(buf, data + total, n);
      total += n;
      reads++;
    }
    assert_ok(status);
    assert_int_equal(total, MIB + 17);
    assert_true(reads >= 5);
    kiln_blob_reader_close(r);
    free(buf);
    free(data);
  }
}

static void test_spilled_blob_is_compressed(void **state) {
  fixture_t *f = *state;
  unsigned char *data = kiln_test_make_data(SPILL_SIZE, true, 11);
  kiln_blob_writer_t *w = NULL;
  assert_ok(kiln_blob_writer_begin(f->store, NULL, &w));
  /* Odd write sizes so the spill happens in the middle of a write. */
  size_t off = 0;
  for (size_t step = 1; off < SPILL_SIZE; step = step * 7 % 300007 + 1) {
    size_t n = SPILL_SIZE - off < step ? SPILL_SIZE - off : step;
    assert_ok(kiln_blob_writer_write(w, data + off, n));
    off += n;
  }
  kiln_digest_t d, want;
  uint64_t size = 0, stored = 0;
  assert_ok(kiln_blob_writer_commit(w, &d, NULL, &size, &stored));
  kiln_digest_of(data, SPILL_SIZE, &want);
  assert_true(kiln_digest_equal(&d, &want));
  assert_int_equal(size, SPILL_SIZE);
  assert_true(stored < SPILL_SIZE / 2);
  assert_stored_as(f->dir, &d, true);
  assert_int_equal(tmp_entries(f->dir), 0);

  kiln_blob_reader_t *r = NULL;
  assert_ok(kiln_blob_reader_open(f->store, &d, NULL, &r));
  assert_int_equal(kiln_blob_reader_size(r), SPILL_SIZE);
  kiln_blob_reader_close(r);
  assert_get_equals(f->store, &d, data, SPILL_SIZE);

  /* The 64 KiB sample decides: random head, compressible rest -> stored as is. */
  kiln_test_fill_random(data, 64 * 1024, 12);
  d = put_ok(f->store, data, SPILL_SIZE, &stored);
  assert_int_equal(stored, SPILL_SIZE);
  assert_stored_as(f->dir, &d, false);
  assert_get_equals(f->store, &d, data, SPILL_SIZE);
  free(data);
}

static void test_streaming_equals_one_shot(void **state) {
  fixture_t *f = *state;
  char dir2[PATH_MAX];
  snprintf(dir2, sizeof dir2, "%s/second", f->root);
  kiln_blobstore_t *other = open_store(dir2, KILN_BLOB_COMPRESSION_AUTO);
  for (int compressible = 0; compressible <= 1; compressible++) {
    size_t len = MIB + 333;
    unsigned char *data = kiln_test_make_data(len, compressible, 21 + (uint64_t)compressible);
    kiln_blob_writer_t *w = NULL;
    assert_ok(kiln_blob_writer_begin(f->store, NULL, &w));
    size_t off = 0;
    uint64_t s = 5;
    while (off < len) {
      size_t n = kiln_test_random_next(&s) % 778;
      if (n > len - off) n = len - off;
      assert_ok(kiln_blob_writer_write(w, data + off, n)); /* 0-byte writes included */
      off += n;
    }
    kiln_digest_t streamed;
    uint64_t size = 0, stored = 0;
    assert_ok(kiln_blob_writer_commit(w, &streamed, NULL, &size, &stored));
    assert_int_equal(size, len);

    uint64_t stored_once = 0;
    kiln_digest_t once = put_ok(other, data, len, &stored_once);
    assert_true(kiln_digest_equal(&streamed, &once));
    assert_int_equal(stored, stored_once);
    assert_stored_as(f->dir, &streamed, compressible);
    assert_stored_as(dir2, &once, compressible);
    assert_get_equals(f->store, &streamed, data, len);
    free(data);
  }
  kiln_blobstore_close(other);
}

static void test_expected_digest_mismatch(void **state) {
  fixture_t *f = *state;
  kiln_digest_t claimed, actual;
  kiln_digest_of("other", 5, &claimed);
  kiln_digest_of("data", 4, &actual);
  kiln_blob_writer_t *w = NULL;
  assert_ok(kiln_blob_writer_begin(f->store, &claimed, &w));
  assert_ok(kiln_blob_writer_write(w, "data", 4));
  kiln_digest_t out;
  memset(&out, 0xee, sizeof out);
  uint64_t size = 77, stored = 77;
  kiln_status_t status = kiln_blob_writer_commit(w, &out, NULL, &size, &stored);
  assert_int_equal(kiln_status_code(status), KILN_STATUS_INVALID_ARGUMENT);
  kiln_digest_hex_t a, c;
  kiln_digest_to_hex(&actual, &a);
  kiln_digest_to_hex(&claimed, &c);
  /* The message names both digests (what was sent, what it hashed to). */
  assert_non_null(strstr(kiln_status_message(status), a.text));
  assert_non_null(strstr(kiln_status_message(status), c.text));
  kiln_status_free(status);
  kiln_digest_t zero = {{0}};
  assert_true(kiln_digest_equal(&out, &zero)); /* out-params cleared on failure */
  assert_int_equal(size, 0);
  assert_int_equal(stored, 0);
  assert_false(kiln_blobstore_contains(f->store, &actual, NULL));
  assert_false(kiln_blobstore_contains(f->store, &claimed, NULL));
  assert_int_equal(tmp_entries(f->dir), 0);

  /* The right claim commits. */
  assert_ok(kiln_blob_writer_begin(f->store, &actual, &w));
  assert_ok(kiln_blob_writer_write(w, "data", 4));
  assert_ok(kiln_blob_writer_commit(w, &out, NULL, NULL, NULL));
  assert_true(kiln_digest_equal(&out, &actual));
  assert_true(kiln_blobstore_contains(f->store, &actual, NULL));
}

typedef struct collected_s {
  kiln_digest_t digests[64];
  size_t ndigests;
  char junk[16][PATH_MAX];
  size_t njunk;
  size_t calls;
  size_t fail_after; /* return an error on this call (1-based); 0: never */
  bool remove_junk;
} collected_t;

static KILN_MUST_USE kiln_status_t collect(void *user, const kiln_digest_t *digest, const char *path,
                                           uint64_t stored_size) {
  collected_t *c = user;
  c->calls++;
  if (c->fail_after && c->calls == c->fail_after) {
    return KILN_STATUS(KILN_STATUS_CANCELLED, "stop at %s", path);
  }
  if (digest) {
    assert_true(c->ndigests < 64);
    assert_int_equal(stored_size, (uint64_t)file_size(path));
    c->digests[c->ndigests++] = *digest;
  } else {
    assert_true(c->njunk < 16);
    snprintf(c->junk[c->njunk++], PATH_MAX, "%s", path);
    if (c->remove_junk) kiln_test_remove_tree(path);
  }
  return NULL;
}

static size_t count_digest(const collected_t *c, const kiln_digest_t *d) {
  size_t n = 0;
  for (size_t i = 0; i < c->ndigests; i++) n += kiln_digest_equal(&c->digests[i], d);
  return n;
}

static void test_duplicate_put_is_idempotent(void **state) {
  fixture_t *f = *state;
  unsigned char *data = kiln_test_make_data(200000, true, 31);
  uint64_t s1 = 0, s2 = 0;
  kiln_digest_t d1 = put_ok(f->store, data, 200000, &s1);
  kiln_digest_t d2 = put_ok(f->store, data, 200000, &s2);
  assert_true(kiln_digest_equal(&d1, &d2));
  assert_int_equal(s1, s2);
  assert_stored_as(f->dir, &d1, true);
  assert_int_equal(tmp_entries(f->dir), 0);

  /* Another store on the same directory, compression off: the .zst copy counts. */
  kiln_blobstore_t *off = open_store(f->dir, KILN_BLOB_COMPRESSION_OFF);
  uint64_t s3 = 0;
  put_ok(off, data, 200000, &s3);
  assert_int_equal(s3, s1);
  assert_stored_as(f->dir, &d1, true);

  /* And the other way round: a raw copy stops AUTO from adding a .zst one. */
  kiln_test_fill_compressible(data, 200000, 32);
  uint64_t s4 = 0, s5 = 0;
  kiln_digest_t d4 = put_ok(off, data, 200000, &s4);
  put_ok(f->store, data, 200000, &s5);
  assert_int_equal(s4, 200000);
  assert_int_equal(s5, 200000);
  assert_stored_as(f->dir, &d4, false);
  kiln_blobstore_close(off);

  collected_t c = {0};
  assert_ok(kiln_blobstore_visit(f->store, collect, &c));
  assert_int_equal(c.ndigests, 2);
  assert_int_equal(c.njunk, 0);
  free(data);
}

static void test_reader_detects_flipped_byte(void **state) {
  fixture_t *f = *state;
  size_t len = 100000;
  unsigned char *data = kiln_test_make_data(len, false, 41);
  kiln_digest_t d = put_ok(f->store, data, len, NULL);
  char path[PATH_MAX];
  blob_file(f->dir, &d, false, path, sizeof path);
  flip_byte(path, 54321);

  kiln_blob_reader_t *r = NULL;
  assert_ok(kiln_blob_reader_open(f->store, &d, NULL, &r));
  unsigned char buf[4096];
  size_t total = 0, n = 0;
  kiln_status_t status = NULL;
  /* Every read before the end succeeds: nothing is read twice to check it. */
  while (!(status = kiln_blob_reader_read(r, buf, sizeof buf, &n)) && n > 0) total += n;
  assert_int_equal(total, len);
  assert_int_equal(n, 0);
  assert_int_equal(kiln_status_code(status), KILN_STATUS_DATA_LOSS);
  kiln_digest_hex_t hex;
  kiln_digest_to_hex(&d, &hex);
  assert_non_null(strstr(kiln_status_message(status), hex.text));
  assert_non_null(strstr(kiln_status_message(status), path));
  kiln_status_free(status);
  /* A failed reader keeps failing. */
  assert_code(kiln_blob_reader_read(r, buf, sizeof buf, &n), KILN_STATUS_DATA_LOSS);
  assert_int_equal(n, 0);
  kiln_blob_reader_close(r);

  void *out = (void *)1;
  size_t out_len = 7;
  assert_code(kiln_blobstore_get(f->store, &d, &out, &out_len), KILN_STATUS_DATA_LOSS);
  assert_null(out);
  assert_int_equal(out_len, 0);
  assert_code(kiln_blobstore_verify(f->store, &d, NULL), KILN_STATUS_DATA_LOSS);

  /* The same for a compressed blob: one flipped byte in the frame body. */
  kiln_test_fill_compressible(data, len, 42);
  d = put_ok(f->store, data, len, NULL);
  blob_file(f->dir, &d, true, path, sizeof path);
  flip_byte(path, file_size(path) / 2);
  assert_code(kiln_blobstore_get(f->store, &d, &out, &out_len), KILN_STATUS_DATA_LOSS);
  assert_code(kiln_blobstore_verify(f->store, &d, NULL), KILN_STATUS_DATA_LOSS);
  free(data);
}

/* ---- checks (XXH3-128) ---- */

/* Every way of writing reports the content's XXH3-128; readers with and without it
 * agree with it, and so does verify. */
static void test_check_from_every_writer(void **state) {
  fixture_t *f = *state;
  /* The empty input's XXH3-128 (xxHash's published test vector), big-endian. */
  kiln_blob_check_t check;
  kiln_blob_check_of("", 0, &check);
  char hex[KILN_BLOB_CHECK_HEX_LEN + 1];
  kiln_blob_check_to_hex(&check, hex);
  assert_string_equal(hex, "99aa06d3014798d86001c324468d497f");

  const struct {
    size_t len;
    bool compressible;
    bool want_zst;
  } cases[] = {
      {0, false, false},
      {3000, false, false},
      {200000, true, true},
      /* One-shot puts this big hash on a second thread. */
      {MIB + 17, false, false},
      {MIB + 17, true, true},
  };
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
    size_t len = cases[i].len;
    unsigned char *data = kiln_test_make_data(len, cases[i].compressible, 300 + i);
    kiln_blob_check_t want = xxh3_of(data, len);
    kiln_digest_t d;
    assert_ok(kiln_blobstore_put_expected(f->store, data, len, NULL, &d, &check, NULL));
    assert_check_equal(&check, &want);
    assert_stored_as(f->dir, &d, cases[i].want_zst);
    /* A duplicate reports it too (equal content, equal check). */
    memset(&check, 0, sizeof check);
    assert_ok(kiln_blobstore_put_expected(f->store, data, len, &d, NULL, &check, NULL));
    assert_check_equal(&check, &want);

    /* With the check: verified by it, and it is what the reader reports. */
    bool has = false;
    assert_ok(read_all(f->store, &d, &want, data, len, &check, &has));
    assert_true(has);
    assert_check_equal(&check, &want);
    /* Without: SHA-256, and the check computed on the way. */
    assert_ok(read_all(f->store, &d, NULL, data, len, &check, &has));
    assert_true(has);
    assert_check_equal(&check, &want);
    assert_ok(kiln_blobstore_verify(f->store, &d, &check));
    assert_check_equal(&check, &want);
    free(data);
  }

  /* A streamed blob that spills past the writer's memory and is compressed from
   * its tmp file at commit. */
  unsigned char *data = kiln_test_make_data(SPILL_SIZE, true, 310);
  kiln_blob_writer_t *w = NULL;
  assert_ok(kiln_blob_writer_begin(f->store, NULL, &w));
  for (size_t off = 0; off < SPILL_SIZE; off += 100003) {
    size_t n = SPILL_SIZE - off < 100003 ? SPILL_SIZE - off : 100003;
    assert_ok(kiln_blob_writer_write(w, data + off, n));
  }
  kiln_digest_t d;
  assert_ok(kiln_blob_writer_commit(w, &d, &check, NULL, NULL));
  kiln_blob_check_t want = xxh3_of(data, SPILL_SIZE);
  assert_check_equal(&check, &want);
  assert_stored_as(f->dir, &d, true);
  assert_ok(read_all(f->store, &d, &want, data, SPILL_SIZE, NULL, NULL));
  free(data);
}

/* A reader given a check verifies with it, not with SHA-256: a wrong check fails
 * bytes that match their name. */
static void test_wrong_check_fails_intact_bytes(void **state) {
  fixture_t *f = *state;
  for (int compressible = 0; compressible <= 1; compressible++) {
    size_t len = 150000;
    unsigned char *data = kiln_test_make_data(len, compressible, 320 + (uint64_t)compressible);
    kiln_digest_t d = put_ok(f->store, data, len, NULL);
    kiln_blob_check_t wrong = xxh3_of(data, len);
    wrong.bytes[7] ^= 1;
    bool has = true;
    kiln_status_t status = read_all(f->store, &d, &wrong, data, len, NULL, &has);
    assert_int_equal(kiln_status_code(status), KILN_STATUS_DATA_LOSS);
    kiln_digest_hex_t hex;
    kiln_digest_to_hex(&d, &hex);
    assert_non_null(strstr(kiln_status_message(status), hex.text));
    assert_non_null(strstr(kiln_status_message(status), "XXH3-128"));
    char wrong_hex[KILN_BLOB_CHECK_HEX_LEN + 1];
    kiln_blob_check_to_hex(&wrong, wrong_hex);
    assert_non_null(strstr(kiln_status_message(status), wrong_hex));
    kiln_status_free(status);
    assert_false(has); /* a failed reader hands out no check */
    /* SHA-256 (the reader without a check, and verify) passes the same bytes. */
    assert_ok(read_all(f->store, &d, NULL, data, len, NULL, NULL));
    assert_ok(kiln_blobstore_verify(f->store, &d, NULL));
    free(data);
  }
}

/* Damage is caught by the check as it is by SHA-256, each naming its hash. */
static void test_check_detects_flipped_byte(void **state) {
  fixture_t *f = *state;
  size_t len = 100000;
  unsigned char *data = kiln_test_make_data(len, false, 330);
  kiln_digest_t d = put_ok(f->store, data, len, NULL);
  kiln_blob_check_t check = xxh3_of(data, len);
  char path[PATH_MAX];
  blob_file(f->dir, &d, false, path, sizeof path);
  flip_byte(path, 777);
  bool has = true;
  kiln_status_t status = read_all(f->store, &d, &check, NULL, len, NULL, &has);
  assert_int_equal(kiln_status_code(status), KILN_STATUS_DATA_LOSS);
  assert_non_null(strstr(kiln_status_message(status), "XXH3-128"));
  assert_non_null(strstr(kiln_status_message(status), path));
  kiln_status_free(status);
  assert_false(has);
  kiln_blob_check_t none;
  memset(&none, 0xff, sizeof none);
  status = kiln_blobstore_verify(f->store, &d, &none);
  assert_int_equal(kiln_status_code(status), KILN_STATUS_DATA_LOSS);
  assert_non_null(strstr(kiln_status_message(status), "SHA-256"));
  kiln_status_free(status);
  kiln_blob_check_t zero = {{0}};
  assert_check_equal(&none, &zero); /* cleared: no check for damaged bytes */

  /* Compressed: the damage shows as a zstd error or as a failed check. */
  kiln_test_fill_compressible(data, len, 331);
  d = put_ok(f->store, data, len, NULL);
  check = xxh3_of(data, len);
  blob_file(f->dir, &d, true, path, sizeof path);
  flip_byte(path, file_size(path) / 2);
  assert_code(read_all(f->store, &d, &check, NULL, len, NULL, NULL), KILN_STATUS_DATA_LOSS);
  free(data);
}

static void test_damaged_zst_is_data_loss(void **state) {
  fixture_t *f = *state;
  unsigned char *data = kiln_test_make_data(MIB, true, 51);
  kiln_digest_t d = put_ok(f->store, data, MIB, NULL);
  char path[PATH_MAX];
  blob_file(f->dir, &d, true, path, sizeof path);
  off_t full = file_size(path);
  void *out = NULL;
  size_t out_len = 0;

  /* Bytes after the frame. */
  int fd = open(path, O_WRONLY | O_APPEND);
  assert_true(fd >= 0);
  assert_int_equal(write(fd, "junk", 4), 4);
  close(fd);
  assert_code(kiln_blobstore_get(f->store, &d, &out, &out_len), KILN_STATUS_DATA_LOSS);
  assert_code(kiln_blobstore_verify(f->store, &d, NULL), KILN_STATUS_DATA_LOSS);

  /* A frame cut in half. */
  assert_int_equal(truncate(path, full / 2), 0);
  assert_code(kiln_blobstore_get(f->store, &d, &out, &out_len), KILN_STATUS_DATA_LOSS);
  assert_null(out);
  assert_code(kiln_blobstore_verify(f->store, &d, NULL), KILN_STATUS_DATA_LOSS);
  kiln_blob_reader_t *r = NULL;
  assert_ok(kiln_blob_reader_open(f->store, &d, NULL, &r));
  unsigned char *buf = malloc(MIB);
  size_t n = 0, total = 0;
  kiln_status_t status;
  while (!(status = kiln_blob_reader_read(r, buf, MIB, &n)) && n > 0) total += n;
  assert_true(total < MIB);
  assert_code(status, KILN_STATUS_DATA_LOSS);
  kiln_blob_reader_close(r);
  free(buf);

  /* The last byte missing. */
  assert_int_equal(truncate(path, full - 1), 0);
  assert_code(kiln_blobstore_verify(f->store, &d, NULL), KILN_STATUS_DATA_LOSS);

  /* Not even a frame header: the open says so. */
  assert_int_equal(truncate(path, 4), 0);
  r = (kiln_blob_reader_t *)1;
  assert_code(kiln_blob_reader_open(f->store, &d, NULL, &r), KILN_STATUS_DATA_LOSS);
  assert_null(r);
  assert_code(kiln_blobstore_get(f->store, &d, &out, &out_len), KILN_STATUS_DATA_LOSS);
  free(data);
}

static void test_read_past_end_and_bad_cap(void **state) {
  fixture_t *f = *state;
  for (int compressible = 0; compressible <= 1; compressible++) {
    size_t len = 10000;
    unsigned char *data = kiln_test_make_data(len, compressible, 61);
    kiln_digest_t d = put_ok(f->store, data, len, NULL);
    kiln_blob_reader_t *r = NULL;
    assert_ok(kiln_blob_reader_open(f->store, &d, NULL, &r));
    unsigned char buf[777];
    size_t n = 99;
    assert_code(kiln_blob_reader_read(r, buf, 0, &n), KILN_STATUS_INVALID_ARGUMENT);
    size_t total = 0;
    do {
      assert_ok(kiln_blob_reader_read(r, buf, sizeof buf, &n));
      assert_true(n <= sizeof buf);
      if (n) assert_memory_equal(buf, data + total, n);
      total += n;
    } while (n > 0);
    assert_int_equal(total, len);
    for (int i = 0; i < 3; i++) {
      n = 5;
      assert_ok(kiln_blob_reader_read(r, buf, sizeof buf, &n));
      assert_int_equal(n, 0);
    }
    kiln_blob_reader_close(r);
    free(data);
  }
}

static void test_quarantine(void **state) {
  fixture_t *f = *state;
  unsigned char *data = kiln_test_make_data(MIB, true, 71);
  kiln_digest_t d = put_ok(f->store, data, MIB, NULL);
  kiln_digest_hex_t hex;
  kiln_digest_to_hex(&d, &hex);
  char stored[PATH_MAX], q[PATH_MAX], q1[PATH_MAX];
  blob_file(f->dir, &d, true, stored, sizeof stored);
  snprintf(q, sizeof q, "%s/quarantine/%s.zst", f->dir, hex.text);
  snprintf(q1, sizeof q1, "%s/quarantine/%s.zst.1", f->dir, hex.text);
  off_t size = file_size(stored);

  assert_ok(kiln_blobstore_quarantine(f->store, &d));
  assert_false(exists(stored));
  assert_true(exists(q));
  assert_int_equal(file_size(q), size);
  assert_false(kiln_blobstore_contains(f->store, &d, NULL));
  void *out = NULL;
  size_t out_len = 0;
  assert_code(kiln_blobstore_get(f->store, &d, &out, &out_len), KILN_STATUS_NOT_FOUND);
  assert_code(kiln_blobstore_quarantine(f->store, &d), KILN_STATUS_NOT_FOUND);

  /* Stored again and quarantined again: both copies are kept. */
  put_ok(f->store, data, MIB, NULL);
  assert_ok(kiln_blobstore_quarantine(f->store, &d));
  assert_true(exists(q));
  assert_true(exists(q1));

  /* Raw blobs keep their name too. */
  d = put_ok(f->store, "raw", 3, NULL);
  kiln_digest_to_hex(&d, &hex);
  assert_ok(kiln_blobstore_quarantine(f->store, &d));
  snprintf(q, sizeof q, "%s/quarantine/%s", f->dir, hex.text);
  assert_true(exists(q));
  free(data);
}

static void test_remove_and_contains(void **state) {
  fixture_t *f = *state;
  kiln_digest_t d, absent;
  kiln_digest_of("never stored", 12, &absent);
  assert_false(kiln_blobstore_contains(f->store, &absent, NULL));
  kiln_blob_reader_t *r = (kiln_blob_reader_t *)1;
  assert_code(kiln_blob_reader_open(f->store, &absent, NULL, &r), KILN_STATUS_NOT_FOUND);
  assert_null(r);
  assert_code(kiln_blobstore_verify(f->store, &absent, NULL), KILN_STATUS_NOT_FOUND);
  assert_code(kiln_blobstore_remove(f->store, &absent), KILN_STATUS_NOT_FOUND);

  for (int compressible = 0; compressible <= 1; compressible++) {
    unsigned char *data = kiln_test_make_data(50000, compressible, 81);
    uint64_t stored = 0, contained = 0;
    d = put_ok(f->store, data, 50000, &stored);
    assert_true(kiln_blobstore_contains(f->store, &d, &contained));
    assert_int_equal(contained, stored);
    assert_true(kiln_blobstore_contains(f->store, &d, NULL));
    assert_ok(kiln_blobstore_remove(f->store, &d));
    contained = 12345;
    assert_false(kiln_blobstore_contains(f->store, &d, &contained));
    assert_int_equal(contained, 0);
    char path[PATH_MAX];
    blob_file(f->dir, &d, compressible, path, sizeof path);
    assert_false(exists(path));
    void *out = NULL;
    size_t out_len = 0;
    assert_code(kiln_blobstore_get(f->store, &d, &out, &out_len), KILN_STATUS_NOT_FOUND);
    assert_code(kiln_blobstore_remove(f->store, &d), KILN_STATUS_NOT_FOUND);
    free(data);
  }
}

static void make_file(const char *path, const char *content) {
  FILE *fp = fopen(path, "w");
  assert_non_null(fp);
  fputs(content, fp);
  fclose(fp);
}

static bool has_junk(const collected_t *c, const char *path) {
  for (size_t i = 0; i < c->njunk; i++) {
    if (strcmp(c->junk[i], path) == 0) return true;
  }
  return false;
}

static void test_visit(void **state) {
  fixture_t *f = *state;
  kiln_digest_t put[10];
  for (int i = 0; i < 10; i++) {
    size_t len = 1000 + 3000 * (size_t)i;
    unsigned char *data = kiln_test_make_data(len, i % 2, 90 + (uint64_t)i);
    put[i] = put_ok(f->store, data, len, NULL);
    free(data);
  }
  kiln_digest_hex_t hex;
  kiln_digest_to_hex(&put[0], &hex);
  /* A digest in the wrong shard: take a shard that is not its own. */
  const char *wrong_shard = hex.text[0] == 'a' ? "bb" : "ab";
  char junk[7][PATH_MAX];
  snprintf(junk[0], PATH_MAX, "%s/blobs/%.2s/not-a-digest", f->dir, hex.text);
  snprintf(junk[1], PATH_MAX, "%s/blobs/%s/%s", f->dir, wrong_shard, hex.text);
  snprintf(junk[2], PATH_MAX, "%s/blobs/%s", f->dir, hex.text); /* outside any shard */
  snprintf(junk[3], PATH_MAX, "%s/blobs/%.2s/%s.gz", f->dir, hex.text, hex.text);
  char upper[KILN_DIGEST_HEX_LEN + 1];
  for (int i = 0; i <= KILN_DIGEST_HEX_LEN; i++) {
    char ch = hex.text[i];
    upper[i] = (char)(ch >= 'a' && ch <= 'f' ? ch - 'a' + 'A' : ch);
  }
  snprintf(junk[4], PATH_MAX, "%s/blobs/%.2s/%s", f->dir, hex.text, upper);
  snprintf(junk[5], PATH_MAX, "%s/blobs/zz", f->dir); /* a directory, not a shard */
  snprintf(junk[6], PATH_MAX, "%s/blobs/%.2s/%.63s%c", f->dir, hex.text, hex.text,
           hex.text[63] == '0' ? '1' : '0');
  for (int i = 0; i < 7; i++) {
    if (i == 5)
      assert_int_equal(mkdir(junk[i], 0700), 0);
    else if (i == 6)
      assert_int_equal(mkdir(junk[i], 0700), 0); /* a directory named like a blob */
    else
      make_file(junk[i], "junk");
  }
  if (strcmp(upper, hex.text) == 0) skip(); /* a digest without letters: astronomically rare */

  collected_t c = {0};
  assert_ok(kiln_blobstore_visit(f->store, collect, &c));
  assert_int_equal(c.ndigests, 10);
  for (int i = 0; i < 10; i++) assert_int_equal(count_digest(&c, &put[i]), 1);
  assert_int_equal(c.njunk, 7);
  for (int i = 0; i < 7; i++) {
    if (!has_junk(&c, junk[i])) fail_msg("junk %s not reported", junk[i]);
  }

  /* A failing callback stops the walk and its status comes back. */
  collected_t stop = {.fail_after = 3};
  assert_code(kiln_blobstore_visit(f->store, collect, &stop), KILN_STATUS_CANCELLED);
  assert_int_equal(stop.calls, 3);

  /* Repair: the callback may remove what it is given. */
  collected_t repair = {.remove_junk = true};
  assert_ok(kiln_blobstore_visit(f->store, collect, &repair));
  assert_int_equal(repair.njunk, 7);
  collected_t after = {0};
  assert_ok(kiln_blobstore_visit(f->store, collect, &after));
  assert_int_equal(after.njunk, 0);
  assert_int_equal(after.ndigests, 10);
  for (int i = 0; i < 10; i++) assert_ok(kiln_blobstore_verify(f->store, &put[i], NULL));
}

static void test_open_removes_tmp_leftovers(void **state) {
  fixture_t *f = *state;
  char path[PATH_MAX];
  snprintf(path, sizeof path, "%s/tmp/blob-leftover", f->dir);
  make_file(path, "partial");
  snprintf(path, sizeof path, "%s/tmp/dir", f->dir);
  assert_int_equal(mkdir(path, 0700), 0);
  snprintf(path, sizeof path, "%s/tmp/dir/inner", f->dir);
  make_file(path, "x");
  /* A writer left open by a "crashed" user of the old handle. */
  kiln_blob_writer_t *w = NULL;
  assert_ok(kiln_blob_writer_begin(f->store, NULL, &w));
  assert_ok(kiln_blob_writer_write(w, "abc", 3));
  assert_int_equal(tmp_entries(f->dir), 3);

  kiln_digest_t d = put_ok(f->store, "kept", 4, NULL);
  kiln_blobstore_close(f->store);
  f->store = open_store(f->dir, KILN_BLOB_COMPRESSION_AUTO);
  assert_int_equal(tmp_entries(f->dir), 0);
  assert_get_equals(f->store, &d, "kept", 4);
  kiln_blob_writer_abort(w); /* its file is already gone: abort must cope */
}

static void test_abort_removes_tmp(void **state) {
  fixture_t *f = *state;
  unsigned char *data = kiln_test_make_data(SPILL_SIZE, true, 101);
  const size_t sizes[] = {0, 10, 100000, SPILL_SIZE};
  for (size_t i = 0; i < sizeof sizes / sizeof sizes[0]; i++) {
    kiln_blob_writer_t *w = NULL;
    assert_ok(kiln_blob_writer_begin(f->store, NULL, &w));
    assert_ok(kiln_blob_writer_write(w, data, sizes[i]));
    assert_int_equal(tmp_entries(f->dir), 1);
    kiln_blob_writer_abort(w);
    assert_int_equal(tmp_entries(f->dir), 0);
    kiln_digest_t d;
    kiln_digest_of(data, sizes[i], &d);
    assert_false(kiln_blobstore_contains(f->store, &d, NULL));
  }
  kiln_blob_writer_abort(NULL);
  free(data);
}

static void test_missing_shard_is_recreated(void **state) {
  fixture_t *f = *state;
  kiln_digest_t d = put_ok(f->store, "shard", 5, NULL);
  kiln_digest_hex_t hex;
  kiln_digest_to_hex(&d, &hex);
  assert_ok(kiln_blobstore_remove(f->store, &d));
  char shard[PATH_MAX];
  snprintf(shard, sizeof shard, "%s/blobs/%.2s", f->dir, hex.text);
  assert_int_equal(rmdir(shard), 0);
  put_ok(f->store, "shard", 5, NULL);
  assert_get_equals(f->store, &d, "shard", 5);
  assert_int_equal(tmp_entries(f->dir), 0);
}

static void test_open_validates(void **state) {
  fixture_t *f = *state;
  char dir[PATH_MAX];
  snprintf(dir, sizeof dir, "%s/bad", f->root);
  const kiln_blobstore_options_t bad[] = {
      {.compression = (kiln_blob_compression_t)7},
      {.compression = KILN_BLOB_COMPRESSION_AUTO, .compress_max_ratio = -0.5},
      {.compression = KILN_BLOB_COMPRESSION_AUTO, .zstd_level = 1000},
  };
  for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
    kiln_blobstore_t *store = (kiln_blobstore_t *)1;
    assert_code(kiln_blobstore_open(dir, &bad[i], &store), KILN_STATUS_INVALID_ARGUMENT);
    assert_null(store);
  }
  /* A file where the store's directory should be. */
  snprintf(dir, sizeof dir, "%s/file", f->root);
  make_file(dir, "x");
  kiln_blobstore_t *store = (kiln_blobstore_t *)1;
  kiln_status_t status = kiln_blobstore_open(dir, NULL, &store);
  assert_non_null(status);
  assert_null(store);
  kiln_status_free(status);

  /* Nested directories are created; explicit options are honoured. */
  snprintf(dir, sizeof dir, "%s/a/b/c", f->root);
  kiln_blobstore_options_t o = {.compression = KILN_BLOB_COMPRESSION_AUTO,
                                .compress_min_bytes = 100000,
                                .compress_max_ratio = 0.5,
                                .zstd_level = 1};
  assert_ok(kiln_blobstore_open(dir, &o, &store));
  unsigned char *data = kiln_test_make_data(99999, true, 111);
  kiln_digest_t d = put_ok(store, data, 99999, NULL);
  assert_stored_as(dir, &d, false); /* below compress_min_bytes */
  free(data);
  data = kiln_test_make_data(100000, true, 112);
  d = put_ok(store, data, 100000, NULL);
  assert_stored_as(dir, &d, true);
  free(data);
  kiln_blobstore_close(store);
}

/* ---- concurrency ---- */

enum { THREADS = 8, SHARED_BLOBS = 16 };

typedef struct thread_arg_s {
  kiln_blobstore_t *store;
  int index;
  unsigned char *shared[SHARED_BLOBS];
  size_t shared_len[SHARED_BLOBS];
  kiln_digest_t own;
  int failures;
} thread_arg_t;

static void *writer_thread(void *p) {
  thread_arg_t *a = p;
  for (int round = 0; round < 3; round++) {
    for (int i = 0; i < SHARED_BLOBS; i++) {
      int k = (i + a->index) % SHARED_BLOBS;
      kiln_status_t status = kiln_blobstore_put(a->store, a->shared[k], a->shared_len[k], NULL, NULL);
      if (status) {
        a->failures++;
        kiln_status_free(status);
      }
    }
  }
  unsigned char own[30000];
  kiln_test_fill_compressible(own, sizeof own, 1000 + (uint64_t)a->index);
  if (kiln_blobstore_put(a->store, own, sizeof own, &a->own, NULL)) a->failures++;
  return NULL;
}

static void test_concurrent_writers(void **state) {
  fixture_t *f = *state;
  /* Half the threads use a second handle with compression off: the same content
   * then races as raw and as .zst, and at most one name may survive. */
  kiln_blobstore_t *off = open_store(f->dir, KILN_BLOB_COMPRESSION_OFF);
  thread_arg_t args[THREADS];
  unsigned char *shared[SHARED_BLOBS];
  size_t shared_len[SHARED_BLOBS];
  kiln_digest_t shared_digest[SHARED_BLOBS];
  for (int i = 0; i < SHARED_BLOBS; i++) {
    shared_len[i] = 20000 + 10000 * (size_t)i;
    shared[i] = kiln_test_make_data(shared_len[i], i % 4 != 1, 120 + (uint64_t)i);
    kiln_digest_of(shared[i], shared_len[i], &shared_digest[i]);
  }
  pthread_t threads[THREADS];
  for (int t = 0; t < THREADS; t++) {
    args[t] = (thread_arg_t){.store = t % 2 ? off : f->store, .index = t};
    memcpy(args[t].shared, shared, sizeof shared);
    memcpy(args[t].shared_len, shared_len, sizeof shared_len);
    assert_int_equal(pthread_create(&threads[t], NULL, writer_thread, &args[t]), 0);
  }
  for (int t = 0; t < THREADS; t++) assert_int_equal(pthread_join(threads[t], NULL), 0);

  collected_t c = {0};
  assert_ok(kiln_blobstore_visit(f->store, collect, &c));
  assert_int_equal(c.njunk, 0);
  assert_int_equal(c.ndigests, SHARED_BLOBS + THREADS); /* one name per digest */
  for (int t = 0; t < THREADS; t++) {
    assert_int_equal(args[t].failures, 0);
    assert_int_equal(count_digest(&c, &args[t].own), 1);
  }
  for (int i = 0; i < SHARED_BLOBS; i++) {
    assert_int_equal(count_digest(&c, &shared_digest[i]), 1);
    assert_get_equals(f->store, &shared_digest[i], shared[i], shared_len[i]);
    free(shared[i]);
  }
  assert_int_equal(tmp_entries(f->dir), 0);
  kiln_blobstore_close(off);
}

/* ---- disk full ---- */

static void test_disk_full(void **state) {
  fixture_t *f = *state;
  snprintf(f->mount, sizeof f->mount, "%s/full", f->root);
  assert_int_equal(mkdir(f->mount, 0700), 0);
  if (geteuid() != 0 || mount("tmpfs", f->mount, "tmpfs", 0, "size=256k") != 0) {
    f->mount[0] = '\0';
    skip(); /* needs root (CAP_SYS_ADMIN) to mount a small tmpfs */
  }
  kiln_blobstore_t *store = open_store(f->mount, KILN_BLOB_COMPRESSION_AUTO);

  unsigned char *early = kiln_test_make_data(16384, false, 131);
  kiln_digest_t early_digest = put_ok(store, early, 16384, NULL);

  unsigned char *big = kiln_test_make_data(MIB, false, 132);
  kiln_digest_t big_digest;
  kiln_digest_of(big, MIB, &big_digest);
  kiln_digest_t out = {{0}};
  assert_code(kiln_blobstore_put(store, big, MIB, &out, NULL), KILN_STATUS_RESOURCE_EXHAUSTED);
  assert_int_equal(tmp_entries(f->mount), 0);
  assert_false(kiln_blobstore_contains(store, &big_digest, NULL));

  /* Streaming: the failing write reports it, and so does every later call. */
  kiln_blob_writer_t *w = NULL;
  assert_ok(kiln_blob_writer_begin(store, NULL, &w));
  kiln_status_t status = NULL;
  size_t off = 0;
  while (!status && off < MIB) {
    status = kiln_blob_writer_write(w, big + off, 65536);
    off += 65536;
  }
  assert_code(status, KILN_STATUS_RESOURCE_EXHAUSTED);
  assert_int_equal(tmp_entries(f->mount), 0); /* the space is given back at once */
  assert_code(kiln_blob_writer_write(w, big, 10), KILN_STATUS_RESOURCE_EXHAUSTED);
  assert_code(kiln_blob_writer_commit(w, NULL, NULL, NULL, NULL), KILN_STATUS_RESOURCE_EXHAUSTED);

  assert_get_equals(store, &early_digest, early, 16384);
  assert_ok(kiln_blobstore_verify(store, &early_digest, NULL));
  /* The freed space is usable: a 1 MiB compressible blob fits as .zst. */
  kiln_test_fill_compressible(big, MIB, 133);
  kiln_digest_t fits = put_ok(store, big, MIB, NULL);
  assert_stored_as(f->mount, &fits, true);
  assert_get_equals(store, &fits, big, MIB);
  assert_int_equal(tmp_entries(f->mount), 0);
  free(big);
  free(early);
  kiln_blobstore_close(store);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test_setup_teardown(test_known_vectors, setup, teardown),
      cmocka_unit_test_setup_teardown(test_round_trip_sizes, setup, teardown),
      cmocka_unit_test_setup_teardown(test_compression_off_stores_raw, setup, teardown),
      cmocka_unit_test_setup_teardown(test_spilled_blob_is_compressed, setup, teardown),
      cmocka_unit_test_setup_teardown(test_reads_are_at_most_256_kib, setup, teardown),
      cmocka_unit_test_setup_teardown(test_streaming_equals_one_shot, setup, teardown),
      cmocka_unit_test_setup_teardown(test_expected_digest_mismatch, setup, teardown),
      cmocka_unit_test_setup_teardown(test_duplicate_put_is_idempotent, setup, teardown),
      cmocka_unit_test_setup_teardown(test_reader_detects_flipped_byte, setup, teardown),
      cmocka_unit_test_setup_teardown(test_check_from_every_writer, setup, teardown),
      cmocka_unit_test_setup_teardown(test_wrong_check_fails_intact_bytes, setup, teardown),
      cmocka_unit_test_setup_teardown(test_check_detects_flipped_byte, setup, teardown),
      cmocka_unit_test_setup_teardown(test_damaged_zst_is_data_loss, setup, teardown),
      cmocka_unit_test_setup_teardown(test_read_past_end_and_bad_cap, setup, teardown),
      cmocka_unit_test_setup_teardown(test_quarantine, setup, teardown),
      cmocka_unit_test_setup_teardown(test_remove_and_contains, setup, teardown),
      cmocka_unit_test_setup_teardown(test_visit, setup, teardown),
      cmocka_unit_test_setup_teardown(test_open_removes_tmp_leftovers, setup, teardown),
      cmocka_unit_test_setup_teardown(test_abort_removes_tmp, setup, teardown),
      cmocka_unit_test_setup_teardown(test_missing_shard_is_recreated, setup, teardown),
      cmocka_unit_test_setup_teardown(test_open_validates, setup, teardown),
      cmocka_unit_test_setup_teardown(test_concurrent_writers, setup, teardown),
      cmocka_unit_test_setup_teardown(test_disk_full, setup, teardown),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
