/* Listen addresses: parsing, and a preflight that turns gRPC's silent behaviours
 * into clear errors. gRPC reports a failed bind only as "port 0", and for a unix
 * socket it unlinks whatever is at the path, so a second daemon would quietly
 * steal the first one's socket. The preflight binds the TCP address itself to get
 * the real errno, and connects to an existing unix socket to see if it is alive.
 * Loop thread only (start-up).
 */
#ifndef KILN_DAEMON_LISTEN_H
#define KILN_DAEMON_LISTEN_H

#include <stdbool.h>

#include "base/status.h"

typedef struct kilnd_listen_addr_s {
  bool is_unix;
  char *host; /* TCP: host name or address, brackets stripped */
  int port;   /* TCP: 0..65535 */
  char *path; /* unix: socket path */
} kilnd_listen_addr_t;

/* Parses "HOST:PORT", "[IPV6]:PORT" or "unix:PATH". INVALID_ARGUMENT naming the
 * text and the accepted forms. */
KILN_MUST_USE kiln_status_t kilnd_listen_parse(const char *text, kilnd_listen_addr_t *out_addr);

struct addrinfo;

/* getaddrinfo for binding a TCP `addr` (passive, stream, numeric port): its return
 * value (0, or an EAI_ code for gai_strerror); on 0 the caller freeaddrinfo()s
 * *out_res. */
int kilnd_listen_addrinfo(const kilnd_listen_addr_t *addr, struct addrinfo **out_res);

/* Fails with UNAVAILABLE when the address is in use (naming it), or with the
 * errno's code when it cannot be bound at all (no such address, bad path). */
KILN_MUST_USE kiln_status_t kilnd_listen_preflight(const kilnd_listen_addr_t *addr);

/* The gRPC server address for `addr` ("127.0.0.1:0", "[::1]:7477", "unix:/p").
 * Owned by the caller (kiln_free). */
char *kilnd_listen_grpc_target(const kilnd_listen_addr_t *addr);

/* The address clients should use, with `bound_port` replacing a port of 0. Owned
 * by the caller (kiln_free). */
char *kilnd_listen_client_address(const kilnd_listen_addr_t *addr, int bound_port);

/* True for a TCP address only this host can reach: 127.0.0.0/8, ::1 (or a v4-mapped
 * 127.x) or "localhost". False for unix sockets, wildcards and anything else. */
bool kilnd_listen_is_loopback(const kilnd_listen_addr_t *addr);

void kilnd_listen_addr_deinit(kilnd_listen_addr_t *addr);

#endif /* KILN_DAEMON_LISTEN_H */
