/* The method table: every method of the contracts, the role it needs, and how
 * kilnd serves it. Paths this build does not serve reach the server's catch-all
 * and answer UNIMPLEMENTED through kilnd_rpc_unserved(). */
#include "daemon/rpc.h"

#include <string.h>

#include "base/log.h"
#include "base/time.h"

#include "grpc/health/v1/health.pb-c.h"
#include "kiln/v1/kiln.pb-c.h"

/* One row per method of the two contracts (kiln.v1.Kiln, grpc.health.v1.Health),
 * served or not: the path, the request type, how its messages flow, the role a
 * caller needs (auth.c), and either how it is served or, for a method this build
 * does not serve, the capability it comes with. The unit tests check the rows
 * against the contracts' descriptors. */
#define ROW(path, request, role) path, &request##__descriptor, role
/* A unary handler on the loop thread. */
#define ON_LOOP(handler) handler, false, false, KILND_METHOD_UNARY, NULL, NULL
/* A unary handler on libuv's thread pool. */
#define OFFLOAD(handler) handler, true, false, KILND_METHOD_UNARY, NULL, NULL
/* A unary handler tried on the loop first, on the pool when it asks to be. */
#define TRY_ON_LOOP(handler) handler, true, true, KILND_METHOD_UNARY, NULL, NULL
/* A streaming method's entry point, `kind` its contract's `stream` keywords. */
#define STREAM(kind, entry) NULL, false, false, kind, entry, NULL
/* A method of the contract this build does not serve. */
#define UNSERVED(kind, capability) NULL, false, false, kind, NULL, capability

static const kilnd_method_t methods[] = {
    {ROW("/kiln.v1.Kiln/GetServerInfo", kiln__v1__get_server_info_request, KILND_ROLE_READ),
     TRY_ON_LOOP(kilnd_rpc_get_server_info)},
    {ROW("/kiln.v1.Kiln/GetStats", kiln__v1__get_stats_request, KILND_ROLE_READ),
     ON_LOOP(kilnd_rpc_get_stats)},
    {ROW("/kiln.v1.Kiln/GetCacheStats", kiln__v1__get_cache_stats_request, KILND_ROLE_READ),
     OFFLOAD(kilnd_rpc_get_cache_stats)},
    {ROW("/kiln.v1.Kiln/VerifyCache", kiln__v1__verify_cache_request, KILND_ROLE_ADMIN),
     OFFLOAD(kilnd_rpc_verify_cache)},
    {ROW("/kiln.v1.Kiln/CollectGarbage", kiln__v1__collect_garbage_request, KILND_ROLE_ADMIN),
     OFFLOAD(kilnd_rpc_collect_garbage)},
    {ROW("/kiln.v1.Kiln/PinArtifact", kiln__v1__pin_artifact_request, KILND_ROLE_ADMIN),
     OFFLOAD(kilnd_rpc_pin_artifact)},
    {ROW("/kiln.v1.Kiln/UnpinArtifact", kiln__v1__pin_artifact_request, KILND_ROLE_ADMIN),
     OFFLOAD(kilnd_rpc_unpin_artifact)},
    {ROW("/grpc.health.v1.Health/Check", grpc__health__v1__health_check_request, KILND_ROLE_NONE),
     ON_LOOP(kilnd_rpc_health_check)},
    {ROW("/grpc.health.v1.Health/Watch", grpc__health__v1__health_check_request, KILND_ROLE_NONE),
     UNSERVED(KILND_METHOD_SERVER_STREAMING, "streaming health checks")},
    {ROW("/kiln.v1.Kiln/FindArtifacts", kiln__v1__find_artifacts_request, KILND_ROLE_READ),
     OFFLOAD(kilnd_rpc_find_artifacts)},
    {ROW("/kiln.v1.Kiln/GetArtifact", kiln__v1__get_artifact_request, KILND_ROLE_READ),
     STREAM(KILND_METHOD_SERVER_STREAMING, kilnd_rpc_get_artifact)},
    {ROW("/kiln.v1.Kiln/PutSource", kiln__v1__put_source_chunk, KILND_ROLE_SUBMIT),
     STREAM(KILND_METHOD_CLIENT_STREAMING, kilnd_rpc_put_source)},
    {ROW("/kiln.v1.Kiln/Compile", kiln__v1__compile_request, KILND_ROLE_SUBMIT),
     TRY_ON_LOOP(kilnd_rpc_compile)},
    {ROW("/kiln.v1.Kiln/CancelJob", kiln__v1__cancel_job_request, KILND_ROLE_SUBMIT),
     ON_LOOP(kilnd_rpc_cancel_job)},
    {ROW("/kiln.v1.Kiln/WatchJob", kiln__v1__watch_job_request, KILND_ROLE_READ),
     STREAM(KILND_METHOD_SERVER_STREAMING, kilnd_rpc_watch_job)},
    {ROW("/kiln.v1.Kiln/Recompile", kiln__v1__recompile_request, KILND_ROLE_SUBMIT),
     STREAM(KILND_METHOD_BIDI_STREAMING, kilnd_rpc_recompile)},
};

bool kilnd_call_should_stop(const kilnd_call_ctx_t *call) {
  if (call->stopping && atomic_load(call->stopping)) return true;
  return kiln_time_monotonic_ns() >= call->deadline_monotonic_ns;
}

const kilnd_method_t *kilnd_rpc_methods(size_t *out_count) {
  *out_count = sizeof methods / sizeof methods[0];
  return methods;
}

const kilnd_method_t *kilnd_rpc_method_find(const char *path) {
  for (size_t i = 0; i < sizeof methods / sizeof methods[0]; i++) {
    if (strcmp(methods[i].path, path) == 0) return &methods[i];
  }
  return NULL;
}

kiln_status_t kilnd_rpc_unserved(const char *path) {
  const kilnd_method_t *m = kilnd_rpc_method_find(path);
  if (m && m->capability) {
    /* "/grpc.health.v1.Health/Watch" -> "grpc.health.v1.Health" */
    const char *service = path + 1;
    int service_len = (int)(strchr(service, '/') - service);
    return KILN_STATUS(KILN_STATUS_UNIMPLEMENTED,
                       "%s is part of the %.*s contract but kilnd %s does not serve it (it comes with %s)",
                       path, service_len, service, KILN_VERSION, m->capability);
  }
  return KILN_STATUS(KILN_STATUS_UNIMPLEMENTED,
                     "unknown method '%s': kilnd serves the kiln.v1.Kiln and grpc.health.v1.Health services",
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
    return KILN_STATUS(
        KILN_STATUS_INVALID_ARGUMENT,
        "%s: label key '%.80s%s' is not 1..%d bytes of [a-z0-9._/-] starting with a letter or digit", what,
        key, len > 80 ? "..." : "", KILND_LABEL_KEY_MAX);
  }
  if (strlen(value) > KILND_LABEL_VALUE_MAX) {
    return KILN_STATUS(KILN_STATUS_INVALID_ARGUMENT, "%s: the value of label '%s' is %zu bytes, at most %d",
                       what, key, strlen(value), KILND_LABEL_VALUE_MAX);
  }
  return NULL;
}
