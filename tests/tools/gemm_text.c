/* gemm_text TARGET RANK BATCH M N K BITS [MIN_WORKGROUPS]: prints the tiled matmul kernel kiln
 * writes for target TARGET (compiler/gpu_gemm.h) for C[b] += A[b] x B[b] with A
 * M x K and B K x N of BITS-bit floats (32, or 16 widened to f32), after a first
 * line "// block X Y Z grid X Y Z". For tests/tools/gemm_emulate.py, which runs
 * the text's arithmetic without a GPU. Exit 2 on bad arguments, 1 when the target
 * would keep its untiled kernel for that shape. */
#include <stdio.h>
#include <stdlib.h>

#include "base/alloc.h"
#include "compiler/gpu_gemm.h"
#include "compiler/targets.h"

int main(int argc, char **argv) {
  if (argc != 8 && argc != 9) {
    fprintf(stderr, "usage: gemm_text TARGET RANK BATCH M N K BITS [MIN_WORKGROUPS]\n");
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
                            .min_workgroups = argc == 9 ? atoll(argv[8]) : 0};
  if ((g.rank != 2 && g.rank != 3) || (g.rank == 2 && g.batch != 1) || g.batch < 1 ||
      (g.operand_bits != 16 && g.operand_bits != 32) || g.m % (KILN_GEMM_TILE_M / 2) || g.n % KILN_GEMM_TILE_N ||
      g.k % KILN_GEMM_TILE_K || g.m < 1 || g.n < 1 || g.k < 1) {
    fprintf(stderr, "gemm_text: not a shape the tiled kernel takes\n");
    return 2;
  }
  if (!kiln_compiler_gemm_fits(&g, t)) {
    fprintf(stderr, "gemm_text: %s keeps the untiled kernel\n", t->id);
    return 1;
  }
  uint32_t block[3], grid[3];
  char *text = kiln_compiler_gemm_text(&g, t, block, grid);
  printf("// block %u %u %u grid %u %u %u\n%s", block[0], block[1], block[2], grid[0], grid[1], grid[2], text);
  kiln_free(text);
  return 0;
}
