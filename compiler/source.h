/* Model IR in: a warm MLIR context, parsing with diagnostics, and the semantic
 * fingerprint the cache keys on.
 *
 * A kiln_compiler_context_t owns one MlirContext with every upstream dialect
 * registered and loaded; creating one costs tens of milliseconds, so a worker
 * creates it once and reuses it. One thread at a time per context (STYLE: each
 * compile worker owns its own MlirContext).
 *
 * The fingerprint is the SHA-256 of the module printed in MLIR's generic form
 * without locations: whitespace, comments, SSA value names and `loc(...)`
 * annotations do not change it, and the text and bytecode forms of one module
 * parse to the same IR and so give the same fingerprint. Anything that changes the IR's meaning (an op, a
 * type, an attribute, a constant) changes it.
 *
 * Errors: INVALID_ARGUMENT carrying MLIR's diagnostics as
 * "<name>:<line>:<col>: error: <message>" lines (notes included).
 */
#ifndef KILN_COMPILER_SOURCE_H
#define KILN_COMPILER_SOURCE_H

#include <stddef.h>
#include <stdint.h>

#include "base/digest.h"
#include "base/status.h"

typedef struct kiln_compiler_context_s kiln_compiler_context_t;

/* Creates a context with all upstream dialects. Owned by the caller. */
KILN_MUST_USE kiln_status_t kiln_compiler_context_create(kiln_compiler_context_t **out_context);
void kiln_compiler_context_destroy(kiln_compiler_context_t *context);

#define KILN_COMPILER_MAX_JOBS 16

/* How many targets' back halves a compile may run at once, each in a forked child
 * process (default: the online CPUs, at most KILN_COMPILER_MAX_JOBS). 1 compiles
 * every target in this process, in order. The process must not have other threads
 * that hold locks the children would need (kiln's callers are single-threaded
 * compile workers). */
void kiln_compiler_context_set_jobs(kiln_compiler_context_t *context, size_t jobs);

/* The memory a compile (and the model it makes) may count on, in bytes; 0: no
 * limit (the default). A model with a static tensor bigger than this, anywhere
 * (an argument, a result, an intermediate), is refused after parsing with
 * RESOURCE_EXHAUSTED naming the tensor, where it is and the limit: a compile
 * worker under an address-space limit would otherwise run into it somewhere
 * in the pipeline (a constant folded out to its full size), and a runtime could
 * not hold the buffer anyway. */
void kiln_compiler_context_set_memory_limit(kiln_compiler_context_t *context, uint64_t bytes);

/* Parses `len` bytes of MLIR text or bytecode named `name` (for diagnostics) and
 * verifies it; on success writes the fingerprint. */
KILN_MUST_USE kiln_status_t kiln_compiler_fingerprint(kiln_compiler_context_t *context, const void *source,
                                                      size_t len, const char *name,
                                                      kiln_digest_hex_t *out_fingerprint);

#endif /* KILN_COMPILER_SOURCE_H */
