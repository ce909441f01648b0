/* kiln-worker's scratch directory, made at start-up and made the process's own
 * TMPDIR, so every temporary file of the worker, of its forked back halves and of
 * the tools they run (the ld.lld toolkit links of the ROCDL serializer, ptxas's
 * PTX and cubin, the CPU linker's objects, an external compiler's task folders
 * and whatever that compiler makes) lies under it. kilnd names it with --scratch
 * ($TMPDIR/kiln-worker-<kilnd pid>-<n>, daemon/workers.c) and removes it once it
 * has reaped the worker, since a worker killed in the middle of a task (task
 * timeout, cancel, memory limit, kill -9) runs no cleanup. The worker removes it
 * too when it stops. Run by hand without --scratch, it makes a new
 * $TMPDIR/kiln-worker-scratch-XXXXXX (a name kilnd's sweep never matches). */
#include <errno.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <unistd.h>

#include "base/alloc.h"
#include "base/buf.h"
#include "base/file.h"
#include "daemon/worker/worker.h"

/* The worker leaves with exit() from deep inside when kilnd has gone (main.c's
 * frame writers): the directory goes then too. Only in the process that made it:
 * a forked back half that calls exit() must not take its parent's away. */
static const char *at_exit_dir;
static pid_t at_exit_pid;

static void remove_at_exit(void) {
  if (at_exit_dir && getpid() == at_exit_pid) kiln_status_free(kiln_file_tree_remove(at_exit_dir));
}

kiln_status_t worker_scratch_setup(worker_t *w) {
  kiln_buf_t dir;
  kiln_buf_init(&dir);
  if (w->opt.scratch && *w->opt.scratch) {
    if (w->opt.scratch[0] != '/') {
      kiln_status_t st =
          KILN_STATUS(KILN_STATUS_INVALID_ARGUMENT, "--scratch %s is not an absolute path", w->opt.scratch);
      kiln_buf_deinit(&dir);
      return st;
    }
    /* New, 0700 and ours: never one found in place (its owner may not be us). */
    kiln_buf_append_str(&dir, w->opt.scratch);
    if (mkdir(dir.data, 0700) != 0) {
      kiln_status_t st = KILN_STATUS_ERRNO(errno, "creating the scratch directory %s", dir.data);
      kiln_buf_deinit(&dir);
      return st;
    }
  } else {
    const char *t = getenv("TMPDIR");
    kiln_buf_appendf(&dir, "%s/kiln-worker-scratch-XXXXXX", t && *t ? t : "/tmp");
    if (!mkdtemp(dir.data)) {
      kiln_status_t st = KILN_STATUS_ERRNO(errno, "creating the scratch directory %s", dir.data);
      kiln_buf_deinit(&dir);
      return st;
    }
  }
  if (setenv("TMPDIR", dir.data, 1) != 0) {
    kiln_status_t st = KILN_STATUS_ERRNO(errno, "setting TMPDIR to %s", dir.data);
    kiln_status_free(kiln_file_tree_remove(dir.data));
    kiln_buf_deinit(&dir);
    return st;
  }
  w->scratch = kiln_buf_take(&dir);
  kiln_buf_deinit(&dir);
  at_exit_dir = w->scratch;
  at_exit_pid = getpid();
  atexit(remove_at_exit);
  return NULL;
}

void worker_scratch_cleanup(worker_t *w) {
  at_exit_dir = NULL;
  if (w->scratch) kiln_status_free(kiln_file_tree_remove(w->scratch));
  kiln_free(w->scratch);
  w->scratch = NULL;
}
