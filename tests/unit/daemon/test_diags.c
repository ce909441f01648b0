/* Unit tests for daemon/diags: compiler diagnostics text becomes kiln.v1.Diagnostic
 * messages with file, line, column and severity; indented notes attach to the
 * diagnostic above them; other lines (headings) are skipped; file names may hold
 * colons; at most 64 are kept. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <stdio.h>
#include <string.h>

#include "base/buf.h"
#include "daemon/diags.h"

static void test_parse(void **state) {
  (void)state;
  kilnd_diags_t d = {0};
  kilnd_diags_parse(&d,
                    "bad.mlir does not parse as MLIR:\n"
                    "bad.mlir:3:7: error: 'tosa.mul' op expected 3 operands, but found 2\n"
                    "  bad.mlir:3:7: note: see current operation\n"
                    "C:/models/a.mlir:10:1: warning: unused value\n"
                    "no location: error: nothing here\n",
                    "sm_89");
  assert_int_equal(d.n, 2);
  Kiln__V1__Diagnostic *e = d.items[0];
  assert_int_equal(e->severity, KILN__V1__SEVERITY__SEVERITY_ERROR);
  assert_string_equal(e->location->file, "bad.mlir");
  assert_int_equal(e->location->line, 3);
  assert_int_equal(e->location->column, 7);
  assert_string_equal(e->message, "'tosa.mul' op expected 3 operands, but found 2");
  assert_string_equal(e->target, "sm_89");
  assert_int_equal(e->n_notes, 1);
  assert_int_equal(e->notes[0]->severity, KILN__V1__SEVERITY__SEVERITY_NOTE);
  assert_string_equal(e->notes[0]->message, "see current operation");
  Kiln__V1__Diagnostic *w = d.items[1];
  assert_int_equal(w->severity, KILN__V1__SEVERITY__SEVERITY_WARNING);
  assert_string_equal(w->location->file, "C:/models/a.mlir");
  assert_int_equal(w->location->line, 10);
  kilnd_diags_free(&d);
  assert_int_equal(d.n, 0);
}

static void test_bounded(void **state) {
  (void)state;
  kiln_buf_t text;
  kiln_buf_init(&text);
  for (int i = 1; i <= 100; i++) kiln_buf_appendf(&text, "m.mlir:%d:1: error: e%d\n", i, i);
  kilnd_diags_t d = {0};
  kilnd_diags_parse(&d, text.data, "gfx950");
  assert_int_equal(d.n, 64);
  assert_int_equal(d.items[63]->location->line, 64);
  kilnd_diags_free(&d);
  kilnd_diags_parse(&d, "", "gfx950");
  assert_int_equal(d.n, 0);
  kilnd_diags_free(&d);
  kiln_buf_deinit(&text);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_parse),
      cmocka_unit_test(test_bounded),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
