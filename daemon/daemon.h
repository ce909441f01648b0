/* kilnd as a whole: the owner of the libuv loop and of everything that lives on
 * it. main.c turns settings into a daemon and a daemon's end into an exit code;
 * this is the wiring in between.
 *
 * Threads and ownership (docs/design/daemon.md draws them):
 *   loop thread   runs uv_run on the daemon's loop: signals (SIGTERM/SIGINT drain,
 *                 SIGHUP reload), the cache GC timer, the gRPC server's calls
 *                 (server.c, stream.c), the job engine's events and the worker
 *                 pool's pipes (jobs/, workers.c), the metrics endpoint's refresh
 *   cq thread     server.c's completion-queue pump, handing events to the loop
 *   libuv pool    offloaded handlers, admission, cache stores, GC, reloads
 *   MHD threads   http.c's endpoint, waiting on the loop for snapshots
 *
 * Start-up order (kilnd_daemon_create): the state directory (created and locked
 * before binding, so a second kilnd on the same state fails on the lock and never
 * touches the socket), the cache (opening it repairs what a crash left), the job
 * store, the gRPC server, the job engine and its compile workers, the metrics
 * endpoint, the published addresses. Stop (kilnd_daemon_run returns): the first
 * SIGTERM/SIGINT drains calls and closes the engine (unfinished jobs stay in the
 * job store and run again at the next start); once the server has stopped the
 * daemon closes its own handles and the loop ends.
 */
#ifndef KILN_DAEMON_DAEMON_H
#define KILN_DAEMON_DAEMON_H

#include "base/status.h"
#include "cache/cache.h"
#include "daemon/settings.h"

typedef struct kilnd_daemon_s kilnd_daemon_t;

struct kilnd_tls_s;    /* tls.h */
struct kilnd_tokens_s; /* auth.h */

/* Builds the daemon from `settings` (borrowed; must outlive it) in the order
 * above, with `tls` (taken; NULL: plaintext) and `tokens` (taken; NULL: no
 * tokens), both also on failure. Logs event=listening when every part is up.
 * Errors say which part could not start (address in use: UNAVAILABLE; state
 * directory locked or unwritable, cache unusable: its own status). */
KILN_MUST_USE kiln_status_t kilnd_daemon_create(const kilnd_settings_t *settings, struct kilnd_tls_s *tls,
                                                struct kilnd_tokens_s *tokens, kilnd_daemon_t **out_daemon);

/* Runs the loop until a signal has drained the daemon; NULL after a clean stop.
 * The caller has the loop's signals blocked (main.c does it before any library
 * starts a thread); the signal thread this starts takes them (signals.h). */
KILN_MUST_USE kiln_status_t kilnd_daemon_run(kilnd_daemon_t *daemon);

/* Frees everything, in the order that keeps each part's users alive: engine
 * closed, endpoint and server closed, the loop run to its end, the signal
 * thread joined, then the engine, TLS, job store, cache and state directory.
 * NULL is fine. */
void kilnd_daemon_destroy(kilnd_daemon_t *daemon);

/* kilnd --verify: opens the state directory and the cache without repairing,
 * then checks the cache (repairing unless `dry_run`) into *out_report (caller
 * deinits it on success). */
KILN_MUST_USE kiln_status_t kilnd_daemon_verify(const kilnd_settings_t *settings, bool dry_run,
                                                kiln_cache_verify_report_t *out_report);

/* The kiln-worker executable kilnd runs: the worker-path setting, or the one
 * installed next to kilnd. Heap; kiln_free. */
char *kilnd_daemon_worker_path(const char *setting);

#endif /* KILN_DAEMON_DAEMON_H */
