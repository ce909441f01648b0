/* The one translation of SQLite result codes into kiln statuses, for every
 * SQLite file kiln keeps (the cache index, the job store): BUSY/LOCKED ->
 * UNAVAILABLE, FULL -> RESOURCE_EXHAUSTED, CORRUPT/NOTADB -> DATA_LOSS, permission
 * problems -> PERMISSION_DENIED, the rest INTERNAL; the message names the file, the
 * operation, SQLite's text and what would fix it. Inside cache/ only (sqlite3.h).
 * Thread-safe. */
#ifndef KILN_CACHE_SQLERR_H
#define KILN_CACHE_SQLERR_H

#include <sqlite3.h>

#include "base/status.h"

/* `what` names the file's role ("cache index", "job store"); `db` may be NULL when
 * sqlite3_open_v2 could not allocate a handle. */
KILN_MUST_USE kiln_status_t kiln_sql_failure_at(sqlite3 *db, const char *what, const char *path,
                                                int busy_timeout_ms, int rc, const char *op, const char *file,
                                                int line);

#endif /* KILN_CACHE_SQLERR_H */
