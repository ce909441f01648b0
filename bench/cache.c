/* bench_cache: how close kiln's artifact cache comes to what the machine allows.
 *
 * Everything is measured side by side in one run and printed as ratios against a
 * baseline that is the physical limit for the same job, so the numbers mean the same
 * on a laptop and on a 2-core CI VM:
 *
 * 1. Index lookup latency: kiln_cache_artifact_lookup over a cache of 10,000
 *    artifacts, random existing keys and missing keys, interleaved; p50/p90/p99/max.
 *    No baseline here: "p50 < 20 us" is an absolute budget for the RPC hot path.
 * 2. Put (compression OFF, incompressible bytes) against a raw writer that does the
 *    least any crash-safe store must do: open a tmp file, write, fsync, close, rename
 *    into a directory, fsync the directory. Skipping any step can lose or
 *    half-publish a blob after a crash, so no correct store beats it. kiln adds the
 *    SHA-256 of the bytes (before the write, on the same thread) and one SQLite row.
 * 3. Get (kiln_cache_get_blob, which checks the blob's recorded XXH3-128 as it
 *    streams) against open + read into a fresh buffer + close of the same bytes, both
 *    from page cache. Reading is the limit for serving. SHA-256 alone over 64 MiB is
 *    reported too.
 *    Hashing bound: kiln hashes on the same thread as its I/O (before each write, after
 *    each read), so kiln/raw cannot exceed raw / (raw + hash) for the same bytes. The
 *    hash of the same bytes (SHA-256 for puts, XXH3-128 for gets) is timed in the same
 *    rotation, and that bound is printed beside every put and get ratio.
 * 4. AUTO compression on compressible MLIR-like text: stored/logical size and put
 *    time next to an OFF put of the same bytes, so zstd's trade-off is visible.
 *
 * Method: kiln, raw and hash runs alternate, and which goes first alternates too, so
 * drift (journal commits, page cache, CPU clocks, neighbours) hits all alike; each row
 * is the median run. Every put stores bytes never stored before (a serial stamped into them): a put
 * of a digest already present is skipped by content addressing. Goals are reported as
 * PASS/MISS, never asserted: the program exits 0 unless an operation fails (then 1).
 *
 * All files live in one mkdtemp directory under DIR (argv), $TMPDIR or /tmp, removed
 * at the end, on failure and on SIGINT/SIGTERM/SIGHUP/SIGPIPE. Usage: bench_cache [--quick] [DIR]. --quick
 * (CI smoke): 1,000 artifacts, sizes up to 1 MiB, fewer runs. Single-threaded, except that the 10,000 setup
 * puts of section 1 run on 8 threads (each put costs two fsyncs, which concurrent writers share).
 */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <pthread.h>
#include <signal.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/statfs.h>
#include <sys/statvfs.h>
#include <sys/wait.h>
#include <unistd.h>

#include "base/alloc.h"
#include "base/digest.h"
#include "base/log.h"
#include "base/status.h"
#include "base/time.h"
#include "bench/benchlib.h"
#include "cache/blobstore.h"
#include "cache/cache.h"

#define KIB              ((size_t)1024)
#define MIB              (KIB * KIB)

#define LOOKUP_GOAL_NS   20000 /* p50 of a lookup */
#define PUT_GOAL         0.8   /* kiln/raw */
#define GET_GOAL         0.9   /* kiln/raw */
#define ARTIFACT_BYTES   256   /* blob size of the lookup population */
#define WARMUP_LOOKUPS   200
#define POPULATE_THREADS 8 /* setup only: overlaps the fsyncs of the 10,000 puts */
#define SHA_BYTES        (64 * MIB)
#define SHA_RUNS         5
#define AUTO_RUNS        3

/* One blob size of sections 2 and 3 and how many runs each side gets. */
typedef struct size_case_s {
  size_t bytes;
  size_t put_runs;
  size_t get_runs;
} size_case_t;

static const size_case_t full_sizes[] = {
    {1 * KIB, 200, 2000}, {64 * KIB, 200, 2000}, {1 * MIB, 64, 200}, {16 * MIB, 3, 10}, {256 * MIB, 3, 3},
};
static const size_case_t quick_sizes[] = {
    {1 * KIB, 50, 200},
    {64 * KIB, 50, 200},
    {1 * MIB, 10, 20},
};

typedef struct plan_s {
  bool quick;
  size_t n_artifacts;
  size_t n_lookups; /* of each kind: hits and misses */
  const size_case_t *sizes;
  size_t n_sizes;
  size_t auto_bytes; /* the compressible blob of section 4 */
} plan_t;

/* The scratch directory (benchlib's), removed by cleanup(); "" when none was made. */
static const char *scratch = "";

/* ---- failure and cleanup ---- */

static void cleanup(void) { kiln_bench_scratch_remove(); }

static _Noreturn void die(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static _Noreturn void die(const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  fputs("bench_cache: ", stderr);
  vfprintf(stderr, fmt, ap);
  fputc('\n', stderr);
  va_end(ap);
  cleanup();
  exit(1);
}

/* Consumes `st`; on failure reports what failed and exits 1. */
static void check(kiln_status_t st, const char *what) {
  if (!st) return;
  fprintf(stderr, "bench_cache: %s failed: %s: %s (at %s)\n", what,
          kiln_status_code_name(kiln_status_code(st)), kiln_status_message(st), kiln_status_where(st));
  kiln_status_free(st);
  cleanup();
  exit(1);
}

/* ---- small helpers ---- */

static uint64_t rng_state = 0x6b696c6e62656e63ull; /* fixed: runs are repeatable */

static uint64_t rng_next(void) { return kiln_bench_rng_next(&rng_state); }

static void fill_random(unsigned char *buf, size_t len) { kiln_bench_fill_random(buf, len, &rng_state); }

/* Makes the bytes unique, so each put really stores (see the design note). */
static void stamp(unsigned char *buf, size_t len, uint64_t serial) {
  memcpy(buf, &serial, len < sizeof serial ? len : sizeof serial);
}

/* Sorts in place. */
static int64_t median_ns(int64_t *v, size_t n) { return kiln_bench_median(v, n); }

/* Nearest-rank percentile of a sorted array. */
static int64_t percentile_ns(const int64_t *sorted, size_t n, unsigned pct) {
  size_t rank = (pct * n + 99) / 100;
  return sorted[rank ? rank - 1 : 0];
}

static double mb_per_s(size_t bytes, int64_t ns) { return ns > 0 ? (double)bytes * 1e3 / (double)ns : 0.0; }

static const char *size_name(size_t bytes, char *buf, size_t cap) {
  if (bytes >= MIB)
    snprintf(buf, cap, "%zu MiB", bytes / MIB);
  else
    snprintf(buf, cap, "%zu KiB", bytes / KIB);
  return buf;
}

static void path_join(char *out, const char *dir, const char *name) {
  if ((size_t)snprintf(out, PATH_MAX, "%s/%s", dir, name) >= PATH_MAX) {
    die("path too long: %s/%s; pick a shorter DIR", dir, name);
  }
}

static void write_all(int fd, const void *data, size_t len, const char *path) {
  const unsigned char *p = data;
  while (len > 0) {
    ssize_t n = write(fd, p, len);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) die("cannot write %s: %s", path, strerror(errno));
    p += n;
    len -= (size_t)n;
  }
}

static uint64_t free_bytes(const char *dir) {
  struct statvfs vfs;
  if (statvfs(dir, &vfs) != 0) die("cannot statvfs %s: %s", dir, strerror(errno));
  return (uint64_t)vfs.f_bavail * vfs.f_frsize;
}

/* ---- caches ---- */

static const char *const bench_flags[] = {"--iree-opt-level=O2", "--iree-stream-resource-index-bits=64"};

/* Key parts for source number `serial`: every serial is a distinct artifact. */
static void key_parts(uint64_t serial, kiln_digest_hex_t *source, kiln_cache_key_parts_t *parts) {
  kiln_digest_t d;
  kiln_digest_of(&serial, sizeof serial, &d);
  kiln_digest_to_hex(&d, source);
  memset(parts, 0, sizeof *parts);
  parts->source_digest = source->text;
  parts->target = "llvm-cpu:x86_64-unknown-linux-gnu";
  parts->flags = bench_flags;
  parts->n_flags = sizeof bench_flags / sizeof bench_flags[0];
  parts->compiler = "kiln-mlir 0.1.0 llvm 22.1.8";
  parts->hal_version = 7;
  parts->bytecode_version = 1u << 16;
}

static kiln_cache_t *cache_open(const char *name, kiln_blob_compression_t compression) {
  char dir[PATH_MAX];
  path_join(dir, scratch, name);
  kiln_cache_options_t options = {.compression = compression};
  kiln_cache_t *cache = NULL;
  check(kiln_cache_open(dir, &options, &cache, NULL), "kiln_cache_open");
  return cache;
}

/* Flushes what deletions and unsynced writes left pending (untimed), so the next
 * timed fsync, kiln's or raw's, does not pay for it. */
static void settle(void) {
  int fd = open(scratch, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (fd < 0 || syncfs(fd) != 0) {
    die("cannot sync the filesystem of %s: %s", scratch, strerror(errno));
  }
  close(fd);
}

/* Empties `cache` (untimed), so big sizes never hold more than a few copies on disk. */
static void cache_empty(kiln_cache_t *cache) {
  kiln_cache_gc_report_t report;
  check(kiln_cache_gc(cache, 1, &report), "kiln_cache_gc");
}

/* Removes the raw baseline's files (untimed). */
static void raw_dir_empty(const char *dir) {
  DIR *d = opendir(dir);
  if (!d) die("cannot open %s: %s", dir, strerror(errno));
  struct dirent *e;
  while ((e = readdir(d))) {
    if (e->d_name[0] == '.') continue;
    if (unlinkat(dirfd(d), e->d_name, 0) != 0) {
      die("cannot remove %s/%s: %s", dir, e->d_name, strerror(errno));
    }
  }
  closedir(d);
}

static uint64_t next_serial = 1;

static int64_t kiln_put_ns(kiln_cache_t *cache, const unsigned char *data, size_t len,
                           kiln_index_artifact_t *out_record) {
  kiln_digest_hex_t source;
  kiln_cache_key_parts_t parts;
  key_parts(next_serial++, &source, &parts);
  int64_t t0 = kiln_time_monotonic_ns();
  kiln_status_t st = kiln_cache_artifact_put(cache, &parts, data, len, NULL, out_record);
  int64_t t1 = kiln_time_monotonic_ns();
  check(st, "kiln_cache_artifact_put");
  return t1 - t0;
}

/* The least a crash-safe writer does: tmp file, write, fsync, close, rename, fsync
 * the directory. The file stays until raw_dir_empty, like kiln's blob until gc: an
 * unlink between runs would land in the journal commit of the next timed fsync. */
static int64_t raw_put_ns(const char *dir, const unsigned char *data, size_t len) {
  char tmp[PATH_MAX], dst[PATH_MAX], name[64];
  snprintf(name, sizeof name, "tmp-%llu", (unsigned long long)next_serial);
  path_join(tmp, dir, name);
  snprintf(name, sizeof name, "obj-%llu", (unsigned long long)next_serial++);
  path_join(dst, dir, name);
  int64_t t0 = kiln_time_monotonic_ns();
  int fd = open(tmp, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
  if (fd < 0) die("cannot create %s: %s", tmp, strerror(errno));
  write_all(fd, data, len, tmp);
  if (fsync(fd) != 0) die("cannot fsync %s: %s", tmp, strerror(errno));
  if (close(fd) != 0) die("cannot close %s: %s", tmp, strerror(errno));
  if (rename(tmp, dst) != 0) die("cannot rename %s: %s", tmp, strerror(errno));
  int dfd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (dfd < 0 || fsync(dfd) != 0) die("cannot fsync directory %s: %s", dir, strerror(errno));
  close(dfd);
  return kiln_time_monotonic_ns() - t0;
}

static int64_t kiln_get_ns(kiln_cache_t *cache, const char *digest, size_t expect) {
  void *data = NULL;
  size_t len = 0;
  int64_t t0 = kiln_time_monotonic_ns();
  kiln_status_t st = kiln_cache_get_blob(cache, digest, &data, &len);
  kiln_free(data);
  int64_t t1 = kiln_time_monotonic_ns();
  check(st, "kiln_cache_get_blob");
  if (len != expect) die("kiln_cache_get_blob returned %zu bytes, stored %zu", len, expect);
  return t1 - t0;
}

/* Open, size, read to the end into a fresh buffer, close: what serving a file costs. */
static int64_t raw_get_ns(const char *path, size_t expect) {
  int64_t t0 = kiln_time_monotonic_ns();
  int fd = open(path, O_RDONLY | O_CLOEXEC);
  struct stat st;
  if (fd < 0 || fstat(fd, &st) != 0) die("cannot open %s: %s", path, strerror(errno));
  size_t cap = (size_t)st.st_size + 1; /* room to see the end in the same loop */
  unsigned char *buf = kiln_malloc(cap);
  size_t len = 0;
  for (;;) {
    ssize_t n = read(fd, buf + len, cap - len);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) die("cannot read %s: %s", path, strerror(errno));
    if (n == 0) break;
    len += (size_t)n;
    if (len == cap) die("%s grew while it was read", path);
  }
  close(fd);
  kiln_free(buf);
  int64_t t1 = kiln_time_monotonic_ns();
  if (len != expect) die("read %zu bytes of %s, wrote %zu", len, path, expect);
  return t1 - t0;
}

/* ---- sections ---- */

static void print_header(const plan_t *plan) {
  struct statfs fs;
  long cores = sysconf(_SC_NPROCESSORS_ONLN);
  long pages = sysconf(_SC_PHYS_PAGES), page = sysconf(_SC_PAGESIZE);
  if (statfs(scratch, &fs) != 0) die("cannot statfs %s: %s", scratch, strerror(errno));
  char cpu[128];
  kiln_bench_cpu_model(cpu, sizeof cpu);
  printf("kiln cache benchmark (%s): kiln vs the physical limit, side by side in one run\n",
         plan->quick ? "--quick" : "full");
  printf("what decides these numbers on this machine:\n");
  printf("  cores %ld (single-threaded run; %s), memory %.1f GiB\n", cores, cpu,
         (double)pages * (double)page / (double)(1024 * MIB));
  printf("  dir %s on %s (f_type 0x%lx), %.1f GiB free\n", scratch, kiln_bench_fs_name((long)fs.f_type),
         (unsigned long)fs.f_type, (double)free_bytes(scratch) / (double)(1024 * MIB));
  if (((unsigned long)fs.f_type & 0xffffffffu) == 0x01021994) {
    printf("  NOTE: tmpfs: fsync is free here, so put ratios measure CPU only; pass a disk DIR\n");
  }
  kiln_bench_print_load("rates");
  printf("  fsync latency (filesystem + device) bounds small puts; SHA-256 speed bounds get\n");
  printf("goals are reported as PASS/MISS, never asserted\n\n");
}

static void print_latency_row(const char *name, int64_t *ns, size_t n) {
  kiln_bench_sort(ns, n);
  int64_t p50 = percentile_ns(ns, n, 50);
  printf("  %-6s %8.1f %8.1f %8.1f %9.1f   %s\n", name, (double)p50 / 1e3,
         (double)percentile_ns(ns, n, 90) / 1e3, (double)percentile_ns(ns, n, 99) / 1e3,
         (double)ns[n - 1] / 1e3, p50 < LOOKUP_GOAL_NS ? "PASS" : "MISS");
}

/* Populating the lookup cache: setup, not measurement. The puts run on several
 * threads because each costs two fsyncs, which concurrent writers share. */
typedef struct populate_s {
  kiln_cache_t *cache;
  kiln_digest_hex_t *keys;
  size_t n;
  uint64_t first_serial;
  atomic_size_t next;
  pthread_mutex_t lock; /* guards failure */
  kiln_status_t failure;
} populate_t;

static void *populate_main(void *arg) {
  populate_t *pop = arg;
  unsigned char blob[ARTIFACT_BYTES];
  for (;;) {
    size_t i = atomic_fetch_add(&pop->next, 1);
    if (i >= pop->n) break;
    uint64_t serial = pop->first_serial + i;
    kiln_digest_hex_t source;
    kiln_cache_key_parts_t parts;
    key_parts(serial, &source, &parts);
    kiln_status_t st = kiln_cache_key_compute(&parts, &pop->keys[i]);
    /* Random-looking bytes, unique per artifact, without the shared generator. */
    for (size_t k = 0; k < sizeof blob; k += KILN_DIGEST_BYTES) {
      kiln_digest_t d;
      uint64_t seed[2] = {serial, k};
      kiln_digest_of(seed, sizeof seed, &d);
      memcpy(blob + k, d.bytes, KILN_DIGEST_BYTES);
    }
    if (!st) st = kiln_cache_artifact_put(pop->cache, &parts, blob, sizeof blob, NULL, NULL);
    if (st) {
      pthread_mutex_lock(&pop->lock);
      if (!pop->failure)
        pop->failure = st;
      else
        kiln_status_free(st);
      pthread_mutex_unlock(&pop->lock);
      break;
    }
  }
  return NULL;
}

static void bench_lookup(const plan_t *plan) {
  kiln_cache_t *cache = cache_open("lookup", KILN_BLOB_COMPRESSION_OFF);
  kiln_digest_hex_t *keys = kiln_calloc(plan->n_artifacts, sizeof *keys);
  populate_t pop = {.cache = cache,
                    .keys = keys,
                    .n = plan->n_artifacts,
                    .first_serial = next_serial,
                    .lock = PTHREAD_MUTEX_INITIALIZER};
  next_serial += plan->n_artifacts;
  pthread_t threads[POPULATE_THREADS];
  int64_t t0 = kiln_time_monotonic_ns();
  for (int i = 0; i < POPULATE_THREADS; i++) {
    if (pthread_create(&threads[i], NULL, populate_main, &pop) != 0) die("cannot start a thread");
  }
  for (int i = 0; i < POPULATE_THREADS; i++) pthread_join(threads[i], NULL);
  check(pop.failure, "kiln_cache_artifact_put (populating)");
  int64_t populate_ns = kiln_time_monotonic_ns() - t0;

  kiln_digest_hex_t *missing = kiln_calloc(plan->n_lookups, sizeof *missing);
  for (size_t i = 0; i < plan->n_lookups; i++) {
    kiln_digest_t d;
    char text[64];
    int n = snprintf(text, sizeof text, "missing-%zu", i);
    kiln_digest_of(text, (size_t)n, &d);
    kiln_digest_to_hex(&d, &missing[i]);
  }
  kiln_index_artifact_t rec;
  /* Untimed: prepares the statements and brings the index into page cache. */
  for (size_t i = 0; i < WARMUP_LOOKUPS; i++) {
    check(kiln_cache_artifact_lookup(cache, keys[rng_next() % plan->n_artifacts].text, &rec),
          "kiln_cache_artifact_lookup (warm-up)");
    kiln_index_artifact_deinit(&rec);
  }
  int64_t *hit_ns = kiln_calloc(plan->n_lookups, sizeof *hit_ns);
  int64_t *miss_ns = kiln_calloc(plan->n_lookups, sizeof *miss_ns);
  for (size_t i = 0; i < plan->n_lookups; i++) {
    /* Hits and misses interleave (alternating first), so both see the same WAL state. */
    for (int k = 0; k < 2; k++) {
      bool hit = (k == 0) == (i % 2 == 0);
      const char *key = hit ? keys[rng_next() % plan->n_artifacts].text : missing[i].text;
      int64_t s0 = kiln_time_monotonic_ns();
      kiln_status_t st = kiln_cache_artifact_lookup(cache, key, &rec);
      int64_t s1 = kiln_time_monotonic_ns();
      if (hit) {
        check(st, "kiln_cache_artifact_lookup (existing key)");
        kiln_index_artifact_deinit(&rec);
        hit_ns[i] = s1 - s0;
      } else {
        if (kiln_status_code(st) != KILN_STATUS_NOT_FOUND) {
          if (!st) die("lookup of missing key %s found a row", key);
          check(st, "kiln_cache_artifact_lookup (missing key)");
        }
        kiln_status_free(st);
        miss_ns[i] = s1 - s0;
      }
    }
  }
  printf("1. index lookup: %zu artifacts of %d B, %zu lookups each of existing and missing keys\n",
         plan->n_artifacts, ARTIFACT_BYTES, plan->n_lookups);
  printf("   (populated by kiln_cache_artifact_put on %d threads in %.2f s: %.0f puts/s)\n", POPULATE_THREADS,
         (double)populate_ns / 1e9, (double)plan->n_artifacts * 1e9 / (double)populate_ns);
  printf("  us       p50      p90      p99       max   goal p50 < 20 us\n");
  print_latency_row("hit", hit_ns, plan->n_lookups);
  print_latency_row("miss", miss_ns, plan->n_lookups);
  printf("\n");
  kiln_free(hit_ns);
  kiln_free(miss_ns);
  kiln_free(missing);
  kiln_free(keys);
  kiln_cache_close(cache);
}

static bool disk_allows(size_t bytes) { return free_bytes(scratch) >= 3 * (uint64_t)bytes; }

#define TABLE_HEAD "  size       runs  kiln MB/s   raw MB/s  kiln/raw  hash bound  goal >= %.1fx\n"

/* One row of sections 2 and 3. hash_ns is SHA-256 of the same bytes, timed in the
 * same rotation: kiln hashes serially with its I/O, so raw/(raw + hash) is the best
 * ratio it can reach. */
/* The sha bound: when kiln hashes on the thread that does the I/O the costs add
 * (raw / (raw + sha)); when it hashes on a second thread they overlap
 * (raw / max(raw, sha)). */
static void print_ratio_row(size_t bytes, size_t runs, int64_t kiln_ns, int64_t raw_ns, int64_t hash_ns,
                            bool overlapped, double goal) {
  char name[32];
  double ratio = (double)raw_ns / (double)kiln_ns;
  double bound = overlapped ? (double)raw_ns / (double)(raw_ns > hash_ns ? raw_ns : hash_ns)
                            : (double)raw_ns / (double)(raw_ns + hash_ns);
  printf("  %-8s %6zu %10.1f %10.1f %8.2fx %10.2fx   %s\n", size_name(bytes, name, sizeof name), runs,
         mb_per_s(bytes, kiln_ns), mb_per_s(bytes, raw_ns), ratio, bound, ratio >= goal ? "PASS" : "MISS");
}

static int64_t hash_ns(const unsigned char *data, size_t len) {
  kiln_digest_t d;
  int64_t t0 = kiln_time_monotonic_ns();
  kiln_digest_of(data, len, &d);
  return kiln_time_monotonic_ns() - t0;
}

/* XXH3-128, the check reads verify with. */
static int64_t check_ns(const unsigned char *data, size_t len) {
  kiln_blob_check_t c;
  int64_t t0 = kiln_time_monotonic_ns();
  kiln_blob_check_of(data, len, &c);
  return kiln_time_monotonic_ns() - t0;
}

/* SHA-256 alone over 64 MiB: the machine's hashing bound, median and best run. */
static void bench_sha(double *out_median_mbps, double *out_best_mbps) {
  unsigned char *buf = kiln_malloc(SHA_BYTES);
  fill_random(buf, SHA_BYTES);
  int64_t ns[SHA_RUNS];
  kiln_digest_t d;
  kiln_digest_of(buf, SHA_BYTES, &d); /* untimed: faults the pages in */
  for (int i = 0; i < SHA_RUNS; i++) ns[i] = hash_ns(buf, SHA_BYTES);
  kiln_free(buf);
  *out_median_mbps = mb_per_s(SHA_BYTES, median_ns(ns, SHA_RUNS)); /* sorts ns */
  *out_best_mbps = mb_per_s(SHA_BYTES, ns[0]);
}

static void bench_put(const plan_t *plan, kiln_cache_t *cache, unsigned char *data) {
  char raw_dir[PATH_MAX];
  path_join(raw_dir, scratch, "raw-put");
  if (mkdir(raw_dir, 0700) != 0) die("cannot create %s: %s", raw_dir, strerror(errno));
  printf(
      "2. put, compression OFF, random bytes: kiln_cache_artifact_put vs raw open(tmp) +\n"
      "   write + fsync + close + rename + fsync(dir), the least a crash-safe writer does;\n"
      "   median run\n");
  printf(TABLE_HEAD, PUT_GOAL);
  settle();
  for (size_t i = 0; i < plan->n_sizes; i++) {
    const size_case_t *c = &plan->sizes[i];
    char name[32];
    if (!disk_allows(c->bytes)) {
      printf("  %-8s skipped (disk)\n", size_name(c->bytes, name, sizeof name));
      continue;
    }
    size_t runs = c->put_runs;
    int64_t *kiln_ns = kiln_calloc(runs, sizeof *kiln_ns);
    int64_t *raw_ns = kiln_calloc(runs, sizeof *raw_ns);
    int64_t *sha_ns = kiln_calloc(runs, sizeof *sha_ns);
    for (size_t r = 0; r < runs; r++) {
      stamp(data, c->bytes, next_serial);
      if (r % 2 == 0) {
        raw_ns[r] = raw_put_ns(raw_dir, data, c->bytes);
        kiln_ns[r] = kiln_put_ns(cache, data, c->bytes, NULL);
        sha_ns[r] = hash_ns(data, c->bytes) + check_ns(data, c->bytes);
      } else {
        sha_ns[r] = hash_ns(data, c->bytes) + check_ns(data, c->bytes);
        kiln_ns[r] = kiln_put_ns(cache, data, c->bytes, NULL);
        raw_ns[r] = raw_put_ns(raw_dir, data, c->bytes);
      }
      if (c->bytes >= 16 * MIB) {
        /* Bound the disk: at most one copy on each side. */
        cache_empty(cache);
        raw_dir_empty(raw_dir);
        settle();
      }
    }
    cache_empty(cache);
    raw_dir_empty(raw_dir);
    settle();
    /* kiln_blobstore_put hashes blobs of 1 MiB and more on a second thread. */
    print_ratio_row(c->bytes, runs, median_ns(kiln_ns, runs), median_ns(raw_ns, runs),
                    median_ns(sha_ns, runs), c->bytes >= MIB, PUT_GOAL);
    kiln_free(kiln_ns);
    kiln_free(raw_ns);
    kiln_free(sha_ns);
  }
  printf(
      "  hash bound: below 1 MiB kiln hashes on the writing thread, so kiln/raw <=\n"
      "  raw/(raw + sha); from 1 MiB on a second thread, so kiln/raw <= raw/max(raw, sha);\n"
      "  sha = SHA-256 and XXH3-128 of the same bytes (one pass), timed in the same rotation\n\n");
}

static void bench_get(const plan_t *plan, kiln_cache_t *cache, unsigned char *data) {
  char raw_path[PATH_MAX];
  path_join(raw_path, scratch, "raw-get");
  printf(
      "3. get from page cache: kiln_cache_get_blob (verifies the blob's recorded XXH3-128\n"
      "   check while streaming; SHA-256 stays the content address) vs raw open + read into a\n"
      "   fresh buffer + close of the same bytes; median run\n");
  double sha_median, sha_best;
  bench_sha(&sha_median, &sha_best);
  printf("  SHA-256 alone (kiln_digest_of over 64 MiB): %.0f MB/s median, %.0f MB/s best of %d\n", sha_median,
         sha_best, SHA_RUNS);
  printf(
      "  get reads then checks each chunk on the same thread, so kiln/raw <= raw/(raw + xxh3):\n"
      "  the hash bound column (XXH3-128 of the same bytes, timed in the same rotation)\n");
  printf(TABLE_HEAD, GET_GOAL);
  for (size_t i = 0; i < plan->n_sizes; i++) {
    const size_case_t *c = &plan->sizes[i];
    char name[32];
    if (!disk_allows(c->bytes)) {
      printf("  %-8s skipped (disk)\n", size_name(c->bytes, name, sizeof name));
      continue;
    }
    stamp(data, c->bytes, next_serial);
    kiln_index_artifact_t rec;
    kiln_put_ns(cache, data, c->bytes, &rec);
    int fd = open(raw_path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
    if (fd < 0) die("cannot create %s: %s", raw_path, strerror(errno));
    write_all(fd, data, c->bytes, raw_path);
    if (close(fd) != 0) die("cannot close %s: %s", raw_path, strerror(errno));
    settle(); /* no writeback may run during the timed reads */
    /* Warm both into page cache (and the allocator), untimed. */
    kiln_get_ns(cache, rec.artifact_digest, c->bytes);
    raw_get_ns(raw_path, c->bytes);
    size_t runs = c->get_runs;
    int64_t *kiln_ns = kiln_calloc(runs, sizeof *kiln_ns);
    int64_t *raw_ns = kiln_calloc(runs, sizeof *raw_ns);
    int64_t *sha_ns = kiln_calloc(runs, sizeof *sha_ns);
    for (size_t r = 0; r < runs; r++) {
      if (r % 2 == 0) {
        raw_ns[r] = raw_get_ns(raw_path, c->bytes);
        kiln_ns[r] = kiln_get_ns(cache, rec.artifact_digest, c->bytes);
        sha_ns[r] = check_ns(data, c->bytes);
      } else {
        sha_ns[r] = check_ns(data, c->bytes);
        kiln_ns[r] = kiln_get_ns(cache, rec.artifact_digest, c->bytes);
        raw_ns[r] = raw_get_ns(raw_path, c->bytes);
      }
    }
    print_ratio_row(c->bytes, runs, median_ns(kiln_ns, runs), median_ns(raw_ns, runs),
                    median_ns(sha_ns, runs), false, GET_GOAL);
    kiln_free(kiln_ns);
    kiln_free(raw_ns);
    kiln_free(sha_ns);
    kiln_index_artifact_deinit(&rec);
    cache_empty(cache);
    if (unlink(raw_path) != 0) die("cannot remove %s: %s", raw_path, strerror(errno));
  }
  printf("\n");
}

/* Text shaped like MLIR (ops, SSA names, tensor types): what AUTO sees in practice. */
static void fill_mlir_text(unsigned char *buf, size_t len) {
  static const int dims[] = {16, 32, 64, 128, 256, 512, 1024};
  static const char *const ops[] = {"arith.addf", "arith.mulf", "arith.subf", "arith.maximumf"};
  size_t pos = 0;
  unsigned value = 0, func = 0;
  char line[256];
  while (pos < len) {
    int n;
    int a = dims[rng_next() % 7], b = dims[rng_next() % 7];
    if (value % 24 == 0) {
      n = snprintf(line, sizeof line,
                   "}\nfunc.func @dispatch_%u(%%arg0: tensor<%dx%dxf32>, %%arg1: tensor<%dx%dxf32>)"
                   " -> tensor<%dx%dxf32> {\n",
                   func++, a, b, a, b, a, b);
    } else if (value % 24 == 23) {
      n = snprintf(line, sizeof line, "  return %%%u : tensor<%dx%dxf32>\n", value - 1, a, b);
    } else {
      n = snprintf(line, sizeof line,
                   "  %%%u = %s %%%u, %%arg%u : tensor<%dx%dxf32> loc(\"model.py\":%u:%u)\n", value,
                   ops[rng_next() % 4], value ? value - 1 : 0, value % 2, a, b,
                   (unsigned)(rng_next() % 900 + 10), (unsigned)(rng_next() % 80));
    }
    value++;
    size_t take = (size_t)n < len - pos ? (size_t)n : len - pos;
    memcpy(buf + pos, line, take);
    pos += take;
  }
}

static void bench_auto(const plan_t *plan, kiln_cache_t *off_cache) {
  kiln_cache_t *auto_cache = cache_open("auto", KILN_BLOB_COMPRESSION_AUTO);
  size_t len = plan->auto_bytes;
  unsigned char *text = kiln_malloc(len);
  fill_mlir_text(text, len);
  int64_t auto_ns[AUTO_RUNS], off_ns[AUTO_RUNS], get_ns[AUTO_RUNS];
  uint64_t stored = 0;
  for (int r = 0; r < AUTO_RUNS; r++) {
    char tag[32];
    /* A distinct comment line per run keeps the bytes unique and the text text. */
    int n = snprintf(tag, sizeof tag, "// run %016llx\n", (unsigned long long)next_serial);
    memcpy(text, tag, (size_t)n);
    kiln_index_artifact_t rec;
    if (r % 2 == 0) {
      auto_ns[r] = kiln_put_ns(auto_cache, text, len, &rec);
      off_ns[r] = kiln_put_ns(off_cache, text, len, NULL);
    } else {
      off_ns[r] = kiln_put_ns(off_cache, text, len, NULL);
      auto_ns[r] = kiln_put_ns(auto_cache, text, len, &rec);
    }
    stored = rec.stored_size;
    get_ns[r] = kiln_get_ns(auto_cache, rec.artifact_digest, len);
    kiln_index_artifact_deinit(&rec);
  }
  int64_t a = median_ns(auto_ns, AUTO_RUNS), o = median_ns(off_ns, AUTO_RUNS);
  int64_t g = median_ns(get_ns, AUTO_RUNS);
  char name[32];
  printf(
      "4. AUTO compression, %s MLIR-like text: stored/logical %.3f (%.2f MiB on disk); "
      "put %.1f ms (%.0f MB/s) vs OFF %.1f ms (%.0f MB/s); get %.1f ms (%.0f MB/s)\n\n",
      size_name(len, name, sizeof name), (double)stored / (double)len, (double)stored / (double)MIB,
      (double)a / 1e6, mb_per_s(len, a), (double)o / 1e6, mb_per_s(len, o), (double)g / 1e6,
      mb_per_s(len, g));
  kiln_free(text);
  cache_empty(off_cache);
  kiln_cache_close(auto_cache);
}

/* ---- main ---- */

static void usage(void) {
  fprintf(stderr,
          "usage: bench_cache [--quick] [DIR]\n"
          "  Measures kiln's cache against raw file I/O; works in a temporary directory under\n"
          "  DIR ($TMPDIR or /tmp by default) and removes it at the end.\n"
          "  --quick  smoke run: 1,000 artifacts, blob sizes up to 1 MiB, fewer runs\n");
}

int main(int argc, char **argv) {
  plan_t plan = {.n_artifacts = 10000,
                 .n_lookups = 20000,
                 .sizes = full_sizes,
                 .n_sizes = sizeof full_sizes / sizeof full_sizes[0],
                 .auto_bytes = 16 * MIB};
  const char *base = NULL;
  int rc = kiln_bench_parse_args(argc, argv, true, usage, &plan.quick, &base);
  if (rc >= 0) return rc;
  if (plan.quick) {
    plan.n_artifacts = 1000;
    plan.n_lookups = 2000;
    plan.sizes = quick_sizes;
    plan.n_sizes = sizeof quick_sizes / sizeof quick_sizes[0];
    plan.auto_bytes = 1 * MIB;
  }
  kiln_log_configure(KILN_LOG_WARN, STDERR_FILENO);
  char err[PATH_MAX + 200];
  const char *made = kiln_bench_scratch_make(base, NULL, true, err, sizeof err);
  if (!made) die("%s", err);
  scratch = made;
  int64_t t0 = kiln_time_monotonic_ns();
  print_header(&plan);
  fflush(stdout);

  int64_t marks[5];
  marks[0] = kiln_time_monotonic_ns();
  bench_lookup(&plan);
  fflush(stdout);
  marks[1] = kiln_time_monotonic_ns();

  size_t max_bytes = 0;
  for (size_t i = 0; i < plan.n_sizes; i++) {
    if (plan.sizes[i].bytes > max_bytes) max_bytes = plan.sizes[i].bytes;
  }
  unsigned char *data = kiln_malloc(max_bytes);
  fill_random(data, max_bytes);
  kiln_cache_t *cache = cache_open("blobs", KILN_BLOB_COMPRESSION_OFF);
  bench_put(&plan, cache, data);
  fflush(stdout);
  marks[2] = kiln_time_monotonic_ns();
  bench_get(&plan, cache, data);
  fflush(stdout);
  marks[3] = kiln_time_monotonic_ns();
  kiln_free(data);
  bench_auto(&plan, cache);
  kiln_cache_close(cache);
  marks[4] = kiln_time_monotonic_ns();

  char where[PATH_MAX];
  snprintf(where, sizeof where, "%s", scratch);
  cleanup();
  printf("total %.1f s (lookup %.1f, put %.1f, get %.1f, auto %.1f); removed %s\n",
         (double)(kiln_time_monotonic_ns() - t0) / 1e9, (double)(marks[1] - marks[0]) / 1e9,
         (double)(marks[2] - marks[1]) / 1e9, (double)(marks[3] - marks[2]) / 1e9,
         (double)(marks[4] - marks[3]) / 1e9, where);
  return 0;
}
