/* The host program generator: a plan becomes VM functions calling IREE's HAL.
 *
 * Module shape (what kiln_vmfb_host_program_build emits):
 *   types     i32, i64, then the ref types by name (iree-compile's order); the
 *             ordinals are the T_* constants below, so the table is fixed.
 *   imports   the hal.* functions the plan needs, in name order, with the
 *             calling conventions of IREE's HAL module (exports.inl) for the
 *             requested hal_version; the "hal" dependency is that version.
 *   globals   refs: 0 device, 1 allocator, 2 executable, then one !hal.buffer
 *             per CONSTANT plan buffer; bytes: an i64 function id per dispatched
 *             kernel (HAL 0.7), then an i32 "constants uploaded" flag per plan
 *             function that has constants.
 *   rodata    0 the executable (external), 1 its format string (both absent when
 *             no function dispatches anything: then no executable is created),
 *             then strings
 *             (kernel names, assert messages; deduplicated) and constant data
 *             (external when >= 4 KiB, as iree-compile splits it).
 *   functions the plan's functions in order (exported under their names), then
 *             __init (exported).
 *
 * An exported function's blocks:
 *   entry   load device/allocator/executable; per input: buffer_view.assert,
 *           buffer_view.buffer, buffer.assert; allocate transients; create the
 *           command buffer; wait = null; with constants: cond_br on the
 *           uploaded flag
 *   upload  (constants only) allocate each constant buffer, store it in its
 *           global, read its rodata into it (ex.file.from_memory +
 *           device.queue.read, chained by fences; wait = the last); br main
 *   main    load constant buffers from globals; record the steps (a barrier
 *           before every step after the first); finalize; fence.create;
 *           queue.execute (after `wait`); call.variadic.yieldable fence.await
 *           -> waited
 *   waited  cond_br status, failed, done
 *   failed  fail status "..."
 *   done    set the uploaded flag; buffer_view.create per result; return
 * Registers: refs for the arguments, the HAL objects, every plan buffer and
 * every result view live for the whole function; i32/i64 temporaries are scoped
 * per input, buffer, step and result (kiln_vmfb_bytecode_mark/release) with a
 * small per-scope cache of constants, so register use does not grow with the
 * number of steps.
 *
 * Invariant: every emitted function passes kiln_vmfb_bytecode_verify against the
 * module before the module is handed out.
 */
#include "compiler/vmfb/hostprog.h"

#include <inttypes.h>
#include <stdbool.h>
#include <stdio.h>
#include <string.h>

#include "base/alloc.h"
#include "base/buf.h"
#include "compiler/vmfb/bytecode.h"

/* ---- HAL constants (runtime/src/iree/hal/buffer.h, command_buffer.h) ---- */

enum {
  MEMORY_TYPE_HOST_VISIBLE = 1u << 1,
  MEMORY_TYPE_DEVICE_VISIBLE = 1u << 4,
  MEMORY_TYPE_DEVICE_LOCAL = (1u << 4) | (1u << 5),
  USAGE_TRANSFER_SOURCE = 1u << 0,
  USAGE_TRANSFER_TARGET = 1u << 1,
  USAGE_DISPATCH_STORAGE_READ = 1u << 10,
  USAGE_DISPATCH_STORAGE_WRITE = 1u << 11,
  /* MAPPING_SCOPED | MAPPING_ACCESS_RANDOM: IREE_HAL_BUFFER_USAGE_MAPPING. */
  USAGE_MAPPING = (1u << 24) | (1u << 27),
  /* TRANSFER | DISPATCH_STORAGE: IREE_HAL_BUFFER_USAGE_DEFAULT. */
  USAGE_DEFAULT = USAGE_TRANSFER_SOURCE | USAGE_TRANSFER_TARGET | USAGE_DISPATCH_STORAGE_READ |
                  USAGE_DISPATCH_STORAGE_WRITE,
  COMMAND_BUFFER_MODE_ONE_SHOT = 1u << 0,
  COMMAND_CATEGORY_ANY = (1u << 0) | (1u << 1), /* TRANSFER | DISPATCH */
  /* What iree-compile's stream barriers use: CommandRetire|Transfer|Dispatch to
   * CommandIssue|Transfer|Dispatch. */
  STAGE_SOURCE = (1u << 4) | (1u << 3) | (1u << 2),
  STAGE_TARGET = (1u << 0) | (1u << 3) | (1u << 2),
  ENCODING_DENSE_ROW_MAJOR = 1,
  MEMORY_ACCESS_READ = 1u << 0,
  EMBED_MAX_BYTES = 4 * 1024, /* larger rodata goes to its own zip entry */
  RODATA_ALIGNMENT = 16,      /* iree-compile's default rodata alignment */
  STATUS_NOT_FOUND = 5,
};
static const int64_t QUEUE_AFFINITY_ANY = -1;
static const int32_t TIMEOUT_INFINITE = -1; /* UINT32_MAX milliseconds */

/* ---- the type table ---- */

enum {
  T_I32,
  T_I64,
  T_ALLOCATOR,
  T_BUFFER,
  T_BUFFER_VIEW,
  T_COMMAND_BUFFER,
  T_DEVICE,
  T_EXECUTABLE,
  T_FENCE,
  T_VM_BUFFER,
  T_COUNT,
};
static const char *const TYPE_NAMES[T_COUNT] = {
    "i32",
    "i64",
    "!hal.allocator",
    "!hal.buffer",
    "!hal.buffer_view",
    "!hal.command_buffer",
    "!hal.device",
    "!hal.executable",
    "!hal.fence",
    "!vm.buffer",
};

/* ---- the imports ---- */

typedef enum import_e {
  I_ALLOCATOR_ALLOCATE,
  I_BUFFER_ASSERT,
  I_BUFFER_LOAD,
  I_BUFFER_STORE,
  I_BUFFER_VIEW_ASSERT,
  I_BUFFER_VIEW_BUFFER,
  I_BUFFER_VIEW_CREATE,
  I_BUFFER_VIEW_DIM,
  I_COMMAND_BUFFER_COPY_BUFFER,
  I_COMMAND_BUFFER_CREATE,
  I_COMMAND_BUFFER_DISPATCH,
  I_COMMAND_BUFFER_EXECUTION_BARRIER,
  I_COMMAND_BUFFER_FINALIZE,
  I_DEVICE_ALLOCATOR,
  I_DEVICE_QUEUE_EXECUTE,
  I_DEVICE_QUEUE_READ,
  I_DEVICES_GET,
  I_EX_FILE_FROM_MEMORY,
  I_EXECUTABLE_CREATE,
  I_EXECUTABLE_LOOKUP_FUNCTION,
  I_FENCE_AWAIT,
  I_FENCE_CREATE,
  I_COUNT,
} import_t;

/* Calling conventions of runtime/src/iree/modules/hal/exports.inl: identical in
 * HAL 0.6 and 0.7 except the dispatch (below) and lookup.function (0.7 only). */
static const struct {
  const char *name;
  const char *cconv;
} IMPORTS[I_COUNT] = {
    [I_ALLOCATOR_ALLOCATE] = {"hal.allocator.allocate", "0rIiiI_r"},
    [I_BUFFER_ASSERT] = {"hal.buffer.assert", "0rrrIii_v"},
    [I_BUFFER_LOAD] = {"hal.buffer.load", "0rIi_i"},
    [I_BUFFER_STORE] = {"hal.buffer.store", "0irIi_v"},
    [I_BUFFER_VIEW_ASSERT] = {"hal.buffer_view.assert", "0rriiCID_v"},
    [I_BUFFER_VIEW_BUFFER] = {"hal.buffer_view.buffer", "0r_r"},
    [I_BUFFER_VIEW_CREATE] = {"hal.buffer_view.create", "0rIIiiCID_r"},
    [I_BUFFER_VIEW_DIM] = {"hal.buffer_view.dim", "0ri_I"},
    [I_COMMAND_BUFFER_COPY_BUFFER] = {"hal.command_buffer.copy_buffer", "0riirIrIII_v"},
    [I_COMMAND_BUFFER_CREATE] = {"hal.command_buffer.create", "0riiIi_r"},
    [I_COMMAND_BUFFER_DISPATCH] = {"hal.command_buffer.dispatch", NULL},
    [I_COMMAND_BUFFER_EXECUTION_BARRIER] = {"hal.command_buffer.execution_barrier", "0riiI_v"},
    [I_COMMAND_BUFFER_FINALIZE] = {"hal.command_buffer.finalize", "0r_v"},
    [I_DEVICE_ALLOCATOR] = {"hal.device.allocator", "0r_r"},
    [I_DEVICE_QUEUE_EXECUTE] = {"hal.device.queue.execute", "0rIrrrI_v"},
    [I_DEVICE_QUEUE_READ] = {"hal.device.queue.read", "0rIrrrIrIII_v"},
    [I_DEVICES_GET] = {"hal.devices.get", "0i_r"},
    [I_EX_FILE_FROM_MEMORY] = {"hal.ex.file.from_memory", "0rIirIIi_r"},
    [I_EXECUTABLE_CREATE] = {"hal.executable.create", "0rIrrr_r"},
    [I_EXECUTABLE_LOOKUP_FUNCTION] = {"hal.executable.lookup.function", "0rr_I"},
    [I_FENCE_AWAIT] = {"hal.fence.await", "0iICrD_i"},
    [I_FENCE_CREATE] = {"hal.fence.create", "0rI_r"},
};
/* (command_buffer, executable, function id | entry point, workgroups x y z,
 * flags, constants..., (reserved, slot, buffer, offset, length)...) */
static const char DISPATCH_CCONV_0_7[] = "0rrIiiiICiDCiirIID_v";
static const char DISPATCH_CCONV_0_6[] = "0rriiiiICiDCiirIID_v";
static const uint32_t IMPORT_FLAG_REQUIRED = 1; /* iree.vm.ImportFlagBits.REQUIRED */

/* Module globals. */
enum { G_DEVICE, G_ALLOCATOR, G_EXECUTABLE, G_FIXED_COUNT };

/* ---- generator state ---- */

typedef struct fn_info_s {
  uint32_t const_global; /* ref global of the first CONSTANT buffer */
  uint32_t ready_offset; /* byte offset of the uploaded flag (with constants) */
  uint32_t *usage;       /* per plan buffer: the HAL usage its steps need */
  uint32_t *rodata;      /* per plan buffer: the rodata of CONSTANT buffers */
  size_t n_constants;
  bool has_branches; /* BRANCH steps: a host-visible staging buffer */
  bool has_args;     /* ARGS buffers: hal.buffer.store */
} fn_info_t;

typedef struct gen_s {
  const kiln_vmfb_plan_t *plan;
  const kiln_vmfb_host_executable_t *exe;
  uint32_t hal_version;
  kiln_vmfb_vm_module_t *m;
  int32_t import_ordinal[I_COUNT]; /* -1: not imported */
  uint32_t *kernel_offset;         /* per kernel: function id global, UINT32_MAX unused */
  uint32_t *kernel_rodata;         /* per kernel: its name's rodata */
  fn_info_t *fns;
  uint32_t rodata_exe, rodata_format;
  uint32_t var_global;  /* ref global of the first module variable */
  uint32_t *var_ready;  /* per variable: byte offset of its "created" flag */
  uint32_t *var_rodata; /* per variable: its initial bytes */
} gen_t;

/* One function being emitted: the assembler plus a scoped cache of constants. */
typedef struct konst_s {
  kiln_vmfb_reg_kind_t kind;
  int64_t value;
  kiln_vmfb_reg_t reg;
  uint32_t block; /* a constant is reused only in the block that set it */
} konst_t;

typedef struct emit_s {
  gen_t *g;
  kiln_vmfb_bytecode_t *bc;
  kiln_vmfb_reg_t *ex; /* the function's expressions: ex[id - 1], i64 */
  konst_t *konsts;
  size_t n_konsts;
  uint32_t block; /* serial of the current block */
} emit_t;

typedef struct scope_s {
  kiln_vmfb_bytecode_mark_t mark;
  size_t n_konsts;
} scope_t;

static scope_t scope_begin(emit_t *e) {
  return (scope_t){.mark = kiln_vmfb_bytecode_mark(e->bc), .n_konsts = e->n_konsts};
}

static void scope_end(emit_t *e, scope_t s) {
  kiln_vmfb_bytecode_release(e->bc, s.mark);
  e->n_konsts = s.n_konsts;
}

static void begin(emit_t *e, kiln_vmfb_block_t block) {
  kiln_vmfb_bytecode_block_begin(e->bc, block);
  e->block++;
}

static kiln_vmfb_reg_t konst(emit_t *e, kiln_vmfb_reg_kind_t kind, int64_t value) {
  for (size_t i = 0; i < e->n_konsts; i++) {
    const konst_t *k = &e->konsts[i];
    if (k->kind == kind && k->value == value && k->block == e->block) return k->reg;
  }
  kiln_vmfb_reg_t reg;
  if (kind == KILN_VMFB_REG_I32) {
    reg = kiln_vmfb_bytecode_i32(e->bc);
    kiln_vmfb_bytecode_const_i32(e->bc, (int32_t)value, reg);
  } else {
    reg = kiln_vmfb_bytecode_i64(e->bc);
    kiln_vmfb_bytecode_const_i64(e->bc, value, reg);
  }
  e->konsts = kiln_realloc(e->konsts, (e->n_konsts + 1) * sizeof *e->konsts);
  e->konsts[e->n_konsts++] = (konst_t){.kind = kind, .value = value, .reg = reg, .block = e->block};
  return reg;
}

static kiln_vmfb_reg_t ci32(emit_t *e, int32_t v) { return konst(e, KILN_VMFB_REG_I32, v); }
static kiln_vmfb_reg_t ci64(emit_t *e, int64_t v) { return konst(e, KILN_VMFB_REG_I64, v); }

/* An i64 size: expression `expr`, or the static `value` when expr is 0. */
static kiln_vmfb_reg_t size_i64(emit_t *e, uint32_t expr, int64_t value) {
  return expr ? e->ex[expr - 1] : ci64(e, value);
}

/* An i32: expression `expr` truncated, or the static `value`. */
static kiln_vmfb_reg_t size_i32(emit_t *e, uint32_t expr, int32_t value) {
  if (!expr) return ci32(e, value);
  kiln_vmfb_reg_t r = kiln_vmfb_bytecode_i32(e->bc);
  kiln_vmfb_bytecode_trunc_i64_i32(e->bc, e->ex[expr - 1], r);
  return r;
}

/* expression `expr` != 0, as an i32 0/1. */
static kiln_vmfb_reg_t nonzero(emit_t *e, uint32_t expr) {
  kiln_vmfb_reg_t r = kiln_vmfb_bytecode_i32(e->bc);
  kiln_vmfb_bytecode_i64_binary(e->bc, KILN_VMFB_I64_CMP_NE, e->ex[expr - 1], ci64(e, 0), r);
  return r;
}

static uint32_t import_callee(emit_t *e, import_t id) {
  /* Imports are selected before emission; a miss is a generator bug, which the
   * self-verification reports as an out-of-range import. */
  int32_t ordinal = e->g->import_ordinal[id];
  return KILN_VMFB_IMPORT(ordinal < 0 ? 0x7FFFFFFF : (uint32_t)ordinal);
}

static const char *import_cconv(const gen_t *g, import_t id) {
  if (id == I_COMMAND_BUFFER_DISPATCH) {
    return g->hal_version >= KILN_VMFB_HAL_VERSION_0_7 ? DISPATCH_CCONV_0_7 : DISPATCH_CCONV_0_6;
  }
  return IMPORTS[id].cconv;
}

static void call(emit_t *e, import_t id, const kiln_vmfb_reg_t *args, size_t n_args,
                 const kiln_vmfb_reg_t *results, size_t n_results) {
  kiln_vmfb_bytecode_call(e->bc, import_callee(e, id), import_cconv(e->g, id), args, n_args, results,
                          n_results);
}

static void call_variadic(emit_t *e, import_t id, const uint16_t *spans, size_t n_spans,
                          const kiln_vmfb_reg_t *args, size_t n_args, const kiln_vmfb_reg_t *results,
                          size_t n_results) {
  kiln_vmfb_bytecode_call_variadic(e->bc, import_callee(e, id), import_cconv(e->g, id), spans, n_spans, args,
                                   n_args, results, n_results);
}

/* ---- module pieces ---- */

/* Adds a rodata segment (a copy of data) and returns its ordinal; identical small
 * embedded segments are shared. */
static uint32_t rodata_add(gen_t *g, const char *name, const void *data, size_t len, bool external) {
  kiln_vmfb_vm_module_t *m = g->m;
  if (!external) {
    for (size_t i = 0; i < m->n_rodata; i++) {
      if (!m->rodata[i].external && m->rodata[i].len == len &&
          (len == 0 || memcmp(m->rodata[i].data, data, len) == 0)) {
        return (uint32_t)i;
      }
    }
  }
  m->rodata = kiln_realloc(m->rodata, (m->n_rodata + 1) * sizeof *m->rodata);
  m->rodata[m->n_rodata] = (kiln_vmfb_vm_rodata_t){
      .name = kiln_strdup(name),
      .data = kiln_memdup(len ? data : "", len ? len : 1),
      .len = len,
      .alignment = RODATA_ALIGNMENT,
      .external = external,
  };
  return (uint32_t)m->n_rodata++;
}

static uint32_t rodata_string(gen_t *g, const char *s) { return rodata_add(g, NULL, s, strlen(s), false); }

/* "<a>_<b><ext>" with every character of a and b outside [A-Za-z0-9] made '_',
 * like iree-compile's rodata file names ("module_cuda_nvptx_fb.fb"). */
static char *entry_name(const char *a, const char *b, const char *ext) {
  kiln_buf_t buf;
  kiln_buf_init(&buf);
  kiln_buf_appendf(&buf, "%s_%s", a, b);
  for (size_t i = 0; i < buf.len; i++) {
    char ch = buf.data[i];
    bool ok = (ch >= 'a' && ch <= 'z') || (ch >= 'A' && ch <= 'Z') || (ch >= '0' && ch <= '9');
    if (!ok) buf.data[i] = '_';
  }
  kiln_buf_append_str(&buf, ext);
  return kiln_buf_take(&buf);
}

static const char *element_name(uint32_t element_type) { return kiln_vmfb_element_name(element_type); }

static bool has_dynamic_dims(const kiln_vmfb_tensor_type_t *t) {
  for (uint32_t d = 0; d < t->rank && d < KILN_VMFB_MAX_RANK; d++) {
    if (t->dims[d] == -1) return true;
  }
  return false;
}

/* Validates a tensor type and returns its byte size (0 when a dimension is
 * dynamic, which `dynamic_ok` allows). */
static KILN_MUST_USE kiln_status_t tensor_bytes_of(const kiln_vmfb_function_t *fn, const char *what,
                                                   size_t index, const kiln_vmfb_tensor_type_t *t,
                                                   bool dynamic_ok, uint64_t *out_bytes) {
  if (!element_name(t->element_type)) {
    return KILN_STATUS(KILN_STATUS_UNIMPLEMENTED,
                       "host program: function %s %s %zu has element type 0x%08" PRIX32
                       " (use a KILN_VMFB_ELEMENT_* type)",
                       fn->name, what, index, t->element_type);
  }
  if (t->rank > KILN_VMFB_MAX_RANK) {
    return KILN_STATUS(KILN_STATUS_INVALID_ARGUMENT,
                       "host program: function %s %s %zu has rank %" PRIu32 " (max %d)", fn->name, what,
                       index, t->rank, KILN_VMFB_MAX_RANK);
  }
  uint64_t bytes = 0;
  if (dynamic_ok && has_dynamic_dims(t)) {
    kiln_vmfb_tensor_type_t fixed = *t;
    for (uint32_t d = 0; d < t->rank; d++) fixed.dims[d] = t->dims[d] == -1 ? 1 : t->dims[d];
    if (!kiln_vmfb_tensor_type_bytes(&fixed, &bytes)) bytes = UINT64_MAX;
    *out_bytes = 0;
    if (bytes != UINT64_MAX) return NULL;
  }
  if (!kiln_vmfb_tensor_type_bytes(t, &bytes)) {
    return KILN_STATUS(KILN_STATUS_INVALID_ARGUMENT,
                       "host program: function %s %s %zu has a dimension < 0 or is 2^63 bytes "
                       "or more (dimensions must be static and >= 0)",
                       fn->name, what, index);
  }
  *out_bytes = bytes;
  return NULL;
}

static void tensor_text(kiln_buf_t *buf, const kiln_vmfb_tensor_type_t *t) {
  kiln_buf_append_str(buf, "tensor<");
  for (uint32_t d = 0; d < t->rank; d++) {
    if (t->dims[d] < 0) {
      kiln_buf_append_str(buf, "?x");
    } else {
      kiln_buf_appendf(buf, "%" PRId64 "x", t->dims[d]);
    }
  }
  kiln_buf_appendf(buf, "%s>", element_name(t->element_type));
}

/* IREE's reflection: what iree-compile's WrapEntryPoints writes for a sync
 * function whose arguments and results carry no names. */
static char *declaration(const kiln_vmfb_function_t *fn) {
  kiln_buf_t buf;
  kiln_buf_init(&buf);
  kiln_buf_appendf(&buf, "sync func @%s(", fn->name);
  for (size_t i = 0; i < fn->n_inputs; i++) {
    kiln_buf_appendf(&buf, "%s%%input%zu: ", i ? ", " : "", i);
    tensor_text(&buf, &fn->inputs[i]);
  }
  kiln_buf_append_str(&buf, ") -> (");
  for (size_t i = 0; i < fn->n_results; i++) {
    kiln_buf_appendf(&buf, "%s%%output%zu: ", i ? ", " : "", i);
    tensor_text(&buf, &fn->results[i].type);
  }
  kiln_buf_append_str(&buf, ")");
  return kiln_buf_take(&buf);
}

static bool range_ok(uint64_t offset, uint64_t length, uint64_t size) {
  return offset <= size && length <= size - offset;
}

static bool name_ok(const char *name) {
  if (!name || !*name || strncmp(name, "__", 2) == 0) return false;
  for (const char *p = name; *p; p++) {
    char ch = *p;
    bool ok = (ch >= 'a' && ch <= 'z') || (ch >= 'A' && ch <= 'Z') || (ch >= '0' && ch <= '9') || ch == '_' ||
              ch == '.' || ch == '$' || ch == '-';
    if (!ok) return false;
  }
  return true;
}

static KILN_MUST_USE kiln_status_t bad_expr(const kiln_vmfb_function_t *fn, const char *what, size_t index) {
  return KILN_STATUS(KILN_STATUS_INVALID_ARGUMENT,
                     "host program: function %s %s %zu names no expression of the function's %zu", fn->name,
                     what, index, fn->n_exprs);
}

/* Each expression's operands come before it; input dimensions exist. */
static KILN_MUST_USE kiln_status_t check_exprs(const kiln_vmfb_function_t *fn) {
  if (fn->n_exprs > KILN_VMFB_MAX_EXPRS || (fn->n_exprs && !fn->exprs)) {
    return KILN_STATUS(KILN_STATUS_RESOURCE_EXHAUSTED,
                       "host program: function %s computes %zu sizes at run time (at most %u)", fn->name,
                       fn->n_exprs, KILN_VMFB_MAX_EXPRS);
  }
  for (size_t i = 0; i < fn->n_exprs; i++) {
    const kiln_vmfb_expr_t *x = &fn->exprs[i];
    uint32_t id = (uint32_t)i + 1;
    bool ok;
    switch (x->kind) {
      case KILN_VMFB_EXPR_CONST: ok = true; break;
      case KILN_VMFB_EXPR_INPUT_DIM: ok = x->a < fn->n_inputs && x->b < fn->inputs[x->a].rank; break;
      case KILN_VMFB_EXPR_SELECT: ok = x->a && x->a < id && x->b && x->b < id && x->c && x->c < id; break;
      default:
        ok = x->kind >= KILN_VMFB_EXPR_ADD && x->kind <= KILN_VMFB_EXPR_LT_U && x->a && x->a < id && x->b &&
             x->b < id;
        break;
    }
    if (!ok) {
      return KILN_STATUS(KILN_STATUS_INVALID_ARGUMENT,
                         "host program: function %s expression %u is malformed (kind %d; operands must "
                         "be earlier expressions, dimensions must exist)",
                         fn->name, id, (int)x->kind);
    }
  }
  return NULL;
}

/* Checks one plan function and works out the usage each buffer needs. */
static KILN_MUST_USE kiln_status_t check_function(gen_t *g, size_t f) {
  const kiln_vmfb_function_t *fn = &g->plan->functions[f];
  fn_info_t *info = &g->fns[f];
  if (!name_ok(fn->name)) {
    return KILN_STATUS(KILN_STATUS_INVALID_ARGUMENT,
                       "host program: function %zu name \"%s\" is not usable as an export (use "
                       "[A-Za-z0-9_.$-], not starting with \"__\")",
                       f, fn->name ? fn->name : "(null)");
  }
  for (size_t k = 0; k < f; k++) {
    if (strcmp(g->plan->functions[k].name, fn->name) == 0) {
      return KILN_STATUS(KILN_STATUS_INVALID_ARGUMENT,
                         "host program: two functions are named %s; export names must be unique", fn->name);
    }
  }
  uint64_t bytes;
  for (size_t i = 0; i < fn->n_inputs; i++) {
    KILN_RETURN_IF_ERROR(tensor_bytes_of(fn, "input", i, &fn->inputs[i], true, &bytes));
  }
  KILN_RETURN_IF_ERROR(check_exprs(fn));
  info->usage = kiln_calloc(fn->n_buffers ? fn->n_buffers : 1, sizeof *info->usage);
  info->rodata = kiln_calloc(fn->n_buffers ? fn->n_buffers : 1, sizeof *info->rodata);
  for (size_t b = 0; b < fn->n_buffers; b++) {
    const kiln_vmfb_buffer_t *buf = &fn->buffers[b];
    switch (buf->kind) {
      case KILN_VMFB_BUFFER_INPUT:
        if (buf->input >= fn->n_inputs) {
          return KILN_STATUS(KILN_STATUS_INVALID_ARGUMENT,
                             "host program: function %s buffer %zu is input %" PRIu32
                             " of a function taking %zu",
                             fn->name, b, buf->input, fn->n_inputs);
        }
        KILN_RETURN_IF_ERROR(tensor_bytes_of(fn, "input", buf->input, &fn->inputs[buf->input], true, &bytes));
        if (has_dynamic_dims(&fn->inputs[buf->input]) != (buf->size_expr != 0)) {
          return KILN_STATUS(KILN_STATUS_INVALID_ARGUMENT,
                             "host program: function %s buffer %zu: input %" PRIu32
                             " has dynamic dimensions exactly when its buffer has a size expression",
                             fn->name, b, buf->input);
        }
        if (!buf->size_expr && buf->size_bytes > bytes) {
          return KILN_STATUS(KILN_STATUS_INVALID_ARGUMENT,
                             "host program: function %s buffer %zu claims %" PRIu64 " bytes of input %" PRIu32
                             ", which has %" PRIu64,
                             fn->name, b, buf->size_bytes, buf->input, bytes);
        }
        break;
      case KILN_VMFB_BUFFER_CONSTANT:
        if (!buf->data && buf->size_bytes) {
          return KILN_STATUS(KILN_STATUS_INVALID_ARGUMENT,
                             "host program: function %s constant buffer %zu has no data", fn->name, b);
        }
        if (buf->size_bytes > (uint64_t)INT64_MAX) {
          return KILN_STATUS(KILN_STATUS_INVALID_ARGUMENT,
                             "host program: function %s constant buffer %zu is too large", fn->name, b);
        }
        info->n_constants++;
        break;
      case KILN_VMFB_BUFFER_TRANSIENT:
        if (buf->size_bytes > (uint64_t)INT64_MAX) {
          return KILN_STATUS(KILN_STATUS_INVALID_ARGUMENT,
                             "host program: function %s transient buffer %zu is too large", fn->name, b);
        }
        break;
      case KILN_VMFB_BUFFER_ARGS:
        if (!buf->n_words || buf->n_words > 0xFFFF || (!buf->words) || buf->size_bytes != 4 * buf->n_words) {
          return KILN_STATUS(KILN_STATUS_INVALID_ARGUMENT,
                             "host program: function %s argument buffer %zu needs 1..65535 words, "
                             "4 bytes each",
                             fn->name, b);
        }
        for (size_t w = 0; w < buf->n_words; w++) {
          if (buf->words[w] > fn->n_exprs) return bad_expr(fn, "argument buffer word", b);
        }
        info->has_args = true;
        break;
      case KILN_VMFB_BUFFER_VARIABLE:
        if (buf->variable >= g->plan->n_variables || !g->plan->variables[buf->variable].name ||
            (!g->plan->variables[buf->variable].data && g->plan->variables[buf->variable].size_bytes) ||
            buf->size_bytes != g->plan->variables[buf->variable].size_bytes) {
          return KILN_STATUS(KILN_STATUS_INVALID_ARGUMENT,
                             "host program: function %s buffer %zu is variable %" PRIu32
                             " of %zu, or not its size",
                             fn->name, b, buf->variable, g->plan->n_variables);
        }
        break;
      case KILN_VMFB_BUFFER_SELECT:
        if (buf->select_a >= b || buf->select_b >= b || !buf->select_cond || buf->select_cond > fn->n_exprs ||
            !buf->size_expr) {
          return KILN_STATUS(KILN_STATUS_INVALID_ARGUMENT,
                             "host program: function %s buffer %zu selects between buffers that do "
                             "not come before it, or lacks its condition or size",
                             fn->name, b);
        }
        break;
      default:
        return KILN_STATUS(KILN_STATUS_INVALID_ARGUMENT,
                           "host program: function %s buffer %zu has unknown kind %d", fn->name, b,
                           (int)buf->kind);
    }
    if (buf->size_expr > fn->n_exprs) return bad_expr(fn, "buffer size", b);
    if (buf->size_expr && buf->kind == KILN_VMFB_BUFFER_CONSTANT) return bad_expr(fn, "constant buffer", b);
  }
  for (size_t s = 0; s < fn->n_steps; s++) {
    const kiln_vmfb_step_t *step = &fn->steps[s];
    if (step->kind == KILN_VMFB_STEP_DISPATCH) {
      if (step->kernel >= g->exe->n_kernels || !g->exe->kernels[step->kernel] ||
          !*g->exe->kernels[step->kernel]) {
        return KILN_STATUS(KILN_STATUS_INVALID_ARGUMENT,
                           "host program: function %s step %zu dispatches kernel %" PRIu32
                           " but the executable names %zu kernels",
                           fn->name, s, step->kernel, g->exe->n_kernels);
      }
      if (step->n_constants > 0xFFFF || step->n_bindings > 0xFFFF ||
          (step->n_constants && !step->constants) || (step->n_bindings && !step->bindings)) {
        return KILN_STATUS(KILN_STATUS_INVALID_ARGUMENT,
                           "host program: function %s step %zu has %zu constants and %zu "
                           "bindings (at most 65535 each, with their arrays)",
                           fn->name, s, step->n_constants, step->n_bindings);
      }
      for (uint32_t d = 0; d < 3; d++) {
        if (step->workgroup_exprs[d] > fn->n_exprs) return bad_expr(fn, "workgroup count of step", s);
        if (step->workgroup_exprs[d]) continue;
        if (step->workgroups[d] > (uint32_t)INT32_MAX) {
          return KILN_STATUS(KILN_STATUS_INVALID_ARGUMENT,
                             "host program: function %s step %zu has a workgroup count of %" PRIu32, fn->name,
                             s, step->workgroups[d]);
        }
      }
      for (size_t i = 0; i < step->n_bindings; i++) {
        const kiln_vmfb_binding_t *bd = &step->bindings[i];
        if (bd->length_expr > fn->n_exprs) return bad_expr(fn, "binding length of step", s);
        bool dynamic = bd->buffer < fn->n_buffers && (bd->length_expr || fn->buffers[bd->buffer].size_expr);
        if (bd->buffer >= fn->n_buffers ||
            (!dynamic && !range_ok(bd->offset, bd->length, fn->buffers[bd->buffer].size_bytes))) {
          return KILN_STATUS(KILN_STATUS_INVALID_ARGUMENT,
                             "host program: function %s step %zu binding %zu is bytes [%" PRIu64 ", +%" PRIu64
                             ") of buffer %" PRIu32 ", outside it",
                             fn->name, s, i, bd->offset, bd->length, bd->buffer);
        }
        info->usage[bd->buffer] |=
            USAGE_DISPATCH_STORAGE_READ | (bd->read_only ? 0 : USAGE_DISPATCH_STORAGE_WRITE);
      }
      if (g->kernel_offset[step->kernel] == UINT32_MAX) g->kernel_offset[step->kernel] = 0;
    } else if (step->kind == KILN_VMFB_STEP_COPY) {
      if (step->length_expr > fn->n_exprs) return bad_expr(fn, "copy length of step", s);
      bool ok =
          step->src < fn->n_buffers && step->dst < fn->n_buffers &&
          (step->length_expr ||
           (step->length > 0 && range_ok(step->src_offset, step->length, fn->buffers[step->src].size_bytes) &&
            range_ok(step->dst_offset, step->length, fn->buffers[step->dst].size_bytes)));
      if (!ok) {
        return KILN_STATUS(KILN_STATUS_INVALID_ARGUMENT,
                           "host program: function %s step %zu copies %" PRIu64 " bytes from buffer %" PRIu32
                           "+%" PRIu64 " to buffer %" PRIu32 "+%" PRIu64 ", outside them (or nothing)",
                           fn->name, s, step->length, step->src, step->src_offset, step->dst,
                           step->dst_offset);
      }
      if (step->src == step->dst && step->src_offset < step->dst_offset + step->length &&
          step->dst_offset < step->src_offset + step->length) {
        return KILN_STATUS(KILN_STATUS_INVALID_ARGUMENT,
                           "host program: function %s step %zu copies between overlapping "
                           "ranges of buffer %" PRIu32 " (HAL copies must be disjoint)",
                           fn->name, s, step->src);
      }
      info->usage[step->src] |= USAGE_TRANSFER_SOURCE;
      info->usage[step->dst] |= USAGE_TRANSFER_TARGET;
    } else if (step->kind == KILN_VMFB_STEP_BRANCH || step->kind == KILN_VMFB_STEP_JUMP) {
      if (step->target > fn->n_steps) {
        return KILN_STATUS(KILN_STATUS_INVALID_ARGUMENT,
                           "host program: function %s step %zu continues at step %" PRIu32 " of %zu",
                           fn->name, s, step->target, fn->n_steps);
      }
      if (step->kind == KILN_VMFB_STEP_BRANCH && step->cond_expr) {
        if (step->cond_expr > fn->n_exprs) return bad_expr(fn, "condition of step", s);
      } else if (step->kind == KILN_VMFB_STEP_BRANCH) {
        if (step->src >= fn->n_buffers || step->length < 1 || step->length > KILN_VMFB_BRANCH_MAX_BYTES ||
            !range_ok(step->src_offset, step->length, fn->buffers[step->src].size_bytes)) {
          return KILN_STATUS(KILN_STATUS_INVALID_ARGUMENT,
                             "host program: function %s step %zu branches on %" PRIu64
                             " bytes at buffer %" PRIu32 "+%" PRIu64 ", outside it (or not 1..%u bytes)",
                             fn->name, s, step->length, step->src, step->src_offset,
                             KILN_VMFB_BRANCH_MAX_BYTES);
        }
        info->usage[step->src] |= USAGE_TRANSFER_SOURCE;
        info->has_branches = true;
      }
    } else {
      return KILN_STATUS(KILN_STATUS_INVALID_ARGUMENT,
                         "host program: function %s step %zu has unknown kind %d", fn->name, s,
                         (int)step->kind);
    }
  }
  for (size_t r = 0; r < fn->n_results; r++) {
    const kiln_vmfb_result_t *res = &fn->results[r];
    KILN_RETURN_IF_ERROR(tensor_bytes_of(fn, "result", r, &res->type, true, &bytes));
    bool dynamic = has_dynamic_dims(&res->type);
    if (dynamic) {
      if (!res->size_expr || res->size_expr > fn->n_exprs) return bad_expr(fn, "size of result", r);
      for (uint32_t d = 0; d < res->type.rank; d++) {
        if (res->type.dims[d] == -1 && (!res->dim_exprs[d] || res->dim_exprs[d] > fn->n_exprs)) {
          return bad_expr(fn, "dimension of result", r);
        }
      }
    }
    if (res->buffer >= fn->n_buffers ||
        (!dynamic && !fn->buffers[res->buffer].size_expr &&
         !range_ok(res->offset, bytes, fn->buffers[res->buffer].size_bytes))) {
      return KILN_STATUS(KILN_STATUS_INVALID_ARGUMENT,
                         "host program: function %s result %zu is %" PRIu64 " bytes at +%" PRIu64
                         " of buffer %" PRIu32 ", outside it",
                         fn->name, r, bytes, res->offset, res->buffer);
    }
  }
  /* A SELECT buffer is one of two others: they need its usage. */
  for (size_t b = fn->n_buffers; b > 0; b--) {
    const kiln_vmfb_buffer_t *buf = &fn->buffers[b - 1];
    if (buf->kind != KILN_VMFB_BUFFER_SELECT) continue;
    info->usage[buf->select_a] |= info->usage[b - 1];
    info->usage[buf->select_b] |= info->usage[b - 1];
  }
  return NULL;
}

/* ---- the exported functions ---- */

static void emit_input_asserts(emit_t *e, const kiln_vmfb_function_t *fn, const fn_info_t *info,
                               const kiln_vmfb_reg_t *buffers, kiln_vmfb_reg_t allocator) {
  for (size_t i = 0; i < fn->n_inputs; i++) {
    scope_t s = scope_begin(e);
    const kiln_vmfb_tensor_type_t *t = &fn->inputs[i];
    char text[32];
    snprintf(text, sizeof text, "input%zu", i);
    kiln_vmfb_reg_t message = kiln_vmfb_bytecode_ref(e->bc);
    kiln_vmfb_bytecode_const_ref_rodata(e->bc, rodata_string(e->g, text), message);
    kiln_vmfb_reg_t args[2 + 2 + KILN_VMFB_MAX_RANK];
    size_t n = 0;
    args[n++] = kiln_vmfb_bytecode_arg(e->bc, i);
    args[n++] = message;
    args[n++] = ci32(e, (int32_t)t->element_type);
    args[n++] = ci32(e, ENCODING_DENSE_ROW_MAJOR);
    for (uint32_t d = 0; d < t->rank && d < KILN_VMFB_MAX_RANK; d++) {
      if (t->dims[d] >= 0) {
        args[n++] = ci64(e, t->dims[d]);
        continue;
      }
      /* A dynamic dimension: whatever the view holds (the assert checks the rest). */
      kiln_vmfb_reg_t dim = kiln_vmfb_bytecode_i64(e->bc);
      kiln_vmfb_reg_t dargs[2] = {args[0], ci32(e, (int32_t)d)};
      call(e, I_BUFFER_VIEW_DIM, dargs, 2, &dim, 1);
      args[n++] = dim;
    }
    uint16_t rank = (uint16_t)t->rank;
    call_variadic(e, I_BUFFER_VIEW_ASSERT, &rank, 1, args, n, NULL, 0);
    for (size_t b = 0; b < fn->n_buffers; b++) {
      if (fn->buffers[b].kind != KILN_VMFB_BUFFER_INPUT || fn->buffers[b].input != i) continue;
      call(e, I_BUFFER_VIEW_BUFFER, &args[0], 1, &buffers[b], 1);
      uint64_t need = fn->buffers[b].size_bytes;
      kiln_vmfb_reg_t bargs[6] = {buffers[b],
                                  message,
                                  allocator,
                                  size_i64(e, fn->buffers[b].size_expr, (int64_t)need),
                                  ci32(e, MEMORY_TYPE_DEVICE_VISIBLE),
                                  ci32(e, (int32_t)info->usage[b])};
      call(e, I_BUFFER_ASSERT, bargs, 6, NULL, 0);
    }
    scope_end(e, s);
  }
}

/* A buffer of `size` bytes (a register), of memory `type` for `usage`. */
static void emit_allocate_sized(emit_t *e, kiln_vmfb_reg_t allocator, uint32_t type, uint32_t usage,
                                kiln_vmfb_reg_t size, kiln_vmfb_reg_t result) {
  scope_t s = scope_begin(e);
  kiln_vmfb_reg_t args[5] = {allocator, ci64(e, QUEUE_AFFINITY_ANY), ci32(e, (int32_t)type),
                             ci32(e, (int32_t)usage), size};
  call(e, I_ALLOCATOR_ALLOCATE, args, 5, &result, 1);
  scope_end(e, s);
}

static void emit_allocate(emit_t *e, kiln_vmfb_reg_t allocator, uint64_t size, kiln_vmfb_reg_t result) {
  scope_t s = scope_begin(e);
  /* At least one byte: a zero-sized result still needs a buffer to view. */
  emit_allocate_sized(e, allocator, MEMORY_TYPE_DEVICE_LOCAL, USAGE_DEFAULT,
                      ci64(e, (int64_t)(size ? size : 1)), result);
  scope_end(e, s);
}

static void emit_barrier(emit_t *e, kiln_vmfb_reg_t cmd) {
  scope_t s = scope_begin(e);
  kiln_vmfb_reg_t args[4] = {cmd, ci32(e, STAGE_SOURCE), ci32(e, STAGE_TARGET), ci64(e, 0)};
  call(e, I_COMMAND_BUFFER_EXECUTION_BARRIER, args, 4, NULL, 0);
  scope_end(e, s);
}

/* Uploads the CONSTANT buffers: each is allocated, published in its global and
 * filled by a queue-ordered read from its rodata (hal.ex.file.from_memory +
 * hal.device.queue.read, iree-compile's path for constants it cannot map; it has
 * no size limit, unlike command-buffer updates, which some drivers cap at 2 KiB).
 * The reads are chained through fences; `wait` ends up holding the last one,
 * which the command buffer's submission waits on. */
/* One buffer of `size` bytes from rodata `rodata`, published in ref global
 * `global`; the read waits on `wait`, which then holds the read's fence. */
static void emit_upload_one(emit_t *e, kiln_vmfb_reg_t device, kiln_vmfb_reg_t allocator,
                            kiln_vmfb_reg_t wait, uint32_t rodata, uint64_t size, uint32_t global) {
  scope_t s = scope_begin(e);
  kiln_vmfb_reg_t target = kiln_vmfb_bytecode_ref(e->bc);
  emit_allocate(e, allocator, size, target);
  kiln_vmfb_bytecode_global_store_ref(e->bc, global, T_BUFFER, target);
  if (size) {
    kiln_vmfb_reg_t source = kiln_vmfb_bytecode_ref(e->bc);
    kiln_vmfb_reg_t file = kiln_vmfb_bytecode_ref(e->bc);
    kiln_vmfb_reg_t signal = kiln_vmfb_bytecode_ref(e->bc);
    kiln_vmfb_reg_t length = ci64(e, (int64_t)size);
    kiln_vmfb_bytecode_const_ref_rodata(e->bc, rodata, source);
    kiln_vmfb_reg_t margs[7] = {
        device,    ci64(e, QUEUE_AFFINITY_ANY), ci32(e, MEMORY_ACCESS_READ), source, ci64(e, 0), length,
        ci32(e, 0)};
    call(e, I_EX_FILE_FROM_MEMORY, margs, 7, &file, 1);
    kiln_vmfb_reg_t fargs[2] = {device, ci64(e, 0)};
    call(e, I_FENCE_CREATE, fargs, 2, &signal, 1);
    kiln_vmfb_reg_t rargs[10] = {
        device,    ci64(e, QUEUE_AFFINITY_ANY), wait, signal, file, ci64(e, 0), target, ci64(e, 0), length,
        ci64(e, 0)};
    call(e, I_DEVICE_QUEUE_READ, rargs, 10, NULL, 0);
    /* The next read (or the submission) waits on this one. */
    kiln_vmfb_bytecode_assign_ref(e->bc, signal, wait);
  }
  scope_end(e, s);
}

static void emit_upload(emit_t *e, const kiln_vmfb_function_t *fn, const fn_info_t *info,
                        kiln_vmfb_reg_t device, kiln_vmfb_reg_t allocator, kiln_vmfb_reg_t wait) {
  uint32_t global = info->const_global;
  for (size_t b = 0; b < fn->n_buffers; b++) {
    const kiln_vmfb_buffer_t *buf = &fn->buffers[b];
    if (buf->kind != KILN_VMFB_BUFFER_CONSTANT) continue;
    emit_upload_one(e, device, allocator, wait, info->rodata[b], buf->size_bytes, global++);
  }
}

/* Module variables this function uses, each created (with its initial bytes)
 * by the first call of any function that finds it missing; the flag is module
 * wide, so every function shares the one buffer. */
static void emit_variables(emit_t *e, const kiln_vmfb_function_t *fn, kiln_vmfb_reg_t device,
                           kiln_vmfb_reg_t allocator, kiln_vmfb_reg_t wait) {
  gen_t *g = e->g;
  for (size_t b = 0; b < fn->n_buffers; b++) {
    const kiln_vmfb_buffer_t *buf = &fn->buffers[b];
    if (buf->kind != KILN_VMFB_BUFFER_VARIABLE) continue;
    bool seen = false;
    for (size_t k = 0; k < b && !seen; k++) {
      seen = fn->buffers[k].kind == KILN_VMFB_BUFFER_VARIABLE && fn->buffers[k].variable == buf->variable;
    }
    if (seen) continue;
    uint32_t v = buf->variable;
    kiln_vmfb_block_t init = kiln_vmfb_bytecode_block_declare(e->bc);
    kiln_vmfb_block_t ready_block = kiln_vmfb_bytecode_block_declare(e->bc);
    scope_t s = scope_begin(e);
    kiln_vmfb_reg_t ready = kiln_vmfb_bytecode_i32(e->bc);
    kiln_vmfb_bytecode_global_load_i32(e->bc, g->var_ready[v], ready);
    kiln_vmfb_bytecode_cond_br(e->bc, ready, ready_block, init);
    scope_end(e, s);
    begin(e, init);
    emit_upload_one(e, device, allocator, wait, g->var_rodata[v], g->plan->variables[v].size_bytes,
                    g->var_global + v);
    s = scope_begin(e);
    kiln_vmfb_bytecode_global_store_i32(e->bc, g->var_ready[v], ci32(e, 1));
    scope_end(e, s);
    kiln_vmfb_bytecode_br(e->bc, ready_block);
    begin(e, ready_block);
  }
}

static void emit_dispatch(emit_t *e, const kiln_vmfb_step_t *step, const kiln_vmfb_reg_t *buffers,
                          kiln_vmfb_reg_t cmd, kiln_vmfb_reg_t executable) {
  gen_t *g = e->g;
  size_t n = 7 + step->n_constants + 5 * step->n_bindings;
  kiln_vmfb_reg_t *args = kiln_malloc(n * sizeof *args);
  size_t k = 0;
  args[k++] = cmd;
  args[k++] = executable;
  if (g->hal_version >= KILN_VMFB_HAL_VERSION_0_7) {
    kiln_vmfb_reg_t id = kiln_vmfb_bytecode_i64(e->bc);
    kiln_vmfb_bytecode_global_load_i64(e->bc, g->kernel_offset[step->kernel], id);
    args[k++] = id;
  } else {
    args[k++] = ci32(e, (int32_t)step->kernel);
  }
  for (int d = 0; d < 3; d++) args[k++] = size_i32(e, step->workgroup_exprs[d], (int32_t)step->workgroups[d]);
  args[k++] = ci64(e, 0); /* flags */
  for (size_t i = 0; i < step->n_constants; i++) args[k++] = ci32(e, (int32_t)step->constants[i]);
  for (size_t i = 0; i < step->n_bindings; i++) {
    const kiln_vmfb_binding_t *bd = &step->bindings[i];
    args[k++] = ci32(e, 0); /* reserved */
    args[k++] = ci32(e, 0); /* binding table slot: unused with a direct buffer */
    args[k++] = buffers[bd->buffer];
    args[k++] = ci64(e, (int64_t)bd->offset);
    args[k++] = size_i64(e, bd->length_expr, (int64_t)bd->length);
  }
  uint16_t spans[2] = {(uint16_t)step->n_constants, (uint16_t)step->n_bindings};
  call_variadic(e, I_COMMAND_BUFFER_DISPATCH, spans, 2, args, k, NULL, 0);
  kiln_free(args);
}

/* length bytes from (src, src_offset) to (dst, dst_offset). */
static void emit_copy(emit_t *e, kiln_vmfb_reg_t cmd, kiln_vmfb_reg_t src, uint64_t src_offset,
                      kiln_vmfb_reg_t dst, uint64_t dst_offset, kiln_vmfb_reg_t length) {
  kiln_vmfb_reg_t args[9] = {
      cmd,        ci32(e, 0), /* source slot */
      ci32(e, 0),             /* target slot */
      src,        ci64(e, (int64_t)src_offset),
      dst,        ci64(e, (int64_t)dst_offset),
      length,     ci64(e, 0), /* flags */
  };
  call(e, I_COMMAND_BUFFER_COPY_BUFFER, args, 9, NULL, 0);
}

static void emit_result(emit_t *e, const kiln_vmfb_function_t *fn, size_t r, const kiln_vmfb_reg_t *buffers,
                        kiln_vmfb_reg_t view) {
  const kiln_vmfb_result_t *res = &fn->results[r];
  scope_t s = scope_begin(e);
  uint64_t bytes = 0;
  (void)kiln_vmfb_tensor_type_bytes(&res->type, &bytes); /* validated by tensor_bytes */
  kiln_vmfb_reg_t args[5 + KILN_VMFB_MAX_RANK];
  size_t n = 0;
  args[n++] = buffers[res->buffer];
  args[n++] = ci64(e, (int64_t)res->offset);
  args[n++] = size_i64(e, res->size_expr, (int64_t)bytes);
  args[n++] = ci32(e, (int32_t)res->type.element_type);
  args[n++] = ci32(e, ENCODING_DENSE_ROW_MAJOR);
  for (uint32_t d = 0; d < res->type.rank; d++) {
    args[n++] = res->type.dims[d] < 0 ? e->ex[res->dim_exprs[d] - 1] : ci64(e, res->type.dims[d]);
  }
  uint16_t rank = (uint16_t)res->type.rank;
  call_variadic(e, I_BUFFER_VIEW_CREATE, &rank, 1, args, n, &view, 1);
  scope_end(e, s);
}

/* Host control flow. The steps run in segments: a segment is recorded into a
 * fresh command buffer, which is submitted and waited for where the segment
 * ends: at a BRANCH (whose condition the host then reads back), a JUMP, or a
 * step another step continues at. A plan without BRANCH or JUMP is one segment:
 * one command buffer per call, as before. */
typedef struct segments_s {
  const kiln_vmfb_function_t *fn;
  kiln_vmfb_reg_t device, cmd, wait, status, fence, staging;
  kiln_vmfb_block_t failed, done;
  kiln_vmfb_block_t *blocks; /* per step: the block its segment starts, or 0 */
} segments_t;

/* The host-visible buffer a BRANCH copies its condition into before reading it. */
static void emit_staging(emit_t *e, kiln_vmfb_reg_t allocator, kiln_vmfb_reg_t staging) {
  scope_t s = scope_begin(e);
  emit_allocate_sized(e, allocator, MEMORY_TYPE_HOST_VISIBLE | MEMORY_TYPE_DEVICE_VISIBLE,
                      USAGE_TRANSFER_TARGET | USAGE_MAPPING, ci64(e, KILN_VMFB_BRANCH_MAX_BYTES), staging);
  scope_end(e, s);
}

static void emit_create_cmd(emit_t *e, segments_t *sg) {
  scope_t s = scope_begin(e);
  kiln_vmfb_reg_t args[5] = {sg->device, ci32(e, COMMAND_BUFFER_MODE_ONE_SHOT), ci32(e, COMMAND_CATEGORY_ANY),
                             ci64(e, QUEUE_AFFINITY_ANY),
                             ci32(e, 0) /* binding capacity: direct buffers only */};
  call(e, I_COMMAND_BUFFER_CREATE, args, 5, &sg->cmd, 1);
  scope_end(e, s);
}

/* Finalizes and submits the segment's command buffer (after `wait`, which is
 * then cleared: the host waits for each segment) and waits for it; when the wait
 * succeeded, execution goes on at block `next`, or (next == 0) emission
 * continues in a fresh block. */
static void emit_submit_wait(emit_t *e, segments_t *sg, kiln_vmfb_block_t next) {
  kiln_vmfb_bytecode_t *bc = e->bc;
  call(e, I_COMMAND_BUFFER_FINALIZE, &sg->cmd, 1, NULL, 0);
  kiln_vmfb_block_t waited = kiln_vmfb_bytecode_block_declare(bc);
  kiln_vmfb_block_t ok = next ? next : kiln_vmfb_bytecode_block_declare(bc);
  scope_t s = scope_begin(e);
  kiln_vmfb_reg_t fargs[2] = {sg->device, ci64(e, 0)};
  call(e, I_FENCE_CREATE, fargs, 2, &sg->fence, 1);
  kiln_vmfb_reg_t xargs[6] = {sg->device, ci64(e, QUEUE_AFFINITY_ANY), sg->wait, sg->fence, sg->cmd,
                              ci64(e, 0)};
  call(e, I_DEVICE_QUEUE_EXECUTE, xargs, 6, NULL, 0);
  kiln_vmfb_bytecode_const_ref_zero(bc, sg->wait);
  kiln_vmfb_reg_t wargs[3] = {ci32(e, TIMEOUT_INFINITE), ci64(e, 0), sg->fence};
  uint16_t one = 1;
  kiln_vmfb_bytecode_call_variadic_yieldable(bc, import_callee(e, I_FENCE_AWAIT),
                                             import_cconv(e->g, I_FENCE_AWAIT), &one, 1, wargs, 3,
                                             &sg->status, 1, waited);
  scope_end(e, s);
  begin(e, waited);
  kiln_vmfb_bytecode_cond_br(bc, sg->status, sg->failed, ok);
  if (!next) begin(e, ok);
}

static kiln_vmfb_block_t block_at(const segments_t *sg, uint32_t step) {
  return step >= sg->fn->n_steps ? sg->done : sg->blocks[step];
}

static void emit_steps(emit_t *e, segments_t *sg, const kiln_vmfb_reg_t *buffers,
                       kiln_vmfb_reg_t executable) {
  const kiln_vmfb_function_t *fn = sg->fn;
  kiln_vmfb_bytecode_t *bc = e->bc;
  size_t n = fn->n_steps;
  sg->blocks = kiln_calloc(n ? n : 1, sizeof *sg->blocks);
  /* Segment starts: steps a BRANCH or JUMP continues at, and the steps after
   * them. The first segment starts in the current block unless a step jumps to
   * it (a loop at the top). */
  bool *starts = kiln_calloc(n ? n : 1, sizeof *starts);
  for (size_t i = 0; i < n; i++) {
    const kiln_vmfb_step_t *st = &fn->steps[i];
    if (st->kind != KILN_VMFB_STEP_BRANCH && st->kind != KILN_VMFB_STEP_JUMP) continue;
    if (st->target < n) starts[st->target] = true;
    if (i + 1 < n) starts[i + 1] = true;
  }
  for (size_t i = 0; i < n; i++) {
    if (starts[i]) sg->blocks[i] = kiln_vmfb_bytecode_block_declare(bc);
  }
  bool open = false;       /* a command buffer is being recorded */
  bool recorded = false;   /* ... and holds a step (the next needs a barrier) */
  bool terminated = false; /* the current block has ended */
  if (!n || !starts[0]) emit_create_cmd(e, sg), open = true;
  for (size_t i = 0; i < n; i++) {
    const kiln_vmfb_step_t *st = &fn->steps[i];
    if (starts[i]) {
      if (open && !terminated) {
        emit_submit_wait(e, sg, sg->blocks[i]);
      } else if (!terminated) {
        kiln_vmfb_bytecode_br(bc, sg->blocks[i]);
      }
      begin(e, sg->blocks[i]);
      emit_create_cmd(e, sg);
      open = true, recorded = false, terminated = false;
    }
    scope_t s = scope_begin(e);
    if (recorded && st->kind != KILN_VMFB_STEP_JUMP) emit_barrier(e, sg->cmd);
    switch (st->kind) {
      case KILN_VMFB_STEP_DISPATCH:
        emit_dispatch(e, st, buffers, sg->cmd, executable);
        recorded = true;
        break;
      case KILN_VMFB_STEP_COPY:
        emit_copy(e, sg->cmd, buffers[st->src], st->src_offset, buffers[st->dst], st->dst_offset,
                  size_i64(e, st->length_expr, (int64_t)st->length));
        recorded = true;
        break;
      case KILN_VMFB_STEP_BRANCH: {
        kiln_vmfb_reg_t value;
        if (st->cond_expr) {
          /* A condition on sizes: nothing to read back, but blocks begin segments. */
          emit_submit_wait(e, sg, 0);
          value = nonzero(e, st->cond_expr);
        } else {
          emit_copy(e, sg->cmd, buffers[st->src], st->src_offset, sg->staging, 0,
                    ci64(e, (int64_t)st->length));
          emit_submit_wait(e, sg, 0);
          value = kiln_vmfb_bytecode_i32(bc);
          kiln_vmfb_reg_t largs[3] = {sg->staging, ci64(e, 0), ci32(e, (int32_t)st->length)};
          call(e, I_BUFFER_LOAD, largs, 3, &value, 1);
        }
        kiln_vmfb_bytecode_cond_br(bc, value, block_at(sg, (uint32_t)(i + 1)), block_at(sg, st->target));
        terminated = true;
        break;
      }
      case KILN_VMFB_STEP_JUMP:
        emit_submit_wait(e, sg, block_at(sg, st->target));
        terminated = true;
        break;
    }
    scope_end(e, s);
  }
  if (!terminated) emit_submit_wait(e, sg, sg->done);
  kiln_free(starts);
}

/* Every expression of the function, in order, into registers that live for the
 * whole call (plan.h: expressions). */
static void emit_exprs(emit_t *e, const kiln_vmfb_function_t *fn) {
  static const struct {
    kiln_vmfb_expr_kind_t kind;
    kiln_vmfb_i64_op_t op;
  } BINARY[] = {
      {KILN_VMFB_EXPR_ADD, KILN_VMFB_I64_ADD},       {KILN_VMFB_EXPR_SUB, KILN_VMFB_I64_SUB},
      {KILN_VMFB_EXPR_MUL, KILN_VMFB_I64_MUL},       {KILN_VMFB_EXPR_DIV_S, KILN_VMFB_I64_DIV_S},
      {KILN_VMFB_EXPR_DIV_U, KILN_VMFB_I64_DIV_U},   {KILN_VMFB_EXPR_REM_S, KILN_VMFB_I64_REM_S},
      {KILN_VMFB_EXPR_REM_U, KILN_VMFB_I64_REM_U},   {KILN_VMFB_EXPR_MIN_S, KILN_VMFB_I64_MIN_S},
      {KILN_VMFB_EXPR_MIN_U, KILN_VMFB_I64_MIN_U},   {KILN_VMFB_EXPR_MAX_S, KILN_VMFB_I64_MAX_S},
      {KILN_VMFB_EXPR_MAX_U, KILN_VMFB_I64_MAX_U},   {KILN_VMFB_EXPR_AND, KILN_VMFB_I64_AND},
      {KILN_VMFB_EXPR_OR, KILN_VMFB_I64_OR},         {KILN_VMFB_EXPR_XOR, KILN_VMFB_I64_XOR},
      {KILN_VMFB_EXPR_EQ, KILN_VMFB_I64_CMP_EQ},     {KILN_VMFB_EXPR_NE, KILN_VMFB_I64_CMP_NE},
      {KILN_VMFB_EXPR_LT_S, KILN_VMFB_I64_CMP_LT_S}, {KILN_VMFB_EXPR_LT_U, KILN_VMFB_I64_CMP_LT_U},
  };
  kiln_vmfb_bytecode_t *bc = e->bc;
  for (size_t i = 0; i < fn->n_exprs; i++) e->ex[i] = kiln_vmfb_bytecode_i64(bc);
  for (size_t i = 0; i < fn->n_exprs; i++) {
    const kiln_vmfb_expr_t *x = &fn->exprs[i];
    kiln_vmfb_reg_t dst = e->ex[i];
    scope_t s = scope_begin(e);
    if (x->kind == KILN_VMFB_EXPR_CONST) {
      kiln_vmfb_bytecode_const_i64(bc, x->value, dst);
    } else if (x->kind == KILN_VMFB_EXPR_INPUT_DIM) {
      kiln_vmfb_reg_t args[2] = {kiln_vmfb_bytecode_arg(bc, x->a), ci32(e, (int32_t)x->b)};
      call(e, I_BUFFER_VIEW_DIM, args, 2, &dst, 1);
    } else if (x->kind == KILN_VMFB_EXPR_SELECT) {
      kiln_vmfb_bytecode_select_i64(bc, nonzero(e, x->a), e->ex[x->b - 1], e->ex[x->c - 1], dst);
    } else {
      for (size_t k = 0; k < sizeof BINARY / sizeof BINARY[0]; k++) {
        if (BINARY[k].kind != x->kind) continue;
        bool compare = x->kind >= KILN_VMFB_EXPR_EQ;
        kiln_vmfb_reg_t out = compare ? kiln_vmfb_bytecode_i32(bc) : dst;
        kiln_vmfb_bytecode_i64_binary(bc, BINARY[k].op, e->ex[x->a - 1], e->ex[x->b - 1], out);
        if (compare) kiln_vmfb_bytecode_ext_i32_i64_u(bc, out, dst);
      }
    }
    scope_end(e, s);
  }
}

/* A kernel argument buffer: host-visible, filled word by word (hal.buffer.store)
 * before any step runs. */
static void emit_args(emit_t *e, const kiln_vmfb_buffer_t *buf, kiln_vmfb_reg_t allocator,
                      kiln_vmfb_reg_t dst) {
  scope_t s = scope_begin(e);
  emit_allocate_sized(e, allocator, MEMORY_TYPE_HOST_VISIBLE | MEMORY_TYPE_DEVICE_VISIBLE,
                      USAGE_DISPATCH_STORAGE_READ | USAGE_DISPATCH_STORAGE_WRITE | USAGE_MAPPING,
                      ci64(e, (int64_t)buf->size_bytes), dst);
  for (size_t w = 0; w < buf->n_words; w++) {
    scope_t ws = scope_begin(e);
    kiln_vmfb_reg_t args[4] = {size_i32(e, buf->words[w], 0), dst, ci64(e, (int64_t)(4 * w)), ci32(e, 4)};
    call(e, I_BUFFER_STORE, args, 4, NULL, 0);
    scope_end(e, ws);
  }
  scope_end(e, s);
}

static char *function_cconv(size_t n_inputs, size_t n_results) {
  kiln_buf_t buf;
  kiln_buf_init(&buf);
  kiln_buf_append_char(&buf, '0');
  for (size_t i = 0; i < n_inputs; i++) kiln_buf_append_char(&buf, 'r');
  if (!n_inputs) kiln_buf_append_char(&buf, 'v');
  kiln_buf_append_char(&buf, '_');
  for (size_t i = 0; i < n_results; i++) kiln_buf_append_char(&buf, 'r');
  if (!n_results) kiln_buf_append_char(&buf, 'v');
  return kiln_buf_take(&buf);
}

static KILN_MUST_USE kiln_status_t emit_function(gen_t *g, size_t f, kiln_vmfb_vm_function_t *out) {
  const kiln_vmfb_function_t *fn = &g->plan->functions[f];
  const fn_info_t *info = &g->fns[f];
  char *cconv = function_cconv(fn->n_inputs, fn->n_results);
  emit_t e = {.g = g};
  kiln_status_t st = kiln_vmfb_bytecode_create(cconv, &e.bc);
  kiln_free(cconv);
  if (st) return kiln_status_annotate(st, "host program: function %s", fn->name);
  kiln_vmfb_bytecode_t *bc = e.bc;

  /* entry */
  kiln_vmfb_reg_t device = kiln_vmfb_bytecode_ref(bc);
  kiln_vmfb_reg_t allocator = kiln_vmfb_bytecode_ref(bc);
  kiln_vmfb_reg_t executable = kiln_vmfb_bytecode_ref(bc);
  kiln_vmfb_reg_t cmd = kiln_vmfb_bytecode_ref(bc);
  kiln_vmfb_reg_t wait = kiln_vmfb_bytecode_ref(bc); /* what the submission waits on */
  kiln_vmfb_reg_t *buffers = kiln_calloc(fn->n_buffers ? fn->n_buffers : 1, sizeof *buffers);
  for (size_t b = 0; b < fn->n_buffers; b++) buffers[b] = kiln_vmfb_bytecode_ref(bc);
  kiln_vmfb_bytecode_global_load_ref(bc, G_DEVICE, T_DEVICE, device);
  kiln_vmfb_bytecode_global_load_ref(bc, G_ALLOCATOR, T_ALLOCATOR, allocator);
  kiln_vmfb_bytecode_global_load_ref(bc, G_EXECUTABLE, T_EXECUTABLE, executable);
  /* Sizes first: an input's assert needs the sizes its dynamic dimensions give. */
  e.ex = kiln_calloc(fn->n_exprs ? fn->n_exprs : 1, sizeof *e.ex);
  emit_exprs(&e, fn);
  emit_input_asserts(&e, fn, info, buffers, allocator);
  for (size_t b = 0; b < fn->n_buffers; b++) {
    const kiln_vmfb_buffer_t *buf = &fn->buffers[b];
    if (buf->kind == KILN_VMFB_BUFFER_TRANSIENT && buf->size_expr) {
      scope_t s = scope_begin(&e);
      emit_allocate_sized(&e, allocator, MEMORY_TYPE_DEVICE_LOCAL, USAGE_DEFAULT, e.ex[buf->size_expr - 1],
                          buffers[b]);
      scope_end(&e, s);
    } else if (buf->kind == KILN_VMFB_BUFFER_TRANSIENT) {
      emit_allocate(&e, allocator, buf->size_bytes, buffers[b]);
    } else if (buf->kind == KILN_VMFB_BUFFER_ARGS) {
      emit_args(&e, buf, allocator, buffers[b]);
    }
  }
  kiln_vmfb_bytecode_const_ref_zero(bc, wait);
  emit_variables(&e, fn, device, allocator, wait);
  kiln_vmfb_block_t main_block = kiln_vmfb_bytecode_block_declare(bc);
  if (info->n_constants) {
    kiln_vmfb_block_t upload = kiln_vmfb_bytecode_block_declare(bc);
    scope_t s = scope_begin(&e);
    kiln_vmfb_reg_t ready = kiln_vmfb_bytecode_i32(bc);
    kiln_vmfb_bytecode_global_load_i32(bc, info->ready_offset, ready);
    kiln_vmfb_bytecode_cond_br(bc, ready, main_block, upload);
    scope_end(&e, s);
    begin(&e, upload);
    emit_upload(&e, fn, info, device, allocator, wait);
  }
  kiln_vmfb_bytecode_br(bc, main_block);

  /* main: the constant buffers, then the steps, segment by segment */
  begin(&e, main_block);
  uint32_t global = info->const_global;
  for (size_t b = 0; b < fn->n_buffers; b++) {
    const kiln_vmfb_buffer_t *buf = &fn->buffers[b];
    if (buf->kind == KILN_VMFB_BUFFER_CONSTANT) {
      kiln_vmfb_bytecode_global_load_ref(bc, global++, T_BUFFER, buffers[b]);
    } else if (buf->kind == KILN_VMFB_BUFFER_VARIABLE) {
      kiln_vmfb_bytecode_global_load_ref(bc, g->var_global + buf->variable, T_BUFFER, buffers[b]);
    } else if (buf->kind == KILN_VMFB_BUFFER_SELECT) {
      scope_t s = scope_begin(&e);
      kiln_vmfb_bytecode_select_ref(bc, nonzero(&e, buf->select_cond), T_BUFFER, buffers[buf->select_a],
                                    buffers[buf->select_b], buffers[b]);
      scope_end(&e, s);
    }
  }
  segments_t sg = {.device = device, .cmd = cmd, .wait = wait, .fn = fn};
  sg.status = kiln_vmfb_bytecode_i32(bc);
  sg.fence = kiln_vmfb_bytecode_ref(bc);
  sg.staging = kiln_vmfb_bytecode_ref(bc);
  sg.failed = kiln_vmfb_bytecode_block_declare(bc);
  sg.done = kiln_vmfb_bytecode_block_declare(bc);
  if (info->has_branches) emit_staging(&e, allocator, sg.staging);
  emit_steps(&e, &sg, buffers, executable);

  begin(&e, sg.failed);
  char message[256];
  snprintf(message, sizeof message,
           "kiln: %s: the device failed while running the dispatches (hal.fence.await)", fn->name);
  kiln_vmfb_bytecode_fail(bc, sg.status, message);

  /* done: publish the constants and wrap the results */
  begin(&e, sg.done);
  if (info->n_constants) {
    scope_t s = scope_begin(&e);
    kiln_vmfb_bytecode_global_store_i32(bc, info->ready_offset, ci32(&e, 1));
    scope_end(&e, s);
  }
  kiln_vmfb_reg_t *views = kiln_calloc(fn->n_results ? fn->n_results : 1, sizeof *views);
  for (size_t r = 0; r < fn->n_results; r++) views[r] = kiln_vmfb_bytecode_ref(bc);
  for (size_t r = 0; r < fn->n_results; r++) emit_result(&e, fn, r, buffers, views[r]);
  kiln_vmfb_bytecode_return(bc, views, fn->n_results);

  st = kiln_vmfb_bytecode_finish(bc, out);
  kiln_vmfb_bytecode_destroy(bc);
  kiln_free(views);
  kiln_free(buffers);
  kiln_free(sg.blocks);
  kiln_free(e.ex);
  kiln_free(e.konsts);
  if (st) return kiln_status_annotate(st, "host program: function %s", fn->name);
  out->name = kiln_strdup(fn->name);
  out->export_name = kiln_strdup(fn->name);
  char *decl = declaration(fn);
  kiln_vmfb_attrs_add(&out->attrs, &out->n_attrs, "iree.abi.declaration", decl);
  kiln_free(decl);
  return NULL;
}

/* ---- __init ---- */

/* A module whose functions dispatch nothing (they return constants, inputs or
 * views of them) creates no executable: no hal.executable.create, no executable
 * rodata, a null executable global. */
static bool has_executable(const gen_t *g) { return g->exe->n_kernels > 0; }

static KILN_MUST_USE kiln_status_t emit_init(gen_t *g, kiln_vmfb_vm_function_t *out) {
  emit_t e = {.g = g};
  kiln_status_t st = kiln_vmfb_bytecode_create("0v_v", &e.bc);
  if (st) return st;
  kiln_vmfb_bytecode_t *bc = e.bc;
  kiln_vmfb_reg_t device = kiln_vmfb_bytecode_ref(bc);
  kiln_vmfb_reg_t allocator = kiln_vmfb_bytecode_ref(bc);
  kiln_vmfb_reg_t executable = kiln_vmfb_bytecode_ref(bc);
  kiln_vmfb_reg_t have = kiln_vmfb_bytecode_i32(bc);
  kiln_vmfb_reg_t zero = ci32(&e, 0);
  call(&e, I_DEVICES_GET, &zero, 1, &device, 1);
  kiln_vmfb_bytecode_cmp_nz_ref(bc, device, have);
  kiln_vmfb_block_t missing = kiln_vmfb_bytecode_block_declare(bc);
  kiln_vmfb_block_t found = kiln_vmfb_bytecode_block_declare(bc);
  kiln_vmfb_bytecode_cond_br(bc, have, found, missing);
  begin(&e, missing);
  kiln_vmfb_bytecode_fail(bc, ci32(&e, STATUS_NOT_FOUND),
                          "kiln: no HAL device 0 in this context; create the context with a "
                          "device of the module's target (e.g. --device=cuda)");
  begin(&e, found);
  call(&e, I_DEVICE_ALLOCATOR, &device, 1, &allocator, 1);
  if (!has_executable(g)) goto publish; /* nothing to dispatch: no executable */
  kiln_vmfb_reg_t format = kiln_vmfb_bytecode_ref(bc);
  kiln_vmfb_reg_t data = kiln_vmfb_bytecode_ref(bc);
  kiln_vmfb_reg_t none = kiln_vmfb_bytecode_ref(bc);
  kiln_vmfb_bytecode_const_ref_rodata(bc, g->rodata_format, format);
  kiln_vmfb_bytecode_const_ref_rodata(bc, g->rodata_exe, data);
  kiln_vmfb_bytecode_const_ref_zero(bc, none); /* no specialization constants */
  kiln_vmfb_reg_t args[5] = {device, ci64(&e, QUEUE_AFFINITY_ANY), format, data, none};
  call(&e, I_EXECUTABLE_CREATE, args, 5, &executable, 1);
  if (g->hal_version >= KILN_VMFB_HAL_VERSION_0_7) {
    for (size_t k = 0; k < g->exe->n_kernels; k++) {
      if (g->kernel_offset[k] == UINT32_MAX) continue;
      scope_t s = scope_begin(&e);
      kiln_vmfb_reg_t name = kiln_vmfb_bytecode_ref(bc);
      kiln_vmfb_reg_t id = kiln_vmfb_bytecode_i64(bc);
      kiln_vmfb_bytecode_const_ref_rodata(bc, g->kernel_rodata[k], name);
      kiln_vmfb_reg_t largs[2] = {executable, name};
      call(&e, I_EXECUTABLE_LOOKUP_FUNCTION, largs, 2, &id, 1);
      kiln_vmfb_bytecode_global_store_i64(bc, g->kernel_offset[k], id);
      scope_end(&e, s);
    }
  }
  kiln_vmfb_bytecode_global_store_ref(bc, G_EXECUTABLE, T_EXECUTABLE, executable);
publish:
  kiln_vmfb_bytecode_global_store_ref(bc, G_DEVICE, T_DEVICE, device);
  kiln_vmfb_bytecode_global_store_ref(bc, G_ALLOCATOR, T_ALLOCATOR, allocator);
  kiln_vmfb_bytecode_return(bc, NULL, 0);
  st = kiln_vmfb_bytecode_finish(bc, out);
  kiln_vmfb_bytecode_destroy(bc);
  kiln_free(e.konsts);
  if (st) return kiln_status_annotate(st, "host program: __init");
  out->name = kiln_strdup("__init");
  out->export_name = kiln_strdup("__init");
  return NULL;
}

/* ---- the module ---- */

static void select_imports(gen_t *g) {
  bool used[I_COUNT] = {false};
  used[I_DEVICES_GET] = used[I_DEVICE_ALLOCATOR] = true;
  used[I_EXECUTABLE_CREATE] = has_executable(g);
  used[I_COMMAND_BUFFER_CREATE] = used[I_COMMAND_BUFFER_FINALIZE] = true;
  used[I_FENCE_CREATE] = used[I_DEVICE_QUEUE_EXECUTE] = used[I_FENCE_AWAIT] = true;
  for (size_t f = 0; f < g->plan->n_functions; f++) {
    const kiln_vmfb_function_t *fn = &g->plan->functions[f];
    if (fn->n_inputs) {
      used[I_BUFFER_VIEW_ASSERT] = used[I_BUFFER_VIEW_BUFFER] = used[I_BUFFER_ASSERT] = true;
    }
    for (size_t i = 0; i < fn->n_inputs; i++) used[I_BUFFER_VIEW_DIM] |= has_dynamic_dims(&fn->inputs[i]);
    for (size_t x = 0; x < fn->n_exprs; x++)
      used[I_BUFFER_VIEW_DIM] |= fn->exprs[x].kind == KILN_VMFB_EXPR_INPUT_DIM;
    if (fn->n_results) used[I_BUFFER_VIEW_CREATE] = true;
    if (fn->n_steps > 1) used[I_COMMAND_BUFFER_EXECUTION_BARRIER] = true;
    for (size_t b = 0; b < fn->n_buffers; b++) {
      if (fn->buffers[b].kind == KILN_VMFB_BUFFER_TRANSIENT) used[I_ALLOCATOR_ALLOCATE] = true;
      if (fn->buffers[b].kind == KILN_VMFB_BUFFER_ARGS)
        used[I_ALLOCATOR_ALLOCATE] = used[I_BUFFER_STORE] = true;
      if (fn->buffers[b].kind == KILN_VMFB_BUFFER_VARIABLE) {
        used[I_ALLOCATOR_ALLOCATE] = true;
        if (fn->buffers[b].size_bytes > 0) {
          used[I_EX_FILE_FROM_MEMORY] = used[I_DEVICE_QUEUE_READ] = used[I_FENCE_CREATE] = true;
        }
      }
      if (fn->buffers[b].kind == KILN_VMFB_BUFFER_CONSTANT) {
        used[I_ALLOCATOR_ALLOCATE] = true;
        if (fn->buffers[b].size_bytes > 0) {
          used[I_EX_FILE_FROM_MEMORY] = used[I_DEVICE_QUEUE_READ] = true;
        }
      }
    }
    for (size_t s = 0; s < fn->n_steps; s++) {
      if (fn->steps[s].kind == KILN_VMFB_STEP_COPY) used[I_COMMAND_BUFFER_COPY_BUFFER] = true;
      if (fn->steps[s].kind == KILN_VMFB_STEP_BRANCH && !fn->steps[s].cond_expr) {
        used[I_COMMAND_BUFFER_COPY_BUFFER] = used[I_BUFFER_LOAD] = used[I_ALLOCATOR_ALLOCATE] = true;
      }
      if (fn->steps[s].kind == KILN_VMFB_STEP_DISPATCH) {
        used[I_COMMAND_BUFFER_DISPATCH] = true;
        used[I_EXECUTABLE_LOOKUP_FUNCTION] |= g->hal_version >= KILN_VMFB_HAL_VERSION_0_7;
      }
    }
  }
  kiln_vmfb_vm_module_t *m = g->m;
  for (int i = 0; i < I_COUNT; i++) {
    g->import_ordinal[i] = -1;
    if (!used[i]) continue;
    g->import_ordinal[i] = (int32_t)m->n_imports;
    m->imports = kiln_realloc(m->imports, (m->n_imports + 1) * sizeof *m->imports);
    m->imports[m->n_imports++] = (kiln_vmfb_vm_import_t){
        .full_name = kiln_strdup(IMPORTS[i].name),
        .cconv = kiln_strdup(import_cconv(g, (import_t)i)),
        .flags = IMPORT_FLAG_REQUIRED,
    };
  }
}

static KILN_MUST_USE kiln_status_t build(gen_t *g, const char *module_name) {
  kiln_vmfb_vm_module_t *m = g->m;
  const kiln_vmfb_plan_t *plan = g->plan;
  const kiln_vmfb_host_executable_t *exe = g->exe;
  if (!plan->n_functions || !plan->functions) {
    return KILN_STATUS(KILN_STATUS_INVALID_ARGUMENT, "host program: the plan has no functions");
  }
  if ((exe->n_kernels && (!exe->format || !*exe->format)) || (!exe->data && exe->len) ||
      (exe->n_kernels && !exe->kernels)) {
    return KILN_STATUS(KILN_STATUS_INVALID_ARGUMENT,
                       "host program: the executable needs a format string, its bytes and its "
                       "kernel names");
  }
  g->kernel_offset = kiln_malloc((exe->n_kernels ? exe->n_kernels : 1) * sizeof *g->kernel_offset);
  g->kernel_rodata = kiln_calloc(exe->n_kernels ? exe->n_kernels : 1, sizeof *g->kernel_rodata);
  for (size_t k = 0; k < exe->n_kernels; k++) g->kernel_offset[k] = UINT32_MAX;
  g->fns = kiln_calloc(plan->n_functions, sizeof *g->fns);
  for (size_t f = 0; f < plan->n_functions; f++) KILN_RETURN_IF_ERROR(check_function(g, f));

  m->name = kiln_strdup(module_name);
  m->version = 0;
  m->hal_minimum_version = g->hal_version;
  m->bytecode_version = KILN_VMFB_BYTECODE_VERSION;
  m->types = kiln_calloc(T_COUNT, sizeof *m->types);
  for (int t = 0; t < T_COUNT; t++) m->types[t] = kiln_strdup(TYPE_NAMES[t]);
  m->n_types = T_COUNT;
  select_imports(g);

  /* rodata: the executable, its format, kernel names, then constants */
  if (has_executable(g)) {
    char *exe_name = entry_name(module_name, exe->format, ".fb");
    g->rodata_exe = rodata_add(g, exe_name, exe->data, exe->len, true);
    kiln_free(exe_name);
    g->rodata_format = rodata_string(g, exe->format);
  }
  /* globals: i64 function ids first (8-aligned), then the i32 flags */
  uint32_t bytes = 0;
  for (size_t k = 0; k < exe->n_kernels; k++) {
    if (g->kernel_offset[k] == UINT32_MAX) continue;
    if (g->hal_version >= KILN_VMFB_HAL_VERSION_0_7) {
      g->kernel_offset[k] = bytes;
      bytes += 8;
      g->kernel_rodata[k] = rodata_string(g, exe->kernels[k]);
    }
  }
  uint32_t refs = G_FIXED_COUNT;
  for (size_t f = 0; f < plan->n_functions; f++) {
    const kiln_vmfb_function_t *fn = &plan->functions[f];
    fn_info_t *info = &g->fns[f];
    info->const_global = refs;
    if (!info->n_constants) continue;
    info->ready_offset = bytes;
    bytes += 4;
    size_t c = 0;
    for (size_t b = 0; b < fn->n_buffers; b++) {
      const kiln_vmfb_buffer_t *buf = &fn->buffers[b];
      if (buf->kind != KILN_VMFB_BUFFER_CONSTANT) continue;
      char index[32];
      snprintf(index, sizeof index, "constant%zu", c++);
      char *name = entry_name(fn->name, index, ".bin");
      info->rodata[b] =
          rodata_add(g, name, buf->data, (size_t)buf->size_bytes, buf->size_bytes >= EMBED_MAX_BYTES);
      kiln_free(name);
      refs++;
    }
  }
  g->var_global = refs;
  g->var_ready = kiln_calloc(plan->n_variables + 1, sizeof *g->var_ready);
  g->var_rodata = kiln_calloc(plan->n_variables + 1, sizeof *g->var_rodata);
  for (size_t v = 0; v < plan->n_variables; v++) {
    const kiln_vmfb_variable_t *var = &plan->variables[v];
    g->var_ready[v] = bytes;
    bytes += 4;
    char *name = entry_name("variable", var->name, ".bin");
    g->var_rodata[v] =
        rodata_add(g, name, var->data, (size_t)var->size_bytes, var->size_bytes >= EMBED_MAX_BYTES);
    kiln_free(name);
    refs++;
  }
  m->global_bytes_capacity = bytes;
  m->global_ref_count = refs;

  m->functions = kiln_calloc(plan->n_functions + 1, sizeof *m->functions);
  for (size_t f = 0; f < plan->n_functions; f++) {
    KILN_RETURN_IF_ERROR(emit_function(g, f, &m->functions[m->n_functions++]));
  }
  KILN_RETURN_IF_ERROR(emit_init(g, &m->functions[m->n_functions++]));
  for (size_t f = 0; f < m->n_functions; f++) {
    KILN_RETURN_IF_ERROR(kiln_status_annotate(kiln_vmfb_bytecode_verify(m, f),
                                              "host program: self-check failed (a kiln bug)"));
  }
  return NULL;
}

kiln_status_t kiln_vmfb_host_program_build(const kiln_vmfb_plan_t *plan,
                                           const kiln_vmfb_host_executable_t *exe,
                                           const kiln_vmfb_host_options_t *options,
                                           kiln_vmfb_vm_module_t *out_module) {
  memset(out_module, 0, sizeof *out_module);
  uint32_t hal_version =
      options && options->hal_version ? options->hal_version : KILN_VMFB_HAL_VERSION_LATEST;
  if (hal_version != KILN_VMFB_HAL_VERSION_0_6 && hal_version != KILN_VMFB_HAL_VERSION_0_7) {
    return KILN_STATUS(KILN_STATUS_UNIMPLEMENTED,
                       "host program: HAL module version %" PRIu32
                       " (kiln emits 7 for IREE 3.12, or 6 for pre-3.12 fixtures)",
                       hal_version);
  }
  const char *module_name = options && options->module_name ? options->module_name : "module";
  if (!*module_name || strchr(module_name, '.')) {
    return KILN_STATUS(KILN_STATUS_INVALID_ARGUMENT,
                       "host program: module name \"%s\" must be non-empty and contain no '.'", module_name);
  }
  kiln_vmfb_vm_module_t module = {0};
  gen_t g = {.plan = plan, .exe = exe, .hal_version = hal_version, .m = &module};
  kiln_status_t st = build(&g, module_name);
  if (g.fns) {
    for (size_t f = 0; f < plan->n_functions; f++) {
      kiln_free(g.fns[f].usage);
      kiln_free(g.fns[f].rodata);
    }
  }
  kiln_free(g.fns);
  kiln_free(g.kernel_offset);
  kiln_free(g.var_ready);
  kiln_free(g.var_rodata);
  kiln_free(g.kernel_rodata);
  if (st) {
    kiln_vmfb_vm_module_deinit(&module);
    return st;
  }
  *out_module = module;
  return NULL;
}
