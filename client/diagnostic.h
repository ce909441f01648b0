/* kiln.v1.Diagnostic as text, the way compilers print them, for every place the
 * CLI shows one: failed calls' trailing diagnostics (rpc.c), job events (job.c)
 * and Recompile results. Below both transport and display; no state. */
#ifndef KILN_CLIENT_DIAGNOSTIC_H
#define KILN_CLIENT_DIAGNOSTIC_H

#include "base/buf.h"
#include "kiln/v1/kiln.pb-c.h"

/* Formats one diagnostic (and its notes, indented) as
 * "<file>:<line>:<column>: <severity>: <message> [<target>]"; appends a newline
 * after each. */
void kiln_cli_diagnostic_format(const Kiln__V1__Diagnostic *diagnostic, kiln_buf_t *out);

#endif /* KILN_CLIENT_DIAGNOSTIC_H */
