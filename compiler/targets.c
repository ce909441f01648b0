/* The kiln target registry: one static table, searched linearly.
 *
 * Invariants (checked by tests/unit/compiler/test_targets.c):
 *   - ids and aliases are unique across the whole table, ignoring case, and no
 *     alias equals any id; so a name resolves to at most one entry;
 *   - hal_device, hal_backend, executable_format, chip_flag and llvm_triple are
 *     fixed by kind; chip equals id for GPU kinds;
 *   - no id or alias contains ':', which separates the optional device prefix.
 * The table has a few dozen names, so a linear scan with strncasecmp is cheaper
 * than any index and needs no initialisation, which keeps every function here
 * free of shared mutable state.
 *
 * Sources for the names and limits (iree-org/iree, 3.12 release-candidate tree,
 * Aug 2026; read, not copied):
 *   - compiler/src/iree/compiler/Codegen/Dialect/GPU/TargetUtils/KnownTargets.cpp:
 *     the product and architecture names iree-compile resolves for --iree-cuda-target,
 *     --iree-rocm-target and --iree-vulkan-target, and the wgp limits it plans with;
 *   - compiler/plugins/target/CUDA/CUDATarget.cpp and its test
 *     target_device_features.mlir: sm_89 defaults to +ptx78, sm_120 is exercised
 *     with +ptx87 and sm_121 with +ptx88;
 *   - compiler/plugins/target/ROCM/ROCMTarget.cpp: device "hip", backend "rocm",
 *     format "rocm-hsaco-fb", triple amdgcn-amd-amdhsa;
 *   - compiler/plugins/target/VulkanSPIRV/VulkanSPIRVTarget.cpp and
 *     LLVMCPU/LLVMCPUTarget.cpp: "vulkan-spirv-fb" and "embedded-elf-<arch>".
 * Aliases marked "kiln only" are not understood by iree-compile; kiln passes
 * `chip`, never the alias, to the compiler, so they are safe to offer.
 */
#include "compiler/targets.h"

#include <ctype.h>
#include <stdbool.h>
#include <string.h>
#include <strings.h>

#include "base/buf.h"

/* ---- Aliases ----------------------------------------------------------------- */

/* NVIDIA. IREE accepts "ada" and rtx4090/4080/4070/4060 for sm_89 and maps any
 * "rtx40" prefix to sm_89; it has no aliases for sm_120/sm_121. "blackwell" is
 * deliberately absent: it also names sm_100 (B200) and sm_103 (B300), which run
 * different code. */
static const char *const sm_89_aliases[] = {
    "ada",
    "rtx4090",
    "rtx4080",
    "rtx4070",
    "rtx4060",
    /* kiln only: */
    "ada-lovelace",
    "rtx4080super",
    "rtx4070ti",
    "rtx4060ti",
    "l4",
    "l40",
    "l40s",
    "rtx6000-ada",
    NULL,
};
static const char *const sm_120_aliases[] = {
    /* kiln only: GeForce RTX 50 and RTX PRO Blackwell are compute capability 12.0. */
    "rtx5090", "rtx5080", "rtx5070ti", "rtx5070", "rtx5060ti", "rtx5060", "rtx-pro-6000", NULL,
};
static const char *const sm_121_aliases[] = {
    /* kiln only: GB10 superchip (DGX Spark) is compute capability 12.1. */
    "gb10",
    "dgx-spark",
    NULL,
};

/* AMD: normalizeAMDGPUTarget in KnownTargets.cpp. The architecture names cdna3,
 * cdna4, rdna3 and rdna4 are known to IREE's target-details lookup but not
 * normalised to a gfx chip for HIP; kiln maps each to the chip listed here. */
static const char *const gfx950_aliases[] = {"cdna4", "mi350x", "mi355x", NULL};
static const char *const gfx942_aliases[] = {"cdna3", "mi300x", "mi300a", "mi308x", "mi325x", NULL};
static const char *const gfx1100_aliases[] = {"rdna3", "rx7900xtx", "rx7900xt", "w7900", "w7800", NULL};
static const char *const gfx1101_aliases[] = {"rx7800xt", "rx7700xt", "v710", "w7700", NULL};
static const char *const gfx1200_aliases[] = {"rx9060xt", NULL};
static const char *const gfx1201_aliases[] = {"rdna4", "rx9070xt", "rx9070", "r9700", NULL};

/* Arm: getARMGPUTargetDetails / normalizeARMGPUTarget in KnownTargets.cpp. */
static const char *const arm5gen_aliases[] = {"mali-g720", "mali-g725", "mali-g1", NULL};
static const char *const valhall1_aliases[] = {"valhall", "mali-g77", "mali-g57", NULL};
static const char *const valhall2_aliases[] = {"mali-g78", NULL};
static const char *const valhall3_aliases[] = {"mali-g710", "mali-g510", "mali-g310", NULL};
static const char *const valhall4_aliases[] = {"mali-g715", "mali-g615", NULL};

/* Broadcom: IREE knows only "videocore_vii"; the rest are kiln only. */
static const char *const videocore_vii_aliases[] = {
    "videocore-vii", "videocore7", "vc7", "rpi5", "raspberrypi5", "raspberry-pi-5", NULL,
};

/* CPU. "host" and "cpu" mean the portable x86-64-v3 level here (AVX2, FMA, F16C:
 * every x86 server since 2015), not -march=native: kiln ships artifacts to other
 * machines, so it never targets the daemon's own CPU. Named CPUs are LLVM's. */
static const char *const x86_64_aliases[] = {"host", "cpu", "llvm-cpu", "x86-64", "x86-64-v3", "amd64", NULL};
static const char *const znver4_aliases[] = {"zen4", "epyc-genoa", NULL};
static const char *const sapphirerapids_aliases[] = {"spr", "xeon-sapphire-rapids", NULL};
static const char *const aarch64_aliases[] = {"arm64", "arm_64", "armv8-a", NULL};
static const char *const cortex_a76_aliases[] = {"rpi5-cpu", "raspberrypi5-cpu", "a76", NULL};
static const char *const neoverse_v2_aliases[] = {"grace", "grace-cpu", NULL};
static const char *const cortex_x925_aliases[] = {"gb10-cpu", "dgx-spark-cpu", NULL};
static const char *const riscv64_aliases[] = {"riscv_64", "rv64gc", "generic-rv64", NULL};
static const char *const spacemit_x60_aliases[] = {"spacemit-k1", "bpi-f3", NULL};

/* ---- Per-kind constants ------------------------------------------------------ */

#define CUDA_FIELDS                                                           \
  .kind = KILN_TARGET_KIND_CUDA, .hal_device = "cuda", .hal_backend = "cuda", \
  .executable_format = "cuda-nvptx-fb", .chip_flag = "iree-cuda-target",      \
  .llvm_triple = "nvptx64-nvidia-cuda"
#define HIP_FIELDS                                                          \
  .kind = KILN_TARGET_KIND_HIP, .hal_device = "hip", .hal_backend = "rocm", \
  .executable_format = "rocm-hsaco-fb", .chip_flag = "iree-rocm-target", .llvm_triple = "amdgcn-amd-amdhsa"
#define VULKAN_FIELDS                                                                     \
  .kind = KILN_TARGET_KIND_VULKAN, .hal_device = "vulkan", .hal_backend = "vulkan-spirv", \
  .executable_format = "vulkan-spirv-fb", .chip_flag = "iree-vulkan-target", .llvm_triple = NULL

/* CPUs: IREE's arch name in the format ("arm_64", never "aarch64"). */
#define CPU_FIELDS(arch, triple)                                                  \
  .kind = KILN_TARGET_KIND_CPU, .hal_device = "local", .hal_backend = "llvm-cpu", \
  .executable_format = "embedded-elf-" arch, .chip_flag = "iree-llvmcpu-target-cpu", .llvm_triple = triple
#define X86_FIELDS   CPU_FIELDS("x86_64", "x86_64-unknown-linux-gnu")
#define ARM64_FIELDS CPU_FIELDS("arm_64", "aarch64-unknown-linux-gnu")
/* RISC-V: the hardware-float ABI; LLVM's generic-rv64 has no extensions at all
 * (its floats would be calls into a soft-float library the ELF does not have). */
#define RISCV64_FIELDS CPU_FIELDS("riscv_64", "riscv64-unknown-linux-gnu"), .cpu_abi = "lp64d"

/* KnownTargets.cpp: CDNA3 and CDNA4 are wave64 with 64 KiB and 160 KiB of LDS;
 * RDNA3/4 offer wave32 and wave64 and kiln plans for their native wave32. */
#define CDNA3_LIMITS \
  { 64, {1024, 1024, 1024}, 1024, 64 * 1024 }
#define CDNA4_LIMITS \
  { 64, {1024, 1024, 1024}, 1024, 160 * 1024 }
#define RDNA_LIMITS \
  { 32, {1024, 1024, 1024}, 1024, 64 * 1024 }

/* KnownTargets.cpp gives 99 KiB (101376 bytes) of shared memory per block for
 * sm_89, sm_120 and sm_121. CUDA caps blockDim.z at 64 on every architecture;
 * IREE's Ada table says 1024 there, kiln records the hardware limit. */
#define NVIDIA_LIMITS \
  { 32, {1024, 1024, 64}, 1024, 99 * 1024 }

/* KnownTargets.cpp: Valhall generations plan with subgroup 16, 512 invocations and
 * 32 KiB; 5th-gen Arm GPUs (Mali-G720 onwards) with 1024 invocations. */
#define VALHALL_LIMITS \
  { 16, {512, 512, 512}, 512, 32 * 1024 }

/* SPIR-V features. Arm Valhall and 5th-gen GPUs compute on f16, i16 and i8 and
 * store 8- and 16-bit types in buffers (KnownTargets.cpp gives Valhall those
 * compute widths and every storage width; Mesa's panvk and Arm's driver report
 * the features); their Int64 is left out, as IREE does. VideoCore VII's driver
 * (Mesa v3dv) stores 8- and 16-bit types but computes on none of them
 * (shaderInt16, shaderInt8 and shaderFloat16 are false), and MLIR's SPIR-V
 * conversion cannot use storage without the matching arithmetic: kiln declares
 * Shader alone there, so i8/i16 live in packed 32-bit words and f16 as integer
 * bits (kernel_types.h). Subgroup shuffles (SPIR-V 1.3's GroupNonUniformShuffle)
 * are declared for the Arm GPUs, whose subgroup operations IREE's Valhall entry
 * lists (shuffle and arithmetic), and not for VideoCore VII, whose subgroup
 * support kiln could not confirm. */
#define MALI_SPIRV                                                  \
  .spirv_capabilities =                                             \
      "Shader,Float16,Int16,Int8,StorageBuffer16BitAccess,"         \
      "StorageBuffer8BitAccess,UniformAndStorageBuffer8BitAccess,"  \
      "GroupNonUniform,GroupNonUniformShuffle",                     \
  .spirv_extensions =                                               \
      "SPV_KHR_storage_buffer_storage_class,SPV_KHR_16bit_storage," \
      "SPV_KHR_8bit_storage"
#define VIDEOCORE_SPIRV \
  .spirv_capabilities = "Shader", .spirv_extensions = "SPV_KHR_storage_buffer_storage_class"

/* ---- The table --------------------------------------------------------------- */

/* compute_units: the largest part each entry names, from the vendors' product
 * specifications: L40S and RTX 6000 Ada 142 SMs, RTX PRO 6000 Blackwell 188, GB10
 * 48; MI355X 256 CUs, MI300X 304, RX 7900 XTX 96, RX 7800 XT 60, RX 9060 XT 32,
 * RX 9070 XT 64; Mali-G925/G1-Ultra and G78 up to 24 shader cores, G77, G710 and
 * G715 up to 16. VideoCore VII is not recorded. */

static const kiln_target_t targets[] = {
    /* NVIDIA CUDA. */
    {.id = "sm_89",
     CUDA_FIELDS,
     .chip = "sm_89",
     .description = "NVIDIA Ada Lovelace (sm_89): GeForce RTX 40xx, L4, L40, L40S, RTX 6000 Ada",
     .aliases = sm_89_aliases,
     .ptx_version = 78,
     .limits = NVIDIA_LIMITS,
     .compute_units = 142},
    {.id = "sm_120",
     CUDA_FIELDS,
     .chip = "sm_120",
     .description = "NVIDIA Blackwell client (sm_120): GeForce RTX 50xx, RTX PRO 6000 Blackwell",
     .aliases = sm_120_aliases,
     .ptx_version = 87,
     .limits = NVIDIA_LIMITS,
     .compute_units = 188},
    {.id = "sm_121",
     CUDA_FIELDS,
     .chip = "sm_121",
     .description = "NVIDIA Blackwell GB10 (sm_121): DGX Spark",
     .aliases = sm_121_aliases,
     .ptx_version = 88,
     .limits = NVIDIA_LIMITS,
     .compute_units = 48},

    /* AMD HIP. */
    {.id = "gfx950",
     HIP_FIELDS,
     .chip = "gfx950",
     .description = "AMD CDNA4 (gfx950): Instinct MI350X, MI355X",
     .aliases = gfx950_aliases,
     .limits = CDNA4_LIMITS,
     .compute_units = 256},
    {.id = "gfx942",
     HIP_FIELDS,
     .chip = "gfx942",
     .description = "AMD CDNA3 (gfx942): Instinct MI300X, MI300A, MI308X, MI325X",
     .aliases = gfx942_aliases,
     .limits = CDNA3_LIMITS,
     .compute_units = 304},
    {.id = "gfx1100",
     HIP_FIELDS,
     .chip = "gfx1100",
     .description = "AMD RDNA3 (gfx1100): Radeon RX 7900 XTX/XT, Radeon PRO W7900/W7800",
     .aliases = gfx1100_aliases,
     .limits = RDNA_LIMITS,
     .compute_units = 96},
    {.id = "gfx1101",
     HIP_FIELDS,
     .chip = "gfx1101",
     .description = "AMD RDNA3 (gfx1101): Radeon RX 7800 XT/7700 XT, Radeon PRO W7700, V710",
     .aliases = gfx1101_aliases,
     .limits = RDNA_LIMITS,
     .compute_units = 60},
    {.id = "gfx1200",
     HIP_FIELDS,
     .chip = "gfx1200",
     .description = "AMD RDNA4 (gfx1200): Radeon RX 9060 XT",
     .aliases = gfx1200_aliases,
     .limits = RDNA_LIMITS,
     .compute_units = 32},
    {.id = "gfx1201",
     HIP_FIELDS,
     .chip = "gfx1201",
     .description = "AMD RDNA4 (gfx1201): Radeon RX 9070 XT/9070, Radeon AI PRO R9700",
     .aliases = gfx1201_aliases,
     .limits = RDNA_LIMITS,
     .compute_units = 64},

    /* Vulkan. IREE gives every Arm target the features "spirv:v1.6,cap:Shader". */
    {.id = "arm5gen",
     VULKAN_FIELDS,
     .chip = "arm5gen",
     .description = "Arm 5th-gen GPU architecture (Vulkan): Mali-G720, Mali-G725, Mali-G1",
     .aliases = arm5gen_aliases,
     .spirv_version_major = 1,
     .spirv_version_minor = 6,
     MALI_SPIRV,
     .limits = {16, {1024, 1024, 1024}, 1024, 32 * 1024},
     .compute_units = 24},
    {.id = "valhall1",
     VULKAN_FIELDS,
     .chip = "valhall1",
     .description = "Arm Valhall gen 1 (Vulkan): Mali-G77, Mali-G57",
     .aliases = valhall1_aliases,
     .spirv_version_major = 1,
     .spirv_version_minor = 6,
     MALI_SPIRV,
     .limits = VALHALL_LIMITS,
     .compute_units = 16},
    {.id = "valhall2",
     VULKAN_FIELDS,
     .chip = "valhall2",
     .description = "Arm Valhall gen 2 (Vulkan): Mali-G78",
     .aliases = valhall2_aliases,
     .spirv_version_major = 1,
     .spirv_version_minor = 6,
     MALI_SPIRV,
     .limits = VALHALL_LIMITS,
     .compute_units = 24},
    {.id = "valhall3",
     VULKAN_FIELDS,
     .chip = "valhall3",
     .description = "Arm Valhall gen 3 (Vulkan): Mali-G710, Mali-G510, Mali-G310",
     .aliases = valhall3_aliases,
     .spirv_version_major = 1,
     .spirv_version_minor = 6,
     MALI_SPIRV,
     .limits = VALHALL_LIMITS,
     .compute_units = 16},
    {.id = "valhall4",
     VULKAN_FIELDS,
     .chip = "valhall4",
     .description = "Arm Valhall gen 4 (Vulkan): Mali-G715, Mali-G615",
     .aliases = valhall4_aliases,
     .spirv_version_major = 1,
     .spirv_version_minor = 6,
     MALI_SPIRV,
     .limits = VALHALL_LIMITS,
     .compute_units = 16},
    /* KnownTargets.cpp (from vulkaninfo on a Raspberry Pi 5): SPIR-V 1.3, subgroup
     * 16, workgroup dimensions up to 256, 16 KiB shared memory. The device reports
     * 256 invocations per workgroup; IREE's own table plans with a conservative 32
     * (its comment calls the thread count a guess), so kiln's codegen may choose
     * to stay under that. */
    {.id = "videocore_vii",
     VULKAN_FIELDS,
     .chip = "videocore_vii",
     .description = "Broadcom VideoCore VII (Vulkan): Raspberry Pi 5",
     .aliases = videocore_vii_aliases,
     .spirv_version_major = 1,
     .spirv_version_minor = 3,
     VIDEOCORE_SPIRV,
     .limits = {16, {256, 256, 256}, 256, 16 * 1024}},

    /* CPUs, through IREE's embedded ELF loader (local-sync and local-task). */
    {.id = "x86_64",
     X86_FIELDS,
     .chip = "x86-64-v3",
     .description = "x86-64 CPU, the portable x86-64-v3 level (AVX2, FMA)",
     .aliases = x86_64_aliases},
    {.id = "znver4",
     X86_FIELDS,
     .chip = "znver4",
     .description = "AMD Zen 4 (AVX-512): EPYC 9004, Ryzen 7000",
     .aliases = znver4_aliases,
     .vector_bits = 512},
    {.id = "sapphirerapids",
     X86_FIELDS,
     .chip = "sapphirerapids",
     .description = "Intel Sapphire Rapids (AVX-512, AMX): Xeon 4th generation",
     .aliases = sapphirerapids_aliases,
     .vector_bits = 512},
    {.id = "aarch64",
     ARM64_FIELDS,
     .chip = "generic",
     .description = "64-bit Arm CPU, the Armv8-A baseline (NEON)",
     .aliases = aarch64_aliases},
    {.id = "cortex-a76",
     ARM64_FIELDS,
     .chip = "cortex-a76",
     .description = "Arm Cortex-A76 (NEON, dot product): Raspberry Pi 5",
     .aliases = cortex_a76_aliases},
    {.id = "neoverse-v2",
     ARM64_FIELDS,
     .chip = "neoverse-v2",
     .description = "Arm Neoverse V2 (SVE2): NVIDIA Grace",
     .aliases = neoverse_v2_aliases},
    {.id = "cortex-x925",
     ARM64_FIELDS,
     .chip = "cortex-x925",
     .description = "Arm Cortex-X925 (SVE2): the NVIDIA GB10's big cores (DGX Spark)",
     .aliases = cortex_x925_aliases},
    {.id = "riscv64",
     RISCV64_FIELDS,
     .chip = "generic-rv64",
     .cpu_features = "+m,+a,+f,+d,+c",
     .f16_as_bits = true,
     .description = "64-bit RISC-V CPU, the RV64GC baseline (no vector unit)",
     .aliases = riscv64_aliases},
    {.id = "spacemit-x60",
     RISCV64_FIELDS,
     .chip = "spacemit-x60",
     .description = "SpacemiT X60 (RVA22, vector 1.0, VLEN 256): SpacemiT K1, Banana Pi BPI-F3",
     .aliases = spacemit_x60_aliases},
};

enum { TARGET_COUNT = sizeof targets / sizeof targets[0] };

/* User text quoted in messages is cut here: a name longer than any real target
 * name is already wrong, and the message should stay one readable line. */
enum { QUOTE_MAX = 64 };

/* Longest name the suggestion search compares; longer input gets no suggestion. */
enum { SUGGEST_MAX = 48 };

/* ---- Lookup ------------------------------------------------------------------ */

static bool equals_ci(const char *a, size_t a_len, const char *b) {
  return strlen(b) == a_len && strncasecmp(a, b, a_len) == 0;
}

static const kiln_target_t *find_unprefixed(const char *name, size_t len) {
  /* Canonical ids first: what clients send on every Compile, hits included. (No
   * alias spells another target's id, so the order decides nothing.) */
  for (size_t i = 0; i < TARGET_COUNT; i++) {
    if (equals_ci(name, len, targets[i].id)) return &targets[i];
  }
  for (size_t i = 0; i < TARGET_COUNT; i++) {
    for (const char *const *alias = targets[i].aliases; *alias; alias++) {
      if (equals_ci(name, len, *alias)) return &targets[i];
    }
  }
  return NULL;
}

/* True when `prefix` names the kind of `t` in any of the spellings iree uses. */
static bool prefix_matches(const kiln_target_t *t, const char *prefix, size_t len) {
  return equals_ci(prefix, len, kiln_compiler_target_kind_name(t->kind)) ||
         equals_ci(prefix, len, t->hal_device) || equals_ci(prefix, len, t->hal_backend);
}

/* Splits an optional "<device>:" prefix off `name[0..len)`. */
static void split_prefix(const char *name, size_t len, const char **out_prefix, size_t *out_prefix_len,
                         const char **out_rest, size_t *out_rest_len) {
  const char *colon = memchr(name, ':', len);
  if (!colon) {
    *out_prefix = NULL;
    *out_prefix_len = 0;
    *out_rest = name;
    *out_rest_len = len;
    return;
  }
  *out_prefix = name;
  *out_prefix_len = (size_t)(colon - name);
  *out_rest = colon + 1;
  *out_rest_len = len - *out_prefix_len - 1;
}

/* kiln_compiler_target_find on a length-delimited name. */
static const kiln_target_t *find_n(const char *name, size_t len) {
  const char *prefix, *rest;
  size_t prefix_len, rest_len;
  split_prefix(name, len, &prefix, &prefix_len, &rest, &rest_len);
  const kiln_target_t *t = find_unprefixed(rest, rest_len);
  if (t && prefix && !prefix_matches(t, prefix, prefix_len)) return NULL;
  return t;
}

size_t kiln_compiler_target_count(void) { return TARGET_COUNT; }

const kiln_target_t *kiln_compiler_target_at(size_t index) {
  return index < TARGET_COUNT ? &targets[index] : NULL;
}

const kiln_target_t *kiln_compiler_target_find(const char *name) {
  if (!name) return NULL;
  return find_n(name, strlen(name));
}

const char *kiln_compiler_target_kind_name(kiln_target_kind_t kind) {
  switch (kind) {
    case KILN_TARGET_KIND_CUDA: return "cuda";
    case KILN_TARGET_KIND_HIP: return "hip";
    case KILN_TARGET_KIND_VULKAN: return "vulkan";
    case KILN_TARGET_KIND_CPU: return "cpu";
  }
  return "unknown";
}

/* ---- Diagnostics ------------------------------------------------------------- */

/* Optimal string alignment distance (Levenshtein plus adjacent transpositions, so
 * "sm_98" is one edit from "sm_89"), ignoring ASCII case. Both lengths must be at
 * most SUGGEST_MAX. */
static size_t edit_distance(const char *a, size_t a_len, const char *b, size_t b_len) {
  size_t rows[3][SUGGEST_MAX + 1];
  size_t *prev2 = rows[0], *prev = rows[1], *cur = rows[2];
  for (size_t j = 0; j <= b_len; j++) prev[j] = j;
  for (size_t i = 1; i <= a_len; i++) {
    cur[0] = i;
    int ca = tolower((unsigned char)a[i - 1]);
    for (size_t j = 1; j <= b_len; j++) {
      int cb = tolower((unsigned char)b[j - 1]);
      size_t best = prev[j - 1] + (ca == cb ? 0 : 1);
      if (prev[j] + 1 < best) best = prev[j] + 1;
      if (cur[j - 1] + 1 < best) best = cur[j - 1] + 1;
      if (i > 1 && j > 1 && ca == tolower((unsigned char)b[j - 2]) &&
          tolower((unsigned char)a[i - 2]) == cb && prev2[j - 2] + 1 < best) {
        best = prev2[j - 2] + 1;
      }
      cur[j] = best;
    }
    size_t *recycled = prev2;
    prev2 = prev;
    prev = cur;
    cur = recycled;
  }
  return prev[b_len];
}

typedef struct suggestion_s {
  const char *name;            /* the id or alias to suggest; NULL for none */
  const kiln_target_t *target; /* its entry */
  size_t distance;
} suggestion_t;

static void consider(suggestion_t *best, const char *name, size_t len, const char *candidate,
                     const kiln_target_t *target) {
  size_t candidate_len = strlen(candidate);
  if (candidate_len > SUGGEST_MAX) return;
  size_t d = edit_distance(name, len, candidate, candidate_len);
  if (d < best->distance) {
    best->name = candidate;
    best->target = target;
    best->distance = d;
  }
}

/* The id or alias closest to `name`, if one is close enough to be a plausible
 * typo: one edit for short names, two from six characters on. A bigger allowance
 * turns "sm_90" (Hopper, not served) into a misleading "sm_89". Ties go to the
 * earlier table entry. */
static suggestion_t closest_name(const char *name, size_t len) {
  size_t allowed = len >= 6 ? 2 : 1;
  suggestion_t best = {NULL, NULL, allowed + 1};
  if (len == 0 || len > SUGGEST_MAX) return best;
  for (size_t i = 0; i < TARGET_COUNT; i++) {
    const kiln_target_t *t = &targets[i];
    consider(&best, name, len, t->id, t);
    for (const char *const *alias = t->aliases; *alias; alias++) {
      consider(&best, name, len, *alias, t);
    }
  }
  return best;
}

/* Appends user text in single quotes, cut at QUOTE_MAX and with control and
 * non-ASCII bytes shown as '?', so a hostile name cannot forge log lines. */
static void append_quoted(kiln_buf_t *buf, const char *s, size_t len) {
  kiln_buf_append_char(buf, '\'');
  size_t shown = len < QUOTE_MAX ? len : QUOTE_MAX;
  for (size_t i = 0; i < shown; i++) {
    unsigned char c = (unsigned char)s[i];
    kiln_buf_append_char(buf, (c >= 0x20 && c < 0x7f) ? (char)c : '?');
  }
  if (shown < len) kiln_buf_append_str(buf, "...");
  kiln_buf_append_char(buf, '\'');
}

static void append_known_ids(kiln_buf_t *buf) {
  kiln_buf_append_str(buf, "known targets: ");
  for (size_t i = 0; i < TARGET_COUNT; i++) {
    if (i) kiln_buf_append_str(buf, ", ");
    kiln_buf_append_str(buf, targets[i].id);
  }
  kiln_buf_append_str(buf,
                      " (product and architecture names such as 'rtx4090', 'mi300x', "
                      "'rdna3', 'mali-g720' or 'rpi5' are accepted too)");
}

static KILN_MUST_USE kiln_status_t make_error(kiln_buf_t *buf) {
  kiln_status_t status = KILN_STATUS(KILN_STATUS_INVALID_ARGUMENT, "%s", buf->data);
  kiln_buf_deinit(buf);
  return status;
}

/* The diagnosis of a name that find_n rejected. */
static KILN_MUST_USE kiln_status_t explain_miss(const char *name, size_t len) {
  kiln_buf_t buf;
  kiln_buf_init(&buf);
  if (len == 0) {
    kiln_buf_append_str(&buf, "empty target name; ");
    append_known_ids(&buf);
    return make_error(&buf);
  }

  const char *prefix, *rest;
  size_t prefix_len, rest_len;
  split_prefix(name, len, &prefix, &prefix_len, &rest, &rest_len);
  const kiln_target_t *unprefixed = find_unprefixed(rest, rest_len);
  if (unprefixed) {
    /* Known target, wrong device prefix. */
    kiln_buf_append_str(&buf, "target ");
    append_quoted(&buf, name, len);
    kiln_buf_appendf(&buf, " names %s, a %s target, under the device prefix ", unprefixed->id,
                     kiln_compiler_target_kind_name(unprefixed->kind));
    append_quoted(&buf, prefix, prefix_len);
    kiln_buf_appendf(&buf, "; write '%s:%s' or just '%s'", unprefixed->hal_device, unprefixed->id,
                     unprefixed->id);
    return make_error(&buf);
  }

  kiln_buf_append_str(&buf, "unknown target ");
  append_quoted(&buf, name, len);
  suggestion_t suggestion = closest_name(rest, rest_len);
  if (suggestion.name) {
    kiln_buf_appendf(&buf, " (did you mean '%s'", suggestion.name);
    if (suggestion.name != suggestion.target->id) {
      kiln_buf_appendf(&buf, ", an alias of %s", suggestion.target->id);
    }
    kiln_buf_append_str(&buf, "?)");
  }
  kiln_buf_append_str(&buf, "; ");
  append_known_ids(&buf);
  return make_error(&buf);
}

static KILN_MUST_USE kiln_status_t resolve_n(const char *name, size_t len, const kiln_target_t **out_target) {
  const kiln_target_t *t = find_n(name, len);
  if (!t) return explain_miss(name, len);
  *out_target = t;
  return NULL;
}

kiln_status_t kiln_compiler_target_resolve(const char *name, const kiln_target_t **out_target) {
  *out_target = NULL;
  return resolve_n(name ? name : "", name ? strlen(name) : 0, out_target);
}

static bool is_blank(char c) { return c == ' ' || c == '\t'; }

kiln_status_t kiln_compiler_target_resolve_list(const char *comma_separated,
                                                const kiln_target_t **out_targets, size_t capacity,
                                                size_t *out_count) {
  *out_count = 0;
  if (!comma_separated) {
    return KILN_STATUS(KILN_STATUS_INVALID_ARGUMENT,
                       "no target list given; pass comma-separated target names such as "
                       "'sm_89,gfx950'");
  }

  /* Resolved into a local array first so the caller's array is untouched on failure.
   * After de-duplication there can be at most one slot per table entry. */
  const kiln_target_t *found[TARGET_COUNT];
  size_t found_count = 0;
  size_t entry = 0;
  const char *p = comma_separated;
  for (;;) {
    entry++;
    const char *end = strchr(p, ',');
    if (!end) end = p + strlen(p);
    const char *start = p;
    const char *stop = end;
    while (start < stop && is_blank(*start)) start++;
    while (stop > start && is_blank(stop[-1])) stop--;
    size_t len = (size_t)(stop - start);

    if (len == 0) {
      return KILN_STATUS(KILN_STATUS_INVALID_ARGUMENT,
                         "target list entry %zu is empty; separate target names with single "
                         "commas, e.g. 'sm_89,gfx950'",
                         entry);
    }
    const kiln_target_t *t = NULL;
    kiln_status_t status = resolve_n(start, len, &t);
    if (status) return kiln_status_annotate(status, "target list entry %zu", entry);

    bool seen = false;
    for (size_t i = 0; i < found_count; i++) seen = seen || found[i] == t;
    if (!seen) {
      if (found_count == capacity) {
        return KILN_STATUS(KILN_STATUS_INVALID_ARGUMENT,
                           "target list names more than %zu distinct targets (entry %zu is "
                           "one too many); ask for at most %zu per request",
                           capacity, entry, capacity);
      }
      found[found_count++] = t;
    }

    if (*end == '\0') break;
    p = end + 1;
  }

  for (size_t i = 0; i < found_count; i++) out_targets[i] = found[i];
  *out_count = found_count;
  return NULL;
}
