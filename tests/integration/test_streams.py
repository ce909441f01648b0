"""Streaming RPCs through the real kilnd with grpcio clients (messages generated
from kiln.proto), on real cache directories seeded with the real cache library
(tests/cache_seed):

PutSource (client-streaming): upload in chunks, already_present answered without
reading data, bytecode detection, every error of the contract (no metadata first,
metadata twice, malformed digest, size 0, over max_source_bytes, short and long
uploads, digest mismatch, bytes that are neither MLIR text nor bytecode or
contradict `format`, empty and oversized chunks), two concurrent uploads of one
digest, and a cancelled upload leaving nothing behind.

GetArtifact (server-streaming): by digest and by key, metadata first then chunks
in file order, ranges (inside a chunk, across chunk boundaries, past the end, at
the end), OUT_OF_RANGE, NOT_FOUND, INVALID_ARGUMENT; a corrupt blob ends the
stream with DATA_LOSS after data was sent and is quarantined; a 256 MiB artifact
streamed to a slow reader while kilnd's peak RSS (VmHWM) stays small.

FindArtifacts: every filter, newest-first order, paging with tokens bound to the
filters. The real CLI: `kiln fetch` and `kiln find --all` over these RPCs. Chunks
shrink under a small --max-message-bytes; undecodable messages are
INVALID_ARGUMENT. And the stream life cycle: a client cancel is counted as CANCELLED and
frees the call; SIGTERM lets an open stream finish, and cancels a stuck one at
drain-timeout; kilnd exits 0 (under ASan or valgrind: with no leak reports).
"""
import concurrent.futures
import hashlib
import json
import os
import random
import signal
import socket
import tempfile
import threading
import time
import unittest

import grpc

from kilnharness import (BUILD_DIR, SANITIZED, WRAPPED, Kilnd, KilnTestCase, blob_path, run_kiln,
                         seed_cache)
from kiln.v1 import kiln_pb2  # noqa: E402  (path set up by kilnharness)

KILN = "/kiln.v1.Kiln/"
MIB = 1024 * 1024
CHUNK = 2 * MIB  # the server's chunk_size_bytes (checked against GetServerInfo)
MAX_SOURCE = 2 << 30
SEED_FLAGS = ["--iree-opt-level=O2"]  # what tests/tools/cache_seed keys its artifacts with
SEED_COMPILER_LLVM = "22.1.8"         # ...under "kiln-mlir 0.1.0 llvm 22.1.8"



def ser(m):
    return m.SerializeToString()


class Client:
    """The four calls this suite makes, on one channel."""

    def __init__(self, addr):
        self.channel = grpc.insecure_channel(addr)
        self.put = self.channel.stream_unary(
            KILN + "PutSource", request_serializer=ser,
            response_deserializer=kiln_pb2.PutSourceResponse.FromString)
        self.get = self.channel.unary_stream(
            KILN + "GetArtifact", request_serializer=ser,
            response_deserializer=kiln_pb2.ArtifactChunk.FromString)
        self.find = self.channel.unary_unary(
            KILN + "FindArtifacts", request_serializer=ser,
            response_deserializer=kiln_pb2.FindArtifactsResponse.FromString)
        self.stats = self.channel.unary_unary(
            KILN + "GetStats", request_serializer=ser,
            response_deserializer=kiln_pb2.GetStatsResponse.FromString)
        self.info = self.channel.unary_unary(
            KILN + "GetServerInfo", request_serializer=ser,
            response_deserializer=kiln_pb2.GetServerInfoResponse.FromString)

    def close(self):
        self.channel.close()

    def download(self, timeout=60, **request):
        """(metadata, [(offset, data)...]) of one GetArtifact call."""
        msgs = list(self.get(kiln_pb2.GetArtifactRequest(**request), timeout=timeout))
        return msgs[0], [(m.offset, m.data) for m in msgs[1:]]

    def method_counts(self, method):
        """{code name: count} of finished calls of `method` (GetStats)."""
        for m in self.stats(kiln_pb2.GetStatsRequest(), timeout=10).methods:
            if m.method == KILN + method:
                return {s.code_name: s.count for s in m.by_status}
        return {}


def metadata_msg(digest, size, fmt=0, name="model.mlir"):
    return kiln_pb2.PutSourceChunk(metadata=kiln_pb2.SourceMetadata(
        digest=digest, size_bytes=size, format=fmt, name=name))


def upload_iter(data, digest=None, size=None, fmt=0, chunk=CHUNK, name="model.mlir"):
    yield metadata_msg(digest or hashlib.sha256(data).hexdigest(),
                       len(data) if size is None else size, fmt, name)
    for i in range(0, len(data), chunk):
        yield kiln_pb2.PutSourceChunk(data=data[i:i + chunk])


def mlir_text(n, seed):
    """n bytes of valid UTF-8 MLIR-ish text (with some non-ASCII)."""
    rng = random.Random(seed)
    words = ["func.func", "%arg0", "tensor<4x4xf32>", "arith.addf", "return", "// größe ✓",
             "linalg.matmul", "{", "}", "\n"]
    out = bytearray()
    while len(out) < n:
        out += (rng.choice(words) + " ").encode()
    out = bytes(out[:n])
    return out.decode("utf-8", errors="ignore").encode()[:n]


def corrupt(path, fraction):
    with open(path, "r+b") as f:
        f.seek(int(os.path.getsize(path) * fraction))
        b = f.read(1)
        f.seek(-1, os.SEEK_CUR)
        f.write(bytes([b[0] ^ 0xFF]))


def vm_hwm_kib(pid):
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmHWM:"):
                return int(line.split()[1])
    raise AssertionError("no VmHWM")


def wait_for(cond, timeout=10, what="condition"):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if cond():
            return
        time.sleep(0.02)
    raise AssertionError(f"timed out waiting for {what}")


class StreamTestCase(KilnTestCase):
    def assertStatus(self, code, fn, *args, words=(), **kwargs):
        with self.assertRaises(grpc.RpcError) as ctx:
            fn(*args, **kwargs)
        self.assertEqual(ctx.exception.code(), code, ctx.exception.details())
        for w in ([words] if isinstance(words, str) else words):
            self.assertIn(w, ctx.exception.details())
        return ctx.exception


# ---------------------------------------------------------------------------
# PutSource

class PutSourceTest(StreamTestCase):
    @classmethod
    def setUpClass(cls):
        cls.kilnd = Kilnd().start()
        cls.client = Client(cls.kilnd.addr)
        cls.tmp_dir = os.path.join(cls.kilnd.state_dir, "cache", "tmp")

    @classmethod
    def tearDownClass(cls):
        cls.client.close()
        rc = cls.kilnd.stop()
        log = cls.kilnd.log()
        cls.kilnd.__exit__()
        assert rc == 0, f"kilnd exited {rc}:\n{log}"

    def put(self, requests, timeout=30):
        return self.client.put(requests, timeout=timeout)

    def assertNothingLeft(self, digest):
        wait_for(lambda: os.listdir(self.tmp_dir) == [], what="tmp/ to be empty")
        self.assertIsNone(blob_path(self.kilnd.state_dir, digest))

    def test_upload_then_already_present(self):
        src = mlir_text(3 * MIB + 4321, 1)
        digest = hashlib.sha256(src).hexdigest()
        r = self.put(upload_iter(src, name="resnet.mlir"))
        self.assertEqual(r.digest, digest)
        self.assertEqual(r.size_bytes, len(src))
        self.assertFalse(r.already_present)
        self.assertEqual(r.format, kiln_pb2.SOURCE_FORMAT_MLIR_TEXT)
        self.assertIsNotNone(blob_path(self.kilnd.state_dir, digest))
        self.assertEqual(os.listdir(self.tmp_dir), [])

        # Again: answered from the metadata alone. The data behind it is held back
        # until long after the answer, so the answer cannot have waited for it.
        release = threading.Event()

        def held_back():
            yield metadata_msg(digest, len(src))
            release.wait(20)
            yield kiln_pb2.PutSourceChunk(data=src[:CHUNK])

        t0 = time.monotonic()
        try:
            r = self.put(held_back())
        finally:
            release.set()
        self.assertLess(time.monotonic() - t0, 10)
        self.assertTrue(r.already_present)
        self.assertEqual((r.digest, r.size_bytes), (digest, len(src)))
        self.assertEqual(r.format, kiln_pb2.SOURCE_FORMAT_MLIR_TEXT)
        # ...but the stored size and format must be the ones declared.
        self.assertStatus(grpc.StatusCode.INVALID_ARGUMENT, self.put,
                          iter([metadata_msg(digest, len(src) + 1)]), words="size_bytes")
        self.assertStatus(grpc.StatusCode.INVALID_ARGUMENT, self.put,
                          iter([metadata_msg(digest, len(src), kiln_pb2.SOURCE_FORMAT_MLIR_BYTECODE)]),
                          words="format")

    def test_bytecode_detected_and_small_chunks(self):
        src = b"ML\xefR" + random.Random(2).randbytes(300_000)
        r = self.put(upload_iter(src, chunk=7777))
        self.assertEqual(r.format, kiln_pb2.SOURCE_FORMAT_MLIR_BYTECODE)
        # The magic split over two messages.
        src2 = b"ML\xefR" + random.Random(3).randbytes(1000)
        r = self.put(upload_iter(src2, fmt=kiln_pb2.SOURCE_FORMAT_MLIR_BYTECODE, chunk=2))
        self.assertEqual(r.format, kiln_pb2.SOURCE_FORMAT_MLIR_BYTECODE)
        self.assertEqual(r.size_bytes, len(src2))

    def test_metadata_errors(self):
        INVALID = grpc.StatusCode.INVALID_ARGUMENT
        src = mlir_text(1000, 4)
        digest = hashlib.sha256(src).hexdigest()
        self.assertStatus(INVALID, self.put, iter([]), words="first must carry")
        self.assertStatus(INVALID, self.put, iter([kiln_pb2.PutSourceChunk(data=src)]),
                          words="first message must carry `metadata`")
        self.assertStatus(INVALID, self.put, upload_iter(src, digest="sha256:" + digest[7:]),
                          words="not 64 lowercase hex")
        self.assertStatus(INVALID, self.put, upload_iter(src, digest=digest.upper()))
        self.assertStatus(INVALID, self.put, iter([metadata_msg(digest, 0)]), words="size_bytes is 0")
        self.assertStatus(INVALID, self.put, iter([metadata_msg(digest, 10, fmt=7)]),
                          words=("metadata.format", "7 is not a value of kiln.v1.SourceFormat"))
        self.assertStatus(INVALID, self.put, upload_iter(src, name="x" * 1025), words="name")
        # Over max_source_bytes: refused on the metadata, no data needed.
        e = self.assertStatus(grpc.StatusCode.RESOURCE_EXHAUSTED, self.put,
                              iter([metadata_msg(digest, MAX_SOURCE + 1)]),
                              words="max_source_bytes")
        self.assertIn(str(MAX_SOURCE), e.details())
        # Metadata twice.
        self.assertStatus(INVALID, self.put,
                          iter([metadata_msg(digest, len(src)), metadata_msg(digest, len(src))]),
                          words="only the first message may carry metadata")
        self.assertNothingLeft(digest)

    def test_data_errors_leave_nothing(self):
        INVALID = grpc.StatusCode.INVALID_ARGUMENT
        src = mlir_text(2 * MIB + 10, 5)
        digest = hashlib.sha256(src).hexdigest()
        # Fewer bytes than declared.
        e = self.assertStatus(INVALID, self.put, upload_iter(src[:-1], digest=digest, size=len(src)),
                              words=f"received {len(src) - 1} bytes")
        self.assertIn(str(len(src)), e.details())
        # More bytes than declared.
        self.assertStatus(INVALID, self.put, upload_iter(src, digest=digest, size=len(src) - 5),
                          words="more bytes than the declared size_bytes")
        # The bytes hash to another digest: both named.
        wrong = hashlib.sha256(b"other").hexdigest()
        e = self.assertStatus(INVALID, self.put, upload_iter(src, digest=wrong))
        self.assertIn(wrong, e.details())
        self.assertIn(digest, e.details())
        # An empty chunk, and one over chunk_size_bytes.
        def with_chunk(data):
            yield metadata_msg(digest, len(src))
            yield kiln_pb2.PutSourceChunk(data=data)
        self.assertStatus(INVALID, self.put, with_chunk(b""), words="data chunk of 0 bytes")
        self.assertStatus(INVALID, self.put, with_chunk(src[:CHUNK + 1]),
                          words=f"data chunk of {CHUNK + 1} bytes")
        self.assertNothingLeft(digest)
        self.assertNothingLeft(wrong)

    def test_format_errors(self):
        INVALID = grpc.StatusCode.INVALID_ARGUMENT
        text = mlir_text(100_000, 6)
        bad = text[:50_000] + b"\xff\xfe" + text[50_000:]
        d_bad = hashlib.sha256(bad).hexdigest()
        self.assertStatus(INVALID, self.put, upload_iter(bad, chunk=20_000),
                          words="byte 50000 is not valid UTF-8")
        # A truncated multi-byte sequence at the very end.
        cut = text + "ö".encode()[:1]
        self.assertStatus(INVALID, self.put, upload_iter(cut), words="not valid UTF-8")
        # Declared text, sent bytecode; declared bytecode, sent text.
        code = b"ML\xefR" + bytes(1000)
        self.assertStatus(INVALID, self.put,
                          upload_iter(code, fmt=kiln_pb2.SOURCE_FORMAT_MLIR_TEXT),
                          words="format is MLIR_TEXT")
        self.assertStatus(INVALID, self.put,
                          upload_iter(text, fmt=kiln_pb2.SOURCE_FORMAT_MLIR_BYTECODE),
                          words="format is MLIR_BYTECODE")
        self.assertNothingLeft(d_bad)

    def test_concurrent_uploads_of_one_digest(self):
        src = mlir_text(3 * MIB, 7)
        digest = hashlib.sha256(src).hexdigest()
        with concurrent.futures.ThreadPoolExecutor(4) as pool:
            results = list(pool.map(lambda _: self.put(upload_iter(src, chunk=256 * 1024)),
                                    range(4)))
        for r in results:
            self.assertEqual((r.digest, r.size_bytes), (digest, len(src)))
        self.assertIsNotNone(blob_path(self.kilnd.state_dir, digest))
        self.assertEqual(os.listdir(self.tmp_dir), [])

    def test_cancel_mid_upload_leaves_nothing(self):
        src = mlir_text(3 * MIB, 8)
        digest = hashlib.sha256(src).hexdigest()
        release = threading.Event()
        before = self.client.method_counts("PutSource").get("CANCELLED", 0)

        def stalls():
            yield metadata_msg(digest, len(src))
            yield kiln_pb2.PutSourceChunk(data=src[:CHUNK])
            release.wait(30)

        fut = self.client.put.future(stalls(), timeout=60)
        try:
            # The server is spooling: its tmp file exists.
            wait_for(lambda: os.listdir(self.tmp_dir) != [], what="the spool file")
            fut.cancel()
            with self.assertRaises(grpc.FutureCancelledError):
                fut.result()
            self.assertNothingLeft(digest)
            wait_for(lambda: self.client.method_counts("PutSource").get("CANCELLED", 0) == before + 1,
                     what="the cancelled call to be counted")
        finally:
            release.set()
        # Nothing was stored: the next upload is not "already present".
        r = self.put(upload_iter(src))
        self.assertFalse(r.already_present)


# ---------------------------------------------------------------------------
# GetArtifact

SEED_SIZE = 3 * CHUNK + 100  # four chunks, the last short


class GetArtifactTest(StreamTestCase):
    @classmethod
    def setUpClass(cls):
        cls.tmp = tempfile.TemporaryDirectory(prefix="kiln-streams-it-")
        cls.state = os.path.join(cls.tmp.name, "state")
        os.makedirs(cls.state)
        cls.rows = seed_cache(cls.state, 3, SEED_SIZE, "get")
        cls.kilnd = Kilnd(state_dir=cls.state).start()
        cls.client = Client(cls.kilnd.addr)
        key, digest, _ = cls.rows[0]
        meta, chunks = cls.client.download(digest=digest)
        cls.whole = b"".join(d for _, d in chunks)

    @classmethod
    def tearDownClass(cls):
        cls.client.close()
        rc = cls.kilnd.stop()
        log = cls.kilnd.log()
        cls.kilnd.__exit__()
        cls.tmp.cleanup()
        assert rc == 0, f"kilnd exited {rc}:\n{log}"

    def test_whole_artifact_by_digest(self):
        self.assertEqual(self.client.info(kiln_pb2.GetServerInfoRequest(), timeout=10).chunk_size_bytes, CHUNK)
        key, digest, _ = self.rows[0]
        meta, chunks = self.client.download(digest=digest)
        # First message: metadata only.
        self.assertTrue(meta.HasField("metadata"))
        self.assertEqual(meta.data, b"")
        m = meta.metadata
        self.assertEqual(m.digest, digest)
        self.assertEqual(m.size_bytes, SEED_SIZE)
        self.assertEqual(m.cache_key, key)
        self.assertEqual(m.canonical_target, "sm_89")
        self.assertEqual(m.target_kind, kiln_pb2.TARGET_KIND_CUDA)
        self.assertEqual(m.executable_format, "cuda-nvptx-fb")
        self.assertEqual(m.hal_module_version, 7)
        self.assertEqual((m.vm_bytecode_version_major, m.vm_bytecode_version_minor), (17, 0))
        self.assertGreater(m.created_unix_ms, 0)
        self.assertEqual(list(m.provenance.flags), SEED_FLAGS)
        self.assertEqual(dict(m.provenance.labels), {"suite": "get"})
        self.assertEqual(m.provenance.submitter, "cache_seed")
        self.assertEqual(m.provenance.compiler.name, "kiln-mlir")
        self.assertEqual(m.provenance.source_digest, "%064x" % 1)
        # Then data in file order, chunks of at most chunk_size_bytes.
        offset = 0
        for off, data in chunks:
            self.assertEqual(off, offset)
            self.assertGreater(len(data), 0)
            self.assertLessEqual(len(data), CHUNK)
            offset += len(data)
        self.assertEqual(offset, SEED_SIZE)
        self.assertEqual(hashlib.sha256(b"".join(d for _, d in chunks)).hexdigest(), digest)

    def test_ranges(self):
        digest = self.rows[0][1]
        whole = self.whole
        cases = [
            (1000, 5000),             # inside the first chunk
            (CHUNK - 5, 10),          # across a chunk boundary
            (CHUNK, CHUNK),           # exactly the second chunk
            (SEED_SIZE - 10, 0),      # the tail
            (SEED_SIZE - 10, 1000),   # past the end: cut at the end
            (0, 1),
            (2 * CHUNK + 7, 0),
        ]
        for offset, length in cases:
            with self.subTest(offset=offset, length=length):
                meta, chunks = self.client.download(digest=digest, offset=offset, length=length)
                self.assertEqual(meta.metadata.size_bytes, SEED_SIZE)  # always the whole artifact
                end = SEED_SIZE if length == 0 else min(SEED_SIZE, offset + length)
                self.assertEqual(b"".join(d for _, d in chunks), whole[offset:end])
                if chunks:
                    self.assertEqual(chunks[0][0], offset)
        # Offset equal to the size: the metadata only.
        meta, chunks = self.client.download(digest=digest, offset=SEED_SIZE)
        self.assertEqual(chunks, [])
        self.assertEqual(meta.metadata.digest, digest)
        e = self.assertStatus(grpc.StatusCode.OUT_OF_RANGE, self.client.download, digest=digest,
                              offset=SEED_SIZE + 1)
        self.assertIn(str(SEED_SIZE), e.details())

    def test_errors(self):
        INVALID = grpc.StatusCode.INVALID_ARGUMENT
        self.assertStatus(INVALID, self.client.download, words="no selector")
        self.assertStatus(INVALID, self.client.download, digest="sha256:" + "a" * 64,
                          words="not 64 lowercase hex")
        self.assertStatus(grpc.StatusCode.NOT_FOUND, self.client.download, digest="ab" * 32,
                          words="ab" * 32)
        key = kiln_pb2.ArtifactKey(source_digest="%064x" % 1, target="no-such-gpu", flags=SEED_FLAGS)
        self.assertStatus(INVALID, self.client.download, key=key, words="sm_89")
        key = kiln_pb2.ArtifactKey(source_digest="%064x" % 1, target="sm_89",
                                   flags=["--iree-cuda-target=sm_80"])
        self.assertStatus(INVALID, self.client.download, key=key)
        key = kiln_pb2.ArtifactKey(source_digest="xyz", target="sm_89")
        self.assertStatus(INVALID, self.client.download, key=key, words="source_digest")

    def test_by_key(self):
        info = self.client.info(kiln_pb2.GetServerInfoRequest(), timeout=10)
        key, digest, _ = self.rows[1]
        req = kiln_pb2.ArtifactKey(source_digest="%064x" % 2, target="ADA", flags=SEED_FLAGS)
        if info.compiler.llvm_version != SEED_COMPILER_LLVM:
            # cache_seed keys its artifacts under LLVM 22.1.8; another LLVM is another key.
            self.assertStatus(grpc.StatusCode.NOT_FOUND, self.client.download, key=req,
                              words="Compile it")
            return
        meta, chunks = self.client.download(key=req)
        self.assertEqual(meta.metadata.digest, digest)
        self.assertEqual(meta.metadata.cache_key, key)
        self.assertEqual(hashlib.sha256(b"".join(d for _, d in chunks)).hexdigest(), digest)
        # Other flags: another key, not built.
        req = kiln_pb2.ArtifactKey(source_digest="%064x" % 2, target="sm_89",
                                   flags=["--iree-opt-level=O3"])
        self.assertStatus(grpc.StatusCode.NOT_FOUND, self.client.download, key=req,
                          words="Compile it")

    def test_cli_fetch(self):
        """The real CLI downloads through GetArtifact and checks the digest."""
        _, digest, _ = self.rows[2]
        out = os.path.join(self.tmp.name, "fetched.vmfb")
        r = run_kiln("fetch", digest, "-o", out, addr=self.kilnd.addr, timeout=120)
        self.assertEqual(r.returncode, 0, r.stdout + r.stderr)
        with open(out, "rb") as f:
            self.assertEqual(hashlib.sha256(f.read()).hexdigest(), digest)
        r = run_kiln("fetch", "cd" * 32, "-o", out + ".missing", addr=self.kilnd.addr)
        self.assertNotEqual(r.returncode, 0)
        self.assertIn("cd" * 32, r.stderr)

    def test_parallel_downloads(self):
        def one(row):
            meta, chunks = self.client.download(digest=row[1])
            return hashlib.sha256(b"".join(d for _, d in chunks)).hexdigest()
        with concurrent.futures.ThreadPoolExecutor(6) as pool:
            got = list(pool.map(one, self.rows * 2))
        self.assertEqual(got, [r[1] for r in self.rows * 2])


class CorruptArtifactTest(StreamTestCase):
    def test_corrupt_blob_is_data_loss_mid_stream_then_not_found(self):
        with tempfile.TemporaryDirectory(prefix="kiln-streams-it-") as tmp:
            state = os.path.join(tmp, "state")
            os.makedirs(state)
            size = 4 * CHUNK + 3  # several read jobs: the damage is found in a later one
            (_, digest, _), = seed_cache(state, 1, size, "corrupt")
            path = blob_path(state, digest)
            corrupt(path, 0.8)
            with Kilnd(state_dir=state) as d:
                client = Client(d.addr)
                call = client.get(kiln_pb2.GetArtifactRequest(digest=digest), timeout=30)
                received = []
                with self.assertRaises(grpc.RpcError) as ctx:
                    for m in call:
                        received.append(m)
                self.assertEqual(ctx.exception.code(), grpc.StatusCode.DATA_LOSS,
                                 ctx.exception.details())
                self.assertIn(digest, ctx.exception.details())
                # The class of failure and the blob, not the server's folders (issue
                # 18, item 12): the path is in kilnd's log.
                self.assertNotIn(os.path.realpath(state), ctx.exception.details())
                self.assertIn(os.path.realpath(state), d.log())
                # Mid-stream: the metadata and some data went out before the error.
                self.assertTrue(received[0].HasField("metadata"))
                self.assertGreaterEqual(len(received), 2)
                sent = sum(len(m.data) for m in received)
                self.assertLess(sent, size)  # never the whole (bad) artifact
                # Quarantined by the cache: gone from blobs/, kept in quarantine/.
                self.assertIsNone(blob_path(state, digest))
                qdir = os.path.join(state, "cache", "quarantine")
                self.assertTrue(any(n.startswith(digest) for n in os.listdir(qdir)))
                self.assertStatus(grpc.StatusCode.NOT_FOUND, client.download, digest=digest)
                client.close()
                self.assertCleanStop(d)


class LargeArtifactTest(StreamTestCase):
    def test_256_mib_with_bounded_memory(self):
        size = (32 if WRAPPED else 256) * MIB
        with tempfile.TemporaryDirectory(prefix="kiln-streams-it-") as tmp:
            state = os.path.join(tmp, "state")
            os.makedirs(state)
            (_, digest, _), = seed_cache(state, 1, size, "large")
            with Kilnd(state_dir=state) as d:
                client = Client(d.addr)
                client.info(kiln_pb2.GetServerInfoRequest(), timeout=30)  # warm up gRPC
                base = vm_hwm_kib(d.proc.pid)
                call = client.get(kiln_pb2.GetArtifactRequest(digest=digest), timeout=600)
                h = hashlib.sha256()
                n = 0
                first = next(call)
                self.assertEqual(first.metadata.size_bytes, size)
                # A slow reader: kilnd must hold its reads back, not buffer ahead.
                time.sleep(1.0)
                mid = vm_hwm_kib(d.proc.pid)
                for i, m in enumerate(call):
                    self.assertEqual(m.offset, n)
                    h.update(m.data)
                    n += len(m.data)
                    if i < 16:
                        time.sleep(0.02)
                self.assertEqual(n, size)
                self.assertEqual(h.hexdigest(), digest)
                peak = vm_hwm_kib(d.proc.pid)
                print(f"\n  kilnd VmHWM: {base / 1024:.1f} MiB before, {mid / 1024:.1f} MiB after "
                      f"1 s of a stalled reader, {peak / 1024:.1f} MiB after streaming "
                      f"{size // MIB} MiB (+{(peak - base) / 1024:.1f} MiB)")
                if not (WRAPPED or SANITIZED):  # valgrind and ASan keep freed memory
                    self.assertLess(peak - base, 24 * 1024, "kilnd buffered the artifact")
                client.close()
                self.assertCleanStop(d)


def _hpack_literal(name, value):
    """One header as HPACK's literal without indexing, new name, no Huffman."""
    out = b"\x00"
    for part in (name.encode(), value.encode()):
        assert len(part) < 127
        out += bytes([len(part)]) + part
    return out


def _h2_frame(kind, flags, stream, payload):
    return len(payload).to_bytes(3, "big") + bytes([kind, flags]) + stream.to_bytes(4, "big") + payload


def stalled_downloads(addr, request, streams):
    """A raw HTTP/2 client that opens `streams` GetArtifact calls on one connection
    and never reads: no WINDOW_UPDATE, so kilnd can send 64 KiB in all and then
    waits. Python's grpc cannot play this client (its core reads ahead whatever
    the server sends). Returns the socket; closing it ends the calls."""
    host, port = addr.rsplit(":", 1)
    sock = socket.create_connection((host, int(port)), timeout=10)
    out = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n" + _h2_frame(4, 0, 0, b"") + _h2_frame(4, 1, 0, b"")
    body = request.SerializeToString()
    message = b"\x00" + len(body).to_bytes(4, "big") + body
    for i in range(streams):
        sid = 1 + 2 * i
        headers = b"".join(_hpack_literal(k, v) for k, v in (
            (":method", "POST"), (":scheme", "http"), (":path", KILN + "GetArtifact"), (":authority", addr),
            ("content-type", "application/grpc"), ("te", "trailers")))
        out += _h2_frame(1, 4, sid, headers) + _h2_frame(0, 1, sid, message)  # END_HEADERS; END_STREAM
    sock.sendall(out)
    return sock


class StalledDownloadTest(StreamTestCase):
    """Clients that open downloads and never read (issue 18, item 1): each held a
    chunk or two of the artifact in kilnd for as long as it stayed open, 600 of
    them 2.6 GB. A client may have client-max-downloads open; one that takes
    nothing for download-stall-timeout is ended (its memory goes back)."""

    def test_stalled_downloads_are_capped_and_ended(self):
        size = 24 * MIB
        with tempfile.TemporaryDirectory(prefix="kiln-streams-it-") as tmp:
            state = os.path.join(tmp, "state")
            os.makedirs(state)
            (_, digest, _), = seed_cache(state, 1, size, "stall")
            stall_s = 6 if WRAPPED else 3  # wall clock: the raw client never reads, valgrind or not
            with Kilnd("--client-max-downloads", "3", "--download-stall-timeout", f"{stall_s}s",
                       state_dir=state) as d:
                client = Client(d.addr)
                client.info(kiln_pb2.GetServerInfoRequest(), timeout=30)
                sock = stalled_downloads(d.addr, kiln_pb2.GetArtifactRequest(digest=digest), 3)
                try:
                    wait_for(lambda: client.stats(kiln_pb2.GetStatsRequest(), timeout=10).calls_in_flight >= 4,
                             30, "three downloads in flight")
                    t0 = time.monotonic()
                    # A fourth from the same client (its host): refused.
                    with self.assertRaises(grpc.RpcError) as e:
                        client.download(digest=digest)
                    self.assertEqual(e.exception.code(), grpc.StatusCode.RESOURCE_EXHAUSTED, e.exception.details())
                    self.assertIn("client-max-downloads = 3", e.exception.details())
                    # kilnd ends the stalled three once they took nothing for the timeout.
                    wait_for(lambda: client.method_counts("GetArtifact").get("DEADLINE_EXCEEDED") == 3,
                             stall_s + 30, "the stalled downloads to be ended")
                    self.assertGreaterEqual(time.monotonic() - t0, stall_s - 1)
                finally:
                    sock.close()
                # The slots are free again: a reader gets the whole artifact.
                meta, chunks = client.download(digest=digest, timeout=120)
                self.assertEqual(sum(len(c) for _, c in chunks), size)
                self.assertRegex(d.log(), r"event=limit_hit\b.*limit=client-max-downloads")
                self.assertIn("download-stall-timeout", d.log())
                client.close()
                self.assertCleanStop(d)


class SmallMessagesTest(StreamTestCase):
    """--max-message-bytes below the default chunk size, and undecodable messages."""

    def test_small_limit_and_malformed_messages(self):
        with tempfile.TemporaryDirectory(prefix="kiln-streams-it-") as tmp:
            state = os.path.join(tmp, "state")
            os.makedirs(state)
            (_, digest, _), = seed_cache(state, 1, 200_000, "small")
            with Kilnd("--max-message-bytes", "64KiB", state_dir=state) as d:
                client = Client(d.addr)
                # Chunks shrink to fit the limit.
                meta, chunks = client.download(digest=digest)
                self.assertGreater(len(chunks), 3)
                self.assertTrue(all(len(c) <= 64 * 1024 - 1024 for _, c in chunks))
                self.assertEqual(hashlib.sha256(b"".join(c for _, c in chunks)).hexdigest(), digest)
                # A chunk over the limit is refused by gRPC itself.
                src = mlir_text(200_000, 11)
                self.assertStatus(grpc.StatusCode.RESOURCE_EXHAUSTED, client.put,
                                  upload_iter(src, chunk=100_000), timeout=30)
                # ...and one within the limit but over chunk_size_bytes by kilnd.
                self.assertStatus(grpc.StatusCode.INVALID_ARGUMENT, client.put,
                                  upload_iter(src, chunk=64 * 1024 - 512), timeout=30,
                                  words="chunk_size_bytes")
                r = client.put(upload_iter(src, chunk=60_000), timeout=30)
                self.assertFalse(r.already_present)
                # Bytes that are not the method's message.
                raw_get = client.channel.unary_stream(KILN + "GetArtifact")
                self.assertStatus(grpc.StatusCode.INVALID_ARGUMENT,
                                  lambda: list(raw_get(b"\xff\xff\xff", timeout=10)),
                                  words="not a valid kiln.v1.GetArtifactRequest")
                raw_put = client.channel.stream_unary(KILN + "PutSource")
                self.assertStatus(grpc.StatusCode.INVALID_ARGUMENT, raw_put,
                                  iter([b"\x0a\x10abc"]), timeout=10,
                                  words="not a valid kiln.v1.PutSourceChunk")
                self.assertEqual(os.listdir(os.path.join(state, "cache", "tmp")), [])
                client.close()
                self.assertCleanStop(d)


# ---------------------------------------------------------------------------
# FindArtifacts

class FindArtifactsTest(StreamTestCase):
    @classmethod
    def setUpClass(cls):
        cls.tmp = tempfile.TemporaryDirectory(prefix="kiln-streams-it-")
        cls.state = os.path.join(cls.tmp.name, "state")
        os.makedirs(cls.state)
        # cache_seed keys artifact i by source i+1: the second run replaces (and
        # relabels) the first three, which become the newest.
        old = seed_cache(cls.state, 6, 1000, "old")
        time.sleep(0.01)
        new = seed_cache(cls.state, 3, 1000, "new")
        cls.new_digests = {r[1] for r in new}
        cls.old_digests = {r[1] for r in old[3:]}
        cls.kilnd = Kilnd(state_dir=cls.state).start()
        cls.client = Client(cls.kilnd.addr)

    @classmethod
    def tearDownClass(cls):
        cls.client.close()
        rc = cls.kilnd.stop()
        log = cls.kilnd.log()
        cls.kilnd.__exit__()
        cls.tmp.cleanup()
        assert rc == 0, f"kilnd exited {rc}:\n{log}"

    def find(self, **kw):
        return self.client.find(kiln_pb2.FindArtifactsRequest(**kw), timeout=10)

    def all_pages(self, limit, **kw):
        out, token, pages = [], "", 0
        while True:
            r = self.find(limit=limit, page_token=token, **kw)
            self.assertLessEqual(len(r.artifacts), limit)
            out += list(r.artifacts)
            pages += 1
            token = r.next_page_token
            if not token:
                return out, pages
            self.assertLess(pages, 100)

    def test_paging_and_order(self):
        arts, pages = self.all_pages(2)
        self.assertEqual(pages, 3)  # 2 + 2 + 2, and the last page says it is the last
        digests = [a.digest for a in arts]
        self.assertEqual(len(digests), len(set(digests)))
        self.assertEqual(set(digests), self.new_digests | self.old_digests)
        self.assertEqual([(a.created_unix_ms, a.digest) for a in arts],
                         sorted(((a.created_unix_ms, a.digest) for a in arts),
                                key=lambda t: (-t[0], t[1])))
        # The relabelled ones were stored last: they come first.
        self.assertEqual({a.digest for a in arts[:3]}, self.new_digests)
        # One page with the default limit; the page size may change between pages.
        r = self.find()
        self.assertEqual([a.digest for a in r.artifacts], digests)
        self.assertEqual(r.next_page_token, "")
        first = self.find(limit=1)
        rest = self.find(limit=10, page_token=first.next_page_token)
        self.assertEqual([a.digest for a in first.artifacts] + [a.digest for a in rest.artifacts],
                         digests)
        # Metadata as GetArtifact describes it.
        meta, _ = self.client.download(digest=digests[0], offset=1000)
        self.assertEqual(meta.metadata.cache_key, arts[0].cache_key)
        self.assertEqual(dict(meta.metadata.provenance.labels), dict(arts[0].provenance.labels))

    def test_filters(self):
        def digests(**kw):
            return {a.digest for a in self.all_pages(2, **kw)[0]}
        everything = self.new_digests | self.old_digests
        self.assertEqual(digests(labels={"suite": "new"}), self.new_digests)
        self.assertEqual(digests(labels={"suite": "old"}), self.old_digests)
        self.assertEqual(digests(labels={"suite": "new", "other": "x"}), set())
        one = self.find(source_digest="%064x" % 1)
        self.assertEqual(len(one.artifacts), 1)
        self.assertEqual(dict(one.artifacts[0].provenance.labels), {"suite": "new"})
        self.assertEqual(digests(target="ada"), everything)
        self.assertEqual(digests(target="sm_89"), everything)
        self.assertEqual(digests(target="gfx950"), set())
        self.assertEqual(digests(hal_module_version=7), everything)
        self.assertEqual(digests(hal_module_version=6), set())
        self.assertEqual(digests(legacy_only=True), set())
        arts = self.find().artifacts
        newest = max(a.created_unix_ms for a in arts)
        oldest = min(a.created_unix_ms for a in arts)
        self.assertEqual(digests(created_after_unix_ms=newest + 1), set())
        self.assertEqual(digests(created_after_unix_ms=oldest), everything)
        self.assertEqual(digests(created_before_unix_ms=oldest), set())
        self.assertEqual(digests(created_before_unix_ms=newest + 1, created_after_unix_ms=oldest),
                         everything)

    def test_cli_find(self):
        """The real CLI pages through FindArtifacts."""
        r = run_kiln("find", "--label", "suite=new", "--limit", "1", "--all", "--json",
                     addr=self.kilnd.addr)
        self.assertEqual(r.returncode, 0, r.stdout + r.stderr)
        got = json.loads(r.stdout)
        self.assertEqual({a["digest"] for a in got["artifacts"]}, self.new_digests)

    def test_errors(self):
        INVALID = grpc.StatusCode.INVALID_ARGUMENT
        self.assertStatus(INVALID, self.find, limit=1001, words="1000")
        self.assertStatus(INVALID, self.find, source_digest="abc", words="source_digest")
        self.assertStatus(INVALID, self.find, target="nonsense", words="sm_89")
        self.assertStatus(INVALID, self.find, labels={"Bad Key": "v"}, words="label key")
        self.assertStatus(INVALID, self.find, page_token="garbage", words="malformed")
        token = self.find(limit=1).next_page_token
        self.assertTrue(token)
        self.assertStatus(INVALID, self.find, limit=1, page_token=token, labels={"suite": "new"},
                          words="different filters")
        self.assertStatus(INVALID, self.find, page_token=token[:-1] + ("0" if token[-1] != "0" else "1"),
                          words="different filters")
        self.assertStatus(INVALID, self.find, page_token=token[:40], words="malformed")


# ---------------------------------------------------------------------------
# Stream life cycle: cancel and drain

class StreamLifecycleTest(StreamTestCase):
    def setUp(self):
        self.tmp = tempfile.TemporaryDirectory(prefix="kiln-streams-it-")
        self.state = os.path.join(self.tmp.name, "state")
        os.makedirs(self.state)

    def tearDown(self):
        self.tmp.cleanup()

    def test_client_cancel_frees_the_call(self):
        (_, digest, _), = seed_cache(self.state, 1, 24 * MIB, "cancel")
        with Kilnd(state_dir=self.state) as d:
            client = Client(d.addr)
            for _ in range(3):
                call = client.get(kiln_pb2.GetArtifactRequest(digest=digest), timeout=60)
                self.assertTrue(next(call).HasField("metadata"))
                next(call)  # one chunk, then stop reading and cancel
                call.cancel()
            wait_for(lambda: client.method_counts("GetArtifact").get("CANCELLED", 0) == 3,
                     what="three cancelled calls counted")
            stats = client.stats(kiln_pb2.GetStatsRequest(), timeout=10)
            self.assertEqual(stats.calls_in_flight, 1)  # this GetStats call only
            # The real CLI sees the same counters.
            r = run_kiln("stats", "--json", addr=d.addr)
            self.assertEqual(r.returncode, 0, r.stderr)
            self.assertIn(KILN + "GetArtifact", r.stdout)
            # The daemon is fine afterwards.
            meta, chunks = client.download(digest=digest, offset=24 * MIB - 10)
            self.assertEqual(len(b"".join(c for _, c in chunks)), 10)
            client.close()
            self.assertCleanStop(d)
            self.assertIn("method=/kiln.v1.Kiln/GetArtifact", d.log())
            self.assertIn("code=CANCELLED", d.log())

    def test_sigterm_lets_an_open_upload_finish(self):
        with Kilnd(state_dir=self.state) as d:
            client = Client(d.addr)
            src = mlir_text(3 * MIB, 9)
            digest = hashlib.sha256(src).hexdigest()
            go_on = threading.Event()

            def paused():
                yield metadata_msg(digest, len(src))
                yield kiln_pb2.PutSourceChunk(data=src[:CHUNK])
                go_on.wait(30)
                for i in range(CHUNK, len(src), CHUNK):
                    yield kiln_pb2.PutSourceChunk(data=src[i:i + CHUNK])

            fut = client.put.future(paused(), timeout=60)
            tmp_dir = os.path.join(self.state, "cache", "tmp")
            wait_for(lambda: os.listdir(tmp_dir) != [], what="the upload to start")
            d.proc.send_signal(signal.SIGTERM)
            wait_for(lambda: "event=draining" in d.log(), what="the drain to start")
            self.assertIn("in_flight=1", d.log())
            time.sleep(0.3)
            self.assertTrue(d.alive(), "kilnd exited with a stream open")
            go_on.set()
            r = fut.result(timeout=30)
            self.assertEqual((r.digest, r.already_present), (digest, False))
            client.close()
            self.assertEqual(d.wait(30), 0, d.log())
            self.assertIsNotNone(blob_path(self.state, digest))

    def test_drain_timeout_cancels_stuck_streams(self):
        (_, digest, _), = seed_cache(self.state, 1, 40 * MIB, "stuck")
        with Kilnd("--drain-timeout", "1s", state_dir=self.state) as d:
            client = Client(d.addr)
            # A download whose reader stopped (flow control stalls kilnd's sends)...
            call = client.get(kiln_pb2.GetArtifactRequest(digest=digest), timeout=60)
            next(call)
            # ...and an upload whose writer stopped.
            src = mlir_text(3 * MIB, 10)
            release = threading.Event()

            def stalls():
                yield metadata_msg(hashlib.sha256(src).hexdigest(), len(src))
                yield kiln_pb2.PutSourceChunk(data=src[:CHUNK])
                release.wait(30)

            fut = client.put.future(stalls(), timeout=60)
            tmp_dir = os.path.join(self.state, "cache", "tmp")
            try:
                wait_for(lambda: os.listdir(tmp_dir) != [], what="the upload to start")
                t0 = time.monotonic()
                d.proc.send_signal(signal.SIGTERM)
                self.assertEqual(d.wait(30), 0, d.log())
                self.assertLess(time.monotonic() - t0, 15)
                self.assertIn("event=drain_timeout cancelled_calls=2", d.log())
                # The cancelled upload took its spool file with it, before exit.
                self.assertEqual(os.listdir(tmp_dir), [])
                with self.assertRaises(grpc.RpcError):
                    fut.result(timeout=10)
                with self.assertRaises(grpc.RpcError):
                    for _ in call:
                        pass
            finally:
                release.set()
                client.close()


if __name__ == "__main__":
    unittest.main()
