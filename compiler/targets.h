/* kiln target registry: the one table of every target kiln compiles for.
 *
 * Each entry names a target by a canonical id ("sm_89", "gfx950", "arm5gen",
 * "videocore_vii", "x86_64"), says which IREE HAL device and executable format
 * serve it, what the backend calls the chip, and the device limits later stages
 * plan workgroups against. Users may also type any alias (product and architecture
 * names such as "rtx4090", "mi300x", "mali-g720", "rpi5"); lookups ignore case.
 *
 * The table is static constant data: entries live for the whole process, callers
 * borrow them and never free them. Everything here is Thread-safe.
 */
#ifndef KILN_COMPILER_TARGETS_H
#define KILN_COMPILER_TARGETS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "base/status.h"

/* Numerically equal to kiln.v1.TargetKind, so the RPC layer passes it through. */
typedef enum kiln_target_kind_e {
  KILN_TARGET_KIND_CUDA = 1,
  KILN_TARGET_KIND_HIP = 2,
  KILN_TARGET_KIND_VULKAN = 3,
  KILN_TARGET_KIND_CPU = 4,
} kiln_target_kind_t;

/* Limits of one GPU that the tiling and dispatch-size choices must respect. The
 * values mirror what iree-compile itself plans with (its #iree_gpu.target wgp
 * fields, KnownTargets.cpp), except where the entry's comment says otherwise.
 * All zero for CPU targets. */
typedef struct kiln_target_gpu_limits_s {
  uint32_t subgroup_size;             /* CUDA warp, AMD wavefront (CDNA 64, RDNA 32),
                                         Vulkan subgroup width */
  uint32_t max_workgroup_size[3];     /* per-dimension maximum, x y z */
  uint32_t max_workgroup_invocations; /* bound on x*y*z of one workgroup */
  uint32_t max_shared_memory_bytes;   /* workgroup-shared memory (CUDA shared, AMD LDS,
                                         Vulkan maxComputeSharedMemorySize) */
} kiln_target_gpu_limits_t;

typedef struct kiln_target_s {
  const char *id; /* canonical id: "sm_89", "gfx950", "arm5gen", "x86_64" */
  kiln_target_kind_t kind;
  const char *hal_device;          /* --iree-hal-target-device: "cuda", "hip", "vulkan", "local" */
  const char *hal_backend;         /* #hal.executable.target backend: "cuda", "rocm",
                                      "vulkan-spirv", "llvm-cpu" */
  const char *executable_format;   /* "cuda-nvptx-fb", "rocm-hsaco-fb", "vulkan-spirv-fb",
                                      "embedded-elf-x86_64" */
  const char *chip_flag;           /* the iree-compile flag (no leading dashes) that takes
                                      `chip`: "iree-cuda-target", "iree-rocm-target",
                                      "iree-vulkan-target", "iree-llvmcpu-target-cpu" */
  const char *chip;                /* what the backend wants: "sm_89", "gfx950", the Vulkan
                                      target name "arm5gen", the LLVM CPU name "x86-64" */
  const char *llvm_triple;         /* "nvptx64-nvidia-cuda", "amdgcn-amd-amdhsa",
                                      "x86_64-unknown-linux-gnu"; NULL for Vulkan, whose
                                      SPIR-V does not come from an LLVM backend */
  const char *description;         /* one line: vendor, architecture, example devices */
  const char *const *aliases;      /* NULL-terminated; unique across the table, never
                                      an id, never containing ':' */
  uint32_t ptx_version;            /* CUDA only: the PTX ISA version the chip needs, as
                                      major*10+minor (78 = PTX 7.8, the LLVM NVPTX feature
                                      "+ptx78"); 0 for other kinds */
  uint32_t spirv_version_major;    /* Vulkan only: SPIR-V version of the device profile */
  uint32_t spirv_version_minor;    /* (1.6 for Arm Mali, 1.3 for VideoCore VII); 0 otherwise */
  const char *spirv_capabilities;  /* Vulkan only: the SPIR-V capabilities the profile's
                                      devices support, spirv-attach-target's `caps` list
                                      ("Shader,Float16,..."); NULL otherwise */
  const char *spirv_extensions;    /* Vulkan only: likewise, its `exts` list */
  kiln_target_gpu_limits_t limits; /* GPU kinds only; all zero for CPU */
  uint32_t compute_units;          /* GPU kinds: streaming multiprocessors (NVIDIA), compute
                                      units (AMD) or shader cores (Arm) of the largest part
                                      `description` names; kiln's own kernels keep at least
                                      this many workgroups (and at least 64) where the shape
                                      allows. 0: not recorded, the 64 floor alone */
  uint32_t vector_bits;            /* CPU only: the vector width kernels prefer (512 on
                                      AVX-512 parts, where LLVM would pick 256); 0:
                                      LLVM's choice for the chip */
  const char *cpu_features;        /* CPU only: LLVM features beyond the chip's own
                                      ("+m,+a,+f,+d,+c" for RISC-V's generic-rv64, which
                                      has none); NULL: the chip's */
  bool f16_as_bits;                /* CPU only: the chip cannot convert f16 (RV64GC has no
                                      Zfhmin): f16 is kept as its bits and converted by
                                      kiln's integer code, as on Vulkan without Float16 */
  const char *cpu_abi;             /* CPU only: LLVM's ABI name where the triple's default
                                      is not the one to use ("lp64d", hardware floats,
                                      on RISC-V); NULL: the default */
} kiln_target_t;

/* Number of entries in the registry. Thread-safe. */
size_t kiln_compiler_target_count(void);

/* The entry at `index` (0 <= index < count), in table order (CUDA, HIP, Vulkan, CPU);
 * NULL past the end. The result is borrowed static storage. Thread-safe. */
const kiln_target_t *kiln_compiler_target_at(size_t index);

/* Looks a target up by canonical id or alias, ignoring ASCII case. Also accepts the
 * "<device>:<name>" spelling of iree's --iree-hal-target-device lists, where
 * <device> is the entry's kind name, HAL device or HAL backend ("cuda:sm_89",
 * "hip:mi300x", "rocm:gfx942", "vulkan:rpi5", "local:x86_64", "llvm-cpu:host");
 * a prefix that names a different kind than the target's fails the lookup.
 * Surrounding spaces are not trimmed. `name` is borrowed; NULL or unknown gives
 * NULL. The result is borrowed static storage. Thread-safe. */
const kiln_target_t *kiln_compiler_target_find(const char *name);

/* Like kiln_compiler_target_find, but explains a miss. On success writes the
 * borrowed entry to `*out_target` and returns OK; `*out_target` is cleared to NULL
 * on entry. Errors: INVALID_ARGUMENT for a NULL/empty or unknown name, or a
 * "<device>:" prefix that does not match the target's kind; the message quotes the
 * name, suggests the closest id or alias when one is within a small edit distance,
 * and lists every canonical id. Thread-safe. */
KILN_MUST_USE kiln_status_t kiln_compiler_target_resolve(const char *name, const kiln_target_t **out_target);

/* Resolves a comma-separated list such as "sm_89,gfx950, rdna3". Spaces and tabs
 * around each name are ignored; each name resolves as kiln_compiler_target_resolve;
 * targets are de-duplicated by canonical id, keeping the first occurrence's order.
 * `out_targets` has room for `capacity` borrowed entries (it may be NULL only when
 * capacity is 0); `*out_count` is cleared to 0 on entry, and `out_targets` and
 * `*out_count` are written only on success. A capacity of
 * kiln_compiler_target_count() always suffices.
 * Errors (all INVALID_ARGUMENT): NULL list; an empty name anywhere (including "",
 * ",", a trailing comma); an unknown name (the message says which list entry and
 * carries the resolve diagnostics); more distinct targets than `capacity`.
 * Thread-safe. */
KILN_MUST_USE kiln_status_t kiln_compiler_target_resolve_list(const char *comma_separated,
                                                              const kiln_target_t **out_targets,
                                                              size_t capacity, size_t *out_count);

/* "cuda", "hip", "vulkan", "cpu"; "unknown" for values outside the enum. Static
 * storage. Thread-safe. */
const char *kiln_compiler_target_kind_name(kiln_target_kind_t kind);

#endif /* KILN_COMPILER_TARGETS_H */
