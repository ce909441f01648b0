/* Crash tests for cache/cache: a writer process killed at random points.
 *
 * Each round forks a child that opens the cache on one shared directory and stores
 * artifacts in a loop (sizes 1 B..1 MiB, half of them compressible, every one with
 * its own source digest). Only after kiln_cache_artifact_put returns OK does the
 * child report the artifact (its content seed, cache key and digest) on a pipe. The
 * parent SIGKILLs the child after 1..40 ms, drains the pipe, reopens the cache
 * (which repairs it) and checks: every reported key looks up and its blob reads
 * back byte for byte as the content regenerated from the seed; verify finds no
 * CORRUPT_BLOB and no MISSING_BLOB; tmp/ is empty. gc keeps the shared store small
 * between rounds. KILN_CRASH_SEED=<n> replays the random delays of a run. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <signal.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "base/alloc.h"
#include "base/digest.h"
#include "base/status.h"
#include "base/time.h"
#include "cache/cache.h"
#include "tests/unit/support/testing.h"

#define MIB          (1024 * 1024)
#define ROUNDS       40
#define MAX_DELAY_MS 40
#define KEEP_BYTES   (8 * MIB) /* gc target between rounds */
#define COMPILER     "kiln-mlir 0.1.0 llvm 22.1.8"
#define READY        UINT64_MAX /* the seed of the child's first report: the cache is open */

/* What the child reports per stored artifact: one write, well under PIPE_BUF, so
 * a report is never torn even when the writer dies. */
typedef struct report_s {
  uint64_t seed;
  char key[KILN_DIGEST_HEX_LEN + 1];
  char digest[KILN_DIGEST_HEX_LEN + 1];
} report_t;

typedef struct fixture_s {
  char *root;    /* kiln_test_tmpdir, removed in teardown */
  char dir[320]; /* root/cache, shared by every round */
} fixture_t;

/* ---- helpers ---- */

#define assert_ok kiln_test_assert_ok

static uint64_t mix(uint64_t seed) {
  uint64_t s = seed * 0x9e3779b97f4a7c15ULL + 0x632be59bd9b4e019ULL;
  kiln_test_random_next(&s);
  return kiln_test_random_next(&s);
}

/* Content of `seed`: its length (1 B..1 MiB) and bytes, half of the seeds giving
 * text that compresses, the other half noise. */
static size_t content_len(uint64_t seed) { return 1 + (size_t)(mix(seed) % MIB); }

static void content_fill(uint64_t seed, unsigned char *p, size_t len) {
  uint64_t s = mix(seed ^ 0x5bd1e995u) | 1;
  if (seed & 1) {
    static const char *const words[] = {"kiln ", "iree ", "vmfb ",   "module ",
                                        "func ", "%arg ", "tensor ", "\n"};
    size_t i = 0;
    while (i < len) {
      const char *w = words[kiln_test_random_next(&s) % 8];
      for (; *w && i < len; w++) p[i++] = (unsigned char)*w;
    }
  } else {
    size_t i = 0;
    for (; i + 8 <= len; i += 8) {
      uint64_t r = kiln_test_random_next(&s);
      memcpy(p + i, &r, 8);
    }
    for (; i < len; i++) p[i] = (unsigned char)kiln_test_random_next(&s);
  }
}

/* Key parts of `seed`; `src` holds the source digest (distinct per seed). */
static kiln_cache_key_parts_t parts_for(uint64_t seed, char src[KILN_DIGEST_HEX_LEN + 1]) {
  static const char *const flags[] = {"-O2", "--iree-hal-target-backends=vulkan"};
  char text[48];
  int n = snprintf(text, sizeof text, "crash-source-%llu", (unsigned long long)seed);
  kiln_digest_t d;
  kiln_digest_of(text, (size_t)n, &d);
  kiln_digest_hex_t hex;
  kiln_digest_to_hex(&d, &hex);
  memcpy(src, hex.text, KILN_DIGEST_HEX_LEN + 1);
  return (kiln_cache_key_parts_t){.source_digest = src,
                                  .target = "vulkan-spirv",
                                  .flags = flags,
                                  .n_flags = 2,
                                  .compiler = COMPILER,
                                  .hal_version = 7,
                                  .bytecode_version = (1u << 16) | 2u};
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

/* ---- the child ---- */

static void write_all_or_die(int fd, const void *p, size_t len) {
  const char *c = p;
  while (len) {
    ssize_t n = write(fd, c, len);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) _exit(5);
    c += n;
    len -= (size_t)n;
  }
}

/* Stores artifacts until killed. Never returns. */
static _Noreturn void child_main(const char *dir, int fd, uint64_t round) {
  kiln_cache_options_t options = {.compression = KILN_BLOB_COMPRESSION_AUTO};
  kiln_cache_t *cache = NULL;
  kiln_status_t st = kiln_cache_open(dir, &options, &cache, NULL);
  if (st) {
    fprintf(stderr, "child: open: %s\n", kiln_status_message(st));
    _exit(3);
  }
  report_t ready;
  memset(&ready, 0, sizeof ready);
  ready.seed = READY;
  write_all_or_die(fd, &ready, sizeof ready);
  unsigned char *buf = malloc(MIB);
  if (!buf) _exit(6);
  for (uint64_t i = 0;; i++) {
    uint64_t seed = (round << 32) | i;
    size_t len = content_len(seed);
    content_fill(seed, buf, len);
    char src[KILN_DIGEST_HEX_LEN + 1];
    kiln_cache_key_parts_t parts = parts_for(seed, src);
    kiln_index_artifact_t rec;
    st = kiln_cache_artifact_put(cache, &parts, buf, len, NULL, &rec);
    if (st) {
      fprintf(stderr, "child: put: %s\n", kiln_status_message(st));
      _exit(4);
    }
    report_t r;
    memset(&r, 0, sizeof r);
    r.seed = seed;
    memcpy(r.key, rec.cache_key, sizeof r.key);
    memcpy(r.digest, rec.artifact_digest, sizeof r.digest);
    kiln_index_artifact_deinit(&rec);
    write_all_or_die(fd, &r, sizeof r);
  }
}

/* ---- fixture ---- */

static int setup(void **state) {
  fixture_t *f = calloc(1, sizeof *f);
  if (!f) return -1;
  if (!(f->root = kiln_test_tmpdir("kiln-cache-crash"))) {
    free(f);
    return -1;
  }
  snprintf(f->dir, sizeof f->dir, "%s/cache", f->root);
  *state = f;
  return 0;
}

static int teardown(void **state) {
  fixture_t *f = *state;
  kiln_test_remove_tree(f->root);
  free(f->root);
  free(f);
  return 0;
}

/* ---- checks ---- */

/* Checks one reported artifact against the content regenerated from its seed. */
static void check_report(kiln_cache_t *cache, const report_t *r, unsigned char *expect) {
  size_t len = content_len(r->seed);
  content_fill(r->seed, expect, len);
  char src[KILN_DIGEST_HEX_LEN + 1];
  kiln_cache_key_parts_t parts = parts_for(r->seed, src);
  kiln_digest_hex_t key;
  assert_ok(kiln_cache_key_compute(&parts, &key));
  assert_string_equal(key.text, r->key);
  kiln_digest_t d;
  kiln_digest_of(expect, len, &d);
  kiln_digest_hex_t digest;
  kiln_digest_to_hex(&d, &digest);
  assert_string_equal(digest.text, r->digest);

  kiln_index_artifact_t rec;
  kiln_status_t st = kiln_cache_artifact_lookup(cache, r->key, &rec);
  if (st) {
    fail_msg(
        "artifact %s (seed %llx, %zu bytes) was stored before the crash but lookup says "
        "%s: %s",
        r->key, (unsigned long long)r->seed, len, kiln_status_code_name(kiln_status_code(st)),
        kiln_status_message(st));
  }
  assert_string_equal(rec.artifact_digest, r->digest);
  assert_int_equal(rec.size, len);
  kiln_index_artifact_deinit(&rec);
  void *got = NULL;
  size_t got_len = 0;
  assert_ok(kiln_cache_get_blob(cache, r->digest, &got, &got_len));
  assert_int_equal(got_len, len);
  assert_memory_equal(got, expect, len);
  kiln_free(got);
}

static size_t drain(int fd, report_t **reports, size_t *cap) {
  size_t n = 0;
  for (;;) {
    if (n == *cap) {
      *cap = *cap ? *cap * 2 : 64;
      *reports = realloc(*reports, *cap * sizeof **reports);
      assert_non_null(*reports);
    }
    size_t got = 0;
    while (got < sizeof(report_t)) {
      ssize_t k = read(fd, (char *)&(*reports)[n] + got, sizeof(report_t) - got);
      if (k < 0 && errno == EINTR) continue;
      assert_true(k >= 0);
      if (k == 0) break;
      got += (size_t)k;
    }
    if (got == 0) return n;
    assert_int_equal(got, sizeof(report_t)); /* reports are written whole */
    n++;
  }
}

/* ---- the test ---- */

static void test_killed_writer_leaves_a_consistent_cache(void **state) {
  fixture_t *f = *state;
  uint64_t seed = (uint64_t)kiln_time_monotonic_ns();
  const char *env = getenv("KILN_CRASH_SEED");
  if (env && *env) seed = strtoull(env, NULL, 0);
  fprintf(stderr, "  KILN_CRASH_SEED=%llu\n", (unsigned long long)seed);
  uint64_t rng = seed | 1;
  unsigned char *expect = malloc(MIB);
  assert_non_null(expect);
  report_t *reports = NULL;
  size_t cap = 0, total_reports = 0, total_orphans = 0, total_dangling = 0, killed_mid = 0;
  size_t killed_writing = 0;
  int64_t t0 = kiln_time_monotonic_ns();

  for (uint64_t round = 1; round <= ROUNDS; round++) {
    int fds[2];
    assert_int_equal(pipe(fds), 0);
    pid_t pid = fork();
    assert_true(pid >= 0);
    if (pid == 0) {
      close(fds[0]);
      child_main(f->dir, fds[1], round);
    }
    close(fds[1]);
    /* Every fourth round the clock starts at fork, so some kills land in open's
     * repair; the others start it when the child has the cache open, so most
     * kills land in puts. */
    report_t ready;
    bool from_ready = round % 4 != 0;
    if (from_ready) {
      ssize_t k = read(fds[0], &ready, sizeof ready);
      if (k != (ssize_t)sizeof ready || ready.seed != READY) {
        kill(pid, SIGKILL);
        waitpid(pid, NULL, 0);
        close(fds[0]);
        free(expect);
        free(reports);
        fail_msg("round %llu: the writer did not open the cache", (unsigned long long)round);
      }
    }
    long delay_ms = 1 + (long)(kiln_test_random_next(&rng) % MAX_DELAY_MS);
    struct timespec ts = {delay_ms / 1000, (delay_ms % 1000) * 1000000L};
    while (nanosleep(&ts, &ts) != 0 && errno == EINTR) {
    }
    assert_int_equal(kill(pid, SIGKILL), 0);
    int status = 0;
    assert_int_equal(waitpid(pid, &status, 0), pid);
    if (!WIFSIGNALED(status) || WTERMSIG(status) != SIGKILL) {
      close(fds[0]);
      free(expect);
      free(reports);
      fail_msg("round %llu: the writer ended by itself (status %d) before it was killed",
               (unsigned long long)round, status);
    }
    size_t n = drain(fds[0], &reports, &cap);
    close(fds[0]);
    if (!from_ready && n > 0 && reports[0].seed == READY) {
      memmove(reports, reports + 1, --n * sizeof *reports);
    }
    total_reports += n;
    char tmp[PATH_MAX];
    snprintf(tmp, sizeof tmp, "%s/tmp", f->dir);
    struct stat tmp_st;
    if (stat(tmp, &tmp_st) == 0 && count_entries(tmp) > 0) killed_writing++;

    kiln_cache_options_t options = {.compression = KILN_BLOB_COMPRESSION_AUTO};
    kiln_cache_t *cache = NULL;
    kiln_cache_repair_t repair;
    assert_ok(kiln_cache_open(f->dir, &options, &cache, &repair));
    total_orphans += repair.orphan_blobs;
    total_dangling += repair.dangling_rows;
    if (repair.orphan_blobs) killed_mid++;
    assert_int_equal(count_entries(tmp), 0);
    /* A process crash loses nothing committed: no row may have lost its blob. */
    assert_int_equal(repair.dangling_rows, 0);

    for (size_t i = 0; i < n; i++) check_report(cache, &reports[i], expect);

    kiln_cache_verify_report_t report;
    assert_ok(kiln_cache_verify(cache, false, NULL, NULL, &report));
    size_t bad = 0;
    for (size_t i = 0; i < report.n_problems; i++) {
      const kiln_cache_problem_t *p = &report.problems[i];
      if (p->kind == KILN_CACHE_PROBLEM_CORRUPT_BLOB || p->kind == KILN_CACHE_PROBLEM_MISSING_BLOB) {
        fprintf(stderr, "  round %llu: problem kind=%d digest=%s: %s\n", (unsigned long long)round,
                (int)p->kind, p->digest, p->detail);
        bad++;
      }
    }
    kiln_cache_verify_report_deinit(&report);
    assert_int_equal(bad, 0);
    assert_int_equal(count_entries(tmp), 0);

    kiln_cache_gc_report_t gc;
    assert_ok(kiln_cache_gc(cache, KEEP_BYTES, &gc));
    kiln_cache_close(cache);
  }
  fprintf(stderr,
          "  %d rounds in %.1f s: %zu artifacts stored and checked, %zu orphan blobs and %zu "
          "dangling rows repaired; %zu rounds killed while writing a blob, %zu between a "
          "blob and its row\n",
          ROUNDS, (double)(kiln_time_monotonic_ns() - t0) / 1e9, total_reports, total_orphans, total_dangling,
          killed_writing, killed_mid);
  free(expect);
  free(reports);
  /* The test must have exercised something: some children got artifacts stored. */
  assert_true(total_reports > 0);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test_setup_teardown(test_killed_writer_leaves_a_consistent_cache, setup, teardown),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
