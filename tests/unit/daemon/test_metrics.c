/* Unit tests for daemon/metrics: histogram bucketing (boundaries fall into the
 * bucket they bound, above every bound into +Inf, negative and NaN count as 0),
 * the target fold past KILND_HISTOGRAM_MAX_TARGETS, the readiness reasons in
 * order, and the exposition: HELP/TYPE before samples, cumulative buckets ending
 * in +Inf equal to _count, escaped label values, families left out without the
 * job engine or the cache (and an empty compiler label before any worker's Hello). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "daemon/metrics.h"

static int setup(void **state) {
  kilnd_metrics_snapshot_t *snap = calloc(1, sizeof *snap);
  if (!snap) return -1;
  snap->version = "0.1.0";
  snprintf(snap->compiler, sizeof snap->compiler, "kiln-mlir 0.1.0 llvm 22");
  snap->listening = true;
  snap->has_jobs = true;
  snap->jobs.workers.ready = 1;
  *state = snap;
  return 0;
}

static int teardown(void **state) {
  free(*state);
  return 0;
}

static char *write_text(const kilnd_metrics_snapshot_t *snap) {
  kiln_buf_t out;
  kiln_buf_init(&out);
  kilnd_metrics_write(snap, &out);
  char *text = kiln_buf_take(&out);
  kiln_buf_deinit(&out);
  return text;
}

static void test_buckets(void **state) {
  kilnd_histograms_t *h = calloc(1, sizeof *h);
  (void)state;
  kilnd_histograms_observe(h, "sm_89", 0.1);  /* on the first bound: bucket 0 */
  kilnd_histograms_observe(h, "sm_89", 0.11); /* bucket 1 */
  kilnd_histograms_observe(h, "sm_89", 1000); /* above 900: +Inf */
  kilnd_histograms_observe(h, "sm_89", -5);   /* a clock step: 0 */
  kilnd_histograms_observe(h, "sm_89", NAN);
  assert_int_equal(h->count, 1);
  const kilnd_histogram_t *e = &h->by_target[0];
  assert_string_equal(e->target, "sm_89");
  assert_int_equal(e->count, 5);
  assert_int_equal(e->buckets[0], 3);
  assert_int_equal(e->buckets[1], 1);
  assert_int_equal(e->buckets[KILND_HISTOGRAM_BUCKETS], 1);
  assert_true(fabs(e->sum_seconds - 1000.21) < 1e-9);
  free(h);
}

static void test_target_fold(void **state) {
  kilnd_histograms_t *h = calloc(1, sizeof *h);
  (void)state;
  char name[32];
  for (int i = 0; i < KILND_HISTOGRAM_MAX_TARGETS + 10; i++) {
    snprintf(name, sizeof name, "t%d", i);
    kilnd_histograms_observe(h, name, 1);
  }
  assert_int_equal(h->count, KILND_HISTOGRAM_MAX_TARGETS);
  const kilnd_histogram_t *last = &h->by_target[KILND_HISTOGRAM_MAX_TARGETS - 1];
  assert_string_equal(last->target, KILND_HISTOGRAM_OTHER);
  assert_int_equal(last->count, 11);
  /* A target seen before the table filled still counts as itself. */
  kilnd_histograms_observe(h, "t0", 1);
  assert_int_equal(h->by_target[0].count, 2);
  free(h);
}

static void test_readiness(void **state) {
  kilnd_metrics_snapshot_t *snap = *state;
  assert_null(kilnd_metrics_not_ready(snap));
  snap->jobs.workers.ready = 0;
  assert_string_equal(kilnd_metrics_not_ready(snap), "no compile worker is ready yet");
  snap->listening = false;
  assert_string_equal(kilnd_metrics_not_ready(snap), "the gRPC server is not listening yet");
  snap->draining = true;
  assert_non_null(strstr(kilnd_metrics_not_ready(snap), "draining"));
}

static void test_exposition(void **state) {
  kilnd_metrics_snapshot_t *snap = *state;
  snap->jobs.done = 7;
  snap->jobs.queued_by_class[2] = 3;
  kilnd_histograms_observe(&snap->compile, "sm_\"89\\\n", 0.3);
  kilnd_histograms_observe(&snap->compile, "sm_\"89\\\n", 2);
  kilnd_stats_record(&snap->calls, "/kiln.v1.Kiln/Compile", KILN_STATUS_NOT_FOUND);
  snap->has_cache = true;
  snap->cache.bytes_served = 1234;
  char *text = write_text(snap);

  assert_non_null(
      strstr(text, "kiln_build_info{version=\"0.1.0\",compiler=\"kiln-mlir 0.1.0 llvm 22\"} 1\n"));
  assert_non_null(strstr(text, "kiln_jobs_finished_total{state=\"done\"} 7\n"));
  assert_non_null(strstr(text, "kiln_queue_depth{priority=\"bulk\"} 3\n"));
  assert_non_null(
      strstr(text, "kiln_grpc_calls_total{method=\"/kiln.v1.Kiln/Compile\",code=\"NOT_FOUND\"} 1\n"));
  assert_non_null(strstr(text, "kiln_cache_served_bytes_total 1234\n"));
  assert_non_null(strstr(text, "kiln_ready 1\n"));
  /* Escaped label value; cumulative buckets; +Inf equals _count. */
  assert_non_null(
      strstr(text, "kiln_compile_duration_seconds_bucket{target=\"sm_\\\"89\\\\\\n\",le=\"0.25\"} 0\n"));
  assert_non_null(
      strstr(text, "kiln_compile_duration_seconds_bucket{target=\"sm_\\\"89\\\\\\n\",le=\"0.5\"} 1\n"));
  assert_non_null(
      strstr(text, "kiln_compile_duration_seconds_bucket{target=\"sm_\\\"89\\\\\\n\",le=\"2.5\"} 2\n"));
  assert_non_null(
      strstr(text, "kiln_compile_duration_seconds_bucket{target=\"sm_\\\"89\\\\\\n\",le=\"+Inf\"} 2\n"));
  assert_non_null(strstr(text, "kiln_compile_duration_seconds_count{target=\"sm_\\\"89\\\\\\n\"} 2\n"));
  /* Every family: HELP then TYPE, before its first sample. */
  const char *help = strstr(text, "# HELP kiln_jobs_finished_total ");
  const char *type = strstr(text, "# TYPE kiln_jobs_finished_total counter\n");
  const char *sample = strstr(text, "kiln_jobs_finished_total{");
  assert_true(help && type && sample && help < type && type < sample);
  free(text);
}

static void test_without_engine_or_cache(void **state) {
  kilnd_metrics_snapshot_t *snap = *state;
  snap->has_jobs = false;
  snap->has_cache = false;
  snap->compiler[0] = '\0'; /* no worker has said Hello: the compiler is unknown */
  char *text = write_text(snap);
  assert_non_null(strstr(text, "kiln_build_info{version=\"0.1.0\",compiler=\"\"} 1\n"));
  assert_null(strstr(text, "kiln_jobs"));
  assert_null(strstr(text, "kiln_cache_"));
  assert_non_null(strstr(text, "kiln_ready 0\n"));
  assert_non_null(strstr(text, "kiln_grpc_calls_in_flight 0\n"));
  free(text);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_buckets),
      cmocka_unit_test(test_target_fold),
      cmocka_unit_test_setup_teardown(test_readiness, setup, teardown),
      cmocka_unit_test_setup_teardown(test_exposition, setup, teardown),
      cmocka_unit_test_setup_teardown(test_without_engine_or_cache, setup, teardown),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
