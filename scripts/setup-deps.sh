#!/usr/bin/env bash
# Installs the Debian packages Stoke builds and tests with, and says which LibTorch the
# build will use. Idempotent: when every package is present it prints one line (the
# LibTorch in use) and exits 0, so the README's commands can call it every time.
#
# LibTorch: a CUDA LibTorch found by scripts/find-libtorch.sh ($STOKE_LIBTORCH, the torch
# wheel `python3` imports, or an unpacked libtorch zip in /opt/libtorch, ~/libtorch) is
# used as is, and scripts/build.sh passes its prefix to CMake; otherwise Debian's
# libtorch-dev (CPU only) is installed.
#
# --build-only (or STOKE_DEPS=build): only what building the three programs needs
# (container images); no test tools, no datasets.
#
# On a host without a package registry, `source DIR/setup.sh` (the carried packages of
# scripts/fetch-debs.sh) sets STOKE_DEPS_PREFIX, and no Debian package is checked.
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"

packages=(
  build-essential cmake ninja-build pkg-config
  libgrpc++-dev protobuf-compiler-grpc libprotobuf-dev protobuf-compiler libabsl-dev
  prometheus-cpp-dev libsqlite3-dev libpq-dev libyaml-cpp-dev nlohmann-json3-dev libcli11-dev
  libspdlog-dev libfmt-dev libssl-dev libjpeg62-turbo-dev libpng-dev
)
# Commands the tests need, by the Debian packages that bring them. Node.js may come from
# elsewhere (its own archive bundles npm), so the command counts, not the package.
declare -A command_packages=()
if [ "${1:-}" != --build-only ] && [ "${STOKE_DEPS:-}" != build ]; then
  packages+=(git libgtest-dev libgmock-dev prometheus dataset-fashion-mnist clang-format
    clang-tidy)
  packages+=(tmux)  # the CLI's live lines, drawn on a real terminal
  # The Python SDK and its tests; openssl makes the TLS tests' certificates.
  packages+=(python3-pandas)  # the SDK's Job.metrics(as_frame=True), tested
  packages+=(python3-grpcio python3-protobuf python3-yaml python3-pytest python3-pip
    python3-setuptools openssl)
  # The image data tests write their JPEGs and PNGs with Pillow and compare its decoding.
  packages+=(python3-pil)
  # The PostgreSQL store's tests start a throwaway server (initdb, postgres, psql).
  packages+=(postgresql)
  packages+=(clang libclang-rt-14-dev)  # the libFuzzer targets (tests/fuzz, -DSTOKE_FUZZ=ON)
  command_packages[npm]="nodejs npm"  # deploy/kubernetes/validate
  command_packages[systemd-analyze]="systemd"  # deploy/systemd's units, checked offline
fi

torch=$("$here/find-libtorch.sh")
case "$torch" in
  debian)
    packages+=(libtorch-dev libgloo-dev)  # libgloo-dev: c10d's Gloo for jobs of several CPUs
    # Python models: the trainer embeds the Python whose torch is this LibTorch (Debian's
    # python3-torch is libtorch-dev's own build), with libtorch_python and pybind11.
    packages+=(python3-torch python3-dev pybind11-dev)
    echo "stoke: LibTorch: Debian's libtorch-dev (CPU only): workers train on CPUs, no GPU" \
      "training; for GPUs set STOKE_LIBTORCH to a CUDA LibTorch or install the CUDA torch" \
      "wheel for python3 (docs/operations.md: GPU machines)"
    ;;
  cuda\ *)
    nvcc=$("$here/find-libtorch.sh" --cmake-args | sed -n 's/^-DCMAKE_CUDA_COMPILER=//p')
    if [ -n "$nvcc" ]; then
      echo "stoke: LibTorch: CUDA build at ${torch#cuda }; nvcc $nvcc builds Stoke's CUDA kernels"
    else
      echo "stoke: LibTorch: CUDA build at ${torch#cuda }; no nvcc found (PATH, CUDA_HOME," \
        "/usr/local/cuda): GPU training works, Stoke's own CUDA kernels are not built"
    fi
    ;;
  cpu\ *)
    echo "stoke: LibTorch: CPU-only build at ${torch#cpu } (STOKE_LIBTORCH): no GPU training"
    ;;
esac

if [ -n "${STOKE_DEPS_PREFIX:-}" ] && [ -d "$STOKE_DEPS_PREFIX" ]; then
  exit 0  # libraries come from the carried packages; there is no registry to ask
fi

missing=()
for p in "${packages[@]}"; do
  if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q '^install ok installed'; then
    missing+=("$p")
  fi
done
for c in "${!command_packages[@]}"; do
  # shellcheck disable=SC2206  # a list of package names
  command -v "$c" > /dev/null || missing+=(${command_packages[$c]})
done
[ ${#missing[@]} -eq 0 ] && exit 0

echo "stoke: installing ${#missing[@]} missing Debian packages: ${missing[*]}"
sudo_cmd=()
[ "$(id -u)" -ne 0 ] && sudo_cmd=(sudo)
export DEBIAN_FRONTEND=noninteractive
"${sudo_cmd[@]}" apt-get update -qq
"${sudo_cmd[@]}" apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
echo "stoke: dependencies installed"
