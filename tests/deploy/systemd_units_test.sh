#!/usr/bin/env bash
# The systemd units of deploy/systemd/, offline (no systemd running needed):
# `systemd-analyze verify` must find nothing wrong with them but the absence of the
# binaries they start (they are not installed here), so a mistyped directive fails; and
# `systemd-analyze security` must rate each no worse than 5.0 ("OK"), so that dropping a
# hardening line fails too.
#   systemd_units_test.sh SOURCE_DIR
# Exit 77 (skipped): no systemd-analyze (scripts/setup-deps.sh installs systemd).
set -uo pipefail
units="$1/deploy/systemd"
command -v systemd-analyze > /dev/null || { echo "SKIP: no systemd-analyze"; exit 77; }
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
cp "$units"/*.service "$tmp/"
status=0
# A template is verified as an instance of it.
for unit in stoke-coordinator.service stoke-worker@0.service; do
  file="$tmp/$unit"
  [ -e "$file" ] || ln -s "$tmp/${unit/@0/@}" "$file"
  problems=$(systemd-analyze verify "$file" 2>&1 |
    grep -v 'Command /usr/local/bin/stoke-[a-z]* is not executable')
  if [ -n "$problems" ]; then
    echo "FAIL $unit:"
    echo "$problems"
    status=1
  else
    echo "ok   $unit: systemd-analyze verify"
  fi
  rating=$(systemd-analyze security --offline=yes --threshold=50 "$file" 2>&1)
  rc=$?
  echo "$rating" | grep 'Overall exposure'
  if [ $rc -ne 0 ]; then
    echo "FAIL $unit: exposure above 5.0"
    status=1
  fi
done
exit $status
