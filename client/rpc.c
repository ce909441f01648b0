/* Blocking calls over the gRPC C core: one pluck completion queue per client.
 *
 * A unary call is one batch with every op, waited for by its tag. A streaming call
 * is several batches, each with its own tag (an address inside the stream, so tags
 * never collide): the send batch (initial metadata, and for server-streaming the
 * request and the half-close), the status batch (RECV_STATUS_ON_CLIENT, started at
 * once and plucked when the call ends: it is how the call's end is learned even
 * when a send fails), one receive batch at a time, one write batch at a time.
 * gRPC allows one read and one write in flight on a call at once, and the pluck
 * queue hands each completion to whoever plucks its tag, so a bidi stream may have
 * a read and a write pending together (Recompile): a bounded read leaves its batch
 * pending while a write is started, and a write may be waited for in bounded
 * slices (write_poll) while reads go on.
 * Invariant: every batch that was started is plucked exactly once before the call
 * is unreffed (kiln_client_stream_destroy cancels first so pending ones finish);
 * `send_pending`, `recv_pending`, `write_pending` and `status_pending` say which
 * are still outstanding. The opening send batch is not waited for when the call starts (it
 * completes only once a connection is up); it is plucked before the next write,
 * and with the status. A read that
 * times out leaves its batch pending, and the next read plucks that same batch. */
#include "client/rpc.h"

#include <grpc/byte_buffer_reader.h>
#include <grpc/grpc.h>
#include <grpc/grpc_security.h>
#include <grpc/support/alloc.h>
#include <grpc/support/time.h>
#include <errno.h>
#include <fcntl.h>
#include <stdbool.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "base/alloc.h"
#include "base/buf.h"
#include "base/digest.h"
#include "base/pem.h"
#include "client/diagnostic.h"
#include "kiln/v1/kiln.pb-c.h"
#include "proto/wire.h"

struct kiln_client_s {
  char *address;
  grpc_channel *channel;
  grpc_completion_queue *cq;
  int64_t timeout_ms;
  char request_id_base[16]; /* "c-" + 12 hex, random per client */
  unsigned call_seq;
  char failed_request_id[40]; /* the last call that failed; "" when none did */
  char *authorization;        /* "Bearer <token>", or NULL */
  char route[65];             /* kiln-source-digest of later calls; "" for none */
};

/* Every call sends x-request-id "<base>-<n>"; kilnd logs it and answers with it. */
static void next_request_id(kiln_client_t *client, char *out, size_t cap) {
  snprintf(out, cap, "%s-%u", client->request_id_base, ++client->call_seq);
}

/* The metadata of every call: x-request-id, `authorization: Bearer <token>` when
 * the client has a token, and `kiln-source-digest` when a command named the model
 * its calls are about (kiln_client_set_route). `md` has room for REQUEST_MD. */
#define REQUEST_MD 3
static void set_request_id_md(const kiln_client_t *client, grpc_op *op, grpc_metadata *md, const char *id) {
  op->op = GRPC_OP_SEND_INITIAL_METADATA;
  md[0].key = grpc_slice_from_static_string("x-request-id");
  md[0].value = grpc_slice_from_static_string(id); /* the caller keeps `id` until the batch completes */
  size_t n = 1;
  if (client->authorization) {
    md[1].key = grpc_slice_from_static_string("authorization");
    md[1].value = grpc_slice_from_static_string(client->authorization); /* lives as long as the client */
    n = 2;
  }
  if (client->route[0]) {
    md[n].key = grpc_slice_from_static_string("kiln-source-digest");
    md[n].value = grpc_slice_from_static_string(client->route); /* set between calls only */
    n++;
  }
  op->data.send_initial_metadata.count = n;
  op->data.send_initial_metadata.metadata = md;
}

void kiln_client_set_route(kiln_client_t *client, const char *source_digest) {
  snprintf(client->route, sizeof client->route, "%s",
           source_digest && kiln_digest_is_valid_hex(source_digest) ? source_digest : "");
}

const char *kiln_client_failed_request_id(const kiln_client_t *client) {
  return client->failed_request_id[0] ? client->failed_request_id : NULL;
}

/* The channel's credentials for `options`: insecure without TLS. */
static KILN_MUST_USE kiln_status_t channel_credentials(const kiln_client_options_t *options,
                                                       grpc_channel_credentials **out_creds) {
  *out_creds = NULL;
  bool tls = options && (options->tls || options->tls_ca || options->tls_cert || options->tls_key);
  if (!tls) {
    *out_creds = grpc_insecure_credentials_create();
    return NULL;
  }
  if (!options->tls_cert != !options->tls_key) {
    return KILN_STATUS(KILN_STATUS_INVALID_ARGUMENT,
                       "--%s is given without --%s: a client certificate needs its key and the reverse",
                       options->tls_cert ? "tls-cert" : "tls-key",
                       options->tls_cert ? "tls-key" : "tls-cert");
  }
  char *ca = NULL, *cert = NULL, *key = NULL;
  kiln_status_t status = NULL;
  if (options->tls_ca) status = kiln_pem_read("--tls-ca", options->tls_ca, &ca);
  if (!status && options->tls_cert) status = kiln_pem_read("--tls-cert", options->tls_cert, &cert);
  if (!status && options->tls_key) status = kiln_pem_read("--tls-key", options->tls_key, &key);
  if (!status) {
    grpc_ssl_pem_key_cert_pair pair = {key, cert};
    /* NULL roots: gRPC's default roots (GRPC_DEFAULT_SSL_ROOTS_FILE_PATH, else its bundle). */
    *out_creds = grpc_ssl_credentials_create_ex(ca, cert ? &pair : NULL, NULL, NULL);
    if (!*out_creds) {
      status = KILN_STATUS(KILN_STATUS_INVALID_ARGUMENT, "cannot set up TLS with the given --tls-* files");
    }
  }
  kiln_pem_free(ca);
  kiln_pem_free(cert);
  kiln_pem_free(key);
  return status;
}

kiln_status_t kiln_client_create(const char *address, int64_t timeout_ms, uint64_t max_message_bytes,
                                 kiln_client_t **out_client) {
  return kiln_client_create_ex(address, timeout_ms, max_message_bytes, NULL, out_client);
}

kiln_status_t kiln_client_create_ex(const char *address, int64_t timeout_ms, uint64_t max_message_bytes,
                                    const kiln_client_options_t *options, kiln_client_t **out_client) {
  *out_client = NULL;
  if (!address || !*address) {
    return KILN_STATUS(KILN_STATUS_INVALID_ARGUMENT,
                       "no daemon address: pass --addr HOST:PORT or set KILN_ADDR");
  }
  if (options && options->token) {
    size_t len = strlen(options->token);
    for (size_t i = 0; i < len; i++) {
      if (options->token[i] < 0x21 || options->token[i] > 0x7e) {
        return KILN_STATUS(KILN_STATUS_INVALID_ARGUMENT,
                           "the token (--token-file or KILN_TOKEN) has a character that is not "
                           "visible ASCII");
      }
    }
    if (len == 0) {
      return KILN_STATUS(KILN_STATUS_INVALID_ARGUMENT, "the token (--token-file or KILN_TOKEN) is empty");
    }
  }
  grpc_init();
  grpc_channel_credentials *creds = NULL;
  kiln_status_t status = channel_credentials(options, &creds);
  if (status) {
    grpc_shutdown();
    return status;
  }
  kiln_client_t *client = kiln_calloc(1, sizeof *client);
  client->address = kiln_strdup(address);
  client->timeout_ms = timeout_ms;
  uint8_t seed[6] = {0};
  int fd = open("/dev/urandom", O_RDONLY | O_CLOEXEC);
  if (fd < 0 || read(fd, seed, sizeof seed) != (ssize_t)sizeof seed) {
    uint64_t t = (uint64_t)getpid() ^ (uint64_t)gpr_now(GPR_CLOCK_REALTIME).tv_nsec << 16;
    memcpy(seed, &t, sizeof seed);
  }
  if (fd >= 0) close(fd);
  snprintf(client->request_id_base, sizeof client->request_id_base, "c-%02x%02x%02x%02x%02x%02x", seed[0],
           seed[1], seed[2], seed[3], seed[4], seed[5]);
  if (options && options->token) {
    kiln_buf_t auth;
    kiln_buf_init(&auth);
    kiln_buf_appendf(&auth, "Bearer %s", options->token);
    client->authorization = kiln_buf_take(&auth);
    kiln_buf_deinit(&auth);
  }
  grpc_arg args[3];
  memset(args, 0, sizeof args);
  args[0].type = GRPC_ARG_INTEGER;
  args[0].key = (char *)GRPC_ARG_MAX_RECEIVE_MESSAGE_LENGTH;
  args[0].value.integer = max_message_bytes > INT32_MAX ? INT32_MAX : (int)max_message_bytes;
  /* HTTP/2's largest DATA frame (2^24 - 1) instead of its default 16 KiB: a
   * download's 2 MiB chunks then cross in a few frames, not 128 of them. */
  args[1].type = GRPC_ARG_INTEGER;
  args[1].key = (char *)GRPC_ARG_HTTP2_MAX_FRAME_SIZE;
  args[1].value.integer = (1 << 24) - 1;
  size_t n_args = 2;
  if (options && options->tls_server_name && *options->tls_server_name) {
    args[n_args].type = GRPC_ARG_STRING;
    args[n_args].key = (char *)GRPC_SSL_TARGET_NAME_OVERRIDE_ARG;
    args[n_args].value.string = (char *)options->tls_server_name;
    n_args++;
  }
  grpc_channel_args channel_args = {n_args, args};
  client->channel = grpc_channel_create(address, creds, &channel_args);
  grpc_channel_credentials_release(creds);
  client->cq = grpc_completion_queue_create_for_pluck(NULL);
  *out_client = client;
  return NULL;
}

void kiln_client_destroy(kiln_client_t *client) {
  if (!client) return;
  grpc_channel_destroy(client->channel);
  grpc_completion_queue_shutdown(client->cq);
  while (grpc_completion_queue_pluck(client->cq, NULL, gpr_inf_future(GPR_CLOCK_REALTIME), NULL).type !=
         GRPC_QUEUE_SHUTDOWN) {
  }
  grpc_completion_queue_destroy(client->cq);
  kiln_free(client->address);
  if (client->authorization) {
    memset(client->authorization, 0, strlen(client->authorization));
    kiln_free(client->authorization);
  }
  kiln_free(client);
  grpc_shutdown();
}

const char *kiln_client_address(const kiln_client_t *client) { return client->address; }

bool kiln_client_reconnect_now(kiln_client_t *client, int64_t wait_ms) {
  /* Without this a channel whose server went away tries again only on its own
   * backoff (1 s, growing 1.6x), and calls in between fail at once. */
  grpc_channel_reset_connect_backoff(client->channel);
  gpr_timespec deadline =
      gpr_time_add(gpr_now(GPR_CLOCK_REALTIME), gpr_time_from_millis(wait_ms, GPR_TIMESPAN));
  int tag = 0;
  for (;;) {
    grpc_connectivity_state st = grpc_channel_check_connectivity_state(client->channel, 1);
    if (st == GRPC_CHANNEL_READY) return true;
    grpc_channel_watch_connectivity_state(client->channel, st, deadline, client->cq, &tag);
    grpc_event ev = grpc_completion_queue_pluck(client->cq, &tag, gpr_inf_future(GPR_CLOCK_REALTIME), NULL);
    if (!ev.success) return false; /* the deadline came first */
  }
}

void kiln_client_set_timeout(kiln_client_t *client, int64_t timeout_ms) { client->timeout_ms = timeout_ms; }

int64_t kiln_client_timeout(const kiln_client_t *client) { return client->timeout_ms; }

/* A failed call's status; when kilnd sent `kiln-diagnostics-bin` (refused source
 * content), each diagnostic follows the message on its own line as
 * "<file>:<line>:<column>: error: <message>", the form editors and CI annotations
 * read. */
static KILN_MUST_USE kiln_status_t failed_status(grpc_status_code code, grpc_slice details,
                                                 const grpc_metadata_array *trailing) {
  char *text = grpc_slice_to_c_string(details);
  kiln_buf_t msg;
  kiln_buf_init(&msg);
  kiln_buf_append_str(&msg, *text ? text : "(no message)");
  gpr_free(text);
  for (size_t i = 0; trailing && i < trailing->count; i++) {
    const grpc_metadata *md = &trailing->metadata[i];
    if (grpc_slice_str_cmp(md->key, "kiln-diagnostics-bin") != 0) continue;
    Kiln__V1__DiagnosticList *list = kiln__v1__diagnostic_list__unpack(NULL, GRPC_SLICE_LENGTH(md->value),
                                                                       GRPC_SLICE_START_PTR(md->value));
    for (size_t k = 0; list && k < list->n_diagnostics; k++) {
      kiln_buf_append_char(&msg, '\n');
      kiln_cli_diagnostic_format(list->diagnostics[k], &msg);
      if (msg.len && msg.data[msg.len - 1] == '\n') msg.data[--msg.len] = '\0';
    }
    if (list) kiln__v1__diagnostic_list__free_unpacked(list, NULL);
  }
  kiln_status_t status = KILN_STATUS((kiln_status_code_t)code, "%s", msg.data ? msg.data : "");
  kiln_buf_deinit(&msg);
  return status;
}

kiln_status_t kiln_client_unary(kiln_client_t *client, const char *method, const ProtobufCMessage *request,
                                const ProtobufCMessageDescriptor *response_descriptor,
                                ProtobufCMessage **out_response) {
  *out_response = NULL;
  gpr_timespec deadline =
      gpr_time_add(gpr_now(GPR_CLOCK_REALTIME), gpr_time_from_millis(client->timeout_ms, GPR_TIMESPAN));
  grpc_slice method_slice = grpc_slice_from_copied_string(method);
  grpc_call *call = grpc_channel_create_call(client->channel, NULL, GRPC_PROPAGATE_DEFAULTS, client->cq,
                                             method_slice, NULL, deadline, NULL);
  grpc_slice_unref(method_slice);

  size_t size = protobuf_c_message_get_packed_size(request);
  grpc_slice request_slice = grpc_slice_malloc(size);
  protobuf_c_message_pack(request, GRPC_SLICE_START_PTR(request_slice));
  grpc_byte_buffer *request_buffer = grpc_raw_byte_buffer_create(&request_slice, 1);
  grpc_slice_unref(request_slice);

  grpc_metadata_array initial_md, trailing_md;
  grpc_metadata_array_init(&initial_md);
  grpc_metadata_array_init(&trailing_md);
  grpc_byte_buffer *response_buffer = NULL;
  grpc_status_code code = GRPC_STATUS_UNKNOWN;
  grpc_slice details = grpc_empty_slice();
  const char *error_string = NULL;

  char request_id[sizeof client->failed_request_id];
  next_request_id(client, request_id, sizeof request_id);
  grpc_metadata request_md[REQUEST_MD];
  grpc_op ops[6];
  memset(ops, 0, sizeof ops);
  set_request_id_md(client, &ops[0], request_md, request_id);
  ops[1].op = GRPC_OP_SEND_MESSAGE;
  ops[1].data.send_message.send_message = request_buffer;
  ops[2].op = GRPC_OP_SEND_CLOSE_FROM_CLIENT;
  ops[3].op = GRPC_OP_RECV_INITIAL_METADATA;
  ops[3].data.recv_initial_metadata.recv_initial_metadata = &initial_md;
  ops[4].op = GRPC_OP_RECV_MESSAGE;
  ops[4].data.recv_message.recv_message = &response_buffer;
  ops[5].op = GRPC_OP_RECV_STATUS_ON_CLIENT;
  ops[5].data.recv_status_on_client.trailing_metadata = &trailing_md;
  ops[5].data.recv_status_on_client.status = &code;
  ops[5].data.recv_status_on_client.status_details = &details;
  ops[5].data.recv_status_on_client.error_string = &error_string;

  kiln_status_t status = NULL;
  grpc_call_error err = grpc_call_start_batch(call, ops, 6, call, NULL);
  if (err != GRPC_CALL_OK) {
    status =
        KILN_STATUS(KILN_STATUS_INTERNAL, "%s: cannot start the call (grpc_call_error %d)", method, (int)err);
  } else {
    grpc_completion_queue_pluck(client->cq, call, gpr_inf_future(GPR_CLOCK_REALTIME), NULL);
    if (code != GRPC_STATUS_OK) {
      status = failed_status(code, details, &trailing_md);
    } else if (!response_buffer) {
      status = KILN_STATUS(KILN_STATUS_INTERNAL, "%s: kilnd answered OK without a message", method);
    } else {
      grpc_byte_buffer_reader reader;
      if (!grpc_byte_buffer_reader_init(&reader, response_buffer)) {
        status = KILN_STATUS(KILN_STATUS_INTERNAL, "%s: the answer cannot be read", method);
      } else {
        grpc_slice bytes = grpc_byte_buffer_reader_readall(&reader);
        grpc_byte_buffer_reader_destroy(&reader);
        *out_response = protobuf_c_message_unpack(response_descriptor, NULL, GRPC_SLICE_LENGTH(bytes),
                                                  GRPC_SLICE_START_PTR(bytes));
        if (!*out_response) {
          status = KILN_STATUS(KILN_STATUS_INTERNAL,
                               "%s: the answer is not a valid %s message; is kilnd the same "
                               "version as this client?",
                               method, response_descriptor->name);
        }
        grpc_slice_unref(bytes);
      }
    }
  }
  grpc_byte_buffer_destroy(request_buffer);
  if (response_buffer) grpc_byte_buffer_destroy(response_buffer);
  grpc_metadata_array_destroy(&initial_md);
  grpc_metadata_array_destroy(&trailing_md);
  grpc_slice_unref(details);
  gpr_free((void *)error_string);
  grpc_call_unref(call);
  if (status) memcpy(client->failed_request_id, request_id, sizeof request_id);
  return status;
}

/* ---- Streaming calls ------------------------------------------------------ */

struct kiln_client_stream_s {
  kiln_client_t *client;
  char *method;
  grpc_call *call;
  kiln_status_t start_error; /* the call could not be started; reported by read/finish */
  /* Tags: distinct addresses, one per kind of batch. */
  char tag_send, tag_status, tag_recv, tag_write;
  bool initial_md_requested;
  bool send_pending; /* the opening send batch: it waits for a connection */
  bool recv_pending;
  bool write_pending;             /* a write (or the half-close) started by write_begin */
  grpc_byte_buffer *write_buffer; /* the pending write's message */
  bool status_pending;
  bool ended; /* the final status is known (status_code/details valid) */
  bool write_failed;
  bool half_closed;
  grpc_metadata_array initial_md;
  grpc_metadata_array trailing_md;
  grpc_byte_buffer *recv_buffer;
  /* kiln_client_stream_read_split: the last message's slices and pieces. */
  grpc_slice *held;
  size_t n_held, cap_held;
  kiln_client_piece_t *pieces;
  size_t n_pieces, cap_pieces;
  grpc_status_code status_code;
  grpc_slice status_details;
  const char *error_string;
  grpc_byte_buffer *request_buffer;
  kiln_status_t decode_error; /* a message that did not decode ends the stream too */
  char request_id[40];        /* x-request-id of this call */
  grpc_metadata request_md[REQUEST_MD];
};

static grpc_byte_buffer *pack(const ProtobufCMessage *message) {
  size_t size = protobuf_c_message_get_packed_size(message);
  grpc_slice slice = grpc_slice_malloc(size);
  protobuf_c_message_pack(message, GRPC_SLICE_START_PTR(slice));
  grpc_byte_buffer *buffer = grpc_raw_byte_buffer_create(&slice, 1);
  grpc_slice_unref(slice);
  return buffer;
}

static void pluck(kiln_client_stream_t *s, void *tag) {
  grpc_completion_queue_pluck(s->client->cq, tag, gpr_inf_future(GPR_CLOCK_REALTIME), NULL);
}

static void wait_send(kiln_client_stream_t *s) {
  if (s->send_pending) {
    pluck(s, &s->tag_send);
    s->send_pending = false;
  }
}

/* Waits for the status batch (the call then has ended), and the opening send. */
static void wait_status(kiln_client_stream_t *s) {
  wait_send(s);
  if (s->status_pending) {
    pluck(s, &s->tag_status);
    s->status_pending = false;
    s->ended = true;
  }
}

static KILN_MUST_USE kiln_status_t final_status_of(const kiln_client_stream_t *s);

/* The final outcome as a fresh status (NULL for OK); a failure records the call's
 * request id as the client's last failed one. */
static KILN_MUST_USE kiln_status_t final_status(const kiln_client_stream_t *s) {
  kiln_status_t st = final_status_of(s);
  if (st) snprintf(s->client->failed_request_id, sizeof s->client->failed_request_id, "%s", s->request_id);
  return st;
}

static KILN_MUST_USE kiln_status_t final_status_of(const kiln_client_stream_t *s) {
  if (s->start_error) {
    return KILN_STATUS(kiln_status_code(s->start_error), "%s", kiln_status_message(s->start_error));
  }
  if (s->decode_error) {
    return KILN_STATUS(kiln_status_code(s->decode_error), "%s", kiln_status_message(s->decode_error));
  }
  if (s->status_code == GRPC_STATUS_OK) return NULL;
  return failed_status(s->status_code, s->status_details, &s->trailing_md);
}

kiln_client_stream_t *kiln_client_stream_open(kiln_client_t *client, const char *method,
                                              const ProtobufCMessage *request) {
  kiln_client_stream_t *s = kiln_calloc(1, sizeof *s);
  s->client = client;
  s->method = kiln_strdup(method);
  next_request_id(client, s->request_id, sizeof s->request_id);
  s->status_code = GRPC_STATUS_UNKNOWN;
  s->status_details = grpc_empty_slice();
  grpc_metadata_array_init(&s->initial_md);
  grpc_metadata_array_init(&s->trailing_md);
  gpr_timespec deadline =
      gpr_time_add(gpr_now(GPR_CLOCK_REALTIME), gpr_time_from_millis(client->timeout_ms, GPR_TIMESPAN));
  grpc_slice method_slice = grpc_slice_from_copied_string(method);
  s->call = grpc_channel_create_call(client->channel, NULL, GRPC_PROPAGATE_DEFAULTS, client->cq, method_slice,
                                     NULL, deadline, NULL);
  grpc_slice_unref(method_slice);

  grpc_op status_op;
  memset(&status_op, 0, sizeof status_op);
  status_op.op = GRPC_OP_RECV_STATUS_ON_CLIENT;
  status_op.data.recv_status_on_client.trailing_metadata = &s->trailing_md;
  status_op.data.recv_status_on_client.status = &s->status_code;
  status_op.data.recv_status_on_client.status_details = &s->status_details;
  status_op.data.recv_status_on_client.error_string = &s->error_string;
  grpc_call_error err = grpc_call_start_batch(s->call, &status_op, 1, &s->tag_status, NULL);
  if (err != GRPC_CALL_OK) {
    s->start_error =
        KILN_STATUS(KILN_STATUS_INTERNAL, "%s: cannot start the call (grpc_call_error %d)", method, (int)err);
    s->ended = true;
    return s;
  }
  s->status_pending = true;

  grpc_op ops[3];
  memset(ops, 0, sizeof ops);
  size_t n = 0;
  set_request_id_md(s->client, &ops[n++], s->request_md, s->request_id);
  grpc_byte_buffer *request_buffer = NULL;
  if (request) {
    request_buffer = pack(request);
    ops[n].op = GRPC_OP_SEND_MESSAGE;
    ops[n++].data.send_message.send_message = request_buffer;
    ops[n++].op = GRPC_OP_SEND_CLOSE_FROM_CLIENT;
    s->half_closed = true;
  }
  err = grpc_call_start_batch(s->call, ops, n, &s->tag_send, NULL);
  if (err != GRPC_CALL_OK) {
    s->start_error =
        KILN_STATUS(KILN_STATUS_INTERNAL, "%s: cannot start the call (grpc_call_error %d)", method, (int)err);
  } else {
    /* Not waited for here: it completes only once a connection is up, and a
     * bounded read must not block on that. A failed send is no error of its
     * own: the status batch says why. */
    s->send_pending = true;
  }
  s->request_buffer = request_buffer; /* the core reads it until the batch completes */
  return s;
}

/* Starts the receive batch (with the initial metadata the first time). */
static bool start_recv(kiln_client_stream_t *s) {
  grpc_op ops[2];
  memset(ops, 0, sizeof ops);
  size_t n = 0;
  if (!s->initial_md_requested) {
    ops[n].op = GRPC_OP_RECV_INITIAL_METADATA;
    ops[n++].data.recv_initial_metadata.recv_initial_metadata = &s->initial_md;
    s->initial_md_requested = true;
  }
  ops[n].op = GRPC_OP_RECV_MESSAGE;
  ops[n++].data.recv_message.recv_message = &s->recv_buffer;
  s->recv_buffer = NULL;
  if (grpc_call_start_batch(s->call, ops, n, &s->tag_recv, NULL) != GRPC_CALL_OK) return false;
  s->recv_pending = true;
  return true;
}

/* Decodes and frees s->recv_buffer. */
static ProtobufCMessage *decode(kiln_client_stream_t *s, const ProtobufCMessageDescriptor *descriptor) {
  ProtobufCMessage *message = NULL;
  grpc_byte_buffer_reader reader;
  if (!grpc_byte_buffer_reader_init(&reader, s->recv_buffer)) {
    s->decode_error = KILN_STATUS(KILN_STATUS_INTERNAL, "%s: a message from kilnd cannot be read", s->method);
  } else {
    grpc_slice bytes = grpc_byte_buffer_reader_readall(&reader);
    grpc_byte_buffer_reader_destroy(&reader);
    message =
        protobuf_c_message_unpack(descriptor, NULL, GRPC_SLICE_LENGTH(bytes), GRPC_SLICE_START_PTR(bytes));
    if (!message) {
      s->decode_error = KILN_STATUS(KILN_STATUS_INTERNAL,
                                    "%s: a message from kilnd is not a valid %s; is kilnd the same "
                                    "version as this client?",
                                    s->method, descriptor->name);
    }
    grpc_slice_unref(bytes);
  }
  grpc_byte_buffer_destroy(s->recv_buffer);
  s->recv_buffer = NULL;
  return message;
}

static void release_held(kiln_client_stream_t *s) {
  for (size_t i = 0; i < s->n_held; i++) grpc_slice_unref(s->held[i]);
  s->n_held = 0;
  s->n_pieces = 0;
}

/* A position in the held slices. */
typedef struct cursor_s {
  const kiln_client_stream_t *s;
  size_t slice;
  size_t off;
} cursor_t;

static bool cursor_byte(cursor_t *c, uint8_t *out) {
  while (c->slice < c->s->n_held && c->off == GRPC_SLICE_LENGTH(c->s->held[c->slice])) c->slice++, c->off = 0;
  if (c->slice == c->s->n_held) return false;
  *out = GRPC_SLICE_START_PTR(c->s->held[c->slice])[c->off++];
  return true;
}

static bool cursor_varint(cursor_t *c, kiln_buf_t *copy, uint64_t *out) {
  uint64_t v = 0;
  unsigned shift = 0;
  for (;;) {
    uint8_t b;
    if (!cursor_byte(c, &b)) return false;
    if (copy) kiln_buf_append(copy, &b, 1);
    int r = kiln_wire_varint_feed(&v, &shift, b);
    if (r < 0) return false;
    if (r > 0) {
      *out = v;
      return true;
    }
  }
}

/* Takes `len` bytes: appended to `copy`, or (copy NULL) recorded as pieces. */
static bool cursor_take(cursor_t *c, uint64_t len, kiln_buf_t *copy, kiln_client_stream_t *s) {
  while (len > 0) {
    while (c->slice < s->n_held && c->off == GRPC_SLICE_LENGTH(s->held[c->slice])) c->slice++, c->off = 0;
    if (c->slice == s->n_held) return false;
    size_t avail = GRPC_SLICE_LENGTH(s->held[c->slice]) - c->off;
    size_t n = len < avail ? (size_t)len : avail;
    const uint8_t *p = GRPC_SLICE_START_PTR(s->held[c->slice]) + c->off;
    if (copy) {
      kiln_buf_append(copy, p, n);
    } else {
      if (s->n_pieces == s->cap_pieces) {
        s->cap_pieces = s->cap_pieces ? s->cap_pieces * 2 : 16;
        s->pieces = kiln_realloc(s->pieces, s->cap_pieces * sizeof *s->pieces);
      }
      s->pieces[s->n_pieces++] = (kiln_client_piece_t){p, n};
    }
    c->off += n;
    len -= n;
  }
  return true;
}

/* Splits s->recv_buffer: the bytes field `field` into pieces, every other field
 * into a copy that is decoded as `descriptor`. Frees s->recv_buffer. */
static ProtobufCMessage *decode_split(kiln_client_stream_t *s, const ProtobufCMessageDescriptor *descriptor,
                                      uint32_t field) {
  release_held(s);
  grpc_byte_buffer_reader reader;
  bool ok = grpc_byte_buffer_reader_init(&reader, s->recv_buffer) != 0;
  if (ok) {
    grpc_slice slice;
    while (grpc_byte_buffer_reader_next(&reader, &slice)) {
      if (s->n_held == s->cap_held) {
        s->cap_held = s->cap_held ? s->cap_held * 2 : 64;
        s->held = kiln_realloc(s->held, s->cap_held * sizeof *s->held);
      }
      s->held[s->n_held++] = slice; /* a reference, released by the next read */
    }
    grpc_byte_buffer_reader_destroy(&reader);
  }
  grpc_byte_buffer_destroy(s->recv_buffer);
  s->recv_buffer = NULL;
  kiln_buf_t rest;
  kiln_buf_init(&rest);
  cursor_t c = {s, 0, 0};
  for (uint8_t probe; ok && cursor_byte(&c, &probe);) {
    c.off--; /* put it back: the key starts here */
    uint64_t key = 0, len = 0;
    size_t mark = rest.len;
    ok = cursor_varint(&c, &rest, &key);
    if (!ok) break;
    switch (key & 7) {
      case 0: ok = cursor_varint(&c, &rest, &len); break;
      case 1: ok = cursor_take(&c, 8, &rest, s); break;
      case 5: ok = cursor_take(&c, 4, &rest, s); break;
      case 2:
        if (key >> 3 == field) {
          rest.len = mark; /* the bulk field stays out of the copy */
          ok = cursor_varint(&c, NULL, &len) && cursor_take(&c, len, NULL, s);
        } else {
          ok = cursor_varint(&c, &rest, &len) && cursor_take(&c, len, &rest, s);
        }
        break;
      default: ok = false; break;
    }
  }
  ProtobufCMessage *message =
      ok ? protobuf_c_message_unpack(descriptor, NULL, rest.len,
                                     rest.len ? (const uint8_t *)rest.data : (const uint8_t *)"")
         : NULL;
  kiln_buf_deinit(&rest);
  if (!message) {
    release_held(s);
    s->decode_error = KILN_STATUS(KILN_STATUS_INTERNAL,
                                  "%s: a message from kilnd is not a valid %s; is kilnd the same "
                                  "version as this client?",
                                  s->method, descriptor->name);
  }
  return message;
}

/* A pluck deadline `wait_ms` from now (< 0: none). 0 is "only what is there": an
 * infinitely past deadline, which gRPC polls with a zero timeout; a deadline of
 * "now" is rounded up to a 1 ms epoll wait, and a bulk stream that checks for
 * results between writes would spend a millisecond per check. */
static gpr_timespec wait_until(int64_t wait_ms) {
  if (wait_ms < 0) return gpr_inf_future(GPR_CLOCK_REALTIME);
  if (wait_ms == 0) return gpr_inf_past(GPR_CLOCK_REALTIME);
  return gpr_time_add(gpr_now(GPR_CLOCK_REALTIME), gpr_time_from_millis(wait_ms, GPR_TIMESPAN));
}

/* The body of both reads: `split_field` 0 decodes whole. */
static KILN_MUST_USE kiln_status_t read_message(kiln_client_stream_t *s,
                                                const ProtobufCMessageDescriptor *descriptor,
                                                uint32_t split_field, int64_t wait_ms,
                                                ProtobufCMessage **out_message, bool *out_timed_out);

kiln_status_t kiln_client_stream_read(kiln_client_stream_t *stream,
                                      const ProtobufCMessageDescriptor *descriptor, int64_t wait_ms,
                                      ProtobufCMessage **out_message, bool *out_timed_out) {
  return read_message(stream, descriptor, 0, wait_ms, out_message, out_timed_out);
}

kiln_status_t kiln_client_stream_read_split(kiln_client_stream_t *stream,
                                            const ProtobufCMessageDescriptor *descriptor,
                                            uint32_t bytes_field, int64_t wait_ms,
                                            ProtobufCMessage **out_message,
                                            const kiln_client_piece_t **out_pieces, size_t *out_count,
                                            bool *out_timed_out) {
  kiln_status_t st = read_message(stream, descriptor, bytes_field ? bytes_field : UINT32_MAX, wait_ms,
                                  out_message, out_timed_out);
  *out_pieces = *out_message ? stream->pieces : NULL;
  *out_count = *out_message ? stream->n_pieces : 0;
  return st;
}

static KILN_MUST_USE kiln_status_t read_message(kiln_client_stream_t *s,
                                                const ProtobufCMessageDescriptor *descriptor,
                                                uint32_t split_field, int64_t wait_ms,
                                                ProtobufCMessage **out_message, bool *out_timed_out) {
  *out_message = NULL;
  *out_timed_out = false;
  if (s->start_error || s->decode_error) return final_status(s);
  if (s->ended && !s->recv_pending) return final_status(s);
  if (!s->recv_pending && !start_recv(s)) {
    wait_status(s);
    return final_status(s);
  }
  gpr_timespec until = wait_until(wait_ms);
  grpc_event ev = grpc_completion_queue_pluck(s->client->cq, &s->tag_recv, until, NULL);
  if (ev.type == GRPC_QUEUE_TIMEOUT) {
    *out_timed_out = true;
    return NULL;
  }
  s->recv_pending = false;
  if (ev.success && s->recv_buffer) {
    *out_message = split_field ? decode_split(s, descriptor, split_field) : decode(s, descriptor);
    if (*out_message) return NULL;
    /* Undecodable: nothing more can be trusted; end the call. */
    grpc_call_cancel(s->call, NULL);
    wait_status(s);
    return final_status(s);
  }
  /* No message: the stream ended (or the call failed); its status says which. */
  wait_status(s);
  return final_status(s);
}

/* Ends the pending write once its batch was plucked with `success`. */
static void write_completed(kiln_client_stream_t *s, bool success) {
  s->write_pending = false;
  if (s->write_buffer) grpc_byte_buffer_destroy(s->write_buffer);
  s->write_buffer = NULL;
  if (!success) s->write_failed = true;
}

bool kiln_client_stream_write_begin(kiln_client_stream_t *stream, const ProtobufCMessage *message) {
  kiln_client_stream_t *s = stream;
  if (s->start_error || s->write_failed || s->half_closed || s->ended || s->write_pending) return false;
  wait_send(s); /* the opening batch first: it completes once the connection is up */
  grpc_op op;
  memset(&op, 0, sizeof op);
  if (message) {
    s->write_buffer = pack(message);
    op.op = GRPC_OP_SEND_MESSAGE;
    op.data.send_message.send_message = s->write_buffer;
  } else {
    op.op = GRPC_OP_SEND_CLOSE_FROM_CLIENT;
    s->half_closed = true;
  }
  if (grpc_call_start_batch(s->call, &op, 1, &s->tag_write, NULL) != GRPC_CALL_OK) {
    write_completed(s, false);
    return false;
  }
  s->write_pending = true;
  return true;
}

bool kiln_client_stream_write_poll(kiln_client_stream_t *stream, int64_t wait_ms, bool *out_ok) {
  kiln_client_stream_t *s = stream;
  if (s->write_pending) {
    gpr_timespec until = wait_until(wait_ms);
    grpc_event ev = grpc_completion_queue_pluck(s->client->cq, &s->tag_write, until, NULL);
    if (ev.type == GRPC_QUEUE_TIMEOUT) return false;
    write_completed(s, ev.success != 0);
  }
  if (out_ok) *out_ok = !s->write_failed && !s->start_error;
  return true;
}

bool kiln_client_stream_write(kiln_client_stream_t *stream, const ProtobufCMessage *message) {
  if (!kiln_client_stream_write_begin(stream, message)) return false;
  bool ok = false;
  kiln_client_stream_write_poll(stream, -1, &ok);
  return ok;
}

kiln_status_t kiln_client_stream_finish(kiln_client_stream_t *stream,
                                        const ProtobufCMessageDescriptor *descriptor,
                                        ProtobufCMessage **out_response) {
  kiln_client_stream_t *s = stream;
  *out_response = NULL;
  if (s->start_error) return final_status(s);
  kiln_client_stream_write_poll(s, -1, NULL);
  wait_send(s);
  if (!s->half_closed && !s->ended) {
    grpc_op op;
    memset(&op, 0, sizeof op);
    op.op = GRPC_OP_SEND_CLOSE_FROM_CLIENT;
    if (grpc_call_start_batch(s->call, &op, 1, &s->tag_write, NULL) == GRPC_CALL_OK) {
      pluck(s, &s->tag_write); /* fails harmlessly when the server has already answered */
    }
    s->half_closed = true;
  }
  ProtobufCMessage *response = NULL;
  bool timed_out = false;
  kiln_status_t status = kiln_client_stream_read(s, descriptor, -1, &response, &timed_out);
  if (status) return status;
  if (!response) {
    return KILN_STATUS(KILN_STATUS_INTERNAL, "%s: kilnd answered OK without a message", s->method);
  }
  /* The single response is followed by the status. */
  wait_status(s);
  status = final_status(s);
  if (status) {
    protobuf_c_message_free_unpacked(response, NULL);
    return status;
  }
  *out_response = response;
  return NULL;
}

void kiln_client_stream_cancel(kiln_client_stream_t *stream) {
  if (stream && stream->call && !stream->ended) grpc_call_cancel(stream->call, NULL);
}

const void *kiln_client_stream_trailer(const kiln_client_stream_t *stream, const char *key, size_t *out_len) {
  *out_len = 0;
  if (!stream->ended) return NULL;
  for (size_t i = 0; i < stream->trailing_md.count; i++) {
    const grpc_metadata *md = &stream->trailing_md.metadata[i];
    if (grpc_slice_str_cmp(md->key, key) == 0) {
      *out_len = GRPC_SLICE_LENGTH(md->value);
      return GRPC_SLICE_START_PTR(md->value);
    }
  }
  return NULL;
}

void kiln_client_stream_destroy(kiln_client_stream_t *stream) {
  kiln_client_stream_t *s = stream;
  if (!s) return;
  if (s->call) {
    if (s->recv_pending || s->status_pending || s->send_pending || s->write_pending) {
      grpc_call_cancel(s->call, NULL);
    }
    kiln_client_stream_write_poll(s, -1, NULL);
    if (s->recv_pending) {
      pluck(s, &s->tag_recv);
      s->recv_pending = false;
      if (s->recv_buffer) grpc_byte_buffer_destroy(s->recv_buffer);
    }
    wait_status(s);
    grpc_call_unref(s->call);
  }
  if (s->request_buffer) grpc_byte_buffer_destroy(s->request_buffer);
  grpc_metadata_array_destroy(&s->initial_md);
  grpc_metadata_array_destroy(&s->trailing_md);
  grpc_slice_unref(s->status_details);
  gpr_free((void *)s->error_string);
  kiln_status_free(s->start_error);
  kiln_status_free(s->decode_error);
  release_held(s);
  kiln_free(s->held);
  kiln_free(s->pieces);
  kiln_free(s->method);
  kiln_free(s);
}
