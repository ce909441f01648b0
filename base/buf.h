/* kiln_buf_t: a growable byte buffer that is always NUL-terminated, for building
 * strings (log lines, messages, CLI output) without fixed-size guesses.
 * Embedded lifecycle: kiln_buf_init / kiln_buf_deinit. Not thread-safe: one owner.
 */
#ifndef KILN_BASE_BUF_H
#define KILN_BASE_BUF_H

#include <stdarg.h>
#include <stddef.h>

typedef struct kiln_buf_s {
  char *data;      /* NUL-terminated; NULL only after kiln_buf_take */
  size_t len;      /* bytes used, excluding the NUL */
  size_t capacity; /* bytes allocated */
} kiln_buf_t;

void kiln_buf_init(kiln_buf_t *buf);
void kiln_buf_deinit(kiln_buf_t *buf);
/* Empties the buffer, keeping its memory. */
void kiln_buf_clear(kiln_buf_t *buf);
/* Makes room for at least `extra` more bytes. */
void kiln_buf_reserve(kiln_buf_t *buf, size_t extra);
void kiln_buf_append(kiln_buf_t *buf, const void *data, size_t len);
void kiln_buf_append_str(kiln_buf_t *buf, const char *s);

void kiln_buf_append_char(kiln_buf_t *buf, char c);
void kiln_buf_appendf(kiln_buf_t *buf, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
void kiln_buf_appendvf(kiln_buf_t *buf, const char *fmt, va_list ap) __attribute__((format(printf, 2, 0)));
/* Appends `s` as a logfmt value: bare when it is non-empty and has no space, quote,
 * '=' or control character; otherwise double-quoted with \" \\ \n \t and \xHH
 * escapes. */
void kiln_buf_append_logfmt_value(kiln_buf_t *buf, const char *s);
/* A new string formatted as by printf (free with kiln_free): the buffer dance of
 * init, appendvf and take in one call. */
char *kiln_buf_vsprintf(const char *fmt, va_list ap) __attribute__((format(printf, 1, 0)));
char *kiln_buf_sprintf(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
/* Hands the string to the caller (free with kiln_free). The buffer is left empty
 * and holding no memory (data NULL): it may be appended to again, and
 * kiln_buf_deinit on it is a no-op. */
char *kiln_buf_take(kiln_buf_t *buf);

#endif /* KILN_BASE_BUF_H */
