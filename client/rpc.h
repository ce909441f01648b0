/* The CLI's gRPC client: one channel to kilnd and blocking unary calls on it.
 * The CLI is single-threaded; none of this is shared. Not thread-safe.
 */
#ifndef KILN_CLIENT_RPC_H
#define KILN_CLIENT_RPC_H

#include <protobuf-c/protobuf-c.h>
#include <stdint.h>

#include "base/status.h"

typedef struct kiln_client_s kiln_client_t;

/* Opens a channel to `address` (HOST:PORT, [IPV6]:PORT or unix:PATH); no traffic
 * until the first call. Each call gets `timeout_ms` as its deadline; messages up to
 * `max_message_bytes` are accepted. Owned by the caller. */
kiln_status_t kiln_client_create(const char *address, int64_t timeout_ms,
                                 uint64_t max_message_bytes, kiln_client_t **out_client);
void kiln_client_destroy(kiln_client_t *client);

/* Changes the deadline of later calls. */
void kiln_client_set_timeout(kiln_client_t *client, int64_t timeout_ms);
/* The deadline of calls, in milliseconds. */
int64_t kiln_client_timeout(const kiln_client_t *client);

/* The address the client dials. Borrowed. */
const char *kiln_client_address(const kiln_client_t *client);

/* Calls `method` ("/kiln.v1.Kiln/GetServerInfo") with `request` and decodes the
 * answer as `response_descriptor`. On success *out_response is owned by the caller
 * (free with protobuf_c_message_free_unpacked(msg, NULL)). A failed call returns
 * the server's gRPC status and message (UNAVAILABLE when kilnd cannot be reached,
 * DEADLINE_EXCEEDED after timeout_ms); an undecodable answer is INTERNAL. */
kiln_status_t kiln_client_unary(kiln_client_t *client, const char *method,
                                const ProtobufCMessage *request,
                                const ProtobufCMessageDescriptor *response_descriptor,
                                ProtobufCMessage **out_response);

#endif /* KILN_CLIENT_RPC_H */
