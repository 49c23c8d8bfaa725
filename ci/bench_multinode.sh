#!/usr/bin/env bash
# Across a network: DP 2 and PP 2 step times of a GPT-2 124M-shaped model (12 layers, C=768,
# 12 heads, vocab 50257), and EP 2 of a mixture of experts of that size, with one rank per node,
# one thread, on two Slurm nodes of this machine (ci/slurm/multinode_cluster.sh: network
# namespaces on a bridge), their links shaped by `tbf` to 10 and 1 Gbit/s, against the same
# layouts on one node (shared memory) and against a prediction from the link's latency (a
# ping-pong) and bandwidth (the tbf rate, or one TCP stream's rate over the link where that is
# lower: the CPU, not the shaping, limits it then):
#   DP: the one-node step without its gradient all-reduce, plus the gradients' bytes over the link
#       (2 ranks: reduce-scatter and all-gather send one gradient's worth each way);
#   EP: the one-node step without its gradient all-reduce, plus the non-expert gradients' bytes
#       and the all-to-alls' rows over the link;
#   PP: the one-node step without its tied-embedding sum, plus that sum's bytes over the link,
#       plus what the pipeline simulator (mpiformer-schedule, fed the one-node run's per-stage
#       F/B/W) adds to the schedule when each message costs latency + activation bytes / bandwidth.
# The kernel here has no netem, so the link gets no added latency: the veth's own is used, half
# the round trip of 1-byte TCP messages between the nodes. `tcp` is one TCP stream's rate over the
# shaped link, to tell a link the CPU cannot fill from the shaping (both measured with python);
# `sum` is the rate the measured step implies for the bulk sum: what MPI made of the link.
#   bash ci/bench_multinode.sh [BUILD_DIR]     (make bench; as root)
# BATCH (default 2), SEQ (64), STEPS (4: steps 2..4 timed), RATES (default "10gbit 1gbit"). Each
# layout runs on one node right before it runs across, so that both meet the same machine.
# A benchmark, not a test: it prints one SKIP line and exits 0 where it cannot run (not root, no
# tbf, no namespaces or Slurm, another cluster up); exits 1 only when a run fails.
set -u

root=$(cd "$(dirname "$0")/.." && pwd)
build=$(cd "${1:-$root/build}" 2>/dev/null && pwd) ||
  { echo "bench_multinode: no build directory ${1:-$root/build}"; exit 1; }
train="$build/mpiformer-train"
sched="$build/mpiformer-schedule"
for exe in "$train" "$sched"; do
  [ -x "$exe" ] || { echo "bench_multinode: $exe not found; build first (make build)"; exit 1; }
done
skip() { echo "bench_multinode: SKIP: $*"; exit 0; }
[ "$(id -u)" -eq 0 ] || skip "needs root (namespaces, tc, the Slurm daemons)"
for c in tc python3 sbatch mpiexec; do
  command -v "$c" >/dev/null || skip "'$c' not found"
done

BATCH=${BATCH:-2} SEQ=${SEQ:-64} STEPS=${STEPS:-4}
L=12 C=768 H=12 V=50257
work=$(mktemp -d "${TMPDIR:-/tmp}/mpf-bench-mn.XXXXXX")
chmod 0711 "$work" # munged runs as user munge and keeps its files under the cluster's directory
cluster="$root/ci/slurm/multinode_cluster.sh"
trap 'bash "$cluster" stop "$work/cluster" >/dev/null 2>&1; rm -rf "$work"' EXIT
if ! bash "$cluster" start "$work/cluster" 2 >"$work/start.log" 2>&1; then
  skip "no 2-node cluster here: $(grep 'multinode_cluster:' "$work/start.log" | tail -n 1)"
fi
export SLURM_CONF=$work/cluster/slurm.conf
in_node() { local i=$1; shift; nsenter --net="/run/netns/mpf-node$i" "$@"; }
tc_node() { in_node "$1" tc qdisc "$2" dev mpf0 root "${@:3}"; }
tc_node 1 replace tbf rate 1gbit burst 128kb latency 50ms 2>/dev/null ||
  skip "the tbf qdisc is not available (CONFIG_NET_SCH_TBF)"
tc_node 1 del 2>/dev/null

die() { echo "bench_multinode: $1"; [ $# -lt 2 ] || tail -n 20 "$2" | sed 's/^/    /'; exit 1; }
num='([0-9]+(\.[0-9]+)?)'
# field FILE REGEX: the first number captured by REGEX (a sed -E group) in FILE
field() { sed -nE "s#.*$2.*#\1#p" "$1" | head -n 1; }

model=(--layers "$L" --dim "$C" --heads "$H" --vocab "$V" --max-seq-len 1024 --seq-len "$SEQ"
       --batch "$BATCH" --steps "$STEPS" --val-every 0 --threads 1 --peak-gflops 1)
export OMP_NUM_THREADS=1 OPENBLAS_NUM_THREADS=1 OMP_PROC_BIND=false

# one_node NAME ARGS...: mpiexec -n 2 on the host, shared memory.
one_node() {
  local log=$work/$1.log
  shift
  UCX_TLS=self,sm UCX_NET_DEVICES=lo timeout 600 mpiexec -n 2 "$train" "$@" >"$log" 2>&1 ||
    die "one-node run failed: $*" "$log"
}
# across NAME ARGS...: one rank on each node, through Slurm (srun, PMI2), TCP on the veths.
across() {
  local log=$work/$1.log id
  shift
  id=$(UCX_TLS=self,sm,tcp UCX_NET_DEVICES=mpf0 sbatch --parsable --chdir="$work" -N 2 \
    --ntasks-per-node=1 --time=10 --output="$log" \
    --wrap="srun --mpi=pmi2 --ntasks=2 $train $*") || die "sbatch refused the 2-node run"
  while [ -n "$(timeout 10 squeue -h -j "$id" 2>/dev/null)" ]; do sleep 0.5; done
  timeout 10 scontrol -o show job "$id" | grep -q 'JobState=COMPLETED' ||
    die "2-node run failed: $*" "$log"
}
step_ms() { field "$1" "^summary \|.* $num ms/step"; }
# progress NAME: the run's step time as it finishes (the table comes at the end).
progress() { echo "bench_multinode: $1: $(step_ms "$work/$1.log") ms/step"; }

# Bytes: every parameter's gradient (vocab padded to 128 as the trainer pads it, positions
# 1024), the tied embedding's (V x C), one microbatch's activations (one row x T x C), fp32.
Vp=$(((V + 127) / 128 * 128))
grads=$((4 * (Vp * C + 1024 * C + L * (12 * C * C + 13 * C) + 2 * C)))
tied=$((4 * Vp * C))
act=$((4 * 1 * SEQ * C))
# A mixture of experts of the same size (mixtral-124M's shape: 8 experts of F 1024, top-2, GQA
# with 4 kv heads) under EP 2: every parameter but the experts' is summed over DP (the experts
# are not: each rank holds its own 4), and each block's forward and backward exchange the rows of
# the slots routed to the other rank: about half of R·k, with R = BATCH/2 x SEQ rows a rank, in
# four all-to-alls a block (rows out and back, forward and backward).
moe=(--arch mixtral --kv-heads 4 --ffn-dim 1024 --experts 8 --experts-per-token 2
     --rope-theta 500000)
moe_dense=$((4 * (Vp * C + L * ((C + 2 * 256) * C + C * C + 2 * C + 8 * C) + C)))
a2a=$((4 * L * 4 * (BATCH / 2 * SEQ * 2 / 2) * C))
# makespan LOG P2P: the simulated schedule of LOG's per-stage F/B/W when a message costs P2P ms.
makespan() {
  local s op costs=()
  for op in F B W; do
    costs+=("--${op,,}" "$(for s in 0 1; do field "$1" "^stage $s \|.* $op $num ms"; done | paste -sd,)")
  done
  "$sched" --pp 2 --microbatches "$BATCH" "${costs[@]}" --p2p "$2" | field /dev/stdin "^makespan $num"
}
# predict LAYOUT ONE_NODE_LOG BW LAT MEASURED: the step across the link, in ms (the header says
# how), and the rate the measured step implies for the bulk sum.
predict() {
  local t c extra bulk=$grads
  t=$(step_ms "$2")
  c=$(field "$2" "^phases \|.* dp_comm $num%")
  if [ "$1" = dp ]; then
    extra=$(awk -v g="$grads" -v b="$3" -v l="$4" 'BEGIN { print g / b + 2 * l }')
  elif [ "$1" = ep ]; then  # the dense gradients' sum, then the all-to-alls (2 messages each)
    bulk=$moe_dense
    extra=$(awk -v g="$moe_dense" -v a="$a2a" -v b="$3" -v l="$4" -v n="$L" \
      'BEGIN { print g / b + 2 * l + a / b + 8 * n * l }')
  else
    local p2p m0 m
    bulk=$tied
    p2p=$(awk -v l="$4" -v a="$act" -v b="$3" 'BEGIN { printf "%.4f", l + a / b }')
    m0=$(makespan "$2" 0) m=$(makespan "$2" "$p2p")
    if [ -z "$m0" ] || [ -z "$m" ]; then echo "the simulator gave no makespan for $2"; return; fi
    extra=$(awk -v e="$tied" -v b="$3" -v l="$4" -v m="$m" -v m0="$m0" \
      'BEGIN { print e / b + 2 * l + m - m0 }')
  fi
  # The prediction, then what the run left for its bulk sum (gradients or the tied embedding):
  # the measured step less the rest of the prediction, as a rate in Gbit/s.
  awk -v t="$t" -v c="$c" -v x="$extra" -v m="$5" -v g="$bulk" -v b="$3" 'BEGIN {
    p = t * (1 - c / 100) + x; print p, g * 8 / (m - (p - g / b)) / 1e6 }'
}

# probe_link: over the link from node1 to node2, with python sockets (ping may be missing): the mean
# round trip of 1-byte messages (TCP_NODELAY, 200 of them), in ms, and one TCP stream's rate
# (200 MB), in Gbit/s. Prints "RTT GBIT".
probe_link() {
  in_node 2 python3 -c '
import socket
s = socket.socket(); s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
s.bind(("10.213.0.12", 5201)); s.listen(1); c, _ = s.accept()
c.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
for _ in range(200): c.sendall(c.recv(1))
while c.recv(1 << 20): pass
c.sendall(b"k")' &
  local server=$!
  sleep 0.5
  in_node 1 python3 -c '
import socket, time
s = socket.create_connection(("10.213.0.12", 5201))
s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
t = time.time()
for _ in range(200): s.sendall(b"p"); s.recv(1)
rtt = (time.time() - t) / 200 * 1e3
buf = bytes(1 << 20); t = time.time()
for _ in range(200): s.sendall(buf)
s.shutdown(socket.SHUT_WR); s.recv(1)
print("%.4f %.2f" % (rtt, 200 * 8 * (1 << 20) / (time.time() - t) / 1e9))'
  wait "$server"
}

rows=()
for rate in ${RATES:-10gbit 1gbit}; do
  gbit=${rate%gbit}
  # The burst holds a millisecond at the rate (at least 64 KB, a GSO packet); both directions.
  burst=$((gbit * 125000 > 65536 ? gbit * 125000 : 65536))
  for i in 1 2; do
    tc_node "$i" replace tbf rate "$rate" burst "$burst" latency 50ms || die "tc tbf $rate failed"
  done
  read -r rtt tcp < <(probe_link)
  [ -n "$tcp" ] || die "could not probe the link between the nodes"
  lat=$(awk -v r="$rtt" 'BEGIN { printf "%.4f", r / 2 }') # one way
  echo "bench_multinode: tbf $rate: round trip $rtt ms, one TCP stream $tcp Gbit/s"
  # Bytes per ms: the tbf rate, or what one TCP stream reached when the CPU could not fill it.
  bw=$(awk -v g="$gbit" -v t="$tcp" 'BEGIN { print (t < g ? t : g) * 1e9 / 8 / 1e3 }')
  # Each layout on one node just before it runs across, so both see the machine alike.
  for layout in dp pp ep; do
    if [ $layout = dp ]; then args=(--dp 2) name="DP 2"; elif [ $layout = ep ]; then
      args=("${moe[@]}" --ep 2) name="EP 2 (moe 8/top2)"
    else
      args=(--pp 2 --microbatches "$BATCH") name="PP 2 (1f1b, M=$BATCH)"
    fi
    one_node "${layout}_one_$rate" "${model[@]}" "${args[@]}" && progress "${layout}_one_$rate"
    across "${layout}_$rate" "${model[@]}" "${args[@]}" && progress "${layout}_$rate"
    meas=$(step_ms "$work/${layout}_$rate.log")
    read -r pred implied < <(predict $layout "$work/${layout}_one_$rate.log" "$bw" "$lat" "$meas")
    [[ $pred =~ ^[0-9.e+-]+$ ]] || die "no prediction for $layout: $pred"
    rows+=("$name|tbf $rate, $lat ms, tcp $tcp|$meas|$(step_ms "$work/${layout}_one_$rate.log")|$pred|$implied|$(cut -d' ' -f1 /proc/loadavg)")
  done
  for i in 1 2; do tc_node "$i" del 2>/dev/null; done
done

echo "CPU: $(lscpu | sed -nE 's/^Model name: *//p' | head -n 1) (family $(lscpu | sed -nE 's/^CPU family: *//p' | head -n 1)," \
  "model $(lscpu | sed -nE 's/^Model: *//p' | head -n 1)), $(getconf _NPROCESSORS_ONLN) cores, shared by both nodes"
echo "GPT-2 124M shape (L$L C$C H$H V$V), batch $BATCH x $SEQ, 1 rank x 1 thread per node, steps 2..$STEPS timed"
printf '%-20s %-30s %9s %9s %9s %7s %6s %5s\n' layout link "ms/step" "one node" predicted error \
  "sum" load
for r in "${rows[@]}"; do
  IFS='|' read -r layout link meas one pred implied load <<<"$r"
  awk -v l="$layout" -v k="$link" -v m="$meas" -v o="$one" -v p="$pred" -v i="$implied" \
    -v d="$load" 'BEGIN {
    printf "%-20s %-30s %9.1f %9.1f %9.1f %+6.1f%% %6.2f %5s\n", l, k, m, o, p, 100 * (m - p) / p, i, d }'
done
echo "link: tbf rate (Gbit/s), one-way latency, one TCP stream's rate (Gbit/s)"
echo "error = (measured - predicted) / predicted"
echo "sum: the rate (Gbit/s) the measured step leaves for the bulk sum (DP: the gradients, EP: the"
echo "     non-expert gradients, PP: the tied embedding), all else as predicted"
echo "load: the machine's 1-minute load average after the run (the 2 ranks are 2 of it)"
echo "no netem in this kernel: no latency is added; the veth's own is used"
