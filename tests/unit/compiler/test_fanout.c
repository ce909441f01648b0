/* compiler/fanout.c: back halves in forked children. A child that exits inside
 * "LLVM" (as LLVM does on a fatal error, after printing to stderr) or crashes
 * fails only its own target, with what it printed for that target in the
 * message; the other targets' results arrive intact, the ones after it from a
 * fresh child; and this holds at -j 1 too, where the caller's process would
 * otherwise have died with the child's target. A child compiles one target after
 * another: -j N forks N children, not one per target. The callback is the seam:
 * it stands in for a target's back half. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <signal.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "base/alloc.h"
#include "compiler/internal.h"
#include "compiler/targets.h"

/* Target 0 compiles (and complains on stderr), 1 exits as LLVM does on a fatal
 * error, 2 crashes, 3 compiles. */
static void back_half(void *user, size_t index, kiln_compiler_target_output_t *out) {
  (void)user;
  if (index == 0) fprintf(stderr, "warning: target zero's own noise\n");
  if (index == 1) {
    fprintf(stderr, "LLVM ERROR: no libcall available for ftanh\n");
    exit(1);
  }
  if (index == 2) {
    signal(SIGSEGV, SIG_DFL); /* cmocka's handler would catch it in the child */
    raise(SIGSEGV);
  }
  out->kernels = kiln_calloc(1, sizeof *out->kernels);
  out->n_kernels = 1;
  out->kernels[0].name = kiln_strdup(index == 0 ? "first" : "fourth");
  out->kernels[0].module_name = kiln_strdup("m");
  out->kernels[0].binary = (unsigned char *)kiln_strdup("device code");
  out->kernels[0].binary_len = 11;
}

static size_t ready_count;
static unsigned readied[16]; /* ready calls per target */
static void ready(void *user, size_t index) {
  (void)user;
  assert_true(index < 16);
  readied[index]++;
  ready_count++;
}

static void ready_reset(void) {
  ready_count = 0;
  memset(readied, 0, sizeof readied);
}

/* Every target of n readied exactly once. */
static void assert_each_ready_once(size_t n) {
  assert_int_equal(ready_count, n);
  for (size_t i = 0; i < n; i++) assert_int_equal(readied[i], 1);
}

static void run(size_t jobs) {
  kiln_compiler_target_output_t outs[4] = {0};
  for (size_t i = 0; i < 4; i++) outs[i].target = kiln_compiler_target_at(i);
  ready_reset();
  kiln_compiler_fanout_run(4, jobs, back_half, NULL, outs, "model.mlir", ready);
  assert_each_ready_once(4);
  assert_null(outs[0].status);
  assert_int_equal(outs[0].n_kernels, 1);
  assert_string_equal(outs[0].kernels[0].name, "first");
  assert_memory_equal(outs[0].kernels[0].binary, "device code", 11);
  assert_non_null(outs[1].status);
  assert_int_equal(kiln_status_code(outs[1].status), KILN_STATUS_INTERNAL);
  const char *msg = kiln_status_message(outs[1].status);
  if (!strstr(msg, "no libcall available for ftanh") || !strstr(msg, outs[1].target->id) ||
      !strstr(msg, "model.mlir")) {
    fail_msg("the fatal error's message does not name the cause, target and model: %s", msg);
  }
  if (strstr(msg, "target zero")) fail_msg("target 1's failure quotes what target 0 said: %s", msg);
  assert_non_null(outs[2].status);
  assert_non_null(strstr(kiln_status_message(outs[2].status), "crashed"));
  assert_null(outs[3].status);
  assert_string_equal(outs[3].kernels[0].name, "fourth");
  for (size_t i = 0; i < 4; i++) kiln_compiler_target_output_clear(&outs[i]);
}

static void test_one_job(void **state) {
  (void)state;
  run(1); /* the caller survives: every target ran in a child */
}

static void test_parallel(void **state) {
  (void)state;
  run(3);
}

/* Every target compiles and records the process it ran in. */
static void pid_back_half(void *user, size_t index, kiln_compiler_target_output_t *out) {
  (void)user;
  (void)index;
  char pid[32];
  snprintf(pid, sizeof pid, "%ld", (long)getpid());
  out->kernels = kiln_calloc(1, sizeof *out->kernels);
  out->n_kernels = 1;
  out->kernels[0].name = kiln_strdup("k");
  out->kernels[0].module_name = kiln_strdup(pid);
}

static size_t distinct_pids(size_t n, size_t jobs) {
  kiln_compiler_target_output_t outs[8] = {0};
  for (size_t i = 0; i < n; i++) outs[i].target = kiln_compiler_target_at(i);
  ready_reset();
  kiln_compiler_fanout_run(n, jobs, pid_back_half, NULL, outs, "model.mlir", ready);
  assert_each_ready_once(n);
  size_t distinct = 0;
  char self[32];
  snprintf(self, sizeof self, "%ld", (long)getpid());
  for (size_t i = 0; i < n; i++) {
    assert_null(outs[i].status);
    assert_int_equal(outs[i].n_kernels, 1);
    assert_string_not_equal(outs[i].kernels[0].module_name, self); /* never in the caller */
    size_t j = 0;
    while (j < i && strcmp(outs[j].kernels[0].module_name, outs[i].kernels[0].module_name) != 0) j++;
    distinct += j == i;
  }
  for (size_t i = 0; i < n; i++) kiln_compiler_target_output_clear(&outs[i]);
  return distinct;
}

static void test_children_take_several_targets(void **state) {
  (void)state;
  assert_int_equal(distinct_pids(8, 1), 1);
  assert_int_equal(distinct_pids(8, 2), 2);
  assert_int_equal(distinct_pids(3, 8), 3); /* no more children than targets */
}

/* After target 0's result, its child is killed while it waits for the next one
 * (as the OOM killer might): the target handed to the dead child runs in a fresh
 * one instead of failing. */
static kiln_compiler_target_output_t *killer_outs;
static void ready_and_kill(void *user, size_t index) {
  ready(user, index);
  if (index != 0) return;
  pid_t pid = (pid_t)atol(killer_outs[0].kernels[0].module_name);
  assert_true(pid > 0 && pid != getpid());
  kill(pid, SIGKILL);
}

static void test_child_killed_while_idle(void **state) {
  (void)state;
  kiln_compiler_target_output_t outs[3] = {0};
  for (size_t i = 0; i < 3; i++) outs[i].target = kiln_compiler_target_at(i);
  killer_outs = outs;
  ready_reset();
  kiln_compiler_fanout_run(3, 1, pid_back_half, NULL, outs, "model.mlir", ready_and_kill);
  assert_each_ready_once(3);
  for (size_t i = 0; i < 3; i++) {
    if (outs[i].status) fail_msg("target %zu: %s", i, kiln_status_message(outs[i].status));
  }
  assert_string_not_equal(outs[0].kernels[0].module_name, outs[1].kernels[0].module_name);
  for (size_t i = 0; i < 3; i++) kiln_compiler_target_output_clear(&outs[i]);
}

/* Results larger than one read of the parent's (64 KiB) arrive whole. */
static void big_back_half(void *user, size_t index, kiln_compiler_target_output_t *out) {
  (void)user;
  size_t len = ((size_t)1 << 20) + index;
  out->kernels = kiln_calloc(1, sizeof *out->kernels);
  out->n_kernels = 1;
  out->kernels[0].name = kiln_strdup("big");
  out->kernels[0].module_name = kiln_strdup("m");
  out->kernels[0].binary = kiln_malloc(len);
  for (size_t i = 0; i < len; i++) out->kernels[0].binary[i] = (unsigned char)(i * 7 + index);
  out->kernels[0].binary_len = len;
}

static void test_large_results(void **state) {
  (void)state;
  kiln_compiler_target_output_t outs[3] = {0};
  for (size_t i = 0; i < 3; i++) outs[i].target = kiln_compiler_target_at(i);
  ready_reset();
  kiln_compiler_fanout_run(3, 2, big_back_half, NULL, outs, "model.mlir", ready);
  assert_each_ready_once(3);
  for (size_t t = 0; t < 3; t++) {
    assert_null(outs[t].status);
    assert_int_equal(outs[t].kernels[0].binary_len, ((size_t)1 << 20) + t);
    for (size_t i = 0; i < outs[t].kernels[0].binary_len; i++) {
      if (outs[t].kernels[0].binary[i] != (unsigned char)(i * 7 + t)) fail_msg("target %zu byte %zu", t, i);
    }
  }
  for (size_t i = 0; i < 3; i++) kiln_compiler_target_output_clear(&outs[i]);
}

/* The pipe the hanging back halves report their pids on. */
static int pid_pipe[2];

static void hanging_half(void *user, size_t index, kiln_compiler_target_output_t *out) {
  (void)user;
  (void)index;
  (void)out;
  pid_t me = getpid();
  if (write(pid_pipe[1], &me, sizeof me) != sizeof me) _exit(1);
  sleep(60);
}

static bool running(pid_t pid) {
  char path[64], stat_line[512];
  snprintf(path, sizeof path, "/proc/%d/stat", (int)pid);
  FILE *f = fopen(path, "r");
  if (!f) return false;
  bool got = fgets(stat_line, sizeof stat_line, f) != NULL;
  fclose(f);
  const char *paren = got ? strrchr(stat_line, ')') : NULL;
  return paren && paren[1] == ' ' && paren[2] != 'Z';
}

/* A process killed while its back halves compile (kilnc stopped by a signal, a
 * worker killed by kilnd) takes them with it: they do not go on compiling for
 * no one (here they would sleep a minute). */
static void test_children_die_with_their_parent(void **state) {
  (void)state;
  assert_int_equal(pipe(pid_pipe), 0);
  pid_t parent = fork();
  assert_true(parent >= 0);
  if (parent == 0) {
    close(pid_pipe[0]);
    kiln_compiler_target_output_t outs[2] = {0};
    for (size_t i = 0; i < 2; i++) outs[i].target = kiln_compiler_target_at(i);
    kiln_compiler_fanout_run(2, 2, hanging_half, NULL, outs, "model.mlir", NULL);
    _exit(0);
  }
  close(pid_pipe[1]);
  pid_t halves[2];
  for (size_t i = 0; i < 2; i++)
    assert_int_equal(read(pid_pipe[0], &halves[i], sizeof halves[i]), sizeof halves[i]);
  close(pid_pipe[0]);
  assert_int_equal(kill(parent, SIGKILL), 0);
  int ws = 0;
  assert_int_equal(waitpid(parent, &ws, 0), parent);
  for (int tries = 0; tries < 500 && (running(halves[0]) || running(halves[1])); tries++) usleep(10000);
  assert_false(running(halves[0]));
  assert_false(running(halves[1]));
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_one_job),
      cmocka_unit_test(test_parallel),
      cmocka_unit_test(test_children_take_several_targets),
      cmocka_unit_test(test_child_killed_while_idle),
      cmocka_unit_test(test_large_results),
      cmocka_unit_test(test_children_die_with_their_parent),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
