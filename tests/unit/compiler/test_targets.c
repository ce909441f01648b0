/* Tests for compiler/targets.c: the registry's invariants (unique names, fields
 * consistent with kind), the device facts later stages rely on, lookups by id,
 * alias and "<device>:<name>", the diagnostics of resolve, and list parsing. */
#include <ctype.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <strings.h>

#include <cmocka.h>

#include "base/status.h"
#include "compiler/targets.h"

/* A pointer no lookup can return, to prove out-params are cleared or untouched. */
static const kiln_target_t sentinel_target;
#define SENTINEL (&sentinel_target)

static void to_upper(const char *in, char *out, size_t size) {
  size_t i = 0;
  for (; in[i] && i + 1 < size; i++) out[i] = (char)toupper((unsigned char)in[i]);
  out[i] = '\0';
}

/* "sM_89"-style: alternate case, starting with the first letter as-is. */
static void to_mixed(const char *in, char *out, size_t size) {
  size_t i = 0;
  for (; in[i] && i + 1 < size; i++) {
    unsigned char c = (unsigned char)in[i];
    out[i] = (char)((i % 2) ? toupper(c) : tolower(c));
  }
  out[i] = '\0';
}

static const kiln_target_t *must_find(const char *name) {
  const kiln_target_t *t = kiln_compiler_target_find(name);
  if (!t) fail_msg("kiln_compiler_target_find(\"%s\") returned NULL", name);
  return t;
}

/* ---- Table shape ----------------------------------------------------------- */

static void test_count_and_at(void **state) {
  (void)state;
  size_t count = kiln_compiler_target_count();
  assert_true(count > 0);
  for (size_t i = 0; i < count; i++) {
    const kiln_target_t *t = kiln_compiler_target_at(i);
    assert_non_null(t);
    for (size_t j = 0; j < i; j++) assert_ptr_not_equal(t, kiln_compiler_target_at(j));
  }
  assert_null(kiln_compiler_target_at(count));
  assert_null(kiln_compiler_target_at(count + 1000));
  assert_null(kiln_compiler_target_at(SIZE_MAX));
}

static void test_required_targets_present(void **state) {
  (void)state;
  static const struct {
    const char *id;
    kiln_target_kind_t kind;
  } required[] = {
      {"sm_89", KILN_TARGET_KIND_CUDA},           {"sm_120", KILN_TARGET_KIND_CUDA},
      {"sm_121", KILN_TARGET_KIND_CUDA},          {"gfx950", KILN_TARGET_KIND_HIP},
      {"gfx942", KILN_TARGET_KIND_HIP},           {"gfx1100", KILN_TARGET_KIND_HIP},
      {"gfx1201", KILN_TARGET_KIND_HIP},          {"arm5gen", KILN_TARGET_KIND_VULKAN},
      {"valhall1", KILN_TARGET_KIND_VULKAN},      {"valhall2", KILN_TARGET_KIND_VULKAN},
      {"valhall3", KILN_TARGET_KIND_VULKAN},      {"valhall4", KILN_TARGET_KIND_VULKAN},
      {"videocore_vii", KILN_TARGET_KIND_VULKAN}, {"x86_64", KILN_TARGET_KIND_CPU},
  };
  for (size_t i = 0; i < sizeof required / sizeof required[0]; i++) {
    const kiln_target_t *t = must_find(required[i].id);
    assert_string_equal(t->id, required[i].id);
    assert_int_equal(t->kind, required[i].kind);
  }
}

/* Every id and alias, in any case, finds its own entry, both through find and
 * resolve. */
static void test_every_name_resolves_case_insensitively(void **state) {
  (void)state;
  char upper[128], mixed[128];
  for (size_t i = 0; i < kiln_compiler_target_count(); i++) {
    const kiln_target_t *t = kiln_compiler_target_at(i);
    const char *names[64];
    size_t n = 0;
    names[n++] = t->id;
    assert_non_null(t->aliases);
    for (const char *const *a = t->aliases; *a; a++) {
      assert_true(n < sizeof names / sizeof names[0]);
      names[n++] = *a;
    }
    for (size_t k = 0; k < n; k++) {
      to_upper(names[k], upper, sizeof upper);
      to_mixed(names[k], mixed, sizeof mixed);
      assert_ptr_equal(kiln_compiler_target_find(names[k]), t);
      assert_ptr_equal(kiln_compiler_target_find(upper), t);
      assert_ptr_equal(kiln_compiler_target_find(mixed), t);

      const kiln_target_t *resolved = SENTINEL;
      kiln_status_t status = kiln_compiler_target_resolve(upper, &resolved);
      if (status) fail_msg("resolve(\"%s\"): %s", upper, kiln_status_message(status));
      assert_ptr_equal(resolved, t);
    }
    /* The chip name the backend wants is itself a usable name (but LLVM's
     * "generic" CPU, the Armv8-A baseline, which would be ambiguous). */
    if (strcmp(t->chip, "generic") != 0) assert_ptr_equal(kiln_compiler_target_find(t->chip), t);
  }
}

/* Ids and aliases are unique across the table, ignoring case, so no name is
 * ambiguous; none contains ':' (the device-prefix separator) or spaces. */
static void test_names_unique_across_table(void **state) {
  (void)state;
  const char *all[512];
  size_t n = 0;
  for (size_t i = 0; i < kiln_compiler_target_count(); i++) {
    const kiln_target_t *t = kiln_compiler_target_at(i);
    assert_true(n < sizeof all / sizeof all[0]);
    all[n++] = t->id;
    for (const char *const *a = t->aliases; *a; a++) {
      assert_true(n < sizeof all / sizeof all[0]);
      all[n++] = *a;
    }
  }
  for (size_t i = 0; i < n; i++) {
    assert_true(all[i][0] != '\0');
    assert_null(strchr(all[i], ':'));
    assert_null(strpbrk(all[i], " \t,"));
    for (size_t j = 0; j < i; j++) {
      if (strcasecmp(all[i], all[j]) == 0) fail_msg("name \"%s\" appears twice", all[i]);
    }
  }
}

static void assert_nonempty(const char *s) {
  assert_non_null(s);
  assert_true(s[0] != '\0');
}

static int starts_with(const char *s, const char *prefix) { return strncmp(s, prefix, strlen(prefix)) == 0; }

static void test_fields_consistent_with_kind(void **state) {
  (void)state;
  for (size_t i = 0; i < kiln_compiler_target_count(); i++) {
    const kiln_target_t *t = kiln_compiler_target_at(i);
    assert_nonempty(t->id);
    assert_nonempty(t->hal_device);
    assert_nonempty(t->hal_backend);
    assert_nonempty(t->executable_format);
    assert_nonempty(t->chip_flag);
    assert_nonempty(t->chip);
    assert_nonempty(t->description);
    assert_null(strchr(t->description, '\n'));
    assert_string_not_equal(kiln_compiler_target_kind_name(t->kind), "unknown");

    const kiln_target_gpu_limits_t *l = &t->limits;
    if (t->kind == KILN_TARGET_KIND_CPU) {
      assert_string_equal(t->hal_device, "local");
      assert_string_equal(t->hal_backend, "llvm-cpu");
      assert_true(starts_with(t->executable_format, "embedded-elf-"));
      /* IREE's arch names: x86_64, arm_64 (never aarch64), riscv_64. */
      assert_string_equal(t->executable_format + strlen("embedded-elf-"),
                          starts_with(t->llvm_triple, "x86_64-")    ? "x86_64"
                          : starts_with(t->llvm_triple, "riscv64-") ? "riscv_64"
                                                                    : "arm_64");
      /* RISC-V's floats are in hardware registers or nowhere (no soft-float library). */
      if (starts_with(t->llvm_triple, "riscv64-")) assert_string_equal(t->cpu_abi, "lp64d");
      assert_string_equal(t->chip_flag, "iree-llvmcpu-target-cpu");
      assert_nonempty(t->llvm_triple);
      assert_int_equal(l->subgroup_size, 0);
      assert_int_equal(l->max_workgroup_invocations, 0);
      assert_int_equal(l->max_shared_memory_bytes, 0);
      assert_int_equal(t->compute_units, 0);
    } else {
      /* GPU: the chip is the id, and the limits are coherent. */
      assert_string_equal(t->chip, t->id);
      assert_string_equal(t->hal_device, kiln_compiler_target_kind_name(t->kind));
      assert_true(l->subgroup_size == 16 || l->subgroup_size == 32 || l->subgroup_size == 64);
      assert_int_equal(l->max_workgroup_invocations % l->subgroup_size, 0);
      uint64_t product = 1;
      for (int d = 0; d < 3; d++) {
        assert_true(l->max_workgroup_size[d] >= 1);
        assert_true(l->max_workgroup_size[d] <= l->max_workgroup_invocations);
        product *= l->max_workgroup_size[d];
      }
      assert_true(l->max_workgroup_invocations <= product);
      assert_true(l->max_shared_memory_bytes >= 16 * 1024);
      /* Compute units: recorded for every CUDA and HIP chip (the tiling's
       * workgroup floor follows them there), at most a flagship's few hundred. */
      if (t->kind != KILN_TARGET_KIND_VULKAN) assert_true(t->compute_units >= 16);
      assert_true(t->compute_units <= 512);
    }

    switch (t->kind) {
      case KILN_TARGET_KIND_CUDA:
        assert_string_equal(t->hal_backend, "cuda");
        assert_string_equal(t->executable_format, "cuda-nvptx-fb");
        assert_string_equal(t->chip_flag, "iree-cuda-target");
        assert_string_equal(t->llvm_triple, "nvptx64-nvidia-cuda");
        assert_true(starts_with(t->id, "sm_"));
        assert_true(t->ptx_version >= 78);
        assert_int_equal(t->spirv_version_major, 0);
        assert_int_equal(t->limits.subgroup_size, 32);
        break;
      case KILN_TARGET_KIND_HIP:
        assert_string_equal(t->hal_backend, "rocm");
        assert_string_equal(t->executable_format, "rocm-hsaco-fb");
        assert_string_equal(t->chip_flag, "iree-rocm-target");
        assert_string_equal(t->llvm_triple, "amdgcn-amd-amdhsa");
        assert_true(starts_with(t->id, "gfx"));
        assert_int_equal(t->ptx_version, 0);
        assert_int_equal(t->spirv_version_major, 0);
        /* CDNA (gfx9xx) is wave64; RDNA (gfx10xx and later) wave32. */
        assert_int_equal(t->limits.subgroup_size, strlen(t->id) == 6 ? 64 : 32);
        break;
      case KILN_TARGET_KIND_VULKAN:
        assert_string_equal(t->hal_backend, "vulkan-spirv");
        assert_string_equal(t->executable_format, "vulkan-spirv-fb");
        assert_string_equal(t->chip_flag, "iree-vulkan-target");
        assert_null(t->llvm_triple);
        assert_int_equal(t->ptx_version, 0);
        assert_int_equal(t->spirv_version_major, 1);
        assert_true(t->spirv_version_minor >= 3 && t->spirv_version_minor <= 6);
        break;
      case KILN_TARGET_KIND_CPU:
        assert_int_equal(t->ptx_version, 0);
        assert_int_equal(t->spirv_version_major, 0);
        break;
      default: fail_msg("target %s has kind %d", t->id, (int)t->kind);
    }
  }
}

/* ---- Facts from IREE ------------------------------------------------------- */

static void test_cuda_ptx_versions(void **state) {
  (void)state;
  assert_int_equal(must_find("sm_89")->ptx_version, 78);
  assert_int_equal(must_find("sm_120")->ptx_version, 87);
  assert_int_equal(must_find("sm_121")->ptx_version, 88);
}

static void test_vulkan_profiles(void **state) {
  (void)state;
  const kiln_target_t *vc = must_find("videocore_vii");
  assert_int_equal(vc->spirv_version_major, 1);
  assert_int_equal(vc->spirv_version_minor, 3);
  assert_int_equal(vc->limits.subgroup_size, 16);
  assert_int_equal(vc->limits.max_workgroup_invocations, 256);
  assert_int_equal(vc->limits.max_shared_memory_bytes, 16 * 1024);

  const kiln_target_t *arm = must_find("arm5gen");
  assert_int_equal(arm->spirv_version_minor, 6);
  assert_int_equal(arm->limits.subgroup_size, 16);
  assert_int_equal(arm->limits.max_workgroup_invocations, 1024);
  assert_int_equal(arm->limits.max_shared_memory_bytes, 32 * 1024);

  const kiln_target_t *valhall = must_find("valhall4");
  assert_int_equal(valhall->limits.subgroup_size, 16);
  assert_int_equal(valhall->limits.max_workgroup_invocations, 512);
}

static void test_amd_wavefronts(void **state) {
  (void)state;
  assert_int_equal(must_find("gfx950")->limits.subgroup_size, 64);
  assert_int_equal(must_find("gfx942")->limits.subgroup_size, 64);
  assert_int_equal(must_find("gfx1100")->limits.subgroup_size, 32);
  assert_int_equal(must_find("gfx1201")->limits.subgroup_size, 32);
  assert_int_equal(must_find("gfx950")->limits.max_shared_memory_bytes, 160 * 1024);
}

static void test_aliases_map_to_expected_targets(void **state) {
  (void)state;
  static const struct {
    const char *alias, *id;
  } cases[] = {
      {"ada", "sm_89"},           {"rtx4090", "sm_89"},
      {"L40S", "sm_89"},          {"rtx5090", "sm_120"},
      {"rtx-pro-6000", "sm_120"}, {"gb10", "sm_121"},
      {"dgx-spark", "sm_121"},    {"mi355x", "gfx950"},
      {"cdna4", "gfx950"},        {"MI300X", "gfx942"},
      {"mi300a", "gfx942"},       {"mi325x", "gfx942"},
      {"rdna3", "gfx1100"},       {"rx7900xtx", "gfx1100"},
      {"w7800", "gfx1100"},       {"rdna4", "gfx1201"},
      {"rx9070xt", "gfx1201"},    {"mali-g720", "arm5gen"},
      {"mali-g725", "arm5gen"},   {"valhall", "valhall1"},
      {"mali-g57", "valhall1"},   {"mali-g78", "valhall2"},
      {"mali-g710", "valhall3"},  {"mali-g715", "valhall4"},
      {"mali-g615", "valhall4"},  {"rpi5", "videocore_vii"},
      {"vc7", "videocore_vii"},   {"raspberrypi5", "videocore_vii"},
      {"host", "x86_64"},         {"cpu", "x86_64"},
      {"llvm-cpu", "x86_64"},
  };
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
    assert_string_equal(must_find(cases[i].alias)->id, cases[i].id);
  }
  /* Ambiguous or unserved names stay unknown. */
  assert_null(kiln_compiler_target_find("blackwell"));
  assert_null(kiln_compiler_target_find("sm_90"));
  assert_null(kiln_compiler_target_find("gfx90a"));
}

/* ---- Lookup edge cases ----------------------------------------------------- */

static void test_find_rejects_near_misses(void **state) {
  (void)state;
  assert_null(kiln_compiler_target_find(NULL));
  assert_null(kiln_compiler_target_find(""));
  assert_null(kiln_compiler_target_find(" sm_89"));
  assert_null(kiln_compiler_target_find("sm_89 "));
  assert_null(kiln_compiler_target_find("sm_8"));
  assert_null(kiln_compiler_target_find("sm_899"));
  assert_null(kiln_compiler_target_find("sm_89,gfx950"));
}

static void test_find_device_prefixed(void **state) {
  (void)state;
  assert_string_equal(must_find("cuda:sm_89")->id, "sm_89");
  assert_string_equal(must_find("CUDA:RTX4090")->id, "sm_89");
  assert_string_equal(must_find("hip:mi300x")->id, "gfx942");
  assert_string_equal(must_find("rocm:gfx942")->id, "gfx942");
  assert_string_equal(must_find("vulkan:rpi5")->id, "videocore_vii");
  assert_string_equal(must_find("vulkan-spirv:arm5gen")->id, "arm5gen");
  assert_string_equal(must_find("local:x86_64")->id, "x86_64");
  assert_string_equal(must_find("llvm-cpu:host")->id, "x86_64");
  assert_string_equal(must_find("cpu:host")->id, "x86_64");

  assert_null(kiln_compiler_target_find("vulkan:sm_89"));
  assert_null(kiln_compiler_target_find("hip:sm_89"));
  assert_null(kiln_compiler_target_find("metal:sm_89"));
  assert_null(kiln_compiler_target_find(":sm_89"));
  assert_null(kiln_compiler_target_find("cuda:"));
  assert_null(kiln_compiler_target_find("cuda:cuda:sm_89"));
}

/* ---- resolve diagnostics --------------------------------------------------- */

static void assert_lists_every_id(const char *message) {
  for (size_t i = 0; i < kiln_compiler_target_count(); i++) {
    const char *id = kiln_compiler_target_at(i)->id;
    if (!strstr(message, id)) fail_msg("message lacks id %s: %s", id, message);
  }
}

static KILN_MUST_USE kiln_status_t resolve_expecting_failure(const char *name) {
  const kiln_target_t *t = SENTINEL;
  kiln_status_t status = kiln_compiler_target_resolve(name, &t);
  assert_non_null(status);
  assert_int_equal(kiln_status_code(status), KILN_STATUS_INVALID_ARGUMENT);
  assert_null(t); /* cleared on entry, not written on failure */
  return status;
}

static void test_resolve_unknown_suggests_and_lists(void **state) {
  (void)state;
  kiln_status_t status = resolve_expecting_failure("sm_98");
  const char *m = kiln_status_message(status);
  assert_non_null(strstr(m, "'sm_98'"));
  assert_non_null(strstr(m, "did you mean 'sm_89'?"));
  assert_lists_every_id(m);
  kiln_status_free(status);

  /* An alias suggestion names its canonical id too. */
  status = resolve_expecting_failure("RTX4900");
  m = kiln_status_message(status);
  assert_non_null(strstr(m, "did you mean 'rtx4090', an alias of sm_89?"));
  kiln_status_free(status);

  status = resolve_expecting_failure("gfx95");
  assert_non_null(strstr(kiln_status_message(status), "did you mean 'gfx950'?"));
  kiln_status_free(status);

  status = resolve_expecting_failure("mali-g72");
  assert_non_null(strstr(kiln_status_message(status), "did you mean 'mali-g720', an alias of arm5gen?"));
  kiln_status_free(status);

  /* Too far from anything: no guess, but still the list of ids. */
  status = resolve_expecting_failure("sm_90");
  m = kiln_status_message(status);
  assert_null(strstr(m, "did you mean"));
  assert_lists_every_id(m);
  kiln_status_free(status);

  status = resolve_expecting_failure("tpu-v5e");
  m = kiln_status_message(status);
  assert_non_null(strstr(m, "'tpu-v5e'"));
  assert_null(strstr(m, "did you mean"));
  assert_lists_every_id(m);
  kiln_status_free(status);
}

static void test_resolve_empty_and_null(void **state) {
  (void)state;
  kiln_status_t status = resolve_expecting_failure("");
  assert_non_null(strstr(kiln_status_message(status), "empty target name"));
  assert_lists_every_id(kiln_status_message(status));
  kiln_status_free(status);

  status = resolve_expecting_failure(NULL);
  assert_non_null(strstr(kiln_status_message(status), "empty target name"));
  kiln_status_free(status);
}

static void test_resolve_wrong_device_prefix(void **state) {
  (void)state;
  kiln_status_t status = resolve_expecting_failure("vulkan:rtx4090");
  const char *m = kiln_status_message(status);
  assert_non_null(strstr(m, "'vulkan:rtx4090'"));
  assert_non_null(strstr(m, "sm_89, a cuda target"));
  assert_non_null(strstr(m, "'cuda:sm_89'"));
  kiln_status_free(status);
}

/* User text in messages is bounded and cannot carry control characters. */
static void test_resolve_quotes_hostile_names_safely(void **state) {
  (void)state;
  char long_name[1000];
  memset(long_name, 'x', sizeof long_name - 1);
  long_name[sizeof long_name - 1] = '\0';
  kiln_status_t status = resolve_expecting_failure(long_name);
  const char *m = kiln_status_message(status);
  assert_non_null(strstr(m, "xxx...'"));
  assert_true(strlen(m) < 800);
  kiln_status_free(status);

  status = resolve_expecting_failure("evil\nlevel=error msg=forged\x1b[0m");
  m = kiln_status_message(status);
  assert_null(strchr(m, '\n'));
  assert_null(strchr(m, '\x1b'));
  assert_non_null(strstr(m, "'evil?level=error"));
  kiln_status_free(status);
}

/* ---- resolve_list ---------------------------------------------------------- */

static void assert_list(const char *list, size_t capacity, const char *const *expected_ids,
                        size_t expected_count) {
  const kiln_target_t *out[64];
  size_t count = 12345;
  assert_true(capacity <= 64);
  kiln_status_t status = kiln_compiler_target_resolve_list(list, out, capacity, &count);
  if (status) fail_msg("resolve_list(\"%s\"): %s", list, kiln_status_message(status));
  assert_int_equal(count, expected_count);
  for (size_t i = 0; i < expected_count; i++) assert_string_equal(out[i]->id, expected_ids[i]);
}

static KILN_MUST_USE kiln_status_t list_expecting_failure(const char *list, size_t capacity) {
  const kiln_target_t *out[64];
  for (size_t i = 0; i < 64; i++) out[i] = SENTINEL;
  size_t count = 12345;
  kiln_status_t status = kiln_compiler_target_resolve_list(list, out, capacity, &count);
  if (!status) fail_msg("resolve_list(\"%s\", %zu) succeeded", list ? list : "(null)", capacity);
  assert_int_equal(kiln_status_code(status), KILN_STATUS_INVALID_ARGUMENT);
  assert_int_equal(count, 0);
  for (size_t i = 0; i < 64; i++) assert_ptr_equal(out[i], SENTINEL); /* untouched */
  return status;
}

static void test_list_basic_and_order(void **state) {
  (void)state;
  static const char *const three[] = {"sm_89", "gfx950", "gfx1100"};
  assert_list("sm_89,gfx950, rdna3", 16, three, 3);
  static const char *const reversed[] = {"gfx1100", "gfx950", "sm_89"};
  assert_list("rdna3,gfx950,sm_89", 16, reversed, 3);
  static const char *const one[] = {"videocore_vii"};
  assert_list("rpi5", 1, one, 1);
}

static void test_list_dedupes_by_canonical_id(void **state) {
  (void)state;
  static const char *const expected[] = {"sm_89", "gfx950"};
  assert_list("sm_89,ada,RTX4090,gfx950,cuda:sm_89,mi355x", 16, expected, 2);
  /* Duplicates do not count against capacity. */
  static const char *const just_one[] = {"sm_89"};
  assert_list("sm_89,ada,rtx4090", 1, just_one, 1);
}

static void test_list_trims_spaces_and_tabs(void **state) {
  (void)state;
  static const char *const expected[] = {"sm_89", "gfx942", "x86_64"};
  assert_list("  sm_89 ,\tgfx942\t,host   ", 16, expected, 3);
  static const char *const prefixed[] = {"sm_121", "arm5gen"};
  assert_list(" cuda:gb10 , vulkan:mali-g720", 16, prefixed, 2);
}

static void test_list_rejects_empty_entries(void **state) {
  (void)state;
  static const struct {
    const char *list;
    const char *entry;
  } cases[] = {
      {"", "entry 1"},
      {"   ", "entry 1"},
      {",", "entry 1"},
      {"sm_89,", "entry 2"},
      {",sm_89", "entry 1"},
      {"sm_89,,gfx950", "entry 2"},
      {"sm_89, ,gfx950", "entry 2"},
      {"sm_89,gfx950,\t", "entry 3"},
  };
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
    kiln_status_t status = list_expecting_failure(cases[i].list, 16);
    const char *m = kiln_status_message(status);
    if (!strstr(m, cases[i].entry) || !strstr(m, "empty")) {
      fail_msg("list \"%s\": message %s", cases[i].list, m);
    }
    kiln_status_free(status);
  }
  kiln_status_free(list_expecting_failure(NULL, 16));
}

static void test_list_unknown_names_entry(void **state) {
  (void)state;
  kiln_status_t status = list_expecting_failure("sm_89, gfx95 ,gfx942", 16);
  const char *m = kiln_status_message(status);
  assert_non_null(strstr(m, "target list entry 2"));
  assert_non_null(strstr(m, "'gfx95'"));
  assert_non_null(strstr(m, "did you mean 'gfx950'?"));
  assert_lists_every_id(m);
  kiln_status_free(status);
}

static void test_list_capacity(void **state) {
  (void)state;
  kiln_status_t status = list_expecting_failure("sm_89,gfx950,arm5gen", 2);
  const char *m = kiln_status_message(status);
  assert_non_null(strstr(m, "more than 2"));
  assert_non_null(strstr(m, "entry 3"));
  kiln_status_free(status);

  kiln_status_free(list_expecting_failure("sm_89", 0));

  static const char *const two[] = {"sm_89", "gfx950"};
  assert_list("sm_89,gfx950", 2, two, 2);

  /* With no room at all, a NULL array is allowed and never written. */
  size_t count = 99;
  kiln_status_t no_room = kiln_compiler_target_resolve_list("sm_89,ada", NULL, 0, &count);
  assert_int_equal(kiln_status_code(no_room), KILN_STATUS_INVALID_ARGUMENT);
  assert_int_equal(count, 0);
  kiln_status_free(no_room);
}

/* Every id at once fits in kiln_compiler_target_count() slots, in table order. */
static void test_list_whole_table(void **state) {
  (void)state;
  char list[2048] = "";
  size_t n = kiln_compiler_target_count();
  const char *ids[64];
  assert_true(n <= 64);
  for (size_t i = 0; i < n; i++) {
    ids[i] = kiln_compiler_target_at(i)->id;
    if (i) strcat(list, ",");
    strcat(list, ids[i]);
  }
  /* Repeat the whole list to prove de-duplication keeps it within capacity. */
  char doubled[4200];
  snprintf(doubled, sizeof doubled, "%s,%s", list, list);
  assert_list(doubled, n, ids, n);
}

static void test_kind_names(void **state) {
  (void)state;
  assert_string_equal(kiln_compiler_target_kind_name(KILN_TARGET_KIND_CUDA), "cuda");
  assert_string_equal(kiln_compiler_target_kind_name(KILN_TARGET_KIND_HIP), "hip");
  assert_string_equal(kiln_compiler_target_kind_name(KILN_TARGET_KIND_VULKAN), "vulkan");
  assert_string_equal(kiln_compiler_target_kind_name(KILN_TARGET_KIND_CPU), "cpu");
  assert_string_equal(kiln_compiler_target_kind_name((kiln_target_kind_t)0), "unknown");
  assert_string_equal(kiln_compiler_target_kind_name((kiln_target_kind_t)99), "unknown");
  /* Numerically equal to kiln.v1.TargetKind. */
  assert_int_equal(KILN_TARGET_KIND_CUDA, 1);
  assert_int_equal(KILN_TARGET_KIND_HIP, 2);
  assert_int_equal(KILN_TARGET_KIND_VULKAN, 3);
  assert_int_equal(KILN_TARGET_KIND_CPU, 4);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_count_and_at),
      cmocka_unit_test(test_required_targets_present),
      cmocka_unit_test(test_every_name_resolves_case_insensitively),
      cmocka_unit_test(test_names_unique_across_table),
      cmocka_unit_test(test_fields_consistent_with_kind),
      cmocka_unit_test(test_cuda_ptx_versions),
      cmocka_unit_test(test_vulkan_profiles),
      cmocka_unit_test(test_amd_wavefronts),
      cmocka_unit_test(test_aliases_map_to_expected_targets),
      cmocka_unit_test(test_find_rejects_near_misses),
      cmocka_unit_test(test_find_device_prefixed),
      cmocka_unit_test(test_resolve_unknown_suggests_and_lists),
      cmocka_unit_test(test_resolve_empty_and_null),
      cmocka_unit_test(test_resolve_wrong_device_prefix),
      cmocka_unit_test(test_resolve_quotes_hostile_names_safely),
      cmocka_unit_test(test_list_basic_and_order),
      cmocka_unit_test(test_list_dedupes_by_canonical_id),
      cmocka_unit_test(test_list_trims_spaces_and_tabs),
      cmocka_unit_test(test_list_rejects_empty_entries),
      cmocka_unit_test(test_list_unknown_names_entry),
      cmocka_unit_test(test_list_capacity),
      cmocka_unit_test(test_list_whole_table),
      cmocka_unit_test(test_kind_names),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
