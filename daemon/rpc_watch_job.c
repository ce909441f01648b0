/* WatchJob: server-streaming on the loop; the job engine registers the stream
 * as a watcher and sends it the job's events (kilnd_jobs_watch). */
#include <string.h>

#include "daemon/jobs.h"
#include "daemon/rpc.h"
#include "daemon/stream.h"
#include "kiln/v1/kiln.pb-c.h"

void kilnd_rpc_watch_job(const kilnd_rpc_env_t *env, kilnd_stream_t *stream,
                         const ProtobufCMessage *request) {
  const Kiln__V1__WatchJobRequest *req = (const Kiln__V1__WatchJobRequest *)request;
  if (!env->jobs) {
    kilnd_stream_finish(stream, KILN_STATUS(KILN_STATUS_UNAVAILABLE, "kilnd is starting: no job engine yet"));
    return;
  }
  kiln_status_t bad = kilnd_id_check("job_id", req->job_id, strlen(req->job_id));
  if (bad) {
    kilnd_stream_finish(stream, bad);
    return;
  }
  kiln_status_t st = kilnd_jobs_watch(env->jobs, req->job_id, req->from_start, req->after_sequence, stream);
  if (st) kilnd_stream_finish(stream, st);
}
