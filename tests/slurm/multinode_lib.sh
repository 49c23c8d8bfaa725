# shellcheck shell=bash
# What the multi-node Slurm tests share (multinode.sh, multinode_faults.sh); sourced, not run.
# The sourcing script sets TEST (its name in messages) first, then calls preflight and
# start_cluster. Every job runs the shipped ci/slurm/cpu.sbatch unchanged, 2 nodes x 2 ranks.
SRC=${MPIFORMER_SOURCE_DIR:-$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)}
TRAIN=${MPIFORMER_TRAIN:?set MPIFORMER_TRAIN to the mpiformer-train binary}
CLUSTER=$SRC/ci/slurm/multinode_cluster.sh

# shellcheck source=tests/slurm/report_lib.sh
. "$(dirname "${BASH_SOURCE[0]}")/report_lib.sh"

preflight() {
  [ "$(id -u)" -eq 0 ] || skip "not root (namespaces, bridge and the Slurm daemons need it)"
  [ -x "$TRAIN" ] || skip "no trainer at $TRAIN"
  local c
  for c in slurmctld slurmd munged sbatch mpiexec; do
    command -v "$c" >/dev/null || skip "'$c' not found (slurm-wlm, munge, mpich)"
  done
  WORK=$(mktemp -d "/tmp/$TEST.XXXXXX")
  chmod 0711 "$WORK" # munged runs as user munge and keeps its files under $WORK/cluster
  # Always stop the cluster (it kills every process left in the nodes' namespaces), on any exit.
  trap 'bash "$CLUSTER" stop "$WORK/cluster" >/dev/null 2>&1; rm -rf "$WORK"' EXIT
  trap 'exit 1' INT TERM
}

# start_cluster NODES: the cluster up, SLURM_CONF set; skips (77) where it cannot be made.
start_cluster() {
  local t rc
  t=$(now)
  bash "$CLUSTER" start "$WORK/cluster" "$1" >"$WORK/start.log" 2>&1
  rc=$?
  if [ $rc -eq 77 ]; then
    skip "$(grep 'multinode_cluster:' "$WORK/start.log" | tail -n 1)"
  elif [ $rc -ne 0 ]; then
    cat "$WORK/start.log"
    echo "$TEST: FAIL: the cluster did not start"
    exit 1
  fi
  echo "cluster of $1 nodes up in $(since "$t")"
  export SLURM_CONF=$WORK/cluster/slurm.conf
}

# stop_cluster: stops it and checks that nothing is left: no namespaces, no bridge.
stop_cluster() {
  local t left
  t=$(now)
  bash "$CLUSTER" stop "$WORK/cluster" >/dev/null 2>&1
  left=$( (ip netns list | grep -E '^mpf-node'; ip -o link show mpfbr0) 2>/dev/null)
  if [ -z "$left" ]; then
    ok "cluster stopped, namespaces and bridge removed ($(since "$t"))"
  else
    bad "left behind after stop: $left"
  fi
}

# The job script's variables, all of them (nothing leaks in from the caller); a scenario
# overrides some. UCX_TLS is left unset so that the script picks the site's transports across
# nodes: TCP on the nodes' veth, shared memory inside a node.
unset UCX_TLS UCX_NET_DEVICES
export MPIFORMER_TRAIN=$TRAIN TP=2 PP=1 DP='' DATA=builtin:train VAL_DATA='' INIT_FROM='' \
  MODEL="--layers 2 --heads 2 --dim 64" STEPS=12 BATCH=8 SEQ_LEN=32 EXTRA_ARGS="--val-every 0" \
  LAUNCHER=srun SRUN_MPI=pmi2 CPU_BIND=cores SITE_UCX_TLS=self,sm,tcp SITE_UCX_NET_DEVICES=mpf0 \
  SAVE_DIR='' SAVE_EVERY=0 KEEP_LAST=2

# submit: sbatch cpu.sbatch on 2 nodes x 2 ranks in $WORK, with the variables exported now;
# prints the job id. If sbatch refuses, returns 1 and leaves its message in $WORK/sbatch.err
# (a subshell runs this: the caller counts the failure, with `refused`).
submit() {
  timeout 30 sbatch --parsable --chdir="$WORK" --nodes=2 --ntasks-per-node=2 --time=10 \
    "$SRC/ci/slurm/cpu.sbatch" 2>"$WORK/sbatch.err"
}
refused() { bad "$1: sbatch refused the 2-node job: $(cat "$WORK/sbatch.err")"; }

# job_field ID KEY: KEY's value in `scontrol show job ID` (JobState, ExitCode, Restarts, NodeList).
job_field() {
  timeout 10 scontrol -o show job "$1" 2>/dev/null | grep -oE "(^| )$2=[^ ]*" | head -n 1 |
    sed -E "s/^ ?$2=//"
}

# wait_gone ID SECONDS: until the job has left the queue (a requeued job stays in it); cancels
# it when it takes longer. Fails then.
wait_gone() {
  local deadline=$((SECONDS + $2))
  while [ -n "$(timeout 10 squeue -h -j "$1" 2>/dev/null)" ]; do
    if [ "$SECONDS" -ge "$deadline" ]; then
      bad "job $1 still in the queue after $2 s; cancelled"
      timeout 10 scancel "$1"
      return 1
    fi
    sleep 0.2
  done
}

# completed ID WHAT: checks that the job ended COMPLETED with exit code 0.
completed() {
  local state code
  state=$(job_field "$1" JobState) code=$(job_field "$1" ExitCode)
  if [ "$state" = COMPLETED ] && [ "$code" = 0:0 ]; then
    ok "$2: job $1 completed on $(job_field "$1" NodeList) (restarts: $(job_field "$1" Restarts))"
  else
    bad "$2: job $1: ${state:-no state}, exit code ${code:-?}"
  fi
}

# wait_for_step LOG N [SECONDS]: until the log shows step N (default: at most 120 s).
wait_for_step() {
  local deadline=$((SECONDS + ${3:-120}))
  until grep -qE "^step $2/" "$1" 2>/dev/null; do
    [ "$SECONDS" -lt "$deadline" ] || return 1
    sleep 0.05
  done
}

# The loss, lr and norm of each step line of the logs (timings differ between runs).
numbers() { cat "$@" 2>/dev/null | grep -E '^step [0-9]+/' | sed -E 's/ \| [0-9.]+ ms .*//'; }

# placement LOG: "rank@host" of every rank, sorted, as the ranks themselves saw it; from the
# start-up lines "  rank R: ... @ HOST" or the placement table's rows "  R  HOST  ...".
placement() {
  sed -nE 's/^ +rank ([0-9]+): .* @ ([^ ]+)$/\1@\2/p; s/^ +([0-9]+) +(node[0-9]+) .*/\1@\2/p' \
    "$1" 2>/dev/null | sort -u | tr '\n' ' '
}

# one_node LOG OUT: the flags of LOG's launch line ("+ srun ... TRAINER ARGS") under plain
# `mpiexec -n 4` on the host, with its checkpoint directory swapped for a fresh one; output in OUT.
one_node() {
  local line args i rc
  line=$(grep -m 1 "^+ srun .* $TRAIN " "$1" 2>/dev/null)
  if [ -z "$line" ]; then
    bad "no launch line in $1"
    return 1
  fi
  read -ra args <<<"${line#* "$TRAIN" }"
  for i in "${!args[@]}"; do
    case ${args[$i]} in "$WORK"/ckpt_*) args[i]=$WORK/ckpt_one_$(basename "$2") ;; esac
  done
  (
    cd "$WORK" || exit 1
    export OMP_NUM_THREADS=1 OPENBLAS_NUM_THREADS=1 OMP_PROC_BIND=false UCX_TLS=self,sm
    unset SLURM_CONF
    timeout 120 mpiexec -n 4 "$TRAIN" "${args[@]}"
  ) >"$2" 2>&1
  rc=$?
  [ $rc -eq 0 ] || { bad "mpiexec -n 4 on one node: exit $rc"; tail -n 20 "$2"; return 1; }
}

# chain_equals REF LOG...: every step line of the logs (a chain's parts; steps a part redid after
# a resume appear twice) equals REF's line of that step, and together they have all of REF's steps.
chain_equals() {
  local ref=$1
  shift
  [ -n "$(numbers "$ref")" ] && [ -z "$(numbers "$@" | sort -u | comm -23 - <(numbers "$ref" | sort))" ] &&
    [ "$(numbers "$@" | sort -u | wc -l)" -eq "$(numbers "$ref" | wc -l)" ]
}

# report LOG...: on failure, the logs and the daemons' last lines; then the tally and status.
report() {
  local f
  if [ "$failed" -gt 0 ]; then
    for f in "$@"; do
      echo "--- job log ($f)"
      cat "$f" 2>/dev/null || echo "(none)"
    done
    for f in "$WORK"/cluster/slurmctld.log "$WORK"/cluster/slurmd-node*.log; do
      echo "--- $f (last 20 lines)"
      tail -n 20 "$f" 2>/dev/null
    done
  fi
  echo "$TEST: $passed passed, $failed failed"
  [ "$failed" -eq 0 ]
}
