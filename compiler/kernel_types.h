/* Element types a device can neither store nor compute on, rewritten inside the
 * outlined kernels before a SPIR-V back half converts them. Inside compiler/ only
 * (includes mlir-c). One thread at a time per context.
 *
 * MLIR's SPIR-V type conversion stores a float type the target cannot compute
 * on (bf16 everywhere, f16 on profiles without Float16) as 32-bit words with the
 * 16-bit element count: f16 and bf16 tensors were read and written as f32. kiln
 * keeps their bits instead: the buffers become 16-bit integers (which SPIR-V
 * stores natively with 16-bit storage, or in packed 32-bit words without it), the
 * loads and stores bitcast, arithmetic runs in f32
 * (arith-emulate-unsupported-floats), and the conversions between the 16-bit
 * formats and f32 are integer code: arith-expand's for bf16, kiln's for f16.
 */
#ifndef KILN_COMPILER_KERNEL_TYPES_H_
#define KILN_COMPILER_KERNEL_TYPES_H_

#include <mlir-c/IR.h>
#include <stdbool.h>

#include "base/status.h"

/* Whether op is named `name` ("memref.load"). */
bool kiln_compiler_op_is(MlirOperation op, const char *name);

/* A map of values for cloning code elsewhere: original -> its stand-in. */
typedef struct kiln_compiler_vmap_s {
  MlirValue *from, *to;
  size_t n;
} kiln_compiler_vmap_t;

void kiln_compiler_vmap_put(kiln_compiler_vmap_t *m, MlirValue from, MlirValue to);
/* The stand-in of `v` in *out; false (and *out untouched) when it has none. */
bool kiln_compiler_vmap_find(const kiln_compiler_vmap_t *m, MlirValue v, MlirValue *out);
void kiln_compiler_vmap_deinit(kiln_compiler_vmap_t *m);

/* The value of an integer or index arith.constant; false for anything else. */
bool kiln_compiler_int_constant_value(MlirValue v, int64_t *out);

/* The first op named `name` directly in `block`; null if none. */
MlirOperation kiln_compiler_first_op(MlirBlock block, const char *name);

/* The line and column of `op` in the model's text (0 and 0 where its location
 * has none), for messages that point at the op. */
void kiln_compiler_op_line_col(MlirOperation op, int *line, int *col);

/* The named attribute name = a. */
MlirNamedAttribute kiln_compiler_named_attr(MlirContext context, const char *name, MlirAttribute a);

/* A new arith.constant of integer or index type `type` holding `value`, at `loc`,
 * not yet in any block (the caller inserts it). */
MlirOperation kiln_compiler_int_constant(MlirContext context, MlirLocation loc, MlirType type, int64_t value);

/* kiln_compiler_int_constant inserted before `before`; returns its value. */
MlirValue kiln_compiler_int_const_before(MlirContext context, MlirOperation before, MlirType type,
                                         int64_t value);

/* A new memref.alloc of the static memref type `type` (no sizes), at `loc`, not yet
 * in any block. */
MlirOperation kiln_compiler_static_alloc(MlirContext context, MlirLocation loc, MlirType type);

/* A new op `name` with `operands` and one result of `type`, inserted before
 * `before`; returns its result. */
MlirValue kiln_compiler_build_before(const char *name, MlirOperation before, const MlirValue *operands,
                                     intptr_t n, MlirType type);
/* The same for one and two operands. */
MlirValue kiln_compiler_build1(const char *name, MlirOperation before, MlirValue a, MlirType type);
MlirValue kiln_compiler_build2(const char *name, MlirOperation before, MlirValue a, MlirValue b,
                               MlirType type);
/* arith.cmpf with predicate `pred` (arith::CmpFPredicate's number) before `before`. */
MlirValue kiln_compiler_cmpf_before(MlirContext ctx, MlirOperation before, int64_t pred, MlirValue a,
                                    MlirValue b);

/* The memref type t with `element` for its element type: shape, layout and memory
 * space kept. */
MlirType kiln_compiler_memref_with_element(MlirType t, MlirType element);

/* A growing list of ops (what a walk collects before a rewrite changes the IR). */
typedef struct kiln_compiler_ops_s {
  MlirOperation *items;
  size_t n;
} kiln_compiler_ops_t;

void kiln_compiler_ops_push(kiln_compiler_ops_t *ops, MlirOperation op);

/* A walk callback that pushes every op onto the kiln_compiler_ops_t `user`. */
MlirWalkResult kiln_compiler_ops_collect_all(MlirOperation op, void *user);

/* Removes every top-level op of `module` except gpu.modules: the host functions
 * and globals, which a device back half neither needs nor could keep consistent
 * once kernel signatures change. The host plan is read before (host.h). */
void kiln_compiler_kernels_only(MlirModule module);

/* The float types kiln keeps as their bits (flags). SMALL: the 8-, 6- and 4-bit
 * floats (f8E4M3FN, f8E5M2, their FNUZ forms, f8E8M0FNU, f4E2M1FN, ...), which no
 * backend kiln drives computes on. */
enum {
  KILN_FLOATS_BF16 = 1u << 0,
  KILN_FLOATS_F16 = 1u << 1,
  KILN_FLOATS_SMALL = 1u << 2,
};

/* Whether a kernel op of `module` makes an f64 value or buffer. */
bool kiln_compiler_kernels_have_f64(MlirModule module);

/* On a SPIR-V profile without Int8 (Int16), MLIR emulates i8 (i16) values in i32
 * words but converts no unsigned division, remainder, max or min on them: each
 * becomes the i32 op on zero-extended operands, truncated back. */
void kiln_compiler_kernels_widen_unsigned(MlirContext context, MlirModule module, bool int8, bool int16);

/* arith.extf f16/bf16 -> f64 as two exact extensions through f32, and
 * arith.truncf f64 -> f16/bf16 through f32 rounded to odd (then to nearest even:
 * one correct rounding), for a CPU, which has neither conversion (x86-64 calls
 * __truncdfhf2; kiln's ELF imports nothing) and computes bf16 as f32. */
void kiln_compiler_kernels_f64_half_casts(MlirContext context, MlirModule module);

/* Whether t is one of the SMALL floats; whether t is i2 or i4. */
bool kiln_compiler_is_small_float(MlirType t);
bool kiln_compiler_is_sub_byte_int(MlirType t);

/* In every gpu.func of `module`: each memref of a float type in `which` becomes a
 * memref of the integer of its width (bf16 -> i16, f8E4M3FN -> i8, f4E2M1FN ->
 * i4) with the same shape, layout and memory space (kernel arguments, views,
 * allocations, and the gpu.func's type), each memref.load of one is followed by
 * an arith.bitcast back to the float type, and each memref.store is preceded by
 * an arith.bitcast to the integer. Ops that arith-emulate-unsupported-floats does
 * not widen (math.*, int/float casts, select) are rebuilt on f32 between an
 * arith.extf and an arith.truncf. Call kiln_compiler_kernels_only first. */
void kiln_compiler_kernels_floats_as_bits(MlirContext context, MlirModule module, unsigned which);

/* After the emulation passes and the expansions: UNIMPLEMENTED naming the op when
 * a kernel still holds a value of a rewritten float type (one the emulation does
 * not cover), so such a kernel fails to compile instead of computing garbage. */
KILN_MUST_USE kiln_status_t kiln_compiler_kernels_check_floats(MlirContext context, MlirModule module,
                                                               unsigned which, const char *name,
                                                               const char *target);

/* Replaces every arith.extf from f16 to f32 and arith.truncf from f32 to f16 in
 * the kernels with integer code over the f16 bits, in place (canonicalize after,
 * to fold the bitcast pairs and share the constants):
 * extension is exact (normals, subnormals, infinities, NaN), truncation rounds to
 * nearest even, overflows to infinity, keeps NaN quiet. For profiles without the
 * Float16 capability. INTERNAL if a helper does not parse. */
KILN_MUST_USE kiln_status_t kiln_compiler_kernels_expand_f16(MlirContext context, MlirModule module);

/* Replaces every arith.extf to f32 and arith.truncf from f32 of the 8-bit IEEE-like
 * floats (f8E5M2, f8E4M3, f8E3M4, f8E4M3FN, and the FNUZ forms) in the kernels
 * with integer code over their bits (kernel_small.c): exact extension; rounding
 * to nearest even, overflow to infinity (IEEE) or NaN (FN, FNUZ), as APFloat
 * does. Canonicalize after. INTERNAL if a helper does not parse. */
KILN_MUST_USE kiln_status_t kiln_compiler_kernels_expand_f8(MlirContext context, MlirModule module);

/* Each kernel argument that is a memref of i2 or i4 (static shape and layout)
 * becomes a flat memref of 32-bit words holding IREE's packed layout: loads shift
 * the element out of its word, stores clear and set its bits with atomic and/or.
 * UNIMPLEMENTED naming the use when the buffer is used other than by loads and
 * stores, or its shape or layout is dynamic. */
KILN_MUST_USE kiln_status_t kiln_compiler_kernels_pack_sub_byte(MlirContext context, MlirModule module,
                                                                const char *name);

/* SPIR-V has no i2/i4 and its own narrow-integer emulation stops at unsigned
 * ops: after kiln_compiler_kernels_pack_sub_byte and the f4 expansion, every
 * kernel op on i2/i4 is rebuilt on i32 holding the value zero-extended (signed
 * ops see it sign-extended; results that can leave the N bits are masked).
 * UNIMPLEMENTED naming any other op on those types. */
KILN_MUST_USE kiln_status_t kiln_compiler_kernels_widen_sub_byte(MlirContext context, MlirModule module,
                                                                 const char *name);

/* Replaces each of `ops` (N operands, M results) with a copy of the body of the
 * func.func in `helper_text` (N arguments, M results), in place: how kiln puts
 * its own integer or polynomial code where an op was. INTERNAL if the helper does
 * not parse. */
KILN_MUST_USE kiln_status_t kiln_compiler_kernels_replace_with_helper(MlirContext context, MlirOperation *ops,
                                                                      size_t n, const char *helper_text);

/* Math functions a backend lacks, in kiln's own code (kernel_math.c, and
 * kernel_math64.c for 64 bits): every f32 or i32 math.<name> in the kernels whose
 * name is in the comma-separated `ops`, and every f64 or i64 one whose name is in
 * `ops64` (erf, cbrt, atan, atan2, asin, acos, floor, ceil, log2, sin, cos, exp,
 * log, ..., ctpop, cttz, ipowi; "remf" is arith.remf, and "divsi", "remui", ... are
 * arith's integer divisions) is replaced with code built from arithmetic, bit
 * operations, sqrt and the other helpers; an f16/bf16 one in `ops` is computed in
 * f32. Accuracy, per
 * function, is in the design note and kernel_math64.c. INTERNAL if a helper does
 * not parse or an f64 name has no helper. */
KILN_MUST_USE kiln_status_t kiln_compiler_kernels_expand_math(MlirContext context, MlirModule module,
                                                              const char *ops, const char *ops64);

/* `op` (no regions) again on f32: its f16/bf16 operands extended, its f16/bf16
 * results truncated back; `op` is destroyed. */
void kiln_compiler_widen_half_op(MlirContext context, MlirOperation op);

/* The 64-bit helper `name` as func.func text (free with kiln_free): f64 (exp,
 * exp2, log, log2, log10, sin, cos, atan, cbrt, erf, erfc, floor, ceil) or, with
 * `integer`, i64 for profiles without Int64 (divsi, divui, remsi, remui,
 * floordivsi, ceildivsi, absi, ctlz, cttz, ctpop, ipowi); NULL for other names. */
char *kiln_compiler_math_helper_64(const char *name, bool integer);

/* The text of kiln's integer code for one f64 op on the bits of its operands
 * (kernel_math64.c): `name` is addf, subf, mulf, divf, fma (not fused), sqrt,
 * rsqrt, negf, absf,
 * copysign, maximumf, minimumf, maxnumf, minnumf, floor, ceil, trunc, round,
 * roundeven, isnan, isinf, isfinite, isnormal (to i1), sitofp, uitofp (from i64),
 * fptosi, fptoui (to i64), extf (from f32's i32 bits), truncf and truncf_odd (to
 * f32's i32 bits, to nearest even or to odd), or cmpf with `pred` its
 * arith::CmpFPredicate; NULL for another name. The caller frees it. */
char *kiln_compiler_soft_f64_helper(const char *name, int pred);

/* Every f64 value, op and buffer in the kernels of `module` as integer code on
 * i64 bits (kernel_soft64.c), for SPIR-V profiles without Float64. The math
 * functions must be expanded into arithmetic first. UNIMPLEMENTED naming the op
 * and its file:line:col, with nothing changed, for what it cannot convert. */
KILN_MUST_USE kiln_status_t kiln_compiler_kernels_soft_f64(MlirContext context, MlirModule module,
                                                           const char *name, const char *target);

/* For profiles without Int64 (before arith-emulate-wide-int): each kernel argument
 * that is a memref of i64 (identity or static strided layout) used only by loads
 * and stores becomes a memref of i32 pairs (one more dimension of 2: the low word,
 * then the high word, the same bytes; strides and offset doubled), each load two
 * loads joined into an i64 and each store an i64 split into two stores;
 * emulate-wide-int then turns the i64 arithmetic into i32 pairs. Other i64
 * buffers are left alone (the emulation then names the op). */
void kiln_compiler_kernels_split_i64(MlirContext context, MlirModule module);

/* arith-emulate-wide-int shifts an i64 by s as two i32 halves, moving the bits
 * that cross between them by 32 - s: for s = 0 an i32 shift by 32, which SPIR-V
 * leaves undefined (lavapipe put garbage in the high word; x86 masks the count,
 * so CPUs never showed it). Each i64 shli, shrui and shrsi by a non-constant
 * amount becomes select(s == 0, x, the shift). For profiles without Int64. */
void kiln_compiler_kernels_guard_i64_shifts(MlirContext context, MlirModule module);

/* arith-emulate-wide-int converts no i64 an scf.for, scf.while or scf.if carries
 * ("unresolved materialization"): each becomes two i32 words, split before the
 * op and its terminators and joined at the top of its blocks and after it, in
 * i64 code the emulation converts. For profiles without Int64. */
void kiln_compiler_kernels_split_carried_i64(MlirContext context, MlirModule module);

#endif /* KILN_COMPILER_KERNEL_TYPES_H_ */
