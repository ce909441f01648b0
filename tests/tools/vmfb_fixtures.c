/* vmfb_fixtures: writes VMFB files of every class kiln's reader tells apart,
 * through the real writer (kiln_vmfb_write), for integration tests, benchmarks
 * and for checking by hand with IREE's own tools.
 *
 *   vmfb_fixtures OUTDIR
 *   vmfb_fixtures legacy OUT.vmfb --source FILE --target T [--shape SHAPE]
 *                 [--embed] [--no-digest] [--flags "F ..."] [--stamp S]
 *   vmfb_fixtures fleet OUTDIR --sources S1,S2,... --targets T1,T2,... --copies K
 *                 [--embed | --digest-only] [--flags "F ..."]
 *
 * OUTDIR mode: a directory of fixed fixtures. Each file name starts with the class
 * `kiln inspect` must give it:
 *   current_*   loads on IREE 3.12 (hal 0.7, bytecode 17.0, executable headers);
 *   legacy_*    an older IREE's file (hal 0.6, no executable header, bytecode 16,
 *               no dependency list);
 *   invalid_*   damaged, not a VMFB, or from a newer IREE; not_a_vmfb.txt too.
 * The module is the unit tests' sample (tests/unit/support/vmfb_sample.h: a
 * small hand-made host plan with two inputs, one 4 KiB constant, two dispatches,
 * one result, around fake but well-formed device code: PTX text for sm_89, an
 * AMDGPU ELF header for gfx1100, SPIR-V words). Damage is applied to the written
 * bytes (a truncation, a flipped executable byte, an external rodata offset past
 * the end of the file with the zip CRC recomputed so that the offset is the only
 * fault). Output is a function of this program and the sample alone: the same
 * bytes on every run and host. One line per file ("<name> <class> <reason>")
 * goes to stdout.
 *
 * legacy mode: one legacy file standing for an old build of a real model FILE
 * for target T (any id or alias of compiler/targets.h; its GPU kind picks the
 * executable format, and the sample's PTX .target or HSACO e_flags are set to
 * the target's chip). Provenance: kiln.target (canonical id), kiln.source.sha256
 * (SHA-256 of FILE's bytes; none with --no-digest, an "unknown source" file),
 * kiln.flags (only with --flags: the space-separated flags, as kilnd normalizes
 * them; they must pass kilnd's allow-list to be recompiled), and kiln.compiler
 * ("iree-compile 3.11", "iree-compile 3.11 build S" with --stamp S, so copies of
 * one (source, target) differ in bytes and digest). --embed carries FILE's bytes
 * (zstd) inside the file. SHAPE says what makes it legacy: hal6_zip (default),
 * hal6_flat (no --embed: the flat layout has no room for a source), noheader,
 * bytecode16, nodeps. Prints "<OUT> LEGACY <reason>".
 *
 * fleet mode: K legacy files per (source, target) pair, at
 * OUTDIR/<i>_<source name>/<target>/<k>_<shape>.vmfb, shapes taken in turn and
 * each copy stamped "fleet <k>"; digest-only (the default) or --embed (then no
 * flat shape). Prints one line: the count. Bulk-recompile tests and
 * bench_recompile make their 1,000-file fleets with it in one process.
 *
 * Every file written is read back with kiln_vmfb_read and its class compared
 * with the one intended (an embedded source is also extracted and compared).
 * Exit 0 when every class matches, 1 when one does not, 2 on usage or I/O errors.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <zlib.h>

#include "base/buf.h"
#include "base/digest.h"
#include "base/alloc.h"
#include "compiler/targets.h"
#include "compiler/vmfb/archive.h"
#include "compiler/vmfb/flatbuf.h"
#include "compiler/vmfb/reader.h"
#include "compiler/vmfb/schema.h"
#include "compiler/vmfb/writer.h"
#include "tests/unit/support/vmfb_sample.h"

static void put32(uint8_t *p, uint32_t v) {
  for (int i = 0; i < 4; i++) p[i] = (uint8_t)(v >> (8 * i));
}
static uint32_t get32(const uint8_t *p) {
  return (uint32_t)p[0] | ((uint32_t)p[1] << 8) | ((uint32_t)p[2] << 16) | ((uint32_t)p[3] << 24);
}

static const char SOURCE[] =
    "func.func @main(%x: tensor<1024xf32>, %y: tensor<1024xf32>) -> tensor<1024xf32> {\n"
    "  %w = arith.constant dense<1.0> : tensor<1024xf32>\n"
    "  %t = tosa.add %x, %w : (tensor<1024xf32>, tensor<1024xf32>) -> tensor<1024xf32>\n"
    "  %r = tosa.mul %t, %y : (tensor<1024xf32>, tensor<1024xf32>) -> tensor<1024xf32>\n"
    "  return %r : tensor<1024xf32>\n"
    "}\n";

/* ---- damage ---- */

typedef enum damage_e {
  DAMAGE_NONE,
  DAMAGE_TRUNCATE,   /* keep the first 60% */
  DAMAGE_CRC,        /* flip one byte in the middle of the executable's zip entry */
  DAMAGE_BAD_OFFSET, /* rodata 0's external_data_offset past the end of the file */
  DAMAGE_NEWER_HAL,  /* the hal dependency's minimum_version 8 */
} damage_t;

/* File offset of `slot`'s stored value in table `t` (whose buffer lies inside
 * `file`), or 0 when the field is not stored. */
static size_t field_offset(const uint8_t *file, kiln_vmfb_flatbuf_table_t t, uint16_t slot) {
  const uint8_t *p = t.data;
  int32_t soffset = (int32_t)get32(p + t.pos);
  size_t vt = (size_t)((int64_t)t.pos - soffset);
  uint16_t vt_size = (uint16_t)(p[vt] | (p[vt + 1] << 8));
  if (4u + 2u * slot + 2u > vt_size) return 0;
  uint16_t off = (uint16_t)(p[vt + 4 + 2 * slot] | (p[vt + 5 + 2 * slot] << 8));
  return off ? (size_t)(p - file) + t.pos + off : 0;
}

/* Recomputes the zip CRC-32 of `entry` in its local header and its central
 * directory record after the entry's bytes were changed on purpose. */
static int zip_fix_crc(uint8_t *file, size_t len, const char *entry) {
  kiln_vmfb_archive_t a;
  kiln_status_t st = kiln_vmfb_archive_parse(file, len, 0, &a);
  if (st) {
    fprintf(stderr, "vmfb_fixtures: %s\n", kiln_status_message(st));
    kiln_status_free(st);
    return -1;
  }
  ptrdiff_t i = kiln_vmfb_archive_entry_find(&a, entry);
  if (i < 0) {
    kiln_vmfb_archive_deinit(&a);
    return -1;
  }
  const kiln_vmfb_archive_entry_t *e = &a.entries[i];
  uint32_t crc = (uint32_t)crc32(0L, file + e->data_offset, (uInt)e->size);
  put32(file + e->header_offset + 14, crc);
  size_t name_len = strlen(entry);
  int fixed = 0;
  for (size_t p = 0; p + 46 + name_len <= len; p++) {
    if (get32(file + p) == 0x02014b50u && (size_t)(file[p + 28] | (file[p + 29] << 8)) == name_len &&
        memcmp(file + p + 46, entry, name_len) == 0) {
      put32(file + p + 16, crc);
      fixed++;
    }
  }
  kiln_vmfb_archive_deinit(&a);
  return fixed == 1 ? 0 : -1;
}

/* Patches one field of the module FlatBuffer in `buf` (BAD_OFFSET: rodata 0's
 * external_data_offset := the file size; NEWER_HAL: the hal dependency's
 * minimum_version := 8), then repairs module.fb's CRC in the zip layout so the
 * patch is the file's only fault. */
static int patch(kiln_buf_t *buf, damage_t damage) {
  uint8_t *file = (uint8_t *)buf->data;
  kiln_vmfb_archive_t a;
  kiln_status_t st = kiln_vmfb_archive_parse(file, buf->len, 0, &a);
  if (st) {
    fprintf(stderr, "vmfb_fixtures: %s\n", kiln_status_message(st));
    kiln_status_free(st);
    return -1;
  }
  kiln_vmfb_flatbuf_table_t root =
      kiln_vmfb_flatbuf_root(a.flatbuffer, a.flatbuffer_size, true, &kiln_vmfb_schema_vm_bytecode_module_def);
  bool zip = a.layout == KILN_VMFB_ARCHIVE_LAYOUT_ZIP;
  size_t at = 0;
  if (damage == DAMAGE_BAD_OFFSET) {
    kiln_vmfb_flatbuf_vector_t rodata =
        kiln_vmfb_flatbuf_table_get_vector(root, KILN_VM_MODULE_RODATA_SEGMENTS);
    at = field_offset(file, kiln_vmfb_flatbuf_vector_get_table(rodata, 0),
                      KILN_VM_RODATA_EXTERNAL_DATA_OFFSET);
    if (at) {
      uint64_t past = (uint64_t)buf->len;
      for (int i = 0; i < 8; i++) file[at + i] = (uint8_t)(past >> (8 * i));
    }
  } else {
    kiln_vmfb_flatbuf_vector_t deps = kiln_vmfb_flatbuf_table_get_vector(root, KILN_VM_MODULE_DEPENDENCIES);
    at = field_offset(file, kiln_vmfb_flatbuf_vector_get_table(deps, 0), KILN_VM_DEPENDENCY_MINIMUM_VERSION);
    if (at) put32(file + at, 8);
  }
  kiln_vmfb_archive_deinit(&a);
  if (!at) return -1;
  return zip ? zip_fix_crc(file, buf->len, KILN_VMFB_ARCHIVE_MODULE_NAME) : 0;
}

static int flip_executable_byte(kiln_buf_t *buf) {
  uint8_t *file = (uint8_t *)buf->data;
  kiln_vmfb_archive_t a;
  kiln_status_t st = kiln_vmfb_archive_parse(file, buf->len, 0, &a);
  if (st) {
    kiln_status_free(st);
    return -1;
  }
  int rc = -1;
  for (size_t i = 0; i < a.entry_count; i++) {
    const kiln_vmfb_archive_entry_t *e = &a.entries[i];
    size_t n = e->name_length;
    if (n > 3 && strcmp(e->name + n - 3, ".fb") == 0 && strcmp(e->name, KILN_VMFB_ARCHIVE_MODULE_NAME) != 0) {
      file[e->data_offset + e->size / 2] ^= 0x20;
      rc = 0;
      break;
    }
  }
  kiln_vmfb_archive_deinit(&a);
  return rc;
}

/* ---- the fixtures ---- */

typedef struct fixture_s {
  const char *name;
  kiln_vmfb_format_t format;
  bool flat;
  bool with_source;
  uint32_t hal_version;
  uint32_t bytecode_version;
  bool no_executable_header;
  bool no_dependencies;
  damage_t damage;
} fixture_t;

#define CUDA             KILN_VMFB_FORMAT_CUDA
#define HIP              KILN_VMFB_FORMAT_HIP
#define VULKAN           KILN_VMFB_FORMAT_VULKAN
#define BC(major, minor) (((uint32_t)(major) << 16) | (minor))

static const fixture_t FIXTURES[] = {
    {"current_zip_cuda.vmfb", CUDA, false, false, 0, 0, false, false, DAMAGE_NONE},
    {"current_zip_hip.vmfb", HIP, false, false, 0, 0, false, false, DAMAGE_NONE},
    {"current_zip_vulkan.vmfb", VULKAN, false, false, 0, 0, false, false, DAMAGE_NONE},
    {"current_flat_cuda.vmfb", CUDA, true, false, 0, 0, false, false, DAMAGE_NONE},
    {"current_with_source.vmfb", CUDA, false, true, 0, 0, false, false, DAMAGE_NONE},
    {"legacy_hal6_zip.vmfb", CUDA, false, false, 6, 0, false, false, DAMAGE_NONE},
    {"legacy_hal6_flat.vmfb", HIP, true, false, 6, 0, false, false, DAMAGE_NONE},
    {"legacy_noheader.vmfb", CUDA, false, false, 7, 0, true, false, DAMAGE_NONE},
    {"legacy_bytecode16.vmfb", CUDA, false, false, 0, BC(16, 0), false, false, DAMAGE_NONE},
    {"legacy_nodeps.vmfb", CUDA, false, false, 0, 0, false, true, DAMAGE_NONE},
    {"invalid_truncated.vmfb", CUDA, false, false, 0, 0, false, false, DAMAGE_TRUNCATE},
    {"invalid_crc.vmfb", CUDA, false, false, 0, 0, false, false, DAMAGE_CRC},
    {"invalid_newer_bytecode.vmfb", CUDA, false, false, 0, BC(18, 0), false, false, DAMAGE_NONE},
    {"invalid_newer_hal.vmfb", CUDA, false, false, 0, 0, false, false, DAMAGE_NEWER_HAL},
    {"invalid_bad_offset.vmfb", CUDA, false, false, 0, 0, false, false, DAMAGE_BAD_OFFSET},
};

static int build(const fixture_t *f, kiln_buf_t *out) {
  kiln_test_vmfb_sample_t sample;
  kiln_test_vmfb_sample_init(&sample);
  kiln_digest_t digest;
  kiln_digest_hex_t hex;
  kiln_digest_of(SOURCE, sizeof SOURCE - 1, &digest);
  kiln_digest_to_hex(&digest, &hex);
  const char *target = f->format == CUDA ? "sm_89" : f->format == HIP ? "gfx1100" : "arm5gen";
  kiln_vmfb_provenance_t prov = {.source_sha256 = hex.text,
                                 .target = target,
                                 .flags = "--iree-opt-level=O2",
                                 .compiler = "kiln vmfb_fixtures"};
  kiln_vmfb_write_options_t wo = {.flat = f->flat,
                                  .provenance = &prov,
                                  .source = f->with_source ? (const uint8_t *)SOURCE : NULL,
                                  .source_len = f->with_source ? sizeof SOURCE - 1 : 0,
                                  .hal_version = f->hal_version,
                                  .bytecode_version = f->bytecode_version,
                                  .no_executable_header = f->no_executable_header,
                                  .no_dependencies = f->no_dependencies};
  kiln_status_t st = kiln_vmfb_write("fixture", &sample.plan, &sample.exe[f->format - 1], &wo, out);
  kiln_test_vmfb_sample_deinit(&sample);
  if (st) {
    fprintf(stderr, "vmfb_fixtures: %s: %s\n", f->name, kiln_status_message(st));
    kiln_status_free(st);
    return -1;
  }
  switch (f->damage) {
    case DAMAGE_NONE: return 0;
    case DAMAGE_TRUNCATE: out->len = out->len * 6 / 10; return 0;
    case DAMAGE_CRC: return flip_executable_byte(out);
    case DAMAGE_BAD_OFFSET:
    case DAMAGE_NEWER_HAL: return patch(out, f->damage);
  }
  return -1;
}

static int write_file(const char *dir, const char *name, const void *data, size_t len) {
  kiln_buf_t path;
  kiln_buf_init(&path);
  kiln_buf_appendf(&path, "%s/%s", dir, name);
  FILE *f = fopen(path.data, "wb");
  int rc = 0;
  if (!f || (len && fwrite(data, 1, len, f) != len) || fclose(f) != 0) {
    fprintf(stderr, "vmfb_fixtures: cannot write %s: %s\n", path.data, strerror(errno));
    rc = -1;
  }
  kiln_buf_deinit(&path);
  return rc;
}

/* Reads `len` bytes back and compares the class with the name's prefix. */
static int check(const char *name, const void *data, size_t len) {
  kiln_vmfb_class_t want = strncmp(name, "current_", 8) == 0  ? KILN_VMFB_CLASS_CURRENT
                           : strncmp(name, "legacy_", 7) == 0 ? KILN_VMFB_CLASS_LEGACY
                                                              : KILN_VMFB_CLASS_INVALID;
  kiln_vmfb_info_t info;
  kiln_status_free(kiln_vmfb_read(data, len, &info));
  printf("%-28s %-8s %s\n", name, kiln_vmfb_class_name(info.cls), info.reason);
  int rc = info.cls == want ? 0 : 1;
  if (rc)
    fprintf(stderr, "vmfb_fixtures: %s reads as %s, not %s\n", name, kiln_vmfb_class_name(info.cls),
            kiln_vmfb_class_name(want));
  kiln_vmfb_info_deinit(&info);
  return rc;
}

/* OUTDIR mode: the fixed fixtures. */
static int fixtures_main(const char *dir) {
  if (mkdir(dir, 0755) != 0 && errno != EEXIST) {
    fprintf(stderr, "vmfb_fixtures: cannot create %s: %s\n", dir, strerror(errno));
    return 2;
  }
  int mismatches = 0;
  for (size_t i = 0; i < sizeof FIXTURES / sizeof FIXTURES[0]; i++) {
    kiln_buf_t buf;
    kiln_buf_init(&buf);
    if (build(&FIXTURES[i], &buf) != 0) {
      fprintf(stderr, "vmfb_fixtures: could not build %s\n", FIXTURES[i].name);
      kiln_buf_deinit(&buf);
      return 2;
    }
    int rc = write_file(dir, FIXTURES[i].name, buf.data, buf.len);
    if (rc == 0) mismatches += check(FIXTURES[i].name, buf.data, buf.len);
    kiln_buf_deinit(&buf);
    if (rc) return 2;
  }
  /* Not VMFBs at all: noise, nothing, text. */
  uint8_t garbage[4096];
  uint64_t x = 0x9E3779B97F4A7C15ull;
  for (size_t i = 0; i < sizeof garbage; i++) {
    x ^= x << 13;
    x ^= x >> 7;
    x ^= x << 17;
    garbage[i] = (uint8_t)(x >> 56);
  }
  static const char TEXT[] = "This is a text file, not an IREE VMFB module.\n";
  const struct {
    const char *name;
    const void *data;
    size_t len;
  } raw[] = {
      {"invalid_garbage.vmfb", garbage, sizeof garbage},
      {"invalid_empty.vmfb", "", 0},
      {"not_a_vmfb.txt", TEXT, sizeof TEXT - 1},
  };
  for (size_t i = 0; i < sizeof raw / sizeof raw[0]; i++) {
    if (write_file(dir, raw[i].name, raw[i].data, raw[i].len) != 0) return 2;
    mismatches += check(raw[i].name, raw[i].data, raw[i].len);
  }
  return mismatches ? 1 : 0;
}

/* ---- legacy files of real sources ---- */

typedef enum shape_e {
  SHAPE_HAL6_ZIP,
  SHAPE_HAL6_FLAT,
  SHAPE_NOHEADER,
  SHAPE_BYTECODE16,
  SHAPE_NODEPS
} shape_t;

static const char *const SHAPE_NAMES[] = {"hal6_zip", "hal6_flat", "noheader", "bytecode16", "nodeps"};
#define N_SHAPES (sizeof SHAPE_NAMES / sizeof SHAPE_NAMES[0])

/* EF_AMDGPU_MACH_* (LLVM's ELF.h) of the registry's HIP targets. */
static const struct {
  const char *chip;
  uint8_t mach;
} AMDGPU_MACHS[] = {{"gfx942", 0x4c},  {"gfx950", 0x4f},  {"gfx1100", 0x41},
                    {"gfx1101", 0x46}, {"gfx1200", 0x48}, {"gfx1201", 0x4e}};

/* One source, read once; the digest is its hex SHA-256. */
typedef struct source_s {
  const char *path;
  char *data;
  size_t len;
  kiln_digest_hex_t hex;
} source_t;

typedef struct legacy_s {
  const source_t *source;
  const kiln_target_t *target;
  shape_t shape;
  bool embed;
  bool digest;
  const char *flags; /* NULL: no kiln.flags */
  const char *stamp; /* NULL: none */
} legacy_t;

static int source_load(const char *path, source_t *out) {
  memset(out, 0, sizeof *out);
  out->path = path;
  FILE *f = fopen(path, "rb");
  if (!f) {
    fprintf(stderr, "vmfb_fixtures: cannot open source %s: %s\n", path, strerror(errno));
    return -1;
  }
  kiln_buf_t buf;
  kiln_buf_init(&buf);
  char chunk[65536];
  size_t n;
  while ((n = fread(chunk, 1, sizeof chunk, f)) > 0) kiln_buf_append(&buf, chunk, n);
  int bad = ferror(f);
  fclose(f);
  if (bad) {
    fprintf(stderr, "vmfb_fixtures: cannot read source %s\n", path);
    kiln_buf_deinit(&buf);
    return -1;
  }
  out->len = buf.len;
  out->data = kiln_buf_take(&buf);
  kiln_digest_t digest;
  kiln_digest_of(out->data, out->len, &digest);
  kiln_digest_to_hex(&digest, &out->hex);
  return 0;
}

static int target_load(const char *name, const kiln_target_t **out) {
  kiln_status_t st = kiln_compiler_target_resolve(name, out);
  if (st) {
    fprintf(stderr, "vmfb_fixtures: %s\n", kiln_status_message(st));
    kiln_status_free(st);
    return -1;
  }
  if ((*out)->kind == KILN_TARGET_KIND_CPU) {
    fprintf(
        stderr,
        "vmfb_fixtures: target %s is a CPU; legacy files are written for GPU targets (CUDA, HIP, Vulkan)\n",
        (*out)->id);
    return -1;
  }
  return 0;
}

static int shape_parse(const char *name, shape_t *out) {
  for (size_t i = 0; i < N_SHAPES; i++) {
    if (strcmp(name, SHAPE_NAMES[i]) == 0) {
      *out = (shape_t)i;
      return 0;
    }
  }
  fprintf(stderr,
          "vmfb_fixtures: unknown --shape %s; use hal6_zip, hal6_flat, noheader, bytecode16 or nodeps\n",
          name);
  return -1;
}

/* The sample module for `l`'s target, its device code naming the target's chip,
 * written in `l`'s legacy shape with its provenance. */
static int legacy_build(const legacy_t *l, kiln_buf_t *out) {
  if (l->embed && l->shape == SHAPE_HAL6_FLAT) {
    fprintf(stderr, "vmfb_fixtures: --embed needs the zip layout; pick a --shape other than hal6_flat\n");
    return -1;
  }
  kiln_vmfb_format_t format = l->target->kind == KILN_TARGET_KIND_CUDA  ? KILN_VMFB_FORMAT_CUDA
                              : l->target->kind == KILN_TARGET_KIND_HIP ? KILN_VMFB_FORMAT_HIP
                                                                        : KILN_VMFB_FORMAT_VULKAN;
  kiln_test_vmfb_sample_t *sample = kiln_malloc(sizeof *sample); /* executables point into it */
  kiln_test_vmfb_sample_init(sample);
  kiln_buf_t ptx;
  kiln_buf_init(&ptx);
  if (format == KILN_VMFB_FORMAT_CUDA) {
    const char *code = (const char *)sample->code[0].data;
    size_t len = sample->code[0].len;
    const char *at = strstr(code, ".target sm_89\n");
    if (at) {
      kiln_buf_append(&ptx, code, (size_t)(at - code));
      kiln_buf_appendf(&ptx, ".target %s\n", l->target->chip);
      size_t rest = (size_t)(at - code) + strlen(".target sm_89\n");
      kiln_buf_append(&ptx, code + rest, len - rest);
      sample->code[0] = (kiln_vmfb_code_t){(const uint8_t *)ptx.data, ptx.len};
    }
  } else if (format == KILN_VMFB_FORMAT_HIP) {
    for (size_t i = 0; i < sizeof AMDGPU_MACHS / sizeof AMDGPU_MACHS[0]; i++) {
      if (strcmp(AMDGPU_MACHS[i].chip, l->target->chip) == 0) sample->hsaco[48] = AMDGPU_MACHS[i].mach;
    }
  }
  char compiler[200];
  snprintf(compiler, sizeof compiler, "iree-compile 3.11%s%s", l->stamp ? " build " : "",
           l->stamp ? l->stamp : "");
  kiln_vmfb_provenance_t prov = {.source_sha256 = l->digest ? l->source->hex.text : NULL,
                                 .target = l->target->id,
                                 .flags = l->flags,
                                 .compiler = compiler};
  kiln_vmfb_write_options_t wo = {
      .flat = l->shape == SHAPE_HAL6_FLAT,
      .provenance = &prov,
      .source = l->embed ? (const uint8_t *)l->source->data : NULL,
      .source_len = l->embed ? l->source->len : 0,
      .hal_version = l->shape == SHAPE_HAL6_ZIP || l->shape == SHAPE_HAL6_FLAT ? 6 : 0,
      .bytecode_version = l->shape == SHAPE_BYTECODE16 ? BC(16, 0) : 0,
      .no_executable_header = l->shape == SHAPE_NOHEADER,
      .no_dependencies = l->shape == SHAPE_NODEPS};
  kiln_status_t st = kiln_vmfb_write("module", &sample->plan, &sample->exe[format - 1], &wo, out);
  kiln_test_vmfb_sample_deinit(sample);
  kiln_free(sample);
  kiln_buf_deinit(&ptx);
  if (st) {
    fprintf(stderr, "vmfb_fixtures: %s for %s: %s\n", l->source->path, l->target->id,
            kiln_status_message(st));
    kiln_status_free(st);
    return -1;
  }
  return 0;
}

/* Reads a legacy file back: LEGACY, the target recorded, and an embedded source
 * that extracts to the source's bytes. Prints the line when `print`. */
static int legacy_check(const legacy_t *l, const char *path, const kiln_buf_t *file, bool print) {
  kiln_vmfb_info_t info;
  kiln_status_free(kiln_vmfb_read((const uint8_t *)file->data, file->len, &info));
  const char *target = kiln_vmfb_info_attr(&info, "kiln.target");
  int rc = 0;
  if (info.cls != KILN_VMFB_CLASS_LEGACY) {
    fprintf(stderr, "vmfb_fixtures: %s reads as %s, not LEGACY: %s\n", path, kiln_vmfb_class_name(info.cls),
            info.reason);
    rc = 1;
  } else if (!target || strcmp(target, l->target->id) != 0) {
    fprintf(stderr, "vmfb_fixtures: %s records target %s, not %s\n", path, target ? target : "(none)",
            l->target->id);
    rc = 1;
  }
  if (print) printf("%s %s %s\n", path, kiln_vmfb_class_name(info.cls), info.reason);
  kiln_vmfb_info_deinit(&info);
  if (rc || !l->embed) return rc;
  uint8_t *src = NULL;
  size_t len = 0;
  kiln_status_t st = kiln_vmfb_source_extract((const uint8_t *)file->data, file->len, &src, &len);
  if (st || len != l->source->len || memcmp(src, l->source->data, len) != 0) {
    fprintf(stderr, "vmfb_fixtures: %s: the embedded source does not read back as %s%s%s\n", path,
            l->source->path, st ? ": " : "", st ? kiln_status_message(st) : "");
    rc = 1;
  }
  kiln_status_free(st);
  kiln_free(src);
  return rc;
}

/* Builds, writes and checks one legacy file: 0, 1 (wrong class) or 2. */
static int legacy_emit(const legacy_t *l, const char *path, bool print) {
  kiln_buf_t buf;
  kiln_buf_init(&buf);
  int rc = legacy_build(l, &buf) != 0 ? 2 : 0;
  if (rc == 0) {
    FILE *f = fopen(path, "wb");
    if (!f || fwrite(buf.data, 1, buf.len, f) != buf.len || fclose(f) != 0) {
      fprintf(stderr, "vmfb_fixtures: cannot write %s: %s\n", path, strerror(errno));
      rc = 2;
    }
  }
  if (rc == 0) rc = legacy_check(l, path, &buf, print);
  kiln_buf_deinit(&buf);
  return rc;
}

static int mkdir_p(const char *path) {
  kiln_buf_t p;
  kiln_buf_init(&p);
  kiln_buf_append_str(&p, path);
  int rc = 0;
  for (char *c = p.data + 1; rc == 0; c++) {
    bool end = *c == '\0';
    if (*c != '/' && !end) continue;
    *c = '\0';
    if (mkdir(p.data, 0755) != 0 && errno != EEXIST) {
      fprintf(stderr, "vmfb_fixtures: cannot create %s: %s\n", p.data, strerror(errno));
      rc = -1;
    }
    if (end) break;
    *c = '/';
  }
  kiln_buf_deinit(&p);
  return rc;
}

static int usage_legacy(void) {
  fprintf(stderr,
          "usage: vmfb_fixtures OUTDIR\n"
          "       vmfb_fixtures legacy OUT.vmfb --source FILE --target T [--shape SHAPE]\n"
          "                     [--embed] [--no-digest] [--flags \"F ...\"] [--stamp S]\n"
          "       vmfb_fixtures fleet OUTDIR --sources S1,S2,... --targets T1,T2,... --copies K\n"
          "                     [--embed | --digest-only] [--flags \"F ...\"]\n"
          "SHAPE: hal6_zip (default), hal6_flat, noheader, bytecode16, nodeps\n");
  return 2;
}

/* The value after option argv[*i], or NULL (usage) when it is missing. */
static char *option_value(int argc, char **argv, int *i) {
  if (*i + 1 >= argc) {
    fprintf(stderr, "vmfb_fixtures: %s needs a value\n", argv[*i]);
    return NULL;
  }
  return argv[++*i];
}

static int legacy_main(int argc, char **argv) {
  const char *out = argv[2], *source_path = NULL, *target_name = NULL;
  legacy_t l = {.shape = SHAPE_HAL6_ZIP, .digest = true};
  for (int i = 3; i < argc; i++) {
    const char *a = argv[i], *v = NULL;
    if (strcmp(a, "--embed") == 0) {
      l.embed = true;
    } else if (strcmp(a, "--no-digest") == 0) {
      l.digest = false;
    } else if (strcmp(a, "--source") == 0 || strcmp(a, "--target") == 0 || strcmp(a, "--shape") == 0 ||
               strcmp(a, "--flags") == 0 || strcmp(a, "--stamp") == 0) {
      if (!(v = option_value(argc, argv, &i))) return usage_legacy();
      if (strcmp(a, "--source") == 0)
        source_path = v;
      else if (strcmp(a, "--target") == 0)
        target_name = v;
      else if (strcmp(a, "--flags") == 0)
        l.flags = v;
      else if (strcmp(a, "--stamp") == 0)
        l.stamp = v;
      else if (shape_parse(v, &l.shape) != 0)
        return 2;
    } else {
      fprintf(stderr, "vmfb_fixtures: unknown option %s\n", a);
      return usage_legacy();
    }
  }
  if (!source_path || !target_name) {
    fprintf(stderr, "vmfb_fixtures: legacy needs --source FILE and --target T\n");
    return usage_legacy();
  }
  source_t source;
  if (source_load(source_path, &source) != 0 || target_load(target_name, &l.target) != 0) {
    kiln_free(source.data);
    return 2;
  }
  l.source = &source;
  int rc = legacy_emit(&l, out, true);
  kiln_free(source.data);
  return rc;
}

/* Splits a comma-separated list in place; returns the count (at most `cap`). */
static size_t split_list(char *list, char **out, size_t cap) {
  size_t n = 0;
  for (char *save = NULL, *tok = strtok_r(list, ",", &save); tok && n < cap;
       tok = strtok_r(NULL, ",", &save)) {
    out[n++] = tok;
  }
  return n;
}

#define FLEET_MAX 256

static int fleet_main(int argc, char **argv) {
  const char *dir = argv[2];
  char *sources_arg = NULL, *targets_arg = NULL; /* argv's strings, split in place */
  long copies = 0;
  legacy_t base = {.digest = true};
  for (int i = 3; i < argc; i++) {
    const char *a = argv[i];
    char *v = NULL;
    if (strcmp(a, "--embed") == 0) {
      base.embed = true;
    } else if (strcmp(a, "--digest-only") == 0) {
      base.embed = false;
    } else if (strcmp(a, "--sources") == 0 || strcmp(a, "--targets") == 0 || strcmp(a, "--copies") == 0 ||
               strcmp(a, "--flags") == 0) {
      if (!(v = option_value(argc, argv, &i))) return usage_legacy();
      if (strcmp(a, "--sources") == 0)
        sources_arg = v;
      else if (strcmp(a, "--targets") == 0)
        targets_arg = v;
      else if (strcmp(a, "--flags") == 0)
        base.flags = v;
      else
        copies = strtol(v, NULL, 10);
    } else {
      fprintf(stderr, "vmfb_fixtures: unknown option %s\n", a);
      return usage_legacy();
    }
  }
  char *source_names[FLEET_MAX], *target_names[FLEET_MAX];
  size_t n_sources = sources_arg ? split_list(sources_arg, source_names, FLEET_MAX) : 0;
  size_t n_targets = targets_arg ? split_list(targets_arg, target_names, FLEET_MAX) : 0;
  if (!n_sources || !n_targets || copies < 1 || copies > 100000) {
    fprintf(stderr,
            "vmfb_fixtures: fleet needs --sources, --targets (up to %d each) and --copies 1..100000\n",
            FLEET_MAX);
    return usage_legacy();
  }
  source_t *sources = kiln_calloc(n_sources, sizeof *sources);
  const kiln_target_t *targets[FLEET_MAX];
  int rc = 0;
  for (size_t s = 0; s < n_sources && rc == 0; s++) {
    if (source_load(source_names[s], &sources[s]) != 0) rc = 2;
  }
  for (size_t t = 0; t < n_targets && rc == 0; t++) {
    if (target_load(target_names[t], &targets[t]) != 0) rc = 2;
  }
  /* Shapes in turn; an embedded source needs the zip layout. */
  shape_t shapes[N_SHAPES];
  size_t n_shapes = 0;
  for (size_t i = 0; i < N_SHAPES; i++) {
    if (!(base.embed && i == SHAPE_HAL6_FLAT)) shapes[n_shapes++] = (shape_t)i;
  }
  size_t written = 0;
  kiln_buf_t path;
  kiln_buf_init(&path);
  for (size_t s = 0; s < n_sources && rc == 0; s++) {
    const char *name = strrchr(sources[s].path, '/');
    name = name ? name + 1 : sources[s].path;
    for (size_t t = 0; t < n_targets && rc == 0; t++) {
      kiln_buf_clear(&path);
      kiln_buf_appendf(&path, "%s/%zu_%s/%s", dir, s, name, targets[t]->id);
      if (mkdir_p(path.data) != 0) {
        rc = 2;
        break;
      }
      size_t at = path.len;
      for (long k = 0; k < copies && rc == 0; k++) {
        legacy_t l = base;
        l.source = &sources[s];
        l.target = targets[t];
        l.shape = shapes[(size_t)k % n_shapes];
        char stamp[32];
        snprintf(stamp, sizeof stamp, "fleet %ld", k);
        l.stamp = stamp;
        path.len = at;
        path.data[at] = '\0';
        kiln_buf_appendf(&path, "/%ld_%s.vmfb", k, SHAPE_NAMES[l.shape]);
        rc = legacy_emit(&l, path.data, false);
        if (rc == 0) written++;
      }
    }
  }
  kiln_buf_deinit(&path);
  if (rc == 0) {
    printf("%zu legacy VMFBs (%zu sources x %zu targets x %ld copies, %s) under %s\n", written, n_sources,
           n_targets, copies, base.embed ? "source embedded" : "source digest only", dir);
  }
  for (size_t s = 0; s < n_sources; s++) kiln_free(sources[s].data);
  kiln_free(sources);
  return rc;
}

int main(int argc, char **argv) {
  if (argc == 2 && argv[1][0] != '-') return fixtures_main(argv[1]);
  if (argc >= 3 && strcmp(argv[1], "legacy") == 0) return legacy_main(argc, argv);
  if (argc >= 3 && strcmp(argv[1], "fleet") == 0) return fleet_main(argc, argv);
  return usage_legacy();
}
