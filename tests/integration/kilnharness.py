"""Test harness: starts the real kilnd on a real socket and runs the real kiln CLI.

Binaries and generated Python messages come from the build directory named by
KILN_BUILD_DIR (ctest sets it). Under KILN_WRAPPER (e.g. valgrind) kilnd runs inside
that command. Every kilnd gets its own temporary state directory and port 0, so
tests run in parallel without colliding.
"""
import hashlib
import os
import re
import shlex
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import unittest

BUILD_DIR = os.environ.get("KILN_BUILD_DIR") or os.path.join(
    os.path.dirname(__file__), "..", "..", "build")
BUILD_DIR = os.path.abspath(BUILD_DIR)
KILND = os.path.join(BUILD_DIR, "daemon", "kilnd")
KILN = os.path.join(BUILD_DIR, "client", "kiln")
CACHE_SEED = os.path.join(BUILD_DIR, "tests", "cache_seed")
KILNC = os.path.join(BUILD_DIR, "compiler", "kilnc")
EXAMPLES = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", "..", "examples"))
PYTHON_OUT = os.path.join(BUILD_DIR, "python")

# kilnd runs under KILN_WRAPPER (valgrind), or the build is sanitized (ASan): tests
# scale their waits and skip what those tools distort.
WRAPPED = bool(os.environ.get("KILN_WRAPPER"))


_WORD = re.compile(r"[A-Za-z0-9_$.]")
_IDENT = re.compile(r"[A-Za-z0-9_$.\-]*")
_STRING = re.compile(r'"(?:\\.|[^"\\])*"?', re.S)
_LOC_ALIAS = re.compile(r"#loc[A-Za-z0-9_$.\-]*\s*=\s*")


def normal_digest(source):
    """kiln's cache-key digest of `source` (bytes), written from the rules in
    base/mlir_text.h, not from its code: whitespace and // comments dropped (one
    space kept between word characters), %values and ^blocks renumbered by first
    appearance, loc(...) and #loc aliases dropped, strings kept; bytecode as is."""
    if source[:4] == b"ML\xefR":
        return hashlib.sha256(source).hexdigest()
    s = source.decode("utf-8", "surrogateescape")

    def group_end(i):  # s[i] == "("
        depth = 0
        while i < len(s):
            if s[i] == '"':
                i = _STRING.match(s, i).end()
                continue
            if s[i] == "(":
                depth += 1
            elif s[i] == ")":
                depth -= 1
                if depth == 0:
                    return i + 1
            i += 1
        return len(s)

    def loc_end(i):  # the end of "loc (...)" starting at i, else 0
        if s.startswith("loc", i) and not _WORD.match(s, i + 3):
            j = i + 3
            while j < len(s) and s[j] in " \t\r\n":
                j += 1
            if j < len(s) and s[j] == "(":
                return group_end(j)
        return 0

    out, names, last_word, i = [], {"%": {}, "^": {}}, False, 0
    while i < len(s):
        c = s[i]
        alias = _LOC_ALIAS.match(s, i) if c == "#" else None
        if c in " \t\r\n":
            i += 1
        elif s.startswith("//", i):
            e = s.find("\n", i)
            i = len(s) if e < 0 else e
        elif c == '"':
            e = _STRING.match(s, i).end()
            out.append(s[i:e])
            last_word, i = False, e
        elif alias and loc_end(alias.end()):
            i = loc_end(alias.end())
        elif c in "%^" and _IDENT.match(s, i + 1).end() > i + 1:
            e = _IDENT.match(s, i + 1).end()
            table = names[c]
            out.append("%s%d" % (c, table.setdefault(s[i + 1:e], len(table))))
            last_word, i = True, e
        elif c in "@#!":
            e = _IDENT.match(s, i + 1).end()
            out.append(s[i:e])
            last_word, i = e > i + 1 and bool(_WORD.match(s[e - 1])), e
        elif _WORD.match(c):
            e = loc_end(i)
            if not e:
                e = i
                while e < len(s) and _WORD.match(s[e]):
                    e += 1
                out.append((" " if last_word else "") + s[i:e])
                last_word = True
            i = e
        else:
            out.append(c)
            last_word, i = False, i + 1
    form = "".join(out).encode("utf-8", "surrogateescape")
    return hashlib.sha256(b"kiln-mlir-normal/1\n" + form).hexdigest()


def distinct(source, tag):
    """`source` (bytes) made a model of its own that compiles like it: kiln keys its
    cache on the text's normal form (base/mlir_text.h), so a comment or a renamed
    value would still hit; an extra private function, never called, does not."""
    name = re.sub(r"[^A-Za-z0-9_]", "_", str(tag))
    return source + f"\nfunc.func private @kiln_test_variant_{name}() {{\n  return\n}}\n".encode()


def sanitizer_mode():
    """The build's KILN_SANITIZE: "address" (ASan+UBSan, also spelled ON), "thread"
    (TSan) or "" (none)."""
    try:
        with open(os.path.join(BUILD_DIR, "CMakeCache.txt")) as f:
            for line in f:
                m = re.match(r"KILN_SANITIZE(?::[A-Z]+)?=(.*)$", line.strip())
                if m:
                    value = m.group(1).strip().lower()
                    if value in ("on", "true", "1", "yes", "address"):
                        return "address"
                    return "thread" if value == "thread" else ""
    except OSError:
        pass
    return ""


SANITIZER = sanitizer_mode()
SANITIZED = SANITIZER != ""

sys.path.insert(0, PYTHON_OUT)
# grpcio owns the top-level `grpc` package, so the generated health module is
# imported from its own folder.
sys.path.insert(0, os.path.join(PYTHON_OUT, "grpc", "health", "v1"))

START_TIMEOUT = float(os.environ.get("KILN_START_TIMEOUT", "30"))


def clean_env(**extra):
    """The environment with no KILN_/KILND_ settings leaking in from outside.

    kilnd refuses to run as root unless allowed; CI containers run the suites as
    root, so there the harness allows it (test_security checks the refusal)."""
    env = {k: v for k, v in os.environ.items()
           if not k.startswith("KILN_") or k in ("KILN_BUILD_DIR",)}
    env = {k: v for k, v in env.items() if not k.startswith("KILND_")}
    if os.geteuid() == 0:
        env["KILND_ALLOW_ROOT"] = "1"
    env.update(extra)
    return env


class Kilnd:
    """One kilnd process. Use as a context manager or call start()/stop()."""

    def __init__(self, *args, listen="127.0.0.1:0", state_dir=None, env=None,
                 wrapper=None, workdir=None, tls_cert=None, tls_key=None, tls_client_ca=None,
                 token_file=None):
        self.tmp = tempfile.TemporaryDirectory(prefix="kiln-it-")
        self.state_dir = state_dir or os.path.join(self.tmp.name, "state")
        self.listen = listen
        self.args = list(args)
        for name, value in (("--tls-cert", tls_cert), ("--tls-key", tls_key),
                            ("--tls-client-ca", tls_client_ca), ("--token-file", token_file)):
            if value is not None:
                self.args += [name, value]
        # A TMPDIR of its own: whatever kilnd's workers leave there is this kilnd's
        # (leftovers()), not that of a test running beside it.
        self.tmpdir = os.path.join(self.tmp.name, "tmp")
        os.mkdir(self.tmpdir)
        self.env = clean_env(**dict({"TMPDIR": self.tmpdir}, **(env or {})))
        self.wrapper = shlex.split(wrapper if wrapper is not None
                                   else os.environ.get("KILN_WRAPPER", ""))
        self.workdir = workdir or self.tmp.name
        self.log_path = os.path.join(self.tmp.name, "kilnd.log")
        self.proc = None
        self.addr = None

    def command(self):
        cmd = [KILND]
        if self.listen is not None:
            cmd += ["--listen", self.listen]
        if self.state_dir is not None:
            cmd += ["--state-dir", self.state_dir]
        if not any(a == "--metrics-listen" or a.startswith("--metrics-listen=") for a in self.args):
            # The default (127.0.0.1:7478) would collide between tests run in parallel.
            cmd += ["--metrics-listen", "127.0.0.1:0"]
        return self.wrapper + cmd + self.args

    def start(self, expect_ready=True):
        self.log_file = open(self.log_path, "wb")
        self.proc = subprocess.Popen(self.command(), stdout=self.log_file,
                                     stderr=subprocess.STDOUT, env=self.env,
                                     cwd=self.workdir)
        if not expect_ready:
            return self
        addr_file = os.path.join(self.state_dir, "kilnd.addr")
        deadline = time.monotonic() + START_TIMEOUT
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise AssertionError(
                    f"kilnd exited with {self.proc.returncode} before it was ready:\n{self.log()}")
            if os.path.exists(addr_file):
                with open(addr_file) as f:
                    text = f.read()
                if text.endswith("\n"):
                    self.addr = text.strip()
                    return self
            time.sleep(0.02)
        self.proc.kill()
        raise AssertionError(f"kilnd did not publish its address in {START_TIMEOUT}s:\n{self.log()}")

    def wait(self, timeout=30):
        try:
            rc = self.proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            # A kilnd that does not end is a hang to diagnose, not only a failure:
            # its threads' stacks (and its children's) go with its log.
            stacks = self.stacks()
            self.proc.kill()
            self.proc.wait()
            self.log_file.close()
            raise AssertionError(f"kilnd (pid {self.proc.pid}) did not exit within {timeout}s;"
                                 f" its stacks:\n{stacks}\nits log:\n{self.log()[-30000:]}") from None
        finally:
            if not self.log_file.closed:
                self.log_file.close()
        self.check_tsan()
        return rc

    def stacks(self):
        """Every thread's stack of kilnd and of its child processes (gdb), or why not."""
        gdb = shutil.which("gdb")
        if not gdb:
            return "(no gdb on this machine)"
        pids = [self.proc.pid] + child_pids(self.proc.pid)
        out = []
        for pid in pids:
            try:
                r = subprocess.run([gdb, "-p", str(pid), "-batch", "-nx", "-ex", "thread apply all bt"],
                                   capture_output=True, text=True, timeout=60)
                out.append(f"== pid {pid}\n{r.stdout[-20000:]}{r.stderr[-2000:]}")
            except (OSError, subprocess.TimeoutExpired) as e:
                out.append(f"== pid {pid}: gdb failed: {e}")
        return "\n".join(out)

    def check_tsan(self):
        """In the TSan build: a data race or a lock-order inversion in kilnd (or a
        worker: their stderr is forwarded into the log) fails whichever test ran it."""
        if SANITIZER == "thread" and "WARNING: ThreadSanitizer" in self.log():
            raise AssertionError(f"ThreadSanitizer reports in kilnd:\n{self.log()[-30000:]}")

    def stop(self, sig=signal.SIGTERM, timeout=60):
        """Signals kilnd and returns its exit code."""
        if self.proc.poll() is None:
            self.proc.send_signal(sig)
        return self.wait(timeout)

    def alive(self):
        return self.proc is not None and self.proc.poll() is None

    def leftovers(self):
        """kiln's temporary files in kilnd's TMPDIR (every name kiln gives one starts
        with "kiln-"): after a clean stop, none (each worker's scratch directory is
        removed by the worker, or by kilnd when the worker was killed)."""
        tmp = self.env["TMPDIR"]
        return sorted(n for n in os.listdir(tmp) if n.startswith("kiln-")) if os.path.isdir(tmp) else []

    def log(self):
        try:
            with open(self.log_path, "rb") as f:
                return f.read().decode(errors="replace")
        except OSError:
            return ""

    def __enter__(self):
        return self.start()

    def __exit__(self, *exc):
        if self.proc and self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()
        if self.proc and not self.log_file.closed:
            self.log_file.close()
        try:
            if self.proc and (not exc or exc[0] is None):
                self.check_tsan()  # a kilnd killed, not stopped, is checked too
        finally:
            self.tmp.cleanup()


def run_kiln(*args, addr=None, env=None, timeout=60, tls_ca=None, tls_cert=None, tls_key=None,
             tls_server_name=None, token_file=None, token=None):
    """Runs the real CLI; returns CompletedProcess with text stdout/stderr. The tls_*
    and token_file arguments become the CLI's options; `token` goes in KILN_TOKEN."""
    cmd = [KILN]
    if addr:
        cmd += ["--addr", addr]
    for name, value in (("--tls-ca", tls_ca), ("--tls-cert", tls_cert), ("--tls-key", tls_key),
                        ("--tls-server-name", tls_server_name), ("--token-file", token_file)):
        if value is not None:
            cmd += [name, value]
    if token is not None:
        env = dict(env or {}, KILN_TOKEN=token)
    cmd += list(args)
    return subprocess.run(cmd, capture_output=True, text=True, env=clean_env(**(env or {})),
                          timeout=timeout)


def child_pids(pid):
    """The pids of `pid`'s children (its main thread's; /proc), [] when it is gone."""
    try:
        with open(f"/proc/{pid}/task/{pid}/children") as f:
            return [int(p) for p in f.read().split()]
    except OSError:
        return []


def run_kilnd_once(*args, env=None, timeout=60, cwd=None):
    """Runs kilnd expecting it to exit by itself (bad flags, --help, start failures)."""
    return subprocess.run([KILND] + list(args), capture_output=True, text=True,
                          env=clean_env(**(env or {})), timeout=timeout, cwd=cwd)


def seed_cache(state_dir, count, size, prefix="seed"):
    """Puts `count` artifacts into STATE/cache with the real cache library; returns
    [(cache_key, artifact_digest, stored_bytes)]."""
    r = subprocess.run([CACHE_SEED, os.path.join(state_dir, "cache"), str(count), str(size), prefix],
                       capture_output=True, text=True, timeout=120)
    if r.returncode != 0:
        raise AssertionError(f"cache_seed failed: {r.stderr}")
    rows = []
    for line in r.stdout.splitlines():
        key, digest, stored = line.split()
        rows.append((key, digest, int(stored)))
    return rows


def blob_path(state_dir, digest):
    """The file that holds blob `digest` (plain or zstd)."""
    shard = os.path.join(state_dir, "cache", "blobs", digest[:2])
    for name in (digest, digest + ".zst"):
        if os.path.exists(os.path.join(shard, name)):
            return os.path.join(shard, name)
    return None


def free_tcp_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class KilnTestCase(unittest.TestCase):
    """Adds a check that a daemon stopped cleanly (exit 0 also means no ASan/LSan report)."""

    def assertCleanStop(self, kilnd, sig=signal.SIGTERM):
        rc = kilnd.stop(sig)
        self.assertEqual(rc, 0, f"kilnd exited {rc}; log:\n{kilnd.log()}")
        self.assertEqual(kilnd.leftovers(), [], "left in kilnd's TMPDIR")
