/* GetServerInfo: who this kilnd is, what it compiles with, for which targets, and
 * which HAL module and VM bytecode versions its artifacts carry. Pure: reads the
 * static target registry and the compiler identity. */
#include <string.h>

#include "compiler/identity.h"
#include "compiler/targets.h"
#include "daemon/jobs.h"
#include "daemon/rpc.h"
#include "kiln/v1/kiln.pb-c.h"

kiln_status_t kilnd_rpc_get_server_info(const kilnd_rpc_env_t *env, const kilnd_call_ctx_t *call,
                                        const ProtobufCMessage *request,
                                        ProtobufCMessage **out_response) {
  kiln_arena_t *arena = call->arena;
  (void)request; /* no fields */
  Kiln__V1__GetServerInfoResponse *resp = kiln_arena_alloc(arena, sizeof *resp);
  kiln__v1__get_server_info_response__init(resp);
  resp->kiln_version = kiln_arena_strdup(arena, KILN_VERSION);

  kiln_compiler_identity_t id;
  kiln_compiler_identity_get(&id);
  Kiln__V1__CompilerIdentity *compiler = kiln_arena_alloc(arena, sizeof *compiler);
  kiln__v1__compiler_identity__init(compiler);
  compiler->name = kiln_arena_strdup(arena, id.name);
  compiler->version = kiln_arena_strdup(arena, id.version);
  compiler->llvm_version = kiln_arena_strdup(arena, id.llvm_version);
  compiler->mlir_version = kiln_arena_strdup(arena, id.mlir_version);
  /* With an external compiler the workers' identity is what keys the cache. */
  const char *workers = env->jobs ? kilnd_jobs_compiler(env->jobs) : NULL;
  if (workers && strncmp(workers, "external ", 9) == 0) {
    compiler->name = kiln_arena_strdup(arena, "external");
    compiler->version = kiln_arena_strdup(arena, workers + 9);
    compiler->llvm_version = kiln_arena_strdup(arena, "");
    compiler->mlir_version = kiln_arena_strdup(arena, "");
  }
  resp->compiler = compiler;

  /* Every target Compile accepts: the GPU ones (the host CPU has no VMFB format). */
  size_t n = kiln_compiler_target_count();
  resp->targets = kiln_arena_calloc(arena, n, sizeof *resp->targets);
  for (size_t i = 0; i < n; i++) {
    const kiln_target_t *t = kiln_compiler_target_at(i);
    if (t->kind == KILN_TARGET_KIND_CPU) continue;
    Kiln__V1__TargetInfo *info = kiln_arena_alloc(arena, sizeof *info);
    kiln__v1__target_info__init(info);
    info->id = kiln_arena_strdup(arena, t->id);
    info->kind = (Kiln__V1__TargetKind)t->kind;
    info->executable_format = kiln_arena_strdup(arena, t->executable_format);
    info->description = kiln_arena_strdup(arena, t->description);
    info->hal_device = kiln_arena_strdup(arena, t->hal_device);
    size_t n_aliases = 0;
    while (t->aliases && t->aliases[n_aliases]) n_aliases++;
    info->n_aliases = n_aliases;
    info->aliases = kiln_arena_calloc(arena, n_aliases ? n_aliases : 1, sizeof(char *));
    for (size_t a = 0; a < n_aliases; a++) info->aliases[a] = kiln_arena_strdup(arena, t->aliases[a]);
    /* What iree-compile needs for the same target: kiln passes the chip, never the
     * alias, since some aliases are kiln's own. */
    info->n_compile_flags = 2;
    info->compile_flags = kiln_arena_calloc(arena, 2, sizeof(char *));
    info->compile_flags[0] = kiln_arena_sprintf(arena, "--iree-hal-target-device=%s", t->hal_device);
    info->compile_flags[1] = kiln_arena_sprintf(arena, "--%s=%s", t->chip_flag, t->chip);
    resp->targets[resp->n_targets++] = info;
  }

  resp->hal_module_version = KILN_HAL_MODULE_VERSION;
  resp->vm_bytecode_version_major = KILN_VM_BYTECODE_VERSION_MAJOR;
  resp->vm_bytecode_version_minor = KILN_VM_BYTECODE_VERSION_MINOR;
  resp->start_time_unix_ms = env->start_unix_ms;
  resp->hostname = kiln_arena_strdup(arena, env->hostname ? env->hostname : "");
  resp->max_message_bytes = env->settings->max_message_bytes;
  resp->max_source_bytes = KILND_MAX_SOURCE_BYTES;
  resp->chunk_size_bytes = kilnd_chunk_size(env->settings);
  resp->job_retention_ms = (uint64_t)env->settings->job_retention_ms;

  /* features: the Kiln methods this build serves, from the method table itself. */
  static const char prefix[] = "/kiln.v1.Kiln/";
  size_t n_methods;
  const kilnd_method_t *methods = kilnd_rpc_methods(&n_methods);
  resp->features = kiln_arena_calloc(arena, n_methods, sizeof(char *));
  for (size_t i = 0; i < n_methods; i++) {
    if (strncmp(methods[i].path, prefix, sizeof prefix - 1) == 0) {
      resp->features[resp->n_features++] =
          kiln_arena_strdup(arena, methods[i].path + sizeof prefix - 1);
    }
  }
  *out_response = &resp->base;
  return NULL;
}
