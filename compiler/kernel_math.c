/* Math functions some GPU backends lack, as kiln's own f32 code inside the
 * kernels (kernel_types.h: kiln_compiler_kernels_expand_math).
 *
 * SPIR-V's GLSL instructions have no erf, cbrt or two-argument atan, and Vulkan
 * leaves GL.Asin/GL.Acos precision to the driver (lavapipe is off by 4e-4);
 * LLVM's AMDGPU backend has no atan, asin, acos, atan2, erf or cbrt at all
 * without ROCm's device libraries, and MLIR's ROCDL conversion refuses the LLVM
 * intrinsics for floor, ceil, log2, sin and cos (it wants those libraries). Each helper below is a func.func
 * over f32 built only from exp, log, sqrt, absolute value and arithmetic, which every backend lowers;
 * kiln_compiler_kernels_replace_with_helper copies its body in place of each use. A helper may use another
 * function (asin uses atan): the expansion repeats until no listed function is left.
 *
 * Accuracy (f32, against libm in double): erf: Taylor series to x^11 below 0.5
 * (relative error under 1e-7), Abramowitz and Stegun 7.1.26 above (absolute
 * error under 1.5e-7); atan: reduced to [0, tan(pi/8)] by 1/x and
 * (x-1)/(x+1), then the odd Taylor series to w^15 (error under 2e-8); atan2,
 * asin and acos through atan (acos as 2 atan(sqrt((1-x)/(1+x))), which keeps
 * its relative accuracy near 1); cbrt as exp(log|x|/3) with the sign restored;
 * floor and ceil exact; log2 as log(x)/ln 2; sin and cos as described at
 * SINCOS_REDUCE (for |x| up to about 1e5).
 *
 * The same walk also serves the other widths: f64 and i64 ops take
 * kernel_math64.c's helpers (or, for the functions that only combine others,
 * this file's text written in f64; fmod and ipowi are templates for both
 * widths); f16/bf16 ops in a caller's list are computed in f32; and i8/i16 bit
 * counts, absi and ipowi are computed on i32 (widen_narrow_int).
 */
#include <mlir-c/BuiltinAttributes.h>
#include <mlir-c/BuiltinTypes.h>
#include <stdio.h>
#include <string.h>

#include "base/alloc.h"
#include "compiler/internal.h"
#include "compiler/kernel_types.h"

static const char erf_f32[] =
    "func.func private @erf(%x: f32) -> f32 {\n"
    "  %one = arith.constant 1.0 : f32\n"
    "  %half = arith.constant 0.5 : f32\n"
    "  %zero = arith.constant 0.0 : f32\n"
    "  %c1 = arith.constant -7.5757575757575758e-04 : f32\n" /* -1/1320 */
    "  %c2 = arith.constant 4.6296296296296296e-03 : f32\n"  /* 1/216 */
    "  %c3 = arith.constant -2.3809523809523808e-02 : f32\n" /* -1/42 */
    "  %c4 = arith.constant 0.1 : f32\n"
    "  %c5 = arith.constant -0.33333333333333331 : f32\n"
    "  %two_over_sqrt_pi = arith.constant 1.1283791670955126 : f32\n"
    "  %p = arith.constant 0.3275911 : f32\n"
    "  %a1 = arith.constant 0.254829592 : f32\n"
    "  %a2 = arith.constant -0.284496736 : f32\n"
    "  %a3 = arith.constant 1.421413741 : f32\n"
    "  %a4 = arith.constant -1.453152027 : f32\n"
    "  %a5 = arith.constant 1.061405429 : f32\n"
    "  %ax = math.absf %x : f32\n"
    "  %x2 = arith.mulf %x, %x : f32\n"
    "  %s1 = arith.mulf %c1, %x2 : f32\n"
    "  %s2 = arith.addf %s1, %c2 : f32\n"
    "  %s3 = arith.mulf %s2, %x2 : f32\n"
    "  %s4 = arith.addf %s3, %c3 : f32\n"
    "  %s5 = arith.mulf %s4, %x2 : f32\n"
    "  %s6 = arith.addf %s5, %c4 : f32\n"
    "  %s7 = arith.mulf %s6, %x2 : f32\n"
    "  %s8 = arith.addf %s7, %c5 : f32\n"
    "  %s9 = arith.mulf %s8, %x2 : f32\n"
    "  %s10 = arith.addf %s9, %one : f32\n"
    "  %s11 = arith.mulf %s10, %x : f32\n"
    "  %small = arith.mulf %s11, %two_over_sqrt_pi : f32\n"
    "  %pt = arith.mulf %p, %ax : f32\n"
    "  %den = arith.addf %pt, %one : f32\n"
    "  %t = arith.divf %one, %den : f32\n"
    "  %l1 = arith.mulf %a5, %t : f32\n"
    "  %l2 = arith.addf %l1, %a4 : f32\n"
    "  %l3 = arith.mulf %l2, %t : f32\n"
    "  %l4 = arith.addf %l3, %a3 : f32\n"
    "  %l5 = arith.mulf %l4, %t : f32\n"
    "  %l6 = arith.addf %l5, %a2 : f32\n"
    "  %l7 = arith.mulf %l6, %t : f32\n"
    "  %l8 = arith.addf %l7, %a1 : f32\n"
    "  %l9 = arith.mulf %l8, %t : f32\n"
    "  %nx2 = arith.negf %x2 : f32\n"
    "  %e = math.exp %nx2 : f32\n"
    "  %l10 = arith.mulf %l9, %e : f32\n"
    "  %y = arith.subf %one, %l10 : f32\n"
    "  %ny = arith.negf %y : f32\n"
    "  %neg = arith.cmpf olt, %x, %zero : f32\n"
    "  %large = arith.select %neg, %ny, %y : f32\n"
    "  %is_small = arith.cmpf olt, %ax, %half : f32\n"
    "  %r = arith.select %is_small, %small, %large : f32\n"
    "  return %r : f32\n"
    "}";

static const char atan_f32[] =
    "func.func private @atan(%x: f32) -> f32 {\n"
    "  %one = arith.constant 1.0 : f32\n"
    "  %zero = arith.constant 0.0 : f32\n"
    "  %tan_pi_8 = arith.constant 0.41421356237309503 : f32\n"
    "  %pi_4 = arith.constant 0.78539816339744828 : f32\n"
    "  %pi_2 = arith.constant 1.5707963267948966 : f32\n"
    "  %k15 = arith.constant -0.066666666666666666 : f32\n"
    "  %k13 = arith.constant 0.076923076923076927 : f32\n"
    "  %k11 = arith.constant -0.090909090909090912 : f32\n"
    "  %k9 = arith.constant 0.1111111111111111 : f32\n"
    "  %k7 = arith.constant -0.14285714285714285 : f32\n"
    "  %k5 = arith.constant 0.2 : f32\n"
    "  %k3 = arith.constant -0.33333333333333331 : f32\n"
    "  %ax = math.absf %x : f32\n"
    "  %big = arith.cmpf ogt, %ax, %one : f32\n"
    "  %inv = arith.divf %one, %ax : f32\n"
    "  %z = arith.select %big, %inv, %ax : f32\n"
    "  %mid = arith.cmpf ogt, %z, %tan_pi_8 : f32\n"
    "  %zm1 = arith.subf %z, %one : f32\n"
    "  %zp1 = arith.addf %z, %one : f32\n"
    "  %wr = arith.divf %zm1, %zp1 : f32\n"
    "  %w = arith.select %mid, %wr, %z : f32\n"
    "  %off = arith.select %mid, %pi_4, %zero : f32\n"
    "  %w2 = arith.mulf %w, %w : f32\n"
    "  %p1 = arith.mulf %k15, %w2 : f32\n"
    "  %p2 = arith.addf %p1, %k13 : f32\n"
    "  %p3 = arith.mulf %p2, %w2 : f32\n"
    "  %p4 = arith.addf %p3, %k11 : f32\n"
    "  %p5 = arith.mulf %p4, %w2 : f32\n"
    "  %p6 = arith.addf %p5, %k9 : f32\n"
    "  %p7 = arith.mulf %p6, %w2 : f32\n"
    "  %p8 = arith.addf %p7, %k7 : f32\n"
    "  %p9 = arith.mulf %p8, %w2 : f32\n"
    "  %p10 = arith.addf %p9, %k5 : f32\n"
    "  %p11 = arith.mulf %p10, %w2 : f32\n"
    "  %p12 = arith.addf %p11, %k3 : f32\n"
    "  %p13 = arith.mulf %p12, %w2 : f32\n"
    "  %p14 = arith.addf %p13, %one : f32\n"
    "  %wp = arith.mulf %w, %p14 : f32\n"
    "  %a = arith.addf %off, %wp : f32\n"
    "  %comp = arith.subf %pi_2, %a : f32\n"
    "  %r = arith.select %big, %comp, %a : f32\n"
    "  %nr = arith.negf %r : f32\n"
    "  %neg = arith.cmpf olt, %x, %zero : f32\n"
    "  %res = arith.select %neg, %nr, %r : f32\n"
    "  return %res : f32\n"
    "}";

static const char atan2_f32[] =
    "func.func private @atan2(%y: f32, %x: f32) -> f32 {\n"
    "  %zero = arith.constant 0.0 : f32\n"
    "  %pi = arith.constant 3.1415926535897931 : f32\n"
    "  %npi = arith.constant -3.1415926535897931 : f32\n"
    "  %q = arith.divf %y, %x : f32\n"
    "  %a = math.atan %q : f32\n"
    "  %yneg = arith.cmpf olt, %y, %zero : f32\n"
    "  %adj = arith.select %yneg, %npi, %pi : f32\n"
    "  %shifted = arith.addf %a, %adj : f32\n"
    "  %xneg = arith.cmpf olt, %x, %zero : f32\n"
    "  %r = arith.select %xneg, %shifted, %a : f32\n"
    "  %x0 = arith.cmpf oeq, %x, %zero : f32\n"
    "  %y0 = arith.cmpf oeq, %y, %zero : f32\n"
    "  %both = arith.andi %x0, %y0 : i1\n"
    "  %res = arith.select %both, %zero, %r : f32\n"
    "  return %res : f32\n"
    "}";

static const char asin_f32[] =
    "func.func private @asin(%x: f32) -> f32 {\n"
    "  %one = arith.constant 1.0 : f32\n"
    "  %a = arith.subf %one, %x : f32\n"
    "  %b = arith.addf %one, %x : f32\n"
    "  %ab = arith.mulf %a, %b : f32\n"
    "  %s = math.sqrt %ab : f32\n"
    "  %q = arith.divf %x, %s : f32\n"
    "  %r = math.atan %q : f32\n"
    "  return %r : f32\n"
    "}";

static const char acos_f32[] =
    "func.func private @acos(%x: f32) -> f32 {\n"
    "  %one = arith.constant 1.0 : f32\n"
    "  %two = arith.constant 2.0 : f32\n"
    "  %a = arith.subf %one, %x : f32\n"
    "  %b = arith.addf %one, %x : f32\n"
    "  %q = arith.divf %a, %b : f32\n"
    "  %s = math.sqrt %q : f32\n"
    "  %t = math.atan %s : f32\n"
    "  %r = arith.mulf %t, %two : f32\n"
    "  return %r : f32\n"
    "}";

static const char cbrt_f32[] =
    "func.func private @cbrt(%x: f32) -> f32 {\n"
    "  %zero = arith.constant 0.0 : f32\n"
    "  %third = arith.constant 0.33333333333333331 : f32\n"
    "  %ax = math.absf %x : f32\n"
    "  %l = math.log %ax : f32\n"
    "  %l3 = arith.mulf %l, %third : f32\n"
    "  %e = math.exp %l3 : f32\n"
    "  %ne = arith.negf %e : f32\n"
    "  %neg = arith.cmpf olt, %x, %zero : f32\n"
    "  %r = arith.select %neg, %ne, %e : f32\n"
    "  return %r : f32\n"
    "}";

/* floor and ceil through an integer conversion: below 2^23 in magnitude the
 * truncation is exact and one correction gives the result; from 2^23 on, every
 * f32 is an integer already (as are infinities; NaN stays NaN through the
 * select's comparison). */
static const char floor_f32[] =
    "func.func private @floor(%x: f32) -> f32 {\n"
    "  %one = arith.constant 1.0 : f32\n"
    "  %big = arith.constant 8388608.0 : f32\n"
    "  %ax = math.absf %x : f32\n"
    "  %i = arith.fptosi %x : f32 to i32\n"
    "  %t = arith.sitofp %i : i32 to f32\n"
    "  %over = arith.cmpf ogt, %t, %x : f32\n"
    "  %tm1 = arith.subf %t, %one : f32\n"
    "  %f = arith.select %over, %tm1, %t : f32\n"
    "  %small = arith.cmpf olt, %ax, %big : f32\n"
    "  %r = arith.select %small, %f, %x : f32\n"
    "  return %r : f32\n"
    "}";

static const char ceil_f32[] =
    "func.func private @ceil(%x: f32) -> f32 {\n"
    "  %one = arith.constant 1.0 : f32\n"
    "  %big = arith.constant 8388608.0 : f32\n"
    "  %ax = math.absf %x : f32\n"
    "  %i = arith.fptosi %x : f32 to i32\n"
    "  %t = arith.sitofp %i : i32 to f32\n"
    "  %under = arith.cmpf olt, %t, %x : f32\n"
    "  %tp1 = arith.addf %t, %one : f32\n"
    "  %c = arith.select %under, %tp1, %t : f32\n"
    "  %small = arith.cmpf olt, %ax, %big : f32\n"
    "  %r = arith.select %small, %c, %x : f32\n"
    "  return %r : f32\n"
    "}";

static const char log2_f32[] =
    "func.func private @log2(%x: f32) -> f32 {\n"
    "  %inv_ln2 = arith.constant 1.4426950408889634 : f32\n"
    "  %l = math.log %x : f32\n"
    "  %r = arith.mulf %l, %inv_ln2 : f32\n"
    "  return %r : f32\n"
    "}";

/* sin and cos: x = k pi/2 + r with |r| <= pi/4, pi/2 split in three parts
 * (Cody and Waite) so the reduction stays exact for |x| up to about 1e5; then
 * Taylor polynomials on r (errors under 2e-9) and the quadrant k mod 4. */
#define SINCOS_REDUCE                                           \
  "  %two_over_pi = arith.constant 0.63661977236758138 : f32\n" \
  "  %half = arith.constant 0.5 : f32\n"                        \
  "  %c1 = arith.constant 1.5703125 : f32\n"                    \
  "  %c2 = arith.constant 4.837512969970703125e-4 : f32\n"      \
  "  %c3 = arith.constant 7.54978995489188216e-8 : f32\n"       \
  "  %three = arith.constant 3 : i32\n"                         \
  "  %i1 = arith.constant 1 : i32\n"                            \
  "  %i2 = arith.constant 2 : i32\n"                            \
  "  %s3 = arith.constant -0.16666666666666666 : f32\n"         \
  "  %s5 = arith.constant 8.3333333333333332e-03 : f32\n"       \
  "  %s7 = arith.constant -1.9841269841269841e-04 : f32\n"      \
  "  %s9 = arith.constant 2.7557319223985893e-06 : f32\n"       \
  "  %k2 = arith.constant -0.5 : f32\n"                         \
  "  %k4 = arith.constant 4.1666666666666664e-02 : f32\n"       \
  "  %k6 = arith.constant -1.3888888888888889e-03 : f32\n"      \
  "  %k8 = arith.constant 2.4801587301587302e-05 : f32\n"       \
  "  %k10 = arith.constant -2.7557319223985888e-07 : f32\n"     \
  "  %one = arith.constant 1.0 : f32\n"                         \
  "  %y = arith.mulf %x, %two_over_pi : f32\n"                  \
  "  %yh = arith.addf %y, %half : f32\n"                        \
  "  %kf0 = math.floor %yh : f32\n"                             \
  "  %k = arith.fptosi %kf0 : f32 to i32\n"                     \
  "  %kf = arith.sitofp %k : i32 to f32\n"                      \
  "  %m1 = arith.mulf %kf, %c1 : f32\n"                         \
  "  %r1 = arith.subf %x, %m1 : f32\n"                          \
  "  %m2 = arith.mulf %kf, %c2 : f32\n"                         \
  "  %r2 = arith.subf %r1, %m2 : f32\n"                         \
  "  %m3 = arith.mulf %kf, %c3 : f32\n"                         \
  "  %r = arith.subf %r2, %m3 : f32\n"                          \
  "  %r2s = arith.mulf %r, %r : f32\n"                          \
  "  %sa = arith.mulf %s9, %r2s : f32\n"                        \
  "  %sb = arith.addf %sa, %s7 : f32\n"                         \
  "  %sc = arith.mulf %sb, %r2s : f32\n"                        \
  "  %sd = arith.addf %sc, %s5 : f32\n"                         \
  "  %se = arith.mulf %sd, %r2s : f32\n"                        \
  "  %sf = arith.addf %se, %s3 : f32\n"                         \
  "  %sg = arith.mulf %sf, %r2s : f32\n"                        \
  "  %sh = arith.mulf %sg, %r : f32\n"                          \
  "  %sin_r = arith.addf %sh, %r : f32\n"                       \
  "  %ca = arith.mulf %k10, %r2s : f32\n"                       \
  "  %cb = arith.addf %ca, %k8 : f32\n"                         \
  "  %cc = arith.mulf %cb, %r2s : f32\n"                        \
  "  %cd = arith.addf %cc, %k6 : f32\n"                         \
  "  %ce = arith.mulf %cd, %r2s : f32\n"                        \
  "  %cf = arith.addf %ce, %k4 : f32\n"                         \
  "  %cg = arith.mulf %cf, %r2s : f32\n"                        \
  "  %ch = arith.addf %cg, %k2 : f32\n"                         \
  "  %ci = arith.mulf %ch, %r2s : f32\n"                        \
  "  %cos_r = arith.addf %ci, %one : f32\n"                     \
  "  %q = arith.andi %k, %three : i32\n"                        \
  "  %nsin = arith.negf %sin_r : f32\n"                         \
  "  %ncos = arith.negf %cos_r : f32\n"                         \
  "  %odd0 = arith.andi %q, %i1 : i32\n"                        \
  "  %odd = arith.cmpi ne, %odd0, %c0i : i32\n"                 \
  "  %hi0 = arith.andi %q, %i2 : i32\n"                         \
  "  %hi = arith.cmpi ne, %hi0, %c0i : i32\n"

static const char sin_f32[] =
    "func.func private @sin(%x: f32) -> f32 {\n"
    "  %c0i = arith.constant 0 : i32\n" SINCOS_REDUCE
    /* q: 0 sin, 1 cos, 2 -sin, 3 -cos */
    "  %pos = arith.select %odd, %cos_r, %sin_r : f32\n"
    "  %neg = arith.select %odd, %ncos, %nsin : f32\n"
    "  %res = arith.select %hi, %neg, %pos : f32\n"
    "  return %res : f32\n"
    "}";

static const char cos_f32[] =
    "func.func private @cos(%x: f32) -> f32 {\n"
    "  %c0i = arith.constant 0 : i32\n" SINCOS_REDUCE
    /* q: 0 cos, 1 -sin, 2 -cos, 3 sin */
    "  %b = arith.xori %odd, %hi : i1\n"
    "  %mag = arith.select %odd, %sin_r, %cos_r : f32\n"
    "  %nmag = arith.select %odd, %nsin, %ncos : f32\n"
    "  %res = arith.select %b, %nmag, %mag : f32\n"
    "  return %res : f32\n"
    "}";

/* log10 as log(x) / ln 10, like log2. */
static const char log10_f32[] =
    "func.func private @log10(%x: f32) -> f32 {\n"
    "  %inv_ln10 = arith.constant 0.43429448190325182 : f32\n"
    "  %l = math.log %x : f32\n"
    "  %r = arith.mulf %l, %inv_ln10 : f32\n"
    "  return %r : f32\n"
    "}";

/* tan as sin / cos (each kiln's, where the backend has none). */
static const char tan_f32[] =
    "func.func private @tan(%x: f32) -> f32 {\n"
    "  %s = math.sin %x : f32\n"
    "  %c = math.cos %x : f32\n"
    "  %r = arith.divf %s, %c : f32\n"
    "  return %r : f32\n"
    "}";

/* trunc: floor of |x| with the sign put back (floor is exact). */
static const char trunc_f32[] =
    "func.func private @trunc(%x: f32) -> f32 {\n"
    "  %ax = math.absf %x : f32\n"
    "  %f = math.floor %ax : f32\n"
    "  %r = math.copysign %f, %x : f32\n"
    "  return %r : f32\n"
    "}";

/* erfc by the Chebyshev fit of Numerical Recipes' erfcc (fractional error under
 * 1.2e-7 everywhere, where 1 - erf(x) loses everything past x = 4):
 * t = 1/(1 + |x|/2), erfc(|x|) = t exp(-x^2 + P(t)), erfc(-x) = 2 - erfc(x). */
static const char erfc_f32[] =
    "func.func private @erfc(%x: f32) -> f32 {\n"
    "  %zero = arith.constant 0.0 : f32\n"
    "  %half = arith.constant 0.5 : f32\n"
    "  %one = arith.constant 1.0 : f32\n"
    "  %two = arith.constant 2.0 : f32\n"
    "  %a0 = arith.constant -1.26551223 : f32\n"
    "  %a1 = arith.constant 1.00002368 : f32\n"
    "  %a2 = arith.constant 0.37409196 : f32\n"
    "  %a3 = arith.constant 0.09678418 : f32\n"
    "  %a4 = arith.constant -0.18628806 : f32\n"
    "  %a5 = arith.constant 0.27886807 : f32\n"
    "  %a6 = arith.constant -1.13520398 : f32\n"
    "  %a7 = arith.constant 1.48851587 : f32\n"
    "  %a8 = arith.constant -0.82215223 : f32\n"
    "  %a9 = arith.constant 0.17087277 : f32\n"
    "  %z = math.absf %x : f32\n"
    "  %hz = arith.mulf %half, %z : f32\n"
    "  %den = arith.addf %one, %hz : f32\n"
    "  %t = arith.divf %one, %den : f32\n"
    "  %p9 = arith.mulf %t, %a9 : f32\n"
    "  %p8 = arith.addf %a8, %p9 : f32\n"
    "  %q8 = arith.mulf %t, %p8 : f32\n"
    "  %p7 = arith.addf %a7, %q8 : f32\n"
    "  %q7 = arith.mulf %t, %p7 : f32\n"
    "  %p6 = arith.addf %a6, %q7 : f32\n"
    "  %q6 = arith.mulf %t, %p6 : f32\n"
    "  %p5 = arith.addf %a5, %q6 : f32\n"
    "  %q5 = arith.mulf %t, %p5 : f32\n"
    "  %p4 = arith.addf %a4, %q5 : f32\n"
    "  %q4 = arith.mulf %t, %p4 : f32\n"
    "  %p3 = arith.addf %a3, %q4 : f32\n"
    "  %q3 = arith.mulf %t, %p3 : f32\n"
    "  %p2 = arith.addf %a2, %q3 : f32\n"
    "  %q2 = arith.mulf %t, %p2 : f32\n"
    "  %p1 = arith.addf %a1, %q2 : f32\n"
    "  %q1 = arith.mulf %t, %p1 : f32\n"
    "  %p0 = arith.addf %a0, %q1 : f32\n"
    "  %z2 = arith.mulf %z, %z : f32\n"
    "  %e0 = arith.subf %p0, %z2 : f32\n"
    "  %e = math.exp %e0 : f32\n"
    "  %ans = arith.mulf %t, %e : f32\n"
    "  %neg = arith.cmpf olt, %x, %zero : f32\n"
    "  %other = arith.subf %two, %ans : f32\n"
    "  %r = arith.select %neg, %other, %ans : f32\n"
    "  return %r : f32\n"
    "}";

/* Population count (SWAR) and trailing zeros (through ctlz of the lowest set bit)
 * of an i32: CUDA's conversion and SPIR-V's have neither. */
/* exp and log for targets with no libm to call (CPU executables: an embedded ELF
 * imports nothing). exp: k = round(x log2 e), r = x - k ln 2 in two parts (the
 * high part has 9 bits, so k * hi is exact), the Taylor polynomial to r^7
 * (|r| <= ln 2 / 2: truncation under 3e-9), scaled by 2^k in two factors so
 * subnormal results come out too; past the f32 range, infinity or zero. log:
 * x = m 2^e with m in [sqrt(1/2), sqrt(2)), f = m - 1 (exact), s = f / (2 + f),
 * log m = 2 atanh s by its odd series to s^11 (|s| <= 0.172: under 1e-9); zero
 * gives -inf, negatives NaN, subnormals are scaled up first. log1p and expm1 by
 * the classic corrections: log1p(x) = log(u) x / (u - 1) with u = 1 + x, and
 * expm1(x) = (u - 1) x / log(u) with u = exp(x), exact where u rounds to 1. */
static const char exp_f32[] =
    "func.func private @exp(%x: f32) -> f32 {\n"
    "  %log2e = arith.constant 1.44269504088896341 : f32\n"
    "  %half = arith.constant 0.5 : f32\n"
    "  %hi = arith.constant 0.693359375 : f32\n"
    "  %lo = arith.constant -2.12194440e-4 : f32\n"
    "  %max = arith.constant 88.7228394 : f32\n"
    "  %min = arith.constant -103.972084 : f32\n"
    "  %inf = arith.constant 0x7F800000 : f32\n"
    "  %zero = arith.constant 0.0 : f32\n"
    "  %one = arith.constant 1.0 : f32\n"
    "  %p2 = arith.constant 0.5 : f32\n"
    "  %p3 = arith.constant 0.16666666666666666 : f32\n"
    "  %p4 = arith.constant 0.041666666666666664 : f32\n"
    "  %p5 = arith.constant 0.0083333333333333332 : f32\n"
    "  %p6 = arith.constant 0.0013888888888888889 : f32\n"
    "  %p7 = arith.constant 0.00019841269841269841 : f32\n"
    "  %two = arith.constant 2 : i32\n"
    "  %bias = arith.constant 127 : i32\n"
    "  %c23 = arith.constant 23 : i32\n"
    "  %lo_k = arith.constant -150.0 : f32\n"
    "  %hi_k = arith.constant 128.0 : f32\n"
    "  %t = arith.mulf %x, %log2e : f32\n"
    "  %th = arith.addf %t, %half : f32\n"
    "  %kf0 = math.floor %th : f32\n"
    "  %kf1 = arith.maximumf %kf0, %lo_k : f32\n"
    "  %kf = arith.minimumf %kf1, %hi_k : f32\n"
    "  %m1 = arith.mulf %kf, %hi : f32\n"
    "  %r1 = arith.subf %x, %m1 : f32\n"
    "  %m2 = arith.mulf %kf, %lo : f32\n"
    "  %r = arith.subf %r1, %m2 : f32\n"
    "  %q6 = arith.mulf %r, %p7 : f32\n"
    "  %q5 = arith.addf %q6, %p6 : f32\n"
    "  %q5r = arith.mulf %q5, %r : f32\n"
    "  %q4 = arith.addf %q5r, %p5 : f32\n"
    "  %q4r = arith.mulf %q4, %r : f32\n"
    "  %q3 = arith.addf %q4r, %p4 : f32\n"
    "  %q3r = arith.mulf %q3, %r : f32\n"
    "  %q2 = arith.addf %q3r, %p3 : f32\n"
    "  %q2r = arith.mulf %q2, %r : f32\n"
    "  %q1 = arith.addf %q2r, %p2 : f32\n"
    "  %q1r = arith.mulf %q1, %r : f32\n"
    "  %q0 = arith.addf %q1r, %one : f32\n"
    "  %q0r = arith.mulf %q0, %r : f32\n"
    "  %p = arith.addf %q0r, %one : f32\n"
    "  %k = arith.fptosi %kf : f32 to i32\n"
    "  %k1 = arith.divsi %k, %two : i32\n"
    "  %k2 = arith.subi %k, %k1 : i32\n"
    "  %b1 = arith.addi %k1, %bias : i32\n"
    "  %b2 = arith.addi %k2, %bias : i32\n"
    "  %e1 = arith.shli %b1, %c23 : i32\n"
    "  %e2 = arith.shli %b2, %c23 : i32\n"
    "  %s1 = arith.bitcast %e1 : i32 to f32\n"
    "  %s2 = arith.bitcast %e2 : i32 to f32\n"
    "  %y1 = arith.mulf %p, %s1 : f32\n"
    "  %y = arith.mulf %y1, %s2 : f32\n"
    "  %over = arith.cmpf ogt, %x, %max : f32\n"
    "  %under = arith.cmpf olt, %x, %min : f32\n"
    "  %nan = arith.cmpf uno, %x, %x : f32\n"
    "  %z1 = arith.select %over, %inf, %y : f32\n"
    "  %z2 = arith.select %under, %zero, %z1 : f32\n"
    "  %z = arith.select %nan, %x, %z2 : f32\n"
    "  return %z : f32\n"
    "}";

static const char log_f32[] =
    "func.func private @log(%x: f32) -> f32 {\n"
    "  %tiny = arith.constant 1.17549435e-38 : f32\n"
    "  %scale = arith.constant 8388608.0 : f32\n"
    "  %sqrt2 = arith.constant 1.41421356 : f32\n"
    "  %half = arith.constant 0.5 : f32\n"
    "  %one = arith.constant 1.0 : f32\n"
    "  %two = arith.constant 2.0 : f32\n"
    "  %zero = arith.constant 0.0 : f32\n"
    "  %ninf = arith.constant 0xFF800000 : f32\n"
    "  %inf = arith.constant 0x7F800000 : f32\n"
    "  %qnan = arith.constant 0x7FC00000 : f32\n"
    "  %ln2hi = arith.constant 0.693359375 : f32\n"
    "  %ln2lo = arith.constant -2.12194440e-4 : f32\n"
    "  %a3 = arith.constant 0.66666666666666663 : f32\n"
    "  %a5 = arith.constant 0.40000000000000002 : f32\n"
    "  %a7 = arith.constant 0.2857142857142857 : f32\n"
    "  %a9 = arith.constant 0.22222222222222221 : f32\n"
    "  %a11 = arith.constant 0.18181818181818182 : f32\n"
    "  %c23 = arith.constant 23 : i32\n"
    "  %c255 = arith.constant 255 : i32\n"
    "  %c127 = arith.constant 127 : i32\n"
    "  %mmask = arith.constant 8388607 : i32\n"
    "  %one_bits = arith.constant 1065353216 : i32\n"
    "  %i0 = arith.constant 0 : i32\n"
    "  %i1 = arith.constant 1 : i32\n"
    "  %m23 = arith.constant -23 : i32\n"
    "  %small = arith.cmpf olt, %x, %tiny : f32\n"
    "  %xs0 = arith.mulf %x, %scale : f32\n"
    "  %xs = arith.select %small, %xs0, %x : f32\n"
    "  %eadj = arith.select %small, %m23, %i0 : i32\n"
    "  %b = arith.bitcast %xs : f32 to i32\n"
    "  %eb0 = arith.shrui %b, %c23 : i32\n"
    "  %eb = arith.andi %eb0, %c255 : i32\n"
    "  %e0 = arith.subi %eb, %c127 : i32\n"
    "  %mb0 = arith.andi %b, %mmask : i32\n"
    "  %mb = arith.ori %mb0, %one_bits : i32\n"
    "  %m = arith.bitcast %mb : i32 to f32\n"
    "  %big = arith.cmpf ogt, %m, %sqrt2 : f32\n"
    "  %mh = arith.mulf %m, %half : f32\n"
    "  %m2 = arith.select %big, %mh, %m : f32\n"
    "  %inc = arith.select %big, %i1, %i0 : i32\n"
    "  %e1 = arith.addi %e0, %inc : i32\n"
    "  %e = arith.addi %e1, %eadj : i32\n"
    "  %f = arith.subf %m2, %one : f32\n"
    "  %d = arith.addf %f, %two : f32\n"
    "  %s = arith.divf %f, %d : f32\n"
    "  %z = arith.mulf %s, %s : f32\n"
    "  %t5 = arith.mulf %z, %a11 : f32\n"
    "  %t4 = arith.addf %t5, %a9 : f32\n"
    "  %t4z = arith.mulf %t4, %z : f32\n"
    "  %t3 = arith.addf %t4z, %a7 : f32\n"
    "  %t3z = arith.mulf %t3, %z : f32\n"
    "  %t2 = arith.addf %t3z, %a5 : f32\n"
    "  %t2z = arith.mulf %t2, %z : f32\n"
    "  %t1 = arith.addf %t2z, %a3 : f32\n"
    "  %t1z = arith.mulf %t1, %z : f32\n"
    "  %t0 = arith.addf %t1z, %two : f32\n"
    "  %lm = arith.mulf %t0, %s : f32\n"
    "  %ef = arith.sitofp %e : i32 to f32\n"
    "  %h = arith.mulf %ef, %ln2hi : f32\n"
    "  %l = arith.mulf %ef, %ln2lo : f32\n"
    "  %low = arith.addf %l, %lm : f32\n"
    "  %y = arith.addf %h, %low : f32\n"
    "  %is_zero = arith.cmpf oeq, %x, %zero : f32\n"
    "  %is_neg = arith.cmpf olt, %x, %zero : f32\n"
    "  %is_inf = arith.cmpf oeq, %x, %inf : f32\n"
    "  %is_nan = arith.cmpf uno, %x, %x : f32\n"
    "  %r1 = arith.select %is_inf, %inf, %y : f32\n"
    "  %r2 = arith.select %is_neg, %qnan, %r1 : f32\n"
    "  %r3 = arith.select %is_zero, %ninf, %r2 : f32\n"
    "  %r = arith.select %is_nan, %x, %r3 : f32\n"
    "  return %r : f32\n"
    "}";

static const char log1p_f32[] =
    "func.func private @log1p(%x: f32) -> f32 {\n"
    "  %one = arith.constant 1.0 : f32\n"
    "  %u = arith.addf %x, %one : f32\n"
    "  %d = arith.subf %u, %one : f32\n"
    "  %l = math.log %u : f32\n"
    "  %lx = arith.mulf %l, %x : f32\n"
    "  %q = arith.divf %lx, %d : f32\n"
    "  %exact = arith.cmpf oeq, %d, %x : f32\n"
    "  %same = arith.cmpf oeq, %u, %one : f32\n"
    "  %r0 = arith.select %exact, %l, %q : f32\n"
    "  %r = arith.select %same, %x, %r0 : f32\n"
    "  return %r : f32\n"
    "}";

static const char expm1_f32[] =
    "func.func private @expm1(%x: f32) -> f32 {\n"
    "  %one = arith.constant 1.0 : f32\n"
    "  %mone = arith.constant -1.0 : f32\n"
    "  %u = math.exp %x : f32\n"
    "  %d = arith.subf %u, %one : f32\n"
    "  %l = math.log %u : f32\n"
    "  %dx = arith.mulf %d, %x : f32\n"
    "  %q = arith.divf %dx, %l : f32\n"
    "  %same = arith.cmpf oeq, %u, %one : f32\n"
    "  %floor = arith.cmpf oeq, %d, %mone : f32\n"
    "  %inf = arith.cmpf oeq, %u, %l : f32\n"
    "  %r0 = arith.select %floor, %mone, %q : f32\n"
    "  %r1 = arith.select %inf, %u, %r0 : f32\n"
    "  %r = arith.select %same, %x, %r1 : f32\n"
    "  return %r : f32\n"
    "}";

static const char ctpop_i32[] =
    "func.func private @ctpop(%x: i32) -> i32 {\n"
    "  %c1 = arith.constant 1 : i32\n"
    "  %c2 = arith.constant 2 : i32\n"
    "  %c4 = arith.constant 4 : i32\n"
    "  %c24 = arith.constant 24 : i32\n"
    "  %m1 = arith.constant 1431655765 : i32\n"
    "  %m2 = arith.constant 858993459 : i32\n"
    "  %m4 = arith.constant 252645135 : i32\n"
    "  %h01 = arith.constant 16843009 : i32\n"
    "  %s1 = arith.shrui %x, %c1 : i32\n"
    "  %a1 = arith.andi %s1, %m1 : i32\n"
    "  %x1 = arith.subi %x, %a1 : i32\n"
    "  %b2 = arith.andi %x1, %m2 : i32\n"
    "  %s2 = arith.shrui %x1, %c2 : i32\n"
    "  %c2m = arith.andi %s2, %m2 : i32\n"
    "  %x2 = arith.addi %b2, %c2m : i32\n"
    "  %s4 = arith.shrui %x2, %c4 : i32\n"
    "  %x3 = arith.addi %x2, %s4 : i32\n"
    "  %x4 = arith.andi %x3, %m4 : i32\n"
    "  %x5 = arith.muli %x4, %h01 : i32\n"
    "  %r = arith.shrui %x5, %c24 : i32\n"
    "  return %r : i32\n"
    "}";

static const char cttz_i32[] =
    "func.func private @cttz(%x: i32) -> i32 {\n"
    "  %c0 = arith.constant 0 : i32\n"
    "  %c31 = arith.constant 31 : i32\n"
    "  %c32 = arith.constant 32 : i32\n"
    "  %neg = arith.subi %c0, %x : i32\n"
    "  %low = arith.andi %x, %neg : i32\n"
    "  %lz = math.ctlz %low : i32\n"
    "  %t = arith.subi %c31, %lz : i32\n"
    "  %is_zero = arith.cmpi eq, %x, %c0 : i32\n"
    "  %r = arith.select %is_zero, %c32, %t : i32\n"
    "  return %r : i32\n"
    "}";

/* fmod, exact (arith.remf; AMD's is OCML's, in ROCm's device libraries): the
 * integer shift-and-subtract of the mantissas, one exponent step per iteration
 * (at most 277 in f32, 2,098 in f64), as C libraries do it. Subnormals are
 * normalized with ctlz first. A template for both widths: $F the float type, $I
 * the integer of its size, then its bit layout (see fmod_keys).
 * y == 0, x infinite or either NaN give NaN; |x| < |y| gives x. The loop carries
 * everything it reads (the helper inliner copies regions without remapping
 * values from outside them). */
static const char fmod_template[] =
    "func.func private @fmod(%x: $F, %y: $F) -> $F {\n"
    "  %c0 = arith.constant 0 : $I\n"
    "  %c1 = arith.constant 1 : $I\n"
    "  %c8 = arith.constant $LZ : $I\n"
    "  %c23 = arith.constant $MB : $I\n"
    "  %sign_mask = arith.constant $SIGN : $I\n"
    "  %abs_mask = arith.constant $ABS : $I\n"
    "  %man_mask = arith.constant $MAN : $I\n"
    "  %implicit = arith.constant $IMP : $I\n"
    "  %inf = arith.constant $INF : $I\n"
    "  %nan = arith.constant $NAN : $F\n"
    "  %ux = arith.bitcast %x : $F to $I\n"
    "  %uy = arith.bitcast %y : $F to $I\n"
    "  %sx = arith.andi %ux, %sign_mask : $I\n"
    "  %ax = arith.andi %ux, %abs_mask : $I\n"
    "  %ay = arith.andi %uy, %abs_mask : $I\n"
    /* x: exponent and mantissa with the implicit bit, subnormals normalized */
    "  %ex0 = arith.shrui %ax, %c23 : $I\n"
    "  %xsub = arith.cmpi eq, %ex0, %c0 : $I\n"
    "  %xlz = math.ctlz %ax : $I\n"
    "  %xsh = arith.subi %xlz, %c8 : $I\n"
    "  %xsm = arith.shli %ax, %xsh : $I\n"
    "  %xse = arith.subi %c1, %xsh : $I\n"
    "  %xm0 = arith.andi %ax, %man_mask : $I\n"
    "  %xnm = arith.ori %xm0, %implicit : $I\n"
    "  %ex = arith.select %xsub, %xse, %ex0 : $I\n"
    "  %mx = arith.select %xsub, %xsm, %xnm : $I\n"
    /* y likewise */
    "  %ey0 = arith.shrui %ay, %c23 : $I\n"
    "  %ysub = arith.cmpi eq, %ey0, %c0 : $I\n"
    "  %ylz = math.ctlz %ay : $I\n"
    "  %ysh = arith.subi %ylz, %c8 : $I\n"
    "  %ysm = arith.shli %ay, %ysh : $I\n"
    "  %yse = arith.subi %c1, %ysh : $I\n"
    "  %ym0 = arith.andi %ay, %man_mask : $I\n"
    "  %ynm = arith.ori %ym0, %implicit : $I\n"
    "  %ey = arith.select %ysub, %yse, %ey0 : $I\n"
    "  %my = arith.select %ysub, %ysm, %ynm : $I\n"
    /* while ex > ey: if mx >= my, mx -= my; mx <<= 1; ex -= 1 */
    "  %r:4 = scf.while (%e = %ex, %m = %mx, %f = %ey, %n = %my) : ($I, $I, $I, $I) -> ($I, $I, $I, $I) {\n"
    "    %go = arith.cmpi sgt, %e, %f : $I\n"
    "    scf.condition(%go) %e, %m, %f, %n : $I, $I, $I, $I\n"
    "  } do {\n"
    "  ^bb0(%e: $I, %m: $I, %f: $I, %n: $I):\n"
    "    %k0 = arith.constant 0 : $I\n"
    "    %k1 = arith.constant 1 : $I\n"
    "    %d = arith.subi %m, %n : $I\n"
    "    %ge = arith.cmpi sge, %d, %k0 : $I\n"
    "    %m1 = arith.select %ge, %d, %m : $I\n"
    "    %m2 = arith.shli %m1, %k1 : $I\n"
    "    %e1 = arith.subi %e, %k1 : $I\n"
    "    scf.yield %e1, %m2, %f, %n : $I, $I, $I, $I\n"
    "  }\n"
    "  %d = arith.subi %r#1, %my : $I\n"
    "  %ge = arith.cmpi sge, %d, %c0 : $I\n"
    "  %mr = arith.select %ge, %d, %r#1 : $I\n"
    /* back to a float: normalize, then a normal or a subnormal result */
    "  %lz = math.ctlz %mr : $I\n"
    "  %sh = arith.subi %lz, %c8 : $I\n"
    "  %mn = arith.shli %mr, %sh : $I\n"
    "  %en = arith.subi %r#0, %sh : $I\n"
    "  %normal_e = arith.shli %en, %c23 : $I\n"
    "  %normal_m = arith.andi %mn, %man_mask : $I\n"
    "  %normal = arith.ori %normal_e, %normal_m : $I\n"
    "  %sub_sh = arith.subi %c1, %en : $I\n"
    "  %sub = arith.shrui %mn, %sub_sh : $I\n"
    "  %is_normal = arith.cmpi sgt, %en, %c0 : $I\n"
    "  %mag0 = arith.select %is_normal, %normal, %sub : $I\n"
    "  %is_zero = arith.cmpi eq, %mr, %c0 : $I\n"
    "  %mag = arith.select %is_zero, %c0, %mag0 : $I\n"
    "  %bits = arith.ori %mag, %sx : $I\n"
    "  %res0 = arith.bitcast %bits : $I to $F\n"
    "  %small = arith.cmpi ult, %ax, %ay : $I\n"
    "  %res1 = arith.select %small, %x, %res0 : $F\n"
    "  %y_zero = arith.cmpi eq, %ay, %c0 : $I\n"
    "  %x_inf = arith.cmpi uge, %ax, %inf : $I\n"
    "  %y_nan = arith.cmpi ugt, %ay, %inf : $I\n"
    "  %bad0 = arith.ori %y_zero, %x_inf : i1\n"
    "  %bad = arith.ori %bad0, %y_nan : i1\n"
    "  %res = arith.select %bad, %nan, %res1 : $F\n"
    "  return %res : $F\n"
    "}";

/* Integer powers (math.ipowi: no backend lowers it) by squaring, one exponent bit
 * per iteration. A negative exponent gives 1 for a base of 1, +-1 for -1 (by the
 * exponent's parity) and 0 otherwise, as MLIR's convert-math-to-funcs defines it
 * (0 to a negative power is undefined there; here it is 0). A template: $I. */
static const char ipowi_template[] =
    "func.func private @ipowi(%a: $I, %b: $I) -> $I {\n"
    "  %c0 = arith.constant 0 : $I\n"
    "  %c1 = arith.constant 1 : $I\n"
    "  %cm1 = arith.constant -1 : $I\n"
    "  %r:3 = scf.while (%base = %a, %e = %b, %acc = %c1) : ($I, $I, $I) -> ($I, $I, $I) {\n"
    "    %k0 = arith.constant 0 : $I\n"
    "    %go = arith.cmpi sgt, %e, %k0 : $I\n"
    "    scf.condition(%go) %base, %e, %acc : $I, $I, $I\n"
    "  } do {\n"
    "  ^bb0(%base: $I, %e: $I, %acc: $I):\n"
    "    %k0 = arith.constant 0 : $I\n"
    "    %k1 = arith.constant 1 : $I\n"
    "    %bit = arith.andi %e, %k1 : $I\n"
    "    %odd = arith.cmpi ne, %bit, %k0 : $I\n"
    "    %m = arith.muli %acc, %base : $I\n"
    "    %acc2 = arith.select %odd, %m, %acc : $I\n"
    "    %sq = arith.muli %base, %base : $I\n"
    "    %e2 = arith.shrui %e, %k1 : $I\n"
    "    scf.yield %sq, %e2, %acc2 : $I, $I, $I\n"
    "  }\n"
    "  %neg = arith.cmpi slt, %b, %c0 : $I\n"
    "  %a_one = arith.cmpi eq, %a, %c1 : $I\n"
    "  %a_mone = arith.cmpi eq, %a, %cm1 : $I\n"
    "  %bodd0 = arith.andi %b, %c1 : $I\n"
    "  %bodd = arith.cmpi ne, %bodd0, %c0 : $I\n"
    "  %pm = arith.select %bodd, %cm1, %c1 : $I\n"
    "  %n1 = arith.select %a_mone, %pm, %c0 : $I\n"
    "  %n2 = arith.select %a_one, %c1, %n1 : $I\n"
    "  %res = arith.select %neg, %n2, %r#2 : $I\n"
    "  return %res : $I\n"
    "}";

/* Float to an integer power (math.fpowi) by squaring, one exponent bit per
 * iteration, and the reciprocal for a negative exponent. Upstream's expansion
 * writes powf(x, n), which is NaN for a negative base (x86_64 gave NaN for
 * (-1.5)^2). f32 text, written f64 for f64; the exponent is i32 (wider ones are
 * clamped first, kiln_compiler_kernels_expand_math). */
static const char fpowi_f32[] =
    "func.func private @fpowi(%a: f32, %b: i32) -> f32 {\n"
    "  %c0 = arith.constant 0 : i32\n"
    "  %one = arith.constant 1.0 : f32\n"
    "  %neg = arith.cmpi slt, %b, %c0 : i32\n"
    "  %nb = arith.subi %c0, %b : i32\n"
    "  %e0 = arith.select %neg, %nb, %b : i32\n"
    "  %r:3 = scf.while (%base = %a, %e = %e0, %acc = %one) : (f32, i32, f32) -> (f32, i32, f32) {\n"
    "    %k0 = arith.constant 0 : i32\n"
    "    %go = arith.cmpi ne, %e, %k0 : i32\n"
    "    scf.condition(%go) %base, %e, %acc : f32, i32, f32\n"
    "  } do {\n"
    "  ^bb0(%base: f32, %e: i32, %acc: f32):\n"
    "    %k0 = arith.constant 0 : i32\n"
    "    %k1 = arith.constant 1 : i32\n"
    "    %bit = arith.andi %e, %k1 : i32\n"
    "    %odd = arith.cmpi ne, %bit, %k0 : i32\n"
    "    %m = arith.mulf %acc, %base : f32\n"
    "    %acc2 = arith.select %odd, %m, %acc : f32\n"
    "    %sq = arith.mulf %base, %base : f32\n"
    "    %e2 = arith.shrui %e, %k1 : i32\n"
    "    scf.yield %sq, %e2, %acc2 : f32, i32, f32\n"
    "  }\n"
    "  %inv = arith.divf %one, %r#2 : f32\n"
    "  %res = arith.select %neg, %inv, %r#2 : f32\n"
    "  return %res : f32\n"
    "}";

/* The template's keys per width: $LZ the leading bits before the mantissa's
 * top (sign and exponent), $MB the mantissa bits, then masks and NaN. */
static const char *const fmod_keys[2][11] = {
    {"$F", "f32", "$I", "i32", "$LZ", "8", "$MB", "23", "$SIGN", "-2147483648", NULL},
    {"$F", "f64", "$I", "i64", "$LZ", "11", "$MB", "52", "$SIGN", "-9223372036854775808", NULL},
};
static const char *const fmod_masks[2][11] = {
    {"$ABS", "2147483647", "$MAN", "8388607", "$IMP", "8388608", "$INF", "2139095040", "$NAN", "0x7FC00000",
     NULL},
    {"$ABS", "9223372036854775807", "$MAN", "4503599627370495", "$IMP", "4503599627370496", "$INF",
     "9218868437227405312", "$NAN", "0x7FF8000000000000", NULL},
};

static const struct {
  const char *name;   /* the math dialect function without "math."; "remf" is arith.remf, and
                         the integer divisions are arith's */
  const char *helper; /* its f32 (or i32) text; NULL: only the 64-bit one exists */
  bool generic;       /* the same text serves f64/i64 (a template, or f32 text written f64) */
  bool integer;       /* on i32/i64; else f32/f64 */
} helpers[] = {
    {"erf", erf_f32, false, false},
    {"atan", atan_f32, false, false},
    {"atan2", atan2_f32, true, false},
    {"asin", asin_f32, true, false},
    {"acos", acos_f32, true, false},
    {"cbrt", cbrt_f32, false, false},
    {"floor", floor_f32, false, false},
    {"ceil", ceil_f32, false, false},
    {"log2", log2_f32, false, false},
    {"sin", sin_f32, false, false},
    {"cos", cos_f32, false, false},
    {"remf", fmod_template, true, false},
    {"log10", log10_f32, false, false},
    {"tan", tan_f32, true, false},
    {"trunc", trunc_f32, true, false},
    {"erfc", erfc_f32, false, false},
    {"exp", exp_f32, false, false},
    {"log", log_f32, false, false},
    {"log1p", log1p_f32, true, false},
    {"expm1", expm1_f32, true, false},
    {"exp2", NULL, false, false}, /* f64 only (kernel_math64.c) */
    {"ctpop", ctpop_i32, false, true},
    {"cttz", cttz_i32, false, true},
    {"ipowi", ipowi_template, true, true},
    {"fpowi", fpowi_f32, true, false},
    /* i64 only, for SPIR-V profiles without Int64 (kernel_math64.c) */
    {"ctlz", NULL, false, true},
    {"absi", NULL, false, true},
    {"divsi", NULL, false, true},
    {"divui", NULL, false, true},
    {"remsi", NULL, false, true},
    {"remui", NULL, false, true},
    {"floordivsi", NULL, false, true},
    {"ceildivsi", NULL, false, true},
};

enum { N_HELPERS = sizeof helpers / sizeof helpers[0] };

/* `text` with each "$KEY" of the width's keys replaced, and for f64 every "f32"
 * written "f64". */
static char *instantiate(const char *text, bool f64) {
  /* the masks first: "$I" is a prefix of "$IMP" and "$INF" */
  const char *const *lists[2] = {fmod_masks[f64], fmod_keys[f64]};
  kiln_buf_t b;
  kiln_buf_init(&b);
  for (const char *p = text; *p;) {
    bool done = false;
    if (*p == '$') {
      for (int l = 0; l < 2 && !done; l++) {
        for (const char *const *kv = lists[l]; *kv && !done; kv += 2) {
          size_t n = strlen(kv[0]);
          if (strncmp(p, kv[0], n) == 0) {
            kiln_buf_append_str(&b, kv[1]);
            p += n;
            done = true;
          }
        }
      }
    } else if (f64 && strncmp(p, "f32", 3) == 0) {
      kiln_buf_append_str(&b, "f64");
      p += 3;
      done = true;
    }
    if (!done) kiln_buf_append_char(&b, *p++);
  }
  return kiln_buf_take(&b);
}

typedef struct found_s {
  const char *ops, *ops64;            /* the caller's lists */
  MlirOperation *items[2][N_HELPERS]; /* per width (32, 64 bits) and helper, the ops found */
  size_t n[2][N_HELPERS];
  kiln_compiler_ops_t half;   /* f16/bf16 ops of `ops`' functions: to widen to f32 */
  kiln_compiler_ops_t narrow; /* i8/i16 bit counts, absi, ipowi: to widen to i32 */
  size_t total;
} found_t;

bool kiln_compiler_list_has(const char *list, const char *item) {
  size_t n = strlen(item);
  for (const char *p = list; p && *p;) {
    const char *comma = strchr(p, ',');
    size_t len = comma ? (size_t)(comma - p) : strlen(p);
    if (len == n && memcmp(p, item, n) == 0) return true;
    p = comma ? comma + 1 : NULL;
  }
  return false;
}

/* The helper table's key for an op: math.<name>, and arith's remf and integer
 * divisions by their names; empty for anything else. */
static MlirStringRef helper_key(MlirOperation op) {
  static const char *const arith_ops[] = {"remf",  "divsi",      "divui",    "remsi",
                                          "remui", "floordivsi", "ceildivsi"};
  MlirStringRef name = mlirIdentifierStr(mlirOperationGetName(op));
  if (name.length > 5 && memcmp(name.data, "math.", 5) == 0)
    return mlirStringRefCreate(name.data + 5, name.length - 5);
  if (name.length > 6 && memcmp(name.data, "arith.", 6) == 0) {
    for (size_t i = 0; i < sizeof arith_ops / sizeof arith_ops[0]; i++) {
      if (name.length - 6 == strlen(arith_ops[i]) &&
          memcmp(name.data + 6, arith_ops[i], name.length - 6) == 0) {
        return mlirStringRefCreate(name.data + 6, name.length - 6);
      }
    }
  }
  return mlirStringRefCreate(NULL, 0);
}

static bool narrow_widened(MlirStringRef key) {
  static const char *const names[] = {"ctlz", "cttz", "ctpop", "absi", "ipowi"};
  for (size_t i = 0; i < sizeof names / sizeof names[0]; i++) {
    if (key.length == strlen(names[i]) && memcmp(key.data, names[i], key.length) == 0) return true;
  }
  return false;
}

/* An i8/i16 math.ctlz/cttz/ctpop/absi/ipowi on i32, the result truncated back:
 * ctlz of the zero-extended value less the 32 - N leading bits it gained; cttz
 * with bit N set, so a zero gives N; ctpop zero-extended; absi and ipowi
 * sign-extended (the wrapped result is the truncation of the i32 one). */
static void widen_narrow_int(MlirContext context, MlirOperation op) {
  MlirStringRef name = mlirIdentifierStr(mlirOperationGetName(op));
  MlirType narrow = mlirValueGetType(mlirOperationGetResult(op, 0));
  unsigned bits = mlirIntegerTypeGetWidth(narrow);
  MlirType i32 = mlirIntegerTypeGet(context, 32);
  bool sign = kiln_compiler_op_is(op, "math.absi") || kiln_compiler_op_is(op, "math.ipowi");
  MlirValue a =
      kiln_compiler_build1(sign ? "arith.extsi" : "arith.extui", op, mlirOperationGetOperand(op, 0), i32);
  MlirValue r;
  if (kiln_compiler_op_is(op, "math.ipowi")) {
    MlirValue b = kiln_compiler_build1("arith.extsi", op, mlirOperationGetOperand(op, 1), i32);
    r = kiln_compiler_build2("math.ipowi", op, a, b, i32);
  } else if (kiln_compiler_op_is(op, "math.cttz")) {
    MlirValue top = kiln_compiler_int_const_before(context, op, i32, (int64_t)1 << bits);
    r = kiln_compiler_build1("math.cttz", op, kiln_compiler_build2("arith.ori", op, a, top, i32), i32);
  } else if (kiln_compiler_op_is(op, "math.ctlz")) {
    MlirValue gained = kiln_compiler_int_const_before(context, op, i32, 32 - bits);
    r = kiln_compiler_build2("arith.subi", op, kiln_compiler_build1("math.ctlz", op, a, i32), gained, i32);
  } else {
    char full[32];
    snprintf(full, sizeof full, "%.*s", (int)name.length, name.data);
    r = kiln_compiler_build1(full, op, a, i32);
  }
  mlirValueReplaceAllUsesOfWith(mlirOperationGetResult(op, 0),
                                kiln_compiler_build1("arith.trunci", op, r, narrow));
  mlirOperationDestroy(op);
}

static MlirWalkResult find_math(MlirOperation op, void *user) {
  found_t *f = user;
  MlirStringRef key = helper_key(op);
  if (!key.length || mlirOperationGetNumResults(op) != 1) return MlirWalkResultAdvance;
  MlirType rt = mlirValueGetType(mlirOperationGetResult(op, 0));
  unsigned width = mlirTypeIsAInteger(rt) ? mlirIntegerTypeGetWidth(rt) : 0;
  if ((width == 8 || width == 16) && narrow_widened(key)) {
    /* no backend has all of these on i8/i16 (NVPTX none of cttz, ctpop, absi;
     * SPIR-V without Int8/Int16 no bit counts; nothing ipowi): i32 code, and the
     * i32 op is the next round's */
    kiln_compiler_ops_push(&f->narrow, op);
    f->total++;
    return MlirWalkResultAdvance;
  }
  bool integer = width != 0;
  bool wide = width == 64 || mlirTypeIsAF64(rt);
  bool half = mlirTypeIsAF16(rt) || mlirTypeIsABF16(rt);
  if (!(width == 32 || width == 64 || mlirTypeIsAF32(rt) || mlirTypeIsAF64(rt) || half))
    return MlirWalkResultAdvance;
  for (size_t h = 0; h < N_HELPERS; h++) {
    if (helpers[h].integer != integer || key.length != strlen(helpers[h].name) ||
        memcmp(key.data, helpers[h].name, key.length) != 0 ||
        !kiln_compiler_list_has(wide ? f->ops64 : f->ops, helpers[h].name)) {
      continue;
    }
    if (half) {
      /* computed in f32 by the f32 helper (the next round finds it): a Vulkan
       * profile with Float16 has no f16 erf or cbrt either, and NVPTX's f16
       * frem is its f32 one */
      kiln_compiler_ops_push(&f->half, op);
    } else {
      f->items[wide][h] = kiln_realloc(f->items[wide][h], (f->n[wide][h] + 1) * sizeof *f->items[wide][h]);
      f->items[wide][h][f->n[wide][h]++] = op;
    }
    f->total++;
    break;
  }
  return MlirWalkResultAdvance;
}

/* The helper's text for helper h in 32 or 64 bits; NULL for a function kiln has
 * no code for in that width (a caller's list names only those it has). */
static char *helper_text(size_t h, bool wide) {
  if (!wide) return helpers[h].helper ? instantiate(helpers[h].helper, false) : NULL;
  char *built = kiln_compiler_math_helper_64(helpers[h].name, helpers[h].integer);
  if (built) return built;
  return helpers[h].generic ? instantiate(helpers[h].helper, true) : NULL;
}

/* What each expansion round starts with: fpowi with an exponent other than i32,
 * and isinf/isnormal on floats, found in one walk. */
typedef struct pre_s {
  kiln_compiler_ops_t fpowi, classify;
} pre_t;

static MlirWalkResult collect_pre(MlirOperation op, void *user) {
  pre_t *p = user;
  if (kiln_compiler_op_is(op, "math.fpowi")) {
    MlirType t = mlirValueGetType(mlirOperationGetOperand(op, 1));
    if (mlirTypeIsAInteger(t) && mlirIntegerTypeGetWidth(t) != 32) kiln_compiler_ops_push(&p->fpowi, op);
  } else if (kiln_compiler_op_is(op, "math.isinf") || kiln_compiler_op_is(op, "math.isnormal")) {
    if (mlirTypeIsAFloat(mlirValueGetType(mlirOperationGetOperand(op, 0))))
      kiln_compiler_ops_push(&p->classify, op);
  }
  return MlirWalkResultAdvance;
}

/* fpowi's exponent as the helper's i32: narrower ones sign-extended, an i64
 * clamped to +-(2^30 + its parity) first (past that every power is 0, infinite
 * or +-1 already, and the parity keeps the sign of a negative base's). */
static void fpowi_exponents_i32(MlirContext context, kiln_compiler_ops_t found) {
  MlirType i32 = mlirIntegerTypeGet(context, 32);
  for (size_t i = 0; i < found.n; i++) {
    MlirOperation op = found.items[i];
    MlirValue n = mlirOperationGetOperand(op, 1);
    MlirType t = mlirValueGetType(n);
    if (mlirIntegerTypeGetWidth(t) < 32) {
      n = kiln_compiler_build1("arith.extsi", op, n, i32);
    } else {
      MlirValue one = kiln_compiler_int_const_before(context, op, t, 1);
      MlirValue parity = kiln_compiler_build2("arith.andi", op, n, one, t);
      MlirValue lim = kiln_compiler_build2(
          "arith.addi", op, kiln_compiler_int_const_before(context, op, t, 1 << 30), parity, t);
      MlirValue zero = kiln_compiler_int_const_before(context, op, t, 0);
      MlirValue neg_lim = kiln_compiler_build2("arith.subi", op, zero, lim, t);
      n = kiln_compiler_build2("arith.minsi", op, n, lim, t);
      n = kiln_compiler_build2("arith.maxsi", op, n, neg_lim, t);
      n = kiln_compiler_build1("arith.trunci", op, n, i32);
    }
    mlirOperationSetOperand(op, 1, n);
  }
  kiln_free(found.items);
}

/* A float constant of type t before `before`. */
static MlirValue float_const_before(MlirContext context, MlirOperation before, MlirType t, double v) {
  MlirOperationState state = mlirOperationStateGet(mlirStringRefCreateFromCString("arith.constant"),
                                                   mlirOperationGetLocation(before));
  MlirNamedAttribute value =
      kiln_compiler_named_attr(context, "value", mlirFloatAttrDoubleGet(context, t, v));
  mlirOperationStateAddAttributes(&state, 1, &value);
  mlirOperationStateAddResults(&state, 1, &t);
  MlirOperation c = mlirOperationCreate(&state);
  mlirBlockInsertOwnedOperationBefore(mlirOperationGetBlock(before), before, c);
  return mlirOperationGetResult(c, 0);
}

/* math.isinf and math.isnormal on scalars, which neither the LLVM translation
 * (x86_64, AMD; CUDA isnormal) nor kiln's f64 emulation had: |x| == inf, and
 * min normal <= |x| < inf (both false for NaN). */
static void expand_classify(MlirContext context, kiln_compiler_ops_t found) {
  MlirType i1 = mlirIntegerTypeGet(context, 1);
  for (size_t i = 0; i < found.n; i++) {
    MlirOperation op = found.items[i];
    MlirValue x = mlirOperationGetOperand(op, 0);
    MlirType t = mlirValueGetType(x);
    MlirValue a = kiln_compiler_build1("math.absf", op, x, t);
    MlirValue inf = float_const_before(context, op, t, __builtin_inf());
    MlirValue r;
    if (kiln_compiler_op_is(op, "math.isinf")) {
      r = kiln_compiler_cmpf_before(context, op, 1 /* oeq */, a, inf);
    } else {
      unsigned w = mlirFloatTypeGetWidth(t);
      double min_normal = w == 64 ? 0x1p-1022 : w == 16 && mlirTypeIsAF16(t) ? 0x1p-14 : 0x1p-126;
      MlirValue min = float_const_before(context, op, t, min_normal);
      MlirValue lo = kiln_compiler_cmpf_before(context, op, 3 /* oge */, a, min);
      MlirValue hi = kiln_compiler_cmpf_before(context, op, 4 /* olt */, a, inf);
      r = kiln_compiler_build2("arith.andi", op, lo, hi, i1);
    }
    mlirValueReplaceAllUsesOfWith(mlirOperationGetResult(op, 0), r);
    mlirOperationDestroy(op);
  }
  kiln_free(found.items);
}

kiln_status_t kiln_compiler_kernels_expand_math(MlirContext context, MlirModule module, const char *ops,
                                                const char *ops64) {
  kiln_status_t st = NULL;
  pre_t pre = {0};
  mlirOperationWalk(mlirModuleGetOperation(module), collect_pre, &pre, MlirWalkPreOrder);
  expand_classify(context, pre.classify);
  if (kiln_compiler_list_has(ops, "fpowi") || kiln_compiler_list_has(ops64, "fpowi")) {
    fpowi_exponents_i32(context, pre.fpowi);
  } else {
    kiln_free(pre.fpowi.items);
  }
  /* asin and acos bring atan, sin and cos bring floor, expm1 brings exp and log,
   * cbrt and erf bring both, i64 cttz brings i32 cttz and that ctlz: a few more
   * rounds at most. */
  for (int round = 0; round < 6 && !st; round++) {
    found_t f = {.ops = ops, .ops64 = ops64};
    mlirOperationWalk(mlirModuleGetOperation(module), find_math, &f, MlirWalkPostOrder);
    for (size_t i = 0; i < f.half.n; i++) kiln_compiler_widen_half_op(context, f.half.items[i]);
    kiln_free(f.half.items);
    for (size_t i = 0; i < f.narrow.n; i++) widen_narrow_int(context, f.narrow.items[i]);
    kiln_free(f.narrow.items);
    for (int w = 0; w < 2; w++) {
      for (size_t h = 0; h < N_HELPERS; h++) {
        if (!st && f.n[w][h]) {
          char *text = helper_text(h, w == 1);
          st = text ? kiln_compiler_kernels_replace_with_helper(context, f.items[w][h], f.n[w][h], text)
                    : KILN_STATUS(KILN_STATUS_INTERNAL, "kiln has no %s-bit code for %s", w ? "64" : "32",
                                  helpers[h].name);
          kiln_free(text);
        }
        kiln_free(f.items[w][h]);
      }
    }
    if (f.total == 0) break;
  }
  return st;
}
