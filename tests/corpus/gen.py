#!/usr/bin/env python3
"""Writes kiln's coverage corpus: tests/corpus/<group>.mlir, each a module of
op-level functions with their inputs and reference outputs in comments, which
tests/tools/corpus_check (and, outside CI, iree-run-module) reads.

The references are computed here in plain Python, independently of kiln's
compiler: integers wrap as the type wraps, floats are computed in double and
rounded to the element type once per op (f32 with struct 'f', f16 with struct
'e', bf16 by rounding the f32 bits to nearest even), which is what a correct
kernel computes up to the tolerance the checker allows.

Run it after changing a case: python3 tests/corpus/gen.py (it rewrites the files
it owns and nothing else).
"""
import math
from fractions import Fraction
import os
import struct

HERE = os.path.dirname(os.path.abspath(__file__))

# ---- element types ----


def f32(x):
    return struct.unpack('<f', struct.pack('<f', x))[0] if math.isfinite(x) else x


def f16(x):
    if math.isnan(x):
        return x
    try:
        return struct.unpack('<e', struct.pack('<e', x))[0]
    except OverflowError:
        return math.copysign(math.inf, x)


def bf16(x):
    if not math.isfinite(x):
        return x
    bits = struct.unpack('<I', struct.pack('<f', f32(x)))[0]
    bits = (bits + 0x7FFF + ((bits >> 16) & 1)) & 0xFFFF0000
    return struct.unpack('<f', struct.pack('<I', bits))[0]


def wrap(bits):
    def w(x):
        x = int(x) & ((1 << bits) - 1)
        return x - (1 << bits) if x >> (bits - 1) else x
    return w


ROUND = {'f32': f32, 'f16': f16, 'bf16': bf16, 'f64': float,
         'i8': wrap(8), 'i16': wrap(16), 'i32': wrap(32), 'i64': wrap(64),
         'i1': lambda x: 1 if x else 0}
FLOATS = ('f16', 'bf16', 'f32', 'f64')


def fmt(v):
    if isinstance(v, float):
        if math.isnan(v):
            return 'nan'
        if math.isinf(v):
            return 'inf' if v > 0 else '-inf'
        return repr(v)
    return str(int(v))


def ttype(shape, et):
    return 'tensor<%s>' % 'x'.join([str(d) for d in shape] + [et])


def count(shape):
    n = 1
    for d in shape:
        n *= d
    return n


def values(shape, et, seed=1, lo=-4, hi=4):
    """Deterministic test data that fits every type: small integers for ints,
    halves and quarters for floats (exact in bf16 too)."""
    out = []
    x = seed * 2654435761 % 4294967296
    for _ in range(count(shape)):
        x = (x * 1103515245 + 12345) % 2147483648
        if et == 'i1':
            out.append((x >> 16) & 1)
        elif et in FLOATS:
            out.append(ROUND[et](lo + ((x >> 8) % ((hi - lo) * 4 + 1)) / 4.0))
        else:
            out.append(lo + (x >> 8) % (hi - lo + 1))
    return out


class Case:
    def __init__(self, name, body, inputs, outputs, tol=None, xfail=None, exact=False):
        self.name, self.body, self.inputs, self.outputs, self.tol = name, body, inputs, outputs, tol
        self.xfail = xfail  # (targets, reason): a known gap, checked to still fail
        self.exact = exact  # floats bit for bit (any NaN for a NaN)

    def text(self):
        lines = ['// CASE @' + self.name]
        for shape, et, vals in self.inputs:
            lines.append('// INPUT %s %s' % ('x'.join([str(d) for d in shape] + [et]),
                                             ' '.join(fmt(v) for v in vals)))
        for shape, et, vals in self.outputs:
            lines.append('// OUTPUT %s %s' % ('x'.join([str(d) for d in shape] + [et]),
                                              ' '.join(fmt(v) for v in vals)))
        if self.tol:
            lines.append('// TOL %g' % self.tol)
        if self.exact:
            lines.append('// EXACT')
        if self.xfail:
            lines.append('// XFAIL %s %s' % self.xfail)
        return '\n'.join(lines) + '\n' + self.body.strip('\n') + '\n'


def elementwise(name, shapes_types, out_type, op_lines, ref, seeds=None):
    """A linalg.generic over 1-D..n-D identity maps: op_lines compute %r from the
    block arguments %a0, %a1, ... ; ref computes the reference from Python values."""
    shape = shapes_types[0][0]
    rank = len(shape)
    dims = ', '.join('d%d' % i for i in range(rank))
    amap = 'affine_map<(%s) -> (%s)>' % (dims, dims)
    args = ', '.join('%%in%d: %s' % (i, ttype(s, t)) for i, (s, t) in enumerate(shapes_types))
    ins = ', '.join('%%in%d' % i for i in range(len(shapes_types)))
    ins_t = ', '.join(ttype(s, t) for s, t in shapes_types)
    bargs = ', '.join('%%a%d: %s' % (i, t) for i, (s, t) in enumerate(shapes_types))
    out_t = ttype(shape, out_type)
    body = '''func.func @%s(%s) -> %s {
  %%e = tensor.empty() : %s
  %%r = linalg.generic {indexing_maps = [%s], iterator_types = [%s]}
      ins(%s : %s) outs(%%e : %s) {
  ^bb0(%s, %%o: %s):
%s
    linalg.yield %%r : %s
  } -> %s
  return %%r : %s
}''' % (name, args, out_t, out_t, ', '.join([amap] * (len(shapes_types) + 1)),
        ', '.join(['"parallel"'] * rank), ins, ins_t, out_t, bargs, out_type,
        '\n'.join('    ' + l for l in op_lines), out_type, out_t, out_t)
    seeds = seeds or list(range(1, len(shapes_types) + 1))
    ins_v = [values(s, t, seed) for (s, t), seed in zip(shapes_types, seeds)]
    out_v = [ROUND[out_type](ref(*xs)) for xs in zip(*ins_v)]
    return Case(name, body, [(s, t, v) for (s, t), v in zip(shapes_types, ins_v)],
                [(shape, out_type, out_v)])


# ---- groups ----


def group_types():
    """Every element type through one kernel, at odd sizes (issue 15: A, B, C)."""
    cases = []
    for et in ('i8', 'i16', 'i32', 'i64', 'f16', 'bf16', 'f32'):
        op = 'arith.addf' if et in FLOATS else 'arith.addi'
        new = []
        # 1000 and 1001: a vector becomes rows of 32 (1001: a guarded last row).
        for n in (1, 3, 5, 13) + ((1000, 1001) if et in ('i8', 'f16', 'f32') else ()):
            new.append(elementwise('add_%s_%d' % (et, n), [((n,), et), ((n,), et)], et,
                                   ['%%r = %s %%a0, %%a1 : %s' % (op, et)],
                                   lambda a, b: a + b))
        mop = 'arith.mulf' if et in FLOATS else 'arith.muli'
        new.append(elementwise('mul_%s_3x5' % et, [((3, 5), et), ((3, 5), et)], et,
                               ['%%r = %s %%a0, %%a1 : %s' % (mop, et)], lambda a, b: a * b))
        cases += new
    # i64 past 32 bits (SPIR-V profiles without Int64 emulate it with i32 pairs).
    big = [5000000000, -5000000000, (1 << 62) + 12345, -1, 4294967295, 4294967296, -(1 << 63)]
    other = [3, -7, 2, 4294967297, -1, 1 << 32, -1]
    n = len(big)
    for name, op, ref in (('add', 'arith.addi', lambda a, b: a + b), ('mul', 'arith.muli', lambda a, b: a * b),
                          ('sub', 'arith.subi', lambda a, b: a - b), ('shrsi', 'arith.shrsi', None)):
        if name == 'shrsi':
            rhs = [1, 4, 33, 63, 0, 32, 62]
            vals = [ROUND['i64'](a >> b) for a, b in zip(big, rhs)]
        else:
            rhs = other
            vals = [ROUND['i64'](ref(a, b)) for a, b in zip(big, rhs)]
        c = elementwise('%s_i64_big' % name, [((n,), 'i64'), ((n,), 'i64')], 'i64',
                        ['%%r = %s %%a0, %%a1 : i64' % op], lambda a, b: 0)
        c.inputs = [((n,), 'i64', big), ((n,), 'i64', rhs)]
        c.outputs = [((n,), 'i64', vals)]
        cases.append(c)
    # Division and bit counts: i32 pairs on SPIR-V profiles without Int64 (kiln's
    # code: arith-emulate-wide-int splits neither), and integer powers (math.ipowi,
    # which no backend lowers).
    divisors = [3, -7, 2, 4294967297, -1, 1 << 32, 7]
    m64 = (1 << 64) - 1

    def tdiv(a, b):
        q = abs(a) // abs(b)
        return q if (a < 0) == (b < 0) else -q

    def fdiv(a, b):
        return a // b

    def cdiv(a, b):
        return -((-a) // b)
    for name, ref in (('divsi', tdiv), ('remsi', lambda a, b: a - b * tdiv(a, b)),
                      ('divui', lambda a, b: (a & m64) // (b & m64)), ('remui', lambda a, b: (a & m64) % (b & m64)),
                      ('floordivsi', fdiv), ('ceildivsi', cdiv)):
        c = elementwise('%s_i64_big' % name, [((n,), 'i64'), ((n,), 'i64')], 'i64',
                        ['%%r = arith.%s %%a0, %%a1 : i64' % name], lambda a, b: 0)
        c.inputs = [((n,), 'i64', big), ((n,), 'i64', divisors)]
        c.outputs = [((n,), 'i64', [ROUND['i64'](ref(a, b)) for a, b in zip(big, divisors)])]
        cases.append(c)
    bits = big + [0, 1 << 40, 6]
    nb = len(bits)
    for name, ref in (('ctlz', lambda v: 64 - (v & m64).bit_length()),
                      ('cttz', lambda v: 64 if v == 0 else ((v & m64) & -(v & m64)).bit_length() - 1),
                      ('ctpop', lambda v: bin(v & m64).count('1')), ('absi', abs)):
        c = elementwise('%s_i64_big' % name, [((nb,), 'i64')], 'i64', ['%%r = math.%s %%a0 : i64' % name], lambda v: 0)
        c.inputs = [((nb,), 'i64', bits)]
        c.outputs = [((nb,), 'i64', [ROUND['i64'](ref(v)) for v in bits])]
        cases.append(c)

    # Slices of an i64 argument: the kernel's buffer is a strided view (a row at
    # an offset, a column at stride 6), split into i32 pairs too.
    mat = [ROUND['i64'](v * 1000000007 + (1 << 40)) for v in values((4, 6), 'i64', 64)]
    cases.append(Case('slice_mul_i64', """func.func @slice_mul_i64(%a: tensor<4x6xi64>) -> (tensor<6xi64>, tensor<4xi64>) {
  %s = tensor.extract_slice %a[1, 0] [1, 6] [1, 1] : tensor<4x6xi64> to tensor<6xi64>
  %c = arith.constant dense<5> : tensor<6xi64>
  %r = arith.muli %s, %c : tensor<6xi64>
  %t = tensor.extract_slice %a[0, 2] [4, 1] [1, 1] : tensor<4x6xi64> to tensor<4xi64>
  %u = arith.addi %t, %t : tensor<4xi64>
  return %r, %u : tensor<6xi64>, tensor<4xi64>
}""", [((4, 6), 'i64', mat)], [((6,), 'i64', [ROUND['i64'](v * 5) for v in mat[6:12]]),
                                 ((4,), 'i64', [ROUND['i64'](2 * mat[r * 6 + 2]) for r in range(4)])]))

    def ipow(a, b):
        if b >= 0:
            return a ** b
        return 1 if a == 1 else (-1 if b % 2 else 1) if a == -1 else 0
    bases = [3, -2, 7, 1, -1, 2, 0, 5]
    exps = [4, 5, 0, -3, -3, 62, 3, -1]
    for et in ('i32', 'i64'):
        c = elementwise('ipowi_%s' % et, [((8,), et), ((8,), et)], et, ['%%r = math.ipowi %%a0, %%a1 : %s' % et],
                        lambda a, b: 0)
        c.inputs = [((8,), et, bases), ((8,), et, exps)]
        c.outputs = [((8,), et, [ROUND[et](ipow(a, b)) for a, b in zip(bases, exps)])]
        cases.append(c)
    # The same on i8 and i16 (widened to i32: no backend has them all, and
    # VideoCore's profile has neither Int8 nor Int16, where MLIR converts no
    # unsigned division, remainder, max or min).
    for et, w in (('i8', 8), ('i16', 16)):
        mask = (1 << w) - 1
        xs = [ROUND[et](v) for v in (-(1 << (w - 1)), -3, -1, 0, 1, 5, 100, (1 << (w - 1)) - 1)]
        ys = [ROUND[et](v) for v in (3, -2, 7, 5, -1, 2, -9, 4)]
        for name, ref in (('ctlz', lambda v: w - (v & mask).bit_length()),
                          ('cttz', lambda v: w if v & mask == 0 else ((v & mask) & -(v & mask)).bit_length() - 1),
                          ('ctpop', lambda v: bin(v & mask).count('1')), ('absi', abs)):
            c = elementwise('%s_%s' % (name, et), [((8,), et)], et, ['%%r = math.%s %%a0 : %s' % (name, et)], lambda v: 0)
            c.inputs = [((8,), et, xs)]
            c.outputs = [((8,), et, [ROUND[et](ref(v)) for v in xs])]
            cases.append(c)
        for name, ref in (('divui', lambda a, b: (a & mask) // (b & mask)), ('remui', lambda a, b: (a & mask) % (b & mask)),
                          ('maxui', lambda a, b: max(a & mask, b & mask)), ('minui', lambda a, b: min(a & mask, b & mask)),
                          ('ipowi', ipow)):
            op = 'math.ipowi' if name == 'ipowi' else 'arith.' + name
            b = [v % 5 - 1 for v in range(8)] if name == 'ipowi' else ys
            c = elementwise('%s_%s' % (name, et), [((8,), et), ((8,), et)], et, ['%%r = %s %%a0, %%a1 : %s' % (op, et)],
                            lambda a, b: 0)
            c.inputs = [((8,), et, xs), ((8,), et, b)]
            c.outputs = [((8,), et, [ROUND[et](ref(x, y)) for x, y in zip(xs, b)])]
            cases.append(c)
    c = elementwise('cmp_i64_big', [((n,), 'i64'), ((n,), 'i64')], 'i1',
                    ['%r = arith.cmpi slt, %a0, %a1 : i64'], lambda a, b: 0)
    c.inputs = [((n,), 'i64', big), ((n,), 'i64', other)]
    c.outputs = [((n,), 'i1', [1 if a < b else 0 for a, b in zip(big, other)])]
    cases.append(c)
    c = elementwise('trunci_i64_i32', [((n,), 'i64')], 'i32', ['%r = arith.trunci %a0 : i64 to i32'], lambda a: 0)
    c.inputs = [((n,), 'i64', big)]
    c.outputs = [((n,), 'i32', [ROUND['i32'](a) for a in big])]
    cases.append(c)
    # Wrapping integer arithmetic.
    cases.append(elementwise('add_i8_wraps', [((7,), 'i8'), ((7,), 'i8')], 'i8',
                             ['%c = arith.constant 100 : i8', '%s = arith.addi %a0, %a1 : i8',
                              '%r = arith.addi %s, %c : i8'],
                             lambda a, b: a + b + 100))
    # Conversions between every float width and f32, both ways.
    for et in ('f16', 'bf16'):
        for n in (3, 8):
            cases.append(elementwise('extf_%s_%d' % (et, n), [((n,), et)], 'f32',
                                     ['%%r = arith.extf %%a0 : %s to f32' % et], lambda a: a))
            cases.append(elementwise('truncf_%s_%d' % (et, n), [((n,), 'f32')], et,
                                     ['%%r = arith.truncf %%a0 : f32 to %s' % et], lambda a: a))
    # Values that exercise every branch of an f16/bf16 conversion: zero, signs,
    # subnormals, the largest normal, rounding ties, overflow, infinity, NaN.
    special = [0.0, -0.0, 1.0, -2.5, 5.960464477539063e-08, 6.097555160522461e-05,
               6.103515625e-05, 65504.0, 65519.0, 65520.0, 1e6, -1e6, math.inf, -math.inf,
               math.nan, 1.0009765625, 1.00048828125, 1.00146484375, 3.14159265, 1e-10, 2049.0,
               2051.0, 0.333333343]
    n = len(special)
    for et in ('f16', 'bf16'):
        vals = [f32(v) for v in special]
        c = Case('truncf_%s_special' % et, '''func.func @truncf_%s_special(%%x: tensor<%dxf32>) -> tensor<%dx%s> {
  %%e = tensor.empty() : tensor<%dx%s>
  %%r = linalg.generic {indexing_maps = [affine_map<(d0) -> (d0)>, affine_map<(d0) -> (d0)>], iterator_types = ["parallel"]}
      ins(%%x : tensor<%dxf32>) outs(%%e : tensor<%dx%s>) {
  ^bb0(%%a: f32, %%o: %s):
    %%t = arith.truncf %%a : f32 to %s
    linalg.yield %%t : %s
  } -> tensor<%dx%s>
  return %%r : tensor<%dx%s>
}''' % (et, n, n, et, n, et, n, n, et, et, et, et, n, et, n, et),
                 [((n,), 'f32', vals)], [((n,), et, [ROUND[et](v) for v in vals])], tol=1e-9)
        cases.append(c)
        hvals = [ROUND[et](v) for v in vals]
        cases.append(Case('extf_%s_special' % et, '''func.func @extf_%s_special(%%x: tensor<%dx%s>) -> tensor<%dxf32> {
  %%e = tensor.empty() : tensor<%dxf32>
  %%r = linalg.generic {indexing_maps = [affine_map<(d0) -> (d0)>, affine_map<(d0) -> (d0)>], iterator_types = ["parallel"]}
      ins(%%x : tensor<%dx%s>) outs(%%e : tensor<%dxf32>) {
  ^bb0(%%a: %s, %%o: f32):
    %%t = arith.extf %%a : %s to f32
    linalg.yield %%t : f32
  } -> tensor<%dxf32>
  return %%r : tensor<%dxf32>
}''' % (et, n, et, n, n, n, et, n, et, et, n, n),
                          [((n,), et, hvals)], [((n,), 'f32', hvals)], tol=1e-9))
    # i1 in and out (C): compare, select, logical ops.
    cases.append(elementwise('cmp_f32_to_i1_5', [((5,), 'f32'), ((5,), 'f32')], 'i1',
                             ['%r = arith.cmpf olt, %a0, %a1 : f32'], lambda a, b: a < b,
                             seeds=[3, 4]))
    cases.append(elementwise('select_i1_7', [((7,), 'i1'), ((7,), 'f32'), ((7,), 'f32')], 'f32',
                             ['%r = arith.select %a0, %a1, %a2 : f32'],
                             lambda c, a, b: a if c else b, seeds=[5, 6, 7]))
    cases.append(elementwise('xor_i1_6', [((6,), 'i1'), ((6,), 'i1')], 'i1',
                             ['%r = arith.xori %a0, %a1 : i1'], lambda a, b: a ^ b, seeds=[8, 9]))
    cases.append(elementwise('cmp_i8_to_i1_3', [((3,), 'i8'), ((3,), 'i8')], 'i1',
                             ['%r = arith.cmpi sge, %a0, %a1 : i8'], lambda a, b: a >= b,
                             seeds=[10, 11]))
    # Widening and narrowing between integer widths.
    cases.append(elementwise('extsi_i8_i32_5', [((5,), 'i8')], 'i32',
                             ['%r = arith.extsi %a0 : i8 to i32'], lambda a: a))
    cases.append(elementwise('trunci_i32_i16_3', [((3,), 'i32')], 'i16',
                             ['%r = arith.trunci %a0 : i32 to i16'], lambda a: a))
    cases.append(elementwise('sitofp_i16_f16_5', [((5,), 'i16')], 'f16',
                             ['%r = arith.sitofp %a0 : i16 to f16'], lambda a: a))
    cases.append(elementwise('fptosi_bf16_i8_3', [((3,), 'bf16')], 'i8',
                             ['%r = arith.fptosi %a0 : bf16 to i8'], lambda a: math.trunc(a)))
    # Float arithmetic in the narrow types: every op is computed in f32 by the
    # kernel and rounded once, as the reference does.
    for et in ('f16', 'bf16'):
        cases.append(elementwise('fma_%s_7' % et, [((7,), et), ((7,), et), ((7,), et)], et,
                                 ['%%m = arith.mulf %%a0, %%a1 : %s' % et,
                                  '%%r = arith.addf %%m, %%a2 : %s' % et],
                                 lambda a, b, c: ROUND[et](ROUND[et](a * b) + c)))
        cases.append(elementwise('div_%s_5' % et, [((5,), et), ((5,), et)], et,
                                 ['%%r = arith.divf %%a0, %%a1 : %s' % et],
                                 lambda a, b: a / b if b else math.copysign(math.inf, a) if a else math.nan,
                                 seeds=[12, 13]))
        cases.append(elementwise('max_%s_3' % et, [((3,), et), ((3,), et)], et,
                                 ['%%r = arith.maximumf %%a0, %%a1 : %s' % et], max))
    return cases


def tosa_case(name, args, result, body_lines, inputs, outputs, tol=None):
    sig = ', '.join('%%arg%d: %s' % (i, a) for i, a in enumerate(args))
    body = 'func.func @%s(%s) -> %s {\n%s\n}' % (name, sig, result,
                                                 '\n'.join('  ' + l for l in body_lines))
    return Case(name, body, inputs, outputs, tol)


def group_tensor_ops():
    """Data movement in narrow types and odd sizes (issue 15, B)."""
    cases = []
    for et in ('i8', 'i16', 'f16', 'bf16'):
        a = values((3,), et, 21)
        b = values((2,), et, 22)
        cases.append(tosa_case('concat_%s_3_2' % et, ['tensor<3x%s>' % et, 'tensor<2x%s>' % et],
                               'tensor<5x%s>' % et,
                               ['%%0 = tosa.concat %%arg0, %%arg1 {axis = 0 : i32} : (tensor<3x%s>, tensor<2x%s>) -> tensor<5x%s>' % (et, et, et),
                                'return %%0 : tensor<5x%s>' % et],
                               [((3,), et, a), ((2,), et, b)], [((5,), et, a + b)]))
        # 3x3 max pool, stride 2, over a 1x5x5x1 image: 2x2 outputs.
        img = values((1, 5, 5, 1), et, 23)
        out = []
        for y in range(2):
            for x in range(2):
                out.append(max(img[(2 * y + dy) * 5 + 2 * x + dx] for dy in range(3) for dx in range(3)))
        cases.append(tosa_case('maxpool_%s' % et, ['tensor<1x5x5x1x%s>' % et], 'tensor<1x2x2x1x%s>' % et,
                               ['%%0 = tosa.max_pool2d %%arg0 {kernel = array<i64: 3, 3>, pad = array<i64: 0, 0, 0, 0>, stride = array<i64: 2, 2>} : (tensor<1x5x5x1x%s>) -> tensor<1x2x2x1x%s>' % (et, et),
                                'return %%0 : tensor<1x2x2x1x%s>' % et],
                               [((1, 5, 5, 1), et, img)], [((1, 2, 2, 1), et, out)]))
        # transpose of a 3x5
        m = values((3, 5), et, 24)
        t = [m[r * 5 + c] for c in range(5) for r in range(3)]
        cases.append(tosa_case('transpose_%s_3x5' % et, ['tensor<3x5x%s>' % et], 'tensor<5x3x%s>' % et,
                               ['%%0 = tosa.transpose %%arg0 {perms = array<i32: 1, 0>} : (tensor<3x5x%s>) -> tensor<5x3x%s>' % (et, et),
                                'return %%0 : tensor<5x3x%s>' % et],
                               [((3, 5), et, m)], [((5, 3), et, t)]))
    return cases


def group_reductions():
    """Reductions and a matmul in the narrow float types (issue 15, A)."""
    cases = []
    for et, tol in (('f16', 4e-3), ('bf16', 3e-2), ('f32', 1e-5)):
        m = values((3, 7), et, 31)
        sums = [ROUND[et](sum(m[r * 7:(r + 1) * 7])) for r in range(3)]
        cases.append(tosa_case('reduce_sum_%s_3x7' % et, ['tensor<3x7x%s>' % et], 'tensor<3x1x%s>' % et,
                               ['%%0 = tosa.reduce_sum %%arg0 {axis = 1 : i32} : (tensor<3x7x%s>) -> tensor<3x1x%s>' % (et, et),
                                'return %%0 : tensor<3x1x%s>' % et],
                               [((3, 7), et, m)], [((3, 1), et, sums)], tol))
        a = values((3, 5), et, 32)
        b = values((5, 6), et, 33)
        c = [ROUND[et](sum(a[i * 5 + k] * b[k * 6 + j] for k in range(5))) for i in range(3) for j in range(6)]
        cases.append(Case('matmul_%s_3x5x6' % et, '''func.func @matmul_%s_3x5x6(%%a: tensor<3x5x%s>, %%b: tensor<5x6x%s>) -> tensor<3x6x%s> {
  %%z = arith.constant 0.0 : %s
  %%e = tensor.empty() : tensor<3x6x%s>
  %%f = linalg.fill ins(%%z : %s) outs(%%e : tensor<3x6x%s>) -> tensor<3x6x%s>
  %%r = linalg.matmul ins(%%a, %%b : tensor<3x5x%s>, tensor<5x6x%s>) outs(%%f : tensor<3x6x%s>) -> tensor<3x6x%s>
  return %%r : tensor<3x6x%s>
}''' % ((et,) * 14), [((3, 5), et, a), ((5, 6), et, b)], [((3, 6), et, c)], tol))
    # Full reductions: no parallel dimension left (issue 15: 3).
    for et, tol in (('f32', 1e-5), ('i32', 0), ('f16', 4e-3)):
        v = values((13,), et, 34)
        total = ROUND[et](sum(v))
        cases.append(tosa_case('reduce_sum_all_%s_13' % et, ['tensor<13x%s>' % et], 'tensor<1x%s>' % et,
                               ['%%0 = tosa.reduce_sum %%arg0 {axis = 0 : i32} : (tensor<13x%s>) -> tensor<1x%s>' % (et, et),
                                'return %%0 : tensor<1x%s>' % et],
                               [((13,), et, v)], [((1,), et, [total])], tol or None))
    m = values((3, 4), 'f32', 35)
    cases.append(tosa_case('reduce_max_all_f32_3x4', ['tensor<3x4xf32>'], 'tensor<1x1xf32>',
                           ['%0 = tosa.reduce_max %arg0 {axis = 0 : i32} : (tensor<3x4xf32>) -> tensor<1x4xf32>',
                            '%1 = tosa.reduce_max %0 {axis = 1 : i32} : (tensor<1x4xf32>) -> tensor<1x1xf32>',
                            'return %1 : tensor<1x1xf32>'],
                           [((3, 4), 'f32', m)], [((1, 1), 'f32', [max(m)])]))
    a = values((7,), 'f32', 36)
    b = values((7,), 'f32', 37)
    cases.append(Case('dot_f32_7', """func.func @dot_f32_7(%a: tensor<7xf32>, %b: tensor<7xf32>) -> tensor<f32> {
  %z = arith.constant 0.0 : f32
  %e = tensor.empty() : tensor<f32>
  %f = linalg.fill ins(%z : f32) outs(%e : tensor<f32>) -> tensor<f32>
  %r = linalg.dot ins(%a, %b : tensor<7xf32>, tensor<7xf32>) outs(%f : tensor<f32>) -> tensor<f32>
  return %r : tensor<f32>
}""", [((7,), 'f32', a), ((7,), 'f32', b)], [((), 'f32', [f32(sum(x * y for x, y in zip(a, b)))])]))
    return cases


def group_math():
    """math and arith functions on f32 and f16, elementwise on tensors (issue 15: 5, 8, 11)."""
    cases = []

    def pos(n, seed):
        return [0.25 + abs(v) for v in values((n,), 'f32', seed)]

    unary = [
        ('exp', math.exp, None), ('exp2', lambda x: 2.0 ** x, None), ('expm1', math.expm1, None),
        ('log', math.log, 'pos'), ('log2', math.log2, 'pos'), ('log1p', math.log1p, 'pos'),
        ('sqrt', math.sqrt, 'pos'), ('rsqrt', lambda x: 1 / math.sqrt(x), 'pos'),
        ('tanh', math.tanh, None), ('sin', math.sin, None), ('cos', math.cos, None),
        ('atan', math.atan, None), ('erf', math.erf, None), ('floor', math.floor, None),
        ('ceil', math.ceil, None), ('absf', abs, None),
        ('cbrt', lambda x: math.copysign(abs(x) ** (1 / 3), x), None),
        ('sinh', math.sinh, None), ('cosh', math.cosh, None), ('asin', math.asin, 'unit'),
        ('acos', math.acos, 'unit'), ('roundeven', lambda x: float(round(x)), None),
        ('erfc', math.erfc, None), ('log10', math.log10, 'pos'), ('tan', math.tan, None),
        ('trunc', lambda x: float(math.trunc(x)), None),
    ]
    unary_body = """func.func @math_%s_f32(%%x: tensor<%dxf32>) -> tensor<%dxf32> {
  %%0 = math.%s %%x : tensor<%dxf32>
  return %%0 : tensor<%dxf32>
}"""
    for name, ref, domain in unary:
        n = 7
        if domain is None:
            xs = values((n,), 'f32', 41)
        elif domain == 'unit':
            xs = [v / 4.5 for v in values((n,), 'f32', 42)]
        else:
            xs = pos(n, 43)
        xs = [f32(x) for x in xs]
        cases.append(Case('math_%s_f32' % name, unary_body % (name, n, n, name, n, n),
                          [((n,), 'f32', xs)], [((n,), 'f32', [f32(ref(x)) for x in xs])], tol=2e-5))
    # Wide arguments: range reduction of sin and cos, floor and ceil past 2^23.
    wide = [f32(v) for v in (0.1, -0.7, 3.3, -12.9, 100.25, -1000.125, 12345.678, 31415.9265)]
    big = [f32(v) for v in (0.5, -0.5, 2.999999, -2.000001, 8388607.5, -8388607.5, 16777216.0, -1e9,
                            1e30, math.inf, -math.inf, 0.0)]
    for name, ref, xs, tol in (('sin', math.sin, wide, 2e-5), ('cos', math.cos, wide, 2e-5),
                               ('floor', math.floor, big, 0), ('ceil', math.ceil, big, 0)):
        n = len(xs)
        exact = [f32(ref(x)) if math.isfinite(x) else x for x in xs]
        cases.append(Case('math_%s_wide_f32' % name, unary_body.replace('_f32(', '_wide_f32(', 1) % (name, n, n, name, n, n),
                          [((n,), 'f32', xs)], [((n,), 'f32', exact)], tol=tol or 1e-12))
    # Binary math and arith on whole tensors.
    a = values((5,), 'f32', 44)
    b = pos(5, 45)
    binary_body = """func.func @tensor_%s_f32(%%x: tensor<5xf32>, %%y: tensor<5xf32>) -> tensor<5xf32> {
  %%0 = %s %%x, %%y : tensor<5xf32>
  return %%0 : tensor<5xf32>
}"""
    for name, op, ref in (('powf', 'math.powf', lambda x, y: x ** y),
                          ('atan2', 'math.atan2', math.atan2),
                          ('addf', 'arith.addf', lambda x, y: x + y),
                          ('maximumf', 'arith.maximumf', max)):
        xs = [abs(v) + 0.5 for v in a] if name == 'powf' else a
        cases.append(Case('tensor_%s_f32' % name, binary_body % (name, op),
                          [((5,), 'f32', xs), ((5,), 'f32', b)],
                          [((5,), 'f32', [f32(ref(x, y)) for x, y in zip(xs, b)])], tol=2e-5))
    # remf is exact (C's fmod): huge quotients, subnormals, signs, the special cases.
    rx = [f32(v) for v in (5.5, -5.5, 1e30, 3.0, 7.25, 1e-40, 16777216.0, -0.0, math.inf, 2.0, 1e38, 0.1)]
    ry = [f32(v) for v in (2.0, 2.0, 3.3, 1e-30, -0.5, 3e-41, 3.0, 1.0, 1.0, 0.0, 1e-38, math.inf)]

    def fmod(x, y):
        return math.nan if y == 0 or math.isinf(x) else math.fmod(x, y)

    n = len(rx)
    cases.append(Case('tensor_remf_f32', binary_body.replace('5x', '%dx' % n) % ('remf', 'arith.remf'),
                      [((n,), 'f32', rx), ((n,), 'f32', ry)], [((n,), 'f32', [f32(fmod(x, y)) for x, y in zip(rx, ry)])],
                      tol=1e-30))
    # In f16: computed in f32 where the device has no f16 arithmetic.
    xs = values((5,), 'f16', 46)
    f16_body = """func.func @math_%s_f16(%%x: tensor<5xf16>) -> tensor<5xf16> {
  %%0 = math.%s %%x : tensor<5xf16>
  return %%0 : tensor<5xf16>
}"""
    # erf, erfc and cbrt: no f16 instruction anywhere (kiln computes them in f32).
    for name, ref in (('exp', math.exp), ('tanh', math.tanh), ('sqrt', math.sqrt), ('floor', math.floor),
                      ('ceil', math.ceil), ('sin', math.sin), ('cos', math.cos), ('erf', math.erf),
                      ('erfc', math.erfc), ('cbrt', math.cbrt)):
        vals = [abs(v) for v in xs] if name == 'sqrt' else xs
        cases.append(Case('math_%s_f16' % name, f16_body % (name, name), [((5,), 'f16', vals)],
                          [((5,), 'f16', [f16(ref(v)) for v in vals])], tol=2e-3))
    # Binary in f16: atan2, and remf exact (NVPTX's f16 frem is its f32 one, wrong
    # past quotients of 2^24: 60000 / 0.0001 is 6e8).
    hx = [f16(v) for v in (60000.0, -5.5, 7.25, 3.0, -0.0)]
    hy = [f16(v) for v in (0.0001, 2.0, -0.5, 0.1, 1.0)]
    for name, op, ref, tol in (('atan2', 'math.atan2', math.atan2, 2e-3),
                               ('remf', 'arith.remf', math.fmod, 1e-30)):
        cases.append(Case('tensor_%s_f16' % name, binary_body.replace('f32', 'f16') % (name, op),
                          [((5,), 'f16', hx), ((5,), 'f16', hy)],
                          [((5,), 'f16', [f16(ref(x, y)) for x, y in zip(hx, hy)])], tol=tol))
    # TOSA's activation functions.
    xs = values((6,), 'f32', 47)
    cases.append(tosa_case('tosa_sigmoid_f32', ['tensor<6xf32>'], 'tensor<6xf32>',
                           ['%0 = tosa.sigmoid %arg0 : (tensor<6xf32>) -> tensor<6xf32>',
                            'return %0 : tensor<6xf32>'],
                           [((6,), 'f32', xs)],
                           [((6,), 'f32', [f32(1 / (1 + math.exp(-x))) for x in xs])], 2e-5))
    cases.append(tosa_case('tosa_erf_f32', ['tensor<6xf32>'], 'tensor<6xf32>',
                           ['%0 = tosa.erf %arg0 : (tensor<6xf32>) -> tensor<6xf32>',
                            'return %0 : tensor<6xf32>'],
                           [((6,), 'f32', xs)], [((6,), 'f32', [f32(math.erf(x)) for x in xs])], 2e-5))
    # Bit counting (CUDA's and SPIR-V's conversions had none of these).
    ints = [0, 1, 2, 255, 4096, -1, 65535]
    cases.append(Case('math_ctpop_i32', """func.func @math_ctpop_i32(%x: tensor<7xi32>) -> tensor<7xi32> {
  %0 = math.ctpop %x : tensor<7xi32>
  return %0 : tensor<7xi32>
}""", [((7,), 'i32', ints)], [((7,), 'i32', [bin(v & 0xffffffff).count('1') for v in ints])]))
    cases.append(Case('math_cttz_i32', """func.func @math_cttz_i32(%x: tensor<7xi32>) -> tensor<7xi32> {
  %0 = math.cttz %x : tensor<7xi32>
  return %0 : tensor<7xi32>
}""", [((7,), 'i32', ints)],
                      [((7,), 'i32', [32 if v & 0xffffffff == 0 else ((v & -v) & 0xffffffff).bit_length() - 1 for v in ints])]))
    cases.append(Case('math_ctlz_i32', """func.func @math_ctlz_i32(%x: tensor<7xi32>) -> tensor<7xi32> {
  %0 = math.ctlz %x : tensor<7xi32>
  return %0 : tensor<7xi32>
}""", [((7,), 'i32', ints)], [((7,), 'i32', [32 - (v & 0xffffffff).bit_length() for v in ints])]))
    # Float to an integer power: negative bases (upstream's powf(x, n) gave NaN
    # on the CPUs and SPIR-V), negative exponents, an i64 exponent past i32.
    cases.append(fpowi_case('f32', 'i32', f32, 2e-6))
    cases.append(fpowi_case('f32', 'i64', f32, 2e-6))
    cases.append(fpowi_case('f16', 'i32', f16, 2e-3))
    return cases


def fpowi_case(et, it, rnd, tol):
    base = [2.0, -1.5, 0.5, -1.0, 3.0, -2.0, 1.25, -0.75, 0.0]
    expo = [3, 2, -2, -7, -3, 11, 20, -5, 4]
    if it == 'i64':
        expo[3] = 5000000001  # odd: (-1)^n is -1
    n = len(base)
    name = 'math_fpowi_%s_%s' % (et, it)
    return Case(name, """func.func @%s(%%x: tensor<%dx%s>, %%n: tensor<%dx%s>) -> tensor<%dx%s> {
  %%0 = math.fpowi %%x, %%n : tensor<%dx%s>, tensor<%dx%s>
  return %%0 : tensor<%dx%s>
}""" % (name, n, et, n, it, n, et, n, et, n, it, n, et), [((n,), et, [rnd(b) for b in base]), ((n,), it, expo)],
                [((n,), et, [rnd(float(b) ** e) for b, e in zip(base, expo)])], tol)


def group_no_dispatch():
    """Functions with no kernel: constants, inputs and views of them (issue 15: 1, 2)."""
    cases = []
    cases.append(Case('const_f32', """func.func @const_f32() -> tensor<2x3xf32> {
  %c = arith.constant dense<[[1.5, 2.0, -3.0], [4.0, 5.25, 6.0]]> : tensor<2x3xf32>
  return %c : tensor<2x3xf32>
}""", [], [((2, 3), 'f32', [1.5, 2.0, -3.0, 4.0, 5.25, 6.0])]))
    cases.append(Case('const_splat_i8', """func.func @const_splat_i8() -> tensor<5xi8> {
  %c = arith.constant dense<-7> : tensor<5xi8>
  return %c : tensor<5xi8>
}""", [], [((5,), 'i8', [-7] * 5)]))
    cases.append(Case('const_i1', """func.func @const_i1() -> tensor<6xi1> {
  %c = arith.constant dense<[true, false, true, true, false, true]> : tensor<6xi1>
  return %c : tensor<6xi1>
}""", [], [((6,), 'i1', [1, 0, 1, 1, 0, 1])]))
    cases.append(Case('const_f16', """func.func @const_f16() -> tensor<3xf16> {
  %c = arith.constant dense<[0.5, -2.0, 65504.0]> : tensor<3xf16>
  return %c : tensor<3xf16>
}""", [], [((3,), 'f16', [0.5, -2.0, 65504.0])]))
    a = values((3,), 'i8', 51)
    cases.append(Case('identity_i8', """func.func @identity_i8(%a: tensor<3xi8>) -> tensor<3xi8> {
  return %a : tensor<3xi8>
}""", [((3,), 'i8', a)], [((3,), 'i8', a)]))
    m = values((2, 3), 'f32', 52)
    cases.append(Case('twice_f32', """func.func @twice_f32(%a: tensor<2x3xf32>) -> (tensor<2x3xf32>, tensor<2x3xf32>) {
  return %a, %a : tensor<2x3xf32>, tensor<2x3xf32>
}""", [((2, 3), 'f32', m)], [((2, 3), 'f32', m), ((2, 3), 'f32', m)]))
    cases.append(Case('reshape_f32', """func.func @reshape_f32(%a: tensor<2x3xf32>) -> tensor<3x2xf32> {
  %s = tosa.const_shape {values = dense<[3, 2]> : tensor<2xindex>} : () -> !tosa.shape<2>
  %r = tosa.reshape %a, %s : (tensor<2x3xf32>, !tosa.shape<2>) -> tensor<3x2xf32>
  return %r : tensor<3x2xf32>
}""", [((2, 3), 'f32', m)], [((3, 2), 'f32', m)]))
    cases.append(Case('expand_shape_f16', """func.func @expand_shape_f16(%a: tensor<6xf16>) -> tensor<1x2x3xf16> {
  %r = tensor.expand_shape %a [[0, 1, 2]] output_shape [1, 2, 3] : tensor<6xf16> into tensor<1x2x3xf16>
  return %r : tensor<1x2x3xf16>
}""", [((6,), 'f16', values((6,), 'f16', 53))], [((1, 2, 3), 'f16', values((6,), 'f16', 53))]))
    rows = values((4, 3), 'f32', 54)
    cases.append(Case('slice_rows_f32', """func.func @slice_rows_f32(%a: tensor<4x3xf32>) -> tensor<2x3xf32> {
  %r = tensor.extract_slice %a[1, 0] [2, 3] [1, 1] : tensor<4x3xf32> to tensor<2x3xf32>
  return %r : tensor<2x3xf32>
}""", [((4, 3), 'f32', rows)], [((2, 3), 'f32', rows[3:9])]))
    cases.append(Case('slice_const_f32', """func.func @slice_const_f32() -> tensor<2xf32> {
  %c = arith.constant dense<[1.0, 2.0, 3.0, 4.0]> : tensor<4xf32>
  %r = tensor.extract_slice %c[2] [2] [1] : tensor<4xf32> to tensor<2xf32>
  return %r : tensor<2xf32>
}""", [], [((2,), 'f32', [3.0, 4.0])]))
    # A linalg outs that is a function argument (the clone on the host).
    v = values((3,), 'f32', 55)
    mat = values((2, 3), 'f32', 56)
    acc = values((2,), 'f32', 57)
    cases.append(Case('matvec_into_arg', """func.func @matvec_into_arg(%m: tensor<2x3xf32>, %v: tensor<3xf32>, %acc: tensor<2xf32>) -> tensor<2xf32> {
  %r = linalg.matvec ins(%m, %v : tensor<2x3xf32>, tensor<3xf32>) outs(%acc : tensor<2xf32>) -> tensor<2xf32>
  return %r : tensor<2xf32>
}""", [((2, 3), 'f32', mat), ((3,), 'f32', v), ((2,), 'f32', acc)],
        [((2,), 'f32', [f32(acc[i] + sum(mat[i * 3 + k] * v[k] for k in range(3))) for i in range(2)])]))
    dst = values((5,), 'f32', 58)
    src = values((2,), 'f32', 59)
    cases.append(Case('insert_slice_into_arg', """func.func @insert_slice_into_arg(%d: tensor<5xf32>, %s: tensor<2xf32>) -> tensor<5xf32> {
  %r = tensor.insert_slice %s into %d[1] [2] [1] : tensor<2xf32> into tensor<5xf32>
  return %r : tensor<5xf32>
}""", [((5,), 'f32', dst), ((2,), 'f32', src)], [((5,), 'f32', dst[:1] + src + dst[3:])]))
    return cases


def apply_scale(value, multiplier, shift, double_round):
    """TOSA's apply_scale_32, in Python integers (exact)."""
    rnd = 1 << (shift - 1)
    if double_round and shift > 31:
        rnd += (1 << 30) if value >= 0 else -(1 << 30)
    return (value * multiplier + rnd) >> shift


def group_quantized():
    """int8 quantization: tosa.rescale and an int8 conv with requantization (issue 15: 7)."""
    cases = []
    params = [('i8', 'i8', 1073741824, 31, 3, -2, False),
              ('i32', 'i8', 1518500250, 38, 0, 5, False),
              ('i32', 'i16', 1395864371, 36, 0, 0, True),
              ('i16', 'i8', 1717986918, 34, 0, 1, False)]
    ranges = {'i8': (-128, 127), 'i16': (-32768, 32767), 'i32': (-(1 << 31), (1 << 31) - 1)}
    for n, (it, ot, mult, shift, izp, ozp, dbl) in enumerate(params):
        lo, hi = {'i8': (-100, 100), 'i16': (-3000, 3000), 'i32': (-200000, 200000)}[it]
        xs = [lo + ((i * 7919 + n * 104729) % (hi - lo + 1)) for i in range(9)]
        olo, ohi = ranges[ot]
        ys = [min(ohi, max(olo, apply_scale(x - izp, mult, shift, dbl) + ozp)) for x in xs]
        zp_t = it if it != 'i32' else 'i32'
        body = """func.func @rescale_%d_%s_%s(%%x: tensor<9x%s>) -> tensor<9x%s> {
  %%m = "tosa.const"() {values = dense<%d> : tensor<1xi32>} : () -> tensor<1xi32>
  %%s = "tosa.const"() {values = dense<%d> : tensor<1xi8>} : () -> tensor<1xi8>
  %%izp = "tosa.const"() {values = dense<%d> : tensor<1x%s>} : () -> tensor<1x%s>
  %%ozp = "tosa.const"() {values = dense<%d> : tensor<1x%s>} : () -> tensor<1x%s>
  %%r = tosa.rescale %%x, %%m, %%s, %%izp, %%ozp {scale32 = true, rounding_mode = %s, per_channel = false, input_unsigned = false, output_unsigned = false} : (tensor<9x%s>, tensor<1xi32>, tensor<1xi8>, tensor<1x%s>, tensor<1x%s>) -> tensor<9x%s>
  return %%r : tensor<9x%s>
}""" % (n, it, ot, it, ot, mult, shift, izp, zp_t, zp_t, ozp, ot, ot,
        'DOUBLE_ROUND' if dbl else 'SINGLE_ROUND', it, zp_t, ot, ot, ot)
        cases.append(Case('rescale_%d_%s_%s' % (n, it, ot), body, [((9,), it, xs)], [((9,), ot, ys)]))
    # A quantized 3x3 conv (int8 in, int32 accumulate), then a per-tensor rescale
    # to int8: the shape of every int8 TFLite/TOSA model's layers.
    H = W = 5
    C, F = 2, 3
    img = [((i * 37) % 23) - 11 for i in range(H * W * C)]
    wts = [((i * 53) % 15) - 7 for i in range(F * 3 * 3 * C)]
    bias = [100, -50, 7]
    izp, wzp = 0, 0
    acc = []
    for y in range(H - 2):
        for x in range(W - 2):
            for f in range(F):
                s_ = bias[f]
                for ky in range(3):
                    for kx in range(3):
                        for c in range(C):
                            s_ += (img[((y + ky) * W + (x + kx)) * C + c] - izp) * (wts[((f * 3 + ky) * 3 + kx) * C + c] - wzp)
                acc.append(s_)
    mult, shift, ozp = 1431655765, 36, -3
    q = [min(127, max(-128, apply_scale(a, mult, shift, False) + ozp)) for a in acc]
    body = """func.func @qconv_int8(%%x: tensor<1x5x5x2xi8>) -> tensor<1x3x3x3xi8> {
  %%w = "tosa.const"() {values = dense<%s> : tensor<3x3x3x2xi8>} : () -> tensor<3x3x3x2xi8>
  %%b = "tosa.const"() {values = dense<%s> : tensor<3xi32>} : () -> tensor<3xi32>
  %%zp = "tosa.const"() {values = dense<0> : tensor<1xi8>} : () -> tensor<1xi8>
  %%c = tosa.conv2d %%x, %%w, %%b, %%zp, %%zp {acc_type = i32, dilation = array<i64: 1, 1>, pad = array<i64: 0, 0, 0, 0>, stride = array<i64: 1, 1>} : (tensor<1x5x5x2xi8>, tensor<3x3x3x2xi8>, tensor<3xi32>, tensor<1xi8>, tensor<1xi8>) -> tensor<1x3x3x3xi32>
  %%m = "tosa.const"() {values = dense<%d> : tensor<1xi32>} : () -> tensor<1xi32>
  %%s = "tosa.const"() {values = dense<%d> : tensor<1xi8>} : () -> tensor<1xi8>
  %%izp = "tosa.const"() {values = dense<0> : tensor<1xi32>} : () -> tensor<1xi32>
  %%ozp = "tosa.const"() {values = dense<%d> : tensor<1xi8>} : () -> tensor<1xi8>
  %%r = tosa.rescale %%c, %%m, %%s, %%izp, %%ozp {scale32 = true, rounding_mode = SINGLE_ROUND, per_channel = false, input_unsigned = false, output_unsigned = false} : (tensor<1x3x3x3xi32>, tensor<1xi32>, tensor<1xi8>, tensor<1xi32>, tensor<1xi8>) -> tensor<1x3x3x3xi8>
  return %%r : tensor<1x3x3x3xi8>
}""" % ('[' + ', '.join(str(v) for v in wts) + ']', '[' + ', '.join(str(v) for v in bias) + ']', mult, shift, ozp)
    # dense<[...]> must be nested by shape: build it properly.
    def nest(vals, shape):
        if len(shape) == 1:
            return '[' + ', '.join(str(v) for v in vals) + ']'
        step = len(vals) // shape[0]
        return '[' + ', '.join(nest(vals[i * step:(i + 1) * step], shape[1:]) for i in range(shape[0])) + ']'
    body = body.replace('[' + ', '.join(str(v) for v in wts) + ']', nest(wts, [3, 3, 3, 2]))
    cases.append(Case('qconv_int8', body, [((1, 5, 5, 2), 'i8', img)], [((1, 3, 3, 3), 'i8', q)]))
    return cases


def shape_const(name, vals):
    return '%%%s = tosa.const_shape {values = dense<[%s]> : tensor<%dxindex>} : () -> !tosa.shape<%d>' % (
        name, ', '.join(str(v) for v in vals), len(vals), len(vals))


def scalar_const(name, et, v):
    return '%%%s = "tosa.const"() {values = dense<%s> : tensor<1x%s>} : () -> tensor<1x%s>' % (name, fmt(v), et, et)


def window_out(h, w, k, stride, pad):
    """The output height and width of a k x k window over h x w, `stride`, pad
    (top, bottom, left, right)."""
    return (h + pad[0] + pad[1] - k) // stride + 1, (w + pad[2] + pad[3] - k) // stride + 1


def window_taps(h, w, k, stride, pad, yy, xx):
    """The taps (ky, kx, iy, ix) of output pixel (yy, xx) that land inside the
    h x w image, in (ky, kx) order: padding contributes nothing."""
    for ky in range(k):
        for kx in range(k):
            iy, ix = stride * yy + ky - pad[0], stride * xx + kx - pad[2]
            if 0 <= iy < h and 0 <= ix < w:
                yield ky, kx, iy, ix


def conv_case(name, n, h, c, f, k, stride, pad, seeds, relu6=False):
    """tosa.conv2d of n square h x h x c images by f square k x k filters (OHWI),
    `stride`, pad (top, bottom, left, right), zero bias, with its reference;
    with `relu6`, a residual input (seeds[2]) added and the sum clamped to [0, 6]
    after it, as a ResNet block ends."""
    oh, ow = window_out(h, h, k, stride, pad)
    x = values((n, h, h, c), 'f32', seeds[0])
    w = values((f, k, k, c), 'f32', seeds[1])
    out = []
    for nn in range(n):
        for yy in range(oh):
            for xx in range(ow):
                for ff in range(f):
                    s_ = 0.0
                    for ky, kx, iy, ix in window_taps(h, h, k, stride, pad, yy, xx):
                        base = ((nn * h + iy) * h + ix) * c
                        s_ += sum(x[base + cc] * w[((ff * k + ky) * k + kx) * c + cc] for cc in range(c))
                    out.append(f32(s_))
    tx, tw, to = 'tensor<%dx%dx%dx%dxf32>' % (n, h, h, c), 'tensor<%dx%dx%dx%dxf32>' % (f, k, k, c), \
        'tensor<%dx%dx%dx%dxf32>' % (n, oh, ow, f)
    args, inputs, act = [tx, tw], [((n, h, h, c), 'f32', x), ((f, k, k, c), 'f32', w)], ['return %%0 : %s' % to]
    if relu6:
        r = values((n, oh, ow, f), 'f32', seeds[2])
        out = [min(max(f32(v + r[i]), 0.0), 6.0) for i, v in enumerate(out)]
        args.append(to)
        inputs.append(((n, oh, ow, f), 'f32', r))
        act = ['%%1 = tosa.add %%0, %%arg2 : (%s, %s) -> %s' % (to, to, to),
               '%%2 = tosa.clamp %%1 {max_val = 6.0 : f32, min_val = 0.0 : f32} : (%s) -> %s' % (to, to),
               'return %%2 : %s' % to]
    return tosa_case(name, args, to,
                     ['%%b = "tosa.const"() {values = dense<0.0> : tensor<%dxf32>} : () -> tensor<%dxf32>' % (f, f),
                      scalar_const('zp', 'f32', 0.0),
                      '%%0 = tosa.conv2d %%arg0, %%arg1, %%b, %%zp, %%zp {acc_type = f32, dilation = array<i64: 1, 1>, '
                      'pad = array<i64: %d, %d, %d, %d>, stride = array<i64: %d, %d>} : (%s, %s, tensor<%dxf32>, '
                      'tensor<1xf32>, tensor<1xf32>) -> %s' % (pad + (stride, stride, tx, tw, f, to))] + act,
                     inputs, [((n, oh, ow, f), 'f32', out)], 0)


def depthwise_case(name, n, h, w, c, k, stride, pad, seeds):
    """tosa.depthwise_conv2d (multiplier 1) of n h x w x c images by a k x k
    filter, `stride`, pad (top, bottom, left, right), zero bias, with its
    reference."""
    oh, ow = window_out(h, w, k, stride, pad)
    x = values((n, h, w, c), 'f32', seeds[0])
    f = values((k, k, c, 1), 'f32', seeds[1])
    out = []
    for nn in range(n):
        for yy in range(oh):
            for xx in range(ow):
                for cc in range(c):
                    s_ = 0.0
                    for ky, kx, iy, ix in window_taps(h, w, k, stride, pad, yy, xx):
                        s_ += x[((nn * h + iy) * w + ix) * c + cc] * f[(ky * k + kx) * c + cc]
                    out.append(f32(s_))
    tx, tf, to = 'tensor<%dx%dx%dx%dxf32>' % (n, h, w, c), 'tensor<%dx%dx%dx1xf32>' % (k, k, c), \
        'tensor<%dx%dx%dx%dxf32>' % (n, oh, ow, c)
    return tosa_case(name, [tx, tf], to,
                     ['%%b = "tosa.const"() {values = dense<0.0> : tensor<%dxf32>} : () -> tensor<%dxf32>' % (c, c),
                      scalar_const('zp', 'f32', 0.0),
                      '%%0 = tosa.depthwise_conv2d %%arg0, %%arg1, %%b, %%zp, %%zp {acc_type = f32, '
                      'dilation = array<i64: 1, 1>, pad = array<i64: %d, %d, %d, %d>, stride = array<i64: %d, %d>} : '
                      '(%s, %s, tensor<%dxf32>, tensor<1xf32>, tensor<1xf32>) -> %s'
                      % (pad + (stride, stride, tx, tf, c, to)),
                      'return %%0 : %s' % to],
                     [((n, h, w, c), 'f32', x), ((k, k, c, 1), 'f32', f)], [((n, oh, ow, c), 'f32', out)], 0)


def group_tosa():
    """TOSA ops one by one, the way TFLite and PyTorch exports use them (issue 15: corpus)."""
    cases = []
    n = 7
    t = lambda et, shape=(n,): ttype(shape, et)

    def unary(op, et, ref, xs, extra='', tol=None, out_et=None, name=None):
        out_et = out_et or et
        nm = name or 'tosa_%s_%s' % (op, et)
        body = ['%%0 = tosa.%s %%arg0%s : (%s) -> %s' % (op, extra, t(et, (len(xs),)), t(out_et, (len(xs),))),
                'return %%0 : %s' % t(out_et, (len(xs),))]
        cases.append(tosa_case(nm, [t(et, (len(xs),))], t(out_et, (len(xs),)), body,
                               [((len(xs),), et, xs)], [((len(xs),), out_et, [ROUND[out_et](ref(x)) for x in xs])], tol))

    def binary(op, et, ref, xs, ys, out_et=None, extra_ops=(), extra_args='', attrs='', name=None):
        out_et = out_et or et
        nm = name or 'tosa_%s_%s' % (op, et)
        ins = ', '.join([t(et, (len(xs),)), t(et, (len(ys),))] + [a[1] for a in extra_ops])
        body = [e[0] for e in extra_ops if e[0]] + [
            '%%0 = tosa.%s %%arg0, %%arg1%s%s : (%s) -> %s' % (op, extra_args, attrs, ins, t(out_et, (len(xs),))),
            'return %%0 : %s' % t(out_et, (len(xs),))]
        cases.append(tosa_case(nm, [t(et, (len(xs),)), t(et, (len(ys),))], t(out_et, (len(xs),)), body,
                               [((len(xs),), et, xs), ((len(ys),), et, ys)],
                               [((len(xs),), out_et, [ROUND[out_et](ref(a, b)) for a, b in zip(xs, ys)])]))

    fx = [f32(v) for v in values((n,), 'f32', 61)]
    fy = [f32(v) for v in values((n,), 'f32', 62)]
    pos = [0.25 + abs(v) for v in fx]
    ix = [int(v) for v in values((n,), 'i32', 63, -40, 40)]
    iy = [int(v) for v in values((n,), 'i32', 64, 1, 9)]
    bx = [int(v) for v in values((n,), 'i1', 65)]
    by = [int(v) for v in values((n,), 'i1', 66)]

    unary('abs', 'f32', abs, fx)
    unary('abs', 'i32', abs, ix)
    unary('reciprocal', 'f32', lambda x: 1 / x, pos, tol=1e-5)
    unary('rsqrt', 'f32', lambda x: 1 / math.sqrt(x), pos, tol=1e-5)
    unary('exp', 'f32', math.exp, fx, tol=2e-5)
    unary('log', 'f32', math.log, pos, tol=2e-5)
    unary('ceil', 'f32', math.ceil, fx)
    unary('floor', 'f32', math.floor, fx)
    unary('sin', 'f32', math.sin, fx, tol=2e-5)
    unary('cos', 'f32', math.cos, fx, tol=2e-5)
    unary('tanh', 'f32', math.tanh, fx, tol=2e-5)
    unary('tanh', 'f16', math.tanh, [f16(v) for v in fx], tol=2e-3)
    unary('clz', 'i32', lambda x: 32 - (x & 0xffffffff).bit_length(), ix)
    unary('bitwise_not', 'i32', lambda x: ~x, ix)
    unary('logical_not', 'i1', lambda x: 1 - x, bx)
    unary('identity', 'f32', lambda x: x, fx)
    unary('clamp', 'f32', lambda x: min(2.0, max(-1.5, x)), fx, extra=' {max_val = 2.0 : f32, min_val = -1.5 : f32}')
    unary('clamp', 'i8', lambda x: min(3, max(-2, x)), [int(v) for v in values((n,), 'i8', 67)],
          extra=' {max_val = 3 : i8, min_val = -2 : i8}')
    unary('cast', 'f32', lambda x: int(round(x)) if abs(x - math.trunc(x)) != 0.5 else 2 * round(x / 2),
          fx, out_et='i32', name='tosa_cast_f32_i32')
    unary('cast', 'i32', float, ix, out_et='f32', name='tosa_cast_i32_f32')
    unary('cast', 'f32', f16, fx, out_et='f16', name='tosa_cast_f32_f16', tol=2e-3)
    unary('cast', 'i32', lambda x: x, ix, out_et='i8', name='tosa_cast_i32_i8')
    unary('cast', 'i1', lambda x: x, bx, out_et='i32', name='tosa_cast_i1_i32')
    unary('cast', 'f32', lambda x: 1 if x != 0 else 0, fx, out_et='i1', name='tosa_cast_f32_i1')
    # negate takes zero points.
    for et, xs in (('f32', fx), ('i8', [int(v) for v in values((n,), 'i8', 68)])):
        zp = 0.0 if et == 'f32' else 0
        cases.append(tosa_case('tosa_negate_%s' % et, [t(et)], t(et),
                               [scalar_const('izp', et, zp), scalar_const('ozp', et, zp),
                                '%%0 = tosa.negate %%arg0, %%izp, %%ozp : (%s, tensor<1x%s>, tensor<1x%s>) -> %s' % (t(et), et, et, t(et)),
                                'return %%0 : %s' % t(et)],
                               [((n,), et, xs)], [((n,), et, [ROUND[et](-x) for x in xs])]))
    binary('add', 'f32', lambda a, b: a + b, fx, fy)
    binary('sub', 'i32', lambda a, b: a - b, ix, iy)
    binary('maximum', 'f32', max, fx, fy)
    binary('minimum', 'i32', min, ix, iy)
    binary('pow', 'f32', lambda a, b: a ** b, pos, fy)
    binary('bitwise_and', 'i32', lambda a, b: a & b, ix, iy)
    binary('bitwise_or', 'i32', lambda a, b: a | b, ix, iy)
    binary('bitwise_xor', 'i32', lambda a, b: a ^ b, ix, iy)
    binary('logical_and', 'i1', lambda a, b: a & b, bx, by)
    binary('logical_or', 'i1', lambda a, b: a | b, bx, by)
    binary('logical_xor', 'i1', lambda a, b: a ^ b, bx, by)
    binary('logical_left_shift', 'i32', lambda a, b: a << b, ix, iy)
    binary('logical_right_shift', 'i32', lambda a, b: (a & 0xffffffff) >> b, ix, iy)
    binary('arithmetic_right_shift', 'i32', lambda a, b: a >> b, ix, iy, attrs=' {round = false}')
    binary('intdiv', 'i32', lambda a, b: int(a / b), ix, iy)
    binary('equal', 'f32', lambda a, b: a == b, fx, fx[:3] + fy[3:], out_et='i1')
    binary('greater', 'i32', lambda a, b: a > b, ix, iy, out_et='i1')
    binary('greater_equal', 'f32', lambda a, b: a >= b, fx, fy, out_et='i1')
    binary('mul', 'f32', lambda a, b: a * b, fx, fy, extra_ops=[(scalar_const('shift', 'i8', 0), 'tensor<1xi8>')],
           extra_args=', %shift')
    binary('mul', 'i32', lambda a, b: (a * b + 2) >> 2, ix, iy,
           extra_ops=[(scalar_const('shift', 'i8', 2), 'tensor<1xi8>')], extra_args=', %shift', name='tosa_mul_i32_shift2')
    # select, reductions of booleans, argmax
    cases.append(tosa_case('tosa_select_f32', ['tensor<7xi1>', t('f32'), t('f32')], t('f32'),
                           ['%0 = tosa.select %arg0, %arg1, %arg2 : (tensor<7xi1>, tensor<7xf32>, tensor<7xf32>) -> tensor<7xf32>',
                            'return %0 : tensor<7xf32>'],
                           [((n,), 'i1', bx), ((n,), 'f32', fx), ((n,), 'f32', fy)],
                           [((n,), 'f32', [a if c else b for c, a, b in zip(bx, fx, fy)])]))
    m = values((3, 4), 'f32', 69)
    bm = values((3, 4), 'i1', 70)
    for op, et, src, ref in (('reduce_all', 'i1', bm, lambda r: int(all(r))), ('reduce_any', 'i1', bm, lambda r: int(any(r))),
                             ('reduce_min', 'f32', m, min), ('reduce_product', 'f32', m, lambda r: math.prod(r))):
        rows = [src[i * 4:(i + 1) * 4] for i in range(3)]
        cases.append(tosa_case('tosa_%s_%s' % (op, et), ['tensor<3x4x%s>' % et], 'tensor<3x1x%s>' % et,
                               ['%%0 = tosa.%s %%arg0 {axis = 1 : i32} : (tensor<3x4x%s>) -> tensor<3x1x%s>' % (op, et, et),
                                'return %%0 : tensor<3x1x%s>' % et],
                               [((3, 4), et, src)], [((3, 1), et, [ROUND[et](ref(r)) for r in rows])], 1e-5 if et == 'f32' else None))
    rows = [m[i * 4:(i + 1) * 4] for i in range(3)]
    cases.append(tosa_case('tosa_argmax_f32', ['tensor<3x4xf32>'], 'tensor<3xi32>',
                           ['%0 = tosa.argmax %arg0 {axis = 1 : i32} : (tensor<3x4xf32>) -> tensor<3xi32>',
                            'return %0 : tensor<3xi32>'],
                           [((3, 4), 'f32', m)], [((3,), 'i32', [r.index(max(r)) for r in rows])]))
    # data movement
    img = values((2, 3), 'f32', 71)
    cases.append(tosa_case('tosa_pad_f32', ['tensor<2x3xf32>'], 'tensor<3x6xf32>',
                           [shape_const('p', [1, 0, 2, 1]), scalar_const('c', 'f32', 0.5),
                            '%0 = tosa.pad %arg0, %p, %c : (tensor<2x3xf32>, !tosa.shape<4>, tensor<1xf32>) -> tensor<3x6xf32>',
                            'return %0 : tensor<3x6xf32>'],
                           [((2, 3), 'f32', img)],
                           [((3, 6), 'f32', [0.5] * 6 + [0.5, 0.5] + img[0:3] + [0.5, 0.5, 0.5] + img[3:6] + [0.5])]))
    big = values((4, 5), 'i8', 72)
    cases.append(tosa_case('tosa_slice_i8', ['tensor<4x5xi8>'], 'tensor<2x3xi8>',
                           [shape_const('start', [1, 2]), shape_const('size', [2, 3]),
                            '%0 = tosa.slice %arg0, %start, %size : (tensor<4x5xi8>, !tosa.shape<2>, !tosa.shape<2>) -> tensor<2x3xi8>',
                            'return %0 : tensor<2x3xi8>'],
                           [((4, 5), 'i8', big)], [((2, 3), 'i8', big[7:10] + big[12:15])]))
    row = values((1, 3), 'f16', 73)
    cases.append(tosa_case('tosa_tile_f16', ['tensor<1x3xf16>'], 'tensor<2x6xf16>',
                           [shape_const('m', [2, 2]),
                            '%0 = tosa.tile %arg0, %m : (tensor<1x3xf16>, !tosa.shape<2>) -> tensor<2x6xf16>',
                            'return %0 : tensor<2x6xf16>'],
                           [((1, 3), 'f16', row)], [((2, 6), 'f16', row * 4)]))
    cases.append(tosa_case('tosa_reverse_i32', ['tensor<4x5xi32>'], 'tensor<4x5xi32>',
                           ['%0 = tosa.reverse %arg0 {axis = 1 : i32} : (tensor<4x5xi32>) -> tensor<4x5xi32>',
                            'return %0 : tensor<4x5xi32>'],
                           [((4, 5), 'i32', big)], [((4, 5), 'i32', sum([big[r * 5:(r + 1) * 5][::-1] for r in range(4)], []))]))
    vals = values((1, 5, 2), 'f32', 74)
    idx = [4, 0, 2]
    cases.append(tosa_case('tosa_gather_f32', ['tensor<1x5x2xf32>', 'tensor<1x3xi32>'], 'tensor<1x3x2xf32>',
                           ['%0 = tosa.gather %arg0, %arg1 : (tensor<1x5x2xf32>, tensor<1x3xi32>) -> tensor<1x3x2xf32>',
                            'return %0 : tensor<1x3x2xf32>'],
                           [((1, 5, 2), 'f32', vals), ((1, 3), 'i32', idx)],
                           [((1, 3, 2), 'f32', sum([vals[i * 2:i * 2 + 2] for i in idx], []))]))
    table = [((i * 37) % 256) - 128 for i in range(256)]
    tx = [int(v) for v in values((n,), 'i8', 75)]
    cases.append(tosa_case('tosa_table_i8', ['tensor<7xi8>'], 'tensor<7xi8>',
                           ['%%t = "tosa.const"() {values = dense<[%s]> : tensor<256xi8>} : () -> tensor<256xi8>' % ', '.join(str(v) for v in table),
                            '%0 = tosa.table %arg0, %t : (tensor<7xi8>, tensor<256xi8>) -> tensor<7xi8>',
                            'return %0 : tensor<7xi8>'],
                           [((n,), 'i8', tx)], [((n,), 'i8', [table[x + 128] for x in tx])]))
    # pooling and convolutions in f32
    im = values((1, 4, 4, 1), 'f32', 76)
    ap = [f32(sum(im[(2 * y + dy) * 4 + 2 * x + dx] for dy in (0, 1) for dx in (0, 1)) / 4) for y in (0, 1) for x in (0, 1)]
    cases.append(tosa_case('tosa_avg_pool2d_f32', ['tensor<1x4x4x1xf32>'], 'tensor<1x2x2x1xf32>',
                           [scalar_const('zp', 'f32', 0.0),
                            '%0 = tosa.avg_pool2d %arg0, %zp, %zp {acc_type = f32, kernel = array<i64: 2, 2>, pad = array<i64: 0, 0, 0, 0>, stride = array<i64: 2, 2>} : (tensor<1x4x4x1xf32>, tensor<1xf32>, tensor<1xf32>) -> tensor<1x2x2x1xf32>',
                            'return %0 : tensor<1x2x2x1xf32>'],
                           [((1, 4, 4, 1), 'f32', im)], [((1, 2, 2, 1), 'f32', ap)], 1e-5))
    # depthwise 3x3, 2 channels, multiplier 1, pad 1
    H = W = 4
    C = 2
    x = values((1, H, W, C), 'f32', 77)
    w = values((3, 3, C, 1), 'f32', 78)
    out = []
    for yy in range(H):
        for xx in range(W):
            for c in range(C):
                s_ = 0.0
                for ky in range(3):
                    for kx in range(3):
                        iy_, ix_ = yy + ky - 1, xx + kx - 1
                        if 0 <= iy_ < H and 0 <= ix_ < W:
                            s_ += x[(iy_ * W + ix_) * C + c] * w[(ky * 3 + kx) * C + c]
                out.append(f32(s_))
    cases.append(tosa_case('tosa_depthwise_conv2d_f32', ['tensor<1x4x4x2xf32>', 'tensor<3x3x2x1xf32>'], 'tensor<1x4x4x2xf32>',
                           ['%b = "tosa.const"() {values = dense<0.0> : tensor<2xf32>} : () -> tensor<2xf32>',
                            scalar_const('zp', 'f32', 0.0),
                            '%0 = tosa.depthwise_conv2d %arg0, %arg1, %b, %zp, %zp {acc_type = f32, dilation = array<i64: 1, 1>, pad = array<i64: 1, 1, 1, 1>, stride = array<i64: 1, 1>} : (tensor<1x4x4x2xf32>, tensor<3x3x2x1xf32>, tensor<2xf32>, tensor<1xf32>, tensor<1xf32>) -> tensor<1x4x4x2xf32>',
                            'return %0 : tensor<1x4x4x2xf32>'],
                           [((1, H, W, C), 'f32', x), ((3, 3, C, 1), 'f32', w)], [((1, H, W, C), 'f32', out)], 1e-5))
    # conv2d, stride 2, 3 input 2 output channels, bias
    x = values((1, 5, 5, 3), 'f32', 79)
    w = values((2, 3, 3, 3), 'f32', 80)
    bias = [0.5, -1.0]
    out = []
    for yy in range(2):
        for xx in range(2):
            for f in range(2):
                s_ = bias[f]
                for ky in range(3):
                    for kx in range(3):
                        for c in range(3):
                            s_ += x[((2 * yy + ky) * 5 + 2 * xx + kx) * 3 + c] * w[((f * 3 + ky) * 3 + kx) * 3 + c]
                out.append(f32(s_))
    cases.append(tosa_case('tosa_conv2d_stride2_f32', ['tensor<1x5x5x3xf32>', 'tensor<2x3x3x3xf32>'], 'tensor<1x2x2x2xf32>',
                           ['%b = "tosa.const"() {values = dense<[0.5, -1.0]> : tensor<2xf32>} : () -> tensor<2xf32>',
                            scalar_const('zp', 'f32', 0.0),
                            '%0 = tosa.conv2d %arg0, %arg1, %b, %zp, %zp {acc_type = f32, dilation = array<i64: 1, 1>, pad = array<i64: 0, 0, 0, 0>, stride = array<i64: 2, 2>} : (tensor<1x5x5x3xf32>, tensor<2x3x3x3xf32>, tensor<2xf32>, tensor<1xf32>, tensor<1xf32>) -> tensor<1x2x2x2xf32>',
                            'return %0 : tensor<1x2x2x2xf32>'],
                           [((1, 5, 5, 3), 'f32', x), ((2, 3, 3, 3), 'f32', w)], [((1, 2, 2, 2), 'f32', out)], 1e-5))
    # batched matmul (TOSA's is always 3-D) in f16 with f32 accumulation
    a = values((2, 2, 3), 'f16', 81)
    b = values((2, 3, 2), 'f16', 82)
    c = []
    for bb in range(2):
        for i in range(2):
            for j in range(2):
                c.append(f32(sum(a[bb * 6 + i * 3 + k] * b[bb * 6 + k * 2 + j] for k in range(3))))
    cases.append(tosa_case('tosa_matmul_f16_f32acc', ['tensor<2x2x3xf16>', 'tensor<2x3x2xf16>'], 'tensor<2x2x2xf32>',
                           [scalar_const('zp', 'f16', 0.0),
                            '%0 = tosa.matmul %arg0, %arg1, %zp, %zp : (tensor<2x2x3xf16>, tensor<2x3x2xf16>, tensor<1xf16>, tensor<1xf16>) -> tensor<2x2x2xf32>',
                            'return %0 : tensor<2x2x2xf32>'],
                           [((2, 2, 3), 'f16', a), ((2, 3, 2), 'f16', b)], [((2, 2, 2), 'f32', c)], 1e-5))
    # Matmuls whose shapes GPU targets tile their own way (compiler/gpu_gemm.c: 64x64
    # output tiles, k in slices of 16): batched f32, f16 and bf16 widened to f32
    # (bf16 read as bits, pairs in 32-bit words), and a 2-D linalg.matmul. Small quarters: every sum is exact in f32.
    def mm_ref(a, b, batch, m, k, n):
        return [f32(sum(a[(bb * m + i) * k + kk] * b[(bb * k + kk) * n + j] for kk in range(k)))
                for bb in range(batch) for i in range(m) for j in range(n)]
    for name, et, (batch, m, k, n) in (('tosa_matmul_tiled_f32', 'f32', (2, 64, 32, 64)),
                                       ('tosa_matmul_tiled_f16_f32acc', 'f16', (1, 64, 16, 128)),
                                       ('tosa_matmul_tiled_bf16_f32acc', 'bf16', (2, 64, 32, 64))):
        a = values((batch, m, k), et, 91)
        b = values((batch, k, n), et, 92)
        ta, tb, tr = 'tensor<%dx%dx%dx%s>' % (batch, m, k, et), 'tensor<%dx%dx%dx%s>' % (batch, k, n, et), \
            'tensor<%dx%dx%dxf32>' % (batch, m, n)
        cases.append(tosa_case(name, [ta, tb], tr,
                               [scalar_const('zp', et, 0.0),
                                '%%0 = tosa.matmul %%arg0, %%arg1, %%zp, %%zp : (%s, %s, tensor<1x%s>, tensor<1x%s>) -> %s' % (ta, tb, et, et, tr),
                                'return %%0 : %s' % tr],
                               [((batch, m, k), et, a), ((batch, k, n), et, b)],
                               [((batch, m, n), 'f32', mm_ref(a, b, batch, m, k, n))], 0))
    # A matmul's bias and ReLU, which GPU targets fuse into the tiled matmul
    # (compiler/gpu_epilogue.c: the epilogue runs on the accumulators, its
    # dispatch is dropped): batched, the bias a broadcast row; and the same with
    # the matmul's own output returned as well, so C is still stored.
    a = values((2, 64, 32), 'f32', 93)
    b = values((2, 32, 64), 'f32', 94)
    bias = values((1, 1, 64), 'f32', 99)
    mm = mm_ref(a, b, 2, 64, 32, 64)
    relu = [max(0.0, f32(v + bias[i % 64])) for i, v in enumerate(mm)]
    ta, tb, tr = 'tensor<2x64x32xf32>', 'tensor<2x32x64xf32>', 'tensor<2x64x64xf32>'
    for name, both in (('tosa_matmul_bias_relu_fused', False), ('tosa_matmul_bias_relu_keep_c', True)):
        cases.append(tosa_case(
            name, [ta, tb, 'tensor<1x1x64xf32>'], '(%s, %s)' % (tr, tr) if both else tr,
            [scalar_const('zp', 'f32', 0.0),
             '%%0 = tosa.matmul %%arg0, %%arg1, %%zp, %%zp : (%s, %s, tensor<1xf32>, tensor<1xf32>) -> %s' % (ta, tb, tr),
             '%%1 = tosa.add %%0, %%arg2 : (%s, tensor<1x1x64xf32>) -> %s' % (tr, tr),
             '%%2 = tosa.clamp %%1 {max_val = 3.0e38 : f32, min_val = 0.0 : f32} : (%s) -> %s' % (tr, tr),
             ('return %%0, %%2 : %s, %s' % (tr, tr)) if both else 'return %%2 : %s' % tr],
            [((2, 64, 32), 'f32', a), ((2, 32, 64), 'f32', b), ((1, 1, 64), 'f32', bias)],
            ([((2, 64, 64), 'f32', mm)] if both else []) + [((2, 64, 64), 'f32', relu)], 0))
    # An f16 model's dense layer: the matmul accumulates in f32, then the cast to
    # f16, the f16 bias and ReLU, which GPU targets with 16-bit storage fuse into
    # the tiled matmul (D stored as f16 in C's vectors); and the same in bf16
    # (its bits stored). Each step rounds as TOSA says: C exact in f32, then one
    # rounding per op.
    for name, et in (('tosa_matmul_f16_cast_bias_relu_fused', 'f16'), ('tosa_matmul_bf16_cast_bias_relu_fused', 'bf16')):
        a = values((2, 64, 32), et, 108)
        b = values((2, 32, 64), et, 109)
        bias = values((1, 1, 64), et, 110)
        mm = mm_ref(a, b, 2, 64, 32, 64)
        rnd = ROUND[et]
        out = [max(0.0, rnd(rnd(v) + bias[i % 64])) for i, v in enumerate(mm)]
        ta, tb, tc_, tr = ('tensor<2x64x32x%s>' % et, 'tensor<2x32x64x%s>' % et, 'tensor<2x64x64xf32>',
                           'tensor<2x64x64x%s>' % et)
        cases.append(tosa_case(
            name, [ta, tb, 'tensor<1x1x64x%s>' % et], tr,
            [scalar_const('zp', et, 0.0),
             '%%0 = tosa.matmul %%arg0, %%arg1, %%zp, %%zp : (%s, %s, tensor<1x%s>, tensor<1x%s>) -> %s' % (ta, tb, et, et, tc_),
             '%%1 = tosa.cast %%0 : (%s) -> %s' % (tc_, tr),
             '%%2 = tosa.add %%1, %%arg2 : (%s, tensor<1x1x64x%s>) -> %s' % (tr, et, tr),
             '%%3 = tosa.clamp %%2 {max_val = 6.0e4 : %s, min_val = 0.0 : %s} : (%s) -> %s' % (et, et, tr, tr),
             'return %%3 : %s' % tr],
            [((2, 64, 32), et, a), ((2, 32, 64), et, b), ((1, 1, 64), et, bias)],
            [((2, 64, 64), et, out)], 0))
    # Convs GPU targets tile as an implicit GEMM (im2col in the loader): a padded
    # 3x3 over one image (64 pixels x 64 filters x 144 taps), two images at stride
    # 2 with padding top and left only (the front half folds the batch into its
    # grid; the GEMM's rows span both images), and the 1x1 form (no kh, kw loops
    # left). Sums of quarter products, exact in f32.
    for name, (n, h, c, k, stride, pad), seeds in (
            ('tosa_conv2d_tiled_f32', (1, 8, 16, 3, 1, (1, 1, 1, 1)), (95, 96)),
            ('tosa_conv2d_batch2_stride2_tiled_f32', (2, 16, 16, 3, 2, (1, 0, 1, 0)), (100, 101)),
            ('tosa_conv2d_1x1_tiled_f32', (1, 8, 32, 1, 1, (0, 0, 0, 0)), (97, 98))):
        cases.append(conv_case(name, n, h, c, 64, k, stride, pad, seeds))
    # The same with a residual added and ReLU6 after them, which GPU targets fuse
    # into the tiled conv (compiler/gpu_epilogue.c: the conv's rows are pixels of
    # the NHWC output, each read of the residual at its image, row and column;
    # two images fold into the epilogue's block x).
    for name, (n, h, c, k, stride, pad), seeds in (
            ('tosa_conv2d_residual_relu6_tiled_f32', (1, 8, 16, 3, 1, (1, 1, 1, 1)), (102, 103, 106)),
            ('tosa_conv2d_batch2_stride2_residual_relu6_tiled_f32', (2, 16, 16, 3, 2, (1, 0, 1, 0)),
             (104, 105, 107))):
        cases.append(conv_case(name, n, h, c, 64, k, stride, pad, seeds, relu6=True))
    # Depthwise convs GPU targets run in 128-bit vectors (compiler/gpu_depthwise.c):
    # strips of 4 output pixels over one channel vector (64 rows give the grid
    # its 64 workgroups), the same at stride 2, two images of two channel
    # vectors, and a 5x5 filter over three channel vectors one pixel per
    # invocation. Sums of quarter products, exact in f32.
    for name, (n, h, w, c, k, stride, pad), seeds in (
            ('tosa_depthwise_conv2d_vec_f32', (1, 64, 8, 4, 3, 1, (1, 1, 1, 1)), (141, 142)),
            ('tosa_depthwise_conv2d_vec_stride2_f32', (1, 129, 17, 4, 3, 2, (0, 0, 0, 0)), (143, 144)),
            ('tosa_depthwise_conv2d_vec_batch2_f32', (2, 32, 8, 8, 3, 1, (1, 1, 1, 1)), (145, 146)),
            ('tosa_depthwise_conv2d_vec_5x5_f32', (1, 8, 8, 12, 5, 1, (2, 2, 2, 2)), (147, 148))):
        cases.append(depthwise_case(name, n, h, w, c, k, stride, pad, seeds))
    # Row reductions long enough that GPU targets run them as workgroup reductions
    # (compiler/gpu_reduce.c: rows of a multiple of 128), and a softmax over them.
    for op, rows, cols, ref in (('reduce_max', 4, 1024, max), ('reduce_sum', 3, 384, lambda xs: f32(sum(xs))),
                                ('reduce_min', 2, 256, min)):
        xv = values((rows, cols), 'f32', 99 + cols)
        want = [ref(xv[r * cols:(r + 1) * cols]) for r in range(rows)]
        cases.append(tosa_case('tosa_%s_rows_%dx%d' % (op, rows, cols), ['tensor<%dx%dxf32>' % (rows, cols)],
                               'tensor<%dx1xf32>' % rows,
                               ['%%0 = tosa.%s %%arg0 {axis = 1 : i32} : (tensor<%dx%dxf32>) -> tensor<%dx1xf32>' % (op, rows, cols, rows),
                                'return %%0 : tensor<%dx1xf32>' % rows],
                               [((rows, cols), 'f32', xv)], [((rows, 1), 'f32', want)], 0))
    xv = values((4, 512), 'f32', 90)
    soft = []
    for r in range(4):
        row = xv[r * 512:(r + 1) * 512]
        mx = max(row)
        ex = [math.exp(v - mx) for v in row]
        tot = sum(ex)
        soft += [f32(e / tot) for e in ex]
    cases.append(tosa_case('tosa_softmax_rows_4x512', ['tensor<4x512xf32>'], 'tensor<4x512xf32>',
                           ['%m = tosa.reduce_max %arg0 {axis = 1 : i32} : (tensor<4x512xf32>) -> tensor<4x1xf32>',
                            '%d = tosa.sub %arg0, %m : (tensor<4x512xf32>, tensor<4x1xf32>) -> tensor<4x512xf32>',
                            '%e = tosa.exp %d : (tensor<4x512xf32>) -> tensor<4x512xf32>',
                            '%s = tosa.reduce_sum %e {axis = 1 : i32} : (tensor<4x512xf32>) -> tensor<4x1xf32>',
                            '%r = tosa.reciprocal %s : (tensor<4x1xf32>) -> tensor<4x1xf32>',
                            scalar_const('sh', 'i8', 0),
                            '%y = tosa.mul %e, %r, %sh : (tensor<4x512xf32>, tensor<4x1xf32>, tensor<1xi8>) -> tensor<4x512xf32>',
                            'return %y : tensor<4x512xf32>'],
                           [((4, 512), 'f32', xv)], [((4, 512), 'f32', soft)], 1e-5))
    # Elementwise kernels GPU targets run in 128-bit vectors (compiler/gpu_elementwise.c):
    # a bias row broadcast into exact tiles (256 wide, 64 vectors) with a ReLU; a
    # sigmoid whose 40-wide rows overhang the 32-wide tile (the guard's bound
    # becomes 10 vectors); a compare and select over a rank-3 tensor; and a
    # scalar constant broadcast into the vectors.
    xv, bv = values((8, 256), 'f32', 150), values((1, 256), 'f32', 151)
    relu = [max(0.0, f32(xv[i] + bv[i % 256])) for i in range(8 * 256)]
    cases.append(tosa_case('tosa_bias_relu_vec_8x256', ['tensor<8x256xf32>', 'tensor<1x256xf32>'], 'tensor<8x256xf32>',
                           ['%a = tosa.add %arg0, %arg1 : (tensor<8x256xf32>, tensor<1x256xf32>) -> tensor<8x256xf32>',
                            '%r = tosa.clamp %a {max_val = 3.0e38 : f32, min_val = 0.0 : f32} : '
                            '(tensor<8x256xf32>) -> tensor<8x256xf32>',
                            'return %r : tensor<8x256xf32>'],
                           [((8, 256), 'f32', xv), ((1, 256), 'f32', bv)], [((8, 256), 'f32', relu)], 0))
    xv = values((3, 40), 'f32', 152)
    cases.append(tosa_case('tosa_sigmoid_vec_guarded_3x40', ['tensor<3x40xf32>'], 'tensor<3x40xf32>',
                           ['%r = tosa.sigmoid %arg0 : (tensor<3x40xf32>) -> tensor<3x40xf32>',
                            'return %r : tensor<3x40xf32>'],
                           [((3, 40), 'f32', xv)], [((3, 40), 'f32', [f32(1 / (1 + math.exp(-v))) for v in xv])],
                           1e-6))
    xv, yv = values((2, 4, 128), 'f32', 153), values((2, 4, 128), 'f32', 154)
    sel = [f32(x * y) if x > y else f32(x - y) for x, y in zip(xv, yv)]
    t3 = 'tensor<2x4x128xf32>'
    cases.append(tosa_case('tosa_select_vec_2x4x128', [t3, t3], t3,
                           ['%%g = tosa.greater %%arg0, %%arg1 : (%s, %s) -> tensor<2x4x128xi1>' % (t3, t3),
                            scalar_const('sh', 'i8', 0),
                            '%%m = tosa.mul %%arg0, %%arg1, %%sh : (%s, %s, tensor<1xi8>) -> %s' % (t3, t3, t3),
                            '%%d = tosa.sub %%arg0, %%arg1 : (%s, %s) -> %s' % (t3, t3, t3),
                            '%%r = tosa.select %%g, %%m, %%d : (tensor<2x4x128xi1>, %s, %s) -> %s' % (t3, t3, t3),
                            'return %%r : %s' % t3],
                           [((2, 4, 128), 'f32', xv), ((2, 4, 128), 'f32', yv)], [((2, 4, 128), 'f32', sel)], 0))
    # 64 wide in two exact 32-wide tiles: 16 vectors, under a guard the rewrite
    # adds, with a bias row (whose reads past the guard would be out of bounds).
    xv, yv, bv = values((4, 64), 'f32', 156), values((4, 64), 'f32', 157), values((1, 64), 'f32', 158)
    cases.append(tosa_case('tosa_maximum_bias_vec_guard_added_4x64',
                           ['tensor<4x64xf32>', 'tensor<4x64xf32>', 'tensor<1x64xf32>'], 'tensor<4x64xf32>',
                           ['%m = tosa.maximum %arg0, %arg1 : (tensor<4x64xf32>, tensor<4x64xf32>) -> tensor<4x64xf32>',
                            '%r = tosa.add %m, %arg2 : (tensor<4x64xf32>, tensor<1x64xf32>) -> tensor<4x64xf32>',
                            'return %r : tensor<4x64xf32>'],
                           [((4, 64), 'f32', xv), ((4, 64), 'f32', yv), ((1, 64), 'f32', bv)],
                           [((4, 64), 'f32', [f32(max(a, b) + bv[i % 64]) for i, (a, b) in enumerate(zip(xv, yv))])], 0))
    xv = values((4, 128), 'f32', 155)
    cases.append(tosa_case('tosa_scale_vec_4x128', ['tensor<4x128xf32>'], 'tensor<4x128xf32>',
                           ['%c = "tosa.const"() {values = dense<0.5> : tensor<1x1xf32>} : () -> tensor<1x1xf32>',
                            scalar_const('sh', 'i8', 0),
                            '%r = tosa.mul %arg0, %c, %sh : (tensor<4x128xf32>, tensor<1x1xf32>, tensor<1xi8>) '
                            '-> tensor<4x128xf32>',
                            'return %r : tensor<4x128xf32>'],
                           [((4, 128), 'f32', xv)], [((4, 128), 'f32', [f32(v * 0.5) for v in xv])], 0))
    a = values((64, 48), 'f32', 93)
    b = values((48, 64), 'f32', 94)
    cases.append(Case('linalg_matmul_tiled_2d', '''func.func @linalg_matmul_tiled_2d(%a: tensor<64x48xf32>, %b: tensor<48x64xf32>) -> tensor<64x64xf32> {
  %z = arith.constant 0.0 : f32
  %e = tensor.empty() : tensor<64x64xf32>
  %f = linalg.fill ins(%z : f32) outs(%e : tensor<64x64xf32>) -> tensor<64x64xf32>
  %r = linalg.matmul ins(%a, %b : tensor<64x48xf32>, tensor<48x64xf32>) outs(%f : tensor<64x64xf32>) -> tensor<64x64xf32>
  return %r : tensor<64x64xf32>
}''', [((64, 48), 'f32', a), ((48, 64), 'f32', b)], [((64, 64), 'f32', mm_ref(a, b, 1, 64, 48, 64))], 0))
    # f8 matmuls with f32 accumulation, as a quantized model writes them
    # (linalg: TOSA's f8 matmul accumulates in f16). GPU targets with f8 matrix
    # units (sm_120/121 mma.sync m16n8k32, gfx950 MFMA, RDNA4 WMMA) tile them in
    # 64-deep slices of bits; the operands are quarters in [-4, 4] as each format
    # rounds them, every product and sum exact in f32.
    for name, et, (batch, m, k, n), seeds in (('linalg_matmul_tiled_f8E4M3FN_f32acc', 'f8E4M3FN', (1, 64, 128, 64), (151, 152)),
                                              ('linalg_batch_matmul_tiled_f8E5M2_f32acc', 'f8E5M2', (2, 64, 64, 128), (153, 154))):
        a = values((batch, m, k), et, seeds[0])
        b = values((batch, k, n), et, seeds[1])
        lead = '%dx' % batch if batch > 1 else ''
        ta, tb, tr = ('tensor<%s%dx%dx%s>' % (lead, m, k, et), 'tensor<%s%dx%dx%s>' % (lead, k, n, et),
                      'tensor<%s%dx%dxf32>' % (lead, m, n))
        op = 'linalg.batch_matmul' if batch > 1 else 'linalg.matmul'
        dims = lambda *d: tuple(([batch] if batch > 1 else []) + list(d))
        cases.append(Case(name, '''func.func @%s(%%a: %s, %%b: %s) -> %s {
  %%z = arith.constant 0.0 : f32
  %%e = tensor.empty() : %s
  %%f = linalg.fill ins(%%z : f32) outs(%%e : %s) -> %s
  %%r = %s ins(%%a, %%b : %s, %s) outs(%%f : %s) -> %s
  return %%r : %s
}''' % (name, ta, tb, tr, tr, tr, tr, op, ta, tb, tr, tr, tr),
            [(dims(m, k), et, a), (dims(k, n), et, b)], [(dims(m, n), 'f32', mm_ref(a, b, batch, m, k, n))], 0))
    # The f8 codes the GPU kernels decode themselves (the SIMT tile widens f8 in
    # integer code): E4M3 with every subnormal and every code up to 4 in A and a
    # NaN (row 5 NaN throughout); E5M2 with an infinity of each sign (rows 9
    # and 10: +-inf, or NaN where a column's B has a zero or both signs).
    # B quarters: every finite product and sum exact in f32.
    import random as _random
    rng = _random.Random(155)
    e4 = [f8_value('f8E4M3FN', c) for c in range(256)]
    e4 = [v for v in e4 if not math.isnan(v) and abs(v) <= 4]
    a = [rng.choice(e4) for _ in range(64 * 64)]
    a[5 * 64 + 7] = math.nan
    b = values((64, 64), 'f8E4M3FN', 156)
    e5 = values((64, 64), 'f8E5M2', 157)
    e5[9 * 64 + 3], e5[10 * 64 + 4] = math.inf, -math.inf
    b5 = values((64, 64), 'f8E5M2', 158)
    for name, et, (av, bv) in (('linalg_matmul_tiled_f8E4M3FN_codes', 'f8E4M3FN', (a, b)),
                               ('linalg_matmul_tiled_f8E5M2_inf', 'f8E5M2', (e5, b5))):
        t_ = 'tensor<64x64x%s>' % et
        cases.append(Case(name, '''func.func @%s(%%a: %s, %%b: %s) -> tensor<64x64xf32> {
  %%z = arith.constant 0.0 : f32
  %%e = tensor.empty() : tensor<64x64xf32>
  %%f = linalg.fill ins(%%z : f32) outs(%%e : tensor<64x64xf32>) -> tensor<64x64xf32>
  %%r = linalg.matmul ins(%%a, %%b : %s, %s) outs(%%f : tensor<64x64xf32>) -> tensor<64x64xf32>
  return %%r : tensor<64x64xf32>
}''' % (name, t_, t_, t_, t_), [((64, 64), et, av), ((64, 64), et, bv)],
            [((64, 64), 'f32', [f32(sum(av[i * 64 + kk] * bv[kk * 64 + j] for kk in range(64)))
                                for i in range(64) for j in range(64)])], 0))
    # nearest-neighbour resize 2x
    small = values((1, 2, 2, 1), 'f32', 83)
    # TOSA's nearest neighbour: position y * d / n, a remainder of at least half rounds up,
    # then the index is clamped to the image (scale n/d = 4/2).
    near = lambda y: min(1, (2 * y) // 4 + (1 if (2 * y) % 4 >= 2 else 0))
    up = [small[near(y) * 2 + near(x_)] for y in range(4) for x_ in range(4)]
    cases.append(tosa_case('tosa_resize_nearest_f32', ['tensor<1x2x2x1xf32>'], 'tensor<1x4x4x1xf32>',
                           [shape_const('scale', [4, 2, 4, 2]), shape_const('offset', [0, 0]), shape_const('border', [2, 2]),
                            '%0 = tosa.resize %arg0, %scale, %offset, %border {mode = NEAREST_NEIGHBOR} : (tensor<1x2x2x1xf32>, !tosa.shape<4>, !tosa.shape<2>, !tosa.shape<2>) -> tensor<1x4x4x1xf32>',
                            'return %0 : tensor<1x4x4x1xf32>'],
                           [((1, 2, 2, 1), 'f32', small)], [((1, 4, 4, 1), 'f32', up)]))
    # conv3d: NDHWC input, ODHWI weights, stride 1, no padding.
    D = H = W = 3
    C, F, K = 2, 3, 2
    x = values((1, D, H, W, C), 'f32', 84)
    w = small_weights(F * K * K * K * C, 85)
    bias = small_weights(F, 86)
    out = []
    for z in range(D - K + 1):
        for y in range(H - K + 1):
            for x_ in range(W - K + 1):
                for f in range(F):
                    acc = bias[f]
                    for kz in range(K):
                        for ky in range(K):
                            for kx in range(K):
                                for c in range(C):
                                    acc += (x[(((z + kz) * H + y + ky) * W + x_ + kx) * C + c] *
                                            w[((((f * K + kz) * K + ky) * K + kx) * C) + c])
                    out.append(acc)
    O = D - K + 1
    cases.append(tosa_case('tosa_conv3d_f32', ['tensor<1x3x3x3x2xf32>'], 'tensor<1x2x2x2x3xf32>',
                           [const('w', w, (F, K, K, K, C)), const('b', bias, (F,)),
                            '%zp = "tosa.const"() {values = dense<0.0> : tensor<1xf32>} : () -> tensor<1xf32>',
                            '%0 = tosa.conv3d %arg0, %w, %b, %zp, %zp {acc_type = f32, dilation = array<i64: 1, 1, 1>, pad = array<i64: 0, 0, 0, 0, 0, 0>, stride = array<i64: 1, 1, 1>} : (tensor<1x3x3x3x2xf32>, tensor<3x2x2x2x2xf32>, tensor<3xf32>, tensor<1xf32>, tensor<1xf32>) -> tensor<1x2x2x2x3xf32>',
                            'return %0 : tensor<1x2x2x2x3xf32>'],
                           [((1, D, H, W, C), 'f32', x)], [((1, O, O, O, F), 'f32', out)], 1e-5))
    # transpose_conv2d, stride 2: each input pixel scatters a KxK weight patch.
    H = W = 3
    C, F, K, S = 2, 4, 2, 2
    x = values((1, H, W, C), 'f32', 87)
    w = small_weights(F * K * K * C, 88)
    bias = small_weights(F, 89)
    OH = (H - 1) * S + K
    acc = [bias[i % F] for i in range(OH * OH * F)]
    for iy in range(H):
        for ix in range(W):
            for ky in range(K):
                for kx in range(K):
                    for f in range(F):
                        for c in range(C):
                            acc[((iy * S + ky) * OH + ix * S + kx) * F + f] += (
                                x[(iy * W + ix) * C + c] * w[((f * K + ky) * K + kx) * C + c])
    cases.append(tosa_case('tosa_transpose_conv2d_f32', ['tensor<1x3x3x2xf32>'], 'tensor<1x6x6x4xf32>',
                           [const('w', w, (F, K, K, C)), const('b', bias, (F,)),
                            '%zp = "tosa.const"() {values = dense<0.0> : tensor<1xf32>} : () -> tensor<1xf32>',
                            '%0 = tosa.transpose_conv2d %arg0, %w, %b, %zp, %zp {acc_type = f32, out_pad = array<i64: 0, 0, 0, 0>, stride = array<i64: 2, 2>} : (tensor<1x3x3x2xf32>, tensor<4x2x2x2xf32>, tensor<4xf32>, tensor<1xf32>, tensor<1xf32>) -> tensor<1x6x6x4xf32>',
                            'return %0 : tensor<1x6x6x4xf32>'],
                           [((1, H, W, C), 'f32', x)], [((1, OH, OH, F), 'f32', acc)], 1e-5))
    # fft2d and rfft2d (TOSA's sign convention: exp(-2 pi i ...) forward).
    N = 4
    re = values((1, N, N), 'f32', 90)
    im = values((1, N, N), 'f32', 91)

    def dft(re, im, inverse):
        ore, oim = [], []
        sgn = 1 if inverse else -1
        for u in range(N):
            for v in range(N):
                sr = si = 0.0
                for y in range(N):
                    for x_ in range(N):
                        a = sgn * 2 * math.pi * (u * y + v * x_) / N
                        r, i_ = re[y * N + x_], im[y * N + x_]
                        sr += r * math.cos(a) - i_ * math.sin(a)
                        si += r * math.sin(a) + i_ * math.cos(a)
                ore.append(sr)
                oim.append(si)
        return ore, oim

    fre, fim = dft(re, im, False)
    cases.append(tosa_case('tosa_fft2d_f32', ['tensor<1x4x4xf32>', 'tensor<1x4x4xf32>'],
                           '(tensor<1x4x4xf32>, tensor<1x4x4xf32>)',
                           ['%0, %1 = tosa.fft2d %arg0, %arg1 {inverse = false} : (tensor<1x4x4xf32>, tensor<1x4x4xf32>) -> (tensor<1x4x4xf32>, tensor<1x4x4xf32>)',
                            'return %0, %1 : tensor<1x4x4xf32>, tensor<1x4x4xf32>'],
                           [((1, N, N), 'f32', re), ((1, N, N), 'f32', im)],
                           [((1, N, N), 'f32', fre), ((1, N, N), 'f32', fim)], 1e-4))
    rre, rim = dft(re, [0.0] * (N * N), False)
    half = N // 2 + 1
    cases.append(tosa_case('tosa_rfft2d_f32', ['tensor<1x4x4xf32>'], '(tensor<1x4x3xf32>, tensor<1x4x3xf32>)',
                           ['%0, %1 = tosa.rfft2d %arg0 : (tensor<1x4x4xf32>) -> (tensor<1x4x3xf32>, tensor<1x4x3xf32>)',
                            'return %0, %1 : tensor<1x4x3xf32>, tensor<1x4x3xf32>'],
                           [((1, N, N), 'f32', re)],
                           [((1, N, half), 'f32', [rre[u * N + v] for u in range(N) for v in range(half)]),
                            ((1, N, half), 'f32', [rim[u * N + v] for u in range(N) for v in range(half)])], 1e-4))
    # Stateful variables: read (a copy), write, read again, and one without an
    # initial value (zeros); what one call from a fresh module computes.
    xs = values((4,), 'f32', 94)
    init = [0.5, -1.0, 2.0, 0.25]
    body = """tosa.variable @acc = %s : tensor<4xf32>
tosa.variable @count : tensor<1xi32>
func.func @tosa_variable_f32(%%x: tensor<4xf32>) -> (tensor<4xf32>, tensor<4xf32>, tensor<1xi32>) {
  %%old = tosa.variable_read @acc : tensor<4xf32>
  %%new = tosa.add %%old, %%x : (tensor<4xf32>, tensor<4xf32>) -> tensor<4xf32>
  tosa.variable_write @acc, %%new : tensor<4xf32>
  %%again = tosa.variable_read @acc : tensor<4xf32>
  %%two = tosa.add %%again, %%again : (tensor<4xf32>, tensor<4xf32>) -> tensor<4xf32>
  %%c = tosa.variable_read @count : tensor<1xi32>
  %%one = "tosa.const"() {values = dense<1> : tensor<1xi32>} : () -> tensor<1xi32>
  %%c1 = tosa.add %%c, %%one : (tensor<1xi32>, tensor<1xi32>) -> tensor<1xi32>
  tosa.variable_write @count, %%c1 : tensor<1xi32>
  return %%old, %%two, %%c1 : tensor<4xf32>, tensor<4xf32>, tensor<1xi32>
}""" % dense(init, (4,), 'f32').split(' : ')[0]
    cases.append(Case('tosa_variable_f32', body, [((4,), 'f32', xs)],
                      [((4,), 'f32', init), ((4,), 'f32', [2 * (a + b) for a, b in zip(init, xs)]), ((1,), 'i32', [1])]))
    # matmul_t_block_scaled: MX f8 data with E8M0 scales per 32-element block of K,
    # B given transposed ([N, W, K]); products accumulated in f32.
    N_, H_, W_, K_ = 1, 2, 3, 64
    codes = [v for v in (f8_value('f8E4M3FN', c) for c in range(256)) if not math.isnan(v) and abs(v) <= 4]
    ad = [codes[(i * 37 + 11) % len(codes)] for i in range(N_ * H_ * K_)]
    bd = [codes[(i * 53 + 5) % len(codes)] for i in range(N_ * W_ * K_)]
    sa = [0.5, 2.0, 1.0, 0.25]
    sb = [1.0, 0.5, 4.0, 2.0, 0.125, 1.0]
    out = []
    for h in range(H_):
        for w in range(W_):
            acc = 0.0
            for k in range(K_):
                acc += ad[h * K_ + k] * sa[h * 2 + k // 32] * bd[w * K_ + k] * sb[w * 2 + k // 32]
            out.append(acc)
    cases.append(tosa_case('tosa_matmul_t_block_scaled_f8', ['tensor<1x2x64xf8E4M3FN>', 'tensor<1x2x2xf8E8M0FNU>',
                                                             'tensor<1x3x64xf8E4M3FN>', 'tensor<1x3x2xf8E8M0FNU>'],
                           'tensor<1x2x3xf32>',
                           ['%0 = tosa.matmul_t_block_scaled %arg0, %arg1, %arg2, %arg3 {block_size = #tosa.block_size<BLOCK_SIZE_32>} : (tensor<1x2x64xf8E4M3FN>, tensor<1x2x2xf8E8M0FNU>, tensor<1x3x64xf8E4M3FN>, tensor<1x3x2xf8E8M0FNU>) -> tensor<1x2x3xf32>',
                            'return %0 : tensor<1x2x3xf32>'],
                           [((1, 2, 64), 'f8E4M3FN', ad), ((1, 2, 2), 'f8E8M0FNU', sa),
                            ((1, 3, 64), 'f8E4M3FN', bd), ((1, 3, 2), 'f8E8M0FNU', sb)],
                           [((1, 2, 3), 'f32', out)], 1e-5))
    # cast_to_block_scaled: per 32-element block of the last dimension, a power-of-two
    # E8M0 scale from the block's largest magnitude and the data divided by it, as
    # TOSA 1.1's pseudocode computes them (log2 in double precision here).
    blk = lambda seed, lo, hi: [lo + (hi - lo) * (v + 4) / 8.0 for v in values((32,), 'f32', seed, -4, 4)]
    e4 = (blk(101, 0, 4)                                         # ordinary values
          + [58.0 if i == 7 else v for i, v in enumerate(blk(102, -20, 20))]  # |max| = 464 * 2^-3: a tie, to 448
          + [(-0.0 if i % 3 else 0.0) for i in range(32)]        # zeros: the smallest scale
          + [v * 1e-37 for v in blk(103, 2, 10)]                 # tiny: the scale clips at 2^-127
          + [math.nan if i == 5 else v for i, v in enumerate(blk(104, -4, 4))]
          + [math.inf if i == 30 else v for i, v in enumerate(blk(105, -4, 4))]
          + [v * 1e30 for v in blk(106, -4, 4)]                  # large
          + [14336.0 if i == 0 else v for i, v in enumerate(blk(107, -300, 300))])  # 448 * 2^5 exactly
    e4 = [f32(v) for v in e4]

    def block_types(shape, fmt):
        """(scale shape, dims, scale dims, data type, scale type) of MX data in blocks of 32."""
        sshape = shape[:-1] + (shape[-1] // 32,)
        dims, sdims = 'x'.join(map(str, shape)), 'x'.join(map(str, sshape))
        data_t = 'tensor<%sx%s>' % (dims, '!tosa.mxint8' if fmt == 'mxint8' else fmt)
        return sshape, dims, sdims, data_t, 'tensor<%sxf8E8M0FNU>' % sdims

    def cast_case(name, shape, in_t, fmt, xs):
        """tosa.cast_to_block_scaled over blocks of 32; f4 data leaves as its i4 bits."""
        sshape, dims, sdims, data_t, scale_t = block_types(shape, fmt)
        lines = ['%%0:2 = tosa.cast_to_block_scaled %%arg0 {block_size = #tosa.block_size<BLOCK_SIZE_32>} : '
                 '(tensor<%sx%s>) -> (%s, %s)' % (dims, in_t, data_t, scale_t)]
        out_t, out_et, first = data_t, fmt, '%0#0'
        if fmt == 'f4E2M1FN':
            out_t, out_et, first = 'tensor<%sxi4>' % dims, 'i4', '%1'
            lines.append('%%1 = arith.bitcast %%0#0 : %s to %s' % (data_t, out_t))
        elif fmt in F6:  # no buffer view type: the exact values as f32
            out_t, out_et, first = 'tensor<%sxf32>' % dims, 'f32', '%1'
            lines.append('%%1 = arith.extf %%0#0 : %s to %s' % (data_t, out_t))
        elif fmt == 'mxint8':  # an i8 buffer view: its bits
            out_et = 'i8'
        lines.append('return %s, %%0#1 : %s, %s' % (first, out_t, scale_t))
        d, sc = block_scaled_ref(fmt, xs, 32)
        cases.append(tosa_case(name, ['tensor<%sx%s>' % (dims, in_t)], '(%s, %s)' % (out_t, scale_t), lines,
                               [(shape, in_t, xs)], [(shape, out_et, d), (sshape, 'f8E8M0FNU', sc)]))

    cast_case('tosa_cast_to_block_scaled_f8e4m3', (4, 64), 'f32', 'f8E4M3FN', e4)
    e5 = (blk(111, -4, 4)
          + [15.0 if i == 3 else v for i, v in enumerate(blk(112, -10, 10))]   # 61440 * 2^-12 exactly
          + [math.nan if i == 0 else v for i, v in enumerate(blk(113, -1, 1))]
          + [v * 1e-3 for v in blk(114, -4, 4)])
    cast_case('tosa_cast_to_block_scaled_f16_f8e5m2', (2, 2, 32), 'f16', 'f8E5M2', [f16(v) for v in e5])
    f4in = [bf16(v) for v in blk(121, -4, 4) + [28.0 if i == 9 else v for i, v in enumerate(blk(122, -20, 20))]]
    cast_case('tosa_cast_to_block_scaled_bf16_f4', (1, 64), 'bf16', 'f4E2M1FN', f4in)
    f6in = [f32(v) for v in (blk(131, -4, 4)
                             + [7.75 if i == 2 else v for i, v in enumerate(blk(132, -6, 6))]  # r * 2^0: the top
                             + [math.nan if i == 4 else v for i, v in enumerate(blk(133, -1, 1))]
                             + [v * 1e-3 for v in blk(134, -3, 3)])]
    cast_case('tosa_cast_to_block_scaled_f6e2m3', (2, 64), 'f32', 'f6E2M3FN', f6in)
    cast_case('tosa_cast_to_block_scaled_bf16_f6e3m2', (1, 64), 'bf16', 'f6E3M2FN',
              [bf16(v) for v in blk(135, -50, 50) + [30.0 if i == 1 else v for i, v in enumerate(blk(136, -9, 9))]])
    mxin = [f32(v) for v in (blk(141, -4, 4)
                             + [v * 1e30 for v in blk(142, -3, 3)]                # large
                             + [(-0.0 if i % 2 else 0.0) for i in range(32)]      # zeros
                             + [math.inf if i == 7 else v for i, v in enumerate(blk(143, -1, 1))])]
    cast_case('tosa_cast_to_block_scaled_mxint8', (2, 2, 32), 'f32', 'mxint8', mxin)

    # cast_from_block_scaled: each value times its block's scale, in f32, then
    # rounded to the output type (NaN scales give NaN).
    def from_case(name, shape, fmt, data, scales, out_t):
        sshape, dims, sdims, data_t, _ = block_types(shape, fmt)
        arg_t, arg_et, src, lines = data_t, fmt, '%arg0', []
        if fmt == 'f4E2M1FN':  # handed in as its i4 codes
            arg_t, arg_et, src = 'tensor<%sxi4>' % dims, 'i4', '%d'
            lines.append('%%d = arith.bitcast %%arg0 : %s to %s' % (arg_t, data_t))
        lines += ['%%0 = tosa.cast_from_block_scaled %s, %%arg1 {block_size = #tosa.block_size<BLOCK_SIZE_32>} : '
                  '(%s, tensor<%sxf8E8M0FNU>) -> tensor<%sx%s>' % (src, data_t, sdims, dims, out_t),
                  'return %%0 : tensor<%sx%s>' % (dims, out_t)]
        vals = [(F4[c & 7] * (-1 if c & 8 else 1)) for c in (d & 15 for d in data)] if fmt == 'f4E2M1FN' else data
        want = [v * scales[i // 32] for i, v in enumerate(vals)]
        want = [bf16(v) for v in want] if out_t == 'bf16' else [f32(v) for v in want]
        cases.append(tosa_case(name, [arg_t, 'tensor<%sxf8E8M0FNU>' % sdims], 'tensor<%sx%s>' % (dims, out_t), lines,
                               [(shape, arg_et, data), (sshape, 'f8E8M0FNU', scales)], [(shape, out_t, want)]))

    f8codes = [v for v in (f8_value('f8E4M3FN', c) for c in range(256)) if not math.isnan(v)]
    from_case('tosa_cast_from_block_scaled_f8e4m3', (2, 64), 'f8E4M3FN',
              [f8codes[(i * 29 + 3) % len(f8codes)] for i in range(128)], [1.0, 0.25, math.nan, 2.0 ** 100], 'f32')
    from_case('tosa_cast_from_block_scaled_f4_bf16', (1, 64), 'f4E2M1FN',
              [((i * 7 + 2) % 16) - 8 for i in range(64)], [2.0 ** -3, 2.0 ** 20], 'bf16')
    # The two together: data through mxint8 and f6 and back.
    def round_trip(name, fmt, shape, xs, out_t):
        sshape, dims, sdims, data_t, scale_t = block_types(shape, fmt)
        lines = ['%%0:2 = tosa.cast_to_block_scaled %%arg0 {block_size = #tosa.block_size<BLOCK_SIZE_32>} : '
                 '(tensor<%sxf32>) -> (%s, %s)' % (dims, data_t, scale_t),
                 '%%1 = tosa.cast_from_block_scaled %%0#0, %%0#1 {block_size = #tosa.block_size<BLOCK_SIZE_32>} : '
                 '(%s, %s) -> tensor<%sx%s>' % (data_t, scale_t, dims, out_t),
                 'return %%1 : tensor<%sx%s>' % (dims, out_t)]
        d, sc = block_scaled_ref(fmt, xs, 32)
        vals = ([c / 64.0 for c in d] if fmt == 'mxint8' else
                [F4[c & 7] * (-1 if c & 8 else 1) for c in (v & 15 for v in d)] if fmt == 'f4E2M1FN' else d)
        want = [v * sc[i // 32] for i, v in enumerate(vals)]
        want = [bf16(v) for v in want] if out_t == 'bf16' else [f32(v) for v in want]
        cases.append(tosa_case(name, ['tensor<%sxf32>' % dims], 'tensor<%sx%s>' % (dims, out_t), lines,
                               [(shape, 'f32', xs)], [(shape, out_t, want)]))

    round_trip('tosa_block_scaled_round_trip_mxint8', 'mxint8', (1, 64), [f32(v) for v in blk(151, -9, 9) + blk(152, -0.1, 0.1)], 'bf16')
    round_trip('tosa_block_scaled_round_trip_f6e3m2', 'f6E3M2FN', (2, 32), [f32(v) for v in blk(153, -9, 9) + blk(154, -300, 300)], 'f32')
    round_trip('tosa_block_scaled_round_trip_f4', 'f4E2M1FN', (1, 96), [f32(v) for v in blk(155, -5, 5) + blk(156, -0.2, 0.2) + blk(157, -70, 70)], 'f32')
    # matmul_t_block_scaled on mxint8 data (i8 buffer views: the bits).
    ai = [((i * 37 + 11) % 255) - 127 for i in range(2 * 64)]
    bi = [((i * 53 + 5) % 255) - 127 for i in range(3 * 64)]
    sa, sb = [0.5, 2.0, 1.0, 0.25], [1.0, 0.5, 4.0, 2.0, 0.125, 1.0]
    out = [sum(ai[h * 64 + k] / 64 * sa[h * 2 + k // 32] * bi[w * 64 + k] / 64 * sb[w * 2 + k // 32]
               for k in range(64)) for h in range(2) for w in range(3)]
    mx = lambda d: 'tensor<%sx!tosa.mxint8>' % d
    cases.append(tosa_case('tosa_matmul_t_block_scaled_mxint8', [mx('1x2x64'), 'tensor<1x2x2xf8E8M0FNU>',
                                                                 mx('1x3x64'), 'tensor<1x3x2xf8E8M0FNU>'],
                           'tensor<1x2x3xf32>',
                           ['%%0 = tosa.matmul_t_block_scaled %%arg0, %%arg1, %%arg2, %%arg3 {block_size = #tosa.block_size<BLOCK_SIZE_32>} : (%s, tensor<1x2x2xf8E8M0FNU>, %s, tensor<1x3x2xf8E8M0FNU>) -> tensor<1x2x3xf32>' % (mx('1x2x64'), mx('1x3x64')),
                            'return %0 : tensor<1x2x3xf32>'],
                           [((1, 2, 64), 'i8', ai), ((1, 2, 2), 'f8E8M0FNU', sa),
                            ((1, 3, 64), 'i8', bi), ((1, 3, 2), 'f8E8M0FNU', sb)],
                           [((1, 2, 3), 'f32', out)], 1e-5))
    # apply_scale on its own (rescale's core): value * multiplier, rounded, >> shift.
    vals = [100000, -100000, 2**20 + 7, -(2**20) - 7, -2, -987654, 1, -1]  # |value| < 2^(shift-1)
    mults = [1 << 30, 1518500250, 2**31 - 1, 1073741825, 3, 1 << 29, 2**31 - 1, 2**31 - 1]
    shifts = [30, 31, 32, 38, 2, 40, 31, 33]
    for mode in ('SINGLE_ROUND', 'DOUBLE_ROUND'):
        cases.append(tosa_case('tosa_apply_scale_%s' % mode.lower(), ['tensor<8xi32>', 'tensor<8xi32>', 'tensor<8xi8>'],
                               'tensor<8xi32>',
                               ['%%0 = tosa.apply_scale %%arg0, %%arg1, %%arg2 {rounding_mode = %s} : (tensor<8xi32>, tensor<8xi32>, tensor<8xi8>) -> tensor<8xi32>' % mode,
                                'return %0 : tensor<8xi32>'],
                               [((8,), 'i32', vals), ((8,), 'i32', mults), ((8,), 'i8', shifts)],
                               [((8,), 'i32', [apply_scale(v, m, sh, mode == 'DOUBLE_ROUND')
                                               for v, m, sh in zip(vals, mults, shifts)])]))
    # TOSA 1.1's shape operators: kiln evaluates them at compile time.
    xs = values((2, 3, 4), 'f32', 161)
    S = lambda n: '!tosa.shape<%d>' % n
    cs = lambda name, vals: '%%%s = tosa.const_shape {values = dense<[%s]> : tensor<%dxindex>} : () -> %s' % (
        name, ', '.join(map(str, vals)), len(vals), S(len(vals)))
    bin_ = lambda r, op, a, b, n=1: '%%%s = tosa.%s %%%s, %%%s : (%s, %s) -> %s' % (r, op, a, b, S(n), S(n), S(n))
    un_ = lambda r, op, a, n=1: '%%%s = tosa.%s %%%s : (%s) -> %s' % (r, op, a, S(n), S(n))
    cases.append(tosa_case('tosa_shape_ops_reshape', ['tensor<2x3x4xf32>'], 'tensor<12x2xf32>', [
        '%%d0 = tosa.dim %%arg0 {axis = 0 : i32} : (tensor<2x3x4xf32>) -> %s' % S(1),
        '%%d1 = tosa.dim %%arg0 {axis = 1 : i32} : (tensor<2x3x4xf32>) -> %s' % S(1),
        '%%d2 = tosa.dim %%arg0 {axis = 2 : i32} : (tensor<2x3x4xf32>) -> %s' % S(1),
        bin_('d01', 'mul_shape', 'd0', 'd1'),
        cs('c2', [2]), cs('c3', [3]),
        bin_('half', 'div_floor_shape', 'd2', 'c2'),
        bin_('rows', 'mul_shape', 'd01', 'half'),
        un_('cols', 'log2_ceil_shape', 'c3'),
        '%%s = tosa.concat_shape %%rows, %%cols : (%s, %s) -> %s' % (S(1), S(1), S(2)),
        '%%r = tosa.reshape %%arg0, %%s : (tensor<2x3x4xf32>, %s) -> tensor<12x2xf32>' % S(2),
        'return %r : tensor<12x2xf32>'], [((2, 3, 4), 'f32', xs)], [((12, 2), 'f32', xs)]))
    xs = values((2, 3), 'f32', 162)
    tiled = [xs[(i % 2) * 3 + j % 3] for i in range(4) for j in range(6)]
    cases.append(tosa_case('tosa_shape_ops_tile_slice', ['tensor<2x3xf32>'], 'tensor<2x3xf32>', [
        cs('c53', [5, 3]), cs('c22', [2, 2]), cs('c11', [1, 1]), cs('c23', [2, 3]),
        bin_('dc', 'div_ceil_shape', 'c53', 'c22', 2),    # [3, 2]
        bin_('mx', 'max_shape', 'dc', 'c11', 2),          # [3, 2]
        bin_('mul', 'min_shape', 'mx', 'c23', 2),         # [2, 2]
        '%%t = tosa.tile %%arg0, %%mul : (tensor<2x3xf32>, %s) -> tensor<4x6xf32>' % S(2),
        cs('c10', [1, 0]), cs('c54', [5, 4]), cs('c33', [3, 3]), cs('c24', [2, 4]),
        un_('e', 'exp2_shape', 'c10', 2),                 # [2, 1]
        bin_('m', 'mod_shape', 'c54', 'c33', 2),          # [2, 1]
        bin_('s0', 'sub_shape', 'e', 'm', 2),             # [0, 0]
        un_('l', 'log2_floor_shape', 'c24', 2),           # [1, 2]
        bin_('start', 'add_shape', 's0', 'l', 2),         # [1, 2]
        cs('c4', [9, 2, 3, 7]),
        '%one = "tosa.const"() {values = dense<1> : tensor<1xi32>} : () -> tensor<1xi32>',
        '%two = "tosa.const"() {values = dense<2> : tensor<1xi32>} : () -> tensor<1xi32>',
        '%%size = tosa.slice_shape %%c4, %%one, %%two : (%s, tensor<1xi32>, tensor<1xi32>) -> %s' % (S(4), S(2)),
        '%%r = tosa.slice %%t, %%start, %%size : (tensor<4x6xf32>, %s, %s) -> tensor<2x3xf32>' % (S(2), S(2)),
        'return %r : tensor<2x3xf32>'], [((2, 3), 'f32', xs)],
        [((2, 3), 'f32', [tiled[(1 + i) * 6 + 2 + j] for i in range(2) for j in range(3)])]))
    # scatter: rows of the input replace rows of the values (its inputs stay as they were).
    vals = values((1, 5, 2), 'f32', 92)
    rows = values((1, 2, 2), 'f32', 93)
    idx = [3, 1]
    want = list(vals)
    for k, r in enumerate(idx):
        want[r * 2:r * 2 + 2] = rows[k * 2:k * 2 + 2]
    cases.append(tosa_case('tosa_scatter_f32', ['tensor<1x5x2xf32>', 'tensor<1x2xi32>', 'tensor<1x2x2xf32>'],
                           'tensor<1x5x2xf32>',
                           ['%0 = tosa.scatter %arg0, %arg1, %arg2 : (tensor<1x5x2xf32>, tensor<1x2xi32>, tensor<1x2x2xf32>) -> tensor<1x5x2xf32>',
                            'return %0 : tensor<1x5x2xf32>'],
                           [((1, 5, 2), 'f32', vals), ((1, 2), 'i32', idx), ((1, 2, 2), 'f32', rows)],
                           [((1, 5, 2), 'f32', want)]))
    return cases


def mlir_literal(v):
    """A number as MLIR's lexer reads it: floats always carry a '.'."""
    text = fmt(v)
    if isinstance(v, float) and math.isfinite(v) and '.' not in text:
        text = text.replace('e', '.0e') if 'e' in text else text + '.0'
    return text


def dense(vals, shape, et='f32'):
    def nest(v, sh):
        if len(sh) == 1:
            return '[' + ', '.join(mlir_literal(x) for x in v) + ']'
        step = len(v) // sh[0]
        return '[' + ', '.join(nest(v[i * step:(i + 1) * step], sh[1:]) for i in range(sh[0])) + ']'
    return 'dense<%s> : %s' % (nest(vals, list(shape)), ttype(shape, et))


def const(name, vals, shape, et='f32'):
    return '%%%s = "tosa.const"() {values = %s} : () -> %s' % (name, dense(vals, shape, et), ttype(shape, et))


def ref_conv(x, H, W, C, w, F, K, bias, pad):
    """NHWC input, OHWI weights, stride 1, symmetric zero padding: NHWF output."""
    out = []
    OH, OW = H + 2 * pad - K + 1, W + 2 * pad - K + 1
    for y in range(OH):
        for xx in range(OW):
            for f in range(F):
                s_ = bias[f]
                for ky in range(K):
                    for kx in range(K):
                        iy, ix = y + ky - pad, xx + kx - pad
                        if 0 <= iy < H and 0 <= ix < W:
                            for c in range(C):
                                s_ += x[(iy * W + ix) * C + c] * w[((f * K + ky) * K + kx) * C + c]
                out.append(s_)
    return out


def small_weights(count, seed, scale=0.25):
    return [f32(v * scale) for v in values((count,), 'f32', seed)]


def conv_line(res, inp, w, b, in_t, w_t, out_t, pad):
    return ('%%%s = tosa.conv2d %%%s, %%%s, %%%s, %%zp, %%zp {acc_type = f32, dilation = array<i64: 1, 1>, '
            'pad = array<i64: %d, %d, %d, %d>, stride = array<i64: 1, 1>} : (%s, %s, %s, tensor<1xf32>, tensor<1xf32>) -> %s'
            % (res, inp, w, b, pad, pad, pad, pad, in_t, w_t, ttype((w_t_shape(w_t)[0],), 'f32'), out_t))


def w_t_shape(t):
    return [int(d) for d in t[len('tensor<'):-1].split('x')[:-1]]


def group_models():
    """Whole models: a residual block, a transformer encoder layer, a depthwise-separable block, an RNN cell (issue 15)."""
    cases = []
    relu = lambda v: max(0.0, v)
    # ---- ResNet-style residual block ----
    H = W = 5
    C = 4
    x = values((1, H, W, C), 'f32', 91)
    w1, w2 = small_weights(C * 9 * C, 92), small_weights(C * 9 * C, 93)
    b1, b2 = small_weights(C, 94), small_weights(C, 95)
    h = [relu(v) for v in ref_conv(x, H, W, C, w1, C, 3, b1, 1)]
    y = ref_conv(h, H, W, C, w2, C, 3, b2, 1)
    out = [f32(relu(a + b)) for a, b in zip(y, x)]
    xt = ttype((1, H, W, C), 'f32')
    wt = ttype((C, 3, 3, C), 'f32')
    big = '3.40282347E+38'
    body = [const('w1', w1, (C, 3, 3, C)), const('w2', w2, (C, 3, 3, C)), const('b1', b1, (C,)), const('b2', b2, (C,)),
            scalar_const('zp', 'f32', 0.0),
            conv_line('c1', 'arg0', 'w1', 'b1', xt, wt, xt, 1),
            '%%r1 = tosa.clamp %%c1 {max_val = %s : f32, min_val = 0.0 : f32} : (%s) -> %s' % (big, xt, xt),
            conv_line('c2', 'r1', 'w2', 'b2', xt, wt, xt, 1),
            '%%s = tosa.add %%c2, %%arg0 : (%s, %s) -> %s' % (xt, xt, xt),
            '%%r2 = tosa.clamp %%s {max_val = %s : f32, min_val = 0.0 : f32} : (%s) -> %s' % (big, xt, xt),
            'return %%r2 : %s' % xt]
    cases.append(tosa_case('model_resnet_block', [xt], xt, body, [((1, H, W, C), 'f32', x)],
                           [((1, H, W, C), 'f32', out)], 1e-4))
    # ---- MobileNet depthwise-separable block (relu6) ----
    C, F = 3, 5
    x = values((1, H, W, C), 'f32', 96)
    dw = small_weights(9 * C, 97)
    db = small_weights(C, 98)
    pw = small_weights(F * C, 99)
    pb = small_weights(F, 100)
    relu6 = lambda v: min(6.0, max(0.0, v))
    d = []
    for yy in range(H):
        for xx in range(W):
            for c in range(C):
                s_ = db[c]
                for ky in range(3):
                    for kx in range(3):
                        iy, ix = yy + ky - 1, xx + kx - 1
                        if 0 <= iy < H and 0 <= ix < W:
                            s_ += x[(iy * W + ix) * C + c] * dw[(ky * 3 + kx) * C + c]
                d.append(relu6(s_))
    p = [f32(relu6(v)) for v in ref_conv(d, H, W, C, pw, F, 1, pb, 0)]
    xt, dt, ot = ttype((1, H, W, C), 'f32'), ttype((3, 3, C, 1), 'f32'), ttype((1, H, W, F), 'f32')
    pt = ttype((F, 1, 1, C), 'f32')
    body = [const('dw', dw, (3, 3, C, 1)), const('db', db, (C,)), const('pw', pw, (F, 1, 1, C)), const('pb', pb, (F,)),
            scalar_const('zp', 'f32', 0.0),
            '%%d = tosa.depthwise_conv2d %%arg0, %%dw, %%db, %%zp, %%zp {acc_type = f32, dilation = array<i64: 1, 1>, pad = array<i64: 1, 1, 1, 1>, stride = array<i64: 1, 1>} : (%s, %s, tensor<%dxf32>, tensor<1xf32>, tensor<1xf32>) -> %s' % (xt, dt, C, xt),
            '%%r = tosa.clamp %%d {max_val = 6.0 : f32, min_val = 0.0 : f32} : (%s) -> %s' % (xt, xt),
            conv_line('p', 'r', 'pw', 'pb', xt, pt, ot, 0),
            '%%o = tosa.clamp %%p {max_val = 6.0 : f32, min_val = 0.0 : f32} : (%s) -> %s' % (ot, ot),
            'return %%o : %s' % ot]
    cases.append(tosa_case('model_mobilenet_block', [xt], ot, body, [((1, H, W, C), 'f32', x)],
                           [((1, H, W, F), 'f32', p)], 1e-4))
    # ---- transformer encoder layer: seq 4, model 8, FFN 16, one head ----
    S, D, Fh = 4, 8, 16
    x = values((1, S, D), 'f32', 101)
    wq, wk, wv, wo = (small_weights(D * D, s, 0.125) for s in (102, 103, 104, 105))
    w1, w2 = small_weights(D * Fh, 106, 0.125), small_weights(Fh * D, 107, 0.125)

    def mm(a, b, n, k, m):
        return [sum(a[i * k + t_] * b[t_ * m + j] for t_ in range(k)) for i in range(n) for j in range(m)]

    def layernorm(v):
        out_ = []
        for i in range(S):
            row = v[i * D:(i + 1) * D]
            mu = sum(row) / D
            var = sum((r - mu) ** 2 for r in row) / D
            out_ += [(r - mu) / math.sqrt(var + 1e-5) for r in row]
        return out_

    def gelu(v):
        return 0.5 * v * (1 + math.tanh(0.7978845608028654 * (v + 0.044715 * v ** 3)))

    hn = layernorm(x)
    q, k, v = mm(hn, wq, S, D, D), mm(hn, wk, S, D, D), mm(hn, wv, S, D, D)
    scores = [sum(q[i * D + t_] * k[j * D + t_] for t_ in range(D)) / math.sqrt(D) for i in range(S) for j in range(S)]
    probs = []
    for i in range(S):
        row = scores[i * S:(i + 1) * S]
        mx = max(row)
        e = [math.exp(r - mx) for r in row]
        probs += [ee / sum(e) for ee in e]
    ctx = mm(probs, v, S, S, D)
    attn = mm(ctx, wo, S, D, D)
    x1 = [a + b for a, b in zip(x, attn)]
    h2 = layernorm(x1)
    ff = mm([gelu(u) for u in mm(h2, w1, S, D, Fh)], w2, S, Fh, D)
    out = [f32(a + b) for a, b in zip(x1, ff)]
    T = lambda *sh: ttype(sh, 'f32')
    body = [const('wq', wq, (1, D, D)), const('wk', wk, (1, D, D)), const('wv', wv, (1, D, D)), const('wo', wo, (1, D, D)),
            const('w1', w1, (1, D, Fh)), const('w2', w2, (1, Fh, D)), scalar_const('zp', 'f32', 0.0),
            scalar_const('shift', 'i8', 0),
            const('invd', [1.0 / D], (1, 1, 1)), const('eps', [1e-5], (1, 1, 1)),
            const('scale', [1 / math.sqrt(D)], (1, 1, 1)), const('half', [0.5], (1, 1, 1)), const('one', [1.0], (1, 1, 1)),
            const('c0', [0.7978845608028654], (1, 1, 1)), const('c1', [0.044715], (1, 1, 1)),
            shape_const('perm_dummy', [0])]
    body.pop()  # (no shape constant needed)

    def ln(res, inp):
        return ['%%%s_s = tosa.reduce_sum %%%s {axis = 2 : i32} : (%s) -> %s' % (res, inp, T(1, S, D), T(1, S, 1)),
                '%%%s_m = tosa.mul %%%s_s, %%invd, %%shift : (%s, %s, tensor<1xi8>) -> %s' % (res, res, T(1, S, 1), T(1, 1, 1), T(1, S, 1)),
                '%%%s_c = tosa.sub %%%s, %%%s_m : (%s, %s) -> %s' % (res, inp, res, T(1, S, D), T(1, S, 1), T(1, S, D)),
                '%%%s_q = tosa.mul %%%s_c, %%%s_c, %%shift : (%s, %s, tensor<1xi8>) -> %s' % (res, res, res, T(1, S, D), T(1, S, D), T(1, S, D)),
                '%%%s_vs = tosa.reduce_sum %%%s_q {axis = 2 : i32} : (%s) -> %s' % (res, res, T(1, S, D), T(1, S, 1)),
                '%%%s_v = tosa.mul %%%s_vs, %%invd, %%shift : (%s, %s, tensor<1xi8>) -> %s' % (res, res, T(1, S, 1), T(1, 1, 1), T(1, S, 1)),
                '%%%s_ve = tosa.add %%%s_v, %%eps : (%s, %s) -> %s' % (res, res, T(1, S, 1), T(1, 1, 1), T(1, S, 1)),
                '%%%s_r = tosa.rsqrt %%%s_ve : (%s) -> %s' % (res, res, T(1, S, 1), T(1, S, 1)),
                '%%%s = tosa.mul %%%s_c, %%%s_r, %%shift : (%s, %s, tensor<1xi8>) -> %s' % (res, res, res, T(1, S, D), T(1, S, 1), T(1, S, D))]

    def matmul(res, a, b, at, bt, rt):
        return '%%%s = tosa.matmul %%%s, %%%s, %%zp, %%zp : (%s, %s, tensor<1xf32>, tensor<1xf32>) -> %s' % (res, a, b, at, bt, rt)

    body += ln('h', 'arg0')
    body += [matmul('q', 'h', 'wq', T(1, S, D), T(1, D, D), T(1, S, D)),
             matmul('k', 'h', 'wk', T(1, S, D), T(1, D, D), T(1, S, D)),
             matmul('v', 'h', 'wv', T(1, S, D), T(1, D, D), T(1, S, D)),
             '%%kt = tosa.transpose %%k {perms = array<i32: 0, 2, 1>} : (%s) -> %s' % (T(1, S, D), T(1, D, S)),
             matmul('sc', 'q', 'kt', T(1, S, D), T(1, D, S), T(1, S, S)),
             '%%ss = tosa.mul %%sc, %%scale, %%shift : (%s, %s, tensor<1xi8>) -> %s' % (T(1, S, S), T(1, 1, 1), T(1, S, S)),
             '%%mx = tosa.reduce_max %%ss {axis = 2 : i32} : (%s) -> %s' % (T(1, S, S), T(1, S, 1)),
             '%%sh = tosa.sub %%ss, %%mx : (%s, %s) -> %s' % (T(1, S, S), T(1, S, 1), T(1, S, S)),
             '%%ex = tosa.exp %%sh : (%s) -> %s' % (T(1, S, S), T(1, S, S)),
             '%%sm = tosa.reduce_sum %%ex {axis = 2 : i32} : (%s) -> %s' % (T(1, S, S), T(1, S, 1)),
             '%%rc = tosa.reciprocal %%sm : (%s) -> %s' % (T(1, S, 1), T(1, S, 1)),
             '%%pr = tosa.mul %%ex, %%rc, %%shift : (%s, %s, tensor<1xi8>) -> %s' % (T(1, S, S), T(1, S, 1), T(1, S, S)),
             matmul('cx', 'pr', 'v', T(1, S, S), T(1, S, D), T(1, S, D)),
             matmul('at', 'cx', 'wo', T(1, S, D), T(1, D, D), T(1, S, D)),
             '%%x1 = tosa.add %%arg0, %%at : (%s, %s) -> %s' % (T(1, S, D), T(1, S, D), T(1, S, D))]
    body += ln('h2', 'x1')
    body += [matmul('f1', 'h2', 'w1', T(1, S, D), T(1, D, Fh), T(1, S, Fh)),
             '%%g3 = tosa.mul %%f1, %%f1, %%shift : (%s, %s, tensor<1xi8>) -> %s' % (T(1, S, Fh), T(1, S, Fh), T(1, S, Fh)),
             '%%g4 = tosa.mul %%g3, %%f1, %%shift : (%s, %s, tensor<1xi8>) -> %s' % (T(1, S, Fh), T(1, S, Fh), T(1, S, Fh)),
             '%%g5 = tosa.mul %%g4, %%c1, %%shift : (%s, %s, tensor<1xi8>) -> %s' % (T(1, S, Fh), T(1, 1, 1), T(1, S, Fh)),
             '%%g6 = tosa.add %%f1, %%g5 : (%s, %s) -> %s' % (T(1, S, Fh), T(1, S, Fh), T(1, S, Fh)),
             '%%g7 = tosa.mul %%g6, %%c0, %%shift : (%s, %s, tensor<1xi8>) -> %s' % (T(1, S, Fh), T(1, 1, 1), T(1, S, Fh)),
             '%%g8 = tosa.tanh %%g7 : (%s) -> %s' % (T(1, S, Fh), T(1, S, Fh)),
             '%%g9 = tosa.add %%g8, %%one : (%s, %s) -> %s' % (T(1, S, Fh), T(1, 1, 1), T(1, S, Fh)),
             '%%g10 = tosa.mul %%f1, %%g9, %%shift : (%s, %s, tensor<1xi8>) -> %s' % (T(1, S, Fh), T(1, S, Fh), T(1, S, Fh)),
             '%%g = tosa.mul %%g10, %%half, %%shift : (%s, %s, tensor<1xi8>) -> %s' % (T(1, S, Fh), T(1, 1, 1), T(1, S, Fh)),
             matmul('f2', 'g', 'w2', T(1, S, Fh), T(1, Fh, D), T(1, S, D)),
             '%%out = tosa.add %%x1, %%f2 : (%s, %s) -> %s' % (T(1, S, D), T(1, S, D), T(1, S, D)),
             'return %%out : %s' % T(1, S, D)]
    cases.append(tosa_case('model_transformer_encoder', [T(1, S, D)], T(1, S, D), body, [((1, S, D), 'f32', x)],
                           [((1, S, D), 'f32', out)], 1e-4))
    # ---- an RNN cell's loop ----
    # h_{t+1} = tanh(W h_t + x) for 3 steps, in a tosa.while_loop.
    Hd = 4
    wr = small_weights(Hd * Hd, 109, 0.5)
    xin = values((1, 1, Hd), 'f32', 110)
    hstate = [0.0] * Hd
    for _ in range(3):
        hstate = [math.tanh(sum(hstate[j] * wr[j * Hd + i] for j in range(Hd)) + xin[i]) for i in range(Hd)]
    body = """func.func @rnn_while_f32(%%x: tensor<1x1x4xf32>) -> tensor<1x1x4xf32> {
  %s
  %%zp = "tosa.const"() {values = dense<0.0> : tensor<1xf32>} : () -> tensor<1xf32>
  %%h0 = "tosa.const"() {values = dense<0.0> : tensor<1x1x4xf32>} : () -> tensor<1x1x4xf32>
  %%i0 = "tosa.const"() {values = dense<0> : tensor<i32>} : () -> tensor<i32>
  %%r:2 = tosa.while_loop (%%i = %%i0, %%h = %%h0) : (tensor<i32>, tensor<1x1x4xf32>) -> (tensor<i32>, tensor<1x1x4xf32>) {
    %%three = "tosa.const"() {values = dense<3> : tensor<i32>} : () -> tensor<i32>
    %%go = tosa.greater %%three, %%i : (tensor<i32>, tensor<i32>) -> tensor<i1>
    tosa.yield %%go : tensor<i1>
  } do {
  ^bb0(%%i: tensor<i32>, %%h: tensor<1x1x4xf32>):
    %%one = "tosa.const"() {values = dense<1> : tensor<i32>} : () -> tensor<i32>
    %%n = tosa.add %%i, %%one : (tensor<i32>, tensor<i32>) -> tensor<i32>
    %%m = tosa.matmul %%h, %%w, %%zp, %%zp : (tensor<1x1x4xf32>, tensor<1x4x4xf32>, tensor<1xf32>, tensor<1xf32>) -> tensor<1x1x4xf32>
    %%s = tosa.add %%m, %%x : (tensor<1x1x4xf32>, tensor<1x1x4xf32>) -> tensor<1x1x4xf32>
    %%t = tosa.tanh %%s : (tensor<1x1x4xf32>) -> tensor<1x1x4xf32>
    tosa.yield %%n, %%t : tensor<i32>, tensor<1x1x4xf32>
  }
  return %%r#1 : tensor<1x1x4xf32>
}""" % const('w', wr, (1, Hd, Hd))
    cases.append(Case('rnn_while_f32', body, [((1, 1, Hd), 'f32', xin)], [((1, 1, Hd), 'f32', [f32(v) for v in hstate])],
                      tol=1e-5))
    return cases

COND_IF_BODY = """func.func @%s(%%c: tensor<1xi1>, %%a: tensor<4xf32>) -> tensor<4xf32> {
  %%r = tosa.cond_if %%c (%%x = %%a) : tensor<1xi1> (tensor<4xf32>) -> tensor<4xf32> {
  ^bb0(%%x: tensor<4xf32>):
    %%0 = tosa.add %%x, %%x : (tensor<4xf32>, tensor<4xf32>) -> tensor<4xf32>
    tosa.yield %%0 : tensor<4xf32>
  } else {
  ^bb0(%%x: tensor<4xf32>):
    %%0 = tosa.sub %%x, %%x : (tensor<4xf32>, tensor<4xf32>) -> tensor<4xf32>
    tosa.yield %%0 : tensor<4xf32>
  }
  return %%r : tensor<4xf32>
}"""


def group_control():
    """Host control flow: tosa.cond_if and tosa.while_loop, whose conditions the
    host program reads back from the device."""
    cases = []
    a = values((4,), 'f32', 108)
    cases.append(Case('cond_if_true_f32', COND_IF_BODY % 'cond_if_true_f32', [((1,), 'i1', [1]), ((4,), 'f32', a)],
                      [((4,), 'f32', [2 * v for v in a])]))
    cases.append(Case('cond_if_false_f32', COND_IF_BODY % 'cond_if_false_f32', [((1,), 'i1', [0]), ((4,), 'f32', a)],
                      [((4,), 'f32', [0.0] * 4)]))
    # A rank-0 condition the graph computes (sum > 0), two results, and a branch
    # that passes an argument through.
    for name, seed in (('cond_if_computed_pos', 111), ('cond_if_computed_neg', 112)):
        x = values((4,), 'f32', seed)
        y = values((4,), 'f32', seed + 10)
        go = sum(x) > 0
        if go:
            want = ([v * 2 for v in x], y)
        else:
            want = ([u - v for u, v in zip(x, y)], [v + 1 for v in y])
        body = """func.func @%s(%%x: tensor<4xf32>, %%y: tensor<4xf32>) -> (tensor<4xf32>, tensor<4xf32>) {
  %%zero = "tosa.const"() {values = dense<0.0> : tensor<f32>} : () -> tensor<f32>
  %%one = "tosa.const"() {values = dense<1.0> : tensor<4xf32>} : () -> tensor<4xf32>
  %%s = tosa.reduce_sum %%x {axis = 0 : i32} : (tensor<4xf32>) -> tensor<1xf32>
  %%shape = tosa.const_shape {values = dense<> : tensor<0xindex>} : () -> !tosa.shape<0>
  %%s0 = tosa.reshape %%s, %%shape : (tensor<1xf32>, !tosa.shape<0>) -> tensor<f32>
  %%c = tosa.greater %%s0, %%zero : (tensor<f32>, tensor<f32>) -> tensor<i1>
  %%r:2 = tosa.cond_if %%c (%%p = %%x, %%q = %%y) : tensor<i1> (tensor<4xf32>, tensor<4xf32>) -> (tensor<4xf32>, tensor<4xf32>) {
  ^bb0(%%p: tensor<4xf32>, %%q: tensor<4xf32>):
    %%0 = tosa.add %%p, %%p : (tensor<4xf32>, tensor<4xf32>) -> tensor<4xf32>
    tosa.yield %%0, %%q : tensor<4xf32>, tensor<4xf32>
  } else {
  ^bb0(%%p: tensor<4xf32>, %%q: tensor<4xf32>):
    %%0 = tosa.sub %%p, %%q : (tensor<4xf32>, tensor<4xf32>) -> tensor<4xf32>
    %%1 = tosa.add %%q, %%one : (tensor<4xf32>, tensor<4xf32>) -> tensor<4xf32>
    tosa.yield %%0, %%1 : tensor<4xf32>, tensor<4xf32>
  }
  return %%r#0, %%r#1 : tensor<4xf32>, tensor<4xf32>
}""" % name
        cases.append(Case(name, body, [((4,), 'f32', x), ((4,), 'f32', y)],
                          [((4,), 'f32', want[0]), ((4,), 'f32', want[1])]))
    # A counted loop on i16 state whose trip count is an input: 0 trips returns
    # the initial value; 5 trips, and an if inside the body (odd/even steps).
    for name, n in (('while_zero_trips_i16', 0), ('while_if_body_i16', 5)):
        h = [1, -2, 3, 5, 7]
        for i in range(n):
            h = [v + 3 for v in h] if i % 2 == 0 else [v * 2 for v in h]
        body = """func.func @%s(%%n: tensor<1xi32>, %%h0: tensor<5xi16>) -> tensor<5xi16> {
  %%i0 = "tosa.const"() {values = dense<0> : tensor<1xi32>} : () -> tensor<1xi32>
  %%r:2 = tosa.while_loop (%%i = %%i0, %%h = %%h0) : (tensor<1xi32>, tensor<5xi16>) -> (tensor<1xi32>, tensor<5xi16>) {
    %%go = tosa.greater %%n, %%i : (tensor<1xi32>, tensor<1xi32>) -> tensor<1xi1>
    tosa.yield %%go : tensor<1xi1>
  } do {
  ^bb0(%%i: tensor<1xi32>, %%h: tensor<5xi16>):
    %%one = "tosa.const"() {values = dense<1> : tensor<1xi32>} : () -> tensor<1xi32>
    %%zero = "tosa.const"() {values = dense<0> : tensor<1xi32>} : () -> tensor<1xi32>
    %%bit = tosa.bitwise_and %%i, %%one : (tensor<1xi32>, tensor<1xi32>) -> tensor<1xi32>
    %%even = tosa.equal %%bit, %%zero : (tensor<1xi32>, tensor<1xi32>) -> tensor<1xi1>
    %%next = tosa.cond_if %%even (%%g = %%h) : tensor<1xi1> (tensor<5xi16>) -> tensor<5xi16> {
    ^bb0(%%g: tensor<5xi16>):
      %%three = "tosa.const"() {values = dense<3> : tensor<5xi16>} : () -> tensor<5xi16>
      %%0 = tosa.add %%g, %%three : (tensor<5xi16>, tensor<5xi16>) -> tensor<5xi16>
      tosa.yield %%0 : tensor<5xi16>
    } else {
    ^bb0(%%g: tensor<5xi16>):
      %%0 = tosa.add %%g, %%g : (tensor<5xi16>, tensor<5xi16>) -> tensor<5xi16>
      tosa.yield %%0 : tensor<5xi16>
    }
    %%i1 = tosa.add %%i, %%one : (tensor<1xi32>, tensor<1xi32>) -> tensor<1xi32>
    tosa.yield %%i1, %%next : tensor<1xi32>, tensor<5xi16>
  }
  return %%r#1 : tensor<5xi16>
}""" % name
        cases.append(Case(name, body, [((1,), 'i32', [n]), ((5,), 'i16', [1, -2, 3, 5, 7])], [((5,), 'i16', h)]))
    # scf.if (as StableHLO-style lowerings write it) on a condition computed from
    # an element of the input: the comparison runs in a kernel of its own.
    for name, first in (('scf_if_scalar_condition_pos', 1.5), ('scf_if_scalar_condition_neg', -1.5)):
        x = [first, 2.0, -3.25, 4.0]
        want = x if first > 0 else [-v for v in x]
        body = """func.func @%s(%%a: tensor<4xf32>) -> tensor<4xf32> {
  %%c0 = arith.constant 0 : index
  %%x = tensor.extract %%a[%%c0] : tensor<4xf32>
  %%z = arith.constant 0.0 : f32
  %%p = arith.cmpf ogt, %%x, %%z : f32
  %%r = scf.if %%p -> tensor<4xf32> {
    scf.yield %%a : tensor<4xf32>
  } else {
    %%n = arith.negf %%a : tensor<4xf32>
    scf.yield %%n : tensor<4xf32>
  }
  return %%r : tensor<4xf32>
}""" % name
        cases.append(Case(name, body, [((4,), 'f32', x)], [((4,), 'f32', want)]))
    # Nested loops: for i < 2 { for j < 3 { acc += x } ; acc *= 0.5 }.
    x = values((3,), 'f32', 113)
    acc = [0.0] * 3
    for _ in range(2):
        for _ in range(3):
            acc = [u + v for u, v in zip(acc, x)]
        acc = [u * 0.5 for u in acc]
    body = """func.func @while_nested_f32(%x: tensor<3xf32>) -> tensor<3xf32> {
  %i0 = "tosa.const"() {values = dense<0> : tensor<i32>} : () -> tensor<i32>
  %a0 = "tosa.const"() {values = dense<0.0> : tensor<3xf32>} : () -> tensor<3xf32>
  %r:2 = tosa.while_loop (%i = %i0, %a = %a0) : (tensor<i32>, tensor<3xf32>) -> (tensor<i32>, tensor<3xf32>) {
    %two = "tosa.const"() {values = dense<2> : tensor<i32>} : () -> tensor<i32>
    %go = tosa.greater %two, %i : (tensor<i32>, tensor<i32>) -> tensor<i1>
    tosa.yield %go : tensor<i1>
  } do {
  ^bb0(%i: tensor<i32>, %a: tensor<3xf32>):
    %s:2 = tosa.while_loop (%j = %i0, %b = %a) : (tensor<i32>, tensor<3xf32>) -> (tensor<i32>, tensor<3xf32>) {
      %three = "tosa.const"() {values = dense<3> : tensor<i32>} : () -> tensor<i32>
      %go = tosa.greater %three, %j : (tensor<i32>, tensor<i32>) -> tensor<i1>
      tosa.yield %go : tensor<i1>
    } do {
    ^bb0(%j: tensor<i32>, %b: tensor<3xf32>):
      %one = "tosa.const"() {values = dense<1> : tensor<i32>} : () -> tensor<i32>
      %j1 = tosa.add %j, %one : (tensor<i32>, tensor<i32>) -> tensor<i32>
      %b1 = tosa.add %b, %x : (tensor<3xf32>, tensor<3xf32>) -> tensor<3xf32>
      tosa.yield %j1, %b1 : tensor<i32>, tensor<3xf32>
    }
    %half = "tosa.const"() {values = dense<0.5> : tensor<3xf32>} : () -> tensor<3xf32>
    %shift = "tosa.const"() {values = dense<0> : tensor<1xi8>} : () -> tensor<1xi8>
    %h = tosa.mul %s#1, %half, %shift : (tensor<3xf32>, tensor<3xf32>, tensor<1xi8>) -> tensor<3xf32>
    %one = "tosa.const"() {values = dense<1> : tensor<i32>} : () -> tensor<i32>
    %i1 = tosa.add %i, %one : (tensor<i32>, tensor<i32>) -> tensor<i32>
    tosa.yield %i1, %h : tensor<i32>, tensor<3xf32>
  }
  return %r#1 : tensor<3xf32>
}"""
    cases.append(Case('while_nested_f32', body, [((3,), 'f32', x)], [((3,), 'f32', acc)]))
    return cases


def group_dynamic():
    """Dynamic dimensions: batch and sequence sizes read from the inputs per call."""
    cases = []
    T = lambda *dims: 'tensor<%s>' % 'x'.join([str(d) for d in dims[:-1]] + [dims[-1]])

    def case(name, sig, result, lines, inputs, outputs, tol=None):
        body = 'func.func @%s(%s) -> %s {\n%s\n}' % (name, sig, result, '\n'.join('  ' + l for l in lines))
        cases.append(Case(name, body.replace('%%', '%'), inputs, outputs, tol))

    # Elementwise on a dynamic batch: the same batch, then a batch of 1 broadcast.
    for name, bb in (('dyn_add_tanh_batch', 3), ('dyn_broadcast_batch', 1)):
        a = values((3, 16), 'f32', 201)
        b = values((bb, 16), 'f32', 202)
        out = [f32(math.tanh(a[i] + b[(i // 16 if bb > 1 else 0) * 16 + i % 16])) for i in range(48)]
        case(name, '%%a: %s, %%b: %s' % (T('?', 16, 'f32'), T('?', 16, 'f32')), T('?', 16, 'f32'),
             ['%%0 = tosa.add %%a, %%b : (%s, %s) -> %s' % (T('?', 16, 'f32'), T('?', 16, 'f32'), T('?', 16, 'f32')),
              '%%1 = tosa.tanh %%0 : (%s) -> %s' % (T('?', 16, 'f32'), T('?', 16, 'f32')),
              'return %%1 : %s' % T('?', 16, 'f32')],
             [((3, 16), 'f32', a), ((bb, 16), 'f32', b)], [((3, 16), 'f32', out)], 1e-5)
    # Two dynamic dimensions, i32.
    a = values((2, 5), 'i32', 203)
    b = values((2, 5), 'i32', 204)
    case('dyn_2d_sub_i32', '%%a: %s, %%b: %s' % (T('?', '?', 'i32'), T('?', '?', 'i32')), T('?', '?', 'i32'),
         ['%%0 = tosa.sub %%a, %%b : (%s, %s) -> %s' % (T('?', '?', 'i32'), T('?', '?', 'i32'), T('?', '?', 'i32')),
          'return %%0 : %s' % T('?', '?', 'i32')],
         [((2, 5), 'i32', a), ((2, 5), 'i32', b)], [((2, 5), 'i32', [x - y for x, y in zip(a, b)])])
    # A dynamic i8 vector of odd length (the host pads it to whole words).
    a = values((5,), 'i8', 205)
    case('dyn_add_i8_odd', '%%a: %s' % T('?', 'i8'), T('?', 'i8'),
         ['%%0 = tosa.add %%a, %%a : (%s, %s) -> %s' % (T('?', 'i8'), T('?', 'i8'), T('?', 'i8')),
          'return %%0 : %s' % T('?', 'i8')],
         [((5,), 'i8', a)], [((5,), 'i8', [2 * x for x in a])])
    # Batched matmul with a dynamic batch.
    B, M, K, N = 2, 3, 4, 5
    x = values((B, M, K), 'f32', 206)
    w = values((B, K, N), 'f32', 207)
    out = [sum(x[(b * M + i) * K + k] * w[(b * K + k) * N + j] for k in range(K))
           for b in range(B) for i in range(M) for j in range(N)]
    case('dyn_matmul_batch', '%%x: %s, %%w: %s' % (T('?', M, K, 'f32'), T('?', K, N, 'f32')), T('?', M, N, 'f32'),
         ['%%zp = "tosa.const"() {values = dense<0.0> : tensor<1xf32>} : () -> tensor<1xf32>',
          '%%0 = tosa.matmul %%x, %%w, %%zp, %%zp : (%s, %s, tensor<1xf32>, tensor<1xf32>) -> %s'
          % (T('?', M, K, 'f32'), T('?', K, N, 'f32'), T('?', M, N, 'f32')),
          'return %%0 : %s' % T('?', M, N, 'f32')],
         [((B, M, K), 'f32', x), ((B, K, N), 'f32', w)], [((B, M, N), 'f32', out)], 1e-5)
    # linalg.matmul with a dynamic sequence length (M), as torch-mlir writes it.
    S, K, N = 7, 8, 6
    x = values((S, K), 'f32', 208)
    w = small_weights(K * N, 209)
    out = [sum(x[i * K + k] * w[k * N + j] for k in range(K)) for i in range(S) for j in range(N)]
    case('dyn_linalg_matmul_seq', '%%x: %s' % T('?', K, 'f32'), T('?', N, 'f32'),
         ['%%c0 = arith.constant 0 : index',
          '%%s = tensor.dim %%x, %%c0 : %s' % T('?', K, 'f32'),
          '%%w = arith.constant %s' % dense(w, (K, N), 'f32'),
          '%%z = arith.constant 0.0 : f32',
          '%%e = tensor.empty(%%s) : %s' % T('?', N, 'f32'),
          '%%f = linalg.fill ins(%%z : f32) outs(%%e : %s) -> %s' % (T('?', N, 'f32'), T('?', N, 'f32')),
          '%%m = linalg.matmul ins(%%x, %%w : %s, %s) outs(%%f : %s) -> %s'
          % (T('?', K, 'f32'), T(K, N, 'f32'), T('?', N, 'f32'), T('?', N, 'f32')),
          'return %%m : %s' % T('?', N, 'f32')],
         [((S, K), 'f32', x)], [((S, N), 'f32', out)], 1e-5)
    # Softmax over a dynamic sequence: max, exp, sum, reciprocal.
    R, S = 2, 9
    x = values((R, S), 'f32', 210)
    out = []
    for r in range(R):
        row = x[r * S:(r + 1) * S]
        m = max(row)
        e = [math.exp(v - m) for v in row]
        out += [v / sum(e) for v in e]
    t, t1 = T(R, '?', 'f32'), T(R, 1, 'f32')
    case('dyn_softmax_seq', '%%x: %s' % t, t,
         ['%%m = tosa.reduce_max %%x {axis = 1 : i32} : (%s) -> %s' % (t, t1),
          '%%d = tosa.sub %%x, %%m : (%s, %s) -> %s' % (t, t1, t),
          '%%e = tosa.exp %%d : (%s) -> %s' % (t, t),
          '%%s = tosa.reduce_sum %%e {axis = 1 : i32} : (%s) -> %s' % (t, t1),
          '%%r = tosa.reciprocal %%s : (%s) -> %s' % (t1, t1),
          '%%shift = "tosa.const"() {values = dense<0> : tensor<1xi8>} : () -> tensor<1xi8>',
          '%%o = tosa.mul %%e, %%r, %%shift : (%s, %s, tensor<1xi8>) -> %s' % (t, t1, t),
          'return %%o : %s' % t],
         [((R, S), 'f32', x)], [((R, S), 'f32', out)], 1e-5)
    # Concatenation and transposition with a dynamic batch.
    a = values((3, 4), 'f32', 211)
    b = values((3, 2), 'f32', 212)
    out = []
    for i in range(3):
        out += a[i * 4:(i + 1) * 4] + b[i * 2:(i + 1) * 2]
    case('dyn_concat_batch', '%%a: %s, %%b: %s' % (T('?', 4, 'f32'), T('?', 2, 'f32')), T('?', 6, 'f32'),
         ['%%0 = tosa.concat %%a, %%b {axis = 1 : i32} : (%s, %s) -> %s' % (T('?', 4, 'f32'), T('?', 2, 'f32'), T('?', 6, 'f32')),
          'return %%0 : %s' % T('?', 6, 'f32')],
         [((3, 4), 'f32', a), ((3, 2), 'f32', b)], [((3, 6), 'f32', out)])
    a = values((3, 5), 'f16', 213)
    case('dyn_transpose_f16', '%%a: %s' % T('?', 5, 'f16'), T(5, '?', 'f16'),
         ['%%0 = tosa.transpose %%a {perms = array<i32: 1, 0>} : (%s) -> %s' % (T('?', 5, 'f16'), T(5, '?', 'f16')),
          'return %%0 : %s' % T(5, '?', 'f16')],
         [((3, 5), 'f16', a)], [((5, 3), 'f16', [a[i * 5 + j] for j in range(5) for i in range(3)])])
    # A convolution over a dynamic batch of images.
    Bn, H, W, C, F = 2, 5, 5, 3, 4
    img = values((Bn, H, W, C), 'f32', 214)
    wt = small_weights(F * 3 * 3 * C, 215)
    bias = small_weights(F, 216)
    out = []
    for b in range(Bn):
        out += ref_conv(img[b * H * W * C:(b + 1) * H * W * C], H, W, C, wt, F, 3, bias, 1)
    ti, to = T('?', H, W, C, 'f32'), T('?', H, W, F, 'f32')
    case('dyn_conv_batch', '%%x: %s' % ti, to,
         [const('w', wt, (F, 3, 3, C)), const('b', bias, (F,)),
          '%%zp = "tosa.const"() {values = dense<0.0> : tensor<1xf32>} : () -> tensor<1xf32>',
          '%%0 = tosa.conv2d %%x, %%w, %%b, %%zp, %%zp {acc_type = f32, dilation = array<i64: 1, 1>, pad = array<i64: 1, 1, 1, 1>, stride = array<i64: 1, 1>} : (%s, %s, %s, tensor<1xf32>, tensor<1xf32>) -> %s'
          % (ti, T(F, 3, 3, C, 'f32'), T(F, 'f32'), to),
          'return %%0 : %s' % to],
         [((Bn, H, W, C), 'f32', img)], [((Bn, H, W, F), 'f32', out)], 1e-4)
    return cases


# The 8-bit floats, defined by their parameters: (exponent bits, mantissa bits,
# bias, kind). Values come from enumerating every code (independent of kiln's
# bit-level helpers); rounding picks the nearest code, ties to an even mantissa.
F8 = {
    'f8E4M3FN': (4, 3, 7, 'fn'),
    'f8E5M2': (5, 2, 15, 'ieee'),
    'f8E5M2FNUZ': (5, 2, 16, 'fnuz'),
    'f8E4M3FNUZ': (4, 3, 8, 'fnuz'),
}


def f8_value(fmt, code):
    e, m, bias, kind = F8[fmt]
    exp, man, neg = (code >> m) & ((1 << e) - 1), code & ((1 << m) - 1), code & 0x80
    if kind == 'fnuz' and code == 0x80:
        return math.nan
    if kind == 'fn' and code & 0x7F == 0x7F:
        return math.nan
    if kind == 'ieee' and exp == (1 << e) - 1:
        return math.nan if man else (-math.inf if neg else math.inf)
    v = math.ldexp(man, 1 - bias - m) if exp == 0 else math.ldexp(man + (1 << m), exp - bias - m)
    return -v if neg else v


def f8_round(fmt, x):
    """f32 -> the format's value, rounding to nearest with ties to an even code, as
    APFloat does; a magnitude nearest the code past the largest finite one
    overflows (to infinity, or NaN where the format has none)."""
    e, m, bias, kind = F8[fmt]
    if math.isnan(x):
        return math.nan
    mag = abs(x)
    finite = [(c, f8_value(fmt, c)) for c in range(128)]
    finite = [(c, v) for c, v in finite if not math.isnan(v) and not math.isinf(v)]
    top_code, top = max(finite, key=lambda cv: cv[1])
    ulp = math.ldexp(1, (top_code >> m) - bias - m)
    cands = finite + [(top_code + 1, top + ulp)]
    best = None
    for c, v in cands:
        d = abs(v - mag)
        if best is None or d < best[0] or (d == best[0] and c % 2 == 0 and best[1] % 2 == 1):
            best = (d, c, v)
    if best[1] == top_code + 1:
        return math.copysign(math.inf, x) if kind == 'ieee' else math.nan
    v = best[2]
    if kind == 'fnuz':
        return v if v == 0 else math.copysign(v, x)
    return math.copysign(v, x)


F4 = [0.0, 0.5, 1.0, 1.5, 2.0, 3.0, 4.0, 6.0]


def f4_code(x):
    """f32 -> f4E2M1FN's code (sign in bit 3), nearest with ties to an even code."""
    mag = abs(x)
    best = min(range(8), key=lambda c: (abs(F4[c] - mag), c % 2))
    return (8 if math.copysign(1.0, x) < 0 else 0) | best


# The 6-bit floats (OCP MX): (exponent bits, mantissa bits, bias); no infinity,
# no NaN. Their values, from enumerating the 32 magnitudes.
F6 = {'f6E2M3FN': (2, 3, 1), 'f6E3M2FN': (3, 2, 3)}


def f6_values(fmt):
    e, m, bias = F6[fmt]
    out = []
    for code in range(32):
        exp, man = code >> m, code & ((1 << m) - 1)
        out.append(math.ldexp(man, 1 - bias - m) if exp == 0 else math.ldexp(man + (1 << m), exp - bias - m))
    return out


def f6_round(fmt, x):
    """f32 -> the f6 value nearest, ties to an even code, saturating at the largest
    (which a NaN becomes too: f6 has none)."""
    vals = f6_values(fmt)
    if math.isnan(x):
        return vals[31]
    best = min(range(32), key=lambda c: (abs(vals[c] - abs(x)), c % 2))
    return math.copysign(vals[best], x)


def mxint8_code(q):
    """x / scale -> mxint8's integer: round(q * 64) to nearest even, within +-127."""
    if math.isnan(q):
        return 0
    return max(-127, min(127, round(q * 64)))  # Python's round() ties to even


def block_scaled_ref(fmt, xs, bs):
    """TOSA 1.1 CAST_TO_BLOCK_SCALED over blocks of `bs` consecutive values: the data
    (f8 and f6 values, f4 codes as i4, mxint8's integers) and the E8M0 scales."""
    normal_max, frac = {'f8E4M3FN': (448.0, 3), 'f8E5M2': (57344.0, 2), 'f4E2M1FN': (6.0, 1),
                        'f6E2M3FN': (7.5, 3), 'f6E3M2FN': (28.0, 2), 'mxint8': (127 / 64, 6)}[fmt]
    r = normal_max + 0.5 * 2.0 ** (math.floor(math.log2(normal_max)) - frac)
    data, scales = [], []
    for b in range(0, len(xs), bs):
        block = xs[b:b + bs]
        m = math.nan if any(math.isnan(v) for v in block) else max(abs(v) for v in block)
        if m == 0:
            s = 2.0 ** -127
        elif math.isnan(m) or math.isinf(m):
            s = math.nan
        else:
            e = math.ceil(math.log2(m / r)) if fmt == 'f8E4M3FN' else math.floor(math.log2(m / r)) + 1
            s = 2.0 ** max(-127, min(127, e))
        scales.append(s)
        for v in block:
            q = v / s
            if fmt == 'f4E2M1FN':
                c = f4_code(q)
                data.append(c - 16 if c >= 8 else c)
            elif fmt in F6:
                data.append(f6_round(fmt, q))
            elif fmt == 'mxint8':
                data.append(mxint8_code(q))
            else:
                data.append(f8_round(fmt, q))
    return data, scales


def group_narrow():
    """8-bit floats, 4-bit floats with their scales, and packed i2/i4 (issue 15, class 6)."""
    cases = []

    def generic(name, args, result, in_t, out_t, line, inputs, outputs):
        body = """func.func @%s(%s) -> %s {
  %%e = tensor.empty() : %s
  %%r = linalg.generic {indexing_maps = [%s], iterator_types = ["parallel"]}
      ins(%s : %s) outs(%%e : %s) {
  ^bb0(%s, %%o: %s):
    %s
    linalg.yield %%y : %s
  } -> %s
  return %%r : %s
}""" % (name, ', '.join('%%a%d: %s' % (i, a) for i, a in enumerate(args)), result, result,
            ', '.join(['affine_map<(d0) -> (d0)>'] * (len(args) + 1)),
            ', '.join('%%a%d' % i for i in range(len(args))), ', '.join(args), result,
            ', '.join('%%x%d: %s' % (i, t) for i, t in enumerate(in_t)), out_t, line, out_t, result, result)
        cases.append(Case(name, body, inputs, outputs))

    specials = {
        'f8E4M3FN': [1.5, -0.25, 448.0, math.ldexp(1, -9), 3.25, -0.0, math.ldexp(7, -9)],
        'f8E5M2': [1.5, -0.3125, 57344.0, math.ldexp(1, -16), 3.5, -0.0, math.inf],
        'f8E5M2FNUZ': [1.5, -0.3125, 57344.0, math.ldexp(1, -17), 3.5, 0.0, -2.0],
        'f8E4M3FNUZ': [1.5, -0.25, 240.0, math.ldexp(1, -10), 3.25, 0.0, -2.0],
    }
    for fmt in F8:
        vals = specials[fmt]
        n = len(vals)
        generic('extf_%s' % fmt, ['tensor<%dx%s>' % (n, fmt)], 'tensor<%dxf32>' % n, [fmt], 'f32',
                '%%y = arith.extf %%x0 : %s to f32' % fmt, [((n,), fmt, vals)], [((n,), 'f32', vals)])
        src = [1.5, -0.3, 60000.0, 1e-6, 3.3, 0.0625 * 1.0625, 1000.0, -1e-3, 0.5 + 0.0625 / 2]
        n = len(src)
        generic('truncf_%s' % fmt, ['tensor<%dxf32>' % n], 'tensor<%dx%s>' % (n, fmt), ['f32'], fmt,
                '%%y = arith.truncf %%x0 : f32 to %s' % fmt, [((n,), 'f32', [f32(v) for v in src])],
                [((n,), fmt, [f8_round(fmt, f32(v)) for v in src])])
        a = [0.5, 1.5, -2.0, 3.0, 0.125]
        b = [0.25, 1.75, 2.5, -1.0, 0.125]
        generic('add_%s' % fmt, ['tensor<5x%s>' % fmt, 'tensor<5x%s>' % fmt], 'tensor<5x%s>' % fmt, [fmt, fmt], fmt,
                '%%y = arith.addf %%x0, %%x1 : %s' % fmt, [((5,), fmt, a), ((5,), fmt, b)],
                [((5,), fmt, [f8_round(fmt, x + y) for x, y in zip(a, b)])])
    # f8E8M0FNU: a power of two per code.
    vals = [1.0, 2.0, 0.5, math.ldexp(1, -127), math.ldexp(1, 127)]
    generic('extf_f8E8M0FNU', ['tensor<5xf8E8M0FNU>'], 'tensor<5xf32>', ['f8E8M0FNU'], 'f32',
            '%y = arith.extf %x0 : f8E8M0FNU to f32', [((5,), 'f8E8M0FNU', vals)], [((5,), 'f32', vals)])
    # MX scaling: 4-bit floats (their bits arrive as packed i4) times an E8M0 scale.
    codes = [1, 10, 3, 7, 15, 0, 12, 5]
    scales = [1.0, 2.0, 0.5, 4.0, 1.0, 8.0, 0.25, 2.0]
    f4 = [(-1 if c & 8 else 1) * F4[c & 7] for c in codes]
    body = """func.func @scaling_extf_f4(%a: tensor<8xi4>, %s: tensor<8xf8E8M0FNU>) -> tensor<8xf32> {
  %f = arith.bitcast %a : tensor<8xi4> to tensor<8xf4E2M1FN>
  %e = tensor.empty() : tensor<8xf32>
  %r = linalg.generic {indexing_maps = [affine_map<(d0) -> (d0)>, affine_map<(d0) -> (d0)>, affine_map<(d0) -> (d0)>], iterator_types = ["parallel"]}
      ins(%f, %s : tensor<8xf4E2M1FN>, tensor<8xf8E8M0FNU>) outs(%e : tensor<8xf32>) {
  ^bb0(%x: f4E2M1FN, %k: f8E8M0FNU, %o: f32):
    %y = arith.scaling_extf %x, %k : f4E2M1FN, f8E8M0FNU to f32
    linalg.yield %y : f32
  } -> tensor<8xf32>
  return %r : tensor<8xf32>
}"""
    cases.append(Case('scaling_extf_f4', body, [((8,), 'i4', [c - 16 if c >= 8 else c for c in codes]),
                                                ((8,), 'f8E8M0FNU', scales)],
                      [((8,), 'f32', [v * k for v, k in zip(f4, scales)])]))
    # scaling_truncf to f4 (values whose quotients f4 holds exactly), its bits out as i4.
    xs = [1.0, -12.0, 24.0, 0.25, -0.75, 3.0]
    ks = [1.0, 4.0, 4.0, 0.5, 0.5, 0.5]
    q = [x / k for x, k in zip(xs, ks)]
    code = lambda v: (8 if v < 0 else 0) | F4.index(abs(v))
    body = """func.func @scaling_truncf_f4(%a: tensor<6xf32>, %s: tensor<6xf8E8M0FNU>) -> tensor<6xi4> {
  %e = tensor.empty() : tensor<6xf4E2M1FN>
  %r = linalg.generic {indexing_maps = [affine_map<(d0) -> (d0)>, affine_map<(d0) -> (d0)>, affine_map<(d0) -> (d0)>], iterator_types = ["parallel"]}
      ins(%a, %s : tensor<6xf32>, tensor<6xf8E8M0FNU>) outs(%e : tensor<6xf4E2M1FN>) {
  ^bb0(%x: f32, %k: f8E8M0FNU, %o: f4E2M1FN):
    %y = arith.scaling_truncf %x, %k : f32, f8E8M0FNU to f4E2M1FN
    linalg.yield %y : f4E2M1FN
  } -> tensor<6xf4E2M1FN>
  %b = arith.bitcast %r : tensor<6xf4E2M1FN> to tensor<6xi4>
  return %b : tensor<6xi4>
}"""
    cases.append(Case('scaling_truncf_f4', body, [((6,), 'f32', xs), ((6,), 'f8E8M0FNU', ks)],
                      [((6,), 'i4', [c - 16 if c >= 8 else c for c in (code(v) for v in q)])]))
    # f32 -> f4E2M1FN rounds to nearest even (ties 1.25, 2.5, 5.0 go to the even code),
    # keeps the sign of a zero, and saturates past 6.
    src = [1.25, 2.5, 5.0, -0.0, -0.1, 0.25, 0.75, 100.0, -7.0, 3.5, 0.3, -1.75]
    n = len(src)
    body = """func.func @truncf_f4E2M1FN(%%a: tensor<%dxf32>) -> tensor<%dxi4> {
  %%e = tensor.empty() : tensor<%dxf4E2M1FN>
  %%r = linalg.generic {indexing_maps = [affine_map<(d0) -> (d0)>, affine_map<(d0) -> (d0)>], iterator_types = ["parallel"]}
      ins(%%a : tensor<%dxf32>) outs(%%e : tensor<%dxf4E2M1FN>) {
  ^bb0(%%x: f32, %%o: f4E2M1FN):
    %%y = arith.truncf %%x : f32 to f4E2M1FN
    linalg.yield %%y : f4E2M1FN
  } -> tensor<%dxf4E2M1FN>
  %%b = arith.bitcast %%r : tensor<%dxf4E2M1FN> to tensor<%dxi4>
  return %%b : tensor<%dxi4>
}""" % ((n,) * 9)
    cases.append(Case('truncf_f4E2M1FN', body, [((n,), 'f32', src)],
                      [((n,), 'i4', [c - 16 if c >= 8 else c for c in (f4_code(v) for v in src)])]))
    # Packed i4 and i2 arithmetic (wrapping), and conversions to and from i8.
    a = [1, 2, 3, -1, -8, 7, 5, -3, 6]
    b = [1, 1, 4, -2, -1, 1, 5, -6, -7]
    wrap4 = lambda v: ((v + 8) % 16) - 8
    wrap2 = lambda v: ((v + 2) % 4) - 2
    for op, fn in (('addi', lambda x, y: x + y), ('muli', lambda x, y: x * y), ('subi', lambda x, y: x - y)):
        generic('%s_i4_9' % op, ['tensor<9xi4>', 'tensor<9xi4>'], 'tensor<9xi4>', ['i4', 'i4'], 'i4',
                '%%y = arith.%s %%x0, %%x1 : i4' % op, [((9,), 'i4', a), ((9,), 'i4', b)],
                [((9,), 'i4', [wrap4(fn(x, y)) for x, y in zip(a, b)])])
    generic('maxsi_i4_9', ['tensor<9xi4>', 'tensor<9xi4>'], 'tensor<9xi4>', ['i4', 'i4'], 'i4',
            '%y = arith.maxsi %x0, %x1 : i4', [((9,), 'i4', a), ((9,), 'i4', b)],
            [((9,), 'i4', [max(x, y) for x, y in zip(a, b)])])
    generic('divui_i4_9', ['tensor<9xi4>', 'tensor<9xi4>'], 'tensor<9xi4>', ['i4', 'i4'], 'i4',
            '%y = arith.divui %x0, %x1 : i4', [((9,), 'i4', a), ((9,), 'i4', b)],
            [((9,), 'i4', [wrap4((x % 16) // (y % 16)) for x, y in zip(a, b)])])
    generic('extsi_i4_i8_9', ['tensor<9xi4>'], 'tensor<9xi8>', ['i4'], 'i8',
            '%y = arith.extsi %x0 : i4 to i8', [((9,), 'i4', a)], [((9,), 'i8', a)])
    generic('extui_i4_i32_9', ['tensor<9xi4>'], 'tensor<9xi32>', ['i4'], 'i32',
            '%y = arith.extui %x0 : i4 to i32', [((9,), 'i4', a)], [((9,), 'i32', [x % 16 for x in a])])
    c8 = [17, -20, 7, 100, -128, 15, 8, -9, 0]
    generic('trunci_i8_i4_9', ['tensor<9xi8>'], 'tensor<9xi4>', ['i8'], 'i4',
            '%y = arith.trunci %x0 : i8 to i4', [((9,), 'i8', c8)], [((9,), 'i4', [wrap4(x) for x in c8])])
    generic('cmpi_ult_i4_9', ['tensor<9xi4>', 'tensor<9xi4>'], 'tensor<9xi1>', ['i4', 'i4'], 'i1',
            '%y = arith.cmpi ult, %x0, %x1 : i4', [((9,), 'i4', a), ((9,), 'i4', b)],
            [((9,), 'i1', [int(x % 16 < y % 16) for x, y in zip(a, b)])])
    p = [1, -2, 0, -1, 1, -1, 0]
    q = [1, 1, -2, -1, -2, 0, 1]
    generic('addi_i2_7', ['tensor<7xi2>', 'tensor<7xi2>'], 'tensor<7xi2>', ['i2', 'i2'], 'i2',
            '%y = arith.addi %x0, %x1 : i2', [((7,), 'i2', p), ((7,), 'i2', q)],
            [((7,), 'i2', [wrap2(x + y) for x, y in zip(p, q)])])
    generic('sitofp_i2_f32_7', ['tensor<7xi2>'], 'tensor<7xf32>', ['i2'], 'f32',
            '%y = arith.sitofp %x0 : i2 to f32', [((7,), 'i2', p)], [((7,), 'f32', [float(x) for x in p])])
    return cases


def group_f64():
    """f64 in double precision: arithmetic, every math function (kiln's own code on
    CPUs and AMD, libdevice on CUDA), conversions, a reduction and a matmul."""
    cases = []

    def divide(x, y):
        if y:
            return x / y
        return math.copysign(math.inf, x) if x else math.nan
    # Arithmetic that f32 would get wrong: differences below 2^-24.
    a = [1.0 + 2.0 ** -40, 1e300, -3.5, 0.1, 2.0 ** -1060, 123456789.123456789, -0.0]
    b = [1.0, 1e-300, 1e-17, 0.2, 2.0 ** -10, 1e-9, 0.0]
    for name, op, ref in (('addf', 'arith.addf', lambda x, y: x + y), ('subf', 'arith.subf', lambda x, y: x - y),
                          ('mulf', 'arith.mulf', lambda x, y: x * y), ('divf', 'arith.divf', divide),
                          ('maximumf', 'arith.maximumf', max)):
        c = elementwise('%s_f64' % name, [((7,), 'f64'), ((7,), 'f64')], 'f64', ['%%r = %s %%a0, %%a1 : f64' % op],
                        lambda x, y: 0)
        c.inputs = [((7,), 'f64', a), ((7,), 'f64', b)]
        c.outputs = [((7,), 'f64', [ref(x, y) for x, y in zip(a, b)])]
        c.tol = 1e-15
        cases.append(c)
    # Conversions: f32 <-> f64 (exact one way, rounded the other), i64 <-> f64.
    xs = [1.0 + 2.0 ** -30, -1e-40, 3e38, 1e39, 0.1, -2.5]
    c = elementwise('truncf_f64_f32', [((6,), 'f64')], 'f32', ['%r = arith.truncf %a0 : f64 to f32'], lambda x: 0)
    c.inputs = [((6,), 'f64', xs)]
    c.outputs = [((6,), 'f32', [f32(x) if abs(x) < 3.5e38 else math.inf for x in xs])]
    c.tol = 1e-30
    cases.append(c)
    ys = [f32(v) for v in (0.1, -1e-40, 3e38, 16777217.0, -2.5)]
    c = elementwise('extf_f32_f64', [((5,), 'f32')], 'f64', ['%r = arith.extf %a0 : f32 to f64'], lambda x: 0)
    c.inputs = [((5,), 'f32', ys)]
    c.outputs = [((5,), 'f64', ys)]
    c.tol = 1e-30
    cases.append(c)
    # f64 <-> f16/bf16, one rounding: the f64 just above a half-way point of
    # f16 (bf16) rounds up, where f64 -> f32 -> f16 would land on the tie and go
    # to even.
    def bf16_of_double(x):
        if not math.isfinite(x) or x == 0:
            return x
        m, e = math.frexp(x)
        q = round(Fraction(m) * 256)  # 8 significant bits, ties to even
        v = float(Fraction(q) * Fraction(2) ** (e - 8))
        return v if abs(v) < 3.3895313892515355e38 else math.copysign(math.inf, v)
    hv = [1.0 + 2.0 ** -11 + 2.0 ** -40, -(1.0 + 2.0 ** -11 + 2.0 ** -40), 1.0 + 2.0 ** -11, 65519.99, 65520.0,
          3.0e-8, 0.1, -2.5]
    bv = [1.0 + 2.0 ** -8 + 2.0 ** -40, -(1.0 + 2.0 ** -8 + 2.0 ** -40), 1.0 + 2.0 ** -8, 3.0e38, 0.1, -2.5,
          1e-30, 7.0]
    for et, xs, rnd in (('f16', hv, f16), ('bf16', bv, bf16_of_double)):
        n = len(xs)
        c = elementwise('truncf_f64_%s' % et, [((n,), 'f64')], et, ['%%r = arith.truncf %%a0 : f64 to %s' % et],
                        lambda x: 0)
        c.inputs = [((n,), 'f64', xs)]
        c.outputs = [((n,), et, [rnd(x) for x in xs])]
        c.tol = 1e-30
        cases.append(c)
        ys = [rnd(x) for x in xs]
        c = elementwise('extf_%s_f64' % et, [((n,), et)], 'f64', ['%%r = arith.extf %%a0 : %s to f64' % et],
                        lambda x: 0)
        c.inputs = [((n,), et, ys)]
        c.outputs = [((n,), 'f64', ys)]
        c.tol = 1e-30
        cases.append(c)
    ints = [(1 << 53) + 1, -(1 << 40) - 3, 0, 123456789012345, -1]
    c = elementwise('sitofp_i64_f64', [((5,), 'i64')], 'f64', ['%r = arith.sitofp %a0 : i64 to f64'], lambda x: 0)
    c.inputs = [((5,), 'i64', ints)]
    c.outputs = [((5,), 'f64', [float(v) for v in ints])]
    c.tol = 1e-30
    cases.append(c)
    fl = [2.0 ** 40 + 0.75, -123456789012.9, 0.5, -0.5, 9.007199254740991e15]
    c = elementwise('fptosi_f64_i64', [((5,), 'f64')], 'i64', ['%r = arith.fptosi %a0 : f64 to i64'], lambda x: 0)
    c.inputs = [((5,), 'f64', fl)]
    c.outputs = [((5,), 'i64', [int(v) for v in fl])]
    cases.append(c)
    # Math, one function per case, over arguments that reach each helper's branches.
    gen = [-7.5, -2.75, -0.6, -1e-9, 0.0, 0.3, 1.0 + 1e-12, 2.4, 6.5, 19.25]
    pos = [1e-300, 2.3e-308, 0.001, 0.75, 1.0, 1.0 + 2.0 ** -52, 8.0, 1000.0, 123456.789, 1e300]
    unit = [-1.0, -0.999999, -0.5, -1e-8, 0.0, 0.25, 0.7071067811865476, 0.99, 1.0]

    def exp2(x):
        return 2.0 ** x

    def rsqrt(x):
        return 1 / math.sqrt(x)

    def roundeven(x):
        return float(round(x))
    unary = [
        ('exp', math.exp, gen + [709.5, -740.0, -745.5, 1e-300, math.inf, -math.inf, math.nan]),
        ('exp2', exp2, gen + [1023.5, -1074.0]),
        ('expm1', math.expm1, gen + [1e-10, -40.0, 700.0]),
        ('log', math.log, pos + [0.0, -1.0, math.inf]),
        ('log2', math.log2, pos + [1024.0]),
        ('log10', math.log10, pos),
        ('log1p', math.log1p, [1e-18, -0.5, 3e-9, 0.75, 1e10, -1.0]),
        ('sqrt', math.sqrt, pos), ('rsqrt', rsqrt, pos[2:]),
        ('sin', math.sin, gen + [100.0, 1e6 + 0.5, 4e9, 3.141592653589793, 1e-300]),
        ('cos', math.cos, gen + [100.0, 1e6 + 0.5, 4e9, 1.5707963267948966]),
        ('tan', math.tan, gen + [1.5707963267, 1e5]),
        ('tanh', math.tanh, gen + [1e-12, -30.0]),
        ('sinh', math.sinh, [-5.0, -0.5, 0.125, 2.0, 20.0]), ('cosh', math.cosh, [-5.0, -0.5, 0.125, 2.0, 20.0]),
        ('atan', math.atan, gen + [1e10, -0.41421356, 0.5, 1e-300]),
        ('asin', math.asin, unit), ('acos', math.acos, unit),
        ('erf', math.erf, gen + [0.49, 0.51, 2.49, 2.51, 5.9, 6.1, 1e-10]),
        ('erfc', math.erfc, gen + [0.49, 0.51, 2.49, 2.51, 10.0, 26.0, 30.0, -1.5]),
        ('cbrt', math.cbrt, gen + [27.0, -8.0, 1e-300, 1e300]),
        ('floor', math.floor, gen + [-0.5, 4503599627370495.5, -1e20, -0.0]),
        ('ceil', math.ceil, gen + [-0.5, 4503599627370495.5, -1e20]),
        ('trunc', math.trunc, gen + [-0.5, 4503599627370495.5, 1e20]),
        ('roundeven', roundeven, gen + [2.5, -3.5, 0.5]),
    ]
    for name, ref, xs in unary:
        want = []
        for x in xs:
            if (name == 'log' and x == 0.0) or (name == 'log1p' and x == -1.0):
                v = -math.inf
            elif math.isnan(x):
                v = x
            else:
                try:
                    v = float(ref(x))
                except (ValueError, OverflowError):
                    v = math.nan
            if name in ('floor', 'ceil', 'trunc', 'roundeven') and v == 0:
                v = math.copysign(0.0, x)  # C's: the sign of the argument
            want.append(v)
        n = len(xs)
        cases.append(Case('math_%s_f64' % name, """func.func @math_%s_f64(%%x: tensor<%dxf64>) -> tensor<%dxf64> {
  %%0 = math.%s %%x : tensor<%dxf64>
  return %%0 : tensor<%dxf64>
}""" % (name, n, n, name, n, n), [((n,), 'f64', xs)], [((n,), 'f64', want)], tol=2e-15))
    # Subnormal inputs (log scales them up first). IREE's CPU drivers flush
    # denormals to zero, so its harness leaves the _subnormal cases out.
    sub = [5e-324, 2.0 ** -1070, 1e-310, 2.2e-308]
    cases.append(Case('math_logs_subnormal_f64', """func.func @math_logs_subnormal_f64(%x: tensor<4xf64>) -> (tensor<4xf64>, tensor<4xf64>, tensor<4xf64>) {
  %0 = math.log %x : tensor<4xf64>
  %1 = math.log2 %x : tensor<4xf64>
  %2 = math.log10 %x : tensor<4xf64>
  return %0, %1, %2 : tensor<4xf64>, tensor<4xf64>, tensor<4xf64>
}""", [((4,), 'f64', sub)], [((4,), 'f64', [math.log(x) for x in sub]), ((4,), 'f64', [math.log2(x) for x in sub]),
                          ((4,), 'f64', [math.log10(x) for x in sub])], tol=2e-15))
    # erfc far out, through its logarithm: relative accuracy where erfc < 1e-12.
    xs = [3.0, 5.0, 10.0, 20.0, 26.5]
    cases.append(Case('math_erfc_tail_f64', """func.func @math_erfc_tail_f64(%x: tensor<5xf64>) -> tensor<5xf64> {
  %0 = math.erfc %x : tensor<5xf64>
  %1 = math.log %0 : tensor<5xf64>
  return %1 : tensor<5xf64>
}""", [((5,), 'f64', xs)], [((5,), 'f64', [math.log(math.erfc(x)) for x in xs])], tol=2e-15))
    # Binary: powf, atan2, and remf exactly (huge quotients, subnormals, signs).
    px = [2.0, 10.0, 0.5, 1.0000001, 7.25]
    py = [0.5, -3.0, 100.0, 1e7, 3.0]
    rx = [5.5, -5.5, 1e300, 3.0, 7.25, 1e-310, 9007199254740993.0, -0.0, math.inf, 2.0, 0.1]
    ry = [2.0, 2.0, 3.3, 1e-300, -0.5, 3e-320, 3.0, 1.0, 1.0, 0.0, math.inf]

    def fmod(x, y):
        return math.nan if y == 0 or math.isinf(x) else math.fmod(x, y)
    for name, op, xs, ys, ref, tol in (('powf', 'math.powf', px, py, lambda x, y: x ** y, 1e-13),
                                       ('atan2', 'math.atan2', gen[:5], gen[5:], math.atan2, 2e-15),
                                       ('remf', 'arith.remf', rx, ry, fmod, 1e-300)):
        n = len(xs)
        cases.append(Case('tensor_%s_f64' % name, """func.func @tensor_%s_f64(%%x: tensor<%dxf64>, %%y: tensor<%dxf64>) -> tensor<%dxf64> {
  %%0 = %s %%x, %%y : tensor<%dxf64>
  return %%0 : tensor<%dxf64>
}""" % (name, n, n, n, op, n, n), [((n,), 'f64', xs), ((n,), 'f64', ys)],
            [((n,), 'f64', [ref(x, y) for x, y in zip(xs, ys)])], tol=tol))
    # A reduction and a matmul: sums whose low bits f32 would lose.
    m = [1e8 + v / 7.0 for v in values((3, 7), 'f64', 61)]
    cases.append(Case('reduce_sum_f64_3x7', """func.func @reduce_sum_f64_3x7(%x: tensor<3x7xf64>) -> tensor<3xf64> {
  %z = arith.constant 0.0 : f64
  %e = tensor.empty() : tensor<3xf64>
  %f = linalg.fill ins(%z : f64) outs(%e : tensor<3xf64>) -> tensor<3xf64>
  %r = linalg.reduce ins(%x : tensor<3x7xf64>) outs(%f : tensor<3xf64>) dimensions = [1]
    (%in: f64, %acc: f64) {
      %s = arith.addf %in, %acc : f64
      linalg.yield %s : f64
    }
  return %r : tensor<3xf64>
}""", [((3, 7), 'f64', m)], [((3,), 'f64', [math.fsum(m[r * 7:(r + 1) * 7]) for r in range(3)])], tol=1e-15))
    a = [v + 1e-9 * i for i, v in enumerate(values((3, 5), 'f64', 62))]
    b = [v - 1e-9 * i for i, v in enumerate(values((5, 6), 'f64', 63))]
    c = [math.fsum(a[i * 5 + k] * b[k * 6 + j] for k in range(5)) for i in range(3) for j in range(6)]
    cases.append(Case('matmul_f64_3x5x6', """func.func @matmul_f64_3x5x6(%a: tensor<3x5xf64>, %b: tensor<5x6xf64>) -> tensor<3x6xf64> {
  %z = arith.constant 0.0 : f64
  %e = tensor.empty() : tensor<3x6xf64>
  %f = linalg.fill ins(%z : f64) outs(%e : tensor<3x6xf64>) -> tensor<3x6xf64>
  %r = linalg.matmul ins(%a, %b : tensor<3x5xf64>, tensor<5x6xf64>) outs(%f : tensor<3x6xf64>) -> tensor<3x6xf64>
  return %r : tensor<3x6xf64>
}""", [((3, 5), 'f64', a), ((5, 6), 'f64', b)], [((3, 6), 'f64', c)], tol=1e-14))
    return cases


def group_f64_exact():
    """f64 bit for bit: + - * / sqrt, roundings, conversions, comparisons, min, max.

    IEEE defines these results exactly; over special values and random bit
    patterns, kiln's integer f64 (the Vulkan profiles) must reproduce them as
    every other backend's hardware does. Python's floats are the reference. Also
    fma (within a tolerance: the integer f64 rounds twice) and fpowi."""
    def bits_to_f(u):
        return struct.unpack('<d', struct.pack('<Q', u & ((1 << 64) - 1)))[0]
    special = [0.0, -0.0, math.inf, -math.inf, math.nan, 5e-324, -5e-324, 2.2250738585072014e-308,
               2.225073858507201e-308, 1.7976931348623157e308, -1.7976931348623157e308, 1.0, -1.0,
               1.0 + 2.0 ** -52, 1.0 - 2.0 ** -53, 2.0 ** -53, 0.5, 3.0, 0.1, -2.5, 1e-300, 1e300]
    state = [0x9E3779B97F4A7C15]

    def rnd():
        state[0] = (state[0] * 6364136223846793005 + 1442695040888963407) % (1 << 64)
        return state[0] >> 1 ^ (state[0] << 7) % (1 << 64)

    def rnd_float(near=None):
        u = rnd()
        if near is None:
            return bits_to_f(u)  # any exponent, NaNs and subnormals included
        e = (near + u % 61 - 30) % 2047  # an exponent close to `near`
        return bits_to_f((u & ((1 << 63) | ((1 << 52) - 1))) | (e << 52))
    xs, ys = [], []
    for a in special[:12]:
        for b in special[:12]:
            xs.append(a)
            ys.append(b)
    for i in range(120):
        if i % 3 == 0:
            xs.append(rnd_float())
            ys.append(rnd_float())
        else:
            e = rnd() % 2047
            xs.append(rnd_float(e))
            ys.append(rnd_float(e))
    # ties and carries: 1 + half an ulp (to even), 1+ulp + half an ulp (up)
    xs += [1.0, 1.0 + 2.0 ** -52, 2.0 ** 1023, 2.0 ** -1022, 3.0 * 2.0 ** -1074]
    ys += [2.0 ** -53, 2.0 ** -53, 2.0 ** 1023, -2.0 ** -1022 * (1 - 2.0 ** -52), 0.5]
    n = len(xs)

    def quotient(x, y):
        if y == 0:
            if x == 0 or math.isnan(x):
                return math.nan
            return math.copysign(math.inf, x) * math.copysign(1.0, y)
        return x / y

    def root(x):
        return math.nan if x < 0 else math.sqrt(x)

    def order(x, y, nan_wins, pick_max):
        if math.isnan(x) or math.isnan(y):
            return math.nan if nan_wins or (math.isnan(x) and math.isnan(y)) else (y if math.isnan(x) else x)
        if x == y:  # -0 below +0
            return (x if math.copysign(1, x) > math.copysign(1, y) else y) if pick_max else \
                (x if math.copysign(1, x) < math.copysign(1, y) else y)
        return max(x, y) if pick_max else min(x, y)
    cases = []

    def exact(name, ins, out_et, lines, want):
        c = elementwise(name, [((n,), t) for t, _ in ins], out_et, lines, lambda *a: 0)
        c.inputs = [((n,), t, v) for t, v in ins]
        c.outputs = [((n,), out_et, want)]
        c.exact = True
        cases.append(c)
    pairs = list(zip(xs, ys))
    # min and max of +0 and -0: arith says maximumf(-0, +0) is +0 (kiln's integer
    # f64 does that), but arith-expand's select on a compare, which the CPU and
    # SPIR-V lowerings use, returns either; those pairs are left out of the four.
    mxs = [y if x == 0 and y == 0 else x for x, y in pairs]
    for name, ref in (('addf', lambda x, y: x + y), ('subf', lambda x, y: x - y), ('mulf', lambda x, y: x * y),
                      ('divf', quotient),
                      ('maximumf', lambda x, y: order(x, y, True, True)),
                      ('minimumf', lambda x, y: order(x, y, True, False)),
                      ('maxnumf', lambda x, y: order(x, y, False, True)),
                      ('minnumf', lambda x, y: order(x, y, False, False))):
        first = mxs if name.startswith('m') and name != 'mulf' else xs
        exact('exact_%s_f64' % name, [('f64', first), ('f64', ys)], 'f64', ['%%r = arith.%s %%a0, %%a1 : f64' % name],
              [ref(x, y) for x, y in zip(first, ys)])
    exact('exact_sqrt_f64', [('f64', xs)], 'f64', ['%r = math.sqrt %a0 : f64'], [root(x) for x in xs])
    # the 14 predicates at once, bit i for predicate i + 1 (oeq .. uno)
    preds = ['oeq', 'ogt', 'oge', 'olt', 'ole', 'one', 'ord', 'ueq', 'ugt', 'uge', 'ult', 'ule', 'une', 'uno']
    lines = ['%z = arith.constant 0 : i32']
    acc = '%z'
    for i, p in enumerate(preds):
        lines += ['%%c%d = arith.cmpf %s, %%a0, %%a1 : f64' % (i, p), '%%e%d = arith.extui %%c%d : i1 to i32' % (i, i),
                  '%%k%d = arith.constant %d : i32' % (i, i), '%%s%d = arith.shli %%e%d, %%k%d : i32' % (i, i, i),
                  '%%o%d = arith.ori %s, %%s%d : i32' % (i, acc, i)]
        acc = '%%o%d' % i
    lines.append('%%r = arith.addi %s, %%z : i32' % acc)

    def cmp_bits(x, y):
        uno = math.isnan(x) or math.isnan(y)
        rel = [x == y, x > y, x >= y, x < y, x <= y, x != y]
        bits = [not uno and r for r in rel] + [not uno] + [uno or r for r in rel[:5]] + [uno or x != y, uno]
        return sum(1 << i for i, b in enumerate(bits) if b)
    exact('exact_cmpf_f64', [('f64', xs), ('f64', ys)], 'i32', lines, [cmp_bits(x, y) for x, y in pairs])
    # conversions
    ints = []
    for i in range(n):
        width = i % 64
        v = rnd() % (1 << width) if width else 0
        ints.append(-v if i % 2 else v)
    exact('exact_sitofp_i64_f64', [('i64', ints)], 'f64', ['%r = arith.sitofp %a0 : i64 to f64'],
          [float(v) for v in ints])
    exact('exact_uitofp_i64_f64', [('i64', ints)], 'f64', ['%r = arith.uitofp %a0 : i64 to f64'],
          [float(v % (1 << 64)) for v in ints])
    small = [v for v in ints]
    exact('exact_sitofp_i16_f64', [('i16', [wrap(16)(v) for v in small])], 'f64',
          ['%r = arith.sitofp %a0 : i16 to f64'], [float(wrap(16)(v)) for v in small])
    # in range: |x| < 2^63 (signed), [0, 2^64) (unsigned); beyond is undefined
    fl = [rnd_float(1023 + (rnd() % 80) - 15) for _ in range(n)]
    def below(x, limit):
        while abs(x) >= limit:
            x /= 2.0 ** 20
        return x
    sfl = [below(x, 2.0 ** 63) for x in fl]
    ufl = [abs(below(x, 2.0 ** 64)) for x in fl]
    exact('exact_fptosi_f64_i64', [('f64', sfl)], 'i64', ['%r = arith.fptosi %a0 : f64 to i64'],
          [int(x) for x in sfl])
    exact('exact_fptoui_f64_i64', [('f64', ufl)], 'i64', ['%r = arith.fptoui %a0 : f64 to i64'],
          [wrap(64)(int(x)) for x in ufl])
    exact('exact_fptosi_f64_i32', [('f64', [x / 2.0 ** 32 for x in sfl])], 'i32',
          ['%r = arith.fptosi %a0 : f64 to i32'], [int(x / 2.0 ** 32) for x in sfl])

    # roundings to integers: exponents from 2^-3 to 2^54 and exact halves
    rx = [rnd_float(1023 + i % 58 - 3) for i in range(n - 40)]
    rx += [v + d for v in (0.0, 1.0, 2.0, -3.0, 4503599627370494.0) for d in (0.5, -0.5, 0.49999999999999994,
                                                                                 -0.49999999999999994)]
    rx += special[:20]
    rx = rx[:n]

    def rounding(fn):
        def r(x):
            if not math.isfinite(x):
                return x
            v = float(fn(x))
            return math.copysign(0.0, x) if v == 0 else v
        return r

    def half_away(x):
        a = abs(x)
        r = math.floor(a)
        return math.copysign(r + 1 if a - r >= 0.5 else r, x)
    for name, fn in (('floor', math.floor), ('ceil', math.ceil), ('trunc', math.trunc), ('round', half_away),
                     ('roundeven', round)):
        exact('exact_%s_f64' % name, [('f64', rx)], 'f64', ['%%r = math.%s %%a0 : f64' % name],
              [rounding(fn)(x) for x in rx])

    for name, ref in (('isnan', math.isnan), ('isinf', math.isinf), ('isfinite', math.isfinite),
                      ('isnormal', lambda x: math.isfinite(x) and abs(x) >= 2.2250738585072014e-308)):
        exact('exact_%s_f64' % name, [('f64', xs)], 'i1', ['%%r = math.%s %%a0 : f64' % name],
              [1 if ref(x) else 0 for x in xs])
    # fma: fused on the CPUs and CUDA/AMD, rounded twice in kiln's integer f64 (as
    # GLSL's Fma may be), so within a tolerance
    fa, fb, fc = xs[150:170], ys[150:170], [rnd_float(1023) for _ in range(20)]
    fa = [x if math.isfinite(x) and abs(x) < 1e150 else 1.5 for x in fa]
    fb = [y if math.isfinite(y) and abs(y) < 1e150 else -0.75 for y in fb]
    c = elementwise('math_fma_f64', [((20,), 'f64')] * 3, 'f64', ['%r = math.fma %a0, %a1, %a2 : f64'], lambda *a: 0)
    c.inputs = [((20,), 'f64', fa), ((20,), 'f64', fb), ((20,), 'f64', fc)]
    c.outputs = [((20,), 'f64', [float(Fraction(x) * Fraction(y) + Fraction(z)) for x, y, z in zip(fa, fb, fc)])]
    c.tol = 1e-15
    cases.append(c)
    fp = fpowi_case('f64', 'i32', float, 1e-15)
    fp.name = 'math_fpowi_f64_i32'
    cases.append(fp)

    def to_f32(x):
        try:
            return f32(x)
        except OverflowError:
            return math.copysign(math.inf, x)
    tf = xs[:]
    tf[-12:] = [3.4028235677973366e38, 3.4028235677973362e38, 1.401298464324817e-45, 7.006492321624085e-46,
                7.006492321624087e-46, 1.1754942106924411e-38, 1.0 + 2.0 ** -24, 1.0 + 2.0 ** -24 + 2.0 ** -40,
                -(1.0 + 3 * 2.0 ** -24), 1e-50, -1e50, 6e-39]
    exact('exact_truncf_f64_f32', [('f64', tf)], 'f32', ['%r = arith.truncf %a0 : f64 to f32'],
          [to_f32(x) for x in tf])
    ef = [to_f32(x) for x in tf]
    exact('exact_extf_f32_f64', [('f32', ef)], 'f64', ['%r = arith.extf %a0 : f32 to f64'], ef)
    return cases


GROUPS = {
    'narrow': group_narrow,
    'dynamic': group_dynamic,
    'control': group_control,
    'models': group_models,
    'tosa': group_tosa,
    'quantized': group_quantized,
    'no_dispatch': group_no_dispatch,
    'math': group_math,
    'types': group_types,
    'tensor_ops': group_tensor_ops,
    'reductions': group_reductions,
    'f64': group_f64,
    'f64_exact': group_f64_exact,
}


def main():
    total = 0
    for name, fn in GROUPS.items():
        cases = fn()
        total += len(cases)
        path = os.path.join(HERE, name + '.mlir')
        with open(path, 'w') as f:
            f.write('// %s\n// Generated by tests/corpus/gen.py: edit gen.py and rerun it, not this file.\n\n'
                    % fn.__doc__.strip().splitlines()[0])
            f.write('\n'.join(c.text() for c in cases))
    print('wrote %d cases in %d files' % (total, len(GROUPS)))


if __name__ == '__main__':
    main()
