/* Whole files in and out (file.h). */
#include "base/file.h"

#include <errno.h>
#include <fcntl.h>
#include <ftw.h>
#include <inttypes.h>
#include <stdbool.h>
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

/* The first error of the removal in progress on this thread (nftw has no user
 * pointer). */
static _Thread_local int remove_errno;

static int remove_entry(const char *path, const struct stat *sb, int type, struct FTW *ftw) {
  (void)sb, (void)ftw;
  bool dir = type == FTW_DP || type == FTW_DNR;
  if ((dir ? rmdir(path) : unlink(path)) != 0 && errno != ENOENT && !remove_errno) remove_errno = errno;
  return 0; /* go on past what cannot be removed */
}

int kiln_file_remove_tree(const char *path) {
  remove_errno = 0;
  nftw(path, remove_entry, 16, FTW_DEPTH | FTW_PHYS);
  struct stat sb;
  if (lstat(path, &sb) != 0) return errno == ENOENT ? 0 : -1; /* ENOTDIR: under a file */
  errno = remove_errno ? remove_errno : EBUSY;
  return -1;
}
