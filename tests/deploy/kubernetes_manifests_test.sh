#!/usr/bin/env bash
# Every manifest in deploy/kubernetes/ must match the Kubernetes API's schemas, know no
# field the API does not, and pass Pod Security "restricted"; and the validator must
# refuse a broken manifest and an unrestricted pod (so that a pass means something). Runs the validator
# of deploy/kubernetes/validate/ from a copy in WORK_DIR, after `npm ci` there.
#   kubernetes_manifests_test.sh SOURCE_DIR WORK_DIR
# Exit 77 (skipped): no npm, or the npm registry cannot be reached.
set -uo pipefail
source_dir="$1"
work="$2"
validator="$source_dir/deploy/kubernetes/validate"

command -v npm > /dev/null || { echo "SKIP: no npm (scripts/setup-deps.sh installs it)"; exit 77; }
mkdir -p "$work"
cp "$validator/package.json" "$validator/package-lock.json" "$validator"/*.js "$work/"
# npm ci starts from an empty node_modules each time; a lockfile that has not changed
# since the last install needs none.
if ! cmp -s "$work/package-lock.json" "$work/node_modules/.installed-lock.json" 2> /dev/null; then
  if ! (cd "$work" && npm ci --no-audit --no-fund > npm-ci.log 2>&1); then
    if grep -qE 'ENOTFOUND|EAI_AGAIN|ECONNREFUSED|ETIMEDOUT|ENETUNREACH' "$work/npm-ci.log"; then
      echo "SKIP: npm ci cannot reach the registry:"
      tail -n 5 "$work/npm-ci.log"
      exit 77
    fi
    cat "$work/npm-ci.log"
    echo "FAIL: npm ci in $work"
    exit 1
  fi
  cp "$work/package-lock.json" "$work/node_modules/.installed-lock.json"
fi

status=0
echo "== deploy/kubernetes/ must be valid"
node "$work/validate.js" "$source_dir/deploy/kubernetes" || {
  echo "FAIL: a manifest in deploy/kubernetes/ does not match the API schemas"
  status=1
}
echo "== a broken Deployment must be refused, naming its mistakes"
broken=$(node "$work/validate.js" "$validator/fixtures/broken-deployment.yaml")
rc=$?
echo "$broken"
if [ $rc -ne 1 ]; then
  echo "FAIL: the validator exited $rc on the broken fixture (expected 1)"
  status=1
fi
for mistake in "must have required property selector" "spec/replicas must be integer"; do
  grep -qF "$mistake" <<< "$broken" || {
    echo "FAIL: the validator did not report: $mistake"
    status=1
  }
done
echo "== a pod with a mistyped field that breaks Pod Security \"restricted\" must be refused"
unrestricted=$(node "$work/validate.js" "$validator/fixtures/unrestricted-pod.yaml")
rc=$?
echo "$unrestricted"
if [ $rc -ne 1 ]; then
  echo "FAIL: the validator exited $rc on the unrestricted fixture (expected 1)"
  status=1
fi
for mistake in "/spec/securityContext/runAsNonroot: unknown field" \
  "/spec/automountServiceAccountToken: must be false" \
  "/spec/volumes/0/hostPath: volume type not allowed" \
  "/spec/containers/0/securityContext/allowPrivilegeEscalation: must be false" \
  "/spec/containers/0/securityContext/capabilities/drop: must include ALL" \
  "/spec/containers/0/securityContext/runAsNonRoot: must be true"; do
  grep -qF "$mistake" <<< "$unrestricted" || {
    echo "FAIL: the validator did not report: $mistake"
    status=1
  }
done
exit $status
