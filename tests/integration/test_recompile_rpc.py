"""Recompile over the wire: a non-C client (Python grpcio with messages generated
from kiln.proto) drives the real kilnd's bidirectional Recompile stream with
legacy VMFBs of a real model (made by tests/tools/vmfb_fixtures' legacy mode), the
fixed fixtures (build/tests/vmfb_fixtures.out) and real compiles.

Checks the contract's promises: each item gets one result, in completion order;
sources are found in the documented order (item, provenance, digest attr,
embedded) or the item is NO_SOURCE; current files are skipped unless forced;
unique work is compiled once; dry runs store nothing; protocol errors end the
call with INVALID_ARGUMENT; a cancelled call cancels its jobs and kilnd stays up.
"""
import hashlib
import os
import shutil
import subprocess
import tempfile
import threading
import time
import unittest

import grpc

from kilnharness import BUILD_DIR, EXAMPLES, Kilnd, KilnTestCase, WRAPPED, SANITIZED, distinct  # sets the path
from kiln.v1 import kiln_pb2  # noqa: E402

KILN = "/kiln.v1.Kiln/"
FIXTURES = os.path.join(BUILD_DIR, "tests", "vmfb_fixtures.out")
VMFB_FIXTURES = os.path.join(BUILD_DIR, "tests", "vmfb_fixtures")
O = kiln_pb2  # enums live on the module
SLOW = 4 if (WRAPPED or SANITIZED) else 1

# The model the legacy files stand for, and where they are made.
SOURCE_PATH = os.path.join(EXAMPLES, "mlp.mlir")
with open(SOURCE_PATH, "rb") as _f:
    SOURCE = _f.read()
SOURCE_DIGEST = hashlib.sha256(SOURCE).hexdigest()
LEGACY_DIR = tempfile.mkdtemp(prefix="kiln-recompile-rpc-")
# name -> vmfb_fixtures legacy arguments
LEGACY = {
    "zip_sm89.vmfb": ["--target", "sm_89", "--shape", "hal6_zip", "--stamp", "a"],
    "noheader_sm89.vmfb": ["--target", "ada", "--shape", "noheader", "--stamp", "b"],
    "flat_gfx1100.vmfb": ["--target", "gfx1100", "--shape", "hal6_flat"],
    "embedded_gfx950.vmfb": ["--target", "gfx950", "--shape", "bytecode16", "--embed"],
    "unknown.vmfb": ["--target", "sm_89", "--no-digest"],
}


def setUpModule():
    for name, args in LEGACY.items():
        subprocess.run([VMFB_FIXTURES, "legacy", os.path.join(LEGACY_DIR, name), "--source", SOURCE_PATH] + args,
                       check=True, stdout=subprocess.DEVNULL)


def tearDownModule():
    shutil.rmtree(LEGACY_DIR, ignore_errors=True)


def legacy(name):
    with open(os.path.join(LEGACY_DIR, name), "rb") as f:
        return f.read()


def fixture(name):
    with open(os.path.join(FIXTURES, name), "rb") as f:
        return f.read()


def unary(channel, method, request, response_cls, timeout=30):
    return channel.unary_unary(
        method, request_serializer=lambda m: m.SerializeToString(),
        response_deserializer=response_cls.FromString)(request, timeout=timeout)


def recompile_call(channel):
    return channel.stream_stream(
        KILN + "Recompile", request_serializer=lambda m: m.SerializeToString(),
        response_deserializer=kiln_pb2.RecompileEvent.FromString)


def recompile(channel, items, options=None, done=True, timeout=120):
    """Sends options, items and done; returns (results by item_id, summary)."""
    def requests():
        if options is not None:
            yield kiln_pb2.RecompileRequest(options=options)
        for it in items:
            yield kiln_pb2.RecompileRequest(item=it)
        if done:
            yield kiln_pb2.RecompileRequest(done=kiln_pb2.RecompileDone())
    results, summary = {}, None
    for ev in recompile_call(channel)(requests(), timeout=timeout * SLOW):
        if ev.WhichOneof("kind") == "result":
            assert ev.result.item_id not in results, f"two results for {ev.result.item_id}"
            assert summary is None, "a result after the summary"
            results[ev.result.item_id] = ev.result
        else:
            assert summary is None, "two summaries"
            summary = ev.summary
    assert summary is not None, "no summary"
    return results, summary


def stats(channel):
    return unary(channel, KILN + "GetStats", kiln_pb2.GetStatsRequest(), kiln_pb2.GetStatsResponse)


class RecompileRpcTest(KilnTestCase):
    def setUp(self):
        self.kilnd = Kilnd("--workers", "2").start()
        self.channel = grpc.insecure_channel(self.kilnd.addr)

    def tearDown(self):
        self.channel.close()
        self.assertCleanStop(self.kilnd)

    def wait_job(self, job_id):
        """Follows the job to its Terminal event; returns its state."""
        watch = self.channel.unary_stream(
            KILN + "WatchJob", request_serializer=lambda m: m.SerializeToString(),
            response_deserializer=kiln_pb2.JobEvent.FromString)
        for ev in watch(kiln_pb2.WatchJobRequest(job_id=job_id, from_start=True), timeout=120 * SLOW):
            if ev.WhichOneof("event") == "terminal":
                return ev.terminal.state
        self.fail(f"job {job_id} ended without a Terminal event")

    def store_source(self):
        """Compiles the model once for gfx942 (and waits), so kilnd stores its source."""
        resp = unary(self.channel, KILN + "Compile",
                     kiln_pb2.CompileRequest(source=SOURCE, source_name="mlp.mlir", targets=["gfx942"]),
                     kiln_pb2.CompileResponse)
        self.assertEqual(resp.source_digest, SOURCE_DIGEST)
        self.assertEqual(self.wait_job(resp.job_id), kiln_pb2.JOB_STATE_DONE)
        return resp

    def test_mixed_items_each_get_one_truthful_result(self):
        self.store_source()
        items = [
            kiln_pb2.RecompileItem(item_id="zip", vmfb=legacy("zip_sm89.vmfb")),
            kiln_pb2.RecompileItem(item_id="flat", vmfb=legacy("flat_gfx1100.vmfb")),
            kiln_pb2.RecompileItem(item_id="noheader", vmfb=legacy("noheader_sm89.vmfb")),
            kiln_pb2.RecompileItem(item_id="current", vmfb=fixture("current_zip_cuda.vmfb")),
            kiln_pb2.RecompileItem(item_id="invalid", vmfb=fixture("invalid_crc.vmfb")),
            kiln_pb2.RecompileItem(item_id="garbage", vmfb=fixture("invalid_garbage.vmfb")),
            kiln_pb2.RecompileItem(item_id="unknown-digest", vmfb_digest="ab" * 32),
            kiln_pb2.RecompileItem(item_id="bad-target", source=SOURCE, targets=["sm_1"]),
        ]
        results, summary = recompile(self.channel, items)
        self.assertEqual(set(results), {i.item_id for i in items})
        self.assertEqual(summary.items, len(items))

        # zip and noheader are two old builds of one (source, sm_89): one compile.
        for iid, name, target in (("zip", "zip_sm89.vmfb", "sm_89"), ("flat", "flat_gfx1100.vmfb", "gfx1100"),
                                  ("noheader", "noheader_sm89.vmfb", "sm_89")):
            r = results[iid]
            self.assertIn(r.outcome, (O.RECOMPILE_OUTCOME_RECOMPILED, O.RECOMPILE_OUTCOME_CACHED), r)
            self.assertEqual(r.code, 0, r.message)
            self.assertEqual(r.source_digest, SOURCE_DIGEST)
            self.assertEqual(r.legacy_hal_module_version, 7 if iid == "noheader" else 6)
            self.assertEqual([t.canonical_target for t in r.targets], [target])
            self.assertEqual(len(r.targets[0].artifact_digest), 64)
            self.assertGreater(r.targets[0].size_bytes, 0)
            self.assertTrue(r.job_id)
            self.assertEqual(r.legacy_digest, hashlib.sha256(legacy(name)).hexdigest())
        self.assertEqual(results["zip"].targets[0].artifact_digest, results["noheader"].targets[0].artifact_digest)

        cur = results["current"]
        self.assertEqual(cur.outcome, O.RECOMPILE_OUTCOME_SKIPPED_CURRENT)
        self.assertEqual(cur.targets[0].artifact_digest, hashlib.sha256(fixture("current_zip_cuda.vmfb")).hexdigest())
        self.assertEqual(cur.job_id, "")

        for iid in ("invalid", "garbage"):
            self.assertEqual(results[iid].outcome, O.RECOMPILE_OUTCOME_FAILED)
            self.assertEqual(results[iid].code, grpc.StatusCode.INVALID_ARGUMENT.value[0])
            self.assertIn("not a loadable VMFB", results[iid].message)
        unk = results["unknown-digest"]
        self.assertEqual(unk.outcome, O.RECOMPILE_OUTCOME_FAILED)
        self.assertEqual(unk.code, grpc.StatusCode.NOT_FOUND.value[0])
        self.assertIn("names no artifact", unk.message)
        bad = results["bad-target"]
        self.assertEqual(bad.outcome, O.RECOMPILE_OUTCOME_FAILED)
        self.assertEqual(bad.code, grpc.StatusCode.INVALID_ARGUMENT.value[0])
        self.assertIn("sm_1", bad.message)

        self.assertEqual(summary.recompiled + summary.cached, 3)
        self.assertGreaterEqual(summary.recompiled, 2)
        self.assertEqual(summary.skipped_current, 1)
        self.assertEqual(summary.failed, 4)
        # Unique work: gfx942 (store_source), then sm_89 once for two files, gfx1100.
        self.assertEqual(stats(self.channel).jobs.targets_compiled, 3)

        # The new artifact is current, and remembers what it replaces.
        meta = unary(self.channel, KILN + "FindArtifacts",
                     kiln_pb2.FindArtifactsRequest(source_digest=SOURCE_DIGEST, target="gfx1100"),
                     kiln_pb2.FindArtifactsResponse).artifacts
        self.assertEqual(len(meta), 1)
        self.assertEqual(meta[0].hal_module_version, 7)
        self.assertEqual(meta[0].provenance.recompiled_from, results["flat"].legacy_digest)

        # Again: everything cached, nothing compiled.
        results2, summary2 = recompile(self.channel, items[:3])
        self.assertEqual(summary2.cached, 3, results2)
        self.assertEqual(stats(self.channel).jobs.targets_compiled, 3)

    def test_provenance_of_an_artifact_kiln_built(self):
        """A VMFB kilnd built is found by its digest: source, target and flags come
        from the cache index (forced, since kilnd's own artifacts are current)."""
        resp = unary(self.channel, KILN + "Compile",
                     kiln_pb2.CompileRequest(source=SOURCE, source_name="mlp.mlir", targets=["gfx1100"],
                                             flags=["--iree-opt-const-eval=false"]),
                     kiln_pb2.CompileResponse)
        self.assertEqual(self.wait_job(resp.job_id), kiln_pb2.JOB_STATE_DONE)
        found = unary(self.channel, KILN + "FindArtifacts", kiln_pb2.FindArtifactsRequest(source_digest=SOURCE_DIGEST),
                      kiln_pb2.FindArtifactsResponse).artifacts
        self.assertEqual(len(found), 1)
        results, _ = recompile(self.channel, [kiln_pb2.RecompileItem(item_id="p", vmfb_digest=found[0].digest)],
                               options=kiln_pb2.RecompileOptions(force=True))
        r = results["p"]
        self.assertEqual(r.outcome, O.RECOMPILE_OUTCOME_CACHED, r.message)  # same key: nothing to compile
        self.assertEqual(r.targets[0].artifact_digest, found[0].digest)
        self.assertEqual(r.targets[0].canonical_target, "gfx1100")
        self.assertEqual(r.source_digest, SOURCE_DIGEST)

    def test_source_order_and_no_source(self):
        # The digest attr names a source kilnd does not have, and nothing is embedded.
        results, summary = recompile(self.channel, [
            kiln_pb2.RecompileItem(item_id="a", vmfb=legacy("zip_sm89.vmfb")),
            kiln_pb2.RecompileItem(item_id="u", vmfb=legacy("unknown.vmfb"))])
        r = results["a"]
        self.assertEqual(r.outcome, O.RECOMPILE_OUTCOME_NO_SOURCE)
        self.assertEqual(r.code, grpc.StatusCode.NOT_FOUND.value[0])
        self.assertIn(SOURCE_DIGEST, r.message)
        self.assertIn("--manifest", r.message)
        self.assertIn("records no source digest", results["u"].message)
        self.assertEqual(summary.no_source, 2)
        # The item's own source wins, with its targets and flags.
        results, _ = recompile(self.channel, [
            kiln_pb2.RecompileItem(item_id="b", vmfb=legacy("unknown.vmfb"), source=SOURCE,
                                   source_name="mine.mlir", targets=["ada", "gfx950"],
                                   flags=[], ignore_recorded_flags=True)])
        r = results["b"]
        self.assertEqual(r.outcome, O.RECOMPILE_OUTCOME_RECOMPILED, r.message)
        self.assertEqual([(t.target, t.canonical_target) for t in r.targets], [("ada", "sm_89"), ("gfx950", "gfx950")])
        # Now the source is stored: the digest attr finds it.
        results, _ = recompile(self.channel, [kiln_pb2.RecompileItem(item_id="a", vmfb=legacy("zip_sm89.vmfb"))])
        self.assertEqual(results["a"].outcome, O.RECOMPILE_OUTCOME_CACHED, results["a"].message)
        # Bad IR: FAILED with the compiler's diagnostics.
        results, _ = recompile(self.channel, [
            kiln_pb2.RecompileItem(item_id="c", source=b"func.func @f( {\n", source_name="bad.mlir",
                                   targets=["sm_89"])])
        r = results["c"]
        self.assertEqual(r.outcome, O.RECOMPILE_OUTCOME_FAILED)
        self.assertEqual(r.code, grpc.StatusCode.INVALID_ARGUMENT.value[0])
        self.assertTrue(r.diagnostics, r.message)
        self.assertEqual(r.diagnostics[0].location.file, "bad.mlir")
        self.assertGreaterEqual(r.diagnostics[0].location.line, 1)

    def test_embedded_source_needs_nothing_else(self):
        results, _ = recompile(self.channel, [kiln_pb2.RecompileItem(item_id="e", vmfb=legacy("embedded_gfx950.vmfb"))])
        r = results["e"]
        self.assertEqual(r.outcome, O.RECOMPILE_OUTCOME_RECOMPILED, r.message)
        self.assertEqual(r.source_digest, SOURCE_DIGEST)
        self.assertEqual(r.targets[0].canonical_target, "gfx950")
        self.assertEqual(r.legacy_hal_module_version, 7)  # bytecode 16 is what makes it legacy

    def test_dry_run_and_force(self):
        self.store_source()
        opts = kiln_pb2.RecompileOptions(dry_run=True)
        results, summary = recompile(self.channel, [
            kiln_pb2.RecompileItem(item_id="legacy", vmfb=legacy("flat_gfx1100.vmfb")),
            kiln_pb2.RecompileItem(item_id="cached", vmfb=legacy("flat_gfx1100.vmfb"), targets=["gfx942"]),
            kiln_pb2.RecompileItem(item_id="current", vmfb=fixture("current_zip_hip.vmfb"))], options=opts)
        self.assertEqual(results["legacy"].outcome, O.RECOMPILE_OUTCOME_RECOMPILED)  # "would recompile"
        self.assertEqual(results["legacy"].job_id, "")
        self.assertEqual(results["cached"].outcome, O.RECOMPILE_OUTCOME_CACHED)
        self.assertEqual(len(results["cached"].targets[0].artifact_digest), 64)
        self.assertEqual(results["current"].outcome, O.RECOMPILE_OUTCOME_SKIPPED_CURRENT)
        self.assertEqual(stats(self.channel).jobs.targets_compiled, 1)  # store_source's only
        # force: a current file is recompiled too; options' labels land on the artifact.
        results, _ = recompile(self.channel, [
            kiln_pb2.RecompileItem(item_id="current", vmfb=fixture("current_zip_hip.vmfb"), source=SOURCE)],
            options=kiln_pb2.RecompileOptions(force=True, priority=O.PRIORITY_BATCH, labels={"fleet": "2026-11"}))
        r = results["current"]
        self.assertEqual(r.outcome, O.RECOMPILE_OUTCOME_RECOMPILED, r.message)
        meta = unary(self.channel, KILN + "FindArtifacts",
                     kiln_pb2.FindArtifactsRequest(source_digest=SOURCE_DIGEST, target="gfx1100"),
                     kiln_pb2.FindArtifactsResponse).artifacts
        self.assertEqual([m.digest for m in meta], [r.targets[0].artifact_digest])
        self.assertEqual(meta[0].provenance.labels["fleet"], "2026-11")

    def test_protocol_errors_end_the_call(self):
        def call(reqs):
            with self.assertRaises(grpc.RpcError) as ctx:
                list(recompile_call(self.channel)(iter(reqs), timeout=30))
            self.assertEqual(ctx.exception.code(), grpc.StatusCode.INVALID_ARGUMENT, ctx.exception.details())
            return ctx.exception.details()
        item = kiln_pb2.RecompileRequest(item=kiln_pb2.RecompileItem(item_id="x", source=SOURCE, targets=["sm_89"]))
        opts = kiln_pb2.RecompileRequest(options=kiln_pb2.RecompileOptions(dry_run=True))
        self.assertIn("used twice", call([opts, item, item]))
        self.assertIn("after an item", call([item, opts]))
        self.assertIn("sent twice", call([opts, opts]))
        self.assertIn("item_id is empty", call([kiln_pb2.RecompileRequest(item=kiln_pb2.RecompileItem(source=SOURCE))]))
        self.assertIn("visible ASCII", call([kiln_pb2.RecompileRequest(
            item=kiln_pb2.RecompileItem(item_id="a b", source=SOURCE, targets=["sm_89"]))]))
        self.assertIn("after `done`", call([opts, kiln_pb2.RecompileRequest(done=kiln_pb2.RecompileDone()), item]))
        # An empty call: just a summary.
        results, summary = recompile(self.channel, [], done=False)
        self.assertEqual((len(results), summary.items), (0, 0))

    def test_cancel_cancels_unfinished_jobs(self):
        # Many distinct sources: the call is still compiling when cancelled.
        items = [kiln_pb2.RecompileItem(item_id=str(i), source=distinct(SOURCE, i),
                                        targets=["sm_89", "gfx950", "gfx1100"]) for i in range(12)]
        done = threading.Event()

        def requests():
            for it in items:
                yield kiln_pb2.RecompileRequest(item=it)
            done.wait(60)
        call = recompile_call(self.channel)(requests(), timeout=120 * SLOW)
        first = next(call)  # one result arrived; the rest are queued or compiling
        self.assertEqual(first.WhichOneof("kind"), "result")
        call.cancel()
        done.set()
        deadline = time.time() + 30 * SLOW
        while time.time() < deadline:
            s = stats(self.channel).jobs
            if s.cancelled >= 1 and s.running == 0 and s.queued == 0:
                break
            time.sleep(0.1)
        s = stats(self.channel).jobs
        self.assertGreaterEqual(s.cancelled, 1, s)
        self.assertEqual((s.running, s.queued), (0, 0), s)
        self.assertLess(s.targets_compiled, 36)
        # kilnd serves on.
        results, _ = recompile(self.channel, items[:1])
        self.assertIn(results["0"].outcome, (O.RECOMPILE_OUTCOME_RECOMPILED, O.RECOMPILE_OUTCOME_CACHED), results["0"])


class FusionTest(KilnTestCase):
    """One-target items of one model, queued behind other work, share one worker
    task: the model is parsed and optimized once for all their targets."""

    def test_queued_items_of_one_source_fuse(self):
        with Kilnd("--workers", "1") as kilnd:
            with grpc.insecure_channel(kilnd.addr) as ch:
                with open(os.path.join(EXAMPLES, "attention.mlir"), "rb") as f:
                    blocker = f.read()
                targets = ["sm_89", "gfx950", "gfx1100", "arm5gen"]
                items = [kiln_pb2.RecompileItem(item_id="blocker", source=blocker, targets=["sm_120", "gfx942"])]
                items += [kiln_pb2.RecompileItem(item_id=t, source=SOURCE, targets=[t]) for t in targets]
                results, summary = recompile(ch, items)
                self.assertEqual(summary.recompiled, 5, results)
                for t in targets:
                    self.assertEqual(results[t].targets[0].canonical_target, t)
                    self.assertEqual(len(results[t].targets[0].artifact_digest), 64)
                js = stats(ch).jobs
                self.assertEqual(js.targets_compiled, 6)
                # The four mlp items were queued while the blocker compiled: at most
                # the first ran alone, the rest joined one task. (Under valgrind kilnd
                # resolves items so slowly that the blocker may be done first.)
                if not WRAPPED:
                    self.assertGreaterEqual(js.tasks_fused, 2, js)
            self.assertCleanStop(kilnd)


if __name__ == "__main__":
    unittest.main()
