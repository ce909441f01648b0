/* Unit tests for cache/cache (the façade over blob store and index).
 *
 * Keys: flag normalization (trim, drop empties, dedupe keeping the first, order
 * kept); the key is deterministic, changes with every part, ignores flag
 * whitespace and repeats, rejects malformed parts, and no flag text can make two
 * different part lists share a key. Artifacts: every record field; hits and
 * misses; get_by_digest (newest row, no hit) and find_page; the job id and source
 * name of the provenance through put, lookup, get_by_digest, find_page and a
 * reopen, replaced with the row like submitter and labels; a replace keeps the pin
 * (and frees the old blob); identical bytes share
 * one blob; get_blob and the streaming reader. Integrity: a flipped byte (raw and
 * .zst) is DATA_LOSS, quarantined with its rows, and the bytes can be stored again;
 * a blob deleted behind the cache's back is a miss that drops the row. Repair at
 * open: orphans, dangling rows (counted per row), strays, tmp/. Verify: clean,
 * corrupt + missing + orphan repaired, dry run, young orphans spared, cancel, and
 * puts that land while it scans. Pin by digest and key. gc: LRU order, pins, open
 * readers, sources after artifacts, target_unreachable, the capacity. Sources:
 * put, get (a deleted blob drops the row), and spooled uploads (chunked, a
 * duplicate keeps the first row, too many / too few bytes, a wrong digest and an
 * abort all leave tmp/ and blobs/ empty).
 * A lookup that fails after reading its row leaves its out-param clear. Four
 * threads on one cache; a put racing gc; and, as root, a full disk (1 MiB tmpfs).
 * Checks: every put (artifact, source, upload) records the XXH3-128 of its bytes,
 * and reads verify it (a wrong recorded check fails intact bytes, naming
 * XXH3-128, and quarantines them; a flipped byte is caught the same way); a cache
 * from before index migration 4 reads its blobs by SHA-256 and records their
 * checks once a read has verified the whole blob; verify stays on SHA-256 (it
 * finds damage whose check was rewritten to match), corrects a wrong check and
 * records a missing one; checks go with their blobs (quarantine, replace, gc).
 *
 * Each test gets a fresh mkdtemp directory and a cache opened on DIR/cache with a
 * fake clock (g_now_ms). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <ftw.h>
#include <limits.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <sys/time.h>
#include <time.h>
#include <unistd.h>

#include "base/alloc.h"
#include "base/digest.h"
#include "base/status.h"
#include "base/time.h"
#include "cache/cache.h"
#include "cache/index.h"
#include "tests/unit/support/testing.h"

#define KIB      1024
#define MIB      (1024 * 1024)
#define COMPILER "kiln-mlir 0.1.0 llvm 22.1.8"
#define HAL      7u
#define BYTECODE ((1u << 16) | 2u)

/* ---- fake clock ---- */

static _Atomic int64_t g_now_ms;

static int64_t fake_now(void) { return atomic_load(&g_now_ms); }

/* ---- fixture ---- */

typedef struct fixture_s {
  char *root;      /* kiln_test_tmpdir, removed in teardown */
  char dir[320];   /* root/cache: the cache directory */
  char mount[320]; /* a tmpfs mounted by the test; "" when none */
  kiln_cache_options_t options;
  kiln_cache_t *cache;
} fixture_t;

static int setup(void **state) {
  fixture_t *f = calloc(1, sizeof *f);
  if (!f) return -1;
  if (!(f->root = kiln_test_tmpdir("kiln-cache"))) {
    free(f);
    return -1;
  }
  snprintf(f->dir, sizeof f->dir, "%s/cache", f->root);
  atomic_store(&g_now_ms, 1700000000000);
  f->options.compression = KILN_BLOB_COMPRESSION_AUTO;
  f->options.now_ms = fake_now;
  kiln_status_t st = kiln_cache_open(f->dir, &f->options, &f->cache, NULL);
  if (st) {
    fprintf(stderr, "setup: %s\n", kiln_status_message(st));
    kiln_status_free(st);
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
  kiln_cache_close(f->cache);
  if (f->mount[0]) umount2(f->mount, MNT_DETACH);
  kiln_test_remove_tree(f->root);
  free(f->root);
  free(f);
  return 0;
}

/* ---- helpers ---- */

#define assert_ok   kiln_test_assert_ok

#define assert_code kiln_test_assert_code

static void digest_hex_of(const void *data, size_t len, char out[KILN_DIGEST_HEX_LEN + 1]) {
  kiln_digest_t d;
  kiln_digest_of(data, len, &d);
  kiln_digest_hex_t hex;
  kiln_digest_to_hex(&d, &hex);
  memcpy(out, hex.text, KILN_DIGEST_HEX_LEN + 1);
}

/* A well-formed "source meaning" digest derived from `seed`. */
static void source_digest(uint64_t seed, char out[KILN_DIGEST_HEX_LEN + 1]) {
  char text[64];
  int n = snprintf(text, sizeof text, "source-%llu", (unsigned long long)seed);
  digest_hex_of(text, (size_t)n, out);
}

/* An artifact to store: its key parts (pointing into the struct, so it must not be
 * copied or moved once initialized), its bytes, its key and digest. */
typedef struct art_s {
  char src[KILN_DIGEST_HEX_LEN + 1];
  char target[32];
  const char *flags[3];
  kiln_cache_key_parts_t parts;
  unsigned char *data;
  size_t len;
  char key[KILN_DIGEST_HEX_LEN + 1];
  char digest[KILN_DIGEST_HEX_LEN + 1];
} art_t;

static void art_init(art_t *a, uint64_t key_seed, size_t len, bool compressible, uint64_t data_seed) {
  memset(a, 0, sizeof *a);
  source_digest(key_seed, a->src);
  snprintf(a->target, sizeof a->target, "vulkan-spirv-%llu", (unsigned long long)key_seed);
  a->flags[0] = "-O2";
  a->flags[1] = "--iree-opt-level=3";
  a->parts = (kiln_cache_key_parts_t){.source_digest = a->src,
                                      .target = a->target,
                                      .flags = a->flags,
                                      .n_flags = 2,
                                      .compiler = COMPILER,
                                      .hal_version = HAL,
                                      .bytecode_version = BYTECODE};
  a->data = kiln_test_make_data(len, compressible, data_seed);
  a->len = len;
  kiln_digest_hex_t key;
  assert_ok(kiln_cache_key_compute(&a->parts, &key));
  memcpy(a->key, key.text, sizeof a->key);
  digest_hex_of(a->data, len, a->digest);
}

/* Recomputes the key after a change to the parts. */
static void art_rekey(art_t *a) {
  kiln_digest_hex_t key;
  assert_ok(kiln_cache_key_compute(&a->parts, &key));
  memcpy(a->key, key.text, sizeof a->key);
}

/* Replaces the bytes (same key parts). */
static void art_set_data(art_t *a, size_t len, bool compressible, uint64_t data_seed) {
  free(a->data);
  a->data = kiln_test_make_data(len, compressible, data_seed);
  a->len = len;
  digest_hex_of(a->data, len, a->digest);
}

static void art_deinit(art_t *a) {
  free(a->data);
  a->data = NULL;
}

static void put_art(kiln_cache_t *cache, const art_t *a) {
  assert_ok(kiln_cache_artifact_put(cache, &a->parts, a->data, a->len, NULL, NULL));
}

static void assert_blob_equals(kiln_cache_t *cache, const char *digest, const void *data, size_t len) {
  void *got = NULL;
  size_t got_len = 0;
  assert_ok(kiln_cache_get_blob(cache, digest, &got, &got_len));
  assert_non_null(got);
  assert_int_equal(got_len, len);
  if (len) assert_memory_equal(got, data, len);
  kiln_free(got);
}

static void assert_lookup_digest(kiln_cache_t *cache, const char *key, const char *digest) {
  kiln_index_artifact_t rec;
  assert_ok(kiln_cache_artifact_lookup(cache, key, &rec));
  assert_string_equal(rec.artifact_digest, digest);
  kiln_index_artifact_deinit(&rec);
}

static void assert_lookup_missing(kiln_cache_t *cache, const char *key) {
  kiln_index_artifact_t rec;
  assert_code(kiln_cache_artifact_lookup(cache, key, &rec), KILN_STATUS_NOT_FOUND);
  assert_null(rec.target);
}

static bool exists(const char *path) {
  struct stat st;
  return lstat(path, &st) == 0;
}

/* Finds the blob file of `digest` (raw or .zst). */
static bool blob_file(const char *dir, const char *digest, char *out, size_t cap) {
  for (int zst = 0; zst <= 1; zst++) {
    snprintf(out, cap, "%s/blobs/%.2s/%s%s", dir, digest, digest, zst ? ".zst" : "");
    if (exists(out)) return true;
  }
  return false;
}

static bool has_blob_file(const char *dir, const char *digest) {
  char path[PATH_MAX];
  return blob_file(dir, digest, path, sizeof path);
}

static off_t file_size(const char *path) {
  struct stat st;
  assert_int_equal(stat(path, &st), 0);
  return st.st_size;
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

static void write_file(const char *path, const void *data, size_t len) {
  int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC, 0600);
  assert_true(fd >= 0);
  assert_int_equal(write(fd, data, len), (ssize_t)len);
  close(fd);
}

/* Sets a file's mtime `age_s` seconds into the past. */
static void age_file(const char *path, int age_s) {
  struct timeval tv[2];
  gettimeofday(&tv[0], NULL);
  tv[0].tv_sec -= age_s;
  tv[1] = tv[0];
  assert_int_equal(utimes(path, tv), 0);
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

static size_t subdir_entries(const char *dir, const char *sub) {
  char path[PATH_MAX];
  snprintf(path, sizeof path, "%s/%s", dir, sub);
  return count_entries(path);
}

/* Regular files anywhere under DIR/blobs. */
static size_t g_count_files;
static int count_file(const char *path, const struct stat *st, int flag, struct FTW *ftw) {
  (void)path;
  (void)ftw;
  if (flag == FTW_F && S_ISREG(st->st_mode)) g_count_files++;
  return 0;
}
static size_t blob_files(const char *dir) {
  char path[PATH_MAX];
  snprintf(path, sizeof path, "%s/blobs", dir);
  g_count_files = 0;
  nftw(path, count_file, 16, FTW_PHYS);
  return g_count_files;
}

/* Writes `data` as a blob file with a valid name that no row names. Returns its
 * path in `out`. */
static void make_orphan(const char *dir, const void *data, size_t len, char *digest_out, char *out,
                        size_t cap) {
  digest_hex_of(data, len, digest_out);
  snprintf(out, cap, "%s/blobs/%.2s/%s", dir, digest_out, digest_out);
  write_file(out, data, len);
}

static kiln_cache_stats_t stats_of(kiln_cache_t *cache) {
  kiln_cache_stats_t s;
  assert_ok(kiln_cache_stats(cache, &s));
  return s;
}

static void reopen(fixture_t *f, kiln_cache_repair_t *out_repair) {
  kiln_cache_close(f->cache);
  f->cache = NULL;
  assert_ok(kiln_cache_open(f->dir, &f->options, &f->cache, out_repair));
}

static size_t count_problems(const kiln_cache_verify_report_t *r, kiln_cache_problem_kind_t kind,
                             const char *digest) {
  size_t n = 0;
  for (size_t i = 0; i < r->n_problems; i++) {
    if (r->problems[i].kind == kind && (!digest || strcmp(r->problems[i].digest, digest) == 0)) {
      n++;
    }
  }
  return n;
}

static void print_problems(const kiln_cache_verify_report_t *r) {
  for (size_t i = 0; i < r->n_problems; i++) {
    fprintf(stderr, "  problem kind=%d digest=%s repaired=%d: %s\n", (int)r->problems[i].kind,
            r->problems[i].digest, (int)r->problems[i].repaired, r->problems[i].detail);
  }
}

/* Content whose digest falls in shard `shard` (its first byte). */
static void content_in_shard(unsigned shard, uint64_t salt, char *out, size_t cap, size_t *out_len) {
  for (unsigned i = 0;; i++) {
    int n = snprintf(out, cap, "shard-probe-%llu-%u", (unsigned long long)salt, i);
    kiln_digest_t d;
    kiln_digest_of(out, (size_t)n, &d);
    if (d.bytes[0] == shard) {
      *out_len = (size_t)n;
      return;
    }
  }
}

/* ---- blob checks ---- */

/* Runs `sql` on the cache's index with the sqlite3 shell, as an operator (or an
 * older kiln) could. The cache's pooled connections hold no transaction between
 * operations, so it may stay open. */
static void index_shell(const fixture_t *f, const char *sql) {
  char script[PATH_MAX], cmd[3 * PATH_MAX];
  snprintf(script, sizeof script, "%s/shell.sql", f->root);
  write_file(script, sql, strlen(sql));
  snprintf(cmd, sizeof cmd, "sqlite3 -bail '%s/index.db' < '%s'", f->dir, script);
  assert_int_equal(system(cmd), 0);
}

/* The check recorded for blob `digest`, read through a connection of our own;
 * false when there is none. */
static bool recorded_check(const fixture_t *f, const char *digest, kiln_blob_check_t *out) {
  char path[PATH_MAX];
  snprintf(path, sizeof path, "%s/index.db", f->dir);
  kiln_index_t *index = NULL;
  assert_ok(kiln_index_open(path, &index));
  kiln_status_t st = kiln_index_blob_check_get(index, digest, out->bytes);
  kiln_index_close(index);
  if (kiln_status_code(st) == KILN_STATUS_NOT_FOUND) {
    kiln_status_free(st);
    return false;
  }
  assert_ok(st);
  return true;
}

static void set_check(const fixture_t *f, const char *digest, const kiln_blob_check_t *check) {
  char path[PATH_MAX];
  snprintf(path, sizeof path, "%s/index.db", f->dir);
  kiln_index_t *index = NULL;
  assert_ok(kiln_index_open(path, &index));
  assert_ok(kiln_index_blob_check_put(index, digest, check->bytes));
  kiln_index_close(index);
}

/* Asserts that the check of `len` bytes at `data` is recorded for `digest`. */
static void assert_check_recorded(const fixture_t *f, const char *digest, const void *data, size_t len) {
  kiln_blob_check_t got, want;
  kiln_blob_check_of(data, len, &want);
  if (!recorded_check(f, digest, &got)) fail_msg("no check recorded for blob %s", digest);
  assert_memory_equal(got.bytes, want.bytes, sizeof want.bytes);
}

static void assert_no_check(const fixture_t *f, const char *digest) {
  kiln_blob_check_t got;
  if (recorded_check(f, digest, &got)) fail_msg("blob %s still has a check recorded", digest);
}

/* Reads blob `digest` whole; asserts DATA_LOSS naming `hash` and the digest. */
static void assert_read_fails_naming(kiln_cache_t *cache, const char *digest, const char *hash) {
  void *p = NULL;
  size_t len = 0;
  kiln_status_t st = kiln_cache_get_blob(cache, digest, &p, &len);
  assert_int_equal(kiln_status_code(st), KILN_STATUS_DATA_LOSS);
  assert_null(p);
  if (!strstr(kiln_status_message(st), hash) || !strstr(kiln_status_message(st), digest)) {
    fail_msg("want a message naming %s and %s, got: %s", hash, digest, kiln_status_message(st));
  }
  kiln_status_free(st);
}

/* ---- keys ---- */

static void assert_normalized(const char *const *flags, size_t n, const char *want) {
  char *got = kiln_cache_flags_normalize(flags, n);
  assert_non_null(got);
  assert_string_equal(got, want);
  kiln_free(got);
}

/* The stored form of base/flags.h's one rule, joined by newlines. */
static void test_flags_normalize(void **state) {
  (void)state;
  const char *const messy[] = {"  -O2 ", "", "\t-g\n", "-O2", "   ", "-DFOO=1", "-g", "\r\n"};
  assert_normalized(messy, 8, "-DFOO=1\n-O2\n-g");
  const char *const order[] = {"-b", "-a", "-c", "-a"};
  assert_normalized(order, 4, "-a\n-b\n-c");
  assert_normalized(NULL, 0, "");
  const char *const empties[] = {"", " ", "\t"};
  assert_normalized(empties, 3, "");
  /* Inner whitespace is part of the name; the trimmed repeat of a name wins. */
  const char *const inner[] = {"-D X=1", "-D  X=1", "-D X=2 "};
  assert_normalized(inner, 3, "-D  X=1\n-D X=2");
}

static kiln_cache_key_parts_t base_parts(const char *src, const char *const *flags, size_t n) {
  return (kiln_cache_key_parts_t){.source_digest = src,
                                  .target = "vulkan-spirv",
                                  .flags = flags,
                                  .n_flags = n,
                                  .compiler = COMPILER,
                                  .hal_version = HAL,
                                  .bytecode_version = BYTECODE};
}

static void key_of(const kiln_cache_key_parts_t *parts, char out[KILN_DIGEST_HEX_LEN + 1]) {
  kiln_digest_hex_t key;
  memset(&key, 0, sizeof key);
  assert_ok(kiln_cache_key_compute(parts, &key));
  assert_true(kiln_digest_is_valid_hex(key.text));
  memcpy(out, key.text, KILN_DIGEST_HEX_LEN + 1);
}

/* The encoding is a format: every stored artifact is named by it. These keys were
 * computed by the first encoder; a change that moves them must also change the
 * "kiln-cache-key/N" version line (and so miss every old entry on purpose). */
static void test_key_pinned(void **state) {
  (void)state;
  char src[65], key[65];
  source_digest(1, src);
  key_of(&(kiln_cache_key_parts_t){.source_digest = src,
                                   .target = "vulkan-spirv",
                                   .compiler = "kiln-compiler 0.1.0 llvm 22.1.0",
                                   .hal_version = 7,
                                   .bytecode_version = (1u << 16) | 2u},
         key);
  assert_string_equal(key, "d718570ff65bdea51b8c82ff82ca46c2ec8bb79416645d77152cdea39609e4d2");
  const char *const flags[] = {" --z=1", "--a=2 ", "--z=3", "", "--iree-opt-level=O3"};
  key_of(&(kiln_cache_key_parts_t){.source_digest = src,
                                   .target = "cuda-sm_120",
                                   .flags = flags,
                                   .n_flags = 5,
                                   .compiler = "c",
                                   .hal_version = 4294967295u,
                                   .bytecode_version = 0xffffffffu},
         key);
  assert_string_equal(key, "900d4791f2e0436490c52296574d855430b88724590b50d5978957f075d4f209");
  /* Longer than the encoder's stack buffer. */
  char long_flag[2005];
  memcpy(long_flag, "--x=", 4);
  memset(long_flag + 4, 'a', 2000);
  long_flag[2004] = '\0';
  const char *const long_flags[] = {long_flag};
  key_of(&(kiln_cache_key_parts_t){.source_digest = src,
                                   .target = "vulkan-spirv",
                                   .flags = long_flags,
                                   .n_flags = 1,
                                   .compiler = "c",
                                   .hal_version = 7,
                                   .bytecode_version = (1u << 16) | 2u},
         key);
  assert_string_equal(key, "3c9749f4d8f404fa367a7398aedb7d4a43c7e9b4d14037679a5ca772cc7419a0");
}

static void test_key_deterministic_and_sensitive(void **state) {
  (void)state;
  char src[65], src2[65];
  source_digest(1, src);
  source_digest(2, src2);
  const char *const flags[] = {"-O2", "-g"};
  const char *const flags_b[] = {"-O3", "-g"};
  const char *const flags_c[] = {"-O2", "-G"};
  const char *const swapped[] = {"-g", "-O2"};
  const char *const extra[] = {"-O2", "-g", "-v"};
  enum { N = 13 };
  char keys[N][65];
  kiln_cache_key_parts_t p = base_parts(src, flags, 2);
  key_of(&p, keys[0]);
  char again[65];
  key_of(&p, again);
  assert_string_equal(keys[0], again);

  kiln_cache_key_parts_t v;
  v = p, v.source_digest = src2, key_of(&v, keys[1]);
  v = p, v.target = "cuda-sm80", key_of(&v, keys[2]);
  v = p, v.flags = flags_b, key_of(&v, keys[3]);
  v = p, v.flags = flags_c, key_of(&v, keys[4]);
  v = p, v.flags = swapped, key_of(&v, keys[5]);
  /* Order is not part of a request (base/flags.h): swapped flags share the key. */
  assert_string_equal(keys[5], keys[0]);
  v = p, v.flags = flags_b, v.target = "rocm-gfx950", key_of(&v, keys[5]);
  v = p, v.flags = extra, v.n_flags = 3, key_of(&v, keys[6]);
  v = p, v.n_flags = 0, key_of(&v, keys[7]);
  v = p, v.compiler = "kiln-mlir 0.1.1 llvm 22.1.8", key_of(&v, keys[8]);
  v = p, v.hal_version = 8, key_of(&v, keys[9]);
  v = p, v.bytecode_version = (2u << 16) | 2u, key_of(&v, keys[10]);
  v = p, v.bytecode_version = (1u << 16) | 3u, key_of(&v, keys[11]);
  v = p, v.n_flags = 1, key_of(&v, keys[12]);
  for (int i = 0; i < N; i++) {
    for (int j = i + 1; j < N; j++) {
      if (strcmp(keys[i], keys[j]) == 0) fail_msg("variants %d and %d share a key", i, j);
    }
  }
}

static void test_key_normalizes_flags(void **state) {
  (void)state;
  char src[65];
  source_digest(3, src);
  const char *const clean[] = {"-O2", "-g"};
  const char *const messy[] = {" -O2", "", "-g\t", "-O2", "  ", "-g "};
  char a[65], b[65];
  kiln_cache_key_parts_t p = base_parts(src, clean, 2);
  key_of(&p, a);
  p = base_parts(src, messy, 6);
  key_of(&p, b);
  assert_string_equal(a, b);
  /* No flags and only empty flags are the same request. */
  const char *const blank[] = {"", " "};
  p = base_parts(src, NULL, 0);
  key_of(&p, a);
  p = base_parts(src, blank, 2);
  key_of(&p, b);
  assert_string_equal(a, b);
}

static void test_key_rejects_malformed(void **state) {
  (void)state;
  char src[65];
  source_digest(4, src);
  char upper[65];
  memcpy(upper, src, sizeof upper);
  for (char *c = upper; *c; c++) {
    if (*c >= 'a' && *c <= 'f') *c = (char)(*c - 'a' + 'A');
  }
  kiln_digest_hex_t key;
  kiln_cache_key_parts_t p = base_parts(src, NULL, 0);
  const char *bad_sources[] = {NULL, "", "abc", upper, "sha256:0123"};
  for (size_t i = 0; i < sizeof bad_sources / sizeof bad_sources[0]; i++) {
    kiln_cache_key_parts_t v = p;
    v.source_digest = bad_sources[i];
    assert_code(kiln_cache_key_compute(&v, &key), KILN_STATUS_INVALID_ARGUMENT);
  }
  const char *bad_targets[] = {NULL, "", "vulkan\nspirv"};
  for (size_t i = 0; i < sizeof bad_targets / sizeof bad_targets[0]; i++) {
    kiln_cache_key_parts_t v = p;
    v.target = bad_targets[i];
    assert_code(kiln_cache_key_compute(&v, &key), KILN_STATUS_INVALID_ARGUMENT);
  }
  const char *bad_compilers[] = {NULL, "", "kiln\nhal:7"};
  for (size_t i = 0; i < sizeof bad_compilers / sizeof bad_compilers[0]; i++) {
    kiln_cache_key_parts_t v = p;
    v.compiler = bad_compilers[i];
    assert_code(kiln_cache_key_compute(&v, &key), KILN_STATUS_INVALID_ARGUMENT);
  }
}

/* The keys of many targets at once are each target's own key; one malformed
 * target refuses the lot. */
static void test_keys_of_many_targets(void **state) {
  (void)state;
  char src[65];
  source_digest(5, src);
  const char *const flags[] = {"--iree-opt-level=O3", " -g"};
  kiln_cache_key_parts_t p = base_parts(src, flags, 2);
  p.target = NULL; /* not read */
  const char *const targets[] = {"vulkan-spirv", "cuda-sm_120", "rocm-gfx950"};
  kiln_digest_hex_t keys[3];
  assert_ok(kiln_cache_keys_compute(&p, targets, 3, keys));
  for (size_t i = 0; i < 3; i++) {
    kiln_cache_key_parts_t v = p;
    v.target = targets[i];
    char one[65];
    key_of(&v, one);
    assert_string_equal(keys[i].text, one);
  }
  assert_ok(kiln_cache_keys_compute(&p, NULL, 0, keys)); /* nothing to do */
  /* Refused: nothing is written. */
  memset(keys, 'x', sizeof keys);
  const char *const bad[] = {"vulkan-spirv", "cuda\nsm_120"};
  assert_code(kiln_cache_keys_compute(&p, bad, 2, keys), KILN_STATUS_INVALID_ARGUMENT);
  kiln_cache_key_parts_t v = p;
  v.source_digest = "abc";
  assert_code(kiln_cache_keys_compute(&v, targets, 3, keys), KILN_STATUS_INVALID_ARGUMENT);
  v = p;
  v.compiler = "";
  assert_code(kiln_cache_keys_compute(&v, targets, 3, keys), KILN_STATUS_INVALID_ARGUMENT);
  for (size_t i = 0; i < sizeof keys; i++) assert_int_equal(((const char *)keys)[i], 'x');
}

/* Keys of parts that must differ: either both compute and differ, or the second
 * (the one with the suspicious flag text) is rejected as INVALID_ARGUMENT. */
static void assert_keys_differ(const kiln_cache_key_parts_t *a, const kiln_cache_key_parts_t *b,
                               const char *what) {
  char ka[65];
  key_of(a, ka);
  kiln_digest_hex_t kb;
  kiln_status_t st = kiln_cache_key_compute(b, &kb);
  if (kiln_status_code(st) == KILN_STATUS_INVALID_ARGUMENT) {
    kiln_status_free(st);
    return;
  }
  assert_ok(st);
  if (strcmp(ka, kb.text) == 0) fail_msg("%s: two different part lists share key %s", what, ka);
}

static void test_key_encoding_unambiguous(void **state) {
  (void)state;
  char src[65], src2[65];
  source_digest(5, src);
  source_digest(6, src2);

  /* A flag that spells the next field cannot move text between fields. */
  const char *const x[] = {"-x"};
  const char *const x_target[] = {"-x\ntarget:12:cuda-sm80-xx"};
  kiln_cache_key_parts_t a = base_parts(src, x, 1);
  a.target = "cuda-sm80-xx";
  kiln_cache_key_parts_t b = base_parts(src, x_target, 1);
  assert_keys_differ(&a, &b, "flag spelling the target field");

  const char *const x_compiler[] = {"-x\ncompiler:3:abc"};
  a = base_parts(src, x, 1);
  a.compiler = "abc";
  b = base_parts(src, x_compiler, 1);
  assert_keys_differ(&a, &b, "flag spelling the compiler field");

  const char *const x_hal[] = {"-x\nhal:8"};
  a = base_parts(src, x, 1);
  a.hal_version = 8;
  b = base_parts(src, x_hal, 1);
  assert_keys_differ(&a, &b, "flag spelling the hal field");

  /* Target text ending like a flags field. */
  a = base_parts(src, x, 1);
  a.target = "vulkan";
  b = base_parts(src, NULL, 0);
  b.target = "vulkan\nflags:2:-x";
  assert_keys_differ(&a, &b, "target spelling the flags field");

  /* Length prefixes mean "a" + "bc" != "ab" + "c" across fields. */
  a = base_parts(src, NULL, 0);
  a.target = "ab";
  a.compiler = "c";
  b = base_parts(src, NULL, 0);
  b.target = "a";
  b.compiler = "bc";
  assert_keys_differ(&a, &b, "text shifted between target and compiler");

  /* Within the flags: one flag holding a newline is not two flags. The flags are
   * joined with '\n' before hashing, so these collide unless such a flag is
   * rejected or each flag is encoded on its own. */
  const char *const two[] = {"-x", "target:cuda"};
  const char *const one[] = {"-x\ntarget:cuda"};
  a = base_parts(src, two, 2);
  b = base_parts(src, one, 1);
  assert_keys_differ(&a, &b, "flags {\"-x\", \"target:cuda\"} vs {\"-x\\ntarget:cuda\"}");
}

/* ---- artifacts ---- */

static void test_put_record_fields(void **state) {
  fixture_t *f = *state;
  char src[65];
  source_digest(10, src);
  const char *const flags[] = {" -O2 ", "-g", "", "-O2"};
  kiln_cache_key_parts_t parts = base_parts(src, flags, 4);
  unsigned char *data = kiln_test_make_data(3000, false, 10);
  char digest[65], key[65];
  digest_hex_of(data, 3000, digest);
  key_of(&parts, key);
  kiln_index_label_t labels[] = {{(char *)"team", (char *)"ml"}, {(char *)"arch", (char *)"gfx1100"}};
  kiln_cache_provenance_t prov = {.submitter = "alice@host",
                                  .labels = labels,
                                  .n_labels = 2,
                                  .job_id = "j-0123",
                                  .source_name = "resnet.mlir"};
  atomic_store(&g_now_ms, 1700000001234);
  kiln_index_artifact_t rec;
  assert_ok(kiln_cache_artifact_put(f->cache, &parts, data, 3000, &prov, &rec));
  assert_string_equal(rec.cache_key, key);
  assert_string_equal(rec.artifact_digest, digest);
  assert_string_equal(rec.source_digest, src);
  assert_string_equal(rec.target, "vulkan-spirv");
  assert_string_equal(rec.flags, "-O2\n-g");
  assert_string_equal(rec.compiler, COMPILER);
  assert_int_equal(rec.hal_version, HAL);
  assert_int_equal(rec.bytecode_version, BYTECODE);
  assert_int_equal(rec.size, 3000);
  char path[PATH_MAX];
  assert_true(blob_file(f->dir, digest, path, sizeof path));
  assert_int_equal(rec.stored_size, (uint64_t)file_size(path));
  assert_string_equal(rec.submitter, "alice@host");
  assert_string_equal(rec.job_id, "j-0123");
  assert_string_equal(rec.source_name, "resnet.mlir");
  assert_int_equal(rec.created_ms, 1700000001234);
  assert_int_equal(rec.last_access_ms, 1700000001234);
  assert_int_equal(rec.hits, 0);
  assert_false(rec.pinned);
  assert_int_equal(rec.n_labels, 2);
  assert_string_equal(rec.labels[0].key, "arch");
  assert_string_equal(rec.labels[0].value, "gfx1100");
  assert_string_equal(rec.labels[1].key, "team");
  assert_string_equal(rec.labels[1].value, "ml");
  kiln_index_artifact_deinit(&rec);

  /* Lookup returns the same row. */
  atomic_store(&g_now_ms, 1700000005000);
  assert_ok(kiln_cache_artifact_lookup(f->cache, key, &rec));
  assert_string_equal(rec.artifact_digest, digest);
  assert_string_equal(rec.flags, "-O2\n-g");
  assert_string_equal(rec.submitter, "alice@host");
  assert_string_equal(rec.job_id, "j-0123");
  assert_string_equal(rec.source_name, "resnet.mlir");
  assert_int_equal(rec.n_labels, 2);
  assert_int_equal(rec.created_ms, 1700000001234);
  assert_int_equal(rec.last_access_ms, 1700000005000);
  kiln_index_artifact_deinit(&rec);

  /* No provenance and no record: fine too. A compressible megabyte is stored as
   * .zst with a smaller stored size. */
  art_t big;
  art_init(&big, 11, MIB, true, 11);
  assert_ok(kiln_cache_artifact_put(f->cache, &big.parts, big.data, big.len, NULL, &rec));
  assert_int_equal(rec.size, MIB);
  assert_null(rec.submitter);
  assert_string_equal(rec.job_id, "");
  assert_string_equal(rec.source_name, "");
  assert_int_equal(rec.n_labels, 0);
  assert_true(blob_file(f->dir, big.digest, path, sizeof path));
  assert_non_null(strstr(path, ".zst"));
  assert_int_equal(rec.stored_size, (uint64_t)file_size(path));
  assert_true(rec.stored_size < rec.size);
  kiln_index_artifact_deinit(&rec);
  assert_blob_equals(f->cache, big.digest, big.data, big.len);
  art_deinit(&big);

  /* A malformed part stores nothing. */
  parts.target = "";
  assert_code(kiln_cache_artifact_put(f->cache, &parts, data, 3000, NULL, &rec),
              KILN_STATUS_INVALID_ARGUMENT);
  assert_null(rec.target);
  kiln_cache_stats_t s = stats_of(f->cache);
  assert_int_equal(s.totals.artifacts, 2);
  free(data);
}

static void test_lookup_counts_hits_and_misses(void **state) {
  fixture_t *f = *state;
  art_t a;
  art_init(&a, 20, 2000, false, 20);
  put_art(f->cache, &a);
  kiln_index_artifact_t rec;
  for (uint64_t i = 1; i <= 3; i++) {
    atomic_store(&g_now_ms, 1700000010000 + (int64_t)i);
    assert_ok(kiln_cache_artifact_lookup(f->cache, a.key, &rec));
    assert_int_equal(rec.hits, i);
    assert_int_equal(rec.last_access_ms, 1700000010000 + (int64_t)i);
    kiln_index_artifact_deinit(&rec);
  }
  char unknown[65];
  source_digest(999, unknown);
  assert_lookup_missing(f->cache, unknown);
  assert_lookup_missing(f->cache, unknown);
  assert_code(kiln_cache_artifact_lookup(f->cache, "not-a-key", &rec), KILN_STATUS_INVALID_ARGUMENT);
  assert_blob_equals(f->cache, a.digest, a.data, a.len);
  kiln_cache_stats_t s = stats_of(f->cache);
  assert_int_equal(s.hits, 3);
  assert_int_equal(s.misses, 2);
  assert_int_equal(s.totals.hits, 3);
  assert_int_equal(s.totals.artifacts, 1);
  assert_int_equal(s.bytes_served, a.len);
  assert_int_equal(s.quarantined, 0);
  assert_int_equal(s.schema_version, kiln_index_latest_schema_version());
  art_deinit(&a);
}

static void test_put_same_key_replaces_and_keeps_pin(void **state) {
  fixture_t *f = *state;
  art_t a;
  art_init(&a, 30, 1500, false, 30);
  put_art(f->cache, &a);
  size_t n = 0;
  assert_ok(kiln_cache_pin(f->cache, a.key, true, &n));
  assert_int_equal(n, 1);
  kiln_index_artifact_t rec;
  assert_ok(kiln_cache_artifact_lookup(f->cache, a.key, &rec));
  kiln_index_artifact_deinit(&rec);

  art_set_data(&a, 1700, false, 31);
  assert_ok(kiln_cache_artifact_put(f->cache, &a.parts, a.data, a.len, NULL, &rec));
  assert_string_equal(rec.artifact_digest, a.digest);
  assert_int_equal(rec.size, 1700);
  assert_true(rec.pinned);
  kiln_index_artifact_deinit(&rec);
  assert_ok(kiln_cache_artifact_lookup(f->cache, a.key, &rec));
  assert_string_equal(rec.artifact_digest, a.digest);
  assert_true(rec.pinned);
  kiln_index_artifact_deinit(&rec);
  assert_blob_equals(f->cache, a.digest, a.data, a.len);
  kiln_cache_stats_t s = stats_of(f->cache);
  assert_int_equal(s.totals.artifacts, 1);
  assert_int_equal(s.totals.pinned, 1);
  art_deinit(&a);
}

/* kiln.proto's Provenance.job_id and source_name: kept with the row through every
 * read and a reopen; a put under the same key replaces them as it replaces
 * submitter and labels (the row describes its latest compile), keeping the pin. */
static void test_put_provenance_job_and_source_name(void **state) {
  fixture_t *f = *state;
  art_t a;
  art_init(&a, 33, 2000, false, 33);
  kiln_index_label_t labels[] = {{(char *)"team", (char *)"ml"}};
  kiln_cache_provenance_t first = {.submitter = "alice",
                                   .labels = labels,
                                   .n_labels = 1,
                                   .job_id = "job-first",
                                   .source_name = "first.mlir"};
  assert_ok(kiln_cache_artifact_put(f->cache, &a.parts, a.data, a.len, &first, NULL));
  assert_ok(kiln_cache_pin(f->cache, a.key, true, NULL));

  reopen(f, NULL);
  kiln_index_artifact_t rec;
  assert_ok(kiln_cache_artifact_lookup(f->cache, a.key, &rec));
  assert_string_equal(rec.job_id, "job-first");
  assert_string_equal(rec.source_name, "first.mlir");
  kiln_index_artifact_deinit(&rec);
  assert_ok(kiln_cache_artifact_get_by_digest(f->cache, a.digest, &rec));
  assert_string_equal(rec.job_id, "job-first");
  assert_string_equal(rec.source_name, "first.mlir");
  kiln_index_artifact_deinit(&rec);
  kiln_index_artifact_t *rows = NULL;
  size_t n = 0;
  kiln_index_page_query_t q = {.source_digest = a.src};
  assert_ok(kiln_cache_artifact_find_page(f->cache, &q, &rows, &n));
  assert_int_equal(n, 1);
  assert_string_equal(rows[0].job_id, "job-first");
  assert_string_equal(rows[0].source_name, "first.mlir");
  kiln_index_artifacts_free(rows, n);

  /* Rebuilt under the same key by another job: its provenance, the old pin. */
  art_set_data(&a, 2100, false, 34);
  kiln_cache_provenance_t second = {.submitter = "bob", .job_id = "job-second", .source_name = "second.mlir"};
  atomic_fetch_add(&g_now_ms, 10);
  assert_ok(kiln_cache_artifact_put(f->cache, &a.parts, a.data, a.len, &second, &rec));
  assert_string_equal(rec.submitter, "bob");
  assert_string_equal(rec.job_id, "job-second");
  assert_string_equal(rec.source_name, "second.mlir");
  assert_int_equal(rec.n_labels, 0);
  assert_true(rec.pinned);
  kiln_index_artifact_deinit(&rec);
  reopen(f, NULL);
  assert_ok(kiln_cache_artifact_get_by_digest(f->cache, a.digest, &rec));
  assert_string_equal(rec.job_id, "job-second");
  assert_string_equal(rec.source_name, "second.mlir");
  kiln_index_artifact_deinit(&rec);

  /* Without provenance (an import) both read "", as submitter reads NULL. */
  atomic_fetch_add(&g_now_ms, 10);
  assert_ok(kiln_cache_artifact_put(f->cache, &a.parts, a.data, a.len, NULL, &rec));
  assert_null(rec.submitter);
  assert_string_equal(rec.job_id, "");
  assert_string_equal(rec.source_name, "");
  kiln_index_artifact_deinit(&rec);
  art_deinit(&a);
}

/* A replaced artifact's old blob is named by no row; it must not stay on disk
 * where gc (which works from rows) can never reclaim it. */
static void test_put_replace_frees_old_blob(void **state) {
  fixture_t *f = *state;
  art_t a;
  art_init(&a, 35, 5000, false, 35);
  put_art(f->cache, &a);
  char old_digest[65];
  memcpy(old_digest, a.digest, sizeof old_digest);
  art_set_data(&a, 5000, false, 36);
  put_art(f->cache, &a);
  assert_true(has_blob_file(f->dir, a.digest));
  kiln_cache_stats_t s = stats_of(f->cache);
  assert_int_equal(s.totals.artifacts, 1);
  char key[65];
  memcpy(key, a.key, sizeof key);
  art_deinit(&a);
  if (has_blob_file(f->dir, old_digest)) {
    fail_msg(
        "after replacing cache key %s the old blob %s is still on disk (%zu blob files, "
        "index counts %llu stored bytes): an orphan nothing but a restart removes",
        key, old_digest, blob_files(f->dir), (unsigned long long)s.totals.artifact_stored_bytes);
  }
}

static void test_identical_bytes_share_one_blob(void **state) {
  fixture_t *f = *state;
  art_t a, b;
  art_init(&a, 40, 6000, false, 40);
  art_init(&b, 41, 6000, false, 40); /* other key, same bytes */
  assert_string_not_equal(a.key, b.key);
  assert_string_equal(a.digest, b.digest);
  kiln_index_artifact_t ra, rb;
  assert_ok(kiln_cache_artifact_put(f->cache, &a.parts, a.data, a.len, NULL, &ra));
  assert_ok(kiln_cache_artifact_put(f->cache, &b.parts, b.data, b.len, NULL, &rb));
  assert_string_equal(ra.artifact_digest, rb.artifact_digest);
  assert_int_equal(ra.stored_size, rb.stored_size);
  assert_int_equal(blob_files(f->dir), 1);
  kiln_cache_stats_t s = stats_of(f->cache);
  assert_int_equal(s.totals.artifacts, 2);
  assert_int_equal(s.totals.artifact_bytes, 12000);
  assert_int_equal(s.totals.artifact_stored_bytes, ra.stored_size);
  kiln_index_artifact_deinit(&ra);
  kiln_index_artifact_deinit(&rb);
  assert_lookup_digest(f->cache, a.key, a.digest);
  assert_lookup_digest(f->cache, b.key, a.digest);
  assert_blob_equals(f->cache, a.digest, a.data, a.len);
  art_deinit(&a);
  art_deinit(&b);
}

static void test_get_blob_and_reader(void **state) {
  fixture_t *f = *state;
  art_t raw, zst, empty;
  art_init(&raw, 50, 200 * KIB, false, 50);
  art_init(&zst, 51, 300 * KIB, true, 51);
  art_init(&empty, 52, 0, false, 52);
  put_art(f->cache, &raw);
  put_art(f->cache, &zst);
  put_art(f->cache, &empty);
  assert_blob_equals(f->cache, raw.digest, raw.data, raw.len);
  assert_blob_equals(f->cache, zst.digest, zst.data, zst.len);
  assert_blob_equals(f->cache, empty.digest, empty.data, 0);

  /* Streaming with an odd buffer size gives the same bytes. */
  kiln_cache_reader_t *r = NULL;
  assert_ok(kiln_cache_open_blob(f->cache, zst.digest, &r));
  assert_int_equal(kiln_cache_reader_size(r), zst.len);
  unsigned char *got = malloc(zst.len + 1);
  size_t total = 0, n = 0;
  unsigned char chunk[777];
  do {
    assert_ok(kiln_cache_reader_read(r, chunk, sizeof chunk, &n));
    assert_true(total + n <= zst.len);
    memcpy(got + total, chunk, n);
    total += n;
  } while (n > 0);
  kiln_cache_reader_close(r);
  assert_int_equal(total, zst.len);
  assert_memory_equal(got, zst.data, zst.len);
  free(got);

  char unknown[65];
  source_digest(12345, unknown);
  void *p = (void *)1;
  size_t len = 7;
  assert_code(kiln_cache_get_blob(f->cache, unknown, &p, &len), KILN_STATUS_NOT_FOUND);
  assert_null(p);
  assert_code(kiln_cache_open_blob(f->cache, unknown, &r), KILN_STATUS_NOT_FOUND);
  assert_null(r);
  assert_code(kiln_cache_open_blob(f->cache, "zz", &r), KILN_STATUS_INVALID_ARGUMENT);
  art_deinit(&raw);
  art_deinit(&zst);
  art_deinit(&empty);
}

/* ---- integrity ---- */

static void test_corrupt_blob_is_quarantined(void **state) {
  fixture_t *f = *state;
  /* A raw blob shared by two keys, and a .zst blob. */
  art_t raw, raw2, zst;
  art_init(&raw, 60, 3000, false, 60);
  art_init(&raw2, 61, 3000, false, 60);
  art_init(&zst, 62, 256 * KIB, true, 62);
  put_art(f->cache, &raw);
  put_art(f->cache, &raw2);
  put_art(f->cache, &zst);

  char path[PATH_MAX];
  assert_true(blob_file(f->dir, raw.digest, path, sizeof path));
  assert_null(strstr(path, ".zst"));
  flip_byte(path, 1234);
  void *p = NULL;
  size_t len = 0;
  assert_code(kiln_cache_get_blob(f->cache, raw.digest, &p, &len), KILN_STATUS_DATA_LOSS);
  assert_null(p);
  assert_lookup_missing(f->cache, raw.key);
  assert_lookup_missing(f->cache, raw2.key);
  assert_false(has_blob_file(f->dir, raw.digest));
  char qpath[PATH_MAX];
  snprintf(qpath, sizeof qpath, "%s/quarantine/%s", f->dir, raw.digest);
  assert_true(exists(qpath));
  kiln_cache_stats_t s = stats_of(f->cache);
  assert_int_equal(s.quarantined, 1);
  assert_int_equal(s.totals.quarantined, 1);
  assert_int_equal(s.totals.artifacts, 1);
  /* Never served again while it is gone. */
  assert_code(kiln_cache_get_blob(f->cache, raw.digest, &p, &len), KILN_STATUS_NOT_FOUND);

  /* The .zst one through a streaming reader: DATA_LOSS at the latest at the end. */
  assert_true(blob_file(f->dir, zst.digest, path, sizeof path));
  assert_non_null(strstr(path, ".zst"));
  flip_byte(path, file_size(path) / 2);
  kiln_cache_reader_t *r = NULL;
  kiln_status_t st = kiln_cache_open_blob(f->cache, zst.digest, &r);
  if (!st) {
    unsigned char *buf = malloc(64 * KIB);
    size_t n = 0;
    do {
      st = kiln_cache_reader_read(r, buf, 64 * KIB, &n);
    } while (!st && n > 0);
    free(buf);
    kiln_cache_reader_close(r);
  }
  assert_code(st, KILN_STATUS_DATA_LOSS);
  assert_lookup_missing(f->cache, zst.key);
  assert_false(has_blob_file(f->dir, zst.digest));
  snprintf(qpath, sizeof qpath, "%s/quarantine/%s.zst", f->dir, zst.digest);
  assert_true(exists(qpath));
  s = stats_of(f->cache);
  assert_int_equal(s.quarantined, 2);
  assert_int_equal(s.totals.artifacts, 0);

  /* Good bytes can be stored again and are served. */
  put_art(f->cache, &raw);
  assert_lookup_digest(f->cache, raw.key, raw.digest);
  assert_blob_equals(f->cache, raw.digest, raw.data, raw.len);
  put_art(f->cache, &zst);
  assert_lookup_digest(f->cache, zst.key, zst.digest);
  assert_blob_equals(f->cache, zst.digest, zst.data, zst.len);
  art_deinit(&raw);
  art_deinit(&raw2);
  art_deinit(&zst);
}

/* ---- blob checks ---- */

static void upload_write_all(kiln_cache_upload_t *u, const unsigned char *data, size_t len, size_t chunk);

/* Every put records its blob's check in the row's transaction, and reads verify
 * with it: XXH3-128, not SHA-256, decides. */
static void test_reads_verify_recorded_checks(void **state) {
  fixture_t *f = *state;
  art_t raw, zst, flipped;
  art_init(&raw, 400, 3000, false, 400);
  art_init(&zst, 401, 256 * KIB, true, 401);
  art_init(&flipped, 402, 5000, false, 402);
  put_art(f->cache, &raw);
  put_art(f->cache, &zst);
  put_art(f->cache, &flipped);
  unsigned char src[2000];
  kiln_test_fill_compressible(src, sizeof src, 403);
  kiln_digest_hex_t src_digest;
  assert_ok(kiln_cache_source_put(f->cache, src, sizeof src, NULL, "a.mlir", 1, NULL, &src_digest));
  size_t up_len = 300 * KIB;
  unsigned char *up = kiln_test_make_data(up_len, false, 404);
  char up_digest[65];
  digest_hex_of(up, up_len, up_digest);
  kiln_cache_upload_t *u = NULL;
  assert_ok(kiln_cache_source_upload_begin(f->cache, up_digest, up_len, &u));
  upload_write_all(u, up, up_len, 100 * KIB);
  assert_ok(kiln_cache_source_upload_commit(u, "b.mlir", 1, NULL, NULL));

  assert_check_recorded(f, raw.digest, raw.data, raw.len);
  assert_check_recorded(f, zst.digest, zst.data, zst.len);
  assert_check_recorded(f, src_digest.text, src, sizeof src);
  assert_check_recorded(f, up_digest, up, up_len);
  assert_blob_equals(f->cache, raw.digest, raw.data, raw.len);
  assert_blob_equals(f->cache, zst.digest, zst.data, zst.len);
  assert_blob_equals(f->cache, src_digest.text, src, sizeof src);
  assert_blob_equals(f->cache, up_digest, up, up_len);

  /* A wrong recorded check fails bytes SHA-256 would pass: the read used the
   * check. The blob is quarantined like any corrupt one, its check dropped. */
  kiln_blob_check_t wrong;
  kiln_blob_check_of(raw.data, raw.len, &wrong);
  wrong.bytes[0] ^= 0x80;
  set_check(f, raw.digest, &wrong);
  assert_read_fails_naming(f->cache, raw.digest, "XXH3-128");
  assert_lookup_missing(f->cache, raw.key);
  assert_false(has_blob_file(f->dir, raw.digest));
  char qpath[PATH_MAX];
  snprintf(qpath, sizeof qpath, "%s/quarantine/%s", f->dir, raw.digest);
  assert_true(exists(qpath));
  assert_no_check(f, raw.digest);

  /* A flipped byte, caught by the check on a streaming read. */
  char path[PATH_MAX];
  assert_true(blob_file(f->dir, flipped.digest, path, sizeof path));
  flip_byte(path, 4321);
  assert_read_fails_naming(f->cache, flipped.digest, "XXH3-128");
  assert_lookup_missing(f->cache, flipped.key);
  assert_no_check(f, flipped.digest);
  assert_int_equal(stats_of(f->cache).quarantined, 2);

  /* Stored again, each gets its check back and reads fast and whole. */
  put_art(f->cache, &raw);
  put_art(f->cache, &flipped);
  assert_check_recorded(f, raw.digest, raw.data, raw.len);
  assert_check_recorded(f, flipped.digest, flipped.data, flipped.len);
  assert_blob_equals(f->cache, raw.digest, raw.data, raw.len);
  assert_blob_equals(f->cache, flipped.digest, flipped.data, flipped.len);
  free(up);
  art_deinit(&raw);
  art_deinit(&zst);
  art_deinit(&flipped);
}

/* A cache written before index migration 4: its blobs have no checks. Reads verify
 * them by SHA-256 and record the check once the whole blob is proved. */
static void test_blobs_without_checks_read_by_sha256(void **state) {
  fixture_t *f = *state;
  art_t a, bad, zst;
  art_init(&a, 410, 7000, false, 410);
  art_init(&bad, 411, 7000, false, 411);
  art_init(&zst, 412, 200 * KIB, true, 412);
  put_art(f->cache, &a);
  put_art(f->cache, &bad);
  put_art(f->cache, &zst);
  kiln_cache_close(f->cache);
  f->cache = NULL;
  index_shell(f, "DROP TABLE blob_checks;\nPRAGMA user_version = 3;\n");
  reopen(f, NULL);
  assert_int_equal(stats_of(f->cache).schema_version, kiln_index_latest_schema_version());
  assert_no_check(f, a.digest);
  assert_no_check(f, zst.digest);

  assert_blob_equals(f->cache, a.digest, a.data, a.len);
  assert_check_recorded(f, a.digest, a.data, a.len);

  /* A reader that stops early proves nothing, so records nothing. */
  kiln_cache_reader_t *r = NULL;
  unsigned char buf[4096];
  size_t n = 0;
  assert_ok(kiln_cache_open_blob(f->cache, zst.digest, &r));
  assert_ok(kiln_cache_reader_read(r, buf, sizeof buf, &n));
  assert_true(n > 0);
  kiln_cache_reader_close(r);
  assert_no_check(f, zst.digest);
  assert_blob_equals(f->cache, zst.digest, zst.data, zst.len);
  assert_check_recorded(f, zst.digest, zst.data, zst.len);

  /* Damage is still caught, by SHA-256, and nothing is recorded for it. */
  char path[PATH_MAX];
  assert_true(blob_file(f->dir, bad.digest, path, sizeof path));
  flip_byte(path, 10);
  assert_read_fails_naming(f->cache, bad.digest, "SHA-256");
  assert_lookup_missing(f->cache, bad.key);
  assert_no_check(f, bad.digest);
  art_deinit(&a);
  art_deinit(&bad);
  art_deinit(&zst);
}

/* verify is the SHA-256 audit: it finds damage even where the recorded check was
 * rewritten to match it (which fools reads, as docs/design/cache.md says), and it
 * fixes the checks of intact blobs: a wrong one corrected, a missing one recorded. */
static void test_verify_audits_with_sha256(void **state) {
  fixture_t *f = *state;
  art_t forged, wrong, missing;
  art_init(&forged, 420, 4000, false, 420);
  art_init(&wrong, 421, 4000, false, 421);
  art_init(&missing, 422, 4000, false, 422);
  put_art(f->cache, &forged);
  put_art(f->cache, &wrong);
  put_art(f->cache, &missing);

  char path[PATH_MAX];
  assert_true(blob_file(f->dir, forged.digest, path, sizeof path));
  flip_byte(path, 99);
  unsigned char *damaged = malloc(forged.len);
  memcpy(damaged, forged.data, forged.len);
  damaged[99] ^= 0x20;
  kiln_blob_check_t check;
  kiln_blob_check_of(damaged, forged.len, &check);
  set_check(f, forged.digest, &check);
  assert_blob_equals(f->cache, forged.digest, damaged, forged.len); /* the read is fooled */

  kiln_blob_check_of(wrong.data, wrong.len, &check);
  check.bytes[15] ^= 1;
  set_check(f, wrong.digest, &check);
  char sql[256];
  snprintf(sql, sizeof sql, "DELETE FROM blob_checks WHERE digest = '%s';\n", missing.digest);
  index_shell(f, sql);
  assert_no_check(f, missing.digest);

  /* A dry run reports and changes nothing. */
  kiln_cache_verify_report_t report;
  assert_ok(kiln_cache_verify(f->cache, true, NULL, NULL, &report));
  assert_int_equal(report.n_problems, 1);
  assert_int_equal(count_problems(&report, KILN_CACHE_PROBLEM_CORRUPT_BLOB, forged.digest), 1);
  assert_false(report.problems[0].repaired);
  kiln_cache_verify_report_deinit(&report);
  assert_no_check(f, missing.digest);
  kiln_blob_check_t got;
  assert_true(recorded_check(f, wrong.digest, &got));
  assert_memory_equal(got.bytes, check.bytes, sizeof check.bytes);

  assert_ok(kiln_cache_verify(f->cache, false, NULL, NULL, &report));
  if (report.n_problems != 1) print_problems(&report);
  assert_int_equal(report.n_problems, 1);
  assert_int_equal(count_problems(&report, KILN_CACHE_PROBLEM_CORRUPT_BLOB, forged.digest), 1);
  assert_true(report.problems[0].repaired);
  assert_non_null(strstr(report.problems[0].detail, "SHA-256"));
  assert_int_equal(report.blobs_checked, 3);
  kiln_cache_verify_report_deinit(&report);
  assert_lookup_missing(f->cache, forged.key);
  assert_false(has_blob_file(f->dir, forged.digest));
  assert_no_check(f, forged.digest);
  assert_check_recorded(f, wrong.digest, wrong.data, wrong.len);
  assert_check_recorded(f, missing.digest, missing.data, missing.len);
  assert_blob_equals(f->cache, wrong.digest, wrong.data, wrong.len);
  assert_blob_equals(f->cache, missing.digest, missing.data, missing.len);
  free(damaged);
  art_deinit(&forged);
  art_deinit(&wrong);
  art_deinit(&missing);
}

/* A check leaves with its blob: a replaced key's old blob and gc's evictions take
 * theirs; a blob that another row still names keeps its. */
static void test_checks_go_with_their_blobs(void **state) {
  fixture_t *f = *state;
  art_t a, b, shared;
  art_init(&a, 430, 9000, false, 430);
  art_init(&b, 431, 9000, false, 431);
  art_init(&shared, 432, 9000, false, 431); /* b's bytes under another key */
  put_art(f->cache, &a);
  char old_digest[65];
  memcpy(old_digest, a.digest, sizeof old_digest);
  art_set_data(&a, 9000, false, 433);
  put_art(f->cache, &a);
  assert_no_check(f, old_digest);
  assert_check_recorded(f, a.digest, a.data, a.len);

  put_art(f->cache, &b);
  put_art(f->cache, &shared);
  assert_ok(kiln_cache_pin(f->cache, a.key, true, NULL));
  assert_ok(kiln_cache_pin(f->cache, shared.key, true, NULL));
  /* Only b's row can go, and the blob stays: the pinned shared row names it. */
  kiln_cache_gc_report_t r;
  assert_ok(kiln_cache_gc(f->cache, 9000, &r));
  assert_int_equal(r.artifacts_evicted, 1);
  assert_true(r.target_unreachable);
  assert_lookup_missing(f->cache, b.key);
  assert_true(has_blob_file(f->dir, b.digest));
  assert_check_recorded(f, b.digest, b.data, b.len);
  assert_ok(kiln_cache_pin(f->cache, shared.key, false, NULL));
  assert_ok(kiln_cache_gc(f->cache, 9000, &r));
  assert_int_equal(r.artifacts_evicted, 1);
  assert_lookup_missing(f->cache, shared.key);
  assert_false(has_blob_file(f->dir, b.digest));
  assert_no_check(f, b.digest);
  assert_check_recorded(f, a.digest, a.data, a.len);
  art_deinit(&a);
  art_deinit(&b);
  art_deinit(&shared);
}

static void test_deleted_blob_is_a_miss(void **state) {
  fixture_t *f = *state;
  art_t a, b;
  art_init(&a, 70, 2500, false, 70);
  art_init(&b, 71, 2500, false, 71);
  put_art(f->cache, &a);
  put_art(f->cache, &b);
  char path[PATH_MAX];
  assert_true(blob_file(f->dir, a.digest, path, sizeof path));
  assert_int_equal(unlink(path), 0);
  assert_lookup_missing(f->cache, a.key);
  kiln_cache_stats_t s = stats_of(f->cache);
  assert_int_equal(s.totals.artifacts, 1); /* the row is gone */
  assert_int_equal(s.misses, 1);
  assert_int_equal(s.hits, 0);
  assert_lookup_missing(f->cache, a.key);
  assert_lookup_digest(f->cache, b.key, b.digest);
  /* And it can be stored again. */
  put_art(f->cache, &a);
  assert_lookup_digest(f->cache, a.key, a.digest);
  assert_blob_equals(f->cache, a.digest, a.data, a.len);
  art_deinit(&a);
  art_deinit(&b);
}

/* The probe's memo answers without SQLite; a removal through the cache is seen at
 * once, a blob deleted by hand behind the cache within BLOB_CHECK_MS (1 s). */
static void test_probe_memo(void **state) {
  fixture_t *f = *state;
  art_t a, b;
  art_init(&a, 72, 2500, false, 72);
  art_init(&b, 73, 2500, false, 73);
  char digest[KILN_DIGEST_HEX_LEN + 1];
  uint64_t size = 0;
  assert_code(kiln_cache_artifact_probe(f->cache, a.key, digest, &size), KILN_STATUS_NOT_FOUND);
  put_art(f->cache, &a);
  put_art(f->cache, &b);
  for (int i = 0; i < 3; i++) { /* the first fills the memo, the rest use it */
    assert_ok(kiln_cache_artifact_probe(f->cache, a.key, digest, &size));
    assert_string_equal(digest, a.digest);
    assert_int_equal(size, a.len);
  }
  assert_ok(kiln_cache_artifact_probe(f->cache, b.key, digest, &size));
  kiln_cache_stats_t s = stats_of(f->cache);
  assert_int_equal(s.hits, 4);

  /* Eviction through the cache: the next probe misses, no waiting. */
  kiln_cache_gc_report_t report;
  assert_ok(kiln_cache_gc(f->cache, b.len + 100, &report));
  kiln_status_t sa = kiln_cache_artifact_probe(f->cache, a.key, digest, &size);
  kiln_status_t sb = kiln_cache_artifact_probe(f->cache, b.key, digest, &size);
  bool a_gone = sa != NULL, b_gone = sb != NULL;
  kiln_status_free(sa);
  kiln_status_free(sb);
  assert_true(a_gone != b_gone); /* exactly one of the two fits */
  art_t *kept = a_gone ? &b : &a;

  /* Deleted by hand: found out within a second, and the index healed. */
  char path[PATH_MAX];
  assert_true(blob_file(f->dir, kept->digest, path, sizeof path));
  assert_int_equal(unlink(path), 0);
  usleep(1100 * 1000);
  assert_code(kiln_cache_artifact_probe(f->cache, kept->key, digest, &size), KILN_STATUS_NOT_FOUND);
  s = stats_of(f->cache);
  assert_int_equal(s.totals.artifacts, 0);
  art_deinit(&a);
  art_deinit(&b);
}

/* The hits recorded on an artifact's row. */
static uint64_t row_hits(kiln_cache_t *cache, const char *digest) {
  kiln_index_artifact_t rec;
  assert_ok(kiln_cache_artifact_get_by_digest(cache, digest, &rec));
  uint64_t hits = rec.hits;
  kiln_index_artifact_deinit(&rec);
  return hits;
}

/* The memory-only answers for the event loop: nothing before the probe or a put
 * has been seen, then hits (each recorded, all or none), and nothing again once
 * the blob is due a stat. */
static void test_memo_answers_without_io(void **state) {
  fixture_t *f = *state;
  art_t a;
  art_init(&a, 74, 2500, false, 74);
  char digest[KILN_DIGEST_HEX_LEN + 1];
  uint64_t size = 0;
  const char *keys[] = {a.key};
  kiln_cache_memo_answer_t ans[2];
  assert_false(kiln_cache_artifact_memo(f->cache, keys, 1, ans)); /* never seen */
  put_art(f->cache, &a);
  assert_ok(kiln_cache_artifact_probe(f->cache, a.key, digest, &size));
  uint64_t hits = stats_of(f->cache).hits;
  assert_true(kiln_cache_artifact_memo(f->cache, keys, 1, ans));
  assert_string_equal(ans[0].artifact_digest, a.digest);
  assert_int_equal(ans[0].size, a.len);
  assert_int_equal(stats_of(f->cache).hits, hits + 1);
  /* All or nothing: one unknown key and no hit is recorded. */
  art_t b;
  art_init(&b, 75, 100, false, 75);
  const char *both[] = {a.key, b.key};
  assert_false(kiln_cache_artifact_memo(f->cache, both, 2, ans));
  assert_int_equal(stats_of(f->cache).hits, hits + 1);
  put_art(f->cache, &b);
  assert_ok(kiln_cache_artifact_probe(f->cache, b.key, digest, &size));
  hits = stats_of(f->cache).hits;
  assert_true(kiln_cache_artifact_memo(f->cache, both, 2, ans));
  assert_string_equal(ans[1].artifact_digest, b.digest);
  assert_int_equal(stats_of(f->cache).hits, hits + 2); /* the stats flushed the pending hits */
  /* Two keys new to the pending hits in one call: each row gets its own hit.
   * (Each memo check comes right after a probe: a slow run must not make it due
   * a stat.) */
  assert_ok(kiln_cache_artifact_probe(f->cache, a.key, digest, &size));
  assert_ok(kiln_cache_artifact_probe(f->cache, b.key, digest, &size));
  (void)stats_of(f->cache);
  uint64_t a_hits = row_hits(f->cache, a.digest), b_hits = row_hits(f->cache, b.digest);
  assert_true(kiln_cache_artifact_memo(f->cache, both, 2, ans));
  (void)stats_of(f->cache);
  assert_int_equal(row_hits(f->cache, a.digest), a_hits + 1);
  assert_int_equal(row_hits(f->cache, b.digest), b_hits + 1);
  /* More keys than one request carries: the probe answers those. */
  const char *many[KILN_CACHE_MEMO_MAX_KEYS + 1];
  kiln_cache_memo_answer_t many_ans[KILN_CACHE_MEMO_MAX_KEYS + 1];
  for (size_t i = 0; i <= KILN_CACHE_MEMO_MAX_KEYS; i++) many[i] = a.key;
  assert_ok(kiln_cache_artifact_probe(f->cache, a.key, digest, &size));
  hits = stats_of(f->cache).hits;
  assert_false(kiln_cache_artifact_memo(f->cache, many, KILN_CACHE_MEMO_MAX_KEYS + 1, many_ans));
  assert_int_equal(stats_of(f->cache).hits, hits);
  /* Up to the limit they are answered (one key repeated: one new pending entry). */
  assert_true(kiln_cache_artifact_memo(f->cache, many, KILN_CACHE_MEMO_MAX_KEYS, many_ans));
  assert_int_equal(stats_of(f->cache).hits, hits + KILN_CACHE_MEMO_MAX_KEYS);
  const char *bad[] = {"not-a-key"};
  assert_false(kiln_cache_artifact_memo(f->cache, bad, 1, ans));
  usleep(1100 * 1000); /* due a stat: only the probe may answer */
  assert_false(kiln_cache_artifact_memo(f->cache, keys, 1, ans));
  assert_ok(kiln_cache_artifact_probe(f->cache, a.key, digest, &size));
  assert_true(kiln_cache_artifact_memo(f->cache, keys, 1, ans));
  art_deinit(&b);

  static const char text[] = "module {}\n";
  kiln_digest_hex_t got, put;
  assert_false(kiln_cache_source_memo(f->cache, text, sizeof text - 1, &got));
  char want[KILN_DIGEST_HEX_LEN + 1];
  digest_hex_of(text, sizeof text - 1, want);
  assert_string_equal(got.text, want); /* the digest either way */
  assert_ok(kiln_cache_source_put(f->cache, text, sizeof text - 1, NULL, "m.mlir", 0, NULL, &put));
  assert_true(kiln_cache_source_memo(f->cache, text, sizeof text - 1, &got));
  assert_string_equal(got.text, want);
  art_deinit(&a);
}

/* ---- repair at open ---- */

static void test_open_repairs(void **state) {
  fixture_t *f = *state;
  art_t kept, dangling;
  art_init(&kept, 80, 2000, false, 80);
  art_init(&dangling, 81, 2000, false, 81);
  put_art(f->cache, &kept);
  put_art(f->cache, &dangling);
  kiln_cache_close(f->cache);
  f->cache = NULL;

  char path[PATH_MAX];
  assert_true(blob_file(f->dir, dangling.digest, path, sizeof path));
  assert_int_equal(unlink(path), 0);
  unsigned char orphan[1000];
  kiln_test_fill_random(orphan, sizeof orphan, 82);
  char orphan_digest[65], orphan_path[PATH_MAX];
  make_orphan(f->dir, orphan, sizeof orphan, orphan_digest, orphan_path, sizeof orphan_path);
  char junk1[PATH_MAX], junk2[PATH_MAX], junk3[PATH_MAX], tmp1[PATH_MAX];
  snprintf(junk1, sizeof junk1, "%s/blobs/ab/notes.txt", f->dir);
  snprintf(junk2, sizeof junk2, "%s/blobs/README", f->dir);
  /* A blob name in the wrong shard is not a blob either. */
  snprintf(junk3, sizeof junk3, "%s/blobs/%s/%s", f->dir, strncmp(kept.digest, "00", 2) == 0 ? "01" : "00",
           kept.digest);
  snprintf(tmp1, sizeof tmp1, "%s/tmp/blob-leftover", f->dir);
  write_file(junk1, "x", 1);
  write_file(junk2, "y", 1);
  write_file(junk3, kept.data, kept.len);
  write_file(tmp1, "z", 1);

  kiln_cache_repair_t repair;
  memset(&repair, 0xff, sizeof repair);
  assert_ok(kiln_cache_open(f->dir, &f->options, &f->cache, &repair));
  assert_int_equal(repair.dangling_rows, 1);
  assert_int_equal(repair.orphan_blobs, 1);
  assert_int_equal(repair.stray_files, 3);
  assert_true(repair.duration_ms >= 0);
  assert_false(exists(orphan_path));
  assert_false(exists(junk1));
  assert_false(exists(junk2));
  assert_false(exists(junk3));
  assert_int_equal(subdir_entries(f->dir, "tmp"), 0);
  kiln_cache_stats_t s = stats_of(f->cache);
  assert_int_equal(s.totals.artifacts, 1);
  assert_lookup_missing(f->cache, dangling.key);
  assert_lookup_digest(f->cache, kept.key, kept.digest);
  assert_blob_equals(f->cache, kept.digest, kept.data, kept.len);

  /* A second open finds nothing to do. */
  reopen(f, &repair);
  assert_int_equal(repair.dangling_rows, 0);
  assert_int_equal(repair.orphan_blobs, 0);
  assert_int_equal(repair.stray_files, 0);
  kiln_cache_verify_report_t report;
  assert_ok(kiln_cache_verify(f->cache, false, NULL, NULL, &report));
  assert_int_equal(report.n_problems, 0);
  kiln_cache_verify_report_deinit(&report);
  art_deinit(&kept);
  art_deinit(&dangling);
}

/* dangling_rows is documented as "rows dropped because their blob was missing":
 * two keys sharing one missing blob are two rows. */
static void test_open_repair_counts_dangling_rows(void **state) {
  fixture_t *f = *state;
  art_t a, b;
  art_init(&a, 85, 2000, false, 85);
  art_init(&b, 86, 2000, false, 85); /* same bytes */
  put_art(f->cache, &a);
  put_art(f->cache, &b);
  kiln_cache_close(f->cache);
  f->cache = NULL;
  char path[PATH_MAX];
  assert_true(blob_file(f->dir, a.digest, path, sizeof path));
  assert_int_equal(unlink(path), 0);
  kiln_cache_repair_t repair;
  assert_ok(kiln_cache_open(f->dir, &f->options, &f->cache, &repair));
  art_deinit(&a);
  art_deinit(&b);
  kiln_cache_stats_t s = stats_of(f->cache);
  assert_int_equal(s.totals.artifacts, 0);
  assert_int_equal(repair.dangling_rows, 2);
}

/* A directory that is not a shard (or one inside a shard) is a stray too; repair
 * must remove it rather than count it as removed and leave it. */
static void test_open_removes_stray_directories(void **state) {
  fixture_t *f = *state;
  kiln_cache_close(f->cache);
  f->cache = NULL;
  char d1[PATH_MAX], d2[PATH_MAX], inner[PATH_MAX];
  snprintf(d1, sizeof d1, "%s/blobs/lost+found", f->dir);
  snprintf(d2, sizeof d2, "%s/blobs/cd/sub", f->dir);
  assert_int_equal(mkdir(d1, 0700), 0);
  assert_int_equal(mkdir(d2, 0700), 0);
  snprintf(inner, sizeof inner, "%s/blobs/cd/sub/file", f->dir);
  write_file(inner, "q", 1);
  kiln_cache_repair_t repair;
  assert_ok(kiln_cache_open(f->dir, &f->options, &f->cache, &repair));
  assert_int_equal(repair.stray_files, 2);
  if (exists(d1) || exists(d2)) {
    fail_msg("repair reported stray_files=%llu but left %s%s%s", (unsigned long long)repair.stray_files,
             exists(d1) ? d1 : "", exists(d1) && exists(d2) ? " and " : "", exists(d2) ? d2 : "");
  }
}

/* ---- verify ---- */

static bool stop_always(void *user) {
  (*(int *)user)++;
  return true;
}

/* Issue 18, item 9: with index.db damaged, start-up repair deleted a blob on the
 * damaged index's word and verify said "0 problem(s)". Now the open refuses with
 * DATA_LOSS and touches nothing, and verify reports the index. */
static void test_damaged_index_is_reported_and_never_repaired_from(void **state) {
  fixture_t *f = *state;
  for (int i = 0; i < 40; i++) { /* enough rows for several pages */
    art_t a;
    art_init(&a, 500 + (uint64_t)i, 600, i % 2 == 0, 500 + (uint64_t)i);
    assert_ok(kiln_cache_artifact_put(f->cache, &a.parts, a.data, a.len, NULL, NULL));
    art_deinit(&a);
  }
  kiln_cache_close(f->cache);
  f->cache = NULL;
  size_t blobs = blob_files(f->dir);
  assert_true(blobs >= 40);
  /* Garbage over every page but the first (the header stays readable). */
  char db[400];
  snprintf(db, sizeof db, "%s/index.db", f->dir);
  struct stat st;
  assert_int_equal(stat(db, &st), 0);
  assert_true(st.st_size > 8192);
  FILE *fp = fopen(db, "r+b");
  assert_non_null(fp);
  assert_int_equal(fseek(fp, 4096, SEEK_SET), 0);
  for (long i = 4096; i < st.st_size; i++) fputc((int)((i * 7919) & 0xff), fp);
  assert_int_equal(fclose(fp), 0);

  kiln_status_t opened = kiln_cache_open(f->dir, &f->options, &f->cache, NULL);
  assert_code(opened, KILN_STATUS_DATA_LOSS);
  assert_null(f->cache);
  assert_int_equal(blob_files(f->dir), blobs); /* nothing deleted */

  /* kilnd --verify opens without the repair, then verifies: the index is named. */
  kiln_cache_options_t o = f->options;
  o.skip_repair = true;
  assert_ok(kiln_cache_open(f->dir, &o, &f->cache, NULL));
  kiln_cache_verify_report_t report;
  assert_ok(kiln_cache_verify(f->cache, false, NULL, NULL, &report));
  assert_int_equal(report.n_problems, 1);
  assert_int_equal(report.problems[0].kind, KILN_CACHE_PROBLEM_DAMAGED_INDEX);
  assert_non_null(strstr(report.problems[0].detail, "integrity check"));
  kiln_cache_verify_report_deinit(&report);
  assert_int_equal(blob_files(f->dir), blobs);
}

static void test_verify_clean_store(void **state) {
  fixture_t *f = *state;
  art_t arts[3];
  uint64_t stored = 0;
  for (int i = 0; i < 3; i++) {
    art_init(&arts[i], 90 + (uint64_t)i, 40 * KIB, i == 1, 90 + (uint64_t)i);
    kiln_index_artifact_t rec;
    assert_ok(kiln_cache_artifact_put(f->cache, &arts[i].parts, arts[i].data, arts[i].len, NULL, &rec));
    stored += rec.stored_size;
    kiln_index_artifact_deinit(&rec);
  }
  unsigned char src[500];
  kiln_test_fill_compressible(src, sizeof src, 93);
  assert_ok(kiln_cache_source_put(f->cache, src, sizeof src, NULL, "model.mlir", 1, NULL, NULL));
  stored += sizeof src;
  kiln_cache_verify_report_t report;
  assert_ok(kiln_cache_verify(f->cache, false, NULL, NULL, &report));
  if (report.n_problems) print_problems(&report);
  assert_int_equal(report.n_problems, 0);
  assert_int_equal(report.blobs_checked, 4);
  assert_int_equal(report.bytes_checked, stored);
  assert_true(report.duration_ms >= 0);
  kiln_cache_verify_report_deinit(&report);
  for (int i = 0; i < 3; i++) {
    assert_lookup_digest(f->cache, arts[i].key, arts[i].digest);
    art_deinit(&arts[i]);
  }
}

typedef struct damaged_s {
  art_t good, corrupt, missing;
  char corrupt_path[PATH_MAX];
  char missing_path[PATH_MAX];
  char orphan_digest[65];
  char orphan_path[PATH_MAX];
  char stray_path[PATH_MAX];
} damaged_t;

/* One good artifact, one with a flipped byte, one whose blob was deleted, an old
 * orphan and a stray file. */
static void make_damage(fixture_t *f, damaged_t *d) {
  art_init(&d->good, 100, 3000, false, 100);
  art_init(&d->corrupt, 101, 3000, false, 101);
  art_init(&d->missing, 102, 3000, false, 102);
  put_art(f->cache, &d->good);
  put_art(f->cache, &d->corrupt);
  put_art(f->cache, &d->missing);
  assert_true(blob_file(f->dir, d->corrupt.digest, d->corrupt_path, sizeof d->corrupt_path));
  flip_byte(d->corrupt_path, 100);
  assert_true(blob_file(f->dir, d->missing.digest, d->missing_path, sizeof d->missing_path));
  assert_int_equal(unlink(d->missing_path), 0);
  unsigned char orphan[800];
  kiln_test_fill_random(orphan, sizeof orphan, 103);
  make_orphan(f->dir, orphan, sizeof orphan, d->orphan_digest, d->orphan_path, sizeof d->orphan_path);
  age_file(d->orphan_path, 600);
  snprintf(d->stray_path, sizeof d->stray_path, "%s/blobs/ef/editor-backup~", f->dir);
  write_file(d->stray_path, "junk", 4);
}

static void damage_deinit(damaged_t *d) {
  art_deinit(&d->good);
  art_deinit(&d->corrupt);
  art_deinit(&d->missing);
}

static void test_verify_repairs(void **state) {
  fixture_t *f = *state;
  damaged_t d;
  make_damage(f, &d);
  kiln_cache_verify_report_t report;
  assert_ok(kiln_cache_verify(f->cache, false, NULL, NULL, &report));
  print_problems(&report);
  assert_int_equal(report.n_problems, 4);
  assert_int_equal(count_problems(&report, KILN_CACHE_PROBLEM_CORRUPT_BLOB, d.corrupt.digest), 1);
  assert_int_equal(count_problems(&report, KILN_CACHE_PROBLEM_MISSING_BLOB, d.missing.digest), 1);
  assert_int_equal(count_problems(&report, KILN_CACHE_PROBLEM_ORPHAN_BLOB, d.orphan_digest), 1);
  assert_int_equal(count_problems(&report, KILN_CACHE_PROBLEM_STRAY_FILE, ""), 1);
  for (size_t i = 0; i < report.n_problems; i++) {
    assert_true(report.problems[i].repaired);
    assert_non_null(report.problems[i].detail);
    assert_true(report.problems[i].detail[0] != '\0');
  }
  /* good, corrupt, orphan: the missing one has no file to check. */
  assert_int_equal(report.blobs_checked, 3);
  kiln_cache_verify_report_deinit(&report);

  assert_false(exists(d.corrupt_path));
  char qpath[PATH_MAX];
  snprintf(qpath, sizeof qpath, "%s/quarantine/%s", f->dir, d.corrupt.digest);
  assert_true(exists(qpath));
  assert_false(exists(d.orphan_path));
  assert_false(exists(d.stray_path));
  kiln_cache_stats_t s = stats_of(f->cache);
  assert_int_equal(s.totals.artifacts, 1);
  assert_int_equal(s.quarantined, 1);
  assert_int_equal(s.totals.quarantined, 1);
  assert_lookup_missing(f->cache, d.corrupt.key);
  assert_lookup_missing(f->cache, d.missing.key);
  assert_lookup_digest(f->cache, d.good.key, d.good.digest);

  assert_ok(kiln_cache_verify(f->cache, false, NULL, NULL, &report));
  if (report.n_problems) print_problems(&report);
  assert_int_equal(report.n_problems, 0);
  assert_int_equal(report.blobs_checked, 1);
  kiln_cache_verify_report_deinit(&report);
  damage_deinit(&d);
}

static void test_verify_dry_run_changes_nothing(void **state) {
  fixture_t *f = *state;
  damaged_t d;
  make_damage(f, &d);
  kiln_cache_stats_t before = stats_of(f->cache);
  size_t files_before = blob_files(f->dir);
  kiln_cache_verify_report_t dry;
  assert_ok(kiln_cache_verify(f->cache, true, NULL, NULL, &dry));
  for (size_t i = 0; i < dry.n_problems; i++) assert_false(dry.problems[i].repaired);
  assert_int_equal(count_problems(&dry, KILN_CACHE_PROBLEM_CORRUPT_BLOB, d.corrupt.digest), 1);
  assert_int_equal(count_problems(&dry, KILN_CACHE_PROBLEM_MISSING_BLOB, d.missing.digest), 1);
  assert_int_equal(count_problems(&dry, KILN_CACHE_PROBLEM_ORPHAN_BLOB, d.orphan_digest), 1);
  assert_int_equal(count_problems(&dry, KILN_CACHE_PROBLEM_STRAY_FILE, ""), 1);

  /* Nothing changed on disk or in the index. */
  assert_true(exists(d.corrupt_path));
  assert_true(exists(d.orphan_path));
  assert_true(exists(d.stray_path));
  assert_int_equal(blob_files(f->dir), files_before);
  assert_int_equal(subdir_entries(f->dir, "quarantine"), 0);
  kiln_cache_stats_t after = stats_of(f->cache);
  assert_int_equal(after.totals.artifacts, before.totals.artifacts);
  assert_int_equal(after.totals.artifacts, 3);
  assert_int_equal(after.totals.quarantined, 0);
  assert_int_equal(after.quarantined, 0);

  /* A dry run reports what the real run then repairs: the same problems, no more. */
  kiln_cache_verify_report_t real;
  assert_ok(kiln_cache_verify(f->cache, false, NULL, NULL, &real));
  size_t n_dry = dry.n_problems, n_real = real.n_problems;
  size_t extra = count_problems(&dry, KILN_CACHE_PROBLEM_MISSING_BLOB, d.corrupt.digest);
  if (n_dry != n_real) {
    fprintf(stderr, "dry run:\n");
    print_problems(&dry);
    fprintf(stderr, "real run:\n");
    print_problems(&real);
  }
  kiln_cache_verify_report_deinit(&dry);
  kiln_cache_verify_report_deinit(&real);
  damage_deinit(&d);
  if (n_dry != n_real) {
    fail_msg(
        "the dry run reported %zu problems, the real run %zu (the corrupt blob's rows are "
        "also reported as MISSING_BLOB in the dry run: %zu)",
        n_dry, n_real, extra);
  }
}

static void test_verify_spares_young_orphans(void **state) {
  fixture_t *f = *state;
  unsigned char orphan[700];
  kiln_test_fill_random(orphan, sizeof orphan, 110);
  char digest[65], path[PATH_MAX];
  make_orphan(f->dir, orphan, sizeof orphan, digest, path, sizeof path);
  kiln_cache_verify_report_t report;
  assert_ok(kiln_cache_verify(f->cache, false, NULL, NULL, &report));
  assert_int_equal(report.n_problems, 0);
  assert_int_equal(report.blobs_checked, 1);
  kiln_cache_verify_report_deinit(&report);
  assert_true(exists(path));
  age_file(path, 301);
  assert_ok(kiln_cache_verify(f->cache, false, NULL, NULL, &report));
  assert_int_equal(count_problems(&report, KILN_CACHE_PROBLEM_ORPHAN_BLOB, digest), 1);
  kiln_cache_verify_report_deinit(&report);
  assert_false(exists(path));
}

static void test_verify_can_be_cancelled(void **state) {
  fixture_t *f = *state;
  art_t a, b;
  art_init(&a, 120, 2000, false, 120);
  art_init(&b, 121, 2000, false, 121);
  put_art(f->cache, &a);
  put_art(f->cache, &b);
  int calls = 0;
  kiln_cache_verify_report_t report;
  memset(&report, 0x5a, sizeof report);
  assert_code(kiln_cache_verify(f->cache, false, stop_always, &calls, &report), KILN_STATUS_CANCELLED);
  assert_true(calls >= 1);
  assert_null(report.problems);
  assert_int_equal(report.n_problems, 0);
  /* Cancelling changed nothing. */
  assert_lookup_digest(f->cache, a.key, a.digest);
  assert_lookup_digest(f->cache, b.key, b.digest);
  art_deinit(&a);
  art_deinit(&b);
}

/* Puts that land while verify scans (another thread, here run from should_stop,
 * which verify polls between blobs) must not be taken for dangling rows: their
 * blob was committed after the blob scan passed its shard, their row before the
 * row scan. */
typedef struct verify_race_s {
  kiln_cache_t *cache;
  unsigned shards[2];
  int calls;
  art_t late[2];
  char late_src[2][65];
  char late_data[2][64];
  size_t late_len[2];
} verify_race_t;

static bool put_during_scan(void *user) {
  verify_race_t *v = user;
  if (++v->calls != 2) return false;
  /* The second blob: the first one's shard has been scanned. One new artifact in
   * each of the two shards. */
  for (int i = 0; i < 2; i++) {
    art_t *a = &v->late[i];
    kiln_status_t st =
        kiln_cache_artifact_put(v->cache, &a->parts, v->late_data[i], v->late_len[i], NULL, NULL);
    if (st) {
      fprintf(stderr, "put during verify: %s\n", kiln_status_message(st));
      kiln_status_free(st);
    }
  }
  return false;
}

static void test_verify_keeps_rows_put_during_scan(void **state) {
  fixture_t *f = *state;
  verify_race_t v;
  memset(&v, 0, sizeof v);
  v.cache = f->cache;
  /* Two blobs in two different shards. */
  char early[2][64];
  size_t early_len[2];
  art_t first[2];
  v.shards[0] = 0x3c;
  v.shards[1] = 0xc3;
  for (int i = 0; i < 2; i++) {
    content_in_shard(v.shards[i], 1, early[i], sizeof early[i], &early_len[i]);
    art_init(&first[i], 130 + (uint64_t)i, 0, false, 0);
    assert_ok(kiln_cache_artifact_put(f->cache, &first[i].parts, early[i], early_len[i], NULL, NULL));
    content_in_shard(v.shards[i], 2, v.late_data[i], sizeof v.late_data[i], &v.late_len[i]);
    art_init(&v.late[i], 140 + (uint64_t)i, 0, false, 0);
    digest_hex_of(v.late_data[i], v.late_len[i], v.late[i].digest);
  }
  kiln_cache_verify_report_t report;
  assert_ok(kiln_cache_verify(f->cache, false, put_during_scan, &v, &report));
  assert_true(v.calls >= 2);
  size_t missing = count_problems(&report, KILN_CACHE_PROBLEM_MISSING_BLOB, NULL);
  if (missing) print_problems(&report);
  kiln_cache_verify_report_deinit(&report);
  int lost = 0;
  for (int i = 0; i < 2; i++) {
    kiln_index_artifact_t rec;
    kiln_status_t st = kiln_cache_artifact_lookup(f->cache, v.late[i].key, &rec);
    if (st) {
      lost++;
      fprintf(stderr, "artifact %s put during verify: %s (blob file %s)\n", v.late[i].key,
              kiln_status_message(st), has_blob_file(f->dir, v.late[i].digest) ? "present" : "absent");
      kiln_status_free(st);
    } else {
      kiln_index_artifact_deinit(&rec);
    }
  }
  for (int i = 0; i < 2; i++) {
    art_deinit(&first[i]);
    art_deinit(&v.late[i]);
  }
  if (missing || lost) {
    fail_msg(
        "verify reported %zu MISSING_BLOB problem(s) and dropped %d artifact(s) stored "
        "while it scanned, although their blobs exist",
        missing, lost);
  }
}

/* ---- pin ---- */

static void test_pin_by_digest_and_key(void **state) {
  fixture_t *f = *state;
  art_t a, b, c;
  art_init(&a, 150, 2000, false, 150);
  art_init(&b, 151, 2000, false, 150); /* same bytes as a */
  art_init(&c, 152, 2000, false, 152);
  put_art(f->cache, &a);
  put_art(f->cache, &b);
  put_art(f->cache, &c);
  size_t n = 99;
  assert_ok(kiln_cache_pin(f->cache, a.digest, true, &n));
  assert_int_equal(n, 2);
  assert_int_equal(stats_of(f->cache).totals.pinned, 2);
  kiln_index_artifact_t rec;
  assert_ok(kiln_cache_artifact_lookup(f->cache, b.key, &rec));
  assert_true(rec.pinned);
  kiln_index_artifact_deinit(&rec);
  assert_ok(kiln_cache_pin(f->cache, b.key, false, &n));
  assert_int_equal(n, 1);
  assert_ok(kiln_cache_artifact_lookup(f->cache, b.key, &rec));
  assert_false(rec.pinned);
  kiln_index_artifact_deinit(&rec);
  assert_ok(kiln_cache_artifact_lookup(f->cache, a.key, &rec));
  assert_true(rec.pinned);
  kiln_index_artifact_deinit(&rec);
  assert_ok(kiln_cache_pin(f->cache, c.key, true, NULL));
  assert_int_equal(stats_of(f->cache).totals.pinned, 2);
  assert_ok(kiln_cache_pin(f->cache, a.digest, false, &n));
  assert_int_equal(n, 2);
  assert_int_equal(stats_of(f->cache).totals.pinned, 1);

  char unknown[65];
  source_digest(153, unknown);
  n = 99;
  assert_code(kiln_cache_pin(f->cache, unknown, true, &n), KILN_STATUS_NOT_FOUND);
  assert_int_equal(n, 0);
  char upper[65];
  memcpy(upper, a.key, sizeof upper);
  for (char *ch = upper; *ch; ch++) {
    if (*ch >= 'a' && *ch <= 'f') *ch = (char)(*ch - 'a' + 'A');
  }
  const char *bad[] = {NULL, "", "abc", upper, "g123"};
  for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
    assert_code(kiln_cache_pin(f->cache, bad[i], true, &n), KILN_STATUS_INVALID_ARGUMENT);
  }
  art_deinit(&a);
  art_deinit(&b);
  art_deinit(&c);
}

/* ---- gc ---- */

#define GC_N    5
#define GC_SIZE 10000

/* Five 10000-byte raw artifacts put at times t0+1..t0+5 (seconds). */
static void put_gc_set(fixture_t *f, art_t arts[GC_N], uint64_t seed) {
  for (int i = 0; i < GC_N; i++) {
    atomic_store(&g_now_ms, 1700000000000 + (i + 1) * 1000);
    art_init(&arts[i], seed + (uint64_t)i, GC_SIZE, false, seed + (uint64_t)i);
    kiln_index_artifact_t rec;
    assert_ok(kiln_cache_artifact_put(f->cache, &arts[i].parts, arts[i].data, arts[i].len, NULL, &rec));
    assert_int_equal(rec.stored_size, GC_SIZE);
    kiln_index_artifact_deinit(&rec);
  }
}

static void touch_at(fixture_t *f, const art_t *a, int64_t t) {
  atomic_store(&g_now_ms, t);
  assert_lookup_digest(f->cache, a->key, a->digest);
}

static void test_gc_evicts_least_recently_used(void **state) {
  fixture_t *f = *state;
  art_t arts[GC_N];
  put_gc_set(f, arts, 200);
  /* Access order now: 1 (t=2s) < 3 (4s) < 4 (5s) < 0 (10s) < 2 (11s). */
  touch_at(f, &arts[0], 1700000010000);
  touch_at(f, &arts[2], 1700000011000);
  kiln_cache_gc_report_t r;
  assert_ok(kiln_cache_gc(f->cache, 3 * GC_SIZE, &r));
  assert_int_equal(r.artifacts_evicted, 2);
  assert_int_equal(r.sources_evicted, 0);
  assert_int_equal(r.bytes_freed, 2 * GC_SIZE);
  assert_int_equal(r.bytes_stored, 3 * GC_SIZE);
  assert_false(r.target_unreachable);
  assert_lookup_missing(f->cache, arts[1].key);
  assert_lookup_missing(f->cache, arts[3].key);
  assert_false(has_blob_file(f->dir, arts[1].digest));
  assert_false(has_blob_file(f->dir, arts[3].digest));
  /* The next one to go is 4, then 0. */
  assert_ok(kiln_cache_gc(f->cache, 2 * GC_SIZE, &r));
  assert_int_equal(r.artifacts_evicted, 1);
  assert_lookup_missing(f->cache, arts[4].key);
  assert_lookup_digest(f->cache, arts[0].key, arts[0].digest);
  assert_lookup_digest(f->cache, arts[2].key, arts[2].digest);
  kiln_cache_stats_t s = stats_of(f->cache);
  assert_int_equal(s.evictions, 3);
  assert_int_equal(s.totals.artifacts, 2);
  /* Already under the limit: nothing to do. */
  assert_ok(kiln_cache_gc(f->cache, 5 * GC_SIZE, &r));
  assert_int_equal(r.artifacts_evicted, 0);
  assert_int_equal(r.bytes_freed, 0);
  assert_int_equal(r.bytes_stored, 2 * GC_SIZE);
  for (int i = 0; i < GC_N; i++) art_deinit(&arts[i]);
}

static void test_gc_never_evicts_pinned(void **state) {
  fixture_t *f = *state;
  art_t arts[GC_N];
  put_gc_set(f, arts, 210);
  assert_ok(kiln_cache_pin(f->cache, arts[0].key, true, NULL)); /* the oldest */
  assert_ok(kiln_cache_pin(f->cache, arts[1].digest, true, NULL));
  kiln_cache_gc_report_t r;
  assert_ok(kiln_cache_gc(f->cache, 1, &r));
  assert_int_equal(r.artifacts_evicted, 3);
  assert_int_equal(r.bytes_stored, 2 * GC_SIZE);
  assert_true(r.target_unreachable);
  assert_lookup_digest(f->cache, arts[0].key, arts[0].digest);
  assert_lookup_digest(f->cache, arts[1].key, arts[1].digest);
  assert_blob_equals(f->cache, arts[0].digest, arts[0].data, arts[0].len);
  for (int i = 2; i < GC_N; i++) assert_lookup_missing(f->cache, arts[i].key);
  /* Everything pinned: nothing evicted, target unreachable. */
  assert_ok(kiln_cache_gc(f->cache, GC_SIZE, &r));
  assert_int_equal(r.artifacts_evicted, 0);
  assert_true(r.target_unreachable);
  assert_int_equal(r.bytes_stored, 2 * GC_SIZE);
  /* Unpinned, it goes. */
  assert_ok(kiln_cache_pin(f->cache, arts[0].key, false, NULL));
  assert_ok(kiln_cache_gc(f->cache, GC_SIZE, &r));
  assert_int_equal(r.artifacts_evicted, 1);
  assert_false(r.target_unreachable);
  assert_lookup_missing(f->cache, arts[0].key);
  for (int i = 0; i < GC_N; i++) art_deinit(&arts[i]);
}

static void test_gc_spares_blobs_being_read(void **state) {
  fixture_t *f = *state;
  art_t arts[GC_N];
  put_gc_set(f, arts, 220);
  /* Readers on the two oldest, one of them read partly before gc. */
  kiln_cache_reader_t *r0 = NULL, *r1 = NULL;
  assert_ok(kiln_cache_open_blob(f->cache, arts[0].digest, &r0));
  assert_ok(kiln_cache_open_blob(f->cache, arts[1].digest, &r1));
  unsigned char *got = malloc(GC_SIZE);
  size_t n = 0, total = 0;
  assert_ok(kiln_cache_reader_read(r0, got, 1000, &n));
  total = n;
  kiln_cache_gc_report_t rep;
  assert_ok(kiln_cache_gc(f->cache, 1, &rep));
  assert_int_equal(rep.artifacts_evicted, 3);
  assert_true(rep.target_unreachable);
  assert_true(has_blob_file(f->dir, arts[0].digest));
  assert_true(has_blob_file(f->dir, arts[1].digest));
  for (int i = 2; i < GC_N; i++) assert_false(has_blob_file(f->dir, arts[i].digest));
  /* Both still read to the end, verified. */
  do {
    assert_ok(kiln_cache_reader_read(r0, got + total, GC_SIZE - total > 0 ? GC_SIZE - total : 1, &n));
    total += n;
  } while (n > 0 && total < GC_SIZE);
  assert_ok(kiln_cache_reader_read(r0, got, 1, &n));
  assert_int_equal(n, 0);
  assert_int_equal(total, GC_SIZE);
  assert_memory_equal(got, arts[0].data, GC_SIZE);
  kiln_cache_reader_close(r0);
  assert_lookup_digest(f->cache, arts[0].key, arts[0].digest);
  assert_lookup_digest(f->cache, arts[1].key, arts[1].digest);
  total = 0;
  do {
    assert_ok(kiln_cache_reader_read(r1, got + total, GC_SIZE - total > 0 ? GC_SIZE - total : 1, &n));
    total += n;
  } while (n > 0 && total < GC_SIZE);
  assert_int_equal(total, GC_SIZE);
  assert_memory_equal(got, arts[1].data, GC_SIZE);
  /* r1 still open: a second gc takes arts[0] (readerless now) but not arts[1]. */
  assert_ok(kiln_cache_gc(f->cache, 1, &rep));
  assert_int_equal(rep.artifacts_evicted, 1);
  assert_lookup_missing(f->cache, arts[0].key);
  assert_true(has_blob_file(f->dir, arts[1].digest));
  kiln_cache_reader_close(r1);
  assert_ok(kiln_cache_gc(f->cache, 1, &rep));
  assert_int_equal(rep.artifacts_evicted, 1);
  assert_false(rep.target_unreachable);
  assert_int_equal(rep.bytes_stored, 0);
  assert_false(has_blob_file(f->dir, arts[1].digest));
  free(got);
  for (int i = 0; i < GC_N; i++) art_deinit(&arts[i]);
}

static void source_put_ok(fixture_t *f, const void *data, size_t len, const char *semantic, char out[65]) {
  kiln_digest_hex_t d;
  assert_ok(kiln_cache_source_put(f->cache, data, len, NULL, "in.mlir", 1, semantic, &d));
  memcpy(out, d.text, 65);
}

static void test_gc_sources_after_artifacts(void **state) {
  fixture_t *f = *state;
  /* Sources first (so they are the oldest), raw 10000 bytes each. */
  unsigned char *s1 = kiln_test_make_data(GC_SIZE, false, 230);
  unsigned char *s2 = kiln_test_make_data(GC_SIZE, false, 231);
  unsigned char *s3 = kiln_test_make_data(GC_SIZE, false, 232);
  char d1[65], d2[65], d3[65], sem3[65];
  source_digest(233, sem3);
  atomic_store(&g_now_ms, 1700000000100);
  source_put_ok(f, s1, GC_SIZE, NULL, d1);
  atomic_store(&g_now_ms, 1700000000200);
  source_put_ok(f, s2, GC_SIZE, NULL, d2);
  atomic_store(&g_now_ms, 1700000000300);
  source_put_ok(f, s3, GC_SIZE, sem3, d3);
  /* x names s1 by its digest, y names s3 by its semantic digest. */
  art_t x, y;
  art_init(&x, 234, GC_SIZE, false, 234);
  memcpy(x.src, d1, 65);
  art_rekey(&x);
  art_init(&y, 235, GC_SIZE, false, 235);
  memcpy(y.src, sem3, 65);
  art_rekey(&y);
  atomic_store(&g_now_ms, 1700000001000);
  put_art(f->cache, &x);
  atomic_store(&g_now_ms, 1700000002000);
  put_art(f->cache, &y);
  kiln_cache_stats_t s = stats_of(f->cache);
  assert_int_equal(s.totals.sources, 3);
  assert_int_equal(s.totals.artifact_stored_bytes + s.totals.source_stored_bytes, 5 * GC_SIZE);

  /* Freeing one blob's worth takes an artifact although every source is older. */
  kiln_cache_gc_report_t r;
  assert_ok(kiln_cache_gc(f->cache, 4 * GC_SIZE, &r));
  assert_int_equal(r.artifacts_evicted, 1);
  assert_int_equal(r.sources_evicted, 0);
  assert_lookup_missing(f->cache, x.key);

  /* y pinned: then sources nothing names go (s1 now that x is gone, s2); s3 stays
   * because y names it by meaning. */
  assert_ok(kiln_cache_pin(f->cache, y.key, true, NULL));
  assert_ok(kiln_cache_gc(f->cache, 1, &r));
  assert_int_equal(r.artifacts_evicted, 0);
  assert_int_equal(r.sources_evicted, 2);
  assert_int_equal(r.bytes_freed, 2 * GC_SIZE);
  assert_true(r.target_unreachable);
  assert_int_equal(r.bytes_stored, 2 * GC_SIZE);
  void *p = NULL;
  size_t len = 0;
  assert_code(kiln_cache_get_blob(f->cache, d1, &p, &len), KILN_STATUS_NOT_FOUND);
  assert_code(kiln_cache_get_blob(f->cache, d2, &p, &len), KILN_STATUS_NOT_FOUND);
  assert_blob_equals(f->cache, d3, s3, GC_SIZE);
  assert_lookup_digest(f->cache, y.key, y.digest);
  s = stats_of(f->cache);
  assert_int_equal(s.totals.sources, 1);
  assert_int_equal(s.evictions, 3);

  /* Unpinned, y goes first and then s3. */
  assert_ok(kiln_cache_pin(f->cache, y.key, false, NULL));
  assert_ok(kiln_cache_gc(f->cache, 1, &r));
  assert_int_equal(r.artifacts_evicted, 1);
  assert_int_equal(r.sources_evicted, 1);
  assert_int_equal(r.bytes_stored, 0);
  assert_false(r.target_unreachable);
  assert_int_equal(blob_files(f->dir), 0);
  free(s1);
  free(s2);
  free(s3);
  art_deinit(&x);
  art_deinit(&y);
}

static void test_gc_limits(void **state) {
  fixture_t *f = *state;
  kiln_cache_gc_report_t r;
  memset(&r, 0x5a, sizeof r);
  assert_code(kiln_cache_gc(f->cache, 0, &r), KILN_STATUS_INVALID_ARGUMENT);
  assert_int_equal(r.artifacts_evicted, 0);
  assert_int_equal(kiln_cache_capacity(f->cache), 0);

  /* With a capacity, 0 means "down to the capacity". */
  f->options.capacity_bytes = 25000;
  reopen(f, NULL);
  assert_int_equal(kiln_cache_capacity(f->cache), 25000);
  assert_int_equal(stats_of(f->cache).capacity_bytes, 25000);
  art_t arts[GC_N];
  put_gc_set(f, arts, 240);
  assert_ok(kiln_cache_gc(f->cache, 0, &r));
  assert_int_equal(r.artifacts_evicted, 3);
  assert_int_equal(r.bytes_stored, 2 * GC_SIZE);
  assert_false(r.target_unreachable);
  for (int i = 0; i < 3; i++) assert_lookup_missing(f->cache, arts[i].key);
  for (int i = 3; i < GC_N; i++) assert_lookup_digest(f->cache, arts[i].key, arts[i].digest);
  /* An explicit maximum overrides the capacity. */
  assert_ok(kiln_cache_gc(f->cache, GC_SIZE, &r));
  assert_int_equal(r.artifacts_evicted, 1);
  for (int i = 0; i < GC_N; i++) art_deinit(&arts[i]);
}

/* ---- sources ---- */

static void test_source_put(void **state) {
  fixture_t *f = *state;
  unsigned char *src = kiln_test_make_data(20000, true, 250);
  char want[65];
  digest_hex_of(src, 20000, want);
  char wrong[65];
  source_digest(251, wrong);
  kiln_digest_hex_t out;
  memset(&out, 0, sizeof out);
  assert_code(kiln_cache_source_put(f->cache, src, 20000, wrong, "a.mlir", 1, NULL, &out),
              KILN_STATUS_INVALID_ARGUMENT);
  assert_int_equal(out.text[0], '\0');
  assert_int_equal(blob_files(f->dir), 0);
  assert_int_equal(subdir_entries(f->dir, "tmp"), 0);
  assert_int_equal(stats_of(f->cache).totals.sources, 0);
  assert_code(kiln_cache_source_put(f->cache, src, 20000, "nope", "a.mlir", 1, NULL, &out),
              KILN_STATUS_INVALID_ARGUMENT);
  assert_int_equal(blob_files(f->dir), 0);

  char sem[65];
  source_digest(252, sem);
  assert_ok(kiln_cache_source_put(f->cache, src, 20000, want, "a.mlir", 1, sem, &out));
  assert_string_equal(out.text, want);
  assert_ok(kiln_cache_source_put(f->cache, src, 20000, NULL, "a.mlir", 1, sem, &out));
  assert_string_equal(out.text, want);
  assert_ok(kiln_cache_source_put(f->cache, src, 20000, want, "b.mlir", 2, NULL, NULL));
  kiln_cache_stats_t s = stats_of(f->cache);
  assert_int_equal(s.totals.sources, 1);
  assert_int_equal(s.totals.source_bytes, 20000);
  assert_int_equal(blob_files(f->dir), 1);
  assert_blob_equals(f->cache, want, src, 20000);
  kiln_cache_verify_report_t report;
  assert_ok(kiln_cache_verify(f->cache, false, NULL, NULL, &report));
  assert_int_equal(report.n_problems, 0);
  kiln_cache_verify_report_deinit(&report);
  free(src);
}

/* ---- source uploads ---- */

/* Writes `len` bytes of `data` in `chunk`-byte pieces. */
static void upload_write_all(kiln_cache_upload_t *u, const unsigned char *data, size_t len, size_t chunk) {
  for (size_t off = 0; off < len; off += chunk) {
    assert_ok(kiln_cache_source_upload_write(u, data + off, len - off < chunk ? len - off : chunk));
  }
}

static void test_source_upload(void **state) {
  fixture_t *f = *state;
  /* 3 MiB of MLIR-like text: compressible, so the writer buffers and compresses. */
  size_t len = 3 * MIB + 123;
  unsigned char *src = kiln_test_make_data(len, true, 300);
  char want[65];
  digest_hex_of(src, len, want);
  kiln_index_source_t rec;
  assert_code(kiln_cache_source_get(f->cache, want, &rec), KILN_STATUS_NOT_FOUND);
  assert_code(kiln_cache_source_get(f->cache, "nope", &rec), KILN_STATUS_INVALID_ARGUMENT);

  kiln_cache_upload_t *u = NULL;
  assert_ok(kiln_cache_source_upload_begin(f->cache, want, len, &u));
  upload_write_all(u, src, len, 1 * MIB);
  /* One byte too many is refused at once. */
  assert_code(kiln_cache_source_upload_write(u, "x", 1), KILN_STATUS_INVALID_ARGUMENT);
  char sem[65];
  source_digest(301, sem);
  assert_ok(kiln_cache_source_upload_commit(u, "big.mlir", 1, sem, &rec));
  assert_string_equal(rec.digest, want);
  assert_string_equal(rec.semantic_digest, sem);
  assert_string_equal(rec.name, "big.mlir");
  assert_int_equal(rec.format, 1);
  assert_int_equal(rec.size, len);
  assert_true(rec.stored_size > 0 && rec.stored_size < len); /* compressed */
  kiln_index_source_deinit(&rec);
  assert_blob_equals(f->cache, want, src, len);
  assert_int_equal(subdir_entries(f->dir, "tmp"), 0);

  assert_ok(kiln_cache_source_get(f->cache, want, &rec));
  assert_string_equal(rec.name, "big.mlir");
  kiln_index_source_deinit(&rec);

  /* A second upload of the same digest stores nothing new and keeps the first row. */
  assert_ok(kiln_cache_source_upload_begin(f->cache, want, len, &u));
  upload_write_all(u, src, len, 700 * KIB);
  assert_ok(kiln_cache_source_upload_commit(u, "other.mlir", 2, NULL, &rec));
  assert_string_equal(rec.name, "big.mlir");
  assert_int_equal(rec.format, 1);
  kiln_index_source_deinit(&rec);
  assert_int_equal(blob_files(f->dir), 1);
  assert_int_equal(stats_of(f->cache).totals.sources, 1);

  /* A source whose blob was deleted behind the cache's back reads as missing and
   * loses its row. */
  char path[512];
  snprintf(path, sizeof path, "%s/blobs/%.2s/%s.zst", f->dir, want, want);
  assert_int_equal(unlink(path), 0);
  assert_code(kiln_cache_source_get(f->cache, want, &rec), KILN_STATUS_NOT_FOUND);
  assert_int_equal(stats_of(f->cache).totals.sources, 0);
  free(src);
}

static void test_source_upload_failures_leave_nothing(void **state) {
  fixture_t *f = *state;
  size_t len = 200 * KIB;
  unsigned char *src = kiln_test_make_data(len, false, 310);
  char want[65], wrong[65];
  digest_hex_of(src, len, want);
  source_digest(311, wrong);
  kiln_cache_upload_t *u = NULL;
  kiln_index_source_t rec;

  assert_code(kiln_cache_source_upload_begin(f->cache, "sha256:x", len, &u), KILN_STATUS_INVALID_ARGUMENT);
  assert_null(u);
  assert_code(kiln_cache_source_upload_begin(f->cache, want, 0, &u), KILN_STATUS_INVALID_ARGUMENT);
  assert_null(u);

  /* Short: fewer bytes than declared. */
  assert_ok(kiln_cache_source_upload_begin(f->cache, want, len, &u));
  upload_write_all(u, src, len - 1, 64 * KIB);
  assert_int_equal(subdir_entries(f->dir, "tmp"), 1); /* spooled on disk, not in memory */
  kiln_status_t st = kiln_cache_source_upload_commit(u, "a.mlir", 1, NULL, &rec);
  assert_non_null(strstr(kiln_status_message(st), "received 204799 bytes"));
  assert_code(st, KILN_STATUS_INVALID_ARGUMENT);
  assert_int_equal(rec.digest[0], '\0');

  /* Declared digest that the bytes do not have: both digests in the message. */
  assert_ok(kiln_cache_source_upload_begin(f->cache, wrong, len, &u));
  upload_write_all(u, src, len, 64 * KIB);
  st = kiln_cache_source_upload_commit(u, "a.mlir", 1, NULL, NULL);
  assert_non_null(strstr(kiln_status_message(st), want));
  assert_non_null(strstr(kiln_status_message(st), wrong));
  assert_code(st, KILN_STATUS_INVALID_ARGUMENT);

  /* Aborted half way. */
  assert_ok(kiln_cache_source_upload_begin(f->cache, want, len, &u));
  upload_write_all(u, src, len / 2, 64 * KIB);
  kiln_cache_source_upload_abort(u);
  kiln_cache_source_upload_abort(NULL);

  assert_int_equal(subdir_entries(f->dir, "tmp"), 0);
  assert_int_equal(blob_files(f->dir), 0);
  assert_int_equal(stats_of(f->cache).totals.sources, 0);
  assert_code(kiln_cache_source_get(f->cache, want, &rec), KILN_STATUS_NOT_FOUND);
  free(src);
}

/* ---- artifacts by digest, and pages ---- */

static void test_artifact_get_by_digest_and_pages(void **state) {
  fixture_t *f = *state;
  art_t a, b;
  art_init(&a, 320, 5000, true, 320);
  art_init(&b, 321, 5000, true, 320); /* same bytes, another key */
  kiln_index_label_t labels[] = {{"model", "resnet"}};
  kiln_cache_provenance_t prov = {.submitter = "tester", .labels = labels, .n_labels = 1};
  assert_ok(kiln_cache_artifact_put(f->cache, &a.parts, a.data, a.len, &prov, NULL));
  atomic_fetch_add(&g_now_ms, 10);
  put_art(f->cache, &b);
  kiln_index_artifact_t rec;
  assert_ok(kiln_cache_artifact_get_by_digest(f->cache, a.digest, &rec));
  assert_string_equal(rec.cache_key, b.key); /* the newest row */
  kiln_index_artifact_deinit(&rec);
  char other[65];
  source_digest(322, other);
  assert_code(kiln_cache_artifact_get_by_digest(f->cache, other, &rec), KILN_STATUS_NOT_FOUND);
  assert_code(kiln_cache_artifact_get_by_digest(f->cache, "ABC", &rec), KILN_STATUS_INVALID_ARGUMENT);
  /* Lookups by digest are not hits. */
  assert_int_equal(stats_of(f->cache).hits, 0);

  kiln_index_artifact_t *r = NULL;
  size_t n = 0;
  kiln_index_page_query_t q = {.limit = 1};
  assert_ok(kiln_cache_artifact_find_page(f->cache, &q, &r, &n));
  assert_int_equal(n, 1);
  assert_string_equal(r[0].cache_key, b.key);
  kiln_index_page_cursor_t cursor = {.created_ms = r[0].created_ms};
  memcpy(cursor.artifact_digest, r[0].artifact_digest, sizeof cursor.artifact_digest);
  memcpy(cursor.cache_key, r[0].cache_key, sizeof cursor.cache_key);
  kiln_index_artifacts_free(r, n);
  q.after = &cursor;
  q.limit = 10;
  assert_ok(kiln_cache_artifact_find_page(f->cache, &q, &r, &n));
  assert_int_equal(n, 1);
  assert_string_equal(r[0].cache_key, a.key);
  assert_int_equal(r[0].n_labels, 1);
  assert_string_equal(r[0].submitter, "tester");
  kiln_index_artifacts_free(r, n);
  art_deinit(&a);
  art_deinit(&b);
}

/* ---- a failing touch ---- */

/* The style rule: out-params are written only on success. A lookup that fails
 * after it has read the row (here: another connection holds the write lock, so a
 * lookup that writes its hit gets UNAVAILABLE after the 5 s busy timeout) must leave
 * the record clear, or its strings leak in every caller that, rightly, frees
 * nothing on failure. A lookup that does not write while it holds the record
 * succeeds here at once, which is fine too. */
static void test_lookup_failure_leaves_record_clear(void **state) {
  fixture_t *f = *state;
  art_t a;
  art_init(&a, 260, 1000, false, 260);
  put_art(f->cache, &a);
  char db[PATH_MAX];
  snprintf(db, sizeof db, "%s/index.db", f->dir);
  kiln_index_t *locker = NULL;
  assert_ok(kiln_index_open(db, &locker));
  assert_ok(kiln_index_begin(locker));
  kiln_index_artifact_t rec;
  kiln_status_t st = kiln_cache_artifact_lookup(f->cache, a.key, &rec);
  kiln_index_rollback(locker);
  kiln_index_close(locker);
  kiln_status_code_t code = kiln_status_code(st);
  kiln_status_free(st);
  bool written = rec.target != NULL || rec.artifact_digest[0] != '\0';
  if (code == KILN_STATUS_OK) {
    assert_true(written);
    assert_string_equal(rec.artifact_digest, a.digest);
    kiln_index_artifact_deinit(&rec);
    art_deinit(&a);
    return;
  }
  kiln_index_artifact_deinit(&rec); /* so that the failure below is the only report */
  if (written) {
    fail_msg(
        "kiln_cache_artifact_lookup failed with %s but left the record filled in "
        "(its strings leak in a caller that frees nothing on failure)",
        kiln_status_code_name(code));
  }
  art_deinit(&a);
}

/* ---- threads ---- */

#define CC_KEYS    24
#define CC_THREADS 4

enum { CC_PUT, CC_LOOKUP, CC_GET, CC_PIN, CC_GC, CC_OPS };
static const char *const cc_op_names[CC_OPS] = {"put", "lookup", "get_blob", "pin", "gc"};

typedef struct cc_s {
  kiln_cache_t *cache;
  art_t arts[CC_KEYS];
  atomic_bool stop;
  atomic_int errors;
  atomic_int op_errors[CC_OPS];
  atomic_ulong ops;
  atomic_ulong ok_reads;
  pthread_mutex_t lock;
  char first_error[CC_OPS][512]; /* the first error of each operation */
} cc_t;

typedef struct cc_thread_s {
  cc_t *cc;
  uint64_t seed;
} cc_thread_t;

static void cc_error(cc_t *cc, int op, const char *what, const art_t *a, kiln_status_t st) {
  atomic_fetch_add(&cc->errors, 1);
  if (atomic_fetch_add(&cc->op_errors[op], 1) == 0) {
    pthread_mutex_lock(&cc->lock);
    snprintf(cc->first_error[op], sizeof cc->first_error[op], "%s (key %.12s): %s: %s", what, a->key,
             kiln_status_code_name(kiln_status_code(st)), kiln_status_message(st));
    pthread_mutex_unlock(&cc->lock);
  }
  kiln_status_free(st);
}

static void *cc_worker(void *arg) {
  cc_thread_t *t = arg;
  cc_t *cc = t->cc;
  uint64_t s = t->seed;
  while (!atomic_load(&cc->stop)) {
    const art_t *a = &cc->arts[kiln_test_random_next(&s) % CC_KEYS];
    unsigned op = (unsigned)(kiln_test_random_next(&s) % 100);
    kiln_status_t st = NULL;
    if (op < 35) {
      st = kiln_cache_artifact_put(cc->cache, &a->parts, a->data, a->len, NULL, NULL);
      if (st) cc_error(cc, CC_PUT, "put", a, st);
    } else if (op < 65) {
      kiln_index_artifact_t rec;
      st = kiln_cache_artifact_lookup(cc->cache, a->key, &rec);
      if (!st) {
        if (strcmp(rec.artifact_digest, a->digest) != 0) {
          cc_error(cc, CC_LOOKUP, "lookup returned another digest", a,
                   KILN_STATUS(KILN_STATUS_INTERNAL, "got %s", rec.artifact_digest));
        }
      } else if (kiln_status_code(st) != KILN_STATUS_NOT_FOUND) {
        cc_error(cc, CC_LOOKUP, "lookup", a, st);
        st = NULL;
      }
      kiln_status_free(st);
      kiln_index_artifact_deinit(&rec); /* a no-op on a clear record */
    } else if (op < 85) {
      void *p = NULL;
      size_t len = 0;
      st = kiln_cache_get_blob(cc->cache, a->digest, &p, &len);
      if (!st) {
        if (len != a->len || (len && memcmp(p, a->data, len) != 0)) {
          cc_error(cc, CC_GET, "get_blob returned other bytes", a,
                   KILN_STATUS(KILN_STATUS_INTERNAL, "%zu bytes", len));
        } else {
          atomic_fetch_add(&cc->ok_reads, 1);
        }
        kiln_free(p);
      } else if (kiln_status_code(st) != KILN_STATUS_NOT_FOUND) {
        cc_error(cc, CC_GET, "get_blob", a, st);
      } else {
        kiln_status_free(st);
      }
    } else if (op < 95) {
      bool pin = (kiln_test_random_next(&s) & 1) != 0;
      st = kiln_cache_pin(cc->cache, (kiln_test_random_next(&s) & 1) ? a->key : a->digest, pin, NULL);
      if (st && kiln_status_code(st) != KILN_STATUS_NOT_FOUND)
        cc_error(cc, CC_PIN, "pin", a, st);
      else
        kiln_status_free(st);
    } else {
      kiln_cache_gc_report_t r;
      st = kiln_cache_gc(cc->cache, 150 * KIB, &r);
      if (st) cc_error(cc, CC_GC, "gc", a, st);
    }
    atomic_fetch_add(&cc->ops, 1);
  }
  return NULL;
}

static void test_concurrent_operations(void **state) {
  fixture_t *f = *state;
  atomic_store(&g_now_ms, 1700000000000);
  cc_t *cc = calloc(1, sizeof *cc);
  assert_non_null(cc);
  cc->cache = f->cache;
  pthread_mutex_init(&cc->lock, NULL);
  for (int i = 0; i < CC_KEYS; i++) {
    /* 16 distinct contents over 24 keys: some keys share a blob. */
    uint64_t content = (uint64_t)(i % 16);
    size_t len = 512 + (size_t)(content * 2741) % (48 * KIB);
    art_init(&cc->arts[i], 300 + (uint64_t)i, len, content % 2 == 0, 300 + content);
  }
  pthread_t threads[CC_THREADS];
  cc_thread_t args[CC_THREADS];
  for (int i = 0; i < CC_THREADS; i++) {
    args[i] = (cc_thread_t){cc, 0x1234u + (uint64_t)i * 7919u};
    assert_int_equal(pthread_create(&threads[i], NULL, cc_worker, &args[i]), 0);
  }
  struct timespec one_second = {1, 0};
  nanosleep(&one_second, NULL);
  atomic_store(&cc->stop, true);
  for (int i = 0; i < CC_THREADS; i++) pthread_join(threads[i], NULL);
  fprintf(stderr, "  %lu operations, %lu verified reads, %d errors\n", (unsigned long)atomic_load(&cc->ops),
          (unsigned long)atomic_load(&cc->ok_reads), atomic_load(&cc->errors));
  for (int op = 0; op < CC_OPS; op++) {
    if (atomic_load(&cc->op_errors[op])) {
      fprintf(stderr, "  %d %s error(s), first: %s\n", atomic_load(&cc->op_errors[op]), cc_op_names[op],
              cc->first_error[op]);
    }
  }
  /* Before anything heals the index: every row has an intact blob. */
  kiln_cache_verify_report_t report;
  assert_ok(kiln_cache_verify(f->cache, false, NULL, NULL, &report));
  size_t problems = report.n_problems;
  if (problems) print_problems(&report);
  kiln_cache_verify_report_deinit(&report);
  int errors = atomic_load(&cc->errors);
  if (errors || problems) {
    for (int i = 0; i < CC_KEYS; i++) art_deinit(&cc->arts[i]);
    pthread_mutex_destroy(&cc->lock);
    free(cc);
    fail_msg(
        "%d operations failed with other than NOT_FOUND; the final verify found %zu "
        "problem(s)",
        errors, problems);
  }
  assert_true(atomic_load(&cc->ops) > 100);
  assert_int_equal(subdir_entries(f->dir, "tmp"), 0);
  for (int i = 0; i < CC_KEYS; i++) {
    kiln_index_artifact_t rec;
    kiln_status_t st = kiln_cache_artifact_lookup(f->cache, cc->arts[i].key, &rec);
    if (st) {
      assert_code(st, KILN_STATUS_NOT_FOUND);
    } else {
      assert_string_equal(rec.artifact_digest, cc->arts[i].digest);
      kiln_index_artifact_deinit(&rec);
      assert_blob_equals(f->cache, cc->arts[i].digest, cc->arts[i].data, cc->arts[i].len);
    }
  }
  for (int i = 0; i < CC_KEYS; i++) art_deinit(&cc->arts[i]);
  pthread_mutex_destroy(&cc->lock);
  free(cc);
}

/* ---- a put racing gc ----
 *
 * gc deletes an artifact's row, finds no other row naming its blob and nobody
 * reading it, and removes the file. A put of the same bytes that found the file
 * still there ("already stored") before the unlink and registers itself in the
 * in-use set after gc looked at it ends with a row whose blob is gone. Writers pin
 * what they just stored: a pinned row whose blob is missing is that race. */

#define RACE_WRITERS 3

typedef struct race_s {
  kiln_cache_t *cache;
  art_t arts[RACE_WRITERS];
  atomic_bool stop;
  atomic_int dangling;       /* pinned row left without its blob */
  atomic_int pinned_evicted; /* pinned row evicted (and its blob removed) */
  atomic_int errors;
  atomic_ulong rounds;
  pthread_mutex_t lock;
  char first_error[512];
} race_t;

typedef struct race_arg_s {
  race_t *race;
  int i;
} race_arg_t;

static void race_error(race_t *race, const char *what, kiln_status_t st) {
  if (atomic_fetch_add(&race->errors, 1) == 0) {
    pthread_mutex_lock(&race->lock);
    snprintf(race->first_error, sizeof race->first_error, "%s: %s: %s", what,
             kiln_status_code_name(kiln_status_code(st)), kiln_status_message(st));
    pthread_mutex_unlock(&race->lock);
  }
  kiln_status_free(st);
}

static void *race_writer(void *arg) {
  race_arg_t *ra = arg;
  race_t *race = ra->race;
  const art_t *a = &race->arts[ra->i];
  while (!atomic_load(&race->stop)) {
    kiln_status_t st = kiln_cache_artifact_put(race->cache, &a->parts, a->data, a->len, NULL, NULL);
    if (st) {
      race_error(race, "put", st);
      continue;
    }
    st = kiln_cache_pin(race->cache, a->key, true, NULL);
    if (kiln_status_code(st) == KILN_STATUS_NOT_FOUND) {
      kiln_status_free(st); /* evicted between put and pin: fine */
      continue;
    }
    if (st) {
      race_error(race, "pin", st);
      continue;
    }
    /* Pinned: gc cannot take it now, so its blob must be there. */
    void *p = NULL;
    size_t len = 0;
    st = kiln_cache_get_blob(race->cache, a->digest, &p, &len);
    if (kiln_status_code(st) == KILN_STATUS_NOT_FOUND) {
      kiln_status_free(st);
      /* Which way was it lost: is the pinned row still there (without its blob), or
       * was the row evicted although pinned? */
      st = kiln_cache_pin(race->cache, a->key, true, NULL);
      atomic_fetch_add(
          kiln_status_code(st) == KILN_STATUS_NOT_FOUND ? &race->pinned_evicted : &race->dangling, 1);
      kiln_status_free(st);
    } else if (st) {
      race_error(race, "get_blob", st);
    } else {
      if (len != a->len || memcmp(p, a->data, len) != 0) {
        race_error(race, "get_blob", KILN_STATUS(KILN_STATUS_INTERNAL, "other bytes"));
      }
      kiln_free(p);
    }
    st = kiln_cache_pin(race->cache, a->key, false, NULL);
    if (st && kiln_status_code(st) != KILN_STATUS_NOT_FOUND)
      race_error(race, "unpin", st);
    else
      kiln_status_free(st);
    atomic_fetch_add(&race->rounds, 1);
  }
  return NULL;
}

static void *race_collector(void *arg) {
  race_t *race = arg;
  while (!atomic_load(&race->stop)) {
    kiln_cache_gc_report_t r;
    kiln_status_t st = kiln_cache_gc(race->cache, 1, &r);
    if (st) race_error(race, "gc", st);
  }
  return NULL;
}

static void test_put_racing_gc_keeps_blob(void **state) {
  fixture_t *f = *state;
  race_t *race = calloc(1, sizeof *race);
  assert_non_null(race);
  race->cache = f->cache;
  pthread_mutex_init(&race->lock, NULL);
  for (int i = 0; i < RACE_WRITERS; i++)
    art_init(&race->arts[i], 400 + (uint64_t)i, 700, false, 400 + (uint64_t)i);
  pthread_t writers[RACE_WRITERS], collector;
  race_arg_t args[RACE_WRITERS];
  for (int i = 0; i < RACE_WRITERS; i++) {
    args[i] = (race_arg_t){race, i};
    assert_int_equal(pthread_create(&writers[i], NULL, race_writer, &args[i]), 0);
  }
  assert_int_equal(pthread_create(&collector, NULL, race_collector, race), 0);
  int64_t deadline = kiln_time_monotonic_ns() + 2500 * 1000000LL;
  while (kiln_time_monotonic_ns() < deadline && atomic_load(&race->dangling) == 0 &&
         atomic_load(&race->pinned_evicted) == 0) {
    struct timespec ms = {0, 10 * 1000000};
    nanosleep(&ms, NULL);
  }
  atomic_store(&race->stop, true);
  for (int i = 0; i < RACE_WRITERS; i++) pthread_join(writers[i], NULL);
  pthread_join(collector, NULL);
  int dangling = atomic_load(&race->dangling);
  int pinned_evicted = atomic_load(&race->pinned_evicted);
  fprintf(stderr, "  %lu rounds, %d dangling, %d pinned evicted\n", (unsigned long)atomic_load(&race->rounds),
          dangling, pinned_evicted);
  int errors = atomic_load(&race->errors);
  char first[512];
  memcpy(first, race->first_error, sizeof first);
  for (int i = 0; i < RACE_WRITERS; i++) art_deinit(&race->arts[i]);
  pthread_mutex_destroy(&race->lock);
  free(race);
  if (errors) fail_msg("%d errors; first: %s", errors, first);
  if (dangling || pinned_evicted) {
    fail_msg(
        "after a put returned OK and its row was pinned, get_blob was NOT_FOUND: %d "
        "time(s) the pinned row had no blob, %d time(s) gc had evicted the pinned row",
        dangling, pinned_evicted);
  }
}

/* ---- disk full ---- */

static void test_disk_full(void **state) {
  fixture_t *f = *state;
  snprintf(f->mount, sizeof f->mount, "%s/small", f->root);
  assert_int_equal(mkdir(f->mount, 0700), 0);
  if (geteuid() != 0 || mount("tmpfs", f->mount, "tmpfs", 0, "size=1m") != 0) {
    f->mount[0] = '\0';
    skip(); /* needs root (CAP_SYS_ADMIN) to mount a small tmpfs */
  }
  char dir[400];
  snprintf(dir, sizeof dir, "%s/cache", f->mount);
  kiln_cache_t *cache = NULL;
  assert_ok(kiln_cache_open(dir, &f->options, &cache, NULL));
  art_t early[4];
  for (int i = 0; i < 4; i++) {
    art_init(&early[i], 500 + (uint64_t)i, 8 * KIB + (size_t)i * 1000, i % 2 == 1, 500 + (uint64_t)i);
    assert_ok(kiln_cache_artifact_put(cache, &early[i].parts, early[i].data, early[i].len, NULL, NULL));
  }
  struct statvfs vfs;
  assert_int_equal(statvfs(f->mount, &vfs), 0);
  size_t free_bytes = (size_t)vfs.f_bavail * vfs.f_frsize;
  art_t big;
  art_init(&big, 510, free_bytes + 256 * KIB, false, 510);
  kiln_index_artifact_t rec;
  assert_code(kiln_cache_artifact_put(cache, &big.parts, big.data, big.len, NULL, &rec),
              KILN_STATUS_RESOURCE_EXHAUSTED);
  assert_null(rec.target);
  assert_lookup_missing(cache, big.key);
  char tmp[PATH_MAX];
  snprintf(tmp, sizeof tmp, "%s/tmp", dir);
  assert_int_equal(count_entries(tmp), 0);
  for (int i = 0; i < 4; i++) {
    assert_lookup_digest(cache, early[i].key, early[i].digest);
    assert_blob_equals(cache, early[i].digest, early[i].data, early[i].len);
  }
  kiln_cache_verify_report_t report;
  assert_ok(kiln_cache_verify(cache, false, NULL, NULL, &report));
  if (report.n_problems) print_problems(&report);
  assert_int_equal(report.n_problems, 0);
  kiln_cache_verify_report_deinit(&report);
  /* A small put still fits afterwards. */
  art_t after;
  art_init(&after, 511, 4000, false, 511);
  assert_ok(kiln_cache_artifact_put(cache, &after.parts, after.data, after.len, NULL, NULL));
  assert_blob_equals(cache, after.digest, after.data, after.len);
  kiln_cache_close(cache);
  for (int i = 0; i < 4; i++) art_deinit(&early[i]);
  art_deinit(&big);
  art_deinit(&after);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_flags_normalize),
      cmocka_unit_test(test_key_pinned),
      cmocka_unit_test(test_key_deterministic_and_sensitive),
      cmocka_unit_test(test_key_normalizes_flags),
      cmocka_unit_test(test_key_rejects_malformed),
      cmocka_unit_test(test_keys_of_many_targets),
      cmocka_unit_test(test_key_encoding_unambiguous),
      cmocka_unit_test_setup_teardown(test_put_record_fields, setup, teardown),
      cmocka_unit_test_setup_teardown(test_lookup_counts_hits_and_misses, setup, teardown),
      cmocka_unit_test_setup_teardown(test_put_same_key_replaces_and_keeps_pin, setup, teardown),
      cmocka_unit_test_setup_teardown(test_put_provenance_job_and_source_name, setup, teardown),
      cmocka_unit_test_setup_teardown(test_put_replace_frees_old_blob, setup, teardown),
      cmocka_unit_test_setup_teardown(test_identical_bytes_share_one_blob, setup, teardown),
      cmocka_unit_test_setup_teardown(test_get_blob_and_reader, setup, teardown),
      cmocka_unit_test_setup_teardown(test_corrupt_blob_is_quarantined, setup, teardown),
      cmocka_unit_test_setup_teardown(test_reads_verify_recorded_checks, setup, teardown),
      cmocka_unit_test_setup_teardown(test_blobs_without_checks_read_by_sha256, setup, teardown),
      cmocka_unit_test_setup_teardown(test_verify_audits_with_sha256, setup, teardown),
      cmocka_unit_test_setup_teardown(test_checks_go_with_their_blobs, setup, teardown),
      cmocka_unit_test_setup_teardown(test_deleted_blob_is_a_miss, setup, teardown),
      cmocka_unit_test_setup_teardown(test_probe_memo, setup, teardown),
      cmocka_unit_test_setup_teardown(test_memo_answers_without_io, setup, teardown),
      cmocka_unit_test_setup_teardown(test_open_repairs, setup, teardown),
      cmocka_unit_test_setup_teardown(test_open_repair_counts_dangling_rows, setup, teardown),
      cmocka_unit_test_setup_teardown(test_open_removes_stray_directories, setup, teardown),
      cmocka_unit_test_setup_teardown(test_verify_clean_store, setup, teardown),
      cmocka_unit_test_setup_teardown(test_damaged_index_is_reported_and_never_repaired_from, setup,
                                      teardown),
      cmocka_unit_test_setup_teardown(test_verify_repairs, setup, teardown),
      cmocka_unit_test_setup_teardown(test_verify_dry_run_changes_nothing, setup, teardown),
      cmocka_unit_test_setup_teardown(test_verify_spares_young_orphans, setup, teardown),
      cmocka_unit_test_setup_teardown(test_verify_can_be_cancelled, setup, teardown),
      cmocka_unit_test_setup_teardown(test_verify_keeps_rows_put_during_scan, setup, teardown),
      cmocka_unit_test_setup_teardown(test_pin_by_digest_and_key, setup, teardown),
      cmocka_unit_test_setup_teardown(test_gc_evicts_least_recently_used, setup, teardown),
      cmocka_unit_test_setup_teardown(test_gc_never_evicts_pinned, setup, teardown),
      cmocka_unit_test_setup_teardown(test_gc_spares_blobs_being_read, setup, teardown),
      cmocka_unit_test_setup_teardown(test_gc_sources_after_artifacts, setup, teardown),
      cmocka_unit_test_setup_teardown(test_gc_limits, setup, teardown),
      cmocka_unit_test_setup_teardown(test_source_put, setup, teardown),
      cmocka_unit_test_setup_teardown(test_source_upload, setup, teardown),
      cmocka_unit_test_setup_teardown(test_source_upload_failures_leave_nothing, setup, teardown),
      cmocka_unit_test_setup_teardown(test_artifact_get_by_digest_and_pages, setup, teardown),
      cmocka_unit_test_setup_teardown(test_lookup_failure_leaves_record_clear, setup, teardown),
      cmocka_unit_test_setup_teardown(test_concurrent_operations, setup, teardown),
      cmocka_unit_test_setup_teardown(test_put_racing_gc_keeps_blob, setup, teardown),
      cmocka_unit_test_setup_teardown(test_disk_full, setup, teardown),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
