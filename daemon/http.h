/* kilnd's HTTP endpoint for operators: GET /metrics (Prometheus text format
 * 0.0.4), /healthz (liveness) and /readyz (readiness), served by libmicrohttpd on
 * its own threads so that a scrape never runs on the libuv loop.
 *
 * Threads. The loop owns the state being reported. A request asks the loop for a
 * fresh snapshot (uv_async_send); the loop fills one (the `collect` callback) and
 * hands a copy over under a mutex, signalling a condition variable. The HTTP
 * thread waits at most a second for it; past that it answers from the previous
 * snapshot (/metrics, /readyz) or 503 (/healthz: the loop did not answer, which is
 * what a liveness probe is for). The cache's totals (bytes stored) are read on the
 * HTTP thread itself with kiln_cache_stats (SQLite: never on the loop).
 *
 * Bounds: 16 connections, 10 s idle timeout, two threads.
 */
#ifndef KILN_DAEMON_HTTP_H
#define KILN_DAEMON_HTTP_H

#include <uv.h>

#include "base/status.h"
#include "cache/cache.h"
#include "daemon/metrics.h"

typedef struct kilnd_http_s kilnd_http_t;

/* Fills the loop-thread part of `snap` (the previous snapshot, so the callback may
 * keep what it can no longer read, e.g. the job engine's counters after it closed).
 * Runs on the loop. */
typedef void (*kilnd_http_collect_fn_t)(void *user, kilnd_metrics_snapshot_t *snap);

/* Binds `listen` ("HOST:PORT" or "[IPV6]:PORT"; port 0 picks a free one) and starts
 * serving. `cache` (may be NULL) is borrowed and must outlive the endpoint.
 * Errors name the address: UNAVAILABLE when it is in use, INVALID_ARGUMENT when it
 * does not parse or is a unix socket, else from errno. Loop thread. */
KILN_MUST_USE kiln_status_t kilnd_http_create(uv_loop_t *loop, const char *listen, kiln_cache_t *cache,
                                              kilnd_http_collect_fn_t collect, void *user,
                                              kilnd_http_t **out_http);

/* "127.0.0.1:41235": where the endpoint is reached. Borrowed, valid until destroy. */
const char *kilnd_http_address(const kilnd_http_t *http);

/* Stops serving (joins libmicrohttpd's threads) and closes the loop handle; the
 * memory goes when the loop runs the close callback, so call this before the
 * loop's last run (kilnd_server_destroy runs it). NULL is a no-op. Loop thread. */
void kilnd_http_destroy(kilnd_http_t *http);

#endif /* KILN_DAEMON_HTTP_H */
