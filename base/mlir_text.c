/* The lexical normal form of MLIR text (mlir_text.h). One pass over the bytes;
 * the output is written in pieces as they are decided, and the digest hashes the
 * finished form. */
#include "base/mlir_text.h"

#include <stdbool.h>
#include <stdint.h>
#include <string.h>

#include "base/alloc.h"
#include "base/strmap.h"

#define PREFIX "kiln-mlir-normal/1\n"

static bool word_char(unsigned char c) {
  return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_' || c == '$' ||
         c == '.';
}

/* The characters of an SSA, block or symbol name after its sigil (MLIR's
 * suffix-id: letters, digits and $._-). */
static bool id_char(unsigned char c) { return word_char(c) || c == '-'; }

/* First-appearance numbering of names: open addressing over (offset, length)
 * slices of the input. */
typedef struct names_s {
  const char *base;
  size_t *start, *len;
  uint32_t *number; /* 0: empty slot; else number + 1 */
  size_t cap, count;
} names_t;

static void names_grow(names_t *t);

static uint32_t names_number(names_t *t, size_t start, size_t len) {
  if ((t->count + 1) * 2 > t->cap) names_grow(t);
  size_t i = (size_t)(kiln_hash_bytes(t->base + start, len) & (t->cap - 1));
  for (;; i = (i + 1) & (t->cap - 1)) {
    if (!t->number[i]) {
      t->start[i] = start;
      t->len[i] = len;
      t->number[i] = (uint32_t)++t->count;
      return t->number[i] - 1;
    }
    if (t->len[i] == len && memcmp(t->base + t->start[i], t->base + start, len) == 0) return t->number[i] - 1;
  }
}

static void names_grow(names_t *t) {
  names_t old = *t;
  t->cap = old.cap ? old.cap * 2 : 64;
  t->start = kiln_calloc(t->cap, sizeof *t->start);
  t->len = kiln_calloc(t->cap, sizeof *t->len);
  t->number = kiln_calloc(t->cap, sizeof *t->number);
  for (size_t i = 0; i < old.cap; i++) {
    if (!old.number[i]) continue;
    size_t j = (size_t)(kiln_hash_bytes(old.base + old.start[i], old.len[i]) & (t->cap - 1));
    while (t->number[j]) j = (j + 1) & (t->cap - 1);
    t->start[j] = old.start[i];
    t->len[j] = old.len[i];
    t->number[j] = old.number[i];
  }
  kiln_free(old.start);
  kiln_free(old.len);
  kiln_free(old.number);
}

static void names_free(names_t *t) {
  kiln_free(t->start);
  kiln_free(t->len);
  kiln_free(t->number);
}

/* Index just past the string literal starting at `i` (a '"'), escapes included;
 * `n` if it never ends. */
static size_t string_end(const char *s, size_t i, size_t n) {
  for (i++; i < n; i++) {
    if (s[i] == '\\') {
      i++;
    } else if (s[i] == '"') {
      return i + 1;
    }
  }
  return n;
}

/* Index just past the balanced parenthesis group starting at `i` (a '('). */
static size_t group_end(const char *s, size_t i, size_t n) {
  int depth = 0;
  while (i < n) {
    if (s[i] == '"') {
      i = string_end(s, i, n);
      continue;
    }
    if (s[i] == '(') depth++;
    if (s[i] == ')' && --depth == 0) return i + 1;
    i++;
  }
  return n;
}

static size_t skip_space(const char *s, size_t i, size_t n) {
  while (i < n && (s[i] == ' ' || s[i] == '\t' || s[i] == '\n' || s[i] == '\r')) i++;
  return i;
}

/* `loc(` at i (after spaces)? Then the index past its group; else 0. */
static size_t loc_group(const char *s, size_t i, size_t n) {
  if (i + 3 > n || memcmp(s + i, "loc", 3) != 0 || (i + 3 < n && word_char((unsigned char)s[i + 3])))
    return 0;
  size_t j = skip_space(s, i + 3, n);
  return j < n && s[j] == '(' ? group_end(s, j, n) : 0;
}

void kiln_mlir_text_normalize(const void *data, size_t len, kiln_buf_t *out) {
  const char *s = data;
  size_t n = len;
  names_t values = {.base = s}, blocks = {.base = s};
  bool last_word = false; /* the output ends with a word character */
  size_t i = 0;
  while (i < n) {
    unsigned char c = (unsigned char)s[i];
    if (c == ' ' || c == '\t' || c == '\n' || c == '\r') {
      i++;
      continue;
    }
    if (c == '/' && i + 1 < n && s[i + 1] == '/') {
      while (i < n && s[i] != '\n') i++;
      continue;
    }
    if (c == '"') {
      size_t e = string_end(s, i, n);
      kiln_buf_append(out, s + i, e - i);
      last_word = false;
      i = e;
      continue;
    }
    if (c == '#' && i + 4 <= n && memcmp(s + i + 1, "loc", 3) == 0) {
      /* #locN = loc(...): a location alias definition goes whole; a use of one
       * sits inside a loc(...) that goes anyway. */
      size_t e = i + 1;
      while (e < n && id_char((unsigned char)s[e])) e++;
      size_t j = skip_space(s, e, n);
      size_t g = j < n && s[j] == '=' ? loc_group(s, skip_space(s, j + 1, n), n) : 0;
      if (g) {
        i = g;
        continue;
      }
    }
    if (c == '%' || c == '^') {
      size_t e = i + 1;
      while (e < n && id_char((unsigned char)s[e])) e++;
      if (e > i + 1) {
        uint32_t k = names_number(c == '%' ? &values : &blocks, i + 1, e - i - 1);
        kiln_buf_appendf(out, "%c%u", c, (unsigned)k);
        last_word = true;
        i = e;
        continue;
      }
    }
    if (c == '@' || c == '#' || c == '!') {
      /* a symbol or alias name, kept whole (its '-' is not punctuation) */
      size_t e = i + 1;
      while (e < n && id_char((unsigned char)s[e])) e++;
      kiln_buf_append(out, s + i, e - i);
      last_word = e > i + 1 && word_char((unsigned char)s[e - 1]);
      i = e;
      continue;
    }
    if (word_char(c)) {
      size_t g = loc_group(s, i, n);
      if (g) {
        i = g;
        continue;
      }
      size_t e = i;
      while (e < n && word_char((unsigned char)s[e])) e++;
      if (last_word) kiln_buf_append_char(out, ' ');
      kiln_buf_append(out, s + i, e - i);
      last_word = true;
      i = e;
      continue;
    }
    kiln_buf_append_char(out, (char)c);
    last_word = false;
    i++;
  }
  names_free(&values);
  names_free(&blocks);
}

void kiln_mlir_text_digest(const void *data, size_t len, kiln_digest_hex_t *out) {
  kiln_digest_t d;
  if (len >= 4 && memcmp(data, "ML\xefR", 4) == 0) {
    kiln_digest_of(data, len, &d);
  } else {
    kiln_buf_t form;
    kiln_buf_init(&form);
    kiln_buf_append_str(&form, PREFIX);
    kiln_mlir_text_normalize(data, len, &form);
    kiln_digest_of(form.data, form.len, &d);
    kiln_buf_deinit(&form);
  }
  kiln_digest_to_hex(&d, out);
}
