#!/usr/bin/env bash
# The fused attention's rate (tests/perf/attention_rate.cpp) beside the unfused path it replaced,
# the chunked path (--attention chunked) and PyTorch's attention (ci/bench_attention_torch.py) on
# the same shapes and threads, in one run: a Llama of GPT-2 124M's size (12 heads, 4 kv heads,
# head size 64), B = 1, at the given lengths, fp32 (and bf16 where the CPU has native bf16
# products); then the host shape's tile micro-kernel against the GEMM library on 64 x 64 tiles,
# one thread.
#   bash ci/bench_attention.sh [BUILD_DIR]      (LENGTHS, default "1024 4096 8192")
set -u
root=$(cd "$(dirname "$0")/.." && pwd)
build=$(cd "${1:-$root/build}" 2>/dev/null && pwd) || { echo "bench_attention: no build"; exit 1; }
rate="$build/tests/attention_rate"
[ -x "$rate" ] || { echo "bench_attention: $rate not found; build first (make build)"; exit 1; }
PYTHON=${PYTHON_FOR_TORCH:-/usr/bin/python3}
read -ra lengths <<<"${LENGTHS:-1024 4096 8192}"
threads=$(nproc)
export OMP_NUM_THREADS=$threads
echo "== mpiformer's fused attention (threads $threads)"
"$rate" "${lengths[@]}" || exit 1
echo "== PyTorch, the same shapes and threads"
"$PYTHON" "$root/ci/bench_attention_torch.py" "${lengths[@]}"
if "$build/mpiformer-train" --precision bf16 --steps 1 --val-every 0 --layers 1 --dim 32 \
  --heads 2 2>&1 | grep -q '^error: --precision bf16 needs native bf16'; then
  echo "== bf16: not run (this CPU has no native bf16 products)"
else
  echo "== bf16"
  "$rate" --precision bf16 "${lengths[@]}"
  "$PYTHON" "$root/ci/bench_attention_torch.py" --precision bf16 "${lengths[@]}"
fi
