/* Parsing and fingerprinting over the MLIR C API. Diagnostics are collected by a
 * handler attached for the duration of one parse into a buffer owned by that
 * parse, so concurrent contexts never share state. */
#include "compiler/source.h"

#include "compiler/internal.h"

#include <mlir-c/Diagnostics.h>
#include <mlir-c/IR.h>
#include <llvm-c/Target.h>
#include <mlir-c/RegisterEverything.h>
#include <pthread.h>
#include <string.h>
#include <unistd.h>

#include "base/alloc.h"
#include "base/buf.h"

/* Process-wide, once: every upstream pass (for textual pipelines) and the LLVM
 * code generators the GPU serializers need (NVPTX, AMDGPU, x86). */
static pthread_once_t global_once = PTHREAD_ONCE_INIT;

static void global_init(void) {
  mlirRegisterAllPasses();
  LLVMInitializeAllTargetInfos();
  LLVMInitializeAllTargets();
  LLVMInitializeAllTargetMCs();
  LLVMInitializeAllAsmPrinters();
}

kiln_status_t kiln_compiler_context_create(kiln_compiler_context_t **out_context) {
  pthread_once(&global_once, global_init);
  kiln_compiler_context_t *c = kiln_calloc(1, sizeof *c);
  c->mlir = mlirContextCreate();
  /* Single-threaded: parallelism is per target, in forked children (fanout.c),
   * which is only safe when no MLIR pool thread exists to hold a lock. */
  mlirContextEnableMultithreading(c->mlir, false);
  long cpus = sysconf(_SC_NPROCESSORS_ONLN);
  c->jobs = cpus < 1 ? 1 : cpus > KILN_COMPILER_MAX_JOBS ? KILN_COMPILER_MAX_JOBS : (size_t)cpus;
  MlirDialectRegistry registry = mlirDialectRegistryCreate();
  mlirRegisterAllDialects(registry);
  mlirContextAppendDialectRegistry(c->mlir, registry);
  mlirDialectRegistryDestroy(registry);
  mlirContextLoadAllAvailableDialects(c->mlir);
  mlirRegisterAllLLVMTranslations(c->mlir);
  *out_context = c;
  return NULL;
}

void kiln_compiler_context_set_memory_limit(kiln_compiler_context_t *context, uint64_t bytes) {
  context->memory_limit_bytes = bytes;
}

void kiln_compiler_context_set_jobs(kiln_compiler_context_t *context, size_t jobs) {
  context->jobs = jobs < 1 ? 1 : jobs > KILN_COMPILER_MAX_JOBS ? KILN_COMPILER_MAX_JOBS : jobs;
}

void kiln_compiler_context_destroy(kiln_compiler_context_t *context) {
  if (!context) return;
  mlirContextDestroy(context->mlir);
  kiln_compiler_toolkit_remove(context);
  kiln_free(context);
}

static void append_cb(MlirStringRef s, void *user) { kiln_buf_append(user, s.data, s.length); }

/* The most of one diagnostic's own text kept in a message (notes count apart). */
enum { DIAG_MAX_BYTES = 1024 };

static void append_one(kiln_diag_capture_t *d, MlirDiagnostic diag, int depth) {
  static const char *const severity[] = {"error", "warning", "note", "remark"};
  MlirDiagnosticSeverity sev = mlirDiagnosticGetSeverity(diag);
  MlirLocation loc = mlirDiagnosticGetLocation(diag);
  if (d->text.len) kiln_buf_append_char(&d->text, '\n');
  for (int i = 0; i < depth; i++) kiln_buf_append_str(&d->text, "  ");
  if (mlirLocationIsAFileLineColRange(loc)) {
    /* The parser names in-memory buffers "-": say the user's name instead. */
    kiln_buf_appendf(&d->text, "%s:%d:%d: ", d->name, mlirLocationFileLineColRangeGetStartLine(loc),
                     mlirLocationFileLineColRangeGetStartColumn(loc));
  } else {
    kiln_buf_appendf(&d->text, "%s: ", d->name);
  }
  kiln_buf_appendf(&d->text, "%s: ", (unsigned)sev < 4 ? severity[sev] : "error");
  size_t start = d->text.len;
  mlirDiagnosticPrint(diag, append_cb, &d->text);
  /* MLIR's "see current operation:" notes print whole ops: a gpu.module with every
   * kernel, tens of kilobytes in a user's error. Each diagnostic keeps its head. */
  if (d->text.len - start > DIAG_MAX_BYTES) {
    size_t cut = start + DIAG_MAX_BYTES;
    /* Never inside a UTF-8 sequence: the message travels in protobuf strings. */
    while (cut > start && ((unsigned char)d->text.data[cut] & 0xC0u) == 0x80u) cut--;
    size_t left = d->text.len - cut;
    d->text.len = cut;
    d->text.data[cut] = '\0';
    kiln_buf_appendf(&d->text, " ... (%zu more bytes of MLIR's dump left out)", left);
  }
  if (sev == MlirDiagnosticError) d->errors++;
  intptr_t notes = mlirDiagnosticGetNumNotes(diag);
  for (intptr_t i = 0; i < notes; i++) append_one(d, mlirDiagnosticGetNote(diag, i), depth + 1);
}

static MlirLogicalResult on_diagnostic(MlirDiagnostic diag, void *user) {
  kiln_diag_capture_t *d = user;
  /* Remarks from pattern drivers are noise for users; keep errors, warnings, notes. */
  if (mlirDiagnosticGetSeverity(diag) == MlirDiagnosticRemark) return mlirLogicalResultSuccess();
  append_one(d, diag, 0);
  return mlirLogicalResultSuccess(); /* handled: do not print to stderr */
}

void kiln_compiler_diag_attach(kiln_compiler_context_t *context, const char *name,
                               kiln_diag_capture_t *capture) {
  kiln_buf_init(&capture->text);
  capture->name = name && *name ? name : "<source>";
  capture->errors = 0;
  capture->mlir = context->mlir;
  capture->handler = mlirContextAttachDiagnosticHandler(context->mlir, on_diagnostic, capture, NULL);
}

void kiln_compiler_diag_detach(kiln_diag_capture_t *capture) {
  mlirContextDetachDiagnosticHandler(capture->mlir, capture->handler);
  kiln_buf_deinit(&capture->text);
}

/* MLIR's parser, verifier and printer recurse once per nesting level of regions,
 * attributes and types: 100,000 nested '[' or 20,000 nested regions overflow a
 * worker's stack (SIGSEGV). Real models nest a few dozen levels; text deeper than
 * this is refused before parsing. Bytecode has no such cheap scan (it is checked
 * by the parser's own limits, and the worker survives a crash: daemon.md). */
enum { MAX_NESTING = 512 };

/* The deepest nesting of (), [] and {} in MLIR text, outside string literals and
 * // comments. Stops counting (and returns it) once past `limit`. */
static size_t text_nesting(const char *p, size_t len, size_t limit, size_t *out_line) {
  size_t depth = 0, deepest = 0, line = 1;
  bool in_string = false, in_comment = false;
  for (size_t i = 0; i < len; i++) {
    char c = p[i];
    if (c == '\n') {
      line++;
      in_comment = false;
      continue;
    }
    if (in_comment) continue;
    if (in_string) {
      if (c == '\\' && i + 1 < len)
        i++;
      else if (c == '"')
        in_string = false;
      continue;
    }
    if (c == '"')
      in_string = true;
    else if (c == '/' && i + 1 < len && p[i + 1] == '/')
      in_comment = true;
    else if (c == '(' || c == '[' || c == '{') {
      if (++depth > deepest) deepest = depth;
      if (deepest > limit) {
        *out_line = line;
        return deepest;
      }
    } else if ((c == ')' || c == ']' || c == '}') && depth > 0) {
      depth--;
    }
  }
  return deepest;
}

/* MLIR bytecode starts with "ML\xefR". */
static bool is_bytecode(const void *source, size_t len) {
  return len >= 4 && memcmp(source, "ML\xefR", 4) == 0;
}

kiln_status_t kiln_compiler_parse(kiln_compiler_context_t *context, const void *source, size_t len,
                                  const char *name, MlirModule *out_module) {
  *out_module = (MlirModule){NULL};
  size_t line = 0;
  if (!is_bytecode(source, len) && text_nesting(source, len, MAX_NESTING, &line) > MAX_NESTING) {
    return KILN_STATUS(KILN_STATUS_INVALID_ARGUMENT,
                       "%s:%zu: nesting deeper than %d levels of (), [] and {} (regions, "
                       "attributes or types); kiln refuses it before parsing, as no model needs it",
                       name && *name ? name : "<source>", line, MAX_NESTING);
  }
  kiln_diag_capture_t diags;
  kiln_compiler_diag_attach(context, name, &diags);
  MlirModule module = mlirModuleCreateParse(context->mlir, (MlirStringRef){source, len});
  kiln_status_t status = NULL;
  if (mlirModuleIsNull(module)) {
    status = KILN_STATUS(KILN_STATUS_INVALID_ARGUMENT, "%s does not parse as MLIR:\n%s", diags.name,
                         diags.text.len ? diags.text.data : "(no diagnostic)");
  } else if (!mlirOperationVerify(mlirModuleGetOperation(module))) {
    status = KILN_STATUS(KILN_STATUS_INVALID_ARGUMENT, "%s fails MLIR verification:\n%s", diags.name,
                         diags.text.len ? diags.text.data : "(no diagnostic)");
    mlirModuleDestroy(module);
  } else {
    *out_module = module;
  }
  kiln_compiler_diag_detach(&diags);
  return status;
}

kiln_status_t kiln_compiler_fingerprint(kiln_compiler_context_t *context, const void *source, size_t len,
                                        const char *name, kiln_digest_hex_t *out_fingerprint) {
  MlirModule module;
  KILN_RETURN_IF_ERROR(kiln_compiler_parse(context, source, len, name, &module));
  MlirOpPrintingFlags flags = mlirOpPrintingFlagsCreate();
  mlirOpPrintingFlagsPrintGenericOpForm(flags);
  mlirOpPrintingFlagsEnableDebugInfo(flags, false, false);
  kiln_buf_t printed;
  kiln_buf_init(&printed);
  mlirOperationPrintWithFlags(mlirModuleGetOperation(module), flags, append_cb, &printed);
  kiln_hasher_t *hasher = kiln_hasher_create();
  kiln_hasher_update(hasher, "kiln-fingerprint/1\n", 19);
  kiln_hasher_update(hasher, printed.data, printed.len);
  kiln_digest_t digest;
  kiln_hasher_finish(hasher, &digest);
  kiln_digest_to_hex(&digest, out_fingerprint);
  kiln_hasher_destroy(hasher);
  kiln_buf_deinit(&printed);
  mlirOpPrintingFlagsDestroy(flags);
  mlirModuleDestroy(module);
  return NULL;
}
