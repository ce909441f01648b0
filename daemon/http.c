/* The operators' HTTP endpoint (see http.h for the thread model).
 *
 * Invariants: `snap`, `requested`, `answered` and `loop_alive` are under `mu`;
 * `scratch` is the loop's own (filled without the lock, then copied under it).
 * The loop answers every request generation it sees with one collect, so a burst
 * of scrapes costs one snapshot. Once `loop_alive` is false nobody calls
 * uv_async_send, so the async handle may be closed.
 */
#include "daemon/http.h"

#include <errno.h>
#include <microhttpd.h>
#include <netdb.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "base/alloc.h"
#include "base/buf.h"
#include "base/log.h"
#include "base/time.h"
#include "daemon/listen.h"

#define WAIT_NS (1000LL * 1000 * 1000)

struct kilnd_http_s {
  struct MHD_Daemon *mhd;
  uv_async_t async;
  kiln_cache_t *cache;
  kilnd_http_collect_fn_t collect;
  void *user;
  char *address;
  kilnd_metrics_snapshot_t scratch; /* loop thread only */

  uv_mutex_t mu;
  uv_cond_t cv;
  bool loop_alive;
  uint64_t requested, answered;
  kilnd_metrics_snapshot_t snap;
};

/* Loop: answer every outstanding request with one fresh snapshot. */
static void on_refresh(uv_async_t *handle) {
  kilnd_http_t *http = handle->data;
  http->collect(http->user, &http->scratch);
  uv_mutex_lock(&http->mu);
  http->snap = http->scratch;
  http->answered = http->requested;
  uv_cond_broadcast(&http->cv);
  uv_mutex_unlock(&http->mu);
}

/* HTTP thread: copies a snapshot into *out; true when the loop answered in time. */
static bool refresh(kilnd_http_t *http, kilnd_metrics_snapshot_t *out) {
  uv_mutex_lock(&http->mu);
  bool fresh = false;
  if (http->loop_alive) {
    uint64_t gen = ++http->requested;
    uv_async_send(&http->async);
    int64_t give_up = kiln_time_monotonic_ns() + WAIT_NS;
    while (http->loop_alive && http->answered < gen) {
      int64_t left = give_up - kiln_time_monotonic_ns();
      if (left <= 0 || uv_cond_timedwait(&http->cv, &http->mu, (uint64_t)left) != 0) break;
    }
    fresh = http->answered >= gen;
  }
  *out = http->snap;
  uv_mutex_unlock(&http->mu);
  return fresh;
}

static enum MHD_Result respond(struct MHD_Connection *conn, unsigned code, const char *type, const char *body,
                               size_t len) {
  struct MHD_Response *resp = MHD_create_response_from_buffer(len, (void *)body, MHD_RESPMEM_MUST_COPY);
  if (!resp) return MHD_NO;
  MHD_add_response_header(resp, MHD_HTTP_HEADER_CONTENT_TYPE, type);
  if (code == MHD_HTTP_METHOD_NOT_ALLOWED) MHD_add_response_header(resp, MHD_HTTP_HEADER_ALLOW, "GET, HEAD");
  enum MHD_Result r = MHD_queue_response(conn, code, resp);
  MHD_destroy_response(resp);
  return r;
}

static enum MHD_Result respond_text(struct MHD_Connection *conn, unsigned code, const char *line) {
  kiln_buf_t body;
  kiln_buf_init(&body);
  kiln_buf_appendf(&body, "%s\n", line);
  enum MHD_Result r = respond(conn, code, "text/plain; charset=utf-8", body.data, body.len);
  kiln_buf_deinit(&body);
  return r;
}

static enum MHD_Result serve_metrics(kilnd_http_t *http, struct MHD_Connection *conn) {
  kilnd_metrics_snapshot_t *snap = kiln_calloc(1, sizeof *snap);
  refresh(http, snap);
  if (http->cache && snap->has_cache) {
    /* Exact totals from the index (SQLite, so here rather than on the loop); the
     * counters stay the snapshot's when the query fails. */
    kiln_cache_stats_t cs;
    kiln_status_t st = kiln_cache_stats(http->cache, &cs);
    if (!st) snap->cache = cs;
    kiln_status_free(st);
  }
  kiln_buf_t out;
  kiln_buf_init(&out);
  kilnd_metrics_write(snap, &out);
  enum MHD_Result r =
      respond(conn, MHD_HTTP_OK, "text/plain; version=0.0.4; charset=utf-8", out.data, out.len);
  kiln_buf_deinit(&out);
  kiln_free(snap);
  return r;
}

static enum MHD_Result on_request(void *cls, struct MHD_Connection *conn, const char *url, const char *method,
                                  const char *version, const char *upload_data, size_t *upload_data_size,
                                  void **req_cls) {
  (void)version, (void)upload_data, (void)req_cls;
  kilnd_http_t *http = cls;
  /* Answering on the first call is allowed; a request body is discarded. */
  *upload_data_size = 0;
  bool known = strcmp(url, "/metrics") == 0 || strcmp(url, "/healthz") == 0 || strcmp(url, "/readyz") == 0;
  if (!known) return respond_text(conn, MHD_HTTP_NOT_FOUND, "not found: try /metrics, /healthz or /readyz");
  if (strcmp(method, MHD_HTTP_METHOD_GET) != 0 && strcmp(method, MHD_HTTP_METHOD_HEAD) != 0) {
    return respond_text(conn, MHD_HTTP_METHOD_NOT_ALLOWED, "method not allowed: use GET");
  }
  if (strcmp(url, "/metrics") == 0) return serve_metrics(http, conn);
  kilnd_metrics_snapshot_t *snap = kiln_calloc(1, sizeof *snap);
  bool fresh = refresh(http, snap);
  enum MHD_Result r;
  if (strcmp(url, "/healthz") == 0) {
    r = fresh ? respond_text(conn, MHD_HTTP_OK, "ok")
              : respond_text(conn, MHD_HTTP_SERVICE_UNAVAILABLE,
                             "the event loop did not answer within 1 s (stuck, or stopping)");
  } else {
    const char *why = kilnd_metrics_not_ready(snap);
    r = why ? respond_text(conn, MHD_HTTP_SERVICE_UNAVAILABLE, why)
            : respond_text(conn, MHD_HTTP_OK, "ready");
  }
  kiln_free(snap);
  return r;
}

/* Binds the listening socket ourselves, for a precise error (libmicrohttpd says
 * only that it failed) and the bound port. */
static KILN_MUST_USE kiln_status_t bind_socket(const kilnd_listen_addr_t *addr, const char *text, int *out_fd,
                                               int *out_port) {
  *out_fd = -1;
  struct addrinfo *res = NULL;
  int gai = kilnd_listen_addrinfo(addr, &res);
  if (gai != 0) {
    return KILN_STATUS(KILN_STATUS_INVALID_ARGUMENT, "cannot listen on metrics-listen %s: %s", text,
                       gai_strerror(gai));
  }
  kiln_status_t status =
      KILN_STATUS(KILN_STATUS_UNAVAILABLE, "cannot listen on metrics-listen %s: no usable address", text);
  for (struct addrinfo *ai = res; ai; ai = ai->ai_next) {
    int fd = socket(ai->ai_family, ai->ai_socktype | SOCK_CLOEXEC, ai->ai_protocol);
    if (fd < 0) continue;
    int one = 1;
    setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
    if (bind(fd, ai->ai_addr, ai->ai_addrlen) != 0 || listen(fd, 64) != 0) {
      int err = errno;
      close(fd);
      kiln_status_free(status);
      status = err == EADDRINUSE
                   ? KILN_STATUS(KILN_STATUS_UNAVAILABLE,
                                 "cannot listen on metrics-listen %s: address already in use; stop the other "
                                 "process, choose another --metrics-listen, or turn it off with "
                                 "--metrics-listen off",
                                 text)
                   : KILN_STATUS_ERRNO(err, "cannot listen on metrics-listen %s", text);
      continue;
    }
    struct sockaddr_storage ss;
    socklen_t len = sizeof ss;
    getsockname(fd, (struct sockaddr *)&ss, &len);
    *out_port = ntohs(ss.ss_family == AF_INET6 ? ((struct sockaddr_in6 *)&ss)->sin6_port
                                               : ((struct sockaddr_in *)&ss)->sin_port);
    *out_fd = fd;
    kiln_status_free(status);
    status = NULL;
    break;
  }
  freeaddrinfo(res);
  return status;
}

kiln_status_t kilnd_http_create(uv_loop_t *loop, const char *listen, kiln_cache_t *cache,
                                kilnd_http_collect_fn_t collect, void *user, kilnd_http_t **out_http) {
  *out_http = NULL;
  kilnd_listen_addr_t addr;
  memset(&addr, 0, sizeof addr);
  kiln_status_t status = kilnd_listen_parse(listen, &addr);
  if (!status && addr.is_unix) {
    status = KILN_STATUS(KILN_STATUS_INVALID_ARGUMENT,
                         "metrics-listen %s: a unix socket is not supported; give HOST:PORT, "
                         "[IPV6]:PORT or off",
                         listen);
  }
  int fd = -1, port = 0;
  if (!status) status = bind_socket(&addr, listen, &fd, &port);
  if (status) {
    kilnd_listen_addr_deinit(&addr);
    return status;
  }
  kilnd_http_t *http = kiln_calloc(1, sizeof *http);
  http->cache = cache;
  http->collect = collect;
  http->user = user;
  http->address = kilnd_listen_client_address(&addr, port);
  kilnd_listen_addr_deinit(&addr);
  uv_mutex_init(&http->mu);
  uv_cond_init(&http->cv);
  uv_async_init(loop, &http->async, on_refresh);
  http->async.data = http;
  uv_unref((uv_handle_t *)&http->async); /* the endpoint alone does not keep kilnd running */
  http->loop_alive = true;
  http->mhd = MHD_start_daemon(MHD_USE_INTERNAL_POLLING_THREAD | MHD_USE_AUTO, 0, NULL, NULL, on_request,
                               http, MHD_OPTION_LISTEN_SOCKET, fd, MHD_OPTION_CONNECTION_LIMIT, (unsigned)16,
                               MHD_OPTION_CONNECTION_TIMEOUT, (unsigned)10, MHD_OPTION_THREAD_POOL_SIZE,
                               (unsigned)2, MHD_OPTION_END);
  if (!http->mhd) {
    close(fd);
    status = KILN_STATUS(KILN_STATUS_INTERNAL, "cannot start the HTTP server on metrics-listen %s", listen);
    http->loop_alive = false;
    kilnd_http_destroy(http);
    return status;
  }
  *out_http = http;
  return NULL;
}

const char *kilnd_http_address(const kilnd_http_t *http) { return http->address; }

static void on_closed(uv_handle_t *handle) {
  kilnd_http_t *http = handle->data;
  uv_cond_destroy(&http->cv);
  uv_mutex_destroy(&http->mu);
  kiln_free(http->address);
  kiln_free(http);
}

void kilnd_http_destroy(kilnd_http_t *http) {
  if (!http) return;
  uv_mutex_lock(&http->mu);
  http->loop_alive = false;
  uv_cond_broadcast(&http->cv);
  uv_mutex_unlock(&http->mu);
  /* Joins the threads; a request waiting for the loop has just been woken. The
   * listening socket is closed here too. */
  if (http->mhd) MHD_stop_daemon(http->mhd);
  http->mhd = NULL;
  uv_close((uv_handle_t *)&http->async, on_closed);
}
