/* Compile: validate, resolve, admit. Tried on the loop first: a request the
 * cache's memory answers whole (every target a recent hit) is admitted there, with
 * no thread hop; anything else runs again on the thread pool, where admission may
 * hash and store the source and query SQLite. Either way it touches only what
 * rpc.h declares thread-safe plus the job engine's thread-safe submit. */
#include <string.h>

#include "base/alloc.h"
#include "base/digest.h"
#include "compiler/targets.h"
#include "daemon/flags.h"
#include "daemon/jobs.h"
#include "daemon/rpc.h"
#include "daemon/source_check.h"
#include "kiln/v1/kiln.pb-c.h"

#define MAX_LABELS     32
#define MAX_NAME_BYTES 1024
/* Inline sources up to this size are checked and hashed on the loop (~0.1 ms). */
#define LOOP_SOURCE_MAX_BYTES (64 * 1024)

kiln_status_t kilnd_rpc_compile(const kilnd_rpc_env_t *env, const kilnd_call_ctx_t *call,
                                const ProtobufCMessage *request, ProtobufCMessage **out_response) {
  const Kiln__V1__CompileRequest *req = (const Kiln__V1__CompileRequest *)request;
  kiln_arena_t *arena = call->arena;
  if (!env->jobs) return KILN_STATUS(KILN_STATUS_UNAVAILABLE, "kilnd is starting: no job engine yet");
  /* client-max-request-bytes, before anything is done with the bytes. */
  KILN_RETURN_IF_ERROR(kilnd_jobs_check_request_bytes(env->jobs, call->client,
                                                      protobuf_c_message_get_packed_size(request),
                                                      env->settings->client_max_request_bytes));

  /* The source. */
  const uint8_t *source = NULL;
  size_t source_len = 0;
  const char *digest = NULL;
  if (req->input_case == KILN__V1__COMPILE_REQUEST__INPUT_SOURCE) {
    source = req->source.data;
    source_len = req->source.len;
    if (source_len == 0) return KILN_STATUS(KILN_STATUS_INVALID_ARGUMENT, "the inline source is empty");
    /* Checking and hashing a large inline source takes time the loop must not
     * spend (up to max-message-bytes, 64 MiB by default): that goes to the pool. */
    if (!call->may_block && call->run_off_loop && source_len > LOOP_SOURCE_MAX_BYTES) {
      *call->run_off_loop = true;
      return NULL;
    }
    /* Text must be UTF-8 (without NULs), bytecode must start with its magic; a
     * refusal carries `kiln-diagnostics-bin` with the offending line and column. */
    kilnd_source_check_t check;
    kilnd_source_check_init(&check, (int)req->source_format);
    const char *name = *req->source_name ? req->source_name : "<source>";
    kiln_status_t st = kilnd_source_check_feed(&check, source, source_len, name);
    if (!st) st = kilnd_source_check_finish(&check, name);
    if (st) {
      size_t len = 0;
      const uint8_t *packed = kilnd_source_check_diagnostics(&check, name, arena, &len);
      if (packed) kilnd_call_set_diagnostics(call, packed, len);
      return st;
    }
  } else if (req->input_case == KILN__V1__COMPILE_REQUEST__INPUT_SOURCE_DIGEST) {
    digest = req->source_digest;
    if (!kiln_digest_is_valid_hex(digest)) {
      return KILN_STATUS(KILN_STATUS_INVALID_ARGUMENT,
                         "source_digest '%.80s' is not a SHA-256 digest (64 lowercase hex)", digest);
    }
  } else {
    return KILN_STATUS(KILN_STATUS_INVALID_ARGUMENT,
                       "no source: set `source` (inline bytes) or `source_digest`");
  }
  if (strlen(req->source_name) > MAX_NAME_BYTES) {
    return KILN_STATUS(KILN_STATUS_INVALID_ARGUMENT, "source_name is over %d bytes", MAX_NAME_BYTES);
  }
  if (*req->request_id)
    KILN_RETURN_IF_ERROR(kilnd_id_check("request_id", req->request_id, strlen(req->request_id)));

  /* Targets: canonical, de-duplicated, request order kept. */
  if (req->n_targets == 0) return KILN_STATUS(KILN_STATUS_INVALID_ARGUMENT, "no targets: name at least one");
  if (req->n_targets > KILND_MAX_TARGETS) {
    return KILN_STATUS(KILN_STATUS_INVALID_ARGUMENT, "%zu targets: at most %d per request", req->n_targets,
                       KILND_MAX_TARGETS);
  }
  const char **canonical = kiln_arena_alloc(arena, req->n_targets * sizeof *canonical);
  const char **per_request = kiln_arena_alloc(arena, req->n_targets * sizeof *per_request);
  size_t n_canonical = 0;
  for (size_t i = 0; i < req->n_targets; i++) {
    const kiln_target_t *t = NULL;
    kiln_status_t st = kiln_compiler_target_resolve(req->targets[i], &t);
    if (st) return kiln_status_annotate(st, "targets[%zu]", i);
    per_request[i] = t->id;
    size_t k = 0;
    while (k < n_canonical && strcmp(canonical[k], t->id) != 0) k++;
    if (k == n_canonical) canonical[n_canonical++] = t->id;
  }

  char **flags = NULL;
  size_t n_flags = 0;
  KILN_RETURN_IF_ERROR(
      kilnd_flags_normalize((const char *const *)req->flags, req->n_flags, &flags, &n_flags));

  if (req->n_labels > MAX_LABELS) {
    kilnd_flags_free(flags, n_flags);
    return KILN_STATUS(KILN_STATUS_INVALID_ARGUMENT, "%zu labels: at most %d", req->n_labels, MAX_LABELS);
  }
  kiln_index_label_t *labels = kiln_arena_alloc(arena, (req->n_labels ? req->n_labels : 1) * sizeof *labels);
  for (size_t i = 0; i < req->n_labels; i++) {
    kiln_status_t bad = kilnd_label_check("labels", req->labels[i]->key, req->labels[i]->value);
    if (bad) {
      kilnd_flags_free(flags, n_flags);
      return bad;
    }
    labels[i].key = req->labels[i]->key;
    labels[i].value = req->labels[i]->value;
  }

  kilnd_job_request_t jr = {
      .source = source,
      .source_len = source_len,
      .source_digest = digest,
      .source_name = req->source_name,
      .targets = canonical,
      .n_targets = n_canonical,
      .flags = (const char *const *)flags,
      .n_flags = n_flags,
      .priority = req->priority == KILN__V1__PRIORITY__PRIORITY_UNSPECIFIED ? KILND_PRIORITY_INTERACTIVE
                                                                            : (kilnd_priority_t)req->priority,
      .client = call->client,
      .request_id = req->request_id,
      .deadline_monotonic_ns = call->deadline_monotonic_ns,
      .labels = labels,
      .n_labels = req->n_labels,
  };
  kilnd_job_admission_t adm;
  kiln_status_t st;
  if (call->may_block || !call->run_off_loop) {
    st = kilnd_jobs_submit(env->jobs, &jr, &adm);
  } else {
    /* On the loop: only a request the cache answers from memory; anything else
     * (a miss, a first sight of the source, a stat due) goes to the pool. */
    bool would_block = false;
    st = kilnd_jobs_try_submit(env->jobs, &jr, &adm, &would_block);
    if (!st && would_block) {
      kilnd_flags_free(flags, n_flags);
      *call->run_off_loop = true;
      return NULL;
    }
  }
  kilnd_flags_free(flags, n_flags);
  if (st) return st;

  Kiln__V1__CompileResponse *resp = kiln_arena_alloc(arena, sizeof *resp);
  kiln__v1__compile_response__init(resp);
  resp->job_id = kiln_arena_strdup(arena, adm.job_id);
  resp->source_digest = kiln_arena_strdup(arena, adm.source_digest);
  resp->state = (Kiln__V1__JobState)adm.state;
  resp->created_unix_ms = adm.created_unix_ms;
  resp->n_targets = req->n_targets;
  resp->targets = kiln_arena_alloc(arena, req->n_targets * sizeof *resp->targets);
  for (size_t i = 0; i < req->n_targets; i++) {
    size_t k = 0;
    while (k < adm.n_targets && strcmp(adm.targets[k].target, per_request[i]) != 0) k++;
    const kilnd_job_admitted_target_t *a = &adm.targets[k < adm.n_targets ? k : 0];
    Kiln__V1__CompileTarget *t = kiln_arena_alloc(arena, sizeof *t);
    kiln__v1__compile_target__init(t);
    t->target = req->targets[i];
    t->canonical_target = (char *)per_request[i];
    t->cache_key = kiln_arena_strdup(arena, a->cache_key);
    t->artifact_digest = kiln_arena_strdup(arena, a->artifact_digest);
    t->cached = a->cached;
    t->size_bytes = a->size_bytes;
    t->merged = a->merged;
    resp->targets[i] = t;
  }
  kilnd_job_admission_deinit(&adm);
  *out_response = &resp->base;
  return NULL;
}
