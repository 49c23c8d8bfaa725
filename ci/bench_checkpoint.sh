#!/usr/bin/env bash
# Checkpoint I/O of GPT-2 124M with its AdamW state (~1.5 GB), against the disk it lands on:
# dd's sequential write speed (with fdatasync, as a save syncs its files), then the trainer's
# save on one rank and on two, its read back, and the memory a save adds to a run (peak RSS with
# --save minus without). A benchmark: it prints figures and checks nothing.
#   bash ci/bench_checkpoint.sh BUILD_DIR [SCRATCH_DIR]
set -uo pipefail
BUILD=${1:?usage: bench_checkpoint.sh BUILD_DIR [SCRATCH_DIR]}
TRAIN=$BUILD/mpiformer-train
DIR=$(mktemp -d "${2:-$BUILD}/bench_checkpoint.XXXXXX")
trap 'rm -rf "$DIR"' EXIT
export UCX_TLS=${UCX_TLS:-self,sm} UCX_NET_DEVICES=${UCX_NET_DEVICES:-lo}

model=(--layers 12 --heads 12 --dim 768 --vocab 50257 --max-seq-len 1024 --batch 2 --seq-len 64
  --val-every 0 --peak-gflops 1)
# field LOG SED_EXPR: one number from a log line.
field() { sed -nE "$2" "$1" | head -1; }
# Peak RSS (MB) of the largest process, and the log, of one run.
run() {  # run NAME RANKS THREADS ARGS...
  local name=$1 ranks=$2 threads=$3
  shift 3
  OMP_NUM_THREADS=$threads /usr/bin/time -f "%M" -o "$DIR/$name.rss" \
    mpiexec -n "$ranks" "$TRAIN" "${model[@]}" "$@" >"$DIR/$name.log" 2>&1 ||
    { echo "bench_checkpoint: the $name run failed:"; tail -5 "$DIR/$name.log"; exit 1; }
}
drop_caches() { sync && echo 3 >/proc/sys/vm/drop_caches 2>/dev/null; }

fs=$(df -hT "$DIR" | awk 'NR == 2 { print $2 " on " $1 ", " $5 " free" }')
# dd's rate (GB/s): the median of three runs, this disk's speed varying from run to run.
dd_gbs() {
  local i
  for i in 1 2 3; do
    dd if=/dev/zero of="$DIR/dd.bin" bs=16M count=96 conv=fdatasync 2>&1 |
      sed -nE 's/.* ([0-9.]+) s, .*/\1/p' | awk '{ printf "%.2f\n", 1.61 / $1 }'
    rm -f "$DIR/dd.bin"
  done | sort -n | sed -n 2p
}
dd_before=$(dd_gbs)

# Training alone, then with a save at its end: one rank with both cores, then TP 2 x 1 thread.
run plain 1 2 --steps 1
run save1 1 2 --steps 1 --save "$DIR/ck1"
run save2 2 1 --steps 1 --tp 2 --save "$DIR/ck2"
dd_after=$(dd_gbs)
# Read back: from disk if the page cache can be dropped (root), else from the cache.
if drop_caches; then from="disk (page cache dropped)"; else from="page cache (could not drop it)"; fi
run load1 1 2 --steps 2 --load "$DIR/ck1"
drop_caches
run load2 2 1 --steps 2 --tp 2 --load "$DIR/ck2"

saved() { field "$1" 's/^checkpoint: saved step .* \| ([0-9.]+ GB) in ([0-9.]+ s) = ([0-9.]+) GB\/s$/\1 in \2 = \3 GB\/s/p'; }
rate() { field "$1" 's/^checkpoint: saved step .* = ([0-9.]+) GB\/s$/\1/p'; }
read_back() { field "$1" 's/^resumed: .* \| read ([0-9.]+ GB) in ([0-9.]+ s) = ([0-9.]+) GB\/s$/\1 in \2 = \3 GB\/s/p'; }
mb() { awk '{ printf "%.0f", $1 / 1024 }' "$DIR/$1.rss"; }
of_dd() { awk -v a="$1" -v b="$dd_before" -v c="$dd_after" 'BEGIN { printf "%.0f%%", 200 * a / (b + c) }'; }

echo
echo "checkpoint I/O | GPT-2 124M + AdamW m, v | $DIR ($fs) | $(lscpu | sed -nE 's/^Model name: +//p')"
echo "dd sequential write, 1.6 GB, conv=fdatasync, median of 3: $dd_before GB/s before the saves," \
  "$dd_after GB/s after"
echo "save, 1 rank x 2 threads: $(saved "$DIR/save1.log") ($(of_dd "$(rate "$DIR/save1.log")") of dd's)"
echo "save, TP 2 x 1 thread:    $(saved "$DIR/save2.log") ($(of_dd "$(rate "$DIR/save2.log")") of dd's)"
echo "load from $from: 1 rank $(read_back "$DIR/load1.log"); TP 2 $(read_back "$DIR/load2.log")"
echo "peak RSS, 1 rank: $(mb plain) MB training alone, $(mb save1) MB with the save:" \
  "+$(($(mb save1) - $(mb plain))) MB (the largest tensor, wte, is 154 MB)"
