/* GetArtifact: one artifact, streamed as a metadata message and then data chunks;
 * and the helpers the artifact RPCs share (cache keys, ArtifactMetadata).
 *
 * Flow (a server-streaming handler on the loop; every SQLite and disk step runs on
 * libuv's pool, and the loop only sends):
 *   validate -> OPEN (pool: find the row by digest or by key, open the cache's
 *   verifying reader, check the range) -> send metadata -> READ (pool: the next
 *   chunks of the range, at most kilnd_chunk_size each, as many as the read-ahead
 *   has room for) -> send them one by one, the next READ running while they go
 *   -> ... -> finish.
 * Memory: at most three chunk buffers per download, one on the wire and
 * READ_AHEAD (2) read ahead of it, taken from and given back to a small free list
 * (kilnd_downloads_t), and a small scratch buffer for verification; reads stop
 * while READ_AHEAD chunks wait for the wire, so HTTP/2 flow control holds a slow
 * client's download at three chunks however large the artifact is.
 *
 * Verification (docs/design/cache.md, invariant 3): the reader hashes from byte 0
 * and reports DATA_LOSS on the read that reaches the end (the blob is then already
 * quarantined by the cache). So a range is read from the start of the blob (bytes
 * before `offset` are hashed and dropped), and once the range's last byte is in the
 * buffer the rest of the blob is read and dropped too, before that last chunk is
 * sent: the stream ends OK only for a blob that verified, and the last chunk of a
 * corrupt blob is never sent. A small range of a large blob therefore costs a read
 * of the whole blob. An empty range (offset == size) sends the metadata only and
 * reads nothing.
 *
 * Cancellation: on_cancel sets an atomic flag that the pool work polls between
 * reads; whichever step is outstanding (a pool job or a send) then ends the call.
 */
#include <stdatomic.h>
#include <stddef.h>
#include <stdio.h>
#include <string.h>
#ifdef __GLIBC__
#include <malloc.h>
#endif
#include <uv.h>

#include "base/alloc.h"
#include "base/digest.h"
#include "compiler/targets.h"
#include "daemon/flags.h"
#include "daemon/jobs.h"
#include "daemon/rpc.h"
#include "daemon/stream.h"
#include "kiln/v1/kiln.pb-c.h"
#include "proto/wire.h"

/* ---- shared helpers --------------------------------------------------------------- */

uint64_t kilnd_chunk_size(const kilnd_settings_t *settings) {
  /* A data message is the bytes plus a few tag and length bytes; 1 KiB is room to
   * spare. max-message-bytes is at least 64 KiB (settings.c). */
  uint64_t room = settings->max_message_bytes > 1024 ? settings->max_message_bytes - 1024 : 1;
  return room < KILND_CHUNK_SIZE_BYTES ? room : KILND_CHUNK_SIZE_BYTES;
}

kiln_status_t kilnd_artifact_key(const kilnd_rpc_env_t *env, const char *compiler, const char *source_digest,
                                 const kiln_target_t *target, char *const *normalized_flags, size_t n_flags,
                                 kiln_digest_hex_t *out_key) {
  kiln_digest_hex_t source;
  KILN_RETURN_IF_ERROR(kiln_cache_source_key_digest(env->cache, source_digest, &source));
  kiln_cache_key_parts_t parts;
  kilnd_jobs_key_parts(env->jobs, compiler, source.text, target->id, (const char *const *)normalized_flags,
                       n_flags, &parts);
  return kiln_cache_key_compute(&parts, out_key);
}

/* Fills `id` from a cache key's compiler string "<name> <version> llvm <llvm>";
 * anything else goes into name whole. */
static void set_compiler(kiln_arena_t *arena, const char *compiler, Kiln__V1__CompilerIdentity *id) {
  char name[128], version[64], llvm[16], llvm_version[64];
  char rest;
  if (compiler &&
      sscanf(compiler, "%127s %63s %15s %63s %c", name, version, llvm, llvm_version, &rest) == 4 &&
      strcmp(llvm, "llvm") == 0) {
    id->name = kiln_arena_strdup(arena, name);
    id->version = kiln_arena_strdup(arena, version);
    id->llvm_version = kiln_arena_strdup(arena, llvm_version);
    id->mlir_version = id->llvm_version; /* MLIR ships with LLVM */
  } else {
    id->name = kiln_arena_strdup(arena, compiler ? compiler : "");
  }
}

Kiln__V1__ArtifactMetadata *kilnd_artifact_metadata(kiln_arena_t *arena, const kiln_index_artifact_t *rec) {
  Kiln__V1__ArtifactMetadata *m = kiln_arena_alloc(arena, sizeof *m);
  kiln__v1__artifact_metadata__init(m);
  m->digest = kiln_arena_strdup(arena, rec->artifact_digest);
  m->canonical_target = kiln_arena_strdup(arena, rec->target ? rec->target : "");
  const kiln_target_t *target = kiln_compiler_target_find(rec->target);
  if (target) {
    m->target_kind = (Kiln__V1__TargetKind)target->kind;
    m->executable_format = kiln_arena_strdup(arena, target->executable_format);
  }
  m->hal_module_version = rec->hal_version;
  m->vm_bytecode_version_major = rec->bytecode_version >> 16;
  m->vm_bytecode_version_minor = rec->bytecode_version & 0xffff;
  m->size_bytes = rec->size;
  m->created_unix_ms = rec->created_ms;
  m->last_used_unix_ms = rec->last_access_ms;
  m->cache_key = kiln_arena_strdup(arena, rec->cache_key);

  Kiln__V1__Provenance *p = kiln_arena_alloc(arena, sizeof *p);
  kiln__v1__provenance__init(p);
  /* The index keeps the key's source part (the digest Compile keyed it by). */
  p->source_digest = kiln_arena_strdup(arena, rec->source_digest);
  /* Normalized flags are stored one per line ("" for none). */
  const char *flags = rec->flags ? rec->flags : "";
  size_t n = 0;
  if (*flags) {
    n = 1;
    for (const char *c = flags; *c; c++) n += *c == '\n';
  }
  p->flags = kiln_arena_calloc(arena, n ? n : 1, sizeof(char *));
  const char *start = flags;
  for (size_t i = 0; i < n; i++) {
    const char *end = strchr(start, '\n');
    size_t len = end ? (size_t)(end - start) : strlen(start);
    char *flag = kiln_arena_alloc(arena, len + 1);
    memcpy(flag, start, len);
    flag[len] = '\0';
    p->flags[p->n_flags++] = flag;
    start += len + (end ? 1 : 0);
  }
  Kiln__V1__CompilerIdentity *compiler = kiln_arena_alloc(arena, sizeof *compiler);
  kiln__v1__compiler_identity__init(compiler);
  set_compiler(arena, rec->compiler, compiler);
  p->compiler = compiler;
  p->n_labels = rec->n_labels;
  p->labels = kiln_arena_calloc(arena, rec->n_labels ? rec->n_labels : 1, sizeof *p->labels);
  for (size_t i = 0; i < rec->n_labels; i++) {
    Kiln__V1__Provenance__LabelsEntry *e = kiln_arena_alloc(arena, sizeof *e);
    kiln__v1__provenance__labels_entry__init(e);
    e->key = kiln_arena_strdup(arena, rec->labels[i].key);
    e->value = kiln_arena_strdup(arena, rec->labels[i].value);
    p->labels[i] = e;
  }
  /* Recompile records what an artifact replaces as a label (rpc_recompile.c). */
  for (size_t i = 0; i < rec->n_labels; i++) {
    if (strcmp(rec->labels[i].key, "kiln.recompiled_from") == 0) {
      p->recompiled_from = p->labels[i]->value;
    }
  }
  if (rec->submitter) p->submitter = kiln_arena_strdup(arena, rec->submitter);
  p->job_id = kiln_arena_strdup(arena, rec->job_id ? rec->job_id : "");
  p->source_name = kiln_arena_strdup(arena, rec->source_name ? rec->source_name : "");
  m->provenance = p;
  return m;
}

/* ---- GetArtifact ---------------------------------------------------------------- */

enum { SCRATCH_BYTES = 128 * 1024 };

/* ---- open downloads per client (client-max-downloads) ---- */

typedef struct dl_client_s {
  char *client;
  uint32_t open;
  struct dl_client_s *next;
} dl_client_t;

/* Chunk buffers come back to a free list when gRPC has written them (from
 * whichever gRPC thread lets go of the slice), and the next read takes one from
 * it. A fresh buffer per chunk cost more than the download itself: glibc handed
 * 1 MiB blocks back to the kernel and every page of the next one faulted in again
 * (a 256 MiB download took 330 to 490 ms of kilnd's CPU, 120 to 150 ms with the
 * buffers reused; kiln_alloc_tune_for_transfers does the same for gRPC's own). */
typedef struct chunk_buf_s {
  struct kilnd_downloads_s *owner;
  struct chunk_buf_s *next; /* on the free list */
  size_t cap;
  max_align_t align[]; /* the data */
} chunk_buf_t;

/* Free buffers kept: enough for two downloads in flight (one chunk on the wire
 * and READ_AHEAD read ahead each); more are freed as they come back. */
#define CHUNKS_KEPT 6

struct kilnd_downloads_s {
  dl_client_t *clients; /* with a download open; few at a time */
  uint32_t open;
  uint32_t peak; /* most open at once since the last trim */

  /* The chunk buffers: any thread (gRPC releases them), under chunks_lock. */
  uv_mutex_t chunks_lock;
  chunk_buf_t *free_chunks;
  uint32_t n_free;
  uint32_t refs;  /* 1 for the server, 1 per buffer out: the last one frees this */
  bool destroyed; /* the server let go: buffers coming back are freed */
};

/* Open downloads that make it worth handing memory back when they are over (each
 * held up to three chunks); a lone download, the usual case, does not pay for a
 * trim. */
#define TRIM_AFTER_OPEN 4

kilnd_downloads_t *kilnd_downloads_create(void) {
  kilnd_downloads_t *d = kiln_calloc(1, sizeof *d);
  uv_mutex_init(&d->chunks_lock);
  d->refs = 1;
  return d;
}

/* Frees the free list; the caller holds chunks_lock. */
static void chunks_drop_locked(kilnd_downloads_t *d) {
  while (d->free_chunks) {
    chunk_buf_t *b = d->free_chunks;
    d->free_chunks = b->next;
    kiln_free(b);
  }
  d->n_free = 0;
}

/* Drops one reference; the last frees `d`. */
static void downloads_unref(kilnd_downloads_t *d) {
  uv_mutex_lock(&d->chunks_lock);
  bool last = --d->refs == 0;
  uv_mutex_unlock(&d->chunks_lock);
  if (!last) return;
  uv_mutex_destroy(&d->chunks_lock);
  kiln_free(d);
}

void kilnd_downloads_destroy(kilnd_downloads_t *d) {
  if (!d) return;
  while (d->clients) {
    dl_client_t *c = d->clients;
    d->clients = c->next;
    kiln_free(c->client);
    kiln_free(c);
  }
  uv_mutex_lock(&d->chunks_lock);
  d->destroyed = true;
  chunks_drop_locked(d);
  uv_mutex_unlock(&d->chunks_lock);
  downloads_unref(d); /* buffers gRPC still holds keep it until they come back */
}

/* A buffer of at least `cap` bytes for one chunk (any thread); without a free
 * list (`d` NULL), a plain one. */
static unsigned char *chunk_take(kilnd_downloads_t *d, size_t cap) {
  if (!d) {
    chunk_buf_t *b = kiln_malloc(sizeof *b + cap);
    b->owner = NULL;
    b->cap = cap;
    return (unsigned char *)b->align;
  }
  uv_mutex_lock(&d->chunks_lock);
  chunk_buf_t *b = d->free_chunks;
  if (b && b->cap >= cap) {
    d->free_chunks = b->next;
    d->n_free--;
  } else {
    b = NULL;
  }
  d->refs++;
  uv_mutex_unlock(&d->chunks_lock);
  if (!b) {
    b = kiln_malloc(sizeof *b + cap);
    b->owner = d;
    b->cap = cap;
  }
  return (unsigned char *)b->align;
}

/* Gives a chunk_take buffer back (any thread: gRPC calls it once the slice that
 * holds the buffer is written). NULL is ignored. */
static void chunk_give(void *data) {
  if (!data) return;
  chunk_buf_t *b = (chunk_buf_t *)((unsigned char *)data - offsetof(chunk_buf_t, align));
  kilnd_downloads_t *d = b->owner;
  if (!d) {
    kiln_free(b);
    return;
  }
  uv_mutex_lock(&d->chunks_lock);
  if (!d->destroyed && d->n_free < CHUNKS_KEPT) {
    b->next = d->free_chunks;
    d->free_chunks = b;
    d->n_free++;
    b = NULL;
  }
  uv_mutex_unlock(&d->chunks_lock);
  kiln_free(b);
  downloads_unref(d);
}

/* The client's entry, counted as one more open download; NULL (nothing counted)
 * when it has `max` open already. */
static dl_client_t *downloads_enter(kilnd_downloads_t *d, const char *client, int64_t max) {
  dl_client_t *c = d->clients;
  while (c && strcmp(c->client, client) != 0) c = c->next;
  if (c && (int64_t)c->open >= max) return NULL;
  if (!c) {
    c = kiln_calloc(1, sizeof *c);
    c->client = kiln_strdup(client);
    c->next = d->clients;
    d->clients = c;
  }
  c->open++;
  if (++d->open > d->peak) d->peak = d->open;
  return c;
}

#ifdef __GLIBC__
/* Pool: glibc keeps freed chunk buffers in its arenas; hand them back. */
static void trim_work(uv_work_t *work) {
  (void)work;
  malloc_trim(0);
}

static void trim_done(uv_work_t *work, int status) {
  (void)status;
  kiln_free(work);
}
#endif

static void downloads_leave(kilnd_downloads_t *d, dl_client_t *c, uv_loop_t *loop) {
  if (!c) return;
  d->open--;
  if (--c->open == 0) {
    for (dl_client_t **p = &d->clients; *p; p = &(*p)->next) {
      if (*p == c) {
        *p = c->next;
        break;
      }
    }
    kiln_free(c->client);
    kiln_free(c);
  }
#ifdef __GLIBC__
  /* The last of many downloads ended: what they held (600 stalled streams took
   * gigabytes) would otherwise stay with kilnd after they closed. */
  if (d->open == 0 && d->peak >= TRIM_AFTER_OPEN) {
    d->peak = 0;
    uv_mutex_lock(&d->chunks_lock);
    chunks_drop_locked(d);
    uv_mutex_unlock(&d->chunks_lock);
    uv_work_t *w = kiln_calloc(1, sizeof *w);
    if (uv_queue_work(loop, w, trim_work, trim_done) != 0) kiln_free(w);
  }
#else
  (void)loop;
#endif
}

/* Chunks read ahead of the wire, filled by one pool job. A read used to start
 * only when the chunk before it went on the wire, so most sends waited for the
 * next read and its trips through the pool and the loop (a counter showed 150 to
 * 250 of a 256 MiB download's 257 sends waiting); with two chunks read ahead in
 * one trip, bench_service's GetArtifact went from about 0.64x of a raw TCP
 * loopback copy to about 0.75x. */
enum { READ_AHEAD = 2 };

typedef struct ready_chunk_s {
  unsigned char *data; /* chunk_take */
  size_t len;
  uint64_t offset; /* in the artifact */
} ready_chunk_t;

typedef struct get_s {
  const kilnd_rpc_env_t *env;
  kilnd_stream_t *stream;
  const kilnd_call_ctx_t *ctx;
  const Kiln__V1__GetArtifactRequest *req; /* in the call's arena: lives with the stream */
  size_t chunk;                            /* kilnd_chunk_size */
  const kiln_target_t *target;             /* by key */
  char **flags;                            /* by key: normalized (kilnd_flags_normalize) */
  size_t n_flags;
  uv_work_t work;
  atomic_bool cancelled;
  dl_client_t *download; /* counted in env->downloads */
  uv_timer_t stall;      /* download-stall-timeout, while a send is outstanding */

  /* Pool-side state: touched by the loop only while no work is queued. */
  kiln_index_artifact_t record;
  kiln_cache_reader_t *reader;
  uint64_t size;                   /* of the artifact */
  uint64_t end;                    /* of the range */
  uint64_t pos;                    /* bytes read from the reader so far */
  ready_chunk_t batch[READ_AHEAD]; /* the buffers a read job fills, in order */
  size_t n_batch;                  /* buffers given to the job */
  size_t n_filled;                 /* of them, holding range bytes */
  unsigned char *scratch;
  bool eof;             /* the reader verified the whole blob */
  kiln_status_t status; /* of the last pool job */

  /* Loop-side pipeline: one chunk on the wire, up to READ_AHEAD read and
   * waiting for it, the next being read whenever there is room. */
  bool reading;                    /* a pool job is queued */
  bool sending;                    /* a send is outstanding */
  ready_chunk_t ready[READ_AHEAD]; /* read and not yet sent, oldest first */
  size_t n_ready;
  bool all_read;         /* no more reads: the last chunk is ready or sent */
  kiln_status_t failure; /* ends the call once nothing is in flight */
} get_t;

static void get_free(uv_handle_t *handle) { kiln_free(handle->data); }

static void get_end(get_t *g, kiln_status_t status) {
  kiln_cache_reader_close(g->reader); /* a close and a mutex: fine on the loop */
  kiln_index_artifact_deinit(&g->record);
  for (size_t i = 0; i < g->n_batch; i++) chunk_give(g->batch[i].data);
  g->n_batch = 0;
  kiln_free(g->scratch);
  for (size_t i = 0; i < g->n_ready; i++) chunk_give(g->ready[i].data);
  g->n_ready = 0;
  kilnd_flags_free(g->flags, g->n_flags);
  kiln_status_free(g->status);
  kiln_status_free(g->failure);
  g->failure = NULL;
  downloads_leave(g->env->downloads, g->download, kilnd_stream_loop(g->stream));
  g->download = NULL;
  kilnd_stream_finish(g->stream, status);
  uv_close((uv_handle_t *)&g->stall, get_free); /* frees g: no stream callback runs after finish */
}

static void on_get_cancel(kilnd_stream_t *stream, void *user) {
  (void)stream;
  get_t *g = user;
  atomic_store(&g->cancelled, true);
}

/* Why pool work stops early, or NULL to go on. */
static KILN_MUST_USE kiln_status_t get_stop_reason(get_t *g) {
  if (atomic_load(&g->cancelled)) {
    return KILN_STATUS(KILN_STATUS_CANCELLED, "GetArtifact: the client cancelled the download");
  }
  if (!kilnd_call_should_stop(g->ctx)) return NULL;
  if (g->ctx->stopping && atomic_load(g->ctx->stopping)) {
    return KILN_STATUS(KILN_STATUS_UNAVAILABLE, "GetArtifact: kilnd is shutting down; resume with `offset`");
  }
  return KILN_STATUS(KILN_STATUS_DEADLINE_EXCEEDED,
                     "GetArtifact: the client's deadline passed; resume with `offset`");
}

/* Pool: find the row, open the reader, check the range. */
static void get_open_work(uv_work_t *work) {
  get_t *g = work->data;
  const Kiln__V1__GetArtifactRequest *req = g->req;
  kiln_cache_t *cache = g->env->cache;
  kiln_status_t st = NULL;
  if (!cache) {
    st = KILN_STATUS(KILN_STATUS_INTERNAL, "GetArtifact served without a cache (daemon bug)");
  } else if (req->selector_case == KILN__V1__GET_ARTIFACT_REQUEST__SELECTOR_DIGEST) {
    st = kiln_cache_artifact_get_by_digest(cache, req->digest, &g->record);
  } else {
    const Kiln__V1__ArtifactKey *key = req->key;
    kiln_digest_hex_t cache_key;
    memset(&cache_key, 0, sizeof cache_key);
    /* On the thread pool: wait for the first worker's identity, as Compile does. */
    const char *compiler = g->env->jobs ? kilnd_jobs_compiler_wait(g->env->jobs, 30000) : NULL;
    if (!compiler) {
      st = KILN_STATUS(
          KILN_STATUS_UNAVAILABLE,
          "no compile worker is ready yet, so the compiler identity (part of the key) is unknown; "
          "retry, or fetch by digest");
    } else {
      st = kilnd_artifact_key(g->env, compiler, key->source_digest, g->target, g->flags, g->n_flags,
                              &cache_key);
    }
    if (!st) st = kiln_cache_artifact_lookup(cache, cache_key.text, &g->record);
    if (kiln_status_code(st) == KILN_STATUS_NOT_FOUND) {
      kiln_status_free(st);
      st = KILN_STATUS(KILN_STATUS_NOT_FOUND,
                       "no artifact built for source %s, target %s (%s) and these %zu flags "
                       "under compiler '%s' (cache key %s): Compile it first",
                       key->source_digest, key->target, g->target->id, g->n_flags,
                       kilnd_jobs_compiler(g->env->jobs), cache_key.text);
    }
  }
  if (!st) {
    st = kiln_cache_open_blob(cache, g->record.artifact_digest, &g->reader);
    if (kiln_status_code(st) == KILN_STATUS_NOT_FOUND) {
      kiln_status_free(st);
      st = KILN_STATUS(KILN_STATUS_NOT_FOUND,
                       "artifact %s: its blob is gone (evicted or quarantined); Compile it "
                       "again",
                       g->record.artifact_digest);
    }
  }
  if (!st) {
    g->size = kiln_cache_reader_size(g->reader);
    if (req->offset > g->size) {
      st = KILN_STATUS(
          KILN_STATUS_OUT_OF_RANGE, "GetArtifact: offset %llu is past the end of artifact %s (%llu bytes)",
          (unsigned long long)req->offset, g->record.artifact_digest, (unsigned long long)g->size);
    } else {
      uint64_t left = g->size - req->offset;
      g->end = req->offset + (req->length == 0 || req->length > left ? left : req->length);
    }
  }
  g->status = st;
}

/* Pool: fills `c` with the next chunk of the range; after the range's last byte,
 * reads the rest of the blob so that the reader verifies it (g->eof). */
static KILN_MUST_USE kiln_status_t read_chunk(get_t *g, ready_chunk_t *c) {
  uint64_t offset = g->req->offset;
  const size_t cap = g->chunk;
  kiln_status_t st = NULL;
  c->len = 0;
  c->offset = g->pos;
  while (!st) {
    if ((st = get_stop_reason(g))) break;
    size_t n = 0;
    if (g->pos < offset) { /* before the range: hashed and dropped */
      uint64_t want = offset - g->pos < cap ? offset - g->pos : cap;
      st = kiln_cache_reader_read(g->reader, c->data, (size_t)want, &n);
      g->pos += n;
      c->offset = g->pos;
    } else if (g->pos < g->end) { /* the range */
      if (c->len == cap) break;   /* a full chunk */
      uint64_t want = g->end - g->pos < cap - c->len ? g->end - g->pos : cap - c->len;
      st = kiln_cache_reader_read(g->reader, c->data + c->len, (size_t)want, &n);
      g->pos += n;
      c->len += n;
    } else { /* the range is in hand: verify the rest before sending its end */
      if (!g->scratch) g->scratch = kiln_malloc(SCRATCH_BYTES);
      st = kiln_cache_reader_read(g->reader, g->scratch, SCRATCH_BYTES, &n);
      if (!st && n == 0) {
        g->eof = true;
        break;
      }
      g->pos += n;
      continue;
    }
    if (!st && n == 0) {
      /* The reader verified the blob, yet it ended before its recorded size. */
      st = KILN_STATUS(KILN_STATUS_DATA_LOSS, "artifact %s ended at byte %llu of %llu",
                       g->record.artifact_digest, (unsigned long long)g->pos, (unsigned long long)g->size);
    }
  }
  return st;
}

/* Pool: fills the batch's buffers in order, up to the verified end. */
static void get_read_work(uv_work_t *work) {
  get_t *g = work->data;
  kiln_status_t st = NULL;
  g->n_filled = 0;
  for (size_t i = 0; i < g->n_batch && !st && !g->eof; i++) {
    st = read_chunk(g, &g->batch[i]);
    if (!st && g->batch[i].len > 0) g->n_filled = i + 1;
  }
  g->status = st;
}

static void get_after_read(uv_work_t *work, int status);

/* Loop: a read job for every free place in the read-ahead, in one trip through
 * the pool. */
static void get_queue_read(get_t *g) {
  g->n_batch = READ_AHEAD - g->n_ready;
  for (size_t i = 0; i < g->n_batch; i++) {
    g->batch[i].data = chunk_take(g->env->downloads, g->chunk); /* back to the free list once sent */
  }
  g->work.data = g;
  g->reading = true;
  if (uv_queue_work(kilnd_stream_loop(g->stream), &g->work, get_read_work, get_after_read) != 0) {
    g->reading = false;
    g->all_read = true;
    if (!g->failure) g->failure = KILN_STATUS(KILN_STATUS_INTERNAL, "GetArtifact: cannot queue the read");
  }
}

static void on_get_sent(kilnd_stream_t *stream, bool ok, void *user);

/* The client took nothing for download-stall-timeout: end the download, so that
 * what it holds (a chunk on the wire, the ones read ahead) goes. */
static void on_stall(uv_timer_t *timer);

/* A send went out: the client has download-stall-timeout to take it. */
static void stall_watch(get_t *g) {
  int64_t stall_ms = g->env->settings->download_stall_timeout_ms;
  if (stall_ms > 0) uv_timer_start(&g->stall, on_stall, (uint64_t)stall_ms, 0);
}

static void on_stall(uv_timer_t *timer) {
  get_t *g = timer->data;
  char msg[160];
  snprintf(msg, sizeof msg,
           "GetArtifact: the client took no data for %lld ms (download-stall-timeout); the download was "
           "ended: resume it with `offset`",
           (long long)g->env->settings->download_stall_timeout_ms);
  if (!g->failure) g->failure = KILN_STATUS(KILN_STATUS_DEADLINE_EXCEEDED, "%s", msg);
  atomic_store(&g->cancelled, true); /* a read in flight stops early */
  kilnd_stream_abort(g->stream, KILN_STATUS_DEADLINE_EXCEEDED, msg);
}

/* Loop: whatever can happen next. The call ends once nothing is in flight and
 * either a failure is recorded or the last chunk went out; otherwise the oldest
 * ready chunk goes on the wire as soon as it is free, and the next read starts
 * whenever fewer than READ_AHEAD chunks wait. */
static void get_pump(get_t *g) {
  if (g->failure) {
    /* Wait for what is in flight: a read's pool job uses g, and a send keeps
     * the stall timer running, so a client that takes nothing still ends the
     * call after download-stall-timeout (gRPC completes every send batch). */
    if (g->reading || g->sending) return;
    kiln_status_t st = g->failure;
    g->failure = NULL;
    get_end(g, st);
    return;
  }
  if (!g->sending && g->n_ready > 0) {
    ready_chunk_t next = g->ready[0];
    memmove(&g->ready[0], &g->ready[1], (g->n_ready - 1) * sizeof g->ready[0]);
    g->n_ready--;
    /* ArtifactChunk: offset = 2 (varint), then data = 3 (the bytes, not copied). */
    uint8_t head[2 * KILN_WIRE_VARINT_MAX];
    size_t n = kiln_wire_put_key(head, 2, KILN_WIRE_VARINT);
    n += kiln_wire_put_varint(head + n, next.offset);
    g->sending = true;
    kiln_status_t st = kilnd_stream_send_bytes(g->stream, next.offset ? head : NULL, next.offset ? n : 0, 3,
                                               next.data, next.len, chunk_give, on_get_sent, g);
    if (st) {
      g->sending = false;
      g->failure = st;
      get_pump(g);
      return;
    }
    stall_watch(g);
  }
  if (!g->reading && !g->all_read && g->n_ready < READ_AHEAD) {
    get_queue_read(g);
    if (g->failure) {
      get_pump(g); /* the read could not be queued */
      return;
    }
  }
  if (!g->sending && !g->reading && g->n_ready == 0 && g->all_read) {
    get_end(g, NULL); /* everything sent and verified */
  }
}

static void on_get_sent(kilnd_stream_t *stream, bool ok, void *user) {
  (void)stream;
  get_t *g = user;
  g->sending = false;
  uv_timer_stop(&g->stall);
  if (!ok && !g->failure)
    g->failure = KILN_STATUS(KILN_STATUS_CANCELLED, "GetArtifact: the client went away");
  if (!ok) atomic_store(&g->cancelled, true); /* a read in flight stops early */
  get_pump(g);
}

static void get_after_read(uv_work_t *work, int status) {
  (void)status; /* nothing calls uv_cancel */
  get_t *g = work->data;
  g->reading = false;
  kiln_status_t st = g->status;
  g->status = NULL;
  /* Chunks after a failure are never sent: the stream ends with it. */
  size_t keep = st ? 0 : g->n_filled;
  for (size_t i = 0; i < g->n_batch; i++) {
    if (i < keep)
      g->ready[g->n_ready++] = g->batch[i];
    else
      chunk_give(g->batch[i].data);
  }
  g->n_batch = 0;
  if (st) {
    g->all_read = true;
    if (!g->failure)
      g->failure = st;
    else
      kiln_status_free(st);
  } else {
    g->all_read = g->eof; /* a job that filled nothing is only possible at a verified end */
  }
  get_pump(g);
}

static void get_after_open(uv_work_t *work, int status) {
  (void)status;
  get_t *g = work->data;
  g->reading = false;
  kiln_status_t st = g->status;
  g->status = NULL;
  if (st) {
    get_end(g, st);
    return;
  }
  /* The metadata lives in the call's arena: once per call. */
  Kiln__V1__ArtifactChunk first = KILN__V1__ARTIFACT_CHUNK__INIT;
  first.metadata = kilnd_artifact_metadata(kilnd_stream_ctx(g->stream)->arena, &g->record);
  first.metadata->size_bytes = g->size;
  first.offset = g->req->offset;
  g->pos = 0;
  g->sending = true;
  st = kilnd_stream_send(g->stream, &first.base, on_get_sent, g);
  if (st) {
    get_end(g, st);
    return;
  }
  stall_watch(g); /* the first message waits on the reader too */
  if (g->req->offset == g->end)
    g->all_read = true; /* an empty range: the metadata only */
  else
    get_queue_read(g); /* read the first chunk meanwhile */
}

void kilnd_rpc_get_artifact(const kilnd_rpc_env_t *env, kilnd_stream_t *stream,
                            const ProtobufCMessage *request) {
  const Kiln__V1__GetArtifactRequest *req = (const Kiln__V1__GetArtifactRequest *)request;
  const kiln_target_t *target = NULL;
  char **flags = NULL;
  size_t n_flags = 0;
  kiln_status_t st = NULL;
  switch (req->selector_case) {
    case KILN__V1__GET_ARTIFACT_REQUEST__SELECTOR_DIGEST:
      if (!kiln_digest_is_valid_hex(req->digest)) {
        st = KILN_STATUS(KILN_STATUS_INVALID_ARGUMENT,
                         "GetArtifact: digest '%.80s' is not 64 lowercase hex characters (the "
                         "SHA-256 of the VMFB, without a 'sha256:' prefix)",
                         req->digest);
      }
      break;
    case KILN__V1__GET_ARTIFACT_REQUEST__SELECTOR_KEY:
      if (!kiln_digest_is_valid_hex(req->key->source_digest)) {
        st = KILN_STATUS(KILN_STATUS_INVALID_ARGUMENT,
                         "GetArtifact: key.source_digest '%.80s' is not 64 lowercase hex "
                         "characters",
                         req->key->source_digest);
      }
      if (!st) {
        st = kiln_status_annotate(kiln_compiler_target_resolve(req->key->target, &target),
                                  "GetArtifact: key.target");
      }
      if (!st) {
        st = kiln_status_annotate(
            kilnd_flags_normalize((const char *const *)req->key->flags, req->key->n_flags, &flags, &n_flags),
            "GetArtifact: key.flags");
      }
      break;
    default:
      st = KILN_STATUS(KILN_STATUS_INVALID_ARGUMENT,
                       "GetArtifact: no selector; set `digest` (the artifact's digest) or `key` "
                       "(source_digest, target, flags)");
      break;
  }
  if (st) {
    kilnd_stream_finish(stream, st);
    return;
  }
  const kilnd_call_ctx_t *ctx = kilnd_stream_ctx(stream);
  const char *client = ctx->client ? ctx->client : "";
  dl_client_t *download =
      env->downloads ? downloads_enter(env->downloads, client, env->settings->client_max_downloads) : NULL;
  if (env->downloads && !download) {
    if (env->jobs) kilnd_jobs_limit_refused(env->jobs, KILND_LIMIT_DOWNLOADS, client);
    kilnd_flags_free(flags, n_flags);
    kilnd_stream_finish(stream, KILN_STATUS(KILN_STATUS_RESOURCE_EXHAUSTED,
                                            "GetArtifact: this client has %lld downloads open already "
                                            "(client-max-downloads = %lld): finish or cancel one first",
                                            (long long)env->settings->client_max_downloads,
                                            (long long)env->settings->client_max_downloads));
    return;
  }
  get_t *g = kiln_calloc(1, sizeof *g);
  g->env = env;
  g->stream = stream;
  g->ctx = ctx;
  g->download = download;
  uv_timer_init(kilnd_stream_loop(stream), &g->stall);
  g->stall.data = g;
  g->chunk = (size_t)kilnd_chunk_size(env->settings);
  g->req = req;
  g->target = target;
  g->flags = flags;
  g->n_flags = n_flags;
  atomic_init(&g->cancelled, false);
  if (kilnd_stream_on_cancel(stream, on_get_cancel, g)) {
    get_end(g, KILN_STATUS(KILN_STATUS_CANCELLED, "GetArtifact: the client cancelled the download"));
    return;
  }
  g->work.data = g;
  g->reading = true;
  if (uv_queue_work(kilnd_stream_loop(stream), &g->work, get_open_work, get_after_open) != 0) {
    get_end(g, KILN_STATUS(KILN_STATUS_INTERNAL, "GetArtifact: cannot queue the lookup"));
  }
}
