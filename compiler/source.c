/* Parsing and fingerprinting over the MLIR C API. Diagnostics are collected by a
 * handler attached for the duration of one parse into a buffer owned by that
 * parse, so concurrent contexts never share state. */
#include "compiler/source.h"

#include <mlir-c/Diagnostics.h>
#include <mlir-c/IR.h>
#include <mlir-c/RegisterEverything.h>
#include <string.h>

#include "base/alloc.h"
#include "base/buf.h"

struct kiln_compiler_context_s {
  MlirContext mlir;
};

kiln_status_t kiln_compiler_context_create(kiln_compiler_context_t **out_context) {
  kiln_compiler_context_t *c = kiln_calloc(1, sizeof *c);
  c->mlir = mlirContextCreate();
  MlirDialectRegistry registry = mlirDialectRegistryCreate();
  mlirRegisterAllDialects(registry);
  mlirContextAppendDialectRegistry(c->mlir, registry);
  mlirDialectRegistryDestroy(registry);
  mlirContextLoadAllAvailableDialects(c->mlir);
  *out_context = c;
  return NULL;
}

void kiln_compiler_context_destroy(kiln_compiler_context_t *context) {
  if (!context) return;
  mlirContextDestroy(context->mlir);
  kiln_free(context);
}

typedef struct diagnostics_s {
  kiln_buf_t text;
  const char *name;
  int errors;
} diagnostics_t;

static void append_cb(MlirStringRef s, void *user) { kiln_buf_append(user, s.data, s.length); }

static void append_one(diagnostics_t *d, MlirDiagnostic diag, int depth) {
  static const char *const severity[] = {"error", "warning", "note", "remark"};
  MlirDiagnosticSeverity sev = mlirDiagnosticGetSeverity(diag);
  MlirLocation loc = mlirDiagnosticGetLocation(diag);
  if (d->text.len) kiln_buf_append_char(&d->text, '\n');
  for (int i = 0; i < depth; i++) kiln_buf_append_str(&d->text, "  ");
  if (mlirLocationIsAFileLineColRange(loc)) {
    /* The parser names in-memory buffers "-": say the user's name instead. */
    kiln_buf_appendf(&d->text, "%s:%d:%d: ", d->name,
                     mlirLocationFileLineColRangeGetStartLine(loc),
                     mlirLocationFileLineColRangeGetStartColumn(loc));
  } else {
    kiln_buf_appendf(&d->text, "%s: ", d->name);
  }
  kiln_buf_appendf(&d->text, "%s: ", (unsigned)sev < 4 ? severity[sev] : "error");
  mlirDiagnosticPrint(diag, append_cb, &d->text);
  if (sev == MlirDiagnosticError) d->errors++;
  intptr_t notes = mlirDiagnosticGetNumNotes(diag);
  for (intptr_t i = 0; i < notes; i++) append_one(d, mlirDiagnosticGetNote(diag, i), depth + 1);
}

static MlirLogicalResult on_diagnostic(MlirDiagnostic diag, void *user) {
  append_one(user, diag, 0);
  return mlirLogicalResultSuccess(); /* handled: do not print to stderr */
}

kiln_status_t kiln_compiler_fingerprint(kiln_compiler_context_t *context, const void *source,
                                        size_t len, const char *name,
                                        kiln_digest_hex_t *out_fingerprint) {
  diagnostics_t diags;
  kiln_buf_init(&diags.text);
  diags.name = name && *name ? name : "<source>";
  diags.errors = 0;
  MlirDiagnosticHandlerID handler =
      mlirContextAttachDiagnosticHandler(context->mlir, on_diagnostic, &diags, NULL);
  MlirModule module = mlirModuleCreateParse(context->mlir, (MlirStringRef){source, len});
  kiln_status_t status = NULL;
  if (mlirModuleIsNull(module)) {
    status = KILN_STATUS(KILN_STATUS_INVALID_ARGUMENT, "%s does not parse as MLIR:\n%s", diags.name,
                         diags.text.len ? diags.text.data : "(no diagnostic)");
  } else {
    MlirOperation op = mlirModuleGetOperation(module);
    if (!mlirOperationVerify(op)) {
      status = KILN_STATUS(KILN_STATUS_INVALID_ARGUMENT, "%s fails MLIR verification:\n%s",
                           diags.name, diags.text.len ? diags.text.data : "(no diagnostic)");
    } else {
      MlirOpPrintingFlags flags = mlirOpPrintingFlagsCreate();
      mlirOpPrintingFlagsPrintGenericOpForm(flags);
      mlirOpPrintingFlagsEnableDebugInfo(flags, false, false);
      kiln_hasher_t *hasher = kiln_hasher_create();
      kiln_buf_t printed;
      kiln_buf_init(&printed);
      mlirOperationPrintWithFlags(op, flags, append_cb, &printed);
      kiln_hasher_update(hasher, "kiln-fingerprint/1\n", 19);
      kiln_hasher_update(hasher, printed.data, printed.len);
      kiln_digest_t digest;
      kiln_hasher_finish(hasher, &digest);
      kiln_digest_to_hex(&digest, out_fingerprint);
      kiln_hasher_destroy(hasher);
      kiln_buf_deinit(&printed);
      mlirOpPrintingFlagsDestroy(flags);
    }
    mlirModuleDestroy(module);
  }
  mlirContextDetachDiagnosticHandler(context->mlir, handler);
  kiln_buf_deinit(&diags.text);
  return status;
}
