/* Growable NUL-terminated buffer. Invariant: data[len] == '\0' and
 * len < capacity whenever data is allocated; after kiln_buf_take the buffer holds
 * no memory (data NULL, capacity 0) until the next append. */
#include "base/buf.h"

#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/alloc.h"

void kiln_buf_init(kiln_buf_t *buf) {
  buf->capacity = 64;
  buf->data = kiln_malloc(buf->capacity);
  buf->data[0] = '\0';
  buf->len = 0;
}

void kiln_buf_deinit(kiln_buf_t *buf) {
  kiln_free(buf->data);
  buf->data = NULL;
  buf->len = buf->capacity = 0;
}

void kiln_buf_clear(kiln_buf_t *buf) {
  buf->len = 0;
  if (buf->data) buf->data[0] = '\0';
}

void kiln_buf_reserve(kiln_buf_t *buf, size_t extra) {
  if (extra > SIZE_MAX - buf->len - 1) abort(); /* no buffer can be that large */
  size_t need = buf->len + extra + 1;
  if (need <= buf->capacity) return;
  size_t cap = buf->capacity ? buf->capacity : 64;
  while (cap < need) cap = cap > SIZE_MAX / 2 ? need : cap * 2;
  buf->data = kiln_realloc(buf->data, cap);
  buf->capacity = cap;
}

void kiln_buf_append(kiln_buf_t *buf, const void *data, size_t len) {
  kiln_buf_reserve(buf, len);
  if (len) memcpy(buf->data + buf->len, data, len);
  buf->len += len;
  buf->data[buf->len] = '\0';
}

void kiln_buf_append_str(kiln_buf_t *buf, const char *s) { kiln_buf_append(buf, s, strlen(s)); }

void kiln_buf_append_char(kiln_buf_t *buf, char c) { kiln_buf_append(buf, &c, 1); }

void kiln_buf_appendvf(kiln_buf_t *buf, const char *fmt, va_list ap) {
  va_list copy;
  va_copy(copy, ap);
  size_t room = buf->capacity - buf->len;
  int n = vsnprintf(buf->data ? buf->data + buf->len : NULL, room, fmt, copy);
  va_end(copy);
  if (n < 0) {
    if (buf->data) buf->data[buf->len] = '\0';
    return;
  }
  if ((size_t)n >= room) {
    kiln_buf_reserve(buf, (size_t)n);
    vsnprintf(buf->data + buf->len, (size_t)n + 1, fmt, ap);
  }
  buf->len += (size_t)n;
}

void kiln_buf_appendf(kiln_buf_t *buf, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  kiln_buf_appendvf(buf, fmt, ap);
  va_end(ap);
}

char *kiln_buf_vsprintf(const char *fmt, va_list ap) {
  kiln_buf_t buf;
  kiln_buf_init(&buf);
  kiln_buf_appendvf(&buf, fmt, ap);
  return kiln_buf_take(&buf);
}

char *kiln_buf_sprintf(const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  char *s = kiln_buf_vsprintf(fmt, ap);
  va_end(ap);
  return s;
}

void kiln_buf_append_logfmt_value(kiln_buf_t *buf, const char *s) {
  if (!s) s = "";
  int bare = *s != '\0';
  for (const unsigned char *p = (const unsigned char *)s; bare && *p; p++) {
    if (*p <= ' ' || *p == '"' || *p == '=' || *p == '\\' || *p == 0x7f) bare = 0;
  }
  if (bare) {
    kiln_buf_append_str(buf, s);
    return;
  }
  kiln_buf_append_char(buf, '"');
  for (const unsigned char *p = (const unsigned char *)s; *p; p++) {
    switch (*p) {
      case '"': kiln_buf_append_str(buf, "\\\""); break;
      case '\\': kiln_buf_append_str(buf, "\\\\"); break;
      case '\n': kiln_buf_append_str(buf, "\\n"); break;
      case '\t': kiln_buf_append_str(buf, "\\t"); break;
      default:
        if (*p < ' ' || *p == 0x7f) {
          kiln_buf_appendf(buf, "\\x%02x", *p);
        } else {
          kiln_buf_append_char(buf, (char)*p);
        }
    }
  }
  kiln_buf_append_char(buf, '"');
}

char *kiln_buf_take(kiln_buf_t *buf) {
  char *s = buf->data;
  buf->data = NULL;
  buf->len = buf->capacity = 0;
  return s;
}
