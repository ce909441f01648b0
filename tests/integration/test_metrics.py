"""kilnd's operator endpoints on a real kilnd: /metrics scraped after real compiles
and checked with Debian's promtool, /healthz and /readyz (also while starting and
while draining), 404/405, metrics-listen off and in use; sd_notify READY=1 and
STOPPING=1 on a datagram socket the test binds; request ids from the CLI's error
to kilnd's log and back in kiln-request-id metadata."""
import os
import re
import shutil
import signal
import socket
import subprocess
import tempfile
import threading
import time
import unittest
import urllib.error
import urllib.request

import grpc

from kilnharness import (EXAMPLES, WRAPPED, SANITIZED, Kilnd, KilnTestCase, free_tcp_port, run_kiln,
                         run_kilnd_once)
from kiln.v1 import kiln_pb2  # noqa: E402  (path set up by kilnharness)

KILN = "/kiln.v1.Kiln/"
MLP = os.path.join(EXAMPLES, "mlp.mlir")
SLOW = 10 if (WRAPPED or SANITIZED) else 1


def http(addr, path, method="GET", timeout=30):
    """(status, body) of one request."""
    req = urllib.request.Request(f"http://{addr}{path}", method=method)
    try:
        with urllib.request.urlopen(req, timeout=timeout) as r:
            return r.status, r.read().decode(), r.headers.get("Content-Type")
    except urllib.error.HTTPError as e:
        return e.code, e.read().decode(), e.headers.get("Content-Type")


def parse(text):
    """{(name, frozenset(labels)): value} of an exposition."""
    out = {}
    for line in text.splitlines():
        if not line or line.startswith("#"):
            continue
        m = re.match(r'^([a-zA-Z_:][a-zA-Z0-9_:]*)(\{(.*)\})? (\S+)$', line)
        assert m, f"bad sample line: {line!r}"
        labels = frozenset(re.findall(r'(\w+)="((?:[^"\\]|\\.)*)"', m.group(3) or ""))
        out[(m.group(1), labels)] = float(m.group(4))
    return out


def value(samples, name, **labels):
    return samples.get((name, frozenset(labels.items())), 0.0)


def wait_for(pred, what, timeout=30 * SLOW):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        got = pred()
        if got:
            return got
        time.sleep(0.05)
    raise AssertionError(f"timed out waiting for {what}")


class MetricsKilnd(Kilnd):
    def __init__(self, *args, **kw):
        super().__init__("--metrics-listen", "127.0.0.1:0", "--workers", "1", *args, **kw)

    @property
    def metrics_addr(self):
        with open(os.path.join(self.state_dir, "kilnd.metrics-addr")) as f:
            return f.read().strip()

    def ready(self):
        return http(self.metrics_addr, "/readyz")[0] == 200


class MetricsTest(KilnTestCase):
    def setUp(self):
        self.tmp = tempfile.TemporaryDirectory(prefix="kiln-metrics-")
        self.dir = self.tmp.name

    def tearDown(self):
        self.tmp.cleanup()

    def test_scrape_after_compiles(self):
        with MetricsKilnd() as d:
            wait_for(d.ready, "readyz 200")
            self.assertEqual(http(d.metrics_addr, "/healthz")[:2], (200, "ok\n"))
            status, body, ctype = http(d.metrics_addr, "/metrics")
            self.assertEqual(status, 200)
            self.assertEqual(ctype, "text/plain; version=0.0.4; charset=utf-8")
            before = parse(body)
            self.assertEqual(value(before, "kiln_ready"), 1)
            self.assertEqual(value(before, "kiln_workers_ready"), 1)

            out = os.path.join(self.dir, "out")
            for _ in range(2):  # the second is a cache hit
                r = run_kiln("compile", MLP, "--target", "sm_89", "-o", out, addr=d.addr, timeout=300)
                self.assertEqual(r.returncode, 0, r.stderr)
            vmfb = os.path.join(self.dir, "fetched.vmfb")
            r = run_kiln("fetch", "--source", MLP, "--target", "sm_89", "-o", vmfb, addr=d.addr, timeout=120)
            self.assertEqual(r.returncode, 0, r.stderr)
            size = os.path.getsize(vmfb)

            text = http(d.metrics_addr, "/metrics")[1]
            m = parse(text)
            self.assertEqual(value(m, "kiln_jobs_finished_total", state="done"), 2)
            self.assertEqual(value(m, "kiln_jobs_submitted_total"), 2)
            self.assertGreaterEqual(value(m, "kiln_cache_hits_total"), 1)
            self.assertGreaterEqual(value(m, "kiln_cache_misses_total"), 1)
            self.assertEqual(value(m, "kiln_targets_compiled_total"), 1)
            self.assertEqual(value(m, "kiln_compile_duration_seconds_count", target="sm_89"), 1)
            self.assertEqual(value(m, "kiln_compile_duration_seconds_bucket", target="sm_89", le="+Inf"), 1)
            self.assertGreater(value(m, "kiln_compile_duration_seconds_sum", target="sm_89"), 0)
            self.assertGreaterEqual(value(m, "kiln_cache_served_bytes_total"), size)
            self.assertGreater(value(m, "kiln_cache_stored_bytes", kind="artifact"), 0)
            self.assertGreater(value(m, "kiln_cache_stored_bytes", kind="source"), 0)
            self.assertEqual(value(m, "kiln_cache_entries", kind="artifact"), 1)
            self.assertEqual(value(m, "kiln_jobs", state="queued"), 0)
            self.assertEqual(value(m, "kiln_queue_depth", priority="interactive"), 0)
            self.assertEqual(value(m, "kiln_worker_restarts_total"), 0)
            self.assertEqual(value(m, "kiln_workers"), 1)
            self.assertGreaterEqual(value(m, "kiln_grpc_calls_total", method=KILN + "Compile", code="OK"), 2)
            self.assertGreaterEqual(value(m, "kiln_grpc_calls_total", method=KILN + "GetArtifact", code="OK"), 1)
            self.assertGreater(value(m, "kiln_uptime_seconds"), 0)
            self.assertRegex(text, r'(?m)^kiln_build_info\{version="[^"]+",compiler="kiln-mlir [^"]+"\} 1$')
            # Every family has HELP and TYPE; counters end in _total.
            for fam, typ in re.findall(r"(?m)^# TYPE (\S+) (\S+)$", text):
                self.assertIn(f"# HELP {fam} ", text)
                if typ == "counter":
                    self.assertTrue(fam.endswith("_total"), fam)

            promtool = shutil.which("promtool")
            if not promtool:
                self.skipTest("promtool not installed (Debian package prometheus; deploy/deps.sh installs it)")
            r = subprocess.run([promtool, "check", "metrics"], input=text, capture_output=True, text=True,
                               timeout=60)
            self.assertEqual(r.returncode, 0, r.stdout + r.stderr)
            self.assertCleanStop(d)

    def test_not_found_and_method_not_allowed(self):
        with MetricsKilnd() as d:
            wait_for(d.ready, "readyz 200")
            self.assertEqual(http(d.metrics_addr, "/nope")[0], 404)
            self.assertEqual(http(d.metrics_addr, "/metrics/x")[0], 404)
            self.assertEqual(http(d.metrics_addr, "/metrics", method="POST")[0], 405)
            self.assertEqual(http(d.metrics_addr, "/healthz", method="DELETE")[0], 405)
            self.assertEqual(http(d.metrics_addr, "/readyz", method="HEAD")[0], 200)
            self.assertCleanStop(d)

    def test_readyz_while_starting_and_draining(self):
        # A worker that never says Hello: kilnd listens, but is not ready.
        mute = os.path.join(self.dir, "mute-worker")
        with open(mute, "w") as f:
            f.write("#!/bin/sh\nexec sleep 60\n")
        os.chmod(mute, 0o755)
        with MetricsKilnd("--worker-path", mute) as d:
            status, body, _ = http(d.metrics_addr, "/readyz")
            self.assertEqual((status, body), (503, "no compile worker is ready yet\n"))
            self.assertEqual(http(d.metrics_addr, "/healthz")[0], 200)
            text = http(d.metrics_addr, "/metrics")[1]
            self.assertEqual(value(parse(text), "kiln_ready"), 0)
            # The compiler comes from a worker's Hello: unknown until then.
            self.assertRegex(text, r'(?m)^kiln_build_info\{version="0\.1\.0",compiler=""\} 1$')
            self.assertCleanStop(d)

        with MetricsKilnd("--drain-timeout", f"{5 * SLOW}s") as d:
            wait_for(d.ready, "readyz 200")
            channel = grpc.insecure_channel(d.addr)
            put = channel.stream_unary(KILN + "PutSource", request_serializer=lambda m: m.SerializeToString(),
                                       response_deserializer=kiln_pb2.PutSourceResponse.FromString)
            src = b"module {}\n" * 100000
            release = threading.Event()

            def stalls():  # an upload whose writer stopped: it holds the drain open
                import hashlib
                yield kiln_pb2.PutSourceChunk(metadata=kiln_pb2.SourceMetadata(
                    digest=hashlib.sha256(src).hexdigest(), size_bytes=len(src), name="m.mlir"))
                yield kiln_pb2.PutSourceChunk(data=src[:65536])
                release.wait(60)

            fut = put.future(stalls(), timeout=120)
            try:
                wait_for(lambda: "PutSource" in http(d.metrics_addr, "/metrics")[1]
                         or os.listdir(os.path.join(d.state_dir, "cache", "tmp")), "the upload to start")
                d.proc.send_signal(signal.SIGTERM)
                wait_for(lambda: "event=draining" in d.log(), "the drain to start")
                status, body, _ = http(d.metrics_addr, "/readyz")
                self.assertEqual(status, 503)
                self.assertTrue(body.startswith("draining"), body)
                self.assertEqual(value(parse(http(d.metrics_addr, "/metrics")[1]), "kiln_draining"), 1)
                self.assertEqual(http(d.metrics_addr, "/healthz")[0], 200)
            finally:
                release.set()
            with self.assertRaises(grpc.RpcError):
                fut.result(timeout=60)
            channel.close()
            self.assertEqual(d.wait(60), 0, d.log())

    def test_metrics_listen_off_and_in_use(self):
        with Kilnd("--metrics-listen", "off") as d:
            self.assertFalse(os.path.exists(os.path.join(d.state_dir, "kilnd.metrics-addr")))
            self.assertNotIn("metrics_addr=", d.log())
            self.assertCleanStop(d)

        with socket.socket() as taken:
            taken.bind(("127.0.0.1", 0))
            taken.listen(1)
            port = taken.getsockname()[1]
            r = run_kilnd_once("--listen", "127.0.0.1:0", "--metrics-listen", f"127.0.0.1:{port}",
                               "--state-dir", os.path.join(self.dir, "s"), "--workers", "1", timeout=120)
            self.assertEqual(r.returncode, 1, r.stderr)
            self.assertIn(f"metrics-listen 127.0.0.1:{port}: address already in use", r.stderr)
            self.assertFalse(os.path.exists(os.path.join(self.dir, "s", "kilnd.addr")))

        r = run_kilnd_once("--metrics-listen", "unix:/tmp/x.sock", "--listen", "127.0.0.1:0",
                           "--state-dir", os.path.join(self.dir, "s2"), "--workers", "1", timeout=120)
        self.assertEqual(r.returncode, 1, r.stderr)
        self.assertIn("unix socket is not supported", r.stderr)

        r = run_kilnd_once("--print-config", env={"KILND_METRICS_LISTEN": "127.0.0.1:9999"})
        self.assertIn('metrics-listen = "127.0.0.1:9999"', r.stdout)
        r = run_kilnd_once("--help")
        self.assertIn("--metrics-listen", r.stdout)

    def test_sd_notify(self):
        path = os.path.join(self.dir, "notify.sock")
        with socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM) as sock:
            sock.bind(path)
            sock.settimeout(60 * SLOW)
            with MetricsKilnd(env={"NOTIFY_SOCKET": path}) as d:
                got = []
                while not any("READY=1" in m for m in got):
                    got.append(sock.recv(4096).decode())
                ready = next(m for m in got if "READY=1" in m)
                self.assertIn(f"STATUS=serving on {d.addr}", ready)
                self.assertTrue(d.ready())  # the same condition as /readyz
                d.proc.send_signal(signal.SIGTERM)
                while True:
                    m = sock.recv(4096).decode()
                    if "STOPPING=1" in m:
                        break
                self.assertEqual(d.wait(60), 0, d.log())

    def test_request_id(self):
        with MetricsKilnd() as d:
            r = run_kiln("status", "j-000000000000000000000000", addr=d.addr)
            self.assertNotEqual(r.returncode, 0)
            m = re.search(r"(?m)^kiln: request id: (\S+) \(search kilnd's log for it\)$", r.stderr)
            self.assertTrue(m, r.stderr)
            rid = m.group(1)
            self.assertRegex(rid, r"^c-[0-9a-f]{12}-\d+$")
            wait_for(lambda: f"request_id={rid} " in d.log(), "the request id in kilnd's log")
            line = next(l for l in d.log().splitlines() if f"request_id={rid} " in l)
            self.assertIn("event=rpc", line)
            self.assertIn("code=NOT_FOUND", line)
            # Success prints no id.
            r = run_kiln("info", addr=d.addr)
            self.assertEqual(r.returncode, 0)
            self.assertNotIn("request id", r.stderr)

            # A client's valid id comes back as kiln-request-id; an invalid one is replaced.
            with grpc.insecure_channel(d.addr) as channel:
                info = channel.unary_unary(KILN + "GetServerInfo",
                                           request_serializer=lambda m: m.SerializeToString(),
                                           response_deserializer=kiln_pb2.GetServerInfoResponse.FromString)
                _, call = info.with_call(kiln_pb2.GetServerInfoRequest(), metadata=(("x-request-id", "ci-42/a"),),
                                         timeout=30)
                self.assertIn(("kiln-request-id", "ci-42/a"), call.trailing_metadata())
                self.assertIn(("kiln-request-id", "ci-42/a"), call.initial_metadata())
                _, call = info.with_call(kiln_pb2.GetServerInfoRequest(),
                                         metadata=(("x-request-id", "x" * 129),), timeout=30)
                ours = dict(call.trailing_metadata())["kiln-request-id"]
                self.assertRegex(ours, r"^k-[0-9a-f]{12}-\d+$")
            wait_for(lambda: "request_id=ci-42/a " in d.log(), "the client's id in kilnd's log")
            self.assertCleanStop(d)


if __name__ == "__main__":
    unittest.main()
