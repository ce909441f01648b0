/* Unit tests for cache/index: open creates the schema at the latest version and a
 * reopen keeps the data; a database from a newer kiln is FAILED_PRECONDITION naming
 * both versions; a file that is not a database is DATA_LOSS; bad arguments are
 * INVALID_ARGUMENT; a file at schema version 2 (before job_id and source_name)
 * migrates, its rows reading "" for both; a file at version 3 (before blob checks)
 * migrates, keeping its rows, with no check recorded, and the new table refuses a
 * check that is not 16 bytes. Blob checks: put, replace, get (NOT_FOUND when
 * none), a malformed digest, drop_unreferenced sparing a check whose blob a row
 * names, drop_digest taking the check with the rows. Artifacts: every field and the labels
 * round-trip; job_id and source_name come back from every query that reads rows; a
 * replace keeps pin and hits and replaces labels and provenance; get_by_digest
 * returns the newest row;
 * record_hits (a missing row is not an error and creates none); set_pinned by key
 * and by digest (NOT_FOUND otherwise); evict spares a pinned row and takes the
 * labels with the row; find_page by every filter alone and combined (legacy and
 * time bounds included), by one and two labels, the default limit, keyset pages
 * that list each row once in (created desc, digest, key) order even when rows
 * arrive between pages, and its argument checks (the label cap included); lru
 * skips pinned rows and orders by last access. Sources: put/get/touch, evict
 * (sparing a pinned source) and lru, which skips sources an artifact names.
 * Blobs: digest_referenced, visit_digests (each digest once, stops on failure,
 * may drop rows), drop_digest with and without a quarantine record (the table
 * read back with the sqlite3 shell), and totals. Transactions: explicit
 * begin/commit/rollback, with put and drop_digest joining them. Two connections:
 * a writer holding the lock makes the other's writes fail with UNAVAILABLE after
 * its busy timeout while its reads go on (WAL).
 * Threads: four connections opening one fresh file at once and doing 200 mixed
 * operations each, with consistent totals afterwards. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <limits.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "base/digest.h"
#include "base/status.h"
#include "cache/index.h"
#include "cache/index_schema.h"
#include "tests/unit/support/testing.h"

/* ---- Fixture ------------------------------------------------------------- */

typedef struct fixture_s {
  char *dir;           /* fresh temporary directory */
  char path[PATH_MAX]; /* dir/index.db */
  kiln_index_t *index; /* open on path */
} fixture_t;

static int setup(void **state) {
  fixture_t *f = calloc(1, sizeof *f);
  if (!f) return -1;
  if (!(f->dir = kiln_test_tmpdir_in("/tmp", "kiln-index"))) return -1;
  snprintf(f->path, sizeof f->path, "%s/index.db", f->dir);
  kiln_status_t st = kiln_index_open(f->path, &f->index);
  if (st) {
    fprintf(stderr, "open: %s\n", kiln_status_message(st));
    kiln_status_free(st);
    return -1;
  }
  *state = f;
  return 0;
}

static int teardown(void **state) {
  fixture_t *f = *state;
  kiln_index_close(f->index);
  kiln_test_remove_tree(f->dir);
  free(f->dir);
  free(f);
  return 0;
}

/* ---- Helpers --------------------------------------------------------------- */

#define assert_ok   kiln_test_assert_ok

#define assert_code kiln_test_assert_code

/* A digest derived from `seed` (the SHA-256 of the text). */
static void digest_hex(char out[KILN_INDEX_DIGEST_LEN + 1], const char *seed) {
  kiln_digest_t d;
  kiln_digest_of(seed, strlen(seed), &d);
  kiln_digest_hex_t hex;
  kiln_digest_to_hex(&d, &hex);
  memcpy(out, hex.text, sizeof hex.text);
}

static void digest_hexf(char out[KILN_INDEX_DIGEST_LEN + 1], const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));
static void digest_hexf(char out[KILN_INDEX_DIGEST_LEN + 1], const char *fmt, ...) {
  char seed[128];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(seed, sizeof seed, fmt, ap);
  va_end(ap);
  digest_hex(out, seed);
}

/* A complete artifact record with borrowed literal strings. */
static void make_artifact(kiln_index_artifact_t *a, const char *key_seed, const char *blob_seed,
                          const char *source_seed, int64_t created_ms) {
  memset(a, 0, sizeof *a);
  digest_hex(a->cache_key, key_seed);
  digest_hex(a->artifact_digest, blob_seed);
  digest_hex(a->source_digest, source_seed);
  a->target = "llvm-cpu:x86_64-linux-gnu:znver4";
  a->flags = "--iree-opt-level=O3\n--iree-llvmcpu-enable-ukernels=all";
  a->compiler = "iree-compiler 3.1.0 (llvm 22.0.0)";
  a->hal_version = 5;
  a->bytecode_version = (1u << 16) | 2u;
  a->size = 4096;
  a->stored_size = 1500;
  a->submitter = "alice@example";
  a->job_id = "job-0001";
  a->source_name = "model.mlir";
  a->created_ms = created_ms;
  a->last_access_ms = created_ms;
}

static void put_artifact(kiln_index_t *index, const char *key_seed, const char *blob_seed,
                         const char *source_seed, int64_t created_ms) {
  kiln_index_artifact_t a;
  make_artifact(&a, key_seed, blob_seed, source_seed, created_ms);
  assert_ok(kiln_index_artifact_put(index, &a));
}

static void make_source(kiln_index_source_t *s, const char *seed, const char *semantic_seed, int64_t ms) {
  memset(s, 0, sizeof *s);
  digest_hex(s->digest, seed);
  if (semantic_seed) digest_hex(s->semantic_digest, semantic_seed);
  s->name = "model.mlir";
  s->format = 2;
  s->size = 10000;
  s->stored_size = 3000;
  s->created_ms = ms;
  s->last_access_ms = ms;
}

/* Asserts that records[0..count) are, in order, the artifacts whose cache keys are
 * the digests of the NULL-terminated seed list. */
static void assert_keys(const kiln_index_artifact_t *records, size_t count, ...) {
  va_list ap;
  va_start(ap, count);
  size_t i = 0;
  for (const char *seed; (seed = va_arg(ap, const char *)) != NULL; i++) {
    char want[KILN_INDEX_DIGEST_LEN + 1];
    digest_hex(want, seed);
    if (i >= count) fail_msg("only %zu records; missing %s", count, seed);
    if (strcmp(records[i].cache_key, want) != 0)
      fail_msg("record %zu: want key of %s, got %s", i, seed, records[i].cache_key);
  }
  va_end(ap);
  assert_int_equal(i, count);
}

static int64_t now_ms_monotonic(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

/* ---- Opening and schema ---------------------------------------------------- */

static void test_open_creates_schema(void **state) {
  fixture_t *f = *state;
  assert_true(kiln_index_latest_schema_version() >= 1);
  assert_int_equal(kiln_index_schema_version(f->index), kiln_index_latest_schema_version());
  assert_int_equal(access(f->path, R_OK | W_OK), 0);
  kiln_index_totals_t t;
  memset(&t, 0xff, sizeof t);
  assert_ok(kiln_index_totals(f->index, &t));
  kiln_index_totals_t zero = {0};
  assert_memory_equal(&t, &zero, sizeof t);
}

static void test_reopen_is_noop(void **state) {
  fixture_t *f = *state;
  put_artifact(f->index, "k", "blob", "src", 100);
  kiln_index_close(f->index);
  f->index = NULL;
  assert_ok(kiln_index_open(f->path, &f->index));
  assert_int_equal(kiln_index_schema_version(f->index), kiln_index_latest_schema_version());
  kiln_index_artifact_t got;
  char key[65];
  digest_hex(key, "k");
  assert_ok(kiln_index_artifact_get(f->index, key, &got));
  assert_int_equal(got.created_ms, 100);
  assert_string_equal(got.job_id, "job-0001");
  assert_string_equal(got.source_name, "model.mlir");
  kiln_index_artifact_deinit(&got);
}

static void test_newer_schema_is_refused(void **state) {
  fixture_t *f = *state;
  /* Closing the last connection checkpoints the WAL into the file, whose header
   * holds user_version as a big-endian 32-bit integer at offset 60 (SQLite's
   * documented file format). */
  kiln_index_close(f->index);
  f->index = NULL;
  int newer = kiln_index_latest_schema_version() + 1;
  FILE *fp = fopen(f->path, "r+b");
  assert_non_null(fp);
  unsigned char be[4] = {(unsigned char)(newer >> 24), (unsigned char)(newer >> 16),
                         (unsigned char)(newer >> 8), (unsigned char)newer};
  assert_int_equal(fseek(fp, 60, SEEK_SET), 0);
  assert_int_equal(fwrite(be, 1, 4, fp), 4);
  assert_int_equal(fclose(fp), 0);

  kiln_index_t *index = (kiln_index_t *)&index; /* must be cleared */
  kiln_status_t st = kiln_index_open(f->path, &index);
  assert_int_equal(kiln_status_code(st), KILN_STATUS_FAILED_PRECONDITION);
  assert_null(index);
  char num[16];
  snprintf(num, sizeof num, "%d", newer);
  assert_non_null(strstr(kiln_status_message(st), num));
  snprintf(num, sizeof num, "%d", newer - 1);
  assert_non_null(strstr(kiln_status_message(st), num));
  assert_non_null(strstr(kiln_status_message(st), f->path));
  kiln_status_free(st);
}

static void test_garbage_file_is_data_loss(void **state) {
  fixture_t *f = *state;
  char path[PATH_MAX];
  snprintf(path, sizeof path, "%s/garbage.db", f->dir);
  FILE *fp = fopen(path, "wb");
  assert_non_null(fp);
  for (int i = 0; i < 512; i++) fputs("this is not a database, ", fp);
  assert_int_equal(fclose(fp), 0);
  kiln_index_t *index = NULL;
  kiln_status_t st = kiln_index_open(path, &index);
  assert_int_equal(kiln_status_code(st), KILN_STATUS_DATA_LOSS);
  assert_null(index);
  assert_non_null(strstr(kiln_status_message(st), path));
  kiln_status_free(st);
}

static void test_open_bad_paths(void **state) {
  fixture_t *f = *state;
  kiln_index_t *index = NULL;
  assert_code(kiln_index_open("", &index), KILN_STATUS_INVALID_ARGUMENT);
  assert_code(kiln_index_open(NULL, &index), KILN_STATUS_INVALID_ARGUMENT);
  char path[PATH_MAX];
  snprintf(path, sizeof path, "%s/no/such/dir/index.db", f->dir);
  kiln_status_t st = kiln_index_open(path, &index);
  assert_non_null(st);
  assert_null(index);
  assert_non_null(strstr(kiln_status_message(st), path));
  kiln_status_free(st);
}

/* A file written by a kiln whose schema stopped at version 2 (no job_id or
 * source_name): opening it applies the rest, keeps its rows (which read "" for
 * both) and takes new rows with both. */
static void test_previous_schema_migrates(void **state) {
  fixture_t *f = *state;
  assert_true(kiln_index_latest_schema_version() >= 3);
  char db[PATH_MAX], script[PATH_MAX];
  snprintf(db, sizeof db, "%s/v2.db", f->dir);
  snprintf(script, sizeof script, "%s/v2.sql", f->dir);
  char key[65], blob[65], src[65];
  digest_hex(key, "old-row");
  digest_hex(blob, "old-blob");
  digest_hex(src, "old-src");
  /* Built by the sqlite3 shell, as that kiln would have left it: migrations 1 and
   * 2, user_version 2, one row with a label in the columns version 2 had. */
  FILE *fp = fopen(script, "w");
  assert_non_null(fp);
  fprintf(fp, "BEGIN;\n%s\n%s\n", kiln_index_schema_migration(1), kiln_index_schema_migration(2));
  fprintf(fp,
          "INSERT INTO artifacts (cache_key, artifact_digest, source_digest, target, flags, "
          "compiler, hal_version, bytecode_version, size, stored_size, submitter, created_ms, "
          "last_access_ms, hits, pinned) VALUES ('%s', '%s', '%s', 'sm_89', '-O2', "
          "'kiln-mlir 0.1.0', 7, 65538, 4096, 1500, 'carol', 100, 150, 3, 1);\n"
          "INSERT INTO artifact_labels (cache_key, key, value) VALUES ('%s', 'team', 'ml');\n"
          "PRAGMA user_version = 2;\nCOMMIT;\n",
          key, blob, src, key);
  assert_int_equal(fclose(fp), 0);
  char cmd[3 * PATH_MAX];
  snprintf(cmd, sizeof cmd, "sqlite3 -bail '%s' < '%s'", db, script);
  assert_int_equal(system(cmd), 0);

  kiln_index_t *index = NULL;
  assert_ok(kiln_index_open(db, &index));
  assert_int_equal(kiln_index_schema_version(index), kiln_index_latest_schema_version());
  kiln_index_artifact_t got;
  assert_ok(kiln_index_artifact_get(index, key, &got));
  assert_string_equal(got.artifact_digest, blob);
  assert_string_equal(got.submitter, "carol");
  assert_int_equal(got.hits, 3);
  assert_true(got.pinned);
  assert_int_equal(got.n_labels, 1);
  assert_string_equal(got.job_id, "");
  assert_string_equal(got.source_name, "");
  kiln_index_artifact_deinit(&got);

  kiln_index_artifact_t a;
  make_artifact(&a, "new-row", "new-blob", "new-src", 200);
  assert_ok(kiln_index_artifact_put(index, &a));
  kiln_index_close(index);
  /* Reopened, nothing is migrated twice and both rows read back. */
  assert_ok(kiln_index_open(db, &index));
  assert_int_equal(kiln_index_schema_version(index), kiln_index_latest_schema_version());
  assert_ok(kiln_index_artifact_get(index, a.cache_key, &got));
  assert_string_equal(got.job_id, "job-0001");
  assert_string_equal(got.source_name, "model.mlir");
  kiln_index_artifact_deinit(&got);
  assert_ok(kiln_index_artifact_get(index, key, &got));
  assert_string_equal(got.job_id, "");
  kiln_index_artifact_deinit(&got);
  kiln_index_close(index);
}

/* Runs `sql` on database `db` with the sqlite3 shell (as an older kiln, or an
 * operator, would); returns the shell's exit status. */
static int sqlite_shell(const char *dir, const char *db, const char *sql) {
  char script[PATH_MAX];
  snprintf(script, sizeof script, "%s/shell.sql", dir);
  FILE *fp = fopen(script, "w");
  assert_non_null(fp);
  fputs(sql, fp);
  assert_int_equal(fclose(fp), 0);
  char cmd[3 * PATH_MAX];
  snprintf(cmd, sizeof cmd, "sqlite3 -bail '%s' < '%s' 2>/dev/null", db, script);
  return system(cmd);
}

/* Whether the quarantine table of index file `db` names `digest` (64 hex
 * characters, so safe to quote), read with the sqlite3 shell: kiln itself only
 * counts the table (totals), so a test of which digest went in reads it directly. */
static bool quarantined(const char *db, const char *digest) {
  char cmd[2 * PATH_MAX];
  snprintf(cmd, sizeof cmd,
           "sqlite3 -bail '%s' \"SELECT EXISTS (SELECT 1 FROM quarantine WHERE digest = '%s')\"", db, digest);
  FILE *p = popen(cmd, "r");
  assert_non_null(p);
  char line[16] = "";
  if (!fgets(line, sizeof line, p)) line[0] = '\0';
  int status = pclose(p);
  if (status != 0 || (strcmp(line, "0\n") != 0 && strcmp(line, "1\n") != 0))
    fail_msg("%s: exit status %d, output '%s'", cmd, status, line);
  return line[0] == '1';
}

/* A file written by a kiln whose schema stopped at version 3 (no blob checks):
 * opening it adds the table and keeps every row; its blobs have no check until one
 * is recorded. */
static void test_version_3_migrates_to_blob_checks(void **state) {
  fixture_t *f = *state;
  assert_true(kiln_index_latest_schema_version() >= 4);
  char db[PATH_MAX];
  snprintf(db, sizeof db, "%s/v3.db", f->dir);
  char key[65], blob[65], src[65];
  digest_hex(key, "v3-row");
  digest_hex(blob, "v3-blob");
  digest_hex(src, "v3-src");
  char sql[8192];
  snprintf(sql, sizeof sql,
           "BEGIN;\n%s\n%s\n%s\n"
           "INSERT INTO artifacts (cache_key, artifact_digest, source_digest, target, flags, "
           "compiler, hal_version, bytecode_version, size, stored_size, submitter, created_ms, "
           "last_access_ms, hits, pinned, job_id, source_name) VALUES ('%s', '%s', '%s', "
           "'sm_89', '-O2', 'kiln-mlir 0.1.0', 7, 65538, 4096, 1500, 'dave', 100, 150, 2, 0, "
           "'job-v3', 'v3.mlir');\n"
           "INSERT INTO sources (digest, semantic_digest, name, format, size, stored_size, "
           "created_ms, last_access_ms, pinned) VALUES ('%s', '', 'v3.mlir', 1, 10, 10, 1, 1, 0);\n"
           "PRAGMA user_version = 3;\nCOMMIT;\n",
           kiln_index_schema_migration(1), kiln_index_schema_migration(2), kiln_index_schema_migration(3),
           key, blob, src, src);
  assert_int_equal(sqlite_shell(f->dir, db, sql), 0);

  kiln_index_t *index = NULL;
  assert_ok(kiln_index_open(db, &index));
  assert_int_equal(kiln_index_schema_version(index), kiln_index_latest_schema_version());
  kiln_index_artifact_t got;
  assert_ok(kiln_index_artifact_get(index, key, &got));
  assert_string_equal(got.artifact_digest, blob);
  assert_string_equal(got.job_id, "job-v3");
  assert_int_equal(got.hits, 2);
  kiln_index_artifact_deinit(&got);
  kiln_index_source_t sgot;
  assert_ok(kiln_index_source_get(index, src, &sgot));
  kiln_index_source_deinit(&sgot);
  unsigned char check[KILN_INDEX_CHECK_BYTES];
  assert_code(kiln_index_blob_check_get(index, blob, check), KILN_STATUS_NOT_FOUND);
  assert_code(kiln_index_blob_check_get(index, src, check), KILN_STATUS_NOT_FOUND);
  unsigned char want[KILN_INDEX_CHECK_BYTES];
  for (int i = 0; i < KILN_INDEX_CHECK_BYTES; i++) want[i] = (unsigned char)(0xa0 + i);
  assert_ok(kiln_index_blob_check_put(index, blob, want));
  kiln_index_close(index);

  /* Reopened: nothing migrates twice, the check is kept. */
  assert_ok(kiln_index_open(db, &index));
  assert_int_equal(kiln_index_schema_version(index), kiln_index_latest_schema_version());
  assert_ok(kiln_index_blob_check_get(index, blob, check));
  assert_memory_equal(check, want, sizeof want);
  kiln_index_close(index);

  /* The table itself holds checks to 16 bytes of BLOB (STRICT), digests to hex. */
  snprintf(sql, sizeof sql, "INSERT INTO blob_checks VALUES ('%s', x'00ff');\n", src);
  assert_int_not_equal(sqlite_shell(f->dir, db, sql), 0);
  snprintf(sql, sizeof sql, "INSERT INTO blob_checks VALUES ('%s', '0123456789abcdef');\n", src);
  assert_int_not_equal(sqlite_shell(f->dir, db, sql), 0);
  snprintf(sql, sizeof sql,
           "INSERT INTO blob_checks VALUES ('NOT-HEX', x'000102030405060708090a0b0c0d0e0f');\n");
  assert_int_not_equal(sqlite_shell(f->dir, db, sql), 0);
  /* ...while a well-formed one goes in the same way. */
  snprintf(sql, sizeof sql, "INSERT INTO blob_checks VALUES ('%s', x'000102030405060708090a0b0c0d0e0f');\n",
           src);
  assert_int_equal(sqlite_shell(f->dir, db, sql), 0);
}

/* ---- Blob checks ------------------------------------------------------------ */

static void test_blob_checks(void **state) {
  fixture_t *f = *state;
  char named[65], unnamed[65], source[65];
  digest_hex(named, "named-blob");
  digest_hex(unnamed, "unnamed-blob");
  digest_hex(source, "source-blob");
  put_artifact(f->index, "k1", "named-blob", "src", 1);
  kiln_index_source_t s;
  make_source(&s, "source-blob", NULL, 1);
  assert_ok(kiln_index_source_put(f->index, &s));

  unsigned char a[KILN_INDEX_CHECK_BYTES], b[KILN_INDEX_CHECK_BYTES], got[KILN_INDEX_CHECK_BYTES];
  memset(a, 0x11, sizeof a);
  memset(b, 0x22, sizeof b);
  assert_code(kiln_index_blob_check_get(f->index, named, got), KILN_STATUS_NOT_FOUND);
  assert_ok(kiln_index_blob_check_put(f->index, named, a));
  assert_ok(kiln_index_blob_check_put(f->index, unnamed, a));
  assert_ok(kiln_index_blob_check_put(f->index, source, b));
  assert_ok(kiln_index_blob_check_get(f->index, named, got));
  assert_memory_equal(got, a, sizeof a);
  /* A put replaces. */
  assert_ok(kiln_index_blob_check_put(f->index, named, b));
  assert_ok(kiln_index_blob_check_get(f->index, named, got));
  assert_memory_equal(got, b, sizeof b);
  assert_code(kiln_index_blob_check_put(f->index, "short", a), KILN_STATUS_INVALID_ARGUMENT);
  assert_code(kiln_index_blob_check_get(f->index, NULL, got), KILN_STATUS_INVALID_ARGUMENT);

  /* drop_unreferenced: only checks no row's blob needs. */
  assert_ok(kiln_index_blob_check_drop_unreferenced(f->index, named));
  assert_ok(kiln_index_blob_check_drop_unreferenced(f->index, source));
  assert_ok(kiln_index_blob_check_drop_unreferenced(f->index, unnamed));
  assert_ok(kiln_index_blob_check_get(f->index, named, got));
  assert_ok(kiln_index_blob_check_get(f->index, source, got));
  assert_memory_equal(got, b, sizeof b);
  assert_code(kiln_index_blob_check_get(f->index, unnamed, got), KILN_STATUS_NOT_FOUND);
  assert_ok(kiln_index_blob_check_drop_unreferenced(f->index, unnamed)); /* absent: fine */

  /* Once the row is gone, so may the check be. */
  char key[65];
  digest_hex(key, "k1");
  bool evicted = false;
  assert_ok(kiln_index_artifact_evict(f->index, key, &evicted));
  assert_true(evicted);
  assert_ok(kiln_index_blob_check_drop_unreferenced(f->index, named));
  assert_code(kiln_index_blob_check_get(f->index, named, got), KILN_STATUS_NOT_FOUND);

  /* drop_digest (quarantine, or a dangling row) takes it with the rows. */
  size_t rows = 0;
  assert_ok(kiln_index_drop_digest(f->index, source, "corrupt", 5, &rows));
  assert_int_equal(rows, 1);
  assert_code(kiln_index_blob_check_get(f->index, source, got), KILN_STATUS_NOT_FOUND);
}

/* ---- Artifacts ---------------------------------------------------------------- */

static void test_put_get_round_trip(void **state) {
  fixture_t *f = *state;
  kiln_index_artifact_t a;
  make_artifact(&a, "k", "blob", "src", 1700000000123);
  a.last_access_ms = 1700000000999;
  a.hal_version = 0xfffffffeu;
  a.bytecode_version = 0xffffffffu;
  a.size = (uint64_t)INT64_MAX;
  a.stored_size = 123456789012345;
  a.hits = 7;
  a.pinned = true;
  kiln_index_label_t labels[] = {{"team", "ml-infra"}, {"env", "prod"}, {"model", "resnet 50"}};
  a.labels = labels;
  a.n_labels = 3;
  assert_ok(kiln_index_artifact_put(f->index, &a));

  kiln_index_artifact_t got;
  assert_ok(kiln_index_artifact_get(f->index, a.cache_key, &got));
  assert_string_equal(got.cache_key, a.cache_key);
  assert_string_equal(got.artifact_digest, a.artifact_digest);
  assert_string_equal(got.source_digest, a.source_digest);
  assert_string_equal(got.target, a.target);
  assert_string_equal(got.flags, a.flags);
  assert_string_equal(got.compiler, a.compiler);
  assert_int_equal(got.hal_version, 0xfffffffeu);
  assert_int_equal(got.bytecode_version, 0xffffffffu);
  assert_true(got.size == (uint64_t)INT64_MAX);
  assert_int_equal(got.stored_size, 123456789012345);
  assert_string_equal(got.submitter, "alice@example");
  assert_string_equal(got.job_id, "job-0001");
  assert_string_equal(got.source_name, "model.mlir");
  assert_int_equal(got.created_ms, 1700000000123);
  assert_int_equal(got.last_access_ms, 1700000000999);
  assert_int_equal(got.hits, 7);
  assert_true(got.pinned);
  /* Labels come back sorted by key. */
  assert_int_equal(got.n_labels, 3);
  assert_string_equal(got.labels[0].key, "env");
  assert_string_equal(got.labels[0].value, "prod");
  assert_string_equal(got.labels[1].key, "model");
  assert_string_equal(got.labels[1].value, "resnet 50");
  assert_string_equal(got.labels[2].key, "team");
  assert_string_equal(got.labels[2].value, "ml-infra");
  kiln_index_artifact_deinit(&got);
  /* deinit leaves a zeroed record: a second deinit is harmless. */
  assert_null(got.target);
  kiln_index_artifact_deinit(&got);

  /* NULL submitter, flags, job id and source name, no labels. */
  make_artifact(&a, "k2", "blob2", "src", 5);
  a.submitter = NULL;
  a.flags = NULL;
  a.job_id = NULL;
  a.source_name = NULL;
  assert_ok(kiln_index_artifact_put(f->index, &a));
  assert_ok(kiln_index_artifact_get(f->index, a.cache_key, &got));
  assert_null(got.submitter);
  assert_string_equal(got.flags, "");
  assert_string_equal(got.job_id, "");
  assert_string_equal(got.source_name, "");
  assert_int_equal(got.n_labels, 0);
  assert_null(got.labels);
  assert_int_equal(got.hits, 0);
  assert_false(got.pinned);
  kiln_index_artifact_deinit(&got);
}

static void test_put_rejects_bad_records(void **state) {
  fixture_t *f = *state;
  kiln_index_artifact_t a;
  make_artifact(&a, "k", "blob", "src", 1);
  a.cache_key[0] = 'A'; /* upper case is not a digest */
  assert_code(kiln_index_artifact_put(f->index, &a), KILN_STATUS_INVALID_ARGUMENT);
  make_artifact(&a, "k", "blob", "src", 1);
  a.artifact_digest[63] = '\0';
  assert_code(kiln_index_artifact_put(f->index, &a), KILN_STATUS_INVALID_ARGUMENT);
  make_artifact(&a, "k", "blob", "src", 1);
  a.target = "";
  assert_code(kiln_index_artifact_put(f->index, &a), KILN_STATUS_INVALID_ARGUMENT);
  make_artifact(&a, "k", "blob", "src", 1);
  a.compiler = NULL;
  assert_code(kiln_index_artifact_put(f->index, &a), KILN_STATUS_INVALID_ARGUMENT);
  make_artifact(&a, "k", "blob", "src", 1);
  a.stored_size = (uint64_t)INT64_MAX + 1;
  assert_code(kiln_index_artifact_put(f->index, &a), KILN_STATUS_INVALID_ARGUMENT);
  make_artifact(&a, "k", "blob", "src", 1);
  kiln_index_label_t dup[] = {{"team", "a"}, {"team", "b"}};
  a.labels = dup;
  a.n_labels = 2;
  assert_code(kiln_index_artifact_put(f->index, &a), KILN_STATUS_INVALID_ARGUMENT);
  kiln_index_label_t empty_key[] = {{"", "a"}};
  a.labels = empty_key;
  a.n_labels = 1;
  assert_code(kiln_index_artifact_put(f->index, &a), KILN_STATUS_INVALID_ARGUMENT);

  kiln_index_totals_t t;
  assert_ok(kiln_index_totals(f->index, &t));
  assert_int_equal(t.artifacts, 0);
}

static void test_get_missing_is_not_found(void **state) {
  fixture_t *f = *state;
  char key[65];
  digest_hex(key, "absent");
  kiln_index_artifact_t got;
  memset(&got, 0xab, sizeof got);
  assert_code(kiln_index_artifact_get(f->index, key, &got), KILN_STATUS_NOT_FOUND);
  assert_null(got.target); /* cleared on entry */
  assert_code(kiln_index_artifact_get_by_digest(f->index, key, &got), KILN_STATUS_NOT_FOUND);
  assert_code(kiln_index_artifact_get(f->index, "not a digest", &got), KILN_STATUS_NOT_FOUND);
}

static void test_replace_keeps_pin_and_hits(void **state) {
  fixture_t *f = *state;
  kiln_index_artifact_t a;
  make_artifact(&a, "k", "blob", "src", 100);
  kiln_index_label_t old_labels[] = {{"team", "a"}, {"old", "yes"}};
  a.labels = old_labels;
  a.n_labels = 2;
  assert_ok(kiln_index_artifact_put(f->index, &a));
  assert_ok(kiln_index_artifact_set_pinned(f->index, a.cache_key, true, NULL));
  assert_ok(kiln_index_artifact_record_hits(f->index, a.cache_key, 200, 1));
  assert_ok(kiln_index_artifact_record_hits(f->index, a.cache_key, 300, 1));

  make_artifact(&a, "k", "blob-recompiled", "src", 400);
  a.stored_size = 999;
  a.compiler = "iree-compiler 3.2.0";
  a.pinned = false; /* a replace does not unpin */
  a.hits = 0;       /* nor reset the hit count */
  kiln_index_label_t new_labels[] = {{"team", "b"}};
  a.labels = new_labels;
  a.n_labels = 1;
  a.submitter = "bob@example";
  a.job_id = "job-0002"; /* provenance is the new compile's, like the labels */
  a.source_name = "model-v2.mlir";
  assert_ok(kiln_index_artifact_put(f->index, &a));

  kiln_index_artifact_t got;
  assert_ok(kiln_index_artifact_get(f->index, a.cache_key, &got));
  assert_true(got.pinned);
  assert_int_equal(got.hits, 2);
  assert_string_equal(got.artifact_digest, a.artifact_digest);
  assert_string_equal(got.compiler, "iree-compiler 3.2.0");
  assert_int_equal(got.stored_size, 999);
  assert_int_equal(got.created_ms, 400);
  assert_int_equal(got.n_labels, 1);
  assert_string_equal(got.labels[0].key, "team");
  assert_string_equal(got.labels[0].value, "b");
  assert_string_equal(got.submitter, "bob@example");
  assert_string_equal(got.job_id, "job-0002");
  assert_string_equal(got.source_name, "model-v2.mlir");
  kiln_index_artifact_deinit(&got);

  kiln_index_totals_t t;
  assert_ok(kiln_index_totals(f->index, &t));
  assert_int_equal(t.artifacts, 1);
}

/* job_id and source_name are part of ARTIFACT_COLUMNS: every query that fills a
 * record must bring them, not just get. */
static void test_provenance_in_every_read(void **state) {
  fixture_t *f = *state;
  kiln_index_artifact_t a;
  make_artifact(&a, "k", "blob", "src", 100);
  a.job_id = "job-every-read";
  a.source_name = "every/read.mlir";
  assert_ok(kiln_index_artifact_put(f->index, &a));

  kiln_index_artifact_t got;
  assert_ok(kiln_index_artifact_get_by_digest(f->index, a.artifact_digest, &got));
  assert_string_equal(got.job_id, "job-every-read");
  assert_string_equal(got.source_name, "every/read.mlir");
  kiln_index_artifact_deinit(&got);

  kiln_index_artifact_t *rows = NULL;
  size_t n = 0;
  kiln_index_page_query_t query = {.target = a.target};
  assert_ok(kiln_index_artifact_find_page(f->index, &query, &rows, &n));
  assert_int_equal(n, 1);
  assert_string_equal(rows[0].job_id, "job-every-read");
  assert_string_equal(rows[0].source_name, "every/read.mlir");
  kiln_index_artifacts_free(rows, n);

  assert_ok(kiln_index_artifact_lru(f->index, 10, &rows, &n));
  assert_int_equal(n, 1);
  assert_string_equal(rows[0].job_id, "job-every-read");
  assert_string_equal(rows[0].source_name, "every/read.mlir");
  kiln_index_artifacts_free(rows, n);
}

static void test_get_by_digest_returns_newest(void **state) {
  fixture_t *f = *state;
  put_artifact(f->index, "old", "shared", "src1", 100);
  put_artifact(f->index, "newest", "shared", "src2", 300);
  put_artifact(f->index, "middle", "shared", "src3", 200);
  put_artifact(f->index, "other", "different", "src4", 900);
  char digest[65];
  digest_hex(digest, "shared");
  kiln_index_artifact_t got;
  assert_ok(kiln_index_artifact_get_by_digest(f->index, digest, &got));
  assert_keys(&got, 1, "newest", NULL);
  assert_int_equal(got.created_ms, 300);
  kiln_index_artifact_deinit(&got);
}

static void test_record_hits(void **state) {
  fixture_t *f = *state;
  put_artifact(f->index, "k", "blob", "src", 100);
  char key[65];
  digest_hex(key, "k");
  assert_ok(kiln_index_artifact_record_hits(f->index, key, 5000, 1));
  assert_ok(kiln_index_artifact_record_hits(f->index, key, 6000, 1));
  assert_ok(kiln_index_artifact_record_hits(f->index, key, 7000, 1));
  kiln_index_artifact_t got;
  assert_ok(kiln_index_artifact_get(f->index, key, &got));
  assert_int_equal(got.last_access_ms, 7000);
  assert_int_equal(got.hits, 3);
  assert_int_equal(got.created_ms, 100);
  kiln_index_artifact_deinit(&got);
  /* A batch that flushes late adds its hits but never moves the access time back. */
  assert_ok(kiln_index_artifact_record_hits(f->index, key, 6500, 4));
  assert_ok(kiln_index_artifact_get(f->index, key, &got));
  assert_int_equal(got.last_access_ms, 7000);
  assert_int_equal(got.hits, 7);
  kiln_index_artifact_deinit(&got);
  /* A row evicted before its hits were flushed: not an error, and no row appears. */
  char absent[65];
  digest_hex(absent, "absent");
  assert_ok(kiln_index_artifact_record_hits(f->index, absent, 1, 1));
  assert_code(kiln_index_artifact_get(f->index, absent, &got), KILN_STATUS_NOT_FOUND);
  kiln_index_totals_t t;
  assert_ok(kiln_index_totals(f->index, &t));
  assert_int_equal(t.artifacts, 1);
  assert_int_equal(t.hits, 7);
}

static bool is_pinned(kiln_index_t *index, const char *seed) {
  char key[65];
  digest_hex(key, seed);
  kiln_index_artifact_t got;
  assert_ok(kiln_index_artifact_get(index, key, &got));
  bool pinned = got.pinned;
  kiln_index_artifact_deinit(&got);
  return pinned;
}

static void test_set_pinned(void **state) {
  fixture_t *f = *state;
  put_artifact(f->index, "a", "shared", "src", 1);
  put_artifact(f->index, "b", "shared", "src", 2);
  put_artifact(f->index, "c", "other", "src", 3);
  char key[65], digest[65];
  size_t changed = 99;

  digest_hex(key, "c");
  assert_ok(kiln_index_artifact_set_pinned(f->index, key, true, &changed));
  assert_int_equal(changed, 1);
  assert_true(is_pinned(f->index, "c"));
  assert_false(is_pinned(f->index, "a"));

  digest_hex(digest, "shared");
  assert_ok(kiln_index_artifact_set_pinned(f->index, digest, true, &changed));
  assert_int_equal(changed, 2);
  assert_true(is_pinned(f->index, "a"));
  assert_true(is_pinned(f->index, "b"));

  assert_ok(kiln_index_artifact_set_pinned(f->index, digest, false, NULL));
  assert_false(is_pinned(f->index, "a"));
  assert_false(is_pinned(f->index, "b"));
  assert_true(is_pinned(f->index, "c"));

  changed = 99;
  digest_hex(key, "absent");
  assert_code(kiln_index_artifact_set_pinned(f->index, key, true, &changed), KILN_STATUS_NOT_FOUND);
  assert_int_equal(changed, 0);
}

static void test_evict_takes_labels(void **state) {
  fixture_t *f = *state;
  kiln_index_artifact_t a;
  make_artifact(&a, "k", "blob", "src", 1);
  kiln_index_label_t labels[] = {{"team", "a"}};
  a.labels = labels;
  a.n_labels = 1;
  a.pinned = true;
  assert_ok(kiln_index_artifact_put(f->index, &a));
  /* Pinned since the LRU query: left alone. */
  bool evicted = true;
  assert_ok(kiln_index_artifact_evict(f->index, a.cache_key, &evicted));
  assert_false(evicted);
  assert_true(is_pinned(f->index, "k"));
  assert_ok(kiln_index_artifact_set_pinned(f->index, a.cache_key, false, NULL));
  /* With foreign keys enforced, this delete fails unless the labels cascade. */
  assert_ok(kiln_index_artifact_evict(f->index, a.cache_key, &evicted));
  assert_true(evicted);
  kiln_index_artifact_t got;
  assert_code(kiln_index_artifact_get(f->index, a.cache_key, &got), KILN_STATUS_NOT_FOUND);
  kiln_index_page_query_t query = {.labels = labels, .n_labels = 1};
  kiln_index_artifact_t *found = NULL;
  size_t count = 1;
  assert_ok(kiln_index_artifact_find_page(f->index, &query, &found, &count));
  assert_int_equal(count, 0);
  assert_null(found);
  /* Already gone: OK, nothing evicted. */
  assert_ok(kiln_index_artifact_evict(f->index, a.cache_key, &evicted));
  assert_false(evicted);
}

/* ---- find_page (FindArtifacts) ------------------------------------------------ */

static void find_page(kiln_index_t *index, const kiln_index_page_query_t *query, kiln_index_artifact_t **out,
                      size_t *count) {
  assert_ok(kiln_index_artifact_find_page(index, query, out, count));
}

/* Rows for the find_page tests:
 *   a: src1 target X hal 5  team=ml env=prod   created 100
 *   b: src1 target Y hal 5  team=ml            created 200
 *   c: src2 target X hal 6  team=web env=prod  created 300
 *   d: src1 target X hal 6  (no labels)        created 400 */
static void put_find_rows(kiln_index_t *index) {
  struct {
    const char *key, *source;
    char *target;
    uint32_t hal;
    int64_t created;
    kiln_index_label_t labels[2];
    size_t n_labels;
  } rows[] = {
      {"a", "src1", "X", 5, 100, {{"team", "ml"}, {"env", "prod"}}, 2},
      {"b", "src1", "Y", 5, 200, {{"team", "ml"}}, 1},
      {"c", "src2", "X", 6, 300, {{"team", "web"}, {"env", "prod"}}, 2},
      {"d", "src1", "X", 6, 400, {{NULL, NULL}}, 0},
  };
  for (size_t i = 0; i < sizeof rows / sizeof rows[0]; i++) {
    kiln_index_artifact_t a;
    make_artifact(&a, rows[i].key, rows[i].key, rows[i].source, rows[i].created);
    a.target = rows[i].target;
    a.hal_version = rows[i].hal;
    a.labels = rows[i].n_labels ? rows[i].labels : NULL;
    a.n_labels = rows[i].n_labels;
    assert_ok(kiln_index_artifact_put(index, &a));
  }
}

static void test_find_page_filters(void **state) {
  fixture_t *f = *state;
  put_find_rows(f->index);
  kiln_index_artifact_t *r = NULL;
  size_t n = 0;
  char src1[65];
  digest_hex(src1, "src1");

  find_page(f->index, NULL, &r, &n);
  assert_keys(r, n, "d", "c", "b", "a", NULL);
  kiln_index_artifacts_free(r, n);

  kiln_index_page_query_t q = {.source_digest = src1, .target = "X"};
  find_page(f->index, &q, &r, &n);
  assert_keys(r, n, "d", "a", NULL);
  /* Each record carries its labels. */
  assert_int_equal(r[1].n_labels, 2);
  kiln_index_artifacts_free(r, n);

  q = (kiln_index_page_query_t){.hal_version = 6};
  find_page(f->index, &q, &r, &n);
  assert_keys(r, n, "d", "c", NULL);
  kiln_index_artifacts_free(r, n);

  /* Legacy: below 6 (the server's version); with an exact version too. */
  q = (kiln_index_page_query_t){.hal_below = 6};
  find_page(f->index, &q, &r, &n);
  assert_keys(r, n, "b", "a", NULL);
  kiln_index_artifacts_free(r, n);
  q.hal_version = 6;
  find_page(f->index, &q, &r, &n);
  assert_int_equal(n, 0);
  assert_null(r);

  /* Creation bounds: after is inclusive, before exclusive. */
  q = (kiln_index_page_query_t){.created_after_ms = 200, .created_before_ms = 400};
  find_page(f->index, &q, &r, &n);
  assert_keys(r, n, "c", "b", NULL);
  kiln_index_artifacts_free(r, n);

  kiln_index_label_t ml_prod[] = {{"env", "prod"}, {"team", "ml"}};
  q = (kiln_index_page_query_t){.labels = ml_prod, .n_labels = 2};
  find_page(f->index, &q, &r, &n);
  assert_keys(r, n, "a", NULL);
  kiln_index_artifacts_free(r, n);
  kiln_index_label_t prod[] = {{"env", "prod"}};
  q = (kiln_index_page_query_t){.labels = prod, .n_labels = 1, .target = "X"};
  find_page(f->index, &q, &r, &n);
  assert_keys(r, n, "c", "a", NULL);
  kiln_index_artifacts_free(r, n);
}

/* Each column filter alone, and all three at once (find_page_filters has more). */
static void test_find_page_by_column(void **state) {
  fixture_t *f = *state;
  put_find_rows(f->index);
  kiln_index_artifact_t *r = NULL;
  size_t n = 0;
  char src1[65], src2[65];
  digest_hex(src1, "src1");
  digest_hex(src2, "src2");

  kiln_index_page_query_t q = {.source_digest = src1};
  find_page(f->index, &q, &r, &n);
  assert_keys(r, n, "d", "b", "a", NULL);
  kiln_index_artifacts_free(r, n);

  q = (kiln_index_page_query_t){.target = "X"};
  find_page(f->index, &q, &r, &n);
  assert_keys(r, n, "d", "c", "a", NULL);
  kiln_index_artifacts_free(r, n);

  q = (kiln_index_page_query_t){.source_digest = src1, .target = "X", .hal_version = 5};
  find_page(f->index, &q, &r, &n);
  assert_keys(r, n, "a", NULL);
  /* Each record carries its labels, sorted by key. */
  assert_int_equal(r[0].n_labels, 2);
  assert_string_equal(r[0].labels[0].key, "env");
  assert_string_equal(r[0].labels[1].value, "ml");
  kiln_index_artifacts_free(r, n);

  q = (kiln_index_page_query_t){.source_digest = src2, .target = "Y"};
  r = (kiln_index_artifact_t *)&r; /* must be cleared */
  n = 42;
  find_page(f->index, &q, &r, &n);
  assert_null(r);
  assert_int_equal(n, 0);
}

static void test_find_page_by_labels(void **state) {
  fixture_t *f = *state;
  put_find_rows(f->index);
  kiln_index_artifact_t *r = NULL;
  size_t n = 0;

  kiln_index_label_t team_ml[] = {{"team", "ml"}};
  kiln_index_page_query_t q = {.labels = team_ml, .n_labels = 1};
  find_page(f->index, &q, &r, &n);
  assert_keys(r, n, "b", "a", NULL);
  kiln_index_artifacts_free(r, n);

  kiln_index_label_t prod[] = {{"env", "prod"}};
  q = (kiln_index_page_query_t){.labels = prod, .n_labels = 1};
  find_page(f->index, &q, &r, &n);
  assert_keys(r, n, "c", "a", NULL);
  kiln_index_artifacts_free(r, n);

  /* Two labels (both on "a", see find_page_filters) combine with the column
   * filters: "a" is not on target Y. */
  kiln_index_label_t ml_prod[] = {{"env", "prod"}, {"team", "ml"}};
  q = (kiln_index_page_query_t){.labels = ml_prod, .n_labels = 2, .target = "Y"};
  find_page(f->index, &q, &r, &n);
  assert_int_equal(n, 0);

  kiln_index_label_t wrong_value[] = {{"team", "nobody"}};
  q = (kiln_index_page_query_t){.labels = wrong_value, .n_labels = 1};
  find_page(f->index, &q, &r, &n);
  assert_int_equal(n, 0);

  /* A key matching one label and a value matching another is no match. */
  kiln_index_label_t crossed[] = {{"team", "prod"}};
  q = (kiln_index_page_query_t){.labels = crossed, .n_labels = 1};
  find_page(f->index, &q, &r, &n);
  assert_int_equal(n, 0);
}

static void cursor_at(kiln_index_page_cursor_t *c, const kiln_index_artifact_t *row) {
  c->created_ms = row->created_ms;
  memcpy(c->artifact_digest, row->artifact_digest, sizeof c->artifact_digest);
  memcpy(c->cache_key, row->cache_key, sizeof c->cache_key);
}

/* An explicit limit, the default one (100), the page after a full one, and the
 * empty page after the last row. */
static void test_find_page_limit_and_order(void **state) {
  fixture_t *f = *state;
  for (int i = 0; i < 120; i++) {
    char seed[16];
    snprintf(seed, sizeof seed, "r%03d", i);
    put_artifact(f->index, seed, seed, "src", 1000 + i);
  }
  /* Equal creation times: broken by digest (here the key's seed too), ascending. */
  put_artifact(f->index, "tie1", "tie1", "src", 5000);
  put_artifact(f->index, "tie2", "tie2", "src", 5000);
  char tie1[65], tie2[65];
  digest_hex(tie1, "tie1");
  digest_hex(tie2, "tie2");

  kiln_index_artifact_t *r = NULL;
  size_t n = 0;
  kiln_index_page_query_t q = {.limit = 4};
  find_page(f->index, &q, &r, &n);
  assert_int_equal(n, 4);
  const char *first = strcmp(tie1, tie2) < 0 ? "tie1" : "tie2";
  const char *second = strcmp(tie1, tie2) < 0 ? "tie2" : "tie1";
  assert_keys(r, n, first, second, "r119", "r118", NULL);
  kiln_index_page_cursor_t cursor;
  cursor_at(&cursor, &r[n - 1]);
  kiln_index_artifacts_free(r, n);

  q = (kiln_index_page_query_t){.limit = 3, .after = &cursor};
  find_page(f->index, &q, &r, &n);
  assert_keys(r, n, "r117", "r116", "r115", NULL);
  kiln_index_artifacts_free(r, n);

  /* Default limit: 100, in strictly non-increasing creation order. */
  q = (kiln_index_page_query_t){0};
  find_page(f->index, &q, &r, &n);
  assert_int_equal(n, 100);
  for (size_t i = 1; i < n; i++) assert_true(r[i - 1].created_ms >= r[i].created_ms);
  assert_keys(&r[n - 1], 1, "r022", NULL);
  cursor_at(&cursor, &r[n - 1]);
  kiln_index_artifacts_free(r, n);

  /* A limit above what is left returns the rest. */
  q = (kiln_index_page_query_t){.limit = 1000, .after = &cursor};
  find_page(f->index, &q, &r, &n);
  assert_int_equal(n, 22);
  assert_keys(r, 1, "r021", NULL);
  assert_keys(&r[n - 2], 2, "r001", "r000", NULL);
  cursor_at(&cursor, &r[n - 1]);
  kiln_index_artifacts_free(r, n);

  q = (kiln_index_page_query_t){.after = &cursor};
  find_page(f->index, &q, &r, &n);
  assert_int_equal(n, 0);
  assert_null(r);
}

/* Pages of 3 over rows with many equal creation times: every row exactly once, in
 * the order (created desc, digest asc, key asc), also when rows are added before
 * the cursor between pages. */
static void test_find_page_keyset(void **state) {
  fixture_t *f = *state;
  enum { ROWS = 25 };
  for (int i = 0; i < ROWS; i++) {
    char key[16], blob[16];
    snprintf(key, sizeof key, "p%02d", i);
    /* Two keys share each blob digest, so the key breaks digest ties. */
    snprintf(blob, sizeof blob, "b%02d", i / 2);
    put_artifact(f->index, key, blob, "src", 1000 + i / 5);
  }
  kiln_index_page_cursor_t all[ROWS]; /* the order fields of each row seen */
  size_t seen = 0;
  kiln_index_page_cursor_t cursor;
  kiln_index_page_query_t q = {.limit = 3};
  for (int page = 0; page < 20; page++) {
    kiln_index_artifact_t *r = NULL;
    size_t n = 0;
    find_page(f->index, &q, &r, &n);
    if (n == 0) break;
    assert_true(n <= 3);
    for (size_t i = 0; i < n; i++) {
      assert_true(seen < ROWS);
      all[seen].created_ms = r[i].created_ms;
      memcpy(all[seen].artifact_digest, r[i].artifact_digest, sizeof all[seen].artifact_digest);
      memcpy(all[seen].cache_key, r[i].cache_key, sizeof all[seen].cache_key);
      if (seen > 0) {
        const kiln_index_page_cursor_t *a = &all[seen - 1], *b = &all[seen];
        int c = a->created_ms != b->created_ms ? (a->created_ms > b->created_ms ? -1 : 1)
                                               : strcmp(a->artifact_digest, b->artifact_digest);
        if (c == 0) c = strcmp(a->cache_key, b->cache_key);
        if (c >= 0) fail_msg("row %zu is not after row %zu in page order", seen, seen - 1);
      }
      seen++;
    }
    cursor.created_ms = r[n - 1].created_ms;
    memcpy(cursor.artifact_digest, r[n - 1].artifact_digest, sizeof cursor.artifact_digest);
    memcpy(cursor.cache_key, r[n - 1].cache_key, sizeof cursor.cache_key);
    q.after = &cursor;
    if (page == 1) {
      /* Newer than every row: before the cursor, so never on a later page. */
      put_artifact(f->index, "late", "late", "src", 9999);
    }
    kiln_index_artifacts_free(r, n);
  }
  assert_int_equal(seen, ROWS);
}

static void test_find_page_rejects(void **state) {
  fixture_t *f = *state;
  kiln_index_artifact_t *r = (kiln_index_artifact_t *)&r;
  size_t n = 7;
  kiln_index_label_t labels[KILN_INDEX_PAGE_MAX_LABELS + 1];
  char keys[KILN_INDEX_PAGE_MAX_LABELS + 1][8];
  for (int i = 0; i <= KILN_INDEX_PAGE_MAX_LABELS; i++) {
    snprintf(keys[i], sizeof keys[i], "k%d", i);
    labels[i] = (kiln_index_label_t){keys[i], "v"};
  }
  kiln_index_artifact_t a;
  make_artifact(&a, "k", "blob", "src", 1);
  a.labels = labels;
  a.n_labels = KILN_INDEX_PAGE_MAX_LABELS + 1; /* put has no cap */
  assert_ok(kiln_index_artifact_put(f->index, &a));
  kiln_index_page_query_t q = {.labels = labels, .n_labels = KILN_INDEX_PAGE_MAX_LABELS + 1};
  assert_code(kiln_index_artifact_find_page(f->index, &q, &r, &n), KILN_STATUS_INVALID_ARGUMENT);
  assert_null(r);
  assert_int_equal(n, 0);
  /* The most labels one query may match is accepted, and finds the row with all
   * of its labels. */
  q.n_labels = KILN_INDEX_PAGE_MAX_LABELS;
  find_page(f->index, &q, &r, &n);
  assert_keys(r, n, "k", NULL);
  assert_int_equal(r[0].n_labels, KILN_INDEX_PAGE_MAX_LABELS + 1);
  kiln_index_artifacts_free(r, n);
  r = (kiln_index_artifact_t *)&r;
  n = 7;
  kiln_index_label_t no_value[] = {{"k", NULL}};
  q = (kiln_index_page_query_t){.labels = no_value, .n_labels = 1};
  assert_code(kiln_index_artifact_find_page(f->index, &q, &r, &n), KILN_STATUS_INVALID_ARGUMENT);
  q = (kiln_index_page_query_t){.source_digest = "abc"};
  assert_code(kiln_index_artifact_find_page(f->index, &q, &r, &n), KILN_STATUS_INVALID_ARGUMENT);
  kiln_index_page_cursor_t bad = {.created_ms = 1, .artifact_digest = "zz", .cache_key = "zz"};
  q = (kiln_index_page_query_t){.after = &bad};
  assert_code(kiln_index_artifact_find_page(f->index, &q, &r, &n), KILN_STATUS_INVALID_ARGUMENT);
}

static void test_artifact_lru(void **state) {
  fixture_t *f = *state;
  put_artifact(f->index, "a", "a", "src", 1);
  put_artifact(f->index, "b", "b", "src", 2);
  put_artifact(f->index, "c", "c", "src", 3);
  put_artifact(f->index, "d", "d", "src", 4);
  char key[65];
  digest_hex(key, "a");
  assert_ok(kiln_index_artifact_record_hits(f->index, key, 100, 1)); /* a: most recent now */
  digest_hex(key, "c");
  assert_ok(kiln_index_artifact_set_pinned(f->index, key, true, NULL));

  kiln_index_artifact_t *r = NULL;
  size_t n = 0;
  assert_ok(kiln_index_artifact_lru(f->index, 10, &r, &n));
  assert_keys(r, n, "b", "d", "a", NULL);
  kiln_index_artifacts_free(r, n);

  assert_ok(kiln_index_artifact_lru(f->index, 2, &r, &n));
  assert_keys(r, n, "b", "d", NULL);
  kiln_index_artifacts_free(r, n);

  assert_ok(kiln_index_artifact_lru(f->index, 0, &r, &n));
  assert_int_equal(n, 0);
  assert_null(r);
}

/* ---- Sources -------------------------------------------------------------------- */

static void test_sources_put_get_touch_evict(void **state) {
  fixture_t *f = *state;
  kiln_index_source_t s;
  make_source(&s, "s1", "s1-meaning", 100);
  s.pinned = true;
  assert_ok(kiln_index_source_put(f->index, &s));

  kiln_index_source_t got;
  assert_ok(kiln_index_source_get(f->index, s.digest, &got));
  assert_string_equal(got.digest, s.digest);
  assert_string_equal(got.semantic_digest, s.semantic_digest);
  assert_string_equal(got.name, "model.mlir");
  assert_int_equal(got.format, 2);
  assert_int_equal(got.size, 10000);
  assert_int_equal(got.stored_size, 3000);
  assert_int_equal(got.created_ms, 100);
  assert_int_equal(got.last_access_ms, 100);
  assert_true(got.pinned);
  kiln_index_source_deinit(&got);

  /* A second put refreshes last access and nothing else. */
  kiln_index_source_t again;
  make_source(&again, "s1", NULL, 500);
  again.name = "renamed.mlir";
  again.size = 1;
  assert_ok(kiln_index_source_put(f->index, &again));
  assert_ok(kiln_index_source_get(f->index, s.digest, &got));
  assert_int_equal(got.last_access_ms, 500);
  assert_int_equal(got.created_ms, 100);
  assert_string_equal(got.name, "model.mlir");
  assert_string_equal(got.semantic_digest, s.semantic_digest);
  assert_int_equal(got.size, 10000);
  assert_true(got.pinned);
  kiln_index_source_deinit(&got);

  assert_ok(kiln_index_source_touch(f->index, s.digest, 900));
  assert_ok(kiln_index_source_get(f->index, s.digest, &got));
  assert_int_equal(got.last_access_ms, 900);
  kiln_index_source_deinit(&got);

  /* Unknown semantic digest and no name. */
  make_source(&s, "s2", NULL, 7);
  s.name = NULL;
  assert_ok(kiln_index_source_put(f->index, &s));
  assert_ok(kiln_index_source_get(f->index, s.digest, &got));
  assert_string_equal(got.semantic_digest, "");
  assert_null(got.name);
  kiln_index_source_deinit(&got);

  /* Eviction takes an unpinned source no artifact names, and spares a pinned one. */
  bool evicted = false;
  assert_ok(kiln_index_source_evict(f->index, s.digest, &evicted));
  assert_true(evicted);
  assert_code(kiln_index_source_get(f->index, s.digest, &got), KILN_STATUS_NOT_FOUND);
  assert_code(kiln_index_source_touch(f->index, s.digest, 1), KILN_STATUS_NOT_FOUND);
  assert_ok(kiln_index_source_evict(f->index, s.digest, &evicted));
  assert_false(evicted); /* already gone */
  char s1[65];
  digest_hex(s1, "s1");
  evicted = true;
  assert_ok(kiln_index_source_evict(f->index, s1, &evicted));
  assert_false(evicted);
  assert_ok(kiln_index_source_get(f->index, s1, &got));
  kiln_index_source_deinit(&got);

  make_source(&s, "s3", NULL, 7);
  strcpy(s.semantic_digest, "xyz");
  assert_code(kiln_index_source_put(f->index, &s), KILN_STATUS_INVALID_ARGUMENT);
}

static void test_source_lru(void **state) {
  fixture_t *f = *state;
  kiln_index_source_t s;
  /* by_digest: an artifact's source_digest is this source's own digest. */
  make_source(&s, "by_digest", NULL, 1);
  assert_ok(kiln_index_source_put(f->index, &s));
  put_artifact(f->index, "k1", "blob1", "by_digest", 1);
  /* by_meaning: an artifact's source_digest is this source's semantic digest. */
  make_source(&s, "by_meaning", "meaning", 2);
  assert_ok(kiln_index_source_put(f->index, &s));
  put_artifact(f->index, "k2", "blob2", "meaning", 1);
  make_source(&s, "pinned", NULL, 3);
  s.pinned = true;
  assert_ok(kiln_index_source_put(f->index, &s));
  make_source(&s, "old", "old-meaning", 10);
  assert_ok(kiln_index_source_put(f->index, &s));
  make_source(&s, "young", NULL, 20);
  assert_ok(kiln_index_source_put(f->index, &s));
  char old[65], young[65];
  digest_hex(old, "old");
  digest_hex(young, "young");

  kiln_index_source_t *r = NULL;
  size_t n = 0;
  assert_ok(kiln_index_source_lru(f->index, 10, &r, &n));
  assert_int_equal(n, 2);
  assert_string_equal(r[0].digest, old);
  assert_string_equal(r[1].digest, young);
  kiln_index_sources_free(r, n);

  /* Touching reorders; limit bounds. */
  assert_ok(kiln_index_source_touch(f->index, old, 30));
  assert_ok(kiln_index_source_lru(f->index, 1, &r, &n));
  assert_int_equal(n, 1);
  assert_string_equal(r[0].digest, young);
  kiln_index_sources_free(r, n);

  /* Once its artifact is gone, a source becomes a candidate. */
  char k2[65];
  digest_hex(k2, "k2");
  bool evicted = false;
  assert_ok(kiln_index_artifact_evict(f->index, k2, &evicted));
  assert_true(evicted);
  assert_ok(kiln_index_source_lru(f->index, 10, &r, &n));
  assert_int_equal(n, 3);
  char by_meaning[65];
  digest_hex(by_meaning, "by_meaning");
  assert_string_equal(r[0].digest, by_meaning);
  kiln_index_sources_free(r, n);

  assert_ok(kiln_index_source_lru(f->index, 0, &r, &n));
  assert_int_equal(n, 0);
  assert_null(r);
}

/* ---- Blobs: references, repair, quarantine, totals -------------------------------- */

static void test_digest_referenced(void **state) {
  fixture_t *f = *state;
  put_artifact(f->index, "k", "blob", "meaning", 1);
  kiln_index_source_t s;
  make_source(&s, "source-bytes", NULL, 1);
  assert_ok(kiln_index_source_put(f->index, &s));
  char d[65];
  bool referenced = false;

  digest_hex(d, "blob");
  assert_ok(kiln_index_digest_referenced(f->index, d, &referenced));
  assert_true(referenced);
  digest_hex(d, "source-bytes");
  assert_ok(kiln_index_digest_referenced(f->index, d, &referenced));
  assert_true(referenced);
  /* A source_digest names a meaning, not a blob. */
  digest_hex(d, "meaning");
  assert_ok(kiln_index_digest_referenced(f->index, d, &referenced));
  assert_false(referenced);
  digest_hex(d, "k");
  assert_ok(kiln_index_digest_referenced(f->index, d, &referenced));
  assert_false(referenced);

  digest_hex(d, "k");
  bool evicted = false;
  assert_ok(kiln_index_artifact_evict(f->index, d, &evicted));
  assert_true(evicted);
  digest_hex(d, "blob");
  referenced = true;
  assert_ok(kiln_index_digest_referenced(f->index, d, &referenced));
  assert_false(referenced);
}

typedef struct visit_s {
  char seen[16][65];
  size_t count;
  size_t fail_at;     /* fail on this call (1-based); 0: never */
  kiln_index_t *drop; /* drop each visited digest through this index; NULL: no */
} visit_t;

static KILN_MUST_USE kiln_status_t record_digest(void *user, const char *digest) {
  visit_t *v = user;
  if (v->count >= 16) return KILN_STATUS(KILN_STATUS_INTERNAL, "too many digests");
  snprintf(v->seen[v->count++], 65, "%s", digest);
  if (v->fail_at && v->count == v->fail_at) return KILN_STATUS(KILN_STATUS_ABORTED, "stop at %zu", v->count);
  if (v->drop) return kiln_index_drop_digest(v->drop, digest, NULL, 0, NULL);
  return NULL;
}

static int compare_strings(const void *a, const void *b) { return strcmp(a, b); }

static void test_visit_digests(void **state) {
  fixture_t *f = *state;
  put_artifact(f->index, "k1", "shared", "src", 1);
  put_artifact(f->index, "k2", "shared", "src", 2);
  put_artifact(f->index, "k3", "own", "src", 3);
  kiln_index_source_t s;
  make_source(&s, "source", NULL, 1);
  assert_ok(kiln_index_source_put(f->index, &s));
  make_source(&s, "own", NULL, 1); /* same blob named by a source and an artifact */
  assert_ok(kiln_index_source_put(f->index, &s));

  char want[3][65];
  digest_hex(want[0], "shared");
  digest_hex(want[1], "own");
  digest_hex(want[2], "source");
  qsort(want, 3, sizeof want[0], compare_strings);

  visit_t v = {0};
  assert_ok(kiln_index_visit_digests(f->index, record_digest, &v));
  assert_int_equal(v.count, 3);
  for (size_t i = 0; i < 3; i++) assert_string_equal(v.seen[i], want[i]);

  /* A failure from fn stops the walk and comes back unchanged. */
  v = (visit_t){.fail_at = 2};
  assert_code(kiln_index_visit_digests(f->index, record_digest, &v), KILN_STATUS_ABORTED);
  assert_int_equal(v.count, 2);

  /* fn may change the index it is walking: repair drops dangling rows. */
  v = (visit_t){.drop = f->index};
  assert_ok(kiln_index_visit_digests(f->index, record_digest, &v));
  assert_int_equal(v.count, 3);
  kiln_index_totals_t t;
  assert_ok(kiln_index_totals(f->index, &t));
  assert_int_equal(t.artifacts, 0);
  assert_int_equal(t.sources, 0);
  assert_int_equal(t.quarantined, 0);

  v = (visit_t){0};
  assert_ok(kiln_index_visit_digests(f->index, record_digest, &v));
  assert_int_equal(v.count, 0);
}

static void test_drop_digest(void **state) {
  fixture_t *f = *state;
  kiln_index_artifact_t a;
  make_artifact(&a, "k1", "bad", "src", 1);
  kiln_index_label_t labels[] = {{"team", "a"}};
  a.labels = labels;
  a.n_labels = 1;
  assert_ok(kiln_index_artifact_put(f->index, &a));
  put_artifact(f->index, "k2", "bad", "src", 2);
  put_artifact(f->index, "k3", "good", "src", 3);
  kiln_index_source_t s;
  make_source(&s, "bad", NULL, 1);
  assert_ok(kiln_index_source_put(f->index, &s));
  make_source(&s, "good-source", NULL, 1);
  assert_ok(kiln_index_source_put(f->index, &s));

  char bad[65], good[65];
  digest_hex(bad, "bad");
  digest_hex(good, "good");
  assert_false(quarantined(f->path, bad));

  size_t rows = 0;
  assert_ok(kiln_index_drop_digest(f->index, bad, "content does not match its digest", 1234, &rows));
  assert_int_equal(rows, 3); /* two artifacts, one source */
  assert_true(quarantined(f->path, bad));
  assert_false(quarantined(f->path, good));
  kiln_index_artifact_t got;
  assert_code(kiln_index_artifact_get_by_digest(f->index, bad, &got), KILN_STATUS_NOT_FOUND);
  kiln_index_source_t sgot;
  assert_code(kiln_index_source_get(f->index, bad, &sgot), KILN_STATUS_NOT_FOUND);
  kiln_index_totals_t t;
  assert_ok(kiln_index_totals(f->index, &t));
  assert_int_equal(t.artifacts, 1);
  assert_int_equal(t.sources, 1);
  assert_int_equal(t.quarantined, 1);

  /* Quarantining again is idempotent. */
  assert_ok(kiln_index_drop_digest(f->index, bad, "again", 2000, &rows));
  assert_int_equal(rows, 0);
  assert_ok(kiln_index_totals(f->index, &t));
  assert_int_equal(t.quarantined, 1);

  /* NULL reason: rows go, nothing is recorded. */
  assert_ok(kiln_index_drop_digest(f->index, good, NULL, 3000, NULL));
  assert_false(quarantined(f->path, good));
  assert_ok(kiln_index_totals(f->index, &t));
  assert_int_equal(t.artifacts, 0);
  assert_int_equal(t.quarantined, 1);

  assert_code(kiln_index_drop_digest(f->index, "short", "x", 1, &rows), KILN_STATUS_INVALID_ARGUMENT);
}

static void test_totals(void **state) {
  fixture_t *f = *state;
  kiln_index_artifact_t a;
  make_artifact(&a, "k1", "shared", "src", 1);
  a.size = 1000;
  a.stored_size = 400;
  assert_ok(kiln_index_artifact_put(f->index, &a));
  make_artifact(&a, "k2", "shared", "src", 2); /* same blob: stored once */
  a.size = 1000;
  a.stored_size = 400;
  assert_ok(kiln_index_artifact_put(f->index, &a));
  make_artifact(&a, "k3", "own", "src", 3);
  a.size = 50;
  a.stored_size = 50;
  a.pinned = true;
  a.hits = 5;
  assert_ok(kiln_index_artifact_put(f->index, &a));
  char key[65];
  digest_hex(key, "k1");
  assert_ok(kiln_index_artifact_record_hits(f->index, key, 10, 1));

  kiln_index_source_t s;
  make_source(&s, "s1", NULL, 1);
  s.size = 700;
  s.stored_size = 300;
  assert_ok(kiln_index_source_put(f->index, &s));
  make_source(&s, "s2", NULL, 1);
  s.size = 11;
  s.stored_size = 11;
  assert_ok(kiln_index_source_put(f->index, &s));
  digest_hex(key, "elsewhere");
  assert_ok(kiln_index_drop_digest(f->index, key, "quarantined", 1, NULL));

  kiln_index_totals_t t;
  assert_ok(kiln_index_totals(f->index, &t));
  assert_int_equal(t.artifacts, 3);
  assert_int_equal(t.artifact_bytes, 2050);
  assert_int_equal(t.artifact_stored_bytes, 450);
  assert_int_equal(t.sources, 2);
  assert_int_equal(t.source_bytes, 711);
  assert_int_equal(t.source_stored_bytes, 311);
  assert_int_equal(t.pinned, 1);
  assert_int_equal(t.hits, 6);
  assert_int_equal(t.quarantined, 1);
}

/* ---- Transactions and connections ------------------------------------------------- */

static void test_explicit_transactions(void **state) {
  fixture_t *f = *state;
  char key[65];
  digest_hex(key, "k");
  kiln_index_artifact_t got;

  assert_ok(kiln_index_begin(f->index));
  assert_code(kiln_index_begin(f->index), KILN_STATUS_FAILED_PRECONDITION);
  put_artifact(f->index, "k", "blob", "src", 1);
  kiln_index_rollback(f->index);
  assert_code(kiln_index_artifact_get(f->index, key, &got), KILN_STATUS_NOT_FOUND);

  /* put (with labels) and drop_digest join the open transaction. */
  assert_ok(kiln_index_begin(f->index));
  kiln_index_artifact_t a;
  make_artifact(&a, "k", "blob", "src", 1);
  kiln_index_label_t labels[] = {{"team", "a"}};
  a.labels = labels;
  a.n_labels = 1;
  assert_ok(kiln_index_artifact_put(f->index, &a));
  put_artifact(f->index, "k2", "doomed", "src", 2);
  char doomed[65];
  digest_hex(doomed, "doomed");
  assert_ok(kiln_index_drop_digest(f->index, doomed, "bad", 3, NULL));
  /* A failing put inside the transaction undoes only itself. */
  a.target = "";
  assert_code(kiln_index_artifact_put(f->index, &a), KILN_STATUS_INVALID_ARGUMENT);
  assert_ok(kiln_index_commit(f->index));

  assert_ok(kiln_index_artifact_get(f->index, key, &got));
  assert_int_equal(got.n_labels, 1);
  kiln_index_artifact_deinit(&got);
  assert_true(quarantined(f->path, doomed));
  assert_code(kiln_index_artifact_get_by_digest(f->index, doomed, &got), KILN_STATUS_NOT_FOUND);

  assert_code(kiln_index_commit(f->index), KILN_STATUS_FAILED_PRECONDITION);
  kiln_index_rollback(f->index); /* nothing open: no-op */
  kiln_index_rollback(NULL);
}

static void test_busy_writer_blocks_writes_not_reads(void **state) {
  fixture_t *f = *state;
  put_artifact(f->index, "committed", "blob1", "src", 1);
  kiln_index_t *other = NULL;
  assert_ok(kiln_index_open(f->path, &other));
  kiln_index_set_busy_timeout_ms(other, 200);

  assert_ok(kiln_index_begin(f->index));
  put_artifact(f->index, "pending", "blob2", "src", 2);

  char committed[65], pending[65];
  digest_hex(committed, "committed");
  digest_hex(pending, "pending");
  kiln_index_artifact_t a;
  make_artifact(&a, "blocked", "blob3", "src", 3);

  int64_t start = now_ms_monotonic();
  assert_code(kiln_index_artifact_put(other, &a), KILN_STATUS_UNAVAILABLE);
  int64_t waited = now_ms_monotonic() - start;
  assert_true(waited >= 150); /* it waited for the lock rather than failing at once */
  assert_true(waited < 4000); /* and for its own timeout, not the 5 s default */
  assert_code(kiln_index_artifact_record_hits(other, committed, 10, 1), KILN_STATUS_UNAVAILABLE);
  assert_code(kiln_index_begin(other), KILN_STATUS_UNAVAILABLE);

  /* WAL: reads go on, and see only committed rows. */
  kiln_index_artifact_t got;
  assert_ok(kiln_index_artifact_get(other, committed, &got));
  kiln_index_artifact_deinit(&got);
  assert_code(kiln_index_artifact_get(other, pending, &got), KILN_STATUS_NOT_FOUND);
  kiln_index_totals_t t;
  assert_ok(kiln_index_totals(other, &t));
  assert_int_equal(t.artifacts, 1);

  assert_ok(kiln_index_commit(f->index));
  assert_ok(kiln_index_artifact_get(other, pending, &got));
  kiln_index_artifact_deinit(&got);
  assert_ok(kiln_index_artifact_put(other, &a));
  assert_ok(kiln_index_totals(f->index, &t));
  assert_int_equal(t.artifacts, 3);
  kiln_index_close(other);
}

#define THREADS        4
#define OPS_PER_THREAD 200
#define SHARED_BLOBS   10

typedef struct worker_s {
  const char *path;
  pthread_barrier_t *barrier;
  int id;
  int puts, touches;
  int failures;
  char first_failure[512];
} worker_t;

static void worker_fail(worker_t *w, const char *what, kiln_status_t st) {
  if (!w->failures++)
    snprintf(w->first_failure, sizeof w->first_failure, "thread %d: %s: %s (%s)", w->id, what,
             kiln_status_message(st), kiln_status_code_name(kiln_status_code(st)));
  kiln_status_free(st);
}

static void *worker_main(void *arg) {
  worker_t *w = arg;
  kiln_index_t *index = NULL;
  pthread_barrier_wait(w->barrier); /* all open the fresh file at once */
  kiln_status_t st = kiln_index_open(w->path, &index);
  if (st) {
    worker_fail(w, "open", st);
    return NULL;
  }
  if (kiln_index_schema_version(index) != kiln_index_latest_schema_version())
    worker_fail(w, "schema version", KILN_STATUS(KILN_STATUS_INTERNAL, "wrong version"));
  char key[65], prev[65] = "";
  for (int i = 0; i < OPS_PER_THREAD; i++) {
    kiln_index_artifact_t got;
    switch (i % 4) {
      case 0: {
        kiln_index_artifact_t a;
        char key_seed[32], blob_seed[32];
        snprintf(key_seed, sizeof key_seed, "t%d-%d", w->id, i);
        snprintf(blob_seed, sizeof blob_seed, "blob%d", (i / 4) % SHARED_BLOBS);
        make_artifact(&a, key_seed, blob_seed, "src", i);
        kiln_index_label_t labels[] = {{"thread", "t"}, {"op", "put"}};
        a.labels = labels;
        a.n_labels = 2;
        if ((st = kiln_index_artifact_put(index, &a)))
          worker_fail(w, "put", st);
        else
          w->puts++;
        memcpy(prev, a.cache_key, sizeof prev);
        break;
      }
      case 1:
        if ((st = kiln_index_artifact_get(index, prev, &got)))
          worker_fail(w, "get", st);
        else if (got.n_labels != 2)
          worker_fail(w, "get labels", KILN_STATUS(KILN_STATUS_INTERNAL, "labels lost"));
        kiln_index_artifact_deinit(&got);
        break;
      case 2:
        if ((st = kiln_index_artifact_record_hits(index, prev, 1000 + i, 1)))
          worker_fail(w, "record_hits", st);
        else
          w->touches++;
        break;
      default: {
        digest_hexf(key, "blob%d", (i / 4) % SHARED_BLOBS); /* put by this thread at i - 3 */
        if ((st = kiln_index_artifact_get_by_digest(index, key, &got))) worker_fail(w, "get_by_digest", st);
        kiln_index_artifact_deinit(&got);
        kiln_index_artifact_t *found = NULL;
        size_t n = 0;
        kiln_index_page_query_t query = {.target = "llvm-cpu:x86_64-linux-gnu:znver4", .limit = 5};
        if ((st = kiln_index_artifact_find_page(index, &query, &found, &n))) worker_fail(w, "find_page", st);
        kiln_index_artifacts_free(found, n);
        break;
      }
    }
  }
  kiln_index_close(index);
  return NULL;
}

static void test_concurrent_connections(void **state) {
  fixture_t *f = *state;
  char path[PATH_MAX];
  snprintf(path, sizeof path, "%s/concurrent.db", f->dir); /* fresh: opens race to migrate */
  pthread_barrier_t barrier;
  assert_int_equal(pthread_barrier_init(&barrier, NULL, THREADS), 0);
  worker_t workers[THREADS];
  pthread_t threads[THREADS];
  for (int i = 0; i < THREADS; i++) {
    workers[i] = (worker_t){.path = path, .barrier = &barrier, .id = i};
    assert_int_equal(pthread_create(&threads[i], NULL, worker_main, &workers[i]), 0);
  }
  int puts = 0, touches = 0;
  for (int i = 0; i < THREADS; i++) {
    assert_int_equal(pthread_join(threads[i], NULL), 0);
    if (workers[i].failures)
      fail_msg("%d failures; first: %s", workers[i].failures, workers[i].first_failure);
    puts += workers[i].puts;
    touches += workers[i].touches;
  }
  pthread_barrier_destroy(&barrier);
  assert_int_equal(puts, THREADS * OPS_PER_THREAD / 4);
  assert_int_equal(touches, THREADS * OPS_PER_THREAD / 4);

  kiln_index_t *index = NULL;
  assert_ok(kiln_index_open(path, &index));
  kiln_index_totals_t t;
  kiln_status_t st = kiln_index_totals(index, &t);
  kiln_index_close(index);
  assert_ok(st);
  assert_int_equal(t.artifacts, (uint64_t)puts);
  assert_int_equal(t.hits, (uint64_t)touches);
  assert_int_equal(t.artifact_bytes, (uint64_t)puts * 4096);
  assert_int_equal(t.artifact_stored_bytes, SHARED_BLOBS * 1500);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test_setup_teardown(test_open_creates_schema, setup, teardown),
      cmocka_unit_test_setup_teardown(test_reopen_is_noop, setup, teardown),
      cmocka_unit_test_setup_teardown(test_newer_schema_is_refused, setup, teardown),
      cmocka_unit_test_setup_teardown(test_garbage_file_is_data_loss, setup, teardown),
      cmocka_unit_test_setup_teardown(test_open_bad_paths, setup, teardown),
      cmocka_unit_test_setup_teardown(test_previous_schema_migrates, setup, teardown),
      cmocka_unit_test_setup_teardown(test_version_3_migrates_to_blob_checks, setup, teardown),
      cmocka_unit_test_setup_teardown(test_blob_checks, setup, teardown),
      cmocka_unit_test_setup_teardown(test_put_get_round_trip, setup, teardown),
      cmocka_unit_test_setup_teardown(test_put_rejects_bad_records, setup, teardown),
      cmocka_unit_test_setup_teardown(test_get_missing_is_not_found, setup, teardown),
      cmocka_unit_test_setup_teardown(test_replace_keeps_pin_and_hits, setup, teardown),
      cmocka_unit_test_setup_teardown(test_provenance_in_every_read, setup, teardown),
      cmocka_unit_test_setup_teardown(test_get_by_digest_returns_newest, setup, teardown),
      cmocka_unit_test_setup_teardown(test_record_hits, setup, teardown),
      cmocka_unit_test_setup_teardown(test_set_pinned, setup, teardown),
      cmocka_unit_test_setup_teardown(test_evict_takes_labels, setup, teardown),
      cmocka_unit_test_setup_teardown(test_find_page_filters, setup, teardown),
      cmocka_unit_test_setup_teardown(test_find_page_by_column, setup, teardown),
      cmocka_unit_test_setup_teardown(test_find_page_by_labels, setup, teardown),
      cmocka_unit_test_setup_teardown(test_find_page_limit_and_order, setup, teardown),
      cmocka_unit_test_setup_teardown(test_find_page_keyset, setup, teardown),
      cmocka_unit_test_setup_teardown(test_find_page_rejects, setup, teardown),
      cmocka_unit_test_setup_teardown(test_artifact_lru, setup, teardown),
      cmocka_unit_test_setup_teardown(test_sources_put_get_touch_evict, setup, teardown),
      cmocka_unit_test_setup_teardown(test_source_lru, setup, teardown),
      cmocka_unit_test_setup_teardown(test_digest_referenced, setup, teardown),
      cmocka_unit_test_setup_teardown(test_visit_digests, setup, teardown),
      cmocka_unit_test_setup_teardown(test_drop_digest, setup, teardown),
      cmocka_unit_test_setup_teardown(test_totals, setup, teardown),
      cmocka_unit_test_setup_teardown(test_explicit_transactions, setup, teardown),
      cmocka_unit_test_setup_teardown(test_busy_writer_blocks_writes_not_reads, setup, teardown),
      cmocka_unit_test_setup_teardown(test_concurrent_connections, setup, teardown),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
