/* bench_gpu_device: times kiln's CUDA kernels on a real NVIDIA GPU against cuBLAS,
 * for a session that is lent one (issue 17). No GPU here, so it is prepared:
 * built with the rest, it loads the CUDA driver (libcuda.so.1) and cuBLAS with
 * dlopen at run time, and exits 77 where there is no driver.
 *
 *   here:   KILN_BENCH_EXPORT_GPU=build/gpu-cases KILN_BENCH_CASES=gpu build/bench/bench_kernels
 *   there:  build/bench/bench_gpu_device build/gpu-cases      (carry both paths)
 *   dry:    build/bench/bench_gpu_device --dry-run DIR        (parse and print, no GPU)
 *
 * Each case is DIR/<case>.plan beside DIR/<case>.ptx (kiln's sm_89 PTX module;
 * the driver JIT-compiles it for the GPU at hand, sm_90 on an H200). The plan, a
 * line per fact:
 *   kiln-cuda-case 1
 *   name <label>                      gemm M N K T (row-major C = A x B; A and B of
 *                                     type T, f32, f16 or bf16; C f32)
 *   buffer <id> input <arg> <bytes> | transient <bytes> | constant <bytes> <hex>
 *   dispatch <kernel> <gx> <gy> <gz> <bx> <by> <bz> <buffer>:<offset>:<length>...
 *   copy <src> <src offset> <dst> <dst offset> <bytes>
 *   result <buffer> <offset> <bytes>
 * Steps run in order; a kernel's arguments are one device pointer per binding
 * (kiln's bare-pointer convention, IREE's CUDA HAL's). Inputs are random floats;
 * cuBLAS computes the same product (cublasSgemm, or cublasGemmEx with f16 or bf16
 * inputs, f32 output and f32 accumulation on the tensor cores), the results are
 * compared (largest error
 * relative to the largest value), and both are timed with CUDA events over
 * enough repetitions for 0.2 s. Prints GFLOP/s and the ratio kiln / cuBLAS. */
#include <dirent.h>
#include <dlfcn.h>
#include <math.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/alloc.h"
#include "base/buf.h"
#include "base/file.h"

#define SKIP         77
#define MAX_BUFFERS  64
#define MAX_STEPS    64
#define MAX_BINDINGS 16

/* ---- the plan ---- */

typedef enum { B_INPUT, B_TRANSIENT, B_CONSTANT } buffer_kind_t;

typedef struct buffer_s {
  buffer_kind_t kind;
  unsigned arg;
  uint64_t bytes;
  uint8_t *data; /* constant */
} buffer_t;

typedef struct step_s {
  bool copy;
  char kernel[128];
  unsigned grid[3], block[3];
  unsigned n_bindings;
  unsigned buffer[MAX_BINDINGS];
  uint64_t offset[MAX_BINDINGS];
  unsigned src, dst;
  uint64_t src_offset, dst_offset, length;
} step_t;

typedef struct plan_s {
  char name[128];
  int m, n, k;
  bool f16; /* A and B are 16-bit: f16, or bf16 where bf16 */
  bool bf16;
  buffer_t buffers[MAX_BUFFERS];
  unsigned n_buffers;
  step_t steps[MAX_STEPS];
  unsigned n_steps;
  unsigned result_buffer;
  uint64_t result_offset, result_bytes;
  char *ptx;
} plan_t;

static bool parse_plan(const char *path, plan_t *p) {
  memset(p, 0, sizeof *p);
  char *text = kiln_read_file(path, NULL);
  if (!text) return false;
  bool ok = strncmp(text, "kiln-cuda-case 1\n", 17) == 0;
  for (char *save = NULL, *line = strtok_r(text, "\n", &save); line && ok;
       line = strtok_r(NULL, "\n", &save)) {
    unsigned id;
    unsigned long long a, b;
    char word[32];
    if (!strncmp(line, "name ", 5)) {
      snprintf(p->name, sizeof p->name, "%s", line + 5);
    } else if ((word[0] = '\0', sscanf(line, "gemm %d %d %d %31s", &p->m, &p->n, &p->k, word) >= 3)) {
      p->bf16 = !strcmp(word, "bf16");
      p->f16 = p->bf16 || !strcmp(word, "f16");
    } else if (sscanf(line, "buffer %u %31s", &id, word) == 2) {
      ok = id < MAX_BUFFERS && id == p->n_buffers;
      buffer_t *bf = &p->buffers[id];
      int used = 0;
      if (ok && !strcmp(word, "input") && sscanf(line, "buffer %*u input %u %llu", &bf->arg, &a) == 2) {
        bf->kind = B_INPUT, bf->bytes = a;
      } else if (ok && !strcmp(word, "transient") && sscanf(line, "buffer %*u transient %llu", &a) == 1) {
        bf->kind = B_TRANSIENT, bf->bytes = a;
      } else if (ok && !strcmp(word, "constant") &&
                 sscanf(line, "buffer %*u constant %llu %n", &a, &used) == 1 && used > 0 &&
                 strlen(line + used) == 2 * a) {
        bf->kind = B_CONSTANT, bf->bytes = a;
        bf->data = kiln_malloc(a ? a : 1);
        for (uint64_t i = 0; i < a; i++) {
          unsigned v;
          sscanf(line + used + 2 * i, "%2x", &v);
          bf->data[i] = (uint8_t)v;
        }
      } else {
        ok = false;
      }
      p->n_buffers++;
    } else if (!strncmp(line, "dispatch ", 9) && p->n_steps < MAX_STEPS) {
      step_t *s = &p->steps[p->n_steps++];
      int used = 0;
      ok = sscanf(line, "dispatch %127s %u %u %u %u %u %u%n", s->kernel, &s->grid[0], &s->grid[1],
                  &s->grid[2], &s->block[0], &s->block[1], &s->block[2], &used) == 7;
      for (const char *q = line + used; ok && *q;) {
        unsigned buf;
        unsigned long long off, len;
        int n = 0;
        if (sscanf(q, " %u:%llu:%llu%n", &buf, &off, &len, &n) != 3 || s->n_bindings == MAX_BINDINGS) {
          ok = false;
          break;
        }
        s->buffer[s->n_bindings] = buf;
        s->offset[s->n_bindings++] = off;
        q += n;
      }
    } else if (!strncmp(line, "copy ", 5) && p->n_steps < MAX_STEPS) {
      step_t *s = &p->steps[p->n_steps++];
      s->copy = true;
      unsigned long long so, doff, len;
      ok = sscanf(line, "copy %u %llu %u %llu %llu", &s->src, &so, &s->dst, &doff, &len) == 5;
      s->src_offset = so, s->dst_offset = doff, s->length = len;
    } else if (sscanf(line, "result %u %llu %llu", &id, &a, &b) == 3) {
      p->result_buffer = id, p->result_offset = a, p->result_bytes = b;
    } else if (strncmp(line, "kiln-cuda-case", 14) != 0) {
      ok = false;
    }
  }
  for (unsigned i = 0; i < p->n_steps && ok; i++) {
    const step_t *s = &p->steps[i];
    for (unsigned b = 0; b < s->n_bindings && ok; b++) ok = s->buffer[b] < p->n_buffers;
    if (s->copy) ok = s->src < p->n_buffers && s->dst < p->n_buffers;
  }
  ok = ok && p->result_buffer < p->n_buffers && p->n_steps > 0;
  kiln_free(text);
  return ok;
}

static void plan_free(plan_t *p) {
  for (unsigned i = 0; i < p->n_buffers; i++) kiln_free(p->buffers[i].data);
  kiln_free(p->ptx);
}

/* ---- the CUDA driver and cuBLAS, by dlopen ---- */

typedef int CUresult;
typedef unsigned long long CUdeviceptr;
static struct {
  void *lib;
  CUresult (*Init)(unsigned);
  CUresult (*DeviceGet)(int *, int);
  CUresult (*DeviceGetName)(char *, int, int);
  CUresult (*PrimaryCtxRetain)(void **, int);
  CUresult (*CtxSetCurrent)(void *);
  CUresult (*CtxSynchronize)(void);
  CUresult (*ModuleLoadDataEx)(void **, const void *, unsigned, int *, void **);
  CUresult (*ModuleGetFunction)(void **, void *, const char *);
  CUresult (*MemAlloc)(CUdeviceptr *, size_t);
  CUresult (*MemFree)(CUdeviceptr);
  CUresult (*MemcpyHtoD)(CUdeviceptr, const void *, size_t);
  CUresult (*MemcpyDtoH)(void *, CUdeviceptr, size_t);
  CUresult (*MemcpyDtoD)(CUdeviceptr, CUdeviceptr, size_t);
  CUresult (*LaunchKernel)(void *, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned,
                           void *, void **, void **);
  CUresult (*EventCreate)(void **, unsigned);
  CUresult (*EventRecord)(void *, void *);
  CUresult (*EventSynchronize)(void *);
  CUresult (*EventElapsedTime)(float *, void *, void *);
  CUresult (*GetErrorString)(CUresult, const char **);
} cu;

static struct {
  void *lib;
  int (*Create)(void **);
  int (*Sgemm)(void *, int, int, int, int, int, const float *, const float *, int, const float *, int,
               const float *, float *, int);
  int (*GemmEx)(void *, int, int, int, int, int, const void *, const void *, int, int, const void *, int, int,
                const void *, void *, int, int, int, int);
} blas;

/* cuBLAS's and CUDA's enum values (library_types.h, cublas_api.h). */
#define CUDA_R_32F                    0
#define CUDA_R_16F                    2
#define CUDA_R_16BF                   14
#define CUBLAS_COMPUTE_32F            68
#define CUBLAS_GEMM_DEFAULT_TENSOR_OP 99

static void *sym(void *lib, const char *name) {
  void *p = dlsym(lib, name);
  if (!p) {
    fprintf(stderr, "bench_gpu_device: %s has no %s\n", "the CUDA driver", name);
    exit(1);
  }
  return p;
}

#define CHECK(call)                                                              \
  do {                                                                           \
    CUresult r_ = (call);                                                        \
    if (r_ != 0) {                                                               \
      const char *why = "?";                                                     \
      if (cu.GetErrorString) cu.GetErrorString(r_, &why);                        \
      fprintf(stderr, "bench_gpu_device: %s failed: %d (%s)\n", #call, r_, why); \
      exit(1);                                                                   \
    }                                                                            \
  } while (0)

static bool load_cuda(void) {
  cu.lib = dlopen("libcuda.so.1", RTLD_NOW);
  if (!cu.lib) return false;
  *(void **)&cu.Init = sym(cu.lib, "cuInit");
  *(void **)&cu.DeviceGet = sym(cu.lib, "cuDeviceGet");
  *(void **)&cu.DeviceGetName = sym(cu.lib, "cuDeviceGetName");
  *(void **)&cu.PrimaryCtxRetain = sym(cu.lib, "cuDevicePrimaryCtxRetain");
  *(void **)&cu.CtxSetCurrent = sym(cu.lib, "cuCtxSetCurrent");
  *(void **)&cu.CtxSynchronize = sym(cu.lib, "cuCtxSynchronize");
  *(void **)&cu.ModuleLoadDataEx = sym(cu.lib, "cuModuleLoadDataEx");
  *(void **)&cu.ModuleGetFunction = sym(cu.lib, "cuModuleGetFunction");
  *(void **)&cu.MemAlloc = sym(cu.lib, "cuMemAlloc_v2");
  *(void **)&cu.MemFree = sym(cu.lib, "cuMemFree_v2");
  *(void **)&cu.MemcpyHtoD = sym(cu.lib, "cuMemcpyHtoD_v2");
  *(void **)&cu.MemcpyDtoH = sym(cu.lib, "cuMemcpyDtoH_v2");
  *(void **)&cu.MemcpyDtoD = sym(cu.lib, "cuMemcpyDtoD_v2");
  *(void **)&cu.LaunchKernel = sym(cu.lib, "cuLaunchKernel");
  *(void **)&cu.EventCreate = sym(cu.lib, "cuEventCreate");
  *(void **)&cu.EventRecord = sym(cu.lib, "cuEventRecord");
  *(void **)&cu.EventSynchronize = sym(cu.lib, "cuEventSynchronize");
  *(void **)&cu.EventElapsedTime = sym(cu.lib, "cuEventElapsedTime");
  *(void **)&cu.GetErrorString = sym(cu.lib, "cuGetErrorString");
  static const char *const names[] = {"libcublas.so", "libcublas.so.13", "libcublas.so.12",
                                      "libcublas.so.11"};
  for (size_t i = 0; i < sizeof names / sizeof names[0] && !blas.lib; i++)
    blas.lib = dlopen(names[i], RTLD_NOW);
  if (blas.lib) {
    *(void **)&blas.Create = dlsym(blas.lib, "cublasCreate_v2");
    *(void **)&blas.Sgemm = dlsym(blas.lib, "cublasSgemm_v2");
    *(void **)&blas.GemmEx = dlsym(blas.lib, "cublasGemmEx");
    if (!blas.Create || !blas.Sgemm) blas.lib = NULL;
  }
  return true;
}

/* ---- running a case ---- */

typedef struct device_plan_s {
  CUdeviceptr ptr[MAX_BUFFERS];
  void *fn[MAX_STEPS];
} device_plan_t;

static void run_steps(const plan_t *p, const device_plan_t *d) {
  for (unsigned i = 0; i < p->n_steps; i++) {
    const step_t *s = &p->steps[i];
    if (s->copy) {
      CHECK(cu.MemcpyDtoD(d->ptr[s->dst] + s->dst_offset, d->ptr[s->src] + s->src_offset, s->length));
      continue;
    }
    CUdeviceptr args[MAX_BINDINGS];
    void *params[MAX_BINDINGS];
    for (unsigned b = 0; b < s->n_bindings; b++) {
      args[b] = d->ptr[s->buffer[b]] + s->offset[b];
      params[b] = &args[b];
    }
    CHECK(cu.LaunchKernel(d->fn[i], s->grid[0], s->grid[1], s->grid[2], s->block[0], s->block[1], s->block[2],
                          0, NULL, params, NULL));
  }
}

/* Milliseconds per call of `fn` (over repetitions filling 0.2 s). */
static double time_ms(void (*fn)(const void *), const void *user) {
  void *start, *stop;
  CHECK(cu.EventCreate(&start, 0));
  CHECK(cu.EventCreate(&stop, 0));
  fn(user); /* warm */
  CHECK(cu.CtxSynchronize());
  int reps = 1;
  for (;;) {
    CHECK(cu.EventRecord(start, NULL));
    for (int r = 0; r < reps; r++) fn(user);
    CHECK(cu.EventRecord(stop, NULL));
    CHECK(cu.EventSynchronize(stop));
    float ms = 0;
    CHECK(cu.EventElapsedTime(&ms, start, stop));
    if (ms > 200 || reps >= 1 << 16) return ms / reps;
    reps *= ms > 1 ? (int)(250 / ms) + 1 : 64;
  }
}

typedef struct kiln_run_s {
  const plan_t *p;
  const device_plan_t *d;
} kiln_run_t;

static void run_kiln(const void *user) {
  const kiln_run_t *k = user;
  run_steps(k->p, k->d);
}

typedef struct blas_run_s {
  void *handle;
  int m, n, k;
  bool f16, bf16;
  CUdeviceptr a, b, c;
} blas_run_t;

static void run_blas(const void *user) {
  const blas_run_t *r = user;
  const float one = 1, zero = 0;
  /* Row-major C = A x B is column-major C^T = B^T x A^T: B first. */
  int half = r->bf16 ? CUDA_R_16BF : CUDA_R_16F;
  int rc = r->f16
               ? blas.GemmEx(r->handle, 0, 0, r->n, r->m, r->k, &one, (const void *)(uintptr_t)r->b, half,
                             r->n, (const void *)(uintptr_t)r->a, half, r->k, &zero, (void *)(uintptr_t)r->c,
                             CUDA_R_32F, r->n, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT_TENSOR_OP)
               : blas.Sgemm(r->handle, 0, 0, r->n, r->m, r->k, &one, (const float *)(uintptr_t)r->b, r->n,
                            (const float *)(uintptr_t)r->a, r->k, &zero, (float *)(uintptr_t)r->c, r->n);
  if (rc != 0) {
    fprintf(stderr, "bench_gpu_device: %s failed: %d\n", r->f16 ? "cublasGemmEx" : "cublasSgemm", rc);
    exit(1);
  }
}

/* The f16 nearest `x` (|x| <= 1 here: normal or zero, no overflow). */
static uint16_t to_half(float x) {
  uint32_t u;
  memcpy(&u, &x, sizeof u);
  uint32_t sign = (u >> 16) & 0x8000u, mag = u & 0x7fffffffu;
  if (mag < 0x38800000u) return (uint16_t)sign; /* below f16's normals: 0 (inputs are k/1000) */
  uint32_t h = ((mag >> 13) - ((127 - 15) << 10)), rest = mag & 0x1fffu;
  if (rest > 0x1000u || (rest == 0x1000u && (h & 1))) h++;
  return (uint16_t)(sign | h);
}

/* The bf16 nearest `x` (finite). */
static uint16_t to_bf16(float x) {
  uint32_t u;
  memcpy(&u, &x, sizeof u);
  return (uint16_t)((u + 0x7fffu + ((u >> 16) & 1u)) >> 16);
}

static void run_case(const plan_t *p) {
  device_plan_t d;
  memset(&d, 0, sizeof d);
  void *module = NULL;
  CHECK(cu.ModuleLoadDataEx(&module, p->ptx, 0, NULL, NULL));
  for (unsigned i = 0; i < p->n_steps; i++) {
    if (!p->steps[i].copy) CHECK(cu.ModuleGetFunction(&d.fn[i], module, p->steps[i].kernel));
  }
  uint64_t seed = 0x9e3779b97f4a7c15ull;
  float *inputs[MAX_BUFFERS] = {0};
  for (unsigned i = 0; i < p->n_buffers; i++) {
    const buffer_t *b = &p->buffers[i];
    CHECK(cu.MemAlloc(&d.ptr[i], b->bytes ? b->bytes : 4));
    if (b->kind == B_CONSTANT) CHECK(cu.MemcpyHtoD(d.ptr[i], b->data, b->bytes));
    if (b->kind == B_INPUT) {
      float *h = kiln_malloc(b->bytes ? b->bytes : 4);
      uint16_t *halves = (uint16_t *)h;
      size_t count = p->f16 ? b->bytes / 2 : b->bytes / 4;
      for (uint64_t j = 0; j < count; j++) {
        seed = seed * 6364136223846793005ull + 1442695040888963407ull;
        float v = (float)((int)(seed >> 40) % 2001 - 1000) / 1000.0f;
        if (p->bf16)
          halves[j] = to_bf16(v);
        else if (p->f16)
          halves[j] = to_half(v);
        else
          h[j] = v;
      }
      CHECK(cu.MemcpyHtoD(d.ptr[i], h, b->bytes));
      inputs[i] = h;
    }
  }
  kiln_run_t kr = {p, &d};
  double kiln_ms = time_ms(run_kiln, &kr);
  double flops = 2.0 * p->m * p->n * p->k;
  printf("%-20s kiln %9.3f ms %9.1f GFLOP/s", p->name, kiln_ms, flops / kiln_ms / 1e6);
  if (blas.lib && p->m > 0) {
    /* cuBLAS on the same inputs: the plan's first two input buffers are A and B. */
    int a_buf = -1, b_buf = -1;
    for (unsigned i = 0; i < p->n_buffers; i++) {
      if (p->buffers[i].kind != B_INPUT) continue;
      if (p->buffers[i].arg == 0) a_buf = (int)i;
      if (p->buffers[i].arg == 1) b_buf = (int)i;
    }
    blas_run_t br = {
        NULL, p->m, p->n, p->k, p->f16, p->bf16, a_buf >= 0 ? d.ptr[a_buf] : 0, b_buf >= 0 ? d.ptr[b_buf] : 0,
        0};
    size_t c_bytes = (size_t)p->m * p->n * 4;
    CHECK(cu.MemAlloc(&br.c, c_bytes));
    if (a_buf < 0 || b_buf < 0 || (p->f16 && !blas.GemmEx) || blas.Create(&br.handle) != 0) {
      printf("   (cuBLAS not usable)\n");
    } else {
      double blas_ms = time_ms(run_blas, &br);
      float *ref = kiln_malloc(c_bytes), *got = kiln_malloc(c_bytes);
      CHECK(cu.MemcpyDtoH(ref, br.c, c_bytes));
      run_steps(p, &d);
      CHECK(cu.CtxSynchronize());
      CHECK(cu.MemcpyDtoH(got, d.ptr[p->result_buffer] + p->result_offset, c_bytes));
      double worst = 0, scale = 0;
      for (size_t i = 0; i < c_bytes / 4; i++) {
        worst = fmax(worst, fabs((double)got[i] - ref[i]));
        scale = fmax(scale, fabs((double)ref[i]));
      }
      printf(" | cuBLAS %9.3f ms %9.1f GFLOP/s | kiln/cuBLAS %.3fx | max error %.2e %s\n", blas_ms,
             flops / blas_ms / 1e6, blas_ms / kiln_ms, scale ? worst / scale : worst,
             scale && worst / scale < 1e-3 ? "OK" : "WRONG");
      kiln_free(ref);
      kiln_free(got);
    }
    cu.MemFree(br.c);
  } else {
    printf("   (no cuBLAS on this machine: libcublas.so not found)\n");
  }
  for (unsigned i = 0; i < p->n_buffers; i++) {
    cu.MemFree(d.ptr[i]);
    kiln_free(inputs[i]);
  }
}

static int cmp_names(const void *a, const void *b) { return strcmp(*(char *const *)a, *(char *const *)b); }

int main(int argc, char **argv) {
  bool dry = argc == 3 && !strcmp(argv[1], "--dry-run");
  if (argc != 2 && !dry) {
    fprintf(stderr,
            "usage: bench_gpu_device [--dry-run] DIR (cases from KILN_BENCH_EXPORT_GPU=DIR bench_kernels)\n");
    return 2;
  }
  const char *dir = argv[argc - 1];
  DIR *dp = opendir(dir);
  if (!dp) {
    fprintf(stderr, "bench_gpu_device: cannot open %s\n", dir);
    return 2;
  }
  char *names[256];
  size_t n = 0;
  for (struct dirent *e; (e = readdir(dp)) && n < 256;) {
    size_t len = strlen(e->d_name);
    if (len > 5 && !strcmp(e->d_name + len - 5, ".plan")) names[n++] = kiln_strndup(e->d_name, len - 5);
  }
  closedir(dp);
  qsort(names, n, sizeof *names, cmp_names);
  if (n == 0) {
    fprintf(stderr, "bench_gpu_device: no .plan files in %s\n", dir);
    return 2;
  }
  if (!dry && !load_cuda()) {
    fprintf(stderr, "bench_gpu_device: no CUDA driver here (libcuda.so.1): skipped\n");
    for (size_t i = 0; i < n; i++) kiln_free(names[i]);
    return SKIP;
  }
  if (!dry) {
    int dev;
    char gpu[256] = "?";
    void *ctx;
    CHECK(cu.Init(0));
    CHECK(cu.DeviceGet(&dev, 0));
    CHECK(cu.DeviceGetName(gpu, sizeof gpu, dev));
    CHECK(cu.PrimaryCtxRetain(&ctx, dev));
    CHECK(cu.CtxSetCurrent(ctx));
    printf("bench_gpu_device: %s; kiln's sm_89 PTX, JIT-compiled by the driver; cuBLAS %s\n", gpu,
           blas.lib ? "loaded" : "absent");
  }
  int rc = 0;
  for (size_t i = 0; i < n; i++) {
    plan_t p;
    kiln_buf_t path;
    kiln_buf_init(&path);
    kiln_buf_appendf(&path, "%s/%s.plan", dir, names[i]);
    bool ok = parse_plan(path.data, &p);
    kiln_buf_clear(&path);
    kiln_buf_appendf(&path, "%s/%s.ptx", dir, names[i]);
    if (ok) p.ptx = kiln_read_file(path.data, NULL);
    if (!ok || !p.ptx) {
      fprintf(stderr, "bench_gpu_device: %s: not a kiln-cuda-case plan with its PTX\n", names[i]);
      rc = 1;
    } else if (dry) {
      printf("%s: gemm %dx%dx%d %s, %u buffer(s), %u step(s):", p.name, p.m, p.n, p.k,
             p.bf16  ? "bf16"
             : p.f16 ? "f16"
                     : "f32",
             p.n_buffers, p.n_steps);
      for (unsigned s = 0; s < p.n_steps; s++) {
        const step_t *st = &p.steps[s];
        if (st->copy)
          printf(" copy");
        else
          printf(" %s<<<%ux%ux%u, %ux%ux%u>>>(%u)", st->kernel, st->grid[0], st->grid[1], st->grid[2],
                 st->block[0], st->block[1], st->block[2], st->n_bindings);
      }
      printf("; PTX %zu bytes\n", strlen(p.ptx));
    } else {
      run_case(&p);
    }
    plan_free(&p);
    kiln_buf_deinit(&path);
    kiln_free(names[i]);
  }
  return rc;
}
