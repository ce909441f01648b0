/* Admission: a Compile request becomes a job. Two modes share one in-memory step:
 *
 *   kilnd_jobs_submit (thread pool)      kilnd_jobs_try_submit (loop)
 *     prep_start                           prep_start (no waiting for a worker)
 *     prep_from_cache: store the source,   prep_from_memory: only what the cache's
 *       look every target up (SQLite),       memory answers; anything else: would
 *       load the bytes a compile needs       block, nothing changed
 *                 \                       /
 *                  admit_locked (under mu): a retry of a request_id, the limits,
 *                  the job, its items merged or queued as one task, the first events
 *
 * The cache work runs before the lock is taken, so the lock is never held across
 * SQLite or hashing.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/alloc.h"
#include "base/buf.h"
#include "base/digest.h"
#include "base/mlir_text.h"
#include "base/time.h"
#include "daemon/jobs/jobs_impl.h"

/* A whole cached Compile is answered from the cache's memory only if the memo
 * takes all of its keys at once. */
_Static_assert(KILND_MAX_TARGETS <= KILN_CACHE_MEMO_MAX_KEYS, "the memo must take every Compile's keys");

/* What admission learns before it takes the lock. */
typedef struct prep_s {
  char *compiler;                  /* the workers' identity, a part of every key */
  source_t *source;                /* digests, name and (for a compile) the bytes */
  kilnd_job_admitted_target_t *at; /* per target: key, and the artifact when cached */
  size_t n;
  char hash[65]; /* of the request, for request_id retries */
} prep_t;

/* The source, when admission never reached the lock, was never shared. */
static void prep_deinit(prep_t *p) {
  for (size_t i = 0; p->at && i < p->n; i++) kiln_free(p->at[i].target);
  kiln_free(p->at);
  source_release(p->source);
  kiln_free(p->compiler);
  memset(p, 0, sizeof *p);
}

/* Under mu: admission's own reference to the source. Once admit_locked ran, the
 * job and the task share it and the loop releases theirs under the lock, so this
 * one is dropped under it too (TSan found the count changed on both sides). */
static void prep_drop_source_locked(prep_t *p) {
  source_release(p->source);
  p->source = NULL;
}

void kilnd_job_admission_deinit(kilnd_job_admission_t *admission) {
  for (size_t i = 0; i < admission->n_targets; i++) kiln_free(admission->targets[i].target);
  kiln_free(admission->targets);
  admission->targets = NULL;
  admission->n_targets = 0;
}

/* The first answer of `job` again, for a retry of its request_id, rebuilt from
 * what the job keeps (a job does not keep a second copy of its targets: most
 * jobs are cache hits nobody retries, and kilnd keeps thousands). */
static void admission_of(const job_t *job, kilnd_job_admission_t *to) {
  memset(to, 0, sizeof *to);
  memcpy(to->job_id, job->id, sizeof to->job_id);
  memcpy(to->source_digest, job->source_digest, sizeof to->source_digest);
  to->state = job->admitted_state;
  to->created_unix_ms = job->created_unix_ms;
  to->n_targets = job->n_targets;
  to->targets = kiln_calloc(job->n_targets ? job->n_targets : 1, sizeof *to->targets);
  for (size_t i = 0; i < job->n_targets; i++) {
    const job_target_t *jt = &job->targets[i];
    kilnd_job_admitted_target_t *t = &to->targets[i];
    t->target = kiln_strdup(jt->target);
    memcpy(t->cache_key, jt->key, sizeof t->cache_key);
    t->cached = jt->admitted_cached;
    t->merged = jt->admitted_merged;
    if (t->cached) {
      memcpy(t->artifact_digest, jt->digest, sizeof t->artifact_digest);
      t->size_bytes = jt->size;
    }
  }
}

/* Of the request, for request_id retries: one pass over the parts laid end to
 * end (each NUL-ended, so none can run into the next), on the stack when small. */
static void request_hash(const kilnd_job_request_t *r, const char *source_digest, char out[65]) {
  size_t need = strlen(source_digest) + 1 + 1 + 1;
  for (size_t i = 0; i < r->n_targets; i++) need += strlen(r->targets[i]) + 1;
  for (size_t i = 0; i < r->n_flags; i++) need += strlen(r->flags[i]) + 1;
  char stack[1024];
  char *bytes = need <= sizeof stack ? stack : kiln_malloc(need), *at = bytes;
  size_t len = strlen(source_digest) + 1;
  at = (char *)memcpy(at, source_digest, len) + len;
  for (size_t i = 0; i < r->n_targets; i++) {
    len = strlen(r->targets[i]) + 1;
    at = (char *)memcpy(at, r->targets[i], len) + len;
  }
  *at++ = '\x01';
  for (size_t i = 0; i < r->n_flags; i++) {
    len = strlen(r->flags[i]) + 1;
    at = (char *)memcpy(at, r->flags[i], len) + len;
  }
  uint8_t priority = (uint8_t)r->priority;
  memcpy(at++, &priority, 1);
  kiln_digest_t d;
  kiln_digest_of(bytes, (size_t)(at - bytes), &d);
  if (bytes != stack) kiln_free(bytes);
  kiln_digest_hex_t hex;
  kiln_digest_to_hex(&d, &hex);
  memcpy(out, hex.text, 65);
}

/* The key digest (base/mlir_text.h) of `len` bytes whose own digest is `raw`:
 * from the memo, or (when `data` is not NULL) computed and remembered. False when
 * the memo does not have it and `data` is NULL (the loop must not take the pass). */
static bool source_key_digest(kilnd_jobs_t *jobs, const char *raw, const void *data, size_t len,
                              char out[65]) {
  char head[9];
  memcpy(head, raw, 8);
  head[8] = '\0';
  size_t slot = (size_t)strtoul(head, NULL, 16) % KEY_MEMO_SLOTS;
  uv_mutex_lock(&jobs->key_memo.mu);
  bool hit = strcmp(jobs->key_memo.slot[slot].raw, raw) == 0;
  if (hit) memcpy(out, jobs->key_memo.slot[slot].key, 65);
  uv_mutex_unlock(&jobs->key_memo.mu);
  if (hit || !data) return hit;
  kiln_digest_hex_t key;
  kiln_mlir_text_digest(data, len, &key);
  memcpy(out, key.text, 65);
  uv_mutex_lock(&jobs->key_memo.mu);
  memcpy(jobs->key_memo.slot[slot].raw, raw, 65);
  memcpy(jobs->key_memo.slot[slot].key, key.text, 65);
  uv_mutex_unlock(&jobs->key_memo.mu);
  return true;
}

/* ---- before the lock ---- */

/* The request's own checks and the compiler identity (the first worker's Hello
 * names it). On the loop it is not waited for: *out_would_block. */
static KILN_MUST_USE kiln_status_t prep_start(kilnd_jobs_t *jobs, const kilnd_job_request_t *r, bool on_loop,
                                              prep_t *p, bool *out_would_block) {
  if (r->n_targets == 0) return KILN_STATUS(KILN_STATUS_INVALID_ARGUMENT, "no targets to compile for");
  uv_mutex_lock(&jobs->mu);
  bool draining = jobs->draining;
  uv_mutex_unlock(&jobs->mu);
  const char *known = on_loop ? kilnd_jobs_compiler(jobs) : kilnd_jobs_compiler_wait(jobs, COMPILER_WAIT_MS);
  if (on_loop && !known && !draining) {
    *out_would_block = true;
    return NULL;
  }
  if (draining)
    return KILN_STATUS(KILN_STATUS_UNAVAILABLE, "kilnd is shutting down; retry on another server");
  if (!known) {
    return KILN_STATUS(KILN_STATUS_UNAVAILABLE,
                       "no compile worker has started yet (kiln-worker or the external compiler is failing "
                       "to start: see kilnd's log); retry");
  }
  p->compiler = kiln_strdup(known);
  p->source = kiln_calloc(1, sizeof *p->source);
  p->source->refs = 1;
  p->source->name = kiln_strdup(r->source_name && *r->source_name ? r->source_name : "<source>");
  p->n = r->n_targets;
  p->at = kiln_calloc(r->n_targets, sizeof *p->at);
  for (size_t i = 0; i < r->n_targets; i++) p->at[i].target = kiln_strdup(r->targets[i]);
  return NULL;
}

/* Every target's cache key, from the source's key digest. */
static KILN_MUST_USE kiln_status_t prep_keys(kilnd_jobs_t *jobs, const kilnd_job_request_t *r, prep_t *p) {
  kiln_cache_key_parts_t parts;
  kilnd_jobs_key_parts(jobs, p->compiler, p->source->key_digest, NULL, r->flags, r->n_flags, &parts);
  kiln_digest_hex_t stack[KILND_MAX_TARGETS]; /* Compile refuses more; the heap is for safety */
  kiln_digest_hex_t *keys =
      r->n_targets <= KILND_MAX_TARGETS ? stack : kiln_calloc(r->n_targets, sizeof *keys);
  kiln_status_t st = kiln_cache_keys_compute(&parts, r->targets, r->n_targets, keys);
  for (size_t i = 0; !st && i < r->n_targets; i++) {
    memcpy(p->at[i].cache_key, keys[i].text, sizeof p->at[i].cache_key);
  }
  if (keys != stack) kiln_free(keys);
  return st;
}

/* Loop: the request answered whole by the cache's memory (every target a memoized
 * hit, the hits recorded) sets *out_whole; otherwise nothing was changed. */
static KILN_MUST_USE kiln_status_t prep_from_memory(kilnd_jobs_t *jobs, const kilnd_job_request_t *r,
                                                    prep_t *p, bool *out_whole) {
  *out_whole = false;
  if (!r->source) return NULL; /* its key digest is in the index: the blocking admission reads it */
  kiln_digest_hex_t digest;
  bool stored = kiln_cache_source_memo(jobs->cache, r->source, r->source_len, &digest);
  memcpy(p->source->digest, digest.text, sizeof p->source->digest);
  if (!stored || !source_key_digest(jobs, p->source->digest, NULL, 0, p->source->key_digest)) return NULL;
  if (r->n_targets > KILND_MAX_TARGETS) return NULL;
  KILN_RETURN_IF_ERROR(prep_keys(jobs, r, p));
  /* Every target a memoized hit, all recorded at once, or nothing changed. */
  const char *keys[KILND_MAX_TARGETS];
  kiln_cache_memo_answer_t answers[KILND_MAX_TARGETS];
  for (size_t i = 0; i < r->n_targets; i++) keys[i] = p->at[i].cache_key;
  if (!kiln_cache_artifact_memo(jobs->cache, keys, r->n_targets, answers)) return NULL;
  for (size_t i = 0; i < r->n_targets; i++) {
    kilnd_job_admitted_target_t *at = &p->at[i];
    memcpy(at->artifact_digest, answers[i].artifact_digest, sizeof at->artifact_digest);
    at->size_bytes = answers[i].size;
    at->cached = true;
  }
  *out_whole = true;
  return NULL;
}

/* Thread pool: the source stored (inline) or found (by digest), every target
 * looked up, and, when some target needs a compile, the bytes the worker will
 * need. A cache hit never touches the bytes. */
static KILN_MUST_USE kiln_status_t prep_from_cache(kilnd_jobs_t *jobs, const kilnd_job_request_t *r,
                                                   prep_t *p) {
  source_t *source = p->source;
  if (r->source) {
    /* One hash of the bytes (the memo's); the normal form's pass only for bytes the
     * key memo does not know. */
    kiln_digest_hex_t digest;
    bool stored = kiln_cache_source_memo(jobs->cache, r->source, r->source_len, &digest);
    memcpy(source->digest, digest.text, sizeof source->digest);
    source_key_digest(jobs, source->digest, r->source, r->source_len, source->key_digest);
    if (!stored) {
      KILN_RETURN_IF_ERROR(kiln_cache_source_put(jobs->cache, r->source, r->source_len, NULL, source->name, 0,
                                                 source->key_digest, &digest));
    }
  } else {
    snprintf(source->digest, sizeof source->digest, "%s", r->source_digest);
    kiln_digest_hex_t key;
    KILN_RETURN_IF_ERROR(kiln_cache_source_key_digest(jobs->cache, r->source_digest, &key));
    memcpy(source->key_digest, key.text, sizeof source->key_digest);
  }
  KILN_RETURN_IF_ERROR(prep_keys(jobs, r, p));
  bool any_miss = false;
  for (size_t i = 0; i < r->n_targets; i++) {
    kilnd_job_admitted_target_t *at = &p->at[i];
    kiln_status_t lk =
        kiln_cache_artifact_probe(jobs->cache, at->cache_key, at->artifact_digest, &at->size_bytes);
    if (!lk) {
      at->cached = true;
    } else if (kiln_status_code(lk) == KILN_STATUS_NOT_FOUND) {
      kiln_status_free(lk);
      any_miss = true;
    } else {
      return lk;
    }
  }
  if (!any_miss) return NULL;
  if (r->source) {
    source->data = kiln_memdup(r->source, r->source_len ? r->source_len : 1);
    source->len = r->source_len;
    return NULL;
  }
  void *data = NULL;
  size_t len = 0;
  kiln_status_t st = kiln_cache_get_blob(jobs->cache, r->source_digest, &data, &len);
  if (st && kiln_status_code(st) == KILN_STATUS_NOT_FOUND) {
    kiln_status_free(st);
    return KILN_STATUS(KILN_STATUS_NOT_FOUND,
                       "source %s is not stored on this server (never uploaded, or evicted): upload it with "
                       "PutSource and retry",
                       r->source_digest);
  }
  KILN_RETURN_IF_ERROR(st);
  source->data = data;
  source->len = len;
  return NULL;
}

/* ---- under the lock ---- */

/* The job: a placeholder restored from the store (watchable since start-up) is
 * filled in place, keeping its events and watchers; otherwise a new one. */
static job_t *job_fill_locked(kilnd_jobs_t *jobs, const kilnd_job_request_t *r, const prep_t *p,
                              kilnd_priority_t prio, const char *forced_id, int64_t created_unix_ms,
                              bool *out_placeholder) {
  job_t *job = forced_id ? find_job_locked(jobs, forced_id) : NULL;
  if (job && job_terminal(job)) job = NULL;
  *out_placeholder = job != NULL;
  if (job) {
    index_remove_locked(jobs, job); /* its request_id is replaced below */
    for (size_t i = 0; i < job->n_targets; i++) {
      kiln_free(job->targets[i].target);
      kiln_free(job->targets[i].message);
    }
    kiln_free(job->targets);
    kiln_free(job->client);
    kiln_free(job->request_id);
    kiln_free(job->source_name);
    kiln_free(job->flags);
    source_release(job->source);
  } else {
    job = kiln_calloc(1, sizeof *job);
    if (forced_id)
      snprintf(job->id, sizeof job->id, "%s", forced_id);
    else
      random_id_locked(jobs, job->id);
  }
  job->priority = prio;
  job->client = kiln_strdup(r->client && *r->client ? r->client : "anonymous");
  job->request_id = r->request_id && *r->request_id ? kiln_strdup(r->request_id) : NULL;
  memcpy(job->request_hash, p->hash, sizeof job->request_hash);
  job->source = p->source;
  p->source->refs++;
  job->created_unix_ms = created_unix_ms ? created_unix_ms : kiln_time_unix_ms();
  job->deadline_monotonic_ns = r->deadline_monotonic_ns;
  memcpy(job->source_digest, p->source->digest, sizeof job->source_digest);
  job->source_name = kiln_strdup(p->source->name);
  kiln_buf_t fj;
  kiln_buf_init(&fj);
  for (size_t f = 0; f < r->n_flags; f++) {
    if (f) kiln_buf_append_char(&fj, '\n');
    kiln_buf_append_str(&fj, r->flags[f]);
  }
  job->flags = kiln_buf_take(&fj);
  kiln_buf_deinit(&fj);
  job->n_labels = r->n_labels;
  job->labels = labels_copy(r->labels, r->n_labels);
  job->state = KILND_JOB_QUEUED;
  job->n_targets = r->n_targets;
  job->targets = kiln_calloc(r->n_targets, sizeof *job->targets);
  if (*out_placeholder) {
    index_add_locked(jobs, job);
  } else {
    job_link_locked(jobs, job);
    jobs->stats.submitted++;
  }
  return job;
}

/* Each target of `job`: cached (done), merged into an item queued or running for
 * another job, or a new item of one new task (returned, queued; NULL when none). */
static task_t *attach_targets_locked(kilnd_jobs_t *jobs, job_t *job, const kilnd_job_request_t *r, prep_t *p,
                                     bool *out_merged_running) {
  task_t *task = NULL;
  *out_merged_running = false;
  for (size_t i = 0; i < r->n_targets; i++) {
    job_target_t *jt = &job->targets[i];
    jt->target = kiln_strdup(r->targets[i]);
    memcpy(jt->key, p->at[i].cache_key, sizeof jt->key);
    if (p->at[i].cached) {
      jt->state = TARGET_DONE;
      continue;
    }
    item_t *item = find_item_locked(jobs, p->at[i].cache_key);
    if (item) {
      p->at[i].merged = true;
      jobs->stats.merged_requests++;
      *out_merged_running = *out_merged_running || item->state != ITEM_QUEUED;
    } else {
      if (!task) {
        task = kiln_calloc(1, sizeof *task);
        task->id = ++jobs->next_task_id;
        task->priority = job->priority;
        task->client = kiln_strdup(job->client);
        task->source = p->source;
        p->source->refs++;
        task->n_flags = r->n_flags;
        task->flags = kiln_calloc(r->n_flags ? r->n_flags : 1, sizeof *task->flags);
        for (size_t f = 0; f < r->n_flags; f++) task->flags[f] = kiln_strdup(r->flags[f]);
        task->items = kiln_calloc(r->n_targets, sizeof *task->items);
      }
      item = kiln_calloc(1, sizeof *item);
      memcpy(item->key, p->at[i].cache_key, sizeof item->key);
      item->target = kiln_strdup(r->targets[i]);
      item->state = ITEM_QUEUED;
      item->task = task;
      item->owner = job;
      item->next = jobs->items;
      jobs->items = item;
      task->items[task->n_items++] = item;
    }
    item->waiters = kiln_realloc(item->waiters, (item->n_waiters + 1) * sizeof *item->waiters);
    item->waiters[item->n_waiters++] = (waiter_t){job, i};
    jt->item = item;
  }
  if (task) enqueue_task_locked(jobs, task);
  return task;
}

static KILN_MUST_USE kiln_status_t admit_locked(kilnd_jobs_t *jobs, const kilnd_job_request_t *r, prep_t *p,
                                                const char *forced_id, int64_t created_unix_ms,
                                                kilnd_job_admission_t *out) {
  if (jobs->closing)
    return KILN_STATUS(KILN_STATUS_UNAVAILABLE, "kilnd is shutting down; retry on another server");
  /* A retry of a request_id: the first answer again, or a conflict. */
  if (r->request_id && *r->request_id && !forced_id) {
    job_t *j = find_request_locked(jobs, r->request_id);
    if (j && strcmp(j->request_hash, p->hash) != 0) {
      return KILN_STATUS(KILN_STATUS_ALREADY_EXISTS,
                         "request_id %s was already used for a different request (job %s)", r->request_id,
                         j->id);
    }
    if (j) {
      admission_of(j, out);
      return NULL;
    }
  }
  size_t misses = 0, new_items = 0;
  for (size_t i = 0; i < r->n_targets; i++) {
    if (p->at[i].cached) continue;
    misses++;
    if (!find_item_locked(jobs, p->at[i].cache_key)) new_items++;
  }
  kilnd_priority_t prio = r->priority >= KILND_PRIORITY_INTERACTIVE && r->priority <= KILND_PRIORITY_BULK
                              ? r->priority
                              : KILND_PRIORITY_INTERACTIVE;
  const char *client = r->client && *r->client ? r->client : "anonymous";
  KILN_RETURN_IF_ERROR(admission_limits_locked(jobs, client, prio, misses, new_items, forced_id != NULL));

  bool placeholder = false;
  job_t *job = job_fill_locked(jobs, r, p, prio, forced_id, created_unix_ms, &placeholder);
  if (misses > 0) usage_add_locked(jobs, job); /* a placeholder was counted at start-up */
  bool merged_running = false;
  task_t *task = attach_targets_locked(jobs, job, r, p, &merged_running);

  /* The answer, and the first events. */
  memcpy(out->job_id, job->id, sizeof out->job_id);
  memcpy(out->source_digest, p->source->digest, sizeof out->source_digest);
  out->created_unix_ms = job->created_unix_ms;
  out->n_targets = r->n_targets;
  out->targets = p->at;
  p->at = NULL;
  p->n = 0;
  if (misses == 0) {
    job->ephemeral = true;
    job->events_deferred = !placeholder; /* a placeholder may have watchers */
  } else if (merged_running && !task) {
    job->state = KILND_JOB_RUNNING;
  }
  emit_queued_locked(jobs, job, queue_position_locked(jobs, prio));
  if (job->state == KILND_JOB_RUNNING) emit_started_locked(jobs, job, "");
  for (size_t i = 0; i < job->n_targets; i++) {
    if (out->targets[i].cached) {
      emit_target_done_locked(jobs, job, i, out->targets[i].artifact_digest, out->targets[i].size_bytes, true,
                              0);
    }
  }
  maybe_finish_job_locked(jobs, job);
  out->state = job->state;
  job->admitted_state = out->state;
  for (size_t i = 0; i < job->n_targets; i++) {
    job->targets[i].admitted_cached = out->targets[i].cached;
    job->targets[i].admitted_merged = out->targets[i].merged;
  }
  if (!job_terminal(job)) persist_later_locked(jobs, job); /* a finished one was persisted by its Terminal */
  return NULL;
}

/* ---- the two modes ---- */

kiln_status_t admit_blocking(kilnd_jobs_t *jobs, const kilnd_job_request_t *r, const char *forced_id,
                             int64_t created_unix_ms, kilnd_job_admission_t *out) {
  memset(out, 0, sizeof *out);
  prep_t p = {0};
  bool never = false;
  kiln_status_t st = prep_start(jobs, r, false, &p, &never);
  if (!st) st = prep_from_cache(jobs, r, &p);
  if (!st) {
    request_hash(r, p.source->digest, p.hash);
    engine_lock(jobs);
    st = admit_locked(jobs, r, &p, forced_id, created_unix_ms, out);
    prep_drop_source_locked(&p);
    engine_unlock_off_loop(jobs); /* what it queued for watchers waits for the loop */
  }
  prep_deinit(&p);
  if (st) {
    kilnd_job_admission_deinit(out);
    return st;
  }
  uv_async_send(&jobs->kick); /* the loop schedules the new task */
  return NULL;
}

kiln_status_t kilnd_jobs_submit(kilnd_jobs_t *jobs, const kilnd_job_request_t *r,
                                kilnd_job_admission_t *out) {
  return admit_blocking(jobs, r, NULL, 0, out);
}

kiln_status_t kilnd_jobs_try_submit(kilnd_jobs_t *jobs, const kilnd_job_request_t *r,
                                    kilnd_job_admission_t *out, bool *out_would_block) {
  *out_would_block = false;
  memset(out, 0, sizeof *out);
  prep_t p = {0};
  kiln_status_t st = prep_start(jobs, r, true, &p, out_would_block);
  bool whole = false;
  if (!st && !*out_would_block) st = prep_from_memory(jobs, r, &p, &whole);
  if (!st && !*out_would_block && !whole) *out_would_block = true;
  if (!st && !*out_would_block) {
    request_hash(r, p.source->digest, p.hash);
    engine_lock(jobs);
    st = admit_locked(jobs, r, &p, NULL, 0, out);
    prep_drop_source_locked(&p);
    engine_unlock(jobs);
  }
  prep_deinit(&p);
  if (st) {
    kilnd_job_admission_deinit(out);
    return st;
  }
  return NULL;
}
