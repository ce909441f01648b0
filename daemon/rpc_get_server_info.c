/* GetServerInfo: who this kilnd is, what it compiles with, for which targets, and
 * which HAL module and VM bytecode versions its artifacts carry. Reads the static
 * target registry and the workers' compiler identity.
 *
 * kilnd links no compiler (kiln-worker does), so the compiler identity is the one
 * the first worker's Hello named, which is also what the cache keys use. On the
 * loop the call answers at once when that is known; otherwise it goes to the
 * thread pool and waits for the first Hello (at most WORKER_WAIT_MS, and never
 * past the client's deadline), so a client that asks right after start-up still
 * learns the real compiler. When none came: name "kiln-mlir", version
 * KILN_VERSION, empty LLVM and MLIR versions. */
#include <string.h>

#include "base/time.h"
#include "compiler/identity.h"
#include "compiler/targets.h"
#include "daemon/jobs.h"
#include "daemon/rpc.h"
#include "kiln/v1/kiln.pb-c.h"

/* How long a GetServerInfo waits for the first worker: kiln-worker is ready well
 * under a second after start, so this only covers a loaded or slow machine. */
#define WORKER_WAIT_MS 5000

/* The workers' identity into *out, waiting for it only where the call may block.
 * False when it is not known (yet). */
static bool workers_identity(const kilnd_rpc_env_t *env, const kilnd_call_ctx_t *call,
                             kilnd_compiler_info_t *out) {
  memset(out, 0, sizeof *out);
  if (!env->jobs) return false;
  if (kilnd_jobs_identity(env->jobs, out)) return true;
  if (!call->may_block) return false;
  /* Leave room to answer before the deadline: a tenth of it, at least 100 ms. */
  int64_t left_ms = (call->deadline_monotonic_ns - kiln_time_monotonic_ns()) / 1000000;
  int64_t room_ms = left_ms / 10 > 100 ? left_ms / 10 : 100;
  int64_t wait_ms = left_ms - room_ms < WORKER_WAIT_MS ? left_ms - room_ms : WORKER_WAIT_MS;
  if (wait_ms > 0) kilnd_jobs_compiler_wait(env->jobs, wait_ms);
  return kilnd_jobs_identity(env->jobs, out);
}

kiln_status_t kilnd_rpc_get_server_info(const kilnd_rpc_env_t *env, const kilnd_call_ctx_t *call,
                                        const ProtobufCMessage *request, ProtobufCMessage **out_response) {
  kiln_arena_t *arena = call->arena;
  (void)request; /* no fields */
  kilnd_compiler_info_t id;
  bool known = workers_identity(env, call, &id);
  if (!known && env->jobs && !call->may_block && call->run_off_loop) {
    *call->run_off_loop = true; /* wait on the pool for the first worker */
    return NULL;
  }
  Kiln__V1__GetServerInfoResponse *resp = kiln_arena_alloc(arena, sizeof *resp);
  kiln__v1__get_server_info_response__init(resp);
  resp->kiln_version = kiln_arena_strdup(arena, KILN_VERSION);

  Kiln__V1__CompilerIdentity *compiler = kiln_arena_alloc(arena, sizeof *compiler);
  kiln__v1__compiler_identity__init(compiler);
  compiler->name = kiln_arena_strdup(arena, known ? id.name : "kiln-mlir");
  compiler->version = kiln_arena_strdup(arena, known ? id.version : KILN_VERSION);
  compiler->llvm_version = kiln_arena_strdup(arena, known ? id.llvm_version : "");
  compiler->mlir_version = kiln_arena_strdup(arena, known ? id.mlir_version : "");
  resp->compiler = compiler;

  /* Every target Compile accepts. */
  size_t n = kiln_compiler_target_count();
  resp->targets = kiln_arena_calloc(arena, n, sizeof *resp->targets);
  for (size_t i = 0; i < n; i++) {
    const kiln_target_t *t = kiln_compiler_target_at(i);
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
    if (kilnd_method_served(&methods[i]) && strncmp(methods[i].path, prefix, sizeof prefix - 1) == 0) {
      resp->features[resp->n_features++] = kiln_arena_strdup(arena, methods[i].path + sizeof prefix - 1);
    }
  }
  *out_response = &resp->base;
  return NULL;
}
