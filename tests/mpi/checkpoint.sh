#!/usr/bin/env bash
# A run cut off and resumed is the same run. Same layout: bit for bit (every logged loss, lr and
# gradient norm, and the final parameters and optimizer state), whether it stopped at --steps k or
# on a signal to one non-zero rank mid-run. Another layout (saved on tp 2 x pp 2 interleaved,
# resumed on dp 2 with ZeRO-1 or ZeRO-3, on pp 2 with another --pp-layout, on one rank): the serial
# run within the layout tests' tolerances (serial_reference.sh says why). Across ZeRO stages: a
# ZeRO-3 run cut and resumed is bit for bit, and ZeRO-3's checkpoints resume under ZeRO-1 on
# another layout, and the reverse; so do those of --zero-group node (HSDP, 2 hosts posed by
# MPIFORMER_TEST_HOST), whose shards' first copies alone write. Faults end the job: a rank
# killed with SIGKILL ends a 4-rank job within 30 s, and a resume loses only the steps after the
# last checkpoint; a rank stopped with SIGSTOP trips the others' --step-timeout watchdogs. Rank 0
# then prints where each rank was, a line per rank, for a rank stopped, a hang in a P2P call and
# one in a collective (MPIFORMER_TEST_HANG); SIGUSR2 prints that table mid-run and changes no
# step.
source "$(dirname "$0")/../cli/common.sh"

export OMP_NUM_THREADS=1
now() { date +%s.%N; }
elapsed() { awk -v a="$1" -v b="$(now)" 'BEGIN { printf "%.1f", b - a }'; }
same() {  # same NAME FILE_A FILE_B
  if cmp -s "$2" "$3"; then ok "$1"; else bad "$1 ($2 and $3 differ)"; fi
}

# ---- 1. Same layout, stopped by --steps k: dp 2 with ZeRO-1 (optimizer state in DP shards) ----
small=(--val-every 0 --layers 2 --dim 64 --heads 4 --seq-len 32 --batch 8 --dp 2 --zero 1)
"$MPIEXEC" -n 2 "$TRAIN" "${small[@]}" --steps 8 --save "$WORK/full" --save-llmc "$WORK/full.bin" \
  >"$WORK/full.log" 2>&1
"$MPIEXEC" -n 2 "$TRAIN" "${small[@]}" --steps 3 --lr-decay-steps 8 --save "$WORK/cut" \
  >"$WORK/cut1.log" 2>&1
"$MPIEXEC" -n 2 "$TRAIN" "${small[@]}" --steps 8 --load "$WORK/cut" --save "$WORK/cut" \
  --save-llmc "$WORK/cut.bin" >"$WORK/cut2.log" 2>&1
if [ "$(numbers "$WORK/full.log")" = "$(numbers "$WORK/cut1.log" "$WORK/cut2.log")" ] &&
  [ "$(numbers "$WORK/full.log" | wc -l)" -eq 8 ]; then
  ok "--steps 3 then --load: the 8 steps' losses, lrs and norms are the uninterrupted run's"
else
  bad "--steps 3 then --load: the steps differ"
  diff <(numbers "$WORK/full.log") <(numbers "$WORK/cut1.log" "$WORK/cut2.log")
fi
if grep -q '^resumed: .*cut/step_00000003, step 3 of 8' "$WORK/cut2.log"; then
  ok "the banner says where it resumed"
else
  bad "no 'resumed: ... step 3 of 8' line"
fi
same "final parameters bit-identical" "$WORK/full.bin" "$WORK/cut.bin"
for f in model optimizer state; do
  ext=bin; [ $f = state ] && ext=txt
  same "final checkpoint's $f file bit-identical" "$WORK/full/step_00000008/${f}_00000008.$ext" \
    "$WORK/cut/step_00000008/${f}_00000008.$ext"
done
# The model file is llm.c's: --init-from reads it as it is.
"$TRAIN" --init-from "$WORK/cut/step_00000008/model_00000008.bin" --steps 1 --val-every 0 \
  --seq-len 32 --batch 8 >"$WORK/init.log" 2>&1 && ok "--init-from reads a checkpoint's model file" ||
  { bad "--init-from of a checkpoint's model file"; tail -3 "$WORK/init.log"; }

# ---- 1b. Across ZeRO stages: ZeRO-3 (each block's parameters kept by its shard's owner alone)
# writes and reads the same files. Cut and resumed under ZeRO-3: bit for bit. Its step-3
# checkpoint resumed under ZeRO-1 on tp 2 x dp 2, and section 1's ZeRO-1 one under ZeRO-3 on
# tp 2 x dp 2: section 1's ZeRO-1 run within the layout tests' tolerances. ----
z3=("${small[@]:0:${#small[@]}-1}" 3)  # small's flags, ending --zero 1, with --zero 3
"$MPIEXEC" -n 2 "$TRAIN" "${z3[@]}" --steps 8 --save-llmc "$WORK/z3full.bin" >"$WORK/z3full.log" 2>&1
"$MPIEXEC" -n 2 "$TRAIN" "${z3[@]}" --steps 3 --lr-decay-steps 8 --save "$WORK/z3" \
  >"$WORK/z3cut1.log" 2>&1
cp -r "$WORK/z3" "$WORK/z3_to_z1"
"$MPIEXEC" -n 2 "$TRAIN" "${z3[@]}" --steps 8 --load "$WORK/z3" --save-llmc "$WORK/z3cut.bin" \
  >"$WORK/z3cut2.log" 2>&1
if [ "$(numbers "$WORK/z3full.log")" = "$(numbers "$WORK/z3cut1.log" "$WORK/z3cut2.log")" ] &&
  [ "$(numbers "$WORK/z3full.log" | wc -l)" -eq 8 ]; then
  ok "--zero 3: --steps 3 then --load gives the uninterrupted run's 8 steps"
else
  bad "--zero 3: --steps 3 then --load: the steps differ"
fi
same "--zero 3: final parameters bit-identical" "$WORK/z3full.bin" "$WORK/z3cut.bin"
across_zero() {  # across_zero NAME LOG BIN: steps 4-8 and the final parameters against full.log
  if "$PY" - "$WORK/full.log" "$2" "$WORK/full.bin" "$3" <<'PYEOF'; then
import re, sys
import numpy as np
def losses(p):
    return [float(m.group(1)) for m in re.finditer(r"^step \d+/\d+ \| loss ([0-9.]+)", open(p).read(), re.M)]
a, b = losses(sys.argv[1])[3:], losses(sys.argv[2])
assert len(a) == 5 and len(b) == 5, (a, b)
worst = max(abs(x - y) / abs(x) for x, y in zip(a, b))
assert worst <= 1e-5, f"losses differ by {worst:.2e}: {a} vs {b}"
pa = np.fromfile(sys.argv[3], dtype=np.float32, offset=1024)
pb = np.fromfile(sys.argv[4], dtype=np.float32, offset=1024)
err = float(np.abs(pa - pb).max() / np.abs(pa).max())
assert err <= 1e-4, f"parameters differ by {err:.2e} of their scale"
print(f"  losses within {worst:.1e}, parameters within {err:.1e}")
PYEOF
    ok "$1"
  else
    bad "$1"; tail -3 "$2"
  fi
}
OMP_WAIT_POLICY=PASSIVE "$MPIEXEC" -n 4 "$TRAIN" "${small[@]}" --tp 2 --steps 8 \
  --load "$WORK/z3_to_z1" --save-llmc "$WORK/z3_to_z1.bin" >"$WORK/z3_to_z1.log" 2>&1
across_zero "saved under ZeRO-3 on dp 2, resumed under ZeRO-1 on tp 2 x dp 2" \
  "$WORK/z3_to_z1.log" "$WORK/z3_to_z1.bin"
OMP_WAIT_POLICY=PASSIVE "$MPIEXEC" -n 4 "$TRAIN" "${z3[@]}" --tp 2 --steps 8 --load "$WORK/cut" \
  --load-step 3 --save-llmc "$WORK/z1_to_z3.bin" >"$WORK/z1_to_z3.log" 2>&1
across_zero "saved under ZeRO-1 on dp 2, resumed under ZeRO-3 on tp 2 x dp 2" \
  "$WORK/z1_to_z3.log" "$WORK/z1_to_z3.bin"

# ---- 1c. --zero-group node (HSDP): DP 4 as two hosts of 2 ranks (MPIFORMER_TEST_HOST), each
# shard held on both; only the first host's copy writes it. Its step-3 checkpoint resumed under
# ZeRO-1 on dp 2, and section 1's resumed under HSDP with ZeRO-3: section 1's run within the
# layout tests' tolerances. ----
on_two_hosts() {  # on_two_hosts LOG FLAGS...: 4 ranks, 2 on each of hosts h0 and h1
  local log=$1
  shift
  OMP_WAIT_POLICY=PASSIVE "$MPIEXEC" -n 2 env MPIFORMER_TEST_HOST=h0 "$TRAIN" "$@" : \
    -n 2 env MPIFORMER_TEST_HOST=h1 "$TRAIN" "$@" >"$log" 2>&1
}
hsdp=(--val-every 0 --layers 2 --dim 64 --heads 4 --seq-len 32 --batch 8 --dp 4 --zero-group node)
on_two_hosts "$WORK/hsdp1.log" "${hsdp[@]}" --zero 1 --steps 3 --lr-decay-steps 8 \
  --save "$WORK/hsdp"
"$MPIEXEC" -n 2 "$TRAIN" "${small[@]}" --steps 8 --load "$WORK/hsdp" \
  --save-llmc "$WORK/hsdp_to_z1.bin" >"$WORK/hsdp_to_z1.log" 2>&1
across_zero "saved under ZeRO-1 within 2 hosts (--zero-group node), resumed under ZeRO-1 on dp 2" \
  "$WORK/hsdp_to_z1.log" "$WORK/hsdp_to_z1.bin"
on_two_hosts "$WORK/z1_to_hsdp.log" "${hsdp[@]}" --zero 3 --steps 8 --load "$WORK/cut" \
  --load-step 3 --save-llmc "$WORK/z1_to_hsdp.bin"
across_zero "saved under ZeRO-1 on dp 2, resumed under ZeRO-3 within 2 hosts (--zero-group node)" \
  "$WORK/z1_to_hsdp.log" "$WORK/z1_to_hsdp.bin"

# ---- 2. Same layout, stopped by SIGUSR1 to rank 1 mid-run (1F1B over 2 stages) ----
sig=(--val-every 0 --pp 2 --microbatches 2 --steps 60)
"$MPIEXEC" -n 2 "$TRAIN" "${sig[@]}" --save-llmc "$WORK/sig_ref.bin" >"$WORK/sig_ref.log" 2>&1
"$MPIEXEC" -n 2 "$TRAIN" "${sig[@]}" --save "$WORK/sig" >"$WORK/sig1.log" 2>&1 &
job=$!
if wait_for "$WORK/sig1.log" '^step 5/60' && pid=$(rank_pid "--save $WORK/sig" 1); then
  kill -USR1 "$pid"
fi
wait $job
status=$?
stopped=$(sed -nE 's/^SIGUSR1 received: stopped after step ([0-9]+);.*/\1/p' "$WORK/sig1.log")
if [ "$status" -eq 3 ] && [ -n "$stopped" ] && [ "$stopped" -lt 60 ] &&
  [ "$(cat "$WORK/sig/latest")" = "$(printf 'step_%08d' "$stopped")" ]; then
  ok "SIGUSR1 to rank 1: every rank stopped after step $stopped, saved it, exit status 3"
else
  bad "SIGUSR1 to rank 1: exit $status, stopped after '${stopped:-?}'"; tail -5 "$WORK/sig1.log"
fi
"$MPIEXEC" -n 2 "$TRAIN" "${sig[@]}" --load "$WORK/sig" --save "$WORK/sig" \
  --save-llmc "$WORK/sig.bin" >"$WORK/sig2.log" 2>&1
if [ "$(numbers "$WORK/sig_ref.log")" = "$(numbers "$WORK/sig1.log" "$WORK/sig2.log")" ]; then
  ok "signal, save, resume: all 60 steps equal the uninterrupted run's"
else
  bad "signal, save, resume: the steps differ"
  diff <(numbers "$WORK/sig_ref.log") <(numbers "$WORK/sig1.log" "$WORK/sig2.log") | head
fi
same "signal, save, resume: final parameters bit-identical" "$WORK/sig_ref.bin" "$WORK/sig.bin"

# A second signal ends a process at once, without saving (the launcher then ends the job). USR1
# then TERM, sent back to back: two different signals never merge while pending. (Signals within
# 5 s of the first are one request, tests/cli/stop_signals.sh; here that window is 0.)
MPIFORMER_STOP_SAME_REQUEST_S=0 "$MPIEXEC" -n 2 "$TRAIN" "${sig[@]}" --save "$WORK/sig2x" >"$WORK/sig2x.log" 2>&1 &
job=$!
if wait_for "$WORK/sig2x.log" '^step 3/60' && pid=$(rank_pid "--save $WORK/sig2x" 0); then
  kill -USR1 "$pid"
  kill -TERM "$pid"
fi
wait $job
status=$?
if [ "$status" -ne 0 ] && [ "$status" -ne 3 ] &&
  grep -q 'second stop signal: exiting now, without saving' "$WORK/sig2x.log" &&
  [ ! -e "$WORK/sig2x/latest" ]; then
  ok "a second stop signal exits at once, saving nothing (job status $status)"
else
  bad "a second stop signal: job status $status"; tail -3 "$WORK/sig2x.log"
fi

# ---- 3. Another layout: saved on tp 2 x pp 2 (interleaved, 2 chunks each), resumed elsewhere ----
big=(--val-every 0 --layers 8 --dim 64 --heads 4 --seq-len 32 --vocab 300 --batch 8)
"$TRAIN" "${big[@]}" --steps 6 --save-llmc "$WORK/serial.bin" >"$WORK/serial.log" 2>&1
OMP_WAIT_POLICY=PASSIVE "$MPIEXEC" -n 4 "$TRAIN" "${big[@]}" --steps 3 --lr-decay-steps 6 --tp 2 \
  --pp 2 --schedule interleaved --virtual-stages 2 --microbatches 2 --save "$WORK/x" \
  >"$WORK/x1.log" 2>&1 || { bad "the tp 2 x pp 2 run"; tail -3 "$WORK/x1.log"; }
compare_to_serial() {  # compare_to_serial LOG BIN: steps 1-3 of x1.log and 4-6 of LOG vs serial
  "$PY" - "$WORK/serial.log" "$WORK/x1.log" "$1" "$WORK/serial.bin" "$2" <<'PYEOF'
import re, sys
import numpy as np
def losses(*paths):
    return [float(m.group(1)) for p in paths
            for m in re.finditer(r"^step \d+/\d+ \| loss ([0-9.]+)", open(p).read(), re.M)]
a, b = losses(sys.argv[1]), losses(sys.argv[2], sys.argv[3])
assert len(a) == 6 and len(b) == 6, (a, b)
worst = max(abs(x - y) / abs(x) for x, y in zip(a, b))
assert worst <= 1e-5, f"losses differ by {worst:.2e}: {a} vs {b}"
pa = np.fromfile(sys.argv[4], dtype=np.float32, offset=1024)
pb = np.fromfile(sys.argv[5], dtype=np.float32, offset=1024)
err = float(np.abs(pa - pb).max() / np.abs(pa).max())
assert err <= 1e-4, f"parameters differ by {err:.2e} of their scale"
print(f"  losses within {worst:.1e}, parameters within {err:.1e}")
PYEOF
}
for layout in "2 --dp 2 --zero 1" "2 --dp 2 --zero 3" "2 --pp 2 --pp-layout 5,3 --microbatches 2" "1"; do
  read -r n flags <<<"$layout"
  name=$(tr -dc 'a-z0-9' <<<"$flags")
  cp -r "$WORK/x" "$WORK/x_$name"
  # shellcheck disable=SC2086
  if "$MPIEXEC" -n "$n" "$TRAIN" "${big[@]}" --steps 6 --load "$WORK/x_$name" $flags \
    --save-llmc "$WORK/x_$name.bin" >"$WORK/x_$name.log" 2>&1 &&
    compare_to_serial "$WORK/x_$name.log" "$WORK/x_$name.bin"; then
    ok "saved on tp 2 x pp 2 interleaved, resumed on $n rank(s) ${flags:-(serial)} = serial"
  else
    bad "resumed on $n rank(s) $flags"; tail -3 "$WORK/x_$name.log"
  fi
done

# ---- 4. SIGKILL of one rank mid-step ends a 4-rank job; a resume loses only what followed the
# last checkpoint (complete: a background save still being written is not one yet, so at most two
# --save-every intervals) ----
kill_args=(--val-every 0 --pp 2 --dp 2 --microbatches 2 --lr-decay-steps 200)
OMP_WAIT_POLICY=PASSIVE "$MPIEXEC" -n 4 "$TRAIN" "${kill_args[@]}" --steps 200 --save "$WORK/k" --save-every 2 \
  >"$WORK/k1.log" 2>&1 &
job=$!
if wait_for "$WORK/k1.log" '^step 5/200' && pid=$(rank_pid "--save $WORK/k" 2); then
  t=$(now)
  kill -9 "$pid"
  wait $job
  status=$?
  took=$(elapsed "$t")
  if [ "$status" -ne 0 ] && awk -v s="$took" 'BEGIN { exit !(s < 30) }'; then
    ok "SIGKILL of rank 2 ended the 4-rank job in $took s (exit $status)"
  else
    bad "SIGKILL of rank 2: exit $status after $took s"
  fi
else
  bad "the 4-rank job never reached step 5"; kill $job 2>/dev/null; wait $job
fi
saved=$(sed -E 's/step_0*//' "$WORK/k/latest")
last=$(numbers "$WORK/k1.log" | tail -1 | sed -E 's/^step ([0-9]+).*/\1/')
end=$((saved + 3))
OMP_WAIT_POLICY=PASSIVE "$MPIEXEC" -n 4 "$TRAIN" "${kill_args[@]}" --steps "$end" --load "$WORK/k" \
  --save "$WORK/k" >"$WORK/k2.log" 2>&1
OMP_WAIT_POLICY=PASSIVE "$MPIEXEC" -n 4 "$TRAIN" "${kill_args[@]}" --steps "$end" \
  >"$WORK/k_ref.log" 2>&1
first=$(numbers "$WORK/k2.log" | head -1 | sed -E 's/^step ([0-9]+).*/\1/')
if [ "$first" = $((saved + 1)) ] && [ "$((last - saved))" -le 4 ] &&
  [ "$(numbers "$WORK/k2.log")" = "$(numbers "$WORK/k_ref.log" | tail -3)" ]; then
  ok "resumed after the kill at step $first (logged up to $last, saved $saved): steps $first-$end equal an uninterrupted run's"
else
  bad "resume after the kill: saved $saved, logged $last, resumed at ${first:-?}"
  diff <(numbers "$WORK/k2.log") <(numbers "$WORK/k_ref.log" | tail -3)
fi

# ---- 5. The watchdog: a rank stopped with SIGSTOP; the others abort the job after 2 s ----
"$MPIEXEC" -n 2 "$TRAIN" --val-every 0 --steps 500 --step-timeout 2 --save "$WORK/w" \
  >"$WORK/w.log" 2>"$WORK/w.err" &
job=$!
if wait_for "$WORK/w.log" '^step 3/500' && pid=$(rank_pid "--save $WORK/w" 1); then
  t=$(now)
  kill -STOP "$pid"
  wait $job
  status=$?
  took=$(elapsed "$t")
  kill -9 "$pid" 2>/dev/null  # the launcher should have; never leave it behind
  line=$(grep '^fatal: \[rank 0' "$WORK/w.err" | head -1)
  if [ "$status" -ne 0 ] && [ -n "$line" ] && grep -q "over --step-timeout 2, in phase '" <<<"$line" &&
    awk -v s="$took" 'BEGIN { exit !(s < 30) }'; then
    ok "watchdog: job ended $took s after SIGSTOP of rank 1: $line"
  else
    bad "watchdog: exit $status after $took s; stderr: $(head -3 "$WORK/w.err")"
  fi
  # Rank 1's line is its last record, read from its file in the save directory, which its
  # stopped process no longer rewrites.
  if grep -q '^watchdog: where each rank is' "$WORK/w.err" &&
    grep -qE '^rank 0 \(host [^)]+\): step [0-9]+, .*; (waiting|for) [0-9]+ s$' "$WORK/w.err" &&
    grep -qE '^rank 1 \(host [^)]+\): step [0-9]+, .*; (waiting|for) [0-9]+ s; not refreshed for [0-9]+ s \(its process stopped or gone\?\)$' "$WORK/w.err"; then
    ok "watchdog: rank 0 printed where each rank was: $(grep '^rank 1 (host' "$WORK/w.err")"
  else
    bad "watchdog: no table of the ranks"; grep -A3 '^watchdog: where' "$WORK/w.err"
  fi
else
  bad "the watchdog job never reached step 3"; kill $job 2>/dev/null; wait $job
fi

# ---- 6. Hangs that name themselves: a rank stopped for good inside an MPI call in step 3 ----
hang=(--val-every 0 --layers 2 --heads 4 --dim 64 --batch 2 --seq-len 32 --steps 6 --step-timeout 2)
table_of() {  # table_of NAME: the watchdog's table in $WORK/NAME.err
  sed -n '/^watchdog: where each rank is/,$p' "$WORK/$1.err" | grep '^rank '
}
# A P2P call: rank 0 stops in its first MPI_Isend (stage 0 sending microbatch 0 forward); rank 1
# waits for that message in MPI_Irecv. Both lines name the same tag.
MPIFORMER_TEST_HANG=3:0:MPI_Isend "$MPIEXEC" -n 2 "$TRAIN" "${hang[@]}" --pp 2 --microbatches 2 \
  >"$WORK/hang_p2p.log" 2>"$WORK/hang_p2p.err"
status=$?
table=$(table_of hang_p2p)
tag=$(sed -nE 's/^rank 0 .* tag ([0-9]+) on pp .*/\1/p' <<<"$table")
if [ "$status" -ne 0 ] && [ -n "$tag" ] &&
  grep -qE "^rank 0 \(host [^)]+\): step 3, stage 0, microbatch 0, [a-z_]+; MPI_Isend to rank 1 tag $tag on pp \(stopped there by MPIFORMER_TEST_HANG\); waiting [0-9]+ s$" <<<"$table" &&
  grep -qE "^rank 1 \(host [^)]+\): step 3, stage 1, microbatch 0, recv_forward; MPI_Irecv from rank 0 tag $tag on pp; waiting [0-9]+ s$" <<<"$table"; then
  ok "a hang in a P2P call: the watchdog's table names each rank's op, exit $status:
$table"
else
  bad "a hang in a P2P call: exit $status, table:"; cat "$WORK/hang_p2p.err" | tail -5
fi
# A collective: rank 1 stops as it starts its DP gradient bucket's MPI_Iallreduce; rank 0 waits
# for the bucket.
MPIFORMER_TEST_HANG=3:1:MPI_Iallreduce "$MPIEXEC" -n 2 "$TRAIN" "${hang[@]}" --dp 2 \
  >"$WORK/hang_dp.log" 2>"$WORK/hang_dp.err"
status=$?
table=$(table_of hang_dp)
if [ "$status" -ne 0 ] &&
  grep -qE '^rank 0 \(host [^)]+\): step 3, [^;]+; MPI_Iallreduce on dp_cp; waiting [0-9]+ s$' <<<"$table" &&
  grep -qE '^rank 1 \(host [^)]+\): step 3, [^;]+; MPI_Iallreduce on dp_cp \(stopped there by MPIFORMER_TEST_HANG\); waiting [0-9]+ s$' <<<"$table"; then
  ok "a hang in a collective: the watchdog's table names each rank's call, exit $status:
$table"
else
  bad "a hang in a collective: exit $status, table:"; cat "$WORK/hang_dp.err" | tail -5
fi

# ---- 7. SIGUSR2 mid-run: rank 0 prints the table, and the run goes on to the same steps ----
"$MPIEXEC" -n 2 "$TRAIN" "${sig[@]}" --save "$WORK/usr2" >"$WORK/usr2.log" 2>&1 &
job=$!
if wait_for "$WORK/usr2.log" '^step 3/60' && pid=$(rank_pid "--save $WORK/usr2" 0); then
  kill -USR2 "$pid"
fi
wait $job
status=$?
if [ "$status" -eq 0 ] && grep -q '^SIGUSR2: where each rank is' "$WORK/usr2.log" &&
  grep -qE '^rank 0 \(host [^)]+\): step [0-9]+, ' "$WORK/usr2.log" &&
  grep -qE '^rank 1 \(host [^)]+\): step [0-9]+, ' "$WORK/usr2.log" &&
  [ "$(numbers "$WORK/sig_ref.log")" = "$(numbers "$WORK/usr2.log")" ]; then
  ok "SIGUSR2 to rank 0 mid-run: the table printed, all 60 steps equal the run without it"
else
  bad "SIGUSR2 mid-run: exit $status"; grep -A2 '^SIGUSR2' "$WORK/usr2.log"; tail -3 "$WORK/usr2.log"
fi
finish
