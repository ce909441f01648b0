/* The method table: which paths kilnd serves and with what handler. Paths of the
 * contract that this build does not serve reach the server's catch-all and answer
 * UNIMPLEMENTED through kilnd_rpc_unserved(). */
#include "daemon/rpc.h"

#include <string.h>

#include "base/time.h"

#include "grpc/health/v1/health.pb-c.h"
#include "kiln/v1/kiln.pb-c.h"

static const kilnd_method_t methods[] = {
    {"/kiln.v1.Kiln/GetServerInfo", &kiln__v1__get_server_info_request__descriptor,
     kilnd_rpc_get_server_info, false},
    {"/kiln.v1.Kiln/GetStats", &kiln__v1__get_stats_request__descriptor, kilnd_rpc_get_stats,
     false},
    {"/kiln.v1.Kiln/GetCacheStats", &kiln__v1__get_cache_stats_request__descriptor,
     kilnd_rpc_get_cache_stats, true},
    {"/kiln.v1.Kiln/VerifyCache", &kiln__v1__verify_cache_request__descriptor,
     kilnd_rpc_verify_cache, true},
    {"/kiln.v1.Kiln/CollectGarbage", &kiln__v1__collect_garbage_request__descriptor,
     kilnd_rpc_collect_garbage, true},
    {"/kiln.v1.Kiln/PinArtifact", &kiln__v1__pin_artifact_request__descriptor,
     kilnd_rpc_pin_artifact, true},
    {"/kiln.v1.Kiln/UnpinArtifact", &kiln__v1__pin_artifact_request__descriptor,
     kilnd_rpc_unpin_artifact, true},
    {"/grpc.health.v1.Health/Check", &grpc__health__v1__health_check_request__descriptor,
     kilnd_rpc_health_check, false},
};

/* The contract's methods that later issues implement, each with the capability it
 * belongs to, so a client learns why the call failed and what to expect. */
static const struct {
  const char *path;
  const char *capability;
} later[] = {
    {"/kiln.v1.Kiln/Compile", "the compile service"},
    {"/kiln.v1.Kiln/WatchJob", "the compile service"},
    {"/kiln.v1.Kiln/CancelJob", "the compile service"},
    {"/kiln.v1.Kiln/PutSource", "the compile service"},
    {"/kiln.v1.Kiln/GetArtifact", "the artifact cache"},
    {"/kiln.v1.Kiln/FindArtifacts", "the artifact cache"},
    {"/kiln.v1.Kiln/Recompile", "bulk recompile"},
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
