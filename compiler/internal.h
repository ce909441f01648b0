/* Shared inside compiler/ only: the context's layout and MLIR diagnostics
 * capture. Includes mlir-c, which no code outside compiler/ may do.
 * One thread at a time per context. */
#ifndef KILN_COMPILER_INTERNAL_H
#define KILN_COMPILER_INTERNAL_H

#include <mlir-c/Diagnostics.h>
#include <mlir-c/IR.h>

#include "base/buf.h"
#include "base/status.h"
#include "compiler/pipeline.h"
#include "compiler/source.h"

struct kiln_compiler_context_s {
  MlirContext mlir;
  size_t jobs; /* back halves run in parallel child processes, at most this many */
  void (*on_target)(void *user, const struct kiln_compiler_output_s *output, size_t index);
  void *on_target_user;
  void (*on_stage)(void *user, const char *stage, uint32_t index);
  void *on_stage_user;
  char *toolkit_dir;           /* for the ROCDL serializer: <dir>/llvm/bin/ld.lld; made on first use */
  uint64_t memory_limit_bytes; /* tensors bigger than this are refused up front; 0: none */
};

/* Collects MLIR diagnostics as "<name>:<line>:<col>: <severity>: <message>" lines
 * while attached. */
typedef struct kiln_diag_capture_s {
  kiln_buf_t text;
  const char *name;
  int errors;
  MlirDiagnosticHandlerID handler;
  MlirContext mlir;
} kiln_diag_capture_t;

void kiln_compiler_diag_attach(kiln_compiler_context_t *context, const char *name,
                               kiln_diag_capture_t *capture);
void kiln_compiler_diag_detach(kiln_diag_capture_t *capture);

/* Removes the private toolkit directory, if one was made. */
void kiln_compiler_toolkit_remove(kiln_compiler_context_t *context);

/* Parses and verifies a module; on failure INVALID_ARGUMENT with the captured
 * diagnostics and a null module. The module is owned by the caller. */
KILN_MUST_USE kiln_status_t kiln_compiler_parse(kiln_compiler_context_t *context, const void *source,
                                                size_t len, const char *name, MlirModule *out_module);

/* Compiles target `index` into *out (whose `target` is set). */
typedef void (*kiln_compiler_fanout_fn_t)(void *user, size_t index, kiln_compiler_target_output_t *out);

/* Runs fn for targets 0..n-1, up to `jobs` (at least 1) at a time in forked
 * children (fanout.c), always in children, so a fatal error inside LLVM fails one
 * target and not the process. A child that dies fails only its target, with what
 * it said on stderr. `name` names the source in errors. */
void kiln_compiler_fanout_run(size_t n, size_t jobs, kiln_compiler_fanout_fn_t fn, void *user,
                              kiln_compiler_target_output_t *outs, const char *name,
                              void (*ready)(void *user, size_t index));

/* Runs the program argv[0] (a path; no shell, so no argument needs quoting) with
 * argv, stdin from /dev/null, keeping the first cap - 1 bytes it prints on
 * stdout and stderr in `said` (NUL-terminated); returns its wait status (0: it
 * exited 0), -1 when it cannot start (`said` then says why). For ptxas and
 * ld.lld. */
int kiln_compiler_run_command(const char *const argv[], char *said, size_t cap);

/* Whether the comma-separated `list` (NULL: empty) holds `item` exactly: SPIR-V
 * capability lists, the math functions a backend lacks. Thread-safe. */
bool kiln_compiler_list_has(const char *list, const char *item);

/* Frees one target's kernels and status and clears them (keeps `target`). */
void kiln_compiler_target_output_clear(kiln_compiler_target_output_t *t);

#endif /* KILN_COMPILER_INTERNAL_H */
