/* The cache façade: blob store + SQLite index, thread-safe.
 *
 * Ordering rules that keep the index and the blobs consistent:
 *   put:    blob made durable and renamed into place, THEN its row inserted;
 *   evict:  row deleted, THEN the blob removed if no row names it any more;
 *   corrupt read: rows dropped and the file moved to quarantine/ at once.
 * A crash between the two steps of a put leaves an orphan blob; between the two
 * steps of an eviction, nothing wrong (the blob is an orphan). Open removes
 * orphans and drops rows whose blob is missing (which only outside interference
 * can cause), so after open every row has its blob.
 *
 * Connections: a pool of SQLite connections, one borrowed per operation, so each
 * thread works on its own connection and none is shared concurrently.
 *
 * Hits: a lookup is a read. The hit count and last-access time it earns are kept
 * in memory (pending hits, keyed by cache key) and written in one transaction per
 * PENDING_FLUSH keys, and before anything that reads them (stats, gc, verify,
 * close). A write per hit would cost three times the read (WAL appends and
 * checkpoints on the lookup path); a crash loses at most PENDING_FLUSH keys'
 * recent hits, which only makes eviction slightly less informed.
 *
 * In-use set: digests with an open reader, and digests between a put's blob
 * commit and its row insert. gc never evicts them, and verify never removes them
 * as orphans; verify additionally spares orphans younger than ORPHAN_GRACE_S, which
 * closes the window between a put's commit and its registration.
 *
 * Checks: every put records its blob's check (XXH3-128, from the blob writer's
 * single pass) in the transaction that writes its row, and open_blob looks it up so
 * the read verifies with XXH3-128 instead of SHA-256. A blob without one (stored
 * before index migration 4) is read with SHA-256, and that read records the check
 * it computed on the way. A check goes with its blob: quarantine and repair drop it
 * with the rows, removal of an unnamed blob drops it after the unlink (outside the
 * lock: a write may wait for the busy timeout). One left behind is harmless, since
 * any later put of the digest rewrites it with the same value. verify stays on
 * SHA-256, and records or corrects the check of every blob it proves intact.
 */
#include "cache/cache.h"

#include <errno.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/types.h>
#include <time.h>
#include <unistd.h>

#include "base/alloc.h"
#include "base/buf.h"
#include "base/file.h"
#include "base/flags.h"
#include "base/log.h"
#include "base/mlir_text.h"
#include "base/time.h"

#define ORPHAN_GRACE_S 300
#define GC_BATCH       64
#define PENDING_FLUSH  256

typedef struct pending_hit_s {
  char key[KILN_DIGEST_HEX_LEN + 1];
  uint64_t hits;
  int64_t last_access_ms;
} pending_hit_t;

typedef struct in_use_s {
  kiln_digest_t digest;
  size_t count;
} in_use_t;

#define MEMO_SLOTS 4096
/* A memoized entry's blob is stat()ed at most this often. Every removal through
 * the cache bumps the generation at once; this bounds only how long a blob that
 * someone deleted by hand behind kilnd's back still answers a probe (its
 * download then fails NOT_FOUND and the next lookup heals the index). */
#define BLOB_CHECK_MS 1000

typedef struct memo_s {
  char key[KILN_DIGEST_HEX_LEN + 1];
  char digest[KILN_DIGEST_HEX_LEN + 1];
  uint64_t size;
  uint64_t generation;
  int64_t checked_ms; /* when the blob was last seen on disk (monotonic) */
  bool used;
} memo_t;

struct kiln_cache_s {
  char *dir;
  char *db_path;
  kiln_cache_options_t options;
  kiln_blobstore_t *blobs;

  pthread_mutex_t lock; /* guards everything below; never held across I/O */
  kiln_index_t **pool;
  size_t n_pool;
  size_t cap_pool;
  in_use_t *in_use;
  size_t n_in_use;
  size_t cap_in_use;
  pending_hit_t *pending; /* PENDING_FLUSH slots */
  size_t n_pending;
  uint64_t hits, misses, evictions, quarantined, bytes_served;
  kiln_index_totals_t last_totals; /* as of the last query of them */
  int64_t totals_counted_ms;       /* monotonic, when (refresh_totals) */
  int schema_version;
  /* Hot lookups without SQLite (kiln_cache_artifact_probe): cache key -> artifact,
   * valid while `generation` is unchanged; every removal of an artifact row or blob
   * bumps it. */
  memo_t *memo;
  memo_t *source_memo; /* the same for sources: digest -> present (size = last touch, ms) */
  uint64_t generation;
};

struct kiln_cache_reader_s {
  kiln_cache_t *cache;
  kiln_blob_reader_t *blob;
  kiln_digest_t digest;
  bool by_check; /* verifying with the recorded check (XXH3-128) */
  bool ended;    /* the end was reached (and, without a check, the check recorded) */
};

static int64_t now_ms(const kiln_cache_t *cache) {
  return cache->options.now_ms ? cache->options.now_ms() : kiln_time_unix_ms();
}

/* ---- connection pool ---- */

static KILN_MUST_USE kiln_status_t acquire(kiln_cache_t *cache, kiln_index_t **out_index) {
  pthread_mutex_lock(&cache->lock);
  kiln_index_t *index = cache->n_pool ? cache->pool[--cache->n_pool] : NULL;
  pthread_mutex_unlock(&cache->lock);
  if (index) {
    *out_index = index;
    return NULL;
  }
  return kiln_index_open(cache->db_path, out_index);
}

/* Rows past which the totals are counted again at most once a second. */
#define TOTALS_CHEAP_ROWS  20000
#define TOTALS_INTERVAL_MS 1000

/* The totals GetStats and the metrics show (kiln_cache_counters) stay live: a
 * connection that wrote rows counts them again as it is released (two aggregate
 * queries, microseconds for thousands of rows); in a cache of more rows, at most
 * once a second, and a write in between leaves them for the next one (or for
 * kiln_cache_stats, gc and verify, which count too). */
static void refresh_totals(kiln_cache_t *cache, kiln_index_t *index) {
  int64_t mono = kiln_time_monotonic_ms();
  pthread_mutex_lock(&cache->lock);
  bool big = cache->last_totals.artifacts + cache->last_totals.sources > TOTALS_CHEAP_ROWS;
  bool recent = mono - cache->totals_counted_ms < TOTALS_INTERVAL_MS;
  pthread_mutex_unlock(&cache->lock);
  if (big && recent) return;
  kiln_index_totals_t totals;
  kiln_status_t st = kiln_index_totals(index, &totals);
  if (st) {
    kiln_status_free(st); /* best effort: the last ones stay */
    return;
  }
  pthread_mutex_lock(&cache->lock);
  cache->last_totals = totals;
  cache->totals_counted_ms = mono;
  pthread_mutex_unlock(&cache->lock);
}

static void release(kiln_cache_t *cache, kiln_index_t *index) {
  if (!index) return;
  if (kiln_index_wrote(index)) refresh_totals(cache, index);
  pthread_mutex_lock(&cache->lock);
  if (cache->n_pool == cache->cap_pool) {
    cache->cap_pool = cache->cap_pool ? cache->cap_pool * 2 : 8;
    cache->pool = kiln_realloc(cache->pool, cache->cap_pool * sizeof *cache->pool);
  }
  cache->pool[cache->n_pool++] = index;
  pthread_mutex_unlock(&cache->lock);
}

/* ---- in-use set ---- */

static void in_use_add(kiln_cache_t *cache, const kiln_digest_t *digest) {
  pthread_mutex_lock(&cache->lock);
  for (size_t i = 0; i < cache->n_in_use; i++) {
    if (kiln_digest_equal(&cache->in_use[i].digest, digest)) {
      cache->in_use[i].count++;
      pthread_mutex_unlock(&cache->lock);
      return;
    }
  }
  if (cache->n_in_use == cache->cap_in_use) {
    cache->cap_in_use = cache->cap_in_use ? cache->cap_in_use * 2 : 16;
    cache->in_use = kiln_realloc(cache->in_use, cache->cap_in_use * sizeof *cache->in_use);
  }
  cache->in_use[cache->n_in_use++] = (in_use_t){*digest, 1};
  pthread_mutex_unlock(&cache->lock);
}

static void in_use_remove(kiln_cache_t *cache, const kiln_digest_t *digest) {
  pthread_mutex_lock(&cache->lock);
  for (size_t i = 0; i < cache->n_in_use; i++) {
    if (kiln_digest_equal(&cache->in_use[i].digest, digest)) {
      if (--cache->in_use[i].count == 0) cache->in_use[i] = cache->in_use[--cache->n_in_use];
      break;
    }
  }
  pthread_mutex_unlock(&cache->lock);
}

static bool in_use(kiln_cache_t *cache, const kiln_digest_t *digest) {
  pthread_mutex_lock(&cache->lock);
  bool found = false;
  for (size_t i = 0; i < cache->n_in_use && !found; i++) {
    found = kiln_digest_equal(&cache->in_use[i].digest, digest);
  }
  pthread_mutex_unlock(&cache->lock);
  return found;
}

/* ---- pending hits ---- */

/* Writes the pending hits in one transaction. The batch is taken under the lock
 * and written without it. */
static KILN_MUST_USE kiln_status_t flush_hits(kiln_cache_t *cache, kiln_index_t *index) {
  pthread_mutex_lock(&cache->lock);
  size_t n = cache->n_pending;
  pending_hit_t *batch = NULL;
  if (n) {
    batch = kiln_memdup(cache->pending, n * sizeof *batch);
    cache->n_pending = 0;
  }
  pthread_mutex_unlock(&cache->lock);
  if (!n) return NULL;
  kiln_status_t st = kiln_index_begin(index);
  for (size_t i = 0; !st && i < n; i++) {
    st = kiln_index_artifact_record_hits(index, batch[i].key, batch[i].last_access_ms, batch[i].hits);
  }
  if (!st)
    st = kiln_index_commit(index);
  else
    kiln_index_rollback(index);
  if (st) {
    /* Not written: merge the batch back so the hits are not lost. */
    pthread_mutex_lock(&cache->lock);
    for (size_t i = 0; i < n; i++) {
      size_t k = 0;
      while (k < cache->n_pending && strcmp(cache->pending[k].key, batch[i].key) != 0) k++;
      if (k == cache->n_pending) {
        if (cache->n_pending == PENDING_FLUSH) break; /* full: the oldest are dropped */
        cache->pending[cache->n_pending++] = batch[i];
      } else {
        cache->pending[k].hits += batch[i].hits;
        if (batch[i].last_access_ms > cache->pending[k].last_access_ms) {
          cache->pending[k].last_access_ms = batch[i].last_access_ms;
        }
      }
    }
    pthread_mutex_unlock(&cache->lock);
  }
  kiln_free(batch);
  return st;
}

/* The index in `pending` of `key`, or n_pending when it is not there. Under lock. */
static size_t pending_find_locked(const kiln_cache_t *cache, const char *key) {
  size_t i = 0;
  while (i < cache->n_pending && memcmp(cache->pending[i].key, key, KILN_DIGEST_HEX_LEN) != 0) i++;
  return i;
}

/* Under lock: one more hit of pending[i] (a new entry when i == n_pending, which
 * the caller made sure has room). */
static void pending_hit_locked(kiln_cache_t *cache, size_t i, const char *key, int64_t now) {
  if (i == cache->n_pending) {
    memcpy(cache->pending[i].key, key, sizeof cache->pending[i].key);
    cache->pending[i].hits = 0;
    cache->n_pending++;
  }
  cache->pending[i].hits++;
  cache->pending[i].last_access_ms = now;
}

/* Records a hit in memory; returns true when the batch is full and should be
 * flushed. */
static bool note_hit(kiln_cache_t *cache, const char *key, int64_t now, bool may_flush,
                     uint64_t *out_pending_hits) {
  pthread_mutex_lock(&cache->lock);
  size_t i = pending_find_locked(cache, key);
  if (!may_flush && i == cache->n_pending && cache->n_pending + 1 >= PENDING_FLUSH) {
    /* Noting it would call for a flush, which the caller cannot do: not noted. */
    pthread_mutex_unlock(&cache->lock);
    return true;
  }
  if (i == cache->n_pending && cache->n_pending == PENDING_FLUSH) {
    /* Full because flushes keep failing (index locked): this hit goes unrecorded. */
    *out_pending_hits = 1;
    pthread_mutex_unlock(&cache->lock);
    return true;
  }
  pending_hit_locked(cache, i, key, now);
  *out_pending_hits = cache->pending[i].hits;
  bool full = cache->n_pending == PENDING_FLUSH;
  pthread_mutex_unlock(&cache->lock);
  return full;
}

static uint64_t remove_if_unreferenced(kiln_cache_t *cache, kiln_index_t *index, const char *hex);

/* Removes a blob unless it is in use or (with `index`) some row names it,
 * atomically with respect to in_use_add/in_use_remove: the lock is held across
 * the checks and the unlink (one indexed SQLite read and one metadata operation,
 * no data I/O). A put registers its digest before it inserts its row and
 * unregisters after, so here either the put is still registered (skip), or its
 * row is committed and the fresh read sees it (skip), or it registers after the
 * unlink and finds the blob gone (and writes it again, see put_blob). Returns true
 * when removed (or already absent); *out_freed gets its size on disk. */
static bool remove_unless_in_use(kiln_cache_t *cache, kiln_index_t *index, const kiln_digest_t *digest,
                                 uint64_t *out_freed) {
  *out_freed = 0;
  pthread_mutex_lock(&cache->lock);
  bool busy = false;
  for (size_t i = 0; i < cache->n_in_use && !busy; i++) {
    busy = kiln_digest_equal(&cache->in_use[i].digest, digest);
  }
  if (!busy && index) {
    kiln_digest_hex_t hex;
    kiln_digest_to_hex(digest, &hex);
    kiln_status_t st = kiln_index_digest_referenced(index, hex.text, &busy);
    if (st) busy = true; /* cannot tell: keep it */
    kiln_status_free(st);
  }
  bool removed = false;
  if (!busy) {
    uint64_t size = 0;
    bool present = kiln_blobstore_contains(cache->blobs, digest, &size);
    kiln_status_t rm = present ? kiln_blobstore_remove(cache->blobs, digest) : NULL;
    removed = rm == NULL || kiln_status_code(rm) == KILN_STATUS_NOT_FOUND;
    if (present && rm == NULL) *out_freed = size;
    kiln_status_free(rm);
  }
  pthread_mutex_unlock(&cache->lock);
  if (removed && index) {
    /* After the lock: a write may wait for the busy timeout. Left behind on
     * failure, the check is still right for any later put of these bytes. */
    kiln_digest_hex_t hex;
    kiln_digest_to_hex(digest, &hex);
    kiln_status_free(kiln_index_blob_check_drop_unreferenced(index, hex.text));
  }
  return removed;
}

/* Stores bytes as a blob and registers the digest in the in-use set; the caller
 * removes it once its row is in. A concurrent eviction may remove the (already
 * present, identical) blob between its commit and the registration; the second
 * store then runs with the digest registered, which eviction respects, so it
 * cannot lose the blob again. */
static KILN_MUST_USE kiln_status_t put_blob(kiln_cache_t *cache, const kiln_digest_t *expected,
                                            const void *data, size_t len, kiln_digest_t *out_digest,
                                            kiln_blob_check_t *out_check, uint64_t *out_stored) {
  KILN_RETURN_IF_ERROR(
      kiln_blobstore_put_expected(cache->blobs, data, len, expected, out_digest, out_check, out_stored));
  in_use_add(cache, out_digest);
  if (kiln_blobstore_contains(cache->blobs, out_digest, out_stored)) return NULL;
  kiln_digest_t registered = *out_digest;
  kiln_status_t st =
      kiln_blobstore_put_expected(cache->blobs, data, len, &registered, out_digest, out_check, out_stored);
  if (st) in_use_remove(cache, &registered);
  return st;
}

_Static_assert(KILN_INDEX_CHECK_BYTES == KILN_BLOB_CHECK_BYTES,
               "the index stores the blob store's checks as they are");

/* Writes an artifact row (`artifact`) or else a source row (`source`) and the
 * check of the blob it names in one transaction: no row without its check. */
static KILN_MUST_USE kiln_status_t put_row_and_check(kiln_index_t *index,
                                                     const kiln_index_artifact_t *artifact,
                                                     const kiln_index_source_t *source, const char *digest,
                                                     const kiln_blob_check_t *check) {
  KILN_RETURN_IF_ERROR(kiln_index_begin(index));
  kiln_status_t st =
      artifact ? kiln_index_artifact_put(index, artifact) : kiln_index_source_put(index, source);
  if (!st) st = kiln_index_blob_check_put(index, digest, check->bytes);
  if (st) {
    kiln_index_rollback(index);
    return st;
  }
  return kiln_index_commit(index);
}

/* Forgets every memoized lookup (an artifact row or blob went away). */
static void memo_invalidate(kiln_cache_t *cache) {
  pthread_mutex_lock(&cache->lock);
  cache->generation++;
  pthread_mutex_unlock(&cache->lock);
}

static size_t memo_slot(const char *key) {
  size_t h = 0;
  for (int i = 0; i < 8; i++) h = h * 16 + (size_t)(key[i] <= '9' ? key[i] - '0' : key[i] - 'a' + 10);
  return h % MEMO_SLOTS;
}

static void memo_store(kiln_cache_t *cache, const char *key, const char *digest, uint64_t size) {
  pthread_mutex_lock(&cache->lock);
  memo_t *m = &cache->memo[memo_slot(key)];
  memcpy(m->key, key, sizeof m->key);
  memcpy(m->digest, digest, sizeof m->digest);
  m->size = size;
  m->generation = cache->generation;
  m->checked_ms = kiln_time_monotonic_ms(); /* the lookup just opened or found it */
  m->used = true;
  pthread_mutex_unlock(&cache->lock);
}

/* kiln_index_drop_digest, and the memo forgets (the row or blob is gone). */
static KILN_MUST_USE kiln_status_t drop_digest(kiln_cache_t *cache, kiln_index_t *index, const char *digest,
                                               const char *reason, int64_t now, size_t *out_rows) {
  memo_invalidate(cache);
  return kiln_index_drop_digest(index, digest, reason, now, out_rows);
}

static void count(kiln_cache_t *cache, uint64_t *counter, uint64_t n) {
  pthread_mutex_lock(&cache->lock);
  *counter += n;
  pthread_mutex_unlock(&cache->lock);
}

/* ---- digests as sorted arrays (repair and verify) ---- */

typedef struct digest_set_s {
  kiln_digest_t *items;
  uint64_t *sizes;
  char **paths;
  size_t n, cap;
} digest_set_t;

static int cmp_digest(const void *a, const void *b) { return memcmp(a, b, sizeof(kiln_digest_t)); }

static void set_add(digest_set_t *set, const kiln_digest_t *d, uint64_t size, const char *path) {
  if (set->n == set->cap) {
    set->cap = set->cap ? set->cap * 2 : 256;
    set->items = kiln_realloc(set->items, set->cap * sizeof *set->items);
    set->sizes = kiln_realloc(set->sizes, set->cap * sizeof *set->sizes);
    set->paths = kiln_realloc(set->paths, set->cap * sizeof *set->paths);
  }
  set->items[set->n] = *d;
  set->sizes[set->n] = size;
  set->paths[set->n] = kiln_strdup(path);
  set->n++;
}

/* Sorts items (carrying sizes and paths along). */
static void set_sort(digest_set_t *set) {
  /* Sort packed records so sizes and paths travel with their digest. */
  typedef struct {
    kiln_digest_t d;
    uint64_t size;
    char *path;
  } rec_t;
  rec_t *recs = kiln_malloc((set->n ? set->n : 1) * sizeof *recs);
  for (size_t i = 0; i < set->n; i++) recs[i] = (rec_t){set->items[i], set->sizes[i], set->paths[i]};
  qsort(recs, set->n, sizeof *recs, cmp_digest); /* d is the first member */
  for (size_t i = 0; i < set->n; i++) {
    set->items[i] = recs[i].d;
    set->sizes[i] = recs[i].size;
    set->paths[i] = recs[i].path;
  }
  kiln_free(recs);
}

static ssize_t set_find(const digest_set_t *set, const kiln_digest_t *d) {
  size_t lo = 0, hi = set->n;
  while (lo < hi) {
    size_t mid = lo + (hi - lo) / 2;
    int c = memcmp(&set->items[mid], d, sizeof *d);
    if (c == 0) return (ssize_t)mid;
    if (c < 0)
      lo = mid + 1;
    else
      hi = mid;
  }
  return -1;
}

static void set_deinit(digest_set_t *set) {
  for (size_t i = 0; i < set->n; i++) kiln_free(set->paths[i]);
  kiln_free(set->items);
  kiln_free(set->sizes);
  kiln_free(set->paths);
  memset(set, 0, sizeof *set);
}

/* ---- problems ---- */

typedef struct scan_s {
  kiln_cache_t *cache;
  kiln_index_t *index;
  digest_set_t present;
  bool *referenced; /* parallel to present after sort */
  bool dry_run;
  bool check_content; /* verify: hash every blob */
  bool (*should_stop)(void *);
  void *stop_user;
  kiln_cache_verify_report_t report;
  kiln_cache_repair_t repair;
} scan_t;

static void add_problem(scan_t *scan, kiln_cache_problem_kind_t kind, const kiln_digest_t *digest,
                        bool repaired, const char *fmt, ...) __attribute__((format(printf, 5, 6)));

static void add_problem(scan_t *scan, kiln_cache_problem_kind_t kind, const kiln_digest_t *digest,
                        bool repaired, const char *fmt, ...) {
  kiln_cache_verify_report_t *r = &scan->report;
  r->problems = kiln_realloc(r->problems, (r->n_problems + 1) * sizeof *r->problems);
  kiln_cache_problem_t *p = &r->problems[r->n_problems++];
  memset(p, 0, sizeof *p);
  p->kind = kind;
  if (digest) {
    kiln_digest_hex_t hex;
    kiln_digest_to_hex(digest, &hex);
    memcpy(p->digest, hex.text, sizeof p->digest);
  }
  va_list ap;
  va_start(ap, fmt);
  p->detail = kiln_buf_vsprintf(fmt, ap);
  va_end(ap);
  p->repaired = repaired;
}

/* verify, for a blob SHA-256 just proved intact: records its check when none is
 * recorded, and replaces a recorded one that disagrees (a damaged index row; left
 * alone, it would fail the next read of good bytes). Best effort, like any
 * recording of a check. */
static void audit_check(scan_t *scan, const kiln_digest_t *digest, const kiln_blob_check_t *check) {
  kiln_digest_hex_t hex;
  kiln_digest_to_hex(digest, &hex);
  kiln_blob_check_t recorded;
  kiln_status_t st = kiln_index_blob_check_get(scan->index, hex.text, recorded.bytes);
  bool wrong = !st && memcmp(recorded.bytes, check->bytes, sizeof recorded.bytes) != 0;
  if (st && kiln_status_code(st) != KILN_STATUS_NOT_FOUND) {
    kiln_log_status(KILN_LOG_WARN, "cache_check_lookup_failed", st, "digest=%s", hex.text);
  } else if (st || wrong) {
    if (wrong) {
      char want[KILN_BLOB_CHECK_HEX_LEN + 1], had[KILN_BLOB_CHECK_HEX_LEN + 1];
      kiln_blob_check_to_hex(check, want);
      kiln_blob_check_to_hex(&recorded, had);
      kiln_log(KILN_LOG_WARN, "cache_check_corrected", "digest=%s recorded=%s content=%s", hex.text, had,
               want);
    }
    kiln_status_free(st);
    st = kiln_index_blob_check_put(scan->index, hex.text, check->bytes);
    if (st) kiln_log_status(KILN_LOG_WARN, "cache_check_not_recorded", st, "digest=%s", hex.text);
  }
  kiln_status_free(st);
}

static KILN_MUST_USE kiln_status_t visit_blob(void *user, const kiln_digest_t *digest, const char *path,
                                              uint64_t stored_size) {
  scan_t *scan = user;
  if (scan->should_stop && scan->should_stop(scan->stop_user)) {
    return KILN_STATUS(KILN_STATUS_CANCELLED, "cache scan stopped before it finished");
  }
  if (!digest) {
    kiln_status_t removal = scan->dry_run ? NULL : kiln_file_tree_remove(path);
    bool repaired = !scan->dry_run && !removal;
    kiln_status_free(removal);
    scan->repair.stray_files++;
    add_problem(scan, KILN_CACHE_PROBLEM_STRAY_FILE, NULL, repaired, "%s is not a blob%s", path,
                repaired ? "; removed" : "");
    return NULL;
  }
  if (scan->check_content) {
    scan->report.blobs_checked++;
    scan->report.bytes_checked += stored_size;
    kiln_blob_check_t check;
    kiln_status_t st = kiln_blobstore_verify(scan->cache->blobs, digest, &check);
    if (!st && !scan->dry_run) audit_check(scan, digest, &check);
    if (kiln_status_code(st) == KILN_STATUS_DATA_LOSS) {
      bool repaired = false;
      if (!scan->dry_run) {
        kiln_digest_hex_t hex;
        kiln_digest_to_hex(digest, &hex);
        kiln_status_t q = drop_digest(scan->cache, scan->index, hex.text, kiln_status_message(st),
                                      now_ms(scan->cache), NULL);
        if (!q) q = kiln_blobstore_quarantine(scan->cache->blobs, digest);
        repaired = q == NULL;
        if (repaired) count(scan->cache, &scan->cache->quarantined, 1);
        kiln_status_free(q);
      }
      add_problem(scan, KILN_CACHE_PROBLEM_CORRUPT_BLOB, digest, repaired, "%s%s", kiln_status_message(st),
                  repaired ? "; quarantined" : "");
      kiln_status_free(st);
      /* Quarantined: gone with its rows. In a dry run it stays, and counts as
       * present so its rows are not reported a second time as missing. */
      if (scan->dry_run) set_add(&scan->present, digest, stored_size, path);
      return NULL;
    }
    if (st && kiln_status_code(st) != KILN_STATUS_NOT_FOUND) return st;
    kiln_status_free(st);
  }
  set_add(&scan->present, digest, stored_size, path);
  return NULL;
}

static KILN_MUST_USE kiln_status_t visit_row_digest(void *user, const char *hex) {
  scan_t *scan = user;
  kiln_digest_t d;
  if (!kiln_digest_from_hex(hex, &d)) return NULL; /* schema CHECKs make this impossible */
  ssize_t i = set_find(&scan->present, &d);
  if (i >= 0) {
    scan->referenced[i] = true;
    return NULL;
  }
  /* A row without its blob. Collected, then dropped after the visit (the visit
   * holds a statement open on this connection). */
  add_problem(scan, KILN_CACHE_PROBLEM_MISSING_BLOB, &d, false,
              "the index names blob %s but the store does not have it", hex);
  return NULL;
}

/* The shared scan of open's repair and verify. */
static KILN_MUST_USE kiln_status_t scan_store(scan_t *scan) {
  int64_t t0 = kiln_time_monotonic_ns();
  kiln_status_t st = kiln_blobstore_visit(scan->cache->blobs, visit_blob, scan);
  if (st) return st;
  set_sort(&scan->present);
  scan->referenced = kiln_calloc(scan->present.n ? scan->present.n : 1, sizeof(bool));
  st = kiln_index_visit_digests(scan->index, visit_row_digest, scan);
  if (st) return st;
  /* Drop rows whose blob is missing. */
  for (size_t i = 0; i < scan->report.n_problems; i++) {
    kiln_cache_problem_t *p = &scan->report.problems[i];
    if (p->kind != KILN_CACHE_PROBLEM_MISSING_BLOB) continue;
    /* The listing came first: a put that finished since then has its blob. */
    kiln_digest_t d;
    if (kiln_digest_from_hex(p->digest, &d) && kiln_blobstore_contains(scan->cache->blobs, &d, NULL)) {
      p->kind = 0; /* not a problem: dropped from the report below */
      continue;
    }
    if (scan->dry_run) {
      scan->repair.dangling_rows++;
      continue;
    }
    size_t rows = 0;
    st = drop_digest(scan->cache, scan->index, p->digest, NULL, now_ms(scan->cache), &rows);
    if (st) return st;
    scan->repair.dangling_rows += rows;
    p->repaired = true;
    kiln_free(p->detail);
    p->detail = kiln_buf_sprintf("blob %s is missing; dropped %zu index row(s)", p->digest, rows);
  }
  size_t kept = 0;
  for (size_t i = 0; i < scan->report.n_problems; i++) {
    if (scan->report.problems[i].kind == 0) {
      kiln_free(scan->report.problems[i].detail);
      continue;
    }
    scan->report.problems[kept++] = scan->report.problems[i];
  }
  scan->report.n_problems = kept;
  /* Remove blobs no row names. */
  time_t now = time(NULL);
  for (size_t i = 0; i < scan->present.n; i++) {
    if (scan->referenced[i] || in_use(scan->cache, &scan->present.items[i])) continue;
    if (scan->check_content) {
      /* Concurrent puts: spare young orphans (their row may be on its way). */
      struct stat sb;
      if (stat(scan->present.paths[i], &sb) == 0 && now - sb.st_mtime < ORPHAN_GRACE_S) continue;
    }
    scan->repair.orphan_blobs++;
    bool repaired = false;
    if (!scan->dry_run) {
      uint64_t freed;
      repaired = remove_unless_in_use(scan->cache, scan->index, &scan->present.items[i], &freed);
      if (!repaired) continue; /* a put or a reader took it meanwhile */
    }
    add_problem(scan, KILN_CACHE_PROBLEM_ORPHAN_BLOB, &scan->present.items[i], repaired,
                "no index row names this blob (%llu bytes on disk)%s",
                (unsigned long long)scan->present.sizes[i], repaired ? "; removed" : "");
  }
  int64_t ms = (kiln_time_monotonic_ns() - t0) / 1000000;
  scan->report.duration_ms = ms;
  scan->repair.duration_ms = ms;
  return NULL;
}

static void scan_deinit(scan_t *scan) {
  set_deinit(&scan->present);
  kiln_free(scan->referenced);
}

/* ---- open / close ---- */

kiln_status_t kiln_cache_open(const char *dir, const kiln_cache_options_t *options, kiln_cache_t **out_cache,
                              kiln_cache_repair_t *out_repair) {
  *out_cache = NULL;
  if (out_repair) memset(out_repair, 0, sizeof *out_repair);
  if (mkdir(dir, 0700) != 0 && errno != EEXIST) {
    return KILN_STATUS_ERRNO(errno, "cannot create the cache directory %s", dir);
  }
  kiln_cache_t *cache = kiln_calloc(1, sizeof *cache);
  cache->dir = kiln_strdup(dir);
  cache->pending = kiln_calloc(PENDING_FLUSH, sizeof *cache->pending);
  if (options)
    cache->options = *options;
  else
    cache->options.compression = KILN_BLOB_COMPRESSION_AUTO;
  pthread_mutex_init(&cache->lock, NULL);
  cache->memo = kiln_calloc(MEMO_SLOTS, sizeof *cache->memo);
  cache->source_memo = kiln_calloc(MEMO_SLOTS, sizeof *cache->source_memo);
  kiln_buf_t path;
  kiln_buf_init(&path);
  kiln_buf_appendf(&path, "%s/index.db", dir);
  cache->db_path = kiln_buf_take(&path);
  kiln_buf_deinit(&path);

  kiln_blobstore_options_t bopts = {.compression = cache->options.compression};
  kiln_status_t st = kiln_blobstore_open(dir, &bopts, &cache->blobs);
  kiln_index_t *index = NULL;
  if (!st) st = kiln_index_open(cache->db_path, &index);
  if (!st && !cache->options.skip_repair) {
    /* The repair below deletes blobs no row names: from a damaged index that
     * would delete live ones. Nothing is repaired from a file that fails SQLite's
     * own check. */
    char *problem = NULL;
    st = kiln_index_check_integrity(index, false, &problem);
    if (!st && problem) {
      st = KILN_STATUS(
          KILN_STATUS_DATA_LOSS,
          "the cache index %s is damaged (%s); kilnd repairs nothing from it. Restore index.db "
          "from a backup, or stop kilnd and move %s aside (its blobs stay there) to start with an "
          "empty cache",
          cache->db_path, problem, dir);
    }
    kiln_free(problem);
  }
  if (!st && !cache->options.skip_repair) {
    scan_t scan;
    memset(&scan, 0, sizeof scan);
    scan.cache = cache;
    scan.index = index;
    st = scan_store(&scan);
    if (!st && out_repair) *out_repair = scan.repair;
    kiln_cache_verify_report_deinit(&scan.report);
    scan_deinit(&scan);
  }
  if (st) {
    kiln_index_close(index);
    kiln_cache_close(cache);
    return kiln_status_annotate(st, "cannot open the cache in %s", dir);
  }
  /* Seed the counters' snapshot (kiln_cache_counters never queries). */
  kiln_status_t totals = kiln_index_totals(index, &cache->last_totals);
  if (totals) memset(&cache->last_totals, 0, sizeof cache->last_totals); /* best effort */
  kiln_status_free(totals);
  cache->schema_version = kiln_index_schema_version(index);
  release(cache, index);
  *out_cache = cache;
  return NULL;
}

void kiln_cache_close(kiln_cache_t *cache) {
  if (!cache) return;
  if (cache->n_pending && cache->n_pool) {
    kiln_status_t st = flush_hits(cache, cache->pool[0]);
    if (st) kiln_log_status(KILN_LOG_WARN, "cache_hits_lost", st, "dir=%s", cache->dir);
    kiln_status_free(st);
  }
  kiln_free(cache->pending);
  for (size_t i = 0; i < cache->n_pool; i++) kiln_index_close(cache->pool[i]);
  kiln_free(cache->pool);
  kiln_free(cache->in_use);
  if (cache->blobs) kiln_blobstore_close(cache->blobs);
  pthread_mutex_destroy(&cache->lock);
  kiln_free(cache->memo);
  kiln_free(cache->source_memo);
  kiln_free(cache->dir);
  kiln_free(cache->db_path);
  kiln_free(cache);
}

const char *kiln_cache_path(const kiln_cache_t *cache) { return cache->dir; }

uint64_t kiln_cache_capacity(const kiln_cache_t *cache) { return cache->options.capacity_bytes; }

/* ---- keys ---- */

char *kiln_cache_flags_normalize(const char *const *flags, size_t n_flags) {
  char **list;
  size_t n = kiln_flags_normalize(flags, n_flags, &list);
  kiln_buf_t out;
  kiln_buf_init(&out);
  for (size_t k = 0; k < n; k++) {
    if (k) kiln_buf_append_char(&out, '\n');
    kiln_buf_append_str(&out, list[k]);
  }
  kiln_flags_free(list, n);
  return kiln_buf_take(&out);
}

/* The encoding is written into caller memory: a key's parts are a few hundred
 * bytes, and this runs for every target of every Compile, hits included. */
static char *put(char *at, const char *s, size_t len) {
  memcpy(at, s, len);
  return at + len;
}

static char *put_uint(char *at, uint64_t v) {
  char digits[20];
  size_t n = 0;
  do {
    digits[n++] = (char)('0' + v % 10);
    v /= 10;
  } while (v);
  while (n) *at++ = digits[--n];
  return at;
}

/* "<name><length>:<value>\n" */
static char *put_field(char *at, const char *name, const char *value, size_t len) {
  at = put(at, name, strlen(name));
  at = put_uint(at, len);
  *at++ = ':';
  at = put(at, value, len);
  *at++ = '\n';
  return at;
}

/* Room for put_field's name (at most 9 bytes), length digits and punctuation
 * around a value; and for the rest: the version line, "flags:N", "hal:N" and
 * "bytecode:M.N" (120 bytes at most). */
#define KEY_FIELD_EXTRA (16 + 20 + 2)
#define KEY_FIXED_BYTES 128
#define KEY_STACK_BYTES 1024

/* One target's key from parts already checked and flags already normalized. */
static void key_encode(const kiln_cache_key_parts_t *parts, const char *target, char *const *flags,
                       size_t n_flags, kiln_digest_hex_t *out_key) {
  size_t target_len = strlen(target), compiler_len = strlen(parts->compiler);
  size_t need = KEY_FIXED_BYTES + 3 * KEY_FIELD_EXTRA + KILN_DIGEST_HEX_LEN + target_len + compiler_len;
  for (size_t i = 0; i < n_flags; i++) need += KEY_FIELD_EXTRA + strlen(flags[i]);
  char stack[KEY_STACK_BYTES];
  char *enc = need <= sizeof stack ? stack : kiln_malloc(need);
  /* Every field and every flag length-prefixed: no choice of flag text (newlines
   * included) can make two different part lists encode the same. */
  static const char version[] = "kiln-cache-key/1\n";
  char *at = put(enc, version, sizeof version - 1);
  at = put_field(at, "source:", parts->source_digest, KILN_DIGEST_HEX_LEN);
  at = put_field(at, "target:", target, target_len);
  at = put_field(at, "compiler:", parts->compiler, compiler_len);
  at = put(at, "flags:", 6);
  at = put_uint(at, n_flags);
  *at++ = '\n';
  for (size_t i = 0; i < n_flags; i++) at = put_field(at, "flag:", flags[i], strlen(flags[i]));
  at = put(at, "hal:", 4);
  at = put_uint(at, parts->hal_version);
  at = put(at, "\nbytecode:", 10);
  at = put_uint(at, parts->bytecode_version >> 16);
  *at++ = '.';
  at = put_uint(at, parts->bytecode_version & 0xffff);
  *at++ = '\n';
  kiln_digest_t d;
  kiln_digest_of(enc, (size_t)(at - enc), &d);
  kiln_digest_to_hex(&d, out_key);
  if (enc != stack) kiln_free(enc);
}

kiln_status_t kiln_cache_keys_compute(const kiln_cache_key_parts_t *parts, const char *const *targets,
                                      size_t n, kiln_digest_hex_t *out_keys) {
  if (!parts->source_digest || !kiln_digest_is_valid_hex(parts->source_digest)) {
    return KILN_STATUS(KILN_STATUS_INVALID_ARGUMENT,
                       "cache key: source digest '%s' is not 64 lowercase hex characters",
                       parts->source_digest ? parts->source_digest : "");
  }
  for (size_t i = 0; i < n; i++) {
    if (!targets[i] || !*targets[i] || strchr(targets[i], '\n')) {
      return KILN_STATUS(KILN_STATUS_INVALID_ARGUMENT,
                         "cache key: target %zu of %zu is missing or malformed (empty or with a newline)",
                         i + 1, n);
    }
  }
  if (!parts->compiler || !*parts->compiler || strchr(parts->compiler, '\n')) {
    return KILN_STATUS(KILN_STATUS_INVALID_ARGUMENT,
                       "cache key: the compiler identity is missing or malformed");
  }
  char **flags = NULL;
  size_t n_flags = parts->n_flags ? kiln_flags_normalize(parts->flags, parts->n_flags, &flags) : 0;
  for (size_t i = 0; i < n; i++) key_encode(parts, targets[i], flags, n_flags, &out_keys[i]);
  if (flags) kiln_flags_free(flags, n_flags);
  return NULL;
}

kiln_status_t kiln_cache_key_compute(const kiln_cache_key_parts_t *parts, kiln_digest_hex_t *out_key) {
  const char *target = parts->target;
  return kiln_cache_keys_compute(parts, &target, 1, out_key);
}

/* ---- artifacts ---- */

kiln_status_t kiln_cache_artifact_put(kiln_cache_t *cache, const kiln_cache_key_parts_t *parts,
                                      const void *data, size_t len, const kiln_cache_provenance_t *provenance,
                                      kiln_index_artifact_t *out_record) {
  if (out_record) memset(out_record, 0, sizeof *out_record);
  kiln_digest_hex_t key;
  KILN_RETURN_IF_ERROR(kiln_cache_key_compute(parts, &key));
  kiln_digest_t digest;
  kiln_blob_check_t check;
  uint64_t stored = 0;
  /* From commit to row: in the in-use set, protected from gc and verify. */
  kiln_status_t st = put_blob(cache, NULL, data, len, &digest, &check, &stored);
  if (st) return kiln_status_annotate(st, "cannot store the artifact for %s", parts->target);
  kiln_digest_hex_t hex;
  kiln_digest_to_hex(&digest, &hex);
  char *flags = kiln_cache_flags_normalize(parts->flags, parts->n_flags);
  int64_t now = now_ms(cache);
  kiln_index_artifact_t rec;
  memset(&rec, 0, sizeof rec);
  memcpy(rec.cache_key, key.text, sizeof rec.cache_key);
  memcpy(rec.artifact_digest, hex.text, sizeof rec.artifact_digest);
  memcpy(rec.source_digest, parts->source_digest, sizeof rec.source_digest);
  rec.target = (char *)parts->target;
  rec.flags = flags;
  rec.compiler = (char *)parts->compiler;
  rec.hal_version = parts->hal_version;
  rec.bytecode_version = parts->bytecode_version;
  rec.size = len;
  rec.stored_size = stored;
  rec.submitter = provenance ? (char *)provenance->submitter : NULL;
  rec.created_ms = rec.last_access_ms = now;
  rec.labels = provenance ? (kiln_index_label_t *)provenance->labels : NULL;
  rec.n_labels = provenance ? provenance->n_labels : 0;
  rec.job_id = provenance ? (char *)provenance->job_id : NULL;
  rec.source_name = provenance ? (char *)provenance->source_name : NULL;
  kiln_index_t *index = NULL;
  st = acquire(cache, &index);
  /* A key rebuilt with different bytes (a non-deterministic compiler, or a
   * compiler fix under the same identity) leaves the old blob unnamed: free it. */
  char old_digest[KILN_DIGEST_HEX_LEN + 1] = "";
  if (!st) {
    kiln_index_artifact_t old;
    kiln_status_t got = kiln_index_artifact_get(index, key.text, &old);
    if (!got && strcmp(old.artifact_digest, hex.text) != 0) {
      memcpy(old_digest, old.artifact_digest, sizeof old_digest);
    }
    if (!got) kiln_index_artifact_deinit(&old);
    kiln_status_free(got);
  }
  if (!st) st = put_row_and_check(index, &rec, NULL, hex.text, &check);
  if (!st && *old_digest) memo_invalidate(cache); /* the key now names other bytes */
  if (!st) memo_store(cache, key.text, hex.text, len);
  if (!st && *old_digest) remove_if_unreferenced(cache, index, old_digest);
  if (!st && out_record) st = kiln_index_artifact_get(index, key.text, out_record);
  release(cache, index);
  in_use_remove(cache, &digest);
  kiln_free(flags);
  if (st) return kiln_status_annotate(st, "cannot index the artifact for %s", parts->target);
  return NULL;
}

kiln_status_t kiln_cache_artifact_lookup(kiln_cache_t *cache, const char *cache_key,
                                         kiln_index_artifact_t *out_record) {
  memset(out_record, 0, sizeof *out_record);
  if (!kiln_digest_is_valid_hex(cache_key)) {
    return KILN_STATUS(KILN_STATUS_INVALID_ARGUMENT, "cache key '%s' is not 64 lowercase hex characters",
                       cache_key);
  }
  kiln_index_t *index = NULL;
  KILN_RETURN_IF_ERROR(acquire(cache, &index));
  kiln_status_t st = kiln_index_artifact_get(index, cache_key, out_record);
  if (!st) {
    kiln_digest_t d;
    kiln_digest_from_hex(out_record->artifact_digest, &d);
    if (!kiln_blobstore_contains(cache->blobs, &d, NULL)) {
      /* Someone removed the file behind our back: heal the index, report a miss. */
      kiln_status_free(drop_digest(cache, index, out_record->artifact_digest, NULL, now_ms(cache), NULL));
      kiln_index_artifact_deinit(out_record);
      memset(out_record, 0, sizeof *out_record);
      st = KILN_STATUS(KILN_STATUS_NOT_FOUND, "cache key %s: its blob is missing", cache_key);
    } else {
      int64_t now = now_ms(cache);
      uint64_t pending = 0;
      bool full = note_hit(cache, cache_key, now, true, &pending);
      out_record->hits += pending;
      out_record->last_access_ms = now;
      if (full) {
        kiln_status_t fl = flush_hits(cache, index);
        if (fl) kiln_log_status(KILN_LOG_WARN, "cache_hits_not_recorded", fl, NULL);
        kiln_status_free(fl); /* the lookup itself succeeded */
      }
    }
  }
  release(cache, index);
  count(cache, kiln_status_code(st) == KILN_STATUS_OK ? &cache->hits : &cache->misses, 1);
  return st;
}

/* The memo's answer for `cache_key`: false when it knows nothing (for this
 * generation); *out_fresh when the blob was seen on disk within BLOB_CHECK_MS. */
static bool memo_find(kiln_cache_t *cache, const char *cache_key, char digest[KILN_DIGEST_HEX_LEN + 1],
                      uint64_t *size, int64_t mono, bool *out_fresh) {
  pthread_mutex_lock(&cache->lock);
  const memo_t *m = &cache->memo[memo_slot(cache_key)];
  bool known =
      m->used && m->generation == cache->generation && memcmp(m->key, cache_key, KILN_DIGEST_HEX_LEN) == 0;
  *out_fresh = known && mono - m->checked_ms < BLOB_CHECK_MS;
  if (known) {
    memcpy(digest, m->digest, KILN_DIGEST_HEX_LEN + 1);
    *size = m->size;
  }
  pthread_mutex_unlock(&cache->lock);
  return known;
}

kiln_status_t kiln_cache_artifact_probe(kiln_cache_t *cache, const char *cache_key,
                                        char out_digest[KILN_DIGEST_HEX_LEN + 1], uint64_t *out_size) {
  out_digest[0] = '\0';
  *out_size = 0;
  if (!kiln_digest_is_valid_hex(cache_key)) {
    return KILN_STATUS(KILN_STATUS_INVALID_ARGUMENT, "cache key '%s' is not 64 lowercase hex characters",
                       cache_key);
  }
  char digest[KILN_DIGEST_HEX_LEN + 1] = "";
  uint64_t size = 0;
  int64_t mono = kiln_time_monotonic_ms();
  bool fresh = false;
  bool known = memo_find(cache, cache_key, digest, &size, mono, &fresh);
  kiln_digest_t d;
  if (known && !fresh && kiln_digest_from_hex(digest, &d) &&
      kiln_blobstore_contains(cache->blobs, &d, NULL)) {
    pthread_mutex_lock(&cache->lock);
    memo_t *m = &cache->memo[memo_slot(cache_key)];
    if (memcmp(m->key, cache_key, KILN_DIGEST_HEX_LEN) == 0) m->checked_ms = mono;
    pthread_mutex_unlock(&cache->lock);
    fresh = true;
  }
  if (fresh) {
    uint64_t pending = 0;
    if (note_hit(cache, cache_key, now_ms(cache), true, &pending)) {
      kiln_index_t *index = NULL;
      kiln_status_t st = acquire(cache, &index);
      if (!st) st = flush_hits(cache, index);
      if (index) release(cache, index);
      if (st) kiln_log_status(KILN_LOG_WARN, "cache_hits_not_recorded", st, NULL);
      kiln_status_free(st);
    }
    count(cache, &cache->hits, 1);
    memcpy(out_digest, digest, sizeof digest);
    *out_size = size;
    return NULL;
  }
  /* Not memoized, or its blob went away: the full lookup (which heals the index). */
  kiln_index_artifact_t rec;
  KILN_RETURN_IF_ERROR(kiln_cache_artifact_lookup(cache, cache_key, &rec));
  memo_store(cache, cache_key, rec.artifact_digest, rec.size);
  memcpy(out_digest, rec.artifact_digest, KILN_DIGEST_HEX_LEN + 1);
  *out_size = rec.size;
  kiln_index_artifact_deinit(&rec);
  return NULL;
}

bool kiln_cache_artifact_memo(kiln_cache_t *cache, const char *const *cache_keys, size_t n,
                              kiln_cache_memo_answer_t *out) {
  memset(out, 0, n * sizeof *out);
  if (n > KILN_CACHE_MEMO_MAX_KEYS) return false;
  /* Each key's memo slot, and its place in the pending hits (SIZE_MAX: none yet). */
  size_t slot[KILN_CACHE_MEMO_MAX_KEYS], found[KILN_CACHE_MEMO_MAX_KEYS];
  for (size_t i = 0; i < n; i++) {
    if (!kiln_digest_is_valid_hex(cache_keys[i])) return false;
    slot[i] = memo_slot(cache_keys[i]);
  }
  int64_t mono = kiln_time_monotonic_ms(), now = now_ms(cache);
  /* Every key answered and every hit noted under one lock, or nothing noted. */
  pthread_mutex_lock(&cache->lock);
  size_t fresh_entries = 0;
  for (size_t i = 0; i < n; i++) {
    const memo_t *m = &cache->memo[slot[i]];
    if (!m->used || m->generation != cache->generation ||
        memcmp(m->key, cache_keys[i], KILN_DIGEST_HEX_LEN) != 0 || mono - m->checked_ms >= BLOB_CHECK_MS) {
      pthread_mutex_unlock(&cache->lock);
      return false; /* only the probe can tell */
    }
    found[i] = pending_find_locked(cache, cache_keys[i]);
    if (found[i] == cache->n_pending) {
      found[i] = SIZE_MAX;
      fresh_entries++;
    }
  }
  if (cache->n_pending + fresh_entries >= PENDING_FLUSH) {
    pthread_mutex_unlock(&cache->lock); /* noting them would call for a flush: not here */
    return false;
  }
  for (size_t i = 0; i < n; i++) {
    const memo_t *m = &cache->memo[slot[i]];
    memcpy(out[i].artifact_digest, m->digest, sizeof out[i].artifact_digest);
    out[i].size = m->size;
    /* A new entry is looked for again: an earlier key of this call may have added it. */
    size_t at = found[i] != SIZE_MAX ? found[i] : pending_find_locked(cache, cache_keys[i]);
    pending_hit_locked(cache, at, cache_keys[i], now);
  }
  cache->hits += n;
  pthread_mutex_unlock(&cache->lock);
  return true;
}

kiln_status_t kiln_cache_artifact_get_by_digest(kiln_cache_t *cache, const char *digest,
                                                kiln_index_artifact_t *out_record) {
  memset(out_record, 0, sizeof *out_record);
  if (!digest || !kiln_digest_is_valid_hex(digest)) {
    return KILN_STATUS(KILN_STATUS_INVALID_ARGUMENT,
                       "artifact digest '%s' is not 64 lowercase hex characters", digest ? digest : "");
  }
  kiln_index_t *index = NULL;
  KILN_RETURN_IF_ERROR(acquire(cache, &index));
  kiln_status_t st = kiln_index_artifact_get_by_digest(index, digest, out_record);
  release(cache, index);
  if (kiln_status_code(st) == KILN_STATUS_NOT_FOUND) {
    kiln_status_free(st);
    st = KILN_STATUS(KILN_STATUS_NOT_FOUND,
                     "no artifact with digest %s in the cache (never stored, evicted or "
                     "quarantined)",
                     digest);
  }
  return st;
}

kiln_status_t kiln_cache_artifact_find_page(kiln_cache_t *cache, const kiln_index_page_query_t *query,
                                            kiln_index_artifact_t **out_records, size_t *out_count) {
  *out_records = NULL;
  *out_count = 0;
  kiln_index_t *index = NULL;
  KILN_RETURN_IF_ERROR(acquire(cache, &index));
  kiln_status_t st = kiln_index_artifact_find_page(index, query, out_records, out_count);
  release(cache, index);
  return st;
}

/* Drops every row naming `digest` and moves its file to quarantine/. */
static void quarantine(kiln_cache_t *cache, const kiln_digest_t *digest, const char *reason) {
  kiln_digest_hex_t hex;
  kiln_digest_to_hex(digest, &hex);
  kiln_index_t *index = NULL;
  kiln_status_t st = acquire(cache, &index);
  if (!st) st = drop_digest(cache, index, hex.text, reason, now_ms(cache), NULL);
  release(cache, index);
  kiln_status_t q = kiln_blobstore_quarantine(cache->blobs, digest);
  if (st || (q && kiln_status_code(q) != KILN_STATUS_NOT_FOUND)) {
    kiln_log_status(KILN_LOG_ERROR, "cache_quarantine_failed", st ? st : q, "digest=%s", hex.text);
  } else {
    kiln_log(KILN_LOG_WARN, "cache_quarantine", "digest=%s", hex.text);
  }
  kiln_status_free(st);
  kiln_status_free(q);
  count(cache, &cache->quarantined, 1);
}

/* The recorded check of blob `hex`: false when there is none (stored before index
 * migration 4) or the index cannot say now; the read then verifies with SHA-256,
 * which is never wrong, only slower. */
static bool lookup_check(kiln_cache_t *cache, const char *hex, kiln_blob_check_t *out_check) {
  kiln_index_t *index = NULL;
  kiln_status_t st = acquire(cache, &index);
  if (!st) st = kiln_index_blob_check_get(index, hex, out_check->bytes);
  release(cache, index);
  if (st && kiln_status_code(st) != KILN_STATUS_NOT_FOUND) {
    kiln_log_status(KILN_LOG_WARN, "cache_check_lookup_failed", st, "digest=%s", hex);
  }
  bool found = st == NULL;
  kiln_status_free(st);
  return found;
}

/* Records the check a SHA-256 read computed, so the next read of the blob is fast.
 * Best effort: without it reads stay correct, and the next one tries again. */
static void record_check(kiln_cache_t *cache, const kiln_digest_t *digest, const kiln_blob_check_t *check) {
  kiln_digest_hex_t hex;
  kiln_digest_to_hex(digest, &hex);
  kiln_index_t *index = NULL;
  kiln_status_t st = acquire(cache, &index);
  if (!st) st = kiln_index_blob_check_put(index, hex.text, check->bytes);
  release(cache, index);
  if (st) kiln_log_status(KILN_LOG_WARN, "cache_check_not_recorded", st, "digest=%s", hex.text);
  kiln_status_free(st);
}

kiln_status_t kiln_cache_open_blob(kiln_cache_t *cache, const char *digest,
                                   kiln_cache_reader_t **out_reader) {
  *out_reader = NULL;
  kiln_digest_t d;
  if (!kiln_digest_from_hex(digest, &d)) {
    return KILN_STATUS(KILN_STATUS_INVALID_ARGUMENT, "digest '%s' is not 64 lowercase hex characters",
                       digest);
  }
  in_use_add(cache, &d);
  kiln_cache_reader_t *r = kiln_calloc(1, sizeof *r);
  r->cache = cache;
  r->digest = d;
  kiln_blob_check_t check;
  r->by_check = lookup_check(cache, digest, &check);
  kiln_status_t st = kiln_blob_reader_open(cache->blobs, &d, r->by_check ? &check : NULL, &r->blob);
  if (st) {
    in_use_remove(cache, &d);
    kiln_free(r);
    return st;
  }
  *out_reader = r;
  return NULL;
}

kiln_status_t kiln_cache_reader_read(kiln_cache_reader_t *reader, void *buf, size_t cap, size_t *out_len) {
  kiln_status_t st = kiln_blob_reader_read(reader->blob, buf, cap, out_len);
  if (kiln_status_code(st) == KILN_STATUS_DATA_LOSS) {
    quarantine(reader->cache, &reader->digest, kiln_status_message(st));
  } else if (!st) {
    count(reader->cache, &reader->cache->bytes_served, *out_len);
    kiln_blob_check_t check;
    if (*out_len == 0 && !reader->ended && kiln_blob_reader_check(reader->blob, &check)) {
      reader->ended = true;
      /* Proved by SHA-256 just now: its check is the one to record. */
      if (!reader->by_check) record_check(reader->cache, &reader->digest, &check);
    }
  }
  return st;
}

uint64_t kiln_cache_reader_size(const kiln_cache_reader_t *reader) {
  return kiln_blob_reader_size(reader->blob);
}

void kiln_cache_reader_close(kiln_cache_reader_t *reader) {
  if (!reader) return;
  kiln_blob_reader_close(reader->blob);
  in_use_remove(reader->cache, &reader->digest);
  kiln_free(reader);
}

kiln_status_t kiln_cache_get_blob(kiln_cache_t *cache, const char *digest, void **out_data, size_t *out_len) {
  *out_data = NULL;
  *out_len = 0;
  kiln_cache_reader_t *r;
  KILN_RETURN_IF_ERROR(kiln_cache_open_blob(cache, digest, &r));
  kiln_buf_t buf;
  kiln_buf_init(&buf);
  /* Size the buffer once (the reader hands back at most 256 KiB a call, which
   * stay in the CPU cache while they are hashed). */
  uint64_t size = kiln_cache_reader_size(r);
  kiln_buf_reserve(&buf, size < ((uint64_t)1 << 32) ? (size_t)size + 1 : 0);
  kiln_status_t st = NULL;
  for (;;) {
    kiln_buf_reserve(&buf, 1);
    size_t room = buf.capacity - buf.len - 1;
    size_t n = 0;
    st = kiln_cache_reader_read(r, buf.data + buf.len, room, &n);
    if (st || n == 0) break;
    buf.len += n;
  }
  kiln_cache_reader_close(r);
  if (st) {
    kiln_buf_deinit(&buf);
    return st;
  }
  *out_len = buf.len;
  *out_data = kiln_buf_take(&buf);
  return NULL;
}

kiln_status_t kiln_cache_pin(kiln_cache_t *cache, const char *key_or_digest, bool pinned, size_t *out_count) {
  if (out_count) *out_count = 0;
  if (!key_or_digest || !kiln_digest_is_valid_hex(key_or_digest)) {
    return KILN_STATUS(KILN_STATUS_INVALID_ARGUMENT,
                       "'%s' is not an artifact digest or cache key (64 lowercase hex characters)",
                       key_or_digest ? key_or_digest : "");
  }
  kiln_index_t *index = NULL;
  KILN_RETURN_IF_ERROR(acquire(cache, &index));
  kiln_status_t st = kiln_index_artifact_set_pinned(index, key_or_digest, pinned, out_count);
  release(cache, index);
  return st;
}

/* ---- sources ---- */

/* The index row of a stored source blob, written through a connection the caller
 * holds (`*index` stays acquired for the caller: release it). */
static KILN_MUST_USE kiln_status_t index_source(kiln_cache_t *cache, const char *hex,
                                                const char *semantic_digest, const char *name, int format,
                                                uint64_t size, uint64_t stored,
                                                const kiln_blob_check_t *check, kiln_index_t **index) {
  kiln_index_source_t rec;
  memset(&rec, 0, sizeof rec);
  memcpy(rec.digest, hex, sizeof rec.digest);
  if (semantic_digest && kiln_digest_is_valid_hex(semantic_digest)) {
    memcpy(rec.semantic_digest, semantic_digest, sizeof rec.semantic_digest);
  }
  rec.name = (char *)name;
  rec.format = format;
  rec.size = size;
  rec.stored_size = stored;
  rec.created_ms = rec.last_access_ms = now_ms(cache);
  kiln_status_t st = acquire(cache, index);
  if (!st) st = put_row_and_check(*index, NULL, &rec, hex, check);
  return st;
}

/* How stale a source's last-access time may get before a hit rewrites it. */
#define SOURCE_TOUCH_MS (60 * 1000)

/* The source memo: true when `hex` was stored or touched within SOURCE_TOUCH_MS
 * (and nothing was removed since); *out_fresh when its blob was also seen on disk
 * within BLOB_CHECK_MS. */
static bool source_memo_find(kiln_cache_t *cache, const kiln_digest_hex_t *hex, int64_t mono,
                             bool *out_fresh) {
  pthread_mutex_lock(&cache->lock);
  const memo_t *sm = &cache->source_memo[memo_slot(hex->text)];
  bool recent = sm->used && sm->generation == cache->generation &&
                memcmp(sm->key, hex->text, KILN_DIGEST_HEX_LEN) == 0 &&
                now_ms(cache) - (int64_t)sm->size <= SOURCE_TOUCH_MS;
  *out_fresh = recent && mono - sm->checked_ms < BLOB_CHECK_MS;
  pthread_mutex_unlock(&cache->lock);
  return recent;
}

/* Remembers that source `hex` is stored, its LRU time written at `touched_ms` and
 * its blob seen at `mono` (monotonic ms). */
static void source_memo_store(kiln_cache_t *cache, const kiln_digest_hex_t *hex, int64_t touched_ms,
                              int64_t mono) {
  pthread_mutex_lock(&cache->lock);
  memo_t *sm = &cache->source_memo[memo_slot(hex->text)];
  memcpy(sm->key, hex->text, sizeof sm->key);
  sm->size = (uint64_t)touched_ms; /* when its LRU time was last written */
  sm->generation = cache->generation;
  sm->checked_ms = mono;
  sm->used = true;
  pthread_mutex_unlock(&cache->lock);
}

bool kiln_cache_source_memo(kiln_cache_t *cache, const void *data, size_t len,
                            kiln_digest_hex_t *out_digest) {
  kiln_digest_t d;
  kiln_digest_of(data, len, &d);
  kiln_digest_to_hex(&d, out_digest);
  bool fresh = false;
  return source_memo_find(cache, out_digest, kiln_time_monotonic_ms(), &fresh) && fresh;
}

kiln_status_t kiln_cache_source_put(kiln_cache_t *cache, const void *data, size_t len,
                                    const char *expected_digest, const char *name, int format,
                                    const char *semantic_digest, kiln_digest_hex_t *out_digest) {
  kiln_digest_t expected;
  if (expected_digest && !kiln_digest_from_hex(expected_digest, &expected)) {
    return KILN_STATUS(KILN_STATUS_INVALID_ARGUMENT, "source digest '%s' is not 64 lowercase hex characters",
                       expected_digest);
  }
  kiln_digest_t digest;
  uint64_t stored = 0;
  /* The common case on a busy server: the source is already stored (a CI job
   * submitting the same model again). Hash once, find it, touch it, done, so a
   * cache hit writes no blob. */
  kiln_digest_t computed;
  kiln_digest_of(data, len, &computed);
  if (expected_digest && memcmp(&computed, &expected, sizeof computed) != 0) {
    kiln_digest_hex_t got;
    kiln_digest_to_hex(&computed, &got);
    return KILN_STATUS(KILN_STATUS_INVALID_ARGUMENT, "the source's bytes hash to %s, not the declared %s",
                       got.text, expected_digest);
  }
  {
    kiln_digest_hex_t hex;
    kiln_digest_to_hex(&computed, &hex);
    /* Seen lately (and nothing removed since): a stat of the blob, no SQLite. */
    int64_t mono = kiln_time_monotonic_ms();
    bool fresh = false;
    bool recent = source_memo_find(cache, &hex, mono, &fresh);
    if (recent && !fresh && kiln_blobstore_contains(cache->blobs, &computed, NULL)) {
      pthread_mutex_lock(&cache->lock);
      memo_t *sm = &cache->source_memo[memo_slot(hex.text)];
      if (memcmp(sm->key, hex.text, KILN_DIGEST_HEX_LEN) == 0) sm->checked_ms = mono;
      pthread_mutex_unlock(&cache->lock);
      fresh = true;
    }
    if (fresh) {
      if (out_digest) *out_digest = hex;
      return NULL;
    }
    kiln_index_t *index = NULL;
    kiln_index_source_t found;
    memset(&found, 0, sizeof found);
    kiln_status_t as = acquire(cache, &index);
    bool have_index = as == NULL;
    kiln_status_free(as); /* no index connection now: the slow path below reports it */
    if (have_index) {
      kiln_status_t gs = kiln_index_source_get(index, hex.text, &found);
      bool present = !gs && kiln_blobstore_contains(cache->blobs, &computed, NULL);
      /* LRU needs minutes, not milliseconds: a write per hit would cost more than the hit. */
      int64_t now = now_ms(cache);
      int64_t touched = found.last_access_ms;
      if (present && now - found.last_access_ms > SOURCE_TOUCH_MS) {
        kiln_status_free(kiln_index_source_touch(index, hex.text, now));
        touched = now;
      }
      if (!gs) kiln_index_source_deinit(&found);
      kiln_status_free(gs);
      release(cache, index);
      if (present) {
        source_memo_store(cache, &hex, touched, mono);
        if (out_digest) *out_digest = hex;
        return NULL;
      }
    }
  }
  kiln_blob_check_t check;
  KILN_RETURN_IF_ERROR(put_blob(cache, &computed, data, len, &digest, &check, &stored));
  kiln_status_t st = NULL;
  uint64_t size = len;
  kiln_digest_hex_t hex;
  kiln_digest_to_hex(&digest, &hex);
  kiln_index_t *index = NULL;
  st = index_source(cache, hex.text, semantic_digest, name, format, size, stored, &check, &index);
  release(cache, index);
  /* Remembered while the blob is still in use (no removal can slip in between). */
  if (!st) source_memo_store(cache, &hex, now_ms(cache), kiln_time_monotonic_ms());
  in_use_remove(cache, &digest);
  if (!st && out_digest) *out_digest = hex;
  return st;
}

kiln_status_t kiln_cache_source_get(kiln_cache_t *cache, const char *digest,
                                    kiln_index_source_t *out_record) {
  memset(out_record, 0, sizeof *out_record);
  kiln_digest_t d;
  if (!digest || !kiln_digest_from_hex(digest, &d)) {
    return KILN_STATUS(KILN_STATUS_INVALID_ARGUMENT, "source digest '%s' is not 64 lowercase hex characters",
                       digest ? digest : "");
  }
  kiln_index_t *index = NULL;
  KILN_RETURN_IF_ERROR(acquire(cache, &index));
  kiln_status_t st = kiln_index_source_get(index, digest, out_record);
  if (!st && !kiln_blobstore_contains(cache->blobs, &d, NULL)) {
    /* Removed behind our back: heal the index, report it missing. */
    kiln_status_free(drop_digest(cache, index, digest, NULL, now_ms(cache), NULL));
    kiln_index_source_deinit(out_record);
    st = KILN_STATUS(KILN_STATUS_NOT_FOUND, "source %s: its blob is missing", digest);
  } else if (kiln_status_code(st) == KILN_STATUS_NOT_FOUND) {
    kiln_status_free(st);
    st = KILN_STATUS(KILN_STATUS_NOT_FOUND,
                     "no source with digest %s in the cache (never uploaded, evicted or "
                     "quarantined)",
                     digest);
  }
  release(cache, index);
  return st;
}

kiln_status_t kiln_cache_source_key_digest(kiln_cache_t *cache, const char *digest, kiln_digest_hex_t *out) {
  kiln_index_source_t rec;
  kiln_status_t st = kiln_cache_source_get(cache, digest, &rec);
  if (kiln_status_code(st) == KILN_STATUS_NOT_FOUND) {
    kiln_status_free(st);
    snprintf(out->text, sizeof out->text, "%s", digest); /* already a key digest, or unknown */
    return NULL;
  }
  KILN_RETURN_IF_ERROR(st);
  if (rec.semantic_digest[0]) {
    memcpy(out->text, rec.semantic_digest, sizeof out->text);
  } else {
    /* A row from before kiln recorded it: from the bytes, and recorded now. */
    void *data = NULL;
    size_t len = 0;
    st = kiln_cache_get_blob(cache, digest, &data, &len);
    if (!st) {
      kiln_mlir_text_digest(data, len, out);
      kiln_digest_hex_t again;
      kiln_status_free(
          kiln_cache_source_put(cache, data, len, digest, rec.name, rec.format, out->text, &again));
    }
    kiln_free(data);
  }
  kiln_index_source_deinit(&rec);
  return st;
}

/* ---- source uploads ---- */

struct kiln_cache_upload_s {
  kiln_cache_t *cache;
  kiln_blob_writer_t *writer;
  kiln_digest_t expected;
  kiln_digest_hex_t expected_hex;
  uint64_t size; /* declared */
  uint64_t received;
};

kiln_status_t kiln_cache_source_upload_begin(kiln_cache_t *cache, const char *expected_digest, uint64_t size,
                                             kiln_cache_upload_t **out_upload) {
  *out_upload = NULL;
  kiln_digest_t expected;
  if (!expected_digest || !kiln_digest_from_hex(expected_digest, &expected)) {
    return KILN_STATUS(KILN_STATUS_INVALID_ARGUMENT, "source digest '%s' is not 64 lowercase hex characters",
                       expected_digest ? expected_digest : "");
  }
  if (size == 0) {
    return KILN_STATUS(KILN_STATUS_INVALID_ARGUMENT, "source %s: size 0; a source has at least one byte",
                       expected_digest);
  }
  kiln_blob_writer_t *writer = NULL;
  KILN_RETURN_IF_ERROR(kiln_blob_writer_begin(cache->blobs, &expected, &writer));
  kiln_cache_upload_t *u = kiln_calloc(1, sizeof *u);
  u->cache = cache;
  u->writer = writer;
  u->expected = expected;
  kiln_digest_to_hex(&expected, &u->expected_hex);
  u->size = size;
  *out_upload = u;
  return NULL;
}

kiln_status_t kiln_cache_source_upload_write(kiln_cache_upload_t *upload, const void *data, size_t len) {
  if (len > upload->size - upload->received) {
    return KILN_STATUS(KILN_STATUS_INVALID_ARGUMENT,
                       "source %s: more bytes than the declared size_bytes %llu (at least "
                       "%llu received); send exactly size_bytes bytes",
                       upload->expected_hex.text, (unsigned long long)upload->size,
                       (unsigned long long)(upload->received + len));
  }
  KILN_RETURN_IF_ERROR(kiln_blob_writer_write(upload->writer, data, len));
  upload->received += len;
  return NULL;
}

kiln_status_t kiln_cache_source_upload_commit(kiln_cache_upload_t *upload, const char *name, int format,
                                              const char *semantic_digest, kiln_index_source_t *out_record) {
  if (out_record) memset(out_record, 0, sizeof *out_record);
  kiln_cache_t *cache = upload->cache;
  kiln_digest_hex_t hex = upload->expected_hex;
  if (upload->received != upload->size) {
    kiln_status_t st =
        KILN_STATUS(KILN_STATUS_INVALID_ARGUMENT,
                    "source %s: received %llu bytes but size_bytes says %llu; send exactly size_bytes bytes",
                    hex.text, (unsigned long long)upload->received, (unsigned long long)upload->size);
    kiln_cache_source_upload_abort(upload);
    return st;
  }
  /* In the in-use set from before the blob is visible until its row is in, so
   * eviction and verify can neither remove the new blob nor an identical one
   * already stored (which the commit then keeps instead of ours). */
  in_use_add(cache, &upload->expected);
  uint64_t stored = 0;
  kiln_blob_check_t check;
  kiln_status_t st = kiln_blob_writer_commit(upload->writer, NULL, &check, NULL, &stored);
  upload->writer = NULL;
  uint64_t size = upload->size;
  kiln_free(upload);
  kiln_digest_t d;
  kiln_digest_from_hex(hex.text, &d);
  if (st) {
    in_use_remove(cache, &d);
    return kiln_status_annotate(st, "source upload");
  }
  kiln_index_t *index = NULL;
  st = index_source(cache, hex.text, semantic_digest, name, format, size, stored, &check, &index);
  if (!st && out_record) st = kiln_index_source_get(index, hex.text, out_record);
  in_use_remove(cache, &d);
  /* Not indexed: take the blob back unless a row (a concurrent upload) names it,
   * so a failed upload leaves nothing behind. */
  if (st && index) remove_if_unreferenced(cache, index, hex.text);
  release(cache, index);
  if (st) return kiln_status_annotate(st, "cannot index source %s", hex.text);
  return NULL;
}

void kiln_cache_source_upload_abort(kiln_cache_upload_t *upload) {
  if (!upload) return;
  kiln_blob_writer_abort(upload->writer);
  kiln_free(upload);
}

/* ---- maintenance ---- */

kiln_status_t kiln_cache_stats(kiln_cache_t *cache, kiln_cache_stats_t *out_stats) {
  memset(out_stats, 0, sizeof *out_stats);
  kiln_index_t *index = NULL;
  KILN_RETURN_IF_ERROR(acquire(cache, &index));
  kiln_status_t st = flush_hits(cache, index);
  if (!st) st = kiln_index_totals(index, &out_stats->totals);
  out_stats->schema_version = kiln_index_schema_version(index);
  release(cache, index);
  if (!st) {
    pthread_mutex_lock(&cache->lock);
    cache->last_totals = out_stats->totals;
    pthread_mutex_unlock(&cache->lock);
  }
  out_stats->capacity_bytes = cache->options.capacity_bytes;
  pthread_mutex_lock(&cache->lock);
  out_stats->hits = cache->hits;
  out_stats->misses = cache->misses;
  out_stats->evictions = cache->evictions;
  out_stats->quarantined = cache->quarantined;
  out_stats->bytes_served = cache->bytes_served;
  pthread_mutex_unlock(&cache->lock);
  return st;
}

void kiln_cache_counters(kiln_cache_t *cache, kiln_cache_stats_t *out_stats) {
  memset(out_stats, 0, sizeof *out_stats);
  out_stats->capacity_bytes = cache->options.capacity_bytes;
  pthread_mutex_lock(&cache->lock);
  out_stats->totals = cache->last_totals;
  out_stats->schema_version = cache->schema_version;
  out_stats->hits = cache->hits;
  out_stats->misses = cache->misses;
  out_stats->evictions = cache->evictions;
  out_stats->quarantined = cache->quarantined;
  out_stats->bytes_served = cache->bytes_served;
  pthread_mutex_unlock(&cache->lock);
}

kiln_status_t kiln_cache_verify(kiln_cache_t *cache, bool dry_run, bool (*should_stop)(void *),
                                void *stop_user, kiln_cache_verify_report_t *out_report) {
  memset(out_report, 0, sizeof *out_report);
  kiln_index_t *index = NULL;
  KILN_RETURN_IF_ERROR(acquire(cache, &index));
  kiln_status_t flushed = flush_hits(cache, index);
  if (flushed) {
    release(cache, index);
    return flushed;
  }
  /* The index first: a damaged one is reported, and nothing is repaired from it. */
  char *problem = NULL;
  kiln_status_t checked = kiln_index_check_integrity(index, true, &problem);
  if (checked || problem) {
    release(cache, index);
    if (checked) return checked;
    scan_t damaged;
    memset(&damaged, 0, sizeof damaged);
    add_problem(&damaged, KILN_CACHE_PROBLEM_DAMAGED_INDEX, NULL, false,
                "%s fails SQLite's integrity check (%s); nothing was checked or repaired from it: restore it "
                "from a backup, or move the cache folder aside",
                cache->db_path, problem);
    kiln_free(problem);
    *out_report = damaged.report;
    return NULL;
  }
  scan_t scan;
  memset(&scan, 0, sizeof scan);
  scan.cache = cache;
  scan.index = index;
  scan.dry_run = dry_run;
  scan.check_content = true;
  scan.should_stop = should_stop;
  scan.stop_user = stop_user;
  kiln_status_t st = scan_store(&scan);
  release(cache, index);
  scan_deinit(&scan);
  if (st) {
    kiln_cache_verify_report_deinit(&scan.report);
    return st;
  }
  *out_report = scan.report;
  return NULL;
}

void kiln_cache_verify_report_deinit(kiln_cache_verify_report_t *report) {
  for (size_t i = 0; i < report->n_problems; i++) kiln_free(report->problems[i].detail);
  kiln_free(report->problems);
  memset(report, 0, sizeof *report);
}

static uint64_t stored_bytes(const kiln_index_totals_t *t) {
  return t->artifact_stored_bytes + t->source_stored_bytes;
}

/* Removes blob `hex` if no row names it any more and nobody reads it; returns the
 * bytes freed. */
static uint64_t remove_if_unreferenced(kiln_cache_t *cache, kiln_index_t *index, const char *hex) {
  bool referenced = true;
  kiln_status_t st = kiln_index_digest_referenced(index, hex, &referenced);
  kiln_digest_t d;
  if (st || referenced || !kiln_digest_from_hex(hex, &d)) {
    kiln_status_free(st);
    return 0;
  }
  uint64_t freed = 0;
  remove_unless_in_use(cache, index, &d, &freed);
  return freed;
}

/* Evicts one row (a source's when `source`, else an artifact's) unless its blob is
 * being read, then frees the blob if nothing names it any more. A row pinned or
 * removed by someone else since the LRU query is left alone (*out_evicted false). */
static KILN_MUST_USE kiln_status_t evict_row(kiln_cache_t *cache, kiln_index_t *index, bool source,
                                             const char *row_key, const char *blob_digest,
                                             kiln_cache_gc_report_t *report, uint64_t *stored,
                                             bool *out_evicted) {
  *out_evicted = false;
  kiln_digest_t d;
  if (kiln_digest_from_hex(blob_digest, &d) && in_use(cache, &d)) return NULL;
  memo_invalidate(cache);
  KILN_RETURN_IF_ERROR(source ? kiln_index_source_evict(index, row_key, out_evicted)
                              : kiln_index_artifact_evict(index, row_key, out_evicted));
  if (!*out_evicted) return NULL;
  if (source)
    report->sources_evicted++;
  else
    report->artifacts_evicted++;
  uint64_t freed = remove_if_unreferenced(cache, index, blob_digest);
  report->bytes_freed += freed;
  *stored = freed > *stored ? 0 : *stored - freed;
  return NULL;
}

kiln_status_t kiln_cache_gc(kiln_cache_t *cache, uint64_t max_bytes, kiln_cache_gc_report_t *out_report) {
  memset(out_report, 0, sizeof *out_report);
  if (max_bytes == 0) max_bytes = cache->options.capacity_bytes;
  if (max_bytes == 0) {
    return KILN_STATUS(KILN_STATUS_INVALID_ARGUMENT,
                       "no size to collect down to: give a maximum, or configure a cache capacity");
  }
  kiln_index_t *index = NULL;
  KILN_RETURN_IF_ERROR(acquire(cache, &index));
  kiln_index_totals_t totals;
  kiln_status_t st = flush_hits(cache, index); /* LRU order needs the latest accesses */
  if (!st) st = kiln_index_totals(index, &totals);
  uint64_t stored = st ? 0 : stored_bytes(&totals);
  /* Artifacts first, least recently used first; then sources nothing needs. */
  bool progress = true;
  while (!st && stored > max_bytes && progress) {
    progress = false;
    kiln_index_artifact_t *recs = NULL;
    size_t n = 0;
    st = kiln_index_artifact_lru(index, GC_BATCH, &recs, &n);
    for (size_t i = 0; !st && i < n && stored > max_bytes; i++) {
      bool evicted = false;
      st = evict_row(cache, index, false, recs[i].cache_key, recs[i].artifact_digest, out_report, &stored,
                     &evicted);
      progress = progress || evicted;
    }
    kiln_index_artifacts_free(recs, n);
  }
  progress = true;
  while (!st && stored > max_bytes && progress) {
    progress = false;
    kiln_index_source_t *recs = NULL;
    size_t n = 0;
    st = kiln_index_source_lru(index, GC_BATCH, &recs, &n);
    for (size_t i = 0; !st && i < n && stored > max_bytes; i++) {
      bool evicted = false;
      st = evict_row(cache, index, true, recs[i].digest, recs[i].digest, out_report, &stored, &evicted);
      progress = progress || evicted;
    }
    kiln_index_sources_free(recs, n);
  }
  if (!st) {
    st = kiln_index_totals(index, &totals);
    if (!st) {
      out_report->bytes_stored = stored_bytes(&totals);
      pthread_mutex_lock(&cache->lock);
      cache->last_totals = totals;
      pthread_mutex_unlock(&cache->lock);
    }
    out_report->target_unreachable = out_report->bytes_stored > max_bytes;
  }
  release(cache, index);
  count(cache, &cache->evictions, out_report->artifacts_evicted + out_report->sources_evicted);
  return st;
}
