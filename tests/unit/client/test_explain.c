/* Unit tests for client/explain (its flags go through base/flags.h, tested in
 * tests/unit/base/test_flags.c and against kilnd in tests/unit/daemon/test_flags.c):
 * the verdict for each situation:
 * kilnd's lookup says hit; no artifact for the source; artifacts only for other
 * targets (listed, sorted, once each); same target with other flags (both lists
 * shown, normalized); same flags by an older compiler (both identities named);
 * both differ; an entry that matches every part while kilnd's lookup missed
 * ("unknown"), or when kilnd could not say (a hit by comparison); and that the
 * nearest entry prefers a compiler-only difference and, among equals, the newest
 * (first listed). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <stdbool.h>
#include <string.h>

#include "base/buf.h"
#include "client/cli.h"
#include "client/explain.h"
#include "kiln/v1/kiln.pb-c.h"

#define SRC "1111111111111111111111111111111111111111111111111111111111111111"

static Kiln__V1__CompilerIdentity current = {
    PROTOBUF_C_MESSAGE_INIT(&kiln__v1__compiler_identity__descriptor), "kiln-mlir", "0.2.0", "22.1.8",
    "22.1.8"};
static Kiln__V1__CompilerIdentity older = {PROTOBUF_C_MESSAGE_INIT(&kiln__v1__compiler_identity__descriptor),
                                           "kiln-mlir", "0.1.0", "22.1.7", "22.1.7"};

typedef struct art_s {
  Kiln__V1__ArtifactMetadata meta;
  Kiln__V1__Provenance prov;
} art_t;

static void art(art_t *a, const char *digest, const char *target, char **flags, size_t n_flags,
                Kiln__V1__CompilerIdentity *compiler) {
  kiln__v1__artifact_metadata__init(&a->meta);
  kiln__v1__provenance__init(&a->prov);
  a->meta.digest = (char *)digest;
  a->meta.canonical_target = (char *)target;
  a->meta.size_bytes = 1000;
  a->prov.source_digest = SRC;
  a->prov.flags = flags;
  a->prov.n_flags = n_flags;
  a->prov.compiler = compiler;
  a->meta.provenance = &a->prov;
}

static void explain(Kiln__V1__ArtifactMetadata **arts, size_t n, const char *target, char **flags,
                    size_t n_flags, kiln_cli_lookup_t lookup, const Kiln__V1__ArtifactMetadata *hit,
                    kiln_cli_explain_t *out) {
  kiln_cli_explain_input_t in = {SRC, target, flags, n_flags, &current, arts, n, lookup, hit};
  kiln_cli_explain_target(&in, out);
  assert_non_null(out->reason);
  assert_non_null(out->differs);
}

static void test_hit_by_lookup(void **state) {
  (void)state;
  art_t a;
  art(&a, "aaaa", "sm_89", NULL, 0, &current);
  Kiln__V1__ArtifactMetadata *arts[] = {&a.meta};
  kiln_cli_explain_t ex;
  explain(arts, 1, "sm_89", NULL, 0, KILN_CLI_LOOKUP_HIT, &a.meta, &ex);
  assert_true(ex.hit);
  assert_string_equal(ex.differs, "none");
  assert_ptr_equal(ex.nearest, &a.meta);
  assert_non_null(strstr(ex.reason, "aaaa"));
  kiln_cli_explain_deinit(&ex);
}

static void test_no_artifact_for_source(void **state) {
  (void)state;
  kiln_cli_explain_t ex;
  explain(NULL, 0, "sm_89", NULL, 0, KILN_CLI_LOOKUP_MISS, NULL, &ex);
  assert_false(ex.hit);
  assert_string_equal(ex.differs, "source");
  assert_null(ex.nearest);
  assert_non_null(strstr(ex.reason, "no artifact for this source on the server"));
  assert_non_null(strstr(ex.reason, SRC));
  kiln_cli_explain_deinit(&ex);
}

static void test_other_targets(void **state) {
  (void)state;
  art_t a, b, c;
  art(&a, "aaaa", "sm_89", NULL, 0, &current);
  art(&b, "bbbb", "gfx950", NULL, 0, &current);
  art(&c, "cccc", "sm_89", NULL, 0, &older);
  Kiln__V1__ArtifactMetadata *arts[] = {&a.meta, &b.meta, &c.meta};
  kiln_cli_explain_t ex;
  explain(arts, 3, "sm_120", NULL, 0, KILN_CLI_LOOKUP_MISS, NULL, &ex);
  assert_false(ex.hit);
  assert_string_equal(ex.differs, "target");
  assert_string_equal(ex.reason, "artifacts exist for this source for targets gfx950, sm_89 but not sm_120");
  kiln_cli_explain_deinit(&ex);
  explain(arts + 1, 1, "sm_120", NULL, 0, KILN_CLI_LOOKUP_MISS, NULL, &ex);
  assert_string_equal(ex.reason, "artifacts exist for this source for target gfx950 but not sm_120");
  kiln_cli_explain_deinit(&ex);
}

static void test_flags_differ(void **state) {
  (void)state;
  char *theirs[] = {"--iree-opt-level=O2"};
  art_t a;
  art(&a, "aaaa", "sm_89", theirs, 1, &current);
  Kiln__V1__ArtifactMetadata *arts[] = {&a.meta};
  char *mine[] = {"--iree-x", "--iree-opt-level=O1", "--iree-opt-level=O3"};
  kiln_cli_explain_t ex;
  explain(arts, 1, "sm_89", mine, 3, KILN_CLI_LOOKUP_MISS, NULL, &ex);
  assert_false(ex.hit);
  assert_string_equal(ex.differs, "flags");
  assert_string_equal(ex.reason,
                      "an artifact exists for this source and target with flags "
                      "[--iree-opt-level=O2] (yours: [--iree-opt-level=O3, --iree-x]): aaaa");
  kiln_cli_explain_deinit(&ex);
  /* Flags that normalize to the same list are not a difference. */
  char *same[] = {"--iree-opt-level=O1", "--iree-opt-level=O2"};
  explain(arts, 1, "sm_89", same, 2, KILN_CLI_LOOKUP_UNKNOWN, NULL, &ex);
  assert_true(ex.hit);
  assert_string_equal(ex.differs, "none");
  kiln_cli_explain_deinit(&ex);
}

static void test_compiler_differs(void **state) {
  (void)state;
  art_t a;
  art(&a, "abcdef0123456789", "sm_89", NULL, 0, &older);
  Kiln__V1__ArtifactMetadata *arts[] = {&a.meta};
  kiln_cli_explain_t ex;
  explain(arts, 1, "sm_89", NULL, 0, KILN_CLI_LOOKUP_MISS, NULL, &ex);
  assert_false(ex.hit);
  assert_string_equal(ex.differs, "compiler");
  assert_string_equal(ex.reason,
                      "cached artifact abcdef012345 was built by kiln-mlir 0.1.0 (LLVM 22.1.7); the "
                      "server now runs kiln-mlir 0.2.0 (LLVM 22.1.8), so the key differs");
  kiln_cli_explain_deinit(&ex);
}

static void test_both_differ_and_nearest(void **state) {
  (void)state;
  char *theirs[] = {"--iree-y"};
  art_t both, flags_only, compiler_only_new, compiler_only_old;
  art(&both, "1111", "sm_89", theirs, 1, &older);
  Kiln__V1__ArtifactMetadata *one[] = {&both.meta};
  kiln_cli_explain_t ex;
  explain(one, 1, "sm_89", NULL, 0, KILN_CLI_LOOKUP_MISS, NULL, &ex);
  assert_string_equal(ex.differs, "flags+compiler");
  assert_non_null(strstr(ex.reason, "[--iree-y] (yours: [])"));
  assert_non_null(strstr(ex.reason, "kiln-mlir 0.1.0"));
  kiln_cli_explain_deinit(&ex);
  /* Nearest: the compiler-only difference wins over the flags-only one; among two
   * compiler-only entries the first listed (newest). */
  art(&flags_only, "2222", "sm_89", theirs, 1, &current);
  art(&compiler_only_new, "3333", "sm_89", NULL, 0, &older);
  art(&compiler_only_old, "4444", "sm_89", NULL, 0, &older);
  Kiln__V1__ArtifactMetadata *arts[] = {&both.meta, &flags_only.meta, &compiler_only_new.meta,
                                        &compiler_only_old.meta};
  explain(arts, 4, "sm_89", NULL, 0, KILN_CLI_LOOKUP_MISS, NULL, &ex);
  assert_string_equal(ex.differs, "compiler");
  assert_ptr_equal(ex.nearest, &compiler_only_new.meta);
  kiln_cli_explain_deinit(&ex);
}

static void test_all_parts_match(void **state) {
  (void)state;
  art_t a;
  art(&a, "aaaa", "sm_89", NULL, 0, &current);
  Kiln__V1__ArtifactMetadata *arts[] = {&a.meta};
  kiln_cli_explain_t ex;
  explain(arts, 1, "sm_89", NULL, 0, KILN_CLI_LOOKUP_MISS, NULL, &ex);
  assert_false(ex.hit); /* kilnd's lookup is the authority */
  assert_string_equal(ex.differs, "unknown");
  kiln_cli_explain_deinit(&ex);
  explain(arts, 1, "sm_89", NULL, 0, KILN_CLI_LOOKUP_UNKNOWN, NULL, &ex);
  assert_true(ex.hit);
  assert_non_null(strstr(ex.reason, "by comparison"));
  kiln_cli_explain_deinit(&ex);
}

static void test_compiler_format(void **state) {
  (void)state;
  kiln_buf_t b;
  kiln_buf_init(&b);
  kiln_cli_compiler_format(&current, &b);
  assert_string_equal(b.data, "kiln-mlir 0.2.0 (LLVM 22.1.8)");
  kiln_buf_clear(&b);
  kiln_cli_compiler_format(NULL, &b);
  assert_string_equal(b.data, "an unknown compiler");
  kiln_buf_deinit(&b);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_hit_by_lookup),    cmocka_unit_test(test_no_artifact_for_source),
      cmocka_unit_test(test_other_targets),    cmocka_unit_test(test_flags_differ),
      cmocka_unit_test(test_compiler_differs), cmocka_unit_test(test_both_differ_and_nearest),
      cmocka_unit_test(test_all_parts_match),  cmocka_unit_test(test_compiler_format),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
