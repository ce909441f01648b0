/* PutSource: a client-streaming upload into the content-addressed source store.
 *
 * Flow (loop thread; every disk, SQLite and hashing step is a pool job, and the
 * next message is received only after the previous one's job finished, so one
 * chunk is in memory at a time and HTTP/2 flow control paces the client):
 *   recv metadata -> check it (RESOURCE_EXHAUSTED over KILND_MAX_SOURCE_BYTES or
 *   this client's client-max-request-bytes, before any data) -> BEGIN (pool: already stored? else open a
 * spool file through kiln_cache_source_upload_begin) -> already present: answer at once without reading data
 * | recv data -> WRITE (pool: check the format, append and hash) -> recv data ... -> end of messages ->
 * COMMIT (pool: size, digest, format; blob made durable and indexed) -> send PutSourceResponse -> finish. Any
 * failure or cancel after BEGIN runs ABORT (pool: the spool file is removed) before the call finishes, so
 * nothing is left behind; bytes become visible only in COMMIT, after every check passed.
 *
 * Format: the first four bytes decide bytecode (the MLIR bytecode magic
 * "ML\xefR"); anything else must be valid UTF-8 (text), checked incrementally
 * across chunks. A declared format that the bytes contradict fails as early as the
 * bytes show it. The stored format is never UNSPECIFIED.
 */
#include <stdatomic.h>
#include <stdio.h>
#include <string.h>
#include <uv.h>

#include "base/alloc.h"
#include "base/digest.h"
#include "daemon/jobs.h"
#include "daemon/rpc.h"
#include "daemon/source_check.h"
#include "daemon/stream.h"
#include "kiln/v1/kiln.pb-c.h"

#define MAX_NAME_BYTES 1024

typedef enum job_e { JOB_BEGIN, JOB_WRITE, JOB_COMMIT, JOB_ABORT } job_t;

typedef struct put_s {
  const kilnd_rpc_env_t *env;
  kilnd_stream_t *stream;
  uv_work_t work;
  atomic_bool cancelled;

  /* The metadata, copied: a received message lives only until the next receive. */
  char digest[KILN_DIGEST_HEX_LEN + 1];
  uint64_t size;
  int declared; /* kiln.v1.SourceFormat as sent */
  char *name;

  /* Pool-side state: the loop touches it only while no job is queued. */
  job_t job;
  const uint8_t *data; /* WRITE: the chunk, borrowed from the received message */
  size_t len;
  kiln_cache_upload_t *upload;
  kilnd_source_check_t check; /* the format, as the bytes show it */
  bool present;               /* BEGIN: already stored */
  kiln_index_source_t record; /* BEGIN (present) or COMMIT */
  kiln_status_t status;       /* of the last job */
  kiln_status_t end_status;   /* ABORT: what the call ends with */
} put_t;

static void put_recv_next(put_t *p);
static void put_queue(put_t *p, job_t job);

static void put_free(put_t *p) {
  kiln_cache_source_upload_abort(p->upload);
  kiln_index_source_deinit(&p->record);
  kiln_status_free(p->status);
  kiln_status_free(p->end_status);
  kiln_free(p->name);
  kiln_free(p);
}

static void put_end(put_t *p, kiln_status_t status) {
  kilnd_stream_t *stream = p->stream;
  put_free(p);
  kilnd_stream_finish(stream, status);
}

/* Ends the call with `status`, removing the spool file first (on the pool) when
 * there is one. */
static void put_fail(put_t *p, kiln_status_t status) {
  if (!p->upload) {
    put_end(p, status);
    return;
  }
  p->end_status = status;
  put_queue(p, JOB_ABORT);
}

static void on_put_cancel(kilnd_stream_t *stream, void *user) {
  (void)stream;
  put_t *p = user;
  atomic_store(&p->cancelled, true);
}

/* "PutSource: source <digest> (<name>)", the prefix of every refusal. */
static const char *describe(const put_t *p, char *buf, size_t cap) {
  snprintf(buf, cap, "PutSource: source %s (%s)", p->digest, p->name && *p->name ? p->name : "<source>");
  return buf;
}

static void put_work(uv_work_t *work) {
  put_t *p = work->data;
  kiln_cache_t *cache = p->env->cache;
  kiln_status_t st = NULL;
  char what[200];
  switch (p->job) {
    case JOB_BEGIN:
      st = kiln_cache_source_get(cache, p->digest, &p->record);
      if (!st) {
        p->present = true;
      } else if (kiln_status_code(st) == KILN_STATUS_NOT_FOUND) {
        kiln_status_free(st);
        st = kiln_cache_source_upload_begin(cache, p->digest, p->size, &p->upload);
      }
      break;
    case JOB_WRITE:
      if (atomic_load(&p->cancelled)) {
        st = KILN_STATUS(KILN_STATUS_CANCELLED, "PutSource: the client cancelled the upload");
        break;
      }
      st = kilnd_source_check_feed(&p->check, p->data, p->len, describe(p, what, sizeof what));
      if (!st) st = kiln_cache_source_upload_write(p->upload, p->data, p->len);
      break;
    case JOB_COMMIT: {
      st = kilnd_source_check_finish(&p->check, describe(p, what, sizeof what));
      kiln_cache_upload_t *upload = p->upload;
      p->upload = NULL;
      if (st) {
        kiln_cache_source_upload_abort(upload);
        break;
      }
      st = kiln_cache_source_upload_commit(upload, p->name, p->check.format, NULL, &p->record);
      break;
    }
    case JOB_ABORT:
      kiln_cache_source_upload_abort(p->upload);
      p->upload = NULL;
      break;
  }
  p->status = st;
}

static void on_response_sent(kilnd_stream_t *stream, bool ok, void *user) {
  (void)stream;
  put_t *p = user;
  put_end(p, ok ? NULL : KILN_STATUS(KILN_STATUS_CANCELLED, "PutSource: the client went away"));
}

static void put_respond(put_t *p, bool already_present) {
  Kiln__V1__PutSourceResponse resp = KILN__V1__PUT_SOURCE_RESPONSE__INIT;
  resp.digest = p->record.digest;
  resp.size_bytes = p->record.size;
  resp.already_present = already_present;
  resp.format = (Kiln__V1__SourceFormat)p->record.format;
  kiln_status_t st = kilnd_stream_send(p->stream, &resp.base, on_response_sent, p);
  if (st) put_end(p, st);
}

/* A refusal of the bytes' format also travels as `kiln-diagnostics-bin`. */
static void attach_diagnostics(put_t *p) {
  const kilnd_call_ctx_t *ctx = kilnd_stream_ctx(p->stream);
  size_t len = 0;
  const uint8_t *packed = kilnd_source_check_diagnostics(&p->check, p->name, ctx->arena, &len);
  if (packed) kilnd_call_set_diagnostics(ctx, packed, len);
}

static void put_after_work(uv_work_t *work, int status) {
  (void)status; /* nothing calls uv_cancel */
  put_t *p = work->data;
  kiln_status_t st = p->status;
  p->status = NULL;
  switch (p->job) {
    case JOB_BEGIN:
      if (st) {
        put_end(p, st);
      } else if (p->present) {
        /* Stored already: answer without reading data (the client's further
         * writes then fail). The stored source must be the one described. */
        if (p->record.size != p->size) {
          put_end(p, KILN_STATUS(KILN_STATUS_INVALID_ARGUMENT,
                                 "PutSource: source %s is stored with %llu bytes but size_bytes "
                                 "says %llu; send the source's exact size",
                                 p->digest, (unsigned long long)p->record.size, (unsigned long long)p->size));
        } else if (p->declared && p->record.format && p->declared != p->record.format) {
          char what[200];
          put_end(p, KILN_STATUS(KILN_STATUS_INVALID_ARGUMENT,
                                 "%s: format contradicts the format the source was stored with; send "
                                 "UNSPECIFIED or the right one",
                                 describe(p, what, sizeof what)));
        } else {
          put_respond(p, true);
        }
      } else if (atomic_load(&p->cancelled)) {
        put_fail(p, KILN_STATUS(KILN_STATUS_CANCELLED, "PutSource: the client cancelled the upload"));
      } else {
        put_recv_next(p);
      }
      break;
    case JOB_WRITE:
      if (st) {
        attach_diagnostics(p);
        put_fail(p, st);
      } else {
        put_recv_next(p);
      }
      break;
    case JOB_COMMIT:
      if (st) {
        attach_diagnostics(p);
        put_end(p, st); /* commit removed what it had */
      } else {
        put_respond(p, false);
      }
      break;
    case JOB_ABORT: {
      kiln_status_t end = p->end_status;
      p->end_status = NULL;
      put_end(p, end);
      break;
    }
  }
}

static void put_queue(put_t *p, job_t job) {
  p->job = job;
  p->work.data = p;
  if (uv_queue_work(kilnd_stream_loop(p->stream), &p->work, put_work, put_after_work) != 0) {
    /* Cannot happen with a live loop; the spool file, if any, goes with put_free. */
    kiln_status_free(p->end_status);
    p->end_status = NULL;
    put_end(p, KILN_STATUS(KILN_STATUS_INTERNAL, "PutSource: cannot queue work on the thread pool"));
  }
}

static void on_data(kilnd_stream_t *stream, const ProtobufCMessage *message, kiln_status_t status,
                    void *user) {
  (void)stream;
  put_t *p = user;
  if (status) {
    put_fail(p, status);
    return;
  }
  if (!message) { /* the client half-closed: all bytes are in */
    put_queue(p, JOB_COMMIT);
    return;
  }
  const Kiln__V1__PutSourceChunk *chunk = (const Kiln__V1__PutSourceChunk *)message;
  if (chunk->chunk_case != KILN__V1__PUT_SOURCE_CHUNK__CHUNK_DATA) {
    put_fail(p, KILN_STATUS(KILN_STATUS_INVALID_ARGUMENT,
                            "PutSource: source %s: only the first message may carry metadata; "
                            "every later one carries data",
                            p->digest));
    return;
  }
  uint64_t max = kilnd_chunk_size(p->env->settings);
  if (chunk->data.len == 0 || chunk->data.len > max) {
    put_fail(p, KILN_STATUS(KILN_STATUS_INVALID_ARGUMENT,
                            "PutSource: source %s: a data chunk of %zu bytes; send 1..%llu bytes "
                            "per message (chunk_size_bytes)",
                            p->digest, chunk->data.len, (unsigned long long)max));
    return;
  }
  p->data = chunk->data.data;
  p->len = chunk->data.len;
  put_queue(p, JOB_WRITE);
}

static void put_recv_next(put_t *p) {
  kiln_status_t st = kilnd_stream_recv(p->stream, &kiln__v1__put_source_chunk__descriptor, on_data, p);
  if (st) put_fail(p, st);
}

/* Checks the first message's metadata; NULL when it may be uploaded. */
static KILN_MUST_USE kiln_status_t check_metadata(const Kiln__V1__PutSourceChunk *chunk) {
  if (chunk->chunk_case != KILN__V1__PUT_SOURCE_CHUNK__CHUNK_METADATA) {
    return KILN_STATUS(KILN_STATUS_INVALID_ARGUMENT,
                       "PutSource: the first message must carry `metadata` (digest, size_bytes, "
                       "format, name); data follows in later messages");
  }
  const Kiln__V1__SourceMetadata *m = chunk->metadata;
  if (!kiln_digest_is_valid_hex(m->digest)) {
    return KILN_STATUS(KILN_STATUS_INVALID_ARGUMENT,
                       "PutSource: metadata.digest '%.80s' is not 64 lowercase hex characters "
                       "(the SHA-256 of the source, without a 'sha256:' prefix)",
                       m->digest);
  }
  if (m->size_bytes == 0) {
    return KILN_STATUS(KILN_STATUS_INVALID_ARGUMENT,
                       "PutSource: metadata.size_bytes is 0; give the source's exact size (a "
                       "source has at least one byte)");
  }
  if (m->size_bytes > KILND_MAX_SOURCE_BYTES) {
    return KILN_STATUS(KILN_STATUS_RESOURCE_EXHAUSTED,
                       "PutSource: source %s is %llu bytes, over this server's max_source_bytes "
                       "(%llu)",
                       m->digest, (unsigned long long)m->size_bytes,
                       (unsigned long long)KILND_MAX_SOURCE_BYTES);
  }
  if (m->format != KILN__V1__SOURCE_FORMAT__SOURCE_FORMAT_UNSPECIFIED &&
      m->format != KILN__V1__SOURCE_FORMAT__SOURCE_FORMAT_MLIR_TEXT &&
      m->format != KILN__V1__SOURCE_FORMAT__SOURCE_FORMAT_MLIR_BYTECODE) {
    return KILN_STATUS(KILN_STATUS_INVALID_ARGUMENT,
                       "PutSource: metadata.format %d is not a SourceFormat (0: detect, 1: MLIR "
                       "text, 2: MLIR bytecode)",
                       (int)m->format);
  }
  if (strlen(m->name) > MAX_NAME_BYTES) {
    return KILN_STATUS(KILN_STATUS_INVALID_ARGUMENT, "PutSource: metadata.name is %zu bytes, at most %d",
                       strlen(m->name), MAX_NAME_BYTES);
  }
  return NULL;
}

static void on_metadata(kilnd_stream_t *stream, const ProtobufCMessage *message, kiln_status_t status,
                        void *user) {
  put_t *p = user;
  if (!status && !message) {
    status =
        KILN_STATUS(KILN_STATUS_INVALID_ARGUMENT, "PutSource: no messages; the first must carry `metadata`");
  }
  if (!status) status = check_metadata((const Kiln__V1__PutSourceChunk *)message);
  if (!status) { /* client-max-request-bytes bounds the whole upload, refused before any data */
    const kilnd_call_ctx_t *ctx = kilnd_stream_ctx(stream);
    status = kilnd_jobs_check_request_bytes(p->env->jobs, ctx->client,
                                            ((const Kiln__V1__PutSourceChunk *)message)->metadata->size_bytes,
                                            p->env->settings->client_max_request_bytes);
    if (status) status = kiln_status_annotate(status, "PutSource: metadata.size_bytes");
  }
  if (status) {
    put_end(p, status);
    return;
  }
  const Kiln__V1__SourceMetadata *m = ((const Kiln__V1__PutSourceChunk *)message)->metadata;
  memcpy(p->digest, m->digest, sizeof p->digest);
  p->size = m->size_bytes;
  p->declared = (int)m->format;
  kilnd_source_check_init(&p->check, p->declared);
  p->name = *m->name ? kiln_strdup(m->name) : NULL; /* stored as "no name" */
  if (!p->env->cache) {
    put_end(p, KILN_STATUS(KILN_STATUS_INTERNAL, "PutSource served without a cache (daemon bug)"));
    return;
  }
  (void)stream;
  put_queue(p, JOB_BEGIN);
}

void kilnd_rpc_put_source(const kilnd_rpc_env_t *env, kilnd_stream_t *stream,
                          const ProtobufCMessage *request) {
  (void)request; /* client-streaming: messages come through kilnd_stream_recv */
  put_t *p = kiln_calloc(1, sizeof *p);
  p->env = env;
  p->stream = stream;
  atomic_init(&p->cancelled, false);
  if (kilnd_stream_on_cancel(stream, on_put_cancel, p)) {
    put_end(p, KILN_STATUS(KILN_STATUS_CANCELLED, "PutSource: the client cancelled the upload"));
    return;
  }
  kiln_status_t st = kilnd_stream_recv(stream, &kiln__v1__put_source_chunk__descriptor, on_metadata, p);
  if (st) put_end(p, st);
}
