#!/usr/bin/env bash
# The benchmark driver on a CPU, as bench/speed.sh calls it on a GPU: one JSON line whose
# samples/s is a measured, positive rate and whose notes are the engine's own log.
# Arguments: the stoke-bench binary, the repository root.
set -euo pipefail
line=$("$1" "$2/bench/specs/mlp.yaml" --device cpu --set training.batch_size=64 \
  --set data.synthetic.features=32 --set 'model.mlp.hidden=[64,32]' \
  --warmup-steps 4 --windows 2 --window-steps 4 2>/dev/null)
echo "$line"
grep -q '"samples_per_second":[1-9]' <<<"$line"
grep -q '"notes":\["training bench-mlp on cpu:0' <<<"$line"
grep -q '"windows":\[[0-9.e+]*,[0-9.e+]*\]' <<<"$line"
# A spec on real files (the Fashion-MNIST CNN, as bench/speed.sh's fmnist-cnn case): the
# worker opens them beneath the data roots they were checked under.
fmnist=$("$1" "$2/bench/specs/fmnist-cnn.yaml" --device cpu --set training.batch_size=32 \
  --set data.mnist.path="${STOKE_FMNIST_DIR:-/usr/share/datasets/fashion-mnist}" \
  --warmup-steps 2 --windows 2 --window-steps 2 2>/dev/null)
echo "$fmnist"
grep -q '"samples_per_second":[1-9]' <<<"$fmnist"
# A broken override is reported as an error line, not a crash.
bad=$("$1" "$2/bench/specs/mlp.yaml" --device cpu --set training.batch_size=-3 2>/dev/null) && exit 1
grep -q '"error":".*training.batch_size' <<<"$bad"
