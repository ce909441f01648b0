/* Compiler diagnostics as protobuf: kiln's compiler prints them one per line,
 * "<file>:<line>:<col>: <severity>: <message>", notes indented by two spaces under
 * the diagnostic they belong to (compiler/source.c). The job engine sends them in
 * JobEvent.Diagnostic and TargetFailed; Recompile in RecompileItemResult.
 * Thread-safe: no shared state.
 */
#ifndef KILN_DAEMON_DIAGS_H
#define KILN_DAEMON_DIAGS_H

#include <stddef.h>

#include "kiln/v1/kiln.pb-c.h"

/* Parsed diagnostics and every allocation behind them (freed by kilnd_diags_free).
 * Zero-initialize before use. */
typedef struct kilnd_diags_s {
  Kiln__V1__Diagnostic **items;
  size_t n;
  void **owned;
  size_t n_owned;
} kilnd_diags_t;

/* Appends the diagnostics in `text` (at most 64; lines of another shape, such as a
 * heading "bad.mlir does not parse as MLIR:", are skipped), each naming `target`
 * (borrowed: it must outlive the diagnostics). */
void kilnd_diags_parse(kilnd_diags_t *d, const char *text, const char *target);

void kilnd_diags_free(kilnd_diags_t *d);

#endif /* KILN_DAEMON_DIAGS_H */
