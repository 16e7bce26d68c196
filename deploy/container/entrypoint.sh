#!/bin/sh
# The image's entry point: the first argument picks the program, the rest are its flags.
#   coordinator [flags]   stoke-coordinator; unless given, --address 0.0.0.0:50051,
#                         --metrics-address 0.0.0.0:9464, --data-dir /var/lib/stoke and
#                         --local-workers 0 (workers attach from their own containers)
#   worker [flags]        stoke-worker (--coordinator, or $STOKE_ADDRESS)
#   stoke [args]          the CLI
# Anything else runs as a command (a shell, to look around).
set -e

# has_flag NAME ARGS...: whether ARGS set --NAME (as "--NAME VALUE" or "--NAME=VALUE").
has_flag() {
  name="$1"
  shift
  for arg in "$@"; do
    case "$arg" in --"$name" | --"$name"=*) return 0 ;; esac
  done
  return 1
}

case "${1:-coordinator}" in
  coordinator)
    [ $# -gt 0 ] && shift
    defaults=""
    has_flag address "$@" || defaults="$defaults --address 0.0.0.0:50051"
    has_flag metrics-address "$@" || defaults="$defaults --metrics-address 0.0.0.0:9464"
    has_flag data-dir "$@" || defaults="$defaults --data-dir /var/lib/stoke"
    has_flag local-workers "$@" || defaults="$defaults --local-workers 0"
    # shellcheck disable=SC2086  # the defaults hold no spaces within a word
    exec stoke-coordinator $defaults "$@"
    ;;
  worker)
    shift
    exec stoke-worker "$@"
    ;;
  stoke)
    shift
    exec stoke "$@"
    ;;
  *)
    exec "$@"
    ;;
esac
