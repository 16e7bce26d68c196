#!/bin/sh
# The image's entry point: the first argument picks the program, the rest are its flags.
#   coordinator [flags]   stoke-coordinator; unless given, --address 0.0.0.0:50051,
#                         --metrics-address 0.0.0.0:9464, --data-dir /var/lib/stoke and
#                         --local-workers 0 (workers attach from their own containers)
#   worker [flags]        stoke-worker (--coordinator, or $STOKE_ADDRESS)
# Credentials found in $STOKE_CREDENTIALS (default /etc/stoke/credentials; a mounted
# Secret or folder, see deploy/make-credentials.sh) become flags:
#   coordinator: tls.crt + tls.key (--tls-cert/--tls-key), client-ca.crt (--client-ca),
#                tokens (--auth-tokens), metrics.token (--metrics-token)
#   worker:      ca.crt (--tls-ca), join.token (--join-token-file), tls.crt + tls.key
#                (a client certificate: --tls-cert/--tls-key)
# A coordinator listening on 0.0.0.0 without them refuses to start (or give --insecure).
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

creds="${STOKE_CREDENTIALS:-/etc/stoke/credentials}"
# add_file FLAG FILE ARGS...: prints " FLAG PATH" when FILE is in $creds (not empty) and
# ARGS do not set FLAG already.
add_file() {
  flag="$1"
  file="$creds/$2"
  shift 2
  if [ -s "$file" ] && ! has_flag "$flag" "$@"; then printf ' --%s %s' "$flag" "$file"; fi
}

case "${1:-coordinator}" in
  coordinator)
    [ $# -gt 0 ] && shift
    defaults=""
    has_flag address "$@" || defaults="$defaults --address 0.0.0.0:50051"
    has_flag metrics-address "$@" || defaults="$defaults --metrics-address 0.0.0.0:9464"
    has_flag data-dir "$@" || defaults="$defaults --data-dir /var/lib/stoke"
    has_flag local-workers "$@" || defaults="$defaults --local-workers 0"
    if [ -s "$creds/tls.crt" ] && [ -s "$creds/tls.key" ]; then
      defaults="$defaults$(add_file tls-cert tls.crt "$@")$(add_file tls-key tls.key "$@")"
    fi
    defaults="$defaults$(add_file client-ca client-ca.crt "$@")"
    defaults="$defaults$(add_file auth-tokens tokens "$@")"
    defaults="$defaults$(add_file metrics-token metrics.token "$@")"
    # shellcheck disable=SC2086  # the defaults hold no spaces within a word
    exec stoke-coordinator $defaults "$@"
    ;;
  worker)
    shift
    defaults="$(add_file tls-ca ca.crt "$@")$(add_file join-token-file join.token "$@")"
    if [ -s "$creds/tls.crt" ] && [ -s "$creds/tls.key" ]; then
      defaults="$defaults$(add_file tls-cert tls.crt "$@")$(add_file tls-key tls.key "$@")"
    fi
    # shellcheck disable=SC2086  # the defaults hold no spaces within a word
    exec stoke-worker $defaults "$@"
    ;;
  stoke)
    shift
    exec stoke "$@"
    ;;
  *)
    exec "$@"
    ;;
esac
