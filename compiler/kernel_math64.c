/* Math functions in f64 for backends with no double-precision library: a CPU
 * executable (an embedded ELF imports nothing, not even libm) and AMD without
 * ROCm's device libraries. kernel_math.c's f32 helpers are the model: each is a
 * func.func built from arithmetic, bit operations and the few functions every
 * backend has (sqrt, absf), and other math functions that are helpers in turn.
 * The f64 ones need longer polynomials and exact range reductions, so they are
 * written by a small emitter below instead of by hand.
 *
 * Accuracy, measured against mpmath at 40 digits on 20,000-300,000 arguments per
 * function by a Python model of the same operations (the algorithms are
 * textbook; the constants are pi, ln 2 and friends, and one fit):
 *   exp       1 ulp    k = round(x log2 e), r = x - k ln2 (ln2 in two parts, the
 *                      high one 32 bits so k ln2_hi is exact), Taylor to r^13,
 *                      times 2^k in two factors (subnormal results too)
 *   exp2      1 ulp    2^k exp((x - k) ln 2), k = round(x) (x - k exact)
 *   log       1 ulp    x = m 2^e, m in [sqrt(1/2), sqrt 2), f = m - 1,
 *                      s = f/(2+f), log(1+f) = f - (f^2/2 - s (f^2/2 + R(s^2)))
 *                      with R the atanh series to s^24; subnormals scaled first
 *   log2      1 ulp    the same parts: e + log(m)/ln 2 (exact on powers of two)
 *   log10     2 ulp    e log10(2) + log(m)/ln 10
 *   sin, cos  3 ulp    for |x| < 1e10: k = round(2x/pi), r = x - k pi/2 with pi/2
 *                      in seven 20-bit parts and a tail (k pi_i exact for
 *                      |k| < 2^33), Taylor to r^19 / r^18, the quadrant k mod 4.
 *                      Past 1e10 the reduction loses accuracy (no Payne-Hanek).
 *   atan      2 ulp    |x| > 1 by pi/2 - atan(1/|x|), then past tan(pi/8) by
 *                      pi/4 + atan((z-1)/(z+1)); the odd series to w^43
 *   cbrt      1 ulp    exp(log|x| / 3), one Newton step, the sign put back
 *   erf       2 ulp    |x| < 0.5: Taylor to x^29; to 2.5: 1 - erfc; to 6:
 *                      1 - erfc by the continued fraction; then +-1
 *   erfc      3 ulp    x in [0.5, 2.5): exp(-x^2) P(x - 1.5), P the degree-21
 *                      Chebyshev fit of exp(x^2) erfc(x) there (mpmath.chebyfit
 *                      at 50 digits, error 2.5e-18); x >= 2.5: exp(-x^2) /
 *                      (sqrt(pi) K), K Laplace's continued fraction, 60 terms;
 *                      |x| < 0.5: 1 - erf; x < 0: 2 - erfc(-x). exp(-x^2)
 *                      takes x^2 as two doubles (Dekker), so it is 1 ulp too.
 *   floor, ceil  exact, through a 64-bit integer below 2^52
 *   remf      exact    the f32 helper's shift-and-subtract on 64-bit integers
 * The helpers that only combine others (asin, acos, atan2, tan, log1p, expm1,
 * trunc) are kernel_math.c's f32 text in f64.
 */
#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include "base/alloc.h"
#include "base/buf.h"
#include "compiler/kernel_types.h"

/* ---- the emitter: SSA values %v<N>, the arguments %v0 (and %v1) ---- */

typedef struct em_s {
  kiln_buf_t b;
  int n; /* the next value number */
} em_t;

typedef int v_t;

static v_t line(em_t *e, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static v_t line(em_t *e, const char *fmt, ...) {
  v_t v = e->n++;
  kiln_buf_appendf(&e->b, "  %%v%d = ", v);
  va_list ap;
  va_start(ap, fmt);
  kiln_buf_appendvf(&e->b, fmt, ap);
  va_end(ap);
  kiln_buf_append_char(&e->b, '\n');
  return v;
}

static v_t k(em_t *e, double c) {
  uint64_t u;
  memcpy(&u, &c, sizeof u);
  return line(e, "arith.constant 0x%016" PRIX64 " : f64", u);
}
static v_t ki(em_t *e, int64_t c) { return line(e, "arith.constant %" PRId64 " : i64", c); }
static v_t f2(em_t *e, const char *op, v_t a, v_t b) { return line(e, "%s %%v%d, %%v%d : f64", op, a, b); }
static v_t f1(em_t *e, const char *op, v_t a) { return line(e, "%s %%v%d : f64", op, a); }
static v_t i2(em_t *e, const char *op, v_t a, v_t b) { return line(e, "%s %%v%d, %%v%d : i64", op, a, b); }
static v_t add(em_t *e, v_t a, v_t b) { return f2(e, "arith.addf", a, b); }
static v_t sub(em_t *e, v_t a, v_t b) { return f2(e, "arith.subf", a, b); }
static v_t mul(em_t *e, v_t a, v_t b) { return f2(e, "arith.mulf", a, b); }
static v_t dvd(em_t *e, v_t a, v_t b) { return f2(e, "arith.divf", a, b); }
static v_t cmp(em_t *e, const char *pred, v_t a, v_t b) {
  return line(e, "arith.cmpf %s, %%v%d, %%v%d : f64", pred, a, b);
}
static v_t icmp(em_t *e, const char *pred, v_t a, v_t b) {
  return line(e, "arith.cmpi %s, %%v%d, %%v%d : i64", pred, a, b);
}
static v_t sel(em_t *e, v_t c, v_t a, v_t b) { return line(e, "arith.select %%v%d, %%v%d, %%v%d : f64", c, a, b); }
static v_t isel(em_t *e, v_t c, v_t a, v_t b) { return line(e, "arith.select %%v%d, %%v%d, %%v%d : i64", c, a, b); }
static v_t to_bits(em_t *e, v_t a) { return line(e, "arith.bitcast %%v%d : f64 to i64", a); }
static v_t from_bits(em_t *e, v_t a) { return line(e, "arith.bitcast %%v%d : i64 to f64", a); }
static v_t to_int(em_t *e, v_t a) { return line(e, "arith.fptosi %%v%d : f64 to i64", a); }
static v_t to_float(em_t *e, v_t a) { return line(e, "arith.sitofp %%v%d : i64 to f64", a); }

/* c[0] x^(n-1) + ... + c[n-1], by Horner. */
static v_t horner(em_t *e, v_t x, const double *c, size_t n) {
  v_t p = k(e, c[0]);
  for (size_t i = 1; i < n; i++) p = add(e, mul(e, p, x), k(e, c[i]));
  return p;
}

/* The helper's text: `func.func private @NAME(%v0: T[, %v1: T]) -> T` (T f64, or
 * i64 for the integer helpers), the body `build` writes, and its result returned. */
static char *helper(const char *name, const char *type, int args, v_t (*build)(em_t *)) {
  em_t e = {.n = args};
  kiln_buf_init(&e.b);
  kiln_buf_appendf(&e.b, "func.func private @%s(%%v0: %s", name, type);
  if (args == 2) kiln_buf_appendf(&e.b, ", %%v1: %s", type);
  kiln_buf_appendf(&e.b, ") -> %s {\n", type);
  v_t r = build(&e);
  kiln_buf_appendf(&e.b, "  return %%v%d : %s\n}", r, type);
  return kiln_buf_take(&e.b);
}

#define INF64 __builtin_inf()
#define LN2_HI 0x1.62e42fee00000p-1 /* 32 significant bits */
#define LN2_LO 0x1.a39ef35793c76p-33

/* ---- exp ---- */

/* 2^k for an integer-valued f64 k in [-1100, 1100]: two normal factors, so
 * y * s1 * s2 rounds once into the subnormals, if at all. */
static void two_to(em_t *e, v_t kf, v_t *s1, v_t *s2) {
  v_t kk = to_int(e, kf);
  v_t k1 = i2(e, "arith.divsi", kk, ki(e, 2));
  v_t k2 = i2(e, "arith.subi", kk, k1);
  v_t bias = ki(e, 1023), c52 = ki(e, 52);
  *s1 = from_bits(e, i2(e, "arith.shli", i2(e, "arith.addi", k1, bias), c52));
  *s2 = from_bits(e, i2(e, "arith.shli", i2(e, "arith.addi", k2, bias), c52));
}

static v_t build_exp(em_t *e) {
  static const double taylor[] = {
      1.0 / 6227020800.0, 1.0 / 479001600.0, 1.0 / 39916800.0, 1.0 / 3628800.0, 1.0 / 362880.0,
      1.0 / 40320.0,      1.0 / 5040.0,      1.0 / 720.0,       1.0 / 120.0,     1.0 / 24.0,
      1.0 / 6.0,          0.5,               1.0,               1.0};
  v_t x = 0;
  v_t t = add(e, mul(e, x, k(e, 0x1.71547652b82fep+0)), k(e, 0.5));
  v_t kf = f1(e, "math.floor", t);
  kf = f2(e, "arith.minimumf", f2(e, "arith.maximumf", kf, k(e, -1100.0)), k(e, 1100.0));
  v_t r = sub(e, sub(e, x, mul(e, kf, k(e, LN2_HI))), mul(e, kf, k(e, LN2_LO)));
  v_t p = horner(e, r, taylor, sizeof taylor / sizeof taylor[0]);
  v_t s1, s2;
  two_to(e, kf, &s1, &s2);
  v_t y = mul(e, mul(e, p, s1), s2);
  v_t over = cmp(e, "ogt", x, k(e, 709.782712893384));
  v_t under = cmp(e, "olt", x, k(e, -745.1332191019412));
  v_t nan = cmp(e, "uno", x, x);
  v_t z = sel(e, over, k(e, INF64), y);
  z = sel(e, under, k(e, 0.0), z);
  return sel(e, nan, x, z);
}

/* exp2: 2^k exp((x - k) ln 2), k = round(x); x - k is exact, so the rounding of
 * x ln 2 (250 ulp at x = 1023 through exp(x ln 2), MLIR's expansion) never
 * happens. Clamping k keeps the factors normal; far outside, exp saturates. */
static v_t build_exp2(em_t *e) {
  v_t x = 0;
  v_t kf = f1(e, "math.floor", add(e, x, k(e, 0.5)));
  kf = f2(e, "arith.minimumf", f2(e, "arith.maximumf", kf, k(e, -1100.0)), k(e, 1100.0));
  v_t y = f1(e, "math.exp", mul(e, sub(e, x, kf), k(e, 0x1.62e42fefa39efp-1)));
  v_t s1, s2;
  two_to(e, kf, &s1, &s2);
  return sel(e, cmp(e, "uno", x, x), x, mul(e, mul(e, y, s1), s2));
}

/* ---- log, log2, log10 ---- */

/* x > 0 finite as e + log(1+f) parts: *ef (e as f64) and *lm = log(1+f), with
 * m = 1+f in [sqrt(1/2), sqrt 2). Subnormals are scaled by 2^54 first. */
static void log_parts(em_t *e, v_t x, v_t *ef, v_t *lm) {
  static const double atanh2[] = {2.0 / 25, 2.0 / 23, 2.0 / 21, 2.0 / 19, 2.0 / 17, 2.0 / 15,
                                  2.0 / 13, 2.0 / 11, 2.0 / 9,  2.0 / 7,  2.0 / 5,  2.0 / 3};
  v_t small = cmp(e, "olt", x, k(e, 0x1p-1022));
  v_t xs = sel(e, small, mul(e, x, k(e, 0x1p54)), x);
  v_t adj = isel(e, small, ki(e, -54), ki(e, 0));
  v_t b = to_bits(e, xs);
  v_t eb = i2(e, "arith.andi", i2(e, "arith.shrui", b, ki(e, 52)), ki(e, 2047));
  v_t e0 = i2(e, "arith.subi", eb, ki(e, 1023));
  v_t mb = i2(e, "arith.ori", i2(e, "arith.andi", b, ki(e, 0xFFFFFFFFFFFFFLL)), ki(e, 0x3FF0000000000000LL));
  v_t m = from_bits(e, mb);
  v_t big = cmp(e, "ogt", m, k(e, 0x1.6a09e667f3bcdp+0));
  v_t m2 = sel(e, big, mul(e, m, k(e, 0.5)), m);
  v_t ex = i2(e, "arith.addi", i2(e, "arith.addi", e0, isel(e, big, ki(e, 1), ki(e, 0))), adj);
  *ef = to_float(e, ex);
  v_t f = sub(e, m2, k(e, 1.0));
  v_t s = dvd(e, f, add(e, f, k(e, 2.0)));
  v_t z = mul(e, s, s);
  v_t r = mul(e, horner(e, z, atanh2, sizeof atanh2 / sizeof atanh2[0]), z);
  v_t hfsq = mul(e, mul(e, k(e, 0.5), f), f);
  /* f - (hfsq - s (hfsq + R)) */
  *lm = sub(e, f, sub(e, hfsq, mul(e, s, add(e, hfsq, r))));
}

/* Zero gives -inf, negatives NaN, +inf itself, NaN itself. */
static v_t log_specials(em_t *e, v_t x, v_t y) {
  v_t r = sel(e, cmp(e, "oeq", x, k(e, INF64)), x, y);
  r = sel(e, cmp(e, "olt", x, k(e, 0.0)), k(e, __builtin_nan("")), r);
  r = sel(e, cmp(e, "oeq", x, k(e, 0.0)), k(e, -INF64), r);
  return sel(e, cmp(e, "uno", x, x), x, r);
}

static v_t build_log(em_t *e) {
  v_t ef, lm;
  log_parts(e, 0, &ef, &lm);
  /* e ln2_hi - ((-lm) - e ln2_lo), the exact product first */
  v_t y = add(e, mul(e, ef, k(e, LN2_HI)), add(e, mul(e, ef, k(e, LN2_LO)), lm));
  return log_specials(e, 0, y);
}

static v_t build_log2(em_t *e) {
  v_t ef, lm;
  log_parts(e, 0, &ef, &lm);
  return log_specials(e, 0, add(e, ef, mul(e, lm, k(e, 0x1.71547652b82fep+0))));
}

static v_t build_log10(em_t *e) {
  v_t ef, lm;
  log_parts(e, 0, &ef, &lm);
  v_t y = add(e, mul(e, ef, k(e, 0x1.34413509f79ffp-2)), mul(e, lm, k(e, 0x1.bcb7b1526e50ep-2)));
  return log_specials(e, 0, y);
}

/* ---- sin, cos ---- */

/* pi/2 in seven 20-bit parts and a tail (k * part exact for |k| < 2^33). */
static const double pio2_parts[] = {0x1.921fc00000000p+0,  -0x1.5777a00000000p-21, -0x1.73dcc00000000p-43,
                                    0x1.898cc00000000p-64, 0x1.45c0600000000p-86,  0x1.c1cd200000000p-107,
                                    -0x1.adfb600000000p-128, -0x1.f77598338bfdfp-151};

/* The quadrant's bits (*odd: q odd, *hi: q >= 2) and sin r, cos r. */
static void sincos_reduce(em_t *e, v_t x, v_t *odd, v_t *hi, v_t *s, v_t *c) {
  static const double sin_c[] = {-1.0 / 121645100408832000.0, 1.0 / 355687428096000.0, -1.0 / 1307674368000.0,
                                 1.0 / 6227020800.0,          -1.0 / 39916800.0,       1.0 / 362880.0,
                                 -1.0 / 5040.0,               1.0 / 120.0,             -1.0 / 6.0};
  static const double cos_c[] = {-1.0 / 6402373705728000.0, 1.0 / 20922789888000.0, -1.0 / 87178291200.0,
                                 1.0 / 479001600.0,         -1.0 / 3628800.0,       1.0 / 40320.0,
                                 -1.0 / 720.0,              1.0 / 24.0,             -0.5};
  v_t kf = f1(e, "math.floor", add(e, mul(e, x, k(e, 0x1.45f306dc9c883p-1)), k(e, 0.5)));
  /* infinities and NaN: k = 0 (the result is NaN anyway), never a poison fptosi */
  v_t finite = cmp(e, "olt", f1(e, "math.absf", kf), k(e, INF64));
  kf = sel(e, finite, kf, k(e, 0.0));
  v_t r = x;
  for (size_t i = 0; i < sizeof pio2_parts / sizeof pio2_parts[0]; i++) {
    r = sub(e, r, mul(e, kf, k(e, pio2_parts[i])));
  }
  /* k mod 4, exact for any integer-valued f64 */
  v_t q4 = mul(e, f1(e, "math.floor", mul(e, kf, k(e, 0.25))), k(e, 4.0));
  v_t q = to_int(e, sub(e, kf, q4));
  *odd = icmp(e, "ne", i2(e, "arith.andi", q, ki(e, 1)), ki(e, 0));
  *hi = icmp(e, "ne", i2(e, "arith.andi", q, ki(e, 2)), ki(e, 0));
  v_t z = mul(e, r, r);
  *s = add(e, r, mul(e, mul(e, r, z), horner(e, z, sin_c, sizeof sin_c / sizeof sin_c[0])));
  *c = add(e, k(e, 1.0), mul(e, z, horner(e, z, cos_c, sizeof cos_c / sizeof cos_c[0])));
}

/* NaN for infinities and NaN. */
static v_t trig_specials(em_t *e, v_t x, v_t y) {
  v_t finite = cmp(e, "olt", f1(e, "math.absf", x), k(e, INF64));
  return sel(e, finite, y, sub(e, x, x));
}

static v_t build_sin(em_t *e) {
  v_t odd, hi, s, c;
  sincos_reduce(e, 0, &odd, &hi, &s, &c);
  /* q: 0 sin, 1 cos, 2 -sin, 3 -cos */
  v_t mag = sel(e, odd, c, s);
  v_t y = sel(e, hi, f1(e, "arith.negf", mag), mag);
  return trig_specials(e, 0, y);
}

static v_t build_cos(em_t *e) {
  v_t odd, hi, s, c;
  sincos_reduce(e, 0, &odd, &hi, &s, &c);
  /* q: 0 cos, 1 -sin, 2 -cos, 3 sin */
  v_t mag = sel(e, odd, s, c);
  v_t neg = line(e, "arith.xori %%v%d, %%v%d : i1", odd, hi);
  v_t y = sel(e, neg, f1(e, "arith.negf", mag), mag);
  return trig_specials(e, 0, y);
}

/* ---- atan ---- */

static v_t build_atan(em_t *e) {
  double series[21]; /* (-1)^n / (2n+1), n = 21 .. 1: w^43 .. w^3 in w^2 */
  for (int n = 21; n >= 1; n--) series[21 - n] = (n % 2 ? -1.0 : 1.0) / (2 * n + 1);
  v_t x = 0;
  v_t one = k(e, 1.0);
  v_t ax = f1(e, "math.absf", x);
  v_t big = cmp(e, "ogt", ax, one);
  v_t z = sel(e, big, dvd(e, one, ax), ax);
  v_t mid = cmp(e, "ogt", z, k(e, 0x1.a827999fcef32p-2));
  v_t w = sel(e, mid, dvd(e, sub(e, z, one), add(e, z, one)), z);
  v_t off = sel(e, mid, k(e, 0x1.921fb54442d18p-1), k(e, 0.0));
  v_t w2 = mul(e, w, w);
  v_t a = add(e, off, add(e, w, mul(e, mul(e, w, w2), horner(e, w2, series, 21))));
  v_t r = sel(e, big, sub(e, k(e, 0x1.921fb54442d18p+0), a), a);
  return line(e, "math.copysign %%v%d, %%v%d : f64", r, x);
}

/* ---- cbrt ---- */

static v_t build_cbrt(em_t *e) {
  v_t x = 0;
  v_t ax = f1(e, "math.absf", x);
  v_t y = f1(e, "math.exp", mul(e, f1(e, "math.log", ax), k(e, 1.0 / 3.0)));
  v_t y2 = mul(e, y, y);
  v_t step = dvd(e, sub(e, mul(e, y2, y), ax), mul(e, k(e, 3.0), y2));
  v_t r = line(e, "math.copysign %%v%d, %%v%d : f64", sub(e, y, step), x);
  /* zero, infinities and NaN are their own cube roots (the Newton step would
   * make 0/0 or inf - inf of them) */
  v_t regular = cmp(e, "olt", ax, k(e, INF64));
  regular = line(e, "arith.andi %%v%d, %%v%d : i1", regular, cmp(e, "one", ax, k(e, 0.0)));
  return sel(e, regular, r, x);
}

/* ---- erf, erfc ---- */

/* exp(-x^2) with x^2 as hi + lo (Veltkamp's split, Dekker's product), so the
 * rounding of x^2 does not reach the exponential: exp(-hi) (1 - lo). */
static v_t exp_neg_square(em_t *e, v_t x) {
  v_t c = mul(e, x, k(e, 134217729.0));
  v_t xh = sub(e, c, sub(e, c, x));
  v_t xl = sub(e, x, xh);
  v_t hi = mul(e, x, x);
  v_t lo = add(e, add(e, sub(e, mul(e, xh, xh), hi), mul(e, k(e, 2.0), mul(e, xh, xl))), mul(e, xl, xl));
  v_t eh = f1(e, "math.exp", f1(e, "arith.negf", hi));
  return mul(e, eh, sub(e, k(e, 1.0), lo));
}

/* erfc(a) for a >= 0 without the small-argument branch: the fit below 2.5, the
 * continued fraction above (a < 0.5 is the caller's). */
static v_t erfc_positive(em_t *e, v_t a) {
  static const double fit[] = {
      -0x1.2cd42fd5ae448p-36, 0x1.3965fcc123f34p-34, -0x1.b2da18000b108p-33, 0x1.ad9ed9660e461p-31,
      -0x1.be812ae05720ep-29, 0x1.a9cd193a1ec82p-27, -0x1.8abed30fd117dp-25, 0x1.67afddfff691fp-23,
      -0x1.4005ed33e34bep-21, 0x1.156da3f82098ap-19, -0x1.d415669483065p-18, 0x1.7f996d58a8d14p-16,
      -0x1.30c0ec99f64d5p-14, 0x1.d4509d5e7f139p-13, -0x1.5b0abfe5c2cfap-11, 0x1.ee705e721e615p-10,
      -0x1.513ed7600e533p-8,  0x1.b65944f35218fp-7,  -0x1.0dc51d2941e5dp-5,  0x1.37ea271bc549cp-4,
      -0x1.4f1988444caf7p-3,  0x1.494daffa2ad68p-2};
  v_t g = exp_neg_square(e, a);
  v_t mid = mul(e, horner(e, sub(e, a, k(e, 1.5)), fit, sizeof fit / sizeof fit[0]), g);
  /* K = a + (1/2) / (a + 1 / (a + (3/2) / (a + ...))), 60 terms from the tail;
   * a below 2.5 only feeds the branch not taken, so it is clamped there (no 0/0) */
  v_t ac = f2(e, "arith.maximumf", a, k(e, 2.5));
  v_t kk = ac;
  for (int n = 60; n >= 1; n--) kk = add(e, ac, dvd(e, k(e, n * 0.5), kk));
  v_t tail = dvd(e, g, mul(e, kk, k(e, 0x1.c5bf891b4ef6ap+0))); /* sqrt(pi) */
  return sel(e, cmp(e, "olt", a, k(e, 2.5)), mid, tail);
}

/* erf(a) for |a| < 0.5: 2/sqrt(pi) x sum (-1)^n x^2n / (n! (2n+1)), to x^29. */
static v_t erf_small(em_t *e, v_t x) {
  double c[15];
  double fact = 1.0;
  double terms[15];
  for (int n = 0; n < 15; n++) {
    if (n) fact *= n;
    terms[n] = (n % 2 ? -1.0 : 1.0) / (fact * (2 * n + 1));
  }
  for (int i = 0; i < 15; i++) c[i] = terms[14 - i];
  v_t p = horner(e, mul(e, x, x), c, 15);
  return mul(e, mul(e, p, x), k(e, 0x1.20dd750429b6dp+0));
}

static v_t build_erf(em_t *e) {
  v_t x = 0;
  v_t a = f1(e, "math.absf", x);
  v_t one = k(e, 1.0);
  v_t large = line(e, "math.copysign %%v%d, %%v%d : f64", sub(e, one, erfc_positive(e, a)), x);
  v_t small = cmp(e, "olt", a, k(e, 0.5));
  v_t r = sel(e, small, erf_small(e, x), large);
  /* past 6, erfc < 2e-17: +-1 (and the continued fraction never sees infinity) */
  v_t sat = cmp(e, "oge", a, k(e, 6.0));
  return sel(e, sat, line(e, "math.copysign %%v%d, %%v%d : f64", one, x), r);
}

static v_t build_erfc(em_t *e) {
  v_t x = 0;
  v_t a = f1(e, "math.absf", x);
  v_t ac = f2(e, "arith.minimumf", a, k(e, 30.0)); /* erfc(30) is 0 already */
  v_t pos = erfc_positive(e, ac);
  v_t r = sel(e, cmp(e, "olt", x, k(e, 0.0)), sub(e, k(e, 2.0), pos), pos);
  v_t small = cmp(e, "olt", a, k(e, 0.5));
  r = sel(e, small, sub(e, k(e, 1.0), erf_small(e, x)), r);
  return sel(e, cmp(e, "uno", x, x), x, r);
}

/* ---- floor, ceil ---- */

/* Below 2^52 in magnitude, through a 64-bit integer and one correction; from
 * 2^52 on every f64 is an integer (infinities too; NaN stays NaN). The sign of
 * a zero result is x's (floor(-0.5) is -1, ceil(-0.5) is -0). */
static v_t round_to_integer(em_t *e, bool up) {
  v_t x = 0;
  v_t t = to_float(e, to_int(e, x));
  v_t off = cmp(e, up ? "olt" : "ogt", t, x);
  v_t adj = sel(e, off, (up ? add : sub)(e, t, k(e, 1.0)), t);
  adj = line(e, "math.copysign %%v%d, %%v%d : f64", adj, x);
  v_t small = cmp(e, "olt", f1(e, "math.absf", x), k(e, 0x1p52));
  return sel(e, small, adj, x);
}
static v_t build_floor(em_t *e) { return round_to_integer(e, false); }
static v_t build_ceil(em_t *e) { return round_to_integer(e, true); }

/* ---- i64 without Int64: what arith-emulate-wide-int cannot split ---- */

/* Unsigned n / d and n % d, one quotient bit per step (restoring division), from
 * the arithmetic the emulation splits into i32 pairs: shifts, subtraction,
 * comparison, select. Unrolled: arith-emulate-wide-int converts no loop-carried
 * i64 (scf), and with the bit index constant, canonicalize folds the shifts by
 * it. 64 steps of 8 ops. */
static void udivrem(em_t *e, v_t n, v_t d, v_t *q, v_t *r) {
  v_t one = ki(e, 1);
  v_t qq = ki(e, 0), rr = ki(e, 0);
  for (int i = 63; i >= 0; i--) {
    v_t bit = i2(e, "arith.andi", i2(e, "arith.shrui", n, ki(e, i)), one);
    v_t r2 = i2(e, "arith.ori", i2(e, "arith.shli", rr, one), bit);
    v_t ge = icmp(e, "uge", r2, d);
    rr = isel(e, ge, i2(e, "arith.subi", r2, d), r2);
    qq = isel(e, ge, i2(e, "arith.ori", qq, ki(e, (int64_t)(UINT64_C(1) << i))), qq);
  }
  *q = qq;
  *r = rr;
}

static v_t build_divui(em_t *e) {
  v_t q, r;
  udivrem(e, 0, 1, &q, &r);
  return q;
}

static v_t build_remui(em_t *e) {
  v_t q, r;
  udivrem(e, 0, 1, &q, &r);
  return r;
}

static v_t iabs(em_t *e, v_t x) {
  v_t zero = ki(e, 0);
  return isel(e, icmp(e, "slt", x, zero), i2(e, "arith.subi", zero, x), x);
}
static v_t ineg_if(em_t *e, v_t c, v_t x) { return isel(e, c, i2(e, "arith.subi", ki(e, 0), x), x); }

/* Signed: |n| / |d|, the quotient negative when the signs differ, the remainder
 * with n's sign (C's truncation); floordiv and ceildiv adjust a truncated
 * quotient with a remainder by one toward -inf / +inf. */
typedef enum { DIV_TRUNC, REM_TRUNC, DIV_FLOOR, DIV_CEIL } sdiv_t;

static v_t signed_div(em_t *e, sdiv_t kind) {
  v_t n = 0, d = 1, zero = ki(e, 0), one = ki(e, 1);
  v_t q, r;
  udivrem(e, iabs(e, n), iabs(e, d), &q, &r);
  v_t nneg = icmp(e, "slt", n, zero), dneg = icmp(e, "slt", d, zero);
  v_t differ = line(e, "arith.xori %%v%d, %%v%d : i1", nneg, dneg);
  v_t qs = ineg_if(e, differ, q);
  if (kind == DIV_TRUNC) return qs;
  if (kind == REM_TRUNC) return ineg_if(e, nneg, r);
  v_t inexact = icmp(e, "ne", r, zero);
  if (kind == DIV_FLOOR) {
    v_t down = line(e, "arith.andi %%v%d, %%v%d : i1", inexact, differ);
    return isel(e, down, i2(e, "arith.subi", qs, one), qs);
  }
  v_t same = line(e, "arith.xori %%v%d, %%v%d : i1", differ, line(e, "arith.constant true"));
  v_t up = line(e, "arith.andi %%v%d, %%v%d : i1", inexact, same);
  return isel(e, up, i2(e, "arith.addi", qs, one), qs);
}
static v_t build_divsi(em_t *e) { return signed_div(e, DIV_TRUNC); }
static v_t build_remsi(em_t *e) { return signed_div(e, REM_TRUNC); }
static v_t build_floordivsi(em_t *e) { return signed_div(e, DIV_FLOOR); }
static v_t build_ceildivsi(em_t *e) { return signed_div(e, DIV_CEIL); }

static v_t build_absi(em_t *e) { return iabs(e, 0); }

/* math.ipowi on i64 by squaring, unrolled for the same reason as udivrem (the
 * i32 one is kernel_math.c's loop): 63 exponent bits, then the negative
 * exponents as MLIR's convert-math-to-funcs defines them (1 for a base of 1, +-1
 * for -1 by parity, else 0). */
static v_t build_ipowi(em_t *e) {
  v_t a = 0, b = 1, zero = ki(e, 0), one = ki(e, 1), mone = ki(e, -1);
  v_t base = a, acc = one;
  for (int i = 0; i < 63; i++) {
    v_t odd = icmp(e, "ne", i2(e, "arith.andi", b, ki(e, (int64_t)(UINT64_C(1) << i))), zero);
    acc = isel(e, odd, i2(e, "arith.muli", acc, base), acc);
    base = i2(e, "arith.muli", base, base);
  }
  v_t parity = icmp(e, "ne", i2(e, "arith.andi", b, one), zero);
  v_t pm = isel(e, parity, mone, one);
  v_t neg_result = isel(e, icmp(e, "eq", a, mone), pm, zero);
  neg_result = isel(e, icmp(e, "eq", a, one), one, neg_result);
  return isel(e, icmp(e, "slt", b, zero), neg_result, acc);
}

/* Bit counts of an i64 from its two i32 halves (math.ctlz/cttz/ctpop on i32,
 * which every backend has or kiln's i32 helpers provide). */
static void halves(em_t *e, v_t x, v_t *hi, v_t *lo) {
  *lo = line(e, "arith.trunci %%v%d : i64 to i32", x);
  *hi = line(e, "arith.trunci %%v%d : i64 to i32", i2(e, "arith.shrui", x, ki(e, 32)));
}
static v_t count_halves(em_t *e, const char *op) {
  v_t hi, lo;
  halves(e, 0, &hi, &lo);
  v_t chi = line(e, "%s %%v%d : i32", op, hi), clo = line(e, "%s %%v%d : i32", op, lo);
  v_t c32 = line(e, "arith.constant 32 : i32"), z32 = line(e, "arith.constant 0 : i32");
  v_t r;
  if (strcmp(op, "math.ctpop") == 0) {
    r = line(e, "arith.addi %%v%d, %%v%d : i32", chi, clo);
  } else if (strcmp(op, "math.ctlz") == 0) {
    v_t hi_zero = line(e, "arith.cmpi eq, %%v%d, %%v%d : i32", hi, z32);
    r = line(e, "arith.select %%v%d, %%v%d, %%v%d : i32", hi_zero, line(e, "arith.addi %%v%d, %%v%d : i32", c32, clo),
             chi);
  } else { /* cttz */
    v_t lo_zero = line(e, "arith.cmpi eq, %%v%d, %%v%d : i32", lo, z32);
    r = line(e, "arith.select %%v%d, %%v%d, %%v%d : i32", lo_zero, line(e, "arith.addi %%v%d, %%v%d : i32", c32, chi),
             clo);
  }
  return line(e, "arith.extui %%v%d : i32 to i64", r);
}
static v_t build_ctlz(em_t *e) { return count_halves(e, "math.ctlz"); }
static v_t build_cttz(em_t *e) { return count_halves(e, "math.cttz"); }
static v_t build_ctpop(em_t *e) { return count_halves(e, "math.ctpop"); }

static const struct {
  const char *name;
  bool integer; /* an i64 helper; else f64 */
  int args;
  v_t (*build)(em_t *);
} builders[] = {
    {"exp", false, 1, build_exp},       {"exp2", false, 1, build_exp2},     {"log", false, 1, build_log},
    {"log2", false, 1, build_log2},     {"log10", false, 1, build_log10},   {"sin", false, 1, build_sin},
    {"cos", false, 1, build_cos},       {"atan", false, 1, build_atan},     {"cbrt", false, 1, build_cbrt},
    {"erf", false, 1, build_erf},       {"erfc", false, 1, build_erfc},     {"floor", false, 1, build_floor},
    {"ceil", false, 1, build_ceil},     {"divui", true, 2, build_divui},    {"remui", true, 2, build_remui},
    {"divsi", true, 2, build_divsi},    {"remsi", true, 2, build_remsi},    {"floordivsi", true, 2, build_floordivsi},
    {"ceildivsi", true, 2, build_ceildivsi}, {"absi", true, 1, build_absi}, {"ctlz", true, 1, build_ctlz},
    {"cttz", true, 1, build_cttz},      {"ctpop", true, 1, build_ctpop},    {"ipowi", true, 2, build_ipowi},
};

char *kiln_compiler_math_helper_64(const char *name, bool integer) {
  for (size_t i = 0; i < sizeof builders / sizeof builders[0]; i++) {
    if (builders[i].integer == integer && strcmp(builders[i].name, name) == 0) {
      return helper(name, integer ? "i64" : "f64", builders[i].args, builders[i].build);
    }
  }
  return NULL;
}
