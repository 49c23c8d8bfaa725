#!/usr/bin/env bash
# DESIGN.md invariant 3: every layout reproduces the serial run. For each (tp, dp) with
# tp·dp <= 4, plain, with ZeRO-1, with the gradient reduction overlapped in small buckets, and both,
# and with tp > 1 also with sequence parallelism; gradient accumulation over microbatches with
# both schedules; and one 8-rank layout. Five steps of a tiny model from the same seed must give the serial
# run's losses and, after the last update, its parameters.
#
# Tolerance, and why: a layout changes only the order of floating-point sums (row-parallel partial
# products and the vocab-parallel softmax summed by all-reduce under TP, gradients summed over DP
# ranks), each a ~1e-7 relative rounding difference. Through five AdamW steps that stays ~1e-7 in
# the loss, so losses must agree to 1e-5 relative. Adam divides by √v, so an element whose
# gradient is near zero turns rounding noise into an update of up to ~lr: parameters must agree to
# 1e-4 of the largest parameter (measured: <= 1.4e-5), while a wrong split, a missing all-reduce
# or a doubled bias moves them by 1e-2 or more.
source "$(dirname "$0")/../cli/common.sh"

args=(--steps 5 --val-every 0 --layers 2 --dim 64 --heads 4 --batch 8 --seq-len 32 --vocab 300)
OMP_NUM_THREADS=1 "$TRAIN" "${args[@]}" --save-llmc "$WORK/serial.bin" >"$WORK/serial.log" 2>&1 ||
  { cat "$WORK/serial.log"; bad "serial run"; finish; exit 1; }

compare() {  # compare NAME: checks $WORK/NAME.{log,bin} against the serial run
  "$PY" - "$WORK/serial.log" "$WORK/$1.log" "$WORK/serial.bin" "$WORK/$1.bin" <<'PYEOF'
import re, sys
import numpy as np
def losses(p):
    text = open(p).read()
    return [float(m.group(1)) for m in re.finditer(r"^step \d+/\d+ \| loss ([0-9.]+)", text, re.M)]
a, b = losses(sys.argv[1]), losses(sys.argv[2])
assert len(a) == 5 and len(b) == 5, f"expected 5 losses, got {a} and {b}"
worst = max(abs(x - y) / abs(x) for x, y in zip(a, b))
assert worst <= 1e-5, f"losses differ by {worst:.2e} relative: {a} vs {b}"
pa = np.fromfile(sys.argv[3], dtype=np.float32, offset=1024)
pb = np.fromfile(sys.argv[4], dtype=np.float32, offset=1024)
assert pa.shape == pb.shape, (pa.shape, pb.shape)
err = float(np.abs(pa - pb).max() / np.abs(pa).max())
assert err <= 1e-4, f"final parameters differ by {err:.2e} of their scale"
print(f"  losses within {worst:.1e}, parameters within {err:.1e}")
PYEOF
}

run_layout() {  # run_layout TP DP [extra flags...]
  local tp=$1 dp=$2
  shift 2
  local name="tp${tp}_dp${dp}${*// /}"
  local n=$((tp * dp))
  if OMP_NUM_THREADS=1 timeout 300 "$MPIEXEC" -n "$n" "$TRAIN" "${args[@]}" --tp "$tp" "$@" \
    --save-llmc "$WORK/$name.bin" >"$WORK/$name.log" 2>&1 && compare "$name"; then
    ok "tp $tp x dp $dp $* = serial"
  else
    bad "tp $tp x dp $dp $*"; tail -5 "$WORK/$name.log"
  fi
}

# Buckets of 0.05 MB cut this model's gradients into a dozen pieces that become ready at different
# points of the backward.
for layout in "1 2" "2 1" "2 2" "4 1" "1 4"; do
  run_layout $layout
  run_layout $layout --zero 1
  run_layout $layout --overlap-grad-reduce --dp-bucket-mb 0.05
  run_layout $layout --zero 1 --overlap-grad-reduce --dp-bucket-mb 0.05
  if [ "${layout%% *}" -gt 1 ]; then
    run_layout $layout --sequence-parallel
    run_layout $layout --sequence-parallel --zero 1 --overlap-grad-reduce --dp-bucket-mb 0.05
  fi
done
# Gradient accumulation over microbatches, run by the schedule loops, on one rank and combined.
run_layout 1 1 --microbatches 4
run_layout 1 1 --microbatches 4 --schedule afab
run_layout 2 1 --microbatches 4 --schedule afab
run_layout 2 2 --microbatches 2 --sequence-parallel --zero 1 --overlap-grad-reduce --dp-bucket-mb 0.05
# 8 ranks are oversubscribed on 2 cores (~25 ms a collective): one layout only.
OMP_WAIT_POLICY=PASSIVE run_layout 2 4 --sequence-parallel --zero 1 --overlap-grad-reduce \
  --dp-bucket-mb 0.05
finish
