/* compiler/pipeline.c: real compiles of the example MLP for every GPU kind.
 * PTX carries the chip's .target and PTX ISA .version and one .entry per kernel
 * with its workgroup size; HSACO is an AMDGPU ELF code object for the chip; SPIR-V
 * has the magic number and the device profile's version. Bad IR fails with
 * diagnostics; a target's failure does not fail the others. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cmocka.h>

#include "base/alloc.h"
#include "base/buf.h"
#include "base/file.h"
#include "compiler/artifact.h"
#include "compiler/internal.h"
#include "compiler/pipeline.h"
#include "compiler/vmfb/reader.h"
#include "tests/unit/support/testing.h"

static char *mlp;
static size_t mlp_len;

static int setup(void **state) {
  FILE *f = fopen(KILN_SOURCE_DIR "/examples/mlp.mlir", "rb");
  if (!f) return -1;
  fseek(f, 0, SEEK_END);
  mlp_len = (size_t)ftell(f);
  rewind(f);
  mlp = malloc(mlp_len + 1);
  if (fread(mlp, 1, mlp_len, f) != mlp_len) return -1;
  mlp[mlp_len] = '\0';
  fclose(f);
  kiln_compiler_context_t *ctx = NULL;
  if (kiln_compiler_context_create(&ctx)) return -1;
  *state = ctx;
  return 0;
}

static int teardown(void **state) {
  kiln_compiler_context_destroy(*state);
  free(mlp);
  return 0;
}

/* Writes `len` bytes to a temp file and runs `command` followed by its path;
 * returns the exit status and the output in `out` (cap bytes). */
static int run_tool(const char *command, const void *data, size_t len, char *out, size_t cap) {
  char path[] = "/tmp/kiln-tool-XXXXXX";
  int fd = mkstemp(path);
  assert_true(fd >= 0);
  assert_int_equal(write(fd, data, len), (ssize_t)len);
  close(fd);
  char cmd[8192];
  snprintf(cmd, sizeof cmd, "%s %s", command, path);
  strncat(cmd, " 2>&1", sizeof cmd - strlen(cmd) - 1);
  FILE *p = popen(cmd, "r");
  assert_non_null(p);
  size_t n = fread(out, 1, cap - 1, p);
  out[n] = '\0';
  int rc = pclose(p);
  unlink(path);
  return rc;
}

static const kiln_target_t *target(const char *name) {
  const kiln_target_t *t = kiln_compiler_target_find(name);
  assert_non_null(t);
  return t;
}

static void compile_ok(void **state, const char *const *names, size_t n, kiln_compiler_output_t *out) {
  const kiln_target_t *targets[8];
  for (size_t i = 0; i < n; i++) targets[i] = target(names[i]);
  kiln_status_t st = kiln_compiler_compile(*state, mlp, mlp_len, "mlp.mlir", targets, n, out);
  if (st) fail_msg("compile failed: %s", kiln_status_message(st));
  assert_int_equal(out->n_targets, n);
  for (size_t i = 0; i < n; i++) {
    if (out->targets[i].status) {
      fail_msg("%s failed: %s", names[i], kiln_status_message(out->targets[i].status));
    }
    /* The MLP has fill, matmul, bias+relu, fill, matmul, bias: six kernels or
     * fewer after fusion, never none. */
    assert_true(out->targets[i].n_kernels >= 3);
  }
}

static void test_cuda_ptx(void **state) {
  const char *names[] = {"sm_89", "sm_120", "rtx5090", "gb10"};
  kiln_compiler_output_t out;
  compile_ok(state, names, 3, &out);
  const char *want[][2] = {{".target sm_89", ".version 7.8"},
                           {".target sm_120", ".version 8.7"},
                           {".target sm_120", ".version 8.7"}};
  for (size_t i = 0; i < 3; i++) {
    for (size_t k = 0; k < out.targets[i].n_kernels; k++) {
      const kiln_compiler_kernel_t *kern = &out.targets[i].kernels[k];
      char *ptx = malloc(kern->binary_len + 1);
      memcpy(ptx, kern->binary, kern->binary_len);
      ptx[kern->binary_len] = '\0';
      if (!strstr(ptx, want[i][0]) || !strstr(ptx, want[i][1])) {
        fail_msg("%s kernel %s: no '%s'/'%s' in its PTX", names[i], kern->name, want[i][0], want[i][1]);
      }
      char entry[128];
      snprintf(entry, sizeof entry, ".entry %s", kern->name);
      assert_non_null(strstr(ptx, entry));
      /* Real workgroups, not one thread per block. */
      assert_true(kern->block_size[0] * kern->block_size[1] * kern->block_size[2] >= 32);
      char maxntid[64];
      snprintf(maxntid, sizeof maxntid, ".maxntid %u, %u, %u", kern->block_size[0], kern->block_size[1],
               kern->block_size[2]);
      if (!strstr(ptx, maxntid)) fail_msg("no '%s' in the PTX of %s", maxntid, kern->name);
      free(ptx);
      /* With ptxas installed the library also made a cubin for the chip. */
      if (access("/usr/local/cuda/bin/ptxas", X_OK) == 0) {
        assert_non_null(kern->cubin);
        assert_true(kern->cubin_len > 64);
        assert_memory_equal(kern->cubin,
                            "\x7f"
                            "ELF",
                            4);
        uint16_t machine;
        memcpy(&machine, kern->cubin + 18, 2);
        assert_int_equal(machine, 190); /* EM_CUDA */
      } else {
        assert_null(kern->cubin);
      }
      /* ptxas is optional at run time (a CUDA install); when it is here, the PTX
       * must assemble for the chip. */
      if (access("/usr/local/cuda/bin/ptxas", X_OK) == 0 && i == 0) {
        char output[4096];
        int rc = run_tool("/usr/local/cuda/bin/ptxas -arch=sm_89 -o /dev/null", kern->binary,
                          kern->binary_len, output, sizeof output);
        if (rc != 0) fail_msg("ptxas rejected %s: %s", kern->name, output);
      }
    }
  }
  kiln_compiler_output_deinit(&out);
}

static void test_hip_hsaco(void **state) {
  const char *names[] = {"gfx950", "rdna3"};
  kiln_compiler_output_t out;
  compile_ok(state, names, 2, &out);
  for (size_t i = 0; i < 2; i++) {
    for (size_t k = 0; k < out.targets[i].n_kernels; k++) {
      const kiln_compiler_kernel_t *kern = &out.targets[i].kernels[k];
      assert_true(kern->binary_len > 64);
      assert_memory_equal(kern->binary,
                          "\x7f"
                          "ELF",
                          4);
      uint16_t machine;
      memcpy(&machine, kern->binary + 18, 2);
      assert_int_equal(machine, 224); /* EM_AMDGPU */
      /* Code object v5, as IREE 3.12 pins (amdhsa_code_object_version 500): ELF
       * OS/ABI 64 (AMDGPU_HSA), ABI version 3 (v4 is 2, v6 is 4). */
      assert_int_equal(kern->binary[7], 64);
      assert_int_equal(kern->binary[8], 3);
      /* llvm-readobj sees an AMDGPU code object for the chip, with the kernel's
       * symbol and its kernel descriptor. */
      char output[65536];
      int rc = run_tool("/usr/lib/llvm-22/bin/llvm-readobj --file-headers --symbols", kern->binary,
                        kern->binary_len, output, sizeof output);
      if (rc != 0) fail_msg("llvm-readobj failed on %s: %s", kern->name, output);
      assert_non_null(strstr(output, "Machine: EM_AMDGPU"));
      const char *mach = i == 0 ? "EF_AMDGPU_MACH_AMDGCN_GFX950" : "EF_AMDGPU_MACH_AMDGCN_GFX1100";
      if (!strstr(output, mach)) fail_msg("%s: no %s in\n%s", names[i], mach, output);
      char kd[160];
      snprintf(kd, sizeof kd, "Name: %s.kd", kern->name);
      if (!strstr(output, kd)) fail_msg("no kernel descriptor %s.kd", kern->name);
    }
  }
  kiln_compiler_output_deinit(&out);
}

static void test_vulkan_spirv(void **state) {
  const char *names[] = {"videocore_vii", "mali-g720"};
  kiln_compiler_output_t out;
  compile_ok(state, names, 2, &out);
  const uint32_t versions[] = {0x00010300, 0x00010600};
  for (size_t i = 0; i < 2; i++) {
    for (size_t k = 0; k < out.targets[i].n_kernels; k++) {
      const kiln_compiler_kernel_t *kern = &out.targets[i].kernels[k];
      assert_true(kern->binary_len >= 20 && kern->binary_len % 4 == 0);
      uint32_t words[2];
      memcpy(words, kern->binary, sizeof words);
      assert_int_equal(words[0], 0x07230203u);
      if (words[1] != versions[i]) fail_msg("%s: SPIR-V version 0x%08x", names[i], words[1]);
      assert_non_null(memmem(kern->binary, kern->binary_len, kern->name, strlen(kern->name)));
      /* Valid for Vulkan at the profile's version (spirv-tools from deploy/deps.sh). */
      char output[4096];
      int rc = run_tool(i == 0 ? "spirv-val --target-env vulkan1.1" : "spirv-val --target-env vulkan1.3",
                        kern->binary, kern->binary_len, output, sizeof output);
      if (rc != 0) fail_msg("spirv-val rejected %s for %s: %s", kern->name, names[i], output);
    }
  }
  kiln_compiler_output_deinit(&out);
}

static void test_bad_ir_has_diagnostics(void **state) {
  const char *bad =
      "func.func @f(%a: tensor<4xf32>) -> tensor<4xf32> {\n"
      "  %0 = tosa.add %a, %b : (tensor<4xf32>, tensor<4xf32>) -> tensor<4xf32>\n"
      "  return %0 : tensor<4xf32>\n}\n";
  const kiln_target_t *t = target("sm_89");
  kiln_compiler_output_t out;
  kiln_status_t st = kiln_compiler_compile(*state, bad, strlen(bad), "bad.mlir", &t, 1, &out);
  assert_int_equal(kiln_status_code(st), KILN_STATUS_INVALID_ARGUMENT);
  if (!strstr(kiln_status_message(st), "bad.mlir:2:")) fail_msg("%s", kiln_status_message(st));
  kiln_status_free(st);
}

/* A CPU beside a GPU target: the same kernels, in one ELF shared object that
 * IREE's embedded loader can load: ET_DYN for the machine, one exported symbol
 * (the library query), nothing imported, and only relative relocations (the x86-64,
 * AArch64 and RISC-V loaders apply few kinds). */
static void test_cpu_library(void **state) {
  static const struct {
    const char *target, *machine, *relocation, *header_flag;
  } cases[] = {{"x86_64", "Machine: EM_X86_64", "R_X86_64_RELATIVE", NULL},
               {"cortex-a76", "Machine: EM_AARCH64", "R_AARCH64_RELATIVE", NULL},
               /* RISC-V: the hardware-float ABI, as IREE's riscv_64 runtime is built */
               {"riscv64", "Machine: EM_RISCV", "R_RISCV_RELATIVE", "EF_RISCV_FLOAT_ABI_DOUBLE"},
               {"spacemit-x60", "Machine: EM_RISCV", "R_RISCV_RELATIVE", "EF_RISCV_FLOAT_ABI_DOUBLE"}};
  for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
    const kiln_target_t *targets[] = {target(cases[c].target), target("sm_89")};
    kiln_compiler_output_t out;
    assert_null(kiln_compiler_compile(*state, mlp, mlp_len, "mlp.mlir", targets, 2, &out));
    if (out.targets[0].status) fail_msg("%s", kiln_status_message(out.targets[0].status));
    assert_null(out.targets[1].status);
    assert_true(out.targets[0].n_kernels > 0);
    assert_int_equal(out.targets[0].n_kernels, out.targets[1].n_kernels);
    for (size_t k = 0; k < out.targets[0].n_kernels; k++) {
      assert_string_equal(out.targets[0].kernels[k].name, out.targets[1].kernels[k].name);
      assert_int_equal(out.targets[0].kernels[k].same_as, k ? 1 : 0);
    }
    const kiln_compiler_kernel_t *lib = &out.targets[0].kernels[0];
    char output[65536];
    int rc =
        run_tool("/usr/lib/llvm-22/bin/llvm-readobj --file-headers --dyn-syms --dynamic-table --relocations",
                 lib->binary, lib->binary_len, output, sizeof output);
    if (rc != 0) fail_msg("llvm-readobj: %s", output);
    assert_non_null(strstr(output, cases[c].machine));
    if (cases[c].header_flag) assert_non_null(strstr(output, cases[c].header_flag));
    assert_non_null(strstr(output, "Type: SharedObject"));
    assert_non_null(strstr(output, "Name: iree_hal_executable_library_query"));
    assert_null(strstr(output, "NEEDED"));
    /* The only undefined dynamic symbol is the null one: nothing is imported. */
    const char *undef = strstr(output, "Section: Undefined");
    assert_non_null(undef);
    assert_null(strstr(undef + 1, "Section: Undefined"));
    /* Every relocation is relative: "0xOFFSET TYPE - 0xADDEND" lines. */
    const char *relocs = strstr(output, "Relocations [");
    assert_non_null(relocs);
    size_t n_relocs = 0;
    for (const char *p = strchr(relocs, '\n'); p && p[1] && p[1] != ']'; p = strchr(p + 1, '\n')) {
      char line[256];
      const char *eol = strchr(p + 1, '\n');
      size_t len = eol ? (size_t)(eol - p - 1) : strlen(p + 1);
      snprintf(line, sizeof line, "%.*s", (int)len, p + 1);
      if (!strstr(line, "0x")) continue; /* a section's heading or closing brace */
      if (!strstr(line, cases[c].relocation))
        fail_msg("%s: not %s: %s", cases[c].target, cases[c].relocation, line);
      n_relocs++;
    }
    assert_true(n_relocs > 0); /* the export tables point into the ELF */
    /* The VMFB names the format IREE's loader matches: embedded-elf-ARCH, or
     * system-elf-ARCH with iree-compile's --iree-llvmcpu-link-embedded=false. */
    const char *arch = strstr(out.targets[0].target->executable_format, "elf-") + 4;
    for (int system = 0; system < 2; system++) {
      kiln_compiler_artifact_options_t ao = {
          .source = mlp, .source_len = mlp_len, .flags = system ? "--iree-llvmcpu-link-embedded=false" : ""};
      kiln_buf_t vmfb;
      kiln_buf_init(&vmfb);
      assert_null(kiln_compiler_artifact_write(&out, 0, &ao, &vmfb));
      char want[64], other[64];
      snprintf(want, sizeof want, "%s-elf-%s", system ? "system" : "embedded", arch);
      snprintf(other, sizeof other, "%s-elf-%s", system ? "embedded" : "system", arch);
      assert_non_null(memmem(vmfb.data, vmfb.len, want, strlen(want)));
      assert_null(memmem(vmfb.data, vmfb.len, other, strlen(other)));
      kiln_buf_deinit(&vmfb);
    }
    kiln_compiler_output_deinit(&out);
  }
}

/* What the VMFB writer needs besides the code: the host plan (inputs, results,
 * buffers, launches in order with their grids and bindings) and each kernel's
 * arguments. Constants were sunk into the kernels, so kernels take buffers only
 * (IREE's HAL ABI: one pointer per binding). The same for every GPU target. */
static void test_metadata(void **state) {
  const char *names[] = {"sm_89", "gfx1100", "arm5gen"};
  kiln_compiler_output_t out;
  compile_ok(state, names, 3, &out);
  assert_null(out.plan_status);
  assert_int_equal(out.plan.n_functions, 1);
  const kiln_vmfb_function_t *fn = &out.plan.functions[0];
  assert_string_equal(fn->name, "mlp");
  assert_int_equal(fn->n_inputs, 1);
  assert_int_equal(fn->inputs[0].element_type, KILN_VMFB_ELEMENT_FLOAT_32);
  assert_int_equal(fn->inputs[0].rank, 3);
  assert_int_equal(fn->n_results, 1);
  assert_int_equal(fn->buffers[fn->results[0].buffer].kind, KILN_VMFB_BUFFER_TRANSIENT);
  assert_true(fn->n_steps >= 3);
  /* Kernel k of every target is the kernel of step k. */
  for (size_t t = 0; t < 3; t++) assert_int_equal(out.targets[t].n_kernels, fn->n_steps);
  bool input_bound = false, constant_bound = false;
  for (size_t d = 0; d < fn->n_steps; d++) {
    const kiln_vmfb_step_t *step = &fn->steps[d];
    assert_int_equal(step->kind, KILN_VMFB_STEP_DISPATCH);
    assert_int_equal(step->kernel, d);
    for (int i = 0; i < 3; i++) assert_true(step->workgroups[i] >= 1);
    assert_int_equal(step->n_constants, 0);
    const kiln_compiler_kernel_t *k0 = &out.targets[0].kernels[d];
    assert_int_equal(k0->n_args, step->n_bindings);
    size_t written = 0;
    for (size_t a = 0; a < k0->n_args; a++) {
      assert_int_equal(k0->args[a].kind, KILN_COMPILER_ARG_BUFFER);
      written += !k0->args[a].read_only;
      const kiln_vmfb_buffer_t *b = &fn->buffers[step->bindings[a].buffer];
      /* The binding covers its buffer, whose size matches the kernel's view. */
      assert_int_equal(step->bindings[a].length, b->size_bytes);
      assert_true(k0->args[a].size_bytes <= b->size_bytes);
      input_bound = input_bound || b->kind == KILN_VMFB_BUFFER_INPUT;
      if (b->kind == KILN_VMFB_BUFFER_CONSTANT) {
        constant_bound = true;
        /* The weights: tosa.const splats of 0.5 and 0.25, expanded. */
        float first, last;
        memcpy(&first, b->data, 4);
        memcpy(&last, b->data + b->size_bytes - 4, 4);
        assert_true(first == 0.5f || first == 0.25f);
        assert_true(last == first);
      }
    }
    /* Every kernel writes exactly one output buffer. */
    assert_int_equal(written, 1);
    for (size_t t = 1; t < 3; t++) {
      const kiln_compiler_kernel_t *kt = &out.targets[t].kernels[d];
      assert_string_equal(kt->name, k0->name);
      assert_int_equal(kt->n_args, k0->n_args);
      assert_memory_equal(kt->block_size, k0->block_size, sizeof k0->block_size);
    }
  }
  assert_true(input_bound);
  assert_true(constant_bound);
  kiln_compiler_output_deinit(&out);
}

/* A padded convolution's interior copy runs as a kernel, not on the host: the
 * convnet's plan is dispatches only, and one of them writes a view at a nonzero
 * offset of its buffer. */
static void test_copies_become_kernels(void **state) {
  size_t len = 0;
  char *text = kiln_read_file(KILN_SOURCE_DIR "/examples/convnet.mlir", &len);
  assert_non_null(text);
  kiln_compiler_output_t out;
  const kiln_target_t *t = target("sm_89");
  assert_null(kiln_compiler_compile(*state, text, len, "convnet.mlir", &t, 1, &out));
  assert_null(out.plan_status);
  const kiln_vmfb_function_t *fn = &out.plan.functions[0];
  for (size_t i = 0; i < fn->n_steps; i++) assert_int_equal(fn->steps[i].kind, KILN_VMFB_STEP_DISPATCH);
  assert_int_equal(out.targets[0].n_kernels, fn->n_steps);
  assert_null(out.targets[0].status);
  kiln_compiler_output_deinit(&out);
  kiln_free(text);
}

/* gpu-dialect input (kernels already outlined, e.g. by another front end) skips
 * the front half. It is made here by replaying kiln's own front half in the real
 * mlir-opt-22, then compiled for a CUDA and a Vulkan target. */
static void test_gpu_dialect_input(void **state) {
  char *front = NULL, *back = NULL;
  assert_null(kiln_compiler_pipeline_text(*state, target("sm_89"), &front, &back));
  char cmd[4096];
  snprintf(cmd, sizeof cmd, "/usr/lib/llvm-22/bin/mlir-opt --pass-pipeline='%s'", front);
  char *gpu_ir = malloc(1 << 20);
  int rc = run_tool(cmd, mlp, mlp_len, gpu_ir, 1 << 20);
  free(front);
  free(back);
  if (rc != 0) fail_msg("mlir-opt: %s", gpu_ir);
  assert_non_null(strstr(gpu_ir, "gpu.module"));
  const kiln_target_t *targets[] = {target("sm_89"), target("videocore_vii")};
  kiln_compiler_output_t out;
  kiln_status_t st = kiln_compiler_compile(*state, gpu_ir, strlen(gpu_ir), "gpu.mlir", targets, 2, &out);
  if (st) fail_msg("%s", kiln_status_message(st));
  for (size_t t = 0; t < 2; t++) {
    if (out.targets[t].status) fail_msg("%s", kiln_status_message(out.targets[t].status));
    assert_true(out.targets[t].n_kernels >= 3);
  }
  kiln_compiler_output_deinit(&out);
  /* The same kernels run on a CPU: one ELF, every kernel exported from it. */
  const kiln_target_t *cpu = target("x86_64");
  st = kiln_compiler_compile(*state, gpu_ir, strlen(gpu_ir), "gpu.mlir", &cpu, 1, &out);
  if (st) fail_msg("%s", kiln_status_message(st));
  if (out.targets[0].status) fail_msg("%s", kiln_status_message(out.targets[0].status));
  assert_true(out.targets[0].n_kernels >= 3);
  assert_memory_equal(out.targets[0].kernels[0].binary,
                      "\x7f"
                      "ELF",
                      4);
  assert_int_equal(out.targets[0].kernels[1].same_as, 1);
  kiln_compiler_output_deinit(&out);
  free(gpu_ir);
}

/* Every example model for every GPU target, each binary checked by the real
 * tool of its format, and each target's VMFB read back by kiln's reader. */
/* Models the compiler refuses as a whole: a message naming the function, the
 * value and the reason, UNIMPLEMENTED (not bad IR), and no target compiled. */
static void test_refused_models(void **state) {
  static const struct {
    const char *text, *needle;
  } models[] = {
      {"func.func @unranked(%a: tensor<*xf32>) -> tensor<*xf32> {\n"
       "  return %a : tensor<*xf32>\n}\n",
       "function @unranked argument 0 is tensor<*xf32>: kiln compiles ranked tensors only"},
      {"func.func @mystery(%x: tensor<4xf32>) -> tensor<4xf32> {\n"
       "  %0 = tosa.custom %x {domain_name = \"acme\", operator_name = \"magic\", implementation_attrs = "
       "\"\"} "
       ": (tensor<4xf32>) -> tensor<4xf32>\n"
       "  return %0 : tensor<4xf32>\n}\n",
       "m.mlir:2:8: tosa.custom: kiln does not compile it yet: a custom op has no definition"},
      {"func.func @dyn(%x: tensor<?x4xf32>) -> tensor<?xf32> {\n"
       "  %d = tosa.dim %x {axis = 0 : i32} : (tensor<?x4xf32>) -> !tosa.shape<1>\n"
       "  %c = tosa.const_shape {values = dense<[4]> : tensor<1xindex>} : () -> !tosa.shape<1>\n"
       "  %n = tosa.mul_shape %d, %c : (!tosa.shape<1>, !tosa.shape<1>) -> !tosa.shape<1>\n"
       "  %r = tosa.reshape %x, %n : (tensor<?x4xf32>, !tosa.shape<1>) -> tensor<?xf32>\n"
       "  return %r : tensor<?xf32>\n}\n",
       "m.mlir:2:8: tosa.dim: the dimension is dynamic"},
      {"func.func @tall(%a: tensor<4000000x1xf32>) -> tensor<4000000x1xf32> {\n"
       "  %0 = tosa.add %a, %a : (tensor<4000000x1xf32>, tensor<4000000x1xf32>) -> "
       "tensor<4000000x1xf32>\n  return %0 : tensor<4000000x1xf32>\n}\n",
       "needs 1000000 workgroups along y"},
  };
  const kiln_target_t *targets[2] = {target("sm_89"), target("arm5gen")};
  for (size_t i = 0; i < sizeof models / sizeof models[0]; i++) {
    kiln_compiler_output_t out;
    kiln_status_t st =
        kiln_compiler_compile(*state, models[i].text, strlen(models[i].text), "m.mlir", targets, 2, &out);
    assert_int_equal(kiln_status_code(st), KILN_STATUS_UNIMPLEMENTED);
    if (!strstr(kiln_status_message(st), models[i].needle)) {
      fail_msg("want \"%s\" in: %s", models[i].needle, kiln_status_message(st));
    }
    kiln_status_free(st);
  }
  /* A shape TOSA forbids is bad IR, not a gap in kiln. */
  static const char zero[] =
      "func.func @z(%x: tensor<4xf32>) -> tensor<4xf32> {\n"
      "  %a = tosa.const_shape {values = dense<[4]> : tensor<1xindex>} : () -> !tosa.shape<1>\n"
      "  %b = tosa.const_shape {values = dense<[0]> : tensor<1xindex>} : () -> !tosa.shape<1>\n"
      "  %q = tosa.div_floor_shape %a, %b : (!tosa.shape<1>, !tosa.shape<1>) -> !tosa.shape<1>\n"
      "  %r = tosa.reshape %x, %q : (tensor<4xf32>, !tosa.shape<1>) -> tensor<4xf32>\n"
      "  return %r : tensor<4xf32>\n}\n";
  kiln_compiler_output_t out;
  kiln_status_t st = kiln_compiler_compile(*state, zero, strlen(zero), "z.mlir", targets, 2, &out);
  assert_int_equal(kiln_status_code(st), KILN_STATUS_INVALID_ARGUMENT);
  assert_non_null(strstr(kiln_status_message(st), "z.mlir:4:8: tosa.div_floor_shape: divides by zero"));
  kiln_status_free(st);
}

/* A long vector runs as rows of 32: 100,000 elements in 3,125 workgroups of
 * 1x4x32 invocations (one invocation per workgroup once capped vectors at 65,535
 * elements); 100,001 adds a guarded row. */
static void test_long_vector(void **state) {
  static const struct {
    int n;
    uint32_t rows;
  } cases[] = {{100000, 782}, {100001, 782}};
  for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
    char text[512];
    snprintf(text, sizeof text,
             "func.func @v(%%a: tensor<%dxf32>) -> tensor<%dxf32> {\n"
             "  %%0 = tosa.add %%a, %%a : (tensor<%dxf32>, tensor<%dxf32>) -> tensor<%dxf32>\n"
             "  return %%0 : tensor<%dxf32>\n}\n",
             cases[c].n, cases[c].n, cases[c].n, cases[c].n, cases[c].n, cases[c].n);
    const kiln_target_t *targets[2] = {target("sm_89"), target("x86_64")};
    kiln_compiler_output_t out;
    assert_null(kiln_compiler_compile(*state, text, strlen(text), "v.mlir", targets, 2, &out));
    assert_null(out.plan_status);
    const kiln_vmfb_step_t *step = &out.plan.functions[0].steps[0];
    assert_int_equal(step->kind, KILN_VMFB_STEP_DISPATCH);
    assert_int_equal(step->workgroups[0] * step->workgroups[1] * step->workgroups[2], cases[c].rows);
    for (size_t t = 0; t < 2; t++) {
      if (out.targets[t].status) fail_msg("%s", kiln_status_message(out.targets[t].status));
      const uint32_t *b = out.targets[t].kernels[0].block_size;
      assert_int_equal(b[0] * b[1] * b[2], 128);
    }
    kiln_compiler_output_deinit(&out);
  }
}

/* The plan's last dispatch in the first function (a model's own op comes after
 * its fills and copies), with its grid on the compile's only target. */
/* `model` compiled for the one target `target_id`, which must succeed. */
static void compile_one(kiln_compiler_context_t *context, const char *model, const char *target_id,
                        kiln_compiler_output_t *out) {
  const kiln_target_t *targets[1] = {target(target_id)};
  assert_null(kiln_compiler_compile(context, model, strlen(model), "model.mlir", targets, 1, out));
  if (out->targets[0].status) fail_msg("%s: %s", target_id, kiln_status_message(out->targets[0].status));
}

static const kiln_vmfb_step_t *last_dispatch(const kiln_compiler_output_t *out, uint32_t grid[3]) {
  const kiln_vmfb_function_t *fn = &out->plan.functions[0];
  const kiln_vmfb_step_t *last = NULL;
  for (size_t s = 0; s < fn->n_steps; s++) {
    if (fn->steps[s].kind == KILN_VMFB_STEP_DISPATCH) last = &fn->steps[s];
  }
  assert_non_null(last);
  kiln_compiler_dispatch_grid(&out->targets[0], last, grid);
  return last;
}

/* Loops above rank 3 keep every invocation busy: a depthwise conv's (1, oh, ow,
 * c, 1) loses both unit dimensions (channels on thread x: 8x8 pixels x 64
 * channels in 8 x 2 x 2 workgroups, where the unit dimension on x left 1 lane in
 * 32 working), and a batched elementwise op's (n, h, w, c) folds n and h (2 x 8
 * rows x 2 x 1: its 64 channels are 16 vectors of 4, gpu_elementwise.h). */
static void test_high_rank_loops(void **state) {
  static const struct {
    const char *model;
    uint32_t grid[3];
  } cases[] = {
      {"func.func @dw(%x: tensor<1x8x8x64xf32>, %w: tensor<3x3x64x1xf32>) -> tensor<1x8x8x64xf32> {\n"
       "  %b = \"tosa.const\"() {values = dense<0.0> : tensor<64xf32>} : () -> tensor<64xf32>\n"
       "  %zp = \"tosa.const\"() {values = dense<0.0> : tensor<1xf32>} : () -> tensor<1xf32>\n"
       "  %0 = tosa.depthwise_conv2d %x, %w, %b, %zp, %zp {acc_type = f32, dilation = array<i64: 1, 1>, "
       "pad = array<i64: 1, 1, 1, 1>, stride = array<i64: 1, 1>} : (tensor<1x8x8x64xf32>, "
       "tensor<3x3x64x1xf32>, "
       "tensor<64xf32>, tensor<1xf32>, tensor<1xf32>) -> tensor<1x8x8x64xf32>\n"
       "  return %0 : tensor<1x8x8x64xf32>\n}\n",
       {8, 2, 2}},
      {"func.func @e(%x: tensor<2x8x8x64xf32>) -> tensor<2x8x8x64xf32> {\n"
       "  %0 = tosa.exp %x : (tensor<2x8x8x64xf32>) -> tensor<2x8x8x64xf32>\n"
       "  return %0 : tensor<2x8x8x64xf32>\n}\n",
       {16, 2, 1}},
  };
  for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
    const kiln_target_t *targets[1] = {target("sm_89")};
    kiln_compiler_output_t out;
    assert_null(
        kiln_compiler_compile(*state, cases[c].model, strlen(cases[c].model), "r.mlir", targets, 1, &out));
    assert_null(out.plan_status);
    if (out.targets[0].status) fail_msg("%s", kiln_status_message(out.targets[0].status));
    /* The last dispatch is the op's own kernel (a depthwise conv's bias fill,
     * padding and filter reshape come first). */
    uint32_t grid[3];
    const kiln_vmfb_step_t *last = last_dispatch(&out, grid);
    for (int d = 0; d < 3; d++) assert_int_equal(grid[d], cases[c].grid[d]);
    const uint32_t *b = out.targets[0].kernels[last->kernel].block_size;
    assert_int_equal(b[0], 32);
    assert_int_equal(b[1], 4);
    kiln_compiler_output_deinit(&out);
  }
}

/* The matmul tile follows the chip's compute units: a 512^3 f32 matmul on arm5gen
 * (24 shader cores, the 64-workgroup floor) takes 64x64 tiles, 64 workgroups; on
 * sm_89 (142 SMs) 32x64 tiles, 128 workgroups; on gfx942 (304 CUs) the same, the
 * smallest tile. */
static void test_tiles_follow_compute_units(void **state) {
  static const char model[] =
      "func.func @mm(%a: tensor<1x512x512xf32>, %b: tensor<1x512x512xf32>) -> tensor<1x512x512xf32> {\n"
      "  %zp = \"tosa.const\"() {values = dense<0.0> : tensor<1xf32>} : () -> tensor<1xf32>\n"
      "  %0 = tosa.matmul %a, %b, %zp, %zp : (tensor<1x512x512xf32>, tensor<1x512x512xf32>, tensor<1xf32>, "
      "tensor<1xf32>) -> tensor<1x512x512xf32>\n"
      "  return %0 : tensor<1x512x512xf32>\n}\n";
  static const struct {
    const char *target;
    uint32_t workgroups;
  } cases[] = {{"arm5gen", 64}, {"sm_89", 128}, {"gfx942", 128}};
  for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
    kiln_compiler_output_t out;
    compile_one(*state, model, cases[c].target, &out);
    uint32_t grid[3];
    last_dispatch(&out, grid);
    if (grid[0] * grid[1] * grid[2] != cases[c].workgroups) {
      fail_msg("%s: %u x %u x %u workgroups, want %u", cases[c].target, grid[0], grid[1], grid[2],
               cases[c].workgroups);
    }
    kiln_compiler_output_deinit(&out);
  }
}

/* bf16 matmuls take the tiled kernels too (gpu_gemm.h): the matrix units on
 * CUDA and AMD (64x64 tiles, 4 warps or waves: 2 x 2 workgroups for 128^3), the
 * SIMT tile reading bf16 as 32-bit words on Vulkan, VideoCore VII included
 * (32x64 tiles of 16 x 8 invocations: 2 x 4). The front half's kernel ran
 * 128 x 128 invocations in 1 x 4 x 32 blocks. */
static void test_bf16_matmul_tiles(void **state) {
  static const char model[] =
      "func.func @mm(%a: tensor<1x128x128xbf16>, %b: tensor<1x128x128xbf16>) -> tensor<1x128x128xf32> {\n"
      "  %zp = \"tosa.const\"() {values = dense<0.0> : tensor<1xbf16>} : () -> tensor<1xbf16>\n"
      "  %0 = tosa.matmul %a, %b, %zp, %zp : (tensor<1x128x128xbf16>, tensor<1x128x128xbf16>, "
      "tensor<1xbf16>, "
      "tensor<1xbf16>) -> tensor<1x128x128xf32>\n"
      "  return %0 : tensor<1x128x128xf32>\n}\n";
  static const struct {
    const char *target;
    uint32_t grid[3], block[3];
  } cases[] = {{"sm_89", {2, 2, 1}, {32, 4, 1}},
               {"gfx950", {2, 2, 1}, {64, 4, 1}},
               {"gfx1100", {2, 2, 1}, {32, 4, 1}},
               {"videocore_vii", {2, 4, 1}, {16, 8, 1}}};
  for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
    kiln_compiler_output_t out;
    compile_one(*state, model, cases[c].target, &out);
    uint32_t grid[3];
    const kiln_vmfb_step_t *last = last_dispatch(&out, grid);
    const uint32_t *block = out.targets[0].kernels[last->kernel].block_size;
    for (int d = 0; d < 3; d++) {
      if (grid[d] != cases[c].grid[d] || block[d] != cases[c].block[d]) {
        fail_msg("%s: grid %u x %u x %u of %u x %u x %u, want %u x %u x %u of %u x %u x %u", cases[c].target,
                 grid[0], grid[1], grid[2], block[0], block[1], block[2], cases[c].grid[0], cases[c].grid[1],
                 cases[c].grid[2], cases[c].block[0], cases[c].block[1], cases[c].block[2]);
      }
    }
    kiln_compiler_output_deinit(&out);
  }
}

/* f8 matmuls (OCP E4M3, E5M2) take the matrix units where the chip has them
 * for the format: mma.sync m16n8k32 on sm_120 (PTX 8.7; sm_89's PTX 7.8 has
 * none), MFMA 16x16x32 on gfx950, WMMA on RDNA4; 64x64 tiles for 128^3 are
 * 2 x 2 workgroups. Where the chip has no f8 matrix op (sm_89, gfx942's FNUZ
 * formats, RDNA3) and on Vulkan the SIMT tile widens f8 from 32-bit words:
 * 32x64 tiles of 16 x 8 invocations, 2 x 4 of them. The front half's kernel
 * ran 128 x 128 invocations. The emitted code holds the matrix instruction:
 * the PTX text here, the code object's disassembly by llvm-objdump. */
static void test_f8_matmul_tiles(void **state) {
  static const char model[] =
      "func.func @mm(%a: tensor<128x128xf8E4M3FN>, %b: tensor<128x128xf8E4M3FN>) -> tensor<128x128xf32> {\n"
      "  %z = arith.constant 0.0 : f32\n"
      "  %e = tensor.empty() : tensor<128x128xf32>\n"
      "  %f = linalg.fill ins(%z : f32) outs(%e : tensor<128x128xf32>) -> tensor<128x128xf32>\n"
      "  %r = linalg.matmul ins(%a, %b : tensor<128x128xf8E4M3FN>, tensor<128x128xf8E4M3FN>) "
      "outs(%f : tensor<128x128xf32>) -> tensor<128x128xf32>\n"
      "  return %r : tensor<128x128xf32>\n}\n";
  static const struct {
    const char *target;
    uint32_t workgroups, threads;
    const char *instruction; /* in the PTX or the disassembly; NULL: the SIMT tile */
  } cases[] = {{"sm_120", 4, 128, "mma.sync.aligned.m16n8k32.row.col.f32.e4m3.e4m3.f32"},
               {"gfx950", 4, 256, "v_mfma_f32_16x16x32_fp8_fp8"},
               {"gfx1201", 4, 128, "v_wmma_f32_16x16x16_fp8_fp8"},
               {"sm_89", 8, 128, NULL},
               {"gfx942", 8, 128, NULL},
               {"gfx1100", 8, 128, NULL},
               {"arm5gen", 8, 128, NULL}};
  for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
    kiln_compiler_output_t out;
    compile_one(*state, model, cases[c].target, &out);
    uint32_t grid[3];
    const kiln_vmfb_step_t *last = last_dispatch(&out, grid);
    const kiln_compiler_kernel_t *kern = &out.targets[0].kernels[last->kernel];
    uint32_t workgroups = grid[0] * grid[1] * grid[2];
    uint32_t threads = kern->block_size[0] * kern->block_size[1] * kern->block_size[2];
    if (workgroups != cases[c].workgroups || threads != cases[c].threads) {
      fail_msg("%s: %u workgroups of %u, want %u of %u", cases[c].target, workgroups, threads,
               cases[c].workgroups, cases[c].threads);
    }
    static char text[1 << 20];
    if (!cases[c].instruction) {
      /* no matrix op to find */
    } else if (out.targets[0].target->kind == KILN_TARGET_KIND_CUDA) {
      size_t n = kern->binary_len < sizeof text - 1 ? kern->binary_len : sizeof text - 1;
      memcpy(text, kern->binary, n);
      text[n] = '\0';
    } else {
      int rc =
          run_tool("/usr/lib/llvm-22/bin/llvm-objdump -d", kern->binary, kern->binary_len, text, sizeof text);
      if (rc != 0) fail_msg("llvm-objdump failed on %s: %s", kern->name, text);
    }
    if (cases[c].instruction && !strstr(text, cases[c].instruction)) {
      fail_msg("%s: no %s in the kernel", cases[c].target, cases[c].instruction);
    }
    kiln_compiler_output_deinit(&out);
  }
}

/* Dispatches of `model`'s first function on `target`: in the shared plan, in
 * the target's own; kernels fused into another; the most bindings of one
 * dispatch (each also the number its kernel takes). */
typedef struct dispatches_s {
  size_t shared, mine, fused, widest;
} dispatches_t;

static dispatches_t count_dispatches(kiln_compiler_context_t *context, const char *model,
                                     const char *target_id) {
  kiln_compiler_output_t out;
  compile_one(context, model, target_id, &out);
  kiln_vmfb_plan_t own;
  assert_null(kiln_compiler_target_plan(&out.plan, &out.targets[0], &own));
  dispatches_t d = {0, 0, 0, 0};
  for (size_t s = 0; s < out.plan.functions[0].n_steps; s++) {
    d.shared += out.plan.functions[0].steps[s].kind == KILN_VMFB_STEP_DISPATCH;
  }
  for (size_t s = 0; s < own.functions[0].n_steps; s++) {
    const kiln_vmfb_step_t *st = &own.functions[0].steps[s];
    if (st->kind != KILN_VMFB_STEP_DISPATCH) continue;
    d.mine++;
    if (st->n_bindings > d.widest) d.widest = st->n_bindings;
    assert_int_equal(st->n_bindings, out.targets[0].kernels[st->kernel].n_args);
  }
  for (size_t k = 0; k < out.targets[0].n_kernels; k++) d.fused += out.targets[0].kernels[k].fused_into != 0;
  kiln_compiler_target_plan_free(&own);
  kiln_compiler_output_deinit(&out);
  return d;
}

/* A matmul's bias and ReLU run on the tiled matmul's accumulators on GPU
 * targets (gpu_epilogue.h): the target's plan has two dispatches where the
 * shared one has three (the fill, the matmul with the bias and the output as
 * extra bindings), and the epilogue kernel is marked fused into the matmul; CPU
 * targets keep the shared plan. Returning the matmul's own output too keeps the
 * fusion (C is still stored: tests/corpus checks the numbers). A conv's
 * ReLU6 is fused the same way. */
static void test_epilogue_fusion(void **state) {
  static const char *const returns[2] = {"%2 : tensor<2x64x64xf32>",
                                         "%0, %2 : tensor<2x64x64xf32>, tensor<2x64x64xf32>"};
  static const char *const results[2] = {"tensor<2x64x64xf32>", "(tensor<2x64x64xf32>, tensor<2x64x64xf32>)"};
  static const struct {
    const char *target;
    size_t dispatches;
  } cases[] = {{"arm5gen", 2}, {"sm_89", 2}, {"gfx950", 2}, {"gfx1100", 2}, {"x86_64", 3}};
  for (int both = 0; both < 2; both++) {
    char model[2048];
    snprintf(
        model, sizeof model,
        "func.func @mm(%%a: tensor<2x64x32xf32>, %%b: tensor<2x32x64xf32>, %%bias: tensor<1x1x64xf32>) -> %s "
        "{\n"
        "  %%zp = \"tosa.const\"() {values = dense<0.0> : tensor<1xf32>} : () -> tensor<1xf32>\n"
        "  %%0 = tosa.matmul %%a, %%b, %%zp, %%zp : (tensor<2x64x32xf32>, tensor<2x32x64xf32>, "
        "tensor<1xf32>, "
        "tensor<1xf32>) -> tensor<2x64x64xf32>\n"
        "  %%1 = tosa.add %%0, %%bias : (tensor<2x64x64xf32>, tensor<1x1x64xf32>) -> tensor<2x64x64xf32>\n"
        "  %%2 = tosa.clamp %%1 {max_val = 3.0e38 : f32, min_val = 0.0 : f32} : (tensor<2x64x64xf32>) -> "
        "tensor<2x64x64xf32>\n"
        "  return %s\n}\n",
        results[both], returns[both]);
    for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
      dispatches_t d = count_dispatches(*state, model, cases[c].target);
      if (d.shared != 3 || d.mine != cases[c].dispatches || d.fused != 3 - d.mine ||
          (d.mine == 2 && d.widest != 5)) {
        fail_msg("%s%s: %zu of %zu dispatches, %zu fused, %zu bindings at most", cases[c].target,
                 both ? " (C returned)" : "", d.mine, d.shared, d.fused, d.widest);
      }
    }
  }
  /* An f16 (and bf16) model's dense layer: the f32 accumulators cast to the
   * 16-bit type, a 16-bit bias and ReLU, D stored as 16-bit floats. Fused on
   * CUDA, AMD and Vulkan profiles with 16-bit storage; VideoCore VII (none)
   * keeps the epilogue's kernel, as do CPU targets. */
  static const struct {
    const char *target;
    size_t dispatches;
  } narrow[] = {{"arm5gen", 2}, {"sm_89", 2},         {"gfx950", 2},
                {"gfx1201", 2}, {"videocore_vii", 3}, {"x86_64", 3}};
  static const char *const halves[2] = {"f16", "bf16"};
  for (int h = 0; h < 2; h++) {
    char model[2048];
    const char *t = halves[h];
    snprintf(
        model, sizeof model,
        "func.func @mm(%%a: tensor<2x64x32x%s>, %%b: tensor<2x32x64x%s>, %%bias: tensor<1x1x64x%s>) -> "
        "tensor<2x64x64x%s> {\n"
        "  %%zp = \"tosa.const\"() {values = dense<0.0> : tensor<1x%s>} : () -> tensor<1x%s>\n"
        "  %%0 = tosa.matmul %%a, %%b, %%zp, %%zp : (tensor<2x64x32x%s>, tensor<2x32x64x%s>, tensor<1x%s>, "
        "tensor<1x%s>) -> tensor<2x64x64xf32>\n"
        "  %%1 = tosa.cast %%0 : (tensor<2x64x64xf32>) -> tensor<2x64x64x%s>\n"
        "  %%2 = tosa.add %%1, %%bias : (tensor<2x64x64x%s>, tensor<1x1x64x%s>) -> tensor<2x64x64x%s>\n"
        "  %%3 = tosa.clamp %%2 {max_val = 6.0e4 : %s, min_val = 0.0 : %s} : (tensor<2x64x64x%s>) -> "
        "tensor<2x64x64x%s>\n"
        "  return %%3 : tensor<2x64x64x%s>\n}\n",
        t, t, t, t, t, t, t, t, t, t, t, t, t, t, t, t, t, t, t);
    for (size_t c = 0; c < sizeof narrow / sizeof narrow[0]; c++) {
      dispatches_t d = count_dispatches(*state, model, narrow[c].target);
      if (d.shared != 3 || d.mine != narrow[c].dispatches || d.fused != 3 - d.mine) {
        fail_msg("%s %s: %zu of %zu dispatches, %zu fused", t, narrow[c].target, d.mine, d.shared, d.fused);
      }
    }
  }
  /* A conv's ReLU6 likewise: one dispatch fewer on GPU targets. */
  static const char conv[] =
      "func.func @c(%x: tensor<1x8x8x16xf32>, %w: tensor<64x3x3x16xf32>, %b: tensor<64xf32>) -> "
      "tensor<1x8x8x64xf32> {\n"
      "  %zp = \"tosa.const\"() {values = dense<0.0> : tensor<1xf32>} : () -> tensor<1xf32>\n"
      "  %0 = tosa.conv2d %x, %w, %b, %zp, %zp {acc_type = f32, dilation = array<i64: 1, 1>, pad = "
      "array<i64: 1, 1, "
      "1, 1>, stride = array<i64: 1, 1>} : (tensor<1x8x8x16xf32>, tensor<64x3x3x16xf32>, tensor<64xf32>, "
      "tensor<1xf32>, tensor<1xf32>) -> tensor<1x8x8x64xf32>\n"
      "  %1 = tosa.clamp %0 {max_val = 6.0 : f32, min_val = 0.0 : f32} : (tensor<1x8x8x64xf32>) -> "
      "tensor<1x8x8x64xf32>\n"
      "  return %1 : tensor<1x8x8x64xf32>\n}\n";
  for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
    dispatches_t d = count_dispatches(*state, conv, cases[c].target);
    if (d.mine != d.shared - (cases[c].dispatches == 2)) {
      fail_msg("conv on %s: %zu of %zu dispatches", cases[c].target, d.mine, d.shared);
    }
  }
}

/* Elementwise kernels on GPU targets take 4 neighbouring elements per
 * invocation (gpu_elementwise.h): the grid along the contiguous dimension
 * shrinks by 4. An 8x256 bias add and ReLU (exact 32-wide tiles, 8 of them)
 * runs on 2; a 3x40 sigmoid (two overhanging tiles under a guard) on 1; CPU
 * targets keep the shared kernel. */
static void test_elementwise_vectors(void **state) {
  static const struct {
    const char *model;
    uint32_t grid[3];
  } cases[] = {
      {"func.func @b(%x: tensor<8x256xf32>, %b: tensor<1x256xf32>) -> tensor<8x256xf32> {\n"
       "  %0 = tosa.add %x, %b : (tensor<8x256xf32>, tensor<1x256xf32>) -> tensor<8x256xf32>\n"
       "  %1 = tosa.clamp %0 {max_val = 3.0e38 : f32, min_val = 0.0 : f32} : (tensor<8x256xf32>) -> "
       "tensor<8x256xf32>\n"
       "  return %1 : tensor<8x256xf32>\n}\n",
       {1, 2, 2}},
      {"func.func @s(%x: tensor<3x40xf32>) -> tensor<3x40xf32> {\n"
       "  %0 = tosa.sigmoid %x : (tensor<3x40xf32>) -> tensor<3x40xf32>\n"
       "  return %0 : tensor<3x40xf32>\n}\n",
       {1, 1, 1}},
  };
  static const char *const gpus[] = {"sm_89", "gfx950", "arm5gen", "videocore_vii"};
  for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
    for (size_t g = 0; g < sizeof gpus / sizeof gpus[0]; g++) {
      const kiln_target_t *targets[1] = {target(gpus[g])};
      kiln_compiler_output_t out;
      assert_null(
          kiln_compiler_compile(*state, cases[c].model, strlen(cases[c].model), "e.mlir", targets, 1, &out));
      if (out.targets[0].status) fail_msg("%s: %s", gpus[g], kiln_status_message(out.targets[0].status));
      uint32_t grid[3];
      last_dispatch(&out, grid);
      if (memcmp(grid, cases[c].grid, sizeof grid) != 0) {
        fail_msg("case %zu on %s: %u x %u x %u workgroups, want %u x %u x %u", c, gpus[g], grid[0], grid[1],
                 grid[2], cases[c].grid[0], cases[c].grid[1], cases[c].grid[2]);
      }
      kiln_compiler_output_deinit(&out);
    }
  }
}

/* f16 on RV64GC, which cannot convert it: kept as bits and converted by kiln's
 * integer code (as on Vulkan without Float16). Without it the library calls
 * compiler-rt's __extendhfsf2, which an embedded ELF cannot import, and the link
 * fails; Zfhmin chips (spacemit-x60) convert in hardware. */
static void test_cpu_f16_without_hardware(void **state) {
  static const char model[] =
      "func.func @h(%a: tensor<7xf16>, %b: tensor<7xf32>) -> tensor<7xf16> {\n"
      "  %s = \"tosa.const\"() {values = dense<0> : tensor<1xi8>} : () -> tensor<1xi8>\n"
      "  %0 = tosa.cast %b : (tensor<7xf32>) -> tensor<7xf16>\n"
      "  %1 = tosa.mul %a, %0, %s : (tensor<7xf16>, tensor<7xf16>, tensor<1xi8>) -> tensor<7xf16>\n"
      "  return %1 : tensor<7xf16>\n}\n";
  assert_true(target("riscv64")->f16_as_bits);
  assert_false(target("spacemit-x60")->f16_as_bits);
  const kiln_target_t *targets[2] = {target("riscv64"), target("spacemit-x60")};
  kiln_compiler_output_t out;
  assert_null(kiln_compiler_compile(*state, model, strlen(model), "h.mlir", targets, 2, &out));
  for (size_t t = 0; t < 2; t++) {
    if (out.targets[t].status) fail_msg("%s: %s", targets[t]->id, kiln_status_message(out.targets[t].status));
    assert_true(out.targets[t].n_kernels > 0);
  }
  kiln_compiler_output_deinit(&out);
}

/* Dynamic dimensions: the plan reads them from the input's buffer view and
 * computes the grid, the sizes and the result's shape from them; the kernels
 * take flat buffers and read the sizes from the argument buffer (no scalars). */
static void test_dynamic_plan(void **state) {
  static const char text[] =
      "func.func @dyn(%a: tensor<?x16xf32>) -> tensor<?x16xf32> {\n"
      "  %0 = tosa.tanh %a : (tensor<?x16xf32>) -> tensor<?x16xf32>\n"
      "  return %0 : tensor<?x16xf32>\n}\n";
  const kiln_target_t *targets[2] = {target("sm_89"), target("arm5gen")};
  kiln_compiler_output_t out;
  assert_null(kiln_compiler_compile(*state, text, strlen(text), "dyn.mlir", targets, 2, &out));
  assert_null(out.plan_status);
  const kiln_vmfb_function_t *fn = &out.plan.functions[0];
  assert_int_equal(fn->inputs[0].dims[0], -1);
  assert_int_equal(fn->inputs[0].dims[1], 16);
  assert_int_equal(fn->results[0].type.dims[0], -1);
  assert_true(fn->results[0].dim_exprs[0] > 0 && fn->results[0].size_expr > 0);
  bool has_args = false, dynamic_grid = false;
  for (size_t b = 0; b < fn->n_buffers; b++)
    has_args = has_args || fn->buffers[b].kind == KILN_VMFB_BUFFER_ARGS;
  for (size_t s = 0; s < fn->n_steps; s++) {
    for (int d = 0; d < 3; d++) dynamic_grid = dynamic_grid || fn->steps[s].workgroup_exprs[d];
  }
  assert_true(has_args);
  assert_true(dynamic_grid);
  for (size_t t = 0; t < 2; t++) {
    assert_null(out.targets[t].status);
    for (size_t k = 0; k < out.targets[t].n_kernels; k++) {
      for (size_t a = 0; a < out.targets[t].kernels[k].n_args; a++) {
        assert_int_equal(out.targets[t].kernels[k].args[a].kind, KILN_COMPILER_ARG_BUFFER);
      }
    }
  }
  /* 5 rows: the result is 5x16, whatever the sizes evaluate through. */
  int64_t dims[1][KILN_VMFB_MAX_RANK] = {{5, 16}};
  int64_t *values = calloc(fn->n_exprs + 1, sizeof *values);
  assert_true(kiln_vmfb_exprs_eval(fn, (const int64_t(*)[KILN_VMFB_MAX_RANK])dims, values));
  assert_int_equal(values[fn->results[0].dim_exprs[0] - 1], 5);
  assert_int_equal(values[fn->results[0].size_expr - 1], 5 * 16 * 4);
  free(values);
  kiln_compiler_output_deinit(&out);
}

/* A target's failure says what failed, short: an f64 vector on a Vulkan target
 * (no profile has Float64, and kiln's f64 emulation covers scalars) is refused by
 * kiln, naming the op's line and the target, where f64 there was MLIR's dump of
 * the whole gpu.func ("failed to legalize operation 'gpu.func'", 2 KB); the same
 * program compiles for AMD. */
static void test_failure_messages_stay_short(void **state) {
  static const char text[] =
      "func.func @v(%a: tensor<4xf64>) -> tensor<4xf64> {\n"
      "  %e = tensor.empty() : tensor<4xf64>\n"
      "  %r = linalg.generic {indexing_maps = [affine_map<(d0) -> (d0)>, affine_map<(d0) -> (d0)>],\n"
      "      iterator_types = [\"parallel\"]} ins(%a : tensor<4xf64>) outs(%e : tensor<4xf64>) {\n"
      "  ^bb0(%x: f64, %o: f64):\n"
      "    %v = vector.broadcast %x : f64 to vector<2xf64>\n"
      "    %s = vector.reduction <add>, %v : vector<2xf64> into f64\n"
      "    linalg.yield %s : f64\n"
      "  } -> tensor<4xf64>\n"
      "  return %r : tensor<4xf64>\n}\n";
  const kiln_target_t *targets[2] = {target("videocore_vii"), target("gfx950")};
  kiln_compiler_output_t out;
  kiln_test_assert_ok(kiln_compiler_compile(*state, text, sizeof text - 1, "vec.mlir", targets, 2, &out));
  assert_non_null(out.targets[0].status);
  assert_int_equal(kiln_status_code(out.targets[0].status), KILN_STATUS_UNIMPLEMENTED);
  const char *msg = kiln_status_message(out.targets[0].status);
  if (strlen(msg) > 600 || !strstr(msg, "vec.mlir:6:") || !strstr(msg, "videocore_vii") ||
      !strstr(msg, "Float64") || !strstr(msg, "f64 vector")) {
    fail_msg("%zu bytes: %s", strlen(msg), msg);
  }
  if (out.targets[1].status) fail_msg("%s", kiln_status_message(out.targets[1].status));
  kiln_compiler_output_deinit(&out);
}

/* MLIR's "see current operation" notes print whole ops (a gpu.module: tens of
 * kilobytes); each captured diagnostic keeps its first 1 KB and says how much
 * was left out, never cutting a UTF-8 sequence. */
static void test_long_diagnostics_are_cut(void **state) {
  kiln_compiler_context_t *context = *state;
  kiln_diag_capture_t capture;
  kiln_compiler_diag_attach(context, "big.mlir", &capture);
  kiln_buf_t big;
  kiln_buf_init(&big);
  kiln_buf_append_str(&big, "see current operation: ");
  for (int i = 0; i < 2000; i++) kiln_buf_append_str(&big, "\xc3\xa9"); /* e-acute, 2 bytes */
  mlirEmitError(mlirLocationFileLineColGet(context->mlir, mlirStringRefCreateFromCString("-"), 3, 4),
                big.data);
  const char *got = capture.text.data;
  if (!strstr(got, "big.mlir:3:4: error: see current operation: ") || !strstr(got, "left out") ||
      capture.text.len > 1400) {
    fail_msg("%zu bytes: %.200s", capture.text.len, got);
  }
  /* the cut lands on a character boundary: the byte before " ... (" ends an e-acute */
  const char *cut = strstr(got, " ... (");
  assert_non_null(cut);
  assert_int_equal((unsigned char)cut[-1], 0xa9);
  assert_int_equal((unsigned char)cut[-2], 0xc3);
  assert_int_equal(capture.errors, 1);
  kiln_compiler_diag_detach(&capture);
  kiln_buf_deinit(&big);
}

/* Valid programs without a kernel still make VMFBs (a returned constant, an input
 * passed through, a reshape of it), and JAX's `func.func public @main` is an entry
 * point. The VMFB reads back as current with the function exported. */
static void test_programs_without_kernels(void **state) {
  static const char text[] =
      "func.func public @main(%a: tensor<2x3xf32>) -> (tensor<3x2xf32>, tensor<2xi1>) {\n"
      "  %c = arith.constant dense<[true, false]> : tensor<2xi1>\n"
      "  %s = tosa.const_shape {values = dense<[3, 2]> : tensor<2xindex>} : () -> !tosa.shape<2>\n"
      "  %r = tosa.reshape %a, %s : (tensor<2x3xf32>, !tosa.shape<2>) -> tensor<3x2xf32>\n"
      "  return %r, %c : tensor<3x2xf32>, tensor<2xi1>\n}\n";
  const kiln_target_t *targets[2] = {target("gfx1100"), target("videocore_vii")};
  kiln_compiler_output_t out;
  kiln_test_assert_ok(kiln_compiler_compile(*state, text, sizeof text - 1, "nok.mlir", targets, 2, &out));
  assert_null(out.plan_status);
  assert_int_equal(out.plan.n_functions, 1);
  assert_string_equal(out.plan.functions[0].name, "main");
  assert_int_equal(out.plan.functions[0].n_results, 2);
  assert_int_equal(out.plan.functions[0].results[1].type.element_type, KILN_VMFB_ELEMENT_BOOL_8);
  for (size_t t = 0; t < 2; t++) {
    assert_null(out.targets[t].status);
    assert_int_equal(out.targets[t].n_kernels, 0);
    kiln_buf_t vmfb;
    kiln_buf_init(&vmfb);
    kiln_compiler_artifact_options_t options = {.source = text, .source_len = sizeof text - 1};
    kiln_test_assert_ok(kiln_compiler_artifact_write(&out, t, &options, &vmfb));
    kiln_vmfb_info_t info;
    kiln_test_assert_ok(kiln_vmfb_read((const uint8_t *)vmfb.data, vmfb.len, &info));
    assert_int_equal(info.cls, KILN_VMFB_CLASS_CURRENT);
    kiln_vmfb_info_deinit(&info);
    kiln_buf_deinit(&vmfb);
  }
  kiln_compiler_output_deinit(&out);
}

static void test_examples_all_gpu_targets(void **state) {
  static const char *const models[] = {"mlp", "convnet", "attention"};
  const kiln_target_t *targets[32];
  size_t n = 0;
  for (size_t i = 0; i < kiln_compiler_target_count(); i++) {
    const kiln_target_t *t = kiln_compiler_target_at(i);
    if (t->kind != KILN_TARGET_KIND_CPU) targets[n++] = t;
  }
  bool have_ptxas = access("/usr/local/cuda/bin/ptxas", X_OK) == 0;
  for (size_t m = 0; m < 3; m++) {
    char path[512];
    snprintf(path, sizeof path, "%s/examples/%s.mlir", KILN_SOURCE_DIR, models[m]);
    size_t len;
    char *src = kiln_read_file(path, &len);
    assert_non_null(src);
    kiln_compiler_output_t out;
    kiln_status_t st = kiln_compiler_compile(*state, src, len, path, targets, n, &out);
    if (st) fail_msg("%s: %s", models[m], kiln_status_message(st));
    for (size_t t = 0; t < out.n_targets; t++) {
      const kiln_compiler_target_output_t *o = &out.targets[t];
      if (o->status) fail_msg("%s for %s: %s", models[m], o->target->id, kiln_status_message(o->status));
      assert_true(o->n_kernels > 0);
      for (size_t k = 0; k < o->n_kernels; k++) {
        const kiln_compiler_kernel_t *kern = &o->kernels[k];
        /* Kernels share their device module: check each distinct module once. */
        if (k > 0 && kern->binary_len == o->kernels[k - 1].binary_len &&
            memcmp(kern->binary, o->kernels[k - 1].binary, kern->binary_len) == 0) {
          continue;
        }
        char output[8192], cmd[128];
        int rc = 0;
        switch (o->target->kind) {
          case KILN_TARGET_KIND_VULKAN:
            snprintf(cmd, sizeof cmd, "spirv-val --target-env vulkan%s",
                     o->target->spirv_version_minor >= 6 ? "1.3" : "1.1");
            rc = run_tool(cmd, kern->binary, kern->binary_len, output, sizeof output);
            break;
          case KILN_TARGET_KIND_HIP:
            rc = run_tool("/usr/lib/llvm-22/bin/llvm-readobj --file-headers", kern->binary, kern->binary_len,
                          output, sizeof output);
            if (!rc && !strstr(output, "EM_AMDGPU")) rc = -1;
            break;
          case KILN_TARGET_KIND_CUDA:
            if (!have_ptxas) continue;
            snprintf(cmd, sizeof cmd, "/usr/local/cuda/bin/ptxas -arch=%s -o /dev/null", o->target->chip);
            rc = run_tool(cmd, kern->binary, kern->binary_len, output, sizeof output);
            break;
          default: break;
        }
        if (rc != 0) {
          fail_msg("%s for %s, kernel %s: %s", models[m], o->target->id, kern->name, output);
        }
      }
      /* Its VMFB reads back completely, current, with every kernel, and the same
       * input gives the same bytes. */
      kiln_compiler_artifact_options_t ao = {.source = src, .source_len = len, .embed_source = true};
      kiln_buf_t vmfb, again;
      kiln_buf_init(&vmfb);
      kiln_buf_init(&again);
      st = kiln_compiler_artifact_write(&out, t, &ao, &vmfb);
      if (st) fail_msg("%s for %s: %s", models[m], o->target->id, kiln_status_message(st));
      assert_null(kiln_compiler_artifact_write(&out, t, &ao, &again));
      assert_int_equal(vmfb.len, again.len);
      assert_memory_equal(vmfb.data, again.data, vmfb.len);
      kiln_vmfb_info_t info;
      assert_null(kiln_vmfb_read((const uint8_t *)vmfb.data, vmfb.len, &info));
      if (info.cls != KILN_VMFB_CLASS_CURRENT) {
        fail_msg("%s for %s: %s VMFB: %s", models[m], o->target->id, kiln_vmfb_class_name(info.cls),
                 info.reason);
      }
      assert_string_equal(info.name, models[m]);
      assert_int_equal(info.hal_version, 7);
      assert_int_equal(info.n_executables, 1);
      assert_true(info.executables[0].has_header);
      assert_int_equal(info.executables[0].n_kernels, o->n_kernels);
      for (size_t k = 0; k < o->n_kernels; k++)
        assert_string_equal(info.executables[0].kernels[k], o->kernels[k].name);
      if (o->target->kind != KILN_TARGET_KIND_VULKAN)
        assert_string_equal(info.executables[0].chip, o->target->chip);
      assert_string_equal(kiln_vmfb_info_attr(&info, "kiln.target"), o->target->id);
      assert_true(info.has_source);
      kiln_vmfb_info_deinit(&info);
      uint8_t *back = NULL;
      size_t back_len = 0;
      assert_null(kiln_vmfb_source_extract((const uint8_t *)vmfb.data, vmfb.len, &back, &back_len));
      assert_int_equal(back_len, len);
      assert_memory_equal(back, src, len);
      kiln_free(back);
      kiln_buf_deinit(&vmfb);
      kiln_buf_deinit(&again);
    }
    kiln_compiler_output_deinit(&out);
    kiln_free(src);
  }
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_cuda_ptx),
      cmocka_unit_test(test_hip_hsaco),
      cmocka_unit_test(test_vulkan_spirv),
      cmocka_unit_test(test_bad_ir_has_diagnostics),
      cmocka_unit_test(test_cpu_library),
      cmocka_unit_test(test_long_vector),
      cmocka_unit_test(test_bf16_matmul_tiles),
      cmocka_unit_test(test_f8_matmul_tiles),
      cmocka_unit_test(test_epilogue_fusion),
      cmocka_unit_test(test_cpu_f16_without_hardware),
      cmocka_unit_test(test_metadata),
      cmocka_unit_test(test_copies_become_kernels),
      cmocka_unit_test(test_gpu_dialect_input),
      cmocka_unit_test(test_refused_models),
      cmocka_unit_test(test_high_rank_loops),
      cmocka_unit_test(test_tiles_follow_compute_units),
      cmocka_unit_test(test_elementwise_vectors),
      cmocka_unit_test(test_dynamic_plan),
      cmocka_unit_test(test_programs_without_kernels),
      cmocka_unit_test(test_failure_messages_stay_short),
      cmocka_unit_test(test_long_diagnostics_are_cut),
      cmocka_unit_test(test_examples_all_gpu_targets),
  };
  return cmocka_run_group_tests(tests, setup, teardown);
}
