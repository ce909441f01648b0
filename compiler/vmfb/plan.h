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
#define KILN_VMFB_ELEMENT_BOOL_8            0x13000008u
#define KILN_VMFB_ELEMENT_INT_2             0x10000002u
#define KILN_VMFB_ELEMENT_INT_4             0x10000004u
#define KILN_VMFB_ELEMENT_INT_8             0x10000008u
#define KILN_VMFB_ELEMENT_INT_16            0x10000010u
#define KILN_VMFB_ELEMENT_INT_32            0x10000020u
#define KILN_VMFB_ELEMENT_INT_64            0x10000040u
#define KILN_VMFB_ELEMENT_FLOAT_16          0x21000010u
#define KILN_VMFB_ELEMENT_FLOAT_32          0x21000020u
#define KILN_VMFB_ELEMENT_FLOAT_64          0x21000040u
#define KILN_VMFB_ELEMENT_BFLOAT_16         0x22000010u
#define KILN_VMFB_ELEMENT_FLOAT_8_E5M2      0x24000008u
#define KILN_VMFB_ELEMENT_FLOAT_8_E4M3_FN   0x25000008u
#define KILN_VMFB_ELEMENT_FLOAT_8_E5M2_FNUZ 0x26000008u
#define KILN_VMFB_ELEMENT_FLOAT_8_E4M3_FNUZ 0x27000008u
#define KILN_VMFB_ELEMENT_FLOAT_8_E8M0_FNU  0x28000008u

/* Sizes known only at run time (dynamic dimensions): expressions over the
 * inputs' dimensions, one i64 value each, evaluated once per call before any
 * step runs. A function's expressions are numbered from 1 (0 is "none": the
 * field it sits in is static); an expression's operands a, b, c are ids of
 * earlier expressions. Division and remainder by zero are the caller's bug:
 * kiln divides by constant tile sizes and element widths only. */
typedef enum kiln_vmfb_expr_kind_e {
  KILN_VMFB_EXPR_CONST = 1,     /* value */
  KILN_VMFB_EXPR_INPUT_DIM = 2, /* dimension `b` of input `a` (hal.buffer_view.dim) */
  KILN_VMFB_EXPR_ADD = 3,       /* a + b, and so on for the binary ops */
  KILN_VMFB_EXPR_SUB = 4,
  KILN_VMFB_EXPR_MUL = 5,
  KILN_VMFB_EXPR_DIV_S = 6,
  KILN_VMFB_EXPR_DIV_U = 7,
  KILN_VMFB_EXPR_REM_S = 8,
  KILN_VMFB_EXPR_REM_U = 9,
  KILN_VMFB_EXPR_MIN_S = 10,
  KILN_VMFB_EXPR_MIN_U = 11,
  KILN_VMFB_EXPR_MAX_S = 12,
  KILN_VMFB_EXPR_MAX_U = 13,
  KILN_VMFB_EXPR_AND = 14,
  KILN_VMFB_EXPR_OR = 15,
  KILN_VMFB_EXPR_XOR = 16,
  KILN_VMFB_EXPR_EQ = 17, /* comparisons are 0 or 1 */
  KILN_VMFB_EXPR_NE = 18,
  KILN_VMFB_EXPR_LT_S = 19,
  KILN_VMFB_EXPR_LT_U = 20,
  KILN_VMFB_EXPR_SELECT = 21, /* a != 0 ? b : c */
} kiln_vmfb_expr_kind_t;

#define KILN_VMFB_EXPR_NONE 0u
/* The most expressions one function may hold (each is a register of its host
 * function for the whole call). */
#define KILN_VMFB_MAX_EXPRS 2048u

typedef struct kiln_vmfb_expr_s {
  kiln_vmfb_expr_kind_t kind;
  uint32_t a, b, c;
  int64_t value;
} kiln_vmfb_expr_t;

/* A dense row-major tensor type: the signature of an input or a result. An
 * input's dimension may be -1 (dynamic: any size, read from the buffer view). */
typedef struct kiln_vmfb_tensor_type_s {
  uint32_t element_type; /* KILN_VMFB_ELEMENT_* */
  uint32_t rank;
  int64_t dims[KILN_VMFB_MAX_RANK];
} kiln_vmfb_tensor_type_t;

typedef enum kiln_vmfb_buffer_kind_e {
  KILN_VMFB_BUFFER_INPUT = 1,     /* the buffer of input argument `input` */
  KILN_VMFB_BUFFER_CONSTANT = 2,  /* `data` (size_bytes), uploaded from rodata */
  KILN_VMFB_BUFFER_TRANSIENT = 3, /* allocated per call: intermediates and results */
  /* Kernel arguments known only at run time (dynamic sizes): host-visible,
   * allocated per call and filled by the host before any step with one 32-bit
   * word per entry of `words` (expression ids, truncated to 32 bits). */
  KILN_VMFB_BUFFER_ARGS = 4,
  /* Another buffer, chosen per call: `select_a` when expression `select_cond` is
   * nonzero, else `select_b` (both earlier buffers of the function). */
  KILN_VMFB_BUFFER_SELECT = 5,
  /* Module variable `variable` (the plan's variables): one buffer for the whole
   * module, created with the variable's initial bytes by the first call that
   * needs it and kept across calls and functions (a model's state). */
  KILN_VMFB_BUFFER_VARIABLE = 6,
} kiln_vmfb_buffer_kind_t;

typedef struct kiln_vmfb_buffer_s {
  kiln_vmfb_buffer_kind_t kind;
  uint32_t input;      /* INPUT: the argument's index */
  uint8_t *data;       /* CONSTANT: the bytes (size_bytes of them) */
  uint64_t size_bytes; /* static size; with size_expr, unused */
  uint32_t size_expr;  /* INPUT, TRANSIENT, SELECT: the size in bytes when dynamic */
  uint32_t *words;     /* ARGS: expression ids (size_bytes is 4 * n_words) */
  size_t n_words;
  uint32_t select_cond, select_a, select_b; /* SELECT */
  uint32_t variable;                        /* VARIABLE: index into the plan's variables */
} kiln_vmfb_buffer_t;

/* A module variable: its name and initial bytes (size_bytes of them, word-rounded). */
typedef struct kiln_vmfb_variable_s {
  char *name;
  uint8_t *data;
  uint64_t size_bytes;
} kiln_vmfb_variable_t;

/* One buffer argument of a kernel: a byte range of one plan buffer. */
typedef struct kiln_vmfb_binding_s {
  uint32_t buffer;      /* index into the function's buffers */
  uint64_t offset;      /* bytes */
  uint64_t length;      /* bytes */
  uint32_t length_expr; /* the length when dynamic */
  bool read_only;       /* the kernel never writes it */
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
  uint32_t kernel;             /* export ordinal in the executable */
  uint32_t workgroups[3];      /* grid: workgroup counts x, y, z */
  uint32_t workgroup_exprs[3]; /* ... when dynamic */
  kiln_vmfb_binding_t *bindings;
  size_t n_bindings;
  uint32_t *constants; /* 32-bit push constants, in kernel order */
  size_t n_constants;
  /* COPY: length bytes from (src, src_offset) to (dst, dst_offset); BRANCH: the
   * condition is length bytes at (src, src_offset), or expression cond_expr */
  uint32_t src, dst;
  uint64_t src_offset, dst_offset, length;
  uint32_t length_expr; /* COPY: the length when dynamic */
  uint32_t cond_expr;   /* BRANCH: a host-computed condition (nothing is read back) */
  /* BRANCH, JUMP: the step to continue at (0..n_steps) */
  uint32_t target;
} kiln_vmfb_step_t;

typedef struct kiln_vmfb_result_s {
  uint32_t buffer;              /* the plan buffer holding it (TRANSIENT, or an INPUT passed through) */
  uint64_t offset;              /* bytes */
  kiln_vmfb_tensor_type_t type; /* a dynamic dimension is -1, with its dim_exprs entry */
  uint32_t dim_exprs[KILN_VMFB_MAX_RANK];
  uint32_t size_expr; /* bytes, when a dimension is dynamic */
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
  kiln_vmfb_expr_t *exprs; /* expression id i is exprs[i - 1] */
  size_t n_exprs;
} kiln_vmfb_function_t;

/* The whole host side of a module: its exported functions and variables. */
typedef struct kiln_vmfb_plan_s {
  kiln_vmfb_function_t *functions;
  size_t n_functions;
  kiln_vmfb_variable_t *variables;
  size_t n_variables;
} kiln_vmfb_plan_t;

/* Bits of one element of `element_type` (its low 8 bits). */
static inline uint32_t kiln_vmfb_element_bits(uint32_t element_type) { return element_type & 0xFFu; }

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

/* Evaluates every expression of `fn` for inputs whose dimensions are `dims`
 * (dims[i][d] for input i) into values[0..n_exprs) (values[id - 1]), as the
 * host program does. Returns false on a division by zero or an operand id that
 * is not earlier. For tools that run plans (corpus_check). Thread-safe. */
bool kiln_vmfb_exprs_eval(const kiln_vmfb_function_t *fn, const int64_t (*dims)[KILN_VMFB_MAX_RANK],
                          int64_t *values);

/* Frees everything a plan owns (each function's name, arrays, expressions, and
 * the bindings and constants of its steps; CONSTANT data and ARGS words too). Safe on a zeroed plan. */
void kiln_vmfb_plan_deinit(kiln_vmfb_plan_t *plan);

#endif /* KILN_COMPILER_VMFB_PLAN_H_ */
