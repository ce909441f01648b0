/* TLS and mutual TLS for kilnd's gRPC port: the certificate, key and client CA
 * files (settings tls-cert, tls-key, tls-client-ca), checked with OpenSSL when
 * they are read, and served to gRPC through a certificate-config fetcher, so a
 * reload (SIGHUP) changes what new connections get without touching the listener.
 *
 * The fetcher runs on gRPC's threads at every handshake; it takes `lock`, and
 * hands gRPC a new config only when a reload produced one since the last
 * handshake (a generation counter), so a handshake costs a mutex and a compare.
 * A reload that fails (unreadable file, no certificate, a key that does not match)
 * changes nothing: the previous files keep being served. Whether client
 * certificates are required is fixed at start-up (tls-client-ca set or not); a
 * reload replaces the CA's contents only.
 * Thread-safe (all functions), except destroy.
 */
#ifndef KILN_DAEMON_TLS_H
#define KILN_DAEMON_TLS_H

#include <grpc/grpc_security.h>
#include <stdbool.h>

#include "base/status.h"

typedef struct kilnd_tls_s kilnd_tls_t;

/* Reads and checks the files. All three NULL or "": *out_tls is NULL (plaintext)
 * and the result OK. INVALID_ARGUMENT for a half configuration (a certificate
 * without its key, or the reverse, or a client CA without both), naming the
 * settings; the errno's code or INVALID_ARGUMENT for a file that cannot be read or
 * holds no usable PEM, naming the setting and the path. The paths are copied.
 * On success *out_tls is owned by the caller. */
KILN_MUST_USE kiln_status_t kilnd_tls_create(const char *cert_file, const char *key_file,
                                             const char *client_ca_file, kilnd_tls_t **out_tls);

/* Server credentials that fetch from `tls` (owned by the caller: release them once
 * added to a server). `tls` must outlive every server they were added to. */
grpc_server_credentials *kilnd_tls_server_credentials(kilnd_tls_t *tls);

/* Reads the same files again (blocking: the thread pool). On success new
 * handshakes get them; on failure nothing changes and the status says which file
 * and why. */
KILN_MUST_USE kiln_status_t kilnd_tls_reload(kilnd_tls_t *tls);

/* True when client certificates are required (tls-client-ca). */
bool kilnd_tls_mutual(const kilnd_tls_t *tls);

/* "subject=... serial=... not_after=..." of the certificate being served, for
 * the log, into out[cap]. */
void kilnd_tls_describe(kilnd_tls_t *tls, char *out, size_t cap);

void kilnd_tls_destroy(kilnd_tls_t *tls);

#endif /* KILN_DAEMON_TLS_H */
