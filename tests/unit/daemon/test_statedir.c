/* Unit tests for daemon/statedir: opening creates missing nested directories
 * (mode 0700) and leaves no probe file; relative and "~/" paths become absolute,
 * trailing slashes are dropped; a regular file at the path, or as a parent of it,
 * is FAILED_PRECONDITION; an empty path is INVALID_ARGUMENT; the lock file holds
 * our pid; a second open while the first holds the lock is FAILED_PRECONDITION
 * naming the holder's pid (checked both within this process, where flock locks
 * belong to open file descriptions, and from a forked child); after close it can
 * be opened again; publish_address writes "ADDR\n" atomically and close removes
 * it; close is safe on a zeroed struct and twice. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "base/status.h"
#include "daemon/statedir.h"
#include "tests/unit/support/testing.h"

/* ---- Fixture ------------------------------------------------------------- */

/* The group's temporary directory, resolved (getcwd reports resolved paths). */
static char tmpdir[256];
static int test_counter;

static int group_setup(void **state) {
  (void)state;
  char *made = kiln_test_tmpdir_in("/tmp", "kiln-statedir");
  if (!made) return -1;
  char resolved[PATH_MAX];
  bool ok = realpath(made, resolved) && strlen(resolved) < sizeof tmpdir;
  free(made);
  if (!ok) return -1;
  memcpy(tmpdir, resolved, strlen(resolved) + 1);
  return 0;
}

static int group_teardown(void **state) {
  (void)state;
  kiln_test_remove_tree(tmpdir);
  return 0;
}

/* Per test: a fresh, not yet existing path under the group directory. */
typedef struct fixture_s {
  char base[PATH_MAX]; /* exists, empty */
  kilnd_statedir_t dir;
} fixture_t;

static int setup(void **state) {
  fixture_t *f = calloc(1, sizeof *f);
  if (!f) return -1;
  snprintf(f->base, sizeof f->base, "%s/t%d", tmpdir, ++test_counter);
  if (mkdir(f->base, 0700) != 0) return -1;
  f->dir.path = NULL;
  f->dir.lock_fd = -1;
  *state = f;
  return 0;
}

static int teardown(void **state) {
  fixture_t *f = *state;
  kilnd_statedir_close(&f->dir);
  kiln_test_remove_tree(f->base);
  free(f);
  return 0;
}

#define assert_code kiln_test_assert_code

#define assert_ok   kiln_test_assert_ok

static void join(char *out, size_t size, const char *a, const char *b) {
  int n = snprintf(out, size, "%s/%s", a, b);
  assert_true(n > 0 && (size_t)n < size);
}

/* Reads a whole small file into `out` (NUL-terminated); returns its length or -1. */
static ssize_t read_file(const char *path, char *out, size_t size) {
  int fd = open(path, O_RDONLY | O_CLOEXEC);
  if (fd < 0) return -1;
  ssize_t n = read(fd, out, size - 1);
  close(fd);
  if (n >= 0) out[n] = '\0';
  return n;
}

static void write_file(const char *path, const char *text) {
  int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
  assert_true(fd >= 0);
  assert_int_equal(write(fd, text, strlen(text)), (ssize_t)strlen(text));
  close(fd);
}

static bool exists(const char *path) {
  struct stat sb;
  return lstat(path, &sb) == 0;
}

/* Names in `dir` other than "." and "..", written space-separated to `out`. */
static int list_dir(const char *dir, char *out, size_t size) {
  DIR *d = opendir(dir);
  assert_non_null(d);
  int count = 0;
  out[0] = '\0';
  struct dirent *e;
  while ((e = readdir(d))) {
    if (strcmp(e->d_name, ".") == 0 || strcmp(e->d_name, "..") == 0) continue;
    count++;
    size_t len = strlen(out);
    snprintf(out + len, size - len, "%s ", e->d_name);
  }
  closedir(d);
  return count;
}

/* ---- Creating and naming ------------------------------------------------- */

static void test_creates_missing_nested_dirs(void **state) {
  fixture_t *f = *state;
  char path[PATH_MAX];
  join(path, sizeof path, f->base, "a/b/c");
  assert_false(exists(path));
  assert_ok(kilnd_statedir_open(path, &f->dir));
  assert_string_equal(f->dir.path, path);
  assert_true(f->dir.lock_fd >= 0);

  struct stat sb;
  assert_int_equal(stat(path, &sb), 0);
  assert_true(S_ISDIR(sb.st_mode));
  assert_int_equal(sb.st_mode & 0777, 0700);
  char mid[PATH_MAX];
  join(mid, sizeof mid, f->base, "a/b");
  assert_int_equal(stat(mid, &sb), 0);
  assert_true(S_ISDIR(sb.st_mode));

  /* Only the lock file is left behind: the writability probe was removed. */
  char names[512];
  int n = list_dir(path, names, sizeof names);
  if (n != 1 || strcmp(names, "kilnd.lock ") != 0) fail_msg("unexpected files: %s", names);
}

static void test_existing_dir_is_used(void **state) {
  fixture_t *f = *state;
  char path[PATH_MAX], keep[PATH_MAX], buf[16];
  join(path, sizeof path, f->base, "existing");
  assert_int_equal(mkdir(path, 0755), 0);
  join(keep, sizeof keep, path, "keep.txt");
  write_file(keep, "data");
  assert_ok(kilnd_statedir_open(path, &f->dir));
  assert_string_equal(f->dir.path, path);
  /* Existing content is untouched. */
  assert_int_equal(read_file(keep, buf, sizeof buf), 4);
  assert_string_equal(buf, "data");
}

static void test_relative_path_becomes_absolute(void **state) {
  fixture_t *f = *state;
  char saved[PATH_MAX];
  assert_non_null(getcwd(saved, sizeof saved));
  assert_int_equal(chdir(f->base), 0);
  kiln_status_t st = kilnd_statedir_open("rel/state", &f->dir);
  int back = chdir(saved);
  assert_int_equal(back, 0);
  if (st) fail_msg("open rel/state: %s", kiln_status_message(st));

  char expected[PATH_MAX];
  join(expected, sizeof expected, f->base, "rel/state");
  assert_non_null(f->dir.path);
  assert_int_equal(f->dir.path[0], '/');
  assert_string_equal(f->dir.path, expected);
  /* Created relative to the cwd at open time, found from anywhere afterwards. */
  struct stat sb;
  assert_int_equal(stat(f->dir.path, &sb), 0);
  assert_true(S_ISDIR(sb.st_mode));
}

static void test_trailing_slashes_dropped(void **state) {
  fixture_t *f = *state;
  char path[PATH_MAX + 8], expected[PATH_MAX];
  join(expected, sizeof expected, f->base, "slashy");
  snprintf(path, sizeof path, "%s//", expected);
  assert_ok(kilnd_statedir_open(path, &f->dir));
  assert_string_equal(f->dir.path, expected);
}

static void test_home_relative_path(void **state) {
  fixture_t *f = *state;
  const char *old = getenv("HOME");
  char *saved = old ? strdup(old) : NULL;
  assert_int_equal(setenv("HOME", f->base, 1), 0);
  kiln_status_t st = kilnd_statedir_open("~/kiln-home", &f->dir);
  if (saved)
    setenv("HOME", saved, 1);
  else
    unsetenv("HOME");
  free(saved);
  if (st) fail_msg("open ~/kiln-home: %s", kiln_status_message(st));
  char expected[PATH_MAX];
  join(expected, sizeof expected, f->base, "kiln-home");
  assert_string_equal(f->dir.path, expected);
  assert_true(exists(expected));
}

/* ---- Refusals ------------------------------------------------------------ */

static void assert_cleared(const kilnd_statedir_t *dir) {
  assert_null(dir->path);
  assert_int_equal(dir->lock_fd, -1);
}

static void test_empty_path_rejected(void **state) {
  fixture_t *f = *state;
  assert_code(kilnd_statedir_open("", &f->dir), KILN_STATUS_INVALID_ARGUMENT);
  assert_cleared(&f->dir);
  assert_code(kilnd_statedir_open(NULL, &f->dir), KILN_STATUS_INVALID_ARGUMENT);
  assert_cleared(&f->dir);
}

static void test_path_is_regular_file(void **state) {
  fixture_t *f = *state;
  char path[PATH_MAX], buf[16];
  join(path, sizeof path, f->base, "file");
  write_file(path, "x");
  kilnd_statedir_t d = {.path = (char *)"garbage", .lock_fd = 1234}; /* cleared on entry */
  kiln_status_t st = kilnd_statedir_open(path, &d);
  assert_int_equal(kiln_status_code(st), KILN_STATUS_FAILED_PRECONDITION);
  assert_non_null(strstr(kiln_status_message(st), path)); /* names the path */
  kiln_status_free(st);
  assert_cleared(&d);
  assert_int_equal(read_file(path, buf, sizeof buf), 1); /* untouched */
}

static void test_parent_is_regular_file(void **state) {
  fixture_t *f = *state;
  char file[PATH_MAX], path[PATH_MAX];
  join(file, sizeof file, f->base, "file");
  write_file(file, "x");

  join(path, sizeof path, file, "state");
  assert_code(kilnd_statedir_open(path, &f->dir), KILN_STATUS_FAILED_PRECONDITION);
  assert_cleared(&f->dir);

  /* Deeper: the file is an ancestor, not the direct parent. */
  join(path, sizeof path, file, "x/y/state");
  assert_code(kilnd_statedir_open(path, &f->dir), KILN_STATUS_FAILED_PRECONDITION);
  assert_cleared(&f->dir);

  /* A file in the middle of a path that has to be created. */
  char mid[PATH_MAX];
  join(mid, sizeof mid, f->base, "made");
  assert_int_equal(mkdir(mid, 0700), 0);
  join(file, sizeof file, mid, "blocker");
  write_file(file, "x");
  join(path, sizeof path, mid, "blocker/state");
  assert_code(kilnd_statedir_open(path, &f->dir), KILN_STATUS_FAILED_PRECONDITION);
  assert_cleared(&f->dir);
}

static void test_unwritable_dir_rejected(void **state) {
  fixture_t *f = *state;
  if (geteuid() == 0) skip(); /* root writes anywhere */
  char path[PATH_MAX];
  join(path, sizeof path, f->base, "ro");
  assert_int_equal(mkdir(path, 0500), 0);
  kiln_status_t st = kilnd_statedir_open(path, &f->dir);
  int code = kiln_status_code(st);
  kiln_status_free(st);
  chmod(path, 0700);
  assert_int_equal(code, KILN_STATUS_PERMISSION_DENIED);
  assert_cleared(&f->dir);
}

/* ---- Lock ---------------------------------------------------------------- */

static void test_lock_file_holds_pid(void **state) {
  fixture_t *f = *state;
  char path[PATH_MAX], lock[PATH_MAX], content[64], expected[64];
  join(path, sizeof path, f->base, "state");
  assert_ok(kilnd_statedir_open(path, &f->dir));
  join(lock, sizeof lock, path, "kilnd.lock");
  assert_true(read_file(lock, content, sizeof content) > 0);
  snprintf(expected, sizeof expected, "%ld\n", (long)getpid());
  assert_string_equal(content, expected);

  /* The lock really is held: an independent flock attempt fails. */
  int fd = open(lock, O_RDWR | O_CLOEXEC);
  assert_true(fd >= 0);
  int rc = flock(fd, LOCK_EX | LOCK_NB);
  int err = errno;
  close(fd);
  assert_int_equal(rc, -1);
  assert_int_equal(err, EWOULDBLOCK);
}

static void test_stale_pid_overwritten(void **state) {
  fixture_t *f = *state;
  char path[PATH_MAX], lock[PATH_MAX], content[64], expected[64];
  join(path, sizeof path, f->base, "state");
  assert_int_equal(mkdir(path, 0700), 0);
  join(lock, sizeof lock, path, "kilnd.lock");
  /* A lock file left by a dead kilnd with a longer pid text, not locked. */
  write_file(lock, "999999999999\n");
  assert_ok(kilnd_statedir_open(path, &f->dir));
  assert_true(read_file(lock, content, sizeof content) > 0);
  snprintf(expected, sizeof expected, "%ld\n", (long)getpid());
  assert_string_equal(content, expected);
}

static void test_second_open_in_same_process_conflicts(void **state) {
  fixture_t *f = *state;
  char path[PATH_MAX], pid[32];
  join(path, sizeof path, f->base, "state");
  assert_ok(kilnd_statedir_open(path, &f->dir));

  /* flock locks belong to the open file description, so a second open(2) in this
   * process conflicts like another process would. */
  kilnd_statedir_t second = {.path = (char *)"garbage", .lock_fd = 99};
  kiln_status_t st = kilnd_statedir_open(path, &second);
  assert_int_equal(kiln_status_code(st), KILN_STATUS_FAILED_PRECONDITION);
  snprintf(pid, sizeof pid, "pid %ld", (long)getpid());
  if (!strstr(kiln_status_message(st), pid)) {
    fail_msg("message does not name the holder (%s): %s", pid, kiln_status_message(st));
  }
  assert_non_null(strstr(kiln_status_message(st), path));
  kiln_status_free(st);
  assert_cleared(&second);

  /* The failed attempt did not disturb the holder: its pid is still there. */
  char lock[PATH_MAX], content[64], expected[64];
  join(lock, sizeof lock, path, "kilnd.lock");
  read_file(lock, content, sizeof content);
  snprintf(expected, sizeof expected, "%ld\n", (long)getpid());
  assert_string_equal(content, expected);

  /* After close it can be opened again. */
  kilnd_statedir_close(&f->dir);
  assert_cleared(&f->dir);
  assert_ok(kilnd_statedir_open(path, &f->dir));
  assert_true(f->dir.lock_fd >= 0);
}

static void test_held_by_other_process(void **state) {
  fixture_t *f = *state;
  char path[PATH_MAX];
  join(path, sizeof path, f->base, "state");
  int ready[2], release[2];
  assert_int_equal(pipe(ready), 0);
  assert_int_equal(pipe(release), 0);
  fflush(NULL);
  pid_t child = fork();
  assert_true(child >= 0);
  if (child == 0) {
    close(ready[0]);
    close(release[1]);
    kilnd_statedir_t d;
    kiln_status_t cst = kilnd_statedir_open(path, &d);
    char ok = cst ? 'E' : 'K';
    if (write(ready[1], &ok, 1) != 1) _exit(2);
    char c;
    if (read(release[0], &c, 1) < 0) _exit(3); /* hold until the parent is done */
    if (!cst) kilnd_statedir_close(&d);
    _exit(cst ? 1 : 0);
  }
  close(ready[1]);
  close(release[0]);
  char ok = 0;
  assert_int_equal(read(ready[0], &ok, 1), 1);
  close(ready[0]);

  kiln_status_t st = ok == 'K' ? kilnd_statedir_open(path, &f->dir) : NULL;
  int code = kiln_status_code(st);
  char expected_pid[32];
  snprintf(expected_pid, sizeof expected_pid, "pid %ld", (long)child);
  bool names_pid = st && strstr(kiln_status_message(st), expected_pid) != NULL;
  char msg[512];
  snprintf(msg, sizeof msg, "%s", kiln_status_message(st));
  kiln_status_free(st);

  close(release[1]); /* let the child go */
  int wstatus;
  assert_int_equal(waitpid(child, &wstatus, 0), child);
  assert_int_equal(ok, 'K');
  assert_true(WIFEXITED(wstatus));
  assert_int_equal(WEXITSTATUS(wstatus), 0);
  assert_int_equal(code, KILN_STATUS_FAILED_PRECONDITION);
  if (!names_pid) fail_msg("message does not name %s: %s", expected_pid, msg);
  assert_cleared(&f->dir);

  /* The child is gone, and the kernel dropped its lock with it. */
  assert_ok(kilnd_statedir_open(path, &f->dir));
}

/* ---- Address file -------------------------------------------------------- */

static void test_publish_address(void **state) {
  fixture_t *f = *state;
  char path[PATH_MAX], addr[PATH_MAX], content[256];
  join(path, sizeof path, f->base, "state");
  assert_ok(kilnd_statedir_open(path, &f->dir));
  join(addr, sizeof addr, path, "kilnd.addr");
  assert_false(exists(addr));

  assert_ok(kilnd_statedir_publish_address(&f->dir, "127.0.0.1:40123"));
  assert_int_equal(read_file(addr, content, sizeof content), 16);
  assert_string_equal(content, "127.0.0.1:40123\n");

  /* Publishing again replaces the content, never appends. */
  assert_ok(kilnd_statedir_publish_address(&f->dir, "unix:/run/k.sock"));
  assert_int_equal(read_file(addr, content, sizeof content), 17);
  assert_string_equal(content, "unix:/run/k.sock\n");

  /* No temporary file is left behind. */
  char names[512];
  int n = list_dir(path, names, sizeof names);
  if (n != 2) fail_msg("expected kilnd.lock and kilnd.addr, found: %s", names);

  /* Close removes the address file (and only it). */
  char lock[PATH_MAX];
  join(lock, sizeof lock, path, "kilnd.lock");
  kilnd_statedir_close(&f->dir);
  assert_false(exists(addr));
  assert_true(exists(lock));
  assert_true(exists(path));
}

static void test_close_without_publish(void **state) {
  fixture_t *f = *state;
  char path[PATH_MAX];
  join(path, sizeof path, f->base, "state");
  assert_ok(kilnd_statedir_open(path, &f->dir));
  kilnd_statedir_close(&f->dir);
  assert_cleared(&f->dir);
  kilnd_statedir_close(&f->dir); /* twice is harmless */
  assert_cleared(&f->dir);
}

static void test_close_zeroed_struct_leaves_fd_0_alone(void **state) {
  (void)state;
  /* statedir.h: close is "Safe on a zeroed struct". A zeroed struct has
   * lock_fd == 0; closing fd 0 (stdin, or whatever the process keeps there) would
   * not be safe. Put a known file at fd 0 and check it survives. */
  int saved = dup(0);
  int devnull = open("/dev/null", O_RDONLY | O_CLOEXEC);
  assert_true(devnull >= 0);
  assert_int_equal(dup2(devnull, 0), 0);
  close(devnull);

  kilnd_statedir_t zeroed;
  memset(&zeroed, 0, sizeof zeroed);
  kilnd_statedir_close(&zeroed);
  bool fd0_open = fcntl(0, F_GETFD) != -1;

  if (saved >= 0) {
    dup2(saved, 0);
    close(saved);
  } else {
    close(0);
  }
  assert_null(zeroed.path);
  if (!fd0_open) fail_msg("kilnd_statedir_close on a zeroed struct closed fd 0");
}

int main(void) {
#define T(f) cmocka_unit_test_setup_teardown(f, setup, teardown)
  const struct CMUnitTest tests[] = {
      T(test_creates_missing_nested_dirs),
      T(test_existing_dir_is_used),
      T(test_relative_path_becomes_absolute),
      T(test_trailing_slashes_dropped),
      T(test_home_relative_path),
      T(test_empty_path_rejected),
      T(test_path_is_regular_file),
      T(test_parent_is_regular_file),
      T(test_unwritable_dir_rejected),
      T(test_lock_file_holds_pid),
      T(test_stale_pid_overwritten),
      T(test_second_open_in_same_process_conflicts),
      T(test_held_by_other_process),
      T(test_publish_address),
      T(test_close_without_publish),
      T(test_close_zeroed_struct_leaves_fd_0_alone),
  };
#undef T
  return cmocka_run_group_tests(tests, group_setup, group_teardown);
}
