/* `kiln info`: GetServerInfo, as a summary for people or JSON for machines. */
#include <stdio.h>
#include <string.h>

#include "base/buf.h"
#include "base/time.h"
#include "client/cli.h"
#include "client/json.h"
#include "kiln/v1/kiln.pb-c.h"

static const char *kind_name(Kiln__V1__TargetKind kind) {
  switch (kind) {
    case KILN__V1__TARGET_KIND__TARGET_KIND_CUDA: return "cuda";
    case KILN__V1__TARGET_KIND__TARGET_KIND_HIP: return "hip";
    case KILN__V1__TARGET_KIND__TARGET_KIND_VULKAN: return "vulkan";
    case KILN__V1__TARGET_KIND__TARGET_KIND_CPU: return "cpu";
    default: return "?";
  }
}

static void format_duration(kiln_buf_t *out, int64_t ms) {
  int64_t s = ms / 1000;
  if (s < 60)
    kiln_buf_appendf(out, "%lld.%llds", (long long)s, (long long)(ms % 1000) / 100);
  else if (s < 3600)
    kiln_buf_appendf(out, "%lldm%02llds", (long long)s / 60, (long long)s % 60);
  else
    kiln_buf_appendf(out, "%lldh%02lldm", (long long)s / 3600, (long long)(s % 3600) / 60);
}

int kiln_cli_info(const kiln_cli_settings_t *settings, kiln_client_t *client, int argc, const char **argv) {
  (void)argv;
  if (argc > 0) {
    fprintf(stderr, "kiln: info takes no arguments\n");
    return KILN_EXIT_USAGE;
  }
  Kiln__V1__GetServerInfoRequest req = KILN__V1__GET_SERVER_INFO_REQUEST__INIT;
  ProtobufCMessage *msg = NULL;
  int rc = kiln_cli_call(settings, client, "info", "/kiln.v1.Kiln/GetServerInfo", &req.base,
                         &kiln__v1__get_server_info_response__descriptor, &msg);
  if (rc) return rc;
  const Kiln__V1__GetServerInfoResponse *info = (const Kiln__V1__GetServerInfoResponse *)msg;

  if (settings->json) {
    json_object *obj = kiln_client_json_from_message(msg);
    json_object_object_add(obj, "address", json_object_new_string(kiln_client_address(client)));
    kiln_client_json_print(obj);
  } else {
    kiln_buf_t up;
    kiln_buf_init(&up);
    int64_t up_ms = kiln_time_unix_ms() - info->start_time_unix_ms;
    format_duration(&up, up_ms > 0 ? up_ms : 0); /* clocks of two hosts may disagree */
    printf("kilnd %s at %s (host %s, up %s)\n", info->kiln_version, kiln_client_address(client),
           info->hostname, up.data);
    kiln_buf_deinit(&up);
    if (info->compiler) {
      /* Empty LLVM and MLIR versions: an external compiler, or no worker of
       * kilnd's had said hello in time (kilnd links no compiler to ask). */
      const Kiln__V1__CompilerIdentity *c = info->compiler;
      printf("compiler   %s %s", c->name, c->version);
      if (*c->llvm_version) printf(" (LLVM %s, MLIR %s)", c->llvm_version, c->mlir_version);
      if (!*c->llvm_version && !strcmp(c->name, "kiln-mlir")) printf(" (no compile worker ready yet)");
      printf("\n");
    }
    printf("artifacts  HAL module version %u (HAL 0.%u), VM bytecode %u.%u\n", info->hal_module_version,
           info->hal_module_version, info->vm_bytecode_version_major, info->vm_bytecode_version_minor);
    printf("messages   up to %llu bytes\n", (unsigned long long)info->max_message_bytes);
    printf("targets    %zu\n", info->n_targets);
    printf("  %-15s %-7s %-20s %s\n", "ID", "KIND", "FORMAT", "ALIASES");
    for (size_t i = 0; i < info->n_targets; i++) {
      const Kiln__V1__TargetInfo *t = info->targets[i];
      kiln_buf_t aliases;
      kiln_buf_init(&aliases);
      for (size_t a = 0; a < t->n_aliases; a++) {
        kiln_buf_appendf(&aliases, "%s%s", a ? ", " : "", t->aliases[a]);
      }
      printf("  %-15s %-7s %-20s %s\n", t->id, kind_name(t->kind), t->executable_format, aliases.data);
      kiln_buf_deinit(&aliases);
    }
  }
  protobuf_c_message_free_unpacked(msg, NULL);
  return KILN_EXIT_OK;
}
