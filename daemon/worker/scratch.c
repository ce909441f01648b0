/* kiln-worker's scratch directory, made at start-up and made the process's own
 * TMPDIR, so every temporary file of the worker, of its forked back halves and of
 * the tools they run (the ld.lld toolkit links of the ROCDL serializer, ptxas's
 * PTX and cubin, the CPU linker's objects, an external compiler's task folders
 * and whatever that compiler makes) lies under it. kilnd names it with --scratch
 * ($TMPDIR/kiln-worker-<kilnd pid>-<n>, daemon/workers.c) and removes it once it
 * has reaped the worker, however it ended: a worker killed in the middle of a
 * task (task timeout, cancel, memory limit, kill -9) runs no cleanup, so the
 * folder is kilnd's to remove, always. Run by hand without --scratch, the worker
 * makes a new $TMPDIR/kiln-worker-scratch-XXXXXX (a name kilnd's sweep never
 * matches) and removes it itself when it leaves (base/scratch.h). */
#include <errno.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <unistd.h>

#include "base/alloc.h"
#include "base/file.h"
#include "base/scratch.h"
#include "daemon/worker/worker.h"

kiln_status_t worker_scratch_setup(worker_t *w) {
  const char *given = w->opt.scratch && *w->opt.scratch ? w->opt.scratch : NULL;
  if (!given) {
    /* Its own, removed when it leaves (also through exit() from deep inside:
     * main.c's frame writers, when stdout is gone) or is stopped by a signal. */
    const char *dir = NULL;
    KILN_RETURN_IF_ERROR(kiln_scratch_make("kiln-worker-scratch-", &dir));
    w->scratch = kiln_strdup(dir);
    w->scratch_owned = true;
    return NULL;
  }
  if (given[0] != '/')
    return KILN_STATUS(KILN_STATUS_INVALID_ARGUMENT, "--scratch %s is not an absolute path", given);
  /* New, 0700 and ours: never one found in place (its owner may not be us). */
  if (mkdir(given, 0700) != 0) return KILN_STATUS_ERRNO(errno, "creating the scratch directory %s", given);
  if (setenv("TMPDIR", given, 1) != 0) {
    kiln_status_t st = KILN_STATUS_ERRNO(errno, "setting TMPDIR to %s", given);
    kiln_status_free(kiln_file_tree_remove(given));
    return st;
  }
  w->scratch = kiln_strdup(given);
  w->scratch_owned = false;
  return NULL;
}

void worker_scratch_cleanup(worker_t *w) {
  if (w->scratch && w->scratch_owned) kiln_status_free(kiln_scratch_remove());
  kiln_free(w->scratch);
  w->scratch = NULL;
}
