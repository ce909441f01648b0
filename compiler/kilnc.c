/* kilnc: the command-line compiler over the compiler library (the same code the
 * daemon's workers run).
 *
 *   kilnc MODEL.mlir --target sm_89 --target gfx950,videocore_vii [-o OUTDIR]
 *
 * iree-compile's spellings work too, so existing scripts keep working:
 *   --iree-hal-target-device=cuda|hip|vulkan  (checked against the target's kind)
 *   --iree-cuda-target=sm_89  --iree-rocm-target=gfx950  --iree-vulkan-target=videocore_vii
 *   --iree-hal-local-target-device-backends=llvm-cpu  --iree-llvmcpu-target-cpu=znver4
 *   --iree-llvmcpu-target-triple=aarch64-unknown-linux-gnu (alone: that arch's baseline)
 *   --iree-llvmcpu-link-embedded=false (CPU executables as system-elf-ARCH)
 *   --iree-hal-target-backends=cuda|rocm|vulkan-spirv|llvm-cpu (the legacy spelling)
 *   --iree-input-type=auto|none|tosa, --output-format=vm-bytecode
 *   flags that tune what iree-compile emits but change nothing in kiln's output
 *   (--iree-opt-level=O2, ...): accepted with a warning; other --iree-* flags are
 *   refused by name, so a script never gets output it did not ask for
 *   MODEL "-" reads stdin; "-o -" (one target) writes the VMFB to stdout
 * (3.12 removed --iree-hip-*; kilnc says which flag replaces it).
 *
 * Writes OUTDIR/<target>.vmfb for every GPU target (IREE 3.12 / HAL 0.7), the raw
 * device code beside it in OUTDIR/<target>/<kernel module>.{ptx,hsaco,spv,o}
 * (default OUTDIR: "."), <kernel module>.cubin beside the PTX when ptxas is
 * installed, and prints one line per target. Exit status: 0 every target compiled; 1 some
 * target failed; 2 bad usage; 3 the model itself is bad (diagnostics printed with
 * file:line:col). Temporary files lie in $TMPDIR/kilnc-XXXXXX, which goes when
 * kilnc ends, by a signal too (base/scratch.h).
 */
#include <errno.h>
#include <stddef.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "base/alloc.h"
#include "base/buf.h"
#include "base/config.h"
#include "base/file.h"
#include "base/scratch.h"
#include "compiler/artifact.h"
#include "compiler/identity.h"
#include "compiler/pipeline.h"

#define EXIT_TARGET_FAILED 1
#define EXIT_USAGE         2
#define EXIT_BAD_MODEL     3
#define MAX_TARGETS        32

static void usage(FILE *out) {
  fprintf(out,
          "usage: kilnc MODEL.mlir --target T[,T...] [--target T ...] [-o OUTDIR]\n"
          "  --target, -t T       a target id or alias (sm_89, ada, gfx950, mi355x, rdna3,\n"
          "                       mali-g720, videocore_vii, ...); repeatable, comma lists ok\n"
          "  -o, --output DIR     where to write DIR/<target>.vmfb and DIR/<target>/<module>.{ptx,hsaco,spv} "
          "[.]\n"
          "  --embed-source       carry the model (zstd) inside each VMFB, for recompiling later\n"
          "  --flat               write VMFBs in the flat layout instead of the zip\n"
          "  -j, --jobs N         compile up to N targets at once, in child processes [CPUs]\n"
          "  --list-targets       print the targets and their aliases\n"
          "  --version            print versions\n"
          "iree-compile spellings: --iree-hal-target-device=..., --iree-cuda-target=...,\n"
          "--iree-rocm-target=..., --iree-vulkan-target=...,\n"
          "--iree-hal-local-target-device-backends=llvm-cpu, --iree-llvmcpu-target-cpu=...,\n"
          "--iree-llvmcpu-target-triple=..., --iree-llvmcpu-link-embedded=false,\n"
          "--iree-hal-target-backends=... (legacy), --iree-input-type=auto|none|tosa,\n"
          "--output-format=vm-bytecode; flags that change nothing in kiln's output\n"
          "(--iree-opt-level=..., ...) are accepted with a warning, other --iree-* flags refused\n"
          "MODEL - reads the model from stdin; -o - writes the one target's VMFB to stdout\n"
          "exit status: 0 ok, 1 a target failed, 2 usage, 3 the model does not compile\n");
}

/* iree-compile flags that tune IREE's own pipeline: kiln's output is the same
 * with or without them, so a CI line that passes them keeps working. */
static const char *const no_effect_flags[] = {
    "--iree-opt-level=",
    "--iree-hal-executable-debug-level=",
    "--iree-opt-const-eval=",
    "--iree-opt-data-tiling=",
    "--iree-dispatch-creation-enable-aggressive-fusion=",
    "--iree-global-opt-propagate-transposes=",
    "--iree-opt-aggressively-propagate-transposes=",
    "--iree-vm-target-index-bits=",
    "--iree-stream-resource-max-allocation-size=",
    "--iree-hal-dump-executable-files-to=",
    "--iree-hal-dump-executable-sources-to=",
    "--iree-hal-dump-executable-binaries-to=",
    "--iree-vm-bytecode-module-strip-source-map=",
    "--iree-vm-emit-polyglot-zip=",
    "--mlir-disable-threading",
    "--mlir-print-debuginfo",
    "--mlir-print-op-on-diagnostic=",
    "--mlir-elide-elementsattrs-if-larger=",
};

static bool no_effect(const char *flag) {
  for (size_t i = 0; i < sizeof no_effect_flags / sizeof no_effect_flags[0]; i++) {
    const char *f = no_effect_flags[i];
    size_t n = strlen(f);
    if (f[n - 1] == '=' ? !strncmp(flag, f, n) : !strcmp(flag, f)) return true;
  }
  return false;
}

static const char *extension(const kiln_target_t *t) {
  switch (t->kind) {
    case KILN_TARGET_KIND_CUDA: return "ptx";
    case KILN_TARGET_KIND_HIP: return "hsaco";
    case KILN_TARGET_KIND_VULKAN: return "spv";
    case KILN_TARGET_KIND_CPU: return "so";
    default: return "bin";
  }
}

static int add_targets(const char *list, const kiln_target_t **targets, size_t *n) {
  const kiln_target_t *found[MAX_TARGETS];
  size_t count = 0;
  kiln_status_t st = kiln_compiler_target_resolve_list(list, found, MAX_TARGETS, &count);
  if (st) {
    fprintf(stderr, "kilnc: %s\n", kiln_status_message(st));
    kiln_status_free(st);
    return -1;
  }
  for (size_t i = 0; i < count; i++) {
    bool dup = false;
    for (size_t k = 0; k < *n; k++) dup = dup || targets[k] == found[i];
    if (dup) continue;
    if (*n == MAX_TARGETS) {
      fprintf(stderr, "kilnc: more than %d targets\n", MAX_TARGETS);
      return -1;
    }
    targets[(*n)++] = found[i];
  }
  return 0;
}

/* The model from `path`, or from stdin when `path` is "-". */
static char *read_file(const char *path, size_t *out_len) {
  if (strcmp(path, "-") != 0) return kiln_read_file(path, out_len);
  kiln_buf_t buf;
  kiln_buf_init(&buf);
  char chunk[65536];
  size_t n;
  while ((n = fread(chunk, 1, sizeof chunk, stdin)) > 0) kiln_buf_append(&buf, chunk, n);
  if (ferror(stdin)) {
    kiln_buf_deinit(&buf);
    return NULL;
  }
  *out_len = buf.len;
  return kiln_buf_take(&buf);
}

/* Writes `path` (mode 0666 less the umask, as fopen would), or stdout when it is
 * "-". The status names the path and why. */
static KILN_MUST_USE kiln_status_t write_output(const char *path, const void *data, size_t len) {
  if (strcmp(path, "-") != 0) return kiln_file_write(path, data, len, 0666);
  errno = 0;
  bool ok = fwrite(data, 1, len, stdout) == len && fflush(stdout) == 0;
  return ok ? NULL : KILN_STATUS_ERRNO(errno ? errno : EIO, "cannot write the VMFB to stdout");
}

/* iree-compile's own spellings, as far as they map onto kiln. */
typedef struct compat_s {
  const char *device;       /* --iree-hal-target-device= */
  const char *cpu, *triple; /* --iree-llvmcpu-target-cpu=, --iree-llvmcpu-target-triple= */
  const char *backend;      /* --iree-hal-target-backends= (legacy) as a device name */
  const char *backend_flag; /* ...as written */
  bool system_elf;          /* --iree-llvmcpu-link-embedded=false */
} compat_t;

/* One argument in iree-compile's spelling (the caller passes only --iree-*,
 * --mlir-*, --compile-* and --output-format=*). Targets it names become
 * "--target=..." in *out_target (heap) for the option table, so they keep their
 * place among kilnc's own --target flags. 0, or EXIT_USAGE after saying why. */
static int compat_flag(const char *a, compat_t *c, char **out_target) {
  *out_target = NULL;
  if (!strncmp(a, "--iree-cuda-target=", 19) || !strncmp(a, "--iree-rocm-target=", 19) ||
      !strncmp(a, "--iree-vulkan-target=", 21)) {
    kiln_buf_t t;
    kiln_buf_init(&t);
    kiln_buf_appendf(&t, "--target=%s", strchr(a, '=') + 1);
    *out_target = kiln_buf_take(&t);
  } else if (!strncmp(a, "--iree-hal-target-device=", 25)) {
    c->device = a + 25;
  } else if (!strncmp(a, "--iree-hal-local-target-device-backends=", 40)) {
    if (strcmp(a + 40, "llvm-cpu") != 0) {
      fprintf(stderr, "kilnc: kiln's CPU backend is llvm-cpu, not '%s'\n", a + 40);
      return EXIT_USAGE;
    }
  } else if (!strncmp(a, "--iree-llvmcpu-target-cpu=", 26)) {
    c->cpu = a + 26;
  } else if (!strncmp(a, "--iree-llvmcpu-target-triple=", 29)) {
    c->triple = a + 29;
  } else if (!strncmp(a, "--iree-llvmcpu-link-embedded=", 29)) {
    const char *v = a + 29;
    if (strcmp(v, "true") && strcmp(v, "false") && strcmp(v, "1") && strcmp(v, "0")) {
      fprintf(stderr, "kilnc: %s takes true or false\n", a);
      return EXIT_USAGE;
    }
    c->system_elf = !strcmp(v, "false") || !strcmp(v, "0");
  } else if (!strncmp(a, "--iree-hip-", 11)) {
    fprintf(stderr, "kilnc: %s was removed in IREE 3.12; use --iree-rocm-target=CHIP\n", a);
    return EXIT_USAGE;
  } else if (!strncmp(a, "--iree-hal-target-backends=", 27)) {
    /* The legacy spelling: a backend, its chip named by the backend's flag. */
    static const char *const backends[][2] = {{"cuda", "cuda"},
                                              {"rocm", "hip"},
                                              {"vulkan-spirv", "vulkan"},
                                              {"vulkan", "vulkan"},
                                              {"llvm-cpu", "local"}};
    c->backend = NULL;
    c->backend_flag = a + 27;
    for (size_t b = 0; b < sizeof backends / sizeof backends[0] && !c->backend; b++) {
      if (!strcmp(a + 27, backends[b][0])) c->backend = backends[b][1];
    }
    if (!c->backend) {
      fprintf(stderr, "kilnc: kiln's backends are cuda, rocm, vulkan-spirv and llvm-cpu, not '%s'\n", a + 27);
      return EXIT_USAGE;
    }
  } else if (!strncmp(a, "--iree-input-type=", 18)) {
    const char *v = a + 18;
    if (strcmp(v, "auto") && strcmp(v, "none") && strcmp(v, "tosa")) {
      fprintf(stderr,
              "kilnc: --iree-input-type=%s needs IREE's importer; kiln reads TOSA and upstream MLIR "
              "dialects (auto, none, tosa)\n",
              v);
      return EXIT_USAGE;
    }
  } else if (!strncmp(a, "--output-format=", 16)) {
    if (strcmp(a + 16, "vm-bytecode") != 0) {
      fprintf(stderr, "kilnc: kiln writes vm-bytecode VMFBs, not --output-format=%s\n", a + 16);
      return EXIT_USAGE;
    }
  } else if (no_effect(a)) {
    fprintf(stderr, "kilnc: warning: %s changes nothing in kiln's output; ignored\n", a);
  } else {
    const char *eq = strchr(a, '=');
    fprintf(stderr,
            "kilnc: %.*s is an iree-compile flag kiln does not implement (it would change what "
            "iree-compile emits); remove it or see kilnc --help\n",
            eq ? (int)(eq - a) : (int)strlen(a), a);
    return EXIT_USAGE;
  }
  return 0;
}

static bool is_compat_flag(const char *a) {
  return !strncmp(a, "--iree-", 7) || !strncmp(a, "--mlir-", 7) || !strncmp(a, "--compile-", 10) ||
         !strncmp(a, "--output-format=", 16);
}

/* kilnc's own flags, parsed by base/config like kiln's and kilnd's (command line
 * only); iree-compile's spellings go through compat_flag first. */
typedef struct kilnc_options_s {
  kiln_config_list_t target;
  char *output;
  int64_t jobs; /* 0: the compiler's default (CPUs) */
  bool embed_source, flat, list_targets, version, help;
} kilnc_options_t;

#define FLAG(name, short_name, type, field, def, metavar, help, min, max)                         \
  {                                                                                               \
    name, short_name, type, offsetof(kilnc_options_t, field), def, metavar, help, min, max, NULL, \
        KILN_CONFIG_CLI_ONLY                                                                      \
  }
static const kiln_config_option_t option_list[] = {
    FLAG("target", 't', KILN_CONFIG_LIST, target, NULL, "T[,T...]", "a target id or alias; repeatable", 0, 0),
    FLAG("output", 'o', KILN_CONFIG_STRING, output, ".", "DIR", "where to write the VMFBs", 0, 0),
    FLAG("jobs", 'j', KILN_CONFIG_INT, jobs, NULL, "N", "compile up to N targets at once", 1, 16),
    FLAG("embed-source", 0, KILN_CONFIG_BOOL, embed_source, NULL, NULL, "carry the model in each VMFB", 0, 0),
    FLAG("flat", 0, KILN_CONFIG_BOOL, flat, NULL, NULL, "the flat VMFB layout", 0, 0),
    FLAG("list-targets", 0, KILN_CONFIG_BOOL, list_targets, NULL, NULL, "print the targets", 0, 0),
    FLAG("version", 0, KILN_CONFIG_BOOL, version, NULL, NULL, "print versions", 0, 0),
    FLAG("help", 'h', KILN_CONFIG_BOOL, help, NULL, NULL, "print the usage", 0, 0),
};
static const kiln_config_table_t option_table = {"kilnc", "", option_list,
                                                 sizeof option_list / sizeof option_list[0]};

/* Everything after the arguments: resolve the targets, compile, write. Exit
 * status for main. */
static int run(const kilnc_options_t *opt, const compat_t *compat, const char *model) {
  kiln_status_t wst = NULL; /* a failed write of an output */
  const kiln_target_t *targets[MAX_TARGETS];
  size_t n_targets = 0;
  for (size_t i = 0; i < opt->target.count; i++) {
    if (add_targets(opt->target.items[i], targets, &n_targets)) return EXIT_USAGE;
  }
  const char *outdir = opt->output;
  const char *device = compat->device, *cpu = compat->cpu, *triple = compat->triple,
             *backend = compat->backend, *backend_flag = compat->backend_flag;
  bool system_elf = compat->system_elf, embed_source = opt->embed_source, flat = opt->flat;
  int64_t jobs = opt->jobs;
  /* iree-compile's CPU flags: the CPU names the target; a triple alone, its
   * architecture's baseline; both must agree. */
  if (cpu || triple) {
    /* The triple's architecture, as kiln's baseline target of it is named. */
    const char *arch = NULL;
    if (triple) {
      static const char *const arches[][2] = {
          {"x86_64", "x86_64"}, {"aarch64", "aarch64"}, {"arm64", "aarch64"}, {"riscv64", "riscv64"}};
      for (size_t i = 0; i < sizeof arches / sizeof arches[0] && !arch; i++) {
        if (!strncmp(triple, arches[i][0], strlen(arches[i][0]))) arch = arches[i][1];
      }
      if (!arch) {
        fprintf(stderr, "kilnc: kiln's CPU targets are x86_64, aarch64 and riscv64, not triple '%s'\n",
                triple);
        return EXIT_USAGE;
      }
    }
    const char *name = cpu ? cpu : arch ? arch : "x86_64";
    const kiln_target_t *t = kiln_compiler_target_find(name);
    if (!t || t->kind != KILN_TARGET_KIND_CPU || (arch && strncmp(t->llvm_triple, arch, strlen(arch)) != 0)) {
      fprintf(stderr,
              "kilnc: --iree-llvmcpu-target-cpu=%s is not one of kiln's CPUs%s%s (kilnc --list-targets)\n",
              name, triple ? " for " : "", triple ? triple : "");
      return EXIT_USAGE;
    }
    if (add_targets(t->id, targets, &n_targets)) return EXIT_USAGE;
  }
  if (flat && embed_source) {
    fprintf(stderr, "kilnc: --embed-source needs the zip layout; drop --flat\n");
    return EXIT_USAGE;
  }
  if (backend && device && strcmp(backend, device) != 0) {
    fprintf(stderr,
            "kilnc: --iree-hal-target-backends names a %s backend, --iree-hal-target-device=%s another\n",
            backend, device);
    return EXIT_USAGE;
  }
  if (backend && !strcmp(backend, "local") && n_targets == 0 && add_targets("x86_64", targets, &n_targets)) {
    return EXIT_USAGE; /* llvm-cpu alone: the portable x86-64 target, as a triple alone gives its baseline */
  }
  if (backend && n_targets == 0) {
    fprintf(
        stderr,
        "kilnc: --iree-hal-target-backends=%s needs its chip: --iree-%s-target=CHIP (kilnc --list-targets)\n",
        backend_flag, !strcmp(backend, "hip") ? "rocm" : backend);
    return EXIT_USAGE;
  }
  char device_flag[128];
  snprintf(device_flag, sizeof device_flag, "--iree-hal-target-device=%s", device ? device : "");
  if (backend && !device) {
    device = backend;
    snprintf(device_flag, sizeof device_flag, "--iree-hal-target-backends=%s", backend_flag);
  }
  if (!model || n_targets == 0) {
    usage(stderr);
    return EXIT_USAGE;
  }
  if (!strcmp(outdir, "-") && n_targets != 1) {
    fprintf(stderr, "kilnc: -o - writes one VMFB to stdout: name exactly one target\n");
    return EXIT_USAGE;
  }
  if (device) {
    for (size_t i = 0; i < n_targets; i++) {
      if (strcmp(targets[i]->hal_device, device) != 0) {
        fprintf(stderr, "kilnc: target %s is a %s device, not %s\n", targets[i]->id, targets[i]->hal_device,
                device_flag);
        return EXIT_USAGE;
      }
    }
  }
  size_t len = 0;
  char *source = read_file(model, &len);
  if (!source) {
    fprintf(stderr, "kilnc: cannot read %s: %s\n", model, strerror(errno));
    return EXIT_USAGE;
  }
  kiln_compiler_context_t *ctx = NULL;
  kiln_status_t st = kiln_compiler_context_create(&ctx);
  kiln_compiler_output_t out;
  if (!st && jobs > 0) kiln_compiler_context_set_jobs(ctx, (size_t)jobs);
  const char *model_name = strcmp(model, "-") ? model : "<stdin>";
  if (!st) st = kiln_compiler_compile(ctx, source, len, model_name, targets, n_targets, &out);
  if (st) {
    fprintf(stderr, "kilnc: %s\n", kiln_status_message(st));
    int code = kiln_status_code(st) == KILN_STATUS_INVALID_ARGUMENT ? EXIT_BAD_MODEL : EXIT_TARGET_FAILED;
    kiln_status_free(st);
    kiln_compiler_context_destroy(ctx);
    kiln_free(source);
    return code;
  }
  int code = 0;
  kiln_compiler_artifact_options_t ao = {.source = source,
                                         .source_len = len,
                                         .embed_source = embed_source,
                                         .flat = flat,
                                         .flags = system_elf ? "--iree-llvmcpu-link-embedded=false" : ""};
  /* iree-compile's form: `-o model.vmfb` (or `-o -`, stdout) with one target
   * writes just that file. */
  size_t outlen = strlen(outdir);
  bool to_stdout = !strcmp(outdir, "-");
  if (out.n_targets == 1 && (to_stdout || (outlen > 5 && !strcmp(outdir + outlen - 5, ".vmfb")))) {
    kiln_buf_t vmfb;
    kiln_buf_init(&vmfb);
    st = kiln_compiler_artifact_write(&out, 0, &ao, &vmfb);
    if (st) {
      fprintf(stderr, "kilnc: %s\n", kiln_status_message(st));
      code = EXIT_TARGET_FAILED;
      kiln_status_free(st);
    } else if ((wst = write_output(outdir, vmfb.data, vmfb.len)) != NULL) {
      fprintf(stderr, "kilnc: %s\n", kiln_status_message(wst));
      kiln_status_free(wst);
      code = EXIT_TARGET_FAILED;
    } else {
      fprintf(to_stdout ? stderr : stdout, "%-14s %zu bytes -> %s\n", out.targets[0].target->id, vmfb.len,
              to_stdout ? "stdout" : outdir);
    }
    kiln_buf_deinit(&vmfb);
    kiln_compiler_output_deinit(&out);
    kiln_compiler_context_destroy(ctx);
    kiln_free(source);
    return code;
  }
  /* mkdir -p OUTDIR */
  kiln_buf_t dir;
  kiln_buf_init(&dir);
  kiln_buf_append_str(&dir, outdir);
  for (char *p = dir.data + 1; *p; p++) {
    if (*p != '/') continue;
    *p = '\0';
    mkdir(dir.data, 0755);
    *p = '/';
  }
  mkdir(dir.data, 0755);
  kiln_buf_deinit(&dir);
  for (size_t i = 0; i < out.n_targets; i++) {
    const kiln_compiler_target_output_t *t = &out.targets[i];
    if (t->status) {
      fprintf(stderr, "kilnc: %s: %s\n", t->target->id, kiln_status_message(t->status));
      code = EXIT_TARGET_FAILED;
      continue;
    }
    kiln_buf_t path;
    kiln_buf_init(&path);
    kiln_buf_appendf(&path, "%s/%s", outdir, t->target->id);
    mkdir(path.data, 0755);
    size_t bytes = 0, modules = 0;
    for (size_t k = 0; k < t->n_kernels; k++) {
      /* Kernels share their device module: write (and count) each module once. */
      bool seen = false;
      for (size_t j = 0; j < k && !seen; j++)
        seen = !strcmp(t->kernels[j].module_name, t->kernels[k].module_name);
      if (seen) continue;
      modules++;
      kiln_buf_clear(&path);
      kiln_buf_appendf(&path, "%s/%s/%s.%s", outdir, t->target->id, t->kernels[k].module_name,
                       extension(t->target));
      if ((wst = write_output(path.data, t->kernels[k].binary, t->kernels[k].binary_len)) != NULL) {
        fprintf(stderr, "kilnc: %s\n", kiln_status_message(wst));
        kiln_status_free(wst);
        code = EXIT_TARGET_FAILED;
      }
      bytes += t->kernels[k].binary_len;
      if (t->kernels[k].cubin) {
        kiln_buf_clear(&path);
        kiln_buf_appendf(&path, "%s/%s/%s.cubin", outdir, t->target->id, t->kernels[k].module_name);
        if ((wst = write_output(path.data, t->kernels[k].cubin, t->kernels[k].cubin_len)) != NULL) {
          fprintf(stderr, "kilnc: %s\n", kiln_status_message(wst));
          kiln_status_free(wst);
          code = EXIT_TARGET_FAILED;
        }
      }
    }
    size_t vmfb_bytes = 0;
    {
      kiln_buf_t vmfb;
      kiln_buf_init(&vmfb);
      st = kiln_compiler_artifact_write(&out, i, &ao, &vmfb);
      kiln_buf_clear(&path);
      kiln_buf_appendf(&path, "%s/%s.vmfb", outdir, t->target->id);
      if (st) {
        fprintf(stderr, "kilnc: %s\n", kiln_status_message(st));
        kiln_status_free(st);
        st = NULL;
        code = EXIT_TARGET_FAILED;
      } else if ((wst = write_output(path.data, vmfb.data, vmfb.len)) != NULL) {
        fprintf(stderr, "kilnc: %s\n", kiln_status_message(wst));
        kiln_status_free(wst);
        code = EXIT_TARGET_FAILED;
      }
      vmfb_bytes = vmfb.len;
      kiln_buf_deinit(&vmfb);
    }
    kiln_buf_deinit(&path);
    if (vmfb_bytes) {
      printf("%-14s %zu kernel(s) in %zu module(s), %zu bytes, %lld ms -> %s/%s.vmfb (%zu bytes)\n",
             t->target->id, t->n_kernels, modules, bytes, (long long)t->backend_ms, outdir, t->target->id,
             vmfb_bytes);
    } else {
      printf("%-14s %zu kernel(s) in %zu module(s), %zu bytes, %lld ms -> %s/%s/\n", t->target->id,
             t->n_kernels, modules, bytes, (long long)t->backend_ms, outdir, t->target->id);
    }
  }
  printf("front half %lld ms (shared by %zu target(s))\n", (long long)out.front_ms, out.n_targets);
  kiln_compiler_output_deinit(&out);
  kiln_compiler_context_destroy(ctx);
  kiln_free(source);
  return code;
}

/* Whether kilnc's own flags ask for the usage: they are parsed once without the
 * iree-compile spellings (the parser stops at --help), so that `kilnc --help
 * --iree-foo=1` prints the usage while `kilnc -o -h ...` still writes to "-h". */
static bool asks_for_help(int argc, char **argv) {
  char **words = kiln_calloc((size_t)argc + 1, sizeof *words);
  int n = 0;
  words[n++] = argv[0];
  bool options_done = false;
  for (int i = 1; i < argc; i++) {
    if (!options_done && !strcmp(argv[i], "--")) options_done = true;
    if (options_done || !is_compat_flag(argv[i])) words[n++] = argv[i];
  }
  kilnc_options_t opt;
  memset(&opt, 0, sizeof opt);
  const char *positional[2];
  size_t n_positional = 0;
  kiln_status_t st = kiln_config_set_defaults(&option_table, &opt);
  if (!st) st = kiln_config_parse_args(&option_table, &opt, n, words, positional, 2, &n_positional);
  bool help = !st && opt.help;
  kiln_status_free(st);
  kiln_config_deinit(&option_table, &opt);
  kiln_free(words);
  return help;
}

int main(int argc, char **argv) {
  compat_t compat = {0};
  /* iree-compile's spellings out; kilnc's own (and the targets compat names) in. */
  char **own = kiln_calloc((size_t)argc + 1, sizeof *own);
  char **made = kiln_calloc((size_t)argc + 1, sizeof *made); /* the "--target=..." strings */
  int n_own = 0, n_made = 0, code = -1;
  own[n_own++] = argv[0];
  bool options_done = false, help = asks_for_help(argc, argv);
  for (int i = 1; i < argc; i++) {
    const char *a = argv[i];
    if (!options_done && !strcmp(a, "--")) options_done = true;
    if (options_done || !is_compat_flag(a)) {
      own[n_own++] = argv[i];
      continue;
    }
    if (help) continue; /* the usage is all that is asked: nothing to refuse */
    char *target_arg = NULL;
    if (compat_flag(a, &compat, &target_arg) != 0) {
      code = EXIT_USAGE;
      break;
    }
    if (target_arg) own[n_own++] = made[n_made++] = target_arg;
  }
  kilnc_options_t opt;
  memset(&opt, 0, sizeof opt);
  const char *positional[2];
  size_t n_positional = 0;
  kiln_status_t parsed = code < 0 ? kiln_config_set_defaults(&option_table, &opt) : NULL;
  if (code < 0 && !parsed) {
    parsed = kiln_config_parse_args(&option_table, &opt, n_own, own, positional, 2, &n_positional);
  }
  if (parsed) {
    fprintf(stderr, "kilnc: %s\n", kiln_status_message(parsed));
    kiln_status_free(parsed);
    code = EXIT_USAGE;
  }
  if (code >= 0) {
    /* refused above */
  } else if (opt.help) {
    usage(stdout);
    code = 0;
  } else if (opt.version) {
    kiln_compiler_identity_t id;
    kiln_compiler_identity_get(&id);
    printf("kilnc %s (LLVM/MLIR %s, HAL module version %u, VM bytecode %u.%u)\n", id.version, id.llvm_version,
           KILN_HAL_MODULE_VERSION, KILN_VM_BYTECODE_VERSION_MAJOR, KILN_VM_BYTECODE_VERSION_MINOR);
    code = 0;
  } else if (opt.list_targets) {
    for (size_t t = 0; t < kiln_compiler_target_count(); t++) {
      const kiln_target_t *tt = kiln_compiler_target_at(t);
      printf("%-15s %-7s", tt->id, kiln_compiler_target_kind_name(tt->kind));
      for (size_t k = 0; tt->aliases && tt->aliases[k]; k++) printf(" %s", tt->aliases[k]);
      putchar('\n');
    }
    code = 0;
  } else if (n_positional > 1) {
    fprintf(stderr, "kilnc: one model at a time ('%s' and '%s')\n", positional[0], positional[1]);
    code = EXIT_USAGE;
  } else {
    /* Its temporary files and its tools' lie in a folder of its own, removed on
     * exit and on SIGINT, SIGTERM, SIGHUP and SIGQUIT: a Ctrl-C leaves nothing. */
    const char *scratch = NULL;
    kiln_status_t st = kiln_scratch_make("kilnc-", &scratch);
    if (st) {
      fprintf(stderr, "kilnc: warning: %s (compiling without a scratch folder of its own)\n",
              kiln_status_message(st));
      kiln_status_free(st);
    }
    code = run(&opt, &compat, n_positional ? positional[0] : NULL);
    st = kiln_scratch_remove();
    if (st) {
      fprintf(stderr, "kilnc: warning: %s\n", kiln_status_message(st));
      kiln_status_free(st);
    }
  }
  kiln_config_deinit(&option_table, &opt);
  for (int i = 0; i < n_made; i++) kiln_free(made[i]);
  kiln_free(made);
  kiln_free(own);
  return code;
}
