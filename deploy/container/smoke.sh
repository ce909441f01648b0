#!/usr/bin/env bash
# Builds kiln's two images and runs them the way an operator would, with docker or
# podman (whichever is installed; KILN_ENGINE=docker|podman picks one):
#
#   deploy/container/smoke.sh [--no-build]
#
# kiln (the image's default target):
#   - kilnd starts from the entrypoint as uid 10001 and answers /readyz and
#     `kiln health` on the published ports;
#   - it compiles examples/mlp.mlir for four targets, and the files read as
#     current (HAL 0.7) with `kiln inspect`;
#   - `stop` drains it and it exits 0; started again on the same volume, it
#     answers the same compile from its cache (no target compiled).
# kiln-router (--target router) with deploy/k8s/haproxy.cfg, the Kubernetes
# router's config, in front of kilnd containers named as the StatefulSet's
# replicas (network aliases on a user network stand in for the headless Service):
#   - replicas that do not exist stay off the ring; models spread over the two
#     that do, and compiling them again compiles nothing (each stays on one);
#   - a third replica joins once its name resolves and takes new models;
#   - a removed replica leaves, and every model still compiles.
#
# kilnd under systemd (podman only: systemd 252 as PID 1 of a privileged container,
# so the unit's sandbox applies), installed as deploy/systemd/kilnd.service says:
#   - `systemctl start` returns once kilnd sent READY=1; kilnd runs as user kiln in
#     a read-only root with its state directory writable;
#   - it compiles for a GPU of each vendor; `systemctl reload` (SIGHUP) and
#     `systemctl stop` (a drain, exit 0) succeed; started again, it answers the
#     same compile from its cache.
#
# The host side is the kiln CLI of build/ (KILN=path overrides): build it first
# (`deploy/dev.sh build`). Where debian:12 cannot be pulled (an offline builder),
# tag a Debian 12 root file system as debian:12 and debian:12-slim first, e.g.
#   debootstrap --variant=minbase bookworm rootfs http://deb.debian.org/debian
#   tar -C rootfs -c . | podman import - docker.io/library/debian:12
set -euo pipefail
cd "$(dirname "$0")/../.."

build=1
case "${1:-}" in
  "") ;;
  --no-build) build=0 ;;
  *) echo "usage: deploy/container/smoke.sh [--no-build]" >&2; exit 2 ;;
esac
engine="${KILN_ENGINE:-}"
if [ -z "$engine" ]; then
  for e in docker podman; do
    if command -v "$e" >/dev/null 2>&1 && "$e" info >/dev/null 2>&1; then engine="$e"; break; fi
  done
fi
if [ -z "$engine" ]; then
  echo "smoke: no working docker or podman (set KILN_ENGINE)" >&2
  exit 2
fi
kiln="${KILN:-build/client/kiln}"
if [ ! -x "$kiln" ]; then
  echo "smoke: $kiln is not built (deploy/dev.sh build, or set KILN)" >&2
  exit 2
fi
image="${KILN_IMAGE:-localhost/kiln:smoke}"
router_image="${KILN_ROUTER_IMAGE:-localhost/kiln-router:smoke}"
prefix="kiln-smoke-$$"
net="$prefix-net"
vol="$prefix-state"
work="$(mktemp -d)"
containers=()

cleanup() {
  local c
  for c in "${containers[@]}"; do "$engine" rm -f "$c" >/dev/null 2>&1 || true; done
  "$engine" network rm "$net" >/dev/null 2>&1 || true
  "$engine" volume rm "$vol" >/dev/null 2>&1 || true
  rm -rf "$work"
}
trap cleanup EXIT

step() { echo "== $*"; }
# The engine's own chatter (podman without systemd complains about health-check
# timers) goes to a file, shown on failure.
quiet() { "$@" >/dev/null 2>>"$work/engine.log"; }
fail() {
  echo "smoke: FAILED: $*" >&2
  local c
  [ -s "$work/engine.log" ] && { echo "-- $engine's messages" >&2; tail -20 "$work/engine.log" >&2; }
  for c in "${containers[@]}"; do
    echo "-- $engine logs $c (last 20 lines)" >&2
    "$engine" logs "$c" 2>&1 | tail -20 >&2 || true
  done
  exit 1
}

# The host address of container $1's port $2 ("127.0.0.1:NNNNN").
published() { "$engine" port "$1" "$2/tcp" | grep -m1 -E '^(127\.0\.0\.1|0\.0\.0\.0):' | sed 's/^0\.0\.0\.0:/127.0.0.1:/'; }

wait_http() { # URL SECONDS
  local i
  for ((i = 0; i < $2 * 5; i++)); do
    if [ "$(curl -s -o /dev/null -w '%{http_code}' "$1" || true)" = 200 ]; then return 0; fi
    sleep 0.2
  done
  return 1
}

# kiln stats' count of targets compiled, from kilnd at $1.
compiled() { "$kiln" --addr "$1" stats | awk '$1 == "compiles" { print $2; exit }'; }

if [ "$build" = 1 ]; then
  fmt=()
  [ "$engine" = podman ] && fmt=(--format docker) # keeps HEALTHCHECK (OCI has none)
  step "build $image and $router_image with $engine"
  "$engine" build "${fmt[@]}" -f deploy/container/Containerfile -t "$image" . >"$work/build.log" 2>&1 ||
    { tail -30 "$work/build.log" >&2; fail "building $image"; }
  "$engine" build "${fmt[@]}" -f deploy/container/Containerfile --target router -t "$router_image" . \
    >"$work/router.log" 2>&1 || { tail -30 "$work/router.log" >&2; fail "building $router_image"; }
fi

# ---- kiln: one kilnd ----
step "kilnd from the image, state on volume $vol"
quiet "$engine" volume create "$vol"
run_kilnd() {
  containers+=("$prefix-kilnd")
  quiet "$engine" run -d --name "$prefix-kilnd" -p 127.0.0.1::7477 -p 127.0.0.1::7478 -v "$vol:/var/lib/kiln" \
    "$image" || fail "starting $image"
  grpc="$(published "$prefix-kilnd" 7477)"
  http="$(published "$prefix-kilnd" 7478)"
  wait_http "http://$http/readyz" 60 || fail "/readyz never answered 200"
}
run_kilnd
uid="$("$engine" exec "$prefix-kilnd" id -u)"
[ "$uid" = 10001 ] || fail "kilnd runs as uid $uid, not 10001"
"$kiln" --addr "$grpc" health >/dev/null || fail "kiln health"
# The image's HEALTHCHECK command, run as the engine would.
read -r -a check <<<"$("$engine" inspect -f '{{range .Config.Healthcheck.Test}}{{.}} {{end}}' "$prefix-kilnd")"
[ "${check[0]:-}" = CMD ] || fail "the image has no HEALTHCHECK CMD (podman: build with --format docker)"
"$engine" exec "$prefix-kilnd" "${check[@]:1}" >/dev/null || fail "the HEALTHCHECK command failed: ${check[*]:1}"
echo "kilnd is ready as uid $uid: gRPC $grpc, HTTP $http; its HEALTHCHECK passes"

step "compile examples/mlp.mlir for sm_89, gfx950, arm5gen, videocore_vii through the published port"
targets=sm_89,gfx950,arm5gen,videocore_vii
"$kiln" --addr "$grpc" compile examples/mlp.mlir --target "$targets" -o "$work/out" >"$work/compile.log" 2>&1 ||
  { cat "$work/compile.log" >&2; fail "kiln compile"; }
for t in ${targets//,/ }; do
  "$kiln" inspect "$work/out/$t.vmfb" | grep -q ': current$' || fail "$t.vmfb is not a current VMFB"
done
curl -s "http://$http/metrics" | grep -q '^kiln_targets_compiled_total' || fail "/metrics has no kiln_targets_compiled_total"
echo "4 VMFBs, each current (HAL 0.7); /metrics serves kiln_ metrics"

step "stop (SIGTERM drains), start again on the same volume: the compile is a cache hit"
quiet "$engine" stop -t 30 "$prefix-kilnd"
code="$("$engine" inspect -f '{{.State.ExitCode}}' "$prefix-kilnd")"
[ "$code" = 0 ] || fail "kilnd exited with $code on stop"
quiet "$engine" rm "$prefix-kilnd"
run_kilnd
"$kiln" --addr "$grpc" compile examples/mlp.mlir --target "$targets" -o "$work/out2" >/dev/null 2>&1 ||
  fail "kiln compile after the restart"
n="$(compiled "$grpc")"
[ "$n" = 0 ] || fail "kilnd compiled $n target(s) after the restart: its cache did not survive on the volume"
cmp -s "$work/out/gfx950.vmfb" "$work/out2/gfx950.vmfb" || fail "the cached gfx950.vmfb differs"
echo "exit code 0 on stop; after the restart 0 targets compiled, the same bytes served"
quiet "$engine" rm -f "$prefix-kilnd"

# ---- kiln-router over replicas named as in Kubernetes ----
ns=smoke
quiet "$engine" network create "$net"
replica() { # N: start kilnd-N under its StatefulSet DNS name
  local name="$prefix-kilnd-$1"
  containers+=("$name")
  quiet "$engine" run -d --name "$name" --network "$net" \
    --network-alias "kilnd-$1.kilnd-headless.$ns.svc.cluster.local" -p 127.0.0.1::7477 -p 127.0.0.1::7478 \
    "$image" || fail "starting replica $1"
  wait_http "http://$(published "$name" 7478)/readyz" 60 || fail "replica $1 never became ready"
}
replica_addr() { published "$prefix-kilnd-$1" 7477; }
mkdir -p "$work/models"
model() { # I: a model of its own (its own source digest)
  local f="$work/models/m$1.mlir"
  [ -f "$f" ] || { echo "// smoke model $1"; cat examples/mlp.mlir; } >"$f"
  echo "$f"
}
compile_models() { # FROM TO
  local i
  for ((i = $1; i <= $2; i++)); do
    "$kiln" --addr "$router" compile "$(model "$i")" --target gfx950 -o "$work/r/m$i" >/dev/null 2>&1 ||
      fail "compiling model $i through the router"
  done
}
router_log_waits() { # PATTERN SECONDS
  local i
  for ((i = 0; i < $2 * 5; i++)); do
    if "$engine" logs "$prefix-router" 2>&1 | grep -q -E "$1"; then return 0; fi
    sleep 0.2
  done
  return 1
}

step "replicas kilnd-0 and kilnd-1, and kiln-router with deploy/k8s/haproxy.cfg"
replica 0
replica 1
containers+=("$prefix-router")
quiet "$engine" run -d --name "$prefix-router" --network "$net" -e POD_NAMESPACE="$ns" \
  -v "$PWD/deploy/k8s/haproxy.cfg:/etc/kiln-router/haproxy.cfg:ro" -p 127.0.0.1::7477 -p 127.0.0.1::7479 \
  "$router_image" || fail "starting the router"
router="$(published "$prefix-router" 7477)"
wait_http "http://$(published "$prefix-router" 7479)/readyz" 30 || fail "the router's /readyz never answered 200"
uid="$("$engine" exec "$prefix-router" id -u)"
[ "$uid" = 10002 ] || fail "the router runs as uid $uid, not 10002"
echo "router ready as uid $uid at $router"

step "12 models through the router: they spread, and compiling them again compiles nothing"
compile_models 1 12
a0="$(compiled "$(replica_addr 0)")"
a1="$(compiled "$(replica_addr 1)")"
[ "$a0" -gt 0 ] && [ "$a1" -gt 0 ] || fail "12 models did not spread: kilnd-0 compiled $a0, kilnd-1 $a1"
compile_models 1 12
b0="$(compiled "$(replica_addr 0)")"
b1="$(compiled "$(replica_addr 1)")"
[ "$b0" = "$a0" ] && [ "$b1" = "$a1" ] || fail "models moved: compiles went $a0/$a1 -> $b0/$b1"
echo "kilnd-0 compiled $a0, kilnd-1 $a1; the second round: all cache hits"

step "scale to 3: kilnd-2 joins once its name resolves"
replica 2
router_log_waits "kilnd/kilnd-2 .*(UP|READY)" 30 || fail "the router never took kilnd-2 in"
compile_models 13 24
c2="$(compiled "$(replica_addr 2)")"
[ "$c2" -gt 0 ] || fail "kilnd-2 got none of 12 new models"
echo "kilnd-2 compiled $c2 of 12 new models"

step "kilnd-1 removed: it leaves the ring, and all 24 models compile"
quiet "$engine" rm -f "$prefix-kilnd-1"
router_log_waits "kilnd/kilnd-1 is going DOWN" 30 || fail "the router never took kilnd-1 out"
c0="$(compiled "$(replica_addr 0)")"
c2="$(compiled "$(replica_addr 2)")"
compile_models 1 24
d0="$(compiled "$(replica_addr 0)")"
d2="$(compiled "$(replica_addr 2)")"
echo "kilnd-1's models compiled again elsewhere: kilnd-0 $c0 -> $d0, kilnd-2 $c2 -> $d2 targets compiled"
# ---- kilnd under systemd ----
if [ "$engine" != podman ]; then
  step "kilnd under systemd: SKIPPED (needs podman's --systemd=always)"
else
  step "kilnd under systemd 252 (PID 1), installed from deploy/systemd"
  sd="$work/systemd"
  mkdir -p "$sd"
  cp deploy/systemd/kilnd.service deploy/systemd/kilnd.conf deploy/systemd/kiln.sysusers \
    examples/convnet.mlir "$sd/"
  {
    echo "FROM $image"
    echo "USER 0"
    echo "RUN apt-get update && apt-get install -y --no-install-recommends systemd systemd-sysv \\"
    echo " && rm -rf /var/lib/apt/lists/*"
    echo "# The image's kiln user goes: systemd-sysusers makes it from kiln.sysusers."
    echo "RUN userdel kiln && (groupdel kiln || true)"
    echo "COPY kiln.sysusers /usr/lib/sysusers.d/kiln.conf"
    echo "COPY kilnd.conf /etc/kiln/kilnd.conf"
    echo "COPY kilnd.service /etc/systemd/system/kilnd.service"
    echo "COPY convnet.mlir /root/convnet.mlir"
    echo "RUN systemctl enable kilnd"
    echo "STOPSIGNAL SIGRTMIN+3"
    echo 'ENTRYPOINT ["/sbin/init"]'
  } >"$sd/Containerfile"
  quiet "$engine" build --format docker -t "$image-systemd" "$sd" || fail "building the systemd image"
  containers+=("$prefix-systemd")
  quiet "$engine" run -d --name "$prefix-systemd" --privileged --systemd=always "$image-systemd" ||
    fail "starting systemd"
  in_sd() { "$engine" exec "$prefix-systemd" sh -c "$1"; }
  sd_log() { in_sd 'journalctl -u kilnd --no-pager | tail -20' 2>&1 || true; }
  st=unknown
  for ((i = 0; i < 150; i++)); do
    st="$(in_sd 'systemctl is-active kilnd' 2>/dev/null || true)"
    if [ "$st" = active ] || [ "$st" = failed ]; then break; fi
    sleep 0.2
  done
  [ "$st" = active ] || fail "kilnd.service is $st: $(sd_log)"
  # shellcheck disable=SC2016 # expanded inside the container
  in_sd 'stat -c %U /proc/$(systemctl show -p MainPID --value kilnd)' | grep -qx kiln ||
    fail "kilnd does not run as user kiln"
  # shellcheck disable=SC2016
  in_sd 'awk "\$5 == \"/\" && \$6 ~ /^ro/" /proc/$(systemctl show -p MainPID --value kilnd)/mountinfo' |
    grep -q . || fail "kilnd's root is not read-only (ProtectSystem=strict)"
  echo "active after READY=1 (status: $(in_sd 'systemctl show -p StatusText --value kilnd')), user kiln, root read-only"
  # shellcheck disable=SC2016
  in_sd 'kiln compile /root/convnet.mlir --target sm_89,gfx950,arm5gen -o /root/out >/dev/null 2>&1 &&
         for t in sm_89 gfx950 arm5gen; do kiln inspect /root/out/$t.vmfb | grep -q ": current$" || exit 1; done' ||
    fail "compiling under the unit's sandbox: $(sd_log)"
  in_sd 'systemctl reload kilnd' || fail "systemctl reload kilnd: $(sd_log)"
  in_sd 'journalctl -u kilnd --no-pager | grep -q "event=reload"' || fail "kilnd logged no reload: $(sd_log)"
  in_sd 'systemctl stop kilnd'
  r="$(in_sd 'systemctl show -p Result -p ExecMainStatus kilnd' | tr '\n' ' ')"
  [ "$r" = "Result=success ExecMainStatus=0 " ] || fail "after systemctl stop: $r $(sd_log)"
  in_sd 'systemctl start kilnd && kiln compile /root/convnet.mlir --target sm_89,gfx950,arm5gen -o /root/out2 >/dev/null 2>&1' ||
    fail "kilnd after a restart: $(sd_log)"
  n="$(in_sd 'kiln stats' | awk '$1 == "compiles" { print $2; exit }')"
  [ "$n" = 0 ] || fail "kilnd compiled $n target(s) after the restart under systemd"
  echo "3 targets compiled in the sandbox (VMFBs current); reload, stop (exit 0), restart from the cache"
fi

size() { "$engine" image inspect -f '{{.Size}}' "$1" | awk '{ printf "%.0f MB", $1 / 1e6 }'; }
echo "smoke: PASSED ($engine; $image $(size "$image"), $router_image $(size "$router_image"))"
