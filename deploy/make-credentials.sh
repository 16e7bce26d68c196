#!/usr/bin/env bash
# Makes what a coordinator deployed with TLS and tokens needs, for compose or Kubernetes:
#
#   deploy/make-credentials.sh DIR [NAME...]
#   WORKER_HOSTS="gpu-1 gpu-2" deploy/make-credentials.sh DIR [NAME...]
#
# NAME...: the names clients and workers reach the coordinator by (DNS names or IPs; by
# default coordinator, localhost and 127.0.0.1). Writes
#   DIR/coordinator/  tls.crt tls.key (self-signed, those names as SANs), tokens (an
#                     admin and a worker join token, hashes only), metrics.token
#   DIR/worker/       ca.crt (the coordinator's certificate, to verify it) and join.token;
#                     with WORKER_HOSTS, a token of its own per host instead
#                     (DIR/worker/HOST.token), which registers that host's workers only
#   DIR/prometheus/   metrics.token
#   DIR/admin.token   the admin's token, for STOKE_TOKEN (shown once here)
# Mount DIR/coordinator and DIR/worker at /etc/stoke/credentials in their containers (the
# image's entry point turns the files it finds there into flags). Keep DIR out of git.
set -euo pipefail
[ $# -ge 1 ] || { echo "usage: $0 DIR [NAME...]" >&2; exit 2; }
dir="$1"
shift
names=("$@")
[ ${#names[@]} -gt 0 ] || names=(coordinator localhost 127.0.0.1)
if [ -e "$dir/coordinator/tls.key" ]; then
  echo "$dir already holds credentials; remove it to make new ones" >&2
  exit 1
fi
umask 077
mkdir -p "$dir/coordinator" "$dir/worker" "$dir/prometheus"

san=""
for n in "${names[@]}"; do
  if [[ "$n" =~ ^[0-9.]+$ || "$n" == *:* ]]; then san="$san,IP:$n"; else san="$san,DNS:$n"; fi
done
openssl req -x509 -newkey rsa:2048 -nodes -days 825 -subj "/CN=${names[0]}" \
  -addext "subjectAltName=${san#,}" \
  -keyout "$dir/coordinator/tls.key" -out "$dir/coordinator/tls.crt" 2> /dev/null
cp "$dir/coordinator/tls.crt" "$dir/worker/ca.crt"

new_token() { echo "stk_$(openssl rand -hex 32)"; }
hash_of() { printf 'sha256:%s' "$(printf '%s' "$1" | sha256sum | cut -d' ' -f1)"; }
admin=$(new_token)
join=$(new_token)
metrics=$(new_token)
{
  echo "# NAME ROLE sha256:HEX [hosts=HOST] (stoke token create NAME --role R adds lines)"
  echo "admin admin $(hash_of "$admin")"
  if [ -n "${WORKER_HOSTS:-}" ]; then
    for host in $WORKER_HOSTS; do
      token=$(new_token)
      echo "$token" > "$dir/worker/$host.token"
      echo "$host worker $(hash_of "$token") hosts=$host"
    done
  else
    echo "workers worker $(hash_of "$join")"
  fi
} > "$dir/coordinator/tokens"
[ -n "${WORKER_HOSTS:-}" ] || echo "$join" > "$dir/worker/join.token"
echo "$metrics" > "$dir/coordinator/metrics.token"
echo "$metrics" > "$dir/prometheus/metrics.token"
echo "$admin" > "$dir/admin.token"
# The containers run as uid 10001 (deploy/container/Containerfile): let them read.
chmod -R a+rX "$dir/coordinator" "$dir/worker" "$dir/prometheus"
echo "credentials in $dir; the admin's token (also in $dir/admin.token):"
echo "$admin"
