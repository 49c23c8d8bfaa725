#!/usr/bin/env bash
# The shipped ci/slurm/cpu.sbatch runs across nodes unchanged: a 2-node Slurm on this machine
# (ci/slurm/multinode_cluster.sh: each node a network namespace with its own hostname, address
# and slurmd) runs `sbatch -N 2 --ntasks-per-node 2 cpu.sbatch` with a tiny model as TP 2 inside
# a node and DP 2 across the nodes (MPICH over UCX: TCP between nodes, shared memory inside
# one). Its step lines (loss, lr, norm) must equal those of the same layout under plain
# `mpiexec -n 4` on one node: the same layout gives bit-identical losses. The job runs twice,
# launched by srun (PMI2) and by MPICH's mpiexec (LAUNCHER=mpiexec: hydra over srun), alike.
# Exit 77 (ctest SKIP_RETURN_CODE) with the reason where namespaces or Slurm are unavailable.
# The cluster is always stopped (namespaces, veths, bridge, daemons), whatever happens.
set -uo pipefail
SRC=${MPIFORMER_SOURCE_DIR:-$(cd "$(dirname "$0")/../.." && pwd)}
TRAIN=${MPIFORMER_TRAIN:?set MPIFORMER_TRAIN to the mpiformer-train binary}
CLUSTER=$SRC/ci/slurm/multinode_cluster.sh
JOB_TIMEOUT=90  # each of the two runs; with the cluster's bounded start/stop, well inside ctest's TIMEOUT

skip() {
  echo "slurm_multinode: SKIP: $*"
  exit 77
}
passed=0
failed=0
ok() { passed=$((passed + 1)); echo "ok   $1"; }
bad() { failed=$((failed + 1)); echo "FAIL $1"; }
now() { date +%s.%N; }
since() { awk -v a="$1" -v b="$(now)" 'BEGIN { printf "%.1f s", b - a }'; }

[ "$(id -u)" -eq 0 ] || skip "not root (namespaces, bridge and the Slurm daemons need it)"
[ -x "$TRAIN" ] || skip "no trainer at $TRAIN"
for c in slurmctld slurmd munged sbatch mpiexec; do
  command -v "$c" >/dev/null || skip "'$c' not found (slurm-wlm, munge, mpich)"
done

WORK=$(mktemp -d /tmp/slurm_multinode.XXXXXX)
chmod 0711 "$WORK" # munged runs as user munge and keeps its files under $WORK/cluster
# Always stop the cluster (it kills every process left in the nodes' namespaces), on any exit.
cleanup() {
  bash "$CLUSTER" stop "$WORK/cluster" >/dev/null 2>&1
  rm -rf "$WORK"
}
trap cleanup EXIT
trap 'exit 1' INT TERM

t=$(now)
bash "$CLUSTER" start "$WORK/cluster" 2 >"$WORK/start.log" 2>&1
rc=$?
if [ $rc -eq 77 ]; then
  skip "$(grep 'multinode_cluster:' "$WORK/start.log" | tail -n 1)"
elif [ $rc -ne 0 ]; then
  cat "$WORK/start.log"
  echo "slurm_multinode: FAIL: the cluster did not start"
  exit 1
fi
echo "cluster of 2 nodes up in $(since "$t")"
export SLURM_CONF=$WORK/cluster/slurm.conf

# The job script's variables, all of them (nothing leaks in from the caller). UCX_TLS is left
# unset so that the script picks it: the site's transports across nodes, TCP on the nodes' veth.
STEPS=12
unset UCX_TLS UCX_NET_DEVICES
export MPIFORMER_TRAIN=$TRAIN TP=2 PP=1 DP=2 DATA=builtin:train VAL_DATA='' INIT_FROM='' \
  MODEL="--layers 2 --heads 2 --dim 64" STEPS BATCH=8 SEQ_LEN=32 EXTRA_ARGS="--val-every 0" \
  LAUNCHER=srun SRUN_MPI=pmi2 CPU_BIND=cores SITE_UCX_TLS=self,sm,tcp SITE_UCX_NET_DEVICES=mpf0 \
  SAVE_DIR='' SAVE_EVERY=0 KEEP_LAST=2

# job LAUNCHER: cpu.sbatch across 2 nodes, 2 ranks each, started by LAUNCHER (srun, or MPICH's
# mpiexec, whose hydra starts its proxies through srun and connects to them by hostname); checks
# that it completed, its grid, where its ranks ran and UCX's transports. Sets `log`.
job() {
  export LAUNCHER=$1 SAVE_DIR=$WORK/ckpt_$1
  local t id info placement deadline
  t=$(now)
  log=
  if ! id=$(timeout 30 sbatch --parsable --chdir="$WORK" --nodes=2 --ntasks-per-node=2 --time=10 \
    "$SRC/ci/slurm/cpu.sbatch" 2>"$WORK/sbatch.err"); then
    cat "$WORK/sbatch.err"
    bad "sbatch refused the 2-node job ($1)"
    return 1
  fi
  log=$WORK/mpiformer-$id.log
  deadline=$((SECONDS + JOB_TIMEOUT))
  while [ -n "$(timeout 10 squeue -h -j "$id" 2>/dev/null)" ]; do
    if [ "$SECONDS" -ge "$deadline" ]; then
      bad "$1: job $id still in the queue after $JOB_TIMEOUT s; cancelled"
      timeout 10 scancel "$id"
      break
    fi
    sleep 0.2
  done
  info=$(timeout 10 scontrol -o show job "$id" 2>&1)
  if grep -q 'JobState=COMPLETED' <<<"$info" && grep -q ' ExitCode=0:0' <<<"$info"; then
    ok "$1: 2-node job $id completed in $(since "$t") ($(grep -o ' NodeList=[^ ]*' <<<"$info" | tr -d ' '))"
  else
    bad "$1: 2-node job $id: $(grep -oE 'JobState=[A-Z_]+|ExitCode=[0-9:]+' <<<"$info" | tr '\n' ' ')"
  fi
  if grep -q "^grid: world 4 = tp 2 x dp 2 x pp 1" "$log" 2>/dev/null; then
    ok "$1: grid: one 4-rank MPI world across the nodes as tp 2 x dp 2"
  else
    bad "$1: no 4-rank tp 2 x dp 2 grid in the job log"
  fi
  # Where each rank ran, as the ranks themselves saw it (the placement table's rows: rank, host,
  # local rank/ranks on the node, tp, pp, dp, threads): block placement keeps each TP pair inside
  # a node, the DP pairs span the nodes.
  placement=$(grep -E '^ +[0-3] +[^ ]+ +[0-9]+/[0-9]+ +[0-9]+ +[0-9]+ +[0-9]+ +[0-9]+$' "$log" \
    2>/dev/null | awk '{ print $1 "@" $2 }' | sort | tr '\n' ' ')
  if [ "$placement" = "0@node1 1@node1 2@node2 3@node2 " ]; then
    ok "$1: placement: TP pairs inside a node (ranks 0,1 on node1; 2,3 on node2)"
  else
    bad "$1: placement: '$placement'"
  fi
  # The ranks talked over the nodes' veths (TCP) and shared memory, with no complaint from UCX
  # (a device it cannot see is a warning, then a fallback).
  if grep -q "UCX_TLS=self,sm,tcp" "$log" && ! grep -q "UCX  WARN" "$log"; then
    ok "$1: UCX: self,sm,tcp on mpf0, no warnings"
  else
    bad "$1: UCX: $(grep -m 3 -E 'UCX_TLS=|UCX  WARN' "$log")"
  fi
}

# 1. The job under srun (PMI2), then under MPICH's mpiexec.
job mpiexec
mpiexec_log=$log
job srun

# 2. The same layout under plain mpiexec on one node (the host), with the flags the job used:
#    the job log's "+ srun ... TRAINER ARGS" line, its checkpoint directory swapped for another.
launch_line=$(grep -m 1 "^+ srun .* $TRAIN " "$log" 2>/dev/null)
if [ -z "$launch_line" ]; then
  bad "no launch line in the job log"
else
  read -ra args <<<"${launch_line#* "$TRAIN" }"
  for i in "${!args[@]}"; do
    [ "${args[$i]}" != "$SAVE_DIR" ] || args[i]=$WORK/ckpt_one
  done
  t=$(now)
  (
    cd "$WORK" || exit 1
    export OMP_NUM_THREADS=1 OPENBLAS_NUM_THREADS=1 OMP_PROC_BIND=false UCX_TLS=self,sm
    unset SLURM_CONF
    timeout "$JOB_TIMEOUT" mpiexec -n 4 "$TRAIN" "${args[@]}"
  ) >"$WORK/one_node.log" 2>&1
  rc=$?
  if [ $rc -eq 0 ]; then
    ok "mpiexec -n 4 on one node finished in $(since "$t")"
  else
    bad "mpiexec -n 4 on one node: exit $rc"
    tail -n 20 "$WORK/one_node.log"
  fi
fi

# 3. Same losses, step by step (the timings differ, the numbers must not).
numbers() { grep -E '^step [0-9]+/' "$1" 2>/dev/null | sed -E 's/ \| [0-9.]+ ms .*//'; }
n=$(numbers "$log" | wc -l)
if [ "$n" -eq "$STEPS" ] && [ "$(numbers "$log")" = "$(numbers "$WORK/one_node.log")" ]; then
  ok "$STEPS step lines across 2 nodes (srun) equal those on one node: $(numbers "$log" | tail -n 1)"
else
  bad "the step lines across 2 nodes (srun) differ from one node's ($n of $STEPS steps in the job log)"
  diff <(numbers "$log") <(numbers "$WORK/one_node.log") | head
fi
if [ -n "$(numbers "$log")" ] && [ "$(numbers "$mpiexec_log")" = "$(numbers "$log")" ]; then
  ok "the 2-node job under mpiexec has the same $STEPS step lines"
else
  bad "the 2-node job under mpiexec has other step lines than under srun"
  diff <(numbers "$log") <(numbers "$mpiexec_log") | head
fi

# 4. stop leaves nothing behind: no namespaces, no bridge.
t=$(now)
bash "$CLUSTER" stop "$WORK/cluster" >/dev/null 2>&1
left=$( (ip netns list | grep -E '^mpf-node'; ip -o link show mpfbr0) 2>/dev/null)
if [ -z "$left" ]; then
  ok "cluster stopped, namespaces and bridge removed ($(since "$t"))"
else
  bad "left behind after stop: $left"
fi

if [ "$failed" -gt 0 ]; then
  for f in "$WORK"/mpiformer-*.log; do
    echo "--- job log ($f)"
    cat "$f" 2>/dev/null || echo "(none)"
  done
  for f in slurmctld.log slurmd-node1.log slurmd-node2.log; do
    echo "--- $f (last 20 lines)"
    tail -n 20 "$WORK/cluster/$f" 2>/dev/null
  done
fi
echo "slurm_multinode: $passed passed, $failed failed"
[ "$failed" -eq 0 ]
