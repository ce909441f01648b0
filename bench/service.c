/* bench_service: kilnd as its clients see it, over gRPC on loopback, against the
 * baselines each service promise is made relative to.
 *
 * It starts the real kilnd (the built binary, --listen 127.0.0.1:0, a temporary
 * --state-dir, the address read back from STATE/kilnd.addr) and drives it with the
 * CLI's own client library (client/rpc.h), so every number includes what `kiln
 * compile` pays: protobuf, HTTP/2, the daemon's loop and its thread pool. Everything
 * is measured side by side in one run and printed as ratios, so the numbers mean the
 * same on a laptop and on a 2-core CI VM:
 *
 * 1. Cold compile through kilnd: Compile of examples/mlp.mlir for the six mission
 *    targets, WatchJob to Terminal, then GetArtifact of the six VMFBs into memory,
 *    with a source no earlier call sent (a comment and one constant vary, so the
 *    cache misses whatever it keys on), against six sequential `kilnc MODEL -t T`
 *    processes, one target each, on a source varied the same way. Goal: kilnd/kilnc
 *    <= 0.5x. One `kilnc -t all six` process is timed beside them for context.
 * 2. Warm hit: the same six-target Compile after it was compiled once; admission
 *    answers DONE with every target cached. p50/p90/p99 over sequential calls from
 *    one client, with a Health/Check (the emptiest unary call) after each, as the
 *    transport's floor. Goals: p50 < 2 ms; cold (section 1, at Terminal) / hit p50
 *    >= 50x.
 * 3. Hit throughput: calls/s of that cached Compile from K concurrent clients
 *    against Health/Check from the same K clients, after a warm-up of cached
 *    Compiles that lasts until kilnd's RSS is flat (its store of finished jobs
 *    full); the ratio is the median of the per-round ratios. Goal: >= 0.8x.
 * 4. GetArtifact of a 256 MiB artifact (16 MiB with --quick) against read() of its
 *    blob file in chunks of the same size. The artifact is put into STATE/cache with
 *    the cache library (compression off, incompressible bytes) before kilnd starts.
 *    Both sides are warm: each is run once untimed first, so the file is in page
 *    cache for both. Beside it, the limit of any download over a socket: the same
 *    file sent through a TCP loopback connection to this process (no gRPC, no
 *    check); and the speed of XXH3-128, which kilnd checks every byte it serves
 *    with. Goal: GetArtifact >= 0.8x of the loopback copy, as the median of the
 *    ratios of runs taken in the same turn.
 * 5. kilnd's VmRSS/VmHWM (/proc/PID/status): just after start, idle after each
 *    section above (with the number of jobs it then retains), sampled every 20 ms
 *    while N clients (200; 20 with --quick) each loop a cached Compile plus a
 *    WatchJob of its job, and after they disconnect. No goal is given for it; the
 *    worker processes' RSS is printed for context.
 *
 * Clients: each concurrent client has its own kiln_client_t and its own TCP
 * connection, as separate processes would. gRPC shares one connection among channels
 * whose arguments are equal, so each client asks for a slightly different message
 * limit; the socket count kilnd holds during section 5 shows it worked.
 *
 * Method: kilnd and kilnc runs alternate, which goes first alternates, and
 * throughput arms alternate too, so drift hits both sides alike; each figure is a
 * median (or a percentile) of several runs. The benchmark's clients share the
 * machine's cores with kilnd and its workers, as a client on the same host would.
 * Goals are reported as PASS/MISS, never asserted: the program exits 0 unless the
 * benchmark itself cannot run (then 1; 2 for a usage error).
 *
 * All files live in one mkdtemp directory under DIR (argv), $TMPDIR or /tmp; it and
 * kilnd go away at the end, on failure and on SIGINT/SIGTERM/SIGHUP.
 * Usage: bench_service [--quick] [--section N]... [DIR]; --section runs only the
 * sections named (1-5), with their own baselines, and summarizes only those.
 * Threads: the main thread runs every section; sections 3 and 5 start one thread
 * per client, each using only its own client.
 */
#include <arpa/inet.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <netinet/in.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/statfs.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "base/alloc.h"
#include "base/digest.h"
#include "base/log.h"
#include "base/status.h"
#include "base/time.h"
#include "bench/benchlib.h"
#include "cache/blobstore.h"
#include "cache/cache.h"
#include "client/rpc.h"
#include "grpc/health/v1/health.pb-c.h"
#include "kiln/v1/kiln.pb-c.h"

#ifndef KILN_SOURCE_DIR
#error "KILN_SOURCE_DIR must name the source tree (bench/CMakeLists.txt defines it)"
#endif
#if !defined(KILND_PATH) || !defined(KILNC_PATH)
#error "KILND_PATH and KILNC_PATH must name the built binaries (bench/CMakeLists.txt defines them)"
#endif

#define KIB                ((size_t)1024)
#define MIB                (KIB * KIB)

#define HIT_P50_GOAL_NS    2000000 /* warm-hit Compile p50 */
#define COLD_OVER_HIT_GOAL 50.0    /* cold compile / warm-hit p50 */
/* Issue 18 (items 15-17) raised the goals and changed two baselines: a cold job
 * against one kilnc process with all six targets (it forks the back halves per
 * core), and GetArtifact against a raw TCP loopback copy of the file (read() from
 * page cache is no limit a download can reach). */
#define THROUGHPUT_GOAL   0.8  /* cached Compile calls/s / Health/Check calls/s */
#define WARM_STEP_MS      500  /* section 3's warm-up: steps of hit load */
#define WARM_FLAT_KIB     1024 /* ... until kilnd's RSS grows less than this in a step */
#define WARM_FLAT_STEPS   2    /* ... in this many steps in a row */
#define COLD_GOAL         0.7  /* kilnd cold compile / one kilnc process, six targets */
#define ARTIFACT_GOAL     0.8  /* GetArtifact / TCP loopback copy */

#define CALL_TIMEOUT_MS   120000
#define MAX_MESSAGE_BYTES (64 * MIB)
#define START_TIMEOUT_MS  60000
#define RSS_SAMPLE_MS     20
#define LAT_CAP           65536 /* latencies kept per crowd client */

static const char *const mission_ids[] = {"sm_89", "sm_120", "gfx950", "gfx1100", "arm5gen", "videocore_vii"};
#define N_MISSION (sizeof mission_ids / sizeof mission_ids[0])

typedef struct plan_s {
  bool quick;
  size_t cold_rounds;    /* timed kilnd cold compiles, and as many six-kilnc runs */
  size_t hit_calls;      /* timed warm-hit Compiles, and as many Health/Checks */
  size_t tput_clients;   /* concurrent clients of section 3 */
  size_t tput_rounds;    /* rounds of (hit arm, health arm) */
  size_t warm_steps_max; /* of section 3's warm-up */
  int64_t tput_ms;       /* each arm's duration in one round */
  size_t artifact_bytes; /* section 4 */
  size_t artifact_runs;  /* timed runs per side */
  size_t crowd;          /* concurrent clients of section 5 */
  int64_t crowd_ms;
  unsigned sections; /* bit i: section i runs (all by default; --section N) */
} plan_t;

static bool runs(const plan_t *plan, unsigned section) { return (plan->sections >> section) & 1u; }

/* ---- state shared with cleanup ---- */

static const char *scratch = ""; /* the temporary directory (benchlib's); "" when none */
static kiln_bench_kilnd_t kilnd; /* state_dir and log_path under scratch */

/* Consumes `st`; on failure reports what failed and exits 1. */
static void check(kiln_status_t st, const char *what) {
  if (!st) return;
  char msg[600];
  snprintf(msg, sizeof msg, "%s", kiln_status_message(st));
  kiln_status_code_t code = kiln_status_code(st);
  kiln_status_free(st);
  kiln_bench_die("%s failed: %s: %s", what, kiln_status_code_name(code), msg);
}

/* ---- small helpers ---- */

static double ms(int64_t ns) { return (double)ns / 1e6; }

static double mib_per_s(size_t bytes, int64_t ns) {
  return ns > 0 ? (double)bytes / (double)MIB * 1e9 / (double)ns : 0.0;
}

/* Nearest-rank percentile of a sorted array. */
static int64_t percentile(const int64_t *sorted, size_t n, double pct) {
  size_t rank = (size_t)(pct / 100.0 * (double)n + 0.999999);
  if (rank > n) rank = n;
  return sorted[rank ? rank - 1 : 0];
}

static void sleep_ms(int64_t t) {
  struct timespec ts = {(time_t)(t / 1000), (long)(t % 1000) * 1000000};
  while (nanosleep(&ts, &ts) != 0 && errno == EINTR) {
  }
}

static void path_join(char *out, const char *dir, const char *name) {
  if ((size_t)snprintf(out, PATH_MAX, "%s/%s", dir, name) >= PATH_MAX) {
    kiln_bench_die("path too long: %s/%s; pick a shorter DIR", dir, name);
  }
}

static void fill_random(unsigned char *buf, size_t len) {
  uint64_t state = 0x6b696c6e73727663ull; /* fixed: runs are repeatable */
  kiln_bench_fill_random(buf, len, &state);
}

/* ---- /proc ---- */

/* A "Name:   123 kB" field of /proc/PID/status in KiB; -1 when absent. */
static int64_t proc_status_kib(pid_t pid, const char *field) {
  char path[64], line[256];
  snprintf(path, sizeof path, "/proc/%d/status", (int)pid);
  FILE *f = fopen(path, "r");
  if (!f) return -1;
  int64_t kib = -1;
  size_t flen = strlen(field);
  while (fgets(line, sizeof line, f)) {
    if (strncmp(line, field, flen) == 0) {
      kib = strtoll(line + flen, NULL, 10);
      break;
    }
  }
  fclose(f);
  return kib;
}

/* The summed VmRSS of `parent`'s direct children (kilnd's workers) and their count. */
static int64_t children_rss_kib(pid_t parent, size_t *out_count) {
  *out_count = 0;
  pid_t kids[256];
  size_t n = kiln_bench_proc_children(parent, kids, 256);
  int64_t sum = 0;
  for (size_t i = 0; i < n && i < 256; i++) {
    int64_t rss = proc_status_kib(kids[i], "VmRSS:");
    if (rss > 0) {
      sum += rss;
      (*out_count)++;
    }
  }
  return sum;
}

/* How many sockets `pid` holds open. */
static size_t socket_count(pid_t pid) {
  char dir[64], path[PATH_MAX], target[128];
  snprintf(dir, sizeof dir, "/proc/%d/fd", (int)pid);
  DIR *d = opendir(dir);
  if (!d) return 0;
  size_t n = 0;
  struct dirent *e;
  while ((e = readdir(d)) != NULL) {
    if (e->d_name[0] == '.') continue;
    snprintf(path, sizeof path, "%s/%s", dir, e->d_name);
    ssize_t len = readlink(path, target, sizeof target - 1);
    if (len > 0 && (size_t)len >= 7 && memcmp(target, "socket:", 7) == 0) n++;
  }
  closedir(d);
  return n;
}

static double kib_mib(int64_t kib) { return (double)kib / 1024.0; }

/* ---- processes ---- */

/* Runs argv to completion with stdout to /dev/null and stderr to `err_path`;
 * returns the wait status. */
static int run_process(const char *const *argv, const char *err_path) {
  pid_t pid = kiln_bench_spawn(argv, NULL, err_path);
  if (pid < 0) kiln_bench_die("cannot start %s: %s", argv[0], strerror(errno));
  int status = kiln_bench_wait(pid);
  if (status < 0) kiln_bench_die("waitpid: %s", strerror(errno));
  return status;
}

/* Starts kilnd on 127.0.0.1:0 with the state directory and waits for its address. */
static void kilnd_start(void) {
  char err[PATH_MAX + 200];
  if (kiln_bench_kilnd_start(&kilnd, KILND_PATH, kilnd.state_dir, kilnd.log_path, NULL, START_TIMEOUT_MS, err,
                             sizeof err) != 0) {
    kiln_bench_die("%s", err);
  }
}

/* ---- calls ---- */

/* A client with its own connection (see "Clients" in the design note): `index`
 * makes its channel arguments unique. */
static kiln_client_t *client_open(size_t index) {
  kiln_client_t *client;
  check(kiln_client_create(kilnd.addr, CALL_TIMEOUT_MS, MAX_MESSAGE_BYTES + index, &client),
        "kiln_client_create");
  return client;
}

static void compile_request_init(Kiln__V1__CompileRequest *req, const char *src, size_t len) {
  kiln__v1__compile_request__init(req);
  req->input_case = KILN__V1__COMPILE_REQUEST__INPUT_SOURCE;
  req->source.data = (uint8_t *)src;
  req->source.len = len;
  req->source_name = (char *)"mlp.mlir";
  req->n_targets = N_MISSION;
  req->targets = (char **)mission_ids;
}

static Kiln__V1__CompileResponse *compile_call(kiln_client_t *client, const char *src, size_t len) {
  Kiln__V1__CompileRequest req;
  compile_request_init(&req, src, len);
  ProtobufCMessage *resp = NULL;
  check(kiln_client_unary(client, "/kiln.v1.Kiln/Compile", &req.base, &kiln__v1__compile_response__descriptor,
                          &resp),
        "Compile");
  return (Kiln__V1__CompileResponse *)resp;
}

/* A Compile that must be answered from the cache at admission; returns its job id
 * (kiln_malloc'd) when `out_job` is non-NULL. */
static void hit_call(kiln_client_t *client, const char *src, size_t len, char **out_job) {
  Kiln__V1__CompileResponse *resp = compile_call(client, src, len);
  bool all_cached = resp->n_targets == N_MISSION;
  for (size_t i = 0; all_cached && i < resp->n_targets; i++) all_cached = resp->targets[i]->cached;
  if (resp->state != KILN__V1__JOB_STATE__JOB_STATE_DONE || !all_cached) {
    kiln_bench_die("a warm Compile was not answered from the cache (state %d, %zu targets)", (int)resp->state,
                   resp->n_targets);
  }
  if (out_job) *out_job = kiln_strdup(resp->job_id);
  protobuf_c_message_free_unpacked(&resp->base, NULL);
}

static void health_call(kiln_client_t *client) {
  Grpc__Health__V1__HealthCheckRequest req = GRPC__HEALTH__V1__HEALTH_CHECK_REQUEST__INIT;
  ProtobufCMessage *resp = NULL;
  check(kiln_client_unary(client, "/grpc.health.v1.Health/Check", &req.base,
                          &grpc__health__v1__health_check_response__descriptor, &resp),
        "Health/Check");
  protobuf_c_message_free_unpacked(resp, NULL);
}

static Kiln__V1__GetStatsResponse *stats_call(kiln_client_t *client) {
  Kiln__V1__GetStatsRequest req = KILN__V1__GET_STATS_REQUEST__INIT;
  ProtobufCMessage *resp = NULL;
  check(kiln_client_unary(client, "/kiln.v1.Kiln/GetStats", &req.base,
                          &kiln__v1__get_stats_response__descriptor, &resp),
        "GetStats");
  return (Kiln__V1__GetStatsResponse *)resp;
}

/* What WatchJob saw of one job. */
typedef struct job_outcome_s {
  Kiln__V1__JobState state;
  size_t n_done;
  char digests[N_MISSION][65]; /* TargetDone artifact digests, in arrival order */
  char failure[240];           /* the first TargetFailed or Terminal message */
} job_outcome_t;

/* Follows job `job_id` from its first event until the stream ends. */
static void watch_call(kiln_client_t *client, const char *job_id, job_outcome_t *out) {
  memset(out, 0, sizeof *out);
  Kiln__V1__WatchJobRequest req = KILN__V1__WATCH_JOB_REQUEST__INIT;
  req.job_id = (char *)job_id;
  req.from_start = true;
  kiln_client_stream_t *s = kiln_client_stream_open(client, "/kiln.v1.Kiln/WatchJob", &req.base);
  for (;;) {
    ProtobufCMessage *msg = NULL;
    bool timed_out = false;
    kiln_status_t st = kiln_client_stream_read(s, &kiln__v1__job_event__descriptor, -1, &msg, &timed_out);
    if (st) {
      kiln_client_stream_destroy(s);
      check(st, "WatchJob");
    }
    if (!msg) break;
    Kiln__V1__JobEvent *ev = (Kiln__V1__JobEvent *)msg;
    if (ev->event_case == KILN__V1__JOB_EVENT__EVENT_TARGET_DONE && out->n_done < N_MISSION) {
      snprintf(out->digests[out->n_done++], 65, "%s", ev->target_done->artifact_digest);
    } else if (ev->event_case == KILN__V1__JOB_EVENT__EVENT_TARGET_FAILED && !out->failure[0]) {
      snprintf(out->failure, sizeof out->failure, "%s: %s", ev->target_failed->target,
               ev->target_failed->message);
    } else if (ev->event_case == KILN__V1__JOB_EVENT__EVENT_TERMINAL) {
      out->state = ev->terminal->state;
      if (!out->failure[0] && ev->terminal->message && ev->terminal->message[0]) {
        snprintf(out->failure, sizeof out->failure, "%s", ev->terminal->message);
      }
    }
    protobuf_c_message_free_unpacked(msg, NULL);
  }
  kiln_client_stream_destroy(s);
  if (out->state == KILN__V1__JOB_STATE__JOB_STATE_UNSPECIFIED) {
    kiln_bench_die("WatchJob of %s ended without a Terminal event", job_id);
  }
}

/* Streams artifact `digest` into nothing; returns its size after checking that the
 * chunks add up to the size its metadata announced. */
static uint64_t get_artifact_call(kiln_client_t *client, const char *digest) {
  Kiln__V1__GetArtifactRequest req = KILN__V1__GET_ARTIFACT_REQUEST__INIT;
  req.selector_case = KILN__V1__GET_ARTIFACT_REQUEST__SELECTOR_DIGEST;
  req.digest = (char *)digest;
  kiln_client_stream_t *s = kiln_client_stream_open(client, "/kiln.v1.Kiln/GetArtifact", &req.base);
  uint64_t size = UINT64_MAX, got = 0;
  for (;;) {
    ProtobufCMessage *msg = NULL;
    bool timed_out = false;
    const kiln_client_piece_t *pieces = NULL;
    size_t n = 0;
    /* As `kiln fetch` reads: the bytes stay in gRPC's receive buffers. */
    kiln_status_t st = kiln_client_stream_read_split(s, &kiln__v1__artifact_chunk__descriptor, 3, -1, &msg,
                                                     &pieces, &n, &timed_out);
    if (st) {
      kiln_client_stream_destroy(s);
      check(st, "GetArtifact");
    }
    if (!msg) break;
    Kiln__V1__ArtifactChunk *chunk = (Kiln__V1__ArtifactChunk *)msg;
    if (chunk->metadata) size = chunk->metadata->size_bytes;
    for (size_t i = 0; i < n; i++) got += pieces[i].len;
    protobuf_c_message_free_unpacked(msg, NULL);
  }
  kiln_client_stream_destroy(s);
  if (got != size) {
    kiln_bench_die("GetArtifact %s sent %llu bytes of %llu", digest, (unsigned long long)got,
                   (unsigned long long)size);
  }
  return got;
}

/* ---- the model and its variants ---- */

static char *model;
static size_t model_len;
static uint64_t next_variant = 1;

/* mlp.mlir with a comment and one constant that no earlier variant had
 * (kiln_bench_model_variant). Owned by the caller. */
static char *variant(size_t *out_len) {
  return kiln_bench_model_variant(model, model_len, "bench_service", "dense<-0.2>", -0.2, next_variant++,
                                  out_len);
}

/* ---- section 1: cold compiles ---- */

typedef struct cold_result_s {
  int64_t kilnd_ns;   /* median, Compile to Terminal */
  int64_t fetched_ns; /* median, Compile to the last GetArtifact */
  int64_t kilnc6_ns;  /* median, six single-target kilnc processes */
  int64_t kilnc1_ns;  /* median, one six-target kilnc process */
  uint64_t workers;   /* kilnd's compile worker processes */
} cold_result_t;

/* One cold six-target compile through kilnd. */
static void kilnd_cold(kiln_client_t *client, int64_t *out_terminal_ns, int64_t *out_fetched_ns) {
  size_t len;
  char *src = variant(&len);
  int64_t t0 = kiln_time_monotonic_ns();
  Kiln__V1__CompileResponse *resp = compile_call(client, src, len);
  for (size_t i = 0; i < resp->n_targets; i++) {
    if (resp->targets[i]->cached) {
      kiln_bench_die("a fresh source was answered from the cache (%s)", resp->targets[i]->target);
    }
  }
  char *job = kiln_strdup(resp->job_id);
  protobuf_c_message_free_unpacked(&resp->base, NULL);
  job_outcome_t out;
  watch_call(client, job, &out);
  int64_t t1 = kiln_time_monotonic_ns();
  if (out.state != KILN__V1__JOB_STATE__JOB_STATE_DONE || out.n_done != N_MISSION) {
    kiln_bench_die("cold compile job %s ended in state %d with %zu of %zu targets: %s", job, (int)out.state,
                   out.n_done, N_MISSION, out.failure[0] ? out.failure : "(no message)");
  }
  for (size_t i = 0; i < N_MISSION; i++) get_artifact_call(client, out.digests[i]);
  int64_t t2 = kiln_time_monotonic_ns();
  *out_terminal_ns = t1 - t0;
  *out_fetched_ns = t2 - t0;
  kiln_free(job);
  kiln_free(src);
}

/* kilnc on a fresh variant: six processes one target each (all = false), or one
 * process for all six. */
static int64_t kilnc_cold(bool all) {
  size_t len;
  char *src = variant(&len);
  char path[PATH_MAX], out_dir[PATH_MAX], err_path[PATH_MAX];
  path_join(path, scratch, "variant.mlir");
  path_join(out_dir, scratch, "kilnc-out");
  path_join(err_path, scratch, "kilnc.err");
  if (kiln_bench_write_file(path, src, len) != 0)
    kiln_bench_die("cannot write %s: %s", path, strerror(errno));
  kiln_free(src);
  char joined[256] = "";
  for (size_t i = 0; i < N_MISSION; i++) {
    snprintf(joined + strlen(joined), sizeof joined - strlen(joined), "%s%s", i ? "," : "", mission_ids[i]);
  }
  int64_t t0 = kiln_time_monotonic_ns();
  for (size_t i = 0; i < (all ? 1 : N_MISSION); i++) {
    const char *argv[] = {KILNC_PATH, path, "-t", all ? joined : mission_ids[i], "-o", out_dir, NULL};
    int status = run_process(argv, err_path);
    if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) {
      size_t n;
      char *err = kiln_bench_read_file_or_die(err_path, &n);
      kiln_bench_die("%s %s -t %s failed (status 0x%x): %.400s", KILNC_PATH, path, argv[3], status, err);
    }
  }
  return kiln_time_monotonic_ns() - t0;
}

static void bench_cold(const plan_t *plan, kiln_client_t *client, cold_result_t *res) {
  printf(
      "1. cold compile, examples/mlp.mlir for the six mission targets, a fresh source each time:\n"
      "   kilnd (%llu workers; Compile, WatchJob to Terminal, GetArtifact of the six VMFBs into\n"
      "   memory) vs six sequential kilnc processes, one target each (-o a temp dir)\n",
      (unsigned long long)res->workers);
  /* Untimed: the first compiles load every LLVM backend in a worker. */
  for (size_t w = 0; w < (plan->quick ? 1 : 2); w++) {
    int64_t a, b;
    kilnd_cold(client, &a, &b);
  }
  kilnc_cold(false);
  size_t n = plan->cold_rounds;
  int64_t *k = kiln_calloc(n, sizeof *k), *f = kiln_calloc(n, sizeof *f);
  int64_t *c6 = kiln_calloc(n, sizeof *c6), *c1 = kiln_calloc(n, sizeof *c1);
  for (size_t r = 0; r < n; r++) {
    for (int arm = 0; arm < 3; arm++) {
      switch ((arm + (int)r) % 3) {
        case 0: kilnd_cold(client, &k[r], &f[r]); break;
        case 1: c6[r] = kilnc_cold(false); break;
        default: c1[r] = kilnc_cold(true); break;
      }
    }
  }
  res->kilnd_ns = kiln_bench_median(k, n);
  res->fetched_ns = kiln_bench_median(f, n);
  res->kilnc6_ns = kiln_bench_median(c6, n);
  res->kilnc1_ns = kiln_bench_median(c1, n);
  double ratio = (double)res->fetched_ns / (double)res->kilnc1_ns;
  printf("  medians of %zu runs each, alternating:\n", n);
  printf("    kilnd, Compile to Terminal                 %8.1f ms\n", ms(res->kilnd_ns));
  printf("    kilnd, Compile to the six VMFBs fetched    %8.1f ms\n", ms(res->fetched_ns));
  printf("    one kilnc process, all six targets         %8.1f ms\n", ms(res->kilnc1_ns));
  printf("    (six kilnc processes, one target each)     %8.1f ms\n", ms(res->kilnc6_ns));
  printf("  kilnd (fetched) / one kilnc = %.2fx   goal <= %.1fx %s\n", ratio, COLD_GOAL,
         ratio <= COLD_GOAL ? "PASS" : "MISS");
  printf(
      "  kilnd runs one job's targets as one task in one warm worker, the front half once;\n"
      "  a task that finds workers idle forks a child per idle core (CompileTask.jobs), each\n"
      "  taking target after target, as `kilnc -t` with six targets does; kilnd's workers are\n"
      "  warm, bound at start and use huge pages, and each single-target kilnc process pays\n"
      "  start-up, an MLIR context and the front half again\n\n");
  kiln_free(k);
  kiln_free(f);
  kiln_free(c6);
  kiln_free(c1);
}

/* ---- section 2: warm-hit latency ---- */

typedef struct hit_result_s {
  int64_t p50_ns, health_p50_ns;
} hit_result_t;

static void print_latency_row(const char *name, int64_t *v, size_t n) {
  kiln_bench_sort(v, n);
  printf("  %-30s %8.3f %8.3f %8.3f %8.3f\n", name, ms(percentile(v, n, 50)), ms(percentile(v, n, 90)),
         ms(percentile(v, n, 99)), ms(v[n - 1]));
}

static void bench_hit(const plan_t *plan, kiln_client_t *client, const cold_result_t *cold,
                      hit_result_t *res) {
  size_t n = plan->hit_calls;
  int64_t *hit = kiln_calloc(n, sizeof *hit), *health = kiln_calloc(n, sizeof *health);
  for (size_t i = 0; i < 100; i++) {
    hit_call(client, model, model_len, NULL);
    health_call(client);
  }
  for (size_t i = 0; i < n; i++) {
    int64_t t0 = kiln_time_monotonic_ns();
    hit_call(client, model, model_len, NULL);
    int64_t t1 = kiln_time_monotonic_ns();
    health_call(client);
    int64_t t2 = kiln_time_monotonic_ns();
    hit[i] = t1 - t0;
    health[i] = t2 - t1;
  }
  printf(
      "2. warm hit: the same six-target Compile (inline source, %zu bytes) after it was\n"
      "   compiled once; admission answers DONE, all six cached. One client, %zu sequential\n"
      "   calls after 100 untimed, each followed by a Health/Check (the transport's floor)\n",
      model_len, n);
  printf("  %-30s %8s %8s %8s %8s\n", "ms", "p50", "p90", "p99", "max");
  print_latency_row("Compile, all cached", hit, n);
  print_latency_row("Health/Check", health, n);
  res->p50_ns = percentile(hit, n, 50);
  res->health_p50_ns = percentile(health, n, 50);
  printf("  hit p50 %.3f ms   goal < %.1f ms %s\n", ms(res->p50_ns), ms(HIT_P50_GOAL_NS),
         res->p50_ns < HIT_P50_GOAL_NS ? "PASS" : "MISS");
  if (runs(plan, 1)) {
    double ratio = (double)cold->kilnd_ns / (double)res->p50_ns;
    printf("  cold (section 1, Compile to Terminal) / hit p50 = %.0fx   goal >= %.0fx %s\n", ratio,
           COLD_OVER_HIT_GOAL, ratio >= COLD_OVER_HIT_GOAL ? "PASS" : "MISS");
  }
  printf("\n");
  kiln_free(hit);
  kiln_free(health);
}

/* ---- load: many clients, one thread each ---- */

typedef enum load_kind_e { LOAD_HIT, LOAD_HEALTH, LOAD_CROWD } load_kind_t;

typedef struct load_s {
  load_kind_t kind;
  bool connect_first; /* make each client's first call before the start line */
  pthread_barrier_t start;
  atomic_bool stop;
} load_t;

typedef struct loader_s {
  load_t *load;
  kiln_client_t *client;
  pthread_t thread;
  uint64_t calls;
  int64_t *lat; /* LOAD_CROWD: Compile + WatchJob latencies, up to LAT_CAP */
  size_t n_lat;
} loader_t;

static void *loader_main(void *arg) {
  loader_t *l = arg;
  load_t *load = l->load;
  if (load->connect_first) health_call(l->client);
  pthread_barrier_wait(&load->start);
  while (!atomic_load_explicit(&load->stop, memory_order_relaxed)) {
    int64_t t0 = kiln_time_monotonic_ns();
    if (load->kind == LOAD_HEALTH) {
      health_call(l->client);
    } else if (load->kind == LOAD_HIT) {
      hit_call(l->client, model, model_len, NULL);
    } else {
      char *job;
      hit_call(l->client, model, model_len, &job);
      job_outcome_t out;
      watch_call(l->client, job, &out);
      if (out.state != KILN__V1__JOB_STATE__JOB_STATE_DONE) {
        kiln_bench_die("cached job %s ended in state %d", job, (int)out.state);
      }
      kiln_free(job);
    }
    if (l->lat && l->n_lat < LAT_CAP) l->lat[l->n_lat++] = kiln_time_monotonic_ns() - t0;
    l->calls++;
  }
  return NULL;
}

/* What a load phase observed of kilnd while it ran. */
typedef struct load_watch_s {
  int64_t max_rss_kib;
  size_t sockets; /* kilnd's open sockets halfway through */
} load_watch_t;

/* Runs `kind` on every client for `duration_ms`; returns calls/s over the phase and
 * adds the calls made to *out_calls. With `watch` non-NULL the main thread samples
 * kilnd's RSS meanwhile. */
static double load_run(load_kind_t kind, loader_t *loaders, kiln_client_t **clients, size_t n,
                       int64_t duration_ms, bool connect_first, load_watch_t *watch, uint64_t *out_calls) {
  load_t load = {.kind = kind, .connect_first = connect_first};
  atomic_init(&load.stop, false);
  pthread_barrier_init(&load.start, NULL, (unsigned)n + 1);
  for (size_t i = 0; i < n; i++) {
    loaders[i].load = &load;
    loaders[i].client = clients[i];
    loaders[i].calls = 0;
    loaders[i].n_lat = 0;
    int rc = pthread_create(&loaders[i].thread, NULL, loader_main, &loaders[i]);
    if (rc != 0) kiln_bench_die("cannot start client thread %zu of %zu: %s", i + 1, n, strerror(rc));
  }
  pthread_barrier_wait(&load.start);
  int64_t t0 = kiln_time_monotonic_ns();
  int64_t until = t0 + duration_ms * 1000000;
  if (watch) {
    memset(watch, 0, sizeof *watch);
    bool counted = false;
    while (kiln_time_monotonic_ns() < until) {
      int64_t rss = proc_status_kib(kilnd.pid, "VmRSS:");
      if (rss > watch->max_rss_kib) watch->max_rss_kib = rss;
      if (!counted && kiln_time_monotonic_ns() > t0 + duration_ms * 500000) {
        watch->sockets = socket_count(kilnd.pid);
        counted = true;
      }
      sleep_ms(RSS_SAMPLE_MS);
    }
  } else {
    sleep_ms(duration_ms);
  }
  atomic_store(&load.stop, true);
  uint64_t calls = 0;
  for (size_t i = 0; i < n; i++) {
    pthread_join(loaders[i].thread, NULL);
    calls += loaders[i].calls;
  }
  int64_t elapsed = kiln_time_monotonic_ns() - t0;
  pthread_barrier_destroy(&load.start);
  *out_calls += calls;
  return (double)calls * 1e9 / (double)elapsed;
}

/* ---- section 3: hit throughput ---- */

/* This process's CPU time, its finished threads included: its client threads'
 * (sections 3 and 4; kilnd's comes from /proc, kiln_bench_proc_cpu_ns). */
static int64_t self_cpu_ns(void) {
  struct timespec ts;
  clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
  return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

/* a / b in millionths (0 when b is 0): paired ratios kept as integers for
 * kiln_bench_median (sections 3 and 4). */
static int64_t ratio_ppm(int64_t a, int64_t b) { return b > 0 ? a * 1000000 / b : 0; }

/* "  LABEL, sorted: r1 r2 ..." (kiln_bench_median sorted them). */
static void print_ratios(const char *label, const int64_t *ppm, size_t n) {
  printf("  %s, sorted:", label);
  for (size_t i = 0; i < n; i++) printf(" %.2f", (double)ppm[i] / 1e6);
  printf("\n");
}

/* Cached Compiles until kilnd's memory stops growing. Each leaves a finished job
 * that kilnd retains (up to 10,000); until that store is full every new job takes
 * fresh pages, and their first-touch faults (about 2,400 per 0.5 s on a 2-vCPU VM)
 * are a start-up cost, not the steady state this section measures. */
static void throughput_warm_up(const plan_t *plan, loader_t *loaders, kiln_client_t **clients, size_t n) {
  int64_t t0 = kiln_time_monotonic_ns();
  int64_t first = proc_status_kib(kilnd.pid, "VmRSS:"), before = first, after = first;
  uint64_t calls = 0;
  size_t steps = 0, flat = 0; /* flat: consecutive steps that grew less than WARM_FLAT_KIB */
  while (flat < WARM_FLAT_STEPS && steps < plan->warm_steps_max) {
    load_run(LOAD_HIT, loaders, clients, n, WARM_STEP_MS, false, NULL, &calls);
    steps++;
    after = proc_status_kib(kilnd.pid, "VmRSS:");
    flat = after - before < WARM_FLAT_KIB ? flat + 1 : 0;
    before = after;
  }
  printf(
      "   warm-up: %.1f s of cached Compiles (%llu calls) until kilnd's RSS grew < %d KiB in %d\n"
      "   steps of %d ms: %.1f -> %.1f MiB%s\n",
      ms(kiln_time_monotonic_ns() - t0) / 1e3, (unsigned long long)calls, WARM_FLAT_KIB, WARM_FLAT_STEPS,
      WARM_STEP_MS, kib_mib(first), kib_mib(after),
      flat < WARM_FLAT_STEPS ? " (still growing: step limit)" : "");
}

static double bench_throughput(const plan_t *plan, double *out_hit, double *out_health) {
  size_t n = plan->tput_clients;
  kiln_client_t **clients = kiln_calloc(n, sizeof *clients);
  loader_t *loaders = kiln_calloc(n, sizeof *loaders);
  for (size_t i = 0; i < n; i++) {
    clients[i] = client_open(i + 1);
    health_call(clients[i]); /* connected before anything is timed */
    hit_call(clients[i], model, model_len, NULL);
  }
  printf(
      "3. hit throughput: %zu clients (one thread and one connection each) calling the cached\n"
      "   Compile of section 2 in a loop, vs Health/Check from the same clients: %zu rounds of\n"
      "   %.1f s per side, alternating which goes first; the ratio is the median of the rounds'\n"
      "   own ratios, so a slow stretch of the machine hits both sides of a round alike. CPU time\n"
      "   per call: kilnd's (/proc/PID/stat) and the clients' (this process's CPU clock)\n",
      n, plan->tput_rounds, (double)plan->tput_ms / 1e3);
  throughput_warm_up(plan, loaders, clients, n);
  size_t rounds = plan->tput_rounds;
  int64_t *hit = kiln_calloc(rounds, sizeof *hit), *health = kiln_calloc(rounds, sizeof *health);
  int64_t *paired = kiln_calloc(rounds, sizeof *paired); /* hit / health of each round, x 1e6 */
  uint64_t calls[2] = {0, 0};
  int64_t cpu[2] = {0, 0}, client_cpu[2] = {0, 0}; /* during each arm */
  for (size_t r = 0; r < rounds; r++) {
    for (int arm = 0; arm < 2; arm++) {
      bool hit_turn = (arm == 0) == (r % 2 == 0);
      int side = hit_turn ? 0 : 1;
      int64_t c0 = kiln_bench_proc_cpu_ns(kilnd.pid, false), s0 = self_cpu_ns();
      double rate = load_run(hit_turn ? LOAD_HIT : LOAD_HEALTH, loaders, clients, n, plan->tput_ms, false,
                             NULL, &calls[side]);
      cpu[side] += kiln_bench_proc_cpu_ns(kilnd.pid, false) - c0;
      client_cpu[side] += self_cpu_ns() - s0;
      *(hit_turn ? &hit[r] : &health[r]) = (int64_t)rate;
    }
    paired[r] = ratio_ppm(hit[r], health[r]);
  }
  *out_hit = (double)kiln_bench_median(hit, rounds);
  *out_health = (double)kiln_bench_median(health, rounds);
  double ratio = (double)kiln_bench_median(paired, rounds) / 1e6;
  for (int side = 0; side < 2; side++) {
    double per = 1e3 * (double)calls[side]; /* ns per us, times calls */
    printf("  %s %8.0f calls/s (median), CPU per call: kilnd %4.0f us, clients %4.0f us\n",
           side == 0 ? "cached Compile" : "Health/Check  ", side == 0 ? *out_hit : *out_health,
           per > 0 ? (double)cpu[side] / per : 0.0, per > 0 ? (double)client_cpu[side] / per : 0.0);
  }
  print_ratios("round ratios", paired, rounds);
  printf("  Compile / Health/Check = %.2fx   goal >= %.1fx %s\n\n", ratio, THROUGHPUT_GOAL,
         ratio >= THROUGHPUT_GOAL ? "PASS" : "MISS");
  for (size_t i = 0; i < n; i++) kiln_client_destroy(clients[i]);
  kiln_free(clients);
  kiln_free(loaders);
  kiln_free(hit);
  kiln_free(health);
  kiln_free(paired);
  return ratio;
}

/* ---- section 4: GetArtifact ---- */

/* Puts `bytes` incompressible bytes into STATE/cache as an artifact (before kilnd
 * starts) and writes its digest and the path of its blob file. */
static void seed_artifact(size_t bytes, char *out_digest, char *out_blob_path) {
  char cache_dir[PATH_MAX];
  path_join(cache_dir, kilnd.state_dir, "cache");
  kiln_cache_options_t opts = {.compression = KILN_BLOB_COMPRESSION_OFF};
  kiln_cache_t *cache;
  check(kiln_cache_open(cache_dir, &opts, &cache, NULL), "kiln_cache_open");
  unsigned char *data = kiln_malloc(bytes);
  fill_random(data, bytes);
  const char *flags[] = {"--iree-opt-level=O2"};
  kiln_cache_key_parts_t parts = {"00000000000000000000000000000000000000000000000000000000bec4a1e5",
                                  "sm_89",
                                  flags,
                                  1,
                                  "bench_service",
                                  7,
                                  17u << 16};
  kiln_cache_provenance_t prov = {.submitter = "bench_service"};
  kiln_index_artifact_t rec;
  check(kiln_cache_artifact_put(cache, &parts, data, bytes, &prov, &rec), "kiln_cache_artifact_put");
  memcpy(out_digest, rec.artifact_digest, 65);
  kiln_index_artifact_deinit(&rec);
  kiln_free(data);
  kiln_cache_close(cache);
  char blobs[PATH_MAX], shard[PATH_MAX], name[3] = {out_digest[0], out_digest[1], '\0'};
  path_join(blobs, cache_dir, "blobs");
  path_join(shard, blobs, name);
  path_join(out_blob_path, shard, out_digest);
  if (access(out_blob_path, R_OK) != 0) kiln_bench_die("the seeded blob is not at %s", out_blob_path);
}

/* read() of the whole file in `chunk`-sized pieces into one reused buffer. */
static int64_t read_file_timed(const char *path, unsigned char *buf, size_t chunk, size_t expect) {
  int64_t t0 = kiln_time_monotonic_ns();
  int fd = open(path, O_RDONLY | O_CLOEXEC);
  if (fd < 0) kiln_bench_die("cannot open %s: %s", path, strerror(errno));
  size_t total = 0;
  for (;;) {
    ssize_t n = read(fd, buf, chunk);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) kiln_bench_die("cannot read %s: %s", path, strerror(errno));
    if (n == 0) break;
    total += (size_t)n;
  }
  close(fd);
  if (total != expect) kiln_bench_die("%s has %zu bytes, expected %zu", path, total, expect);
  return kiln_time_monotonic_ns() - t0;
}

/* The floor under any download over a socket: one thread reads the file (in
 * `chunk` pieces) and writes it to a TCP loopback connection, this one reads it
 * out into a reused buffer. No gRPC, no framing, no verification. */
typedef struct sender_s {
  const char *path;
  int fd;
  size_t chunk;
} sender_t;

static void *send_file(void *arg) {
  sender_t *sd = arg;
  unsigned char *buf = kiln_malloc(sd->chunk);
  int in = open(sd->path, O_RDONLY | O_CLOEXEC);
  for (ssize_t n; in >= 0 && (n = read(in, buf, sd->chunk)) > 0;) {
    for (ssize_t off = 0; off < n;) {
      ssize_t w = write(sd->fd, buf + off, (size_t)(n - off));
      if (w < 0 && errno == EINTR) continue;
      if (w <= 0) goto out;
      off += w;
    }
  }
out:
  if (in >= 0) close(in);
  close(sd->fd);
  kiln_free(buf);
  return NULL;
}

static int64_t loopback_copy_timed(const char *path, unsigned char *buf, size_t chunk, size_t expect) {
  int lfd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  struct sockaddr_in a;
  memset(&a, 0, sizeof a);
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t alen = sizeof a;
  if (lfd < 0 || bind(lfd, (struct sockaddr *)&a, sizeof a) != 0 || listen(lfd, 1) != 0 ||
      getsockname(lfd, (struct sockaddr *)&a, &alen) != 0) {
    kiln_bench_die("cannot listen on loopback: %s", strerror(errno));
  }
  int64_t t0 = kiln_time_monotonic_ns();
  int cfd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (cfd < 0 || connect(cfd, (struct sockaddr *)&a, sizeof a) != 0) {
    kiln_bench_die("cannot connect: %s", strerror(errno));
  }
  sender_t sd = {path, accept(lfd, NULL, NULL), chunk};
  if (sd.fd < 0) kiln_bench_die("cannot accept: %s", strerror(errno));
  close(lfd);
  pthread_t t;
  if (pthread_create(&t, NULL, send_file, &sd) != 0) kiln_bench_die("cannot start the sender thread");
  size_t total = 0;
  for (ssize_t n; (n = read(cfd, buf, chunk)) != 0;) {
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) kiln_bench_die("loopback read: %s", strerror(errno));
    total += (size_t)n;
  }
  pthread_join(t, NULL);
  int64_t elapsed = kiln_time_monotonic_ns() - t0;
  close(cfd);
  if (total != expect) kiln_bench_die("the loopback copy moved %zu bytes, expected %zu", total, expect);
  return elapsed;
}

/* The machine's count of retransmitted TCP segments (/proc/net/snmp), or -1. On
 * the 2-vCPU CI VM loopback delivers segments out of order (nstat's TCPOFOQueue)
 * and most retransmits are spurious (DSACKs); with tcp_notsent_lowat they vanished
 * and GetArtifact got slower, so the count is shown beside the times, not blamed. */
static int64_t tcp_retransmits(void) {
  FILE *f = fopen("/proc/net/snmp", "r");
  if (!f) return -1;
  char names[1024], values[1024];
  int64_t found = -1;
  while (found < 0 && fgets(names, sizeof names, f) && fgets(values, sizeof values, f)) {
    if (strncmp(names, "Tcp:", 4) != 0 || strncmp(values, "Tcp:", 4) != 0) continue;
    char *ns = NULL, *vs = NULL;
    char *n = strtok_r(names, " \n", &ns), *v = strtok_r(values, " \n", &vs);
    while (n && v) {
      if (strcmp(n, "RetransSegs") == 0) {
        found = strtoll(v, NULL, 10);
        break;
      }
      n = strtok_r(NULL, " \n", &ns);
      v = strtok_r(NULL, " \n", &vs);
    }
  }
  fclose(f);
  return found;
}

/* The machine's TCP congestion control (both sides of section 4 use it), or "?".
 * It sets section 4's ratio: with BBR both sides are paced; with CUBIC the
 * loopback copy speeds up more than GetArtifact (docs/design/daemon.md). */
static void tcp_congestion_control(char *out, size_t cap) {
  snprintf(out, cap, "?");
  char *text = kiln_bench_read_file("/proc/sys/net/ipv4/tcp_congestion_control", NULL);
  if (text) {
    text[strcspn(text, " \n")] = '\0';
    if (*text) snprintf(out, cap, "%s", text);
    kiln_free(text);
  }
}

/* What one side of section 4 cost beside its time: CPU and retransmits. */
typedef struct arm_cost_s {
  int64_t kilnd_cpu_ns, self_cpu_ns, retransmits;
  int64_t t_kilnd, t_self, t_retransmits; /* at the start of the run */
} arm_cost_t;

static void arm_start(arm_cost_t *a) {
  a->t_kilnd = kiln_bench_proc_cpu_ns(kilnd.pid, false);
  a->t_self = self_cpu_ns();
  a->t_retransmits = tcp_retransmits();
}

static void arm_stop(arm_cost_t *a) {
  a->kilnd_cpu_ns += kiln_bench_proc_cpu_ns(kilnd.pid, false) - a->t_kilnd;
  a->self_cpu_ns += self_cpu_ns() - a->t_self;
  int64_t r = tcp_retransmits();
  if (r < 0 || a->t_retransmits < 0 || a->retransmits < 0)
    a->retransmits = -1;
  else
    a->retransmits += r - a->t_retransmits;
}

static double bench_artifact(const plan_t *plan, kiln_client_t *client, const char *digest,
                             const char *blob_path, double *out_socket_ratio, double *out_socket_limit) {
  size_t bytes = plan->artifact_bytes, runs = plan->artifact_runs;
  size_t chunk = MIB;
  Kiln__V1__GetServerInfoRequest ireq = KILN__V1__GET_SERVER_INFO_REQUEST__INIT;
  ProtobufCMessage *iresp = NULL;
  check(kiln_client_unary(client, "/kiln.v1.Kiln/GetServerInfo", &ireq.base,
                          &kiln__v1__get_server_info_response__descriptor, &iresp),
        "GetServerInfo");
  uint64_t server_chunk = ((Kiln__V1__GetServerInfoResponse *)iresp)->chunk_size_bytes;
  protobuf_c_message_free_unpacked(iresp, NULL);
  if (server_chunk > 0 && server_chunk < 64 * MIB) chunk = (size_t)server_chunk;

  unsigned char *buf = kiln_malloc(chunk);
  int64_t *ga = kiln_calloc(runs, sizeof *ga), *rd = kiln_calloc(runs, sizeof *rd),
          *lb = kiln_calloc(runs, sizeof *lb);
  /* Untimed first pass of each side: the blob file is then in page cache for all. */
  get_artifact_call(client, digest);
  read_file_timed(blob_path, buf, chunk, bytes);
  arm_cost_t ga_cost = {0}, lb_cost = {0};
  for (size_t r = 0; r < runs; r++) {
    for (int arm = 0; arm < 3; arm++) {
      int turn = (arm + (int)r) % 3;
      if (turn == 0) {
        arm_start(&ga_cost);
        int64_t t0 = kiln_time_monotonic_ns();
        get_artifact_call(client, digest);
        ga[r] = kiln_time_monotonic_ns() - t0;
        arm_stop(&ga_cost);
      } else if (turn == 1) {
        rd[r] = read_file_timed(blob_path, buf, chunk, bytes);
      } else {
        arm_start(&lb_cost);
        lb[r] = loopback_copy_timed(blob_path, buf, chunk, bytes);
        arm_stop(&lb_cost);
      }
    }
  }
  /* kilnd verifies what it reads with the blob's recorded XXH3-128 check. */
  size_t check_bytes = bytes < 64 * MIB ? bytes : 64 * MIB;
  unsigned char *data = kiln_malloc(check_bytes);
  fill_random(data, check_bytes);
  int64_t xx[3];
  for (size_t i = 0; i < 3; i++) {
    kiln_blob_check_t c;
    int64_t t0 = kiln_time_monotonic_ns();
    kiln_blob_check_of(data, check_bytes, &c);
    xx[i] = kiln_time_monotonic_ns() - t0;
  }
  kiln_free(data);
  /* The goal's ratio pairs the runs of one turn (before the medians sort them):
   * a slow stretch of the shared machine then hits both sides of a pair alike. */
  int64_t *paired = kiln_calloc(runs, sizeof *paired); /* GetArtifact / loopback speed, x 1e6 */
  for (size_t r = 0; r < runs; r++) paired[r] = ratio_ppm(lb[r], ga[r]); /* times: loopback / GetArtifact */
  double ratio = (double)kiln_bench_median(paired, runs) / 1e6;
  int64_t g = kiln_bench_median(ga, runs), rr = kiln_bench_median(rd, runs), l = kiln_bench_median(lb, runs),
          x = kiln_bench_median(xx, 3);
  double g_rate = mib_per_s(bytes, g), r_rate = mib_per_s(bytes, rr), l_rate = mib_per_s(bytes, l),
         x_rate = mib_per_s(check_bytes, x);
  *out_socket_ratio = g_rate / r_rate;
  *out_socket_limit = l_rate / r_rate;
  printf(
      "4. GetArtifact of a %zu MiB artifact (random bytes, stored uncompressed) vs read() of\n"
      "   its blob file in %zu KiB pieces, and vs the same file sent through a TCP loopback\n"
      "   socket to this process (the limit of any download: no gRPC, no check); all warm\n"
      "   (each ran once untimed first, so the file is in page cache); median of %zu runs\n"
      "   each, in turn\n",
      bytes / MIB, chunk / KIB, runs);
  printf(
      "  GetArtifact    %8.0f MiB/s  (%.0f ms)\n  read()         %8.0f MiB/s  (%.0f ms)\n"
      "  TCP loopback   %8.0f MiB/s  (%.0f ms)\n",
      g_rate, ms(g), r_rate, ms(rr), l_rate, ms(l));
  print_ratios("run ratios (GetArtifact / TCP loopback of one turn)", paired, runs);
  printf(
      "  GetArtifact / TCP loopback = %.2fx (median of the runs' ratios)   goal >= %.1fx %s (what\n"
      "  gRPC, framing and the check leave of the socket)\n",
      ratio, ARTIFACT_GOAL, ratio >= ARTIFACT_GOAL ? "PASS" : "MISS");
  printf("  GetArtifact / read() = %.2fx (page cache: no download's limit)\n", g_rate / r_rate);
  printf(
      "  CPU per run: GetArtifact %.0f ms in kilnd + %.0f ms in the client; TCP loopback %.0f ms\n"
      "  (its sending and reading threads); kilnd's from /proc ticks\n",
      ms(ga_cost.kilnd_cpu_ns / (int64_t)runs), ms(ga_cost.self_cpu_ns / (int64_t)runs),
      ms(lb_cost.self_cpu_ns / (int64_t)runs));
  if (ga_cost.retransmits >= 0 && lb_cost.retransmits >= 0) {
    printf(
        "  TCP segments this machine retransmitted during the runs: %lld in GetArtifact's, %lld in\n"
        "  the loopback copies' (a count for the whole machine)\n",
        (long long)ga_cost.retransmits, (long long)lb_cost.retransmits);
  }
  char cc[32];
  tcp_congestion_control(cc, sizeof cc);
  printf("  TCP congestion control on both sides: %s (the machine's net.ipv4.tcp_congestion_control)\n", cc);
  printf(
      "  XXH3-128 alone (the read check, %zu MiB) %.0f MiB/s; kilnd reads and checks the next chunk\n"
      "  while the last one is on the wire\n\n",
      check_bytes / MIB, x_rate);
  kiln_free(buf);
  kiln_free(ga);
  kiln_free(rd);
  kiln_free(lb);
  kiln_free(paired);
  return ratio;
}

/* ---- section 5: RSS under many clients ---- */

/* kilnd's VmRSS at one moment, and its workers' beside it. */
typedef struct rss_sample_s {
  int64_t kilnd_kib, workers_kib;
  size_t n_workers;
} rss_sample_t;

static rss_sample_t rss_sample(void) {
  rss_sample_t s;
  s.kilnd_kib = proc_status_kib(kilnd.pid, "VmRSS:");
  s.workers_kib = children_rss_kib(kilnd.pid, &s.n_workers);
  return s;
}

typedef struct rss_result_s {
  rss_sample_t start, after;
  bool marked[4];           /* sections 1-4 that ran */
  rss_sample_t section[4];  /* after each of sections 1-4 */
  uint64_t section_jobs[4]; /* jobs submitted by then */
  int64_t peak_kib, hwm_kib;
} rss_result_t;

static uint64_t jobs_submitted(kiln_client_t *client) {
  Kiln__V1__GetStatsResponse *stats = stats_call(client);
  uint64_t n = stats->jobs ? stats->jobs->submitted : 0;
  protobuf_c_message_free_unpacked(&stats->base, NULL);
  return n;
}

/* Records kilnd's memory after section `i` (0-based) of 1-4. */
static void rss_mark(rss_result_t *res, size_t i, kiln_client_t *client) {
  res->marked[i] = true;
  res->section[i] = rss_sample();
  res->section_jobs[i] = jobs_submitted(client);
}

static void print_rss_line(const char *what, const rss_sample_t *s) {
  printf("  %-54s kilnd %6.1f MiB   (%zu workers %6.1f MiB)\n", what, kib_mib(s->kilnd_kib), s->n_workers,
         kib_mib(s->workers_kib));
}

static void bench_crowd(const plan_t *plan, kiln_client_t *client, rss_result_t *res) {
  size_t n = plan->crowd;
  printf(
      "5. kilnd memory (VmRSS of /proc/PID/status; workers are separate processes), idle after\n"
      "   each section, then under %zu clients, one thread and one connection each, each looping\n"
      "   a cached Compile and a WatchJob of its job to Terminal for %.1f s (VmRSS sampled\n"
      "   every %d ms)\n",
      n, (double)plan->crowd_ms / 1e3, RSS_SAMPLE_MS);
  static const char *const names[4] = {"cold compiles", "warm hits", "hit throughput", "GetArtifact"};
  print_rss_line("just after start (no call yet)", &res->start);
  for (size_t i = 0; i < 4; i++) {
    if (!res->marked[i]) continue;
    char what[96];
    snprintf(what, sizeof what, "idle after %zu. %s (%llu jobs so far)", i + 1, names[i],
             (unsigned long long)res->section_jobs[i]);
    print_rss_line(what, &res->section[i]);
  }
  uint64_t jobs_before = jobs_submitted(client);
  size_t sockets_idle = socket_count(kilnd.pid);

  kiln_client_t **clients = kiln_calloc(n, sizeof *clients);
  loader_t *loaders = kiln_calloc(n, sizeof *loaders);
  for (size_t i = 0; i < n; i++) {
    clients[i] = client_open(1000 + i);
    loaders[i].lat = kiln_calloc(LAT_CAP, sizeof *loaders[i].lat);
  }
  load_watch_t watch;
  uint64_t pairs = 0;
  double rate = load_run(LOAD_CROWD, loaders, clients, n, plan->crowd_ms, true, &watch, &pairs);
  res->peak_kib = watch.max_rss_kib;
  size_t total = 0;
  for (size_t i = 0; i < n; i++) total += loaders[i].n_lat;
  int64_t *lat = kiln_calloc(total ? total : 1, sizeof *lat);
  for (size_t i = 0, k = 0; i < n; i++) {
    memcpy(lat + k, loaders[i].lat, loaders[i].n_lat * sizeof *lat);
    k += loaders[i].n_lat;
  }
  printf("  %-54s kilnd %6.1f MiB\n", "peak while the clients ran (sampled)", kib_mib(res->peak_kib));
  for (size_t i = 0; i < n; i++) {
    kiln_client_destroy(clients[i]);
    kiln_free(loaders[i].lat);
  }
  sleep_ms(1000);
  res->after = rss_sample();
  print_rss_line("1 s after the clients disconnected", &res->after);
  res->hwm_kib = proc_status_kib(kilnd.pid, "VmHWM:");
  printf("  VmHWM (kilnd's peak over the whole run, all sections): %.1f MiB\n", kib_mib(res->hwm_kib));
  uint64_t jobs_after = jobs_submitted(client);
  if (total) {
    kiln_bench_sort(lat, total);
    printf("  %.0f Compile+WatchJob pairs/s; pair latency p50 %.1f ms, p99 %.1f ms, max %.1f ms\n", rate,
           ms(percentile(lat, total, 50)), ms(percentile(lat, total, 99)), ms(lat[total - 1]));
  }
  printf(
      "  kilnd held %zu sockets halfway through, %zu when idle: %s\n"
      "  the phase submitted %llu jobs, which kilnd keeps for --job-retention (default 1 h)\n"
      "  no goal is given for memory: reported only\n\n",
      watch.sockets, sockets_idle,
      watch.sockets >= sockets_idle + n ? "each client had its own connection"
                                        : "clients SHARED connections (fewer sockets than clients)",
      (unsigned long long)(jobs_after - jobs_before));
  kiln_free(lat);
  kiln_free(clients);
  kiln_free(loaders);
}

/* ---- header, summary, main ---- */

static void print_header(const plan_t *plan, const char *dir, uint64_t workers) {
  long cores = sysconf(_SC_NPROCESSORS_ONLN);
  long pages = sysconf(_SC_PHYS_PAGES), page = sysconf(_SC_PAGESIZE);
  char cpu[128];
  kiln_bench_cpu_model(cpu, sizeof cpu);
  struct statfs fs;
  if (statfs(dir, &fs) != 0) kiln_bench_die("cannot statfs %s: %s", dir, strerror(errno));
  printf(
      "kiln service benchmark (%s): kilnd over gRPC on loopback vs the baselines of its\n"
      "goals, side by side in one run\n",
      plan->quick ? "--quick" : "full");
  printf("what decides these numbers on this machine:\n");
  printf(
      "  cores %ld (%s), memory %.1f GiB, shared by kilnd,\n"
      "  its %llu compile workers and this benchmark's client threads\n",
      cores, cpu, (double)pages * (double)page / (1024.0 * 1024 * 1024), (unsigned long long)workers);
  printf(
      "  kilnd: %s, default settings, on %s\n"
      "  (state dir on %s); clients: the CLI's client library (client/rpc.h)\n",
      KILND_PATH, kilnd.addr, kiln_bench_fs_name((long)fs.f_type));
  kiln_bench_print_load("times");
  printf(
      "method: medians of alternating runs (percentiles for latency); every baseline runs in\n"
      "the same process at the same time of the run; goals are reported as PASS/MISS, never\n"
      "asserted\n\n");
}

static const char *verdict(bool pass) { return pass ? "PASS" : "MISS"; }

static void usage(void) {
  fprintf(stderr,
          "usage: bench_service [--quick] [--section N]... [DIR]\n"
          "  Starts kilnd (%s) in a temporary directory under DIR ($TMPDIR or /tmp by\n"
          "  default) and measures it through gRPC against kilnc, an empty RPC, read() and\n"
          "  its own idle memory; removes the directory at the end.\n"
          "  --quick      smoke run: fewer runs, a 16 MiB artifact, 20 concurrent clients\n"
          "  --section N  run only section N (1-5; repeat for more), with its baselines\n",
          KILND_PATH);
}

int main(int argc, char **argv) {
  kiln_alloc_tune_for_transfers(); /* this process is the downloads' client, as kiln's main sets up */
  plan_t plan = {.cold_rounds = 7,
                 .hit_calls = 3000,
                 .tput_clients = 8,
                 .tput_rounds = 10,
                 .tput_ms = 1000,
                 .warm_steps_max = 20,
                 .artifact_bytes = 256 * MIB,
                 .artifact_runs = 25, /* a run swings by ±0.15 on a shared 2-core VM; 25 cost ~8 s */
                 .crowd = 200,
                 .crowd_ms = 5000};
  const char *base = NULL;
  /* --section N is this benchmark's own; the rest is benchlib's. */
  char **rest = kiln_calloc((size_t)argc + 1, sizeof *rest);
  int n_rest = 0;
  for (int i = 0; i < argc; i++) {
    if (i > 0 && strcmp(argv[i], "--section") == 0) {
      char *end = NULL;
      long n = i + 1 < argc ? strtol(argv[i + 1], &end, 10) : 0;
      if (!end || *end || n < 1 || n > 5) {
        usage();
        kiln_free(rest);
        return 2;
      }
      plan.sections |= 1u << n;
      i++;
    } else {
      rest[n_rest++] = argv[i];
    }
  }
  if (!plan.sections) plan.sections = 0x3eu; /* 1-5 */
  int rc = kiln_bench_parse_args(n_rest, rest, true, usage, &plan.quick, &base);
  kiln_free(rest);
  if (rc >= 0) return rc;
  if (plan.quick) {
    plan.cold_rounds = 2;
    plan.hit_calls = 300;
    plan.tput_rounds = 3;
    plan.tput_ms = 300;
    plan.warm_steps_max = 2;
    plan.artifact_bytes = 16 * MIB;
    plan.artifact_runs = 3;
    plan.crowd = 20;
    plan.crowd_ms = 1500;
  }
  kiln_log_configure(KILN_LOG_WARN, STDERR_FILENO);
  signal(SIGPIPE, SIG_IGN);
  scratch = kiln_bench_begin("bench_service", base, &kilnd);
  int64_t t0 = kiln_time_monotonic_ns();
  path_join(kilnd.state_dir, scratch, "state");
  path_join(kilnd.log_path, scratch, "kilnd.log");
  char model_path[PATH_MAX];
  path_join(model_path, KILN_SOURCE_DIR, "examples/mlp.mlir");
  model = kiln_bench_read_file_or_die(model_path, &model_len);

  char digest[65] = "", blob_path[PATH_MAX] = "";
  if (mkdir(kilnd.state_dir, 0700) != 0)
    kiln_bench_die("cannot create %s: %s", kilnd.state_dir, strerror(errno));
  if (runs(&plan, 4)) seed_artifact(plan.artifact_bytes, digest, blob_path); /* only section 4 reads it */
  kilnd_start();
  sleep_ms(1000); /* the workers start and load the compiler */
  rss_result_t rss = {.start = rss_sample()};
  kiln_client_t *client = client_open(0);
  cold_result_t cold = {0};
  Kiln__V1__GetStatsResponse *stats = stats_call(client);
  cold.workers = stats->jobs ? stats->jobs->workers : 0;
  protobuf_c_message_free_unpacked(&stats->base, NULL);
  print_header(&plan, kilnd.state_dir, cold.workers);
  fflush(stdout);

  int64_t marks[6];
  marks[0] = kiln_time_monotonic_ns();
  if (runs(&plan, 1)) {
    bench_cold(&plan, client, &cold);
    fflush(stdout);
    rss_mark(&rss, 0, client);
  }
  if (runs(&plan, 2) || runs(&plan, 3) || runs(&plan, 5)) {
    /* The warm hits' artifacts: compiled once, untimed. */
    Kiln__V1__CompileResponse *first = compile_call(client, model, model_len);
    job_outcome_t out;
    watch_call(client, first->job_id, &out);
    protobuf_c_message_free_unpacked(&first->base, NULL);
    if (out.state != KILN__V1__JOB_STATE__JOB_STATE_DONE) {
      kiln_bench_die("examples/mlp.mlir did not compile: %s", out.failure);
    }
  }
  marks[1] = kiln_time_monotonic_ns();
  hit_result_t hit = {0};
  if (runs(&plan, 2)) {
    bench_hit(&plan, client, &cold, &hit);
    fflush(stdout);
    rss_mark(&rss, 1, client);
  }
  marks[2] = kiln_time_monotonic_ns();
  double tput_hit = 0, tput_health = 0, tput = 0;
  if (runs(&plan, 3)) {
    tput = bench_throughput(&plan, &tput_hit, &tput_health);
    fflush(stdout);
    rss_mark(&rss, 2, client);
  }
  marks[3] = kiln_time_monotonic_ns();
  double socket_ratio = 0, socket_limit = 0, artifact = 0;
  if (runs(&plan, 4)) {
    artifact = bench_artifact(&plan, client, digest, blob_path, &socket_ratio, &socket_limit);
    fflush(stdout);
    rss_mark(&rss, 3, client);
  }
  marks[4] = kiln_time_monotonic_ns();
  if (runs(&plan, 5)) {
    bench_crowd(&plan, client, &rss);
    fflush(stdout);
  }
  marks[5] = kiln_time_monotonic_ns();
  kiln_client_destroy(client);

  char buf[64];
  char what[96];
  printf("summary (goals from the issue)\n");
  printf("  %-52s %14s %12s\n", "measurement", "value", "goal");
  if (runs(&plan, 2)) {
    snprintf(buf, sizeof buf, "%.3f ms", ms(hit.p50_ns));
    printf("  %-52s %14s %12s %s\n", "warm-hit Compile p50, six targets cached", buf, "< 2 ms",
           verdict(hit.p50_ns < HIT_P50_GOAL_NS));
  }
  if (runs(&plan, 1) && runs(&plan, 2)) {
    double cold_over_hit = (double)cold.kilnd_ns / (double)hit.p50_ns;
    snprintf(buf, sizeof buf, "%.0fx", cold_over_hit);
    printf("  %-52s %14s %12s %s\n", "cold compile through kilnd / warm-hit p50", buf, ">= 50x",
           verdict(cold_over_hit >= COLD_OVER_HIT_GOAL));
  }
  if (runs(&plan, 3)) {
    snprintf(buf, sizeof buf, "%.2fx", tput);
    snprintf(what, sizeof what, "cached Compile / Health/Check calls/s, %zu clients", plan.tput_clients);
    printf("  %-52s %14s %12s %s\n", what, buf, ">= 0.8x", verdict(tput >= THROUGHPUT_GOAL));
  }
  if (runs(&plan, 1)) {
    double cold_ratio = (double)cold.fetched_ns / (double)cold.kilnc1_ns;
    snprintf(buf, sizeof buf, "%.2fx", cold_ratio);
    snprintf(what, sizeof what, "kilnd cold (%llu workers, %ld cores) / one kilnc, 6 targets",
             (unsigned long long)cold.workers, sysconf(_SC_NPROCESSORS_ONLN));
    printf("  %-52s %14s %12s %s\n", what, buf, "<= 0.7x", verdict(cold_ratio <= COLD_GOAL));
  }
  if (runs(&plan, 4)) {
    snprintf(buf, sizeof buf, "%.2fx", artifact);
    char cc[32];
    tcp_congestion_control(cc, sizeof cc); /* it sets the ratio: printed beside it */
    snprintf(what, sizeof what, "GetArtifact / TCP loopback copy, %zu MiB, %s", plan.artifact_bytes / MIB,
             cc);
    printf("  %-52s %14s %12s %s\n", what, buf, ">= 0.8x", verdict(artifact >= ARTIFACT_GOAL));
    snprintf(buf, sizeof buf, "%.2fx", socket_limit);
    printf("  %-52s %14s %12s\n", "  (the TCP loopback copy / read() from page cache)", buf, "(reported)");
    snprintf(buf, sizeof buf, "%.2fx", socket_ratio);
    printf("  %-52s %14s %12s\n", "  GetArtifact / read()", buf, "(reported)");
  }
  if (runs(&plan, 5)) {
    /* "before load": after the last section before 5 that ran. */
    const rss_sample_t *before = &rss.start;
    for (size_t i = 0; i < 4; i++) {
      if (rss.marked[i]) before = &rss.section[i];
    }
    snprintf(buf, sizeof buf, "%.0f/%.0f/%.0f MiB", kib_mib(rss.start.kilnd_kib), kib_mib(before->kilnd_kib),
             kib_mib(rss.peak_kib));
    snprintf(what, sizeof what, "kilnd VmRSS start / before load / peak, %zu clients", plan.crowd);
    printf("  %-52s %14s %12s\n", what, buf, "(none given)");
  }
  printf("\n");

  int stop = kiln_bench_kilnd_stop(&kilnd, 30000);
  char where[PATH_MAX];
  snprintf(where, sizeof where, "%s", scratch);
  kiln_bench_end();
  printf(
      "total %.1f s (start %.1f, cold %.1f, hit %.1f, throughput %.1f, artifact %.1f, clients "
      "%.1f);"
      " kilnd exited %s; removed %s\n",
      (double)(kiln_time_monotonic_ns() - t0) / 1e9, (double)(marks[0] - t0) / 1e9,
      (double)(marks[1] - marks[0]) / 1e9, (double)(marks[2] - marks[1]) / 1e9,
      (double)(marks[3] - marks[2]) / 1e9, (double)(marks[4] - marks[3]) / 1e9,
      (double)(marks[5] - marks[4]) / 1e9,
      WIFEXITED(stop) && WEXITSTATUS(stop) == 0 ? "cleanly" : "with an error", where);
  kiln_free(model);
  return 0;
}
