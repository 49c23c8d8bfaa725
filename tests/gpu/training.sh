#!/usr/bin/env bash
# 20 training steps on the GPU give the CPU build's losses, in fp32 and in bf16, within:
#   fp32  1e-4 relative at every step. The two builds differ only in the order of their sums
#         (cuBLAS's GEMM blocking against oneDNN's; a team reduction against 16 lanes), each a
#         ~1e-7 relative rounding difference; between the CPU's two GEMM libraries the same
#         model's 20 losses agree to 2.5e-7 (measured), and AdamW's 1/sqrt(v) amplifies such noise
#         in the parameters only slowly.
#   bf16  2e-3 relative at every step: a ~1e-7 difference moves a product's input across a bf16
#         rounding boundary now and then, each such element off by 2^-8 (serial_reference.sh).
# Also: the banner names the CUDA execution space and the GPU, and a GPU run reads the loss and
# the gradient norm once a step (--profile).
source "$(dirname "$0")/../cli/common.sh"
source "$(dirname "$0")/common.sh"
require_gpu "$TRAIN"
require_cpu_build "comparing the GPU's losses with the CPU's"

args=(--steps 20 --val-every 0 --layers 4 --dim 128 --heads 4 --batch 16 --seq-len 64
  --peak-gflops 1)
for precision in fp32 bf16; do
  tolerance=$([ "$precision" = fp32 ] && echo 1e-4 || echo 2e-3)
  OMP_NUM_THREADS=4 timeout 300 "$TRAIN" "${args[@]}" --precision "$precision" --profile \
    >"$WORK/gpu_$precision.log" 2>&1
  OMP_NUM_THREADS=4 timeout 300 "$CPU_TRAIN" "${args[@]}" --precision "$precision" \
    >"$WORK/cpu_$precision.log" 2>&1
  cpu_status=$?
  if [ "$precision" = bf16 ] && grep -q '^error: --precision bf16 needs native bf16' "$WORK/cpu_bf16.log"; then
    echo "note: bf16 on the GPU not compared: this CPU refuses it: $(grep -m1 '^error:' "$WORK/cpu_bf16.log")"
    continue
  fi
  if "$PY" - "$WORK/gpu_$precision.log" "$WORK/cpu_$precision.log" "$tolerance" <<'PYEOF'; then
import re, sys
def losses(path):
    return [float(x) for x in re.findall(r"^step \d+/\d+ \| loss ([0-9.]+)", open(path).read(), re.M)]
gpu, cpu, tol = losses(sys.argv[1]), losses(sys.argv[2]), float(sys.argv[3])
assert len(gpu) == 20 and len(cpu) == 20, f"expected 20 losses each, got {len(gpu)} and {len(cpu)}"
worst = max(abs(g - c) / c for g, c in zip(gpu, cpu))
print(f"  worst step {worst:.2e} relative; final GPU {gpu[-1]:.6f}, CPU {cpu[-1]:.6f}")
assert worst <= tol, f"losses differ by {worst:.2e} relative (tolerance {tol})"
PYEOF
    ok "$precision: 20 GPU steps = the CPU build's losses within $tolerance"
  else
    bad "$precision: GPU and CPU losses (CPU exit $cpu_status)"
    tail -n 5 "$WORK/gpu_$precision.log" "$WORK/cpu_$precision.log"
  fi
done
# The tensor-core attention (--attention mma, head size 64: its forward and backward) trains as the
# portable fused kernel does on the same GPU: 20 bf16 steps within bf16's 2e-3 relative.
mma_args=(--steps 20 --val-every 0 --layers 2 --dim 256 --heads 4 --batch 8 --seq-len 200
  --peak-gflops 1 --precision bf16)
for path in fused mma; do
  OMP_NUM_THREADS=4 timeout 300 "$TRAIN" "${mma_args[@]}" --attention $path >"$WORK/gpu_$path.log" 2>&1
done
if "$PY" - "$WORK/gpu_mma.log" "$WORK/gpu_fused.log" <<'PYEOF'; then
import re, sys
def losses(path):
    return [float(x) for x in re.findall(r"^step \d+/\d+ \| loss ([0-9.]+)", open(path).read(), re.M)]
mma, fused = losses(sys.argv[1]), losses(sys.argv[2])
assert len(mma) == 20 and len(fused) == 20, f"expected 20 losses each, got {len(mma)} and {len(fused)}"
worst = max(abs(a - b) / b for a, b in zip(mma, fused))
print(f"  worst step {worst:.2e} relative; final mma {mma[-1]:.6f}, fused {fused[-1]:.6f}")
assert worst <= 2e-3, f"losses differ by {worst:.2e} relative (tolerance 2e-3)"
PYEOF
  ok "--attention mma: 20 bf16 steps (head size 64, T 200) = the fused kernel's losses within 2e-3"
else
  bad "--attention mma against --attention fused on the GPU"
  tail -n 5 "$WORK/gpu_mma.log" "$WORK/gpu_fused.log"
fi
# The other families' kernels (RMSNorm, RoPE, SwiGLU, GQA, OLMo-2's post-norms and whole-projection
# q/k norms, the experts' routing, sort and balance statistics), 10 fp32 steps each against the CPU.
for family in "llama --kv-heads 2" "olmo2 --kv-heads 2" "mixtral --experts 4 --experts-per-token 2" \
  "olmoe --experts 4 --experts-per-token 2"; do
  name=${family%% *}
  family_args=(--steps 10 --val-every 0 --layers 2 --dim 128 --heads 4 --batch 8 --seq-len 64
    --peak-gflops 1 --arch $family)
  OMP_NUM_THREADS=4 timeout 300 "$TRAIN" "${family_args[@]}" >"$WORK/gpu_$name.log" 2>&1
  OMP_NUM_THREADS=4 timeout 300 "$CPU_TRAIN" "${family_args[@]}" >"$WORK/cpu_$name.log" 2>&1
  if "$PY" - "$WORK/gpu_$name.log" "$WORK/cpu_$name.log" <<'PYEOF'; then
import re, sys
def values(path, key):
    return [float(x) for x in re.findall(r"^step \d+/\d+ \| " + key + r" ([0-9.]+)", open(path).read(), re.M)]
gpu, cpu = values(sys.argv[1], "loss"), values(sys.argv[2], "loss")
assert len(gpu) == 10 and len(cpu) == 10, f"expected 10 losses each, got {len(gpu)} and {len(cpu)}"
worst = max(abs(g - c) / c for g, c in zip(gpu, cpu))
print(f"  worst step {worst:.2e} relative; final GPU {gpu[-1]:.6f}, CPU {cpu[-1]:.6f}")
assert worst <= 1e-4, f"losses differ by {worst:.2e} relative (tolerance 1e-4)"
PYEOF
    ok "$name: 10 GPU steps = the CPU build's losses within 1e-4"
  else
    bad "$name: GPU and CPU losses"
    tail -n 5 "$WORK/gpu_$name.log" "$WORK/cpu_$name.log"
  fi
done
banner=$(grep -m1 '^mpiformer ' "$WORK/gpu_fp32.log")
[[ "$banner" == *"Cuda, GPU 0 of "* ]] && ok "banner: $banner" || bad "banner: $banner"
reads=$(sed -n '/host <-> kernels/,$p' "$WORK/gpu_fp32.log" | grep -E '^  d2h (loss|gradient norm) ')
[ "$(echo "$reads" | awk '$(NF-2) == "1.0"' | wc -l)" -eq 2 ] &&
  ok "one loss read and one gradient-norm read a step: $(echo $reads)" ||
  bad "host reads a step: $reads"
finish
