"""Per-client limits (issue 8, Secure): client-max-request-bytes, client-max-jobs
and client-queue-share against the real kilnd, driven by Python grpcio (messages
generated from kiln.proto) and the real CLI.

A limit hit is RESOURCE_EXHAUSTED naming the setting; clients are told apart by
their bearer token's name (distinct peer addresses are not possible on loopback);
Recompile items wait for client-max-jobs instead of failing; the defaults (0)
change nothing, which the other suites check by passing unchanged.
"""
import os
import tempfile
import threading
import time
import unittest
import urllib.request

import grpc

from kilnharness import EXAMPLES, SANITIZED, distinct, WRAPPED, Kilnd, KilnTestCase, run_kiln  # sets the path
from kiln.v1 import kiln_pb2  # noqa: E402

KILN = "/kiln.v1.Kiln/"
SLOW = 6 if (WRAPPED or SANITIZED) else 1
CALL_TIMEOUT = 60 * SLOW
# Blockers: attention for several targets plus the worker's test hook `hang`
# (--test-hooks), so they stay RUNNING or QUEUED until cancelled, however fast the
# machine compiles.
BLOCKER_TARGETS = ["gfx942", "sm_89", "gfx1100", "gfx950"]

with open(os.path.join(EXAMPLES, "attention.mlir"), "rb") as _f:
    ATTENTION = _f.read()
with open(os.path.join(EXAMPLES, "mlp.mlir"), "rb") as _f:
    MLP = _f.read()

TOKENS = {
    "alice": ("alice", "submit", "alice-limits-token-0123456789abcdef"),
    "bob": ("bob", "submit", "bob-limits-token-0123456789abcdef0"),
}


def variant(source, n):
    """A distinct model (its own cache key) that compiles like `source`."""
    return distinct(source, f"v{n}")


def hang(n):
    return distinct(ATTENTION + b"\n// kiln-test: hang\n", f"hang{n}")


def cancel(channel, job_id, metadata=None):
    unary(channel, KILN + "CancelJob", kiln_pb2.CancelJobRequest(job_id=job_id, reason="test"),
          kiln_pb2.CancelJobResponse, metadata)


def unary(channel, method, request, response_cls, metadata=None, timeout=CALL_TIMEOUT):
    return channel.unary_unary(method, request_serializer=lambda m: m.SerializeToString(),
                               response_deserializer=response_cls.FromString)(
        request, metadata=metadata, timeout=timeout)


def compile_(channel, source, targets, metadata=None):
    return unary(channel, KILN + "Compile", kiln_pb2.CompileRequest(source=source, targets=targets),
                 kiln_pb2.CompileResponse, metadata)


def wait_job(channel, job_id, metadata=None):
    watch = channel.unary_stream(KILN + "WatchJob", request_serializer=lambda m: m.SerializeToString(),
                                 response_deserializer=kiln_pb2.JobEvent.FromString)
    for ev in watch(kiln_pb2.WatchJobRequest(job_id=job_id, from_start=True), metadata=metadata,
                    timeout=600 * SLOW):
        if ev.WhichOneof("event") == "terminal":
            return ev.terminal.state
    raise AssertionError(f"job {job_id} ended without a Terminal event")


def recompile(channel, items, metadata=None):
    """Sends BULK options, the items and done; returns (results by item_id, summary)."""
    def requests():
        yield kiln_pb2.RecompileRequest(options=kiln_pb2.RecompileOptions(priority=kiln_pb2.PRIORITY_BULK))
        for it in items:
            yield kiln_pb2.RecompileRequest(item=it)
        yield kiln_pb2.RecompileRequest(done=kiln_pb2.RecompileDone())
    call = channel.stream_stream(KILN + "Recompile", request_serializer=lambda m: m.SerializeToString(),
                                 response_deserializer=kiln_pb2.RecompileEvent.FromString)
    results, summary = {}, None
    for ev in call(requests(), metadata=metadata, timeout=600 * SLOW):
        if ev.WhichOneof("kind") == "result":
            results[ev.result.item_id] = ev.result
        else:
            summary = ev.summary
    return results, summary


def metrics(kilnd):
    with open(os.path.join(kilnd.state_dir, "kilnd.metrics-addr")) as f:
        addr = f.read().strip()
    with urllib.request.urlopen(f"http://{addr}/metrics", timeout=30) as r:
        return r.read().decode()


class TokenKilnd:
    """A token file with alice and bob, for a kilnd that tells them apart."""

    def __init__(self):
        self.tmp = tempfile.TemporaryDirectory(prefix="kiln-limits-")
        self.path = os.path.join(self.tmp.name, "tokens")
        with open(self.path, "w") as f:
            f.write("".join(f"{n} {r} {t}\n" for n, r, t in TOKENS.values()))
        os.chmod(self.path, 0o600)

    @staticmethod
    def md(who):
        return [("authorization", "Bearer " + TOKENS[who][2])]


class RequestBytesTest(KilnTestCase):
    LIMIT = 1500  # mlp.mlir (1189 bytes) fits, attention plus padding does not

    def setUp(self):
        self.kilnd = Kilnd("--workers", "1", "--client-max-request-bytes", str(self.LIMIT)).start()
        self.channel = grpc.insecure_channel(self.kilnd.addr)

    def tearDown(self):
        self.channel.close()
        self.assertCleanStop(self.kilnd)

    def test_inline_compile_over_the_limit_is_refused(self):
        with self.assertRaises(grpc.RpcError) as e:
            compile_(self.channel, ATTENTION + b"\n// " + b"x" * 400 + b"\n", ["gfx942"])
        self.assertEqual(e.exception.code(), grpc.StatusCode.RESOURCE_EXHAUSTED)
        self.assertIn("client-max-request-bytes = 1500", e.exception.details())
        resp = compile_(self.channel, MLP, ["gfx942"])  # under it: fine
        self.assertTrue(resp.job_id)
        self.assertEqual(wait_job(self.channel, resp.job_id), kiln_pb2.JOB_STATE_DONE)
        self.assertRegex(metrics(self.kilnd),
                         r'kiln_limit_refusals_total\{limit="client-max-request-bytes"\} 1\b')
        self.assertIn("event=limit_hit", self.kilnd.log())

    def put_source(self, source, hold_after_metadata=None):
        import hashlib
        digest = hashlib.sha256(source).hexdigest()

        def chunks():
            yield kiln_pb2.PutSourceChunk(metadata=kiln_pb2.SourceMetadata(digest=digest, size_bytes=len(source)))
            if hold_after_metadata is not None:
                hold_after_metadata.wait(30 * SLOW)  # the answer must not need the data
            yield kiln_pb2.PutSourceChunk(data=source)
        put = self.channel.stream_unary(KILN + "PutSource", request_serializer=lambda m: m.SerializeToString(),
                                        response_deserializer=kiln_pb2.PutSourceResponse.FromString)
        return put(chunks(), timeout=CALL_TIMEOUT)

    def test_put_source_over_the_limit_is_refused_before_data(self):
        hold = threading.Event()
        big = ATTENTION + b"\n// " + b"y" * 400 + b"\n"
        try:
            with self.assertRaises(grpc.RpcError) as e:
                self.put_source(big, hold_after_metadata=hold)
        finally:
            hold.set()
        self.assertEqual(e.exception.code(), grpc.StatusCode.RESOURCE_EXHAUSTED)
        self.assertIn("client-max-request-bytes", e.exception.details())
        self.assertIn(f"request of {len(big)} bytes", e.exception.details())
        resp = self.put_source(MLP)
        self.assertEqual(resp.size_bytes, len(MLP))

    def test_recompile_item_over_the_limit_fails_alone(self):
        items = [
            kiln_pb2.RecompileItem(item_id="big", source=ATTENTION + b"\n// " + b"z" * 400 + b"\n",
                                   targets=["gfx942"]),
            kiln_pb2.RecompileItem(item_id="small", source=MLP, targets=["gfx942"]),
        ]
        results, summary = recompile(self.channel, items)
        self.assertEqual(set(results), {"big", "small"})
        self.assertEqual(results["big"].outcome, kiln_pb2.RECOMPILE_OUTCOME_FAILED)
        self.assertEqual(results["big"].code, grpc.StatusCode.RESOURCE_EXHAUSTED.value[0])
        self.assertIn("client-max-request-bytes", results["big"].message)
        self.assertEqual(results["small"].outcome, kiln_pb2.RECOMPILE_OUTCOME_RECOMPILED, results["small"])
        self.assertIsNotNone(summary)


class LimitedKilndTest(KilnTestCase):
    """A kilnd with test hooks, the token file's clients, KILND_ARGS' limits, and
    a channel to it."""
    KILND_ARGS = ()

    def setUp(self):
        self.tokens = TokenKilnd()
        self.kilnd = Kilnd("--test-hooks", *self.KILND_ARGS, token_file=self.tokens.path).start()
        self.channel = grpc.insecure_channel(self.kilnd.addr)

    def tearDown(self):
        self.channel.close()
        self.assertCleanStop(self.kilnd)
        self.tokens.tmp.cleanup()


class WorkerShareTest(LimitedKilndTest):
    """One client's long compiles cannot hold every worker (issue 18, item 4)."""
    KILND_ARGS = ("--workers", "2", "--client-worker-share", "50")

    def busy(self):
        stats = unary(self.channel, KILN + "GetStats", kiln_pb2.GetStatsRequest(), kiln_pb2.GetStatsResponse,
                      TokenKilnd.md("alice"))
        return stats.jobs.workers_busy, stats.jobs.running, stats.jobs.queued

    def test_a_client_runs_on_its_share_of_the_workers(self):
        alice, bob = TokenKilnd.md("alice"), TokenKilnd.md("bob")
        hangs = [compile_(self.channel, hang(n), ["gfx942"], alice).job_id for n in (11, 12)]
        # Two workers, a 50% share: one of alice's hanging compiles runs, the other waits
        # with a worker idle.
        deadline = time.monotonic() + 30 * SLOW
        while self.busy()[0] < 1 and time.monotonic() < deadline:
            time.sleep(0.05)
        time.sleep(0.5)
        busy, running, queued = self.busy()
        self.assertEqual((busy, running, queued), (1, 1, 1))
        # bob gets the other worker at once.
        bob_job = compile_(self.channel, variant(MLP, 13), ["gfx942"], bob).job_id
        self.assertEqual(wait_job(self.channel, bob_job, bob), kiln_pb2.JOB_STATE_DONE)
        # alice's second starts when her first ends.
        cancel(self.channel, hangs[0], alice)
        self.assertEqual(wait_job(self.channel, hangs[0], alice), kiln_pb2.JOB_STATE_CANCELLED)
        deadline = time.monotonic() + 30 * SLOW
        while self.busy()[2] != 0 and time.monotonic() < deadline:
            time.sleep(0.05)
        self.assertEqual(self.busy()[1:], (1, 0))
        cancel(self.channel, hangs[1], alice)
        self.assertEqual(wait_job(self.channel, hangs[1], alice), kiln_pb2.JOB_STATE_CANCELLED)


class MaxJobsTest(LimitedKilndTest):
    KILND_ARGS = ("--workers", "2", "--client-max-jobs", "2")

    def test_third_unfinished_job_is_refused_and_clients_count_apart(self):
        alice, bob = TokenKilnd.md("alice"), TokenKilnd.md("bob")
        # Cached first, so that a later request for it is answered at admission.
        cached = compile_(self.channel, MLP, ["gfx942"], alice)
        self.assertEqual(wait_job(self.channel, cached.job_id, alice), kiln_pb2.JOB_STATE_DONE)

        jobs = [compile_(self.channel, hang(n), BLOCKER_TARGETS, alice).job_id for n in (1, 2)]
        with self.assertRaises(grpc.RpcError) as e:
            compile_(self.channel, variant(ATTENTION, 3), BLOCKER_TARGETS, alice)
        self.assertEqual(e.exception.code(), grpc.StatusCode.RESOURCE_EXHAUSTED)
        self.assertIn("client alice has 2 unfinished jobs, the limit client-max-jobs = 2", e.exception.details())
        # Answered wholly from the cache: admitted, and not counted.
        again = compile_(self.channel, MLP, ["gfx942"], alice)
        self.assertTrue(again.targets[0].cached)
        # Another client has its own count.
        bob_job = compile_(self.channel, variant(MLP, 4), ["gfx942"], bob).job_id
        # The real CLI reports the refusal too.
        with tempfile.TemporaryDirectory() as d:
            src = os.path.join(d, "a.mlir")
            with open(src, "wb") as f:
                f.write(variant(ATTENTION, 5))
            r = run_kiln("compile", src, "--target", "gfx942", "-o", d, addr=self.kilnd.addr,
                         token=TOKENS["alice"][2])
            self.assertNotEqual(r.returncode, 0, r.stdout)
            self.assertIn("client-max-jobs", r.stderr)

        for job in jobs:  # finished (here: cancelled), they no longer count
            cancel(self.channel, job, alice)
            self.assertEqual(wait_job(self.channel, job, alice), kiln_pb2.JOB_STATE_CANCELLED)
        self.assertEqual(wait_job(self.channel, bob_job, bob), kiln_pb2.JOB_STATE_DONE)
        third = compile_(self.channel, variant(ATTENTION, 3), BLOCKER_TARGETS, alice)  # works again
        self.assertEqual(wait_job(self.channel, third.job_id, alice), kiln_pb2.JOB_STATE_DONE)
        self.assertRegex(metrics(self.kilnd), r'kiln_limit_refusals_total\{limit="client-max-jobs"\} [12]\b')
        self.assertRegex(self.kilnd.log(), r"event=limit_hit .*client=alice .*limit=client-max-jobs")

    def test_recompile_items_wait_instead_of_failing(self):
        alice = TokenKilnd.md("alice")
        blocker = compile_(self.channel, hang(0), BLOCKER_TARGETS, alice).job_id  # one slot left
        items = [kiln_pb2.RecompileItem(item_id=f"i{n}", source=variant(MLP, n), targets=["gfx942"])
                 for n in range(5)]
        results, summary = recompile(self.channel, items, alice)
        self.assertEqual(len(results), 5)
        for r in results.values():
            self.assertEqual(r.outcome, kiln_pb2.RECOMPILE_OUTCOME_RECOMPILED, r)
        self.assertIsNotNone(summary)
        self.assertRegex(metrics(self.kilnd), r'kiln_limit_refusals_total\{limit="client-max-jobs"\} [1-9]')
        cancel(self.channel, blocker, alice)


class QueueShareTest(LimitedKilndTest):
    KILND_ARGS = ("--workers", "1", "--queue-capacity", "4", "--client-queue-share", "50")

    def test_one_client_holds_at_most_its_share(self):
        alice, bob = TokenKilnd.md("alice"), TokenKilnd.md("bob")
        admitted, refusal = [], None
        for n in range(8):
            try:
                admitted.append(compile_(self.channel, hang(n), BLOCKER_TARGETS, alice).job_id)
            except grpc.RpcError as e:
                refusal = e
                break
        self.assertIsNotNone(refusal, "alice was never refused")
        self.assertEqual(refusal.code(), grpc.StatusCode.RESOURCE_EXHAUSTED)
        self.assertIn("client-queue-share = 50%", refusal.details())
        # Two queued, plus at most the one the worker took.
        self.assertIn(len(admitted), (2, 3), admitted)
        bob_job = compile_(self.channel, variant(ATTENTION, 100), ["gfx942"], bob).job_id
        self.assertTrue(bob_job)
        self.assertRegex(metrics(self.kilnd), r'kiln_limit_refusals_total\{limit="client-queue-share"\} 1\b')
        for job in admitted:
            cancel(self.channel, job, alice)


if __name__ == "__main__":
    unittest.main()
