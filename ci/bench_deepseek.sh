#!/usr/bin/env bash
# A tiny DeepSeek-V3 beside llama-124M on the CPU, per active FLOP (make bench; issue 39's target:
# >= 0.8x llama-124M's tok/s x FLOP/token).
#   bash ci/bench_deepseek.sh [BUILD_DIR]      (BUILD_DIR defaults to <repo>/build)
# The model (written here as a Hugging Face directory of random weights, std 0.02, as a fresh
# initialisation): deepseek_v3 with llama-124M's width, 4 blocks, the first dense
# (first_k_dense_replace 1, intermediate_size 2048), MLA (q_lora_rank 384, kv_lora_rank 256,
# qk_nope 64 + qk_rope 32, v_head 64, 12 heads), the other 3 DeepSeekMoE (8 routed experts of
# moe_intermediate_size 512 in 4 groups, top-2 inside the top-2 groups, sigmoid scores, noaux_tc,
# 1 shared expert), untied, GPT-2's vocabulary, one multi-token prediction module
# (num_nextn_predict_layers 1, --mtp 1 by default), trained with --moe-bias-update-rate 0.001.
# fp32, B x T = 4 x 256 on 1 rank x 2 threads: llama-124M, then the DeepSeek model, twice over,
# each keeping its faster run (a moment when another tenant shares the cores slows one run, not
# the figure).
# Each run's FLOP/token is mpiformer-bench's (flops_per_token: docs/performance.md, "FLOPs, peak
# and MFU": the active parameters' 6·N', the MTP module's block and head pass, MLA's head sizes),
# and the ratio is (tok/s x FLOP/token) of the DeepSeek model over llama-124M's.
# STEPS (default 8): steps per run, the median after two warm-up steps.
# A benchmark, not a test: exits 1 only when a run fails.
set -u

root=$(cd "$(dirname "$0")/.." && pwd)
build=$(cd "${1:-$root/build}" 2>/dev/null && pwd) ||
  { echo "bench_deepseek: no build directory ${1:-$root/build}"; exit 1; }
bench="$build/mpiformer-bench"
[ -x "$bench" ] || { echo "bench_deepseek: $bench not found; build first (make build)"; exit 1; }
MPIEXEC=${MPIEXEC:-mpiexec}
STEPS=${STEPS:-8}
export UCX_TLS=self,sm UCX_NET_DEVICES=lo
work=$(mktemp -d "${TMPDIR:-/tmp}/mpf-bench-ds.XXXXXX")
trap 'rm -rf "$work"' EXIT
die() { echo "bench_deepseek: $1"; [ $# -lt 2 ] || tail -n 20 "$2" | sed 's/^/    /'; exit 1; }

model="$work/tiny-deepseek_v3"
/usr/bin/python3 - "$root/tests/reference" "$model" <<'EOF' || die "writing the model failed"
import json, os, sys
import numpy as np
sys.path.insert(0, sys.argv[1])
import hf_models
m = dict(maxT=1024, V=50257, L=4, C=768, NH=12, F=2048, qr=384, kvr=256, dn=64, dr=32, dv=64,
         eps=1e-6, theta=10000.0, factor=0.0, interleave=True, tied=False,
         moe=dict(E=8, k=2, F=512, shared=1, groups=4, topk_groups=2, scale=2.5, bias=0.0,
                  dense=1))
shapes = hf_models.deepseek_shapes(m) + [
    (n, s) for n, s in hf_models.deepseek_mtp_shapes(m, 1)
    if not n.endswith((".embed_tokens.weight", ".shared_head.head.weight"))]
rng = np.random.default_rng(39)
params = {n: np.ones(s, np.float32) if len(s) == 1 else
          rng.standard_normal(s, dtype=np.float32) * np.float32(0.02) for n, s in shapes}
for n in params:
    if n.endswith("e_score_correction_bias"):
        params[n][:] = 0.0
d = sys.argv[2]
os.makedirs(d)
json.dump(dict(hf_models.deepseek_moe_config(m), num_nextn_predict_layers=1),
          open(os.path.join(d, "config.json"), "w"), indent=2)
hf_models.write_safetensors(os.path.join(d, "model.safetensors"), params, "F32", {"format": "pt"})
EOF

field() { awk -F' [|] ' -v n="$2" '{ print $n }' <<<"$1" | sed 's/^ *//; s/ *$//'; }
tok_s() { field "$1" 7 | sed 's/ tok\/s//'; }
mflop() { sed -nE 's/.* \| ([0-9.]+) MFLOP\/token$/\1/p' <<<"$1"; }
run() {  # run ARGS...: sets $line to mpiformer-bench's result line
  OMP_NUM_THREADS=2 "$MPIEXEC" -n 1 "$bench" --steps "$STEPS" --batch 4 --seq-len 256 \
    --precision fp32 "$@" >"$work/run.log" 2>&1 || die "mpiformer-bench $* failed" "$work/run.log"
  line=$(grep -m1 '^mpiformer |' "$work/run.log") || die "no result line" "$work/run.log"
}
faster() { awk -v a="$(tok_s "$1")" -v b="$(tok_s "$2")" 'BEGIN { exit !(a >= b) }' && echo "$1" || echo "$2"; }
dense="" ds=""
for _ in 1 2; do
  run --model llama-124M
  dense=$(faster "$line" "${dense:-$line}")
  run --init-from "$model" --moe-bias-update-rate 0.001
  ds=$(faster "$line" "${ds:-$line}")
done
printf '%-18s %9s %12s %7s %10s\n' model "tok/s" "MFLOP/token" MFU "GFLOP/s"
for r in "$dense" "$ds"; do
  printf '%-18s %9s %12s %7s %10.1f\n' "$(field "$r" 2)" "$(tok_s "$r")" "$(mflop "$r")" \
    "$(field "$r" 8 | sed 's/MFU //')" "$(awk -v t="$(tok_s "$r")" -v f="$(mflop "$r")" \
    'BEGIN { print t * f / 1e3 }')"
done
echo "tiny deepseek_v3 against llama-124M (fp32, 4 x 256, 1 rank x 2 threads, tok/s x FLOP/token):" \
  "$(awk -v a="$(tok_s "$ds")" -v fa="$(mflop "$ds")" -v b="$(tok_s "$dense")" \
    -v fb="$(mflop "$dense")" 'BEGIN { printf "%.2fx", a * fa / (b * fb) }')" \
  "(target >= 0.8x)"
