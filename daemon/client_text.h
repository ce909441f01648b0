/* What kilnd tells clients about its own failures: the class of failure, never
 * the server's paths (kilnd's log keeps those, under the request or job id).
 * Used at every exit toward a client: unary replies, stream ends, job events. */
#ifndef KILN_DAEMON_CLIENT_TEXT_H_
#define KILN_DAEMON_CLIENT_TEXT_H_

#include "base/status.h"

/* The state directory's own failure to be written (read-only, or not kilnd's),
 * with FAILED_PRECONDITION: kiln.proto keeps PERMISSION_DENIED for client
 * authentication. */
#define KILND_STATE_NOT_WRITABLE                                                               \
  "kilnd cannot write its state directory (read-only, or not its own): the operator must fix " \
  "it; kilnd's log has the path"

/* The state directory to hide from clients (its resolved path): once, at
 * start-up, before any call. */
void kilnd_client_text_init(const char *state_dir);

/* `status` as a client may see it (consumes it): a PERMISSION_DENIED (from
 * kilnd's own files) becomes FAILED_PRECONDITION and KILND_STATE_NOT_WRITABLE;
 * the state directory's path in any other message becomes "STATE". Either way
 * the original goes to kilnd's log with `context` (the request or job id).
 * Thread-safe after init. */
KILN_MUST_USE kiln_status_t kilnd_status_for_client(kiln_status_t status, const char *context);

/* The same for a job event's code and message: *code may change; returns the
 * message to send instead (kiln_free it), or NULL when `message` may go as it is. */
char *kilnd_message_for_client(int *code, const char *message, const char *context);

#endif  // KILN_DAEMON_CLIENT_TEXT_H_
