/* bench_kernels: the speed of kiln's CPU kernels against OpenBLAS and plain C, side
 * by side in one run, beside the machine's peak.
 *
 * Each case is a TOSA function compiled in process by kiln for a CPU target (the
 * machine's own ISA: sapphirerapids or znver4 with AVX-512, else x86_64, the
 * x86-64-v3 level; KILN_BENCH_TARGET overrides), its executable library loaded
 * through dlopen and its host plan run step by step (tests/tools/cpu_exec.h: every
 * dispatch over its grid, on one thread or shared among N, as IREE's local-sync
 * and local-task drivers run it). The baselines run on the same data:
 *   sgemm (square 256..2048, and a transformer layer's rectangular shapes)
 *     against OpenBLAS's cblas_sgemm;
 *   a 3x3 convolution (1x56x56x64 -> 64, padded, NHWC) against im2col in C and
 *     OpenBLAS's sgemm;
 *   softmax over rows of 4096 against a plain C loop (compiled -O3).
 * Every kiln result is compared with the baseline's (largest relative error) before
 * it is timed. Beside them, the same kernels compiled naive (KILN_CPU_NAIVE: the
 * GPUs' invocations in plain loops, without the CPU ordering, noalias and FMA
 * contraction; the rank-3 tiling of the front half stays), one run each, for
 * cases under 4 GFLOP a call. Times are medians; GFLOP/s counts 2 flops per
 * multiply-add. The peak printed is cores x FMA units (2 assumed) x vector lanes x 2 x the clock
 * /proc/cpuinfo reports: an estimate, for scale.
 *
 * Goals (issue 16), reported PASS/MISS, never asserted: sgemm 1024 >= 0.6x
 * OpenBLAS on one thread and >= 0.5x on all cores; the 3x3 conv >= 0.8x im2col +
 * OpenBLAS. Usage: bench_kernels [--quick] (--quick: small shapes, one run each, as
 * CI runs it to keep the benchmark building and running); KILN_BENCH_CASES=sgemm,conv
 * runs only those cases; KILN_BENCH_GPU_TARGETS=gfx1201,gfx1100 reads the GPU
 * section's code for those targets instead of sm_89, gfx950 and mali-g720.
 * Exits 0 unless the benchmark itself cannot run.
 */
#include <cblas.h>
#include <errno.h>
#include <math.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "base/alloc.h"
#include "base/buf.h"
#include "base/time.h"
#include "bench/benchlib.h"
#include "bench/gpu_code.h"
#include "compiler/pipeline.h"
#include "compiler/targets.h"
#include "compiler/vmfb/plan.h"
#include "tests/tools/cpu_exec.h"

static bool quick;
static kiln_compiler_context_t *context;
static const kiln_target_t *target;

static void usage(void) { fprintf(stderr, "usage: bench_kernels [--quick]\n"); }

/* ---- the machine ---- */

static bool cpu_has(const char *flag) {
  FILE *f = fopen("/proc/cpuinfo", "r");
  char line[8192];
  bool has = false;
  while (f && !has && fgets(line, sizeof line, f)) {
    if (strncmp(line, "flags", 5) != 0) continue;
    for (char *save = NULL, *tok = strtok_r(line, " \t\n", &save); tok && !has;
         tok = strtok_r(NULL, " \t\n", &save)) {
      has = strcmp(tok, flag) == 0;
    }
    break;
  }
  if (f) fclose(f);
  return has;
}

static double cpu_mhz(void) {
  FILE *f = fopen("/proc/cpuinfo", "r");
  char line[512];
  double mhz = 0;
  while (f && fgets(line, sizeof line, f)) {
    if (sscanf(line, "cpu MHz : %lf", &mhz) == 1) break;
  }
  if (f) fclose(f);
  return mhz;
}

static const kiln_target_t *pick_target(void) {
  const char *env = getenv("KILN_BENCH_TARGET");
  const char *name = env && *env ? env : "x86_64";
  if (!(env && *env) && cpu_has("avx512f") && cpu_has("avx512bw") && cpu_has("avx512vl")) {
    name = cpu_has("avx512_fp16") ? "sapphirerapids" : "znver4";
  }
  const kiln_target_t *t = kiln_compiler_target_find(name);
  if (!t || t->kind != KILN_TARGET_KIND_CPU) kiln_bench_die("%s is not a kiln CPU target", name);
  return t;
}

/* ---- kiln's side: compile, load, run the plan ---- */

typedef struct program_s {
  kiln_compiler_output_t out;
  const kiln_vmfb_function_t *fn;
  kiln_cpu_lib_t *lib;
  uint8_t **buffers; /* per plan buffer */
} program_t;

/* Compiles `text`; with `naive`, as the kernels were before kiln ordered them for
 * CPUs (KILN_CPU_NAIVE, read by the compiler in this process: jobs is 1). */
static void program_compile(program_t *p, const char *text, bool naive) {
  memset(p, 0, sizeof *p);
  if (naive) setenv("KILN_CPU_NAIVE", "1", 1);
  kiln_status_t st = kiln_compiler_compile(context, text, strlen(text), "bench.mlir", &target, 1, &p->out);
  unsetenv("KILN_CPU_NAIVE");
  if (st) kiln_bench_die("kiln does not compile a bench case: %s", kiln_status_message(st));
  if (p->out.targets[0].status) {
    kiln_bench_die("kiln's %s back half failed: %s", target->id,
                   kiln_status_message(p->out.targets[0].status));
  }
  if (p->out.plan_status || p->out.plan.n_functions != 1) kiln_bench_die("a bench case has no host plan");
  p->fn = &p->out.plan.functions[0];
  char err[512];
  const kiln_compiler_kernel_t *k = &p->out.targets[0].kernels[0];
  p->lib = kiln_cpu_lib_load(k->binary, k->binary_len, err, sizeof err);
  if (!p->lib) kiln_bench_die("loading kiln's library: %s", err);
  p->buffers = kiln_calloc(p->fn->n_buffers ? p->fn->n_buffers : 1, sizeof *p->buffers);
  for (size_t i = 0; i < p->fn->n_buffers; i++) {
    const kiln_vmfb_buffer_t *b = &p->fn->buffers[i];
    if (b->size_expr || b->kind == KILN_VMFB_BUFFER_SELECT) kiln_bench_die("bench cases have static shapes");
    p->buffers[i] = kiln_malloc(b->size_bytes ? b->size_bytes : 4);
    if (b->kind == KILN_VMFB_BUFFER_CONSTANT) memcpy(p->buffers[i], b->data, b->size_bytes);
  }
}

static void program_free(program_t *p) {
  for (size_t i = 0; p->fn && i < p->fn->n_buffers; i++) kiln_free(p->buffers[i]);
  kiln_free(p->buffers);
  kiln_cpu_lib_unload(p->lib);
  kiln_compiler_output_deinit(&p->out);
}

/* Input `index`'s buffer (every input is copied in once; kernels never write one). */
static void program_input(program_t *p, uint32_t index, const float *data, size_t n) {
  for (size_t i = 0; i < p->fn->n_buffers; i++) {
    const kiln_vmfb_buffer_t *b = &p->fn->buffers[i];
    if (b->kind == KILN_VMFB_BUFFER_INPUT && b->input == index) {
      if (b->size_bytes < n * sizeof *data)
        kiln_bench_die("input %u is %llu bytes", index, (unsigned long long)b->size_bytes);
      memcpy(p->buffers[i], data, n * sizeof *data);
    }
  }
}

static const float *program_result(const program_t *p) {
  const kiln_vmfb_result_t *r = &p->fn->results[0];
  return (const float *)(p->buffers[r->buffer] + r->offset);
}

/* One call: the plan's steps in order. */
static void program_run(program_t *p, unsigned threads) {
  for (size_t s = 0; s < p->fn->n_steps; s++) {
    const kiln_vmfb_step_t *st = &p->fn->steps[s];
    if (st->kind == KILN_VMFB_STEP_COPY) {
      memmove(p->buffers[st->dst] + st->dst_offset, p->buffers[st->src] + st->src_offset, st->length);
      continue;
    }
    if (st->kind != KILN_VMFB_STEP_DISPATCH || st->n_bindings > 64)
      kiln_bench_die("bench cases branch nowhere");
    void *ptrs[64];
    size_t lengths[64];
    for (size_t b = 0; b < st->n_bindings; b++) {
      ptrs[b] = p->buffers[st->bindings[b].buffer] + st->bindings[b].offset;
      lengths[b] = st->bindings[b].length;
    }
    char err[512];
    if (!kiln_cpu_lib_dispatch(p->lib, st->kernel, ptrs, lengths, st->n_bindings, st->constants,
                               st->n_constants, st->workgroups, threads, err, sizeof err)) {
      kiln_bench_die("running kiln's kernel: %s", err);
    }
  }
}

/* ---- timing ---- */

typedef void (*run_fn_t)(void *user, unsigned threads);

static void run_program(void *user, unsigned threads) { program_run(user, threads); }

/* The median of `runs` timed calls after one untimed, in seconds. */
static double time_it(run_fn_t fn, void *user, unsigned threads, int runs) {
  fn(user, threads);
  int64_t t[16];
  if (runs > 16) runs = 16;
  for (int i = 0; i < runs; i++) {
    int64_t t0 = kiln_time_monotonic_ns();
    fn(user, threads);
    t[i] = kiln_time_monotonic_ns() - t0;
  }
  return (double)kiln_bench_median(t, (size_t)runs) / 1e9;
}

static int runs_for(double flops) {
  if (quick) return 1;
  return flops > 4e9 ? 3 : flops > 5e8 ? 5 : 9;
}

static void fill(float *x, size_t n, uint64_t seed) {
  for (size_t i = 0; i < n; i++) {
    seed = seed * 6364136223846793005ull + 1442695040888963407ull;
    x[i] = (float)((double)(seed >> 40) / (double)(1u << 24) - 0.5);
  }
}

/* Largest |a - b| relative to the largest |b|. */
static double rel_error(const float *a, const float *b, size_t n) {
  double err = 0, scale = 1e-30;
  for (size_t i = 0; i < n; i++) {
    double d = fabs((double)a[i] - b[i]);
    if (d > err || isnan(d)) err = isnan(d) ? INFINITY : d;
    if (fabs(b[i]) > scale) scale = fabs(b[i]);
  }
  return err / scale;
}

static void check(const char *what, const float *kiln, const float *ref, size_t n, double tol) {
  double e = rel_error(kiln, ref, n);
  if (!(e <= tol))
    kiln_bench_die("%s: kiln's result differs from the baseline's by %.2g (relative)", what, e);
}

/* ---- sgemm ---- */

typedef struct gemm_s {
  int m, n, k;
  float *a, *b, *c;
} gemm_t;

static void run_blas(void *user, unsigned threads) {
  gemm_t *g = user;
  openblas_set_num_threads((int)threads);
  cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, g->m, g->n, g->k, 1.0f, g->a, g->k, g->b, g->n, 0.0f,
              g->c, g->n);
}

static char *matmul_text(int m, int n, int k) {
  kiln_buf_t t;
  kiln_buf_init(&t);
  kiln_buf_appendf(
      &t,
      "func.func @mm(%%a: tensor<1x%dx%dxf32>, %%b: tensor<1x%dx%dxf32>) -> tensor<1x%dx%dxf32> {\n"
      "  %%zp = \"tosa.const\"() {values = dense<0.0> : tensor<1xf32>} : () -> tensor<1xf32>\n"
      "  %%0 = tosa.matmul %%a, %%b, %%zp, %%zp : (tensor<1x%dx%dxf32>, tensor<1x%dx%dxf32>, "
      "tensor<1xf32>, tensor<1xf32>) -> tensor<1x%dx%dxf32>\n"
      "  return %%0 : tensor<1x%dx%dxf32>\n}\n",
      m, k, k, n, m, n, m, k, k, n, m, n, m, n);
  return kiln_buf_take(&t);
}

/* A TOSA text from a format and its arguments. */
static char *text_of(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static char *text_of(const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  char *s = kiln_buf_vsprintf(fmt, ap);
  va_end(ap);
  return s;
}

/* An n x n matmul of 16-bit floats `h` (f16, bf16) accumulated in f32. */
static char *matmul_half_text(int n, const char *h) {
  return text_of(
      "func.func @mm(%%a: tensor<1x%dx%dx%s>, %%b: tensor<1x%dx%dx%s>) -> tensor<1x%dx%dxf32> {\n"
      "  %%zp = \"tosa.const\"() {values = dense<0.0> : tensor<1x%s>} : () -> tensor<1x%s>\n"
      "  %%0 = tosa.matmul %%a, %%b, %%zp, %%zp : (tensor<1x%dx%dx%s>, tensor<1x%dx%dx%s>, "
      "tensor<1x%s>, tensor<1x%s>) -> tensor<1x%dx%dxf32>\n"
      "  return %%0 : tensor<1x%dx%dxf32>\n}\n",
      n, n, h, n, n, h, n, n, h, h, n, n, h, n, n, h, h, h, n, n, n, n);
}

/* An n x n matmul of 8-bit floats `f8` (f8E4M3FN, f8E5M2) accumulated in f32, as
 * linalg writes it (TOSA's f8 matmul accumulates in f16). */
static char *matmul_f8_text(int n, const char *f8) {
  return text_of(
      "func.func @mm(%%a: tensor<%dx%dx%s>, %%b: tensor<%dx%dx%s>) -> tensor<%dx%dxf32> {\n"
      "  %%z = arith.constant 0.0 : f32\n  %%e = tensor.empty() : tensor<%dx%dxf32>\n"
      "  %%f = linalg.fill ins(%%z : f32) outs(%%e : tensor<%dx%dxf32>) -> tensor<%dx%dxf32>\n"
      "  %%r = linalg.matmul ins(%%a, %%b : tensor<%dx%dx%s>, tensor<%dx%dx%s>) outs(%%f : "
      "tensor<%dx%dxf32>) "
      "-> tensor<%dx%dxf32>\n  return %%r : tensor<%dx%dxf32>\n}\n",
      n, n, f8, n, n, f8, n, n, n, n, n, n, n, n, n, n, f8, n, n, f8, n, n, n, n, n, n);
}

/* A conv2d (k x k, same padding) or a depthwise one over 1 x hw x hw x c. */
static char *conv_text(int hw, int c, int f, int k, bool depthwise) {
  int pad = k / 2;
  if (depthwise) {
    return text_of(
        "func.func @dw(%%x: tensor<1x%dx%dx%dxf32>, %%w: tensor<%dx%dx%dx1xf32>) -> tensor<1x%dx%dx%dxf32> "
        "{\n"
        "  %%b = \"tosa.const\"() {values = dense<0.0> : tensor<%dxf32>} : () -> tensor<%dxf32>\n"
        "  %%zp = \"tosa.const\"() {values = dense<0.0> : tensor<1xf32>} : () -> tensor<1xf32>\n"
        "  %%0 = tosa.depthwise_conv2d %%x, %%w, %%b, %%zp, %%zp {acc_type = f32, dilation = array<i64: 1, "
        "1>, "
        "pad = array<i64: %d, %d, %d, %d>, stride = array<i64: 1, 1>} : (tensor<1x%dx%dx%dxf32>, "
        "tensor<%dx%dx%dx1xf32>, tensor<%dxf32>, tensor<1xf32>, tensor<1xf32>) -> tensor<1x%dx%dx%dxf32>\n"
        "  return %%0 : tensor<1x%dx%dx%dxf32>\n}\n",
        hw, hw, c, k, k, c, hw, hw, c, c, c, pad, pad, pad, pad, hw, hw, c, k, k, c, c, hw, hw, c, hw, hw, c);
  }
  return text_of(
      "func.func @conv(%%x: tensor<1x%dx%dx%dxf32>, %%w: tensor<%dx%dx%dx%dxf32>) -> tensor<1x%dx%dx%dxf32> "
      "{\n"
      "  %%b = \"tosa.const\"() {values = dense<0.0> : tensor<%dxf32>} : () -> tensor<%dxf32>\n"
      "  %%zp = \"tosa.const\"() {values = dense<0.0> : tensor<1xf32>} : () -> tensor<1xf32>\n"
      "  %%0 = tosa.conv2d %%x, %%w, %%b, %%zp, %%zp {acc_type = f32, dilation = array<i64: 1, 1>, "
      "pad = array<i64: %d, %d, %d, %d>, stride = array<i64: 1, 1>} : (tensor<1x%dx%dx%dxf32>, "
      "tensor<%dx%dx%dx%dxf32>, tensor<%dxf32>, tensor<1xf32>, tensor<1xf32>) -> tensor<1x%dx%dx%dxf32>\n"
      "  return %%0 : tensor<1x%dx%dx%dxf32>\n}\n",
      hw, hw, c, f, k, k, c, hw, hw, f, f, f, pad, pad, pad, pad, hw, hw, c, f, k, k, c, f, hw, hw, f, hw, hw,
      f);
}

static char *softmax_rows_text(int rows, int cols) {
  return text_of(
      "func.func @softmax(%%x: tensor<%dx%dxf32>) -> tensor<%dx%dxf32> {\n"
      "  %%m = tosa.reduce_max %%x {axis = 1 : i32} : (tensor<%dx%dxf32>) -> tensor<%dx1xf32>\n"
      "  %%d = tosa.sub %%x, %%m : (tensor<%dx%dxf32>, tensor<%dx1xf32>) -> tensor<%dx%dxf32>\n"
      "  %%e = tosa.exp %%d : (tensor<%dx%dxf32>) -> tensor<%dx%dxf32>\n"
      "  %%s = tosa.reduce_sum %%e {axis = 1 : i32} : (tensor<%dx%dxf32>) -> tensor<%dx1xf32>\n"
      "  %%r = tosa.reciprocal %%s : (tensor<%dx1xf32>) -> tensor<%dx1xf32>\n"
      "  %%sh = \"tosa.const\"() {values = dense<0> : tensor<1xi8>} : () -> tensor<1xi8>\n"
      "  %%y = tosa.mul %%e, %%r, %%sh : (tensor<%dx%dxf32>, tensor<%dx1xf32>, tensor<1xi8>) -> "
      "tensor<%dx%dxf32>\n"
      "  return %%y : tensor<%dx%dxf32>\n}\n",
      rows, cols, rows, cols, rows, cols, rows, rows, cols, rows, rows, cols, rows, cols, rows, cols, rows,
      cols, rows, rows, rows, rows, cols, rows, rows, cols, rows, cols);
}

/* A bias row and a SiLU (x * sigmoid(x)): one fused elementwise kernel. */
static char *bias_silu_text(int rows, int cols) {
  return text_of(
      "func.func @bias_silu(%%x: tensor<%dx%dxf32>, %%b: tensor<1x%dxf32>) -> tensor<%dx%dxf32> {\n"
      "  %%a = tosa.add %%x, %%b : (tensor<%dx%dxf32>, tensor<1x%dxf32>) -> tensor<%dx%dxf32>\n"
      "  %%g = tosa.sigmoid %%a : (tensor<%dx%dxf32>) -> tensor<%dx%dxf32>\n"
      "  %%sh = \"tosa.const\"() {values = dense<0> : tensor<1xi8>} : () -> tensor<1xi8>\n"
      "  %%y = tosa.mul %%a, %%g, %%sh : (tensor<%dx%dxf32>, tensor<%dx%dxf32>, tensor<1xi8>) -> "
      "tensor<%dx%dxf32>\n"
      "  return %%y : tensor<%dx%dxf32>\n}\n",
      rows, cols, cols, rows, cols, rows, cols, cols, rows, cols, rows, cols, rows, cols, rows, cols, rows,
      cols, rows, cols, rows, cols);
}

/* A dense layer: an n x n matmul, a bias row and ReLU. */
/* A dense layer: x W + b, ReLU, accumulated in f32; in a 16-bit type `h`
 * ("f16", "bf16") the f32 accumulators are cast to it first and the bias and
 * ReLU run in it, as an f16 model writes it. */
static char *dense_relu_text(int n, const char *h) {
  bool narrow = strcmp(h, "f32") != 0;
  char *cast =
      narrow ? text_of("  %%c = tosa.cast %%0 : (tensor<1x%dx%dxf32>) -> tensor<1x%dx%dx%s>\n", n, n, n, n, h)
             : kiln_strdup("");
  char *text = text_of(
      "func.func @dense(%%x: tensor<1x%dx%dx%s>, %%w: tensor<1x%dx%dx%s>, %%b: tensor<1x1x%dx%s>) -> "
      "tensor<1x%dx%dx%s> {\n"
      "  %%zp = \"tosa.const\"() {values = dense<0.0> : tensor<1x%s>} : () -> tensor<1x%s>\n"
      "  %%0 = tosa.matmul %%x, %%w, %%zp, %%zp : (tensor<1x%dx%dx%s>, tensor<1x%dx%dx%s>, tensor<1x%s>, "
      "tensor<1x%s>) -> tensor<1x%dx%dxf32>\n%s"
      "  %%1 = tosa.add %s, %%b : (tensor<1x%dx%dx%s>, tensor<1x1x%dx%s>) -> tensor<1x%dx%dx%s>\n"
      "  %%2 = tosa.clamp %%1 {max_val = %s : %s, min_val = 0.0 : %s} : (tensor<1x%dx%dx%s>) -> "
      "tensor<1x%dx%dx%s>\n"
      "  return %%2 : tensor<1x%dx%dx%s>\n}\n",
      n, n, h, n, n, h, n, h, n, n, h, h, h, n, n, h, n, n, h, h, h, n, n, cast, narrow ? "%c" : "%0", n, n,
      h, n, h, n, n, h, narrow ? "6.0e4" : "3.0e38", h, h, n, n, h, n, n, h, n, n, h);
  kiln_free(cast);
  return text;
}

/* One attention head: softmax(Q K^T / sqrt(d)) V, K given transposed. */
static char *attention_text(int s, int d) {
  return text_of(
      "func.func @attn(%%q: tensor<1x%dx%dxf32>, %%kt: tensor<1x%dx%dxf32>, %%v: tensor<1x%dx%dxf32>) -> "
      "tensor<1x%dx%dxf32> {\n"
      "  %%zp = \"tosa.const\"() {values = dense<0.0> : tensor<1xf32>} : () -> tensor<1xf32>\n"
      "  %%sh = \"tosa.const\"() {values = dense<0> : tensor<1xi8>} : () -> tensor<1xi8>\n"
      "  %%scale = \"tosa.const\"() {values = dense<%g> : tensor<1x1x1xf32>} : () -> tensor<1x1x1xf32>\n"
      "  %%qk = tosa.matmul %%q, %%kt, %%zp, %%zp : (tensor<1x%dx%dxf32>, tensor<1x%dx%dxf32>, "
      "tensor<1xf32>, "
      "tensor<1xf32>) -> tensor<1x%dx%dxf32>\n"
      "  %%x = tosa.mul %%qk, %%scale, %%sh : (tensor<1x%dx%dxf32>, tensor<1x1x1xf32>, tensor<1xi8>) -> "
      "tensor<1x%dx%dxf32>\n"
      "  %%m = tosa.reduce_max %%x {axis = 2 : i32} : (tensor<1x%dx%dxf32>) -> tensor<1x%dx1xf32>\n"
      "  %%dd = tosa.sub %%x, %%m : (tensor<1x%dx%dxf32>, tensor<1x%dx1xf32>) -> tensor<1x%dx%dxf32>\n"
      "  %%e = tosa.exp %%dd : (tensor<1x%dx%dxf32>) -> tensor<1x%dx%dxf32>\n"
      "  %%sum = tosa.reduce_sum %%e {axis = 2 : i32} : (tensor<1x%dx%dxf32>) -> tensor<1x%dx1xf32>\n"
      "  %%r = tosa.reciprocal %%sum : (tensor<1x%dx1xf32>) -> tensor<1x%dx1xf32>\n"
      "  %%p = tosa.mul %%e, %%r, %%sh : (tensor<1x%dx%dxf32>, tensor<1x%dx1xf32>, tensor<1xi8>) -> "
      "tensor<1x%dx%dxf32>\n"
      "  %%o = tosa.matmul %%p, %%v, %%zp, %%zp : (tensor<1x%dx%dxf32>, tensor<1x%dx%dxf32>, tensor<1xf32>, "
      "tensor<1xf32>) -> tensor<1x%dx%dxf32>\n"
      "  return %%o : tensor<1x%dx%dxf32>\n}\n",
      s, d, d, s, s, d, s, d, 1.0 / sqrt((double)d), s, d, d, s, s, s, s, s, s, s, s, s, s, s, s, s, s, s, s,
      s, s, s, s, s, s, s, s, s, s, s, s, s, s, s, s, d, s, d, s, d);
}

typedef struct row_s {
  double kiln[2], base[2]; /* GFLOP/s (or elements/ns) at 1 thread and at all */
  double naive[2];         /* the same kernels unordered (0: not measured) */
} row_t;

static unsigned all_threads;

static void print_row(const char *name, const char *unit, const row_t *r, const char *baseline) {
  char naive[64] = "      -       -";
  if (r->naive[0] > 0) snprintf(naive, sizeof naive, "%7.2f %7.2f", r->naive[0], r->naive[1]);
  printf("%-26s %8.2f %8.2f  %6.2fx | %8.2f %8.2f  %6.2fx | %s  (%s, %s)\n", name, r->kiln[0], r->base[0],
         r->kiln[0] / r->base[0], r->kiln[1], r->base[1], r->kiln[1] / r->base[1], naive, unit, baseline);
}

/* kiln's program and a baseline on one thread and on all, as `unit` per second
 * (`work` units per call), printed as one row. */
static row_t measure(const char *what, program_t *p, program_t *naive, run_fn_t base, void *base_user,
                     double work, double per_unit, const char *unit, const char *baseline) {
  row_t r;
  memset(&r, 0, sizeof r);
  unsigned threads[2] = {1, all_threads};
  for (int i = 0; i < 2; i++) {
    r.kiln[i] = work / time_it(run_program, p, threads[i], runs_for(work * per_unit)) / 1e9;
    r.base[i] = work / time_it(base, base_user, threads[i], runs_for(work * per_unit)) / 1e9;
    /* One run: the naive kernels are slow. */
    if (naive) r.naive[i] = work / time_it(run_program, naive, threads[i], 1) / 1e9;
  }
  print_row(what, unit, &r, baseline);
  return r;
}

/* The naive build of a case when it is small enough to time (below 4 GFLOP a
 * call: sgemm 2048 would take a minute a run). */
static program_t *naive_program(program_t *slot, const char *text, double flops, int n_inputs,
                                const float *const *in, const size_t *lens) {
  if (flops > 4e9) return NULL;
  program_compile(slot, text, true);
  for (int i = 0; i < n_inputs; i++) program_input(slot, (uint32_t)i, in[i], lens[i]);
  return slot;
}

static row_t bench_gemm(int m, int n, int k) {
  gemm_t g = {m,
              n,
              k,
              kiln_malloc(sizeof(float) * m * k),
              kiln_malloc(sizeof(float) * k * n),
              kiln_malloc(sizeof(float) * m * n)};
  fill(g.a, (size_t)m * k, 1);
  fill(g.b, (size_t)k * n, 2);
  char *text = matmul_text(m, n, k);
  program_t p, nslot;
  program_compile(&p, text, false);
  program_input(&p, 0, g.a, (size_t)m * k);
  program_input(&p, 1, g.b, (size_t)k * n);
  const float *ins[2] = {g.a, g.b};
  size_t lens[2] = {(size_t)m * k, (size_t)k * n};
  program_t *naive = naive_program(&nslot, text, 2.0 * m * n * k, 2, ins, lens);
  kiln_free(text);
  program_run(&p, all_threads);
  run_blas(&g, all_threads);
  char what[64];
  snprintf(what, sizeof what, "sgemm %dx%dx%d", m, n, k);
  check(what, program_result(&p), g.c, (size_t)m * n, 1e-4);
  row_t r = measure(what, &p, naive, run_blas, &g, 2.0 * m * n * k, 1, "GFLOP/s", "OpenBLAS");
  program_free(&p);
  if (naive) program_free(naive);
  kiln_free(g.a);
  kiln_free(g.b);
  kiln_free(g.c);
  return r;
}

/* ---- conv 3x3 ---- */

typedef struct conv_s {
  int h, w, c, f; /* NHWC input 1xHxWxC, F filters of 3x3xC, pad 1, stride 1 */
  float *in, *wt; /* wt: F x 3 x 3 x C (TOSA's OHWI) */
  float *cols, *wt_t, *out;
} conv_t;

/* im2col (rows: output pixels; columns: 3x3xC taps) then out = cols x wt^T. */
static void run_im2col(void *user, unsigned threads) {
  conv_t *v = user;
  int taps = 9 * v->c;
  for (int y = 0; y < v->h; y++) {
    for (int x = 0; x < v->w; x++) {
      float *row = v->cols + ((size_t)y * v->w + x) * taps;
      for (int dy = 0; dy < 3; dy++) {
        for (int dx = 0; dx < 3; dx++) {
          int sy = y + dy - 1, sx = x + dx - 1;
          float *dst = row + (dy * 3 + dx) * v->c;
          if (sy < 0 || sy >= v->h || sx < 0 || sx >= v->w) {
            memset(dst, 0, sizeof(float) * v->c);
          } else {
            memcpy(dst, v->in + ((size_t)sy * v->w + sx) * v->c, sizeof(float) * v->c);
          }
        }
      }
    }
  }
  openblas_set_num_threads((int)threads);
  cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, v->h * v->w, v->f, taps, 1.0f, v->cols, taps, v->wt,
              taps, 0.0f, v->out, v->f);
}

static row_t bench_conv(int hw, int c, int f) {
  int h = hw, w = hw;
  conv_t v = {h,
              w,
              c,
              f,
              kiln_malloc(sizeof(float) * h * w * c),
              kiln_malloc(sizeof(float) * f * 9 * c),
              kiln_malloc(sizeof(float) * h * w * 9 * c),
              NULL,
              kiln_malloc(sizeof(float) * h * w * f)};
  fill(v.in, (size_t)h * w * c, 3);
  fill(v.wt, (size_t)f * 9 * c, 4);
  char *text = conv_text(hw, c, f, 3, false);
  program_t p, nslot;
  program_compile(&p, text, false);
  program_input(&p, 0, v.in, (size_t)h * w * c);
  program_input(&p, 1, v.wt, (size_t)f * 9 * c);
  const float *ins[2] = {v.in, v.wt};
  size_t lens[2] = {(size_t)h * w * c, (size_t)f * 9 * c};
  program_t *naive = naive_program(&nslot, text, 2.0 * h * w * f * 9 * c, 2, ins, lens);
  kiln_free(text);
  program_run(&p, all_threads);
  run_im2col(&v, all_threads);
  char what[64];
  snprintf(what, sizeof what, "conv3x3 %dx%dx%d->%d", h, w, c, f);
  check(what, program_result(&p), v.out, (size_t)h * w * f, 1e-4);
  row_t r =
      measure(what, &p, naive, run_im2col, &v, 2.0 * h * w * f * 9 * c, 1, "GFLOP/s", "im2col+OpenBLAS");
  program_free(&p);
  if (naive) program_free(naive);
  kiln_free(v.in);
  kiln_free(v.wt);
  kiln_free(v.cols);
  kiln_free(v.out);
  return r;
}

/* ---- softmax ---- */

typedef struct softmax_s {
  int rows, cols;
  float *x, *y;
} softmax_t;

/* The plain C loop: max, exp and sum, scale; one thread (the baseline has none). */
static void run_softmax_c(void *user, unsigned threads) {
  (void)threads;
  softmax_t *s = user;
  for (int r = 0; r < s->rows; r++) {
    const float *x = s->x + (size_t)r * s->cols;
    float *y = s->y + (size_t)r * s->cols;
    float m = x[0], sum = 0;
    for (int i = 1; i < s->cols; i++) m = x[i] > m ? x[i] : m;
    for (int i = 0; i < s->cols; i++) sum += y[i] = expf(x[i] - m);
    float inv = 1.0f / sum;
    for (int i = 0; i < s->cols; i++) y[i] *= inv;
  }
}

static void bench_softmax(int rows, int cols) {
  softmax_t s = {rows, cols, kiln_malloc(sizeof(float) * rows * cols),
                 kiln_malloc(sizeof(float) * rows * cols)};
  fill(s.x, (size_t)rows * cols, 5);
  char *text = softmax_rows_text(rows, cols);
  program_t p, nslot;
  program_compile(&p, text, false);
  program_input(&p, 0, s.x, (size_t)rows * cols);
  const float *ins[1] = {s.x};
  size_t lens[1] = {(size_t)rows * cols};
  program_t *naive = naive_program(&nslot, text, (double)rows * cols, 1, ins, lens);
  kiln_free(text);
  program_run(&p, all_threads);
  run_softmax_c(&s, 1);
  char what[64];
  snprintf(what, sizeof what, "softmax %dx%d", rows, cols);
  check(what, program_result(&p), s.y, (size_t)rows * cols, 1e-5);
  measure(what, &p, naive, run_softmax_c, &s, (double)rows * cols, 20, "Gelem/s", "C -O3, 1 thread");
  program_free(&p);
  if (naive) program_free(naive);
  kiln_free(s.x);
  kiln_free(s.y);
}

static bool wanted(const char *name);

/* ---- GPU kernels, read from their code (issue 17) ---- */

typedef struct gpu_row_s {
  bool ok;
  kiln_gpu_code_stats_t code;
  uint64_t workgroups;
  uint32_t threads;
  size_t kernels;
  size_t dispatches;        /* in the target's own plan */
  size_t shared_dispatches; /* in the plan every target shares */
  size_t shared_kernels;    /* kernels that declare workgroup memory */
  size_t combine_kernels;   /* kernels whose invocations combine values: workgroup memory or shuffles */
  size_t shuffle_kernels;   /* kernels with subgroup shuffles */
  uint32_t max_threads;     /* the largest workgroup of any kernel */
} gpu_row_t;

/* The hottest kernel of one target's output: the most multiply-adds in a loop
 * (an elementwise kernel has none, so the contraction wins). */
static gpu_row_t gpu_read(const kiln_compiler_output_t *out, size_t t) {
  gpu_row_t row;
  memset(&row, 0, sizeof row);
  const kiln_compiler_target_output_t *to = &out->targets[t];
  if (to->status || to->n_kernels == 0) return row;
  row.kernels = to->n_kernels;
  size_t best = 0;
  for (size_t k = 0; k < to->n_kernels; k++) {
    const kiln_compiler_kernel_t *kk = &to->kernels[k];
    const kiln_compiler_kernel_t *owner = kk->same_as ? &to->kernels[kk->same_as - 1] : kk;
    kiln_gpu_code_stats_t s;
    kiln_status_t st = kiln_gpu_code_read(to->target, owner->binary, owner->binary_len, kk->name, &s);
    if (st) kiln_bench_die("reading %s's %s: %s", to->target->id, kk->name, kiln_status_message(st));
    row.shared_kernels += s.shared_bytes > 0;
    row.combine_kernels += s.shared_bytes > 0 || s.shuffles > 0;
    row.shuffle_kernels += s.shuffles > 0;
    uint32_t wg = kk->block_size[0] * kk->block_size[1] * kk->block_size[2];
    if (wg > row.max_threads) row.max_threads = wg;
    if (!row.ok || s.loop_madds > row.code.loop_madds) {
      row.ok = true;
      row.code = s;
      best = k;
    }
  }
  const uint32_t *b = to->kernels[best].block_size;
  row.threads = b[0] * b[1] * b[2];
  /* Dispatches and the hottest kernel's grid, from the target's own plan (an
   * epilogue fused into a matmul has none of its own). */
  kiln_vmfb_plan_t own;
  kiln_status_t st = kiln_compiler_target_plan(&out->plan, to, &own);
  if (st) kiln_bench_die("%s: %s", to->target->id, kiln_status_message(st));
  for (size_t f = 0; f < own.n_functions; f++) {
    for (size_t i = 0; i < own.functions[f].n_steps; i++) {
      const kiln_vmfb_step_t *step = &own.functions[f].steps[i];
      if (step->kind != KILN_VMFB_STEP_DISPATCH) continue;
      row.dispatches++;
      if (step->kernel == best && !row.workgroups) {
        row.workgroups = (uint64_t)step->workgroups[0] * step->workgroups[1] * step->workgroups[2];
      }
    }
  }
  kiln_compiler_target_plan_free(&own);
  for (size_t f = 0; f < out->plan.n_functions; f++) {
    for (size_t i = 0; i < out->plan.functions[f].n_steps; i++) {
      row.shared_dispatches += out->plan.functions[f].steps[i].kind == KILN_VMFB_STEP_DISPATCH;
    }
  }
  return row;
}

/* One row of the GPU table; false (and a line saying why) where the target failed. */
static bool gpu_print_row(const char *label, const char *target_id, const kiln_compiler_output_t *out,
                          size_t t, const gpu_row_t *r) {
  if (!r->ok) {
    printf("%-22s %-9s failed: %s\n", label, target_id,
           out->targets[t].status ? kiln_status_message(out->targets[t].status) : "no kernels");
    return false;
  }
  double madd = r->code.loop_madds;
  char regs[16] = "-", spills[16] = "-";
  if (r->code.registers >= 0) snprintf(regs, sizeof regs, "%d", r->code.registers);
  if (r->code.spill_bytes >= 0) snprintf(spills, sizeof spills, "%d", r->code.spill_bytes);
  printf("%-22s %-9s %4zu %10llu %6u %6.1f %7.3f %7.3f %5u %7u %6s %5s %6s\n", label, target_id,
         r->dispatches, (unsigned long long)r->workgroups, r->threads, madd,
         madd > 0 ? r->code.loop_loads / madd : 0.0, madd > 0 ? r->code.loop_stores / madd : 0.0,
         r->code.load_bits, r->code.shared_bytes, r->code.matrix ? "yes" : "no", regs, spills);
  return true;
}

/* KILN_BENCH_EXPORT_GPU=DIR: the sm_89 code and host plan of each f32 matmul case
 * as DIR/<case>.ptx and DIR/<case>.plan, for bench_gpu_device to time on a real
 * GPU against cuBLAS (bench/gpu_device.c says the format). Cases whose plans use
 * anything but static buffers, dispatches and copies are left out. */
static void export_cuda_case(const char *dir, const char *label, const kiln_compiler_output_t *out, size_t t,
                             int m, int n, int k, const char *elem) {
  const kiln_compiler_target_output_t *to = &out->targets[t];
  if (to->status || to->n_kernels == 0 || out->plan_status || out->plan.n_functions != 1) return;
  kiln_vmfb_plan_t own; /* the target's: its grids, its fused dispatches */
  kiln_status_t pst = kiln_compiler_target_plan(&out->plan, to, &own);
  if (pst) kiln_bench_die("%s: %s", label, kiln_status_message(pst));
  const kiln_vmfb_function_t *fn = &own.functions[0];
  kiln_buf_t plan;
  kiln_buf_init(&plan);
  kiln_buf_appendf(&plan, "kiln-cuda-case 1\nname %s\ngemm %d %d %d %s\n", label, m, n, k, elem);
  bool ok = true;
  for (size_t i = 0; i < fn->n_buffers && ok; i++) {
    const kiln_vmfb_buffer_t *b = &fn->buffers[i];
    if (b->size_expr)
      ok = false;
    else if (b->kind == KILN_VMFB_BUFFER_INPUT)
      kiln_buf_appendf(&plan, "buffer %zu input %u %llu\n", i, b->input, (unsigned long long)b->size_bytes);
    else if (b->kind == KILN_VMFB_BUFFER_TRANSIENT)
      kiln_buf_appendf(&plan, "buffer %zu transient %llu\n", i, (unsigned long long)b->size_bytes);
    else if (b->kind == KILN_VMFB_BUFFER_CONSTANT) {
      kiln_buf_appendf(&plan, "buffer %zu constant %llu ", i, (unsigned long long)b->size_bytes);
      for (uint64_t j = 0; j < b->size_bytes; j++) kiln_buf_appendf(&plan, "%02x", b->data[j]);
      kiln_buf_append_char(&plan, '\n');
    } else
      ok = false;
  }
  for (size_t i = 0; i < fn->n_steps && ok; i++) {
    const kiln_vmfb_step_t *st = &fn->steps[i];
    if (st->kind == KILN_VMFB_STEP_DISPATCH && st->kernel < to->n_kernels && !st->n_constants) {
      const uint32_t *b = to->kernels[st->kernel].block_size, *g = st->workgroups;
      kiln_buf_appendf(&plan, "dispatch %s %u %u %u %u %u %u", to->kernels[st->kernel].name, g[0], g[1], g[2],
                       b[0], b[1], b[2]);
      for (size_t a = 0; a < st->n_bindings; a++) {
        const kiln_vmfb_binding_t *bd = &st->bindings[a];
        if (bd->length_expr) ok = false;
        kiln_buf_appendf(&plan, " %u:%llu:%llu", bd->buffer, (unsigned long long)bd->offset,
                         (unsigned long long)bd->length);
      }
      kiln_buf_append_char(&plan, '\n');
    } else if (st->kind == KILN_VMFB_STEP_COPY && !st->length_expr) {
      kiln_buf_appendf(&plan, "copy %u %llu %u %llu %llu\n", st->src, (unsigned long long)st->src_offset,
                       st->dst, (unsigned long long)st->dst_offset, (unsigned long long)st->length);
    } else {
      ok = false;
    }
  }
  for (size_t i = 0; i < fn->n_results && ok; i++) {
    const kiln_vmfb_result_t *r = &fn->results[i];
    if (r->size_expr) ok = false;
    uint64_t bytes = fn->buffers[r->buffer].size_bytes - r->offset;
    kiln_buf_appendf(&plan, "result %u %llu %llu\n", r->buffer, (unsigned long long)r->offset,
                     (unsigned long long)bytes);
  }
  char *base = kiln_strdup(label);
  for (char *c = base; *c; c++) *c = *c == ' ' ? '_' : *c;
  if (ok) {
    char *path = kiln_buf_sprintf("%s/%s.plan", dir, base);
    FILE *f = fopen(path, "w");
    bool wrote = f && fwrite(plan.data, 1, plan.len, f) == plan.len;
    if (f) wrote = fclose(f) == 0 && wrote;
    if (wrote) {
      kiln_free(path);
      path = kiln_buf_sprintf("%s/%s.ptx", dir, base);
      f = fopen(path, "w");
      const kiln_compiler_kernel_t *kk = &to->kernels[0];
      wrote = f && fwrite(kk->binary, 1, kk->binary_len, f) == kk->binary_len;
      if (f) wrote = fclose(f) == 0 && wrote;
    }
    if (!wrote) kiln_bench_die("cannot write %s", path);
    printf("exported %s/%s.{plan,ptx} for bench_gpu_device\n", dir, base);
    kiln_free(path);
  }
  kiln_free(base);
  kiln_buf_deinit(&plan);
  kiln_compiler_target_plan_free(&own);
}

static void gpu_goal(const char *what, bool pass, const char *detail) {
  printf("goal: %-58s %-20s %s\n", what, detail, pass ? "PASS" : "MISS");
}

/* Compiles each case for the mission's three GPU kinds (or the targets that
 * KILN_BENCH_GPU_TARGETS lists, up to 8) and prints what the code does; the
 * issue's goals beside. */
static void bench_gpu(void) {
  enum { MAX_GPU = 8 };
  const kiln_target_t *gpus[MAX_GPU];
  const char *listed = getenv("KILN_BENCH_GPU_TARGETS");
  size_t N_GPU = 0;
  kiln_status_t resolved = kiln_compiler_target_resolve_list(
      listed && *listed ? listed : "sm_89,gfx950,mali-g720", gpus, MAX_GPU, &N_GPU);
  if (resolved) kiln_bench_die("KILN_BENCH_GPU_TARGETS: %s", kiln_status_message(resolved));
  struct {
    char name[40];
    char *text;
    int gemm;           /* a square matmul of this size (exported for the device check), else 0 */
    char gemm_elem[12]; /* its operands: f32, f16, bf16 (exported), f8E4M3FN */
  } cases[16];
  size_t n = 0;
#define GPU_CASE(label, make)                                                                        \
  do {                                                                                               \
    snprintf(cases[n].name, sizeof cases[n].name, "%s", label);                                      \
    cases[n].gemm = 0;                                                                               \
    cases[n].gemm_elem[0] = '\0';                                                                    \
    if (sscanf(label, "matmul %d %11s", &cases[n].gemm, cases[n].gemm_elem) != 2) cases[n].gemm = 0; \
    cases[n++].text = (make);                                                                        \
  } while (0)
  const char *export_dir = getenv("KILN_BENCH_EXPORT_GPU");
  if (export_dir && *export_dir && mkdir(export_dir, 0755) != 0 && errno != EEXIST) {
    kiln_bench_die("cannot create %s: %s", export_dir, strerror(errno));
  }
  if (quick) {
    GPU_CASE("matmul 64 f32", matmul_text(64, 64, 64));
    GPU_CASE("matmul 64 bf16", matmul_half_text(64, "bf16"));
    GPU_CASE("conv3x3 8x8x8->8", conv_text(8, 8, 8, 3, false));
  } else {
    GPU_CASE("matmul 512 f32", matmul_text(512, 512, 512));
    GPU_CASE("matmul 1024 f32", matmul_text(1024, 1024, 1024));
    GPU_CASE("matmul 4096 f32", matmul_text(4096, 4096, 4096));
    GPU_CASE("matmul 1024 f16", matmul_half_text(1024, "f16"));
    GPU_CASE("matmul 4096 f16", matmul_half_text(4096, "f16"));
    GPU_CASE("matmul 1024 bf16", matmul_half_text(1024, "bf16"));
    GPU_CASE("matmul 1024 f8E4M3FN", matmul_f8_text(1024, "f8E4M3FN"));
    GPU_CASE("conv3x3 56x56x64->64", conv_text(56, 64, 64, 3, false));
    GPU_CASE("conv1x1 56x56x64->256", conv_text(56, 64, 256, 1, false));
    GPU_CASE("depthwise3x3 56x56x64", conv_text(56, 64, 0, 3, true));
    GPU_CASE("softmax 128x4096", softmax_rows_text(128, 4096));
    GPU_CASE("bias+silu 1024x1024", bias_silu_text(1024, 1024));
    GPU_CASE("dense+relu 1024 f32", dense_relu_text(1024, "f32"));
    GPU_CASE("dense+relu 1024 f16", dense_relu_text(1024, "f16"));
    GPU_CASE("attention s128 d64", attention_text(128, 64));
  }
#undef GPU_CASE
  printf(
      "\nGPU kernels, read from the code kiln emits (PTX; llvm-objdump of the AMDGPU code object; "
      "spirv-dis):\n"
      "the hottest kernel's innermost loop, per invocation and iteration; ld = global loads, st = global\n"
      "stores, madd = multiply-adds; registers and spills from ptxas -v (CUDA) or the kernel descriptor "
      "(AMD);\n"
      "disp = dispatches in the target's own plan (an epilogue fused into its matmul has none);\n"
      "under each row, (front half's): the kernels every target had before issue 17 (KILN_GPU_NAIVE)\n");
  printf("%-22s %-9s %4s %10s %6s %6s %7s %7s %5s %7s %6s %5s %6s\n", "case", "target", "disp", "workgroups",
         "thr/wg", "madd", "ld/madd", "st/madd", "ldbit", "wg mem", "matrix", "regs", "spills");
  for (size_t c = 0; c < n; c++) {
    if (!wanted("gpu")) break;
    kiln_compiler_output_t out;
    kiln_status_t st =
        kiln_compiler_compile(context, cases[c].text, strlen(cases[c].text), "gpu.mlir", gpus, N_GPU, &out);
    if (st) kiln_bench_die("kiln does not compile %s: %s", cases[c].name, kiln_status_message(st));
    /* Beside it, the front half's kernels as every target had them before
     * issue 17 (KILN_GPU_NAIVE, read by the compiler in this process: jobs is 1). */
    kiln_compiler_output_t naive;
    setenv("KILN_GPU_NAIVE", "1", 1);
    st =
        kiln_compiler_compile(context, cases[c].text, strlen(cases[c].text), "gpu.mlir", gpus, N_GPU, &naive);
    unsetenv("KILN_GPU_NAIVE");
    if (st) kiln_bench_die("kiln does not compile %s naive: %s", cases[c].name, kiln_status_message(st));
    for (size_t t = 0; t < N_GPU; t++) {
      /* bench_gpu_device times f32, f16 and bf16 against cuBLAS; f8 would need cuBLASLt. */
      if (export_dir && *export_dir && cases[c].gemm && gpus[t]->kind == KILN_TARGET_KIND_CUDA &&
          strncmp(cases[c].gemm_elem, "f8", 2)) {
        export_cuda_case(export_dir, cases[c].name, &out, t, cases[c].gemm, cases[c].gemm, cases[c].gemm,
                         cases[c].gemm_elem);
      }
      gpu_row_t r = gpu_read(&out, t);
      if (!gpu_print_row(cases[c].name, gpus[t]->id, &out, t, &r)) continue;
      gpu_row_t before = gpu_read(&naive, t);
      gpu_print_row("  (front half's)", gpus[t]->id, &naive, t, &before);
      double madd = r.code.loop_madds;
      char what[96], detail[64];
      if (!strcmp(cases[c].name, "matmul 1024 f32")) {
        snprintf(what, sizeof what, "matmul 1024 f32, %s: <= 0.05 ld/madd, 128-bit, wg mem", gpus[t]->id);
        snprintf(detail, sizeof detail, "%.3f, %u-bit, %u", madd > 0 ? r.code.loop_loads / madd : 99.0,
                 r.code.load_bits, r.code.shared_bytes);
        gpu_goal(what,
                 madd > 0 && r.code.loop_loads / madd <= 0.05 && r.code.load_bits >= 128 &&
                     r.code.shared_bytes > 0 && r.code.spill_bytes <= 0,
                 detail);
      } else if (!strcmp(cases[c].name, "matmul 1024 f16") || !strcmp(cases[c].name, "matmul 1024 bf16") ||
                 !strcmp(cases[c].name, "matmul 1024 f8E4M3FN")) {
        snprintf(what, sizeof what, "%.24s, %s: matrix instructions", cases[c].name, gpus[t]->id);
        bool f8 = strstr(cases[c].name, "f8") != NULL;
        /* f8 matrix ops: sm_89 from PTX 8.4 (IREE pins 7.8), sm_120/121; gfx950
         * (OCP formats; gfx942's are FNUZ); RDNA4, not RDNA3. */
        const char *no_f8 = gpus[t]->kind == KILN_TARGET_KIND_CUDA && gpus[t]->ptx_version < 84
                                ? "N/A (no f8 mma.sync in PTX 7.8, IREE's pin for sm_89)"
                            : gpus[t]->kind == KILN_TARGET_KIND_HIP && strcmp(gpus[t]->chip, "gfx950") &&
                                    strncmp(gpus[t]->chip, "gfx12", 5)
                                ? "N/A (no OCP f8 matrix op on this chip)"
                                : NULL;
        /* Vulkan has them only where the profile declares cooperative matrices. */
        if (f8 && no_f8) {
          printf("goal: %-58s %-20s %s\n", what, r.code.matrix ? "yes" : "none", no_f8);
        } else if (gpus[t]->kind == KILN_TARGET_KIND_VULKAN &&
                   !strstr(gpus[t]->spirv_capabilities ? gpus[t]->spirv_capabilities : "",
                           "CooperativeMatrix")) {
          printf("goal: %-58s %-20s %s\n", what, r.code.matrix ? "yes" : "none",
                 "N/A (no cooperative matrix in its profile)");
        } else {
          gpu_goal(what, r.code.matrix, r.code.matrix ? "yes" : "none");
        }
      } else if (!strcmp(cases[c].name, "softmax 128x4096")) {
        /* Its two row reductions: workgroup reductions (the naive kernels run one
         * invocation per row, 1 lane in 32), through subgroup shuffles where the
         * target has them (every CUDA and HIP chip; Vulkan profiles declaring
         * GroupNonUniformShuffle). */
        snprintf(what, sizeof what, "softmax 128x4096, %s: workgroup reductions", gpus[t]->id);
        /* SPIR-V's reader sees the module's Workgroup variables, not a kernel's. */
        snprintf(detail, sizeof detail, "%zu kernels%s, %u inv.", r.combine_kernels,
                 gpus[t]->kind == KILN_TARGET_KIND_VULKAN ? " (module)" : "", r.max_threads);
        gpu_goal(what, r.combine_kernels >= 2, detail);
        snprintf(what, sizeof what, "softmax 128x4096, %s: subgroup shuffles", gpus[t]->id);
        snprintf(detail, sizeof detail, "%zu kernels", r.shuffle_kernels);
        if (gpus[t]->kind == KILN_TARGET_KIND_VULKAN &&
            !strstr(gpus[t]->spirv_capabilities ? gpus[t]->spirv_capabilities : "",
                    "GroupNonUniformShuffle")) {
          printf("goal: %-58s %-20s %s\n", what, detail, "N/A (no subgroup shuffles in its profile)");
        } else {
          gpu_goal(what, r.shuffle_kernels >= 2, detail);
        }
      } else if (!strcmp(cases[c].name, "bias+silu 1024x1024")) {
        /* One invocation per 4 elements along the contiguous dimension. */
        snprintf(what, sizeof what, "bias+silu 1024x1024, %s: 128-bit elementwise", gpus[t]->id);
        snprintf(detail, sizeof detail, "%u-bit, %llu wgs", r.code.load_bits,
                 (unsigned long long)r.workgroups);
        gpu_goal(what, r.code.load_bits >= 128, detail);
      } else if (!strncmp(cases[c].name, "dense+relu", 10)) {
        /* The bias and ReLU run on the accumulators (gpu_epilogue.h): C's 4 MiB
         * no longer go to memory and back. */
        printf("      %-9s epilogue %s: %zu dispatches where the shared plan has %zu\n", gpus[t]->id,
               r.dispatches < r.shared_dispatches ? "fused into the matmul" : "NOT fused", r.dispatches,
               r.shared_dispatches);
      } else if (!strcmp(cases[c].name, "conv3x3 56x56x64->64")) {
        snprintf(what, sizeof what, "conv 3x3, %s: >= 64 workgroups", gpus[t]->id);
        snprintf(detail, sizeof detail, "%llu", (unsigned long long)r.workgroups);
        gpu_goal(what, r.workgroups >= 64, detail);
      }
    }
    kiln_compiler_output_deinit(&out);
    kiln_compiler_output_deinit(&naive);
  }
  for (size_t c = 0; c < n; c++) kiln_free(cases[c].text);
}

/* KILN_BENCH_CASES=sgemm,softmax runs only the cases whose name holds one of them. */
static bool wanted(const char *name) {
  const char *only = getenv("KILN_BENCH_CASES");
  if (!only || !*only) return true;
  char *list = kiln_strdup(only);
  bool yes = false;
  for (char *save = NULL, *tok = strtok_r(list, ",", &save); tok && !yes; tok = strtok_r(NULL, ",", &save)) {
    yes = strstr(name, tok) != NULL;
  }
  kiln_free(list);
  return yes;
}

static void goal(const char *what, double ratio, double want) {
  printf("goal: %-44s %5.2fx (>= %.1fx) %s\n", what, ratio, want, ratio >= want ? "PASS" : "MISS");
}

int main(int argc, char **argv) {
  int rc = kiln_bench_parse_args(argc, argv, false, usage, &quick, NULL);
  if (rc >= 0) return rc;
  kiln_bench_die_setup("bench_kernels", NULL);
  long cores = sysconf(_SC_NPROCESSORS_ONLN);
  all_threads = cores > 0 ? (unsigned)cores : 1;
  target = pick_target();
  kiln_status_t st = kiln_compiler_context_create(&context);
  if (st) kiln_bench_die("%s", kiln_status_message(st));
  kiln_compiler_context_set_jobs(context, 1);
  char model[256];
  kiln_bench_cpu_model(model, sizeof model);
  bool avx512 = cpu_has("avx512f");
  double mhz = cpu_mhz();
  int lanes = avx512 ? 16 : 8;
  printf("bench_kernels: %s, %u core(s), %.0f MHz, kiln target %s (%s),%s\n", model, all_threads, mhz,
         target->id, target->chip, OPENBLAS_VERSION);
  printf("peak (estimate: 2 FMA units x %d lanes x 2 flops x clock): %.1f GFLOP/s per core, %.1f on all\n",
         lanes, 2.0 * lanes * 2 * mhz / 1e3, 2.0 * lanes * 2 * mhz / 1e3 * all_threads);
  kiln_bench_print_load("GFLOP/s");
  printf("%-26s %8s %8s  %7s | %8s %8s  %7s | %7s %7s\n", "case", "kiln", "base", "ratio", "kiln", "base",
         "ratio", "naive", "naive");
  printf("%-26s %-26s | %-26s | %s\n", "", "   1 thread", "   all threads",
         " 1 thread, all (kiln unordered)");
  if (quick) {
    bench_gemm(64, 64, 64);
    bench_conv(8, 8, 8);
    bench_softmax(4, 256);
    bench_gpu();
    printf("(quick: small shapes, one run each; goals need the full run)\n");
  } else {
    row_t g1024, c;
    memset(&g1024, 0, sizeof g1024);
    memset(&c, 0, sizeof c);
    static const int square[] = {256, 512, 1024, 2048};
    for (size_t i = 0; i < sizeof square / sizeof square[0] && wanted("sgemm"); i++) {
      row_t r = bench_gemm(square[i], square[i], square[i]);
      if (square[i] == 1024) g1024 = r;
    }
    /* A transformer layer (BERT-base, sequence 128): QKV/out projections, the MLP. */
    if (wanted("sgemm")) {
      bench_gemm(128, 768, 768);
      bench_gemm(128, 3072, 768);
      bench_gemm(128, 768, 3072);
    }
    if (wanted("conv")) c = bench_conv(56, 64, 64);
    if (wanted("softmax")) bench_softmax(128, 4096);
    if (g1024.base[0] > 0) {
      goal("sgemm 1024, one thread, vs OpenBLAS", g1024.kiln[0] / g1024.base[0], 0.6);
      goal("sgemm 1024, all cores, vs OpenBLAS", g1024.kiln[1] / g1024.base[1], 0.5);
    }
    if (c.base[1] > 0) goal("conv 3x3, all cores, vs im2col + OpenBLAS", c.kiln[1] / c.base[1], 0.8);
    bench_gpu();
  }
  kiln_compiler_context_destroy(context);
  return 0;
}
