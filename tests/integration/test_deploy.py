"""The deployment files, checked the way CI can: no cluster, no container engine, no
systemd as PID 1.

- deploy/k8s: every YAML parses (python3-yaml); the StatefulSet keeps its state on a
  volume per replica, probes /healthz and /readyz on the metrics port, runs
  non-root on a read-only root; Services select the pods; ports are kilnd's
  defaults; the config map's names are kilnd settings; the router (when present)
  hashes on kiln-source-digest over HTTP/2 onto the headless Service.
- deploy/systemd: `systemd-analyze verify` (ExecStart pointed at the built kilnd),
  the hardening keys, and `systemd-analyze security --offline` under a threshold.
- deploy/container/Containerfile: its instructions (Debian 12, deps.sh, non-root
  USER, EXPOSE, VOLUME, HEALTHCHECK) and that the runtime stage installs the package
  of every shared library the built binaries need.
- Every flag a command line uses is one `kilnd --help` lists, so a renamed flag
  fails here; and kilnd is started with the exact command lines and config files of
  the unit, the StatefulSet and the container (paths moved to a temp dir, ports to
  free ones), and must answer `kiln health`, the probes, and (for the unit's
  Type=notify) send READY=1 and STOPPING=1 to NOTIFY_SOCKET.
"""
import glob
import http.client
import os
import re
import shlex
import shutil
import signal
import socket
import subprocess
import tempfile
import time
import unittest

import yaml

from kilnharness import (KILN, KILND, SANITIZED, START_TIMEOUT, Kilnd, KilnTestCase, clean_env,
                         run_kiln, run_kilnd_once)

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
DEPLOY = os.path.join(ROOT, "deploy")
K8S = os.path.join(DEPLOY, "k8s")
UNIT = os.path.join(DEPLOY, "systemd", "kilnd.service")
UNIT_CONF = os.path.join(DEPLOY, "systemd", "kilnd.conf")
SYSUSERS = os.path.join(DEPLOY, "systemd", "kiln.sysusers")
CONTAINERFILE = os.path.join(DEPLOY, "container", "Containerfile")
INSTALLED_KILND = "/usr/local/bin/kilnd"
INSTALLED_KILN = "/usr/local/bin/kiln"


# ---- what kilnd says about itself ----

def kilnd_flags():
    """Every long and short flag `kilnd --help` lists."""
    r = run_kilnd_once("--help")
    assert r.returncode == 0, r.stderr
    flags = set()
    for line in r.stdout.splitlines():
        m = re.match(r"^\s+(?:(-\w), )?(--[a-z0-9-]+)", line)
        if m:
            flags.update(f for f in m.groups() if f)
    return flags


def kilnd_defaults():
    """kilnd's effective settings with nothing set: {name: value}."""
    r = run_kilnd_once("--print-config")
    assert r.returncode == 0, r.stderr
    return dict(parse_conf(r.stdout))


def parse_conf(text):
    """A kilnd config file's (name, value) pairs, names with '-' and values unquoted."""
    pairs = []
    for line in text.splitlines():
        line = line.strip()
        if not line or line.startswith("#"):
            continue
        name, sep, value = line.partition("=")
        assert sep, f"not a name = value line: {line!r}"
        value = value.strip()
        if len(value) >= 2 and value[0] == value[-1] and value[0] in "\"'":
            value = value[1:-1]
        pairs.append((name.strip().replace("_", "-"), value))
    return pairs


def port_of(addr):
    return int(addr.rsplit(":", 1)[1])


def host_of(addr):
    return addr.rsplit(":", 1)[0]


def flags_in(argv):
    """The flags (not their values) of a kilnd command line."""
    return [a.split("=", 1)[0] for a in argv if a.startswith("-")]


# ---- the files ----

def k8s_docs():
    """{file name: [documents]} of deploy/k8s/*.yaml."""
    docs = {}
    for path in sorted(glob.glob(os.path.join(K8S, "*.yaml"))):
        with open(path) as f:
            docs[os.path.basename(path)] = [d for d in yaml.safe_load_all(f) if d is not None]
    return docs


def k8s_objects(kind=None):
    return [d for ds in k8s_docs().values() for d in ds if kind is None or d.get("kind") == kind]


def k8s_one(kind, name):
    found = [d for d in k8s_objects(kind) if d["metadata"]["name"] == name]
    assert len(found) == 1, f"want one {kind} {name} in deploy/k8s, found {len(found)}"
    return found[0]


def statefulset():
    return k8s_one("StatefulSet", "kilnd")


def kilnd_container(sts=None):
    sts = sts or statefulset()
    containers = sts["spec"]["template"]["spec"]["containers"]
    return next(c for c in containers if c["name"] == "kilnd")


def configmap_conf():
    """The config file the StatefulSet's --config names: (its pairs, its text)."""
    sts = statefulset()
    c = kilnd_container(sts)
    argv = c.get("command", []) + c.get("args", [])
    conf_path = argv[argv.index("--config") + 1]
    mount = next(m for m in c["volumeMounts"] if conf_path.startswith(m["mountPath"] + "/"))
    volume = next(v for v in sts["spec"]["template"]["spec"]["volumes"] if v["name"] == mount["name"])
    cm = k8s_one("ConfigMap", volume["configMap"]["name"])
    text = cm["data"][os.path.relpath(conf_path, mount["mountPath"])]
    return parse_conf(text), text


def unit_entries(path=UNIT):
    """[(section, key, value)] of a systemd unit (keys may repeat)."""
    entries, section, pending = [], None, ""
    with open(path) as f:
        for raw in f:
            line = raw.rstrip("\n")
            if pending:
                line = pending + line.lstrip()
                pending = ""
            if line.endswith("\\"):
                pending = line[:-1] + " "
                continue
            s = line.strip()
            if not s or s[0] in "#;":
                continue
            if s.startswith("[") and s.endswith("]"):
                section = s[1:-1]
                continue
            key, _, value = s.partition("=")
            entries.append((section, key.strip(), value.strip()))
    return entries


def unit_value(key, section="Service"):
    values = [v for s, k, v in unit_entries() if s == section and k == key]
    return values[-1] if values else None


def containerfile():
    """[(stage index, INSTRUCTION, arguments)] with continuation lines joined."""
    out, stage, pending = [], -1, ""
    with open(CONTAINERFILE) as f:
        for raw in f:
            line = raw.rstrip("\n")
            if not pending and line.lstrip().startswith("#"):
                continue
            if pending and line.lstrip().startswith("#"):
                continue  # comments inside a continued instruction
            if line.endswith("\\"):
                pending += line[:-1] + " "
                continue
            line = (pending + line).strip()
            pending = ""
            if not line:
                continue
            instr, _, args = line.partition(" ")
            instr = instr.upper()
            if instr == "FROM":
                stage += 1
            out.append((stage, instr, args.strip()))
    return out


def exec_form(args):
    """A JSON-array instruction's argv (ENTRYPOINT, CMD)."""
    import json
    return json.loads(args)


def entrypoint_argv():
    entry = [a for s, i, a in containerfile() if i == "ENTRYPOINT"]
    cmd = [a for s, i, a in containerfile() if i == "CMD"]
    argv = exec_form(entry[-1]) if entry else []
    return argv + (exec_form(cmd[-1]) if cmd else [])


# ---- running kilnd the way a manifest does ----

class ManifestKilnd(Kilnd):
    """kilnd with exactly the given argv (no --listen/--state-dir added)."""

    def __init__(self, argv, state_dir, env=None):
        super().__init__(env=env)
        self.argv = argv
        self.state_dir = state_dir

    def command(self):
        return self.wrapper + self.argv


def rewrite_conf(pairs, tmp):
    """The config moved into `tmp`: state-dir there, listen and metrics-listen on
    port 0 (hosts kept). Returns (text, whether metrics-listen is set)."""
    lines, metrics = [], False
    for name, value in pairs:
        if name == "state-dir":
            value = os.path.join(tmp, "state")
        elif name == "listen" and not value.startswith("unix:"):
            value = f"{host_of(value)}:0"
        elif name == "metrics-listen":
            value = f"{host_of(value)}:0"
            metrics = True
        lines.append(f'{name} = "{value}"')
    return "\n".join(lines) + "\n", metrics


def http_get(addr, path, timeout=5):
    host = host_of(addr)
    if host in ("0.0.0.0", "[::]", ""):
        host = "127.0.0.1"
    conn = http.client.HTTPConnection(host, port_of(addr), timeout=timeout)
    try:
        conn.request("GET", path)
        r = conn.getresponse()
        return r.status, r.read()
    finally:
        conn.close()


def wait_http_ok(addr, path, timeout):
    """Polls until GET path answers 200; returns the last (status, body) or error."""
    deadline = time.monotonic() + timeout
    last = None
    while time.monotonic() < deadline:
        try:
            last = http_get(addr, path)
            if last[0] == 200:
                return last
        except OSError as e:
            last = e
        time.sleep(0.1)
    return last


class NotifySocket:
    """A NOTIFY_SOCKET like systemd's: a unix datagram socket collecting messages."""

    def __init__(self, directory):
        self.path = os.path.join(directory, "notify.sock")
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
        self.sock.bind(self.path)
        self.messages = []

    def wait_for(self, field, timeout):
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if any(field in m.split("\n") for m in self.messages):
                return True
            self.sock.settimeout(max(0.01, deadline - time.monotonic()))
            try:
                self.messages.append(self.sock.recv(4096).decode(errors="replace"))
            except socket.timeout:
                pass
        return any(field in m.split("\n") for m in self.messages)

    def close(self):
        self.sock.close()


# ---- the checks ----

class Kubernetes(unittest.TestCase):
    def test_every_manifest_parses_and_is_an_object(self):
        docs = k8s_docs()
        self.assertIn("statefulset.yaml", docs)
        for name, ds in docs.items():
            self.assertTrue(ds, f"{name} has no documents")
            for d in ds:
                self.assertIsInstance(d, dict, name)
                self.assertIn("apiVersion", d, name)
                self.assertIn("kind", d, name)
                if d["kind"] != "Kustomization":
                    self.assertIn("name", d.get("metadata", {}), f"{name}: {d['kind']} without a name")

    def test_kustomize_renders_the_whole_deployment(self):
        # What `kubectl apply -k deploy/k8s` would send, rendered by kubectl's own
        # kustomize (no cluster needed). Not a Debian 12 package kiln installs: the
        # test runs where kubectl is already installed.
        kubectl = shutil.which("kubectl")
        if not kubectl:
            self.skipTest("kubectl is not installed")
        r = subprocess.run([kubectl, "kustomize", K8S], capture_output=True, text=True, timeout=120,
                           env=clean_env(HOME=tempfile.gettempdir()))
        if r.returncode != 0 and "unknown command" in r.stderr:
            self.skipTest("this kubectl has no kustomize")
        self.assertEqual(r.returncode, 0, r.stderr)
        objs = [d for d in yaml.safe_load_all(r.stdout) if d]
        by_kind = {}
        for d in objs:
            by_kind.setdefault(d["kind"], []).append(d)
        want = {(d["kind"], d["metadata"]["name"]) for d in k8s_objects() if d["kind"] != "Kustomization"}
        got = {(d["kind"], d["metadata"]["name"]) for d in objs}
        self.assertTrue(want <= got, f"kustomize left out {want - got}")
        # The generated router config map: a content-hashed name, which the router
        # Deployment's volume must follow, holding deploy/k8s/haproxy.cfg byte for byte.
        cms = [c for c in by_kind["ConfigMap"] if c["metadata"]["name"].startswith("kiln-router-config-")]
        self.assertEqual(len(cms), 1, [c["metadata"]["name"] for c in by_kind["ConfigMap"]])
        with open(os.path.join(K8S, "haproxy.cfg")) as f:
            self.assertEqual(cms[0]["data"]["haproxy.cfg"], f.read())
        router = [d for d in by_kind["Deployment"] if d["metadata"]["name"] == "kiln-router"][0]
        vols = [v["configMap"]["name"] for v in router["spec"]["template"]["spec"]["volumes"] if "configMap" in v]
        self.assertEqual(vols, [cms[0]["metadata"]["name"]])
        with open(os.path.join(K8S, "kustomization.yaml")) as f:
            images = {i["name"]: f"{i['newName']}:{i['newTag']}" for i in yaml.safe_load(f)["images"]}
        for d in by_kind["Deployment"] + by_kind["StatefulSet"]:
            for c in d["spec"]["template"]["spec"]["containers"]:
                self.assertIn(c["image"], images.values(), f"{d['metadata']['name']}: {c['image']}")

    def test_kustomization_lists_every_manifest(self):
        path = os.path.join(K8S, "kustomization.yaml")
        if not os.path.exists(path):
            self.skipTest("no kustomization.yaml")
        with open(path) as f:
            k = yaml.safe_load(f)
        want = sorted(n for n in k8s_docs() if n != "kustomization.yaml")
        self.assertEqual(sorted(k["resources"]), want)
        images = {i["name"] for i in k.get("images", [])}
        used = {c["image"].split(":")[0] for d in k8s_objects() if d["kind"] in ("StatefulSet", "Deployment")
                for c in d["spec"]["template"]["spec"]["containers"]}
        self.assertTrue(used <= images, f"kustomization images {images} do not cover {used}")

    def test_statefulset_keeps_state_on_a_volume_per_replica(self):
        sts = statefulset()
        claims = {t["metadata"]["name"] for t in sts["spec"].get("volumeClaimTemplates", [])}
        self.assertTrue(claims, "no volumeClaimTemplates")
        conf = dict(configmap_conf()[0])
        mounts = {m["mountPath"]: m["name"] for m in kilnd_container(sts)["volumeMounts"]}
        self.assertIn(mounts.get(conf["state-dir"]), claims,
                      f"state-dir {conf['state-dir']} is not a volumeClaimTemplate mount: {mounts}")
        headless = k8s_one("Service", sts["spec"]["serviceName"])
        self.assertEqual(headless["spec"].get("clusterIP"), "None")

    def test_ports_and_probes_match_kilnd(self):
        defaults = kilnd_defaults()
        self.assertIn("metrics-listen", defaults, "kilnd has no metrics-listen setting")
        conf = dict(configmap_conf()[0])
        c = kilnd_container()
        ports = {p["name"]: p["containerPort"] for p in c["ports"]}
        # Inside the pod kilnd listens on every interface, on its default ports.
        self.assertEqual(conf["listen"], f"0.0.0.0:{port_of(defaults['listen'])}")
        self.assertEqual(conf["metrics-listen"], f"0.0.0.0:{port_of(defaults['metrics-listen'])}")
        self.assertEqual(ports["grpc"], port_of(conf["listen"]))
        self.assertEqual(ports["metrics"], port_of(conf["metrics-listen"]))
        for probe, path in (("livenessProbe", "/healthz"), ("readinessProbe", "/readyz"),
                            ("startupProbe", "/healthz")):
            if probe == "startupProbe" and probe not in c:
                continue
            get = c[probe]["httpGet"]
            self.assertEqual(get["path"], path, probe)
            port = ports.get(get["port"], get["port"])
            self.assertEqual(port, ports["metrics"], f"{probe} is not on the metrics port")

    def test_statefulset_runs_locked_down_with_resources(self):
        sts = statefulset()
        pod = sts["spec"]["template"]["spec"]
        c = kilnd_container(sts)
        self.assertTrue(pod["securityContext"]["runAsNonRoot"])
        self.assertNotEqual(pod["securityContext"].get("runAsUser", 1), 0)
        sc = c["securityContext"]
        self.assertTrue(sc["readOnlyRootFilesystem"])
        self.assertFalse(sc["allowPrivilegeEscalation"])
        self.assertEqual(sc["capabilities"]["drop"], ["ALL"])
        mounts = {m["mountPath"]: m for m in c["volumeMounts"]}
        self.assertIn("/tmp", mounts, "workers need a writable /tmp")
        self.assertFalse(mounts["/tmp"].get("readOnly", False))
        for kind in ("requests", "limits"):
            self.assertIn("cpu", c["resources"][kind])
            self.assertIn("memory", c["resources"][kind])
        # SIGTERM drains for drain-timeout; the pod must be given longer.
        conf = dict(configmap_conf()[0])
        drain = conf.get("drain-timeout", "10s")
        m = re.fullmatch(r"(\d+)(ms|s|m)", drain)
        seconds = int(m.group(1)) * {"ms": 0.001, "s": 1, "m": 60}[m.group(2)]
        self.assertGreater(pod.get("terminationGracePeriodSeconds", 30), seconds)

    def test_services_select_the_pods_and_name_real_ports(self):
        pod_labels = statefulset()["spec"]["template"]["metadata"]["labels"]
        self.assertEqual(statefulset()["spec"]["selector"]["matchLabels"].items() - pod_labels.items(), set())
        ports = {p["name"] for p in kilnd_container()["ports"]}
        kilnd_services = [s for s in k8s_objects("Service")
                          if s["spec"]["selector"].items() <= pod_labels.items()]
        self.assertGreaterEqual(len(kilnd_services), 2, "want a headless and a client Service")
        self.assertTrue(any(s["spec"].get("clusterIP") == "None" for s in kilnd_services))
        self.assertTrue(any(s["spec"].get("clusterIP") != "None" for s in kilnd_services))
        for s in kilnd_services:
            for p in s["spec"]["ports"]:
                self.assertIn(p["targetPort"], ports, f"Service {s['metadata']['name']}")

    def test_command_line_and_config_are_kilnds(self):
        flags = kilnd_flags()
        c = kilnd_container()
        argv = c.get("command", []) + c.get("args", [])
        self.assertEqual(os.path.basename(argv[0]), "kilnd")
        for f in flags_in(argv[1:]):
            self.assertIn(f, flags, f"the StatefulSet passes {f}, which kilnd --help does not list")
        names = set(kilnd_defaults())
        for name, _ in configmap_conf()[0]:
            self.assertIn(name, names, f"the ConfigMap sets {name}, which is no kilnd setting")

    def test_router_runs_the_tested_haproxy_config(self):
        """The router Deployment mounts deploy/k8s/haproxy.cfg (a configMapGenerator
        ConfigMap), whose servers are the StatefulSet's replicas by their headless
        Service names; test_scale checks that file against deploy/haproxy/haproxy.cfg
        and runs it."""
        with open(os.path.join(K8S, "kustomization.yaml")) as f:
            k = yaml.safe_load(f)
        gens = {g["name"]: g for g in k.get("configMapGenerator", [])}
        self.assertIn("kiln-router-config", gens)
        self.assertEqual(gens["kiln-router-config"]["files"], ["haproxy.cfg"])
        with open(os.path.join(K8S, "haproxy.cfg")) as f:
            cfg = f.read()
        sts = statefulset()
        headless = k8s_one("Service", sts["spec"]["serviceName"])
        grpc_port = [p["port"] for p in headless["spec"]["ports"] if p["name"] == "grpc"][0]
        servers = re.findall(r'^\s*server (\S+) "([^"]+)" id (\d+)', cfg, re.M)
        self.assertGreaterEqual(len(servers), sts["spec"]["replicas"], "fewer servers than replicas")
        for n, (name, addr, sid) in enumerate(servers):
            pod = f"{sts['metadata']['name']}-{n}"
            self.assertEqual(name, pod)
            self.assertEqual(int(sid), n + 1, "a replica's ring position is its ordinal")
            self.assertEqual(addr, f"{pod}.{headless['metadata']['name']}.${{POD_NAMESPACE}}"
                                   f".svc.${{KILN_CLUSTER_DOMAIN-cluster.local}}:{grpc_port}")
        self.assertIn("balance hash var(txn.kiln_route)", cfg)
        self.assertIn("req.hdr(kiln-source-digest)", cfg)
        dep = k8s_one("Deployment", "kiln-router")
        spec = dep["spec"]["template"]["spec"]
        c = spec["containers"][0]
        self.assertEqual(c["command"][0], "haproxy")
        cfg_arg = c["command"][c["command"].index("-f") + 1]
        vols = {v["name"]: v for v in spec["volumes"]}
        mounts = {m["mountPath"]: m["name"] for m in c["volumeMounts"]}
        self.assertEqual(vols[mounts[os.path.dirname(cfg_arg)]]["configMap"]["name"], "kiln-router-config")
        self.assertEqual(os.path.basename(cfg_arg), "haproxy.cfg")
        env = {e["name"]: e for e in c["env"]}
        self.assertEqual(env["POD_NAMESPACE"]["valueFrom"]["fieldRef"]["fieldPath"], "metadata.namespace")
        self.assertIn("KILN_ROUTER_UNPRIVILEGED", env)
        # The admin socket is on a writable volume (the root filesystem is read-only).
        self.assertTrue(c["securityContext"]["readOnlyRootFilesystem"])
        admin = env["KILN_ROUTER_ADMIN"]["value"]
        self.assertTrue(any(admin.startswith(m + "/") and "emptyDir" in vols[n] for m, n in mounts.items()),
                        f"{admin} is not on an emptyDir")
        ports = {p["name"]: p["containerPort"] for p in c["ports"]}
        self.assertEqual(port_of(env["KILN_ROUTER_LISTEN"]["value"]), ports["grpc"])
        self.assertEqual(port_of(env["KILN_ROUTER_HEALTH"]["value"]), ports["health"])
        self.assertEqual(c["readinessProbe"]["httpGet"]["path"], "/readyz")
        self.assertEqual(c["readinessProbe"]["httpGet"]["port"], "health")
        labels = dep["spec"]["template"]["metadata"]["labels"]
        svc = k8s_one("Service", "kiln-router")
        self.assertTrue(svc["spec"]["selector"].items() <= labels.items())
        self.assertEqual([p["targetPort"] for p in svc["spec"]["ports"]], ["grpc"])
        # The router image is the Containerfile's router stage.
        stages = [a.split() for s_, i, a in containerfile() if i == "FROM"]
        self.assertIn(c["image"].split(":")[0], {i["name"] for i in k["images"]})
        self.assertTrue(any(len(f) == 3 and f[1].upper() == "AS" and f[2] == "router" for f in stages))

HARDENING = {
    "NoNewPrivileges": "yes", "ProtectSystem": "strict", "ProtectHome": "yes",
    "PrivateTmp": "yes", "PrivateDevices": "yes", "ProtectKernelTunables": "yes",
    "ProtectKernelModules": "yes", "ProtectControlGroups": "yes", "RestrictNamespaces": "yes",
    "RestrictSUIDSGID": "yes", "LockPersonality": "yes", "SystemCallArchitectures": "native",
    "CapabilityBoundingSet": "",
}


class Systemd(unittest.TestCase):
    def test_unit_is_notify_with_a_user_state_and_sandbox(self):
        self.assertEqual(unit_value("Type"), "notify")
        self.assertEqual(unit_value("StateDirectory"), "kiln")
        self.assertTrue(unit_value("DynamicUser") == "yes" or unit_value("User"),
                        "no dedicated user")
        for key, want in HARDENING.items():
            self.assertEqual(unit_value(key), want, key)
        self.assertIn("AF_INET", unit_value("RestrictAddressFamilies").split())
        self.assertIn("AF_UNIX", unit_value("RestrictAddressFamilies").split())
        self.assertTrue(unit_value("SystemCallFilter"))
        self.assertEqual(unit_value("KillSignal"), "SIGTERM")

    def test_unit_user_comes_from_sysusers(self):
        user = unit_value("User")
        if not user:
            self.skipTest("DynamicUser")
        with open(SYSUSERS) as f:
            rows = [l.split() for l in f if l.strip() and not l.startswith("#")]
        self.assertIn(["u", user], [r[:2] for r in rows])

    def test_unit_command_line_and_config_are_kilnds(self):
        argv = shlex.split(unit_value("ExecStart"))
        self.assertEqual(argv[0], INSTALLED_KILND)
        flags = kilnd_flags()
        for f in flags_in(argv[1:]):
            self.assertIn(f, flags, f"the unit passes {f}, which kilnd --help does not list")
        names = set(kilnd_defaults())
        with open(UNIT_CONF) as f:
            conf = parse_conf(f.read())
        for name, _ in conf:
            self.assertIn(name, names, f"kilnd.conf sets {name}, which is no kilnd setting")
        self.assertEqual(dict(conf)["state-dir"], "/var/lib/" + unit_value("StateDirectory"))

    def test_unit_runs_only_programs_every_debian_has(self):
        # Found under systemd: ExecReload=/bin/kill failed on a minimal Debian 12,
        # where /bin/kill (procps) is not installed. Every program the unit runs is
        # kilnd or one of an Essential package.
        if not shutil.which("dpkg-query"):
            self.skipTest("no dpkg")
        for s, key, value in unit_entries():
            if s != "Service" or not key.startswith("Exec"):
                continue
            prog = shlex.split(value.lstrip("-@:+!"))[0]
            if prog == INSTALLED_KILND:
                continue
            owner = subprocess.run(["dpkg-query", "-S", os.path.realpath(prog)], capture_output=True, text=True)
            if owner.returncode != 0:  # merged /usr: dpkg may know the /bin path only
                owner = subprocess.run(["dpkg-query", "-S", prog], capture_output=True, text=True)
            self.assertEqual(owner.returncode, 0, f"{key}: no package owns {prog}")
            # "dash: /bin/sh" (after "diversion by ..." lines, for a diverted path)
            pkg = [l for l in owner.stdout.splitlines() if not l.startswith("diversion ")][-1].split(":")[0]
            essential = subprocess.run(["dpkg-query", "-W", "-f=${Essential}", pkg],
                                       capture_output=True, text=True).stdout.strip()
            self.assertEqual(essential, "yes", f"{key} runs {prog} from {pkg}, which a minimal Debian may lack")

    def _unit_copy(self, tmp):
        """The unit with ExecStart on the built kilnd (verify wants an executable)."""
        with open(UNIT) as f:
            text = f.read()
        path = os.path.join(tmp, "kilnd.service")
        with open(path, "w") as f:
            f.write(text.replace(f"ExecStart={INSTALLED_KILND} ", f"ExecStart={KILND} "))
        return path

    def test_systemd_analyze_verify(self):
        tool = shutil.which("systemd-analyze")
        if not tool:
            self.skipTest("no systemd-analyze")
        with tempfile.TemporaryDirectory() as tmp:
            r = subprocess.run([tool, "verify", self._unit_copy(tmp)], capture_output=True,
                               text=True, timeout=60)
        # Any message (an unknown key, a bad value) is a defect, not only a failure.
        self.assertEqual((r.returncode, r.stdout + r.stderr), (0, ""))

    def test_systemd_analyze_security_offline(self):
        tool = shutil.which("systemd-analyze")
        if not tool:
            self.skipTest("no systemd-analyze")
        with tempfile.TemporaryDirectory() as tmp:
            # The threshold is on systemd's 0..100 scale: 30 is the "3.0" it prints.
            r = subprocess.run([tool, "security", "--offline=yes", "--threshold=30",
                                "--no-pager", self._unit_copy(tmp)],
                               capture_output=True, text=True, timeout=60)
        if "Unknown option" in r.stderr or "unrecognized option" in r.stderr:
            self.skipTest("systemd-analyze has no --offline")
        self.assertEqual(r.returncode, 0, r.stdout[-2000:] + r.stderr)


class Container(unittest.TestCase):
    def test_stages_user_ports_volume_healthcheck(self):
        instrs = containerfile()
        froms = [a for s, i, a in instrs if i == "FROM"]
        self.assertGreaterEqual(len(froms), 2, "want a build and a runtime stage")
        for f in froms:
            self.assertRegex(f.split()[0], r"^debian:12(\b|-|$)")
        last = len(froms) - 1
        runs = " ".join(a for s, i, a in instrs if i == "RUN" and s == 0)
        self.assertIn("deploy/deps.sh", runs)
        self.assertIn("cmake", runs)
        users = [a for s, i, a in instrs if i == "USER" and s == last]
        self.assertTrue(users, "the runtime stage runs as root")
        self.assertNotIn(users[-1].split(":")[0], ("0", "root"))
        defaults = kilnd_defaults()
        exposed = {int(p.split("/")[0]) for s, i, a in instrs if i == "EXPOSE" and s == last for p in a.split()}
        self.assertEqual(exposed, {port_of(defaults["listen"]), port_of(defaults["metrics-listen"])})
        argv = entrypoint_argv()
        self.assertEqual(argv[0], INSTALLED_KILND)
        flags = kilnd_flags()
        for f in flags_in(argv[1:]):
            self.assertIn(f, flags, f"the container passes {f}, which kilnd --help does not list")
        opts = dict(zip(argv[1::2], argv[2::2]))
        self.assertEqual(opts["--listen"], f"0.0.0.0:{port_of(defaults['listen'])}")
        self.assertEqual(opts["--metrics-listen"], f"0.0.0.0:{port_of(defaults['metrics-listen'])}")
        volumes = [a for s, i, a in instrs if i == "VOLUME"]
        self.assertIn(opts["--state-dir"], " ".join(volumes))
        health = [a for s, i, a in instrs if i == "HEALTHCHECK"]
        self.assertTrue(health, "no HEALTHCHECK")
        self.assertIn(INSTALLED_KILN, health[-1])
        self.assertIn("health", health[-1])

    def test_smoke_script_parses_and_runs_both_images(self):
        # deploy/container/smoke.sh needs an engine and minutes to build: CI only
        # parses it and checks it drives the images and the config it claims to.
        path = os.path.join(ROOT, "deploy", "container", "smoke.sh")
        r = subprocess.run(["bash", "-n", path], capture_output=True, text=True)
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertTrue(os.access(path, os.X_OK), "smoke.sh is not executable")
        with open(path) as f:
            text = f.read()
        self.assertIn("--target router", text)
        self.assertIn("deploy/k8s/haproxy.cfg", text)

    def test_build_stage_copies_every_source_folder(self):
        with open(os.path.join(ROOT, "CMakeLists.txt")) as f:
            cmake = f.read()
        # The image builds with BUILD_TESTING=OFF: what only the tests need is not copied.
        cmake = re.sub(r"if\(BUILD_TESTING\).*?endif\(\)", "", cmake, flags=re.S)
        folders = {d.split("/")[0] for d in re.findall(r"add_subdirectory\((\S+?)\)", cmake)}
        folders.discard("tests")  # tests/fuzz, in the KILN_FUZZ build only
        copied = {a.split()[0].rstrip("/") for s, i, a in containerfile() if i == "COPY" and s == 0}
        self.assertEqual(folders - copied, set(), "folders the build needs but the Containerfile does not copy")

    def test_runtime_stage_installs_every_needed_library(self):
        if not shutil.which("dpkg") or not shutil.which("readelf"):
            self.skipTest("needs dpkg and readelf")
        if SANITIZED:
            # The image is a release build; the ASan build links more of gRPC's
            # dependencies directly (re2, abseil) and the sanitizer runtime.
            self.skipTest("the sanitized build's libraries are not the release image's")
        last = max(s for s, i, a in containerfile())
        installed = set()
        for s, i, a in containerfile():
            if i == "RUN" and s == last and "apt-get install" in a:
                installed.update(w for w in a.split() if re.fullmatch(r"[a-z0-9][a-z0-9.+-]+", w))
        self.assertIn("lld-22", installed, "kiln-worker links AMD code objects with ld.lld")
        build = os.path.dirname(os.path.dirname(KILND))
        for binary in (KILND, os.path.join(build, "daemon", "kiln-worker"), KILN):
            needed = re.findall(r"\(NEEDED\).*\[(.+)\]",
                                subprocess.run(["readelf", "-d", binary], capture_output=True,
                                               text=True, check=True).stdout)
            ldd = subprocess.run(["ldd", binary], capture_output=True, text=True).stdout
            where = dict(re.findall(r"^\s*(\S+) => (/\S+)", ldd, re.M))
            for lib in needed:
                if lib not in where:
                    continue
                real = os.path.realpath(where[lib])
                pkg = None
                for candidate in (real, re.sub(r"^/usr", "", real), "/usr" + real):
                    r = subprocess.run(["dpkg", "-S", candidate], capture_output=True, text=True)
                    if r.returncode == 0:
                        pkg = r.stdout.split(":")[0]
                        break
                if pkg is None or pkg in ("libc6", "libgcc-s1"):
                    continue  # not from a package (a build-tree library), or in every image
                self.assertIn(pkg, installed,
                              f"{os.path.basename(binary)} needs {lib} from {pkg}, which the runtime stage does not install")


class CommandLinesServe(KilnTestCase):
    """kilnd started exactly as each manifest starts it, paths and ports moved."""

    def _serve(self, argv, state_dir, metrics, env=None):
        kd = ManifestKilnd(argv, state_dir, env=env)
        kd.start()
        self.addCleanup(kd.__exit__, None, None, None)
        r = run_kiln("health", addr=kd.addr)
        self.assertEqual(r.returncode, 0, r.stdout + r.stderr + kd.log())
        if metrics:
            # kilnd publishes the bound HTTP address as it does the gRPC one.
            with open(os.path.join(state_dir, "kilnd.metrics-addr")) as f:
                metrics = f.read().strip()
            got = wait_http_ok(metrics, "/healthz", START_TIMEOUT)
            self.assertEqual(got[0] if isinstance(got, tuple) else got, 200, kd.log())
            got = wait_http_ok(metrics, "/readyz", START_TIMEOUT)
            self.assertEqual(got[0] if isinstance(got, tuple) else got, 200, kd.log())
        return kd

    def test_systemd_unit(self):
        tmp = self.enterContext(tempfile.TemporaryDirectory(prefix="kiln-deploy-"))
        with open(UNIT_CONF) as f:
            text, metrics = rewrite_conf(parse_conf(f.read()), tmp)
        conf = os.path.join(tmp, "kilnd.conf")
        with open(conf, "w") as f:
            f.write(text)
        argv = [KILND if a == INSTALLED_KILND else conf if a == "/etc/kiln/kilnd.conf" else a
                for a in shlex.split(unit_value("ExecStart"))]
        notify = NotifySocket(tmp)
        self.addCleanup(notify.close)
        kd = self._serve(argv, os.path.join(tmp, "state"), metrics,
                         env={"NOTIFY_SOCKET": notify.path})
        self.assertTrue(notify.wait_for("READY=1", START_TIMEOUT),
                        f"Type=notify, but kilnd sent no READY=1: {notify.messages}")
        # systemctl status shows what kilnd is bound to (0.0.0.0:PORT), not the
        # loopback address local clients dial.
        bind = f"{host_of(dict(parse_conf(text))['listen'])}:{port_of(kd.addr)}"
        self.assertTrue(any(f"STATUS=serving on {bind}" in m for m in notify.messages), notify.messages)
        self.assertIn(f"bind={bind}", kd.log())
        self.assertCleanStop(kd)
        self.assertTrue(notify.wait_for("STOPPING=1", 5),
                        f"kilnd sent no STOPPING=1 on SIGTERM: {notify.messages}")

    def test_statefulset(self):
        tmp = self.enterContext(tempfile.TemporaryDirectory(prefix="kiln-deploy-"))
        pairs, _ = configmap_conf()
        text, metrics = rewrite_conf(pairs, tmp)
        conf = os.path.join(tmp, "kilnd.conf")
        with open(conf, "w") as f:
            f.write(text)
        c = kilnd_container()
        argv = c.get("command", []) + c.get("args", [])
        argv = [KILND if a == INSTALLED_KILND else conf if a.endswith("/kilnd.conf") else a
                for a in argv]
        kd = self._serve(argv, os.path.join(tmp, "state"), metrics, env={"TMPDIR": tmp})
        self.assertCleanStop(kd)

    def test_container_entrypoint_and_healthcheck(self):
        tmp = self.enterContext(tempfile.TemporaryDirectory(prefix="kiln-deploy-"))
        argv = entrypoint_argv()
        opts = dict(zip(argv[1::2], argv[2::2]))
        state = os.path.join(tmp, "state")
        moved = {INSTALLED_KILND: KILND, opts["--state-dir"]: state,
                 opts["--listen"]: f"{host_of(opts['--listen'])}:0",
                 opts["--metrics-listen"]: f"{host_of(opts['--metrics-listen'])}:0"}
        # A container has its own CPUs' worth of workers; one is enough here.
        kd = self._serve([moved.get(a, a) for a in argv] + ["--workers", "1"], state, True)
        health = [a for s, i, a in containerfile() if i == "HEALTHCHECK"][-1]
        cmd = exec_form(health[health.index("CMD") + 3:].strip())
        default_addr = "127.0.0.1:" + opts["--listen"].rsplit(":", 1)[1]
        cmd = [KILN if a == INSTALLED_KILN else kd.addr if a == default_addr else a for a in cmd]
        r = subprocess.run(cmd, capture_output=True, text=True, env=clean_env(), timeout=30)
        self.assertEqual(r.returncode, 0, f"HEALTHCHECK {cmd}: {r.stdout}{r.stderr}")
        self.assertCleanStop(kd)


if __name__ == "__main__":
    unittest.main()
