"""Security: TLS and mutual TLS on the gRPC port (reloaded on SIGHUP), bearer tokens
with roles (reloaded on SIGHUP), and kilnd's refusal to run as root.

Certificates are made here with the openssl CLI (a CA, a server certificate for
127.0.0.1/localhost, client certificates); kilnd is the real daemon, driven by the
real CLI and by grpcio's secure channels.
"""
import os
import signal
import socket
import ssl
import subprocess
import tempfile
import time
import unittest

import grpc

from kilnharness import (EXAMPLES, KILND, SANITIZED, WRAPPED, Kilnd, KilnTestCase, clean_env,
                         run_kiln, run_kilnd_once)

import health_pb2  # noqa: E402
from kiln.v1 import kiln_pb2  # noqa: E402

KILN = "/kiln.v1.Kiln/"
HEALTH = "/grpc.health.v1.Health/Check"
SLOW = 10 if (WRAPPED or SANITIZED) else 1
CALL_TIMEOUT = 30 * SLOW


def openssl(*args, cwd):
    r = subprocess.run(["openssl"] + list(args), cwd=cwd, capture_output=True, text=True, timeout=60)
    if r.returncode != 0:
        raise AssertionError(f"openssl {' '.join(args)} failed: {r.stderr}")
    return r.stdout


class Pki:
    """A throwaway CA and the certificates the tests need, in a temp dir."""

    def __init__(self):
        self.tmp = tempfile.TemporaryDirectory(prefix="kiln-pki-")
        self.dir = self.tmp.name
        openssl("req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes",
                "-keyout", "ca.key", "-out", "ca.pem", "-days", "2", "-subj", "/CN=kiln-test-ca",
                cwd=self.dir)
        self.ca = self.path("ca.pem")

    def path(self, name):
        return os.path.join(self.dir, name)

    def issue(self, name, cn, serial, server=True, ca="ca"):
        """Signs a new key pair with CA `ca`; returns (cert path, key path)."""
        ext = self.path(name + ".ext")
        with open(ext, "w") as f:
            if server:
                f.write("subjectAltName=IP:127.0.0.1,DNS:localhost\nextendedKeyUsage=serverAuth\n")
            else:
                f.write(f"subjectAltName=DNS:{cn}.clients.example\nextendedKeyUsage=clientAuth\n")
        openssl("req", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes",
                "-keyout", name + ".key", "-out", name + ".csr", "-subj", f"/CN={cn}", cwd=self.dir)
        openssl("x509", "-req", "-in", name + ".csr", "-CA", ca + ".pem", "-CAkey", ca + ".key",
                "-set_serial", str(serial), "-days", "2", "-out", name + ".pem", "-extfile", ext,
                cwd=self.dir)
        return self.path(name + ".pem"), self.path(name + ".key")

    def other_ca(self):
        openssl("req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes",
                "-keyout", "other.key", "-out", "other.pem", "-days", "2", "-subj", "/CN=other-ca",
                cwd=self.dir)
        return "other"

    def cleanup(self):
        self.tmp.cleanup()


def read(path):
    with open(path, "rb") as f:
        return f.read()


def replace_file(path, data):
    tmp = path + ".new"
    with open(tmp, "wb") as f:
        f.write(data)
    os.replace(tmp, path)


def unary(channel, method, request, response_type, metadata=None):
    call = channel.unary_unary(method, request_serializer=lambda m: m.SerializeToString(),
                               response_deserializer=response_type.FromString)
    return call(request, metadata=metadata, timeout=CALL_TIMEOUT)


def info(channel, metadata=None):
    return unary(channel, KILN + "GetServerInfo", kiln_pb2.GetServerInfoRequest(),
                 kiln_pb2.GetServerInfoResponse, metadata)


def served_serial(addr, ca):
    """The serial number (hex, upper case) of the certificate a new TLS connection gets."""
    host, port = addr.rsplit(":", 1)
    ctx = ssl.create_default_context(cafile=ca)
    ctx.set_alpn_protocols(["h2"])
    with socket.create_connection((host, int(port)), timeout=CALL_TIMEOUT) as sock:
        with ctx.wrap_socket(sock, server_hostname=host) as tls:
            return tls.getpeercert()["serialNumber"]


def wait_for_log(kilnd, text, count=1, timeout=30):
    deadline = time.monotonic() + timeout * SLOW
    while time.monotonic() < deadline:
        if kilnd.log().count(text) >= count:
            return
        time.sleep(0.05)
    raise AssertionError(f"kilnd never logged {text!r} ({count}x):\n{kilnd.log()}")


def rpc_lines(kilnd, method):
    return [line for line in kilnd.log().splitlines()
            if "event=rpc " in line and f"method={method} " in line]


class TlsTest(KilnTestCase):
    @classmethod
    def setUpClass(cls):
        cls.pki = Pki()
        cls.server_cert, cls.server_key = cls.pki.issue("server", "kilnd", 0x1001)
        cls.alice_cert, cls.alice_key = cls.pki.issue("alice", "alice", 0x2001, server=False)

    @classmethod
    def tearDownClass(cls):
        cls.pki.cleanup()

    def test_tls_with_the_cli_and_grpcio_and_plaintext_refused(self):
        with Kilnd("--workers", "1", tls_cert=self.server_cert, tls_key=self.server_key) as kilnd:
            r = run_kiln("info", addr=kilnd.addr, tls_ca=self.pki.ca)
            self.assertEqual(r.returncode, 0, r.stderr)
            self.assertIn("kilnd", r.stdout)
            # localhost is in the certificate too; the override checks another name.
            r = run_kiln("health", addr=kilnd.addr, tls_ca=self.pki.ca, tls_server_name="localhost")
            self.assertEqual(r.returncode, 0, r.stderr)

            creds = grpc.ssl_channel_credentials(root_certificates=read(self.pki.ca))
            with grpc.secure_channel(kilnd.addr, creds) as channel:
                self.assertTrue(info(channel).kiln_version)

            # Plaintext to a TLS port: unreachable (3), with the hint to use TLS.
            r = run_kiln("info", addr=kilnd.addr, timeout=60 * SLOW)
            self.assertEqual(r.returncode, 3, r.stderr)
            self.assertIn("--tls-ca", r.stderr)
            with grpc.insecure_channel(kilnd.addr) as channel:
                with self.assertRaises(grpc.RpcError) as cm:
                    info(channel)
                self.assertEqual(cm.exception.code(), grpc.StatusCode.UNAVAILABLE)

            # A CA that did not sign kilnd's certificate: the handshake fails.
            ca2 = self.pki.other_ca()
            r = run_kiln("info", addr=kilnd.addr, tls_ca=self.pki.path(ca2 + ".pem"))
            self.assertEqual(r.returncode, 3, r.stderr)
            self.assertIn("TLS handshake", r.stderr)

            # Without mutual TLS the client is still the peer's host.
            self.assertIn("client=ipv4:127.0.0.1", rpc_lines(kilnd, KILN + "GetServerInfo")[0])
            self.assertIn("event=tls mutual=false", kilnd.log())
            self.assertCleanStop(kilnd)

    def test_mutual_tls(self):
        with Kilnd("--workers", "1", tls_cert=self.server_cert, tls_key=self.server_key,
                   tls_client_ca=self.pki.ca) as kilnd:
            # No client certificate: refused in the handshake.
            r = run_kiln("info", addr=kilnd.addr, tls_ca=self.pki.ca)
            self.assertEqual(r.returncode, 3, r.stderr)
            self.assertIn("--tls-cert", r.stderr)
            creds = grpc.ssl_channel_credentials(root_certificates=read(self.pki.ca))
            with grpc.secure_channel(kilnd.addr, creds) as channel:
                with self.assertRaises(grpc.RpcError) as cm:
                    info(channel)
                self.assertEqual(cm.exception.code(), grpc.StatusCode.UNAVAILABLE)

            # A certificate from a CA kilnd does not trust: refused too.
            other = self.pki.other_ca()
            mallory_cert, mallory_key = self.pki.issue("mallory", "mallory", 0x3001, server=False, ca=other)
            r = run_kiln("info", addr=kilnd.addr, tls_ca=self.pki.ca, tls_cert=mallory_cert,
                         tls_key=mallory_key)
            self.assertEqual(r.returncode, 3, r.stderr)

            # With alice's certificate: served, and alice is the client in the log.
            r = run_kiln("info", addr=kilnd.addr, tls_ca=self.pki.ca, tls_cert=self.alice_cert,
                         tls_key=self.alice_key)
            self.assertEqual(r.returncode, 0, r.stderr)
            creds = grpc.ssl_channel_credentials(root_certificates=read(self.pki.ca),
                                                 private_key=read(self.alice_key),
                                                 certificate_chain=read(self.alice_cert))
            with grpc.secure_channel(kilnd.addr, creds) as channel:
                self.assertTrue(info(channel).kiln_version)
            wait_for_log(kilnd, " client=alice ", count=2)  # logged once the status went out
            lines = rpc_lines(kilnd, KILN + "GetServerInfo")
            self.assertEqual(len(lines), 2, kilnd.log())
            for line in lines:
                self.assertIn(" client=alice ", line)
            self.assertNotIn("mallory", "\n".join(rpc_lines(kilnd, KILN + "GetServerInfo")))

            # A certificate without its key is a usage error on the client side.
            r = run_kiln("info", addr=kilnd.addr, tls_ca=self.pki.ca, tls_cert=self.alice_cert)
            self.assertEqual(r.returncode, 2, r.stderr)
            self.assertIn("--tls-key", r.stderr)
            self.assertCleanStop(kilnd)

    def test_sighup_reloads_the_certificate_and_a_bad_one_is_kept_out(self):
        tmp = tempfile.TemporaryDirectory(prefix="kiln-tls-")
        self.addCleanup(tmp.cleanup)
        cert = os.path.join(tmp.name, "cert.pem")
        key = os.path.join(tmp.name, "key.pem")
        replace_file(cert, read(self.server_cert))
        replace_file(key, read(self.server_key))
        with Kilnd("--workers", "1", tls_cert=cert, tls_key=key) as kilnd:
            self.assertEqual(served_serial(kilnd.addr, self.pki.ca), "1001")
            # A long-lived channel opened before the reload.
            creds = grpc.ssl_channel_credentials(root_certificates=read(self.pki.ca))
            channel = grpc.secure_channel(kilnd.addr, creds)
            self.addCleanup(channel.close)
            info(channel)

            new_cert, new_key = self.pki.issue("server2", "kilnd", 0x1002)
            replace_file(cert, read(new_cert))
            replace_file(key, read(new_key))
            kilnd.proc.send_signal(signal.SIGHUP)
            wait_for_log(kilnd, "event=reload what=tls")
            self.assertIn("serial=1002", kilnd.log())
            self.assertEqual(served_serial(kilnd.addr, self.pki.ca), "1002")
            r = run_kiln("info", addr=kilnd.addr, tls_ca=self.pki.ca)
            self.assertEqual(r.returncode, 0, r.stderr)
            info(channel)  # the listener and existing connections were not dropped

            # A broken certificate: the reload fails, says why, and 1002 stays.
            replace_file(cert, b"-----BEGIN CERTIFICATE-----\nnot base64\n-----END CERTIFICATE-----\n")
            kilnd.proc.send_signal(signal.SIGHUP)
            wait_for_log(kilnd, "event=reload_failed")
            failed = [line for line in kilnd.log().splitlines() if "event=reload_failed" in line][0]
            self.assertIn("tls-cert", failed)
            self.assertIn(cert, failed)
            self.assertEqual(served_serial(kilnd.addr, self.pki.ca), "1002")
            # A key that does not belong to the certificate is refused the same way.
            replace_file(cert, read(new_cert))
            replace_file(key, read(self.alice_key))
            kilnd.proc.send_signal(signal.SIGHUP)
            wait_for_log(kilnd, "event=reload_failed", count=2)
            self.assertIn("does not match", kilnd.log())
            r = run_kiln("info", addr=kilnd.addr, tls_ca=self.pki.ca)
            self.assertEqual(r.returncode, 0, r.stderr)
            self.assertTrue(kilnd.alive())
            channel.close()
            self.assertCleanStop(kilnd)

    def test_half_or_bad_configurations_do_not_start(self):
        with tempfile.TemporaryDirectory(prefix="kiln-tls-") as tmp:
            state = os.path.join(tmp, "state")
            missing = os.path.join(tmp, "missing.pem")
            cases = [
                (["--tls-cert", self.server_cert], ["tls-cert", "tls-key"]),
                (["--tls-key", self.server_key], ["tls-key", "tls-cert"]),
                (["--tls-client-ca", self.pki.ca], ["tls-client-ca", "tls-cert"]),
                (["--tls-cert", missing, "--tls-key", self.server_key], ["tls-cert", missing]),
                (["--tls-cert", self.server_cert, "--tls-key", self.alice_key], ["does not match"]),
                (["--tls-cert", self.server_cert, "--tls-key", self.server_key, "--tls-client-ca", missing],
                 ["tls-client-ca", missing]),
                (["--tls-cert", self.server_key, "--tls-key", self.server_key], ["tls-cert", "no PEM certificate"]),
            ]
            for args, words in cases:
                r = run_kilnd_once("--listen", "127.0.0.1:0", "--state-dir", state, "--metrics-listen", "off",
                                   *args)
                self.assertEqual(r.returncode, 2, (args, r.stderr))
                for word in words:
                    self.assertIn(word, r.stderr, args)
                self.assertFalse(os.path.exists(os.path.join(state, "kilnd.addr")))
            # Every setting is in the one table: --help, --print-config, KILND_*.
            r = run_kilnd_once("--help")
            for name in ("--tls-cert", "--tls-key", "--tls-client-ca", "--token-file", "--allow-root"):
                self.assertIn(name, r.stdout)
            r = run_kilnd_once("--print-config", env={"KILND_TLS_CERT": "/x/cert.pem"})
            self.assertIn("tls-cert = /x/cert.pem", r.stdout.replace('"', ""))

    def test_plaintext_beyond_loopback_warns(self):
        with Kilnd("--workers", "1", listen="0.0.0.0:0") as kilnd:
            wait_for_log(kilnd, "event=insecure_listen")
            self.assertCleanStop(kilnd)
        with Kilnd("--workers", "1") as kilnd:
            self.assertNotIn("insecure_listen", kilnd.log())
            self.assertCleanStop(kilnd)


TOKENS = {
    "reader": ("ci-read", "read", "r" * 20 + "0123456789abcdef"),
    "submitter": ("ci-submit", "submit", "s3cr3t-submit-token-0123456789"),
    "admin": ("ops", "admin", "adm1n-0123456789abcdef0123456789"),
}


def token_text(entries):
    lines = ["# kiln tokens: NAME ROLE TOKEN", ""]
    for name, role, token in entries:
        lines.append(f"{name} {role} {token}")
    return "\n".join(lines) + "\n"


class TokenTest(KilnTestCase):
    @classmethod
    def setUpClass(cls):
        cls.tmp = tempfile.TemporaryDirectory(prefix="kiln-tokens-")
        cls.token_file = os.path.join(cls.tmp.name, "tokens")
        replace_file(cls.token_file, token_text(TOKENS.values()).encode())
        cls.kilnd = Kilnd("--workers", "1", token_file=cls.token_file).start()
        cls.channel = grpc.insecure_channel(cls.kilnd.addr)

    @classmethod
    def tearDownClass(cls):
        cls.channel.close()
        try:
            rc = cls.kilnd.stop()
            log = cls.kilnd.log()
        finally:
            cls.kilnd.__exit__(None, None, None)
            cls.tmp.cleanup()
        assert rc == 0, f"kilnd exited {rc}:\n{log}"
        for _, _, token in TOKENS.values():
            assert token not in log, "a token appeared in kilnd's log"
        assert "not-a-real-token-xxxxxxxx" not in log

    def md(self, who):
        return [("authorization", "Bearer " + TOKENS[who][2])]

    def assertCode(self, code, fn, *args, **kwargs):
        with self.assertRaises(grpc.RpcError) as cm:
            fn(*args, **kwargs)
        self.assertEqual(cm.exception.code(), code, cm.exception.details())
        return cm.exception.details()

    def test_missing_or_unknown_tokens_are_unauthenticated(self):
        msg = self.assertCode(grpc.StatusCode.UNAUTHENTICATED, info, self.channel)
        self.assertIn("no valid bearer token", msg)
        msg = self.assertCode(grpc.StatusCode.UNAUTHENTICATED, info, self.channel,
                              [("authorization", "Bearer not-a-real-token-xxxxxxxx")])
        self.assertIn("no valid bearer token", msg)
        self.assertCode(grpc.StatusCode.UNAUTHENTICATED, info, self.channel,
                        [("authorization", "Basic " + TOKENS["admin"][2])])
        # Streams are checked before their handler runs.
        watch = self.channel.unary_stream(KILN + "WatchJob",
                                          request_serializer=lambda m: m.SerializeToString(),
                                          response_deserializer=kiln_pb2.JobEvent.FromString)
        self.assertCode(grpc.StatusCode.UNAUTHENTICATED,
                        lambda: list(watch(kiln_pb2.WatchJobRequest(job_id="j"), timeout=CALL_TIMEOUT)))
        # Unknown paths too; an unlisted kiln method needs admin (fail closed), and
        # then is UNIMPLEMENTED.
        nope = (self.channel, "/kiln.v1.Kiln/Nope", kiln_pb2.GetServerInfoRequest(),
                kiln_pb2.GetServerInfoResponse)
        self.assertCode(grpc.StatusCode.UNAUTHENTICATED, unary, *nope)
        self.assertCode(grpc.StatusCode.PERMISSION_DENIED, unary, *nope, self.md("submitter"))
        self.assertCode(grpc.StatusCode.UNIMPLEMENTED, unary, *nope, self.md("admin"))
        # The CLI: exit 9 and the hint.
        r = run_kiln("info", addr=self.kilnd.addr)
        self.assertEqual(r.returncode, 9, r.stderr)
        self.assertIn("UNAUTHENTICATED", r.stderr)
        self.assertIn("--token-file", r.stderr)
        r = run_kiln("info", addr=self.kilnd.addr, token="not-a-real-token-xxxxxxxx")
        self.assertEqual(r.returncode, 9, r.stderr)

    def test_health_check_needs_no_token(self):
        resp = unary(self.channel, HEALTH, health_pb2.HealthCheckRequest(), health_pb2.HealthCheckResponse)
        self.assertEqual(resp.status, health_pb2.HealthCheckResponse.SERVING)
        r = run_kiln("health", addr=self.kilnd.addr)
        self.assertEqual(r.returncode, 0, r.stderr)

    def test_roles(self):
        # read: the read-only methods.
        self.assertTrue(info(self.channel, self.md("reader")).kiln_version)
        r = run_kiln("stats", addr=self.kilnd.addr, token=TOKENS["reader"][2])
        self.assertEqual(r.returncode, 0, r.stderr)
        r = run_kiln("cache", "stats", addr=self.kilnd.addr, token=TOKENS["reader"][2])
        self.assertEqual(r.returncode, 0, r.stderr)
        # ...but not Compile, PutSource (a stream) or cache administration.
        msg = self.assertCode(grpc.StatusCode.PERMISSION_DENIED, unary, self.channel, KILN + "Compile",
                              kiln_pb2.CompileRequest(), kiln_pb2.CompileResponse, self.md("reader"))
        self.assertIn("ci-read", msg)
        self.assertIn("role read", msg)
        self.assertIn("/kiln.v1.Kiln/Compile needs role submit", msg)
        put = self.channel.stream_unary(KILN + "PutSource", request_serializer=lambda m: m.SerializeToString(),
                                        response_deserializer=kiln_pb2.PutSourceResponse.FromString)
        self.assertCode(grpc.StatusCode.PERMISSION_DENIED, put, iter([kiln_pb2.PutSourceChunk(data=b"x")]),
                        metadata=self.md("reader"), timeout=CALL_TIMEOUT)
        r = run_kiln("compile", os.path.join(EXAMPLES, "mlp.mlir"), "--target", "sm_89",
                     addr=self.kilnd.addr, token=TOKENS["reader"][2])
        self.assertEqual(r.returncode, 9, r.stderr)
        self.assertIn("PERMISSION_DENIED", r.stderr)
        self.assertIn("needs role submit", r.stderr)

        # submit: compiles (the token's name is the client), but cannot evict.
        with tempfile.TemporaryDirectory(prefix="kiln-out-") as out:
            r = run_kiln("compile", os.path.join(EXAMPLES, "mlp.mlir"), "--target", "sm_89", "-o", out,
                         addr=self.kilnd.addr, token_file=self.submit_token_file(), timeout=600)
            self.assertEqual(r.returncode, 0, r.stderr)
            self.assertTrue(os.path.exists(os.path.join(out, "sm_89.vmfb")))
        compile_lines = rpc_lines(self.kilnd, KILN + "Compile")
        self.assertTrue(any(" client=ci-submit " in line and "code=OK" in line for line in compile_lines),
                        compile_lines)
        r = run_kiln("cache", "gc", "--max-bytes", "1GiB", addr=self.kilnd.addr, token=TOKENS["submitter"][2])
        self.assertEqual(r.returncode, 9, r.stderr)
        self.assertIn("needs role admin", r.stderr)
        self.assertCode(grpc.StatusCode.PERMISSION_DENIED, unary, self.channel, KILN + "CollectGarbage",
                        kiln_pb2.CollectGarbageRequest(), kiln_pb2.CollectGarbageResponse, self.md("submitter"))

        # admin: everything.
        r = run_kiln("cache", "gc", "--max-bytes", "1GiB", addr=self.kilnd.addr, token=TOKENS["admin"][2])
        self.assertEqual(r.returncode, 0, r.stderr)
        r = run_kiln("info", addr=self.kilnd.addr, token=TOKENS["admin"][2])
        self.assertEqual(r.returncode, 0, r.stderr)

    def submit_token_file(self):
        path = os.path.join(self.tmp.name, "submit.token")
        replace_file(path, (TOKENS["submitter"][2] + "\n").encode())
        return path

    def test_malformed_token_files_do_not_start(self):
        cases = [
            (token_text([TOKENS["reader"][:2] + ("short",)]), ":3:", "16"),
            ("# only\n\nci-read root " + "x" * 20 + "\n", ":3:", "unknown role"),
            ("a read " + "y" * 20 + "\nb submit\n", ":2:", "three fields"),
            ("a read " + "y" * 20 + "\nb submit " + "y" * 20 + "\n", ":2:", "distinct"),
            ("bad/name read " + "z" * 20 + "\n", ":1:", "name"),
            ("# nothing\n", "no tokens", "no tokens"),
        ]
        with tempfile.TemporaryDirectory(prefix="kiln-tokens-") as tmp:
            path = os.path.join(tmp, "tokens")
            for text, where, what in cases:
                replace_file(path, text.encode())
                r = run_kilnd_once("--listen", "127.0.0.1:0", "--state-dir", os.path.join(tmp, "state"),
                                   "--metrics-listen", "off", "--token-file", path)
                self.assertEqual(r.returncode, 2, (text, r.stderr))
                self.assertIn("token-file " + path + where if where.startswith(":") else where, r.stderr)
                self.assertIn(what, r.stderr)
                self.assertNotIn("y" * 20, r.stderr)
            r = run_kilnd_once("--listen", "127.0.0.1:0", "--state-dir", os.path.join(tmp, "state"),
                               "--token-file", os.path.join(tmp, "missing"))
            self.assertEqual(r.returncode, 2, r.stderr)
            self.assertIn("token-file " + os.path.join(tmp, "missing"), r.stderr)


class TokenReloadTest(KilnTestCase):
    def test_sighup_reloads_the_token_file(self):
        with tempfile.TemporaryDirectory(prefix="kiln-tokens-") as tmp:
            path = os.path.join(tmp, "tokens")
            old = ("old", "read", "old-token-0123456789abcdef")
            new = ("new", "read", "new-token-0123456789abcdef")
            replace_file(path, token_text([old]).encode())
            with Kilnd("--workers", "1", token_file=path) as kilnd, \
                    grpc.insecure_channel(kilnd.addr) as channel:
                info(channel, [("authorization", "Bearer " + old[2])])
                replace_file(path, token_text([new]).encode())
                kilnd.proc.send_signal(signal.SIGHUP)
                wait_for_log(kilnd, "event=reload what=tokens tokens=1")
                info(channel, [("authorization", "Bearer " + new[2])])
                with self.assertRaises(grpc.RpcError) as cm:
                    info(channel, [("authorization", "Bearer " + old[2])])
                self.assertEqual(cm.exception.code(), grpc.StatusCode.UNAUTHENTICATED)

                # A malformed file on reload: logged with its line, the set is kept.
                replace_file(path, (token_text([new]) + "broken line\n").encode())
                kilnd.proc.send_signal(signal.SIGHUP)
                wait_for_log(kilnd, "event=reload_failed")
                self.assertIn(path + ":4:", kilnd.log())
                info(channel, [("authorization", "Bearer " + new[2])])
                log = kilnd.log()
                self.assertNotIn(old[2], log)
                self.assertNotIn(new[2], log)
                self.assertCleanStop(kilnd)


class RootTest(unittest.TestCase):
    @unittest.skipUnless(os.geteuid() == 0, "needs to run as root")
    def test_refuses_root_without_allow_root(self):
        with tempfile.TemporaryDirectory(prefix="kiln-root-") as tmp:
            env = clean_env()
            env.pop("KILND_ALLOW_ROOT", None)
            args = [KILND, "--listen", "127.0.0.1:0", "--state-dir", os.path.join(tmp, "state"),
                    "--metrics-listen", "off"]
            r = subprocess.run(args, capture_output=True, text=True, env=env, timeout=60)
            self.assertEqual(r.returncode, 2, r.stderr)
            self.assertIn("refusing to run as root", r.stderr)
            self.assertIn("--allow-root", r.stderr)
            self.assertFalse(os.path.exists(os.path.join(tmp, "state")))
            # The flag itself (not only the variable) lets it start.
            p = subprocess.Popen(args + ["--allow-root", "--workers", "1"], stdout=subprocess.DEVNULL,
                                 stderr=subprocess.PIPE, env=env)
            try:
                deadline = time.monotonic() + 30 * SLOW
                while time.monotonic() < deadline and not os.path.exists(
                        os.path.join(tmp, "state", "kilnd.addr")):
                    self.assertIsNone(p.poll())
                    time.sleep(0.05)
                self.assertTrue(os.path.exists(os.path.join(tmp, "state", "kilnd.addr")))
            finally:
                p.send_signal(signal.SIGTERM)
                p.communicate(timeout=60)
            self.assertEqual(p.returncode, 0)


if __name__ == "__main__":
    unittest.main()
