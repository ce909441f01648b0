/* The job engine's events: each job's event log (packed JobEvents, sequence 1,
 * 2, ...), the watchers that stream it (WatchJob), the in-process listeners told
 * when a job ends, and the outbox through which all of them are reached after
 * the engine's lock is released (jobs_impl.h).
 *
 * A watcher has at most one send outstanding (gRPC's rule and HTTP/2's
 * back-pressure): `sending` is set when its next event is queued in the outbox
 * and cleared by the send's callback, which queues the next one. A listener is
 * moved from its job to the outbox when the job ends and freed once its callback
 * ran (or, unlistened meanwhile, without running it).
 */
#include <inttypes.h>
#include <stdio.h>
#include <string.h>

#include "base/alloc.h"
#include "base/time.h"
#include "daemon/client_text.h"
#include "daemon/diags.h"
#include "daemon/jobs/jobs_impl.h"

typedef enum effect_kind_e {
  EFFECT_SEND = 1,   /* the watcher's next event (packed bytes, owned) */
  EFFECT_FINISH = 2, /* kilnd_stream_finish(stream, status) */
  EFFECT_NOTIFY = 3, /* a job's listeners, with how it ended */
  EFFECT_CANCEL = 4, /* the pool cancels a running task */
} effect_kind_t;

/* How a job ended, copied for listeners that run after the lock is gone. */
typedef struct notice_s {
  kilnd_job_outcome_t outcome;
  kilnd_job_outcome_target_t *targets;
  char **strings; /* what outcome's pointers point at (owned) */
  size_t n_strings;
  kilnd_job_listener_t *listeners;
} notice_t;

struct effect_s {
  effect_kind_t kind;
  watcher_t *watcher;
  uint8_t *packed;
  size_t len;
  kilnd_stream_t *stream;
  kiln_status_t status;
  notice_t *notice;
  uint64_t task_id;
  effect_t *next;
};

/* ---- the outbox ---- */

static effect_t *outbox_add_locked(kilnd_jobs_t *jobs, effect_kind_t kind) {
  effect_t *e = kiln_calloc(1, sizeof *e);
  e->kind = kind;
  if (jobs->outbox_tail)
    jobs->outbox_tail->next = e;
  else
    jobs->outbox = e;
  jobs->outbox_tail = e;
  return e;
}

effect_t *outbox_take_locked(kilnd_jobs_t *jobs) {
  effect_t *all = jobs->outbox;
  jobs->outbox = jobs->outbox_tail = NULL;
  return all;
}

void outbox_cancel_task_locked(kilnd_jobs_t *jobs, uint64_t task_id) {
  outbox_add_locked(jobs, EFFECT_CANCEL)->task_id = task_id;
}

void outbox_finish_stream_locked(kilnd_jobs_t *jobs, kilnd_stream_t *stream, kiln_status_t status) {
  effect_t *e = outbox_add_locked(jobs, EFFECT_FINISH);
  e->stream = stream;
  e->status = status;
}

static void notice_free(notice_t *n) {
  for (size_t i = 0; i < n->n_strings; i++) kiln_free(n->strings[i]);
  kiln_free(n->strings);
  kiln_free(n->targets);
  while (n->listeners) {
    kilnd_job_listener_t *l = n->listeners;
    n->listeners = l->next;
    kiln_free(l);
  }
  kiln_free(n);
}

static void effect_free(effect_t *e) {
  kiln_free(e->packed);
  kiln_status_free(e->status);
  if (e->notice) notice_free(e->notice);
  kiln_free(e);
}

void drop_effects(effect_t *effects) {
  while (effects) {
    effect_t *e = effects;
    effects = e->next;
    effect_free(e);
  }
}

static void watcher_sent(kilnd_stream_t *stream, bool ok, void *user);

/* A queued send that the stream refused: the watcher ends with that status. */
static void send_refused(kilnd_jobs_t *jobs, watcher_t *w, kiln_status_t status) {
  kilnd_stream_t *stream = w->stream;
  engine_lock(jobs);
  bool detached = w->job == NULL; /* kilnd_jobs_close counted it in handles_open */
  if (detached) {
    kiln_free(w->replay);
    kiln_free(w);
  } else {
    watcher_remove_locked(w);
  }
  engine_unlock(jobs);
  kilnd_stream_finish(stream, status);
  if (detached) {
    jobs->handles_open--;
    maybe_closed(jobs);
  }
}

void run_effects(kilnd_jobs_t *jobs, effect_t *effects) {
  while (effects) {
    effect_t *e = effects;
    effects = e->next;
    switch (e->kind) {
      case EFFECT_SEND: {
        uint8_t *packed = e->packed;
        e->packed = NULL; /* the stream's from here, also when it refuses */
        kiln_status_t st =
            kilnd_stream_send_packed(e->watcher->stream, packed, e->len, watcher_sent, e->watcher);
        if (st) send_refused(jobs, e->watcher, st);
        break;
      }
      case EFFECT_FINISH:
        kilnd_stream_finish(e->stream, e->status);
        e->status = NULL;
        break;
      case EFFECT_NOTIFY:
        /* A callback may unlisten a later listener of the same notice (dropped). */
        for (kilnd_job_listener_t *l = e->notice->listeners; l; l = l->next) {
          if (!l->dropped) l->fn(l->user, &e->notice->outcome);
        }
        break;
      case EFFECT_CANCEL:
        if (jobs->pool.self)
          jobs->pool.cancel(jobs->pool.self, e->task_id); /* reports failures, then FINISHED */
        break;
    }
    effect_free(e);
  }
}

/* ---- watchers ---- */

void watcher_remove_locked(watcher_t *w) {
  job_t *job = w->job;
  for (watcher_t **p = &job->watchers; *p; p = &(*p)->next) {
    if (*p == w) {
      *p = w->next;
      break;
    }
  }
  kiln_free(w->replay);
  kiln_free(w);
}

/* Under mu: queues the watcher's next event if none is outstanding. */
static void watcher_pump_locked(kilnd_jobs_t *jobs, watcher_t *w) {
  job_t *job = w->job;
  if (w->sending || w->done || !job) return;
  size_t index;
  if (w->replay_at < w->n_replay) {
    index = w->replay[w->replay_at++];
  } else if (w->live_at < job->n_events) {
    index = w->live_at++;
  } else {
    return;
  }
  const event_t *ev = &job->events[index];
  effect_t *e = outbox_add_locked(jobs, EFFECT_SEND);
  e->watcher = w;
  e->packed = kiln_memdup(ev->packed, ev->len ? ev->len : 1);
  e->len = ev->len;
  w->sending = true;
  if (ev->kind == KILN__V1__JOB_EVENT__EVENT_TERMINAL) w->done = true;
}

static void watcher_sent(kilnd_stream_t *stream, bool ok, void *user) {
  watcher_t *w = user;
  kilnd_jobs_t *jobs = w->jobs;
  bool finish = false, detached = false;
  kiln_status_t status = NULL;
  engine_lock(jobs);
  w->sending = false;
  if (!w->job) {
    /* Detached by kilnd_jobs_close, which counted it in handles_open. */
    detached = finish = true;
    status = KILN_STATUS(KILN_STATUS_UNAVAILABLE, "%s", SHUTDOWN_MESSAGE);
    kiln_free(w->replay);
    kiln_free(w);
  } else if (!ok) {
    finish = true;
    status = KILN_STATUS(KILN_STATUS_CANCELLED, "the watcher went away");
    watcher_remove_locked(w);
  } else if (w->done) {
    finish = true; /* the Terminal event went out: OK */
    watcher_remove_locked(w);
  } else {
    watcher_pump_locked(jobs, w);
  }
  engine_unlock(jobs);
  if (finish) kilnd_stream_finish(stream, status);
  if (detached) {
    jobs->handles_open--;
    maybe_closed(jobs);
  }
}

static void watcher_cancelled(kilnd_stream_t *stream, void *user) {
  watcher_t *w = user;
  kilnd_jobs_t *jobs = w->jobs;
  engine_lock(jobs);
  bool idle = !w->sending;
  if (idle)
    watcher_remove_locked(w); /* nothing outstanding will call back: end it here */
  else
    w->done = true; /* watcher_sent finishes it (its send completes with ok = false) */
  engine_unlock(jobs);
  if (idle) kilnd_stream_finish(stream, KILN_STATUS(KILN_STATUS_CANCELLED, "the client cancelled the watch"));
}

static void flush_watchers_locked(kilnd_jobs_t *jobs, job_t *job) {
  for (watcher_t *w = job->watchers; w; w = w->next) watcher_pump_locked(jobs, w);
}

/* ---- the event log ---- */

/* Appends an event to the job's log (packed) and queues it for the watchers. */
static void emit_locked(kilnd_jobs_t *jobs, job_t *job, Kiln__V1__JobEvent *ev) {
  if (job->events_deferred) return;
  ev->sequence = job->n_events + 1;
  ev->time_unix_ms = job->event_time_ms ? job->event_time_ms : kiln_time_unix_ms();
  ev->job_id = job->id;
  size_t len = protobuf_c_message_get_packed_size(&ev->base);
  if (job->n_events == job->cap_events) {
    /* A job answered from the cache has 2 + targets events; grow from there. */
    job->cap_events = job->cap_events ? job->cap_events * 2 : 2 + job->n_targets;
    job->events = kiln_realloc(job->events, job->cap_events * sizeof *job->events);
  }
  event_t *e = &job->events[job->n_events++];
  e->seq = ev->sequence;
  e->kind = ev->event_case;
  e->packed = kiln_malloc(len ? len : 1);
  e->len = protobuf_c_message_pack(&ev->base, e->packed);
  flush_watchers_locked(jobs, job);
}

void emit_queued_locked(kilnd_jobs_t *jobs, job_t *job, uint32_t position) {
  Kiln__V1__JobEvent__Queued q = KILN__V1__JOB_EVENT__QUEUED__INIT;
  q.position = position;
  q.priority = (Kiln__V1__Priority)job->priority;
  Kiln__V1__JobEvent ev = KILN__V1__JOB_EVENT__INIT;
  ev.event_case = KILN__V1__JOB_EVENT__EVENT_QUEUED;
  ev.queued = &q;
  emit_locked(jobs, job, &ev);
}

void emit_started_locked(kilnd_jobs_t *jobs, job_t *job, const char *worker) {
  Kiln__V1__JobEvent__Started s = KILN__V1__JOB_EVENT__STARTED__INIT;
  s.worker = (char *)(worker ? worker : "");
  Kiln__V1__JobEvent ev = KILN__V1__JOB_EVENT__INIT;
  ev.event_case = KILN__V1__JOB_EVENT__EVENT_STARTED;
  ev.started = &s;
  emit_locked(jobs, job, &ev);
}

void emit_progress_locked(kilnd_jobs_t *jobs, job_t *job, const char *target,
                          const kilnd_task_event_t *event) {
  Kiln__V1__JobEvent__TargetProgress pr = KILN__V1__JOB_EVENT__TARGET_PROGRESS__INIT;
  pr.target = (char *)target;
  pr.stage = (char *)(event->stage ? event->stage : "");
  pr.stage_index = event->stage_index;
  pr.stage_count = event->stage_count;
  pr.fraction = event->stage_count ? (float)(event->stage_index + 1) / (float)event->stage_count : 0.0f;
  Kiln__V1__JobEvent ev = KILN__V1__JOB_EVENT__INIT;
  ev.event_case = KILN__V1__JOB_EVENT__EVENT_PROGRESS;
  ev.progress = &pr;
  emit_locked(jobs, job, &ev);
}

void emit_target_done_locked(kilnd_jobs_t *jobs, job_t *job, size_t t, const char *digest, uint64_t size,
                             bool hit, uint64_t compile_ms) {
  Kiln__V1__JobEvent__TargetDone d = KILN__V1__JOB_EVENT__TARGET_DONE__INIT;
  d.target = job->targets[t].target;
  d.artifact_digest = (char *)digest;
  d.size_bytes = size;
  d.cache_hit = hit;
  d.compile_ms = hit ? 0 : compile_ms;
  d.cache_key = job->targets[t].key;
  job_target_t *jt = &job->targets[t];
  size_t digest_len = digest ? strnlen(digest, sizeof jt->digest - 1) : 0;
  if (digest_len) memmove(jt->digest, digest, digest_len);
  jt->digest[digest_len] = '\0';
  jt->size = size;
  jt->cache_hit = hit;
  jt->compile_ms = hit ? 0 : compile_ms;
  Kiln__V1__JobEvent ev = KILN__V1__JOB_EVENT__INIT;
  ev.event_case = KILN__V1__JOB_EVENT__EVENT_TARGET_DONE;
  ev.target_done = &d;
  emit_locked(jobs, job, &ev);
}

void emit_target_failed_locked(kilnd_jobs_t *jobs, job_t *job, size_t t, kiln_status_code_t code,
                               const char *message) {
  /* As a client may read it: no server paths, no PERMISSION_DENIED (client_text.h). */
  char context[96];
  snprintf(context, sizeof context, "job %s", job->id);
  int client_code = (int)code;
  char *client_message = kilnd_message_for_client(&client_code, message, context);
  if (client_message) message = client_message;
  code = (kiln_status_code_t)client_code;
  Kiln__V1__JobEvent__TargetFailed f = KILN__V1__JOB_EVENT__TARGET_FAILED__INIT;
  f.target = job->targets[t].target;
  f.code = (int32_t)code;
  f.message = (char *)(message ? message : "");
  /* The compiler's diagnostics, structured: sent first as Diagnostic events, then
   * again inside TargetFailed (kiln.proto). */
  kilnd_diags_t diags = {0};
  if (code == KILN_STATUS_INVALID_ARGUMENT) kilnd_diags_parse(&diags, f.message, job->targets[t].target);
  for (size_t i = 0; i < diags.n; i++) {
    Kiln__V1__JobEvent dev = KILN__V1__JOB_EVENT__INIT;
    dev.event_case = KILN__V1__JOB_EVENT__EVENT_DIAGNOSTIC;
    dev.diagnostic = diags.items[i];
    emit_locked(jobs, job, &dev);
  }
  f.n_diagnostics = diags.n;
  f.diagnostics = diags.items;
  job->targets[t].code = (int)code;
  kiln_free(job->targets[t].message);
  job->targets[t].message = kiln_strdup(f.message);
  Kiln__V1__JobEvent ev = KILN__V1__JOB_EVENT__INIT;
  ev.event_case = KILN__V1__JOB_EVENT__EVENT_TARGET_FAILED;
  ev.target_failed = &f;
  emit_locked(jobs, job, &ev);
  kilnd_diags_free(&diags);
  kiln_free(client_message);
}

void emit_terminal_event_locked(kilnd_jobs_t *jobs, job_t *job, const char *message) {
  Kiln__V1__JobEvent__Terminal t = KILN__V1__JOB_EVENT__TERMINAL__INIT;
  t.state = (Kiln__V1__JobState)job->state;
  t.message = (char *)(message ? message : "");
  Kiln__V1__JobEvent ev = KILN__V1__JOB_EVENT__INIT;
  ev.event_case = KILN__V1__JOB_EVENT__EVENT_TERMINAL;
  ev.terminal = &t;
  emit_locked(jobs, job, &ev);
}

void emit_terminal_locked(kilnd_jobs_t *jobs, job_t *job, const char *message) {
  job->finished_unix_ms = kiln_time_unix_ms();
  kiln_free(job->terminal_message);
  job->terminal_message = kiln_strdup(message ? message : "");
  persist_later_locked(jobs, job);
  emit_terminal_event_locked(jobs, job, message);
  notify_listeners_locked(jobs, job, false, job->terminal_message);
}

/* ---- listeners ---- */

static const char *notice_keep(notice_t *n, const char *s) {
  char *copy = kiln_strdup(s ? s : "");
  n->strings[n->n_strings++] = copy;
  return copy;
}

void notify_listeners_locked(kilnd_jobs_t *jobs, job_t *job, bool shutdown, const char *message) {
  if (!job->listeners) return;
  notice_t *n = kiln_calloc(1, sizeof *n);
  n->strings = kiln_calloc(2 + 3 * job->n_targets, sizeof *n->strings);
  n->targets = kiln_calloc(job->n_targets ? job->n_targets : 1, sizeof *n->targets);
  for (size_t i = 0; i < job->n_targets; i++) {
    const job_target_t *jt = &job->targets[i];
    bool ok = jt->state == TARGET_DONE;
    n->targets[i] = (kilnd_job_outcome_target_t){.target = notice_keep(n, jt->target),
                                                 .artifact_digest = notice_keep(n, ok ? jt->digest : ""),
                                                 .size_bytes = ok ? jt->size : 0,
                                                 .cache_hit = ok && jt->cache_hit,
                                                 .code = ok ? 0 : jt->code,
                                                 .message = notice_keep(n, ok ? "" : jt->message)};
  }
  n->outcome = (kilnd_job_outcome_t){.job_id = notice_keep(n, job->id),
                                     .state = job->state,
                                     .shutdown = shutdown,
                                     .message = notice_keep(n, message),
                                     .targets = n->targets,
                                     .n_targets = job->n_targets};
  n->listeners = job->listeners;
  job->listeners = NULL;
  for (kilnd_job_listener_t *l = n->listeners; l; l = l->next) l->job = NULL; /* unlisten: dropped */
  outbox_add_locked(jobs, EFFECT_NOTIFY)->notice = n;
}

/* ---- WatchJob ---- */

/* Under mu: the event log a job answered from the cache did not keep, as admission
 * would have written it (Queued, a TargetDone per target, Terminal), stamped with
 * the job's own times. */
static void materialize_locked(kilnd_jobs_t *jobs, job_t *job) {
  if (!job->events_deferred) return;
  job->events_deferred = false;
  job->event_time_ms = job->created_unix_ms;
  emit_queued_locked(jobs, job, 0);
  for (size_t i = 0; i < job->n_targets; i++) {
    job_target_t *jt = &job->targets[i];
    char digest[sizeof jt->digest];
    memcpy(digest, jt->digest, sizeof digest);
    emit_target_done_locked(jobs, job, i, digest, jt->size, true, 0);
  }
  job->event_time_ms = job->finished_unix_ms ? job->finished_unix_ms : job->created_unix_ms;
  emit_terminal_event_locked(jobs, job, job->terminal_message);
  job->event_time_ms = 0;
}

kiln_status_t kilnd_jobs_watch(kilnd_jobs_t *jobs, const char *job_id, bool from_start,
                               uint64_t after_sequence, kilnd_stream_t *stream) {
  engine_lock(jobs);
  job_t *job = jobs->closing ? NULL : find_job_locked(jobs, job_id);
  if (!job) {
    bool closing = jobs->closing;
    engine_unlock(jobs);
    if (closing) return KILN_STATUS(KILN_STATUS_UNAVAILABLE, "%s", SHUTDOWN_MESSAGE);
    return KILN_STATUS(KILN_STATUS_NOT_FOUND,
                       "no job %s on this server (or it finished long ago and was forgotten)", job_id);
  }
  materialize_locked(jobs, job);
  watcher_t *w = kiln_calloc(1, sizeof *w);
  w->jobs = jobs;
  w->job = job;
  w->stream = stream;
  w->live_at = job->n_events;
  w->replay = kiln_calloc(job->n_events + 1, sizeof *w->replay);
  if (after_sequence > 0 || from_start) {
    for (size_t i = 0; i < job->n_events; i++) {
      if (job->events[i].seq > after_sequence) w->replay[w->n_replay++] = i;
    }
  } else {
    /* The current status: the latest Queued or Started, then every target result. */
    ptrdiff_t latest = -1;
    for (size_t i = 0; i < job->n_events; i++) {
      Kiln__V1__JobEvent__EventCase k = job->events[i].kind;
      if (k == KILN__V1__JOB_EVENT__EVENT_QUEUED || k == KILN__V1__JOB_EVENT__EVENT_STARTED)
        latest = (ptrdiff_t)i;
    }
    for (size_t i = 0; i < job->n_events; i++) {
      Kiln__V1__JobEvent__EventCase k = job->events[i].kind;
      if ((ptrdiff_t)i == latest || k == KILN__V1__JOB_EVENT__EVENT_TARGET_DONE ||
          k == KILN__V1__JOB_EVENT__EVENT_TARGET_FAILED || k == KILN__V1__JOB_EVENT__EVENT_TERMINAL) {
        w->replay[w->n_replay++] = i;
      }
    }
  }
  /* Every stream ends with the Terminal event: a finished job sends it even to a
   * client resuming past it (after_sequence >= its sequence), whose stream would
   * otherwise wait forever for an event that never comes. */
  if (job_terminal(job) && job->n_events > 0 &&
      (w->n_replay == 0 || w->replay[w->n_replay - 1] != job->n_events - 1)) {
    w->replay[w->n_replay++] = job->n_events - 1;
  }
  w->next = job->watchers;
  job->watchers = w;
  /* Records the callback (it calls nothing back); a call cancelled already ends here. */
  if (kilnd_stream_on_cancel(stream, watcher_cancelled, w)) {
    watcher_remove_locked(w);
    engine_unlock(jobs);
    return KILN_STATUS(KILN_STATUS_CANCELLED, "the client cancelled the watch");
  }
  watcher_pump_locked(jobs, w);
  engine_unlock(jobs);
  return NULL;
}
