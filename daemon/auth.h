/* Bearer tokens and roles: who may call which method.
 *
 * A token file (setting token-file) holds one token per line, `NAME ROLE TOKEN`:
 * NAME is the client identity the token stands for (1..64 of [A-Za-z0-9._@:-],
 * the job engine's fairness key and the log's client=), ROLE one of read, submit,
 * admin, TOKEN 16..4096 visible ASCII characters. Blank lines and lines whose
 * first non-blank is '#' are ignored. One NAME may have several tokens (rotation);
 * one TOKEN may not appear twice. A file without any token is refused.
 *
 * Only the tokens' SHA-256 digests are kept; a presented token is hashed and
 * compared with every entry in constant time (CRYPTO_memcmp, no early exit), so
 * neither the token, its length nor which entry matched leaks through timing.
 * Nothing here logs; no message ever contains a token.
 */
#ifndef KILN_DAEMON_AUTH_H
#define KILN_DAEMON_AUTH_H

#include <stddef.h>

#include "base/status.h"

/* Ordered: a role includes every lower one. */
typedef enum kilnd_role_e {
  KILND_ROLE_NONE = 0, /* the method needs no token (grpc.health.v1.Health) */
  KILND_ROLE_READ = 1,
  KILND_ROLE_SUBMIT = 2,
  KILND_ROLE_ADMIN = 3,
} kilnd_role_t;

#define KILND_TOKEN_MIN_LEN  16
#define KILND_TOKEN_MAX_LEN  4096
#define KILND_TOKEN_NAME_MAX 64

/* "read", "submit", "admin" ("none" for KILND_ROLE_NONE). Static. Thread-safe. */
const char *kilnd_role_name(kilnd_role_t role);

/* The role a call to `path` ("/kiln.v1.Kiln/Compile") needs, from the method
 * table (rpc.c): read for the read-only methods, submit for those that start or
 * change work, admin for cache administration, none for grpc.health.v1.Health;
 * read for a path outside the contracts (it answers UNIMPLEMENTED to any valid
 * token). Thread-safe. */
kilnd_role_t kilnd_auth_method_role(const char *path);

typedef struct kilnd_tokens_s kilnd_tokens_t;

/* Parses a token file's text (`len` bytes; `source` names it in errors, e.g. the
 * path). INVALID_ARGUMENT naming source:line and what is wrong (never the token
 * itself). On success *out_tokens is owned by the caller (kilnd_tokens_destroy).
 * Thread-safe. */
KILN_MUST_USE kiln_status_t kilnd_tokens_parse(const char *text, size_t len, const char *source,
                                               kilnd_tokens_t **out_tokens);

/* Reads and parses the file at `path` (blocking: start-up or the thread pool).
 * Errors name the setting token-file, the path and the errno or line. */
KILN_MUST_USE kiln_status_t kilnd_tokens_load(const char *path, kilnd_tokens_t **out_tokens);

/* How many tokens the set holds. Thread-safe for a set no one changes. */
size_t kilnd_tokens_count(const kilnd_tokens_t *tokens);

void kilnd_tokens_destroy(kilnd_tokens_t *tokens);

/* Decides a call to `path` whose `authorization` metadata is `value` (`len` bytes;
 * NULL when absent). OK when the method needs no token, or when value is
 * "Bearer <token>" for a token of a role at least the method's: then
 * *out_name (borrowed from `tokens`, valid until it is destroyed) is the token's
 * NAME, or NULL for a method that needs none. UNAUTHENTICATED "no valid bearer
 * token: ..." when it is missing, malformed or unknown; PERMISSION_DENIED naming
 * the token's name and role, the method and the role it needs. Thread-safe for a
 * set no one changes. */
KILN_MUST_USE kiln_status_t kilnd_tokens_authorize(const kilnd_tokens_t *tokens, const char *path,
                                                   const char *value, size_t len, const char **out_name);

#endif /* KILN_DAEMON_AUTH_H */
