/* The RPC method table and the environment handlers run in.
 *
 * A unary handler is a function from a decoded request to a response built in the
 * call's arena (kiln_arena_t): it allocates every field there and frees nothing.
 * The server decodes, calls the handler, encodes, sends, counts and logs.
 * Handlers run on the loop thread and must not block, unless their method is
 * marked `offload`: then they run on libuv's thread pool and may block (SQLite,
 * disk, hashing), checking kilnd_call_should_stop() in long loops.
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
#include "daemon/settings.h"
#include "daemon/stats.h"

/* What handlers may read about the server. Owned by the server; borrowed.
 * Offloaded handlers (kilnd_method_t.offload) run on a worker thread and may use
 * only `settings` (read-only after start-up) and `cache` (thread-safe); the rest
 * is loop-thread state. */
typedef struct kilnd_rpc_env_s {
  const kilnd_settings_t *settings;
  kiln_cache_t *cache; /* thread-safe */
  const kilnd_stats_t *stats;
  int64_t start_unix_ms;
  int64_t start_monotonic_ns;
  const char *hostname;
  bool draining; /* SIGTERM received: finishing in-flight calls */
} kilnd_rpc_env_t;

/* What a handler knows about the call it serves. Owned by the server; borrowed
 * for the duration of the handler. */
typedef struct kilnd_call_ctx_s {
  kiln_arena_t *arena;            /* everything the response needs is allocated here */
  int64_t deadline_monotonic_ns;  /* the client's deadline (kiln_time_monotonic_ns clock) */
  const atomic_bool *stopping;    /* set when the server cancels in-flight work */
} kilnd_call_ctx_t;

/* True once the call's deadline has passed or the server is cancelling in-flight
 * work: long handlers stop and return. Thread-safe. */
bool kilnd_call_should_stop(const kilnd_call_ctx_t *call);

/* Builds the response for `request` in call->arena. On success *out_response is
 * set; on failure the returned status is the call's gRPC status. */
typedef kiln_status_t (*kilnd_unary_fn_t)(const kilnd_rpc_env_t *env, const kilnd_call_ctx_t *call,
                                          const ProtobufCMessage *request,
                                          ProtobufCMessage **out_response);

typedef struct kilnd_method_s {
  const char *path; /* "/kiln.v1.Kiln/GetServerInfo" */
  const ProtobufCMessageDescriptor *request_descriptor;
  kilnd_unary_fn_t handler;
  /* The handler blocks (SQLite, disk, hashing): run it on libuv's thread pool, never
   * on the loop. */
  bool offload;
} kilnd_method_t;

/* Methods this kilnd serves; borrowed, static storage. Thread-safe. */
const kilnd_method_t *kilnd_rpc_methods(size_t *out_count);

/* Every method of the kiln.v1 and grpc.health.v1 contracts, served or not, so that
 * stats can name known-but-unserved methods. NULL-terminated, static. Thread-safe. */
const char *const *kilnd_rpc_known_paths(void);

/* The message for a method of the contract this build does not serve, or for a
 * path that is not in the contract at all. Thread-safe. */
kiln_status_t kilnd_rpc_unserved(const char *path);

/* Handlers (one rpc_<method>.c each). */
kiln_status_t kilnd_rpc_get_server_info(const kilnd_rpc_env_t *env, const kilnd_call_ctx_t *call,
                                        const ProtobufCMessage *request,
                                        ProtobufCMessage **out_response);
kiln_status_t kilnd_rpc_get_stats(const kilnd_rpc_env_t *env, const kilnd_call_ctx_t *call,
                                  const ProtobufCMessage *request, ProtobufCMessage **out_response);
/* Cache administration; offloaded. */
kiln_status_t kilnd_rpc_get_cache_stats(const kilnd_rpc_env_t *env, const kilnd_call_ctx_t *call,
                                        const ProtobufCMessage *request,
                                        ProtobufCMessage **out_response);
kiln_status_t kilnd_rpc_verify_cache(const kilnd_rpc_env_t *env, const kilnd_call_ctx_t *call,
                                     const ProtobufCMessage *request,
                                     ProtobufCMessage **out_response);
kiln_status_t kilnd_rpc_collect_garbage(const kilnd_rpc_env_t *env, const kilnd_call_ctx_t *call,
                                        const ProtobufCMessage *request,
                                        ProtobufCMessage **out_response);
kiln_status_t kilnd_rpc_pin_artifact(const kilnd_rpc_env_t *env, const kilnd_call_ctx_t *call,
                                     const ProtobufCMessage *request,
                                     ProtobufCMessage **out_response);
kiln_status_t kilnd_rpc_unpin_artifact(const kilnd_rpc_env_t *env, const kilnd_call_ctx_t *call,
                                       const ProtobufCMessage *request,
                                       ProtobufCMessage **out_response);
kiln_status_t kilnd_rpc_health_check(const kilnd_rpc_env_t *env, const kilnd_call_ctx_t *call,
                                     const ProtobufCMessage *request,
                                     ProtobufCMessage **out_response);

#endif /* KILN_DAEMON_RPC_H */
