/* The RPC method table and the environment handlers run in.
 *
 * A unary handler is a function from a decoded request to a response built in the
 * call's arena (kiln_arena_t): it allocates every field there and frees nothing.
 * The server decodes, calls the handler, encodes, sends, counts and logs.
 * Handlers run on the loop thread and must not block, unless their method is
 * marked `offload`: then they run on libuv's thread pool and may block (SQLite,
 * disk, hashing), checking kilnd_call_should_stop() in long loops.
 * A streaming method (kind != KILND_METHOD_UNARY) has a `stream` entry point
 * instead, which drives a kilnd_stream_t (stream.h) from the loop thread.
 * Thread-safety: see each type.
 */
#ifndef KILN_DAEMON_RPC_H
#define KILN_DAEMON_RPC_H

#include <protobuf-c/protobuf-c.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>

#include "base/arena.h"
#include "base/status.h"
#include "cache/cache.h"
#include "compiler/targets.h"
#include "daemon/auth.h"
#include "daemon/settings.h"
#include "daemon/stats.h"

/* What handlers may read about the server. Owned by the server; borrowed.
 * Offloaded handlers (kilnd_method_t.offload) run on a worker thread and may use
 * only `settings` (read-only after start-up), `cache` (thread-safe), the
 * thread-safe calls of `jobs`, and the fields fixed at start-up
 * (`start_unix_ms`, `start_monotonic_ns`, `hostname`); the rest is loop-thread
 * state. */
typedef struct kilnd_rpc_env_s {
  const kilnd_settings_t *settings;
  kiln_cache_t *cache; /* thread-safe */
  const kilnd_stats_t *stats;
  int64_t start_unix_ms;
  int64_t start_monotonic_ns;
  const char *hostname;
  bool draining;                       /* SIGTERM received: finishing in-flight calls */
  struct kilnd_jobs_s *jobs;           /* the job engine (jobs.h); submit is thread-safe */
  struct kilnd_downloads_s *downloads; /* open GetArtifact calls per client; chunk buffers */
} kilnd_rpc_env_t;

/* The GetArtifact calls open per client, for client-max-downloads (loop thread
 * only), and the free list of their chunk buffers (any thread: gRPC gives them
 * back). Destroy frees it once gRPC has given back the last buffer it holds. */
typedef struct kilnd_downloads_s kilnd_downloads_t;
kilnd_downloads_t *kilnd_downloads_create(void);
void kilnd_downloads_destroy(kilnd_downloads_t *downloads);

/* What a handler knows about the call it serves. Owned by the server; borrowed
 * for the duration of the handler. */
typedef struct kilnd_call_ctx_s {
  kiln_arena_t *arena;           /* everything the response needs is allocated here */
  int64_t deadline_monotonic_ns; /* the client's deadline (kiln_time_monotonic_ns clock) */
  const atomic_bool *stopping;   /* set when the server cancels in-flight work */
  const char *client;            /* who is calling: the peer address (in the arena), the
                                    job engine's fairness key */
  /* False while a `try_on_loop` handler runs on the loop: it must not block, and
   * when it cannot answer without blocking it sets *run_off_loop and returns NULL
   * with no response; the server then runs it again on the thread pool. */
  bool may_block;
  bool *run_off_loop;
  void *owner; /* the server's own record of the call; NULL outside a server */
  /* The call's request id (the client's x-request-id, or one kilnd made up); kilnd
   * logs it with the call and returns it as kiln-request-id metadata. NULL outside
   * a server. */
  const char *request_id;
} kilnd_call_ctx_t;

/* Request ids: what the client may send, and what kilnd answers with. */
#define KILND_REQUEST_ID_HEADER_IN  "x-request-id"
#define KILND_REQUEST_ID_HEADER_OUT "kiln-request-id"
#define KILND_ID_MAX                128

/* An identifier as kiln.proto defines them (job_id, request_id, item_id, and the
 * x-request-id header): 1 to 128 visible ASCII characters (0x21..0x7e). NULL, or
 * INVALID_ARGUMENT naming `field` and the first bad byte. Thread-safe. */
KILN_MUST_USE kiln_status_t kilnd_id_check(const char *field, const char *id, size_t len);

/* A label as kiln.proto defines it, one rule for every method that takes labels
 * (Compile, Recompile, FindArtifacts): a key of 1..63 bytes of [a-z0-9._/-]
 * starting with a letter or digit, a value of at most 256 bytes (UTF-8, which
 * wire_check.c enforces for every string). INVALID_ARGUMENT naming `what` and
 * the key otherwise. Thread-safe. */
#define KILND_LABEL_KEY_MAX   63
#define KILND_LABEL_VALUE_MAX 256
KILN_MUST_USE kiln_status_t kilnd_label_check(const char *what, const char *key, const char *value);

/* True once the call's deadline has passed or the server is cancelling in-flight
 * work: long handlers stop and return. Thread-safe. */
bool kilnd_call_should_stop(const kilnd_call_ctx_t *call);

/* Sends `packed` (a kiln.v1.DiagnosticList, in the call's arena) with the call's
 * status as the trailing metadata `kiln-diagnostics-bin` (kiln.proto: when source
 * content is refused). From the thread running the handler, before the status
 * goes out (the handler's return, kilnd_stream_finish); the last call wins. */
void kilnd_call_set_diagnostics(const kilnd_call_ctx_t *call, const uint8_t *packed, size_t len);

/* Builds the response for `request` in call->arena. On success *out_response is
 * set; on failure the returned status is the call's gRPC status. */
typedef kiln_status_t (*kilnd_unary_fn_t)(const kilnd_rpc_env_t *env, const kilnd_call_ctx_t *call,
                                          const ProtobufCMessage *request, ProtobufCMessage **out_response);

/* How a method's messages flow (the contract's `stream` keywords). */
typedef enum kilnd_method_kind_e {
  KILND_METHOD_UNARY = 0,            /* one request, one response: `handler` */
  KILND_METHOD_SERVER_STREAMING = 1, /* one request, a stream of responses: `stream` */
  KILND_METHOD_CLIENT_STREAMING = 2, /* a stream of requests, one response: `stream` */
  KILND_METHOD_BIDI_STREAMING = 3,   /* streams both ways: `stream` */
} kilnd_method_kind_t;

typedef struct kilnd_stream_s kilnd_stream_t; /* stream.h */

/* A streaming method's entry point; the same type as stream.h's kilnd_stream_fn_t. */
typedef void (*kilnd_method_stream_fn_t)(const kilnd_rpc_env_t *env, kilnd_stream_t *stream,
                                         const ProtobufCMessage *request);

/* One method of the contracts kilnd speaks: a row of rpc.c's table, the one place
 * that says which paths exist, what they take, who may call them (auth.c reads
 * `role`) and how kilnd serves them. */
typedef struct kilnd_method_s {
  const char *path; /* "/kiln.v1.Kiln/GetServerInfo" */
  /* The request type; for client- and bidi-streaming methods the type of each
   * client message (the contract's input type). */
  const ProtobufCMessageDescriptor *request_descriptor;
  kilnd_role_t role;        /* what a caller's token must grant */
  kilnd_unary_fn_t handler; /* unary methods; NULL for streaming ones */
  /* The handler blocks (SQLite, disk, hashing): run it on libuv's thread pool, never
   * on the loop. Unary methods only: streaming handlers offload their own work. */
  bool offload;
  /* With `offload`: call the handler on the loop first (may_block false), and go to
   * the pool only when it asks to (a Compile answered from memory needs no thread
   * hop). */
  bool try_on_loop;
  kilnd_method_kind_t kind;        /* the contract's `stream` keywords */
  kilnd_method_stream_fn_t stream; /* streaming methods; NULL for unary ones */
  /* Non-NULL for a method of the contract this build does not serve (no handler
   * and no stream): the capability it comes with, for the UNIMPLEMENTED message. */
  const char *capability;
} kilnd_method_t;

/* Every method of the kiln.v1.Kiln and grpc.health.v1.Health contracts, served or
 * not; borrowed, static storage. Thread-safe. */
const kilnd_method_t *kilnd_rpc_methods(size_t *out_count);

/* The row for `path`, or NULL for a path outside the contracts. Thread-safe. */
const kilnd_method_t *kilnd_rpc_method_find(const char *path);

/* True when this build serves `method` (it has a handler or a stream entry). */
static inline bool kilnd_method_served(const kilnd_method_t *method) {
  return method->handler || method->stream;
}

/* The message for a method of the contract this build does not serve, or for a
 * path that is not in the contract at all. Thread-safe. */
KILN_MUST_USE kiln_status_t kilnd_rpc_unserved(const char *path);

/* Handlers (one rpc_<method>.c each). GetServerInfo is tried on the loop and goes
 * to the pool only to wait for the first worker's Hello (the compiler identity). */
KILN_MUST_USE kiln_status_t kilnd_rpc_get_server_info(const kilnd_rpc_env_t *env,
                                                      const kilnd_call_ctx_t *call,
                                                      const ProtobufCMessage *request,
                                                      ProtobufCMessage **out_response);
KILN_MUST_USE kiln_status_t kilnd_rpc_get_stats(const kilnd_rpc_env_t *env, const kilnd_call_ctx_t *call,
                                                const ProtobufCMessage *request,
                                                ProtobufCMessage **out_response);
/* Cache administration; offloaded. */
KILN_MUST_USE kiln_status_t kilnd_rpc_get_cache_stats(const kilnd_rpc_env_t *env,
                                                      const kilnd_call_ctx_t *call,
                                                      const ProtobufCMessage *request,
                                                      ProtobufCMessage **out_response);
KILN_MUST_USE kiln_status_t kilnd_rpc_verify_cache(const kilnd_rpc_env_t *env, const kilnd_call_ctx_t *call,
                                                   const ProtobufCMessage *request,
                                                   ProtobufCMessage **out_response);
KILN_MUST_USE kiln_status_t kilnd_rpc_collect_garbage(const kilnd_rpc_env_t *env,
                                                      const kilnd_call_ctx_t *call,
                                                      const ProtobufCMessage *request,
                                                      ProtobufCMessage **out_response);
KILN_MUST_USE kiln_status_t kilnd_rpc_pin_artifact(const kilnd_rpc_env_t *env, const kilnd_call_ctx_t *call,
                                                   const ProtobufCMessage *request,
                                                   ProtobufCMessage **out_response);
KILN_MUST_USE kiln_status_t kilnd_rpc_unpin_artifact(const kilnd_rpc_env_t *env, const kilnd_call_ctx_t *call,
                                                     const ProtobufCMessage *request,
                                                     ProtobufCMessage **out_response);
KILN_MUST_USE kiln_status_t kilnd_rpc_health_check(const kilnd_rpc_env_t *env, const kilnd_call_ctx_t *call,
                                                   const ProtobufCMessage *request,
                                                   ProtobufCMessage **out_response);
/* Artifacts and sources: FindArtifacts (unary, offloaded); GetArtifact
 * (server-streaming) and PutSource (client-streaming) run their disk and SQLite
 * work on the thread pool themselves. */
KILN_MUST_USE kiln_status_t kilnd_rpc_find_artifacts(const kilnd_rpc_env_t *env, const kilnd_call_ctx_t *call,
                                                     const ProtobufCMessage *request,
                                                     ProtobufCMessage **out_response);
void kilnd_rpc_get_artifact(const kilnd_rpc_env_t *env, kilnd_stream_t *stream,
                            const ProtobufCMessage *request);
void kilnd_rpc_put_source(const kilnd_rpc_env_t *env, kilnd_stream_t *stream,
                          const ProtobufCMessage *request);
/* The compile service: Compile (rpc_compile.c; unary, tried on the loop, offloaded
 * when admission must hash and store the source or query SQLite), CancelJob
 * (rpc_cancel_job.c; unary, on the loop) and WatchJob (rpc_watch_job.c;
 * server-streaming). */
KILN_MUST_USE kiln_status_t kilnd_rpc_compile(const kilnd_rpc_env_t *env, const kilnd_call_ctx_t *call,
                                              const ProtobufCMessage *request,
                                              ProtobufCMessage **out_response);
KILN_MUST_USE kiln_status_t kilnd_rpc_cancel_job(const kilnd_rpc_env_t *env, const kilnd_call_ctx_t *call,
                                                 const ProtobufCMessage *request,
                                                 ProtobufCMessage **out_response);
void kilnd_rpc_watch_job(const kilnd_rpc_env_t *env, kilnd_stream_t *stream, const ProtobufCMessage *request);
/* Recompile (rpc_recompile.c): bidi-streaming bulk recompile of legacy VMFBs; each
 * item is resolved on the thread pool and compiled as a job of its own. */
void kilnd_rpc_recompile(const kilnd_rpc_env_t *env, kilnd_stream_t *stream, const ProtobufCMessage *request);

/* ---- limits and keys shared by the artifact and source RPCs (and Compile) ---- */

/* Largest data chunk PutSource accepts and GetArtifact sends (the contract's
 * chunk_size_bytes), unless max-message-bytes is smaller: see kilnd_chunk_size. */
#define KILND_CHUNK_SIZE_BYTES ((uint64_t)2 << 20)
/* The chunk size this server uses: KILND_CHUNK_SIZE_BYTES, or less when
 * max-message-bytes leaves no room for it (a chunk message must fit). GetServerInfo
 * reports it as chunk_size_bytes. Thread-safe. */
uint64_t kilnd_chunk_size(const kilnd_settings_t *settings);
/* Largest source PutSource accepts (the contract's max_source_bytes); a larger
 * size_bytes is RESOURCE_EXHAUSTED before any data is read. */
#define KILND_MAX_SOURCE_BYTES ((uint64_t)2 << 30)
/* The cache key of (source, target, flags) as GetArtifact and Recompile look it up:
 * `source_digest` names the source as uploaded, or is the digest of its normal
 * form (kiln_cache_source_key_digest resolves it to the key digest); the rest is
 * kilnd_jobs_key_parts (jobs.h), the one assembly of a key that admission uses
 * too, with `compiler` the workers' identity (kilnd_jobs_compiler) and the flags
 * as kilnd_flags_normalize returned them. INVALID_ARGUMENT for a malformed part.
 * Blocking (the cache's index); needs env->jobs; thread-safe. */
KILN_MUST_USE kiln_status_t kilnd_artifact_key(const kilnd_rpc_env_t *env, const char *compiler,
                                               const char *source_digest, const kiln_target_t *target,
                                               char *const *normalized_flags, size_t n_flags,
                                               kiln_digest_hex_t *out_key);

/* ArtifactMetadata for an index row, allocated in `arena`. Thread-safe for
 * distinct arenas. */
struct Kiln__V1__ArtifactMetadata;
struct Kiln__V1__ArtifactMetadata *kilnd_artifact_metadata(kiln_arena_t *arena,
                                                           const kiln_index_artifact_t *record);

#endif /* KILN_DAEMON_RPC_H */
