/* SQLite result codes -> kiln statuses (see sqlerr.h). */
#include "cache/sqlerr.h"

#include <string.h>

#include "base/buf.h"

kiln_status_t kiln_sql_failure_at(sqlite3 *db, const char *what, const char *path, int busy_timeout_ms,
                                  int rc, const char *op, const char *file, int line) {
  kiln_status_code_t code;
  const char *hint = "";
  switch (rc & 0xff) {
    case SQLITE_BUSY:
    case SQLITE_LOCKED:
      code = KILN_STATUS_UNAVAILABLE;
      hint = "another connection held the database longer than the busy timeout; retry";
      break;
    case SQLITE_FULL:
      code = KILN_STATUS_RESOURCE_EXHAUSTED;
      hint = "the disk holding it is full; free space or evict";
      break;
    case SQLITE_CORRUPT:
    case SQLITE_NOTADB:
      code = KILN_STATUS_DATA_LOSS;
      hint =
          "the file is damaged or not kiln's: restore it from a backup, or stop kilnd and move the cache "
          "folder aside (a fresh index would count every blob an orphan)";
      break;
    case SQLITE_READONLY:
    case SQLITE_PERM:
    case SQLITE_CANTOPEN:
    case SQLITE_AUTH:
      code = KILN_STATUS_PERMISSION_DENIED;
      hint = "check that the file and its directory exist and are writable by kilnd";
      break;
    default: code = KILN_STATUS_INTERNAL; break;
  }
  kiln_buf_t msg;
  kiln_buf_init(&msg);
  kiln_buf_appendf(&msg, "%s %s: %s: %s", what, path ? path : "?", op,
                   db ? sqlite3_errmsg(db) : sqlite3_errstr(rc));
  int primary = rc & 0xff;
  if (db && (primary == SQLITE_CANTOPEN || primary == SQLITE_IOERR) && sqlite3_system_errno(db))
    kiln_buf_appendf(&msg, " (%s)", strerror(sqlite3_system_errno(db)));
  if (primary == SQLITE_BUSY || primary == SQLITE_LOCKED)
    kiln_buf_appendf(&msg, " after %d ms", busy_timeout_ms);
  if (*hint) kiln_buf_appendf(&msg, "; %s", hint);
  kiln_status_t status = kiln_status_make(code, file, line, "%s", msg.data);
  kiln_buf_deinit(&msg);
  return status;
}
