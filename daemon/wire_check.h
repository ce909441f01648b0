/* What protobuf-c does not check when it decodes a request: every string field
 * (at any depth) is valid UTF-8 without NUL bytes, as protobuf requires of
 * `string` (protobuf-c keeps the bytes, and cuts them at the first NUL: target
 * "sm_89\0evil" read as "sm_89"), and every enum field holds one of its enum's
 * values (priority 99 is not a priority). Run over the raw request bytes before
 * decoding, on every method; INVALID_ARGUMENT names the field's path
 * ("labels[1].key"). Bytes that are not a well-formed message are left to the
 * decoder, which refuses them itself. */
#ifndef KILN_DAEMON_WIRE_CHECK_H_
#define KILN_DAEMON_WIRE_CHECK_H_

#include <protobuf-c/protobuf-c.h>
#include <stddef.h>
#include <stdint.h>

#include "base/status.h"

KILN_MUST_USE kiln_status_t kilnd_wire_check(const ProtobufCMessageDescriptor *descriptor,
                                             const uint8_t *data, size_t len);

#endif  // KILN_DAEMON_WIRE_CHECK_H_
