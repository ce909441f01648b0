/* `kiln scan PATH...`: the audit before a fleet is recompiled. Finds the VMFBs under
 * each PATH (a directory is walked without following links; only its *.vmfb files
 * count, while a file named on the command line counts whatever its name), reads
 * each locally with the hardened reader (no kilnd), and says its class (current,
 * legacy, invalid) and, for legacy ones, where their source would come from:
 *   embedded    kiln's compressed source inside the file (checked against its
 *               recorded digest);
 *   provenance  only the source's digest, in the file's kiln.source.sha256 attr:
 *               kilnd's cache may hold the source;
 *   unknown     neither: only an operator's manifest can say.
 * A table for people (a line per file, then counts), --json for machines. The exit
 * status is the worst class seen, as for inspect: 0, KILN_EXIT_LEGACY or
 * KILN_EXIT_INVALID. */
#define _XOPEN_SOURCE 700 /* nftw */
#include <errno.h>
#include <ftw.h>
#include <json-c/json.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "base/alloc.h"
#include "client/cli.h"
#include "client/json.h"

/* The walk in progress: nftw has no user pointer. */
static kiln_cli_found_t *walk_found;
static size_t walk_n, walk_cap;
static int walk_arg;

static void add_path(const char *path, int arg) {
  if (walk_n == walk_cap) {
    walk_cap = walk_cap ? walk_cap * 2 : 64;
    walk_found = kiln_realloc(walk_found, walk_cap * sizeof *walk_found);
  }
  walk_found[walk_n].path = kiln_strdup(path);
  walk_found[walk_n].arg = arg;
  walk_n++;
}

static bool is_vmfb_name(const char *path) {
  size_t n = strlen(path);
  return n > 5 && strcmp(path + n - 5, ".vmfb") == 0;
}

static int visit(const char *path, const struct stat *sb, int type, struct FTW *ftw) {
  (void)sb, (void)ftw;
  if (type == FTW_F && is_vmfb_name(path)) add_path(path, walk_arg);
  return 0;
}

static int by_path(const void *a, const void *b) {
  return strcmp(((const kiln_cli_found_t *)a)->path, ((const kiln_cli_found_t *)b)->path);
}

int kiln_cli_vmfb_find(const char *command, int argc, const char **argv, kiln_cli_found_t **out_found,
                       size_t *out_n) {
  walk_found = NULL;
  walk_n = walk_cap = 0;
  int rc = KILN_EXIT_OK;
  for (int i = 0; i < argc; i++) {
    struct stat st;
    if (stat(argv[i], &st) != 0) {
      fprintf(stderr, "kiln: %s: cannot read %s: %s\n", command, argv[i], strerror(errno));
      rc = KILN_EXIT_USAGE;
      continue;
    }
    if (S_ISDIR(st.st_mode)) {
      size_t before = walk_n;
      walk_arg = i;
      if (nftw(argv[i], visit, 32, FTW_PHYS) != 0) {
        fprintf(stderr, "kiln: %s: cannot walk %s: %s\n", command, argv[i], strerror(errno));
        rc = KILN_EXIT_USAGE;
      }
      qsort(walk_found + before, walk_n - before, sizeof *walk_found, by_path);
    } else {
      add_path(argv[i], i);
    }
  }
  *out_found = walk_found;
  *out_n = walk_n;
  walk_found = NULL;
  walk_n = walk_cap = 0;
  return rc;
}

void kiln_cli_found_free(kiln_cli_found_t *found, size_t n) {
  for (size_t i = 0; i < n; i++) kiln_free(found[i].path);
  kiln_free(found);
}

/* Where a legacy file's source would come from. */
typedef enum source_kind_e {
  SOURCE_EMBEDDED,
  SOURCE_PROVENANCE,
  SOURCE_UNKNOWN,
  SOURCE_DAMAGED
} source_kind_t;

static const char *const source_names[] = {"embedded", "provenance", "unknown", "damaged"};

static source_kind_t find_source(const uint8_t *data, size_t len, const kiln_vmfb_info_t *info,
                                 const char **out_digest) {
  *out_digest = kiln_vmfb_info_attr(info, "kiln.source.sha256");
  if (info->has_source) {
    uint8_t *src = NULL;
    size_t n = 0;
    kiln_status_t st = kiln_vmfb_source_extract(data, len, &src, &n);
    kiln_free(src);
    bool ok = st == NULL;
    kiln_status_free(st);
    if (ok) return SOURCE_EMBEDDED;
    /* A damaged embedded source does not hide a usable digest. */
    return *out_digest ? SOURCE_PROVENANCE : SOURCE_DAMAGED;
  }
  return *out_digest ? SOURCE_PROVENANCE : SOURCE_UNKNOWN;
}

void kiln_cli_vmfb_target_describe(const kiln_vmfb_info_t *info, char *out, size_t cap) {
  const char *t = kiln_vmfb_info_attr(info, "kiln.target");
  if (t) {
    snprintf(out, cap, "%s", t);
    return;
  }
  out[0] = '\0';
  size_t used = 0;
  for (size_t i = 0; i < info->n_executables && used + 1 < cap; i++) {
    const kiln_vmfb_executable_info_t *e = &info->executables[i];
    const char *what = e->chip ? e->chip : e->format ? e->format : e->identifier;
    int n = snprintf(out + used, cap - used, "%s%s", used ? "," : "", what);
    if (n < 0) break;
    used += (size_t)n < cap - used ? (size_t)n : cap - used - 1;
  }
  if (!out[0]) snprintf(out, cap, "-");
}

int kiln_cli_scan(const kiln_cli_settings_t *settings, int argc, const char **argv) {
  if (argc < 1) {
    fprintf(stderr, "kiln: scan needs at least one file or directory (kiln scan PATH...)\n");
    return KILN_EXIT_USAGE;
  }
  kiln_cli_found_t *found = NULL;
  size_t n_found = 0;
  int worst = kiln_cli_vmfb_find("scan", argc, argv, &found, &n_found);
  if (worst == KILN_EXIT_USAGE) {
    kiln_cli_found_free(found, n_found);
    return worst;
  }

  size_t counts[3] = {0, 0, 0}, by_source[4] = {0, 0, 0, 0};
  json_object *files = settings->json ? json_object_new_array() : NULL;
  if (!files) printf("%-8s %-10s %-14s %s\n", "CLASS", "SOURCE", "TARGET", "FILE");
  for (size_t i = 0; i < n_found; i++) {
    const char *path = found[i].path;
    uint8_t *data = NULL;
    size_t len = 0;
    kiln_vmfb_info_t info;
    kiln_cli_vmfb_load(path, &data, &len, &info);
    const char *digest = NULL;
    source_kind_t src =
        info.cls == KILN_VMFB_CLASS_INVALID ? SOURCE_UNKNOWN : find_source(data, len, &info, &digest);
    char target[128];
    kiln_cli_vmfb_target_describe(&info, target, sizeof target);
    counts[info.cls]++;
    if (info.cls == KILN_VMFB_CLASS_LEGACY) by_source[src]++;
    worst = kiln_cli_vmfb_worst(worst, info.cls);
    if (files) {
      json_object *o = json_object_new_object();
      json_object_object_add(o, "path", json_object_new_string(path));
      json_object_object_add(o, "class", json_object_new_string(kiln_vmfb_class_name(info.cls)));
      json_object_object_add(o, "reason", json_object_new_string(info.reason ? info.reason : ""));
      json_object_object_add(o, "target", json_object_new_string(target));
      json_object_object_add(
          o, "source",
          info.cls == KILN_VMFB_CLASS_INVALID ? NULL : json_object_new_string(source_names[src]));
      json_object_object_add(o, "source_digest", digest ? json_object_new_string(digest) : NULL);
      json_object_array_add(files, o);
    } else {
      printf("%-8s %-10s %-14s %s\n", kiln_vmfb_class_name(info.cls),
             info.cls == KILN_VMFB_CLASS_INVALID ? "-" : source_names[src], target, path);
      if (info.cls != KILN_VMFB_CLASS_CURRENT) printf("         %s\n", info.reason);
    }
    kiln_vmfb_info_deinit(&info);
    kiln_free(data);
  }
  if (files) {
    json_object *doc = json_object_new_object();
    json_object_object_add(doc, "files", files);
    json_object *sum = json_object_new_object();
    json_object_object_add(sum, "files", json_object_new_int64((int64_t)n_found));
    json_object_object_add(sum, "current", json_object_new_int64((int64_t)counts[KILN_VMFB_CLASS_CURRENT]));
    json_object_object_add(sum, "legacy", json_object_new_int64((int64_t)counts[KILN_VMFB_CLASS_LEGACY]));
    json_object_object_add(sum, "invalid", json_object_new_int64((int64_t)counts[KILN_VMFB_CLASS_INVALID]));
    json_object *ls = json_object_new_object();
    for (int k = 0; k < 4; k++)
      json_object_object_add(ls, source_names[k], json_object_new_int64((int64_t)by_source[k]));
    json_object_object_add(sum, "legacy_by_source", ls);
    json_object_object_add(doc, "summary", sum);
    kiln_client_json_print(doc);
  } else {
    printf("\n%zu file(s): %zu current, %zu legacy, %zu invalid\n", n_found, counts[KILN_VMFB_CLASS_CURRENT],
           counts[KILN_VMFB_CLASS_LEGACY], counts[KILN_VMFB_CLASS_INVALID]);
    if (counts[KILN_VMFB_CLASS_LEGACY]) {
      printf(
          "legacy sources: %zu embedded, %zu by provenance digest (kilnd's cache may hold them), %zu unknown "
          "(need a manifest)%s\n",
          by_source[SOURCE_EMBEDDED], by_source[SOURCE_PROVENANCE],
          by_source[SOURCE_UNKNOWN] + by_source[SOURCE_DAMAGED],
          by_source[SOURCE_DAMAGED] ? ", some with a damaged embedded source" : "");
    }
  }
  kiln_cli_found_free(found, n_found);
  return worst;
}
