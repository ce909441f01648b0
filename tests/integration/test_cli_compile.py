"""The CLI as CI uses it, against the real kilnd with the real `kiln` binary:
compile (inline and through PutSource, per-target VMFBs plus kiln-manifest.json,
cache hits the second time, diagnostics with file:line:col for bad IR, an unknown
target), fetch (by digest, by source and target, resuming a partial file), find
(filters, paging), status / watch / cancel on a job, explain (hit and each kind of
miss), --json output that parses everywhere, and the exit codes for usage errors
and an unreachable kilnd.

Tests that need the job engine (Compile, WatchJob, CancelJob) skip themselves
while the kilnd under test does not list those methods in
GetServerInfo.features; the artifact-side tests seed the cache with the real
cache library (tests/tools/cache_seed)."""
import hashlib
import json
import os
import re
import signal
import subprocess
import tempfile
import time
import unittest

from kilnharness import (EXAMPLES, KILN, Kilnd, distinct, KilnTestCase, blob_path, clean_env, free_tcp_port,
                         run_kiln, seed_cache)

EXIT_OK, EXIT_FAILED, EXIT_USAGE, EXIT_UNREACHABLE = 0, 1, 2, 3
TARGETS = ["sm_89", "gfx1100", "videocore_vii", "x86_64"]
SEED_SOURCE = "%064x" % 1  # cache_seed's first source digest; flags [--iree-opt-level=O2]


def sha256_file(path):
    with open(path, "rb") as f:
        return hashlib.sha256(f.read()).hexdigest()


def kiln_json(r):
    """Parses a --json run's stdout; fails with the run's output when it does not parse."""
    try:
        return json.loads(r.stdout)
    except ValueError as e:
        raise AssertionError(f"not JSON ({e}); rc={r.returncode}\nstdout:\n{r.stdout}\nstderr:\n{r.stderr}")


class CliTestCase(KilnTestCase):
    """One kilnd per class (with a seeded cache); a scratch directory per test."""

    seed = 5

    @classmethod
    def setUpClass(cls):
        cls.kilnd = Kilnd()
        if cls.seed:
            os.makedirs(cls.kilnd.state_dir, exist_ok=True)
            cls.seeded = seed_cache(cls.kilnd.state_dir, cls.seed, 50000)
        cls.kilnd.start()
        r = run_kiln("info", "--json", addr=cls.kilnd.addr)
        cls.info = json.loads(r.stdout)
        cls.features = set(cls.info.get("features", []))

    @classmethod
    def tearDownClass(cls):
        rc = cls.kilnd.stop()
        log = cls.kilnd.log()
        cls.kilnd.__exit__(None, None, None)
        if rc != 0:
            raise AssertionError(f"kilnd exited {rc}; log:\n{log}")

    def setUp(self):
        self.tmp = tempfile.TemporaryDirectory(prefix="kiln-cli-")
        self.dir = self.tmp.name

    def tearDown(self):
        self.tmp.cleanup()

    def kiln(self, *args, timeout=600):
        return run_kiln(*args, addr=self.kilnd.addr, timeout=timeout)

    def need(self, *methods):
        missing = [m for m in methods if m not in self.features]
        if missing:
            self.skipTest(f"kilnd does not serve {', '.join(missing)} yet")

    def assertRc(self, r, rc):
        self.assertEqual(r.returncode, rc, f"rc={r.returncode}\nstdout:\n{r.stdout}\nstderr:\n{r.stderr}")


class UsageAndReachTest(CliTestCase):
    seed = 0

    def test_usage_errors(self):
        mlp = os.path.join(EXAMPLES, "mlp.mlir")
        cases = [
            ("compile", mlp),                                     # no --target
            ("compile", "--target", "sm_89"),                     # no file
            ("compile", os.path.join(self.dir, "missing.mlir"), "--target", "sm_89"),
            ("compile", mlp, "--target", "sm_89", "--label", "novalue"),
            ("compile", mlp, "--target", "sm_89", "--priority", "urgent"),
            ("fetch",),
            ("fetch", "sha256:" + "0" * 64),
            ("fetch", "--source", SEED_SOURCE),                   # no --target
            ("fetch", "0" * 64, "--source", SEED_SOURCE, "--target", "sm_89"),
            ("find", "--all", "--page-token", "x"),
            ("find", "--target", "sm_89,gfx950"),
            ("find", "--limit", "0"),
            ("status",),
            ("watch", "j-1", "j-2"),
            ("cancel",),
            ("explain", mlp),                                     # no --target
            ("explain", "--target", "sm_89"),                     # no source
            ("explain", "--source", "nope", "--target", "sm_89"),
            ("explain", mlp, "--target", "no_such_target"),
        ]
        for args in cases:
            with self.subTest(args=args):
                r = self.kiln(*args)
                self.assertRc(r, EXIT_USAGE)
                self.assertTrue(r.stderr.startswith("kiln"), r.stderr)
        # The unknown target names the known ones.
        r = self.kiln("explain", mlp, "--target", "no_such_target")
        self.assertIn("sm_89", r.stderr)

    def test_unreachable(self):
        addr = f"127.0.0.1:{free_tcp_port()}"
        mlp = os.path.join(EXAMPLES, "mlp.mlir")
        for args in (("compile", mlp, "--target", "sm_89", "-o", self.dir),
                     ("fetch", "0" * 64, "-o", os.path.join(self.dir, "x.vmfb")),
                     ("find",), ("status", "j-1"), ("watch", "j-1"), ("cancel", "j-1"),
                     ("explain", mlp, "--target", "sm_89")):
            with self.subTest(args=args):
                r = run_kiln(*args, addr=addr, timeout=60)
                self.assertRc(r, EXIT_UNREACHABLE)
                self.assertIn("cannot reach kilnd", r.stderr)
        self.assertEqual(os.listdir(self.dir), [])


class UploadTest(CliTestCase):
    seed = 0

    def test_large_non_mlir_source_is_refused(self):
        self.need("PutSource")
        src = os.path.join(self.dir, "weights.bin")
        with open(src, "wb") as f:
            f.write(b"\xff\xfe" * (1 << 20))  # 2 MiB: goes through PutSource; not UTF-8
        out = os.path.join(self.dir, "out")
        r = self.kiln("compile", src, "--target", "sm_89", "-o", out)
        self.assertRc(r, EXIT_USAGE)
        self.assertIn("refused the source", r.stderr)
        # kilnd's kiln-diagnostics-bin, printed the way editors and CI annotations read.
        self.assertRegex(r.stderr, r"weights\.bin:1:1: error: byte 0 is not valid UTF-8")
        self.assertFalse(os.path.exists(out))

    def test_small_non_mlir_source_points_at_the_byte(self):
        src = os.path.join(self.dir, "bad.mlir")
        with open(src, "wb") as f:
            f.write(b"module {\n  \xff\n}\n")  # small: sent inline with Compile
        r = self.kiln("compile", src, "--target", "sm_89", "-o", os.path.join(self.dir, "out"))
        self.assertRc(r, EXIT_USAGE)
        self.assertRegex(r.stderr, r"bad\.mlir:2:3: error: byte 11 is not valid UTF-8")


class ArtifactTest(CliTestCase):
    """fetch, find and explain over a seeded cache (no compiles needed)."""

    def setUp(self):
        super().setUp()
        self.need("FindArtifacts", "GetArtifact")

    def seeded_digests(self):
        return [d for _key, d, _stored in self.seeded]

    def test_find_filters_and_pages(self):
        r = self.kiln("find", "--json", "--all", "--limit", "2")
        self.assertRc(r, EXIT_OK)
        doc = kiln_json(r)
        self.assertEqual(sorted(a["digest"] for a in doc["artifacts"]), sorted(self.seeded_digests()))
        self.assertEqual(doc["next_page_token"], "")
        r = self.kiln("find", "--limit", "2")
        self.assertRc(r, EXIT_OK)
        lines = r.stdout.splitlines()
        self.assertTrue(lines[0].startswith("DIGEST"))
        self.assertEqual(len(lines), 3)
        token = re.search(r"--page-token (\S+)", r.stderr).group(1)
        r = self.kiln("find", "--json", "--limit", "2", "--page-token", token)
        self.assertEqual(len(kiln_json(r)["artifacts"]), 2)
        # Filters: label, source (by digest), target (by alias).
        self.assertEqual(len(kiln_json(self.kiln("find", "--json", "--all", "--label", "suite=seed"))["artifacts"]), 5)
        r = self.kiln("find", "--label", "suite=other")
        self.assertRc(r, EXIT_OK)
        self.assertIn("no artifacts match", r.stdout)
        doc = kiln_json(self.kiln("find", "--json", "--source", SEED_SOURCE, "--target", "ada"))
        self.assertEqual(len(doc["artifacts"]), 1)
        self.assertEqual(doc["artifacts"][0]["provenance"]["source_digest"], SEED_SOURCE)

    def test_fetch_by_digest_verifies_and_resumes(self):
        digest = self.seeded_digests()[0]
        out = os.path.join(self.dir, "a.vmfb")
        r = self.kiln("fetch", digest, "-o", out)
        self.assertRc(r, EXIT_OK)
        self.assertEqual(sha256_file(out), digest)
        self.assertEqual(sorted(os.listdir(self.dir)), ["a.vmfb"])  # nothing left behind
        with open(out, "rb") as f:
            whole = f.read()
        # An interrupted fetch left a partial file: the next one resumes it.
        os.unlink(out)
        part = f"{out}.kiln-{digest[:12]}.part"
        with open(part, "wb") as f:
            f.write(whole[:20000])
        r = self.kiln("fetch", digest, "-o", out)
        self.assertRc(r, EXIT_OK)
        self.assertIn("resumed at byte 20000", r.stdout)
        self.assertEqual(sha256_file(out), digest)
        self.assertFalse(os.path.exists(part))
        # A damaged partial file is detected by the digest and fetched again whole.
        with open(part, "wb") as f:
            f.write(b"X" * 1000)
        r = self.kiln("fetch", digest, "-o", out, "--json")
        self.assertRc(r, EXIT_OK)
        doc = kiln_json(r)
        self.assertEqual(doc["digest"], digest)
        self.assertEqual(doc["file"], out)
        self.assertEqual(doc["resumed_from"], 0)
        self.assertEqual(sha256_file(out), digest)
        self.assertFalse(os.path.exists(part))

    def test_fetch_by_key_and_errors(self):
        out = os.path.join(self.dir, "k.vmfb")
        r = self.kiln("fetch", "--source", SEED_SOURCE, "--target", "ada",
                      "--flag=--iree-opt-level=O2", "-o", out)
        self.assertRc(r, EXIT_OK)
        meta = kiln_json(self.kiln("find", "--json", "--source", SEED_SOURCE))["artifacts"][0]
        self.assertEqual(sha256_file(out), meta["digest"])
        # Default name: <canonical target>.vmfb in the working directory.
        r = subprocess.run([KILN, "--addr", self.kilnd.addr, "fetch", "--source", SEED_SOURCE,
                            "--target", "sm_89", "--flag", "--iree-opt-level=O2"],
                           capture_output=True, text=True, env=clean_env(), cwd=self.dir, timeout=60)
        self.assertRc(r, EXIT_OK)
        self.assertEqual(sha256_file(os.path.join(self.dir, "sm_89.vmfb")), meta["digest"])
        # Other flags: no such artifact.
        r = self.kiln("fetch", "--source", SEED_SOURCE, "--target", "sm_89", "-o", out + ".2")
        self.assertRc(r, EXIT_FAILED)
        self.assertIn("NOT_FOUND", r.stderr)
        self.assertFalse(os.path.exists(out + ".2"))
        r = self.kiln("fetch", "f" * 64, "-o", out + ".3")
        self.assertRc(r, EXIT_FAILED)
        self.assertEqual(sorted(os.listdir(self.dir)), ["k.vmfb", "sm_89.vmfb"])

    def test_explain_over_seeded_cache(self):
        r = self.kiln("explain", "--source", SEED_SOURCE, "--target", "ada", "--flag=--iree-opt-level=O2")
        self.assertRc(r, EXIT_OK)
        self.assertTrue(r.stdout.startswith("sm_89: hit:"), r.stdout)
        r = self.kiln("explain", "--source", SEED_SOURCE, "--target", "sm_89")
        self.assertRc(r, EXIT_FAILED)
        self.assertIn("with flags [--iree-opt-level=O2] (yours: [])", r.stdout)
        r = self.kiln("explain", "--source", SEED_SOURCE, "--target", "sm_120", "--flag=--iree-opt-level=O2")
        self.assertRc(r, EXIT_FAILED)
        self.assertIn("for target sm_89 but not sm_120", r.stdout)
        r = self.kiln("explain", os.path.join(EXAMPLES, "mlp.mlir"), "--target", "sm_89")
        self.assertRc(r, EXIT_FAILED)
        self.assertIn("no artifact for this source on the server", r.stdout)
        r = self.kiln("explain", "--json", "--source", SEED_SOURCE, "--target", "sm_89,sm_120",
                      "--flag=--iree-opt-level=O2")
        self.assertRc(r, EXIT_FAILED)
        doc = kiln_json(r)
        self.assertFalse(doc["hit"])
        self.assertEqual(doc["targets"]["sm_89"]["differs"], "none")
        self.assertTrue(doc["targets"]["sm_89"]["confirmed_by_kilnd"])
        self.assertEqual(doc["targets"]["sm_120"]["differs"], "target")
        self.assertEqual(doc["compiler"]["name"], self.info["compiler"]["name"])


class CompileTest(CliTestCase):
    """The compile path; needs the job engine."""

    seed = 0

    def setUp(self):
        super().setUp()
        self.need("Compile", "WatchJob", "GetArtifact", "FindArtifacts")

    def compile(self, source, targets, out, *extra):
        return self.kiln("compile", source, "--target", ",".join(targets), "-o", out, *extra)

    def check_outputs(self, out, targets, cache_hit):
        with open(os.path.join(out, "kiln-manifest.json")) as f:
            manifest = json.load(f)
        self.assertEqual(sorted(manifest["targets"]), sorted(targets))
        self.assertEqual(manifest["failed"], {})
        self.assertEqual(manifest["state"], "DONE")
        self.assertRegex(manifest["source_digest"], "^[0-9a-f]{64}$")
        for t in targets:
            entry = manifest["targets"][t]
            path = os.path.join(out, entry["file"])
            self.assertEqual(entry["file"], f"{t}.vmfb")
            self.assertEqual(sha256_file(path), entry["digest"])
            self.assertEqual(os.path.getsize(path), entry["size"])
            self.assertEqual(entry["cache_hit"], cache_hit, t)
        self.assertEqual(sorted(os.listdir(out)), sorted([f"{t}.vmfb" for t in targets] + ["kiln-manifest.json"]))
        return manifest

    def test_compile_then_cache_hits(self):
        mlp = os.path.join(EXAMPLES, "mlp.mlir")
        out = os.path.join(self.dir, "out")
        r = self.compile(mlp, TARGETS, out, "--label", "ci.run=1", "--priority", "batch")
        self.assertRc(r, EXIT_OK)
        for t in TARGETS:
            self.assertRegex(r.stdout, rf"(?m)^{t}: done \d+ bytes")
        first = self.check_outputs(out, TARGETS, cache_hit=False)
        # The VMFBs are current IREE 3.12 modules.
        r = run_kiln("inspect", *[os.path.join(out, f"{t}.vmfb") for t in TARGETS])
        self.assertRc(r, EXIT_OK)
        # Again: every target from the cache, the same bytes.
        out2 = os.path.join(self.dir, "out2")
        r = self.compile(mlp, TARGETS, out2)
        self.assertRc(r, EXIT_OK)
        second = self.check_outputs(out2, TARGETS, cache_hit=True)
        for t in TARGETS:
            self.assertEqual(first["targets"][t]["digest"], second["targets"][t]["digest"])
        # --json prints the manifest instead of progress lines.
        out3 = os.path.join(self.dir, "out3")
        r = self.compile(mlp, ["ada"], out3, "--json")
        self.assertRc(r, EXIT_OK)
        doc = kiln_json(r)
        with open(os.path.join(out3, "kiln-manifest.json")) as f:
            self.assertEqual(doc, json.load(f))
        self.assertEqual(doc["targets"]["sm_89"]["digest"], first["targets"]["sm_89"]["digest"])
        # find, fetch by source and target, explain: all see the compiled artifacts.
        doc = kiln_json(self.kiln("find", "--json", "--source", mlp, "--all"))
        self.assertEqual(sorted(a["canonical_target"] for a in doc["artifacts"]), sorted(TARGETS))
        f = os.path.join(self.dir, "f.vmfb")
        self.assertRc(self.kiln("fetch", "--source", mlp, "--target", "gfx1100", "-o", f), EXIT_OK)
        self.assertEqual(sha256_file(f), first["targets"]["gfx1100"]["digest"])
        r = self.kiln("explain", mlp, "--target", ",".join(TARGETS))
        self.assertRc(r, EXIT_OK)
        r = self.kiln("explain", mlp, "--target", "sm_120")
        self.assertRc(r, EXIT_FAILED)
        self.assertIn("but not sm_120", r.stdout)

    def test_reformatted_model_hits(self):
        # kiln keys on the model's normal form (base/mlir_text.h): a copy with a
        # comment, collapsed spaces, renamed values and locations is the same model
        # through compile, explain, find and fetch; a changed constant is not.
        with open(os.path.join(EXAMPLES, "attention.mlir"), "rb") as f:
            text = distinct(f.read(), "reformatted").decode()  # a model no other test compiled
        first = os.path.join(self.dir, "attention.mlir")
        with open(first, "w") as f:
            f.write(text)
        stored = kiln_json(self.kiln("stats", "--json"))["cache"]
        r = self.compile(first, ["sm_89", "arm5gen"], os.path.join(self.dir, "a"))
        self.assertRc(r, EXIT_OK)
        want = self.check_outputs(os.path.join(self.dir, "a"), ["sm_89", "arm5gen"], cache_hit=False)
        # The stored totals are live (issue 18, item 11: they were counted once, at start).
        now = kiln_json(self.kiln("stats", "--json"))["cache"]
        self.assertEqual(now.get("artifacts", 0), stored.get("artifacts", 0) + 2)
        self.assertGreater(int(now.get("bytes_stored", 0)), int(stored.get("bytes_stored", 0)))  # compressed
        self.assertEqual(now.get("sources", 0), stored.get("sources", 0) + 1)
        copy = os.path.join(self.dir, "copy.mlir")
        lines = [re.sub(r" +", " ", l).replace("%", "%renamed_") for l in text.splitlines()]
        with open(copy, "w") as f:
            f.write("// reformatted by a formatter\n#loc = loc(\"attention.py\":1:1)\n")
            f.write("\n".join(l + (" loc(#loc)" if l.strip().startswith("%") else "") for l in lines) + "\n")
        self.assertNotEqual(sha256_file(first), sha256_file(copy))
        before = kiln_json(self.kiln("stats", "--json"))
        r = self.kiln("explain", copy, "--target", "sm_89,arm5gen")
        self.assertRc(r, EXIT_OK)
        self.assertIn("sm_89: hit", r.stdout)
        r = self.compile(copy, ["sm_89", "arm5gen"], os.path.join(self.dir, "b"))
        self.assertRc(r, EXIT_OK)
        got = self.check_outputs(os.path.join(self.dir, "b"), ["sm_89", "arm5gen"], cache_hit=True)
        for t in ("sm_89", "arm5gen"):
            self.assertEqual(got["targets"][t]["digest"], want["targets"][t]["digest"])
        after = kiln_json(self.kiln("stats", "--json"))
        self.assertEqual(after["jobs"]["targets_compiled"], before["jobs"]["targets_compiled"])
        doc = kiln_json(self.kiln("find", "--json", "--source", copy, "--all"))
        self.assertEqual(sorted(a["canonical_target"] for a in doc["artifacts"]), ["arm5gen", "sm_89"])
        f = os.path.join(self.dir, "f.vmfb")
        self.assertRc(self.kiln("fetch", "--source", copy, "--target", "arm5gen", "-o", f), EXIT_OK)
        self.assertEqual(sha256_file(f), want["targets"]["arm5gen"]["digest"])
        # A different constant is a different model.
        other = os.path.join(self.dir, "other.mlir")
        self.assertIn("dense<0.25>", text)
        with open(other, "w") as f:
            f.write(text.replace("dense<0.25>", "dense<0.5>"))
        r = self.kiln("explain", other, "--target", "sm_89")
        self.assertRc(r, EXIT_FAILED)
        self.assertIn("no artifact for this source", r.stdout)

    def test_cpu_system_elf_flag(self):
        # iree-compile's --iree-llvmcpu-link-embedded=false through kilnd: the same
        # ELF as system-elf, a cache entry of its own beside the embedded one.
        mlp = os.path.join(EXAMPLES, "mlp.mlir")
        for flags, want, other in (((), b"embedded-elf-x86_64", b"system-elf-x86_64"),
                                   (("--flag=--iree-llvmcpu-link-embedded=false",), b"system-elf-x86_64",
                                    b"embedded-elf-x86_64")):
            out = os.path.join(self.dir, "sys%d" % len(flags))
            r = self.compile(mlp, ["x86_64"], out, *flags)
            self.assertRc(r, EXIT_OK)
            with open(os.path.join(out, "x86_64.vmfb"), "rb") as f:
                data = f.read()
            self.assertIn(want, data)
            self.assertNotIn(other, data)

    def test_timeout_bounds_the_whole_compile(self):
        # A source no earlier test compiled, for many targets, with 50 ms: kilnd stops
        # the job at the Compile call's deadline (or admission itself runs out).
        src = os.path.join(self.dir, "conv.mlir")
        with open(os.path.join(EXAMPLES, "convnet.mlir")) as f:
            text = f.read()
        with open(src, "w") as f:
            f.write(distinct(text.encode(), f"{os.getpid()}_{time.time()}").decode())
        r = self.compile(src, ["sm_120", "gfx942", "gfx1201", "arm5gen", "valhall3", "valhall4", "sm_121"],
                         os.path.join(self.dir, "out"), "--timeout", "50ms")
        self.assertRc(r, 4)
        self.assertIn("--timeout", r.stderr)

    def test_labels_are_recorded_and_searchable(self):
        conv = os.path.join(EXAMPLES, "convnet.mlir")
        r = self.compile(conv, ["gfx950"], os.path.join(self.dir, "out"), "--label", "ci.run=42",
                         "--label", "model=convnet")
        self.assertRc(r, EXIT_OK)
        doc = kiln_json(self.kiln("find", "--json", "--label", "ci.run=42"))
        self.assertEqual([a["canonical_target"] for a in doc["artifacts"]], ["gfx950"])
        self.assertEqual(doc["artifacts"][0]["provenance"]["labels"],
                         {"ci.run": "42", "model": "convnet"})
        r = self.kiln("find", "--label", "model=convnet", "--target", "gfx950")
        self.assertRc(r, EXIT_OK)
        self.assertIn("ci.run=42", r.stdout)

    def test_large_source_goes_through_put_source(self):
        src = os.path.join(self.dir, "big.mlir")
        with open(os.path.join(EXAMPLES, "mlp.mlir"), "rb") as f:
            text = distinct(f.read(), "big").decode()  # a model no other test compiled
        with open(src, "w") as f:
            f.write(text)
            f.write(("// " + "x" * 1020 + "\n") * 1500)  # ~1.5 MiB of comments
        out = os.path.join(self.dir, "out")
        r = self.compile(src, ["sm_89"], out)
        self.assertRc(r, EXIT_OK)
        self.assertIn("uploaded", r.stdout)
        self.check_outputs(out, ["sm_89"], cache_hit=False)
        r = self.compile(src, ["sm_89"], os.path.join(self.dir, "again"))
        self.assertRc(r, EXIT_OK)
        self.assertIn("already on kilnd", r.stdout)

    def test_bad_ir_fails_with_location(self):
        bad = os.path.join(self.dir, "bad.mlir")
        with open(bad, "w") as f:
            f.write("func.func @f(%a: tensor<4xf32>) -> tensor<4xf32> {\n"
                    "  %0 = arith.addf %a, %a : tensor<4xf32>\n"
                    "  return %0 : tensor<4xf32\n"
                    "}\n")
        out = os.path.join(self.dir, "out")
        r = self.compile(bad, ["sm_89", "gfx1100"], out)
        self.assertRc(r, EXIT_FAILED)
        self.assertRegex(r.stderr, r"bad\.mlir:\d+:\d+: error: ")
        with open(os.path.join(out, "kiln-manifest.json")) as f:
            manifest = json.load(f)
        self.assertEqual(manifest["state"], "FAILED")
        self.assertEqual(sorted(manifest["failed"]), ["gfx1100", "sm_89"])
        self.assertEqual(manifest["failed"]["sm_89"]["code"], "INVALID_ARGUMENT")
        self.assertEqual(manifest["targets"], {})

    def test_unknown_target(self):
        r = self.compile(os.path.join(EXAMPLES, "mlp.mlir"), ["sm_89", "no_such_gpu"],
                         os.path.join(self.dir, "out"))
        self.assertRc(r, EXIT_USAGE)
        self.assertIn("no_such_gpu", r.stderr)
        self.assertIn("sm_89", r.stderr)  # the known canonical ids are listed
        self.assertFalse(os.path.exists(os.path.join(self.dir, "out")))

    def test_status_watch_cancel(self):
        self.need("CancelJob")
        src = os.path.join(EXAMPLES, "attention.mlir")
        out = os.path.join(self.dir, "out")
        proc = subprocess.Popen([KILN, "--addr", self.kilnd.addr, "compile", src, "--target",
                                 "sm_89,sm_120,gfx950,gfx1100,gfx1201,arm5gen", "-o", out],
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                                env=clean_env())
        try:
            first = proc.stdout.readline()
            job = re.match(r"job (\S+):", first).group(1)
            r = self.kiln("status", job)
            self.assertRc(r, EXIT_OK)
            self.assertTrue(r.stdout.startswith(f"job {job}: "), r.stdout)
            doc = kiln_json(self.kiln("status", job, "--json"))
            self.assertEqual(doc["job_id"], job)
            self.assertIn(doc["state"], ("QUEUED", "RUNNING", "DONE"))
            r = self.kiln("cancel", job, "--reason", "integration test")
            self.assertRc(r, EXIT_OK)
            cancelled = "cancelled" in r.stdout and "already" not in r.stdout
            stdout, stderr = proc.communicate(timeout=600)
        finally:
            if proc.poll() is None:
                proc.kill()
                proc.wait()
        watch = self.kiln("watch", job)
        status = kiln_json(self.kiln("status", job, "--json"))
        if cancelled:
            self.assertEqual(proc.returncode, EXIT_FAILED, stderr)
            self.assertIn("CANCELLED", stderr)
            self.assertRc(watch, EXIT_FAILED)
            self.assertEqual(status["state"], "CANCELLED")
            with open(os.path.join(out, "kiln-manifest.json")) as f:
                self.assertEqual(json.load(f)["state"], "CANCELLED")
        else:  # it finished before the cancel arrived
            self.assertEqual(proc.returncode, EXIT_OK, stderr)
            self.assertRc(watch, EXIT_OK)
            self.assertEqual(status["state"], "DONE")
        # Cancelling again changes nothing.
        doc = kiln_json(self.kiln("cancel", job, "--json"))
        self.assertFalse(doc["cancelled"])
        self.assertEqual(doc["state"], "JOB_STATE_" + status["state"])
        r = self.kiln("status", "j-000000000000000000000000")
        self.assertRc(r, EXIT_FAILED)
        self.assertIn("NOT_FOUND", r.stderr)

    def test_interrupt_cancels_the_job(self):
        self.need("CancelJob")
        src = os.path.join(EXAMPLES, "attention.mlir")
        proc = subprocess.Popen([KILN, "--addr", self.kilnd.addr, "compile", src, "--target",
                                 "sm_120,gfx950,gfx1201,arm5gen,valhall2,videocore_vii", "-o",
                                 os.path.join(self.dir, "out")],
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                                env=clean_env())
        try:
            job = re.match(r"job (\S+):", proc.stdout.readline()).group(1)
            proc.send_signal(signal.SIGINT)
            _stdout, stderr = proc.communicate(timeout=120)
        finally:
            if proc.poll() is None:
                proc.kill()
                proc.wait()
        status = kiln_json(self.kiln("status", job, "--json"))
        if "cancelled on kilnd" in stderr:
            self.assertEqual(proc.returncode, EXIT_FAILED, stderr)
            self.assertEqual(status["state"], "CANCELLED")
        else:  # it finished before the signal: nothing to cancel
            self.assertEqual(status["state"], "DONE", stderr)


if __name__ == "__main__":
    unittest.main()


class LocalAndServerLimitsTest(KilnTestCase):
    """Errors the CLI must not blame on the wrong party (issue 18, item 13)."""

    def test_worker_timeout_is_kilnds_limit_not_timeout(self):
        # kilnd's worker-timeout stops the compile: the CLI said "it ran past --timeout".
        with tempfile.TemporaryDirectory(prefix="kiln-cli-") as tmp, \
                Kilnd("--test-hooks", "--worker-timeout", "2s") as kilnd:
            model = os.path.join(tmp, "slow.mlir")
            with open(os.path.join(EXAMPLES, "mlp.mlir"), "rb") as f, open(model, "wb") as out:
                out.write(f.read() + b"\n// kiln-test: hang\n")
            r = run_kiln("compile", model, "--target", "sm_89", "-o", os.path.join(tmp, "out"), addr=kilnd.addr,
                         timeout=120)
            self.assertEqual(r.returncode, 4, r.stderr)
            self.assertIn("worker-timeout", r.stderr)
            self.assertNotIn("ran past --timeout", r.stderr)

    def test_local_write_errors_are_not_kilnds_refusals(self):
        # A read-only output folder exited 9 with advice about tokens, and compile
        # failed after compiling, then again on its manifest.
        if os.geteuid() != 0:
            self.skipTest("needs a read-only bind mount (root)")
        with tempfile.TemporaryDirectory(prefix="kiln-cli-") as tmp, Kilnd() as kilnd:
            ro = os.path.join(tmp, "ro")
            os.mkdir(ro)
            if subprocess.run(["mount", "--bind", ro, ro], capture_output=True).returncode != 0:
                self.skipTest("cannot bind-mount here")
            try:
                subprocess.run(["mount", "-o", "remount,bind,ro", ro], check=True, capture_output=True)
                mlp = os.path.join(EXAMPLES, "mlp.mlir")
                for out in (ro, os.path.join(ro, "sub")):
                    r = run_kiln("compile", mlp, "--target", "sm_89", "-o", out, addr=kilnd.addr)
                    self.assertEqual(r.returncode, EXIT_FAILED, r.stderr)
                    self.assertIn(f"-o {out}:", r.stderr)
                    self.assertNotIn("manifest", r.stderr)
                    self.assertNotIn("job ", r.stdout)  # refused before anything was sent
                r = run_kiln("compile", mlp, "--target", "sm_89", "-o", os.path.join(tmp, "out"), addr=kilnd.addr)
                self.assertEqual(r.returncode, EXIT_OK, r.stderr)
                digest = [f for f in os.listdir(os.path.join(tmp, "out")) if f.endswith(".vmfb")]
                with open(os.path.join(tmp, "out", digest[0]), "rb") as f:
                    d = hashlib.sha256(f.read()).hexdigest()
                r = run_kiln("fetch", d, "-o", os.path.join(ro, "x.vmfb"), addr=kilnd.addr)
                self.assertEqual(r.returncode, EXIT_FAILED, r.stderr)
                self.assertIn("Read-only file system", r.stderr)
                self.assertNotIn("token", r.stderr)
            finally:
                subprocess.run(["umount", ro], capture_output=True)


class CorruptCacheTest(KilnTestCase):
    def test_a_corrupt_cached_artifact_is_rebuilt_within_the_same_compile(self):
        # Issue 18, item 8: kilnd answered "cached", the download failed with
        # DATA_LOSS and the build failed; only the next compile rebuilt it.
        with tempfile.TemporaryDirectory(prefix="kiln-cli-") as tmp, Kilnd() as kilnd:
            mlp = os.path.join(EXAMPLES, "mlp.mlir")
            first = os.path.join(tmp, "first")
            r = run_kiln("compile", mlp, "--target", "sm_89", "-o", first, addr=kilnd.addr)
            self.assertEqual(r.returncode, EXIT_OK, r.stderr)
            with open(os.path.join(first, "sm_89.vmfb"), "rb") as f:
                want = f.read()
            blob = blob_path(kilnd.state_dir, hashlib.sha256(want).hexdigest())
            self.assertIsNotNone(blob)
            with open(blob, "r+b") as f:  # one flipped byte in the middle
                f.seek(os.path.getsize(blob) // 2)
                b = f.read(1)
                f.seek(-1, os.SEEK_CUR)
                f.write(bytes([b[0] ^ 0xFF]))
            again = os.path.join(tmp, "again")
            r = run_kiln("compile", mlp, "--target", "sm_89", "-o", again, addr=kilnd.addr)
            self.assertEqual(r.returncode, EXIT_OK, r.stdout + r.stderr)
            self.assertIn("corrupt", r.stderr)
            with open(os.path.join(again, "sm_89.vmfb"), "rb") as f:
                self.assertEqual(f.read(), want)
