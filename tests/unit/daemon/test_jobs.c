/* Unit tests for the job engine (daemon/jobs/): on a plain libuv loop with a real
 * cache (SQLite and blobs in a temp dir) and a real job store, and a fake worker
 * pool at the engine's one seam (daemon/jobs/seam.h), so each test decides when a
 * task starts, finishes or fails. No worker processes, no gRPC server.
 *
 * Covered: admission in both modes (the pool's blocking one compiles a cold
 * request; the loop's refuses it as would-block and answers a cached one whole,
 * at once); a request_id retry (the same answer) and its reuse for another
 * request (ALREADY_EXISTS); merging a target already queued into one item (one
 * compile, the second job's result a cache hit); dispatch order (INTERACTIVE
 * first, then clients in turn, each client's own FIFO); limits (client-max-jobs,
 * client-queue-share, queue-capacity: RESOURCE_EXHAUSTED naming the setting,
 * counted per limit; a cached request is never refused); cancelling a queued job
 * (never dispatched) and a running one (the pool's cancel, then its failure
 * reports, end the job CANCELLED and the next task starts); a target failing;
 * retention (a finished job is forgotten); the job store (a job running when the
 * engine closes is told shutdown, comes back after a restart as a placeholder
 * that can be listened to, is admitted again under its id once a worker is ready
 * and finishes; a finished job comes back finished).
 * The lock rule: every call the engine makes into the pool and every listener
 * callback finds the engine's (non-recursive) mutex free; a listener may call the
 * engine again, and may unlisten another listener of the same job, whose
 * callback then never runs. Four threads admitting at once while the loop
 * dispatches and completes (the engine's TSan check, KILN_SANITIZE=thread): every
 * job ends DONE. Every test closes the engine and checks that
 * uv_loop_close succeeds, i.e. that it closed every handle it opened.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <uv.h>

#include "base/alloc.h"
#include "base/status.h"
#include "base/time.h"
#include "cache/cache.h"
#include "cache/jobstore.h"
#include "daemon/jobs.h"
#include "daemon/jobs/jobs_impl.h"
#include "daemon/jobs/seam.h"
#include "tests/unit/support/testing.h"

#define WAIT_NS   (20 * 1000000000LL)
#define MAX_TASKS 32

/* ---- the fake pool ---------------------------------------------------------- */

typedef struct fake_task_s {
  uint64_t id;
  char source[128];
  char targets[8][32];
  size_t n_targets;
  bool finished;
} fake_task_t;

typedef struct fake_pool_s {
  kilnd_jobs_t *jobs;
  size_t workers, busy;
  bool ready;
  fake_task_t tasks[MAX_TASKS]; /* in submit order */
  size_t n_tasks;
  uint64_t cancelled[MAX_TASKS];
  size_t n_cancelled;
  size_t calls_under_lock; /* pool calls that found the engine's lock held */
  bool closed;
} fake_pool_t;

/* Whether the calling thread is free of the engine's lock, as the calls into the
 * pool and the listeners find it. Another thread (an admission) holds it only for
 * moments, so a lock still taken after 50 ms of tries is the caller's own. */
static bool engine_lock_free(kilnd_jobs_t *jobs) {
  for (int tries = 0; tries < 250; tries++) {
    if (uv_mutex_trylock(&jobs->mu) == 0) {
      uv_mutex_unlock(&jobs->mu);
      return true;
    }
    usleep(200);
  }
  return false;
}

/* Counts a call made with the engine's lock held; true when the lock was free.
 * Under a held lock the fake reports nothing back (the engine would deadlock on
 * its own mutex), so a broken rule fails the test instead of hanging it. */
static bool fake_note(fake_pool_t *f) {
  if (!f->jobs || engine_lock_free(f->jobs)) return true;
  f->calls_under_lock++;
  return false;
}

static size_t fake_idle(void *self) {
  fake_pool_t *f = self;
  fake_note(f);
  return f->ready && !f->closed ? f->workers - f->busy : 0;
}

static void deliver(fake_pool_t *f, uint64_t id, kilnd_task_event_kind_t kind, const char *target,
                    kiln_status_code_t code, const char *message) {
  kilnd_task_event_t ev = {
      .kind = kind, .worker = "worker-1", .pid = 0, .target = target, .code = code, .message = message};
  char bytes[96];
  if (kind == KILND_TASK_TARGET_DONE) {
    /* Stand-in VMFB bytes, distinct per task and target. */
    snprintf(bytes, sizeof bytes, "PK\3\4 fake vmfb task %llu target %s", (unsigned long long)id, target);
    ev.artifact = (const uint8_t *)bytes;
    ev.artifact_len = strlen(bytes);
    ev.compile_ms = 5;
  }
  kilnd_jobs_task_event(f->jobs, id, &ev);
}

static KILN_MUST_USE kiln_status_t fake_submit(void *self, const kilnd_task_t *task) {
  fake_pool_t *f = self;
  if (!fake_note(f)) return KILN_STATUS(KILN_STATUS_INTERNAL, "submit under the engine's lock");
  if (f->busy >= f->workers) return KILN_STATUS(KILN_STATUS_FAILED_PRECONDITION, "no idle worker");
  assert_true(f->n_tasks < MAX_TASKS);
  fake_task_t *t = &f->tasks[f->n_tasks++];
  memset(t, 0, sizeof *t);
  t->id = task->id;
  snprintf(t->source, sizeof t->source, "%.*s", (int)task->source_len, (const char *)task->source);
  for (size_t i = 0; i < task->n_targets && i < 8; i++) snprintf(t->targets[i], 32, "%s", task->targets[i]);
  t->n_targets = task->n_targets;
  f->busy++;
  deliver(f, task->id, KILND_TASK_STARTED, NULL, 0, NULL); /* from inside submit, as the real pool does */
  return NULL;
}

static fake_task_t *fake_find(fake_pool_t *f, uint64_t id) {
  for (size_t i = 0; i < f->n_tasks; i++) {
    if (f->tasks[i].id == id) return &f->tasks[i];
  }
  return NULL;
}

/* FINISHED, then the worker is idle again. */
static void fake_finish(fake_pool_t *f, uint64_t id) {
  fake_task_t *t = fake_find(f, id);
  assert_non_null(t);
  assert_false(t->finished);
  t->finished = true;
  f->busy--;
  deliver(f, id, KILND_TASK_FINISHED, NULL, 0, NULL);
  deliver(f, 0, KILND_TASK_WORKER_READY, NULL, 0, NULL);
}

/* As the real pool: the unfinished targets fail CANCELLED, then FINISHED. */
static void fake_cancel(void *self, uint64_t task_id) {
  fake_pool_t *f = self;
  if (!fake_note(f)) return;
  f->cancelled[f->n_cancelled++] = task_id;
  fake_task_t *t = fake_find(f, task_id);
  if (!t || t->finished) return;
  for (size_t i = 0; i < t->n_targets; i++) {
    deliver(f, task_id, KILND_TASK_TARGET_FAILED, t->targets[i], KILN_STATUS_CANCELLED, "cancelled");
  }
  fake_finish(f, task_id);
}

static void fake_stats(void *self, kilnd_workers_stats_t *out) {
  fake_pool_t *f = self;
  fake_note(f);
  memset(out, 0, sizeof *out);
  out->count = f->workers;
  out->busy = f->busy;
  out->ready = f->ready ? f->workers : 0;
}

static const char *fake_compiler(void *self) {
  fake_pool_t *f = self;
  fake_note(f);
  return f->ready ? "fake-compiler 1.0" : NULL;
}

static bool fake_identity(void *self, kilnd_compiler_info_t *out) {
  fake_pool_t *f = self;
  fake_note(f);
  memset(out, 0, sizeof *out);
  if (!f->ready) return false;
  snprintf(out->name, sizeof out->name, "fake-compiler");
  snprintf(out->version, sizeof out->version, "1.0");
  return true;
}

static void fake_close(void *self, void (*done)(void *user), void *user) {
  fake_pool_t *f = self;
  fake_note(f);
  f->closed = true;
  done(user);
}

/* ---- the fixture ------------------------------------------------------------ */

typedef struct fixture_s {
  char *dir;
  uv_loop_t loop;
  kiln_cache_t *cache;
  kiln_jobstore_t *store;
  kilnd_jobs_options_t options;
  fake_pool_t pool;
  kilnd_jobs_t *jobs;
  bool closed;
} fixture_t;

#define RUN_UNTIL(fx, cond)                            \
  do {                                                 \
    int64_t end_ = kiln_time_monotonic_ns() + WAIT_NS; \
    while (!(cond)) {                                  \
      assert_true(kiln_time_monotonic_ns() < end_);    \
      uv_run(&(fx)->loop, UV_RUN_NOWAIT);              \
      usleep(200);                                     \
    }                                                  \
  } while (0)

static void engine_start_fx(fixture_t *fx) {
  memset(&fx->pool, 0, sizeof fx->pool);
  fx->pool.workers = 1;
  kilnd_jobs_pool_t pool = {.self = &fx->pool,
                            .idle = fake_idle,
                            .submit = fake_submit,
                            .cancel = fake_cancel,
                            .stats = fake_stats,
                            .compiler = fake_compiler,
                            .identity = fake_identity,
                            .close = fake_close};
  kiln_test_assert_ok(kilnd_jobs_create_on(&fx->loop, fx->cache, &fx->options, &pool, &fx->jobs));
  fx->pool.jobs = fx->jobs;
  fx->closed = false;
}

/* The pool's first worker says Hello. */
static void pool_ready(fixture_t *fx, size_t workers) {
  fx->pool.workers = workers;
  fx->pool.ready = true;
  deliver(&fx->pool, 0, KILND_TASK_WORKER_READY, NULL, 0, NULL);
}

static void on_closed(void *user) { *(bool *)user = true; }

static void engine_stop_fx(fixture_t *fx) {
  if (!fx->jobs) return;
  bool closed = false;
  kilnd_jobs_close(fx->jobs, on_closed, &closed);
  RUN_UNTIL(fx, closed);
  kilnd_jobs_destroy(fx->jobs);
  fx->jobs = NULL;
  assert_int_equal(fx->pool.calls_under_lock, 0);
}

static int setup(void **state) {
  fixture_t *fx = calloc(1, sizeof *fx);
  fx->dir = kiln_test_tmpdir("kiln-jobs");
  assert_non_null(fx->dir);
  assert_int_equal(uv_loop_init(&fx->loop), 0);
  char path[4096];
  snprintf(path, sizeof path, "%s/cache", fx->dir);
  kiln_cache_options_t copts = {0};
  kiln_test_assert_ok(kiln_cache_open(path, &copts, &fx->cache, NULL));
  snprintf(path, sizeof path, "%s/jobs.db", fx->dir);
  kiln_test_assert_ok(kiln_jobstore_open(path, &fx->store));
  fx->options = (kilnd_jobs_options_t){.queue_capacity = 64,
                                       .retention_ms = 3600 * 1000,
                                       .hal_version = 7,
                                       .bytecode_version = 17,
                                       .store = fx->store};
  *state = fx;
  return 0;
}

static int teardown(void **state) {
  fixture_t *fx = *state;
  engine_stop_fx(fx);
  kiln_jobstore_close(fx->store);
  kiln_cache_close(fx->cache);
  uv_run(&fx->loop, UV_RUN_NOWAIT);
  assert_int_equal(uv_loop_close(&fx->loop), 0);
  kiln_test_remove_tree(fx->dir);
  free(fx->dir);
  free(fx);
  return 0;
}

/* ---- requests and listeners ------------------------------------------------- */

typedef struct req_s {
  char source[128];
  const char *targets[4];
  size_t n_targets;
  const char *client;
  const char *request_id;
  kilnd_priority_t priority;
} req_t;

static req_t req(const char *model, const char *client, kilnd_priority_t p) {
  req_t r = {.targets = {"sm_89", "arm5gen"}, .n_targets = 2, .client = client, .priority = p};
  snprintf(r.source, sizeof r.source, "func.func @%s() {\n  return\n}\n", model);
  return r;
}

static kilnd_job_request_t request_of(const req_t *r) {
  return (kilnd_job_request_t){.source = (const uint8_t *)r->source,
                               .source_len = strlen(r->source),
                               .source_name = "model.mlir",
                               .targets = r->targets,
                               .n_targets = r->n_targets,
                               .priority = r->priority,
                               .client = r->client,
                               .request_id = r->request_id,
                               .deadline_monotonic_ns = INT64_MAX};
}

static KILN_MUST_USE kiln_status_t submit(fixture_t *fx, const req_t *r, kilnd_job_admission_t *out) {
  kilnd_job_request_t kr = request_of(r);
  return kilnd_jobs_submit(fx->jobs, &kr, out);
}

typedef struct heard_s {
  kilnd_jobs_t *jobs;
  int calls;
  bool lock_free;
  kilnd_job_state_t state;
  bool shutdown;
  char job_id[KILND_JOB_ID_LEN + 1];
  size_t n_targets;
  char digest[4][65];
  bool hit[4];
  int code[4];
  kilnd_job_listener_t *unlisten; /* unlistened from inside the callback */
  kilnd_jobs_stats_t stats;       /* read from inside the callback */
} heard_t;

static void on_finished(void *user, const kilnd_job_outcome_t *o) {
  heard_t *h = user;
  h->calls++;
  h->lock_free = engine_lock_free(h->jobs);
  h->state = o->state;
  h->shutdown = o->shutdown;
  snprintf(h->job_id, sizeof h->job_id, "%s", o->job_id);
  h->n_targets = o->n_targets;
  for (size_t i = 0; i < o->n_targets && i < 4; i++) {
    snprintf(h->digest[i], 65, "%s", o->targets[i].artifact_digest);
    h->hit[i] = o->targets[i].cache_hit;
    h->code[i] = o->targets[i].code;
  }
  /* A listener may call the engine again: the lock is not held (were it held,
   * the call would deadlock; the assertion on lock_free fails instead). */
  if (!h->lock_free) return;
  kilnd_jobs_stats(h->jobs, &h->stats);
  if (h->unlisten) kilnd_jobs_unlisten(h->jobs, h->unlisten);
}

static kilnd_job_listener_t *listen_to(fixture_t *fx, const char *job_id, heard_t *h) {
  h->jobs = fx->jobs;
  kilnd_job_listener_t *l = NULL;
  kiln_test_assert_ok(kilnd_jobs_listen(fx->jobs, job_id, on_finished, h, &l));
  return l;
}

/* Completes every target of task `i` (in submit order) and finishes it. */
static void complete_task(fixture_t *fx, size_t i) {
  fake_task_t *t = &fx->pool.tasks[i];
  for (size_t k = 0; k < t->n_targets; k++)
    deliver(&fx->pool, t->id, KILND_TASK_TARGET_DONE, t->targets[k], 0, NULL);
  fake_finish(&fx->pool, t->id);
}

static uint64_t stat_done(fixture_t *fx) {
  kilnd_jobs_stats_t s;
  kilnd_jobs_stats(fx->jobs, &s);
  return s.done;
}

/* ---- tests ------------------------------------------------------------------ */

static void test_cold_compile_then_cached_on_the_loop(void **state) {
  fixture_t *fx = *state;
  engine_start_fx(fx);
  pool_ready(fx, 1);
  req_t r = req("mlp", "ci", KILND_PRIORITY_INTERACTIVE);

  /* The loop's admission does not take a cold request: nothing changes. */
  kilnd_job_request_t kr = request_of(&r);
  kilnd_job_admission_t adm;
  bool would_block = false;
  kiln_test_assert_ok(kilnd_jobs_try_submit(fx->jobs, &kr, &adm, &would_block));
  assert_true(would_block);
  kilnd_jobs_stats_t s;
  kilnd_jobs_stats(fx->jobs, &s);
  assert_int_equal(s.submitted, 0);

  kiln_test_assert_ok(submit(fx, &r, &adm));
  assert_int_equal(adm.n_targets, 2);
  assert_false(adm.targets[0].cached);
  assert_false(adm.targets[1].cached);
  assert_int_equal(adm.state, KILND_JOB_QUEUED);
  heard_t h = {0};
  listen_to(fx, adm.job_id, &h);
  RUN_UNTIL(fx, fx->pool.n_tasks == 1);
  assert_int_equal(fx->pool.tasks[0].n_targets, 2); /* one task: one front half for both targets */
  assert_string_equal(fx->pool.tasks[0].source, r.source);
  kilnd_jobs_stats(fx->jobs, &s);
  assert_int_equal(s.running, 1);
  complete_task(fx, 0);
  RUN_UNTIL(fx, h.calls == 1);
  assert_true(h.lock_free);
  assert_int_equal(h.state, KILND_JOB_DONE);
  assert_false(h.shutdown);
  assert_string_equal(h.job_id, adm.job_id);
  assert_int_equal(strlen(h.digest[0]), 64);
  assert_int_equal(strlen(h.digest[1]), 64);
  assert_string_not_equal(h.digest[0], h.digest[1]);
  assert_false(h.hit[0]);
  assert_int_equal(h.stats.done, 1); /* read from inside the callback */
  kilnd_job_admission_deinit(&adm);

  /* Now the loop's admission answers it whole, at once: a new job, already DONE. */
  kilnd_job_admission_t again;
  kiln_test_assert_ok(kilnd_jobs_try_submit(fx->jobs, &kr, &again, &would_block));
  assert_false(would_block);
  assert_int_equal(again.state, KILND_JOB_DONE);
  assert_true(again.targets[0].cached && again.targets[1].cached);
  assert_string_equal(again.targets[0].artifact_digest, h.digest[0]);
  assert_string_equal(again.targets[1].artifact_digest, h.digest[1]);
  heard_t h2 = {0};
  kilnd_job_listener_t *l = listen_to(fx, again.job_id, &h2);
  assert_null(l); /* it had finished: the callback ran before listen returned */
  assert_int_equal(h2.calls, 1);
  assert_true(h2.lock_free);
  assert_true(h2.hit[0]);
  kilnd_job_admission_deinit(&again);
  assert_int_equal(fx->pool.n_tasks, 1); /* nothing compiled twice */
  engine_stop_fx(fx);
}

/* A retry's answer is the first answer, field by field. */
static void assert_same_admission(const kilnd_job_admission_t *a, const kilnd_job_admission_t *b) {
  assert_string_equal(a->job_id, b->job_id);
  assert_string_equal(a->source_digest, b->source_digest);
  assert_int_equal(a->state, b->state);
  assert_int_equal(a->created_unix_ms, b->created_unix_ms);
  assert_int_equal(a->n_targets, b->n_targets);
  for (size_t i = 0; i < a->n_targets; i++) {
    assert_string_equal(a->targets[i].target, b->targets[i].target);
    assert_string_equal(a->targets[i].cache_key, b->targets[i].cache_key);
    assert_string_equal(a->targets[i].artifact_digest, b->targets[i].artifact_digest);
    assert_int_equal(a->targets[i].size_bytes, b->targets[i].size_bytes);
    assert_int_equal(a->targets[i].cached, b->targets[i].cached);
    assert_int_equal(a->targets[i].merged, b->targets[i].merged);
  }
}

static void test_request_id_retry_and_reuse(void **state) {
  fixture_t *fx = *state;
  engine_start_fx(fx);
  pool_ready(fx, 1);
  req_t r = req("retry", "ci", KILND_PRIORITY_BATCH);
  r.request_id = "build-42";
  kilnd_job_admission_t a, b;
  kiln_test_assert_ok(submit(fx, &r, &a));
  kiln_test_assert_ok(submit(fx, &r, &b));
  assert_same_admission(&a, &b);
  assert_int_equal(b.state, KILND_JOB_QUEUED); /* the first answer's, not the job's now */
  kilnd_job_admission_deinit(&b);
  req_t other = req("other", "ci", KILND_PRIORITY_BATCH);
  other.request_id = "build-42";
  kiln_test_assert_code(submit(fx, &other, &b), KILN_STATUS_ALREADY_EXISTS);
  RUN_UNTIL(fx, fx->pool.n_tasks == 1);
  complete_task(fx, 0);
  RUN_UNTIL(fx, stat_done(fx) == 1);
  /* A retry after the job finished still gets the first answer. */
  kiln_test_assert_ok(submit(fx, &r, &b));
  assert_same_admission(&a, &b);
  kilnd_job_admission_deinit(&b);

  /* A cached answer's retry carries the same artifacts. */
  req_t hit = req("retry", "ci", KILND_PRIORITY_BATCH);
  hit.request_id = "build-43";
  kilnd_job_admission_t c, d;
  kiln_test_assert_ok(submit(fx, &hit, &c));
  assert_int_equal(c.state, KILND_JOB_DONE);
  assert_true(c.targets[0].cached);
  assert_int_equal(strlen(c.targets[0].artifact_digest), 64);
  kiln_test_assert_ok(submit(fx, &hit, &d));
  assert_same_admission(&c, &d);
  assert_string_not_equal(c.job_id, a.job_id);
  kilnd_job_admission_deinit(&c);
  kilnd_job_admission_deinit(&d);
  kilnd_job_admission_deinit(&a);
  engine_stop_fx(fx);
}

static void test_same_target_is_merged(void **state) {
  fixture_t *fx = *state;
  engine_start_fx(fx);
  pool_ready(fx, 1);
  req_t blocker = req("blocker", "x", KILND_PRIORITY_INTERACTIVE);
  kilnd_job_admission_t ab, a1, a2;
  kiln_test_assert_ok(submit(fx, &blocker, &ab));
  RUN_UNTIL(fx, fx->pool.n_tasks == 1);
  req_t r1 = req("shared", "alice", KILND_PRIORITY_INTERACTIVE);
  req_t r2 = req("shared", "bob", KILND_PRIORITY_INTERACTIVE);
  r2.request_id = "bob-1";
  kiln_test_assert_ok(submit(fx, &r1, &a1));
  kiln_test_assert_ok(submit(fx, &r2, &a2));
  assert_false(a1.targets[0].merged);
  assert_true(a2.targets[0].merged && a2.targets[1].merged);
  kilnd_job_admission_t again; /* a retry is told the same: merged */
  kiln_test_assert_ok(submit(fx, &r2, &again));
  assert_same_admission(&a2, &again);
  kilnd_job_admission_deinit(&again);
  heard_t h1 = {0}, h2 = {0};
  listen_to(fx, a1.job_id, &h1);
  listen_to(fx, a2.job_id, &h2);
  complete_task(fx, 0);
  RUN_UNTIL(fx, fx->pool.n_tasks == 2);
  complete_task(fx, 1);
  RUN_UNTIL(fx, h1.calls == 1 && h2.calls == 1);
  assert_int_equal(fx->pool.n_tasks, 2); /* one compile for both jobs */
  assert_int_equal(h1.state, KILND_JOB_DONE);
  assert_int_equal(h2.state, KILND_JOB_DONE);
  assert_string_equal(h1.digest[0], h2.digest[0]);
  assert_false(h1.hit[0]); /* the job that asked first compiled it */
  assert_true(h2.hit[0]);
  kilnd_jobs_stats_t s;
  kilnd_jobs_stats(fx->jobs, &s);
  assert_int_equal(s.merged_requests, 2);
  kilnd_job_admission_deinit(&ab);
  kilnd_job_admission_deinit(&a1);
  kilnd_job_admission_deinit(&a2);
  engine_stop_fx(fx);
}

static size_t task_index(fixture_t *fx, const char *model) {
  char want[64];
  snprintf(want, sizeof want, "@%s(", model);
  for (size_t i = 0; i < fx->pool.n_tasks; i++) {
    if (strstr(fx->pool.tasks[i].source, want)) return i;
  }
  fail_msg("no task for %s", model);
  return 0;
}

static void test_priority_then_clients_in_turn(void **state) {
  fixture_t *fx = *state;
  engine_start_fx(fx);
  pool_ready(fx, 1);
  kilnd_job_admission_t adm;
  req_t blocker = req("blocker", "x", KILND_PRIORITY_INTERACTIVE);
  kiln_test_assert_ok(submit(fx, &blocker, &adm));
  kilnd_job_admission_deinit(&adm);
  RUN_UNTIL(fx, fx->pool.n_tasks == 1);
  const char *order[][2] = {{"a1", "alice"}, {"a2", "alice"}, {"a3", "alice"}, {"b1", "bob"}};
  for (size_t i = 0; i < 4; i++) {
    req_t r = req(order[i][0], order[i][1], KILND_PRIORITY_BATCH);
    kiln_test_assert_ok(submit(fx, &r, &adm));
    kilnd_job_admission_deinit(&adm);
  }
  req_t urgent = req("c1", "carol", KILND_PRIORITY_INTERACTIVE);
  kiln_test_assert_ok(submit(fx, &urgent, &adm));
  kilnd_job_admission_deinit(&adm);
  kilnd_jobs_stats_t s;
  kilnd_jobs_stats(fx->jobs, &s);
  assert_int_equal(s.queued_by_class[0], 1);
  assert_int_equal(s.queued_by_class[1], 4);
  for (size_t done = 0; done < 5; done++) {
    complete_task(fx, done);
    RUN_UNTIL(fx, fx->pool.n_tasks == done + 2);
  }
  complete_task(fx, 5);
  RUN_UNTIL(fx, stat_done(fx) == 6);
  assert_int_equal(task_index(fx, "c1"), 1);                /* INTERACTIVE before BATCH */
  assert_true(task_index(fx, "b1") < task_index(fx, "a2")); /* bob's one job is not behind alice's burst */
  assert_true(task_index(fx, "a1") < task_index(fx, "a2")); /* each client's own FIFO */
  assert_true(task_index(fx, "a2") < task_index(fx, "a3"));
  engine_stop_fx(fx);
}

static void test_limits(void **state) {
  fixture_t *fx = *state;
  fx->options.client_max_jobs = 1;
  fx->options.queue_capacity = 2;
  fx->options.client_queue_share = 50; /* one queued task per client and class */
  engine_start_fx(fx);
  pool_ready(fx, 1);
  kilnd_job_admission_t adm;
  req_t first = req("first", "alice", KILND_PRIORITY_BATCH);
  kiln_test_assert_ok(submit(fx, &first, &adm));
  kilnd_job_admission_deinit(&adm);
  RUN_UNTIL(fx, fx->pool.n_tasks == 1); /* running: alice has one unfinished job */
  req_t second = req("second", "alice", KILND_PRIORITY_BATCH);
  kiln_status_t st = submit(fx, &second, &adm);
  assert_non_null(st);
  assert_int_equal(kiln_status_code(st), KILN_STATUS_RESOURCE_EXHAUSTED);
  assert_non_null(strstr(kiln_status_message(st), "client-max-jobs"));
  kiln_status_free(st);
  /* bob: one queued task is his share; a second is refused by the share. */
  req_t b1 = req("b1", "bob", KILND_PRIORITY_BATCH);
  kiln_test_assert_ok(submit(fx, &b1, &adm));
  kilnd_job_admission_deinit(&adm);
  fx->options.client_max_jobs = 0;
  fx->jobs->options.client_max_jobs = 0; /* only the share and the capacity from here */
  req_t b2 = req("b2", "bob", KILND_PRIORITY_BATCH);
  st = submit(fx, &b2, &adm);
  assert_non_null(st);
  assert_int_equal(kiln_status_code(st), KILN_STATUS_RESOURCE_EXHAUSTED);
  assert_non_null(strstr(kiln_status_message(st), "client-queue-share"));
  kiln_status_free(st);
  req_t c1 = req("c1", "carol", KILND_PRIORITY_BATCH);
  kiln_test_assert_ok(submit(fx, &c1, &adm));
  kilnd_job_admission_deinit(&adm);
  req_t d1 = req("d1", "dave", KILND_PRIORITY_BATCH); /* the class holds 2 = queue-capacity */
  st = submit(fx, &d1, &adm);
  assert_non_null(st);
  assert_int_equal(kiln_status_code(st), KILN_STATUS_RESOURCE_EXHAUSTED);
  assert_non_null(strstr(kiln_status_message(st), "queue-capacity 2"));
  kiln_status_free(st);
  kilnd_jobs_stats_t s;
  kilnd_jobs_stats(fx->jobs, &s);
  assert_int_equal(s.limit_refusals[KILND_LIMIT_JOBS], 1);
  assert_int_equal(s.limit_refusals[KILND_LIMIT_QUEUE_SHARE], 1);
  /* Once alice's job is done, her request for what is cached passes any limit. */
  complete_task(fx, 0);
  RUN_UNTIL(fx, stat_done(fx) == 1);
  fx->jobs->options.client_max_jobs = 1;
  kiln_test_assert_ok(submit(fx, &first, &adm));
  assert_int_equal(adm.state, KILND_JOB_DONE);
  kilnd_job_admission_deinit(&adm);
  engine_stop_fx(fx);
}

static void test_cancel_queued_and_running(void **state) {
  fixture_t *fx = *state;
  engine_start_fx(fx);
  pool_ready(fx, 1);
  kilnd_job_admission_t run, queued, next;
  req_t r1 = req("running", "ci", KILND_PRIORITY_INTERACTIVE);
  req_t r2 = req("queued", "ci", KILND_PRIORITY_INTERACTIVE);
  req_t r3 = req("next", "ci", KILND_PRIORITY_INTERACTIVE);
  kiln_test_assert_ok(submit(fx, &r1, &run));
  RUN_UNTIL(fx, fx->pool.n_tasks == 1);
  kiln_test_assert_ok(submit(fx, &r2, &queued));
  kiln_test_assert_ok(submit(fx, &r3, &next));
  heard_t hq = {0}, hr = {0};
  listen_to(fx, queued.job_id, &hq);
  listen_to(fx, run.job_id, &hr);

  kilnd_job_state_t state_after;
  bool cancelled = false;
  kiln_test_assert_ok(kilnd_jobs_cancel(fx->jobs, queued.job_id, "not needed", &state_after, &cancelled));
  assert_true(cancelled);
  assert_int_equal(state_after, KILND_JOB_CANCELLED);
  assert_int_equal(hq.calls, 1); /* told before cancel returned, with the lock released */
  assert_true(hq.lock_free);
  assert_int_equal(hq.state, KILND_JOB_CANCELLED);
  assert_int_equal(hq.code[0], KILN_STATUS_CANCELLED);
  assert_int_equal(fx->pool.n_cancelled, 0); /* it never ran: nothing to stop */

  /* The running one: the pool's cancel (which reports back from inside the call). */
  kiln_test_assert_ok(kilnd_jobs_cancel(fx->jobs, run.job_id, "", &state_after, &cancelled));
  assert_true(cancelled);
  assert_int_equal(fx->pool.n_cancelled, 1);
  assert_int_equal(fx->pool.cancelled[0], fx->pool.tasks[0].id);
  assert_int_equal(hr.state, KILND_JOB_CANCELLED);
  RUN_UNTIL(fx, fx->pool.n_tasks == 2); /* the worker is free: the next job, not the cancelled one */
  assert_true(strstr(fx->pool.tasks[1].source, "@next(") != NULL);
  kiln_test_assert_ok(kilnd_jobs_cancel(fx->jobs, run.job_id, "", &state_after, &cancelled));
  assert_false(cancelled); /* already over */
  kiln_test_assert_code(
      kilnd_jobs_cancel(fx->jobs, "j-000000000000000000000000", "", &state_after, &cancelled),
      KILN_STATUS_NOT_FOUND);
  kilnd_job_admission_deinit(&run);
  kilnd_job_admission_deinit(&queued);
  kilnd_job_admission_deinit(&next);
  engine_stop_fx(fx);
}

static void test_target_failure_and_unlisten_in_callback(void **state) {
  fixture_t *fx = *state;
  engine_start_fx(fx);
  pool_ready(fx, 1);
  kilnd_job_admission_t adm;
  req_t r = req("bad", "ci", KILND_PRIORITY_INTERACTIVE);
  kiln_test_assert_ok(submit(fx, &r, &adm));
  RUN_UNTIL(fx, fx->pool.n_tasks == 1);
  heard_t second = {0}, first = {0};
  kilnd_job_listener_t *l2 = listen_to(fx, adm.job_id, &second);
  listen_to(fx, adm.job_id, &first);
  first.unlisten = l2;
  /* The newest listener is told first: `first`, which drops `second`. */
  fake_task_t *t = &fx->pool.tasks[0];
  deliver(&fx->pool, t->id, KILND_TASK_TARGET_DONE, t->targets[0], 0, NULL);
  deliver(&fx->pool, t->id, KILND_TASK_TARGET_FAILED, t->targets[1], KILN_STATUS_INVALID_ARGUMENT,
          "model.mlir:2:3: error: unknown op");
  fake_finish(&fx->pool, t->id);
  RUN_UNTIL(fx, first.calls == 1);
  uv_run(&fx->loop, UV_RUN_NOWAIT);
  assert_int_equal(second.calls, 0); /* unlistened by the first callback before its turn */
  assert_int_equal(first.state, KILND_JOB_FAILED);
  assert_int_equal(first.code[0], 0);
  assert_int_equal(strlen(first.digest[0]), 64);
  assert_int_equal(first.code[1], KILN_STATUS_INVALID_ARGUMENT);
  kilnd_jobs_stats_t s;
  kilnd_jobs_stats(fx->jobs, &s);
  assert_int_equal(s.failed, 1);
  assert_int_equal(s.targets_failed, 1);
  assert_int_equal(s.targets_compiled, 1);
  kilnd_job_admission_deinit(&adm);
  engine_stop_fx(fx);
}

static void test_retention_forgets_finished_jobs(void **state) {
  fixture_t *fx = *state;
  fx->options.retention_ms = 1;
  fx->options.store = NULL;
  engine_start_fx(fx);
  pool_ready(fx, 1);
  kilnd_job_admission_t adm;
  req_t r = req("short", "ci", KILND_PRIORITY_INTERACTIVE);
  kiln_test_assert_ok(submit(fx, &r, &adm));
  RUN_UNTIL(fx, fx->pool.n_tasks == 1);
  complete_task(fx, 0);
  RUN_UNTIL(fx, stat_done(fx) == 1);
  heard_t h = {0};
  h.jobs = fx->jobs;
  kilnd_job_listener_t *l = NULL;
  int64_t end = kiln_time_monotonic_ns() + 2 * SWEEP_INTERVAL_MS * 1000000LL + 500000000LL;
  kiln_status_t st = NULL;
  while (kiln_time_monotonic_ns() < end) { /* the sweep runs every SWEEP_INTERVAL_MS */
    uv_run(&fx->loop, UV_RUN_NOWAIT);
    usleep(10000);
  }
  st = kilnd_jobs_listen(fx->jobs, adm.job_id, on_finished, &h, &l);
  kiln_test_assert_code(st, KILN_STATUS_NOT_FOUND);
  kilnd_job_admission_deinit(&adm);
  engine_stop_fx(fx);
}

static void test_store_restart_readmits(void **state) {
  fixture_t *fx = *state;
  engine_start_fx(fx);
  pool_ready(fx, 1);
  kilnd_job_admission_t done_adm, live_adm;
  req_t finished = req("finished", "ci", KILND_PRIORITY_INTERACTIVE);
  kiln_test_assert_ok(submit(fx, &finished, &done_adm));
  RUN_UNTIL(fx, fx->pool.n_tasks == 1);
  complete_task(fx, 0);
  RUN_UNTIL(fx, stat_done(fx) == 1);
  req_t live = req("live", "ci", KILND_PRIORITY_BATCH);
  live.request_id = "deploy-7";
  kiln_test_assert_ok(submit(fx, &live, &live_adm));
  RUN_UNTIL(fx, fx->pool.n_tasks == 2);
  heard_t h = {0};
  listen_to(fx, live_adm.job_id, &h);
  engine_stop_fx(fx); /* kilnd stops with the job running */
  assert_int_equal(h.calls, 1);
  assert_true(h.shutdown);
  assert_true(h.lock_free);
  assert_int_equal(h.state, KILND_JOB_RUNNING);

  /* The restart: the finished job is back finished, the live one as a placeholder. */
  engine_start_fx(fx);
  heard_t hf = {0}, hl = {0};
  assert_null(listen_to(fx, done_adm.job_id, &hf));
  assert_int_equal(hf.calls, 1);
  assert_int_equal(hf.state, KILND_JOB_DONE);
  assert_non_null(listen_to(fx, live_adm.job_id, &hl));
  assert_int_equal(hl.calls, 0);
  pool_ready(fx, 1); /* the first Hello: readmission under the same id */
  RUN_UNTIL(fx, fx->pool.n_tasks == 1);
  assert_true(strstr(fx->pool.tasks[0].source, "@live(") != NULL);
  complete_task(fx, 0);
  RUN_UNTIL(fx, hl.calls == 1);
  assert_int_equal(hl.state, KILND_JOB_DONE);
  assert_string_equal(hl.job_id, live_adm.job_id);
  assert_true(hl.lock_free);
  /* Its request_id still names it. */
  kilnd_job_admission_t retry;
  kiln_test_assert_ok(submit(fx, &live, &retry));
  assert_string_equal(retry.job_id, live_adm.job_id);
  kilnd_job_admission_deinit(&retry);
  kilnd_job_admission_deinit(&done_adm);
  kilnd_job_admission_deinit(&live_adm);
  engine_stop_fx(fx);
}

/* Admission from several threads at once while the loop dispatches and completes:
 * what TSan watches (the thread pool's side of the engine against the loop's). */
#define SUBMITTERS    4
#define PER_SUBMITTER 8

typedef struct submitter_s {
  fixture_t *fx;
  int index;
  int failures;
  char job_ids[PER_SUBMITTER][KILND_JOB_ID_LEN + 1];
} submitter_t;

static void submitter_main(void *arg) {
  submitter_t *s = arg;
  for (int i = 0; i < PER_SUBMITTER; i++) {
    char model[32], client[16];
    snprintf(model, sizeof model, "m%d", i % 4); /* every thread asks for the same four models */
    snprintf(client, sizeof client, "c%d", s->index);
    req_t r = req(model, client, (kilnd_priority_t)(1 + (s->index + i) % 3));
    kilnd_job_admission_t adm;
    kiln_status_t st = submit(s->fx, &r, &adm);
    if (st) {
      s->failures++;
      kiln_status_free(st);
      continue;
    }
    snprintf(s->job_ids[i], sizeof s->job_ids[i], "%s", adm.job_id);
    kilnd_job_admission_deinit(&adm);
  }
}

static void test_concurrent_admission(void **state) {
  fixture_t *fx = *state;
  engine_start_fx(fx);
  pool_ready(fx, 2);
  submitter_t subs[SUBMITTERS];
  uv_thread_t threads[SUBMITTERS];
  for (int i = 0; i < SUBMITTERS; i++) {
    subs[i] = (submitter_t){.fx = fx, .index = i};
    assert_int_equal(uv_thread_create(&threads[i], submitter_main, &subs[i]), 0);
  }
  /* The loop completes every task it is given until every job is done. */
  size_t completed = 0;
  int64_t end = kiln_time_monotonic_ns() + WAIT_NS;
  while (stat_done(fx) < SUBMITTERS * PER_SUBMITTER) {
    assert_true(kiln_time_monotonic_ns() < end);
    uv_run(&fx->loop, UV_RUN_NOWAIT);
    for (; completed < fx->pool.n_tasks; completed++) complete_task(fx, completed);
    usleep(200);
  }
  for (int i = 0; i < SUBMITTERS; i++) {
    uv_thread_join(&threads[i]);
    assert_int_equal(subs[i].failures, 0);
  }
  /* Four models, two targets each: every pair compiled, most requests merged or
   * answered from the cache. (A request that missed the cache just before the
   * item's store finished may compile its pair again: hence no upper bound.) */
  kilnd_jobs_stats_t s;
  kilnd_jobs_stats(fx->jobs, &s);
  assert_int_equal(s.done, SUBMITTERS * PER_SUBMITTER);
  assert_int_equal(s.failed, 0);
  assert_true(s.targets_compiled >= 8);
  assert_true(s.targets_compiled < 2 * SUBMITTERS * PER_SUBMITTER);
  heard_t h = {0};
  assert_null(listen_to(fx, subs[3].job_ids[7], &h));
  assert_int_equal(h.state, KILND_JOB_DONE);
  engine_stop_fx(fx);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test_setup_teardown(test_cold_compile_then_cached_on_the_loop, setup, teardown),
      cmocka_unit_test_setup_teardown(test_request_id_retry_and_reuse, setup, teardown),
      cmocka_unit_test_setup_teardown(test_same_target_is_merged, setup, teardown),
      cmocka_unit_test_setup_teardown(test_priority_then_clients_in_turn, setup, teardown),
      cmocka_unit_test_setup_teardown(test_limits, setup, teardown),
      cmocka_unit_test_setup_teardown(test_cancel_queued_and_running, setup, teardown),
      cmocka_unit_test_setup_teardown(test_target_failure_and_unlisten_in_callback, setup, teardown),
      cmocka_unit_test_setup_teardown(test_retention_forgets_finished_jobs, setup, teardown),
      cmocka_unit_test_setup_teardown(test_store_restart_readmits, setup, teardown),
      cmocka_unit_test_setup_teardown(test_concurrent_admission, setup, teardown),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
