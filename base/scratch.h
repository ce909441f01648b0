/* A process's own scratch folder, which goes when the process does.
 *
 * kiln_scratch_make makes $TMPDIR/<prefix>XXXXXX (mode 0700; /tmp when TMPDIR is
 * unset or empty) and makes it the process's TMPDIR, so its temporary files, its
 * forked children's and those of the tools they run (ld.lld toolkit links,
 * ptxas's files) all lie under it. The folder is removed when the process ends:
 *  - at kiln_scratch_remove, or through exit() (an atexit handler);
 *  - on SIGINT, SIGTERM, SIGHUP and SIGQUIT, from a handler that removes it with
 *    async-signal-safe calls only and then dies of the signal as it would have
 *    (a disposition of SIG_IGN is left alone; a second signal waits for it);
 * at exit() and on a signal the process's children and theirs (back halves, the
 * tools they run) are SIGKILLed first, so none writes into the folder as it goes;
 * and only by the process that made it: a forked child that exits or is killed
 * never takes its parent's folder. Nothing survives kill -9; kilnd names and
 * removes its workers' folders itself for that (daemon/workers.c).
 *
 * Main thread only, both calls, while no other thread runs (they set TMPDIR,
 * which getenv elsewhere would race, and signal handlers). */
#ifndef KILN_BASE_SCRATCH_H
#define KILN_BASE_SCRATCH_H

#include "base/status.h"

/* Makes the folder; *out_dir names it (an absolute path) until
 * kiln_scratch_remove, and is NULL on failure. While one exists another is
 * refused (FAILED_PRECONDITION). On failure TMPDIR is unchanged, and the status
 * names the folder it could not be made in and how to fix that. */
KILN_MUST_USE kiln_status_t kiln_scratch_make(const char *prefix, const char **out_dir);

/* Removes the folder now (the first error, if any of it is left), puts TMPDIR
 * back as it was and forgets the folder; the signal handlers stay and do
 * nothing. Without a folder, or in a forked child, nothing. */
KILN_MUST_USE kiln_status_t kiln_scratch_remove(void);

#endif /* KILN_BASE_SCRATCH_H */
