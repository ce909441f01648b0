/* The job engine's one seam: the worker pool it drives.
 *
 * kilnd_jobs_create drives the real pool (daemon/workers.h). The engine's unit
 * test drives a fake one through kilnd_jobs_create_on, so that it can decide when
 * each task starts, progresses and ends, on a plain libuv loop with no worker
 * processes and no gRPC server. The operations are those of workers.h, with the
 * same contracts (loop thread only; `submit` reports KILND_TASK_STARTED from
 * inside the call); the pool reports every task event to kilnd_jobs_task_event.
 */
#ifndef KILN_DAEMON_JOBS_SEAM_H
#define KILN_DAEMON_JOBS_SEAM_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <uv.h>

#include "base/status.h"
#include "cache/cache.h"
#include "daemon/workers.h"

struct kilnd_jobs_s;

typedef struct kilnd_jobs_pool_s {
  void *self; /* the pool, passed to every operation */
  size_t (*idle)(void *self);
  kiln_status_t (*submit)(void *self, const kilnd_task_t *task);
  void (*cancel)(void *self, uint64_t task_id);
  void (*stats)(void *self, kilnd_workers_stats_t *out_stats);
  const char *(*compiler)(void *self);
  bool (*identity)(void *self, kilnd_compiler_info_t *out_info);
  /* Stops the pool; `done` runs on the loop once it is gone. No events after. */
  void (*close)(void *self, void (*done)(void *user), void *user);
} kilnd_jobs_pool_t;

/* kilnd_jobs_create over `pool` (copied; its `self` stays the caller's until
 * close's `done` ran). */
KILN_MUST_USE kiln_status_t kilnd_jobs_create_on(uv_loop_t *loop, kiln_cache_t *cache,
                                                 const struct kilnd_jobs_options_s *options,
                                                 const kilnd_jobs_pool_t *pool,
                                                 struct kilnd_jobs_s **out_jobs);

/* The pool's event sink (a kilnd_task_event_fn_t; `user` is the engine). Loop
 * thread; the engine's lock must not be held (it is not, by the engine's rules). */
void kilnd_jobs_task_event(void *user, uint64_t task_id, const kilnd_task_event_t *event);

#endif /* KILN_DAEMON_JOBS_SEAM_H */
