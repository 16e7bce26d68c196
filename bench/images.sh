#!/usr/bin/env bash
# data.images and data.shards at GPU speed: ResNet-50 at 224 px reading a folder of
# photograph-sized JPEGs (data.images: each decoded, cropped and resized on the loader
# threads), then the same JPEGs packed into tar shards (data.shards), against the same
# model on synthetic batches made on the device (what the GPU does when data costs
# nothing); then the loader alone (a model too small to take time), on one thread and on
# one per core, in images/s, from the page cache and from the disk (each file's cached
# pages dropped first with posix_fadvise, which needs no privilege; fewer batches than
# an epoch, so every image is read from the disk). Writes $OUT/images/{summary.md, *.json,
# *.log}.
# From the repository root on the GPU machine, after building build-gpu/ (bench/all.sh
# does: its part "images"):
#   bench/images.sh
# Environment: IMAGES (default 20000), WIDTH and HEIGHT (default 500 x 375, about
# ImageNet's mean), STOKE_BIN (default build-gpu/bin).
set -uo pipefail
out="${OUT:-$PWD/bench-out}/images"
mkdir -p "$out"
bin="${STOKE_BIN:-build-gpu/bin}"
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
photos="$work/photos"
"$bin/stoke-make-jpegs" "$photos" "${IMAGES:-20000}" "${WIDTH:-500}" "${HEIGHT:-375}" \
  > "$out/run.log" 2>&1 || {
  cat "$out/run.log"
  echo "stoke-make-jpegs failed" >&2
  exit 1
}
cat "$out/run.log"
echo "$(du -sh "$photos" | cut -f1) of JPEGs, in the page cache" | tee -a "$out/run.log"

# run NAME STEPS... -- stoke-bench ARGS: one JSON line in $OUT/images/NAME.json.
run() {
  local name=$1 warmup=$2 windows=$3 steps=$4
  shift 4
  "$bin/stoke-bench" "$@" --warmup-steps "$warmup" --windows "$windows" --window-steps "$steps" \
    > "$out/$name.json" 2> "$out/$name.log"
  echo "$name: rc=$? $(tail -n 1 "$out/$name.json")" | tee -a "$out/run.log"
}
run synthetic 40 6 20 bench/specs/resnet50.yaml
run images 40 6 20 bench/specs/resnet50-images.yaml --set "data.images.path=$photos"
run decode-1-thread 4 3 4 bench/specs/decode-only.yaml --set "data.images.path=$photos" \
  --set data.loader.threads=1
# Windows of 60 batches, three times the loader's ring (16 threads + 4 ahead): shorter ones
# are served from batches decoded before the window began.
run decode-all-threads 20 3 60 bench/specs/decode-only.yaml --set "data.images.path=$photos"

shards="$work/shards"
pattern=$(python3 examples/shards/make_shards.py "$photos" "$shards/train" --per-shard 1000)
echo "$(du -sh "$shards" | cut -f1) of shards: $pattern" | tee -a "$out/run.log"
run shards 40 6 20 bench/specs/resnet50-shards.yaml --set "data.shards.urls=$pattern"
run shards-decode-all-threads 20 3 60 bench/specs/decode-only-shards.yaml \
  --set "data.shards.urls=$pattern"

# evict FOLDER: drops the cached pages of every file beneath it.
evict() {
  python3 - "$1" << 'PY'
import os, sys
for root, _, names in os.walk(sys.argv[1]):
    for name in names:
        fd = os.open(os.path.join(root, name), os.O_RDONLY)
        os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
        os.close(fd)
PY
}
evict "$shards"
t0=$(date +%s%N)
"$bin/stoke" data inspect "$pattern" >> "$out/run.log" 2>&1
echo "indexing the shards from the disk (stoke data inspect): $((($(date +%s%N) - t0) / 1000000)) ms" |
  tee -a "$out/run.log"
evict "$photos"
run cold-folder-decode 2 3 20 bench/specs/decode-only.yaml --set "data.images.path=$photos"
evict "$shards"
run cold-shards-decode 2 3 20 bench/specs/decode-only-shards.yaml --set "data.shards.urls=$pattern"

python3 - "$out" "$(nproc)" << 'PY' | tee "$out/summary.md"
import json, sys
out, cores = sys.argv[1], int(sys.argv[2])
def read(name):
    try:
        with open(f"{out}/{name}.json") as f:
            return json.loads(f.read().strip().splitlines()[-1])
    except Exception as e:
        return {"error": str(e)}
rows = [("ResNet-50, synthetic batches on the device", read("synthetic")),
        ("ResNet-50, JPEG folder (data.images)", read("images")),
        ("ResNet-50, the JPEGs in tar shards (data.shards)", read("shards")),
        ("loader alone, folder, 1 thread", read("decode-1-thread")),
        (f"loader alone, folder, {cores} threads (one per core)", read("decode-all-threads")),
        (f"loader alone, shards, {cores} threads", read("shards-decode-all-threads")),
        (f"loader alone, folder, {cores} threads, from the disk", read("cold-folder-decode")),
        (f"loader alone, shards, {cores} threads, from the disk", read("cold-shards-decode"))]
print("| run | images/s | data wait | step ms |")
print("|---|---|---|---|")
for name, r in rows:
    if "samples_per_second" not in r:
        print(f"| {name} | failed: {r.get('error', r)} | | |")
        continue
    print(f"| {name} | {r['samples_per_second']:,.0f} | {100 * r['data_wait_ratio']:.1f}% | {r['step_ms']:.1f} |")
PY
