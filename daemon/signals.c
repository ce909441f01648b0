/* The signal thread; see signals.h. */
#include "daemon/signals.h"

#include <errno.h>
#include <poll.h>
#include <pthread.h>
#include <string.h>
#include <sys/eventfd.h>
#include <time.h>
#include <unistd.h>

#include "base/alloc.h"

struct kilnd_signal_thread_s {
  pthread_t thread;
  int stop_fd; /* eventfd: readable once kilnd_signal_thread_stop asks */
};

void kilnd_loop_signals(sigset_t *out_set) {
  sigemptyset(out_set);
  sigaddset(out_set, SIGTERM);
  sigaddset(out_set, SIGINT);
  sigaddset(out_set, SIGHUP);
  sigaddset(out_set, SIGCHLD);
}

static void *signal_thread_main(void *arg) {
  kilnd_signal_thread_t *t = arg;
  pthread_setname_np(pthread_self(), "kilnd-signals"); /* in stacks, and in test_daemon's mask check */
  /* This thread's mask, less the loop's signals: ppoll takes it for the wait
   * only, so a handler (libuv's: a write to the loop's pipe) runs here and the
   * wait ends with EINTR. */
  sigset_t waiting, loop_signals;
  pthread_sigmask(SIG_BLOCK, NULL, &waiting);
  kilnd_loop_signals(&loop_signals);
  for (int s = 1; s < NSIG; s++) {
    if (sigismember(&loop_signals, s) == 1) sigdelset(&waiting, s);
  }
  struct pollfd stop = {.fd = t->stop_fd, .events = POLLIN};
  for (;;) {
    if (ppoll(&stop, 1, NULL, &waiting) > 0) return NULL; /* asked to stop */
    /* EINTR: a handler ran. Anything else (none is expected with one fd and no
     * timeout) must not end the thread: every other thread blocks the signals. */
    if (errno != EINTR) nanosleep(&(struct timespec){0, 10 * 1000 * 1000}, NULL);
  }
}

kiln_status_t kilnd_signal_thread_start(kilnd_signal_thread_t **out_thread) {
  *out_thread = NULL;
  kilnd_signal_thread_t *t = kiln_calloc(1, sizeof *t);
  t->stop_fd = eventfd(0, EFD_CLOEXEC);
  if (t->stop_fd < 0) {
    int err = errno;
    kiln_free(t);
    return KILN_STATUS(KILN_STATUS_INTERNAL, "cannot make the signal thread's eventfd: %s", strerror(err));
  }
  int err = pthread_create(&t->thread, NULL, signal_thread_main, t);
  if (err != 0) {
    close(t->stop_fd);
    kiln_free(t);
    return KILN_STATUS(KILN_STATUS_INTERNAL, "cannot start the signal thread: %s", strerror(err));
  }
  *out_thread = t;
  return NULL;
}

void kilnd_signal_thread_stop(kilnd_signal_thread_t *t) {
  if (!t) return;
  uint64_t one = 1;
  while (write(t->stop_fd, &one, sizeof one) < 0 && errno == EINTR) {
  }
  pthread_join(t->thread, NULL);
  close(t->stop_fd);
  kiln_free(t);
}
