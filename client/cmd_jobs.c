/* `kiln status JOB`, `kiln watch JOB`, `kiln cancel JOB`, and the job follower
 * that `kiln compile` shares with `watch`.
 *
 * status: WatchJob without from_start opens with the job's current status (its
 * latest Queued/Started and every TargetDone/TargetFailed so far) and then follows
 * live; status reads until nothing more arrives for STATUS_QUIET_MS (the replay is
 * over) or the Terminal event, then cancels the stream, which leaves the job
 * untouched. watch: WatchJob from the start to the Terminal event; exit 0 when
 * the job ended DONE, 1 when FAILED or CANCELLED; interrupting it leaves the job
 * alone. cancel: CancelJob.
 *
 * The follower, for `compile` (the job is its own), polls its stream every
 * INTERRUPT_POLL_MS so that SIGINT/SIGTERM, caught meanwhile, cancel the job on
 * kilnd before the process exits: a stopped CI run leaves no compile behind.
 */
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <time.h>
#include <unistd.h>

#include "base/buf.h"
#include "base/time.h"
#include "client/cli.h"
#include "client/job.h"
#include "client/json.h"
#include "kiln/v1/kiln.pb-c.h"

#define STATUS_QUIET_MS   300
#define REDRAW_EVERY_MS   100
#define RECONNECTS        3
#define END_WAIT_MS       2000 /* after Terminal, the stream ends at once; do not hang on it */

#define INTERRUPT_POLL_MS 250
#define CANCEL_TIMEOUT_MS 5000

/* Set by SIGINT/SIGTERM while a job this process submitted is followed. */
static volatile sig_atomic_t interrupted;

static void on_signal(int sig) { interrupted = sig; }

static struct sigaction saved_int, saved_term;
static bool catching;

void kiln_cli_interrupts_catch(bool on) {
  if (on && !catching) {
    interrupted = 0;
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_signal;
    sigemptyset(&sa.sa_mask);
    sigaction(SIGINT, &sa, &saved_int);
    sigaction(SIGTERM, &sa, &saved_term);
    catching = true;
  } else if (!on && catching) {
    sigaction(SIGINT, &saved_int, NULL);
    sigaction(SIGTERM, &saved_term, NULL);
    catching = false;
  }
}

bool kiln_cli_interrupted(void) { return interrupted != 0; }

/* Cancels the job on kilnd after an interrupt: a CI run that is stopped should
 * not leave its compile running. Reports what happened; returns the exit code. */

bool kiln_cli_is_live_terminal(int fd) {
  const char *term = getenv("TERM");
  return isatty(fd) && !(term && strcmp(term, "dumb") == 0);
}

kiln_cli_show_t kiln_cli_show_mode(const kiln_cli_settings_t *settings) {
  if (settings->json) return KILN_CLI_SHOW_NONE;
  return kiln_cli_is_live_terminal(STDOUT_FILENO) ? KILN_CLI_SHOW_LIVE : KILN_CLI_SHOW_PLAIN;
}

size_t kiln_cli_terminal_width(int fd) {
  struct winsize ws;
  if (ioctl(fd, TIOCGWINSZ, &ws) == 0 && ws.ws_col > 1) return ws.ws_col - 1;
  return 79;
}

static void sleep_ms(int64_t ms) {
  struct timespec ts = {ms / 1000, (ms % 1000) * 1000000};
  nanosleep(&ts, NULL);
}

/* The live display's state between events. */
typedef struct live_s {
  size_t lines;
  int64_t drawn_ms;
} live_t;

static void draw(const kiln_cli_job_t *job, live_t *live) {
  kiln_buf_t out;
  kiln_buf_init(&out);
  live->lines = kiln_cli_job_render_frame(job, live->lines, kiln_cli_terminal_width(STDOUT_FILENO), &out);
  fputs(out.data, stdout);
  fflush(stdout);
  kiln_buf_deinit(&out);
  live->drawn_ms = kiln_time_monotonic_ms();
}

/* Erases the live display (if shown), so that other output starts on a clean line. */
static void live_clear(live_t *live, kiln_cli_show_t show) {
  if (show != KILN_CLI_SHOW_LIVE || !live->lines) return;
  kiln_cli_live_clear(stdout, live->lines);
  live->lines = 0;
}

/* Shows what one event produced. */
static void show_event(const kiln_cli_job_t *job, kiln_cli_show_t show, live_t *live, const kiln_buf_t *line,
                       const kiln_buf_t *err, bool force_draw) {
  if (err->len) {
    if (show == KILN_CLI_SHOW_LIVE && live->lines) force_draw = true;
    live_clear(live, show);
    fputs(err->data, stderr);
    fflush(stderr);
  }
  if (show == KILN_CLI_SHOW_PLAIN && line->len) {
    fputs(line->data, stdout);
    fflush(stdout);
  }
  if (show == KILN_CLI_SHOW_LIVE &&
      (force_draw || kiln_time_monotonic_ms() - live->drawn_ms >= REDRAW_EVERY_MS)) {
    draw(job, live);
  }
}

/* Cancels the job on kilnd after an interrupt: a CI run that is stopped should
 * not leave its compile running. Returns the exit code. */
static int cancel_interrupted(const kiln_cli_settings_t *settings, kiln_client_t *client,
                              const kiln_cli_job_t *job, live_t *live, kiln_cli_show_t show) {
  live_clear(live, show);
  Kiln__V1__CancelJobRequest req = KILN__V1__CANCEL_JOB_REQUEST__INIT;
  req.job_id = job->job_id;
  req.reason = interrupted == SIGTERM ? "kiln compile was terminated (SIGTERM)"
                                      : "kiln compile was interrupted (SIGINT)";
  kiln_client_set_timeout(client, CANCEL_TIMEOUT_MS);
  ProtobufCMessage *msg = NULL;
  int rc =
      kiln_cli_call(settings, client, "compile: cancelling the job after an interrupt",
                    "/kiln.v1.Kiln/CancelJob", &req.base, &kiln__v1__cancel_job_response__descriptor, &msg);
  if (rc) return rc;
  fprintf(stderr, "kiln: compile: interrupted; job %s cancelled on kilnd\n", job->job_id);
  protobuf_c_message_free_unpacked(msg, NULL);
  return KILN_EXIT_FAILED;
}

int kiln_cli_job_follow(const kiln_cli_settings_t *settings, kiln_client_t *client,
                        struct kiln_cli_job_s *job, bool from_start, kiln_cli_show_t show,
                        bool cancel_on_interrupt, const char *what) {
  live_t live = {0, 0};
  if (cancel_on_interrupt && interrupted && !kiln_cli_job_finished(job)) {
    return cancel_interrupted(settings, client, job, &live, show); /* caught before we got here */
  }
  int rc = KILN_EXIT_OK;
  if (show == KILN_CLI_SHOW_LIVE) draw(job, &live);
  int reconnects = 0;
  kiln_status_t status = NULL;
  while (!kiln_cli_job_finished(job)) {
    Kiln__V1__WatchJobRequest req = KILN__V1__WATCH_JOB_REQUEST__INIT;
    req.job_id = job->job_id;
    req.from_start = from_start;
    req.after_sequence = reconnects ? job->last_sequence : 0;
    kiln_client_stream_t *stream = kiln_client_stream_open(client, "/kiln.v1.Kiln/WatchJob", &req.base);
    kiln_buf_t line, err;
    kiln_buf_init(&line);
    kiln_buf_init(&err);
    for (;;) {
      ProtobufCMessage *msg = NULL;
      bool timed_out = false;
      int64_t wait = kiln_cli_job_finished(job) ? END_WAIT_MS : cancel_on_interrupt ? INTERRUPT_POLL_MS : -1;
      status = kiln_client_stream_read(stream, &kiln__v1__job_event__descriptor, wait, &msg, &timed_out);
      if (timed_out && !kiln_cli_job_finished(job)) {
        if (!interrupted) continue; /* the read stays pending */
        kiln_client_stream_cancel(stream);
        continue;
      }
      if (timed_out) {
        kiln_client_stream_cancel(stream); /* finished; the job is not affected */
        continue;
      }
      if (status || !msg) break;
      const Kiln__V1__JobEvent *ev = (const Kiln__V1__JobEvent *)msg;
      kiln_buf_clear(&line);
      kiln_buf_clear(&err);
      kiln_cli_job_apply(job, ev, &line, &err);
      bool milestone = ev->event_case == KILN__V1__JOB_EVENT__EVENT_TARGET_DONE ||
                       ev->event_case == KILN__V1__JOB_EVENT__EVENT_TARGET_FAILED ||
                       ev->event_case == KILN__V1__JOB_EVENT__EVENT_TERMINAL;
      show_event(job, show, &live, &line, &err, milestone);
      protobuf_c_message_free_unpacked(msg, NULL);
    }
    kiln_buf_deinit(&line);
    kiln_buf_deinit(&err);
    kiln_client_stream_destroy(stream);
    if (cancel_on_interrupt && interrupted && !kiln_cli_job_finished(job)) {
      kiln_status_free(status);
      status = NULL;
      rc = cancel_interrupted(settings, client, job, &live, show);
      break;
    }
    if (kiln_cli_job_finished(job)) {
      kiln_status_free(status); /* CANCELLED by us after the end, or OK */
      status = NULL;
      break;
    }
    if (!status) {
      status =
          KILN_STATUS(KILN_STATUS_INTERNAL, "WatchJob ended without the job's Terminal event (kilnd bug)");
      break;
    }
    if (kiln_status_code(status) != KILN_STATUS_UNAVAILABLE || reconnects >= RECONNECTS ||
        job->last_sequence == 0) {
      break;
    }
    /* A dropped stream: the job goes on; resume after the last event seen. */
    reconnects++;
    kiln_status_free(status);
    status = NULL;
    sleep_ms(500 * reconnects);
  }
  if (rc) return rc;
  if (show == KILN_CLI_SHOW_LIVE) draw(job, &live);
  if (status) return kiln_cli_report(settings, what, kiln_client_timeout(client), status);
  return KILN_EXIT_OK;
}

static json_object *job_json(const kiln_cli_job_t *job) {
  json_object *root = kiln_cli_job_manifest(job);
  json_object *running = json_object_new_object();
  for (size_t i = 0; i < job->n_targets; i++) {
    const kiln_cli_target_t *t = &job->targets[i];
    if (t->state != KILN_CLI_TARGET_RUNNING && t->state != KILN_CLI_TARGET_PENDING) continue;
    json_object *o = json_object_new_object();
    json_object_object_add(o, "stage", t->stage ? json_object_new_string(t->stage) : NULL);
    json_object_object_add(o, "fraction", json_object_new_double(t->fraction));
    json_object_object_add(running, t->name, o);
  }
  json_object_object_add(root, "in_progress", running);
  json_object_object_add(root, "last_sequence", json_object_new_uint64(job->last_sequence));
  return root;
}

static void print_artifacts(const kiln_cli_job_t *job) {
  for (size_t i = 0; i < job->n_targets; i++) {
    const kiln_cli_target_t *t = &job->targets[i];
    if (t->state == KILN_CLI_TARGET_DONE) printf("  %-14s %s\n", t->name, t->digest ? t->digest : "");
  }
}

int kiln_cli_status(const kiln_cli_settings_t *settings, kiln_client_t *client, int argc, const char **argv) {
  int rc = kiln_cli_expect_args("status", argc, 1, 1, "status JOB_ID");
  if (rc) return rc;
  kiln_cli_job_t job;
  kiln_cli_job_init(&job, argv[0]);
  Kiln__V1__WatchJobRequest req = KILN__V1__WATCH_JOB_REQUEST__INIT;
  req.job_id = (char *)argv[0];
  kiln_client_stream_t *stream = kiln_client_stream_open(client, "/kiln.v1.Kiln/WatchJob", &req.base);
  kiln_status_t status = NULL;
  kiln_buf_t err;
  kiln_buf_init(&err);
  while (!kiln_cli_job_finished(&job)) {
    ProtobufCMessage *msg = NULL;
    bool timed_out = false;
    /* The first answer may take a round trip; after it, quiet means the replay is over. */
    int64_t wait = job.events ? STATUS_QUIET_MS : -1;
    status = kiln_client_stream_read(stream, &kiln__v1__job_event__descriptor, wait, &msg, &timed_out);
    if (timed_out || status || !msg) break;
    kiln_cli_job_apply(&job, (const Kiln__V1__JobEvent *)msg, NULL, settings->json ? NULL : &err);
    protobuf_c_message_free_unpacked(msg, NULL);
  }
  kiln_client_stream_cancel(stream); /* only the watch ends; the job goes on */
  kiln_client_stream_destroy(stream);
  if (status) {
    kiln_buf_deinit(&err);
    kiln_cli_job_deinit(&job);
    return kiln_cli_report(settings, "status", kiln_client_timeout(client), status);
  }
  if (settings->json) {
    kiln_client_json_print(job_json(&job));
  } else {
    kiln_buf_t out;
    kiln_buf_init(&out);
    kiln_cli_job_render_live(&job, 0, &out);
    fputs(out.data, stdout);
    kiln_buf_deinit(&out);
    if (job.message && *job.message) printf("  %s\n", job.message);
    if (kiln_cli_job_count(&job, KILN_CLI_TARGET_DONE)) {
      printf("artifacts:\n");
      print_artifacts(&job);
    }
    fputs(err.data, stderr);
  }
  kiln_buf_deinit(&err);
  kiln_cli_job_deinit(&job);
  return KILN_EXIT_OK;
}

int kiln_cli_watch(const kiln_cli_settings_t *settings, kiln_client_t *client, int argc, const char **argv) {
  int rc = kiln_cli_expect_args("watch", argc, 1, 1, "watch JOB_ID");
  if (rc) return rc;
  kiln_client_set_timeout(client, kiln_cli_timeout_ms(settings, true));
  kiln_cli_job_t job;
  kiln_cli_job_init(&job, argv[0]);
  rc = kiln_cli_job_follow(settings, client, &job, true, kiln_cli_show_mode(settings), false, "watch");
  if (rc == KILN_EXIT_OK) {
    if (settings->json) {
      kiln_client_json_print(job_json(&job));
    } else if (kiln_cli_job_count(&job, KILN_CLI_TARGET_DONE)) {
      printf("artifacts:\n");
      print_artifacts(&job);
    }
    rc = job.state == KILN__V1__JOB_STATE__JOB_STATE_DONE ? KILN_EXIT_OK : KILN_EXIT_FAILED;
  }
  kiln_cli_job_deinit(&job);
  return rc;
}

int kiln_cli_cancel(const kiln_cli_settings_t *settings, kiln_client_t *client, int argc, const char **argv) {
  int rc = kiln_cli_expect_args("cancel", argc, 1, 1, "cancel JOB_ID [--reason TEXT]");
  if (rc) return rc;
  Kiln__V1__CancelJobRequest req = KILN__V1__CANCEL_JOB_REQUEST__INIT;
  req.job_id = (char *)argv[0];
  req.reason = settings->reason ? settings->reason : (char *)"";
  ProtobufCMessage *msg = NULL;
  rc = kiln_cli_call(settings, client, "cancel", "/kiln.v1.Kiln/CancelJob", &req.base,
                     &kiln__v1__cancel_job_response__descriptor, &msg);
  if (rc) return rc;
  const Kiln__V1__CancelJobResponse *r = (const Kiln__V1__CancelJobResponse *)msg;
  if (settings->json) {
    json_object *obj = kiln_client_json_from_message(msg);
    json_object_object_add(obj, "job_id", json_object_new_string(argv[0]));
    kiln_client_json_print(obj);
  } else if (r->cancelled) {
    printf("job %s: cancelled\n", argv[0]);
  } else {
    printf("job %s: had already finished: %s\n", argv[0], kiln_cli_job_state_name(r->state));
  }
  protobuf_c_message_free_unpacked(msg, NULL);
  return KILN_EXIT_OK;
}
