/* `kiln cache stats|verify|gc|pin|unpin`: the artifact cache, through kilnd.
 * verify and gc read the whole store, so they get a long default deadline. Exit
 * status: as every command; `verify` also exits 1 when it found problems, so a
 * cron job notices. */
#include <stdbool.h>
#include <stdio.h>
#include <string.h>

#include "client/cli.h"
#include "client/json.h"
#include "kiln/v1/kiln.pb-c.h"

static void print_size(const char *label, uint64_t bytes) {
  static const char *const units[] = {"B", "KiB", "MiB", "GiB", "TiB"};
  double v = (double)bytes;
  int u = 0;
  while (v >= 1024 && u < 4) {
    v /= 1024;
    u++;
  }
  if (u == 0)
    printf("%-22s %llu B\n", label, (unsigned long long)bytes);
  else
    printf("%-22s %.1f %s (%llu bytes)\n", label, v, units[u], (unsigned long long)bytes);
}

static int stats(const kiln_cli_settings_t *settings, kiln_client_t *client) {
  Kiln__V1__GetCacheStatsRequest req = KILN__V1__GET_CACHE_STATS_REQUEST__INIT;
  ProtobufCMessage *msg = NULL;
  int rc = kiln_cli_call(settings, client, "cache stats", "/kiln.v1.Kiln/GetCacheStats", &req.base,
                         &kiln__v1__get_cache_stats_response__descriptor, &msg);
  if (rc) return rc;
  const Kiln__V1__GetCacheStatsResponse *s = (const Kiln__V1__GetCacheStatsResponse *)msg;
  if (settings->json) {
    kiln_client_json_print(kiln_client_json_from_message(msg));
  } else {
    if (s->path && *s->path) {
      printf("%-22s %s (schema %u)\n", "cache", s->path, s->schema_version); /* an older kilnd */
    } else {
      printf("%-22s schema %u\n", "cache", s->schema_version);
    }
    printf("%-22s %llu (%llu pinned, %llu hits)\n", "artifacts", (unsigned long long)s->artifacts,
           (unsigned long long)s->pinned, (unsigned long long)s->hits);
    print_size("  size", s->artifact_bytes);
    print_size("  on disk", s->artifact_stored_bytes);
    printf("%-22s %llu\n", "sources", (unsigned long long)s->sources);
    print_size("  size", s->source_bytes);
    print_size("  on disk", s->source_stored_bytes);
    printf("%-22s %llu\n", "quarantined", (unsigned long long)s->quarantined);
    if (s->capacity_bytes)
      print_size("capacity", s->capacity_bytes);
    else
      printf("%-22s unlimited\n", "capacity");
  }
  protobuf_c_message_free_unpacked(msg, NULL);
  return KILN_EXIT_OK;
}

static const char *problem_kind(Kiln__V1__CacheProblem__Kind kind) {
  switch (kind) {
    case KILN__V1__CACHE_PROBLEM__KIND__KIND_CORRUPT_BLOB: return "corrupt blob";
    case KILN__V1__CACHE_PROBLEM__KIND__KIND_MISSING_BLOB: return "missing blob";
    case KILN__V1__CACHE_PROBLEM__KIND__KIND_ORPHAN_BLOB: return "orphan blob";
    case KILN__V1__CACHE_PROBLEM__KIND__KIND_STRAY_FILE: return "stray file";
    case KILN__V1__CACHE_PROBLEM__KIND__KIND_DAMAGED_INDEX: return "damaged index";
    default: return "problem";
  }
}

static int verify(const kiln_cli_settings_t *settings, kiln_client_t *client) {
  Kiln__V1__VerifyCacheRequest req = KILN__V1__VERIFY_CACHE_REQUEST__INIT;
  req.dry_run = settings->dry_run;
  ProtobufCMessage *msg = NULL;
  kiln_client_set_timeout(client, kiln_cli_timeout_ms(settings, true));
  int rc = kiln_cli_call(settings, client, "cache verify", "/kiln.v1.Kiln/VerifyCache", &req.base,
                         &kiln__v1__verify_cache_response__descriptor, &msg);
  if (rc) return rc;
  const Kiln__V1__VerifyCacheResponse *r = (const Kiln__V1__VerifyCacheResponse *)msg;
  if (settings->json) {
    kiln_client_json_print(kiln_client_json_from_message(msg));
  } else {
    printf("verified %llu blob(s), %llu bytes, in %llu ms: %zu problem(s)%s\n",
           (unsigned long long)r->blobs_checked, (unsigned long long)r->bytes_checked,
           (unsigned long long)r->duration_ms, r->n_problems,
           settings->dry_run ? " (dry run: nothing changed)" : "");
    for (size_t i = 0; i < r->n_problems; i++) {
      const Kiln__V1__CacheProblem *p = r->problems[i];
      printf("  %-13s %s %s%s\n", problem_kind(p->kind), *p->digest ? p->digest : "-", p->detail,
             p->repaired ? "" : " (not repaired)");
    }
  }
  rc = r->n_problems ? KILN_EXIT_FAILED : KILN_EXIT_OK;
  protobuf_c_message_free_unpacked(msg, NULL);
  return rc;
}

static int gc(const kiln_cli_settings_t *settings, kiln_client_t *client) {
  Kiln__V1__CollectGarbageRequest req = KILN__V1__COLLECT_GARBAGE_REQUEST__INIT;
  req.max_bytes = settings->max_bytes;
  ProtobufCMessage *msg = NULL;
  kiln_client_set_timeout(client, kiln_cli_timeout_ms(settings, true));
  int rc = kiln_cli_call(settings, client, "cache gc", "/kiln.v1.Kiln/CollectGarbage", &req.base,
                         &kiln__v1__collect_garbage_response__descriptor, &msg);
  if (rc) return rc;
  const Kiln__V1__CollectGarbageResponse *r = (const Kiln__V1__CollectGarbageResponse *)msg;
  if (settings->json) {
    kiln_client_json_print(kiln_client_json_from_message(msg));
  } else {
    printf("evicted %llu artifact(s) and %llu source(s), freed %llu bytes; %llu bytes on disk%s\n",
           (unsigned long long)r->artifacts_evicted, (unsigned long long)r->sources_evicted,
           (unsigned long long)r->bytes_freed, (unsigned long long)r->bytes_stored,
           r->target_unreachable ? " (target not reached: the rest is pinned or in use)" : "");
  }
  protobuf_c_message_free_unpacked(msg, NULL);
  return KILN_EXIT_OK;
}

static int pin(const kiln_cli_settings_t *settings, kiln_client_t *client, const char *digest, bool pinned) {
  Kiln__V1__PinArtifactRequest req = KILN__V1__PIN_ARTIFACT_REQUEST__INIT;
  req.digest = (char *)digest;
  ProtobufCMessage *msg = NULL;
  int rc = kiln_cli_call(settings, client, pinned ? "cache pin" : "cache unpin",
                         pinned ? "/kiln.v1.Kiln/PinArtifact" : "/kiln.v1.Kiln/UnpinArtifact", &req.base,
                         &kiln__v1__pin_artifact_response__descriptor, &msg);
  if (rc) return rc;
  const Kiln__V1__PinArtifactResponse *r = (const Kiln__V1__PinArtifactResponse *)msg;
  if (settings->json) {
    kiln_client_json_print(kiln_client_json_from_message(msg));
  } else {
    printf("%s %llu artifact(s)\n", pinned ? "pinned" : "unpinned", (unsigned long long)r->artifacts);
  }
  protobuf_c_message_free_unpacked(msg, NULL);
  return KILN_EXIT_OK;
}

int kiln_cli_cache(const kiln_cli_settings_t *settings, kiln_client_t *client, int argc, const char **argv) {
  const char *sub = argc > 0 ? argv[0] : "";
  int want_args = (strcmp(sub, "pin") == 0 || strcmp(sub, "unpin") == 0) ? 2 : 1;
  if (argc == 0 || (strcmp(sub, "stats") && strcmp(sub, "verify") && strcmp(sub, "gc") &&
                    strcmp(sub, "pin") && strcmp(sub, "unpin"))) {
    fprintf(stderr, "kiln: cache needs one of: stats, verify, gc, pin DIGEST, unpin DIGEST\n");
    return KILN_EXIT_USAGE;
  }
  if (argc != want_args) {
    fprintf(stderr,
            want_args == 2 ? "kiln: cache %s needs one artifact digest or cache key\n"
                           : "kiln: cache %s takes no arguments\n",
            sub);
    return KILN_EXIT_USAGE;
  }
  if (strcmp(sub, "stats") == 0) return stats(settings, client);
  if (strcmp(sub, "verify") == 0) return verify(settings, client);
  if (strcmp(sub, "gc") == 0) return gc(settings, client);
  return pin(settings, client, argv[1], strcmp(sub, "pin") == 0);
}
