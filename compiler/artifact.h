/* One target's compiled output as a VMFB artifact: the glue between the pipeline's
 * output (pipeline.h) and the MLIR-free VMFB writer (vmfb/writer.h). kilnc and the
 * daemon's workers both package through here, so an artifact is the same bytes
 * whichever wrote it. Thread-safe: no shared state.
 */
#ifndef KILN_COMPILER_ARTIFACT_H_
#define KILN_COMPILER_ARTIFACT_H_

#include <stdbool.h>
#include <stddef.h>

#include "base/buf.h"
#include "base/status.h"
#include "compiler/pipeline.h"

typedef struct kiln_compiler_artifact_options_s {
  const void *source; /* the model as compiled (for its digest, and embedding) */
  size_t source_len;
  bool embed_source; /* carry the source (zstd) so the artifact can be recompiled alone */
  bool flat;         /* the flat layout instead of the polyglot zip */
  const char *flags; /* normalized compile flags, space-separated, for the provenance ("" when
                        none); --iree-llvmcpu-link-embedded=false selects system-elf */
} kiln_compiler_artifact_options_t;

/* Appends target `index` of `output` as a VMFB to `out`, with the module named
 * after the model's (first) function. FAILED_PRECONDITION when that target failed
 * or the model's host side could not be planned (output->plan_status, whose message
 * is included). A CPU target's executable is embedded-elf-ARCH, or system-elf-ARCH
 * when the flags hold --iree-llvmcpu-link-embedded=false (the same ELF).
 * Deterministic: the same output and options give the same bytes. */
KILN_MUST_USE kiln_status_t kiln_compiler_artifact_write(const kiln_compiler_output_t *output, size_t index,
                                                         const kiln_compiler_artifact_options_t *options,
                                                         kiln_buf_t *out);

#endif /* KILN_COMPILER_ARTIFACT_H_ */
