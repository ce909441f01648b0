"""kiln's artifacts on IREE 3.12's own runtime (outside CI: the tools are built by
hand, ../shared/docs/iree-runtime-check.md; the test skips itself without them).

Every case of the coverage corpus (tests/corpus) is compiled by kilnc for the two
Vulkan mission targets and run by iree-run-module on IREE's Vulkan driver over
Mesa's lavapipe; its outputs, written as .npy by iree-run-module, are compared with
the corpus's reference values. CUDA and HIP artifacts cannot run here: each is
loaded by iree-run-module on the local-sync device, which verifies the module and
resolves every HAL import against the 3.12 HAL module before the device refuses the
executable format; a verifier or import error fails the case.

Tools: $KILN_IREE_TOOLS, or ../iree-build/tools beside the repository (the
iree-run-module there must carry the staging-buffer patch the doc describes to read
results back from lavapipe). KILN_IREE_TARGETS overrides the targets.
"""
import math
import os
import re
import struct
import subprocess
import sys
import tempfile
import unittest

from kilnharness import KILNC, clean_env

REPO = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
CORPUS = os.path.join(REPO, "tests", "corpus")
TOOLS = os.environ.get("KILN_IREE_TOOLS") or os.path.join(REPO, "..", "iree-build", "tools")
RUN_MODULE = os.path.join(TOOLS, "iree-run-module")
VULKAN_TARGETS = ("arm5gen", "videocore_vii")
LINK_TARGETS = ("sm_89", "sm_120", "gfx950", "gfx1100")

NPY_TYPES = {"<f2": ("e", 2), "<f4": ("f", 4), "<f8": ("d", 8), "|i1": ("b", 1), "<i2": ("h", 2),
             "<i4": ("i", 4), "<i8": ("q", 8), "|b1": ("?", 1), "|u1": ("B", 1)}
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
                "inputs": [], "outputs": [], "tol": None, "xfail": ()}
        for line in block.splitlines():
            if line.startswith("// INPUT "):
                case["inputs"].append(line[len("// INPUT "):].split(" ", 1))
            elif line.startswith("// OUTPUT "):
                case["outputs"].append(line[len("// OUTPUT "):].split(" ", 1))
            elif line.startswith("// TOL "):
                case["tol"] = float(line[len("// TOL "):])
            elif line.startswith("// XFAIL "):
                case["xfail"] = tuple(line[len("// XFAIL "):].split(" ", 1)[0].split(","))
        cases.append(case)
    return cases


def read_npy(path):
    """(dtype, values) of every array in an .npy file iree-run-module wrote."""
    arrays = []
    with open(path, "rb") as f:
        data = f.read()
    pos = 0
    while pos < len(data):
        if data[pos:pos + 6] != b"\x93NUMPY":
            raise ValueError("not an .npy stream")
        major = data[pos + 6]
        hlen_size = 2 if major == 1 else 4
        hlen = int.from_bytes(data[pos + 8:pos + 8 + hlen_size], "little")
        header = data[pos + 8 + hlen_size:pos + 8 + hlen_size + hlen].decode("latin1")
        pos += 8 + hlen_size + hlen
        descr = re.search(r"'descr':\s*'([^']+)'", header).group(1)
        shape = re.search(r"'shape':\s*\(([^)]*)\)", header).group(1)
        count = 1
        for d in [x for x in shape.replace(" ", "").split(",") if x]:
            count *= int(d)
        fmt, size = NPY_TYPES[descr]
        arrays.append(list(struct.unpack("<%d%s" % (count, fmt), data[pos:pos + count * size])))
        pos += count * size
    return arrays


def same(want, got, et, tol):
    if et in DEFAULT_TOL:
        tol = tol or DEFAULT_TOL[et]
        if math.isnan(want) or math.isnan(got):
            return math.isnan(want) and math.isnan(got)
        if math.isinf(want) or math.isinf(got):
            return want == got
        return abs(want - got) <= tol * max(1.0, abs(want))
    return int(want) == int(got)


def values_of(spec):
    return [float(v) for v in spec.replace(",", " ").split()]


def input_flag(type_spec, values):
    et = type_spec.rsplit("x", 1)[-1]
    vals = [str(int(v)) if et not in DEFAULT_TOL else repr(v) for v in values_of(values)]
    return "--input=%s=%s" % (type_spec, ",".join(vals) if vals else "")


@unittest.skipUnless(os.access(RUN_MODULE, os.X_OK),
                     "IREE's runtime tools are not built (see shared/docs/iree-runtime-check.md)")
class IreeRuntimeTest(unittest.TestCase):
    def compile(self, case, target, out_dir):
        src = os.path.join(out_dir, case["name"] + ".mlir")
        with open(src, "w") as f:
            f.write(case["text"])
        vmfb = os.path.join(out_dir, "%s.%s.vmfb" % (case["name"], target))
        r = subprocess.run([KILNC, src, "--target", target, "-o", vmfb], capture_output=True,
                           text=True, env=clean_env(), timeout=300)
        return vmfb if r.returncode == 0 else None, r.stderr.strip().splitlines()[:1]

    def test_vulkan_corpus_on_lavapipe(self):
        targets = os.environ.get("KILN_IREE_TARGETS", ",".join(VULKAN_TARGETS)).split(",")
        passed, failed, xfailed = 0, [], 0
        with tempfile.TemporaryDirectory() as out:
            for name in sorted(os.listdir(CORPUS)):
                if not name.endswith(".mlir"):
                    continue
                for case in parse_cases(os.path.join(CORPUS, name)):
                    for target in targets:
                        ok, why = self.run_case(case, target, out)
                        if target in case["xfail"]:
                            xfailed += not ok
                            if ok:
                                failed.append("%s @%s %s: passes but is XFAIL" % (name, case["name"], target))
                        elif ok:
                            passed += 1
                        else:
                            failed.append("%s @%s %s: %s" % (name, case["name"], target, why))
        for line in failed:
            print("FAIL", line, file=sys.stderr)
        print("iree-run-module --device=vulkan: %d passed, %d failed, %d known failures"
              % (passed, len(failed), xfailed), file=sys.stderr)
        self.assertEqual(failed, [])

    def run_case(self, case, target, out):
        vmfb, err = self.compile(case, target, out)
        if not vmfb:
            return False, "kilnc: %s" % err
        npy = os.path.join(out, "out.npy")
        if os.path.exists(npy):
            os.unlink(npy)
        args = [RUN_MODULE, "--device=vulkan", "--module=" + vmfb, "--function=" + case["name"]]
        args += [input_flag(spec[0], spec[1] if len(spec) > 1 else "") for spec in case["inputs"]]
        args += ["--output=+" + npy for _ in case["outputs"]]
        r = subprocess.run(args, capture_output=True, text=True, timeout=120)
        if r.returncode != 0:
            return False, (r.stderr or r.stdout).strip().splitlines()[-1:]
        try:
            arrays = read_npy(npy)
        except (OSError, ValueError, KeyError) as e:
            return False, "reading the outputs: %s" % e
        if len(arrays) != len(case["outputs"]):
            return False, "%d outputs, want %d" % (len(arrays), len(case["outputs"]))
        for (type_spec, *vals), got in zip(case["outputs"], arrays):
            want = values_of(vals[0] if vals else "")
            et = type_spec.rsplit("x", 1)[-1]
            if et == "bf16":
                got = [struct.unpack("<f", struct.pack("<I", (int(g) & 0xFFFF) << 16))[0] for g in got]
            for i, (w, g) in enumerate(zip(want, got)):
                if not same(w, g, et, case["tol"]):
                    return False, "element %d: want %r, got %r" % (i, w, g)
        return True, ""

    def test_cuda_and_hip_imports_resolve(self):
        """Each CUDA/HIP artifact of the corpus passes IREE's verifier and import
        resolution (the local-sync device then refuses the executable format)."""
        failed = []
        checked = 0
        with tempfile.TemporaryDirectory() as out:
            for name in sorted(os.listdir(CORPUS)):
                if not name.endswith(".mlir"):
                    continue
                for case in parse_cases(os.path.join(CORPUS, name))[:3]:
                    for target in LINK_TARGETS:
                        vmfb, err = self.compile(case, target, out)
                        if not vmfb:
                            failed.append("%s @%s %s: kilnc: %s" % (name, case["name"], target, err))
                            continue
                        r = subprocess.run([RUN_MODULE, "--device=local-sync", "--module=" + vmfb,
                                            "--function=" + case["name"]], capture_output=True,
                                           text=True, timeout=60)
                        text = r.stderr + r.stdout
                        checked += 1
                        if "signature mismatch" in text or "not found" in text and "import" in text \
                                or "verif" in text.lower():
                            failed.append("%s @%s %s: %s" % (name, case["name"], target,
                                                             text.strip().splitlines()[-1:]))
        print("CUDA/HIP artifacts loaded by the 3.12 runtime: %d checked, %d failed"
              % (checked, len(failed)), file=sys.stderr)
        self.assertEqual(failed, [])


if __name__ == "__main__":
    unittest.main()
