#!/usr/bin/env python3
"""Runs the arithmetic of kiln's tiled GPU matmul kernels and workgroup
reductions without a GPU.

    gemm_emulate.py GEMM_TEXT [TARGET RANK BATCH M N K BITS MIN_WORKGROUPS]...

For each case (default: the set below) it asks GEMM_TEXT (tests/tools/gemm_text.c)
for the kernel kiln writes, interprets that MLIR text on the CPU for every
workgroup of the grid, its invocations in lockstep between barriers, and compares
C with a reference matmul of random quarters (every sum exact). nvgpu.mma.sync is
executed from the PTX ISA's fragment layouts for mma.m16n8k16 (f16 inputs, f32
accumulators), written here independently of the generator's index arithmetic:
with g = lane / 4 and q = lane % 4,
    A: a_i = A[g + 8 * ((i // 2) % 2)][2q + i % 2 + 8 * (i // 4)]   i = 0..7
    B: b_i = B[2q + i % 2 + 8 * (i // 2)][g]                          i = 0..3
    C: c_i = C[g + 8 * (i // 2)][2q + i % 2]                          i = 0..3
and register r of a vector<Rx2xf16> fragment holding elements 2r and 2r + 1.
amdgpu.mfma 16x16x16 (v_mfma_f32_16x16x16_f16, a wave of 64) from AMD's layout for
it: with r = lane % 16 and s = lane / 16, element j of a lane's fragment is
    A[r][4s + j],   B[4s + j][r],   C[4s + j][r].
amdgpu.wmma 16x16x16 (v_wmma_f32_16x16x16_f16 on RDNA3, a wave of 32) from AMD's
RDNA3 layout: with r = lane % 16 and s = lane / 16, a lane's A fragment is row r
of A and its B fragment column r of B (16 halves each; lanes 16-31 must repeat
lanes 0-15), and element j of its C fragment is C[2j + s][r].
amdgpu.wmma with 8-half fragments (v_wmma_f32_16x16x16_f16 on RDNA4, wave32), from
the layout IREE's compiler states for it (WMMAR4): element j of a lane's A fragment
is A[r][8s + j], of its B fragment B[8s + j][r], of its C fragment C[8s + j][r].
The lavapipe corpus runs the SIMT kernels on a device; this is what checks the
tensor-core one here.

With no cases given it also runs the row reductions (REDUCE_CASES) of
compiler/gpu_reduce.c: `gemm_text reduce` prints them, and gpu.shuffle xor is
executed over subgroups of consecutive invocations of the size each case names
(a CUDA warp, an AMD wave, or the sizes a Vulkan device may report, which the
Vulkan kernel reads at run time). A shuffle past its subgroup or from an
invocation outside the enclosing scf.if fails the case, as it reads an undefined
value on a GPU. Exit 1 on a wrong element, 2 on an op it does not know.
"""
import copy
import math
import random
import re
import struct
import subprocess
import sys

CASES = [
    ('sm_89', 3, 2, 64, 128, 64, 16, 0),   # mma.sync, two k slices, batched
    ('sm_89', 2, 1, 128, 64, 32, 16, 0),   # mma.sync, one slice, 2-D, two row tiles
    ('sm_89', 3, 1, 64, 64, 48, 32, 0),    # SIMT f32 in 32-row tiles (a small grid), three k slices
    ('sm_89', 2, 1, 128, 128, 16, 32, 4),  # SIMT f32 in 64x64 tiles, 4x4 per invocation
    ('gfx950', 3, 2, 128, 256, 32, 32, 1), # SIMT f32 in 128x128 tiles, 8x8 per invocation
    ('arm5gen', 3, 2, 64, 128, 16, 16, 0), # SIMT with f16 widened as it is staged
    ('gfx950', 3, 2, 64, 128, 64, 16, 0),  # MFMA, two k slices, batched
    ('gfx942', 2, 1, 128, 64, 32, 16, 0),  # MFMA, 2-D, two row tiles
    ('gfx1100', 3, 2, 64, 128, 64, 16, 0), # WMMA, two k slices, batched
    ('gfx1101', 2, 1, 128, 64, 32, 16, 0), # WMMA, 2-D, two row tiles
    ('gfx1201', 3, 2, 64, 128, 64, 16, 0), # RDNA4 WMMA, two k slices, batched
    ('gfx1200', 2, 1, 128, 64, 32, 16, 0), # RDNA4 WMMA, 2-D, two row tiles
    # bf16: moved as bits (i16 in the matrix kernels, pairs in i32 words in the SIMT one)
    ('sm_89', 3, 2, 64, 128, 64, 'bf16', 0),    # nvvm.mma.sync bf16, batched
    ('sm_120', 2, 1, 128, 64, 32, 'bf16', 0),   # the same on Blackwell, two row tiles
    ('gfx950', 3, 2, 64, 128, 64, 'bf16', 0),   # MFMA bf16
    ('gfx1100', 2, 1, 128, 64, 32, 'bf16', 0),  # RDNA3 WMMA bf16
    ('gfx1201', 3, 2, 64, 128, 64, 'bf16', 0),  # RDNA4 WMMA bf16
    ('arm5gen', 3, 2, 64, 128, 32, 'bf16', 0),  # SIMT, bf16 widened from 32-bit words
    ('videocore_vii', 2, 1, 64, 64, 16, 'bf16', 0),  # the same without 16-bit storage
    # f8 (OCP E4M3 and E5M2): moved as i8 bits in 64-deep slices
    ('sm_120', 3, 2, 64, 128, 128, 'f8E4M3FN', 0),  # mma.sync m16n8k32 e4m3 (inline PTX), two slices, batched
    ('sm_121', 2, 1, 128, 64, 64, 'f8E5M2', 0),     # e5m2, two row tiles
    ('gfx950', 3, 2, 64, 128, 128, 'f8E4M3FN', 0),  # MFMA 16x16x32 fp8
    ('gfx950', 2, 1, 128, 64, 64, 'f8E5M2', 0),     # MFMA 16x16x32 bf8
    ('gfx1201', 3, 2, 64, 128, 128, 'f8E4M3FN', 0), # RDNA4 WMMA fp8
    ('gfx1200', 2, 1, 128, 64, 64, 'f8E5M2', 0),    # RDNA4 WMMA bf8
    ('sm_89', 3, 2, 64, 128, 32, 'f8E4M3FN', 0),    # SIMT: f8 widened from 32-bit words (no f8 mma in PTX 7.8)
    ('arm5gen', 2, 1, 64, 64, 16, 'f8E5M2', 0),     # SIMT on Vulkan, E5M2
    ('videocore_vii', 3, 2, 64, 64, 16, 'f8E4M3FN', 0),  # the same without 16-bit storage
]

# Row reductions: (target, rows, row length, op, subgroup size).
REDUCE_CASES = [
    ('sm_89', 3, 1024, 'arith.addf', 32),      # 256 invocations: 8 warps, then warp 0 over 8 values
    ('sm_89', 2, 128, 'arith.maximumf', 32),   # 32 invocations: one warp, no workgroup memory
    ('gfx950', 2, 1024, 'arith.minimumf', 64), # wave64: 4 waves
    ('gfx942', 2, 384, 'arith.addf', 64),      # 32 invocations are half a wave64: the tree
    ('gfx1100', 2, 512, 'arith.mulf', 32),     # 128 invocations: 4 waves of 32
    ('arm5gen', 2, 1024, 'arith.addf', 4),     # Vulkan, 256 invocations: 64 subgroups, 16 values per lane
    ('arm5gen', 2, 1024, 'arith.addf', 8),     # lavapipe's width: 32 subgroups
    ('arm5gen', 2, 1024, 'arith.addf', 16),    # Mali's: 16, one value per lane
    ('arm5gen', 2, 1024, 'arith.addf', 64),    # 4 subgroups, lanes 4-63 idle in the last butterfly
    ('arm5gen', 2, 128, 'arith.maxnumf', 8),   # 32 invocations
    ('arm5gen', 2, 128, 'arith.maxnumf', 32),  # one subgroup of 32
    ('videocore_vii', 2, 1024, 'arith.addf', 16),  # no shuffles declared: the tree
]

FLOAT_OPS = {
    'addf': lambda a, b: a + b, 'mulf': lambda a, b: a * b,
    'maximumf': max, 'minimumf': min, 'maxnumf': max, 'minnumf': min,
}


def prod(xs):
    p = 1
    for x in xs:
        p *= x
    return p


class Memory:
    """A memref: a flat list of scalars; a vector element type is one more dimension."""

    def __init__(self, shape, data=None):
        self.shape = shape
        self.data = list(data) if data is not None else [0.0] * prod(shape)

    def offset(self, index):
        assert len(index) <= len(self.shape), (index, self.shape)
        o = 0
        for d, i in zip(self.shape, index):
            assert 0 <= i < d, ('out of bounds', index, self.shape)
            o = o * d + i
        return o * prod(self.shape[len(index):])

    def get(self, index):
        inner = prod(self.shape[len(index):])
        o = self.offset(index)
        return self.data[o] if inner == 1 and len(index) == len(self.shape) else self.data[o:o + inner]

    def put(self, index, value):
        o = self.offset(index)
        if isinstance(value, list):
            self.data[o:o + len(value)] = value
        else:
            self.data[o] = value


def memref_shape(t):
    """memref<2x64x8xvector<8xf16>> -> [2, 64, 8, 8]; memref<64x40xf16, ...> -> [64, 40]."""
    m = re.match(r'memref<((?:\d+x)*)(?:vector<(\d+)x\w+>|\w+)', t)
    dims = [int(d) for d in m.group(1).split('x') if d]
    return dims + ([int(m.group(2))] if m.group(2) else [])


def mma(a_frags, b_frags, c_frags):
    """One warp's mma.sync.m16n8k16: per-lane fragments in, per-lane results out."""
    A = [[None] * 16 for _ in range(16)]
    B = [[None] * 8 for _ in range(16)]
    C = [[None] * 8 for _ in range(16)]
    for lane in range(32):
        g, q = lane // 4, lane % 4
        for i in range(8):
            A[g + 8 * ((i // 2) % 2)][2 * q + i % 2 + 8 * (i // 4)] = a_frags[lane][i // 2][i % 2]
        for i in range(4):
            B[2 * q + i % 2 + 8 * (i // 2)][g] = b_frags[lane][i // 2][i % 2]
            C[g + 8 * (i // 2)][2 * q + i % 2] = c_frags[lane][i // 2][i % 2]
    assert all(x is not None for row in A + B + C for x in row), 'fragments do not cover the tile'
    D = [[C[i][j] + sum(A[i][k] * B[k][j] for k in range(16)) for j in range(8)] for i in range(16)]
    out = []
    for lane in range(32):
        g, q = lane // 4, lane % 4
        out.append([[D[g + 8 * r][2 * q + h] for h in range(2)] for r in range(2)])
    return out


def mfma_16x16(k):
    """One wave's 16x16xk MFMA: v_mfma_f32_16x16x16_f16 (k 16: four of k a lane)
    or v_mfma_f32_16x16x32_fp8_fp8 (gfx950, k 32: eight)."""
    per = k // 4

    def unit(a_frags, b_frags, c_frags):
        A = [[None] * k for _ in range(16)]
        B = [[None] * 16 for _ in range(k)]
        C = [[None] * 16 for _ in range(16)]
        for lane in range(64):
            r, s = lane % 16, lane // 16
            for j in range(per):
                A[r][per * s + j] = a_frags[lane][j]
                B[per * s + j][r] = b_frags[lane][j]
            for j in range(4):
                C[4 * s + j][r] = c_frags[lane][j]
        assert all(x is not None for row in A + B + C for x in row), 'fragments do not cover the tile'
        D = [[C[i][j] + sum(A[i][kk] * B[kk][j] for kk in range(k)) for j in range(16)] for i in range(16)]
        return [[D[4 * (lane // 16) + j][lane % 16] for j in range(4)] for lane in range(64)]
    return unit


def wmma(a_frags, b_frags, c_frags):
    """One wave's v_wmma_f32_16x16x16_f16 (RDNA3, wave32)."""
    for lane in range(16):
        assert a_frags[lane] == a_frags[lane + 16] and b_frags[lane] == b_frags[lane + 16], \
            'lanes 16-31 must repeat lanes 0-15'
    A = [list(a_frags[r]) for r in range(16)]                         # row r of A
    B = [[b_frags[c][k] for c in range(16)] for k in range(16)]        # column c of B
    C = [[None] * 16 for _ in range(16)]
    for lane in range(32):
        for j in range(8):
            C[2 * j + lane // 16][lane % 16] = c_frags[lane][j]
    assert all(x is not None for row in C for x in row), 'fragments do not cover the tile'
    D = [[C[i][j] + sum(A[i][k] * B[k][j] for k in range(16)) for j in range(16)] for i in range(16)]
    return [[D[2 * j + lane // 16][lane % 16] for j in range(8)] for lane in range(32)]


def wmma4(a_frags, b_frags, c_frags):
    """One wave's v_wmma_f32_16x16x16_f16 (RDNA4, wave32)."""
    A = [[None] * 16 for _ in range(16)]
    B = [[None] * 16 for _ in range(16)]
    C = [[None] * 16 for _ in range(16)]
    for lane in range(32):
        r, s = lane % 16, lane // 16
        for j in range(8):
            A[r][8 * s + j] = a_frags[lane][j]
            B[8 * s + j][r] = b_frags[lane][j]
            C[8 * s + j][r] = c_frags[lane][j]
    assert all(x is not None for row in A + B + C for x in row), 'fragments do not cover the tile'
    D = [[C[i][j] + sum(A[i][k] * B[k][j] for k in range(16)) for j in range(16)] for i in range(16)]
    return [[D[8 * (lane // 16) + j][lane % 16] for j in range(8)] for lane in range(32)]


# The matrix ops: (pattern with result, A, B and C, the warp's or wave's
# semantics, its width in lanes).
MATRIX_OPS = [
    (r'(%\w+) = nvgpu.mma.sync \((%\w+), (%\w+), (%[\w#]+)\) \{mmaShape = \[16, 8, 16\]\}', mma, 32),
    (r'(%\w+) = amdgpu.mfma 16x16x16 (%\w+) \* (%\w+) \+ (%[\w#]+) blgp = none', mfma_16x16(16), 64),
    (r'(%\w+) = amdgpu.wmma 16x16x16 (%\w+) \* (%\w+) \+ (%[\w#]+) : vector<16xb?f16>', wmma, 32),
    (r'(%\w+) = amdgpu.mfma 16x16x32 (%\w+) \* (%\w+) \+ (%[\w#]+) blgp = none : vector<8xf8E(?:4M3FN|5M2)>',
     mfma_16x16(32), 64),
    (r'(%\w+) = amdgpu.wmma 16x16x16 (%\w+) \* (%\w+) \+ (%[\w#]+) : vector<8x(?:b?f16|f8E4M3FN|f8E5M2)>', wmma4, 32),
]


def f32_of_bits(x):
    return struct.unpack('<f', struct.pack('<I', x & 0xffffffff))[0]


def bf16_bits(v):
    """The bf16 bits of v, which must be exact in bf16."""
    bits = struct.unpack('<I', struct.pack('<f', v))[0]
    assert bits & 0xffff == 0, v
    return bits >> 16


def halves(word):
    """An i32 register of two bf16 (the lower k in the low half) as two floats."""
    return [f32_of_bits((word & 0xffff) << 16), f32_of_bits(word & 0xffff0000)]


# The OCP 8-bit floats: (exponent bits, mantissa bits, bias); E4M3FN has no
# infinity, its NaN is every bit set below the sign.
F8_FORMATS = {'f8E4M3FN': (4, 3, 7), 'f8E5M2': (5, 2, 15), 'e4m3': (4, 3, 7), 'e5m2': (5, 2, 15)}


def f8_value(bits, fmt):
    e_bits, m_bits, bias = F8_FORMATS[fmt]
    sign = -1.0 if bits & 0x80 else 1.0
    e, m = (bits >> m_bits) & ((1 << e_bits) - 1), bits & ((1 << m_bits) - 1)
    if e == (1 << e_bits) - 1 and (e_bits == 5 or m == (1 << m_bits) - 1):
        return float('nan') if m or e_bits == 4 else sign * float('inf')
    if e == 0:
        return sign * m * 2.0 ** (1 - bias - m_bits)
    return sign * (1 + m / 2 ** m_bits) * 2.0 ** (e - bias)


def f8_bits(v, fmt):
    """The f8 bits of v, which must be exact in the format."""
    for bits in range(256):
        if f8_value(bits, fmt) == v and (v != 0 or (bits == 0x80) == (math.copysign(1.0, v) < 0)):
            return bits
    raise AssertionError('%g is not exact in %s' % (v, fmt))


def bytes_of(word):
    return [(word >> (8 * i)) & 0xff for i in range(4)]


def ptx_mma_k32(fmt, a_regs, b_regs, c_scalars):
    """mma.sync.aligned.m16n8k32.row.col.f32.<fmt>.<fmt>.f32 for one warp, from the
    PTX ISA's fragment layouts for 8-bit multiplicands (g = lane / 4, q = lane % 4):
        A: a_i = A[g + 8 * ((i // 4) % 2)][4q + i % 4 + 16 * (i // 8)]   i = 0..15
        B: b_i = B[4q + i % 4 + 16 * (i // 4)][g]                         i = 0..7
        C: c_i = C[g + 8 * (i // 2)][2q + i % 2]                           i = 0..3
    element i of register i // 4 in its bits 8 (i % 4) and up."""
    A = [[None] * 32 for _ in range(16)]
    B = [[None] * 8 for _ in range(32)]
    C = [[None] * 8 for _ in range(16)]
    for lane in range(32):
        g, q = lane // 4, lane % 4
        a = [f8_value(x, fmt) for w in a_regs[lane] for x in bytes_of(w)]
        b = [f8_value(x, fmt) for w in b_regs[lane] for x in bytes_of(w)]
        for i in range(16):
            A[g + 8 * ((i // 4) % 2)][4 * q + i % 4 + 16 * (i // 8)] = a[i]
        for i in range(8):
            B[4 * q + i % 4 + 16 * (i // 4)][g] = b[i]
        for i in range(4):
            C[g + 8 * (i // 2)][2 * q + i % 2] = c_scalars[lane][i]
    assert all(x is not None for row in A + B + C for x in row), 'fragments do not cover the tile'
    D = [[C[i][j] + sum(A[i][k] * B[k][j] for k in range(32)) for j in range(8)] for i in range(16)]
    return [[D[lane // 4 + 8 * (i // 2)][2 * (lane % 4) + i % 2] for i in range(4)] for lane in range(32)]


def nvvm_mma_bf16(a_regs, b_regs, c_scalars):
    """nvvm.mma.sync m16n8k16 with bf16 multiplicands: registers of two bf16 each,
    in the same fragment layout as f16's; the result is the struct's four floats."""
    out = mma([[halves(w) for w in regs] for regs in a_regs], [[halves(w) for w in regs] for regs in b_regs],
              [[[c[0], c[1]], [c[2], c[3]]] for c in c_scalars])
    return [d[0] + d[1] for d in out]


class Kernel:
    def __init__(self, text):
        lines = [l.strip() for l in text.split('\n') if l.strip()]
        m = re.match(r'// block (\d+) (\d+) (\d+) grid (\d+) (\d+) (\d+)', lines[0])
        self.block = [int(x) for x in m.groups()[:3]]
        self.grid = [int(x) for x in m.groups()[3:]]
        sig = lines[2]
        self.types = re.findall(r'%(arg\d+): (memref<[^)]*?>)(?:,|\))', sig)
        self.args = [(n, memref_shape(t)) for n, t in self.types]
        self.shared = {n: memref_shape(t) for n, t in re.findall(r'%(As|Bs|S) : (memref<[^>]*>)', sig)}
        self.shared.update({n: memref_shape(t)
                            for n, t in re.findall(r'%(As|Bs|S) = memref.alloc\(\) : (memref<[^>]*>)', text)})
        self.body = [l for l in lines[3:] if not re.match(r'%(As|Bs|S) = memref.alloc', l)]
        assert self.body[-2:] == ['}', '}'], self.body[-3:]
        self.body = self.body[:-2]  # the function's and the module's closing braces
        self.threads = prod(self.block)
        self.subgroup = 32

    def run(self, memory):
        for z in range(self.grid[2]):
            for y in range(self.grid[1]):
                for x in range(self.grid[0]):
                    self.workgroup((x, y, z), memory)

    def workgroup(self, wg, memory):
        T = self.threads
        bx, by = self.block[0], self.block[1]
        tids = [(t % bx, (t // bx) % by, t // (bx * by)) for t in range(T)]
        env = {}
        active = [[True] * T]  # invocations running the current region (scf.if narrows it)
        sg = self.subgroup
        mem = dict(memory)
        for n, shape in self.shared.items():
            mem['%' + n] = Memory(shape)

        def val(name, t):
            if '#' in name:
                base, i = name.split('#')
                return env[base][int(i)][t]
            return env[name][t]

        def indices(text, t):
            return [val(x.strip(), t) for x in text.split(',')] if text.strip() else []

        def region_end(ops, i):
            """The index after the '}' closing the region opened at ops[i], and
            the index of its '} else {' (or None)."""
            depth, j, other = 1, i + 1, None
            while depth:
                if depth == 1 and ops[j] == '} else {':
                    other = j
                depth += ops[j].endswith('{') - ops[j].startswith('}')
                j += 1
            return j, other

        def block(ops):
            i = 0
            while i < len(ops):
                line = ops[i]
                m = re.match(r'(?:(%\w+) = )?scf.if (%\w+)(?: -> \(.*\))? \{$', line)
                if m:
                    j, other = region_end(ops, i)
                    cond, outer = env[m.group(2)], active[-1]
                    active.append([outer[t] and cond[t] for t in range(T)])
                    then = block(ops[i + 1:(other if other else j - 1)])
                    active[-1] = [outer[t] and not cond[t] for t in range(T)]
                    other_values = block(ops[other + 1:j - 1]) if other else None
                    active.pop()
                    if m.group(1):
                        env[m.group(1)] = [then[0][t] if cond[t] else other_values[0][t] for t in range(T)]
                    i = j
                    continue
                m = re.match(r'(%\w+)(:\d+)? = scf.for (%\w+) = (%\w+) to (%\w+) step (%\w+) iter_args\((.*)\) -> \(.*\) \{$', line)
                if m:
                    j, _ = region_end(ops, i)
                    inits = [p.split(' = ') for p in m.group(7).split(', ')]
                    carried = [[val(v, t) for t in range(T)] for _, v in inits]
                    bounds = [env[m.group(g)] for g in (4, 5, 6)]
                    assert all(len(set(b)) == 1 for b in bounds), 'a loop whose bounds differ between invocations'
                    for k in range(bounds[0][0], bounds[1][0], bounds[2][0]):
                        env[m.group(3)] = [k] * T
                        for (n, _), c in zip(inits, carried):
                            env[n] = c
                        carried = block(ops[i + 1:j - 1])
                    env[m.group(1)] = carried if m.group(2) else carried[0]
                    i = j
                    continue
                if line.startswith('scf.yield'):
                    names = line[len('scf.yield '):].split(' : ')[0].split(', ')
                    return [[val(n, t) for t in range(T)] for n in names]
                step(line)
                i += 1
            return None

        def step(line):
            if line in ('gpu.barrier', 'gpu.return'):
                return  # lockstep: every invocation reached it
            m = re.match(r'(%\w+) = arith.constant (-?\d+) : (?:index|i32)$', line)
            if m:
                env[m.group(1)] = [int(m.group(2))] * T
                return
            m = re.match(r'(%\w+) = arith.constant dense<0.0> : vector<(\d+)x(\d+)x\w+>$', line)
            if m:
                env[m.group(1)] = [[[0.0] * int(m.group(3)) for _ in range(int(m.group(2)))] for _ in range(T)]
                return
            m = re.match(r'(%\w+) = arith.constant dense<0.0> : vector<(\d+)x\w+>$', line)
            if m:
                env[m.group(1)] = [[0.0] * int(m.group(2)) for _ in range(T)]
                return
            m = re.match(r'(%\w+) = gpu.(thread_id|block_id) +([xyz])$', line)
            if m:
                d = 'xyz'.index(m.group(3))
                env[m.group(1)] = [tids[t][d] for t in range(T)] if m.group(2) == 'thread_id' else [wg[d]] * T
                return
            m = re.match(r'(%\w+) = gpu.(lane_id|subgroup_id : index|subgroup_size : index)$', line)
            if m:
                what = m.group(2).split(' ')[0]
                env[m.group(1)] = [t % sg if what == 'lane_id' else t // sg if what == 'subgroup_id' else sg
                                   for t in range(T)]
                return
            m = re.match(r'(%\w+) = arith.index_cast (%\w+) : index to i32$', line)
            if m:
                env[m.group(1)] = list(env[m.group(2)])
                return
            m = re.match(r'(%\w+) = arith.cmpi (ult|ugt|eq), (%\w+), (%\w+) : (?:index|i32)$', line)
            if m:
                f = {'ult': lambda a, b: a < b, 'ugt': lambda a, b: a > b, 'eq': lambda a, b: a == b}[m.group(2)]
                env[m.group(1)] = [f(env[m.group(3)][t], env[m.group(4)][t]) for t in range(T)]
                return
            m = re.match(r'(%\w+), %\w+ = gpu.shuffle xor (%\w+), (%\w+), (%\w+) : f32$', line)
            if m:
                out = []
                for t in range(T):
                    lane = (t % sg) ^ env[m.group(3)][t]
                    source = t - t % sg + lane
                    if active[-1][t]:
                        if lane >= sg or source >= T or not active[-1][source]:
                            print('gemm_emulate: invocation %d shuffles from lane %d, outside its subgroup of %d, '
                                  'its workgroup, or the running invocations: %s' % (t, lane, sg, line))
                            sys.exit(1)
                        out.append(val(m.group(2), source))
                    else:
                        out.append(None)
                env[m.group(1)] = out
                return
            m = re.match(r'(%\w+) = arith.(addi|muli|divui|remui|andi|subi|minui) (%\w+), (%\w+) : index$', line)
            if m:
                f = {'addi': lambda a, b: a + b, 'muli': lambda a, b: a * b,
                     'divui': lambda a, b: a // b, 'remui': lambda a, b: a % b, 'andi': lambda a, b: a & b,
                     'subi': lambda a, b: a - b, 'minui': min}[m.group(2)]
                env[m.group(1)] = [f(env[m.group(3)][t], env[m.group(4)][t]) for t in range(T)]
                return
            m = re.match(r'(%\w+) = memref.load (%\w+)\[(.*?)\] :', line)
            if m:
                env[m.group(1)] = [copy.copy(mem[m.group(2)].get(indices(m.group(3), t))) if active[-1][t] else None
                                   for t in range(T)]
                return
            m = re.match(r'memref.store (%[\w#]+), (%\w+)\[(.*?)\] :', line)
            if m:
                for t in range(T):
                    if active[-1][t]:
                        mem[m.group(2)].put(indices(m.group(3), t), copy.copy(val(m.group(1), t)))
                return
            m = re.match(r'(%\w+) = vector.load (%\w+)\[(.*?)\] .*vector<(\d+)x\w+>$', line)
            if m:
                n, out = int(m.group(4)), []
                for t in range(T):
                    ix = indices(m.group(3), t)
                    out.append([mem[m.group(2)].get(ix[:-1] + [ix[-1] + k]) for k in range(n)])
                env[m.group(1)] = out
                return
            m = re.match(r'vector.store (%\w+), (%\w+)\[(.*?)\] .*vector<(\d+)x\w+>$', line)
            if m:
                for t in range(T):
                    ix, v = indices(m.group(3), t), val(m.group(1), t)
                    for k in range(int(m.group(4))):
                        mem[m.group(2)].put(ix[:-1] + [ix[-1] + k], v[k])
                return
            m = re.match(r'(%\w+) = vector.insert (%\w+), (%\w+)\[(\d+)\]', line)
            if m:
                out = []
                for t in range(T):
                    v = copy.deepcopy(val(m.group(3), t))
                    v[int(m.group(4))] = copy.deepcopy(val(m.group(2), t))
                    out.append(v)
                env[m.group(1)] = out
                return
            m = re.match(r'(%\w+) = vector.extract (%[\w#]+)\[(\d+)\]', line)
            if m:
                env[m.group(1)] = [copy.deepcopy(val(m.group(2), t)[int(m.group(3))]) for t in range(T)]
                return
            m = re.match(r'(%\w+) = vector.broadcast (%\w+) : (?:f32|i32) to vector<(\d+)x(?:f32|i32)>$', line)
            if m:
                env[m.group(1)] = [[val(m.group(2), t)] * int(m.group(3)) for t in range(T)]
                return
            m = re.match(r'(%\w+) = arith.constant dense<(\[[-\d, ]+\]|[-\d.e]+)> : vector<(\d+)x(i32|f32)>$', line)
            if m:
                # a splat or a list, of i32 or f32
                conv = int if m.group(4) == 'i32' else float
                values = m.group(2).strip('[]').split(',')
                row = [conv(x) for x in values] if len(values) > 1 else [conv(values[0])] * int(m.group(3))
                env[m.group(1)] = [list(row) for _ in range(T)]
                return
            m = re.match(r'(%\w+) = arith.(shli|shrui|andi|ori|addi) (%\w+), (%\w+) : vector<\d+xi32>$', line)
            if m:
                f = {'shli': lambda a, b: (a << b) & 0xffffffff, 'andi': lambda a, b: (a & b) & 0xffffffff,
                     'shrui': lambda a, b: (a & 0xffffffff) >> b, 'ori': lambda a, b: (a | b) & 0xffffffff,
                     'addi': lambda a, b: (a + b) & 0xffffffff}[m.group(2)]
                env[m.group(1)] = [[f(a, b) for a, b in zip(val(m.group(3), t), val(m.group(4), t))] for t in range(T)]
                return
            m = re.match(r'(%\w+) = arith.bitcast (%\w+) : vector<\d+x(i32|i16)> to vector<\d+x(f32|bf16)>$', line)
            if m:
                conv = f32_of_bits if m.group(3) == 'i32' else (lambda x: f32_of_bits(x << 16))
                env[m.group(1)] = [[conv(x) for x in val(m.group(2), t)] for t in range(T)]
                return
            m = re.match(r'(%\w+) = arith.bitcast (%\w+) : vector<\d+xf32> to vector<\d+xi32>$', line)
            if m:
                env[m.group(1)] = [[struct.unpack('<I', struct.pack('<f', x))[0] for x in val(m.group(2), t)]
                                   for t in range(T)]
                return
            m = re.match(r'(%\w+) = arith.uitofp (%\w+) : vector<\d+xi32> to vector<\d+xf32>$', line)
            if m:
                env[m.group(1)] = [[float(x & 0xffffffff) for x in val(m.group(2), t)] for t in range(T)]
                return
            m = re.match(r'(%\w+) = arith.cmpi (ult|uge|eq), (%\w+), (%\w+) : vector<\d+xi32>$', line)
            if m:
                f = {'ult': lambda a, b: a < b, 'uge': lambda a, b: a >= b, 'eq': lambda a, b: a == b}[m.group(2)]
                env[m.group(1)] = [[f(a & 0xffffffff, b & 0xffffffff) for a, b in zip(val(m.group(3), t), val(m.group(4), t))]
                                   for t in range(T)]
                return
            m = re.match(r'(%\w+) = arith.select (%\w+), (%\w+), (%\w+) : vector<\d+xi1>, vector<\d+xi32>$', line)
            if m:
                env[m.group(1)] = [[x if c else y for c, x, y in zip(val(m.group(2), t), val(m.group(3), t), val(m.group(4), t))]
                                   for t in range(T)]
                return
            m = re.match(r'(%\w+) = vector.shuffle (%\w+), (%\w+) \[([\d, ]+)\]', line)
            if m:
                picks = [int(x) for x in m.group(4).split(',')]
                env[m.group(1)] = [[(val(m.group(2), t) + val(m.group(3), t))[i] for i in picks] for t in range(T)]
                return
            m = re.match(r'(%\w+) = vector.bitcast (%\w+) : vector<2xi16> to vector<1xi32>$', line)
            if m:
                env[m.group(1)] = [[(v[0] & 0xffff) | ((v[1] & 0xffff) << 16)] for v in (val(m.group(2), t) for t in range(T))]
                return
            m = re.match(r'(%\w+) = vector.bitcast (%\w+) : vector<4xi8> to vector<1xi32>$', line)
            if m:
                env[m.group(1)] = [[sum((v[i] & 0xff) << (8 * i) for i in range(4))]
                                   for v in (val(m.group(2), t) for t in range(T))]
                return
            m = re.match(r'(%\w+) = arith.bitcast (%\w+) : vector<\d+xi8> to vector<\d+x(f8E4M3FN|f8E5M2)>$', line)
            if m:
                env[m.group(1)] = [[f8_value(x, m.group(3)) for x in val(m.group(2), t)] for t in range(T)]
                return
            m = re.match(r'(%\w+) = llvm.inline_asm asm_dialect = att "mma\.sync\.aligned\.m16n8k32\.row\.col\.f32\.(e4m3|e5m2)\.'
                         r'\2\.f32 \{\$0, \$1, \$2, \$3\}, \{\$4, \$5, \$6, \$7\}, \{\$8, \$9\}, '
                         r'\{\$10, \$11, \$12, \$13\};", "=f,=f,=f,=f,r,r,r,r,r,r,f,f,f,f" (.*?) :', line)
            if m:
                names, out = m.group(3).split(', '), []
                for w in range(T // 32):
                    lanes = range(w * 32, w * 32 + 32)
                    regs = [[[val(n, t) for n in names[lo:hi]] for t in lanes] for lo, hi in ((0, 4), (4, 6), (6, 10))]
                    out += ptx_mma_k32(m.group(2), *regs)
                env[m.group(1)] = out
                return
            m = re.match(r'(%\w+) = vector.from_elements (.*) : vector<\d+xf32>$', line)
            if m:
                names = m.group(2).split(', ')
                env[m.group(1)] = [[val(n, t) for n in names] for t in range(T)]
                return
            m = re.match(r'(%\w+) = llvm.extractvalue (%\w+)\[(\d+)\]', line)
            if m:
                env[m.group(1)] = [val(m.group(2), t)[int(m.group(3))] for t in range(T)]
                return
            m = re.match(r'(%\w+) = nvvm.mma.sync A\[(.*?)\] B\[(.*?)\] C\[(.*?)\] \{.*multiplicandAPtxType = '
                         r'#nvvm.mma_type<bf16>, multiplicandBPtxType = #nvvm.mma_type<bf16>, '
                         r'shape = #nvvm.shape<m = 16, n = 8, k = 16>\}', line)
            if m:
                out = []
                for w in range(T // 32):
                    lanes = range(w * 32, w * 32 + 32)
                    regs = [[[val(n, t) for n in m.group(g).split(', ')] for t in lanes] for g in (2, 3, 4)]
                    out += nvvm_mma_bf16(*regs)
                env[m.group(1)] = out
                return
            m = re.match(r'(%\w+) = arith.(' + '|'.join(FLOAT_OPS) + r') (%\w+), (%\w+)', line)
            if m:
                f = FLOAT_OPS[m.group(2)]

                def apply(x, y):
                    if x is None or y is None:
                        return None  # an invocation outside the enclosing scf.if
                    return [f(a, b) for a, b in zip(x, y)] if isinstance(x, list) else f(x, y)

                env[m.group(1)] = [apply(val(m.group(3), t), val(m.group(4), t)) for t in range(T)]
                return
            m = re.match(r'(%\w+) = arith.extf (%\w+) ', line)
            if m:
                env[m.group(1)] = [list(val(m.group(2), t)) for t in range(T)]
                return
            for pattern, unit, width in MATRIX_OPS:
                m = re.match(pattern, line)
                if m:
                    out = []
                    for w in range(T // width):
                        lanes = range(w * width, w * width + width)
                        out += unit(*[[val(m.group(g), t) for t in lanes] for g in (2, 3, 4)])
                    env[m.group(1)] = out
                    return
            print('gemm_emulate: an op it does not know: ' + line)
            sys.exit(2)

        block(self.body)


def operand_memory(shape, type_text, values, bits):
    """A or B as the kernel declares it: floats, bf16 bits (i16 elements, or
    pairs in i32 words with the lower index in the low half), or f8 bits (i8)."""
    if 'xi8>' in type_text:
        return Memory(shape, [f8_bits(v, bits) for v in values])
    if bits in F8_FORMATS and type_text.endswith('xi32>'):
        codes = [f8_bits(v, bits) for v in values]
        return Memory(shape, [sum(codes[i + j] << (8 * j) for j in range(4)) for i in range(0, len(codes), 4)])
    if 'xi16>' in type_text:
        return Memory(shape, [bf16_bits(v) for v in values])
    if 'xi32>' in type_text:
        bits = [bf16_bits(v) for v in values]
        return Memory(shape, [bits[i] | (bits[i + 1] << 16) for i in range(0, len(bits), 2)])
    return Memory(shape, values)


def check(tool, target, rank, batch, m, n, k, bits, least):
    args = [str(x) for x in (target, rank, batch, m, n, k, bits, least)]
    text = subprocess.run([tool] + args, check=True, capture_output=True, text=True).stdout
    kernel = Kernel(text)
    rng = random.Random(' '.join(args))
    quarters = lambda count: [rng.randint(-8, 8) / 4 for _ in range(count)]
    a, b, c = quarters(batch * m * k), quarters(batch * k * n), quarters(batch * m * n)
    if bits in F8_FORMATS:
        # Every f8 code but NaN and infinity in A (subnormals, the largest
        # magnitudes), quarters in B: products and sums exact in a double.
        finite = [f8_value(x, bits) for x in range(256)]
        finite = [v for v in finite if v == v and abs(v) != float('inf')]
        a = [rng.choice(finite) for _ in range(batch * m * k)]
    want = [c[(z * m + i) * n + j] + sum(a[(z * m + i) * k + kk] * b[(z * k + kk) * n + j] for kk in range(k))
            for z in range(batch) for i in range(m) for j in range(n)]
    names = [name for name, _ in kernel.args]
    shapes, types = dict(kernel.args), dict(kernel.types)
    as_bits = {'bf16': ('xi16>', 'xi32>'), 'f8E4M3FN': ('xi8>', 'xi32>'), 'f8E5M2': ('xi8>', 'xi32>')}.get(bits, ())
    if any(x in types[names[0]] for x in ('xi8>', 'xi16>', 'xi32>')) != any(x in types[names[0]] for x in as_bits):
        print('FAIL %s: A is declared %s' % (' '.join(args), types[names[0]]))
        return False
    memory = {'%' + names[0]: operand_memory(shapes[names[0]], types[names[0]], a, bits),
              '%' + names[1]: operand_memory(shapes[names[1]], types[names[1]], b, bits),
              '%' + names[2]: Memory(shapes[names[2]], c)}
    kernel.run(memory)
    got = memory['%' + names[2]].data
    bad = [i for i, (x, y) in enumerate(zip(got, want)) if x != y]
    what = '%s rank %d batch %d %dx%dx%d %s (block %s, grid %s)' % (
        target, rank, batch, m, n, k, bits if isinstance(bits, str) else 'f%d' % bits, 'x'.join(map(str, kernel.block)),
        'x'.join(map(str, kernel.grid)))
    if bad:
        print('FAIL %s: %d of %d elements wrong, first at %d: want %g, got %g' % (
            what, len(bad), len(want), bad[0], want[bad[0]], got[bad[0]]))
        return False
    print('ok   %s: %d elements' % (what, len(want)))
    return True


def check_reduce(tool, target, rows, length, op, subgroup):
    text = subprocess.run([tool, 'reduce', target, str(rows), str(length), op], check=True, capture_output=True,
                          text=True).stdout
    kernel = Kernel(text)
    kernel.subgroup = subgroup
    rng = random.Random('%s %d %d %s' % (target, rows, length, op))
    # Quarters keep every sum exact in any order; products of +-1/2, 1 and 2 too.
    pick = (lambda: rng.choice([-2, -1, -0.5, 0.5, 1, 2])) if op == 'arith.mulf' else (lambda: rng.randint(-64, 64) / 4)
    x = [pick() for _ in range(rows * length)]
    o = [pick() for _ in range(rows)]
    f = FLOAT_OPS[op.split('.')[1]]
    want = []
    for r in range(rows):
        acc = x[r * length]
        for v in x[r * length + 1:(r + 1) * length]:
            acc = f(acc, v)
        want.append(f(acc, o[r]))
    names = [name for name, _ in kernel.args]
    shapes = dict(kernel.args)
    memory = {'%' + names[0]: Memory(shapes[names[0]], x), '%' + names[1]: Memory(shapes[names[1]], o)}
    kernel.run(memory)
    got = memory['%' + names[1]].data
    what = '%s reduce %dx%d %s, subgroup %d (block %s, grid %s)' % (
        target, rows, length, op, subgroup, 'x'.join(map(str, kernel.block)), 'x'.join(map(str, kernel.grid)))
    bad = [r for r in range(rows) if got[r] != want[r]]
    if bad:
        print('FAIL %s: row %d: want %g, got %s' % (what, bad[0], want[bad[0]], got[bad[0]]))
        return False
    print('ok   %s: %d rows' % (what, rows))
    return True


def main():
    tool = sys.argv[1]
    rest = sys.argv[2:]
    number = lambda x: x if x in ('bf16', 'f8E4M3FN', 'f8E5M2') else int(x)
    cases = [tuple([rest[i]] + [number(x) for x in rest[i + 1:i + 8]]) for i in range(0, len(rest), 8)] or CASES
    ok = all([check(tool, *case) for case in cases])
    if not rest:
        ok = all([check_reduce(tool, *case) for case in REDUCE_CASES]) and ok
    sys.exit(0 if ok else 1)


if __name__ == '__main__':
    main()
