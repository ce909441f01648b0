"""`kiln recompile`, as an operator runs it on a fleet: the real CLI against the
real kilnd, with real compiles of the example models.

The legacy files stand for old builds of examples/*.mlir (tests/tools/vmfb_fixtures'
legacy and fleet modes: embedded source, only the source's digest, or nothing);
current, invalid and non-VMFB files come from the fixed fixtures. Checks: a mixed
tree mirrored under -o (outputs load as current, the report is truthful, exit 8
for what was left behind); the default NAME.hal7.vmfb outputs; a manifest (JSON
and CSV) rescuing a file with no source; unique work (copies of one (source,
target) cost one compile and one fetch); --in-place --backup and a second run that
sends nothing; an interrupted run resumed without redoing finished files; files
too large for one message; --dry-run writes nothing; usage errors exit 2 before
anything is sent; an unreachable kilnd exits 3. kilnd drained (SIGTERM) or killed
in the middle of a run and started again on the same address: the CLI makes
another Recompile call and finishes; kilnd gone for good: 5 more calls, then exit
3 and a resumable report; a refusal (PERMISSION_DENIED) is not retried.
"""
import hashlib
import json
import os
import re
import shutil
import signal
import subprocess
import tempfile
import time
import unittest
from collections import Counter

from kilnharness import (BUILD_DIR, EXAMPLES, KILN, Kilnd, KilnTestCase, SANITIZED, WRAPPED, clean_env,
                         free_tcp_port, run_kiln)

FIXTURES = os.path.join(BUILD_DIR, "tests", "vmfb_fixtures.out")
VMFB_FIXTURES = os.path.join(BUILD_DIR, "tests", "vmfb_fixtures")
SLOW = 4 if (WRAPPED or SANITIZED) else 1
EXIT_OK, EXIT_USAGE, EXIT_UNREACHABLE, EXIT_INCOMPLETE, EXIT_DENIED, EXIT_INTERRUPTED = 0, 2, 3, 8, 9, 130
RETRY_LINE = r"retrying in [0-9.]+ s \(attempt (\d) of 6\)"


def example(name):
    return os.path.join(EXAMPLES, name)


def sha256_file(path):
    with open(path, "rb") as f:
        return hashlib.sha256(f.read()).hexdigest()


def make_legacy(path, source, target, *extra):
    os.makedirs(os.path.dirname(path), exist_ok=True)
    subprocess.run([VMFB_FIXTURES, "legacy", path, "--source", source, "--target", target] + list(extra),
                   check=True, stdout=subprocess.DEVNULL, env=clean_env())


def make_fleet(outdir, sources, targets, copies, *extra):
    subprocess.run([VMFB_FIXTURES, "fleet", outdir, "--sources", ",".join(sources), "--targets", ",".join(targets),
                    "--copies", str(copies)] + list(extra),
                   check=True, stdout=subprocess.DEVNULL, env=clean_env())


def vmfbs(root):
    out = []
    for d, _, names in os.walk(root):
        out += [os.path.join(d, n) for n in names if n.endswith(".vmfb")]
    return sorted(out)


def is_current(path):
    return run_kiln("inspect", path).returncode == 0


def read_bytes(path):
    with open(path, "rb") as f:
        return f.read()


class TempDirTest(KilnTestCase):
    def setUp(self):
        self.tmp = tempfile.TemporaryDirectory(prefix="kiln-recompile-")

    def tearDown(self):
        self.tmp.cleanup()

    def path(self, *parts):
        return os.path.join(self.tmp.name, *parts)


class RecompileTest(TempDirTest):
    def setUp(self):
        super().setUp()
        self.kilnd = Kilnd("--workers", "2").start()

    def tearDown(self):
        self.stop_kilnd()
        super().tearDown()

    def stop_kilnd(self):
        if self.kilnd.alive():
            self.assertCleanStop(self.kilnd)
        self.kilnd.tmp.cleanup()

    def kiln(self, *args, timeout=120):
        return run_kiln(*args, addr=self.kilnd.addr, timeout=timeout * SLOW)

    def recompile_json(self, *args, expect=None):
        r = self.kiln("recompile", "--json", *args)
        try:
            doc = json.loads(r.stdout)
        except ValueError:
            self.fail(f"--json did not print JSON (exit {r.returncode}):\n{r.stdout}\n{r.stderr}")
        if expect is not None:
            self.assertEqual(r.returncode, expect, r.stderr + json.dumps(doc["summary"]))
        return r, doc, {f["path"]: f for f in doc["files"]}

    def stats(self):
        r = self.kiln("stats", "--json")
        self.assertEqual(r.returncode, 0, r.stderr)
        return json.loads(r.stdout)

    def compiled(self):
        return self.stats()["jobs"]["targets_compiled"]

    def calls(self, method):
        for m in self.stats()["methods"]:
            if m["method"] == "/kiln.v1.Kiln/" + method:
                return m["total"]
        return 0

    def store_source(self, source):
        """kilnd keeps a source it compiled: later files naming its digest find it."""
        r = self.kiln("compile", source, "--target", "valhall1", "-o", self.path("stored"))
        self.assertEqual(r.returncode, 0, r.stdout + r.stderr)

    # ---- a mixed tree -----------------------------------------------------

    def mixed_tree(self):
        tree = self.path("fleet")
        os.makedirs(tree)
        shutil.copy(os.path.join(FIXTURES, "current_zip_cuda.vmfb"), self.path("fleet", "current.vmfb"))
        make_legacy(self.path("fleet", "models", "mlp_embedded.vmfb"), example("mlp.mlir"), "sm_89", "--embed")
        make_legacy(self.path("fleet", "models", "convnet_digest.vmfb"), example("convnet.mlir"), "gfx942",
                    "--shape", "noheader")
        make_legacy(self.path("fleet", "attention_unknown.vmfb"), example("attention.mlir"), "sm_89",
                    "--no-digest")
        shutil.copy(os.path.join(FIXTURES, "invalid_crc.vmfb"), self.path("fleet", "broken.vmfb"))
        with open(self.path("fleet", "README.txt"), "w") as f:
            f.write("not a VMFB, and not named like one: the walk skips it\n")
        shutil.copy(os.path.join(FIXTURES, "not_a_vmfb.txt"), self.path("notes.txt"))
        self.store_source(example("convnet.mlir"))
        return tree

    def test_mixed_tree_to_outdir(self):
        tree = self.mixed_tree()
        out = self.path("out")
        named = self.path("notes.txt")  # named on the command line: it counts, whatever its name
        r, doc, files = self.recompile_json(tree, named, "-o", out, expect=EXIT_INCOMPLETE)
        outcome = {os.path.relpath(p, self.tmp.name): f["outcome"] for p, f in files.items()}
        self.assertEqual(outcome, {
            "fleet/current.vmfb": "current",
            "fleet/models/mlp_embedded.vmfb": "recompiled",
            "fleet/models/convnet_digest.vmfb": "recompiled",
            "fleet/attention_unknown.vmfb": "no_source",
            "fleet/broken.vmfb": "invalid",
            "notes.txt": "invalid",
        })
        self.assertIsNone(doc["error"])
        s = doc["summary"]
        self.assertEqual((s["files"], s["current"], s["legacy"], s["recompiled"], s["no_source"], s["invalid"],
                          s["failed"]), (6, 1, 3, 2, 1, 2, 0))
        self.assertEqual(s["artifacts_fetched"], 2)
        # The tree is mirrored under -o, relative to the PATH it was found under.
        self.assertEqual(vmfbs(out), [os.path.join(out, "models", "convnet_digest.vmfb"),
                                      os.path.join(out, "models", "mlp_embedded.vmfb")])
        for name, target in (("mlp_embedded", "sm_89"), ("convnet_digest", "gfx942")):
            f = files[self.path("fleet", "models", name + ".vmfb")]
            produced = os.path.join(out, "models", name + ".vmfb")
            self.assertEqual(f["output"], produced)
            self.assertEqual(f["class"], "legacy")
            self.assertEqual(f["code"], "OK")
            self.assertEqual([t["target"] for t in f["targets"]], [target])
            self.assertEqual(f["targets"][0]["artifact_digest"], sha256_file(produced))
            self.assertEqual(f["targets"][0]["size_bytes"], os.path.getsize(produced))
            self.assertEqual(f["legacy_digest"], sha256_file(self.path("fleet", "models", name + ".vmfb")))
            self.assertTrue(f["source_digest"])
            self.assertTrue(is_current(produced), produced)
            r2 = run_kiln("inspect", "--json", produced)
            self.assertEqual(json.loads(r2.stdout)[0]["provenance"]["target"], target)
        self.assertEqual(files[self.path("fleet", "models", "convnet_digest.vmfb")]["source_digest"],
                         sha256_file(example("convnet.mlir")))
        unknown = files[self.path("fleet", "attention_unknown.vmfb")]
        self.assertIsNone(unknown["output"])
        self.assertIn("manifest", unknown["reason"])
        self.assertIn("CRC", files[self.path("fleet", "broken.vmfb")]["reason"])
        self.assertFalse(os.path.exists(os.path.join(out, "attention_unknown.vmfb")))

        # Again, for people: nothing is redone; what is left is still reported.
        before = self.compiled()
        r = self.kiln("recompile", tree, named, "-o", out)
        self.assertEqual(r.returncode, EXIT_INCOMPLETE, r.stdout + r.stderr)
        self.assertEqual(self.compiled(), before)
        lines = r.stdout.splitlines()
        self.assertRegex(lines[0], r"^FILE +OUTCOME +TARGET +OUTPUT or REASON$")
        row = {l.split()[0]: l.split()[1] for l in lines[1:] if l.strip() and not l[0].isdigit()}
        self.assertEqual(row[self.path("fleet", "models", "mlp_embedded.vmfb")], "done")
        self.assertEqual(row[self.path("fleet", "attention_unknown.vmfb")], "no_source")
        self.assertIn("already recompiled: " + os.path.join(out, "models", "mlp_embedded.vmfb"), r.stdout)
        self.assertRegex(r.stdout, r"6 file\(s\): 1 current, 3 legacy, 2 invalid; 0 recompiled, 0 cached, "
                                   r"2 done before, 1 no source, 0 failed")
        self.assertEqual(r.stderr.strip(), "", "no progress bar or noise when stderr is not a terminal")

    def test_default_output_beside(self):
        make_legacy(self.path("d", "model.vmfb"), example("mlp.mlir"), "gfx1100", "--embed")
        r, doc, files = self.recompile_json(self.path("d"), expect=EXIT_OK)
        produced = self.path("d", "model.hal7.vmfb")
        self.assertEqual(files[self.path("d", "model.vmfb")]["output"], produced)
        self.assertTrue(is_current(produced))
        self.assertFalse(is_current(self.path("d", "model.vmfb")), "the old file stays as it was")
        # The next run sees the new file as current and the old one as done.
        r, doc, files = self.recompile_json(self.path("d"), expect=EXIT_OK)
        self.assertEqual(files[self.path("d", "model.vmfb")]["outcome"], "done")
        self.assertEqual(files[produced]["outcome"], "current")
        self.assertEqual(doc["summary"]["artifacts_fetched"], 0)

    def test_progress_on_a_terminal_only(self):
        make_fleet(self.path("fleet"), [example("mlp.mlir")], ["gfx942"], 4, "--embed")
        master, slave = os.openpty()
        try:
            proc = subprocess.Popen([KILN, "--addr", self.kilnd.addr, "recompile", self.path("fleet"), "-o",
                                     self.path("out")], stdout=subprocess.PIPE, stderr=slave, env=clean_env())
            os.close(slave)
            seen = b""
            while True:
                try:
                    chunk = os.read(master, 4096)
                except OSError:  # EIO: the child closed the terminal
                    break
                if not chunk:
                    break
                seen += chunk
            stdout = proc.communicate(timeout=60 * SLOW)[0].decode()
        finally:
            os.close(master)
        self.assertEqual(proc.returncode, EXIT_OK, stdout)
        text = seen.decode(errors="replace")
        self.assertRegex(text, r"\d+/4 files, \d+ legacy: \d+ recompiled, \d+ cached, 0 failed \| [0-9.]+/s")
        self.assertIn("\x1b[1A\x1b[J", text)  # each frame replaces the last, the last one is erased
        self.assertTrue(text.rstrip("\r\n").endswith("\x1b[J"), repr(text[-80:]))
        self.assertNotIn("\x1b", stdout)
        self.assertIn("4 file(s)", stdout)

    # ---- the manifest -----------------------------------------------------

    def test_manifest_json_and_csv(self):
        make_legacy(self.path("in", "a", "att.vmfb"), example("attention.mlir"), "sm_89", "--no-digest")
        make_legacy(self.path("in", "b", "att2.vmfb"), example("attention.mlir"), "gfx942", "--no-digest",
                    "--stamp", "2")
        os.makedirs(self.path("m", "src"))
        shutil.copy(example("attention.mlir"), self.path("m", "src", "attention.mlir"))
        # JSON: by path (relative to the manifest), one file for two targets.
        with open(self.path("m", "fleet.json"), "w") as f:
            json.dump({"entries": [{"vmfb": "../in/a/att.vmfb", "source": "src/attention.mlir",
                                    "targets": ["sm_89", "gfx942"], "flags": []}]}, f)
        r, doc, files = self.recompile_json(self.path("in", "a"), "-o", self.path("out1"), "--manifest",
                                            self.path("m", "fleet.json"), expect=EXIT_OK)
        f = files[self.path("in", "a", "att.vmfb")]
        self.assertEqual(f["outcome"], "recompiled", f["reason"])
        self.assertEqual(f["source_digest"], sha256_file(example("attention.mlir")))
        self.assertEqual(sorted(t["target"] for t in f["targets"]), ["gfx942", "sm_89"])
        for t in f["targets"]:
            want = self.path("out1", "att." + t["target"] + ".vmfb")
            self.assertEqual(t["output"], want)
            self.assertTrue(is_current(want), want)
        self.assertIsNone(f["output"])  # several outputs: see targets
        # A resumed run knows both outputs from the manifest.
        r, doc, files = self.recompile_json(self.path("in", "a"), "-o", self.path("out1"), "--manifest",
                                            self.path("m", "fleet.json"), expect=EXIT_OK)
        self.assertEqual(files[self.path("in", "a", "att.vmfb")]["outcome"], "done")

        # CSV: by digest, with a quoted field, a comment row and flags.
        digest = sha256_file(self.path("in", "b", "att2.vmfb"))
        with open(self.path("m", "fleet.csv"), "w") as f:
            f.write("# fleet of 2024\nvmfb,source,targets,flags\n"
                    f"sha256:{digest},\"src/attention.mlir\",gfx942,--iree-opt-level=O3\n")
        r, doc, files = self.recompile_json(self.path("in"), "-o", self.path("out2"), "--manifest",
                                            self.path("m", "fleet.csv"), expect=EXIT_INCOMPLETE)
        self.assertEqual(files[self.path("in", "b", "att2.vmfb")]["outcome"], "recompiled")
        self.assertEqual(files[self.path("in", "a", "att.vmfb")]["outcome"], "no_source")  # not in this one
        produced = self.path("out2", "b", "att2.vmfb")
        info = json.loads(run_kiln("inspect", "--json", produced).stdout)[0]
        self.assertEqual(info["class"], "current")
        self.assertEqual(info["provenance"]["target"], "gfx942")
        self.assertIn("O3", info["provenance"]["flags"])

    # ---- unique work ------------------------------------------------------

    def test_copies_cost_one_compile_and_one_fetch(self):
        self.store_source(example("mlp.mlir"))
        # 12 copies of one (source, target) in every shape, each with its own bytes.
        make_fleet(self.path("fleet"), [example("mlp.mlir")], ["sm_89"], 12)
        files_in = vmfbs(self.path("fleet"))
        self.assertEqual(len(files_in), 12)
        self.assertEqual(len({sha256_file(p) for p in files_in}), 12)
        before = self.compiled()
        r, doc, files = self.recompile_json(self.path("fleet"), "-o", self.path("out"), "--jobs", "4",
                                            expect=EXIT_OK)
        self.assertEqual(self.compiled() - before, 1, "one compile for twelve copies")
        s = doc["summary"]
        self.assertEqual(s["recompiled"] + s["cached"], 12)
        self.assertEqual(s["artifacts_fetched"], 1)
        self.assertEqual(s["artifacts_copied"], 11)
        outs = vmfbs(self.path("out"))
        self.assertEqual(len(outs), 12)
        self.assertEqual(len({sha256_file(p) for p in outs}), 1)
        self.assertEqual(s["bytes_written"], 12 * os.path.getsize(outs[0]))

    # ---- in place ---------------------------------------------------------

    def test_in_place_with_backup(self):
        make_legacy(self.path("d", "one.vmfb"), example("mlp.mlir"), "gfx942", "--embed")
        make_legacy(self.path("d", "two.vmfb"), example("convnet.mlir"), "sm_89", "--embed", "--shape", "nodeps")
        with open(self.path("d", "two.vmfb.bak"), "wb") as f:
            f.write(b"an older backup: kept")
        old = {n: read_bytes(self.path("d", n)) for n in ("one.vmfb", "two.vmfb")}
        r, doc, files = self.recompile_json(self.path("d"), "--in-place", "--backup", expect=EXIT_OK)
        for n in ("one.vmfb", "two.vmfb"):
            self.assertEqual(files[self.path("d", n)]["outcome"], "recompiled")
            self.assertEqual(files[self.path("d", n)]["output"], self.path("d", n))
            self.assertTrue(is_current(self.path("d", n)), n)
        self.assertEqual(read_bytes(self.path("d", "one.vmfb.bak")), old["one.vmfb"])
        self.assertEqual(read_bytes(self.path("d", "two.vmfb.bak")), b"an older backup: kept")
        self.assertEqual(sorted(os.listdir(self.path("d"))),
                         ["one.vmfb", "one.vmfb.bak", "two.vmfb", "two.vmfb.bak"], "no temporary files left")
        # A second run finds everything current and does not even call kilnd.
        before = (self.calls("Recompile"), self.calls("GetServerInfo"))
        r, doc, files = self.recompile_json(self.path("d"), "--in-place", "--backup", expect=EXIT_OK)
        self.assertEqual({f["outcome"] for f in files.values()}, {"current"})
        self.assertEqual((self.calls("Recompile"), self.calls("GetServerInfo")), before)

    def test_unwritable_output_fails_that_file_only(self):
        make_legacy(self.path("d", "a.vmfb"), example("mlp.mlir"), "sm_89", "--embed")
        make_legacy(self.path("d", "b.vmfb"), example("convnet.mlir"), "sm_89", "--embed")
        os.makedirs(self.path("out"))
        os.makedirs(self.path("out", "a.vmfb"))  # a directory where a's output should go
        r, doc, files = self.recompile_json(self.path("d"), "-o", self.path("out"), expect=EXIT_INCOMPLETE)
        a, b = files[self.path("d", "a.vmfb")], files[self.path("d", "b.vmfb")]
        self.assertEqual(a["outcome"], "failed")
        self.assertIn(self.path("out", "a.vmfb"), a["reason"])
        self.assertEqual(b["outcome"], "recompiled")
        self.assertTrue(is_current(self.path("out", "b.vmfb")))

    def test_outputs_never_go_through_a_symlink_out_of_the_folder(self):
        make_legacy(self.path("d", "sub", "a.vmfb"), example("mlp.mlir"), "sm_89", "--embed")
        make_legacy(self.path("d", "b.vmfb"), example("convnet.mlir"), "sm_89", "--embed")
        os.makedirs(self.path("out"))
        os.makedirs(self.path("elsewhere"))
        os.symlink(self.path("elsewhere"), self.path("out", "sub"))  # planted in the output folder
        r, doc, files = self.recompile_json(self.path("d"), "-o", self.path("out"), expect=EXIT_INCOMPLETE)
        a, b = files[self.path("d", "sub", "a.vmfb")], files[self.path("d", "b.vmfb")]
        self.assertEqual(a["outcome"], "failed")
        self.assertIn("outside -o", a["reason"])
        self.assertEqual(os.listdir(self.path("elsewhere")), [], "written through the symlink")
        self.assertEqual(b["outcome"], "recompiled")
        self.assertTrue(is_current(self.path("out", "b.vmfb")))

    # ---- too large for one message ----------------------------------------

    def test_files_over_the_message_limit(self):
        self.stop_kilnd()
        self.kilnd = Kilnd("--workers", "2", "--max-message-bytes", "64KiB").start()
        self.store_source(example("convnet.mlir"))
        make_legacy(self.path("d", "embedded.vmfb"), example("mlp.mlir"), "gfx950", "--embed",
                    "--flags", "--iree-opt-level=O2")
        make_legacy(self.path("d", "digest.vmfb"), example("convnet.mlir"), "sm_89")
        make_legacy(self.path("d", "unknown.vmfb"), example("attention.mlir"), "sm_89", "--no-digest")
        uploads = self.calls("PutSource")
        r, doc, files = self.recompile_json(self.path("d"), "-o", self.path("out"), expect=EXIT_INCOMPLETE)
        # No VMFB went inline: the embedded source went up with PutSource instead.
        self.assertEqual(self.calls("PutSource") - uploads, 1)
        self.assertEqual(files[self.path("d", "embedded.vmfb")]["outcome"], "recompiled")
        self.assertEqual(files[self.path("d", "digest.vmfb")]["outcome"], "recompiled")
        unknown = files[self.path("d", "unknown.vmfb")]
        self.assertEqual(unknown["outcome"], "no_source")
        self.assertIn("manifest", unknown["reason"])
        info = json.loads(run_kiln("inspect", "--json", self.path("out", "embedded.vmfb")).stdout)[0]
        self.assertEqual((info["class"], info["provenance"]["target"]), ("current", "gfx950"))
        self.assertIn("O2", info["provenance"]["flags"])

    # ---- dry run ----------------------------------------------------------

    def test_dry_run_writes_nothing(self):
        tree = self.mixed_tree()
        before = self.compiled()
        r, doc, files = self.recompile_json(tree, "-o", self.path("out"), "--dry-run", expect=EXIT_INCOMPLETE)
        self.assertFalse(os.path.exists(self.path("out")), "a dry run creates nothing")
        self.assertEqual(self.compiled(), before)
        self.assertEqual(files[self.path("fleet", "models", "mlp_embedded.vmfb")]["outcome"], "would_recompile")
        self.assertEqual(files[self.path("fleet", "attention_unknown.vmfb")]["outcome"], "no_source")
        self.assertEqual(files[self.path("fleet", "current.vmfb")]["outcome"], "current")
        self.assertTrue(doc["summary"]["dry_run"])
        self.assertEqual(doc["summary"]["bytes_written"], 0)

    # ---- interrupt and resume ---------------------------------------------

    def test_interrupt_then_resume(self):
        sources = [example(n) for n in ("mlp.mlir", "convnet.mlir", "attention.mlir")]
        targets = ["sm_89", "gfx942", "gfx1100", "gfx950", "arm5gen", "valhall1"]
        make_fleet(self.path("fleet"), sources, targets, 2, "--embed")
        n_files = len(vmfbs(self.path("fleet")))
        unique = len(sources) * len(targets)
        out = self.path("out")
        cmd = [KILN, "--addr", self.kilnd.addr, "recompile", self.path("fleet"), "-o", out, "--jobs", "1"]
        proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=clean_env())
        deadline = time.monotonic() + 60 * SLOW
        while time.monotonic() < deadline and proc.poll() is None and len(vmfbs(out) if os.path.isdir(out) else []) < 2:
            time.sleep(0.01)
        proc.send_signal(signal.SIGINT)
        stdout, stderr = proc.communicate(timeout=60 * SLOW)
        if proc.returncode == EXIT_OK:
            self.skipTest("the whole fleet finished before the interrupt arrived")
        self.assertEqual(proc.returncode, EXIT_INTERRUPTED, stdout + stderr)
        self.assertIn("interrupted", stderr)
        self.assertIn("not_processed", stdout)  # the partial report
        written = vmfbs(out)
        self.assertGreater(len(written), 0)
        self.assertLess(len(written), n_files)
        for p in written:
            self.assertTrue(is_current(p), p)
        self.assertEqual([n for n in os.listdir(out) if not os.path.isdir(os.path.join(out, n))
                          and not n.endswith(".vmfb")], [], "no partial file under an output name")
        # Resumed: finished files are done, the rest recompiled or cached, nothing compiled twice.
        r, doc, files = self.recompile_json(self.path("fleet"), "-o", out, expect=EXIT_OK)
        done = {p for p, f in files.items() if f["outcome"] == "done"}
        self.assertEqual(len(done), len(written))
        self.assertEqual({f["outcome"] for p, f in files.items() if p not in done} - {"recompiled", "cached"},
                         set())
        self.assertEqual(len(vmfbs(out)), n_files)
        self.assertLessEqual(self.compiled(), unique)


class RecompileRetryTest(TempDirTest):
    """kilnd stops in the middle of a run: drained (SIGTERM), killed, or for good.

    Each kilnd listens on one fixed port with one state directory, so a kilnd
    started after the first is the same address to the running CLI. One worker
    and 54 files that are each their own compile make a run of several seconds.
    KILN_RETRY_BASE_MS sets the first wait between calls (0.5 s by default): the
    default here, longer under valgrind, where kilnd takes seconds to stop and
    start."""

    SOURCES = ("mlp.mlir", "convnet.mlir", "attention.mlir")
    TARGETS = ("sm_89", "gfx942", "gfx1100", "gfx950", "arm5gen", "valhall1")
    FLAG_SETS = ((), ("--flags", "--iree-opt-level=O2"), ("--flags", "--iree-opt-level=O3"))

    def setUp(self):
        super().setUp()
        self.port = free_tcp_port()
        self.state = self.path("state")
        self.kilnds, self.procs = [], []

    def tearDown(self):
        for proc in self.procs:
            if proc.poll() is None:
                proc.kill()
            proc.communicate()
        for kilnd in self.kilnds:
            if kilnd.alive():
                kilnd.proc.kill()
                kilnd.proc.wait()
            if not kilnd.log_file.closed:
                kilnd.log_file.close()
            kilnd.tmp.cleanup()
        super().tearDown()

    def start_kilnd(self, *extra):
        # A killed kilnd leaves its address file; the harness waits for the new one.
        addr_file = os.path.join(self.state, "kilnd.addr")
        if os.path.exists(addr_file):
            os.unlink(addr_file)
        kilnd = Kilnd("--workers", "1", "--drain-timeout", "1s", *extra, listen=f"127.0.0.1:{self.port}",
                      state_dir=self.state)
        self.kilnds.append(kilnd)
        return kilnd.start()

    def fleet(self):
        for i, flags in enumerate(self.FLAG_SETS):
            make_fleet(self.path("fleet", f"set{i}"), [example(n) for n in self.SOURCES], self.TARGETS, 1,
                       "--embed", *flags)
        files = vmfbs(self.path("fleet"))
        self.assertEqual(len(files), len(self.SOURCES) * len(self.TARGETS) * len(self.FLAG_SETS))
        return self.path("fleet"), len(files)

    def start_recompile(self, addr, tree, out, base_ms, token=None):
        env = {"KILN_RETRY_BASE_MS": str(base_ms)}
        if token:
            env["KILN_TOKEN"] = token
        proc = subprocess.Popen([KILN, "--addr", addr, "recompile", "--json", tree, "-o", out],
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=clean_env(**env))
        self.procs.append(proc)
        return proc

    def wait_for_outputs(self, proc, out, n):
        deadline = time.monotonic() + 60 * SLOW
        while time.monotonic() < deadline and proc.poll() is None:
            if os.path.isdir(out) and len(vmfbs(out)) >= n:
                return
            time.sleep(0.01)
        self.fail(f"no {n} outputs while the run went on (exit {proc.poll()})")

    def finish(self, proc):
        stdout, stderr = proc.communicate(timeout=180 * SLOW)
        try:
            doc = json.loads(stdout)
        except ValueError:
            self.fail(f"--json did not print JSON (exit {proc.returncode}):\n{stdout}\n{stderr}")
        return stderr, doc, {f["path"]: f for f in doc["files"]}

    def snapshot(self, out):
        return {p: (os.stat(p).st_ino, os.stat(p).st_mtime_ns) for p in vmfbs(out)}

    def replaced_mid_run(self, sig):
        """Stops kilnd with `sig` once some outputs are written, starts another on
        the same address and state, and checks that the run finishes truthfully."""
        kilnd = self.start_kilnd()
        tree, n = self.fleet()
        out = self.path("out")
        proc = self.start_recompile(kilnd.addr, tree, out, 500 * SLOW)
        self.wait_for_outputs(proc, out, 2)
        if sig == signal.SIGTERM:
            self.assertCleanStop(kilnd)
        else:
            kilnd.stop(sig)
        before = self.snapshot(out)  # whole files (written atomically), finished on the first kilnd
        again = self.start_kilnd()
        stderr, doc, files = self.finish(proc)
        left = {p: (f["outcome"], f["code"], f["reason"]) for p, f in files.items()
                if f["outcome"] not in ("recompiled", "cached")}
        self.assertEqual(proc.returncode, EXIT_OK, f"{stderr}{json.dumps(doc['summary'])}\n{left}")
        self.assertIsNone(doc["error"])
        attempts = [int(a) for a in re.findall(RETRY_LINE, stderr)]
        self.assertGreaterEqual(len(attempts), 1, stderr)
        self.assertEqual(attempts[0], 2, stderr)
        self.assertLess(len(before), n, "kilnd stopped with work left")
        s = doc["summary"]
        self.assertEqual((s["files"], s["seen"], s["legacy"]), (n, n, n), "each file counted once")
        self.assertEqual(Counter(f["outcome"] for f in files.values()).keys() - {"recompiled", "cached"}, set())
        self.assertEqual(s["recompiled"] + s["cached"], n)
        self.assertEqual((s["failed"], s["not_processed"]), (0, 0))
        # Every unique artifact was fetched once, and no finished file was resent:
        # its artifact would have been copied from its output.
        self.assertEqual((s["artifacts_fetched"], s["artifacts_copied"]), (n, 0))
        outs = vmfbs(out)
        self.assertEqual(len(outs), n)
        self.assertEqual(s["bytes_written"], sum(os.path.getsize(p) for p in outs))
        for path, f in files.items():
            self.assertEqual(f["targets"][0]["artifact_digest"], sha256_file(f["output"]), path)
        for p in outs:
            self.assertTrue(is_current(p), p)
        self.assertEqual({p: self.snapshot(out)[p] for p in before}, before, "outputs written before stay")
        everything = [os.path.join(d, name) for d, _, names in os.walk(out) for name in names]
        self.assertEqual(sorted(everything), outs, "no temporary files left")
        return stderr, again

    def test_drained_kilnd_replaced_mid_run(self):
        stderr, again = self.replaced_mid_run(signal.SIGTERM)
        # Draining, kilnd ends the jobs of unfinished items (UNAVAILABLE, "kilnd is
        # shutting down") and, when the call outlives the drain, the call itself. A
        # download still open when the 1 s drain runs out is cut (CANCELLED); its
        # file is retried like the others.
        self.assertRegex(stderr, r"kilnd could not finish \d+ file\(s\) \((UNAVAILABLE|CANCELLED): |"
                                 r"the Recompile call ended \(UNAVAILABLE: ")
        self.assertCleanStop(again)

    def test_killed_kilnd_replaced_mid_run(self):
        stderr, again = self.replaced_mid_run(signal.SIGKILL)
        self.assertIn("the Recompile call ended (UNAVAILABLE: ", stderr)
        self.assertCleanStop(again)

    def test_kilnd_gone_for_good(self):
        kilnd = self.start_kilnd()
        tree, n = self.fleet()
        out = self.path("out")
        proc = self.start_recompile(kilnd.addr, tree, out, 20)
        self.wait_for_outputs(proc, out, 2)
        self.assertCleanStop(kilnd)
        stderr, doc, files = self.finish(proc)
        self.assertEqual(proc.returncode, EXIT_UNREACHABLE, stderr)
        attempts = [int(a) for a in re.findall(RETRY_LINE, stderr)]
        self.assertEqual(attempts, [2, 3, 4, 5, 6], stderr)
        self.assertIn("cannot reach kilnd", stderr)
        self.assertEqual(doc["error"]["code"], "UNAVAILABLE")
        finished = {p for p, f in files.items() if f["outcome"] != "not_processed"}
        self.assertGreater(len(finished), 0)
        self.assertLess(len(finished), n)
        self.assertEqual({files[p]["outcome"] for p in finished}, {"recompiled"})
        for p, f in files.items():
            if p not in finished:
                self.assertIn("run again to resume", f["reason"])
        self.assertEqual(len(vmfbs(out)), len(finished))
        self.assertEqual(doc["summary"]["not_processed"], n - len(finished))
        # Run again: what was written is done, the rest is recompiled.
        kilnd = self.start_kilnd()
        r = run_kiln("recompile", "--json", tree, "-o", out, addr=kilnd.addr, timeout=180 * SLOW)
        self.assertEqual(r.returncode, EXIT_OK, r.stderr)
        outcomes = {f["path"]: f["outcome"] for f in json.loads(r.stdout)["files"]}
        self.assertEqual({p for p, o in outcomes.items() if o == "done"}, finished)
        self.assertEqual(len(vmfbs(out)), n)
        self.assertNotRegex(r.stderr, RETRY_LINE)
        self.assertCleanStop(kilnd)

    def test_interrupt_while_waiting_to_retry(self):
        kilnd = self.start_kilnd()
        tree, n = self.fleet()
        out = self.path("out")
        proc = self.start_recompile(kilnd.addr, tree, out, 60000)  # a minute before the next call
        self.wait_for_outputs(proc, out, 2)
        self.assertCleanStop(kilnd)
        line = proc.stderr.readline()
        self.assertRegex(line, RETRY_LINE)
        waited = time.monotonic()
        proc.send_signal(signal.SIGINT)
        stdout, stderr = proc.communicate(timeout=30 * SLOW)
        self.assertLess(time.monotonic() - waited, 10, "the interrupt cut the wait short")
        self.assertEqual(proc.returncode, EXIT_INTERRUPTED, stderr)
        self.assertIn("interrupted", stderr)
        doc = json.loads(stdout)
        self.assertTrue(doc["summary"]["interrupted"])
        unfinished = [f for f in doc["files"] if f["outcome"] == "not_processed"]
        self.assertGreater(len(unfinished), 0)
        self.assertEqual({f["reason"] for f in unfinished}, {"interrupted before it was done; run again to resume"})

    def test_refused_call_is_not_retried(self):
        reader = "r" * 20 + "0123456789abcdef"
        tokens = self.path("tokens")
        with open(tokens, "w") as f:
            f.write(f"ci-read read {reader}\n")
        kilnd = self.start_kilnd("--token-file", tokens)
        make_legacy(self.path("d", "x.vmfb"), example("mlp.mlir"), "sm_89", "--embed")
        # GetServerInfo is allowed to a reader; the Recompile call is refused.
        proc = self.start_recompile(kilnd.addr, self.path("d"), self.path("o"), 20, token=reader)
        stderr, doc, files = self.finish(proc)
        self.assertEqual(proc.returncode, EXIT_DENIED, stderr)
        self.assertEqual(doc["error"]["code"], "PERMISSION_DENIED")
        self.assertNotRegex(stderr, RETRY_LINE)
        r = run_kiln("stats", "--json", addr=kilnd.addr, token=reader)
        self.assertEqual(r.returncode, 0, r.stderr)
        calls = {m["method"]: m["total"] for m in json.loads(r.stdout)["methods"]}
        self.assertEqual(calls.get("/kiln.v1.Kiln/Recompile"), 1)
        self.assertCleanStop(kilnd)


class RecompileOfflineTest(TempDirTest):
    """What is decided before kilnd is asked anything."""

    def test_bad_manifest_and_flags_exit_2(self):
        make_legacy(self.path("in", "x.vmfb"), example("mlp.mlir"), "sm_89", "--embed")
        dead = f"127.0.0.1:{free_tcp_port()}"  # nothing is sent: a usage error comes first
        cases = {
            "bad.json": ('[{"vmfb": "x.vmfb", "source": "s.mlir"},\n  {"vmfb": }]', r"bad\.json:2: not valid JSON"),
            "nosrc.json": ('[{"vmfb": "x.vmfb", "source": "missing.mlir"}]',
                           r"nosrc\.json: entry 1: source missing\.mlir .*No such file"),
            "typo.json": ('[{"vmfb": "x.vmfb", "sorce": "s.mlir"}]', r"typo\.json: entry 1: unknown key \"sorce\""),
            "nocol.csv": ("vmfb,targets\nx.vmfb,sm_89\n", r"nocol\.csv:1: the header row has no \"source\" column"),
            "short.csv": ("vmfb,source,targets\nx.vmfb\n", r"short\.csv:2: 1 field\(s\)"),
        }
        shutil.copy(example("mlp.mlir"), self.path("in", "s.mlir"))
        for name, (text, pattern) in cases.items():
            with self.subTest(manifest=name):
                with open(self.path("in", name), "w") as f:
                    f.write(text)
                r = run_kiln("--addr", dead, "recompile", self.path("in"), "--manifest", self.path("in", name))
                self.assertEqual(r.returncode, EXIT_USAGE, r.stdout + r.stderr)
                self.assertRegex(r.stderr, pattern)
                self.assertEqual(r.stdout, "")
        # A manifest from elsewhere may not name files outside its folder, through
        # "..", an absolute path or a symlink; --allow-outside lets its owner do so.
        with open(self.path("secret.txt"), "w") as f:
            f.write("not for kilnd\n")
        os.symlink(self.path("secret.txt"), self.path("in", "link.mlir"))
        escapes = {
            "up.json": '[{"vmfb": "x.vmfb", "source": "../secret.txt"}]',
            "abs.json": json.dumps([{"vmfb": "x.vmfb", "source": self.path("secret.txt")}]),
            "link.json": '[{"vmfb": "x.vmfb", "source": "link.mlir"}]',
        }
        for name, text in escapes.items():
            with self.subTest(manifest=name):
                with open(self.path("in", name), "w") as f:
                    f.write(text)
                r = run_kiln("--addr", dead, "recompile", self.path("in"), "--manifest", self.path("in", name))
                self.assertEqual(r.returncode, EXIT_USAGE, r.stdout + r.stderr)
                self.assertRegex(r.stderr, rf"{re.escape(name)}: entry 1: source .* resolves to "
                                           rf"{re.escape(self.path('secret.txt'))}, outside the manifest's folder")
                self.assertIn("--allow-outside", r.stderr)
                # Allowed, the manifest loads and the run goes on to kilnd (down here: exit 5,
                # not a usage error).
                r = run_kiln("--addr", dead, "recompile", self.path("in"), "--manifest", self.path("in", name),
                             "--allow-outside", "--dry-run")
                self.assertNotIn("outside the manifest's folder", r.stderr)
                self.assertNotEqual(r.returncode, EXIT_USAGE, r.stderr)
        for args, pattern in (
                (["-o", self.path("o"), "--in-place"], "exclude each other"),
                (["--backup"], "--backup goes with --in-place"),
                (["--jobs", "0"], "jobs"),
                (["--priority", "urgent"], "priority"),
                (["--label", "novalue"], "KEY=VALUE"),
                ([self.path("nope")], "cannot read"),
                ([], None)):
            with self.subTest(args=args):
                r = run_kiln("--addr", dead, "recompile", *([self.path("in")] if args else []), *args)
                self.assertEqual(r.returncode, EXIT_USAGE, r.stdout + r.stderr)
                if pattern:
                    self.assertIn(pattern, r.stderr)

    # ---- kilnd down -------------------------------------------------------

    def test_kilnd_unreachable(self):
        make_legacy(self.path("d", "x.vmfb"), example("mlp.mlir"), "sm_89", "--embed")
        r = run_kiln("--addr", f"127.0.0.1:{free_tcp_port()}", "recompile", self.path("d"), "-o", self.path("o"))
        self.assertEqual(r.returncode, EXIT_UNREACHABLE, r.stdout + r.stderr)
        self.assertIn("cannot reach kilnd", r.stderr)
        self.assertNotRegex(r.stderr, RETRY_LINE, "no call was ever opened: nothing to retry")
        self.assertEqual(vmfbs(self.path("o")) if os.path.isdir(self.path("o")) else [], [])

    def test_bad_retry_base_exits_2(self):
        make_legacy(self.path("d", "x.vmfb"), example("mlp.mlir"), "sm_89", "--embed")
        for value in ("0", "soon", "60001"):
            with self.subTest(value=value):
                r = run_kiln("--addr", f"127.0.0.1:{free_tcp_port()}", "recompile", self.path("d"),
                             env={"KILN_RETRY_BASE_MS": value})
                self.assertEqual(r.returncode, EXIT_USAGE, r.stdout + r.stderr)
                self.assertIn("KILN_RETRY_BASE_MS=" + value, r.stderr)

    def test_help(self):
        r = run_kiln("help", "recompile")
        self.assertEqual(r.returncode, 0)
        self.assertIn("recompile", r.stdout)
        self.assertIn("--in-place", r.stdout)
        self.assertIn("  8  recompile:", r.stdout)


if __name__ == "__main__":
    unittest.main()
