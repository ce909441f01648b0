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
 * matches) and removes it itself when it leaves. */
#include <errno.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <unistd.h>

#include "base/alloc.h"
#include "base/buf.h"
#include "base/file.h"
#include "daemon/worker/worker.h"

/* A folder this process made for itself (no --scratch) goes when it leaves, also
 * through exit() from deep inside (main.c's frame writers, when stdout is gone).
 * Only in the process that made it: a forked back half that calls exit() must
 * not take its parent's away. */
static const char *at_exit_dir;
static pid_t at_exit_pid;

static void remove_at_exit(void) {
  if (at_exit_dir && getpid() == at_exit_pid) kiln_status_free(kiln_file_tree_remove(at_exit_dir));
}

kiln_status_t worker_scratch_setup(worker_t *w) {
  const char *given = w->opt.scratch && *w->opt.scratch ? w->opt.scratch : NULL;
  kiln_buf_t dir;
  kiln_buf_init(&dir);
  kiln_status_t st = NULL;
  if (given && given[0] != '/') {
    st = KILN_STATUS(KILN_STATUS_INVALID_ARGUMENT, "--scratch %s is not an absolute path", given);
  } else if (given) {
    /* New, 0700 and ours: never one found in place (its owner may not be us). */
    kiln_buf_append_str(&dir, given);
    if (mkdir(dir.data, 0700) != 0)
      st = KILN_STATUS_ERRNO(errno, "creating the scratch directory %s", dir.data);
  } else {
    const char *t = getenv("TMPDIR");
    kiln_buf_appendf(&dir, "%s/kiln-worker-scratch-XXXXXX", t && *t ? t : "/tmp");
    if (!mkdtemp(dir.data)) st = KILN_STATUS_ERRNO(errno, "creating the scratch directory %s", dir.data);
  }
  if (!st && setenv("TMPDIR", dir.data, 1) != 0) {
    st = KILN_STATUS_ERRNO(errno, "setting TMPDIR to %s", dir.data);
    kiln_status_free(kiln_file_tree_remove(dir.data));
  }
  if (st) {
    kiln_buf_deinit(&dir);
    return st;
  }
  w->scratch = kiln_buf_take(&dir);
  kiln_buf_deinit(&dir);
  w->scratch_owned = !given;
  if (w->scratch_owned) {
    at_exit_dir = w->scratch;
    at_exit_pid = getpid();
    atexit(remove_at_exit);
  }
  return NULL;
}

void worker_scratch_cleanup(worker_t *w) {
  at_exit_dir = NULL;
  if (w->scratch && w->scratch_owned) kiln_status_free(kiln_file_tree_remove(w->scratch));
  kiln_free(w->scratch);
  w->scratch = NULL;
}
