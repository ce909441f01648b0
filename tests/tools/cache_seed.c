/* cache_seed: puts artifacts into a kiln cache directory through the real cache
 * library, for integration tests that need a populated store before kilnd starts
 * (kilnd gains its own writers with the compile service).
 *
 *   cache_seed DIR COUNT SIZE [PREFIX]
 *
 * Writes COUNT artifacts of SIZE bytes each (content derived from PREFIX and the
 * index, so runs are reproducible) for target sm_89, and prints one line per
 * artifact: "<cache key> <artifact digest> <stored bytes>". Exit 0 on success. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/alloc.h"
#include "cache/cache.h"
#include "codegen_revision.h" /* generated: compiler/codegen_revision.cmake */

int main(int argc, char **argv) {
  if (argc < 4) {
    fprintf(stderr, "usage: cache_seed DIR COUNT SIZE [PREFIX]\n");
    return 2;
  }
  const char *dir = argv[1];
  long count = strtol(argv[2], NULL, 10);
  long size = strtol(argv[3], NULL, 10);
  const char *prefix = argc > 4 ? argv[4] : "seed";
  kiln_cache_t *cache = NULL;
  kiln_status_t st = kiln_cache_open(dir, NULL, &cache, NULL);
  if (st) {
    fprintf(stderr, "cache_seed: %s\n", kiln_status_message(st));
    return 1;
  }
  unsigned char *data = kiln_malloc((size_t)size + 1);
  int rc = 0;
  for (long i = 0; i < count && rc == 0; i++) {
    /* Deterministic, mildly compressible bytes. */
    unsigned x = 2166136261u;
    for (const char *p = prefix; *p; p++) x = (x ^ (unsigned char)*p) * 16777619u;
    x ^= (unsigned)i * 2654435761u;
    for (long k = 0; k < size; k++) {
      x = x * 1103515245u + 12345u;
      data[k] = (unsigned char)((k % 64 < 48) ? 'a' + (x >> 16) % 4 : (x >> 16));
    }
    char source[65];
    snprintf(source, sizeof source, "%064lx", (unsigned long)(i + 1));
    const char *flags[] = {"--iree-opt-level=O2"};
    /* The built-in compiler's identity as this build's workers report it, but
     * for LLVM, which is fixed here (tests compare it with kilnd's). */
    kiln_cache_key_parts_t parts = {
        source, "sm_89",  flags, 1, "kiln-mlir " KILN_VERSION "+" KILN_CODEGEN_REVISION " llvm 22.1.8",
        7,      17u << 16};
    kiln_index_label_t labels[] = {{(char *)"suite", (char *)prefix}};
    kiln_cache_provenance_t prov = {.submitter = "cache_seed", .labels = labels, .n_labels = 1};
    kiln_index_artifact_t rec;
    st = kiln_cache_artifact_put(cache, &parts, data, (size_t)size, &prov, &rec);
    if (st) {
      fprintf(stderr, "cache_seed: %s\n", kiln_status_message(st));
      kiln_status_free(st);
      rc = 1;
      break;
    }
    printf("%s %s %llu\n", rec.cache_key, rec.artifact_digest, (unsigned long long)rec.stored_size);
    kiln_index_artifact_deinit(&rec);
  }
  kiln_free(data);
  kiln_cache_close(cache);
  return rc;
}
