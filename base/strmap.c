/* A string map (see strmap.h). */
#include "base/strmap.h"

#include <string.h>

#include "base/alloc.h"

static char tombstone;
#define TOMBSTONE (&tombstone)

uint64_t kiln_hash_bytes(const void *data, size_t len) {
  const unsigned char *p = data;
  uint64_t h = 14695981039346656037ULL; /* FNV-1a, 64-bit: offset basis, then the prime */
  for (size_t i = 0; i < len; i++) h = (h ^ p[i]) * 1099511628211ULL;
  return h;
}

static size_t slot_of(const kiln_strmap_t *map, const char *key) {
  uint64_t h = kiln_hash_bytes(key, strlen(key));
  return (size_t)(h ^ (h >> 32)) & (map->cap - 1);
}

void kiln_strmap_init(kiln_strmap_t *map) { memset(map, 0, sizeof *map); }

void kiln_strmap_deinit(kiln_strmap_t *map) {
  for (size_t i = 0; i < map->cap; i++) {
    if (map->keys[i] && map->keys[i] != TOMBSTONE) kiln_free(map->keys[i]);
  }
  kiln_free(map->keys);
  kiln_free(map->values);
  memset(map, 0, sizeof *map);
}

/* The slot holding `key`, or the cap when it is absent. */
static size_t find(const kiln_strmap_t *map, const char *key) {
  if (!map->cap) return 0;
  for (size_t i = slot_of(map, key);; i = (i + 1) & (map->cap - 1)) {
    if (!map->keys[i]) return map->cap;
    if (map->keys[i] != TOMBSTONE && strcmp(map->keys[i], key) == 0) return i;
  }
}

void *kiln_strmap_get(const kiln_strmap_t *map, const char *key) {
  size_t i = find(map, key);
  return i < map->cap ? map->values[i] : NULL;
}

/* A table of `cap` slots with the live entries moved over (tombstones go). */
static void rehash(kiln_strmap_t *map, size_t cap) {
  char **keys = map->keys;
  void **values = map->values;
  size_t old = map->cap;
  map->keys = kiln_calloc(cap, sizeof *map->keys);
  map->values = kiln_calloc(cap, sizeof *map->values);
  map->cap = cap;
  map->used = map->count;
  for (size_t i = 0; i < old; i++) {
    if (!keys[i] || keys[i] == TOMBSTONE) continue;
    size_t j = slot_of(map, keys[i]);
    while (map->keys[j]) j = (j + 1) & (cap - 1);
    map->keys[j] = keys[i];
    map->values[j] = values[i];
  }
  kiln_free(keys);
  kiln_free(values);
}

void *kiln_strmap_put(kiln_strmap_t *map, const char *key, void *value) {
  size_t i = find(map, key);
  if (i < map->cap) {
    void *was = map->values[i];
    map->values[i] = value;
    return was;
  }
  if ((map->used + 1) * 2 > map->cap) {
    /* Live entries fill at most a quarter of the new table, so a map whose keys
     * churn (kilnd's jobs: thousands added and removed a second at a steady count)
     * rehashes once per cap/4 insertions, not every few hundred; tombstones do not
     * move. */
    size_t cap = map->cap ? map->cap : 16;
    while ((map->count + 1) * 4 > cap) cap *= 2;
    rehash(map, cap);
  }
  for (i = slot_of(map, key); map->keys[i] && map->keys[i] != TOMBSTONE; i = (i + 1) & (map->cap - 1)) {
  }
  if (!map->keys[i]) map->used++;
  map->keys[i] = kiln_strdup(key);
  map->values[i] = value;
  map->count++;
  return NULL;
}

void *kiln_strmap_remove(kiln_strmap_t *map, const char *key) {
  size_t i = find(map, key);
  if (i >= map->cap) return NULL;
  void *was = map->values[i];
  kiln_free(map->keys[i]);
  map->keys[i] = TOMBSTONE;
  map->values[i] = NULL;
  map->count--;
  return was;
}

bool kiln_strmap_next(const kiln_strmap_t *map, size_t *cursor, const char **out_key, void **out_value) {
  for (; *cursor < map->cap; (*cursor)++) {
    size_t i = *cursor;
    if (map->keys[i] && map->keys[i] != TOMBSTONE) {
      *out_key = map->keys[i];
      if (out_value) *out_value = map->values[i];
      (*cursor)++;
      return true;
    }
  }
  return false;
}
