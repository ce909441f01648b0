/* gemm_text TARGET RANK BATCH M N K BITS [MIN_WORKGROUPS]: prints the tiled matmul kernel kiln
 * writes for target TARGET (compiler/gpu_gemm.h) for C[b] += A[b] x B[b] with A
 * M x K and B K x N of BITS-bit floats (32, or 16 widened to f32; "bf16",
 * "f8E4M3FN" or "f8E5M2" for those widened to f32), after a first
 * line "// block X Y Z grid X Y Z".
 * gemm_text reduce TARGET ROWS LEN OP: the same for the workgroup reduction
 * (compiler/gpu_reduce.h) O[r] = OP(X[r, 0..LEN), O[r]), OP an arith op name.
 * For tests/tools/gemm_emulate.py, which runs the text's arithmetic without a
 * GPU. Exit 2 on bad arguments, 1 when the target would keep the front half's
 * kernel for that shape. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/alloc.h"
#include "compiler/gpu_gemm.h"
#include "compiler/gpu_reduce.h"
#include "compiler/targets.h"

static int reduce_text(int argc, char **argv) {
  static const char *const ops[] = {"arith.maximumf", "arith.minimumf", "arith.maxnumf",
                                    "arith.minnumf",  "arith.addf",     "arith.mulf"};
  const kiln_target_t *t = argc == 6 ? kiln_compiler_target_find(argv[2]) : NULL;
  kiln_compiler_reduce_t r = {
      .found = true, .rows = argc == 6 ? atoll(argv[3]) : 0, .len = argc == 6 ? atoll(argv[4]) : 0};
  for (size_t i = 0; argc == 6 && i < sizeof ops / sizeof ops[0]; i++) {
    if (strcmp(argv[5], ops[i]) == 0) r.op = ops[i];
  }
  if (!t || !r.op || r.rows < 1 || r.len < 4 || r.len % 4) {
    fprintf(stderr, "usage: gemm_text reduce TARGET ROWS LEN OP (a known target, LEN a multiple of 4)\n");
    return 2;
  }
  if (!kiln_compiler_reduce_fits(&r, t)) {
    fprintf(stderr, "gemm_text: %s keeps the front half's reduction\n", t->id);
    return 1;
  }
  uint32_t block[3], grid[3];
  char *text = kiln_compiler_reduce_text(&r, t, block, grid);
  printf("// block %u %u %u grid %u %u %u\n%s", block[0], block[1], block[2], grid[0], grid[1], grid[2],
         text);
  kiln_free(text);
  return 0;
}

int main(int argc, char **argv) {
  if (argc > 1 && strcmp(argv[1], "reduce") == 0) return reduce_text(argc, argv);
  if (argc != 8 && argc != 9) {
    fprintf(stderr, "usage: gemm_text TARGET RANK BATCH M N K BITS|bf16|f8E4M3FN|f8E5M2 [MIN_WORKGROUPS]\n");
    return 2;
  }
  const kiln_target_t *t = kiln_compiler_target_find(argv[1]);
  if (!t) {
    fprintf(stderr, "gemm_text: unknown target '%s'\n", argv[1]);
    return 2;
  }
  kiln_compiler_gemm_t g = {.found = true,
                            .rank = atoi(argv[2]),
                            .batch = atoll(argv[3]),
                            .m = atoll(argv[4]),
                            .n = atoll(argv[5]),
                            .k = atoll(argv[6]),
                            .operand_bits = (unsigned)atoi(argv[7]),
                            .bf16 = strcmp(argv[7], "bf16") == 0,
                            .f8 = strcmp(argv[7], "f8E4M3FN") == 0 ? KILN_GEMM_F8_E4M3FN
                                  : strcmp(argv[7], "f8E5M2") == 0 ? KILN_GEMM_F8_E5M2
                                                                   : KILN_GEMM_F8_NONE,
                            .min_workgroups = argc == 9 ? atoll(argv[8]) : 0};
  if (g.bf16) g.operand_bits = 16;
  if (g.f8) g.operand_bits = 8;
  if ((g.rank != 2 && g.rank != 3) || (g.rank == 2 && g.batch != 1) || g.batch < 1 ||
      (g.operand_bits != 8 && g.operand_bits != 16 && g.operand_bits != 32) || g.m % (KILN_GEMM_TILE_M / 2) ||
      g.n % KILN_GEMM_TILE_N || g.k % KILN_GEMM_TILE_K || g.m < 1 || g.n < 1 || g.k < 1) {
    fprintf(stderr, "gemm_text: not a shape the tiled kernel takes\n");
    return 2;
  }
  if (!kiln_compiler_gemm_fits(&g, t)) {
    fprintf(stderr, "gemm_text: %s keeps the untiled kernel\n", t->id);
    return 1;
  }
  uint32_t block[3], grid[3];
  char *text = kiln_compiler_gemm_text(&g, t, block, grid);
  printf("// block %u %u %u grid %u %u %u\n%s", block[0], block[1], block[2], grid[0], grid[1], grid[2],
         text);
  kiln_free(text);
  return 0;
}
