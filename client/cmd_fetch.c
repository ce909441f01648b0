/* `kiln fetch DIGEST [-o FILE]` and `kiln fetch --source DIGEST|FILE --target T
 * [--flag F]... [-o FILE]`: GetArtifact by digest, or by what the artifact is
 * compiled from (the cache key this kilnd's current compiler would use). The file
 * is written atomically and only after its bytes hash to the artifact's digest; an
 * interrupted fetch leaves a partial file that the next fetch to the same FILE
 * resumes (see client/transfer.h). Default FILE: <digest>.vmfb by digest,
 * <canonical target>.vmfb by source and target. The default deadline is long
 * (1 h): a VMFB may be large. */
#include <stdio.h>
#include <string.h>

#include "base/alloc.h"
#include "client/cli.h"
#include "client/json.h"
#include "client/transfer.h"
#include "kiln/v1/kiln.pb-c.h"

static const char usage[] =
    "fetch DIGEST [-o FILE]  |  kiln fetch --source DIGEST|FILE --target T [--flag F]... [-o FILE]";

static int usage_error(const char *what, const char *arg) {
  fprintf(stderr, "kiln: fetch: %s%s\nusage: kiln %s\n", what, arg, usage);
  return KILN_EXIT_USAGE;
}

int kiln_cli_fetch(const kiln_cli_settings_t *settings, kiln_client_t *client, int argc, const char **argv) {
  int rc = kiln_cli_expect_args("fetch", argc, 0, 1, usage);
  if (rc) return rc;
  char **targets = NULL;
  size_t n_targets = 0;
  kiln_cli_targets_split(&settings->target, &targets, &n_targets);
  kiln_cli_artifact_ref_t ref;
  memset(&ref, 0, sizeof ref);
  kiln_digest_hex_t source;
  if (argc == 1) {
    if (settings->source || n_targets) {
      rc = usage_error("give either an artifact DIGEST or --source and --target, not both", "");
    } else if (!kiln_digest_is_valid_hex(argv[0])) {
      rc = usage_error("not an artifact digest (64 lowercase hex characters, no prefix): ", argv[0]);
    }
    ref.digest = argv[0];
  } else if (!settings->source || n_targets != 1) {
    rc = usage_error(settings->source ? "--source needs exactly one --target"
                                      : "give an artifact DIGEST, or --source and --target",
                     "");
  } else {
    kiln_status_t status = kiln_cli_source_resolve(settings->source, &source);
    if (status) {
      fprintf(stderr, "kiln: fetch: --source %s\n", kiln_status_message(status));
      kiln_status_free(status);
      rc = KILN_EXIT_USAGE;
    }
    ref.source_digest = source.text;
    ref.target = targets[0];
    ref.flags = (const char *const *)settings->flag.items;
    ref.n_flags = settings->flag.count;
  }
  if (rc) {
    kiln_cli_strings_free(targets, n_targets);
    return rc;
  }
  kiln_client_set_timeout(client, kiln_cli_timeout_ms(settings, true));
  kiln_client_set_route(client, ref.source_digest); /* by digest alone there is no model to route by */
  Kiln__V1__ArtifactChunk *meta = NULL;
  char *path = NULL;
  uint64_t resumed = 0;
  kiln_status_t status = kiln_cli_artifact_download(client, &ref, settings->output, &meta, &path, &resumed);
  kiln_cli_strings_free(targets, n_targets);
  if (status) return kiln_cli_report(settings, "fetch", kiln_client_timeout(client), status);
  const Kiln__V1__ArtifactMetadata *m = meta->metadata;
  if (settings->json) {
    json_object *obj = kiln_client_json_from_message(&m->base);
    json_object_object_add(obj, "file", json_object_new_string(path));
    json_object_object_add(obj, "resumed_from", json_object_new_uint64(resumed));
    kiln_client_json_print(obj);
  } else {
    printf("wrote %s: %llu bytes, %s, digest %s", path, (unsigned long long)m->size_bytes,
           m->canonical_target, m->digest);
    if (resumed) printf(" (resumed at byte %llu)", (unsigned long long)resumed);
    printf("\n");
  }
  protobuf_c_message_free_unpacked(&meta->base, NULL);
  kiln_free(path);
  return KILN_EXIT_OK;
}
