/* GetStats: uptime, calls in flight, finished calls by method and status code (only
 * the codes that occurred, in code order), the job engine's and the cache's counters.
 * On the loop: every source here is a counter under a mutex, never SQLite. */
#include "base/time.h"
#include "daemon/jobs.h"
#include "daemon/rpc.h"
#include "kiln/v1/kiln.pb-c.h"

kiln_status_t kilnd_rpc_get_stats(const kilnd_rpc_env_t *env, const kilnd_call_ctx_t *call,
                                  const ProtobufCMessage *request, ProtobufCMessage **out_response) {
  kiln_arena_t *arena = call->arena;
  (void)request;
  Kiln__V1__GetStatsResponse *resp = kiln_arena_alloc(arena, sizeof *resp);
  kiln__v1__get_stats_response__init(resp);
  int64_t up_ns = kiln_time_monotonic_ns() - env->start_monotonic_ns;
  resp->uptime_ms = up_ns > 0 ? (uint64_t)(up_ns / 1000000) : 0;
  resp->calls_in_flight = env->stats->calls_in_flight;

  const kilnd_stats_t *stats = env->stats;
  resp->n_methods = stats->method_count;
  resp->methods =
      kiln_arena_calloc(arena, stats->method_count ? stats->method_count : 1, sizeof *resp->methods);
  for (size_t i = 0; i < stats->method_count; i++) {
    const kilnd_method_stats_t *m = &stats->methods[i];
    Kiln__V1__MethodStats *ms = kiln_arena_alloc(arena, sizeof *ms);
    kiln__v1__method_stats__init(ms);
    ms->method = kiln_arena_strdup(arena, m->method);
    ms->total = m->total;
    size_t codes = 0;
    for (int c = 0; c < KILN_STATUS_CODE_COUNT; c++) codes += m->by_code[c] != 0;
    ms->n_by_status = codes;
    ms->by_status = kiln_arena_calloc(arena, codes ? codes : 1, sizeof *ms->by_status);
    size_t k = 0;
    for (int c = 0; c < KILN_STATUS_CODE_COUNT; c++) {
      if (!m->by_code[c]) continue;
      Kiln__V1__StatusCount *sc = kiln_arena_alloc(arena, sizeof *sc);
      kiln__v1__status_count__init(sc);
      sc->code = c;
      sc->code_name = kiln_arena_strdup(arena, kiln_status_code_name((kiln_status_code_t)c));
      sc->count = m->by_code[c];
      ms->by_status[k++] = sc;
    }
    resp->methods[i] = ms;
  }
  if (env->cache) {
    /* Counters and the last known totals: a mutex, no SQLite (this is the loop). */
    kiln_cache_stats_t cs;
    kiln_cache_counters(env->cache, &cs);
    Kiln__V1__CacheStats *c = kiln_arena_alloc(arena, sizeof *c);
    kiln__v1__cache_stats__init(c);
    c->hits = cs.hits;
    c->misses = cs.misses;
    c->artifacts = cs.totals.artifacts;
    c->bytes_stored = cs.totals.artifact_stored_bytes;
    c->bytes_served = cs.bytes_served;
    c->evictions = cs.evictions;
    c->quarantined = cs.quarantined;
    c->sources = cs.totals.sources;
    c->source_bytes_stored = cs.totals.source_stored_bytes;
    c->capacity_bytes = cs.capacity_bytes;
    resp->cache = c;
  }
  if (env->jobs) {
    kilnd_jobs_stats_t js;
    kilnd_jobs_stats(env->jobs, &js);
    Kiln__V1__JobStats *j = kiln_arena_alloc(arena, sizeof *j);
    kiln__v1__job_stats__init(j);
    j->queued = js.queued;
    j->running = js.running;
    j->done = js.done;
    j->failed = js.failed;
    j->cancelled = js.cancelled;
    j->submitted = js.submitted;
    j->merged_requests = js.merged_requests;
    j->tasks_fused = js.tasks_fused;
    j->targets_compiled = js.targets_compiled;
    j->targets_failed = js.targets_failed;
    j->compile_ms_total = js.compile_ms_total;
    j->worker_restarts = js.workers.restarts;
    j->workers = js.workers.count;
    j->workers_busy = js.workers.busy;
    resp->jobs = j;
  }
  *out_response = &resp->base;
  return NULL;
}
