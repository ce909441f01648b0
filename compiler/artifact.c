/* Compiler output -> VMFB. Kernels of one target share device modules (the pipeline
 * merges every kernel into one gpu.module per target), so modules are deduplicated
 * by name and each kernel points at its module's index. */
#include "compiler/artifact.h"

#include <stdio.h>
#include <string.h>

#include "base/alloc.h"
#include "base/digest.h"
#include "compiler/identity.h"
#include "compiler/vmfb/writer.h"

/* iree-compile's --iree-llvmcpu-link-embedded=false (or =0) among the
 * space-separated flags: a CPU executable for the system's loader. */
static bool wants_system_elf(const char *flags) {
  static const char flag[] = "--iree-llvmcpu-link-embedded=";
  for (const char *p = flags; p && (p = strstr(p, flag)) != NULL; p += sizeof flag - 1) {
    if (p != flags && p[-1] != ' ') continue;
    const char *v = p + sizeof flag - 1;
    size_t n = strcspn(v, " ");
    if ((n == 5 && !strncmp(v, "false", 5)) || (n == 1 && v[0] == '0')) return true;
  }
  return false;
}

kiln_status_t kiln_compiler_artifact_write(const kiln_compiler_output_t *output, size_t index,
                                           const kiln_compiler_artifact_options_t *options, kiln_buf_t *out) {
  if (index >= output->n_targets) {
    return KILN_STATUS(KILN_STATUS_INVALID_ARGUMENT, "no target %zu in a compile of %zu", index,
                       output->n_targets);
  }
  const kiln_compiler_target_output_t *t = &output->targets[index];
  kiln_vmfb_format_t format;
  switch (t->target->kind) {
    case KILN_TARGET_KIND_CUDA: format = KILN_VMFB_FORMAT_CUDA; break;
    case KILN_TARGET_KIND_HIP: format = KILN_VMFB_FORMAT_HIP; break;
    case KILN_TARGET_KIND_VULKAN: format = KILN_VMFB_FORMAT_VULKAN; break;
    case KILN_TARGET_KIND_CPU: format = KILN_VMFB_FORMAT_ELF; break;
    default: return KILN_STATUS(KILN_STATUS_INTERNAL, "%s: unknown target kind", t->target->id);
  }
  if (t->status) {
    return KILN_STATUS(KILN_STATUS_FAILED_PRECONDITION, "%s did not compile: %s", t->target->id,
                       kiln_status_message(t->status));
  }
  if (output->plan_status || output->plan.n_functions == 0) {
    return KILN_STATUS(
        KILN_STATUS_FAILED_PRECONDITION, "%s: no VMFB: %s", t->target->id,
        output->plan_status ? kiln_status_message(output->plan_status) : "the model has no host plan");
  }
  kiln_vmfb_kernel_t *kernels = kiln_calloc(t->n_kernels ? t->n_kernels : 1, sizeof *kernels);
  kiln_vmfb_code_t *modules = kiln_calloc(t->n_kernels ? t->n_kernels : 1, sizeof *modules);
  const char **module_names = kiln_calloc(t->n_kernels ? t->n_kernels : 1, sizeof *module_names);
  size_t n_flags = 0, n_modules = 0;
  for (size_t k = 0; k < t->n_kernels; k++) n_flags += t->kernels[k].n_args;
  bool *flags = kiln_calloc(n_flags ? n_flags : 1, sizeof *flags);
  size_t flag_at = 0;
  for (size_t k = 0; k < t->n_kernels; k++) {
    const kiln_compiler_kernel_t *ck = &t->kernels[k];
    size_t m = 0;
    while (m < n_modules && strcmp(module_names[m], ck->module_name) != 0) m++;
    if (m == n_modules) {
      module_names[n_modules] = ck->module_name;
      modules[n_modules++] = (kiln_vmfb_code_t){ck->binary, ck->binary_len};
    }
    kiln_vmfb_kernel_t *vk = &kernels[k];
    vk->name = ck->name;
    vk->module = (uint32_t)m;
    memcpy(vk->block_size, ck->block_size, sizeof vk->block_size);
    vk->read_only = &flags[flag_at];
    for (size_t a = 0; a < ck->n_args; a++) {
      if (ck->args[a].kind == KILN_COMPILER_ARG_BUFFER) {
        flags[flag_at + vk->n_bindings] = ck->args[a].read_only;
        vk->n_bindings++;
      } else {
        vk->n_constants += ck->args[a].size_bytes > 4 ? 2 : 1;
      }
    }
    flag_at += ck->n_args;
  }
  /* A CPU executable is one ELF either way: IREE's own loader reads it as
   * embedded-elf-ARCH, the system's dlopen as system-elf-ARCH. */
  char format_name[64];
  snprintf(format_name, sizeof format_name, "%s", t->target->executable_format);
  static const char embedded[] = "embedded-elf-";
  if (format == KILN_VMFB_FORMAT_ELF && wants_system_elf(options->flags) &&
      !strncmp(format_name, embedded, sizeof embedded - 1)) {
    snprintf(format_name, sizeof format_name, "system-elf-%s",
             t->target->executable_format + sizeof embedded - 1);
  }
  kiln_vmfb_executable_t exe = {.format = format,
                                .kernels = kernels,
                                .n_kernels = t->n_kernels,
                                .modules = modules,
                                .n_modules = n_modules,
                                .subgroup_size = 0,
                                .format_name = format_name};
  kiln_compiler_identity_t id;
  kiln_compiler_identity_get(&id);
  char compiler[160];
  snprintf(compiler, sizeof compiler, "%s %s (LLVM/MLIR %s)", id.name, id.version, id.llvm_version);
  kiln_digest_t digest;
  kiln_digest_hex_t hex;
  kiln_digest_of(options->source, options->source_len, &digest);
  kiln_digest_to_hex(&digest, &hex);
  kiln_vmfb_provenance_t prov = {.source_sha256 = hex.text,
                                 .target = t->target->id,
                                 .flags = options->flags ? options->flags : "",
                                 .compiler = compiler};
  kiln_vmfb_write_options_t wo = {.flat = options->flat,
                                  .provenance = &prov,
                                  .source = options->embed_source ? options->source : NULL,
                                  .source_len = options->embed_source ? options->source_len : 0};
  /* The plan every target shares, with this target's own grids and fused
   * dispatches. */
  kiln_vmfb_plan_t plan;
  kiln_status_t st = kiln_compiler_target_plan(&output->plan, t, &plan);
  if (!st) {
    st = kiln_vmfb_write(plan.functions[0].name, &plan, &exe, &wo, out);
    kiln_compiler_target_plan_free(&plan);
  }
  kiln_free(kernels);
  kiln_free(modules);
  kiln_free(module_names);
  kiln_free(flags);
  if (st) st = kiln_status_annotate(st, "%s: writing the VMFB", t->target->id);
  return st;
}
