/* `kiln inspect FILE...`: reads VMFBs locally (no kilnd) with the hardened reader
 * and says what each one is: module, bytecode and HAL versions, imports, exports,
 * rodata, executables (format, header, kernels, chip) and kiln's provenance, then
 * its class (current / legacy / invalid) and why. The exit status is the worst
 * class seen: 0 all current, KILN_EXIT_LEGACY, KILN_EXIT_INVALID. */
#include <errno.h>
#include <json-c/json.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>

#include "base/alloc.h"
#include "client/cli.h"
#include "client/transfer.h"
#include "client/json.h"
#include "compiler/vmfb/reader.h"

/* Files larger than this are refused (a VMFB is loaded whole by the runtime too). */
#define MAX_FILE_BYTES (4ull << 30)

static KILN_MUST_USE kiln_status_t read_whole(const char *path, uint8_t **out, size_t *out_len);

void kiln_cli_vmfb_load(const char *path, uint8_t **out_data, size_t *out_len, kiln_vmfb_info_t *out_info) {
  memset(out_info, 0, sizeof *out_info);
  kiln_status_t st = read_whole(path, out_data, out_len);
  if (st) {
    out_info->cls = KILN_VMFB_CLASS_INVALID;
    out_info->reason = kiln_strdup(kiln_status_message(st));
    kiln_status_free(st);
  } else {
    kiln_status_free(kiln_vmfb_read(*out_data, *out_len, out_info));
  }
}

static KILN_MUST_USE kiln_status_t read_whole(const char *path, uint8_t **out, size_t *out_len) {
  *out = NULL;
  *out_len = 0;
  FILE *f = fopen(path, "rb");
  if (!f) return KILN_CLI_LOCAL_ERRNO(errno, "cannot open %s", path);
  struct stat st;
  kiln_status_t status = NULL;
  if (fstat(fileno(f), &st) != 0) {
    status = KILN_CLI_LOCAL_ERRNO(errno, "cannot stat %s", path);
  } else if (!S_ISREG(st.st_mode)) {
    status = KILN_STATUS(KILN_STATUS_INVALID_ARGUMENT, "%s is not a regular file", path);
  } else if ((uint64_t)st.st_size > MAX_FILE_BYTES) {
    status = KILN_STATUS(KILN_STATUS_INVALID_ARGUMENT, "%s is %lld bytes, over the 4 GiB a VMFB can be", path,
                         (long long)st.st_size);
  } else {
    size_t n = (size_t)st.st_size;
    uint8_t *data = kiln_malloc(n ? n : 1);
    if (fread(data, 1, n, f) != n) {
      status = KILN_CLI_LOCAL_ERRNO(errno ? errno : EIO, "cannot read %s", path);
      kiln_free(data);
    } else {
      *out = data;
      *out_len = n;
    }
  }
  fclose(f);
  return status;
}

static const char *layout_name(int layout) { return layout == 1 ? "zip" : layout == 2 ? "flat" : "unknown"; }

static void print_human(const char *path, const kiln_vmfb_info_t *info) {
  printf("%s: %s\n", path, kiln_vmfb_class_name(info->cls));
  printf("  why        %s\n", info->reason);
  if (!info->name) return;
  printf("  module     %s (version %u), %s layout, %llu bytes\n", info->name, info->version,
         layout_name(info->layout), (unsigned long long)info->file_size);
  printf("  bytecode   %u.%u, %zu function(s), %llu bytes of bytecode\n", info->bytecode_version >> 16,
         info->bytecode_version & 0xFFFF, info->n_functions, (unsigned long long)info->bytecode_bytes);
  for (size_t i = 0; i < info->n_dependencies; i++) {
    const kiln_vmfb_dependency_t *d = &info->dependencies[i];
    printf("  requires   %s >= %u%s\n", d->name, d->minimum_version, (d->flags & 2) ? " (optional)" : "");
  }
  if (info->n_dependencies == 0) printf("  requires   (no dependency list: IREE before HAL 0.5?)\n");
  for (size_t i = 0; i < info->n_exports; i++) {
    printf("  export     %s%s%s\n", info->exports[i].name, info->exports[i].cconv ? "  " : "",
           info->exports[i].cconv ? info->exports[i].cconv : "");
  }
  printf("  imports    %zu\n", info->n_imports);
  for (size_t i = 0; i < info->n_imports; i++) {
    printf("    %-36s %s%s\n", info->imports[i].full_name,
           info->imports[i].cconv ? info->imports[i].cconv : "?",
           info->imports[i].flags & 2 ? " (optional)" : "");
  }
  uint64_t rodata_bytes = 0;
  size_t external = 0;
  for (size_t i = 0; i < info->n_rodata; i++) {
    rodata_bytes += info->rodata[i].size;
    external += info->rodata[i].external;
  }
  printf("  rodata     %zu segment(s), %zu external, %llu bytes\n", info->n_rodata, external,
         (unsigned long long)rodata_bytes);
  for (size_t i = 0; i < info->n_executables; i++) {
    const kiln_vmfb_executable_info_t *e = &info->executables[i];
    printf("  executable rodata %u: %s (%s), %s, %zu kernel(s), %zu module(s) of %s, %llu bytes%s%s\n",
           e->rodata, e->format ? e->format : "unknown format", e->identifier,
           e->has_header                       ? "64-byte header"
           : strcmp(e->identifier, "ELF") == 0 ? "the ELF itself"
                                               : "NO executable header",
           e->n_kernels, e->n_modules, e->code_kind ? e->code_kind : "?", (unsigned long long)e->code_bytes,
           e->chip ? ", chip " : "", e->chip ? e->chip : "");
    for (size_t k = 0; k < e->n_kernels; k++) {
      if (e->block_dims) {
        printf("    %s  [%u,%u,%u]\n", e->kernels[k], e->block_dims[3 * k], e->block_dims[3 * k + 1],
               e->block_dims[3 * k + 2]);
      } else {
        printf("    %s\n", e->kernels[k]);
      }
    }
    if (e->problem) printf("    problem: %s\n", e->problem);
  }
  for (size_t i = 0; i < info->n_attrs; i++) {
    if (strncmp(info->attrs[i].key, "kiln.", 5) == 0) {
      printf("  %-10s %s\n", info->attrs[i].key + 5, *info->attrs[i].value ? info->attrs[i].value : "(none)");
    }
  }
  if (info->has_source) printf("  source     embedded (kiln/source.mlir.zst)\n");
}

static json_object *to_json(const char *path, const kiln_vmfb_info_t *info) {
  json_object *o = json_object_new_object();
  json_object_object_add(o, "path", json_object_new_string(path));
  json_object_object_add(o, "class", json_object_new_string(kiln_vmfb_class_name(info->cls)));
  json_object_object_add(o, "reason", json_object_new_string(info->reason ? info->reason : ""));
  json_object_object_add(o, "file_size", json_object_new_int64((int64_t)info->file_size));
  if (!info->name) return o;
  json_object_object_add(o, "layout", json_object_new_string(layout_name(info->layout)));
  json_object_object_add(o, "module", json_object_new_string(info->name));
  json_object_object_add(o, "module_version", json_object_new_int64(info->version));
  char bc[32];
  snprintf(bc, sizeof bc, "%u.%u", info->bytecode_version >> 16, info->bytecode_version & 0xFFFF);
  json_object_object_add(o, "bytecode_version", json_object_new_string(bc));
  json_object_object_add(o, "hal_version", json_object_new_int64(info->hal_version));
  json_object *deps = json_object_new_array();
  for (size_t i = 0; i < info->n_dependencies; i++) {
    json_object *d = json_object_new_object();
    json_object_object_add(d, "name", json_object_new_string(info->dependencies[i].name));
    json_object_object_add(d, "minimum_version",
                           json_object_new_int64(info->dependencies[i].minimum_version));
    json_object_object_add(d, "required", json_object_new_boolean(!(info->dependencies[i].flags & 2)));
    json_object_array_add(deps, d);
  }
  json_object_object_add(o, "dependencies", deps);
  json_object *imports = json_object_new_array();
  for (size_t i = 0; i < info->n_imports; i++) {
    json_object *m = json_object_new_object();
    json_object_object_add(m, "name", json_object_new_string(info->imports[i].full_name));
    json_object_object_add(m, "cconv",
                           json_object_new_string(info->imports[i].cconv ? info->imports[i].cconv : ""));
    json_object_object_add(m, "optional", json_object_new_boolean(info->imports[i].flags & 2));
    json_object_array_add(imports, m);
  }
  json_object_object_add(o, "imports", imports);
  json_object *exports = json_object_new_array();
  for (size_t i = 0; i < info->n_exports; i++) {
    json_object *m = json_object_new_object();
    json_object_object_add(m, "name", json_object_new_string(info->exports[i].name));
    json_object_object_add(m, "cconv",
                           json_object_new_string(info->exports[i].cconv ? info->exports[i].cconv : ""));
    json_object_array_add(exports, m);
  }
  json_object_object_add(o, "exports", exports);
  json_object_object_add(o, "functions", json_object_new_int64((int64_t)info->n_functions));
  json_object *rodata = json_object_new_array();
  for (size_t i = 0; i < info->n_rodata; i++) {
    json_object *r = json_object_new_object();
    json_object_object_add(r, "size", json_object_new_int64((int64_t)info->rodata[i].size));
    json_object_object_add(r, "external", json_object_new_boolean(info->rodata[i].external));
    json_object_array_add(rodata, r);
  }
  json_object_object_add(o, "rodata", rodata);
  json_object *exes = json_object_new_array();
  for (size_t i = 0; i < info->n_executables; i++) {
    const kiln_vmfb_executable_info_t *e = &info->executables[i];
    json_object *x = json_object_new_object();
    json_object_object_add(x, "rodata", json_object_new_int64(e->rodata));
    json_object_object_add(x, "identifier", json_object_new_string(e->identifier));
    json_object_object_add(x, "format", e->format ? json_object_new_string(e->format) : NULL);
    json_object_object_add(x, "header", json_object_new_boolean(e->has_header));
    json_object_object_add(x, "chip", e->chip ? json_object_new_string(e->chip) : NULL);
    json_object_object_add(x, "code", e->code_kind ? json_object_new_string(e->code_kind) : NULL);
    json_object_object_add(x, "code_bytes", json_object_new_int64((int64_t)e->code_bytes));
    json_object *kernels = json_object_new_array();
    for (size_t k = 0; k < e->n_kernels; k++) {
      json_object *kj = json_object_new_object();
      json_object_object_add(kj, "name", json_object_new_string(e->kernels[k]));
      if (e->block_dims) {
        json_object *bd = json_object_new_array();
        for (int d = 0; d < 3; d++)
          json_object_array_add(bd, json_object_new_int64(e->block_dims[3 * k + d]));
        json_object_object_add(kj, "block_dims", bd);
      }
      if (e->constant_counts) {
        json_object_object_add(kj, "constants", json_object_new_int64(e->constant_counts[k]));
      }
      json_object_array_add(kernels, kj);
    }
    json_object_object_add(x, "kernels", kernels);
    if (e->problem) json_object_object_add(x, "problem", json_object_new_string(e->problem));
    json_object_array_add(exes, x);
  }
  json_object_object_add(o, "executables", exes);
  json_object *prov = json_object_new_object();
  json_object *attrs = json_object_new_object();
  for (size_t i = 0; i < info->n_attrs; i++) {
    const char *k = info->attrs[i].key;
    if (strncmp(k, "kiln.", 5) == 0) {
      json_object_object_add(prov, k + 5, json_object_new_string(info->attrs[i].value));
    } else {
      json_object_object_add(attrs, k, json_object_new_string(info->attrs[i].value));
    }
  }
  json_object_object_add(o, "provenance", prov);
  json_object_object_add(o, "attrs", attrs);
  json_object_object_add(o, "embedded_source", json_object_new_boolean(info->has_source));
  return o;
}

int kiln_cli_vmfb_worst(int worst, kiln_vmfb_class_t cls) {
  int code = cls == KILN_VMFB_CLASS_CURRENT  ? KILN_EXIT_OK
             : cls == KILN_VMFB_CLASS_LEGACY ? KILN_EXIT_LEGACY
                                             : KILN_EXIT_INVALID;
  return code == KILN_EXIT_INVALID || (code == KILN_EXIT_LEGACY && worst == KILN_EXIT_OK) ? code : worst;
}

int kiln_cli_inspect(const kiln_cli_settings_t *settings, int argc, const char **argv) {
  if (argc < 1) {
    fprintf(stderr, "kiln: inspect needs at least one VMFB file (kiln inspect FILE...)\n");
    return KILN_EXIT_USAGE;
  }
  int worst = KILN_EXIT_OK;
  json_object *all = settings->json ? json_object_new_array() : NULL;
  for (int i = 0; i < argc; i++) {
    uint8_t *data = NULL;
    size_t len = 0;
    kiln_vmfb_info_t info;
    kiln_cli_vmfb_load(argv[i], &data, &len, &info);
    if (all) {
      json_object_array_add(all, to_json(argv[i], &info));
    } else {
      if (i) printf("\n");
      print_human(argv[i], &info);
    }
    worst = kiln_cli_vmfb_worst(worst, info.cls);
    kiln_vmfb_info_deinit(&info);
    kiln_free(data);
  }
  if (all) kiln_client_json_print(all);
  return worst;
}
