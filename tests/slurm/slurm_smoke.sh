#!/usr/bin/env bash
# A real single-node Slurm (ci/slurm/local_cluster.sh) runs the shipped ci/slurm/cpu.sbatch on
# 4 ranks (tp 2 x pp 2, two microbatches through the 1F1B pipeline) with a tiny model: the job
# completes with exit code 0, its log shows the 4-rank grid and a falling loss. The same job,
# signalled mid-run as a time limit would (USR1 to the batch script), saves, requeues itself,
# resumes and completes, with the uninterrupted job's loss curve. TERM to the job script saves
# without requeueing. A rank killed under srun ends the job. A job that can never fit is refused at submission, and the daemons stop.
# Exit 77 (ctest SKIP_RETURN_CODE) where the machine cannot run the daemons: not root, no apt,
# ports 6817/6818 taken, munged or slurmctld failing. It never passes without having run the job.
set -uo pipefail
SRC=${MPIFORMER_SOURCE_DIR:-$(cd "$(dirname "$0")/../.." && pwd)}
TRAIN=${MPIFORMER_TRAIN:?set MPIFORMER_TRAIN to the mpiformer-train binary}
CLUSTER=$SRC/ci/slurm/local_cluster.sh
JOB_TIMEOUT=180

TEST=slurm_smoke
# shellcheck source=tests/slurm/report_lib.sh
. "$(dirname "$0")/report_lib.sh"

[ "$(id -u)" -eq 0 ] || skip "not root (the Slurm daemons and munged need it)"
[ -x "$TRAIN" ] || skip "no trainer at $TRAIN"

WORK=$(mktemp -d /tmp/slurm_smoke.XXXXXX)
chmod 0711 "$WORK" # munged runs as user munge and keeps its files under $WORK/cluster
# Always stop the daemons, on any exit or interruption.
cleanup() {
  bash "$CLUSTER" stop "$WORK/cluster" >/dev/null 2>&1
  pkill -9 -f -- "$WORK/" 2>/dev/null  # a job script or rank the stopped daemons left behind
  rm -rf "$WORK"
}
trap cleanup EXIT
trap 'exit 1' INT TERM

# Debian's slurm-wlm and munge, if missing: no apt-get update unless the install needs it.
if ! command -v slurmctld >/dev/null || ! command -v munged >/dev/null; then
  command -v apt-get >/dev/null || skip "slurm-wlm/munge missing and no apt-get"
  t=$(now)
  export DEBIAN_FRONTEND=noninteractive
  apt_install() { timeout 300 apt-get install -y --no-install-recommends slurm-wlm munge; }
  if ! apt_install >"$WORK/apt.log" 2>&1; then
    if ! { timeout 300 apt-get update && apt_install; } >>"$WORK/apt.log" 2>&1; then
      tail -n 5 "$WORK/apt.log"
      skip "could not install slurm-wlm munge with apt-get"
    fi
  fi
  echo "installed slurm-wlm munge in $(since "$t")"
fi

t=$(now)
if ! bash "$CLUSTER" start "$WORK/cluster" >"$WORK/start.log" 2>&1; then
  cat "$WORK/start.log"
  skip "the Slurm daemons cannot run here: $(grep 'local_cluster:' "$WORK/start.log" | tail -n 1)"
fi
echo "cluster up in $(since "$t")"
export SLURM_CONF=$WORK/cluster/slurm.conf
# Shared memory only: no TCP, no network devices probed.
export UCX_TLS=self,sm UCX_NET_DEVICES=lo

# The job script's variables, as a site would set them; all of them, so nothing leaks in from the
# caller's environment.
STEPS=30
export MPIFORMER_TRAIN=$TRAIN TP=2 PP=2 DP=1 DATA=builtin:train VAL_DATA='' INIT_FROM='' \
  MODEL="--layers 2 --heads 2 --dim 64" STEPS BATCH=8 SEQ_LEN=32 EXTRA_ARGS="--val-every 0 --microbatches 2" \
  LAUNCHER=srun SRUN_MPI=pmi2 CPU_BIND=cores SITE_UCX_TLS='' SITE_UCX_NET_DEVICES='' \
  SAVE_DIR=$WORK/ckpt_ref SAVE_EVERY=0 KEEP_LAST=2

# submit: sbatch cpu.sbatch on 4 ranks in $WORK; prints the job id (empty if refused). The
# partition allows 30 min, the script asks for 1 h: ask for 10.
submit() {
  local id
  if ! id=$(timeout 30 sbatch --parsable --chdir="$WORK" --ntasks=4 --ntasks-per-node=4 --time=10 \
    "$SRC/ci/slurm/cpu.sbatch" 2>"$WORK/sbatch.err"); then
    cat "$WORK/sbatch.err" >&2
    bad "sbatch refused the job"
    return 1
  fi
  echo "$id"
}
# finish_job ID: waits until the job leaves the queue (a requeued job stays in it), then checks
# it COMPLETED with exit code 0.
finish_job() {
  local id=$1 deadline=$((SECONDS + JOB_TIMEOUT)) t
  t=$(now)
  # squeue lists the job until it has finished (then prints nothing).
  while [ -n "$(timeout 10 squeue -h -j "$id" 2>/dev/null)" ]; do
    if [ "$SECONDS" -ge "$deadline" ]; then
      bad "job $id still in the queue after $JOB_TIMEOUT s; cancelled"
      timeout 10 scancel "$id"
      break
    fi
    sleep 0.1
  done
  echo "job $id left the queue after $(since "$t")"
  info=$(timeout 10 scontrol -o show job "$id" 2>&1)
  local state code
  state=$(grep -o 'JobState=[A-Z_]*' <<<"$info")
  code=$(grep -o ' ExitCode=[0-9:]*' <<<"$info" | tr -d ' ')
  if [ "$state" = JobState=COMPLETED ] && [ "$code" = ExitCode=0:0 ]; then
    ok "job $id: $state $code"
  else
    bad "job $id: ${state:-no state} ${code:-no exit code} ($info)"
  fi
}
# wait_for_step LOG N: until the job's log shows step N (at most JOB_TIMEOUT s).
wait_for_step() {
  local deadline=$((SECONDS + JOB_TIMEOUT))
  until grep -qE "^step $2/$STEPS " "$1" 2>/dev/null || [ "$SECONDS" -ge "$deadline" ]; do
    sleep 0.05
  done
}
# The loss, lr and norm of each step line of a log (timings differ between runs).
numbers() { grep -E '^step [0-9]+/' "$1" 2>/dev/null | sed -E 's/ \| [0-9.]+ ms .*//'; }

# 1. The CPU job on 4 ranks, saving its checkpoint at the end: the uninterrupted run.
id=$(submit)
log=$WORK/mpiformer-$id.log
if [ -n "$id" ]; then
  finish_job "$id"
  if grep -q "^grid: world 4 = tp 2 x dp 1 x pp 2" "$log" 2>/dev/null &&
    [ "$(grep -cE '^ +[0-3] +[^ ]+ +[0-9]+/[0-9]+ +[01] +[01] +0 +[0-9]+$' "$log")" -eq 4 ]; then
    ok "grid: one 4-rank MPI world (PMI2) as tp 2 x pp 2, 4 rank rows"
  else
    bad "no 4-rank grid in the job log"
  fi
  losses=$(grep -E "^step [0-9]+/$STEPS \| loss " "$log" 2>/dev/null |
    sed -E 's/.*\| loss ([0-9.]+) .*/\1/')
  first=$(head -n 1 <<<"$losses")
  last=$(tail -n 1 <<<"$losses")
  if [ "$(wc -l <<<"$losses")" -eq "$STEPS" ] && [ -n "$first" ] &&
    awk -v a="$first" -v b="$last" 'BEGIN { exit !(b < a - 0.5) }'; then
    ok "$STEPS steps, loss $first -> $last"
  else
    bad "loss did not fall by 0.5 over $STEPS steps: '${first:-none}' -> '${last:-none}'"
  fi
  if grep -q "^summary | steps $STEPS | final loss" "$log" 2>/dev/null; then
    ok "summary line"
  else
    bad "no summary line"
  fi
fi
ref_log=$log

# 2. The same job, signalled mid-run as its time limit would be (USR1 to the batch script, as
#    --signal=B:USR1@300 does): the ranks save, the job requeues itself, resumes from the
#    checkpoint and completes with the uninterrupted run's loss curve.
export SAVE_DIR=$WORK/ckpt_sig
if id=$(submit); then
  log=$WORK/mpiformer-$id.log
  wait_for_step "$log" 5
  timeout 10 scancel --signal=USR1 --batch "$id"
  finish_job "$id"
  restarts=$(timeout 10 scontrol -o show job "$id" | grep -o 'Restarts=[0-9]*')
  stopped=$(sed -nE 's/^SIGUSR1 received: stopped after step ([0-9]+);.*/\1/p' "$log")
  if [ "$restarts" = Restarts=1 ] && [ -n "$stopped" ] &&
    grep -q "requeueing to continue" "$log" && grep -q "^resumed: .*step $stopped of $STEPS" "$log"; then
    ok "signalled job: stopped after step $stopped, saved, requeued ($restarts), resumed"
  else
    bad "signalled job: ${restarts:-no restarts}, stopped after '${stopped:-?}'"
    grep -E "job $id|SIGUSR1|resumed|error" "$log"
  fi
  if [ -n "$(numbers "$ref_log")" ] && [ "$(numbers "$log")" = "$(numbers "$ref_log")" ]; then
    ok "signalled job: its $STEPS steps across both parts equal the uninterrupted job's"
  else
    bad "signalled job: the loss curve differs from the uninterrupted job's"
    diff <(numbers "$ref_log") <(numbers "$log") | head
  fi
fi

# 3. TERM to the batch script (scancel, a preemption): the ranks save (the script passes USR1:
#    srun would kill them on TERM), and the job ends with status 3 without requeueing itself.
export SAVE_DIR=$WORK/ckpt_term STEPS=2000
if id=$(submit); then
  log=$WORK/mpiformer-$id.log
  wait_for_step "$log" 3
  timeout 10 scancel --signal=TERM --batch "$id"
  deadline=$((SECONDS + JOB_TIMEOUT))
  while [ -n "$(timeout 10 squeue -h -j "$id" 2>/dev/null)" ] && [ "$SECONDS" -lt "$deadline" ]; do
    sleep 0.1
  done
  info=$(timeout 10 scontrol -o show job "$id")
  saved=$(sed -nE 's/^SIGUSR1 received: stopped after step ([0-9]+); saved .*/\1/p' "$log")
  if [ -n "$saved" ] && [ "$(cat "$SAVE_DIR/latest" 2>/dev/null)" = "$(printf 'step_%08d' "$saved")" ] &&
    grep -q 'Restarts=0' <<<"$info" && grep -q 'ExitCode=3:0' <<<"$info" &&
    ! grep -q requeueing "$log" && [ "$(grep -c 'asking the ranks to save' "$log")" -eq 1 ]; then
    ok "TERM to the job script: the ranks saved step $saved, the job ended with status 3, not requeued"
  else
    bad "TERM to the job script: saved '${saved:-nothing}', $(grep -oE 'JobState=[A-Z]+|Restarts=[0-9]+|ExitCode=[0-9:]+' <<<"$info" | tr '\n' ' ')"
    grep -E "job $id|SIG|error|srun" "$log" | head
  fi
fi

# 4. A rank that dies ends the job at once (srun --kill-on-bad-exit=1), not at the time limit.
export SAVE_DIR=$WORK/ckpt_kill STEPS=2000
if id=$(submit); then
  log=$WORK/mpiformer-$id.log
  wait_for_step "$log" 3
  victim=
  for p in $(pgrep -f -- "--save $SAVE_DIR"); do
    tr '\0' '\n' <"/proc/$p/environ" 2>/dev/null | grep -qx SLURM_PROCID=2 && victim=$p
  done
  t=$(now)
  [ -n "$victim" ] && kill -9 "$victim"
  deadline=$((SECONDS + 60))
  while [ -n "$(timeout 10 squeue -h -j "$id" 2>/dev/null)" ] && [ "$SECONDS" -lt "$deadline" ]; do
    sleep 0.1
  done
  took=$(since "$t")
  state=$(timeout 10 scontrol -o show job "$id" | grep -o 'JobState=[A-Z_]*')
  if [ -n "$victim" ] && [ "$state" = JobState=FAILED ] && awk -v s="${took% s}" 'BEGIN { exit !(s < 30) }'; then
    ok "SIGKILL of rank 2 under srun: the job ended $took later, $state"
  else
    bad "SIGKILL of rank 2 (pid ${victim:-not found}) under srun: ${state:-?} after $took"
    timeout 10 scancel "$id"
  fi
fi

# 5. A job that can never fit (64 CPUs on an 8-CPU node) is refused at once (EnforcePartLimits=ALL)
#    instead of pending forever.
t=$(now)
if neg=$(timeout 30 sbatch --parsable --chdir="$WORK" --ntasks=64 --time=10 \
  "$SRC/ci/slurm/cpu.sbatch" 2>"$WORK/neg.err"); then
  bad "a 64-CPU job was accepted (job $neg) instead of refused"
  timeout 10 scancel "$neg"
elif grep -q 'More processors requested than permitted' "$WORK/neg.err"; then
  ok "a 64-CPU job is refused at submission ($(since "$t")): $(cat "$WORK/neg.err")"
else
  bad "the 64-CPU job failed for another reason: $(cat "$WORK/neg.err")"
fi

# 6. The daemons stop cleanly.
t=$(now)
bash "$CLUSTER" stop "$WORK/cluster" >/dev/null 2>&1
bash "$CLUSTER" status "$WORK/cluster" >"$WORK/status.txt" 2>&1
if grep -q 'running (PID' "$WORK/status.txt"; then
  bad "daemons still running after stop: $(cat "$WORK/status.txt")"
else
  ok "daemons stopped ($(since "$t"))"
fi

if [ "$failed" -gt 0 ]; then
  echo "--- job log ($log)"
  cat "$log" 2>/dev/null || echo "(none)"
  for f in slurmctld.log slurmd.log; do
    echo "--- $f (last 30 lines)"
    tail -n 30 "$WORK/cluster/$f" 2>/dev/null
  done
fi
echo "slurm_smoke: $passed passed, $failed failed"
[ "$failed" -eq 0 ]
