"""The artifact cache through the real kilnd and the real kiln CLI, on real SQLite
files and blob files: stats, verify (with a corrupted blob and a deleted one),
pin/unpin, gc, repair on start, and the offline `kilnd --verify`."""
import json
import os
import tempfile
import unittest

from kilnharness import (Kilnd, KilnTestCase, blob_path, run_kiln, run_kilnd_once,
                         seed_cache)


def corrupt(path):
    with open(path, "r+b") as f:
        f.seek(os.path.getsize(path) // 2)
        b = f.read(1)
        f.seek(-1, os.SEEK_CUR)
        f.write(bytes([b[0] ^ 0xFF]))


class CacheCommandsTest(KilnTestCase):
    def setUp(self):
        self.tmp = tempfile.TemporaryDirectory(prefix="kiln-cache-it-")
        self.state = os.path.join(self.tmp.name, "state")
        os.makedirs(self.state)
        self.rows = seed_cache(self.state, 6, 200_000)

    def tearDown(self):
        self.tmp.cleanup()

    def kiln_json(self, d, *args):
        r = run_kiln(*args, "--json", addr=d.addr)
        self.assertEqual(r.returncode, 0, r.stderr)
        return json.loads(r.stdout)

    def test_stats_verify_pin_gc(self):
        with Kilnd(state_dir=self.state) as d:
            stats = self.kiln_json(d, "cache", "stats")
            self.assertEqual(stats["artifacts"], 6)
            self.assertEqual(stats["artifact_bytes"], 6 * 200_000)
            self.assertEqual(stats["artifact_stored_bytes"], sum(r[2] for r in self.rows))
            self.assertNotIn(self.state, json.dumps(stats))  # server paths stay in kilnd's log (issue 18, item 12)
            self.assertGreaterEqual(stats["schema_version"], 1)

            r = run_kiln("cache", "stats", addr=d.addr)
            self.assertEqual(r.returncode, 0, r.stderr)
            self.assertRegex(r.stdout, r"artifacts\s+6 \(0 pinned")
            cache_counters = self.kiln_json(d, "stats")["cache"]
            self.assertEqual(cache_counters["artifacts"], 6)
            self.assertEqual(cache_counters["bytes_stored"], stats["artifact_stored_bytes"])

            # Intact store: verify is clean.
            v = self.kiln_json(d, "cache", "verify")
            self.assertEqual(v["blobs_checked"], 6)
            self.assertEqual(v["problems"], [])

            # Corrupt one blob and delete another behind kilnd's back.
            bad_key, bad_digest, _ = self.rows[0]
            gone_key, gone_digest, _ = self.rows[1]
            corrupt(blob_path(self.state, bad_digest))
            os.remove(blob_path(self.state, gone_digest))

            r = run_kiln("cache", "verify", "--dry-run", addr=d.addr)
            self.assertEqual(r.returncode, 1, r.stdout + r.stderr)
            self.assertIn("corrupt blob", r.stdout)
            self.assertIn("(not repaired)", r.stdout)
            self.assertIsNotNone(blob_path(self.state, bad_digest), "dry run must not move files")

            r = run_kiln("cache", "verify", "--json", addr=d.addr)
            self.assertEqual(r.returncode, 1, r.stderr)
            v = json.loads(r.stdout)
            kinds = {p["kind"]: p for p in v["problems"]}
            self.assertEqual(kinds["KIND_CORRUPT_BLOB"]["digest"], bad_digest)
            self.assertTrue(kinds["KIND_CORRUPT_BLOB"]["repaired"])
            self.assertEqual(kinds["KIND_MISSING_BLOB"]["digest"], gone_digest)
            self.assertIsNone(blob_path(self.state, bad_digest))
            qdir = os.path.join(self.state, "cache", "quarantine")
            self.assertTrue(any(n.startswith(bad_digest) for n in os.listdir(qdir)))

            v = self.kiln_json(d, "cache", "verify")
            self.assertEqual(v["problems"], [], "a repaired store verifies clean")
            stats = self.kiln_json(d, "cache", "stats")
            self.assertEqual(stats["artifacts"], 4)
            self.assertEqual(stats["quarantined"], 1)
            self.assertEqual(self.kiln_json(d, "stats")["cache"]["quarantined"], 1)

            # Pin two, then collect down to nothing: only the pinned survive.
            keep = [self.rows[2][1], self.rows[3][0]]  # by digest and by cache key
            for k in keep:
                p = self.kiln_json(d, "cache", "pin", k)
                self.assertEqual(p["artifacts"], 1)
            g = self.kiln_json(d, "cache", "gc", "--max-bytes", "1")
            self.assertEqual(g["artifacts_evicted"], 2)
            self.assertTrue(g["target_unreachable"])
            stats = self.kiln_json(d, "cache", "stats")
            self.assertEqual((stats["artifacts"], stats["pinned"]), (2, 2))
            self.assertIsNotNone(blob_path(self.state, self.rows[2][1]))
            self.assertIsNone(blob_path(self.state, self.rows[4][1]))

            self.kiln_json(d, "cache", "unpin", self.rows[2][1])
            g = self.kiln_json(d, "cache", "gc", "--max-bytes", "1")
            self.assertEqual(g["artifacts_evicted"], 1)
            self.assertCleanStop(d)

    def test_bad_requests(self):
        with Kilnd(state_dir=self.state) as d:
            r = run_kiln("cache", "pin", "not-a-digest", addr=d.addr)
            self.assertEqual(r.returncode, 1)
            self.assertIn("INVALID_ARGUMENT", r.stderr)
            r = run_kiln("cache", "pin", "0" * 64, addr=d.addr)
            self.assertEqual(r.returncode, 1)
            self.assertIn("NOT_FOUND", r.stderr)
            r = run_kiln("cache", "gc", addr=d.addr)  # no capacity configured, no --max-bytes
            self.assertEqual(r.returncode, 1)
            self.assertIn("INVALID_ARGUMENT", r.stderr)
            for args in (["cache"], ["cache", "frob"], ["cache", "pin"], ["cache", "stats", "x"]):
                r = run_kiln(*args, addr=d.addr)
                self.assertEqual(r.returncode, 2, args)
            self.assertCleanStop(d)

    def test_capacity_evicts_in_the_background(self):
        total = sum(r[2] for r in self.rows)
        with Kilnd("--cache-capacity", str(total // 2), "--gc-interval", "200ms",
                   state_dir=self.state) as d:
            import time
            deadline = time.monotonic() + 20
            while time.monotonic() < deadline:
                stats = self.kiln_json(d, "cache", "stats")
                if stats["artifact_stored_bytes"] <= total // 2:
                    break
                time.sleep(0.1)
            self.assertLessEqual(stats["artifact_stored_bytes"], total // 2)
            self.assertEqual(stats["capacity_bytes"], total // 2)
            self.assertCleanStop(d)
            self.assertIn("event=cache_gc", d.log())

    def test_repair_on_start(self):
        # A crash can leave a blob without a row (put interrupted) and tmp files;
        # an operator can delete a blob. Start repairs all three.
        orphan_dir = os.path.join(self.state, "cache", "blobs", "ab")
        os.makedirs(orphan_dir, exist_ok=True)
        orphan = os.path.join(orphan_dir, "ab" + "1" * 62)
        with open(orphan, "wb") as f:
            f.write(b"half a compile")
        with open(os.path.join(self.state, "cache", "tmp", "blob.partial"), "wb") as f:
            f.write(b"x" * 1000)
        os.remove(blob_path(self.state, self.rows[0][1]))
        with Kilnd(state_dir=self.state) as d:
            self.assertFalse(os.path.exists(orphan))
            self.assertEqual(os.listdir(os.path.join(self.state, "cache", "tmp")), [])
            stats = self.kiln_json(d, "cache", "stats")
            self.assertEqual(stats["artifacts"], 5)
            self.assertCleanStop(d)
            self.assertRegex(d.log(), r"event=cache_open .*dangling_rows=1 orphan_blobs=1")

    def test_offline_verify(self):
        r = run_kilnd_once("--state-dir", self.state, "--verify")
        self.assertEqual(r.returncode, 0, r.stdout + r.stderr)
        self.assertIn("verified 6 blob(s)", r.stdout)
        corrupt(blob_path(self.state, self.rows[5][1]))
        r = run_kilnd_once("--state-dir", self.state, "--verify", "--dry-run")
        self.assertEqual(r.returncode, 3, r.stdout + r.stderr)
        self.assertIn("corrupt blob", r.stdout)
        r = run_kilnd_once("--state-dir", self.state, "--verify")
        self.assertEqual(r.returncode, 3)
        r = run_kilnd_once("--state-dir", self.state, "--verify")
        self.assertEqual(r.returncode, 0, "repaired by the previous run: " + r.stdout)
        self.assertIn("verified 5 blob(s)", r.stdout)
        # A dry run changes nothing, not even the repair a normal start would do.
        os.remove(blob_path(self.state, self.rows[4][1]))
        for _ in range(2):
            r = run_kilnd_once("--state-dir", self.state, "--verify", "--dry-run")
            self.assertEqual(r.returncode, 3, r.stdout + r.stderr)
            self.assertIn("missing blob", r.stdout)
            self.assertIn("(not repaired)", r.stdout)
        r = run_kilnd_once("--state-dir", self.state, "--verify")
        self.assertEqual(r.returncode, 3)
        self.assertIn("dropped 1 index row(s)", r.stdout)
        r = run_kilnd_once("--state-dir", self.state, "--verify")
        self.assertEqual(r.returncode, 0, r.stdout)
        # Offline verify respects a running kilnd's lock.
        with Kilnd(state_dir=self.state) as d:
            r = run_kilnd_once("--state-dir", self.state, "--verify")
            self.assertEqual(r.returncode, 1)
            self.assertIn("in use by another kilnd", r.stderr)
            self.assertCleanStop(d)

    def test_unusable_cache_index(self):
        with open(os.path.join(self.state, "cache", "index.db"), "r+b") as f:
            f.write(b"this is not an sqlite database" * 10)
        for name in ("index.db-wal", "index.db-shm"):
            p = os.path.join(self.state, "cache", name)
            if os.path.exists(p):
                os.remove(p)
        r = run_kilnd_once("--listen", "127.0.0.1:0", "--state-dir", self.state)
        self.assertEqual(r.returncode, 1, r.stderr)
        self.assertIn("cannot open the cache", r.stderr)


if __name__ == "__main__":
    unittest.main()
