/* The pipeline's numerics on a machine without a GPU: each example model goes
 * through the same front half (TOSA to linalg, fusion, bufferization, the tiled
 * parallel loops with their in-bounds guards) to the host CPU, runs in the MLIR
 * ExecutionEngine, and must match a reference computed here in plain C. */
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "compiler/pipeline.h"

typedef struct memref3_s {
  float *allocated, *aligned;
  int64_t offset, sizes[3], strides[3];
} memref3_t;

typedef struct memref4_s {
  float *allocated, *aligned;
  int64_t offset, sizes[4], strides[4];
} memref4_t;

#define TOLERANCE 1e-4f

static kiln_compiler_jit_t *jit_of(void **state, const char *model) {
  char path[512];
  snprintf(path, sizeof path, "%s/examples/%s.mlir", KILN_SOURCE_DIR, model);
  FILE *f = fopen(path, "rb");
  assert_non_null(f);
  char *src = malloc(1 << 16);
  size_t len = fread(src, 1, (1 << 16) - 1, f);
  fclose(f);
  kiln_compiler_jit_t *jit = NULL;
  kiln_status_t st = kiln_compiler_jit_create(*state, src, len, path, &jit);
  free(src);
  if (st) fail_msg("%s: %s", model, kiln_status_message(st));
  return jit;
}

static memref3_t view3(float *data, int64_t a, int64_t b, int64_t c) {
  memref3_t m = {data, data, 0, {a, b, c}, {b * c, c, 1}};
  return m;
}

static void fill(float *p, size_t n, unsigned seed) {
  for (size_t i = 0; i < n; i++) {
    seed = seed * 1103515245u + 12345u;
    p[i] = (float)((seed >> 16) % 2001) / 1000.0f - 1.0f; /* [-1, 1] */
  }
}

static void expect_close(const float *got, const float *want, size_t n, const char *what) {
  for (size_t i = 0; i < n; i++) {
    float tol = TOLERANCE * (1.0f + fabsf(want[i]));
    if (!(fabsf(got[i] - want[i]) <= tol)) {
      fail_msg("%s[%zu]: got %.7g, want %.7g", what, i, (double)got[i], (double)want[i]);
    }
  }
}

static void test_mlp(void **state) {
  kiln_compiler_jit_t *jit = jit_of(state, "mlp");
  void (*fn)(memref3_t *, memref3_t *) =
      (void (*)(memref3_t *, memref3_t *))kiln_compiler_jit_lookup(jit, "mlp");
  assert_non_null(fn);
  float x[4 * 16];
  fill(x, 64, 7);
  memref3_t in = view3(x, 1, 4, 16), out;
  memset(&out, 0, sizeof out);
  fn(&out, &in);
  assert_int_equal(out.sizes[1], 4);
  assert_int_equal(out.sizes[2], 8);
  /* relu(x @ W1 + b1) @ W2 + b2 with the example's constants. */
  float want[4 * 8];
  int relu_active = 0;
  for (int r = 0; r < 4; r++) {
    float h[32];
    for (int c = 0; c < 32; c++) {
      float s = 0;
      for (int k = 0; k < 16; k++) s += x[r * 16 + k] * 0.5f;
      s += 0.1f;
      h[c] = s > 0 ? s : 0;
      relu_active += s > 0;
    }
    for (int c = 0; c < 8; c++) {
      float s = 0;
      for (int k = 0; k < 32; k++) s += h[k] * 0.25f;
      want[r * 8 + c] = s - 0.2f;
    }
  }
  assert_true(relu_active > 0 && relu_active < 4 * 32); /* both sides of the relu seen */
  float got[32];
  for (int i = 0; i < 32; i++) got[i] = out.aligned[out.offset + i];
  expect_close(got, want, 32, "mlp");
  free(out.allocated);
  kiln_compiler_jit_destroy(jit);
}

static void test_attention(void **state) {
  kiln_compiler_jit_t *jit = jit_of(state, "attention");
  void (*fn)(memref3_t *, memref3_t *, memref3_t *, memref3_t *) = (void (*)(
      memref3_t *, memref3_t *, memref3_t *, memref3_t *))kiln_compiler_jit_lookup(jit, "attention");
  assert_non_null(fn);
  enum { T = 8, D = 16 };
  float q[T * D], k[T * D], v[T * D];
  fill(q, T * D, 1);
  fill(k, T * D, 2);
  fill(v, T * D, 3);
  memref3_t mq = view3(q, 1, T, D), mk = view3(k, 1, T, D), mv = view3(v, 1, T, D), out;
  memset(&out, 0, sizeof out);
  fn(&out, &mq, &mk, &mv);
  float want[T * D];
  for (int i = 0; i < T; i++) {
    float s[T], m = -INFINITY, sum = 0;
    for (int j = 0; j < T; j++) {
      float dot = 0;
      for (int d = 0; d < D; d++) dot += q[i * D + d] * k[j * D + d];
      s[j] = dot * 0.25f;
      if (s[j] > m) m = s[j];
    }
    for (int j = 0; j < T; j++) {
      s[j] = expf(s[j] - m);
      sum += s[j];
    }
    for (int d = 0; d < D; d++) {
      float acc = 0;
      for (int j = 0; j < T; j++) acc += s[j] * (1.0f / sum) * v[j * D + d];
      want[i * D + d] = acc;
    }
  }
  float got[T * D];
  for (int i = 0; i < T * D; i++) got[i] = out.aligned[out.offset + i];
  expect_close(got, want, T * D, "attention");
  free(out.allocated);
  kiln_compiler_jit_destroy(jit);
}

static void test_convnet(void **state) {
  kiln_compiler_jit_t *jit = jit_of(state, "convnet");
  void (*fn)(memref4_t *, memref4_t *) =
      (void (*)(memref4_t *, memref4_t *))kiln_compiler_jit_lookup(jit, "convnet");
  assert_non_null(fn);
  enum { H = 16, W = 16, C = 3, F = 8 };
  static float x[H * W * C];
  fill(x, H * W * C, 11);
  memref4_t in = {x, x, 0, {1, H, W, C}, {H * W * C, W * C, C, 1}}, out;
  memset(&out, 0, sizeof out);
  fn(&out, &in);
  /* conv2d 3x3 pad 1 (w 0.05, b 0.01) -> relu -> depthwise 3x3 pad 1 (w 0.1, b 0)
   * -> max pool 2x2 -> average pool 8x8. */
  static float c1[H][W][F], d1[H][W][F], p1[8][8][F];
  for (int y = 0; y < H; y++)
    for (int xx = 0; xx < W; xx++)
      for (int f = 0; f < F; f++) {
        float s = 0.01f;
        for (int dy = -1; dy <= 1; dy++)
          for (int dx = -1; dx <= 1; dx++)
            for (int c = 0; c < C; c++) {
              int yy = y + dy, xi = xx + dx;
              if (yy < 0 || yy >= H || xi < 0 || xi >= W) continue;
              s += x[(yy * W + xi) * C + c] * 0.05f;
            }
        c1[y][xx][f] = s > 0 ? s : 0;
      }
  for (int y = 0; y < H; y++)
    for (int xx = 0; xx < W; xx++)
      for (int f = 0; f < F; f++) {
        float s = 0;
        for (int dy = -1; dy <= 1; dy++)
          for (int dx = -1; dx <= 1; dx++) {
            int yy = y + dy, xi = xx + dx;
            if (yy < 0 || yy >= H || xi < 0 || xi >= W) continue;
            s += c1[yy][xi][f] * 0.1f;
          }
        d1[y][xx][f] = s;
      }
  for (int y = 0; y < 8; y++)
    for (int xx = 0; xx < 8; xx++)
      for (int f = 0; f < F; f++) {
        float m = -INFINITY;
        for (int dy = 0; dy < 2; dy++)
          for (int dx = 0; dx < 2; dx++) m = fmaxf(m, d1[2 * y + dy][2 * xx + dx][f]);
        p1[y][xx][f] = m;
      }
  float want[F];
  for (int f = 0; f < F; f++) {
    float s = 0;
    for (int y = 0; y < 8; y++)
      for (int xx = 0; xx < 8; xx++) s += p1[y][xx][f];
    want[f] = s / 64.0f;
  }
  assert_int_equal(out.sizes[3], F);
  float got[F];
  for (int f = 0; f < F; f++) got[f] = out.aligned[out.offset + f];
  expect_close(got, want, F, "convnet");
  free(out.allocated);
  kiln_compiler_jit_destroy(jit);
}

static int setup(void **state) {
  kiln_compiler_context_t *ctx = NULL;
  if (kiln_compiler_context_create(&ctx)) return -1;
  *state = ctx;
  return 0;
}

static int teardown(void **state) {
  kiln_compiler_context_destroy(*state);
  return 0;
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_mlp),
      cmocka_unit_test(test_attention),
      cmocka_unit_test(test_convnet),
  };
  return cmocka_run_group_tests(tests, setup, teardown);
}
