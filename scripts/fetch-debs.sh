#!/usr/bin/env bash
# For a host with no package registry (a GPU machine behind a firewall): run this on a
# connected Debian 12 machine to download the Debian packages Stoke builds with — gRPC,
# protobuf, abseil, prometheus-cpp, yaml-cpp, SQLite, CLI11, spdlog, fmt, nlohmann-json,
# libjpeg-turbo, libpng, GoogleTest — and every library they need, into DIR, with the script that installs them
# (DIR/setup.sh, a copy of scripts/install-debs.sh). Carry DIR to the host with the
# source tree (.gpu-deps/ is git-ignored) and there run, from the repository root:
#   source .gpu-deps/setup.sh && scripts/gpu-check.sh
#
#   scripts/fetch-debs.sh DIR [more Debian packages...]
#
# Left out: the C library (with its headers) and the compiler's runtime, which every host
# with a C++ compiler has, in its own version: an older copy on the library path would
# shadow the host's. Every other library the packages need is carried, even where the
# host may have one, so that each -dev package finds the library it names. The host needs
# its own CMake, Ninja, g++ and LibTorch.
set -euo pipefail
if [ $# -lt 1 ] || [ "${1:0:1}" = - ]; then
  echo "usage: $0 DIR [more Debian packages...]" >&2
  exit 2
fi
dir="$1"
shift
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"

wanted=(
  libgrpc++-dev protobuf-compiler-grpc libprotobuf-dev protobuf-compiler libabsl-dev
  prometheus-cpp-dev libsqlite3-dev libpq-dev libyaml-cpp-dev nlohmann-json3-dev libcli11-dev
  libspdlog-dev libfmt-dev libgtest-dev libgmock-dev zlib1g-dev libjpeg62-turbo-dev libpng-dev
  "$@"
)
# Pulled in by apt, used by nothing Stoke builds: Catch2 (libcli11-dev's own tests) and
# GoogleTest's sources (libgtest-dev already holds the built libraries). Left out, they
# leave room for the data a GPU host is sent with the tree.
not_needed=(catch2 googletest)
host_has=(
  libc6 libc6-dev libc-dev-bin linux-libc-dev libcrypt1 libcrypt-dev libnsl2 libnsl-dev
  libtirpc3 libtirpc-dev libtirpc-common rpcsvc-proto libgcc-s1 libstdc++6 gcc-12-base
)

# Every package the given ones need, recursively (Depends and Pre-Depends only; virtual
# packages are left to their providers, which the same walk lists).
closure() {
  apt-cache depends --recurse --no-recommends --no-suggests --no-conflicts --no-breaks \
    --no-replaces --no-enhances "$@" | grep -v '^[ <]' | sort -u
}

if ! apt-cache show "${wanted[@]}" > /dev/null 2>&1; then
  echo "fetch-debs: apt does not know every package of: ${wanted[*]}" >&2
  echo "fetch-debs: run 'apt-get update' once (on Debian 12) and retry" >&2
  exit 1
fi
mapfile -t packages < <(comm -23 <(closure "${wanted[@]}") \
  <(printf '%s\n' "${host_has[@]}" "${not_needed[@]}" | sort))

mkdir -p "$dir"
dir="$(cd "$dir" && pwd)"
# apt-get download writes into the current folder; as root it warns that it cannot drop
# privileges to the _apt user when that user cannot write there, which is harmless.
if ! (cd "$dir" && apt-get download "${packages[@]}" > "$dir/download.log" 2>&1); then
  grep -E '^(E|W):' "$dir/download.log" >&2 || tail -n 20 "$dir/download.log" >&2
  echo "fetch-debs: apt-get download failed (log: $dir/download.log); run 'apt-get" \
    "update' once and retry" >&2
  exit 1
fi
rm -f "$dir/download.log"
# Packages of an earlier run that are no longer wanted would be unpacked too.
for deb in "$dir"/*.deb; do
  name=$(dpkg-deb -f "$deb" Package)
  printf '%s\n' "${packages[@]}" | grep -qxF "$name" || rm -f "$deb"
done
install -m 755 "$here/install-debs.sh" "$dir/setup.sh"
install -m 755 "$here/find-libtorch.sh" "$dir/find-libtorch.sh"
echo "fetch-debs: ${#packages[@]} packages, $(du -sh "$dir" | cut -f1), in $dir"
echo "fetch-debs: on the host: source DIR/setup.sh (or scripts/install-debs.sh DIR)"
