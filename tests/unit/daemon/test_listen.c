/* Unit tests for daemon/listen: parsing HOST:PORT, [IPV6]:PORT, unix:PATH and
 * unix:///abs (ports 0 and 65535, the 107-byte unix path limit) and rejecting bad
 * forms with INVALID_ARGUMENT and a cleared out-param; the gRPC target and the
 * client address (IPv6 re-bracketed, wildcards 0.0.0.0 and :: reached through
 * loopback, port 0 replaced by the bound port); and the preflight against real
 * sockets opened here: a listening TCP port is UNAVAILABLE ("in use"), a free one
 * and port 0 are OK; a live unix socket is UNAVAILABLE, a stale one OK, a regular
 * file FAILED_PRECONDITION, and a path whose directory does not exist fails. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include "base/alloc.h"
#include "base/status.h"
#include "daemon/listen.h"
#include "tests/unit/support/testing.h"

/* ---- Fixture: a temporary directory for unix sockets ---------------------- */

static char *tmpdir;

static int group_setup(void **state) {
  (void)state;
  /* Under /tmp, not $TMPDIR: sun_path holds only 107 bytes. */
  tmpdir = kiln_test_tmpdir_in("/tmp", "kiln-listen");
  return tmpdir ? 0 : -1;
}

static int group_teardown(void **state) {
  (void)state;
  kiln_test_remove_tree(tmpdir);
  free(tmpdir);
  tmpdir = NULL;
  return 0;
}

static void path_in_tmp(char *out, size_t size, const char *name) {
  snprintf(out, size, "%s/%s", tmpdir, name);
}

/* Asserts the code of `status` and frees it. */
#define assert_code kiln_test_assert_code

static void assert_addr_cleared(const kilnd_listen_addr_t *a) {
  assert_false(a->is_unix);
  assert_null(a->host);
  assert_null(a->path);
  assert_int_equal(a->port, 0);
}

/* ---- Parse: accepted forms ----------------------------------------------- */

static void test_parse_host_port(void **state) {
  (void)state;
  kilnd_listen_addr_t a;
  assert_null(kilnd_listen_parse("127.0.0.1:7477", &a));
  assert_false(a.is_unix);
  assert_string_equal(a.host, "127.0.0.1");
  assert_int_equal(a.port, 7477);
  assert_null(a.path);
  kilnd_listen_addr_deinit(&a);
  assert_addr_cleared(&a);

  assert_null(kilnd_listen_parse("localhost:0", &a));
  assert_string_equal(a.host, "localhost");
  assert_int_equal(a.port, 0);
  kilnd_listen_addr_deinit(&a);

  assert_null(kilnd_listen_parse("0.0.0.0:65535", &a));
  assert_string_equal(a.host, "0.0.0.0");
  assert_int_equal(a.port, 65535);
  kilnd_listen_addr_deinit(&a);
}

static void test_parse_bracketed_ipv6(void **state) {
  (void)state;
  kilnd_listen_addr_t a;
  assert_null(kilnd_listen_parse("[::1]:7477", &a));
  assert_false(a.is_unix);
  assert_string_equal(a.host, "::1"); /* brackets stripped */
  assert_int_equal(a.port, 7477);
  kilnd_listen_addr_deinit(&a);

  assert_null(kilnd_listen_parse("[::]:0", &a));
  assert_string_equal(a.host, "::");
  assert_int_equal(a.port, 0);
  kilnd_listen_addr_deinit(&a);

  assert_null(kilnd_listen_parse("[fe80::1%eth0]:443", &a));
  assert_string_equal(a.host, "fe80::1%eth0");
  assert_int_equal(a.port, 443);
  kilnd_listen_addr_deinit(&a);
}

static void test_parse_unix(void **state) {
  (void)state;
  kilnd_listen_addr_t a;
  assert_null(kilnd_listen_parse("unix:/run/kiln/kilnd.sock", &a));
  assert_true(a.is_unix);
  assert_string_equal(a.path, "/run/kiln/kilnd.sock");
  assert_null(a.host);
  kilnd_listen_addr_deinit(&a);
  assert_addr_cleared(&a);

  /* The URI spelling unix:///abs names the absolute path /abs. */
  assert_null(kilnd_listen_parse("unix:///run/kilnd.sock", &a));
  assert_true(a.is_unix);
  assert_string_equal(a.path, "/run/kilnd.sock");
  kilnd_listen_addr_deinit(&a);

  /* A relative path is kept as given. */
  assert_null(kilnd_listen_parse("unix:kilnd.sock", &a));
  assert_true(a.is_unix);
  assert_string_equal(a.path, "kilnd.sock");
  kilnd_listen_addr_deinit(&a);
}

static void test_parse_unix_path_length_limit(void **state) {
  (void)state;
  /* sun_path is 108 bytes: 107 characters plus the NUL fit, 108 do not. */
  char text[200];
  char path[120];
  memset(path, 'p', 107);
  path[0] = '/';
  path[107] = '\0';
  snprintf(text, sizeof text, "unix:%s", path);
  kilnd_listen_addr_t a;
  assert_null(kilnd_listen_parse(text, &a));
  assert_int_equal(strlen(a.path), 107);
  kilnd_listen_addr_deinit(&a);

  path[107] = 'p';
  path[108] = '\0';
  snprintf(text, sizeof text, "unix:%s", path);
  assert_code(kilnd_listen_parse(text, &a), KILN_STATUS_INVALID_ARGUMENT);
  assert_addr_cleared(&a);

  /* The limit applies to the path after unix:// as well. */
  snprintf(text, sizeof text, "unix://%s", path);
  assert_code(kilnd_listen_parse(text, &a), KILN_STATUS_INVALID_ARGUMENT);
}

/* ---- Parse: rejected forms ----------------------------------------------- */

static void test_parse_rejects_bad_forms(void **state) {
  (void)state;
  static const char *const bad[] = {
      "",                               /* empty */
      "localhost",                      /* no port */
      "127.0.0.1",                      /* no port */
      "127.0.0.1:",                     /* empty port */
      "127.0.0.1:65536",                /* port > 65535 */
      "127.0.0.1:99999999999999999999", /* overflows long */
      "127.0.0.1:-1",                   /* negative */
      "127.0.0.1:12ab",                 /* trailing junk */
      "127.0.0.1:0x50",                 /* not decimal */
      ":7477",                          /* empty host */
      "::1:7477",                       /* unbracketed IPv6 */
      "::7477",                         /* unbracketed IPv6 */
      "[::1]7477",                      /* no colon after the bracket */
      "[::1:7477",                      /* no closing bracket */
      "[::1]:",                         /* empty port */
      "[::1]:70000",                    /* port > 65535 */
      "[]:7477",                        /* empty bracketed host */
      "unix:",                          /* no path */
      "unix://",                        /* no path */
  };
  for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
    kilnd_listen_addr_t a;
    memset(&a, 0x5A, sizeof a); /* out-param must be cleared, not left as garbage */
    kiln_status_t st = kilnd_listen_parse(bad[i], &a);
    if (kiln_status_code(st) != KILN_STATUS_INVALID_ARGUMENT) {
      fail_msg("'%s': expected INVALID_ARGUMENT, got %s", bad[i],
               kiln_status_code_name(kiln_status_code(st)));
    }
    /* The message quotes the text so the user sees what was wrong. */
    if (!strstr(kiln_status_message(st), bad[i])) {
      fail_msg("'%s': message does not name it: %s", bad[i], kiln_status_message(st));
    }
    kiln_status_free(st);
    assert_addr_cleared(&a);
  }

  kilnd_listen_addr_t a;
  assert_code(kilnd_listen_parse(NULL, &a), KILN_STATUS_INVALID_ARGUMENT);
  assert_addr_cleared(&a);
}

/* ---- Formatting ---------------------------------------------------------- */

static char *target_of(const char *text) {
  kilnd_listen_addr_t a;
  kiln_status_t st = kilnd_listen_parse(text, &a);
  if (st) fail_msg("parse '%s': %s", text, kiln_status_message(st));
  char *s = kilnd_listen_grpc_target(&a);
  kilnd_listen_addr_deinit(&a);
  return s;
}

static char *client_of(const char *text, int bound_port) {
  kilnd_listen_addr_t a;
  kiln_status_t st = kilnd_listen_parse(text, &a);
  if (st) fail_msg("parse '%s': %s", text, kiln_status_message(st));
  char *s = kilnd_listen_client_address(&a, bound_port);
  kilnd_listen_addr_deinit(&a);
  return s;
}

#define assert_formats(fn_call, expected) \
  do {                                    \
    char *s__ = (fn_call);                \
    assert_non_null(s__);                 \
    assert_string_equal(s__, (expected)); \
    kiln_free(s__);                       \
  } while (0)

static void test_grpc_target(void **state) {
  (void)state;
  assert_formats(target_of("127.0.0.1:7477"), "127.0.0.1:7477");
  assert_formats(target_of("127.0.0.1:0"), "127.0.0.1:0");
  assert_formats(target_of("localhost:80"), "localhost:80");
  assert_formats(target_of("[::1]:7477"), "[::1]:7477");
  assert_formats(target_of("[::]:0"), "[::]:0");
  /* The server binds what was asked: wildcards are not rewritten here. */
  assert_formats(target_of("0.0.0.0:7477"), "0.0.0.0:7477");
  assert_formats(target_of("unix:/run/kilnd.sock"), "unix:/run/kilnd.sock");
  assert_formats(target_of("unix:///run/kilnd.sock"), "unix:/run/kilnd.sock");
}

static void test_client_address(void **state) {
  (void)state;
  /* Port 0 is replaced by the port actually bound. */
  assert_formats(client_of("127.0.0.1:0", 40123), "127.0.0.1:40123");
  /* A fixed port wins over whatever bound_port says. */
  assert_formats(client_of("127.0.0.1:7477", 40123), "127.0.0.1:7477");
  /* Wildcards are reached through loopback. */
  assert_formats(client_of("0.0.0.0:7477", 0), "127.0.0.1:7477");
  assert_formats(client_of("0.0.0.0:0", 5555), "127.0.0.1:5555");
  assert_formats(client_of("[::]:7477", 0), "[::1]:7477");
  assert_formats(client_of("[::]:0", 6000), "[::1]:6000");
  /* Other hosts are kept, IPv6 re-bracketed. */
  assert_formats(client_of("[::1]:0", 7000), "[::1]:7000");
  assert_formats(client_of("[fd00::5]:9", 1), "[fd00::5]:9");
  assert_formats(client_of("localhost:0", 8000), "localhost:8000");
  assert_formats(client_of("10.1.2.3:7477", 1), "10.1.2.3:7477");
  /* Unix sockets are reached at their path. */
  assert_formats(client_of("unix:/run/kilnd.sock", 1234), "unix:/run/kilnd.sock");
}

/* ---- Preflight: TCP ------------------------------------------------------ */

/* A TCP socket on 127.0.0.1 at an ephemeral port; listening if `do_listen`. */
static int open_tcp(bool do_listen, int *out_port) {
  int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  assert_true(fd >= 0);
  struct sockaddr_in sin = {.sin_family = AF_INET, .sin_port = 0};
  sin.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  assert_int_equal(bind(fd, (struct sockaddr *)&sin, sizeof sin), 0);
  if (do_listen) assert_int_equal(listen(fd, 4), 0);
  socklen_t len = sizeof sin;
  assert_int_equal(getsockname(fd, (struct sockaddr *)&sin, &len), 0);
  *out_port = ntohs(sin.sin_port);
  return fd;
}

static KILN_MUST_USE kiln_status_t preflight_text(const char *text) {
  kilnd_listen_addr_t a;
  kiln_status_t st = kilnd_listen_parse(text, &a);
  if (st) fail_msg("parse '%s': %s", text, kiln_status_message(st));
  st = kilnd_listen_preflight(&a);
  kilnd_listen_addr_deinit(&a);
  return st;
}

static void test_preflight_tcp_in_use(void **state) {
  (void)state;
  int port;
  int fd = open_tcp(true, &port);
  char text[64];
  snprintf(text, sizeof text, "127.0.0.1:%d", port);
  kiln_status_t st = preflight_text(text);
  int code = kiln_status_code(st);
  if (code != KILN_STATUS_UNAVAILABLE) {
    close(fd);
    fail_msg("expected UNAVAILABLE for a listening port, got %s: %s", kiln_status_code_name(code),
             kiln_status_message(st));
  }
  assert_non_null(strstr(kiln_status_message(st), "in use"));
  /* The message names the address. */
  assert_non_null(strstr(kiln_status_message(st), text));
  kiln_status_free(st);

  /* Once the other listener is gone, the same port passes. */
  close(fd);
  assert_code(preflight_text(text), KILN_STATUS_OK);
}

static void test_preflight_tcp_free_port(void **state) {
  (void)state;
  int port;
  int fd = open_tcp(false, &port);
  close(fd); /* now (very likely) free */
  char text[64];
  snprintf(text, sizeof text, "127.0.0.1:%d", port);
  assert_code(preflight_text(text), KILN_STATUS_OK);
}

static void test_preflight_port_zero(void **state) {
  (void)state;
  assert_code(preflight_text("127.0.0.1:0"), KILN_STATUS_OK);
  assert_code(preflight_text("0.0.0.0:0"), KILN_STATUS_OK);
  assert_code(preflight_text("[::1]:0"), KILN_STATUS_OK);
}

static void test_preflight_tcp_unbindable_address(void **state) {
  (void)state;
  /* Hosts that allow binding non-local addresses cannot show the failure. */
  FILE *f = fopen("/proc/sys/net/ipv4/ip_nonlocal_bind", "r");
  int nonlocal = 0;
  if (f) {
    if (fscanf(f, "%d", &nonlocal) != 1) nonlocal = 0;
    fclose(f);
  }
  if (nonlocal) skip();
  /* 192.0.2.1 (TEST-NET-1) is not an address of this host: bind fails with
   * EADDRNOTAVAIL, which the preflight must report rather than pass. */
  kiln_status_t st = preflight_text("192.0.2.1:7477");
  assert_true(kiln_status_code(st) != KILN_STATUS_OK);
  assert_true(kiln_status_code(st) != KILN_STATUS_UNAVAILABLE);
  kiln_status_free(st);
}

/* ---- Preflight: unix ----------------------------------------------------- */

static int bind_unix(const char *path, bool do_listen) {
  int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
  assert_true(fd >= 0);
  struct sockaddr_un sun = {.sun_family = AF_UNIX};
  assert_true(strlen(path) < sizeof sun.sun_path);
  memcpy(sun.sun_path, path, strlen(path) + 1);
  assert_int_equal(bind(fd, (struct sockaddr *)&sun, sizeof sun), 0);
  if (do_listen) assert_int_equal(listen(fd, 4), 0);
  return fd;
}

static void test_preflight_unix_live_socket(void **state) {
  (void)state;
  char path[128], text[160];
  path_in_tmp(path, sizeof path, "live.sock");
  int fd = bind_unix(path, true);
  snprintf(text, sizeof text, "unix:%s", path);
  kiln_status_t st = preflight_text(text);
  int code = kiln_status_code(st);
  if (code != KILN_STATUS_UNAVAILABLE) {
    close(fd);
    fail_msg("expected UNAVAILABLE for a live socket, got %s: %s", kiln_status_code_name(code),
             kiln_status_message(st));
  }
  assert_non_null(strstr(kiln_status_message(st), "in use"));
  assert_non_null(strstr(kiln_status_message(st), path));
  kiln_status_free(st);
  close(fd);
  /* The preflight did not remove the live socket. */
  struct stat sb;
  assert_int_equal(lstat(path, &sb), 0);
  assert_true(S_ISSOCK(sb.st_mode));
  unlink(path);
}

static void test_preflight_unix_stale_socket(void **state) {
  (void)state;
  char path[128], text[160];
  path_in_tmp(path, sizeof path, "stale.sock");
  int fd = bind_unix(path, true);
  close(fd); /* the file stays, nobody listens */
  struct stat sb;
  assert_int_equal(lstat(path, &sb), 0);
  assert_true(S_ISSOCK(sb.st_mode));
  snprintf(text, sizeof text, "unix:%s", path);
  assert_code(preflight_text(text), KILN_STATUS_OK);

  /* Bound but never listened on is stale too. */
  unlink(path);
  fd = bind_unix(path, false);
  close(fd);
  assert_code(preflight_text(text), KILN_STATUS_OK);
  unlink(path);
}

static void test_preflight_unix_missing_path(void **state) {
  (void)state;
  char text[160];
  snprintf(text, sizeof text, "unix:%s/nothing-here.sock", tmpdir);
  assert_code(preflight_text(text), KILN_STATUS_OK);
}

static void test_preflight_unix_regular_file(void **state) {
  (void)state;
  char path[128], text[160];
  path_in_tmp(path, sizeof path, "plain-file");
  int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC, 0600);
  assert_true(fd >= 0);
  assert_int_equal(write(fd, "x", 1), 1);
  close(fd);
  snprintf(text, sizeof text, "unix:%s", path);
  assert_code(preflight_text(text), KILN_STATUS_FAILED_PRECONDITION);
  /* The file was left alone. */
  struct stat sb;
  assert_int_equal(stat(path, &sb), 0);
  assert_true(S_ISREG(sb.st_mode));
  assert_int_equal(sb.st_size, 1);

  /* A directory is not a socket either. */
  path_in_tmp(path, sizeof path, "a-dir");
  assert_int_equal(mkdir(path, 0700), 0);
  snprintf(text, sizeof text, "unix:%s", path);
  assert_code(preflight_text(text), KILN_STATUS_FAILED_PRECONDITION);
  rmdir(path);
  path_in_tmp(path, sizeof path, "plain-file");
  unlink(path);
}

static void test_preflight_unix_parent_not_a_directory(void **state) {
  (void)state;
  char path[128], text[160];
  path_in_tmp(path, sizeof path, "file-parent");
  int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC, 0600);
  assert_true(fd >= 0);
  close(fd);
  snprintf(text, sizeof text, "unix:%s/kilnd.sock", path);
  kiln_status_t st = preflight_text(text);
  assert_true(kiln_status_code(st) != KILN_STATUS_OK);
  kiln_status_free(st);
  unlink(path);
}

static void test_preflight_unix_missing_directory(void **state) {
  (void)state;
  /* listen.h: the preflight fails "with the errno's code when it cannot be bound at
   * all (no such address, bad path)". A socket in a directory that does not exist
   * cannot be bound (ENOENT), so gRPC would fail later with its uninformative
   * bind error, which is what the preflight is there to prevent. */
  char text[160];
  snprintf(text, sizeof text, "unix:%s/no-such-dir/kilnd.sock", tmpdir);
  kiln_status_t st = preflight_text(text);
  int code = kiln_status_code(st);
  kiln_status_free(st);
  if (code == KILN_STATUS_OK) {
    fail_msg("preflight passed unix:%s/no-such-dir/kilnd.sock, which cannot be bound", tmpdir);
  }
  assert_int_equal(code, KILN_STATUS_NOT_FOUND);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_parse_host_port),
      cmocka_unit_test(test_parse_bracketed_ipv6),
      cmocka_unit_test(test_parse_unix),
      cmocka_unit_test(test_parse_unix_path_length_limit),
      cmocka_unit_test(test_parse_rejects_bad_forms),
      cmocka_unit_test(test_grpc_target),
      cmocka_unit_test(test_client_address),
      cmocka_unit_test(test_preflight_tcp_in_use),
      cmocka_unit_test(test_preflight_tcp_free_port),
      cmocka_unit_test(test_preflight_port_zero),
      cmocka_unit_test(test_preflight_tcp_unbindable_address),
      cmocka_unit_test(test_preflight_unix_live_socket),
      cmocka_unit_test(test_preflight_unix_stale_socket),
      cmocka_unit_test(test_preflight_unix_missing_path),
      cmocka_unit_test(test_preflight_unix_regular_file),
      cmocka_unit_test(test_preflight_unix_parent_not_a_directory),
      cmocka_unit_test(test_preflight_unix_missing_directory),
  };
  return cmocka_run_group_tests(tests, group_setup, group_teardown);
}
