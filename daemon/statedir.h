/* The state directory: created if missing, proven writable, and locked so that one
 * kilnd owns it. The lock is an flock(2) on DIR/kilnd.lock holding the owner's pid;
 * the kernel drops it when the process dies, so a crash never leaves it stale.
 * The bound address is published in DIR/kilnd.addr (written atomically) for
 * scripts and tests that start kilnd on port 0. Loop thread only.
 */
#ifndef KILN_DAEMON_STATEDIR_H
#define KILN_DAEMON_STATEDIR_H

#include "base/status.h"

typedef struct kilnd_statedir_s {
  char *path;  /* absolute path */
  int lock_fd; /* -1 when not held */
} kilnd_statedir_t;

/* Opens (creating with mode 0700 if missing) and locks `path`. A leading "~/" is
 * the home directory. Errors: FAILED_PRECONDITION when not a directory or held by
 * another kilnd (naming its pid), PERMISSION_DENIED when not writable, others from
 * errno; each names the path and what would fix it. */
KILN_MUST_USE kiln_status_t kilnd_statedir_open(const char *path, kilnd_statedir_t *out_dir);

/* Atomically replaces DIR/kilnd.addr with `address` and a newline. */
KILN_MUST_USE kiln_status_t kilnd_statedir_publish_address(kilnd_statedir_t *dir, const char *address);

/* The same for DIR/kilnd.metrics-addr: where the HTTP endpoint (/metrics) listens. */
KILN_MUST_USE kiln_status_t kilnd_statedir_publish_metrics_address(kilnd_statedir_t *dir,
                                                                   const char *address);

/* Removes DIR/kilnd.addr and DIR/kilnd.metrics-addr and releases the lock. Safe on
 * a zeroed struct. */
void kilnd_statedir_close(kilnd_statedir_t *dir);

#endif /* KILN_DAEMON_STATEDIR_H */
