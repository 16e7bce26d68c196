#!/usr/bin/env bash
# deploy/slurm/stoke-workers.sbatch against a real single-node Slurm started here: munged,
# slurmctld and slurmd in a temp folder (two GPUs declared on stand-in device files, so
# that --gpus-per-task=1 allocates), a real coordinator, and the batch script's workers
# (on CPUs: STOKE_WORKER_DEVICE=cpu). The allocation must show up as two workers, train a
# short job to SUCCEEDED, and leave the cluster when it is cancelled.
#   slurm_test.sh COORDINATOR WORKER CLI SOURCE_DIR
# Label slurm, left out of scripts/test.sh: `cd build && ctest -L slurm`. Exit 77
# (skipped) unless run as root with Slurm and MUNGE installed (Debian: slurmctld slurmd
# slurm-client munge).
set -uo pipefail
coordinator_bin="$1"
worker_bin="$2"
cli_bin="$3"
source_dir="$4"
script="$source_dir/deploy/slurm/stoke-workers.sbatch"

[ "$(id -u)" -eq 0 ] || { echo "SKIP: starts slurmctld and slurmd, which needs root"; exit 77; }
for tool in munged slurmctld slurmd sbatch scancel squeue sinfo scontrol; do
  command -v "$tool" > /dev/null ||
    { echo "SKIP: no $tool (Debian: apt-get install slurmctld slurmd slurm-client munge)"; exit 77; }
done

tmp=$(mktemp -d)
coordinator_pid=""
# The job's steps must end before the daemons stop, or slurmstepd outlives them; each
# daemon is waited for.
cleanup() {
  local pidfile pid
  if [ -n "${job:-}" ]; then
    scancel "$job" 2> /dev/null
  fi
  job_gone() { [ -z "$(squeue -h -j "$1" 2> /dev/null)" ]; }
  [ -n "${job_id:-}" ] && wait_for 30 job_gone "$job_id"
  for pidfile in "$tmp/slurmd.pid" "$tmp/slurmctld.pid" "$tmp/munged.pid"; do
    [ -s "$pidfile" ] || continue
    pid=$(cat "$pidfile")
    kill "$pid" 2> /dev/null
    wait_for 15 bash -c "! kill -0 $pid 2> /dev/null" || kill -9 "$pid" 2> /dev/null
  done
  if [ -n "$coordinator_pid" ]; then
    kill "$coordinator_pid" 2> /dev/null
    wait "$coordinator_pid"
  fi
  rm -rf "$tmp"
}
trap cleanup EXIT
fail() {
  echo "FAIL: $*"
  for log in "$tmp"/log/*.log "$tmp"/stoke-worker-*.log "$tmp"/batch-*.out "$tmp/coordinator.log"; do
    [ -f "$log" ] && { echo "--- $log"; tail -n 15 "$log"; }
  done
  exit 1
}
wait_for() {  # wait_for SECONDS COMMAND...: until COMMAND succeeds
  local deadline=$((SECONDS + $1))
  shift
  until "$@"; do
    [ $SECONDS -ge $deadline ] && return 1
    sleep 1
  done
}

mkdir -p "$tmp/state" "$tmp/spool" "$tmp/log" "$tmp/data"
dd if=/dev/urandom of="$tmp/munge.key" bs=1024 count=1 status=none
chmod 600 "$tmp/munge.key"
munged --force --key-file="$tmp/munge.key" --socket="$tmp/munge.socket" \
  --log-file="$tmp/log/munged.log" --pid-file="$tmp/munged.pid" --seed-file="$tmp/munged.seed" ||
  fail "munged did not start"

host=$(hostname -s)
port=$((20000 + RANDOM % 20000))
cat > "$tmp/slurm.conf" << CONF
ClusterName=stoketest
SlurmctldHost=$host(127.0.0.1)
SlurmUser=root
SlurmdUser=root
SlurmctldPort=$port
SlurmdPort=$((port + 1))
AuthType=auth/munge
CredType=cred/munge
AuthInfo=socket=$tmp/munge.socket
StateSaveLocation=$tmp/state
SlurmdSpoolDir=$tmp/spool
SlurmctldPidFile=$tmp/slurmctld.pid
SlurmdPidFile=$tmp/slurmd.pid
SlurmctldLogFile=$tmp/log/slurmctld.log
SlurmdLogFile=$tmp/log/slurmd.log
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
SelectType=select/cons_tres
SelectTypeParameters=CR_Core
GresTypes=gpu
MpiDefault=none
ReturnToService=2
JobCompType=jobcomp/none
AccountingStorageType=accounting_storage/none
NodeName=$host NodeAddr=127.0.0.1 CPUs=$(nproc) Gres=gpu:2 State=UNKNOWN
PartitionName=stoke Nodes=ALL Default=YES MaxTime=INFINITE State=UP
CONF
# Two stand-in GPUs: Slurm wants a device file per GPU; CPU workers never open them.
printf 'NodeName=%s Name=gpu File=/dev/null\nNodeName=%s Name=gpu File=/dev/zero\n' \
  "$host" "$host" > "$tmp/gres.conf"
export SLURM_CONF="$tmp/slurm.conf"
slurmctld -f "$SLURM_CONF" || fail "slurmctld did not start"
slurmd -f "$SLURM_CONF" || fail "slurmd did not start"
node_idle() { sinfo -h -o %t 2> /dev/null | grep -qx idle; }
wait_for 30 node_idle || fail "the node did not become idle: $(sinfo 2>&1)"

"$coordinator_bin" --address 127.0.0.1:0 --data-dir "$tmp/data" --local-workers 0 \
  --metrics-address "" > "$tmp/coordinator.log" 2>&1 &
coordinator_pid=$!
wait_for 30 test -s "$tmp/data/coordinator.address" || fail "the coordinator wrote no address"
address=$(cat "$tmp/data/coordinator.address")
export STOKE_ADDRESS="$address"

echo "== sbatch stoke-workers.sbatch $address (2 tasks, one stand-in GPU each)"
job=$(cd "$tmp" && STOKE_WORKER="$worker_bin" STOKE_WORKER_DEVICE=cpu STOKE_LOG_DIR="$tmp" \
  sbatch --parsable --ntasks-per-node=2 --cpus-per-task=1 --gpus-per-task=1 --time=20 \
  --output="$tmp/batch-%j.out" "$script" "$address") || fail "sbatch refused the script"
echo "Slurm job $job"
job_id="$job"
slurm_workers() { "$cli_bin" cluster -o json 2> /dev/null | grep -o "slurm-$job-[0-9]*" | sort -u | wc -l; }
two_workers() { [ "$(slurm_workers)" -eq 2 ]; }
wait_for 90 two_workers || fail "the allocation did not become two workers (saw $(slurm_workers))"
"$cli_bin" cluster

echo "== a short job on them"
cat > "$tmp/job.yaml" << 'YAML'
name: slurm-smoke
model:
  mlp: {hidden: [64]}
data:
  synthetic: {features: 32, num_classes: 4}
training: {steps: 40, batch_size: 64}
metrics: {interval_steps: 10}
YAML
"$cli_bin" submit "$tmp/job.yaml" --watch > "$tmp/watch.log" 2>&1
rc=$?
cat "$tmp/watch.log"
if [ $rc -ne 0 ] || ! grep -q SUCCEEDED "$tmp/watch.log"; then
  fail "the job did not end SUCCEEDED (exit $rc)"
fi
"$cli_bin" status 1 | grep -q "slurm-$job-" || fail "stoke status 1 names no worker of the allocation"

echo "== scancel: the capacity leaves"
scancel "$job"
no_workers() { [ "$(slurm_workers)" -eq 0 ]; }
wait_for 60 no_workers || fail "the workers of a cancelled allocation stayed attached"
job=""
echo "PASS: a Slurm allocation became two Stoke workers, trained a job, and left"
