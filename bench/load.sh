#!/usr/bin/env bash
# The control plane under load (BENCHMARKS.md, "Control plane under load"): starts a real
# stoke-coordinator from build/bin (it builds nothing) on a loopback port with a job store in
# a temp folder, runs stoke-load against it, and prints stoke-load's key=value lines and
# its Markdown table row; on PostgreSQL also the server's WAL syncs and commits.
#   bench/load.sh                       # SQLite, then PostgreSQL, at the issue's settings
#   STORE=sqlite DURATION=5 WORKERS=4 BACKLOG=20 WATCHERS=10 bench/load.sh   # a smoke run
# Settings (environment): STORE (sqlite, postgres or both), DURATION (s), WORKERS, BACKLOG,
# SUBMIT_RATE, WATCHERS, GET_RATE, LIST_RATE (per second), JOB_LENGTH_MS,
# REPORT_INTERVAL_MS; STOKE_BIN_DIR (default build/bin). Arguments go to stoke-load.
# PostgreSQL runs from Debian's binaries (/usr/lib/postgresql/*/bin) on a unix socket in
# the temp folder, with its durable defaults (fsync on), as `nobody` when run as root.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
bin=${STOKE_BIN_DIR:-$root/build/bin}
store=${STORE:-both}
for tool in stoke-coordinator stoke-load; do
  [ -x "$bin/$tool" ] || { echo "bench/load.sh: $bin/$tool not found; build it first" >&2; exit 2; }
done
load_args=(--duration "${DURATION:-60}" --workers "${WORKERS:-64}" --backlog "${BACKLOG:-1000}"
  --submit-rate "${SUBMIT_RATE:-50}" --watchers "${WATCHERS:-500}" --get-rate "${GET_RATE:-50}"
  --list-rate "${LIST_RATE:-10}" --job-length-ms "${JOB_LENGTH_MS:-500}"
  --report-interval-ms "${REPORT_INTERVAL_MS:-200}" "$@")

tmp=$(mktemp -d "${TMPDIR:-/tmp}/stoke-load-XXXXXX")
coordinator_pid=""
pg_bin=""
as_db_user=()
[ "$(id -u)" -eq 0 ] && as_db_user=(runuser -u nobody --)
cleanup() {
  if [ -n "$coordinator_pid" ]; then
    kill "$coordinator_pid" 2> /dev/null || true
    wait "$coordinator_pid" 2> /dev/null || true
  fi
  if [ -n "$pg_bin" ] && [ -f "$tmp/pg/data/postmaster.pid" ]; then
    "${as_db_user[@]}" "$pg_bin/pg_ctl" -D "$tmp/pg/data" -m fast -w stop > /dev/null 2>&1 || true
  fi
  rm -rf "$tmp"
}
trap cleanup EXIT

start_postgres() {
  pg_bin=$(ls -d /usr/lib/postgresql/*/bin 2> /dev/null | sort -V | tail -1)
  if [ -z "$pg_bin" ] || [ ! -x "$pg_bin/initdb" ]; then
    echo "bench/load.sh: no PostgreSQL server binaries (Debian's postgresql)" >&2
    exit 2
  fi
  mkdir -p "$tmp/pg"
  [ "$(id -u)" -eq 0 ] && chown nobody "$tmp" "$tmp/pg"
  "${as_db_user[@]}" "$pg_bin/initdb" -D "$tmp/pg/data" -U stoke --auth=trust -E UTF8 \
    --locale=C > "$tmp/pg/initdb.log" 2>&1 || { cat "$tmp/pg/initdb.log"; exit 1; }
  "${as_db_user[@]}" "$pg_bin/pg_ctl" -D "$tmp/pg/data" -l "$tmp/pg/server.log" -w -t 60 \
    -o "-k $tmp/pg -c listen_addresses= -c max_connections=50" start > /dev/null ||
    { cat "$tmp/pg/server.log"; exit 1; }
}

# run LABEL [coordinator arguments...]
run() {
  local label=$1 data="$tmp/$1"
  shift
  mkdir -p "$data"
  "$bin/stoke-coordinator" --address 127.0.0.1:0 --metrics-address 127.0.0.1:0 \
    --data-dir "$data" --local-workers 0 --log-level warn \
    --max-jobs-per-owner 1000000 --max-watch-streams 1000000 \
    "$@" > "$data/coordinator.log" 2>&1 &  # one caller submits and watches it all
  coordinator_pid=$!
  for _ in $(seq 600); do
    [ -s "$data/coordinator.address" ] && break
    kill -0 "$coordinator_pid" 2> /dev/null || { cat "$data/coordinator.log" >&2; exit 1; }
    sleep 0.1
  done
  [ -s "$data/coordinator.address" ] || { echo "coordinator did not start" >&2; exit 1; }
  local status=0
  "$bin/stoke-load" --coordinator "$(cat "$data/coordinator.address")" \
    --metrics-address "$(cat "$data/metrics.address")" --coordinator-pid "$coordinator_pid" \
    --label "$label" "${load_args[@]}" || status=$?
  kill "$coordinator_pid"
  wait "$coordinator_pid" || true
  coordinator_pid=""
  if [ "$status" -ne 0 ]; then
    echo "bench/load.sh: stoke-load failed ($status) on $label; coordinator log:" >&2
    tail -20 "$data/coordinator.log" >&2
    exit "$status"
  fi
}

echo "# $(date -u +%FT%TZ) $(git -C "$root" rev-parse --short HEAD 2> /dev/null || echo '?')" \
  "nproc=$(nproc) load=$(cut -d' ' -f1-3 /proc/loadavg) settings: ${load_args[*]}"
case "$store" in
  sqlite | both) run sqlite ;;&
  postgres | both)
    start_postgres
    run postgres --store "postgresql:///postgres?host=$tmp/pg&user=stoke"
    # What the store did for it, by the server's own counters (the coordinator has
    # disconnected, so they are complete): WAL flushes to disk, and committed
    # transactions, reads included.
    "$pg_bin/psql" -h "$tmp/pg" -U stoke -d postgres -Atc \
      "SELECT 'postgres_wal_syncs=' || wal_sync || ' postgres_commits=' || xact_commit
         FROM pg_stat_wal, pg_stat_database WHERE datname = 'postgres'"
    ;;
  sqlite) ;;
  *) echo "bench/load.sh: STORE must be sqlite, postgres or both" >&2; exit 2 ;;
esac
