#!/usr/bin/env bash
# The one command for a GPU host, end to end, within ten minutes. From the repository root:
#   scripts/gpu-check.sh
# In order:
#   1. build: the daemons, the CLI and the GPU test programs, against the CUDA LibTorch;
#   2. daemons: stoke-coordinator and stoke-worker start (--help) and the worker lists the
#      GPUs the driver reports;
#   3. gpu_tests, python_model_gpu_tests, script_job_gpu_tests;
#   4. a real coordinator with one local worker per GPU, used through the CLI: the
#      Fashion-MNIST fast example to 94% (seconds from submit recorded), the Python ViT
#      example to SUCCEEDED, a one-GPU script job to SUCCEEDED, and /metrics scraped and
#      checked (promtool where the host has it, else the Python prometheus_client parser;
#      the scrape is kept in the output folder to check with promtool elsewhere);
#   5. user code contained, and its cost: 300 steps of the ViT example in stoke-sandbox (the
#      default; as root, as a uid of its own) and with --sandbox=false, samples/s of each.
# It prints one line a part (ok / FAILED / skipped, with why), ends with "N passed, N
# failed", and exits non-zero when any part failed. A part whose prerequisite failed is
# skipped, saying which.
# Libraries: on a host with no package registry, carry the Debian packages of
# `scripts/fetch-debs.sh .gpu-deps` with the tree; they are unpacked and used from there
# (STOKE_GPU_DEPS names another folder). Otherwise the host's own packages are used.
# LibTorch: what scripts/find-libtorch.sh finds; it must be a CUDA build.
# Data the host may lack travels in .gpu-data/ (git-ignored): fashion-mnist/ (from Debian's
# dataset-fashion-mnist). Logs land in $OUT (or ./gpu-out).
# GPU_CHECK_SKIP="gpu_tests ..." leaves those GPU test programs out (neither built nor run;
# each is reported skipped), for a rerun on a machine with little time left.
set -uo pipefail
cd "$(dirname "$0")/.." || exit 1
root=$PWD
out="${OUT:-$root/gpu-out}"
mkdir -p "$out"
build="build-gpu"
bin="$root/$build/bin"
began=$(date +%s)

lines=()
passed=0
failed=0
# note ok|FAILED|skipped PART DETAIL: records one part's outcome and prints it at once.
note() {
  local line
  line=$(printf '%-8s %-24s %s' "$1" "$2" "$3")
  lines+=("$line")
  echo "$line"
  case $1 in
    ok) passed=$((passed + 1)) ;;
    FAILED) failed=$((failed + 1)) ;;
  esac
}
summary() {
  {
    echo
    echo "== gpu-check at $(git rev-parse --short=12 HEAD 2> /dev/null || echo '?'):" \
      "$(head -n 1 "$out/machine.txt" 2> /dev/null), $(($(date +%s) - began)) s (logs in $out)"
    printf '%s\n' "${lines[@]}"
    echo "$passed passed, $failed failed"
  } | tee "$out/summary.txt"
  [ "$failed" -eq 0 ]
}
# give_up PART DETAIL: a prerequisite failed; the rest cannot run.
give_up() {
  note FAILED "$1" "$2"
  summary
  exit 1
}

deps="${STOKE_GPU_DEPS:-.gpu-deps}"
if [ -f "$deps/setup.sh" ]; then
  # shellcheck source=/dev/null
  source "$deps/setup.sh" "$deps" > "$out/deps.log" 2>&1 ||
    give_up deps "unpacking the carried packages in $deps failed ($out/deps.log)"
fi

gpus=$(nvidia-smi -L 2> /dev/null | grep -c '^GPU ')
{
  nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader 2>&1 | head -n 1
  echo "date: $(date -u +%FT%TZ), GPUs: $gpus"
} > "$out/machine.txt"
[ "$gpus" -gt 0 ] || give_up machine "nvidia-smi lists no GPU: this is no GPU host"
torch=$(scripts/find-libtorch.sh) || give_up machine "no LibTorch found (STOKE_LIBTORCH)"
python3 -c 'import torch; print("torch", torch.__version__, "cuda", torch.version.cuda)' \
  >> "$out/machine.txt" 2>&1
[[ "$torch" == cuda\ * ]] ||
  give_up machine "LibTorch is not a CUDA build ($torch): set STOKE_LIBTORCH"
note ok machine "$(tr '\n' ' ' < "$out/machine.txt")"

fmnist=/usr/share/datasets/fashion-mnist
if [ -d .gpu-data/fashion-mnist ] && [ ! -d "$fmnist" ]; then
  mkdir -p /usr/share/datasets && cp -r .gpu-data/fashion-mnist /usr/share/datasets/
fi

# skipping NAME: whether GPU_CHECK_SKIP names it.
skipping() { [[ " ${GPU_CHECK_SKIP:-} " == *" $1 "* ]]; }
suites=()
for suite in gpu_tests python_model_gpu_tests script_job_gpu_tests; do
  skipping "$suite" || suites+=("$suite")
done

# 1. Build what the check runs (the benchmarks and the CPU suites are not needed here).
mapfile -t torch_args < <(scripts/find-libtorch.sh --cmake-args)
t0=$(date +%s)
cmake -S . -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=Release -DSTOKE_WERROR=OFF \
  "${torch_args[@]}" > "$out/build.log" 2>&1 ||
  give_up build "configure failed: $(grep -m 1 -A 3 'CMake Error' "$out/build.log" | tr '\n' ' ')"
ninja -C "$build" stoke-coordinator stoke-worker stoke-trainer stoke stoke_rank_runner \
  "${suites[@]}" >> "$out/build.log" 2>&1 ||
  give_up build "ninja failed: $(grep -m 1 -E 'error' "$out/build.log")"
note ok build "$(grep 'Stoke: LibTorch' "$out/build.log" | sed 's/.*Stoke: //'), $(($(date +%s) - t0)) s"

# 2. The daemons start, and the worker sees what the driver sees.
daemons_start() {
  local program rc
  for program in "stoke-coordinator --help" "stoke-worker --help" "stoke-worker --list-devices"; do
    # shellcheck disable=SC2086  # the program and its flag
    "$bin"/$program > "$out/daemon.log" 2>&1
    rc=$?
    if [ $rc -ne 0 ]; then
      [ $rc -gt 128 ] && echo "$program died of signal $((rc - 128)) ($(kill -l $((rc - 128))))" ||
        echo "$program exited $rc: $(tail -n 1 "$out/daemon.log")"
      return 1
    fi
  done
  local listed
  listed=$(grep -c 'cuda:' "$out/daemon.log")
  [ "$listed" -ge "$gpus" ] || { echo "stoke-worker --list-devices lists $listed GPUs, the driver $gpus"; return 1; }
  echo "start; the worker lists $listed GPUs"
}
if detail=$(daemons_start); then note ok daemons "$detail"; else give_up daemons "$detail"; fi

# 3. The GPU test programs. gtest_count LOG: "N passed, N skipped, N failed".
gtest_count() {
  local ran skipped failures
  ran=$(grep -c '^\[       OK \]' "$1")
  skipped=$(grep -c '^\[  SKIPPED \].*(.* ms)$' "$1")
  failures=$(grep -c '^\[  FAILED  \].*(' "$1")
  echo "$ran passed, $skipped skipped, $failures failed"
}
gpu_suite() {  # gpu_suite NAME
  local log="$out/$1.log" rc
  if skipping "$1"; then
    note skipped "$1" "GPU_CHECK_SKIP"
    return
  fi
  "$bin/$1" > "$log" 2>&1
  rc=$?
  if [ $rc -eq 0 ]; then
    note ok "$1" "$(gtest_count "$log")"
  else
    note FAILED "$1" "$(gtest_count "$log"): $(grep -m 3 '^\[  FAILED  \].*(' "$log" | tr '\n' ' ')"
  fi
}
gpu_suite gpu_tests
gpu_suite python_model_gpu_tests
gpu_suite script_job_gpu_tests

# 4. End to end on CUDA, as a user would: a coordinator with one local worker per GPU.
data=$(mktemp -d)
"$bin/stoke-coordinator" --address 127.0.0.1:0 --metrics-address 127.0.0.1:0 \
  --data-dir "$data" --stop-workers-on-exit > "$out/coordinator.log" 2>&1 &
coordinator=$!
stop_coordinator() {
  kill -TERM "$coordinator" 2> /dev/null && wait "$coordinator" 2> /dev/null
  cp "$data"/logs/worker-*.log "$out/" 2> /dev/null
  rm -rf "$data"
}
trap stop_coordinator EXIT
for _ in $(seq 1 120); do [ -f "$data/coordinator.address" ] && break; sleep 0.5; done
[ -f "$data/coordinator.address" ] || give_up coordinator "no address after 60 s ($out/coordinator.log)"
STOKE_ADDRESS=$(cat "$data/coordinator.address")
export STOKE_ADDRESS
cuda_workers() { "$bin/stoke" -o json cluster 2> /dev/null | grep -c DEVICE_TYPE_CUDA; }
for _ in $(seq 1 120); do [ "$(cuda_workers)" -ge "$gpus" ] && break; sleep 0.5; done
"$bin/stoke" cluster > "$out/cluster.txt" 2>&1
[ "$(cuda_workers)" -ge "$gpus" ] ||
  give_up coordinator "$(cuda_workers) of $gpus GPU workers attached ($out/cluster.txt)"
note ok coordinator "up with $gpus local GPU workers"

# submit_and_watch NAME JOBFILE: submits, watches to the end; sets `id`, the job's events in
# $out/NAME.jsonl; passes when the job SUCCEEDED on a CUDA device.
submit_and_watch() {
  local name=$1 file=$2
  id=$("$bin/stoke" submit "$file" 2> "$out/$name.submit.log") || {
    echo "submit failed: $(tail -n 1 "$out/$name.submit.log")"
    return 1
  }
  timeout 300 "$bin/stoke" -o json watch "$id" > "$out/$name.jsonl" 2>&1
  "$bin/stoke" status "$id" > "$out/$name.status.txt" 2>&1
  if ! grep -q 'SUCCEEDED' "$out/$name.status.txt" ||
    ! grep -q 'cuda:' "$out/$name.status.txt" "$out/$name.jsonl"; then
    echo "job $id: $(grep -m 2 -iE 'state|placement' "$out/$name.status.txt" | tr '\n' ' ')"
    return 1
  fi
}

if [ -d "$fmnist" ]; then
  fast() {
    submit_and_watch fashion-mnist-fast examples/fashion-mnist-fast.yaml || return 1
    local seconds step best
    read -r seconds step best _ < <(python3 bench/python/seconds_to_accuracy.py \
      "$out/fashion-mnist-fast.jsonl" 0.94)
    [ "$seconds" != never ] || { echo "job $id never reached 94% (best $best%)"; return 1; }
    echo "job $id: 94% at step $step, $seconds s from submit; best $best%"
  }
  if detail=$(fast); then note ok fashion-mnist-fast "$detail"; else note FAILED fashion-mnist-fast "$detail"; fi
  vit() {
    submit_and_watch vit examples/python/vit-fashion-mnist.yaml || return 1
    local best
    best=$(python3 bench/python/seconds_to_accuracy.py "$out/vit.jsonl" 1 | cut -d' ' -f3)
    echo "job $id SUCCEEDED; best held-out accuracy $best%"
  }
  if detail=$(vit); then note ok python-vit "$detail"; else note FAILED python-vit "$detail"; fi
else
  note skipped fashion-mnist-fast "no $fmnist (carry it in .gpu-data/fashion-mnist)"
  note skipped python-vit "no $fmnist"
fi

# The example DDP script on one GPU: the same script, one rank.
sed -e 's/resources: {gpus: 2}/resources: {gpus: 1}/' \
  -e "s#workdir: \.#workdir: $root/examples/scripts#" examples/scripts/ddp-train.yaml \
  > "$data/script-one-gpu.yaml"
script() {
  submit_and_watch script-one-gpu "$data/script-one-gpu.yaml" || return 1
  echo "job $id SUCCEEDED on $(grep -oE 'cuda:[0-9]+' "$out/script-one-gpu.status.txt" | head -n 1)"
}
if detail=$(script); then note ok script-job "$detail"; else note FAILED script-job "$detail"; fi

# /metrics: the exposition format, the GPUs' readings and the finished jobs.
metrics() {
  local address scrape="$out/metrics.txt" checker
  address=$(cat "$data/metrics.address" 2> /dev/null) || { echo "no metrics.address"; return 1; }
  python3 -c "import sys, urllib.request; sys.stdout.write(urllib.request.urlopen(
    'http://$address/metrics', timeout=10).read().decode())" > "$scrape" ||
    { echo "scrape of http://$address/metrics failed"; return 1; }
  if command -v promtool > /dev/null; then
    checker=promtool
    promtool check metrics < "$scrape" > "$out/metrics-check.log" 2>&1 ||
      { echo "promtool: $(head -n 3 "$out/metrics-check.log" | tr '\n' ' ')"; return 1; }
  else
    checker="prometheus_client's parser (no promtool here)"
    python3 -c "import sys; from prometheus_client.parser import text_string_to_metric_families as p
list(p(open(sys.argv[1]).read()))" "$scrape" > "$out/metrics-check.log" 2>&1 ||
      { echo "parser: $(tail -n 1 "$out/metrics-check.log")"; return 1; }
  fi
  local gpu_series succeeded
  gpu_series=$(grep -c '^stoke_device_memory_total_bytes{.*gpu="[^"]' "$scrape")
  succeeded=$(sed -n 's/^stoke_jobs_finished_total{state="succeeded"} //p' "$scrape")
  [ "$gpu_series" -ge "$gpus" ] || { echo "$gpu_series GPUs in stoke_device_memory_total_bytes"; return 1; }
  [ "${succeeded%.*}" -ge 1 ] 2> /dev/null || { echo "stoke_jobs_finished_total{succeeded} is '$succeeded'"; return 1; }
  echo "$(grep -vc '^#' "$scrape") samples valid ($checker); $gpu_series GPUs read; $succeeded jobs succeeded"
}
if detail=$(metrics); then note ok metrics "$detail"; else note FAILED metrics "$detail"; fi

stop_coordinator
trap - EXIT

# 5. User code contained, on CUDA, and what it costs: 300 steps of the ViT example,
# compiled, on a coordinator whose local worker runs user code as it does by default (in
# stoke-sandbox; as root, as a uid of its own), then on one started with
# --local-worker-flag=--sandbox=false; the median samples/s of each, from their metrics.
# contained_run NAME [COORDINATOR FLAGS...]: prints "SAMPLES_PER_S UID".
contained_run() {
  local name=$1 data rc
  shift
  data=$(mktemp -d)
  chmod 755 "$data"
  "$bin/stoke-coordinator" --address 127.0.0.1:0 --metrics-address "" --data-dir "$data/d" \
    --local-workers 1 --stop-workers-on-exit "$@" > "$out/$name-coordinator.log" 2>&1 &
  local pid=$!
  for _ in $(seq 1 120); do [ -f "$data/d/coordinator.address" ] && break; sleep 0.5; done
  sed -e 's/epochs: 1/steps: 300/' examples/python/vit-fashion-mnist.yaml \
    -e "s#file: vit.py#file: $root/examples/python/vit.py#" > "$data/vit.yaml"
  export STOKE_ADDRESS
  STOKE_ADDRESS=$(cat "$data/d/coordinator.address" 2> /dev/null)
  timeout 240 "$bin/stoke" submit "$data/vit.yaml" --watch > "$out/$name-vit.log" 2>&1
  rc=$?
  "$bin/stoke" -o json watch 1 > "$out/$name-vit.jsonl" 2> /dev/null
  kill -TERM "$pid" 2> /dev/null && wait "$pid" 2> /dev/null
  cp "$data"/d/logs/worker-0.log "$out/$name-worker-0.log" 2> /dev/null
  local owner
  owner=$(stat -c %u "$data"/d/jobs/1 2> /dev/null)
  rm -rf "$data"
  if [ $rc -ne 0 ] || ! grep -q SUCCEEDED "$out/$name-vit.log"; then
    echo "job failed: $(grep -m 2 -E 'FAILED|error' "$out/$name-vit.log" | tr '\n' ' ')"
    return 1
  fi
  python3 -c '
import json, statistics, sys
rates = [json.loads(l)["metrics"].get("samples_per_second", 0) for l in open(sys.argv[1])
         if l.startswith("{") and "metrics" in json.loads(l) and "eval" not in json.loads(l)["metrics"]]
rates = [r for r in rates[1:] if r > 0]  # the first window holds the compile
print("%.0f" % statistics.median(rates) if rates else "?", sys.argv[2])' "$out/$name-vit.jsonl" "$owner"
}
contained() {
  local with without
  with=$(contained_run contained) || { echo "contained: $with"; return 1; }
  without=$(contained_run uncontained --local-worker-flag=--sandbox=false) ||
    { echo "uncontained: $without"; return 1; }
  echo "ViT 300 steps: ${with% *} samples/s contained (uid ${with#* }, stoke-sandbox)," \
    "${without% *} samples/s with --sandbox=false"
}
if [ ! -d "$fmnist" ]; then
  note skipped contained "no $fmnist"
elif detail=$(contained); then
  note ok contained "$detail"
else
  note FAILED contained "$detail"
fi
summary
