/* vmfb_fixtures: writes a directory of VMFB files of every class kiln's reader
 * tells apart, through the real writer (kiln_vmfb_write), for integration tests
 * and for checking by hand with IREE's own tools.
 *
 *   vmfb_fixtures OUTDIR
 *
 * Each file name starts with the class `kiln inspect` must give it:
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
 * bytes on every run and host.
 *
 * After writing, every file is read back with kiln_vmfb_read and its class
 * compared with its name; one line per file ("<name> <class> <reason>") goes to
 * stdout. Exit 0 when every class matches, 1 when one does not, 2 on usage or
 * I/O errors.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <zlib.h>

#include "base/buf.h"
#include "base/digest.h"
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

#define CUDA KILN_VMFB_FORMAT_CUDA
#define HIP KILN_VMFB_FORMAT_HIP
#define VULKAN KILN_VMFB_FORMAT_VULKAN
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
  if (rc) fprintf(stderr, "vmfb_fixtures: %s reads as %s, not %s\n", name, kiln_vmfb_class_name(info.cls),
                  kiln_vmfb_class_name(want));
  kiln_vmfb_info_deinit(&info);
  return rc;
}

int main(int argc, char **argv) {
  if (argc != 2) {
    fprintf(stderr, "usage: vmfb_fixtures OUTDIR\n");
    return 2;
  }
  const char *dir = argv[1];
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
