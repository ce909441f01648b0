/* kilnd's metrics: one snapshot of everything /metrics, /readyz and sd_notify
 * report, the compile-duration histogram the job engine keeps, and the writer of
 * the Prometheus text exposition format (0.0.4).
 *
 * A snapshot is a plain value: the loop thread fills it from loop-thread state
 * (call stats, the job engine, the draining flag) and hands a copy to the HTTP
 * thread under http.c's lock, so the writer below never touches live state.
 * The writer and the readiness check are pure functions. Thread-safe.
 */
#ifndef KILN_DAEMON_METRICS_H
#define KILN_DAEMON_METRICS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "base/buf.h"
#include "cache/cache.h"
#include "daemon/jobs.h"
#include "daemon/stats.h"

/* Upper bounds (seconds) of the compile-duration buckets; +Inf is implied. */
#define KILND_HISTOGRAM_BUCKETS 12
extern const double kilnd_histogram_bounds[KILND_HISTOGRAM_BUCKETS];

/* Targets past this many fold into KILND_HISTOGRAM_OTHER, so the series count
 * stays bounded whatever targets clients ask for. */
#define KILND_HISTOGRAM_MAX_TARGETS 32
#define KILND_HISTOGRAM_OTHER       "(other)"

/* One target's compile durations. Non-cumulative bucket counts (the writer sums
 * them); the last slot counts durations above every bound. */
typedef struct kilnd_histogram_s {
  char target[64];
  uint64_t buckets[KILND_HISTOGRAM_BUCKETS + 1];
  uint64_t count;
  double sum_seconds;
} kilnd_histogram_t;

/* Per-target histograms in first-observed order. Embedded; zero it to init. */
typedef struct kilnd_histograms_s {
  kilnd_histogram_t by_target[KILND_HISTOGRAM_MAX_TARGETS];
  size_t count;
} kilnd_histograms_t;

/* Counts one duration of `target` (copied; longer names are cut at 63 bytes).
 * Not synchronized: the owner's lock. */
void kilnd_histograms_observe(kilnd_histograms_t *h, const char *target, double seconds);

typedef struct kilnd_metrics_snapshot_s {
  const char *version; /* static storage */
  /* The workers' compiler as cache keys spell it ("kiln-mlir 0.1.0 llvm 22.1.8"),
   * from the first worker's Hello; "" until then. A copy: kilnd links no compiler
   * of its own to ask, and the snapshot outlives the loop turn that took it. */
  char compiler[256];
  int64_t start_unix_ms;
  int64_t uptime_ms;
  bool listening; /* the gRPC server is bound and accepting */
  bool draining;  /* SIGTERM received */
  bool has_jobs;  /* the job engine existed: jobs, queue and workers below are real */
  kilnd_jobs_stats_t jobs;
  kilnd_histograms_t compile;
  bool has_cache;
  kiln_cache_stats_t cache;
  kilnd_stats_t calls;
} kilnd_metrics_snapshot_t;

/* NULL when kilnd is ready to take compiles (the gRPC server listens, a worker is
 * ready, not draining), else a one-line reason (static storage). */
const char *kilnd_metrics_not_ready(const kilnd_metrics_snapshot_t *snap);

/* Appends the exposition of `snap` to `out`: # HELP and # TYPE for each family,
 * label values escaped (backslash, quote, newline). Cannot fail. */
void kilnd_metrics_write(const kilnd_metrics_snapshot_t *snap, kiln_buf_t *out);

#endif /* KILN_DAEMON_METRICS_H */
