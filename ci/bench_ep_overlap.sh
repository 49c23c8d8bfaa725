#!/usr/bin/env bash
# Expert parallelism's all-to-alls, blocking (--moe-a2a-chunks 1) against overlapped with the
# experts' products (--moe-a2a-chunks CHUNKS): how long a step waits in them (the `mpi all-to-all
# (experts)` line of --profile: posting, waiting and testing the exchanges of the rows and their
# counts, over the profiled last step) and the step time, EP 2 of a Mixtral-shaped model (C 768,
# 8 experts of F 1024, top 2, GQA with 4 kv heads), one rank x one thread per node, on one node
# (shared memory) and across two Slurm nodes of this machine (ci/slurm/multinode_cluster.sh:
# network namespaces on a bridge) whose links `tbf` shapes to RATE. Each pair runs alternately
# REPEAT times, so both meet the same machine; a ratio per pair.
#   bash ci/bench_ep_overlap.sh [BUILD_DIR]     (as root for the two-node rows)
# L (default 4 blocks), BATCH (4), SEQ (128), STEPS (3), CHUNKS (4), RATE (1gbit), REPEAT (2).
# A benchmark, not a test: the two-node rows are skipped with one line where they cannot run
# (not root, no tbf, no namespaces or Slurm, another cluster up); exits 1 only when a run fails.
set -u

root=$(cd "$(dirname "$0")/.." && pwd)
build=$(cd "${1:-$root/build}" 2>/dev/null && pwd) ||
  { echo "bench_ep_overlap: no build directory ${1:-$root/build}"; exit 1; }
train="$build/mpiformer-train"
[ -x "$train" ] || { echo "bench_ep_overlap: $train not found; build first (make build)"; exit 1; }
L=${L:-4} BATCH=${BATCH:-4} SEQ=${SEQ:-128} STEPS=${STEPS:-3} CHUNKS=${CHUNKS:-4}
RATE=${RATE:-1gbit} REPEAT=${REPEAT:-2}
work=$(mktemp -d "${TMPDIR:-/tmp}/mpf-bench-a2a.XXXXXX")
chmod 0711 "$work" # munged runs as user munge and keeps its files under the cluster's directory
cluster="$root/ci/slurm/multinode_cluster.sh"
up=0
trap '[ $up = 0 ] || bash "$cluster" stop "$work/cluster" >/dev/null 2>&1; rm -rf "$work"' EXIT
die() { echo "bench_ep_overlap: $1"; [ $# -lt 2 ] || tail -n 20 "$2" | sed 's/^/    /'; exit 1; }

model=(--layers "$L" --dim 768 --heads 12 --vocab 50257 --max-seq-len 1024 --seq-len "$SEQ"
  --batch "$BATCH" --steps "$STEPS" --val-every 0 --threads 1 --peak-gflops 1 --arch mixtral
  --kv-heads 4 --ffn-dim 1024 --experts 8 --experts-per-token 2 --rope-theta 500000 --ep 2
  --profile)
export OMP_NUM_THREADS=1 OPENBLAS_NUM_THREADS=1 OMP_PROC_BIND=false

one_node() { # one_node LOG ARGS...: mpiexec -n 2 on the host, shared memory
  local log=$1
  shift
  UCX_TLS=self,sm UCX_NET_DEVICES=lo timeout 900 mpiexec -n 2 "$train" "$@" >"$log" 2>&1 ||
    die "one-node run failed: $*" "$log"
}
across() { # across LOG ARGS...: one rank on each node, through Slurm (srun, PMI2), TCP on the veths
  local log=$1 id
  shift
  id=$(UCX_TLS=self,sm,tcp UCX_NET_DEVICES=mpf0 sbatch --parsable --chdir="$work" -N 2 \
    --ntasks-per-node=1 --time=15 --output="$log" \
    --wrap="srun --mpi=pmi2 --ntasks=2 $train $*") || die "sbatch refused the 2-node run"
  while [ -n "$(timeout 10 squeue -h -j "$id" 2>/dev/null)" ]; do sleep 0.5; done
  timeout 10 scontrol -o show job "$id" | grep -q 'JobState=COMPLETED' ||
    die "2-node run failed: $*" "$log"
}
# row WHERE LOG: the step time (the summary's, steps 2..) and the all-to-alls' ms and share.
row() {
  local step a2a
  step=$(sed -nE 's/^summary \|.* ([0-9.]+) ms\/step.*/\1/p' "$2" | head -n 1)
  a2a=$(sed -nE 's/^  mpi all-to-all \(experts\) +[0-9.]+ +([0-9.]+) +([0-9.]+)%.*/\1 \2/p' "$2")
  [ -n "$step" ] && [ -n "$a2a" ] || die "no step time or all-to-all line in $2" "$2"
  echo "$1 $step $a2a"
}
pairs() { # pairs WHERE RUNNER: REPEAT x (blocking, overlapped), each printed as it ends
  local i c
  for ((i = 1; i <= REPEAT; i++)); do
    for c in 1 "$CHUNKS"; do
      "$2" "$work/$1_${c}_$i.log" "${model[@]}" --moe-a2a-chunks "$c"
      echo "$(row "$1 chunks=$c" "$work/$1_${c}_$i.log") $(cut -d' ' -f1 /proc/loadavg)"
    done
  done
}

echo "CPU: $(lscpu | sed -nE 's/^Model name: *//p' | head -n 1), $(getconf _NPROCESSORS_ONLN) cores"
echo "EP 2, L$L C768 8 experts F1024 top-2, batch $BATCH x $SEQ, 1 rank x 1 thread each, the last of $STEPS steps profiled"
echo "where chunks ms/step a2a_ms a2a_share load"
pairs one_node one_node

skip() { echo "bench_ep_overlap: two nodes skipped: $*"; exit 0; }
[ "$(id -u)" -eq 0 ] || skip "needs root (namespaces, tc, the Slurm daemons)"
for c in tc sbatch; do command -v "$c" >/dev/null || skip "'$c' not found"; done
up=1
bash "$cluster" start "$work/cluster" 2 >"$work/start.log" 2>&1 ||
  { up=0; skip "no 2-node cluster here: $(grep 'multinode_cluster:' "$work/start.log" | tail -n 1)"; }
export SLURM_CONF=$work/cluster/slurm.conf
gbit=${RATE%gbit}
burst=$((gbit * 125000 > 65536 ? gbit * 125000 : 65536)) # a millisecond at the rate, >= 64 KB
for i in 1 2; do
  nsenter --net="/run/netns/mpf-node$i" tc qdisc replace dev mpf0 root tbf rate "$RATE" \
    burst "$burst" latency 50ms || skip "the tbf qdisc is not available"
done
pairs "tbf_$RATE" across
