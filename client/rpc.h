/* The CLI's gRPC client: one channel to kilnd, blocking unary calls, and blocking
 * streaming calls (server-streaming reads, client-streaming writes, cancel) on it.
 * The CLI is single-threaded; none of this is shared. Not thread-safe.
 */
#ifndef KILN_CLIENT_RPC_H
#define KILN_CLIENT_RPC_H

#include <protobuf-c/protobuf-c.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "base/status.h"

typedef struct kiln_client_s kiln_client_t;

/* Opens a channel to `address` (HOST:PORT, [IPV6]:PORT or unix:PATH); no traffic
 * until the first call. Each call gets `timeout_ms` as its deadline; messages up to
 * `max_message_bytes` are accepted. Owned by the caller. */
KILN_MUST_USE kiln_status_t kiln_client_create(const char *address, int64_t timeout_ms,
                                               uint64_t max_message_bytes, kiln_client_t **out_client);

/* How the client reaches and proves itself to kilnd. Every field may be NULL/false;
 * all are borrowed for the create call only. */
typedef struct kiln_client_options_s {
  bool tls;                    /* TLS, verifying kilnd with gRPC's default roots */
  const char *tls_ca;          /* PEM CA file to verify kilnd with (implies tls) */
  const char *tls_cert;        /* PEM client certificate for mutual TLS (with tls_key) */
  const char *tls_key;         /* its PEM private key */
  const char *tls_server_name; /* the name kilnd's certificate must carry instead of the host */
  const char *token;           /* bearer token sent as `authorization` on every call */
} kiln_client_options_t;

/* kiln_client_create with TLS and a token. INVALID_ARGUMENT (or the errno's code)
 * naming the option and the file for files that cannot be read or are not PEM, a
 * certificate without its key, or a token with characters that metadata cannot
 * carry; nothing is dialled yet (a handshake failure comes from the first call,
 * UNAVAILABLE). */
KILN_MUST_USE kiln_status_t kiln_client_create_ex(const char *address, int64_t timeout_ms,
                                                  uint64_t max_message_bytes,
                                                  const kiln_client_options_t *options,
                                                  kiln_client_t **out_client);
void kiln_client_destroy(kiln_client_t *client);

/* Changes the deadline of later calls. */
/* Makes the channel try to connect now, whatever its reconnect backoff, and
 * waits up to `wait_ms` for it to be ready; true when it is. For a command that
 * calls again after kilnd went away. */
bool kiln_client_reconnect_now(kiln_client_t *client, int64_t wait_ms);

void kiln_client_set_timeout(kiln_client_t *client, int64_t timeout_ms);
/* The deadline of calls, in milliseconds. */
int64_t kiln_client_timeout(const kiln_client_t *client);

/* Every call sends the metadata x-request-id ("c-<12 hex, random per client>-<n>");
 * kilnd logs it with the call (request_id=). The id of the last call that failed
 * (a unary call, or a stream whose final status was read as a failure), or NULL
 * when none has. Borrowed, valid until the next call. */
const char *kiln_client_failed_request_id(const kiln_client_t *client);

/* Later calls carry `kiln-source-digest: SOURCE_DIGEST` (NULL or a malformed
 * digest: none), so an HTTP/2 proxy that hashes on it (deploy/haproxy) sends every
 * call about one model to the same kilnd, the one whose cache holds it. Commands
 * set it once they know the model: compile, explain, fetch/find --source. Call it
 * between calls, not while one is being started (the header is not copied). */
void kiln_client_set_route(kiln_client_t *client, const char *source_digest);

/* The address the client dials. Borrowed. */
const char *kiln_client_address(const kiln_client_t *client);

/* Calls `method` ("/kiln.v1.Kiln/GetServerInfo") with `request` and decodes the
 * answer as `response_descriptor`. On success *out_response is owned by the caller
 * (free with protobuf_c_message_free_unpacked(msg, NULL)). A failed call returns
 * the server's gRPC status and message (UNAVAILABLE when kilnd cannot be reached,
 * DEADLINE_EXCEEDED after timeout_ms); an undecodable answer is INTERNAL. */
KILN_MUST_USE kiln_status_t kiln_client_unary(kiln_client_t *client, const char *method,
                                              const ProtobufCMessage *request,
                                              const ProtobufCMessageDescriptor *response_descriptor,
                                              ProtobufCMessage **out_response);

/* ---- Streaming calls ----------------------------------------------------
 *
 * One kiln_client_stream_t is one call. Server-streaming (WatchJob, GetArtifact):
 * open with the request, then read until a read returns the end. Client-streaming
 * (PutSource): open with request NULL, write each message, then finish. Bidi
 * (Recompile): open with request NULL, interleave write_begin/write_poll and
 * bounded reads, half-close with write_begin(NULL), read to the end. Every
 * operation blocks the calling thread on the client's completion queue; the call's
 * deadline is the client's timeout when it is opened. A stream must be destroyed
 * before its client. */
typedef struct kiln_client_stream_s kiln_client_stream_t;

/* Starts a call to `method` ("/kiln.v1.Kiln/WatchJob"). With `request` non-NULL the
 * request is sent and the client's side closed at once (server-streaming); with
 * NULL the caller writes the messages (client-streaming). Returns the stream, owned
 * by the caller (kiln_client_stream_destroy). A call that could not start (the
 * server cannot be reached, ...) still returns a stream: the failure arrives, as a
 * gRPC status, from the first read or finish. */
kiln_client_stream_t *kiln_client_stream_open(kiln_client_t *client, const char *method,
                                              const ProtobufCMessage *request);

/* Reads the next server message as `descriptor`, waiting at most `wait_ms`
 * milliseconds (< 0: as long as the call's deadline allows). Exactly one of:
 *   - a message arrived: *out_message is set (owned by the caller, free with
 *     protobuf_c_message_free_unpacked(msg, NULL)); returns NULL;
 *   - wait_ms passed first: *out_message is NULL, *out_timed_out is true; returns
 *     NULL. The read stays pending: the next read goes on waiting for the same
 *     message (or cancel the stream);
 *   - the stream ended: *out_message is NULL, *out_timed_out false; returns the
 *     call's final status: NULL for OK, else the server's code and message
 *     (CANCELLED after kiln_client_stream_cancel, DEADLINE_EXCEEDED, UNAVAILABLE),
 *     INTERNAL for a message that does not decode. Later reads return the same
 *     outcome again (a fresh copy of the status). */
KILN_MUST_USE kiln_status_t kiln_client_stream_read(kiln_client_stream_t *stream,
                                                    const ProtobufCMessageDescriptor *descriptor,
                                                    int64_t wait_ms, ProtobufCMessage **out_message,
                                                    bool *out_timed_out);

/* A run of a bytes field's contents, borrowed from gRPC's receive buffers. */
typedef struct kiln_client_piece_s {
  const uint8_t *data;
  size_t len;
} kiln_client_piece_t;

/* kiln_client_stream_read for messages that carry bulk bytes (ArtifactChunk.data):
 * the bytes field numbered `bytes_field` is not copied into the message (it is
 * left empty there) but handed out as *out_pieces, *out_count runs that point into
 * the received buffers, in order, valid until the next read or the destroy. The
 * rest of the message is decoded as usual. A download then costs one copy (the
 * kernel's) instead of three. */
KILN_MUST_USE kiln_status_t kiln_client_stream_read_split(kiln_client_stream_t *stream,
                                                          const ProtobufCMessageDescriptor *descriptor,
                                                          uint32_t bytes_field, int64_t wait_ms,
                                                          ProtobufCMessage **out_message,
                                                          const kiln_client_piece_t **out_pieces,
                                                          size_t *out_count, bool *out_timed_out);

/* Sends one message (client-streaming or bidi) and waits until it was handed to
 * the transport. Returns true when it was; false when the call has already ended
 * (the server answered early, as PutSource does for a source it already has, or
 * failed it, or it was cancelled): stop writing and call kiln_client_stream_finish
 * (or read) to learn the outcome. `message` NULL half-closes the client's side. */
bool kiln_client_stream_write(kiln_client_stream_t *stream, const ProtobufCMessage *message);

/* Bidi streams (Recompile): a write that does not block. gRPC allows one write and
 * one read in flight on a call at the same time, so a write may be started while a
 * read is pending (a bounded read that timed out) and reads may go on while the
 * write waits for HTTP/2 flow control.
 *
 * write_begin starts sending `message` (packed at once: the caller may free it on
 * return), or half-closes the client's side when `message` is NULL. Returns false
 * without starting anything when the call has ended, the client's side is closed,
 * an earlier write failed, or a write is still pending (poll it first).
 *
 * write_poll waits at most `wait_ms` (< 0: without limit) for the pending write:
 * false when it is still pending (it stays so; poll again, or destroy the stream,
 * which cancels it); true when none is pending any more, with *out_ok (may be
 * NULL) saying whether every write so far was handed to the transport (false:
 * the call ended; a read returns its status). */
bool kiln_client_stream_write_begin(kiln_client_stream_t *stream, const ProtobufCMessage *message);
bool kiln_client_stream_write_poll(kiln_client_stream_t *stream, int64_t wait_ms, bool *out_ok);

/* Client-streaming: closes the client's side (if still open), then receives the
 * server's single response as `descriptor` and the call's status. On OK
 * *out_response is owned by the caller; otherwise returns the status (as
 * kiln_client_stream_read describes) and *out_response is NULL. */
KILN_MUST_USE kiln_status_t kiln_client_stream_finish(kiln_client_stream_t *stream,
                                                      const ProtobufCMessageDescriptor *descriptor,
                                                      ProtobufCMessage **out_response);

/* Cancels the call (the server sees CANCELLED); pending and later reads end with
 * CANCELLED unless the call had already ended. Idempotent. */
void kiln_client_stream_cancel(kiln_client_stream_t *stream);

/* A trailing metadata value of an ended call (after a read returned the end, or
 * after finish): the bytes (decoded for `-bin` keys) and their length in
 * *out_len; NULL when absent or the call has not ended. Borrowed until destroy. */
const void *kiln_client_stream_trailer(const kiln_client_stream_t *stream, const char *key, size_t *out_len);

/* Cancels the call if it has not ended, waits for its pending operations, frees
 * everything. NULL is a no-op. */
void kiln_client_stream_destroy(kiln_client_stream_t *stream);

#endif /* KILN_CLIENT_RPC_H */
