/* grpc.health.v1.Health/Check, as stock health checkers expect: the empty service
 * name and "kiln.v1.Kiln" are SERVING (NOT_SERVING once draining); any other
 * service name is NOT_FOUND. */
#include <string.h>

#include "daemon/rpc.h"
#include "grpc/health/v1/health.pb-c.h"

kiln_status_t kilnd_rpc_health_check(const kilnd_rpc_env_t *env, const kilnd_call_ctx_t *call,
                                     const ProtobufCMessage *request, ProtobufCMessage **out_response) {
  kiln_arena_t *arena = call->arena;
  const Grpc__Health__V1__HealthCheckRequest *req = (const Grpc__Health__V1__HealthCheckRequest *)request;
  const char *service = req->service ? req->service : "";
  if (*service && strcmp(service, "kiln.v1.Kiln") != 0) {
    return KILN_STATUS(KILN_STATUS_NOT_FOUND,
                       "unknown service '%s': kilnd reports health for \"\" and \"kiln.v1.Kiln\"", service);
  }
  Grpc__Health__V1__HealthCheckResponse *resp = kiln_arena_alloc(arena, sizeof *resp);
  grpc__health__v1__health_check_response__init(resp);
  resp->status = env->draining ? GRPC__HEALTH__V1__HEALTH_CHECK_RESPONSE__SERVING_STATUS__NOT_SERVING
                               : GRPC__HEALTH__V1__HEALTH_CHECK_RESPONSE__SERVING_STATUS__SERVING;
  *out_response = &resp->base;
  return NULL;
}
