/* The blob store: content-addressed files, placed atomically, verified on every read.
 *
 * Writing. A writer owns one file DIR/tmp/blob-XXXXXX (mkostemp) and hashes every
 * byte the caller hands it, before any compression, with both SHA-256 (the name)
 * and XXH3-128 (the check), in 64 KiB pieces so that each piece is still in the
 * CPU's cache for the second hash. Commit checks the digest against the expected
 * one, skips all further work when the blob is already stored, produces the final
 * bytes in the tmp file, fsyncs it, renames it to
 * blobs/<aa>/<digest>[.zst] and fsyncs the shard directory. Any failure (ENOSPC
 * included) removes the tmp file(s) at once, so a failed writer holds no disk.
 * Open creates all 256 shard directories and fsyncs blobs/ once, so no commit
 * depends on another writer's not-yet-synced mkdir; a shard deleted behind our back
 * is recreated (and blobs/ fsynced) by the commit that finds it missing.
 *
 * Compression (AUTO). Every stored .zst file is exactly one zstd frame whose header
 * records the uncompressed size; zstd only writes that field when it knows the size
 * before the first byte, so a writer never streams its input straight into zstd.
 * Instead:
 *   SAMPLING   the first 64 KiB are buffered in memory. At 64 KiB (or at commit,
 *              if the blob is smaller) they are compressed with ZSTD_compressCCtx;
 *              if they shrink to at most compress_max_ratio of their size the
 *              writer goes on BUFFERING, otherwise it writes them out and is RAW.
 *   BUFFERING  the blob is kept in memory, up to MEMORY_MAX_BYTES (8 MiB); at commit
 *              it is compressed in one go with its size pledged. A blob that
 *              outgrows the limit is spilled: what is buffered is written raw to the
 *              tmp file, the writer turns RAW with compress_at_commit set, and commit
 *              compresses the raw tmp file into a second tmp file (size pledged),
 *              which replaces it. Large blobs thus cost one extra sequential pass
 *              through the page cache instead of unbounded memory per writer.
 *   RAW        bytes go through a 128 KiB staging buffer into the tmp file.
 * Blobs under compress_min_bytes are stored as is whatever the sample says. A blob
 * smaller than the sample is compressed once: the sample's frame is the blob's.
 *
 * Reading. A reader opens <digest>, else <digest>.zst, hashes everything it returns
 * and compares at the end; the read that would return 0 returns DATA_LOSS instead
 * when the hash differs. Given the blob's check it hashes with XXH3-128 only;
 * without, with SHA-256 against the name plus XXH3-128 to hand the check to its
 * caller (the cache records it, so only a blob's first read pays for SHA-256).
 * verify always takes the SHA-256 path. A .zst file must hold exactly one frame
 * with a recorded size: a bad header fails the open, a truncated frame or
 * trailing bytes fail a read, all as DATA_LOSS.
 *
 * At most one name per digest: a commit whose digest is already stored (either
 * name) discards its copy. Two writers racing on the same digest with different
 * choices (one raw, one .zst, e.g. two stores with different options) both rename;
 * whoever then sees both names removes the .zst one, so the raw file wins and the
 * blob never disappears.
 *
 * remove does not fsync: a removed blob that comes back after a crash is an
 * orphan, which repair collects; a quarantine is fsynced in both directories.
 * Open removes everything in tmp/, so only one process may use a store directory
 * at a time (the daemon's state-directory lock guarantees it).
 */
#include "cache/blobstore.h"

#include <dirent.h>
#include <pthread.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/types.h>
#include <unistd.h>
#include <xxhash.h>
#ifdef KILN_HAVE_XXH_DISPATCH
/* On x86-64 libxxhash also exports XXH3 entry points that pick AVX2 or AVX-512
 * at run time; this header points the XXH3 calls below at them. The plain ones
 * are SSE2: 16 ms for 256 MiB here against 4 ms, on every blob a read verifies. */
#include <xxh_x86dispatch.h>
#endif
#include <zstd.h>

#include "base/alloc.h"
#include "base/buf.h"
#include "base/file.h"
#include "base/log.h"

enum {
  SAMPLE_BYTES = 64 * 1024,
  STAGE_BYTES = 128 * 1024,
  MEMORY_MAX_BYTES = 8 * 1024 * 1024,
  READ_CHUNK_BYTES = 128 * 1024,
  /* The most one kiln_blob_reader_read hands back: the check then hashes bytes
   * the read has just brought into the CPU's cache, not a 2 MiB buffer back from
   * memory (GetArtifact asks for 2 MiB chunks). */
  READ_PIECE_BYTES = 256 * 1024,
  /* Room after the store's directory for "/blobs/aa/<any file name>". */
  PATH_SLACK = 16 + NAME_MAX,
  /* Enough for any zstd frame header (ZSTD_FRAMEHEADERSIZE_MAX is 18). */
  FRAME_HEADER_PROBE = 32,
  /* Content is hashed by both hashes in pieces this big, so the second hash finds
   * each piece still in the CPU's L2 cache. */
  HASH_PIECE_BYTES = 64 * 1024,
};

static const size_t DEFAULT_MIN_BYTES = 4096;
static const double DEFAULT_MAX_RATIO = 0.85;
static const int DEFAULT_ZSTD_LEVEL = 3;

static const char ZST_SUFFIX[] = ".zst";

struct kiln_blobstore_s {
  char *blobs_dir;
  char *tmp_dir;
  char *quarantine_dir;
  kiln_blob_compression_t compression;
  size_t min_bytes;
  double max_ratio;
  int level;
};

/* ---- small helpers ---- */

typedef struct path_s {
  char s[PATH_MAX];
} path_t;

/* All store paths fit: open checked the directory's length against PATH_SLACK. */
static void path_format(path_t *out, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void path_format(path_t *out, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  int n = vsnprintf(out->s, sizeof out->s, fmt, ap);
  va_end(ap);
  if (n < 0 || (size_t)n >= sizeof out->s) abort(); /* unreachable after open's check */
}

static void blob_path(const kiln_blobstore_t *store, const kiln_digest_hex_t *hex, bool zst, path_t *out) {
  path_format(out, "%s/%.2s/%s%s", store->blobs_dir, hex->text, hex->text, zst ? ZST_SUFFIX : "");
}

static void shard_path(const kiln_blobstore_t *store, const kiln_digest_hex_t *hex, path_t *out) {
  path_format(out, "%s/%.2s", store->blobs_dir, hex->text);
}

static _Noreturn void out_of_memory(const char *what) {
  kiln_log(KILN_LOG_ERROR, "out_of_memory", "what=%s", what);
  abort();
}

/* ---- content hashes: SHA-256 (the name) and XXH3-128 (the check) ---- */

static XXH3_state_t *check_state_create(void) {
  XXH3_state_t *state = XXH3_createState();
  if (!state) out_of_memory("xxh3_state");
  XXH3_128bits_reset(state);
  return state;
}

static void check_state_finish(XXH3_state_t *state, kiln_blob_check_t *out_check) {
  XXH128_canonical_t canonical;
  XXH128_canonicalFromHash(&canonical, XXH3_128bits_digest(state));
  memcpy(out_check->bytes, canonical.digest, sizeof out_check->bytes);
}

/* Feeds `len` bytes to whichever of the two hashes is given (either may be NULL). */
static void hash_content(kiln_hasher_t *sha, XXH3_state_t *check, const void *data, size_t len) {
  const unsigned char *p = data;
  if (!sha || !check) {
    if (sha) kiln_hasher_update(sha, p, len);
    if (check && len) XXH3_128bits_update(check, p, len);
    return;
  }
  while (len > 0) {
    size_t n = len < HASH_PIECE_BYTES ? len : HASH_PIECE_BYTES;
    kiln_hasher_update(sha, p, n);
    XXH3_128bits_update(check, p, n);
    p += n;
    len -= n;
  }
}

void kiln_blob_check_of(const void *data, size_t len, kiln_blob_check_t *out_check) {
  XXH128_canonical_t canonical;
  XXH128_canonicalFromHash(&canonical, XXH3_128bits(data, len));
  memcpy(out_check->bytes, canonical.digest, sizeof out_check->bytes);
}

void kiln_blob_check_to_hex(const kiln_blob_check_t *check, char out_hex[KILN_BLOB_CHECK_HEX_LEN + 1]) {
  kiln_hex_encode(check->bytes, KILN_BLOB_CHECK_BYTES, out_hex);
}

static KILN_MUST_USE kiln_status_t write_all(int fd, const void *data, size_t len, const char *path) {
  const unsigned char *p = data;
  while (len > 0) {
    ssize_t n = write(fd, p, len);
    if (n < 0) {
      if (errno == EINTR) continue;
      return KILN_STATUS_ERRNO(errno, "cannot write blob file %s", path);
    }
    if (n == 0) return KILN_STATUS_ERRNO(EIO, "cannot write blob file %s", path);
    p += n;
    len -= (size_t)n;
  }
  return NULL;
}

/* read(2) that retries EINTR; returns bytes read, 0 at the end, -1 with errno. */
static ssize_t read_some(int fd, void *buf, size_t cap) {
  for (;;) {
    ssize_t n = read(fd, buf, cap);
    if (n >= 0 || errno != EINTR) return n;
  }
}

static KILN_MUST_USE kiln_status_t fsync_dir(const char *path) {
  int fd = open(path, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (fd < 0) return KILN_STATUS_ERRNO(errno, "cannot open directory %s to sync it", path);
  kiln_status_t status = NULL;
  /* Some filesystems cannot sync directories and say EINVAL; nothing more to do there. */
  if (fsync(fd) != 0 && errno != EINVAL) {
    status = KILN_STATUS_ERRNO(errno, "cannot sync directory %s", path);
  }
  close(fd);
  return status;
}

/* mkdir that accepts an existing directory; *created says whether it made one. */
static KILN_MUST_USE kiln_status_t make_dir(const char *path, bool *created) {
  *created = false;
  if (mkdir(path, 0700) == 0) {
    *created = true;
    return NULL;
  }
  int err = errno;
  if (err == EEXIST) {
    struct stat st;
    if (stat(path, &st) == 0 && S_ISDIR(st.st_mode)) return NULL;
    return KILN_STATUS(KILN_STATUS_FAILED_PRECONDITION,
                       "blob store path %s exists but is not a directory; move it away", path);
  }
  return KILN_STATUS_ERRNO(err, "cannot create blob store directory %s", path);
}

/* The parent of `path` (kiln_malloc'd), or NULL when it has no slash. */
static char *parent_of(const char *path) {
  char *parent = kiln_strdup(path);
  size_t len = strlen(parent);
  while (len > 1 && parent[len - 1] == '/') parent[--len] = '\0';
  char *slash = strrchr(parent, '/');
  if (!slash) {
    kiln_free(parent);
    return NULL;
  }
  slash[slash == parent ? 1 : 0] = '\0';
  return parent;
}

/* mkdir -p, fsyncing the parent of each directory it creates. */
static KILN_MUST_USE kiln_status_t make_dirs(const char *path) {
  bool created = false;
  kiln_status_t status = make_dir(path, &created);
  char *parent = parent_of(path);
  if (status && kiln_status_code(status) == KILN_STATUS_NOT_FOUND && parent && strcmp(parent, path) != 0) {
    kiln_status_free(status);
    status = make_dirs(parent);
    if (!status) status = make_dir(path, &created);
  }
  if (!status && created) status = fsync_dir(parent ? parent : ".");
  kiln_free(parent);
  return status;
}

/* Empties tmp/: whatever is there is a writer that never committed. */
static KILN_MUST_USE kiln_status_t clean_tmp(const char *tmp_dir, size_t *out_removed) {
  *out_removed = 0;
  DIR *d = opendir(tmp_dir);
  if (!d) return KILN_STATUS_ERRNO(errno, "cannot list blob tmp directory %s", tmp_dir);
  kiln_status_t status = NULL;
  struct dirent *e;
  while (!status && (e = readdir(d)) != NULL) {
    if (strcmp(e->d_name, ".") == 0 || strcmp(e->d_name, "..") == 0) continue;
    char *path = kiln_buf_sprintf("%s/%s", tmp_dir, e->d_name);
    status = kiln_file_tree_remove(path);
    kiln_free(path);
    if (!status) (*out_removed)++;
  }
  closedir(d);
  return status;
}

static bool is_hex_lower(char c) { return (c >= '0' && c <= '9') || (c >= 'a' && c <= 'f'); }

static bool is_shard_name(const char *name) {
  return is_hex_lower(name[0]) && is_hex_lower(name[1]) && name[2] == '\0';
}

/* Parses "<64 hex>" or "<64 hex>.zst". */
static bool parse_blob_name(const char *name, kiln_digest_t *out_digest, bool *out_zst) {
  size_t len = strlen(name);
  bool zst = len == KILN_DIGEST_HEX_LEN + sizeof ZST_SUFFIX - 1 &&
             strcmp(name + KILN_DIGEST_HEX_LEN, ZST_SUFFIX) == 0;
  if (len != KILN_DIGEST_HEX_LEN && !zst) return false;
  char hex[KILN_DIGEST_HEX_LEN + 1];
  memcpy(hex, name, KILN_DIGEST_HEX_LEN);
  hex[KILN_DIGEST_HEX_LEN] = '\0';
  if (!kiln_digest_from_hex(hex, out_digest)) return false;
  *out_zst = zst;
  return true;
}

/* Finds the stored file of a digest: true with its path, kind and stat. */
static bool find_blob(const kiln_blobstore_t *store, const kiln_digest_hex_t *hex, path_t *out_path,
                      bool *out_zst, struct stat *out_st) {
  for (int zst = 0; zst <= 1; zst++) {
    blob_path(store, hex, zst, out_path);
    if (stat(out_path->s, out_st) == 0 && S_ISREG(out_st->st_mode)) {
      *out_zst = zst;
      return true;
    }
  }
  return false;
}

/* ---- open / close ---- */

static KILN_MUST_USE kiln_status_t check_options(const kiln_blobstore_options_t *o) {
  if (o->compression != KILN_BLOB_COMPRESSION_OFF && o->compression != KILN_BLOB_COMPRESSION_AUTO) {
    return KILN_STATUS(KILN_STATUS_INVALID_ARGUMENT, "blob store compression %d is not OFF (0) or AUTO (1)",
                       (int)o->compression);
  }
  if (!isfinite(o->compress_max_ratio) || o->compress_max_ratio < 0) {
    return KILN_STATUS(KILN_STATUS_INVALID_ARGUMENT,
                       "blob store compress_max_ratio %g must be a positive fraction such as 0.85",
                       o->compress_max_ratio);
  }
  if (o->zstd_level != 0 && (o->zstd_level < ZSTD_minCLevel() || o->zstd_level > ZSTD_maxCLevel())) {
    return KILN_STATUS(KILN_STATUS_INVALID_ARGUMENT,
                       "blob store zstd_level %d is outside zstd's range %d..%d", o->zstd_level,
                       ZSTD_minCLevel(), ZSTD_maxCLevel());
  }
  return NULL;
}

void kiln_blobstore_close(kiln_blobstore_t *store) {
  if (!store) return;
  kiln_free(store->blobs_dir);
  kiln_free(store->tmp_dir);
  kiln_free(store->quarantine_dir);
  kiln_free(store);
}

kiln_status_t kiln_blobstore_open(const char *dir, const kiln_blobstore_options_t *options,
                                  kiln_blobstore_t **out_store) {
  *out_store = NULL;
  kiln_blobstore_options_t o = {0};
  if (options) o = *options;
  KILN_RETURN_IF_ERROR(check_options(&o));
  if (!dir || !*dir) {
    return KILN_STATUS(KILN_STATUS_INVALID_ARGUMENT, "blob store directory is empty; pass a path");
  }
  if (strlen(dir) + PATH_SLACK >= PATH_MAX) {
    return KILN_STATUS(KILN_STATUS_INVALID_ARGUMENT,
                       "blob store directory %s is too long (limit %d bytes); choose a shorter path", dir,
                       PATH_MAX - PATH_SLACK - 1);
  }

  kiln_blobstore_t *store = kiln_calloc(1, sizeof *store);
  store->blobs_dir = kiln_buf_sprintf("%s/blobs", dir);
  store->tmp_dir = kiln_buf_sprintf("%s/tmp", dir);
  store->quarantine_dir = kiln_buf_sprintf("%s/quarantine", dir);
  store->compression = o.compression;
  store->min_bytes = o.compress_min_bytes ? o.compress_min_bytes : DEFAULT_MIN_BYTES;
  store->max_ratio = o.compress_max_ratio > 0 ? o.compress_max_ratio : DEFAULT_MAX_RATIO;
  store->level = o.zstd_level ? o.zstd_level : DEFAULT_ZSTD_LEVEL;

  kiln_status_t status = make_dirs(dir);
  bool created_any = false;
  const char *const subdirs[] = {store->blobs_dir, store->tmp_dir, store->quarantine_dir};
  for (size_t i = 0; !status && i < sizeof subdirs / sizeof subdirs[0]; i++) {
    bool created = false;
    status = make_dir(subdirs[i], &created);
    created_any |= created;
  }
  if (!status && created_any) status = fsync_dir(dir);

  created_any = false;
  for (int i = 0; !status && i < 256; i++) {
    path_t shard;
    path_format(&shard, "%s/%02x", store->blobs_dir, i);
    bool created = false;
    status = make_dir(shard.s, &created);
    created_any |= created;
  }
  if (!status && created_any) status = fsync_dir(store->blobs_dir);

  size_t removed = 0;
  if (!status) status = clean_tmp(store->tmp_dir, &removed);
  if (status) {
    kiln_blobstore_close(store);
    return kiln_status_annotate(status, "cannot open blob store %s", dir);
  }
  if (removed > 0) {
    kiln_buf_t fields;
    kiln_buf_init(&fields);
    kiln_log_kv_str(&fields, "dir", store->tmp_dir);
    kiln_buf_appendf(&fields, " removed=%zu", removed);
    kiln_log_fields(KILN_LOG_INFO, "blobstore_tmp_cleaned", &fields);
    kiln_buf_deinit(&fields);
  }
  *out_store = store;
  return NULL;
}

/* ---- writing ---- */

typedef enum write_mode_e { MODE_SAMPLING, MODE_BUFFERING, MODE_RAW } write_mode_t;

struct kiln_blob_writer_s {
  kiln_blobstore_t *store;
  bool has_expected;
  kiln_digest_t expected;
  kiln_hasher_t *hasher;
  XXH3_state_t *check_state;
  bool hashed_elsewhere;      /* one-shot put: digest and check are computed on another thread */
  bool synced;                /* the tmp file already holds its final bytes, fsynced */
  kiln_digest_t given_digest; /* ...and handed over before commit */
  kiln_blob_check_t given_check;
  uint64_t total; /* uncompressed bytes received */

  int fd;     /* the tmp file; -1 once closed */
  path_t tmp; /* its path; empty once it is gone or renamed into place */
  write_mode_t mode;
  bool compress_at_commit; /* RAW after a spill */
  unsigned char *buf;      /* sample, whole blob or staging, by mode */
  size_t len;
  size_t cap;
  ZSTD_CCtx *cctx; /* made on first use */

  /* A failed writer keeps the failure for later calls; its tmp file is gone. */
  kiln_status_code_t failed_code;
  char *failed_message;
};

static void discard_tmp(kiln_blob_writer_t *w) {
  if (w->fd >= 0) close(w->fd);
  w->fd = -1;
  if (w->tmp.s[0]) unlink(w->tmp.s);
  w->tmp.s[0] = '\0';
}

static KILN_MUST_USE kiln_status_t open_tmp(const kiln_blobstore_t *store, path_t *out_path, int *out_fd) {
  path_format(out_path, "%s/blob-XXXXXX", store->tmp_dir);
  int fd = mkostemp(out_path->s, O_CLOEXEC);
  if (fd < 0) {
    int err = errno;
    out_path->s[0] = '\0';
    return KILN_STATUS_ERRNO(err, "cannot create a temporary blob file in %s", store->tmp_dir);
  }
  *out_fd = fd;
  return NULL;
}

static void writer_free(kiln_blob_writer_t *w) {
  discard_tmp(w);
  kiln_hasher_destroy(w->hasher);
  XXH3_freeState(w->check_state);
  ZSTD_freeCCtx(w->cctx);
  kiln_free(w->buf);
  kiln_free(w->failed_message);
  kiln_free(w);
}

/* Records the failure, frees the disk it held, and returns `status`. */
static KILN_MUST_USE kiln_status_t writer_fail(kiln_blob_writer_t *w, kiln_status_t status) {
  if (!w->failed_message) {
    w->failed_code = kiln_status_code(status);
    w->failed_message = kiln_strdup(kiln_status_message(status));
  }
  discard_tmp(w);
  return status;
}

static ZSTD_CCtx *writer_cctx(kiln_blob_writer_t *w) {
  if (!w->cctx && !(w->cctx = ZSTD_createCCtx())) out_of_memory("zstd_cctx");
  return w->cctx;
}

static void buf_reserve(kiln_blob_writer_t *w, size_t need) {
  if (need <= w->cap) return;
  size_t cap = w->cap ? w->cap : STAGE_BYTES;
  while (cap < need) cap *= 2;
  w->buf = kiln_realloc(w->buf, cap);
  w->cap = cap;
}

static void buf_append(kiln_blob_writer_t *w, const void *data, size_t len) {
  buf_reserve(w, w->len + len);
  memcpy(w->buf + w->len, data, len);
  w->len += len;
}

static KILN_MUST_USE kiln_status_t buf_flush(kiln_blob_writer_t *w) {
  kiln_status_t status = write_all(w->fd, w->buf, w->len, w->tmp.s);
  w->len = 0;
  return status;
}

/* Compresses `len` bytes with the store's level. True when the result is at most
 * max_ratio of the input; then, if out_frame is given, the frame is handed over. */
static bool sample_pays(kiln_blob_writer_t *w, const void *src, size_t len, unsigned char **out_frame,
                        size_t *out_frame_len) {
  if (len == 0) return false;
  size_t bound = ZSTD_compressBound(len);
  unsigned char *dst = kiln_malloc(bound);
  size_t n = ZSTD_compressCCtx(writer_cctx(w), dst, bound, src, len, w->store->level);
  bool pays = !ZSTD_isError(n) && (double)n <= w->store->max_ratio * (double)len;
  if (pays && out_frame) {
    *out_frame = dst;
    *out_frame_len = n;
  } else {
    kiln_free(dst);
  }
  return pays;
}

kiln_status_t kiln_blob_writer_begin(kiln_blobstore_t *store, const kiln_digest_t *expected,
                                     kiln_blob_writer_t **out_writer) {
  *out_writer = NULL;
  kiln_blob_writer_t *w = kiln_calloc(1, sizeof *w);
  w->store = store;
  w->fd = -1;
  if (expected) {
    w->has_expected = true;
    w->expected = *expected;
  }
  kiln_status_t status = open_tmp(store, &w->tmp, &w->fd);
  if (status) {
    writer_free(w);
    return status;
  }
  w->hasher = kiln_hasher_create();
  w->check_state = check_state_create();
  w->mode = store->compression == KILN_BLOB_COMPRESSION_AUTO ? MODE_SAMPLING : MODE_RAW;
  buf_reserve(w, w->mode == MODE_SAMPLING ? SAMPLE_BYTES : STAGE_BYTES);
  *out_writer = w;
  return NULL;
}

kiln_status_t kiln_blob_writer_write(kiln_blob_writer_t *w, const void *data, size_t len) {
  if (w->failed_message) {
    return KILN_STATUS(w->failed_code, "blob writer failed earlier: %s", w->failed_message);
  }
  if (len == 0) return NULL;
  if (!data) {
    return writer_fail(
        w, KILN_STATUS(KILN_STATUS_INVALID_ARGUMENT, "blob write of %zu bytes from a NULL buffer", len));
  }
  if (!w->hashed_elsewhere) hash_content(w->hasher, w->check_state, data, len);
  w->total += len;
  const unsigned char *p = data;
  kiln_status_t status = NULL;
  while (len > 0 && !status) {
    switch (w->mode) {
      case MODE_SAMPLING: {
        size_t take = SAMPLE_BYTES - w->len < len ? SAMPLE_BYTES - w->len : len;
        buf_append(w, p, take);
        p += take;
        len -= take;
        if (w->len == SAMPLE_BYTES) {
          if (sample_pays(w, w->buf, w->len, NULL, NULL)) {
            w->mode = MODE_BUFFERING;
          } else {
            w->mode = MODE_RAW;
            status = buf_flush(w);
          }
        }
        break;
      }
      case MODE_BUFFERING:
        if (w->len + len <= MEMORY_MAX_BYTES) {
          buf_append(w, p, len);
          len = 0;
        } else {
          /* Spill: keep going raw, compress from the tmp file at commit. */
          status = buf_flush(w);
          kiln_free(w->buf);
          w->buf = NULL;
          w->cap = 0;
          buf_reserve(w, STAGE_BYTES);
          w->mode = MODE_RAW;
          w->compress_at_commit = true;
        }
        break;
      case MODE_RAW:
        if (w->len + len <= w->cap) {
          buf_append(w, p, len);
        } else {
          status = buf_flush(w);
          if (!status && len >= w->cap) {
            status = write_all(w->fd, p, len, w->tmp.s);
          } else if (!status) {
            buf_append(w, p, len);
          }
        }
        len = 0;
        break;
    }
  }
  return status ? writer_fail(w, status) : NULL;
}

void kiln_blob_writer_abort(kiln_blob_writer_t *writer) {
  if (writer) writer_free(writer);
}

/* Feeds `in` to the writer's compression context and writes what comes out.
 * With ZSTD_e_end it finishes the frame; otherwise it consumes all of `in`. */
static KILN_MUST_USE kiln_status_t compress_feed(kiln_blob_writer_t *w, ZSTD_inBuffer *in,
                                                 ZSTD_EndDirective end, unsigned char *out, size_t out_cap,
                                                 int out_fd, const char *out_path) {
  for (;;) {
    ZSTD_outBuffer ob = {out, out_cap, 0};
    size_t remaining = ZSTD_compressStream2(w->cctx, &ob, in, end);
    if (ZSTD_isError(remaining)) {
      return KILN_STATUS(KILN_STATUS_INTERNAL, "zstd cannot compress blob file %s: %s", out_path,
                         ZSTD_getErrorName(remaining));
    }
    KILN_RETURN_IF_ERROR(write_all(out_fd, out, ob.pos, out_path));
    if (end == ZSTD_e_end ? remaining == 0 : in->pos == in->size) return NULL;
  }
}

static KILN_MUST_USE kiln_status_t compress_start(kiln_blob_writer_t *w) {
  ZSTD_CCtx *cctx = writer_cctx(w);
  size_t rc = ZSTD_CCtx_reset(cctx, ZSTD_reset_session_and_parameters);
  if (!ZSTD_isError(rc)) rc = ZSTD_CCtx_setParameter(cctx, ZSTD_c_compressionLevel, w->store->level);
  if (!ZSTD_isError(rc)) rc = ZSTD_CCtx_setParameter(cctx, ZSTD_c_contentSizeFlag, 1);
  /* The pledge is what puts the size into the frame header. */
  if (!ZSTD_isError(rc)) rc = ZSTD_CCtx_setPledgedSrcSize(cctx, w->total);
  if (ZSTD_isError(rc)) {
    return KILN_STATUS(KILN_STATUS_INTERNAL, "zstd cannot start a frame for %s: %s", w->tmp.s,
                       ZSTD_getErrorName(rc));
  }
  return NULL;
}

/* BUFFERING at commit: the whole blob is in w->buf. */
static KILN_MUST_USE kiln_status_t compress_buffer(kiln_blob_writer_t *w) {
  KILN_RETURN_IF_ERROR(compress_start(w));
  size_t out_cap = ZSTD_CStreamOutSize();
  unsigned char *out = kiln_malloc(out_cap);
  ZSTD_inBuffer in = {w->buf, w->len, 0};
  kiln_status_t status = compress_feed(w, &in, ZSTD_e_end, out, out_cap, w->fd, w->tmp.s);
  kiln_free(out);
  return status;
}

/* RAW after a spill, at commit: compresses the raw tmp file into a new tmp file,
 * which then replaces it as the writer's file. */
static KILN_MUST_USE kiln_status_t compress_spilled(kiln_blob_writer_t *w) {
  KILN_RETURN_IF_ERROR(compress_start(w));
  path_t out_path;
  int out_fd = -1;
  KILN_RETURN_IF_ERROR(open_tmp(w->store, &out_path, &out_fd));
  size_t out_cap = ZSTD_CStreamOutSize();
  unsigned char *out = kiln_malloc(out_cap);
  kiln_status_t status = NULL;
  if (lseek(w->fd, 0, SEEK_SET) != 0) {
    status = KILN_STATUS_ERRNO(errno, "cannot rewind blob file %s", w->tmp.s);
  }
  while (!status) {
    ssize_t n = read_some(w->fd, w->buf, w->cap);
    if (n < 0) {
      status = KILN_STATUS_ERRNO(errno, "cannot read back blob file %s", w->tmp.s);
      break;
    }
    ZSTD_inBuffer in = {w->buf, (size_t)n, 0};
    status = compress_feed(w, &in, n == 0 ? ZSTD_e_end : ZSTD_e_continue, out, out_cap, out_fd, out_path.s);
    if (n == 0) break;
  }
  kiln_free(out);
  if (status) {
    close(out_fd);
    unlink(out_path.s);
    return status;
  }
  close(w->fd);
  unlink(w->tmp.s);
  w->fd = out_fd;
  w->tmp = out_path;
  return NULL;
}

/* Writes the final bytes into the tmp file; *out_zst says which name they get. */
static KILN_MUST_USE kiln_status_t finish_content(kiln_blob_writer_t *w, bool *out_zst) {
  const kiln_blobstore_t *store = w->store;
  *out_zst = false;
  switch (w->mode) {
    case MODE_SAMPLING: {
      unsigned char *frame = NULL;
      size_t frame_len = 0;
      if (w->total >= store->min_bytes && sample_pays(w, w->buf, w->len, &frame, &frame_len)) {
        /* The sample was the whole blob: its frame (size recorded) is the blob. */
        kiln_status_t status = write_all(w->fd, frame, frame_len, w->tmp.s);
        kiln_free(frame);
        *out_zst = true;
        return status;
      }
      return buf_flush(w);
    }
    case MODE_BUFFERING:
      if (w->total < store->min_bytes) return buf_flush(w);
      *out_zst = true;
      return compress_buffer(w);
    case MODE_RAW:
      KILN_RETURN_IF_ERROR(buf_flush(w));
      if (!w->compress_at_commit || w->total < store->min_bytes) return NULL;
      *out_zst = true;
      return compress_spilled(w);
  }
  return NULL;
}

/* fsync, rename into place, settle a raw/.zst race, fsync the shard. */
static KILN_MUST_USE kiln_status_t place(kiln_blob_writer_t *w, const kiln_digest_hex_t *hex, bool zst,
                                         uint64_t *out_stored_size) {
  const kiln_blobstore_t *store = w->store;
  if (!w->synced && fsync(w->fd) != 0) {
    return KILN_STATUS_ERRNO(errno, "cannot sync blob file %s", w->tmp.s);
  }
  struct stat st;
  if (fstat(w->fd, &st) != 0) return KILN_STATUS_ERRNO(errno, "cannot stat blob file %s", w->tmp.s);
  int fd = w->fd;
  w->fd = -1;
  if (close(fd) != 0 && errno != EINTR) {
    return KILN_STATUS_ERRNO(errno, "cannot close blob file %s", w->tmp.s);
  }
  *out_stored_size = (uint64_t)st.st_size;

  path_t target, other, shard;
  blob_path(store, hex, zst, &target);
  blob_path(store, hex, !zst, &other);
  shard_path(store, hex, &shard);
  if (rename(w->tmp.s, target.s) != 0) {
    if (errno != ENOENT) return KILN_STATUS_ERRNO(errno, "cannot move blob file into %s", target.s);
    /* The shard is gone (open made it); make it again, durably. */
    bool created = false;
    KILN_RETURN_IF_ERROR(make_dir(shard.s, &created));
    KILN_RETURN_IF_ERROR(fsync_dir(store->blobs_dir));
    if (rename(w->tmp.s, target.s) != 0) {
      return KILN_STATUS_ERRNO(errno, "cannot move blob file into %s", target.s);
    }
  }
  w->tmp.s[0] = '\0'; /* no longer ours to remove */

  /* At most one name per digest: the raw file wins, see the design note. */
  struct stat other_st;
  if (stat(other.s, &other_st) == 0) {
    if (zst) {
      unlink(target.s);
      *out_stored_size = (uint64_t)other_st.st_size;
    } else {
      unlink(other.s);
    }
  }
  return fsync_dir(shard.s);
}

kiln_status_t kiln_blob_writer_commit(kiln_blob_writer_t *w, kiln_digest_t *out_digest,
                                      kiln_blob_check_t *out_check, uint64_t *out_size,
                                      uint64_t *out_stored_size) {
  if (out_digest) memset(out_digest, 0, sizeof *out_digest);
  if (out_check) memset(out_check, 0, sizeof *out_check);
  if (out_size) *out_size = 0;
  if (out_stored_size) *out_stored_size = 0;
  if (w->failed_message) {
    kiln_status_t status = KILN_STATUS(w->failed_code, "blob writer failed earlier: %s", w->failed_message);
    writer_free(w);
    return status;
  }
  kiln_digest_t digest;
  kiln_blob_check_t check;
  if (w->hashed_elsewhere) {
    digest = w->given_digest;
    check = w->given_check;
  } else {
    kiln_hasher_finish(w->hasher, &digest);
    check_state_finish(w->check_state, &check);
  }
  kiln_digest_hex_t hex;
  kiln_digest_to_hex(&digest, &hex);

  if (w->has_expected && !kiln_digest_equal(&digest, &w->expected)) {
    kiln_digest_hex_t want;
    kiln_digest_to_hex(&w->expected, &want);
    kiln_status_t status =
        KILN_STATUS(KILN_STATUS_INVALID_ARGUMENT,
                    "blob content hashes to %s but was sent as %s (%llu bytes); resend the exact bytes or "
                    "the right digest",
                    hex.text, want.text, (unsigned long long)w->total);
    writer_free(w);
    return status;
  }

  uint64_t total = w->total;
  uint64_t stored_size = 0;
  path_t existing;
  bool existing_zst = false;
  struct stat st;
  kiln_status_t status = NULL;
  if (find_blob(w->store, &hex, &existing, &existing_zst, &st)) {
    stored_size = (uint64_t)st.st_size; /* content addressing: the stored copy is ours */
  } else {
    bool zst = false;
    status = finish_content(w, &zst);
    if (!status) status = place(w, &hex, zst, &stored_size);
    if (status) status = kiln_status_annotate(status, "cannot store blob %s", hex.text);
  }
  writer_free(w);
  if (status) return status;
  if (out_digest) *out_digest = digest;
  if (out_check) *out_check = check;
  if (out_size) *out_size = total;
  if (out_stored_size) *out_stored_size = stored_size;
  return NULL;
}

/* One-shot puts of large blobs hash on a second thread while this one writes:
 * SHA-256 (about 1 GB/s per core) is as slow as a fast disk's write+fsync, and
 * the two are independent, so a put costs max(hash, write + fsync) instead of the
 * sum: a raw blob is written and fsynced before the hash is joined. The check
 * (XXH3-128, several times faster) rides along in the same pass. */
#define PARALLEL_HASH_MIN_BYTES (1u << 20)

typedef struct hash_job_s {
  const void *data;
  size_t len;
  kiln_digest_t digest;
  kiln_blob_check_t check;
} hash_job_t;

static void *hash_thread(void *arg) {
  hash_job_t *job = arg;
  kiln_hasher_t *sha = kiln_hasher_create();
  XXH3_state_t *check = check_state_create();
  hash_content(sha, check, job->data, job->len);
  kiln_hasher_finish(sha, &job->digest);
  check_state_finish(check, &job->check);
  kiln_hasher_destroy(sha);
  XXH3_freeState(check);
  return NULL;
}

kiln_status_t kiln_blobstore_put(kiln_blobstore_t *store, const void *data, size_t len,
                                 kiln_digest_t *out_digest, uint64_t *out_stored_size) {
  return kiln_blobstore_put_expected(store, data, len, NULL, out_digest, NULL, out_stored_size);
}

kiln_status_t kiln_blobstore_put_expected(kiln_blobstore_t *store, const void *data, size_t len,
                                          const kiln_digest_t *expected, kiln_digest_t *out_digest,
                                          kiln_blob_check_t *out_check, uint64_t *out_stored_size) {
  if (out_digest) memset(out_digest, 0, sizeof *out_digest);
  if (out_check) memset(out_check, 0, sizeof *out_check);
  if (out_stored_size) *out_stored_size = 0;
  if (len > 0 && !data) {
    return KILN_STATUS(KILN_STATUS_INVALID_ARGUMENT, "blob put of %zu bytes from a NULL buffer", len);
  }
  kiln_blob_writer_t *w = NULL;
  KILN_RETURN_IF_ERROR(kiln_blob_writer_begin(store, expected, &w));
  hash_job_t job = {data, len, {{0}}, {{0}}};
  pthread_t hasher;
  bool threaded = len >= PARALLEL_HASH_MIN_BYTES && pthread_create(&hasher, NULL, hash_thread, &job) == 0;
  w->hashed_elsewhere = threaded;
  kiln_status_t status = kiln_blob_writer_write(w, data, len);
  if (!status && threaded && w->mode == MODE_RAW && !w->compress_at_commit) {
    /* The bytes are final: make them durable while the hash is still running
     * (for a duplicate this sync is wasted, but so was the write). */
    status = buf_flush(w);
    if (!status && fsync(w->fd) != 0) {
      status = KILN_STATUS_ERRNO(errno, "cannot sync blob file %s", w->tmp.s);
    }
    w->synced = status == NULL;
  }
  if (threaded) {
    pthread_join(hasher, NULL);
    w->given_digest = job.digest;
    w->given_check = job.check;
  }
  if (status) {
    kiln_blob_writer_abort(w);
    return status;
  }
  return kiln_blob_writer_commit(w, out_digest, out_check, NULL, out_stored_size);
}

/* ---- reading ---- */

struct kiln_blob_reader_s {
  int fd;
  bool zst;
  path_t path;
  kiln_digest_t digest;
  kiln_hasher_t *hasher;     /* SHA-256; NULL when verifying by the check */
  XXH3_state_t *check_state; /* XXH3-128, always */
  bool by_check;             /* opened with the check: verify against it */
  kiln_blob_check_t check;   /* given, or computed at the end of a SHA-256 read */
  uint64_t size;
  uint64_t produced;

  ZSTD_DCtx *dctx;
  unsigned char *in_buf;
  ZSTD_inBuffer in;
  bool eof;        /* the file has no more bytes */
  bool frame_done; /* zstd finished the frame */

  bool verified;
  kiln_status_code_t failed_code;
  char *failed_message;
};

void kiln_blob_reader_close(kiln_blob_reader_t *r) {
  if (!r) return;
  if (r->fd >= 0) close(r->fd);
  kiln_hasher_destroy(r->hasher);
  XXH3_freeState(r->check_state);
  ZSTD_freeDCtx(r->dctx);
  kiln_free(r->in_buf);
  kiln_free(r->failed_message);
  kiln_free(r);
}

static KILN_MUST_USE kiln_status_t corrupt(const kiln_blob_reader_t *r, const char *what) {
  kiln_digest_hex_t hex;
  kiln_digest_to_hex(&r->digest, &hex);
  return KILN_STATUS(KILN_STATUS_DATA_LOSS, "blob %s at %s is corrupt: %s; quarantine it and rebuild",
                     hex.text, r->path.s, what);
}

static KILN_MUST_USE kiln_status_t reader_fail(kiln_blob_reader_t *r, kiln_status_t status) {
  if (!r->failed_message) {
    r->failed_code = kiln_status_code(status);
    r->failed_message = kiln_strdup(kiln_status_message(status));
  }
  return status;
}

static KILN_MUST_USE kiln_status_t read_zst_header(kiln_blob_reader_t *r) {
  unsigned char head[FRAME_HEADER_PROBE];
  ssize_t n;
  do {
    n = pread(r->fd, head, sizeof head, 0);
  } while (n < 0 && errno == EINTR);
  if (n < 0) return KILN_STATUS_ERRNO(errno, "cannot read blob file %s", r->path.s);
  unsigned long long size = ZSTD_getFrameContentSize(head, (size_t)n);
  if (size == ZSTD_CONTENTSIZE_ERROR) return corrupt(r, "no valid zstd frame header");
  if (size == ZSTD_CONTENTSIZE_UNKNOWN) return corrupt(r, "its zstd frame does not record a size");
  r->size = size;
  return NULL;
}

kiln_status_t kiln_blob_reader_open(kiln_blobstore_t *store, const kiln_digest_t *digest,
                                    const kiln_blob_check_t *check, kiln_blob_reader_t **out_reader) {
  *out_reader = NULL;
  kiln_digest_hex_t hex;
  kiln_digest_to_hex(digest, &hex);
  kiln_blob_reader_t *r = kiln_calloc(1, sizeof *r);
  r->digest = *digest;
  r->fd = -1;
  if (check) {
    r->by_check = true;
    r->check = *check;
  }
  kiln_status_t status = NULL;
  for (int zst = 0; zst <= 1 && r->fd < 0; zst++) {
    blob_path(store, &hex, zst, &r->path);
    r->fd = open(r->path.s, O_RDONLY | O_CLOEXEC);
    r->zst = zst;
    if (r->fd < 0 && errno != ENOENT) {
      status = KILN_STATUS_ERRNO(errno, "cannot open blob %s at %s", hex.text, r->path.s);
      break;
    }
  }
  if (!status && r->fd < 0) {
    status =
        KILN_STATUS(KILN_STATUS_NOT_FOUND, "blob %s is not in the store at %s", hex.text, store->blobs_dir);
  }
  struct stat st;
  if (!status && fstat(r->fd, &st) != 0) {
    status = KILN_STATUS_ERRNO(errno, "cannot stat blob %s at %s", hex.text, r->path.s);
  }
  if (!status && !S_ISREG(st.st_mode)) status = corrupt(r, "not a regular file");
  if (!status) {
    if (r->zst) {
      status = read_zst_header(r);
      if (!status && !(r->dctx = ZSTD_createDCtx())) out_of_memory("zstd_dctx");
      if (!status) r->in_buf = kiln_malloc(ZSTD_DStreamInSize());
    } else {
      r->size = (uint64_t)st.st_size;
    }
  }
  if (status) {
    kiln_blob_reader_close(r);
    return status;
  }
  if (!r->by_check) r->hasher = kiln_hasher_create();
  r->check_state = check_state_create();
  *out_reader = r;
  return NULL;
}

uint64_t kiln_blob_reader_size(const kiln_blob_reader_t *reader) { return reader->size; }

bool kiln_blob_reader_check(const kiln_blob_reader_t *reader, kiln_blob_check_t *out_check) {
  memset(out_check, 0, sizeof *out_check);
  if (!reader->verified) return false;
  *out_check = reader->check;
  return true;
}

/* The end of the content: compare what was hashed with the check, or with the
 * name. */
static KILN_MUST_USE kiln_status_t reader_finish(kiln_blob_reader_t *r) {
  kiln_blob_check_t check;
  check_state_finish(r->check_state, &check);
  char what[200];
  if (r->by_check) {
    if (memcmp(check.bytes, r->check.bytes, sizeof check.bytes) != 0) {
      char got[KILN_BLOB_CHECK_HEX_LEN + 1], want[KILN_BLOB_CHECK_HEX_LEN + 1];
      kiln_blob_check_to_hex(&check, got);
      kiln_blob_check_to_hex(&r->check, want);
      snprintf(what, sizeof what, "its %llu bytes fail their XXH3-128 check (they give %s, recorded %s)",
               (unsigned long long)r->produced, got, want);
      return corrupt(r, what);
    }
  } else {
    kiln_digest_t got;
    kiln_hasher_finish(r->hasher, &got);
    if (!kiln_digest_equal(&got, &r->digest)) {
      kiln_digest_hex_t hex;
      kiln_digest_to_hex(&got, &hex);
      snprintf(what, sizeof what, "its %llu bytes hash to %s (SHA-256)", (unsigned long long)r->produced,
               hex.text);
      return corrupt(r, what);
    }
    r->check = check;
  }
  if (r->produced != r->size) return corrupt(r, "its length differs from its recorded size");
  r->verified = true;
  return NULL;
}

/* Fills `buf` with up to `cap` decompressed bytes; 0 only at the end of the frame. */
static KILN_MUST_USE kiln_status_t read_zst(kiln_blob_reader_t *r, void *buf, size_t cap, size_t *out_len) {
  ZSTD_outBuffer out = {buf, cap, 0};
  for (;;) {
    if (r->in.pos == r->in.size && !r->eof) {
      ssize_t n = read_some(r->fd, r->in_buf, ZSTD_DStreamInSize());
      if (n < 0) return KILN_STATUS_ERRNO(errno, "cannot read blob file %s", r->path.s);
      r->in = (ZSTD_inBuffer){r->in_buf, (size_t)n, 0};
      r->eof = n == 0;
    }
    if (r->frame_done) {
      /* Exactly one frame: anything after it is damage. */
      if (r->in.pos < r->in.size) return corrupt(r, "bytes follow its zstd frame");
      if (r->eof) break;
      continue;
    }
    size_t rc = ZSTD_decompressStream(r->dctx, &out, &r->in);
    if (ZSTD_isError(rc)) {
      char what[160];
      snprintf(what, sizeof what, "zstd cannot decompress it (%s)", ZSTD_getErrorName(rc));
      return corrupt(r, what);
    }
    if (rc == 0) r->frame_done = true;
    if (out.pos > 0) break;
    if (!r->frame_done && r->in.pos == r->in.size && r->eof) {
      return corrupt(r, "its zstd frame is truncated");
    }
  }
  *out_len = out.pos;
  return NULL;
}

kiln_status_t kiln_blob_reader_read(kiln_blob_reader_t *r, void *buf, size_t cap, size_t *out_len) {
  *out_len = 0;
  if (r->failed_message) return KILN_STATUS(r->failed_code, "%s", r->failed_message);
  if (r->verified) return NULL;
  if (cap == 0) {
    return KILN_STATUS(KILN_STATUS_INVALID_ARGUMENT,
                       "blob read into a 0-byte buffer (0 means the end); pass room for data");
  }
  if (cap > READ_PIECE_BYTES) cap = READ_PIECE_BYTES;
  size_t n = 0;
  kiln_status_t status = NULL;
  if (r->zst) {
    status = read_zst(r, buf, cap, &n);
  } else {
    ssize_t got = read_some(r->fd, buf, cap);
    if (got < 0)
      status = KILN_STATUS_ERRNO(errno, "cannot read blob file %s", r->path.s);
    else
      n = (size_t)got;
  }
  if (!status && n == 0) status = reader_finish(r);
  if (status) return reader_fail(r, status);
  hash_content(r->hasher, r->check_state, buf, n);
  r->produced += n;
  *out_len = n;
  return NULL;
}

kiln_status_t kiln_blobstore_get(kiln_blobstore_t *store, const kiln_digest_t *digest, void **out_data,
                                 size_t *out_len) {
  *out_data = NULL;
  *out_len = 0;
  kiln_blob_reader_t *r = NULL;
  KILN_RETURN_IF_ERROR(kiln_blob_reader_open(store, digest, NULL, &r));
  uint64_t size = r->size;
  if (size >= SIZE_MAX) {
    kiln_status_t status = corrupt(r, "its recorded size does not fit in memory");
    kiln_blob_reader_close(r);
    return status;
  }
  /* Grow towards the recorded size rather than trusting it up front: a damaged
   * .zst header must not turn into one enormous allocation. */
  size_t cap = size < MEMORY_MAX_BYTES ? (size_t)size : MEMORY_MAX_BYTES;
  unsigned char *data = kiln_malloc(cap ? cap : 1);
  size_t len = 0;
  kiln_status_t status = NULL;
  for (;;) {
    size_t n = 0;
    if (len == cap && cap < size) {
      cap = size - cap < cap ? (size_t)size : cap * 2;
      data = kiln_realloc(data, cap);
    }
    if (len < cap) {
      status = kiln_blob_reader_read(r, data + len, cap - len, &n);
    } else {
      unsigned char extra;
      status = kiln_blob_reader_read(r, &extra, 1, &n);
      if (!status && n > 0) status = corrupt(r, "it holds more than its recorded size");
    }
    if (status || n == 0) break;
    len += n;
  }
  kiln_blob_reader_close(r);
  if (status) {
    kiln_free(data);
    return status;
  }
  *out_data = data;
  *out_len = len;
  return NULL;
}

/* ---- maintenance ---- */

bool kiln_blobstore_contains(kiln_blobstore_t *store, const kiln_digest_t *digest,
                             uint64_t *out_stored_size) {
  if (out_stored_size) *out_stored_size = 0;
  kiln_digest_hex_t hex;
  kiln_digest_to_hex(digest, &hex);
  path_t path;
  bool zst = false;
  struct stat st;
  if (!find_blob(store, &hex, &path, &zst, &st)) return false;
  if (out_stored_size) *out_stored_size = (uint64_t)st.st_size;
  return true;
}

kiln_status_t kiln_blobstore_verify(kiln_blobstore_t *store, const kiln_digest_t *digest,
                                    kiln_blob_check_t *out_check) {
  if (out_check) memset(out_check, 0, sizeof *out_check);
  kiln_blob_reader_t *r = NULL;
  /* No check given: the audit is SHA-256 against the name, whatever is recorded. */
  KILN_RETURN_IF_ERROR(kiln_blob_reader_open(store, digest, NULL, &r));
  unsigned char *buf = kiln_malloc(READ_CHUNK_BYTES);
  kiln_status_t status = NULL;
  size_t n = 0;
  do {
    status = kiln_blob_reader_read(r, buf, READ_CHUNK_BYTES, &n);
  } while (!status && n > 0);
  kiln_free(buf);
  if (!status && out_check) kiln_blob_reader_check(r, out_check);
  kiln_blob_reader_close(r);
  return status;
}

kiln_status_t kiln_blobstore_quarantine(kiln_blobstore_t *store, const kiln_digest_t *digest) {
  kiln_digest_hex_t hex;
  kiln_digest_to_hex(digest, &hex);
  bool moved = false;
  for (int zst = 0; zst <= 1; zst++) {
    path_t from;
    blob_path(store, &hex, zst, &from);
    struct stat st;
    if (lstat(from.s, &st) != 0) continue;
    /* Keep earlier quarantined copies of the same digest: each is evidence. */
    path_t to;
    path_format(&to, "%s/%s%s", store->quarantine_dir, hex.text, zst ? ZST_SUFFIX : "");
    for (unsigned i = 1; lstat(to.s, &st) == 0 && i < 1000; i++) {
      path_format(&to, "%s/%s%s.%u", store->quarantine_dir, hex.text, zst ? ZST_SUFFIX : "", i);
    }
    if (rename(from.s, to.s) != 0) {
      if (errno == ENOENT) continue; /* removed meanwhile */
      return KILN_STATUS_ERRNO(errno, "cannot quarantine blob %s (%s to %s)", hex.text, from.s, to.s);
    }
    moved = true;
  }
  if (!moved) {
    return KILN_STATUS(KILN_STATUS_NOT_FOUND, "blob %s to quarantine is not in the store at %s", hex.text,
                       store->blobs_dir);
  }
  path_t shard;
  shard_path(store, &hex, &shard);
  KILN_RETURN_IF_ERROR(fsync_dir(store->quarantine_dir));
  return fsync_dir(shard.s);
}

kiln_status_t kiln_blobstore_remove(kiln_blobstore_t *store, const kiln_digest_t *digest) {
  kiln_digest_hex_t hex;
  kiln_digest_to_hex(digest, &hex);
  bool removed = false;
  for (int zst = 0; zst <= 1; zst++) {
    path_t path;
    blob_path(store, &hex, zst, &path);
    if (unlink(path.s) == 0) {
      removed = true;
    } else if (errno != ENOENT) {
      return KILN_STATUS_ERRNO(errno, "cannot remove blob %s at %s", hex.text, path.s);
    }
  }
  if (!removed) {
    return KILN_STATUS(KILN_STATUS_NOT_FOUND, "blob %s to remove is not in the store at %s", hex.text,
                       store->blobs_dir);
  }
  return NULL;
}

static KILN_MUST_USE kiln_status_t visit_shard(const char *shard_dir, const char *shard_name,
                                               kiln_blobstore_visit_fn_t fn, void *user) {
  DIR *d = opendir(shard_dir);
  if (!d) {
    if (errno == ENOENT) return NULL; /* removed meanwhile */
    return KILN_STATUS_ERRNO(errno, "cannot list blob shard %s", shard_dir);
  }
  kiln_status_t status = NULL;
  struct dirent *e;
  while (!status && (e = readdir(d)) != NULL) {
    if (strcmp(e->d_name, ".") == 0 || strcmp(e->d_name, "..") == 0) continue;
    path_t path;
    path_format(&path, "%s/%s", shard_dir, e->d_name);
    struct stat st;
    if (lstat(path.s, &st) != 0) continue; /* removed meanwhile */
    kiln_digest_t digest;
    bool zst = false;
    bool blob = S_ISREG(st.st_mode) && parse_blob_name(e->d_name, &digest, &zst) &&
                strncmp(e->d_name, shard_name, 2) == 0;
    status = fn(user, blob ? &digest : NULL, path.s, (uint64_t)st.st_size);
  }
  closedir(d);
  return status;
}

kiln_status_t kiln_blobstore_visit(kiln_blobstore_t *store, kiln_blobstore_visit_fn_t fn, void *user) {
  DIR *d = opendir(store->blobs_dir);
  if (!d) return KILN_STATUS_ERRNO(errno, "cannot list blob directory %s", store->blobs_dir);
  kiln_status_t status = NULL;
  struct dirent *e;
  while (!status && (e = readdir(d)) != NULL) {
    if (strcmp(e->d_name, ".") == 0 || strcmp(e->d_name, "..") == 0) continue;
    path_t path;
    path_format(&path, "%s/%s", store->blobs_dir, e->d_name);
    struct stat st;
    if (lstat(path.s, &st) != 0) continue;
    if (S_ISDIR(st.st_mode) && is_shard_name(e->d_name)) {
      status = visit_shard(path.s, e->d_name, fn, user);
    } else {
      status = fn(user, NULL, path.s, (uint64_t)st.st_size);
    }
  }
  closedir(d);
  return status;
}
