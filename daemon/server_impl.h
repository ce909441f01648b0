/* What server.c and stream.c share, and nothing else includes: a call's record
 * (unary and streaming), the completion-queue tag every batch carries, and the
 * few server functions the streaming half calls. Loop thread only, as all call
 * state. See server.c for the design. */
#ifndef KILN_DAEMON_SERVER_IMPL_H
#define KILN_DAEMON_SERVER_IMPL_H

#include <grpc/grpc.h>
#include <stdbool.h>
#include <stdint.h>
#include <uv.h>

#include "base/arena.h"
#include "base/status.h"
#include "daemon/rpc.h"
#include "daemon/server.h"
#include "daemon/stream.h"

typedef struct tag_s tag_t;
typedef void (*tag_fn_t)(kilnd_server_t *server, tag_t *tag, bool ok);
struct tag_s {
  tag_fn_t fn;
};

typedef struct event_s {
  tag_t *tag;
  bool ok;
} event_t;

typedef struct call_s call_t;

/* One batch of a streaming call; events carry &op->tag. */
typedef struct stream_op_s {
  tag_t tag; /* first member */
  kilnd_stream_t *stream;
  bool pending;
} stream_op_t;

/* The streaming half of a call (see the design note). Loop thread only. */
struct kilnd_stream_s {
  call_t *call;
  stream_op_t close_op, send_op, recv_op, status_op;
  bool md_sent;            /* initial metadata went with a send */
  bool finished;           /* kilnd_stream_finish was called */
  bool status_started;     /* the status batch was started */
  bool status_failed;      /* ...and did not complete, or could not start */
  bool cancelled;          /* the close batch reported a cancel */
  bool aborted;            /* kilnd_stream_abort: the server cancelled it, with its own code */
  int busy;                /* handler callbacks running: no free meanwhile */
  bool recv_in_call_arena; /* the server-streaming request */
  grpc_byte_buffer *send_buf;
  size_t send_size;
  grpc_byte_buffer *recv_buf;
  const ProtobufCMessageDescriptor *recv_descriptor;
  kiln_arena_t recv_arena; /* the last received message */
  kilnd_stream_sent_fn_t on_sent;
  void *sent_user;
  kilnd_stream_recv_fn_t on_message;
  void *recv_user;
  kilnd_stream_cancel_fn_t on_cancel;
  void *cancel_user;
  uint64_t msgs_in, msgs_out;
};

struct call_s {
  tag_t tag; /* first member: events carry &call->tag */
  kilnd_server_t *server;
  const kilnd_method_t *method; /* NULL for the catch-all */
  size_t method_index;
  grpc_call *call;
  gpr_timespec deadline;
  grpc_metadata_array request_md;
  grpc_byte_buffer *payload; /* registered methods: the request message */
  grpc_call_details details; /* catch-all: the method path */
  grpc_byte_buffer *response;
  grpc_slice status_details;
  int client_cancelled; /* written by RECV_CLOSE_ON_SERVER */
  bool auth_denied;     /* refused by authentication: its PERMISSION_DENIED stands */
  kiln_arena_t arena;
  ProtobufCMessage *request; /* decoded, in the arena */
  kilnd_call_ctx_t ctx;      /* what the handler sees of this call */
  uv_work_t work;            /* offloaded handlers run on libuv's thread pool */
  ProtobufCMessage *work_response;
  kiln_status_t work_status;
  int64_t start_ns;
  kiln_status_code_t code;
  const char *message; /* in the arena */
  size_t request_bytes;
  size_t response_bytes;
  /* [0] kiln-request-id, always; [1] kiln-diagnostics-bin (kilnd_call_set_diagnostics) */
  grpc_metadata trailing[2];
  size_t n_trailing;
  grpc_metadata initial[1]; /* kiln-request-id */
  char request_id[KILND_ID_MAX + 1];
  kilnd_stream_t stream; /* streaming methods only */
};

/* The call is over (its last batch completed): counted under `code`, logged and
 * freed; the server may then finish its shutdown. */
void kilnd_call_finished(call_t *c, kiln_status_code_t code);
/* The initial metadata every call sends first (kiln-request-id). */
void kilnd_call_initial_metadata(grpc_op *op, call_t *c);
/* The status op that ends every call: c->code, c->status_details unless OK, and
 * the trailing metadata (kiln-request-id, kiln-diagnostics-bin). */
void kilnd_call_status_op(grpc_op *op, call_t *c);
/* Checks (wire_check.h) and decodes one received message of `c` into `arena`;
 * *out_bytes gets its size. INVALID_ARGUMENT naming the method otherwise. */
KILN_MUST_USE kiln_status_t kilnd_call_decode(const call_t *c, grpc_byte_buffer *payload,
                                              const ProtobufCMessageDescriptor *descriptor,
                                              kiln_arena_t *arena, size_t *out_bytes,
                                              ProtobufCMessage **out_message);
/* What handlers see of the server, the loop, and max-message-bytes. */
const kilnd_rpc_env_t *kilnd_call_env(const call_t *c);
uv_loop_t *kilnd_call_loop(const call_t *c);
uint64_t kilnd_call_max_message_bytes(const call_t *c);

/* stream.c: starts a streaming call that just arrived (its close batch, then the
 * request of a server-streaming method or the handler at once). */
void kilnd_stream_begin(call_t *c);

#endif /* KILN_DAEMON_SERVER_IMPL_H */
