/* `kiln compile FILE --target T[,T...] [-o DIR] [--flag F]... [--label K=V]...`
 *
 * The CI path, in order:
 *   1. GetServerInfo: kilnd's limits (message size, chunk size, largest source).
 *   2. The source goes inline in Compile when it is small (at most INLINE_MAX and
 *      well under kilnd's max_message_bytes); otherwise it is hashed, uploaded with
 *      PutSource in chunk_size_bytes pieces, and Compile names it by digest.
 *   3. Compile with a request_id (a random UUID unless --request-id), so retrying
 *      after UNAVAILABLE cannot start a second job; a source evicted between upload
 *      and Compile (NOT_FOUND) is uploaded again once.
 *   4. WatchJob from the start, shown live (terminal) or as plain lines; diagnostics
 *      and failures go to stderr verbatim.
 *   5. GetArtifact for every target that is done, each checked against its SHA-256
 *      and written atomically as DIR/<canonical target>.vmfb, then
 *      DIR/kiln-manifest.json (also atomically), printed instead with --json.
 * --timeout (default 30 min) bounds the whole compile: it is the Compile call's
 * deadline, which kilnd applies to the job, and the watch follows it. SIGINT or
 * SIGTERM while the job runs cancels it on kilnd (exit 1). Exit 0 when
 * every target has its file; 1 when a target failed or the job was cancelled (the
 * compiler's message is on stderr); 4 when kilnd stopped a target at the deadline
 * (DEADLINE_EXCEEDED) or the watch itself ran out of time; 2, 3 as every command.
 */
#include <errno.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "base/alloc.h"
#include "base/buf.h"
#include "base/file.h"
#include "base/mlir_text.h"
#include "base/time.h"
#include "client/cli.h"
#include "client/job.h"
#include "client/json.h"
#include "client/transfer.h"
#include "kiln/v1/kiln.pb-c.h"

#define INLINE_MAX       (1u << 20)
#define MESSAGE_HEADROOM (64u << 10) /* the rest of a CompileRequest besides the source */
#define INFO_TIMEOUT_MS  10000
#define WATCH_GRACE_MS   15000 /* kilnd ends a job at the deadline; let its Terminal arrive */
#define DOWNLOAD_MIN_MS  60000
#define COMPILE_TRIES    3
#define MANIFEST_NAME    "kiln-manifest.json"

static const char usage[] =
    "compile FILE|- --target T[,T...] [-o DIR] [--flag F]... [--label K=V]... "
    "[--priority CLASS] [--request-id ID]";

/* Everything one compile holds; released by compile_deinit. */
typedef struct compile_s {
  const kiln_cli_settings_t *settings;
  kiln_client_t *client;
  int64_t deadline_ms; /* monotonic */
  const char *path;
  const char *name; /* source_name for diagnostics: the path as given */
  FILE *file;       /* large sources are streamed from here */
  uint8_t *inline_data;
  size_t inline_len;
  kiln_digest_hex_t digest; /* of the bytes: what is uploaded */
  kiln_digest_hex_t route;  /* of their normal form (base/mlir_text.h): the router's key, as for
                               explain, fetch and find, so every copy of a model meets one kilnd */
  uint64_t size;
  char **targets;
  size_t n_targets;
  kiln_cli_label_t *labels;
  size_t n_labels;
  char request_id[129]; /* kiln.proto: identifiers are at most 128 bytes */
  Kiln__V1__GetServerInfoResponse *info;
  Kiln__V1__CompileResponse *response;
  kiln_cli_job_t job;
} compile_t;

static void compile_deinit(compile_t *c) {
  if (c->file) fclose(c->file);
  kiln_free(c->inline_data);
  kiln_cli_strings_free(c->targets, c->n_targets);
  kiln_cli_labels_free(c->labels, c->n_labels);
  if (c->info) protobuf_c_message_free_unpacked(&c->info->base, NULL);
  if (c->response) protobuf_c_message_free_unpacked(&c->response->base, NULL);
  kiln_cli_job_deinit(&c->job);
}

static int64_t remaining_ms(const compile_t *c) {
  int64_t left = c->deadline_ms - kiln_time_monotonic_ms();
  return left > 1 ? left : 1;
}

static void set_timeout_capped(compile_t *c, int64_t cap_ms) {
  int64_t left = remaining_ms(c);
  kiln_client_set_timeout(c->client, left < cap_ms ? left : cap_ms);
}

/* Reads or hashes the source. Small regular files and stdin are held in memory
 * (stdin cannot be read twice); larger files are hashed now and streamed later. */
static int load_source(compile_t *c) {
  uint64_t max_source = c->info->max_source_bytes ? c->info->max_source_bytes : UINT64_MAX;
  uint64_t inline_max = INLINE_MAX;
  if (c->info->max_message_bytes > MESSAGE_HEADROOM &&
      c->info->max_message_bytes - MESSAGE_HEADROOM < inline_max) {
    inline_max = c->info->max_message_bytes - MESSAGE_HEADROOM;
  }
  kiln_status_t status = NULL;
  if (strcmp(c->path, "-") == 0) {
    c->name = "<stdin>";
    status = kiln_cli_read_all(stdin, "standard input", max_source, &c->inline_data, &c->inline_len);
    if (!status) {
      kiln_digest_t d;
      kiln_digest_of(c->inline_data, c->inline_len, &d);
      kiln_digest_to_hex(&d, &c->digest);
      c->size = c->inline_len;
      if (c->size > inline_max) {
        /* Too big to go inline: upload it from memory. */
        c->file = fmemopen(c->inline_data, c->inline_len, "rb");
        if (!c->file) status = KILN_CLI_LOCAL_ERRNO(errno, "cannot buffer standard input");
      }
    }
  } else {
    c->name = c->path;
    c->file = fopen(c->path, "rb");
    struct stat st;
    if (!c->file) {
      status = KILN_CLI_LOCAL_ERRNO(errno, "cannot open %s", c->path);
    } else if (fstat(fileno(c->file), &st) != 0 || !S_ISREG(st.st_mode)) {
      status =
          KILN_STATUS(KILN_STATUS_INVALID_ARGUMENT, "%s is not a regular file; name an MLIR file", c->path);
    } else if ((uint64_t)st.st_size <= inline_max) {
      status = kiln_cli_read_all(c->file, c->path, inline_max, &c->inline_data, &c->inline_len);
      if (!status) {
        kiln_digest_t d;
        kiln_digest_of(c->inline_data, c->inline_len, &d);
        kiln_digest_to_hex(&d, &c->digest);
        c->size = c->inline_len;
        fclose(c->file);
        c->file = NULL;
      }
    } else {
      status = kiln_cli_stream_digest(c->file, c->path, &c->digest, &c->size);
      if (!status && fseek(c->file, 0, SEEK_SET) != 0) {
        status = KILN_CLI_LOCAL_ERRNO(errno, "cannot rewind %s", c->path);
      }
    }
  }
  if (status) {
    fprintf(stderr, "kiln: compile: %s\n", kiln_status_message(status));
    kiln_status_free(status);
    return KILN_EXIT_USAGE;
  }
  if (c->size == 0) {
    fprintf(stderr, "kiln: compile: %s is empty; name an MLIR file (text or bytecode)\n", c->name);
    return KILN_EXIT_USAGE;
  }
  if (c->size > max_source) {
    fprintf(stderr, "kiln: compile: %s is %llu bytes; kilnd at %s accepts sources up to %llu bytes\n",
            c->name, (unsigned long long)c->size, c->settings->addr, (unsigned long long)max_source);
    return KILN_EXIT_FAILED;
  }
  if (c->inline_data) {
    kiln_mlir_text_digest(c->inline_data, c->inline_len, &c->route);
  } else {
    size_t len = 0;
    char *text = kiln_read_file(c->path, &len);
    if (text)
      kiln_mlir_text_digest(text, len, &c->route);
    else
      c->route = c->digest; /* it was readable a moment ago: route by its bytes */
    kiln_free(text);
  }
  return KILN_EXIT_OK;
}

static bool uploads(const compile_t *c) { return c->file != NULL; }

static int upload(compile_t *c) {
  if (fseek(c->file, 0, SEEK_SET) != 0) {
    fprintf(stderr, "kiln: compile: cannot rewind %s: %s\n", c->name, strerror(errno));
    return KILN_EXIT_FAILED;
  }
  set_timeout_capped(c, INT64_MAX);
  Kiln__V1__PutSourceResponse *resp = NULL;
  kiln_status_t status = kiln_cli_source_upload(c->client, c->file, c->digest.text, c->size,
                                                c->info->chunk_size_bytes, c->name, &resp);
  if (status && kiln_status_code(status) == KILN_STATUS_INVALID_ARGUMENT) {
    /* Not MLIR, or kilnd's limits: the input is wrong, as for an inline source. */
    fprintf(stderr, "kiln: compile: kilnd refused the source: %s\n", kiln_status_message(status));
    kiln_status_free(status);
    return KILN_EXIT_USAGE;
  }
  if (status) return kiln_cli_report(c->settings, "compile: upload", kiln_client_timeout(c->client), status);
  if (kiln_cli_show_mode(c->settings) != KILN_CLI_SHOW_NONE) {
    printf("source %s: %s (%llu bytes)\n", c->digest.text,
           resp->already_present ? "already on kilnd" : "uploaded", (unsigned long long)c->size);
  }
  protobuf_c_message_free_unpacked(&resp->base, NULL);
  return KILN_EXIT_OK;
}

static int submit(compile_t *c) {
  Kiln__V1__CompileRequest req = KILN__V1__COMPILE_REQUEST__INIT;
  if (uploads(c)) {
    req.input_case = KILN__V1__COMPILE_REQUEST__INPUT_SOURCE_DIGEST;
    req.source_digest = c->digest.text;
  } else {
    req.input_case = KILN__V1__COMPILE_REQUEST__INPUT_SOURCE;
    req.source.data = c->inline_data;
    req.source.len = c->inline_len;
  }
  req.source_name = (char *)c->name;
  req.targets = c->targets;
  req.n_targets = c->n_targets;
  req.flags = c->settings->flag.items;
  req.n_flags = c->settings->flag.count;
  req.priority = (Kiln__V1__Priority)kiln_cli_priority_value(c->settings->priority);
  req.request_id = c->request_id;
  Kiln__V1__CompileRequest__LabelsEntry *entries = kiln_calloc(c->n_labels + 1, sizeof *entries);
  Kiln__V1__CompileRequest__LabelsEntry **entry_ptrs = kiln_calloc(c->n_labels + 1, sizeof *entry_ptrs);
  for (size_t i = 0; i < c->n_labels; i++) {
    kiln__v1__compile_request__labels_entry__init(&entries[i]);
    entries[i].key = c->labels[i].key;
    entries[i].value = c->labels[i].value;
    entry_ptrs[i] = &entries[i];
  }
  req.labels = entry_ptrs;
  req.n_labels = c->n_labels;

  kiln_status_t status = NULL;
  bool reuploaded = false;
  for (int attempt = 1;; attempt++) {
    /* The Compile deadline is the job's deadline on kilnd: the whole budget. */
    set_timeout_capped(c, INT64_MAX);
    ProtobufCMessage *msg = NULL;
    status = kiln_client_unary(c->client, "/kiln.v1.Kiln/Compile", &req.base,
                               &kiln__v1__compile_response__descriptor, &msg);
    if (!status) {
      c->response = (Kiln__V1__CompileResponse *)msg;
      break;
    }
    kiln_status_code_t code = kiln_status_code(status);
    if (code == KILN_STATUS_NOT_FOUND && uploads(c) && !reuploaded) {
      /* Evicted between PutSource and Compile: upload again, once. */
      kiln_status_free(status);
      status = NULL;
      reuploaded = true;
      int rc = upload(c);
      if (rc) {
        kiln_free(entries);
        kiln_free(entry_ptrs);
        return rc;
      }
      continue;
    }
    if (code != KILN_STATUS_UNAVAILABLE || attempt >= COMPILE_TRIES || remaining_ms(c) < 2000 * attempt)
      break;
    /* Draining or briefly busy: the same request_id makes the retry safe. */
    kiln_status_free(status);
    status = NULL;
    struct timespec ts = {attempt, 0};
    nanosleep(&ts, NULL);
  }
  kiln_free(entries);
  kiln_free(entry_ptrs);
  if (status) {
    if (kiln_status_code(status) == KILN_STATUS_INVALID_ARGUMENT) {
      /* An unknown target, a refused flag, a bad label: the request is wrong. */
      fprintf(stderr, "kiln: compile: kilnd refused the request: %s\n", kiln_status_message(status));
      kiln_status_free(status);
      return KILN_EXIT_USAGE;
    }
    return kiln_cli_report(c->settings, "compile", kiln_client_timeout(c->client), status);
  }
  return KILN_EXIT_OK;
}

/* Whether the folder `dir` can be written, or made and written: the folder when
 * it exists, else its nearest existing ancestor. Makes nothing. */
static KILN_MUST_USE kiln_status_t check_writable(const char *dir) {
  char *p = kiln_strdup(dir);
  kiln_status_t status = NULL;
  for (;;) {
    struct stat st;
    if (stat(p, &st) == 0) {
      if (!S_ISDIR(st.st_mode)) {
        status = KILN_STATUS(KILN_STATUS_FAILED_PRECONDITION, "%s is not a folder", p);
      } else if (access(p, W_OK | X_OK) != 0) {
        status = KILN_CLI_LOCAL_ERRNO(errno, "cannot write in %s", p);
      }
      break;
    }
    if (errno != ENOENT || !strcmp(p, ".") || !strcmp(p, "/")) {
      status = KILN_CLI_LOCAL_ERRNO(errno, "cannot reach %s", p);
      break;
    }
    char *slash = strrchr(p, '/');
    while (slash && slash > p && slash[1] == '\0') { /* "a/b/": drop the trailing slash */
      *slash = '\0';
      slash = strrchr(p, '/');
    }
    if (!slash) {
      strcpy(p, "."); /* a relative name: the working folder */
    } else if (slash == p) {
      p[1] = '\0'; /* "/name": the root */
    } else {
      *slash = '\0';
    }
  }
  kiln_free(p);
  return status;
}

/* Fetches every target that is done into DIR; returns the worst exit code. With
 * `may_rebuild`, a download kilnd refuses with DATA_LOSS (its stored copy failed
 * its check; kilnd has quarantined it) is not reported: *out_rebuild is set, and
 * the caller compiles again, which rebuilds it. */
static int download_all(compile_t *c, const char *dir, kiln_cli_show_t show, bool may_rebuild,
                        bool *out_rebuild) {
  kiln_status_t status = kiln_cli_mkdirs(dir);
  if (status) {
    fprintf(stderr, "kiln: compile: %s\n", kiln_status_message(status));
    kiln_status_free(status);
    return KILN_EXIT_FAILED;
  }
  int worst = KILN_EXIT_OK;
  for (size_t i = 0; i < c->job.n_targets; i++) {
    kiln_cli_target_t *t = &c->job.targets[i];
    if (t->state != KILN_CLI_TARGET_DONE || !t->digest) continue;
    kiln_buf_t file, path;
    kiln_buf_init(&file);
    kiln_buf_init(&path);
    kiln_buf_appendf(&file, "%s.vmfb", t->name);
    kiln_buf_appendf(&path, "%s/%s", dir, file.data);
    int64_t left = remaining_ms(c);
    kiln_client_set_timeout(c->client, left > DOWNLOAD_MIN_MS ? left : DOWNLOAD_MIN_MS);
    kiln_cli_artifact_ref_t ref = {t->digest, NULL, NULL, NULL, 0};
    Kiln__V1__ArtifactChunk *meta = NULL;
    status = kiln_cli_artifact_download(c->client, &ref, path.data, &meta, NULL, NULL);
    if (status && may_rebuild && kiln_status_code(status) == KILN_STATUS_DATA_LOSS) {
      fprintf(stderr,
              "kiln: compile: kilnd's stored %s was corrupt (%s); kilnd quarantined it, compiling it again\n",
              t->name, kiln_status_message(status));
      kiln_status_free(status);
      *out_rebuild = true;
    } else if (status) {
      kiln_buf_t what;
      kiln_buf_init(&what);
      kiln_buf_appendf(&what, "compile: fetching %s (%s)", t->name, t->digest);
      int rc = kiln_cli_report(c->settings, what.data, kiln_client_timeout(c->client), status);
      kiln_buf_deinit(&what);
      if (worst == KILN_EXIT_OK || rc > worst) worst = rc;
    } else {
      kiln_free(t->file);
      t->file = kiln_buf_take(&file);
      if (meta && meta->metadata) t->size_bytes = meta->metadata->size_bytes;
      if (show == KILN_CLI_SHOW_PLAIN || show == KILN_CLI_SHOW_LIVE) {
        printf("%s: wrote %s (%llu bytes)\n", t->name, path.data, (unsigned long long)t->size_bytes);
      }
    }
    if (meta) protobuf_c_message_free_unpacked(&meta->base, NULL);
    kiln_buf_deinit(&file);
    kiln_buf_deinit(&path);
  }
  return worst;
}

static int write_manifest(compile_t *c, const char *dir) {
  json_object *manifest = kiln_cli_job_manifest(&c->job);
  const char *text = json_object_to_json_string_ext(
      manifest, JSON_C_TO_STRING_PRETTY | JSON_C_TO_STRING_SPACED | JSON_C_TO_STRING_NOSLASHESCAPE);
  kiln_buf_t body, path;
  kiln_buf_init(&body);
  kiln_buf_init(&path);
  kiln_buf_appendf(&body, "%s\n", text);
  kiln_buf_appendf(&path, "%s/%s", dir, MANIFEST_NAME);
  kiln_status_t status = kiln_cli_write_atomic(path.data, body.data, body.len);
  int rc = KILN_EXIT_OK;
  if (status) {
    fprintf(stderr, "kiln: compile: %s\n", kiln_status_message(status));
    kiln_status_free(status);
    rc = KILN_EXIT_FAILED;
  } else if (c->settings->json) {
    fputs(body.data, stdout);
  }
  kiln_buf_deinit(&body);
  kiln_buf_deinit(&path);
  json_object_put(manifest);
  return rc;
}

int kiln_cli_compile(const kiln_cli_settings_t *settings, kiln_client_t *client, int argc,
                     const char **argv) {
  int rc = kiln_cli_expect_args("compile", argc, 1, 1, usage);
  if (rc) return rc;
  compile_t c;
  memset(&c, 0, sizeof c);
  c.settings = settings;
  c.client = client;
  c.path = argv[0];
  c.deadline_ms = kiln_time_monotonic_ms() + kiln_cli_timeout_or(settings, KILN_CLI_COMPILE_TIMEOUT_MS);
  kiln_cli_job_init(&c.job, NULL);
  kiln_cli_targets_split(&settings->target, &c.targets, &c.n_targets);
  if (c.n_targets == 0) {
    fprintf(stderr,
            "kiln: compile: no target: pass --target with one or more of the targets "
            "`kiln info` lists, e.g. --target sm_89,gfx950\nusage: kiln %s\n",
            usage);
    compile_deinit(&c);
    return KILN_EXIT_USAGE;
  }
  kiln_status_t status = kiln_cli_labels_parse(&settings->label, &c.labels, &c.n_labels);
  if (status) {
    fprintf(stderr, "kiln: compile: %s\n", kiln_status_message(status));
    kiln_status_free(status);
    compile_deinit(&c);
    return KILN_EXIT_USAGE;
  }
  if (settings->request_id && *settings->request_id) {
    snprintf(c.request_id, sizeof c.request_id, "%s", settings->request_id);
    if (strlen(settings->request_id) >= sizeof c.request_id) {
      fprintf(stderr, "kiln: compile: --request-id is longer than 128 bytes\n");
      compile_deinit(&c);
      return KILN_EXIT_USAGE;
    }
  } else {
    kiln_cli_uuid(c.request_id);
  }
  const char *dir = settings->output && *settings->output ? settings->output : ".";
  kiln_cli_show_t show = kiln_cli_show_mode(settings);
  /* The output folder first: a compile whose results cannot be written is not
   * worth sending (it failed after the compile, then again on the manifest).
   * Nothing is made yet: a refused compile leaves no folder behind. */
  status = check_writable(dir);
  if (status) {
    fprintf(stderr, "kiln: compile: -o %s: %s\n", dir, kiln_status_message(status));
    kiln_status_free(status);
    compile_deinit(&c);
    return KILN_EXIT_FAILED;
  }

  set_timeout_capped(&c, INFO_TIMEOUT_MS);
  Kiln__V1__GetServerInfoRequest info_req = KILN__V1__GET_SERVER_INFO_REQUEST__INIT;
  ProtobufCMessage *info = NULL;
  rc = kiln_cli_call(settings, client, "compile", "/kiln.v1.Kiln/GetServerInfo", &info_req.base,
                     &kiln__v1__get_server_info_response__descriptor, &info);
  if (rc) goto done;
  c.info = (Kiln__V1__GetServerInfoResponse *)info;
  if ((rc = load_source(&c))) goto done;
  /* Every later call is about this model: behind a router that hashes on it
   * (deploy/haproxy), upload, compile, watch and downloads meet one kilnd. */
  kiln_client_set_route(client, c.route.text);
  if (uploads(&c) && (rc = upload(&c))) goto done;
  for (int round = 0;; round++) {
    kiln_cli_interrupts_catch(true); /* from here an interrupt cancels the job */
    if ((rc = submit(&c))) goto done;

    kiln_cli_job_admit(&c.job, c.response);
    if (show != KILN_CLI_SHOW_NONE) {
      size_t cached = kiln_cli_job_count(&c.job, KILN_CLI_TARGET_DONE);
      printf("job %s: %zu target(s)", c.job.job_id ? c.job.job_id : "?", c.job.n_targets);
      if (cached) printf(", %zu cached", cached);
      printf(" (source %s)\n", c.digest.text);
      fflush(stdout);
    }
    if (!kiln_cli_job_finished(&c.job)) {
      kiln_client_set_timeout(client, remaining_ms(&c) + WATCH_GRACE_MS);
      rc = kiln_cli_job_follow(settings, client, &c.job, true, show, true, "compile: watching the job");
      if (rc) goto done;
    }
    kiln_cli_interrupts_catch(false); /* the job is over: an interrupt now just stops us */
    if (kiln_cli_interrupted()) {
      fprintf(stderr, "kiln: compile: interrupted; job %s had already finished\n",
              c.job.job_id ? c.job.job_id : "?");
      rc = KILN_EXIT_FAILED;
      goto done;
    }
    bool rebuild = false;
    rc = download_all(&c, dir, show, round == 0, &rebuild);
    if (rebuild && !rc) {
      /* The same request under a new id: kilnd compiles what it quarantined and
       * answers the rest from its cache; the build does not fail on a bad copy. */
      kiln_cli_uuid(c.request_id);
      protobuf_c_message_free_unpacked(&c.response->base, NULL);
      c.response = NULL;
      kiln_cli_job_deinit(&c.job);
      kiln_cli_job_init(&c.job, NULL);
      continue;
    }
    break;
  }
  int manifest_rc = write_manifest(&c, dir);
  if (!rc) rc = manifest_rc;
  if (!rc && c.job.state != KILN__V1__JOB_STATE__JOB_STATE_DONE) {
    fprintf(stderr, "kiln: compile: job %s %s: %s\n", c.job.job_id ? c.job.job_id : "?",
            kiln_cli_job_state_name(c.job.state),
            c.job.message && *c.job.message ? c.job.message : "see the messages above");
    rc = KILN_EXIT_FAILED;
    for (size_t i = 0; i < c.job.n_targets; i++) {
      if (c.job.targets[i].state == KILN_CLI_TARGET_FAILED &&
          c.job.targets[i].code == KILN_STATUS_DEADLINE_EXCEEDED && c.job.targets[i].message &&
          strstr(c.job.targets[i].message, "task timeout")) {
        /* kilnd's own limit on one compile (worker-timeout), not --timeout. */
        fprintf(stderr,
                "kiln: compile: kilnd stopped the compile at its worker-timeout; its operator can raise "
                "it (kilnd --worker-timeout)\n");
        rc = KILN_EXIT_TIMEOUT;
        break;
      }
      if (c.job.targets[i].state == KILN_CLI_TARGET_FAILED &&
          c.job.targets[i].code == KILN_STATUS_DEADLINE_EXCEEDED) {
        /* kilnd stopped the job at the deadline --timeout gave it. */
        fprintf(stderr, "kiln: compile: it ran past --timeout (%lld ms); raise --timeout?\n",
                (long long)kiln_cli_timeout_or(settings, KILN_CLI_COMPILE_TIMEOUT_MS));
        rc = KILN_EXIT_TIMEOUT;
        break;
      }
    }
  }
done:
  kiln_cli_interrupts_catch(false);
  compile_deinit(&c);
  return rc;
}
