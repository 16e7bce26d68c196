#!/usr/bin/env bash
# Copies the given programs into DEST/bin and every shared library they load (as ldd
# resolves them, so by their SONAME) into DEST/lib, leaving out the C library itself,
# which the runtime image's base provides. Folders named in STOKE_EXTRA_LIB_DIRS (":"
# separated) are copied whole into DEST/lib: a CUDA LibTorch opens some of its libraries
# (cuDNN's engines, NVRTC's builtins) only at run time, where ldd cannot see them.
#   collect-libs.sh DEST PROGRAM...
set -euo pipefail
dest="$1"
shift
mkdir -p "$dest/bin" "$dest/lib"
for program in "$@"; do
  install -m 755 "$program" "$dest/bin/"
done
# ldd prints "name => /path (address)"; a library it cannot find is an error now, not at
# the first run of the image.
if ldd "$@" | grep -q 'not found'; then
  ldd "$@" | grep 'not found' >&2
  echo "collect-libs: unresolved libraries" >&2
  exit 1
fi
ldd "$@" | awk '$2 == "=>" && $3 ~ /^\// {print $1, $3}' | sort -u |
  while read -r soname path; do
    case "$soname" in
      libc.so.* | libm.so.* | libpthread.so.* | libdl.so.* | librt.so.* | ld-linux*) continue ;;
    esac
    cp -L "$path" "$dest/lib/$soname"
  done
IFS=: read -r -a extra <<< "${STOKE_EXTRA_LIB_DIRS:-}"
for dir in "${extra[@]}"; do
  [ -n "$dir" ] && cp -a "$dir"/. "$dest/lib/"
done
echo "collect-libs: $# programs, $(find "$dest/lib" -type f | wc -l) libraries," \
  "$(du -sh "$dest" | cut -f1)"
