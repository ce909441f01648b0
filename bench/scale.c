/* bench_scale: scale-out on an existing proxy (issue 8) on this machine: several
 * real kilnd behind Debian's HAProxy running the checked-in
 * deploy/haproxy/haproxy.cfg (only its servers block is replaced by these kilnd on
 * loopback, as tests/integration/test_scale.py does), driven over gRPC with the
 * kiln-source-digest header on every call (the CLI's client library,
 * kiln_client_set_route, as `kiln compile` sends it).
 *
 * 1. Cold-compile throughput through HAProxy with 1, 2 and 3 kilnd of one worker
 *    each (--workers 1), beside one kilnd with a worker per CPU behind the same
 *    config (the whole machine as one node). Each run submits M distinct models
 *    at once (examples/mlp.mlir with one constant varied, so every compile misses;
 *    one target), each Compile carrying the source digest, and is timed from the
 *    first submit to the last job's end (each node's GetStats, polled every 10 ms).
 *    Printed: compiles/s, the ratio to 1 node, and how the models spread. Every
 *    node shares this machine's cores: past the core count more nodes cannot add
 *    throughput, so this shows the router spreading the work and the CPU capping
 *    it, not what more machines would do.
 * 2. Keys that move when a node joins: N digests (1000) routed as GetServerInfo
 *    calls with the header through HAProxy over nodes 1-3 and, at the same time,
 *    through a second HAProxy over nodes 1-4; which kilnd answered is told by its
 *    start_time_unix_ms (each node's, asked directly, must differ). Printed: the
 *    fraction that moved (consistent hashing's ideal: 1/4), how many of those went
 *    to the new node (ideally all), and each node's share of the ring.
 *
 * Method: all HAProxy (one per node set) and kilnd start first and every server
 * must have passed its /readyz check (L7OK in HAProxy's `show stat`) before any
 * measurement. Throughput runs alternate the arms' order; each figure is the
 * median of the runs (1 run with --quick, 3 otherwise). Nothing is asserted about
 * speed: the program exits 0 unless the pipeline fails (1; 2 for a usage error),
 * and 77 when haproxy is not installed (ctest reports it skipped).
 *
 * All files live in one mkdtemp directory under DIR (argv), $TMPDIR or /tmp; it,
 * kilnd and HAProxy go away at the end, on failure and on SIGINT/SIGTERM/SIGHUP.
 * Usage: bench_scale [--quick] [DIR]. Threads: one.
 */
#include <errno.h>
#include <limits.h>
#include <stdarg.h>
#include <netinet/in.h>
#include <signal.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "base/alloc.h"
#include "base/buf.h"
#include "base/digest.h"
#include "base/time.h"
#include "bench/benchlib.h"
#include "client/rpc.h"
#include "kiln/v1/kiln.pb-c.h"

#define TARGET           "sm_89"
#define CALL_TIMEOUT_MS  30000
#define READY_TIMEOUT_MS 60000
#define ROUND_TIMEOUT_MS 600000
#define ONE_WORKER_NODES 4 /* nodes 0..3: --workers 1; node 3 is the one that joins */
#define WHOLE_NODE       4 /* --workers = online CPUs */
#define N_NODES          5
#define KEYS             1000

static const char *router_cfg_path = KILN_SOURCE_DIR "/deploy/haproxy/haproxy.cfg";

static kiln_bench_kilnd_t nodes[N_NODES];
static kiln_client_t *direct[N_NODES]; /* each node asked by its own address */
static int64_t node_start_ms[N_NODES];

/* The HAProxy instances, one per set of nodes. */
enum { R_ONE, R_TWO, R_THREE, R_FOUR, R_WHOLE, N_ROUTERS };
typedef struct router_s {
  const char *name;
  size_t n;
  size_t node[ONE_WORKER_NODES]; /* server id i+1 is nodes[node[i]] */
  char addr[64];
  char admin[PATH_MAX];
  char log[PATH_MAX];
  kiln_client_t *ch;
} router_t;
static router_t routers[N_ROUTERS] = {
    [R_ONE] = {"one", 1, {0}},
    [R_TWO] = {"two", 2, {0, 1}},
    [R_THREE] = {"three", 3, {0, 1, 2}},
    [R_FOUR] = {"four", 4, {0, 1, 2, 3}},
    [R_WHOLE] = {"whole", 1, {WHOLE_NODE}},
};
static volatile pid_t router_pids[N_ROUTERS];

static const char *scratch;
static char haproxy[PATH_MAX];
static long cores;

static void usage(void) {
  fprintf(stderr,
          "usage: bench_scale [--quick] [DIR]\n"
          "  cold-compile throughput through HAProxy (deploy/haproxy/haproxy.cfg) with 1, 2 and 3\n"
          "  kilnd, and the fraction of keys that move when a 4th joins; scratch files under DIR\n");
}

static void sleep_ms(long ms) {
  struct timespec ts = {ms / 1000, (ms % 1000) * 1000000L};
  while (nanosleep(&ts, &ts) != 0 && errno == EINTR) {
  }
}

static bool find_haproxy(void) {
  const char *path = getenv("PATH");
  char dirs[4096];
  snprintf(dirs, sizeof dirs, "%s:/usr/sbin:/sbin", path ? path : "/usr/bin:/bin");
  for (char *save = NULL, *d = strtok_r(dirs, ":", &save); d; d = strtok_r(NULL, ":", &save)) {
    snprintf(haproxy, sizeof haproxy, "%s/haproxy", d);
    if (access(haproxy, X_OK) == 0) return true;
  }
  return false;
}

/* kiln_bench_die after printing the end of `path` (HAProxy's log). */
static _Noreturn void die_with_file(const char *path, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));
static _Noreturn void die_with_file(const char *path, const char *fmt, ...) {
  char *text = kiln_bench_read_file(path, NULL);
  if (text) {
    size_t len = strlen(text);
    fprintf(stderr, "bench_scale: %s says:\n%s\n", path, len > 4000 ? text + len - 4000 : text);
    kiln_free(text);
  }
  char msg[1024];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(msg, sizeof msg, fmt, ap);
  va_end(ap);
  kiln_bench_die("%s", msg);
}

/* ---- kilnd ---- */

/* A client of the CLI's own library (client/rpc.h): it sends kiln-source-digest
 * once told the model (kiln_client_set_route), as `kiln compile` does. */
static kiln_client_t *open_client(const char *addr) {
  kiln_client_t *client = NULL;
  kiln_status_t st = kiln_client_create(addr, CALL_TIMEOUT_MS, 64u << 20, &client);
  if (st) kiln_bench_die("cannot open a channel to %s: %s", addr, kiln_status_message(st));
  return client;
}

/* One unary call about the model `route` (its source digest; NULL: none). 0 with
 * *out_response set; otherwise -1 and `err` says why. */
static int call(kiln_client_t *client, const char *route, const char *method, const ProtobufCMessage *request,
                const ProtobufCMessageDescriptor *response_descriptor, ProtobufCMessage **out_response,
                char *err, size_t err_cap) {
  kiln_client_set_route(client, route);
  kiln_status_t st = kiln_client_unary(client, method, request, response_descriptor, out_response);
  if (!st) return 0;
  snprintf(err, err_cap, "%s: %s", method, kiln_status_message(st));
  kiln_status_free(st);
  return -1;
}

static void node_start(size_t i, long workers) {
  char state[PATH_MAX], log[PATH_MAX], w[32], err[PATH_MAX + 200];
  kiln_bench_pathf(state, "%s/node%zu", scratch, i);
  kiln_bench_pathf(log, "%s/node%zu.log", scratch, i);
  snprintf(w, sizeof w, "%ld", workers);
  /* After benchlib's --metrics-listen off (the last one wins): HAProxy checks /readyz. */
  const char *extra[] = {"--workers", w, "--metrics-listen", "127.0.0.1:0", NULL};
  if (kiln_bench_kilnd_start(&nodes[i], KILND_PATH, state, log, extra, READY_TIMEOUT_MS, err, sizeof err) !=
      0) {
    kiln_bench_die("kilnd %zu: %s", i, err);
  }
  direct[i] = open_client(nodes[i].addr);
}

/* The HTTP port kilnd published in STATE/kilnd.metrics-addr. */
static int node_metrics_port(size_t i) {
  char path[PATH_MAX];
  kiln_bench_pathf(path, "%s/kilnd.metrics-addr", nodes[i].state_dir);
  int64_t until = kiln_time_monotonic_ns() + (int64_t)READY_TIMEOUT_MS * 1000000;
  while (kiln_time_monotonic_ns() < until) {
    size_t len;
    char *text = kiln_bench_read_file(path, &len);
    if (text && len > 0 && text[len - 1] == '\n') {
      const char *colon = strrchr(text, ':');
      int port = colon ? atoi(colon + 1) : 0;
      kiln_free(text);
      if (port > 0) return port;
      break;
    }
    kiln_free(text);
    sleep_ms(10);
  }
  kiln_bench_die("kilnd %zu published no HTTP address in %s", i, path);
}

static Kiln__V1__GetStatsResponse *node_stats(size_t i) {
  Kiln__V1__GetStatsRequest req = KILN__V1__GET_STATS_REQUEST__INIT;
  ProtobufCMessage *resp;
  char err[512];
  if (call(direct[i], NULL, "/kiln.v1.Kiln/GetStats", &req.base, &kiln__v1__get_stats_response__descriptor,
           &resp, err, sizeof err) != 0) {
    kiln_bench_die("kilnd %zu: %s", i, err);
  }
  return (Kiln__V1__GetStatsResponse *)resp;
}

static int64_t server_info_start_ms(kiln_client_t *ch, const char *digest_hex, const char *who) {
  Kiln__V1__GetServerInfoRequest req = KILN__V1__GET_SERVER_INFO_REQUEST__INIT;
  ProtobufCMessage *resp;
  char err[512];
  if (call(ch, digest_hex, "/kiln.v1.Kiln/GetServerInfo", &req.base,
           &kiln__v1__get_server_info_response__descriptor, &resp, err, sizeof err) != 0) {
    kiln_bench_die("%s: %s", who, err);
  }
  int64_t start = ((Kiln__V1__GetServerInfoResponse *)resp)->start_time_unix_ms;
  protobuf_c_message_free_unpacked(resp, NULL);
  return start;
}

/* ---- HAProxy ---- */

/* The checked-in config with the lines from "# kiln-servers-begin" through
 * "# kiln-servers-end" replaced by `r`'s servers; everything else as shipped. */
static char *render_config(const char *shipped, const router_t *r, const int *metrics_port) {
  const char *begin = strstr(shipped, "# kiln-servers-begin");
  const char *end = begin ? strstr(begin, "# kiln-servers-end") : NULL;
  if (!end)
    kiln_bench_die("%s has no '# kiln-servers-begin' ... '# kiln-servers-end' block", router_cfg_path);
  while (begin > shipped && begin[-1] != '\n') begin--;
  const char *indent_end = begin;
  while (*indent_end == ' ' || *indent_end == '\t') indent_end++;
  int indent = (int)(indent_end - begin);
  const char *eol = strchr(end, '\n');
  end = eol ? eol + 1 : end + strlen(end);
  kiln_buf_t b;
  kiln_buf_init(&b);
  kiln_buf_append(&b, shipped, (size_t)(begin - shipped));
  kiln_buf_appendf(&b, "%*s# kiln-servers-begin (bench_scale)\n", indent, "");
  for (size_t i = 0; i < r->n; i++) {
    size_t k = r->node[i];
    kiln_buf_appendf(&b, "%*sserver kilnd%zu %s id %zu port %d\n", indent, "", i + 1, nodes[k].addr, i + 1,
                     metrics_port[k]);
  }
  kiln_buf_appendf(&b, "%*s# kiln-servers-end\n", indent, "");
  kiln_buf_append_str(&b, end);
  return kiln_buf_take(&b);
}

static int free_port(void) {
  int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  struct sockaddr_in a = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
  socklen_t len = sizeof a;
  if (fd < 0 || bind(fd, (struct sockaddr *)&a, sizeof a) != 0 ||
      getsockname(fd, (struct sockaddr *)&a, &len) != 0) {
    kiln_bench_die("cannot find a free loopback port: %s", strerror(errno));
  }
  close(fd);
  return ntohs(a.sin_port);
}

static void router_start(size_t ri, const char *shipped, const int *metrics_port) {
  router_t *r = &routers[ri];
  char cfg[PATH_MAX];
  kiln_bench_pathf(cfg, "%s/haproxy-%s.cfg", scratch, r->name);
  kiln_bench_pathf(r->admin, "%s/haproxy-%s.sock", scratch, r->name);
  kiln_bench_pathf(r->log, "%s/haproxy-%s.log", scratch, r->name);
  snprintf(r->addr, sizeof r->addr, "127.0.0.1:%d", free_port());
  char *text = render_config(shipped, r, metrics_port);
  if (kiln_bench_write_file(cfg, text, strlen(text)) != 0)
    kiln_bench_die("cannot write %s: %s", cfg, strerror(errno));
  kiln_free(text);
  char listen_env[96], admin_env[PATH_MAX + 32];
  snprintf(listen_env, sizeof listen_env, "KILN_ROUTER_LISTEN=%s", r->addr);
  snprintf(admin_env, sizeof admin_env, "KILN_ROUTER_ADMIN=%s", r->admin);
  const char *env[] = {listen_env, admin_env, "KILN_ROUTER_UNPRIVILEGED=1", NULL};
  /* -db: in the foreground, no master process, so its pid is the one to stop. */
  const char *argv[] = {haproxy, "-db", "-f", cfg, NULL};
  pid_t pid = kiln_bench_spawn_env(argv, env, r->log, NULL);
  if (pid < 0) kiln_bench_die("cannot start %s: %s", haproxy, strerror(errno));
  router_pids[ri] = pid;
  r->ch = open_client(r->addr);
}

/* HAProxy's `show stat` on its admin socket; NULL while it does not answer. */
static char *router_admin(const router_t *r, const char *command) {
  int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
  struct sockaddr_un a = {.sun_family = AF_UNIX};
  if (fd < 0) return NULL;
  snprintf(a.sun_path, sizeof a.sun_path, "%s", r->admin);
  if (connect(fd, (struct sockaddr *)&a, sizeof a) != 0 || write(fd, command, strlen(command)) < 0) {
    close(fd);
    return NULL;
  }
  kiln_buf_t b;
  kiln_buf_init(&b);
  char chunk[8192];
  ssize_t got;
  while ((got = read(fd, chunk, sizeof chunk)) > 0) kiln_buf_append(&b, chunk, (size_t)got);
  close(fd);
  return kiln_buf_take(&b);
}

/* Column `col` (0-based) of one CSV line, into `out`. */
static void csv_field(const char *line, size_t col, char *out, size_t cap) {
  for (size_t i = 0; i < col && line; i++) {
    line = strpbrk(line, ",\n");
    if (line && *line == ',')
      line++;
    else
      line = NULL;
  }
  size_t n = line ? strcspn(line, ",\n") : 0;
  snprintf(out, cap, "%.*s", (int)(n < cap ? n : cap - 1), line ? line : "");
}

/* How many of the backend's servers are UP with their last check L7OK (HAProxy
 * starts servers UP before any check, so UP alone proves nothing). */
static size_t router_ready_servers(const router_t *r) {
  char *stat = router_admin(r, "show stat\n");
  if (!stat || strncmp(stat, "# ", 2) != 0) {
    kiln_free(stat);
    return 0;
  }
  size_t col_px = SIZE_MAX, col_sv = SIZE_MAX, col_status = SIZE_MAX, col_check = SIZE_MAX;
  char name[64];
  for (size_t c = 0;; c++) {
    csv_field(stat + 2, c, name, sizeof name);
    if (!name[0]) break;
    if (!strcmp(name, "pxname")) col_px = c;
    if (!strcmp(name, "svname")) col_sv = c;
    if (!strcmp(name, "status")) col_status = c;
    if (!strcmp(name, "check_status")) col_check = c;
  }
  size_t ready = 0;
  for (const char *line = strchr(stat, '\n'); line && line[1]; line = strchr(line + 1, '\n')) {
    char px[64], sv[64], status[64], check[64];
    csv_field(line + 1, col_px, px, sizeof px);
    csv_field(line + 1, col_sv, sv, sizeof sv);
    csv_field(line + 1, col_status, status, sizeof status);
    csv_field(line + 1, col_check, check, sizeof check);
    if (!strcmp(px, "kilnd") && strncmp(sv, "kilnd", 5) == 0 && !strcmp(status, "UP") &&
        !strcmp(check, "L7OK")) {
      ready++;
    }
  }
  kiln_free(stat);
  return ready;
}

static void routers_wait_ready(void) {
  int64_t until = kiln_time_monotonic_ns() + (int64_t)READY_TIMEOUT_MS * 1000000;
  for (size_t ri = 0; ri < N_ROUTERS; ri++) {
    while (router_ready_servers(&routers[ri]) < routers[ri].n) {
      int status;
      if (waitpid(router_pids[ri], &status, WNOHANG) == router_pids[ri]) {
        router_pids[ri] = 0;
        die_with_file(routers[ri].log, "HAProxy (%s) exited at start", routers[ri].name);
      }
      if (kiln_time_monotonic_ns() > until) {
        die_with_file(routers[ri].log, "HAProxy (%s): its kilnd did not all pass the /readyz check",
                      routers[ri].name);
      }
      sleep_ms(50);
    }
  }
}

/* ---- 1. cold-compile throughput ---- */

enum { ARM_1, ARM_2, ARM_3, ARM_WHOLE, N_ARMS };
static const size_t arm_router[N_ARMS] = {R_ONE, R_TWO, R_THREE, R_WHOLE};

static char *mlp;
static size_t mlp_len;
static uint64_t next_serial = 1;

static uint64_t jobs_finished(size_t i, uint64_t *out_failed) {
  Kiln__V1__GetStatsResponse *s = node_stats(i);
  uint64_t finished = s->jobs ? s->jobs->done + s->jobs->failed + s->jobs->cancelled : 0;
  *out_failed = s->jobs ? s->jobs->failed + s->jobs->cancelled : 0;
  protobuf_c_message_free_unpacked(&s->base, NULL);
  return finished;
}

/* Submits `m` new models through the arm's router, all at once, and waits for
 * every job to end; the seconds from the first submit to the last end, and how
 * many jobs each server took into per_server[]. */
static double run_arm(size_t arm, size_t m, size_t *per_server) {
  const router_t *r = &routers[arm_router[arm]];
  uint64_t base[ONE_WORKER_NODES], failed_base[ONE_WORKER_NODES], failed;
  for (size_t s = 0; s < r->n; s++) base[s] = jobs_finished(r->node[s], &failed_base[s]);
  char **sources = kiln_calloc(m, sizeof *sources);
  size_t *lens = kiln_calloc(m, sizeof *lens);
  for (size_t j = 0; j < m; j++) {
    sources[j] =
        kiln_bench_model_variant(mlp, mlp_len, "bench_scale", "dense<0.5>", 0.5, next_serial++, &lens[j]);
  }
  int64_t t0 = kiln_time_monotonic_ns();
  for (size_t j = 0; j < m; j++) {
    kiln_digest_t d;
    kiln_digest_hex_t hex;
    kiln_digest_of(sources[j], lens[j], &d);
    kiln_digest_to_hex(&d, &hex);
    Kiln__V1__CompileRequest req = KILN__V1__COMPILE_REQUEST__INIT;
    char *targets[] = {TARGET};
    req.input_case = KILN__V1__COMPILE_REQUEST__INPUT_SOURCE;
    req.source.data = (uint8_t *)sources[j];
    req.source.len = lens[j];
    req.n_targets = 1;
    req.targets = targets;
    ProtobufCMessage *resp;
    char err[512];
    if (call(r->ch, hex.text, "/kiln.v1.Kiln/Compile", &req.base, &kiln__v1__compile_response__descriptor,
             &resp, err, sizeof err) != 0) {
      die_with_file(r->log, "%s", err);
    }
    Kiln__V1__CompileResponse *c = (Kiln__V1__CompileResponse *)resp;
    if (strcmp(c->source_digest, hex.text) != 0) {
      kiln_bench_die("kilnd's source digest %s is not the SHA-256 the header carried (%s)", c->source_digest,
                     hex.text);
    }
    if (c->n_targets != 1 || c->targets[0]->cached) kiln_bench_die("a new model was not a cold compile");
    protobuf_c_message_free_unpacked(resp, NULL);
  }
  int64_t until = t0 + (int64_t)ROUND_TIMEOUT_MS * 1000000;
  for (;;) {
    uint64_t done = 0, failed_now = 0;
    for (size_t s = 0; s < r->n; s++) {
      per_server[s] = (size_t)(jobs_finished(r->node[s], &failed) - base[s]);
      done += per_server[s];
      failed_now += failed - failed_base[s];
    }
    if (failed_now)
      kiln_bench_die("%llu of the compiles failed (see the kilnd logs)", (unsigned long long)failed_now);
    if (done >= m) break;
    if (kiln_time_monotonic_ns() > until)
      kiln_bench_die("the compiles did not finish in %d s", ROUND_TIMEOUT_MS / 1000);
    sleep_ms(10);
  }
  double secs = (double)(kiln_time_monotonic_ns() - t0) / 1e9;
  for (size_t j = 0; j < m; j++) kiln_free(sources[j]);
  kiln_free(sources);
  kiln_free(lens);
  return secs;
}

static double median(double *v, size_t n) {
  for (size_t i = 1; i < n; i++) {
    for (size_t k = i; k > 0 && v[k - 1] > v[k]; k--) {
      double t = v[k];
      v[k] = v[k - 1];
      v[k - 1] = t;
    }
  }
  return n % 2 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
}

/* ---- 2. keys that move ---- */

static size_t node_of_start(int64_t start_ms, const char *who) {
  for (size_t i = 0; i < N_NODES; i++) {
    if (node_start_ms[i] == start_ms) return i;
  }
  kiln_bench_die("%s: the answer came from no known kilnd (start time %lld)", who, (long long)start_ms);
}

int main(int argc, char **argv) {
  bool quick;
  const char *dir;
  int rc = kiln_bench_parse_args(argc, argv, true, usage, &quick, &dir);
  if (rc >= 0) return rc;
  if (!find_haproxy()) {
    fprintf(stderr,
            "bench_scale: haproxy is not installed (deploy/deps.sh installs Debian's haproxy); skipped\n");
    return 77;
  }
  signal(SIGPIPE, SIG_IGN);
  cores = sysconf(_SC_NPROCESSORS_ONLN);
  if (cores < 1) cores = 1;
  size_t m = quick ? 8 : 36;
  size_t rounds = quick ? 1 : 3;

  scratch = kiln_bench_begin_fleet("bench_scale", dir, nodes, N_NODES, router_pids, N_ROUTERS);
  size_t shipped_len;
  char *shipped = kiln_bench_read_file(router_cfg_path, &shipped_len);
  if (!shipped) kiln_bench_die("cannot read %s: %s", router_cfg_path, strerror(errno));
  char mlp_path[PATH_MAX];
  kiln_bench_pathf(mlp_path, "%s/examples/mlp.mlir", KILN_SOURCE_DIR);
  mlp = kiln_bench_read_file(mlp_path, &mlp_len);
  if (!mlp) kiln_bench_die("cannot read %s: %s", mlp_path, strerror(errno));

  /* Nodes one after another: each start time (ms) then names its node. */
  int metrics_port[N_NODES];
  for (size_t i = 0; i < N_NODES; i++) {
    node_start(i, i == WHOLE_NODE ? cores : 1);
    metrics_port[i] = node_metrics_port(i);
    node_start_ms[i] = server_info_start_ms(direct[i], NULL, "GetServerInfo");
    for (size_t k = 0; k < i; k++) {
      if (node_start_ms[k] == node_start_ms[i])
        kiln_bench_die("kilnd %zu and %zu started in the same ms", k, i);
    }
  }
  for (size_t ri = 0; ri < N_ROUTERS; ri++) router_start(ri, shipped, metrics_port);
  routers_wait_ready();
  kiln_free(shipped);

  char cpu[256];
  kiln_bench_cpu_model(cpu, sizeof cpu);
  printf(
      "kiln scale-out benchmark (%s): kilnd behind HAProxy (deploy/haproxy/haproxy.cfg),\n"
      "every call carrying kiln-source-digest\n",
      quick ? "--quick" : "full");
  printf("what decides these numbers on this machine:\n");
  printf("  cores %ld (%s); every kilnd, its workers, HAProxy and this client share them\n", cores, cpu);
  printf("  nodes: kilnd --workers 1 each (one core's worth); 'whole machine': one kilnd --workers %ld\n",
         cores);
  kiln_bench_print_load("compiles/s");

  /* ---- 1 ---- */
  printf(
      "\n1. cold compiles through HAProxy: %zu distinct models (examples/mlp.mlir, one constant\n"
      "   varied), target %s, submitted at once; median of %zu run%s per arm, arms alternating\n",
      m, TARGET, rounds, rounds == 1 ? "" : "s");
  static const char *arm_name[N_ARMS] = {"1 node", "2 nodes", "3 nodes",
                                         "whole machine (1 kilnd, all cores)"};
  double secs[N_ARMS][3];
  size_t spread[N_ARMS][ONE_WORKER_NODES] = {{0}};
  for (size_t round = 0; round < rounds; round++) {
    for (size_t k = 0; k < N_ARMS; k++) {
      size_t arm = (round % 2) ? N_ARMS - 1 - k : k;
      secs[arm][round] = run_arm(arm, m, spread[arm]);
      fprintf(stderr, ".");
    }
  }
  fprintf(stderr, "\n");
  double rate[N_ARMS];
  for (size_t arm = 0; arm < N_ARMS; arm++) rate[arm] = (double)m / median(secs[arm], rounds);
  printf("  %-36s %10s %10s %9s  %s\n", "arm", "s (median)", "compiles/s", "vs 1 node",
         "models per node (last run)");
  for (size_t arm = 0; arm < N_ARMS; arm++) {
    char per[64] = "";
    for (size_t s = 0; s < routers[arm_router[arm]].n; s++) {
      snprintf(per + strlen(per), sizeof per - strlen(per), "%s%zu", s ? " / " : "", spread[arm][s]);
    }
    printf("  %-36s %10.2f %10.2f %8.2fx  %s\n", arm_name[arm], (double)m / rate[arm], rate[arm],
           rate[arm] / rate[ARM_1], per);
  }
  printf(
      "  %ld cores cap it: with one worker per node, nodes beyond %ld add no CPU, only processes\n"
      "  sharing the same cores (ideal on this machine: 2 nodes %.2fx, 3 nodes %.2fx); on separate\n"
      "  machines each node brings its own cores and cache.\n",
      cores, cores, cores >= 2 ? 2.0 : 1.0, cores >= 3 ? 3.0 : (double)(cores >= 2 ? 2 : 1));

  /* ---- 2 ---- */
  printf(
      "\n2. keys that move when a node joins: %d source digests routed with 3 nodes, then 4\n"
      "   (GetServerInfo with the header through two HAProxy; the answering kilnd known by its start time)\n",
      KEYS);
  size_t share3[ONE_WORKER_NODES] = {0}, share4[ONE_WORKER_NODES] = {0};
  size_t moved = 0, moved_to_new = 0;
  for (size_t i = 0; i < KEYS; i++) {
    char text[64];
    snprintf(text, sizeof text, "bench_scale key %zu", i);
    kiln_digest_t d;
    kiln_digest_hex_t hex;
    kiln_digest_of(text, strlen(text), &d);
    kiln_digest_to_hex(&d, &hex);
    size_t a =
        node_of_start(server_info_start_ms(routers[R_THREE].ch, hex.text, "HAProxy (three)"), "3 nodes");
    size_t b = node_of_start(server_info_start_ms(routers[R_FOUR].ch, hex.text, "HAProxy (four)"), "4 nodes");
    if (a >= 3 || b >= ONE_WORKER_NODES)
      kiln_bench_die("a key was routed to a kilnd outside its router's servers");
    share3[a]++;
    share4[b]++;
    if (a != b) {
      moved++;
      if (b == 3) moved_to_new++;
    }
  }
  printf("  %-36s %10s %10s\n", "", "measured", "ideal");
  printf("  %-36s %10.3f %10.3f\n", "fraction of keys that moved", (double)moved / KEYS, 1.0 / 4);
  printf("  %-36s %10.3f %10.3f\n", "of those, moved to the new node",
         moved ? (double)moved_to_new / moved : 1.0, 1.0);
  printf("  share of keys per node, 3 nodes      %.3f %.3f %.3f (ideal %.3f)\n", (double)share3[0] / KEYS,
         (double)share3[1] / KEYS, (double)share3[2] / KEYS, 1.0 / 3);
  printf("  share of keys per node, 4 nodes      %.3f %.3f %.3f %.3f (ideal %.3f)\n",
         (double)share4[0] / KEYS, (double)share4[1] / KEYS, (double)share4[2] / KEYS,
         (double)share4[3] / KEYS, 1.0 / 4);
  printf(
      "  (rehashing by key mod N would move 3/4 of them; HAProxy's ring has weight x 16 points\n"
      "   per server, weight 100 in the config: the fewer points, the less even the shares)\n");

  for (size_t ri = 0; ri < N_ROUTERS; ri++) kiln_client_destroy(routers[ri].ch);
  for (size_t i = 0; i < N_NODES; i++) kiln_client_destroy(direct[i]);
  kiln_free(mlp);
  kiln_bench_end();
  return 0;
}
