#!/usr/bin/env bash
# From a fresh clone: installs what is missing, builds, starts a coordinator with local
# workers (one per GPU, or two CPU workers) unless one already answers, and runs the
# example job with live progress. The coordinator keeps running for you to explore.
set -euo pipefail
cd "$(dirname "$0")/.."
root=$(pwd)
export STOKE_ADDRESS="${STOKE_ADDRESS:-127.0.0.1:50051}"
data_dir="${STOKE_DATA_DIR:-$root/.stoke}"
stoke="$root/build/bin/stoke"

echo "==> building (installs missing Debian packages on the first run)"
# The three programs only; ./scripts/test.sh builds the tests.
STOKE_BUILD_TARGETS="stoke-coordinator stoke-worker stoke" ./scripts/build.sh

if "$stoke" cluster >/dev/null 2>&1; then
  echo "==> using the coordinator already running at $STOKE_ADDRESS"
else
  echo "==> starting stoke-coordinator at $STOKE_ADDRESS (data in $data_dir)"
  mkdir -p "$data_dir"
  setsid "$root/build/bin/stoke-coordinator" --address "$STOKE_ADDRESS" --data-dir "$data_dir" \
    >>"$data_dir/coordinator.log" 2>&1 < /dev/null &
  echo $! > "$data_dir/coordinator.pid"
  for _ in $(seq 1 120); do
    workers=$("$stoke" cluster --output json 2>/dev/null | grep -c '"id"' || true)
    [ "${workers:-0}" -gt 0 ] && break
    sleep 0.5
  done
  if [ "${workers:-0}" -eq 0 ]; then
    echo "the coordinator did not come up; its log:" >&2
    tail -n 30 "$data_dir/coordinator.log" >&2
    exit 1
  fi
fi
"$stoke" cluster

echo "==> submitting examples/mlp-synthetic.yaml and watching it train"
"$stoke" submit examples/mlp-synthetic.yaml --watch

cat <<EOT

The coordinator is still running at $STOKE_ADDRESS. Next:
  export PATH="$root/build/bin:\$PATH"
  stoke list                      # every job
  stoke submit examples/mlp-synthetic.yaml --watch
  curl -s http://127.0.0.1:9464/metrics | grep ^stoke_
Stop it with:  kill \$(cat "$data_dir/coordinator.pid")
Its local workers train on across a coordinator restart (an upgrade costs no steps); to
stop them too:  "$root/build/bin/stoke-coordinator" --stop-workers --data-dir "$data_dir"
EOT
