#!/usr/bin/env bash
# Everything the GPU machine measures, in one run: builds build-gpu/ once, then runs the
# parts asked for, the single-GPU ones in two lanes on two GPUs at once when there are
# two (each part sees one GPU through CUDA_VISIBLE_DEVICES), and packs what they wrote
# into $OUT/results.tgz beside $OUT/summary.md (the device tool returns at most 8 files).
# From the repo root on the GPU machine:
#   source .gpu-deps/setup.sh && LANE0="speed-mlp-256" LANE1="speed-gpt2-small" bench/all.sh
# Parts: tests (build-gpu/bin/gpu_tests, GPU_TEST_FILTER), ddp (bench/ddp-scaling.sh on
# every GPU; runs before the lanes), speed-<case> (bench/speed.sh for one case: mlp-256,
# mlp-1024, mlp-4096, gpt2-small, resnet50, resnet34-cifar, fmnist-cnn; fmnist-cnn adds the
# ablation on the real data pipeline unless ABLATION_MODEL=none; RUNS, PY_MODES and
# PY_ONCE_MODES pass through; py-vit, py-convmixer, py-mixer, py-gpt are Python models),
# stoke-<case> (the same, Stoke alone), pytests (the Python models' GPU tests),
# scripttests (the script jobs' GPU tests), images (bench/images.sh: ResNet-50 from a
# JPEG folder, and the loader's images/s),
# py-startup (bench/python-startup.sh: submit -> first step of a Python model), profile
# (bench/profile.sh, PROFILE_MODELS, PROFILE_PY_MODES), telemetry
# (bench/telemetry-overhead.sh, TELEMETRY_MODES, TELEMETRY_STEPS, TELEMETRY_RUNS),
# checkpointing (bench/checkpointing.sh), tta (bench/time-to-accuracy.sh: RUNS, PY_MODES,
# SKIP_PYTHON); DDP_STEPS for ddp. ALL="ddp" names the all-GPU parts;
# LANE0 and LANE1 the single-GPU ones (with one GPU, LANE1 runs after LANE0). LANE_TIMEOUT
# (seconds) stops a lane that overruns, so that what finished still comes back.
set -uo pipefail
out="${OUT:-$PWD/bench-out}"
mkdir -p "$out"
gpus=$(nvidia-smi -L 2>/dev/null | wc -l)
{
  echo "date: $(date -u +%FT%TZ)"
  nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader
  python3 -c 'import torch; print("torch", torch.__version__, "cuda", torch.version.cuda)'
} > "$out/summary.md"
if [ -d .gpu-data/fashion-mnist ]; then
  mkdir -p /usr/share/datasets && cp -r .gpu-data/fashion-mnist /usr/share/datasets/
fi
fmnist=/usr/share/datasets/fashion-mnist
export out fmnist

targets="stoke-bench stoke-coordinator stoke-worker stoke"
[[ " ${ALL:-} ${LANE0:-} ${LANE1:-} " == *" tests "* ]] && targets="$targets gpu_tests"
[[ " ${ALL:-} ${LANE0:-} ${LANE1:-} " == *" pytests "* ]] && targets="$targets python_model_gpu_tests"
[[ " ${ALL:-} ${LANE0:-} ${LANE1:-} " == *" scripttests "* ]] && targets="$targets script_job_gpu_tests"
[[ " ${ALL:-} ${LANE0:-} ${LANE1:-} " == *" images "* ]] && targets="$targets stoke-make-jpegs"
start=$(date +%s)
cmake -S . -B build-gpu -G Ninja -DCMAKE_BUILD_TYPE=Release -DSTOKE_WERROR=OFF \
  > "$out/build.log" 2>&1 && ninja -C build-gpu $targets >> "$out/build.log" 2>&1 ||
  { tail -40 "$out/build.log"; exit 1; }
echo "built $targets in $(($(date +%s) - start)) s" | tee -a "$out/summary.md"

part() {  # name -> runs it with its output in $out/<name>/
  local name=$1 dir="$out/$1" t0
  t0=$(date +%s)
  mkdir -p "$dir"
  case $name in
    tests) build-gpu/bin/gpu_tests --gtest_filter="${GPU_TEST_FILTER:-*}" > "$dir/gpu-tests.log" 2>&1
           grep -E "^\[  (PASSED|FAILED|SKIPPED) |^\[  FAILED|peak memory|search:" "$dir/gpu-tests.log" > "$dir/tests.md" ;;
    ddp) OUT="$dir" STEPS="${DDP_STEPS:-160}" bench/ddp-scaling.sh > "$dir/run.log" 2>&1 ;;
    pytests) build-gpu/bin/python_model_gpu_tests > "$dir/gpu-tests.log" 2>&1
             grep -E "^\[  (PASSED|FAILED|SKIPPED) |^\[  FAILED|Failure|job failed|relative" \
               "$dir/gpu-tests.log" > "$dir/tests.md" ;;
    scripttests) build-gpu/bin/script_job_gpu_tests > "$dir/gpu-tests.log" 2>&1
                 grep -E "^\[  (PASSED|FAILED|SKIPPED) |^\[  FAILED|Failure" "$dir/gpu-tests.log" > "$dir/tests.md" ;;
    images) OUT="$dir" STOKE_BIN=build-gpu/bin bench/images.sh > "$dir/run.log" 2>&1 ;;
    py-startup) OUT="$dir" STOKE_BIN=build-gpu/bin bench/python-startup.sh > "$dir/run.log" 2>&1 ;;
    speed-fmnist-cnn) OUT="$dir" MODELS=fmnist-cnn FMNIST_DIR=$fmnist ABLATION_MODEL=${ABLATION_MODEL:-fmnist-cnn} \
                        bench/speed.sh > "$dir/run.log" 2>&1 ;;
    stoke-*) OUT="$dir" MODELS="${name#stoke-}" FMNIST_DIR=$fmnist ABLATION_MODEL=none SKIP_PYTHON=1 bench/speed.sh \
               > "$dir/run.log" 2>&1 ;;
    speed-*) OUT="$dir" MODELS="${name#speed-}" ABLATION_MODEL=none bench/speed.sh > "$dir/run.log" 2>&1 ;;
    profile) OUT="$dir" STEPS=5 PY_MODES="${PROFILE_PY_MODES:-eager compile}" MODELS="${PROFILE_MODELS:-gpt2-small}" bench/profile.sh > "$dir/run.log" 2>&1
             rm -f "$dir"/trace-*.json.gz ;;  # too large to bring back; the summary is kept
    checkpointing) OUT="$dir" bench/checkpointing.sh > "$dir/run.log" 2>&1 ;;
    tta) OUT="$dir" STOKE_BIN=build-gpu/bin FMNIST_DIR=$fmnist bench/time-to-accuracy.sh \
           > "$dir/run.log" 2>&1
         sed -n '/^== median/,$p' "$dir/run.log" > "$dir/tta.md" ;;
    telemetry) OUT="$dir" STEPS="${TELEMETRY_STEPS:-30000}" RUNS="${TELEMETRY_RUNS:-6}" MODES="${TELEMETRY_MODES:-on off}" bench/telemetry-overhead.sh > "$dir/run.log" 2>&1 ;;
    *) echo "unknown part $name" > "$dir/run.log" ;;
  esac
  echo "part $name: rc=$? in $(($(date +%s) - t0)) s" | tee -a "$out/summary.md"
}

for p in ${ALL:-}; do part "$p"; done
lane() {  # gpu parts...
  local gpu=$1
  shift
  for p in "$@"; do CUDA_VISIBLE_DEVICES=$gpu part "$p"; done
}
if [ "$gpus" -ge 2 ]; then
  # A lane that overruns is stopped, so that what finished is still packed and returned.
  timeout -k 10 "${LANE_TIMEOUT:-100000}" bash -c "$(declare -f part lane); lane 0 ${LANE0:-}" &
  timeout -k 10 "${LANE_TIMEOUT:-100000}" bash -c "$(declare -f part lane); lane 1 ${LANE1:-}" &
  wait
else
  timeout -k 10 "${LANE_TIMEOUT:-100000}" bash -c "$(declare -f part lane); lane 0 ${LANE0:-} ${LANE1:-}"
fi

for f in "$out"/*/*.md; do
  [ -f "$f" ] && { echo; echo "## ${f#$out/}"; cat "$f"; } >> "$out/summary.md"
done
dirs=$(cd "$out" && find . -mindepth 1 -maxdepth 1 -type d -printf '%f\n')
[ -n "$dirs" ] && tar czf "$out/results.tgz" -C "$out" $dirs && (cd "$out" && rm -rf $dirs)
cat "$out/summary.md"
