/* Unit tests for client/rpc's streaming calls where no kilnd is needed (the happy
 * paths run against the real kilnd in tests/integration/test_cli_compile.py):
 * a port nobody listens on gives UNAVAILABLE from read and finish, the same
 * outcome on every later read, and false from write; a listener that accepts the
 * connection but never speaks gRPC makes a bounded read time out with the read
 * left pending (a second bounded read times out again on the same batch), after
 * which cancel ends it with CANCELLED; an unbounded read ends at the call's
 * deadline with DEADLINE_EXCEEDED; destroying a stream with a read pending does
 * not hang; trailers are absent before the end. Every test destroys its streams
 * and client, so ASan/LSan check that pending batches are all plucked. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <arpa/inet.h>
#include <netinet/in.h>
#include <stdio.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "base/status.h"
#include "client/rpc.h"
#include "kiln/v1/kiln.pb-c.h"

/* A listening TCP socket on 127.0.0.1 that never accepts (the kernel completes
 * the handshake from its backlog; nothing ever answers). */
static int silent_listener(char *addr, size_t cap) {
  int fd = socket(AF_INET, SOCK_STREAM, 0);
  assert_true(fd >= 0);
  struct sockaddr_in sa;
  memset(&sa, 0, sizeof sa);
  sa.sin_family = AF_INET;
  sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  assert_int_equal(bind(fd, (struct sockaddr *)&sa, sizeof sa), 0);
  assert_int_equal(listen(fd, 8), 0);
  socklen_t len = sizeof sa;
  assert_int_equal(getsockname(fd, (struct sockaddr *)&sa, &len), 0);
  snprintf(addr, cap, "127.0.0.1:%u", ntohs(sa.sin_port));
  return fd;
}

/* A port that was free a moment ago: nothing listens there. */
static void closed_port(char *addr, size_t cap) {
  int fd = silent_listener(addr, cap);
  close(fd);
}

static int64_t now_ms(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

static kiln_client_stream_t *open_watch(kiln_client_t *client) {
  Kiln__V1__WatchJobRequest req = KILN__V1__WATCH_JOB_REQUEST__INIT;
  req.job_id = "j-test";
  return kiln_client_stream_open(client, "/kiln.v1.Kiln/WatchJob", &req.base);
}

static void test_unreachable(void **state) {
  (void)state;
  char addr[64];
  closed_port(addr, sizeof addr);
  kiln_client_t *client = NULL;
  assert_null(kiln_client_create(addr, 5000, 1 << 20, &client));
  kiln_client_stream_t *s = open_watch(client);
  ProtobufCMessage *msg = (ProtobufCMessage *)1;
  bool timed_out = true;
  kiln_status_t st = kiln_client_stream_read(s, &kiln__v1__job_event__descriptor, -1, &msg, &timed_out);
  assert_int_equal(kiln_status_code(st), KILN_STATUS_UNAVAILABLE);
  assert_null(msg);
  assert_false(timed_out);
  kiln_status_free(st);
  st = kiln_client_stream_read(s, &kiln__v1__job_event__descriptor, -1, &msg, &timed_out);
  assert_int_equal(kiln_status_code(st), KILN_STATUS_UNAVAILABLE); /* the same outcome again */
  kiln_status_free(st);
  kiln_client_stream_destroy(s);

  /* Client-streaming: the write fails, finish says why. */
  s = kiln_client_stream_open(client, "/kiln.v1.Kiln/PutSource", NULL);
  Kiln__V1__PutSourceChunk chunk = KILN__V1__PUT_SOURCE_CHUNK__INIT;
  Kiln__V1__SourceMetadata meta = KILN__V1__SOURCE_METADATA__INIT;
  chunk.chunk_case = KILN__V1__PUT_SOURCE_CHUNK__CHUNK_METADATA;
  chunk.metadata = &meta;
  assert_false(kiln_client_stream_write(s, &chunk.base));
  ProtobufCMessage *resp = (ProtobufCMessage *)1;
  st = kiln_client_stream_finish(s, &kiln__v1__put_source_response__descriptor, &resp);
  assert_int_equal(kiln_status_code(st), KILN_STATUS_UNAVAILABLE);
  assert_null(resp);
  kiln_status_free(st);
  size_t len = 1;
  assert_null(kiln_client_stream_trailer(s, "kiln-diagnostics-bin", &len));
  assert_int_equal(len, 0);
  kiln_client_stream_destroy(s);
  kiln_client_destroy(client);
}

static void test_pending_read_then_cancel(void **state) {
  (void)state;
  char addr[64];
  int fd = silent_listener(addr, sizeof addr);
  kiln_client_t *client = NULL;
  assert_null(kiln_client_create(addr, 30000, 1 << 20, &client));
  kiln_client_stream_t *s = open_watch(client);
  ProtobufCMessage *msg = NULL;
  bool timed_out = false;
  int64_t t0 = now_ms();
  kiln_status_t st = kiln_client_stream_read(s, &kiln__v1__job_event__descriptor, 100, &msg, &timed_out);
  assert_null(st);
  assert_null(msg);
  assert_true(timed_out);
  assert_true(now_ms() - t0 >= 90);
  st = kiln_client_stream_read(s, &kiln__v1__job_event__descriptor, 100, &msg, &timed_out);
  assert_null(st);
  assert_true(timed_out);
  kiln_client_stream_cancel(s);
  kiln_client_stream_cancel(s); /* idempotent */
  st = kiln_client_stream_read(s, &kiln__v1__job_event__descriptor, -1, &msg, &timed_out);
  assert_int_equal(kiln_status_code(st), KILN_STATUS_CANCELLED);
  assert_false(timed_out);
  kiln_status_free(st);
  kiln_client_stream_destroy(s);

  /* Destroy with a read still pending. */
  s = open_watch(client);
  st = kiln_client_stream_read(s, &kiln__v1__job_event__descriptor, 50, &msg, &timed_out);
  assert_null(st);
  assert_true(timed_out);
  kiln_client_stream_destroy(s);
  kiln_client_destroy(client);
  close(fd);
}

static void test_deadline(void **state) {
  (void)state;
  char addr[64];
  int fd = silent_listener(addr, sizeof addr);
  kiln_client_t *client = NULL;
  assert_null(kiln_client_create(addr, 300, 1 << 20, &client));
  kiln_client_stream_t *s = open_watch(client);
  ProtobufCMessage *msg = NULL;
  bool timed_out = false;
  int64_t t0 = now_ms();
  kiln_status_t st = kiln_client_stream_read(s, &kiln__v1__job_event__descriptor, -1, &msg, &timed_out);
  assert_int_equal(kiln_status_code(st), KILN_STATUS_DEADLINE_EXCEEDED);
  assert_true(now_ms() - t0 < 10000);
  kiln_status_free(st);
  kiln_client_stream_destroy(s);
  kiln_client_stream_destroy(NULL);
  kiln_client_destroy(client);
  close(fd);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_unreachable),
      cmocka_unit_test(test_pending_read_then_cancel),
      cmocka_unit_test(test_deadline),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
