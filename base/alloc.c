/* Allocation wrappers: one place for the out-of-memory policy (abort with a log
 * line) and a seam where tests install counting or failing allocators. */
#include "base/alloc.h"

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#ifdef __GLIBC__
#include <malloc.h>
#endif

static void *libc_malloc(size_t size) { return malloc(size); }
static void *libc_realloc(void *ptr, size_t size) { return realloc(ptr, size); }
static void libc_free(void *ptr) { free(ptr); }

static kiln_alloc_hooks_t hooks = {libc_malloc, libc_realloc, libc_free};

void kiln_alloc_set_hooks(const kiln_alloc_hooks_t *new_hooks) {
  if (new_hooks) {
    hooks = *new_hooks;
  } else {
    hooks.malloc_fn = libc_malloc;
    hooks.realloc_fn = libc_realloc;
    hooks.free_fn = libc_free;
  }
}

static _Noreturn void out_of_memory(size_t size) {
  /* No stdio: it may allocate. */
  char line[96];
  int n = snprintf(line, sizeof line, "level=fatal event=out_of_memory bytes=%zu\n", size);
  if (n > 0) {
    ssize_t ignored = write(STDERR_FILENO, line, (size_t)n);
    (void)ignored;
  }
  abort();
}

void *kiln_malloc(size_t size) {
  void *p = hooks.malloc_fn(size ? size : 1);
  if (!p) out_of_memory(size);
  return p;
}

void *kiln_calloc(size_t count, size_t size) {
  if (size && count > SIZE_MAX / size) out_of_memory(SIZE_MAX);
  size_t total = count * size;
  void *p = kiln_malloc(total);
  memset(p, 0, total);
  return p;
}

void *kiln_realloc(void *ptr, size_t size) {
  void *p = hooks.realloc_fn(ptr, size ? size : 1);
  if (!p) out_of_memory(size);
  return p;
}

void kiln_free(void *ptr) {
  if (ptr) hooks.free_fn(ptr);
}

char *kiln_strdup(const char *s) {
  if (!s) return NULL;
  return kiln_memdup(s, strlen(s) + 1);
}

char *kiln_strndup(const char *s, size_t n) {
  if (!s) return NULL;
  size_t len = strnlen(s, n);
  char *copy = kiln_malloc(len + 1);
  memcpy(copy, s, len);
  copy[len] = '\0';
  return copy;
}

void *kiln_memdup(const void *p, size_t n) {
  void *copy = kiln_malloc(n);
  if (n) memcpy(copy, p, n);
  return copy;
}

void kiln_alloc_tune_for_transfers(void) {
#ifdef __GLIBC__
  /* Fixed values also turn glibc's dynamic threshold off. */
  mallopt(M_MMAP_THRESHOLD, 16 << 20);
  mallopt(M_TRIM_THRESHOLD, 32 << 20);
#endif
}
