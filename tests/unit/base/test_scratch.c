/* Unit tests for base/scratch: each case runs in a forked child, as the folder
 * is once per process. The folder is made under TMPDIR with mode 0700 and
 * becomes TMPDIR (put back at the removal); a second one is refused; it goes at
 * kiln_scratch_remove, at exit(), and on SIGTERM, SIGINT and SIGHUP (the process
 * still dies of the signal), with nested folders, a 0500 folder and a link to a
 * file outside (which survives) in it; a forked child that exits or is killed
 * leaves its parent's folder alone; a signal the process ignores stays ignored. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <errno.h>
#include <signal.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "base/file.h"
#include "base/scratch.h"
#include "tests/unit/support/testing.h"

static char *base;    /* the TMPDIR the children start with */
static char *outside; /* a file the folders link to */

static bool there(const char *path) {
  struct stat st;
  return lstat(path, &st) == 0;
}

/* What a child does with its folder, after making it and telling the parent its
 * path; returns the child's exit status (when it returns at all). */
typedef int (*child_fn_t)(const char *dir);

/* Runs `fn` in a child that makes its scratch folder first; the folder's path
 * in *out_dir (owned), the child's wait status returned. */
static int run_child(child_fn_t fn, char **out_dir) {
  int fds[2];
  assert_int_equal(pipe(fds), 0);
  pid_t pid = fork();
  assert_true(pid >= 0);
  if (pid == 0) {
    close(fds[0]);
    setenv("TMPDIR", base, 1);
    const char *dir = NULL;
    kiln_status_t st = kiln_scratch_make("kiln-test-scratch-", &dir);
    if (st) _exit(100);
    char line[4096];
    int n = snprintf(line, sizeof line, "%s\n", dir);
    if (write(fds[1], line, (size_t)n) != n) _exit(101);
    close(fds[1]);
    exit(fn(dir));
  }
  close(fds[1]);
  char line[4096] = {0};
  size_t got = 0;
  for (ssize_t n; got < sizeof line - 1 && (n = read(fds[0], line + got, sizeof line - 1 - got)) > 0;)
    got += (size_t)n;
  close(fds[0]);
  int wstatus = 0;
  assert_int_equal(waitpid(pid, &wstatus, 0), pid);
  char *nl = strchr(line, '\n');
  if (!nl) fail_msg("the child said nothing (wait status %d)", wstatus);
  *nl = '\0';
  *out_dir = strdup(line);
  return wstatus;
}

/* Fills the folder as tools would: nested files, a 0500 folder, a link out. */
static void fill(const char *dir) {
  char path[4096];
  snprintf(path, sizeof path, "%s/llvm", dir);
  if (mkdir(path, 0700) != 0) _exit(102);
  snprintf(path, sizeof path, "%s/llvm/bin", dir);
  if (mkdir(path, 0700) != 0) _exit(102);
  snprintf(path, sizeof path, "%s/llvm/bin/ld.lld", dir);
  if (symlink(outside, path) != 0) _exit(102);
  snprintf(path, sizeof path, "%s/kiln-ptxas-x", dir);
  kiln_status_t st = kiln_file_write(path, "ptx", 3, 0600);
  if (st) _exit(102);
  snprintf(path, sizeof path, "%s/locked", dir);
  if (mkdir(path, 0700) != 0) _exit(102);
  snprintf(path, sizeof path, "%s/locked/f", dir);
  st = kiln_file_write(path, "f", 1, 0600);
  if (st) _exit(102);
  snprintf(path, sizeof path, "%s/locked", dir);
  if (chmod(path, 0500) != 0) _exit(102);
}

static int make_checks(const char *dir) {
  struct stat st;
  if (lstat(dir, &st) != 0 || !S_ISDIR(st.st_mode) || (st.st_mode & 0777) != 0700) return 10;
  if (strncmp(dir, base, strlen(base)) != 0 || strncmp(dir + strlen(base), "/kiln-test-scratch-", 19) != 0)
    return 11;
  const char *tmp = getenv("TMPDIR");
  if (!tmp || strcmp(tmp, dir) != 0) return 12; /* its own TMPDIR now */
  const char *again = NULL;
  kiln_status_t second = kiln_scratch_make("x-", &again);
  if (kiln_status_consume_code(second) != KILN_STATUS_FAILED_PRECONDITION) return 13;
  fill(dir);
  kiln_status_t removed = kiln_scratch_remove();
  if (removed) return 14;
  if (there(dir)) return 15;
  tmp = getenv("TMPDIR");
  if (!tmp || strcmp(tmp, base) != 0) return 16; /* put back */
  if (kiln_scratch_remove()) return 17;          /* nothing the second time */
  return 0;
}

static void test_make_and_remove(void **state) {
  (void)state;
  char *dir = NULL;
  int ws = run_child(make_checks, &dir);
  assert_true(WIFEXITED(ws));
  assert_int_equal(WEXITSTATUS(ws), 0);
  assert_false(there(dir));
  free(dir);
}

static int fill_and_exit(const char *dir) {
  fill(dir);
  return 7; /* through exit(): the atexit handler */
}

static void test_removed_at_exit(void **state) {
  (void)state;
  char *dir = NULL;
  int ws = run_child(fill_and_exit, &dir);
  assert_true(WIFEXITED(ws));
  assert_int_equal(WEXITSTATUS(ws), 7);
  assert_false(there(dir));
  assert_true(there(outside));
  free(dir);
}

static int signal_to_raise;

static int fill_and_raise(const char *dir) {
  fill(dir);
  raise(signal_to_raise);
  return 20; /* not reached: the signal ends the process */
}

static void test_removed_on_signals(void **state) {
  (void)state;
  const int sigs[] = {SIGTERM, SIGINT, SIGHUP};
  for (size_t i = 0; i < sizeof sigs / sizeof *sigs; i++) {
    signal_to_raise = sigs[i];
    char *dir = NULL;
    int ws = run_child(fill_and_raise, &dir);
    assert_true(WIFSIGNALED(ws)); /* it still dies of the signal */
    assert_int_equal(WTERMSIG(ws), sigs[i]);
    assert_false(there(dir));
    assert_true(there(outside));
    free(dir);
  }
}

/* A forked child of the process that made the folder: killed, then exiting;
 * neither takes the folder, which goes when its maker exits. */
static int children_leave_it(const char *dir) {
  fill(dir);
  for (int how = 0; how < 2; how++) {
    pid_t pid = fork();
    if (pid < 0) return 30;
    if (pid == 0) {
      if (how == 0) raise(SIGTERM);
      exit(0);
    }
    int ws = 0;
    if (waitpid(pid, &ws, 0) != pid) return 31;
    if (how == 0 && !(WIFSIGNALED(ws) && WTERMSIG(ws) == SIGTERM)) return 32;
    if (!there(dir)) return 33 + how;
  }
  return 0;
}

static void test_forked_children_leave_it(void **state) {
  (void)state;
  char *dir = NULL;
  int ws = run_child(children_leave_it, &dir);
  assert_true(WIFEXITED(ws));
  assert_int_equal(WEXITSTATUS(ws), 0);
  assert_false(there(dir));
  free(dir);
}

static int ignored_stays_ignored(const char *dir) {
  raise(SIGINT); /* ignored before the folder was made: still ignored */
  return there(dir) ? 0 : 40;
}

static void test_ignored_signal_stays_ignored(void **state) {
  (void)state;
  struct sigaction ign, old;
  memset(&ign, 0, sizeof ign);
  ign.sa_handler = SIG_IGN;
  assert_int_equal(sigaction(SIGINT, &ign, &old), 0); /* inherited by the child */
  char *dir = NULL;
  int ws = run_child(ignored_stays_ignored, &dir);
  assert_int_equal(sigaction(SIGINT, &old, NULL), 0);
  assert_true(WIFEXITED(ws));
  assert_int_equal(WEXITSTATUS(ws), 0);
  assert_false(there(dir)); /* and it went at exit */
  free(dir);
}

static void test_unusable_tmpdir(void **state) {
  (void)state;
  pid_t pid = fork();
  assert_true(pid >= 0);
  if (pid == 0) {
    setenv("TMPDIR", "/nonexistent/kiln-tmp", 1);
    const char *dir = NULL;
    kiln_status_t st = kiln_scratch_make("kiln-test-scratch-", &dir);
    int code = kiln_status_code(st) == KILN_STATUS_OK                              ? 50
               : !strstr(kiln_status_message(st), "TMPDIR=/nonexistent/kiln-tmp:") ? 51
               : !strstr(kiln_status_message(st), "set TMPDIR to a folder")        ? 52
               : strcmp(getenv("TMPDIR"), "/nonexistent/kiln-tmp") != 0            ? 53
               : dir != NULL                                                       ? 54
                                                                                   : 0;
    kiln_status_free(st);
    _exit(code);
  }
  int ws = 0;
  assert_int_equal(waitpid(pid, &ws, 0), pid);
  assert_true(WIFEXITED(ws));
  assert_int_equal(WEXITSTATUS(ws), 0);
}

/* A relative TMPDIR: the folder's path is absolute all the same, so the handler
 * finds it after a chdir. */
static int relative_then_chdir(const char *dir) {
  if (dir[0] != '/') return 60;
  if (chdir("/") != 0) return 61;
  raise(SIGTERM);
  return 62;
}

static void test_relative_tmpdir(void **state) {
  (void)state;
  char cwd[4096];
  assert_non_null(getcwd(cwd, sizeof cwd));
  assert_int_equal(chdir(base), 0);
  char *saved = base;
  base = (char *)"."; /* run_child's TMPDIR */
  char *dir = NULL;
  int ws = run_child(relative_then_chdir, &dir);
  base = saved;
  assert_int_equal(chdir(cwd), 0);
  assert_true(WIFSIGNALED(ws));
  assert_int_equal(WTERMSIG(ws), SIGTERM);
  assert_true(dir[0] == '/');
  assert_false(there(dir));
  free(dir);
}

static int setup(void **state) {
  (void)state;
  base = kiln_test_tmpdir("kiln-scratch");
  char path[4096];
  snprintf(path, sizeof path, "%s/outside", base);
  kiln_test_assert_ok(kiln_file_write(path, "keep", 4, 0600));
  outside = strdup(path);
  return 0;
}

static int teardown(void **state) {
  (void)state;
  kiln_test_remove_tree(base);
  free(outside);
  free(base);
  return 0;
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_make_and_remove),
      cmocka_unit_test(test_removed_at_exit),
      cmocka_unit_test(test_removed_on_signals),
      cmocka_unit_test(test_forked_children_leave_it),
      cmocka_unit_test(test_ignored_signal_stays_ignored),
      cmocka_unit_test(test_unusable_tmpdir),
      cmocka_unit_test(test_relative_tmpdir),
  };
  return cmocka_run_group_tests(tests, setup, teardown);
}
