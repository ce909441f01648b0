/* Unit tests for daemon/rpc and its handlers, called directly with an env built
 * here (kilnd's default settings, a stats table filled by the test) and a fresh
 * arena per test. GetServerInfo: kiln version, the compiler identity's fallback
 * before any worker's Hello (kiln-mlir, KILN_VERSION, empty LLVM/MLIR versions),
 * HAL module 7, VM bytecode 17.0, start time, host name, max message size, every
 * registry target with its fields and aliases, the features list of served Kiln
 * methods, each target's compile flags. GetStats: uptime, calls in flight, methods
 * in first-call order with only the codes that occurred, in code order, and
 * their names; an empty table. Health/Check: SERVING for "" (and a NULL service)
 * and "kiln.v1.Kiln", NOT_SERVING while draining, NOT_FOUND for other names.
 * The method table: served paths are known, request descriptors and handlers
 * match the kiln.v1.Kiln / grpc.health.v1.Health service descriptors, and every
 * contract method is known. kilnd_rpc_unserved: UNIMPLEMENTED naming the path for
 * contract methods and unknown paths. Every response is checked with
 * protobuf_c_message_check, packed, unpacked and compared again. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/arena.h"
#include "base/config.h"
#include "base/status.h"
#include "base/time.h"
#include "compiler/targets.h"
#include "daemon/rpc.h"
#include "daemon/settings.h"
#include "daemon/stats.h"
#include "grpc/health/v1/health.pb-c.h"
#include "kiln/v1/kiln.pb-c.h"

#define GET_SERVER_INFO "/kiln.v1.Kiln/GetServerInfo"
#define GET_STATS       "/kiln.v1.Kiln/GetStats"
#define HEALTH_CHECK    "/grpc.health.v1.Health/Check"

/* ---- Fixture: env + arena ------------------------------------------------ */

typedef struct fixture_s {
  kilnd_settings_t settings;
  kilnd_stats_t stats;
  kilnd_rpc_env_t env;
  kiln_arena_t arena;
  kilnd_call_ctx_t call; /* arena + no deadline */
} fixture_t;

static int setup(void **state) {
  fixture_t *f = calloc(1, sizeof *f);
  if (!f) return -1;
  kiln_status_t st = kiln_config_set_defaults(kilnd_settings_table(), &f->settings);
  if (st) {
    kiln_status_free(st);
    free(f);
    return -1;
  }
  kilnd_stats_init(&f->stats);
  f->env.settings = &f->settings;
  f->env.stats = &f->stats;
  f->env.start_unix_ms = 1767225600123; /* 2026-01-01T00:00:00.123Z */
  f->env.start_monotonic_ns = kiln_time_monotonic_ns();
  f->env.hostname = "kiln-test-host";
  f->env.draining = false;
  kiln_arena_init(&f->arena);
  f->call.arena = &f->arena;
  f->call.deadline_monotonic_ns = INT64_MAX;
  f->call.stopping = NULL;
  *state = f;
  return 0;
}

static int teardown(void **state) {
  fixture_t *f = *state;
  kiln_arena_deinit(&f->arena);
  kiln_config_deinit(kilnd_settings_table(), &f->settings);
  free(f);
  return 0;
}

/* ---- Helpers ------------------------------------------------------------- */

/* Checks, packs and unpacks `msg`; returns the unpacked copy (free with
 * protobuf_c_message_free_unpacked). Proves the arena-built message is valid. */
static ProtobufCMessage *roundtrip(const ProtobufCMessage *msg) {
  assert_non_null(msg);
  assert_true(protobuf_c_message_check(msg));
  size_t len = protobuf_c_message_get_packed_size(msg);
  uint8_t *buf = malloc(len ? len : 1);
  assert_non_null(buf);
  assert_int_equal(protobuf_c_message_pack(msg, buf), len);
  ProtobufCMessage *back = protobuf_c_message_unpack(msg->descriptor, NULL, len, buf);
  free(buf);
  if (!back) fail_msg("%s did not unpack after packing", msg->descriptor->name);
  assert_ptr_equal(back->descriptor, msg->descriptor);
  /* Packing the copy gives the same size again. */
  assert_int_equal(protobuf_c_message_get_packed_size(back), len);
  return back;
}

static ProtobufCMessage *call_ok(fixture_t *f, kilnd_unary_fn_t fn, const ProtobufCMessage *req) {
  ProtobufCMessage *resp = NULL;
  kiln_status_t st = fn(&f->env, &f->call, req, &resp);
  if (st) {
    fail_msg("handler failed: %s: %s", kiln_status_code_name(kiln_status_code(st)), kiln_status_message(st));
  }
  assert_non_null(resp);
  return resp;
}

static ProtobufCMessage *server_info(fixture_t *f) {
  Kiln__V1__GetServerInfoRequest req = KILN__V1__GET_SERVER_INFO_REQUEST__INIT;
  ProtobufCMessage *resp = call_ok(f, kilnd_rpc_get_server_info, &req.base);
  assert_ptr_equal(resp->descriptor, &kiln__v1__get_server_info_response__descriptor);
  return resp;
}

static ProtobufCMessage *get_stats(fixture_t *f) {
  Kiln__V1__GetStatsRequest req = KILN__V1__GET_STATS_REQUEST__INIT;
  ProtobufCMessage *resp = call_ok(f, kilnd_rpc_get_stats, &req.base);
  assert_ptr_equal(resp->descriptor, &kiln__v1__get_stats_response__descriptor);
  return resp;
}

/* ---- GetServerInfo ------------------------------------------------------- */

static void check_server_info(const fixture_t *f, const Kiln__V1__GetServerInfoResponse *r) {
  assert_string_equal(r->kiln_version, KILN_VERSION);

  /* No job engine here, so no worker has said Hello: the documented fallback.
   * The real identity (LLVM 22.x.y from kiln-worker's Hello) is checked against a
   * running kilnd (tests/integration/test_interop.py) and field by field at the
   * pool (test_workers.c). */
  assert_non_null(r->compiler);
  assert_string_equal(r->compiler->name, "kiln-mlir");
  assert_string_equal(r->compiler->version, KILN_VERSION);
  assert_string_equal(r->compiler->llvm_version, "");
  assert_string_equal(r->compiler->mlir_version, "");

  assert_int_equal(r->hal_module_version, 7);
  assert_int_equal(r->vm_bytecode_version_major, 17);
  assert_int_equal(r->vm_bytecode_version_minor, 0);
  assert_int_equal(r->start_time_unix_ms, f->env.start_unix_ms);
  assert_string_equal(r->hostname, f->env.hostname ? f->env.hostname : "");
  assert_int_equal(r->max_message_bytes, f->settings.max_message_bytes);

  /* Every target Compile accepts, in registry order, CPUs included. */
  size_t n = kiln_compiler_target_count(), k = 0;
  assert_true(n > 0);
  assert_int_equal(r->n_targets, n);
  for (size_t i = 0; i < n; i++) {
    const kiln_target_t *t = kiln_compiler_target_at(i);
    const Kiln__V1__TargetInfo *info = r->targets[k++];
    assert_non_null(info);
    assert_string_equal(info->id, t->id);
    assert_int_equal(info->kind, t->kind);
    assert_true(info->kind != KILN__V1__TARGET_KIND__TARGET_KIND_UNSPECIFIED);
    assert_string_equal(info->executable_format, t->executable_format);
    assert_string_equal(info->description, t->description);
    assert_string_equal(info->hal_device, t->hal_device);
    size_t n_aliases = 0;
    while (t->aliases && t->aliases[n_aliases]) n_aliases++;
    if (info->n_aliases != n_aliases) {
      fail_msg("target %s: %zu aliases, registry has %zu", t->id, info->n_aliases, n_aliases);
    }
    for (size_t a = 0; a < n_aliases; a++) {
      assert_string_equal(info->aliases[a], t->aliases[a]);
      /* Each advertised alias resolves back to its target. */
      assert_ptr_equal(kiln_compiler_target_find(info->aliases[a]), t);
    }
  }
}

static void test_server_info(void **state) {
  fixture_t *f = *state;
  ProtobufCMessage *resp = server_info(f);
  check_server_info(f, (const Kiln__V1__GetServerInfoResponse *)resp);
  ProtobufCMessage *back = roundtrip(resp);
  check_server_info(f, (const Kiln__V1__GetServerInfoResponse *)back);
  protobuf_c_message_free_unpacked(back, NULL);
}

static void test_server_info_follows_env(void **state) {
  fixture_t *f = *state;
  f->env.hostname = NULL; /* unknown host name: "" on the wire */
  f->env.start_unix_ms = 42;
  f->settings.max_message_bytes = 1u << 20;
  ProtobufCMessage *resp = server_info(f);
  const Kiln__V1__GetServerInfoResponse *r = (const void *)resp;
  assert_string_equal(r->hostname, "");
  assert_int_equal(r->start_time_unix_ms, 42);
  assert_int_equal(r->max_message_bytes, 1u << 20);
  ProtobufCMessage *back = roundtrip(resp);
  check_server_info(f, (const Kiln__V1__GetServerInfoResponse *)back);
  protobuf_c_message_free_unpacked(back, NULL);
}

static void test_server_info_request_fields_ignored(void **state) {
  fixture_t *f = *state;
  /* A request unpacked from the wire (with an unknown field) is answered alike. */
  static const uint8_t wire[] = {0x08, 0x01}; /* field 1 varint 1: unknown here */
  ProtobufCMessage *req =
      protobuf_c_message_unpack(&kiln__v1__get_server_info_request__descriptor, NULL, sizeof wire, wire);
  assert_non_null(req);
  ProtobufCMessage *resp = call_ok(f, kilnd_rpc_get_server_info, req);
  protobuf_c_message_free_unpacked(req, NULL);
  check_server_info(f, (const Kiln__V1__GetServerInfoResponse *)resp);
}

static void test_server_info_features_list_served_methods(void **state) {
  fixture_t *f = *state;
  /* kiln.proto: features are "Names of the Kiln methods this server implements
   * ...; an absent one answers UNIMPLEMENTED", and UNIMPLEMENTED tells clients to
   * look there. Every served kiln.v1.Kiln method must be listed, and no unserved
   * one. */
  const Kiln__V1__GetServerInfoResponse *r = (const void *)server_info(f);
  size_t count;
  const kilnd_method_t *methods = kilnd_rpc_methods(&count);
  static const char prefix[] = "/kiln.v1.Kiln/";
  size_t served_kiln = 0;
  for (size_t i = 0; i < count; i++) {
    if (!kilnd_method_served(&methods[i])) continue;
    if (strncmp(methods[i].path, prefix, sizeof prefix - 1) != 0) continue;
    served_kiln++;
    const char *name = methods[i].path + sizeof prefix - 1;
    size_t k = 0;
    while (k < r->n_features && strcmp(r->features[k], name) != 0) k++;
    if (k == r->n_features) {
      fail_msg("features (%zu entries) does not list served method %s", r->n_features, name);
    }
  }
  assert_int_equal(r->n_features, served_kiln);
}

static void test_server_info_target_compile_flags(void **state) {
  fixture_t *f = *state;
  /* kiln.proto TargetInfo.compile_flags: "The full iree-compile flags kiln passes
   * for this target, e.g. ["--iree-hal-target-device=cuda",
   * "--iree-cuda-target=sm_89"]". */
  const Kiln__V1__GetServerInfoResponse *r = (const void *)server_info(f);
  for (size_t i = 0; i < r->n_targets; i++) {
    const kiln_target_t *t = kiln_compiler_target_at(i);
    const Kiln__V1__TargetInfo *info = r->targets[i];
    char device[128], chip[160];
    snprintf(device, sizeof device, "--iree-hal-target-device=%s", t->hal_device);
    snprintf(chip, sizeof chip, "--%s=%s", t->chip_flag, t->chip);
    bool has_device = false, has_chip = false;
    for (size_t k = 0; k < info->n_compile_flags; k++) {
      has_device |= strcmp(info->compile_flags[k], device) == 0;
      has_chip |= strcmp(info->compile_flags[k], chip) == 0;
    }
    if (!has_device || !has_chip) {
      fail_msg("target %s: compile_flags (%zu entries) lacks %s%s%s", t->id, info->n_compile_flags,
               has_device ? "" : device, !has_device && !has_chip ? " and " : "", has_chip ? "" : chip);
    }
  }
}

/* ---- GetStats ------------------------------------------------------------ */

static void expect_status_count(const Kiln__V1__StatusCount *sc, int code, uint64_t count) {
  assert_non_null(sc);
  assert_int_equal(sc->code, code);
  assert_string_equal(sc->code_name, kiln_status_code_name((kiln_status_code_t)code));
  assert_int_equal(sc->count, count);
}

static void check_filled_stats(const Kiln__V1__GetStatsResponse *r) {
  assert_int_equal(r->calls_in_flight, 4);
  assert_int_equal(r->n_methods, 3);

  const Kiln__V1__MethodStats *info = r->methods[0];
  assert_string_equal(info->method, GET_SERVER_INFO);
  assert_int_equal(info->total, 6);
  /* Only the codes that occurred, in code order (not in order of occurrence). */
  assert_int_equal(info->n_by_status, 3);
  expect_status_count(info->by_status[0], KILN_STATUS_OK, 3);
  expect_status_count(info->by_status[1], KILN_STATUS_CANCELLED, 2);
  expect_status_count(info->by_status[2], KILN_STATUS_UNAVAILABLE, 1);
  assert_string_equal(info->by_status[2]->code_name, "UNAVAILABLE");

  const Kiln__V1__MethodStats *unknown = r->methods[1];
  assert_string_equal(unknown->method, KILND_STATS_UNKNOWN_METHOD);
  assert_int_equal(unknown->total, 2);
  assert_int_equal(unknown->n_by_status, 1);
  expect_status_count(unknown->by_status[0], KILN_STATUS_UNIMPLEMENTED, 2);

  const Kiln__V1__MethodStats *health = r->methods[2];
  assert_string_equal(health->method, HEALTH_CHECK);
  assert_int_equal(health->total, 2);
  assert_int_equal(health->n_by_status, 2);
  expect_status_count(health->by_status[0], KILN_STATUS_OK, 1);
  expect_status_count(health->by_status[1], KILN_STATUS_NOT_FOUND, 1);
}

static void test_stats_reflect_counters(void **state) {
  fixture_t *f = *state;
  kilnd_stats_record(&f->stats, GET_SERVER_INFO, KILN_STATUS_OK);
  kilnd_stats_record(&f->stats, GET_SERVER_INFO, KILN_STATUS_UNAVAILABLE);
  kilnd_stats_record(&f->stats, NULL, KILN_STATUS_UNIMPLEMENTED);
  kilnd_stats_record(&f->stats, GET_SERVER_INFO, KILN_STATUS_CANCELLED);
  kilnd_stats_record(&f->stats, HEALTH_CHECK, KILN_STATUS_NOT_FOUND);
  kilnd_stats_record(&f->stats, GET_SERVER_INFO, KILN_STATUS_OK);
  kilnd_stats_record(&f->stats, GET_SERVER_INFO, KILN_STATUS_CANCELLED);
  kilnd_stats_record(&f->stats, NULL, KILN_STATUS_UNIMPLEMENTED);
  kilnd_stats_record(&f->stats, HEALTH_CHECK, KILN_STATUS_OK);
  kilnd_stats_record(&f->stats, GET_SERVER_INFO, KILN_STATUS_OK);
  f->stats.calls_in_flight = 4;

  ProtobufCMessage *resp = get_stats(f);
  check_filled_stats((const Kiln__V1__GetStatsResponse *)resp);
  ProtobufCMessage *back = roundtrip(resp);
  check_filled_stats((const Kiln__V1__GetStatsResponse *)back);
  protobuf_c_message_free_unpacked(back, NULL);
}

static void test_stats_every_code(void **state) {
  fixture_t *f = *state;
  /* Code c recorded c+1 times, in reverse code order. */
  for (int c = KILN_STATUS_CODE_COUNT - 1; c >= 0; c--) {
    for (int k = 0; k <= c; k++) kilnd_stats_record(&f->stats, GET_STATS, (kiln_status_code_t)c);
  }
  ProtobufCMessage *back = roundtrip(get_stats(f));
  const Kiln__V1__GetStatsResponse *r = (const void *)back;
  assert_int_equal(r->n_methods, 1);
  assert_int_equal(r->methods[0]->n_by_status, KILN_STATUS_CODE_COUNT);
  uint64_t total = 0;
  for (int c = 0; c < KILN_STATUS_CODE_COUNT; c++) {
    expect_status_count(r->methods[0]->by_status[c], c, (uint64_t)c + 1);
    total += (uint64_t)c + 1;
  }
  assert_int_equal(r->methods[0]->total, total);
  protobuf_c_message_free_unpacked(back, NULL);
}

static void test_stats_empty(void **state) {
  fixture_t *f = *state;
  ProtobufCMessage *resp = get_stats(f);
  const Kiln__V1__GetStatsResponse *r = (const void *)resp;
  assert_int_equal(r->n_methods, 0);
  assert_int_equal(r->calls_in_flight, 0);
  ProtobufCMessage *back = roundtrip(resp);
  assert_int_equal(((const Kiln__V1__GetStatsResponse *)back)->n_methods, 0);
  protobuf_c_message_free_unpacked(back, NULL);
}

static void test_stats_uptime(void **state) {
  fixture_t *f = *state;
  f->env.start_monotonic_ns = kiln_time_monotonic_ns() - 5 * INT64_C(1000000000);
  const Kiln__V1__GetStatsResponse *r = (const void *)get_stats(f);
  assert_true(r->uptime_ms >= 5000);
  assert_true(r->uptime_ms < 5000 + 60000);

  /* A start in the future (clock confusion) reads as 0, never as a huge number. */
  f->env.start_monotonic_ns = kiln_time_monotonic_ns() + 60 * INT64_C(1000000000);
  r = (const void *)get_stats(f);
  assert_int_equal(r->uptime_ms, 0);
}

/* ---- Health -------------------------------------------------------------- */

static KILN_MUST_USE kiln_status_t health(fixture_t *f, const char *service, int *out_status) {
  Grpc__Health__V1__HealthCheckRequest req = GRPC__HEALTH__V1__HEALTH_CHECK_REQUEST__INIT;
  req.service = (char *)service;
  ProtobufCMessage *resp = NULL;
  kiln_status_t st = kilnd_rpc_health_check(&f->env, &f->call, &req.base, &resp);
  *out_status = -1;
  if (st) {
    assert_null(resp); /* out-params are written only on success */
    return st;
  }
  assert_non_null(resp);
  assert_ptr_equal(resp->descriptor, &grpc__health__v1__health_check_response__descriptor);
  ProtobufCMessage *back = roundtrip(resp);
  int wire = ((const Grpc__Health__V1__HealthCheckResponse *)back)->status;
  protobuf_c_message_free_unpacked(back, NULL);
  *out_status = ((const Grpc__Health__V1__HealthCheckResponse *)resp)->status;
  assert_int_equal(wire, *out_status);
  return NULL;
}

#define SERVING     GRPC__HEALTH__V1__HEALTH_CHECK_RESPONSE__SERVING_STATUS__SERVING
#define NOT_SERVING GRPC__HEALTH__V1__HEALTH_CHECK_RESPONSE__SERVING_STATUS__NOT_SERVING

static void test_health_serving(void **state) {
  fixture_t *f = *state;
  int status;
  assert_null(health(f, "", &status));
  assert_int_equal(status, SERVING);
  assert_null(health(f, "kiln.v1.Kiln", &status));
  assert_int_equal(status, SERVING);
  assert_null(health(f, NULL, &status));
  assert_int_equal(status, SERVING);
}

static void test_health_draining(void **state) {
  fixture_t *f = *state;
  f->env.draining = true;
  int status;
  assert_null(health(f, "", &status));
  assert_int_equal(status, NOT_SERVING);
  assert_null(health(f, "kiln.v1.Kiln", &status));
  assert_int_equal(status, NOT_SERVING);
  /* Unknown names stay NOT_FOUND while draining. */
  kiln_status_t st = health(f, "other.Service", &status);
  assert_int_equal(kiln_status_code(st), KILN_STATUS_NOT_FOUND);
  kiln_status_free(st);
}

static void test_health_unknown_service(void **state) {
  fixture_t *f = *state;
  static const char *const names[] = {"other.Service", "kiln.v1.kiln",          "kiln.v1.Kiln ",
                                      "kiln.v1",       "grpc.health.v1.Health", "kiln.v1.Kiln/GetStats"};
  for (size_t i = 0; i < sizeof names / sizeof names[0]; i++) {
    int status;
    kiln_status_t st = health(f, names[i], &status);
    if (kiln_status_code(st) != KILN_STATUS_NOT_FOUND) {
      fail_msg("service '%s': expected NOT_FOUND, got %s", names[i],
               kiln_status_code_name(kiln_status_code(st)));
    }
    assert_non_null(strstr(kiln_status_message(st), names[i])); /* names the service */
    kiln_status_free(st);
  }
}

/* ---- Method table and unserved methods ----------------------------------- */

static bool is_known(const char *path) { return kilnd_rpc_method_find(path) != NULL; }

static const kilnd_method_t *served(const char *path) {
  const kilnd_method_t *m = kilnd_rpc_method_find(path);
  return m && kilnd_method_served(m) ? m : NULL;
}

static void test_methods_are_known(void **state) {
  (void)state;
  size_t count = 0;
  const kilnd_method_t *methods = kilnd_rpc_methods(&count);
  assert_non_null(methods);
  assert_true(count >= 3);
  for (size_t i = 0; i < count; i++) {
    assert_non_null(methods[i].path);
    assert_non_null(methods[i].request_descriptor);
    /* Unary methods have a handler; streaming ones an entry point; never both;
     * an unserved method neither, and names the capability it comes with. */
    if (methods[i].capability) {
      assert_null(methods[i].handler);
      assert_null(methods[i].stream);
      assert_false(methods[i].offload);
    } else if (methods[i].kind == KILND_METHOD_UNARY) {
      assert_non_null(methods[i].handler);
      assert_null(methods[i].stream);
    } else {
      assert_null(methods[i].handler);
      assert_non_null(methods[i].stream);
      assert_false(methods[i].offload);
    }
    assert_ptr_equal(kilnd_rpc_method_find(methods[i].path), &methods[i]);
    for (size_t j = 0; j < i; j++) assert_string_not_equal(methods[i].path, methods[j].path);
  }
  assert_non_null(served(GET_SERVER_INFO));
  assert_non_null(served(GET_STATS));
  assert_non_null(served(HEALTH_CHECK));

  /* kiln.proto's `stream` keywords (protobuf-c's descriptors do not carry them):
   * a served method must be registered with its contract's kind, every other
   * served method is unary. */
  static const struct {
    const char *path;
    kilnd_method_kind_t kind;
  } streaming[] = {
      {"/kiln.v1.Kiln/WatchJob", KILND_METHOD_SERVER_STREAMING},
      {"/kiln.v1.Kiln/PutSource", KILND_METHOD_CLIENT_STREAMING},
      {"/kiln.v1.Kiln/GetArtifact", KILND_METHOD_SERVER_STREAMING},
      {"/kiln.v1.Kiln/Recompile", KILND_METHOD_BIDI_STREAMING},
      {"/grpc.health.v1.Health/Watch", KILND_METHOD_SERVER_STREAMING},
  };
  for (size_t i = 0; i < count; i++) {
    kilnd_method_kind_t want = KILND_METHOD_UNARY;
    for (size_t k = 0; k < sizeof streaming / sizeof streaming[0]; k++) {
      if (strcmp(methods[i].path, streaming[k].path) == 0) want = streaming[k].kind;
    }
    if (methods[i].kind != want) {
      fail_msg("%s is registered as kind %d, the contract says %d", methods[i].path, (int)methods[i].kind,
               (int)want);
    }
  }
}

/* Every method of `service` is known and served ones take the service's request
 * type; the loop-thread handlers tested here (the others need a cache) answer an
 * empty request with the service's response type. Returns the number of methods. */
static size_t check_service(fixture_t *f, const ProtobufCServiceDescriptor *service) {
  for (unsigned i = 0; i < service->n_methods; i++) {
    const ProtobufCMethodDescriptor *md = &service->methods[i];
    char path[256];
    snprintf(path, sizeof path, "/%s/%s", service->name, md->name);
    if (!is_known(path)) fail_msg("contract method %s is not in the method table", path);
    const kilnd_method_t *m = served(path);
    if (!m) continue;
    if (m->request_descriptor != md->input) {
      fail_msg("%s takes %s, the contract says %s", path, m->request_descriptor->name, md->input->name);
    }
    if (m->handler != kilnd_rpc_get_server_info && m->handler != kilnd_rpc_get_stats &&
        m->handler != kilnd_rpc_health_check) {
      continue;
    }
    /* A request as the server decodes it from an empty body. */
    ProtobufCMessage *req = protobuf_c_message_unpack(md->input, NULL, 0, (const uint8_t *)"");
    assert_non_null(req);
    ProtobufCMessage *resp = NULL;
    kiln_status_t st = m->handler(&f->env, &f->call, req, &resp);
    protobuf_c_message_free_unpacked(req, NULL);
    if (st) fail_msg("%s failed: %s", path, kiln_status_message(st));
    assert_non_null(resp);
    assert_ptr_equal(resp->descriptor, md->output);
    ProtobufCMessage *back = roundtrip(resp);
    protobuf_c_message_free_unpacked(back, NULL);
  }
  return service->n_methods;
}

static void test_contract_methods_known_and_typed(void **state) {
  fixture_t *f = *state;
  size_t total = check_service(f, &kiln__v1__kiln__descriptor);
  total += check_service(f, &grpc__health__v1__health__descriptor);
  /* And nothing else is: the known list is exactly the two services. */
  size_t known = 0;
  kilnd_rpc_methods(&known);
  if (known != total) fail_msg("%zu known paths, the two services have %zu methods", known, total);
}

static void test_unserved_contract_methods(void **state) {
  (void)state;
  size_t unserved = 0, n_served = 0, known = 0;
  const kilnd_method_t *methods = kilnd_rpc_methods(&known);
  for (size_t i = 0; i < known; i++) {
    const char *const *p = &methods[i].path;
    if (served(*p)) {
      n_served++;
      continue;
    }
    unserved++;
    kiln_status_t st = kilnd_rpc_unserved(*p);
    if (kiln_status_code(st) != KILN_STATUS_UNIMPLEMENTED) {
      fail_msg("%s: expected UNIMPLEMENTED, got %s", *p, kiln_status_code_name(kiln_status_code(st)));
    }
    if (!strstr(kiln_status_message(st), *p)) {
      fail_msg("%s: message does not name the method: %s", *p, kiln_status_message(st));
    }
    if (!strstr(kiln_status_message(st), methods[i].capability)) {
      fail_msg("%s: message does not name the capability: %s", *p, kiln_status_message(st));
    }
    kiln_status_free(st);
  }
  assert_int_equal(unserved + n_served, known);
  assert_true(unserved > 0); /* grpc.health.v1.Health/Watch */
}

static void test_unserved_unknown_paths(void **state) {
  (void)state;
  static const char *const paths[] = {"/kiln.v1.Kiln/NoSuchMethod", "/other.v1.Svc/Do",
                                      "/kiln.v1.Kiln/getserverinfo", "not-a-path", ""};
  for (size_t i = 0; i < sizeof paths / sizeof paths[0]; i++) {
    kiln_status_t st = kilnd_rpc_unserved(paths[i]);
    assert_int_equal(kiln_status_code(st), KILN_STATUS_UNIMPLEMENTED);
    char quoted[128];
    snprintf(quoted, sizeof quoted, "'%s'", paths[i]);
    if (!strstr(kiln_status_message(st), quoted)) {
      fail_msg("message does not name %s: %s", quoted, kiln_status_message(st));
    }
    kiln_status_free(st);
  }
}

static void test_call_should_stop(void **state) {
  (void)state;
  atomic_bool stopping = false;
  kilnd_call_ctx_t call = {
      .arena = NULL, .deadline_monotonic_ns = INT64_MAX, .stopping = &stopping, .client = "ipv4:127.0.0.1"};
  assert_false(kilnd_call_should_stop(&call));
  atomic_store(&stopping, true);
  assert_true(kilnd_call_should_stop(&call));
  atomic_store(&stopping, false);
  call.deadline_monotonic_ns = kiln_time_monotonic_ns() - 1;
  assert_true(kilnd_call_should_stop(&call));
  call.deadline_monotonic_ns = kiln_time_monotonic_ns() + 60 * 1000000000LL;
  call.stopping = NULL;
  assert_false(kilnd_call_should_stop(&call));
}

int main(void) {
#define T(f) cmocka_unit_test_setup_teardown(f, setup, teardown)
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_call_should_stop),
      T(test_server_info),
      T(test_server_info_follows_env),
      T(test_server_info_request_fields_ignored),
      T(test_server_info_features_list_served_methods),
      T(test_server_info_target_compile_flags),
      T(test_stats_reflect_counters),
      T(test_stats_every_code),
      T(test_stats_empty),
      T(test_stats_uptime),
      T(test_health_serving),
      T(test_health_draining),
      T(test_health_unknown_service),
      T(test_methods_are_known),
      T(test_contract_methods_known_and_typed),
      T(test_unserved_contract_methods),
      T(test_unserved_unknown_paths),
  };
#undef T
  return cmocka_run_group_tests(tests, NULL, NULL);
}
