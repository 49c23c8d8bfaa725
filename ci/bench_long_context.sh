#!/usr/bin/env bash
# Long sequences (make bench): a Llama of GPT-2 124M's size (12 layers, 12 heads, 4 kv heads,
# C = 768, FFN 2048, vocabulary 50,257), B = 1, at growing T, on one rank x all cores and on CP 2
# x one thread each: tok/s, MFU (causal attention counted, layout/step_log.hpp), the peak resident
# set of the busiest rank and the memory plan's prediction for it. Then the same model at
# T = 1024 for reference in each row's ratio. Long rows take minutes a step: one warm-up step.
#   bash ci/bench_long_context.sh [BUILD_DIR]
# Environment: LENGTHS (default "1024 4096 8192 16384"), CP_LENGTHS (default "8192 32768"),
# RECOMPUTE_AT (default 8192: also a --recompute row on one rank there).
set -u
root=$(cd "$(dirname "$0")/.." && pwd)
build=$(cd "${1:-$root/build}" 2>/dev/null && pwd) || { echo "bench_long_context: no build"; exit 1; }
bench="$build/mpiformer-bench"
[ -x "$bench" ] || { echo "bench_long_context: $bench not found; build first"; exit 1; }
MPIEXEC=${MPIEXEC:-mpiexec}
export UCX_TLS=self,sm UCX_NET_DEVICES=lo OMP_PROC_BIND=false
cores=$(nproc)
read -ra lengths <<<"${LENGTHS:-1024 4096 8192 16384}"
read -ra cp_lengths <<<"${CP_LENGTHS:-8192 32768}"
recompute_at=${RECOMPUTE_AT:-8192}
base=""

row() {  # row RANKS THREADS T [FLAGS...]
  local ranks=$1 threads=$2 T=$3
  shift 3
  local steps=3 warmup=1 line
  [ "$T" -le 1024 ] && steps=4
  [ "$T" -ge 16384 ] && steps=2  # minutes a step: one warm-up, one timed
  line=$(OMP_NUM_THREADS=$threads "$MPIEXEC" -n "$ranks" "$bench" --model llama-124M --batch 1 \
    --seq-len "$T" --steps "$steps" --warmup "$warmup" "$@" 2>&1 | grep -m1 '^mpiformer |') ||
    { echo "T $T $*: no result"; return; }
  local tok mfu rss
  tok=$(sed -n 's/.*| \([0-9.]*\) tok\/s.*/\1/p' <<<"$line")
  mfu=$(sed -n 's/.*| MFU \([0-9.]*\)%.*/\1/p' <<<"$line")
  rss=$(sed -n 's/.*| peak RSS \([0-9.]*\) GB\/rank (predicted \([0-9.]*\)).*/\1 \2/p' <<<"$line")
  [ "$T" = 1024 ] && [ "$ranks" = 1 ] && [ $# -eq 0 ] && base=$tok
  printf '%-7s %-22s %9s %6s%% %9s GB %9s GB %8s\n' "$T" "$ranks rank(s) x ${threads}t $*" "$tok" \
    "$mfu" "${rss%% *}" "${rss##* }" \
    "$([ -n "$base" ] && awk -v a="$tok" -v b="$base" 'BEGIN { printf "%.2fx", a / b }')"
}

echo "long sequences: llama-124M shape, B = 1, $cores cores | $(lscpu | sed -n 's/^Model name: *//p')"
printf '%-7s %-22s %9s %7s %12s %12s %8s\n' T layout tok/s MFU "peak RSS" predicted "vs 1024"
for T in "${lengths[@]}"; do
  row 1 "$cores" "$T"
  [ "$T" = "$recompute_at" ] && row 1 "$cores" "$T" --recompute
done
for T in "${cp_lengths[@]}"; do
  if [ "$T" -ge 16384 ]; then
    row 2 1 "$T" --cp 2 --recompute
  else
    row 2 1 "$T" --cp 2
  fi
done
