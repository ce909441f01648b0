/* cpu_exec.h: kiln's CPU executables run through dlopen(). */
#include "tests/tools/cpu_exec.h"

#include <dlfcn.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

#include "base/alloc.h"
#include "base/time.h"

/* IREE's executable library ABI (runtime/src/iree/hal/local/executable_library.h),
 * restated here from the header, independently of kiln's compiler, which lays
 * the same structs out as LLVM constants: what IREE's local drivers would read. */
typedef struct {
  uint32_t version;
  const char *name;
  uint32_t features;
  int32_t sanitizer;
} lib_header_t;
typedef struct {
  uint32_t workgroup_size_x, workgroup_size_y;
  uint16_t workgroup_size_z, constant_count;
  uint32_t workgroup_count_x, workgroup_count_y;
  uint16_t workgroup_count_z;
  uint8_t max_concurrency, binding_count;
  const uint32_t *constants;
  void *const *binding_ptrs;
  const size_t *binding_lengths;
} dispatch_state_t;
typedef struct {
  uint32_t workgroup_id_x, workgroup_id_y;
  uint16_t workgroup_id_z, reserved;
  uint32_t processor_id;
  void *local_memory;
  uint32_t local_memory_size;
} workgroup_state_t;
typedef int (*dispatch_fn_t)(const void *environment, const dispatch_state_t *, const workgroup_state_t *);
typedef struct {
  uint64_t flags;
  uint16_t local_memory_pages;
  uint8_t constant_count, binding_count;
  uint32_t workgroup_size_x, workgroup_size_y;
  uint16_t workgroup_size_z, parameter_count;
  uint64_t reserved[5];
} dispatch_attrs_t;
typedef struct {
  const lib_header_t *header;
  struct {
    uint32_t count;
    const char *const *symbols;
  } imports;
  struct {
    uint32_t count;
    const dispatch_fn_t *ptrs;
    const dispatch_attrs_t *attrs;
    const void *params, *occupancy;
    const char *const *names, *const *tags, *const *parameter_names;
    const void *source_locations, *stage_locations;
  } exports;
} library_t;
typedef const library_t *(*query_fn_t)(uint32_t max_version, const void *environment);

struct kiln_cpu_lib_s {
  void *handle;
  const library_t *lib;
};

kiln_cpu_lib_t *kiln_cpu_lib_load(const void *elf, size_t len, char *err, size_t err_cap) {
  char path[] = "/tmp/kiln-cpu-exec-XXXXXX.so";
  int fd = mkstemps(path, 3);
  if (fd < 0 || write(fd, elf, len) != (ssize_t)len) {
    snprintf(err, err_cap, "cannot write %s", path);
    if (fd >= 0) close(fd), unlink(path);
    return NULL;
  }
  close(fd);
  void *handle = dlopen(path, RTLD_NOW | RTLD_LOCAL);
  unlink(path);
  if (!handle) {
    snprintf(err, err_cap, "dlopen: %s", dlerror());
    return NULL;
  }
  query_fn_t query = (query_fn_t)(uintptr_t)dlsym(handle, "iree_hal_executable_library_query");
  uint64_t environment[32] = {0}; /* kiln's kernels use no imports and no constants */
  const library_t *lib = query ? query(6, environment) : NULL;
  const char *why = NULL;
  if (!lib || !lib->header || lib->header->version != 6) {
    why = "the ELF's library query answers no version-6 library";
  } else if (query(5, environment) != NULL) {
    why = "the library answers a reader of version 5";
  } else if (lib->imports.count != 0) {
    why = "the library imports functions";
  } else if (!lib->exports.ptrs || !lib->exports.attrs || !lib->exports.names) {
    why = "the library's export tables are missing";
  }
  if (why) {
    snprintf(err, err_cap, "%s", why);
    dlclose(handle);
    return NULL;
  }
  kiln_cpu_lib_t *l = kiln_calloc(1, sizeof *l);
  l->handle = handle;
  l->lib = lib;
  return l;
}

void kiln_cpu_lib_unload(kiln_cpu_lib_t *lib) {
  if (!lib) return;
  dlclose(lib->handle);
  kiln_free(lib);
}

uint32_t kiln_cpu_lib_exports(const kiln_cpu_lib_t *lib) { return lib->lib->exports.count; }

kiln_cpu_export_t kiln_cpu_lib_export(const kiln_cpu_lib_t *lib, uint32_t i) {
  const dispatch_attrs_t *a = &lib->lib->exports.attrs[i];
  return (kiln_cpu_export_t){
      .name = lib->lib->exports.names[i],
      .workgroup_size = {a->workgroup_size_x, a->workgroup_size_y, a->workgroup_size_z},
      .n_bindings = a->binding_count,
      .n_constants = a->constant_count};
}

typedef struct worker_s {
  dispatch_fn_t fn;
  const dispatch_state_t *ds;
  atomic_uint_fast64_t *next; /* the next workgroup to run, in x-fastest order */
  uint64_t total;
  atomic_int *failed;
} worker_t;

static void *work(void *user) {
  worker_t *w = user;
  uint64_t nx = w->ds->workgroup_count_x, ny = w->ds->workgroup_count_y;
  uint64_t environment[32] = {0};
  for (;;) {
    uint64_t i = atomic_fetch_add(w->next, 1);
    if (i >= w->total || atomic_load(w->failed)) break;
    workgroup_state_t ws = {.workgroup_id_x = (uint32_t)(i % nx),
                            .workgroup_id_y = (uint32_t)(i / nx % ny),
                            .workgroup_id_z = (uint16_t)(i / nx / ny)};
    int rc = w->fn(environment, w->ds, &ws);
    if (rc != 0) atomic_store(w->failed, rc);
  }
  return NULL;
}

/* The threads that share a dispatch's workgroups with the caller, kept for the
 * process's life as IREE's local-task keeps its pool (starting threads on every
 * dispatch would cost small kernels more than their work). A job is offered to
 * every pooled thread; `slots` of them take part. */
static struct {
  pthread_mutex_t mu;
  pthread_cond_t go, done;
  pthread_t *threads;
  unsigned n;
  uint64_t generation;
  worker_t *job;
  unsigned slots, busy;
} pool = {
    PTHREAD_MUTEX_INITIALIZER, PTHREAD_COND_INITIALIZER, PTHREAD_COND_INITIALIZER, NULL, 0, 0, NULL, 0, 0};

static void *pooled(void *unused) {
  (void)unused;
  uint64_t seen = 0;
  pthread_mutex_lock(&pool.mu);
  for (;;) {
    while (pool.generation == seen) pthread_cond_wait(&pool.go, &pool.mu);
    seen = pool.generation;
    if (!pool.slots) continue;
    pool.slots--;
    worker_t *job = pool.job;
    pthread_mutex_unlock(&pool.mu);
    work(job);
    pthread_mutex_lock(&pool.mu);
    if (--pool.busy == 0) pthread_cond_signal(&pool.done);
  }
  return NULL;
}

/* Runs `w` on the caller and up to `helpers` pooled threads (fewer if the pool cannot grow). */
static void run_shared(worker_t *w, unsigned helpers) {
  pthread_mutex_lock(&pool.mu);
  while (pool.n < helpers) {
    pool.threads = kiln_realloc(pool.threads, (pool.n + 1) * sizeof *pool.threads);
    if (pthread_create(&pool.threads[pool.n], NULL, pooled, NULL) != 0) break;
    pool.n++;
  }
  if (helpers > pool.n) helpers = pool.n;
  pool.job = w;
  pool.slots = pool.busy = helpers;
  pool.generation++;
  pthread_cond_broadcast(&pool.go);
  pthread_mutex_unlock(&pool.mu);
  work(w);
  pthread_mutex_lock(&pool.mu);
  while (pool.busy > 0) pthread_cond_wait(&pool.done, &pool.mu);
  pool.slots = 0;
  pthread_mutex_unlock(&pool.mu);
}

bool kiln_cpu_lib_dispatch(const kiln_cpu_lib_t *lib, uint32_t i, void *const *bindings,
                           const size_t *lengths, size_t n_bindings, const uint32_t *constants,
                           size_t n_constants, const uint32_t grid[3], unsigned threads, char *err,
                           size_t err_cap) {
  if (i >= lib->lib->exports.count) {
    snprintf(err, err_cap, "export %u of %u", i, lib->lib->exports.count);
    return false;
  }
  const dispatch_attrs_t *a = &lib->lib->exports.attrs[i];
  if (a->binding_count != n_bindings || a->constant_count != n_constants) {
    snprintf(err, err_cap, "%zu bindings and %zu constants given; export %u declares %u and %u", n_bindings,
             n_constants, i, a->binding_count, a->constant_count);
    return false;
  }
  dispatch_state_t ds = {.workgroup_size_x = a->workgroup_size_x,
                         .workgroup_size_y = a->workgroup_size_y,
                         .workgroup_size_z = a->workgroup_size_z,
                         .constant_count = (uint16_t)n_constants,
                         .workgroup_count_x = grid[0],
                         .workgroup_count_y = grid[1],
                         .workgroup_count_z = (uint16_t)grid[2],
                         .max_concurrency = (uint8_t)(threads ? threads : 1),
                         .binding_count = (uint8_t)n_bindings,
                         .constants = constants,
                         .binding_ptrs = bindings,
                         .binding_lengths = lengths};
  int64_t t0 = kiln_time_monotonic_ns();
  atomic_uint_fast64_t next = 0;
  atomic_int failed = 0;
  worker_t w = {lib->lib->exports.ptrs[i], &ds, &next, (uint64_t)grid[0] * grid[1] * grid[2], &failed};
  if (threads <= 1) {
    work(&w);
  } else {
    run_shared(&w, threads - 1);
  }
  if (getenv("KILN_CPU_EXEC_PROFILE")) {
    fprintf(stderr, "cpu_exec: %-40s %ux%ux%u workgroups of %ux%ux%u, %.3f ms\n", lib->lib->exports.names[i],
            grid[0], grid[1], grid[2], a->workgroup_size_x, a->workgroup_size_y, a->workgroup_size_z,
            (double)(kiln_time_monotonic_ns() - t0) / 1e6);
  }
  if (atomic_load(&failed)) {
    snprintf(err, err_cap, "export %u (%s): a workgroup returned %d", i, lib->lib->exports.names[i],
             atomic_load(&failed));
    return false;
  }
  return true;
}
