#!/usr/bin/env bash
# The shipped ci/slurm/cpu.sbatch runs across nodes unchanged: a 2-node Slurm on this machine
# (ci/slurm/multinode_cluster.sh: each node a network namespace with its own hostname, address
# and slurmd) runs `sbatch -N 2 --ntasks-per-node 2 cpu.sbatch` with a tiny model in two layouts,
# TP 2 inside a node in both:
#   - DP 2 across the nodes, launched by srun (PMI2) and by MPICH's mpiexec (LAUNCHER=mpiexec:
#     hydra over srun), alike;
#   - PP 2 across the nodes with the zero-bubble schedule zb-h1 (4 microbatches).
# MPICH talks UCX: TCP between nodes (the bytes are counted on node2's link), shared memory
# inside one. Each layout's step lines (loss, lr, norm) must equal those of the same layout under
# plain `mpiexec -n 4` on one node: the same layout gives bit-identical losses. The faults
# (signals, cancel, node loss) are multinode_faults.sh's. Exit 77 (ctest SKIP_RETURN_CODE) with the reason where namespaces or
# Slurm are unavailable. The cluster is always stopped (namespaces, veths, bridge, daemons).
set -uo pipefail
TEST=slurm_multinode
# shellcheck source=tests/slurm/multinode_lib.sh
. "$(dirname "$0")/multinode_lib.sh"
JOB_TIMEOUT=90 # each job; with the cluster's bounded start/stop, well inside ctest's TIMEOUT

preflight
start_cluster 2
logs=()

# job NAME GRID: cpu.sbatch across 2 nodes, 2 ranks each, with the variables exported now; checks
# that it completed, its grid, where its ranks ran and UCX's transports. Sets `log`.
job() {
  local t id where crossed
  export SAVE_DIR=$WORK/ckpt_$1
  t=$(now)
  log=
  crossed=$(link_bytes)
  id=$(submit) || { refused "$1"; return 1; }
  log=$WORK/mpiformer-$id.log
  logs+=("$log")
  wait_gone "$id" "$JOB_TIMEOUT"
  completed "$id" "$1 ($(since "$t"))"
  crossed=$(($(link_bytes) - crossed))
  if grep -q "^grid: world 4 = $2" "$log" 2>/dev/null; then
    ok "$1: grid: one 4-rank MPI world across the nodes as $2"
  else
    bad "$1: no 4-rank $2 grid in the job log"
  fi
  # Where each rank ran, as the ranks themselves saw it: block placement keeps each TP pair inside
  # a node; the DP pairs, or the pipeline's stages, span the nodes.
  where=$(placement "$log")
  if [ "$where" = "0@node1 1@node1 2@node2 3@node2 " ]; then
    ok "$1: placement: TP pairs inside a node (ranks 0,1 on node1; 2,3 on node2)"
  else
    bad "$1: placement: '$where'"
  fi
  # The ranks talked over the nodes' veths (TCP) and shared memory, with no complaint from UCX
  # (a device it cannot see is a warning, then a fallback), and their messages crossed the
  # network: the gradients' or the activations' bytes, well over 1 MB in both directions
  # together; Slurm's own traffic is a few kB.
  if grep -q "UCX_TLS=self,sm,tcp" "$log" && ! grep -q "UCX  WARN" "$log"; then
    ok "$1: UCX: self,sm,tcp on mpf0, no warnings"
  else
    bad "$1: UCX: $(grep -m 3 -E 'UCX_TLS=|UCX  WARN' "$log")"
  fi
  if [ "$crossed" -gt 1000000 ]; then
    ok "$1: $((crossed / 1000)) kB crossed node2's link"
  else
    bad "$1: only $crossed bytes crossed node2's link: the ranks did not talk over the network"
  fi
}

# The bytes node2's link has carried, both ways (its host end's counters).
link_bytes() {
  echo $(($(cat /sys/class/net/mpfh2/statistics/rx_bytes) + $(cat /sys/class/net/mpfh2/statistics/tx_bytes)))
}

# same_as_one_node NAME LOG: LOG's step lines equal those of its flags under mpiexec -n 4 on the host.
same_as_one_node() {
  local t one=$WORK/one_node_$1.log
  t=$(now)
  one_node "$2" "$one" || return
  if [ "$(numbers "$2" | wc -l)" -eq "$STEPS" ] && [ "$(numbers "$2")" = "$(numbers "$one")" ]; then
    ok "$1: $STEPS step lines across 2 nodes equal mpiexec -n 4 on one node's ($(since "$t")): $(numbers "$2" | tail -n 1)"
  else
    bad "$1: the step lines across 2 nodes differ from one node's ($(numbers "$2" | wc -l) of $STEPS steps in the job log)"
    diff <(numbers "$2") <(numbers "$one") | head
  fi
}

# 1. TP 2 inside, DP 2 across: under MPICH's mpiexec, then under srun (PMI2).
export TP=2 PP=1 DP=2 EXTRA_ARGS="--val-every 0"
export LAUNCHER=mpiexec
job dp_mpiexec "tp 2 x dp 2 x pp 1"
mpiexec_log=$log
export LAUNCHER=srun
job dp_srun "tp 2 x dp 2 x pp 1"
dp_log=$log
same_as_one_node dp "$dp_log"
if [ -n "$(numbers "$dp_log")" ] && [ "$(numbers "$mpiexec_log")" = "$(numbers "$dp_log")" ]; then
  ok "dp: the 2-node job under mpiexec has the same $STEPS step lines as under srun"
else
  bad "dp: the 2-node job under mpiexec has other step lines than under srun"
  diff <(numbers "$dp_log") <(numbers "$mpiexec_log") | head
fi

# 2. TP 2 inside, PP 2 across with zb-h1: stage 0 on node1, stage 1 on node2.
export TP=2 PP=2 DP=1 EXTRA_ARGS="--val-every 0 --microbatches 4 --schedule zb-h1"
job pp_zb-h1 "tp 2 x dp 1 x pp 2"
same_as_one_node pp_zb-h1 "$log"

# 3. stop leaves nothing behind: no namespaces, no bridge.
stop_cluster
report "${logs[@]}"
