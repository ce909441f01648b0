/* The source format checker (see source_check.h). */
#include "daemon/source_check.h"

#include <stdio.h>
#include <string.h>

#include "kiln/v1/kiln.pb-c.h"

static const unsigned char BYTECODE_MAGIC[4] = {'M', 'L', 0xef, 'R'};

void kilnd_source_check_init(kilnd_source_check_t *check, int declared_format) {
  memset(check, 0, sizeof *check);
  check->declared = declared_format;
  check->line = 1;
  check->lo = 0x80;
  check->hi = 0xbf;
}

static KILN_MUST_USE kiln_status_t refusal(const kilnd_source_check_t *check, const char *what) {
  return KILN_STATUS(KILN_STATUS_INVALID_ARGUMENT, "%s: %s", what, check->problem);
}

/* Records the first problem: at byte `at` (line and column when text). */
static KILN_MUST_USE kiln_status_t fail(kilnd_source_check_t *check, uint64_t at, uint64_t line,
                                        uint64_t column, const char *problem, const char *what) {
  check->failed = true;
  check->bad_at = at;
  check->bad_line = line;
  check->bad_column = column;
  snprintf(check->problem, sizeof check->problem, "%s", problem);
  snprintf(check->diag_message, sizeof check->diag_message, "%s", problem);
  return refusal(check, what);
}

/* Counts lines in p[0, n): the position of byte p[n] afterwards. */
static void advance_lines(kilnd_source_check_t *check, const unsigned char *p, size_t n, uint64_t base) {
  const unsigned char *at = p, *end = p + n;
  while ((at = memchr(at, '\n', (size_t)(end - at))) != NULL) {
    at++;
    check->line++;
    check->line_start = base + (uint64_t)(at - p);
  }
}

/* UTF-8 over p[0, len); returns the offset of the first bad byte, or len. */
static size_t utf8_scan(kilnd_source_check_t *c, const unsigned char *p, size_t len, bool *bad) {
  size_t i = 0;
  *bad = false;
  while (i < len) {
    if (c->need == 0) {
      /* ASCII runs without NULs, eight bytes at a time (a word with a high bit
       * or a zero byte goes byte by byte). */
      while (i + 8 <= len) {
        uint64_t w;
        memcpy(&w, p + i, 8);
        uint64_t zero_byte = (w - 0x0101010101010101ull) & ~w & 0x8080808080808080ull;
        if ((w & 0x8080808080808080ull) || zero_byte) break;
        i += 8;
      }
      if (i == len) break;
      unsigned char b = p[i];
      if (b < 0x80) {
        if (b == 0) break; /* NUL: not text */
        i++;
        continue;
      }
      c->lo = 0x80, c->hi = 0xbf;
      if (b >= 0xc2 && b <= 0xdf)
        c->need = 1;
      else if (b == 0xe0)
        c->need = 2, c->lo = 0xa0;
      else if ((b >= 0xe1 && b <= 0xec) || b == 0xee || b == 0xef)
        c->need = 2;
      else if (b == 0xed)
        c->need = 2, c->hi = 0x9f;
      else if (b == 0xf0)
        c->need = 3, c->lo = 0x90;
      else if (b >= 0xf1 && b <= 0xf3)
        c->need = 3;
      else if (b == 0xf4)
        c->need = 3, c->hi = 0x8f;
      else
        break;
      i++;
    } else {
      unsigned char b = p[i];
      if (b < c->lo || b > c->hi) break;
      c->need--;
      c->lo = 0x80, c->hi = 0xbf;
      i++;
    }
  }
  if (i < len) {
    *bad = true;
    return i;
  }
  return len;
}

bool kilnd_text_is_utf8(const void *p, size_t len, size_t *out_bad_at) {
  kilnd_source_check_t c;
  memset(&c, 0, sizeof c);
  bool bad = false;
  size_t at = utf8_scan(&c, p, len, &bad);
  *out_bad_at = bad ? at : len;
  return !bad && c.need == 0;
}

static KILN_MUST_USE kiln_status_t check_head(kilnd_source_check_t *check, bool at_end, const char *what) {
  if (check->format || (check->n_head < sizeof check->head && !at_end)) return NULL;
  bool magic = check->n_head == sizeof check->head && memcmp(check->head, BYTECODE_MAGIC, 4) == 0;
  if (magic) {
    if (check->declared == KILN__V1__SOURCE_FORMAT__SOURCE_FORMAT_MLIR_TEXT) {
      return fail(check, 0, 0, 0,
                  "format is MLIR_TEXT but the bytes start with the MLIR bytecode magic \"ML\\xefR\"; send "
                  "MLIR_BYTECODE or UNSPECIFIED",
                  what);
    }
    check->format = KILN__V1__SOURCE_FORMAT__SOURCE_FORMAT_MLIR_BYTECODE;
    return NULL;
  }
  if (check->declared == KILN__V1__SOURCE_FORMAT__SOURCE_FORMAT_MLIR_BYTECODE) {
    return fail(check, 0, 1, 1,
                "format is MLIR_BYTECODE but the bytes do not start with the MLIR bytecode magic "
                "\"ML\\xefR\"; send MLIR_TEXT or UNSPECIFIED",
                what);
  }
  check->format = KILN__V1__SOURCE_FORMAT__SOURCE_FORMAT_MLIR_TEXT; /* provisional until the end */
  return NULL;
}

static KILN_MUST_USE kiln_status_t not_text(kilnd_source_check_t *check, uint64_t at, bool nul,
                                            const char *what) {
  char problem[200];
  uint64_t column = at - check->line_start + 1;
  snprintf(problem, sizeof problem,
           "byte %llu is %s (line %llu, column %llu), so the bytes are neither MLIR text nor MLIR bytecode "
           "(which starts with \"ML\\xefR\")",
           (unsigned long long)at, nul ? "a NUL" : "not valid UTF-8", (unsigned long long)check->line,
           (unsigned long long)column);
  kiln_status_t st = fail(check, at, check->line, column, problem, what);
  /* The diagnostic carries the position itself. */
  snprintf(check->diag_message, sizeof check->diag_message,
           "byte %llu is %s: the source is neither MLIR text nor MLIR bytecode", (unsigned long long)at,
           nul ? "a NUL" : "not valid UTF-8");
  return st;
}

kiln_status_t kilnd_source_check_feed(kilnd_source_check_t *check, const void *data, size_t len,
                                      const char *what) {
  if (check->failed) return refusal(check, what);
  const unsigned char *p = data;
  uint64_t base = check->seen;
  if (check->n_head < sizeof check->head) {
    size_t take = sizeof check->head - check->n_head < len ? sizeof check->head - check->n_head : len;
    memcpy(check->head + check->n_head, p, take);
    check->n_head += take;
  }
  check->seen += len;
  kiln_status_t st = check_head(check, false, what);
  if (st) return st;
  /* Bytecode needs no more checks; until the head is known, text is assumed. */
  if (check->format == KILN__V1__SOURCE_FORMAT__SOURCE_FORMAT_MLIR_BYTECODE) return NULL;
  bool bad = false;
  size_t good = utf8_scan(check, p, len, &bad);
  advance_lines(check, p, good, base);
  if (bad) return not_text(check, base + good, p[good] == 0 && check->need == 0, what);
  return NULL;
}

kiln_status_t kilnd_source_check_finish(kilnd_source_check_t *check, const char *what) {
  if (check->failed) return refusal(check, what);
  kiln_status_t st = check_head(check, true, what);
  if (st) return st;
  if (check->format == KILN__V1__SOURCE_FORMAT__SOURCE_FORMAT_MLIR_TEXT && check->need) {
    return not_text(check, check->seen, false, what); /* a multi-byte sequence cut off by the end */
  }
  return NULL;
}

const uint8_t *kilnd_source_check_diagnostics(const kilnd_source_check_t *check, const char *file,
                                              kiln_arena_t *arena, size_t *out_len) {
  *out_len = 0;
  if (!check->failed) return NULL;
  Kiln__V1__SourceLocation loc = KILN__V1__SOURCE_LOCATION__INIT;
  loc.file = (char *)(file ? file : "");
  loc.line = check->bad_line > UINT32_MAX ? 0 : (uint32_t)check->bad_line;
  loc.column = check->bad_column > UINT32_MAX ? 0 : (uint32_t)check->bad_column;
  Kiln__V1__Diagnostic diag = KILN__V1__DIAGNOSTIC__INIT;
  diag.severity = KILN__V1__SEVERITY__SEVERITY_ERROR;
  diag.message = (char *)check->diag_message;
  diag.location = &loc;
  Kiln__V1__Diagnostic *items[1] = {&diag};
  Kiln__V1__DiagnosticList list = KILN__V1__DIAGNOSTIC_LIST__INIT;
  list.n_diagnostics = 1;
  list.diagnostics = items;
  size_t len = protobuf_c_message_get_packed_size(&list.base);
  uint8_t *out = kiln_arena_alloc(arena, len ? len : 1);
  *out_len = protobuf_c_message_pack(&list.base, out);
  return out;
}
