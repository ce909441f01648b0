/* VM bytecode 17.0: an assembler for one function at a time, and a verifier.
 *
 * Encoding (read off IREE 3.12's runtime decoder, utils/isa_decoder.inl, and its
 * verifier, verifier.c). All values are little-endian. An op is a 1-byte opcode
 * followed by its fields in isa.json order:
 *   register        u16: i32/i64 ordinal (bit 15 clear; i64 ordinals even), or for
 *                   refs 0x8000 | ordinal (bit 14 is the MOVE bit; never emitted)
 *   attr i32/i64    u32 / u64 immediate
 *   func attr       u32 callee ordinal (imports: | 0x80000000)
 *   global/rodata   u32 ordinal or byte offset; type_of: u32 `types` ordinal
 *   string attr     u16 length + bytes (no terminator)
 *   branch target   u32 pc of the target block's marker byte
 *   register list   pad to a 2-byte pc with one 0x00, u16 count, u16 registers
 *   remap list      pad to 2, u16 count, count × (u16 src, u16 dst) (always empty
 *                   here: blocks have no arguments)
 * Every block starts with the marker op 0x79; everything but a marker must be
 * inside a block, and a block ends with a terminator. The descriptor's
 * block_count must equal the number of markers, every branch target must be a
 * marker, and register ordinals must stay below the descriptor's counts.
 * Function arguments arrive in registers in cconv order: i/f take the next i32
 * slot, I/F the next even pair, r the next ref register.
 *
 * Assembler invariants: `code` holds the function so far and pc == code.len;
 * `blocks[b].pc` is set when block b is begun; forward branches record a fixup
 * patched in _finish; `in_block` is true between a marker and a terminator;
 * the first error is kept in `status` and turns every later emit into a no-op.
 *
 * The verifier decodes with the same field layouts, but is stricter than the
 * runtime where the runtime is lenient (it checks registers against the exact
 * descriptor counts rather than their power-of-two round-up, requires register
 * lists to match calling conventions exactly, and requires every byte of the
 * function to decode), so a function it accepts is accepted by the runtime.
 */
#include "compiler/vmfb/bytecode.h"

#include <stdbool.h>
#include <stdio.h>
#include <string.h>

#include "base/alloc.h"
#include "base/buf.h"

/* Opcodes (isa.json, core opcode set). */
enum {
  OP_GLOBAL_LOAD_I32 = 0x00,
  OP_GLOBAL_STORE_I32 = 0x01,
  OP_GLOBAL_LOAD_I64 = 0x04,
  OP_GLOBAL_STORE_I64 = 0x05,
  OP_GLOBAL_LOAD_REF = 0x08,
  OP_GLOBAL_STORE_REF = 0x09,
  OP_CONST_I32_ZERO = 0x0C,
  OP_CONST_I32 = 0x0D,
  OP_CONST_I64_ZERO = 0x0E,
  OP_CONST_I64 = 0x0F,
  OP_CONST_REF_ZERO = 0x10,
  OP_CONST_REF_RODATA = 0x11,
  OP_LIST_GET_REF = 0x1A,
  OP_SELECT_I64 = 0x1D,
  OP_SELECT_REF = 0x1E,
  OP_ADD_I32 = 0x22,
  OP_ADD_I64 = 0x2A,
  OP_TRUNC_I64_I32 = 0x42,
  OP_EXT_I32_I64_U = 0x48,
  OP_CMP_EQ_I32 = 0x49,
  OP_CMP_NE_I32 = 0x4A,
  OP_CMP_NZ_I32 = 0x4D,
  OP_CMP_EQ_I64 = 0x4E,
  OP_CMP_NZ_REF = 0x55,
  OP_BR = 0x56,
  OP_COND_BR = 0x57,
  OP_CALL = 0x58,
  OP_CALL_VARIADIC = 0x59,
  OP_RETURN = 0x5A,
  OP_FAIL = 0x5B,
  OP_BUFFER_LOAD_I32 = 0x66,
  OP_BUFFER_STORE_I32 = 0x6A,
  OP_BLOCK = 0x79,
  OP_DISCARD_REFS = 0x85,
  OP_ASSIGN_REF = 0x86,
  OP_CALL_YIELDABLE = 0x87,
  OP_CALL_VARIADIC_YIELDABLE = 0x88,
};

enum {
  REF_TYPE_BIT = 0x8000,
  REF_MOVE_BIT = 0x4000,
  REF_MASK = 0x3FFF,
  SEGMENT_FIXED = 0xFFFF, /* a non-variadic argument in a segment list (-1) */
  MAX_LIST = 0xFFFF,
};

/* ---- calling conventions ---- */

/* Splits "0<args>_<results>" into its fragments ("v" means none). Returns false
 * when malformed: bad version, unknown type char, unbalanced or nested spans, a
 * span in the results, or "v" mixed with other types. */
static bool cconv_split(const char *cconv, const char **args, size_t *n_args, const char **results,
                        size_t *n_results) {
  if (!cconv || cconv[0] != '0') return false;
  const char *sep = strchr(cconv, '_');
  if (!sep) return false;
  *args = cconv + 1;
  *n_args = (size_t)(sep - cconv - 1);
  *results = sep + 1;
  *n_results = strlen(sep + 1);
  if (*n_args == 1 && **args == 'v') *n_args = 0;
  if (*n_results == 1 && **results == 'v') *n_results = 0;
  for (int pass = 0; pass < 2; pass++) {
    const char *s = pass ? *results : *args;
    size_t n = pass ? *n_results : *n_args;
    bool in_span = false;
    size_t span_len = 0;
    for (size_t i = 0; i < n; i++) {
      switch (s[i]) {
        case 'i':
        case 'I':
        case 'f':
        case 'F':
        case 'r': span_len++; break;
        case 'C':
          if (pass || in_span) return false;
          in_span = true;
          span_len = 0;
          break;
        case 'D':
          if (!in_span || span_len == 0) return false;
          in_span = false;
          break;
        default: return false;
      }
    }
    if (in_span) return false;
  }
  return true;
}

static kiln_vmfb_reg_kind_t cconv_kind(char c) {
  switch (c) {
    case 'i':
    case 'f': return KILN_VMFB_REG_I32;
    case 'I':
    case 'F': return KILN_VMFB_REG_I64;
    case 'r': return KILN_VMFB_REG_REF;
    default: return KILN_VMFB_REG_NONE;
  }
}

static const char *kind_name(kiln_vmfb_reg_kind_t kind) {
  switch (kind) {
    case KILN_VMFB_REG_I32: return "i32";
    case KILN_VMFB_REG_I64: return "i64";
    case KILN_VMFB_REG_REF: return "ref";
    default: return "none";
  }
}

/* Expands a fragment with its span counts into the register kinds it takes.
 * `spans` may be NULL when the fragment has no span. Returns false (with *why)
 * when the span count list does not match the fragment. The result is
 * kiln_malloc'd (at least one element). */
static bool cconv_expand(const char *frag, size_t n, const uint16_t *spans, size_t n_spans,
                         kiln_vmfb_reg_kind_t **out_kinds, size_t *out_n, const char **why) {
  size_t cap = 8, count = 0, span = 0;
  kiln_vmfb_reg_kind_t *kinds = kiln_malloc(cap * sizeof *kinds);
  for (size_t i = 0; i < n; i++) {
    if (frag[i] == 'C') {
      size_t end = i + 1;
      while (frag[end] != 'D') end++;
      if (span >= n_spans) {
        kiln_free(kinds);
        *why = "fewer span counts than C...D spans in the calling convention";
        return false;
      }
      for (uint16_t rep = 0; rep < spans[span]; rep++) {
        for (size_t j = i + 1; j < end; j++) {
          if (count == cap) kinds = kiln_realloc(kinds, (cap *= 2) * sizeof *kinds);
          kinds[count++] = cconv_kind(frag[j]);
        }
      }
      span++;
      i = end;
      continue;
    }
    if (count == cap) kinds = kiln_realloc(kinds, (cap *= 2) * sizeof *kinds);
    kinds[count++] = cconv_kind(frag[i]);
  }
  if (span != n_spans) {
    kiln_free(kinds);
    *why = "more span counts than C...D spans in the calling convention";
    return false;
  }
  *out_kinds = kinds;
  *out_n = count;
  return true;
}

/* ---- the assembler ---- */

typedef struct block_s {
  uint32_t pc;
  bool begun;
} block_t;

typedef struct fixup_s {
  size_t at; /* byte offset of the u32 to patch */
  kiln_vmfb_block_t block;
} fixup_t;

struct kiln_vmfb_bytecode_s {
  kiln_buf_t code;
  kiln_status_t status;
  char *cconv;
  char *results; /* the result fragment, "" for none */
  kiln_vmfb_reg_t *args;
  size_t n_args;
  uint32_t base_i32, base_ref; /* first slots after the arguments */
  uint32_t next_i32, next_ref;
  uint32_t max_i32, max_ref; /* high-water marks: the descriptor counts */
  block_t *blocks;
  size_t n_blocks;
  fixup_t *fixups;
  size_t n_fixups;
  size_t block_start; /* pc of the current block's marker */
  bool in_block;
  bool finished;
  uint32_t requirements;
  uint32_t refs_at_return; /* fewest ref registers any return released; UINT32_MAX: none */
};

static void record(kiln_vmfb_bytecode_t *bc, kiln_status_t status) {
  if (bc->status) {
    kiln_status_free(status);
  } else {
    bc->status = status;
  }
}

/* True when an op may be emitted now; records why not otherwise. */
static bool ready(kiln_vmfb_bytecode_t *bc, const char *op) {
  if (bc->status) return false;
  if (bc->finished) {
    record(bc, KILN_STATUS(KILN_STATUS_FAILED_PRECONDITION,
                           "bytecode: %s after finish; create a new assembler", op));
    return false;
  }
  if (!bc->in_block) {
    record(bc, KILN_STATUS(KILN_STATUS_FAILED_PRECONDITION,
                           "bytecode: %s at pc %zu is after a terminator; begin a block first", op,
                           bc->code.len));
    return false;
  }
  return true;
}

static void put_u8(kiln_vmfb_bytecode_t *bc, uint8_t v) { kiln_buf_append(&bc->code, &v, 1); }

static void put_u16(kiln_vmfb_bytecode_t *bc, uint16_t v) {
  uint8_t b[2] = {(uint8_t)v, (uint8_t)(v >> 8)};
  kiln_buf_append(&bc->code, b, sizeof b);
}

static void put_u32(kiln_vmfb_bytecode_t *bc, uint32_t v) {
  uint8_t b[4];
  for (int i = 0; i < 4; i++) b[i] = (uint8_t)(v >> (8 * i));
  kiln_buf_append(&bc->code, b, sizeof b);
}

static void put_u64(kiln_vmfb_bytecode_t *bc, uint64_t v) {
  uint8_t b[8];
  for (int i = 0; i < 8; i++) b[i] = (uint8_t)(v >> (8 * i));
  kiln_buf_append(&bc->code, b, sizeof b);
}

/* Lists start at an even pc (the decoder aligns before reading the count). */
static void align2(kiln_vmfb_bytecode_t *bc) {
  if (bc->code.len & 1) put_u8(bc, 0);
}

/* Checks that `reg` is a register of `kind` this assembler handed out. */
static bool reg_check(kiln_vmfb_bytecode_t *bc, kiln_vmfb_reg_t reg, kiln_vmfb_reg_kind_t kind,
                      const char *op, const char *field) {
  bool ok = reg.kind == kind;
  if (ok && kind == KILN_VMFB_REG_I32) ok = reg.ordinal < bc->max_i32;
  if (ok && kind == KILN_VMFB_REG_I64) ok = !(reg.ordinal & 1) && reg.ordinal + 1u < bc->max_i32;
  if (ok && kind == KILN_VMFB_REG_REF) ok = reg.ordinal < bc->max_ref;
  if (!ok) {
    record(bc, KILN_STATUS(KILN_STATUS_INVALID_ARGUMENT,
                           "bytecode: %s %s needs an allocated %s register, got %s %u", op, field,
                           kind_name(kind), kind_name(reg.kind), reg.ordinal));
  }
  return ok;
}

static uint16_t reg_encode(kiln_vmfb_reg_t reg) {
  return reg.kind == KILN_VMFB_REG_REF ? (uint16_t)(REF_TYPE_BIT | reg.ordinal) : reg.ordinal;
}

static void put_reg(kiln_vmfb_bytecode_t *bc, kiln_vmfb_reg_t reg) { put_u16(bc, reg_encode(reg)); }

static void put_target(kiln_vmfb_bytecode_t *bc, kiln_vmfb_block_t block) {
  bc->fixups = kiln_realloc(bc->fixups, (bc->n_fixups + 1) * sizeof *bc->fixups);
  bc->fixups[bc->n_fixups++] = (fixup_t){.at = bc->code.len, .block = block};
  put_u32(bc, 0);
}

static bool block_check(kiln_vmfb_bytecode_t *bc, kiln_vmfb_block_t block, const char *op) {
  if (block >= bc->n_blocks) {
    record(bc,
           KILN_STATUS(KILN_STATUS_INVALID_ARGUMENT,
                       "bytecode: %s targets block %u but only %zu were declared", op, block, bc->n_blocks));
    return false;
  }
  return true;
}

kiln_status_t kiln_vmfb_bytecode_create(const char *cconv, kiln_vmfb_bytecode_t **out_bc) {
  *out_bc = NULL;
  const char *args, *results;
  size_t n_args, n_results;
  if (!cconv_split(cconv, &args, &n_args, &results, &n_results) || memchr(args, 'C', n_args) != NULL) {
    return KILN_STATUS(KILN_STATUS_INVALID_ARGUMENT,
                       "bytecode: calling convention \"%s\" is not \"0<args>_<results>\" over "
                       "i/I/f/F/r (\"v\" for none, no variadic spans)",
                       cconv ? cconv : "(null)");
  }
  kiln_vmfb_bytecode_t *bc = kiln_calloc(1, sizeof *bc);
  kiln_buf_init(&bc->code);
  bc->cconv = kiln_strdup(cconv);
  bc->results = kiln_strndup(results, n_results);
  bc->args = kiln_calloc(n_args ? n_args : 1, sizeof *bc->args);
  for (size_t i = 0; i < n_args; i++) {
    kiln_vmfb_reg_kind_t kind = cconv_kind(args[i]);
    if (kind == KILN_VMFB_REG_I64 && (bc->next_i32 & 1)) bc->next_i32++;
    uint32_t *next = kind == KILN_VMFB_REG_REF ? &bc->next_ref : &bc->next_i32;
    bc->args[bc->n_args++] = (kiln_vmfb_reg_t){.kind = kind, .ordinal = (uint16_t)*next};
    *next += kind == KILN_VMFB_REG_I64 ? 2 : 1;
  }
  bc->base_i32 = bc->max_i32 = bc->next_i32;
  bc->base_ref = bc->max_ref = bc->next_ref;
  bc->refs_at_return = UINT32_MAX;
  if (bc->max_i32 > KILN_VMFB_MAX_I32_REGISTERS || bc->max_ref > KILN_VMFB_MAX_REF_REGISTERS) {
    kiln_vmfb_bytecode_destroy(bc);
    return KILN_STATUS(KILN_STATUS_RESOURCE_EXHAUSTED,
                       "bytecode: calling convention \"%s\" has more arguments than a VM "
                       "function has registers",
                       cconv);
  }
  kiln_vmfb_block_t entry = kiln_vmfb_bytecode_block_declare(bc);
  kiln_vmfb_bytecode_block_begin(bc, entry);
  *out_bc = bc;
  return NULL;
}

void kiln_vmfb_bytecode_destroy(kiln_vmfb_bytecode_t *bc) {
  if (!bc) return;
  kiln_buf_deinit(&bc->code);
  kiln_status_free(bc->status);
  kiln_free(bc->cconv);
  kiln_free(bc->results);
  kiln_free(bc->args);
  kiln_free(bc->blocks);
  kiln_free(bc->fixups);
  kiln_free(bc);
}

kiln_status_t kiln_vmfb_bytecode_status(const kiln_vmfb_bytecode_t *bc) { return bc->status; }

kiln_vmfb_reg_t kiln_vmfb_bytecode_arg(kiln_vmfb_bytecode_t *bc, size_t index) {
  if (index >= bc->n_args) {
    record(bc, KILN_STATUS(KILN_STATUS_INVALID_ARGUMENT,
                           "bytecode: argument %zu of a function taking %zu (cconv \"%s\")", index,
                           bc->n_args, bc->cconv));
    return (kiln_vmfb_reg_t){0};
  }
  return bc->args[index];
}

static kiln_vmfb_reg_t alloc_reg(kiln_vmfb_bytecode_t *bc, kiln_vmfb_reg_kind_t kind) {
  bool ref = kind == KILN_VMFB_REG_REF;
  uint32_t *next = ref ? &bc->next_ref : &bc->next_i32;
  uint32_t *max = ref ? &bc->max_ref : &bc->max_i32;
  uint32_t limit = ref ? KILN_VMFB_MAX_REF_REGISTERS : KILN_VMFB_MAX_I32_REGISTERS;
  uint32_t at = *next;
  if (kind == KILN_VMFB_REG_I64) at = (at + 1) & ~1u;
  uint32_t end = at + (kind == KILN_VMFB_REG_I64 ? 2 : 1);
  if (end > limit) {
    record(bc, KILN_STATUS(KILN_STATUS_RESOURCE_EXHAUSTED,
                           "bytecode: function needs more than %u %s registers; split it or "
                           "release temporaries (kiln_vmfb_bytecode_release)",
                           limit, ref ? "ref" : "i32"));
    return (kiln_vmfb_reg_t){0};
  }
  *next = end;
  if (end > *max) *max = end;
  return (kiln_vmfb_reg_t){.kind = kind, .ordinal = (uint16_t)at};
}

kiln_vmfb_reg_t kiln_vmfb_bytecode_i32(kiln_vmfb_bytecode_t *bc) { return alloc_reg(bc, KILN_VMFB_REG_I32); }

kiln_vmfb_reg_t kiln_vmfb_bytecode_i64(kiln_vmfb_bytecode_t *bc) { return alloc_reg(bc, KILN_VMFB_REG_I64); }

kiln_vmfb_reg_t kiln_vmfb_bytecode_ref(kiln_vmfb_bytecode_t *bc) { return alloc_reg(bc, KILN_VMFB_REG_REF); }

kiln_vmfb_bytecode_mark_t kiln_vmfb_bytecode_mark(const kiln_vmfb_bytecode_t *bc) {
  return (kiln_vmfb_bytecode_mark_t){.i32 = (uint16_t)bc->next_i32, .ref = (uint16_t)bc->next_ref};
}

void kiln_vmfb_bytecode_release(kiln_vmfb_bytecode_t *bc, kiln_vmfb_bytecode_mark_t mark) {
  /* Never below the arguments, never above what is allocated. */
  if (mark.i32 >= bc->base_i32 && mark.i32 <= bc->next_i32) bc->next_i32 = mark.i32;
  if (mark.ref >= bc->base_ref && mark.ref <= bc->next_ref) bc->next_ref = mark.ref;
}

kiln_vmfb_block_t kiln_vmfb_bytecode_block_declare(kiln_vmfb_bytecode_t *bc) {
  if (bc->n_blocks >= KILN_VMFB_MAX_BLOCKS) {
    record(bc, KILN_STATUS(KILN_STATUS_RESOURCE_EXHAUSTED, "bytecode: function needs more than %u blocks",
                           KILN_VMFB_MAX_BLOCKS));
    return 0;
  }
  bc->blocks = kiln_realloc(bc->blocks, (bc->n_blocks + 1) * sizeof *bc->blocks);
  bc->blocks[bc->n_blocks] = (block_t){0};
  return (kiln_vmfb_block_t)bc->n_blocks++;
}

/* A block may hold at most 16 MiB (the runtime steals the pc's top bits). */
static void block_size_check(kiln_vmfb_bytecode_t *bc) {
  if (bc->code.len - bc->block_start > KILN_VMFB_MAX_BLOCK_BYTES) {
    record(bc, KILN_STATUS(KILN_STATUS_RESOURCE_EXHAUSTED,
                           "bytecode: a block of %zu bytes exceeds the VM's %u-byte block limit",
                           bc->code.len - bc->block_start, KILN_VMFB_MAX_BLOCK_BYTES));
  }
}

void kiln_vmfb_bytecode_block_begin(kiln_vmfb_bytecode_t *bc, kiln_vmfb_block_t block) {
  if (bc->status) return;
  if (bc->finished || bc->in_block) {
    record(bc, KILN_STATUS(KILN_STATUS_FAILED_PRECONDITION,
                           "bytecode: block %u begun at pc %zu while the previous block has no "
                           "terminator (br, cond_br, return, fail or a yieldable call)",
                           block, bc->code.len));
    return;
  }
  if (!block_check(bc, block, "block_begin")) return;
  if (bc->blocks[block].begun) {
    record(bc, KILN_STATUS(KILN_STATUS_FAILED_PRECONDITION, "bytecode: block %u begun twice", block));
    return;
  }
  block_size_check(bc);
  if (bc->code.len >= KILN_VMFB_MAX_BLOCK_BYTES) {
    record(bc, KILN_STATUS(KILN_STATUS_RESOURCE_EXHAUSTED,
                           "bytecode: block %u would start past the VM's %u-byte pc limit", block,
                           KILN_VMFB_MAX_BLOCK_BYTES));
    return;
  }
  bc->blocks[block] = (block_t){.pc = (uint32_t)bc->code.len, .begun = true};
  bc->block_start = bc->code.len;
  bc->in_block = true;
  put_u8(bc, OP_BLOCK);
}

static void terminate(kiln_vmfb_bytecode_t *bc) {
  block_size_check(bc);
  bc->in_block = false;
}

/* ---- simple ops ---- */

void kiln_vmfb_bytecode_const_i32(kiln_vmfb_bytecode_t *bc, int32_t value, kiln_vmfb_reg_t dst) {
  if (!ready(bc, "const.i32") || !reg_check(bc, dst, KILN_VMFB_REG_I32, "const.i32", "result")) {
    return;
  }
  if (value == 0) {
    put_u8(bc, OP_CONST_I32_ZERO);
  } else {
    put_u8(bc, OP_CONST_I32);
    put_u32(bc, (uint32_t)value);
  }
  put_reg(bc, dst);
}

void kiln_vmfb_bytecode_const_i64(kiln_vmfb_bytecode_t *bc, int64_t value, kiln_vmfb_reg_t dst) {
  if (!ready(bc, "const.i64") || !reg_check(bc, dst, KILN_VMFB_REG_I64, "const.i64", "result")) {
    return;
  }
  if (value == 0) {
    put_u8(bc, OP_CONST_I64_ZERO);
  } else {
    put_u8(bc, OP_CONST_I64);
    put_u64(bc, (uint64_t)value);
  }
  put_reg(bc, dst);
}

void kiln_vmfb_bytecode_const_ref_zero(kiln_vmfb_bytecode_t *bc, kiln_vmfb_reg_t dst) {
  if (!ready(bc, "const.ref.zero") || !reg_check(bc, dst, KILN_VMFB_REG_REF, "const.ref.zero", "result")) {
    return;
  }
  put_u8(bc, OP_CONST_REF_ZERO);
  put_reg(bc, dst);
}

void kiln_vmfb_bytecode_assign_ref(kiln_vmfb_bytecode_t *bc, kiln_vmfb_reg_t src, kiln_vmfb_reg_t dst) {
  if (!ready(bc, "assign.ref") || !reg_check(bc, src, KILN_VMFB_REG_REF, "assign.ref", "source") ||
      !reg_check(bc, dst, KILN_VMFB_REG_REF, "assign.ref", "result")) {
    return;
  }
  put_u8(bc, OP_ASSIGN_REF);
  put_reg(bc, src);
  put_reg(bc, dst);
}

void kiln_vmfb_bytecode_const_ref_rodata(kiln_vmfb_bytecode_t *bc, uint32_t rodata, kiln_vmfb_reg_t dst) {
  if (!ready(bc, "const.ref.rodata") ||
      !reg_check(bc, dst, KILN_VMFB_REG_REF, "const.ref.rodata", "result")) {
    return;
  }
  put_u8(bc, OP_CONST_REF_RODATA);
  put_u32(bc, rodata);
  put_reg(bc, dst);
}

static void global_op(kiln_vmfb_bytecode_t *bc, uint8_t opcode, const char *name, uint32_t at,
                      const uint32_t *type, kiln_vmfb_reg_t reg, kiln_vmfb_reg_kind_t kind) {
  if (!ready(bc, name) || !reg_check(bc, reg, kind, name, "value")) return;
  if (kind == KILN_VMFB_REG_I64 && (at & 7)) {
    record(bc, KILN_STATUS(KILN_STATUS_INVALID_ARGUMENT, "bytecode: %s byte offset %u is not 8-byte aligned",
                           name, at));
    return;
  }
  put_u8(bc, opcode);
  put_u32(bc, at);
  if (type) put_u32(bc, *type);
  put_reg(bc, reg);
}

void kiln_vmfb_bytecode_global_load_i32(kiln_vmfb_bytecode_t *bc, uint32_t byte_offset, kiln_vmfb_reg_t dst) {
  global_op(bc, OP_GLOBAL_LOAD_I32, "global.load.i32", byte_offset, NULL, dst, KILN_VMFB_REG_I32);
}

void kiln_vmfb_bytecode_global_store_i32(kiln_vmfb_bytecode_t *bc, uint32_t byte_offset,
                                         kiln_vmfb_reg_t src) {
  global_op(bc, OP_GLOBAL_STORE_I32, "global.store.i32", byte_offset, NULL, src, KILN_VMFB_REG_I32);
}

void kiln_vmfb_bytecode_global_load_i64(kiln_vmfb_bytecode_t *bc, uint32_t byte_offset, kiln_vmfb_reg_t dst) {
  global_op(bc, OP_GLOBAL_LOAD_I64, "global.load.i64", byte_offset, NULL, dst, KILN_VMFB_REG_I64);
}

void kiln_vmfb_bytecode_global_store_i64(kiln_vmfb_bytecode_t *bc, uint32_t byte_offset,
                                         kiln_vmfb_reg_t src) {
  global_op(bc, OP_GLOBAL_STORE_I64, "global.store.i64", byte_offset, NULL, src, KILN_VMFB_REG_I64);
}

void kiln_vmfb_bytecode_global_load_ref(kiln_vmfb_bytecode_t *bc, uint32_t global, uint32_t type,
                                        kiln_vmfb_reg_t dst) {
  global_op(bc, OP_GLOBAL_LOAD_REF, "global.load.ref", global, &type, dst, KILN_VMFB_REG_REF);
}

void kiln_vmfb_bytecode_global_store_ref(kiln_vmfb_bytecode_t *bc, uint32_t global, uint32_t type,
                                         kiln_vmfb_reg_t src) {
  global_op(bc, OP_GLOBAL_STORE_REF, "global.store.ref", global, &type, src, KILN_VMFB_REG_REF);
}

/* An op of operand registers then one result register. */
static void reg_op(kiln_vmfb_bytecode_t *bc, uint8_t opcode, const char *name,
                   kiln_vmfb_reg_kind_t operand_kind, const kiln_vmfb_reg_t *operands, size_t n,
                   kiln_vmfb_reg_kind_t result_kind, kiln_vmfb_reg_t result) {
  if (!ready(bc, name)) return;
  for (size_t i = 0; i < n; i++) {
    if (!reg_check(bc, operands[i], operand_kind, name, "operand")) return;
  }
  if (!reg_check(bc, result, result_kind, name, "result")) return;
  put_u8(bc, opcode);
  for (size_t i = 0; i < n; i++) put_reg(bc, operands[i]);
  put_reg(bc, result);
}

void kiln_vmfb_bytecode_add_i32(kiln_vmfb_bytecode_t *bc, kiln_vmfb_reg_t a, kiln_vmfb_reg_t b,
                                kiln_vmfb_reg_t dst) {
  kiln_vmfb_reg_t ops[2] = {a, b};
  reg_op(bc, OP_ADD_I32, "add.i32", KILN_VMFB_REG_I32, ops, 2, KILN_VMFB_REG_I32, dst);
}

void kiln_vmfb_bytecode_add_i64(kiln_vmfb_bytecode_t *bc, kiln_vmfb_reg_t a, kiln_vmfb_reg_t b,
                                kiln_vmfb_reg_t dst) {
  kiln_vmfb_reg_t ops[2] = {a, b};
  reg_op(bc, OP_ADD_I64, "add.i64", KILN_VMFB_REG_I64, ops, 2, KILN_VMFB_REG_I64, dst);
}

void kiln_vmfb_bytecode_i64_binary(kiln_vmfb_bytecode_t *bc, kiln_vmfb_i64_op_t op, kiln_vmfb_reg_t a,
                                   kiln_vmfb_reg_t b, kiln_vmfb_reg_t dst) {
  kiln_vmfb_reg_t ops[2] = {a, b};
  bool compare = op == KILN_VMFB_I64_CMP_EQ || op == KILN_VMFB_I64_CMP_NE || op == KILN_VMFB_I64_CMP_LT_S ||
                 op == KILN_VMFB_I64_CMP_LT_U;
  bool known = compare || (op >= KILN_VMFB_I64_ADD && op <= KILN_VMFB_I64_REM_U) ||
               (op >= KILN_VMFB_I64_AND && op <= KILN_VMFB_I64_XOR) ||
               (op >= KILN_VMFB_I64_MIN_S && op <= KILN_VMFB_I64_MAX_U);
  if (!known) {
    record(bc, KILN_STATUS(KILN_STATUS_INVALID_ARGUMENT, "bytecode: opcode 0x%02X is not an i64 binary op",
                           (unsigned)op));
    return;
  }
  reg_op(bc, (uint8_t)op, "i64 binary op", KILN_VMFB_REG_I64, ops, 2,
         compare ? KILN_VMFB_REG_I32 : KILN_VMFB_REG_I64, dst);
}

void kiln_vmfb_bytecode_trunc_i64_i32(kiln_vmfb_bytecode_t *bc, kiln_vmfb_reg_t a, kiln_vmfb_reg_t dst) {
  reg_op(bc, OP_TRUNC_I64_I32, "trunc.i64.i32", KILN_VMFB_REG_I64, &a, 1, KILN_VMFB_REG_I32, dst);
}

void kiln_vmfb_bytecode_ext_i32_i64_u(kiln_vmfb_bytecode_t *bc, kiln_vmfb_reg_t a, kiln_vmfb_reg_t dst) {
  reg_op(bc, OP_EXT_I32_I64_U, "ext.i32.i64.u", KILN_VMFB_REG_I32, &a, 1, KILN_VMFB_REG_I64, dst);
}

void kiln_vmfb_bytecode_select_i64(kiln_vmfb_bytecode_t *bc, kiln_vmfb_reg_t cond, kiln_vmfb_reg_t a,
                                   kiln_vmfb_reg_t b, kiln_vmfb_reg_t dst) {
  if (!ready(bc, "select.i64") || !reg_check(bc, cond, KILN_VMFB_REG_I32, "select.i64", "condition") ||
      !reg_check(bc, a, KILN_VMFB_REG_I64, "select.i64", "operand") ||
      !reg_check(bc, b, KILN_VMFB_REG_I64, "select.i64", "operand") ||
      !reg_check(bc, dst, KILN_VMFB_REG_I64, "select.i64", "result")) {
    return;
  }
  put_u8(bc, OP_SELECT_I64);
  put_reg(bc, cond);
  put_reg(bc, a);
  put_reg(bc, b);
  put_reg(bc, dst);
}

void kiln_vmfb_bytecode_select_ref(kiln_vmfb_bytecode_t *bc, kiln_vmfb_reg_t cond, uint32_t type,
                                   kiln_vmfb_reg_t a, kiln_vmfb_reg_t b, kiln_vmfb_reg_t dst) {
  if (!ready(bc, "select.ref") || !reg_check(bc, cond, KILN_VMFB_REG_I32, "select.ref", "condition") ||
      !reg_check(bc, a, KILN_VMFB_REG_REF, "select.ref", "operand") ||
      !reg_check(bc, b, KILN_VMFB_REG_REF, "select.ref", "operand") ||
      !reg_check(bc, dst, KILN_VMFB_REG_REF, "select.ref", "result")) {
    return;
  }
  put_u8(bc, OP_SELECT_REF);
  put_reg(bc, cond);
  put_u32(bc, type);
  put_reg(bc, a);
  put_reg(bc, b);
  put_reg(bc, dst);
}

void kiln_vmfb_bytecode_cmp_eq_i32(kiln_vmfb_bytecode_t *bc, kiln_vmfb_reg_t a, kiln_vmfb_reg_t b,
                                   kiln_vmfb_reg_t dst) {
  kiln_vmfb_reg_t ops[2] = {a, b};
  reg_op(bc, OP_CMP_EQ_I32, "cmp.eq.i32", KILN_VMFB_REG_I32, ops, 2, KILN_VMFB_REG_I32, dst);
}

void kiln_vmfb_bytecode_cmp_ne_i32(kiln_vmfb_bytecode_t *bc, kiln_vmfb_reg_t a, kiln_vmfb_reg_t b,
                                   kiln_vmfb_reg_t dst) {
  kiln_vmfb_reg_t ops[2] = {a, b};
  reg_op(bc, OP_CMP_NE_I32, "cmp.ne.i32", KILN_VMFB_REG_I32, ops, 2, KILN_VMFB_REG_I32, dst);
}

void kiln_vmfb_bytecode_cmp_nz_i32(kiln_vmfb_bytecode_t *bc, kiln_vmfb_reg_t a, kiln_vmfb_reg_t dst) {
  reg_op(bc, OP_CMP_NZ_I32, "cmp.nz.i32", KILN_VMFB_REG_I32, &a, 1, KILN_VMFB_REG_I32, dst);
}

void kiln_vmfb_bytecode_cmp_eq_i64(kiln_vmfb_bytecode_t *bc, kiln_vmfb_reg_t a, kiln_vmfb_reg_t b,
                                   kiln_vmfb_reg_t dst) {
  kiln_vmfb_reg_t ops[2] = {a, b};
  reg_op(bc, OP_CMP_EQ_I64, "cmp.eq.i64", KILN_VMFB_REG_I64, ops, 2, KILN_VMFB_REG_I32, dst);
}

void kiln_vmfb_bytecode_cmp_nz_ref(kiln_vmfb_bytecode_t *bc, kiln_vmfb_reg_t a, kiln_vmfb_reg_t dst) {
  reg_op(bc, OP_CMP_NZ_REF, "cmp.nz.ref", KILN_VMFB_REG_REF, &a, 1, KILN_VMFB_REG_I32, dst);
}

/* ---- lists and buffers ---- */

void kiln_vmfb_bytecode_list_get_ref(kiln_vmfb_bytecode_t *bc, kiln_vmfb_reg_t list, kiln_vmfb_reg_t index,
                                     uint32_t type, kiln_vmfb_reg_t dst) {
  if (!ready(bc, "list.get.ref") || !reg_check(bc, list, KILN_VMFB_REG_REF, "list.get.ref", "list") ||
      !reg_check(bc, index, KILN_VMFB_REG_I32, "list.get.ref", "index") ||
      !reg_check(bc, dst, KILN_VMFB_REG_REF, "list.get.ref", "result")) {
    return;
  }
  put_u8(bc, OP_LIST_GET_REF);
  put_reg(bc, list);
  put_reg(bc, index);
  put_u32(bc, type);
  put_reg(bc, dst);
}

/* buffer.load/store: ref buffer, i64 element index, then the i32 result/value. */
static void buffer_op(kiln_vmfb_bytecode_t *bc, uint8_t opcode, const char *name, kiln_vmfb_reg_t buffer,
                      kiln_vmfb_reg_t index, kiln_vmfb_reg_t value) {
  if (!ready(bc, name) || !reg_check(bc, buffer, KILN_VMFB_REG_REF, name, "buffer") ||
      !reg_check(bc, index, KILN_VMFB_REG_I64, name, "index") ||
      !reg_check(bc, value, KILN_VMFB_REG_I32, name, "value")) {
    return;
  }
  put_u8(bc, opcode);
  put_reg(bc, buffer);
  put_reg(bc, index);
  put_reg(bc, value);
}

void kiln_vmfb_bytecode_buffer_load_i32(kiln_vmfb_bytecode_t *bc, kiln_vmfb_reg_t buffer,
                                        kiln_vmfb_reg_t index, kiln_vmfb_reg_t dst) {
  buffer_op(bc, OP_BUFFER_LOAD_I32, "buffer.load.i32", buffer, index, dst);
}

void kiln_vmfb_bytecode_buffer_store_i32(kiln_vmfb_bytecode_t *bc, kiln_vmfb_reg_t buffer,
                                         kiln_vmfb_reg_t index, kiln_vmfb_reg_t value) {
  buffer_op(bc, OP_BUFFER_STORE_I32, "buffer.store.i32", buffer, index, value);
}

/* ---- control flow ---- */

void kiln_vmfb_bytecode_br(kiln_vmfb_bytecode_t *bc, kiln_vmfb_block_t dest) {
  if (!ready(bc, "br") || !block_check(bc, dest, "br")) return;
  put_u8(bc, OP_BR);
  put_target(bc, dest);
  align2(bc);
  put_u16(bc, 0); /* no remaps */
  terminate(bc);
}

void kiln_vmfb_bytecode_cond_br(kiln_vmfb_bytecode_t *bc, kiln_vmfb_reg_t cond, kiln_vmfb_block_t if_true,
                                kiln_vmfb_block_t if_false) {
  if (!ready(bc, "cond_br") || !reg_check(bc, cond, KILN_VMFB_REG_I32, "cond_br", "condition") ||
      !block_check(bc, if_true, "cond_br") || !block_check(bc, if_false, "cond_br")) {
    return;
  }
  put_u8(bc, OP_COND_BR);
  put_reg(bc, cond);
  put_target(bc, if_true);
  align2(bc);
  put_u16(bc, 0);
  put_target(bc, if_false);
  align2(bc);
  put_u16(bc, 0);
  terminate(bc);
}

/* Writes a register list checked against the kinds a cconv fragment expects. */
static bool put_checked_list(kiln_vmfb_bytecode_t *bc, const char *op, const char *what, const char *frag,
                             size_t n_frag, const uint16_t *spans, size_t n_spans,
                             const kiln_vmfb_reg_t *regs, size_t n_regs) {
  kiln_vmfb_reg_kind_t *kinds = NULL;
  size_t n_kinds = 0;
  const char *why = NULL;
  if (!cconv_expand(frag, n_frag, spans, n_spans, &kinds, &n_kinds, &why)) {
    record(bc, KILN_STATUS(KILN_STATUS_INVALID_ARGUMENT, "bytecode: %s %s: %s", op, what, why));
    return false;
  }
  bool ok = n_kinds == n_regs;
  if (!ok) {
    record(bc, KILN_STATUS(KILN_STATUS_INVALID_ARGUMENT,
                           "bytecode: %s passes %zu %s where its calling convention takes %zu", op, n_regs,
                           what, n_kinds));
  }
  for (size_t i = 0; ok && i < n_regs; i++) ok = reg_check(bc, regs[i], kinds[i], op, what);
  kiln_free(kinds);
  if (!ok) return false;
  if (n_regs > MAX_LIST) {
    record(bc, KILN_STATUS(KILN_STATUS_OUT_OF_RANGE, "bytecode: %s has %zu %s (max %d)", op, n_regs, what,
                           MAX_LIST));
    return false;
  }
  align2(bc);
  put_u16(bc, (uint16_t)n_regs);
  for (size_t i = 0; i < n_regs; i++) put_reg(bc, regs[i]);
  return true;
}

typedef struct call_s {
  uint8_t opcode;
  const char *name;
  bool variadic;
  bool yieldable;
} call_t;

static void emit_call(kiln_vmfb_bytecode_t *bc, const call_t *kind, uint32_t callee, const char *cconv,
                      const uint16_t *spans, size_t n_spans, const kiln_vmfb_reg_t *args, size_t n_args,
                      const kiln_vmfb_reg_t *results, size_t n_results, kiln_vmfb_block_t resume) {
  if (!ready(bc, kind->name)) return;
  const char *fa, *fr;
  size_t na, nr;
  if (!cconv_split(cconv, &fa, &na, &fr, &nr)) {
    record(bc, KILN_STATUS(KILN_STATUS_INVALID_ARGUMENT,
                           "bytecode: %s to %08X: calling convention \"%s\" is malformed", kind->name, callee,
                           cconv ? cconv : "(null)"));
    return;
  }
  bool has_span = memchr(fa, 'C', na) != NULL;
  if (has_span != kind->variadic) {
    record(bc,
           KILN_STATUS(
               KILN_STATUS_INVALID_ARGUMENT, "bytecode: %s to %08X with calling convention \"%s\"; %s",
               kind->name, callee, cconv,
               has_span ? "variadic callees need call_variadic" : "call_variadic needs a variadic callee"));
    return;
  }
  if (kind->variadic && !(callee & KILN_VMFB_IMPORT_BIT)) {
    record(bc, KILN_STATUS(KILN_STATUS_INVALID_ARGUMENT,
                           "bytecode: %s to internal function %u; the VM supports variadic calls "
                           "to imports only",
                           kind->name, callee));
    return;
  }
  if (kind->yieldable && !block_check(bc, resume, kind->name)) return;
  size_t start = bc->code.len;
  put_u8(bc, kind->opcode);
  put_u32(bc, callee);
  if (kind->variadic) {
    /* One entry per top-level argument: the span's repeat count or -1. */
    align2(bc);
    size_t count_at = bc->code.len;
    put_u16(bc, 0);
    uint16_t n_segments = 0;
    size_t span = 0;
    for (size_t i = 0; i < na; i++, n_segments++) {
      if (fa[i] == 'C') {
        put_u16(bc, span < n_spans ? spans[span] : 0);
        span++;
        while (fa[i] != 'D') i++;
      } else {
        put_u16(bc, SEGMENT_FIXED);
      }
    }
    bc->code.data[count_at] = (char)(uint8_t)n_segments;
    bc->code.data[count_at + 1] = (char)(uint8_t)(n_segments >> 8);
  }
  bool ok = put_checked_list(bc, kind->name, "arguments", fa, na, spans, n_spans, args, n_args);
  if (ok && kind->yieldable) put_target(bc, resume);
  if (ok) ok = put_checked_list(bc, kind->name, "results", fr, nr, NULL, 0, results, n_results);
  if (!ok) {
    /* Keep the stream well-formed for whoever inspects it after the error. */
    bc->code.len = start;
    bc->code.data[start] = '\0';
    while (bc->n_fixups && bc->fixups[bc->n_fixups - 1].at >= start) bc->n_fixups--;
    return;
  }
  if (kind->yieldable) {
    bc->requirements |= KILN_VMFB_FEATURE_YIELD;
    terminate(bc);
  }
}

void kiln_vmfb_bytecode_call(kiln_vmfb_bytecode_t *bc, uint32_t callee, const char *cconv,
                             const kiln_vmfb_reg_t *args, size_t n_args, const kiln_vmfb_reg_t *results,
                             size_t n_results) {
  static const call_t kind = {OP_CALL, "call", false, false};
  emit_call(bc, &kind, callee, cconv, NULL, 0, args, n_args, results, n_results, 0);
}

void kiln_vmfb_bytecode_call_variadic(kiln_vmfb_bytecode_t *bc, uint32_t callee, const char *cconv,
                                      const uint16_t *spans, size_t n_spans, const kiln_vmfb_reg_t *args,
                                      size_t n_args, const kiln_vmfb_reg_t *results, size_t n_results) {
  static const call_t kind = {OP_CALL_VARIADIC, "call.variadic", true, false};
  emit_call(bc, &kind, callee, cconv, spans, n_spans, args, n_args, results, n_results, 0);
}

void kiln_vmfb_bytecode_call_yieldable(kiln_vmfb_bytecode_t *bc, uint32_t callee, const char *cconv,
                                       const kiln_vmfb_reg_t *args, size_t n_args,
                                       const kiln_vmfb_reg_t *results, size_t n_results,
                                       kiln_vmfb_block_t resume) {
  static const call_t kind = {OP_CALL_YIELDABLE, "call.yieldable", false, true};
  emit_call(bc, &kind, callee, cconv, NULL, 0, args, n_args, results, n_results, resume);
}

void kiln_vmfb_bytecode_call_variadic_yieldable(kiln_vmfb_bytecode_t *bc, uint32_t callee, const char *cconv,
                                                const uint16_t *spans, size_t n_spans,
                                                const kiln_vmfb_reg_t *args, size_t n_args,
                                                const kiln_vmfb_reg_t *results, size_t n_results,
                                                kiln_vmfb_block_t resume) {
  static const call_t kind = {OP_CALL_VARIADIC_YIELDABLE, "call.variadic.yieldable", true, true};
  emit_call(bc, &kind, callee, cconv, spans, n_spans, args, n_args, results, n_results, resume);
}

void kiln_vmfb_bytecode_discard_refs(kiln_vmfb_bytecode_t *bc, const kiln_vmfb_reg_t *regs, size_t n_regs) {
  if (!ready(bc, "discard.refs")) return;
  if (n_regs > MAX_LIST) {
    record(bc, KILN_STATUS(KILN_STATUS_OUT_OF_RANGE, "bytecode: discard.refs of %zu registers", n_regs));
    return;
  }
  for (size_t i = 0; i < n_regs; i++) {
    if (!reg_check(bc, regs[i], KILN_VMFB_REG_REF, "discard.refs", "register")) return;
  }
  put_u8(bc, OP_DISCARD_REFS);
  align2(bc);
  put_u16(bc, (uint16_t)n_regs);
  for (size_t i = 0; i < n_regs; i++) put_reg(bc, regs[i]);
}

void kiln_vmfb_bytecode_return(kiln_vmfb_bytecode_t *bc, const kiln_vmfb_reg_t *values, size_t n_values) {
  if (!ready(bc, "return")) return;
  /* Leave the frame clean: release every ref register not being returned. */
  kiln_vmfb_reg_t *dead = kiln_malloc((bc->max_ref ? bc->max_ref : 1) * sizeof *dead);
  size_t n_dead = 0;
  for (uint32_t r = 0; r < bc->max_ref; r++) {
    bool returned = false;
    for (size_t i = 0; i < n_values && !returned; i++) {
      returned = values[i].kind == KILN_VMFB_REG_REF && values[i].ordinal == r;
    }
    if (!returned) dead[n_dead++] = (kiln_vmfb_reg_t){.kind = KILN_VMFB_REG_REF, .ordinal = (uint16_t)r};
  }
  size_t start = bc->code.len;
  if (n_dead) kiln_vmfb_bytecode_discard_refs(bc, dead, n_dead);
  kiln_free(dead);
  if (bc->status) return;
  put_u8(bc, OP_RETURN);
  if (!put_checked_list(bc, "return", "values", bc->results, strlen(bc->results), NULL, 0, values,
                        n_values)) {
    bc->code.len = start;
    bc->code.data[start] = '\0';
    return;
  }
  /* Move returned refs out of their registers (only the last of duplicates). */
  size_t list = bc->code.len - 2 * n_values;
  for (size_t i = 0; i < n_values; i++) {
    if (values[i].kind != KILN_VMFB_REG_REF) continue;
    bool later = false;
    for (size_t j = i + 1; j < n_values && !later; j++) {
      later = values[j].kind == KILN_VMFB_REG_REF && values[j].ordinal == values[i].ordinal;
    }
    if (!later) bc->code.data[list + 2 * i + 1] |= (char)(REF_MOVE_BIT >> 8);
  }
  if (bc->max_ref < bc->refs_at_return) bc->refs_at_return = bc->max_ref;
  terminate(bc);
}

void kiln_vmfb_bytecode_fail(kiln_vmfb_bytecode_t *bc, kiln_vmfb_reg_t status, const char *message) {
  if (!ready(bc, "fail") || !reg_check(bc, status, KILN_VMFB_REG_I32, "fail", "status")) return;
  size_t len = message ? strlen(message) : 0;
  if (len > 0xFFFF) {
    record(bc,
           KILN_STATUS(KILN_STATUS_OUT_OF_RANGE, "bytecode: fail message of %zu bytes exceeds 65535", len));
    return;
  }
  put_u8(bc, OP_FAIL);
  put_reg(bc, status);
  put_u16(bc, (uint16_t)len);
  kiln_buf_append(&bc->code, message ? message : "", len);
  terminate(bc);
}

kiln_status_t kiln_vmfb_bytecode_finish(kiln_vmfb_bytecode_t *bc, kiln_vmfb_vm_function_t *fn) {
  if (bc->finished) {
    return KILN_STATUS(KILN_STATUS_FAILED_PRECONDITION, "bytecode: finish called twice");
  }
  bc->finished = true;
  if (bc->status) {
    /* Hand the recorded error over; the assembler no longer owns it. */
    kiln_status_t status = bc->status;
    bc->status = NULL;
    return status;
  }
  if (bc->in_block) {
    return KILN_STATUS(KILN_STATUS_FAILED_PRECONDITION,
                       "bytecode: the last block (at pc %zu) has no terminator; end it with "
                       "return, fail or a branch",
                       bc->block_start);
  }
  if (bc->refs_at_return != UINT32_MAX && bc->max_ref > bc->refs_at_return) {
    return KILN_STATUS(KILN_STATUS_FAILED_PRECONDITION,
                       "bytecode: ref register %u was allocated after a return that does not "
                       "release it (allocate every ref register before emitting returns)",
                       bc->refs_at_return);
  }
  for (size_t b = 0; b < bc->n_blocks; b++) {
    if (!bc->blocks[b].begun) {
      return KILN_STATUS(KILN_STATUS_FAILED_PRECONDITION, "bytecode: block %zu was declared but never begun",
                         b);
    }
  }
  for (size_t i = 0; i < bc->n_fixups; i++) {
    uint32_t pc = bc->blocks[bc->fixups[i].block].pc;
    for (int k = 0; k < 4; k++) bc->code.data[bc->fixups[i].at + k] = (char)(uint8_t)(pc >> (8 * k));
  }
  kiln_free(fn->bytecode);
  kiln_free(fn->cconv);
  fn->bytecode_len = bc->code.len;
  fn->bytecode = (uint8_t *)kiln_buf_take(&bc->code);
  fn->block_count = (uint16_t)bc->n_blocks;
  fn->i32_register_count = (uint16_t)bc->max_i32;
  fn->ref_register_count = (uint16_t)bc->max_ref;
  fn->requirements = bc->requirements;
  fn->cconv = kiln_strdup(bc->cconv);
  return NULL;
}

/* ---- the verifier ---- */

/* Field layouts of the straight-line ops: one char per field in decode order.
 *   i  i32 register          I  i64 register        r  ref register (no MOVE)
 *   R  ref register (MOVE allowed)                   t  u32 types ordinal
 *   4  u32 rwdata offset of a 4-byte global          8  ... of an 8-byte global
 *   g  u32 global ref ordinal                        d  u32 rodata ordinal
 *   w  u32 immediate                                 W  u64 immediate
 *   L  register list of refs (any MOVE)
 */
static const char *op_fields(uint8_t opcode) {
  switch (opcode) {
    case OP_GLOBAL_LOAD_I32:
    case OP_GLOBAL_STORE_I32: return "4i";
    case OP_GLOBAL_LOAD_I64:
    case OP_GLOBAL_STORE_I64: return "8I";
    case OP_GLOBAL_LOAD_REF:
    case OP_GLOBAL_STORE_REF: return "gtR";
    case OP_CONST_I32_ZERO: return "i";
    case OP_CONST_I32: return "wi";
    case OP_CONST_I64_ZERO: return "I";
    case OP_CONST_I64: return "WI";
    case OP_CONST_REF_ZERO: return "R";
    case OP_CONST_REF_RODATA: return "dR";
    case 0x14: return "ri"; /* list.size */
    case OP_LIST_GET_REF: return "ritR";
    case 0x62:
    case 0x63:
    case 0x64:
    case 0x65:
    case OP_BUFFER_LOAD_I32: /* load i8..i32 */
    case 0x68:
    case 0x69:
    case OP_BUFFER_STORE_I32: /* store i8..i32 */ return "rIi";
    case 0x22:
    case 0x23:
    case 0x24:
    case 0x25:
    case 0x26:
    case 0x27:
    case 0x28: /* i32 arith */
    case 0x33:
    case 0x34:
    case 0x35: /* and/or/xor */
    case 0x49:
    case 0x4A:
    case 0x4B:
    case 0x4C: /* cmp i32 */ return "iii";
    case 0x2A:
    case 0x2B:
    case 0x2C:
    case 0x2D:
    case 0x2E:
    case 0x2F:
    case 0x30: /* i64 arith */
    case 0x37:
    case 0x38:
    case 0x39:
    case 0x7E:
    case 0x7F:
    case 0x80:
    case 0x81: /* min/max i64 */ return "III";
    case 0x1C: return "iiii"; /* select.i32 */
    case OP_SELECT_I64: return "iIII";
    case OP_SELECT_REF: return "itRRR";
    case OP_TRUNC_I64_I32: return "Ii";
    case 0x47:
    case OP_EXT_I32_I64_U: return "iI";
    case 0x4D: return "ii"; /* cmp.nz.i32 */
    case 0x4E:
    case 0x4F:
    case 0x50:
    case 0x51: return "IIi"; /* cmp i64 */
    case 0x52: return "Ii";  /* cmp.nz.i64 */
    case 0x53:
    case 0x54: return "rri"; /* cmp.eq/ne.ref */
    case OP_CMP_NZ_REF: return "ri";
    case OP_DISCARD_REFS: return "L";
    case OP_ASSIGN_REF: return "RR";
    default: return NULL;
  }
}

typedef struct verify_s {
  const kiln_vmfb_vm_module_t *module;
  const kiln_vmfb_vm_function_t *fn;
  size_t index;
  const uint8_t *code;
  size_t len;
  size_t pc;    /* read position */
  size_t start; /* start of the op being verified */
  uint32_t *markers;
  size_t n_markers;
  uint32_t *targets;
  size_t n_targets;
  kiln_status_t status;
} verify_t;

static bool vfail(verify_t *v, kiln_status_code_t code, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

static bool vfail(verify_t *v, kiln_status_code_t code, const char *fmt, ...) {
  char what[256];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(what, sizeof what, fmt, ap);
  va_end(ap);
  if (!v->status) {
    v->status = KILN_STATUS(code, "bytecode verify: function %zu (%s) +%08zX: %s", v->index,
                            v->fn->name ? v->fn->name : "?", v->start, what);
  }
  return false;
}

static bool need(verify_t *v, size_t n) {
  if (v->pc + n > v->len) {
    return vfail(v, KILN_STATUS_OUT_OF_RANGE, "op runs past the end of the function (%zu bytes)", v->len);
  }
  return true;
}

static bool read_u16(verify_t *v, uint16_t *out) {
  if (!need(v, 2)) return false;
  *out = (uint16_t)(v->code[v->pc] | v->code[v->pc + 1] << 8);
  v->pc += 2;
  return true;
}

static bool read_u32(verify_t *v, uint32_t *out) {
  if (!need(v, 4)) return false;
  *out = 0;
  for (int i = 0; i < 4; i++) *out |= (uint32_t)v->code[v->pc + i] << (8 * i);
  v->pc += 4;
  return true;
}

/* Checks one encoded register against the exact descriptor counts. */
static bool check_reg(verify_t *v, uint16_t reg, kiln_vmfb_reg_kind_t kind, bool allow_move) {
  if (kind == KILN_VMFB_REG_REF) {
    if (!(reg & REF_TYPE_BIT)) {
      return vfail(v, KILN_STATUS_INVALID_ARGUMENT, "ref register required, got i32 %u", reg);
    }
    if ((reg & REF_MOVE_BIT) && !allow_move) {
      return vfail(v, KILN_STATUS_INVALID_ARGUMENT,
                   "ref register has MOVE bit but op does not "
                   "support MOVE");
    }
    if ((reg & REF_MASK) >= v->fn->ref_register_count) {
      return vfail(v, KILN_STATUS_OUT_OF_RANGE, "ref register %u out of range %u", reg & REF_MASK,
                   v->fn->ref_register_count);
    }
    return true;
  }
  if (reg & REF_TYPE_BIT) {
    return vfail(v, KILN_STATUS_INVALID_ARGUMENT, "%s register required, got ref %u", kind_name(kind),
                 reg & REF_MASK);
  }
  if (kind == KILN_VMFB_REG_I64) {
    if (reg & 1) {
      return vfail(v, KILN_STATUS_INVALID_ARGUMENT, "i64 register %u not 8-byte aligned", reg);
    }
    if (reg + 1u >= v->fn->i32_register_count) {
      return vfail(v, KILN_STATUS_OUT_OF_RANGE, "i64 register %u:%u out of range %u", reg, reg + 1,
                   v->fn->i32_register_count);
    }
    return true;
  }
  if (reg >= v->fn->i32_register_count) {
    return vfail(v, KILN_STATUS_OUT_OF_RANGE, "i32 register %u out of range %u", reg,
                 v->fn->i32_register_count);
  }
  return true;
}

/* Reads a register list (aligned count + entries); returns a pointer into the code. */
static bool read_list(verify_t *v, const uint8_t **out, uint16_t *out_n) {
  if (v->pc & 1) {
    if (!need(v, 1)) return false;
    v->pc++;
  }
  if (!read_u16(v, out_n) || !need(v, 2u * *out_n)) return false;
  *out = v->code + v->pc;
  v->pc += 2u * *out_n;
  return true;
}

static uint16_t list_at(const uint8_t *list, size_t i) {
  return (uint16_t)(list[2 * i] | list[2 * i + 1] << 8);
}

static bool read_target(verify_t *v) {
  uint32_t pc;
  if (!read_u32(v, &pc)) return false;
  v->targets = kiln_realloc(v->targets, (v->n_targets + 1) * sizeof *v->targets);
  v->targets[v->n_targets++] = pc;
  return true;
}

static bool read_remaps(verify_t *v) {
  const uint8_t *list;
  uint16_t n;
  if (!read_list(v, &list, &n)) return false;
  /* The count is of (src, dst) pairs: read the second half too. */
  if (!need(v, 2u * n)) return false;
  v->pc += 2u * n;
  for (size_t i = 0; i < 2u * n; i++) {
    uint16_t reg = list_at(list, i);
    kiln_vmfb_reg_kind_t kind = (reg & REF_TYPE_BIT) ? KILN_VMFB_REG_REF : KILN_VMFB_REG_I32;
    if (!check_reg(v, reg, kind, true)) return false;
  }
  return true;
}

/* Checks registers of a call/return against a cconv fragment with the runtime's
 * segment semantics (entries of `segments` are consulted at spans only), and
 * that the list is consumed exactly. */
static bool check_cconv_list(verify_t *v, const char *what, const char *frag, size_t n,
                             const uint8_t *segments, uint16_t n_segments, const uint8_t *regs,
                             uint16_t n_regs) {
  size_t reg_i = 0, seg_i = 0;
  for (size_t i = 0; i < n; i++, seg_i++) {
    if (frag[i] != 'C') {
      if (reg_i >= n_regs) {
        return vfail(v, KILN_STATUS_OUT_OF_RANGE, "%s: register list underflow (have %u)", what, n_regs);
      }
      if (!check_reg(v, list_at(regs, reg_i++), cconv_kind(frag[i]), true)) return false;
      continue;
    }
    if (!segments) {
      return vfail(v, KILN_STATUS_INVALID_ARGUMENT,
                   "%s: callee is variadic but the op has no segment size list", what);
    }
    if (seg_i >= n_segments) {
      return vfail(v, KILN_STATUS_OUT_OF_RANGE, "%s: segment size list underflow (have %u)", what,
                   n_segments);
    }
    uint16_t count = list_at(segments, seg_i);
    size_t end = i + 1;
    while (frag[end] != 'D') end++;
    for (uint16_t rep = 0; rep < count; rep++) {
      for (size_t j = i + 1; j < end; j++) {
        if (reg_i >= n_regs) {
          return vfail(v, KILN_STATUS_OUT_OF_RANGE, "%s: register list underflow (have %u)", what, n_regs);
        }
        if (!check_reg(v, list_at(regs, reg_i++), cconv_kind(frag[j]), true)) return false;
      }
    }
    i = end;
  }
  if (reg_i != n_regs) {
    return vfail(v, KILN_STATUS_INVALID_ARGUMENT, "%s: %u registers where the calling convention takes %zu",
                 what, n_regs, reg_i);
  }
  return true;
}

static bool verify_call(verify_t *v, bool variadic, bool yieldable) {
  uint32_t callee;
  if (!read_u32(v, &callee)) return false;
  const uint8_t *segments = NULL, *args, *results;
  uint16_t n_segments = 0, n_args, n_results;
  if (variadic && !read_list(v, &segments, &n_segments)) return false;
  if (!read_list(v, &args, &n_args)) return false;
  if (yieldable && !read_target(v)) return false;
  if (!read_list(v, &results, &n_results)) return false;
  const char *cconv, *name;
  char label[32];
  if (callee & KILN_VMFB_IMPORT_BIT) {
    uint32_t ordinal = callee & ~KILN_VMFB_IMPORT_BIT;
    if (ordinal >= v->module->n_imports) {
      return vfail(v, KILN_STATUS_INVALID_ARGUMENT, "import ordinal %u out of range %zu", ordinal,
                   v->module->n_imports);
    }
    cconv = v->module->imports[ordinal].cconv;
    name = v->module->imports[ordinal].full_name;
  } else {
    if (variadic) {
      return vfail(v, KILN_STATUS_FAILED_PRECONDITION, "variadic call to internal function %u (imports only)",
                   callee);
    }
    if (callee >= v->module->n_functions) {
      return vfail(v, KILN_STATUS_INVALID_ARGUMENT, "function ordinal %u out of range %zu", callee,
                   v->module->n_functions);
    }
    cconv = v->module->functions[callee].cconv;
    snprintf(label, sizeof label, "internal function %u", callee);
    name = label;
  }
  const char *fa, *fr;
  size_t na, nr;
  if (!cconv_split(cconv, &fa, &na, &fr, &nr)) {
    return vfail(v, KILN_STATUS_INVALID_ARGUMENT, "call to %s: malformed calling convention %s", name,
                 cconv ? cconv : "(null)");
  }
  char what[160];
  snprintf(what, sizeof what, "call to %s arguments", name);
  if (!check_cconv_list(v, what, fa, na, segments, n_segments, args, n_args)) return false;
  snprintf(what, sizeof what, "call to %s results", name);
  return check_cconv_list(v, what, fr, nr, NULL, 0, results, n_results);
}

/* Decodes and checks the op at v->pc; *terminator says whether it ends a block. */
static bool verify_op(verify_t *v, bool *terminator) {
  uint8_t opcode = v->code[v->pc++];
  *terminator = false;
  switch (opcode) {
    case OP_BR: *terminator = true; return read_target(v) && read_remaps(v);
    case OP_COND_BR: {
      uint16_t cond;
      *terminator = true;
      return read_u16(v, &cond) && check_reg(v, cond, KILN_VMFB_REG_I32, false) && read_target(v) &&
             read_remaps(v) && read_target(v) && read_remaps(v);
    }
    case OP_CALL: return verify_call(v, false, false);
    case OP_CALL_VARIADIC: return verify_call(v, true, false);
    case OP_CALL_YIELDABLE: *terminator = true; return verify_call(v, false, true);
    case OP_CALL_VARIADIC_YIELDABLE: *terminator = true; return verify_call(v, true, true);
    case OP_RETURN: {
      const uint8_t *regs;
      uint16_t n;
      const char *fa, *fr;
      size_t na, nr;
      *terminator = true;
      if (!read_list(v, &regs, &n)) return false;
      cconv_split(v->fn->cconv, &fa, &na, &fr, &nr);
      return check_cconv_list(v, "return", fr, nr, NULL, 0, regs, n);
    }
    case OP_FAIL: {
      uint16_t status, len;
      *terminator = true;
      if (!read_u16(v, &status) || !check_reg(v, status, KILN_VMFB_REG_I32, false)) return false;
      if (!read_u16(v, &len) || !need(v, len)) return false;
      v->pc += len;
      return true;
    }
    default: break;
  }
  const char *fields = op_fields(opcode);
  if (!fields) {
    return vfail(v, KILN_STATUS_UNIMPLEMENTED, "opcode 0x%02X is not one kiln's verifier knows", opcode);
  }
  for (const char *f = fields; *f; f++) {
    uint16_t reg;
    uint32_t value;
    switch (*f) {
      case 'i':
      case 'I':
      case 'r':
      case 'R':
        if (!read_u16(v, &reg)) return false;
        if (!check_reg(v, reg,
                       *f == 'i'   ? KILN_VMFB_REG_I32
                       : *f == 'I' ? KILN_VMFB_REG_I64
                                   : KILN_VMFB_REG_REF,
                       *f == 'R')) {
          return false;
        }
        break;
      case 't':
        if (!read_u32(v, &value)) return false;
        if (value >= v->module->n_types) {
          return vfail(v, KILN_STATUS_OUT_OF_RANGE, "type ordinal %u out of range %zu", value,
                       v->module->n_types);
        }
        break;
      case '4':
      case '8':
        if (!read_u32(v, &value)) return false;
        if ((uint64_t)value + (uint64_t)(*f - '0') > v->module->global_bytes_capacity) {
          return vfail(v, KILN_STATUS_OUT_OF_RANGE, "global byte offset %u out of range %u", value,
                       v->module->global_bytes_capacity);
        }
        break;
      case 'g':
        if (!read_u32(v, &value)) return false;
        if (value >= v->module->global_ref_count) {
          return vfail(v, KILN_STATUS_OUT_OF_RANGE, "global ref ordinal %u out of range %u", value,
                       v->module->global_ref_count);
        }
        break;
      case 'd':
        if (!read_u32(v, &value)) return false;
        if (value >= v->module->n_rodata) {
          return vfail(v, KILN_STATUS_OUT_OF_RANGE, "rodata ordinal %u out of range %zu", value,
                       v->module->n_rodata);
        }
        break;
      case 'w':
        if (!read_u32(v, &value)) return false;
        break;
      case 'W':
        if (!need(v, 8)) return false;
        v->pc += 8;
        break;
      case 'L': {
        const uint8_t *regs;
        uint16_t n;
        if (!read_list(v, &regs, &n)) return false;
        for (uint16_t i = 0; i < n; i++) {
          if (!check_reg(v, list_at(regs, i), KILN_VMFB_REG_REF, true)) return false;
        }
        break;
      }
      default: return vfail(v, KILN_STATUS_INTERNAL, "bad field code %c", *f);
    }
  }
  return true;
}

static bool verify_body(verify_t *v) {
  const kiln_vmfb_vm_function_t *fn = v->fn;
  if (!fn->bytecode || fn->bytecode_len == 0 || fn->block_count == 0) {
    return vfail(v, KILN_STATUS_INVALID_ARGUMENT,
                 "functions need bytecode and at least one block (len %zu, blocks %u)", fn->bytecode_len,
                 fn->block_count);
  }
  if (fn->i32_register_count > KILN_VMFB_MAX_I32_REGISTERS ||
      fn->ref_register_count > KILN_VMFB_MAX_REF_REGISTERS || fn->block_count > KILN_VMFB_MAX_BLOCKS) {
    return vfail(v, KILN_STATUS_RESOURCE_EXHAUSTED,
                 "register or block counts exceed the VM's (i32 %u, ref %u, blocks %u)",
                 fn->i32_register_count, fn->ref_register_count, fn->block_count);
  }
  uint32_t known = KILN_VMFB_FEATURE_EXT_F32 | KILN_VMFB_FEATURE_EXT_F64 | KILN_VMFB_FEATURE_YIELD |
                   KILN_VMFB_FEATURE_UNWIND;
  if (fn->requirements & ~known) {
    return vfail(v, KILN_STATUS_INVALID_ARGUMENT, "unknown requirement bits %08X", fn->requirements & ~known);
  }
  const char *fa, *fr;
  size_t na, nr;
  if (!cconv_split(fn->cconv, &fa, &na, &fr, &nr) || memchr(fa, 'C', na)) {
    return vfail(v, KILN_STATUS_INVALID_ARGUMENT, "malformed calling convention %s",
                 fn->cconv ? fn->cconv : "(null)");
  }
  uint32_t args_i32 = 0, args_ref = 0;
  for (size_t i = 0; i < na; i++) {
    kiln_vmfb_reg_kind_t kind = cconv_kind(fa[i]);
    if (kind == KILN_VMFB_REG_REF) {
      args_ref++;
    } else if (kind == KILN_VMFB_REG_I64) {
      args_i32 = ((args_i32 + 1) & ~1u) + 2;
    } else {
      args_i32++;
    }
  }
  if (args_i32 > fn->i32_register_count || args_ref > fn->ref_register_count) {
    return vfail(v, KILN_STATUS_INVALID_ARGUMENT, "insufficient register storage for function arguments (%s)",
                 fn->cconv);
  }

  bool in_block = false;
  while (v->pc < v->len) {
    v->start = v->pc;
    uint8_t opcode = v->code[v->pc];
    if (!in_block) {
      if (opcode != OP_BLOCK) {
        return vfail(v, KILN_STATUS_INVALID_ARGUMENT, "op 0x%02X is not in a block", opcode);
      }
      if (v->pc + 1 >= v->len) {
        return vfail(v, KILN_STATUS_INVALID_ARGUMENT, "block marker at the end of the function");
      }
      v->markers = kiln_realloc(v->markers, (v->n_markers + 1) * sizeof *v->markers);
      v->markers[v->n_markers++] = (uint32_t)v->pc;
      v->pc++;
      in_block = true;
      continue;
    }
    if (opcode == OP_BLOCK) {
      return vfail(v, KILN_STATUS_INVALID_ARGUMENT, "block marker while still in a block");
    }
    bool terminator = false;
    if (!verify_op(v, &terminator)) return false;
    if (terminator) in_block = false;
  }
  v->start = v->len;
  if (in_block) {
    return vfail(v, KILN_STATUS_INVALID_ARGUMENT, "function missing terminator in the last block");
  }
  if (v->n_markers != fn->block_count) {
    return vfail(v, KILN_STATUS_INVALID_ARGUMENT, "invalid descriptor block count %u; found %zu blocks",
                 fn->block_count, v->n_markers);
  }
  for (size_t t = 0; t < v->n_targets; t++) {
    /* Markers are recorded in increasing pc order: binary search. */
    size_t lo = 0, hi = v->n_markers;
    while (lo < hi) {
      size_t mid = (lo + hi) / 2;
      if (v->markers[mid] < v->targets[t]) {
        lo = mid + 1;
      } else {
        hi = mid;
      }
    }
    if (lo == v->n_markers || v->markers[lo] != v->targets[t]) {
      return vfail(v, KILN_STATUS_INVALID_ARGUMENT,
                   "branch target pc %08X does not start with a block marker", v->targets[t]);
    }
  }
  return true;
}

kiln_status_t kiln_vmfb_bytecode_verify(const kiln_vmfb_vm_module_t *module, size_t function) {
  if (function >= module->n_functions) {
    return KILN_STATUS(KILN_STATUS_OUT_OF_RANGE, "bytecode verify: function %zu of %zu", function,
                       module->n_functions);
  }
  verify_t v = {
      .module = module,
      .fn = &module->functions[function],
      .index = function,
      .code = module->functions[function].bytecode,
      .len = module->functions[function].bytecode_len,
  };
  verify_body(&v);
  kiln_free(v.markers);
  kiln_free(v.targets);
  return v.status;
}
