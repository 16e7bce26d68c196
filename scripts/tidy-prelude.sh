# Sourced by check-tidy.sh and check-function-size.sh, after `build` is set and with
# `tool` naming the caller: finds clang-tidy ($tidy; exit 77 without one) and writes the
# copy of the build's compile_commands.json that clang-tidy reads ($database), with each
# file of a unity batch given its own command and GCC's precompiled header left out
# (tidy-database.py). The copy goes when the caller exits.
tidy="${CLANG_TIDY:-$(command -v clang-tidy || true)}"
if [[ -z "$tidy" ]]; then
  echo "$tool: SKIPPED: no clang-tidy (Debian's clang-tidy package)"
  exit 77
fi
if [[ ! -x "$tidy" ]]; then
  echo "$tool: CLANG_TIDY=$tidy: no such program" >&2
  exit 1
fi
if [[ ! -f "$build/compile_commands.json" ]]; then
  echo "$tool: no $build/compile_commands.json: configure the build first" >&2
  exit 1
fi
database=$(mktemp -d)
trap 'rm -rf "$database"' EXIT
python3 scripts/tidy-database.py "$build/compile_commands.json" "$database/compile_commands.json"

# Sets the array `compiled` to those of the files given that the build compiles, saying
# which it leaves out (a header, or a file of a part the build leaves out).
keep_compiled() {  # FILE...
  local f
  compiled=()
  for f in "$@"; do
    if grep -q "\"file\": \"$PWD/$f\"" "$database/compile_commands.json" ||
      grep -q "\"file\": \"$f\"" "$database/compile_commands.json"; then
      compiled+=("$f")
    else
      echo "$tool: not compiled by $build, left out: $f"
    fi
  done
}
