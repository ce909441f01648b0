/* corpus_check: compiles the coverage corpus with kiln's compiler and runs what it
 * emits for Vulkan targets on a real Vulkan device (Mesa's lavapipe in CI) and for
 * CPU targets of this machine's architecture through dlopen() of the executable
 * library (as IREE's local-sync driver calls it), comparing every result with the
 * reference values the corpus file carries.
 *
 *   corpus_check [--targets T,...] [--list] FILE.mlir...
 *
 * A corpus file is MLIR with its cases in comments, one block per function:
 *
 *   // CASE @name            (the function; a file may hold several)
 *   // INPUT 3xi8 1 2 3      (one line per argument, in order: shape x type, values)
 *   // OUTPUT 3xi8 2 4 6     (one line per result)
 *   // TOL 1e-3              (optional: relative float tolerance, default per type)
 *   // EXACT                 (optional: floats bit for bit, any NaN matching a NaN)
 *   // COMPILE-ONLY          (optional: compile and validate, do not run)
 *   // XFAIL T,... reason     (optional: known to fail on these targets, * for all; counted as
 *                            "xfail", and as a failure when it passes, so the
 *                            mark goes when the gap is closed)
 *
 * What runs is what the VMFB's host program encodes: the compiler's host plan
 * (the writer turns exactly it into VM bytecode), buffer by buffer and step by
 * step: each dispatch binds its buffers at set 0, binding i, with the plan's byte
 * ranges, pushes its constants and dispatches its grid; each copy copies; a
 * barrier separates steps as IREE's command buffers do. Buffers are allocated at
 * the plan's sizes. The device code is the target's SPIR-V, entry point by kernel
 * name. The reference values are computed independently of kiln (by the script
 * that wrote the corpus, tests/corpus/gen.py, in plain Python).
 *
 * Order: every case of every file is compiled first, and only then is the Vulkan
 * device created (its presence is probed in a child beforehand), because the
 * compiler forks its back halves and a fork from a process that runs the
 * driver's threads may deadlock in the child under sanitizers.
 *
 * Prints one line per (case, target) and closes with "N passed, M failed"; exits
 * 1 when any failed, 2 on usage errors, 77 (skip) when no Vulkan device exists.
 */
#include <dlfcn.h>
#include <errno.h>
#include <link.h>
#include <math.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>
#include <vulkan/vulkan.h>

#include "base/alloc.h"
#include "base/buf.h"
#include "base/file.h"
#include "base/status.h"
#include "compiler/pipeline.h"
#include "compiler/source.h"
#include "compiler/targets.h"
#include "compiler/vmfb/plan.h"
#include "tests/tools/cpu_exec.h"

/* ---- values ---- */

typedef struct tensor_s {
  kiln_vmfb_tensor_type_t type;
  uint8_t *bytes; /* packed as IREE packs them */
  uint64_t len;
} tensor_t;

typedef struct case_s {
  char *function;
  tensor_t inputs[16], outputs[16];
  size_t n_inputs, n_outputs;
  double tol; /* 0: the type's default */
  bool compile_only;
  bool exact;
  char *xfail;      /* comma-separated target ids, or NULL */
  const char *text; /* the case's block of the file: its own module */
  size_t text_len;
} case_t;

static uint16_t f32_to_f16(float f) {
  /* Reference conversion for test data (round to nearest even via double). */
  uint32_t x;
  memcpy(&x, &f, 4);
  uint32_t sign = (x >> 16) & 0x8000u;
  double a = fabs((double)f);
  if (isnan(f)) return (uint16_t)(sign | 0x7e00u);
  if (a >= 65520.0) return (uint16_t)(sign | 0x7c00u);
  if (a < 6.103515625e-05) return (uint16_t)(sign | (uint16_t)nearbyint(a / 5.9604644775390625e-08));
  int e;
  double m = frexp(a, &e); /* a = m * 2^e, m in [0.5, 1) */
  uint32_t man = (uint32_t)nearbyint((m * 2.0 - 1.0) * 1024.0);
  uint32_t exp = (uint32_t)(e - 1 + 15);
  if (man == 1024) {
    man = 0;
    exp++;
  }
  if (exp >= 31) return (uint16_t)(sign | 0x7c00u);
  return (uint16_t)(sign | exp << 10 | man);
}

static double f16_to_double(uint16_t h) {
  int exp = (h >> 10) & 0x1f, man = h & 0x3ff;
  double v = exp == 0 ? ldexp(man, -24) : exp == 31 ? (man ? NAN : INFINITY) : ldexp(man + 1024, exp - 25);
  return (h & 0x8000) ? -v : v;
}

static double bf16_to_double(uint16_t b) {
  uint32_t x = (uint32_t)b << 16;
  float f;
  memcpy(&f, &x, 4);
  return f;
}

static uint16_t double_to_bf16(double d) {
  float f = (float)d;
  uint32_t x;
  memcpy(&x, &f, 4);
  if (isnan(f)) return (uint16_t)((x >> 16) | 0x40);
  x += 0x7fffu + ((x >> 16) & 1u);
  return (uint16_t)(x >> 16);
}

/* The 8-bit floats IREE has buffer views for, decoded independently of the
 * compiler's helpers (from each format's definition); encoding picks the code
 * whose value is nearest (test inputs are exact). */
static double f8_to_double(uint32_t et, uint8_t c) {
  int e, m, bias;
  switch (et) {
    case KILN_VMFB_ELEMENT_FLOAT_8_E5M2: e = 5, m = 2, bias = 15; break;
    case KILN_VMFB_ELEMENT_FLOAT_8_E4M3_FN: e = 4, m = 3, bias = 7; break;
    case KILN_VMFB_ELEMENT_FLOAT_8_E5M2_FNUZ: e = 5, m = 2, bias = 16; break;
    case KILN_VMFB_ELEMENT_FLOAT_8_E4M3_FNUZ: e = 4, m = 3, bias = 8; break;
    case KILN_VMFB_ELEMENT_FLOAT_8_E8M0_FNU: return c == 0xFF ? NAN : ldexp(1.0, c - 127);
    default: return NAN;
  }
  int exp = (c >> m) & ((1 << e) - 1), man = c & ((1 << m) - 1);
  bool neg = c & 0x80;
  bool fnuz = et == KILN_VMFB_ELEMENT_FLOAT_8_E5M2_FNUZ || et == KILN_VMFB_ELEMENT_FLOAT_8_E4M3_FNUZ;
  if (fnuz && c == 0x80) return NAN;
  if (et == KILN_VMFB_ELEMENT_FLOAT_8_E4M3_FN && (c & 0x7F) == 0x7F) return NAN;
  if (et == KILN_VMFB_ELEMENT_FLOAT_8_E5M2 && exp == 31) return man ? NAN : (neg ? -INFINITY : INFINITY);
  double v = exp == 0 ? ldexp(man, 1 - bias - m) : ldexp(man + (1 << m), exp - bias - m);
  return neg ? -v : v;
}

static uint8_t double_to_f8(uint32_t et, double v) {
  int best = 0;
  double best_d = INFINITY;
  for (int c = 0; c < 256; c++) {
    double x = f8_to_double(et, (uint8_t)c);
    if ((isnan(v) && isnan(x)) || (x == v && signbit(x) == signbit(v))) return (uint8_t)c;
    double d = fabs(x - v);
    if (!isnan(x) && (d < best_d || (d == best_d && signbit(x) == signbit(v)))) best = c, best_d = d;
  }
  return (uint8_t)best;
}

static bool is_f8(uint32_t et) { return kiln_vmfb_element_bits(et) == 8 && (et >> 24) >= 0x24; }

/* "2x3xf32" -> type. */
static bool parse_type(const char *s, kiln_vmfb_tensor_type_t *t) {
  memset(t, 0, sizeof *t);
  for (;;) {
    char *end;
    if (*s >= '0' && *s <= '9') {
      long long d = strtoll(s, &end, 10);
      if (*end != 'x' || t->rank >= KILN_VMFB_MAX_RANK) return false;
      t->dims[t->rank++] = d;
      s = end + 1;
      continue;
    }
    break;
  }
  static const uint32_t types[] = {
      KILN_VMFB_ELEMENT_BOOL_8,
      KILN_VMFB_ELEMENT_INT_8,
      KILN_VMFB_ELEMENT_INT_16,
      KILN_VMFB_ELEMENT_INT_32,
      KILN_VMFB_ELEMENT_INT_64,
      KILN_VMFB_ELEMENT_FLOAT_16,
      KILN_VMFB_ELEMENT_FLOAT_32,
      KILN_VMFB_ELEMENT_FLOAT_64,
      KILN_VMFB_ELEMENT_BFLOAT_16,
      KILN_VMFB_ELEMENT_INT_2,
      KILN_VMFB_ELEMENT_INT_4,
      KILN_VMFB_ELEMENT_FLOAT_8_E5M2,
      KILN_VMFB_ELEMENT_FLOAT_8_E4M3_FN,
      KILN_VMFB_ELEMENT_FLOAT_8_E5M2_FNUZ,
      KILN_VMFB_ELEMENT_FLOAT_8_E4M3_FNUZ,
      KILN_VMFB_ELEMENT_FLOAT_8_E8M0_FNU,
  };
  for (size_t i = 0; i < sizeof types / sizeof types[0]; i++) {
    if (strcmp(s, kiln_vmfb_element_name(types[i])) == 0) {
      t->element_type = types[i];
      return true;
    }
  }
  return false;
}

static bool is_float(uint32_t et) { return (et >> 24) >= 0x20; }

/* Integers are read and compared as int64 (exact, unlike a double past 2^53). */
static void put_value(tensor_t *t, uint64_t i, double v, int64_t iv) {
  uint32_t bits = kiln_vmfb_element_bits(t->type.element_type);
  if (bits < 8) { /* i2/i4: packed, low bits first */
    uint8_t mask = (uint8_t)((1u << bits) - 1u);
    t->bytes[i * bits / 8] |= (uint8_t)(((uint8_t)iv & mask) << (i * bits % 8));
    return;
  }
  uint8_t *p = t->bytes + i * (bits / 8);
  if (is_f8(t->type.element_type)) {
    *p = double_to_f8(t->type.element_type, v);
    return;
  }
  switch (t->type.element_type) {
    case KILN_VMFB_ELEMENT_BOOL_8: *p = iv != 0; break;
    case KILN_VMFB_ELEMENT_INT_8: *(int8_t *)p = (int8_t)iv; break;
    case KILN_VMFB_ELEMENT_INT_16: {
      int16_t x = (int16_t)iv;
      memcpy(p, &x, 2);
      break;
    }
    case KILN_VMFB_ELEMENT_INT_32: {
      int32_t x = (int32_t)iv;
      memcpy(p, &x, 4);
      break;
    }
    case KILN_VMFB_ELEMENT_INT_64: memcpy(p, &iv, 8); break;
    case KILN_VMFB_ELEMENT_FLOAT_16: {
      uint16_t x = f32_to_f16((float)v);
      memcpy(p, &x, 2);
      break;
    }
    case KILN_VMFB_ELEMENT_BFLOAT_16: {
      uint16_t x = double_to_bf16(v);
      memcpy(p, &x, 2);
      break;
    }
    case KILN_VMFB_ELEMENT_FLOAT_32: {
      float x = (float)v;
      memcpy(p, &x, 4);
      break;
    }
    case KILN_VMFB_ELEMENT_FLOAT_64: memcpy(p, &v, 8); break;
    default: break;
  }
}

static int64_t get_int(uint32_t et, const uint8_t *bytes, uint64_t i) {
  uint32_t bits = kiln_vmfb_element_bits(et);
  if (bits < 8) { /* sign-extended, as MLIR's signless iN reads as a signed value */
    int64_t x = (bytes[i * bits / 8] >> (i * bits % 8)) & ((1 << bits) - 1);
    return x >= (1 << (bits - 1)) ? x - (1 << bits) : x;
  }
  const uint8_t *p = bytes + i * (bits / 8);
  switch (et) {
    case KILN_VMFB_ELEMENT_BOOL_8: return *p;
    case KILN_VMFB_ELEMENT_INT_8: return *(const int8_t *)p;
    case KILN_VMFB_ELEMENT_INT_16: {
      int16_t x;
      memcpy(&x, p, 2);
      return x;
    }
    case KILN_VMFB_ELEMENT_INT_32: {
      int32_t x;
      memcpy(&x, p, 4);
      return x;
    }
    case KILN_VMFB_ELEMENT_INT_64: {
      int64_t x;
      memcpy(&x, p, 8);
      return x;
    }
    default: return 0;
  }
}

static double get_value(uint32_t et, const uint8_t *bytes, uint64_t i) {
  if (kiln_vmfb_element_bits(et) < 8) return (double)get_int(et, bytes, i);
  const uint8_t *p = bytes + i * (kiln_vmfb_element_bits(et) / 8);
  if (is_f8(et)) return f8_to_double(et, *p);
  switch (et) {
    case KILN_VMFB_ELEMENT_BOOL_8: return *p;
    case KILN_VMFB_ELEMENT_INT_8: return *(const int8_t *)p;
    case KILN_VMFB_ELEMENT_INT_16: {
      int16_t x;
      memcpy(&x, p, 2);
      return x;
    }
    case KILN_VMFB_ELEMENT_INT_32: {
      int32_t x;
      memcpy(&x, p, 4);
      return x;
    }
    case KILN_VMFB_ELEMENT_INT_64: {
      int64_t x;
      memcpy(&x, p, 8);
      return (double)x;
    }
    case KILN_VMFB_ELEMENT_FLOAT_16: {
      uint16_t x;
      memcpy(&x, p, 2);
      return f16_to_double(x);
    }
    case KILN_VMFB_ELEMENT_BFLOAT_16: {
      uint16_t x;
      memcpy(&x, p, 2);
      return bf16_to_double(x);
    }
    case KILN_VMFB_ELEMENT_FLOAT_32: {
      float x;
      memcpy(&x, p, 4);
      return x;
    }
    case KILN_VMFB_ELEMENT_FLOAT_64: {
      double x;
      memcpy(&x, p, 8);
      return x;
    }
    default: return NAN;
  }
}

static uint64_t elements(const kiln_vmfb_tensor_type_t *t) {
  uint64_t n = 1;
  for (uint32_t d = 0; d < t->rank; d++) n *= (uint64_t)t->dims[d];
  return n;
}

/* "3xi8 1 2 3" (values separated by spaces or commas; nan, inf, -inf allowed). */
static bool parse_tensor(const char *line, tensor_t *t) {
  char type[64];
  int used = 0;
  if (sscanf(line, "%63s%n", type, &used) != 1 || !parse_type(type, &t->type)) return false;
  if (!kiln_vmfb_tensor_type_bytes(&t->type, &t->len)) return false;
  t->bytes = kiln_calloc(t->len ? t->len : 1, 1);
  const char *p = line + used;
  uint64_t n = elements(&t->type);
  for (uint64_t i = 0; i < n; i++) {
    while (*p == ' ' || *p == ',' || *p == '\t') p++;
    char *end;
    double v = strtod(p, &end);
    if (end == p) return false;
    int64_t iv = 0;
    if (!is_float(t->type.element_type)) {
      char *iend;
      iv = strtoll(p, &iend, 10);
      if (iend != end) return false; /* an integer type takes integers */
    }
    put_value(t, i, v, iv);
    p = end;
  }
  while (*p == ' ' || *p == '\t' || *p == '\n' || *p == '\r') p++;
  return *p == '\0';
}

static void case_free(case_t *c) {
  kiln_free(c->function);
  kiln_free(c->xfail);
  for (size_t i = 0; i < c->n_inputs; i++) kiln_free(c->inputs[i].bytes);
  for (size_t i = 0; i < c->n_outputs; i++) kiln_free(c->outputs[i].bytes);
  memset(c, 0, sizeof *c);
}

/* Reads every "// CASE" block of a file. */
static bool parse_cases(const char *path, const char *text, case_t **out, size_t *n_out) {
  case_t *cases = NULL;
  size_t n = 0;
  bool ok = true;
  for (const char *line = text; line && *line && ok;) {
    const char *nl = strchr(line, '\n');
    size_t len = nl ? (size_t)(nl - line) : strlen(line);
    char *l = kiln_strndup(line, len);
    if (strncmp(l, "// CASE @", 9) == 0) {
      cases = kiln_realloc(cases, (n + 1) * sizeof *cases);
      memset(&cases[n], 0, sizeof cases[n]);
      cases[n].text = line;
      if (n) cases[n - 1].text_len = (size_t)(line - cases[n - 1].text);
      cases[n++].function = kiln_strdup(l + 9);
    } else if (n && strncmp(l, "// INPUT ", 9) == 0 && cases[n - 1].n_inputs < 16) {
      ok = parse_tensor(l + 9, &cases[n - 1].inputs[cases[n - 1].n_inputs++]);
    } else if (n && strncmp(l, "// OUTPUT ", 10) == 0 && cases[n - 1].n_outputs < 16) {
      ok = parse_tensor(l + 10, &cases[n - 1].outputs[cases[n - 1].n_outputs++]);
    } else if (n && strncmp(l, "// TOL ", 7) == 0) {
      cases[n - 1].tol = strtod(l + 7, NULL);
    } else if (n && strncmp(l, "// XFAIL ", 9) == 0) {
      char *sp = strchr(l + 9, ' ');
      cases[n - 1].xfail = kiln_strndup(l + 9, sp ? (size_t)(sp - (l + 9)) : strlen(l + 9));
    } else if (n && strcmp(l, "// EXACT") == 0) {
      cases[n - 1].exact = true;
    } else if (n && strcmp(l, "// COMPILE-ONLY") == 0) {
      cases[n - 1].compile_only = true;
    }
    if (!ok) fprintf(stderr, "corpus_check: %s: bad line: %s\n", path, l);
    kiln_free(l);
    line = nl ? nl + 1 : NULL;
  }
  if (n) cases[n - 1].text_len = strlen(cases[n - 1].text);
  *out = cases;
  *n_out = n;
  return ok;
}

/* ---- Vulkan ---- */

typedef struct vk_s {
  VkInstance instance;
  VkPhysicalDevice physical;
  VkDevice device;
  VkQueue queue;
  uint32_t queue_family;
  uint32_t memory_type;
  VkCommandPool pool;
  char name[256];
} vk_t;

#define VK_OK(call)                                                     \
  do {                                                                  \
    VkResult r_ = (call);                                               \
    if (r_ != VK_SUCCESS) {                                             \
      snprintf(err, err_cap, "%s failed: VkResult %d", #call, (int)r_); \
      goto done;                                                        \
    }                                                                   \
  } while (0)

static bool vk_init(vk_t *vk) {
  memset(vk, 0, sizeof *vk);
  VkApplicationInfo app = {.sType = VK_STRUCTURE_TYPE_APPLICATION_INFO,
                           .pApplicationName = "kiln corpus_check",
                           .apiVersion = VK_API_VERSION_1_2};
  VkInstanceCreateInfo ici = {.sType = VK_STRUCTURE_TYPE_INSTANCE_CREATE_INFO, .pApplicationInfo = &app};
  if (vkCreateInstance(&ici, NULL, &vk->instance) != VK_SUCCESS) return false;
  uint32_t n = 0;
  vkEnumeratePhysicalDevices(vk->instance, &n, NULL);
  if (n == 0) return false;
  VkPhysicalDevice devices[16];
  if (n > 16) n = 16;
  vkEnumeratePhysicalDevices(vk->instance, &n, devices);
  vk->physical = devices[0];
  VkPhysicalDeviceProperties props;
  vkGetPhysicalDeviceProperties(vk->physical, &props);
  snprintf(vk->name, sizeof vk->name, "%s", props.deviceName);
  uint32_t nq = 0;
  vkGetPhysicalDeviceQueueFamilyProperties(vk->physical, &nq, NULL);
  VkQueueFamilyProperties qf[16];
  if (nq > 16) nq = 16;
  vkGetPhysicalDeviceQueueFamilyProperties(vk->physical, &nq, qf);
  vk->queue_family = UINT32_MAX;
  for (uint32_t i = 0; i < nq; i++) {
    if (qf[i].queueFlags & VK_QUEUE_COMPUTE_BIT) {
      vk->queue_family = i;
      break;
    }
  }
  if (vk->queue_family == UINT32_MAX) return false;
  VkPhysicalDeviceMemoryProperties mem;
  vkGetPhysicalDeviceMemoryProperties(vk->physical, &mem);
  vk->memory_type = UINT32_MAX;
  VkMemoryPropertyFlags want = VK_MEMORY_PROPERTY_HOST_VISIBLE_BIT | VK_MEMORY_PROPERTY_HOST_COHERENT_BIT;
  for (uint32_t i = 0; i < mem.memoryTypeCount; i++) {
    if ((mem.memoryTypes[i].propertyFlags & want) == want) {
      vk->memory_type = i;
      break;
    }
  }
  if (vk->memory_type == UINT32_MAX) return false;
  /* Everything a profile may declare: 8/16-bit storage and arithmetic, Int64,
   * Float64 (lavapipe has them all; a missing one fails the device creation). */
  VkPhysicalDeviceVulkan12Features f12 = {.sType = VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_VULKAN_1_2_FEATURES};
  VkPhysicalDeviceVulkan11Features f11 = {.sType = VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_VULKAN_1_1_FEATURES,
                                          .pNext = &f12};
  VkPhysicalDeviceFeatures2 f2 = {.sType = VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_FEATURES_2, .pNext = &f11};
  vkGetPhysicalDeviceFeatures2(vk->physical, &f2);
  float priority = 1.0f;
  VkDeviceQueueCreateInfo qci = {.sType = VK_STRUCTURE_TYPE_DEVICE_QUEUE_CREATE_INFO,
                                 .queueFamilyIndex = vk->queue_family,
                                 .queueCount = 1,
                                 .pQueuePriorities = &priority};
  VkDeviceCreateInfo dci = {.sType = VK_STRUCTURE_TYPE_DEVICE_CREATE_INFO,
                            .pNext = &f2,
                            .queueCreateInfoCount = 1,
                            .pQueueCreateInfos = &qci};
  if (vkCreateDevice(vk->physical, &dci, NULL, &vk->device) != VK_SUCCESS) return false;
  vkGetDeviceQueue(vk->device, vk->queue_family, 0, &vk->queue);
  VkCommandPoolCreateInfo pci = {.sType = VK_STRUCTURE_TYPE_COMMAND_POOL_CREATE_INFO,
                                 .flags = VK_COMMAND_POOL_CREATE_RESET_COMMAND_BUFFER_BIT,
                                 .queueFamilyIndex = vk->queue_family};
  return vkCreateCommandPool(vk->device, &pci, NULL, &vk->pool) == VK_SUCCESS;
}

/* Keeps a shared object that is loaded now mapped until exit (RTLD_NODELETE). */
static int pin_object(struct dl_phdr_info *info, size_t size, void *data) {
  (void)size, (void)data;
  if (info->dlpi_name && *info->dlpi_name) dlopen(info->dlpi_name, RTLD_NOW | RTLD_NOLOAD | RTLD_NODELETE);
  return 0;
}

/* The Vulkan loader unloads the driver (lavapipe, and the LLVM it links) at
 * vkDestroyInstance. What the driver's globals still point to would then read as
 * leaked to LeakSanitizer at exit, from "<unknown module>", which no suppression
 * can name (the ASan corpus run failed on 128 such bytes). Every object loaded
 * once the device exists stays mapped instead, so the driver's memory stays
 * reachable and its own leaks are named by module (tests/lsan.supp). */
static void pin_loaded_objects(void) { dl_iterate_phdr(pin_object, NULL); }

static void vk_deinit(vk_t *vk) {
  if (vk->pool) vkDestroyCommandPool(vk->device, vk->pool, NULL);
  if (vk->device) vkDestroyDevice(vk->device, NULL);
  if (vk->instance) vkDestroyInstance(vk->instance, NULL);
}

typedef struct vbuf_s {
  VkBuffer buffer;
  VkDeviceMemory memory;
  void *map;
  uint64_t size;
} vbuf_t;

/* Runs function `fn` of `plan` with `kernels`; writes its results into outs. */
/* A size: expression `expr`'s value, or the static `value`. */
static uint64_t sized(const int64_t *values, uint32_t expr, uint64_t value) {
  return expr ? (uint64_t)values[expr - 1] : value;
}

/* The sizes of this call (the plan's expressions), from the case's input shapes. */
static bool call_sizes(const kiln_vmfb_function_t *fn, const case_t *c, int64_t *values, char *err,
                       size_t err_cap) {
  int64_t(*dims)[KILN_VMFB_MAX_RANK] = kiln_calloc(c->n_inputs ? c->n_inputs : 1, sizeof *dims);
  for (size_t i = 0; i < c->n_inputs; i++) memcpy(dims[i], c->inputs[i].type.dims, sizeof dims[i]);
  bool ok = c->n_inputs >= fn->n_inputs &&
            kiln_vmfb_exprs_eval(fn, (const int64_t(*)[KILN_VMFB_MAX_RANK])dims, values);
  if (!ok) snprintf(err, err_cap, "the plan's sizes do not evaluate for the case's inputs");
  kiln_free(dims);
  return ok;
}

/* Fills buffer i of a call (mapped at `map`, `size` bytes): garbage, not zeros, in
 * what a kernel must write (a skipped store shows), then the input, constant,
 * variable or argument words it starts with. */
static bool fill_buffer(const kiln_vmfb_plan_t *plan, const kiln_vmfb_function_t *fn, const case_t *c,
                        const int64_t *values, size_t i, uint8_t *map, uint64_t size, char *err,
                        size_t err_cap) {
  const kiln_vmfb_buffer_t *b = &fn->buffers[i];
  memset(map, 0xA5, size);
  if (b->kind == KILN_VMFB_BUFFER_INPUT) {
    if (b->input >= c->n_inputs || c->inputs[b->input].len > size) {
      snprintf(err, err_cap, "input %u: the case gives %zu inputs", b->input, c->n_inputs);
      return false;
    }
    memcpy(map, c->inputs[b->input].bytes, c->inputs[b->input].len);
  } else if (b->kind == KILN_VMFB_BUFFER_CONSTANT) {
    memcpy(map, b->data, b->size_bytes);
  } else if (b->kind == KILN_VMFB_BUFFER_VARIABLE) {
    /* One call: the variable as the module starts (its initial bytes). */
    if (b->variable >= plan->n_variables || plan->variables[b->variable].size_bytes > size) {
      snprintf(err, err_cap, "buffer %zu names variable %u of %zu", i, b->variable, plan->n_variables);
      return false;
    }
    memcpy(map, plan->variables[b->variable].data, plan->variables[b->variable].size_bytes);
  } else if (b->kind == KILN_VMFB_BUFFER_ARGS) {
    for (size_t w = 0; w < b->n_words; w++) {
      uint32_t word = (uint32_t)sized(values, b->words[w], 0);
      memcpy(map + 4 * w, &word, 4);
    }
  }
  return true;
}

/* Moves *s past JUMPs and BRANCHes on host expressions, to the next step the
 * device takes part in (or the end). Every step spends one of *budget, which
 * stops a loop that never ends: false, with the message, when it is spent. */
static bool host_steps(const kiln_vmfb_function_t *fn, size_t *s, const int64_t *values, size_t *budget,
                       char *err, size_t err_cap) {
  while (*s < fn->n_steps) {
    if ((*budget)-- == 0) {
      snprintf(err, err_cap, "the host program ran 100000 steps: a loop that never ends?");
      return false;
    }
    const kiln_vmfb_step_t *st = &fn->steps[*s];
    if (st->kind == KILN_VMFB_STEP_JUMP) {
      *s = st->target;
    } else if (st->kind == KILN_VMFB_STEP_BRANCH && st->cond_expr) {
      *s = values[st->cond_expr - 1] ? *s + 1 : st->target;
    } else {
      return true;
    }
  }
  return true;
}

/* Copies the results out of the call's buffers (their types with dynamic
 * dimensions resolved) and checks the caller's inputs were read, never written
 * (IREE's ABI; an in-place scatter or a linalg outs on an argument once wrote
 * results into them). */
static bool take_results(const kiln_vmfb_function_t *fn, const case_t *c, const int64_t *values,
                         uint8_t *const *maps, const uint64_t *sizes, const bool *alias, uint8_t **outs,
                         kiln_vmfb_tensor_type_t *out_types, char *err, size_t err_cap) {
  for (size_t r = 0; r < fn->n_results; r++) {
    const kiln_vmfb_result_t *res = &fn->results[r];
    out_types[r] = res->type;
    for (uint32_t d = 0; d < res->type.rank; d++) {
      if (res->type.dims[d] < 0) out_types[r].dims[d] = values[res->dim_exprs[d] - 1];
    }
    uint64_t bytes = 0;
    kiln_vmfb_tensor_type_bytes(&out_types[r], &bytes);
    if (res->buffer >= fn->n_buffers || res->offset + bytes > sizes[res->buffer]) {
      snprintf(err, err_cap, "result %zu lies outside its buffer", r);
      return false;
    }
    outs[r] = kiln_malloc(bytes ? bytes : 1);
    memcpy(outs[r], maps[res->buffer] + res->offset, bytes);
  }
  for (size_t i = 0; i < fn->n_buffers; i++) {
    const kiln_vmfb_buffer_t *b = &fn->buffers[i];
    if (b->kind != KILN_VMFB_BUFFER_INPUT || alias[i]) continue;
    if (memcmp(maps[i], c->inputs[b->input].bytes, c->inputs[b->input].len) != 0) {
      snprintf(err, err_cap, "input %u was written by the program", b->input);
      return false;
    }
  }
  return true;
}

/* Runs function `fn` of `plan` with `kernels`; writes its results into outs and
 * their types (dynamic dimensions resolved) into out_types. */
static bool vk_run(vk_t *vk, const kiln_vmfb_plan_t *plan, const kiln_vmfb_function_t *fn,
                   const kiln_compiler_kernel_t *kernels, size_t n_kernels, const case_t *c, uint8_t **outs,
                   kiln_vmfb_tensor_type_t *out_types, char *err, size_t err_cap) {
  bool ok = false;
  vbuf_t *bufs = kiln_calloc(fn->n_buffers ? fn->n_buffers : 1, sizeof *bufs);
  bool *alias = kiln_calloc(fn->n_buffers ? fn->n_buffers : 1, sizeof *alias);
  int64_t *values = kiln_calloc(fn->n_exprs ? fn->n_exprs : 1, sizeof *values);
  VkShaderModule *modules = kiln_calloc(fn->n_steps ? fn->n_steps : 1, sizeof *modules);
  VkPipeline *pipelines = kiln_calloc(fn->n_steps ? fn->n_steps : 1, sizeof *pipelines);
  VkPipelineLayout *layouts = kiln_calloc(fn->n_steps ? fn->n_steps : 1, sizeof *layouts);
  VkDescriptorSetLayout *set_layouts = kiln_calloc(fn->n_steps ? fn->n_steps : 1, sizeof *set_layouts);
  VkDescriptorSet *sets = kiln_calloc(fn->n_steps ? fn->n_steps : 1, sizeof *sets);
  VkDescriptorPool dpool = VK_NULL_HANDLE;
  VkCommandBuffer cmd = VK_NULL_HANDLE;
  VkFence fence = VK_NULL_HANDLE;

  if (!call_sizes(fn, c, values, err, err_cap)) goto done;
  for (size_t i = 0; i < fn->n_buffers; i++) {
    const kiln_vmfb_buffer_t *b = &fn->buffers[i];
    if (b->kind == KILN_VMFB_BUFFER_SELECT) {
      bufs[i] = bufs[values[b->select_cond - 1] ? b->select_a : b->select_b];
      alias[i] = true;
      continue;
    }
    uint64_t size = sized(values, b->size_expr, b->size_bytes);
    if (!size) size = 4;
    VkBufferCreateInfo bci = {.sType = VK_STRUCTURE_TYPE_BUFFER_CREATE_INFO,
                              .size = size,
                              .usage = VK_BUFFER_USAGE_STORAGE_BUFFER_BIT | VK_BUFFER_USAGE_TRANSFER_SRC_BIT |
                                       VK_BUFFER_USAGE_TRANSFER_DST_BIT,
                              .sharingMode = VK_SHARING_MODE_EXCLUSIVE};
    VK_OK(vkCreateBuffer(vk->device, &bci, NULL, &bufs[i].buffer));
    VkMemoryRequirements req;
    vkGetBufferMemoryRequirements(vk->device, bufs[i].buffer, &req);
    VkMemoryAllocateInfo mai = {.sType = VK_STRUCTURE_TYPE_MEMORY_ALLOCATE_INFO,
                                .allocationSize = req.size,
                                .memoryTypeIndex = vk->memory_type};
    VK_OK(vkAllocateMemory(vk->device, &mai, NULL, &bufs[i].memory));
    VK_OK(vkBindBufferMemory(vk->device, bufs[i].buffer, bufs[i].memory, 0));
    VK_OK(vkMapMemory(vk->device, bufs[i].memory, 0, size, 0, &bufs[i].map));
    bufs[i].size = size;
    if (!fill_buffer(plan, fn, c, values, i, bufs[i].map, size, err, err_cap)) goto done;
  }

  VkDescriptorPoolSize ps = {VK_DESCRIPTOR_TYPE_STORAGE_BUFFER, 64 * (uint32_t)(fn->n_steps + 1)};
  VkDescriptorPoolCreateInfo dpci = {.sType = VK_STRUCTURE_TYPE_DESCRIPTOR_POOL_CREATE_INFO,
                                     .maxSets = (uint32_t)fn->n_steps + 1,
                                     .poolSizeCount = 1,
                                     .pPoolSizes = &ps};
  VK_OK(vkCreateDescriptorPool(vk->device, &dpci, NULL, &dpool));
  /* Pipelines and descriptor sets, once per dispatch step. */
  for (size_t s = 0; s < fn->n_steps; s++) {
    const kiln_vmfb_step_t *st = &fn->steps[s];
    if (st->kind != KILN_VMFB_STEP_DISPATCH) continue;
    if (st->kernel >= n_kernels) {
      snprintf(err, err_cap, "step %zu dispatches kernel %u of %zu", s, st->kernel, n_kernels);
      goto done;
    }
    const kiln_compiler_kernel_t *k = &kernels[st->kernel];
    VkShaderModuleCreateInfo smci = {.sType = VK_STRUCTURE_TYPE_SHADER_MODULE_CREATE_INFO,
                                     .codeSize = k->binary_len,
                                     .pCode = (const uint32_t *)k->binary};
    VK_OK(vkCreateShaderModule(vk->device, &smci, NULL, &modules[s]));
    VkDescriptorSetLayoutBinding lb[64];
    if (st->n_bindings > 64) {
      snprintf(err, err_cap, "step %zu: %zu bindings", s, st->n_bindings);
      goto done;
    }
    for (size_t b = 0; b < st->n_bindings; b++) {
      lb[b] = (VkDescriptorSetLayoutBinding){(uint32_t)b, VK_DESCRIPTOR_TYPE_STORAGE_BUFFER, 1,
                                             VK_SHADER_STAGE_COMPUTE_BIT, NULL};
    }
    VkDescriptorSetLayoutCreateInfo dslci = {.sType = VK_STRUCTURE_TYPE_DESCRIPTOR_SET_LAYOUT_CREATE_INFO,
                                             .bindingCount = (uint32_t)st->n_bindings,
                                             .pBindings = lb};
    VK_OK(vkCreateDescriptorSetLayout(vk->device, &dslci, NULL, &set_layouts[s]));
    VkPushConstantRange pcr = {VK_SHADER_STAGE_COMPUTE_BIT, 0, (uint32_t)(4 * st->n_constants)};
    VkPipelineLayoutCreateInfo plci = {.sType = VK_STRUCTURE_TYPE_PIPELINE_LAYOUT_CREATE_INFO,
                                       .setLayoutCount = 1,
                                       .pSetLayouts = &set_layouts[s],
                                       .pushConstantRangeCount = st->n_constants ? 1 : 0,
                                       .pPushConstantRanges = &pcr};
    VK_OK(vkCreatePipelineLayout(vk->device, &plci, NULL, &layouts[s]));
    VkComputePipelineCreateInfo cpci = {
        .sType = VK_STRUCTURE_TYPE_COMPUTE_PIPELINE_CREATE_INFO,
        .stage = {.sType = VK_STRUCTURE_TYPE_PIPELINE_SHADER_STAGE_CREATE_INFO,
                  .stage = VK_SHADER_STAGE_COMPUTE_BIT,
                  .module = modules[s],
                  .pName = k->name},
        .layout = layouts[s]};
    VK_OK(vkCreateComputePipelines(vk->device, VK_NULL_HANDLE, 1, &cpci, NULL, &pipelines[s]));
    VkDescriptorSetAllocateInfo dsai = {.sType = VK_STRUCTURE_TYPE_DESCRIPTOR_SET_ALLOCATE_INFO,
                                        .descriptorPool = dpool,
                                        .descriptorSetCount = 1,
                                        .pSetLayouts = &set_layouts[s]};
    VK_OK(vkAllocateDescriptorSets(vk->device, &dsai, &sets[s]));
    VkDescriptorBufferInfo infos[64];
    VkWriteDescriptorSet writes[64];
    for (size_t b = 0; b < st->n_bindings; b++) {
      const kiln_vmfb_binding_t *bd = &st->bindings[b];
      if (bd->buffer >= fn->n_buffers ||
          bd->offset + sized(values, bd->length_expr, bd->length) > bufs[bd->buffer].size) {
        snprintf(err, err_cap, "step %zu binding %zu: range [%llu, +%llu) outside buffer %u", s, b,
                 (unsigned long long)bd->offset, (unsigned long long)bd->length, bd->buffer);
        goto done;
      }
      uint64_t length = sized(values, bd->length_expr, bd->length);
      infos[b] =
          (VkDescriptorBufferInfo){bufs[bd->buffer].buffer, bd->offset, length ? length : VK_WHOLE_SIZE};
      writes[b] = (VkWriteDescriptorSet){.sType = VK_STRUCTURE_TYPE_WRITE_DESCRIPTOR_SET,
                                         .dstSet = sets[s],
                                         .dstBinding = (uint32_t)b,
                                         .descriptorCount = 1,
                                         .descriptorType = VK_DESCRIPTOR_TYPE_STORAGE_BUFFER,
                                         .pBufferInfo = &infos[b]};
    }
    vkUpdateDescriptorSets(vk->device, (uint32_t)st->n_bindings, writes, 0, NULL);
  }

  VkCommandBufferAllocateInfo cai = {.sType = VK_STRUCTURE_TYPE_COMMAND_BUFFER_ALLOCATE_INFO,
                                     .commandPool = vk->pool,
                                     .level = VK_COMMAND_BUFFER_LEVEL_PRIMARY,
                                     .commandBufferCount = 1};
  VK_OK(vkAllocateCommandBuffers(vk->device, &cai, &cmd));
  VkFenceCreateInfo fci = {.sType = VK_STRUCTURE_TYPE_FENCE_CREATE_INFO};
  VK_OK(vkCreateFence(vk->device, &fci, NULL, &fence));
  VkCommandBufferBeginInfo cbi = {.sType = VK_STRUCTURE_TYPE_COMMAND_BUFFER_BEGIN_INFO,
                                  .flags = VK_COMMAND_BUFFER_USAGE_ONE_TIME_SUBMIT_BIT};
  VkMemoryBarrier barrier = {.sType = VK_STRUCTURE_TYPE_MEMORY_BARRIER,
                             .srcAccessMask = VK_ACCESS_SHADER_WRITE_BIT | VK_ACCESS_TRANSFER_WRITE_BIT,
                             .dstAccessMask = VK_ACCESS_SHADER_READ_BIT | VK_ACCESS_SHADER_WRITE_BIT |
                                              VK_ACCESS_TRANSFER_READ_BIT | VK_ACCESS_TRANSFER_WRITE_BIT |
                                              VK_ACCESS_HOST_READ_BIT};
  VkSubmitInfo si = {
      .sType = VK_STRUCTURE_TYPE_SUBMIT_INFO, .commandBufferCount = 1, .pCommandBuffers = &cmd};
  /* Run the steps as the host program does: record until a BRANCH, submit, wait,
   * read the condition (every buffer here is host-visible), go on. A step budget
   * stops a loop that never ends. */
  VK_OK(vkBeginCommandBuffer(cmd, &cbi));
  size_t budget = 100000;
  for (size_t s = 0;;) {
    if (!host_steps(fn, &s, values, &budget, err, err_cap)) goto done;
    if (s >= fn->n_steps) break;
    const kiln_vmfb_step_t *st = &fn->steps[s];
    if (st->kind == KILN_VMFB_STEP_BRANCH) {
      VK_OK(vkEndCommandBuffer(cmd));
      VK_OK(vkQueueSubmit(vk->queue, 1, &si, fence));
      VK_OK(vkWaitForFences(vk->device, 1, &fence, VK_TRUE, UINT64_C(120000000000)));
      VK_OK(vkResetFences(vk->device, 1, &fence));
      VK_OK(vkResetCommandBuffer(cmd, 0));
      VK_OK(vkBeginCommandBuffer(cmd, &cbi));
      if (st->src >= fn->n_buffers || st->src_offset + st->length > bufs[st->src].size || st->length > 4) {
        snprintf(err, err_cap, "step %zu: condition outside buffer %u", s, st->src);
        goto done;
      }
      uint32_t value = 0;
      memcpy(&value, (uint8_t *)bufs[st->src].map + st->src_offset, st->length);
      s = value ? s + 1 : st->target;
      continue;
    }
    if (st->kind == KILN_VMFB_STEP_COPY) {
      VkBufferCopy region = {st->src_offset, st->dst_offset, sized(values, st->length_expr, st->length)};
      if (region.size) vkCmdCopyBuffer(cmd, bufs[st->src].buffer, bufs[st->dst].buffer, 1, &region);
    } else {
      vkCmdBindPipeline(cmd, VK_PIPELINE_BIND_POINT_COMPUTE, pipelines[s]);
      vkCmdBindDescriptorSets(cmd, VK_PIPELINE_BIND_POINT_COMPUTE, layouts[s], 0, 1, &sets[s], 0, NULL);
      if (st->n_constants) {
        vkCmdPushConstants(cmd, layouts[s], VK_SHADER_STAGE_COMPUTE_BIT, 0, (uint32_t)(4 * st->n_constants),
                           st->constants);
      }
      /* A kernel this target tiles its own way has its own static grid. */
      uint32_t grid[3];
      for (int d = 0; d < 3; d++)
        grid[d] = (uint32_t)sized(values, st->workgroup_exprs[d], st->workgroups[d]);
      if (st->kernel < n_kernels && kernels[st->kernel].grid[0])
        memcpy(grid, kernels[st->kernel].grid, sizeof grid);
      if (grid[0] && grid[1] && grid[2]) vkCmdDispatch(cmd, grid[0], grid[1], grid[2]);
    }
    vkCmdPipelineBarrier(
        cmd, VK_PIPELINE_STAGE_COMPUTE_SHADER_BIT | VK_PIPELINE_STAGE_TRANSFER_BIT,
        VK_PIPELINE_STAGE_COMPUTE_SHADER_BIT | VK_PIPELINE_STAGE_TRANSFER_BIT | VK_PIPELINE_STAGE_HOST_BIT, 0,
        1, &barrier, 0, NULL, 0, NULL);
    s++;
  }
  VK_OK(vkEndCommandBuffer(cmd));
  VK_OK(vkQueueSubmit(vk->queue, 1, &si, fence));
  VK_OK(vkWaitForFences(vk->device, 1, &fence, VK_TRUE, UINT64_C(120000000000)));
  {
    uint8_t **maps = kiln_calloc(fn->n_buffers ? fn->n_buffers : 1, sizeof *maps);
    uint64_t *sizes = kiln_calloc(fn->n_buffers ? fn->n_buffers : 1, sizeof *sizes);
    for (size_t i = 0; i < fn->n_buffers; i++) maps[i] = bufs[i].map, sizes[i] = bufs[i].size;
    ok = take_results(fn, c, values, maps, sizes, alias, outs, out_types, err, err_cap);
    kiln_free(maps);
    kiln_free(sizes);
  }
done:
  if (fence) vkDestroyFence(vk->device, fence, NULL);
  if (cmd) vkFreeCommandBuffers(vk->device, vk->pool, 1, &cmd);
  if (dpool) vkDestroyDescriptorPool(vk->device, dpool, NULL);
  for (size_t s = 0; s < fn->n_steps; s++) {
    if (pipelines[s]) vkDestroyPipeline(vk->device, pipelines[s], NULL);
    if (layouts[s]) vkDestroyPipelineLayout(vk->device, layouts[s], NULL);
    if (set_layouts[s]) vkDestroyDescriptorSetLayout(vk->device, set_layouts[s], NULL);
    if (modules[s]) vkDestroyShaderModule(vk->device, modules[s], NULL);
  }
  for (size_t i = 0; i < fn->n_buffers; i++) {
    if (alias[i]) continue;
    if (bufs[i].map) vkUnmapMemory(vk->device, bufs[i].memory);
    if (bufs[i].buffer) vkDestroyBuffer(vk->device, bufs[i].buffer, NULL);
    if (bufs[i].memory) vkFreeMemory(vk->device, bufs[i].memory, NULL);
  }
  kiln_free(bufs);
  kiln_free(modules);
  kiln_free(pipelines);
  kiln_free(layouts);
  kiln_free(set_layouts);
  kiln_free(sets);
  kiln_free(alias);
  kiln_free(values);
  return ok;
}

/* ---- CPU ---- */

/* The target's executable library, loaded (cpu_exec.h), its exports checked
 * against the kernels the compiler says it holds. */
static kiln_cpu_lib_t *cpu_load(const kiln_compiler_kernel_t *kernels, size_t n_kernels, char *err,
                                size_t err_cap) {
  kiln_cpu_lib_t *lib = kiln_cpu_lib_load(kernels[0].binary, kernels[0].binary_len, err, err_cap);
  if (lib && kiln_cpu_lib_exports(lib) != n_kernels) {
    snprintf(err, err_cap, "the library exports %u functions; %zu kernels", kiln_cpu_lib_exports(lib),
             n_kernels);
    kiln_cpu_lib_unload(lib);
    return NULL;
  }
  for (size_t k = 0; lib && k < n_kernels; k++) {
    kiln_cpu_export_t e = kiln_cpu_lib_export(lib, (uint32_t)k);
    if (strcmp(e.name, kernels[k].name) != 0 ||
        memcmp(e.workgroup_size, kernels[k].block_size, sizeof e.workgroup_size)) {
      snprintf(err, err_cap, "export %zu does not describe kernel %s", k, kernels[k].name);
      kiln_cpu_lib_unload(lib);
      return NULL;
    }
  }
  return lib;
}

/* Runs `fn` on the CPU: each step in order, each dispatch over its grid one
 * workgroup at a time, as IREE's local-sync driver does. */
static bool cpu_run(const kiln_cpu_lib_t *lib, const kiln_vmfb_plan_t *plan, const kiln_vmfb_function_t *fn,
                    const case_t *c, uint8_t **outs, kiln_vmfb_tensor_type_t *out_types, char *err,
                    size_t err_cap) {
  bool ok = false;
  size_t nb = fn->n_buffers ? fn->n_buffers : 1;
  uint8_t **maps = kiln_calloc(nb, sizeof *maps);
  uint64_t *sizes = kiln_calloc(nb, sizeof *sizes);
  bool *alias = kiln_calloc(nb, sizeof *alias);
  int64_t *values = kiln_calloc(fn->n_exprs ? fn->n_exprs : 1, sizeof *values);
  if (!call_sizes(fn, c, values, err, err_cap)) goto done;
  for (size_t i = 0; i < fn->n_buffers; i++) {
    const kiln_vmfb_buffer_t *b = &fn->buffers[i];
    if (b->kind == KILN_VMFB_BUFFER_SELECT) continue;
    sizes[i] = sized(values, b->size_expr, b->size_bytes);
    if (!sizes[i]) sizes[i] = 4;
    maps[i] = kiln_malloc(sizes[i]);
    if (!fill_buffer(plan, fn, c, values, i, maps[i], sizes[i], err, err_cap)) goto done;
  }
  for (size_t i = 0; i < fn->n_buffers; i++) {
    const kiln_vmfb_buffer_t *b = &fn->buffers[i];
    if (b->kind != KILN_VMFB_BUFFER_SELECT) continue;
    size_t from = values[b->select_cond - 1] ? b->select_a : b->select_b;
    maps[i] = maps[from], sizes[i] = sizes[from], alias[i] = true;
  }
  size_t budget = 100000;
  for (size_t s = 0;;) {
    if (!host_steps(fn, &s, values, &budget, err, err_cap)) goto done;
    if (s >= fn->n_steps) break;
    const kiln_vmfb_step_t *st = &fn->steps[s];
    if (st->kind == KILN_VMFB_STEP_BRANCH) {
      uint32_t value = 0;
      if (st->src >= fn->n_buffers || st->src_offset + st->length > sizes[st->src] || st->length > 4) {
        snprintf(err, err_cap, "step %zu: condition outside buffer %u", s, st->src);
        goto done;
      }
      memcpy(&value, maps[st->src] + st->src_offset, st->length);
      s = value ? s + 1 : st->target;
      continue;
    }
    if (st->kind == KILN_VMFB_STEP_COPY) {
      uint64_t n = sized(values, st->length_expr, st->length);
      if (st->src_offset + n > sizes[st->src] || st->dst_offset + n > sizes[st->dst]) {
        snprintf(err, err_cap, "step %zu: copy outside its buffers", s);
        goto done;
      }
      memmove(maps[st->dst] + st->dst_offset, maps[st->src] + st->src_offset, n);
      s++;
      continue;
    }
    if (st->n_bindings > 64) {
      snprintf(err, err_cap, "step %zu: %zu bindings", s, st->n_bindings);
      goto done;
    }
    void *ptrs[64];
    size_t lengths[64];
    for (size_t b = 0; b < st->n_bindings; b++) {
      const kiln_vmfb_binding_t *bd = &st->bindings[b];
      uint64_t length = sized(values, bd->length_expr, bd->length);
      if (bd->buffer >= fn->n_buffers || bd->offset + length > sizes[bd->buffer]) {
        snprintf(err, err_cap, "step %zu binding %zu: range outside buffer %u", s, b, bd->buffer);
        goto done;
      }
      ptrs[b] = maps[bd->buffer] + bd->offset;
      lengths[b] = length ? length : sizes[bd->buffer] - bd->offset;
    }
    uint32_t grid[3];
    for (int d = 0; d < 3; d++) grid[d] = (uint32_t)sized(values, st->workgroup_exprs[d], st->workgroups[d]);
    char why[512] = "a dispatch without a library";
    if (!lib || !kiln_cpu_lib_dispatch(lib, st->kernel, ptrs, lengths, st->n_bindings, st->constants,
                                       st->n_constants, grid, 1, why, sizeof why)) {
      snprintf(err, err_cap, "step %zu: %s", s, why);
      goto done;
    }
    s++;
  }
  ok = take_results(fn, c, values, maps, sizes, alias, outs, out_types, err, err_cap);
done:
  for (size_t i = 0; i < fn->n_buffers; i++) {
    if (!alias[i]) kiln_free(maps[i]);
  }
  kiln_free(maps);
  kiln_free(sizes);
  kiln_free(alias);
  kiln_free(values);
  return ok;
}

/* Whether this machine runs the target's code: an x86-64 target whose ISA level
 * this CPU has (x86-64-v3 for the portable x86_64, v4 for the AVX-512 parts), or
 * an Arm64 one on Arm64. Anything else is compiled and linked only. */
static bool runs_here(const kiln_target_t *t) {
  if (t->kind != KILN_TARGET_KIND_CPU) return false;
#if defined(__x86_64__)
  if (strncmp(t->llvm_triple, "x86_64-", 7) != 0) return false;
  __builtin_cpu_init();
  if (strcmp(t->chip, "x86-64-v3") == 0) return __builtin_cpu_supports("x86-64-v3");
  return __builtin_cpu_supports("x86-64-v4") &&
         (strcmp(t->chip, "sapphirerapids") != 0 || __builtin_cpu_supports("avx512fp16"));
#elif defined(__aarch64__)
  return strncmp(t->llvm_triple, "aarch64-", 8) == 0 && strcmp(t->chip, "generic") == 0;
#else
  return false;
#endif
}

/* ---- comparing ---- */

static double default_tol(uint32_t et) {
  switch (et) {
    case KILN_VMFB_ELEMENT_FLOAT_16: return 2e-3;
    case KILN_VMFB_ELEMENT_BFLOAT_16: return 1.6e-2;
    case KILN_VMFB_ELEMENT_FLOAT_32: return 1e-5;
    case KILN_VMFB_ELEMENT_FLOAT_64: return 1e-12;
    default: return 0;
  }
}

static bool compare(const tensor_t *want, const kiln_vmfb_tensor_type_t *type, const uint8_t *got, double tol,
                    bool exact, char *err, size_t err_cap) {
  uint32_t et = want->type.element_type;
  if (type->element_type != et || type->rank != want->type.rank ||
      memcmp(type->dims, want->type.dims, sizeof(int64_t) * want->type.rank) != 0) {
    snprintf(err, err_cap, "result type %s (rank %u) differs from the case's %s",
             kiln_vmfb_element_name(type->element_type) ? kiln_vmfb_element_name(type->element_type) : "?",
             type->rank, kiln_vmfb_element_name(et));
    return false;
  }
  uint64_t n = elements(&want->type);
  if (!tol) tol = default_tol(et);
  for (uint64_t i = 0; i < n; i++) {
    double w = get_value(et, want->bytes, i), g = get_value(et, got, i);
    bool same;
    if (!is_float(et)) {
      int64_t wi = get_int(et, want->bytes, i), gi = get_int(et, got, i);
      same = wi == gi;
      if (!same) {
        snprintf(err, err_cap, "element %llu: want %lld, got %lld (%llu elements)", (unsigned long long)i,
                 (long long)wi, (long long)gi, (unsigned long long)n);
        return false;
      }
    } else if (isnan(w) || isnan(g)) {
      same = isnan(w) && isnan(g);
    } else if (exact) {
      same = w == g && signbit(w) == signbit(g);
    } else if (isinf(w) || isinf(g)) {
      same = w == g;
    } else {
      /* Relative to the magnitude, with an absolute floor near zero. */
      same = fabs(w - g) <= tol * fmax(1.0, fabs(w));
    }
    if (!same) {
      if (exact) {
        snprintf(err, err_cap, "element %llu: want %a, got %a (%llu elements, exact)", (unsigned long long)i,
                 w, g, (unsigned long long)n);
      } else {
        snprintf(err, err_cap, "element %llu: want %.9g, got %.9g (%llu elements, tolerance %g)",
                 (unsigned long long)i, w, g, (unsigned long long)n, tol);
      }
      return false;
    }
  }
  return true;
}

/* ---- main ---- */

/* The first two lines of a message (MLIR's error and its location), for one
 * readable line per failure; a static buffer, one use at a time. */
static const char *first_line(const char *msg) {
  static char line[512];
  size_t n = 0;
  int newlines = 0;
  for (const char *p = msg; *p && n + 1 < sizeof line; p++) {
    if (*p == '\n' && ++newlines == 2) break;
    line[n++] = *p == '\n' ? ' ' : *p;
  }
  line[n] = '\0';
  return line;
}

/* One corpus file: its cases and what each compiled to (status NULL: outs[i]). */
typedef struct file_s {
  const char *base;
  char *text;
  case_t *cases;
  size_t n_cases;
  kiln_status_t *status;
  kiln_compiler_output_t *outs;
} file_t;

/* Whether a Vulkan device can be created (1: yes, 0: no, -1: the probe itself
 * failed), asked in a child so that this process starts no driver threads before
 * it has compiled everything. */
static int vulkan_present(void) {
  fflush(stdout);
  fflush(stderr);
  pid_t pid = fork();
  if (pid < 0) {
    fprintf(stderr, "corpus_check: cannot fork the Vulkan probe: %s\n", strerror(errno));
    return -1;
  }
  if (pid == 0) {
    vk_t vk;
    memset(&vk, 0, sizeof vk);
    _exit(vk_init(&vk) ? 0 : 1); /* no teardown: the child is gone at once */
  }
  int wstatus = 0;
  pid_t got;
  while ((got = waitpid(pid, &wstatus, 0)) < 0 && errno == EINTR) {
  }
  if (got < 0) {
    fprintf(stderr, "corpus_check: cannot wait for the Vulkan probe: %s\n", strerror(errno));
    return -1;
  }
  return WIFEXITED(wstatus) && WEXITSTATUS(wstatus) == 0;
}

static const kiln_vmfb_function_t *find_function(const kiln_vmfb_plan_t *plan, const char *name) {
  for (size_t i = 0; i < plan->n_functions; i++) {
    if (strcmp(plan->functions[i].name, name) == 0) return &plan->functions[i];
  }
  return NULL;
}

int main(int argc, char **argv) {
  const char *target_list = "arm5gen,videocore_vii";
  int first = 1;
  bool list = false;
  for (; first < argc && argv[first][0] == '-'; first++) {
    if (strcmp(argv[first], "--targets") == 0 && first + 1 < argc) {
      target_list = argv[++first];
    } else if (strcmp(argv[first], "--list") == 0) {
      list = true;
    } else {
      fprintf(stderr, "usage: corpus_check [--targets T,...] [--list] FILE.mlir...\n");
      return 2;
    }
  }
  const kiln_target_t *targets[32];
  size_t n_targets = 0;
  kiln_status_t st = kiln_compiler_target_resolve_list(target_list, targets, 32, &n_targets);
  if (st) {
    fprintf(stderr, "corpus_check: %s\n", kiln_status_message(st));
    kiln_status_free(st);
    return 2;
  }
  bool any_vulkan = false;
  for (size_t t = 0; t < n_targets; t++)
    any_vulkan = any_vulkan || targets[t]->kind == KILN_TARGET_KIND_VULKAN;
  if (any_vulkan && !list) {
    int present = vulkan_present();
    if (present < 0) return 1;
    if (!present) {
      fprintf(stderr, "corpus_check: no Vulkan device (install mesa-vulkan-drivers for lavapipe)\n");
      return 77;
    }
  }
  kiln_compiler_context_t *context = NULL;
  st = kiln_compiler_context_create(&context);
  if (st) {
    fprintf(stderr, "corpus_check: %s\n", kiln_status_message(st));
    return 1;
  }
  kiln_compiler_context_set_jobs(context, 1);
  size_t passed = 0, failed = 0, xfailed = 0;
  /* Every case is compiled before the Vulkan device exists: the compiler forks
   * its back halves, and a fork from a process running lavapipe's threads can
   * leave the child waiting on a lock one of them held (an ASan run hung so). */
  size_t n_files = (size_t)(argc - first);
  file_t *files = kiln_calloc(n_files ? n_files : 1, sizeof *files);
  for (size_t f = 0; f < n_files; f++) {
    file_t *fl = &files[f];
    const char *path = argv[first + (int)f];
    fl->base = strrchr(path, '/') ? strrchr(path, '/') + 1 : path;
    size_t len = 0;
    fl->text = kiln_read_file(path, &len);
    if (!fl->text) {
      printf("FAIL %s: cannot read\n", fl->base);
      failed++;
      continue;
    }
    if (!parse_cases(path, fl->text, &fl->cases, &fl->n_cases) || fl->n_cases == 0) {
      printf("FAIL %s: no cases, or a bad CASE/INPUT/OUTPUT line\n", fl->base);
      failed++;
    }
    if (list) {
      for (size_t i = 0; i < fl->n_cases; i++) printf("%s @%s\n", fl->base, fl->cases[i].function);
      continue;
    }
    /* Progress while nothing else prints: a compile that hangs names its file. */
    fprintf(stderr, "corpus_check: compiling %s (%zu cases)\n", fl->base, fl->n_cases);
    fl->status = kiln_calloc(fl->n_cases ? fl->n_cases : 1, sizeof *fl->status);
    fl->outs = kiln_calloc(fl->n_cases ? fl->n_cases : 1, sizeof *fl->outs);
    for (size_t i = 0; i < fl->n_cases; i++) {
      /* Each case is its own module, so one unsupported op fails one case. */
      const case_t *c = &fl->cases[i];
      fl->status[i] = kiln_compiler_compile(context, c->text, c->text_len, fl->base, targets, n_targets,
                                            &fl->outs[i]);
    }
  }
  vk_t vk;
  memset(&vk, 0, sizeof vk);
  bool run = !list;
  if (any_vulkan && !list) {
    if (vk_init(&vk)) {
      pin_loaded_objects();
      printf("corpus_check: running Vulkan targets on %s\n", vk.name);
    } else {
      /* The probe created one a moment ago: this is a failure, not a skip. */
      printf("FAIL: the Vulkan device could not be created\n");
      failed++;
      run = false;
    }
  }
  for (size_t f = 0; f < n_files && run; f++) {
    const file_t *fl = &files[f];
    const char *base = fl->base;
    for (size_t i = 0; i < fl->n_cases; i++) {
      const case_t *c = &fl->cases[i];
      const kiln_compiler_output_t *out = &fl->outs[i];
      st = fl->status[i];
      bool expect_fail[32] = {false};
      for (size_t t = 0; t < n_targets && c->xfail; t++) {
        char *ids = kiln_strdup(c->xfail);
        for (char *save = NULL, *tok = strtok_r(ids, ",", &save); tok; tok = strtok_r(NULL, ",", &save)) {
          if (strcmp(tok, targets[t]->id) == 0 || strcmp(tok, "*") == 0) expect_fail[t] = true;
        }
        kiln_free(ids);
      }
      if (st) {
        /* The shared front half failed: every target fails. */
        for (size_t t = 0; t < n_targets; t++) {
          printf("%s %s @%s %s: %s\n", expect_fail[t] ? "xfail" : "FAIL", base, c->function, targets[t]->id,
                 first_line(kiln_status_message(st)));
          if (expect_fail[t])
            xfailed++;
          else
            failed++;
        }
        continue;
      }
      for (size_t t = 0; t < out->n_targets; t++) {
        const kiln_compiler_target_output_t *to = &out->targets[t];
        char err[1024] = "";
        const kiln_vmfb_function_t *fn = out->plan_status ? NULL : find_function(&out->plan, c->function);
        bool ok = false;
        if (to->status) {
          snprintf(err, sizeof err, "%s", kiln_status_message(to->status));
        } else if (out->plan_status) {
          snprintf(err, sizeof err, "no host program: %s", kiln_status_message(out->plan_status));
        } else if (!fn) {
          snprintf(err, sizeof err, "no exported function @%s", c->function);
        } else if (c->compile_only ||
                   (to->target->kind != KILN_TARGET_KIND_VULKAN && !runs_here(to->target))) {
          ok = true;
        } else if (fn->n_results != c->n_outputs) {
          snprintf(err, sizeof err, "%zu results, the case expects %zu", fn->n_results, c->n_outputs);
        } else {
          uint8_t *outs[16] = {0};
          kiln_vmfb_tensor_type_t types[16];
          if (fn->n_results > 16) {
            snprintf(err, sizeof err, "%zu results: the harness takes 16", fn->n_results);
          } else if (to->target->kind == KILN_TARGET_KIND_VULKAN) {
            /* The target's own plan: its grids, and its fused dispatches merged. */
            kiln_vmfb_plan_t own;
            kiln_status_t pst = kiln_compiler_target_plan(&out->plan, to, &own);
            if (pst) {
              snprintf(err, sizeof err, "%s", kiln_status_message(pst));
              kiln_status_free(pst);
            } else {
              ok = vk_run(&vk, &own, find_function(&own, c->function), to->kernels, to->n_kernels, c, outs,
                          types, err, sizeof err);
              kiln_compiler_target_plan_free(&own);
            }
          } else {
            kiln_cpu_lib_t *lib =
                to->n_kernels ? cpu_load(to->kernels, to->n_kernels, err, sizeof err) : NULL;
            ok = (lib || !to->n_kernels) && cpu_run(lib, &out->plan, fn, c, outs, types, err, sizeof err);
            kiln_cpu_lib_unload(lib);
          }
          for (size_t r = 0; ok && r < fn->n_results; r++) {
            ok = compare(&c->outputs[r], &types[r], outs[r], c->tol, c->exact, err, sizeof err);
          }
          for (size_t r = 0; r < 16; r++) kiln_free(outs[r]);
        }
        if (expect_fail[t]) {
          printf("%s %s @%s %s%s%s\n", ok ? "FAIL" : "xfail", base, c->function, to->target->id,
                 ok ? ": passes, but is marked XFAIL: drop the mark" : ": ", ok ? "" : first_line(err));
          if (ok)
            failed++;
          else
            xfailed++;
          continue;
        }
        printf("%s %s @%s %s%s%s\n", ok ? "ok  " : "FAIL", base, c->function, to->target->id, ok ? "" : ": ",
               ok ? "" : first_line(err));
        if (ok)
          passed++;
        else
          failed++;
      }
    }
  }
  for (size_t f = 0; f < n_files; f++) {
    file_t *fl = &files[f];
    for (size_t i = 0; i < fl->n_cases; i++) {
      if (fl->status) {
        if (fl->status[i])
          kiln_status_free(fl->status[i]);
        else
          kiln_compiler_output_deinit(&fl->outs[i]);
      }
      case_free(&fl->cases[i]);
    }
    kiln_free(fl->status);
    kiln_free(fl->outs);
    kiln_free(fl->cases);
    kiln_free(fl->text);
  }
  kiln_free(files);
  kiln_compiler_context_destroy(context);
  vk_deinit(&vk);
  if (xfailed) printf("%zu known failures (XFAIL)\n", xfailed);
  printf("%zu passed, %zu failed\n", passed, failed);
  return failed ? 1 : 0;
}
