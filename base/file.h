/* Whole files in and out, one read loop and one write loop for all of kiln:
 * with statuses that name the path (kiln-worker's scratch files, the CPU back
 * half's object for the linker, kilnc's outputs), or with errno for callers that
 * word their own message (kiln_buf_append_file, kiln_read_file), and one tree
 * removal. Thread-safe (no shared state). */
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

/* Appends the whole file at `path` (borrowed). Returns 0, or -1 with errno set when
 * it cannot be opened or read (what was read stays appended). */
int kiln_buf_append_file(kiln_buf_t *buf, const char *path);
/* The whole file at `path` as a new NUL-terminated string (free with kiln_free), its
 * length in `*out_len` when that is not NULL; NULL with errno set when it cannot be
 * opened or read. */
char *kiln_read_file(const char *path, size_t *out_len);

/* Removes `path` and, when it is a directory, everything under it, like rm -rf:
 * it goes on past an entry it cannot remove, and never follows a symbolic link
 * below `path`'s folder (a link is removed, not what it points to, `link/`
 * included; the walk holds each directory open, so a link swapped in meanwhile
 * is not followed either). Directories of the caller's user inside that lack
 * its write or search permission get them first. NULL when nothing of it is
 * left, also when it never existed or its folder does not; else the errno
 * status of the first entry that could not go, naming it ("cannot remove PATH:
 * Permission denied"; "Not a directory" when `path` lies under a file), or
 * INVALID_ARGUMENT for "", "/" or a path ending in "." or "..". Trees deeper
 * than 64 folders fail with ELOOP. */
KILN_MUST_USE kiln_status_t kiln_file_tree_remove(const char *path);

#endif /* KILN_BASE_FILE_H */
