/* Streaming calls: server-streaming (WatchJob, GetArtifact), client-streaming
 * (PutSource) and bidirectional (Recompile) methods over the gRPC C core,
 * implemented in stream.c over server.c's call record (server_impl.h).
 *
 * A streaming method's handler gets a kilnd_stream_t and drives it from the loop
 * thread with callbacks: at most one send and one receive outstanding at a time
 * (gRPC's rule), and the next send starts only from the previous send's callback,
 * which is what gives HTTP/2 flow control its back-pressure. The call ends when the
 * handler calls kilnd_stream_finish (exactly once); the server then sends the
 * status, counts and logs the call like a unary one and frees the stream after the
 * last callback has run.
 *
 * Cancellation (the client cancels, its deadline passes, the connection drops, or
 * the server drains past its timeout) is reported once through the on_cancel
 * callback; sends and receives then complete with ok = false (a receive with a
 * CANCELLED status), and the handler must still call kilnd_stream_finish. It is
 * noticed promptly even while the handler neither sends nor receives (a watcher
 * waiting for events): the server keeps a RECV_CLOSE_ON_SERVER outstanding for the
 * whole call.
 *
 * After kilnd_stream_finish no callback of the stream runs again (a send still in
 * flight completes silently before the status goes out), so the handler may free
 * its own state right after calling it; the stream itself must not be used after
 * finish. Callbacks may call send, recv and finish; the stream is never freed
 * while one of its callbacks runs.
 *
 * Draining: a SIGTERM stops new calls but lets open streams go on until
 * drain-timeout, then cancels them (on_cancel). The server exits only after every
 * stream has finished and been freed.
 *
 * Loop thread only, everything: handlers must not block (offload disk or SQLite
 * work to libuv's thread pool and continue from its completion callback).
 */
#ifndef KILN_DAEMON_STREAM_H
#define KILN_DAEMON_STREAM_H

#include <protobuf-c/protobuf-c.h>
#include <stdbool.h>
#include <stdint.h>
#include <uv.h>

#include "base/arena.h"
#include "base/status.h"
#include "daemon/rpc.h"

typedef struct kilnd_stream_s kilnd_stream_t;

/* Called when a send finished (ok: the message was handed to the transport; false:
 * the call is cancelled or broken). Not called after kilnd_stream_finish. */
typedef void (*kilnd_stream_sent_fn_t)(kilnd_stream_t *stream, bool ok, void *user);
/* Called with the next client message (decoded in a receive arena that is emptied
 * when the next message arrives, so it is valid until the next receive; copy what
 * must live longer), or with message NULL and status NULL at the end of the
 * client's messages (it half-closed). A failure has message NULL and a status:
 * CANCELLED when the call was cancelled, INVALID_ARGUMENT when the bytes are not a
 * `descriptor` message. The status is owned by the callback (free it, or pass it
 * to kilnd_stream_finish). Not called after kilnd_stream_finish. */
typedef void (*kilnd_stream_recv_fn_t)(kilnd_stream_t *stream, const ProtobufCMessage *message,
                                       kiln_status_t status, void *user);
/* Called once when the call is cancelled, before finish (see above). */
typedef void (*kilnd_stream_cancel_fn_t)(kilnd_stream_t *stream, void *user);

/* A streaming method's entry point (kilnd_method_t.stream, with kind set): runs on
 * the loop when the call arrives. For server-streaming methods `request` is the
 * decoded request, in the call's arena: it lives until the stream is freed. For
 * client- and bidi-streaming methods it is NULL (receive with kilnd_stream_recv).
 * The entry point must eventually call kilnd_stream_finish, at once or from a
 * later callback. */
typedef void (*kilnd_stream_fn_t)(const kilnd_rpc_env_t *env, kilnd_stream_t *stream,
                                  const ProtobufCMessage *request);

/* Sends one message (packed now; the caller may free it on return); the first send
 * also sends the initial metadata. Fails with RESOURCE_EXHAUSTED when it is over
 * max-message-bytes, FAILED_PRECONDITION when a send is already outstanding or the
 * stream was finished, INTERNAL if gRPC refuses the batch; on failure nothing was
 * sent and on_sent will not be called. On a cancelled call the send is accepted
 * and on_sent gets ok = false. */
KILN_MUST_USE kiln_status_t kilnd_stream_send(kilnd_stream_t *stream, const ProtobufCMessage *message,
                                              kilnd_stream_sent_fn_t on_sent, void *user);

/* Sends one message made of `head` (`head_len` bytes: every field but the last,
 * packed, copied now) followed by a bytes field `field` holding `data`, which is
 * NOT copied: gRPC writes it from where it is and calls release(data) once it is
 * done with it, on any thread (also when the send fails). The bulk path of
 * GetArtifact: a chunk goes from the read buffer to the socket with no copy.
 * Otherwise as kilnd_stream_send. */
KILN_MUST_USE kiln_status_t kilnd_stream_send_bytes(kilnd_stream_t *stream, const uint8_t *head,
                                                    size_t head_len, uint32_t field, void *data, size_t len,
                                                    void (*release)(void *data),
                                                    kilnd_stream_sent_fn_t on_sent, void *user);

/* Sends one message already packed: `data` (`len` bytes, kiln_malloc'd) is owned by
 * the stream from this call on, sent without a copy and freed once gRPC is done
 * with it (also when the send fails). For senders that queue messages as bytes
 * (Recompile's results). Otherwise as kilnd_stream_send. */
KILN_MUST_USE kiln_status_t kilnd_stream_send_packed(kilnd_stream_t *stream, uint8_t *data, size_t len,
                                                     kilnd_stream_sent_fn_t on_sent, void *user);

/* Receives the next client message as `descriptor`; on_message gets it. Fails with
 * FAILED_PRECONDITION when a receive is already outstanding or the stream was
 * finished, INTERNAL if gRPC refuses the batch (then on_message is not called).
 * Receiving on a server-streaming call yields the end of messages. */
KILN_MUST_USE kiln_status_t kilnd_stream_recv(kilnd_stream_t *stream,
                                              const ProtobufCMessageDescriptor *descriptor,
                                              kilnd_stream_recv_fn_t on_message, void *user);

/* Registers the cancellation callback (replaces an earlier one). Returns true when
 * the call was already cancelled: then `fn` is never called, and the handler ends
 * the call itself (kilnd_stream_finish). */
KILN_MUST_USE bool kilnd_stream_on_cancel(kilnd_stream_t *stream, kilnd_stream_cancel_fn_t fn, void *user);

/* Ends the call with `status` (owned; NULL = OK): sends it (with the initial
 * metadata if no message went) once any outstanding send has completed, then
 * counts and logs the call and frees the stream when every batch is done. A receive
 * still outstanding is ended by the server. Exactly once per stream (a second call
 * is logged as a bug and ignored). */
void kilnd_stream_finish(kilnd_stream_t *stream, kiln_status_t status);

/* The call's context: arena (lives as long as the stream: what a long stream
 * allocates there per message accumulates, so per-event memory of a WatchJob
 * belongs elsewhere), deadline, stopping flag. Its stopping flag and deadline may be
 * read on the thread pool (kilnd_call_should_stop); the arena may not. */
const kilnd_call_ctx_t *kilnd_stream_ctx(const kilnd_stream_t *stream);

/* The loop the stream runs on (for timers and uv_queue_work). */
uv_loop_t *kilnd_stream_loop(const kilnd_stream_t *stream);

/* Cancels the call from the server's side with `code` and `message` (copied by
 * gRPC; no server paths), for a client that stopped reading: the outstanding send
 * completes with ok = false and on_cancel runs as for a client's cancel; the
 * handler still calls kilnd_stream_finish. No-op once finished or cancelled. */
void kilnd_stream_abort(kilnd_stream_t *stream, kiln_status_code_t code, const char *message);

#endif /* KILN_DAEMON_STREAM_H */
