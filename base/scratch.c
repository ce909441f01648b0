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
#include <sys/wait.h>
#include <time.h>
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

/* Removes `name` in `dir_fd` and all under it, as far as it can, async-signal-safe:
 * file.c's remove_at without messages or allocation (keep the two in step). */
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

/* ---- what the process leaves running ---- */

/* Descendants killed before the folder goes (back halves, the tools they run);
 * more are left to PR_SET_PDEATHSIG. */
#define MAX_KILLED 64

/* "/proc/<pid>/task" into `out` (64 bytes), without snprintf. */
static void task_dir(pid_t pid, char *out) {
  char digits[24];
  size_t n = 0;
  for (unsigned long v = (unsigned long)pid; n == 0 || v; v /= 10) digits[n++] = (char)('0' + v % 10);
  memcpy(out, "/proc/", 6);
  size_t len = 6;
  while (n) out[len++] = digits[--n];
  memcpy(out + len, "/task", 6);
}

/* Appends to `out` (room for `cap`) the children of every thread of `pid`
 * (/proc's children lists); returns how many. Async-signal-safe. */
static size_t children_of(pid_t pid, pid_t *out, size_t cap) {
  char path[64];
  task_dir(pid, path);
  int tasks = open(path, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (tasks < 0) return 0;
  size_t found = 0;
  char ents[1024] __attribute__((aligned(8)));
  for (ssize_t n; found < cap && (n = getdents64(tasks, ents, sizeof ents)) > 0;) {
    for (ssize_t off = 0; off < n && found < cap;) {
      const struct dirent64 *e = (const struct dirent64 *)(ents + off);
      off += e->d_reclen;
      if (e->d_name[0] < '0' || e->d_name[0] > '9' || strlen(e->d_name) > 20) continue;
      char rel[40];
      size_t len = strlen(e->d_name);
      memcpy(rel, e->d_name, len);
      memcpy(rel + len, "/children", 10);
      int fd = openat(tasks, rel, O_RDONLY | O_CLOEXEC);
      if (fd < 0) continue;
      char list[512];
      ssize_t got = read(fd, list, sizeof list - 1);
      close(fd);
      long v = -1;
      for (ssize_t i = 0; i <= got && found < cap; i++) {
        if (i < got && list[i] >= '0' && list[i] <= '9') {
          v = (v < 0 ? 0 : v * 10) + (list[i] - '0');
        } else if (v > 0) {
          out[found++] = (pid_t)v;
          v = -1;
        }
      }
    }
  }
  close(tasks);
  return found;
}

/* SIGKILLs the process's children and theirs (a back half's ptxas, say), so none
 * writes into the folder while it goes, and reaps the children (for at most a
 * second). Async-signal-safe. */
static void kill_descendants(void) {
  pid_t pids[MAX_KILLED];
  size_t n = children_of(getpid(), pids, MAX_KILLED), direct = n;
  for (size_t i = 0; i < n && n < MAX_KILLED; i++) n += children_of(pids[i], pids + n, MAX_KILLED - n);
  for (size_t i = 0; i < n; i++) (void)kill(pids[i], SIGKILL);
  const struct timespec tick = {0, 10 * 1000 * 1000};
  for (size_t i = 0; i < direct; i++) {
    for (int t = 0; t < 100 && waitpid(pids[i], NULL, WNOHANG) == 0; t++) nanosleep(&tick, NULL);
  }
}

/* Removes the folder, async-signal-safe: again for a little while if something
 * (a killed tool's last write) put a file back in it. */
static void remove_quietly(void) {
  int dir_fd = open(scratch_parent, O_PATH | O_DIRECTORY | O_CLOEXEC);
  if (dir_fd < 0) return;
  const struct timespec tick = {0, 10 * 1000 * 1000};
  struct stat st;
  for (int t = 0; t < 20; t++) {
    remove_quiet_at(dir_fd, scratch_name, 0);
    if (fstatat(dir_fd, scratch_name, &st, AT_SYMLINK_NOFOLLOW) != 0) break;
    nanosleep(&tick, NULL);
  }
  close(dir_fd);
}

static const int fatal_signals[] = {SIGINT, SIGTERM, SIGHUP, SIGQUIT};

static void on_fatal_signal(int sig) {
  int saved = errno;
  if (made && getpid() == scratch_pid) {
    kill_descendants();
    remove_quietly();
  }
  /* SA_RESETHAND put the default action back; the signal is blocked while this
   * runs (with the other three), so raising it again ends the process, as it
   * would have ended, once the handler returns. */
  raise(sig);
  errno = saved;
}

/* Through exit(), also from deep inside while back halves run (a worker whose
 * stdout went away): they are stopped first, as for a signal. */
static void remove_at_exit(void) {
  if (!made || getpid() != scratch_pid) return;
  kill_descendants();
  kiln_status_free(kiln_scratch_remove());
}

static void set_handlers(void) {
  if (handlers_set) return;
  handlers_set = true;
  struct sigaction sa;
  memset(&sa, 0, sizeof sa);
  sa.sa_handler = on_fatal_signal;
  sa.sa_flags = SA_RESETHAND; /* not SA_NODEFER: a second Ctrl-C waits for the cleanup */
  sigemptyset(&sa.sa_mask);
  for (size_t i = 0; i < sizeof fatal_signals / sizeof *fatal_signals; i++)
    sigaddset(&sa.sa_mask, fatal_signals[i]);
  for (size_t i = 0; i < sizeof fatal_signals / sizeof *fatal_signals; i++) {
    struct sigaction old;
    if (sigaction(fatal_signals[i], NULL, &old) != 0 || old.sa_handler == SIG_IGN) continue;
    (void)sigaction(fatal_signals[i], &sa, NULL);
  }
  atexit(remove_at_exit);
}

kiln_status_t kiln_scratch_make(const char *prefix, const char **out_dir) {
  *out_dir = NULL;
  if (made)
    return KILN_STATUS(KILN_STATUS_FAILED_PRECONDITION, "this process has its scratch folder already");
  const char *tmp = getenv("TMPDIR");
  const char *base = tmp && *tmp ? tmp : "/tmp";
  /* Absolute, so the handler finds it whatever the working directory is then. */
  char *real = realpath(base, NULL);
  if (!real) {
    return KILN_STATUS_ERRNO(errno,
                             "cannot make a scratch folder in %s%s: set TMPDIR to a folder this user may "
                             "write, or unset it for /tmp",
                             tmp && *tmp ? "TMPDIR=" : "", base);
  }
  kiln_buf_t dir;
  kiln_buf_init(&dir);
  kiln_buf_appendf(&dir, "%s/%sXXXXXX", real, prefix);
  kiln_status_t st = NULL;
  if (dir.len >= sizeof scratch_path) {
    st = KILN_STATUS(KILN_STATUS_INVALID_ARGUMENT, "cannot make a scratch folder in %s: its path is too long",
                     real);
  } else if (!mkdtemp(dir.data)) {
    st =
        KILN_STATUS_ERRNO(errno,
                          "cannot make a scratch folder in %s%s: set TMPDIR to a folder this user may write, "
                          "or unset it for /tmp",
                          tmp && *tmp ? "TMPDIR=" : "", base);
  } else if (setenv("TMPDIR", dir.data, 1) != 0) {
    st = KILN_STATUS_ERRNO(errno, "cannot set TMPDIR to %s", dir.data);
    (void)rmdir(dir.data);
  }
  if (st) {
    free(real);
    kiln_buf_deinit(&dir);
    return st;
  }
  saved_tmpdir = tmp ? kiln_strdup(tmp) : NULL;
  memcpy(scratch_path, dir.data, dir.len + 1);
  const char *slash = strrchr(scratch_path, '/');
  size_t parent_len = slash == scratch_path ? 1 : (size_t)(slash - scratch_path);
  memcpy(scratch_parent, scratch_path, parent_len);
  scratch_parent[parent_len] = '\0';
  snprintf(scratch_name, sizeof scratch_name, "%s", slash + 1);
  free(real);
  kiln_buf_deinit(&dir);
  scratch_pid = getpid();
  set_handlers();
  made = 1;
  *out_dir = scratch_path;
  return NULL;
}

kiln_status_t kiln_scratch_remove(void) {
  if (!made || getpid() != scratch_pid) return NULL;
  /* `made` stays set while the tree goes: a signal meanwhile finishes the job. */
  kiln_status_t st = kiln_file_tree_remove(scratch_path);
  made = 0;
  if (saved_tmpdir) {
    (void)setenv("TMPDIR", saved_tmpdir, 1);
  } else {
    (void)unsetenv("TMPDIR");
  }
  kiln_free(saved_tmpdir);
  saved_tmpdir = NULL;
  return st;
}
