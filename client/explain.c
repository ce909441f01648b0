/* Which cache-key part differs. The key is (source digest, canonical target,
 * normalized flags, compiler identity); FindArtifacts by source gives every stored
 * entry that agrees on the first part, so the nearest entry is the one among them
 * agreeing on the most of the rest: same target first, then same flags and same
 * compiler (an entry that differs only in its compiler is nearer than one that
 * differs only in flags: the user's own input matches it), newest first on ties.
 * The GetArtifact lookup, when available, decides hit or miss; the comparison only
 * explains it. */
#include "client/explain.h"

#include <stdlib.h>
#include <string.h>

#include "base/alloc.h"
#include "base/buf.h"
#include "base/flags.h"
#include "client/cli.h"

static bool str_eq(const char *a, const char *b) { return strcmp(a ? a : "", b ? b : "") == 0; }

static bool compiler_equal(const Kiln__V1__CompilerIdentity *a, const Kiln__V1__CompilerIdentity *b) {
  if (!a || !b) return !a && !b;
  return str_eq(a->name, b->name) && str_eq(a->version, b->version) &&
         str_eq(a->llvm_version, b->llvm_version) && str_eq(a->mlir_version, b->mlir_version);
}

void kiln_cli_compiler_format(const Kiln__V1__CompilerIdentity *c, kiln_buf_t *out) {
  if (!c || !c->name || !*c->name) {
    kiln_buf_append_str(out, "an unknown compiler");
    return;
  }
  kiln_buf_appendf(out, "%s %s", c->name, c->version ? c->version : "?");
  if (c->llvm_version && *c->llvm_version) kiln_buf_appendf(out, " (LLVM %s)", c->llvm_version);
}

static void format_flags(char *const *flags, size_t n, kiln_buf_t *out) {
  kiln_buf_append_char(out, '[');
  for (size_t i = 0; i < n; i++) kiln_buf_appendf(out, "%s%s", i ? ", " : "", flags[i]);
  kiln_buf_append_char(out, ']');
}

static bool flags_equal(char *const *a, size_t na, char *const *b, size_t nb) {
  if (na != nb) return false;
  for (size_t i = 0; i < na; i++) {
    if (strcmp(a[i], b[i]) != 0) return false;
  }
  return true;
}

static int cmp_str(const void *a, const void *b) {
  return strcmp(*(const char *const *)a, *(const char *const *)b);
}

void kiln_cli_explain_target(const kiln_cli_explain_input_t *in, kiln_cli_explain_t *out) {
  memset(out, 0, sizeof out[0]);
  kiln_buf_t r;
  kiln_buf_init(&r);
  char **mine = NULL;
  size_t n_mine = 0;
  n_mine = kiln_flags_normalize((const char *const *)in->flags, in->n_flags, &mine);

  if (in->lookup == KILN_CLI_LOOKUP_HIT && in->hit) {
    out->hit = true;
    out->differs = "none";
    out->nearest = in->hit;
    kiln_buf_appendf(&r, "Compile would answer from the cache with artifact %s (%llu bytes)", in->hit->digest,
                     (unsigned long long)in->hit->size_bytes);
    goto done;
  }
  if (in->n_artifacts == 0) {
    out->differs = "source";
    kiln_buf_appendf(&r,
                     "no artifact for this source on the server (source digest %s was never "
                     "compiled here, or its artifacts were evicted)",
                     in->source_digest);
    goto done;
  }
  /* The nearest entry for this target: 0 all equal, 1 compiler differs, 2 flags
   * differ, 3 both. Artifacts come newest first, so a strict < keeps the newest. */
  int best_score = 4;
  const Kiln__V1__ArtifactMetadata *best = NULL;
  char **best_flags = NULL;
  size_t n_best_flags = 0;
  for (size_t i = 0; i < in->n_artifacts; i++) {
    const Kiln__V1__ArtifactMetadata *a = in->artifacts[i];
    if (strcmp(a->canonical_target ? a->canonical_target : "", in->target) != 0) continue;
    char **theirs = NULL;
    size_t n_theirs = 0;
    const Kiln__V1__Provenance *p = a->provenance;
    n_theirs = kiln_flags_normalize(p ? (const char *const *)p->flags : NULL, p ? p->n_flags : 0, &theirs);
    bool same_compiler = !in->compiler || compiler_equal(p ? p->compiler : NULL, in->compiler);
    int score = (flags_equal(mine, n_mine, theirs, n_theirs) ? 0 : 2) + (same_compiler ? 0 : 1);
    if (score < best_score) {
      best_score = score;
      best = a;
      kiln_cli_strings_free(best_flags, n_best_flags);
      best_flags = theirs;
      n_best_flags = n_theirs;
    } else {
      kiln_cli_strings_free(theirs, n_theirs);
    }
  }
  out->nearest = best;
  if (!best) {
    /* Distinct targets of this source, sorted. */
    const char **names = kiln_calloc(in->n_artifacts, sizeof *names);
    size_t n = 0;
    for (size_t i = 0; i < in->n_artifacts; i++) {
      const char *t = in->artifacts[i]->canonical_target ? in->artifacts[i]->canonical_target : "?";
      size_t k = 0;
      while (k < n && strcmp(names[k], t) != 0) k++;
      if (k == n) names[n++] = t;
    }
    qsort(names, n, sizeof *names, cmp_str);
    out->differs = "target";
    kiln_buf_append_str(&r, "artifacts exist for this source for target");
    kiln_buf_append_str(&r, n > 1 ? "s " : " ");
    for (size_t i = 0; i < n; i++) kiln_buf_appendf(&r, "%s%s", i ? ", " : "", names[i]);
    kiln_buf_appendf(&r, " but not %s", in->target);
    kiln_free(names);
  } else if (best_score == 0) {
    if (in->lookup == KILN_CLI_LOOKUP_MISS) {
      out->differs = "unknown";
      kiln_buf_appendf(&r,
                       "artifact %s matches this source, target, flags and compiler, yet kilnd "
                       "finds nothing under your key: it may have just been evicted, or kilnd "
                       "normalizes the flags differently than this client",
                       best->digest);
    } else {
      out->hit = true;
      out->differs = "none";
      kiln_buf_appendf(&r,
                       "artifact %s (%llu bytes) matches every part of the key (by comparison; "
                       "kilnd could not confirm it)",
                       best->digest, (unsigned long long)best->size_bytes);
    }
  } else {
    const Kiln__V1__CompilerIdentity *theirs = best->provenance ? best->provenance->compiler : NULL;
    if (best_score == 2) {
      out->differs = "flags";
      kiln_buf_append_str(&r, "an artifact exists for this source and target with flags ");
      format_flags(best_flags, n_best_flags, &r);
      kiln_buf_append_str(&r, " (yours: ");
      format_flags(mine, n_mine, &r);
      kiln_buf_appendf(&r, "): %s", best->digest);
    } else {
      bool both = best_score == 3;
      out->differs = both ? "flags+compiler" : "compiler";
      if (both) {
        kiln_buf_append_str(&r, "the nearest artifact for this source and target has flags ");
        format_flags(best_flags, n_best_flags, &r);
        kiln_buf_append_str(&r, " (yours: ");
        format_flags(mine, n_mine, &r);
        kiln_buf_append_str(&r, ") and ");
      } else {
        kiln_buf_append_str(&r, "cached artifact ");
        kiln_buf_appendf(&r, "%.12s ", best->digest);
      }
      kiln_buf_append_str(&r, "was built by ");
      kiln_cli_compiler_format(theirs, &r);
      kiln_buf_append_str(&r, "; the server now runs ");
      kiln_cli_compiler_format(in->compiler, &r);
      kiln_buf_append_str(&r, ", so the key differs");
    }
  }
  kiln_cli_strings_free(best_flags, n_best_flags);
done:
  kiln_cli_strings_free(mine, n_mine);
  out->reason = kiln_buf_take(&r);
}

void kiln_cli_explain_deinit(kiln_cli_explain_t *explain) {
  kiln_free(explain->reason);
  memset(explain, 0, sizeof *explain);
}
