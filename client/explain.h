/* `kiln explain`'s reasoning, kept pure so it can be tested without kilnd: given
 * what the user would compile (source digest, canonical target, flags), the
 * server's compiler identity, every stored artifact of that source
 * (FindArtifacts) and, when kilnd answered it, the authoritative lookup of the
 * exact key (GetArtifact by key), say whether Compile would hit the cache and,
 * when not, which part of the cache key (source, target, flags, compiler)
 * differs from the nearest stored entry. Not thread-safe (one owner).
 */
#ifndef KILN_CLIENT_EXPLAIN_H
#define KILN_CLIENT_EXPLAIN_H

#include <stdbool.h>
#include <stddef.h>

#include "base/buf.h"
#include "kiln/v1/kiln.pb-c.h"

typedef enum kiln_cli_lookup_e {
  KILN_CLI_LOOKUP_UNKNOWN = 0, /* kilnd could not say (an older kilnd, an error) */
  KILN_CLI_LOOKUP_HIT,         /* GetArtifact by key found `hit` */
  KILN_CLI_LOOKUP_MISS,        /* GetArtifact by key said NOT_FOUND */
} kiln_cli_lookup_t;

/* Everything borrowed. */
typedef struct kiln_cli_explain_input_s {
  const char *source_digest;
  const char *target; /* canonical id */
  char *const *flags; /* as given; normalized here the way kilnd does */
  size_t n_flags;
  const Kiln__V1__CompilerIdentity *compiler;   /* the server's now; NULL: unknown */
  Kiln__V1__ArtifactMetadata *const *artifacts; /* every artifact of the source */
  size_t n_artifacts;
  kiln_cli_lookup_t lookup;
  const Kiln__V1__ArtifactMetadata *hit; /* with KILN_CLI_LOOKUP_HIT */
} kiln_cli_explain_input_t;

typedef struct kiln_cli_explain_s {
  bool hit;
  /* The key part that differs: "none" (a hit), "source", "target", "flags",
   * "compiler", "flags+compiler", or "unknown". Static storage. */
  const char *differs;
  const Kiln__V1__ArtifactMetadata *nearest; /* borrowed from the input; NULL if none */
  char *reason;                              /* one sentence for people; owned (kiln_cli_explain_deinit) */
} kiln_cli_explain_t;

void kiln_cli_explain_target(const kiln_cli_explain_input_t *in, kiln_cli_explain_t *out);
void kiln_cli_explain_deinit(kiln_cli_explain_t *explain);

/* "kiln-mlir 0.1.0 (LLVM 22.1.7)"; "an unknown compiler" for NULL. Appends to `out`. */
void kiln_cli_compiler_format(const Kiln__V1__CompilerIdentity *compiler, kiln_buf_t *out);

#endif /* KILN_CLIENT_EXPLAIN_H */
