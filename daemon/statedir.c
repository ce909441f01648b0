/* State directory ownership. Writability is proven by creating and removing a
 * probe file rather than by access(2), which says yes to root even on a read-only
 * mount. */
#include "daemon/statedir.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include "base/alloc.h"
#include "base/buf.h"

static KILN_MUST_USE kiln_status_t mkdirs(const char *path) {
  char *copy = kiln_strdup(path);
  kiln_status_t status = NULL;
  for (char *p = copy + 1; !status; p++) {
    if (*p != '/' && *p != '\0') continue;
    char saved = *p;
    *p = '\0';
    if (mkdir(copy, 0700) != 0 && errno != EEXIST) {
      int err = errno;
      if (err == ENOTDIR) {
        status = KILN_STATUS(KILN_STATUS_FAILED_PRECONDITION,
                             "state directory %s cannot be created: %s is not a directory; "
                             "choose another --state-dir",
                             path, copy);
      } else {
        status = KILN_STATUS_ERRNO(err,
                                   "state directory %s cannot be created (at %s); "
                                   "choose another --state-dir or fix its permissions",
                                   path, copy);
      }
    }
    *p = saved;
    if (saved == '\0') break;
  }
  kiln_free(copy);
  return status;
}

static char *absolute_path(const char *path) {
  kiln_buf_t buf;
  kiln_buf_init(&buf);
  if (strncmp(path, "~/", 2) == 0 && getenv("HOME")) {
    kiln_buf_appendf(&buf, "%s/%s", getenv("HOME"), path + 2);
  } else if (path[0] != '/') {
    char cwd[PATH_MAX];
    if (getcwd(cwd, sizeof cwd)) kiln_buf_appendf(&buf, "%s/", cwd);
    kiln_buf_append_str(&buf, path);
  } else {
    kiln_buf_append_str(&buf, path);
  }
  while (buf.len > 1 && buf.data[buf.len - 1] == '/') buf.data[--buf.len] = '\0';
  return kiln_buf_take(&buf);
}

static KILN_MUST_USE kiln_status_t probe_writable(const char *dir) {
  kiln_buf_t probe;
  kiln_buf_init(&probe);
  kiln_buf_appendf(&probe, "%s/.kilnd-probe-%ld", dir, (long)getpid());
  kiln_status_t status = NULL;
  int fd = open(probe.data, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
  if (fd < 0) {
    status = KILN_STATUS_ERRNO(errno,
                               "state directory %s is not writable; choose another "
                               "--state-dir or fix its permissions",
                               dir);
  } else {
    close(fd);
    unlink(probe.data);
  }
  kiln_buf_deinit(&probe);
  return status;
}

kiln_status_t kilnd_statedir_open(const char *path, kilnd_statedir_t *out_dir) {
  out_dir->path = NULL;
  out_dir->lock_fd = -1;
  if (!path || !*path) {
    return KILN_STATUS(KILN_STATUS_INVALID_ARGUMENT, "--state-dir must not be empty");
  }
  char *abs = absolute_path(path);
  kiln_status_t status = NULL;
  struct stat st;
  if (stat(abs, &st) == 0) {
    if (!S_ISDIR(st.st_mode)) {
      status = KILN_STATUS(KILN_STATUS_FAILED_PRECONDITION,
                           "state directory %s exists but is not a directory; choose another "
                           "--state-dir",
                           abs);
    }
  } else if (errno == ENOENT) {
    status = mkdirs(abs);
  } else if (errno == ENOTDIR) {
    status = KILN_STATUS(KILN_STATUS_FAILED_PRECONDITION,
                         "state directory %s cannot exist: a parent is not a directory; choose "
                         "another --state-dir",
                         abs);
  } else {
    status = KILN_STATUS_ERRNO(errno, "state directory %s is not usable", abs);
  }
  if (!status) status = probe_writable(abs);

  int fd = -1;
  if (!status) {
    kiln_buf_t lock;
    kiln_buf_init(&lock);
    kiln_buf_appendf(&lock, "%s/kilnd.lock", abs);
    fd = open(lock.data, O_RDWR | O_CREAT | O_CLOEXEC, 0600);
    if (fd < 0) {
      status = KILN_STATUS_ERRNO(errno, "cannot open lock file %s", lock.data);
    } else if (flock(fd, LOCK_EX | LOCK_NB) != 0) {
      int err = errno;
      char pid[32] = "";
      ssize_t n = pread(fd, pid, sizeof pid - 1, 0);
      if (n > 0) pid[n] = '\0';
      pid[strcspn(pid, "\n")] = '\0';
      if (err == EWOULDBLOCK) {
        status = KILN_STATUS(KILN_STATUS_FAILED_PRECONDITION,
                             "state directory %s is in use by another kilnd (pid %s); stop it or "
                             "choose another --state-dir",
                             abs, *pid ? pid : "unknown");
      } else {
        status = KILN_STATUS_ERRNO(err, "cannot lock %s", lock.data);
      }
      close(fd);
      fd = -1;
    } else {
      char pid[32];
      int len = snprintf(pid, sizeof pid, "%ld\n", (long)getpid());
      if (ftruncate(fd, 0) != 0 || pwrite(fd, pid, (size_t)len, 0) != len) {
        status = KILN_STATUS_ERRNO(errno, "cannot write pid to %s", lock.data);
        close(fd);
        fd = -1;
      }
    }
    kiln_buf_deinit(&lock);
  }
  if (status) {
    kiln_free(abs);
    return status;
  }
  out_dir->path = abs;
  out_dir->lock_fd = fd;
  return NULL;
}

static KILN_MUST_USE kiln_status_t publish(kilnd_statedir_t *dir, const char *name, const char *address) {
  kiln_buf_t tmp, final;
  kiln_buf_init(&tmp);
  kiln_buf_init(&final);
  kiln_buf_appendf(&tmp, "%s/.%s.tmp", dir->path, name);
  kiln_buf_appendf(&final, "%s/%s", dir->path, name);
  kiln_status_t status = NULL;
  int fd = open(tmp.data, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) {
    status = KILN_STATUS_ERRNO(errno, "cannot write %s", tmp.data);
  } else {
    kiln_buf_t line;
    kiln_buf_init(&line);
    kiln_buf_appendf(&line, "%s\n", address);
    ssize_t n = write(fd, line.data, line.len);
    if (n != (ssize_t)line.len || fsync(fd) != 0) {
      status = KILN_STATUS_ERRNO(n < 0 ? errno : ENOSPC, "cannot write %s", tmp.data);
    }
    kiln_buf_deinit(&line);
    close(fd);
    if (!status && rename(tmp.data, final.data) != 0) {
      status = KILN_STATUS_ERRNO(errno, "cannot rename %s to %s", tmp.data, final.data);
    }
    if (status) unlink(tmp.data);
  }
  kiln_buf_deinit(&tmp);
  kiln_buf_deinit(&final);
  return status;
}

kiln_status_t kilnd_statedir_publish_address(kilnd_statedir_t *dir, const char *address) {
  return publish(dir, "kilnd.addr", address);
}

kiln_status_t kilnd_statedir_publish_metrics_address(kilnd_statedir_t *dir, const char *address) {
  return publish(dir, "kilnd.metrics-addr", address);
}

void kilnd_statedir_close(kilnd_statedir_t *dir) {
  if (dir->path) {
    kiln_buf_t addr;
    kiln_buf_init(&addr);
    kiln_buf_appendf(&addr, "%s/kilnd.addr", dir->path);
    unlink(addr.data);
    kiln_buf_clear(&addr);
    kiln_buf_appendf(&addr, "%s/kilnd.metrics-addr", dir->path);
    unlink(addr.data);
    kiln_buf_deinit(&addr);
  }
  /* path is set only by a successful open, so a zeroed struct (lock_fd 0) never
   * closes stdin. */
  if (dir->path && dir->lock_fd >= 0) close(dir->lock_fd); /* releases the flock */
  kiln_free(dir->path);
  dir->path = NULL;
  dir->lock_fd = -1;
}
