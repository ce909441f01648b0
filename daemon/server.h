/* kilnd's gRPC server: the gRPC C core on one completion-queue thread, and the
 * calls' state, handlers and drain on the daemon's libuv loop (daemon.c owns the
 * loop, the signals, reloads and timers; the server only lives on it).
 *
 * Lifecycle: kilnd_server_create binds and starts listening; kilnd_server_start
 * starts the queue thread, before the loop runs; kilnd_server_request_stop
 * drains the in-flight calls, after which the server shuts gRPC down, closes its
 * handles and calls the on_stopped hook; kilnd_server_destroy frees it, once the
 * loop has run its handles' close callbacks (the owner runs the loop after).
 * All functions: loop thread only (the thread that runs the loop).
 */
#ifndef KILN_DAEMON_SERVER_H
#define KILN_DAEMON_SERVER_H

#include <uv.h>

#include "base/status.h"
#include "cache/cache.h"
#include "daemon/settings.h"
#include "daemon/stats.h"

typedef struct kilnd_server_s kilnd_server_t;

struct kilnd_tls_s;    /* tls.h */
struct kilnd_tokens_s; /* auth.h */

/* Binds settings->listen and starts the gRPC server on `loop` (borrowed; it must
 * outlive the server). With `tls` (borrowed; NULL:
 * plaintext; it must outlive the server) the port speaks TLS, and with mutual TLS
 * a call's client is its certificate's CN (or first SAN). With `tokens_owned`
 * (taken, also on failure; NULL: no tokens) every call but health checks must
 * carry a bearer token of a role its method needs (auth.h), checked before the
 * request is decoded; the token's name is then the call's client
 * (kilnd_server_set_tokens swaps the set; the daemon's SIGHUP reload does).
 * `settings` and `cache` (may be NULL: cache RPCs then fail with
 * FAILED_PRECONDITION) are borrowed and must outlive the server. On success
 * *out_server is owned by the caller; the address clients should use is
 * kilnd_server_address(). Errors name the address and why (in use: UNAVAILABLE;
 * malformed: INVALID_ARGUMENT). */
KILN_MUST_USE kiln_status_t kilnd_server_create(uv_loop_t *loop, const kilnd_settings_t *settings,
                                                kiln_cache_t *cache, struct kilnd_tls_s *tls,
                                                struct kilnd_tokens_s *tokens_owned,
                                                kilnd_server_t **out_server);

/* "127.0.0.1:41234" or "unix:/run/kiln.sock": where clients reach this server.
 * Borrowed, valid until destroy. */
const char *kilnd_server_address(const kilnd_server_t *server);

/* The address the gRPC listener is bound to, with the bound port ("0.0.0.0:7477",
 * "unix:/run/kiln/kiln.sock"): what the logs and systemd's status say kilnd
 * listens on. Owned by the server. */
const char *kilnd_server_bind_address(const kilnd_server_t *server);

/* Starts the completion-queue thread; the loop serves calls once it runs. */
KILN_MUST_USE kiln_status_t kilnd_server_start(kilnd_server_t *server);

/* Starts the drain (the daemon calls it on SIGTERM/SIGINT): gRPC takes no new
 * calls, in-flight ones finish until drain-timeout, then are cancelled. A second
 * call cancels them at once. */
void kilnd_server_request_stop(kilnd_server_t *server);

/* Calls fn(user) on the loop thread once the drain is over: gRPC is shut down
 * and the server's handles are closing, so the loop ends once the owner closes
 * its own. A later call replaces the hook. */
void kilnd_server_on_stopped(kilnd_server_t *server, void (*fn)(void *user), void *user);

/* Replaces the token set (auth.h) with `tokens_owned` (taken; NULL: none), for a
 * reload; calls arriving after this use it. Loop thread. */
void kilnd_server_set_tokens(kilnd_server_t *server, struct kilnd_tokens_s *tokens_owned);

/* Calls fn(user) on the loop thread once, when the drain starts (first SIGTERM or
 * SIGINT, or kilnd_server_request_stop), after new calls are refused and before
 * in-flight calls are waited for. Owners of long-lived streams (WatchJob
 * watchers) finish them there (UNAVAILABLE) instead of holding the exit until
 * drain-timeout cancels them. A later call replaces the hook. */
void kilnd_server_on_drain(kilnd_server_t *server, void (*fn)(void *user), void *user);

/* Hands handlers the job engine (env->jobs); before the loop runs. Loop thread. */
struct kilnd_jobs_s;
void kilnd_server_set_jobs(kilnd_server_t *server, struct kilnd_jobs_s *jobs);

/* Finished-call counters by method and code (stats.h). Borrowed. Loop thread. */
const kilnd_stats_t *kilnd_server_stats(const kilnd_server_t *server);

/* True once the drain started: gRPC accepts no new calls. Loop thread. */
bool kilnd_server_draining(const kilnd_server_t *server);

/* When the server was created (Unix ms). */
int64_t kilnd_server_start_unix_ms(const kilnd_server_t *server);

/* Frees the server: closes its handles (if the drain did not) and frees it from
 * their close callbacks, so the owner must run the loop afterwards. When the
 * loop never ran it (start-up failed after create), drains gRPC here first. */
void kilnd_server_destroy(kilnd_server_t *server);

#endif /* KILN_DAEMON_SERVER_H */
