/* compiler/fanout.c: back halves in forked children. A child that exits inside
 * "LLVM" (as LLVM does on a fatal error, after printing to stderr) or crashes
 * fails only its own target, with what it printed in the message; the other
 * targets' results arrive intact; and this holds at -j 1 too, where the caller's
 * process would otherwise have died with the child's target. The callback is the
 * seam: it stands in for a target's back half. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "base/alloc.h"
#include "compiler/internal.h"
#include "compiler/targets.h"

/* Target 0 compiles, 1 exits as LLVM does on a fatal error, 2 crashes, 3 compiles. */
static void back_half(void *user, size_t index, kiln_compiler_target_output_t *out) {
  (void)user;
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
static void ready(void *user, size_t index) {
  (void)user;
  (void)index;
  ready_count++;
}

static void run(size_t jobs) {
  kiln_compiler_target_output_t outs[4] = {0};
  for (size_t i = 0; i < 4; i++) outs[i].target = kiln_compiler_target_at(i);
  ready_count = 0;
  kiln_compiler_fanout_run(4, jobs, back_half, NULL, outs, "model.mlir", ready);
  assert_int_equal(ready_count, 4);
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

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_one_job),
      cmocka_unit_test(test_parallel),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
