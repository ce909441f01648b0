/* Reading GPU kernels' generated code (gpu_code.h). Text in, counts out: the
 * parsers know only the few instruction families the figures need, and each
 * reads one kernel's lines. */
#include "bench/gpu_code.h"

#include <ctype.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "base/alloc.h"
#include "base/buf.h"

/* ---- lines ---- */

typedef struct lines_s {
  char *text; /* owned copy, NULs at the line ends */
  char **v;
  size_t n;
} lines_t;

static void lines_init(lines_t *l, const char *text) {
  l->text = kiln_strdup(text);
  l->n = 0;
  size_t cap = 64;
  l->v = kiln_malloc(cap * sizeof *l->v);
  for (char *p = l->text; *p;) {
    if (l->n == cap) l->v = kiln_realloc(l->v, (cap *= 2) * sizeof *l->v);
    l->v[l->n++] = p;
    char *nl = strchr(p, '\n');
    if (!nl) break;
    *nl = '\0';
    p = nl + 1;
  }
}

static void lines_deinit(lines_t *l) {
  kiln_free(l->text);
  kiln_free(l->v);
}

static void stats_clear(kiln_gpu_code_stats_t *s) {
  memset(s, 0, sizeof *s);
  s->registers = -1;
  s->spill_bytes = -1;
}

/* Whether `line` holds `word` as a whole token (neither side a name character). */
static bool has_word(const char *line, const char *word) {
  size_t n = strlen(word);
  for (const char *p = strstr(line, word); p; p = strstr(p + 1, word)) {
    bool left = p == line || !(isalnum((unsigned char)p[-1]) || p[-1] == '_' || p[-1] == '%');
    bool right = !(isalnum((unsigned char)p[n]) || p[n] == '_');
    if (left && right) return true;
  }
  return false;
}

/* The first instruction word of an assembly line (after a predicate "@%p1"). */
static const char *mnemonic(const char *line, char *buf, size_t size) {
  while (*line == ' ' || *line == '\t') line++;
  if (*line == '@') {
    while (*line && *line != ' ' && *line != '\t') line++;
    while (*line == ' ' || *line == '\t') line++;
  }
  size_t n = 0;
  while (line[n] && line[n] != ' ' && line[n] != '\t' && line[n] != ';' && n + 1 < size) {
    buf[n] = line[n];
    n++;
  }
  buf[n] = '\0';
  return buf;
}

static bool starts_with(const char *s, const char *prefix) { return strncmp(s, prefix, strlen(prefix)) == 0; }

/* A loop: lines [first, last] of a kernel, the back edge on `last`. */
typedef struct loop_s {
  size_t first, last;
} loop_t;

/* Innermost loops: those that hold no other. Returns their count, in place. */
static size_t innermost(loop_t *loops, size_t n) {
  size_t kept = 0;
  for (size_t i = 0; i < n; i++) {
    bool outer = false;
    for (size_t j = 0; j < n && !outer; j++) {
      outer = j != i && loops[j].first >= loops[i].first && loops[j].last <= loops[i].last &&
              (loops[j].first != loops[i].first || loops[j].last != loops[i].last);
    }
    if (!outer) loops[kept++] = loops[i];
  }
  return kept;
}

/* One line's contribution to a loop's counts. */
typedef struct counts_s {
  double madds;
  unsigned loads, stores, shared;
} counts_t;

typedef void (*count_line_fn)(const char *line, counts_t *c, void *user);

/* Keeps the innermost loop with the most multiply-adds in *out (the whole of
 * [start, end) when there is no loop). Frees `loops`. */
static void pick_hottest(const lines_t *l, loop_t *loops, size_t n_loops, size_t start, size_t end,
                         count_line_fn count, void *user, kiln_gpu_code_stats_t *out) {
  n_loops = innermost(loops, n_loops);
  out->has_loop = n_loops > 0;
  if (!n_loops) loops[n_loops++] = (loop_t){start, end - 1}; /* straight-line: the whole kernel */
  for (size_t k = 0; k < n_loops; k++) {
    counts_t c = {0};
    for (size_t i = loops[k].first; i <= loops[k].last; i++) count(l->v[i], &c, user);
    if (k == 0 || c.madds > out->loop_madds) {
      out->loop_madds = c.madds, out->loop_loads = c.loads, out->loop_stores = c.stores;
      out->loop_shared_loads = c.shared;
    }
  }
  kiln_free(loops);
}

/* "m16n8k16" in an instruction: the product's multiply-adds (M*N*K). */
static double mnk(const char *s) {
  for (const char *p = s; *p; p++) {
    unsigned m, n, k;
    if ((*p == 'm' || p == s) && sscanf(p, "m%un%uk%u", &m, &n, &k) == 3) return (double)m * n * k;
  }
  return 0;
}

/* "32x32x8" (MFMA, WMMA): the product's multiply-adds. */
static double axbxc(const char *s) {
  for (const char *p = s; *p; p++) {
    unsigned m, n, k;
    if (isdigit((unsigned char)*p) && (p == s || !isalnum((unsigned char)p[-1])) &&
        sscanf(p, "%ux%ux%u", &m, &n, &k) == 3) {
      return (double)m * n * k;
    }
  }
  return 0;
}

/* ---- PTX ---- */

/* Bits of a PTX load: ".v4.f32" -> 128. */
static unsigned ptx_bits(const char *op) {
  unsigned lanes = strstr(op, ".v4") ? 4 : strstr(op, ".v2") ? 2 : strstr(op, ".v8") ? 8 : 1;
  static const struct {
    const char *suffix;
    unsigned bits;
  } sizes[] = {{".b128", 128}, {"64", 64}, {"32", 32}, {"16", 16}, {"8", 8}};
  const char *last = strrchr(op, '.');
  if (!last) return 0;
  for (size_t i = 0; i < sizeof sizes / sizeof sizes[0]; i++) {
    size_t n = strlen(sizes[i].suffix);
    size_t len = strlen(last);
    if (len >= n && strcmp(last + len - n, sizes[i].suffix) == 0) return lanes * sizes[i].bits;
  }
  return 0;
}

static void ptx_count(const char *line, counts_t *c, void *user) {
  (void)user;
  char op[128];
  mnemonic(line, op, sizeof op);
  if (starts_with(op, "ld.global"))
    c->loads++;
  else if (starts_with(op, "st.global"))
    c->stores++;
  else if (starts_with(op, "ld.shared"))
    c->shared++;
  else if (starts_with(op, "fma.") || (starts_with(op, "mul.") && strstr(op, ".f")))
    c->madds += 1;
  else if (starts_with(op, "mma.") || starts_with(op, "wgmma."))
    c->madds += mnk(op) / 32; /* a warp's share */
}

void kiln_gpu_code_read_ptx(const char *ptx, const char *kernel, kiln_gpu_code_stats_t *out) {
  stats_clear(out);
  lines_t l;
  lines_init(&l, ptx);
  char entry[256];
  snprintf(entry, sizeof entry, ".entry %s(", kernel);
  size_t start = l.n, end = l.n;
  for (size_t i = 0; i < l.n && start == l.n; i++) {
    if (strstr(l.v[i], entry)) start = i;
  }
  int depth = 0;
  bool opened = false;
  for (size_t i = start; i < l.n && end == l.n; i++) {
    for (const char *p = l.v[i]; *p; p++) {
      if (*p == '{') depth++, opened = true;
      if (*p == '}') depth--;
    }
    if (opened && depth == 0) end = i;
  }
  if (start == l.n) {
    lines_deinit(&l);
    return;
  }
  /* Shared memory: declarations in the kernel, or at module level and named in it. */
  for (size_t i = 0; i < l.n; i++) {
    const char *d = strstr(l.v[i], ".shared");
    if (!d || strstr(l.v[i], "ld.shared") || strstr(l.v[i], "st.shared")) continue;
    const char *bracket = strchr(l.v[i], '[');
    unsigned count = bracket ? (unsigned)strtoul(bracket + 1, NULL, 10) : 1;
    unsigned elem = strstr(l.v[i], ".b8") || strstr(l.v[i], ".u8") ? 1
                    : strstr(l.v[i], "16")                         ? 2
                    : strstr(l.v[i], "64")                         ? 8
                                                                   : 4;
    bool inside = i > start && i < end;
    if (!inside) {
      /* the declared name: the token before '[' (or before ';') */
      char name[128] = "";
      const char *stop = bracket ? bracket : strchr(l.v[i], ';');
      const char *b = stop;
      while (b && b > l.v[i] && (isalnum((unsigned char)b[-1]) || b[-1] == '_' || b[-1] == '$')) b--;
      if (b && stop > b && (size_t)(stop - b) < sizeof name)
        memcpy(name, b, (size_t)(stop - b)), name[stop - b] = 0;
      for (size_t k = start; k < end && !inside && name[0]; k++) inside = has_word(l.v[k], name);
    }
    if (inside) out->shared_bytes += count * elem;
  }
  loop_t *loops = kiln_malloc((end - start + 1) * sizeof *loops);
  size_t n_loops = 0;
  for (size_t i = start; i < end; i++) {
    char op[128];
    mnemonic(l.v[i], op, sizeof op);
    if (starts_with(op, "ld.global")) {
      unsigned bits = ptx_bits(op);
      if (bits > out->load_bits) out->load_bits = bits;
    }
    if (strstr(op, "mma.")) out->matrix = true;
    if (starts_with(op, "shfl.")) out->shuffles++;
    if (starts_with(op, "bar.sync") || starts_with(op, "barrier.")) out->barriers++;
    if (!starts_with(op, "bra")) continue;
    const char *target = strstr(l.v[i], "$L__");
    if (!target) continue;
    size_t len = strcspn(target, ";, \t");
    for (size_t j = start; j < i; j++) {
      if (strncmp(l.v[j], target, len) == 0 && l.v[j][len] == ':') loops[n_loops++] = (loop_t){j, i};
    }
  }
  pick_hottest(&l, loops, n_loops, start, end, ptx_count, NULL, out);
  lines_deinit(&l);
}

/* ---- AMDGPU (llvm-objdump's disassembly) ---- */

static unsigned amdgpu_bits(const char *op) {
  static const struct {
    const char *suffix;
    unsigned bits;
  } sizes[] = {{"_dwordx4", 128}, {"_dwordx3", 96}, {"_dwordx2", 64}, {"_dword", 32},  {"_b128", 128},
               {"_b96", 96},      {"_b64", 64},     {"_b32", 32},     {"_ushort", 16}, {"_sshort", 16},
               {"_u16", 16},      {"_b16", 16},     {"_ubyte", 8},    {"_sbyte", 8},   {"_u8", 8}};
  for (size_t i = 0; i < sizeof sizes / sizeof sizes[0]; i++) {
    if (strstr(op, sizes[i].suffix)) return sizes[i].bits;
  }
  return 0;
}

static bool amdgpu_global_load(const char *op) {
  return starts_with(op, "global_load") || starts_with(op, "buffer_load") || starts_with(op, "flat_load");
}

/* The address in "// 0000000019AC: ..." (-1 when absent). */
static long long amdgpu_address(const char *line) {
  const char *c = strstr(line, "// ");
  if (!c) return -1;
  char *end = NULL;
  long long a = strtoll(c + 3, &end, 16);
  return end && *end == ':' ? a : -1;
}

static void amdgpu_count(const char *line, counts_t *c, void *user) {
  (void)user;
  char op[128];
  mnemonic(line, op, sizeof op);
  if (amdgpu_global_load(op))
    c->loads++;
  else if (starts_with(op, "global_store") || starts_with(op, "buffer_store") ||
           starts_with(op, "flat_store"))
    c->stores++;
  else if (starts_with(op, "ds_read") || starts_with(op, "ds_load"))
    c->shared++;
  else if (starts_with(op, "v_pk_fma") || starts_with(op, "v_pk_mul_f") || starts_with(op, "v_dot2"))
    c->madds += 2;
  else if (starts_with(op, "v_fma") || starts_with(op, "v_fmac") || starts_with(op, "v_mac") ||
           (starts_with(op, "v_mul_f") && !starts_with(op, "v_mul_f64")))
    c->madds += 1;
  else if (starts_with(op, "v_mfma") || starts_with(op, "v_smfmac"))
    c->madds += axbxc(op) / 64; /* wave64 */
  else if (starts_with(op, "v_wmma"))
    c->madds += axbxc(op) / 32; /* wave32 */
}

void kiln_gpu_code_read_amdgpu(const char *disassembly, const char *kernel, kiln_gpu_code_stats_t *out) {
  stats_clear(out);
  lines_t l;
  lines_init(&l, disassembly);
  char header[256];
  snprintf(header, sizeof header, " <%s>:", kernel);
  size_t start = l.n, end = l.n;
  for (size_t i = 0; i < l.n && start == l.n; i++) {
    const char *h = strstr(l.v[i], header);
    if (h && h[strlen(header)] == '\0') start = i;
  }
  for (size_t i = start + 1; i < l.n && end == l.n; i++) {
    if (strstr(l.v[i], ">:") && !strstr(l.v[i], "//")) end = i;
  }
  if (start == l.n) {
    lines_deinit(&l);
    return;
  }
  long long base = strtoll(l.v[start], NULL, 16);
  char target_prefix[256];
  snprintf(target_prefix, sizeof target_prefix, "<%s+0x", kernel);
  loop_t *loops = kiln_malloc((end - start + 1) * sizeof *loops);
  size_t n_loops = 0;
  for (size_t i = start + 1; i < end; i++) {
    char op[128];
    mnemonic(l.v[i], op, sizeof op);
    if (amdgpu_global_load(op)) {
      unsigned bits = amdgpu_bits(op);
      if (bits > out->load_bits) out->load_bits = bits;
    }
    if (starts_with(op, "v_mfma") || starts_with(op, "v_wmma") || starts_with(op, "v_smfmac"))
      out->matrix = true;
    if (starts_with(op, "ds_bpermute") || starts_with(op, "ds_swizzle") || starts_with(op, "v_permlane") ||
        strstr(op, "_dpp")) {
      out->shuffles++;
    }
    if (starts_with(op, "s_barrier")) out->barriers++;
    if (!starts_with(op, "s_cbranch") && !starts_with(op, "s_branch")) continue;
    const char *t = strstr(l.v[i], target_prefix);
    long long here = amdgpu_address(l.v[i]);
    if (!t || here < 0) continue;
    long long to = base + strtoll(t + strlen(target_prefix), NULL, 16);
    if (to > here) continue;
    size_t first = i;
    for (size_t j = start + 1; j < i; j++) {
      if (amdgpu_address(l.v[j]) == to) {
        first = j;
        break;
      }
    }
    if (first < i) loops[n_loops++] = (loop_t){first, i};
  }
  pick_hottest(&l, loops, n_loops, start, end, amdgpu_count, NULL, out);
  lines_deinit(&l);
}

/* llvm-readobj --notes of the code object: the kernel's descriptor fields. */
static void amdgpu_notes(const char *notes, const char *kernel, kiln_gpu_code_stats_t *out) {
  lines_t l;
  lines_init(&l, notes);
  /* Kernel entries are YAML list items ("  - .agpr_count: ..."); find the one
   * whose .name is the kernel. */
  size_t item = l.n;
  for (size_t i = 0; i < l.n; i++) {
    if (strstr(l.v[i], "- .")) item = i;
    const char *n = strstr(l.v[i], ".name:");
    if (!n || item == l.n) continue;
    n += strlen(".name:");
    while (*n == ' ') n++;
    if (strcmp(n, kernel) != 0) continue;
    int vgprs = -1, spills = 0;
    for (size_t j = item; j < l.n && (j == item || !strstr(l.v[j], "- .")); j++) {
      const char *v;
      if ((v = strstr(l.v[j], ".vgpr_count:"))) vgprs = atoi(v + strlen(".vgpr_count:"));
      if ((v = strstr(l.v[j], ".vgpr_spill_count:"))) spills += atoi(v + strlen(".vgpr_spill_count:"));
      if ((v = strstr(l.v[j], ".sgpr_spill_count:"))) spills += atoi(v + strlen(".sgpr_spill_count:"));
      if ((v = strstr(l.v[j], ".group_segment_fixed_size:"))) {
        out->shared_bytes = (unsigned)atoi(v + strlen(".group_segment_fixed_size:"));
      }
    }
    out->registers = vgprs;
    out->spill_bytes = spills;
    break;
  }
  lines_deinit(&l);
}

/* ---- SPIR-V (spirv-dis) ---- */

typedef struct spv_ids_s {
  char **names; /* "%name" of an id */
  char **info;  /* for types: "SB", "WG" pointer classes, or bit counts as text */
  size_t n, cap;
} spv_ids_t;

static const char *spv_find(const spv_ids_t *ids, const char *name, size_t len) {
  for (size_t i = 0; i < ids->n; i++) {
    if (strlen(ids->names[i]) == len && memcmp(ids->names[i], name, len) == 0) return ids->info[i];
  }
  return NULL;
}

static void spv_put(spv_ids_t *ids, const char *name, size_t len, const char *info) {
  if (ids->n == ids->cap) {
    ids->cap = ids->cap ? ids->cap * 2 : 64;
    ids->names = kiln_realloc(ids->names, ids->cap * sizeof *ids->names);
    ids->info = kiln_realloc(ids->info, ids->cap * sizeof *ids->info);
  }
  ids->names[ids->n] = kiln_strndup(name, len);
  ids->info[ids->n++] = kiln_strdup(info);
}

static void spv_ids_deinit(spv_ids_t *ids) {
  for (size_t i = 0; i < ids->n; i++) kiln_free(ids->names[i]), kiln_free(ids->info[i]);
  kiln_free(ids->names);
  kiln_free(ids->info);
}

/* The n-th whitespace-separated token of `line` (0: the first); its length in *len. */
static const char *token(const char *line, int n, size_t *len) {
  const char *p = line;
  *len = 0;
  for (int i = 0;; i++) {
    while (*p == ' ' || *p == '\t') p++;
    if (!*p) return NULL;
    size_t l = strcspn(p, " \t");
    if (i == n) {
      *len = l;
      return p;
    }
    p += l;
  }
}

static bool token_is(const char *line, int n, const char *word) {
  size_t len;
  const char *t = token(line, n, &len);
  return t && len == strlen(word) && memcmp(t, word, len) == 0;
}

/* Bits of a value of type `name` (scalars and vectors), 0 if unknown. */
static unsigned spv_bits(const spv_ids_t *ids, const char *name, size_t len) {
  const char *info = spv_find(ids, name, len);
  return info && isdigit((unsigned char)*info) ? (unsigned)atoi(info) : 0;
}

typedef struct spv_module_s {
  const spv_ids_t *types, *ptrs;
} spv_module_t;

static void spv_count(const char *line, counts_t *c, void *user) {
  const spv_module_t *m = user;
  size_t plen, tlen;
  if (token_is(line, 2, "OpLoad") || token_is(line, 0, "OpStore")) {
    bool store = token_is(line, 0, "OpStore");
    const char *p = store ? token(line, 1, &plen) : token(line, 4, &plen);
    const char *cls = p ? spv_find(m->ptrs, p, plen) : NULL;
    if (cls && !strcmp(cls, "SB")) store ? c->stores++ : c->loads++;
    if (cls && !strcmp(cls, "WG") && !store) c->shared++;
  } else if (token_is(line, 2, "OpFMul") || (token_is(line, 2, "OpExtInst") && has_word(line, "Fma"))) {
    const char *ty = token(line, 3, &tlen);
    unsigned bits = ty ? spv_bits(m->types, ty, tlen) : 0;
    /* a vector multiply counts its lanes: f32 lanes unless the type says */
    c->madds += bits > 32 ? bits / 32.0 : 1;
  } else if (strstr(line, "OpCooperativeMatrixMulAdd")) {
    c->madds += 16.0 * 16 * 16 / 32; /* a 16x16x16 product over a subgroup of 32: an estimate */
  }
}

void kiln_gpu_code_read_spirv(const char *text, const char *kernel, kiln_gpu_code_stats_t *out) {
  stats_clear(out);
  lines_t l;
  lines_init(&l, text);
  spv_ids_t types = {0}, ptrs = {0};
  /* Module level: types (bits; pointer storage classes), Workgroup variables,
   * and every pointer-valued id's storage class. */
  size_t len, tlen;
  for (size_t i = 0; i < l.n; i++) {
    const char *id = token(l.v[i], 0, &len);
    if (!id || *id != '%' || !token_is(l.v[i], 1, "=")) continue;
    const char *t;
    char info[32];
    if (token_is(l.v[i], 2, "OpTypeFloat") || token_is(l.v[i], 2, "OpTypeInt")) {
      t = token(l.v[i], 3, &tlen);
      spv_put(&types, id, len, t ? (snprintf(info, sizeof info, "%.*s", (int)tlen, t), info) : "0");
    } else if (token_is(l.v[i], 2, "OpTypeVector")) {
      const char *elem = token(l.v[i], 3, &tlen);
      size_t clen;
      const char *count = token(l.v[i], 4, &clen);
      unsigned bits = elem ? spv_bits(&types, elem, tlen) : 0;
      snprintf(info, sizeof info, "%u", bits * (count ? (unsigned)atoi(count) : 0));
      spv_put(&types, id, len, info);
    } else if (token_is(l.v[i], 2, "OpTypePointer")) {
      bool sb = token_is(l.v[i], 3, "StorageBuffer") || token_is(l.v[i], 3, "PhysicalStorageBuffer");
      bool wg = token_is(l.v[i], 3, "Workgroup");
      spv_put(&types, id, len, sb ? "SB" : wg ? "WG" : "-");
    } else if (token_is(l.v[i], 2, "OpVariable") || token_is(l.v[i], 2, "OpAccessChain") ||
               token_is(l.v[i], 2, "OpInBoundsAccessChain") || token_is(l.v[i], 2, "OpPtrAccessChain") ||
               token_is(l.v[i], 2, "OpBitcast")) {
      t = token(l.v[i], 3, &tlen);
      const char *cls = t ? spv_find(&types, t, tlen) : NULL;
      if (cls && (!strcmp(cls, "SB") || !strcmp(cls, "WG"))) spv_put(&ptrs, id, len, cls);
      if (cls && !strcmp(cls, "WG") && token_is(l.v[i], 2, "OpVariable")) out->shared_bytes++;
    }
  }
  char fn[256];
  snprintf(fn, sizeof fn, "%%%s", kernel);
  size_t start = l.n, end = l.n;
  for (size_t i = 0; i < l.n && start == l.n; i++) {
    if (token_is(l.v[i], 0, fn) && token_is(l.v[i], 2, "OpFunction")) start = i;
  }
  for (size_t i = start; i < l.n && end == l.n; i++) {
    if (token_is(l.v[i], 0, "OpFunctionEnd")) end = i;
  }
  if (start == l.n) {
    spv_ids_deinit(&types);
    spv_ids_deinit(&ptrs);
    lines_deinit(&l);
    return;
  }
  loop_t *loops = kiln_malloc((end - start + 1) * sizeof *loops);
  size_t n_loops = 0, header = start;
  for (size_t i = start; i < end; i++) {
    if (token_is(l.v[i], 2, "OpLabel")) header = i;
    if (token_is(l.v[i], 2, "OpLoad")) {
      size_t plen;
      const char *p = token(l.v[i], 4, &plen);
      const char *cls = p ? spv_find(&ptrs, p, plen) : NULL;
      const char *ty = token(l.v[i], 3, &tlen);
      if (cls && !strcmp(cls, "SB") && ty) {
        unsigned bits = spv_bits(&types, ty, tlen);
        if (bits > out->load_bits) out->load_bits = bits;
      }
    }
    if (strstr(l.v[i], "OpCooperativeMatrix")) out->matrix = true;
    if (strstr(l.v[i], "OpGroupNonUniformShuffle")) out->shuffles++;
    if (token_is(l.v[i], 0, "OpControlBarrier")) out->barriers++;
    if (!token_is(l.v[i], 0, "OpLoopMerge")) continue;
    size_t merge_len = 0;
    const char *merge = token(l.v[i], 1, &merge_len);
    for (size_t j = i + 1; j < end && merge; j++) {
      if (token_is(l.v[j], 2, "OpLabel")) {
        size_t mlen = 0;
        const char *m = token(l.v[j], 0, &mlen);
        if (m && mlen == merge_len && !memcmp(m, merge, merge_len)) {
          loops[n_loops++] = (loop_t){header, j};
          break;
        }
      }
    }
  }
  spv_module_t m = {&types, &ptrs};
  pick_hottest(&l, loops, n_loops, start, end, spv_count, &m, out);
  spv_ids_deinit(&types);
  spv_ids_deinit(&ptrs);
  lines_deinit(&l);
}

/* ---- running the readers ---- */

/* Runs `command` with the path of a temporary file holding the binary as its
 * last argument, capturing stdout (and stderr with `with_stderr`). */
static KILN_MUST_USE kiln_status_t run_reader(const char *command, const unsigned char *binary, size_t len,
                                              bool with_stderr, kiln_buf_t *out) {
  char path[] = "/tmp/kiln-gpu-code-XXXXXX";
  int fd = mkstemp(path);
  if (fd < 0) return KILN_STATUS(KILN_STATUS_INTERNAL, "mkstemp failed");
  bool ok = write(fd, binary, len) == (ssize_t)len;
  close(fd);
  kiln_status_t st = NULL;
  if (!ok) {
    st = KILN_STATUS(KILN_STATUS_INTERNAL, "cannot write %s", path);
  } else {
    kiln_buf_t cmd;
    kiln_buf_init(&cmd);
    kiln_buf_appendf(&cmd, "%s %s", command, path);
    kiln_buf_append_str(&cmd, with_stderr ? " 2>&1" : " 2>/dev/null");
    FILE *p = popen(cmd.data, "r");
    if (!p) {
      st = KILN_STATUS(KILN_STATUS_UNAVAILABLE, "cannot run %s", cmd.data);
    } else {
      char chunk[65536];
      size_t n;
      while ((n = fread(chunk, 1, sizeof chunk, p)) > 0) kiln_buf_append(out, chunk, n);
      int rc = pclose(p);
      if (rc != 0) st = KILN_STATUS(KILN_STATUS_UNAVAILABLE, "%s exited with %d", cmd.data, rc);
    }
    kiln_buf_deinit(&cmd);
  }
  unlink(path);
  return st;
}

static const char *ptxas_path(void) {
  static const char *const candidates[] = {"/usr/local/cuda/bin/ptxas", "/usr/bin/ptxas"};
  for (size_t i = 0; i < sizeof candidates / sizeof candidates[0]; i++) {
    if (access(candidates[i], X_OK) == 0) return candidates[i];
  }
  return NULL;
}

/* ptxas -v: "Function properties for K ... N bytes spill stores" and "Used R registers". */
static void ptxas_figures(const kiln_target_t *t, const unsigned char *ptx, size_t len, const char *kernel,
                          kiln_gpu_code_stats_t *out) {
  const char *ptxas = ptxas_path();
  if (!ptxas) return;
  char command[512];
  snprintf(command, sizeof command, "%s -v -arch=%s -o /dev/null", ptxas, t->chip);
  kiln_buf_t text;
  kiln_buf_init(&text);
  kiln_status_t st = run_reader(command, ptx, len, true, &text);
  if (!st && text.data) {
    char want[300];
    snprintf(want, sizeof want, "for '%s'", kernel);
    const char *at = strstr(text.data, want);
    if (!at) {
      snprintf(want, sizeof want, "for %s\n", kernel);
      at = strstr(text.data, want);
    }
    const char *used = at ? strstr(at, "Used ") : NULL;
    const char *spill = at ? strstr(at, "bytes spill stores") : NULL;
    if (used) out->registers = atoi(used + 5);
    if (spill) {
      const char *b = spill;
      while (b > at && b[-1] == ' ') b--;
      while (b > at && isdigit((unsigned char)b[-1])) b--;
      out->spill_bytes = atoi(b);
    }
  }
  kiln_status_free(st);
  kiln_buf_deinit(&text);
}

kiln_status_t kiln_gpu_code_read(const kiln_target_t *t, const unsigned char *binary, size_t len,
                                 const char *kernel, kiln_gpu_code_stats_t *out) {
  stats_clear(out);
  kiln_buf_t text;
  kiln_buf_init(&text);
  kiln_status_t st = NULL;
  switch (t->kind) {
    case KILN_TARGET_KIND_CUDA: {
      char *ptx = kiln_strndup((const char *)binary, len);
      kiln_gpu_code_read_ptx(ptx, kernel, out);
      kiln_free(ptx);
      ptxas_figures(t, binary, len, kernel, out);
      break;
    }
    case KILN_TARGET_KIND_HIP: {
      char command[256];
      snprintf(command, sizeof command, "llvm-objdump-22 -d --mcpu=%s", t->chip);
      st = run_reader(command, binary, len, false, &text);
      if (!st) kiln_gpu_code_read_amdgpu(text.data ? text.data : "", kernel, out);
      kiln_buf_clear(&text);
      if (!st) st = run_reader("llvm-readobj-22 --notes", binary, len, false, &text);
      if (!st) amdgpu_notes(text.data ? text.data : "", kernel, out);
      break;
    }
    case KILN_TARGET_KIND_VULKAN:
      st = run_reader("spirv-dis", binary, len, false, &text);
      if (!st) kiln_gpu_code_read_spirv(text.data ? text.data : "", kernel, out);
      break;
    default: st = KILN_STATUS(KILN_STATUS_INVALID_ARGUMENT, "%s is not a GPU target", t->id);
  }
  kiln_buf_deinit(&text);
  return st;
}
