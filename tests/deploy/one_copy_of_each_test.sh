#!/usr/bin/env bash
# cmake/OneCopyOfEach.cmake on small CMake projects with two real copies of one header, as
# a GPU host has them (its own in the compiler's directories, a carried one elsewhere):
#   1. the build chose the carried copy: a file whose target does not link the dependency
#      still compiles against the carried copy, not the host's;
#   2. the build chose the host's copy while another dependency's include directory holds
#      a different one: configure fails, naming both files;
#   3. the same copy twice (same content) is one copy: configure passes.
#   one_copy_of_each_test.sh SOURCE_DIR
set -uo pipefail
source_dir="$1"
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
failures=0
ok() { echo "ok   $1"; }
fail() { echo "FAIL $1"; failures=$((failures + 1)); }

# The host's copy (searched by the compiler after every -I/-isystem, as /usr/include is)
# and the carried one, of one fake header-only library.
mkdir -p "$tmp/host/cli" "$tmp/carried/include/cli" "$tmp/same/include/cli"
echo '#define FAKE_CLI_VERSION 241' > "$tmp/host/cli/version.h"
echo '#define FAKE_CLI_VERSION 212' > "$tmp/carried/include/cli/version.h"
cp "$tmp/host/cli/version.h" "$tmp/same/include/cli/version.h"

# project DIR CLI_INCLUDE OTHER_INCLUDE: a project whose `Fake::cli` declares CLI_INCLUDE,
# `Fake::rpc` declares OTHER_INCLUDE, and whose library `flags` includes cli/version.h
# without linking Fake::cli (as stoke_flag_sources once did).
project() {
  mkdir -p "$1"
  cat > "$1/CMakeLists.txt" << EOF
cmake_minimum_required(VERSION 3.22)
project(one_copy LANGUAGES CXX)
set(STOKE_HOST_INCLUDE_DIRS "$tmp/host")
include("$source_dir/cmake/OneCopyOfEach.cmake")
add_library(Fake::cli INTERFACE IMPORTED)
set_target_properties(Fake::cli PROPERTIES INTERFACE_INCLUDE_DIRECTORIES "$2")
add_library(Fake::rpc INTERFACE IMPORTED)
set_target_properties(Fake::rpc PROPERTIES INTERFACE_INCLUDE_DIRECTORIES "$3")
stoke_one_copy_of_each("fake-cli|Fake::cli|cli/version.h" "fake-rpc|Fake::rpc|cli/version.h")
add_library(flags STATIC flags.cc)
add_executable(program main.cc)
target_link_libraries(program PRIVATE flags Fake::cli)
EOF
  printf '#include <cli/version.h>\nint FlagsVersion() { return FAKE_CLI_VERSION; }\n' \
    > "$1/flags.cc"
  printf '#include <cli/version.h>\nint FlagsVersion();\n%s\n' \
    'int main() { return FlagsVersion() == FAKE_CLI_VERSION ? 0 : 1; }' > "$1/main.cc"
}
configure() {  # configure DIR: CMake with the host's copy as the compiler's own directory
  cmake -S "$1" -B "$1/build" -G Ninja -DCMAKE_CXX_FLAGS="-idirafter $tmp/host" \
    > "$1/configure.log" 2>&1
}

# 1. Carried copy chosen: every file gets it, the program agrees with its library.
project "$tmp/carried-chosen" "$tmp/carried/include" "$tmp/carried/include"
if configure "$tmp/carried-chosen" && ninja -C "$tmp/carried-chosen/build" > /dev/null &&
  "$tmp/carried-chosen/build/program"; then
  ok "a carried copy comes first for every file, linked or not"
else
  fail "carried copy chosen: $(tail -n 20 "$tmp/carried-chosen/configure.log")"
fi
# The same project without the module: the two files disagree (the failure it prevents).
sed -i '/stoke_one_copy_of_each/d' "$tmp/carried-chosen/CMakeLists.txt"
rm -rf "$tmp/carried-chosen/build"
if configure "$tmp/carried-chosen" && ninja -C "$tmp/carried-chosen/build" > /dev/null &&
  ! "$tmp/carried-chosen/build/program"; then
  ok "without it, the library and the program would take different copies"
else
  fail "the fixture does not reproduce the mix it guards against"
fi

# 2. Host copy chosen, a different copy on another dependency's path: refused, both named.
project "$tmp/mixed" "$tmp/host" "$tmp/carried/include"
if configure "$tmp/mixed"; then
  fail "a mix of two copies was configured"
elif grep -q "two copies of fake-cli" "$tmp/mixed/configure.log" &&
  grep -qF "$tmp/host/cli/version.h" "$tmp/mixed/configure.log" &&
  grep -qF "$tmp/carried/include/cli/version.h" "$tmp/mixed/configure.log"; then
  ok "a mix is refused, naming both copies"
else
  fail "refused without naming both copies: $(cat "$tmp/mixed/configure.log")"
fi

# 3. Two places, one content: no conflict.
project "$tmp/same" "$tmp/host" "$tmp/same/include"
if configure "$tmp/same" && ninja -C "$tmp/same/build" > /dev/null && "$tmp/same/build/program"; then
  ok "the same copy in two places is one copy"
else
  fail "identical copies refused: $(tail -n 20 "$tmp/same/configure.log")"
fi

echo "$((4 - failures)) passed, $failures failed"
[ "$failures" -eq 0 ]
