/* Runs kiln's CPU executables without IREE: loads the executable library ELF with
 * dlopen() and calls its exports over a workgroup grid the way IREE's local
 * drivers do (local-sync: one thread; local-task: workgroups shared among
 * threads). The ABI's structs are restated in cpu_exec.c from IREE's
 * executable_library.h, independently of the compiler that writes them. Used by
 * corpus_check (numerics) and bench_kernels (speed). */
#ifndef KILN_TESTS_CPU_EXEC_H
#define KILN_TESTS_CPU_EXEC_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

typedef struct kiln_cpu_lib_s kiln_cpu_lib_t;

/* What one export declares (its dispatch attributes). */
typedef struct kiln_cpu_export_s {
  const char *name;
  uint32_t workgroup_size[3];
  uint32_t n_bindings, n_constants;
} kiln_cpu_export_t;

/* Loads the ELF (`len` bytes), queries its library as IREE does (version 6; a
 * reader of version 5 must get none) and checks it imports nothing. NULL with
 * the reason in `err` on failure. */
kiln_cpu_lib_t *kiln_cpu_lib_load(const void *elf, size_t len, char *err, size_t err_cap);
void kiln_cpu_lib_unload(kiln_cpu_lib_t *lib);

/* The number of exports, and export `i`'s declaration. */
uint32_t kiln_cpu_lib_exports(const kiln_cpu_lib_t *lib);
kiln_cpu_export_t kiln_cpu_lib_export(const kiln_cpu_lib_t *lib, uint32_t i);

/* Calls export `i` for every workgroup of `grid`, the bindings and constants as
 * IREE's dispatch state carries them, on `threads` threads (1: in the caller, in
 * order z, y, x). False, with the reason, when a workgroup returns non-zero or
 * the counts disagree with the export's declaration. With KILN_CPU_EXEC_PROFILE
 * set, prints each dispatch's grid and time to stderr. */
bool kiln_cpu_lib_dispatch(const kiln_cpu_lib_t *lib, uint32_t i, void *const *bindings,
                           const size_t *lengths, size_t n_bindings, const uint32_t *constants,
                           size_t n_constants, const uint32_t grid[3], unsigned threads, char *err,
                           size_t err_cap);

#endif /* KILN_TESTS_CPU_EXEC_H */
