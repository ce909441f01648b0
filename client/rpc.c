/* Blocking unary calls over the gRPC C core: one pluck completion queue per client;
 * each call is one batch with every op, waited for by its tag. */
#include "client/rpc.h"

#include <grpc/byte_buffer_reader.h>
#include <grpc/grpc.h>
#include <grpc/grpc_security.h>
#include <grpc/support/alloc.h>
#include <grpc/support/time.h>
#include <string.h>

#include "base/alloc.h"

struct kiln_client_s {
  char *address;
  grpc_channel *channel;
  grpc_completion_queue *cq;
  int64_t timeout_ms;
};

kiln_status_t kiln_client_create(const char *address, int64_t timeout_ms,
                                 uint64_t max_message_bytes, kiln_client_t **out_client) {
  *out_client = NULL;
  if (!address || !*address) {
    return KILN_STATUS(KILN_STATUS_INVALID_ARGUMENT,
                       "no daemon address: pass --addr HOST:PORT or set KILN_ADDR");
  }
  grpc_init();
  kiln_client_t *client = kiln_calloc(1, sizeof *client);
  client->address = kiln_strdup(address);
  client->timeout_ms = timeout_ms;
  grpc_arg args[1];
  memset(args, 0, sizeof args);
  args[0].type = GRPC_ARG_INTEGER;
  args[0].key = (char *)GRPC_ARG_MAX_RECEIVE_MESSAGE_LENGTH;
  args[0].value.integer = max_message_bytes > INT32_MAX ? INT32_MAX : (int)max_message_bytes;
  grpc_channel_args channel_args = {1, args};
  grpc_channel_credentials *creds = grpc_insecure_credentials_create();
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
  while (grpc_completion_queue_pluck(client->cq, NULL, gpr_inf_future(GPR_CLOCK_REALTIME), NULL)
             .type != GRPC_QUEUE_SHUTDOWN) {
  }
  grpc_completion_queue_destroy(client->cq);
  kiln_free(client->address);
  kiln_free(client);
  grpc_shutdown();
}

const char *kiln_client_address(const kiln_client_t *client) { return client->address; }

void kiln_client_set_timeout(kiln_client_t *client, int64_t timeout_ms) {
  client->timeout_ms = timeout_ms;
}

int64_t kiln_client_timeout(const kiln_client_t *client) { return client->timeout_ms; }

kiln_status_t kiln_client_unary(kiln_client_t *client, const char *method,
                                const ProtobufCMessage *request,
                                const ProtobufCMessageDescriptor *response_descriptor,
                                ProtobufCMessage **out_response) {
  *out_response = NULL;
  gpr_timespec deadline = gpr_time_add(gpr_now(GPR_CLOCK_REALTIME),
                                       gpr_time_from_millis(client->timeout_ms, GPR_TIMESPAN));
  grpc_slice method_slice = grpc_slice_from_copied_string(method);
  grpc_call *call = grpc_channel_create_call(client->channel, NULL, GRPC_PROPAGATE_DEFAULTS,
                                             client->cq, method_slice, NULL, deadline, NULL);
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

  grpc_op ops[6];
  memset(ops, 0, sizeof ops);
  ops[0].op = GRPC_OP_SEND_INITIAL_METADATA;
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
    status = KILN_STATUS(KILN_STATUS_INTERNAL, "%s: cannot start the call (grpc_call_error %d)",
                         method, (int)err);
  } else {
    grpc_completion_queue_pluck(client->cq, call, gpr_inf_future(GPR_CLOCK_REALTIME), NULL);
    if (code != GRPC_STATUS_OK) {
      char *text = grpc_slice_to_c_string(details);
      status = KILN_STATUS((kiln_status_code_t)code, "%s", *text ? text : "(no message)");
      gpr_free(text);
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
  return status;
}
