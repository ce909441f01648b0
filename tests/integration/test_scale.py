"""Scale-out on an existing proxy (issue 8): three real kilnd behind Debian's HAProxy
on loopback, run with the checked-in deploy/haproxy/haproxy.cfg (only its servers
block is replaced by these kilnd). A Python grpcio client sends the
kiln-source-digest header (the SHA-256 of the model) on every call about one model:

- the same model lands on the same kilnd (its second Compile is a cache hit, and
  exactly one kilnd holds its artifact), and different models spread over the nodes;
- WatchJob and GetArtifact by digest, sent with the same header, reach the kilnd
  that has the job and the artifact; calls without the header hash on the client's
  IP, so they all meet one kilnd;
- after one kilnd is killed (SIGKILL) its models move to the others and still
  compile (a miss on the new node, then hits), and the other models keep their node.

The kiln CLI sends the header on every call about a model (compile, explain,
fetch/find --source): test_kiln_cli_routes_by_source_digest drives it through the
router. Skipped when haproxy is not installed (deploy/deps.sh installs it)."""
import csv
import hashlib
import io
import os
import re
import shutil
import signal
import socket
import subprocess
import tempfile
import time
import unittest

import grpc

from kilnharness import (EXAMPLES, START_TIMEOUT, WRAPPED, Kilnd, distinct, KilnTestCase, clean_env, free_tcp_port,
                         run_kiln)
from kiln.v1 import kiln_pb2  # noqa: E402  (path set up by kilnharness)

KILN = "/kiln.v1.Kiln/"
HAPROXY = shutil.which("haproxy") or (os.path.exists("/usr/sbin/haproxy") and "/usr/sbin/haproxy") or None
ROUTER_CFG = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", "..", "deploy", "haproxy",
                                          "haproxy.cfg"))
# The Kubernetes router's config (deploy/k8s/router.yaml): the same file with a
# servers block naming the StatefulSet's replicas. deploy/container/smoke.sh runs
# it in the router image over kilnd containers under those names.
K8S_ROUTER_CFG = os.path.join(os.path.dirname(os.path.dirname(ROUTER_CFG)), "k8s", "haproxy.cfg")
MLP = os.path.join(EXAMPLES, "mlp.mlir")
TARGET = "sm_89"
# Under valgrind kilnd answers (and becomes ready) several times slower.
SLOW = 10 if WRAPPED else 1
CALL_TIMEOUT = 30 * SLOW
SERVERS_BLOCK = re.compile(r"^([ \t]*)# kiln-servers-begin.*?^[ \t]*# kiln-servers-end[^\n]*\n", re.S | re.M)


def model(tag, i):
    """A distinct model (its own cache key) with the same compile work as mlp.mlir."""
    with open(MLP, "rb") as f:
        return distinct(f.read(), f"{tag}_{i}")


def digest_md(source):
    """The routing header for calls about `source`."""
    return (("kiln-source-digest", hashlib.sha256(source).hexdigest()),)


def render_router_config(text, servers):
    """The checked-in config with its servers block replaced by `servers`:
    [(id, "HOST:GRPC_PORT", http_port)]. Everything else stays as shipped."""
    m = SERVERS_BLOCK.search(text)
    assert m, f"{ROUTER_CFG} has no '# kiln-servers-begin' ... '# kiln-servers-end' block"
    indent = m.group(1)
    lines = [f"{indent}# kiln-servers-begin (test_scale)\n"]
    lines += [f"{indent}server kilnd{sid} {addr} id {sid} port {port}\n" for sid, addr, port in servers]
    lines.append(f"{indent}# kiln-servers-end\n")
    return text[:m.start()] + "".join(lines) + text[m.end():]


class Router:
    """HAProxy running the checked-in config over the given kilnd, on loopback."""

    def __init__(self, nodes):
        self.tmp = tempfile.TemporaryDirectory(prefix="kiln-router-")
        self.cfg = os.path.join(self.tmp.name, "haproxy.cfg")
        self.admin_path = os.path.join(self.tmp.name, "admin.sock")
        self.log_path = os.path.join(self.tmp.name, "haproxy.log")
        self.addr = f"127.0.0.1:{free_tcp_port()}"
        with open(ROUTER_CFG) as f:
            shipped = f.read()
        with open(self.cfg, "w") as f:
            f.write(render_router_config(shipped, [(n.sid, n.addr, n.metrics_port) for n in nodes]))
        self.proc = None

    def start(self):
        env = clean_env(KILN_ROUTER_LISTEN=self.addr, KILN_ROUTER_ADMIN=self.admin_path,
                        KILN_ROUTER_UNPRIVILEGED="1")
        check = subprocess.run([HAPROXY, "-c", "-f", self.cfg], capture_output=True, text=True, env=env)
        if check.returncode != 0:
            raise AssertionError(f"haproxy -c refused the rendered config:\n{check.stdout}{check.stderr}")
        self.log_file = open(self.log_path, "wb")
        # -db: stay in the foreground (no daemon, no master process).
        self.proc = subprocess.Popen([HAPROXY, "-db", "-f", self.cfg], stdout=self.log_file,
                                     stderr=subprocess.STDOUT, env=env)
        deadline = time.monotonic() + 10
        while True:
            if self.proc.poll() is not None:
                raise AssertionError(f"haproxy exited with {self.proc.returncode}:\n{self.log()}")
            try:
                self.admin("show info")
                return self
            except OSError:
                if time.monotonic() > deadline:
                    raise AssertionError(f"haproxy's admin socket did not answer:\n{self.log()}")
                time.sleep(0.05)

    def admin(self, command):
        """One command on HAProxy's runtime API; its answer."""
        with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as s:
            s.settimeout(5)
            s.connect(self.admin_path)
            s.sendall(command.encode() + b"\n")
            chunks = []
            while True:
                b = s.recv(65536)
                if not b:
                    break
                chunks.append(b)
        return b"".join(chunks).decode()

    def server_states(self):
        """{server name: its state} in the kilnd backend: "UP" once its last /readyz
        check passed (HAProxy starts servers UP before any check, so UP alone proves
        nothing), "DOWN" after `fall` failed checks, else HAProxy's status word."""
        text = self.admin("show stat").lstrip("# ")
        states = {}
        for row in csv.DictReader(io.StringIO(text)):
            if row["pxname"] != "kilnd" or row["svname"] in ("BACKEND", "FRONTEND"):
                continue
            status = row["status"].split()[0]
            if status == "UP" and row["check_status"] != "L7OK":
                status = "UP, not checked yet"
            states[row["svname"]] = status
        return states

    def wait_states(self, want, timeout):
        """Waits until every server named in `want` has that state."""
        deadline = time.monotonic() + timeout
        while True:
            states = self.server_states()
            if all(states.get(name) == state for name, state in want.items()):
                return
            if time.monotonic() > deadline:
                raise AssertionError(f"router's servers are {states}, expected {want}:\n{self.log()}")
            time.sleep(0.1)

    def log(self):
        try:
            with open(self.log_path, "rb") as f:
                return f.read().decode(errors="replace")[-6000:]
        except OSError:
            return ""

    def stop(self):
        if self.proc and self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        if self.proc:
            self.log_file.close()
        self.tmp.cleanup()


@unittest.skipUnless(HAPROXY, "haproxy is not installed (deploy/deps.sh installs Debian's haproxy)")
class ConfigTest(unittest.TestCase):
    """The shipped file as a site installs it, and what the tests change in it."""

    def test_shipped_config_is_valid(self):
        for extra in ({}, {"KILN_ROUTER_UNPRIVILEGED": "1"}):
            with self.subTest(env=extra):
                r = subprocess.run([HAPROXY, "-c", "-f", ROUTER_CFG], capture_output=True, text=True,
                                   env=clean_env(**extra))
                self.assertEqual(r.returncode, 0, r.stdout + r.stderr)

    def test_k8s_router_config_differs_only_in_its_servers(self):
        with open(ROUTER_CFG) as f:
            shipped = f.read()
        with open(K8S_ROUTER_CFG) as f:
            k8s = f.read()
        self.assertEqual(SERVERS_BLOCK.sub("", k8s), SERVERS_BLOCK.sub("", shipped),
                         "deploy/k8s/haproxy.cfg must be deploy/haproxy/haproxy.cfg with its own servers "
                         "block: copy the edited file over it, keeping that block")
        servers = [l for l in SERVERS_BLOCK.search(k8s).group(0).splitlines() if l.strip().startswith("server ")]
        self.assertGreaterEqual(len(servers), 3)
        for line in servers:
            self.assertRegex(line, r"\bid \d+\b", "every server has a fixed id (its ring position)")

    def test_k8s_router_config_is_valid(self):
        # As the router Deployment runs it. The replicas' names do not resolve here:
        # HAProxy must start with them in maintenance (init-addr none), not refuse.
        with tempfile.TemporaryDirectory(prefix="kiln-router-") as tmp:
            env = clean_env(POD_NAMESPACE="kiln", KILN_ROUTER_UNPRIVILEGED="1", KILN_ROUTER_HEALTH=":7479",
                            KILN_ROUTER_ADMIN=os.path.join(tmp, "admin.sock"))
            r = subprocess.run([HAPROXY, "-c", "-f", K8S_ROUTER_CFG], capture_output=True, text=True,
                               env=env, timeout=120)
        self.assertEqual(r.returncode, 0, r.stdout + r.stderr)
        self.assertNotIn("ALERT", r.stdout + r.stderr)

    def test_tests_replace_only_the_servers_block(self):
        with open(ROUTER_CFG) as f:
            shipped = f.read()
        rendered = render_router_config(shipped, [(7, "127.0.0.1:1", 2)])
        self.assertIn("    server kilnd7 127.0.0.1:1 id 7 port 2\n", rendered)
        self.assertEqual(SERVERS_BLOCK.sub("", rendered), SERVERS_BLOCK.sub("", shipped))
        for line in SERVERS_BLOCK.search(shipped).group(0).splitlines():
            if line.strip().startswith("server "):
                self.assertRegex(line, r"\bid \d+\b", "every shipped server has a fixed id (its ring position)")


class Node:
    """One kilnd of the fleet: its server id in the router, its own channel."""

    def __init__(self, sid):
        self.sid = sid
        self.name = f"kilnd{sid}"
        self.kilnd = Kilnd("--workers", "1", "--metrics-listen", "127.0.0.1:0")
        self.channel = None

    @property
    def addr(self):
        return self.kilnd.addr

    def finish_start(self):
        """Waits for STATE/kilnd.addr and STATE/kilnd.metrics-addr (port 0 for both)."""
        k = self.kilnd
        deadline = time.monotonic() + START_TIMEOUT
        paths = [os.path.join(k.state_dir, n) for n in ("kilnd.addr", "kilnd.metrics-addr")]
        while True:
            if k.proc.poll() is not None:
                raise AssertionError(f"{self.name} exited with {k.proc.returncode}:\n{k.log()}")
            texts = []
            for p in paths:
                try:
                    with open(p) as f:
                        texts.append(f.read())
                except OSError:
                    texts.append("")
            if all(t.endswith("\n") for t in texts):
                k.addr = texts[0].strip()
                self.metrics_port = int(texts[1].strip().rsplit(":", 1)[1])
                self.channel = grpc.insecure_channel(k.addr)
                return
            if time.monotonic() > deadline:
                raise AssertionError(f"{self.name} did not publish its addresses:\n{k.log()}")
            time.sleep(0.02)


def unary(channel, method, request, response_cls, metadata=None, timeout=CALL_TIMEOUT):
    return channel.unary_unary(KILN + method, request_serializer=lambda m: m.SerializeToString(),
                               response_deserializer=response_cls.FromString)(
        request, metadata=metadata, timeout=timeout)


def server_stream(channel, method, request, response_cls, metadata=None, timeout=CALL_TIMEOUT):
    return channel.unary_stream(KILN + method, request_serializer=lambda m: m.SerializeToString(),
                                response_deserializer=response_cls.FromString)(
        request, metadata=metadata, timeout=timeout)


class Fleet(KilnTestCase):
    """Three kilnd (each its own state, one worker) and HAProxy in front of them."""

    @classmethod
    def setUpClass(cls):
        if not HAPROXY:
            raise unittest.SkipTest("haproxy is not installed (deploy/deps.sh installs Debian's haproxy)")
        cls.nodes = [Node(sid) for sid in (1, 2, 3)]
        cls.router = None
        try:
            for n in cls.nodes:  # started together: under valgrind each takes seconds
                n.kilnd.start(expect_ready=False)
            for n in cls.nodes:
                n.finish_start()
            cls.router = Router(cls.nodes).start()
            # Ready means a compile worker answered: wait for the health checks.
            cls.router.wait_states({n.name: "UP" for n in cls.nodes}, START_TIMEOUT + 10)
            cls.channel = grpc.insecure_channel(cls.router.addr)
        except BaseException:
            cls.tearDownClass()
            raise

    @classmethod
    def tearDownClass(cls):
        if getattr(cls, "channel", None):
            cls.channel.close()
        if cls.router:
            cls.router.stop()
        failures = []
        for n in cls.nodes:
            if n.channel:
                n.channel.close()
            if n.kilnd.proc is None:
                continue
            if n.kilnd.alive():
                rc = n.kilnd.stop()
                if rc != 0:
                    failures.append(f"{n.name} exited {rc}:\n{n.kilnd.log()}")
            n.kilnd.__exit__()
        assert not failures, "\n".join(failures)

    # ---- calls through the router, with the routing header ----

    def compile(self, source, metadata="digest"):
        md = digest_md(source) if metadata == "digest" else metadata
        r = unary(self.channel, "Compile", kiln_pb2.CompileRequest(source=source, targets=[TARGET]),
                  kiln_pb2.CompileResponse, metadata=md)
        self.assertEqual(r.source_digest, hashlib.sha256(source).hexdigest(),
                         "the routing header is the SHA-256 of the source, as kilnd computes it")
        return r

    def watch(self, source, job_id):
        """The job's events through the router, to its Terminal."""
        events = list(server_stream(self.channel, "WatchJob", kiln_pb2.WatchJobRequest(job_id=job_id,
                                                                                        from_start=True),
                                    kiln_pb2.JobEvent, metadata=digest_md(source)))
        self.assertEqual(events[-1].WhichOneof("event"), "terminal", events)
        return events

    def compile_done(self, source):
        """Compile, then watch to DONE; (response, artifact digest)."""
        r = self.compile(source)
        events = self.watch(source, r.job_id)
        self.assertEqual(events[-1].terminal.state, kiln_pb2.JOB_STATE_DONE, events)
        done = [e.target_done for e in events if e.WhichOneof("event") == "target_done"]
        digest = r.targets[0].artifact_digest if r.targets[0].cached else done[0].artifact_digest
        return r, digest

    # ---- each node asked directly ----

    def live_nodes(self):
        return [n for n in self.nodes if n.kilnd.alive()]

    def holders(self, source):
        """The live nodes whose cache holds an artifact of `source`."""
        d = hashlib.sha256(source).hexdigest()
        return [n for n in self.live_nodes()
                if unary(n.channel, "FindArtifacts", kiln_pb2.FindArtifactsRequest(source_digest=d),
                         kiln_pb2.FindArtifactsResponse).artifacts]

    def owner(self, source):
        held = self.holders(source)
        self.assertEqual(len(held), 1, f"{len(held)} nodes hold the model, expected exactly one: "
                                       f"{[n.name for n in held]}")
        return held[0]

    def stats(self):
        """{node name: GetStatsResponse} of the live nodes."""
        return {n.name: unary(n.channel, "GetStats", kiln_pb2.GetStatsRequest(), kiln_pb2.GetStatsResponse)
                for n in self.live_nodes()}


class RoutingTest(Fleet):
    def test_same_model_same_node(self):
        models = [model("affinity", i) for i in range(8)]
        before = self.stats()
        owners = {}
        for src in models:
            first, _ = self.compile_done(src)
            self.assertFalse(first.targets[0].cached, "the first compile of a new model is a miss")
            second = self.compile(src)
            self.assertTrue(second.targets[0].cached, "the second compile landed on another node")
            self.assertEqual(second.state, kiln_pb2.JOB_STATE_DONE)
            owners[hashlib.sha256(src).hexdigest()] = self.owner(src).name
        after = self.stats()
        # Each node's own counters: both jobs of a model on its node, one miss, one hit.
        for name in after:
            mine = sum(1 for o in owners.values() if o == name)
            a, b = after[name], before[name]
            with self.subTest(node=name, models=mine):
                self.assertEqual(a.jobs.submitted - b.jobs.submitted, 2 * mine)
                self.assertEqual(a.cache.misses - b.cache.misses, mine)
                self.assertEqual(a.cache.hits - b.cache.hits, mine)
        self.assertGreater(len(set(owners.values())), 1,
                           f"8 models all landed on one node: {owners}; the router does not hash on the header")

    def test_watch_and_fetch_reach_the_node(self):
        src = model("fetch", 0)
        r = self.compile(src)
        events = self.watch(src, r.job_id)
        self.assertEqual(events[-1].terminal.state, kiln_pb2.JOB_STATE_DONE, events)
        digest = [e.target_done for e in events if e.WhichOneof("event") == "target_done"][0].artifact_digest
        chunks = list(server_stream(self.channel, "GetArtifact", kiln_pb2.GetArtifactRequest(digest=digest),
                                    kiln_pb2.ArtifactChunk, metadata=digest_md(src)))
        self.assertEqual(chunks[0].metadata.digest, digest)
        blob = b"".join(c.data for c in chunks)
        self.assertEqual(len(blob), chunks[0].metadata.size_bytes)
        self.assertEqual(hashlib.sha256(blob).hexdigest(), digest)
        # Only that node has it: another node asked for the digest answers NOT_FOUND,
        # which is why clients send the header on WatchJob and GetArtifact too.
        owner = self.owner(src)
        other = next(n for n in self.nodes if n is not owner)
        with self.assertRaises(grpc.RpcError) as ctx:
            list(server_stream(other.channel, "GetArtifact", kiln_pb2.GetArtifactRequest(digest=digest),
                               kiln_pb2.ArtifactChunk))
        self.assertEqual(ctx.exception.code(), grpc.StatusCode.NOT_FOUND)

    def test_calls_without_header_hash_on_client_ip(self):
        """The documented fallback: no header, the client's IP is the key, so every
        header-less call from this host meets one kilnd (its start time names it)."""
        seen = set()
        for _ in range(3):
            with grpc.insecure_channel(self.router.addr) as ch:  # a new connection each time
                for _ in range(4):
                    seen.add(unary(ch, "GetServerInfo", kiln_pb2.GetServerInfoRequest(),
                                   kiln_pb2.GetServerInfoResponse).start_time_unix_ms)
        self.assertEqual(len(seen), 1, f"header-less calls reached {len(seen)} nodes")
        starts = {unary(n.channel, "GetServerInfo", kiln_pb2.GetServerInfoRequest(),
                        kiln_pb2.GetServerInfoResponse).start_time_unix_ms for n in self.nodes}
        self.assertLessEqual(seen, starts)

    def test_kiln_cli_routes_by_source_digest(self):
        """The real CLI through the router: `kiln compile` (Compile, WatchJob and
        GetArtifact) of each model twice. Only the header spreads models over the
        nodes (without it every call from this host hashes to one node), and each
        model's second compile must hit on the node that compiled it."""
        with tempfile.TemporaryDirectory(prefix="kiln-scale-cli-") as tmp:
            owners = {}
            for i in range(6):
                path = os.path.join(tmp, f"m{i}.mlir")
                src = model("cli", i)
                with open(path, "wb") as f:
                    f.write(src)
                for attempt in range(2):
                    r = run_kiln("compile", path, "--target", TARGET, "-o", os.path.join(tmp, f"out{i}.{attempt}"),
                                 addr=self.router.addr, timeout=60 * SLOW)
                    self.assertEqual(r.returncode, 0, r.stderr)
                owners[i] = self.owner(src).name
            self.assertGreater(len(set(owners.values())), 1, f"every model on one node: {owners}")


class NodeLossTest(Fleet):
    def test_killed_nodes_models_move_and_still_compile(self):
        models = [model("loss", i) for i in range(9)]
        owner = {}
        for src in models:
            self.compile_done(src)
            owner[src] = self.owner(src)
        counts = {n.name: sum(1 for o in owner.values() if o is n) for n in self.nodes}
        victim = max(self.nodes, key=lambda n: counts[n.name])
        moved = [s for s in models if owner[s] is victim]
        kept = [s for s in models if owner[s] is not victim]
        self.assertTrue(kept, f"all 9 models on {victim.name}")

        victim.kilnd.stop(signal.SIGKILL)
        # Before the health check notices: the connection is refused, and HAProxy
        # retries on the next server of the ring (option redispatch). One model of
        # the victim's is spent on this; where it lands need not be its final node.
        early = moved.pop()
        r = self.compile(early)
        self.assertFalse(r.targets[0].cached)
        self.router.wait_states({victim.name: "DOWN"}, 30 * SLOW)

        for src in moved:  # a miss on the node that takes the model over, then hits
            r, _ = self.compile_done(src)
            self.assertFalse(r.targets[0].cached, "a moved model is compiled again")
            new = self.owner(src)
            self.assertIsNot(new, victim)
            before = self.stats()[new.name].cache.hits
            for _ in range(2):
                self.assertTrue(self.compile(src).targets[0].cached, "a moved model's next compile is a hit")
            self.assertEqual(self.stats()[new.name].cache.hits - before, 2)
        for src in kept:  # the survivors' models keep their node and their cache
            before = self.stats()[owner[src].name].cache.hits
            self.assertTrue(self.compile(src).targets[0].cached, "a model of a live node moved")
            self.assertEqual(self.stats()[owner[src].name].cache.hits - before, 1)
            self.assertEqual(self.owner(src), owner[src])


if __name__ == "__main__":
    unittest.main()
