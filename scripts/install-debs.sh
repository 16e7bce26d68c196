#!/usr/bin/env bash
# On a host with no package registry: unpacks the Debian packages that
# scripts/fetch-debs.sh downloaded into DIR, and sets what CMake, the compiler, the linker
# and the loader need to find them (CMAKE_PREFIX_PATH, PATH, LD_LIBRARY_PATH,
# LIBRARY_PATH, PKG_CONFIG_PATH; CMAKE_PREFIX_PATH also gets the LibTorch that
# find-libtorch.sh finds). fetch-debs.sh places a copy of this script in DIR as setup.sh.
#
#   source DIR/setup.sh                  # unpack (once) and set the variables in this shell
#   source scripts/install-debs.sh DIR   # the same
#   scripts/install-debs.sh DIR          # unpack only; then: source PREFIX/env.sh
#
# PREFIX is $STOKE_DEPS_PREFIX, by default /opt/stoke-deps (root), else
# ~/.local/stoke-deps. Packages are unpacked, not installed: dpkg's database and the
# system's own libraries are left alone, and a changed DIR is unpacked afresh.

# Sourced, this runs in the caller's shell: no `set -e`, no exit, local names only.
_stoke_install_debs() {
  local self dir prefix stamp wanted deb triplet libdirs torch finder
  self="${BASH_SOURCE[0]}"
  dir="${1:-}"
  if [ -z "$dir" ]; then
    dir="$(dirname "$self")"  # DIR/setup.sh: the packages lie beside it
  fi
  if ! compgen -G "$dir/*.deb" > /dev/null; then
    echo "install-debs: no .deb files in ${dir} (scripts/fetch-debs.sh DIR makes them)" >&2
    return 1
  fi
  dir="$(cd "$dir" && pwd)"
  if [ -z "${STOKE_DEPS_PREFIX:-}" ]; then
    if [ "$(id -u)" -eq 0 ]; then prefix=/opt/stoke-deps; else prefix="$HOME/.local/stoke-deps"; fi
  else
    prefix="$STOKE_DEPS_PREFIX"
  fi

  # The stamp lists what was unpacked; the same list again means nothing to do.
  stamp="$prefix/.unpacked"
  wanted="$(cd "$dir" && ls -1 -- *.deb)"
  if [ ! -f "$stamp" ] || [ "$(cat "$stamp")" != "$wanted" ]; then
    command -v dpkg-deb > /dev/null || {
      echo "install-debs: dpkg-deb is needed to unpack the packages" >&2
      return 1
    }
    # Only a folder this script made is emptied first.
    if [ -d "$prefix" ] && [ ! -f "$stamp" ] && [ -n "$(ls -A "$prefix")" ]; then
      echo "install-debs: $prefix is not empty and was not made by install-debs;" \
        "set STOKE_DEPS_PREFIX to another folder" >&2
      return 1
    fi
    rm -rf "$prefix"
    mkdir -p "$prefix" || return 1
    for deb in "$dir"/*.deb; do
      dpkg-deb -x "$deb" "$prefix" || {
        echo "install-debs: cannot unpack $deb into $prefix" >&2
        return 1
      }
    done
    printf '%s\n' "$wanted" > "$stamp"
    echo "install-debs: unpacked $(printf '%s\n' "$wanted" | wc -l) packages into $prefix"
  fi

  triplet="$(cd "$prefix/usr/lib" && ls -d -- *-linux-gnu 2> /dev/null | head -n 1)"
  libdirs="$prefix/usr/lib/$triplet:$prefix/lib/$triplet"
  torch=""
  for finder in "$dir/find-libtorch.sh" "$(dirname "$self")/find-libtorch.sh"; do
    if [ -x "$finder" ]; then
      torch="$("$finder" --cmake-args | sed -n 's/^-DCMAKE_PREFIX_PATH=//p')"
      break
    fi
  done
  # Written out so that a shell that did not source this can take the same settings.
  cat > "$prefix/env.sh" << EOF
# Written by install-debs.sh: the unpacked packages in $prefix.
export STOKE_DEPS_PREFIX="$prefix"
export CMAKE_PREFIX_PATH="$prefix/usr${torch:+:$torch}\${CMAKE_PREFIX_PATH:+:\$CMAKE_PREFIX_PATH}"
export PATH="$prefix/usr/bin:\$PATH"
export LD_LIBRARY_PATH="$libdirs\${LD_LIBRARY_PATH:+:\$LD_LIBRARY_PATH}"
# pkg-config's files name /usr/lib; the linker finds the libraries here instead.
export LIBRARY_PATH="$libdirs\${LIBRARY_PATH:+:\$LIBRARY_PATH}"
export PKG_CONFIG_PATH="$prefix/usr/lib/$triplet/pkgconfig:$prefix/usr/share/pkgconfig\${PKG_CONFIG_PATH:+:\$PKG_CONFIG_PATH}"
EOF
  _stoke_env_file="$prefix/env.sh"
}

if [ "${BASH_SOURCE[0]}" != "$0" ]; then
  # Sourced: unpack, then set the variables here (once, even if sourced again).
  if _stoke_install_debs "$@"; then
    if [[ ":${LD_LIBRARY_PATH:-}:" != *":$(dirname "$_stoke_env_file")/usr/lib/"* ]]; then
      # shellcheck source=/dev/null
      source "$_stoke_env_file"
    fi
    echo "install-debs: deps in $STOKE_DEPS_PREFIX; CMAKE_PREFIX_PATH=$CMAKE_PREFIX_PATH"
  fi
  unset -f _stoke_install_debs
  unset _stoke_env_file
else
  set -euo pipefail
  _stoke_install_debs "$@"
  echo "install-debs: now run: source $_stoke_env_file"
fi
