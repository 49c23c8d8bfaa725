#!/usr/bin/env bash
# A stop signal lands while the GEMMs run. No thread may take it with a handler: oneDNN's JIT
# sgemm points the stack pointer into a heap buffer, where a handler's frame would be written
# (src/train/stop_signals.cpp). So every thread of a running rank (main, OpenMP workers, MPI's,
# the watchdog) has the stop signals blocked but the one waiting for them in sigwait; and
# SIGUSR1, SIGTERM and SIGINT, each sent mid-run, stop the run after a whole step, which is saved,
# with exit status 3 and every logged step the uninterrupted run's; one during a validation ends
# it early, the step saved before it.
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
  "$MPIEXEC" -n 1 "$TRAIN" "${args[@]}" --save "$dir" >"$WORK/$sig.log" 2>&1 &
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
    ok "SIG$sig mid-run: stopped after step $stopped, saved it, exit 3, steps 1-$stopped as uninterrupted"
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
finish
