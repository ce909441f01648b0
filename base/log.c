/* logfmt logging. A line is assembled in a heap buffer and written with a single
 * write(2); the timestamp is UTC with milliseconds. */
#include "base/log.h"

#include <stdio.h>
#include <string.h>
#include <strings.h>
#include <sys/time.h>
#include <time.h>
#include <unistd.h>

static kiln_log_level_t min_level = KILN_LOG_INFO;
static int sink_fd = STDERR_FILENO;

static const char *const level_names[] = {"debug", "info", "warn", "error", "off"};

void kiln_log_configure(kiln_log_level_t level, int fd) {
  min_level = level;
  sink_fd = fd;
}

int kiln_log_level_parse(const char *name, kiln_log_level_t *out_level) {
  for (int i = 0; i <= KILN_LOG_OFF; i++) {
    if (name && strcasecmp(name, level_names[i]) == 0) {
      *out_level = (kiln_log_level_t)i;
      return 0;
    }
  }
  if (name && strcasecmp(name, "warning") == 0) {
    *out_level = KILN_LOG_WARN;
    return 0;
  }
  return -1;
}

const char *kiln_log_level_name(kiln_log_level_t level) {
  return (level >= KILN_LOG_DEBUG && level <= KILN_LOG_OFF) ? level_names[level] : "?";
}

int kiln_log_enabled(kiln_log_level_t level) { return level >= min_level && level < KILN_LOG_OFF; }

static void start_line(kiln_buf_t *line, kiln_log_level_t level, const char *event) {
  struct timeval tv;
  gettimeofday(&tv, NULL);
  struct tm tm;
  gmtime_r(&tv.tv_sec, &tm);
  char ts[32];
  strftime(ts, sizeof ts, "%Y-%m-%dT%H:%M:%S", &tm);
  kiln_buf_appendf(line, "ts=%s.%03ldZ level=%s event=%s", ts, (long)(tv.tv_usec / 1000),
                   kiln_log_level_name(level), event);
}

static void emit(kiln_buf_t *line) {
  kiln_buf_append_char(line, '\n');
  const char *p = line->data;
  size_t left = line->len;
  while (left > 0) {
    ssize_t n = write(sink_fd, p, left);
    if (n <= 0) break; /* nowhere to report a failing log sink */
    p += n;
    left -= (size_t)n;
  }
}

static void log_v(kiln_log_level_t level, const char *event, const kiln_status_t status,
                  const char *fields_fmt, va_list ap) __attribute__((format(printf, 4, 0)));
static void log_v(kiln_log_level_t level, const char *event, const kiln_status_t status,
                  const char *fields_fmt, va_list ap) {
  kiln_buf_t line;
  kiln_buf_init(&line);
  start_line(&line, level, event);
  if (fields_fmt && *fields_fmt) {
    size_t before = line.len;
    kiln_buf_append_char(&line, ' ');
    kiln_buf_appendvf(&line, fields_fmt, ap);
    if (line.len == before + 1) line.data[line.len = before] = '\0'; /* nothing formatted */
  }
  if (status) {
    kiln_buf_appendf(&line, " code=%s", kiln_status_code_name(kiln_status_code(status)));
    kiln_log_kv_str(&line, "msg", kiln_status_message(status));
    kiln_log_kv_str(&line, "at", kiln_status_where(status));
  }
  emit(&line);
  kiln_buf_deinit(&line);
}

void kiln_log_write(kiln_log_level_t level, const char *event, const char *fields_fmt, ...) {
  if (!kiln_log_enabled(level)) return;
  va_list ap;
  va_start(ap, fields_fmt);
  log_v(level, event, NULL, fields_fmt, ap);
  va_end(ap);
}

void kiln_log_status_write(kiln_log_level_t level, const char *event, const kiln_status_t status,
                           const char *fields_fmt, ...) {
  if (!kiln_log_enabled(level)) return;
  va_list ap;
  va_start(ap, fields_fmt);
  log_v(level, event, status, fields_fmt, ap);
  va_end(ap);
}

void kiln_log_kv_str(kiln_buf_t *fields, const char *key, const char *value) {
  kiln_buf_appendf(fields, " %s=", key);
  kiln_buf_append_logfmt_value(fields, value);
}

void kiln_log_fields(kiln_log_level_t level, const char *event, const kiln_buf_t *fields) {
  if (!kiln_log_enabled(level)) return;
  kiln_buf_t line;
  kiln_buf_init(&line);
  start_line(&line, level, event);
  if (fields->len) {
    if (fields->data[0] != ' ') kiln_buf_append_char(&line, ' ');
    kiln_buf_append(&line, fields->data, fields->len);
  }
  emit(&line);
  kiln_buf_deinit(&line);
}
