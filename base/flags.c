/* The compile-flag normal form (see flags.h). */
#include "base/flags.h"

#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

#include "base/alloc.h"

static bool blank(char c) {
  return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\v' || c == '\f';
}

static size_t name_len(const char *flag) {
  const char *eq = strchr(flag, '=');
  return eq ? (size_t)(eq - flag) : strlen(flag);
}

static int by_name(const void *a, const void *b) {
  const char *x = *(const char *const *)a, *y = *(const char *const *)b;
  size_t nx = name_len(x), ny = name_len(y);
  int c = memcmp(x, y, nx < ny ? nx : ny);
  return c ? c : (nx > ny) - (nx < ny);
}

size_t kiln_flags_normalize(const char *const *flags, size_t n, char ***out_flags) {
  char **trimmed = kiln_calloc(n ? n : 1, sizeof *trimmed);
  size_t count = 0;
  for (size_t i = 0; i < n; i++) {
    const char *s = flags[i] ? flags[i] : "";
    while (blank(*s)) s++;
    size_t len = strlen(s);
    while (len && blank(s[len - 1])) len--;
    if (len) trimmed[count++] = kiln_strndup(s, len);
  }
  /* The last spelling of a name wins: drop each flag a later one renames. */
  size_t kept = 0;
  for (size_t i = 0; i < count; i++) {
    size_t len = name_len(trimmed[i]);
    bool later = false;
    for (size_t j = i + 1; j < count && !later; j++) {
      later = name_len(trimmed[j]) == len && memcmp(trimmed[i], trimmed[j], len) == 0;
    }
    if (later)
      kiln_free(trimmed[i]);
    else
      trimmed[kept++] = trimmed[i];
  }
  qsort(trimmed, kept, sizeof *trimmed, by_name);
  *out_flags = trimmed;
  return kept;
}

void kiln_flags_free(char **flags, size_t n) {
  for (size_t i = 0; i < n; i++) kiln_free(flags[i]);
  kiln_free(flags);
}
