/* kiln status: the one error type of the code base.
 *
 * A kiln_status_t is a pointer: NULL means OK, anything else is an owned failure
 * carrying a code, a message and the file:line where it was made. Codes are
 * numerically gRPC's status codes, so the RPC layer passes them through unchanged.
 *
 * Ownership: a failed status is owned by whoever holds it. Return it, annotate it
 * (kiln_status_annotate, which consumes and returns it) or free it, exactly once.
 * Thread-safe: statuses are plain heap objects with no shared state.
 */
#ifndef KILN_BASE_STATUS_H
#define KILN_BASE_STATUS_H

#include <stdarg.h>

/* Numerically equal to grpc_status_code. */
typedef enum kiln_status_code_e {
  KILN_STATUS_OK = 0,
  KILN_STATUS_CANCELLED = 1,
  KILN_STATUS_UNKNOWN = 2,
  KILN_STATUS_INVALID_ARGUMENT = 3,
  KILN_STATUS_DEADLINE_EXCEEDED = 4,
  KILN_STATUS_NOT_FOUND = 5,
  KILN_STATUS_ALREADY_EXISTS = 6,
  KILN_STATUS_PERMISSION_DENIED = 7,
  KILN_STATUS_RESOURCE_EXHAUSTED = 8,
  KILN_STATUS_FAILED_PRECONDITION = 9,
  KILN_STATUS_ABORTED = 10,
  KILN_STATUS_OUT_OF_RANGE = 11,
  KILN_STATUS_UNIMPLEMENTED = 12,
  KILN_STATUS_INTERNAL = 13,
  KILN_STATUS_UNAVAILABLE = 14,
  KILN_STATUS_DATA_LOSS = 15,
  KILN_STATUS_UNAUTHENTICATED = 16,
} kiln_status_code_t;

#define KILN_STATUS_CODE_COUNT 17

typedef struct kiln_status_s *kiln_status_t;

/* On every function that returns a kiln_status_t: a failed status is owned by
 * the caller, so dropping one is a leak and a lost error. The compiler says so
 * (-Werror makes it fail the build); pass the status on, annotate it, log it or
 * kiln_status_free it. A (void) cast does not silence it. */
#define KILN_MUST_USE __attribute__((warn_unused_result))

/* Makes a failed status; `code` must not be KILN_STATUS_OK. Use KILN_STATUS(). */
KILN_MUST_USE kiln_status_t kiln_status_make(kiln_status_code_t code, const char *file, int line,
                                             const char *fmt, ...) __attribute__((format(printf, 4, 5)));
KILN_MUST_USE kiln_status_t kiln_status_makev(kiln_status_code_t code, const char *file, int line,
                                              const char *fmt, va_list ap)
    __attribute__((format(printf, 4, 0)));

#define KILN_STATUS(code, ...) kiln_status_make((code), __FILE__, __LINE__, __VA_ARGS__)

/* Makes a status from an errno value: ENOENT -> NOT_FOUND, EACCES/EPERM/EROFS ->
 * PERMISSION_DENIED, ENOSPC/EDQUOT/ENOMEM -> RESOURCE_EXHAUSTED, EEXIST ->
 * ALREADY_EXISTS, EADDRINUSE -> UNAVAILABLE, others -> INTERNAL. The message is
 * the formatted text followed by ": " and strerror(err). */
KILN_MUST_USE kiln_status_t kiln_status_from_errno_at(int err, const char *file, int line, const char *fmt,
                                                      ...) __attribute__((format(printf, 4, 5)));
#define KILN_STATUS_ERRNO(err, ...) kiln_status_from_errno_at((err), __FILE__, __LINE__, __VA_ARGS__)

/* The same message ("<text>: <strerror(err)>") under a code the caller chose
 * (one that maps some errno values its own way). */
KILN_MUST_USE kiln_status_t kiln_status_errno_makev(kiln_status_code_t code, int err, const char *file,
                                                    int line, const char *fmt, va_list ap)
    __attribute__((format(printf, 5, 0)));

/* Maps an errno value to the code kiln_status_from_errno_at would use. */
kiln_status_code_t kiln_status_code_from_errno(int err);

/* The code of `status`; KILN_STATUS_OK for NULL. Borrows. */
kiln_status_code_t kiln_status_code(const kiln_status_t status);

/* The message of `status` ("" for NULL). Borrowed: valid until the status is freed
 * or annotated. */
const char *kiln_status_message(const kiln_status_t status);

/* "file.c:123" of where the status was made ("" for NULL). Borrowed. */
const char *kiln_status_where(const kiln_status_t status);

/* Prefixes the message with "<context>: " and returns the same status (consumes and
 * returns it; NULL stays NULL). */
KILN_MUST_USE kiln_status_t kiln_status_annotate(kiln_status_t status, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));

/* Frees a status; NULL is a no-op. */
void kiln_status_free(kiln_status_t status);

/* Returns the code and frees the status: for callers that only branch on the code. */
kiln_status_code_t kiln_status_consume_code(kiln_status_t status);

/* gRPC's canonical upper-case name ("INVALID_ARGUMENT"); "UNKNOWN_CODE" when out of
 * range. Static storage. */
const char *kiln_status_code_name(kiln_status_code_t code);

/* Parses a canonical name (case-insensitive) into a code; returns 0 on success,
 * -1 when `name` is not a code name. */
int kiln_status_code_parse(const char *name, kiln_status_code_t *out_code);

/* Returns `expr` from the enclosing function if it is a failure. */
#define KILN_RETURN_IF_ERROR(expr)           \
  do {                                       \
    kiln_status_t kiln_status__ = (expr);    \
    if (kiln_status__) return kiln_status__; \
  } while (0)

#endif /* KILN_BASE_STATUS_H */
