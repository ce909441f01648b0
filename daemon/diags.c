/* Compiler diagnostics text -> kiln.v1.Diagnostic (see diags.h). */
#include "daemon/diags.h"

#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

#include "base/alloc.h"

static void *diag_alloc(kilnd_diags_t *d, size_t size) {
  void *p = kiln_calloc(1, size);
  d->owned = kiln_realloc(d->owned, (d->n_owned + 1) * sizeof *d->owned);
  d->owned[d->n_owned++] = p;
  return p;
}

static char *diag_strndup(kilnd_diags_t *d, const char *s, size_t n) {
  char *p = diag_alloc(d, n + 1);
  memcpy(p, s, n);
  return p;
}

void kilnd_diags_free(kilnd_diags_t *d) {
  for (size_t i = 0; i < d->n_owned; i++) kiln_free(d->owned[i]);
  kiln_free(d->owned);
  memset(d, 0, sizeof *d);
}

static bool parse_diag_line(kilnd_diags_t *d, const char *line, size_t len, const char *target,
                            Kiln__V1__Diagnostic **out, bool *out_note) {
  size_t indent = 0;
  while (indent < len && line[indent] == ' ') indent++;
  const char *p = line + indent, *end = line + len;
  static const struct {
    const char *word;
    Kiln__V1__Severity sev;
  } sevs[] = {{": error: ", KILN__V1__SEVERITY__SEVERITY_ERROR},
              {": warning: ", KILN__V1__SEVERITY__SEVERITY_WARNING},
              {": note: ", KILN__V1__SEVERITY__SEVERITY_NOTE},
              {": remark: ", KILN__V1__SEVERITY__SEVERITY_REMARK}};
  for (size_t k = 0; k < sizeof sevs / sizeof sevs[0]; k++) {
    const char *hit = memmem(p, (size_t)(end - p), sevs[k].word, strlen(sevs[k].word));
    if (!hit) continue;
    /* hit is after "<file>:<line>:<col>": read the two numbers backwards. */
    const char *c = hit;
    const char *col_start = c;
    while (col_start > p && col_start[-1] >= '0' && col_start[-1] <= '9') col_start--;
    if (col_start == c || col_start == p || col_start[-1] != ':') return false;
    const char *line_end = col_start - 1, *line_start = line_end;
    while (line_start > p && line_start[-1] >= '0' && line_start[-1] <= '9') line_start--;
    if (line_start == line_end || line_start == p || line_start[-1] != ':') return false;
    Kiln__V1__Diagnostic *dg = diag_alloc(d, sizeof *dg);
    kiln__v1__diagnostic__init(dg);
    Kiln__V1__SourceLocation *loc = diag_alloc(d, sizeof *loc);
    kiln__v1__source_location__init(loc);
    loc->file = diag_strndup(d, p, (size_t)(line_start - 1 - p));
    loc->line = (uint32_t)strtoul(line_start, NULL, 10);
    loc->column = (uint32_t)strtoul(col_start, NULL, 10);
    dg->location = loc;
    dg->severity = sevs[k].sev;
    const char *msg = hit + strlen(sevs[k].word);
    dg->message = diag_strndup(d, msg, (size_t)(end - msg));
    dg->target = (char *)target;
    *out = dg;
    *out_note = indent > 0;
    return true;
  }
  return false;
}

void kilnd_diags_parse(kilnd_diags_t *d, const char *text, const char *target) {
  Kiln__V1__Diagnostic *last = NULL;
  for (const char *line = text; line && *line;) {
    const char *nl = strchr(line, '\n');
    size_t len = nl ? (size_t)(nl - line) : strlen(line);
    Kiln__V1__Diagnostic *dg = NULL;
    bool note = false;
    if (d->n < 64 && parse_diag_line(d, line, len, target, &dg, &note)) {
      if (note && last) {
        Kiln__V1__Diagnostic **notes = diag_alloc(d, (last->n_notes + 1) * sizeof *notes);
        if (last->n_notes) memcpy(notes, last->notes, last->n_notes * sizeof *notes);
        notes[last->n_notes++] = dg;
        last->notes = notes;
      } else {
        Kiln__V1__Diagnostic **items = diag_alloc(d, (d->n + 1) * sizeof *items);
        if (d->n) memcpy(items, d->items, d->n * sizeof *items);
        items[d->n++] = dg;
        d->items = items;
        last = dg;
      }
    }
    line = nl ? nl + 1 : NULL;
  }
}
