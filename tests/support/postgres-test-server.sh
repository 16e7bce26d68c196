#!/usr/bin/env bash
# One throwaway PostgreSQL server for a whole CTest run (the postgres_server fixture): the
# store tests then make a database each instead of a server each.
#   postgres-test-server.sh start STATE   # STATE: a file that receives the socket folder
#   postgres-test-server.sh stop STATE
# The server listens only on a unix socket in a fresh temp folder. PostgreSQL refuses to
# run as root; as root the server runs as `nobody`, who owns that folder. Without
# PostgreSQL's binaries `start` does nothing and the tests skip, saying why.
set -euo pipefail
action="$1"
state="$2"
as_db_user=()
[ "$(id -u)" -eq 0 ] && as_db_user=(runuser -u nobody --)

stop() {
  [ -s "$state" ] || return 0
  local dir
  dir=$(cat "$state")
  if [ -f "$dir/data/postmaster.pid" ]; then
    "${as_db_user[@]}" "$(cat "$dir/bin")/pg_ctl" -D "$dir/data" -m immediate -w stop \
      > /dev/null 2>&1 || true
  fi
  rm -rf "$dir" "$state"
}

case "$action" in
  start)
    stop  # what an interrupted run left
    bin="${STOKE_POSTGRES_BIN:-}"
    # `|| true`: with no server installed the glob matches nothing, and under `set -e`
    # and pipefail a failed `ls` would end the script instead of skipping.
    [ -n "$bin" ] || bin=$(ls -d /usr/lib/postgresql/*/bin 2> /dev/null | sort -V | tail -1 || true)
    if [ -z "$bin" ] || [ ! -x "$bin/initdb" ]; then
      echo "no PostgreSQL server binaries; the PostgreSQL store tests will skip"
      exit 0
    fi
    dir=$(mktemp -d "${TMPDIR:-/tmp}/stoke-pg-XXXXXX")
    [ "$(id -u)" -eq 0 ] && chown nobody "$dir"
    echo "$bin" > "$dir/bin"
    "${as_db_user[@]}" "$bin/initdb" -D "$dir/data" -U stoke --auth=trust --no-sync -E UTF8 \
      --locale=C > "$dir/initdb.log" 2>&1 || { cat "$dir/initdb.log"; exit 1; }
    "${as_db_user[@]}" "$bin/pg_ctl" -D "$dir/data" -l "$dir/server.log" -w -t 60 \
      -o "-k $dir -c listen_addresses= -c fsync=off -c max_connections=200" start > /dev/null ||
      { cat "$dir/server.log"; exit 1; }
    echo "$dir" > "$state"
    echo "PostgreSQL for the tests: postgresql:///postgres?host=$dir&user=stoke"
    ;;
  stop) stop ;;
  *) echo "usage: $0 start|stop STATE" >&2; exit 2 ;;
esac
