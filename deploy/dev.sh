#!/usr/bin/env bash
# kiln's developer entry point; the README's quick start is two of its commands.
#
#   deploy/dev.sh demo    install what is missing, build, start kilnd on loopback
#                         with a local state folder, and show kiln talking to it
#   deploy/dev.sh test    install what is missing, build twice (plain, and with
#                         ASan+UBSan), and run the whole suite in both builds
#   deploy/dev.sh build   install what is missing and build build/ only
#
# Both are idempotent: packages are installed only when missing and the builds are
# incremental. Environment: KILN_DEMO_ADDR (default 127.0.0.1:7477), JOBS.
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
  build/daemon/kilnd --listen "$addr" --state-dir "$state" 2>"$log" &
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
  echo "== kiln health"
  "${kiln[@]}" health
  echo "== kiln info"
  "${kiln[@]}" info
  echo "== kiln stats"
  "${kiln[@]}" stats
  echo "== kiln cache stats"
  "${kiln[@]}" cache stats
  echo "== kilnc: examples/attention.mlir for the mission's GPU targets (in-process MLIR pipeline)"
  build/compiler/kilnc examples/attention.mlir --target sm_89,sm_120,gfx950,gfx1100,mali-g720,videocore_vii \
    -o "$root/.kiln-demo/out"
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
  if [ "$failed" -ne 0 ]; then
    echo "kiln: test suite FAILED" >&2
    return 1
  fi
  echo "kiln: test suite passed (plain and ASan+UBSan builds)"
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
