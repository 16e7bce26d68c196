#!/usr/bin/env bash
# Installs what is missing (Debian packages), then configures and builds Stoke into
# ./build. Quiet when there is nothing to do. Extra arguments go to CMake.
# The LibTorch is the one scripts/find-libtorch.sh finds (a CUDA one if there is one,
# else Debian's); it is chosen when ./build is first configured: remove ./build to rebuild
# against another.
# STOKE_BUILD_TARGETS (e.g. "stoke-coordinator stoke-worker stoke") builds only those;
# by default everything, tests included.
set -euo pipefail
cd "$(dirname "$0")/.."
./scripts/setup-deps.sh
if [ ! -f build/build.ninja ]; then
  mapfile -t torch_args < <(./scripts/find-libtorch.sh --cmake-args)
  # STOKE_TORCH_PCH: LibTorch's headers parsed once for all the worker's torch layers;
  # STOKE_UNITY_BUILD: their files compiled in batches, which load those headers once each.
  cmake -S . -B build -G Ninja -DCMAKE_BUILD_TYPE=Release -DSTOKE_TORCH_PCH=ON -DSTOKE_UNITY_BUILD=ON \
    "${torch_args[@]}" "$@" >/dev/null
fi
# Two jobs per core is too many for LibTorch's headers on small machines: cap by memory.
jobs=$(( $(nproc) ))
mem_gib=$(( $(awk '/MemAvailable/ {print $2}' /proc/meminfo) / 1048576 ))
[ "$mem_gib" -lt $(( jobs * 2 )) ] && jobs=$(( mem_gib / 2 > 0 ? mem_gib / 2 : 1 ))
# ninja's "[N/M] ..." lines as progress: one line rewritten on a terminal, else a line at
# each tenth of the build. Nothing when there is nothing to build.
progress() {
  if [ -t 1 ]; then
    awk '/^\[[0-9]+\/[0-9]+\]/ { split(substr($1, 2), a, "/");
           printf "\r==> building Stoke: step %d of %d", a[1], a[2]; fflush(); shown = 1 }
         END { if (shown) printf "\n" }'
  else
    awk '/^\[[0-9]+\/[0-9]+\]/ { split(substr($1, 2), a, "/"); tenth = int(10 * a[1] / a[2]);
           if (tenth > last) { printf "==> building Stoke: step %d of %d\n", a[1], a[2]; fflush();
                               last = tenth } }'
  fi
}
# Compiler output and a failed build are shown whole; the rest is in the log.
# shellcheck disable=SC2086  # the targets are a list
if ! ninja -C build -j "$jobs" ${STOKE_BUILD_TARGETS:-} 2>&1 | tee build/last-build.log |
  progress; then
  grep -v '^\[' build/last-build.log >&2
  echo "build failed (full log: build/last-build.log)" >&2
  exit 1
fi
grep -v '^\[' build/last-build.log | grep -v '^ninja: ' || true
test -x build/bin/stoke-coordinator && test -x build/bin/stoke-worker && test -x build/bin/stoke
