/* Shared unit-test helpers (see testing.h).
 *
 * Invariant: the data generators are byte-for-byte the ones the tests were written
 * against (xorshift64*, seed * golden ratio + 1, the same word list), so a test's
 * data, and any digest or size it asserts on, never changes when it moves here.
 * Tree removal keeps going past failures (a half-removed fixture is the worst
 * outcome) and judges success by whether the path is gone.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <fcntl.h>
#include <signal.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "tests/unit/support/testing.h"

#include "base/file.h"

char *kiln_test_tmpdir_in(const char *parent, const char *prefix) {
  size_t size = strlen(parent) + strlen(prefix) + sizeof "/-XXXXXX";
  char *path = malloc(size);
  if (!path) return NULL;
  snprintf(path, size, "%s/%s-XXXXXX", parent, prefix);
  if (!mkdtemp(path)) {
    int saved = errno;
    free(path);
    errno = saved;
    return NULL;
  }
  return path;
}

char *kiln_test_tmpdir(const char *prefix) {
  const char *tmp = getenv("TMPDIR");
  return kiln_test_tmpdir_in(tmp && *tmp ? tmp : "/tmp", prefix);
}

int kiln_test_remove_tree(const char *path) {
  kiln_status_t st = kiln_file_tree_remove(path);
  if (!st) return 0;
  fprintf(stderr, "could not remove %s: %s\n", path, kiln_status_message(st));
  kiln_status_free(st);
  return -1;
}

uint64_t kiln_test_random_next(uint64_t *state) {
  /* xorshift64*: fast and deterministic, plenty for test data. */
  *state ^= *state >> 12;
  *state ^= *state << 25;
  *state ^= *state >> 27;
  return *state * 2685821657736338717ULL;
}

void kiln_test_fill_random(unsigned char *p, size_t len, uint64_t seed) {
  uint64_t s = seed * 0x9e3779b97f4a7c15ULL + 1;
  for (size_t i = 0; i < len; i++) p[i] = (unsigned char)(kiln_test_random_next(&s) >> 56);
}

void kiln_test_fill_compressible(unsigned char *p, size_t len, uint64_t seed) {
  static const char *const words[] = {
      "kiln ", "iree ",   "vmfb ", "module ", "func.func ", "%arg0 ", "tensor<4x4xf32> ",
      "\n",    "return ", "= "};
  uint64_t s = seed * 0x9e3779b97f4a7c15ULL + 1;
  size_t i = 0;
  while (i < len) {
    const char *w = words[kiln_test_random_next(&s) % (sizeof words / sizeof words[0])];
    for (; *w && i < len; w++) p[i++] = (unsigned char)*w;
  }
}

unsigned char *kiln_test_make_data(size_t len, bool compressible, uint64_t seed) {
  unsigned char *p = malloc(len ? len : 1);
  assert_non_null(p);
  if (compressible)
    kiln_test_fill_compressible(p, len, seed);
  else
    kiln_test_fill_random(p, len, seed);
  return p;
}

int kiln_test_run_in_child(void (*fn)(void)) {
  fflush(NULL);
  pid_t pid = fork();
  if (pid < 0) return -1;
  if (pid == 0) {
    int devnull = open("/dev/null", O_WRONLY);
    if (devnull >= 0) dup2(devnull, STDERR_FILENO);
    alarm(10);
    fn();
    _exit(0);
  }
  int wstatus = 0;
  if (waitpid(pid, &wstatus, 0) != pid) return -1;
  return wstatus;
}

void kiln_test_assert_died_of_sigabrt(int wstatus) {
  assert_true(wstatus != -1);
  if (!WIFSIGNALED(wstatus)) {
    fail_msg("child exited with status %d instead of dying of SIGABRT",
             WIFEXITED(wstatus) ? WEXITSTATUS(wstatus) : -1);
  }
  assert_int_equal(WTERMSIG(wstatus), SIGABRT);
}

void kiln_test_assert_ok_at(kiln_status_t status, const char *expr, const char *file, int line) {
  if (!status) return;
  print_error("%s: unexpected %s: %s (%s)\n", expr, kiln_status_code_name(kiln_status_code(status)),
              kiln_status_message(status), kiln_status_where(status));
  kiln_status_free(status);
  _fail(file, line);
}

void kiln_test_assert_code_at(kiln_status_t status, kiln_status_code_t want, const char *needle,
                              const char *expr, const char *file, int line) {
  kiln_status_code_t got = kiln_status_code(status);
  const char *message = status ? kiln_status_message(status) : "(ok)";
  bool failed = got != want || (needle && !strstr(message, needle));
  if (failed) {
    print_error("%s: want %s%s%s%s, got %s: %s\n", expr, kiln_status_code_name(want),
                needle ? " containing \"" : "", needle ? needle : "", needle ? "\"" : "",
                kiln_status_code_name(got), message);
  }
  kiln_status_free(status);
  if (failed) _fail(file, line);
}
