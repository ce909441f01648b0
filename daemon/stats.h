/* Request counters for GetStats: calls by method and final status code.
 *
 * Methods are counted under their full path when the server knows them, and under
 * "(unknown)" otherwise, so a client probing random paths cannot grow the table.
 * Loop thread only.
 */
#ifndef KILN_DAEMON_STATS_H
#define KILN_DAEMON_STATS_H

#include <stddef.h>
#include <stdint.h>

#include "base/status.h"

#define KILND_STATS_UNKNOWN_METHOD "(unknown)"
#define KILND_STATS_MAX_METHODS    64

typedef struct kilnd_method_stats_s {
  const char *method; /* borrowed: static storage of the method table */
  uint64_t total;
  uint64_t by_code[KILN_STATUS_CODE_COUNT];
} kilnd_method_stats_t;

typedef struct kilnd_stats_s {
  kilnd_method_stats_t methods[KILND_STATS_MAX_METHODS];
  size_t method_count;
  uint64_t calls_in_flight;
} kilnd_stats_t;

void kilnd_stats_init(kilnd_stats_t *stats);

/* Counts one finished call. `method` must have static storage, or be NULL for a
 * method the server does not know. Methods past KILND_STATS_MAX_METHODS fold into
 * "(unknown)". */
void kilnd_stats_record(kilnd_stats_t *stats, const char *method, kiln_status_code_t code);

/* The counters of `method` (exact path), or NULL when it has no calls yet. Borrowed. */
const kilnd_method_stats_t *kilnd_stats_find(const kilnd_stats_t *stats, const char *method);

#endif /* KILN_DAEMON_STATS_H */
