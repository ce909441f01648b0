/* Element types narrower than a byte's worth of arithmetic, inside the kernels
 * (kernel_types.h: small floats and sub-byte buffers).
 *
 * 8- and 4-bit floats. No backend kiln drives computes on f8E4M3FN, f8E5M2, their
 * FNUZ forms or f4E2M1FN: their buffers hold the bits
 * (kiln_compiler_kernels_floats_as_bits), their arithmetic runs in f32
 * (arith-emulate-unsupported-floats), and what is left, the conversions to and
 * from f32, becomes integer code written here from each format's parameters
 * (arith-expand has the f8E8M0FNU one; its f4E2M1FN truncation rounds ties away
 * from zero and drops the sign of a zero, APFloat and TOSA do neither).
 * Extension is exact. Truncation rounds to nearest even, like APFloat: the
 * normal range by adding half an ulp (less one, plus the kept lowest bit) to the
 * f32 bits, the subnormal range by an f32 addition of a power of two whose ulp is
 * the format's smallest subnormal; overflow gives infinity (IEEE formats), NaN
 * (FN and FNUZ formats, which have no infinity) or the largest magnitude (f4,
 * which has neither), and NaN stays NaN (FNUZ: 0x80, and a zero never takes the
 * sign, 0x80 being that NaN; f4 has none and writes its largest value).
 *
 * Sub-byte buffers. IREE packs i2 and i4 (and kiln's f4 bits) several to a byte,
 * low bits first. A kernel's i2/i4 buffer argument becomes a flat buffer of
 * 32-bit words: a load shifts its element out of a word, a store clears and sets
 * its bits with two atomic read-modify-writes (neighbouring elements belong to
 * other invocations), so every backend reads and writes IREE's layout.
 */
#include <mlir-c/AffineMap.h>
#include <mlir-c/BuiltinAttributes.h>
#include <mlir-c/BuiltinTypes.h>
#include <stdio.h>
#include <string.h>

#include "base/alloc.h"
#include "base/buf.h"
#include "compiler/kernel_types.h"

static MlirStringRef sref(const char *s) { return mlirStringRefCreateFromCString(s); }

/* ---- 8-bit floats ---- */

typedef enum special_e {
  IEEE = 1,   /* infinities and NaNs at the top exponent */
  FN = 2,     /* no infinity; NaN is every bit set below the sign */
  FNUZ = 3,   /* no infinity, no negative zero; NaN is the sign bit alone */
  FINITE = 4, /* no infinity, no NaN: out of range saturates (OCP MX's f4) */
} special_t;

typedef struct format_s {
  const char *name; /* MLIR's spelling */
  bool (*is)(MlirType);
  int e, m, bias;
  special_t special;
  int bits; /* 8, 6 or 4: the sign is the top one */
} format_t;

static const format_t FORMATS[] = {
    {"f8E5M2", mlirTypeIsAFloat8E5M2, 5, 2, 15, IEEE, 8},
    {"f8E4M3", mlirTypeIsAFloat8E4M3, 4, 3, 7, IEEE, 8},
    {"f8E3M4", mlirTypeIsAFloat8E3M4, 3, 4, 3, IEEE, 8},
    {"f8E4M3FN", mlirTypeIsAFloat8E4M3FN, 4, 3, 7, FN, 8},
    {"f8E5M2FNUZ", mlirTypeIsAFloat8E5M2FNUZ, 5, 2, 16, FNUZ, 8},
    {"f8E4M3FNUZ", mlirTypeIsAFloat8E4M3FNUZ, 4, 3, 8, FNUZ, 8},
    {"f8E4M3B11FNUZ", mlirTypeIsAFloat8E4M3B11FNUZ, 4, 3, 11, FNUZ, 8},
    {"f6E2M3FN", mlirTypeIsAFloat6E2M3FN, 2, 3, 1, FINITE, 6},
    {"f6E3M2FN", mlirTypeIsAFloat6E3M2FN, 3, 2, 3, FINITE, 6},
    {"f4E2M1FN", mlirTypeIsAFloat4E2M1FN, 2, 1, 1, FINITE, 4},
};
#define N_FORMATS (sizeof FORMATS / sizeof FORMATS[0])

static uint32_t f32_bits(int exponent) { return (uint32_t)(exponent + 127) << 23; } /* 2^exponent */

/* fN bits -> f32. Normals rebias the exponent; subnormals are m * 2^(1-bias-M),
 * exact in f32; the top codes are what the format says. */
static char *decode_text(const format_t *f) {
  int top = (1 << f->e) - 1, man_mask = (1 << f->m) - 1;
  kiln_buf_t b;
  kiln_buf_init(&b);
  kiln_buf_appendf(&b, "func.func private @__kiln_%s_to_f32(%%h: %s) -> f32 {\n", f->name, f->name);
  kiln_buf_appendf(&b,
                   "  %%c7 = arith.constant %d : i32\n"
                   "  %%c23 = arith.constant 23 : i32\n"
                   "  %%c31 = arith.constant 31 : i32\n"
                   "  %%cm = arith.constant %d : i32\n"
                   "  %%c0 = arith.constant 0 : i32\n"
                   "  %%emask = arith.constant %d : i32\n"
                   "  %%mmask = arith.constant %d : i32\n"
                   "  %%rebias = arith.constant %d : i32\n"
                   "  %%mshift = arith.constant %d : i32\n"
                   "  %%step = arith.constant %u : i32\n"
                   "  %%inf = arith.constant 2139095040 : i32\n"
                   "  %%qnan = arith.constant 2143289344 : i32\n",
                   f->bits - 1, f->m, top, man_mask, 127 - f->bias, 23 - f->m, f32_bits(1 - f->bias - f->m));
  kiln_buf_appendf(&b,
                   "  %%b = arith.bitcast %%h : %s to i%d\n"
                   "  %%x = arith.extui %%b : i%d to i32\n"
                   "  %%s0 = arith.shrui %%x, %%c7 : i32\n"
                   "  %%sign = arith.shli %%s0, %%c31 : i32\n"
                   "  %%e0 = arith.shrui %%x, %%cm : i32\n"
                   "  %%exp = arith.andi %%e0, %%emask : i32\n"
                   "  %%man = arith.andi %%x, %%mmask : i32\n"
                   "  %%e1 = arith.addi %%exp, %%rebias : i32\n"
                   "  %%e2 = arith.shli %%e1, %%c23 : i32\n"
                   "  %%m2 = arith.shli %%man, %%mshift : i32\n"
                   "  %%normal = arith.ori %%e2, %%m2 : i32\n"
                   "  %%mf = arith.uitofp %%man : i32 to f32\n"
                   "  %%stepf = arith.bitcast %%step : i32 to f32\n"
                   "  %%subf = arith.mulf %%mf, %%stepf : f32\n"
                   "  %%sub = arith.bitcast %%subf : f32 to i32\n"
                   "  %%is_sub = arith.cmpi eq, %%exp, %%c0 : i32\n"
                   "  %%mag0 = arith.select %%is_sub, %%sub, %%normal : i32\n",
                   f->name, f->bits, f->bits);
  if (f->special == IEEE) {
    kiln_buf_appendf(&b,
                     "  %%is_top = arith.cmpi eq, %%exp, %%emask : i32\n"
                     "  %%is_inf = arith.cmpi eq, %%man, %%c0 : i32\n"
                     "  %%special = arith.select %%is_inf, %%inf, %%qnan : i32\n"
                     "  %%mag = arith.select %%is_top, %%special, %%mag0 : i32\n"
                     "  %%r = arith.ori %%mag, %%sign : i32\n");
  } else if (f->special == FN) {
    kiln_buf_appendf(&b,
                     "  %%low = arith.constant 127 : i32\n"
                     "  %%l = arith.andi %%x, %%low : i32\n"
                     "  %%is_nan = arith.cmpi eq, %%l, %%low : i32\n"
                     "  %%mag = arith.select %%is_nan, %%qnan, %%mag0 : i32\n"
                     "  %%r = arith.ori %%mag, %%sign : i32\n");
  } else if (f->special == FINITE) {
    kiln_buf_append_str(&b, "  %r = arith.ori %mag0, %sign : i32\n");
  } else {
    kiln_buf_appendf(&b,
                     "  %%nan8 = arith.constant 128 : i32\n"
                     "  %%is_nan = arith.cmpi eq, %%x, %%nan8 : i32\n"
                     "  %%signed = arith.ori %%mag0, %%sign : i32\n"
                     "  %%r = arith.select %%is_nan, %%qnan, %%signed : i32\n");
  }
  kiln_buf_append_str(&b,
                      "  %f = arith.bitcast %r : i32 to f32\n"
                      "  return %f : f32\n"
                      "}");
  return kiln_buf_take(&b);
}

/* f32 -> fN bits, rounding to nearest even (see the top of the file). */
static char *encode_text(const format_t *f) {
  int top = (1 << f->e) - 1, man_mask = (1 << f->m) - 1, shift = 23 - f->m;
  int max_code, overflow_code, nan_code;
  switch (f->special) {
    case IEEE:
      max_code = ((top - 1) << f->m) | man_mask;
      overflow_code = top << f->m;
      nan_code = (top << f->m) | (1 << (f->m - 1));
      break;
    case FN:
      max_code = (top << f->m) | (man_mask - 1);
      overflow_code = nan_code = 0x7F;
      break;
    case FINITE: /* saturates; a NaN becomes the largest magnitude, as arith-expand has it */
      max_code = overflow_code = nan_code = (top << f->m) | man_mask;
      break;
    default:
      max_code = (top << f->m) | man_mask;
      overflow_code = nan_code = 0x80;
      break;
  }
  kiln_buf_t b;
  kiln_buf_init(&b);
  kiln_buf_appendf(&b, "func.func private @__kiln_f32_to_%s(%%x0: f32) -> %s {\n", f->name, f->name);
  kiln_buf_appendf(&b,
                   "  %%c0 = arith.constant 0 : i32\n"
                   "  %%c1 = arith.constant 1 : i32\n"
                   "  %%c7 = arith.constant %d : i32\n"
                   "  %%c31 = arith.constant 31 : i32\n"
                   "  %%abs_mask = arith.constant 2147483647 : i32\n"
                   "  %%inf32 = arith.constant 2139095040 : i32\n"
                   "  %%shift = arith.constant %d : i32\n"
                   "  %%half = arith.constant %d : i32\n"
                   "  %%rebias = arith.constant %d : i32\n"
                   "  %%min_normal = arith.constant %u : i32\n"
                   "  %%magic = arith.constant %u : i32\n"
                   "  %%max_code = arith.constant %d : i32\n"
                   "  %%over_code = arith.constant %d : i32\n"
                   "  %%nan_code = arith.constant %d : i32\n",
                   f->bits - 1, shift, (1 << (shift - 1)) - 1, (127 - f->bias) << f->m, f32_bits(1 - f->bias),
                   f32_bits(1 - f->bias - f->m + 23), max_code, overflow_code, nan_code);
  kiln_buf_append_str(&b,
                      "  %x = arith.bitcast %x0 : f32 to i32\n"
                      "  %s0 = arith.shrui %x, %c31 : i32\n"
                      "  %ax = arith.andi %x, %abs_mask : i32\n"
                      "  %is_nan = arith.cmpi ugt, %ax, %inf32 : i32\n"
                      "  %lsb0 = arith.shrui %ax, %shift : i32\n"
                      "  %lsb = arith.andi %lsb0, %c1 : i32\n"
                      "  %n0 = arith.addi %ax, %half : i32\n"
                      "  %n1 = arith.addi %n0, %lsb : i32\n"
                      "  %n2 = arith.shrui %n1, %shift : i32\n"
                      "  %normal = arith.subi %n2, %rebias : i32\n"
                      "  %axf = arith.bitcast %ax : i32 to f32\n"
                      "  %magicf = arith.bitcast %magic : i32 to f32\n"
                      "  %sf = arith.addf %axf, %magicf : f32\n"
                      "  %sb = arith.bitcast %sf : f32 to i32\n"
                      "  %sub = arith.subi %sb, %magic : i32\n"
                      "  %is_sub = arith.cmpi ult, %ax, %min_normal : i32\n"
                      "  %code0 = arith.select %is_sub, %sub, %normal : i32\n"
                      "  %is_over = arith.cmpi ugt, %code0, %max_code : i32\n"
                      "  %code1 = arith.select %is_over, %over_code, %code0 : i32\n"
                      "  %sign = arith.shli %s0, %c7 : i32\n");
  if (f->special == FNUZ) {
    /* No negative zero; the NaN (0x80) takes no sign either. */
    kiln_buf_append_str(&b,
                        "  %is_zero = arith.cmpi eq, %code1, %c0 : i32\n"
                        "  %is_nan_code = arith.cmpi eq, %code1, %nan_code : i32\n"
                        "  %unsigned = arith.ori %is_zero, %is_nan_code : i1\n"
                        "  %signed = arith.ori %code1, %sign : i32\n"
                        "  %code2 = arith.select %unsigned, %code1, %signed : i32\n"
                        "  %code = arith.select %is_nan, %nan_code, %code2 : i32\n");
  } else {
    kiln_buf_append_str(&b,
                        "  %code1n = arith.select %is_nan, %nan_code, %code1 : i32\n"
                        "  %code = arith.ori %code1n, %sign : i32\n");
  }
  kiln_buf_appendf(&b,
                   "  %%t = arith.trunci %%code : i32 to i%d\n"
                   "  %%h = arith.bitcast %%t : i%d to %s\n"
                   "  return %%h : %s\n"
                   "}",
                   f->bits, f->bits, f->name, f->name);
  return kiln_buf_take(&b);
}

typedef struct casts_s {
  MlirOperation *ext[N_FORMATS], *trunc[N_FORMATS];
  size_t n_ext[N_FORMATS], n_trunc[N_FORMATS];
} casts_t;

static void push(MlirOperation **items, size_t *n, MlirOperation op) {
  *items = kiln_realloc(*items, (*n + 1) * sizeof **items);
  (*items)[(*n)++] = op;
}

static MlirWalkResult collect_casts(MlirOperation op, void *user) {
  casts_t *c = user;
  bool ext = kiln_compiler_op_is(op, "arith.extf"), trunc = kiln_compiler_op_is(op, "arith.truncf");
  if (!ext && !trunc) return MlirWalkResultAdvance;
  MlirType from = mlirValueGetType(mlirOperationGetOperand(op, 0));
  MlirType to = mlirValueGetType(mlirOperationGetResult(op, 0));
  for (size_t i = 0; i < N_FORMATS; i++) {
    if (ext && FORMATS[i].is(from) && mlirTypeIsAF32(to)) push(&c->ext[i], &c->n_ext[i], op);
    if (trunc && FORMATS[i].is(to) && mlirTypeIsAF32(from)) push(&c->trunc[i], &c->n_trunc[i], op);
  }
  return MlirWalkResultAdvance;
}

kiln_status_t kiln_compiler_kernels_expand_f8(MlirContext context, MlirModule module) {
  casts_t c = {0};
  mlirOperationWalk(mlirModuleGetOperation(module), collect_casts, &c, MlirWalkPreOrder);
  kiln_status_t st = NULL;
  for (size_t i = 0; i < N_FORMATS; i++) {
    if (!st && c.n_ext[i]) {
      char *text = decode_text(&FORMATS[i]);
      st = kiln_compiler_kernels_replace_with_helper(context, c.ext[i], c.n_ext[i], text);
      kiln_free(text);
    }
    if (!st && c.n_trunc[i]) {
      char *text = encode_text(&FORMATS[i]);
      st = kiln_compiler_kernels_replace_with_helper(context, c.trunc[i], c.n_trunc[i], text);
      kiln_free(text);
    }
    kiln_free(c.ext[i]);
    kiln_free(c.trunc[i]);
  }
  return st;
}

/* ---- sub-byte buffers as 32-bit words ---- */

bool kiln_compiler_is_sub_byte_int(MlirType t) {
  return mlirTypeIsAInteger(t) && (mlirIntegerTypeGetWidth(t) == 2 || mlirIntegerTypeGetWidth(t) == 4);
}

static bool sub_byte(MlirType t) { return kiln_compiler_is_sub_byte_int(t); }

#define op1 kiln_compiler_build_before

static MlirValue bin(const char *name, MlirOperation before, MlirValue a, MlirValue b) {
  MlirValue ops[2] = {a, b};
  return op1(name, before, ops, 2, mlirValueGetType(a));
}

typedef struct packed_s {
  MlirContext ctx;
  MlirType type; /* the original memref type */
  unsigned bits; /* 2 or 4 */
  int64_t strides[8], offset;
} packed_t;

/* The element's bit position: (offset + sum(index_d * stride_d)) * bits, as index. */
static MlirValue bit_position(const packed_t *p, MlirOperation op, intptr_t first) {
  MlirType index = mlirIndexTypeGet(p->ctx);
  MlirValue lin = kiln_compiler_int_const_before(p->ctx, op, index, p->offset);
  for (intptr_t d = 0; d < mlirShapedTypeGetRank(p->type); d++) {
    MlirValue term = bin("arith.muli", op, mlirOperationGetOperand(op, first + d),
                         kiln_compiler_int_const_before(p->ctx, op, index, p->strides[d]));
    lin = bin("arith.addi", op, lin, term);
  }
  return bin("arith.muli", op, lin, kiln_compiler_int_const_before(p->ctx, op, index, p->bits));
}

/* arith::AtomicRMWKind values (the enum's generic form, as mlir-opt prints it). */
enum { ATOMIC_ANDI = 2, ATOMIC_ORI = 14 };

static void atomic(MlirContext ctx, MlirOperation before, int64_t kind, MlirValue value, MlirValue mem,
                   MlirValue word) {
  MlirAttribute k = mlirIntegerAttrGet(mlirIntegerTypeGet(ctx, 64), kind);
  MlirNamedAttribute attr = mlirNamedAttributeGet(mlirIdentifierGet(ctx, sref("kind")), k);
  MlirValue ops[3] = {value, mem, word};
  MlirType t = mlirValueGetType(value);
  MlirOperationState s = mlirOperationStateGet(sref("memref.atomic_rmw"), mlirOperationGetLocation(before));
  mlirOperationStateAddOperands(&s, 3, ops);
  mlirOperationStateAddResults(&s, 1, &t);
  mlirOperationStateAddAttributes(&s, 1, &attr);
  mlirBlockInsertOwnedOperationBefore(mlirOperationGetBlock(before), before, mlirOperationCreate(&s));
}

static KILN_MUST_USE kiln_status_t pack_arg(MlirContext ctx, MlirValue arg, const char *name) {
  MlirType t = mlirValueGetType(arg);
  packed_t p = {.ctx = ctx, .type = t, .bits = mlirIntegerTypeGetWidth(mlirShapedTypeGetElementType(t))};
  intptr_t rank = mlirShapedTypeGetRank(t);
  bool ok = rank <= 8 && mlirShapedTypeHasStaticShape(t) &&
            mlirLogicalResultIsSuccess(mlirMemRefTypeGetStridesAndOffset(t, p.strides, &p.offset)) &&
            !mlirShapedTypeIsDynamicStrideOrOffset(p.offset);
  int64_t extent = p.offset + 1;
  for (intptr_t d = 0; ok && d < rank; d++) {
    ok = !mlirShapedTypeIsDynamicStrideOrOffset(p.strides[d]);
    if (ok) extent += (mlirShapedTypeGetDimSize(t, d) - 1) * p.strides[d];
  }
  if (!ok) {
    return KILN_STATUS(KILN_STATUS_UNIMPLEMENTED,
                       "%s: a kernel takes an i%u buffer of dynamic shape or layout; kiln packs "
                       "sub-byte buffers of static shapes only",
                       name, p.bits);
  }
  /* Users first: the rewrite changes the use list. */
  size_t n = 0;
  for (MlirOpOperand u = mlirValueGetFirstUse(arg); !mlirOpOperandIsNull(u); u = mlirOpOperandGetNextUse(u))
    n++;
  MlirOperation *users = kiln_calloc(n + 1, sizeof *users);
  n = 0;
  for (MlirOpOperand u = mlirValueGetFirstUse(arg); !mlirOpOperandIsNull(u); u = mlirOpOperandGetNextUse(u)) {
    users[n++] = mlirOpOperandGetOwner(u);
  }
  for (size_t i = 0; i < n; i++) {
    if (!kiln_compiler_op_is(users[i], "memref.load") && !kiln_compiler_op_is(users[i], "memref.store")) {
      MlirStringRef s = mlirIdentifierStr(mlirOperationGetName(users[i]));
      kiln_free(users);
      return KILN_STATUS(KILN_STATUS_UNIMPLEMENTED,
                         "%s: a kernel uses an i%u buffer in %.*s; kiln packs sub-byte buffers for "
                         "loads and stores only",
                         name, p.bits, (int)s.length, s.data);
    }
  }
  MlirType i32 = mlirIntegerTypeGet(ctx, 32);
  MlirType index = mlirIndexTypeGet(ctx);
  int64_t words = (extent * p.bits + 31) / 32;
  MlirType flat = mlirMemRefTypeGet(i32, 1, &words, mlirAttributeGetNull(), mlirMemRefTypeGetMemorySpace(t));
  mlirValueSetType(arg, flat);
  for (size_t i = 0; i < n; i++) {
    MlirOperation op = users[i];
    bool store = kiln_compiler_op_is(op, "memref.store");
    MlirValue bitpos = bit_position(&p, op, store ? 2 : 1);
    MlirValue word = bin("arith.shrui", op, bitpos, kiln_compiler_int_const_before(ctx, op, index, 5));
    MlirValue in_word = bin("arith.andi", op, bitpos, kiln_compiler_int_const_before(ctx, op, index, 31));
    MlirValue sh = op1("arith.index_cast", op, &in_word, 1, i32);
    if (!store) {
      MlirValue load_ops[2] = {arg, word};
      MlirValue w = op1("memref.load", op, load_ops, 2, i32);
      MlirValue shifted = bin("arith.shrui", op, w, sh);
      MlirValue v = op1("arith.trunci", op, &shifted, 1, mlirValueGetType(mlirOperationGetResult(op, 0)));
      mlirValueReplaceAllUsesOfWith(mlirOperationGetResult(op, 0), v);
    } else {
      MlirValue value = mlirOperationGetOperand(op, 0);
      MlirValue wide = op1("arith.extui", op, &value, 1, i32);
      MlirValue mask =
          bin("arith.shli", op, kiln_compiler_int_const_before(ctx, op, i32, (1 << p.bits) - 1), sh);
      MlirValue keep = bin("arith.xori", op, mask, kiln_compiler_int_const_before(ctx, op, i32, -1));
      atomic(ctx, op, ATOMIC_ANDI, keep, arg, word);
      atomic(ctx, op, ATOMIC_ORI, bin("arith.shli", op, wide, sh), arg, word);
    }
    mlirOperationDestroy(op);
  }
  kiln_free(users);
  return NULL;
}

typedef kiln_compiler_ops_t funcs_t;

static MlirWalkResult collect_funcs(MlirOperation op, void *user) {
  if (!kiln_compiler_op_is(op, "gpu.func")) return MlirWalkResultAdvance;
  kiln_compiler_ops_push(user, op);
  return MlirWalkResultSkip;
}

kiln_status_t kiln_compiler_kernels_pack_sub_byte(MlirContext context, MlirModule module, const char *name) {
  funcs_t funcs = {0};
  mlirOperationWalk(mlirModuleGetOperation(module), collect_funcs, &funcs, MlirWalkPreOrder);
  kiln_status_t st = NULL;
  for (size_t f = 0; f < funcs.n && !st; f++) {
    MlirBlock entry = mlirRegionGetFirstBlock(mlirOperationGetRegion(funcs.items[f], 0));
    intptr_t n = mlirBlockGetNumArguments(entry);
    bool changed = false;
    for (intptr_t i = 0; i < n && !st; i++) {
      MlirValue arg = mlirBlockGetArgument(entry, i);
      MlirType t = mlirValueGetType(arg);
      if (!mlirTypeIsAMemRef(t) || !sub_byte(mlirShapedTypeGetElementType(t))) continue;
      st = pack_arg(context, arg, name);
      changed = true;
    }
    if (changed && !st) {
      MlirType *types = kiln_calloc((size_t)n + 1, sizeof *types);
      for (intptr_t i = 0; i < n; i++) types[i] = mlirValueGetType(mlirBlockGetArgument(entry, i));
      mlirOperationSetInherentAttributeByName(
          funcs.items[f], sref("function_type"),
          mlirTypeAttrGet(mlirFunctionTypeGet(context, n, types, 0, NULL)));
      kiln_free(types);
    }
  }
  kiln_free(funcs.items);
  return st;
}

/* ---- sub-byte arithmetic in 32 bits (SPIR-V) ---- */

/* A widened value: an i32 holding an iN value zero-extended (N = 2 or 4). */
typedef struct narrow_s {
  MlirValue *values;
  unsigned *bits;
  size_t n;
} narrow_t;

static bool narrow_int(MlirType t);

static unsigned narrow_bits(const narrow_t *w, MlirValue v) {
  MlirType t = mlirValueGetType(v);
  if (narrow_int(t)) return mlirIntegerTypeGetWidth(t);
  for (size_t i = w->n; i > 0; i--) {
    if (mlirValueEqual(w->values[i - 1], v)) return w->bits[i - 1];
  }
  return 0;
}

static void narrow_put(narrow_t *w, MlirValue v, unsigned bits) {
  w->values = kiln_realloc(w->values, (w->n + 1) * sizeof *w->values);
  w->bits = kiln_realloc(w->bits, (w->n + 1) * sizeof *w->bits);
  w->values[w->n] = v;
  w->bits[w->n++] = bits;
}

/* v (an i32 holding N zero-extended bits) sign-extended to 32 bits. */
static MlirValue sext32(MlirContext ctx, MlirOperation before, MlirValue v, unsigned bits) {
  MlirType i32 = mlirIntegerTypeGet(ctx, 32);
  MlirValue k = kiln_compiler_int_const_before(ctx, before, i32, 32 - bits);
  return bin("arith.shrsi", before, bin("arith.shli", before, v, k), k);
}

static MlirValue mask32(MlirContext ctx, MlirOperation before, MlirValue v, unsigned bits) {
  return bin("arith.andi", before, v,
             kiln_compiler_int_const_before(ctx, before, mlirIntegerTypeGet(ctx, 32), (1 << bits) - 1));
}

/* The integers SPIR-V has no type for that kiln widens: i2 and i4 (packed
 * buffers), and the i6 of f6's bits (kernel values only). */
static bool narrow_int(MlirType t) {
  return mlirTypeIsAInteger(t) && mlirIntegerTypeGetWidth(t) > 1 && mlirIntegerTypeGetWidth(t) < 8;
}

/* An operand as i32: the widened value, or an iN one (not widened yet) extended. */
static MlirValue wide_operand(MlirContext ctx, MlirOperation op, MlirValue v) {
  if (narrow_int(mlirValueGetType(v))) v = op1("arith.extui", op, &v, 1, mlirIntegerTypeGet(ctx, 32));
  return v;
}

static bool signed_op(MlirOperation op) {
  if (kiln_compiler_op_is(op, "arith.cmpi")) {
    int64_t p = mlirIntegerAttrGetValueInt(mlirOperationGetAttributeByName(op, sref("predicate")));
    return p >= 2 && p <= 5;
  }
  return kiln_compiler_op_is(op, "arith.divsi") || kiln_compiler_op_is(op, "arith.remsi") ||
         kiln_compiler_op_is(op, "arith.maxsi") || kiln_compiler_op_is(op, "arith.minsi") ||
         kiln_compiler_op_is(op, "arith.shrsi") || kiln_compiler_op_is(op, "arith.sitofp") ||
         kiln_compiler_op_is(op, "arith.extsi") || kiln_compiler_op_is(op, "arith.ceildivsi") ||
         kiln_compiler_op_is(op, "arith.floordivsi");
}

/* Ops whose iN result may leave the N bits (wrap, or a signed result). */
static bool needs_mask(MlirOperation op) {
  return kiln_compiler_op_is(op, "arith.addi") || kiln_compiler_op_is(op, "arith.subi") ||
         kiln_compiler_op_is(op, "arith.muli") || kiln_compiler_op_is(op, "arith.shli") || signed_op(op) ||
         kiln_compiler_op_is(op, "arith.trunci") || kiln_compiler_op_is(op, "arith.fptosi") ||
         kiln_compiler_op_is(op, "arith.fptoui");
}

static KILN_MUST_USE kiln_status_t widen_op_sub_byte(MlirContext ctx, narrow_t *w, MlirOperation op,
                                                     const char *name) {
  intptr_t n_in = mlirOperationGetNumOperands(op), n_out = mlirOperationGetNumResults(op);
  unsigned in_bits = 0, out_bits = 0;
  for (intptr_t i = 0; i < n_in; i++) {
    unsigned b = narrow_bits(w, mlirOperationGetOperand(op, i));
    if (b) in_bits = b;
  }
  if (n_out == 1 && narrow_int(mlirValueGetType(mlirOperationGetResult(op, 0)))) {
    out_bits = mlirIntegerTypeGetWidth(mlirValueGetType(mlirOperationGetResult(op, 0)));
  }
  if (!in_bits && !out_bits) return NULL;
  MlirType i32 = mlirIntegerTypeGet(ctx, 32);
  MlirValue result = n_out == 1 ? mlirOperationGetResult(op, 0) : (MlirValue){NULL};
  MlirValue now = {NULL};
  if (kiln_compiler_op_is(op, "arith.constant")) {
    int64_t v = mlirIntegerAttrGetValueInt(mlirOperationGetAttributeByName(op, sref("value")));
    now = kiln_compiler_int_const_before(ctx, op, i32, v & ((1 << out_bits) - 1));
  } else if (kiln_compiler_op_is(op, "arith.extui") || kiln_compiler_op_is(op, "arith.extsi")) {
    MlirValue v = mlirOperationGetOperand(op, 0);
    if (narrow_int(mlirValueGetType(v))) v = op1("arith.extui", op, &v, 1, i32);
    if (kiln_compiler_op_is(op, "arith.extsi")) v = sext32(ctx, op, v, in_bits);
    MlirType to = mlirValueGetType(result);
    if (out_bits) {
      now = mask32(ctx, op, v, out_bits); /* i2 -> i4 */
    } else {
      /* A value of its own (not the widened one), even when the width is 32. */
      unsigned tw = mlirIntegerTypeGetWidth(to);
      if (!kiln_compiler_op_is(op, "arith.extsi")) v = mask32(ctx, op, v, in_bits);
      now = tw == 32 ? v
                     : op1(tw < 32 ? "arith.trunci"
                                   : (kiln_compiler_op_is(op, "arith.extsi") ? "arith.extsi" : "arith.extui"),
                           op, &v, 1, to);
    }
  } else if (kiln_compiler_op_is(op, "arith.trunci") && out_bits && !in_bits) {
    MlirValue v = mlirOperationGetOperand(op, 0);
    unsigned fw = mlirIntegerTypeGetWidth(mlirValueGetType(v));
    if (fw != 32) v = op1(fw < 32 ? "arith.extui" : "arith.trunci", op, &v, 1, i32);
    now = mask32(ctx, op, v, out_bits);
  } else if (kiln_compiler_op_is(op, "arith.uitofp") || kiln_compiler_op_is(op, "arith.sitofp")) {
    MlirValue v = wide_operand(ctx, op, mlirOperationGetOperand(op, 0));
    if (kiln_compiler_op_is(op, "arith.sitofp")) v = sext32(ctx, op, v, in_bits);
    now = op1(kiln_compiler_op_is(op, "arith.sitofp") ? "arith.sitofp" : "arith.uitofp", op, &v, 1,
              mlirValueGetType(result));
  } else if (kiln_compiler_op_is(op, "arith.fptoui") || kiln_compiler_op_is(op, "arith.fptosi")) {
    MlirValue v = mlirOperationGetOperand(op, 0);
    now =
        mask32(ctx, op,
               op1(kiln_compiler_op_is(op, "arith.fptosi") ? "arith.fptosi" : "arith.fptoui", op, &v, 1, i32),
               out_bits);
  } else if (mlirOperationGetNumRegions(op) == 0 && n_out == 1 &&
             (kiln_compiler_op_is(op, "arith.addi") || kiln_compiler_op_is(op, "arith.subi") ||
              kiln_compiler_op_is(op, "arith.muli") || kiln_compiler_op_is(op, "arith.andi") ||
              kiln_compiler_op_is(op, "arith.ori") || kiln_compiler_op_is(op, "arith.xori") ||
              kiln_compiler_op_is(op, "arith.shli") || kiln_compiler_op_is(op, "arith.shrui") ||
              kiln_compiler_op_is(op, "arith.shrsi") || kiln_compiler_op_is(op, "arith.divui") ||
              kiln_compiler_op_is(op, "arith.remui") || kiln_compiler_op_is(op, "arith.divsi") ||
              kiln_compiler_op_is(op, "arith.remsi") || kiln_compiler_op_is(op, "arith.maxui") ||
              kiln_compiler_op_is(op, "arith.minui") || kiln_compiler_op_is(op, "arith.maxsi") ||
              kiln_compiler_op_is(op, "arith.minsi") || kiln_compiler_op_is(op, "arith.cmpi") ||
              kiln_compiler_op_is(op, "arith.select"))) {
    bool sign = signed_op(op);
    MlirValue *operands = kiln_calloc((size_t)n_in + 1, sizeof *operands);
    for (intptr_t i = 0; i < n_in; i++) {
      MlirValue v = mlirOperationGetOperand(op, i);
      bool narrow = narrow_bits(w, v) != 0;
      v = wide_operand(ctx, op, v);
      /* shrsi's amount stays as it is; everything else narrow is sign-extended for signed ops */
      if (narrow && sign && !(kiln_compiler_op_is(op, "arith.shrsi") && i == 1))
        v = sext32(ctx, op, v, in_bits);
      operands[i] = v;
    }
    MlirType rt = out_bits ? i32 : mlirValueGetType(result);
    MlirOperationState s =
        mlirOperationStateGet(mlirIdentifierStr(mlirOperationGetName(op)), mlirOperationGetLocation(op));
    mlirOperationStateAddOperands(&s, n_in, operands);
    mlirOperationStateAddResults(&s, 1, &rt);
    for (intptr_t i = 0; i < mlirOperationGetNumAttributes(op); i++) {
      MlirNamedAttribute a = mlirOperationGetAttribute(op, i);
      mlirOperationStateAddAttributes(&s, 1, &a);
    }
    MlirOperation wide = mlirOperationCreate(&s);
    mlirBlockInsertOwnedOperationBefore(mlirOperationGetBlock(op), op, wide);
    now = mlirOperationGetResult(wide, 0);
    if (out_bits && needs_mask(op)) now = mask32(ctx, op, now, out_bits);
    kiln_free(operands);
  } else {
    MlirStringRef s = mlirIdentifierStr(mlirOperationGetName(op));
    return KILN_STATUS(KILN_STATUS_UNIMPLEMENTED,
                       "%s: a kernel's %.*s computes on i%u, which SPIR-V has no type for and kiln "
                       "does not yet widen for this op",
                       name, (int)s.length, s.data, in_bits ? in_bits : out_bits);
  }
  if (out_bits) narrow_put(w, now, out_bits);
  mlirValueReplaceAllUsesOfWith(result, now);
  mlirOperationDestroy(op);
  return NULL;
}

kiln_status_t kiln_compiler_kernels_widen_sub_byte(MlirContext context, MlirModule module, const char *name) {
  funcs_t ops = {0};
  mlirOperationWalk(mlirModuleGetOperation(module), kiln_compiler_ops_collect_all, &ops, MlirWalkPreOrder);
  narrow_t w = {0};
  kiln_status_t st = NULL;
  for (size_t i = 0; i < ops.n && !st; i++) {
    MlirOperation op = ops.items[i];
    if (kiln_compiler_op_is(op, "gpu.module") || kiln_compiler_op_is(op, "gpu.func") ||
        kiln_compiler_op_is(op, "builtin.module"))
      continue;
    st = widen_op_sub_byte(context, &w, op, name);
  }
  kiln_free(ops.items);
  kiln_free(w.values);
  kiln_free(w.bits);
  return st;
}

/* ---- unsigned i8/i16 ops on SPIR-V profiles without Int8/Int16 ---- */

typedef struct unsigned_ops_s {
  kiln_compiler_ops_t ops;
  bool int8, int16; /* the profile's capabilities */
} unsigned_ops_t;

static MlirWalkResult find_unsigned(MlirOperation op, void *user) {
  unsigned_ops_t *u = user;
  if (!(kiln_compiler_op_is(op, "arith.divui") || kiln_compiler_op_is(op, "arith.remui") ||
        kiln_compiler_op_is(op, "arith.maxui") || kiln_compiler_op_is(op, "arith.minui"))) {
    return MlirWalkResultAdvance;
  }
  MlirType t = mlirValueGetType(mlirOperationGetResult(op, 0));
  unsigned w = mlirTypeIsAInteger(t) ? mlirIntegerTypeGetWidth(t) : 0;
  if ((w == 8 && !u->int8) || (w == 16 && !u->int16)) kiln_compiler_ops_push(&u->ops, op);
  return MlirWalkResultAdvance;
}

void kiln_compiler_kernels_widen_unsigned(MlirContext context, MlirModule module, bool int8, bool int16) {
  unsigned_ops_t u = {.int8 = int8, .int16 = int16};
  mlirOperationWalk(mlirModuleGetOperation(module), find_unsigned, &u, MlirWalkPreOrder);
  MlirType i32 = mlirIntegerTypeGet(context, 32);
  for (size_t i = 0; i < u.ops.n; i++) {
    MlirOperation op = u.ops.items[i];
    MlirValue a = mlirOperationGetOperand(op, 0), b = mlirOperationGetOperand(op, 1);
    MlirValue wa = op1("arith.extui", op, &a, 1, i32), wb = op1("arith.extui", op, &b, 1, i32);
    MlirStringRef name = mlirIdentifierStr(mlirOperationGetName(op));
    char full[32];
    snprintf(full, sizeof full, "%.*s", (int)name.length, name.data);
    MlirValue r = bin(full, op, wa, wb);
    MlirValue t = op1("arith.trunci", op, &r, 1, mlirValueGetType(mlirOperationGetResult(op, 0)));
    mlirValueReplaceAllUsesOfWith(mlirOperationGetResult(op, 0), t);
    mlirOperationDestroy(op);
  }
  kiln_free(u.ops.items);
}
