#!/usr/bin/env bash
# Installs the Debian packages Stoke builds and tests with. Idempotent: when every
# package is present it prints nothing and exits 0, so the README's commands can
# call it every time.
set -euo pipefail

packages=(
  build-essential cmake ninja-build pkg-config git
  libgrpc++-dev protobuf-compiler-grpc libprotobuf-dev protobuf-compiler libabsl-dev
  prometheus-cpp-dev libsqlite3-dev libyaml-cpp-dev nlohmann-json3-dev libcli11-dev
  libspdlog-dev libfmt-dev libgtest-dev libgmock-dev
  libtorch-dev libgloo-dev
  prometheus dataset-fashion-mnist
  python3-grpcio python3-protobuf python3-yaml python3-pytest python3-pip python3-setuptools
  openssl
  clang-format
  clang libclang-rt-14-dev  # the libFuzzer targets (tests/fuzz, -DSTOKE_FUZZ=ON)
  libssl-dev openssl
)

missing=()
for p in "${packages[@]}"; do
  if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q '^install ok installed'; then
    missing+=("$p")
  fi
done
[ ${#missing[@]} -eq 0 ] && exit 0

echo "stoke: installing ${#missing[@]} missing Debian packages: ${missing[*]}"
sudo_cmd=()
[ "$(id -u)" -ne 0 ] && sudo_cmd=(sudo)
export DEBIAN_FRONTEND=noninteractive
"${sudo_cmd[@]}" apt-get update -qq
"${sudo_cmd[@]}" apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
echo "stoke: dependencies installed"
