/* Whole files in and out (file.h). */
#include "base/file.h"

#include <errno.h>
#include <fcntl.h>
#include <dirent.h>
#include <inttypes.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

kiln_status_t kiln_file_write(const char *path, const void *data, size_t len, mode_t mode) {
  int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, mode);
  if (fd < 0) return KILN_STATUS_ERRNO(errno, "cannot create %s", path);
  const uint8_t *p = data;
  size_t left = len;
  while (left > 0) {
    ssize_t n = write(fd, p, left);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) {
      int err = errno;
      close(fd);
      return KILN_STATUS_ERRNO(err, "cannot write %s", path);
    }
    p += n;
    left -= (size_t)n;
  }
  if (close(fd) != 0) return KILN_STATUS_ERRNO(errno, "cannot write %s", path);
  return NULL;
}

/* Appends what `fd` holds to `out`: 0; errno of a failed read; or -1 once more
 * than `max` bytes came (what was read stays appended). */
static int read_all(int fd, uint64_t max, kiln_buf_t *out) {
  char chunk[65536];
  uint64_t got = 0;
  for (;;) {
    ssize_t n = read(fd, chunk, sizeof chunk);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) return errno;
    if (n == 0) return 0;
    got += (uint64_t)n;
    if (got > max) return -1;
    kiln_buf_append(out, chunk, (size_t)n);
  }
}

kiln_status_t kiln_file_read(const char *path, uint64_t max, kiln_buf_t *out) {
  int fd = open(path, O_RDONLY | O_CLOEXEC);
  if (fd < 0) return KILN_STATUS_ERRNO(errno, "cannot open %s", path);
  int err = read_all(fd, max, out);
  close(fd);
  if (err < 0) return KILN_STATUS(KILN_STATUS_RESOURCE_EXHAUSTED, "%s is over %" PRIu64 " bytes", path, max);
  if (err > 0) return KILN_STATUS_ERRNO(err, "cannot read %s", path);
  return NULL;
}

int kiln_buf_append_file(kiln_buf_t *buf, const char *path) {
  int fd = open(path, O_RDONLY | O_CLOEXEC);
  if (fd < 0) return -1;
  int err = read_all(fd, UINT64_MAX, buf);
  close(fd);
  if (err) {
    errno = err;
    return -1;
  }
  return 0;
}

char *kiln_read_file(const char *path, size_t *out_len) {
  kiln_buf_t b;
  kiln_buf_init(&b);
  if (kiln_buf_append_file(&b, path) != 0) {
    int err = errno;
    kiln_buf_deinit(&b);
    errno = err;
    return NULL;
  }
  if (out_len) *out_len = b.len;
  return kiln_buf_take(&b);
}

/* Directories deeper than this are not descended into (each level holds one
 * descriptor and a stack frame); their removal fails with ELOOP. */
#define TREE_MAX_DEPTH 64

/* Removes `name` in `dir_fd` (`path` names it in messages): unlinked, or, when it
 * is a directory, opened without following a link, emptied through its own
 * descriptor and removed, so a link swapped in on the way is removed, never
 * followed. A directory of ours without write or search permission for us (a
 * tool made it 0500) gets them first. Goes on past failures; returns the first.
 * scratch.c's remove_quiet_at is its async-signal-safe twin: keep them in step. */
static kiln_status_t remove_at(int dir_fd, const char *name, const char *path, int depth) {
  if (unlinkat(dir_fd, name, 0) == 0 || errno == ENOENT) return NULL;
  int unlink_err = errno;
  if (unlink_err != EISDIR && unlink_err != EPERM)
    return KILN_STATUS_ERRNO(unlink_err, "cannot remove %s", path);
  int fd = openat(dir_fd, name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
  if (fd < 0) {
    if (errno == ENOENT) return NULL;
    /* Not a directory after all (EPERM on a file, a link): unlinkat's reason. */
    int err = errno == ENOTDIR || errno == ELOOP ? unlink_err : errno;
    return KILN_STATUS_ERRNO(err, "cannot remove %s", path);
  }
  if (depth >= TREE_MAX_DEPTH) {
    close(fd);
    return KILN_STATUS_ERRNO(ELOOP, "cannot remove %s (nested too deep)", path);
  }
  struct stat st;
  if (fstat(fd, &st) == 0 && st.st_uid == geteuid() && (st.st_mode & 0700) != 0700) {
    (void)fchmod(fd, (st.st_mode & 07777) | 0700); /* failing, the removals below say why */
  }
  DIR *d = fdopendir(fd);
  if (!d) {
    int err = errno;
    close(fd);
    return KILN_STATUS_ERRNO(err, "cannot list %s to remove it", path);
  }
  kiln_status_t first = NULL;
  kiln_buf_t sub;
  kiln_buf_init(&sub);
  for (struct dirent *e; (e = readdir(d)) != NULL;) {
    if (!strcmp(e->d_name, ".") || !strcmp(e->d_name, "..")) continue;
    kiln_buf_clear(&sub);
    kiln_buf_appendf(&sub, "%s/%s", path, e->d_name);
    kiln_status_t st_sub = remove_at(dirfd(d), e->d_name, sub.data, depth + 1);
    if (st_sub && !first) {
      first = st_sub;
    } else {
      kiln_status_free(st_sub);
    }
  }
  kiln_buf_deinit(&sub);
  closedir(d);
  if (unlinkat(dir_fd, name, AT_REMOVEDIR) != 0 && errno != ENOENT && !first) {
    first = KILN_STATUS_ERRNO(errno, "cannot remove %s", path);
  }
  return first;
}

kiln_status_t kiln_file_tree_remove(const char *path) {
  size_t len = strlen(path);
  while (len > 1 && path[len - 1] == '/') len--; /* "dir/" is "dir" */
  const char *slash = memrchr(path, '/', len);
  kiln_buf_t parent, name;
  kiln_buf_init(&parent);
  kiln_buf_init(&name);
  if (!slash) {
    kiln_buf_append_str(&parent, ".");
  } else {
    kiln_buf_append(&parent, path, slash == path ? 1 : (size_t)(slash - path));
  }
  const char *base = slash ? slash + 1 : path;
  kiln_buf_append(&name, base, (size_t)(path + len - base));
  kiln_status_t st = NULL;
  if (name.len == 0 || !strcmp(name.data, ".") || !strcmp(name.data, "..")) {
    st = KILN_STATUS(KILN_STATUS_INVALID_ARGUMENT, "will not remove '%s': name a file or folder", path);
  } else {
    /* O_PATH: only search permission is needed on the folder, as for rm. */
    int dir_fd = open(parent.data, O_PATH | O_DIRECTORY | O_CLOEXEC);
    if (dir_fd >= 0) {
      st = remove_at(dir_fd, name.data, path, 0);
      close(dir_fd);
    } else if (errno != ENOENT) { /* ENOTDIR (under a file) is reported */
      st = KILN_STATUS_ERRNO(errno, "cannot remove %s", path);
    }
  }
  kiln_buf_deinit(&name);
  kiln_buf_deinit(&parent);
  return st;
}
