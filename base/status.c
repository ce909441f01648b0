/* kiln_status_t implementation. A failed status is one heap block holding the
 * code, "file:line" and the message; NULL is OK and costs nothing. */
#include "base/status.h"

#include <errno.h>
#include <stdio.h>
#include <string.h>
#include <strings.h>

#include "base/alloc.h"
#include "base/buf.h"

struct kiln_status_s {
  kiln_status_code_t code;
  char *where;
  char *message;
};

static const char *const code_names[KILN_STATUS_CODE_COUNT] = {
    "OK",        "CANCELLED",       "UNKNOWN",           "INVALID_ARGUMENT",   "DEADLINE_EXCEEDED",
    "NOT_FOUND", "ALREADY_EXISTS",  "PERMISSION_DENIED", "RESOURCE_EXHAUSTED", "FAILED_PRECONDITION",
    "ABORTED",   "OUT_OF_RANGE",    "UNIMPLEMENTED",     "INTERNAL",           "UNAVAILABLE",
    "DATA_LOSS", "UNAUTHENTICATED",
};

const char *kiln_status_code_name(kiln_status_code_t code) {
  if ((int)code < 0 || (int)code >= KILN_STATUS_CODE_COUNT) return "UNKNOWN_CODE";
  return code_names[code];
}

int kiln_status_code_parse(const char *name, kiln_status_code_t *out_code) {
  if (!name) return -1;
  for (int i = 0; i < KILN_STATUS_CODE_COUNT; i++) {
    if (strcasecmp(name, code_names[i]) == 0) {
      *out_code = (kiln_status_code_t)i;
      return 0;
    }
  }
  return -1;
}

static const char *basename_of(const char *file) {
  const char *slash = strrchr(file, '/');
  return slash ? slash + 1 : file;
}

kiln_status_t kiln_status_makev(kiln_status_code_t code, const char *file, int line, const char *fmt,
                                va_list ap) {
  if (code == KILN_STATUS_OK) code = KILN_STATUS_UNKNOWN; /* a failure must fail */
  kiln_status_t status = kiln_malloc(sizeof *status);
  status->code = code;
  kiln_buf_t buf;
  kiln_buf_init(&buf);
  kiln_buf_appendf(&buf, "%s:%d", basename_of(file ? file : "?"), line);
  status->where = kiln_buf_take(&buf);
  kiln_buf_appendvf(&buf, fmt, ap);
  status->message = kiln_buf_take(&buf);
  kiln_buf_deinit(&buf);
  return status;
}

kiln_status_t kiln_status_make(kiln_status_code_t code, const char *file, int line, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  kiln_status_t status = kiln_status_makev(code, file, line, fmt, ap);
  va_end(ap);
  return status;
}

kiln_status_code_t kiln_status_code_from_errno(int err) {
  switch (err) {
    case ENOENT:
    case ENOTDIR: return KILN_STATUS_NOT_FOUND;
    case EACCES:
    case EPERM:
    case EROFS: return KILN_STATUS_PERMISSION_DENIED;
    case ENOSPC:
    case EDQUOT:
    case ENOMEM:
    case EMFILE:
    case ENFILE:
    case EFBIG: return KILN_STATUS_RESOURCE_EXHAUSTED;
    case EEXIST: return KILN_STATUS_ALREADY_EXISTS;
    case EADDRINUSE:
    case EAGAIN:
    case ECONNREFUSED:
    case EBUSY: return KILN_STATUS_UNAVAILABLE;
    case EINVAL:
    case ENAMETOOLONG:
    case EISDIR: return KILN_STATUS_INVALID_ARGUMENT;
    case ETIMEDOUT: return KILN_STATUS_DEADLINE_EXCEEDED;
    case EIO: return KILN_STATUS_DATA_LOSS;
    default: return KILN_STATUS_INTERNAL;
  }
}

kiln_status_t kiln_status_errno_makev(kiln_status_code_t code, int err, const char *file, int line,
                                      const char *fmt, va_list ap) {
  kiln_buf_t buf;
  kiln_buf_init(&buf);
  kiln_buf_appendvf(&buf, fmt, ap);
  kiln_status_t status = kiln_status_make(code, file, line, "%s: %s", buf.data, strerror(err));
  kiln_buf_deinit(&buf);
  return status;
}

kiln_status_t kiln_status_from_errno_at(int err, const char *file, int line, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  kiln_status_t status = kiln_status_errno_makev(kiln_status_code_from_errno(err), err, file, line, fmt, ap);
  va_end(ap);
  return status;
}

kiln_status_code_t kiln_status_code(const kiln_status_t status) {
  return status ? status->code : KILN_STATUS_OK;
}

const char *kiln_status_message(const kiln_status_t status) { return status ? status->message : ""; }

const char *kiln_status_where(const kiln_status_t status) { return status ? status->where : ""; }

kiln_status_t kiln_status_annotate(kiln_status_t status, const char *fmt, ...) {
  if (!status) return NULL;
  kiln_buf_t buf;
  kiln_buf_init(&buf);
  va_list ap;
  va_start(ap, fmt);
  kiln_buf_appendvf(&buf, fmt, ap);
  va_end(ap);
  kiln_buf_appendf(&buf, ": %s", status->message);
  kiln_free(status->message);
  status->message = kiln_buf_take(&buf);
  kiln_buf_deinit(&buf);
  return status;
}

void kiln_status_free(kiln_status_t status) {
  if (!status) return;
  kiln_free(status->where);
  kiln_free(status->message);
  kiln_free(status);
}

kiln_status_code_t kiln_status_consume_code(kiln_status_t status) {
  kiln_status_code_t code = kiln_status_code(status);
  kiln_status_free(status);
  return code;
}
