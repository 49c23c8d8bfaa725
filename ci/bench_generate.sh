#!/usr/bin/env bash
# Generation speed of GPT-2 124M (random weights of its shape: speed does not depend on the
# values) on this machine:
#   1. prompt and generated tokens/s, 64-token prompt + 128 new tokens, on 1 rank x 2 threads and
#      on TP 2 x 1 thread: the median of REPEAT runs (default 3) and their range;
#   2. the per-token cost against the position on 1 rank x 2 threads. With the KV cache a token
#      reads every weight once (~0.5 GB) plus the cached K and V of the positions before it
#      (2·L·p·C floats, 74 KB per position): its cost should grow only by that attention share.
#      Recomputing the whole prefix (--no-kv-cache) costs a forward pass over p + 1 positions.
#   bash ci/bench_generate.sh [BUILD_DIR] [SCRATCH_DIR]       (make bench)
# A benchmark, not a test: it exits 1 only when a run fails, never on the numbers. Run it with
# `env -u OPENBLAS_CORETYPE` where the environment pins OpenBLAS to an older core type.
set -u

root=$(cd "$(dirname "$0")/.." && pwd)
build=$(cd "${1:-$root/build}" 2>/dev/null && pwd) ||
  { echo "bench_generate: no build directory ${1:-$root/build}"; exit 1; }
train="$build/mpiformer-train"
generate="$build/mpiformer-generate"
for exe in "$train" "$generate"; do
  [ -x "$exe" ] || { echo "bench_generate: $exe not found; build first (make build)"; exit 1; }
done
MPIEXEC=${MPIEXEC:-mpiexec}
REPEAT=${REPEAT:-3}
work=$(mktemp -d "${2:-${TMPDIR:-/tmp}}/mpf-bench-gen.XXXXXX")
trap 'rm -rf "$work"' EXIT
export UCX_TLS=${UCX_TLS:-self,sm} UCX_NET_DEVICES=${UCX_NET_DEVICES:-lo}

die() { echo "bench_generate: $1"; [ $# -lt 2 ] || tail -n 20 "$2"; exit 1; }
L=12 C=768
model="$work/gpt2_124M_random.bin"
OMP_NUM_THREADS=2 "$train" --layers $L --heads 12 --dim $C --vocab 50257 --max-seq-len 1024 \
  --steps 1 --batch 1 --seq-len 64 --val-every 0 --peak-gflops 1 --save-llmc "$model" \
  >"$work/train.log" 2>&1 || die "making the GPT-2 124M checkpoint failed" "$work/train.log"
# ids N: N token ids spread over the vocabulary.
ids() { awk -v n="$1" 'BEGIN { for (i = 0; i < n; ++i) printf "%s%d", (i ? "," : ""), (i * 7919 + 13) % 50257 }'; }
# run LOG RANKS THREADS ARGS...: one generation; its summary line is the last line of LOG.
run() {
  local log=$1 ranks=$2 threads=$3
  shift 3
  OMP_NUM_THREADS=$threads timeout 900 "$MPIEXEC" -n "$ranks" "$generate" --init-from "$model" \
    "$@" >/dev/null 2>"$log" || die "generation failed: $*" "$log"
}
num='([0-9]+(\.[0-9]+)?)'
prompt_rate() { sed -nE "s/^summary \| prompt [^=]* = $num tok\/s \|.*/\1/p" "$1"; }
step_ms() { sed -nE "s/^summary .* one-position steps at $num ms.*/\1/p" "$1"; }
# stats V...: "median [min-max]"
stats() { printf '%s\n' "$@" | sort -g | awk '{ v[NR] = $1 } END {
  m = NR % 2 ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2; printf "%.1f [%.1f-%.1f]", m, v[1], v[NR] }'; }

echo "mpiformer bench_generate | GPT-2 124M (L$L C$C V50257, random weights) | $(nproc) cores |" \
  "OPENBLAS_CORETYPE=${OPENBLAS_CORETYPE:-unset}"
echo "1. 64-token prompt, 128 new tokens (greedy), median [range] of $REPEAT runs"
printf '   %-20s %26s %26s %22s\n' layout "prompt tok/s" "generated tok/s" "ms/token"
for layout in "1 2" "2 1"; do
  read -r ranks threads <<<"$layout"
  tp=()
  [ "$ranks" -gt 1 ] && tp=(--tp "$ranks")
  prompts=() rates=() ms=()
  for i in $(seq "$REPEAT"); do
    run "$work/run.log" "$ranks" "$threads" "${tp[@]}" --prompt-tokens "$(ids 64)" --max-new-tokens 128
    prompts+=("$(prompt_rate "$work/run.log")")
    ms+=("$(step_ms "$work/run.log")")
    rates+=("$(awk -v m="${ms[-1]}" 'BEGIN { printf "%.2f", 1000 / m }')")
  done
  name="1 rank x 2 threads"
  [ "$ranks" -gt 1 ] && name="tp 2 x 1 thread"
  printf '   %-20s %26s %26s %22s\n' "$name" "$(stats "${prompts[@]}")" "$(stats "${rates[@]}")" \
    "$(stats "${ms[@]}")"
done

echo "2. per-token cost against the position p (1 rank x 2 threads): 32 cached steps from p, and"
echo "   2 whole-prefix steps at p; the attention share is the cached K/V read against all bytes read"
printf '   %6s %16s %14s %18s %22s\n' p "cached ms/token" "vs p = 1" "attention share" "whole prefix ms/token"
base=""
for p in 1 128 512 960; do
  run "$work/cached.log" 1 2 --prompt-tokens "$(ids $p)" --max-new-tokens 33
  run "$work/whole.log" 1 2 --prompt-tokens "$(ids $p)" --max-new-tokens 3 --no-kv-cache
  cached=$(step_ms "$work/cached.log")
  [ -n "$base" ] || base=$cached
  # Bytes per token: every weight but the position table and the embedding's rows, plus the
  # cache of the p + 16 positions (the middle of the 32 steps) before it.
  share=$(awk -v p="$p" -v L=$L -v C=$C 'BEGIN {
    w = 4 * (124475904 - 1024 * C); kv = 4 * 2 * L * (p + 16) * C; printf "%.1f%%", 100 * kv / (w + kv) }')
  printf '   %6d %16.2f %13.1f%% %18s %22.1f\n' "$p" "$cached" \
    "$(awk -v a="$cached" -v b="$base" 'BEGIN { print 100 * (a / b - 1) }')" "$share" \
    "$(step_ms "$work/whole.log")"
done
