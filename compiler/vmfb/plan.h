/* The host plan: what a compiled model does on the host, free of MLIR.
 *
 * The compiler reads it off the bufferized, outlined host function (every
 * gpu.launch_func and host-side copy, the buffers they touch); the VMFB writer
 * turns it into the VM bytecode of an exported function that imports HAL 0.7.
 * Plain data: every pointer is owned by whoever built the plan (the compiler's
 * output frees it with kiln_compiler_output_deinit); the writer only reads it.
 */
#ifndef KILN_COMPILER_VMFB_PLAN_H_
#define KILN_COMPILER_VMFB_PLAN_H_

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define KILN_VMFB_MAX_RANK 8

/* IREE's HAL element types (iree_hal_element_type_t, runtime/src/iree/hal/
 * buffer_view.h): numerical type << 24 | bits. Numerical types: 0x10 signless
 * integer, 0x13 boolean, 0x21 IEEE float, 0x22 brain float, 0x24..0x28 the 8-bit
 * floats (E5M2, E4M3FN, E5M2FNUZ, E4M3FNUZ, E8M0FNU). kiln writes signless
 * integers, as iree-compile does for MLIR's signless iN. */
#define KILN_VMFB_ELEMENT_BOOL_8 0x13000008u
#define KILN_VMFB_ELEMENT_INT_2 0x10000002u
#define KILN_VMFB_ELEMENT_INT_4 0x10000004u
#define KILN_VMFB_ELEMENT_INT_8 0x10000008u
#define KILN_VMFB_ELEMENT_INT_16 0x10000010u
#define KILN_VMFB_ELEMENT_INT_32 0x10000020u
#define KILN_VMFB_ELEMENT_INT_64 0x10000040u
#define KILN_VMFB_ELEMENT_FLOAT_16 0x21000010u
#define KILN_VMFB_ELEMENT_FLOAT_32 0x21000020u
#define KILN_VMFB_ELEMENT_FLOAT_64 0x21000040u
#define KILN_VMFB_ELEMENT_BFLOAT_16 0x22000010u
#define KILN_VMFB_ELEMENT_FLOAT_8_E5M2 0x24000008u
#define KILN_VMFB_ELEMENT_FLOAT_8_E4M3_FN 0x25000008u
#define KILN_VMFB_ELEMENT_FLOAT_8_E5M2_FNUZ 0x26000008u
#define KILN_VMFB_ELEMENT_FLOAT_8_E4M3_FNUZ 0x27000008u
#define KILN_VMFB_ELEMENT_FLOAT_8_E8M0_FNU 0x28000008u

/* A dense row-major tensor type: the signature of an input or a result. */
typedef struct kiln_vmfb_tensor_type_s {
  uint32_t element_type; /* KILN_VMFB_ELEMENT_* */
  uint32_t rank;
  int64_t dims[KILN_VMFB_MAX_RANK];
} kiln_vmfb_tensor_type_t;

typedef enum kiln_vmfb_buffer_kind_e {
  KILN_VMFB_BUFFER_INPUT = 1,     /* the buffer of input argument `input` */
  KILN_VMFB_BUFFER_CONSTANT = 2,  /* `data` (size_bytes), uploaded from rodata */
  KILN_VMFB_BUFFER_TRANSIENT = 3, /* allocated per call: intermediates and results */
} kiln_vmfb_buffer_kind_t;

typedef struct kiln_vmfb_buffer_s {
  kiln_vmfb_buffer_kind_t kind;
  uint32_t input;       /* INPUT: the argument's index */
  uint8_t *data;        /* CONSTANT: the bytes (size_bytes of them) */
  uint64_t size_bytes;
} kiln_vmfb_buffer_t;

/* One buffer argument of a kernel: a byte range of one plan buffer. */
typedef struct kiln_vmfb_binding_s {
  uint32_t buffer; /* index into the function's buffers */
  uint64_t offset; /* bytes */
  uint64_t length; /* bytes */
  bool read_only;  /* the kernel never writes it */
} kiln_vmfb_binding_t;

typedef enum kiln_vmfb_step_kind_e {
  KILN_VMFB_STEP_DISPATCH = 1,
  KILN_VMFB_STEP_COPY = 2,
  /* Host control flow: the host waits for every step before it, reads `length`
   * bytes (1..4) at (src, src_offset) back from the device, and continues at
   * step `target` when they are all zero, else at the next step. */
  KILN_VMFB_STEP_BRANCH = 3,
  /* Continues at step `target`. */
  KILN_VMFB_STEP_JUMP = 4,
} kiln_vmfb_step_kind_t;

/* The most bytes a BRANCH reads back (what hal.buffer.load returns as an i32). */
#define KILN_VMFB_BRANCH_MAX_BYTES 4u

/* One host step, in program order: each step depends on every step run before
 * it. BRANCH and JUMP make the order a flow graph (an if, a while loop); a
 * target of n_steps ends the function. */
typedef struct kiln_vmfb_step_s {
  kiln_vmfb_step_kind_t kind;
  /* DISPATCH */
  uint32_t kernel;        /* export ordinal in the executable */
  uint32_t workgroups[3]; /* grid: workgroup counts x, y, z */
  kiln_vmfb_binding_t *bindings;
  size_t n_bindings;
  uint32_t *constants; /* 32-bit push constants, in kernel order */
  size_t n_constants;
  /* COPY: length bytes from (src, src_offset) to (dst, dst_offset); BRANCH: the
   * condition is length bytes at (src, src_offset) */
  uint32_t src, dst;
  uint64_t src_offset, dst_offset, length;
  /* BRANCH, JUMP: the step to continue at (0..n_steps) */
  uint32_t target;
} kiln_vmfb_step_t;

typedef struct kiln_vmfb_result_s {
  uint32_t buffer; /* the plan buffer holding it (TRANSIENT, or an INPUT passed through) */
  uint64_t offset; /* bytes */
  kiln_vmfb_tensor_type_t type;
} kiln_vmfb_result_t;

/* One exported function. */
typedef struct kiln_vmfb_function_s {
  char *name;
  kiln_vmfb_tensor_type_t *inputs;
  size_t n_inputs;
  kiln_vmfb_result_t *results;
  size_t n_results;
  kiln_vmfb_buffer_t *buffers;
  size_t n_buffers;
  kiln_vmfb_step_t *steps;
  size_t n_steps;
} kiln_vmfb_function_t;

/* The whole host side of a module: its exported functions. */
typedef struct kiln_vmfb_plan_s {
  kiln_vmfb_function_t *functions;
  size_t n_functions;
} kiln_vmfb_plan_t;

/* Bits of one element of `element_type` (its low 8 bits). */
static inline uint32_t kiln_vmfb_element_bits(uint32_t element_type) {
  return element_type & 0xFFu;
}

/* MLIR's spelling of a KILN_VMFB_ELEMENT_* type ("f32", "i1", "f8E4M3FN"), the
 * one table of the element types kiln writes; NULL for any other value.
 * Thread-safe (static data). */
const char *kiln_vmfb_element_name(uint32_t element_type);

/* Bytes of a tensor of `elements` elements of `element_type`, packed as IREE
 * packs sub-byte types (i2, i4: several to a byte, the last byte rounded up).
 * Returns false on overflow past INT64_MAX bytes. Thread-safe. */
bool kiln_vmfb_packed_bytes(uint32_t element_type, uint64_t elements, uint64_t *out_bytes);

/* Bytes of a tensor of type `t` (packed as above). Returns false when a dimension
 * is negative or the size overflows INT64_MAX bytes. Thread-safe. */
bool kiln_vmfb_tensor_type_bytes(const kiln_vmfb_tensor_type_t *t, uint64_t *out_bytes);

/* Frees everything a plan owns (each function's name, arrays, and the bindings and
 * constants of its steps; CONSTANT data is freed too). Safe on a zeroed plan. */
void kiln_vmfb_plan_deinit(kiln_vmfb_plan_t *plan);

#endif /* KILN_COMPILER_VMFB_PLAN_H_ */
