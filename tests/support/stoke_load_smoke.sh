#!/usr/bin/env bash
# bench/load.sh in miniature, against a real coordinator on SQLite: stoke-load finishes,
# every job it submitted was accepted and seen through, and no watcher missed a state
# change (stoke-load itself exits 1 on a failed submission or a missed state change).
# Arguments: the folder holding stoke-coordinator and stoke-load, the repository root.
set -euo pipefail
out=$(STOKE_BIN_DIR="$1" STORE=sqlite DURATION=5 WORKERS=4 BACKLOG=20 WATCHERS=10 \
  SUBMIT_RATE=4 GET_RATE=10 LIST_RATE=2 "$2/bench/load.sh")
echo "$out"
value() { grep -o "\b$1=[0-9.]*" <<<"$out" | cut -d= -f2; }
submitted=$(value submitted)
[ "$submitted" -ge 15 ] || { echo "only $submitted submissions in 5 s at 4/s"; exit 1; }
[ "$(value accepted)" -eq "$submitted" ]
[ "$(value rejected)" -eq 0 ]
[ "$(value backlog)" -eq 20 ]
[ "$(value state_changes_dropped)" -eq 0 ]
[ "$(value events_dropped)" -eq 0 ]
# The workers ran jobs and watchers saw them end: the load was real.
[ "$(value jobs_finished)" -ge 20 ]
[ "$(value completed)" -ge 10 ]
[ "$(value reports)" -gt 0 ]
grep -q '^| sqlite | [0-9]' <<<"$out"
