/* Logging: one line per event, logfmt key=value pairs.
 *
 *   ts=2026-11-30T10:00:00.123Z level=info event=rpc method=/kiln.v1.Kiln/GetStats code=OK
 *
 * Each line reaches the sink in one write(2), so lines from different threads never
 * interleave. Values that come from users must go through kiln_log_kv_str (or
 * kiln_buf_append_logfmt_value), which quotes and escapes them.
 * Thread-safe: the level and sink are set once at start-up, before threads.
 */
#ifndef KILN_BASE_LOG_H
#define KILN_BASE_LOG_H

#include <stdarg.h>

#include "base/buf.h"
#include "base/status.h"

typedef enum kiln_log_level_e {
  KILN_LOG_DEBUG = 0,
  KILN_LOG_INFO = 1,
  KILN_LOG_WARN = 2,
  KILN_LOG_ERROR = 3,
  KILN_LOG_OFF = 4,
} kiln_log_level_t;

/* Sets the minimum level and the file descriptor lines go to (stderr by default).
 * Call before starting threads. */
void kiln_log_configure(kiln_log_level_t min_level, int fd);

/* Parses "debug", "info", "warn", "error", "off"; 0 on success, -1 otherwise. */
int kiln_log_level_parse(const char *name, kiln_log_level_t *out_level);
const char *kiln_log_level_name(kiln_log_level_t level);

/* True when a line at `level` would be written: skip building expensive fields. */
int kiln_log_enabled(kiln_log_level_t level);

/* Writes "ts=... level=... event=<event> <fields>\n". `fields_fmt` is a printf
 * format for the rest of the line (already key=value; may be NULL). A macro, so
 * the arguments are evaluated only when the level is enabled (a debug line's
 * fields cost nothing at info); `level` is evaluated twice. */
#define kiln_log(level, event, ...)                                             \
  do {                                                                          \
    if (kiln_log_enabled(level)) kiln_log_write((level), (event), __VA_ARGS__); \
  } while (0)
void kiln_log_write(kiln_log_level_t level, const char *event, const char *fields_fmt, ...)
    __attribute__((format(printf, 3, 4)));

/* Logs a failed status where it is consumed: code=, msg=, at= fields after the
 * caller's own fields. Does not free the status. A macro like kiln_log. */
#define kiln_log_status(level, event, status, ...)                                               \
  do {                                                                                           \
    if (kiln_log_enabled(level)) kiln_log_status_write((level), (event), (status), __VA_ARGS__); \
  } while (0)
void kiln_log_status_write(kiln_log_level_t level, const char *event, const kiln_status_t status,
                           const char *fields_fmt, ...) __attribute__((format(printf, 4, 5)));

/* Appends " key=value" with the value logfmt-quoted as needed. */
void kiln_log_kv_str(kiln_buf_t *fields, const char *key, const char *value);

/* Writes a prepared fields buffer as one line. */
void kiln_log_fields(kiln_log_level_t level, const char *event, const kiln_buf_t *fields);

#endif /* KILN_BASE_LOG_H */
