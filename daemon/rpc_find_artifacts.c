/* FindArtifacts: one page of artifact metadata matching every given filter, newest
 * first. Offloaded (SQLite): runs on the thread pool and touches only env->cache.
 *
 * Paging is by keyset, never by offset: a page token names the last row of the
 * page it ends (creation time, artifact digest, cache key, in the index's total
 * order) plus a hash of the filters it was issued for, so the next page starts
 * strictly after that row whatever was stored or evicted meanwhile, and a token
 * replayed with other filters is refused. The page size (`limit`) is not a filter:
 * it may change between pages. Token: "v1.<created_ms>.<artifact digest>.<cache
 * key>.<16 hex of the filter hash>"; clients treat it as opaque.
 */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/alloc.h"
#include "base/buf.h"
#include "base/digest.h"
#include "compiler/identity.h"
#include "compiler/targets.h"
#include "daemon/rpc.h"
#include "kiln/v1/kiln.pb-c.h"

#define DEFAULT_LIMIT   100
#define MAX_LIMIT       1000
#define MAX_LABELS      32
#define FILTER_HASH_HEX 16

static int cmp_label(const void *a, const void *b) {
  const kiln_index_label_t *x = a, *y = b;
  return strcmp(x->key, y->key);
}

/* Validated labels, sorted by key, a key given twice keeping its last value (map
 * semantics). The array is in the arena. */
static KILN_MUST_USE kiln_status_t collect_labels(kiln_arena_t *arena,
                                                  const Kiln__V1__FindArtifactsRequest *req,
                                                  kiln_index_label_t **out_labels, size_t *out_count) {
  if (req->n_labels > MAX_LABELS) {
    return KILN_STATUS(KILN_STATUS_INVALID_ARGUMENT, "FindArtifacts: %zu labels, at most %d can be matched",
                       req->n_labels, MAX_LABELS);
  }
  kiln_index_label_t *labels = kiln_arena_calloc(arena, req->n_labels ? req->n_labels : 1, sizeof *labels);
  size_t n = 0;
  for (size_t i = 0; i < req->n_labels; i++) {
    const char *key = req->labels[i]->key, *value = req->labels[i]->value;
    KILN_RETURN_IF_ERROR(kilnd_label_check("FindArtifacts", key, value));
    size_t k = 0;
    while (k < n && strcmp(labels[k].key, key) != 0) k++;
    labels[k].key = (char *)key;
    labels[k].value = (char *)value;
    if (k == n) n++;
  }
  qsort(labels, n, sizeof *labels, cmp_label);
  *out_labels = labels;
  *out_count = n;
  return NULL;
}

/* The first FILTER_HASH_HEX hex digits of a hash of everything that selects rows,
 * in a length-prefixed encoding (no two filter sets encode alike). */
static void filter_hash(const kiln_index_page_query_t *q, bool legacy_only, char out[FILTER_HASH_HEX + 1]) {
  kiln_buf_t enc;
  kiln_buf_init(&enc);
  const char *src = q->source_digest ? q->source_digest : "";
  const char *target = q->target ? q->target : "";
  kiln_buf_appendf(&enc,
                   "find/1\nsource:%zu:%s\ntarget:%zu:%s\nhal:%" PRIu32
                   "\nlegacy:%d\n"
                   "after:%" PRId64 "\nbefore:%" PRId64 "\nlabels:%zu\n",
                   strlen(src), src, strlen(target), target, q->hal_version, legacy_only ? 1 : 0,
                   q->created_after_ms, q->created_before_ms, q->n_labels);
  for (size_t i = 0; i < q->n_labels; i++) {
    kiln_buf_appendf(&enc, "%zu:%s=%zu:%s\n", strlen(q->labels[i].key), q->labels[i].key,
                     strlen(q->labels[i].value), q->labels[i].value);
  }
  kiln_digest_t d;
  kiln_digest_of(enc.data, enc.len, &d);
  kiln_buf_deinit(&enc);
  kiln_digest_hex_t hex;
  kiln_digest_to_hex(&d, &hex);
  memcpy(out, hex.text, FILTER_HASH_HEX);
  out[FILTER_HASH_HEX] = '\0';
}

static KILN_MUST_USE kiln_status_t bad_token(const char *why) {
  return KILN_STATUS(KILN_STATUS_INVALID_ARGUMENT,
                     "FindArtifacts: page_token %s; pass next_page_token exactly as returned, "
                     "with the filters of the call that returned it (or none for the first "
                     "page)",
                     why);
}

/* Parses a token into *cursor and checks that it was issued for `hash`. */
static KILN_MUST_USE kiln_status_t parse_token(const char *token, const char *hash,
                                               kiln_index_page_cursor_t *cursor) {
  if (strncmp(token, "v1.", 3) != 0) return bad_token("is malformed");
  const char *p = token + 3;
  char *end = NULL;
  if (!(*p == '-' || (*p >= '0' && *p <= '9'))) return bad_token("is malformed");
  long long ms = strtoll(p, &end, 10);
  if (*end != '.') return bad_token("is malformed");
  p = end + 1;
  char *fields[2] = {cursor->artifact_digest, cursor->cache_key};
  for (int i = 0; i < 2; i++) {
    if (strlen(p) < KILN_DIGEST_HEX_LEN + 1 || p[KILN_DIGEST_HEX_LEN] != '.') {
      return bad_token("is malformed");
    }
    memcpy(fields[i], p, KILN_DIGEST_HEX_LEN);
    fields[i][KILN_DIGEST_HEX_LEN] = '\0';
    if (!kiln_digest_is_valid_hex(fields[i])) return bad_token("is malformed");
    p += KILN_DIGEST_HEX_LEN + 1;
  }
  if (strlen(p) != FILTER_HASH_HEX) return bad_token("is malformed");
  if (strcmp(p, hash) != 0) return bad_token("was issued for different filters");
  cursor->created_ms = ms;
  return NULL;
}

kiln_status_t kilnd_rpc_find_artifacts(const kilnd_rpc_env_t *env, const kilnd_call_ctx_t *call,
                                       const ProtobufCMessage *request, ProtobufCMessage **out_response) {
  kiln_arena_t *arena = call->arena;
  const Kiln__V1__FindArtifactsRequest *req = (const Kiln__V1__FindArtifactsRequest *)request;
  if (!env->cache) {
    return KILN_STATUS(KILN_STATUS_INTERNAL, "FindArtifacts served without a cache (daemon bug)");
  }
  kiln_index_page_query_t q;
  memset(&q, 0, sizeof q);
  if (*req->source_digest) {
    if (!kiln_digest_is_valid_hex(req->source_digest)) {
      return KILN_STATUS(KILN_STATUS_INVALID_ARGUMENT,
                         "FindArtifacts: source_digest '%.80s' is not 64 lowercase hex characters",
                         req->source_digest);
    }
    /* a source as uploaded, or its normal form's digest: artifacts carry the latter */
    kiln_digest_hex_t key;
    KILN_RETURN_IF_ERROR(kiln_cache_source_key_digest(env->cache, req->source_digest, &key));
    q.source_digest = kiln_arena_strdup(arena, key.text);
  }
  if (*req->target) {
    const kiln_target_t *target = NULL;
    KILN_RETURN_IF_ERROR(
        kiln_status_annotate(kiln_compiler_target_resolve(req->target, &target), "FindArtifacts: target"));
    q.target = target->id;
  }
  if (req->limit > MAX_LIMIT) {
    return KILN_STATUS(KILN_STATUS_INVALID_ARGUMENT,
                       "FindArtifacts: limit %" PRIu32
                       " is above %d; page through the results "
                       "with next_page_token",
                       req->limit, MAX_LIMIT);
  }
  size_t limit = req->limit ? req->limit : DEFAULT_LIMIT;
  q.hal_version = req->hal_module_version;
  if (req->legacy_only) q.hal_below = kiln_compiler_hal_module_version();
  q.created_after_ms = req->created_after_unix_ms;
  q.created_before_ms = req->created_before_unix_ms;
  kiln_index_label_t *labels = NULL;
  KILN_RETURN_IF_ERROR(collect_labels(arena, req, &labels, &q.n_labels));
  q.labels = labels;
  char hash[FILTER_HASH_HEX + 1];
  filter_hash(&q, req->legacy_only, hash);
  kiln_index_page_cursor_t cursor;
  if (*req->page_token) {
    KILN_RETURN_IF_ERROR(parse_token(req->page_token, hash, &cursor));
    q.after = &cursor;
  }
  q.limit = limit + 1; /* one more tells whether a next page exists */

  kiln_index_artifact_t *rows = NULL;
  size_t n = 0;
  KILN_RETURN_IF_ERROR(kiln_cache_artifact_find_page(env->cache, &q, &rows, &n));
  size_t total = n;
  bool more = n > limit;
  if (more) n = limit;
  Kiln__V1__FindArtifactsResponse *resp = kiln_arena_alloc(arena, sizeof *resp);
  kiln__v1__find_artifacts_response__init(resp);
  resp->artifacts = kiln_arena_calloc(arena, n ? n : 1, sizeof *resp->artifacts);
  for (size_t i = 0; i < n; i++) {
    resp->artifacts[resp->n_artifacts++] = kilnd_artifact_metadata(arena, &rows[i]);
  }
  if (more) {
    const kiln_index_artifact_t *last = &rows[n - 1];
    resp->next_page_token = kiln_arena_sprintf(arena, "v1.%" PRId64 ".%s.%s.%s", last->created_ms,
                                               last->artifact_digest, last->cache_key, hash);
  }
  kiln_index_artifacts_free(rows, total);
  *out_response = &resp->base;
  return NULL;
}
