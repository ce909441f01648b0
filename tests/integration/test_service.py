"""The compile service over the wire, with grpcio (a client not written in C)
against the real kilnd, real kiln-worker processes and real compiles of
examples/*.mlir:

Compile -> WatchJob -> GetArtifact and the cache hit after it; 32 concurrent
identical compiles merged into one; one task for a request's targets; every
refusal of Compile (bad IR as a FAILED job with file:line:col, bytes that are
not MLIR, unknown targets, missing fields, limits, refused flags, a message over
--max-message-bytes and the PutSource way around it, an unknown source digest);
worker crash, hang (task timeout) and out-of-memory through kiln-worker's test
hooks; CancelJob (of running work, of one of two jobs sharing work, twice,
unknown); the per-job deadline taken from the Compile call's gRPC deadline; a
full queue and priorities; WatchJob's replay modes, many watchers and a watcher
that leaves; request_id idempotency; SIGTERM with a job running (no worker
survives); the external compiler mode with kilnc.

Every test starts its own kilnd (about 0.1 s) so that counters and workers are
its own, and ends by checking that kilnd stops with exit 0 (under ASan or
valgrind: no leak or error report) and, in the sanitized build, that no
kilnd/kiln-worker process wrote a sanitizer report. The `kiln compile/fetch/...`
CLI is covered by test_cli_compile.py, not here.

Hang sources are examples/mlp.mlir plus a `// kiln-test: hang` line (and a tag,
so that sources differ when they must not merge); kilnd runs with --test-hooks,
and a worker that meets the marker sleeps until it is killed. That makes
"a worker is busy" deterministic, where a real compile of mlp.mlir takes 60 ms.
"""
import concurrent.futures
import glob
import hashlib
import os
import re
import signal
import subprocess
import tempfile
import threading
import time
import unittest

import grpc

from kilnharness import (BUILD_DIR, EXAMPLES, KILNC, distinct, normal_digest, SANITIZED, WRAPPED, Kilnd,  # sets up the generated modules' path
                         KilnTestCase)
from kiln.v1 import kiln_pb2  # noqa: E402

KILN = "/kiln.v1.Kiln/"
KIB = 1024

# Time scale for waits that depend on kilnd's speed (valgrind runs kilnd about
# 20-50 times slower; the workers are not under it).
SLOW = 8.0 if WRAPPED else 2.0 if SANITIZED else 1.0

S = kiln_pb2  # short
DONE, FAILED, CANCELLED = S.JOB_STATE_DONE, S.JOB_STATE_FAILED, S.JOB_STATE_CANCELLED
QUEUED, RUNNING = S.JOB_STATE_QUEUED, S.JOB_STATE_RUNNING
TERMINAL = (DONE, FAILED, CANCELLED)
# gRPC status codes as numbers (TargetFailed.code).
C_CANCELLED, C_INVALID_ARGUMENT, C_DEADLINE_EXCEEDED = 1, 3, 4
C_RESOURCE_EXHAUSTED, C_INTERNAL = 8, 13

with open(os.path.join(EXAMPLES, "mlp.mlir"), "rb") as _f:
    MLP = _f.read()
with open(os.path.join(EXAMPLES, "attention.mlir"), "rb") as _f:
    ATTENTION = _f.read()

BAD_IR = b"func.func @f() {\n  %0 = this is not mlir\n  return\n}\n"


def hooked(hook, tag=""):
    """mlp.mlir with a test-hook marker, a model of its own per hook and tag."""
    return distinct(MLP + f"\n// kiln-test: {hook}\n".encode(), f"{hook}_{tag}")


def variant(tag):
    """mlp.mlir made a distinct model (compiles like mlp.mlir)."""
    return distinct(MLP, f"v_{tag}")


def ser(m):
    return m.SerializeToString()


def kind(ev):
    return ev.WhichOneof("event")


def kinds(events):
    return [kind(e) for e in events]


def wait_for(cond, timeout, what):
    deadline = time.monotonic() + timeout * SLOW
    while time.monotonic() < deadline:
        v = cond()
        if v:
            return v
        time.sleep(0.02)
    raise AssertionError(f"timed out after {timeout * SLOW:.1f}s waiting for {what}")


class Client:
    """The service's methods on one channel."""

    def __init__(self, addr):
        self.channel = grpc.insecure_channel(addr)

        def uu(name, resp):
            return self.channel.unary_unary(KILN + name, request_serializer=ser,
                                            response_deserializer=resp.FromString)

        self.compile_call = uu("Compile", S.CompileResponse)
        self.cancel_call = uu("CancelJob", S.CancelJobResponse)
        self.stats_call = uu("GetStats", S.GetStatsResponse)
        self.info_call = uu("GetServerInfo", S.GetServerInfoResponse)
        self.find_call = uu("FindArtifacts", S.FindArtifactsResponse)
        self.watch_call = self.channel.unary_stream(
            KILN + "WatchJob", request_serializer=ser, response_deserializer=S.JobEvent.FromString)
        self.get_call = self.channel.unary_stream(
            KILN + "GetArtifact", request_serializer=ser, response_deserializer=S.ArtifactChunk.FromString)
        self.put_call = self.channel.stream_unary(
            KILN + "PutSource", request_serializer=ser, response_deserializer=S.PutSourceResponse.FromString)

    def close(self):
        self.channel.close()

    def compile(self, source=None, targets=("sm_89",), timeout=30 * SLOW, name="model.mlir", **kw):
        if source is not None:
            kw["source"] = source
        return self.compile_call(S.CompileRequest(targets=list(targets), source_name=name, **kw),
                                 timeout=timeout)

    def cancel(self, job_id, reason=""):
        return self.cancel_call(S.CancelJobRequest(job_id=job_id, reason=reason), timeout=10 * SLOW)

    def jobs(self):
        return self.stats_call(S.GetStatsRequest(), timeout=10 * SLOW).jobs

    def info(self):
        return self.info_call(S.GetServerInfoRequest(), timeout=10 * SLOW)

    def events(self, job_id, timeout=60, **kw):
        """Every event of one WatchJob call that must end with OK."""
        return list(self.watch_call(S.WatchJobRequest(job_id=job_id, **kw), timeout=timeout * SLOW))

    def finish(self, job_id, timeout=60):
        """The job's Terminal event (waits for it)."""
        evs = self.events(job_id, timeout=timeout)
        assert evs and kind(evs[-1]) == "terminal", kinds(evs)
        return evs[-1].terminal

    def state(self, job_id):
        """The job's state now, from WatchJob's current-status replay (latest Queued
        or Started, target results, Terminal), read for a short while."""
        w = Watch(self, job_id)
        # The replay is sent as one burst: wait for its first event, then a little.
        w.wait(lambda evs: evs, 10, f"the replay of {job_id}")
        time.sleep(0.2 * SLOW)
        w.cancel()
        w.join()
        evs = w.events
        if kind(evs[-1]) == "terminal":
            return evs[-1].terminal.state
        return RUNNING if "started" in kinds(evs) else QUEUED

    def fetch(self, digest):
        msgs = list(self.get_call(S.GetArtifactRequest(digest=digest), timeout=30 * SLOW))
        return msgs[0].metadata, b"".join(m.data for m in msgs[1:])

    def put_source(self, data, chunk, name="big.mlir"):
        def chunks():
            yield S.PutSourceChunk(metadata=S.SourceMetadata(
                digest=hashlib.sha256(data).hexdigest(), size_bytes=len(data), name=name))
            for i in range(0, len(data), chunk):
                yield S.PutSourceChunk(data=data[i:i + chunk])
        return self.put_call(chunks(), timeout=30 * SLOW)


class Watch:
    """One WatchJob call, read on a background thread."""

    def __init__(self, client, job_id, timeout=None, **kw):
        self.call = client.watch_call(S.WatchJobRequest(job_id=job_id, **kw), timeout=timeout)
        self.events = []
        self.code = None
        self.details = None
        self.cv = threading.Condition()
        self.ended = False
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.thread.start()

    def _run(self):
        code, details = grpc.StatusCode.OK, ""
        try:
            for ev in self.call:
                with self.cv:
                    self.events.append(ev)
                    self.cv.notify_all()
        except grpc.RpcError as e:
            code, details = e.code(), e.details()
        with self.cv:
            self.code, self.details, self.ended = code, details, True
            self.cv.notify_all()

    def wait(self, pred, timeout, what):
        with self.cv:
            ok = self.cv.wait_for(lambda: pred(self.events) or self.ended, timeout * SLOW)
            if not pred(self.events):
                raise AssertionError(f"{what}: not seen (ended={self.ended} code={self.code} "
                                     f"{self.details}); events {kinds(self.events)}" if ok else
                                     f"timed out waiting for {what}; events {kinds(self.events)}")

    def wait_kind(self, k, timeout=30):
        self.wait(lambda evs: k in kinds(evs), timeout, k)

    def join(self, timeout=60):
        self.thread.join(timeout * SLOW)
        if self.thread.is_alive():
            raise AssertionError(f"watch did not end; events {kinds(self.events)}")
        return self

    def cancel(self):
        self.call.cancel()


def worker_pid(kilnd, worker):
    """The process of `worker` ("worker-1", as job events name it): kilnd's log has
    it (event=worker_ready ... worker=worker-1 pid=1234); clients never see it."""
    pids = re.findall(r"event=worker_ready\b[^\n]*\bworker=%s pid=(\d+)" % re.escape(worker), kilnd.log())
    assert pids, f"no worker_ready line for {worker} in kilnd's log"
    return int(pids[-1])


def pid_running(pid):
    """Whether `pid` is a process that has not exited (a zombie has)."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] not in ("Z", "X")
    except OSError:
        return False


def worker_pids(kilnd_pid):
    """Live (non-zombie) child processes of kilnd: its workers."""
    out = []
    for stat in glob.glob("/proc/[0-9]*/stat"):
        try:
            with open(stat) as f:
                fields = f.read().rsplit(")", 1)[1].split()
        except OSError:
            continue
        if fields[0] != "Z" and int(fields[1]) == kilnd_pid:
            out.append(int(stat.split("/")[2]))
    return out


def live_in_groups(pgids):
    """Live (non-zombie) processes whose process group is one of `pgids`."""
    out = []
    for stat in glob.glob("/proc/[0-9]*/stat"):
        try:
            with open(stat) as f:
                fields = f.read().rsplit(")", 1)[1].split()
        except OSError:
            continue
        if fields[0] not in ("Z", "X") and int(fields[2]) in pgids:
            out.append(int(stat.split("/")[2]))
    return out


class ServiceTestCase(KilnTestCase):
    """One kilnd per test (self.up), stopped and checked in cleanup."""

    def up(self, *args, workers=2, hooks=True, oom=False, state_dir=None):
        argv = ["--workers", str(workers), "--drain-timeout", "5s"] + (["--test-hooks"] if hooks else [])
        env = {}
        kilnd = Kilnd(*(argv + list(args)), state_dir=state_dir)
        kilnd.san_prefix = os.path.join(kilnd.tmp.name, "sanitizer")
        kilnd.oom = oom
        if SANITIZED and not oom:
            # Workers inherit kilnd's environment: every report lands in a file we can
            # read whole (worker stderr reaches kilnd's log cut and rate-limited). Not
            # for the oom hook: kilnd tells an out-of-memory death by the worker's last
            # words on stderr, which are ASan's "out of memory" report there.
            for var in ("ASAN_OPTIONS", "UBSAN_OPTIONS", "TSAN_OPTIONS"):
                old = os.environ.get(var, "")
                env[var] = (old + ":" if old else "") + f"log_path={kilnd.san_prefix}"
        kilnd.env.update(env)
        kilnd.start()
        self.kilnd = kilnd
        self.clients = []
        self.addCleanup(self._down, kilnd)
        self.client = self.new_client()
        # Workers say Hello before admission can compute cache keys; wait until every
        # one has (on a fresh kilnd all are then idle, so "a worker is free" holds
        # from the first Compile; a restarted one may have re-admitted work).
        wait_for(lambda: self.client.jobs().workers == workers
                 and self.idle_workers() + self.client.jobs().workers_busy == workers,
                 30, "the workers to start")
        return self.client

    def idle_workers(self):
        # GetStats has busy and configured counts but a worker still starting counts
        # as neither busy nor ready: count the workers kilnd logged ready and not yet
        # gone (a worker that dies before its Hello makes this wait longer, not pass).
        j = self.client.jobs()
        log = self.kilnd.log()
        ready = log.count("event=worker_ready") - log.count("event=worker_exit")
        return min(j.workers - j.workers_busy, ready - j.workers_busy)

    def new_client(self):
        c = Client(self.kilnd.addr)
        self.clients.append(c)
        return c

    def _down(self, kilnd):
        for c in self.clients:
            c.close()
        try:
            rc = kilnd.stop(timeout=60 * SLOW) if kilnd.proc.poll() is None else 0
            self.check_sanitizer_reports(kilnd)
            self.assertEqual(rc, 0, f"kilnd exited {rc}; log:\n{kilnd.log()[-20000:]}")
            # Workers killed on purpose (cancel, timeout, crash, memory) included.
            self.assertEqual(kilnd.leftovers(), [], "left in kilnd's TMPDIR")
        finally:
            kilnd.__exit__(None, None, None)

    def check_sanitizer_reports(self, kilnd):
        reports = sorted(glob.glob(kilnd.san_prefix + ".*"))
        texts = []
        for path in reports:
            with open(path, errors="replace") as f:
                texts.append(f"--- {os.path.basename(path)}\n{f.read()}")
        # Reports that went to stderr instead (kilnd's own, and the workers' of the oom
        # test, forwarded into kilnd's log).
        for line in kilnd.log().splitlines():
            if ("ERROR: AddressSanitizer" in line or "ERROR: LeakSanitizer" in line
                    or "WARNING: ThreadSanitizer" in line or "runtime error:" in line) and not (kilnd.oom and "allocator is out of memory" in line):
                texts.append(line)
        self.assertEqual(texts, [], "sanitizer reports:\n" + "\n".join(texts))

    def assertStatus(self, code, fn, *args, words=(), **kwargs):
        with self.assertRaises(grpc.RpcError) as ctx:
            fn(*args, **kwargs)
        self.assertEqual(ctx.exception.code(), code, ctx.exception.details())
        for w in ([words] if isinstance(words, str) else words):
            self.assertIn(w, ctx.exception.details())
        return ctx.exception

    def skip_under_valgrind(self):
        # Contract-gap probes (expected failures) exercise no daemon path the other
        # tests do not; under valgrind each kilnd costs ~10 s.
        if WRAPPED:
            self.skipTest("a contract-gap probe: not rerun under valgrind")

    def assertAlive(self):
        self.assertTrue(self.kilnd.alive(), self.kilnd.log()[-5000:])
        self.client.info()

    def assertCompiles(self, source=MLP, targets=("sm_89",), name="mlp.mlir"):
        """A compile that must succeed now; returns {target: TargetDone}."""
        r = self.client.compile(source, targets, name=name)
        evs = self.client.events(r.job_id, from_start=True)
        self.assertEqual(evs[-1].terminal.state, DONE, evs[-1])
        return {e.target_done.target: e.target_done for e in evs if kind(e) == "target_done"}

    def start_hang(self, tag, targets=("sm_89",), **kw):
        """A job whose worker hangs; returns (response, its Started event)."""
        r = self.client.compile(hooked("hang", tag), targets, name=f"hang-{tag}.mlir", **kw)
        w = Watch(self.client, r.job_id, from_start=True)
        w.wait_kind("started")
        w.cancel()
        return r, [e for e in w.events if kind(e) == "started"][0]

    def wait_restarts(self, n, what="a worker to be replaced"):
        wait_for(lambda: self.client.jobs().worker_restarts >= n, 30, what)
        # ... and the replacement to be ready again.
        wait_for(lambda: self.idle_workers() + self.client.jobs().workers_busy
                 == self.client.jobs().workers, 30, "the replacement worker")


class CompileFlowTest(ServiceTestCase):
    def test_compile_watch_fetch_then_cached(self):
        c = self.up()
        before = c.jobs()
        r = c.compile(MLP, ["sm_89"], name="mlp.mlir")
        self.assertTrue(r.job_id.startswith("j-"), r.job_id)
        self.assertEqual(r.source_digest, hashlib.sha256(MLP).hexdigest())
        self.assertIn(r.state, (QUEUED, RUNNING))
        self.assertGreater(r.created_unix_ms, 0)
        (t,) = r.targets
        self.assertEqual((t.target, t.canonical_target, t.cached, t.merged, t.artifact_digest),
                         ("sm_89", "sm_89", False, False, ""))
        self.assertRegex(t.cache_key, "^[0-9a-f]{64}$")

        evs = c.events(r.job_id, from_start=True)
        ks = kinds(evs)
        self.assertEqual([e.sequence for e in evs], list(range(1, len(evs) + 1)), ks)
        self.assertEqual(ks[0], "queued", ks)
        self.assertEqual(evs[0].queued.priority, S.PRIORITY_INTERACTIVE)
        self.assertEqual(ks[1], "started", ks)
        self.assertRegex(evs[1].started.worker, r"^worker-\d+$")  # no pid: server details stay in its log
        self.assertEqual(ks[-1], "terminal", ks)
        self.assertEqual(evs[-1].terminal.state, DONE)
        self.assertEqual(ks.count("target_done"), 1, ks)
        progress = [e.progress for e in evs if kind(e) == "progress"]
        self.assertTrue(progress, ks)
        self.assertTrue(all(p.target == "sm_89" and 0 < p.fraction <= 1 for p in progress), progress)
        self.assertEqual([p.fraction for p in progress], sorted(p.fraction for p in progress))
        # The built-in compiler reports each stage boundary once.
        self.assertEqual([(p.stage, p.stage_index, p.stage_count) for p in progress],
                         [("parse", 0, 4), ("optimize", 1, 4), ("codegen", 2, 4), ("serialize", 3, 4)])
        # Progress comes between Started and TargetDone.
        self.assertLess(ks.index("started"), ks.index("progress"))
        self.assertLess(len(ks) - 1 - ks[::-1].index("progress"), ks.index("target_done"))
        for e in evs:
            self.assertEqual(e.job_id, r.job_id)
            self.assertGreater(e.time_unix_ms, 0)
        done = [e.target_done for e in evs if kind(e) == "target_done"][0]
        self.assertEqual(done.target, "sm_89")
        self.assertEqual(done.cache_key, t.cache_key)
        self.assertFalse(done.cache_hit)
        self.assertRegex(done.artifact_digest, "^[0-9a-f]{64}$")

        meta, data = c.fetch(done.artifact_digest)
        self.assertEqual(len(data), done.size_bytes)
        self.assertEqual(hashlib.sha256(data).hexdigest(), done.artifact_digest)
        self.assertEqual(data[:4], b"PK\x03\x04")
        self.assertEqual(data[72:76], b"IREE")
        self.assertEqual((meta.digest, meta.canonical_target, meta.size_bytes, meta.cache_key),
                         (done.artifact_digest, "sm_89", done.size_bytes, t.cache_key))
        self.assertEqual(meta.provenance.source_digest, normal_digest(MLP))  # the cache key's part
        self.assertEqual(meta.provenance.compiler.name, "kiln-mlir")
        # By source: the digest of the bytes as uploaded and the normal form's name the
        # same artifacts (kiln_cache_source_key_digest maps the first to the second).
        for source_digest in (r.source_digest, normal_digest(MLP)):
            found = c.find_call(S.FindArtifactsRequest(source_digest=source_digest, target="sm_89"),
                                timeout=30 * SLOW)
            self.assertEqual([a.digest for a in found.artifacts], [done.artifact_digest], source_digest)
            msgs = list(c.get_call(S.GetArtifactRequest(key=S.ArtifactKey(source_digest=source_digest,
                                                                           target="ada")), timeout=30 * SLOW))
            self.assertEqual(msgs[0].metadata.digest, done.artifact_digest, source_digest)
        mid = c.jobs()
        self.assertEqual(mid.targets_compiled, before.targets_compiled + 1)
        self.assertEqual(mid.submitted, before.submitted + 1)
        self.assertEqual(mid.done, before.done + 1)

        # The same Compile again: answered from the cache, no compile.
        r2 = c.compile(MLP, ["sm_89"], name="mlp.mlir")
        self.assertNotEqual(r2.job_id, r.job_id)
        self.assertEqual(r2.state, DONE)
        (t2,) = r2.targets
        self.assertTrue(t2.cached)
        self.assertEqual((t2.artifact_digest, t2.size_bytes, t2.cache_key),
                         (done.artifact_digest, done.size_bytes, t.cache_key))
        evs2 = c.events(r2.job_id, from_start=True)
        self.assertEqual(kinds(evs2), ["queued", "target_done", "terminal"])
        self.assertTrue(evs2[1].target_done.cache_hit)
        self.assertEqual(evs2[1].target_done.artifact_digest, done.artifact_digest)
        self.assertEqual(evs2[2].terminal.state, DONE)
        # A job answered from the cache builds its log only when watched: the same
        # log, numbered from 1 and stamped with the job's own times.
        self.assertEqual([e.sequence for e in evs2], [1, 2, 3])
        self.assertEqual({e.job_id for e in evs2}, {r2.job_id})
        for e in evs2:
            self.assertGreaterEqual(e.time_unix_ms, r2.created_unix_ms)
            self.assertLessEqual(e.time_unix_ms, int(time.time() * 1000) + 1)
        self.assertEqual(kinds(c.events(r2.job_id, from_start=True)), kinds(evs2))
        after = c.jobs()
        self.assertEqual(after.targets_compiled, mid.targets_compiled)
        self.assertEqual(after.submitted, mid.submitted + 1)
        # The worker reports itself idle just after its task's last event: the
        # count settles (a CI run read 1 here once), and no compile was started.
        wait_for(lambda: c.jobs().workers_busy == 0, 10, "the worker to report itself idle")
        self.assertEqual(c.jobs().targets_compiled, mid.targets_compiled)

    def test_provenance_records_labels_and_submitter(self):
        c = self.up()
        r = c.compile(MLP, ["sm_89"], name="mlp.mlir", labels={"model": "mlp", "ci.pipeline": "7"})
        evs = c.events(r.job_id, from_start=True)
        done = [e.target_done for e in evs if kind(e) == "target_done"][0]
        meta, _ = c.fetch(done.artifact_digest)
        self.assertEqual(dict(meta.provenance.labels), {"model": "mlp", "ci.pipeline": "7"})
        self.assertTrue(meta.provenance.submitter.startswith("ipv4:127.0.0.1"), meta.provenance)
        # ... and searchable.
        found = c.find_call(S.FindArtifactsRequest(labels={"model": "mlp"}), timeout=10 * SLOW)
        self.assertEqual([a.digest for a in found.artifacts], [done.artifact_digest])
        found = c.find_call(S.FindArtifactsRequest(labels={"model": "other"}), timeout=10 * SLOW)
        self.assertEqual(list(found.artifacts), [])

    def test_provenance_records_job_and_source_name(self):
        # kiln.proto Provenance: "source_name of the request that produced it" and
        # "the job that produced it".
        self.skip_under_valgrind()
        c = self.up()
        r = c.compile(MLP, ["sm_89"], name="mlp.mlir")
        evs = c.events(r.job_id, from_start=True)
        done = [e.target_done for e in evs if kind(e) == "target_done"][0]
        meta, _ = c.fetch(done.artifact_digest)
        self.assertEqual(meta.provenance.source_name, "mlp.mlir")
        self.assertEqual(meta.provenance.job_id, r.job_id)

    def test_three_targets_share_one_task(self):
        c = self.up()
        # With two idle workers, a hang source for three targets occupies exactly one:
        # the targets travel as one task (one front half, the compiler's fan-out).
        r, _ = self.start_hang("fanout", ["sm_89", "gfx1100", "arm5gen"])
        j = c.jobs()
        self.assertEqual((j.workers_busy, j.running, j.queued), (1, 1, 0))
        self.assertEqual(c.cancel(r.job_id).state, CANCELLED)

        self.wait_restarts(1)
        before = c.jobs()
        r = c.compile(ATTENTION, ["sm_89", "gfx1100", "arm5gen"], name="attention.mlir")
        evs = c.events(r.job_id, from_start=True)
        ks = kinds(evs)
        self.assertEqual(ks.count("started"), 1, ks)
        self.assertEqual(evs[-1].terminal.state, DONE)
        done = {e.target_done.target: e.target_done for e in evs if kind(e) == "target_done"}
        self.assertEqual(set(done), {"sm_89", "gfx1100", "arm5gen"})
        self.assertTrue(all(not d.cache_hit for d in done.values()))
        self.assertEqual(len({d.artifact_digest for d in done.values()}), 3)
        # Every target's parse stage is reported before any target finishes.
        parse = [i for i, e in enumerate(evs) if kind(e) == "progress" and e.progress.stage == "parse"]
        self.assertEqual(len(parse), 3, ks)
        self.assertLess(max(parse), ks.index("target_done"))
        after = c.jobs()
        self.assertEqual(after.targets_compiled, before.targets_compiled + 3)
        self.assertEqual(after.merged_requests, before.merged_requests)


class MergeTest(ServiceTestCase):
    N = 32

    def compile_concurrently(self, source, target):
        barrier = threading.Barrier(self.N)

        def one(i):
            c = Client(self.kilnd.addr)
            try:
                c.info()  # connected before the barrier
                barrier.wait(timeout=30 * SLOW)
                return c.compile(source, [target], name="mlp.mlir")
            finally:
                c.close()

        with concurrent.futures.ThreadPoolExecutor(self.N) as pool:
            return list(pool.map(one, range(self.N)))

    def check_one_artifact(self, responses):
        digests = set()
        for r in responses:
            evs = self.client.events(r.job_id, from_start=True)
            self.assertEqual(evs[-1].terminal.state, DONE, evs[-1])
            (d,) = [e.target_done for e in evs if kind(e) == "target_done"]
            digests.add(d.artifact_digest)
        self.assertEqual(len(digests), 1, digests)

    def test_32_identical_compiles_queued_behind_a_busy_worker_merge(self):
        c = self.up(workers=1)
        hang, _ = self.start_hang("blocker")
        before = c.jobs()
        rs = self.compile_concurrently(MLP, "gfx950")
        self.assertEqual(len({r.job_id for r in rs}), self.N)
        merged = [r.targets[0].merged for r in rs]
        self.assertEqual(merged.count(False), 1, merged)
        self.assertTrue(all(r.state == QUEUED for r in rs), [r.state for r in rs])
        self.assertEqual(len({r.targets[0].cache_key for r in rs}), 1)
        mid = c.jobs()
        self.assertEqual(mid.merged_requests, before.merged_requests + self.N - 1)
        self.assertEqual(mid.submitted, before.submitted + self.N)
        self.assertEqual((mid.queued, mid.running, mid.workers_busy), (self.N, 1, 1))

        c.cancel(hang.job_id)  # frees the only worker
        self.check_one_artifact(rs)
        after = c.jobs()
        self.assertEqual(after.targets_compiled, before.targets_compiled + 1)
        self.assertEqual(after.done, before.done + self.N)

    def test_32_identical_compiles_racing_on_idle_workers_compile_once(self):
        # No blocker: whichever way the race goes (merged into queued or running
        # work, or a cache hit after it), there is exactly one compile.
        c = self.up(workers=2)
        before = c.jobs()
        rs = self.compile_concurrently(MLP, "gfx942")
        self.check_one_artifact(rs)
        after = c.jobs()
        self.assertEqual(after.targets_compiled, before.targets_compiled + 1)
        owners = [r for r in rs if not r.targets[0].merged and not r.targets[0].cached]
        self.assertEqual(len(owners), 1, [(r.targets[0].merged, r.targets[0].cached) for r in rs])
        self.assertEqual(after.merged_requests - before.merged_requests,
                         sum(r.targets[0].merged for r in rs))


class RefusalTest(ServiceTestCase):
    def test_bad_ir_fails_the_job_with_a_location(self):
        c = self.up()
        r = c.compile(BAD_IR, ["sm_89", "gfx950"], name="bad.mlir")
        evs = c.events(r.job_id, from_start=True)
        self.assertEqual(evs[-1].terminal.state, FAILED, evs[-1])
        failed = [e.target_failed for e in evs if kind(e) == "target_failed"]
        self.assertEqual({f.target for f in failed}, {"sm_89", "gfx950"})
        for f in failed:
            self.assertEqual(f.code, C_INVALID_ARGUMENT, f)
            self.assertIn("bad.mlir:2:", f.message)
        self.assertEqual(c.jobs().targets_compiled, 0)
        self.assertCompiles()

    def test_bad_ir_failure_carries_structured_diagnostics(self):
        # kiln.proto: TargetFailed.diagnostics are "the error diagnostics behind the
        # failure"; the IR error has a file:line:col, so there is one.
        self.skip_under_valgrind()
        c = self.up()
        r = c.compile(BAD_IR, ["sm_89"], name="bad.mlir")
        evs = c.events(r.job_id, from_start=True)
        (f,) = [e.target_failed for e in evs if kind(e) == "target_failed"]
        self.assertTrue(f.diagnostics, f)
        self.assertEqual((f.diagnostics[0].location.file, f.diagnostics[0].location.line), ("bad.mlir", 2))
        self.assertGreater(f.diagnostics[0].location.column, 0)
        self.assertEqual(f.diagnostics[0].severity, S.SEVERITY_ERROR)
        # ...and the same diagnostic came first as its own event.
        diag_events = [e.diagnostic for e in evs if kind(e) == "diagnostic"]
        self.assertEqual([d.message for d in diag_events], [d.message for d in f.diagnostics])

    def test_compile_refusals(self):
        c = self.up()
        bad = grpc.StatusCode.INVALID_ARGUMENT
        # Bytes that are neither UTF-8 text nor MLIR bytecode.
        junk = bytes([0xff, 0xfe, 0x00, 0x80]) + os.urandom(4096)
        self.assertStatus(bad, c.compile, junk, words=("UTF-8", "bytecode"))
        self.assertStatus(bad, c.compile, b"ML\xefR" + junk, source_format=S.SOURCE_FORMAT_MLIR_TEXT,
                          words="bytecode")
        self.assertStatus(bad, c.compile, MLP, source_format=S.SOURCE_FORMAT_MLIR_BYTECODE,
                          words="bytecode")
        # Unknown target: the message lists the known canonical ids.
        e = self.assertStatus(bad, c.compile, MLP, ["sm_89", "no-such-gpu"], words="no-such-gpu")
        for known in ("sm_89", "gfx950", "arm5gen", "videocore_vii"):
            self.assertIn(known, e.details())
        self.assertStatus(bad, c.compile, None, words="source")
        self.assertStatus(bad, c.compile, b"", words="source")
        self.assertStatus(bad, c.compile, MLP, [], words="target")
        self.assertStatus(bad, c.compile, MLP, ["sm_89"] * 17, words=("17", "16"))
        self.assertStatus(bad, c.compile, None, source_digest="sha256:" + "0" * 64, words="source_digest")
        self.assertStatus(bad, c.compile, MLP, flags=["--iree-hal-target-device=cuda"],
                          words="--iree-hal-target-device")
        self.assertStatus(bad, c.compile, MLP, flags=["--iree-hal-dump-executable-files-to=/tmp"],
                          words="--iree-hal-dump-executable-files-to")
        self.assertStatus(bad, c.compile, MLP, request_id="r" * 129, words="request_id")
        self.assertStatus(bad, c.compile, MLP, name="n" * 1025, words="source_name")
        # A never-uploaded digest.
        self.assertStatus(grpc.StatusCode.NOT_FOUND, c.compile, None, source_digest="ab" * 32,
                          words=("ab" * 32, "PutSource"))
        j = c.jobs()
        self.assertEqual((j.submitted, j.targets_compiled), (0, 0))
        # 16 targets (duplicates of one canonical target compile once) are fine.
        r = c.compile(MLP, ["sm_89", "ada"] * 8)
        self.assertEqual(len(r.targets), 16)
        self.assertEqual({t.canonical_target for t in r.targets}, {"sm_89"})
        self.assertEqual(c.finish(r.job_id).state, DONE)
        self.assertEqual(c.jobs().targets_compiled, 1)

    def test_strings_and_enums_are_checked_at_the_door(self):
        """protobuf strings are UTF-8 text: protobuf-c keeps whatever bytes come and
        cuts them at a NUL, so "sm_89\\0evil" compiled as sm_89 and non-UTF-8 labels
        were stored, breaking every later Python read of them. Enums hold their
        values (priority 99 is not a priority). Identifiers are visible ASCII.
        Refused with INVALID_ARGUMENT naming the field, on every method."""
        c = self.up()
        bad = grpc.StatusCode.INVALID_ARGUMENT
        raw_compile = c.channel.unary_unary(KILN + "Compile", request_serializer=lambda b: b,
                                            response_deserializer=S.CompileResponse.FromString)
        raw_find = c.channel.unary_unary(KILN + "FindArtifacts", request_serializer=lambda b: b,
                                         response_deserializer=S.FindArtifactsResponse.FromString)

        def spliced(message, placeholder, replacement):
            wire = message.SerializeToString()
            self.assertEqual(wire.count(placeholder), 1)
            return wire.replace(placeholder, replacement)

        self.assertStatus(bad, c.compile, MLP, ["sm_89\0evil"], words=("targets[0]", "NUL"))
        self.assertStatus(bad, raw_compile,
                          spliced(S.CompileRequest(targets=["sm_89"], source=MLP, source_name="XXXX"),
                                  b"XXXX", b"\xff\xfeXX"), timeout=10 * SLOW, words=("source_name", "UTF-8"))
        self.assertStatus(bad, raw_compile,
                          spliced(S.CompileRequest(targets=["sm_89"], source=MLP, labels={"KKKK": "v"}),
                                  b"KKKK", b"K\xc0\x80K"), timeout=10 * SLOW, words=("labels[0].key", "UTF-8"))
        self.assertStatus(bad, c.compile, MLP, priority=99, words=("priority", "99", "kiln.v1.Priority"))
        self.assertStatus(bad, c.compile, MLP, priority=-5, words=("priority", "-5"))
        self.assertStatus(bad, c.compile, MLP, source_format=77, words=("source_format", "77"))
        self.assertStatus(bad, c.compile, MLP, request_id="req\x01", words=("request_id", "visible ASCII"))
        self.assertStatus(bad, c.compile, MLP, request_id="req 1", words=("request_id", "0x20"))
        self.assertStatus(bad, raw_find, spliced(S.FindArtifactsRequest(labels={"k": "VVVV"}), b"VVVV", b"\xed\xa0\x80V"),
                          timeout=10 * SLOW, words=("labels[0].value", "UTF-8"))
        self.assertStatus(bad, c.cancel, "j-\x7fbad", words=("job_id", "visible ASCII"))
        # One label rule for every method: Compile took keys FindArtifacts refused.
        for key in ("k" * 100000, "../../x", "Team", "-x", ""):
            self.assertStatus(bad, c.compile, MLP, labels={key: "v"}, words="label key")
            self.assertStatus(bad, c.find_call, S.FindArtifactsRequest(labels={key: "v"}), timeout=10 * SLOW,
                              words="label key")
        self.assertStatus(bad, c.compile, MLP, labels={"k": "v" * 257}, words=("label 'k'", "257 bytes"))
        self.assertStatus(grpc.StatusCode.NOT_FOUND, c.cancel, "j-0000000000000000")
        self.assertEqual(c.jobs().submitted, 0)
        # Valid UTF-8 beyond ASCII is text like any other.
        r = c.compile(MLP, ["sm_89"], name="modèle-ß-模型.mlir", labels={"team": "vision-ü"})
        self.assertEqual(c.finish(r.job_id).state, DONE)
        self.assertAlive()

    def test_read_only_state_is_failed_precondition_without_paths(self):
        """kiln.proto keeps PERMISSION_DENIED for client authentication: kilnd's
        own read-only state directory is FAILED_PRECONDITION (the CLI had advised
        a better token), and the client is not shown server paths."""
        self.skip_under_valgrind()
        if os.geteuid() != 0:
            self.skipTest("needs a tmpfs remounted read-only (root)")
        with tempfile.TemporaryDirectory() as tmp:
            state = os.path.join(tmp, "state")
            cache = os.path.join(state, "cache")
            c = self.up(state_dir=state)
            r = c.compile(MLP, ["sm_89"])
            self.assertEqual(c.finish(r.job_id).state, DONE)
            # The cache folder read-only under the running kilnd (a bind mount: files
            # kilnd holds open stay usable, new ones cannot be made).
            if subprocess.run(["mount", "--bind", cache, cache], capture_output=True).returncode != 0:
                self.skipTest("cannot bind-mount here")
            try:
                self.assertEqual(subprocess.run(["mount", "-o", "remount,bind,ro", cache],
                                                capture_output=True).returncode, 0)
                # The new source cannot be stored: refused at admission.
                e = self.assertStatus(grpc.StatusCode.FAILED_PRECONDITION, c.compile, ATTENTION, ["sm_89"],
                                      words="cannot write its state directory")
                self.assertNotIn(state, e.details())
                e = self.assertStatus(grpc.StatusCode.FAILED_PRECONDITION, c.put_source, ATTENTION + b"// x\n",
                                      4096, words="cannot write its state directory")
                self.assertNotIn(state, e.details())
                self.assertIn(state, self.kilnd.log())  # the operator's log has the path
                self.assertAlive()
            finally:
                subprocess.run(["umount", cache], capture_output=True)

    def test_non_mlir_bytes_carry_diagnostics_metadata(self):
        self.skip_under_valgrind()
        c = self.up()

        def diagnostics(e):
            md = dict(e.trailing_metadata() or ())
            self.assertIn("kiln-diagnostics-bin", md)
            (d,) = S.DiagnosticList.FromString(md["kiln-diagnostics-bin"]).diagnostics
            self.assertEqual(d.severity, S.SEVERITY_ERROR)
            return d

        e = self.assertStatus(grpc.StatusCode.INVALID_ARGUMENT, c.compile, b"\xff\xfe" + bytes(100))
        d = diagnostics(e)
        self.assertEqual((d.location.file, d.location.line, d.location.column), ("model.mlir", 1, 1))
        self.assertIn("not valid UTF-8", d.message)
        # The line and column of the first bad byte, under the request's name.
        src = MLP + b"// caf\xc3\xa9 ok\n  // bad: \xc3(\n"
        e = self.assertStatus(grpc.StatusCode.INVALID_ARGUMENT, c.compile, src, name="m.mlir")
        d = diagnostics(e)
        line = MLP.count(b"\n") + 2
        self.assertEqual((d.location.file, d.location.line, d.location.column), ("m.mlir", line, 12))
        self.assertIn("line %d, column 12" % line, e.details())
        # A NUL is not text either.
        d = diagnostics(self.assertStatus(grpc.StatusCode.INVALID_ARGUMENT, c.compile, b"module {}\x00"))
        self.assertIn("NUL", d.message)
        # PutSource refuses the same bytes with the same metadata.
        e = self.assertStatus(grpc.StatusCode.INVALID_ARGUMENT, c.put_source, src, 4096, name="m.mlir")
        d = diagnostics(e)
        self.assertEqual((d.location.file, d.location.line, d.location.column), ("m.mlir", line, 12))
        self.assertAlive()

    def test_large_inline_source_hits_the_cache(self):
        # Over 64 KiB inline: checked and hashed on the thread pool, not the loop;
        # the same answers either way.
        c = self.up()
        pad = b"".join(b"// padding line %06d ......................................\n" % i for i in range(2000))
        big = MLP + pad
        self.assertGreater(len(big), 64 * KIB)
        r = c.compile(big, ["sm_89"], name="big.mlir")
        self.assertEqual(c.finish(r.job_id).state, DONE)
        for _ in range(2):
            again = c.compile(big, ["sm_89"], name="big.mlir")
            self.assertEqual(again.state, DONE)
            self.assertTrue(again.targets[0].cached)
        e = self.assertStatus(grpc.StatusCode.INVALID_ARGUMENT, c.compile, big + b"\xff", name="big.mlir")
        self.assertIn("not valid UTF-8", e.details())

    def test_oversized_inline_source_then_put_source(self):
        c = self.up("--max-message-bytes", "256KiB")
        pad = b"".join(b"// padding line %06d .................................................\n" % i
                       for i in range(4000))
        big = MLP + pad
        self.assertGreater(len(big), 256 * KIB)
        self.assertStatus(grpc.StatusCode.RESOURCE_EXHAUSTED, c.compile, big, name="big.mlir")
        self.assertAlive()
        info = c.info()
        self.assertEqual(info.max_message_bytes, 256 * KIB)
        put = c.put_source(big, info.chunk_size_bytes)
        self.assertEqual(put.digest, hashlib.sha256(big).hexdigest())
        r = c.compile(None, ["sm_89"], source_digest=put.digest, name="big.mlir")
        self.assertEqual(r.source_digest, put.digest)
        self.assertEqual(c.finish(r.job_id).state, DONE)


class WorkerFailureTest(ServiceTestCase):
    def test_crash_fails_the_job_and_keeps_the_ir(self):
        c = self.up()
        before = c.jobs()
        src = hooked("crash", "c1")
        r = c.compile(src, ["sm_89", "gfx950"], name="crashy.mlir")
        evs = c.events(r.job_id, from_start=True)
        self.assertEqual(evs[-1].terminal.state, FAILED)
        failed = [e.target_failed for e in evs if kind(e) == "target_failed"]
        self.assertEqual({f.target for f in failed}, {"sm_89", "gfx950"})
        for f in failed:
            self.assertEqual(f.code, C_INTERNAL, f)
            self.assertTrue("signal 6" in f.message or "SIGABRT" in f.message or "Aborted" in f.message,
                            f.message)
        self.assertAlive()
        after = c.jobs()
        self.assertEqual(after.worker_restarts, before.worker_restarts + 1)
        self.assertEqual(after.failed, before.failed + 1)
        kept = glob.glob(os.path.join(self.kilnd.state_dir, "crashes", "*.mlir"))
        self.assertEqual(len(kept), 1, kept)
        with open(kept[0], "rb") as f:
            self.assertEqual(f.read(), src)
        self.assertIn(os.path.basename(kept[0]), failed[0].message)
        self.wait_restarts(1)
        self.assertCompiles()

    def test_crash_files_are_capped(self):
        # 25 crashing compiles wrote 31 MB to STATE/crashes in 3 s, with no cap:
        # only the newest --crash-keep are kept.
        c = self.up("--crash-keep", "2")
        for i in range(4):
            r = c.compile(hooked("crash", f"cap{i}"), ["sm_89"], name=f"crashy{i}.mlir")
            evs = c.events(r.job_id, from_start=True)
            (f,) = [e.target_failed for e in evs if kind(e) == "target_failed"]
            self.assertIn("kept in kilnd's crash folder as", f.message)
            self.assertNotIn(self.kilnd.state_dir, f.message)  # no server paths for clients
            self.wait_restarts(i + 1)
        kept = sorted(glob.glob(os.path.join(self.kilnd.state_dir, "crashes", "*.mlir")))
        self.assertEqual(len(kept), 2, kept)
        sources = set()
        for path in kept:
            with open(path, "rb") as fh:
                sources.add(fh.read())
        self.assertEqual(sources, {hooked("crash", "cap2"), hooked("crash", "cap3")})
        self.assertIn("event=crash_file_removed", self.kilnd.log())
        self.assertAlive()

    def test_tensor_over_the_memory_limit_is_refused_by_name(self):
        # A 1.2 KB model with a 50,000,000 dimension took a worker to 4.7 GB
        # before failing; worker-memory-limit now defaults to a share of the
        # machine, and a tensor over it is refused before the pipeline runs.
        big = (b"func.func @big(%a: tensor<50000000x64xf32>) -> tensor<50000000x64xf32> {\n"
               b"  %0 = tosa.add %a, %a : (tensor<50000000x64xf32>, tensor<50000000x64xf32>) -> "
               b"tensor<50000000x64xf32>\n  return %0 : tensor<50000000x64xf32>\n}\n")
        c = self.up("--worker-memory-limit", "1GiB")
        t0 = time.monotonic()
        r = c.compile(big, ["sm_89"], name="big.mlir")
        evs = c.events(r.job_id, from_start=True)
        (f,) = [e.target_failed for e in evs if kind(e) == "target_failed"]
        self.assertEqual(f.code, C_RESOURCE_EXHAUSTED, f)
        for words in ("big.mlir:1:", "tensor<50000000x64xf32>", "12800000000 bytes", "1073741824 bytes",
                      "worker-memory-limit"):
            self.assertIn(words, f.message)
        self.assertLess(time.monotonic() - t0, 20 * SLOW)
        self.assertEqual(c.jobs().worker_restarts, 0)  # refused, not crashed
        self.assertCompiles()

    def test_hang_stops_at_the_worker_timeout(self):
        c = self.up("--worker-timeout", "2s")
        t0 = time.monotonic()
        r = c.compile(hooked("hang", "t"), ["sm_89"], name="slow.mlir")
        evs = c.events(r.job_id, from_start=True, timeout=30)
        took = time.monotonic() - t0
        self.assertEqual(evs[-1].terminal.state, FAILED)
        (f,) = [e.target_failed for e in evs if kind(e) == "target_failed"]
        self.assertEqual(f.code, C_DEADLINE_EXCEEDED, f)
        self.assertIn("2000 ms", f.message)
        self.assertIn("worker-timeout", f.message)  # the setting that would fix it
        self.assertGreater(took, 1.9)
        self.assertLess(took, 2 + 4 * SLOW)
        self.assertAlive()
        self.wait_restarts(1)
        self.assertCompiles()

    def test_out_of_memory_fails_cleanly(self):
        c = self.up("--worker-memory-limit", "512MiB", oom=True)
        r = c.compile(hooked("oom", "m"), ["sm_89"], name="hungry.mlir")
        evs = c.events(r.job_id, from_start=True, timeout=60)
        self.assertEqual(evs[-1].terminal.state, FAILED)
        (f,) = [e.target_failed for e in evs if kind(e) == "target_failed"]
        self.assertIn(f.code, (C_RESOURCE_EXHAUSTED, C_INTERNAL), f)
        self.assertIn("memory", f.message)
        self.assertIn("worker-memory-limit", f.message)  # the setting that would fix it
        self.assertAlive()
        self.wait_restarts(1)
        self.assertCompiles()


class ScratchTest(ServiceTestCase):
    """Each worker's temporary files lie in its scratch directory, its TMPDIR
    ($TMPDIR/kiln-worker-<kilnd pid>-<n>). A worker killed in the middle of a task
    runs no cleanup: kilnd removes the directory once it has reaped the worker, and
    a new kilnd removes those a killed kilnd left. Every test's clean stop checks
    that kilnd's TMPDIR holds nothing of kiln's."""

    def test_killed_worker_leaves_no_scratch(self):
        c = self.up(workers=1)
        # An AMD target makes the ROCDL serializer's toolkit links, kept for the
        # worker's life, in its TMPDIR.
        self.assertCompiles(targets=("gfx950",))
        r, _ = self.start_hang("scratch")
        (first,) = self.kilnd.leftovers()
        self.assertRegex(first, rf"^kiln-worker-{self.kilnd.proc.pid}-\d+$")
        scratch = os.path.join(self.kilnd.env["TMPDIR"], first)
        links = glob.glob(os.path.join(scratch, "kiln-toolkit-*", "llvm", "bin", "ld.lld"))
        self.assertEqual(len(links), 1, os.listdir(scratch))
        before = c.jobs()
        self.assertTrue(c.cancel(r.job_id).cancelled)
        self.wait_restarts(before.worker_restarts + 1)
        wait_for(lambda: not os.path.exists(scratch), 10, f"kilnd to remove {scratch}")
        (second,) = self.kilnd.leftovers()  # the new worker's
        self.assertNotEqual(second, first)

    def test_a_new_kilnd_removes_what_a_killed_one_left(self):
        self.up(workers=2)
        tmp = self.kilnd.env["TMPDIR"]
        pids = worker_pids(self.kilnd.proc.pid)
        left = self.kilnd.leftovers()
        self.assertEqual(len(left), 2, left)
        # Beside them, one of an earlier version's form, of a process long gone, and
        # two of a live process (this test's), which must be kept. (The unit test of
        # the pool covers other users' folders, open modes and links.)
        probe = subprocess.Popen(["true"])
        probe.wait()
        old_form = os.path.join(tmp, f"kiln-worker-{probe.pid}")
        for d in (old_form, os.path.join(old_form, "kiln-ptxas-x")):
            os.mkdir(d, 0o700)  # private, as workers make them
        live = [os.path.join(tmp, f"kiln-worker-{os.getpid()}{n}") for n in ("", "-7")]
        for d in live:
            os.mkdir(d, 0o700)
            self.addCleanup(os.rmdir, d)
        self.kilnd.proc.kill()  # its workers die with it (PR_SET_PDEATHSIG), cleaning nothing
        self.kilnd.proc.wait()
        for pid in pids:
            wait_for(lambda: not pid_running(pid), 10, f"worker {pid} to die with kilnd")
        self.assertEqual(self.kilnd.leftovers(), sorted(left + [os.path.basename(old_form)] +
                                                        [os.path.basename(d) for d in live]))
        with Kilnd("--workers", "1", env={"TMPDIR": tmp}) as k2:
            wait_for(lambda: "event=worker_ready" in k2.log(), 30, "the new worker")
            mine = [n for n in k2.leftovers() if n.startswith(f"kiln-worker-{k2.proc.pid}-")]
            self.assertEqual(len(mine), 1)
            want = sorted(mine + [os.path.basename(d) for d in live])
            # The stale ones are removed on kilnd's thread pool, beside the workers' start.
            wait_for(lambda: k2.leftovers() == want, 10, f"only {want} to be left")
            self.assertEqual(k2.stop(), 0, k2.log()[-5000:])


class CancelTest(ServiceTestCase):
    def test_cancel_running_job(self):
        c = self.up()
        r, started = self.start_hang("k1")
        watcher = Watch(c, r.job_id, from_start=True)
        watcher.wait_kind("started")
        pid = worker_pid(self.kilnd, started.started.worker)
        before = c.jobs()
        self.assertEqual(before.workers_busy, 1)

        resp = c.cancel(r.job_id, reason="test says stop")
        self.assertEqual((resp.cancelled, resp.state), (True, CANCELLED))
        watcher.join()
        self.assertEqual(watcher.code, grpc.StatusCode.OK, watcher.details)
        ks = kinds(watcher.events)
        self.assertEqual(ks[-2:], ["target_failed", "terminal"], ks)
        self.assertEqual(watcher.events[-2].target_failed.code, C_CANCELLED)
        self.assertEqual(watcher.events[-1].terminal.state, CANCELLED)
        self.assertIn("test says stop", watcher.events[-1].terminal.message)
        self.wait_restarts(before.worker_restarts + 1)
        wait_for(lambda: pid not in worker_pids(self.kilnd.proc.pid), 10, f"worker {pid} to go")
        self.assertEqual(c.jobs().cancelled, before.cancelled + 1)

        again = c.cancel(r.job_id)
        self.assertEqual((again.cancelled, again.state), (False, CANCELLED))
        self.assertStatus(grpc.StatusCode.NOT_FOUND, c.cancel, "j-" + "0" * 24, words="j-" + "0" * 24)
        self.assertStatus(grpc.StatusCode.INVALID_ARGUMENT, c.cancel, "", words="job_id")
        self.assertStatus(grpc.StatusCode.INVALID_ARGUMENT, c.cancel, r.job_id, reason="x" * 1025,
                          words="reason")
        # A finished job is left as it was.
        r2 = c.compile(MLP, ["sm_89"])
        self.assertEqual(c.finish(r2.job_id).state, DONE)
        again = c.cancel(r2.job_id)
        self.assertEqual((again.cancelled, again.state), (False, DONE))

    def test_cancel_one_of_two_jobs_sharing_work(self):
        c = self.up()
        a, _ = self.start_hang("shared")
        b = c.compile(hooked("hang", "shared"), ["sm_89"], name="hang-shared.mlir")
        self.assertTrue(b.targets[0].merged)
        self.assertEqual(b.state, RUNNING)
        wb = Watch(c, b.job_id, from_start=True)
        before = c.jobs()

        self.assertTrue(c.cancel(a.job_id).cancelled)
        time.sleep(0.5 * SLOW)  # give a wrongly stopped task time to show
        self.assertEqual(c.state(b.job_id), RUNNING)
        self.assertFalse({"target_failed", "terminal"} & set(kinds(wb.events)), kinds(wb.events))
        j = c.jobs()
        self.assertEqual((j.workers_busy, j.worker_restarts), (1, before.worker_restarts))

        self.assertTrue(c.cancel(b.job_id).cancelled)
        wb.join()
        self.assertEqual(wb.events[-1].terminal.state, CANCELLED)
        self.wait_restarts(before.worker_restarts + 1, "the shared task to stop")
        self.assertEqual(c.jobs().workers_busy, 0)

    def test_grpc_deadline_becomes_the_job_deadline(self):
        c = self.up()
        before = c.jobs()
        t0 = time.monotonic()
        deadline = 2 * (3 if WRAPPED else 1)  # admission alone takes ~1 s under valgrind
        r = c.compile(hooked("hang", "d"), ["sm_89"], timeout=deadline, name="late.mlir")
        self.assertIn(r.state, (QUEUED, RUNNING))
        evs = c.events(r.job_id, from_start=True, timeout=30)
        took = time.monotonic() - t0
        self.assertEqual(evs[-1].terminal.state, FAILED)
        (f,) = [e.target_failed for e in evs if kind(e) == "target_failed"]
        self.assertEqual(f.code, C_DEADLINE_EXCEEDED, f)
        self.assertIn("deadline", f.message)
        self.assertGreater(took, deadline - 0.1)
        self.assertLess(took, deadline + 3 * SLOW)  # the sweep runs every 500 ms
        # Nobody waits for the work any more: its worker is stopped.
        self.wait_restarts(before.worker_restarts + 1)
        self.assertCompiles()


class QueueTest(ServiceTestCase):
    def test_queue_full_and_priorities(self):
        c = self.up("--queue-capacity", "2", workers=1)
        h0, _ = self.start_hang("q0")
        h1 = c.compile(hooked("hang", "q1"))
        h2 = c.compile(hooked("hang", "q2"))
        self.assertEqual((h1.state, h2.state), (QUEUED, QUEUED))
        self.assertStatus(grpc.StatusCode.RESOURCE_EXHAUSTED, c.compile, hooked("hang", "q3"),
                          words=("INTERACTIVE", "queue"))
        # Merging into queued work needs no queue slot; another class has its own.
        h2b = c.compile(hooked("hang", "q2"))
        self.assertTrue(h2b.targets[0].merged)
        bulk_full = c.compile(variant("bulk"), priority=S.PRIORITY_BULK)
        self.assertEqual(bulk_full.state, QUEUED)
        self.assertEqual((c.jobs().queued, c.jobs().running), (4, 1))

        # Free the queue; then BULK first, INTERACTIVE second, behind the busy worker.
        for j in (h1, h2, h2b, bulk_full):
            self.assertTrue(c.cancel(j.job_id).cancelled)
        self.assertEqual(c.jobs().queued, 0)
        bulk = c.compile(variant("bulk2"), priority=S.PRIORITY_BULK)
        inter = c.compile(hooked("hang", "inter"), priority=S.PRIORITY_INTERACTIVE)
        self.assertTrue(c.cancel(h0.job_id).cancelled)  # the worker frees up
        w = Watch(c, inter.job_id, from_start=True)
        w.wait_kind("started")
        self.assertEqual(c.state(bulk.job_id), QUEUED)  # still waiting behind INTERACTIVE
        self.assertTrue(c.cancel(inter.job_id).cancelled)
        self.assertEqual(c.finish(bulk.job_id).state, DONE)
        w.join()


class WatchTest(ServiceTestCase):
    def test_replay_modes(self):
        c = self.up()
        r = c.compile(MLP, ["sm_89", "gfx1100"])
        full = c.events(r.job_id, from_start=True)
        n = len(full)
        self.assertEqual(full[-1].terminal.state, DONE)
        # Current status of a finished job: latest Queued/Started, results, Terminal.
        cur = c.events(r.job_id)
        self.assertEqual(kinds(cur), ["started", "target_done", "target_done", "terminal"])
        self.assertEqual([e.sequence for e in cur],
                         [e.sequence for e in full if kind(e) in ("started", "target_done", "terminal")])
        # Resume after a sequence number; it overrides from_start.
        for after in (1, n - 2, n - 1):
            got = c.events(r.job_id, after_sequence=after, from_start=True)
            self.assertEqual([e.sequence for e in got], list(range(after + 1, n + 1)))
            self.assertEqual(got, full[after:])
        self.assertStatus(grpc.StatusCode.NOT_FOUND, c.events, "j-" + "f" * 24)
        self.assertStatus(grpc.StatusCode.INVALID_ARGUMENT, c.events, "")

        # A running job: current status starts at Started (not Queued); resume live.
        h, started = self.start_hang("w1")
        cur = Watch(c, h.job_id)
        cur.wait_kind("started")
        resumed = Watch(c, h.job_id, after_sequence=started.sequence)
        time.sleep(0.3 * SLOW)
        # Progress may follow Started at any time (the worker reports "parse" before
        # the hang): it is live news, not part of the replayed status.
        self.assertEqual([k for k in kinds(cur.events) if k != "progress"], ["started"])
        self.assertTrue(all(e.sequence > started.sequence for e in resumed.events))
        c.cancel(h.job_id)
        for w in (cur, resumed):
            w.join()
            self.assertEqual(w.code, grpc.StatusCode.OK, w.details)
            self.assertEqual(w.events[-1].terminal.state, CANCELLED)
        self.assertEqual([k for k in kinds(cur.events) if k != "progress"], ["started", "target_failed", "terminal"])
        seqs = [e.sequence for e in resumed.events]
        self.assertEqual(seqs, list(range(started.sequence + 1, seqs[-1] + 1)))

    def test_after_sequence_at_the_end_of_a_finished_job_ends(self):
        # Resuming after the Terminal event (a client that got it but lost the OK):
        # the stream must end (with the Terminal event, the last of every stream),
        # not wait forever.
        c = self.up()
        r = c.compile(MLP)
        n = len(c.events(r.job_id, from_start=True))
        for after in (n, n + 5):
            got = c.events(r.job_id, after_sequence=after, timeout=5)
            self.assertEqual(kinds(got), ["terminal"])
            self.assertEqual(got[0].sequence, n)

    def test_many_watchers_and_one_that_leaves(self):
        c = self.up()
        h, _ = self.start_hang("many")
        watchers = [Watch(self.new_client(), h.job_id, from_start=bool(i % 2)) for i in range(12)]
        leaver = Watch(c, h.job_id, from_start=True)
        for w in watchers + [leaver]:
            w.wait_kind("started")
        leaver.cancel()
        leaver.join()
        self.assertEqual(leaver.code, grpc.StatusCode.CANCELLED)
        time.sleep(0.3 * SLOW)
        self.assertEqual(c.state(h.job_id), RUNNING)
        self.assertEqual(c.jobs().workers_busy, 1)
        self.assertTrue(c.cancel(h.job_id).cancelled)
        for w in watchers:
            w.join()
            self.assertEqual(w.code, grpc.StatusCode.OK, w.details)
            self.assertEqual(w.events[-1].terminal.state, CANCELLED)


class IdempotencyTest(ServiceTestCase):
    def test_request_id(self):
        c = self.up("--job-retention", "90s")
        self.assertEqual(c.info().job_retention_ms, 90000)  # the window request_ids live in
        r1 = c.compile(MLP, ["sm_89", "gfx950"], request_id="req-1")
        self.assertEqual(c.finish(r1.job_id).state, DONE)
        before = c.jobs()
        r2 = c.compile(MLP, ["sm_89", "gfx950"], request_id="req-1")
        self.assertEqual(r2, r1)  # the original answer, QUEUED state included
        after = c.jobs()
        self.assertEqual((after.submitted, after.targets_compiled, after.merged_requests),
                         (before.submitted, before.targets_compiled, before.merged_requests))
        self.assertStatus(grpc.StatusCode.ALREADY_EXISTS, c.compile, MLP, ["sm_89"], request_id="req-1",
                          words=("req-1", r1.job_id))
        self.assertStatus(grpc.StatusCode.ALREADY_EXISTS, c.compile, variant("x"), ["sm_89", "gfx950"],
                          request_id="req-1")
        # Another id is another job (here all cached).
        r3 = c.compile(MLP, ["sm_89", "gfx950"], request_id="req-2")
        self.assertNotEqual(r3.job_id, r1.job_id)
        self.assertEqual(r3.state, DONE)


class LifecycleTest(ServiceTestCase):
    def test_sigterm_with_a_job_running(self):
        c = self.up("--drain-timeout", "2s")
        h, started = self.start_hang("term")
        watchers = [Watch(self.new_client(), h.job_id, from_start=True) for _ in range(3)]
        for w in watchers:
            w.wait_kind("started")
        workers = worker_pids(self.kilnd.proc.pid)
        self.assertEqual(len(workers), 2, workers)
        busy = worker_pid(self.kilnd, started.started.worker)
        self.assertIn(busy, workers)

        t0 = time.monotonic()
        self.kilnd.proc.send_signal(signal.SIGTERM)
        rc = self.kilnd.wait(timeout=30 * SLOW)
        took = time.monotonic() - t0
        self.assertEqual(rc, 0, self.kilnd.log()[-10000:])
        self.assertLess(took, 2 + 3 * SLOW)
        for w in watchers:
            w.join(timeout=10)
            self.assertNotIn("terminal", kinds(w.events))
            self.assertEqual(w.code, grpc.StatusCode.UNAVAILABLE, w.details)
            self.assertIn("after_sequence", w.details)
        # No worker, nor anything in a worker's process group, outlives kilnd.
        wait_for(lambda: not live_in_groups(set(workers)), 5, "worker process groups to be gone")

        # A kilnd on the same state directory has the job (kept in the job store) and
        # runs it again; resuming after the last event seen works there.
        last = max(w.events[-1].sequence for w in watchers)
        c = self.up(state_dir=self.kilnd.state_dir)
        resumed = Watch(c, h.job_id, after_sequence=last)
        self.assertEqual(c.state(h.job_id), RUNNING)
        self.assertTrue(c.cancel(h.job_id).cancelled)
        resumed.join()
        self.assertEqual(resumed.code, grpc.StatusCode.OK, resumed.details)
        self.assertEqual(resumed.events[-1].terminal.state, CANCELLED)


class ExternalCompilerTest(ServiceTestCase):
    def test_external_kilnc(self):
        # First the built-in compiler fills the cache...
        c = self.up(workers=1, hooks=False)
        builtin = self.assertCompiles()["sm_89"]
        state_dir = self.kilnd.state_dir
        c.close()
        self.assertEqual(self.kilnd.stop(), 0, self.kilnd.log()[-10000:])

        # ... then kilnc, as an external iree-compile, on the same state directory.
        c = self.up("--external-compiler", KILNC, workers=1, hooks=False, state_dir=state_dir)
        info = c.info()
        self.assertIn("sm_89", [t.id for t in info.targets])
        r = c.compile(MLP, ["sm_89", "gfx950"], name="mlp.mlir")
        self.assertEqual([t.canonical_target for t in r.targets], ["sm_89", "gfx950"])
        # Another compiler identity is another cache key: nothing is reused.
        self.assertFalse(r.targets[0].cached)
        self.assertNotEqual(r.targets[0].cache_key, builtin.cache_key)
        evs = c.events(r.job_id, from_start=True)
        self.assertEqual(evs[-1].terminal.state, DONE, evs)
        done = {e.target_done.target: e.target_done for e in evs if kind(e) == "target_done"}
        self.assertEqual(set(done), {"sm_89", "gfx950"})
        self.assertFalse(done["sm_89"].cache_hit)
        meta, data = c.fetch(done["sm_89"].artifact_digest)
        self.assertEqual((data[:4], data[72:76]), (b"PK\x03\x04", b"IREE"))
        self.assertEqual(hashlib.sha256(data).hexdigest(), meta.digest)
        # kilnc writes the same bytes as the built-in compiler.
        self.assertEqual(meta.digest, builtin.artifact_digest)
        self.assertEqual(meta.cache_key, done["sm_89"].cache_key)
        self.assertEqual(meta.provenance.source_digest, normal_digest(MLP))  # the cache key's part
        self.assertIn("kilnc", meta.provenance.compiler.name)
        # Again: a hit under the external compiler's key.
        r2 = c.compile(MLP, ["sm_89"])
        self.assertTrue(r2.targets[0].cached)
        self.assertEqual(r2.targets[0].cache_key, done["sm_89"].cache_key)

    def test_server_info_names_the_external_compiler(self):
        # kiln.proto: GetServerInfoResponse.compiler is "the compiler that new
        # artifacts come from"; CompilerIdentity.name "the external driver's name".
        # The identity is known once the first worker has said hello.
        self.skip_under_valgrind()
        c = self.up("--external-compiler", KILNC, workers=1, hooks=False)
        deadline = time.monotonic() + 20
        while c.info().compiler.name == "kiln-mlir" and time.monotonic() < deadline:
            time.sleep(0.1)
        info = c.info()
        self.assertEqual(info.compiler.name, "external")
        self.assertIn(os.path.basename(KILNC), info.compiler.version)


if __name__ == "__main__":
    unittest.main()
