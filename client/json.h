/* Machine output: any protobuf-c message as a json-c object, field by field from
 * the message descriptor, so every command's --json follows kiln.proto exactly:
 * field names as in the .proto (snake_case), enums by value name, bytes as base64,
 * 64-bit integers as JSON numbers, maps as objects; every field is present (proto3
 * defaults included) so scripts need not guess. Not thread-safe (json-c objects
 * have one owner). */
#ifndef KILN_CLIENT_JSON_H
#define KILN_CLIENT_JSON_H

#include <json-c/json.h>
#include <protobuf-c/protobuf-c.h>

/* Returns a new object owned by the caller (json_object_put). */
json_object *kiln_client_json_from_message(const ProtobufCMessage *message);

/* Prints `object` pretty-printed with a trailing newline to stdout and releases it. */
void kiln_client_json_print(json_object *object);

#endif /* KILN_CLIENT_JSON_H */
