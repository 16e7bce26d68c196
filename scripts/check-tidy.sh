#!/usr/bin/env bash
# Runs clang-tidy (the checks in .clang-tidy) on the code the newest commit changed, as CI
# does: a warning on a changed line fails; older lines of the same files are not judged.
# A LibTorch file takes clang-tidy about half a minute, so the whole tree is not checked
# each time; give files to check them whole.
#   scripts/check-tidy.sh BUILD_DIR [FILE.cc ...]
# Changed means added or modified between STOKE_TIDY_BASE (default: the first parent of
# HEAD, so a merge counts with everything it brings) and HEAD; at most STOKE_TIDY_MAX_FILES
# .cc files (default 12, the ones with the most changed lines; the rest are named). A
# changed header is judged through the changed files that include it. BUILD_DIR holds the
# compile_commands.json CMake writes; files it does not compile (another build's options)
# are left out and named.
# Exit status: 0 clean; 1 warnings (printed); 77 skipped (no clang-tidy, no git history,
# or nothing changed that this build compiles).
set -euo pipefail
cd "$(dirname "$0")/.."
build="${1:?usage: $0 BUILD_DIR [FILE.cc ...]}"
shift
tool=check-tidy
source scripts/tidy-prelude.sh

line_filter=""
if [[ $# -gt 0 ]]; then
  files=("$@")
else
  base="${STOKE_TIDY_BASE:-HEAD^1}"
  if ! git rev-parse --verify --quiet "$base^{commit}" > /dev/null; then
    echo "check-tidy: SKIPPED: no commit $base to compare with (a shallow or fresh history)"
    exit 77
  fi
  # The changed lines of every C++ file, as clang-tidy's --line-filter takes them, and
  # the .cc files by how many lines changed.
  mapfile -t files < <(git diff --numstat --diff-filter=AM "$base" HEAD -- '*.cc' |
    grep -vE '\stests/fuzz/' | sort -k1,1nr | awk '{print $3}')
  max="${STOKE_TIDY_MAX_FILES:-12}"
  if [[ ${#files[@]} -gt $max ]]; then
    echo "check-tidy: ${#files[@]} changed files; checking the $max with the most changed" \
      "lines, leaving out: ${files[*]:$max}"
    files=("${files[@]:0:$max}")
  fi
  line_filter=$(git diff -U0 --diff-filter=AM "$base" HEAD -- '*.cc' '*.h' | python3 -c '
import json, re, sys
ranges, name = {}, None
for line in sys.stdin:
    if line.startswith("+++ "):
        name = line[6:].strip() if line.startswith("+++ b/") else None
    elif line.startswith("@@") and name:
        m = re.match(r"@@ -\S+ \+(\d+)(?:,(\d+))? @@", line)
        start, count = int(m.group(1)), int(m.group(2) or 1)
        if count:
            ranges.setdefault(name, []).append([start, start + count - 1])
print(json.dumps([{"name": n, "lines": r} for n, r in ranges.items()]))')
fi

keep_compiled "${files[@]}"
if [[ ${#compiled[@]} -eq 0 ]]; then
  echo "check-tidy: SKIPPED: no changed C++ file that $build compiles"
  exit 77
fi

echo "check-tidy: $($tidy --version | grep -m1 version); ${#compiled[@]} file(s)"
failed=0
for f in "${compiled[@]}"; do
  args=(-p "$database" --quiet --warnings-as-errors="*" --extra-arg=-Wno-unknown-warning-option)
  [[ -n "$line_filter" ]] && args+=(--line-filter="$line_filter")
  if out=$("$tidy" "${args[@]}" "$f" 2>&1); then
    echo "check-tidy: ok      $f"
  else
    echo "check-tidy: FAILED  $f"
    grep -E 'warning:|error:' -A3 <<< "$out" | head -n 40
    failed=1
  fi
done
exit "$failed"
