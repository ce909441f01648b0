/* Unit tests for cache/jobstore: a job and its targets round-trip through a real
 * SQLite file (reopened, as after a restart); a put replaces the earlier record
 * whole; load returns unfinished jobs and those finished since the cut-off, oldest
 * first; prune deletes only finished jobs before the cut-off; a newer schema and a
 * damaged file are refused with the right codes. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cache/jobstore.h"
#include "tests/unit/support/testing.h"

typedef struct fixture_s {
  char *dir;
  char path[4096];
} fixture_t;

static int setup(void **state) {
  fixture_t *f = calloc(1, sizeof *f);
  f->dir = kiln_test_tmpdir("jobstore");
  snprintf(f->path, sizeof f->path, "%s/jobs.db", f->dir);
  *state = f;
  return 0;
}

static int teardown(void **state) {
  fixture_t *f = *state;
  kiln_test_remove_tree(f->dir);
  free(f->dir);
  free(f);
  return 0;
}

static void make_job(kiln_jobstore_job_t *job, kiln_jobstore_target_t *targets, const char *id, int state,
                     int64_t created, int64_t finished) {
  memset(job, 0, sizeof *job);
  memset(targets, 0, 2 * sizeof *targets);
  job->id = (char *)id;
  job->state = state;
  job->priority = 2;
  job->client = "ci-runner-7";
  job->request_id = "req-1";
  memset(job->request_hash, 'a', 64);
  memset(job->source_digest, 'b', 64);
  job->source_name = "mlp.mlir";
  job->flags = "--iree-opt-level=O3";
  job->created_unix_ms = created;
  job->finished_unix_ms = finished;
  job->message = finished ? "1 of 2 target(s) failed" : "";
  targets[0].target = "sm_89";
  memset(targets[0].cache_key, 'c', 64);
  targets[0].state = KILN_JOBSTORE_TARGET_DONE;
  memset(targets[0].artifact_digest, 'd', 64);
  targets[0].size_bytes = 17375;
  targets[0].cache_hit = true;
  targets[0].compile_ms = 0;
  targets[1].target = "gfx950";
  memset(targets[1].cache_key, 'e', 64);
  targets[1].state = KILN_JOBSTORE_TARGET_FAILED;
  targets[1].code = 3;
  targets[1].message = "mlp.mlir:2:3: error: bad";
  job->targets = targets;
  job->n_targets = 2;
}

static void test_round_trip(void **state) {
  fixture_t *f = *state;
  kiln_jobstore_t *s = NULL;
  assert_null(kiln_jobstore_open(f->path, &s));
  kiln_jobstore_job_t job;
  kiln_jobstore_target_t t[2];
  make_job(&job, t, "j-1", 4, 1000, 2000);
  assert_null(kiln_jobstore_put_many(s, &job, 1));
  kiln_jobstore_close(s);

  assert_null(kiln_jobstore_open(f->path, &s)); /* as after a restart */
  kiln_jobstore_job_t *jobs = NULL;
  size_t n = 0;
  assert_null(kiln_jobstore_load(s, 0, &jobs, &n));
  assert_int_equal(n, 1);
  assert_string_equal(jobs[0].id, "j-1");
  assert_int_equal(jobs[0].state, 4);
  assert_int_equal(jobs[0].priority, 2);
  assert_string_equal(jobs[0].client, "ci-runner-7");
  assert_string_equal(jobs[0].request_id, "req-1");
  assert_memory_equal(jobs[0].request_hash, job.request_hash, 65);
  assert_string_equal(jobs[0].source_name, "mlp.mlir");
  assert_string_equal(jobs[0].flags, "--iree-opt-level=O3");
  assert_int_equal(jobs[0].created_unix_ms, 1000);
  assert_int_equal(jobs[0].finished_unix_ms, 2000);
  assert_string_equal(jobs[0].message, "1 of 2 target(s) failed");
  assert_int_equal(jobs[0].n_targets, 2);
  assert_string_equal(jobs[0].targets[0].target, "sm_89");
  assert_int_equal(jobs[0].targets[0].state, KILN_JOBSTORE_TARGET_DONE);
  assert_memory_equal(jobs[0].targets[0].artifact_digest, t[0].artifact_digest, 65);
  assert_int_equal(jobs[0].targets[0].size_bytes, 17375);
  assert_true(jobs[0].targets[0].cache_hit);
  assert_string_equal(jobs[0].targets[1].target, "gfx950");
  assert_int_equal(jobs[0].targets[1].code, 3);
  assert_string_equal(jobs[0].targets[1].message, "mlp.mlir:2:3: error: bad");
  kiln_jobstore_jobs_free(jobs, n);

  /* A put replaces the record whole: one target now. */
  job.n_targets = 1;
  job.state = 3;
  assert_null(kiln_jobstore_put_many(s, &job, 1));
  assert_null(kiln_jobstore_load(s, 0, &jobs, &n));
  assert_int_equal(n, 1);
  assert_int_equal(jobs[0].state, 3);
  assert_int_equal(jobs[0].n_targets, 1);
  kiln_jobstore_jobs_free(jobs, n);
  kiln_jobstore_close(s);
}

static void test_load_and_prune(void **state) {
  fixture_t *f = *state;
  kiln_jobstore_t *s = NULL;
  assert_null(kiln_jobstore_open(f->path, &s));
  kiln_jobstore_job_t job;
  kiln_jobstore_target_t t[2];
  make_job(&job, t, "j-old", 3, 100, 200);
  assert_null(kiln_jobstore_put_many(s, &job, 1));
  make_job(&job, t, "j-running", 2, 300, 0);
  assert_null(kiln_jobstore_put_many(s, &job, 1));
  make_job(&job, t, "j-new", 3, 400, 5000);
  assert_null(kiln_jobstore_put_many(s, &job, 1));

  kiln_jobstore_job_t *jobs = NULL;
  size_t n = 0;
  assert_null(kiln_jobstore_load(s, 1000, &jobs, &n));
  assert_int_equal(n, 2); /* the unfinished one and the one finished since 1000, oldest first */
  assert_string_equal(jobs[0].id, "j-running");
  assert_string_equal(jobs[1].id, "j-new");
  kiln_jobstore_jobs_free(jobs, n);

  size_t deleted = 0;
  assert_null(kiln_jobstore_prune(s, 1000, &deleted));
  assert_int_equal(deleted, 1);
  assert_null(kiln_jobstore_load(s, 0, &jobs, &n));
  assert_int_equal(n, 2); /* j-old is gone, the unfinished one never pruned */
  kiln_jobstore_jobs_free(jobs, n);
  kiln_jobstore_close(s);
}

/* A batch is one transaction: every job lands, a job named twice keeps its later
 * record (admitted, then finished), and a batch that fails midway writes nothing. */
static void test_put_many(void **state) {
  fixture_t *f = *state;
  kiln_jobstore_t *s = NULL;
  assert_null(kiln_jobstore_open(f->path, &s));
  kiln_jobstore_job_t batch[3];
  kiln_jobstore_target_t t[3][2];
  make_job(&batch[0], t[0], "j-a", 2, 100, 0);
  make_job(&batch[1], t[1], "j-b", 3, 200, 300);
  make_job(&batch[2], t[2], "j-a", 3, 100, 400); /* j-a again, finished */
  assert_null(kiln_jobstore_put_many(s, batch, 3));
  assert_null(kiln_jobstore_put_many(s, batch, 0));
  kiln_jobstore_job_t *jobs = NULL;
  size_t n = 0;
  assert_null(kiln_jobstore_load(s, 0, &jobs, &n));
  assert_int_equal(n, 2);
  assert_string_equal(jobs[0].id, "j-a");
  assert_int_equal(jobs[0].finished_unix_ms, 400);
  assert_int_equal(jobs[0].n_targets, 2);
  assert_string_equal(jobs[1].id, "j-b");
  kiln_jobstore_jobs_free(jobs, n);

  /* A NULL target name breaks NOT NULL in the second job: neither job is written. */
  make_job(&batch[0], t[0], "j-c", 3, 500, 600);
  make_job(&batch[1], t[1], "j-d", 3, 500, 600);
  t[1][1].target = NULL;
  kiln_status_t st = kiln_jobstore_put_many(s, batch, 2);
  assert_non_null(st);
  assert_non_null(strstr(kiln_status_message(st), "job target"));
  kiln_status_free(st);
  assert_null(kiln_jobstore_load(s, 0, &jobs, &n));
  assert_int_equal(n, 2);
  kiln_jobstore_jobs_free(jobs, n);
  /* And the store still takes puts afterwards. */
  t[1][1].target = "gfx950";
  assert_null(kiln_jobstore_put_many(s, batch, 2));
  assert_null(kiln_jobstore_load(s, 0, &jobs, &n));
  assert_int_equal(n, 4);
  kiln_jobstore_jobs_free(jobs, n);
  kiln_jobstore_close(s);
}

static void test_refusals(void **state) {
  fixture_t *f = *state;
  kiln_jobstore_t *s = NULL;
  assert_null(kiln_jobstore_open(f->path, &s));
  kiln_jobstore_close(s);
  /* A newer schema: written by a newer kilnd. */
  char cmd[8300];
  snprintf(cmd, sizeof cmd, "sqlite3 '%s' 'PRAGMA user_version = 9;'", f->path);
  assert_int_equal(system(cmd), 0);
  kiln_status_t st = kiln_jobstore_open(f->path, &s);
  assert_int_equal(kiln_status_code(st), KILN_STATUS_FAILED_PRECONDITION);
  assert_non_null(strstr(kiln_status_message(st), "newer"));
  kiln_status_free(st);
  assert_null(s);
  /* Not a database at all. */
  char junk[4096];
  snprintf(junk, sizeof junk, "%s/junk.db", f->dir);
  int fd = open(junk, O_CREAT | O_WRONLY, 0600);
  char garbage[8192];
  memset(garbage, 0x5a, sizeof garbage);
  assert_int_equal(write(fd, garbage, sizeof garbage), (ssize_t)sizeof garbage);
  close(fd);
  st = kiln_jobstore_open(junk, &s);
  assert_int_equal(kiln_status_code(st), KILN_STATUS_DATA_LOSS);
  assert_non_null(strstr(kiln_status_message(st), junk));
  kiln_status_free(st);
  /* A directory that does not exist. */
  st = kiln_jobstore_open("/nonexistent-kiln-dir/jobs.db", &s);
  assert_int_equal(kiln_status_code(st), KILN_STATUS_PERMISSION_DENIED);
  kiln_status_free(st);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test_setup_teardown(test_round_trip, setup, teardown),
      cmocka_unit_test_setup_teardown(test_load_and_prune, setup, teardown),
      cmocka_unit_test_setup_teardown(test_put_many, setup, teardown),
      cmocka_unit_test_setup_teardown(test_refusals, setup, teardown),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
