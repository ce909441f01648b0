/* Ownership helpers of the VM module description. */
#include "compiler/vmfb/vm.h"

#include <string.h>

#include "base/alloc.h"

void kiln_vmfb_attrs_add(kiln_vmfb_attr_t **attrs, size_t *n, const char *key, const char *value) {
  *attrs = kiln_realloc(*attrs, (*n + 1) * sizeof **attrs);
  (*attrs)[*n].key = kiln_strdup(key);
  (*attrs)[*n].value = kiln_strdup(value);
  (*n)++;
}

static void attrs_free(kiln_vmfb_attr_t *attrs, size_t n) {
  for (size_t i = 0; i < n; i++) {
    kiln_free(attrs[i].key);
    kiln_free(attrs[i].value);
  }
  kiln_free(attrs);
}

void kiln_vmfb_vm_module_deinit(kiln_vmfb_vm_module_t *module) {
  if (!module) return;
  kiln_free(module->name);
  for (size_t i = 0; i < module->n_types; i++) kiln_free(module->types[i]);
  kiln_free(module->types);
  for (size_t i = 0; i < module->n_imports; i++) {
    kiln_free(module->imports[i].full_name);
    kiln_free(module->imports[i].cconv);
  }
  kiln_free(module->imports);
  for (size_t i = 0; i < module->n_functions; i++) {
    kiln_vmfb_vm_function_t *f = &module->functions[i];
    kiln_free(f->name);
    kiln_free(f->export_name);
    kiln_free(f->cconv);
    attrs_free(f->attrs, f->n_attrs);
    kiln_free(f->bytecode);
  }
  kiln_free(module->functions);
  for (size_t i = 0; i < module->n_rodata; i++) {
    kiln_free(module->rodata[i].name);
    kiln_free(module->rodata[i].data);
  }
  kiln_free(module->rodata);
  attrs_free(module->attrs, module->n_attrs);
  memset(module, 0, sizeof *module);
}
