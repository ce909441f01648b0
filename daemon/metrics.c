/* The Prometheus text exposition (format 0.0.4) of a metrics snapshot.
 *
 * Naming follows Prometheus' conventions: every family is kiln_..., counters end
 * in _total, units are base units in the name (_seconds, _bytes). Each family is
 * written whole (HELP, TYPE, samples) before the next, as the format requires.
 * Label values come from the method table, the target table, or the build; they
 * are escaped anyway, so a strange target name cannot break the exposition.
 */
#include "daemon/metrics.h"

#include <inttypes.h>
#include <stdio.h>
#include <string.h>

const double kilnd_histogram_bounds[KILND_HISTOGRAM_BUCKETS] = {
    0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120, 300, 900,
};

void kilnd_histograms_observe(kilnd_histograms_t *h, const char *target, double seconds) {
  kilnd_histogram_t *e = NULL;
  for (size_t i = 0; i < h->count && !e; i++) {
    if (strcmp(h->by_target[i].target, target) == 0) e = &h->by_target[i];
  }
  if (!e) {
    /* The last slot is kept for the fold, so it is reached only once all others are taken. */
    if (h->count >= KILND_HISTOGRAM_MAX_TARGETS - 1) target = KILND_HISTOGRAM_OTHER;
    for (size_t i = 0; i < h->count && !e; i++) {
      if (strcmp(h->by_target[i].target, target) == 0) e = &h->by_target[i];
    }
  }
  if (!e) {
    e = &h->by_target[h->count++];
    memset(e, 0, sizeof *e);
    snprintf(e->target, sizeof e->target, "%s", target);
  }
  if (!(seconds >= 0)) seconds = 0; /* NaN or negative: a clock step */
  size_t b = 0;
  while (b < KILND_HISTOGRAM_BUCKETS && seconds > kilnd_histogram_bounds[b]) b++;
  e->buckets[b]++;
  e->count++;
  e->sum_seconds += seconds;
}

const char *kilnd_metrics_not_ready(const kilnd_metrics_snapshot_t *snap) {
  if (snap->draining) return "draining: kilnd received SIGTERM and takes no new work";
  if (!snap->listening) return "the gRPC server is not listening yet";
  if (!snap->has_jobs || snap->jobs.workers.ready == 0) return "no compile worker is ready yet";
  return NULL;
}

static void label_value(kiln_buf_t *out, const char *s) {
  kiln_buf_append_char(out, '"');
  for (; s && *s; s++) {
    if (*s == '\\')
      kiln_buf_append_str(out, "\\\\");
    else if (*s == '"')
      kiln_buf_append_str(out, "\\\"");
    else if (*s == '\n')
      kiln_buf_append_str(out, "\\n");
    else
      kiln_buf_append_char(out, *s);
  }
  kiln_buf_append_char(out, '"');
}

static void family(kiln_buf_t *out, const char *name, const char *type, const char *help) {
  kiln_buf_appendf(out, "# HELP %s %s\n# TYPE %s %s\n", name, help, name, type);
}

static void sample_u(kiln_buf_t *out, const char *name, uint64_t v) {
  kiln_buf_appendf(out, "%s %" PRIu64 "\n", name, v);
}

/* name{key="value"} v */
static void sample_l(kiln_buf_t *out, const char *name, const char *key, const char *value, uint64_t v) {
  kiln_buf_appendf(out, "%s{%s=", name, key);
  label_value(out, value);
  kiln_buf_appendf(out, "} %" PRIu64 "\n", v);
}

static void one_u(kiln_buf_t *out, const char *name, const char *type, const char *help, uint64_t v) {
  family(out, name, type, help);
  sample_u(out, name, v);
}

/* A bucket bound as Prometheus writes it ("0.1", "1", "900"). */
static void bound(kiln_buf_t *out, double b) { kiln_buf_appendf(out, "%g", b); }

static void write_histograms(const kilnd_histograms_t *h, kiln_buf_t *out) {
  const char *name = "kiln_compile_duration_seconds";
  family(out, name, "histogram",
         "Seconds a worker spent compiling one target (front half shared by a task's targets included).");
  for (size_t i = 0; i < h->count; i++) {
    const kilnd_histogram_t *e = &h->by_target[i];
    uint64_t cumulative = 0;
    for (size_t b = 0; b <= KILND_HISTOGRAM_BUCKETS; b++) {
      cumulative += e->buckets[b];
      kiln_buf_appendf(out, "%s_bucket{target=", name);
      label_value(out, e->target);
      kiln_buf_append_str(out, ",le=\"");
      if (b < KILND_HISTOGRAM_BUCKETS)
        bound(out, kilnd_histogram_bounds[b]);
      else
        kiln_buf_append_str(out, "+Inf");
      kiln_buf_appendf(out, "\"} %" PRIu64 "\n", cumulative);
    }
    kiln_buf_appendf(out, "%s_sum{target=", name);
    label_value(out, e->target);
    kiln_buf_appendf(out, "} %.6f\n%s_count{target=", e->sum_seconds, name);
    label_value(out, e->target);
    kiln_buf_appendf(out, "} %" PRIu64 "\n", e->count);
  }
}

static void write_calls(const kilnd_stats_t *calls, kiln_buf_t *out) {
  const char *name = "kiln_grpc_calls_total";
  family(out, name, "counter", "Finished gRPC calls by method and final status code.");
  for (size_t i = 0; i < calls->method_count; i++) {
    const kilnd_method_stats_t *m = &calls->methods[i];
    for (int c = 0; c < KILN_STATUS_CODE_COUNT; c++) {
      if (!m->by_code[c]) continue;
      kiln_buf_appendf(out, "%s{method=", name);
      label_value(out, m->method);
      kiln_buf_append_str(out, ",code=");
      label_value(out, kiln_status_code_name((kiln_status_code_t)c));
      kiln_buf_appendf(out, "} %" PRIu64 "\n", m->by_code[c]);
    }
  }
  one_u(out, "kiln_grpc_calls_in_flight", "gauge", "gRPC calls accepted and not finished.",
        calls->calls_in_flight);
}

void kilnd_metrics_write(const kilnd_metrics_snapshot_t *snap, kiln_buf_t *out) {
  family(out, "kiln_build_info", "gauge", "Always 1; the labels say which kilnd and compiler this is.");
  kiln_buf_append_str(out, "kiln_build_info{version=");
  label_value(out, snap->version);
  kiln_buf_append_str(out, ",compiler=");
  label_value(out, snap->compiler);
  kiln_buf_append_str(out, "} 1\n");
  family(out, "kiln_start_time_seconds", "gauge", "When kilnd started, in seconds since the Unix epoch.");
  kiln_buf_appendf(out, "kiln_start_time_seconds %.3f\n", (double)snap->start_unix_ms / 1000.0);
  family(out, "kiln_uptime_seconds", "gauge", "Seconds since kilnd started.");
  kiln_buf_appendf(out, "kiln_uptime_seconds %.3f\n", (double)snap->uptime_ms / 1000.0);
  one_u(out, "kiln_ready", "gauge", "1 when kilnd takes compiles (listening, a worker ready, not draining).",
        kilnd_metrics_not_ready(snap) == NULL);
  one_u(out, "kiln_draining", "gauge", "1 once SIGTERM started the drain.", snap->draining);

  write_calls(&snap->calls, out);

  if (snap->has_jobs) {
    const kilnd_jobs_stats_t *j = &snap->jobs;
    family(out, "kiln_jobs", "gauge", "Jobs not finished, by state.");
    sample_l(out, "kiln_jobs", "state", "queued", j->queued);
    sample_l(out, "kiln_jobs", "state", "running", j->running);
    family(out, "kiln_jobs_finished_total", "counter", "Jobs finished, by final state.");
    sample_l(out, "kiln_jobs_finished_total", "state", "done", j->done);
    sample_l(out, "kiln_jobs_finished_total", "state", "failed", j->failed);
    sample_l(out, "kiln_jobs_finished_total", "state", "cancelled", j->cancelled);
    one_u(out, "kiln_jobs_submitted_total", "counter", "Compile requests admitted as jobs.", j->submitted);
    one_u(out, "kiln_merged_requests_total", "counter",
          "Targets that joined a compile already queued or running for another job.", j->merged_requests);
    one_u(out, "kiln_tasks_fused_total", "counter",
          "Queued tasks folded into another of the same source and flags at dispatch.", j->tasks_fused);
    family(out, "kiln_queue_depth", "gauge", "Compile tasks waiting for a worker, by priority class.");
    static const char *const classes[3] = {"interactive", "batch", "bulk"};
    for (int c = 0; c < 3; c++)
      sample_l(out, "kiln_queue_depth", "priority", classes[c], j->queued_by_class[c]);
    family(out, "kiln_limit_refusals_total", "counter",
           "Requests refused RESOURCE_EXHAUSTED by a per-client limit, by the limit's setting.");
    for (int l = 0; l < KILND_LIMIT_COUNT; l++) {
      sample_l(out, "kiln_limit_refusals_total", "limit", kilnd_limit_name((kilnd_limit_t)l),
               j->limit_refusals[l]);
    }
    one_u(out, "kiln_targets_compiled_total", "counter", "Targets compiled and stored.", j->targets_compiled);
    one_u(out, "kiln_target_compiles_failed_total", "counter", "Target compiles that failed.",
          j->targets_failed);
    write_histograms(&snap->compile, out);
    one_u(out, "kiln_workers", "gauge", "Configured compile worker processes.", j->workers.count);
    one_u(out, "kiln_workers_ready", "gauge", "Compile workers past their Hello (idle or busy).",
          j->workers.ready);
    one_u(out, "kiln_workers_busy", "gauge", "Compile workers running a task now.", j->workers.busy);
    one_u(out, "kiln_worker_tasks_total", "counter", "Compile tasks the workers finished.", j->workers.tasks);
    one_u(out, "kiln_worker_restarts_total", "counter",
          "Workers replaced after a crash, kill, timeout or cancel.", j->workers.restarts);
    one_u(out, "kiln_worker_crashes_total", "counter", "Workers that died on their own (signal or bad exit).",
          j->workers.crashes);
    one_u(out, "kiln_worker_scratch_left", "gauge",
          "Dead workers' scratch folders in TMPDIR that kilnd could not remove yet (logged; tried again).",
          j->workers.scratch_left);
  }

  if (snap->has_cache) {
    const kiln_cache_stats_t *c = &snap->cache;
    one_u(out, "kiln_cache_hits_total", "counter", "Cache lookups that found an artifact.", c->hits);
    one_u(out, "kiln_cache_misses_total", "counter", "Cache lookups that found none.", c->misses);
    one_u(out, "kiln_cache_evictions_total", "counter", "Cache entries evicted to stay under capacity.",
          c->evictions);
    one_u(out, "kiln_cache_quarantined_total", "counter", "Blobs found corrupt and set aside.",
          c->quarantined);
    one_u(out, "kiln_cache_served_bytes_total", "counter", "Artifact bytes sent by GetArtifact.",
          c->bytes_served);
    family(out, "kiln_cache_stored_bytes", "gauge", "Bytes the cache holds on disk, by kind.");
    sample_l(out, "kiln_cache_stored_bytes", "kind", "artifact", c->totals.artifact_stored_bytes);
    sample_l(out, "kiln_cache_stored_bytes", "kind", "source", c->totals.source_stored_bytes);
    family(out, "kiln_cache_entries", "gauge", "Entries the cache holds, by kind.");
    sample_l(out, "kiln_cache_entries", "kind", "artifact", c->totals.artifacts);
    sample_l(out, "kiln_cache_entries", "kind", "source", c->totals.sources);
    one_u(out, "kiln_cache_capacity_bytes", "gauge", "The cache-capacity setting (0: unlimited).",
          c->capacity_bytes);
  }
}
