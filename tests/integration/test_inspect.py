"""`kiln inspect`, as a user runs it on VMFB files: the exit code per class
(0 current, 6 legacy, 7 invalid) for one file and the worst for several, the
--json fields, clear errors for a directory or a missing file, and the real
kilnc path (compile, then inspect what it wrote). The files come from the
vmfb_fixtures tool (the real writer), whose names start with their class."""
import json
import os
import subprocess
import tempfile
import unittest

from kilnharness import BUILD_DIR, EXAMPLES, KILNC, clean_env, run_kiln

VMFB_FIXTURES = os.path.join(BUILD_DIR, "tests", "vmfb_fixtures")

EXIT_OK, EXIT_USAGE, EXIT_LEGACY, EXIT_INVALID = 0, 2, 6, 7


def expected_exit(name):
    if name.startswith("current_"):
        return EXIT_OK
    if name.startswith("legacy_"):
        return EXIT_LEGACY
    return EXIT_INVALID


class InspectFixturesTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.tmp = tempfile.TemporaryDirectory(prefix="kiln-inspect-")
        cls.dir = os.path.join(cls.tmp.name, "fixtures")
        r = subprocess.run([VMFB_FIXTURES, cls.dir], capture_output=True, text=True,
                           env=clean_env(), timeout=120)
        if r.returncode != 0:
            raise AssertionError(f"vmfb_fixtures failed ({r.returncode}):\n{r.stdout}{r.stderr}")
        cls.names = sorted(os.listdir(cls.dir))

    @classmethod
    def tearDownClass(cls):
        cls.tmp.cleanup()

    def path(self, name):
        return os.path.join(self.dir, name)

    def inspect_json(self, *names):
        r = run_kiln("inspect", "--json", *[self.path(n) for n in names])
        doc = json.loads(r.stdout)
        self.assertIsInstance(doc, list)
        self.assertEqual(len(doc), len(names))
        return r, {os.path.basename(d["path"]): d for d in doc}

    def test_fixture_set(self):
        for kind in ("current_", "legacy_", "invalid_"):
            self.assertTrue(any(n.startswith(kind) for n in self.names), kind)
        self.assertIn("not_a_vmfb.txt", self.names)
        self.assertGreaterEqual(len(self.names), 18)

    def test_exit_code_per_file(self):
        for name in self.names:
            with self.subTest(name=name):
                r = run_kiln("inspect", self.path(name))
                self.assertEqual(r.returncode, expected_exit(name), r.stdout + r.stderr)
                want = {EXIT_OK: "current", EXIT_LEGACY: "legacy", EXIT_INVALID: "invalid"}
                first = r.stdout.splitlines()[0]
                self.assertEqual(first, f"{self.path(name)}: {want[expected_exit(name)]}")
                self.assertRegex(r.stdout, r"(?m)^  why +\S")

    def test_worst_class_wins(self):
        cases = [
            (["current_zip_cuda.vmfb", "current_flat_cuda.vmfb"], EXIT_OK),
            (["current_zip_cuda.vmfb", "legacy_hal6_zip.vmfb"], EXIT_LEGACY),
            (["legacy_noheader.vmfb", "current_zip_hip.vmfb"], EXIT_LEGACY),
            (["current_zip_vulkan.vmfb", "legacy_bytecode16.vmfb", "invalid_crc.vmfb"], EXIT_INVALID),
            (["invalid_empty.vmfb", "current_with_source.vmfb", "legacy_nodeps.vmfb"], EXIT_INVALID),
            (["legacy_hal6_flat.vmfb", "not_a_vmfb.txt"], EXIT_INVALID),
        ]
        for names, want in cases:
            with self.subTest(names=names):
                r = run_kiln("inspect", *[self.path(n) for n in names])
                self.assertEqual(r.returncode, want, r.stdout + r.stderr)
                for n in names:  # every file is reported, not just the worst
                    self.assertIn(f"{self.path(n)}: ", r.stdout)
                r, docs = self.inspect_json(*names)
                self.assertEqual(r.returncode, want)
                self.assertEqual(sorted(docs), sorted(names))

    def test_json_fields(self):
        # kiln takes at most 15 files per call (client/main.c keeps 16 positionals).
        d = {}
        for i in range(0, len(self.names), 10):
            batch = self.names[i:i + 10]
            r, docs = self.inspect_json(*batch)
            self.assertEqual(r.returncode, max(expected_exit(n) for n in batch))
            d.update(docs)
        for name, doc in d.items():
            with self.subTest(name=name):
                want = {EXIT_OK: "current", EXIT_LEGACY: "legacy", EXIT_INVALID: "invalid"}
                self.assertEqual(doc["class"], want[expected_exit(name)], doc["reason"])
                self.assertTrue(doc["reason"])
                self.assertEqual(doc["file_size"], os.path.getsize(self.path(name)))

        cuda = d["current_zip_cuda.vmfb"]
        self.assertEqual(cuda["layout"], "zip")
        self.assertEqual(cuda["hal_version"], 7)
        self.assertEqual(cuda["bytecode_version"], "17.0")
        self.assertEqual(cuda["dependencies"], [{"name": "hal", "minimum_version": 7, "required": True}])
        imports = {i["name"]: i["cconv"] for i in cuda["imports"]}
        self.assertEqual(imports["hal.command_buffer.dispatch"], "0rrIiiiICiDCiirIID_v")
        self.assertEqual(imports["hal.executable.lookup.function"], "0rr_I")
        self.assertEqual({e["name"]: e["cconv"] for e in cuda["exports"]},
                         {"main": "0rr_r", "__init": "0v_v"})
        self.assertEqual(len(cuda["executables"]), 1)
        exe = cuda["executables"][0]
        self.assertEqual((exe["format"], exe["identifier"], exe["header"], exe["chip"], exe["code"]),
                         ("cuda-nvptx-fb", "CDA1", True, "sm_89", "ptx"))
        self.assertEqual([k["name"] for k in exe["kernels"]], ["add_kernel", "mul_kernel"])
        self.assertEqual(exe["kernels"][0]["block_dims"], [64, 1, 1])
        self.assertEqual([k["constants"] for k in exe["kernels"]], [1, 2])
        self.assertEqual(cuda["provenance"]["target"], "sm_89")
        self.assertEqual(cuda["provenance"]["flags"], "--iree-opt-level=O2")
        self.assertFalse(cuda["embedded_source"])

        hip = d["current_zip_hip.vmfb"]["executables"][0]
        self.assertEqual((hip["format"], hip["chip"], hip["code"]), ("rocm-hsaco-fb", "gfx1100", "hsaco"))
        self.assertEqual(d["current_zip_hip.vmfb"]["provenance"]["target"], "gfx1100")
        vk = d["current_zip_vulkan.vmfb"]["executables"][0]
        self.assertEqual((vk["format"], vk["code"], vk["header"]), ("vulkan-spirv-fb", "spirv", True))
        self.assertEqual(d["current_flat_cuda.vmfb"]["layout"], "flat")

        src = d["current_with_source.vmfb"]
        self.assertTrue(src["embedded_source"])
        self.assertEqual(len(src["provenance"]["source.sha256"]), 64)
        self.assertEqual(src["provenance"]["source.entry"], "kiln/source.mlir.zst")

        for name in ("legacy_hal6_zip.vmfb", "legacy_hal6_flat.vmfb"):
            self.assertEqual(d[name]["hal_version"], 6, name)
            imports = {i["name"]: i["cconv"] for i in d[name]["imports"]}
            self.assertEqual(imports["hal.command_buffer.dispatch"], "0rriiiiICiDCiirIID_v")
            self.assertNotIn("hal.executable.lookup.function", imports)
        self.assertEqual(d["legacy_hal6_flat.vmfb"]["layout"], "flat")
        noheader = d["legacy_noheader.vmfb"]
        self.assertEqual(noheader["hal_version"], 7)
        self.assertFalse(noheader["executables"][0]["header"])
        self.assertEqual(d["legacy_bytecode16.vmfb"]["bytecode_version"], "16.0")
        self.assertEqual(d["legacy_nodeps.vmfb"]["dependencies"], [])
        self.assertEqual(d["legacy_nodeps.vmfb"]["hal_version"], 0)
        self.assertEqual(d["invalid_newer_bytecode.vmfb"]["bytecode_version"], "18.0")
        self.assertEqual(d["invalid_newer_hal.vmfb"]["hal_version"], 8)
        for name in ("invalid_empty.vmfb", "invalid_garbage.vmfb", "not_a_vmfb.txt",
                     "invalid_truncated.vmfb", "invalid_crc.vmfb"):
            self.assertNotIn("module", d[name], name)  # nothing past the container
        self.assertIn("CRC", d["invalid_crc.vmfb"]["reason"])
        self.assertIn("rodata", d["invalid_bad_offset.vmfb"]["reason"])

    def test_directory_and_missing_file(self):
        missing = self.path("no_such_file.vmfb")
        for target in (self.dir, missing):
            with self.subTest(target=target):
                r = run_kiln("inspect", target)
                self.assertEqual(r.returncode, EXIT_INVALID)
                self.assertIn(target, r.stdout + r.stderr)
                self.assertRegex(r.stdout, r"(?m)^  why +.*" + "(not a regular file|cannot open)")
                r = run_kiln("inspect", "--json", target)
                self.assertEqual(r.returncode, EXIT_INVALID)
                doc = json.loads(r.stdout)[0]
                self.assertEqual(doc["class"], "invalid")
                self.assertIn(target, doc["reason"])
        # Still worst-wins alongside good files.
        r = run_kiln("inspect", self.path("current_zip_cuda.vmfb"), missing)
        self.assertEqual(r.returncode, EXIT_INVALID)
        r = run_kiln("inspect")
        self.assertEqual(r.returncode, EXIT_USAGE)
        self.assertIn("inspect", r.stderr)


class InspectKilncTest(unittest.TestCase):
    """The real path: kilnc compiles a model, inspect reads what it wrote."""

    TARGETS = {"sm_89": ("cuda-nvptx-fb", "sm_89"),
               "gfx1100": ("rocm-hsaco-fb", "gfx1100"),
               "videocore_vii": ("vulkan-spirv-fb", None)}

    def compile(self, out, *extra):
        r = subprocess.run([KILNC, os.path.join(EXAMPLES, "mlp.mlir"), "--target",
                            ",".join(self.TARGETS), "-o", out, *extra],
                           capture_output=True, text=True, env=clean_env(), timeout=300)
        self.assertEqual(r.returncode, 0, r.stderr)
        return [os.path.join(out, f"{t}.vmfb") for t in self.TARGETS]

    def test_compiled_files_are_current(self):
        with tempfile.TemporaryDirectory() as out:
            files = self.compile(out, "--embed-source")
            r = run_kiln("inspect", "--json", *files)
            self.assertEqual(r.returncode, EXIT_OK, r.stdout + r.stderr)
            docs = json.loads(r.stdout)
            self.assertEqual(len(docs), 3)
            for doc, target in zip(docs, self.TARGETS):
                with self.subTest(target=target):
                    fmt, chip = self.TARGETS[target]
                    self.assertEqual(doc["class"], "current", doc["reason"])
                    self.assertEqual(doc["layout"], "zip")
                    self.assertEqual(doc["hal_version"], 7)
                    self.assertEqual(doc["bytecode_version"], "17.0")
                    self.assertEqual(doc["provenance"]["target"], target)
                    self.assertTrue(doc["embedded_source"])
                    self.assertEqual(len(doc["executables"]), 1)
                    exe = doc["executables"][0]
                    self.assertEqual(exe["format"], fmt)
                    self.assertTrue(exe["header"])
                    self.assertEqual(exe["chip"], chip)
                    self.assertTrue(exe["kernels"])
            r = run_kiln("inspect", files[0])
            self.assertEqual(r.returncode, EXIT_OK)
            self.assertIn("source     embedded", r.stdout)

    def test_compiled_flat_files_are_current(self):
        with tempfile.TemporaryDirectory() as out:
            files = self.compile(out, "--flat")
            r = run_kiln("inspect", "--json", *files)
            self.assertEqual(r.returncode, EXIT_OK, r.stdout + r.stderr)
            for doc, target in zip(json.loads(r.stdout), self.TARGETS):
                self.assertEqual(doc["class"], "current", doc["reason"])
                self.assertEqual(doc["layout"], "flat")
                self.assertEqual(doc["provenance"]["target"], target)


class ScanTest(unittest.TestCase):
    """`kiln scan`: the walk (only *.vmfb in directories, links not followed, any
    file named on the command line), each file's class and source, the counts and
    the exit status."""

    @classmethod
    def setUpClass(cls):
        cls.tmp = tempfile.TemporaryDirectory(prefix="kiln-scan-")
        fixtures = os.path.join(cls.tmp.name, "fixtures")
        r = subprocess.run([VMFB_FIXTURES, fixtures], capture_output=True, text=True,
                           env=clean_env(), timeout=120)
        if r.returncode != 0:
            raise AssertionError(f"vmfb_fixtures failed ({r.returncode}):\n{r.stdout}{r.stderr}")
        cls.fixtures = fixtures
        cls.root = os.path.join(cls.tmp.name, "fleet")
        layout = {
            "a": ["current_zip_cuda.vmfb", "legacy_hal6_zip.vmfb"],
            os.path.join("b", "c"): ["invalid_crc.vmfb", "not_a_vmfb.txt", "current_with_source.vmfb"],
        }
        for sub, names in layout.items():
            os.makedirs(os.path.join(cls.root, sub))
            for n in names:
                with open(os.path.join(fixtures, n), "rb") as f, open(os.path.join(cls.root, sub, n), "wb") as g:
                    g.write(f.read())
        os.symlink(fixtures, os.path.join(cls.root, "link"))  # never followed

    @classmethod
    def tearDownClass(cls):
        cls.tmp.cleanup()

    def test_walk_classes_and_sources(self):
        r = run_kiln("scan", "--json", self.root)
        self.assertEqual(r.returncode, EXIT_INVALID, r.stderr)
        doc = json.loads(r.stdout)
        files = {os.path.relpath(f["path"], self.root): f for f in doc["files"]}
        self.assertEqual(sorted(files), [os.path.join("a", "current_zip_cuda.vmfb"),
                                         os.path.join("a", "legacy_hal6_zip.vmfb"),
                                         os.path.join("b", "c", "current_with_source.vmfb"),
                                         os.path.join("b", "c", "invalid_crc.vmfb")])
        self.assertEqual([f["path"] for f in doc["files"]], sorted(f["path"] for f in doc["files"]))
        legacy = files[os.path.join("a", "legacy_hal6_zip.vmfb")]
        self.assertEqual((legacy["class"], legacy["source"], legacy["target"]), ("legacy", "provenance", "sm_89"))
        self.assertRegex(legacy["source_digest"], r"^[0-9a-f]{64}$")
        self.assertIn("hal 0.6", legacy["reason"])
        embedded = files[os.path.join("b", "c", "current_with_source.vmfb")]
        self.assertEqual((embedded["class"], embedded["source"]), ("current", "embedded"))
        bad = files[os.path.join("b", "c", "invalid_crc.vmfb")]
        self.assertEqual((bad["class"], bad["source"]), ("invalid", None))
        self.assertIn("CRC-32", bad["reason"])
        self.assertEqual(doc["summary"], {"files": 4, "current": 2, "legacy": 1, "invalid": 1,
                                          "legacy_by_source": {"embedded": 0, "provenance": 1,
                                                               "unknown": 0, "damaged": 0}})

    def test_human_output_and_exit_status(self):
        r = run_kiln("scan", os.path.join(self.root, "a"))
        self.assertEqual(r.returncode, EXIT_LEGACY, r.stdout + r.stderr)
        self.assertRegex(r.stdout, r"(?m)^legacy +provenance +sm_89 +\S*legacy_hal6_zip\.vmfb$")
        self.assertIn("2 file(s): 1 current, 1 legacy, 0 invalid", r.stdout)
        self.assertIn("1 by provenance digest", r.stdout)
        r = run_kiln("scan", os.path.join(self.root, "a", "current_zip_cuda.vmfb"))
        self.assertEqual(r.returncode, EXIT_OK, r.stdout + r.stderr)
        # A file named on the command line counts whatever its name.
        r = run_kiln("scan", os.path.join(self.root, "b", "c", "not_a_vmfb.txt"))
        self.assertEqual(r.returncode, EXIT_INVALID, r.stdout + r.stderr)
        self.assertIn("1 file(s): 0 current, 0 legacy, 1 invalid", r.stdout)

    def test_bad_paths(self):
        r = run_kiln("scan", os.path.join(self.root, "missing"))
        self.assertEqual(r.returncode, EXIT_USAGE)
        self.assertIn("cannot read", r.stderr)
        self.assertIn("missing", r.stderr)
        r = run_kiln("scan")
        self.assertEqual(r.returncode, EXIT_USAGE)
        self.assertIn("kiln scan PATH", r.stderr)


if __name__ == "__main__":
    unittest.main()
