#!/usr/bin/env bash
# Training throughput on one GPU: mpiformer (a GPU build's mpiformer-bench) beside PyTorch eager
# (ci/bench_torch.py --device cuda) on the same GPU, model, batch and precision, in one run:
# T = 1024, GPT-2 124M at B = 8 and 16 and llama-124M at B = 8 (BENCH_ROWS), fp32 and bf16. MFU is against the GPU's dense peak from its
# data sheet (no sparsity; fp32 without TF32, which is what both sides run); PyTorch's MFU is
# mpiformer's times the ratio of their tokens/s (the same FLOPs per token). Then where one step's
# time goes in mpiformer (--profile), kernel by kernel, for B = 8 in bf16.
#   bash ci/gpu/bench.sh BUILD_DIR        (ci/gpu/run.sh calls it; BENCH_STEPS=N steps a row, default 10)
# Environment: PEAK_FP32, PEAK_BF16 (GFLOP/s) for a GPU the table below does not know.
set -u
build=${1:?usage: bench.sh BUILD_DIR (a GPU build)}
root=$(cd "$(dirname "$0")/../.." && pwd)
steps=${BENCH_STEPS:-10}  # not STEPS: run.sh's list of its own steps
name=$(nvidia-smi --query-gpu=name --format=csv,noheader 2>/dev/null | head -n 1)
# Dense peaks, GFLOP/s, from NVIDIA's data sheets: fp32 on the CUDA cores, bf16 on the tensor cores.
case "$name" in
  *H100*PCIe*) fp32=51200 bf16=756000 ;;
  *H100* | *H200* | *GH200*) fp32=66900 bf16=989400 ;;  # SXM and its HBM3e successor
  *A100*) fp32=19500 bf16=312000 ;;
  *) fp32=${PEAK_FP32:-} bf16=${PEAK_BF16:-} ;;
esac
fp32=${PEAK_FP32:-$fp32}
bf16=${PEAK_BF16:-$bf16}
echo "GPU: ${name:-unknown} | dense peak fp32 ${fp32:-?} GFLOP/s, bf16 ${bf16:-?} GFLOP/s"
printf '%-10s %-5s %-9s %12s %7s %12s %7s %7s\n' model prec "B x T" mpiformer MFU torch MFU ratio
declare -A torch_tok  # PyTorch's tok/s per model, precision and batch, for the rows below
for precision in fp32 bf16; do
  peak=$([ "$precision" = fp32 ] && echo "$fp32" || echo "$bf16")
  peak_args=()
  [ -n "$peak" ] && peak_args=(--peak-gflops "$peak")
  for row in ${BENCH_ROWS:-gpt2-124M:8 gpt2-124M:16 llama-124M:8}; do
    model=${row%%:*} batch=${row##*:}
    ours=$("$build/mpiformer-bench" --model "$model" --batch "$batch" --seq-len 1024 \
      --steps "$steps" --precision "$precision" "${peak_args[@]}" 2>&1 | grep '^mpiformer |')
    theirs=$(env -u LD_LIBRARY_PATH python3 "$root/ci/bench_torch.py" --device cuda \
      --model "$model" --batch "$batch" --seq-len 1024 --steps "$steps" \
      --precision "$precision" 2>&1 | grep '^torch |')
    tok=$(sed -n 's/.*| \([0-9.]*\) tok\/s.*/\1/p' <<<"$ours")
    mfu=$(sed -n 's/.*| MFU \([0-9.]*\)%.*/\1/p' <<<"$ours")
    ttok=$(sed -n 's/.*| \([0-9.]*\) tok\/s.*/\1/p' <<<"$theirs")
    torch_tok[$model/$precision/$batch]=$ttok
    if [ -n "$tok" ] && [ -n "$ttok" ]; then
      awk -v n="$model" -v p="$precision" -v b="$batch" -v t="$tok" -v m="$mfu" -v tt="$ttok" 'BEGIN {
        printf "%-10s %-5s %-9s %12.0f %6.1f%% %12.0f %6.1f%% %6.2fx\n", n, p, b " x 1024", t, m, tt, m * tt / t, t / tt }'
    else
      echo "$model $precision $batch x 1024: no result"
      echo "  mpiformer: ${ours:-(none)}"
      echo "  torch:     ${theirs:-(none)}"
    fi
  done
done
# The tensor-core attention (--attention mma: its forward and backward on tensor cores) on the
# bf16 rows, against the same PyTorch figures.
for row in ${BENCH_MMA_ROWS:-gpt2-124M:8 llama-124M:8}; do
  model=${row%%:*} batch=${row##*:}
  ours=$("$build/mpiformer-bench" --model "$model" --batch "$batch" --seq-len 1024 \
    --steps "$steps" --precision bf16 --attention mma ${bf16:+--peak-gflops "$bf16"} 2>&1 |
    grep '^mpiformer |')
  tok=$(sed -n 's/.*| \([0-9.]*\) tok\/s.*/\1/p' <<<"$ours")
  mfu=$(sed -n 's/.*| MFU \([0-9.]*\)%.*/\1/p' <<<"$ours")
  ttok=${torch_tok[$model/bf16/$batch]:-}
  if [ -n "$tok" ] && [ -n "$ttok" ]; then
    awk -v n="$model" -v b="$batch" -v t="$tok" -v m="$mfu" -v tt="$ttok" 'BEGIN {
      printf "%-10s %-5s %-9s %12.0f %6.1f%% %12.0f %6.1f%% %6.2fx (--attention mma)\n", n, "bf16", b " x 1024", t, m, tt, m * tt / t, t / tt }'
  else
    echo "$model bf16 $batch x 1024 --attention mma: no result: ${ours:-(none)}"
  fi
done
for attention in fused mma; do
  echo "--- where a step goes: mpiformer, B = 8 x 1024, bf16, --attention $attention ---"
  "$build/mpiformer-bench" --model gpt2-124M --batch 8 --seq-len 1024 --steps "$steps" \
    --precision bf16 --attention "$attention" ${bf16:+--peak-gflops "$bf16"} --profile 2>&1 |
    sed -n '/^profile/,$p'
done
# The fused attention against PyTorch's scaled_dot_product_attention (FlashAttention's kernel in
# bf16) on the same GPU: a Llama of GPT-2 124M's size, B = 1, long sequences.
lengths=${ATTENTION_LENGTHS:-1024 4096 16384}
for precision in bf16 fp32; do
  echo "--- attention, $precision: mpiformer's fused kernel, then PyTorch's ---"
  "$build/tests/attention_rate" --precision "$precision" $lengths 2>&1 | grep -v '^tile'
  env -u LD_LIBRARY_PATH python3 "$root/ci/bench_attention_torch.py" --device cuda \
    --precision "$precision" $lengths 2>&1
done
