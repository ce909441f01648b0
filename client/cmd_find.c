/* `kiln find [--source DIGEST|FILE] [--target T] [--label K=V]... [--limit N]
 * [--page-token TOKEN | --all]`: FindArtifacts, newest first. One page by default
 * (the token of the next one goes to stderr, so stdout stays a clean table);
 * --all follows the tokens to the end. --json prints {"artifacts": [...],
 * "next_page_token": "..."} with every artifact's metadata as in kiln.proto. */
#include <stdio.h>
#include <string.h>
#include <time.h>

#include "base/alloc.h"
#include "base/buf.h"
#include "client/cli.h"
#include "client/json.h"
#include "client/transfer.h"
#include "kiln/v1/kiln.pb-c.h"

static const char usage[] =
    "find [--source DIGEST|FILE] [--target T] [--label K=V]... [--limit N] [--page-token TOKEN | --all]";

static void format_time(int64_t unix_ms, char *out, size_t cap) {
  if (unix_ms <= 0) {
    snprintf(out, cap, "-");
    return;
  }
  time_t t = (time_t)(unix_ms / 1000);
  struct tm tm;
  gmtime_r(&t, &tm);
  strftime(out, cap, "%Y-%m-%dT%H:%M:%SZ", &tm);
}

static void print_row(const Kiln__V1__ArtifactMetadata *a) {
  char created[32];
  format_time(a->created_unix_ms, created, sizeof created);
  kiln_buf_t labels;
  kiln_buf_init(&labels);
  const Kiln__V1__Provenance *p = a->provenance;
  if (p) {
    for (size_t i = 0; i < p->n_labels; i++) {
      kiln_buf_appendf(&labels, "%s%s=%s", i ? "," : "", p->labels[i]->key, p->labels[i]->value);
    }
  }
  const char *src = p && p->source_digest && *p->source_digest ? p->source_digest : "-";
  printf("%-64s  %-14s %10llu  %3u  %-20s  %.12s  %s\n", a->digest, a->canonical_target,
         (unsigned long long)a->size_bytes, a->hal_module_version, created, src,
         labels.len ? labels.data : "-");
  kiln_buf_deinit(&labels);
}

int kiln_cli_find(const kiln_cli_settings_t *settings, kiln_client_t *client, int argc, const char **argv) {
  (void)argv;
  int rc = kiln_cli_expect_args("find", argc, 0, 0, usage);
  if (rc) return rc;
  if (settings->all && settings->page_token) {
    fprintf(stderr, "kiln: find: give --all or --page-token, not both\nusage: kiln %s\n", usage);
    return KILN_EXIT_USAGE;
  }
  char **targets = NULL;
  size_t n_targets = 0;
  kiln_cli_targets_split(&settings->target, &targets, &n_targets);
  kiln_cli_label_t *labels = NULL;
  size_t n_labels = 0;
  kiln_digest_hex_t source;
  kiln_status_t status = NULL;
  if (n_targets > 1) {
    fprintf(stderr, "kiln: find: --target takes one target (FindArtifacts filters by one)\n");
    rc = KILN_EXIT_USAGE;
  } else if ((status = kiln_cli_labels_parse(&settings->label, &labels, &n_labels)) ||
             (settings->source && (status = kiln_cli_source_resolve(settings->source, &source)))) {
    fprintf(stderr, "kiln: find: %s\n", kiln_status_message(status));
    kiln_status_free(status);
    rc = KILN_EXIT_USAGE;
  }
  if (rc) {
    kiln_cli_strings_free(targets, n_targets);
    kiln_cli_labels_free(labels, n_labels);
    return rc;
  }
  if (settings->source) kiln_client_set_route(client, source.text);
  Kiln__V1__FindArtifactsRequest req = KILN__V1__FIND_ARTIFACTS_REQUEST__INIT;
  req.source_digest = settings->source ? source.text : (char *)"";
  req.target = n_targets ? targets[0] : (char *)"";
  req.limit = (uint32_t)settings->limit;
  Kiln__V1__FindArtifactsRequest__LabelsEntry *entries = kiln_calloc(n_labels + 1, sizeof *entries);
  Kiln__V1__FindArtifactsRequest__LabelsEntry **ptrs = kiln_calloc(n_labels + 1, sizeof *ptrs);
  for (size_t i = 0; i < n_labels; i++) {
    kiln__v1__find_artifacts_request__labels_entry__init(&entries[i]);
    entries[i].key = labels[i].key;
    entries[i].value = labels[i].value;
    ptrs[i] = &entries[i];
  }
  req.labels = ptrs;
  req.n_labels = n_labels;
  char *token = kiln_strdup(settings->page_token ? settings->page_token : "");
  json_object *all = settings->json ? json_object_new_array() : NULL;
  size_t shown = 0;
  for (;;) {
    req.page_token = token;
    ProtobufCMessage *msg = NULL;
    rc = kiln_cli_call(settings, client, "find", "/kiln.v1.Kiln/FindArtifacts", &req.base,
                       &kiln__v1__find_artifacts_response__descriptor, &msg);
    if (rc) break;
    const Kiln__V1__FindArtifactsResponse *r = (const Kiln__V1__FindArtifactsResponse *)msg;
    if (!settings->json && shown == 0 && r->n_artifacts) {
      printf("%-64s  %-14s %10s  %3s  %-20s  %-12s  %s\n", "DIGEST", "TARGET", "SIZE", "HAL", "CREATED",
             "SOURCE", "LABELS");
    }
    for (size_t i = 0; i < r->n_artifacts; i++) {
      if (all)
        json_object_array_add(all, kiln_client_json_from_message(&r->artifacts[i]->base));
      else
        print_row(r->artifacts[i]);
    }
    shown += r->n_artifacts;
    kiln_free(token);
    token = kiln_strdup(r->next_page_token ? r->next_page_token : "");
    protobuf_c_message_free_unpacked(msg, NULL);
    if (!settings->all || !*token) break;
  }
  if (!rc) {
    if (all) {
      json_object *root = json_object_new_object();
      json_object_object_add(root, "artifacts", all);
      json_object_object_add(root, "next_page_token", json_object_new_string(token));
      all = NULL;
      kiln_client_json_print(root);
    } else {
      if (shown == 0) printf("no artifacts match\n");
      if (*token) fprintf(stderr, "kiln: find: more artifacts: add --page-token %s (or --all)\n", token);
    }
  }
  if (all) json_object_put(all);
  kiln_free(token);
  kiln_free(entries);
  kiln_free(ptrs);
  kiln_cli_strings_free(targets, n_targets);
  kiln_cli_labels_free(labels, n_labels);
  return rc;
}
