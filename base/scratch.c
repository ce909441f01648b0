/* The process's own scratch folder (scratch.h). The signal handler may not
 * allocate or take locks, so it removes the folder with a walk of its own:
 * getdents64 into a stack buffer, openat without following links, unlinkat;
 * failures are skipped (there is no one left to tell). Everywhere else the
 * folder goes through kiln_file_tree_remove, which reports what it left. */
#include "base/scratch.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <signal.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "base/alloc.h"
#include "base/buf.h"
#include "base/file.h"

/* The folder, split for the handler: opened by its parent and name. Written
 * only before the handlers can run, or with them doing nothing (made = false). */
static char scratch_path[PATH_MAX];
static char scratch_parent[PATH_MAX];
static char scratch_name[NAME_MAX + 1];
static pid_t scratch_pid;
static char *saved_tmpdir; /* TMPDIR before (NULL: unset), put back at the removal */
static volatile sig_atomic_t made;
static bool handlers_set;

/* Levels the handler descends (each holds a descriptor and a 2 KiB buffer on
 * the stack of whatever thread the signal landed on); deeper is left. */
#define QUIET_MAX_DEPTH 16

/* Removes `name` in `dir_fd` and all under it, as far as it can, async-signal-safe. */
static void remove_quiet_at(int dir_fd, const char *name, int depth) {
  if (unlinkat(dir_fd, name, 0) == 0 || (errno != EISDIR && errno != EPERM)) return;
  int fd = openat(dir_fd, name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
  if (fd < 0) return;
  struct stat st; /* a folder of ours a tool made 0500: opened up to be emptied */
  if (fstat(fd, &st) == 0 && st.st_uid == geteuid() && (st.st_mode & 0700) != 0700)
    (void)fchmod(fd, (st.st_mode & 07777) | 0700);
  if (depth < QUIET_MAX_DEPTH) {
    /* Listing while removing may skip names: a second pass takes them. */
    for (int pass = 0; pass < 2; pass++) {
      if (lseek(fd, 0, SEEK_SET) != 0) break;
      char buf[2048] __attribute__((aligned(8)));
      for (ssize_t n; (n = getdents64(fd, buf, sizeof buf)) > 0;) {
        for (ssize_t off = 0; off < n;) {
          const struct dirent64 *e = (const struct dirent64 *)(buf + off);
          off += e->d_reclen;
          if (!strcmp(e->d_name, ".") || !strcmp(e->d_name, "..")) continue;
          remove_quiet_at(fd, e->d_name, depth + 1);
        }
      }
      if (unlinkat(dir_fd, name, AT_REMOVEDIR) == 0 || errno != ENOTEMPTY) break;
    }
  }
  close(fd);
  (void)unlinkat(dir_fd, name, AT_REMOVEDIR);
}

static const int fatal_signals[] = {SIGINT, SIGTERM, SIGHUP, SIGQUIT};

static void on_fatal_signal(int sig) {
  int saved = errno;
  if (made && getpid() == scratch_pid) {
    int dir_fd = open(scratch_parent, O_PATH | O_DIRECTORY | O_CLOEXEC);
    if (dir_fd >= 0) {
      remove_quiet_at(dir_fd, scratch_name, 0);
      close(dir_fd);
    }
  }
  /* SA_RESETHAND put the default back and SA_NODEFER leaves the signal
   * unblocked: raising it again ends the process as it would have ended. */
  raise(sig);
  errno = saved;
}

static void remove_at_exit(void) {
  if (made && getpid() == scratch_pid) kiln_status_free(kiln_scratch_remove());
}

static void set_handlers(void) {
  if (handlers_set) return;
  handlers_set = true;
  for (size_t i = 0; i < sizeof fatal_signals / sizeof *fatal_signals; i++) {
    struct sigaction old;
    if (sigaction(fatal_signals[i], NULL, &old) != 0 || old.sa_handler == SIG_IGN) continue;
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_fatal_signal;
    sa.sa_flags = SA_RESETHAND | SA_NODEFER;
    sigemptyset(&sa.sa_mask);
    (void)sigaction(fatal_signals[i], &sa, NULL);
  }
  atexit(remove_at_exit);
}

kiln_status_t kiln_scratch_make(const char *prefix, const char **out_dir) {
  if (made)
    return KILN_STATUS(KILN_STATUS_FAILED_PRECONDITION, "this process has its scratch folder already");
  const char *tmp = getenv("TMPDIR");
  char *before = tmp ? kiln_strdup(tmp) : NULL;
  kiln_buf_t dir;
  kiln_buf_init(&dir);
  kiln_buf_appendf(&dir, "%s/%sXXXXXX", tmp && *tmp ? tmp : "/tmp", prefix);
  kiln_status_t st = NULL;
  const char *slash = NULL;
  if (dir.len >= sizeof scratch_path) {
    st = KILN_STATUS(KILN_STATUS_INVALID_ARGUMENT, "the scratch folder's path %s is too long", dir.data);
  } else if (!mkdtemp(dir.data)) {
    st = KILN_STATUS_ERRNO(errno, "cannot make a scratch folder %s", dir.data);
  } else if (setenv("TMPDIR", dir.data, 1) != 0) {
    st = KILN_STATUS_ERRNO(errno, "cannot set TMPDIR to %s", dir.data);
    (void)rmdir(dir.data);
  } else {
    slash = strrchr(dir.data, '/');
  }
  if (st) {
    kiln_free(before);
    kiln_buf_deinit(&dir);
    return st;
  }
  saved_tmpdir = before;
  memcpy(scratch_path, dir.data, dir.len + 1);
  size_t parent_len = slash == dir.data ? 1 : (size_t)(slash - dir.data);
  memcpy(scratch_parent, dir.data, parent_len);
  scratch_parent[parent_len] = '\0';
  snprintf(scratch_name, sizeof scratch_name, "%s", slash + 1);
  kiln_buf_deinit(&dir);
  scratch_pid = getpid();
  set_handlers();
  made = 1;
  *out_dir = scratch_path;
  return NULL;
}

kiln_status_t kiln_scratch_remove(void) {
  if (!made || getpid() != scratch_pid) return NULL;
  made = 0; /* the handlers do nothing from here on */
  if (saved_tmpdir) {
    (void)setenv("TMPDIR", saved_tmpdir, 1);
  } else {
    (void)unsetenv("TMPDIR");
  }
  kiln_free(saved_tmpdir);
  saved_tmpdir = NULL;
  return kiln_file_tree_remove(scratch_path);
}
