/* Unit tests for compiler/vmfb/hostprog.c, from small hand-made plans: one
 * dispatch (the exact import list and calling conventions, checked against the
 * signatures IREE 3.12's HAL module exports; types; globals; rodata; __init;
 * reflection), dispatch + copy + constants (queue reads from rodata chained by
 * fences, embedded vs external constant data, barriers, blocks), two inputs and two results
 * across two functions sharing a kernel, the legacy HAL 0.6 form, a plan of
 * thousands of steps (registers must not grow with it), and every inconsistent
 * plan the generator must refuse. Every built module is also run through
 * kiln_vmfb_bytecode_verify. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/alloc.h"
#include "base/status.h"
#include "compiler/vmfb/bytecode.h"
#include "compiler/vmfb/hostprog.h"
#include "compiler/vmfb/plan.h"
#include "compiler/vmfb/vm.h"
#include "tests/unit/support/testing.h"

/* ---- helpers ---- */

#define assert_ok   kiln_test_assert_ok

#define assert_code kiln_test_assert_code

static const uint8_t EXE_BYTES[] = "CDA1 pretend executable flatbuffer";
static const char *const KERNELS[] = {"main_dispatch_0", "main_dispatch_1"};

static kiln_vmfb_host_executable_t executable(void) {
  return (kiln_vmfb_host_executable_t){
      .format = "cuda-nvptx-fb",
      .data = EXE_BYTES,
      .len = sizeof EXE_BYTES,
      .kernels = KERNELS,
      .n_kernels = 2,
  };
}

static kiln_vmfb_tensor_type_t tensor(uint32_t element_type, uint32_t rank, int64_t d0, int64_t d1) {
  kiln_vmfb_tensor_type_t t = {.element_type = element_type, .rank = rank};
  t.dims[0] = d0;
  t.dims[1] = d1;
  return t;
}

static void verify_all(const kiln_vmfb_vm_module_t *m) {
  for (size_t f = 0; f < m->n_functions; f++) assert_ok(kiln_vmfb_bytecode_verify(m, f));
}

static void assert_zeroed(const kiln_vmfb_vm_module_t *m) {
  static const kiln_vmfb_vm_module_t zero;
  assert_memory_equal(m, &zero, sizeof zero);
}

static int import_index(const kiln_vmfb_vm_module_t *m, const char *name) {
  for (size_t i = 0; i < m->n_imports; i++) {
    if (strcmp(m->imports[i].full_name, name) == 0) return (int)i;
  }
  return -1;
}

static const kiln_vmfb_vm_function_t *function_named(const kiln_vmfb_vm_module_t *m, const char *name) {
  for (size_t f = 0; f < m->n_functions; f++) {
    if (m->functions[f].export_name && strcmp(m->functions[f].export_name, name) == 0) {
      return &m->functions[f];
    }
  }
  fail_msg("no exported function %s", name);
  return NULL;
}

/* How many calls (any call opcode) to import `name` the function makes. */
static int calls_to(const kiln_vmfb_vm_module_t *m, const kiln_vmfb_vm_function_t *fn, const char *name) {
  int ordinal = import_index(m, name);
  if (ordinal < 0) return 0;
  uint32_t callee = KILN_VMFB_IMPORT((uint32_t)ordinal);
  int n = 0;
  for (size_t i = 0; i + 5 <= fn->bytecode_len; i++) {
    uint8_t op = fn->bytecode[i];
    if (op != 0x58 && op != 0x59 && op != 0x87 && op != 0x88) continue;
    uint32_t v = (uint32_t)fn->bytecode[i + 1] | (uint32_t)fn->bytecode[i + 2] << 8 |
                 (uint32_t)fn->bytecode[i + 3] << 16 | (uint32_t)fn->bytecode[i + 4] << 24;
    if (v == callee) n++;
  }
  return n;
}

/* IREE 3.12 does not release a frame's refs on a normal return: the function
 * must end with discard.refs of every ref register it does not return, then a
 * return that moves its results (MOVE bit). Checks exactly that tail. */
static void assert_clean_return(const kiln_vmfb_vm_function_t *fn, size_t n_results) {
  const uint8_t *c = fn->bytecode;
  size_t len = fn->bytecode_len;
  size_t list = len - 2 * n_results - 2; /* the return's count */
  assert_int_equal(c[list] | c[list + 1] << 8, n_results);
  for (size_t i = 0; i < n_results; i++) {
    assert_int_equal(c[list + 3 + 2 * i] & 0xC0, 0xC0); /* ref + MOVE */
  }
  size_t ret = c[list - 1] == 0x5A ? list - 1 : list - 2;
  assert_int_equal(c[ret], 0x5A);
  size_t dead = fn->ref_register_count - n_results;
  size_t discard_list = ret - 2 * dead - 2;
  assert_int_equal(c[discard_list] | c[discard_list + 1] << 8, dead);
  size_t discard = c[discard_list - 1] == 0x85 ? discard_list - 1 : discard_list - 2;
  assert_int_equal(c[discard], 0x85);
}

static int rodata_find(const kiln_vmfb_vm_module_t *m, const void *data, size_t len) {
  for (size_t i = 0; i < m->n_rodata; i++) {
    if (m->rodata[i].len == len && memcmp(m->rodata[i].data, data, len) == 0) return (int)i;
  }
  return -1;
}

static int rodata_string(const kiln_vmfb_vm_module_t *m, const char *s) {
  return rodata_find(m, s, strlen(s));
}

/* The signatures IREE 3.12's HAL module exports (runtime/src/iree/modules/hal/
 * exports.inl: EXPORT_FN(name, fn, args, results)); an import's cconv must be
 * exactly "0" args "_" results or the context refuses the module. */
static const struct {
  const char *name, *args, *results;
} HAL_0_7_EXPORTS[] = {
    {"hal.allocator.allocate", "rIiiI", "r"},
    {"hal.buffer.assert", "rrrIii", "v"},
    {"hal.buffer.load", "rIi", "i"},
    {"hal.buffer.store", "irIi", "v"},
    {"hal.buffer_view.assert", "rriiCID", "v"},
    {"hal.buffer_view.buffer", "r", "r"},
    {"hal.buffer_view.create", "rIIiiCID", "r"},
    {"hal.buffer_view.dim", "ri", "I"},
    {"hal.command_buffer.copy_buffer", "riirIrIII", "v"},
    {"hal.command_buffer.create", "riiIi", "r"},
    {"hal.command_buffer.dispatch", "rrIiiiICiDCiirIID", "v"},
    {"hal.command_buffer.execution_barrier", "riiI", "v"},
    {"hal.command_buffer.finalize", "r", "v"},
    {"hal.command_buffer.update_buffer", "rrIrIIiI", "v"},
    {"hal.device.allocator", "r", "r"},
    {"hal.device.queue.execute", "rIrrrI", "v"},
    {"hal.device.queue.read", "rIrrrIrIII", "v"},
    {"hal.devices.get", "i", "r"},
    {"hal.ex.file.from_memory", "rIirIIi", "r"},
    {"hal.executable.create", "rIrrr", "r"},
    {"hal.executable.lookup.function", "rr", "I"},
    {"hal.fence.await", "iICrD", "i"},
    {"hal.fence.create", "rI", "r"},
};

static void assert_imports_match_hal(const kiln_vmfb_vm_module_t *m, uint32_t hal_version) {
  for (size_t i = 0; i < m->n_imports; i++) {
    const kiln_vmfb_vm_import_t *imp = &m->imports[i];
    assert_int_equal(imp->flags, 1); /* REQUIRED */
    if (i > 0) assert_true(strcmp(m->imports[i - 1].full_name, imp->full_name) < 0);
    bool found = false;
    for (size_t k = 0; k < sizeof HAL_0_7_EXPORTS / sizeof HAL_0_7_EXPORTS[0]; k++) {
      if (strcmp(HAL_0_7_EXPORTS[k].name, imp->full_name) != 0) continue;
      char want[64];
      snprintf(want, sizeof want, "0%s_%s", HAL_0_7_EXPORTS[k].args, HAL_0_7_EXPORTS[k].results);
      if (hal_version == 6 && strcmp(imp->full_name, "hal.command_buffer.dispatch") == 0) {
        /* 3.4 .. 3.11: an i32 export ordinal instead of the i64 function id. */
        snprintf(want, sizeof want, "0rriiiiICiDCiirIID_v");
      }
      assert_string_equal(imp->cconv, want);
      found = true;
    }
    if (!found) fail_msg("unexpected import %s", imp->full_name);
  }
}

/* ---- plans ---- */

/* main(tensor<4xf32>) -> tensor<4xf32>: one dispatch of kernel 0. */
typedef struct plan_a_s {
  kiln_vmfb_plan_t plan;
  kiln_vmfb_function_t fn;
  kiln_vmfb_tensor_type_t inputs[1];
  kiln_vmfb_buffer_t buffers[2];
  kiln_vmfb_step_t steps[1];
  kiln_vmfb_binding_t bindings[2];
  uint32_t constants[1];
  kiln_vmfb_result_t results[1];
} plan_a_t;

static void plan_a(plan_a_t *p) {
  memset(p, 0, sizeof *p);
  p->inputs[0] = tensor(KILN_VMFB_ELEMENT_FLOAT_32, 1, 4, 0);
  p->buffers[0] = (kiln_vmfb_buffer_t){.kind = KILN_VMFB_BUFFER_INPUT, .input = 0, .size_bytes = 16};
  p->buffers[1] = (kiln_vmfb_buffer_t){.kind = KILN_VMFB_BUFFER_TRANSIENT, .size_bytes = 16};
  p->bindings[0] = (kiln_vmfb_binding_t){.buffer = 0, .offset = 0, .length = 16, .read_only = true};
  p->bindings[1] = (kiln_vmfb_binding_t){.buffer = 1, .offset = 0, .length = 16};
  p->constants[0] = 4;
  p->steps[0] = (kiln_vmfb_step_t){.kind = KILN_VMFB_STEP_DISPATCH,
                                   .kernel = 0,
                                   .workgroups = {1, 1, 1},
                                   .bindings = p->bindings,
                                   .n_bindings = 2,
                                   .constants = p->constants,
                                   .n_constants = 1};
  p->results[0] = (kiln_vmfb_result_t){.buffer = 1, .offset = 0, .type = p->inputs[0]};
  p->fn = (kiln_vmfb_function_t){.name = "main",
                                 .inputs = p->inputs,
                                 .n_inputs = 1,
                                 .results = p->results,
                                 .n_results = 1,
                                 .buffers = p->buffers,
                                 .n_buffers = 2,
                                 .steps = p->steps,
                                 .n_steps = 1};
  p->plan = (kiln_vmfb_plan_t){.functions = &p->fn, .n_functions = 1};
}

static void test_one_dispatch(void **state) {
  (void)state;
  plan_a_t p;
  plan_a(&p);
  kiln_vmfb_host_executable_t exe = executable();
  kiln_vmfb_vm_module_t m;
  assert_ok(kiln_vmfb_host_program_build(&p.plan, &exe, NULL, &m));
  verify_all(&m);

  assert_string_equal(m.name, "module");
  assert_int_equal(m.version, 0);
  assert_int_equal(m.hal_minimum_version, 7);
  assert_int_equal(m.bytecode_version, 0x00110000);

  static const char *const types[] = {"i32",
                                      "i64",
                                      "!hal.allocator",
                                      "!hal.buffer",
                                      "!hal.buffer_view",
                                      "!hal.command_buffer",
                                      "!hal.device",
                                      "!hal.executable",
                                      "!hal.fence",
                                      "!vm.buffer"};
  assert_int_equal(m.n_types, 10);
  for (size_t t = 0; t < m.n_types; t++) assert_string_equal(m.types[t], types[t]);

  /* Exactly what one dispatch needs; no barrier, copy or update. */
  static const char *const imports[] = {"hal.allocator.allocate",
                                        "hal.buffer.assert",
                                        "hal.buffer_view.assert",
                                        "hal.buffer_view.buffer",
                                        "hal.buffer_view.create",
                                        "hal.command_buffer.create",
                                        "hal.command_buffer.dispatch",
                                        "hal.command_buffer.finalize",
                                        "hal.device.allocator",
                                        "hal.device.queue.execute",
                                        "hal.devices.get",
                                        "hal.executable.create",
                                        "hal.executable.lookup.function",
                                        "hal.fence.await",
                                        "hal.fence.create"};
  assert_int_equal(m.n_imports, sizeof imports / sizeof imports[0]);
  for (size_t i = 0; i < m.n_imports; i++) assert_string_equal(m.imports[i].full_name, imports[i]);
  assert_imports_match_hal(&m, 7);
  assert_string_equal(m.imports[import_index(&m, "hal.executable.create")].cconv, "0rIrrr_r");
  assert_string_equal(m.imports[import_index(&m, "hal.executable.lookup.function")].cconv, "0rr_I");
  assert_string_equal(m.imports[import_index(&m, "hal.command_buffer.dispatch")].cconv,
                      "0rrIiiiICiDCiirIID_v");

  assert_int_equal(m.n_functions, 2);
  const kiln_vmfb_vm_function_t *fn = &m.functions[0];
  assert_string_equal(fn->name, "main");
  assert_string_equal(fn->export_name, "main");
  assert_string_equal(fn->cconv, "0r_r");
  assert_int_equal(fn->n_attrs, 1);
  assert_string_equal(fn->attrs[0].key, "iree.abi.declaration");
  assert_string_equal(fn->attrs[0].value,
                      "sync func @main(%input0: tensor<4xf32>) -> (%output0: tensor<4xf32>)");
  assert_int_equal(fn->requirements, KILN_VMFB_FEATURE_YIELD); /* fence.await may yield */
  assert_int_equal(fn->block_count, 5);                        /* entry, main, waited, failed, done */
  assert_int_equal(calls_to(&m, fn, "hal.command_buffer.dispatch"), 1);
  assert_int_equal(calls_to(&m, fn, "hal.fence.await"), 1);
  assert_int_equal(calls_to(&m, fn, "hal.fence.create"), 1);
  assert_int_equal(calls_to(&m, fn, "hal.allocator.allocate"), 1);
  assert_int_equal(calls_to(&m, fn, "hal.buffer_view.create"), 1);

  assert_clean_return(fn, 1);

  const kiln_vmfb_vm_function_t *init = &m.functions[1];
  assert_string_equal(init->export_name, "__init");
  assert_clean_return(init, 0);
  assert_string_equal(init->cconv, "0v_v");
  assert_int_equal(init->n_attrs, 0);
  assert_int_equal(calls_to(&m, init, "hal.devices.get"), 1);
  assert_int_equal(calls_to(&m, init, "hal.executable.create"), 1);
  assert_int_equal(calls_to(&m, init, "hal.executable.lookup.function"), 1);

  /* Globals: device, allocator, executable; one i64 function id. */
  assert_int_equal(m.global_ref_count, 3);
  assert_int_equal(m.global_bytes_capacity, 8);

  /* The executable is rodata 0, external, named like iree-compile's files. */
  assert_true(m.rodata[0].external);
  assert_string_equal(m.rodata[0].name, "module_cuda_nvptx_fb.fb");
  assert_int_equal(m.rodata[0].len, sizeof EXE_BYTES);
  assert_memory_equal(m.rodata[0].data, EXE_BYTES, sizeof EXE_BYTES);
  assert_int_equal(m.rodata[0].alignment, 16);
  assert_int_equal(rodata_string(&m, "cuda-nvptx-fb"), 1);
  assert_false(m.rodata[1].external);
  assert_true(rodata_string(&m, "main_dispatch_0") > 1);
  assert_true(rodata_string(&m, "input0") > 1);
  assert_int_equal(rodata_string(&m, "main_dispatch_1"), -1); /* not dispatched: not looked up */

  kiln_vmfb_vm_module_deinit(&m);
}

/* step(tensor<2x8xi32>) -> tensor<2x4xi32>: constants (one small, one past
 * 64 KiB, the largest command-buffer update), a dispatch of kernel 1, then a copy. */
typedef struct plan_b_s {
  kiln_vmfb_plan_t plan;
  kiln_vmfb_function_t fn;
  kiln_vmfb_tensor_type_t inputs[1];
  kiln_vmfb_buffer_t buffers[5];
  kiln_vmfb_step_t steps[2];
  kiln_vmfb_binding_t bindings[4];
  kiln_vmfb_result_t results[1];
  uint8_t small[64];
  uint8_t *big;
} plan_b_t;

enum { BIG = 70000 };

static void plan_b(plan_b_t *p) {
  memset(p, 0, sizeof *p);
  for (size_t i = 0; i < sizeof p->small; i++) p->small[i] = (uint8_t)i;
  p->big = malloc(BIG);
  assert_non_null(p->big);
  for (size_t i = 0; i < BIG; i++) p->big[i] = (uint8_t)(i * 7);
  p->inputs[0] = tensor(KILN_VMFB_ELEMENT_INT_32, 2, 2, 8);
  p->buffers[0] = (kiln_vmfb_buffer_t){.kind = KILN_VMFB_BUFFER_INPUT, .size_bytes = 64};
  p->buffers[1] = (kiln_vmfb_buffer_t){.kind = KILN_VMFB_BUFFER_CONSTANT, .data = p->small, .size_bytes = 64};
  p->buffers[2] = (kiln_vmfb_buffer_t){.kind = KILN_VMFB_BUFFER_CONSTANT, .data = p->big, .size_bytes = BIG};
  p->buffers[3] = (kiln_vmfb_buffer_t){.kind = KILN_VMFB_BUFFER_TRANSIENT, .size_bytes = 64};
  p->buffers[4] = (kiln_vmfb_buffer_t){.kind = KILN_VMFB_BUFFER_TRANSIENT, .size_bytes = 64};
  for (uint32_t b = 0; b < 4; b++) {
    p->bindings[b] = (kiln_vmfb_binding_t){.buffer = b, .length = p->buffers[b].size_bytes};
  }
  p->steps[0] = (kiln_vmfb_step_t){.kind = KILN_VMFB_STEP_DISPATCH,
                                   .kernel = 1,
                                   .workgroups = {4, 2, 1},
                                   .bindings = p->bindings,
                                   .n_bindings = 4};
  p->steps[1] =
      (kiln_vmfb_step_t){.kind = KILN_VMFB_STEP_COPY, .src = 3, .dst = 4, .src_offset = 32, .length = 32};
  p->results[0] = (kiln_vmfb_result_t){.buffer = 4, .type = tensor(KILN_VMFB_ELEMENT_INT_32, 2, 2, 4)};
  p->fn = (kiln_vmfb_function_t){.name = "step",
                                 .inputs = p->inputs,
                                 .n_inputs = 1,
                                 .results = p->results,
                                 .n_results = 1,
                                 .buffers = p->buffers,
                                 .n_buffers = 5,
                                 .steps = p->steps,
                                 .n_steps = 2};
  p->plan = (kiln_vmfb_plan_t){.functions = &p->fn, .n_functions = 1};
}

static void test_dispatch_copy_and_constants(void **state) {
  (void)state;
  plan_b_t p;
  plan_b(&p);
  kiln_vmfb_host_executable_t exe = executable();
  kiln_vmfb_host_options_t options = {.module_name = "net"};
  kiln_vmfb_vm_module_t m;
  assert_ok(kiln_vmfb_host_program_build(&p.plan, &exe, &options, &m));
  verify_all(&m);
  assert_string_equal(m.name, "net");
  assert_imports_match_hal(&m, 7);
  assert_true(import_index(&m, "hal.ex.file.from_memory") >= 0);
  assert_true(import_index(&m, "hal.device.queue.read") >= 0);
  assert_true(import_index(&m, "hal.command_buffer.copy_buffer") >= 0);
  assert_true(import_index(&m, "hal.command_buffer.execution_barrier") >= 0);

  const kiln_vmfb_vm_function_t *fn = function_named(&m, "step");
  assert_string_equal(fn->attrs[0].value,
                      "sync func @step(%input0: tensor<2x8xi32>) -> (%output0: tensor<2x4xi32>)");
  assert_int_equal(fn->block_count, 6); /* + the upload block */
  /* Each constant is read from its rodata by the queue, whatever its size. */
  assert_int_equal(calls_to(&m, fn, "hal.ex.file.from_memory"), 2);
  assert_int_equal(calls_to(&m, fn, "hal.device.queue.read"), 2);
  /* A fence per read (chained), and the submission's. */
  assert_int_equal(calls_to(&m, fn, "hal.fence.create"), 3);
  assert_int_equal(import_index(&m, "hal.command_buffer.update_buffer"), -1);
  /* Transients and constant buffers: 2 + 2. */
  assert_int_equal(calls_to(&m, fn, "hal.allocator.allocate"), 4);
  /* Between the dispatch and the copy. */
  assert_int_equal(calls_to(&m, fn, "hal.command_buffer.execution_barrier"), 1);
  assert_int_equal(calls_to(&m, fn, "hal.command_buffer.dispatch"), 1);
  assert_int_equal(calls_to(&m, fn, "hal.command_buffer.copy_buffer"), 1);

  /* Constant data: the small one embedded, the big one its own zip entry. */
  int small = rodata_find(&m, p.small, sizeof p.small);
  int big = rodata_find(&m, p.big, BIG);
  assert_true(small > 0);
  assert_true(big > 0);
  assert_false(m.rodata[small].external);
  assert_true(m.rodata[big].external);
  assert_string_equal(m.rodata[big].name, "step_constant1.bin");
  assert_string_equal(m.rodata[0].name, "net_cuda_nvptx_fb.fb");

  /* Refs: 3 + the two constant buffers; bytes: kernel 1's id + the flag. */
  assert_int_equal(m.global_ref_count, 5);
  assert_int_equal(m.global_bytes_capacity, 12);
  const kiln_vmfb_vm_function_t *init = function_named(&m, "__init");
  assert_int_equal(calls_to(&m, init, "hal.executable.lookup.function"), 1);
  assert_true(rodata_string(&m, "main_dispatch_1") > 0);
  assert_int_equal(rodata_string(&m, "main_dispatch_0"), -1);

  kiln_vmfb_vm_module_deinit(&m);
  free(p.big);
}

/* pair(tensor<3xf16>, tensor<f32>) -> (tensor<f32>, tensor<f32>) and
 * other() -> tensor<i32>, both dispatching kernel 0. */
static void test_two_inputs_two_results(void **state) {
  (void)state;
  kiln_vmfb_tensor_type_t inputs[2] = {tensor(KILN_VMFB_ELEMENT_FLOAT_16, 1, 3, 0),
                                       tensor(KILN_VMFB_ELEMENT_FLOAT_32, 0, 0, 0)};
  kiln_vmfb_buffer_t buffers[3] = {
      {.kind = KILN_VMFB_BUFFER_INPUT, .input = 0, .size_bytes = 6},
      {.kind = KILN_VMFB_BUFFER_INPUT, .input = 1, .size_bytes = 4},
      {.kind = KILN_VMFB_BUFFER_TRANSIENT, .size_bytes = 8},
  };
  kiln_vmfb_binding_t bindings[3] = {
      {.buffer = 0, .length = 6, .read_only = true},
      {.buffer = 1, .length = 4, .read_only = true},
      {.buffer = 2, .length = 8},
  };
  kiln_vmfb_step_t step = {
      .kind = KILN_VMFB_STEP_DISPATCH, .workgroups = {1, 1, 1}, .bindings = bindings, .n_bindings = 3};
  kiln_vmfb_result_t results[2] = {
      {.buffer = 2, .offset = 0, .type = inputs[1]},
      {.buffer = 2, .offset = 4, .type = inputs[1]},
  };
  kiln_vmfb_buffer_t other_buffer = {.kind = KILN_VMFB_BUFFER_TRANSIENT, .size_bytes = 4};
  kiln_vmfb_binding_t other_binding = {.buffer = 0, .length = 4};
  kiln_vmfb_step_t other_step = {
      .kind = KILN_VMFB_STEP_DISPATCH, .workgroups = {1, 1, 1}, .bindings = &other_binding, .n_bindings = 1};
  kiln_vmfb_result_t other_result = {.buffer = 0, .type = tensor(KILN_VMFB_ELEMENT_INT_32, 0, 0, 0)};
  kiln_vmfb_function_t fns[2] = {
      {.name = "pair",
       .inputs = inputs,
       .n_inputs = 2,
       .results = results,
       .n_results = 2,
       .buffers = buffers,
       .n_buffers = 3,
       .steps = &step,
       .n_steps = 1},
      {.name = "other",
       .results = &other_result,
       .n_results = 1,
       .buffers = &other_buffer,
       .n_buffers = 1,
       .steps = &other_step,
       .n_steps = 1},
  };
  kiln_vmfb_plan_t plan = {.functions = fns, .n_functions = 2};
  kiln_vmfb_host_executable_t exe = executable();
  kiln_vmfb_vm_module_t m;
  assert_ok(kiln_vmfb_host_program_build(&plan, &exe, NULL, &m));
  verify_all(&m);
  assert_int_equal(m.n_functions, 3);
  const kiln_vmfb_vm_function_t *pair = &m.functions[0];
  const kiln_vmfb_vm_function_t *other = &m.functions[1];
  assert_string_equal(pair->export_name, "pair");
  assert_string_equal(pair->cconv, "0rr_rr");
  assert_string_equal(pair->attrs[0].value,
                      "sync func @pair(%input0: tensor<3xf16>, %input1: tensor<f32>) -> "
                      "(%output0: tensor<f32>, %output1: tensor<f32>)");
  assert_int_equal(calls_to(&m, pair, "hal.buffer_view.assert"), 2);
  assert_int_equal(calls_to(&m, pair, "hal.buffer_view.buffer"), 2);
  assert_int_equal(calls_to(&m, pair, "hal.buffer.assert"), 2);
  assert_int_equal(calls_to(&m, pair, "hal.buffer_view.create"), 2);
  assert_clean_return(pair, 2);
  assert_string_equal(other->export_name, "other");
  assert_string_equal(other->cconv, "0v_r");
  assert_string_equal(other->attrs[0].value, "sync func @other() -> (%output0: tensor<i32>)");
  assert_int_equal(calls_to(&m, other, "hal.buffer_view.assert"), 0);
  assert_string_equal(m.functions[2].export_name, "__init");
  /* One kernel shared by both: looked up once. */
  assert_int_equal(calls_to(&m, &m.functions[2], "hal.executable.lookup.function"), 1);
  assert_int_equal(m.global_bytes_capacity, 8);
  assert_true(rodata_string(&m, "input1") > 0);
  kiln_vmfb_vm_module_deinit(&m);
}

static void test_legacy_hal_0_6(void **state) {
  (void)state;
  plan_a_t p;
  plan_a(&p);
  kiln_vmfb_host_executable_t exe = executable();
  kiln_vmfb_host_options_t options = {.hal_version = KILN_VMFB_HAL_VERSION_0_6};
  kiln_vmfb_vm_module_t m;
  assert_ok(kiln_vmfb_host_program_build(&p.plan, &exe, &options, &m));
  verify_all(&m);
  assert_int_equal(m.hal_minimum_version, 6);
  assert_imports_match_hal(&m, 6);
  assert_int_equal(import_index(&m, "hal.executable.lookup.function"), -1);
  assert_string_equal(m.imports[import_index(&m, "hal.command_buffer.dispatch")].cconv,
                      "0rriiiiICiDCiirIID_v");
  assert_int_equal(m.global_bytes_capacity, 0); /* no function ids */
  assert_int_equal(rodata_string(&m, "main_dispatch_0"), -1);
  kiln_vmfb_vm_module_deinit(&m);
}

/* Registers are scoped per step: thousands of steps cost bytecode, not registers. */
static void test_many_steps_keep_registers_bounded(void **state) {
  (void)state;
  enum { STEPS = 3000 };
  kiln_vmfb_buffer_t buffers[2] = {{.kind = KILN_VMFB_BUFFER_TRANSIENT, .size_bytes = 1024},
                                   {.kind = KILN_VMFB_BUFFER_TRANSIENT, .size_bytes = 1024}};
  kiln_vmfb_binding_t bindings[4] = {{.buffer = 0, .length = 512},
                                     {.buffer = 0, .offset = 512, .length = 512},
                                     {.buffer = 1, .length = 1024},
                                     {.buffer = 1, .offset = 4, .length = 4}};
  uint32_t constants[8] = {1, 2, 3, 4, 5, 6, 7, 8};
  kiln_vmfb_step_t *steps = calloc(STEPS, sizeof *steps);
  assert_non_null(steps);
  for (uint32_t s = 0; s < STEPS; s++) {
    steps[s] = (kiln_vmfb_step_t){.kind = KILN_VMFB_STEP_DISPATCH,
                                  .kernel = s % 2,
                                  .workgroups = {s + 1, 1, 1},
                                  .bindings = bindings,
                                  .n_bindings = 4,
                                  .constants = constants,
                                  .n_constants = 8};
  }
  kiln_vmfb_result_t result = {.buffer = 1, .type = tensor(KILN_VMFB_ELEMENT_FLOAT_32, 1, 256, 0)};
  kiln_vmfb_function_t fn = {.name = "deep",
                             .results = &result,
                             .n_results = 1,
                             .buffers = buffers,
                             .n_buffers = 2,
                             .steps = steps,
                             .n_steps = STEPS};
  kiln_vmfb_plan_t plan = {.functions = &fn, .n_functions = 1};
  kiln_vmfb_host_executable_t exe = executable();
  kiln_vmfb_vm_module_t m;
  assert_ok(kiln_vmfb_host_program_build(&plan, &exe, NULL, &m));
  verify_all(&m);
  const kiln_vmfb_vm_function_t *deep = &m.functions[0];
  assert_int_equal(calls_to(&m, deep, "hal.command_buffer.dispatch"), STEPS);
  assert_int_equal(calls_to(&m, deep, "hal.command_buffer.execution_barrier"), STEPS - 1);
  assert_true(deep->i32_register_count < 64);
  assert_true(deep->ref_register_count < 16);
  assert_int_equal(calls_to(&m, &m.functions[1], "hal.executable.lookup.function"), 2);
  kiln_vmfb_vm_module_deinit(&m);
  free(steps);
}

/* ---- refusals ---- */

static void expect_refused(const kiln_vmfb_plan_t *plan, const kiln_vmfb_host_options_t *options,
                           kiln_status_code_t want) {
  kiln_vmfb_host_executable_t exe = executable();
  kiln_vmfb_vm_module_t m;
  memset(&m, 0xAB, sizeof m);
  assert_code(kiln_vmfb_host_program_build(plan, &exe, options, &m), want);
  assert_zeroed(&m);
}

static void test_inconsistent_plans_are_refused(void **state) {
  (void)state;
  plan_a_t p;

  plan_a(&p);
  p.steps[0].kernel = 2; /* the executable names 2 kernels */
  expect_refused(&p.plan, NULL, KILN_STATUS_INVALID_ARGUMENT);

  plan_a(&p);
  p.bindings[1].offset = 8; /* 8 + 16 > 16 */
  expect_refused(&p.plan, NULL, KILN_STATUS_INVALID_ARGUMENT);

  plan_a(&p);
  p.bindings[1].buffer = 9;
  expect_refused(&p.plan, NULL, KILN_STATUS_INVALID_ARGUMENT);

  plan_a(&p);
  p.results[0].offset = 4;
  expect_refused(&p.plan, NULL, KILN_STATUS_INVALID_ARGUMENT);

  plan_a(&p);
  p.buffers[0].input = 1;
  expect_refused(&p.plan, NULL, KILN_STATUS_INVALID_ARGUMENT);

  plan_a(&p);
  p.buffers[0].size_bytes = 32; /* larger than tensor<4xf32> */
  expect_refused(&p.plan, NULL, KILN_STATUS_INVALID_ARGUMENT);

  plan_a(&p);
  p.steps[0] = (kiln_vmfb_step_t){
      .kind = KILN_VMFB_STEP_COPY, .src = 1, .dst = 1, .src_offset = 0, .dst_offset = 4, .length = 8};
  expect_refused(&p.plan, NULL, KILN_STATUS_INVALID_ARGUMENT); /* overlapping */

  plan_a(&p);
  p.steps[0] = (kiln_vmfb_step_t){.kind = KILN_VMFB_STEP_COPY, .src = 0, .dst = 1, .length = 0};
  expect_refused(&p.plan, NULL, KILN_STATUS_INVALID_ARGUMENT); /* empty copy */

  plan_a(&p);
  p.steps[0].kind = 7;
  expect_refused(&p.plan, NULL, KILN_STATUS_INVALID_ARGUMENT);

  plan_a(&p);
  p.inputs[0].element_type = 0x99000020u;
  expect_refused(&p.plan, NULL, KILN_STATUS_UNIMPLEMENTED);

  plan_a(&p);
  p.inputs[0].dims[0] = -1; /* dynamic */
  expect_refused(&p.plan, NULL, KILN_STATUS_INVALID_ARGUMENT);

  const char *bad_names[] = {"", "__init", "has space", "a/b"};
  for (size_t i = 0; i < sizeof bad_names / sizeof bad_names[0]; i++) {
    plan_a(&p);
    p.fn.name = (char *)bad_names[i];
    expect_refused(&p.plan, NULL, KILN_STATUS_INVALID_ARGUMENT);
  }

  plan_a(&p);
  kiln_vmfb_function_t twice[2] = {p.fn, p.fn};
  kiln_vmfb_plan_t dup = {.functions = twice, .n_functions = 2};
  expect_refused(&dup, NULL, KILN_STATUS_INVALID_ARGUMENT);

  kiln_vmfb_plan_t empty = {0};
  expect_refused(&empty, NULL, KILN_STATUS_INVALID_ARGUMENT);

  plan_a(&p);
  kiln_vmfb_host_options_t v5 = {.hal_version = 5};
  expect_refused(&p.plan, &v5, KILN_STATUS_UNIMPLEMENTED);
  kiln_vmfb_host_options_t dotted = {.module_name = "a.b"};
  expect_refused(&p.plan, &dotted, KILN_STATUS_INVALID_ARGUMENT);

  /* An executable without a format. */
  kiln_vmfb_host_executable_t exe = executable();
  exe.format = "";
  kiln_vmfb_vm_module_t m;
  assert_code(kiln_vmfb_host_program_build(&p.plan, &exe, NULL, &m), KILN_STATUS_INVALID_ARGUMENT);
  assert_zeroed(&m);
}

/* A loop: k0; head: k1 writes a condition; BRANCH (zero: end); k0; JUMP head. */
static void test_branch_and_loop(void **state) {
  (void)state;
  plan_a_t p;
  plan_a(&p);
  kiln_vmfb_buffer_t buffers[3] = {
      p.buffers[0], p.buffers[1], {.kind = KILN_VMFB_BUFFER_TRANSIENT, .size_bytes = 4}};
  kiln_vmfb_binding_t cond_bindings[2] = {{.buffer = 1, .length = 16, .read_only = true},
                                          {.buffer = 2, .length = 4}};
  kiln_vmfb_step_t steps[5] = {
      p.steps[0],
      {.kind = KILN_VMFB_STEP_DISPATCH,
       .kernel = 1,
       .workgroups = {1, 1, 1},
       .bindings = cond_bindings,
       .n_bindings = 2},
      {.kind = KILN_VMFB_STEP_BRANCH, .src = 2, .src_offset = 1, .length = 1, .target = 5},
      p.steps[0],
      {.kind = KILN_VMFB_STEP_JUMP, .target = 1},
  };
  p.fn.buffers = buffers;
  p.fn.n_buffers = 3;
  p.fn.steps = steps;
  p.fn.n_steps = 5;
  kiln_vmfb_host_executable_t exe = executable();
  kiln_vmfb_vm_module_t m;
  assert_ok(kiln_vmfb_host_program_build(&p.plan, &exe, NULL, &m));
  verify_all(&m);
  assert_imports_match_hal(&m, 7);
  assert_true(import_index(&m, "hal.buffer.load") >= 0);
  const kiln_vmfb_vm_function_t *fn = &m.functions[0];
  /* Three segments end in a submission and a wait: before the loop head, at the
   * BRANCH (whose condition is copied to staging and loaded), at the JUMP. */
  assert_int_equal(calls_to(&m, fn, "hal.fence.await"), 3);
  assert_int_equal(calls_to(&m, fn, "hal.device.queue.execute"), 3);
  assert_int_equal(calls_to(&m, fn, "hal.command_buffer.create"), 3);
  assert_int_equal(calls_to(&m, fn, "hal.command_buffer.copy_buffer"), 1);
  assert_int_equal(calls_to(&m, fn, "hal.buffer.load"), 1);
  assert_int_equal(calls_to(&m, fn, "hal.command_buffer.dispatch"), 3);
  /* two transients and the staging buffer */
  assert_int_equal(calls_to(&m, fn, "hal.allocator.allocate"), 3);
  assert_clean_return(fn, 1);
  kiln_vmfb_vm_module_deinit(&m);

  /* Refused: a target past the end, a condition of 0 or 5 bytes, or outside its buffer. */
  steps[4].target = 6;
  expect_refused(&p.plan, NULL, KILN_STATUS_INVALID_ARGUMENT);
  steps[4].target = 1;
  steps[2].length = 0;
  expect_refused(&p.plan, NULL, KILN_STATUS_INVALID_ARGUMENT);
  steps[2].length = 5;
  expect_refused(&p.plan, NULL, KILN_STATUS_INVALID_ARGUMENT);
  steps[2].length = 4; /* bytes 1..4 of a 4-byte buffer */
  expect_refused(&p.plan, NULL, KILN_STATUS_INVALID_ARGUMENT);
  steps[2].src = 3;
  steps[2].length = 1;
  expect_refused(&p.plan, NULL, KILN_STATUS_INVALID_ARGUMENT);
}

/* main(tensor<?x4xf32>) -> tensor<?x4xf32> with every dynamic part: sizes from
 * the view, a dynamic transient, a kernel argument buffer, a buffer chosen per
 * call, a dynamic grid, a branch on a size and a result of dynamic shape. */
static void test_dynamic_sizes(void **state) {
  (void)state;
  kiln_vmfb_tensor_type_t inputs[1] = {tensor(KILN_VMFB_ELEMENT_FLOAT_32, 2, -1, 4)};
  kiln_vmfb_expr_t exprs[5] = {
      {.kind = KILN_VMFB_EXPR_INPUT_DIM, .a = 0, .b = 0}, {.kind = KILN_VMFB_EXPR_CONST, .value = 16},
      {.kind = KILN_VMFB_EXPR_MUL, .a = 1, .b = 2},       {.kind = KILN_VMFB_EXPR_CONST, .value = 1},
      {.kind = KILN_VMFB_EXPR_EQ, .a = 1, .b = 4},
  };
  uint32_t words[1] = {1};
  kiln_vmfb_buffer_t buffers[4] = {
      {.kind = KILN_VMFB_BUFFER_INPUT, .input = 0, .size_expr = 3},
      {.kind = KILN_VMFB_BUFFER_TRANSIENT, .size_expr = 3},
      {.kind = KILN_VMFB_BUFFER_ARGS, .size_bytes = 4, .words = words, .n_words = 1},
      {.kind = KILN_VMFB_BUFFER_SELECT, .size_expr = 3, .select_cond = 5, .select_a = 0, .select_b = 1},
  };
  kiln_vmfb_binding_t bindings[3] = {{.buffer = 3, .length_expr = 3, .read_only = true},
                                     {.buffer = 1, .length_expr = 3},
                                     {.buffer = 2, .length = 4, .read_only = true}};
  kiln_vmfb_step_t steps[3] = {
      {.kind = KILN_VMFB_STEP_BRANCH, .cond_expr = 5, .target = 2},
      {.kind = KILN_VMFB_STEP_DISPATCH,
       .kernel = 0,
       .workgroups = {0, 1, 1},
       .workgroup_exprs = {1, 0, 0},
       .bindings = bindings,
       .n_bindings = 3},
      {.kind = KILN_VMFB_STEP_DISPATCH,
       .kernel = 1,
       .workgroups = {0, 1, 1},
       .workgroup_exprs = {1, 0, 0},
       .bindings = bindings,
       .n_bindings = 3},
  };
  kiln_vmfb_result_t results[1] = {{.buffer = 1, .type = inputs[0], .dim_exprs = {1}, .size_expr = 3}};
  kiln_vmfb_function_t fn = {.name = "main",
                             .inputs = inputs,
                             .n_inputs = 1,
                             .results = results,
                             .n_results = 1,
                             .buffers = buffers,
                             .n_buffers = 4,
                             .steps = steps,
                             .n_steps = 3,
                             .exprs = exprs,
                             .n_exprs = 5};
  kiln_vmfb_plan_t plan = {.functions = &fn, .n_functions = 1};
  kiln_vmfb_host_executable_t exe = executable();
  kiln_vmfb_vm_module_t m;
  assert_ok(kiln_vmfb_host_program_build(&plan, &exe, NULL, &m));
  verify_all(&m);
  assert_imports_match_hal(&m, 7);
  const kiln_vmfb_vm_function_t *f = &m.functions[0];
  assert_string_equal(f->attrs[0].value,
                      "sync func @main(%input0: tensor<?x4xf32>) -> (%output0: tensor<?x4xf32>)");
  assert_int_equal(calls_to(&m, f, "hal.buffer_view.dim"), 2); /* the size, and the assert's */
  assert_int_equal(calls_to(&m, f, "hal.buffer.store"), 1);
  assert_int_equal(calls_to(&m, f, "hal.buffer.load"), 0);        /* a size condition reads nothing back */
  assert_int_equal(calls_to(&m, f, "hal.allocator.allocate"), 2); /* the transient and the arguments */
  assert_clean_return(f, 1);
  kiln_vmfb_vm_module_deinit(&m);

  /* Refused: an operand that is not earlier, a size naming no expression, a
   * select of a later buffer, a dynamic result without its dimension, a dynamic
   * input without a size. */
  exprs[2].a = 3;
  expect_refused(&plan, NULL, KILN_STATUS_INVALID_ARGUMENT);
  exprs[2].a = 1;
  buffers[1].size_expr = 6;
  expect_refused(&plan, NULL, KILN_STATUS_INVALID_ARGUMENT);
  buffers[1].size_expr = 3;
  buffers[3].select_b = 3;
  expect_refused(&plan, NULL, KILN_STATUS_INVALID_ARGUMENT);
  buffers[3].select_b = 1;
  results[0].dim_exprs[0] = 0;
  expect_refused(&plan, NULL, KILN_STATUS_INVALID_ARGUMENT);
  results[0].dim_exprs[0] = 1;
  buffers[0].size_expr = 0;
  expect_refused(&plan, NULL, KILN_STATUS_INVALID_ARGUMENT);
}

/* A module variable shared by two functions: one ref global and one "created"
 * flag for the module (not per function), each function creating it when it
 * finds it missing, reading its initial bytes from rodata. */
static void test_module_variable(void **state) {
  (void)state;
  plan_a_t p;
  plan_a(&p);
  uint8_t init[16] = {1, 2, 3, 4};
  kiln_vmfb_variable_t var = {.name = "acc", .data = init, .size_bytes = 16};
  kiln_vmfb_buffer_t buffers[3] = {
      p.buffers[0], p.buffers[1], {.kind = KILN_VMFB_BUFFER_VARIABLE, .variable = 0, .size_bytes = 16}};
  kiln_vmfb_binding_t bindings[2] = {{.buffer = 2, .length = 16}, {.buffer = 1, .length = 16}};
  kiln_vmfb_step_t step = p.steps[0];
  step.bindings = bindings;
  p.fn.buffers = buffers;
  p.fn.n_buffers = 3;
  p.fn.steps = &step;
  kiln_vmfb_function_t fns[2] = {p.fn, p.fn};
  fns[1].name = "other";
  kiln_vmfb_plan_t plan = {.functions = fns, .n_functions = 2, .variables = &var, .n_variables = 1};
  kiln_vmfb_host_executable_t exe = executable();
  kiln_vmfb_vm_module_t m;
  assert_ok(kiln_vmfb_host_program_build(&plan, &exe, NULL, &m));
  verify_all(&m);
  assert_imports_match_hal(&m, 7);
  assert_int_equal(m.global_ref_count, 3 + 1); /* device, allocator, executable; the variable */
  assert_true(rodata_find(&m, init, sizeof init) >= 0);
  for (size_t f = 0; f < 2; f++) {
    assert_int_equal(calls_to(&m, &m.functions[f], "hal.device.queue.read"), 1);
    assert_int_equal(calls_to(&m, &m.functions[f], "hal.ex.file.from_memory"), 1);
    assert_clean_return(&m.functions[f], 1);
  }
  kiln_vmfb_vm_module_deinit(&m);

  buffers[2].variable = 1; /* no such variable */
  expect_refused(&plan, NULL, KILN_STATUS_INVALID_ARGUMENT);
  buffers[2].variable = 0;
  buffers[2].size_bytes = 8; /* not the variable's size */
  expect_refused(&plan, NULL, KILN_STATUS_INVALID_ARGUMENT);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_one_dispatch),
      cmocka_unit_test(test_dispatch_copy_and_constants),
      cmocka_unit_test(test_two_inputs_two_results),
      cmocka_unit_test(test_legacy_hal_0_6),
      cmocka_unit_test(test_many_steps_keep_registers_bounded),
      cmocka_unit_test(test_inconsistent_plans_are_refused),
      cmocka_unit_test(test_branch_and_loop),
      cmocka_unit_test(test_dynamic_sizes),
      cmocka_unit_test(test_module_variable),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
