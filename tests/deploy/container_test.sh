#!/usr/bin/env bash
# The container image end to end: builds deploy/container/Containerfile with podman,
# starts a coordinator and a CPU worker in containers of it, and trains the quickstart
# job (examples/mlp-synthetic.yaml) through the CLI in a third one, to SUCCEEDED.
#   container_test.sh SOURCE_DIR WORK_DIR
# Labelled `container` and left out of scripts/test.sh (building the image takes long):
#   cd build && ctest -L container --output-on-failure
# Exit 77 (skipped), with the reason: no podman, no base image and none can be made, or
# podman cannot run a container here. STOKE_CONTAINER_IMAGE names an image built already
# (from the same Containerfile) to test instead of building one.
# The containers share the host's network (the coordinator on a loopback port) and a
# data folder in WORK_DIR (the coordinator's database, the checkpoints the worker writes).
set -uo pipefail
source_dir="$1"
work="$2"
image="${STOKE_CONTAINER_IMAGE:-localhost/stoke-test:latest}"
base="${STOKE_CONTAINER_BASE:-docker.io/library/debian:12}"
name="stoke-test-$$"

skip() {
  echo "SKIP: $*"
  exit 77
}
command -v podman > /dev/null || skip "no podman (Debian: apt-get install podman)"

# The base image: present, pulled, or made with debootstrap (deploy/container/debian-base.sh).
if ! podman image exists "$base"; then
  if ! podman pull -q "$base" > /dev/null 2>&1; then
    if [ "$(id -u)" -ne 0 ] || ! command -v debootstrap > /dev/null; then
      skip "no $base: it cannot be pulled, and debootstrap (as root) is not at hand to make it"
    fi
    "$source_dir/deploy/container/debian-base.sh" "$base" || skip "cannot make $base"
  fi
fi

# Can podman run a container here? Some hosts (a VM without CAP_SYS_RESOURCE, cgroups in
# hybrid mode) refuse podman's defaults but run runc with limits no higher than the
# caller's; try those next, and say what failed if neither runs.
podman_global=()
run_flags=(--network host)
build_flags=(--network host)
probe() { podman "${podman_global[@]}" run --rm "${run_flags[@]}" "$base" true 2>&1; }
if ! first_error=$(probe); then
  podman_global=(--runtime runc)
  # runc refuses even the caller's own process limit here; far fewer are plenty.
  nproc=$(ulimit -u)
  [ "$nproc" = unlimited ] || [ "$nproc" -gt 8192 ] && nproc=8192
  run_flags+=(--ulimit "nofile=$(ulimit -n):$(ulimit -n)" --ulimit "nproc=$nproc:$nproc")
  build_flags+=(--isolation chroot)
  if ! command -v runc > /dev/null || ! second_error=$(probe); then
    skip "podman cannot run a container here: $first_error${second_error:+; with runc: $second_error}"
  fi
  echo "podman's defaults fail here ($first_error); using runc and the caller's limits"
fi
pm() { podman "${podman_global[@]}" "$@"; }

mkdir -p "$work"
if [ -n "${STOKE_CONTAINER_IMAGE:-}" ]; then
  echo "== testing $image (STOKE_CONTAINER_IMAGE), not building"
  pm image exists "$image" || { echo "FAIL: no image $image"; exit 1; }
else
  echo "== building $image (first build: tens of minutes; later ones reuse the layers)"
  if ! pm build --pull=never "${build_flags[@]}" -f "$source_dir/deploy/container/Containerfile" \
    -t "$image" "$source_dir" > "$work/build.log" 2>&1; then
    tail -n 40 "$work/build.log"
    echo "FAIL: podman build (log: $work/build.log)"
    exit 1
  fi
  grep -E '^collect-libs:' "$work/build.log"
fi
pm image inspect --format 'image size: {{.Size}} bytes' "$image"

data="$work/data-$$"
mkdir -p "$data"
chmod 0777 "$data"  # the image runs as its own user
# shellcheck disable=SC2317  # run by the trap
cleanup() {
  pm rm -f -t 5 "$name-coordinator" "$name-worker" > /dev/null 2>&1
  rm -rf "$data"
}
trap cleanup EXIT
volume=(-v "$data:/var/lib/stoke")

echo "== coordinator"
pm run -d --name "$name-coordinator" "${run_flags[@]}" "${volume[@]}" "$image" \
  coordinator --address 127.0.0.1:0 --metrics-address "" > /dev/null || {
  echo "FAIL: podman run (coordinator)"
  exit 1
}
for _ in $(seq 1 60); do [ -s "$data/coordinator.address" ] && break; sleep 0.5; done
if [ ! -s "$data/coordinator.address" ]; then
  pm logs "$name-coordinator"
  echo "FAIL: the coordinator in its container wrote no address"
  exit 1
fi
address=$(cat "$data/coordinator.address")
echo "coordinator at $address"

echo "== CPU worker"
pm run -d --name "$name-worker" "${run_flags[@]}" "${volume[@]}" "$image" \
  worker --coordinator "$address" --device cpu --id container-worker > /dev/null || {
  echo "FAIL: podman run (worker)"
  exit 1
}
cli() { pm run --rm "${run_flags[@]}" "$image" stoke --address "$address" "$@"; }
for _ in $(seq 1 60); do cli cluster -o json 2> /dev/null | grep -q container-worker && break; sleep 1; done
cli cluster

echo "== the quickstart job, from the CLI in a container"
watch_log="$work/watch.log"
cli submit /opt/stoke/share/examples/mlp-synthetic.yaml --watch > "$watch_log" 2>&1
rc=$?
grep -vE 'step [0-9]+/[0-9]+ \((([1-9]|[1-8][0-9])%)' "$watch_log"
status=0
if [ $rc -ne 0 ] || ! grep -q 'SUCCEEDED' "$watch_log"; then
  echo "FAIL: the job did not end SUCCEEDED (stoke exit $rc)"
  pm logs --tail 30 "$name-coordinator"
  pm logs --tail 30 "$name-worker"
  status=1
fi
grep -q 'container-worker' <(cli status 1 2>&1) || {
  echo "FAIL: stoke status 1 does not name the container's worker"
  status=1
}
[ $status -eq 0 ] && echo "PASS: the quickstart job SUCCEEDED on a worker in a container"
exit $status
