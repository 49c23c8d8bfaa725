#!/usr/bin/env bash
# Training throughput of GPT-2 124M against PyTorch measured in the same run (make bench).
#   bash ci/bench_throughput.sh [BUILD_DIR]      (BUILD_DIR defaults to <repo>/build)
# Rows, each mpiformer run next to PyTorch on the same model, batch and thread count:
#   fp32 and bf16 (PyTorch: torch.autocast bf16), B=4 T=64, on both cores: 1 rank x 2 threads and
#   TP 2 x 1 thread, against PyTorch on 2 threads; and B=4 T=1024 on 1 rank x 2 threads;
#   a Llama of GPT-2 124M's size (12 layers, 768 channels, 12 heads, 4 K/V heads, FFN 2048, tied),
#   fp32 and bf16 on 1 rank x 2 threads, against PyTorch's plain Llama and against the GPT-2 row;
#   data-parallel scaling at B=8 T=256: DP 2 x 1 thread against one rank on 1 thread.
# PyTorch runs as its users tune it (glibc keeps freed memory, passive OpenMP waits) and picks its
# own kernels; each row names the kernels both sides used. PyTorch is timed before and after the
# mpiformer runs of its precision and the faster of the two is its figure, so a moment when
# another tenant shares the cores cannot make the ratio look better than it is.
# The data-parallel pair runs twice, alternating, and each keeps its faster run, for the same reason.
# Each mpiformer row also shows "busy": the CPU time its ranks used over its wall time, out of the
# cores it asked for; well below that (say 1.6 of 2) means another tenant shared the cores and the
# row is slower than the machine can do.
# STEPS (default 8) and TORCH_STEPS (default 12) set the steps per run; the median after two
# warm-up steps is each figure. A benchmark, not a test: exits 1 only when a run fails.
set -u

root=$(cd "$(dirname "$0")/.." && pwd)
build=$(cd "${1:-$root/build}" 2>/dev/null && pwd) ||
  { echo "bench_throughput: no build directory ${1:-$root/build}"; exit 1; }
bench="$build/mpiformer-bench"
[ -x "$bench" ] || { echo "bench_throughput: $bench not found; build first (make build)"; exit 1; }
MPIEXEC=${MPIEXEC:-mpiexec}
PYTHON=${PYTHON_FOR_TORCH:-/usr/bin/python3}
STEPS=${STEPS:-8}
TORCH_STEPS=${TORCH_STEPS:-12}
export UCX_TLS=self,sm UCX_NET_DEVICES=lo
work=$(mktemp -d "${TMPDIR:-/tmp}/mpf-bench-tp.XXXXXX")
trap 'rm -rf "$work"' EXIT

die() { echo "bench_throughput: $1"; [ $# -lt 2 ] || tail -n 20 "$2" | sed 's/^/    /'; exit 1; }
# field LINE N: the Nth " | "-separated field of a result line, trimmed.
field() { awk -F' [|] ' -v n="$2" '{ print $n }' <<<"$1" | sed 's/^ *//; s/ *$//'; }
tok_s() { field "$1" 7 | sed 's/ tok\/s//'; }

# CPU time of everything this shell has waited for, in seconds.
cpu_seconds() { awk -v hz="$(getconf CLK_TCK)" '{ print ($16 + $17) / hz }' "/proc/$$/stat"; }

# mpiformer RANKS THREADS ARGS...: runs mpiformer-bench (which prints one result line) and sets
# $line to that line with " | busy X" (cores busy over the run) appended.
mpiformer() {
  local ranks=$1 threads=$2
  shift 2
  local cpu0 t0
  cpu0=$(cpu_seconds) t0=$(date +%s.%N)
  OMP_NUM_THREADS=$threads "$MPIEXEC" -n "$ranks" "$bench" --steps "${RUN_STEPS:-$STEPS}" "$@" \
    >"$work/run.log" 2>&1 || die "mpiformer-bench -n $ranks $* failed" "$work/run.log"
  line=$(grep -m1 '^mpiformer |' "$work/run.log") || die "no result line" "$work/run.log"
  line+=" | busy $(awk -v c="$(cpu_seconds)" -v c0="$cpu0" -v t="$(date +%s.%N)" -v t0="$t0" \
    'BEGIN { printf "%.2f", (c - c0) / (t - t0) }')"
}

# torch THREADS ARGS...: PyTorch's result line.
torch() {
  local threads=$1
  shift
  MALLOC_MMAP_MAX_=0 MALLOC_TRIM_THRESHOLD_=100000000000 OMP_WAIT_POLICY=PASSIVE \
    OMP_NUM_THREADS=$threads "$PYTHON" "$root/ci/bench_torch.py" --threads "$threads" \
    --steps "$TORCH_STEPS" "$@" >"$work/torch.log" 2>&1 ||
    die "PyTorch (ci/bench_torch.py $*) failed" "$work/torch.log"
  grep -m1 '^torch |' "$work/torch.log" || die "no result line" "$work/torch.log"
}
busy() { sed -n 's/.* | busy //p' <<<"$1"; }
faster() { awk -v a="$(tok_s "$1")" -v b="$(tok_s "$2")" 'BEGIN { exit !(a >= b) }' && echo "$1" || echo "$2"; }
ratio() { awk -v a="$1" -v b="$2" 'BEGIN { printf "%.2fx", a / b }'; }

cpu=$(lscpu | sed -nE 's/^Model name: *//p' | head -n 1)
family=$(lscpu | sed -nE 's/^CPU family: *//p' | head -n 1)
model=$(lscpu | sed -nE 's/^Model: *//p' | head -n 1)
echo "CPU: $cpu (family $family, model $model), $(nproc) cores;" \
  "OPENBLAS_CORETYPE=${OPENBLAS_CORETYPE:-(unset)}"
[ -z "${OPENBLAS_CORETYPE:-}" ] ||
  echo "note: OPENBLAS_CORETYPE is set: OpenBLAS (PyTorch's fp32 GEMM here) runs narrower kernels;" \
    "users do not set it: run with env -u OPENBLAS_CORETYPE"

row() { printf '%-5s %-9s %-10s %8s %7s %6s %8s %7s\n' "$@"; }
row prec "B x T" layout "tok/s" "MFU" busy "torch" ratio
kernels=()
declare -A gpt2_tok
for precision in fp32 bf16; do
  args=(--model gpt2-124M --batch 4 --seq-len 64 --precision "$precision")
  before=$(torch 2 "${args[@]}")
  mpiformer 1 2 "${args[@]}"
  rows=("$line")
  mpiformer 2 1 "${args[@]}" --tp 2
  rows+=("$line")
  after=$(torch 2 "${args[@]}")
  ref=$(faster "$before" "$after")
  gpt2_tok[$precision]=$(tok_s "${rows[0]}")
  for r in "${rows[@]}"; do
    row "$precision" "4 x 64" "$(field "$r" 4)" "$(tok_s "$r")" "$(field "$r" 8 | sed 's/MFU //')" \
      "$(busy "$r")" "$(tok_s "$ref")" "$(ratio "$(tok_s "$r")" "$(tok_s "$ref")")"
  done
  kernels+=("$precision mpiformer: $(cut -d'|' -f10- <<<"${rows[0]}" |
    sed 's/^ *gemm: //; s/ | [0-9.]* MFLOP\/token//; s/ | busy .*//')"
            "$precision PyTorch (2t, $(tok_s "$before") then $(tok_s "$after") tok/s):"
            "    $(sed 's/.*kernels: //' <<<"$ref")")
done

# The Llama beside GPT-2: the same batch, threads and precision (ratio: against PyTorch's Llama).
llama_vs=()
for precision in fp32 bf16; do
  args=(--model llama-124M --batch 4 --seq-len 64 --precision "$precision")
  before=$(torch 2 "${args[@]}")
  mpiformer 1 2 "${args[@]}"
  after=$(torch 2 "${args[@]}")
  ref=$(faster "$before" "$after")
  row "$precision" "4 x 64" "llama $(field "$line" 4)" "$(tok_s "$line")" \
    "$(field "$line" 8 | sed 's/MFU //')" "$(busy "$line")" "$(tok_s "$ref")" \
    "$(ratio "$(tok_s "$line")" "$(tok_s "$ref")")"
  llama_vs+=("$precision $(ratio "$(tok_s "$line")" "${gpt2_tok[$precision]}")")
done
echo "llama-124M against GPT-2 124M (1 rank x 2 threads, tok/s): ${llama_vs[*]}"

# A mixture of experts beside the dense Llama with the same active parameters per token
# (mixtral-124M: 8 experts of F 1024, top-2; llama-124M: F 2048), 4 x 256, dense then MoE then
# dense again, the faster dense run kept. Their active FLOPs per token are equal but for the
# router's (C x E), so the tok/s ratio is the ratio per active FLOP (target >= 0.8).
args=(--batch 4 --seq-len 256 --precision fp32)
mpiformer 1 2 --model llama-124M "${args[@]}"
dense1=$line
mpiformer 1 2 --model mixtral-124M "${args[@]}"
moe=$line
mpiformer 1 2 --model llama-124M "${args[@]}"
dense=$(awk -v a="$(tok_s "$dense1")" -v b="$(tok_s "$line")" 'BEGIN { print (a > b ? a : b) }')
row fp32 "4 x 256" "moe 8/top2" "$(tok_s "$moe")" "$(field "$moe" 8 | sed 's/MFU //')" \
  "$(busy "$moe")" "-" "-"
echo "mixtral-124M against llama-124M (1 rank x 2 threads, tok/s per active FLOP): $(ratio "$(tok_s "$moe")" "$dense") (dense $dense tok/s)"
# Expert parallelism on the same two cores: EP 2 on 2 ranks x 1 thread (each rank 4 of the 8
# experts and half the rows, tokens exchanged by all-to-all) against the 1-rank row above; then
# the all-to-alls' share of a step from a profiled run (its fences slow it: not timed).
mpiformer 2 1 --model mixtral-124M --ep 2 "${args[@]}"
ep=$line
row fp32 "4 x 256" "moe ep 2" "$(tok_s "$ep")" "$(field "$ep" 8 | sed 's/MFU //')" \
  "$(busy "$ep")" "-" "-"
mpiformer 2 1 --model mixtral-124M --ep 2 "${args[@]}" --profile
a2a=$(sed -nE 's/^  mpi all-to-all \(experts\) +[0-9.]+ +([0-9.]+) +([0-9.]+)%.*/\1 ms, \2%/p' "$work/run.log")
echo "mixtral-124M EP 2 (2 ranks x 1 thread) against 1 rank x 2 threads: $(ratio "$(tok_s "$ep")" "$(tok_s "$moe")"); all-to-alls ${a2a:-not in the profile} of a profiled step"

# GPT-2 124M at B x T = 4 x 1024, where attention is a real share of the step: steps of ~10 s,
# five (three timed) each side.
for precision in fp32 bf16; do
  args=(--model gpt2-124M --batch 4 --seq-len 1024 --precision "$precision")
  before=$(TORCH_STEPS=5 torch 2 "${args[@]}")
  RUN_STEPS=5 mpiformer 1 2 "${args[@]}"
  after=$(TORCH_STEPS=5 torch 2 "${args[@]}")
  ref=$(faster "$before" "$after")
  row "$precision" "4 x 1024" "$(field "$line" 4)" "$(tok_s "$line")" \
    "$(field "$line" 8 | sed 's/MFU //')" "$(busy "$line")" "$(tok_s "$ref")" \
    "$(ratio "$(tok_s "$line")" "$(tok_s "$ref")")"
done

# Steps of ~10 s: five (three timed) are enough.
args=(--model gpt2-124M --batch 8 --seq-len 256)
export RUN_STEPS=$((STEPS < 5 ? STEPS : 5))
mpiformer 1 1 "${args[@]}"
one=$line
mpiformer 2 1 "${args[@]}"
dp=$line
mpiformer 1 1 "${args[@]}"
one=$(faster "$one" "$line")
mpiformer 2 1 "${args[@]}"
dp=$(faster "$dp" "$line")
for r in "$one" "$dp"; do
  [ "$r" = "$one" ] && vs=- || vs=$(ratio "$(tok_s "$dp")" "$(tok_s "$one")")
  row fp32 "8 x 256" "$(field "$r" 4)" "$(tok_s "$r")" "$(field "$r" 8 | sed 's/MFU //')" \
    "$(busy "$r")" - "$vs"
done
echo "ratio: tok/s against PyTorch on 2 threads (the faster of its runs before and after), or for"
echo "DP 2 x 1t against 1 rank x 1t (the faster of two runs each). MFU: model FLOPs / the best GEMM"
echo "rate of any library here. busy: cores the run kept busy (CPU time / wall time)."
printf '%s\n' "${kernels[@]}"
