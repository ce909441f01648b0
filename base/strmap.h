/* A map from strings to pointers: open addressing with linear probing over a
 * power-of-two table kept at most half full, tombstones for removals. Keys are
 * copied (kiln_malloc'd) and owned by the map; values are the caller's. The one
 * string hash of kiln (FNV-1a, 64-bit) is here too, for tables keyed by slices
 * that are not NUL-terminated (base/mlir_text.c).
 *
 * Not thread-safe: the owner serializes (the job engine holds its lock).
 */
#ifndef KILN_BASE_STRMAP_H
#define KILN_BASE_STRMAP_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* FNV-1a of `len` bytes. */
uint64_t kiln_hash_bytes(const void *data, size_t len);

typedef struct kiln_strmap_s {
  char **keys; /* NULL: empty; KILN_STRMAP_TOMBSTONE: removed */
  void **values;
  size_t cap;   /* a power of two, or 0 before the first put */
  size_t count; /* live entries */
  size_t used;  /* live entries and tombstones */
} kiln_strmap_t;

void kiln_strmap_init(kiln_strmap_t *map);
/* Frees the keys and the table; the values are the caller's to free first. */
void kiln_strmap_deinit(kiln_strmap_t *map);

/* The value for `key`, or NULL. */
void *kiln_strmap_get(const kiln_strmap_t *map, const char *key);
/* Sets `key` to `value` (not NULL), replacing an earlier value; returns the
 * earlier value or NULL. */
void *kiln_strmap_put(kiln_strmap_t *map, const char *key, void *value);
/* Removes `key`; returns its value, or NULL when it was not there. */
void *kiln_strmap_remove(kiln_strmap_t *map, const char *key);

/* Iteration: for (size_t i = 0; kiln_strmap_next(map, &i, &key, &value);) ...
 * Visits every live entry once, in no particular order; the map must not change
 * during it. */
bool kiln_strmap_next(const kiln_strmap_t *map, size_t *cursor, const char **out_key, void **out_value);

#endif /* KILN_BASE_STRMAP_H */
