/* Streaming calls (stream.h) over the gRPC C core: the four batches of a stream
 * (close, send, receive, status) and the handler-facing API. The call's life and
 * the rules it keeps are in server.c's design note; a stream is a call of
 * server.c's (server_impl.h) whose end is counted and logged like a unary one.
 * Loop thread only. */
#include "daemon/stream.h"

#include <grpc/byte_buffer.h>
#include <grpc/grpc.h>
#include <inttypes.h>
#include <stdbool.h>
#include <string.h>

#include "base/alloc.h"
#include "base/log.h"
#include "daemon/client_text.h"
#include "daemon/rpc.h"
#include "daemon/server_impl.h"
#include "proto/wire.h"

static void stream_maybe_free(kilnd_stream_t *s);

static bool stream_start_batch(kilnd_stream_t *s, stream_op_t *op, const grpc_op *ops, size_t n) {
  op->pending = true;
  grpc_call_error err = grpc_call_start_batch(s->call->call, ops, n, &op->tag, NULL);
  if (err == GRPC_CALL_OK) return true;
  op->pending = false;
  kiln_log(KILN_LOG_ERROR, "rpc_batch_failed", "method=%s grpc_call_error=%d", s->call->method->path,
           (int)err);
  return false;
}

static void stream_start_status(kilnd_stream_t *s) {
  call_t *c = s->call;
  grpc_op ops[2];
  memset(ops, 0, sizeof ops);
  size_t n = 0;
  if (!s->md_sent) kilnd_call_initial_metadata(&ops[n++], c);
  kilnd_call_status_op(&ops[n++], c);
  s->status_started = true;
  s->md_sent = true;
  if (!stream_start_batch(s, &s->status_op, ops, n)) {
    /* The call is unusable: cancel it so the close batch completes and it is freed. */
    s->status_failed = true;
    grpc_call_cancel(c->call, NULL);
  }
}

/* The close batch completed: the call is over on the wire. Before finish that
 * means a cancel. */
static void on_stream_closed(kilnd_server_t *server, tag_t *tag, bool ok) {
  (void)server;
  kilnd_stream_t *s = ((stream_op_t *)tag)->stream;
  s->close_op.pending = false;
  if (!ok || s->call->client_cancelled) {
    s->cancelled = true;
    if (!s->finished && s->on_cancel) {
      kilnd_stream_cancel_fn_t fn = s->on_cancel;
      s->on_cancel = NULL; /* once */
      s->busy++;
      fn(s, s->cancel_user);
      s->busy--;
    }
  }
  stream_maybe_free(s);
}

static void on_stream_sent(kilnd_server_t *server, tag_t *tag, bool ok) {
  (void)server;
  kilnd_stream_t *s = ((stream_op_t *)tag)->stream;
  s->send_op.pending = false;
  grpc_byte_buffer_destroy(s->send_buf);
  s->send_buf = NULL;
  if (ok) {
    s->call->response_bytes += s->send_size;
    s->msgs_out++;
  }
  kilnd_stream_sent_fn_t fn = s->on_sent;
  s->on_sent = NULL;
  if (!s->finished && fn) {
    s->busy++;
    fn(s, ok, s->sent_user);
    s->busy--;
  }
  /* finish waited for this send. */
  if (s->finished && !s->status_started && !s->send_op.pending) stream_start_status(s);
  stream_maybe_free(s);
}

static void on_stream_received(kilnd_server_t *server, tag_t *tag, bool ok) {
  (void)server;
  kilnd_stream_t *s = ((stream_op_t *)tag)->stream;
  call_t *c = s->call;
  s->recv_op.pending = false;
  grpc_byte_buffer *payload = s->recv_buf;
  s->recv_buf = NULL;
  kilnd_stream_recv_fn_t fn = s->on_message;
  s->on_message = NULL;
  if (s->finished || !fn) {
    if (payload) grpc_byte_buffer_destroy(payload);
    stream_maybe_free(s);
    return;
  }
  kiln_arena_t *arena = &c->arena;
  if (!s->recv_in_call_arena) {
    /* The previous message's memory goes; a long upload stays at one chunk. */
    kiln_arena_deinit(&s->recv_arena);
    kiln_arena_init(&s->recv_arena);
    arena = &s->recv_arena;
  }
  ProtobufCMessage *message = NULL;
  kiln_status_t status = NULL;
  if (!ok || s->cancelled) {
    status = KILN_STATUS(KILN_STATUS_CANCELLED, "%s: the call was cancelled", c->method->path);
  } else if (payload) {
    size_t bytes = 0;
    status = kilnd_call_decode(c, payload, s->recv_descriptor, arena, &bytes, &message);
    c->request_bytes += bytes;
    s->msgs_in++;
  }
  if (payload) grpc_byte_buffer_destroy(payload);
  s->busy++;
  fn(s, message, status, s->recv_user);
  s->busy--;
  stream_maybe_free(s);
}

static void on_stream_status_sent(kilnd_server_t *server, tag_t *tag, bool ok) {
  (void)server;
  kilnd_stream_t *s = ((stream_op_t *)tag)->stream;
  s->status_op.pending = false;
  if (!ok) s->status_failed = true;
  /* A receive the handler left behind completes once the call is cancelled; the
   * client already has the status. */
  if (s->recv_op.pending) grpc_call_cancel(s->call->call, NULL);
  stream_maybe_free(s);
}

static void stream_maybe_free(kilnd_stream_t *s) {
  if (s->busy || !s->finished || !s->status_started) return;
  if (s->close_op.pending || s->send_op.pending || s->recv_op.pending || s->status_op.pending) {
    return;
  }
  call_t *c = s->call;
  kiln_status_code_t code = c->code;
  if ((s->cancelled || s->status_failed) && !s->aborted) code = KILN_STATUS_CANCELLED;
  kilnd_call_finished(c, code);
}

/* The server-streaming request arrived (into the call's arena): run the handler. */
static void on_stream_request(kilnd_stream_t *s, const ProtobufCMessage *message, kiln_status_t status,
                              void *user) {
  (void)user;
  call_t *c = s->call;
  s->recv_in_call_arena = false;
  if (!status && !message) {
    status = KILN_STATUS(KILN_STATUS_INVALID_ARGUMENT, "%s: the request message is missing", c->method->path);
  }
  if (status) {
    kilnd_stream_finish(s, status);
    return;
  }
  c->request = (ProtobufCMessage *)message;
  c->method->stream(kilnd_call_env(c), s, message);
}

void kilnd_stream_begin(call_t *c) {
  kilnd_stream_t *s = &c->stream;
  s->call = c;
  s->close_op = (stream_op_t){{on_stream_closed}, s, false};
  s->send_op = (stream_op_t){{on_stream_sent}, s, false};
  s->recv_op = (stream_op_t){{on_stream_received}, s, false};
  s->status_op = (stream_op_t){{on_stream_status_sent}, s, false};
  grpc_op op;
  memset(&op, 0, sizeof op);
  op.op = GRPC_OP_RECV_CLOSE_ON_SERVER;
  op.data.recv_close_on_server.cancelled = &c->client_cancelled;
  if (!stream_start_batch(s, &s->close_op, &op, 1)) s->cancelled = true;
  if (c->method->kind == KILND_METHOD_SERVER_STREAMING) {
    s->recv_in_call_arena = true;
    kiln_status_t st = kilnd_stream_recv(s, c->method->request_descriptor, on_stream_request, NULL);
    if (st) kilnd_stream_finish(s, st);
    return;
  }
  s->busy++;
  c->method->stream(kilnd_call_env(c), s, NULL);
  s->busy--;
  stream_maybe_free(s);
}

/* Why a send cannot start now (NULL: it can). */
static KILN_MUST_USE kiln_status_t send_refusal(kilnd_stream_t *s, const char *type, size_t size) {
  call_t *c = s->call;
  if (s->finished) {
    return KILN_STATUS(KILN_STATUS_FAILED_PRECONDITION, "%s: send after the stream was finished (daemon bug)",
                       c->method->path);
  }
  if (s->send_op.pending) {
    return KILN_STATUS(KILN_STATUS_FAILED_PRECONDITION,
                       "%s: a send is already outstanding; send the next message from the "
                       "previous one's callback (daemon bug)",
                       c->method->path);
  }
  uint64_t max = kilnd_call_max_message_bytes(c);
  if (size > max) {
    return KILN_STATUS(KILN_STATUS_RESOURCE_EXHAUSTED,
                       "%s: a %s of %zu bytes is over max-message-bytes (%" PRIu64 ")", c->method->path, type,
                       size, max);
  }
  return NULL;
}

static KILN_MUST_USE kiln_status_t send_buffer(kilnd_stream_t *s, grpc_byte_buffer *buf, size_t size,
                                               kilnd_stream_sent_fn_t on_sent, void *user);

kiln_status_t kilnd_stream_send(kilnd_stream_t *s, const ProtobufCMessage *message,
                                kilnd_stream_sent_fn_t on_sent, void *user) {
  size_t size = protobuf_c_message_get_packed_size(message);
  KILN_RETURN_IF_ERROR(send_refusal(s, message->descriptor->name, size));
  grpc_slice slice = grpc_slice_malloc(size);
  protobuf_c_message_pack(message, GRPC_SLICE_START_PTR(slice));
  grpc_byte_buffer *buf = grpc_raw_byte_buffer_create(&slice, 1);
  grpc_slice_unref(slice);
  return send_buffer(s, buf, size, on_sent, user);
}

kiln_status_t kilnd_stream_send_bytes(kilnd_stream_t *s, const uint8_t *head, size_t head_len, uint32_t field,
                                      void *data, size_t len, void (*release)(void *data),
                                      kilnd_stream_sent_fn_t on_sent, void *user) {
  /* head, then the field's key (wire type 2) and length, then the bytes. */
  uint8_t key_len[2 * KILN_WIRE_VARINT_MAX];
  size_t k = kiln_wire_put_key(key_len, field, KILN_WIRE_LEN);
  k += kiln_wire_put_varint(key_len + k, len);
  size_t size = head_len + k + len;
  kiln_status_t st = send_refusal(s, "message", size);
  if (st) {
    release(data);
    return st;
  }
  grpc_slice slices[2];
  slices[0] = grpc_slice_malloc(head_len + k);
  if (head_len) memcpy(GRPC_SLICE_START_PTR(slices[0]), head, head_len);
  memcpy(GRPC_SLICE_START_PTR(slices[0]) + head_len, key_len, k);
  slices[1] = grpc_slice_new_with_user_data(data, len, release, data);
  grpc_byte_buffer *buf = grpc_raw_byte_buffer_create(slices, 2);
  grpc_slice_unref(slices[0]);
  grpc_slice_unref(slices[1]); /* the byte buffer holds it; release runs when gRPC lets go */
  return send_buffer(s, buf, size, on_sent, user);
}

static void free_packed(void *data) { kiln_free(data); }

kiln_status_t kilnd_stream_send_packed(kilnd_stream_t *s, uint8_t *data, size_t len,
                                       kilnd_stream_sent_fn_t on_sent, void *user) {
  kiln_status_t st = send_refusal(s, "message", len);
  if (st) {
    kiln_free(data);
    return st;
  }
  grpc_slice slice = len ? grpc_slice_new_with_user_data(data, len, free_packed, data) : grpc_empty_slice();
  if (!len) kiln_free(data);
  grpc_byte_buffer *buf = grpc_raw_byte_buffer_create(&slice, 1);
  grpc_slice_unref(slice); /* the byte buffer holds it */
  return send_buffer(s, buf, len, on_sent, user);
}

static KILN_MUST_USE kiln_status_t send_buffer(kilnd_stream_t *s, grpc_byte_buffer *buf, size_t size,
                                               kilnd_stream_sent_fn_t on_sent, void *user) {
  call_t *c = s->call;
  s->send_buf = buf;
  s->send_size = size;
  grpc_op ops[2];
  memset(ops, 0, sizeof ops);
  size_t n = 0;
  if (!s->md_sent) kilnd_call_initial_metadata(&ops[n++], c);
  ops[n].op = GRPC_OP_SEND_MESSAGE;
  ops[n++].data.send_message.send_message = s->send_buf;
  s->on_sent = on_sent;
  s->sent_user = user;
  if (!stream_start_batch(s, &s->send_op, ops, n)) {
    grpc_byte_buffer_destroy(s->send_buf);
    s->send_buf = NULL;
    s->on_sent = NULL;
    return KILN_STATUS(KILN_STATUS_INTERNAL, "%s: gRPC refused the send", c->method->path);
  }
  s->md_sent = true;
  return NULL;
}

kiln_status_t kilnd_stream_recv(kilnd_stream_t *s, const ProtobufCMessageDescriptor *descriptor,
                                kilnd_stream_recv_fn_t on_message, void *user) {
  call_t *c = s->call;
  if (s->finished) {
    return KILN_STATUS(KILN_STATUS_FAILED_PRECONDITION,
                       "%s: receive after the stream was finished (daemon bug)", c->method->path);
  }
  if (s->recv_op.pending) {
    return KILN_STATUS(KILN_STATUS_FAILED_PRECONDITION, "%s: a receive is already outstanding (daemon bug)",
                       c->method->path);
  }
  grpc_op op;
  memset(&op, 0, sizeof op);
  op.op = GRPC_OP_RECV_MESSAGE;
  op.data.recv_message.recv_message = &s->recv_buf;
  s->recv_descriptor = descriptor;
  s->on_message = on_message;
  s->recv_user = user;
  if (!stream_start_batch(s, &s->recv_op, &op, 1)) {
    s->on_message = NULL;
    return KILN_STATUS(KILN_STATUS_INTERNAL, "%s: gRPC refused the receive", c->method->path);
  }
  return NULL;
}

bool kilnd_stream_on_cancel(kilnd_stream_t *s, kilnd_stream_cancel_fn_t fn, void *user) {
  s->on_cancel = s->cancelled ? NULL : fn; /* a cancel already reported is not repeated */
  s->cancel_user = s->cancelled ? NULL : user;
  return s->cancelled;
}

void kilnd_stream_finish(kilnd_stream_t *s, kiln_status_t status) {
  call_t *c = s->call;
  if (s->finished) {
    kiln_log_status(KILN_LOG_ERROR, "stream_finished_twice", status, "method=%s", c->method->path);
    kiln_status_free(status);
    return;
  }
  s->finished = true;
  s->on_sent = NULL;
  s->on_message = NULL;
  s->on_cancel = NULL;
  status = kilnd_status_for_client(status, c->request_id);
  c->code = kiln_status_code(status);
  c->message = kiln_arena_strdup(&c->arena, kiln_status_message(status));
  c->status_details = grpc_slice_from_copied_string(c->message);
  kiln_status_free(status);
  if (!s->send_op.pending) stream_start_status(s);
  stream_maybe_free(s);
}

const kilnd_call_ctx_t *kilnd_stream_ctx(const kilnd_stream_t *s) { return &s->call->ctx; }

uv_loop_t *kilnd_stream_loop(const kilnd_stream_t *s) { return kilnd_call_loop(s->call); }

void kilnd_stream_abort(kilnd_stream_t *s, kiln_status_code_t code, const char *message) {
  if (s->finished || s->cancelled) return;
  s->aborted = true;
  grpc_call_cancel_with_status(s->call->call, (grpc_status_code)code, message, NULL);
}
