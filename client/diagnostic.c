/* A compiler diagnostic as text (diagnostic.h). */
#include "client/diagnostic.h"

#include <stdbool.h>

static const char *severity_name(Kiln__V1__Severity severity) {
  switch (severity) {
    case KILN__V1__SEVERITY__SEVERITY_ERROR: return "error";
    case KILN__V1__SEVERITY__SEVERITY_WARNING: return "warning";
    case KILN__V1__SEVERITY__SEVERITY_NOTE: return "note";
    case KILN__V1__SEVERITY__SEVERITY_REMARK: return "remark";
    default: return "error";
  }
}

static void format_one(const Kiln__V1__Diagnostic *d, bool with_target, kiln_buf_t *out) {
  const Kiln__V1__SourceLocation *loc = d->location;
  if (loc && ((loc->file && *loc->file) || loc->line)) {
    kiln_buf_append_str(out, loc->file && *loc->file ? loc->file : "<source>");
    if (loc->line) kiln_buf_appendf(out, ":%u", loc->line);
    if (loc->line && loc->column) kiln_buf_appendf(out, ":%u", loc->column);
    kiln_buf_append_str(out, ": ");
  }
  kiln_buf_appendf(out, "%s: %s", severity_name(d->severity), d->message ? d->message : "");
  if (with_target && d->target && *d->target) kiln_buf_appendf(out, " [%s]", d->target);
  kiln_buf_append_char(out, '\n');
}

void kiln_cli_diagnostic_format(const Kiln__V1__Diagnostic *diagnostic, kiln_buf_t *out) {
  format_one(diagnostic, true, out);
  for (size_t i = 0; i < diagnostic->n_notes; i++) {
    kiln_buf_append_str(out, "  ");
    format_one(diagnostic->notes[i], false, out);
  }
}
