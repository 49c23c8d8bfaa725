# Shared by the layout tests (docs/design.md, invariant 3): a serial run of a tiny model, and
# run_layout, which runs the same five steps on another layout and compares.
#
# Tolerance, and why: a layout changes only the order of floating-point sums (row-parallel partial
# products and the vocab-parallel softmax summed by all-reduce under TP, gradients summed over DP
# ranks or over microbatches, the tied embedding's two halves summed across pipeline stages), each
# a ~1e-7 relative rounding difference. Through five AdamW steps that stays ~1e-7 in the loss, so
# losses must agree to 1e-5 relative. Adam divides by √v, so an element whose gradient is near
# zero turns rounding noise into an update of up to ~lr: parameters must agree to 1e-4 of the
# largest parameter (measured: <= 1.4e-5), while a wrong split, a missing all-reduce or a doubled
# bias moves them by 1e-2 or more.
#
# PRECISION=bf16 runs every layout and the serial run with --precision bf16. A product then rounds
# its inputs to bf16's 8 significant bits, and a ~1e-7 change from the order of fp32 sums moves an
# input across a rounding boundary with probability ~1e-7 / 2^-8 ~ 3e-5, each such element then
# off by a whole bf16 step (2^-8 relative). Those sparse 4e-3 steps, not the 1e-7 ones, set the
# spread: measured <= 1.2e-5 relative in the losses and 2.3e-3 of the largest parameter over
# five steps, over every layout here and in pipeline.sh (Adam's 1/sqrt(v) again amplifying the
# near-zero gradients), while only the products' inputs were rounded. Kept in bf16 as autocast
# keeps them, the MLP's fc output and the logits are rounded before fp32 kernels too (GELU or
# SwiGLU, the loss), more such steps: measured <= 5.4e-5 in the losses (TP 2 x CP 2 with SP in
# context_parallel.sh; <= 2.5e-5 elsewhere) and still 2.9e-3 in the parameters. So bf16 layouts
# must agree to 1e-4 in the losses and 5e-3 in the parameters. A wrong split or a missing
# reduction moves the losses by 1e-3 or more, in either precision.
source "$(dirname "${BASH_SOURCE[0]}")/../cli/common.sh"

# LAYERS and BATCH (the global batch of the next run_layout) may be set by the caller; the serial
# run of each batch size is made once.
PRECISION=${PRECISION:-fp32}
# --peak-gflops: MFU plays no part here, and measuring the GEMM peak was most of a tiny run's time.
args=(--steps 5 --val-every 0 --layers "${LAYERS:-2}" --dim 64 --heads 4 --seq-len 32 --vocab 300
  --precision "$PRECISION" --peak-gflops 100)
if [ "$PRECISION" = bf16 ]; then
  LOSS_RTOL=1e-4 PARAM_RTOL=5e-3
  refusal=$("$TRAIN" --precision bf16 --steps 1 --val-every 0 --layers 1 --dim 32 --heads 2 2>&1 |
    grep -m1 '^error: --precision bf16 needs native bf16')
  if [ -n "$refusal" ]; then
    echo "skipped: $refusal"
    exit 77
  fi
else
  LOSS_RTOL=1e-5 PARAM_RTOL=1e-4
fi

serial() {  # serial B: the serial run with --batch B, once
  [ -f "$WORK/serial_$1.bin" ] && return 0
  OMP_NUM_THREADS=1 "$TRAIN" "${args[@]}" --batch "$1" --save-llmc "$WORK/serial_$1.bin" \
    >"$WORK/serial_$1.log" 2>&1 || { cat "$WORK/serial_$1.log"; return 1; }
}

compare() {  # compare NAME B: checks $WORK/NAME.{log,bin} against the serial run of batch B
  compare_runs "$WORK/serial_$2.log" "$WORK/$1.log"
}

compare_runs() {  # compare_runs A.log B.log: B's losses and parameters against A's
  "$PY" - "$1" "$2" "${1%.log}.bin" "${2%.log}.bin" "$LOSS_RTOL" "$PARAM_RTOL" <<'PYEOF'
import re, sys
import numpy as np
def losses(p):
    text = open(p).read()
    return [float(m.group(1)) for m in re.finditer(r"^step \d+/\d+ \| loss ([0-9.]+)", text, re.M)]
a, b = losses(sys.argv[1]), losses(sys.argv[2])
loss_rtol, param_rtol = float(sys.argv[5]), float(sys.argv[6])
assert len(a) == 5 and len(b) == 5, f"expected 5 losses, got {a} and {b}"
worst = max(abs(x - y) / abs(x) for x, y in zip(a, b))
assert worst <= loss_rtol, f"losses differ by {worst:.2e} relative: {a} vs {b}"
pa = np.fromfile(sys.argv[3], dtype=np.float32, offset=1024)
pb = np.fromfile(sys.argv[4], dtype=np.float32, offset=1024)
assert pa.shape == pb.shape, (pa.shape, pb.shape)
err = float(np.abs(pa - pb).max() / np.abs(pa).max())
assert err <= param_rtol, f"final parameters differ by {err:.2e} of their scale"
print(f"  losses within {worst:.1e}, parameters within {err:.1e}")
PYEOF
}

same_bits() {  # same_bits LOG_A LOG_B WHAT: their final parameters are byte-identical
  if cmp -s "${1%.log}.bin" "${2%.log}.bin"; then ok "$3: final parameters bit-identical"; else
    bad "$3 changed the final parameters"; fi
}

run_layout() {  # run_layout TP DP [extra flags...]; a --pp P or --cp N among them multiplies
  # the ranks. Sets LAST_LOG to the run's log (its parameters are ${LAST_LOG%.log}.bin).
  local tp=$1 dp=$2
  shift 2
  local name="tp${tp}_dp${dp}${*// /}" pp=1 cp=1 prev=
  for a in "$@"; do
    [ "$prev" = --pp ] && pp=$a
    [ "$prev" = --cp ] && cp=$a
    prev=$a
  done
  local n=$((tp * dp * pp * cp)) batch=${BATCH:-8}
  [ "$batch" = 8 ] || name="${name}_b$batch"
  [ -z "${TAG:-}" ] || name="${name}_$TAG"  # TAG tells apart runs of the same flags
  LAST_LOG="$WORK/$name.log"
  # NODES=N: the ranks in N blocks of consecutive ranks posing as N hosts (MPIFORMER_TEST_HOST).
  local program=("$TRAIN" "${args[@]}" --batch "$batch" --tp "$tp" "$@" --save-llmc "$WORK/$name.bin")
  local launch=(-n "$n" "${program[@]}") h
  if [ "${NODES:-1}" -gt 1 ]; then
    launch=()
    for ((h = 0; h < NODES; h++)); do
      [ $h -eq 0 ] || launch+=(:)
      launch+=(-n $((n / NODES)) env MPIFORMER_TEST_HOST=node$h "${program[@]}")
    done
  fi
  if serial "$batch" && OMP_NUM_THREADS=1 timeout 300 "$MPIEXEC" "${launch[@]}" \
    >"$WORK/$name.log" 2>&1 && compare "$name" "$batch"; then
    ok "tp $tp x dp $dp $* (batch $batch, $PRECISION${TAG:+, $TAG}) = serial"
  else
    bad "tp $tp x dp $dp $*"; tail -5 "$WORK/$name.log"
  fi
}

