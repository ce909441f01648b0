/* Listen address parsing and preflight; see listen.h for why the preflight exists. */
#include "daemon/listen.h"

#include <arpa/inet.h>
#include <errno.h>
#include <netdb.h>
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include "base/alloc.h"
#include "base/buf.h"

static KILN_MUST_USE kiln_status_t bad_address(const char *text, const char *why) {
  return KILN_STATUS(KILN_STATUS_INVALID_ARGUMENT,
                     "invalid listen address '%s': %s (use HOST:PORT, [IPV6]:PORT or unix:PATH)", text, why);
}

kiln_status_t kilnd_listen_parse(const char *text, kilnd_listen_addr_t *out_addr) {
  memset(out_addr, 0, sizeof *out_addr);
  if (!text || !*text) return bad_address("", "empty");
  if (strncmp(text, "unix:", 5) == 0) {
    const char *path = text + 5;
    if (strncmp(path, "//", 2) == 0) path += 2;
    if (!*path) return bad_address(text, "no socket path");
    if (strlen(path) >= sizeof(((struct sockaddr_un *)0)->sun_path)) {
      return bad_address(text, "socket path longer than 107 bytes");
    }
    out_addr->is_unix = true;
    out_addr->path = kiln_strdup(path);
    return NULL;
  }
  const char *colon;
  char *host;
  if (text[0] == '[') {
    const char *close = strchr(text, ']');
    if (!close || close[1] != ':') return bad_address(text, "expected [IPV6]:PORT");
    host = kiln_strndup(text + 1, (size_t)(close - text - 1));
    colon = close + 1;
  } else {
    colon = strrchr(text, ':');
    if (!colon) return bad_address(text, "no port");
    host = kiln_strndup(text, (size_t)(colon - text));
    if (strchr(host, ':')) {
      kiln_free(host);
      return bad_address(text, "IPv6 addresses go in brackets");
    }
  }
  char *end;
  errno = 0;
  long port = strtol(colon + 1, &end, 10);
  if (!*host || colon[1] == '\0' || *end || errno || port < 0 || port > 65535) {
    const char *why = !*host ? "missing host" : colon[1] == '\0' ? "missing port" : "port must be 0..65535";
    kiln_free(host);
    return bad_address(text, why);
  }
  out_addr->host = host;
  out_addr->port = (int)port;
  return NULL;
}

static KILN_MUST_USE kiln_status_t preflight_unix(const char *path) {
  struct stat st;
  if (lstat(path, &st) != 0) {
    if (errno != ENOENT) return KILN_STATUS_ERRNO(errno, "cannot listen on unix:%s", path);
    /* gRPC creates the socket, but not its directory. */
    char *dir = kiln_strdup(path);
    char *slash = strrchr(dir, '/');
    kiln_status_t status = NULL;
    if (slash) {
      if (slash == dir)
        slash[1] = '\0';
      else
        *slash = '\0';
      struct stat dst;
      if (stat(dir, &dst) != 0 || !S_ISDIR(dst.st_mode)) {
        status = KILN_STATUS(KILN_STATUS_NOT_FOUND,
                             "cannot listen on unix:%s: directory %s does not exist; create it "
                             "or choose another path",
                             path, dir);
      }
    }
    kiln_free(dir);
    return status;
  }
  if (!S_ISSOCK(st.st_mode)) {
    return KILN_STATUS(KILN_STATUS_FAILED_PRECONDITION,
                       "cannot listen on unix:%s: a file that is not a socket is there; "
                       "remove it or choose another path",
                       path);
  }
  int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return KILN_STATUS_ERRNO(errno, "cannot create a unix socket");
  struct sockaddr_un sun = {.sun_family = AF_UNIX};
  memcpy(sun.sun_path, path, strlen(path) + 1);
  int rc = connect(fd, (struct sockaddr *)&sun, sizeof sun);
  int err = errno;
  close(fd);
  if (rc != 0 && err != ECONNREFUSED) {
    /* Alive but not ours to take (e.g. EACCES): gRPC would unlink it. */
    return KILN_STATUS_ERRNO(err,
                             "cannot listen on unix:%s: a socket is there and it is not "
                             "stale; remove it or choose another path",
                             path);
  }
  if (rc == 0) {
    return KILN_STATUS(KILN_STATUS_UNAVAILABLE,
                       "cannot listen on unix:%s: address already in use (another process is "
                       "serving it); stop it or choose another --listen",
                       path);
  }
  return NULL; /* a stale socket: gRPC unlinks and rebinds it */
}

int kilnd_listen_addrinfo(const kilnd_listen_addr_t *addr, struct addrinfo **out_res) {
  struct addrinfo hints = {
      .ai_family = AF_UNSPEC, .ai_socktype = SOCK_STREAM, .ai_flags = AI_PASSIVE | AI_NUMERICSERV};
  char port[8];
  snprintf(port, sizeof port, "%d", addr->port);
  *out_res = NULL;
  return getaddrinfo(addr->host, port, &hints, out_res);
}

static KILN_MUST_USE kiln_status_t preflight_tcp(const kilnd_listen_addr_t *addr) {
  struct addrinfo *res = NULL;
  int gai = kilnd_listen_addrinfo(addr, &res);
  if (gai != 0) {
    return KILN_STATUS(KILN_STATUS_INVALID_ARGUMENT, "cannot listen on %s:%d: %s", addr->host, addr->port,
                       gai_strerror(gai));
  }
  kiln_status_t status = NULL;
  for (struct addrinfo *ai = res; ai && !status; ai = ai->ai_next) {
    int fd = socket(ai->ai_family, ai->ai_socktype | SOCK_CLOEXEC, ai->ai_protocol);
    if (fd < 0) continue; /* e.g. no IPv6 on this host: gRPC skips it too */
    int one = 1;
    setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one); /* as gRPC does */
    if (bind(fd, ai->ai_addr, ai->ai_addrlen) != 0) {
      int err = errno;
      if (err == EADDRINUSE) {
        status = KILN_STATUS(KILN_STATUS_UNAVAILABLE,
                             "cannot listen on %s:%d: address already in use; stop the other "
                             "process or choose another --listen",
                             addr->host, addr->port);
      } else {
        status = KILN_STATUS_ERRNO(err, "cannot listen on %s:%d", addr->host, addr->port);
      }
    }
    close(fd);
  }
  freeaddrinfo(res);
  return status;
}

kiln_status_t kilnd_listen_preflight(const kilnd_listen_addr_t *addr) {
  if (addr->is_unix) return preflight_unix(addr->path);
  if (addr->port == 0) return NULL; /* any free port */
  return preflight_tcp(addr);
}

static void append_host(kiln_buf_t *buf, const char *host) {
  if (strchr(host, ':'))
    kiln_buf_appendf(buf, "[%s]", host);
  else
    kiln_buf_append_str(buf, host);
}

char *kilnd_listen_grpc_target(const kilnd_listen_addr_t *addr) {
  kiln_buf_t buf;
  kiln_buf_init(&buf);
  if (addr->is_unix) {
    kiln_buf_appendf(&buf, "unix:%s", addr->path);
  } else {
    append_host(&buf, addr->host);
    kiln_buf_appendf(&buf, ":%d", addr->port);
  }
  char *s = kiln_buf_take(&buf);
  kiln_buf_deinit(&buf);
  return s;
}

char *kilnd_listen_client_address(const kilnd_listen_addr_t *addr, int bound_port) {
  kiln_buf_t buf;
  kiln_buf_init(&buf);
  if (addr->is_unix) {
    kiln_buf_appendf(&buf, "unix:%s", addr->path);
  } else {
    /* A wildcard bind is reached through loopback. */
    const char *host = addr->host;
    if (strcmp(host, "0.0.0.0") == 0)
      host = "127.0.0.1";
    else if (strcmp(host, "::") == 0)
      host = "::1";
    append_host(&buf, host);
    kiln_buf_appendf(&buf, ":%d", addr->port ? addr->port : bound_port);
  }
  char *s = kiln_buf_take(&buf);
  kiln_buf_deinit(&buf);
  return s;
}

void kilnd_listen_addr_deinit(kilnd_listen_addr_t *addr) {
  kiln_free(addr->host);
  kiln_free(addr->path);
  memset(addr, 0, sizeof *addr);
}

bool kilnd_listen_is_loopback(const kilnd_listen_addr_t *addr) {
  if (addr->is_unix || !addr->host) return false;
  if (strcmp(addr->host, "localhost") == 0) return true;
  struct in_addr v4;
  if (inet_pton(AF_INET, addr->host, &v4) == 1) return (ntohl(v4.s_addr) >> 24) == 127;
  struct in6_addr v6;
  if (inet_pton(AF_INET6, addr->host, &v6) == 1) {
    if (IN6_IS_ADDR_LOOPBACK(&v6)) return true;
    return IN6_IS_ADDR_V4MAPPED(&v6) && v6.s6_addr[12] == 127;
  }
  return false;
}
