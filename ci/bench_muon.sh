#!/usr/bin/env bash
# Muon against AdamW (--optimizer muon, optim/muon.hpp). A benchmark: it prints figures and
# checks nothing.
#   1. Cost: GPT-2 124M at 4 x 1,024, 3 steps, AdamW and Muon on one rank (2 threads) and on DP 2
#      (1 thread each): ms per step (steps 2..3), the optimizer's share of the step (the phases
#      line) and the Newton-Schulz products' rate (--profile) against the run's GEMM peak.
#   2. Convergence: a 4-block GPT-2 (C 128) on the built-in corpus, 600 steps of 8 x 128 tokens,
#      the same tokens for both, each optimizer at four learning rates; the validation loss every
#      50 steps, the best final loss of each, and the first step at which Muon's best run
#      reaches AdamW's best final loss. The curves of the best runs as one PNG (mpiformer-plot).
#   bash ci/bench_muon.sh BUILD_DIR [PNG]     (PARTS="cost convergence" by default)
set -uo pipefail
BUILD=${1:?usage: bench_muon.sh BUILD_DIR [PNG]}
PNG=${2:-}
TRAIN=$BUILD/mpiformer-train
DIR=$(mktemp -d "$BUILD/bench_muon.XXXXXX")
trap 'rm -rf "$DIR"' EXIT
export UCX_TLS=${UCX_TLS:-self,sm} UCX_NET_DEVICES=${UCX_NET_DEVICES:-lo}

PARTS=${PARTS:-cost convergence}
if [[ " $PARTS " == *" cost "* ]]; then
gpt2=(--layers 12 --heads 12 --dim 768 --vocab 50257 --max-seq-len 1024 --batch 4 --seq-len 1024
  --steps 3 --val-every 0 --profile)
echo "== cost: GPT-2 124M, 4 x 1,024, $(lscpu | sed -nE 's/^Model name: *//p')"
printf "%-8s %-7s %10s %10s %14s %10s\n" optimizer layout ms/step optimizer "NS GFLOP/s" "GEMM peak"
for opt in adamw muon; do
  for layout in 1 dp2; do
    if [ "$layout" = 1 ]; then
      launch=(env OMP_NUM_THREADS=2 "$TRAIN")
    else
      launch=(env OMP_NUM_THREADS=1 mpiexec -n 2 "$TRAIN" --dp 2)
    fi
    log=$DIR/cost_${opt}_$layout.log
    "${launch[@]}" "${gpt2[@]}" --optimizer "$opt" >"$log" 2>&1 ||
      { echo "bench_muon: the $opt $layout run failed:"; tail -5 "$log"; exit 1; }
    ms=$(sed -nE 's/^summary .*\| ([0-9.]+) ms\/step.*/\1/p' "$log")
    share=$(sed -nE 's/^phases .*optimizer ([0-9.]+%).*/\1/p' "$log")
    ns=$(awk '$1 == "mpf::muon_newton_schulz" { print $NF }' "$log" | head -1)
    peak=$(sed -nE 's/^summary .*peak ([0-9.]+) GFLOP.*/\1/p' "$log")
    printf "%-8s %-7s %10s %10s %14s %10s\n" "$opt" "$layout" "$ms" "$share" "${ns:--}" "$peak"
  done
done

fi

[[ " $PARTS " == *" convergence "* ]] || exit 0
small=(--layers 4 --heads 4 --dim 128 --batch 8 --seq-len 128 --steps 600 --val-every 50
  --warmup 30 --seed 1)
echo "== convergence: L4 C128 on the built-in corpus, 600 steps of 1,024 tokens, validation every 50"
best_loss() { sed -nE 's/^val step 600 \| loss ([0-9.]+).*/\1/p' "$1"; }
declare -A best_lr best_final
for opt in adamw muon; do
  for lr in 1e-3 3e-3 6e-3 1e-2; do
    log=$DIR/${opt}_$lr.log
    OMP_NUM_THREADS=1 "$TRAIN" "${small[@]}" --optimizer "$opt" --lr "$lr" \
      --metrics "$DIR/${opt}_$lr.jsonl" >"$log" 2>&1 ||
      { echo "bench_muon: the $opt lr $lr run failed:"; tail -5 "$log"; exit 1; }
    final=$(best_loss "$log")
    echo "$opt lr $lr: validation loss $(sed -nE 's/^val step ([0-9]+) \| loss ([0-9.]+).*/\1:\2/p' "$log" |
      tr '\n' ' ')"
    if [ -z "${best_final[$opt]:-}" ] || awk -v a="$final" -v b="${best_final[$opt]}" 'BEGIN { exit !(a < b) }'; then
      best_final[$opt]=$final
      best_lr[$opt]=$lr
    fi
  done
done
target=${best_final[adamw]}
reach=$(sed -nE 's/^val step ([0-9]+) \| loss ([0-9.]+).*/\1 \2/p' "$DIR/muon_${best_lr[muon]}.log" |
  awk -v t="$target" '$2 <= t { print $1; exit }')
echo "best AdamW: lr ${best_lr[adamw]}, final ${best_final[adamw]}; best Muon: lr ${best_lr[muon]}, final ${best_final[muon]}"
echo "Muon reaches AdamW's best final loss at step ${reach:-never} of 600 ($(awk -v r="${reach:-600}" 'BEGIN { printf "%.2f", r / 600 }')x the steps)"
if [ -n "$PNG" ]; then
  "$BUILD/mpiformer-plot" "$DIR/adamw_${best_lr[adamw]}.jsonl" "$DIR/muon_${best_lr[muon]}.jsonl" \
    --labels "AdamW lr ${best_lr[adamw]},Muon lr ${best_lr[muon]}" --out "$PNG" --overwrite &&
    echo "curves: $PNG"
fi
