/* The sample module of vmfb_sample.h. Invariant: the output is a function of this
 * file alone (no clock, no randomness, no host facts), because the fixtures tool
 * promises identical bytes on every run and host.
 */
#include "tests/unit/support/vmfb_sample.h"

#include <stdbool.h>
#include <string.h>

#include "base/alloc.h"

enum { N_ELEMS = KILN_TEST_VMFB_ELEMS, BYTES = KILN_TEST_VMFB_BYTES };

static const char PTX[] =
    ".version 8.7\n"
    ".target sm_89\n"
    ".address_size 64\n"
    "\n"
    ".visible .entry add_kernel(\n"
    "\t.param .u64 add_kernel_param_0,\n"
    "\t.param .u64 add_kernel_param_1,\n"
    "\t.param .u64 add_kernel_param_2,\n"
    "\t.param .u32 add_kernel_param_3\n"
    ")\n"
    "{\n"
    "\tret;\n"
    "}\n"
    "\n"
    ".visible .entry mul_kernel(\n"
    "\t.param .u64 mul_kernel_param_0,\n"
    "\t.param .u64 mul_kernel_param_1,\n"
    "\t.param .u64 mul_kernel_param_2,\n"
    "\t.param .u32 mul_kernel_param_3,\n"
    "\t.param .u32 mul_kernel_param_4\n"
    ")\n"
    "{\n"
    "\tret;\n"
    "}\n";

/* SPIR-V 1.3: header, OpCapability Shader, OpMemoryModel Logical GLSL450, one
 * OpEntryPoint GLCompute per kernel. */
static const uint32_t SPIRV[] = {
    0x07230203u,      0x00010300u, 0u, 3u,          0u,
    (2u << 16) | 17u, 1u,              /* OpCapability Shader */
    (3u << 16) | 14u, 0u,          1u, /* OpMemoryModel Logical GLSL450 */
    (6u << 16) | 15u, 5u,          1u, 0x5f646461u, 0x6e72656bu,
    0x00006c65u, /* "add_kernel" */
    (6u << 16) | 15u, 5u,          2u, 0x5f6c756du, 0x6e72656bu,
    0x00006c65u, /* "mul_kernel" */
};

static const bool RO[3] = {true, true, false};

static void put16(uint8_t *p, uint16_t v) {
  p[0] = (uint8_t)v;
  p[1] = (uint8_t)(v >> 8);
}
static void put32(uint8_t *p, uint32_t v) {
  for (int i = 0; i < 4; i++) p[i] = (uint8_t)(v >> (8 * i));
}

/* An ELF64 header as ld.lld writes it for an AMDGPU code object (HSA OS ABI,
 * code object v5, ET_DYN, EM_AMDGPU, e_flags EF_AMDGPU_MACH_AMDGCN_GFX1100),
 * followed by zeros: enough for anything that reads the header. */
static void make_hsaco(uint8_t out[KILN_TEST_VMFB_HSACO_BYTES]) {
  memset(out, 0, KILN_TEST_VMFB_HSACO_BYTES);
  memcpy(out,
         "\x7f"
         "ELF",
         4);
  out[4] = 2;            /* ELFCLASS64 */
  out[5] = 1;            /* ELFDATA2LSB */
  out[6] = 1;            /* EV_CURRENT */
  out[7] = 64;           /* ELFOSABI_AMDGPU_HSA */
  out[8] = 3;            /* ELFABIVERSION_AMDGPU_HSA_V5 */
  put16(out + 16, 3);    /* ET_DYN */
  put16(out + 18, 224);  /* EM_AMDGPU */
  put32(out + 20, 1);    /* EV_CURRENT */
  put32(out + 48, 0x41); /* e_flags: gfx1100 */
  put16(out + 52, 64);   /* e_ehsize */
}

static void make_plan(kiln_vmfb_plan_t *plan) {
  memset(plan, 0, sizeof *plan);
  kiln_vmfb_function_t *fn = kiln_calloc(1, sizeof *fn);
  plan->functions = fn;
  plan->n_functions = 1;
  fn->name = kiln_strdup("main");
  fn->n_inputs = 2;
  fn->inputs = kiln_calloc(2, sizeof *fn->inputs);
  for (int i = 0; i < 2; i++) {
    fn->inputs[i] =
        (kiln_vmfb_tensor_type_t){.element_type = KILN_VMFB_ELEMENT_FLOAT_32, .rank = 1, .dims = {N_ELEMS}};
  }
  fn->n_buffers = 5;
  fn->buffers = kiln_calloc(5, sizeof *fn->buffers);
  fn->buffers[0] = (kiln_vmfb_buffer_t){.kind = KILN_VMFB_BUFFER_INPUT, .input = 0, .size_bytes = BYTES};
  fn->buffers[1] = (kiln_vmfb_buffer_t){.kind = KILN_VMFB_BUFFER_INPUT, .input = 1, .size_bytes = BYTES};
  uint8_t *w = kiln_malloc(BYTES);
  for (size_t i = 0; i < BYTES; i++) w[i] = (uint8_t)(i * 7 + 1);
  fn->buffers[2] = (kiln_vmfb_buffer_t){.kind = KILN_VMFB_BUFFER_CONSTANT, .data = w, .size_bytes = BYTES};
  fn->buffers[3] = (kiln_vmfb_buffer_t){.kind = KILN_VMFB_BUFFER_TRANSIENT, .size_bytes = BYTES};
  fn->buffers[4] = (kiln_vmfb_buffer_t){.kind = KILN_VMFB_BUFFER_TRANSIENT, .size_bytes = BYTES};
  fn->n_steps = 2;
  fn->steps = kiln_calloc(2, sizeof *fn->steps);
  const uint32_t bufs[2][3] = {{0, 2, 3}, {3, 1, 4}};
  for (int s = 0; s < 2; s++) {
    kiln_vmfb_step_t *step = &fn->steps[s];
    step->kind = KILN_VMFB_STEP_DISPATCH;
    step->kernel = (uint32_t)s;
    step->workgroups[0] = N_ELEMS / 64;
    step->workgroups[1] = step->workgroups[2] = 1;
    step->n_bindings = 3;
    step->bindings = kiln_calloc(3, sizeof *step->bindings);
    for (int b = 0; b < 3; b++) {
      step->bindings[b] =
          (kiln_vmfb_binding_t){.buffer = bufs[s][b], .offset = 0, .length = BYTES, .read_only = b < 2};
    }
    step->n_constants = s == 0 ? 1 : 2;
    step->constants = kiln_calloc(2, sizeof *step->constants);
    step->constants[0] = N_ELEMS;
    step->constants[1] = 3;
  }
  fn->n_results = 1;
  fn->results = kiln_calloc(1, sizeof *fn->results);
  fn->results[0] = (kiln_vmfb_result_t){
      .buffer = 4,
      .offset = 0,
      .type = {.element_type = KILN_VMFB_ELEMENT_FLOAT_32, .rank = 1, .dims = {N_ELEMS}}};
}

void kiln_test_vmfb_sample_init(kiln_test_vmfb_sample_t *out_sample) {
  kiln_test_vmfb_sample_t *s = out_sample;
  memset(s, 0, sizeof *s);
  make_plan(&s->plan);
  make_hsaco(s->hsaco);
  s->kernels[0] = (kiln_vmfb_kernel_t){.name = "add_kernel",
                                       .module = 0,
                                       .block_size = {64, 1, 1},
                                       .n_bindings = 3,
                                       .read_only = RO,
                                       .n_constants = 1};
  s->kernels[1] = (kiln_vmfb_kernel_t){.name = "mul_kernel",
                                       .module = 0,
                                       .block_size = {64, 1, 1},
                                       .n_bindings = 3,
                                       .read_only = RO,
                                       .n_constants = 2};
  s->code[0] = (kiln_vmfb_code_t){(const uint8_t *)PTX, sizeof PTX - 1};
  s->code[1] = (kiln_vmfb_code_t){s->hsaco, KILN_TEST_VMFB_HSACO_BYTES};
  s->code[2] = (kiln_vmfb_code_t){(const uint8_t *)SPIRV, sizeof SPIRV};
  for (int k = 0; k < 3; k++) {
    kiln_vmfb_format_t format = (kiln_vmfb_format_t)(k + 1);
    s->exe[k] = (kiln_vmfb_executable_t){.format = format,
                                         .kernels = s->kernels,
                                         .n_kernels = 2,
                                         .modules = &s->code[k],
                                         .n_modules = 1,
                                         .subgroup_size = format == KILN_VMFB_FORMAT_VULKAN ? 16 : 0};
  }
}

void kiln_test_vmfb_sample_deinit(kiln_test_vmfb_sample_t *sample) {
  kiln_vmfb_plan_deinit(&sample->plan);
  memset(&sample->plan, 0, sizeof sample->plan);
}
