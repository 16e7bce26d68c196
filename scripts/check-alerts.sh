#!/usr/bin/env bash
# Checks deploy/prometheus.yml (and the rule file it loads) with promtool, then runs the
# alerting rules' unit tests (deploy/prometheus/alerts_test.yml): each alert must fire on
# the series that should raise it and stay quiet on healthy ones.
# Exit status: 0 clean, 1 on a failure, 77 (skipped) without promtool.
set -euo pipefail
cd "$(dirname "$0")/.."
if ! command -v promtool > /dev/null; then
  echo "check-alerts: promtool is not installed (Debian's prometheus package has it)"
  exit 77
fi
promtool check config deploy/prometheus.yml
promtool test rules deploy/prometheus/alerts_test.yml
