/* protobuf-c message -> json-c, driven by descriptors. */
#include "client/json.h"

#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include "base/buf.h"

static json_object *base64(const ProtobufCBinaryData *data) {
  static const char alphabet[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
  kiln_buf_t out;
  kiln_buf_init(&out);
  size_t i = 0;
  for (; i + 2 < data->len; i += 3) {
    uint32_t v = (uint32_t)data->data[i] << 16 | (uint32_t)data->data[i + 1] << 8 | data->data[i + 2];
    char quad[4] = {alphabet[v >> 18], alphabet[(v >> 12) & 63], alphabet[(v >> 6) & 63], alphabet[v & 63]};
    kiln_buf_append(&out, quad, 4);
  }
  if (i < data->len) {
    uint32_t v = (uint32_t)data->data[i] << 16 | (i + 1 < data->len ? (uint32_t)data->data[i + 1] << 8 : 0);
    char quad[4] = {alphabet[v >> 18], alphabet[(v >> 12) & 63],
                    i + 1 < data->len ? alphabet[(v >> 6) & 63] : '=', '='};
    kiln_buf_append(&out, quad, 4);
  }
  json_object *s = json_object_new_string_len(out.data, (int)out.len);
  kiln_buf_deinit(&out);
  return s;
}

static json_object *scalar(const ProtobufCFieldDescriptor *field, const void *p) {
  switch (field->type) {
    case PROTOBUF_C_TYPE_INT32:
    case PROTOBUF_C_TYPE_SINT32:
    case PROTOBUF_C_TYPE_SFIXED32: return json_object_new_int64(*(const int32_t *)p);
    case PROTOBUF_C_TYPE_UINT32:
    case PROTOBUF_C_TYPE_FIXED32: return json_object_new_int64(*(const uint32_t *)p);
    case PROTOBUF_C_TYPE_INT64:
    case PROTOBUF_C_TYPE_SINT64:
    case PROTOBUF_C_TYPE_SFIXED64: return json_object_new_int64(*(const int64_t *)p);
    case PROTOBUF_C_TYPE_UINT64:
    case PROTOBUF_C_TYPE_FIXED64: return json_object_new_uint64(*(const uint64_t *)p);
    case PROTOBUF_C_TYPE_FLOAT: return json_object_new_double(*(const float *)p);
    case PROTOBUF_C_TYPE_DOUBLE: return json_object_new_double(*(const double *)p);
    case PROTOBUF_C_TYPE_BOOL: return json_object_new_boolean(*(const protobuf_c_boolean *)p);
    case PROTOBUF_C_TYPE_ENUM: {
      int value = *(const int *)p;
      const ProtobufCEnumValue *ev =
          protobuf_c_enum_descriptor_get_value((const ProtobufCEnumDescriptor *)field->descriptor, value);
      return ev ? json_object_new_string(ev->name) : json_object_new_int(value);
    }
    case PROTOBUF_C_TYPE_STRING: {
      const char *s = *(char *const *)p;
      return json_object_new_string(s ? s : "");
    }
    case PROTOBUF_C_TYPE_BYTES: return base64((const ProtobufCBinaryData *)p);
    case PROTOBUF_C_TYPE_MESSAGE: {
      const ProtobufCMessage *m = *(ProtobufCMessage *const *)p;
      return m ? kiln_client_json_from_message(m) : NULL;
    }
  }
  return NULL;
}

static size_t element_size(const ProtobufCFieldDescriptor *field) {
  switch (field->type) {
    case PROTOBUF_C_TYPE_INT32:
    case PROTOBUF_C_TYPE_SINT32:
    case PROTOBUF_C_TYPE_SFIXED32:
    case PROTOBUF_C_TYPE_UINT32:
    case PROTOBUF_C_TYPE_FIXED32:
    case PROTOBUF_C_TYPE_FLOAT:
    case PROTOBUF_C_TYPE_ENUM: return 4;
    case PROTOBUF_C_TYPE_INT64:
    case PROTOBUF_C_TYPE_SINT64:
    case PROTOBUF_C_TYPE_SFIXED64:
    case PROTOBUF_C_TYPE_UINT64:
    case PROTOBUF_C_TYPE_FIXED64:
    case PROTOBUF_C_TYPE_DOUBLE: return 8;
    case PROTOBUF_C_TYPE_BOOL: return sizeof(protobuf_c_boolean);
    case PROTOBUF_C_TYPE_STRING: return sizeof(char *);
    case PROTOBUF_C_TYPE_BYTES: return sizeof(ProtobufCBinaryData);
    case PROTOBUF_C_TYPE_MESSAGE: return sizeof(ProtobufCMessage *);
  }
  return 0;
}

/* protobuf-c represents map<K,V> as a repeated *Entry message with key and value. */
static int is_map_entry(const ProtobufCFieldDescriptor *field) {
  if (field->type != PROTOBUF_C_TYPE_MESSAGE || field->label != PROTOBUF_C_LABEL_REPEATED) return 0;
  const ProtobufCMessageDescriptor *d = field->descriptor;
  size_t len = strlen(d->name);
  return d->n_fields == 2 && len > 5 && strcmp(d->name + len - 5, "Entry") == 0 &&
         strcmp(d->fields[0].name, "key") == 0 && strcmp(d->fields[1].name, "value") == 0 &&
         d->fields[0].type == PROTOBUF_C_TYPE_STRING;
}

json_object *kiln_client_json_from_message(const ProtobufCMessage *message) {
  json_object *obj = json_object_new_object();
  const ProtobufCMessageDescriptor *d = message->descriptor;
  const char *base = (const char *)message;
  for (unsigned i = 0; i < d->n_fields; i++) {
    const ProtobufCFieldDescriptor *f = &d->fields[i];
    const void *member = base + f->offset;
    if (f->flags & PROTOBUF_C_FIELD_FLAG_ONEOF) {
      /* Only the member that is set appears. */
      uint32_t which = *(const uint32_t *)(base + f->quantifier_offset);
      if (which != f->id) continue;
    }
    if (f->label == PROTOBUF_C_LABEL_REPEATED) {
      size_t n = *(const size_t *)(base + f->quantifier_offset);
      const char *elems = *(char *const *)member;
      if (is_map_entry(f)) {
        json_object *map = json_object_new_object();
        for (size_t k = 0; k < n; k++) {
          const ProtobufCMessage *entry = ((ProtobufCMessage *const *)elems)[k];
          const ProtobufCMessageDescriptor *ed = entry->descriptor;
          const char *key = *(char *const *)((const char *)entry + ed->fields[0].offset);
          json_object *value = scalar(&ed->fields[1], (const char *)entry + ed->fields[1].offset);
          json_object_object_add(map, key ? key : "", value);
        }
        json_object_object_add(obj, f->name, map);
        continue;
      }
      json_object *array = json_object_new_array();
      size_t size = element_size(f);
      for (size_t k = 0; k < n; k++) json_object_array_add(array, scalar(f, elems + k * size));
      json_object_object_add(obj, f->name, array);
    } else {
      json_object_object_add(obj, f->name, scalar(f, member));
    }
  }
  return obj;
}

void kiln_client_json_print(json_object *object) {
  puts(json_object_to_json_string_ext(
      object, JSON_C_TO_STRING_PRETTY | JSON_C_TO_STRING_SPACED | JSON_C_TO_STRING_NOSLASHESCAPE));
  json_object_put(object);
}
