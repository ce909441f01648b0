/* Uploads, downloads and atomic files for the CLI.
 *
 * Download invariant: bytes land only in the digest-named partial file, at the
 * offset the server says (each ArtifactChunk's offset must equal the bytes held so
 * far), and the destination appears only by rename after the whole partial file
 * hashed to the digest. A stream that breaks leaves the partial file for a resume;
 * a digest mismatch removes it (a resumed prefix may be the bad part, so one
 * restart from byte 0 follows).
 */
#include "client/transfer.h"

#include <errno.h>
#include <stdarg.h>
#include <fcntl.h>
#include <libgen.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/uio.h>
#include <unistd.h>

#include "base/alloc.h"
#include "base/buf.h"
#include "base/file.h"
#include "base/mlir_text.h"
#include "client/job.h"

#define READ_BLOCK        (256 * 1024)
#define DOWNLOAD_ATTEMPTS 3

kiln_status_t kiln_cli_stream_digest(FILE *f, const char *name, kiln_digest_hex_t *out_hex,
                                     uint64_t *out_size) {
  kiln_hasher_t *h = kiln_hasher_create();
  uint8_t *block = kiln_malloc(READ_BLOCK);
  uint64_t total = 0;
  size_t n;
  while ((n = fread(block, 1, READ_BLOCK, f)) > 0) {
    kiln_hasher_update(h, block, n);
    total += n;
  }
  kiln_status_t status = NULL;
  if (ferror(f)) {
    status = KILN_CLI_LOCAL_ERRNO(errno ? errno : EIO, "cannot read %s", name);
  } else {
    kiln_digest_t d;
    kiln_hasher_finish(h, &d);
    kiln_digest_to_hex(&d, out_hex);
    *out_size = total;
  }
  kiln_free(block);
  kiln_hasher_destroy(h);
  return status;
}

kiln_status_t kiln_cli_file_digest(const char *path, kiln_digest_hex_t *out_hex, uint64_t *out_size) {
  FILE *f = fopen(path, "rb");
  if (!f) return KILN_CLI_LOCAL_ERRNO(errno, "cannot open %s", path);
  struct stat st;
  kiln_status_t status = NULL;
  if (fstat(fileno(f), &st) == 0 && S_ISDIR(st.st_mode)) {
    status = KILN_STATUS(KILN_STATUS_INVALID_ARGUMENT, "%s is a directory; name a file", path);
  } else {
    status = kiln_cli_stream_digest(f, path, out_hex, out_size);
  }
  fclose(f);
  return status;
}

kiln_status_t kiln_cli_read_all(FILE *f, const char *name, uint64_t max_bytes, uint8_t **out_data,
                                size_t *out_len) {
  *out_data = NULL;
  *out_len = 0;
  size_t cap = READ_BLOCK, len = 0;
  uint8_t *data = kiln_malloc(cap + 1);
  for (;;) {
    if (len == cap) {
      cap *= 2;
      data = kiln_realloc(data, cap + 1);
    }
    size_t n = fread(data + len, 1, cap - len, f);
    len += n;
    if (len > max_bytes) {
      kiln_free(data);
      return KILN_STATUS(KILN_STATUS_RESOURCE_EXHAUSTED, "%s is larger than %llu bytes", name,
                         (unsigned long long)max_bytes);
    }
    if (n == 0) break;
  }
  if (ferror(f)) {
    kiln_free(data);
    return KILN_CLI_LOCAL_ERRNO(errno ? errno : EIO, "cannot read %s", name);
  }
  data[len] = '\0';
  *out_data = data;
  *out_len = len;
  return NULL;
}

kiln_status_t kiln_cli_source_upload(kiln_client_t *client, FILE *f, const char *digest, uint64_t size,
                                     uint64_t chunk_bytes, const char *name,
                                     Kiln__V1__PutSourceResponse **out_response) {
  *out_response = NULL;
  if (chunk_bytes == 0) chunk_bytes = 1 << 20;
  kiln_client_stream_t *stream = kiln_client_stream_open(client, "/kiln.v1.Kiln/PutSource", NULL);
  Kiln__V1__SourceMetadata meta = KILN__V1__SOURCE_METADATA__INIT;
  meta.digest = (char *)digest;
  meta.size_bytes = size;
  meta.name = (char *)(name ? name : "");
  Kiln__V1__PutSourceChunk first = KILN__V1__PUT_SOURCE_CHUNK__INIT;
  first.chunk_case = KILN__V1__PUT_SOURCE_CHUNK__CHUNK_METADATA;
  first.metadata = &meta;
  kiln_status_t read_error = NULL;
  if (kiln_client_stream_write(stream, &first.base)) {
    uint8_t *block = kiln_malloc((size_t)chunk_bytes);
    uint64_t sent = 0;
    while (sent < size) {
      size_t want = (size_t)(size - sent < chunk_bytes ? size - sent : chunk_bytes);
      size_t n = fread(block, 1, want, f);
      if (n == 0) {
        read_error = ferror(f) ? KILN_CLI_LOCAL_ERRNO(errno ? errno : EIO, "cannot read %s", name)
                               : KILN_STATUS(KILN_STATUS_ABORTED,
                                             "%s shrank while it was uploaded (%llu of %llu bytes)", name,
                                             (unsigned long long)sent, (unsigned long long)size);
        break;
      }
      Kiln__V1__PutSourceChunk chunk = KILN__V1__PUT_SOURCE_CHUNK__INIT;
      chunk.chunk_case = KILN__V1__PUT_SOURCE_CHUNK__CHUNK_DATA;
      chunk.data.data = block;
      chunk.data.len = n;
      sent += n;
      if (!kiln_client_stream_write(stream, &chunk.base)) break; /* kilnd answered early */
    }
    kiln_free(block);
  }
  if (read_error) {
    /* Nothing half-uploaded is kept by kilnd: cancelling discards it. */
    kiln_client_stream_cancel(stream);
    kiln_client_stream_destroy(stream);
    return read_error;
  }
  ProtobufCMessage *response = NULL;
  kiln_status_t status =
      kiln_client_stream_finish(stream, &kiln__v1__put_source_response__descriptor, &response);
  kiln_client_stream_destroy(stream);
  if (status) return status;
  *out_response = (Kiln__V1__PutSourceResponse *)response;
  return NULL;
}

kiln_status_t kiln_cli_source_resolve(const char *source, kiln_digest_hex_t *out_hex) {
  if (kiln_digest_is_valid_hex(source)) {
    memcpy(out_hex->text, source, KILN_DIGEST_HEX_LEN + 1);
    return NULL;
  }
  struct stat st;
  if (stat(source, &st) != 0) {
    const char *hint = strncmp(source, "sha256:", 7) == 0 ? " (drop the 'sha256:' prefix)" : "";
    return KILN_STATUS(KILN_STATUS_INVALID_ARGUMENT,
                       "'%s' is neither a source digest (64 lowercase hex characters)%s nor a "
                       "readable file",
                       source, hint);
  }
  size_t len = 0;
  char *text = kiln_read_file(source, &len);
  if (!text) return KILN_CLI_LOCAL_ERRNO(errno, "cannot read %s", source);
  kiln_mlir_text_digest(text, len, out_hex);
  kiln_free(text);
  return NULL;
}

char *kiln_cli_part_path(const char *path, const char *digest) {
  kiln_buf_t b;
  kiln_buf_init(&b);
  kiln_buf_appendf(&b, "%s.kiln-%.12s.part", path, digest);
  return kiln_buf_take(&b);
}

static void fsync_parent(const char *path) {
  char *copy = kiln_strdup(path);
  int fd = open(dirname(copy), O_RDONLY | O_DIRECTORY);
  if (fd >= 0) {
    (void)fsync(fd); /* best effort: the rename is already visible */
    close(fd);
  }
  kiln_free(copy);
}

/* The first half of an atomic write: creates the temporary file beside `path`
 * (its name into *tmp) and returns its descriptor in *out_fd. */
static KILN_MUST_USE kiln_status_t atomic_open(const char *path, kiln_buf_t *tmp, int *out_fd) {
  kiln_buf_init(tmp);
  kiln_buf_appendf(tmp, "%s.tmp.%ld", path, (long)getpid());
  *out_fd = open(tmp->data, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0666);
  if (*out_fd < 0) return KILN_CLI_LOCAL_ERRNO(errno, "cannot create %s", tmp->data);
  return NULL;
}

/* The second half: with `status` NULL (everything written), flushes, closes and
 * renames the temporary file over `path`; otherwise (or when that fails) closes
 * and removes it. Frees `tmp`; returns the outcome. */
static KILN_MUST_USE kiln_status_t atomic_close(int fd, kiln_buf_t *tmp, const char *path,
                                                kiln_status_t status) {
  if (!status && fsync(fd) != 0) status = KILN_CLI_LOCAL_ERRNO(errno, "cannot flush %s", tmp->data);
  if (close(fd) != 0 && !status) status = KILN_CLI_LOCAL_ERRNO(errno, "cannot write %s", tmp->data);
  if (!status && rename(tmp->data, path) != 0) {
    status = KILN_CLI_LOCAL_ERRNO(errno, "cannot rename %s to %s", tmp->data, path);
  }
  if (status)
    unlink(tmp->data);
  else
    fsync_parent(path);
  kiln_buf_deinit(tmp);
  return status;
}

kiln_status_t kiln_cli_write_atomic(const char *path, const void *data, size_t len) {
  kiln_buf_t tmp;
  int fd = -1;
  kiln_status_t status = atomic_open(path, &tmp, &fd);
  if (status) {
    kiln_buf_deinit(&tmp);
    return status;
  }
  const uint8_t *p = data;
  size_t left = len;
  while (left && !status) {
    ssize_t n = write(fd, p, left);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0)
      status = KILN_CLI_LOCAL_ERRNO(errno, "cannot write %s", tmp.data);
    else {
      p += n;
      left -= (size_t)n;
    }
  }
  return atomic_close(fd, &tmp, path, status);
}

/* Copies all of `in` to `out` from their current offsets: copy_file_range (the
 * kernel copies, or shares extents where the file system can), else read/write. */
static KILN_MUST_USE kiln_status_t copy_fd(int in, int out, const char *from, const char *to) {
  bool plain = false;
  char *block = NULL;
  for (;;) {
    ssize_t n;
    if (!plain) {
      n = copy_file_range(in, NULL, out, NULL, 1 << 30, 0);
      if (n < 0 && (errno == EXDEV || errno == ENOSYS || errno == EINVAL || errno == EOPNOTSUPP)) {
        plain = true;
        continue;
      }
    } else {
      if (!block) block = kiln_malloc(READ_BLOCK);
      n = read(in, block, READ_BLOCK);
      for (ssize_t done = 0, w; n > 0 && done < n; done += w) {
        w = write(out, block + done, (size_t)(n - done));
        if (w < 0 && errno == EINTR)
          w = 0;
        else if (w < 0) {
          kiln_free(block);
          return KILN_CLI_LOCAL_ERRNO(errno, "cannot write %s", to);
        }
      }
    }
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) {
      kiln_free(block);
      return KILN_CLI_LOCAL_ERRNO(errno, "cannot copy %s to %s", from, to);
    }
    if (n == 0) break;
  }
  kiln_free(block);
  return NULL;
}

kiln_status_t kiln_cli_copy_atomic(const char *from, const char *to) {
  int in = open(from, O_RDONLY | O_CLOEXEC);
  if (in < 0) return KILN_CLI_LOCAL_ERRNO(errno, "cannot open %s", from);
  kiln_buf_t tmp;
  int fd = -1;
  kiln_status_t status = atomic_open(to, &tmp, &fd);
  if (status) {
    kiln_buf_deinit(&tmp);
  } else {
    status = atomic_close(fd, &tmp, to, copy_fd(in, fd, from, tmp.data));
  }
  close(in);
  return status;
}

kiln_status_t kiln_cli_backup_keep(const char *path, const char *backup) {
  if (link(path, backup) == 0) {
    fsync_parent(backup);
    return NULL;
  }
  if (errno == EEXIST) return NULL;
  if (errno != EPERM && errno != EXDEV && errno != EOPNOTSUPP && errno != EMLINK) {
    return KILN_CLI_LOCAL_ERRNO(errno, "cannot keep %s as %s", path, backup);
  }
  /* No hard links here (some network and FAT file systems): a copy, published
   * with link() so that a .bak that appeared meanwhile still wins. */
  kiln_buf_t tmp;
  kiln_buf_init(&tmp);
  kiln_buf_appendf(&tmp, "%s.tmp.%ld", backup, (long)getpid());
  kiln_status_t status = kiln_cli_copy_atomic(path, tmp.data);
  if (!status && link(tmp.data, backup) != 0 && errno != EEXIST) {
    status = KILN_CLI_LOCAL_ERRNO(errno, "cannot create %s", backup);
  }
  unlink(tmp.data);
  kiln_buf_deinit(&tmp);
  return status;
}

kiln_status_t kiln_cli_mkdirs(const char *dir) {
  char *p = kiln_strdup(dir);
  kiln_status_t status = NULL;
  size_t len = strlen(p);
  while (len > 1 && p[len - 1] == '/') p[--len] = '\0';
  for (char *s = p + 1;; s++) {
    bool end = *s == '\0';
    if (*s == '/' || end) {
      char saved = *s;
      *s = '\0';
      if (mkdir(p, 0777) != 0 && errno != EEXIST) {
        status = KILN_CLI_LOCAL_ERRNO(errno, "cannot create directory %s", p);
        break;
      }
      *s = saved;
    }
    if (end) break;
  }
  struct stat st;
  if (!status && (stat(p, &st) != 0 || !S_ISDIR(st.st_mode))) {
    status = KILN_STATUS(KILN_STATUS_FAILED_PRECONDITION,
                         "%s exists and is not a directory; pick another output directory", p);
  }
  kiln_free(p);
  return status;
}

/* Size of the file at `path`, or -1 when there is none. */
static int64_t file_size(const char *path) {
  struct stat st;
  if (stat(path, &st) != 0 || !S_ISREG(st.st_mode)) return -1;
  return (int64_t)st.st_size;
}

static bool retryable(kiln_status_code_t code) { return code == KILN_STATUS_UNAVAILABLE; }

/* One GetArtifact stream's worth of a download. */
typedef struct attempt_s {
  kiln_client_t *client;
  const kiln_cli_artifact_ref_t *ref;
  const char *path_given;
  char *path;   /* destination, once known */
  char *digest; /* once known */
  char *part;   /* partial file, once the digest is known */
  Kiln__V1__ArtifactChunk *metadata;
  uint64_t resumed_from;
  bool restarted;   /* restarted from 0 after a bad resumed file (at most once) */
  bool restart_now; /* run_stream just decided that restart */
} attempt_t;

static KILN_MUST_USE kiln_status_t check_metadata(attempt_t *a, Kiln__V1__ArtifactChunk *first) {
  const Kiln__V1__ArtifactMetadata *m = first->metadata;
  if (!m || !kiln_digest_is_valid_hex(m->digest)) {
    return KILN_STATUS(KILN_STATUS_INTERNAL,
                       "GetArtifact: kilnd's first message has no artifact metadata (or no valid "
                       "digest); is kilnd the same version as this client?");
  }
  if (a->digest && strcmp(a->digest, m->digest) != 0) {
    return KILN_STATUS(KILN_STATUS_INTERNAL, "GetArtifact: asked for %s, kilnd described %s", a->digest,
                       m->digest);
  }
  return NULL;
}

/* Hashes the finished partial file and renames it into place. */
static KILN_MUST_USE kiln_status_t commit(attempt_t *a) {
  kiln_digest_hex_t hex;
  uint64_t size = 0;
  kiln_status_t status = kiln_cli_file_digest(a->part, &hex, &size);
  if (status) return status;
  if (strcmp(hex.text, a->digest) != 0) {
    unlink(a->part);
    return KILN_STATUS(KILN_STATUS_DATA_LOSS,
                       "the downloaded artifact hashes to %s, not to its digest %s; it was "
                       "discarded (try again; if it repeats, run `kiln cache verify` on the server)",
                       hex.text, a->digest);
  }
  if (rename(a->part, a->path) != 0) {
    return KILN_CLI_LOCAL_ERRNO(errno, "cannot rename %s to %s", a->part, a->path);
  }
  fsync_parent(a->path);
  return NULL;
}

/* Writes the pieces at file offset `pos`, with as few system calls as it takes. */
static KILN_MUST_USE kiln_status_t write_pieces(int fd, const kiln_client_piece_t *pieces, size_t n,
                                                uint64_t pos, const char *path) {
  struct iovec iov[64];
  size_t i = 0, skip = 0; /* pieces[i] from byte `skip` is next */
  while (i < n && pieces[i].len == 0) i++;
  while (i < n) {
    int k = 0;
    for (size_t j = i; j < n && k < 64; j++, k++) {
      size_t from = j == i ? skip : 0;
      iov[k].iov_base = (void *)(pieces[j].data + from);
      iov[k].iov_len = pieces[j].len - from;
    }
    ssize_t w = pwritev(fd, iov, k, (off_t)pos);
    if (w < 0 && errno == EINTR) continue;
    if (w < 0) return KILN_CLI_LOCAL_ERRNO(errno, "cannot write %s", path);
    pos += (uint64_t)w;
    for (size_t left = (size_t)w; left > 0 && i < n;) {
      size_t rest = pieces[i].len - skip;
      if (left >= rest) {
        left -= rest;
        i++;
        skip = 0;
      } else {
        skip += left;
        left = 0;
      }
    }
    while (i < n && pieces[i].len == skip) i++, skip = 0; /* done or empty pieces */
  }
  return NULL;
}

/* Runs one stream from `offset`: NULL when the file is complete and committed;
 * otherwise the status, with *out_retry saying whether a new stream may go on. */
static KILN_MUST_USE kiln_status_t run_stream(attempt_t *a, uint64_t offset, bool *out_retry) {
  *out_retry = false;
  Kiln__V1__GetArtifactRequest req = KILN__V1__GET_ARTIFACT_REQUEST__INIT;
  Kiln__V1__ArtifactKey key = KILN__V1__ARTIFACT_KEY__INIT;
  if (a->digest) {
    req.selector_case = KILN__V1__GET_ARTIFACT_REQUEST__SELECTOR_DIGEST;
    req.digest = a->digest;
  } else {
    key.source_digest = (char *)a->ref->source_digest;
    key.target = (char *)a->ref->target;
    key.flags = (char **)a->ref->flags;
    key.n_flags = a->ref->n_flags;
    req.selector_case = KILN__V1__GET_ARTIFACT_REQUEST__SELECTOR_KEY;
    req.key = &key;
  }
  req.offset = offset;
  kiln_client_stream_t *stream = kiln_client_stream_open(a->client, "/kiln.v1.Kiln/GetArtifact", &req.base);
  ProtobufCMessage *msg = NULL;
  bool timed_out = false;
  kiln_status_t status =
      kiln_client_stream_read(stream, &kiln__v1__artifact_chunk__descriptor, -1, &msg, &timed_out);
  if (!status && !msg) {
    status = KILN_STATUS(KILN_STATUS_INTERNAL, "GetArtifact: kilnd ended the stream without metadata");
  }
  if (status) {
    kiln_client_stream_destroy(stream);
    *out_retry = retryable(kiln_status_code(status));
    if (kiln_status_code(status) == KILN_STATUS_OUT_OF_RANGE && offset > 0) {
      /* The partial file is longer than the artifact: it is not this artifact's. */
      unlink(a->part);
      a->resumed_from = 0;
      *out_retry = true;
    }
    return status;
  }
  Kiln__V1__ArtifactChunk *first = (Kiln__V1__ArtifactChunk *)msg;
  status = check_metadata(a, first);
  if (status) {
    protobuf_c_message_free_unpacked(msg, NULL);
    kiln_client_stream_destroy(stream);
    return status;
  }
  if (a->metadata) protobuf_c_message_free_unpacked(&a->metadata->base, NULL);
  a->metadata = first;
  const Kiln__V1__ArtifactMetadata *m = first->metadata;
  if (!a->digest) {
    /* Chosen by key: now the digest (and a default name) is known. */
    a->digest = kiln_strdup(m->digest);
    if (!a->path) {
      kiln_buf_t b;
      kiln_buf_init(&b);
      kiln_buf_appendf(&b, "%s.vmfb",
                       m->canonical_target && *m->canonical_target ? m->canonical_target : m->digest);
      a->path = kiln_buf_take(&b);
    }
    a->part = kiln_cli_part_path(a->path, a->digest);
    int64_t have = file_size(a->part);
    if (have > 0 && (uint64_t)have <= m->size_bytes) {
      /* A leftover of this artifact: resume it by digest instead. */
      kiln_client_stream_destroy(stream);
      *out_retry = true;
      return KILN_STATUS(KILN_STATUS_ABORTED, "resuming");
    }
  }
  int flags = O_WRONLY | O_CREAT | O_CLOEXEC | (offset == 0 ? O_TRUNC : 0);
  int fd = open(a->part, flags, 0666);
  if (fd < 0) {
    status = KILN_CLI_LOCAL_ERRNO(errno, "cannot create %s", a->part);
    kiln_client_stream_destroy(stream);
    return status;
  }
  if (ftruncate(fd, (off_t)offset) != 0) status = KILN_CLI_LOCAL_ERRNO(errno, "cannot truncate %s", a->part);
  uint64_t pos = offset;
  /* The first message carries no data by contract; accept it if one does. Later
   * ones are read split: their bytes stay in gRPC's buffers and go to the file
   * from there. */
  const Kiln__V1__ArtifactChunk *c = first;
  kiln_client_piece_t own = {first->data.data, first->data.len};
  const kiln_client_piece_t *pieces = &own;
  size_t n_pieces = first->data.len ? 1 : 0;
  msg = NULL;
  while (!status) {
    if (!c) {
      status = kiln_client_stream_read_split(stream, &kiln__v1__artifact_chunk__descriptor, 3, -1, &msg,
                                             &pieces, &n_pieces, &timed_out);
      if (status || !msg) break;
      c = (const Kiln__V1__ArtifactChunk *)msg;
    }
    uint64_t len = 0;
    for (size_t i = 0; i < n_pieces; i++) len += pieces[i].len;
    if (len && c->offset != pos) {
      status =
          KILN_STATUS(KILN_STATUS_INTERNAL, "GetArtifact: kilnd sent bytes for offset %llu, expected %llu",
                      (unsigned long long)c->offset, (unsigned long long)pos);
    } else if (pos + len > m->size_bytes) {
      status = KILN_STATUS(KILN_STATUS_DATA_LOSS, "GetArtifact: kilnd sent more than the %llu bytes of %s",
                           (unsigned long long)m->size_bytes, a->digest);
    } else {
      status = write_pieces(fd, pieces, n_pieces, pos, a->part);
      if (!status) pos += len;
    }
    if (msg) protobuf_c_message_free_unpacked(msg, NULL);
    msg = NULL;
    c = NULL;
  }
  if (!status && fsync(fd) != 0) status = KILN_CLI_LOCAL_ERRNO(errno, "cannot flush %s", a->part);
  close(fd);
  kiln_client_stream_destroy(stream);
  if (status) {
    kiln_status_code_t code = kiln_status_code(status);
    *out_retry = retryable(code);
    if (code == KILN_STATUS_DATA_LOSS) unlink(a->part);
    return status;
  }
  if (pos != m->size_bytes) {
    *out_retry = true; /* an OK stream cut short: go on from pos */
    return KILN_STATUS(KILN_STATUS_UNAVAILABLE, "GetArtifact: the stream ended after %llu of %llu bytes",
                       (unsigned long long)pos, (unsigned long long)m->size_bytes);
  }
  status = commit(a);
  if (status && kiln_status_code(status) == KILN_STATUS_DATA_LOSS && offset > 0 && !a->restarted) {
    /* The resumed prefix may have been the bad part (commit removed the file):
     * once more from byte 0. */
    a->restarted = true;
    a->restart_now = true;
    *out_retry = true;
  }
  return status;
}

kiln_status_t kiln_cli_artifact_download(kiln_client_t *client, const kiln_cli_artifact_ref_t *ref,
                                         const char *path, Kiln__V1__ArtifactChunk **out_metadata,
                                         char **out_path, uint64_t *out_resumed_from) {
  if (out_metadata) *out_metadata = NULL;
  if (out_path) *out_path = NULL;
  if (out_resumed_from) *out_resumed_from = 0;
  attempt_t a;
  memset(&a, 0, sizeof a);
  a.client = client;
  a.ref = ref;
  if (path && *path) a.path = kiln_strdup(path);
  if (ref->digest) {
    a.digest = kiln_strdup(ref->digest);
    if (!a.path) {
      kiln_buf_t b;
      kiln_buf_init(&b);
      kiln_buf_appendf(&b, "%s.vmfb", ref->digest);
      a.path = kiln_buf_take(&b);
    }
    a.part = kiln_cli_part_path(a.path, a.digest);
  }
  kiln_status_t status = NULL;
  bool first_offset = true;
  int failures = 0;
  for (;;) {
    uint64_t offset = 0;
    if (a.part) {
      int64_t have = file_size(a.part);
      if (have > 0) offset = (uint64_t)have;
    }
    if (first_offset && offset) a.resumed_from = offset;
    if (a.part) first_offset = false;
    bool retry = false;
    kiln_status_free(status);
    status = run_stream(&a, offset, &retry);
    if (!status) break;
    /* Switching to a resume, or the one restart, is not a failed attempt. */
    bool resuming = kiln_status_code(status) == KILN_STATUS_ABORTED && retry;
    if (!resuming && !a.restart_now) failures++;
    a.restart_now = false;
    if (!retry || failures >= DOWNLOAD_ATTEMPTS) break;
  }
  if (!status) {
    if (out_metadata) {
      *out_metadata = a.metadata;
      a.metadata = NULL;
    }
    if (out_path) {
      *out_path = a.path;
      a.path = NULL;
    }
    if (out_resumed_from) *out_resumed_from = a.restarted ? 0 : a.resumed_from;
  }
  if (a.metadata) protobuf_c_message_free_unpacked(&a.metadata->base, NULL);
  kiln_free(a.path);
  kiln_free(a.digest);
  kiln_free(a.part);
  return status;
}

kiln_status_t kiln_cli_local_error_at(int err, const char *file, int line, const char *fmt, ...) {
  kiln_status_code_t code = kiln_status_code_from_errno(err);
  if (code == KILN_STATUS_PERMISSION_DENIED) code = KILN_STATUS_FAILED_PRECONDITION;
  va_list ap;
  va_start(ap, fmt);
  kiln_status_t status = kiln_status_errno_makev(code, err, file, line, fmt, ap);
  va_end(ap);
  return status;
}
