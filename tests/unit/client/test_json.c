/* Unit tests for client/json: protobuf-c messages from kiln.proto turned into
 * json-c objects. GetServerInfoResponse with a nested CompilerIdentity and
 * repeated TargetInfo (field names as in the .proto, enum value names, uint32,
 * int64 and uint64 extremes as exact JSON numbers, empty repeated fields as [],
 * every field present); GetStatsResponse with nested repeated messages and unset
 * message fields; CompileRequest's oneof (only the set member, or none), its
 * map<string,string> as an object ({} when empty) and its bytes as base64
 * (lengths 0..6 against RFC 4648 vectors, and the '+' '/' characters);
 * PutSourceChunk's bytes and message oneof; JobEvent's message oneof; a recursive
 * Diagnostic; float, bool, negative int32 and an enum value the descriptor does
 * not know; and kiln_client_json_print writing parseable JSON plus a newline. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <json-c/json.h>

#include "client/json.h"
#include "kiln/v1/kiln.pb-c.h"

/* ---- Helpers ------------------------------------------------------------- */

/* The member `key` of `obj`; fails the test when absent. May be a JSON null. */
static json_object *member(json_object *obj, const char *key) {
  assert_non_null(obj);
  assert_true(json_object_is_type(obj, json_type_object));
  json_object *value = NULL;
  if (!json_object_object_get_ex(obj, key, &value)) {
    fail_msg("member \"%s\" missing in %s", key, json_object_to_json_string(obj));
  }
  return value;
}

static bool has_member(json_object *obj, const char *key) {
  return json_object_object_get_ex(obj, key, NULL);
}

static void assert_json_string(json_object *obj, const char *key, const char *expected) {
  json_object *v = member(obj, key);
  if (!json_object_is_type(v, json_type_string)) {
    fail_msg("\"%s\" is %s, not a string", key, json_object_to_json_string(v));
  }
  assert_string_equal(json_object_get_string(v), expected);
}

static void assert_json_int(json_object *obj, const char *key, int64_t expected) {
  json_object *v = member(obj, key);
  if (!json_object_is_type(v, json_type_int)) {
    fail_msg("\"%s\" is %s, not an integer", key, json_object_to_json_string(v));
  }
  assert_int_equal(json_object_get_int64(v), expected);
}

static void assert_json_uint(json_object *obj, const char *key, uint64_t expected) {
  json_object *v = member(obj, key);
  if (!json_object_is_type(v, json_type_int)) {
    fail_msg("\"%s\" is %s, not an integer", key, json_object_to_json_string(v));
  }
  assert_true(json_object_get_uint64(v) == expected);
}

static void assert_json_bool(json_object *obj, const char *key, bool expected) {
  json_object *v = member(obj, key);
  assert_true(json_object_is_type(v, json_type_boolean));
  assert_int_equal(json_object_get_boolean(v), expected);
}

static json_object *assert_json_array(json_object *obj, const char *key, size_t len) {
  json_object *v = member(obj, key);
  if (!json_object_is_type(v, json_type_array)) {
    fail_msg("\"%s\" is %s, not an array", key, json_object_to_json_string(v));
  }
  assert_int_equal(json_object_array_length(v), len);
  return v;
}

/* Every field of the descriptor is a member, and nothing else. */
static void assert_all_fields(json_object *obj, const ProtobufCMessageDescriptor *d) {
  size_t expected = 0;
  for (unsigned i = 0; i < d->n_fields; i++) {
    if (d->fields[i].flags & PROTOBUF_C_FIELD_FLAG_ONEOF) continue; /* checked per test */
    expected++;
    if (!has_member(obj, d->fields[i].name)) {
      fail_msg("%s: field \"%s\" missing", d->name, d->fields[i].name);
    }
  }
  size_t present = 0;
  json_object_object_foreach(obj, key, val) {
    (void)val;
    const ProtobufCFieldDescriptor *f = protobuf_c_message_descriptor_get_field_by_name(d, key);
    if (!f) fail_msg("%s: unexpected member \"%s\"", d->name, key);
    if (!(f->flags & PROTOBUF_C_FIELD_FLAG_ONEOF)) present++;
  }
  assert_int_equal(present, expected);
}

/* Converts, checks that the serialized text parses back to an equal object, and
 * returns the object (release with json_object_put). */
static json_object *to_json(const ProtobufCMessage *m) {
  json_object *obj = kiln_client_json_from_message(m);
  assert_non_null(obj);
  assert_true(json_object_is_type(obj, json_type_object));
  const char *text = json_object_to_json_string_ext(obj, JSON_C_TO_STRING_PLAIN);
  json_object *reparsed = json_tokener_parse(text);
  if (!reparsed) fail_msg("output does not parse: %s", text);
  assert_true(json_object_equal(obj, reparsed));
  json_object_put(reparsed);
  return obj;
}

/* ---- GetServerInfoResponse ----------------------------------------------- */

static void test_server_info(void **state) {
  (void)state;
  Kiln__V1__CompilerIdentity compiler = KILN__V1__COMPILER_IDENTITY__INIT;
  compiler.name = "kiln-mlir";
  compiler.version = "0.1.0";
  compiler.llvm_version = "22.1.8";
  compiler.mlir_version = "22.1.8";

  Kiln__V1__TargetInfo cuda = KILN__V1__TARGET_INFO__INIT;
  cuda.id = "sm_89";
  cuda.kind = KILN__V1__TARGET_KIND__TARGET_KIND_CUDA;
  cuda.executable_format = "cuda-nvptx-fb";
  char *cuda_aliases[] = {"ada", "rtx4090"};
  cuda.n_aliases = 2;
  cuda.aliases = cuda_aliases;
  cuda.description = "NVIDIA Ada \"quoted\" \\ slash/";
  cuda.hal_device = "cuda";
  char *cuda_flags[] = {"--iree-hal-target-device=cuda", "--iree-cuda-target=sm_89"};
  cuda.n_compile_flags = 2;
  cuda.compile_flags = cuda_flags;

  Kiln__V1__TargetInfo cpu = KILN__V1__TARGET_INFO__INIT; /* no aliases, no flags */
  cpu.id = "x86_64";
  cpu.kind = KILN__V1__TARGET_KIND__TARGET_KIND_CPU;
  cpu.executable_format = "embedded-elf-x86_64";
  cpu.hal_device = "local";

  Kiln__V1__TargetInfo *targets[] = {&cuda, &cpu};
  Kiln__V1__GetServerInfoResponse info = KILN__V1__GET_SERVER_INFO_RESPONSE__INIT;
  info.kiln_version = "0.1.0";
  info.compiler = &compiler;
  info.n_targets = 2;
  info.targets = targets;
  info.hal_module_version = 7;
  info.vm_bytecode_version_major = 17;
  info.vm_bytecode_version_minor = 0;
  info.start_time_unix_ms = INT64_MAX;
  info.hostname = "build-host";
  info.max_message_bytes = UINT64_MAX;
  info.max_source_bytes = (uint64_t)1 << 53 | 1; /* not exact as a double */
  info.chunk_size_bytes = 1u << 20;
  info.job_retention_ms = 0;
  info.read_only = 1;

  json_object *obj = to_json(&info.base);
  assert_all_fields(obj, &kiln__v1__get_server_info_response__descriptor);
  assert_json_string(obj, "kiln_version", "0.1.0");
  assert_json_int(obj, "hal_module_version", 7);
  assert_json_int(obj, "vm_bytecode_version_major", 17);
  assert_json_int(obj, "vm_bytecode_version_minor", 0);
  assert_json_int(obj, "start_time_unix_ms", INT64_MAX);
  assert_json_string(obj, "hostname", "build-host");
  assert_json_uint(obj, "max_message_bytes", UINT64_MAX);
  assert_json_uint(obj, "max_source_bytes", ((uint64_t)1 << 53) | 1);
  assert_json_uint(obj, "chunk_size_bytes", 1u << 20);
  assert_json_uint(obj, "job_retention_ms", 0);
  assert_json_bool(obj, "read_only", true);
  assert_json_array(obj, "features", 0); /* empty repeated: [] */

  /* 64-bit values are exact numbers in the text, not rounded doubles or strings. */
  const char *text = json_object_to_json_string_ext(obj, JSON_C_TO_STRING_PLAIN);
  assert_non_null(strstr(text, "\"max_message_bytes\":18446744073709551615"));
  assert_non_null(strstr(text, "\"max_source_bytes\":9007199254740993"));
  assert_non_null(strstr(text, "\"start_time_unix_ms\":9223372036854775807"));

  json_object *c = member(obj, "compiler");
  assert_all_fields(c, &kiln__v1__compiler_identity__descriptor);
  assert_json_string(c, "name", "kiln-mlir");
  assert_json_string(c, "llvm_version", "22.1.8");
  assert_json_string(c, "mlir_version", "22.1.8");

  json_object *ts = assert_json_array(obj, "targets", 2);
  json_object *t0 = json_object_array_get_idx(ts, 0);
  assert_all_fields(t0, &kiln__v1__target_info__descriptor);
  assert_json_string(t0, "id", "sm_89");
  assert_json_string(t0, "kind", "TARGET_KIND_CUDA"); /* enum by value name */
  assert_json_string(t0, "executable_format", "cuda-nvptx-fb");
  assert_json_string(t0, "description", "NVIDIA Ada \"quoted\" \\ slash/");
  json_object *aliases = assert_json_array(t0, "aliases", 2);
  assert_string_equal(json_object_get_string(json_object_array_get_idx(aliases, 0)), "ada");
  assert_string_equal(json_object_get_string(json_object_array_get_idx(aliases, 1)), "rtx4090");
  json_object *flags = assert_json_array(t0, "compile_flags", 2);
  assert_string_equal(json_object_get_string(json_object_array_get_idx(flags, 1)),
                      "--iree-cuda-target=sm_89");

  json_object *t1 = json_object_array_get_idx(ts, 1);
  assert_json_string(t1, "id", "x86_64");
  assert_json_string(t1, "kind", "TARGET_KIND_CPU");
  assert_json_array(t1, "aliases", 0);
  assert_json_array(t1, "compile_flags", 0);
  assert_json_string(t1, "description", ""); /* proto3 default, still present */
  json_object_put(obj);
}

static void test_defaults_all_present(void **state) {
  (void)state;
  Kiln__V1__GetServerInfoResponse info = KILN__V1__GET_SERVER_INFO_RESPONSE__INIT;
  json_object *obj = to_json(&info.base);
  assert_all_fields(obj, &kiln__v1__get_server_info_response__descriptor);
  assert_json_string(obj, "kiln_version", "");
  assert_json_uint(obj, "max_message_bytes", 0);
  assert_json_int(obj, "start_time_unix_ms", 0);
  assert_json_bool(obj, "read_only", false);
  assert_json_array(obj, "targets", 0);
  assert_json_array(obj, "features", 0);
  /* An unset message field is present as null. */
  assert_null(member(obj, "compiler"));
  json_object_put(obj);
}

/* ---- GetStatsResponse ---------------------------------------------------- */

static void test_stats(void **state) {
  (void)state;
  Kiln__V1__StatusCount ok = KILN__V1__STATUS_COUNT__INIT;
  ok.code = 0;
  ok.code_name = "OK";
  ok.count = 5;
  Kiln__V1__StatusCount unavailable = KILN__V1__STATUS_COUNT__INIT;
  unavailable.code = 14;
  unavailable.code_name = "UNAVAILABLE";
  unavailable.count = UINT64_MAX - 1;
  Kiln__V1__StatusCount *by_status[] = {&ok, &unavailable};
  Kiln__V1__MethodStats info = KILN__V1__METHOD_STATS__INIT;
  info.method = "/kiln.v1.Kiln/GetServerInfo";
  info.total = 6;
  info.n_by_status = 2;
  info.by_status = by_status;
  Kiln__V1__MethodStats empty = KILN__V1__METHOD_STATS__INIT;
  empty.method = "(unknown)";
  Kiln__V1__MethodStats *methods[] = {&info, &empty};

  Kiln__V1__GetStatsResponse resp = KILN__V1__GET_STATS_RESPONSE__INIT;
  resp.uptime_ms = 123456789012ull;
  resp.calls_in_flight = 1;
  resp.n_methods = 2;
  resp.methods = methods;

  json_object *obj = to_json(&resp.base);
  assert_all_fields(obj, &kiln__v1__get_stats_response__descriptor);
  assert_json_uint(obj, "uptime_ms", 123456789012ull);
  assert_json_uint(obj, "calls_in_flight", 1);
  assert_null(member(obj, "jobs"));
  assert_null(member(obj, "cache"));

  json_object *ms = assert_json_array(obj, "methods", 2);
  json_object *m0 = json_object_array_get_idx(ms, 0);
  assert_all_fields(m0, &kiln__v1__method_stats__descriptor);
  assert_json_string(m0, "method", "/kiln.v1.Kiln/GetServerInfo");
  assert_json_uint(m0, "total", 6);
  json_object *bs = assert_json_array(m0, "by_status", 2);
  json_object *s0 = json_object_array_get_idx(bs, 0);
  json_object *s1 = json_object_array_get_idx(bs, 1);
  assert_json_int(s0, "code", 0);
  assert_json_string(s0, "code_name", "OK");
  assert_json_uint(s0, "count", 5);
  assert_json_int(s1, "code", 14);
  assert_json_uint(s1, "count", UINT64_MAX - 1);

  json_object *m1 = json_object_array_get_idx(ms, 1);
  assert_json_string(m1, "method", "(unknown)");
  assert_json_array(m1, "by_status", 0);

  /* Nested message fields that are set become objects. */
  Kiln__V1__JobStats jobs = KILN__V1__JOB_STATS__INIT;
  jobs.queued = 3;
  resp.jobs = &jobs;
  resp.n_methods = 0;
  json_object_put(obj);
  obj = to_json(&resp.base);
  assert_json_array(obj, "methods", 0);
  json_object *j = member(obj, "jobs");
  assert_all_fields(j, &kiln__v1__job_stats__descriptor);
  assert_json_uint(j, "queued", 3);
  assert_json_uint(j, "workers", 0);
  json_object_put(obj);
}

/* ---- Oneof, map, bytes --------------------------------------------------- */

static void test_oneof_bytes_member_only(void **state) {
  (void)state;
  Kiln__V1__CompileRequest req = KILN__V1__COMPILE_REQUEST__INIT;
  req.input_case = KILN__V1__COMPILE_REQUEST__INPUT_SOURCE;
  req.source.data = (uint8_t *)"foo";
  req.source.len = 3;
  req.source_format = KILN__V1__SOURCE_FORMAT__SOURCE_FORMAT_MLIR_TEXT;
  req.priority = KILN__V1__PRIORITY__PRIORITY_BATCH;

  json_object *obj = to_json(&req.base);
  assert_all_fields(obj, &kiln__v1__compile_request__descriptor);
  assert_json_string(obj, "source", "Zm9v");
  assert_false(has_member(obj, "source_digest"));
  assert_json_string(obj, "source_format", "SOURCE_FORMAT_MLIR_TEXT");
  assert_json_string(obj, "priority", "PRIORITY_BATCH");
  assert_json_array(obj, "targets", 0);
  assert_json_array(obj, "flags", 0);
  json_object_put(obj);
}

static void test_oneof_string_member_only(void **state) {
  (void)state;
  Kiln__V1__CompileRequest req = KILN__V1__COMPILE_REQUEST__INIT;
  req.input_case = KILN__V1__COMPILE_REQUEST__INPUT_SOURCE_DIGEST;
  req.source_digest = "ab12";
  char *targets[] = {"sm_89", "gfx950"};
  req.n_targets = 2;
  req.targets = targets;

  json_object *obj = to_json(&req.base);
  assert_json_string(obj, "source_digest", "ab12");
  assert_false(has_member(obj, "source"));
  json_object *ts = assert_json_array(obj, "targets", 2);
  assert_string_equal(json_object_get_string(json_object_array_get_idx(ts, 1)), "gfx950");
  json_object_put(obj);
}

static void test_oneof_not_set(void **state) {
  (void)state;
  Kiln__V1__CompileRequest req = KILN__V1__COMPILE_REQUEST__INIT;
  json_object *obj = to_json(&req.base);
  assert_false(has_member(obj, "source"));
  assert_false(has_member(obj, "source_digest"));
  assert_all_fields(obj, &kiln__v1__compile_request__descriptor);
  json_object_put(obj);
}

static void test_map_as_object(void **state) {
  (void)state;
  Kiln__V1__CompileRequest__LabelsEntry e1 = KILN__V1__COMPILE_REQUEST__LABELS_ENTRY__INIT;
  e1.key = "model";
  e1.value = "resnet50";
  Kiln__V1__CompileRequest__LabelsEntry e2 = KILN__V1__COMPILE_REQUEST__LABELS_ENTRY__INIT;
  e2.key = "ci.pipeline";
  e2.value = "1234";
  Kiln__V1__CompileRequest__LabelsEntry e3 = KILN__V1__COMPILE_REQUEST__LABELS_ENTRY__INIT;
  e3.key = "empty";
  e3.value = "";
  Kiln__V1__CompileRequest__LabelsEntry *labels[] = {&e1, &e2, &e3};
  Kiln__V1__CompileRequest req = KILN__V1__COMPILE_REQUEST__INIT;
  req.n_labels = 3;
  req.labels = labels;

  json_object *obj = to_json(&req.base);
  json_object *map = member(obj, "labels");
  if (!json_object_is_type(map, json_type_object)) {
    fail_msg("labels is %s, not an object", json_object_to_json_string(map));
  }
  assert_int_equal(json_object_object_length(map), 3);
  assert_json_string(map, "model", "resnet50");
  assert_json_string(map, "ci.pipeline", "1234");
  assert_json_string(map, "empty", "");
  json_object_put(obj);

  /* An empty map is an empty object, not an array. */
  req.n_labels = 0;
  req.labels = NULL;
  obj = to_json(&req.base);
  map = member(obj, "labels");
  assert_true(json_object_is_type(map, json_type_object));
  assert_int_equal(json_object_object_length(map), 0);
  json_object_put(obj);
}

static void test_map_in_provenance(void **state) {
  (void)state;
  Kiln__V1__Provenance__LabelsEntry e = KILN__V1__PROVENANCE__LABELS_ENTRY__INIT;
  e.key = "team";
  e.value = "ml";
  Kiln__V1__Provenance__LabelsEntry *labels[] = {&e};
  Kiln__V1__Provenance p = KILN__V1__PROVENANCE__INIT;
  p.n_labels = 1;
  p.labels = labels;
  json_object *obj = to_json(&p.base);
  assert_all_fields(obj, &kiln__v1__provenance__descriptor);
  json_object *map = member(obj, "labels");
  assert_true(json_object_is_type(map, json_type_object));
  assert_json_string(map, "team", "ml");
  assert_json_array(obj, "flags", 0);
  json_object_put(obj);
}

static const char *base64_of(const void *data, size_t len, json_object **out_obj) {
  Kiln__V1__CompileRequest req = KILN__V1__COMPILE_REQUEST__INIT;
  req.input_case = KILN__V1__COMPILE_REQUEST__INPUT_SOURCE;
  req.source.data = (uint8_t *)data;
  req.source.len = len;
  *out_obj = to_json(&req.base);
  json_object *v = member(*out_obj, "source");
  assert_true(json_object_is_type(v, json_type_string));
  return json_object_get_string(v);
}

static void test_base64_vectors(void **state) {
  (void)state;
  /* RFC 4648 section 10. */
  static const struct {
    const char *in;
    const char *out;
  } vectors[] = {
      {"", ""},
      {"f", "Zg=="},
      {"fo", "Zm8="},
      {"foo", "Zm9v"},
      {"foob", "Zm9vYg=="},
      {"fooba", "Zm9vYmE="},
      {"foobar", "Zm9vYmFy"},
  };
  for (size_t i = 0; i < sizeof vectors / sizeof vectors[0]; i++) {
    json_object *obj;
    const char *got = base64_of(vectors[i].in, strlen(vectors[i].in), &obj);
    if (strcmp(got, vectors[i].out) != 0) {
      fail_msg("base64(\"%s\") = \"%s\", expected \"%s\"", vectors[i].in, got, vectors[i].out);
    }
    json_object_put(obj);
  }
  /* A zero-length value with no buffer at all. */
  json_object *obj;
  assert_string_equal(base64_of(NULL, 0, &obj), "");
  json_object_put(obj);
}

static void test_base64_binary(void **state) {
  (void)state;
  static const struct {
    uint8_t in[4];
    size_t len;
    const char *out;
  } vectors[] = {
      {{0x00}, 1, "AA=="},
      {{0x00, 0x00}, 2, "AAA="},
      {{0x00, 0x00, 0x00}, 3, "AAAA"},
      {{0xff}, 1, "/w=="},
      {{0xff, 0xff}, 2, "//8="},
      {{0xff, 0xff, 0xff}, 3, "////"},
      {{0xfb, 0xff}, 2, "+/8="},
      {{0xfb, 0xef, 0xbe}, 3, "++++"},
      {{0x4d, 0x4c, 0xef, 0x52}, 4, "TUzvUg=="}, /* MLIR bytecode magic "ML\xefR" */
  };
  for (size_t i = 0; i < sizeof vectors / sizeof vectors[0]; i++) {
    json_object *obj;
    const char *got = base64_of(vectors[i].in, vectors[i].len, &obj);
    if (strcmp(got, vectors[i].out) != 0) {
      fail_msg("vector %zu: got \"%s\", expected \"%s\"", i, got, vectors[i].out);
    }
    json_object_put(obj);
  }
  /* Every byte value, long input: length and alphabet are right. */
  uint8_t all[256 * 3];
  for (size_t i = 0; i < sizeof all; i++) all[i] = (uint8_t)i;
  json_object *obj;
  const char *got = base64_of(all, sizeof all, &obj);
  assert_int_equal(strlen(got), sizeof all / 3 * 4);
  assert_int_equal(strncmp(got, "AAECAwQF", 8), 0);
  for (const char *p = got; *p; p++) {
    if (!strchr("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/", *p)) {
      fail_msg("character '%c' outside the base64 alphabet", *p);
    }
  }
  json_object_put(obj);
}

static void test_bytes_in_put_source_chunk(void **state) {
  (void)state;
  Kiln__V1__PutSourceChunk chunk = KILN__V1__PUT_SOURCE_CHUNK__INIT;
  chunk.chunk_case = KILN__V1__PUT_SOURCE_CHUNK__CHUNK_DATA;
  chunk.data.data = (uint8_t *)"fo";
  chunk.data.len = 2;
  json_object *obj = to_json(&chunk.base);
  assert_json_string(obj, "data", "Zm8=");
  assert_false(has_member(obj, "metadata"));
  assert_int_equal(json_object_object_length(obj), 1);
  json_object_put(obj);

  Kiln__V1__SourceMetadata md = KILN__V1__SOURCE_METADATA__INIT;
  md.digest = "00ff";
  md.size_bytes = 42;
  md.format = KILN__V1__SOURCE_FORMAT__SOURCE_FORMAT_MLIR_BYTECODE;
  chunk.chunk_case = KILN__V1__PUT_SOURCE_CHUNK__CHUNK_METADATA;
  chunk.metadata = &md;
  obj = to_json(&chunk.base);
  assert_false(has_member(obj, "data"));
  json_object *m = member(obj, "metadata");
  assert_all_fields(m, &kiln__v1__source_metadata__descriptor);
  assert_json_string(m, "digest", "00ff");
  assert_json_uint(m, "size_bytes", 42);
  assert_json_string(m, "format", "SOURCE_FORMAT_MLIR_BYTECODE");
  json_object_put(obj);
}

/* ---- Message oneof, recursion, other scalar types ------------------------ */

static void test_job_event_oneof(void **state) {
  (void)state;
  Kiln__V1__JobEvent__TargetDone done = KILN__V1__JOB_EVENT__TARGET_DONE__INIT;
  done.target = "sm_89";
  done.artifact_digest = "abc";
  done.size_bytes = 4096;
  done.cache_hit = 1;
  Kiln__V1__JobEvent ev = KILN__V1__JOB_EVENT__INIT;
  ev.sequence = 7;
  ev.time_unix_ms = -1; /* negative int64 stays negative */
  ev.job_id = "job-1";
  ev.event_case = KILN__V1__JOB_EVENT__EVENT_TARGET_DONE;
  ev.target_done = &done;

  json_object *obj = to_json(&ev.base);
  assert_json_uint(obj, "sequence", 7);
  assert_json_int(obj, "time_unix_ms", -1);
  assert_json_string(obj, "job_id", "job-1");
  /* Exactly one oneof member: the three plain fields plus target_done. */
  assert_int_equal(json_object_object_length(obj), 4);
  static const char *const others[] = {"queued",     "started",       "progress", "log",
                                       "diagnostic", "target_failed", "terminal"};
  for (size_t i = 0; i < sizeof others / sizeof others[0]; i++) {
    if (has_member(obj, others[i])) fail_msg("unset oneof member \"%s\" present", others[i]);
  }
  json_object *d = member(obj, "target_done");
  assert_all_fields(d, &kiln__v1__job_event__target_done__descriptor);
  assert_json_string(d, "target", "sm_89");
  assert_json_uint(d, "size_bytes", 4096);
  assert_json_bool(d, "cache_hit", true);
  assert_json_uint(d, "compile_ms", 0);
  json_object_put(obj);

  /* Progress: uint32 and float. */
  Kiln__V1__JobEvent__TargetProgress progress = KILN__V1__JOB_EVENT__TARGET_PROGRESS__INIT;
  progress.target = "gfx950";
  progress.stage = "flow";
  progress.stage_index = 2;
  progress.stage_count = UINT32_MAX;
  progress.fraction = 0.5f;
  ev.event_case = KILN__V1__JOB_EVENT__EVENT_PROGRESS;
  ev.progress = &progress;
  obj = to_json(&ev.base);
  assert_false(has_member(obj, "target_done"));
  json_object *p = member(obj, "progress");
  assert_json_uint(p, "stage_count", UINT32_MAX); /* not -1 */
  assert_json_int(p, "stage_index", 2);
  json_object *fr = member(p, "fraction");
  assert_true(json_object_is_type(fr, json_type_double));
  assert_true(json_object_get_double(fr) == 0.5);
  json_object_put(obj);

  /* No member set: only the plain fields. */
  ev.event_case = KILN__V1__JOB_EVENT__EVENT__NOT_SET;
  ev.progress = NULL;
  obj = to_json(&ev.base);
  assert_int_equal(json_object_object_length(obj), 3);
  json_object_put(obj);
}

static void test_recursive_diagnostic_and_unknown_enum(void **state) {
  (void)state;
  Kiln__V1__SourceLocation loc = KILN__V1__SOURCE_LOCATION__INIT;
  loc.file = "model.mlir";
  loc.line = 12;
  loc.column = 4294967295u;
  Kiln__V1__Diagnostic note = KILN__V1__DIAGNOSTIC__INIT;
  note.severity = KILN__V1__SEVERITY__SEVERITY_NOTE;
  note.message = "see here";
  Kiln__V1__Diagnostic *notes[] = {&note};
  Kiln__V1__Diagnostic diag = KILN__V1__DIAGNOSTIC__INIT;
  diag.target = "sm_89";
  diag.severity = (Kiln__V1__Severity)99; /* a value newer than this client */
  diag.message = "bad op";
  diag.location = &loc;
  diag.n_notes = 1;
  diag.notes = notes;

  json_object *obj = to_json(&diag.base);
  assert_all_fields(obj, &kiln__v1__diagnostic__descriptor);
  assert_json_int(obj, "severity", 99); /* unknown enum values as numbers */
  json_object *l = member(obj, "location");
  assert_json_string(l, "file", "model.mlir");
  assert_json_uint(l, "line", 12);
  assert_json_uint(l, "column", 4294967295u);
  json_object *ns = assert_json_array(obj, "notes", 1);
  json_object *n0 = json_object_array_get_idx(ns, 0);
  assert_all_fields(n0, &kiln__v1__diagnostic__descriptor);
  assert_json_string(n0, "severity", "SEVERITY_NOTE");
  assert_json_string(n0, "message", "see here");
  assert_null(member(n0, "location"));
  assert_json_array(n0, "notes", 0);
  json_object_put(obj);
}

static void test_negative_int32(void **state) {
  (void)state;
  Kiln__V1__StatusCount sc = KILN__V1__STATUS_COUNT__INIT;
  sc.code = INT32_MIN;
  sc.code_name = "";
  json_object *obj = to_json(&sc.base);
  assert_json_int(obj, "code", INT32_MIN);
  json_object_put(obj);
}

/* ---- Printing ------------------------------------------------------------ */

static void test_print_writes_json_line(void **state) {
  (void)state;
  Kiln__V1__StatusCount sc = KILN__V1__STATUS_COUNT__INIT;
  sc.code = 14;
  sc.code_name = "UNAVAILABLE";
  sc.count = UINT64_MAX;

  FILE *capture = tmpfile();
  assert_non_null(capture);
  fflush(stdout);
  int saved = dup(STDOUT_FILENO);
  assert_true(saved >= 0);
  assert_true(dup2(fileno(capture), STDOUT_FILENO) >= 0);
  kiln_client_json_print(kiln_client_json_from_message(&sc.base)); /* releases the object */
  fflush(stdout);
  dup2(saved, STDOUT_FILENO);
  close(saved);

  char text[512];
  rewind(capture);
  size_t n = fread(text, 1, sizeof text - 1, capture);
  fclose(capture);
  text[n] = '\0';
  assert_true(n > 0);
  assert_int_equal(text[n - 1], '\n');
  json_object *back = json_tokener_parse(text);
  if (!back) fail_msg("printed text does not parse: %s", text);
  assert_json_int(back, "code", 14);
  assert_json_string(back, "code_name", "UNAVAILABLE");
  assert_json_uint(back, "count", UINT64_MAX);
  json_object_put(back);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_server_info),
      cmocka_unit_test(test_defaults_all_present),
      cmocka_unit_test(test_stats),
      cmocka_unit_test(test_oneof_bytes_member_only),
      cmocka_unit_test(test_oneof_string_member_only),
      cmocka_unit_test(test_oneof_not_set),
      cmocka_unit_test(test_map_as_object),
      cmocka_unit_test(test_map_in_provenance),
      cmocka_unit_test(test_base64_vectors),
      cmocka_unit_test(test_base64_binary),
      cmocka_unit_test(test_bytes_in_put_source_chunk),
      cmocka_unit_test(test_job_event_oneof),
      cmocka_unit_test(test_recursive_diagnostic_and_unknown_enum),
      cmocka_unit_test(test_negative_int32),
      cmocka_unit_test(test_print_writes_json_line),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
