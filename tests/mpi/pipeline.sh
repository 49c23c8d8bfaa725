#!/usr/bin/env bash
# Pipeline parallel reproduces the serial run (docs/design.md, invariant 3; serial_reference.sh says
# within what, and why): every schedule on 2, 3 and 4 stages, interleaved with M in {P, P+1, 2P+1}
# (M not a multiple of P included), the zero-bubble schedules with M = P, M > P and M not a
# multiple of P, even and uneven layer splits, combined with TP, SP, DP, ZeRO and overlapped
# gradient buckets, full and selective recomputation, and two 8-rank layouts. An 8-block model, so 4 stages x 2
# chunks have a block each. Then the bits that must not move (a deferred W, recomputation), each
# stage's peak activations against what its schedule keeps, and random (schedule, P, V, M) steps
# that must finish within a timeout (no deadlock).
LAYERS=8
source "$(dirname "$0")/serial_reference.sh"
# In bf16 (mpi_pipeline_bf16) each schedule runs once, with TP and SP, DP with ZeRO and overlapped
# buckets, and recomputation among them; the sweep of stage counts, uneven splits and M against P
# is the fp32 run's: the schedules' loops and tables are the same code in either precision, and
# only the kernels' products round differently.
sweep() {
  [ "$PRECISION" = fp32 ] || return 0
  run_layout "$@"
}

# ---- 2 stages ----
run_layout 1 1 --pp 2 --microbatches 2
pp2_log=$LAST_LOG
run_layout 1 1 --pp 2 --microbatches 4 --schedule afab
afab_log=$LAST_LOG
run_layout 1 1 --pp 2 --microbatches 4 --schedule afab --recompute
afab_recompute_log=$LAST_LOG
sweep 1 1 --pp 2 --microbatches 4 --pp-layout 5,3
sweep 1 1 --pp 2 --microbatches 1
run_layout 1 1 --pp 2 --schedule interleaved --virtual-stages 2 --microbatches 2
BATCH=6 sweep 1 1 --pp 2 --schedule interleaved --virtual-stages 2 --microbatches 3
BATCH=10 sweep 1 1 --pp 2 --schedule interleaved --virtual-stages 2 --microbatches 5 \
  --pp-layout 3,1,2,2
sweep 1 1 --pp 2 --schedule interleaved --virtual-stages 4 --microbatches 4
# ---- 3 and 4 stages ----
BATCH=6 sweep 1 1 --pp 3 --microbatches 3
sweep 1 1 --pp 4 --microbatches 4
pp4_1f1b=$LAST_LOG
sweep 1 1 --pp 4 --microbatches 8 --schedule afab
pp4_afab=$LAST_LOG
sweep 1 1 --pp 4 --schedule interleaved --virtual-stages 2 --microbatches 4
BATCH=10 sweep 1 1 --pp 4 --schedule interleaved --virtual-stages 2 --microbatches 5
BATCH=9 sweep 1 1 --pp 4 --schedule interleaved --virtual-stages 2 --microbatches 9
# ---- combined with tensor and data parallel ----
run_layout 2 1 --pp 2 --microbatches 4 --sequence-parallel
tp2_sp_log=$LAST_LOG
run_layout 2 1 --pp 2 --microbatches 4 --sequence-parallel --recompute selective
tp2_sp_selective_log=$LAST_LOG
BATCH=6 sweep 2 1 --pp 2 --schedule interleaved --virtual-stages 2 --microbatches 3 \
  --sequence-parallel
run_layout 1 2 --pp 2 --microbatches 2 --zero 1 --overlap-grad-reduce --dp-bucket-mb 0.05
sweep 1 2 --pp 2 --schedule interleaved --virtual-stages 2 --microbatches 2 \
  --overlap-grad-reduce --dp-bucket-mb 0.05
# 8 ranks are oversubscribed on 2 cores (~25 ms a collective): two layouts only.
OMP_WAIT_POLICY=PASSIVE sweep 2 2 --pp 2 --schedule interleaved --virtual-stages 2 \
  --microbatches 2 --sequence-parallel --zero 1 --overlap-grad-reduce --dp-bucket-mb 0.05
OMP_WAIT_POLICY=PASSIVE sweep 2 1 --pp 4 --microbatches 4 --pp-layout 1,3,2,2

# ---- the zero-bubble schedules (W deferred into the bubbles) ----
run_layout 1 1 --pp 2 --microbatches 4 --schedule 1f1b
f1b1_log=$LAST_LOG
run_layout 1 1 --pp 2 --microbatches 4 --schedule 1f1b --recompute selective
f1b1_selective_log=$LAST_LOG
sweep 1 1 --pp 2 --microbatches 2 --schedule zb-h1
run_layout 1 1 --pp 2 --microbatches 4 --schedule zb-h1
zbh1_log=$LAST_LOG
sweep 1 1 --pp 3 --microbatches 4 --schedule zb-h1
sweep 1 1 --pp 4 --microbatches 8 --schedule zb-h1
pp4_zbh1=$LAST_LOG
sweep 2 1 --pp 2 --microbatches 4 --schedule zb-h1 --sequence-parallel
BATCH=6 sweep 1 2 --pp 2 --microbatches 3 --schedule zb-h1 --zero 1 --overlap-grad-reduce \
  --dp-bucket-mb 0.05
run_layout 1 1 --pp 2 --microbatches 4 --schedule zb-h1 --recompute
zbh1_recompute_log=$LAST_LOG
run_layout 1 1 --pp 2 --microbatches 4 --schedule zb-h1 --recompute selective
zbh1_selective_log=$LAST_LOG
BATCH=6 sweep 1 1 --pp 3 --microbatches 3 --schedule zb-h2
BATCH=10 sweep 1 1 --pp 2 --microbatches 5 --schedule zb-h2 --pp-layout 5,3
sweep 1 1 --pp 4 --microbatches 8 --schedule zb-h2
pp4_zbh2=$LAST_LOG
run_layout 2 1 --pp 2 --microbatches 4 --schedule zb-h2 --sequence-parallel --recompute
BATCH=6 sweep 1 2 --pp 2 --microbatches 3 --schedule zb-h2 --zero 1 --overlap-grad-reduce \
  --dp-bucket-mb 0.05
run_layout 1 1 --pp 2 --microbatches 2 --schedule zb-v
BATCH=10 sweep 1 1 --pp 3 --microbatches 5 --schedule zb-v
sweep 1 1 --pp 4 --microbatches 8 --schedule zb-v
pp4_zbv=$LAST_LOG
sweep 2 1 --pp 2 --microbatches 4 --schedule zb-v --sequence-parallel
sweep 1 2 --pp 2 --microbatches 2 --schedule zb-v --zero 1 --overlap-grad-reduce \
  --dp-bucket-mb 0.05
BATCH=6 sweep 1 1 --pp 2 --microbatches 3 --schedule zb-v --recompute --pp-layout 3,1,2,2
run_layout 1 1 --pp 2 --microbatches 4 --schedule zb-auto
BATCH=6 sweep 1 1 --pp 3 --microbatches 3 --schedule zb-auto --max-in-flight 4
sweep 1 1 --pp 2 --microbatches 4 --schedule zb-auto --virtual-stages 2
BATCH=6 sweep 2 1 --pp 2 --microbatches 3 --schedule zb-auto --sequence-parallel
BATCH=10 sweep 1 1 --pp 4 --microbatches 5 --schedule zb-auto --recompute
sweep 1 2 --pp 2 --microbatches 4 --schedule zb-auto --max-in-flight 1 --zero 1 \
  --overlap-grad-reduce --dp-bucket-mb 0.05
zbauto_limited=$LAST_LOG
# ZeRO-2 and ZeRO-3 (optim/sharded_blocks.hpp): each stage's blocks sharded over its DP group, a
# block gathered and its gradients reduced in the schedule's order of F, B and (deferred) W.
OMP_WAIT_POLICY=PASSIVE run_layout 1 2 --pp 2 --microbatches 2 --zero 3
OMP_WAIT_POLICY=PASSIVE run_layout 1 2 --pp 2 --microbatches 4 --schedule zb-h1 --zero 2
OMP_WAIT_POLICY=PASSIVE sweep 1 2 --pp 2 --schedule interleaved --virtual-stages 2 \
  --microbatches 2 --zero 3
OMP_WAIT_POLICY=PASSIVE sweep 1 2 --pp 2 --microbatches 2 --schedule zb-v --zero 3

# ---- bits that must not move ----
# A deferred W only moves in time: each microbatch's weight gradients still add up in the same
# order, so zb-h1 computes 1F1B's bits.
same_bits "$f1b1_log" "$zbh1_log" "zb-h1 (W deferred) vs 1f1b"
same_bits "$zbh1_log" "$zbh1_recompute_log" "zb-h1 --recompute (B keeps what W reads)"
# Selective recomputation forms the norms' and GELU's outputs again with the forward's kernels:
# W with B (1f1b), W deferred (zb-h1: W forms them from the set kept until then), and TP 2 + SP
# (the norms' outputs gathered again).
same_bits "$f1b1_log" "$f1b1_selective_log" "1f1b --recompute selective"
same_bits "$zbh1_log" "$zbh1_selective_log" "zb-h1 --recompute selective (W deferred)"
same_bits "$tp2_sp_log" "$tp2_sp_selective_log" "tp 2 + sp x pp 2 --recompute selective"

# ---- full recomputation: the same numbers bit for bit (a block's forward is deterministic), a
# fraction of the activations ----
mb_of() { sed -nE "s/^stage $2 \| peak in flight [0-9.]+ microbatches, ([0-9.]+) MB.*/\1/p" "$1"; }
if cmp -s "${afab_log%.log}.bin" "${afab_recompute_log%.log}.bin"; then
  ok "--recompute: final parameters bit-identical to storing activations"
else
  bad "--recompute changed the final parameters"
fi
# A GPT-2 block keeps 16 C floats a row (ln1, qkv, atty, residual2, ln2, fch, its GELU, its
# output) and under recomputation only its output; what W waits for and the head's logits stay,
# so the whole stage keeps under half.
if "$PY" -c "import sys; a, b = map(float, sys.argv[1:]); sys.exit(0 if b < a / 2 else 1)" \
  "$(mb_of "$afab_log" 0)" "$(mb_of "$afab_recompute_log" 0)"; then
  ok "--recompute: stage 0 keeps $(mb_of "$afab_recompute_log" 0) MB instead of $(mb_of "$afab_log" 0)"
else
  bad "--recompute: stage 0 keeps $(mb_of "$afab_recompute_log" 0) MB vs $(mb_of "$afab_log" 0)"
fi
BATCH=6 sweep 2 1 --pp 2 --schedule interleaved --virtual-stages 2 --microbatches 3 \
  --sequence-parallel --recompute

# ---- activation lifetime: stage r of 1F1B keeps at most P - r microbatches, AFAB all M, zb-h1 P
# on every stage (r of them waiting for their W), zb-h2 2P - 1, zb-v at most P (two half-stage
# chunks make a microbatch). The bytes: that many microbatches' activations, and what waits for W.
check_peaks() {  # check_peaks LOG SCHEDULE P M
  "$PY" - "$@" <<'PYEOF'
import re, sys
log, sched, P, M = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4])
lines = re.findall(r"^stage (\d+) \| peak in flight ([0-9.]+) microbatches, ([0-9.]+) MB \(a microbatch: "
                   r"([0-9.]+) MB activations \+ ([0-9.]+) MB kept for W\)", open(log).read(), re.M)
peaks = {int(s): (float(n), float(mb), float(a), float(w)) for s, n, mb, a, w in lines}
assert sorted(peaks) == list(range(P)), f"expected a peak line per stage, got {peaks}"
for r, (n, mb, a, w) in peaks.items():
    want = {"1f1b": min(P - r, M), "afab": M, "zb-h1": min(P, M), "zb-h2": min(2 * P - 1, M)}.get(sched)
    if want is None:  # zb-v: a bound; zb-auto:N: --max-in-flight N, every step (the first too)
        bound = int(sched.split(":")[1]) if sched.startswith("zb-auto:") else min(P, M)
        assert n <= bound, f"stage {r}: {n} microbatches in flight, above {sched}'s {bound}"
    else:
        assert n == want, f"stage {r}: {n} microbatches in flight, expected {want} for {sched}"
    # The activations of n microbatches plus at most n W sets, at least one (B keeps it until W);
    # the log rounds each figure to 0.1 MB, an error n times over in the products.
    slack = 0.05 * (2 * n + 1)
    assert n * a + w - slack <= mb <= n * (a + w) + slack, f"stage {r}: {mb} MB for {n} x ({a} + {w})"
print("  peaks " + ", ".join(f"stage {r}: {peaks[r][0]:g} ({peaks[r][1]:g} MB)" for r in sorted(peaks)))
PYEOF
}
if [ "$PRECISION" = fp32 ]; then  # the peaks are the schedule's, in either precision
check_peaks "$pp4_1f1b" 1f1b 4 4 && ok "1f1b on 4 stages keeps P - rank microbatches" ||
  bad "1f1b peak activations"
check_peaks "$pp4_afab" afab 4 8 && ok "afab on 4 stages keeps all 8 microbatches" ||
  bad "afab peak activations"
check_peaks "$pp4_zbh1" zb-h1 4 8 && ok "zb-h1 on 4 stages keeps P microbatches on every stage" ||
  bad "zb-h1 peak activations"
check_peaks "$pp4_zbh2" zb-h2 4 8 && ok "zb-h2 on 4 stages keeps 2P - 1 microbatches" ||
  bad "zb-h2 peak activations"
check_peaks "$pp4_zbv" zb-v 4 8 && ok "zb-v on 4 stages keeps at most P microbatches" ||
  bad "zb-v peak activations"
check_peaks "$zbauto_limited" zb-auto:1 2 4 && ok "zb-auto keeps to --max-in-flight 1" ||
  bad "zb-auto over its --max-in-flight"
fi

# --p2p-dtype bf16 (pipeline/p2p.hpp): activations and their gradients cross between stages as
# bf16, so the fp32 residual stream is rounded once at each stage's edge each way, another sparse
# bf16 step like the products' (serial_reference.sh): within the bf16 tolerances of the serial
# run, and not the fp32 messages' bits (it is on). Interleaved through staged host copies too.
if [ "$PRECISION" = bf16 ]; then
  run_layout 1 1 --pp 2 --microbatches 2 --p2p-dtype bf16
  if cmp -s "${pp2_log%.log}.bin" "${LAST_LOG%.log}.bin"; then
    bad "--p2p-dtype bf16 left the fp32 messages' parameters as they were"
  else ok "--p2p-dtype bf16 changes the bits (the messages are rounded)"; fi
  run_layout 1 1 --pp 2 --schedule interleaved --virtual-stages 2 --microbatches 2 \
    --p2p-dtype bf16 --gpu-aware-mpi no
  # Under full recomputation a chunk's output is then lent to the scratch until its send, right
  # after the forward (ChunkPieces::lent_output): the same bits as keeping every output, in the
  # classic loops and in tables (zb-v: a rank with the head's chunk and one that lends).
  for schedule in "--microbatches 4" "--schedule interleaved --virtual-stages 2 --microbatches 4" \
    "--schedule zb-v --microbatches 4"; do
    # shellcheck disable=SC2086
    run_layout 1 1 --pp 2 $schedule --p2p-dtype bf16
    kept_log=$LAST_LOG
    # shellcheck disable=SC2086
    run_layout 1 1 --pp 2 $schedule --p2p-dtype bf16 --recompute
    same_bits "$kept_log" "$LAST_LOG" "--p2p-dtype bf16 --recompute ($schedule: outputs lent)"
  done
fi

# The rest runs in fp32 whatever PRECISION says (none of it passes --precision): the bf16
# variant of this test leaves it to the fp32 one.
if [ "$PRECISION" != fp32 ]; then
  finish
  exit
fi
# ---- validation runs the forward passes through the pipeline: the same val losses as serial
# (one stage with two chunks too, whose chunk 0 sends to its own rank) ----
val_losses() { sed -nE 's/^val step [0-9]+ \| loss ([0-9.]+)/\1/p' "$1" | tr '\n' ' '; }
val=(--steps 2 --val-every 2 --val-steps 2 --layers 8 --dim 64 --heads 4 --seq-len 32 --vocab 300
  --batch 8)
OMP_NUM_THREADS=1 "$TRAIN" "${val[@]}" >"$WORK/val_serial.log" 2>&1
for layout in "2 --pp 2 --schedule interleaved --virtual-stages 2 --microbatches 2" \
  "1 --schedule interleaved --virtual-stages 2 --microbatches 2" \
  "2 --pp 2 --schedule zb-v --microbatches 2"; do
  read -r n flags <<<"$layout"
  # shellcheck disable=SC2086
  OMP_NUM_THREADS=1 timeout 120 "$MPIEXEC" -n "$n" "$TRAIN" "${val[@]}" $flags \
    >"$WORK/val.log" 2>&1
  if "$PY" -c "
import sys
a, b = [list(map(float, x.split())) for x in sys.argv[1:]]
assert len(a) == 2 and len(b) == 2, (a, b)
assert max(abs(x - y) / x for x, y in zip(a, b)) <= 1e-5, (a, b)" \
    "$(val_losses "$WORK/val_serial.log")" "$(val_losses "$WORK/val.log")"; then
    ok "validation through $flags = serial ($(val_losses "$WORK/val.log"))"
  else
    bad "validation through $flags: '$(val_losses "$WORK/val.log")' vs serial"
    tail -3 "$WORK/val.log"
  fi
done

# ---- --trace: the measured timeline of the last step, per rank ----
if OMP_NUM_THREADS=1 timeout 120 "$MPIEXEC" -n 2 "$TRAIN" "${args[@]}" --batch 8 --pp 2 \
  --microbatches 4 --trace "$WORK/trace.json" >"$WORK/trace.log" 2>&1 &&
  "$PY" - "$WORK/trace.json" <<'PYEOF'
import json, sys
events = [e for e in json.load(open(sys.argv[1]))["traceEvents"] if e["ph"] == "X"]
for rank in (0, 1):
    mine = sorted((e for e in events if e["tid"] == rank), key=lambda e: e["ts"])
    cats = [e["cat"] for e in mine]
    assert cats.count("F") == 4 and cats.count("B") == 4 and cats.count("W") == 4, (rank, cats)
    # Each microbatch's W after its B.
    for mb in range(4):
        at = lambda op: min(e["ts"] for e in mine if e["name"] == f"{op}{mb}.c0")
        assert at("B") < at("W"), (rank, mb)
    assert "comm" in cats and cats[-1] == "optimizer", (rank, cats)
    for a, b in zip(mine, mine[1:]):  # one rank runs one op at a time
        assert a["ts"] + a["dur"] <= b["ts"] + 1e-3, (rank, a, b)
# Stage 1 cannot start before stage 0 has sent it microbatch 0.
f0 = lambda r: min(e["ts"] for e in events if e["tid"] == r and e["name"] == "F0.c0")
assert f0(1) > f0(0), (f0(0), f0(1))
print(f"  {len(events)} events on 2 ranks")
PYEOF
then
  ok "--trace: every rank's F, B, W, P2P and optimizer of the last step, in order"
else
  bad "--trace"; tail -3 "$WORK/trace.log"
fi

# ---- no deadlock: random valid shapes, two steps each, under a timeout ----
seed=${PIPELINE_SEED:-$RANDOM}
echo "random shapes from seed $seed (PIPELINE_SEED=$seed reproduces them)"
RANDOM=$seed
for i in 1 2 3 4 5 6; do
  P=$((RANDOM % 2 == 0 ? 2 : 4))
  case $((RANDOM % 7)) in
    0) sched=afab V=1 ;;
    1) sched=1f1b V=1 ;;
    2) sched=interleaved V=$((8 / P > 2 && RANDOM % 2 == 0 ? 4 : 2)) ;;
    3) sched=zb-h1 V=1 ;;
    4) sched=zb-h2 V=1 ;;
    5) sched=zb-v V=2 ;;
    *) sched=zb-auto V=$((1 + RANDOM % 2)) ;;
  esac
  M=$((P + RANDOM % (2 * P + 2)))
  [ "$sched" = interleaved ] || M=$((1 + RANDOM % 9))
  # Three steps: zb-auto plans from the second.
  if OMP_NUM_THREADS=1 timeout 120 "$MPIEXEC" -n "$P" "$TRAIN" --steps 3 --val-every 0 --layers 8 \
    --dim 64 --heads 4 --seq-len 32 --vocab 300 --batch "$M" --microbatches "$M" --pp "$P" \
    --schedule "$sched" --virtual-stages "$V" >"$WORK/random$i.log" 2>&1; then
    ok "no deadlock: $sched pp $P virtual stages $V microbatches $M"
  else
    bad "$sched pp $P virtual stages $V microbatches $M (exit $?)"; tail -3 "$WORK/random$i.log"
  fi
done
finish
