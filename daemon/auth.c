/* Bearer tokens and the role table (auth.h).
 *
 * Invariants: a kilnd_tokens_t is immutable once parsed (the server swaps whole
 * sets on SIGHUP, never edits one), holds digests and names only, and every
 * lookup visits every entry. Messages name lines, names and roles, never token
 * text.
 */
#include "daemon/auth.h"

#include <ctype.h>
#include <errno.h>
#include <openssl/crypto.h>
#include <stdbool.h>
#include <stdio.h>
#include <string.h>
#include <strings.h>

#include "base/alloc.h"
#include "base/buf.h"
#include "base/digest.h"
#include "daemon/rpc.h"

typedef struct token_s {
  char name[KILND_TOKEN_NAME_MAX + 1];
  kilnd_role_t role;
  kiln_digest_t digest; /* SHA-256 of the token text */
} token_t;

struct kilnd_tokens_s {
  token_t *items;
  size_t count;
};

static const char *const role_names[] = {"none", "read", "submit", "admin"};

const char *kilnd_role_name(kilnd_role_t role) {
  return (unsigned)role < sizeof role_names / sizeof role_names[0] ? role_names[role] : "?";
}

kilnd_role_t kilnd_auth_method_role(const char *path) {
  const kilnd_method_t *method = kilnd_rpc_method_find(path);
  if (method) return method->role;
  /* A kiln path outside the contract (a newer client's method, or a probe):
   * admins only, so nothing about it is learnt without the most trusted role. */
  if (strncmp(path, "/kiln.", 6) == 0) return KILND_ROLE_ADMIN;
  return KILND_ROLE_READ; /* not ours: any valid token learns UNIMPLEMENTED */
}

static bool name_char(char c) {
  return isalnum((unsigned char)c) || c == '.' || c == '_' || c == '@' || c == ':' || c == '-';
}

size_t kilnd_tokens_count(const kilnd_tokens_t *tokens) { return tokens ? tokens->count : 0; }

void kilnd_tokens_destroy(kilnd_tokens_t *tokens) {
  if (!tokens) return;
  /* Digests only, but scrub them anyway: a core dump need not carry them. */
  if (tokens->items) OPENSSL_cleanse(tokens->items, tokens->count * sizeof *tokens->items);
  kiln_free(tokens->items);
  kiln_free(tokens);
}

/* The next blank-separated field of [*p, end) into (*out, *out_len). */
static bool next_field(const char **p, const char *end, const char **out, size_t *out_len) {
  while (*p < end && (**p == ' ' || **p == '\t')) (*p)++;
  if (*p == end) return false;
  *out = *p;
  while (*p < end && **p != ' ' && **p != '\t') (*p)++;
  *out_len = (size_t)(*p - *out);
  return true;
}

kiln_status_t kilnd_tokens_parse(const char *text, size_t len, const char *source,
                                 kilnd_tokens_t **out_tokens) {
  *out_tokens = NULL;
  kilnd_tokens_t *set = kiln_calloc(1, sizeof *set);
  size_t cap = 0;
  size_t line_no = 0;
  const char *p = text, *end = text + len;
  kiln_status_t status = NULL;
  while (p < end && !status) {
    line_no++;
    const char *eol = memchr(p, '\n', (size_t)(end - p));
    const char *line_end = eol ? eol : end;
    if (line_end > p && line_end[-1] == '\r') line_end--;
    const char *q = p;
    p = eol ? eol + 1 : end;
    while (q < line_end && (*q == ' ' || *q == '\t')) q++;
    if (q == line_end || *q == '#') continue;
    const char *f[4];
    size_t fl[4];
    size_t n = 0;
    while (n < 4 && next_field(&q, line_end, &f[n], &fl[n])) n++;
    if (n != 3) {
      status = KILN_STATUS(KILN_STATUS_INVALID_ARGUMENT,
                           "%s:%zu: expected three fields `NAME ROLE TOKEN`, found %s", source, line_no,
                           n < 3 ? "fewer" : "more");
      break;
    }
    if (fl[0] > KILND_TOKEN_NAME_MAX) {
      status = KILN_STATUS(KILN_STATUS_INVALID_ARGUMENT, "%s:%zu: the name is longer than %d characters",
                           source, line_no, KILND_TOKEN_NAME_MAX);
      break;
    }
    for (size_t i = 0; i < fl[0] && !status; i++) {
      if (!name_char(f[0][i])) {
        status = KILN_STATUS(KILN_STATUS_INVALID_ARGUMENT,
                             "%s:%zu: the name '%.*s' has a character other than letters, digits "
                             "and . _ @ : -",
                             source, line_no, (int)fl[0], f[0]);
      }
    }
    if (status) break;
    kilnd_role_t role = KILND_ROLE_NONE;
    for (int r = KILND_ROLE_READ; r <= KILND_ROLE_ADMIN; r++) {
      if (strlen(role_names[r]) == fl[1] && memcmp(role_names[r], f[1], fl[1]) == 0) role = (kilnd_role_t)r;
    }
    if (role == KILND_ROLE_NONE) {
      status = KILN_STATUS(KILN_STATUS_INVALID_ARGUMENT,
                           "%s:%zu: unknown role '%.*s' (expected read, submit or admin)", source, line_no,
                           (int)(fl[1] > 32 ? 32 : fl[1]), f[1]);
      break;
    }
    if (fl[2] < KILND_TOKEN_MIN_LEN || fl[2] > KILND_TOKEN_MAX_LEN) {
      status =
          KILN_STATUS(KILN_STATUS_INVALID_ARGUMENT,
                      "%s:%zu: the token of '%.*s' is %zu characters; tokens are %d to %d "
                      "(generate one with `openssl rand -hex 32`)",
                      source, line_no, (int)fl[0], f[0], fl[2], KILND_TOKEN_MIN_LEN, KILND_TOKEN_MAX_LEN);
      break;
    }
    for (size_t i = 0; i < fl[2] && !status; i++) {
      if (f[2][i] < 0x21 || f[2][i] > 0x7e) {
        status = KILN_STATUS(KILN_STATUS_INVALID_ARGUMENT,
                             "%s:%zu: the token of '%.*s' has a character that is not visible ASCII", source,
                             line_no, (int)fl[0], f[0]);
      }
    }
    if (status) break;
    token_t t;
    memset(&t, 0, sizeof t);
    memcpy(t.name, f[0], fl[0]);
    t.role = role;
    kiln_digest_of(f[2], fl[2], &t.digest);
    for (size_t i = 0; i < set->count; i++) {
      if (kiln_digest_equal(&set->items[i].digest, &t.digest)) {
        status = KILN_STATUS(KILN_STATUS_INVALID_ARGUMENT,
                             "%s:%zu: the token of '%s' is the same as one of '%s' earlier in the file; "
                             "every token must be distinct",
                             source, line_no, t.name, set->items[i].name);
        break;
      }
    }
    if (status) break;
    if (set->count == cap) {
      cap = cap ? cap * 2 : 8;
      set->items = kiln_realloc(set->items, cap * sizeof *set->items);
    }
    set->items[set->count++] = t;
  }
  if (!status && set->count == 0) {
    status =
        KILN_STATUS(KILN_STATUS_INVALID_ARGUMENT,
                    "%s: no tokens (expected lines `NAME ROLE TOKEN`, ROLE read, submit or admin)", source);
  }
  if (status) {
    kilnd_tokens_destroy(set);
    return status;
  }
  *out_tokens = set;
  return NULL;
}

kiln_status_t kilnd_tokens_load(const char *path, kilnd_tokens_t **out_tokens) {
  *out_tokens = NULL;
  FILE *f = fopen(path, "rb");
  if (!f) {
    int err = errno;
    return KILN_STATUS_ERRNO(err, "token-file %s: cannot open it", path);
  }
  kiln_buf_t text;
  kiln_buf_init(&text);
  char chunk[4096];
  size_t n;
  bool too_big = false;
  while ((n = fread(chunk, 1, sizeof chunk, f)) > 0) {
    kiln_buf_append(&text, chunk, n);
    if (text.len > 16u << 20) {
      too_big = true;
      break;
    }
  }
  int read_err = ferror(f) ? errno : 0;
  fclose(f);
  kiln_status_t status = NULL;
  if (too_big) {
    status =
        KILN_STATUS(KILN_STATUS_INVALID_ARGUMENT, "token-file %s: over 16 MiB; is it the right file?", path);
  } else if (read_err) {
    status = KILN_STATUS_ERRNO(read_err, "token-file %s: cannot read it", path);
  } else {
    kiln_buf_t source;
    kiln_buf_init(&source);
    kiln_buf_appendf(&source, "token-file %s", path);
    status = kilnd_tokens_parse(text.data ? text.data : "", text.len, source.data, out_tokens);
    kiln_buf_deinit(&source);
  }
  if (text.data) OPENSSL_cleanse(text.data, text.len);
  kiln_buf_deinit(&text);
  OPENSSL_cleanse(chunk, sizeof chunk);
  return status;
}

kiln_status_t kilnd_tokens_authorize(const kilnd_tokens_t *tokens, const char *path, const char *value,
                                     size_t len, const char **out_name) {
  *out_name = NULL;
  kilnd_role_t needed = kilnd_auth_method_role(path);
  if (needed == KILND_ROLE_NONE) return NULL;
  if (!value) {
    return KILN_STATUS(KILN_STATUS_UNAUTHENTICATED,
                       "no valid bearer token: the call has no authorization metadata; kilnd "
                       "requires `authorization: Bearer <token>` (kiln: --token-file FILE or KILN_TOKEN)");
  }
  if (len < 7 || strncasecmp(value, "bearer ", 7) != 0) {
    return KILN_STATUS(KILN_STATUS_UNAUTHENTICATED,
                       "no valid bearer token: the authorization metadata is not `Bearer <token>`");
  }
  const char *token = value + 7;
  size_t token_len = len - 7;
  while (token_len && *token == ' ') token++, token_len--;
  kiln_digest_t digest;
  kiln_digest_of(token, token_len, &digest);
  const token_t *match = NULL;
  for (size_t i = 0; i < tokens->count; i++) {
    /* No early exit: every entry costs the same whether or not it matches. */
    int differ = CRYPTO_memcmp(tokens->items[i].digest.bytes, digest.bytes, sizeof digest.bytes);
    if (!differ) match = &tokens->items[i];
  }
  if (!match) {
    return KILN_STATUS(KILN_STATUS_UNAUTHENTICATED,
                       "no valid bearer token: the token is not one kilnd knows (not in its "
                       "token-file, or removed from it)");
  }
  if (match->role < needed) {
    return KILN_STATUS(KILN_STATUS_PERMISSION_DENIED, "token '%s' has role %s; %s needs role %s or higher",
                       match->name, kilnd_role_name(match->role), path, kilnd_role_name(needed));
  }
  *out_name = match->name;
  return NULL;
}
