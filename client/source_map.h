/* The operator's manifest for `kiln recompile --manifest FILE`: which source (and
 * targets and flags) rebuilds a legacy VMFB whose own source cannot be found.
 *
 * JSON (an array of objects, or an object {"entries": [...]}) or CSV (a header
 * row naming the columns, then one row per VMFB; '#' starts a comment row; RFC
 * 4180 quoting). The format is the file's extension (.json, .csv), else JSON
 * when the first non-blank character is '[' or '{', else CSV. Fields:
 *   vmfb     a VMFB path (relative to the manifest's directory, or absolute) or
 *            a VMFB's SHA-256 (64 lowercase hex, "sha256:" prefix allowed)  required
 *   source   the source file (relative to the manifest's directory)         required
 *   targets  JSON: a list of names, or a string; CSV: names separated by ';'
 *            (',' also separates)                                            optional
 *   flags    JSON: a list, or a string; CSV: separated by blanks             optional
 * `target` and `flag` are accepted spellings of the last two; any other key or
 * column is an error (a typo would otherwise be silently ignored).
 *
 * Loading checks everything it can before anything is sent: the syntax, the
 * fields, and that every source is a readable regular file. Not thread-safe.
 */
#ifndef KILN_CLIENT_SOURCE_MAP_H
#define KILN_CLIENT_SOURCE_MAP_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "base/digest.h"
#include "base/status.h"

/* One row or object. Strings are owned by the map. */
typedef struct kiln_cli_source_entry_s {
  char *where;       /* "FILE:LINE" (CSV) or "FILE: entry N" (JSON), for messages */
  char *vmfb_path;   /* the VMFB's canonical path (as joined when it does not exist); NULL for a digest */
  char *vmfb_digest; /* NULL for a path */
  char *source;      /* the source file, joined with the manifest's directory */
  char **targets;
  size_t n_targets;
  char **flags;
  size_t n_flags;
  bool has_flags; /* flags were given (maybe none): they replace the recorded ones */
  bool matched;   /* some file used it (set by kiln_cli_source_map_find) */
  /* The caller's memo of the source: its digest and size once hashed, and
   * whether it was uploaded. */
  bool hashed;
  kiln_digest_hex_t source_digest;
  uint64_t source_size;
} kiln_cli_source_entry_t;

typedef struct kiln_cli_source_map_s {
  char *path;
  char *root; /* the manifest's folder, resolved; NULL with allow_outside */
  kiln_cli_source_entry_t *entries;
  size_t n_entries;
} kiln_cli_source_map_t;

/* Reads and checks the manifest at `path` into *out_map (zeroed on entry; deinit it
 * in every case). INVALID_ARGUMENT naming the file and the line or entry (bad
 * JSON or CSV, a missing column or field, a field of the wrong type, an unknown
 * key, a source that is not a readable regular file); the open/read error naming
 * the file. A manifest may come from elsewhere (a model zoo, a ticket): unless
 * `allow_outside`, every source must resolve (symlinks followed) inside the
 * manifest's own folder, else PERMISSION_DENIED naming the entry, so
 * "../../../../etc/passwd" is never read and uploaded. */
KILN_MUST_USE kiln_status_t kiln_cli_source_map_load(const char *path, bool allow_outside,
                                                     kiln_cli_source_map_t *out_map);
void kiln_cli_source_map_deinit(kiln_cli_source_map_t *map);

/* The entry for a file whose canonical path is `real_path` (may be NULL) and
 * whose SHA-256 is `digest` (hex, may be NULL): a path entry wins over a digest
 * entry, an earlier entry over a later one. Marks it matched. NULL when none.
 * Borrowed. */
kiln_cli_source_entry_t *kiln_cli_source_map_find(kiln_cli_source_map_t *map, const char *real_path,
                                                  const char *digest);

#endif /* KILN_CLIENT_SOURCE_MAP_H */
