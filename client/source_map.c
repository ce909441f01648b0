/* The recompile manifest: JSON through json-c, CSV by hand (RFC 4180 quoting, a
 * header row). Both end in the same entry checker, so a field means the same in
 * either format. Every error names the file and the line (CSV) or entry (JSON)
 * and says what would fix it.
 */
#include "client/source_map.h"

#include <ctype.h>
#include <errno.h>
#include <json-c/json.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "base/alloc.h"
#include "base/buf.h"
#include "client/cli.h"
#include "client/transfer.h"

#define MAX_MANIFEST_BYTES (256ull << 20)

/* The fields of one entry as written, before checking. Borrowed strings. */
typedef struct raw_s {
  const char *vmfb;
  const char *source;
  const char *targets; /* a string form (CSV, or a JSON string) */
  const char *flags;
  const char **target_list; /* a JSON list */
  size_t n_target_list;
  const char **flag_list;
  size_t n_flag_list;
  bool has_targets, has_flags;
} raw_t;

/* `rel` joined with the manifest's directory unless it is absolute. */
static char *join_dir(const char *manifest, const char *rel) {
  kiln_buf_t b;
  kiln_buf_init(&b);
  const char *slash = strrchr(manifest, '/');
  if (rel[0] == '/' || !slash) {
    kiln_buf_append_str(&b, rel);
  } else {
    kiln_buf_append(&b, manifest, (size_t)(slash - manifest) + 1);
    kiln_buf_append_str(&b, rel);
  }
  return kiln_buf_take(&b);
}

/* Checks one entry's fields and appends it to the map. */
static KILN_MUST_USE kiln_status_t add_entry(kiln_cli_source_map_t *map, const char *where,
                                             const raw_t *raw) {
  if (!raw->vmfb || !*raw->vmfb) {
    return KILN_STATUS(KILN_STATUS_INVALID_ARGUMENT,
                       "%s: no vmfb: give the legacy VMFB's path (relative to the manifest) or its "
                       "SHA-256",
                       where);
  }
  if (!raw->source || !*raw->source) {
    return KILN_STATUS(KILN_STATUS_INVALID_ARGUMENT,
                       "%s: no source for %s: give the source file that builds it", where, raw->vmfb);
  }
  char *source = join_dir(map->path, raw->source);
  struct stat st;
  if (stat(source, &st) != 0) {
    kiln_status_t status = KILN_STATUS(KILN_STATUS_INVALID_ARGUMENT, "%s: source %s (%s): %s", where,
                                       raw->source, source, strerror(errno));
    kiln_free(source);
    return status;
  }
  if (!S_ISREG(st.st_mode)) {
    kiln_status_t status = KILN_STATUS(
        KILN_STATUS_INVALID_ARGUMENT, "%s: source %s (%s) is not a regular file", where, raw->source, source);
    kiln_free(source);
    return status;
  }
  if (map->root) {
    char *real = realpath(source, NULL);
    size_t n = strlen(map->root);
    bool inside =
        real && strncmp(real, map->root, n) == 0 && (real[n] == '/' || (n == 1 && map->root[0] == '/'));
    kiln_status_t status = NULL;
    if (!inside) {
      status =
          KILN_STATUS(KILN_STATUS_PERMISSION_DENIED,
                      "%s: source %s resolves to %s, outside the manifest's folder %s; pass --allow-outside "
                      "if the manifest is yours",
                      where, raw->source, real ? real : source, map->root);
    }
    free(real);
    if (status) {
      kiln_free(source);
      return status;
    }
  }
  map->entries = kiln_realloc(map->entries, (map->n_entries + 1) * sizeof *map->entries);
  kiln_cli_source_entry_t *e = &map->entries[map->n_entries++];
  memset(e, 0, sizeof *e);
  e->where = kiln_strdup(where);
  e->source = source;
  const char *v = raw->vmfb;
  if (strncmp(v, "sha256:", 7) == 0 && kiln_digest_is_valid_hex(v + 7)) v += 7;
  if (kiln_digest_is_valid_hex(v)) {
    e->vmfb_digest = kiln_strdup(v);
  } else {
    char *joined = join_dir(map->path, v);
    char *real = realpath(joined, NULL);
    if (real) {
      e->vmfb_path = kiln_strdup(real);
      free(real);
      kiln_free(joined);
    } else {
      e->vmfb_path = joined; /* matches nothing; the caller says so */
    }
  }
  kiln_cli_strings_split(raw->targets, ";,", &e->targets, &e->n_targets);
  for (size_t i = 0; i < raw->n_target_list; i++) {
    kiln_cli_strings_split(raw->target_list[i], ";,", &e->targets, &e->n_targets);
  }
  e->has_flags = raw->has_flags;
  kiln_cli_strings_split(raw->flags, " \t\r\n", &e->flags, &e->n_flags);
  for (size_t i = 0; i < raw->n_flag_list; i++)
    kiln_cli_strings_split(raw->flag_list[i], "", &e->flags, &e->n_flags);
  return NULL;
}

/* ---- JSON ---------------------------------------------------------------- */

/* A JSON value that must be a string or a list of strings. */
static KILN_MUST_USE kiln_status_t json_strings(json_object *v, const char *where, const char *key,
                                                const char **out_str, const char ***out_list, size_t *out_n) {
  if (json_object_is_type(v, json_type_string)) {
    *out_str = json_object_get_string(v);
    return NULL;
  }
  if (json_object_is_type(v, json_type_array)) {
    size_t n = json_object_array_length(v);
    const char **list = kiln_calloc(n ? n : 1, sizeof *list);
    for (size_t i = 0; i < n; i++) {
      json_object *item = json_object_array_get_idx(v, i);
      if (!json_object_is_type(item, json_type_string)) {
        kiln_free(list);
        return KILN_STATUS(KILN_STATUS_INVALID_ARGUMENT, "%s: \"%s\" item %zu is not a string", where, key,
                           i + 1);
      }
      list[i] = json_object_get_string(item);
    }
    *out_list = list;
    *out_n = n;
    return NULL;
  }
  return KILN_STATUS(KILN_STATUS_INVALID_ARGUMENT, "%s: \"%s\" must be a string or a list of strings", where,
                     key);
}

static KILN_MUST_USE kiln_status_t json_entry(kiln_cli_source_map_t *map, json_object *o, size_t index) {
  kiln_buf_t where;
  kiln_buf_init(&where);
  kiln_buf_appendf(&where, "%s: entry %zu", map->path, index + 1);
  kiln_status_t status = NULL;
  raw_t raw;
  memset(&raw, 0, sizeof raw);
  if (!json_object_is_type(o, json_type_object)) {
    status =
        KILN_STATUS(KILN_STATUS_INVALID_ARGUMENT,
                    "%s: not an object; each entry is {\"vmfb\": ..., \"source\": ..., \"targets\": [...], "
                    "\"flags\": [...]}",
                    where.data);
  }
  if (!status) {
    json_object_object_foreach(o, key, val) {
      if (strcmp(key, "vmfb") == 0 || strcmp(key, "source") == 0) {
        if (!json_object_is_type(val, json_type_string)) {
          status = KILN_STATUS(KILN_STATUS_INVALID_ARGUMENT, "%s: \"%s\" must be a string", where.data, key);
        } else if (key[0] == 'v') {
          raw.vmfb = json_object_get_string(val);
        } else {
          raw.source = json_object_get_string(val);
        }
      } else if (strcmp(key, "targets") == 0 || strcmp(key, "target") == 0) {
        raw.has_targets = true;
        status = json_strings(val, where.data, key, &raw.targets, &raw.target_list, &raw.n_target_list);
      } else if (strcmp(key, "flags") == 0 || strcmp(key, "flag") == 0) {
        raw.has_flags = true;
        status = json_strings(val, where.data, key, &raw.flags, &raw.flag_list, &raw.n_flag_list);
      } else {
        status = KILN_STATUS(KILN_STATUS_INVALID_ARGUMENT,
                             "%s: unknown key \"%s\" (known: vmfb, source, targets, flags)", where.data, key);
      }
      if (status) break;
    }
  }
  if (!status) status = add_entry(map, where.data, &raw);
  kiln_free(raw.target_list);
  kiln_free(raw.flag_list);
  kiln_buf_deinit(&where);
  return status;
}

static size_t line_of(const char *text, size_t offset) {
  size_t line = 1;
  for (size_t i = 0; i < offset && text[i]; i++) line += text[i] == '\n';
  return line;
}

static KILN_MUST_USE kiln_status_t load_json(kiln_cli_source_map_t *map, const char *text, size_t len) {
  json_tokener *tok = json_tokener_new();
  json_object *root = json_tokener_parse_ex(tok, text, (int)len);
  enum json_tokener_error jerr = json_tokener_get_error(tok);
  size_t end = json_tokener_get_parse_end(tok);
  json_tokener_free(tok);
  if (jerr == json_tokener_continue) {
    json_object_put(root);
    return KILN_STATUS(KILN_STATUS_INVALID_ARGUMENT, "%s:%zu: not valid JSON: the text ends inside a value",
                       map->path, line_of(text, len));
  }
  if (!root || jerr != json_tokener_success) {
    json_object_put(root);
    return KILN_STATUS(KILN_STATUS_INVALID_ARGUMENT, "%s:%zu: not valid JSON: %s", map->path,
                       line_of(text, end), json_tokener_error_desc(jerr));
  }
  for (size_t i = end; i < len; i++) {
    if (!isspace((unsigned char)text[i])) {
      json_object_put(root);
      return KILN_STATUS(KILN_STATUS_INVALID_ARGUMENT,
                         "%s:%zu: not valid JSON: text after the end of the document", map->path,
                         line_of(text, i));
    }
  }
  json_object *list = root;
  if (json_object_is_type(root, json_type_object)) {
    if (!json_object_object_get_ex(root, "entries", &list)) list = NULL;
  }
  kiln_status_t status = NULL;
  if (!list || !json_object_is_type(list, json_type_array)) {
    status =
        KILN_STATUS(KILN_STATUS_INVALID_ARGUMENT,
                    "%s: expected a list of entries, or an object whose \"entries\" is that list", map->path);
  }
  for (size_t i = 0; !status && i < json_object_array_length(list); i++) {
    status = json_entry(map, json_object_array_get_idx(list, i), i);
  }
  json_object_put(root);
  return status;
}

/* ---- CSV ----------------------------------------------------------------- */

/* One record's fields; `line` is the line it starts on. */
typedef struct record_s {
  char **fields;
  size_t n;
  size_t line;
} record_t;

static void record_clear(record_t *r) {
  for (size_t i = 0; i < r->n; i++) kiln_free(r->fields[i]);
  kiln_free(r->fields);
  r->fields = NULL;
  r->n = 0;
}

/* Reads the record at *pos (advancing it, and *line); false at the end of text. */
static KILN_MUST_USE kiln_status_t csv_record(const kiln_cli_source_map_t *map, const char *text, size_t len,
                                              size_t *pos, size_t *line, record_t *out, bool *out_got) {
  *out_got = false;
  if (*pos >= len) return NULL;
  out->line = *line;
  kiln_buf_t field;
  kiln_buf_init(&field);
  bool quoted = false, was_quoted = false;
  size_t i = *pos;
  for (;;) {
    char c = i < len ? text[i] : '\0';
    if (quoted) {
      if (i >= len) {
        kiln_buf_deinit(&field);
        return KILN_STATUS(KILN_STATUS_INVALID_ARGUMENT,
                           "%s:%zu: a quoted field is not closed (a '\"' is missing)", map->path, out->line);
      }
      if (c == '"' && i + 1 < len && text[i + 1] == '"') {
        kiln_buf_append_char(&field, '"');
        i += 2;
      } else if (c == '"') {
        quoted = false;
        i++;
      } else {
        if (c == '\n') (*line)++;
        kiln_buf_append_char(&field, c);
        i++;
      }
      continue;
    }
    if (c == '"' && field.len == 0 && !was_quoted) {
      quoted = was_quoted = true;
      i++;
      continue;
    }
    if (c == ',' || c == '\n' || i >= len) {
      /* Unquoted fields are trimmed (a CR before the newline too). */
      size_t a = 0, b = field.len;
      if (!was_quoted) {
        while (a < b && isspace((unsigned char)field.data[a])) a++;
        while (b > a && isspace((unsigned char)field.data[b - 1])) b--;
      }
      out->fields = kiln_realloc(out->fields, (out->n + 1) * sizeof *out->fields);
      char *value = kiln_malloc(b - a + 1);
      memcpy(value, field.data + a, b - a);
      value[b - a] = '\0';
      out->fields[out->n++] = value;
      kiln_buf_clear(&field);
      was_quoted = false;
      i++;
      if (c != ',') {
        if (c == '\n') (*line)++;
        break;
      }
      continue;
    }
    if (was_quoted && c != '\r' && c != ' ' && c != '\t') {
      kiln_buf_deinit(&field);
      return KILN_STATUS(KILN_STATUS_INVALID_ARGUMENT,
                         "%s:%zu: text after a quoted field (quote the whole field)", map->path, *line);
    }
    if (!was_quoted) kiln_buf_append_char(&field, c);
    i++;
  }
  kiln_buf_deinit(&field);
  *pos = i;
  *out_got = true;
  return NULL;
}

static bool record_blank(const record_t *r) {
  if (r->n == 0) return true;
  if (r->fields[0][0] == '#') return true;
  for (size_t i = 0; i < r->n; i++) {
    if (r->fields[i][0]) return false;
  }
  return true;
}

enum { COL_VMFB, COL_SOURCE, COL_TARGETS, COL_FLAGS, COL_COUNT };

static KILN_MUST_USE kiln_status_t load_csv(kiln_cli_source_map_t *map, const char *text, size_t len) {
  size_t pos = 0, line = 1;
  record_t rec = {0};
  int col_of[COL_COUNT] = {-1, -1, -1, -1};
  bool header = false;
  size_t header_n = 0;
  kiln_status_t status = NULL;
  for (;;) {
    bool got = false;
    record_clear(&rec);
    status = csv_record(map, text, len, &pos, &line, &rec, &got);
    if (status || !got) break;
    if (record_blank(&rec)) continue;
    kiln_buf_t where;
    kiln_buf_init(&where);
    kiln_buf_appendf(&where, "%s:%zu", map->path, rec.line);
    if (!header) {
      header = true;
      header_n = rec.n;
      for (size_t i = 0; i < rec.n && !status; i++) {
        const char *name = rec.fields[i];
        int col = strcasecmp(name, "vmfb") == 0                                         ? COL_VMFB
                  : strcasecmp(name, "source") == 0                                     ? COL_SOURCE
                  : strcasecmp(name, "targets") == 0 || strcasecmp(name, "target") == 0 ? COL_TARGETS
                  : strcasecmp(name, "flags") == 0 || strcasecmp(name, "flag") == 0     ? COL_FLAGS
                                                                                        : -1;
        if (col < 0) {
          status = KILN_STATUS(KILN_STATUS_INVALID_ARGUMENT,
                               "%s: unknown column \"%s\" (the header row names vmfb, source and optionally "
                               "targets, flags)",
                               where.data, name);
        } else if (col_of[col] >= 0) {
          status =
              KILN_STATUS(KILN_STATUS_INVALID_ARGUMENT, "%s: column \"%s\" appears twice", where.data, name);
        } else {
          col_of[col] = (int)i;
        }
      }
      if (!status && (col_of[COL_VMFB] < 0 || col_of[COL_SOURCE] < 0)) {
        status = KILN_STATUS(KILN_STATUS_INVALID_ARGUMENT,
                             "%s: the header row has no \"%s\" column (it must name vmfb and source; "
                             "targets and flags are optional)",
                             where.data, col_of[COL_VMFB] < 0 ? "vmfb" : "source");
      }
    } else if (rec.n < header_n) {
      status =
          KILN_STATUS(KILN_STATUS_INVALID_ARGUMENT, "%s: %zu field(s), but the header row names %zu columns",
                      where.data, rec.n, header_n);
    } else if (rec.n > header_n) {
      status = KILN_STATUS(KILN_STATUS_INVALID_ARGUMENT,
                           "%s: %zu fields, but the header row names only %zu columns (quote a field that "
                           "holds a comma)",
                           where.data, rec.n, header_n);
    } else {
      raw_t raw;
      memset(&raw, 0, sizeof raw);
      raw.vmfb = rec.fields[col_of[COL_VMFB]];
      raw.source = rec.fields[col_of[COL_SOURCE]];
      if (col_of[COL_TARGETS] >= 0) {
        raw.targets = rec.fields[col_of[COL_TARGETS]];
        raw.has_targets = true;
      }
      if (col_of[COL_FLAGS] >= 0 && rec.fields[col_of[COL_FLAGS]][0]) {
        raw.flags = rec.fields[col_of[COL_FLAGS]];
        raw.has_flags = true;
      }
      status = add_entry(map, where.data, &raw);
    }
    kiln_buf_deinit(&where);
    if (status) break;
  }
  record_clear(&rec);
  if (!status && !header) {
    status = KILN_STATUS(KILN_STATUS_INVALID_ARGUMENT,
                         "%s: empty: a CSV manifest starts with a header row (vmfb,source,targets,flags)",
                         map->path);
  }
  return status;
}

/* ---- the map ------------------------------------------------------------- */

static bool ends_with(const char *s, const char *suffix) {
  size_t n = strlen(s), m = strlen(suffix);
  return n >= m && strcasecmp(s + n - m, suffix) == 0;
}

kiln_status_t kiln_cli_source_map_load(const char *path, bool allow_outside, kiln_cli_source_map_t *out_map) {
  memset(out_map, 0, sizeof *out_map);
  out_map->path = kiln_strdup(path);
  if (!allow_outside) {
    char *dir = kiln_strdup(path);
    char *slash = strrchr(dir, '/');
    const char *folder = ".";
    if (slash) {
      slash[slash == dir ? 1 : 0] = '\0'; /* "/m.json": the root folder */
      folder = dir;
    }
    char *real = realpath(folder, NULL);
    kiln_free(dir);
    if (!real) return KILN_CLI_LOCAL_ERRNO(errno, "cannot resolve the folder of the manifest %s", path);
    out_map->root = kiln_strdup(real);
    free(real);
  }
  FILE *f = fopen(path, "rb");
  if (!f) return KILN_CLI_LOCAL_ERRNO(errno, "cannot open the manifest %s", path);
  uint8_t *data = NULL;
  size_t len = 0;
  kiln_status_t status = kiln_cli_read_all(f, path, MAX_MANIFEST_BYTES, &data, &len);
  fclose(f);
  if (status) return status;
  const char *text = (const char *)data;
  if (strlen(text) != len) {
    kiln_free(data);
    return KILN_STATUS(KILN_STATUS_INVALID_ARGUMENT, "%s: holds a NUL byte; a manifest is JSON or CSV text",
                       path);
  }
  bool json;
  if (ends_with(path, ".json")) {
    json = true;
  } else if (ends_with(path, ".csv")) {
    json = false;
  } else {
    size_t i = 0;
    while (i < len && isspace((unsigned char)text[i])) i++;
    json = i < len && (text[i] == '[' || text[i] == '{');
  }
  status = json ? load_json(out_map, text, len) : load_csv(out_map, text, len);
  kiln_free(data);
  return status;
}

void kiln_cli_source_map_deinit(kiln_cli_source_map_t *map) {
  for (size_t i = 0; i < map->n_entries; i++) {
    kiln_cli_source_entry_t *e = &map->entries[i];
    kiln_free(e->where);
    kiln_free(e->vmfb_path);
    kiln_free(e->vmfb_digest);
    kiln_free(e->source);
    kiln_cli_strings_free(e->targets, e->n_targets);
    kiln_cli_strings_free(e->flags, e->n_flags);
  }
  kiln_free(map->entries);
  kiln_free(map->path);
  kiln_free(map->root);
  memset(map, 0, sizeof *map);
}

kiln_cli_source_entry_t *kiln_cli_source_map_find(kiln_cli_source_map_t *map, const char *real_path,
                                                  const char *digest) {
  kiln_cli_source_entry_t *by_digest = NULL;
  for (size_t i = 0; i < map->n_entries; i++) {
    kiln_cli_source_entry_t *e = &map->entries[i];
    if (real_path && e->vmfb_path && strcmp(e->vmfb_path, real_path) == 0) {
      e->matched = true;
      return e;
    }
    if (!by_digest && digest && e->vmfb_digest && strcmp(e->vmfb_digest, digest) == 0) by_digest = e;
  }
  if (by_digest) by_digest->matched = true;
  return by_digest;
}
