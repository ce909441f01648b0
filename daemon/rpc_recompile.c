/* Recompile: legacy VMFBs in, current ones out, over one bidirectional stream.
 *
 * Flow (loop thread unless marked; kiln.proto's Recompile comment is the contract):
 *   recv options? -> recv item -> copy it, start RESOLVE (pool) -> recv the next
 *   item while fewer than MAX_LIVE items (and MAX_LIVE_BYTES of their bytes) are
 *   unresolved: that window, and HTTP/2 flow control behind it, is the
 *   back-pressure on the client.
 *   RESOLVE (pool): read and classify the legacy VMFB (the hardened reader), find
 *   its source, targets and flags, then either predict (dry run: cache probes) or
 *   submit a job like Compile does, at priority BULK. The job engine merges equal
 *   work (the same cache key queued or running for any job) and answers cached
 *   keys at admission, so N legacy files of one (source, target, flags) cost one
 *   compile at most.
 *   -> result now (no job, or every target cached) | listen to the job
 *   (kilnd_jobs_listen) and build the result when it ends.
 *   Results are packed at once and sent one at a time in completion order.
 *   Input ended (half-close or `done`), nothing live, nothing left to send ->
 *   send the summary -> finish OK.
 *
 * Sources, in the contract's order: the item's own (inline or digest); the
 * provenance of the VMFB's digest in the cache index (kiln built it); the digest
 * in its `kiln.source.sha256` attr (kiln's writer; `kiln.source_digest` is read
 * too) naming a stored source; the source embedded in the VMFB. A digest that
 * names nothing stored falls through to the next way; when none is left the
 * outcome is NO_SOURCE, naming what was tried.
 *
 * Failure of one item is its result; only a protocol error (options not first,
 * an empty or duplicate item_id, a message after `done`) ends the call, with
 * INVALID_ARGUMENT. Cancellation cancels the jobs of unfinished items (work merged
 * with other jobs goes on for them). The call's state is freed only after every
 * pool job has come back and the retry timer is closed.
 */
#include <stdatomic.h>
#include <stdio.h>
#include <string.h>
#include <uv.h>

#include "base/alloc.h"
#include "base/buf.h"
#include "base/digest.h"
#include "base/log.h"
#include "base/strmap.h"
#include "base/time.h"
#include "compiler/targets.h"
#include "compiler/vmfb/reader.h"
#include "daemon/diags.h"
#include "daemon/flags.h"
#include "daemon/jobs.h"
#include "daemon/rpc.h"
#include "daemon/source_check.h"
#include "daemon/stream.h"
#include "kiln/v1/kiln.pb-c.h"

#define MAX_LABELS     32
#define MAX_NAME_BYTES 1024
/* Items received but not yet resolved (their bytes are held until then). */
#define MAX_LIVE       64
#define MAX_LIVE_BYTES ((size_t)256 << 20)
/* A full BULK queue or a per-client limit (client-max-jobs, client-queue-share):
 * the item is admitted again after this. A refusal that no waiting can clear
 * (nothing unfinished anywhere: the engine says so) fails the item instead, and so
 * does the call's deadline, so an item never waits without end; while the client
 * is at client-max-jobs the timer re-arms without admitting anything. Items waiting
 * to retry count against MAX_LIVE, so the client's stream is held back meanwhile. */
#define RETRY_MS 200
/* Admissions tried at once when the engine says no refusal can clear (a job of the
 * client may finish between the refusal and the question). */
#define RETRY_NOW_MAX 3
/* The label recording which legacy VMFB an artifact replaces (ArtifactMetadata
 * provenance.recompiled_from reads it back). */
#define RECOMPILED_FROM_LABEL "kiln.recompiled_from"

typedef struct rc_call_s rc_call_t;

typedef struct rc_target_s {
  char *target; /* as requested, or the canonical id when taken from the VMFB */
  const char *canonical;
  char digest[65];
  uint64_t size;
  bool cache_hit;
  int code;
  char *message;
} rc_target_t;

typedef struct rc_item_s {
  rc_call_t *call;
  uv_work_t work;
  char *item_id;
  size_t held_bytes; /* counted against MAX_LIVE_BYTES until resolved */

  /* The request, copied (a received message lives until the next receive). */
  uint8_t *vmfb;
  size_t vmfb_len;
  char vmfb_digest[65]; /* given, or computed for an inline VMFB */
  uint8_t *source;
  size_t source_len;
  char source_digest[65]; /* given, or found */
  int source_format;
  char **req_targets;
  size_t n_req_targets;
  char **req_flags;
  size_t n_req_flags;
  bool ignore_recorded_flags;
  kiln_index_label_t *labels;
  size_t n_labels;
  char *source_name;

  /* RESOLVE's answer (pool side; the loop reads it after the work came back). */
  Kiln__V1__RecompileOutcome outcome; /* UNSPECIFIED: a job was submitted */
  int code;
  char *message;
  uint32_t legacy_hal;
  bool has_legacy;
  rc_target_t *targets;
  size_t n_targets;
  bool retry; /* the BULK queue was full: admit again later */
  kilnd_job_admission_t admission;
  bool admitted;

  kilnd_job_listener_t *listener;
  char job_id[KILND_JOB_ID_LEN + 1];
  struct rc_item_s *next; /* in the call's live list, or its retry list */
} rc_item_t;

typedef struct rc_packet_s {
  uint8_t *data;
  size_t len;
  struct rc_packet_s *next;
} rc_packet_t;

struct rc_call_s {
  const kilnd_rpc_env_t *env;
  kilnd_stream_t *stream;
  uv_timer_t retry_timer;
  atomic_bool cancelled; /* read by pool jobs */
  int64_t started_ns;

  /* Options. */
  bool options_seen;
  bool dry_run, force;
  kilnd_priority_t priority;
  kiln_index_label_t *labels;
  size_t n_labels;

  /* Input. */
  bool receiving;
  bool input_done; /* `done` or half-close seen */
  bool after_done; /* `done` seen: one more receive must find the end */
  uint64_t items_seen;
  kiln_strmap_t ids; /* every item_id seen (a set: the values are the call) */

  /* Items. */
  rc_item_t *live;     /* submitted to the pool, waiting on a job, or waiting to retry */
  size_t n_unresolved; /* of them, not yet resolved (the receive window) */
  size_t live_bytes;
  size_t n_pool;    /* pool jobs out: the call is not freed before they are back */
  rc_item_t *retry; /* waiting for the timer */
  size_t n_retry;   /* on `retry`: they count against MAX_LIVE */
  bool timer_armed;

  /* Output. */
  rc_packet_t *out_head, *out_tail;
  bool sending;
  bool summary_sent;
  Kiln__V1__RecompileSummary totals;

  /* The end. */
  bool finishing;           /* finish once nothing is out */
  kiln_status_t end_status; /* what the call ends with (NULL: OK) */
  bool finished;
};

static void call_pump(rc_call_t *c);
static void recv_more(rc_call_t *c);

/* ---- small helpers ---- */

static void strv_free(char **v, size_t n) {
  for (size_t i = 0; i < n; i++) kiln_free(v[i]);
  kiln_free(v);
}

static char **strv_copy(char *const *v, size_t n) {
  if (!n) return NULL;
  char **out = kiln_calloc(n, sizeof *out);
  for (size_t i = 0; i < n; i++) out[i] = kiln_strdup(v[i]);
  return out;
}

static void labels_free(kiln_index_label_t *l, size_t n) {
  for (size_t i = 0; i < n; i++) {
    kiln_free((char *)l[i].key);
    kiln_free((char *)l[i].value);
  }
  kiln_free(l);
}

/* Sets label key=value in (*l, *n), replacing an earlier value of the key. */
static void labels_set(kiln_index_label_t **l, size_t *n, const char *key, const char *value) {
  for (size_t i = 0; i < *n; i++) {
    if (strcmp((*l)[i].key, key) == 0) {
      kiln_free((char *)(*l)[i].value);
      (*l)[i].value = kiln_strdup(value);
      return;
    }
  }
  *l = kiln_realloc(*l, (*n + 1) * sizeof **l);
  (*l)[*n].key = kiln_strdup(key);
  (*l)[*n].value = kiln_strdup(value);
  (*n)++;
}

/* Adds `id` to the call's set; false when it was there already. */
static bool ids_add(rc_call_t *c, const char *id) {
  if (kiln_strmap_get(&c->ids, id)) return false;
  kiln_strmap_put(&c->ids, id, c); /* any non-NULL value: a set */
  return true;
}

static void item_free(rc_item_t *it) {
  kiln_free(it->item_id);
  kiln_free(it->vmfb);
  kiln_free(it->source);
  strv_free(it->req_targets, it->n_req_targets);
  strv_free(it->req_flags, it->n_req_flags);
  labels_free(it->labels, it->n_labels);
  kiln_free(it->source_name);
  kiln_free(it->message);
  for (size_t i = 0; i < it->n_targets; i++) {
    kiln_free(it->targets[i].target);
    kiln_free(it->targets[i].message);
  }
  kiln_free(it->targets);
  if (it->admitted) kilnd_job_admission_deinit(&it->admission);
  kiln_free(it);
}

static void live_remove(rc_call_t *c, rc_item_t *it) {
  for (rc_item_t **p = &c->live; *p; p = &(*p)->next) {
    if (*p == it) {
      *p = it->next;
      return;
    }
  }
}

/* The item's failure, as its result says it (pool or loop). */
static void item_fail(rc_item_t *it, Kiln__V1__RecompileOutcome outcome, kiln_status_t st) {
  it->outcome = outcome;
  it->code = (int)kiln_status_code(st);
  kiln_free(it->message);
  it->message = kiln_strdup(kiln_status_message(st));
  kiln_status_free(st);
}

/* ---- the call's end ---- */

static void on_timer_closed(uv_handle_t *handle) {
  rc_call_t *c = handle->data;
  labels_free(c->labels, c->n_labels);
  kiln_strmap_deinit(&c->ids);
  while (c->out_head) {
    rc_packet_t *p = c->out_head;
    c->out_head = p->next;
    kiln_free(p->data);
    kiln_free(p);
  }
  kiln_free(c);
}

/* Finishes the stream and frees the call once nothing of it is out: no pool job,
 * no send (a send in flight completes silently after finish, but the packet queue
 * is ours). */
static void maybe_end(rc_call_t *c) {
  if (!c->finishing || c->finished || c->n_pool > 0) return;
  c->finished = true;
  /* Items still live (waiting on jobs or a retry) go now; their jobs were cancelled. */
  while (c->live) {
    rc_item_t *it = c->live;
    c->live = it->next;
    kilnd_jobs_unlisten(c->env->jobs, it->listener);
    item_free(it);
  }
  while (c->retry) {
    rc_item_t *it = c->retry;
    c->retry = it->next;
    item_free(it);
  }
  kiln_status_t st = c->end_status;
  c->end_status = NULL;
  kilnd_stream_finish(c->stream, st);
  uv_close((uv_handle_t *)&c->retry_timer, on_timer_closed);
}

/* Ends the call early with `status` (owned): cancels the jobs of unfinished items,
 * waits for pool work to come back. */
static void call_abort(rc_call_t *c, kiln_status_t status) {
  if (c->finishing) {
    kiln_status_free(status);
    return;
  }
  c->finishing = true;
  c->end_status = status;
  atomic_store(&c->cancelled, true);
  uv_timer_stop(&c->retry_timer);
  for (rc_item_t *it = c->live; it; it = it->next) {
    if (!it->listener) continue;
    kilnd_jobs_unlisten(c->env->jobs, it->listener);
    it->listener = NULL;
    kilnd_job_state_t state;
    bool cancelled;
    kiln_status_free(
        kilnd_jobs_cancel(c->env->jobs, it->job_id, "the Recompile call ended", &state, &cancelled));
  }
  maybe_end(c);
}

static void on_cancel(kilnd_stream_t *stream, void *user) {
  (void)stream;
  call_abort(user, KILN_STATUS(KILN_STATUS_CANCELLED, "Recompile: the client cancelled the call"));
}

/* ---- results out ---- */

static void on_sent(kilnd_stream_t *stream, bool ok, void *user) {
  (void)stream;
  rc_call_t *c = user;
  c->sending = false;
  if (!ok) {
    call_abort(c, KILN_STATUS(KILN_STATUS_CANCELLED, "Recompile: the client went away"));
    return;
  }
  if (c->summary_sent && !c->out_head) {
    c->finishing = true;
    maybe_end(c);
    return;
  }
  call_pump(c);
}

static void queue_event(rc_call_t *c, const Kiln__V1__RecompileEvent *ev) {
  rc_packet_t *p = kiln_calloc(1, sizeof *p);
  p->len = protobuf_c_message_get_packed_size(&ev->base);
  p->data = kiln_malloc(p->len ? p->len : 1);
  protobuf_c_message_pack(&ev->base, p->data);
  if (c->out_tail)
    c->out_tail->next = p;
  else
    c->out_head = p;
  c->out_tail = p;
}

/* Sends the next queued packet; after the last result, the summary. */
static void call_pump(rc_call_t *c) {
  if (c->finishing || c->sending) return;
  if (!c->out_head && !c->summary_sent && c->input_done && !c->live && !c->retry && !c->receiving) {
    c->totals.elapsed_ms = (uint64_t)((kiln_time_monotonic_ns() - c->started_ns) / 1000000);
    Kiln__V1__RecompileEvent ev = KILN__V1__RECOMPILE_EVENT__INIT;
    ev.kind_case = KILN__V1__RECOMPILE_EVENT__KIND_SUMMARY;
    ev.summary = &c->totals;
    queue_event(c, &ev);
    c->summary_sent = true;
  }
  rc_packet_t *p = c->out_head;
  if (!p) return;
  c->out_head = p->next;
  if (!c->out_head) c->out_tail = NULL;
  uint8_t *data = p->data;
  size_t len = p->len;
  kiln_free(p);
  c->sending = true;
  kiln_status_t st = kilnd_stream_send_packed(c->stream, data, len, on_sent, c);
  if (st) {
    c->sending = false;
    call_abort(c, st);
  }
}

/* Packs the item's result, counts it, and forgets the item. */
static void item_finish(rc_call_t *c, rc_item_t *it) {
  Kiln__V1__RecompileItemResult r = KILN__V1__RECOMPILE_ITEM_RESULT__INIT;
  r.item_id = it->item_id;
  r.outcome = it->outcome;
  r.code = it->code;
  r.message = it->message ? it->message : "";
  r.legacy_digest = it->has_legacy ? it->vmfb_digest : "";
  r.legacy_hal_module_version = it->legacy_hal;
  r.source_digest = it->source_digest;
  r.job_id = it->job_id;
  Kiln__V1__RecompiledTarget *targets = kiln_calloc(it->n_targets ? it->n_targets : 1, sizeof *targets);
  Kiln__V1__RecompiledTarget **tp = kiln_calloc(it->n_targets ? it->n_targets : 1, sizeof *tp);
  uint64_t bytes = 0;
  for (size_t i = 0; i < it->n_targets; i++) {
    const rc_target_t *t = &it->targets[i];
    kiln__v1__recompiled_target__init(&targets[i]);
    targets[i].target = t->target;
    targets[i].canonical_target = (char *)t->canonical;
    targets[i].artifact_digest = (char *)t->digest;
    targets[i].size_bytes = t->size;
    targets[i].cache_hit = t->cache_hit;
    targets[i].code = t->code;
    targets[i].message = t->message ? t->message : "";
    tp[i] = &targets[i];
    if (!t->code && it->outcome != KILN__V1__RECOMPILE_OUTCOME__RECOMPILE_OUTCOME_SKIPPED_CURRENT)
      bytes += t->size;
  }
  r.targets = tp;
  r.n_targets = it->n_targets;
  kilnd_diags_t diags = {0};
  for (size_t i = 0; i < it->n_targets; i++) { /* the first rejection says it for all */
    if (it->targets[i].code == KILN_STATUS_INVALID_ARGUMENT && it->targets[i].message) {
      kilnd_diags_parse(&diags, it->targets[i].message, it->targets[i].canonical);
      break;
    }
  }
  r.diagnostics = diags.items;
  r.n_diagnostics = diags.n;
  Kiln__V1__RecompileEvent ev = KILN__V1__RECOMPILE_EVENT__INIT;
  ev.kind_case = KILN__V1__RECOMPILE_EVENT__KIND_RESULT;
  ev.result = &r;
  queue_event(c, &ev);
  kilnd_diags_free(&diags);
  kiln_free(targets);
  kiln_free(tp);

  switch (it->outcome) {
    case KILN__V1__RECOMPILE_OUTCOME__RECOMPILE_OUTCOME_RECOMPILED: c->totals.recompiled++; break;
    case KILN__V1__RECOMPILE_OUTCOME__RECOMPILE_OUTCOME_CACHED: c->totals.cached++; break;
    case KILN__V1__RECOMPILE_OUTCOME__RECOMPILE_OUTCOME_SKIPPED_CURRENT: c->totals.skipped_current++; break;
    case KILN__V1__RECOMPILE_OUTCOME__RECOMPILE_OUTCOME_NO_SOURCE: c->totals.no_source++; break;
    default: c->totals.failed++; break;
  }
  c->totals.artifact_bytes += bytes;
  live_remove(c, it);
  item_free(it);
  call_pump(c);
}

/* ---- a job's end ---- */

static void on_job_finished(void *user, const kilnd_job_outcome_t *o) {
  rc_item_t *it = user;
  rc_call_t *c = it->call;
  it->listener = NULL;
  bool compiled = false;
  int first_code = 0;
  const char *first_message = NULL;
  for (size_t k = 0; k < o->n_targets; k++) {
    const kilnd_job_outcome_target_t *ot = &o->targets[k];
    rc_target_t *t = NULL;
    for (size_t i = 0; i < it->n_targets && !t; i++) {
      if (strcmp(it->targets[i].canonical, ot->target) == 0) t = &it->targets[i];
    }
    if (!t) continue;
    memcpy(t->digest, ot->artifact_digest, strlen(ot->artifact_digest) + 1);
    t->size = ot->size_bytes;
    t->cache_hit = ot->cache_hit;
    t->code = ot->code;
    kiln_free(t->message);
    t->message = kiln_strdup(ot->message);
    if (!ot->code && !ot->cache_hit) compiled = true;
    if (ot->code && !first_code) {
      first_code = ot->code;
      first_message = ot->message;
    }
  }
  if (o->shutdown) {
    it->outcome = KILN__V1__RECOMPILE_OUTCOME__RECOMPILE_OUTCOME_FAILED;
    it->code = KILN_STATUS_UNAVAILABLE;
    it->message = kiln_strdup(o->message);
  } else if (o->state == KILND_JOB_DONE) {
    it->outcome = compiled ? KILN__V1__RECOMPILE_OUTCOME__RECOMPILE_OUTCOME_RECOMPILED
                           : KILN__V1__RECOMPILE_OUTCOME__RECOMPILE_OUTCOME_CACHED;
    it->code = 0;
  } else {
    it->outcome = KILN__V1__RECOMPILE_OUTCOME__RECOMPILE_OUTCOME_FAILED;
    it->code = first_code ? first_code : KILN_STATUS_CANCELLED;
    kiln_buf_t m;
    kiln_buf_init(&m);
    kiln_buf_appendf(&m, "job %s: %s", o->job_id, o->message);
    if (first_message && *first_message) kiln_buf_appendf(&m, ": %s", first_message);
    it->message = kiln_strdup(m.data);
    kiln_buf_deinit(&m);
  }
  item_finish(c, it);
}

/* ---- resolving an item (pool) ---- */

/* A stored source named `digest`? (Metadata only: the bytes stay on disk.) */
static bool source_stored(kiln_cache_t *cache, const char *digest) {
  if (!kiln_digest_is_valid_hex(digest)) return false;
  kiln_index_source_t rec;
  kiln_status_t st = kiln_cache_source_get(cache, digest, &rec);
  if (st) {
    kiln_status_free(st);
    return false;
  }
  kiln_index_source_deinit(&rec);
  return true;
}

/* Appends `t` to the item's targets unless its canonical id is there already. */
static KILN_MUST_USE kiln_status_t add_target(rc_item_t *it, const char *name) {
  const kiln_target_t *t = NULL;
  KILN_RETURN_IF_ERROR(kiln_compiler_target_resolve(name, &t));
  for (size_t i = 0; i < it->n_targets; i++) {
    if (strcmp(it->targets[i].canonical, t->id) == 0) return NULL;
  }
  if (it->n_targets == KILND_MAX_TARGETS) {
    return KILN_STATUS(KILN_STATUS_INVALID_ARGUMENT, "more than %d targets: at most %d per item",
                       KILND_MAX_TARGETS, KILND_MAX_TARGETS);
  }
  it->targets = kiln_realloc(it->targets, (it->n_targets + 1) * sizeof *it->targets);
  rc_target_t *rt = &it->targets[it->n_targets++];
  memset(rt, 0, sizeof *rt);
  rt->target = kiln_strdup(name);
  rt->canonical = t->id;
  return NULL;
}

/* Splits `text` at any of `seps` into non-empty words (kiln_malloc'd). */
static char **split_words(const char *text, const char *seps, size_t *out_n) {
  char **v = NULL;
  size_t n = 0;
  for (const char *p = text; p && *p;) {
    size_t skip = strspn(p, seps);
    p += skip;
    size_t len = strcspn(p, seps);
    if (!len) break;
    v = kiln_realloc(v, (n + 1) * sizeof *v);
    v[n] = kiln_malloc(len + 1);
    memcpy(v[n], p, len);
    v[n][len] = '\0';
    n++;
    p += len;
  }
  *out_n = n;
  return v;
}

/* The item's targets: as requested; else from provenance, the kiln.target attr,
 * or the chips the executables' code names. */
static KILN_MUST_USE kiln_status_t resolve_targets(rc_item_t *it, const kiln_index_artifact_t *prov,
                                                   const kiln_vmfb_info_t *info) {
  if (it->n_req_targets) {
    for (size_t i = 0; i < it->n_req_targets; i++) {
      kiln_status_t st = add_target(it, it->req_targets[i]);
      if (st) return kiln_status_annotate(st, "targets[%zu]", i);
    }
    return NULL;
  }
  const char *from = prov && prov->target && *prov->target ? prov->target : NULL;
  if (!from && info) from = kiln_vmfb_info_attr(info, "kiln.target");
  if (from && *from) {
    kiln_status_t st = add_target(it, from);
    return st ? kiln_status_annotate(st, "the target recorded in the VMFB") : NULL;
  }
  if (info) {
    for (size_t i = 0; i < info->n_executables; i++) {
      const char *chip = info->executables[i].chip;
      if (!chip || !*chip) continue;
      kiln_status_t st = add_target(it, chip);
      if (st) return kiln_status_annotate(st, "the chip '%s' its executable's code names", chip);
    }
  }
  if (it->n_targets) return NULL;
  const char *format =
      info && info->n_executables && info->executables[0].format ? info->executables[0].format : "unknown";
  return KILN_STATUS(
      KILN_STATUS_INVALID_ARGUMENT,
      "cannot tell which target the VMFB was built for: no provenance, no kiln.target attr, and "
      "its executable (format %s) names no chip; give the item's targets",
      format);
}

/* The item's flags, normalized: as requested; else those recorded in provenance
 * or in the kiln.flags attr. */
static KILN_MUST_USE kiln_status_t resolve_flags(rc_item_t *it, const kiln_index_artifact_t *prov,
                                                 const kiln_vmfb_info_t *info, char ***out_flags,
                                                 size_t *out_n) {
  if (it->n_req_flags || it->ignore_recorded_flags) {
    return kilnd_flags_normalize((const char *const *)it->req_flags, it->n_req_flags, out_flags, out_n);
  }
  size_t n = 0;
  char **words = NULL;
  if (prov && prov->flags && *prov->flags) {
    words = split_words(prov->flags, "\n", &n);
  } else if (info && kiln_vmfb_info_attr(info, "kiln.flags")) {
    words = split_words(kiln_vmfb_info_attr(info, "kiln.flags"), " \t\n", &n);
  }
  kiln_status_t st = kilnd_flags_normalize((const char *const *)words, n, out_flags, out_n);
  strv_free(words, n);
  if (st) {
    return kiln_status_annotate(st,
                                "the flags recorded in the VMFB are refused (send the item's flags with "
                                "ignore_recorded_flags to replace them)");
  }
  return NULL;
}

/* Dry run: which targets the cache answers already. */
static void predict(rc_item_t *it, const kilnd_rpc_env_t *env, char **flags, size_t n_flags) {
  const char *compiler = kilnd_jobs_compiler_wait(env->jobs, 30000);
  if (!compiler) {
    item_fail(it, KILN__V1__RECOMPILE_OUTCOME__RECOMPILE_OUTCOME_FAILED,
              KILN_STATUS(KILN_STATUS_UNAVAILABLE,
                          "no compile worker is ready yet, so cache keys cannot be computed; retry"));
    return;
  }
  bool all = true;
  for (size_t i = 0; i < it->n_targets; i++) {
    rc_target_t *t = &it->targets[i];
    const kiln_target_t *target = NULL;
    kiln_digest_hex_t key;
    kiln_status_t st = kiln_compiler_target_resolve(t->canonical, &target);
    if (!st) st = kilnd_artifact_key(env, compiler, it->source_digest, target, flags, n_flags, &key);
    if (!st) st = kiln_cache_artifact_probe(env->cache, key.text, t->digest, &t->size);
    if (st) {
      kiln_status_free(st);
      t->digest[0] = '\0';
      all = false;
    } else {
      t->cache_hit = true;
    }
  }
  it->outcome = all ? KILN__V1__RECOMPILE_OUTCOME__RECOMPILE_OUTCOME_CACHED
                    : KILN__V1__RECOMPILE_OUTCOME__RECOMPILE_OUTCOME_RECOMPILED;
}

/* What resolving one item holds on the pool: the legacy VMFB's bytes (inline, or
 * a blob read from the cache), what the reader made of them, and the cache's
 * provenance row for their digest. */
typedef struct resolve_s {
  rc_call_t *c;
  rc_item_t *it;
  kiln_cache_t *cache;
  const uint8_t *bytes; /* the legacy VMFB, or NULL when the item has none */
  size_t len;
  void *blob; /* the bytes when they came from the cache */
  size_t blob_len;
  kiln_vmfb_info_t info;
  bool have_info;
  kiln_index_artifact_t prov;
  bool have_prov;
  const char *origin; /* where the source came from, for messages */
} resolve_t;

/* Each stage below returns true to go on, or false once the item is settled
 * (failed, skipped as current, without a source, or predicted in a dry run). */

/* The legacy VMFB: its bytes, their class and provenance. A current one needs no
 * work (unless --force): its own digest is the answer. */
static bool resolve_legacy(resolve_t *r) {
  rc_call_t *c = r->c;
  rc_item_t *it = r->it;
  kiln_cache_t *cache = r->cache;
  kiln_status_t st = NULL;
  /* The legacy VMFB: inline, or an artifact in the cache. */
  r->bytes = it->vmfb;
  r->len = it->vmfb_len;
  if (it->has_legacy && !r->bytes) {
    st = kiln_cache_artifact_get_by_digest(cache, it->vmfb_digest, &r->prov);
    if (!st) {
      r->have_prov = true;
      st = kiln_cache_get_blob(cache, it->vmfb_digest, &r->blob, &r->blob_len);
    }
    if (st) {
      if (kiln_status_code(st) == KILN_STATUS_NOT_FOUND) {
        kiln_status_free(st);
        st = KILN_STATUS(KILN_STATUS_NOT_FOUND,
                         "vmfb_digest %s names no artifact in kilnd's cache (never built here, evicted or "
                         "quarantined); send the VMFB bytes inline",
                         it->vmfb_digest);
      }
      item_fail(it, KILN__V1__RECOMPILE_OUTCOME__RECOMPILE_OUTCOME_FAILED, st);
      return false;
    }
    r->bytes = r->blob;
    r->len = r->blob_len;
  } else if (r->bytes) {
    kiln_digest_t d;
    kiln_digest_hex_t hex;
    kiln_digest_of(r->bytes, r->len, &d);
    kiln_digest_to_hex(&d, &hex);
    memcpy(it->vmfb_digest, hex.text, sizeof it->vmfb_digest);
  }
  if (it->has_legacy) {
    kiln_status_free(kiln_vmfb_read(r->bytes, r->len, &r->info));
    r->have_info = true;
    it->legacy_hal = r->info.hal_version;
    if (r->info.cls == KILN_VMFB_CLASS_INVALID) {
      item_fail(it, KILN__V1__RECOMPILE_OUTCOME__RECOMPILE_OUTCOME_FAILED,
                KILN_STATUS(KILN_STATUS_INVALID_ARGUMENT, "the VMFB %s is not a loadable VMFB: %s",
                            it->vmfb_digest, r->info.reason));
      return false;
    }
    if (!r->have_prov) {
      st = kiln_cache_artifact_get_by_digest(cache, it->vmfb_digest, &r->prov);
      if (!st) r->have_prov = true;
      kiln_status_free(st);
      st = NULL;
    }
    if (r->info.cls == KILN_VMFB_CLASS_CURRENT && !c->force) {
      /* Nothing to do: its own digest is the answer. The target, when it can be
       * told, is named; an unknown one is not an error here. */
      kiln_status_free(resolve_targets(it, r->have_prov ? &r->prov : NULL, &r->info));
      if (!it->n_targets) {
        it->targets = kiln_calloc(1, sizeof *it->targets);
        it->targets[0].target = kiln_strdup("");
        it->targets[0].canonical = "";
        it->n_targets = 1;
      }
      for (size_t i = 0; i < it->n_targets; i++) {
        memcpy(it->targets[i].digest, it->vmfb_digest, sizeof it->vmfb_digest);
        it->targets[i].size = r->len;
      }
      it->outcome = KILN__V1__RECOMPILE_OUTCOME__RECOMPILE_OUTCOME_SKIPPED_CURRENT;
      it->code = 0;
      return false;
    }
  }
  return true;
}

/* The source: sent with the item, named by the provenance or the VMFB's
 * attributes (when the cache still has it), or embedded in the VMFB; checked
 * like any uploaded source, and its digest taken. */
static bool resolve_source(resolve_t *r) {
  rc_item_t *it = r->it;
  kiln_cache_t *cache = r->cache;
  kiln_status_t st = NULL;
  if (it->source || it->source_digest[0]) {
    r->origin = "the item";
  } else if (r->have_prov && source_stored(cache, r->prov.source_digest)) {
    memcpy(it->source_digest, r->prov.source_digest, sizeof it->source_digest);
    r->origin = "the cache's provenance of the VMFB";
    if (!it->source_name && r->prov.source_name && *r->prov.source_name)
      it->source_name = kiln_strdup(r->prov.source_name);
  } else {
    const char *attr = r->have_info ? kiln_vmfb_info_attr(&r->info, "kiln.source.sha256") : NULL;
    if (!attr && r->have_info) attr = kiln_vmfb_info_attr(&r->info, "kiln.source_digest");
    if (attr && source_stored(cache, attr)) {
      memcpy(it->source_digest, attr, sizeof it->source_digest);
      r->origin = "the VMFB's source digest attr";
    } else if (r->have_info && r->info.has_source) {
      uint8_t *src = NULL;
      size_t src_len = 0;
      st = kiln_vmfb_source_extract(r->bytes, r->len, &src, &src_len);
      if (st) {
        item_fail(it, KILN__V1__RECOMPILE_OUTCOME__RECOMPILE_OUTCOME_FAILED,
                  kiln_status_annotate(st, "the source embedded in VMFB %s", it->vmfb_digest));
        return false;
      }
      it->source = src;
      it->source_len = src_len;
      r->origin = "the source embedded in the VMFB";
    } else {
      kiln_buf_t why;
      kiln_buf_init(&why);
      kiln_buf_appendf(&why,
                       "no source found for VMFB %s: it embeds none; kilnd's index has no provenance for its "
                       "digest",
                       it->vmfb_digest);
      if (r->have_prov) kiln_buf_appendf(&why, " whose source %s is still stored", r->prov.source_digest);
      if (attr)
        kiln_buf_appendf(&why, "; its recorded source digest %.64s is not a stored source", attr);
      else
        kiln_buf_appendf(&why, "; it records no source digest");
      kiln_buf_appendf(&why, ". Send the source with the item (kiln recompile --manifest)");
      it->outcome = KILN__V1__RECOMPILE_OUTCOME__RECOMPILE_OUTCOME_NO_SOURCE;
      it->code = KILN_STATUS_NOT_FOUND;
      it->message = kiln_strdup(why.data);
      kiln_buf_deinit(&why);
      return false;
    }
  }
  if (it->source) {
    kilnd_source_check_t check;
    kilnd_source_check_init(&check, it->source_format);
    char what[200];
    snprintf(what, sizeof what, "the source from %s", r->origin);
    st = kilnd_source_check_feed(&check, it->source, it->source_len, what);
    if (!st) st = kilnd_source_check_finish(&check, what);
    if (st) {
      item_fail(it, KILN__V1__RECOMPILE_OUTCOME__RECOMPILE_OUTCOME_FAILED, st);
      return false;
    }
    kiln_digest_t d;
    kiln_digest_hex_t hex;
    kiln_digest_of(it->source, it->source_len, &d);
    kiln_digest_to_hex(&d, &hex);
    memcpy(it->source_digest, hex.text, sizeof it->source_digest);
  }
  return true;
}

/* Targets and flags (from the item, else the provenance, else the VMFB), the
 * recompiled-from label; a dry run predicts the outcome here and stops. */
static bool resolve_rest(resolve_t *r) {
  rc_call_t *c = r->c;
  rc_item_t *it = r->it;
  const kilnd_rpc_env_t *env = c->env;
  char **flags = NULL;
  size_t n_flags = 0;
  kiln_status_t st = NULL;
  st = resolve_targets(it, r->have_prov ? &r->prov : NULL, r->have_info ? &r->info : NULL);
  if (!st)
    st = resolve_flags(it, r->have_prov ? &r->prov : NULL, r->have_info ? &r->info : NULL, &flags, &n_flags);
  if (st) {
    strv_free(flags, n_flags);
    item_fail(it, KILN__V1__RECOMPILE_OUTCOME__RECOMPILE_OUTCOME_FAILED, st);
    return false;
  }
  /* The flags travel with the item from here (a retry reuses them). */
  strv_free(it->req_flags, it->n_req_flags);
  it->req_flags = flags;
  it->n_req_flags = n_flags;
  if (it->has_legacy && it->n_labels < MAX_LABELS) {
    labels_set(&it->labels, &it->n_labels, RECOMPILED_FROM_LABEL, it->vmfb_digest);
  }
  if (c->dry_run) {
    predict(it, env, it->req_flags, it->n_req_flags);
    return false;
  }
  return true;
}

/* Submits the resolved item as a job at the call's priority. A full queue that
 * will drain sets it->retry (resolve_done waits and comes back); an answer from
 * the cache settles the item at once. */
static void submit_item(rc_call_t *c, rc_item_t *it) {
  const kilnd_rpc_env_t *env = c->env;
  kiln_status_t st = NULL;
  const char **targets = kiln_calloc(it->n_targets, sizeof *targets);
  for (size_t i = 0; i < it->n_targets; i++) targets[i] = it->targets[i].canonical;
  const kilnd_call_ctx_t *ctx = kilnd_stream_ctx(c->stream);
  kilnd_job_request_t jr = {
      .source = it->source,
      .source_len = it->source_len,
      .source_digest = it->source ? NULL : it->source_digest,
      .source_name = it->source_name ? it->source_name : "",
      .targets = targets,
      .n_targets = it->n_targets,
      .flags = (const char *const *)it->req_flags,
      .n_flags = it->n_req_flags,
      .priority = c->priority,
      .client = ctx->client,
      .request_id = NULL,
      .deadline_monotonic_ns = ctx->deadline_monotonic_ns,
      .labels = it->labels,
      .n_labels = it->n_labels,
  };
  st = kilnd_jobs_submit(env->jobs, &jr, &it->admission);
  for (int tries = 1; kiln_status_code(st) == KILN_STATUS_RESOURCE_EXHAUSTED; tries++) {
    bool at_limit = false, can_clear = true;
    kilnd_jobs_client_wait_state(env->jobs, ctx->client, &at_limit, &can_clear);
    if (can_clear && kiln_time_monotonic_ns() >= ctx->deadline_monotonic_ns) {
      st = kiln_status_annotate(st,
                                "the Recompile call's deadline passed while the item waited for admission");
      break;
    }
    if (can_clear) {
      kiln_status_free(st);
      st = NULL;
      it->retry = true;
      break;
    }
    if (tries >= RETRY_NOW_MAX) {
      st = kiln_status_annotate(st, "nothing is queued or running that could make room; not retried");
      break;
    }
    kiln_status_free(st);
    st = kilnd_jobs_submit(env->jobs, &jr, &it->admission);
  }
  kiln_free(targets);
  if (it->retry) return; /* resolve_done starts the delay */
  if (st) {
    item_fail(it, KILN__V1__RECOMPILE_OUTCOME__RECOMPILE_OUTCOME_FAILED, st);
    return;
  }
  it->admitted = true;
  /* The engine holds its own copy now; a long wait for the job holds no source. */
  kiln_free(it->source);
  it->source = NULL;
  it->source_len = 0;
  memcpy(it->job_id, it->admission.job_id, sizeof it->job_id);
  memcpy(it->source_digest, it->admission.source_digest, sizeof it->source_digest);
  if (it->admission.state == KILND_JOB_DONE) { /* every target cached */
    for (size_t i = 0; i < it->n_targets && i < it->admission.n_targets; i++) {
      memcpy(it->targets[i].digest, it->admission.targets[i].artifact_digest, sizeof it->targets[i].digest);
      it->targets[i].size = it->admission.targets[i].size_bytes;
      it->targets[i].cache_hit = true;
    }
    it->outcome = KILN__V1__RECOMPILE_OUTCOME__RECOMPILE_OUTCOME_CACHED;
    it->code = 0;
  }
  /* else: outcome UNSPECIFIED, the loop listens to the job */
}

static void resolve_work(uv_work_t *work) {
  rc_item_t *it = work->data;
  rc_call_t *c = it->call;
  if (atomic_load(&c->cancelled)) {
    item_fail(it, KILN__V1__RECOMPILE_OUTCOME__RECOMPILE_OUTCOME_FAILED,
              KILN_STATUS(KILN_STATUS_CANCELLED, "the Recompile call was cancelled"));
    return;
  }
  if (it->retry) { /* admitted again after a full queue: everything is resolved */
    it->retry = false;
    submit_item(c, it);
  } else {
    resolve_t r;
    memset(&r, 0, sizeof r);
    r.c = c;
    r.it = it;
    r.cache = c->env->cache;
    r.origin = "the item";
    if (resolve_legacy(&r) && resolve_source(&r) && resolve_rest(&r)) submit_item(c, it);
    if (r.have_info) kiln_vmfb_info_deinit(&r.info);
    if (r.have_prov) kiln_index_artifact_deinit(&r.prov);
    kiln_free(r.blob);
  }
  /* The legacy bytes are not needed past resolution (a retry only submits). */
  kiln_free(it->vmfb);
  it->vmfb = NULL;
}

static void start_resolve(rc_call_t *c, rc_item_t *it);

static void on_retry_timer(uv_timer_t *timer) {
  rc_call_t *c = timer->data;
  c->timer_armed = false;
  /* At client-max-jobs every admission would be refused: wait on, cheaply (a few
   * counters under the engine's lock, no pool work). */
  bool at_limit = false, can_clear = true;
  kilnd_jobs_client_wait_state(c->env->jobs, kilnd_stream_ctx(c->stream)->client, &at_limit, &can_clear);
  if (c->retry && at_limit && !atomic_load(&c->cancelled) &&
      kiln_time_monotonic_ns() < kilnd_stream_ctx(c->stream)->deadline_monotonic_ns) {
    c->timer_armed = true;
    uv_timer_start(&c->retry_timer, on_retry_timer, RETRY_MS, 0);
    return;
  }
  while (c->retry) {
    rc_item_t *it = c->retry;
    c->retry = it->next;
    c->n_retry--;
    it->next = c->live;
    c->live = it;
    start_resolve(c, it);
  }
}

static void resolve_done(uv_work_t *work, int status) {
  (void)status;
  rc_item_t *it = work->data;
  rc_call_t *c = it->call;
  c->n_pool--;
  if (c->finishing) {
    if (it->admitted && it->admission.state != KILND_JOB_DONE) {
      kilnd_job_state_t state;
      bool cancelled;
      kiln_status_free(
          kilnd_jobs_cancel(c->env->jobs, it->job_id, "the Recompile call ended", &state, &cancelled));
    }
    maybe_end(c);
    return;
  }
  if (it->held_bytes) {
    c->live_bytes -= it->held_bytes;
    it->held_bytes = 0;
    c->n_unresolved--;
  }
  if (it->retry) {
    live_remove(c, it);
    it->next = c->retry;
    c->retry = it;
    c->n_retry++;
    if (!c->timer_armed) {
      c->timer_armed = true;
      uv_timer_start(&c->retry_timer, on_retry_timer, RETRY_MS, 0);
    }
  } else if (it->outcome != KILN__V1__RECOMPILE_OUTCOME__RECOMPILE_OUTCOME_UNSPECIFIED) {
    item_finish(c, it);
  } else {
    kilnd_job_listener_t *l = NULL;
    kiln_status_t st = kilnd_jobs_listen(c->env->jobs, it->job_id, on_job_finished, it, &l);
    if (st) {
      item_fail(it, KILN__V1__RECOMPILE_OUTCOME__RECOMPILE_OUTCOME_FAILED,
                kiln_status_annotate(st, "following job %s", it->job_id));
      item_finish(c, it);
    } else {
      /* NULL when it had finished: on_job_finished ran and freed the item. */
      if (l) it->listener = l;
    }
  }
  recv_more(c);
  call_pump(c);
}

static void start_resolve(rc_call_t *c, rc_item_t *it) {
  it->work.data = it;
  c->n_pool++;
  if (uv_queue_work(kilnd_stream_loop(c->stream), &it->work, resolve_work, resolve_done) != 0) {
    c->n_pool--;
    item_fail(it, KILN__V1__RECOMPILE_OUTCOME__RECOMPILE_OUTCOME_FAILED,
              KILN_STATUS(KILN_STATUS_INTERNAL, "Recompile: cannot queue work on the thread pool"));
    if (it->held_bytes) {
      c->live_bytes -= it->held_bytes;
      it->held_bytes = 0;
      c->n_unresolved--;
    }
    item_finish(c, it);
  }
}

/* ---- input ---- */

/* Sets one label of a request in (*l, *ln), checking its size and the count. */
static KILN_MUST_USE kiln_status_t take_label(const char *key, const char *value, kiln_index_label_t **l,
                                              size_t *ln, const char *what) {
  KILN_RETURN_IF_ERROR(kilnd_label_check(what, key, value));
  labels_set(l, ln, key, value);
  if (*ln > MAX_LABELS)
    return KILN_STATUS(KILN_STATUS_INVALID_ARGUMENT, "%s: more than %d labels", what, MAX_LABELS);
  return NULL;
}

/* An item's own problem (bad field): it gets a FAILED result, the call goes on. */
static KILN_MUST_USE kiln_status_t check_item(const Kiln__V1__RecompileItem *req) {
  if (req->legacy_case == KILN__V1__RECOMPILE_ITEM__LEGACY_VMFB_DIGEST &&
      !kiln_digest_is_valid_hex(req->vmfb_digest)) {
    return KILN_STATUS(KILN_STATUS_INVALID_ARGUMENT,
                       "vmfb_digest '%.80s' is not a SHA-256 digest (64 lowercase hex)", req->vmfb_digest);
  }
  if (req->legacy_case == KILN__V1__RECOMPILE_ITEM__LEGACY_VMFB && req->vmfb.len == 0) {
    return KILN_STATUS(KILN_STATUS_INVALID_ARGUMENT, "the inline vmfb is empty");
  }
  if (req->replacement_case == KILN__V1__RECOMPILE_ITEM__REPLACEMENT_SOURCE_DIGEST &&
      !kiln_digest_is_valid_hex(req->source_digest)) {
    return KILN_STATUS(KILN_STATUS_INVALID_ARGUMENT,
                       "source_digest '%.80s' is not a SHA-256 digest (64 lowercase hex)",
                       req->source_digest);
  }
  if (req->replacement_case == KILN__V1__RECOMPILE_ITEM__REPLACEMENT_SOURCE && req->source.len == 0) {
    return KILN_STATUS(KILN_STATUS_INVALID_ARGUMENT, "the inline source is empty");
  }
  if (req->legacy_case == KILN__V1__RECOMPILE_ITEM__LEGACY__NOT_SET &&
      req->replacement_case == KILN__V1__RECOMPILE_ITEM__REPLACEMENT__NOT_SET) {
    return KILN_STATUS(
        KILN_STATUS_INVALID_ARGUMENT,
        "the item has neither a legacy VMFB (vmfb or vmfb_digest) nor a source; send at least one");
  }
  if (req->n_targets > KILND_MAX_TARGETS) {
    return KILN_STATUS(KILN_STATUS_INVALID_ARGUMENT, "%zu targets: at most %d per item", req->n_targets,
                       KILND_MAX_TARGETS);
  }
  if (req->n_flags > KILND_MAX_FLAGS) {
    return KILN_STATUS(KILN_STATUS_INVALID_ARGUMENT, "%zu flags: at most %d", req->n_flags, KILND_MAX_FLAGS);
  }
  if (strlen(req->source_name) > MAX_NAME_BYTES) {
    return KILN_STATUS(KILN_STATUS_INVALID_ARGUMENT, "source_name is over %d bytes", MAX_NAME_BYTES);
  }
  return NULL;
}

static void take_item(rc_call_t *c, const Kiln__V1__RecompileItem *req) {
  rc_item_t *it = kiln_calloc(1, sizeof *it);
  it->call = c;
  it->item_id = kiln_strdup(req->item_id);
  it->next = c->live;
  c->live = it;
  c->totals.items++;
  kiln_status_t st = check_item(req);
  if (!st) { /* client-max-request-bytes: this item fails alone, the call goes on */
    st = kilnd_jobs_check_request_bytes(c->env->jobs, kilnd_stream_ctx(c->stream)->client,
                                        protobuf_c_message_get_packed_size(&req->base),
                                        c->env->settings->client_max_request_bytes);
  }
  if (!st) {
    for (size_t i = 0; i < c->n_labels; i++)
      labels_set(&it->labels, &it->n_labels, c->labels[i].key, c->labels[i].value);
    for (size_t i = 0; !st && i < req->n_labels; i++) {
      st = take_label(req->labels[i]->key, req->labels[i]->value, &it->labels, &it->n_labels, "item");
    }
  }
  if (st) {
    item_fail(it, KILN__V1__RECOMPILE_OUTCOME__RECOMPILE_OUTCOME_FAILED, st);
    item_finish(c, it);
    return;
  }
  if (req->legacy_case == KILN__V1__RECOMPILE_ITEM__LEGACY_VMFB) {
    it->has_legacy = true;
    it->vmfb = kiln_malloc(req->vmfb.len);
    memcpy(it->vmfb, req->vmfb.data, req->vmfb.len);
    it->vmfb_len = req->vmfb.len;
  } else if (req->legacy_case == KILN__V1__RECOMPILE_ITEM__LEGACY_VMFB_DIGEST) {
    it->has_legacy = true;
    memcpy(it->vmfb_digest, req->vmfb_digest, sizeof it->vmfb_digest);
  }
  if (req->replacement_case == KILN__V1__RECOMPILE_ITEM__REPLACEMENT_SOURCE) {
    it->source = kiln_malloc(req->source.len);
    memcpy(it->source, req->source.data, req->source.len);
    it->source_len = req->source.len;
  } else if (req->replacement_case == KILN__V1__RECOMPILE_ITEM__REPLACEMENT_SOURCE_DIGEST) {
    memcpy(it->source_digest, req->source_digest, sizeof it->source_digest);
  }
  it->source_format = (int)req->source_format;
  it->req_targets = strv_copy(req->targets, req->n_targets);
  it->n_req_targets = req->n_targets;
  it->req_flags = strv_copy(req->flags, req->n_flags);
  it->n_req_flags = req->n_flags;
  it->ignore_recorded_flags = req->ignore_recorded_flags;
  if (*req->source_name) it->source_name = kiln_strdup(req->source_name);
  it->held_bytes = it->vmfb_len + it->source_len + 1;
  c->live_bytes += it->held_bytes;
  c->n_unresolved++;
  start_resolve(c, it);
}

static void on_message(kilnd_stream_t *stream, const ProtobufCMessage *message, kiln_status_t status,
                       void *user) {
  (void)stream;
  rc_call_t *c = user;
  c->receiving = false;
  if (c->finishing) {
    kiln_status_free(status);
    maybe_end(c);
    return;
  }
  if (status) {
    call_abort(c, status);
    return;
  }
  if (!message) { /* half-closed */
    c->input_done = true;
    call_pump(c);
    return;
  }
  if (c->after_done) {
    call_abort(c, KILN_STATUS(KILN_STATUS_INVALID_ARGUMENT,
                              "Recompile: a message after `done`; `done` ends the input"));
    return;
  }
  const Kiln__V1__RecompileRequest *req = (const Kiln__V1__RecompileRequest *)message;
  switch (req->kind_case) {
    case KILN__V1__RECOMPILE_REQUEST__KIND_OPTIONS: {
      if (c->options_seen || c->items_seen) {
        call_abort(c,
                   KILN_STATUS(KILN_STATUS_INVALID_ARGUMENT, "Recompile: `options` %s; send them once, first",
                               c->options_seen ? "sent twice" : "after an item"));
        return;
      }
      c->options_seen = true;
      const Kiln__V1__RecompileOptions *o = req->options;
      if (o->priority < 0 || o->priority > KILN__V1__PRIORITY__PRIORITY_BULK) {
        call_abort(c, KILN_STATUS(KILN_STATUS_INVALID_ARGUMENT,
                                  "Recompile: options.priority %d is not a Priority", (int)o->priority));
        return;
      }
      c->priority = o->priority == KILN__V1__PRIORITY__PRIORITY_UNSPECIFIED ? KILND_PRIORITY_BULK
                                                                            : (kilnd_priority_t)o->priority;
      c->dry_run = o->dry_run;
      c->force = o->force;
      kiln_status_t st = NULL;
      for (size_t i = 0; !st && i < o->n_labels; i++) {
        st = take_label(o->labels[i]->key, o->labels[i]->value, &c->labels, &c->n_labels, "options");
      }
      if (st) {
        call_abort(c, kiln_status_annotate(st, "Recompile"));
        return;
      }
      break;
    }
    case KILN__V1__RECOMPILE_REQUEST__KIND_ITEM: {
      const char *id = req->item->item_id;
      kiln_status_t bad = kilnd_id_check("item_id", id, strlen(id));
      if (bad) {
        call_abort(c, kiln_status_annotate(bad, "Recompile: item %llu (give each item a unique id)",
                                           (unsigned long long)c->items_seen + 1));
        return;
      }
      if (!ids_add(c, id)) {
        call_abort(
            c,
            KILN_STATUS(KILN_STATUS_INVALID_ARGUMENT,
                        "Recompile: item_id '%.128s' is used twice; ids must be unique within the call", id));
        return;
      }
      c->items_seen++;
      take_item(c, req->item);
      break;
    }
    case KILN__V1__RECOMPILE_REQUEST__KIND_DONE: c->after_done = true; break;
    default:
      call_abort(c, KILN_STATUS(KILN_STATUS_INVALID_ARGUMENT,
                                "Recompile: a message with none of options, item, done set"));
      return;
  }
  recv_more(c);
}

/* Receives the next message while the window has room. */
static void recv_more(rc_call_t *c) {
  if (c->finishing || c->receiving || c->input_done) return;
  if (c->n_unresolved + c->n_retry >= MAX_LIVE || c->live_bytes >= MAX_LIVE_BYTES) return;
  c->receiving = true;
  kiln_status_t st = kilnd_stream_recv(c->stream, &kiln__v1__recompile_request__descriptor, on_message, c);
  if (st) {
    c->receiving = false;
    call_abort(c, st);
  }
}

void kilnd_rpc_recompile(const kilnd_rpc_env_t *env, kilnd_stream_t *stream,
                         const ProtobufCMessage *request) {
  (void)request; /* bidi: messages come through kilnd_stream_recv */
  if (!env->jobs || !env->cache) {
    kilnd_stream_finish(stream, KILN_STATUS(KILN_STATUS_UNAVAILABLE, "kilnd is starting: no job engine yet"));
    return;
  }
  rc_call_t *c = kiln_calloc(1, sizeof *c);
  c->env = env;
  c->stream = stream;
  c->priority = KILND_PRIORITY_BULK;
  c->started_ns = kiln_time_monotonic_ns();
  kiln__v1__recompile_summary__init(&c->totals);
  atomic_init(&c->cancelled, false);
  uv_timer_init(kilnd_stream_loop(stream), &c->retry_timer);
  c->retry_timer.data = c;
  if (kilnd_stream_on_cancel(stream, on_cancel, c)) {
    on_cancel(stream, c);
    return;
  }
  recv_more(c);
}
