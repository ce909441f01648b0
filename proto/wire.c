/* Varints and keys of the protobuf wire format (wire.h). */
#include "proto/wire.h"

size_t kiln_wire_put_varint(uint8_t *out, uint64_t v) {
  size_t n = 0;
  while (v >= 0x80) {
    out[n++] = (uint8_t)(v | 0x80);
    v >>= 7;
  }
  out[n++] = (uint8_t)v;
  return n;
}

size_t kiln_wire_put_key(uint8_t *out, uint32_t field, kiln_wire_type_t type) {
  return kiln_wire_put_varint(out, (uint64_t)field << 3 | (uint64_t)type);
}

int kiln_wire_varint_feed(uint64_t *acc, unsigned *shift, uint8_t byte) {
  if (*shift >= 7 * KILN_WIRE_VARINT_MAX) return -1;
  *acc |= (uint64_t)(byte & 0x7f) << *shift;
  *shift += 7;
  if (byte & 0x80) return *shift >= 7 * KILN_WIRE_VARINT_MAX ? -1 : 0;
  return 1;
}

bool kiln_wire_get_varint(const uint8_t **p, const uint8_t *end, uint64_t *out) {
  uint64_t v = 0;
  unsigned shift = 0;
  while (*p < end) {
    int r = kiln_wire_varint_feed(&v, &shift, *(*p)++);
    if (r < 0) return false;
    if (r > 0) {
      *out = v;
      return true;
    }
  }
  return false;
}
