/* `kiln recompile PATH... [-o DIR | --in-place [--backup]] [--manifest FILE]
 *  [--jobs N] [--dry-run] [--force] [--priority CLASS] [--label K=V]...`
 *
 * Bulk recompile of a fleet of legacy VMFBs, on one Recompile bidi stream:
 *
 *   1. Checks the arguments and the manifest (usage errors, exit 2, before
 *      anything is sent), then walks PATHs as `kiln scan` does.
 *   2. For each file in order: reads and classifies it locally. Invalid: reported,
 *      never sent. Current: skipped unless --force. Its output already there, a
 *      current VMFB not older than the file: `done` (a resumed run redoes nothing
 *      finished). Otherwise it becomes an item on the stream (opened with the first
 *      one, after GetServerInfo and a RecompileOptions message), its id the file's
 *      index.
 *   3. At most --jobs items are unanswered at a time (the client's window); at the
 *      cap it reads results. Writes never block the reads: a write that waits for
 *      flow control is polled in slices while results are read (rpc.h).
 *   4. Each result (completion order) is applied at once: its artifacts are written
 *      to the file's output. Each artifact digest is fetched from kilnd once
 *      (GetArtifact, verified, atomic); any other file with the same artifact gets
 *      a local copy of the first one (copy_file_range), so a fleet of copies costs
 *      one fetch per unique (source, target, flags).
 *   5. After the last file: `done`, the half-close, and results to the end.
 *   6. A call that kilnd could not finish is made again (a drain, a restart, a
 *      lost connection): see "Another call" below.
 *
 * Item contents. The VMFB goes inline when it fits a message (kilnd's
 * max_message_bytes less MESSAGE_HEADROOM and any inline source); kilnd then
 * finds the source itself (provenance in its index, kiln.source.sha256 naming a
 * stored source, the embedded one). A larger one is named by vmfb_digest (kilnd
 * knows the VMFBs it built) and, when it embeds its source, that source is
 * extracted here and uploaded with PutSource (once per digest); its targets and
 * flags come from the file's kiln.target and kiln.flags. A manifest entry's source
 * is sent inline (up to INLINE_SOURCE_MAX) or uploaded, with the entry's targets,
 * and its flags replacing the recorded ones.
 *
 * Outputs. -o DIR mirrors each file's path relative to the PATH argument it was
 * found under (a file argument: DIR/<basename>); --in-place replaces the file
 * (--backup first keeps FILE.bak, never overwriting an older one); neither:
 * NAME.hal7.vmfb beside NAME.vmfb. A result with several targets writes
 * NAME.<target>.vmfb per target instead (an --in-place file then stays). Every
 * write is atomic (temp file beside it, fsync, rename); a write that fails fails
 * that file only.
 *
 * Another call. kilnd draining (SIGTERM: it ends the jobs of unfinished items
 * and refuses new ones with UNAVAILABLE results; a call still open at
 * drain-timeout is cancelled), killed, restarting or out of reach says
 * UNAVAILABLE, and only that is worth a new call: every other code
 * (INVALID_ARGUMENT, PERMISSION_DENIED, RESOURCE_EXHAUSTED, DEADLINE_EXCEEDED,
 * ...) would come back the same. Once a Recompile call has been opened in this
 * run (a kilnd unreachable from the start fails at once, as every command), a
 * call that ends UNAVAILABLE, or that left files failed because kilnd went away
 * (their item's result UNAVAILABLE, or the fetch of their artifact UNAVAILABLE,
 * or CANCELLED: a stopping kilnd cuts a download off so, and this client
 * cancels none), is followed by another after a wait: RETRY_BASE_MS, doubled
 * for each further call in a row that finished no file; after CALL_ATTEMPTS
 * such calls the run ends as one failed call does. Between calls (call_reset):
 * the stream, its status, the window and the GetServerInfo answer go (the next
 * call may reach another kilnd behind a router: its limits, and none of the
 * sources uploaded to the last one, so uploads start afresh); files SENT
 * without a result and files failed because kilnd went away go back to PENDING
 * with all their last call said (file_requeue), and are sent again after a new
 * options message. What stays: finished files, the outputs written (whole
 * files), the artifacts known to be on disk. Before each new call the gRPC
 * channel's reconnect backoff is reset and the call waits up to 1 s for a
 * connection (kiln_client_reconnect_now), so a kilnd back on the same address
 * is found at the next attempt, not at the channel's own next try.
 *
 * A file's outcome: PENDING -> SENT -> one of RECOMPILED, CACHED, CURRENT,
 * NO_SOURCE, FAILED (WOULD_RECOMPILE in a dry run); or at once CURRENT, DONE,
 * INVALID, FAILED (no output possible). SENT, and FAILED because kilnd went
 * away (f->retry), go back to PENDING when another call is made. Files an
 * interrupt or a failed call left behind end NOT_PROCESSED. Exit 0 when every
 * file ended recompiled, cached, current or done (would_recompile in a dry run);
 * 8 when any failed, had no source or was invalid; 130 after SIGINT/SIGTERM (the
 * stream is cancelled, what was written stays, the partial report is printed); a
 * failed call as every command (3 unreachable, 4 deadline, 1 otherwise); 2 for
 * usage.
 */
#include <errno.h>
#include <json-c/json.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "base/alloc.h"
#include "base/buf.h"
#include "base/time.h"
#include "client/cli.h"
#include "client/diagnostic.h"
#include "client/job.h"
#include "client/json.h"
#include "client/source_map.h"
#include "client/transfer.h"
#include "kiln/v1/kiln.pb-c.h"

/* Files sent and not yet answered. Large, because copies of one (source, target)
 * wait on its one compile: a window of 64 filled with copies of the first pair
 * would hide the next pairs from kilnd until that compile ended, and they could
 * neither run on other workers nor fuse with it. kilnd bounds its own memory. */
#define DEFAULT_JOBS        1024
#define INLINE_SOURCE_MAX   (1u << 20)
#define MESSAGE_HEADROOM    (64u << 10) /* the rest of a RecompileRequest besides the bytes */
#define DEFAULT_MAX_MESSAGE (4u << 20)  /* gRPC's default, when kilnd does not say */
#define INFO_TIMEOUT_MS     10000
#define READ_SLICE_MS       100 /* a wait for results, between interrupt checks */
#define WRITE_SLICE_MS      20  /* a wait for a write, between reads */
#define REDRAW_EVERY_MS     100
#define OUTPUT_SUFFIX       ".hal7.vmfb"
/* A first call and 5 more in a row that finish no file; waits of 0.5, 1, 2, 4, 8 s
 * between them. A kilnd behind a router drains and restarts within that. */
#define CALL_ATTEMPTS 6
#define RETRY_BASE_MS 500
/* For tests only: the first wait in milliseconds instead of RETRY_BASE_MS. */
#define RETRY_BASE_ENV    "KILN_RETRY_BASE_MS"
#define RETRY_BASE_MAX_MS 60000

static const char usage[] =
    "recompile PATH... [-o DIR | --in-place [--backup]] [--manifest FILE] [--jobs N] [--dry-run] "
    "[--force] [--priority CLASS] [--label K=V]... [--json]";

typedef enum outcome_e {
  OUTCOME_PENDING,
  OUTCOME_SENT,
  OUTCOME_RECOMPILED,
  OUTCOME_CACHED,
  OUTCOME_CURRENT,
  OUTCOME_DONE,
  OUTCOME_NO_SOURCE,
  OUTCOME_FAILED,
  OUTCOME_INVALID,
  OUTCOME_WOULD_RECOMPILE,
  OUTCOME_NOT_PROCESSED,
  OUTCOME_COUNT
} outcome_t;

static const char *const outcome_names[OUTCOME_COUNT] = {
    "pending",   "sent",   "recompiled", "cached",          "current",      "done",
    "no_source", "failed", "invalid",    "would_recompile", "not_processed"};

/* One target of a result, and where its artifact went. */
typedef struct target_s {
  char *target;
  char *digest; /* "" when it failed */
  uint64_t size;
  bool cache_hit;
  int code;
  char *message;
  char *output; /* written here; NULL when not */
} target_t;

typedef struct file_s {
  char *path;
  int arg;
  bool classified;
  kiln_vmfb_class_t cls;
  outcome_t outcome;
  int code; /* gRPC code of a failure */
  char *reason;
  char *output;                                 /* the planned output; NULL when none can be */
  char *target_desc;                            /* what the file says it was built for */
  char digest[KILN_DIGEST_HEX_LEN + 1];         /* of the file; "" before it is read */
  char *legacy_digest, *source_digest, *job_id; /* kilnd's */
  bool attr_source; /* the item named the source by the file's kiln.source.sha256 */
  bool digest_only; /* too large to send, and no source here: named by vmfb_digest */
  bool retry;       /* FAILED because kilnd went away: another call may still finish it */
  bool was_sent;    /* sent on some call (PENDING again: on one that ended without its result) */
  uint64_t size;
  target_t *targets;
  size_t n_targets;
  struct timespec mtime;
  dev_t dev;
  ino_t ino;
} file_t;

/* A local file known to hold an artifact's bytes. */
typedef struct known_s {
  char *digest;
  char *path;
} known_t;

typedef struct recompile_s {
  const kiln_cli_settings_t *settings;
  kiln_client_t *client;
  const char **argv;
  file_t *files;
  size_t n_files;
  kiln_cli_source_map_t map;
  bool have_map;
  kiln_cli_label_t *labels;
  size_t n_labels;
  size_t window; /* --jobs: items sent and not yet answered, at most */
  /* Per call (call_reset clears them for the next one). */
  Kiln__V1__GetServerInfoResponse *info;
  kiln_client_stream_t *stream;
  bool stream_over;          /* a read returned the end */
  kiln_status_t call_status; /* why the call failed; owned */
  size_t in_flight;
  bool unavailable; /* kilnd went away for a file (retry): send no more on this call */
  size_t finished;  /* files this call finished (not counting retry ones) */
  char **uploaded;  /* sources PutSource gave the kilnd of this call */
  size_t n_uploaded;
  /* The run. */
  bool opened; /* a Recompile call was opened: an UNAVAILABLE end may be retried */
  int64_t retry_base_ms;
  known_t *known;
  size_t n_known, cap_known;
  char *last_dir; /* the output directory made last */
  char *out_root; /* -o DIR, resolved: outputs go nowhere else (NULL: --in-place) */
  size_t counts[OUTCOME_COUNT];
  size_t seen, legacy;
  size_t fetched, copied;
  uint64_t bytes_written;
  int64_t start_ms;
  bool progress;
  size_t bar_lines;
  int64_t drawn_ms;
  bool interrupted;
} recompile_t;

static char *dup_or_null(const char *s) { return s && *s ? kiln_strdup(s) : NULL; }

static void set_outcome(recompile_t *r, file_t *f, outcome_t o) {
  r->counts[f->outcome]--;
  f->outcome = o;
  r->counts[o]++;
}

static void set_reason(file_t *f, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void set_reason(file_t *f, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  char *reason = kiln_buf_vsprintf(fmt, ap);
  va_end(ap);
  kiln_free(f->reason);
  f->reason = reason;
}

/* Ends a file with `o`, its reason taken from `status` (freed). */
static void fail_with(recompile_t *r, file_t *f, outcome_t o, kiln_status_t status, const char *what) {
  f->code = (int)kiln_status_code(status);
  set_reason(f, "%s%s%s", what ? what : "", what ? ": " : "", kiln_status_message(status));
  kiln_status_free(status);
  set_outcome(r, f, o);
}

/* ---- progress ------------------------------------------------------------ */

static void progress_text(const recompile_t *r, kiln_buf_t *out) {
  size_t finished = r->n_files - r->counts[OUTCOME_PENDING] - r->counts[OUTCOME_SENT];
  double secs = (double)(kiln_time_monotonic_ms() - r->start_ms) / 1000.0;
  double rate = secs > 0.05 ? (double)finished / secs : 0.0;
  kiln_buf_appendf(out, "%zu/%zu files, %zu legacy: %zu %s, %zu cached, %zu failed | %.1f/s", r->seen,
                   r->n_files, r->legacy, r->counts[OUTCOME_RECOMPILED] + r->counts[OUTCOME_WOULD_RECOMPILE],
                   r->settings->dry_run ? "would recompile" : "recompiled", r->counts[OUTCOME_CACHED],
                   r->counts[OUTCOME_FAILED] + r->counts[OUTCOME_NO_SOURCE] + r->counts[OUTCOME_INVALID],
                   rate);
  if (rate > 0 && finished < r->n_files) {
    long eta = (long)((double)(r->n_files - finished) / rate + 0.5);
    kiln_buf_appendf(out, " ETA %ld:%02ld", eta / 60, eta % 60);
  }
}

/* Redraws the progress line on stderr (a terminal only), at most every
 * REDRAW_EVERY_MS unless `force`. */
static void progress_draw(recompile_t *r, bool force) {
  if (!r->progress || (!force && kiln_time_monotonic_ms() - r->drawn_ms < REDRAW_EVERY_MS)) return;
  kiln_buf_t text, out;
  kiln_buf_init(&text);
  kiln_buf_init(&out);
  progress_text(r, &text);
  size_t width = kiln_cli_terminal_width(STDERR_FILENO);
  if (text.len > width) text.data[width] = '\0';
  kiln_cli_live_erase(r->bar_lines, &out);
  kiln_buf_appendf(&out, "%s\n", text.data);
  fputs(out.data, stderr);
  fflush(stderr);
  r->bar_lines = 1;
  r->drawn_ms = kiln_time_monotonic_ms();
  kiln_buf_deinit(&text);
  kiln_buf_deinit(&out);
}

static void progress_clear(recompile_t *r) {
  if (!r->progress || !r->bar_lines) return;
  kiln_cli_live_clear(stderr, r->bar_lines);
  r->bar_lines = 0;
}

/* ---- outputs ------------------------------------------------------------- */

static bool ends_with(const char *s, const char *suffix) {
  size_t n = strlen(s), m = strlen(suffix);
  return n >= m && strcmp(s + n - m, suffix) == 0;
}

/* `path` without a ".vmfb" suffix, then `insert`, then ".vmfb". */
static char *with_suffix(const char *path, const char *insert) {
  size_t n = strlen(path);
  if (ends_with(path, ".vmfb")) n -= 5;
  kiln_buf_t b;
  kiln_buf_init(&b);
  kiln_buf_append(&b, path, n);
  kiln_buf_appendf(&b, "%s.vmfb", insert);
  return kiln_buf_take(&b);
}

/* The output of one target when a result has several: NAME.<target>.vmfb. */
static char *target_output(const char *output, const char *target) {
  kiln_buf_t t;
  kiln_buf_init(&t);
  kiln_buf_append_char(&t, '.');
  for (const char *p = target; *p; p++) kiln_buf_append_char(&t, *p == '/' ? '_' : *p);
  char *out = with_suffix(output, t.data);
  kiln_buf_deinit(&t);
  return out;
}

static char *plan_output(const recompile_t *r, const file_t *f) {
  const kiln_cli_settings_t *s = r->settings;
  if (s->in_place) return kiln_strdup(f->path);
  if (s->output && *s->output) {
    const char *arg = r->argv[f->arg];
    const char *rel;
    if (strcmp(f->path, arg) == 0) {
      /* A file argument: DIR/<basename>. */
      const char *slash = strrchr(f->path, '/');
      rel = slash ? slash + 1 : f->path;
    } else {
      rel = f->path + strlen(arg);
    }
    while (*rel == '/') rel++;
    kiln_buf_t b;
    kiln_buf_init(&b);
    kiln_buf_append_str(&b, s->output);
    if (!ends_with(s->output, "/")) kiln_buf_append_char(&b, '/');
    kiln_buf_append_str(&b, rel);
    return kiln_buf_take(&b);
  }
  return with_suffix(f->path, ".hal7");
}

typedef struct planned_s {
  const char *output;
  size_t index;
} planned_t;

static int by_output(const void *a, const void *b) {
  const planned_t *x = a, *y = b;
  int c = strcmp(x->output, y->output);
  return c ? c : (x->index < y->index ? -1 : x->index > y->index);
}

/* Plans every file's output; a later file whose output another already has, or
 * (without --in-place) whose output is the file itself, can have none. */
static void plan_outputs(recompile_t *r) {
  planned_t *p = kiln_calloc(r->n_files ? r->n_files : 1, sizeof *p);
  for (size_t i = 0; i < r->n_files; i++) {
    r->files[i].output = plan_output(r, &r->files[i]);
    p[i] = (planned_t){r->files[i].output, i};
  }
  qsort(p, r->n_files, sizeof *p, by_output);
  bool *clash = kiln_calloc(r->n_files ? r->n_files : 1, sizeof *clash);
  for (size_t i = 1, first = 0; i < r->n_files; i++) {
    if (strcmp(p[i].output, p[first].output) != 0) {
      first = i;
      continue;
    }
    file_t *f = &r->files[p[i].index];
    set_reason(f, "its output %s is also the output of %s; recompile them with different -o runs", f->output,
               r->files[p[first].index].path);
    clash[p[i].index] = true;
  }
  for (size_t i = 0; i < r->n_files; i++) {
    if (!clash[i]) continue;
    kiln_free(r->files[i].output);
    r->files[i].output = NULL;
  }
  kiln_free(clash);
  for (size_t i = 0; i < r->n_files; i++) {
    file_t *f = &r->files[i];
    if (f->output && !r->settings->in_place && strcmp(f->output, f->path) == 0) {
      set_reason(f, "its output would be the file itself; pass --in-place to replace files");
      kiln_free(f->output);
      f->output = NULL;
    }
  }
  kiln_free(p);
}

static bool newer_or_same(const struct timespec *a, const struct timespec *b) {
  return a->tv_sec > b->tv_sec || (a->tv_sec == b->tv_sec && a->tv_nsec >= b->tv_nsec);
}

/* True when `out` is a current VMFB not older than the file: it was recompiled
 * by an earlier run. */
static bool output_current(const file_t *f, const char *out) {
  struct stat st;
  if (stat(out, &st) != 0 || !S_ISREG(st.st_mode) || !newer_or_same(&st.st_mtim, &f->mtime)) return false;
  uint8_t *data = NULL;
  size_t len = 0;
  kiln_vmfb_info_t info;
  kiln_cli_vmfb_load(out, &data, &len, &info);
  bool current = info.cls == KILN_VMFB_CLASS_CURRENT;
  kiln_vmfb_info_deinit(&info);
  kiln_free(data);
  return current;
}

/* Resume: every output the file would get is already there. */
static bool already_done(const recompile_t *r, const file_t *f, const kiln_cli_source_entry_t *entry) {
  if (r->settings->in_place || !f->output) return false;
  if (entry && entry->n_targets > 1) {
    for (size_t i = 0; i < entry->n_targets; i++) {
      char *out = target_output(f->output, entry->targets[i]);
      bool ok = output_current(f, out);
      kiln_free(out);
      if (!ok) return false;
    }
    return true;
  }
  return output_current(f, f->output);
}

static const char *known_path(const recompile_t *r, const char *digest) {
  for (size_t i = 0; i < r->n_known; i++) {
    if (strcmp(r->known[i].digest, digest) == 0) return r->known[i].path;
  }
  return NULL;
}

static void known_add(recompile_t *r, const char *digest, const char *path) {
  if (known_path(r, digest)) return;
  if (r->n_known == r->cap_known) {
    r->cap_known = r->cap_known ? r->cap_known * 2 : 64;
    r->known = kiln_realloc(r->known, r->cap_known * sizeof *r->known);
  }
  r->known[r->n_known++] = (known_t){kiln_strdup(digest), kiln_strdup(path)};
}

/* Creates the directory `path` goes in (outputs come in runs per directory: the
 * last one made is remembered). */
static KILN_MUST_USE kiln_status_t parent_dirs(recompile_t *r, const char *path) {
  const char *slash = strrchr(path, '/');
  if (!slash || slash == path) return NULL;
  size_t n = (size_t)(slash - path);
  if (r->last_dir && strlen(r->last_dir) == n && memcmp(r->last_dir, path, n) == 0) return NULL;
  char *dir = kiln_malloc(n + 1);
  memcpy(dir, path, n);
  dir[n] = '\0';
  kiln_status_t status = kiln_cli_mkdirs(dir);
  if (!status && r->out_root) {
    /* A folder of the tree (or -o DIR's own content) may be a symlink out of it:
     * never written through. */
    char *real = realpath(dir, NULL);
    size_t root = strlen(r->out_root);
    if (!real || strncmp(real, r->out_root, root) != 0 || (real[root] != '/' && real[root] != '\0')) {
      status =
          KILN_STATUS(KILN_STATUS_PERMISSION_DENIED,
                      "the output folder %s resolves to %s, outside -o %s: not written through a symlink",
                      dir, real ? real : "?", r->out_root);
    }
    free(real);
  }
  kiln_free(r->last_dir);
  r->last_dir = status ? NULL : dir;
  if (status) kiln_free(dir);
  return status;
}

/* Puts artifact `digest` at `out`: nothing to do when `out` is the file itself and
 * holds it; a local copy when some file already holds it; else one GetArtifact. */
static KILN_MUST_USE kiln_status_t materialize(recompile_t *r, const file_t *f, const char *digest,
                                               const char *out) {
  if (strcmp(digest, f->digest) == 0 && strcmp(out, f->path) == 0) return NULL;
  kiln_status_t status = parent_dirs(r, out);
  if (status) return status;
  const char *have = strcmp(digest, f->digest) == 0 ? f->path : known_path(r, digest);
  if (have && strcmp(have, out) != 0) {
    status = kiln_cli_copy_atomic(have, out);
    if (!status) {
      r->copied++;
      known_add(r, digest, out);
      return NULL;
    }
    /* The earlier file was moved or damaged meanwhile: fetch instead. */
    kiln_status_free(status);
  }
  kiln_client_set_timeout(r->client, kiln_cli_timeout_ms(r->settings, true));
  kiln_cli_artifact_ref_t ref = {digest, NULL, NULL, NULL, 0};
  status = kiln_cli_artifact_download(r->client, &ref, out, NULL, NULL, NULL);
  if (!status) {
    r->fetched++;
    known_add(r, digest, out);
  }
  return status;
}

/* Writes every artifact of a finished result. */
static void write_outputs(recompile_t *r, file_t *f) {
  size_t with_artifact = 0;
  for (size_t i = 0; i < f->n_targets; i++) with_artifact += f->targets[i].digest && f->targets[i].code == 0;
  if (with_artifact == 0) {
    f->code = KILN_STATUS_INTERNAL;
    set_reason(f, "kilnd reported %s without an artifact (kilnd bug?)", outcome_names[f->outcome]);
    set_outcome(r, f, OUTCOME_FAILED);
    return;
  }
  if (!f->output) {
    f->code = KILN_STATUS_FAILED_PRECONDITION;
    set_outcome(r, f, OUTCOME_FAILED);
    return;
  }
  if (r->settings->in_place && r->settings->backup && with_artifact == 1) {
    kiln_buf_t bak;
    kiln_buf_init(&bak);
    kiln_buf_appendf(&bak, "%s.bak", f->path);
    kiln_status_t status = kiln_cli_backup_keep(f->path, bak.data);
    kiln_buf_deinit(&bak);
    if (status) {
      fail_with(r, f, OUTCOME_FAILED, status, "keeping the old file (--backup), so it was not replaced");
      return;
    }
  }
  for (size_t i = 0; i < f->n_targets; i++) {
    target_t *t = &f->targets[i];
    if (!t->digest || t->code != 0) continue;
    char *out = with_artifact > 1 ? target_output(f->output, t->target) : kiln_strdup(f->output);
    kiln_status_t status = materialize(r, f, t->digest, out);
    if (status) {
      /* kilnd went away while the artifact was fetched: UNAVAILABLE, or CANCELLED
       * when a stopping kilnd cut the download (this client cancels none). The
       * artifact is in its cache; another call answers the file again. */
      kiln_status_code_t code = kiln_status_code(status);
      if (code == KILN_STATUS_UNAVAILABLE || code == KILN_STATUS_CANCELLED) f->retry = true;
      kiln_buf_t what;
      kiln_buf_init(&what);
      kiln_buf_appendf(&what, "recompiled (%s), but writing %s failed", t->digest, out);
      fail_with(r, f, OUTCOME_FAILED, status, what.data);
      kiln_buf_deinit(&what);
      kiln_free(out);
      continue;
    }
    r->bytes_written += t->size;
    t->output = out;
  }
}

/* ---- results ------------------------------------------------------------- */

/* The most an item's bytes (VMFB and inline source) may take. */
static uint64_t message_budget(const recompile_t *r) {
  uint64_t max = r->info && r->info->max_message_bytes ? r->info->max_message_bytes : DEFAULT_MAX_MESSAGE;
  return max > MESSAGE_HEADROOM ? max - MESSAGE_HEADROOM : 0;
}

static void take_result(recompile_t *r, const Kiln__V1__RecompileItemResult *res) {
  char *end = NULL;
  errno = 0;
  unsigned long long index = strtoull(res->item_id ? res->item_id : "", &end, 10);
  if (!res->item_id || !*res->item_id || *end || errno || index >= r->n_files ||
      r->files[index].outcome != OUTCOME_SENT) {
    progress_clear(r);
    fprintf(stderr,
            "kiln: recompile: kilnd answered item '%s', which is not waiting for an answer (ignored)\n",
            res->item_id ? res->item_id : "");
    return;
  }
  file_t *f = &r->files[index];
  r->in_flight--;
  f->code = res->code;
  f->legacy_digest = dup_or_null(res->legacy_digest);
  f->source_digest = dup_or_null(res->source_digest);
  f->job_id = dup_or_null(res->job_id);
  f->targets = kiln_calloc(res->n_targets ? res->n_targets : 1, sizeof *f->targets);
  f->n_targets = res->n_targets;
  for (size_t i = 0; i < res->n_targets; i++) {
    const Kiln__V1__RecompiledTarget *t = res->targets[i];
    target_t *o = &f->targets[i];
    o->target = kiln_strdup(t->canonical_target && *t->canonical_target ? t->canonical_target
                            : t->target                                 ? t->target
                                                                        : "");
    o->digest = dup_or_null(t->artifact_digest);
    o->size = t->size_bytes;
    o->cache_hit = t->cache_hit;
    o->code = t->code;
    o->message = dup_or_null(t->message);
  }
  kiln_buf_t why;
  kiln_buf_init(&why);
  if (res->message && *res->message) kiln_buf_append_str(&why, res->message);
  for (size_t i = 0; i < res->n_targets && !why.len; i++) {
    if (res->targets[i]->code && res->targets[i]->message) {
      kiln_buf_appendf(&why, "%s: %s", f->targets[i].target, res->targets[i]->message);
    }
  }
  if (res->n_diagnostics) {
    /* The first diagnostic says where; the rest are in the job's log. */
    kiln_buf_t d;
    kiln_buf_init(&d);
    kiln_cli_diagnostic_format(res->diagnostics[0], &d);
    char *nl = d.data ? strchr(d.data, '\n') : NULL;
    if (nl) *nl = '\0';
    if (d.len && !(why.len && strstr(why.data, d.data)))
      kiln_buf_appendf(&why, "%s%s", why.len ? "; " : "", d.data);
    kiln_buf_deinit(&d);
  }
  if (why.len) {
    kiln_free(f->reason);
    f->reason = kiln_buf_take(&why);
  }
  kiln_buf_deinit(&why);
  bool dry = r->settings->dry_run;
  switch (res->outcome) {
    case KILN__V1__RECOMPILE_OUTCOME__RECOMPILE_OUTCOME_RECOMPILED:
      set_outcome(r, f, dry ? OUTCOME_WOULD_RECOMPILE : OUTCOME_RECOMPILED);
      break;
    case KILN__V1__RECOMPILE_OUTCOME__RECOMPILE_OUTCOME_CACHED: set_outcome(r, f, OUTCOME_CACHED); break;
    case KILN__V1__RECOMPILE_OUTCOME__RECOMPILE_OUTCOME_SKIPPED_CURRENT:
      if (!f->reason) set_reason(f, "kilnd found it already current");
      set_outcome(r, f, OUTCOME_CURRENT);
      break;
    case KILN__V1__RECOMPILE_OUTCOME__RECOMPILE_OUTCOME_NO_SOURCE:
      set_outcome(r, f, OUTCOME_NO_SOURCE);
      break;
    case KILN__V1__RECOMPILE_OUTCOME__RECOMPILE_OUTCOME_FAILED:
      /* The source its kiln.source.sha256 names is not on kilnd, or kilnd does not
       * know a VMFB too large to send: no source that this run can give. */
      if (res->code == KILN_STATUS_NOT_FOUND && f->digest_only) {
        set_reason(
            f,
            "too large to send (%llu bytes; kilnd takes messages up to %llu) and kilnd did not build it; "
            "name its source in a --manifest",
            (unsigned long long)f->size, (unsigned long long)(message_budget(r) + MESSAGE_HEADROOM));
      }
      set_outcome(r, f,
                  res->code == KILN_STATUS_NOT_FOUND && (f->attr_source || f->digest_only) ? OUTCOME_NO_SOURCE
                                                                                           : OUTCOME_FAILED);
      break;
    default:
      f->code = KILN_STATUS_INTERNAL;
      set_reason(f, "kilnd sent outcome %d, which this client does not know (is kilnd newer?)",
                 (int)res->outcome);
      set_outcome(r, f, OUTCOME_FAILED);
      break;
  }
  if ((f->outcome == OUTCOME_NO_SOURCE || f->outcome == OUTCOME_FAILED) && !f->reason) {
    set_reason(f, "%s",
               f->outcome == OUTCOME_NO_SOURCE ? "no source found: name one in a --manifest"
                                               : "kilnd gave no reason");
  }
  bool write = !dry && (f->outcome == OUTCOME_RECOMPILED || f->outcome == OUTCOME_CACHED ||
                        (f->outcome == OUTCOME_CURRENT && r->settings->force && f->n_targets));
  if (write) write_outputs(r, f);
  /* kilnd ending the job or refusing the item while it drains ("retry on another
   * server"), or its artifact out of reach: another call may finish it. */
  if (f->outcome == OUTCOME_FAILED && f->code == KILN_STATUS_UNAVAILABLE) f->retry = true;
  if (f->outcome == OUTCOME_FAILED && f->retry) {
    r->unavailable = true;
  } else {
    f->retry = false;
    r->finished++;
  }
}

/* The call ended (a read returned its end): keeps its status. */
static void stream_ended(recompile_t *r, kiln_status_t status) {
  r->stream_over = true;
  if (status && !r->call_status) {
    r->call_status = status;
  } else {
    kiln_status_free(status);
  }
}

/* Reads results: the first read waits up to `wait_ms`, later ones only take what
 * is there. */
static void pump(recompile_t *r, int64_t wait_ms) {
  while (r->stream && !r->stream_over) {
    ProtobufCMessage *msg = NULL;
    bool timed_out = false;
    kiln_status_t status =
        kiln_client_stream_read(r->stream, &kiln__v1__recompile_event__descriptor, wait_ms, &msg, &timed_out);
    if (timed_out) return;
    if (status || !msg) {
      stream_ended(r, status);
      return;
    }
    const Kiln__V1__RecompileEvent *ev = (const Kiln__V1__RecompileEvent *)msg;
    /* The summary repeats what the results said; the report counts for itself. */
    if (ev->kind_case == KILN__V1__RECOMPILE_EVENT__KIND_RESULT && ev->result) take_result(r, ev->result);
    protobuf_c_message_free_unpacked(msg, NULL);
    progress_draw(r, false);
    wait_ms = 0;
  }
}

static void check_interrupt(recompile_t *r) {
  if (!r->interrupted && kiln_cli_interrupted()) r->interrupted = true;
}

/* Sends one request (NULL: the half-close), reading results while the write
 * waits. False when the call has ended or an interrupt came. */
static bool send_request(recompile_t *r, const Kiln__V1__RecompileRequest *req) {
  if (!kiln_client_stream_write_begin(r->stream, req ? &req->base : NULL)) {
    pump(r, -1); /* the call has ended: learn its status */
    return false;
  }
  for (;;) {
    bool ok = false;
    if (kiln_client_stream_write_poll(r->stream, WRITE_SLICE_MS, &ok)) {
      if (!ok) pump(r, -1);
      return ok;
    }
    pump(r, 0);
    progress_draw(r, false);
    check_interrupt(r);
    if (r->interrupted) return false; /* destroying the stream cancels the write */
  }
}

/* GetServerInfo, then the stream and its options; once per call. False when the
 * call could not start (r->call_status says why). */
static bool open_stream(recompile_t *r) {
  if (r->stream) return !r->stream_over;
  if (r->call_status) return false;
  kiln_client_set_timeout(r->client, kiln_cli_timeout_or(r->settings, INFO_TIMEOUT_MS));
  Kiln__V1__GetServerInfoRequest req = KILN__V1__GET_SERVER_INFO_REQUEST__INIT;
  ProtobufCMessage *msg = NULL;
  kiln_status_t status = kiln_client_unary(r->client, "/kiln.v1.Kiln/GetServerInfo", &req.base,
                                           &kiln__v1__get_server_info_response__descriptor, &msg);
  if (status) {
    r->call_status = kiln_status_annotate(status, "GetServerInfo");
    return false;
  }
  r->info = (Kiln__V1__GetServerInfoResponse *)msg;
  kiln_client_set_timeout(r->client, kiln_cli_timeout_or(r->settings, KILN_CLI_RECOMPILE_TIMEOUT_MS));
  r->stream = kiln_client_stream_open(r->client, "/kiln.v1.Kiln/Recompile", NULL);
  r->opened = true;
  Kiln__V1__RecompileOptions options = KILN__V1__RECOMPILE_OPTIONS__INIT;
  options.priority = (Kiln__V1__Priority)kiln_cli_priority_value(r->settings->priority);
  options.dry_run = r->settings->dry_run;
  options.force = r->settings->force;
  Kiln__V1__RecompileOptions__LabelsEntry *entries = kiln_calloc(r->n_labels + 1, sizeof *entries);
  Kiln__V1__RecompileOptions__LabelsEntry **ptrs = kiln_calloc(r->n_labels + 1, sizeof *ptrs);
  for (size_t i = 0; i < r->n_labels; i++) {
    kiln__v1__recompile_options__labels_entry__init(&entries[i]);
    entries[i].key = r->labels[i].key;
    entries[i].value = r->labels[i].value;
    ptrs[i] = &entries[i];
  }
  options.labels = ptrs;
  options.n_labels = r->n_labels;
  Kiln__V1__RecompileRequest first = KILN__V1__RECOMPILE_REQUEST__INIT;
  first.kind_case = KILN__V1__RECOMPILE_REQUEST__KIND_OPTIONS;
  first.options = &options;
  bool ok = send_request(r, &first);
  kiln_free(entries);
  kiln_free(ptrs);
  return ok;
}

/* ---- items --------------------------------------------------------------- */

static bool was_uploaded(const recompile_t *r, const char *digest) {
  for (size_t i = 0; i < r->n_uploaded; i++) {
    if (strcmp(r->uploaded[i], digest) == 0) return true;
  }
  return false;
}

/* PutSource of `size` bytes from `in` as `digest`, unless this run did already. */
static KILN_MUST_USE kiln_status_t upload(recompile_t *r, FILE *in, const char *digest, uint64_t size,
                                          const char *name) {
  if (was_uploaded(r, digest)) return NULL;
  kiln_client_set_timeout(r->client, kiln_cli_timeout_ms(r->settings, true));
  Kiln__V1__PutSourceResponse *resp = NULL;
  kiln_status_t status = kiln_cli_source_upload(r->client, in, digest, size,
                                                r->info ? r->info->chunk_size_bytes : 0, name, &resp);
  if (status) return status;
  protobuf_c_message_free_unpacked(&resp->base, NULL);
  r->uploaded = kiln_realloc(r->uploaded, (r->n_uploaded + 1) * sizeof *r->uploaded);
  r->uploaded[r->n_uploaded++] = kiln_strdup(digest);
  return NULL;
}

static KILN_MUST_USE kiln_status_t upload_bytes(recompile_t *r, const uint8_t *data, size_t len,
                                                const char *digest, const char *name) {
  if (was_uploaded(r, digest)) return NULL;
  FILE *in = fmemopen((void *)data, len ? len : 1, "rb");
  if (!in) return KILN_CLI_LOCAL_ERRNO(errno, "cannot buffer the source of %s", name);
  kiln_status_t status = upload(r, in, digest, len, name);
  fclose(in);
  return status;
}

/* A list of strings an item borrows, built from attrs or a manifest entry. */
typedef struct strs_s {
  char **items;
  size_t n;
} strs_t;

static void strs_free(strs_t *s) {
  kiln_cli_strings_free(s->items, s->n);
  s->items = NULL;
  s->n = 0;
}

static void strs_split(strs_t *s, const char *text, const char *seps) {
  kiln_cli_strings_split(text, seps, &s->items, &s->n);
}

/* Everything an item points into, freed after it was sent. */
typedef struct item_parts_s {
  uint8_t *source; /* inline or extracted source bytes */
  size_t source_len;
  kiln_digest_hex_t source_digest;
  strs_t targets, flags;
} item_parts_t;

/* The manifest's source for `f`: inline when small, else uploaded and named by
 * digest. */
static KILN_MUST_USE kiln_status_t entry_source(recompile_t *r, kiln_cli_source_entry_t *e, uint64_t room,
                                                Kiln__V1__RecompileItem *item, item_parts_t *parts) {
  kiln_status_t status = NULL;
  if (!e->hashed) {
    status = kiln_cli_file_digest(e->source, &e->source_digest, &e->source_size);
    if (status) return status;
    e->hashed = true;
  }
  if (e->source_size <= INLINE_SOURCE_MAX && e->source_size <= room) {
    FILE *in = fopen(e->source, "rb");
    if (!in) return KILN_CLI_LOCAL_ERRNO(errno, "cannot open %s", e->source);
    status = kiln_cli_read_all(in, e->source, INLINE_SOURCE_MAX, &parts->source, &parts->source_len);
    fclose(in);
    if (status) return status;
    item->replacement_case = KILN__V1__RECOMPILE_ITEM__REPLACEMENT_SOURCE;
    item->source.data = parts->source;
    item->source.len = parts->source_len;
  } else {
    FILE *in = fopen(e->source, "rb");
    if (!in) return KILN_CLI_LOCAL_ERRNO(errno, "cannot open %s", e->source);
    status = upload(r, in, e->source_digest.text, e->source_size, e->source);
    fclose(in);
    if (status) return status;
    item->replacement_case = KILN__V1__RECOMPILE_ITEM__REPLACEMENT_SOURCE_DIGEST;
    item->source_digest = e->source_digest.text;
  }
  item->source_name = e->source;
  return NULL;
}

/* Fills `item` for file `f` (bytes `data`). */
static KILN_MUST_USE kiln_status_t build_item(recompile_t *r, file_t *f, kiln_cli_source_entry_t *entry,
                                              const uint8_t *data, size_t len, const kiln_vmfb_info_t *info,
                                              Kiln__V1__RecompileItem *item, item_parts_t *parts) {
  uint64_t budget = message_budget(r);
  kiln_status_t status = NULL;
  if (entry) {
    uint64_t room = budget > len ? budget - len : budget;
    status = entry_source(r, entry, room, item, parts);
    if (status) return kiln_status_annotate(status, "the manifest's source (%s)", entry->where);
    for (size_t i = 0; i < entry->n_targets; i++) strs_split(&parts->targets, entry->targets[i], "");
    if (entry->has_flags) {
      for (size_t i = 0; i < entry->n_flags; i++) strs_split(&parts->flags, entry->flags[i], "");
      item->ignore_recorded_flags = true;
    }
  }
  if ((uint64_t)len + parts->source_len <= budget) {
    item->legacy_case = KILN__V1__RECOMPILE_ITEM__LEGACY_VMFB;
    item->vmfb.data = (uint8_t *)data;
    item->vmfb.len = len;
  } else {
    /* Too large for a message. kilnd resolves a vmfb_digest only among the VMFBs
     * it built, and fails the item when the digest is unknown even if a source
     * comes with it; so a source held here (the manifest's, the embedded one,
     * the stored one kiln.source.sha256 names) goes without the VMFB, with the
     * targets and flags the file records. Only with none: the digest. */
    if (!entry && info->has_source) {
      status = kiln_vmfb_source_extract(data, len, &parts->source, &parts->source_len);
      if (!status) {
        kiln_digest_t d;
        kiln_digest_of(parts->source, parts->source_len, &d);
        kiln_digest_to_hex(&d, &parts->source_digest);
        status = upload_bytes(r, parts->source, parts->source_len, parts->source_digest.text, f->path);
        if (status) return kiln_status_annotate(status, "uploading its embedded source");
        item->replacement_case = KILN__V1__RECOMPILE_ITEM__REPLACEMENT_SOURCE_DIGEST;
        item->source_digest = parts->source_digest.text;
      } else {
        kiln_status_free(status); /* damaged: the recorded digest may still do */
        status = NULL;
      }
    }
    if (item->replacement_case == KILN__V1__RECOMPILE_ITEM__REPLACEMENT__NOT_SET) {
      const char *attr = kiln_vmfb_info_attr(info, "kiln.source.sha256");
      if (attr && kiln_digest_is_valid_hex(attr)) {
        item->replacement_case = KILN__V1__RECOMPILE_ITEM__REPLACEMENT_SOURCE_DIGEST;
        item->source_digest = (char *)attr;
        f->attr_source = true;
      }
    }
    if (item->replacement_case == KILN__V1__RECOMPILE_ITEM__REPLACEMENT__NOT_SET) {
      item->legacy_case = KILN__V1__RECOMPILE_ITEM__LEGACY_VMFB_DIGEST;
      item->vmfb_digest = f->digest;
      f->digest_only = true;
    } else {
      if (!parts->targets.n) strs_split(&parts->targets, kiln_vmfb_info_attr(info, "kiln.target"), "");
      const char *flags = kiln_vmfb_info_attr(info, "kiln.flags");
      if (!item->ignore_recorded_flags && flags) {
        strs_split(&parts->flags, flags, " \t\n");
        item->ignore_recorded_flags = true;
      }
    }
  }
  item->targets = parts->targets.items;
  item->n_targets = parts->targets.n;
  item->flags = parts->flags.items;
  item->n_flags = parts->flags.n;
  return NULL;
}

/* Waits until the window has room (or the call ended, or an interrupt). */
static void wait_for_room(recompile_t *r) {
  while (r->in_flight >= r->window && !r->stream_over && !r->interrupted && !r->unavailable) {
    pump(r, READ_SLICE_MS);
    progress_draw(r, false);
    check_interrupt(r);
  }
}

static char *real_path_of(const char *path) {
  char *real = realpath(path, NULL);
  if (!real) return NULL;
  char *copy = kiln_strdup(real);
  free(real);
  return copy;
}

/* Reads, classifies and (when it needs recompiling) sends one file. */
static void process_file(recompile_t *r, size_t index) {
  file_t *f = &r->files[index];
  uint8_t *data = NULL;
  size_t len = 0;
  kiln_vmfb_info_t info;
  kiln_cli_vmfb_load(f->path, &data, &len, &info);
  bool again = f->classified; /* read again to be sent on another call: counted once */
  f->classified = true;
  f->cls = info.cls;
  if (!again) r->seen++;
  char target[128];
  kiln_cli_vmfb_target_describe(&info, target, sizeof target);
  kiln_free(f->target_desc);
  f->target_desc = kiln_strdup(info.cls == KILN_VMFB_CLASS_INVALID ? "-" : target);
  if (info.cls == KILN_VMFB_CLASS_INVALID) {
    f->code = KILN_STATUS_INVALID_ARGUMENT;
    set_reason(f, "%s", info.reason ? info.reason : "not a readable VMFB");
    set_outcome(r, f, OUTCOME_INVALID);
    goto out;
  }
  kiln_digest_t d;
  kiln_digest_hex_t hex;
  kiln_digest_of(data, len, &d);
  kiln_digest_to_hex(&d, &hex);
  memcpy(f->digest, hex.text, sizeof f->digest);
  f->size = len;
  if (info.cls == KILN_VMFB_CLASS_LEGACY && !again) r->legacy++;
  if (info.cls == KILN_VMFB_CLASS_CURRENT && !r->settings->force) {
    set_reason(f, "%s", info.reason ? info.reason : "already current");
    set_outcome(r, f, OUTCOME_CURRENT);
    goto out;
  }
  if (!f->output) {
    /* plan_outputs said why. */
    f->code = KILN_STATUS_FAILED_PRECONDITION;
    set_outcome(r, f, OUTCOME_FAILED);
    goto out;
  }
  kiln_cli_source_entry_t *entry = NULL;
  if (r->have_map) {
    char *real = real_path_of(f->path);
    entry = kiln_cli_source_map_find(&r->map, real, f->digest);
    kiln_free(real);
  }
  if (already_done(r, f, entry)) {
    set_reason(f, "already recompiled: %s", f->output);
    set_outcome(r, f, OUTCOME_DONE);
    goto out;
  }
  wait_for_room(r);
  /* Left PENDING: the next call sends it. */
  if (r->interrupted || r->unavailable || !open_stream(r)) goto out;
  Kiln__V1__RecompileItem item = KILN__V1__RECOMPILE_ITEM__INIT;
  item_parts_t parts;
  memset(&parts, 0, sizeof parts);
  char id[24];
  snprintf(id, sizeof id, "%zu", index);
  item.item_id = id;
  kiln_status_t status = build_item(r, f, entry, data, len, &info, &item, &parts);
  if (status) {
    fail_with(r, f, OUTCOME_FAILED, status, NULL);
  } else {
    Kiln__V1__RecompileRequest req = KILN__V1__RECOMPILE_REQUEST__INIT;
    req.kind_case = KILN__V1__RECOMPILE_REQUEST__KIND_ITEM;
    req.item = &item;
    /* Counted before the write: a result may be read while it is pending. */
    set_outcome(r, f, OUTCOME_SENT);
    f->was_sent = true;
    r->in_flight++;
    /* A failed send leaves it SENT: the interrupt or the call's failure names it. */
    (void)send_request(r, &req);
  }
  kiln_free(parts.source);
  strs_free(&parts.targets);
  strs_free(&parts.flags);
out:
  kiln_vmfb_info_deinit(&info);
  kiln_free(data);
}

/* After the last file: `done`, the half-close, and every result. */
static void finish_stream(recompile_t *r) {
  if (!r->stream || r->stream_over || r->interrupted) return;
  Kiln__V1__RecompileDone done = KILN__V1__RECOMPILE_DONE__INIT;
  Kiln__V1__RecompileRequest req = KILN__V1__RECOMPILE_REQUEST__INIT;
  req.kind_case = KILN__V1__RECOMPILE_REQUEST__KIND_DONE;
  req.done = &done;
  if (send_request(r, &req)) send_request(r, NULL);
  while (!r->stream_over && !r->interrupted) {
    pump(r, READ_SLICE_MS);
    progress_draw(r, false);
    check_interrupt(r);
  }
  if (!r->interrupted && !r->call_status && r->in_flight) {
    r->call_status = KILN_STATUS(
        KILN_STATUS_INTERNAL, "kilnd ended the Recompile call without results for %zu file(s) (kilnd bug?)",
        r->in_flight);
  }
}

/* Every file whose turn in this call came: PENDING ones in order, each read,
 * classified and (when it needs recompiling) sent; stops at an interrupt, the
 * call's end or kilnd saying UNAVAILABLE. */
static void send_pending(recompile_t *r) {
  for (size_t i = 0; i < r->n_files; i++) {
    if (r->files[i].outcome != OUTCOME_PENDING) continue;
    check_interrupt(r);
    if (r->stream_over && !r->call_status) {
      r->call_status = KILN_STATUS(KILN_STATUS_INTERNAL,
                                   "kilnd ended the Recompile call before the last item "
                                   "was sent (kilnd bug?)");
    }
    if (r->interrupted || r->call_status || r->unavailable) break;
    process_file(r, i);
    pump(r, 0);
    progress_draw(r, false);
  }
}

/* ---- another call -------------------------------------------------------- */

static void targets_free(file_t *f) {
  for (size_t k = 0; k < f->n_targets; k++) {
    kiln_free(f->targets[k].target);
    kiln_free(f->targets[k].digest);
    kiln_free(f->targets[k].message);
    kiln_free(f->targets[k].output);
  }
  kiln_free(f->targets);
  f->targets = NULL;
  f->n_targets = 0;
}

/* Puts a file the last call did not finish back to PENDING, forgetting all that
 * call said of it. Outputs it wrote stay on disk (and known); the next result
 * writes them again, so they are not counted twice. */
static void file_requeue(recompile_t *r, file_t *f) {
  for (size_t k = 0; k < f->n_targets; k++) {
    if (f->targets[k].output) r->bytes_written -= f->targets[k].size;
  }
  targets_free(f);
  kiln_free(f->legacy_digest);
  kiln_free(f->source_digest);
  kiln_free(f->job_id);
  kiln_free(f->reason);
  f->legacy_digest = f->source_digest = f->job_id = f->reason = NULL;
  f->code = 0;
  f->attr_source = f->digest_only = f->retry = false;
  set_outcome(r, f, OUTCOME_PENDING);
}

/* Ends the last call's state so that open_stream starts a new call from
 * scratch: GetServerInfo again, the options again, uploads again. */
static void call_reset(recompile_t *r) {
  kiln_client_stream_destroy(r->stream);
  r->stream = NULL;
  r->stream_over = false;
  kiln_status_free(r->call_status);
  r->call_status = NULL;
  r->in_flight = 0;
  r->unavailable = false;
  r->finished = 0;
  if (r->info) protobuf_c_message_free_unpacked(&r->info->base, NULL);
  r->info = NULL;
  kiln_cli_strings_free(r->uploaded, r->n_uploaded);
  r->uploaded = NULL;
  r->n_uploaded = 0;
  for (size_t i = 0; i < r->n_files; i++) {
    file_t *f = &r->files[i];
    if (f->outcome == OUTCOME_SENT || (f->outcome == OUTCOME_FAILED && f->retry)) file_requeue(r, f);
  }
}

/* Waits `ms`, in slices, returning early (false) on an interrupt. */
static bool backoff(recompile_t *r, int64_t ms) {
  int64_t until = kiln_time_monotonic_ms() + ms;
  for (;;) {
    check_interrupt(r);
    if (r->interrupted) return false;
    int64_t left = until - kiln_time_monotonic_ms();
    if (left <= 0) return true;
    if (left > READ_SLICE_MS) left = READ_SLICE_MS;
    struct timespec ts = {left / 1000, (long)(left % 1000) * 1000000L};
    nanosleep(&ts, NULL); /* a signal cuts it short: checked above */
  }
}

/* After a call ended: true when another is to be made (the state is reset and
 * the backoff waited); false when the run ends here, with the call's status and
 * every file as they are. `failures` counts the calls in a row that ended
 * UNAVAILABLE; a call that finished a file starts the count again. */
static bool next_call(recompile_t *r, int *failures) {
  if (r->interrupted || !r->opened) return false;
  if (r->call_status && kiln_status_code(r->call_status) != KILN_STATUS_UNAVAILABLE) return false;
  const file_t *why = NULL;
  size_t retry = 0;
  for (size_t i = 0; i < r->n_files; i++) {
    if (r->files[i].outcome != OUTCOME_FAILED || !r->files[i].retry) continue;
    if (!why) why = &r->files[i];
    retry++;
  }
  size_t unfinished = r->counts[OUTCOME_PENDING] + r->counts[OUTCOME_SENT] + retry;
  if (!unfinished) {
    /* Every file has its result: the call's end lost nothing. */
    kiln_status_free(r->call_status);
    r->call_status = NULL;
    return false;
  }
  if (!r->call_status && !retry) return false;
  *failures = r->finished ? 1 : *failures + 1;
  if (*failures >= CALL_ATTEMPTS) return false;
  int64_t wait_ms = r->retry_base_ms << (*failures - 1);
  progress_clear(r);
  if (r->call_status) {
    fprintf(stderr, "kiln: recompile: the Recompile call ended (UNAVAILABLE: %s)",
            kiln_status_message(r->call_status));
  } else {
    fprintf(stderr, "kiln: recompile: kilnd could not finish %zu file(s) (%s: %s)", retry,
            kiln_status_code_name((kiln_status_code_t)why->code),
            why->reason ? why->reason : "no reason given");
  }
  fprintf(stderr, "; %zu file(s) unfinished, retrying in %.1f s (attempt %d of %d)\n", unfinished,
          (double)wait_ms / 1000.0, *failures + 1, CALL_ATTEMPTS);
  fflush(stderr);
  call_reset(r);
  if (!backoff(r, wait_ms)) return false;
  /* A kilnd back on the same address is found now, not at the channel's next
   * scheduled attempt; not ready within 1 s, the call fails and counts. */
  (void)kiln_client_reconnect_now(r->client, 1000);
  return true;
}

/* ---- the report ---------------------------------------------------------- */

static const char *file_output(const file_t *f) {
  size_t written = 0;
  const char *one = NULL;
  for (size_t i = 0; i < f->n_targets; i++) {
    if (f->targets[i].output) {
      written++;
      one = f->targets[i].output;
    }
  }
  return written == 1 ? one : NULL;
}

static json_object *file_json(const recompile_t *r, const file_t *f) {
  json_object *o = json_object_new_object();
  json_object_object_add(o, "path", json_object_new_string(f->path));
  json_object_object_add(o, "class",
                         f->classified ? json_object_new_string(kiln_vmfb_class_name(f->cls)) : NULL);
  json_object_object_add(o, "outcome", json_object_new_string(outcome_names[f->outcome]));
  json_object_object_add(o, "code",
                         json_object_new_string(kiln_status_code_name((kiln_status_code_t)f->code)));
  json_object_object_add(o, "reason", f->reason ? json_object_new_string(f->reason) : NULL);
  const char *legacy = f->legacy_digest ? f->legacy_digest : f->digest[0] ? f->digest : NULL;
  json_object_object_add(o, "legacy_digest", legacy ? json_object_new_string(legacy) : NULL);
  json_object_object_add(o, "source_digest",
                         f->source_digest ? json_object_new_string(f->source_digest) : NULL);
  json_object *targets = json_object_new_array();
  for (size_t i = 0; i < f->n_targets; i++) {
    const target_t *t = &f->targets[i];
    json_object *x = json_object_new_object();
    json_object_object_add(x, "target", json_object_new_string(t->target));
    json_object_object_add(x, "artifact_digest", t->digest ? json_object_new_string(t->digest) : NULL);
    json_object_object_add(x, "size_bytes", json_object_new_uint64(t->size));
    json_object_object_add(x, "cache_hit", json_object_new_boolean(t->cache_hit));
    json_object_object_add(x, "code",
                           json_object_new_string(kiln_status_code_name((kiln_status_code_t)t->code)));
    json_object_object_add(x, "message", t->message ? json_object_new_string(t->message) : NULL);
    json_object_object_add(x, "output", t->output ? json_object_new_string(t->output) : NULL);
    json_object_array_add(targets, x);
  }
  json_object_object_add(o, "targets", targets);
  const char *out = file_output(f);
  if (!out && f->outcome == OUTCOME_DONE) out = f->output;
  json_object_object_add(o, "output", out ? json_object_new_string(out) : NULL);
  json_object_object_add(o, "job_id", f->job_id ? json_object_new_string(f->job_id) : NULL);
  (void)r;
  return o;
}

static json_object *summary_json(const recompile_t *r, int64_t elapsed_ms) {
  json_object *s = json_object_new_object();
  json_object_object_add(s, "files", json_object_new_uint64(r->n_files));
  json_object_object_add(s, "seen", json_object_new_uint64(r->seen));
  json_object_object_add(s, "legacy", json_object_new_uint64(r->legacy));
  for (int o = OUTCOME_RECOMPILED; o < OUTCOME_COUNT; o++) {
    json_object_object_add(s, outcome_names[o], json_object_new_uint64(r->counts[o]));
  }
  json_object_object_add(s, "artifacts_fetched", json_object_new_uint64(r->fetched));
  json_object_object_add(s, "artifacts_copied", json_object_new_uint64(r->copied));
  json_object_object_add(s, "bytes_written", json_object_new_uint64(r->bytes_written));
  json_object_object_add(s, "elapsed_ms", json_object_new_int64(elapsed_ms));
  json_object_object_add(s, "dry_run", json_object_new_boolean(r->settings->dry_run));
  json_object_object_add(s, "interrupted", json_object_new_boolean(r->interrupted));
  return s;
}

static void print_json(const recompile_t *r, int64_t elapsed_ms) {
  json_object *doc = json_object_new_object();
  json_object *files = json_object_new_array();
  for (size_t i = 0; i < r->n_files; i++) json_object_array_add(files, file_json(r, &r->files[i]));
  json_object_object_add(doc, "files", files);
  json_object_object_add(doc, "summary", summary_json(r, elapsed_ms));
  json_object *err = NULL;
  if (r->call_status) {
    err = json_object_new_object();
    json_object_object_add(err, "code",
                           json_object_new_string(kiln_status_code_name(kiln_status_code(r->call_status))));
    json_object_object_add(err, "message", json_object_new_string(kiln_status_message(r->call_status)));
  }
  json_object_object_add(doc, "error", err);
  kiln_client_json_print(doc);
}

static void human_size(uint64_t bytes, char *out, size_t cap) {
  if (bytes >= (1u << 20))
    snprintf(out, cap, "%.1f MiB", (double)bytes / (1 << 20));
  else if (bytes >= 1024)
    snprintf(out, cap, "%.1f KiB", (double)bytes / 1024);
  else
    snprintf(out, cap, "%llu bytes", (unsigned long long)bytes);
}

/* `text` with each run of blanks that holds a newline made one "; " (compiler
 * messages span lines; a table row must not). */
static void append_one_line(kiln_buf_t *out, const char *text) {
  for (const char *p = text; *p;) {
    if (*p == '\n' || *p == '\r') {
      while (out->len && (out->data[out->len - 1] == ' ' || out->data[out->len - 1] == ':')) out->len--;
      while (*p == '\n' || *p == '\r' || *p == ' ' || *p == '\t') p++;
      if (*p) kiln_buf_append_str(out, "; ");
      continue;
    }
    kiln_buf_append_char(out, *p++);
  }
  if (out->data) out->data[out->len] = '\0';
}

static void print_table(const recompile_t *r, int64_t elapsed_ms) {
  size_t w = 4;
  for (size_t i = 0; i < r->n_files; i++) {
    size_t n = strlen(r->files[i].path);
    if (n > w) w = n;
  }
  if (w > 60) w = 60;
  printf("%-*s  %-15s  %-14s  %s\n", (int)w, "FILE", "OUTCOME", "TARGET", "OUTPUT or REASON");
  for (size_t i = 0; i < r->n_files; i++) {
    const file_t *f = &r->files[i];
    kiln_buf_t targets;
    kiln_buf_init(&targets);
    for (size_t k = 0; k < f->n_targets; k++)
      kiln_buf_appendf(&targets, "%s%s", k ? "," : "", f->targets[k].target);
    const char *target = targets.len ? targets.data : f->target_desc ? f->target_desc : "-";
    kiln_buf_t detail;
    kiln_buf_init(&detail);
    const char *out = file_output(f);
    bool wrote = false;
    for (size_t k = 0; k < f->n_targets; k++) {
      if (f->targets[k].output && !out) {
        kiln_buf_appendf(&detail, "%s%s", wrote ? ", " : "", f->targets[k].output);
        wrote = true;
      }
    }
    if (out)
      kiln_buf_append_str(&detail, out);
    else if (!wrote && f->reason)
      append_one_line(&detail, f->reason);
    else if (!wrote && f->outcome == OUTCOME_WOULD_RECOMPILE && f->output)
      kiln_buf_appendf(&detail, "-> %s", f->output);
    else if (!wrote && f->outcome == OUTCOME_CACHED && f->output)
      kiln_buf_appendf(&detail, "-> %s", f->output);
    printf("%-*s  %-15s  %-14s  %s\n", (int)w, f->path, outcome_names[f->outcome], target,
           detail.len ? detail.data : "");
    kiln_buf_deinit(&targets);
    kiln_buf_deinit(&detail);
  }
  char size[32];
  human_size(r->bytes_written, size, sizeof size);
  const size_t *c = r->counts;
  printf("\n%zu file(s): %zu current, %zu legacy, %zu invalid", r->n_files, c[OUTCOME_CURRENT], r->legacy,
         c[OUTCOME_INVALID]);
  if (r->settings->dry_run) {
    printf("; dry run: %zu would recompile, %zu cached", c[OUTCOME_WOULD_RECOMPILE], c[OUTCOME_CACHED]);
  } else {
    printf("; %zu recompiled, %zu cached", c[OUTCOME_RECOMPILED], c[OUTCOME_CACHED]);
  }
  printf(", %zu done before, %zu no source, %zu failed", c[OUTCOME_DONE], c[OUTCOME_NO_SOURCE],
         c[OUTCOME_FAILED]);
  if (c[OUTCOME_NOT_PROCESSED]) printf(", %zu not processed", c[OUTCOME_NOT_PROCESSED]);
  printf("\n%zu artifact(s) fetched, %zu copied locally, %s written in %.1f s\n", r->fetched, r->copied, size,
         (double)elapsed_ms / 1000.0);
}

/* ---- the command --------------------------------------------------------- */

static void recompile_deinit(recompile_t *r) {
  for (size_t i = 0; i < r->n_files; i++) {
    file_t *f = &r->files[i];
    kiln_free(f->path);
    kiln_free(f->reason);
    kiln_free(f->output);
    kiln_free(f->target_desc);
    kiln_free(f->legacy_digest);
    kiln_free(f->source_digest);
    kiln_free(f->job_id);
    targets_free(f);
  }
  kiln_free(r->files);
  for (size_t i = 0; i < r->n_known; i++) {
    kiln_free(r->known[i].digest);
    kiln_free(r->known[i].path);
  }
  kiln_free(r->known);
  kiln_cli_strings_free(r->uploaded, r->n_uploaded);
  kiln_free(r->last_dir);
  kiln_free(r->out_root);
  if (r->have_map) kiln_cli_source_map_deinit(&r->map);
  kiln_cli_labels_free(r->labels, r->n_labels);
  kiln_client_stream_destroy(r->stream);
  if (r->info) protobuf_c_message_free_unpacked(&r->info->base, NULL);
  kiln_status_free(r->call_status);
}

static int usage_error(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static int usage_error(const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  fputs("kiln: recompile: ", stderr);
  vfprintf(stderr, fmt, ap);
  va_end(ap);
  fprintf(stderr, "\nusage: kiln %s\n", usage);
  return KILN_EXIT_USAGE;
}

/* Checks the options and loads the manifest and the file list; KILN_EXIT_OK or
 * the usage error's exit code (reported). */
static int prepare(recompile_t *r, int argc, const char **argv) {
  const kiln_cli_settings_t *s = r->settings;
  if (argc < 1) return usage_error("name at least one VMFB file or directory");
  bool to_dir = s->output && *s->output;
  if (to_dir && s->in_place)
    return usage_error("-o and --in-place exclude each other: write beside or instead");
  if (s->backup && !s->in_place)
    return usage_error("--backup goes with --in-place (it keeps the replaced file)");
  kiln_status_t status = kiln_cli_labels_parse(&s->label, &r->labels, &r->n_labels);
  if (status) {
    int rc = usage_error("%s", kiln_status_message(status));
    kiln_status_free(status);
    return rc;
  }
  r->retry_base_ms = RETRY_BASE_MS;
  const char *base = getenv(RETRY_BASE_ENV);
  if (base && *base) {
    char *end = NULL;
    errno = 0;
    long long ms = strtoll(base, &end, 10);
    if (errno || *end || ms < 1 || ms > RETRY_BASE_MAX_MS) {
      return usage_error(
          "%s=%s: the first wait between Recompile calls is a number of milliseconds, 1 to %d "
          "(unset it for the default, %d)",
          RETRY_BASE_ENV, base, RETRY_BASE_MAX_MS, RETRY_BASE_MS);
    }
    r->retry_base_ms = ms;
  }
  if (s->manifest && *s->manifest) {
    r->have_map = true;
    status = kiln_cli_source_map_load(s->manifest, s->allow_outside, &r->map);
    if (status) {
      fprintf(stderr, "kiln: recompile: bad manifest: %s\n", kiln_status_message(status));
      kiln_status_free(status);
      return KILN_EXIT_USAGE;
    }
  }
  kiln_cli_found_t *found = NULL;
  size_t n = 0;
  int rc = kiln_cli_vmfb_find("recompile", argc, argv, &found, &n);
  if (rc) {
    kiln_cli_found_free(found, n);
    return rc;
  }
  r->files = kiln_calloc(n ? n : 1, sizeof *r->files);
  for (size_t i = 0; i < n; i++) {
    struct stat st;
    bool have = stat(found[i].path, &st) == 0;
    bool dup = false;
    /* The same file named twice (a file and its directory): one item, one output. */
    for (size_t k = 0; have && k < r->n_files && !dup; k++) {
      dup = r->files[k].dev == st.st_dev && r->files[k].ino == st.st_ino;
    }
    if (dup) continue;
    file_t *f = &r->files[r->n_files++];
    f->path = kiln_strdup(found[i].path);
    f->arg = found[i].arg;
    if (have) {
      f->mtime = st.st_mtim;
      f->dev = st.st_dev;
      f->ino = st.st_ino;
    }
  }
  kiln_cli_found_free(found, n);
  r->counts[OUTCOME_PENDING] = r->n_files;
  plan_outputs(r);
  if (to_dir && !s->dry_run) {
    status = kiln_cli_mkdirs(s->output);
    if (status) {
      fprintf(stderr, "kiln: recompile: -o %s: %s\n", s->output, kiln_status_message(status));
      kiln_status_free(status);
      return KILN_EXIT_USAGE;
    }
    char *root = realpath(s->output, NULL);
    if (!root) {
      fprintf(stderr, "kiln: recompile: -o %s: %s\n", s->output, strerror(errno));
      return KILN_EXIT_USAGE;
    }
    r->out_root = kiln_strdup(root);
    free(root);
  }
  return KILN_EXIT_OK;
}

int kiln_cli_recompile(const kiln_cli_settings_t *settings, kiln_client_t *client, int argc,
                       const char **argv) {
  recompile_t r;
  memset(&r, 0, sizeof r);
  r.settings = settings;
  r.client = client;
  r.argv = argv;
  r.window = settings->jobs > 0 ? (size_t)settings->jobs : DEFAULT_JOBS;
  r.start_ms = kiln_time_monotonic_ms();
  int rc = prepare(&r, argc, argv);
  if (rc) {
    recompile_deinit(&r);
    return rc;
  }
  r.progress = !settings->json && kiln_cli_is_live_terminal(STDERR_FILENO);
  kiln_cli_interrupts_catch(true);
  int failures = 0;
  do {
    send_pending(&r);
    finish_stream(&r);
    check_interrupt(&r);
  } while (next_call(&r, &failures));
  if (r.interrupted && r.stream) kiln_client_stream_cancel(r.stream);
  kiln_cli_interrupts_catch(false);
  for (size_t i = 0; i < r.n_files; i++) {
    file_t *f = &r.files[i];
    if (f->outcome != OUTCOME_PENDING && f->outcome != OUTCOME_SENT) continue;
    set_reason(f, "%s",
               r.interrupted ? "interrupted before it was done; run again to resume"
               : f->was_sent ? "no result: the Recompile call ended first; run again to resume"
                             : "not reached: the Recompile call failed first");
    set_outcome(&r, f, OUTCOME_NOT_PROCESSED);
  }
  progress_clear(&r);
  int64_t elapsed = kiln_time_monotonic_ms() - r.start_ms;
  bool answered = r.counts[OUTCOME_NOT_PROCESSED] < r.n_files;
  if (settings->json) {
    print_json(&r, elapsed);
  } else if (answered || !r.call_status) {
    print_table(&r, elapsed);
  }
  if (r.interrupted) {
    fprintf(stderr,
            "kiln: recompile: interrupted; what was written stays (run the same command again to "
            "resume)\n");
    rc = KILN_EXIT_INTERRUPTED;
  } else if (r.call_status) {
    kiln_status_t status = r.call_status;
    r.call_status = NULL;
    if (kiln_status_code(status) == KILN_STATUS_UNIMPLEMENTED) {
      fprintf(stderr, "kiln: recompile: kilnd at %s has no Recompile (it is older than this client): %s\n",
              settings->addr, kiln_status_message(status));
      kiln_status_free(status);
      rc = KILN_EXIT_FAILED;
    } else {
      rc = kiln_cli_report(settings, "recompile", kiln_client_timeout(client), status);
    }
  } else {
    const size_t *c = r.counts;
    rc = c[OUTCOME_FAILED] || c[OUTCOME_NO_SOURCE] || c[OUTCOME_INVALID] || c[OUTCOME_NOT_PROCESSED]
             ? KILN_EXIT_INCOMPLETE
             : KILN_EXIT_OK;
  }
  if (r.have_map && !settings->json) {
    for (size_t i = 0; i < r.map.n_entries; i++) {
      if (!r.map.entries[i].matched && !r.interrupted && !r.call_status) {
        fprintf(stderr, "kiln: recompile: note: %s matches no file that needed it\n", r.map.entries[i].where);
      }
    }
  }
  recompile_deinit(&r);
  return rc;
}
