/* What the CLI knows about one job, built from its WatchJob events, and every way
 * it is shown: the plain line an event is worth (logs, pipes), the live per-target
 * display (terminals), diagnostics as file:line:col text, and the JSON manifest
 * (`kiln compile` writes it, `status`/`watch` print it).
 *
 * Everything here is pure: events in, text and JSON out, no I/O, so the unit tests
 * drive it with hand-made events. Not thread-safe (one owner).
 */
#ifndef KILN_CLIENT_JOB_H
#define KILN_CLIENT_JOB_H

#include <json-c/json.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "base/buf.h"
#include "kiln/v1/kiln.pb-c.h"

typedef enum kiln_cli_target_state_e {
  KILN_CLI_TARGET_PENDING = 0, /* nothing heard yet */
  KILN_CLI_TARGET_RUNNING,     /* progress seen */
  KILN_CLI_TARGET_DONE,
  KILN_CLI_TARGET_FAILED,
} kiln_cli_target_state_t;

/* One canonical target of the job. Strings are owned by the job. */
typedef struct kiln_cli_target_s {
  char *name; /* canonical id */
  kiln_cli_target_state_t state;
  char *stage; /* last stage seen, or NULL */
  uint32_t stage_index, stage_count;
  float fraction;
  char *digest; /* DONE: artifact digest */
  uint64_t size_bytes;
  bool cache_hit;
  uint64_t compile_ms;
  char *cache_key;
  int code;      /* FAILED: gRPC code */
  char *message; /* FAILED: reason */
  char *file;    /* set by whoever wrote the artifact (compile): the file name */
} kiln_cli_target_t;

typedef struct kiln_cli_job_s {
  char *job_id;
  char *source_digest;      /* NULL when unknown (status, watch) */
  Kiln__V1__JobState state; /* UNSPECIFIED until an event says */
  char *message;            /* Terminal's summary */
  bool queued_seen;
  uint32_t queue_position;
  int64_t queued_printed_unix_ms; /* plain mode prints Queued at most every 10 s */
  char *worker;
  uint64_t last_sequence;
  uint64_t events;
  kiln_cli_target_t *targets; /* in the order first named */
  size_t n_targets;
  char **shown; /* diagnostic texts already printed, so a repeat is not */
  size_t n_shown;
} kiln_cli_job_t;

void kiln_cli_job_init(kiln_cli_job_t *job, const char *job_id);
void kiln_cli_job_deinit(kiln_cli_job_t *job);

/* The target named `name` (canonical id), added (PENDING) when new. Borrowed. */
kiln_cli_target_t *kiln_cli_job_target(kiln_cli_job_t *job, const char *name);

/* Records Compile's answer: the source digest, the job's admitted state, and every
 * requested target (already DONE for the cached ones). */
void kiln_cli_job_admit(kiln_cli_job_t *job, const Kiln__V1__CompileResponse *response);

/* True once a Terminal event was applied (or admission said DONE). */
bool kiln_cli_job_finished(const kiln_cli_job_t *job);

/* Applies one event. Appends to `out_line` the plain line it is worth on stdout
 * (with its newline; nothing for events not worth a line: fraction updates within
 * a stage, debug logs, ...) and to `out_err` what belongs on stderr: diagnostics as
 * "FILE:LINE:COL: error: MESSAGE [target]" with their notes (each distinct text
 * once per job), warning and error log lines, and the reason of a failed target.
 * Either buffer may be NULL when unwanted. */
void kiln_cli_job_apply(kiln_cli_job_t *job, const Kiln__V1__JobEvent *event, kiln_buf_t *out_line,
                        kiln_buf_t *out_err);

/* The live display: a job line then one line per target, each cut to `width`
 * columns (0: no limit) so the terminal never wraps it. Returns the number of
 * lines appended. */
size_t kiln_cli_job_render_live(const kiln_cli_job_t *job, size_t width, kiln_buf_t *out);

/* Redraws the live display in place: moves the cursor up over the `prev_lines`
 * drawn before, then writes the new lines, each clearing the rest of its line,
 * and clears below. Returns the number of lines drawn now. */
size_t kiln_cli_job_render_frame(const kiln_cli_job_t *job, size_t prev_lines, size_t width, kiln_buf_t *out);

/* Erases `lines` lines of a live display drawn before (cursor back to its top),
 * so other output can be printed there. */
void kiln_cli_live_erase(size_t lines, kiln_buf_t *out);

/* kiln_cli_live_erase written to `stream` at once (and flushed). */
void kiln_cli_live_clear(FILE *stream, size_t lines);

/* The manifest: {"job_id", "source_digest", "state", "message", "targets":
 * {canonical: {"digest", "size", "cache_hit", "file", "compile_ms"}}, "failed":
 * {canonical: {"code", "message"}}}; "code" is the gRPC code name, "file" null
 * when nothing was written. Owned by the caller (json_object_put). */
json_object *kiln_cli_job_manifest(const kiln_cli_job_t *job);

/* The state's short name: "QUEUED", "RUNNING", "DONE", "FAILED", "CANCELLED",
 * "UNKNOWN". Static storage. */
const char *kiln_cli_job_state_name(Kiln__V1__JobState state);

/* Number of targets in `state`. */
size_t kiln_cli_job_count(const kiln_cli_job_t *job, kiln_cli_target_state_t state);

#endif /* KILN_CLIENT_JOB_H */
