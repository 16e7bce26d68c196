#!/usr/bin/env bash
# Checks that no function of the coordinator (every .cc under server/) or of the three
# programs' mains (server/main.cc, worker/main.cc, client/cli/main.cc) passes 80 lines, with
# clang-tidy's readability-function-size check: a function longer than a screen does more
# than one thing, and gets split into named steps.
#   scripts/check-function-size.sh BUILD_DIR [FILE.cc ...]
# BUILD_DIR holds the compile_commands.json CMake writes (read as scripts/check-tidy.sh
# reads it: tidy-database.py); files it does not compile are left out and named. The
# count is clang-tidy's: the lines from a function's opening brace to its closing one,
# comments and blank lines included; a lambda counts in the function that holds it.
# STOKE_MAX_FUNCTION_LINES sets another limit (to see which functions come closest).
# Exit status: 0 clean; 1 with each function that is too long named; 77 skipped (no
# clang-tidy).
set -euo pipefail
cd "$(dirname "$0")/.."
build="${1:?usage: $0 BUILD_DIR [FILE.cc ...]}"
shift
max_lines="${STOKE_MAX_FUNCTION_LINES:-80}"
tool=check-function-size
source scripts/tidy-prelude.sh

if [[ $# -gt 0 ]]; then
  files=("$@")
else
  mapfile -t files < <({ find server -name '*.cc'; echo worker/main.cc; echo client/cli/main.cc; } |
    sort)
fi
keep_compiled "${files[@]}"
if [[ ${#compiled[@]} -eq 0 ]]; then
  echo "check-function-size: no file that $build compiles" >&2
  exit 1
fi

# Only this check, whatever .clang-tidy says; no header is judged (HeaderFilterRegex
# unset), so each function is counted once, in its own .cc.
config="{Checks: '-*,readability-function-size', CheckOptions: [{key: readability-function-size.LineThreshold, value: $max_lines}]}"
echo "check-function-size: $($tidy --version | grep -m1 version); ${#compiled[@]} file(s)," \
  "at most $max_lines lines a function"
out="$database/findings"
printf '%s\0' "${compiled[@]}" |
  xargs -0 -n 1 -P "$(nproc)" "$tidy" -p "$database" --quiet --config="$config" \
    --extra-arg=-Wno-unknown-warning-option > "$out" 2>&1 || true
# Each finding is a warning naming the function, then a note with its count. A file
# clang-tidy could not compile is a failure too: its functions went uncounted.
findings=$(python3 - "$out" "$PWD/" <<'PY'
import re, sys
root, found, errors, pending = sys.argv[2], set(), set(), None
for line in open(sys.argv[1]):
    m = re.match(r"(\S+?):(\d+):\d+: (warning|error|note): (.*)", line)
    if not m:
        continue
    path, number, kind, text = m.group(1).removeprefix(root), m.group(2), m.group(3), m.group(4)
    if kind == "error":
        errors.add(f"{path}:{number}: clang-tidy could not compile it: {text}")
    elif kind == "warning" and "[readability-function-size]" in text:
        pending = (path, int(number), re.search(r"function '([^']+)'", text).group(1))
    elif kind == "note" and pending and (count := re.match(r"(\d+) lines including", text)):
        found.add((*pending, int(count.group(1))))
        pending = None
for path, number, name, lines in sorted(found):
    print(f"{path}:{number}: {name}: {lines} lines")
for error in sorted(errors):
    print(error)
PY
)
if [[ -n "$findings" ]]; then
  echo "$findings"
  echo "check-function-size: the functions above pass $max_lines lines (or were not read):" \
    "split them into named steps" >&2
  exit 1
fi
echo "check-function-size: no function passes $max_lines lines"
