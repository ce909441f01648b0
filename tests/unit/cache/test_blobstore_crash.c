/* Crash test for cache/blobstore: 40 rounds (up to 40 more, with longer delays,
 * until both checks below have something to check) of a forked child that writes blobs in
 * a tight loop (1 byte .. 2 MiB, half compressible, some above the writer's
 * in-memory limit so they are spilled and compressed from tmp/, some duplicates of
 * the previous round's blobs, half one-shot puts and half streamed in chunks) and
 * reports each digest on a pipe once commit has returned. The parent SIGKILLs it
 * after 1..50 ms, reopens the store and checks that (a) every reported digest
 * reads back and verifies, (b) every blob under blobs/ verifies, has one name
 * only, and nothing else is there (no partial blob is ever visible), and (c) tmp/
 * is empty after the reopen. The test also requires that kills really landed
 * mid-write (tmp/ non-empty before some reopen), so it cannot pass vacuously.
 * SIGKILL tests process crashes; power loss (the fsyncs) is beyond a unit test. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <dirent.h>
#include <errno.h>
#include <signal.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "base/alloc.h"
#include "base/digest.h"
#include "base/log.h"
#include "base/status.h"
#include "cache/blobstore.h"
#include "tests/unit/support/testing.h"

#define MIB (1024 * 1024)
enum {
  ROUNDS = 40,
  /* Rounds added, with longer kill delays, while no blob committed yet or no kill
   * landed mid-write: a loaded machine under ASan once let 40 children of at most
   * 50 ms each commit nothing. */
  EXTRA_ROUNDS = 40,
  MAX_BLOB = 2 * MIB,
  /* Above blobstore.c's 8 MiB in-memory limit: exercises the spill path. */
  SPILL_MIN = 9 * MIB,
  SPILL_MAX = 10 * MIB,
  CHUNK = 64 * 1024,
  MAX_REPORTED = 4096,
  POOL = SPILL_MAX + MAX_BLOB,
};

/* Made once by the parent and inherited by each child, so children spend their
 * few milliseconds in the blob store, not in making data. */
static unsigned char *pools[2]; /* random, compressible */

typedef struct fixture_s {
  char *root; /* kiln_test_tmpdir, removed in teardown */
} fixture_t;

static void fill(unsigned char *p, size_t len, bool compressible, uint64_t seed) {
  if (compressible) {
    kiln_test_fill_compressible(p, len, seed);
    return;
  }
  /* Eight noise bytes a draw, not kiln_test_fill_random's one: hence a local loop. */
  uint64_t s = seed * 0x9e3779b97f4a7c15ULL + 1;
  size_t i = 0;
  for (; i + 8 <= len; i += 8) {
    uint64_t r = kiln_test_random_next(&s);
    memcpy(p + i, &r, 8);
  }
  for (; i < len; i++) p[i] = (unsigned char)(kiln_test_random_next(&s) >> 56);
}

/* The i-th blob of a round, a slice of a pool: it follows from (round, i) alone, so
 * a later round can write the same content again to exercise duplicates. */
static const unsigned char *blob_of(unsigned round, unsigned i, size_t *out_len) {
  uint64_t s = ((uint64_t)round << 32 | i) * 0xd1342543de82ef95ULL + 7;
  uint64_t r = kiln_test_random_next(&s);
  size_t len;
  bool compressible;
  if (r % 12 == 0) {
    len = SPILL_MIN + (size_t)(kiln_test_random_next(&s) % (SPILL_MAX - SPILL_MIN));
    compressible = true;
  } else {
    len = 1 + (size_t)(kiln_test_random_next(&s) % MAX_BLOB);
    compressible = (r >> 8) & 1;
  }
  *out_len = len;
  return pools[compressible] + kiln_test_random_next(&s) % (POOL - len + 1);
}

static void report(int fd, const char *line) {
  size_t len = strlen(line);
  if (write(fd, line, len) != (ssize_t)len) _exit(4);
}

static _Noreturn void child_main(const char *dir, int fd, unsigned round) {
  kiln_blobstore_options_t o = {.compression = KILN_BLOB_COMPRESSION_AUTO};
  kiln_blobstore_t *store = NULL;
  char line[512];
  kiln_status_t status = kiln_blobstore_open(dir, &o, &store);
  for (unsigned i = 0; !status; i++) {
    /* Every fifth blob repeats one of the previous round's. */
    size_t len = 0;
    const unsigned char *buf = blob_of(i % 5 == 4 && round > 0 ? round - 1 : round, i, &len);
    kiln_digest_t d;
    if (i % 2) {
      status = kiln_blobstore_put(store, buf, len, &d, NULL);
    } else {
      kiln_blob_writer_t *w = NULL;
      status = kiln_blob_writer_begin(store, NULL, &w);
      for (size_t off = 0; !status && off < len; off += CHUNK) {
        status = kiln_blob_writer_write(w, buf + off, len - off < CHUNK ? len - off : CHUNK);
      }
      if (status)
        kiln_blob_writer_abort(w);
      else
        status = kiln_blob_writer_commit(w, &d, NULL, NULL, NULL);
    }
    if (!status) {
      kiln_digest_hex_t hex;
      kiln_digest_to_hex(&d, &hex);
      snprintf(line, sizeof line, "%s\n", hex.text);
      report(fd, line);
    }
  }
  snprintf(line, sizeof line, "E %s: %.400s\n", kiln_status_code_name(kiln_status_code(status)),
           kiln_status_message(status));
  report(fd, line);
  _exit(3);
}

static int setup(void **state) {
  fixture_t *f = calloc(1, sizeof *f);
  if (!f) return -1;
  if (!(f->root = kiln_test_tmpdir("kiln-blobcrash"))) {
    free(f);
    return -1;
  }
  for (int k = 0; k < 2; k++) {
    if (!(pools[k] = malloc(POOL))) return -1;
    fill(pools[k], POOL, k, 1234 + (uint64_t)k);
  }
  *state = f;
  return 0;
}

static int teardown(void **state) {
  fixture_t *f = *state;
  kiln_test_remove_tree(f->root);
  free(f->root);
  for (int k = 0; k < 2; k++) {
    free(pools[k]);
    pools[k] = NULL;
  }
  free(f);
  return 0;
}

static size_t count_entries(const char *path) {
  DIR *d = opendir(path);
  if (!d) return 0; /* not created yet: the child died before open */
  size_t n = 0;
  struct dirent *e;
  while ((e = readdir(d)) != NULL) {
    if (strcmp(e->d_name, ".") != 0 && strcmp(e->d_name, "..") != 0) n++;
  }
  closedir(d);
  return n;
}

typedef struct present_s {
  kiln_digest_t *digests;
  size_t count;
  size_t cap;
  size_t junk;
} present_t;

static KILN_MUST_USE kiln_status_t collect(void *user, const kiln_digest_t *digest, const char *path,
                                           uint64_t stored_size) {
  (void)stored_size;
  present_t *p = user;
  if (!digest) {
    print_error("not a blob under blobs/: %s\n", path);
    p->junk++;
    return NULL;
  }
  if (p->count == p->cap) {
    p->cap = p->cap ? p->cap * 2 : 64;
    p->digests = realloc(p->digests, p->cap * sizeof *p->digests);
    assert_non_null(p->digests);
  }
  p->digests[p->count++] = *digest;
  return NULL;
}

static int compare_digests(const void *a, const void *b) { return memcmp(a, b, sizeof(kiln_digest_t)); }

/* Reads everything the child wrote; returns the number of digests. */
static size_t read_reports(int fd, kiln_digest_t *out, size_t cap) {
  static char text[MAX_REPORTED * 66 + 1024];
  size_t len = 0;
  for (;;) {
    ssize_t n = read(fd, text + len, sizeof text - 1 - len);
    if (n < 0 && errno == EINTR) continue;
    assert_true(n >= 0);
    if (n == 0) break;
    len += (size_t)n;
    assert_true(len < sizeof text - 1);
  }
  text[len] = '\0';
  size_t count = 0;
  for (char *line = text, *nl; (nl = strchr(line, '\n')) != NULL; line = nl + 1) {
    *nl = '\0';
    if (line[0] == 'E') fail_msg("child failed: %s", line);
    assert_true(count < cap);
    if (!kiln_digest_from_hex(line, &out[count++])) fail_msg("bad report line '%s'", line);
  }
  return count;
}

static void test_crash_rounds(void **state) {
  fixture_t *f = *state;
  char dir[320], tmp_dir[400];
  snprintf(dir, sizeof dir, "%s/store", f->root);
  snprintf(tmp_dir, sizeof tmp_dir, "%s/tmp", dir);
  static kiln_digest_t reported[MAX_REPORTED];
  /* Kill delays are random; KILN_TEST_SEED replays a run. */
  const char *env_seed = getenv("KILN_TEST_SEED");
  uint64_t seed = env_seed ? strtoull(env_seed, NULL, 10) : (uint64_t)time(NULL);
  print_message("crash test seed %llu\n", (unsigned long long)seed);
  size_t total_reported = 0, rounds_with_leftovers = 0;

  unsigned round = 0;
  for (; round < ROUNDS ||
         (round < ROUNDS + EXTRA_ROUNDS && (total_reported == 0 || rounds_with_leftovers == 0));
       round++) {
    int p[2];
    assert_int_equal(pipe(p), 0);
    pid_t pid = fork();
    assert_true(pid >= 0);
    if (pid == 0) {
      close(p[0]);
      child_main(dir, p[1], round);
    }
    close(p[1]);
    /* 1..50 ms; the extra rounds double it each time, up to 32 times. */
    unsigned scale = round < ROUNDS ? 1 : 1u << (round - ROUNDS + 1 < 5 ? round - ROUNDS + 1 : 5);
    long ms = (long)(1 + kiln_test_random_next(&seed) % 50) * (long)scale;
    struct timespec delay = {ms / 1000, (ms % 1000) * 1000000L};
    while (nanosleep(&delay, &delay) != 0 && errno == EINTR) {
    }
    kill(pid, SIGKILL);
    int wstatus = 0;
    assert_int_equal(waitpid(pid, &wstatus, 0), pid);
    size_t n = read_reports(p[0], reported, MAX_REPORTED);
    close(p[0]);
    if (!WIFSIGNALED(wstatus) || WTERMSIG(wstatus) != SIGKILL) {
      fail_msg("round %u: child ended with status %#x before it was killed", round, wstatus);
    }
    total_reported += n;
    if (count_entries(tmp_dir) > 0) rounds_with_leftovers++;

    kiln_blobstore_options_t o = {.compression = KILN_BLOB_COMPRESSION_AUTO};
    kiln_blobstore_t *store = NULL;
    kiln_status_t status = kiln_blobstore_open(dir, &o, &store);
    if (status) fail_msg("round %u: reopen: %s", round, kiln_status_message(status));
    /* (c) */
    assert_int_equal(count_entries(tmp_dir), 0);

    /* (a) every committed blob survived and is intact. */
    for (size_t i = 0; i < n; i++) {
      void *data = NULL;
      size_t len = 0;
      status = kiln_blobstore_get(store, &reported[i], &data, &len);
      if (status) {
        fail_msg("round %u: committed blob %zu of %zu: %s", round, i, n, kiln_status_message(status));
      }
      kiln_digest_t d;
      kiln_digest_of(data, len, &d);
      assert_true(kiln_digest_equal(&d, &reported[i]));
      kiln_free(data);
    }

    /* (b) whatever is visible is whole, under one name, and nothing else is there. */
    present_t present = {0};
    assert_int_equal(kiln_blobstore_visit(store, collect, &present), NULL);
    assert_int_equal(present.junk, 0);
    if (present.count) qsort(present.digests, present.count, sizeof *present.digests, compare_digests);
    for (size_t i = 0; i < present.count; i++) {
      if (i > 0 && kiln_digest_equal(&present.digests[i - 1], &present.digests[i])) {
        fail_msg("round %u: a blob is stored under two names", round);
      }
      status = kiln_blobstore_verify(store, &present.digests[i], NULL);
      if (status) fail_msg("round %u: %s", round, kiln_status_message(status));
    }
    free(present.digests);
    kiln_blobstore_close(store);
  }
  print_message("crash test: %zu committed blobs reported, %zu of %u rounds killed mid-write\n",
                total_reported, rounds_with_leftovers, round);
  assert_true(total_reported > 0);
  assert_true(rounds_with_leftovers > 0);
}

int main(void) {
  kiln_log_configure(KILN_LOG_WARN, STDERR_FILENO); /* 40 reopens would each log a cleanup */
  const struct CMUnitTest tests[] = {
      cmocka_unit_test_setup_teardown(test_crash_rounds, setup, teardown),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
