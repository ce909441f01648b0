/* `kiln health`: the standard grpc.health.v1 Check. Exit 0 when SERVING, 5 when
 * kilnd answers but is not serving, 3 when it cannot be reached. */
#include <stdio.h>

#include "client/cli.h"
#include "client/json.h"
#include "grpc/health/v1/health.pb-c.h"

int kiln_cli_health(const kiln_cli_settings_t *settings, kiln_client_t *client, int argc, const char **argv) {
  (void)argv;
  if (argc > 0) {
    fprintf(stderr, "kiln: health takes no arguments (use --service NAME)\n");
    return KILN_EXIT_USAGE;
  }
  Grpc__Health__V1__HealthCheckRequest req = GRPC__HEALTH__V1__HEALTH_CHECK_REQUEST__INIT;
  req.service = settings->service ? settings->service : (char *)"";
  ProtobufCMessage *msg = NULL;
  int rc = kiln_cli_call(settings, client, "health", "/grpc.health.v1.Health/Check", &req.base,
                         &grpc__health__v1__health_check_response__descriptor, &msg);
  if (rc) return rc;
  const Grpc__Health__V1__HealthCheckResponse *resp = (const Grpc__Health__V1__HealthCheckResponse *)msg;
  int serving = resp->status == GRPC__HEALTH__V1__HEALTH_CHECK_RESPONSE__SERVING_STATUS__SERVING;
  if (settings->json) {
    kiln_client_json_print(kiln_client_json_from_message(msg));
  } else {
    const ProtobufCEnumValue *v = protobuf_c_enum_descriptor_get_value(
        &grpc__health__v1__health_check_response__serving_status__descriptor, (int)resp->status);
    printf("%s\n", v ? v->name : "UNKNOWN");
  }
  protobuf_c_message_free_unpacked(msg, NULL);
  return serving ? KILN_EXIT_OK : KILN_EXIT_NOT_SERVING;
}
