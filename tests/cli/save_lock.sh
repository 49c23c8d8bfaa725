#!/usr/bin/env bash
# The lock on a --save directory (src/checkpoint/save_lock.hpp). A second live run on the same
# directory is refused with one error line naming the holder (exit 2); a lock whose holder is
# provably gone (its pid no longer runs here, or is another process now; this Slurm job's earlier
# run; a job squeue reports gone) is taken over with a note; anything that cannot be proven gone
# (another host outside Slurm, squeue failing) is refused with the file to remove. The lock is
# released however the run returns: done, stopped (3), diverged (4), bad input found after it
# was taken. Partial saves are removed only when their writer is provably gone.
source "$(dirname "$0")/common.sh"

export OMP_NUM_THREADS=1
args=(--val-every 0 --layers 2 --dim 64 --heads 4 --seq-len 32 --batch 8)
HOST=$(hostname)
SAFE_HOST=$(sed 's/[^A-Za-z0-9._-]/_/g' <<<"$HOST")
BOOT=$(cat /proc/sys/kernel/random/boot_id)
PIDNS=$(readlink /proc/self/ns/pid)
# Field 22 of /proc/PID/stat, the start time (the command in parentheses may hold spaces).
start_of() { sed 's/.*) //' "/proc/$1/stat" | awk '{print $20}'; }
# write_lock DIR HOST PID START [SLURM_JOB]: a lock as a run with that identity writes it.
write_lock() {
  mkdir -p "$1"
  printf '%s\n' "mpiformer save lock: a run writes checkpoints into this directory" \
    "host = $2" "pid = $3" "start_time = $4" "boot_id = $BOOT" "pid_namespace = $PIDNS" \
    "slurm_job = ${5:-}" "slurm_array = " "taken = 2025-01-02T03:04:05Z" >"$1/mpiformer.lock"
}
# A pid that ran and is gone, and one that runs for the whole test.
sh -c 'exit 0' &
dead=$!
wait $dead
sleep 600 &
live=$!
trap 'kill $live 2>/dev/null; rm -rf "$WORK"' EXIT
# A fake squeue: records how it was asked, answers as FAKE_SQUEUE says.
mkdir "$WORK/bin"
cat >"$WORK/bin/squeue" <<EOF
#!/bin/sh
echo "\$*" >>"$WORK/squeue.args"
case "\$FAKE_SQUEUE" in
  gone) exit 0 ;;
  running) echo RUNNING ;;
  completed) echo COMPLETED ;;
  invalid) echo "slurm_load_jobs error: Invalid job id specified" >&2; exit 1 ;;
  *) echo "slurm_load_jobs error: Unable to contact slurm controller (connect failure)" >&2; exit 1 ;;
esac
EOF
chmod +x "$WORK/bin/squeue"
FAKE_PATH=$WORK/bin:$PATH

# ---- two live runs on one directory: the second is refused, the first goes on unharmed ----
D=$WORK/shared
"$TRAIN" "${args[@]}" --steps 3000 --save-every 1000 --save "$D" >"$WORK/first.log" 2>&1 &
first=$!
if wait_for "$WORK/first.log" '^step 3/3000' && grep -qx "pid = $first" "$D/mpiformer.lock" &&
  grep -qx "host = $HOST" "$D/mpiformer.lock" && grep -q "^start_time = $(start_of $first)$" "$D/mpiformer.lock"; then
  ok "a running run's lock names its host, pid and start time"
else
  bad "the first run's lock: $(cat "$D/mpiformer.lock" 2>&1)"
fi
expect_error "a second run on the same --save" 2 \
  "^error: --save $D is in use by the run on host $HOST \(pid $first\) since .*pid $first is running.*wait for it to end or pass another --save directory" \
  -- "${args[@]}" --steps 2 --save "$D"
still=$(kill -0 $first 2>/dev/null && echo yes)
wait $first
rc=$?
if [ "$still" = yes ] && [ $rc -eq 0 ] && [ "$(cat "$D/latest")" = step_00003000 ] &&
  [ "$(ls "$D" | tr '\n' ' ')" = "latest step_00001000 step_00002000 step_00003000 " ]; then
  ok "the first run, still running when the second was refused, ends with 0 and its lock gone"
else
  bad "the first run: running at refusal '$still', exit $rc, $D holds $(ls "$D" | tr '\n' ' ')"
fi
out=$("$TRAIN" "${args[@]}" --load "$D" --steps 3001 2>&1)
[ $? -eq 0 ] && grep -q '^step 3001/3001' <<<"$out" && ok "its checkpoints are intact (step 3000 resumes)" ||
  bad "resuming the first run's checkpoint: $(grep -E 'error|note' <<<"$out")"

# ---- a run killed with SIGKILL leaves its lock; the next run takes it over ----
D=$WORK/killed
"$TRAIN" "${args[@]}" --steps 3000 --save-every 2 --save "$D" >"$WORK/killed.log" 2>&1 &
victim=$!
wait_for "$WORK/killed.log" '^step 5/3000'
kill -KILL $victim
wait $victim 2>/dev/null
grep -qx "pid = $victim" "$D/mpiformer.lock" && ok "SIGKILL leaves the lock" || bad "no lock after SIGKILL"
# The victim may have run (and saved) some steps past step 5 before the signal landed on a busy
# machine: the resumed run goes 6 steps past whatever it left as latest.
left=$(sed 's/^step_0*//' "$D/latest")
end=$((left + 6))
out=$("$MPIEXEC" -n 2 "$TRAIN" "${args[@]}" --steps $end --load "$D" --save "$D" 2>&1)
rc=$?
if [ $rc -eq 0 ] && [ "$(grep -c "^note: --save $D: took over the lock of the run on host $HOST (pid $victim) since .*, which is gone (pid $victim no longer runs on $HOST)" <<<"$out")" -eq 1 ] &&
  grep -q "^step $end/$end" <<<"$out" && [ ! -e "$D/mpiformer.lock" ] && [ -z "$(ls "$D" | grep partial)" ]; then
  ok "the killed run's lock is taken over with one note (2 ranks); the run completes and releases it"
else
  bad "taking over a killed run's lock (latest was step $left): exit $rc, $(grep -E 'note|error' <<<"$out"), $D holds $(ls "$D" | tr '\n' ' ')"
fi

# ---- locks of every kind of holder ----
# taken_over NAME PATTERN [ENV...]: a run on $L with that lock completes, with a note matching
# PATTERN, and leaves no lock.
taken_over() {
  local name=$1 pattern=$2 out rc
  shift 2
  out=$(env "$@" "$TRAIN" "${args[@]}" --steps 2 --save "$L" 2>&1)
  rc=$?
  if [ $rc -eq 0 ] && grep -qE "^note: --save $L: took over the lock of .*$pattern" <<<"$out" &&
    [ "$(cat "$L/latest")" = step_00000002 ] && [ ! -e "$L/mpiformer.lock" ]; then
    ok "$name: taken over, $(grep -oE 'which is gone.*' <<<"$out")"
  else
    bad "$name: exit $rc, $(grep -E 'note|error' <<<"$out")"
  fi
}
# refused NAME PATTERN [VAR=VALUE...]: a run on $L, in that environment (PROGRAM: what runs in
# place of the trainer), is refused (exit 2, one error line matching PATTERN) and leaves the lock
# as it was and nothing else in $L.
refused() {
  local name=$1 pattern=$2 before result
  shift 2
  before=$(cat "$L/mpiformer.lock")
  result=$(
    [ $# -gt 0 ] && export "$@"
    expect_error_from "${PROGRAM:-$TRAIN}" "$name" 1 "$pattern" -- "${args[@]}" --steps 2 --save "$L"
  )
  echo "$result"
  if [[ $result != ok* ]]; then
    failed=$((failed + 1))
  elif [ "$(cat "$L/mpiformer.lock")" != "$before" ] || [ "$(ls "$L")" != mpiformer.lock ]; then
    bad "$name: the lock or the directory changed: $(ls "$L" | tr '\n' ' ')"
  else
    passed=$((passed + 1))
  fi
}
L=$WORK/l1 && write_lock "$L" "$HOST" "$live" "$(start_of $live)"
refused "a live pid on this host" "^error: --save $L is in use by the run on host $HOST \(pid $live\) since 2025-01-02T03:04:05Z \(pid $live is running on $HOST\); wait for it to end"
# --dry-run takes no lock and changes nothing, but says what a run would find.
out=$("$TRAIN" "${args[@]}" --steps 2 --save "$L" --dry-run 2>&1)
rc=$?
if [ $rc -eq 0 ] && grep -qE "^note: --save: $L/mpiformer.lock names the run on host $HOST \(pid $live\).*a run would be refused$" <<<"$out" &&
  [ "$(ls "$L")" = mpiformer.lock ] && grep -q "pid = $live" "$L/mpiformer.lock"; then
  ok "--dry-run on a locked directory: the holder named, nothing taken"
else
  bad "--dry-run on a locked directory: exit $rc, $(grep -E 'note|error' <<<"$out")"
fi
L=$WORK/l2 && write_lock "$L" "$HOST" "$live" "$(($(start_of $live) + 1))"
taken_over "a reused pid (running, started at another time)" "\(pid $live\).*is now another process"
L=$WORK/l3 && write_lock "$L" "$HOST" "$dead" 12345
taken_over "a pid that no longer runs" "which is gone \(pid $dead no longer runs on $HOST\)"
L=$WORK/l4 && write_lock "$L" "othernode" 4711 12345
refused "another host, outside Slurm" "^error: --save $L is locked by the run on host othernode \(pid 4711\) since .*cannot prove has ended \(it ran on another host, outside Slurm\): if that run is over, remove $L/mpiformer.lock" PATH="$FAKE_PATH"
L=$WORK/l5 && write_lock "$L" "othernode" 4711 12345 4242
mkdir "$L/step_00000003.partial-job4242-othernode-4711" "$L/step_00000004.partial-job4243-othernode-4711"
taken_over "another host, this Slurm job (requeued)" "Slurm job 4242.*this Slurm job's earlier run" SLURM_JOB_ID=4242
if [ ! -e "$L/step_00000003.partial-job4242-othernode-4711" ] && [ -d "$L/step_00000004.partial-job4243-othernode-4711" ]; then
  ok "the gone holder's partial save is removed, another job's of the same host and pid kept"
else
  bad "partials after the takeover: $(ls "$L" | tr '\n' ' ')"
fi
rm -f "$WORK/squeue.args"
L=$WORK/l6 && write_lock "$L" "othernode" 4711 12345 777
taken_over "another Slurm job that squeue knows nothing of" "squeue reports Slurm job 777 gone" PATH="$FAKE_PATH" FAKE_SQUEUE=gone
[ "$(cat "$WORK/squeue.args")" = "-h -j 777 -o %T" ] && ok "squeue asked: -h -j 777 -o %T" || bad "squeue asked: $(cat "$WORK/squeue.args")"
L=$WORK/l7 && write_lock "$L" "othernode" 4711 12345 777
taken_over "another Slurm job, COMPLETED" "squeue reports Slurm job 777 as COMPLETED" PATH="$FAKE_PATH" FAKE_SQUEUE=completed SLURM_JOB_ID=9
L=$WORK/l8 && write_lock "$L" "othernode" 4711 12345 777
taken_over "another Slurm job that Slurm has forgotten (invalid job id)" "squeue reports Slurm job 777 gone" PATH="$FAKE_PATH" FAKE_SQUEUE=invalid
L=$WORK/l9 && write_lock "$L" "othernode" 4711 12345 777
refused "another Slurm job, RUNNING" "^error: --save $L is in use by the run on host othernode \(pid 4711, Slurm job 777\) since .*squeue reports Slurm job 777 as RUNNING" PATH="$FAKE_PATH" FAKE_SQUEUE=running
refused "another Slurm job, squeue failing" "is locked by .*cannot prove has ended \(.*squeue could not say whether Slurm job 777 has ended\): if that run is over, remove $L/mpiformer.lock" PATH="$FAKE_PATH" FAKE_SQUEUE=broken
# The trainer on a PATH without squeue (the test's tools stay on its own).
mkdir "$WORK/no_squeue"
printf '#!/bin/sh\nPATH=%s exec "%s" "$@"\n' "$WORK/no_squeue" "$TRAIN" >"$WORK/train_without_squeue"
chmod +x "$WORK/train_without_squeue"
refused "another Slurm job, no squeue" "cannot prove has ended.*remove $L/mpiformer.lock" PROGRAM="$WORK/train_without_squeue"
L=$WORK/l10 && mkdir "$L" && printf 'hello\n' >"$L/mpiformer.lock"
refused "a garbage lock" "^error: --save $L: $L/mpiformer.lock is not a lock this program wrote \(it reads 'hello'\): if no run writes into $L, remove $L/mpiformer.lock"
L=$WORK/l11 && write_lock "$L" "$HOST" "$dead" 12345 && head -c 100 "$L/mpiformer.lock" >"$L/cut" && mv "$L/cut" "$L/mpiformer.lock"
refused "a truncated lock" "^error: --save $L: $L/mpiformer.lock is not a lock this program wrote"

# ---- partial saves: only a provably gone writer's are removed ----
P=$WORK/partials
mkdir -p "$P/step_00000009.partial-nojob-othernode-$dead" "$P/step_00000008.partial-nojob-$SAFE_HOST-$live" \
  "$P/step_00000007.partial-nojob-$SAFE_HOST-$dead" "$P/step_00000006.partial-$SAFE_HOST-$dead"
touch "$P/step_00000009.partial-nojob-othernode-$dead/model_00000009.bin" "$P/latest.partial-job5-$SAFE_HOST-$dead"
out=$("$TRAIN" "${args[@]}" --steps 2 --save "$P" 2>&1)
rc=$?
left=$(ls "$P" | tr '\n' ' ')
if [ $rc -eq 0 ] &&
  [ "$left" = "latest step_00000002 step_00000008.partial-nojob-$SAFE_HOST-$live step_00000009.partial-nojob-othernode-$dead " ] &&
  [ -e "$P/step_00000009.partial-nojob-othernode-$dead/model_00000009.bin" ] &&
  grep -q "^note: kept $P/step_00000009.partial-nojob-othernode-$dead: its writer (pid $dead on othernode) may still be saving" <<<"$out" &&
  grep -q "^note: kept $P/step_00000008.partial-nojob-$SAFE_HOST-$live: its writer (pid $live on $SAFE_HOST) may still be saving" <<<"$out" &&
  grep -q "^note: removed $P/step_00000007.partial-nojob-$SAFE_HOST-$dead, a cut-off save: pid $dead no longer runs" <<<"$out" &&
  grep -q "^note: removed $P/step_00000006.partial-$SAFE_HOST-$dead, a cut-off save" <<<"$out" &&
  grep -q "^note: removed $P/latest.partial-job5-$SAFE_HOST-$dead, a cut-off save" <<<"$out"; then
  ok "partials of another host and of a live pid kept with a note; those of a gone pid here removed"
else
  bad "partials: exit $rc, left $left; $(grep note <<<"$out")"
fi

# ---- the lock is released on every way out that returns ----
D=$WORK/stopped
"$MPIEXEC" -n 1 "$TRAIN" "${args[@]}" --steps 3000 --save "$D" >"$WORK/stopped.log" 2>&1 &
job=$!
if wait_for "$WORK/stopped.log" '^step 3/3000' && pid=$(rank_pid "--save $D" 0) &&
  grep -qx "pid = $pid" "$D/mpiformer.lock"; then
  kill -USR1 "$pid"
fi
wait $job
rc=$?
[ $rc -eq 3 ] && [ -e "$D/latest" ] && [ ! -e "$D/mpiformer.lock" ] &&
  ok "stopped by a signal (exit 3): saved, lock released" || bad "stop signal: exit $rc, $(ls "$D" | tr '\n' ' ')"
out=$("$TRAIN" "${args[@]}" --steps 6 --lr 1e6 --save "$WORK/div" --save-every 1 2>&1)
rc=$?
[ $rc -eq 4 ] && [ -e "$WORK/div/latest" ] && [ ! -e "$WORK/div/mpiformer.lock" ] &&
  ok "diverged (exit 4): lock released" || bad "divergence: exit $rc, $(ls "$WORK/div" | tr '\n' ' ')"
# Bad input found after the lock was taken (over): one error line, the note, the lock gone.
L=$WORK/late && write_lock "$L" "$HOST" "$dead" 12345
out=$("$MPIEXEC" -n 2 "$TRAIN" "${args[@]}" --steps 2 --save "$L" --data "$WORK/no_such_data.bin" 2>&1)
rc=$?
if [ $rc -eq 2 ] && [ "$(grep -c '^error:' <<<"$out")" -eq 1 ] && grep -q "^error: .*no_such_data.bin" <<<"$out" &&
  grep -q "^note: --save $L: took over the lock of the run on host $HOST (pid $dead)" <<<"$out" &&
  [ ! -e "$L/mpiformer.lock" ]; then
  ok "bad input after the lock was taken over: one error line, exit 2 on every rank, lock released"
else
  bad "bad input after the lock: exit $rc, $(grep -E 'note|error' <<<"$out"), $(ls "$L" | tr '\n' ' ')"
fi
kill $live 2>/dev/null
finish
