/* `kiln stats`: GetStats: uptime and calls by method and status. */
#include <stdio.h>

#include "base/buf.h"
#include "client/cli.h"
#include "client/json.h"
#include "kiln/v1/kiln.pb-c.h"

int kiln_cli_stats(const kiln_cli_settings_t *settings, kiln_client_t *client, int argc, const char **argv) {
  (void)argv;
  if (argc > 0) {
    fprintf(stderr, "kiln: stats takes no arguments\n");
    return KILN_EXIT_USAGE;
  }
  Kiln__V1__GetStatsRequest req = KILN__V1__GET_STATS_REQUEST__INIT;
  ProtobufCMessage *msg = NULL;
  int rc = kiln_cli_call(settings, client, "stats", "/kiln.v1.Kiln/GetStats", &req.base,
                         &kiln__v1__get_stats_response__descriptor, &msg);
  if (rc) return rc;
  const Kiln__V1__GetStatsResponse *stats = (const Kiln__V1__GetStatsResponse *)msg;
  if (settings->json) {
    kiln_client_json_print(kiln_client_json_from_message(msg));
  } else {
    printf("uptime %.1fs, %llu call(s) in flight\n", (double)stats->uptime_ms / 1000.0,
           (unsigned long long)stats->calls_in_flight);
    printf("%-36s %8s  %s\n", "METHOD", "CALLS", "BY STATUS");
    for (size_t i = 0; i < stats->n_methods; i++) {
      const Kiln__V1__MethodStats *m = stats->methods[i];
      kiln_buf_t codes;
      kiln_buf_init(&codes);
      for (size_t k = 0; k < m->n_by_status; k++) {
        kiln_buf_appendf(&codes, "%s%s=%llu", k ? " " : "", m->by_status[k]->code_name,
                         (unsigned long long)m->by_status[k]->count);
      }
      printf("%-36s %8llu  %s\n", m->method, (unsigned long long)m->total, codes.data);
      kiln_buf_deinit(&codes);
    }
    const Kiln__V1__JobStats *j = stats->jobs;
    if (j) {
      printf(
          "jobs       %llu submitted: %llu done, %llu failed, %llu cancelled; %llu queued, %llu running "
          "now\n",
          (unsigned long long)j->submitted, (unsigned long long)j->done, (unsigned long long)j->failed,
          (unsigned long long)j->cancelled, (unsigned long long)j->queued, (unsigned long long)j->running);
      printf(
          "compiles   %llu target(s) compiled (%.1f s in total), %llu failed, %llu merged into identical "
          "work, "
          "%llu fused with queued work of the same model\n",
          (unsigned long long)j->targets_compiled, (double)j->compile_ms_total / 1000.0,
          (unsigned long long)j->targets_failed, (unsigned long long)j->merged_requests,
          (unsigned long long)j->tasks_fused);
      printf("workers    %llu, %llu busy, %llu restart(s)\n", (unsigned long long)j->workers,
             (unsigned long long)j->workers_busy, (unsigned long long)j->worker_restarts);
    }
    const Kiln__V1__CacheStats *c = stats->cache;
    if (c) {
      printf(
          "cache      %llu hit(s), %llu miss(es); %llu artifact(s), %llu bytes stored, %llu bytes served\n",
          (unsigned long long)c->hits, (unsigned long long)c->misses, (unsigned long long)c->artifacts,
          (unsigned long long)c->bytes_stored, (unsigned long long)c->bytes_served);
    }
  }
  protobuf_c_message_free_unpacked(msg, NULL);
  return KILN_EXIT_OK;
}
