# What bench/speed.sh and bench/profile.sh share: the benchmark cases (each a Stoke spec
# with its overrides and the matching train_reference.py arguments) and the stoke-bench
# binary, built on first use. Sourced; expects $out. FMNIST_DIR: Fashion-MNIST's idx
# files (without it fmnist-cnn cannot run).
specs="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)/specs"
fmnist_dir=""
[ -n "${FMNIST_DIR:-}" ] && fmnist_dir="$(cd "$FMNIST_DIR" && pwd)"

setup_case() {  # case -> spec, batch, sets (Stoke's --set), py_args; 1: unknown, 2: no data
  sets=() py_args=()
  case $1 in
    mlp-*)
      local d=${1#mlp-}
      [[ $d =~ ^[1-9][0-9]*$ ]] || return 1
      spec=$specs/mlp.yaml batch=512 py_args=(--model mlp --d "$d")
      # A YAML flow value for the list.
      [ "$d" != 256 ] && sets=(--set "data.synthetic.features=$d"
                               --set "model.mlp.hidden=[$((4 * d)),$d]")
      ;;
    gpt2-small) spec=$specs/gpt2-small.yaml batch=16 py_args=(--model gpt2-small) ;;
    resnet50) spec=$specs/resnet50.yaml batch=256 py_args=(--model resnet50) ;;
    resnet34-cifar) spec=$specs/resnet34-cifar.yaml batch=256 py_args=(--model resnet34-cifar) ;;
    # Python models: the user's own nn.Module (bench/models/), read by both sides from the
    # same job file.
    py-vit | py-convmixer | py-mixer | py-gpt)
      spec=$specs/$1.yaml
      batch=$(sed -n 's/^  batch_size: *\([0-9]*\).*/\1/p' "$spec")
      py_args=(--model python --spec "$spec")
      ;;
    fmnist-cnn)
      [ -n "$fmnist_dir" ] || return 2
      spec=$specs/fmnist-cnn.yaml batch=256
      sets=(--set "data.mnist.path=$fmnist_dir")
      py_args=(--model fmnist-cnn --data-dir "$fmnist_dir")
      ;;
    *) return 1 ;;
  esac
  return 0
}

# Sets $bench to STOKE_BENCH, or to build-gpu/bin/stoke-bench, building it if missing
# (its log in $out/stoke-bench-build.log).
ensure_stoke_bench() {
  bench="${STOKE_BENCH:-build-gpu/bin/stoke-bench}"
  [ -n "${STOKE_BENCH:-}" ] || [ -x "$bench" ] && return 0
  cmake -S . -B build-gpu -G Ninja -DCMAKE_BUILD_TYPE=Release -DSTOKE_WERROR=OFF \
    -DSTOKE_BUILD_TESTS=OFF > "$out/stoke-bench-build.log" 2>&1 &&
    ninja -C build-gpu stoke-bench >> "$out/stoke-bench-build.log" 2>&1 ||
    { tail -40 "$out/stoke-bench-build.log"; exit 1; }
}
