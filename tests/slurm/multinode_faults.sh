#!/usr/bin/env bash
# The whole job chain across nodes, with the shipped ci/slurm/cpu.sbatch unchanged: a 3-node
# Slurm on this machine (ci/slurm/multinode_cluster.sh) runs `sbatch -N 2 --ntasks-per-node 2` of
# a tiny model as TP 2 inside a node and PP 2 across (zb-h1), and interrupts it three ways:
#   1. the time limit's signal (USR1 to the batch script, as --signal=B:USR1@N sends it): the
#      script forwards one stop request, the ranks save and exit 3, the job requeues itself and
#      its next part resumes from the checkpoint;
#   2. a preemption-style `scancel JOBID` (TERM to the batch script and the ranks together): one
#      stop request, a checkpoint saved, the job cancelled; a resubmission resumes;
#   3. node loss: the second node of the job vanishes (its link cut, its slurmd and every process
#      in it SIGKILLed) mid-step. The time until the job has ended (Slurm declares the node DOWN,
#      the surviving ranks end within their stop grace) is printed and bounded; Slurm requeues the
#      job (--requeue) and it resumes on the nodes it gets, the spare among them, from the last
#      periodic checkpoint.
# Each chain's step lines (loss, lr, norm), every part's, equal those of one uninterrupted run of
# the same flags (under plain `mpiexec -n 4` on the host: slurm_multinode shows the layout gives
# the same numbers across nodes as on one). Exit 77 (ctest SKIP_RETURN_CODE) with the reason where
# namespaces or Slurm are unavailable; the cluster is always stopped.
set -uo pipefail
TEST=slurm_multinode_faults
# shellcheck source=tests/slurm/multinode_lib.sh
. "$(dirname "$0")/multinode_lib.sh"
# The node-loss bound: the cluster's SlurmdTimeout (10 s) and a ping cycle until the node is
# DOWN (~28 s), then the ranks' stop grace (at least 10 s). srun's output reaches the log late, so
# the node may vanish while the ranks save step 8, outside any step's grace: then Slurm's KillWait
# (30 s) ends them, ~60 s after the loss (seen once in CI at 60.2 s). With room for a loaded
# machine.
NODE_LOSS_BOUND=75

preflight
start_cluster 3

export TP=2 PP=2 DP=1 STEPS=12 EXTRA_ARGS="--val-every 0 --microbatches 4 --schedule zb-h1"
logs=()

# 1. The time limit's signal: USR1 to the batch script after step 4.
export SAVE_DIR=$WORK/ckpt_usr1
if id=$(submit); then
  log=$WORK/mpiformer-$id.log
  logs+=("$log")
  t=$(now)
  wait_for_step "$log" 4
  timeout 10 scancel --signal=USR1 --batch "$id"
  wait_gone "$id" 150
  completed "$id" "USR1"
  stopped=$(sed -nE 's/^SIGUSR1 received: stopped after step ([0-9]+); saved .*/\1/p' "$log")
  if [ "$(job_field "$id" Restarts)" = 1 ] && [ -n "$stopped" ] &&
    [ "$(grep -c 'SIGUSR1 received: asking the ranks' "$log")" -eq 1 ] &&
    grep -q "requeueing to continue" "$log" && grep -q "^resumed: .*step $stopped of $STEPS" "$log" &&
    ! grep -q 'exiting now' "$log"; then
    ok "USR1: one stop request, saved after step $stopped, requeued, resumed ($(since "$t"))"
  else
    bad "USR1: restarts $(job_field "$id" Restarts), stopped after '${stopped:-?}'"
    grep -E "job $id|SIG|stop signal|resumed|error" "$log"
  fi
  usr1_log=$log
else
  refused USR1
fi

# The uninterrupted run of the same flags, on one node.
ref=$WORK/uninterrupted.log
if [ -n "${usr1_log:-}" ] && one_node "$usr1_log" "$ref"; then
  ok "uninterrupted reference run: $(numbers "$ref" | tail -n 1)"
fi
if chain_equals "$ref" "${usr1_log:-/dev/null}"; then
  ok "USR1: the chain's $STEPS step lines equal the uninterrupted run's"
else
  bad "USR1: the chain's step lines differ from the uninterrupted run's"
  diff <(numbers "$ref") <(numbers "${usr1_log:-/dev/null}") | head
fi

# 2. A preemption-style cancel: plain scancel after step 4, then a resubmission.
export SAVE_DIR=$WORK/ckpt_cancel
if id=$(submit); then
  log=$WORK/mpiformer-$id.log
  logs+=("$log")
  t=$(now)
  wait_for_step "$log" 4
  timeout 10 scancel "$id"
  wait_gone "$id" 90
  saved=$(sed -nE 's/^SIG[A-Z0-9]+ received: stopped after step ([0-9]+); saved .*/\1/p' "$log")
  if [ "$(job_field "$id" JobState)" = CANCELLED ] && [ -n "$saved" ] &&
    [ "$(cat "$SAVE_DIR/latest" 2>/dev/null)" = "$(printf 'step_%08d' "$saved")" ] &&
    [ "$(grep -c 'SIGTERM received: asking the ranks' "$log")" -eq 1 ] &&
    [ "$(job_field "$id" Restarts)" = 0 ] && ! grep -q 'exiting now' "$log"; then
    ok "scancel: one stop request, saved after step $saved, cancelled, not requeued ($(since "$t"))"
  else
    bad "scancel: $(job_field "$id" JobState), saved '${saved:-nothing}'"
    grep -E "job $id|SIG|stop signal|error|srun" "$log" | head
  fi
  if id2=$(submit); then
    log2=$WORK/mpiformer-$id2.log
    logs+=("$log2")
    wait_gone "$id2" 120
    completed "$id2" "scancel, resubmitted"
    if grep -q "^resumed: .*step $saved of $STEPS" "$log2" && chain_equals "$ref" "$log" "$log2"; then
      ok "scancel: the resubmission resumed from step $saved; both parts' step lines equal the uninterrupted run's"
    else
      bad "scancel: the resubmission did not resume from step '${saved:-?}', or its step lines differ"
      diff <(numbers "$ref") <(numbers "$log" "$log2") | head
    fi
  else
    refused "scancel, resubmitted"
  fi
else
  refused scancel
fi

# 3. Node loss, with periodic saves (every 4 steps, in the background): the job's second node
#    vanishes once step 4's checkpoint is published (the trainer says "saved step 4" at the first
#    step boundary after its write ends, at the latest when step 8's save begins). The requeued
#    job loses at most the steps after the newest published checkpoint: it resumes from step 4,
#    or from 8 where that write also ended before the node went.
export SAVE_DIR=$WORK/ckpt_loss SAVE_EVERY=4
if id=$(submit); then
  log=$WORK/mpiformer-$id.log
  logs+=("$log")
  wait_for_step "$log" 6
  deadline=$((SECONDS + 60))
  until grep -q "^checkpoint: saved step 4 " "$log" 2>/dev/null || [ "$SECONDS" -ge "$deadline" ]; do
    sleep 0.05
  done
  nodes=$(job_field "$id" NodeList)       # node[1-2]: the batch script runs on the first
  victim=$(timeout 10 scontrol show hostnames "$nodes" | sed -n 2p)
  i=${victim#node}
  # What must end on the nodes that stay: srun and the ranks (the trainer's flags name SAVE_DIR).
  survivors=$(pgrep -f -- "--save $SAVE_DIR " | grep -vxF -f <(ip netns pids "mpf-node$i") | tr '\n' ' ')
  t=$(now)
  ip link set "mpfh$i" down              # its network goes silent, as a dead node's does
  # shellcheck disable=SC2046  # a list of PIDs
  kill -KILL $(ip netns pids "mpf-node$i") 2>/dev/null
  # Ended: the first part out of RUNNING (requeued, or completing) and its srun and ranks gone.
  # The way there, as Slurm saw it: the node not responding (*), DOWN; the job's state.
  deadline=$((SECONDS + 120)) seen='' timeline=''
  while [ "$SECONDS" -lt "$deadline" ]; do
    state="$victim $(timeout 5 sinfo -h -n "$victim" -o %T), job $(job_field "$id" JobState)"
    [ "$state" = "$seen" ] || timeline+="  $(since "$t"): $state"$'\n'
    seen=$state
    alive=0
    for p in $survivors; do kill -0 "$p" 2>/dev/null && alive=1; done
    if [ $alive -eq 0 ] && [ -n "$survivors" ]; then
      timeline+="  $(since "$t"): srun and the ranks on the other node gone"$'\n'
      survivors=''
    fi
    [ "$(job_field "$id" JobState)" = RUNNING ] && [ "$(job_field "$id" Restarts)" = 0 ] && alive=1
    [ $alive -eq 1 ] || break
    sleep 0.2
  done
  ended=$(since "$t")
  echo "node loss: $victim gone after step 4's checkpoint was published; the job had ended $ended later:"
  printf '%s' "$timeline"
  if awk -v s="${ended% s}" -v b="$NODE_LOSS_BOUND" 'BEGIN { exit !(s < b) }'; then
    ok "node loss: the job ended $ended after $victim vanished (bound $NODE_LOSS_BOUND s)"
  else
    bad "node loss: the job had not ended $ended after $victim vanished (bound $NODE_LOSS_BOUND s)"
  fi
  wait_gone "$id" 150
  completed "$id" "node loss"
  resumed=$(sed -nE "s/^resumed: .*, step ([0-9]+) of $STEPS.*/\1/p" "$log")
  after=$(job_field "$id" NodeList)
  if [ "$(job_field "$id" Restarts)" -ge 1 ] && { [ "$resumed" = 4 ] || [ "$resumed" = 8 ]; } &&
    ! timeout 10 scontrol show hostnames "$after" | grep -qx "$victim"; then
    ok "node loss: Slurm requeued the job; it resumed from step $resumed (published before the loss) on $after"
  else
    bad "node loss: restarts $(job_field "$id" Restarts), resumed from '${resumed:-?}' on $after"
    grep -E "job $id|SIG|stop signal|resumed|error|srun" "$log" | head -n 20
  fi
  if chain_equals "$ref" "$log"; then
    ok "node loss: every step line, before the loss and after the resume, equals the uninterrupted run's"
  else
    bad "node loss: step lines differ from the uninterrupted run's"
    diff <(numbers "$ref") <(numbers "$log") | head
  fi
else
  refused "node loss"
fi

stop_cluster
report "${logs[@]}"
