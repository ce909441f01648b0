/* Fixed-capacity counter table; entries appear in first-call order. */
#include "daemon/stats.h"

#include <stdbool.h>
#include <string.h>

void kilnd_stats_init(kilnd_stats_t *stats) { memset(stats, 0, sizeof *stats); }

/* The entry for `method`, created if needed. The last free slot is kept for the
 * "(unknown)" bucket, so once the table is full every new method folds there. */
static kilnd_method_stats_t *entry_for(kilnd_stats_t *stats, const char *method) {
  for (size_t i = 0; i < stats->method_count; i++) {
    if (strcmp(stats->methods[i].method, method) == 0) return &stats->methods[i];
  }
  bool unknown = strcmp(method, KILND_STATS_UNKNOWN_METHOD) == 0;
  if (!unknown && stats->method_count >= KILND_STATS_MAX_METHODS - 1) {
    return entry_for(stats, KILND_STATS_UNKNOWN_METHOD);
  }
  kilnd_method_stats_t *e = &stats->methods[stats->method_count++];
  memset(e, 0, sizeof *e);
  e->method = unknown ? KILND_STATS_UNKNOWN_METHOD : method;
  return e;
}

void kilnd_stats_record(kilnd_stats_t *stats, const char *method, kiln_status_code_t code) {
  if ((int)code < 0 || (int)code >= KILN_STATUS_CODE_COUNT) code = KILN_STATUS_UNKNOWN;
  kilnd_method_stats_t *e = entry_for(stats, method ? method : KILND_STATS_UNKNOWN_METHOD);
  e->total++;
  e->by_code[code]++;
}

const kilnd_method_stats_t *kilnd_stats_find(const kilnd_stats_t *stats, const char *method) {
  for (size_t i = 0; i < stats->method_count; i++) {
    if (strcmp(stats->methods[i].method, method) == 0) return &stats->methods[i];
  }
  return NULL;
}
