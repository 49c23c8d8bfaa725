#!/usr/bin/env bash
# A stop signal lands while the GEMMs run. No thread may take it with a handler: oneDNN's JIT
# sgemm points the stack pointer into a heap buffer, where a handler's frame would be written
# (src/train/stop_signals.cpp). So every thread of a running rank (main, OpenMP workers, MPI's,
# the watchdog) has the stop signals blocked but the one waiting for them in sigwait; and
# SIGUSR1, SIGTERM and SIGINT, each sent mid-run, stop the run after a whole step, which is saved,
# with exit status 3 and every logged step the uninterrupted run's; one during a validation ends
# it early, the step saved before it. Background saves (--save-async): the same bytes as
# synchronous ones, resumed bit for bit; a rank killed mid-write leaves `latest` at the previous
# checkpoint; a SIGUSR1 during one saves the current step after it. The node-local tier
# (--save-local): a TERM still saves globally, and a rank killed after the local shards of a step
# newer than the global checkpoint resumes from them bit for bit.
source "$(dirname "$0")/common.sh"

# Two OpenMP threads (a worker runs GEMM kernels too) and a watchdog thread.
args=(--val-every 0 --layers 2 --dim 64 --heads 4 --seq-len 32 --batch 8 --steps 200 --threads 2
  --step-timeout 120)
export OMP_NUM_THREADS=2 OMP_WAIT_POLICY=PASSIVE
"$MPIEXEC" -n 1 "$TRAIN" "${args[@]}" >"$WORK/ref.log" 2>&1 || { bad "the reference run"; tail -3 "$WORK/ref.log"; }

# SigBlk bits of SIGINT (2), SIGUSR1 (10), SIGALRM (14) and SIGTERM (15).
stop_bits=$(((1 << 1) | (1 << 9) | (1 << 13) | (1 << 14)))
for sig in USR1 TERM INT; do
  dir="$WORK/$sig"
  # TERM with the node-local tier too: the stop still writes the global checkpoint.
  tier=()
  [ "$sig" = TERM ] && tier=(--save-local "$WORK/$sig.local" --save-local-every 2)
  "$MPIEXEC" -n 1 "$TRAIN" "${args[@]}" --save "$dir" "${tier[@]}" >"$WORK/$sig.log" 2>&1 &
  job=$!
  if wait_for "$WORK/$sig.log" '^step 3/200' && pid=$(rank_pid "--save $dir" 0); then
    if [ "$sig" = USR1 ]; then  # the threads' masks, read while the run is in its steps
      threads=0
      open=()
      for task in /proc/"$pid"/task/*; do
        threads=$((threads + 1))
        blocked=$((16#$(sed -n 's/^SigBlk:\s*//p' "$task/status")))
        ((blocked & stop_bits)) || open+=("${task##*/}:$(cat "$task/wchan" 2>/dev/null)")
      done
      # The waiting thread shows its set unblocked while it sleeps in sigwait (sigtimedwait).
      if [ "${#open[@]}" -eq 1 ] && [ "${open[0]%%:*}" != "$pid" ] &&
        [[ "${open[0]#*:}" =~ ^(|0|.*sigtimedwait.*)$ ]] && [ "$threads" -ge 4 ]; then
        ok "all $threads threads of a running rank block the stop signals, but the one in sigwait"
      else
        bad "threads that can take a stop signal: ${open[*]:-none} (of $threads)"
      fi
    fi
    kill -"$sig" "$pid"
  fi
  wait $job
  status=$?
  stopped=$(sed -nE "s/^SIG$sig received: stopped after step ([0-9]+);.*/\1/p" "$WORK/$sig.log")
  if [ "$status" -eq 3 ] && [ -n "$stopped" ] && [ "$stopped" -lt 200 ] &&
    [ "$(cat "$dir/latest" 2>/dev/null)" = "$(printf 'step_%08d' "$stopped")" ] &&
    [ "$(numbers "$WORK/$sig.log")" = "$(numbers "$WORK/ref.log" | head -"$stopped")" ]; then
    ok "SIG$sig mid-run${tier[*]:+ (with --save-local)}: stopped after step $stopped, saved it, exit 3, steps 1-$stopped as uninterrupted"
  else
    bad "SIG$sig mid-run: exit $status, stopped after '${stopped:-?}'"
    grep -vE '^step ' "$WORK/$sig.log" | tail -4
  fi
done

# scancel's TERM and the job script's USR1, back to back, are one request to stop: the run still
# finishes its step, saves it and exits 3, not "at once" as for a second request.
dir="$WORK/twice"
"$MPIEXEC" -n 1 "$TRAIN" "${args[@]}" --save "$dir" >"$WORK/twice.log" 2>&1 &
job=$!
if wait_for "$WORK/twice.log" '^step 3/200' && pid=$(rank_pid "--save $dir" 0); then
  kill -TERM "$pid"
  kill -USR1 "$pid"
fi
wait $job
status=$?
# Both pending at once, sigwait takes the lower-numbered first: either may be the one named.
stopped=$(sed -nE "s/^SIG(TERM|USR1) received: stopped after step ([0-9]+);.*/\2/p" "$WORK/twice.log")
if [ "$status" -eq 3 ] && [ -n "$stopped" ] && ! grep -q 'exiting now' "$WORK/twice.log" &&
  [ "$(cat "$dir/latest" 2>/dev/null)" = "$(printf 'step_%08d' "$stopped")" ]; then
  ok "TERM then USR1 at once: one request, stopped after step $stopped, saved, exit 3"
else
  bad "TERM then USR1 at once: exit $status, stopped after '${stopped:-?}'"
  grep -vE '^step ' "$WORK/twice.log" | tail -4
fi
# A stop signal during an evaluation: the step's checkpoint is written before the evaluations (a
# SIGKILL after Slurm's KillWait then loses nothing), and the ranks agree between evaluation
# batches, so the validation ends at once, says so instead of a loss, the task eval after it does
# not start, and the run exits 3, its --save-llmc written (the training is complete). A run resumed at step 2 (no validation at step 0), its last step
# saved, then a validation of a million batches; the signal goes to rank 1 alone.
small=(--layers 2 --heads 4 --dim 64 --batch 4 --seq-len 32 --dp 2 --threads 1)
"$PY" "$(dirname "$0")/make_eval_file.py" "$WORK/eval.bin" 4 256 5
"$MPIEXEC" -n 2 "$TRAIN" "${small[@]}" --steps 1 --val-every 0 --save "$WORK/val" >"$WORK/val1.log" 2>&1
timeout 60 "$MPIEXEC" -n 2 "$TRAIN" "${small[@]}" --steps 2 --load "$WORK/val" --save "$WORK/val" \
  --val-every 1 --val-steps 1000000 --eval-data "$WORK/eval.bin" --save-llmc "$WORK/val.bin" \
  >"$WORK/val.log" 2>&1 &
job=$!
wait_for "$WORK/val.log" '^checkpoint: saved step 2 ' && pid=$(rank_pid "--save $WORK/val" 1) &&
  kill -TERM "$pid"
wait $job
status=$?
if [ "$status" -eq 3 ] &&
  grep -qE '^validation at step 2 cut short by SIGTERM after [0-9]+ of 1000000 batches' "$WORK/val.log" &&
  grep -q '^SIGTERM received: stopped after step 2; saved' "$WORK/val.log" &&
  ! grep -qE '^(val|eval) step 2' "$WORK/val.log" && [ "$(cat "$WORK/val/latest")" = step_00000002 ] &&
  [ -s "$WORK/val.bin" ]; then
  ok "SIGTERM during the last validation: step 2 saved before it, $(grep -oE 'after [0-9]+ of 1000000 batches' "$WORK/val.log"), --save-llmc written, exit 3"
else
  bad "SIGTERM during the validation: exit $status"
  grep -vE '^step ' "$WORK/val.log" | tail -4
fi

# The job scripts pass on one stop request per job part: scancel's TERM to the script, then
# another signal (a second scancel, the time limit's USR1) is not passed on, since to the ranks a
# second request after the first is acknowledged means "exit now, unsaved". The script runs
# outside Slurm here (its variables set by hand; MPICH's mpiexec as the launcher), with steps of
# about a second and the trainer's same-request window cut to 0.1 s, so that the second signal
# comes after it, mid-step. The script's status is the ranks' 3 (mpiexec itself exits 0 after
# passing a signal on).
mkdir "$WORK/job"
(
  cd "$WORK/job" || exit 1
  export SLURM_JOB_ID=4711 SLURM_NTASKS=1 LAUNCHER=mpiexec MPIFORMER_TRAIN="$TRAIN" \
    MODEL="--layers 2 --heads 4 --dim 256" STEPS=50 BATCH=48 SEQ_LEN=256 SAVE_DIR="$WORK/job/ckpt" \
    SAVE_EVERY=0 VAL_DATA=none EXTRA_ARGS="--val-every 0" MPIFORMER_STOP_SAME_REQUEST_S=0.1
  bash "${MPIFORMER_SOURCE_DIR:-$(cd "$(dirname "$0")/../.." && pwd)}/ci/slurm/cpu.sbatch" >job.log 2>&1 &
  script=$!
  wait_for job.log '^step 1/50' && kill -TERM "$script" && sleep 0.3 && kill -TERM "$script"
  wait "$script"
  echo "status $?" >>job.log
)
log=$WORK/job/job.log
stopped=$(sed -nE "s/^SIGUSR1 received: stopped after step ([0-9]+); saved.*/\1/p" "$log")
if grep -q '^status 3$' "$log" && [ -n "$stopped" ] &&
  [ "$(grep -c 'asking the ranks to save and stop' "$log")" -eq 1 ] &&
  grep -q 'SIGTERM received: a stop is already asked for (SIGTERM); not passed on' "$log" &&
  ! grep -q 'exiting now' "$log" &&
  [ "$(cat "$WORK/job/ckpt/latest" 2>/dev/null)" = "$(printf 'step_%08d' "$stopped")" ]; then
  ok "the job script, TERM twice: one request passed on, step $stopped saved, status 3"
else
  bad "the job script, TERM twice: $(grep -E '^status|job 4711|stopped|exiting' "$log" | tr '\n' ' ')"
fi
# Background saves (--save-async, the default with --save): a copy staged at the save step and
# written by a thread while training goes on. Tiny steps on 2 ranks; MPIFORMER_TEST_SAVE_DELAY
# makes the writes slow (a sleep between the model file and the optimizer file).
tiny=(--val-every 0 --layers 2 --heads 4 --dim 64 --batch 2 --seq-len 32 --threads 1)
ckpt_files() { (cd "$1" && find . -type f | sort | xargs cat | sha256sum); }
"$MPIEXEC" -n 2 "$TRAIN" "${tiny[@]}" --steps 4 --save-every 2 --save "$WORK/async" \
  --metrics "$WORK/async.jsonl" >"$WORK/async.log" 2>&1
"$MPIEXEC" -n 2 "$TRAIN" "${tiny[@]}" --steps 4 --save-every 2 --save "$WORK/sync" --save-async 0 \
  >"$WORK/sync.log" 2>&1
if grep -qE '^checkpoint: staged step 2 in [0-9.]+ s \(the step.s stall\); writing it in the background$' "$WORK/async.log" &&
  ! grep -q '^checkpoint: staged' "$WORK/sync.log" &&
  grep -q '"kind":"save","step":2,"mode":"background","stall_s":' "$WORK/async.jsonl" &&
  grep -q '"kind":"save","step":4,"mode":"synchronous"' "$WORK/async.jsonl" &&
  grep -qE '"kind":"save","step":2,"mode":"background",.*"overlap":[0-9.e+-]+,' "$WORK/async.jsonl" &&
  grep -qE '"kind":"save","step":4,"mode":"synchronous",.*"overlap":0,' "$WORK/async.jsonl" &&
  grep -qE '^checkpoint: saved step 2 .* GB/s \| overlapped with training [0-9]+%$' "$WORK/async.log" &&
  [ -n "$(ckpt_files "$WORK/async/step_00000002")" ] &&
  [ "$(ckpt_files "$WORK/async/step_00000002")" = "$(ckpt_files "$WORK/sync/step_00000002")" ] &&
  [ "$(ckpt_files "$WORK/async/step_00000004")" = "$(ckpt_files "$WORK/sync/step_00000004")" ] &&
  [ "$(numbers "$WORK/async.log")" = "$(numbers "$WORK/sync.log")" ]; then
  ok "a background save's checkpoint equals --save-async 0's byte for byte (steps 2 and 4)"
else
  bad "background and synchronous saves differ"; grep '^checkpoint' "$WORK/async.log"
fi
# Resumed from the background save of step 2: steps 3 and 4 as the uninterrupted run's, the
# final checkpoint the same bytes.
"$MPIEXEC" -n 2 "$TRAIN" "${tiny[@]}" --steps 4 --load "$WORK/async" --load-step 2 \
  --save "$WORK/resumed" >"$WORK/resumed.log" 2>&1
if [ "$(numbers "$WORK/resumed.log")" = "$(numbers "$WORK/async.log" | sed -n '3,4p')" ] &&
  [ "$(numbers "$WORK/resumed.log" | wc -l)" -eq 2 ] &&
  [ "$(ckpt_files "$WORK/resumed/step_00000004")" = "$(ckpt_files "$WORK/async/step_00000004")" ]; then
  ok "resumed from a background save: steps 3-4 and the final checkpoint bit for bit"
else
  bad "resumed from a background save: the steps differ"; tail -3 "$WORK/resumed.log"
fi
# An exception on rank 1's writer thread mid-write (between the model file and the optimizer
# file of step 4) is reported at the next save, on every rank: exit 6, one error line, step 2
# still `latest`, nothing of step 4 left. The run's ranks/ directory keeps what a user put there
# (a file named like a watchdog record, and another): only the watchdog's own records go.
mkdir -p "$WORK/wfail/ranks" && echo "my notes" >"$WORK/wfail/ranks/rank_00001" &&
  echo "more notes" >"$WORK/wfail/ranks/rank_old.txt"
MPIFORMER_TEST_SAVE_FAIL=4:1 "$MPIEXEC" -n 2 "$TRAIN" "${tiny[@]}" --steps 8 --save-every 2 \
  --save "$WORK/wfail" >"$WORK/wfail.log" 2>&1
status=$?
if [ "$status" -eq 6 ] && [ "$(grep -c '^error:' "$WORK/wfail.log")" -eq 1 ] &&
  grep -q "^error: saving the checkpoint of step 4 failed: .*MPIFORMER_TEST_SAVE_FAIL.*$WORK/wfail/step_00000002 and $WORK/wfail/latest are intact" "$WORK/wfail.log" &&
  [ "$(cat "$WORK/wfail/latest")" = step_00000002 ] && [ ! -e "$WORK/wfail/step_00000004" ] &&
  ! ls -d "$WORK"/wfail/*.partial-* >/dev/null 2>&1; then
  ok "an exception on a writer thread: reported at the next save, exit 6, step 2 intact"
else
  bad "an exception on a writer thread: exit $status"; grep -E '^(checkpoint|error|fatal)|terminate' "$WORK/wfail.log"
fi
if [ "$(cat "$WORK/wfail/ranks/rank_00001" 2>/dev/null)" = "my notes" ] &&
  [ "$(cat "$WORK/wfail/ranks/rank_old.txt" 2>/dev/null)" = "more notes" ] &&
  [ "$(ls "$WORK/wfail/ranks" | wc -l)" -eq 2 ] &&
  grep -q "^warning: rank 1 keeps no watchdog record: $WORK/wfail/ranks/rank_00001 exists and is no record this program wrote" "$WORK/wfail.log"; then
  ok "the watchdog's records leave a user's files in ranks/ as they are"
else
  bad "a user's files in ranks/: $(ls "$WORK/wfail/ranks"), $(cat "$WORK/wfail/ranks/rank_00001" 2>&1)"
fi
# A copy that throws inside MPI-IO's collective rounds (rank 0's staging of step 4's model file),
# in a background save and in a synchronous one: rank 1 is not left waiting in the next round;
# exit 6, one error line naming the staging, step 2 still `latest`, nothing of step 4 left.
for async in 1 0; do
  out=$WORK/sfail$async
  MPIFORMER_TEST_STAGING_FAIL=4:0 timeout 120 "$MPIEXEC" -n 2 "$TRAIN" "${tiny[@]}" --steps 8 \
    --save-every 2 --save-async $async --save "$out" >"$out.log" 2>&1
  status=$?
  if [ "$status" -eq 6 ] && [ "$(grep -c '^error:' "$out.log")" -eq 1 ] &&
    grep -q "^error: saving the checkpoint of step 4 failed: .*staging failed (a failure made for a test" "$out.log" &&
    [ "$(cat "$out/latest")" = step_00000002 ] && [ ! -e "$out/step_00000004" ] &&
    ! ls -d "$out"/*.partial-* >/dev/null 2>&1; then
    ok "a copy that throws mid-write (--save-async $async): exit 6, one error line, step 2 intact"
  else
    bad "a copy that throws mid-write (--save-async $async): exit $status"; grep -E '^(checkpoint|error|fatal)|terminate' "$out.log"
  fi
done
# SIGKILL of rank 1 while the save of step 4 is written (60 s slow): `latest` stays at step 2,
# and the next run resumes from it (on the 4-step run's schedule: the same steps 3 and 4).
MPIFORMER_TEST_SAVE_DELAY=4:60 "$MPIEXEC" -n 2 "$TRAIN" "${tiny[@]}" --steps 100 --lr-decay-steps 4 \
  --save-every 2 --save "$WORK/killed" >"$WORK/killed.log" 2>&1 &
job=$!
if wait_for "$WORK/killed.log" '^checkpoint: staged step 4 ' &&
  wait_for "$WORK/killed.log" '^checkpoint: saved step 2 ' && pid=$(rank_pid "--save $WORK/killed" 1); then
  kill -9 "$pid"
fi
wait $job
"$MPIEXEC" -n 2 "$TRAIN" "${tiny[@]}" --steps 4 --load "$WORK/killed" --save "$WORK/killed" \
  >"$WORK/killed2.log" 2>&1
status=$?
if [ "$status" -eq 0 ] && ! grep -q '^checkpoint: saved step 4 ' "$WORK/killed.log" &&
  grep -q "^resumed: $WORK/killed/step_00000002, step 2 of 4" "$WORK/killed2.log" &&
  [ "$(numbers "$WORK/killed2.log")" = "$(numbers "$WORK/async.log" | sed -n '3,4p')" ] &&
  [ "$(cat "$WORK/killed/latest")" = step_00000004 ]; then
  ok "SIGKILL mid-write: latest stayed at step 2, the next run resumed from it bit for bit"
else
  bad "SIGKILL mid-write: exit $status"; grep -E '^(checkpoint|resumed|note)' "$WORK/killed.log" "$WORK/killed2.log"
fi
# The node-local tier after a SIGKILL: the global save of step 8 is slow (60 s), so step 12's waits
# for it, after step 12's local shards are written; rank 1 is killed there. The restart resumes
# from the local shards of step 12 (the global checkpoint is step 4's): steps 13 and 14 as the
# uninterrupted run's.
"$MPIEXEC" -n 2 "$TRAIN" "${tiny[@]}" --steps 14 >"$WORK/ref14.log" 2>&1
local_tier=(--save-every 4 --save "$WORK/tiers" --load "$WORK/tiers" --save-local "$WORK/tiers.local"
  --save-local-every 2 --lr-decay-steps 14)
MPIFORMER_TEST_SAVE_DELAY=8:60 "$MPIEXEC" -n 2 "$TRAIN" "${tiny[@]}" --steps 100 "${local_tier[@]}" \
  >"$WORK/tiers.log" 2>&1 &
job=$!
if wait_for "$WORK/tiers.log" '^checkpoint: saved the local shards of step 12 ' &&
  pid=$(rank_pid "--save $WORK/tiers" 1); then
  kill -9 "$pid"
fi
wait $job
"$MPIEXEC" -n 2 "$TRAIN" "${tiny[@]}" --steps 14 "${local_tier[@]}" >"$WORK/tiers2.log" 2>&1
status=$?
if [ "$status" -eq 0 ] && [ "$(cat "$WORK/tiers/latest")" = step_00000014 ] &&
  grep -q "^resumed: the local shards of step 12 in $WORK/tiers.local (newer than $WORK/tiers/step_00000004), step 12 of 14" "$WORK/tiers2.log" &&
  [ "$(numbers "$WORK/tiers2.log")" = "$(numbers "$WORK/ref14.log" | sed -n '13,14p')" ]; then
  ok "SIGKILL with the node-local tier: resumed from the local shards of step 12 (global: step 4), steps 13-14 bit for bit"
else
  bad "SIGKILL with the node-local tier: exit $status"; grep -E '^(checkpoint|resumed|note|warning|error)' "$WORK/tiers.log" "$WORK/tiers2.log"
fi
# SIGUSR1 while a write is in flight: the save of step 4 waits for step 2's (1 s slow), then
# is written itself (1 s) while the signal lands; the stop saves the current step after it.
MPIFORMER_TEST_SAVE_DELAY=2:1 "$MPIEXEC" -n 2 "$TRAIN" "${tiny[@]}" --steps 100 --save-every 2 \
  --save "$WORK/usr1" >"$WORK/usr1.log" 2>&1 &
job=$!
if wait_for "$WORK/usr1.log" '^checkpoint: staged step 4 ' && pid=$(rank_pid "--save $WORK/usr1" 1); then
  kill -USR1 "$pid"
fi
wait $job
status=$?
stopped=$(sed -nE 's/^SIGUSR1 received: stopped after step ([0-9]+); saved.*/\1/p' "$WORK/usr1.log")
last=$(printf 'step_%08d' "${stopped:-0}")
if [ "$status" -eq 3 ] && [ -n "$stopped" ] && [ "$stopped" -gt 4 ] &&
  grep -qE '^checkpoint: step 4 waited [0-9.]+ s for the save of step 2 to finish' "$WORK/usr1.log" &&
  grep -q '^checkpoint: saved step 4 ' "$WORK/usr1.log" &&
  [ "$(cat "$WORK/usr1/latest")" = "$last" ] &&
  [ "$(ls "$WORK/usr1/step_00000004" | wc -l)" -eq 3 ] && [ "$(ls "$WORK/usr1/$last" | wc -l)" -eq 3 ] &&
  ! ls -d "$WORK"/usr1/*.partial-* >/dev/null 2>&1; then
  ok "SIGUSR1 with a save in flight: step 4's write finished, step $stopped saved after it, exit 3"
else
  bad "SIGUSR1 with a save in flight: exit $status"; grep -E '^(checkpoint|SIGUSR1)' "$WORK/usr1.log"
fi
# The last step's save waits for the write in flight (3 s slow) as a save, not inside the step's
# stop agreement: over --step-timeout 1, the watchdog names the save.
MPIFORMER_TEST_SAVE_DELAY=2:3 "$MPIEXEC" -n 1 "$TRAIN" "${tiny[@]}" --steps 3 --save-every 2 \
  --save "$WORK/slow" --step-timeout 1 >"$WORK/slow.log" 2>&1
status=$?
if [ "$status" -eq 5 ] && grep -q "^fatal: .*save of step 3 has run" "$WORK/slow.log"; then
  ok "the final save's wait for a write in flight is timed as a save"
else
  bad "the final save's wait for a write in flight: exit $status"; grep -E '^fatal' "$WORK/slow.log"
fi
finish
