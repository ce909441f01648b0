"""kilnc, the command-line compiler, as a user runs it: kiln's target names and
iree-compile's spellings, real output files, and the documented exit codes for
bad models, bad targets and removed flags."""
import os
import signal
import struct
import subprocess
import tempfile
import time
import unittest

from kilnharness import EXAMPLES, KILNC, child_pids, clean_env


def kilnc(*args):
    return subprocess.run([KILNC, *args], capture_output=True, text=True, env=clean_env(),
                          timeout=300)


class KilncTest(unittest.TestCase):
    def test_compiles_for_three_kinds(self):
        with tempfile.TemporaryDirectory() as out:
            r = kilnc(os.path.join(EXAMPLES, "mlp.mlir"), "--target", "ada,mi355x",
                      "-t", "rpi5", "-o", os.path.join(out, "deep", "dir"))
            self.assertEqual(r.returncode, 0, r.stderr)
            base = os.path.join(out, "deep", "dir")
            # Aliases resolve to canonical ids: a VMFB per target, the device code beside it.
            self.assertEqual(sorted(os.listdir(base)),
                             ["gfx950", "gfx950.vmfb", "sm_89", "sm_89.vmfb", "videocore_vii",
                              "videocore_vii.vmfb"])
            for t in ("gfx950", "sm_89", "videocore_vii"):
                with open(os.path.join(base, t + ".vmfb"), "rb") as f:
                    head = f.read(76)
                self.assertEqual(head[:4], b"PK\x03\x04")  # the polyglot zip
                self.assertEqual(head[72:76], b"IREE")
            ptx = [f for f in os.listdir(os.path.join(base, "sm_89")) if f.endswith(".ptx")]
            self.assertTrue(ptx)
            with open(os.path.join(base, "sm_89", ptx[0])) as f:
                text = f.read()
            self.assertIn(".target sm_89", text)
            self.assertIn(".version 7.8", text)
            for name in os.listdir(os.path.join(base, "gfx950")):
                with open(os.path.join(base, "gfx950", name), "rb") as f:
                    head = f.read(20)
                self.assertEqual(head[:4], b"\x7fELF")
                self.assertEqual(struct.unpack("<H", head[18:20])[0], 224)  # EM_AMDGPU
            for name in os.listdir(os.path.join(base, "videocore_vii")):
                with open(os.path.join(base, "videocore_vii", name), "rb") as f:
                    magic, version = struct.unpack("<II", f.read(8))
                self.assertEqual((magic, version), (0x07230203, 0x00010300))
            self.assertIn("front half", r.stdout)

    def test_iree_compile_spellings(self):
        with tempfile.TemporaryDirectory() as out:
            r = kilnc(os.path.join(EXAMPLES, "mlp.mlir"), "--iree-hal-target-device=cuda",
                      "--iree-cuda-target=sm_120", "-o", out)
            self.assertEqual(r.returncode, 0, r.stderr)
            self.assertEqual(sorted(os.listdir(out)), ["sm_120", "sm_120.vmfb"])
            # iree-compile's own form: one target, -o FILE.vmfb writes just that file.
            vmfb = os.path.join(out, "model.vmfb")
            r = kilnc(os.path.join(EXAMPLES, "mlp.mlir"), "--iree-hal-target-device=hip",
                      "--iree-rocm-target=gfx1100", "-o", vmfb)
            self.assertEqual(r.returncode, 0, r.stderr)
            with open(vmfb, "rb") as f:
                self.assertEqual(f.read(76)[72:76], b"IREE")
            self.assertEqual(sorted(os.listdir(out)), ["model.vmfb", "sm_120", "sm_120.vmfb"])
            r = kilnc(os.path.join(EXAMPLES, "mlp.mlir"), "--iree-hal-target-device=vulkan",
                      "--iree-cuda-target=sm_120", "-o", out)
            self.assertEqual(r.returncode, 2)
            self.assertIn("not --iree-hal-target-device=vulkan", r.stderr)
            # The CPU spellings: a CPU, a triple alone, and a CPU of another architecture.
            for flags, target in ((["--iree-llvmcpu-target-cpu=znver4"], "znver4"),
                                  (["--iree-llvmcpu-target-triple=aarch64-unknown-linux-gnu"], "aarch64"),
                                  (["--iree-llvmcpu-target-triple=aarch64-unknown-linux-gnu",
                                    "--iree-llvmcpu-target-cpu=cortex-a76"], "cortex-a76"),
                                  (["--iree-llvmcpu-target-triple=riscv64-unknown-linux-gnu"], "riscv64")):
                r = kilnc(os.path.join(EXAMPLES, "mlp.mlir"), "--iree-hal-target-device=local",
                          "--iree-hal-local-target-device-backends=llvm-cpu", *flags, "-o", out)
                self.assertEqual(r.returncode, 0, r.stderr)
                self.assertTrue(os.path.exists(os.path.join(out, target + ".vmfb")), target)
            # --iree-llvmcpu-link-embedded=false: the same ELF, for the system's loader.
            vmfb = os.path.join(out, "system.vmfb")
            r = kilnc(os.path.join(EXAMPLES, "mlp.mlir"), "--iree-llvmcpu-target-cpu=x86-64-v3",
                      "--iree-llvmcpu-link-embedded=false", "-o", vmfb)
            self.assertEqual(r.returncode, 0, r.stderr)
            with open(vmfb, "rb") as f:
                data = f.read()
            self.assertIn(b"system-elf-x86_64", data)
            self.assertNotIn(b"embedded-elf-x86_64", data)
            r = kilnc(os.path.join(EXAMPLES, "mlp.mlir"), "--iree-llvmcpu-target-triple=x86_64-linux-gnu",
                      "--iree-llvmcpu-target-cpu=cortex-a76", "-o", out)
            self.assertEqual(r.returncode, 2)
            self.assertIn("not one of kiln's CPUs for x86_64-linux-gnu", r.stderr)
            r = kilnc(os.path.join(EXAMPLES, "mlp.mlir"), "--iree-hip-target=gfx950", "-o", out)
            self.assertEqual(r.returncode, 2)
            self.assertIn("removed in IREE 3.12", r.stderr)
            self.assertIn("--iree-rocm-target", r.stderr)

    def test_help_ends_the_command_line(self):
        """--help prints the usage whatever follows it (as GNU tools do), and
        iree-compile spellings are not judged when the usage is all that is asked;
        an unknown flag before --help is still refused."""
        for args in (["--help", "--iree-foo=1"], ["-h", "--bogus"], ["--help", "--iree-hip-target=gfx90a"],
                     ["--iree-foo=1", "--help"]):
            r = kilnc(*args)
            self.assertEqual(r.returncode, 0, (args, r.stderr))
            self.assertIn("usage: kilnc", r.stdout)
            self.assertEqual(r.stderr, "")
        r = kilnc("--bogus", "--help")
        self.assertEqual(r.returncode, 2)
        self.assertIn("--bogus", r.stderr)
        # -h as -o's value is a file name, not a request for the usage.
        r = kilnc(os.path.join(EXAMPLES, "mlp.mlir"), "-o", "-h", "--iree-hip-target=gfx90a")
        self.assertEqual(r.returncode, 2)
        self.assertIn("--iree-hip-target", r.stderr)

    def test_an_iree_compile_ci_line_works_unchanged(self):
        """What CI scripts pass iree-compile: the legacy backend flag, the input type,
        tuning flags (accepted with a warning: kiln's output is the same), the model
        on stdin and the VMFB on stdout. Flags that would change IREE's output, and
        input kiln cannot read, are refused by name."""
        model = os.path.join(EXAMPLES, "mlp.mlir")
        with tempfile.TemporaryDirectory() as out:
            plain = os.path.join(out, "plain.vmfb")
            r = kilnc(model, "--iree-vulkan-target=mali-g720", "-o", plain)
            self.assertEqual(r.returncode, 0, r.stderr)
            with open(plain, "rb") as f:
                want = f.read()
            tuned = os.path.join(out, "tuned.vmfb")
            r = kilnc(model, "--iree-hal-target-backends=vulkan-spirv", "--iree-vulkan-target=mali-g720",
                      "--iree-input-type=tosa", "--iree-opt-level=O3", "--output-format=vm-bytecode",
                      "--mlir-print-op-on-diagnostic=false", "-o", tuned)
            self.assertEqual(r.returncode, 0, r.stderr)
            self.assertIn("warning: --iree-opt-level=O3 changes nothing in kiln's output", r.stderr)
            with open(tuned, "rb") as f:
                self.assertEqual(f.read(), want, "the tuning flags changed kiln's output")
            # stdin in, stdout out: the same bytes; the summary line on stderr.
            with open(model, "rb") as f:
                source = f.read()
            p = subprocess.run([KILNC, "-", "--iree-vulkan-target=mali-g720", "-o", "-"], input=source,
                               capture_output=True, env=clean_env(), timeout=300)
            self.assertEqual(p.returncode, 0, p.stderr)
            self.assertEqual(p.stdout, want)
            self.assertIn(b"-> stdout", p.stderr)
            # llvm-cpu alone: the portable x86-64 target.
            cpu = os.path.join(out, "cpu.vmfb")
            r = kilnc(model, "--iree-hal-target-backends=llvm-cpu", "-o", cpu)
            self.assertEqual(r.returncode, 0, r.stderr)
            with open(cpu, "rb") as f:
                self.assertIn(b"embedded-elf-x86_64", f.read())
            # A bad model on stdin names <stdin> in its diagnostics.
            p = subprocess.run([KILNC, "-", "-t", "sm_89", "-o", os.path.join(out, "x.vmfb")], input=b"bad\n",
                               capture_output=True, env=clean_env(), timeout=300)
            self.assertEqual(p.returncode, 3)
            self.assertIn(b"<stdin>:1:1", p.stderr)
        refused = (
            (["--iree-hal-target-backends=cuda"], "needs its chip: --iree-cuda-target=CHIP"),
            (["--iree-hal-target-backends=metal-spirv"], "not 'metal-spirv'"),
            (["-t", "sm_89", "--iree-input-type=stablehlo"], "--iree-input-type=stablehlo needs IREE's importer"),
            (["-t", "sm_89", "--iree-input-demote-f32-to-f16"],
             "--iree-input-demote-f32-to-f16 is an iree-compile flag kiln does not implement"),
            (["-t", "sm_89", "--output-format=vm-c"], "not --output-format=vm-c"),
            (["-t", "sm_89,gfx950", "-o", "-"], "name exactly one target"),
            (["--iree-hal-target-backends=rocm", "--iree-vulkan-target=mali-g720"],
             "target arm5gen is a vulkan device, not --iree-hal-target-backends=rocm"),
        )
        for flags, message in refused:
            r = kilnc(model, *flags)
            self.assertEqual(r.returncode, 2, (flags, r.stderr))
            self.assertIn(message, r.stderr, flags)

    def test_bad_model_exit_3_with_location(self):
        with tempfile.TemporaryDirectory() as d:
            bad = os.path.join(d, "bad.mlir")
            with open(bad, "w") as f:
                f.write("func.func @f(%a: tensor<4xf32>) -> tensor<4xf32> {\n"
                        "  %0 = tosa.add %a, %nope : (tensor<4xf32>, tensor<4xf32>) -> tensor<4xf32>\n"
                        "  return %0 : tensor<4xf32>\n}\n")
            r = kilnc(bad, "-t", "sm_89", "-o", d)
            self.assertEqual(r.returncode, 3, r.stderr)
            self.assertIn(f"{bad}:2:", r.stderr)
            self.assertIn("error:", r.stderr)

    def test_unknown_target_lists_known_ones(self):
        r = kilnc(os.path.join(EXAMPLES, "mlp.mlir"), "-t", "sm_90x")
        self.assertEqual(r.returncode, 2)
        self.assertIn("sm_90x", r.stderr)
        for known in ("sm_89", "gfx950", "videocore_vii"):
            self.assertIn(known, r.stderr)

    def test_cpu_vmfbs(self):
        with tempfile.TemporaryDirectory() as out:
            r = kilnc(os.path.join(EXAMPLES, "convnet.mlir"), "-t", "host,rpi5-cpu,sm_89", "-o", out)
            self.assertEqual(r.returncode, 0, r.stderr)
            self.assertEqual(sorted(os.listdir(out)), ["cortex-a76", "cortex-a76.vmfb", "sm_89", "sm_89.vmfb",
                                                       "x86_64", "x86_64.vmfb"])
            for target, machine in (("x86_64", 62), ("cortex-a76", 183)):
                (so,) = os.listdir(os.path.join(out, target))
                with open(os.path.join(out, target, so), "rb") as f:
                    head = f.read(20)
                self.assertEqual(head[:4], b"\x7fELF")
                self.assertEqual(struct.unpack("<H", head[16:18])[0], 3)        # ET_DYN
                self.assertEqual(struct.unpack("<H", head[18:20])[0], machine)  # EM_X86_64, EM_AARCH64
                with open(os.path.join(out, target + ".vmfb"), "rb") as f:
                    vmfb = f.read()
                self.assertIn(b"embedded-elf-" + (b"x86_64" if machine == 62 else b"arm_64"), vmfb)

    def test_parallel_and_serial_compiles_agree(self):
        # Targets compile in forked children by default; -j 1 compiles in process.
        # The artifacts must be byte-identical either way.
        with tempfile.TemporaryDirectory() as out:
            outs = []
            for jobs in ("1", "4"):
                d = os.path.join(out, "j" + jobs)
                r = kilnc(os.path.join(EXAMPLES, "attention.mlir"), "-j", jobs,
                          "-t", "sm_89,gfx1100,arm5gen", "-o", d)
                self.assertEqual(r.returncode, 0, r.stderr)
                files = {}
                for t in ("sm_89", "gfx1100", "arm5gen"):
                    with open(os.path.join(d, t + ".vmfb"), "rb") as f:
                        files[t] = f.read()
                outs.append(files)
            self.assertEqual(outs[0], outs[1])
            self.assertEqual(kilnc(os.path.join(EXAMPLES, "mlp.mlir"), "-j", "0",
                                   "-t", "sm_89").returncode, 2)

    def test_usage(self):
        for args in ([], ["--bogus"], [os.path.join(EXAMPLES, "mlp.mlir")]):
            self.assertEqual(kilnc(*args).returncode, 2, args)
        r = kilnc("--list-targets")
        self.assertEqual(r.returncode, 0)
        self.assertRegex(r.stdout, r"(?m)^gfx1100\s+hip\s+.*rx7900xtx")



# Fifteen targets of convnet.mlir: about 2 s of back halves on two cores, so a
# signal sent once the back halves run finds kilnc still compiling.
MANY_TARGETS = ("sm_89,sm_120,sm_121,gfx950,gfx942,gfx1100,gfx1101,gfx1200,gfx1201,arm5gen,"
                "videocore_vii,x86_64,znver4,aarch64,riscv64")


def alive(pid):
    """True while `pid` runs (a zombie, or a pid gone, is not)."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


class KilncScratchTest(unittest.TestCase):
    """kilnc's temporary files and its tools' (the ROCDL ld.lld links, ptxas's
    files) lie in $TMPDIR/kilnc-XXXXXX, which goes when kilnc ends: after a
    compile, and when a signal stops it (Ctrl-C, a CI job's timeout), whose back
    halves then die with it."""

    def env(self, tmp):
        env = clean_env()
        env["TMPDIR"] = tmp
        return env

    def test_nothing_left_after_a_compile(self):
        with tempfile.TemporaryDirectory() as tmp, tempfile.TemporaryDirectory() as out:
            r = subprocess.run([KILNC, os.path.join(EXAMPLES, "mlp.mlir"), "-t", "gfx950,sm_89,x86_64",
                                "-o", out], capture_output=True, text=True, env=self.env(tmp), timeout=300)
            self.assertEqual(r.returncode, 0, r.stderr)
            self.assertEqual(os.listdir(tmp), [])

    def test_nothing_left_when_stopped_by_a_signal(self):
        for sig in (signal.SIGINT, signal.SIGTERM):
            with self.subTest(sig=sig), tempfile.TemporaryDirectory() as tmp, \
                    tempfile.TemporaryDirectory() as out:
                p = subprocess.Popen([KILNC, os.path.join(EXAMPLES, "convnet.mlir"), "-t", MANY_TARGETS,
                                      "-o", out], stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                                     env=self.env(tmp))
                try:
                    deadline = time.monotonic() + 60
                    while not child_pids(p.pid) and p.poll() is None and time.monotonic() < deadline:
                        time.sleep(0.002)
                    halves = child_pids(p.pid)
                    self.assertTrue(halves, "kilnc forked no back halves")
                    names = os.listdir(tmp)
                    self.assertEqual(len(names), 1, names)
                    self.assertTrue(names[0].startswith("kilnc-"), names)
                    # What a tool leaves as it works: a nested folder and a file.
                    tool = os.path.join(tmp, names[0], "kiln-toolkit-test", "llvm", "bin")
                    os.makedirs(tool)
                    with open(os.path.join(tool, "ld.lld"), "w") as f:
                        f.write("x")
                    p.send_signal(sig)
                    _, err = p.communicate(timeout=60)
                finally:
                    if p.poll() is None:
                        p.kill()
                        p.wait()
                self.assertEqual(p.returncode, -sig, err)  # it still dies of the signal
                self.assertEqual(os.listdir(tmp), [])
                deadline = time.monotonic() + 30
                while any(alive(h) for h in halves) and time.monotonic() < deadline:
                    time.sleep(0.05)
                self.assertEqual([h for h in halves if alive(h)], [], "back halves outlived kilnc")


if __name__ == "__main__":
    unittest.main()
