/* Whole files in and out, with errors that name the path: for the places that
 * write or read back one file at a time (kiln-worker's scratch files, the CPU
 * back half's object for the linker, kilnc's outputs). Thread-safe (no shared
 * state). */
#ifndef KILN_BASE_FILE_H
#define KILN_BASE_FILE_H

#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include "base/buf.h"
#include "base/status.h"

/* Creates `path` with `mode` (or truncates it) and writes `len` bytes of `data`,
 * retrying short writes and EINTR. The errno status names the path otherwise
 * ("cannot create ...", "cannot write ..."). */
KILN_MUST_USE kiln_status_t kiln_file_write(const char *path, const void *data, size_t len, mode_t mode);

/* Appends the whole file at `path` to `out`; RESOURCE_EXHAUSTED naming the path
 * and `max` once more than `max` bytes have come (what was read stays appended),
 * the errno status naming the path when it cannot be opened or read. */
KILN_MUST_USE kiln_status_t kiln_file_read(const char *path, uint64_t max, kiln_buf_t *out);

#endif /* KILN_BASE_FILE_H */
