/* An assembler for IREE VM bytecode 17.0, and a verifier for what it emits.
 *
 * The spec is IREE's runtime (runtime/src/iree/vm/bytecode/: isa/isa.json for
 * opcodes and field order, utils/isa_decoder.inl for how fields are read,
 * verifier.c for every rule a module must pass before it can run). One assembler
 * builds one function: declare blocks, allocate registers, emit ops, then
 * kiln_vmfb_bytecode_finish moves the bytes and the FunctionDescriptor counts into
 * a kiln_vmfb_vm_function_t (vm.h).
 *
 * Errors are sticky, like a stream: emitting ops returns nothing, the first misuse
 * (a register of the wrong bank, an op outside a block, a call whose registers do
 * not match the callee's calling convention, a limit exceeded) is recorded and
 * every later emit is ignored; kiln_vmfb_bytecode_status and _finish return it.
 * This keeps generators (hostprog.c) straight-line.
 *
 * Layout facts the writer (writer.h) must honour, as iree-compile does: each
 * function's bytecode starts at an 8-byte-aligned offset of bytecode_data (pad
 * with zeros; the descriptor's bytecode_length stays the unpadded bytecode_len),
 * and the module's `requirements` is the OR of its functions' requirements.
 *
 * Thread-safety: an assembler has one owner (not thread-safe); distinct
 * assemblers are independent. kiln_vmfb_bytecode_verify is thread-safe (it only
 * reads the module).
 */
#ifndef KILN_COMPILER_VMFB_BYTECODE_H_
#define KILN_COMPILER_VMFB_BYTECODE_H_

#include <stddef.h>
#include <stdint.h>

#include "base/status.h"
#include "compiler/vmfb/vm.h"

/* BytecodeModuleDef.bytecode_version: major 17 (must match the runtime exactly),
 * minor 0 (a runtime accepts minors up to its own). */
#define KILN_VMFB_BYTECODE_VERSION_MAJOR 17u
#define KILN_VMFB_BYTECODE_VERSION_MINOR 0u
#define KILN_VMFB_BYTECODE_VERSION \
  ((KILN_VMFB_BYTECODE_VERSION_MAJOR << 16) | KILN_VMFB_BYTECODE_VERSION_MINOR)

/* Callee ordinals: internal functions are their index in the module's function
 * table; imports are their index in the import table with the high bit set. */
#define KILN_VMFB_IMPORT_BIT      0x80000000u
#define KILN_VMFB_IMPORT(ordinal) ((uint32_t)(ordinal) | KILN_VMFB_IMPORT_BIT)

/* FunctionDescriptor.requirements / BytecodeModuleDef.requirements bits
 * (iree.vm.FeatureBits). The assembler sets YIELD on functions that make
 * yieldable calls, as iree-compile does. */
#define KILN_VMFB_FEATURE_EXT_F32 (1u << 0)
#define KILN_VMFB_FEATURE_EXT_F64 (1u << 1)
#define KILN_VMFB_FEATURE_YIELD   (1u << 2)
#define KILN_VMFB_FEATURE_UNWIND  (1u << 3)

/* Limits of one function. The runtime rounds register counts up to a power of two
 * and requires the result to fit its 15-bit (i32) and 14-bit (ref) ordinal
 * fields, so at most 0x4000 i32 slots and 0x2000 ref registers are usable. */
#define KILN_VMFB_MAX_I32_REGISTERS 0x4000u
#define KILN_VMFB_MAX_REF_REGISTERS 0x2000u
#define KILN_VMFB_MAX_BLOCKS        0x7FFFu
#define KILN_VMFB_MAX_BLOCK_BYTES   0x00FFFFFFu

/* A register: its bank and ordinal. An i64 register is an even i32 ordinal and
 * the one after it. Values are plain data; kind NONE is "no register". */
typedef enum kiln_vmfb_reg_kind_e {
  KILN_VMFB_REG_NONE = 0,
  KILN_VMFB_REG_I32 = 1,
  KILN_VMFB_REG_I64 = 2,
  KILN_VMFB_REG_REF = 3,
} kiln_vmfb_reg_kind_t;

typedef struct kiln_vmfb_reg_s {
  kiln_vmfb_reg_kind_t kind;
  uint16_t ordinal;
} kiln_vmfb_reg_t;

/* A block of the function being assembled (an index; 0 is the entry block). */
typedef uint32_t kiln_vmfb_block_t;

/* Register allocation watermark for kiln_vmfb_bytecode_release. */
typedef struct kiln_vmfb_bytecode_mark_s {
  uint16_t i32;
  uint16_t ref;
} kiln_vmfb_bytecode_mark_t;

typedef struct kiln_vmfb_bytecode_s kiln_vmfb_bytecode_t;

/* Starts assembling a function whose calling convention is `cconv` ("0rr_r",
 * "0v_v"; borrowed, copied). Its arguments are preassigned to registers the way
 * the runtime places them (kiln_vmfb_bytecode_arg) and the entry block (block 0)
 * is already begun, so ops may be emitted at once. Errors: INVALID_ARGUMENT when
 * cconv is not "0<args>_<results>" over i I f F r (or "v" for none); a function's
 * own cconv may not be variadic. Thread-safe. */
KILN_MUST_USE kiln_status_t kiln_vmfb_bytecode_create(const char *cconv, kiln_vmfb_bytecode_t **out_bc);

/* Frees the assembler (and any bytecode not handed over by _finish). NULL is a
 * no-op. */
void kiln_vmfb_bytecode_destroy(kiln_vmfb_bytecode_t *bc);

/* The first error recorded so far (borrowed: do not free; NULL when none). */
KILN_MUST_USE kiln_status_t kiln_vmfb_bytecode_status(const kiln_vmfb_bytecode_t *bc);

/* The register holding argument `index` of the function (kind NONE and a
 * recorded INVALID_ARGUMENT when out of range). */
kiln_vmfb_reg_t kiln_vmfb_bytecode_arg(kiln_vmfb_bytecode_t *bc, size_t index);

/* Allocates a fresh register (an i64 takes the next even pair of i32 slots).
 * Exceeding KILN_VMFB_MAX_*_REGISTERS records RESOURCE_EXHAUSTED. */
kiln_vmfb_reg_t kiln_vmfb_bytecode_i32(kiln_vmfb_bytecode_t *bc);
kiln_vmfb_reg_t kiln_vmfb_bytecode_i64(kiln_vmfb_bytecode_t *bc);
kiln_vmfb_reg_t kiln_vmfb_bytecode_ref(kiln_vmfb_bytecode_t *bc);

/* Returns the current allocation watermark; _release makes every register
 * allocated after `mark` free for reuse (the caller must no longer read them).
 * The descriptor's counts keep the high-water mark. Writing a ref register that
 * still holds a value releases the old value, so ref reuse is safe. */
kiln_vmfb_bytecode_mark_t kiln_vmfb_bytecode_mark(const kiln_vmfb_bytecode_t *bc);
void kiln_vmfb_bytecode_release(kiln_vmfb_bytecode_t *bc, kiln_vmfb_bytecode_mark_t mark);

/* Declares a new block (a branch target) and returns it; it must be begun
 * exactly once before _finish. */
kiln_vmfb_block_t kiln_vmfb_bytecode_block_declare(kiln_vmfb_bytecode_t *bc);

/* Emits the `vm.block` marker (0x79) of `block` here. The block before it must
 * have ended with a terminator (br, cond_br, return, fail, yieldable call):
 * FAILED_PRECONDITION otherwise, or when the block was begun already. */
void kiln_vmfb_bytecode_block_begin(kiln_vmfb_bytecode_t *bc, kiln_vmfb_block_t block);

/* Constants. _const_i32/_const_i64 emit the .zero forms (0x0C/0x0E) for 0, as
 * iree-compile does, else const.i32 (0x0D) / const.i64 (0x0F). */
void kiln_vmfb_bytecode_const_i32(kiln_vmfb_bytecode_t *bc, int32_t value, kiln_vmfb_reg_t dst);
void kiln_vmfb_bytecode_const_i64(kiln_vmfb_bytecode_t *bc, int64_t value, kiln_vmfb_reg_t dst);
/* const.ref.zero (0x10): a null ref. */
void kiln_vmfb_bytecode_const_ref_zero(kiln_vmfb_bytecode_t *bc, kiln_vmfb_reg_t dst);
/* assign.ref (0x86): dst = src (retained; dst's previous value is released). */
void kiln_vmfb_bytecode_assign_ref(kiln_vmfb_bytecode_t *bc, kiln_vmfb_reg_t src, kiln_vmfb_reg_t dst);
/* const.ref.rodata (0x11): a !vm.buffer over rodata segment `rodata`. */
void kiln_vmfb_bytecode_const_ref_rodata(kiln_vmfb_bytecode_t *bc, uint32_t rodata, kiln_vmfb_reg_t dst);

/* Module globals: i32/i64 live at byte offsets of the global byte storage
 * (ModuleStateDef.global_bytes_capacity; i64 offsets must be 8-aligned), refs at
 * ordinals below global_ref_count, typed by a `types` ordinal of the module.
 * global.load/store.i32 0x00/0x01, .i64 0x04/0x05, .ref 0x08/0x09. */
void kiln_vmfb_bytecode_global_load_i32(kiln_vmfb_bytecode_t *bc, uint32_t byte_offset, kiln_vmfb_reg_t dst);
void kiln_vmfb_bytecode_global_store_i32(kiln_vmfb_bytecode_t *bc, uint32_t byte_offset, kiln_vmfb_reg_t src);
void kiln_vmfb_bytecode_global_load_i64(kiln_vmfb_bytecode_t *bc, uint32_t byte_offset, kiln_vmfb_reg_t dst);
void kiln_vmfb_bytecode_global_store_i64(kiln_vmfb_bytecode_t *bc, uint32_t byte_offset, kiln_vmfb_reg_t src);
void kiln_vmfb_bytecode_global_load_ref(kiln_vmfb_bytecode_t *bc, uint32_t global, uint32_t type,
                                        kiln_vmfb_reg_t dst);
void kiln_vmfb_bytecode_global_store_ref(kiln_vmfb_bytecode_t *bc, uint32_t global, uint32_t type,
                                         kiln_vmfb_reg_t src);

/* Arithmetic and comparisons: add.i32 0x22, add.i64 0x2A, cmp.eq.i32 0x49,
 * cmp.ne.i32 0x4A, cmp.nz.i32 0x4D, cmp.eq.i64 0x4E, cmp.nz.ref 0x55 (results of
 * comparisons are i32 0/1). */
void kiln_vmfb_bytecode_add_i32(kiln_vmfb_bytecode_t *bc, kiln_vmfb_reg_t a, kiln_vmfb_reg_t b,
                                kiln_vmfb_reg_t dst);
void kiln_vmfb_bytecode_add_i64(kiln_vmfb_bytecode_t *bc, kiln_vmfb_reg_t a, kiln_vmfb_reg_t b,
                                kiln_vmfb_reg_t dst);
void kiln_vmfb_bytecode_cmp_eq_i32(kiln_vmfb_bytecode_t *bc, kiln_vmfb_reg_t a, kiln_vmfb_reg_t b,
                                   kiln_vmfb_reg_t dst);
void kiln_vmfb_bytecode_cmp_ne_i32(kiln_vmfb_bytecode_t *bc, kiln_vmfb_reg_t a, kiln_vmfb_reg_t b,
                                   kiln_vmfb_reg_t dst);
void kiln_vmfb_bytecode_cmp_nz_i32(kiln_vmfb_bytecode_t *bc, kiln_vmfb_reg_t a, kiln_vmfb_reg_t dst);
void kiln_vmfb_bytecode_cmp_eq_i64(kiln_vmfb_bytecode_t *bc, kiln_vmfb_reg_t a, kiln_vmfb_reg_t b,
                                   kiln_vmfb_reg_t dst);
void kiln_vmfb_bytecode_cmp_nz_ref(kiln_vmfb_bytecode_t *bc, kiln_vmfb_reg_t a, kiln_vmfb_reg_t dst);

/* i64 binary ops (their opcodes): arithmetic, bitwise and min/max write an i64,
 * comparisons an i32 0/1. */
typedef enum kiln_vmfb_i64_op_e {
  KILN_VMFB_I64_ADD = 0x2A,
  KILN_VMFB_I64_SUB = 0x2B,
  KILN_VMFB_I64_MUL = 0x2C,
  KILN_VMFB_I64_DIV_S = 0x2D,
  KILN_VMFB_I64_DIV_U = 0x2E,
  KILN_VMFB_I64_REM_S = 0x2F,
  KILN_VMFB_I64_REM_U = 0x30,
  KILN_VMFB_I64_AND = 0x37,
  KILN_VMFB_I64_OR = 0x38,
  KILN_VMFB_I64_XOR = 0x39,
  KILN_VMFB_I64_CMP_EQ = 0x4E,
  KILN_VMFB_I64_CMP_NE = 0x4F,
  KILN_VMFB_I64_CMP_LT_S = 0x50,
  KILN_VMFB_I64_CMP_LT_U = 0x51,
  KILN_VMFB_I64_MIN_S = 0x7E,
  KILN_VMFB_I64_MIN_U = 0x7F,
  KILN_VMFB_I64_MAX_S = 0x80,
  KILN_VMFB_I64_MAX_U = 0x81,
} kiln_vmfb_i64_op_t;

void kiln_vmfb_bytecode_i64_binary(kiln_vmfb_bytecode_t *bc, kiln_vmfb_i64_op_t op, kiln_vmfb_reg_t a,
                                   kiln_vmfb_reg_t b, kiln_vmfb_reg_t dst);
/* trunc.i64.i32 (0x42), ext.i32.i64.u (0x48). */
void kiln_vmfb_bytecode_trunc_i64_i32(kiln_vmfb_bytecode_t *bc, kiln_vmfb_reg_t a, kiln_vmfb_reg_t dst);
void kiln_vmfb_bytecode_ext_i32_i64_u(kiln_vmfb_bytecode_t *bc, kiln_vmfb_reg_t a, kiln_vmfb_reg_t dst);
/* select.i64 (0x1D): dst = cond != 0 ? a : b; select.ref (0x1E) likewise for refs
 * of `type` (a types ordinal); the result is retained. */
void kiln_vmfb_bytecode_select_i64(kiln_vmfb_bytecode_t *bc, kiln_vmfb_reg_t cond, kiln_vmfb_reg_t a,
                                   kiln_vmfb_reg_t b, kiln_vmfb_reg_t dst);
void kiln_vmfb_bytecode_select_ref(kiln_vmfb_bytecode_t *bc, kiln_vmfb_reg_t cond, uint32_t type,
                                   kiln_vmfb_reg_t a, kiln_vmfb_reg_t b, kiln_vmfb_reg_t dst);

/* Lists and byte buffers (VMVX-style kernels, tests): list.get.ref 0x1A (element
 * `type` is a `types` ordinal), buffer.load.i32 0x66 / buffer.store.i32 0x6A
 * (`index` is an i64 element index into a !vm.buffer, not a byte offset). */
void kiln_vmfb_bytecode_list_get_ref(kiln_vmfb_bytecode_t *bc, kiln_vmfb_reg_t list, kiln_vmfb_reg_t index,
                                     uint32_t type, kiln_vmfb_reg_t dst);
void kiln_vmfb_bytecode_buffer_load_i32(kiln_vmfb_bytecode_t *bc, kiln_vmfb_reg_t buffer,
                                        kiln_vmfb_reg_t index, kiln_vmfb_reg_t dst);
void kiln_vmfb_bytecode_buffer_store_i32(kiln_vmfb_bytecode_t *bc, kiln_vmfb_reg_t buffer,
                                         kiln_vmfb_reg_t index, kiln_vmfb_reg_t value);

/* Control flow (terminators). br 0x56, cond_br 0x57 (taken when cond != 0).
 * Blocks take no arguments: values flow through registers, so every remap list is
 * empty. */
void kiln_vmfb_bytecode_br(kiln_vmfb_bytecode_t *bc, kiln_vmfb_block_t dest);
void kiln_vmfb_bytecode_cond_br(kiln_vmfb_bytecode_t *bc, kiln_vmfb_reg_t cond, kiln_vmfb_block_t if_true,
                                kiln_vmfb_block_t if_false);

/* call (0x58): calls `callee` (an internal ordinal, or KILN_VMFB_IMPORT(i)) whose
 * calling convention is `cconv` (borrowed). args/results are checked against it:
 * count, bank of each (i32 for i/f, i64 for I/F, ref for r). A variadic cconv
 * needs _call_variadic. */
void kiln_vmfb_bytecode_call(kiln_vmfb_bytecode_t *bc, uint32_t callee, const char *cconv,
                             const kiln_vmfb_reg_t *args, size_t n_args, const kiln_vmfb_reg_t *results,
                             size_t n_results);

/* call.variadic (0x59), imports only: `spans[k]` is how many times the k-th
 * C...D span of cconv repeats (for a tuple span, the number of tuples); args are
 * the flattened values in order. The segment list is encoded as iree-compile
 * does: one u16 per top-level argument, 0xFFFF (-1) for a fixed one. */
void kiln_vmfb_bytecode_call_variadic(kiln_vmfb_bytecode_t *bc, uint32_t callee, const char *cconv,
                                      const uint16_t *spans, size_t n_spans, const kiln_vmfb_reg_t *args,
                                      size_t n_args, const kiln_vmfb_reg_t *results, size_t n_results);

/* call.yieldable (0x87) / call.variadic.yieldable (0x88): as above, for callees
 * that may yield (e.g. hal.fence.await). They terminate the block; execution
 * continues at the start of `resume` once the call completes (resumed calls
 * re-enter the import). Marks the function YIELD. */
void kiln_vmfb_bytecode_call_yieldable(kiln_vmfb_bytecode_t *bc, uint32_t callee, const char *cconv,
                                       const kiln_vmfb_reg_t *args, size_t n_args,
                                       const kiln_vmfb_reg_t *results, size_t n_results,
                                       kiln_vmfb_block_t resume);
void kiln_vmfb_bytecode_call_variadic_yieldable(kiln_vmfb_bytecode_t *bc, uint32_t callee, const char *cconv,
                                                const uint16_t *spans, size_t n_spans,
                                                const kiln_vmfb_reg_t *args, size_t n_args,
                                                const kiln_vmfb_reg_t *results, size_t n_results,
                                                kiln_vmfb_block_t resume);

/* discard.refs (0x85): releases the refs held in `regs` (all ref registers). */
void kiln_vmfb_bytecode_discard_refs(kiln_vmfb_bytecode_t *bc, const kiln_vmfb_reg_t *regs, size_t n_regs);

/* return (0x5A): `values` must match the function's result cconv.
 * IREE 3.12 does not release ref registers when a function returns normally:
 * the program must leave them empty (MOVE bits and discard.refs), or every ref
 * still held leaks (and a VMVX kernel aborts). So return first emits
 * discard.refs for every ref register allocated so far except the returned
 * ones, and returns ref values with the MOVE bit (the last occurrence of a
 * register returned twice). Consequently every ref register must be allocated
 * before the returns are emitted: _finish fails with FAILED_PRECONDITION when a
 * ref register was allocated after a return. */
void kiln_vmfb_bytecode_return(kiln_vmfb_bytecode_t *bc, const kiln_vmfb_reg_t *values, size_t n_values);

/* fail (0x5B): fails the invocation with status code `status` (an i32 register;
 * nonzero at run time, else it falls through) and `message` (borrowed; at most
 * 65535 bytes). The verifier treats it as a terminator. */
void kiln_vmfb_bytecode_fail(kiln_vmfb_bytecode_t *bc, kiln_vmfb_reg_t status, const char *message);

/* Ends assembly. On success it replaces (freeing what they held) fn->bytecode,
 * bytecode_len (the descriptor's unpadded length), block_count,
 * i32_register_count, ref_register_count, requirements and cconv; name,
 * export_name and attrs are left to the caller. Errors: the first recorded error,
 * else FAILED_PRECONDITION when the last block lacks a terminator or a declared
 * block was never begun, RESOURCE_EXHAUSTED when a block exceeds 16 MiB. The
 * assembler may only be destroyed afterwards. */
KILN_MUST_USE kiln_status_t kiln_vmfb_bytecode_finish(kiln_vmfb_bytecode_t *bc, kiln_vmfb_vm_function_t *fn);

/* Verifies function `function` of `module` (borrowed) with the rules of IREE
 * 3.12's bytecode verifier (runtime/src/iree/vm/bytecode/verifier.c), applied
 * strictly: block markers and count, terminators, register banks and ordinals
 * against the exact descriptor counts, type/rodata/global/import/function
 * ordinals, call and return registers against calling conventions. Understands
 * the ops this assembler emits (and their siblings of the same encoding);
 * others are UNIMPLEMENTED. Errors: INVALID_ARGUMENT or OUT_OF_RANGE naming the
 * function, the byte offset and the rule. Thread-safe. */
KILN_MUST_USE kiln_status_t kiln_vmfb_bytecode_verify(const kiln_vmfb_vm_module_t *module, size_t function);

#endif /* KILN_COMPILER_VMFB_BYTECODE_H_ */
