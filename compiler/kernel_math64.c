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
  int n;    /* the next value number */
  int pred; /* a soft f64 comparison's predicate (arith::CmpFPredicate) */
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
static v_t sel(em_t *e, v_t c, v_t a, v_t b) {
  return line(e, "arith.select %%v%d, %%v%d, %%v%d : f64", c, a, b);
}
static v_t isel(em_t *e, v_t c, v_t a, v_t b) {
  return line(e, "arith.select %%v%d, %%v%d, %%v%d : i64", c, a, b);
}
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

/* The helper's text: `func.func private @NAME(%v0: IN[, %v1: IN ...]) -> OUT`, the
 * body `build` writes, and its result returned. */
static char *helper_typed(const char *name, const char *in, const char *out, int args, int pred,
                          v_t (*build)(em_t *)) {
  em_t e = {.n = args, .pred = pred};
  kiln_buf_init(&e.b);
  kiln_buf_appendf(&e.b, "func.func private @%s(%%v0: %s", name, in);
  for (int a = 1; a < args; a++) kiln_buf_appendf(&e.b, ", %%v%d: %s", a, in);
  kiln_buf_appendf(&e.b, ") -> %s {\n", out);
  v_t r = build(&e);
  kiln_buf_appendf(&e.b, "  return %%v%d : %s\n}", r, out);
  return kiln_buf_take(&e.b);
}

/* T f64, or i64 for the integer helpers. */
static char *helper(const char *name, const char *type, int args, v_t (*build)(em_t *)) {
  return helper_typed(name, type, type, args, 0, build);
}

#define INF64  __builtin_inf()
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
  static const double taylor[] = {1.0 / 6227020800.0,
                                  1.0 / 479001600.0,
                                  1.0 / 39916800.0,
                                  1.0 / 3628800.0,
                                  1.0 / 362880.0,
                                  1.0 / 40320.0,
                                  1.0 / 5040.0,
                                  1.0 / 720.0,
                                  1.0 / 120.0,
                                  1.0 / 24.0,
                                  1.0 / 6.0,
                                  0.5,
                                  1.0,
                                  1.0};
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
static const double pio2_parts[] = {0x1.921fc00000000p+0,    -0x1.5777a00000000p-21, -0x1.73dcc00000000p-43,
                                    0x1.898cc00000000p-64,   0x1.45c0600000000p-86,  0x1.c1cd200000000p-107,
                                    -0x1.adfb600000000p-128, -0x1.f77598338bfdfp-151};

/* The quadrant's bits (*odd: q odd, *hi: q >= 2) and sin r, cos r. */
static void sincos_reduce(em_t *e, v_t x, v_t *odd, v_t *hi, v_t *s, v_t *c) {
  static const double sin_c[] = {-1.0 / 121645100408832000.0,
                                 1.0 / 355687428096000.0,
                                 -1.0 / 1307674368000.0,
                                 1.0 / 6227020800.0,
                                 -1.0 / 39916800.0,
                                 1.0 / 362880.0,
                                 -1.0 / 5040.0,
                                 1.0 / 120.0,
                                 -1.0 / 6.0};
  static const double cos_c[] = {-1.0 / 6402373705728000.0,
                                 1.0 / 20922789888000.0,
                                 -1.0 / 87178291200.0,
                                 1.0 / 479001600.0,
                                 -1.0 / 3628800.0,
                                 1.0 / 40320.0,
                                 -1.0 / 720.0,
                                 1.0 / 24.0,
                                 -0.5};
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
    r = line(e, "arith.select %%v%d, %%v%d, %%v%d : i32", hi_zero,
             line(e, "arith.addi %%v%d, %%v%d : i32", c32, clo), chi);
  } else { /* cttz */
    v_t lo_zero = line(e, "arith.cmpi eq, %%v%d, %%v%d : i32", lo, z32);
    r = line(e, "arith.select %%v%d, %%v%d, %%v%d : i32", lo_zero,
             line(e, "arith.addi %%v%d, %%v%d : i32", c32, chi), clo);
  }
  return line(e, "arith.extui %%v%d : i32 to i64", r);
}
static v_t build_ctlz(em_t *e) { return count_halves(e, "math.ctlz"); }
static v_t build_cttz(em_t *e) { return count_halves(e, "math.cttz"); }
static v_t build_ctpop(em_t *e) { return count_halves(e, "math.ctpop"); }

/* ---- f64 in integer code, for Vulkan profiles without Float64 ---- */

/* IEEE binary64 on its bits in i64, correctly rounded to nearest even with
 * subnormals, infinities and NaN (any NaN in gives the quiet NaN
 * 0x7FF8000000000000 out): add, multiply, divide, square root, the conversions
 * to and from integers and f32, comparisons, min and max. Straight-line code of
 * shifts, adds, compares, selects, i64 multiplies of 32-bit halves and ctlz,
 * which arith-emulate-wide-int splits into i32 pairs (it converts no loop, so
 * division and square root are unrolled, one bit per step). kernel_soft64.c puts
 * these in place of every f64 op. Checked bit for bit against the host's f64 on
 * the CPU path (corpus.cpu_soft_f64). */

#define F64_SIGN INT64_MIN
#define F64_ABS  INT64_MAX
#define F64_INF  0x7FF0000000000000LL
#define F64_QNAN 0x7FF8000000000000LL
#define F64_MAN  0xFFFFFFFFFFFFFLL
#define F64_IMP  0x10000000000000LL

static v_t band(em_t *e, v_t a, v_t b) { return line(e, "arith.andi %%v%d, %%v%d : i1", a, b); }
static v_t bor(em_t *e, v_t a, v_t b) { return line(e, "arith.ori %%v%d, %%v%d : i1", a, b); }
static v_t bnot(em_t *e, v_t a) {
  return line(e, "arith.xori %%v%d, %%v%d : i1", a, line(e, "arith.constant true"));
}
static v_t ic2(em_t *e, const char *op, v_t a, int64_t c) { return i2(e, op, a, ki(e, c)); }
static v_t zext(em_t *e, v_t b) { return line(e, "arith.extui %%v%d : i1 to i64", b); }
static v_t umin(em_t *e, v_t a, int64_t c) { return line(e, "arith.minui %%v%d, %%v%d : i64", a, ki(e, c)); }
static v_t smax(em_t *e, v_t a, int64_t c) { return line(e, "arith.maxsi %%v%d, %%v%d : i64", a, ki(e, c)); }
static v_t clz(em_t *e, v_t a) { return line(e, "math.ctlz %%v%d : i64", a); }

/* Magnitude bits and the special classes of x. */
typedef struct {
  v_t bits, sign, mag, nan, inf, zero;
} cls_t;

static cls_t classify(em_t *e, v_t x) {
  cls_t c = {.bits = x};
  c.sign = ic2(e, "arith.andi", x, F64_SIGN);
  c.mag = ic2(e, "arith.andi", x, F64_ABS);
  c.nan = icmp(e, "ugt", c.mag, ki(e, F64_INF));
  c.inf = icmp(e, "eq", c.mag, ki(e, F64_INF));
  c.zero = icmp(e, "eq", c.mag, ki(e, 0));
  return c;
}

/* m >> s for s in [0, 63], the bits shifted out ORed into bit 0 (sticky). */
static v_t sticky_shr(em_t *e, v_t m, v_t s) {
  v_t mask = i2(e, "arith.subi", i2(e, "arith.shli", ki(e, 1), s), ki(e, 1));
  v_t lost = icmp(e, "ne", i2(e, "arith.andi", m, mask), ki(e, 0));
  return i2(e, "arith.ori", i2(e, "arith.shrui", m, s), zext(e, lost));
}

/* The significand of a finite x with its leading 1 at bit 52 (subnormals shifted
 * up) and the biased exponent that goes with it (below 1 for subnormals). */
static void normalize(em_t *e, v_t x, v_t *m, v_t *ex) {
  v_t eb = ic2(e, "arith.andi", ic2(e, "arith.shrui", x, 52), 0x7FF);
  v_t sub = icmp(e, "eq", eb, ki(e, 0));
  v_t fr = ic2(e, "arith.andi", x, F64_MAN);
  v_t mm = isel(e, sub, fr, ic2(e, "arith.ori", fr, F64_IMP));
  v_t ee = isel(e, sub, ki(e, 1), eb);
  /* zero: ctlz 64, a shift of 53 of nothing; the callers handle zeros */
  v_t lz = ic2(e, "arith.subi", clz(e, mm), 11);
  *m = i2(e, "arith.shli", mm, lz);
  *ex = i2(e, "arith.subi", ee, lz);
}

/* sign | the f64 nearest m 2^(E - 1023 - 55): m holds 56 bits, its leading 1 at
 * bit 55 for a normal result, the last bit sticky; E is signed. Below the normal
 * range the significand shifts right first (subnormals, or zero); from 2^1024 up
 * the result is infinity, also where rounding carries into the exponent. */
static v_t round_pack(em_t *e, v_t sign, v_t E, v_t m) {
  v_t one = ki(e, 1);
  v_t tiny = icmp(e, "slt", E, one);
  v_t sh = isel(e, tiny, umin(e, i2(e, "arith.subi", one, E), 63), ki(e, 0));
  m = sticky_shr(e, m, sh);
  E = isel(e, tiny, one, E);
  v_t rb = ic2(e, "arith.andi", m, 7);
  v_t q = ic2(e, "arith.shrui", m, 3);
  v_t odd = icmp(e, "ne", ic2(e, "arith.andi", q, 1), ki(e, 0));
  v_t up = bor(e, icmp(e, "ugt", rb, ki(e, 4)), band(e, icmp(e, "eq", rb, ki(e, 4)), odd));
  v_t bits = i2(e, "arith.addi", ic2(e, "arith.shli", ic2(e, "arith.subi", E, 1), 52), q);
  bits = i2(e, "arith.addi", bits, zext(e, up));
  bits = isel(e, icmp(e, "sgt", E, ki(e, 2046)), ki(e, F64_INF), bits);
  return i2(e, "arith.ori", bits, sign);
}

static v_t soft_add(em_t *e, v_t a, v_t b) {
  v_t ma = ic2(e, "arith.andi", a, F64_ABS), mb = ic2(e, "arith.andi", b, F64_ABS);
  v_t swap = icmp(e, "ugt", mb, ma);
  v_t x = isel(e, swap, b, a), y = isel(e, swap, a, b);
  cls_t cx = classify(e, x), cy = classify(e, y);
  v_t sx = cx.sign, sy = cy.sign;
  v_t ex = ic2(e, "arith.shrui", cx.mag, 52), ey = ic2(e, "arith.shrui", cy.mag, 52);
  v_t xs = icmp(e, "eq", ex, ki(e, 0)), ys = icmp(e, "eq", ey, ki(e, 0));
  v_t fx = ic2(e, "arith.andi", x, F64_MAN), fy = ic2(e, "arith.andi", y, F64_MAN);
  v_t mx = ic2(e, "arith.shli", isel(e, xs, fx, ic2(e, "arith.ori", fx, F64_IMP)), 3);
  v_t my = ic2(e, "arith.shli", isel(e, ys, fy, ic2(e, "arith.ori", fy, F64_IMP)), 3);
  v_t Ex = isel(e, xs, ki(e, 1), ex), Ey = isel(e, ys, ki(e, 1), ey);
  my = sticky_shr(e, my, umin(e, i2(e, "arith.subi", Ex, Ey), 63));
  v_t subtract = icmp(e, "ne", sx, sy);
  v_t sum = isel(e, subtract, i2(e, "arith.subi", mx, my), i2(e, "arith.addi", mx, my));
  v_t carry = icmp(e, "uge", sum, ki(e, INT64_C(1) << 56));
  v_t mc = sticky_shr(e, sum, ki(e, 1));
  /* left by the leading zeros past bit 55, while the exponent stays >= 1 */
  v_t sh = line(e, "arith.minsi %%v%d, %%v%d : i64", smax(e, ic2(e, "arith.subi", clz(e, sum), 8), 0),
                ic2(e, "arith.subi", Ex, 1));
  v_t m = isel(e, carry, mc, i2(e, "arith.shli", sum, sh));
  v_t E = isel(e, carry, ic2(e, "arith.addi", Ex, 1), i2(e, "arith.subi", Ex, sh));
  v_t r = round_pack(e, sx, E, m);
  /* an exact zero: -0 only for -0 + -0 */
  r = isel(e, icmp(e, "eq", sum, ki(e, 0)), i2(e, "arith.andi", sx, sy), r);
  /* x has the larger magnitude: NaN if either is, infinite if either is */
  v_t inf_r = isel(e, band(e, subtract, cy.inf), ki(e, F64_QNAN), x);
  r = isel(e, cx.inf, inf_r, r);
  return isel(e, cx.nan, ki(e, F64_QNAN), r);
}

static v_t soft_neg(em_t *e, v_t a) { return ic2(e, "arith.xori", a, F64_SIGN); }

/* NaN, infinity and zero operands of * and /, most binding first. */
static v_t mul_div_specials(em_t *e, bool div, cls_t ca, cls_t cb, v_t sign, v_t r) {
  v_t inf = ic2(e, "arith.ori", sign, F64_INF);
  if (div) {
    r = isel(e, cb.inf, sign, r);
    r = isel(e, cb.zero, inf, r);
    r = isel(e, ca.zero, sign, r);
    r = isel(e, ca.inf, inf, r);
    v_t invalid = bor(e, band(e, ca.inf, cb.inf), band(e, ca.zero, cb.zero));
    r = isel(e, invalid, ki(e, F64_QNAN), r);
  } else {
    r = isel(e, bor(e, ca.zero, cb.zero), sign, r);
    r = isel(e, bor(e, ca.inf, cb.inf), inf, r);
    v_t invalid = bor(e, band(e, ca.inf, cb.zero), band(e, cb.inf, ca.zero));
    r = isel(e, invalid, ki(e, F64_QNAN), r);
  }
  return isel(e, bor(e, ca.nan, cb.nan), ki(e, F64_QNAN), r);
}

static v_t soft_mul(em_t *e, v_t a, v_t b) {
  cls_t ca = classify(e, a), cb = classify(e, b);
  v_t sign = ic2(e, "arith.andi", i2(e, "arith.xori", a, b), F64_SIGN);
  v_t ma, ea, mb, eb;
  normalize(e, a, &ma, &ea);
  normalize(e, b, &mb, &eb);
  /* the 106-bit product as hi:lo from 32-bit halves */
  v_t a0 = ic2(e, "arith.andi", ma, 0xFFFFFFFFLL), a1 = ic2(e, "arith.shrui", ma, 32);
  v_t b0 = ic2(e, "arith.andi", mb, 0xFFFFFFFFLL), b1 = ic2(e, "arith.shrui", mb, 32);
  v_t p00 = i2(e, "arith.muli", a0, b0), p11 = i2(e, "arith.muli", a1, b1);
  v_t mid = i2(e, "arith.addi", i2(e, "arith.muli", a0, b1), i2(e, "arith.muli", a1, b0));
  v_t lo = i2(e, "arith.addi", p00, ic2(e, "arith.shli", mid, 32));
  v_t carry = zext(e, icmp(e, "ult", lo, p00));
  v_t hi = i2(e, "arith.addi", i2(e, "arith.addi", p11, ic2(e, "arith.shrui", mid, 32)), carry);
  /* the leading 1 at bit 105 or 104 of the product goes to bit 55 */
  v_t top = icmp(e, "uge", hi, ki(e, INT64_C(1) << 41));
  v_t m_top = i2(e, "arith.ori", ic2(e, "arith.shli", hi, 14), ic2(e, "arith.shrui", lo, 50));
  v_t s_top = icmp(e, "ne", ic2(e, "arith.andi", lo, (INT64_C(1) << 50) - 1), ki(e, 0));
  v_t m_low = i2(e, "arith.ori", ic2(e, "arith.shli", hi, 15), ic2(e, "arith.shrui", lo, 49));
  v_t s_low = icmp(e, "ne", ic2(e, "arith.andi", lo, (INT64_C(1) << 49) - 1), ki(e, 0));
  v_t m = i2(e, "arith.ori", isel(e, top, m_top, m_low),
             zext(e, line(e, "arith.select %%v%d, %%v%d, %%v%d : i1", top, s_top, s_low)));
  v_t E = ic2(e, "arith.subi", i2(e, "arith.addi", i2(e, "arith.addi", ea, eb), zext(e, top)), 1023);
  return mul_div_specials(e, false, ca, cb, sign, round_pack(e, sign, E, m));
}

static v_t soft_div(em_t *e, v_t a, v_t b) {
  cls_t ca = classify(e, a), cb = classify(e, b);
  v_t sign = ic2(e, "arith.andi", i2(e, "arith.xori", a, b), F64_SIGN);
  v_t ma, ea, mb, eb;
  normalize(e, a, &ma, &ea);
  normalize(e, b, &mb, &eb);
  v_t lt = icmp(e, "ult", ma, mb);
  v_t r = isel(e, lt, ic2(e, "arith.shli", ma, 1), ma);
  v_t E = i2(e, "arith.subi", ic2(e, "arith.addi", i2(e, "arith.subi", ea, eb), 1023), zext(e, lt));
  /* r / mb in [1, 2): 56 quotient bits, restoring */
  v_t q = ki(e, 0);
  for (int i = 55; i >= 0; i--) {
    v_t ge = icmp(e, "uge", r, mb);
    r = isel(e, ge, i2(e, "arith.subi", r, mb), r);
    q = isel(e, ge, ic2(e, "arith.ori", q, INT64_C(1) << i), q);
    r = ic2(e, "arith.shli", r, 1);
  }
  v_t m = i2(e, "arith.ori", q, zext(e, icmp(e, "ne", r, ki(e, 0))));
  return mul_div_specials(e, true, ca, cb, sign, round_pack(e, sign, E, m));
}

static v_t soft_sqrt(em_t *e, v_t a) {
  cls_t ca = classify(e, a);
  v_t ma, ea;
  normalize(e, a, &ma, &ea);
  v_t ub = ic2(e, "arith.subi", ea, 1023);
  v_t odd = icmp(e, "ne", ic2(e, "arith.andi", ub, 1), ki(e, 0));
  v_t x = isel(e, odd, ic2(e, "arith.shli", ma, 1), ma);
  v_t half = ic2(e, "arith.shrsi", i2(e, "arith.subi", ub, zext(e, odd)), 1);
  /* the root of x 2^58 (x < 2^54), two radicand bits per step */
  v_t r = ki(e, 0), q = ki(e, 0);
  for (int i = 55; i >= 0; i--) {
    r = ic2(e, "arith.shli", r, 2);
    if (i >= 29) r = i2(e, "arith.ori", r, ic2(e, "arith.andi", ic2(e, "arith.shrui", x, 2 * i - 58), 3));
    v_t t = ic2(e, "arith.ori", ic2(e, "arith.shli", q, 2), 1);
    v_t ge = icmp(e, "uge", r, t);
    r = isel(e, ge, i2(e, "arith.subi", r, t), r);
    q = i2(e, "arith.ori", ic2(e, "arith.shli", q, 1), zext(e, ge));
  }
  v_t m = i2(e, "arith.ori", q, zext(e, icmp(e, "ne", r, ki(e, 0))));
  v_t y = round_pack(e, ki(e, 0), ic2(e, "arith.addi", half, 1023), m);
  /* +-0, +inf themselves; negatives and NaN: NaN */
  y = isel(e, bor(e, ca.zero, ca.inf), a, y);
  v_t neg = band(e, icmp(e, "ne", ca.sign, ki(e, 0)), bnot(e, ca.zero));
  return isel(e, bor(e, ca.nan, neg), ki(e, F64_QNAN), y);
}

/* i64 (signed or not) to f64. */
static v_t soft_from_int(em_t *e, v_t x, bool is_signed) {
  v_t neg = is_signed ? icmp(e, "slt", x, ki(e, 0)) : line(e, "arith.constant false");
  v_t a = isel(e, neg, i2(e, "arith.subi", ki(e, 0), x), x);
  v_t lz = umin(e, clz(e, a), 63);
  v_t m = i2(e, "arith.shli", a, lz);
  v_t m56 = i2(e, "arith.ori", ic2(e, "arith.shrui", m, 8),
               zext(e, icmp(e, "ne", ic2(e, "arith.andi", m, 0xFF), ki(e, 0))));
  v_t E = i2(e, "arith.subi", ki(e, 1023 + 63), lz);
  v_t r = round_pack(e, isel(e, neg, ki(e, F64_SIGN), ki(e, 0)), E, m56);
  return isel(e, icmp(e, "eq", a, ki(e, 0)), ki(e, 0), r);
}

/* f64 to i64 toward zero; out of range saturates, NaN gives 0 (LLVM leaves both
 * undefined; CPUs differ). */
static v_t soft_to_int(em_t *e, v_t x, bool is_signed) {
  cls_t c = classify(e, x);
  v_t ex = ic2(e, "arith.shrui", c.mag, 52);
  v_t m = ic2(e, "arith.ori", ic2(e, "arith.andi", x, F64_MAN), F64_IMP);
  v_t sh = ic2(e, "arith.subi", ex, 1075);
  v_t left = icmp(e, "sge", sh, ki(e, 0));
  v_t lv = i2(e, "arith.shli", m, umin(e, smax(e, sh, 0), 63));
  v_t rv = i2(e, "arith.shrui", m, umin(e, smax(e, i2(e, "arith.subi", ki(e, 0), sh), 0), 63));
  v_t v = isel(e, left, lv, rv);
  v_t neg = icmp(e, "ne", c.sign, ki(e, 0));
  if (is_signed) {
    v = isel(e, neg, i2(e, "arith.subi", ki(e, 0), v), v);
    v_t big = icmp(e, "uge", ex, ki(e, 1023 + 63));
    v = isel(e, big, isel(e, neg, ki(e, INT64_MIN), ki(e, INT64_MAX)), v);
  } else {
    v_t big = icmp(e, "uge", ex, ki(e, 1023 + 64));
    v = isel(e, big, ki(e, -1), v);
    v = isel(e, neg, ki(e, 0), v);
  }
  return isel(e, c.nan, ki(e, 0), v);
}

/* f32 (its bits, zero-extended) to f64: exact. */
static v_t soft_from_f32(em_t *e, v_t x) {
  v_t s = ic2(e, "arith.shli", ic2(e, "arith.andi", x, 0x80000000LL), 32);
  v_t e8 = ic2(e, "arith.andi", ic2(e, "arith.shrui", x, 23), 0xFF);
  v_t f = ic2(e, "arith.andi", x, 0x7FFFFF);
  v_t normal = i2(e, "arith.ori", ic2(e, "arith.shli", ic2(e, "arith.addi", e8, 896), 52),
                  ic2(e, "arith.shli", f, 29));
  v_t special = i2(e, "arith.ori", ki(e, F64_INF), ic2(e, "arith.shli", f, 29));
  /* a subnormal f32 is a normal f64: the leading 1 of f at bit p gives 2^(p-149) */
  v_t p = i2(e, "arith.subi", ki(e, 63), clz(e, f));
  v_t frac =
      ic2(e, "arith.andi", i2(e, "arith.shli", f, umin(e, i2(e, "arith.subi", ki(e, 52), p), 63)), F64_MAN);
  v_t sub = i2(e, "arith.ori", ic2(e, "arith.shli", ic2(e, "arith.addi", p, 874), 52), frac);
  v_t z = icmp(e, "eq", e8, ki(e, 0));
  v_t r = isel(e, z, isel(e, icmp(e, "eq", f, ki(e, 0)), ki(e, 0), sub), normal);
  r = isel(e, icmp(e, "eq", e8, ki(e, 0xFF)), special, r);
  return i2(e, "arith.ori", r, s);
}

/* f64 to f32 bits (in an i64): to nearest even, or to odd (the last bit ORed
 * with inexactness, so a second rounding to f16 or bf16 is correct). */
static v_t soft_to_f32(em_t *e, v_t x, bool to_odd) {
  cls_t c = classify(e, x);
  v_t s = ic2(e, "arith.shrui", c.sign, 32);
  v_t ex = ic2(e, "arith.shrui", c.mag, 52);
  v_t fr = ic2(e, "arith.andi", x, F64_MAN);
  v_t m = isel(e, icmp(e, "eq", ex, ki(e, 0)), fr, ic2(e, "arith.ori", fr, F64_IMP));
  v_t m27 = i2(e, "arith.ori", ic2(e, "arith.shrui", m, 26),
               zext(e, icmp(e, "ne", ic2(e, "arith.andi", m, (INT64_C(1) << 26) - 1), ki(e, 0))));
  v_t E = ic2(e, "arith.subi", ex, 896);
  v_t one = ki(e, 1);
  v_t tiny = icmp(e, "slt", E, one);
  m27 = sticky_shr(e, m27, isel(e, tiny, umin(e, i2(e, "arith.subi", one, E), 63), ki(e, 0)));
  E = isel(e, tiny, one, E);
  v_t rb = ic2(e, "arith.andi", m27, 7);
  v_t q = ic2(e, "arith.shrui", m27, 3);
  v_t inc;
  if (to_odd) {
    q = i2(e, "arith.ori", q, zext(e, icmp(e, "ne", rb, ki(e, 0))));
    inc = ki(e, 0);
  } else {
    v_t odd = icmp(e, "ne", ic2(e, "arith.andi", q, 1), ki(e, 0));
    inc = zext(e, bor(e, icmp(e, "ugt", rb, ki(e, 4)), band(e, icmp(e, "eq", rb, ki(e, 4)), odd)));
  }
  v_t bits =
      i2(e, "arith.addi", i2(e, "arith.addi", ic2(e, "arith.shli", ic2(e, "arith.subi", E, 1), 23), q), inc);
  bits = isel(e, icmp(e, "sgt", E, ki(e, 254)), ki(e, 0x7F800000LL), bits);
  bits = isel(e, c.inf, ki(e, 0x7F800000LL), bits);
  bits = isel(e, c.nan, ki(e, 0x7FC00000LL), bits);
  return i2(e, "arith.ori", bits, s);
}

/* A key whose signed order is the f64 order of non-NaN values; with `zeros_equal`
 * -0 and +0 share one, else -0 sorts below +0. */
static v_t order_key(em_t *e, cls_t c, bool zeros_equal) {
  v_t flipped = ic2(e, "arith.xori", c.bits, F64_ABS);
  v_t k0 = isel(e, icmp(e, "ne", c.sign, ki(e, 0)), flipped, c.bits);
  return zeros_equal ? isel(e, c.zero, ki(e, 0), k0) : k0;
}

/* floor, ceil, trunc, round (half away from zero) and roundeven on the bits:
 * below 2^52 the fraction's bits are masked off, the integer part moved up by
 * one ulp of it where the rounding says so (a carry into the exponent is right);
 * from 2^52 on (infinities and NaN too) x is its own result. */
typedef enum { RND_FLOOR, RND_CEIL, RND_TRUNC, RND_ROUND, RND_EVEN } rnd_t;

static v_t soft_round(em_t *e, v_t x, rnd_t mode) {
  cls_t c = classify(e, x);
  v_t neg = icmp(e, "ne", c.sign, ki(e, 0));
  v_t ub = ic2(e, "arith.subi", ic2(e, "arith.shrui", c.mag, 52), 1023);
  v_t sh = umin(e, smax(e, i2(e, "arith.subi", ki(e, 52), ub), 1), 52);
  v_t one = i2(e, "arith.shli", ki(e, 1), sh);
  v_t mask = ic2(e, "arith.subi", one, 1);
  v_t frac = i2(e, "arith.andi", c.mag, mask);
  v_t base = i2(e, "arith.andi", c.mag, i2(e, "arith.xori", mask, ki(e, -1)));
  v_t half = ic2(e, "arith.shrui", one, 1);
  v_t inexact = icmp(e, "ne", frac, ki(e, 0));
  v_t up, small; /* small: the result for |x| < 1 */
  v_t onef = ki(e, 0x3FF0000000000000LL);
  switch (mode) {
    case RND_FLOOR:
      up = band(e, neg, inexact);
      small = isel(e, band(e, neg, bnot(e, c.zero)), ki(e, (int64_t)0xBFF0000000000000ULL), ki(e, 0));
      small = isel(e, c.zero, x, small);
      break;
    case RND_CEIL:
      up = band(e, bnot(e, neg), inexact);
      small = isel(e, band(e, bnot(e, neg), bnot(e, c.zero)), onef, c.sign);
      break;
    case RND_TRUNC:
      up = line(e, "arith.constant false");
      small = c.sign;
      break;
    case RND_ROUND:
      up = icmp(e, "uge", frac, half);
      small = isel(e, icmp(e, "eq", ub, ki(e, -1)), i2(e, "arith.ori", c.sign, onef), c.sign);
      break;
    default: {
      v_t odd = icmp(e, "ne", i2(e, "arith.andi", base, one), ki(e, 0));
      up = bor(e, icmp(e, "ugt", frac, half), band(e, icmp(e, "eq", frac, half), odd));
      v_t over_half = icmp(e, "ugt", c.mag, ki(e, 0x3FE0000000000000LL));
      small =
          isel(e, band(e, icmp(e, "eq", ub, ki(e, -1)), over_half), i2(e, "arith.ori", c.sign, onef), c.sign);
      break;
    }
  }
  v_t mid = i2(e, "arith.ori", c.sign, isel(e, up, i2(e, "arith.addi", base, one), base));
  v_t r = isel(e, icmp(e, "slt", ub, ki(e, 0)), small, mid);
  return isel(e, icmp(e, "sge", ub, ki(e, 52)), x, r);
}

/* pred: arith::CmpFPredicate's number (0 false, 1-6 oeq ogt oge olt ole one, 7
 * ord, 8-13 the unordered forms, 14 uno, 15 true). */
static v_t soft_cmp(em_t *e, v_t a, v_t b, int pred) {
  if (pred == 0) return line(e, "arith.constant false");
  if (pred == 15) return line(e, "arith.constant true");
  cls_t ca = classify(e, a), cb = classify(e, b);
  v_t uno = bor(e, ca.nan, cb.nan);
  if (pred == 7) return bnot(e, uno);
  if (pred == 14) return uno;
  v_t ka = order_key(e, ca, true), kb = order_key(e, cb, true);
  static const char *const rel[] = {"eq", "sgt", "sge", "slt", "sle", "ne"};
  v_t r = icmp(e, rel[(pred - 1) % 7], ka, kb);
  return pred < 8 ? band(e, bnot(e, uno), r) : bor(e, uno, r);
}

/* maximumf/minimumf (NaN wins, -0 < +0) and maxnumf/minnumf (a NaN loses). */
static v_t soft_minmax(em_t *e, v_t a, v_t b, bool max, bool nan_wins) {
  cls_t ca = classify(e, a), cb = classify(e, b);
  v_t pick_a = icmp(e, max ? "sgt" : "slt", order_key(e, ca, false), order_key(e, cb, false));
  v_t r = isel(e, pick_a, a, b);
  if (nan_wins) return isel(e, bor(e, ca.nan, cb.nan), ki(e, F64_QNAN), r);
  r = isel(e, cb.nan, a, r);
  return isel(e, ca.nan, b, r);
}

static const struct {
  const char *name;
  bool integer; /* an i64 helper; else f64 */
  int args;
  v_t (*build)(em_t *);
} builders[] = {
    {"exp", false, 1, build_exp},
    {"exp2", false, 1, build_exp2},
    {"log", false, 1, build_log},
    {"log2", false, 1, build_log2},
    {"log10", false, 1, build_log10},
    {"sin", false, 1, build_sin},
    {"cos", false, 1, build_cos},
    {"atan", false, 1, build_atan},
    {"cbrt", false, 1, build_cbrt},
    {"erf", false, 1, build_erf},
    {"erfc", false, 1, build_erfc},
    {"floor", false, 1, build_floor},
    {"ceil", false, 1, build_ceil},
    {"divui", true, 2, build_divui},
    {"remui", true, 2, build_remui},
    {"divsi", true, 2, build_divsi},
    {"remsi", true, 2, build_remsi},
    {"floordivsi", true, 2, build_floordivsi},
    {"ceildivsi", true, 2, build_ceildivsi},
    {"absi", true, 1, build_absi},
    {"ctlz", true, 1, build_ctlz},
    {"cttz", true, 1, build_cttz},
    {"ctpop", true, 1, build_ctpop},
    {"ipowi", true, 2, build_ipowi},
};

char *kiln_compiler_math_helper_64(const char *name, bool integer) {
  for (size_t i = 0; i < sizeof builders / sizeof builders[0]; i++) {
    if (builders[i].integer == integer && strcmp(builders[i].name, name) == 0) {
      return helper(name, integer ? "i64" : "f64", builders[i].args, builders[i].build);
    }
  }
  return NULL;
}

/* ---- the soft f64 helpers by name ---- */

static v_t sb_addf(em_t *e) { return soft_add(e, 0, 1); }
static v_t sb_subf(em_t *e) { return soft_add(e, 0, soft_neg(e, 1)); }
static v_t sb_mulf(em_t *e) { return soft_mul(e, 0, 1); }
static v_t sb_divf(em_t *e) { return soft_div(e, 0, 1); }
/* Rounded twice, as GLSL's Fma may be on any Vulkan device (and as upstream's
 * math-expand-ops writes fma), not fused. */
static v_t sb_fma(em_t *e) { return soft_add(e, soft_mul(e, 0, 1), 2); }
static v_t sb_sqrt(em_t *e) { return soft_sqrt(e, 0); }
static v_t sb_rsqrt(em_t *e) { return soft_div(e, ki(e, 0x3FF0000000000000LL), soft_sqrt(e, 0)); }
static v_t sb_negf(em_t *e) { return soft_neg(e, 0); }
static v_t sb_absf(em_t *e) { return ic2(e, "arith.andi", 0, F64_ABS); }
static v_t sb_copysign(em_t *e) {
  return i2(e, "arith.ori", ic2(e, "arith.andi", 0, F64_ABS), ic2(e, "arith.andi", 1, F64_SIGN));
}
static v_t sb_maximumf(em_t *e) { return soft_minmax(e, 0, 1, true, true); }
static v_t sb_minimumf(em_t *e) { return soft_minmax(e, 0, 1, false, true); }
static v_t sb_maxnumf(em_t *e) { return soft_minmax(e, 0, 1, true, false); }
static v_t sb_minnumf(em_t *e) { return soft_minmax(e, 0, 1, false, false); }
static v_t sb_sitofp(em_t *e) { return soft_from_int(e, 0, true); }
static v_t sb_uitofp(em_t *e) { return soft_from_int(e, 0, false); }
static v_t sb_fptosi(em_t *e) { return soft_to_int(e, 0, true); }
static v_t sb_fptoui(em_t *e) { return soft_to_int(e, 0, false); }
static v_t sb_extf(em_t *e) { return soft_from_f32(e, line(e, "arith.extui %%v0 : i32 to i64")); }
static v_t sb_truncf(em_t *e) { return line(e, "arith.trunci %%v%d : i64 to i32", soft_to_f32(e, 0, false)); }
static v_t sb_truncf_odd(em_t *e) {
  return line(e, "arith.trunci %%v%d : i64 to i32", soft_to_f32(e, 0, true));
}
static v_t sb_cmpf(em_t *e) { return soft_cmp(e, 0, 1, e->pred); }
static v_t sb_isnan(em_t *e) { return classify(e, 0).nan; }
static v_t sb_isinf(em_t *e) { return classify(e, 0).inf; }
static v_t sb_isfinite(em_t *e) { return icmp(e, "ult", classify(e, 0).mag, ki(e, F64_INF)); }
static v_t sb_isnormal(em_t *e) {
  v_t m = classify(e, 0).mag;
  return band(e, icmp(e, "uge", m, ki(e, F64_IMP)), icmp(e, "ult", m, ki(e, F64_INF)));
}
static v_t sb_floor(em_t *e) { return soft_round(e, 0, RND_FLOOR); }
static v_t sb_ceil(em_t *e) { return soft_round(e, 0, RND_CEIL); }
static v_t sb_trunc(em_t *e) { return soft_round(e, 0, RND_TRUNC); }
static v_t sb_round(em_t *e) { return soft_round(e, 0, RND_ROUND); }
static v_t sb_roundeven(em_t *e) { return soft_round(e, 0, RND_EVEN); }

static const struct {
  const char *name;
  int args;
  const char *in, *out;
  v_t (*build)(em_t *);
} soft_builders[] = {
    {"addf", 2, "i64", "i64", sb_addf},
    {"subf", 2, "i64", "i64", sb_subf},
    {"mulf", 2, "i64", "i64", sb_mulf},
    {"divf", 2, "i64", "i64", sb_divf},
    {"fma", 3, "i64", "i64", sb_fma},
    {"sqrt", 1, "i64", "i64", sb_sqrt},
    {"rsqrt", 1, "i64", "i64", sb_rsqrt},
    {"negf", 1, "i64", "i64", sb_negf},
    {"absf", 1, "i64", "i64", sb_absf},
    {"copysign", 2, "i64", "i64", sb_copysign},
    {"maximumf", 2, "i64", "i64", sb_maximumf},
    {"minimumf", 2, "i64", "i64", sb_minimumf},
    {"maxnumf", 2, "i64", "i64", sb_maxnumf},
    {"minnumf", 2, "i64", "i64", sb_minnumf},
    {"sitofp", 1, "i64", "i64", sb_sitofp},
    {"uitofp", 1, "i64", "i64", sb_uitofp},
    {"fptosi", 1, "i64", "i64", sb_fptosi},
    {"fptoui", 1, "i64", "i64", sb_fptoui},
    {"extf", 1, "i32", "i64", sb_extf},
    {"truncf", 1, "i64", "i32", sb_truncf},
    {"truncf_odd", 1, "i64", "i32", sb_truncf_odd},
    {"cmpf", 2, "i64", "i1", sb_cmpf},
    {"floor", 1, "i64", "i64", sb_floor},
    {"ceil", 1, "i64", "i64", sb_ceil},
    {"trunc", 1, "i64", "i64", sb_trunc},
    {"round", 1, "i64", "i64", sb_round},
    {"roundeven", 1, "i64", "i64", sb_roundeven},
    {"isnan", 1, "i64", "i1", sb_isnan},
    {"isinf", 1, "i64", "i1", sb_isinf},
    {"isfinite", 1, "i64", "i1", sb_isfinite},
    {"isnormal", 1, "i64", "i1", sb_isnormal},
};

char *kiln_compiler_soft_f64_helper(const char *name, int pred) {
  for (size_t i = 0; i < sizeof soft_builders / sizeof soft_builders[0]; i++) {
    if (strcmp(soft_builders[i].name, name) != 0) continue;
    return helper_typed(name, soft_builders[i].in, soft_builders[i].out, soft_builders[i].args, pred,
                        soft_builders[i].build);
  }
  return NULL;
}
