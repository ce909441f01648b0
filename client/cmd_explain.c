/* `kiln explain FILE|--source DIGEST --target T[,T...] [--flag F]...`: would
 * Compile hit the cache for each target, and if not, why (client/explain.h).
 *
 * RPCs: GetServerInfo (the compiler identity and target names: aliases resolve to
 * canonical ids here, an unknown name is a usage error listing the known ones),
 * FindArtifacts by source digest (every page), and per target GetArtifact by key
 * with length 1 (kilnd's own answer to "is this key cached?", costing one byte).
 * Exit 0 when every target would hit, 1 when any would miss. */
#include <stdio.h>
#include <string.h>
#include <strings.h>

#include "base/alloc.h"
#include "base/buf.h"
#include "base/flags.h"
#include "client/cli.h"
#include "client/explain.h"
#include "client/json.h"
#include "client/transfer.h"
#include "kiln/v1/kiln.pb-c.h"

static const char usage[] = "explain FILE|--source DIGEST --target T[,T...] [--flag F]...";

/* The canonical id of `name` (borrowed from info), or NULL. */
static const char *resolve_target(const Kiln__V1__GetServerInfoResponse *info, const char *name) {
  for (size_t i = 0; i < info->n_targets; i++) {
    const Kiln__V1__TargetInfo *t = info->targets[i];
    if (strcasecmp(t->id, name) == 0) return t->id;
    for (size_t a = 0; a < t->n_aliases; a++) {
      if (strcasecmp(t->aliases[a], name) == 0) return t->id;
    }
  }
  return NULL;
}

/* GetArtifact by key, one byte: HIT with *out_meta (owned), MISS, or UNKNOWN.
 * INVALID_ARGUMENT (a refused flag) is returned as a status. */
static KILN_MUST_USE kiln_status_t lookup(kiln_client_t *client, const char *source, const char *target,
                                          const kiln_cli_settings_t *settings, kiln_cli_lookup_t *out,
                                          Kiln__V1__ArtifactChunk **out_meta) {
  *out = KILN_CLI_LOOKUP_UNKNOWN;
  *out_meta = NULL;
  Kiln__V1__ArtifactKey key = KILN__V1__ARTIFACT_KEY__INIT;
  key.source_digest = (char *)source;
  key.target = (char *)target;
  key.flags = settings->flag.items;
  key.n_flags = settings->flag.count;
  Kiln__V1__GetArtifactRequest req = KILN__V1__GET_ARTIFACT_REQUEST__INIT;
  req.selector_case = KILN__V1__GET_ARTIFACT_REQUEST__SELECTOR_KEY;
  req.key = &key;
  req.length = 1;
  kiln_client_stream_t *stream = kiln_client_stream_open(client, "/kiln.v1.Kiln/GetArtifact", &req.base);
  ProtobufCMessage *msg = NULL;
  bool timed_out = false;
  kiln_status_t status =
      kiln_client_stream_read(stream, &kiln__v1__artifact_chunk__descriptor, -1, &msg, &timed_out);
  kiln_client_stream_destroy(stream); /* the one byte is not needed */
  if (!status && msg && ((Kiln__V1__ArtifactChunk *)msg)->metadata) {
    *out = KILN_CLI_LOOKUP_HIT;
    *out_meta = (Kiln__V1__ArtifactChunk *)msg;
    return NULL;
  }
  if (msg) protobuf_c_message_free_unpacked(msg, NULL);
  kiln_status_code_t code = kiln_status_code(status);
  if (code == KILN_STATUS_NOT_FOUND) *out = KILN_CLI_LOOKUP_MISS;
  if (code == KILN_STATUS_INVALID_ARGUMENT || code == KILN_STATUS_UNAVAILABLE ||
      code == KILN_STATUS_DEADLINE_EXCEEDED) {
    return status;
  }
  kiln_status_free(status);
  return NULL;
}

int kiln_cli_explain(const kiln_cli_settings_t *settings, kiln_client_t *client, int argc,
                     const char **argv) {
  int rc = kiln_cli_expect_args("explain", argc, 0, 1, usage);
  if (rc) return rc;
  if ((argc == 1) == (settings->source != NULL)) {
    fprintf(stderr, "kiln: explain: name the source once: a FILE or --source DIGEST\nusage: kiln %s\n",
            usage);
    return KILN_EXIT_USAGE;
  }
  kiln_digest_hex_t source;
  kiln_status_t status = kiln_cli_source_resolve(argc == 1 ? argv[0] : settings->source, &source);
  if (status) {
    fprintf(stderr, "kiln: explain: %s\n", kiln_status_message(status));
    kiln_status_free(status);
    return KILN_EXIT_USAGE;
  }
  kiln_client_set_route(client, source.text); /* the kilnd that holds this model, behind a router */
  char **names = NULL;
  size_t n_names = 0;
  kiln_cli_targets_split(&settings->target, &names, &n_names);
  if (n_names == 0) {
    fprintf(stderr, "kiln: explain: no target: pass --target (see `kiln info`)\nusage: kiln %s\n", usage);
    return KILN_EXIT_USAGE;
  }

  Kiln__V1__GetServerInfoRequest info_req = KILN__V1__GET_SERVER_INFO_REQUEST__INIT;
  ProtobufCMessage *info_msg = NULL;
  rc = kiln_cli_call(settings, client, "explain", "/kiln.v1.Kiln/GetServerInfo", &info_req.base,
                     &kiln__v1__get_server_info_response__descriptor, &info_msg);
  if (rc) {
    kiln_cli_strings_free(names, n_names);
    return rc;
  }
  const Kiln__V1__GetServerInfoResponse *info = (const Kiln__V1__GetServerInfoResponse *)info_msg;
  const char **canonical = kiln_calloc(n_names, sizeof *canonical);
  for (size_t i = 0; i < n_names && !rc; i++) {
    canonical[i] = resolve_target(info, names[i]);
    if (!canonical[i]) {
      kiln_buf_t known;
      kiln_buf_init(&known);
      for (size_t k = 0; k < info->n_targets; k++) {
        kiln_buf_appendf(&known, "%s%s", k ? ", " : "", info->targets[k]->id);
      }
      fprintf(stderr, "kiln: explain: unknown target '%s'; kilnd knows: %s\n", names[i], known.data);
      kiln_buf_deinit(&known);
      rc = KILN_EXIT_USAGE;
    }
  }

  /* Every artifact of the source, all pages. */
  ProtobufCMessage **pages = NULL;
  size_t n_pages = 0;
  Kiln__V1__ArtifactMetadata **artifacts = NULL;
  size_t n_artifacts = 0;
  char *token = kiln_strdup("");
  while (!rc) {
    Kiln__V1__FindArtifactsRequest req = KILN__V1__FIND_ARTIFACTS_REQUEST__INIT;
    req.source_digest = source.text;
    req.limit = 1000;
    req.page_token = token;
    ProtobufCMessage *msg = NULL;
    rc = kiln_cli_call(settings, client, "explain", "/kiln.v1.Kiln/FindArtifacts", &req.base,
                       &kiln__v1__find_artifacts_response__descriptor, &msg);
    if (rc) break;
    pages = kiln_realloc(pages, (n_pages + 1) * sizeof *pages);
    pages[n_pages++] = msg;
    const Kiln__V1__FindArtifactsResponse *r = (const Kiln__V1__FindArtifactsResponse *)msg;
    artifacts = kiln_realloc(artifacts, (n_artifacts + r->n_artifacts + 1) * sizeof *artifacts);
    for (size_t i = 0; i < r->n_artifacts; i++) artifacts[n_artifacts++] = r->artifacts[i];
    kiln_free(token);
    token = kiln_strdup(r->next_page_token ? r->next_page_token : "");
    if (!*token) break;
  }
  kiln_free(token);

  json_object *root = NULL, *targets_json = NULL;
  if (!rc && settings->json) {
    root = json_object_new_object();
    json_object_object_add(root, "source_digest", json_object_new_string(source.text));
    json_object_object_add(root, "compiler",
                           info->compiler ? kiln_client_json_from_message(&info->compiler->base) : NULL);
    char **norm = NULL;
    size_t n_norm = 0;
    n_norm = kiln_flags_normalize((const char *const *)settings->flag.items, settings->flag.count, &norm);
    json_object *flags = json_object_new_array();
    for (size_t i = 0; i < n_norm; i++) json_object_array_add(flags, json_object_new_string(norm[i]));
    kiln_cli_strings_free(norm, n_norm);
    json_object_object_add(root, "flags", flags);
    targets_json = json_object_new_object();
    json_object_object_add(root, "targets", targets_json);
  }
  bool all_hit = true;
  for (size_t i = 0; i < n_names && !rc; i++) {
    kiln_cli_lookup_t found = KILN_CLI_LOOKUP_UNKNOWN;
    Kiln__V1__ArtifactChunk *hit = NULL;
    status = lookup(client, source.text, canonical[i], settings, &found, &hit);
    if (status) {
      if (kiln_status_code(status) == KILN_STATUS_INVALID_ARGUMENT) {
        fprintf(stderr, "kiln: explain: kilnd refused the key: %s\n", kiln_status_message(status));
        kiln_status_free(status);
        rc = KILN_EXIT_USAGE;
      } else {
        rc = kiln_cli_report(settings, "explain", kiln_client_timeout(client), status);
      }
      break;
    }
    kiln_cli_explain_input_t in = {source.text,          canonical[i],   settings->flag.items,
                                   settings->flag.count, info->compiler, artifacts,
                                   n_artifacts,          found,          hit ? hit->metadata : NULL};
    kiln_cli_explain_t ex;
    kiln_cli_explain_target(&in, &ex);
    all_hit &= ex.hit;
    if (targets_json) {
      json_object *o = json_object_new_object();
      json_object_object_add(o, "hit", json_object_new_boolean(ex.hit));
      json_object_object_add(o, "differs", json_object_new_string(ex.differs));
      json_object_object_add(o, "reason", json_object_new_string(ex.reason));
      json_object_object_add(o, "confirmed_by_kilnd",
                             json_object_new_boolean(found != KILN_CLI_LOOKUP_UNKNOWN));
      json_object_object_add(o, "nearest",
                             ex.nearest ? kiln_client_json_from_message(&ex.nearest->base) : NULL);
      json_object_object_add(targets_json, canonical[i], o);
    } else {
      printf("%s: %s: %s\n", canonical[i], ex.hit ? "hit" : "miss", ex.reason);
    }
    kiln_cli_explain_deinit(&ex);
    if (hit) protobuf_c_message_free_unpacked(&hit->base, NULL);
  }
  if (root) {
    if (!rc) {
      json_object_object_add(root, "hit", json_object_new_boolean(all_hit));
      kiln_client_json_print(root);
    } else {
      json_object_put(root);
    }
  }
  if (!rc && !all_hit) rc = KILN_EXIT_FAILED;
  for (size_t i = 0; i < n_pages; i++) protobuf_c_message_free_unpacked(pages[i], NULL);
  kiln_free(pages);
  kiln_free(artifacts);
  kiln_free(canonical);
  kiln_cli_strings_free(names, n_names);
  protobuf_c_message_free_unpacked(info_msg, NULL);
  return rc;
}
