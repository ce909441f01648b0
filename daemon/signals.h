/* kilnd's signals: one thread takes them all.
 *
 * The loop handles SIGTERM and SIGINT (drain), SIGHUP (reload) and SIGCHLD (libuv
 * reaps the workers) through uv_signal, whose handler only writes to the loop's
 * pipe and so may run on any thread. main() blocks the four before any library
 * starts a thread, and every thread keeps them blocked (a new thread inherits the
 * mask of the one that starts it, whichever that is: the loop's, gRPC's, libuv's
 * pool), except the signal thread, which unblocks them only inside ppoll().
 * So the kernel never hands one to a thread waiting in a library's own futex,
 * where it could wait unseen: under ThreadSanitizer, which defers a signal to the
 * thread's next intercepted call, a SIGTERM was never seen, and then a worker's
 * SIGCHLD at close, so kilnd waited for ever. A signal that comes before the
 * thread starts stays pending until then. */
#ifndef KILN_DAEMON_SIGNALS_H
#define KILN_DAEMON_SIGNALS_H

#include <signal.h>

#include "base/status.h"

/* The four signals above. Thread-safe. */
void kilnd_loop_signals(sigset_t *out_set);

typedef struct kilnd_signal_thread_s kilnd_signal_thread_t;

/* Starts the thread (named "kilnd-signals"). The calling thread must have the
 * loop's signals blocked. */
KILN_MUST_USE kiln_status_t kilnd_signal_thread_start(kilnd_signal_thread_t **out_thread);

/* Stops and joins it; the loop's signals then stay pending. NULL is ignored. */
void kilnd_signal_thread_stop(kilnd_signal_thread_t *thread);

#endif /* KILN_DAEMON_SIGNALS_H */
