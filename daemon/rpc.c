/* The method table: which paths kilnd serves and with what handler. Paths of the
 * contract that this build does not serve reach the server's catch-all and answer
 * UNIMPLEMENTED through kilnd_rpc_unserved(). */
#include "daemon/rpc.h"

#include <string.h>

#include "base/log.h"
#include "base/time.h"

#include "grpc/health/v1/health.pb-c.h"
#include "kiln/v1/kiln.pb-c.h"

/* One table row per served method. UNARY(path, request type, handler, offload);
 * STREAM(path, request type, kind, entry point). */
#define UNARY(path, request, handler, offload) \
  {path, &request##__descriptor, handler, offload, false, KILND_METHOD_UNARY, NULL}
#define UNARY_TRY_ON_LOOP(path, request, handler) \
  {path, &request##__descriptor, handler, true, true, KILND_METHOD_UNARY, NULL}
#define STREAM(path, request, kind, entry) {path, &request##__descriptor, NULL, false, false, kind, entry}

static const kilnd_method_t methods[] = {
    UNARY_TRY_ON_LOOP("/kiln.v1.Kiln/GetServerInfo", kiln__v1__get_server_info_request,
                      kilnd_rpc_get_server_info),
    UNARY("/kiln.v1.Kiln/GetStats", kiln__v1__get_stats_request, kilnd_rpc_get_stats, false),
    UNARY("/kiln.v1.Kiln/GetCacheStats", kiln__v1__get_cache_stats_request,
          kilnd_rpc_get_cache_stats, true),
    UNARY("/kiln.v1.Kiln/VerifyCache", kiln__v1__verify_cache_request, kilnd_rpc_verify_cache,
          true),
    UNARY("/kiln.v1.Kiln/CollectGarbage", kiln__v1__collect_garbage_request,
          kilnd_rpc_collect_garbage, true),
    UNARY("/kiln.v1.Kiln/PinArtifact", kiln__v1__pin_artifact_request, kilnd_rpc_pin_artifact,
          true),
    UNARY("/kiln.v1.Kiln/UnpinArtifact", kiln__v1__pin_artifact_request,
          kilnd_rpc_unpin_artifact, true),
    UNARY("/grpc.health.v1.Health/Check", grpc__health__v1__health_check_request,
          kilnd_rpc_health_check, false),
    UNARY("/kiln.v1.Kiln/FindArtifacts", kiln__v1__find_artifacts_request,
          kilnd_rpc_find_artifacts, true),
    STREAM("/kiln.v1.Kiln/GetArtifact", kiln__v1__get_artifact_request,
           KILND_METHOD_SERVER_STREAMING, kilnd_rpc_get_artifact),
    STREAM("/kiln.v1.Kiln/PutSource", kiln__v1__put_source_chunk, KILND_METHOD_CLIENT_STREAMING,
           kilnd_rpc_put_source),
    UNARY_TRY_ON_LOOP("/kiln.v1.Kiln/Compile", kiln__v1__compile_request, kilnd_rpc_compile),
    UNARY("/kiln.v1.Kiln/CancelJob", kiln__v1__cancel_job_request, kilnd_rpc_cancel_job, false),
    STREAM("/kiln.v1.Kiln/WatchJob", kiln__v1__watch_job_request, KILND_METHOD_SERVER_STREAMING,
           kilnd_rpc_watch_job),
    STREAM("/kiln.v1.Kiln/Recompile", kiln__v1__recompile_request, KILND_METHOD_BIDI_STREAMING,
           kilnd_rpc_recompile),
};

/* The contract's methods that later issues implement, each with the capability it
 * belongs to, so a client learns why the call failed and what to expect. */
static const struct {
  const char *path;
  const char *capability;
} later[] = {
    {"/grpc.health.v1.Health/Watch", "streaming health checks"},
};

static const char *const known_paths[] = {
    "/kiln.v1.Kiln/GetServerInfo", "/kiln.v1.Kiln/GetStats",   "/grpc.health.v1.Health/Check",
    "/kiln.v1.Kiln/Compile",       "/kiln.v1.Kiln/WatchJob",   "/kiln.v1.Kiln/CancelJob",
    "/kiln.v1.Kiln/PutSource",     "/kiln.v1.Kiln/GetArtifact", "/kiln.v1.Kiln/FindArtifacts",
    "/kiln.v1.Kiln/Recompile",     "/grpc.health.v1.Health/Watch", "/kiln.v1.Kiln/GetCacheStats",
    "/kiln.v1.Kiln/VerifyCache",   "/kiln.v1.Kiln/CollectGarbage", "/kiln.v1.Kiln/PinArtifact",
    "/kiln.v1.Kiln/UnpinArtifact", NULL,
};

bool kilnd_call_should_stop(const kilnd_call_ctx_t *call) {
  if (call->stopping && atomic_load(call->stopping)) return true;
  return kiln_time_monotonic_ns() >= call->deadline_monotonic_ns;
}

const kilnd_method_t *kilnd_rpc_methods(size_t *out_count) {
  *out_count = sizeof methods / sizeof methods[0];
  return methods;
}

const char *const *kilnd_rpc_known_paths(void) { return known_paths; }

kiln_status_t kilnd_rpc_unserved(const char *path) {
  for (size_t i = 0; i < sizeof later / sizeof later[0]; i++) {
    if (strcmp(later[i].path, path) == 0) {
      return KILN_STATUS(KILN_STATUS_UNIMPLEMENTED,
                         "%s is part of the kiln.v1 contract but kilnd %s does not serve it "
                         "(it comes with %s)",
                         path, KILN_VERSION, later[i].capability);
    }
  }
  return KILN_STATUS(KILN_STATUS_UNIMPLEMENTED,
                     "unknown method '%s': kilnd serves the kiln.v1.Kiln and "
                     "grpc.health.v1.Health services",
                     path);
}

kiln_status_t kilnd_label_check(const char *what, const char *key, const char *value) {
  size_t len = strlen(key);
  bool ok = len >= 1 && len <= KILND_LABEL_KEY_MAX;
  for (size_t i = 0; ok && i < len; i++) {
    char c = key[i];
    bool alnum = (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9');
    ok = alnum || (i > 0 && (c == '.' || c == '_' || c == '/' || c == '-'));
  }
  if (!ok) {
    return KILN_STATUS(KILN_STATUS_INVALID_ARGUMENT,
                       "%s: label key '%.80s%s' is not 1..%d bytes of [a-z0-9._/-] starting with a letter or digit",
                       what, key, len > 80 ? "..." : "", KILND_LABEL_KEY_MAX);
  }
  if (strlen(value) > KILND_LABEL_VALUE_MAX) {
    return KILN_STATUS(KILN_STATUS_INVALID_ARGUMENT, "%s: the value of label '%s' is %zu bytes, at most %d", what,
                       key, strlen(value), KILND_LABEL_VALUE_MAX);
  }
  return NULL;
}
