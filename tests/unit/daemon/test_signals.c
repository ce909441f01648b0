/* Unit tests for daemon/signals: with the loop's signals blocked in the calling
 * thread (as kilnd's main does), a process-directed signal runs its handler on
 * the signal thread, named kilnd-signals; one sent before the thread starts stays
 * pending and runs once it does; after kilnd_signal_thread_stop one stays pending
 * again; and while the thread waits, only the loop's four signals are unblocked
 * there (a signal the caller blocked for itself stays blocked). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <signal.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "daemon/signals.h"

static atomic_int handled_tid; /* the thread the last SIGHUP handler ran on; 0: none */

/* The thread a test started and has not stopped: teardown stops it, so that a
 * failed assertion does not leave it running into the next test. */
static kilnd_signal_thread_t *running;

static void start(void) {
  assert_null(running);
  assert_null(kilnd_signal_thread_start(&running));
  assert_non_null(running);
}

static void stop(void) {
  kilnd_signal_thread_stop(running);
  running = NULL;
}

static void on_sighup(int sig) {
  (void)sig;
  atomic_store(&handled_tid, (int)gettid());
}

static void sleep_ms(long ms) {
  struct timespec ts = {ms / 1000, (ms % 1000) * 1000000L};
  nanosleep(&ts, NULL);
}

/* The tid a SIGHUP handler ran on, waiting up to 5 s; 0 if none ran. */
static int wait_handled(void) {
  for (int i = 0; i < 500 && atomic_load(&handled_tid) == 0; i++) sleep_ms(10);
  return atomic_load(&handled_tid);
}

static bool sighup_pending(void) {
  sigset_t pending;
  sigpending(&pending);
  return sigismember(&pending, SIGHUP) == 1;
}

/* Blocks the loop's signals and SIGUSR1 here, and handles SIGHUP. */
static int setup(void **state) {
  (void)state;
  sigset_t mask;
  kilnd_loop_signals(&mask);
  sigaddset(&mask, SIGUSR1);
  pthread_sigmask(SIG_BLOCK, &mask, NULL);
  struct sigaction sa;
  memset(&sa, 0, sizeof sa);
  sa.sa_handler = on_sighup;
  sigemptyset(&sa.sa_mask);
  sigaction(SIGHUP, &sa, NULL);
  atomic_store(&handled_tid, 0);
  return 0;
}

/* Stops a thread left running and takes any SIGHUP still pending, so that the
 * next test starts clean. */
static int teardown(void **state) {
  (void)state;
  stop();
  sigset_t hup;
  sigemptyset(&hup);
  sigaddset(&hup, SIGHUP);
  struct timespec none = {0, 0};
  while (sigtimedwait(&hup, NULL, &none) == SIGHUP) {
  }
  signal(SIGHUP, SIG_DFL);
  return 0;
}

static void test_handler_runs_on_the_signal_thread(void **state) {
  (void)state;
  start();
  assert_int_equal(kill(getpid(), SIGHUP), 0);
  int tid = wait_handled();
  assert_int_not_equal(tid, 0);
  assert_int_not_equal(tid, (int)gettid());
  char path[64], name[32] = "";
  snprintf(path, sizeof path, "/proc/self/task/%d/comm", tid);
  FILE *f = fopen(path, "r");
  assert_non_null(f);
  assert_non_null(fgets(name, sizeof name, f));
  fclose(f);
  assert_string_equal(name, "kilnd-signals\n");
  stop();
}

static void test_pending_before_start_and_after_stop(void **state) {
  (void)state;
  assert_int_equal(kill(getpid(), SIGHUP), 0);
  sleep_ms(50);
  assert_int_equal(atomic_load(&handled_tid), 0);
  assert_true(sighup_pending());

  start();
  assert_int_not_equal(wait_handled(), 0); /* the pending one, once the thread waits */
  assert_false(sighup_pending());
  stop();

  atomic_store(&handled_tid, 0);
  assert_int_equal(kill(getpid(), SIGHUP), 0);
  sleep_ms(50);
  assert_int_equal(atomic_load(&handled_tid), 0);
  assert_true(sighup_pending());
}

/* The signal thread's blocked set, read from /proc while it waits in ppoll. */
static uint64_t thread_sigblk(int tid) {
  char path[64], line[256];
  snprintf(path, sizeof path, "/proc/self/task/%d/status", tid);
  FILE *f = fopen(path, "r");
  assert_non_null(f);
  uint64_t mask = UINT64_MAX;
  while (fgets(line, sizeof line, f)) {
    if (strncmp(line, "SigBlk:", 7) == 0) mask = strtoull(line + 7, NULL, 16);
  }
  fclose(f);
  return mask;
}

static void test_only_the_loop_signals_are_unblocked_there(void **state) {
  (void)state;
  start();
  assert_int_equal(kill(getpid(), SIGHUP), 0);
  int tid = wait_handled(); /* the thread's tid; it is back in ppoll soon after */
  assert_int_not_equal(tid, 0);
  uint64_t bit_hup = 1ull << (SIGHUP - 1), mask = UINT64_MAX;
  for (int i = 0; i < 500 && (mask = thread_sigblk(tid)) & bit_hup; i++) sleep_ms(10);
  int loop_signals[] = {SIGTERM, SIGINT, SIGHUP, SIGCHLD};
  for (size_t i = 0; i < sizeof loop_signals / sizeof loop_signals[0]; i++) {
    assert_int_equal(mask & (1ull << (loop_signals[i] - 1)), 0);
  }
  assert_int_not_equal(mask & (1ull << (SIGUSR1 - 1)), 0);
  stop();
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test_setup_teardown(test_handler_runs_on_the_signal_thread, setup, teardown),
      cmocka_unit_test_setup_teardown(test_pending_before_start_and_after_stop, setup, teardown),
      cmocka_unit_test_setup_teardown(test_only_the_loop_signals_are_unblocked_there, setup, teardown),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
