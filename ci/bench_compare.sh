#!/usr/bin/env bash
# Two builds' training throughput side by side in one run: make bench's mpiformer rows (GPT-2
# 124M; fp32 and bf16 at B=4 T=64 on 1 rank x 2 threads and TP 2 x 1 thread; fp32 at B=8 T=256 on
# 1 rank and DP 2 x 1 thread), each row run by both builds in turn, ROUNDS times (default 2),
# alternating which goes first, each build keeping its best. E.g. the Debian build (Kokkos 3.4
# Serial) against the Kokkos 4 OpenMP one:
#   env -u OPENBLAS_CORETYPE bash ci/bench_compare.sh build build/kokkos4-openmp
# A benchmark, not a test: prints a table, exits 1 only when a run fails.
set -u
a=${1:?usage: bench_compare.sh BUILD_A BUILD_B}
b=${2:?usage: bench_compare.sh BUILD_A BUILD_B}
rounds=${ROUNDS:-2}
steps=${STEPS:-8}
export UCX_TLS=self,sm UCX_NET_DEVICES=lo OMP_PROC_BIND=false
work=$(mktemp -d "${TMPDIR:-/tmp}/mpf-compare.XXXXXX")
trap 'rm -rf "$work"' EXIT

run() {  # run BUILD RANKS THREADS ARGS...: tokens/s of one mpiformer-bench run
  local build=$1 ranks=$2 threads=$3
  shift 3
  OMP_NUM_THREADS=$threads mpiexec -n "$ranks" "$build/mpiformer-bench" --steps "$steps" "$@" \
    </dev/null >"$work/run.log" 2>&1 || { echo "failed: $build $*" >&2; tail -5 "$work/run.log" >&2; exit 1; }
  grep -m1 '^mpiformer |' "$work/run.log" | awk -F' [|] ' '{ sub(/ tok\/s/, "", $7); print $7 }'
}
banner() { OMP_NUM_THREADS=1 "$1/mpiformer-train" --steps 1 --val-every 0 --peak-gflops 1 2>/dev/null | head -1; }
echo "A: $a ($(banner "$a"))"
echo "B: $b ($(banner "$b"))"
printf '%-5s %-9s %-9s %10s %10s %7s\n' prec "B x T" layout "A tok/s" "B tok/s" "B/A"
while read -r precision batch seq ranks threads extra; do
  best_a=0 best_b=0
  for ((r = 0; r < rounds; ++r)); do
    for who in $([ $((r % 2)) -eq 0 ] && echo "a b" || echo "b a"); do
      build=$([ "$who" = a ] && echo "$a" || echo "$b")
      # shellcheck disable=SC2086
      tok=$(run "$build" "$ranks" "$threads" --model gpt2-124M --batch "$batch" --seq-len "$seq" \
        --precision "$precision" $extra) || exit 1
      if [ "$who" = a ]; then
        best_a=$(awk -v x="$tok" -v y="$best_a" 'BEGIN { print (x > y ? x : y) }')
      else
        best_b=$(awk -v x="$tok" -v y="$best_b" 'BEGIN { print (x > y ? x : y) }')
      fi
    done
  done
  layout=$([ -n "$extra" ] && echo "tp$ranks x ${threads}t" || echo "dp$ranks x ${threads}t")
  awk -v p="$precision" -v bt="$batch x $seq" -v l="$layout" -v x="$best_a" -v y="$best_b" \
    'BEGIN { printf "%-5s %-9s %-9s %10.1f %10.1f %6.3fx\n", p, bt, l, x, y, y / x }'
done <<'ROWS'
fp32 4 64 1 2
fp32 4 64 2 1 --tp 2
bf16 4 64 1 2
bf16 4 64 2 1 --tp 2
fp32 8 256 1 1
fp32 8 256 2 1
ROWS
