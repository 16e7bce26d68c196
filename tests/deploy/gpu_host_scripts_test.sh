#!/usr/bin/env bash
# The GPU-host scripts on this machine, with real files in a temp folder:
# scripts/find-libtorch.sh picks a CUDA LibTorch from $STOKE_LIBTORCH, python3's torch
# wheel or /opt-like folders and ignores CPU-only ones it was not told to use;
# scripts/install-debs.sh (DIR/setup.sh) unpacks real .deb files into a prefix once and
# sets the variables CMake, the linker and the loader need.
#   gpu_host_scripts_test.sh SOURCE_DIR
set -uo pipefail
scripts="$1/scripts"
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
failures=0
expect() {  # expect DESCRIPTION EXPECTED ACTUAL
  if [ "$2" = "$3" ]; then
    echo "ok   $1"
  else
    echo "FAIL $1: expected [$2], got [$3]"
    failures=$((failures + 1))
  fi
}

# A LibTorch as its zip unpacks: share/cmake/Torch/TorchConfig.cmake and lib/.
fake_libtorch() {  # fake_libtorch DIR cuda|cpu
  mkdir -p "$1/share/cmake/Torch" "$1/lib"
  touch "$1/share/cmake/Torch/TorchConfig.cmake" "$1/lib/libtorch_cpu.so"
  [ "$2" = cuda ] && touch "$1/lib/libtorch_cuda.so"
}
# No python3 torch, no nvcc, no /opt/libtorch of the real machine leak in: a bare PATH
# with only what the script needs, and HOME in the temp folder.
mkdir -p "$tmp/bin" "$tmp/home"
for tool in bash sed cat dirname env; do ln -s "$(command -v "$tool")" "$tmp/bin/$tool"; done
find_libtorch() { env -i PATH="$tmp/bin" HOME="$tmp/home" "$@" bash "$scripts/find-libtorch.sh"; }
find_libtorch_args() {
  env -i PATH="$tmp/bin" HOME="$tmp/home" bash "$scripts/find-libtorch.sh" --cmake-args | tr '\n' ' '
}

if [ ! -d /opt/libtorch ] && [ ! -d /usr/local/libtorch ]; then
  expect "nothing found: Debian's" "debian" "$(find_libtorch)"
  expect "nothing found: no CMake arguments" "" "$(find_libtorch_args)"
fi
fake_libtorch "$tmp/cpu-zip" cpu
fake_libtorch "$tmp/cuda-zip" cuda
expect "STOKE_LIBTORCH, CPU build" "cpu $tmp/cpu-zip" "$(find_libtorch STOKE_LIBTORCH="$tmp/cpu-zip")"
expect "STOKE_LIBTORCH, CUDA build" "cuda $tmp/cuda-zip" "$(find_libtorch STOKE_LIBTORCH="$tmp/cuda-zip")"
find_libtorch STOKE_LIBTORCH="$tmp/nothing-here" > /dev/null 2> "$tmp/err"
expect "STOKE_LIBTORCH naming no LibTorch fails" "1" "$?"
grep -q "STOKE_LIBTORCH=$tmp/nothing-here: no LibTorch there" "$tmp/err"
expect "...and says where it looked" "0" "$?"

# ~/libtorch: taken when it is a CUDA build, ignored when CPU-only.
fake_libtorch "$tmp/home/libtorch" cpu
if [ ! -d /opt/libtorch ] && [ ! -d /usr/local/libtorch ]; then
  expect "a CPU-only ~/libtorch is not taken" "debian" "$(find_libtorch)"
fi
touch "$tmp/home/libtorch/lib/libtorch_cuda.so"
expect "a CUDA ~/libtorch is taken" "cuda $tmp/home/libtorch" "$(find_libtorch)"
rm -rf "$tmp/home/libtorch"

# python3's torch wheel: its cmake_prefix_path is .../torch/share/cmake.
wheel="$tmp/site-packages/torch"
fake_libtorch "$wheel" cuda
cat > "$tmp/bin/python3" << PY
#!/bin/sh
echo "$wheel/share/cmake"
PY
chmod +x "$tmp/bin/python3"
expect "python3's CUDA torch wheel" "cuda $wheel/share/cmake" "$(find_libtorch)"
cat > "$tmp/bin/nvcc" << 'SH'
#!/bin/sh
SH
chmod +x "$tmp/bin/nvcc"
expect "CMake arguments: the wheel's prefix and nvcc" \
  "-DCMAKE_PREFIX_PATH=$wheel/share/cmake -DCMAKE_CUDA_COMPILER=$tmp/bin/nvcc " \
  "$(find_libtorch_args)"
rm "$tmp/bin/python3" "$tmp/bin/nvcc"

# install-debs: two real packages made with dpkg-deb, carried as fetch-debs lays them out.
if ! command -v dpkg-deb > /dev/null; then
  echo "SKIP the install-debs part: no dpkg-deb"
  exit $((failures > 0))
fi
carried="$tmp/gpu-deps"
mkdir -p "$carried"
for name in libstoketest1 libstoketest-dev; do
  pkg="$tmp/pkg-$name"
  mkdir -p "$pkg/DEBIAN" "$pkg/usr/lib/x86_64-linux-gnu/pkgconfig" "$pkg/usr/bin"
  printf 'Package: %s\nVersion: 1.0\nArchitecture: amd64\nMaintainer: Stoke <stoke@example.com>\nDescription: test\n' \
    "$name" > "$pkg/DEBIAN/control"
  echo "$name" > "$pkg/usr/lib/x86_64-linux-gnu/$name.so"
  dpkg-deb --root-owner-group -b "$pkg" "$carried/${name}_1.0_amd64.deb" > /dev/null
done
cp "$scripts/install-debs.sh" "$carried/setup.sh"
prefix="$tmp/prefix"
# shellcheck disable=SC2016  # expanded by the inner shell
env -i PATH=/usr/bin:/bin HOME="$tmp/home" STOKE_DEPS_PREFIX="$prefix" CMAKE_PREFIX_PATH=/keep \
  bash -c 'source "$1/setup.sh" > "$2/first.log" && source "$1/setup.sh" > "$2/second.log" &&
    echo "$CMAKE_PREFIX_PATH|$LD_LIBRARY_PATH|$LIBRARY_PATH|$PKG_CONFIG_PATH|$STOKE_DEPS_PREFIX"' \
  _ "$carried" "$tmp" > "$tmp/env" 2> "$tmp/err"
expect "source DIR/setup.sh succeeds" "0" "$?"
cat "$tmp/err"
libdirs="$prefix/usr/lib/x86_64-linux-gnu:$prefix/lib/x86_64-linux-gnu"
expect "the variables point into the prefix, once, keeping what was there" \
  "$prefix/usr:/keep|$libdirs|$libdirs|$prefix/usr/lib/x86_64-linux-gnu/pkgconfig:$prefix/usr/share/pkgconfig|$prefix" \
  "$(cat "$tmp/env")"
expect "both packages unpacked" "libstoketest1 libstoketest-dev" \
  "$(cat "$prefix/usr/lib/x86_64-linux-gnu/libstoketest1.so" "$prefix/usr/lib/x86_64-linux-gnu/libstoketest-dev.so" | tr '\n' ' ' | sed 's/ $//')"
expect "unpacked on the first source only" "1 0" \
  "$(grep -c unpacked "$tmp/first.log") $(grep -c unpacked "$tmp/second.log")"

mkdir -p "$tmp/foreign" && touch "$tmp/foreign/precious"
STOKE_DEPS_PREFIX="$tmp/foreign" bash "$scripts/install-debs.sh" "$carried" > /dev/null 2> "$tmp/err"
expect "a non-empty prefix it did not make is refused" "1 yes" \
  "$? $([ -f "$tmp/foreign/precious" ] && echo yes)"
bash "$scripts/install-debs.sh" "$tmp/home" > /dev/null 2> "$tmp/err"
expect "a folder without .deb files is refused" "1" "$?"

[ $failures -eq 0 ] && echo "all passed"
exit $((failures > 0))
