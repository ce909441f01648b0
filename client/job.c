/* The CLI's view of a job, from WatchJob events, and its renderings.
 *
 * Invariants: a target's state only moves forward (PENDING -> RUNNING -> DONE |
 * FAILED; a replayed event never moves it back); its fraction never decreases; the
 * job's state is the last one an event implied, and a terminal state is final.
 * Diagnostics arrive twice by contract (as Diagnostic events and again inside
 * TargetFailed), and a parse error once per target; `shown` keeps each distinct
 * text to once per job.
 */
#include "client/job.h"

#include <string.h>

#include "base/alloc.h"
#include "base/status.h"
#include "client/diagnostic.h"

#define BAR_WIDTH            20
#define QUEUED_LINE_EVERY_MS 10000

static void set_str(char **dst, const char *src) {
  char *copy = src ? kiln_strdup(src) : NULL;
  kiln_free(*dst);
  *dst = copy;
}

void kiln_cli_job_init(kiln_cli_job_t *job, const char *job_id) {
  memset(job, 0, sizeof *job);
  if (job_id && *job_id) job->job_id = kiln_strdup(job_id);
}

void kiln_cli_job_deinit(kiln_cli_job_t *job) {
  for (size_t i = 0; i < job->n_targets; i++) {
    kiln_cli_target_t *t = &job->targets[i];
    kiln_free(t->name);
    kiln_free(t->stage);
    kiln_free(t->digest);
    kiln_free(t->cache_key);
    kiln_free(t->message);
    kiln_free(t->file);
  }
  kiln_free(job->targets);
  for (size_t i = 0; i < job->n_shown; i++) kiln_free(job->shown[i]);
  kiln_free(job->shown);
  kiln_free(job->job_id);
  kiln_free(job->source_digest);
  kiln_free(job->message);
  kiln_free(job->worker);
  memset(job, 0, sizeof *job);
}

kiln_cli_target_t *kiln_cli_job_target(kiln_cli_job_t *job, const char *name) {
  const char *n = name && *name ? name : "?";
  for (size_t i = 0; i < job->n_targets; i++) {
    if (strcmp(job->targets[i].name, n) == 0) return &job->targets[i];
  }
  job->targets = kiln_realloc(job->targets, (job->n_targets + 1) * sizeof *job->targets);
  kiln_cli_target_t *t = &job->targets[job->n_targets++];
  memset(t, 0, sizeof *t);
  t->name = kiln_strdup(n);
  return t;
}

static bool is_terminal(Kiln__V1__JobState state) {
  return state == KILN__V1__JOB_STATE__JOB_STATE_DONE || state == KILN__V1__JOB_STATE__JOB_STATE_FAILED ||
         state == KILN__V1__JOB_STATE__JOB_STATE_CANCELLED;
}

bool kiln_cli_job_finished(const kiln_cli_job_t *job) { return is_terminal(job->state); }

const char *kiln_cli_job_state_name(Kiln__V1__JobState state) {
  switch (state) {
    case KILN__V1__JOB_STATE__JOB_STATE_QUEUED: return "QUEUED";
    case KILN__V1__JOB_STATE__JOB_STATE_RUNNING: return "RUNNING";
    case KILN__V1__JOB_STATE__JOB_STATE_DONE: return "DONE";
    case KILN__V1__JOB_STATE__JOB_STATE_FAILED: return "FAILED";
    case KILN__V1__JOB_STATE__JOB_STATE_CANCELLED: return "CANCELLED";
    default: return "UNKNOWN";
  }
}

size_t kiln_cli_job_count(const kiln_cli_job_t *job, kiln_cli_target_state_t state) {
  size_t n = 0;
  for (size_t i = 0; i < job->n_targets; i++) n += job->targets[i].state == state;
  return n;
}

static void mark_done(kiln_cli_target_t *t, const char *digest, uint64_t size, bool cache_hit,
                      uint64_t compile_ms, const char *cache_key) {
  t->state = KILN_CLI_TARGET_DONE;
  set_str(&t->digest, digest);
  t->size_bytes = size;
  t->cache_hit = cache_hit;
  t->compile_ms = compile_ms;
  if (cache_key && *cache_key) set_str(&t->cache_key, cache_key);
  t->fraction = 1.0f;
}

void kiln_cli_job_admit(kiln_cli_job_t *job, const Kiln__V1__CompileResponse *response) {
  if (!job->job_id && response->job_id && *response->job_id) job->job_id = kiln_strdup(response->job_id);
  set_str(&job->source_digest, response->source_digest);
  if (!is_terminal(job->state)) job->state = response->state;
  if (response->state == KILN__V1__JOB_STATE__JOB_STATE_DONE && !job->message) {
    /* Born DONE: no Terminal event will be read, so say why here. */
    job->message = kiln_strdup("every target came from the cache");
  }
  for (size_t i = 0; i < response->n_targets; i++) {
    const Kiln__V1__CompileTarget *ct = response->targets[i];
    const char *name = ct->canonical_target && *ct->canonical_target ? ct->canonical_target : ct->target;
    kiln_cli_target_t *t = kiln_cli_job_target(job, name);
    if (ct->cached && t->state != KILN_CLI_TARGET_FAILED) {
      mark_done(t, ct->artifact_digest, ct->size_bytes, true, 0, ct->cache_key);
    } else if (ct->cache_key && *ct->cache_key) {
      set_str(&t->cache_key, ct->cache_key);
    }
  }
}

/* Appends the diagnostic to `out_err` unless this job already showed its text. */
static void show_diagnostic(kiln_cli_job_t *job, const Kiln__V1__Diagnostic *d, kiln_buf_t *out_err) {
  kiln_buf_t text;
  kiln_buf_init(&text);
  kiln_cli_diagnostic_format(d, &text);
  for (size_t i = 0; i < job->n_shown; i++) {
    if (strcmp(job->shown[i], text.data) == 0) {
      kiln_buf_deinit(&text);
      return;
    }
  }
  if (out_err) kiln_buf_append(out_err, text.data, text.len);
  job->shown = kiln_realloc(job->shown, (job->n_shown + 1) * sizeof *job->shown);
  job->shown[job->n_shown++] = kiln_buf_take(&text);
}

static const char *job_label(const kiln_cli_job_t *job) { return job->job_id ? job->job_id : "?"; }

static void apply_progress(kiln_cli_job_t *job, const Kiln__V1__JobEvent__TargetProgress *p,
                           kiln_buf_t *out_line) {
  kiln_cli_target_t *t = kiln_cli_job_target(job, p->target);
  if (t->state == KILN_CLI_TARGET_DONE || t->state == KILN_CLI_TARGET_FAILED) return;
  t->state = KILN_CLI_TARGET_RUNNING;
  const char *stage = p->stage ? p->stage : "";
  bool new_stage = !t->stage || strcmp(t->stage, stage) != 0;
  if (new_stage) set_str(&t->stage, stage);
  t->stage_index = p->stage_index;
  t->stage_count = p->stage_count;
  if (p->fraction > t->fraction) t->fraction = p->fraction > 1.0f ? 1.0f : p->fraction;
  if (new_stage && out_line) {
    kiln_buf_appendf(out_line, "%s: compiling: %s", t->name, *stage ? stage : "?");
    if (p->stage_count) kiln_buf_appendf(out_line, " (%u/%u)", p->stage_index + 1, p->stage_count);
    kiln_buf_append_char(out_line, '\n');
  }
}

static void apply_log(const Kiln__V1__JobEvent__LogLine *log, kiln_buf_t *out_err) {
  if (!out_err) return;
  if (log->level != KILN__V1__LOG_LEVEL__LOG_LEVEL_WARNING &&
      log->level != KILN__V1__LOG_LEVEL__LOG_LEVEL_ERROR) {
    return;
  }
  kiln_buf_appendf(out_err, "%s: %s: %s\n", log->target && *log->target ? log->target : "job",
                   log->level == KILN__V1__LOG_LEVEL__LOG_LEVEL_ERROR ? "error" : "warning",
                   log->text ? log->text : "");
}

void kiln_cli_job_apply(kiln_cli_job_t *job, const Kiln__V1__JobEvent *event, kiln_buf_t *out_line,
                        kiln_buf_t *out_err) {
  job->events++;
  if (event->sequence > job->last_sequence) job->last_sequence = event->sequence;
  if (!job->job_id && event->job_id && *event->job_id) job->job_id = kiln_strdup(event->job_id);
  switch (event->event_case) {
    case KILN__V1__JOB_EVENT__EVENT_QUEUED: {
      const Kiln__V1__JobEvent__Queued *q = event->queued;
      bool first = !job->queued_seen;
      job->queued_seen = true;
      job->queue_position = q->position;
      if (job->state == KILN__V1__JOB_STATE__JOB_STATE_UNSPECIFIED) {
        job->state = KILN__V1__JOB_STATE__JOB_STATE_QUEUED;
      }
      if (out_line && (first || event->time_unix_ms - job->queued_printed_unix_ms >= QUEUED_LINE_EVERY_MS)) {
        job->queued_printed_unix_ms = event->time_unix_ms;
        if (q->position == 0)
          kiln_buf_appendf(out_line, "job %s: queued (next)\n", job_label(job));
        else
          kiln_buf_appendf(out_line, "job %s: queued (position %u)\n", job_label(job), q->position);
      }
      break;
    }
    case KILN__V1__JOB_EVENT__EVENT_STARTED: {
      if (!is_terminal(job->state)) job->state = KILN__V1__JOB_STATE__JOB_STATE_RUNNING;
      const char *worker = event->started->worker;
      if (worker && *worker) set_str(&job->worker, worker);
      if (out_line) {
        kiln_buf_appendf(out_line, "job %s: started", job_label(job));
        if (worker && *worker) kiln_buf_appendf(out_line, " on %s", worker);
        kiln_buf_append_char(out_line, '\n');
      }
      break;
    }
    case KILN__V1__JOB_EVENT__EVENT_PROGRESS:
      if (!is_terminal(job->state)) job->state = KILN__V1__JOB_STATE__JOB_STATE_RUNNING;
      apply_progress(job, event->progress, out_line);
      break;
    case KILN__V1__JOB_EVENT__EVENT_LOG: apply_log(event->log, out_err); break;
    case KILN__V1__JOB_EVENT__EVENT_DIAGNOSTIC: show_diagnostic(job, event->diagnostic, out_err); break;
    case KILN__V1__JOB_EVENT__EVENT_TARGET_DONE: {
      const Kiln__V1__JobEvent__TargetDone *d = event->target_done;
      kiln_cli_target_t *t = kiln_cli_job_target(job, d->target);
      mark_done(t, d->artifact_digest, d->size_bytes, d->cache_hit, d->compile_ms, d->cache_key);
      if (out_line) {
        kiln_buf_appendf(out_line, "%s: done %llu bytes", t->name, (unsigned long long)d->size_bytes);
        if (d->cache_hit)
          kiln_buf_append_str(out_line, " (cache hit)");
        else
          kiln_buf_appendf(out_line, " in %llu ms", (unsigned long long)d->compile_ms);
        kiln_buf_append_char(out_line, '\n');
      }
      break;
    }
    case KILN__V1__JOB_EVENT__EVENT_TARGET_FAILED: {
      const Kiln__V1__JobEvent__TargetFailed *f = event->target_failed;
      kiln_cli_target_t *t = kiln_cli_job_target(job, f->target);
      bool again = t->state == KILN_CLI_TARGET_FAILED; /* a replay after a reconnect */
      t->state = KILN_CLI_TARGET_FAILED;
      t->code = f->code;
      set_str(&t->message, f->message ? f->message : "");
      for (size_t i = 0; i < f->n_diagnostics; i++) show_diagnostic(job, f->diagnostics[i], out_err);
      const char *code = kiln_status_code_name((kiln_status_code_t)f->code);
      if (out_err && !again) {
        kiln_buf_appendf(out_err, "kiln: %s: failed: %s: %s\n", t->name, code,
                         f->message && *f->message ? f->message : "(no message)");
      }
      if (out_line && !again) kiln_buf_appendf(out_line, "%s: failed (%s)\n", t->name, code);
      break;
    }
    case KILN__V1__JOB_EVENT__EVENT_TERMINAL: {
      const Kiln__V1__JobEvent__Terminal *term = event->terminal;
      job->state = term->state;
      set_str(&job->message, term->message ? term->message : "");
      if (out_line) {
        kiln_buf_appendf(out_line, "job %s: %s", job_label(job), kiln_cli_job_state_name(term->state));
        if (term->message && *term->message) kiln_buf_appendf(out_line, ": %s", term->message);
        kiln_buf_append_char(out_line, '\n');
      }
      break;
    }
    default: break; /* an event kind newer than this client: nothing to show */
  }
}

/* Appends `text` cut to `width` columns (counting UTF-8 sequences as one column,
 * never splitting one) and a newline. */
static void append_cut(kiln_buf_t *out, const char *text, size_t width) {
  size_t cols = 0, i = 0;
  while (text[i] && text[i] != '\n') {
    unsigned char c = (unsigned char)text[i];
    size_t len = c < 0x80 ? 1 : (c >> 5) == 6 ? 2 : (c >> 4) == 14 ? 3 : (c >> 3) == 30 ? 4 : 1;
    size_t have = 0;
    while (have < len && text[i + have]) have++;
    if (width && cols + 1 > width) break;
    kiln_buf_append(out, text + i, have);
    cols++;
    i += have;
  }
  kiln_buf_append_char(out, '\n');
}

static void live_target(const kiln_cli_target_t *t, kiln_buf_t *line) {
  kiln_buf_appendf(line, "%-14s ", t->name);
  switch (t->state) {
    case KILN_CLI_TARGET_PENDING: kiln_buf_append_str(line, "waiting"); break;
    case KILN_CLI_TARGET_RUNNING: {
      int filled = (int)(t->fraction * BAR_WIDTH + 0.5f);
      if (filled > BAR_WIDTH) filled = BAR_WIDTH;
      kiln_buf_append_char(line, '[');
      for (int i = 0; i < BAR_WIDTH; i++) kiln_buf_append_char(line, i < filled ? '#' : '.');
      kiln_buf_appendf(line, "] %3d%% %s", (int)(t->fraction * 100 + 0.5f), t->stage ? t->stage : "");
      if (t->stage_count) kiln_buf_appendf(line, " (%u/%u)", t->stage_index + 1, t->stage_count);
      break;
    }
    case KILN_CLI_TARGET_DONE:
      kiln_buf_appendf(line, "done %llu bytes", (unsigned long long)t->size_bytes);
      if (t->cache_hit)
        kiln_buf_append_str(line, " (cache hit)");
      else
        kiln_buf_appendf(line, " in %llu ms", (unsigned long long)t->compile_ms);
      break;
    case KILN_CLI_TARGET_FAILED:
      kiln_buf_appendf(line, "FAILED %s: %s", kiln_status_code_name((kiln_status_code_t)t->code),
                       t->message ? t->message : "");
      break;
  }
}

size_t kiln_cli_job_render_live(const kiln_cli_job_t *job, size_t width, kiln_buf_t *out) {
  kiln_buf_t line;
  kiln_buf_init(&line);
  kiln_buf_appendf(&line, "job %s: ", job_label(job));
  switch (job->state) {
    case KILN__V1__JOB_STATE__JOB_STATE_QUEUED:
      if (job->queued_seen && job->queue_position) {
        kiln_buf_appendf(&line, "queued (position %u)", job->queue_position);
      } else {
        kiln_buf_append_str(&line, "queued");
      }
      break;
    case KILN__V1__JOB_STATE__JOB_STATE_UNSPECIFIED: kiln_buf_append_str(&line, "waiting for events"); break;
    default: {
      char lower[16];
      const char *name = kiln_cli_job_state_name(job->state);
      size_t k = 0;
      for (; name[k] && k + 1 < sizeof lower; k++) lower[k] = (char)(name[k] | 0x20);
      lower[k] = '\0';
      kiln_buf_append_str(&line, lower);
    }
  }
  kiln_buf_appendf(&line, ", %zu of %zu target(s) done", kiln_cli_job_count(job, KILN_CLI_TARGET_DONE),
                   job->n_targets);
  size_t failed = kiln_cli_job_count(job, KILN_CLI_TARGET_FAILED);
  if (failed) kiln_buf_appendf(&line, ", %zu failed", failed);
  append_cut(out, line.data, width);
  for (size_t i = 0; i < job->n_targets; i++) {
    kiln_buf_clear(&line);
    kiln_buf_append_str(&line, "  ");
    live_target(&job->targets[i], &line);
    append_cut(out, line.data, width);
  }
  kiln_buf_deinit(&line);
  return job->n_targets + 1;
}

void kiln_cli_live_erase(size_t lines, kiln_buf_t *out) {
  if (lines == 0) return;
  kiln_buf_appendf(out, "\r\x1b[%zuA\x1b[J", lines);
}

void kiln_cli_live_clear(FILE *stream, size_t lines) {
  kiln_buf_t erase;
  kiln_buf_init(&erase);
  kiln_cli_live_erase(lines, &erase);
  fputs(erase.data, stream);
  fflush(stream);
  kiln_buf_deinit(&erase);
}

size_t kiln_cli_job_render_frame(const kiln_cli_job_t *job, size_t prev_lines, size_t width,
                                 kiln_buf_t *out) {
  if (prev_lines) kiln_buf_appendf(out, "\r\x1b[%zuA", prev_lines);
  kiln_buf_t lines;
  kiln_buf_init(&lines);
  size_t n = kiln_cli_job_render_live(job, width, &lines);
  /* Each line clears what a longer previous frame left on it. */
  const char *p = lines.data;
  while (*p) {
    const char *nl = strchr(p, '\n');
    kiln_buf_append_str(out, "\x1b[2K");
    kiln_buf_append(out, p, (size_t)(nl - p) + 1);
    p = nl + 1;
  }
  kiln_buf_append_str(out, "\x1b[J");
  kiln_buf_deinit(&lines);
  return n;
}

json_object *kiln_cli_job_manifest(const kiln_cli_job_t *job) {
  json_object *root = json_object_new_object();
  json_object_object_add(root, "job_id", job->job_id ? json_object_new_string(job->job_id) : NULL);
  json_object_object_add(root, "source_digest",
                         job->source_digest ? json_object_new_string(job->source_digest) : NULL);
  json_object_object_add(root, "state", json_object_new_string(kiln_cli_job_state_name(job->state)));
  json_object_object_add(root, "message", json_object_new_string(job->message ? job->message : ""));
  json_object *targets = json_object_new_object();
  json_object *failed = json_object_new_object();
  for (size_t i = 0; i < job->n_targets; i++) {
    const kiln_cli_target_t *t = &job->targets[i];
    if (t->state == KILN_CLI_TARGET_DONE) {
      json_object *o = json_object_new_object();
      json_object_object_add(o, "digest", json_object_new_string(t->digest ? t->digest : ""));
      json_object_object_add(o, "size", json_object_new_uint64(t->size_bytes));
      json_object_object_add(o, "cache_hit", json_object_new_boolean(t->cache_hit));
      json_object_object_add(o, "file", t->file ? json_object_new_string(t->file) : NULL);
      json_object_object_add(o, "compile_ms", json_object_new_uint64(t->compile_ms));
      json_object_object_add(targets, t->name, o);
    } else if (t->state == KILN_CLI_TARGET_FAILED) {
      json_object *o = json_object_new_object();
      json_object_object_add(o, "code",
                             json_object_new_string(kiln_status_code_name((kiln_status_code_t)t->code)));
      json_object_object_add(o, "message", json_object_new_string(t->message ? t->message : ""));
      json_object_object_add(failed, t->name, o);
    }
  }
  json_object_object_add(root, "targets", targets);
  json_object_object_add(root, "failed", failed);
  return root;
}
