/* Cache administration RPCs: GetCacheStats, VerifyCache, CollectGarbage,
 * PinArtifact, UnpinArtifact. All offloaded: they read SQLite and, for verify,
 * every blob, so they run on the thread pool and touch only env->cache and
 * env->settings. */
#include "base/time.h"
#include "daemon/rpc.h"
#include "kiln/v1/kiln.pb-c.h"

static KILN_MUST_USE kiln_status_t require_cache(const kilnd_rpc_env_t *env) {
  if (env->cache) return NULL;
  /* kilnd always opens its cache before serving: reaching this is a bug. */
  return KILN_STATUS(KILN_STATUS_INTERNAL, "cache RPC served without a cache (daemon bug)");
}

static bool should_stop(void *user) { return kilnd_call_should_stop(user); }

kiln_status_t kilnd_rpc_get_cache_stats(const kilnd_rpc_env_t *env, const kilnd_call_ctx_t *call,
                                        const ProtobufCMessage *request, ProtobufCMessage **out_response) {
  kiln_arena_t *arena = call->arena;
  (void)request;
  KILN_RETURN_IF_ERROR(require_cache(env));
  kiln_cache_stats_t stats;
  KILN_RETURN_IF_ERROR(kiln_cache_stats(env->cache, &stats));
  Kiln__V1__GetCacheStatsResponse *resp = kiln_arena_alloc(arena, sizeof *resp);
  kiln__v1__get_cache_stats_response__init(resp);
  resp->artifacts = stats.totals.artifacts;
  resp->artifact_bytes = stats.totals.artifact_bytes;
  resp->artifact_stored_bytes = stats.totals.artifact_stored_bytes;
  resp->sources = stats.totals.sources;
  resp->source_bytes = stats.totals.source_bytes;
  resp->source_stored_bytes = stats.totals.source_stored_bytes;
  resp->pinned = stats.totals.pinned;
  resp->quarantined = stats.totals.quarantined;
  resp->hits = stats.totals.hits;
  resp->capacity_bytes = stats.capacity_bytes;
  /* path stays empty: server paths go to kilnd's log, never to clients (the read
   * role reaches this method). */
  resp->schema_version = (uint32_t)stats.schema_version;
  *out_response = &resp->base;
  return NULL;
}

kiln_status_t kilnd_rpc_verify_cache(const kilnd_rpc_env_t *env, const kilnd_call_ctx_t *call,
                                     const ProtobufCMessage *request, ProtobufCMessage **out_response) {
  kiln_arena_t *arena = call->arena;
  const Kiln__V1__VerifyCacheRequest *req = (const Kiln__V1__VerifyCacheRequest *)request;
  KILN_RETURN_IF_ERROR(require_cache(env));
  kiln_cache_verify_report_t report;
  kiln_status_t st = kiln_cache_verify(env->cache, req->dry_run, should_stop, (void *)call, &report);
  if (kiln_status_code(st) == KILN_STATUS_CANCELLED) {
    /* Stopped between blobs: every repair made so far stands. */
    kiln_status_free(st);
    bool late = kiln_time_monotonic_ns() >= call->deadline_monotonic_ns;
    return KILN_STATUS(late ? KILN_STATUS_DEADLINE_EXCEEDED : KILN_STATUS_UNAVAILABLE,
                       late ? "cache verify stopped at the client's deadline; give a longer "
                              "--timeout (repairs made so far are kept)"
                            : "cache verify stopped: kilnd is shutting down");
  }
  KILN_RETURN_IF_ERROR(st);
  Kiln__V1__VerifyCacheResponse *resp = kiln_arena_alloc(arena, sizeof *resp);
  kiln__v1__verify_cache_response__init(resp);
  resp->blobs_checked = report.blobs_checked;
  resp->bytes_checked = report.bytes_checked;
  resp->duration_ms = report.duration_ms > 0 ? (uint64_t)report.duration_ms : 0;
  resp->n_problems = report.n_problems;
  resp->problems =
      kiln_arena_calloc(arena, report.n_problems ? report.n_problems : 1, sizeof *resp->problems);
  for (size_t i = 0; i < report.n_problems; i++) {
    const kiln_cache_problem_t *p = &report.problems[i];
    Kiln__V1__CacheProblem *m = kiln_arena_alloc(arena, sizeof *m);
    kiln__v1__cache_problem__init(m);
    m->kind = (Kiln__V1__CacheProblem__Kind)p->kind;
    m->digest = kiln_arena_strdup(arena, p->digest);
    m->detail = kiln_arena_strdup(arena, p->detail);
    m->repaired = p->repaired;
    resp->problems[i] = m;
  }
  kiln_cache_verify_report_deinit(&report);
  *out_response = &resp->base;
  return NULL;
}

kiln_status_t kilnd_rpc_collect_garbage(const kilnd_rpc_env_t *env, const kilnd_call_ctx_t *call,
                                        const ProtobufCMessage *request, ProtobufCMessage **out_response) {
  kiln_arena_t *arena = call->arena;
  const Kiln__V1__CollectGarbageRequest *req = (const Kiln__V1__CollectGarbageRequest *)request;
  KILN_RETURN_IF_ERROR(require_cache(env));
  kiln_cache_gc_report_t report;
  KILN_RETURN_IF_ERROR(kiln_cache_gc(env->cache, req->max_bytes, &report));
  Kiln__V1__CollectGarbageResponse *resp = kiln_arena_alloc(arena, sizeof *resp);
  kiln__v1__collect_garbage_response__init(resp);
  resp->artifacts_evicted = report.artifacts_evicted;
  resp->sources_evicted = report.sources_evicted;
  resp->bytes_freed = report.bytes_freed;
  resp->bytes_stored = report.bytes_stored;
  resp->target_unreachable = report.target_unreachable;
  *out_response = &resp->base;
  return NULL;
}

static KILN_MUST_USE kiln_status_t pin(const kilnd_rpc_env_t *env, const kilnd_call_ctx_t *call,
                                       const ProtobufCMessage *request, ProtobufCMessage **out_response,
                                       bool pinned) {
  kiln_arena_t *arena = call->arena;
  const Kiln__V1__PinArtifactRequest *req = (const Kiln__V1__PinArtifactRequest *)request;
  KILN_RETURN_IF_ERROR(require_cache(env));
  size_t n = 0;
  KILN_RETURN_IF_ERROR(kiln_cache_pin(env->cache, req->digest, pinned, &n));
  Kiln__V1__PinArtifactResponse *resp = kiln_arena_alloc(arena, sizeof *resp);
  kiln__v1__pin_artifact_response__init(resp);
  resp->artifacts = n;
  *out_response = &resp->base;
  return NULL;
}

kiln_status_t kilnd_rpc_pin_artifact(const kilnd_rpc_env_t *env, const kilnd_call_ctx_t *call,
                                     const ProtobufCMessage *request, ProtobufCMessage **out_response) {
  return pin(env, call, request, out_response, true);
}

kiln_status_t kilnd_rpc_unpin_artifact(const kilnd_rpc_env_t *env, const kilnd_call_ctx_t *call,
                                       const ProtobufCMessage *request, ProtobufCMessage **out_response) {
  return pin(env, call, request, out_response, false);
}
