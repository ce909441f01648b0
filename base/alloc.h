/* Allocation wrappers.
 *
 * kiln_malloc and friends never return NULL: on exhaustion they log one line and
 * abort(). A compile server that cannot allocate a few bytes of bookkeeping is in a
 * state no request can repair, and a supervisor restart beats undefined behaviour.
 * Request-sized allocations are bounded before they are made (message size limits),
 * so abort is reached only by real exhaustion, never by a hostile request.
 *
 * Tests may install hooks that count or fail allocations (kiln_alloc_set_hooks);
 * a hook that returns NULL triggers the same abort path.
 * Thread-safe (hooks must be installed before other threads start).
 */
#ifndef KILN_BASE_ALLOC_H
#define KILN_BASE_ALLOC_H

#include <stddef.h>

void *kiln_malloc(size_t size);
void *kiln_calloc(size_t count, size_t size);
void *kiln_realloc(void *ptr, size_t size);
void kiln_free(void *ptr);
/* Copies a NUL-terminated string; NULL in, NULL out. */
char *kiln_strdup(const char *s);
/* Copies at most n bytes of s and NUL-terminates. */
char *kiln_strndup(const char *s, size_t n);
/* Copies n bytes. */
void *kiln_memdup(const void *p, size_t n);

typedef struct kiln_alloc_hooks_s {
  void *(*malloc_fn)(size_t size);
  void *(*realloc_fn)(void *ptr, size_t size);
  void (*free_fn)(void *ptr);
} kiln_alloc_hooks_t;

/* Replaces the allocator; NULL restores libc's. Not thread-safe: call before any
 * other thread allocates. */
void kiln_alloc_set_hooks(const kiln_alloc_hooks_t *hooks);

/* Sets libc's allocator up for a program that moves megabyte buffers over and
 * over (kilnd's download chunks, gRPC's socket read buffers of 4 MiB and a few
 * bytes, the CLI's downloads): blocks under 16 MiB come from the heap, and up to
 * 32 MiB of free memory at a heap's top stays mapped. With glibc's defaults
 * such blocks were mapped in and out again (its mmap threshold follows the
 * largest block freed, and it trims a heap above twice that), so every page of
 * the next buffer faulted in anew: a 256 MiB GetArtifact cost kilnd 420 ms of
 * CPU and the client up to 700 ms, against about 120 ms and 50 ms with the
 * memory reused. kilnd hands memory back after a crowd of downloads
 * (malloc_trim, rpc_get_artifact.c). Call once, first thing in main(); a no-op
 * where libc is not glibc. */
void kiln_alloc_tune_for_transfers(void);

#endif /* KILN_BASE_ALLOC_H */
