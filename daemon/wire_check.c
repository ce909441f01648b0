/* The request check before decoding (wire_check.h): a walk over the protobuf wire
 * format, guided by the message descriptors protobuf-c generated. */
#include "daemon/wire_check.h"

#include <stdbool.h>
#include <stdio.h>
#include <string.h>

#include "daemon/source_check.h"
#include "proto/wire.h"

/* Nesting deeper than kiln's messages go is left to the decoder. */
#define MAX_DEPTH 16

typedef struct reader_s {
  const uint8_t *p, *end;
} reader_t;

static bool read_varint(reader_t *r, uint64_t *out) { return kiln_wire_get_varint(&r->p, r->end, out); }

/* The path of a field for messages: "outer.field" or "outer.field[i]". */
static void field_path(char *out, size_t cap, const char *outer, const ProtobufCFieldDescriptor *f,
                       const unsigned *index) {
  char at[24] = "";
  if (f->label == PROTOBUF_C_LABEL_REPEATED && index) snprintf(at, sizeof at, "[%u]", *index);
  snprintf(out, cap, "%s%s%s%s", outer, *outer ? "." : "", f->name, at);
}

/* A field's place in the request, built only when a refusal names it or a nested
 * message needs it as its prefix: most fields pass without one. */
typedef struct place_s {
  const char *outer;
  const ProtobufCFieldDescriptor *f;
  unsigned index;
  char path[256];
} place_t;

static const char *place_path(place_t *at) {
  if (!at->path[0]) field_path(at->path, sizeof at->path, at->outer, at->f, &at->index);
  return at->path;
}

static KILN_MUST_USE kiln_status_t check_enum(place_t *at, uint64_t raw) {
  const ProtobufCEnumDescriptor *e = at->f->descriptor;
  int32_t value = (int32_t)raw;
  if ((uint64_t)(int64_t)value != raw || !protobuf_c_enum_descriptor_get_value(e, value)) {
    return KILN_STATUS(KILN_STATUS_INVALID_ARGUMENT, "%s: %lld is not a value of %s", place_path(at),
                       (long long)(int64_t)raw, e->name);
  }
  return NULL;
}

static KILN_MUST_USE kiln_status_t walk(const ProtobufCMessageDescriptor *d, const uint8_t *data, size_t len,
                                        const char *outer, int depth) {
  if (depth > MAX_DEPTH) return NULL;
  reader_t r = {data, data + len};
  /* Occurrences per field so far, for the [i] of repeated ones. */
  unsigned seen[64] = {0};
  while (r.p < r.end) {
    uint64_t key;
    if (!read_varint(&r, &key)) return NULL; /* malformed: the decoder says so */
    uint32_t number = (uint32_t)(key >> 3), wire = (uint32_t)(key & 7);
    const ProtobufCFieldDescriptor *f = protobuf_c_message_descriptor_get_field(d, (unsigned)number);
    unsigned index = 0;
    if (f) {
      size_t slot = (size_t)(f - d->fields);
      if (slot < sizeof seen / sizeof seen[0]) index = seen[slot]++;
    }
    place_t at; /* no initializer: the 256-byte path stays unwritten until asked for */
    at.outer = outer;
    at.f = f;
    at.index = index;
    at.path[0] = '\0';
    uint64_t v;
    switch (wire) {
      case 0: /* varint */
        if (!read_varint(&r, &v)) return NULL;
        if (f && f->type == PROTOBUF_C_TYPE_ENUM) KILN_RETURN_IF_ERROR(check_enum(&at, v));
        break;
      case 1:
        if (r.end - r.p < 8) return NULL;
        r.p += 8;
        break;
      case 5:
        if (r.end - r.p < 4) return NULL;
        r.p += 4;
        break;
      case 2: {
        if (!read_varint(&r, &v) || v > (uint64_t)(r.end - r.p)) return NULL;
        const uint8_t *body = r.p;
        r.p += v;
        if (!f) break; /* an unknown field: kept by the decoder, not ours to judge */
        if (f->type == PROTOBUF_C_TYPE_STRING) {
          size_t bad = 0;
          if (!kilnd_text_is_utf8(body, (size_t)v, &bad)) {
            bool nul = bad < v && body[bad] == 0;
            return KILN_STATUS(KILN_STATUS_INVALID_ARGUMENT,
                               "%s: %s at byte %zu (protobuf strings are UTF-8 text)", place_path(&at),
                               nul ? "a NUL byte" : "not valid UTF-8", bad);
          }
        } else if (f->type == PROTOBUF_C_TYPE_MESSAGE) {
          KILN_RETURN_IF_ERROR(walk(f->descriptor, body, (size_t)v, place_path(&at), depth + 1));
        } else if (f->type == PROTOBUF_C_TYPE_ENUM) { /* packed repeated enum */
          reader_t packed = {body, body + v};
          while (packed.p < packed.end) {
            if (!read_varint(&packed, &v)) return NULL;
            KILN_RETURN_IF_ERROR(check_enum(&at, v));
          }
        }
        break;
      }
      default: return NULL; /* groups or garbage: the decoder's call */
    }
  }
  return NULL;
}

kiln_status_t kilnd_wire_check(const ProtobufCMessageDescriptor *descriptor, const uint8_t *data,
                               size_t len) {
  return walk(descriptor, data, len, "", 0);
}
