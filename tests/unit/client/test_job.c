/* Unit tests for client/job: the CLI's view of a job built from hand-made
 * WatchJob events. Admission (cached targets are done at once, canonical names);
 * plain lines (one per event worth seeing: queued, started, each new stage, done
 * with size and cache hit, failed, terminal; none for fraction updates within a
 * stage, debug logs, or a repeated Queued within 10 s); stderr text (diagnostics as
 * FILE:LINE:COL: error: MESSAGE [target] with indented notes, each distinct text
 * once per job even when TargetFailed repeats it; warning logs; the failure
 * reason); states only moving forward (a replayed progress event does not undo
 * DONE, fractions never decrease); the live display (a job line plus one line per
 * target, lines cut to the width without splitting UTF-8, frame escapes moving up
 * over the previous frame); and the manifest JSON (keys, code names, file null
 * until written). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <json-c/json.h>
#include <stdbool.h>
#include <stdio.h>
#include <string.h>

#include "base/alloc.h"
#include "base/buf.h"
#include "client/job.h"
#include "kiln/v1/kiln.pb-c.h"

/* ---- Event builders (stack messages; strings are literals) ---------------- */

typedef struct ev_s {
  Kiln__V1__JobEvent ev;
  Kiln__V1__JobEvent__Queued queued;
  Kiln__V1__JobEvent__Started started;
  Kiln__V1__JobEvent__TargetProgress progress;
  Kiln__V1__JobEvent__LogLine log;
  Kiln__V1__Diagnostic diag;
  Kiln__V1__SourceLocation loc;
  Kiln__V1__JobEvent__TargetDone done;
  Kiln__V1__JobEvent__TargetFailed failed;
  Kiln__V1__JobEvent__Terminal terminal;
} ev_t;

static uint64_t next_seq;

static void ev_init(ev_t *e, int64_t time_ms) {
  memset(e, 0, sizeof *e);
  kiln__v1__job_event__init(&e->ev);
  e->ev.sequence = ++next_seq;
  e->ev.time_unix_ms = time_ms;
  e->ev.job_id = "j-1";
}

static const Kiln__V1__JobEvent *queued(ev_t *e, int64_t t, uint32_t position) {
  ev_init(e, t);
  kiln__v1__job_event__queued__init(&e->queued);
  e->queued.position = position;
  e->ev.event_case = KILN__V1__JOB_EVENT__EVENT_QUEUED;
  e->ev.queued = &e->queued;
  return &e->ev;
}

static const Kiln__V1__JobEvent *started(ev_t *e, const char *worker) {
  ev_init(e, 0);
  kiln__v1__job_event__started__init(&e->started);
  e->started.worker = (char *)worker;
  e->ev.event_case = KILN__V1__JOB_EVENT__EVENT_STARTED;
  e->ev.started = &e->started;
  return &e->ev;
}

static const Kiln__V1__JobEvent *progress(ev_t *e, const char *target, const char *stage, uint32_t index,
                                          uint32_t count, float fraction) {
  ev_init(e, 0);
  kiln__v1__job_event__target_progress__init(&e->progress);
  e->progress.target = (char *)target;
  e->progress.stage = (char *)stage;
  e->progress.stage_index = index;
  e->progress.stage_count = count;
  e->progress.fraction = fraction;
  e->ev.event_case = KILN__V1__JOB_EVENT__EVENT_PROGRESS;
  e->ev.progress = &e->progress;
  return &e->ev;
}

static const Kiln__V1__JobEvent *log_line(ev_t *e, const char *target, Kiln__V1__LogLevel level,
                                          const char *text) {
  ev_init(e, 0);
  kiln__v1__job_event__log_line__init(&e->log);
  e->log.target = (char *)target;
  e->log.level = level;
  e->log.text = (char *)text;
  e->ev.event_case = KILN__V1__JOB_EVENT__EVENT_LOG;
  e->ev.log = &e->log;
  return &e->ev;
}

static void make_diag(ev_t *e, const char *target, const char *file, uint32_t line, uint32_t col,
                      const char *message) {
  kiln__v1__diagnostic__init(&e->diag);
  kiln__v1__source_location__init(&e->loc);
  e->loc.file = (char *)file;
  e->loc.line = line;
  e->loc.column = col;
  e->diag.target = (char *)target;
  e->diag.severity = KILN__V1__SEVERITY__SEVERITY_ERROR;
  e->diag.message = (char *)message;
  e->diag.location = &e->loc;
}

static const Kiln__V1__JobEvent *diagnostic(ev_t *e, const char *target, const char *file, uint32_t line,
                                            uint32_t col, const char *message) {
  ev_init(e, 0);
  make_diag(e, target, file, line, col, message);
  e->ev.event_case = KILN__V1__JOB_EVENT__EVENT_DIAGNOSTIC;
  e->ev.diagnostic = &e->diag;
  return &e->ev;
}

static const Kiln__V1__JobEvent *done(ev_t *e, const char *target, const char *digest, uint64_t size,
                                      bool hit, uint64_t ms) {
  ev_init(e, 0);
  kiln__v1__job_event__target_done__init(&e->done);
  e->done.target = (char *)target;
  e->done.artifact_digest = (char *)digest;
  e->done.size_bytes = size;
  e->done.cache_hit = hit;
  e->done.compile_ms = ms;
  e->ev.event_case = KILN__V1__JOB_EVENT__EVENT_TARGET_DONE;
  e->ev.target_done = &e->done;
  return &e->ev;
}

static const Kiln__V1__JobEvent *failed(ev_t *e, const char *target, int code, const char *message,
                                        Kiln__V1__Diagnostic **diags, size_t n_diags) {
  ev_init(e, 0);
  kiln__v1__job_event__target_failed__init(&e->failed);
  e->failed.target = (char *)target;
  e->failed.code = code;
  e->failed.message = (char *)message;
  e->failed.diagnostics = diags;
  e->failed.n_diagnostics = n_diags;
  e->ev.event_case = KILN__V1__JOB_EVENT__EVENT_TARGET_FAILED;
  e->ev.target_failed = &e->failed;
  return &e->ev;
}

static const Kiln__V1__JobEvent *terminal(ev_t *e, Kiln__V1__JobState state, const char *message) {
  ev_init(e, 0);
  kiln__v1__job_event__terminal__init(&e->terminal);
  e->terminal.state = state;
  e->terminal.message = (char *)message;
  e->ev.event_case = KILN__V1__JOB_EVENT__EVENT_TERMINAL;
  e->ev.terminal = &e->terminal;
  return &e->ev;
}

/* ---- Fixture ----------------------------------------------------------------- */

typedef struct fixture_s {
  kiln_cli_job_t job;
  kiln_buf_t line, err;
} fixture_t;

static int setup(void **state) {
  fixture_t *f = kiln_calloc(1, sizeof *f);
  kiln_cli_job_init(&f->job, "j-1");
  kiln_buf_init(&f->line);
  kiln_buf_init(&f->err);
  next_seq = 0;
  *state = f;
  return 0;
}

static int teardown(void **state) {
  fixture_t *f = *state;
  kiln_cli_job_deinit(&f->job);
  kiln_buf_deinit(&f->line);
  kiln_buf_deinit(&f->err);
  kiln_free(f);
  return 0;
}

/* Applies one event with fresh buffers. */
static void apply(fixture_t *f, const Kiln__V1__JobEvent *ev) {
  kiln_buf_clear(&f->line);
  kiln_buf_clear(&f->err);
  kiln_cli_job_apply(&f->job, ev, &f->line, &f->err);
}

static json_object *member(json_object *obj, const char *key) {
  json_object *v = NULL;
  if (!json_object_object_get_ex(obj, key, &v)) fail_msg("no member \"%s\"", key);
  return v;
}

/* ---- Tests -------------------------------------------------------------------- */

static void test_plain_lines(void **state) {
  fixture_t *f = *state;
  ev_t e;
  apply(f, queued(&e, 1000, 3));
  assert_string_equal(f->line.data, "job j-1: queued (position 3)\n");
  assert_int_equal(f->job.state, KILN__V1__JOB_STATE__JOB_STATE_QUEUED);
  apply(f, queued(&e, 2000, 2)); /* within 10 s of the last one shown */
  assert_string_equal(f->line.data, "");
  apply(f, queued(&e, 11000, 0));
  assert_string_equal(f->line.data, "job j-1: queued (next)\n");
  apply(f, started(&e, "worker-2"));
  assert_string_equal(f->line.data, "job j-1: started on worker-2\n");
  assert_int_equal(f->job.state, KILN__V1__JOB_STATE__JOB_STATE_RUNNING);
  apply(f, progress(&e, "sm_89", "flow", 2, 7, 0.3f));
  assert_string_equal(f->line.data, "sm_89: compiling: flow (3/7)\n");
  apply(f, progress(&e, "sm_89", "flow", 2, 7, 0.35f)); /* same stage: no line */
  assert_string_equal(f->line.data, "");
  apply(f, log_line(&e, "sm_89", KILN__V1__LOG_LEVEL__LOG_LEVEL_DEBUG, "detail"));
  assert_string_equal(f->line.data, "");
  assert_string_equal(f->err.data, "");
  apply(f, log_line(&e, "sm_89", KILN__V1__LOG_LEVEL__LOG_LEVEL_WARNING, "slow pass"));
  assert_string_equal(f->err.data, "sm_89: warning: slow pass\n");
  apply(f, done(&e, "sm_89", "ab12", 17375, false, 1234));
  assert_string_equal(f->line.data, "sm_89: done 17375 bytes in 1234 ms\n");
  apply(f, done(&e, "gfx950", "cd34", 99, true, 0));
  assert_string_equal(f->line.data, "gfx950: done 99 bytes (cache hit)\n");
  apply(f, terminal(&e, KILN__V1__JOB_STATE__JOB_STATE_DONE, "2 target(s) done"));
  assert_string_equal(f->line.data, "job j-1: DONE: 2 target(s) done\n");
  assert_true(kiln_cli_job_finished(&f->job));
  assert_int_equal(f->job.last_sequence, next_seq);
  assert_int_equal(kiln_cli_job_count(&f->job, KILN_CLI_TARGET_DONE), 2);
}

static void test_diagnostics_once(void **state) {
  fixture_t *f = *state;
  ev_t e, d1, d2;
  apply(f, diagnostic(&e, "", "bad.mlir", 3, 5, "expected ')'"));
  assert_string_equal(f->err.data, "bad.mlir:3:5: error: expected ')'\n");
  assert_string_equal(f->line.data, "");
  /* TargetFailed repeats it (by contract) for each target: shown once. */
  make_diag(&d1, "", "bad.mlir", 3, 5, "expected ')'");
  Kiln__V1__Diagnostic *list1[] = {&d1.diag};
  apply(f, failed(&e, "sm_89", 3, "bad.mlir:3:5: the source does not parse", list1, 1));
  assert_string_equal(f->err.data,
                      "kiln: sm_89: failed: INVALID_ARGUMENT: bad.mlir:3:5: the source does not parse\n");
  assert_string_equal(f->line.data, "sm_89: failed (INVALID_ARGUMENT)\n");
  /* A target-specific diagnostic with a note, not seen before: shown, with the
   * target and the indented note. */
  make_diag(&d2, "gfx950", "bad.mlir", 9, 1, "unsupported op");
  Kiln__V1__Diagnostic note;
  Kiln__V1__SourceLocation note_loc;
  kiln__v1__diagnostic__init(&note);
  kiln__v1__source_location__init(&note_loc);
  note_loc.file = "bad.mlir";
  note_loc.line = 2;
  note.severity = KILN__V1__SEVERITY__SEVERITY_NOTE;
  note.message = "defined here";
  note.location = &note_loc;
  Kiln__V1__Diagnostic *notes[] = {&note};
  d2.diag.notes = notes;
  d2.diag.n_notes = 1;
  Kiln__V1__Diagnostic *list2[] = {&d2.diag};
  apply(f, failed(&e, "gfx950", 3, "1 error", list2, 1));
  assert_string_equal(f->err.data,
                      "bad.mlir:9:1: error: unsupported op [gfx950]\n"
                      "  bad.mlir:2: note: defined here\n"
                      "kiln: gfx950: failed: INVALID_ARGUMENT: 1 error\n");
  /* A replayed TargetFailed (after a reconnect) says nothing again. */
  apply(f, failed(&e, "gfx950", 3, "1 error", list2, 1));
  assert_string_equal(f->err.data, "");
  assert_string_equal(f->line.data, "");
  /* A diagnostic without a location. */
  apply(f, diagnostic(&e, "sm_89", "", 0, 0, "out of registers"));
  assert_string_equal(f->err.data, "error: out of registers [sm_89]\n");
  apply(f, terminal(&e, KILN__V1__JOB_STATE__JOB_STATE_FAILED, "2 of 2 target(s) failed"));
  assert_int_equal(kiln_cli_job_count(&f->job, KILN_CLI_TARGET_FAILED), 2);
}

static void test_states_move_forward(void **state) {
  fixture_t *f = *state;
  ev_t e;
  apply(f, progress(&e, "sm_89", "flow", 2, 7, 0.5f));
  apply(f, progress(&e, "sm_89", "flow", 2, 7, 0.25f)); /* coalesced out of order */
  assert_true(f->job.targets[0].fraction >= 0.5f);
  apply(f, done(&e, "sm_89", "ab", 10, false, 5));
  apply(f, progress(&e, "sm_89", "vm", 5, 7, 0.9f)); /* a late progress event */
  assert_int_equal(f->job.targets[0].state, KILN_CLI_TARGET_DONE);
  assert_string_equal(f->line.data, "");
  apply(f, terminal(&e, KILN__V1__JOB_STATE__JOB_STATE_DONE, ""));
  apply(f, queued(&e, 0, 1));
  apply(f, started(&e, ""));
  assert_int_equal(f->job.state, KILN__V1__JOB_STATE__JOB_STATE_DONE);
}

static void test_admit(void **state) {
  fixture_t *f = *state;
  Kiln__V1__CompileTarget t1 = KILN__V1__COMPILE_TARGET__INIT, t2 = KILN__V1__COMPILE_TARGET__INIT;
  t1.target = "ada";
  t1.canonical_target = "sm_89";
  t1.cached = true;
  t1.artifact_digest = "ff00";
  t1.size_bytes = 4096;
  t1.cache_key = "k1";
  t2.target = "gfx950";
  t2.canonical_target = "gfx950";
  Kiln__V1__CompileTarget *targets[] = {&t1, &t2};
  Kiln__V1__CompileResponse r = KILN__V1__COMPILE_RESPONSE__INIT;
  r.job_id = "j-1";
  r.source_digest = "5555";
  r.targets = targets;
  r.n_targets = 2;
  r.state = KILN__V1__JOB_STATE__JOB_STATE_QUEUED;
  kiln_cli_job_admit(&f->job, &r);
  assert_int_equal(f->job.n_targets, 2);
  assert_string_equal(f->job.targets[0].name, "sm_89");
  assert_int_equal(f->job.targets[0].state, KILN_CLI_TARGET_DONE);
  assert_true(f->job.targets[0].cache_hit);
  assert_int_equal(f->job.targets[0].size_bytes, 4096);
  assert_int_equal(f->job.targets[1].state, KILN_CLI_TARGET_PENDING);
  assert_string_equal(f->job.source_digest, "5555");
  assert_false(kiln_cli_job_finished(&f->job));
  /* Every target cached: the job is born DONE. */
  t2.cached = true;
  t2.artifact_digest = "ee00";
  r.state = KILN__V1__JOB_STATE__JOB_STATE_DONE;
  kiln_cli_job_admit(&f->job, &r);
  assert_true(kiln_cli_job_finished(&f->job));
  assert_int_equal(f->job.n_targets, 2);
  assert_string_equal(f->job.message, "every target came from the cache");
}

static void test_live_render(void **state) {
  fixture_t *f = *state;
  ev_t e;
  apply(f, started(&e, ""));
  apply(f, progress(&e, "sm_89", "flow", 2, 7, 0.5f));
  apply(f, done(&e, "gfx950", "cd", 99, true, 0));
  apply(f, failed(&e, "arm5gen", 13, "compiler crashed \xc3\xa9\xc3\xa9\xc3\xa9", NULL, 0));
  kiln_cli_job_target(&f->job, "x86_64"); /* named, nothing heard */
  kiln_buf_t out;
  kiln_buf_init(&out);
  size_t n = kiln_cli_job_render_live(&f->job, 0, &out);
  assert_int_equal(n, 5);
  assert_string_equal(out.data,
                      "job j-1: running, 1 of 4 target(s) done, 1 failed\n"
                      "  sm_89          [##########..........]  50% flow (3/7)\n"
                      "  gfx950         done 99 bytes (cache hit)\n"
                      "  arm5gen        FAILED INTERNAL: compiler crashed \xc3\xa9\xc3\xa9\xc3\xa9\n"
                      "  x86_64         waiting\n");
  /* Cut to 52 columns: every line fits, and the UTF-8 line is cut between
   * characters (52 = 17 + "FAILED INTERNAL: compiler crashed " + one e-acute). */
  kiln_buf_clear(&out);
  kiln_cli_job_render_live(&f->job, 52, &out);
  const char *p = out.data;
  while (*p) {
    const char *nl = strchr(p, '\n');
    size_t cols = 0;
    for (const char *q = p; q < nl; q++) cols += ((unsigned char)*q & 0xC0) != 0x80;
    assert_true(cols <= 52);
    p = nl + 1;
  }
  assert_non_null(strstr(out.data, "  arm5gen        FAILED INTERNAL: compiler crashed \xc3\xa9\n"));
  /* A frame over a previous 5-line frame: up 5, each line cleared, rest cleared. */
  kiln_buf_clear(&out);
  size_t lines = kiln_cli_job_render_frame(&f->job, 5, 0, &out);
  assert_int_equal(lines, 5);
  assert_memory_equal(out.data, "\r\x1b[5A\x1b[2Kjob j-1:", 16);
  assert_non_null(strstr(out.data, "\n\x1b[2K  sm_89 "));
  assert_string_equal(out.data + out.len - 3, "\x1b[J");
  kiln_buf_clear(&out);
  kiln_cli_job_render_frame(&f->job, 0, 0, &out);
  assert_memory_equal(out.data, "\x1b[2Kjob", 7);
  kiln_buf_clear(&out);
  kiln_cli_live_erase(5, &out);
  assert_string_equal(out.data, "\r\x1b[5A\x1b[J");
  kiln_buf_clear(&out);
  kiln_cli_live_erase(0, &out);
  assert_string_equal(out.data, "");
  kiln_buf_deinit(&out);
}

static void test_manifest(void **state) {
  fixture_t *f = *state;
  ev_t e;
  f->job.source_digest = kiln_strdup("5555");
  apply(f, done(&e, "sm_89", "ab12", 17375, true, 0));
  apply(f, done(&e, "gfx1100", "cd34", 200, false, 812));
  apply(f, failed(&e, "gfx950", 3, "bad.mlir:3:5: expected ')'", NULL, 0));
  apply(f, terminal(&e, KILN__V1__JOB_STATE__JOB_STATE_FAILED, "1 of 3 target(s) failed"));
  f->job.targets[0].file = kiln_strdup("sm_89.vmfb");
  json_object *m = kiln_cli_job_manifest(&f->job);
  /* Round trip through text, as a CI script reads it. */
  json_object *root = json_tokener_parse(json_object_to_json_string(m));
  json_object_put(m);
  assert_non_null(root);
  assert_string_equal(json_object_get_string(member(root, "job_id")), "j-1");
  assert_string_equal(json_object_get_string(member(root, "source_digest")), "5555");
  assert_string_equal(json_object_get_string(member(root, "state")), "FAILED");
  assert_string_equal(json_object_get_string(member(root, "message")), "1 of 3 target(s) failed");
  json_object *targets = member(root, "targets");
  assert_int_equal(json_object_object_length(targets), 2);
  json_object *sm = member(targets, "sm_89");
  assert_string_equal(json_object_get_string(member(sm, "digest")), "ab12");
  assert_int_equal(json_object_get_int64(member(sm, "size")), 17375);
  assert_true(json_object_get_boolean(member(sm, "cache_hit")));
  assert_string_equal(json_object_get_string(member(sm, "file")), "sm_89.vmfb");
  assert_int_equal(json_object_get_int64(member(sm, "compile_ms")), 0);
  json_object *gfx = member(targets, "gfx1100");
  assert_null(member(gfx, "file")); /* not written */
  assert_false(json_object_get_boolean(member(gfx, "cache_hit")));
  assert_int_equal(json_object_get_int64(member(gfx, "compile_ms")), 812);
  json_object *failed_obj = member(member(root, "failed"), "gfx950");
  assert_string_equal(json_object_get_string(member(failed_obj, "code")), "INVALID_ARGUMENT");
  assert_string_equal(json_object_get_string(member(failed_obj, "message")), "bad.mlir:3:5: expected ')'");
  json_object_put(root);
}

int main(void) {
#define T(f) cmocka_unit_test_setup_teardown(f, setup, teardown)
  const struct CMUnitTest tests[] = {
      T(test_plain_lines), T(test_diagnostics_once), T(test_states_move_forward),
      T(test_admit),       T(test_live_render),      T(test_manifest),
  };
#undef T
  return cmocka_run_group_tests(tests, NULL, NULL);
}
