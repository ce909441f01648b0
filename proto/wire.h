/* The protobuf wire format's two primitives that kiln writes and walks by hand
 * (protobuf-c's generated code does the rest): base-128 varints and field keys.
 * Used where a message is framed around bytes that are not copied (GetArtifact's
 * chunks), checked before decoding (daemon/wire_check.c), or read from a stream
 * of slices (client/rpc.c). Pure functions; thread-safe. */
#ifndef KILN_PROTO_WIRE_H
#define KILN_PROTO_WIRE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* The most bytes a varint takes (a uint64_t, 7 bits a byte). */
#define KILN_WIRE_VARINT_MAX 10

/* Wire types (the low three bits of a key). */
typedef enum kiln_wire_type_e {
  KILN_WIRE_VARINT = 0,
  KILN_WIRE_I64 = 1,
  KILN_WIRE_LEN = 2, /* length-delimited: bytes, strings, messages, packed */
  KILN_WIRE_I32 = 5,
} kiln_wire_type_t;

/* Writes `v` as a varint at `out` (room for KILN_WIRE_VARINT_MAX bytes); returns
 * the bytes written. */
size_t kiln_wire_put_varint(uint8_t *out, uint64_t v);

/* Writes the key of field `field` with wire type `type`; returns the bytes written
 * (at most KILN_WIRE_VARINT_MAX). */
size_t kiln_wire_put_key(uint8_t *out, uint32_t field, kiln_wire_type_t type);

/* Decodes one varint from bytes fed one at a time: start with *acc and *shift 0
 * and feed each byte. 1: the varint ends with this byte, its value in *acc; 0: more
 * bytes follow; -1: it runs past KILN_WIRE_VARINT_MAX bytes (malformed). */
int kiln_wire_varint_feed(uint64_t *acc, unsigned *shift, uint8_t byte);

/* Reads one varint from [*p, end), advancing *p past it. False when the bytes end
 * first or it is malformed (*p is then unspecified). */
bool kiln_wire_get_varint(const uint8_t **p, const uint8_t *end, uint64_t *out);

#endif /* KILN_PROTO_WIRE_H */
