/* kilnd's gRPC server.
 *
 * Threads. One thread pumps the completion queue (grpc_completion_queue_next) and
 * hands every (tag, ok) event to the libuv loop through a locked array plus
 * uv_async_send; the loop drains the whole array per wake-up, because sends
 * coalesce. All call state is touched on the loop thread only, so it needs no
 * locks. gRPC calls made from the loop (start_batch, request_call) are thread-safe
 * by gRPC's contract.
 *
 * A call's life:
 *   ARMED    a request_call / request_registered_call is outstanding (one per
 *            method, plus a catch-all that answers UNIMPLEMENTED for anything else)
 *   ACTIVE   the call arrived: the method is re-armed, the request decoded, the
 *            handler run (on the loop, or for methods marked `offload` on libuv's
 *            thread pool, replying from the loop when it is done), and one batch
 *            sends metadata, the response and the status together with
 *            RECV_CLOSE_ON_SERVER
 *   freed    when that batch completes: counted in stats, logged, freed
 *
 * Streaming calls (kilnd_method_t.kind != UNARY; stream.h is their API) are
 * registered without GRPC_SRM_PAYLOAD_READ_INITIAL_BYTE_BUFFER and run as a small
 * state machine over four batches, each with its own tag (stream_op_t):
 *   close   RECV_CLOSE_ON_SERVER, started on arrival and outstanding for the whole
 *           call: it completes early only when the client cancels, its deadline
 *           passes, the connection drops or the server cancels (drain timeout),
 *           and then fires the handler's on_cancel once
 *   send    at most one SEND_MESSAGE (with SEND_INITIAL_METADATA the first time);
 *           the next send starts only from the previous one's callback
 *   recv    at most one RECV_MESSAGE; the message is decoded into a receive arena
 *           that is emptied before the next receive (a server-streaming call's
 *           request goes to the call's arena and lives as long as the call)
 *   status  SEND_STATUS_FROM_SERVER (with initial metadata if none went yet),
 *           started by kilnd_stream_finish once no send is outstanding
 *   ACTIVE -> FINISHING (finish called: no handler callback runs any more) ->
 *   freed (status started and every batch completed: counted, logged, freed,
 *   exactly like a unary call). A `busy` count defers the free while a handler
 *   callback runs, so a callback may finish the stream and return safely. A stream
 *   is a live call until it is freed, so the shutdown order below holds for
 *   streams too; the handler must always finish (also after on_cancel).
 *
 * Security, at arrival and before anything is decoded: with mutual TLS the
 * client is the certificate's CN (or first SAN) instead of the peer's host; with a
 * token set (auth.h) the `authorization` metadata must hold a token whose role
 * covers the method, else the call is answered UNAUTHENTICATED or
 * PERMISSION_DENIED at once (streams included: no handler runs), and the token's
 * name becomes the client. The daemon's reload (daemon.c, SIGHUP) swaps the set
 * in on the loop (kilnd_server_set_tokens), so calls read it without a lock.
 *
 * Shutdown (kilnd_server_request_stop, on SIGTERM/SIGINT): grpc_server_shutdown_and_notify stops new calls
 * and fails the armed requests; in-flight calls finish until drain-timeout, then are cancelled (a second
 * signal cancels at once); streams open at SIGTERM go on until drain-timeout too, then see on_cancel. Once
 * the shutdown tag has fired AND no call or armed request remains, the server is destroyed and the queue shut
 * down; the queue thread exits on GRPC_QUEUE_SHUTDOWN, the server closes its
 * handles and tells the daemon (on_stopped), which closes its own, so the loop
 * ends. The order matters: gRPC can notify shutdown while call
 * objects still exist, and destroying the server under them is a use-after-free.
 */
#include "daemon/server.h"

#include <grpc/byte_buffer_reader.h>
#include <grpc/grpc.h>
#include <grpc/grpc_security.h>
#include <grpc/support/alloc.h>
#include <grpc/support/time.h>
#include <inttypes.h>
#include <pthread.h>
#include <openssl/crypto.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <string.h>
#include <sys/random.h>
#include <unistd.h>
#include <uv.h>

#include "base/alloc.h"
#include "base/arena.h"
#include "base/buf.h"
#include "base/log.h"
#include "base/time.h"
#include "daemon/auth.h"
#include "daemon/client_text.h"
#include "daemon/listen.h"
#include "daemon/rpc.h"
#include "daemon/server_impl.h"
#include "daemon/stats.h"
#include "daemon/stream.h"
#include "daemon/tls.h"
#include "daemon/wire_check.h"

struct kilnd_server_s {
  const kilnd_settings_t *settings;
  kilnd_listen_addr_t listen;
  char *address;      /* what clients on this host dial (a wildcard becomes loopback) */
  char *bind_address; /* what the listener is bound to, with the bound port */
  char hostname[256];

  grpc_server *server;
  grpc_completion_queue *cq;
  const kilnd_method_t *methods;
  size_t method_count;
  void **method_handles;

  uv_loop_t *loop; /* borrowed: the daemon's (daemon.c) */
  uv_async_t async;
  uv_timer_t drain_timer;
  int handles_open;     /* async and drain_timer until their close callbacks ran */
  bool destroy_pending; /* kilnd_server_destroy ran: free when the handles are closed */
  uv_thread_t cq_thread;
  bool cq_thread_started;

  /* Shared with the queue thread, under `lock`. */
  uv_mutex_t lock;
  event_t *events;
  size_t n_events;
  size_t cap_events;
  bool cq_done;

  /* Loop thread only. */
  event_t *draining_events; /* swapped with `events` on each wake-up */
  size_t cap_draining_events;
  kilnd_stats_t stats;
  kilnd_rpc_env_t env;
  size_t live_calls;
  size_t armed;
  bool draining;
  atomic_bool stopping; /* in-flight work is being cancelled: offloaded handlers stop */
  bool shutdown_notified;
  bool server_destroyed;
  bool handles_closed;
  tag_t shutdown_tag;
  char request_id_prefix[16]; /* random per process: generated ids never repeat across restarts */
  uint64_t request_id_counter;
  void (*drain_fn)(void *user); /* kilnd_server_on_drain */
  void *drain_user;
  void (*stopped_fn)(void *user); /* kilnd_server_on_stopped */
  void *stopped_user;

  /* Security (loop thread, but tls is thread-safe). */
  kilnd_tls_t *tls;       /* borrowed; NULL: plaintext */
  kilnd_tokens_t *tokens; /* owned; NULL: no tokens required; swapped by reload */
};

/* ---- completion-queue thread ------------------------------------------------ */

static void cq_thread_main(void *arg) {
  kilnd_server_t *server = arg;
  /* It waits in gRPC's own futex with kilnd's signals blocked, as every thread
   * but the signal thread (signals.h). */
  pthread_setname_np(pthread_self(), "kilnd-cq"); /* in stacks, and in test_daemon's mask check */
  for (;;) {
    grpc_event ev = grpc_completion_queue_next(server->cq, gpr_inf_future(GPR_CLOCK_REALTIME), NULL);
    uv_mutex_lock(&server->lock);
    if (ev.type == GRPC_QUEUE_SHUTDOWN) {
      server->cq_done = true;
    } else if (ev.type == GRPC_OP_COMPLETE) {
      if (server->n_events == server->cap_events) {
        server->cap_events = server->cap_events ? server->cap_events * 2 : 64;
        server->events = kiln_realloc(server->events, server->cap_events * sizeof(event_t));
      }
      server->events[server->n_events++] = (event_t){(tag_t *)ev.tag, ev.success != 0};
    }
    bool done = server->cq_done;
    uv_mutex_unlock(&server->lock);
    uv_async_send(&server->async);
    if (done) return;
  }
}

/* ---- calls -------------------------------------------------------------------- */

static void on_call_arrived(kilnd_server_t *server, tag_t *tag, bool ok);
static void on_call_done(kilnd_server_t *server, tag_t *tag, bool ok);
static void maybe_finish_shutdown(kilnd_server_t *server);
static void send_reply(kilnd_server_t *server, call_t *c, kiln_status_t status);
static void on_work(uv_work_t *work);
static void on_work_done(uv_work_t *work, int status);

static void *arena_alloc_fn(void *data, size_t size) { return kiln_arena_alloc(data, size); }
static void arena_free_fn(void *data, void *ptr) { (void)data, (void)ptr; }

static void arm(kilnd_server_t *server, const kilnd_method_t *method, size_t index) {
  call_t *c = kiln_calloc(1, sizeof *c);
  c->tag.fn = on_call_arrived;
  c->server = server;
  c->method = method;
  c->method_index = index;
  grpc_metadata_array_init(&c->request_md);
  grpc_call_details_init(&c->details);
  kiln_arena_init(&c->arena);
  kiln_arena_init(&c->stream.recv_arena);
  grpc_call_error err;
  if (method) {
    /* Streaming methods read their messages themselves (no initial payload). */
    grpc_byte_buffer **payload = method->kind == KILND_METHOD_UNARY ? &c->payload : NULL;
    err = grpc_server_request_registered_call(server->server, server->method_handles[index], &c->call,
                                              &c->deadline, &c->request_md, payload, server->cq, server->cq,
                                              &c->tag);
  } else {
    err = grpc_server_request_call(server->server, &c->call, &c->details, &c->request_md, server->cq,
                                   server->cq, &c->tag);
  }
  if (err != GRPC_CALL_OK) {
    /* Only possible while shutting down; nothing to serve then. */
    kiln_log(KILN_LOG_DEBUG, "arm_failed", "grpc_call_error=%d", (int)err);
    grpc_metadata_array_destroy(&c->request_md);
    grpc_call_details_destroy(&c->details);
    kiln_arena_deinit(&c->arena);
    kiln_arena_deinit(&c->stream.recv_arena);
    kiln_free(c);
    return;
  }
  server->armed++;
}

static void free_call(call_t *c) {
  if (c->call) grpc_call_unref(c->call);
  if (c->payload) grpc_byte_buffer_destroy(c->payload);
  if (c->response) grpc_byte_buffer_destroy(c->response);
  grpc_slice_unref(c->status_details);
  grpc_metadata_array_destroy(&c->request_md);
  grpc_call_details_destroy(&c->details);
  kiln_arena_deinit(&c->arena);
  if (c->stream.send_buf) grpc_byte_buffer_destroy(c->stream.send_buf);
  if (c->stream.recv_buf) grpc_byte_buffer_destroy(c->stream.recv_buf);
  kiln_arena_deinit(&c->stream.recv_arena);
  kiln_free(c);
}

/* Decodes one received message of `c` into `arena`; *out_bytes gets its size. */
kiln_status_t kilnd_call_decode(const call_t *c, grpc_byte_buffer *payload,
                                const ProtobufCMessageDescriptor *descriptor, kiln_arena_t *arena,
                                size_t *out_bytes, ProtobufCMessage **out_message) {
  *out_message = NULL;
  grpc_byte_buffer_reader reader;
  if (!grpc_byte_buffer_reader_init(&reader, payload)) {
    return KILN_STATUS(KILN_STATUS_INVALID_ARGUMENT, "%s: the request message cannot be read",
                       c->method->path);
  }
  grpc_slice bytes = grpc_byte_buffer_reader_readall(&reader);
  grpc_byte_buffer_reader_destroy(&reader);
  *out_bytes = GRPC_SLICE_LENGTH(bytes);
  /* Strings as protobuf defines them, enums within their values (wire_check.h). */
  kiln_status_t bad = kilnd_wire_check(descriptor, GRPC_SLICE_START_PTR(bytes), GRPC_SLICE_LENGTH(bytes));
  if (bad) {
    grpc_slice_unref(bytes);
    return kiln_status_annotate(bad, "%s", c->method->path);
  }
  ProtobufCAllocator allocator = {arena_alloc_fn, arena_free_fn, arena};
  ProtobufCMessage *message = protobuf_c_message_unpack(descriptor, &allocator, GRPC_SLICE_LENGTH(bytes),
                                                        GRPC_SLICE_START_PTR(bytes));
  grpc_slice_unref(bytes);
  if (!message) {
    return KILN_STATUS(KILN_STATUS_INVALID_ARGUMENT, "%s: the request is not a valid %s message (%zu bytes)",
                       c->method->path, descriptor->name, *out_bytes);
  }
  *out_message = message;
  return NULL;
}

/* Decodes the unary request message into the call's arena. */
static KILN_MUST_USE kiln_status_t decode_request(call_t *c) {
  if (!c->payload) {
    return KILN_STATUS(KILN_STATUS_INVALID_ARGUMENT, "%s: the request message is missing", c->method->path);
  }
  return kilnd_call_decode(c, c->payload, c->method->request_descriptor, &c->arena, &c->request_bytes,
                           &c->request);
}

/* Packs the handler's response into c->response. */
static KILN_MUST_USE kiln_status_t encode_response(kilnd_server_t *server, call_t *c,
                                                   const ProtobufCMessage *response) {
  size_t size = protobuf_c_message_get_packed_size(response);
  if (size > server->settings->max_message_bytes) {
    return KILN_STATUS(KILN_STATUS_RESOURCE_EXHAUSTED,
                       "%s: the response is %zu bytes, over max-message-bytes (%" PRIu64 ")", c->method->path,
                       size, server->settings->max_message_bytes);
  }
  grpc_slice slice = grpc_slice_malloc(size);
  protobuf_c_message_pack(response, GRPC_SLICE_START_PTR(slice));
  c->response = grpc_raw_byte_buffer_create(&slice, 1);
  grpc_slice_unref(slice);
  c->response_bytes = size;
  return NULL;
}

/* The initial metadata of every call: kiln-request-id (static slices: the call
 * outlives its batches). */
void kilnd_call_initial_metadata(grpc_op *op, call_t *c) {
  op->op = GRPC_OP_SEND_INITIAL_METADATA;
  c->initial[0].key = grpc_slice_from_static_string(KILND_REQUEST_ID_HEADER_OUT);
  c->initial[0].value = grpc_slice_from_static_string(c->request_id);
  op->data.send_initial_metadata.count = 1;
  op->data.send_initial_metadata.metadata = c->initial;
}

void kilnd_call_status_op(grpc_op *op, call_t *c) {
  op->op = GRPC_OP_SEND_STATUS_FROM_SERVER;
  op->data.send_status_from_server.status = (grpc_status_code)c->code;
  op->data.send_status_from_server.trailing_metadata_count = c->n_trailing;
  op->data.send_status_from_server.trailing_metadata = c->n_trailing ? c->trailing : NULL;
  op->data.send_status_from_server.status_details = c->code == KILN_STATUS_OK ? NULL : &c->status_details;
}

kiln_status_t kilnd_id_check(const char *field, const char *id, size_t len) {
  if (len == 0 || len > KILND_ID_MAX) {
    return KILN_STATUS(KILN_STATUS_INVALID_ARGUMENT, "%s is empty or over %d bytes", field, KILND_ID_MAX);
  }
  for (size_t i = 0; i < len; i++) {
    unsigned char c = (unsigned char)id[i];
    if (c < 0x21 || c > 0x7e) { /* visible ASCII: one logfmt token, one header value */
      return KILN_STATUS(KILN_STATUS_INVALID_ARGUMENT,
                         "%s has byte 0x%02x at %zu: identifiers are visible ASCII (0x21..0x7e)", field, c,
                         i);
    }
  }
  return NULL;
}

/* The call's request id: the client's x-request-id when it is valid, else
 * "k-<process prefix>-<counter>". */
static void assign_request_id(kilnd_server_t *server, call_t *c) {
  for (size_t i = 0; i < c->request_md.count; i++) {
    const grpc_metadata *md = &c->request_md.metadata[i];
    if (grpc_slice_str_cmp(md->key, KILND_REQUEST_ID_HEADER_IN) != 0) continue;
    size_t len = GRPC_SLICE_LENGTH(md->value);
    kiln_status_t bad =
        kilnd_id_check(KILND_REQUEST_ID_HEADER_IN, (const char *)GRPC_SLICE_START_PTR(md->value), len);
    if (!bad) {
      memcpy(c->request_id, GRPC_SLICE_START_PTR(md->value), len);
      c->request_id[len] = '\0';
      return;
    }
    kiln_status_free(bad);
    break; /* not a valid id (logged as ours instead: it might not be printable) */
  }
  snprintf(c->request_id, sizeof c->request_id, "k-%s-%" PRIu64, server->request_id_prefix,
           ++server->request_id_counter);
}

static void send_reply(kilnd_server_t *server, call_t *c, kiln_status_t status) {
  if (!c->auth_denied) status = kilnd_status_for_client(status, c->request_id);
  c->code = kiln_status_code(status);
  c->message = kiln_arena_strdup(&c->arena, kiln_status_message(status));
  c->status_details = grpc_slice_from_copied_string(c->message);
  kiln_status_free(status);

  grpc_op ops[4];
  memset(ops, 0, sizeof ops);
  size_t n = 0;
  kilnd_call_initial_metadata(&ops[n++], c);
  if (c->response && c->code == KILN_STATUS_OK) {
    ops[n].op = GRPC_OP_SEND_MESSAGE;
    ops[n++].data.send_message.send_message = c->response;
  }
  kilnd_call_status_op(&ops[n++], c);
  ops[n].op = GRPC_OP_RECV_CLOSE_ON_SERVER;
  ops[n++].data.recv_close_on_server.cancelled = &c->client_cancelled;
  c->tag.fn = on_call_done;
  grpc_call_error err = grpc_call_start_batch(c->call, ops, n, &c->tag, NULL);
  if (err != GRPC_CALL_OK) {
    kiln_log(KILN_LOG_ERROR, "rpc_send_failed", "grpc_call_error=%d", (int)err);
    on_call_done(server, &c->tag, false);
  }
}

/* Thread pool: runs an offloaded handler. Touches only the call and the parts of
 * the env that rpc.h declares thread-safe. */
static void on_work(uv_work_t *work) {
  call_t *c = work->data;
  c->ctx.may_block = true;
  c->work_status = c->method->handler(&c->server->env, &c->ctx, c->request, &c->work_response);
}

/* Loop thread: the offloaded handler finished; encode and reply. */
static void on_work_done(uv_work_t *work, int status) {
  call_t *c = work->data;
  kilnd_server_t *server = c->server;
  kiln_status_t st = c->work_status;
  c->work_status = NULL;
  (void)status; /* nothing calls uv_cancel: the work always ran */
  if (!st) st = encode_response(server, c, c->work_response);
  send_reply(server, c, st);
}

void kilnd_call_set_diagnostics(const kilnd_call_ctx_t *call, const uint8_t *packed, size_t len) {
  call_t *c = call->owner;
  if (!c) return; /* a handler called outside a server */
  c->trailing[1].key = grpc_slice_from_static_string("kiln-diagnostics-bin");
  c->trailing[1].value = grpc_slice_from_static_buffer(packed, len); /* the arena outlives the batch */
  c->n_trailing = 2;
}

/* The name a mutual-TLS client's certificate gives (CN, else the first SAN), in
 * the call's arena; NULL when there is none. */
static const char *certificate_name(call_t *c) {
  grpc_auth_context *auth = grpc_call_auth_context(c->call);
  if (!auth) return NULL;
  const char *name = NULL;
  const char *props[] = {GRPC_X509_CN_PROPERTY_NAME, GRPC_X509_SAN_PROPERTY_NAME};
  for (size_t i = 0; i < 2 && !name; i++) {
    grpc_auth_property_iterator it = grpc_auth_context_find_properties_by_name(auth, props[i]);
    const grpc_auth_property *p = grpc_auth_property_iterator_next(&it);
    if (p && p->value_length > 0 && p->value_length <= 256) {
      char *v = kiln_arena_alloc(&c->arena, p->value_length + 1);
      memcpy(v, p->value, p->value_length);
      v[p->value_length] = '\0';
      name = v;
    }
  }
  grpc_auth_context_release(auth);
  return name;
}

/* Who the call is, and whether it may run: sets ctx.client to the certificate's
 * or the token's name; NULL when the call may go on, else its status. */
static KILN_MUST_USE kiln_status_t authenticate(kilnd_server_t *server, call_t *c) {
  if (kilnd_tls_mutual(server->tls)) {
    const char *name = certificate_name(c);
    if (name) c->ctx.client = name; /* peer= still logs the address */
  }
  if (!server->tokens) return NULL;
  char *path_owned = NULL;
  const char *path = c->method ? c->method->path : NULL;
  if (!path) path = path_owned = grpc_slice_to_c_string(c->details.method);
  const char *value = NULL;
  size_t len = 0;
  for (size_t i = 0; i < c->request_md.count; i++) {
    const grpc_metadata *md = &c->request_md.metadata[i];
    if (grpc_slice_str_cmp(md->key, "authorization") != 0) continue;
    value = (const char *)GRPC_SLICE_START_PTR(md->value);
    len = GRPC_SLICE_LENGTH(md->value);
    break;
  }
  const char *name = NULL;
  kiln_status_t status = kilnd_tokens_authorize(server->tokens, path, value, len, &name);
  gpr_free(path_owned);
  if (!status && name) {
    c->ctx.client = kiln_arena_strdup(&c->arena, name); /* the set may be swapped before the call ends */
  }
  return status;
}

static void on_call_arrived(kilnd_server_t *server, tag_t *tag, bool ok) {
  call_t *c = (call_t *)tag;
  server->armed--;
  if (!ok) {
    /* The server is shutting down and failed this armed request. */
    free_call(c);
    maybe_finish_shutdown(server);
    return;
  }
  server->live_calls++;
  server->stats.calls_in_flight++;
  c->start_ns = kiln_time_monotonic_ns();
  assign_request_id(server, c);
  c->trailing[0].key = grpc_slice_from_static_string(KILND_REQUEST_ID_HEADER_OUT);
  c->trailing[0].value = grpc_slice_from_static_string(c->request_id);
  c->n_trailing = 1;
  c->ctx.request_id = c->request_id;
  if (!server->draining) arm(server, c->method, c->method_index);
  /* The client's deadline on our monotonic clock (gRPC's clocks have other epochs). */
  gpr_timespec now = gpr_now(c->deadline.clock_type);
  int64_t left_ns = INT64_MAX;
  if (gpr_time_cmp(c->deadline, gpr_inf_future(c->deadline.clock_type)) != 0) {
    gpr_timespec left = gpr_time_sub(c->deadline, now);
    left_ns = (int64_t)left.tv_sec * 1000000000 + left.tv_nsec;
  }
  c->ctx.arena = &c->arena;
  c->ctx.deadline_monotonic_ns = left_ns == INT64_MAX ? INT64_MAX : c->start_ns + left_ns;
  c->ctx.stopping = &server->stopping;
  c->ctx.owner = c;
  c->ctx.may_block = false; /* on the loop; on_work sets it for the pool */
  {
    /* The fairness key: the peer's host ("ipv4:10.0.0.7"), not its port, so one
     * machine's parallel CLI runs count as one client. */
    char *peer = grpc_call_get_peer(c->call);
    char *client = kiln_arena_strdup(&c->arena, peer ? peer : "");
    gpr_free(peer);
    if (strncmp(client, "ipv4:", 5) == 0 || strncmp(client, "ipv6:", 5) == 0) {
      char *colon = strrchr(client, ':');
      if (colon && colon > client + 4) *colon = '\0';
    }
    c->ctx.client = client;
  }
  kiln_status_t denied = authenticate(server, c);
  if (denied) {
    c->auth_denied = true;
    send_reply(server, c, denied); /* nothing decoded, no handler run, streams included */
    return;
  }

  if (c->method && c->method->kind != KILND_METHOD_UNARY) {
    kilnd_stream_begin(c);
    return;
  }

  kiln_status_t status;
  if (c->method) {
    status = decode_request(c);
    if (!status && c->method->offload && c->method->try_on_loop) {
      bool run_off_loop = false;
      ProtobufCMessage *response = NULL;
      c->ctx.may_block = false;
      c->ctx.run_off_loop = &run_off_loop;
      status = c->method->handler(&server->env, &c->ctx, c->request, &response);
      c->ctx.run_off_loop = NULL;
      if (status || !run_off_loop) {
        if (!status) status = encode_response(server, c, response);
        send_reply(server, c, status);
        return;
      }
    }
    if (!status && c->method->offload) {
      c->work.data = c;
      if (uv_queue_work(server->loop, &c->work, on_work, on_work_done) == 0) return;
      status = KILN_STATUS(KILN_STATUS_INTERNAL, "%s: cannot queue the work", c->method->path);
    }
    if (!status) {
      ProtobufCMessage *response = NULL;
      status = c->method->handler(&server->env, &c->ctx, c->request, &response);
      if (!status) status = encode_response(server, c, response);
    }
  } else {
    char *path = grpc_slice_to_c_string(c->details.method);
    status = kilnd_rpc_unserved(path);
    gpr_free(path);
  }
  send_reply(server, c, status);
}

/* The static path under which stats count a catch-all call: the contract's, or
 * NULL for a path outside it. */
static const char *known_path(const kilnd_server_t *server, const grpc_slice path) {
  for (size_t i = 0; i < server->method_count; i++) {
    if (grpc_slice_str_cmp(path, server->methods[i].path) == 0) return server->methods[i].path;
  }
  return NULL;
}

/* Every call ends here, unary or streaming: counted under `code`, logged, freed. */
void kilnd_call_finished(call_t *c, kiln_status_code_t code) {
  kilnd_server_t *server = c->server;
  const char *method = c->method ? c->method->path : known_path(server, c->details.method);
  kilnd_stats_record(&server->stats, method, code);

  if (kiln_log_enabled(KILN_LOG_INFO)) {
    kiln_buf_t fields;
    kiln_buf_init(&fields);
    if (method) {
      kiln_log_kv_str(&fields, "method", method);
    } else {
      char *path = grpc_slice_to_c_string(c->details.method);
      kiln_log_kv_str(&fields, "method", path);
      gpr_free(path);
    }
    char *peer = grpc_call_get_peer(c->call);
    kiln_log_kv_str(&fields, "peer", peer);
    gpr_free(peer);
    if (c->ctx.client) kiln_log_kv_str(&fields, "client", c->ctx.client);
    kiln_log_kv_str(&fields, "request_id", c->request_id);
    kiln_buf_appendf(&fields, " code=%s dur_us=%" PRId64 " req_bytes=%zu resp_bytes=%zu",
                     kiln_status_code_name(code), (kiln_time_monotonic_ns() - c->start_ns) / 1000,
                     c->request_bytes, c->response_bytes);
    if (c->method && c->method->kind != KILND_METHOD_UNARY) {
      kiln_buf_appendf(&fields, " msgs_in=%" PRIu64 " msgs_out=%" PRIu64, c->stream.msgs_in,
                       c->stream.msgs_out);
    }
    if (c->code != KILN_STATUS_OK) kiln_log_kv_str(&fields, "msg", c->message);
    kiln_log_fields(code == KILN_STATUS_OK ? KILN_LOG_INFO : KILN_LOG_WARN, "rpc", &fields);
    kiln_buf_deinit(&fields);
  }

  free_call(c);
  server->live_calls--;
  server->stats.calls_in_flight--;
  maybe_finish_shutdown(server);
}

/* A unary call's one batch completed. */
static void on_call_done(kilnd_server_t *server, tag_t *tag, bool ok) {
  call_t *c = (call_t *)tag;
  kiln_status_code_t code = c->code;
  if (!ok || c->client_cancelled) code = KILN_STATUS_CANCELLED;
  kilnd_call_finished(c, code);
}

/* ---- shutdown ------------------------------------------------------------------- */

static void free_server(kilnd_server_t *server);

static void on_handle_closed(uv_handle_t *handle) {
  kilnd_server_t *server = handle->data;
  if (--server->handles_open == 0 && server->destroy_pending) free_server(server);
}

static void close_handles(kilnd_server_t *server) {
  if (server->handles_closed) return;
  server->handles_closed = true;
  uv_close((uv_handle_t *)&server->async, on_handle_closed);
  uv_close((uv_handle_t *)&server->drain_timer, on_handle_closed);
}

static void maybe_finish_shutdown(kilnd_server_t *server) {
  if (!server->shutdown_notified || server->live_calls || server->armed || server->server_destroyed) {
    return;
  }
  grpc_server_destroy(server->server);
  server->server = NULL;
  server->server_destroyed = true;
  uv_timer_stop(&server->drain_timer);
  /* The queue thread sees GRPC_QUEUE_SHUTDOWN once the queue is empty. */
  grpc_completion_queue_shutdown(server->cq);
}

static void on_shutdown_notified(kilnd_server_t *server, tag_t *tag, bool ok) {
  (void)tag, (void)ok;
  server->shutdown_notified = true;
  maybe_finish_shutdown(server);
}

static void on_drain_timeout(uv_timer_t *timer) {
  kilnd_server_t *server = timer->data;
  if (server->server_destroyed) return;
  kiln_log(KILN_LOG_WARN, "drain_timeout", "cancelled_calls=%zu timeout_ms=%" PRId64, server->live_calls,
           server->settings->drain_timeout_ms);
  atomic_store(&server->stopping, true);
  grpc_server_cancel_all_calls(server->server);
}

void kilnd_server_request_stop(kilnd_server_t *server) {
  if (server->draining) {
    if (!server->server_destroyed) {
      kiln_log(KILN_LOG_WARN, "drain_aborted", "cancelled_calls=%zu", server->live_calls);
      atomic_store(&server->stopping, true);
      grpc_server_cancel_all_calls(server->server);
    }
    return;
  }
  server->draining = true;
  server->env.draining = true;
  kiln_log(KILN_LOG_INFO, "draining", "in_flight=%zu timeout_ms=%" PRId64, server->live_calls,
           server->settings->drain_timeout_ms);
  grpc_server_shutdown_and_notify(server->server, server->cq, &server->shutdown_tag);
  uv_timer_start(&server->drain_timer, on_drain_timeout, (uint64_t)server->settings->drain_timeout_ms, 0);
  if (server->drain_fn) server->drain_fn(server->drain_user);
}

void kilnd_server_set_jobs(kilnd_server_t *server, struct kilnd_jobs_s *jobs) { server->env.jobs = jobs; }

void kilnd_server_on_drain(kilnd_server_t *server, void (*fn)(void *user), void *user) {
  server->drain_fn = fn;
  server->drain_user = user;
}

void kilnd_server_on_stopped(kilnd_server_t *server, void (*fn)(void *user), void *user) {
  server->stopped_fn = fn;
  server->stopped_user = user;
}

void kilnd_server_set_tokens(kilnd_server_t *server, kilnd_tokens_t *tokens_owned) {
  kilnd_tokens_destroy(server->tokens);
  server->tokens = tokens_owned;
}

const kilnd_rpc_env_t *kilnd_call_env(const call_t *c) { return &c->server->env; }

uv_loop_t *kilnd_call_loop(const call_t *c) { return c->server->loop; }

uint64_t kilnd_call_max_message_bytes(const call_t *c) { return c->server->settings->max_message_bytes; }

const kilnd_stats_t *kilnd_server_stats(const kilnd_server_t *server) { return &server->stats; }

bool kilnd_server_draining(const kilnd_server_t *server) { return server->draining; }

int64_t kilnd_server_start_unix_ms(const kilnd_server_t *server) { return server->env.start_unix_ms; }

/* ---- loop ------------------------------------------------------------------------ */

static void on_async(uv_async_t *handle) {
  kilnd_server_t *server = handle->data;
  uv_mutex_lock(&server->lock);
  /* Swap arrays so the queue thread can keep appending while we run handlers. */
  event_t *events = server->events;
  size_t n = server->n_events;
  size_t cap = server->cap_events;
  server->events = server->draining_events;
  server->cap_events = server->cap_draining_events;
  server->n_events = 0;
  bool cq_done = server->cq_done;
  uv_mutex_unlock(&server->lock);
  server->draining_events = events;
  server->cap_draining_events = cap;

  for (size_t i = 0; i < n; i++) events[i].tag->fn(server, events[i].tag, events[i].ok);

  if (cq_done && !server->handles_closed) {
    uv_thread_join(&server->cq_thread);
    server->cq_thread_started = false;
    close_handles(server);
    if (server->stopped_fn) server->stopped_fn(server->stopped_user);
  }
}

/* ---- public ---------------------------------------------------------------------- */

kiln_status_t kilnd_server_create(uv_loop_t *loop, const kilnd_settings_t *settings, kiln_cache_t *cache,
                                  kilnd_tls_t *tls, kilnd_tokens_t *tokens_owned,
                                  kilnd_server_t **out_server) {
  *out_server = NULL;
  kilnd_server_t *server = kiln_calloc(1, sizeof *server);
  server->settings = settings;
  server->loop = loop;
  server->tls = tls;
  server->tokens = tokens_owned;
  server->env.cache = cache;
  server->env.downloads = kilnd_downloads_create();
  server->shutdown_tag.fn = on_shutdown_notified;
  kilnd_stats_init(&server->stats);
  if (gethostname(server->hostname, sizeof server->hostname - 1) != 0) server->hostname[0] = '\0';
  server->env.settings = settings;
  server->env.stats = &server->stats;
  server->env.hostname = server->hostname;
  server->env.start_unix_ms = kiln_time_unix_ms();
  server->env.start_monotonic_ns = kiln_time_monotonic_ns();
  uint8_t seed[6];
  if (getrandom(seed, sizeof seed, GRND_NONBLOCK) != (ssize_t)sizeof seed) {
    uint64_t t = (uint64_t)kiln_time_unix_ms() ^ (uint64_t)getpid() << 24;
    memcpy(seed, &t, sizeof seed);
  }
  for (size_t i = 0; i < sizeof seed; i++) {
    snprintf(server->request_id_prefix + 2 * i, 3, "%02x", seed[i]);
  }

  kiln_status_t status = kilnd_listen_parse(settings->listen, &server->listen);
  if (!status) status = kilnd_listen_preflight(&server->listen);
  if (status) {
    kilnd_listen_addr_deinit(&server->listen);
    kilnd_tokens_destroy(server->tokens);
    kilnd_downloads_destroy(server->env.downloads);
    kiln_free(server);
    return status;
  }

  grpc_init();
  grpc_arg args[3];
  memset(args, 0, sizeof args);
  int max_message = (int)settings->max_message_bytes; /* bounded to INT32_MAX by the table */
  args[0].type = GRPC_ARG_INTEGER;
  args[0].key = (char *)GRPC_ARG_MAX_RECEIVE_MESSAGE_LENGTH;
  args[0].value.integer = max_message;
  args[1].type = GRPC_ARG_INTEGER;
  args[1].key = (char *)GRPC_ARG_MAX_SEND_MESSAGE_LENGTH;
  args[1].value.integer = max_message;
  /* On by default: two daemons could silently share a port. */
  args[2].type = GRPC_ARG_INTEGER;
  args[2].key = (char *)GRPC_ARG_ALLOW_REUSEPORT;
  args[2].value.integer = 0;
  grpc_channel_args channel_args = {sizeof args / sizeof args[0], args};
  server->server = grpc_server_create(&channel_args, NULL);
  server->cq = grpc_completion_queue_create_for_next(NULL);
  grpc_server_register_completion_queue(server->server, server->cq, NULL);

  server->methods = kilnd_rpc_methods(&server->method_count);
  server->method_handles = kiln_calloc(server->method_count, sizeof(void *));
  for (size_t i = 0; i < server->method_count; i++) {
    /* Unserved methods are left to the catch-all (kilnd_rpc_unserved). */
    if (!kilnd_method_served(&server->methods[i])) continue;
    /* Streaming methods receive every message themselves, the first included. */
    grpc_server_register_method_payload_handling payload = server->methods[i].kind == KILND_METHOD_UNARY
                                                               ? GRPC_SRM_PAYLOAD_READ_INITIAL_BYTE_BUFFER
                                                               : GRPC_SRM_PAYLOAD_NONE;
    server->method_handles[i] =
        grpc_server_register_method(server->server, server->methods[i].path, NULL, payload, 0);
  }

  char *target = kilnd_listen_grpc_target(&server->listen);
  grpc_server_credentials *creds =
      tls ? kilnd_tls_server_credentials(tls) : grpc_insecure_server_credentials_create();
  int port = grpc_server_add_http2_port(server->server, target, creds);
  grpc_server_credentials_release(creds);
  if (port == 0) {
    status = KILN_STATUS(KILN_STATUS_UNAVAILABLE,
                         "cannot listen on %s: gRPC could not bind it (address in use or not "
                         "local to this host?)",
                         target);
    kiln_free(target);
    grpc_server_destroy(server->server);
    grpc_completion_queue_shutdown(server->cq);
    grpc_completion_queue_destroy(server->cq);
    grpc_shutdown();
    kiln_free(server->method_handles);
    kilnd_listen_addr_deinit(&server->listen);
    kilnd_tokens_destroy(server->tokens);
    kilnd_downloads_destroy(server->env.downloads);
    kiln_free(server);
    return status;
  }
  kiln_free(target);
  server->address = kilnd_listen_client_address(&server->listen, port);
  {
    kilnd_listen_addr_t bound = server->listen;
    if (!bound.is_unix) bound.port = port;
    server->bind_address = kilnd_listen_grpc_target(&bound);
  }
  if (!tls && !server->listen.is_unix && !kilnd_listen_is_loopback(&server->listen)) {
    kiln_buf_t fields;
    kiln_buf_init(&fields);
    kiln_log_kv_str(&fields, "addr", server->bind_address);
    kiln_log_kv_str(&fields, "msg",
                    server->tokens ? "plaintext gRPC beyond loopback: bearer tokens travel in the clear; "
                                     "set tls-cert and tls-key"
                                   : "plaintext gRPC beyond loopback, no authentication: anyone who "
                                     "reaches this address can compile, read and evict; set tls-cert, "
                                     "tls-key and token-file (or tls-client-ca)");
    kiln_log_fields(KILN_LOG_WARN, "insecure_listen", &fields);
    kiln_buf_deinit(&fields);
  }
  if (tls) {
    char describe[512];
    kilnd_tls_describe(tls, describe, sizeof describe);
    kiln_buf_t fields;
    kiln_buf_init(&fields);
    kiln_buf_appendf(&fields, "mutual=%s", kilnd_tls_mutual(tls) ? "true" : "false");
    kiln_log_kv_str(&fields, "cert", describe);
    kiln_log_fields(KILN_LOG_INFO, "tls", &fields);
    kiln_buf_deinit(&fields);
  }
  if (server->tokens) kiln_log(KILN_LOG_INFO, "tokens", "tokens=%zu", kilnd_tokens_count(server->tokens));

  uv_mutex_init(&server->lock);
  uv_async_init(server->loop, &server->async, on_async);
  server->async.data = server;
  uv_timer_init(server->loop, &server->drain_timer);
  server->drain_timer.data = server;
  server->handles_open = 2;

  grpc_server_start(server->server);
  for (size_t i = 0; i < server->method_count; i++) {
    if (kilnd_method_served(&server->methods[i])) arm(server, &server->methods[i], i);
  }
  arm(server, NULL, 0);
  *out_server = server;
  return NULL;
}

const char *kilnd_server_address(const kilnd_server_t *server) { return server->address; }

const char *kilnd_server_bind_address(const kilnd_server_t *server) { return server->bind_address; }

kiln_status_t kilnd_server_start(kilnd_server_t *server) {
  if (uv_thread_create(&server->cq_thread, cq_thread_main, server) != 0) {
    return KILN_STATUS(KILN_STATUS_INTERNAL, "cannot start the completion-queue thread");
  }
  server->cq_thread_started = true;
  return NULL;
}

static void free_server(kilnd_server_t *server) {
  uv_mutex_destroy(&server->lock);
  if (server->cq) grpc_completion_queue_destroy(server->cq);
  grpc_shutdown();
  kiln_free(server->events);
  kiln_free(server->draining_events);
  kiln_free(server->method_handles);
  kiln_free(server->address);
  kiln_free(server->bind_address);
  kilnd_listen_addr_deinit(&server->listen);
  kilnd_tokens_destroy(server->tokens);
  kilnd_downloads_destroy(server->env.downloads);
  kiln_free(server);
}

void kilnd_server_destroy(kilnd_server_t *server) {
  if (!server) return;
  if (!server->cq_thread_started && server->server && !server->server_destroyed) {
    /* The loop never ran the server (start failed after create): drain here,
     * pumping the queue on this thread, so armed requests are freed and the
     * server destroyed in the same order as a normal stop. */
    if (!server->draining) {
      server->draining = true;
      grpc_server_shutdown_and_notify(server->server, server->cq, &server->shutdown_tag);
    }
    grpc_server_cancel_all_calls(server->server);
    for (;;) {
      grpc_event ev = grpc_completion_queue_next(server->cq, gpr_inf_future(GPR_CLOCK_REALTIME), NULL);
      if (ev.type == GRPC_QUEUE_SHUTDOWN) break; /* maybe_finish_shutdown shut the queue */
      if (ev.type == GRPC_OP_COMPLETE) ((tag_t *)ev.tag)->fn(server, ev.tag, ev.success != 0);
    }
  }
  server->destroy_pending = true;
  close_handles(server);
  if (server->handles_open == 0) free_server(server);
}
