/* compiler/kernel_loops.c: accumulators carried through loops, only where no
 * other access may touch them; multiply-adds marked contractible. */
#include "compiler/kernel_loops.h"

#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <cmocka.h>
#include <mlir-c/IR.h>
#include <mlir-c/RegisterEverything.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/buf.h"

static int setup(void **state) {
  MlirDialectRegistry registry = mlirDialectRegistryCreate();
  mlirRegisterAllDialects(registry);
  MlirContext ctx = mlirContextCreate();
  mlirContextAppendDialectRegistry(ctx, registry);
  mlirContextLoadAllAvailableDialects(ctx);
  mlirDialectRegistryDestroy(registry);
  MlirContext *slot = malloc(sizeof *slot);
  *slot = ctx;
  *state = slot;
  return 0;
}

static int teardown(void **state) {
  MlirContext *slot = *state;
  mlirContextDestroy(*slot);
  free(slot);
  return 0;
}

static void print_cb(MlirStringRef s, void *user) { kiln_buf_append(user, s.data, s.length); }

/* The kernel @k of `body` (a gpu.func body over %a, %b: memref<64xf32> and
 * %c: memref<4xf32>), rewritten; returns the loops rewritten and the text. */
static int run(void **state, const char *body, bool distinct, kiln_buf_t *text) {
  MlirContext ctx = *(MlirContext *)*state;
  char src[4096];
  snprintf(src, sizeof src,
           "gpu.module @m {\n"
           "  gpu.func @k(%%a: memref<64xf32>, %%b: memref<64xf32>, %%c: memref<4xf32>) kernel {\n"
           "    %%c0 = arith.constant 0 : index\n"
           "    %%c1 = arith.constant 1 : index\n"
           "    %%c8 = arith.constant 8 : index\n"
           "    %%c64 = arith.constant 64 : index\n"
           "%s"
           "    gpu.return\n"
           "  }\n"
           "}\n",
           body);
  MlirModule module = mlirModuleCreateParse(ctx, mlirStringRefCreateFromCString(src));
  assert_false(mlirModuleIsNull(module));
  MlirOperation gm = mlirBlockGetFirstOperation(mlirModuleGetBody(module));
  MlirOperation k = mlirBlockGetFirstOperation(mlirRegionGetFirstBlock(mlirOperationGetRegion(gm, 0)));
  int n = kiln_compiler_kernel_accumulators_to_registers(k, distinct);
  assert_true(mlirOperationVerify(mlirModuleGetOperation(module)));
  kiln_compiler_kernels_allow_contraction(ctx, module);
  kiln_buf_init(text);
  mlirOperationPrint(mlirModuleGetOperation(module), print_cb, text);
  kiln_buf_append_char(text, '\0');
  mlirModuleDestroy(module);
  return n;
}

/* c[0] += a[i] * b[i] over i. */
static const char dot[] =
    "    scf.for %i = %c0 to %c64 step %c1 {\n"
    "      %x = memref.load %c[%c0] : memref<4xf32>\n"
    "      %y = memref.load %a[%i] : memref<64xf32>\n"
    "      %z = memref.load %b[%i] : memref<64xf32>\n"
    "      %m = arith.mulf %y, %z : f32\n"
    "      %s = arith.addf %x, %m : f32\n"
    "      memref.store %s, %c[%c0] : memref<4xf32>\n"
    "    }\n";

static void test_carried_when_arguments_are_distinct(void **state) {
  kiln_buf_t t;
  assert_int_equal(run(state, dot, true, &t), 1);
  assert_non_null(strstr(t.data, "iter_args"));
  /* one load before the loop, one store after it */
  const char *loop = strstr(t.data, "scf.for");
  const char *load = strstr(t.data, "memref.load %arg2");
  const char *store = strstr(t.data, "memref.store");
  assert_true(load && load < loop);
  assert_true(store && store > strstr(t.data, "scf.yield"));
  assert_non_null(strstr(t.data, "fastmath<contract>"));
  kiln_buf_deinit(&t);
}

static void test_arguments_that_may_alias_stay(void **state) {
  kiln_buf_t t;
  /* %c may be %a's buffer: a[i] could read what the last iteration stored. */
  assert_int_equal(run(state, dot, false, &t), 0);
  assert_null(strstr(t.data, "iter_args"));
  kiln_buf_deinit(&t);
}

static void test_own_allocation_is_distinct(void **state) {
  kiln_buf_t t;
  static const char body[] =
      "    %acc = memref.alloca() : memref<1xf32, #gpu.address_space<private>>\n"
      "    scf.for %i = %c0 to %c64 step %c1 {\n"
      "      %x = memref.load %acc[%c0] : memref<1xf32, #gpu.address_space<private>>\n"
      "      %y = memref.load %a[%i] : memref<64xf32>\n"
      "      %s = arith.addf %x, %y : f32\n"
      "      memref.store %s, %acc[%c0] : memref<1xf32, #gpu.address_space<private>>\n"
      "    }\n";
  assert_int_equal(run(state, body, false, &t), 1);
  kiln_buf_deinit(&t);
}

static void test_other_access_keeps_the_loop(void **state) {
  kiln_buf_t t;
  /* The loop also reads another element of %c: not carried. */
  static const char body[] =
      "    scf.for %i = %c0 to %c64 step %c1 {\n"
      "      %x = memref.load %c[%c0] : memref<4xf32>\n"
      "      %y = memref.load %c[%c1] : memref<4xf32>\n"
      "      %s = arith.addf %x, %y : f32\n"
      "      memref.store %s, %c[%c0] : memref<4xf32>\n"
      "    }\n";
  assert_int_equal(run(state, body, true, &t), 0);
  kiln_buf_deinit(&t);
  /* Indices that change with the loop: each iteration is another element. */
  static const char moving[] =
      "    scf.for %i = %c0 to %c8 step %c1 {\n"
      "      %j = arith.remui %i, %c1 : index\n"
      "      %x = memref.load %c[%j] : memref<4xf32>\n"
      "      %y = memref.load %a[%i] : memref<64xf32>\n"
      "      %s = arith.addf %x, %y : f32\n"
      "      memref.store %s, %c[%j] : memref<4xf32>\n"
      "    }\n";
  assert_int_equal(run(state, moving, true, &t), 0);
  kiln_buf_deinit(&t);
}

static void test_nest_carried_all_the_way_out(void **state) {
  kiln_buf_t t;
  static const char body[] =
      "    scf.for %i = %c0 to %c8 step %c1 {\n"
      "      scf.for %j = %c0 to %c8 step %c1 {\n"
      "        %x = memref.load %c[%c0] : memref<4xf32>\n"
      "        %y = memref.load %a[%j] : memref<64xf32>\n"
      "        %s = arith.addf %x, %y : f32\n"
      "        memref.store %s, %c[%c0] : memref<4xf32>\n"
      "      }\n"
      "    }\n";
  assert_int_equal(run(state, body, true, &t), 2);
  /* the load and store now sit outside both loops */
  const char *outer = strstr(t.data, "scf.for");
  assert_true(strstr(t.data, "memref.load %arg2") < outer);
  const char *last_yield = NULL;
  for (const char *p = strstr(t.data, "scf.yield"); p; p = strstr(p + 1, "scf.yield")) last_yield = p;
  assert_true(strstr(t.data, "memref.store") > last_yield);
  kiln_buf_deinit(&t);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_carried_when_arguments_are_distinct),
      cmocka_unit_test(test_arguments_that_may_alias_stay),
      cmocka_unit_test(test_own_allocation_is_distinct),
      cmocka_unit_test(test_other_access_keeps_the_loop),
      cmocka_unit_test(test_nest_carried_all_the_way_out),
  };
  return cmocka_run_group_tests(tests, setup, teardown);
}
