/* PEM files (certificates, keys, CA bundles) read for TLS, by kilnd and by the CLI
 * alike. Only the text is read here; parsing is OpenSSL's or gRPC's.
 * Thread-safe: no shared state.
 */
#ifndef KILN_BASE_PEM_H
#define KILN_BASE_PEM_H

#include "base/status.h"

/* Largest PEM file read (a certificate chain or CA bundle is far smaller). */
#define KILN_PEM_MAX_BYTES (1u << 20)

/* Reads `path`, named `what` in messages (a setting or option such as "tls-key"),
 * into *out_text (NUL-terminated, kiln_malloc'd: free with kiln_pem_free, which
 * wipes it, since it may be a private key). The read buffers are wiped too. Errors
 * name `what` and the path: the errno of open or read; INVALID_ARGUMENT for an
 * empty file, one over KILN_PEM_MAX_BYTES, or text without a "-----BEGIN " line. */
KILN_MUST_USE kiln_status_t kiln_pem_read(const char *what, const char *path, char **out_text);

/* Wipes and frees text from kiln_pem_read. NULL is a no-op. */
void kiln_pem_free(char *text);

#endif /* KILN_BASE_PEM_H */
