/* The config table. Every setter goes through set_option(), so a value from the
 * file, the environment or argv is validated by exactly the same code. */
#include "base/config.h"

#include <ctype.h>
#include <errno.h>
#include <inttypes.h>
#include <limits.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/stat.h>

#include "base/alloc.h"

static void *field(void *settings, const kiln_config_option_t *opt) { return (char *)settings + opt->offset; }

static const kiln_config_option_t *find_option(const kiln_config_table_t *table, const char *name,
                                               size_t name_len) {
  for (size_t i = 0; i < table->count; i++) {
    const kiln_config_option_t *opt = &table->options[i];
    if (strlen(opt->name) != name_len) continue;
    /* File keys may use '_' where flags use '-'. */
    size_t j = 0;
    for (; j < name_len; j++) {
      char a = name[j] == '_' ? '-' : name[j];
      if (tolower((unsigned char)a) != opt->name[j]) break;
    }
    if (j == name_len) return opt;
  }
  return NULL;
}

static void list_clear(kiln_config_list_t *list) {
  for (size_t i = 0; i < list->count; i++) kiln_free(list->items[i]);
  kiln_free(list->items);
  list->items = NULL;
  list->count = 0;
}

/* A LIST named by a source replaces what lower sources gave: the first time a pass
 * (one file, the environment, argv) meets a LIST option it empties it. `seen` has
 * one flag per option of the table. */
static void list_reset_once(const kiln_config_table_t *table, const kiln_config_option_t *opt, void *settings,
                            bool *seen) {
  if (opt->type != KILN_CONFIG_LIST) return;
  size_t idx = (size_t)(opt - table->options);
  if (seen[idx]) return;
  seen[idx] = true;
  list_clear(field(settings, opt));
}

static const kiln_config_option_t *find_short(const kiln_config_table_t *table, char c) {
  for (size_t i = 0; i < table->count; i++) {
    if (table->options[i].short_name == c) return &table->options[i];
  }
  return NULL;
}

int kiln_config_parse_size(const char *text, uint64_t *out_bytes) {
  if (!text || !*text) return -1;
  errno = 0;
  char *end;
  if (!isdigit((unsigned char)*text)) return -1;
  unsigned long long n = strtoull(text, &end, 10);
  if (errno) return -1;
  while (*end == ' ') end++;
  uint64_t mult = 1;
  if (*end) {
    static const struct {
      const char *suffix;
      uint64_t mult;
    } units[] = {
        {"b", 1},
        {"k", 1ull << 10},
        {"kb", 1000},
        {"kib", 1ull << 10},
        {"m", 1ull << 20},
        {"mb", 1000000},
        {"mib", 1ull << 20},
        {"g", 1ull << 30},
        {"gb", 1000000000},
        {"gib", 1ull << 30},
        {"t", 1ull << 40},
        {"tb", 1000000000000ull},
        {"tib", 1ull << 40},
    };
    size_t i = 0;
    for (; i < sizeof units / sizeof units[0]; i++) {
      if (strcasecmp(end, units[i].suffix) == 0) break;
    }
    if (i == sizeof units / sizeof units[0]) return -1;
    mult = units[i].mult;
  }
  if (n > UINT64_MAX / mult) return -1;
  *out_bytes = (uint64_t)n * mult;
  return 0;
}

int kiln_config_parse_duration_ms(const char *text, int64_t *out_ms) {
  if (!text || !isdigit((unsigned char)*text)) return -1;
  errno = 0;
  char *end;
  unsigned long long n = strtoull(text, &end, 10);
  if (errno) return -1;
  while (*end == ' ') end++;
  int64_t mult;
  if (!*end || strcmp(end, "s") == 0)
    mult = 1000;
  else if (strcmp(end, "ms") == 0)
    mult = 1;
  else if (strcmp(end, "m") == 0 || strcmp(end, "min") == 0)
    mult = 60 * 1000;
  else if (strcmp(end, "h") == 0)
    mult = 3600 * 1000;
  else
    return -1;
  if (n > (unsigned long long)(INT64_MAX / mult)) return -1;
  *out_ms = (int64_t)n * mult;
  return 0;
}

static int parse_bool(const char *text, bool *out) {
  static const char *const yes[] = {"1", "true", "yes", "on"};
  static const char *const no[] = {"0", "false", "no", "off"};
  for (size_t i = 0; i < 4; i++) {
    if (strcasecmp(text, yes[i]) == 0) {
      *out = true;
      return 0;
    }
    if (strcasecmp(text, no[i]) == 0) {
      *out = false;
      return 0;
    }
  }
  return -1;
}

static KILN_MUST_USE kiln_status_t bad_value(const kiln_config_option_t *opt, const char *value,
                                             const char *source, const char *expected) {
  return KILN_STATUS(KILN_STATUS_INVALID_ARGUMENT, "%s: invalid value '%s' for %s: expected %s", source,
                     value, opt->name, expected);
}

static KILN_MUST_USE kiln_status_t check_range(const kiln_config_option_t *opt, const char *value,
                                               const char *source, int64_t v) {
  if (opt->min == 0 && opt->max == 0) return NULL;
  if (v < opt->min || v > opt->max) {
    return KILN_STATUS(KILN_STATUS_INVALID_ARGUMENT,
                       "%s: value '%s' for %s is out of range [%" PRId64 ", %" PRId64 "]", source, value,
                       opt->name, opt->min, opt->max);
  }
  return NULL;
}

static KILN_MUST_USE kiln_status_t set_option(const kiln_config_option_t *opt, void *settings,
                                              const char *value, const char *source) {
  void *dst = field(settings, opt);
  switch (opt->type) {
    case KILN_CONFIG_STRING:
    case KILN_CONFIG_LIST: {
      if (opt->choices) {
        size_t i = 0;
        for (; opt->choices[i]; i++) {
          if (strcmp(opt->choices[i], value) == 0) break;
        }
        if (!opt->choices[i]) {
          kiln_buf_t list;
          kiln_buf_init(&list);
          for (i = 0; opt->choices[i]; i++) {
            kiln_buf_appendf(&list, "%s%s", i ? ", " : "one of ", opt->choices[i]);
          }
          kiln_status_t st = bad_value(opt, value, source, list.data);
          kiln_buf_deinit(&list);
          return st;
        }
      }
      if (opt->type == KILN_CONFIG_LIST) {
        kiln_config_list_t *list = dst;
        list->items = kiln_realloc(list->items, (list->count + 1) * sizeof *list->items);
        list->items[list->count++] = kiln_strdup(value);
        return NULL;
      }
      char **s = dst;
      char *copy = kiln_strdup(value); /* before the free: value may be *s itself */
      kiln_free(*s);
      *s = copy;
      return NULL;
    }
    case KILN_CONFIG_BOOL: {
      bool b;
      if (parse_bool(value, &b) != 0) return bad_value(opt, value, source, "true or false");
      *(bool *)dst = b;
      return NULL;
    }
    case KILN_CONFIG_INT: {
      errno = 0;
      char *end;
      long long v = strtoll(value, &end, 10);
      if (errno || end == value || *end) return bad_value(opt, value, source, "an integer");
      KILN_RETURN_IF_ERROR(check_range(opt, value, source, v));
      *(int64_t *)dst = v;
      return NULL;
    }
    case KILN_CONFIG_SIZE: {
      uint64_t v;
      if ((opt->flags & KILN_CONFIG_AUTO) && strcasecmp(value, "auto") == 0) {
        *(uint64_t *)dst = KILN_CONFIG_SIZE_AUTO;
        return NULL;
      }
      if (kiln_config_parse_size(value, &v) != 0) {
        return bad_value(opt, value, source, "a size such as 4096, 64KiB or 16MiB");
      }
      if (v > INT64_MAX) return bad_value(opt, value, source, "a smaller size");
      KILN_RETURN_IF_ERROR(check_range(opt, value, source, (int64_t)v));
      *(uint64_t *)dst = v;
      return NULL;
    }
    case KILN_CONFIG_DURATION: {
      int64_t v;
      if (kiln_config_parse_duration_ms(value, &v) != 0) {
        return bad_value(opt, value, source, "a duration such as 250ms, 30s, 5m or 1h");
      }
      KILN_RETURN_IF_ERROR(check_range(opt, value, source, v));
      *(int64_t *)dst = v;
      return NULL;
    }
  }
  return KILN_STATUS(KILN_STATUS_INTERNAL, "option %s has an unknown type", opt->name);
}

kiln_status_t kiln_config_set_defaults(const kiln_config_table_t *table, void *settings) {
  for (size_t i = 0; i < table->count; i++) {
    const kiln_config_option_t *opt = &table->options[i];
    if (opt->type == KILN_CONFIG_LIST) list_clear(field(settings, opt));
    if (opt->default_value) {
      KILN_RETURN_IF_ERROR(set_option(opt, settings, opt->default_value, "default"));
    }
  }
  return NULL;
}

kiln_status_t kiln_config_set(const kiln_config_table_t *table, void *settings, const char *name,
                              const char *value, const char *source) {
  const kiln_config_option_t *opt = find_option(table, name, strlen(name));
  if (!opt) {
    return KILN_STATUS(KILN_STATUS_INVALID_ARGUMENT, "%s: unknown setting '%s' (see %s --help)", source, name,
                       table->program);
  }
  return set_option(opt, settings, value, source);
}

static char *trim(char *s) {
  while (isspace((unsigned char)*s)) s++;
  char *end = s + strlen(s);
  while (end > s && isspace((unsigned char)end[-1])) *--end = '\0';
  return s;
}

kiln_status_t kiln_config_load_file(const kiln_config_table_t *table, void *settings, const char *path) {
  FILE *f = fopen(path, "r");
  if (!f) return KILN_STATUS_ERRNO(errno, "cannot open config file %s", path);
  struct stat st;
  /* A directory opens fine and reads as empty on Linux; pipes (/dev/stdin) are fine. */
  if (fstat(fileno(f), &st) != 0 || S_ISDIR(st.st_mode)) {
    fclose(f);
    return KILN_STATUS(KILN_STATUS_INVALID_ARGUMENT,
                       "config file %s is a directory; name a file of name = value lines", path);
  }
  kiln_status_t status = NULL;
  bool *seen = kiln_calloc(table->count + 1, sizeof *seen);
  char *line = NULL;
  size_t cap = 0;
  int lineno = 0;
  char source[512];
  while (!status && getline(&line, &cap, f) >= 0) {
    lineno++;
    snprintf(source, sizeof source, "%s:%d", path, lineno);
    char *text = trim(line);
    if (*text == '\0' || *text == '#') continue;
    char *eq = strchr(text, '=');
    if (!eq) {
      status =
          KILN_STATUS(KILN_STATUS_INVALID_ARGUMENT, "%s: expected 'name = value', got '%s'", source, text);
      break;
    }
    *eq = '\0';
    char *key = trim(text);
    char *value = trim(eq + 1);
    size_t vlen = strlen(value);
    if (vlen >= 2 && (value[0] == '"' || value[0] == '\'') && value[vlen - 1] == value[0]) {
      value[vlen - 1] = '\0';
      value++;
    }
    const kiln_config_option_t *opt = find_option(table, key, strlen(key));
    if (!opt || (opt->flags & KILN_CONFIG_CLI_ONLY)) {
      status = KILN_STATUS(KILN_STATUS_INVALID_ARGUMENT,
                           "%s: unknown setting '%s' (see %s --help for the settings)", source, key,
                           table->program);
      break;
    }
    list_reset_once(table, opt, settings, seen);
    status = set_option(opt, settings, value, source);
  }
  kiln_free(seen);
  free(line); /* allocated by getline */
  fclose(f);
  return status;
}

static void env_name(const kiln_config_table_t *table, const kiln_config_option_t *opt, char *out,
                     size_t cap) {
  int written = snprintf(out, cap, "%s", table->env_prefix ? table->env_prefix : "");
  size_t n = written < 0 ? 0 : (size_t)written;
  if (n >= cap) n = cap - 1; /* truncated: snprintf returned the untruncated length */
  for (const char *p = opt->name; *p && n + 1 < cap; p++) {
    out[n++] = *p == '-' ? '_' : (char)toupper((unsigned char)*p);
  }
  out[n] = '\0';
}

kiln_status_t kiln_config_load_env(const kiln_config_table_t *table, void *settings) {
  for (size_t i = 0; i < table->count; i++) {
    const kiln_config_option_t *opt = &table->options[i];
    if (opt->flags & KILN_CONFIG_CLI_ONLY) continue;
    char name[128];
    env_name(table, opt, name, sizeof name);
    const char *value = getenv(name);
    if (!value) continue;
    if (opt->type == KILN_CONFIG_LIST) list_clear(field(settings, opt)); /* one item */
    KILN_RETURN_IF_ERROR(set_option(opt, settings, value, name));
  }
  return NULL;
}

static KILN_MUST_USE kiln_status_t parse_args(const kiln_config_table_t *table, void *settings, int argc,
                                              char **argv, const char **out_positional, size_t max_positional,
                                              size_t *out_positional_count, bool *seen) {
  size_t npos = 0;
  if (out_positional_count) *out_positional_count = 0;
  bool options_done = false;
  for (int i = 1; i < argc; i++) {
    const char *arg = argv[i];
    if (options_done || arg[0] != '-' || arg[1] == '\0') {
      if (npos >= max_positional) {
        return KILN_STATUS(KILN_STATUS_INVALID_ARGUMENT, "unexpected argument '%s' (see %s --help)", arg,
                           table->program);
      }
      out_positional[npos++] = arg;
      continue;
    }
    if (strcmp(arg, "--") == 0) {
      options_done = true;
      continue;
    }
    const kiln_config_option_t *opt;
    const char *value = NULL;
    char display[160];
    bool negated = false;
    if (arg[1] != '-') {
      if (arg[2] != '\0') {
        return KILN_STATUS(KILN_STATUS_INVALID_ARGUMENT, "unknown flag '%s' (see %s --help)", arg,
                           table->program);
      }
      opt = find_short(table, arg[1]);
      snprintf(display, sizeof display, "%s", arg);
    } else {
      const char *name = arg + 2;
      const char *eq = strchr(name, '=');
      size_t name_len = eq ? (size_t)(eq - name) : strlen(name);
      if (eq) value = eq + 1;
      opt = find_option(table, name, name_len);
      if (!opt && name_len > 3 && strncmp(name, "no-", 3) == 0 && !eq) {
        opt = find_option(table, name + 3, name_len - 3);
        if (opt && opt->type == KILN_CONFIG_BOOL)
          negated = true;
        else
          opt = NULL;
      }
      snprintf(display, sizeof display, "--%.*s", (int)name_len, name);
    }
    if (!opt) {
      return KILN_STATUS(KILN_STATUS_INVALID_ARGUMENT, "unknown flag '%s' (see %s --help)", display,
                         table->program);
    }
    if (opt->type == KILN_CONFIG_BOOL && !value) {
      value = negated ? "false" : "true";
    } else if (!value) {
      if (i + 1 >= argc) {
        return KILN_STATUS(KILN_STATUS_INVALID_ARGUMENT, "flag %s needs a value (%s)", display,
                           opt->metavar ? opt->metavar : "VALUE");
      }
      value = argv[++i];
    }
    char source[200];
    snprintf(source, sizeof source, "flag %s", display);
    list_reset_once(table, opt, settings, seen);
    KILN_RETURN_IF_ERROR(set_option(opt, settings, value, source));
    if (opt->type == KILN_CONFIG_BOOL && strcmp(opt->name, "help") == 0 &&
        *(const bool *)((const char *)settings + opt->offset)) {
      break; /* --help ends the command line, as in GNU tools: what follows is not checked */
    }
  }
  if (out_positional_count) *out_positional_count = npos;
  return NULL;
}

kiln_status_t kiln_config_parse_args(const kiln_config_table_t *table, void *settings, int argc, char **argv,
                                     const char **out_positional, size_t max_positional,
                                     size_t *out_positional_count) {
  bool *seen = kiln_calloc(table->count + 1, sizeof *seen);
  kiln_status_t status =
      parse_args(table, settings, argc, argv, out_positional, max_positional, out_positional_count, seen);
  kiln_free(seen);
  return status;
}

/* Finds the config file named on the command line (last one wins), without
 * interpreting anything else; errors in other flags are reported by the real pass.
 * Like that pass it stops at --help, so a config file named after it is not read. */
static const char *scan_args_for(const kiln_config_table_t *table, const char *name, int argc, char **argv) {
  const char *found = NULL;
  const kiln_config_option_t *opt = find_option(table, name, strlen(name));
  const kiln_config_option_t *help = find_option(table, "help", 4);
  if (help && help->type != KILN_CONFIG_BOOL) help = NULL;
  size_t len = strlen(name);
  for (int i = 1; i < argc; i++) {
    const char *arg = argv[i];
    if (strcmp(arg, "--") == 0) break;
    if (help && (strcmp(arg, "--help") == 0 ||
                 (help->short_name && arg[0] == '-' && arg[1] == help->short_name && arg[2] == '\0'))) {
      break;
    }
    if (strncmp(arg, "--", 2) == 0 && strncmp(arg + 2, name, len) == 0) {
      if (arg[2 + len] == '=')
        found = arg + 3 + len;
      else if (arg[2 + len] == '\0' && i + 1 < argc)
        found = argv[++i];
    } else if (opt && opt->short_name && arg[0] == '-' && arg[1] == opt->short_name && arg[2] == '\0' &&
               i + 1 < argc) {
      found = argv[++i];
    }
  }
  return found;
}

kiln_status_t kiln_config_load(const kiln_config_table_t *table, void *settings, const char *config_option,
                               int argc, char **argv, const char **out_positional, size_t max_positional,
                               size_t *out_positional_count) {
  KILN_RETURN_IF_ERROR(kiln_config_set_defaults(table, settings));
  if (config_option) {
    const char *path = scan_args_for(table, config_option, argc, argv);
    if (!path) {
      const kiln_config_option_t *opt = find_option(table, config_option, strlen(config_option));
      char name[128];
      if (opt) {
        env_name(table, opt, name, sizeof name);
        path = getenv(name);
      }
    }
    if (path && *path) KILN_RETURN_IF_ERROR(kiln_config_load_file(table, settings, path));
  }
  KILN_RETURN_IF_ERROR(kiln_config_load_env(table, settings));
  return kiln_config_parse_args(table, settings, argc, argv, out_positional, max_positional,
                                out_positional_count);
}

void kiln_config_print_help(const kiln_config_table_t *table, FILE *out) {
  for (size_t i = 0; i < table->count; i++) {
    const kiln_config_option_t *opt = &table->options[i];
    char left[96];
    int n;
    if (opt->short_name)
      n = snprintf(left, sizeof left, "  -%c, --%s", opt->short_name, opt->name);
    else
      n = snprintf(left, sizeof left, "      --%s", opt->name);
    if (opt->metavar && n > 0 && (size_t)n < sizeof left) {
      snprintf(left + n, sizeof left - (size_t)n, " %s", opt->metavar);
    }
    fprintf(out, "%-34s %s%s", left, opt->help ? opt->help : "",
            opt->type == KILN_CONFIG_LIST ? " (repeatable)" : "");
    if (opt->default_value && opt->type != KILN_CONFIG_BOOL) {
      fprintf(out, " [default: %s]", opt->default_value);
    }
    /* The config file itself is also named by the environment (kiln_config_load). */
    bool has_env = !(opt->flags & KILN_CONFIG_CLI_ONLY) || strcmp(opt->name, "config") == 0;
    if (has_env && table->env_prefix) {
      char name[128];
      env_name(table, opt, name, sizeof name);
      fprintf(out, " (env %s)", name);
    }
    fputc('\n', out);
  }
}

void kiln_config_dump(const kiln_config_table_t *table, const void *settings, kiln_buf_t *out) {
  for (size_t i = 0; i < table->count; i++) {
    const kiln_config_option_t *opt = &table->options[i];
    if (opt->flags & (KILN_CONFIG_CLI_ONLY | KILN_CONFIG_NO_DUMP)) continue;
    const void *src = (const char *)settings + opt->offset;
    if (opt->type == KILN_CONFIG_LIST) {
      /* One line per item: a file that names the option replaces it as a whole. */
      const kiln_config_list_t *list = src;
      if (list->count == 0) kiln_buf_appendf(out, "# %s is unset\n", opt->name);
      for (size_t k = 0; k < list->count; k++) {
        kiln_buf_appendf(out, "%s = \"%s\"\n", opt->name, list->items[k]);
      }
      continue;
    }
    if (opt->type == KILN_CONFIG_STRING && !*(char *const *)src) {
      /* Unset is not the empty string: leave it out so the dump re-parses. */
      kiln_buf_appendf(out, "# %s is unset\n", opt->name);
      continue;
    }
    kiln_buf_appendf(out, "%s = ", opt->name);
    switch (opt->type) {
      case KILN_CONFIG_STRING: {
        const char *s = *(char *const *)src;
        kiln_buf_appendf(out, "\"%s\"", s ? s : "");
        break;
      }
      case KILN_CONFIG_BOOL: kiln_buf_append_str(out, *(const bool *)src ? "true" : "false"); break;
      case KILN_CONFIG_INT: kiln_buf_appendf(out, "%" PRId64, *(const int64_t *)src); break;
      case KILN_CONFIG_SIZE:
        if (*(const uint64_t *)src == KILN_CONFIG_SIZE_AUTO)
          kiln_buf_append_str(out, "auto");
        else
          kiln_buf_appendf(out, "%" PRIu64, *(const uint64_t *)src);
        break;
      case KILN_CONFIG_DURATION: kiln_buf_appendf(out, "%" PRId64 "ms", *(const int64_t *)src); break;
      case KILN_CONFIG_LIST: break; /* handled above */
    }
    kiln_buf_append_char(out, '\n');
  }
}

void kiln_config_deinit(const kiln_config_table_t *table, void *settings) {
  for (size_t i = 0; i < table->count; i++) {
    const kiln_config_option_t *opt = &table->options[i];
    if (opt->type == KILN_CONFIG_STRING) {
      char **s = field(settings, opt);
      kiln_free(*s);
      *s = NULL;
    } else if (opt->type == KILN_CONFIG_LIST) {
      list_clear(field(settings, opt));
    }
  }
}
