/* Bump allocator over a list of chunks. Small requests share 4 KiB-or-larger
 * chunks; a request bigger than a quarter chunk gets a chunk of its own, so a large
 * message never wastes the tail of a small chunk. Invariant: every pointer handed
 * out is 16-byte aligned and lives until kiln_arena_deinit. */
#include "base/arena.h"

#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/alloc.h"

#define CHUNK_SIZE 4096u
#define ALIGN      16u

struct kiln_arena_chunk_s {
  kiln_arena_chunk_t *next;
  size_t size; /* usable bytes after the header */
  size_t used;
  _Alignas(16) unsigned char data[];
};

void kiln_arena_init(kiln_arena_t *arena) {
  arena->chunks = NULL;
  arena->used_bytes = 0;
}

void kiln_arena_deinit(kiln_arena_t *arena) {
  kiln_arena_chunk_t *c = arena->chunks;
  while (c) {
    kiln_arena_chunk_t *next = c->next;
    kiln_free(c);
    c = next;
  }
  arena->chunks = NULL;
  arena->used_bytes = 0;
}

static kiln_arena_chunk_t *new_chunk(size_t size) {
  if (size > SIZE_MAX - sizeof(kiln_arena_chunk_t)) abort();
  kiln_arena_chunk_t *c = kiln_malloc(sizeof *c + size);
  c->next = NULL;
  c->size = size;
  c->used = 0;
  return c;
}

void *kiln_arena_alloc(kiln_arena_t *arena, size_t size) {
  if (size > SIZE_MAX - ALIGN) abort();
  size_t rounded = (size + ALIGN - 1) & ~(size_t)(ALIGN - 1);
  if (rounded == 0) rounded = ALIGN;
  arena->used_bytes += rounded;
  if (rounded > CHUNK_SIZE / 4) {
    /* Dedicated chunk, linked behind the current one so it keeps serving. */
    kiln_arena_chunk_t *c = new_chunk(rounded);
    c->used = rounded;
    if (arena->chunks) {
      c->next = arena->chunks->next;
      arena->chunks->next = c;
    } else {
      arena->chunks = c;
    }
    return c->data;
  }
  kiln_arena_chunk_t *head = arena->chunks;
  if (!head || head->size - head->used < rounded) {
    head = new_chunk(CHUNK_SIZE);
    head->next = arena->chunks;
    arena->chunks = head;
  }
  void *p = head->data + head->used;
  head->used += rounded;
  return p;
}

void *kiln_arena_calloc(kiln_arena_t *arena, size_t count, size_t size) {
  if (size && count > SIZE_MAX / size) abort();
  void *p = kiln_arena_alloc(arena, count * size);
  memset(p, 0, count * size);
  return p;
}

char *kiln_arena_strdup(kiln_arena_t *arena, const char *s) {
  if (!s) return NULL;
  size_t n = strlen(s) + 1;
  char *copy = kiln_arena_alloc(arena, n);
  memcpy(copy, s, n);
  return copy;
}

char *kiln_arena_sprintf(kiln_arena_t *arena, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  int n = vsnprintf(NULL, 0, fmt, ap);
  va_end(ap);
  if (n < 0) return kiln_arena_strdup(arena, "");
  char *s = kiln_arena_alloc(arena, (size_t)n + 1);
  va_start(ap, fmt);
  vsnprintf(s, (size_t)n + 1, fmt, ap);
  va_end(ap);
  return s;
}
