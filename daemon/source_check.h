/* What the bytes of a source say about its format, checked as they arrive: MLIR
 * bytecode (it starts with the magic "ML\xefR") or MLIR text (valid UTF-8, RFC
 * 3629: no overlongs, no surrogates, nothing above U+10FFFF). Shared by Compile
 * (inline sources, all bytes at once) and PutSource (chunk by chunk), so both
 * accept and refuse exactly the same bytes with the same words.
 *
 * A refusal names the offending byte and its line and column, and can be handed
 * to the client as the trailing metadata `kiln-diagnostics-bin` (kiln.proto):
 * kilnd_source_check_diagnostics() packs it as a DiagnosticList.
 *
 * Not thread-safe; one checker per source. */
#ifndef KILN_DAEMON_SOURCE_CHECK_H
#define KILN_DAEMON_SOURCE_CHECK_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "base/arena.h"
#include "base/status.h"

typedef struct kilnd_source_check_s {
  int declared; /* kiln.v1.SourceFormat as the client sent it */
  int format;   /* decided: MLIR_TEXT or MLIR_BYTECODE; 0 until known */
  unsigned char head[4];
  size_t n_head;
  /* UTF-8 state, carried across chunks. */
  unsigned need;        /* continuation bytes still expected */
  unsigned char lo, hi; /* bounds of the next continuation byte */
  uint64_t seen;        /* bytes fed so far */
  uint64_t line;        /* 1-based line of the next byte (text only) */
  uint64_t line_start;  /* offset of that line's first byte */
  /* The first problem; once set, the checker only repeats it. */
  bool failed;
  uint64_t bad_at;
  uint64_t bad_line, bad_column;
  char problem[256];      /* for the status message */
  char diag_message[256]; /* the same without the position, for the diagnostic */
} kilnd_source_check_t;

/* Whether p[0, len) is UTF-8 text without a NUL byte, as protobuf requires of a
 * string field (and kiln of MLIR text); *out_bad_at gets the offset of the first
 * bad byte (len when the text ends inside a sequence). */
bool kilnd_text_is_utf8(const void *p, size_t len, size_t *out_bad_at);

void kilnd_source_check_init(kilnd_source_check_t *check, int declared_format);

/* Feeds the next `len` bytes. INVALID_ARGUMENT, prefixed with `what` (e.g.
 * "PutSource: source <digest> (model.mlir)"), as soon as they contradict the
 * declared format or are neither text nor bytecode. */
KILN_MUST_USE kiln_status_t kilnd_source_check_feed(kilnd_source_check_t *check, const void *data, size_t len,
                                                    const char *what);

/* After the last byte: the same checks for an input that ended (a truncated
 * UTF-8 sequence, a source shorter than the magic that claims bytecode); then
 * check->format is decided. */
KILN_MUST_USE kiln_status_t kilnd_source_check_finish(kilnd_source_check_t *check, const char *what);

/* The problem as a packed kiln.v1.DiagnosticList (one error at `file`'s line and
 * column), in `arena`; NULL with *out_len 0 when there was none. */
const uint8_t *kilnd_source_check_diagnostics(const kilnd_source_check_t *check, const char *file,
                                              kiln_arena_t *arena, size_t *out_len);

#endif /* KILN_DAEMON_SOURCE_CHECK_H */
