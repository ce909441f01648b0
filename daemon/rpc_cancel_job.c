/* CancelJob: on the loop; the job engine does the work (kilnd_jobs_cancel). */
#include <string.h>

#include "daemon/jobs.h"
#include "daemon/rpc.h"
#include "kiln/v1/kiln.pb-c.h"

kiln_status_t kilnd_rpc_cancel_job(const kilnd_rpc_env_t *env, const kilnd_call_ctx_t *call,
                                   const ProtobufCMessage *request, ProtobufCMessage **out_response) {
  const Kiln__V1__CancelJobRequest *req = (const Kiln__V1__CancelJobRequest *)request;
  if (!env->jobs) return KILN_STATUS(KILN_STATUS_UNAVAILABLE, "kilnd is starting: no job engine yet");
  KILN_RETURN_IF_ERROR(kilnd_id_check("job_id", req->job_id, strlen(req->job_id)));
  if (strlen(req->reason) > 1024)
    return KILN_STATUS(KILN_STATUS_INVALID_ARGUMENT, "reason is over 1024 bytes");
  kilnd_job_state_t state = KILND_JOB_QUEUED;
  bool cancelled = false;
  KILN_RETURN_IF_ERROR(kilnd_jobs_cancel(env->jobs, req->job_id, req->reason, &state, &cancelled));
  Kiln__V1__CancelJobResponse *resp = kiln_arena_alloc(call->arena, sizeof *resp);
  kiln__v1__cancel_job_response__init(resp);
  resp->state = (Kiln__V1__JobState)state;
  resp->cancelled = cancelled;
  *out_response = &resp->base;
  return NULL;
}
