/* The compile-flag normal form: one rule, used by kilnd's admission
 * (daemon/flags.c, after its allow-list), by the cache key and the stored flags
 * (cache/cache.c) and by `kiln explain` (client/explain.c), so that what the
 * client says about a key is what kilnd computes.
 *
 * The rule: each flag trimmed of ASCII whitespace at both ends; empty flags
 * dropped; of several spellings of one name (the text before the first '=', or
 * the whole flag) the last given wins; the result sorted by name. Equivalent
 * lists (any order, repeated names, stray whitespace) therefore normalize alike
 * and share a cache key. Thread-safe: a pure function.
 */
#ifndef KILN_BASE_FLAGS_H
#define KILN_BASE_FLAGS_H

#include <stddef.h>

/* Normalizes `n` flags (NULL entries count as empty; `flags` may be NULL when n is
 * 0) into *out_flags: an array of the returned number of strings, each and the
 * array kiln_malloc'd (kiln_flags_free). Never fails. */
size_t kiln_flags_normalize(const char *const *flags, size_t n, char ***out_flags);

void kiln_flags_free(char **flags, size_t n);

#endif /* KILN_BASE_FLAGS_H */
