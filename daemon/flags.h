/* Compile flags from a request: checked against the allow-list and normalized.
 *
 * Accepted: iree-compile style flags, `--name` or `--name=value`, whose name starts
 * with "--iree-". Refused: flags that choose the device or target (the request's
 * `targets` does that), and anything that could name or reach a path on the server
 * (dump, file, path, dir options, or a value holding '/'): nothing in a request may
 * touch the server's file system. Normalized by base/flags.h's one rule (one
 * spelling per name, the last one given wins, sorted by name), the rule the cache
 * key and `kiln explain` use too, so equivalent lists share a cache key.
 * Thread-safe: pure functions.
 */
#ifndef KILN_DAEMON_FLAGS_H
#define KILN_DAEMON_FLAGS_H

#include <stddef.h>

#include "base/status.h"

#define KILND_MAX_FLAGS      128
#define KILND_MAX_FLAG_BYTES 4096

/* Normalizes `n` flags into *out_flags (an array of *out_n strings, each and the
 * array kiln_malloc'd; free with kilnd_flags_free). INVALID_ARGUMENT naming the
 * first refused flag and why. */
KILN_MUST_USE kiln_status_t kilnd_flags_normalize(const char *const *flags, size_t n, char ***out_flags,
                                                  size_t *out_n);

void kilnd_flags_free(char **flags, size_t n);

#endif /* KILN_DAEMON_FLAGS_H */
