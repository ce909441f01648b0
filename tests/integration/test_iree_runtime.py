"""kiln's artifacts on IREE 3.12's own runtime (outside CI: the tools are built by
hand, ../shared/docs/iree-runtime-check.md; the test skips itself without them).

Every case of the coverage corpus (tests/corpus) is compiled by kilnc for the two
Vulkan mission targets and run by iree-run-module on IREE's Vulkan driver over
Mesa's lavapipe; its outputs, written as .npy by iree-run-module, are compared with
the corpus's reference values. CUDA and HIP artifacts cannot run here: each is
loaded by iree-run-module on the local-sync device, which verifies the module and
resolves every HAL import against the 3.12 HAL module before the device refuses the
executable format; a verifier or import error fails the case. The x86-64 VMFBs
(embedded ELF) run on IREE's CPU drivers, local-sync and local-task, and match
the same references.

Tools: $KILN_IREE_TOOLS, or ../iree-build/tools beside the repository (the
iree-run-module there must carry the staging-buffer patch the doc describes to read
results back from lavapipe). KILN_IREE_TARGETS overrides the targets;
KILN_IREE_CPU_TARGETS the CPU ones; KILN_IREE_CORPUS=control.mlir,models.mlir
limits the run to those files. Cases run side by side, KILN_IREE_JOBS at a time
(default: one per CPU this process may use), each in its own folder; a case that
times out fails alone.
"""
import math
import os
import re
import struct
import subprocess
import sys
import tempfile
import unittest
from concurrent.futures import ThreadPoolExecutor

from kilnharness import KILNC, clean_env

REPO = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
CORPUS = os.path.join(REPO, "tests", "corpus")
TOOLS = os.environ.get("KILN_IREE_TOOLS") or os.path.join(REPO, "..", "iree-build", "tools")
RUN_MODULE = os.path.join(TOOLS, "iree-run-module")
VULKAN_TARGETS = ("arm5gen", "videocore_vii")
LINK_TARGETS = ("sm_89", "sm_120", "gfx950", "gfx1100")
CPU_TARGETS = ("x86_64",)
CPU_DEVICES = ("local-sync", "local-task")

JOBS = max(1, int(os.environ.get("KILN_IREE_JOBS", "0") or 0) or len(os.sched_getaffinity(0)))
DEFAULT_TOL = {"f16": 2e-3, "bf16": 1.6e-2, "f32": 1e-5, "f64": 1e-12}


def parse_cases(path):
    """The corpus file's cases: name, its own module text, inputs, outputs, tol, xfail."""
    with open(path) as f:
        text = f.read()
    starts = [m.start() for m in re.finditer(r"^// CASE @", text, re.M)]
    cases = []
    for i, s in enumerate(starts):
        block = text[s:starts[i + 1] if i + 1 < len(starts) else len(text)]
        case = {"name": block.split("\n", 1)[0][len("// CASE @"):].strip(), "text": block,
                "inputs": [], "outputs": [], "tol": None, "xfail": (), "exact": False}
        for line in block.splitlines():
            if line.startswith("// INPUT "):
                case["inputs"].append(line[len("// INPUT "):].split(" ", 1))
            elif line.startswith("// OUTPUT "):
                case["outputs"].append(line[len("// OUTPUT "):].split(" ", 1))
            elif line.startswith("// TOL "):
                case["tol"] = float(line[len("// TOL "):])
            elif line.strip() == "// EXACT":
                case["exact"] = True
            elif line.startswith("// XFAIL "):
                case["xfail"] = tuple(line[len("// XFAIL "):].split(" ", 1)[0].split(","))
        cases.append(case)
    return cases


RAW = {"i1": ("B", 1), "i8": ("b", 1), "i16": ("h", 2), "i32": ("i", 4), "i64": ("q", 8),
       "f16": ("e", 2), "bf16": ("H", 2), "f32": ("f", 4), "f64": ("d", 8)}


def corpus_cases():
    """(file name, case) for every case of every corpus file, in order (only the
    files KILN_IREE_CORPUS names, comma-separated, when it is set)."""
    only = [n for n in os.environ.get("KILN_IREE_CORPUS", "").split(",") if n]
    for name in sorted(os.listdir(CORPUS)):
        if name.endswith(".mlir") and (not only or name in only):
            for case in parse_cases(os.path.join(CORPUS, name)):
                yield name, case


def run_tool(args, timeout, **kwargs):
    """subprocess.run, but a run past `timeout` is an answer, not an exception
    (return code None, stderr saying so): one hung case fails alone."""
    try:
        return subprocess.run(args, capture_output=True, text=True, timeout=timeout, **kwargs)
    except subprocess.TimeoutExpired as e:
        return subprocess.CompletedProcess(args, None, "", "timed out after %g s" % e.timeout)


def side_by_side(calls):
    """The results of the calls (each runs subprocesses, so threads suffice), in order."""
    with ThreadPoolExecutor(max_workers=JOBS) as pool:
        return list(pool.map(lambda call: call(), calls))


def known_gap(case, target):
    return target in case["xfail"] or "*" in case["xfail"]


# The 8-bit floats: (exponent bits, mantissa bits, bias, kind), decoded from
# their definitions (tests/corpus/gen.py writes the references the same way).
F8 = {"f8E4M3FN": (4, 3, 7, "fn"), "f8E5M2": (5, 2, 15, "ieee"), "f8E5M2FNUZ": (5, 2, 16, "fnuz"),
      "f8E4M3FNUZ": (4, 3, 8, "fnuz")}


def f8_value(et, code):
    if et == "f8E8M0FNU":
        return math.nan if code == 0xFF else math.ldexp(1.0, code - 127)
    e, m, bias, kind = F8[et]
    exp, man, neg = (code >> m) & ((1 << e) - 1), code & ((1 << m) - 1), code & 0x80
    if (kind == "fnuz" and code == 0x80) or (kind == "fn" and code & 0x7F == 0x7F):
        return math.nan
    if kind == "ieee" and exp == (1 << e) - 1:
        return math.nan if man else (-math.inf if neg else math.inf)
    v = math.ldexp(man, 1 - bias - m) if exp == 0 else math.ldexp(man + (1 << m), exp - bias - m)
    return -v if neg else v


def read_raw(path, et, count):
    """An output iree-run-module wrote as raw bytes (--output=@FILE.bin): .npy has
    no bf16, so every type is read raw and decoded here."""
    with open(path, "rb") as f:
        data = f.read()
    if et in ("i2", "i4"):
        bits = int(et[1:])
        if len(data) < (count * bits + 7) // 8:
            raise ValueError("%d bytes for %d %s" % (len(data), count, et))
        vals = [(data[i * bits // 8] >> (i * bits % 8)) & ((1 << bits) - 1) for i in range(count)]
        return [v - (1 << bits) if v >= 1 << (bits - 1) else v for v in vals]
    if et in F8 or et == "f8E8M0FNU":
        if len(data) != count:
            raise ValueError("%d bytes, want %d" % (len(data), count))
        return [f8_value(et, b) for b in data]
    fmt_, size = RAW[et]
    if len(data) != count * size:
        raise ValueError("%d bytes, want %d" % (len(data), count * size))
    vals = list(struct.unpack("<%d%s" % (count, fmt_), data))
    if et == "bf16":
        vals = [struct.unpack("<f", struct.pack("<I", v << 16))[0] for v in vals]
    return vals


def same(want, got, et, tol, exact=False):
    if et.startswith("f8"):
        return (math.isnan(want) and math.isnan(got)) or want == got
    if et in DEFAULT_TOL:
        tol = tol or DEFAULT_TOL[et]
        if math.isnan(want) or math.isnan(got):
            return math.isnan(want) and math.isnan(got)
        if exact:  # bit for bit: the value and the sign of a zero
            return want == got and math.copysign(1, want) == math.copysign(1, got)
        if math.isinf(want) or math.isinf(got):
            return want == got
        return abs(want - got) <= tol * max(1.0, abs(want))
    return int(want) == int(got)


MIN_NORMAL = {"f16": 2.0 ** -14, "bf16": 2.0 ** -126, "f32": 2.0 ** -126, "f64": 2.0 ** -1022}


def has_subnormals(case):
    """Whether a float input or output of the case is subnormal (or the case is
    named for them)."""
    if "_subnormal" in case["name"]:
        return True
    for type_spec, *vals in case["inputs"] + case["outputs"]:
        et = type_spec.rsplit("x", 1)[-1]
        if et in MIN_NORMAL and any(0 < abs(v) < MIN_NORMAL[et] for v in values_of(vals[0] if vals else "", et)):
            return True
    return False


def values_of(spec, et="f32"):
    """Integers stay exact (a float loses i64 past 2^53)."""
    if et in DEFAULT_TOL or et.startswith("f8"):
        return [float(v) for v in spec.replace(",", " ").split()]
    return [int(v) for v in spec.replace(",", " ").split()]


def input_flag(type_spec, values):
    et = type_spec.rsplit("x", 1)[-1]
    vals = values_of(values, et)
    if et in ("i2", "i4"):
        # Sub-byte types are read as hex bytes of the packed buffer, low bits first.
        bits = int(et[1:])
        packed = bytearray((len(vals) * bits + 7) // 8)
        for i, v in enumerate(vals):
            packed[i * bits // 8] |= (v & ((1 << bits) - 1)) << (i * bits % 8)
        return "--input=%s=%s" % (type_spec, " ".join("%02X" % b for b in packed))
    if et == "i1":
        # IREE reads i1 as hex bytes, two digits each, as it prints them.
        return "--input=%s=%s" % (type_spec, " ".join("%02x" % v for v in vals))
    text = [repr(v) if et in DEFAULT_TOL or et.startswith("f8") else str(v) for v in vals]
    return "--input=%s=%s" % (type_spec, ",".join(text))


@unittest.skipUnless(os.access(RUN_MODULE, os.X_OK),
                     "IREE's runtime tools are not built (see shared/docs/iree-runtime-check.md)")
class IreeRuntimeTest(unittest.TestCase):
    def compile(self, case, target, out_dir, *flags):
        src = os.path.join(out_dir, case["name"] + ".mlir")
        with open(src, "w") as f:
            f.write(case["text"])
        vmfb = os.path.join(out_dir, "%s.%s.vmfb" % (case["name"], target))
        r = run_tool([KILNC, src, "--target", target, *flags, "-o", vmfb], 300, env=clean_env())
        return vmfb if r.returncode == 0 else None, r.stderr.strip().splitlines()[:1]

    def test_vulkan_corpus_on_lavapipe(self):
        targets = os.environ.get("KILN_IREE_TARGETS", ",".join(VULKAN_TARGETS)).split(",")
        self.run_corpus([(t, ("vulkan",)) for t in targets], "vulkan")

    def test_cpu_corpus_on_local_drivers(self):
        targets = os.environ.get("KILN_IREE_CPU_TARGETS", ",".join(CPU_TARGETS)).split(",")
        # IREE's CPU drivers run dispatches with denormals flushed to zero (FTZ and
        # DAZ: iree_fpu_state_push in task/worker.c and the inline command buffer),
        # so the cases with subnormal inputs or results are corpus_check's alone
        # (it calls the library without the flush).
        self.run_corpus([(t, CPU_DEVICES) for t in targets], ",".join(CPU_DEVICES), skip=has_subnormals)

    def test_cpu_system_elf(self):
        """The whole-model cases as system-elf (the same ELF, loaded by dlopen in
        IREE's system library loader) on local-sync."""
        with tempfile.TemporaryDirectory() as out:
            cases = [(name, case) for name, case in corpus_cases() if name == "models.mlir"]
            results = side_by_side([lambda case=case: self.run_case(case, "x86_64", ("local-sync",), out,
                                                                    "--iree-llvmcpu-link-embedded=false")
                                    for _, case in cases])
            passed = sum(ok for ok, _ in results)
            failed = ["%s @%s: %s" % (name, case["name"], why)
                      for (name, case), (ok, why) in zip(cases, results) if not ok]
        print("system-elf-x86_64 on local-sync: %d passed, %d failed" % (passed, len(failed)), file=sys.stderr)
        self.assertEqual(failed, [])

    def run_corpus(self, plan, label, skip=lambda case: False):
        passed, failed, xfailed = 0, [], 0
        with tempfile.TemporaryDirectory() as out:
            runs = [(name, case, target, devices) for name, case in corpus_cases() if not skip(case)
                    for target, devices in plan]
            results = side_by_side([lambda r=r: self.run_case(r[1], r[2], r[3], out) for r in runs])
            for (name, case, target, _), (ok, why) in zip(runs, results):
                if known_gap(case, target):
                    xfailed += not ok
                    if ok:
                        failed.append("%s @%s %s: passes but is XFAIL" % (name, case["name"], target))
                elif ok:
                    passed += 1
                else:
                    failed.append("%s @%s %s: %s" % (name, case["name"], target, why))
        for line in failed:
            print("FAIL", line, file=sys.stderr)
        print("iree-run-module --device=%s: %d passed, %d failed, %d known failures"
              % (label, passed, len(failed), xfailed), file=sys.stderr)
        self.assertEqual(failed, [])

    def run_case(self, case, target, devices, out, *flags):
        """(passed, why not); its files go to a folder of its own under `out`."""
        out = tempfile.mkdtemp(dir=out)
        vmfb, err = self.compile(case, target, out, *flags)
        if not vmfb:
            return False, "kilnc: %s" % err
        for device in devices:
            files = [os.path.join(out, "out%d.bin" % i) for i in range(len(case["outputs"]))]
            args = [RUN_MODULE, "--device=" + device, "--module=" + vmfb, "--function=" + case["name"]]
            args += [input_flag(spec[0], spec[1] if len(spec) > 1 else "") for spec in case["inputs"]]
            args += ["--output=@" + f for f in files]
            r = run_tool(args, 120)
            if r.returncode != 0:
                return False, "%s: %s" % (device, (r.stderr or r.stdout).strip().splitlines()[-1:])
            for (type_spec, *vals), path in zip(case["outputs"], files):
                et = type_spec.rsplit("x", 1)[-1]
                want = values_of(vals[0] if vals else "", et)
                try:
                    got = read_raw(path, et, len(want))
                except (OSError, ValueError) as e:
                    return False, "%s: reading an output: %s" % (device, e)
                for i, (w, g) in enumerate(zip(want, got)):
                    if not same(w, g, et, case["tol"], case["exact"]):
                        return False, "%s: element %d: want %r, got %r" % (device, i, w, g)
        return True, ""

    def test_cuda_and_hip_imports_resolve(self):
        """Each CUDA/HIP artifact of the corpus passes IREE's verifier and import
        resolution (the local-sync device then refuses the executable format)."""
        def load(name, case, target, out):
            """None when the runtime took the module, else why not."""
            out = tempfile.mkdtemp(dir=out)
            vmfb, err = self.compile(case, target, out)
            if not vmfb:
                return "%s @%s %s: kilnc: %s" % (name, case["name"], target, err)
            r = run_tool([RUN_MODULE, "--device=local-sync", "--module=" + vmfb,
                          "--function=" + case["name"]], 60)
            text = r.stderr + r.stdout
            # Past verification and import resolution, a module either reaches
            # hal.executable.create (which local-sync refuses for a GPU format)
            # or, creating no executable, the call itself ("EXEC @f", then a
            # complaint about the missing inputs).
            if "no executable loader registered" in text or "EXEC @" in text or r.returncode == 0:
                return None
            return "%s @%s %s: %s" % (name, case["name"], target, text.strip().splitlines()[-1:])

        with tempfile.TemporaryDirectory() as out:
            # A known gap is skipped: corpus_check tracks it.
            runs = [(name, case, target) for name, case in corpus_cases() for target in LINK_TARGETS
                    if not known_gap(case, target)]
            failed = [why for why in side_by_side([lambda r=r: load(*r, out) for r in runs]) if why]
        checked = len(runs)
        print("CUDA/HIP artifacts loaded by the 3.12 runtime: %d checked, %d failed"
              % (checked, len(failed)), file=sys.stderr)
        self.assertEqual(failed, [])


if __name__ == "__main__":
    unittest.main()
