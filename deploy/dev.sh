#!/usr/bin/env bash
# kiln's developer entry point; the README's quick start is two of its commands.
#
#   deploy/dev.sh demo    install what is missing, build, start kilnd on loopback
#                         with a local state folder, and show kiln talking to it
#   deploy/dev.sh test    install what is missing, build twice (plain, and with
#                         ASan+UBSan), and run the whole suite in both builds;
#                         build a third time with ThreadSanitizer and run the
#                         daemon's tests there (ctest -L tsan); then build the
#                         VMFB reader's libFuzzer target with clang-22
#                         (build-fuzz) and fuzz it for KILN_FUZZ_SECONDS
#   deploy/dev.sh build   install what is missing and build build/ only
#
# Both are idempotent: packages are installed only when missing and the builds are
# incremental. Environment: KILN_DEMO_ADDR (default 127.0.0.1:7477), JOBS,
# KILN_FUZZ_SECONDS (default 45; 0 skips the fuzz run).
set -euo pipefail

root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$root"
jobs=${JOBS:-$(nproc)}

build() { # build DIR [cmake args...]
  local dir=$1
  shift
  cmake -S . -B "$dir" -DCMAKE_BUILD_TYPE=RelWithDebInfo "$@" >/dev/null
  cmake --build "$dir" -j "$jobs"
}

demo() {
  local addr=${KILN_DEMO_ADDR:-127.0.0.1:7477}
  local state="$root/.kiln-demo/state"
  local log="$root/.kiln-demo/kilnd.log"
  mkdir -p "$root/.kiln-demo"
  echo "== starting kilnd on $addr (state in ${state#"$root"/}, log in ${log#"$root"/})"
  rm -f "$state/kilnd.addr"
  local as_root=()
  if [ "$(id -u)" -eq 0 ]; then
    # kilnd refuses uid 0 unless told (README: Operations > Security); a fresh
    # machine's first login is often root.
    echo "   (running as root: kilnd gets --allow-root; deploy it as a dedicated user)"
    as_root=(--allow-root)
  fi
  build/daemon/kilnd --listen "$addr" --state-dir "$state" "${as_root[@]}" 2>"$log" &
  local pid=$!
  trap 'kill -TERM $pid 2>/dev/null || true' EXIT
  for _ in $(seq 1 200); do
    [ -s "$state/kilnd.addr" ] && break
    if ! kill -0 "$pid" 2>/dev/null; then
      cat "$log" >&2
      echo "kilnd did not start (see above); set KILN_DEMO_ADDR to use another address" >&2
      exit 1
    fi
    sleep 0.05
  done
  local kiln=(build/client/kiln --addr "$addr")
  local out="$root/.kiln-demo/out"
  local targets=sm_89,sm_120,gfx950,gfx1100,mali-g720,videocore_vii
  rm -rf "$out"
  echo "== kiln health; kiln info"
  "${kiln[@]}" health
  "${kiln[@]}" info
  local m
  for m in mlp convnet attention; do
    echo "== kiln compile examples/$m.mlir for the six mission targets (compiled by kilnd's workers; already cached if an earlier demo kept .kiln-demo/state)"
    "${kiln[@]}" compile "examples/$m.mlir" --target "$targets" -o "$out/$m"
  done
  for m in mlp convnet attention; do
    echo "== the same again: every target is a cache hit"
    "${kiln[@]}" compile "examples/$m.mlir" --target "$targets" -o "$out/$m-again"
  done
  local digest
  digest=$(sed -n 's/.*"digest": "\([0-9a-f]*\)".*/\1/p' "$out/mlp/kiln-manifest.json" | head -1)
  echo "== kiln fetch $digest (by digest, verified)"
  "${kiln[@]}" fetch "$digest" -o "$out/fetched.vmfb"
  echo "== kiln inspect: the fetched artifact (an IREE 3.12 VMFB, read without kilnd)"
  build/client/kiln inspect "$out/fetched.vmfb"
  local fleet="$root/.kiln-demo/fleet"
  rm -rf "$fleet"
  echo "== a fleet of legacy VMFBs: 3 old builds (hal 0.6, no executable header, bytecode 16) of"
  echo "   mlp and convnet for sm_89 and gfx950, sources embedded (made by tests/tools/vmfb_fixtures)"
  build/tests/vmfb_fixtures fleet "$fleet/models" --sources examples/mlp.mlir,examples/convnet.mlir \
    --targets sm_89,gfx950 --copies 3 --embed
  echo "== kiln scan: the audit, locally (exit 6: legacy files found)"
  local rc_scan=0
  build/client/kiln scan "$fleet/models" || rc_scan=$?
  [ "$rc_scan" -eq 6 ] || { echo "kiln scan exited $rc_scan, expected 6" >&2; return 1; }
  echo "== kiln recompile: 12 files, 4 unique (source, target) pairs -> 4 compiles at most; none"
  echo "   here: the models were compiled above for these targets, so every file is a cache hit"
  "${kiln[@]}" recompile "$fleet/models" -o "$fleet/hal7"
  echo "== kiln scan of the output: every file current"
  build/client/kiln scan "$fleet/hal7"
  echo "== kiln stats: calls, jobs (compiles, merged requests), cache"
  "${kiln[@]}" stats
  echo "== where everything is"
  echo "  VMFBs and manifests:  ${out#"$root"/}/<model>/<target>.vmfb, kiln-manifest.json"
  echo "  the recompiled fleet: ${fleet#"$root"/}/hal7 (from ${fleet#"$root"/}/models)"
  echo "  kilnd's state:        ${state#"$root"/} (cache/ blobs and index, jobs.db, crashes/)"
  echo "  kilnd's log:          ${log#"$root"/}"
  echo "== stopping kilnd (SIGTERM drains in-flight calls)"
  kill -TERM "$pid"
  local rc=0
  wait "$pid" || rc=$?
  trap - EXIT
  echo "kilnd exited with status $rc; its log:"
  sed 's/^/  /' "$log"
  return "$rc"
}

run_tests() {
  local failed=0
  echo "== build (RelWithDebInfo) and test: unit, integration, valgrind"
  build build
  (cd build && ctest --output-on-failure -j "$jobs") || failed=1
  echo "== build with ASan+UBSan and test: unit, integration"
  build build-asan -DKILN_SANITIZE=ON
  (cd build-asan &&
    ASAN_OPTIONS=detect_leaks=1:abort_on_error=0:strict_string_checks=1 \
      UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1 \
      ctest --output-on-failure -j "$jobs") || failed=1
  echo "== build with ThreadSanitizer and test the daemon's threads: ctest -L tsan"
  # TSAN_OPTIONS (the suppressions for Debian's uninstrumented gRPC and abseil)
  # comes with each test (tests/CMakeLists.txt).
  build build-tsan -DKILN_SANITIZE=thread
  (cd build-tsan && ctest --output-on-failure -j "$jobs" -L tsan) || failed=1
  fuzz || failed=1
  if [ "$failed" -ne 0 ]; then
    echo "kiln: test suite FAILED" >&2
    return 1
  fi
  echo "kiln: test suite passed (plain, ASan+UBSan and TSan builds, fuzzing)"
}

# The VMFB reader's libFuzzer target (tests/fuzz), from the committed corpus
# (tests/fixtures/fuzz/vmfb). Only the target and the two libraries under it are
# built, so this tree never compiles MLIR code; clang's warnings are errors here too.
fuzz() {
  local seconds=${KILN_FUZZ_SECONDS:-45}
  if [ "$seconds" = 0 ]; then
    echo "== fuzzing skipped (KILN_FUZZ_SECONDS=0)"
    return 0
  fi
  local clang
  if ! clang=$(command -v clang-22); then
    echo "== fuzzing SKIPPED: clang-22 is not installed (deploy/deps.sh installs clang-22 and libclang-rt-22-dev)" >&2
    return 0
  fi
  echo "== build the VMFB reader's fuzz target with clang-22 and fuzz it for $seconds s"
  cmake -S . -B build-fuzz -DCMAKE_BUILD_TYPE=RelWithDebInfo -DCMAKE_C_COMPILER="$clang" \
    -DKILN_FUZZ=ON -DKILN_FUZZ_SECONDS="$seconds" >/dev/null &&
    cmake --build build-fuzz -j "$jobs" --target fuzz_vmfb_reader &&
    (cd build-fuzz && ctest --output-on-failure -L fuzz) || return 1
  # libFuzzer's own summary (coverage, executions) of the run that just passed.
  grep -E '^#[0-9]+[[:space:]]+DONE|^stat::(number_of_executed_units|average_exec_per_sec|new_units_added|peak_rss_mb)' \
    build-fuzz/Testing/Temporary/LastTest.log | sed 's/^/  /' || true
}

case "${1:-}" in
  demo) deploy/deps.sh && build build && demo ;;
  test) deploy/deps.sh && run_tests ;;
  build) deploy/deps.sh && build build ;;
  *)
    echo "usage: deploy/dev.sh demo|test|build" >&2
    exit 2
    ;;
esac
