#!/usr/bin/env bash
# Installs the Debian 12 packages kiln needs to build, test and run, and nothing
# when they are all present (so it is cheap to call before every build).
# Runs apt-get as root, or through sudo.
set -euo pipefail

# What building kiln needs (`deps.sh --build` installs only these: the container
# image's build stage), then what testing it needs on top.
build_packages=(
  # toolchain
  build-essential cmake pkg-config
  # LLVM/MLIR 22: the built-in compiler; lld links AMDGPU code objects
  llvm-22-dev libmlir-22-dev mlir-22-tools lld-22
  # the service
  libgrpc-dev libprotobuf-c-dev protobuf-c-compiler libuv1-dev libsqlite3-dev sqlite3
  # JSON output of the CLI (json-c: well kept, no hand-written JSON); SHA-256 from
  # OpenSSL's libcrypto; zstd for blobs at rest; zlib's crc32 for VMFB zip entries
  libjson-c-dev libssl-dev libzstd-dev zlib1g-dev
  # XXH3-128 from xxHash: the fast at-rest integrity check on every blob read
  # (SHA-256 stays the content address and the audit of kiln cache verify)
  libxxhash-dev
  # observability: /metrics, /healthz and /readyz over libmicrohttpd (a well-kept
  # HTTP/1.1 server: no hand-written HTTP parsing); sd_notify readiness from libsystemd
  libmicrohttpd-dev libsystemd-dev
)
test_packages=(
  # tests: cmocka units; the interop client is Python with Debian's grpcio
  libcmocka-dev protobuf-compiler python3 python3-grpcio python3-protobuf valgrind
  # test_deploy parses the Kubernetes manifests (deploy/k8s) with PyYAML
  python3-yaml
  # promtool (from prometheus): test_metrics checks the /metrics exposition with it
  prometheus
  # scale-out: several kilnd behind HAProxy (Debian's 2.6) hashing on the
  # kiln-source-digest header (deploy/haproxy/); test_scale and bench_scale run it
  haproxy
  # validating generated device code: spirv-val (llvm-readobj comes with llvm-22)
  spirv-tools
  # running it: the coverage corpus's Vulkan kernels execute on Mesa's software
  # Vulkan device (lavapipe), through the Vulkan loader
  mesa-vulkan-drivers libvulkan-dev
  # bench_kernels measures kiln's CPU kernels against OpenBLAS (sgemm)
  libopenblas-dev
  # the VMFB reader's libFuzzer target (clang with its runtime)
  clang-22 libclang-rt-22-dev
)

case "${1:-}" in
  "") packages=("${build_packages[@]}" "${test_packages[@]}") ;;
  --build) packages=("${build_packages[@]}") ;;
  *) echo "usage: deploy/deps.sh [--build]  (--build: only what building needs)" >&2; exit 2 ;;
esac

missing=()
for p in "${packages[@]}"; do
  if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q '^install ok installed$'; then
    missing+=("$p")
  fi
done
if [ ${#missing[@]} -eq 0 ]; then
  exit 0
fi

echo "kiln: installing ${#missing[@]} missing package(s): ${missing[*]}" >&2
sudo=()
if [ "$(id -u)" -ne 0 ]; then
  if command -v sudo >/dev/null 2>&1; then
    sudo=(sudo)
  else
    echo "kiln: need root or sudo to install: ${missing[*]}" >&2
    exit 1
  fi
fi
export DEBIAN_FRONTEND=noninteractive
"${sudo[@]}" apt-get update -q >&2
"${sudo[@]}" apt-get install -y -q --no-install-recommends "${missing[@]}" >&2
