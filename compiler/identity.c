/* Compiler identity. The version is kiln's and its codegen revision (a digest of
 * the compiler's sources, codegen_revision.h). The only state is the LLVM version
 * string, formatted once under pthread_once from LLVMGetVersion (the library
 * actually loaded, which may be a newer patch release than the headers kiln was
 * built with) into a static buffer that is read-only afterwards. The ABI versions of identity.h live in
 * abi.c: kiln_compiler is a static archive, linked object by object, and kilnd
 * uses them without linking libLLVM, which this object's LLVMGetVersion would
 * pull in. */
#include "compiler/identity.h"

#include <pthread.h>
#include <stdio.h>

#include <llvm-c/Core.h>

#include "codegen_revision.h" /* generated: compiler/codegen_revision.cmake */

#ifndef KILN_VERSION
#define KILN_VERSION "0.1.0" /* the build normally defines this from the project version */
#endif

/* "4294967295.4294967295.4294967295" plus the NUL fits. */
static char llvm_version[40];
static pthread_once_t llvm_version_once = PTHREAD_ONCE_INIT;

static void format_llvm_version(void) {
  unsigned major = 0, minor = 0, patch = 0;
  LLVMGetVersion(&major, &minor, &patch);
  snprintf(llvm_version, sizeof llvm_version, "%u.%u.%u", major, minor, patch);
}

void kiln_compiler_identity_get(kiln_compiler_identity_t *out_identity) {
  pthread_once(&llvm_version_once, format_llvm_version);
  out_identity->name = "kiln-mlir";
  out_identity->version = KILN_VERSION "+" KILN_CODEGEN_REVISION;
  out_identity->llvm_version = llvm_version;
  out_identity->mlir_version = llvm_version;
}
