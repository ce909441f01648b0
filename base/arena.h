/* kiln_arena_t: a per-request memory pool (after h2o's). Everything a request
 * decodes and every response it builds is allocated here and freed at once when
 * the call ends, so handlers never free field by field.
 * Embedded lifecycle: kiln_arena_init / kiln_arena_deinit. Not thread-safe: one
 * owner (the call). */
#ifndef KILN_BASE_ARENA_H
#define KILN_BASE_ARENA_H

#include <stddef.h>

typedef struct kiln_arena_chunk_s kiln_arena_chunk_t;

typedef struct kiln_arena_s {
  kiln_arena_chunk_t *chunks; /* newest first */
  size_t used_bytes;          /* bytes handed out, for accounting */
} kiln_arena_t;

void kiln_arena_init(kiln_arena_t *arena);
/* Frees every allocation made from the arena. */
void kiln_arena_deinit(kiln_arena_t *arena);
/* Returns 16-byte aligned, uninitialized memory valid until deinit; never NULL. */
void *kiln_arena_alloc(kiln_arena_t *arena, size_t size);
/* Zeroed memory for `count` elements of `size` bytes; aborts on overflow. */
void *kiln_arena_calloc(kiln_arena_t *arena, size_t count, size_t size);
char *kiln_arena_strdup(kiln_arena_t *arena, const char *s);
char *kiln_arena_sprintf(kiln_arena_t *arena, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

#endif /* KILN_BASE_ARENA_H */
