#!/usr/bin/env bash
# Checkpoints read back defensively. A damaged checkpoint (truncated, a checksum that fails, a
# wrong version, a NaN, `latest` naming nothing, a header that disagrees with its state file) or a
# resume that would change the run (model shape, seed, optimizer settings) stops before training
# with one error line naming the file and, where one exists, the newest intact checkpoint to use
# instead; exit status 2 on every rank. Saving never overwrites: not another run's checkpoints,
# not newer ones. A run that diverges stops before the update (status 4) and a save into a full
# file system fails cleanly (status 6): either way the last checkpoint and `latest` stay intact.
source "$(dirname "$0")/common.sh"

export OMP_NUM_THREADS=1
args=(--val-every 0 --layers 2 --dim 64 --heads 4 --seq-len 32 --batch 8)
"$TRAIN" "${args[@]}" --steps 4 --save "$WORK/good" --save-every 2 >"$WORK/good.log" 2>&1 ||
  { bad "the run that makes the checkpoints"; cat "$WORK/good.log"; }
C=$WORK/c
M4=$C/step_00000004/model_00000004.bin
O4=$C/step_00000004/optimizer_00000004.bin
S4=$C/step_00000004/state_00000004.txt
fresh() { rm -rf "$C" && cp -r "$WORK/good" "$C"; }  # an intact copy to damage
intact="newest intact checkpoint is $C/step_00000002: resume from it with --load $C --load-step 2"
# poke FILE BYTE_OFFSET FLOAT: overwrites one float of a binary file.
poke() {
  "$PY" -c "
import struct, sys
with open(sys.argv[1], 'r+b') as f:
    f.seek(int(sys.argv[2])); f.write(struct.pack('<f', float(sys.argv[3])))" "$@"
}
resume=("${args[@]}" --steps 6 --load "$C")
# resume_but FLAG: sets `but` to the resume command line without FLAG and its value, so a test
# can give FLAG another value (a flag is given once).
resume_but() {
  local i
  but=()
  for ((i = 0; i < ${#resume[@]}; i++)); do
    if [ "${resume[i]}" = "$1" ]; then i=$((i + 1)); else but+=("${resume[i]}"); fi
  done
}

fresh && truncate -s -4 "$M4"
expect_error "truncated model file" 2 "model_00000004.bin: size mismatch.*truncated.*$intact" -- "${resume[@]}"
fresh && rm "$O4"
expect_error "missing optimizer file" 1 "optimizer_00000004.bin: cannot open.*$intact" -- "${resume[@]}"
fresh && poke "$O4" $((1024 + 4 * 100)) 0.125
expect_error "optimizer state fails its checksum" 2 "optimizer_00000004.bin: tensor m of wte fails its checksum.*corrupt.*$intact" -- "${resume[@]}"
# qkvw's first element: after wte (256 x 64) and wpe (256 x 64), ln1w and ln1b (2 x 64 each).
qkvw=$((1024 + 4 * (256 * 64 * 2 + 4 * 64)))
fresh && poke "$M4" "$qkvw" 0.5
expect_error "parameters fail their checksum" 2 "model_00000004.bin: tensor qkvw fails its checksum.*$intact" -- "${resume[@]}"
fresh && poke "$M4" $((qkvw + 4 * (3 * 64 * 64 + 5))) nan
expect_error "a NaN parameter" 2 "model_00000004.bin: qkvw \(layer 1\) element 5 is not finite.*$intact" -- "${resume[@]}"
fresh && poke "$O4" $((1024 + 4 * 2 * 256 * 64 * 2)) inf
expect_error "an Inf in the optimizer state" 1 "optimizer_00000004.bin: (m|v) of .* is not finite" -- "${resume[@]}"
fresh && sed -i 's/^format = 1$/format = 2/' "$S4"
expect_error "state file of another format version" 2 "state_00000004.txt: format version 2.*reads version 1.*$intact" -- "${resume[@]}"
fresh && "$PY" -c "
import struct, sys
with open(sys.argv[1], 'r+b') as f:
    f.seek(4); f.write(struct.pack('<i', 7))" "$O4"
expect_error "optimizer file of another version" 1 "optimizer_00000004.bin: unsupported version 7.*$intact" -- "${resume[@]}"
fresh && sed -i 's/^model.channels = 64$/model.channels = 32/' "$S4"
expect_error "state file disagrees with the model file" 1 "holds model .*C64.*state file .*C32.*corrupt.*$intact" -- "${resume[@]}"
fresh && sed -i '/^data.train_position/d' "$S4"
expect_error "state file missing a field" 1 "'data.train_position' is missing" -- "${resume[@]}"
fresh && echo step_00000099 >"$C/latest"
expect_error "latest names a missing checkpoint" 2 "latest names step_00000099, which does not exist.*newest intact checkpoint is $C/step_00000004" -- "${resume[@]}"
fresh && echo garbage >"$C/latest"
expect_error "latest is garbage" 1 "latest: does not name a checkpoint.*garbage" -- "${resume[@]}"
# A `latest` of two lines is quoted on the one error line, its newline escaped.
fresh && printf 'step_00000004\nstep_00000002\n' >"$C/latest"
expect_error "latest of two lines" 1 'latest: does not name a checkpoint.*step_00000004\\nstep_00000002' -- "${resume[@]}"
out=$("$TRAIN" "${resume[@]}" 2>&1 >/dev/null)
[ "$(wc -l <<<"$out")" -eq 1 ] && ok "an error quoting two lines prints one line" ||
  bad "an error quoting two lines prints more than one line: $out"
# An incomplete step directory (empty, or its files empty) is never the one recommended.
fresh && truncate -s -4 "$M4" && mkdir "$C/step_00000003"
expect_error "an empty step dir is not recommended" 2 "size mismatch.*$intact" -- "${resume[@]}"
touch "$C/step_00000003/"{state_00000003.txt,model_00000003.bin,optimizer_00000003.bin}
expect_error "a step dir of empty files is not recommended" 1 "size mismatch.*$intact" -- "${resume[@]}"
# A `latest` the trainer did not write (none of its checkpoints beside it) is never replaced.
mkdir "$WORK/mine" && echo "my own notes" >"$WORK/mine/latest"
expect_error "--save over a user's latest" 1 "$WORK/mine/latest exists but .* holds no checkpoint.*move $WORK/mine/latest away" -- "${args[@]}" --steps 2 --save "$WORK/mine"
[ "$(cat "$WORK/mine/latest")" = "my own notes" ] && ok "the user's latest is untouched" ||
  bad "the user's latest was replaced: $(cat "$WORK/mine/latest")"
# --save is checked writable before training, not at the first save: a parent that is a file, a
# file system that takes no files (/proc, even for root), a read-only directory (not as root).
: >"$WORK/afile"
expect_error "--save under a file" 1 "--save $WORK/afile/ck: $WORK/afile is not a directory" -- "${args[@]}" --steps 2 --save "$WORK/afile/ck"
expect_error "--save where no file can be made" 1 "--save /proc/mpiformer-ck-$$: cannot create a file in /proc" -- "${args[@]}" --steps 2 --save "/proc/mpiformer-ck-$$"
if [ "$(id -u)" != 0 ]; then
  mkdir "$WORK/ro" && chmod 555 "$WORK/ro"
  expect_error "--save read-only" 2 "--save $WORK/ro: cannot create a file in $WORK/ro .*Permission denied" -- "${args[@]}" --steps 2 --save "$WORK/ro"
  chmod 755 "$WORK/ro"
fi
[ -z "$(ls -A "$WORK" | grep mpiformer-probe)" ] && ok "no probe file left behind" || bad "a probe file was left"
fresh && rm "$C/latest" && truncate -s -4 "$M4"
expect_error "no latest, the newest damaged" 1 "holds checkpoints \(steps 2, 4\) but no .latest.*--load-step.*$intact" -- "${resume[@]}"
fresh
expect_error "--load-step of a missing step" 1 "--load-step 3: .*step_00000003 does not exist; .* holds the steps 2, 4" -- "${resume[@]}" --load-step 3
resume_but --layers
expect_error "model shape changed on resume" 2 "--layers 3 differs from the checkpoint's 2.*drop --layers" -- "${but[@]}" --layers 3
expect_error "AdamW setting changed on resume" 2 "--beta2 0.9 differs from the checkpoint's 0.999.*pass --beta2 0.999" -- "${resume[@]}" --beta2 0.9
expect_error "seed changed on resume" 1 "--seed 7 differs from the checkpoint's 1337" -- "${resume[@]}" --seed 7
expect_error "--save over another run's checkpoints" 2 "--save $C already holds checkpoints of another run \(steps 2, 4\); pass --load $C" -- "${args[@]}" --save "$C"
expect_error "--save would collide with newer checkpoints" 1 "holds step_00000004, newer than the checkpoint this run resumes from \(step 2\)" -- "${resume[@]}" --load-step 2 --save "$C"
before=$(cd "$C" && find . -type f -exec sha256sum {} + | sort)
[ "$before" = "$(cd "$WORK/good" && find . -type f -exec sha256sum {} + | sort)" ] &&
  ok "refused runs left every checkpoint file as it was" || bad "a refused run changed a checkpoint file"

# --init-from of an llm.c file with one NaN weight stops before training (it used to train on,
# printing 'loss nan', and exit 0).
cp "$WORK/good/step_00000004/model_00000004.bin" "$WORK/nan.bin"
poke "$WORK/nan.bin" $((1024 + 4 * 77)) nan
expect_error "--init-from with a NaN weight" 2 "nan.bin: wte element 77 is not finite.*pass a finite one" -- --init-from "$WORK/nan.bin" --steps 1 --val-every 0

# ---- a checkpoint newer than `latest`: its save was cut off between the rename and `latest` ----
for case in "step_00000002" "(none)"; do
  fresh
  if [ "$case" = "(none)" ]; then rm "$C/latest"; else echo "$case" >"$C/latest"; fi
  out=$("$TRAIN" "${resume[@]}" --save "$C" 2>&1)
  if [ $? -eq 0 ] && grep -q "^note: $C/step_00000004 is newer than .*: resuming from it" <<<"$out" &&
    grep -q '^step 5/6' <<<"$out" && [ "$(cat "$C/latest")" = step_00000006 ]; then
    ok "latest $case, step_00000004 complete: resumed from step 4 (a save cut off before latest)"
  else
    bad "latest $case with step_00000004 complete: $(grep -E 'note|error' <<<"$out")"
  fi
done

# ---- the checkpoint is chosen once, by rank 0, and every rank reads that one ----
# Rank 1 runs in another directory whose copy of the checkpoints lags behind rank 0's as a node's
# view of a shared file system may: its `latest` still names step 2 (and step 6 is damaged, so it
# would not pick the newest itself). Rank 0 chooses step 4; rank 1 reads step 4 too.
fresh
echo step_00000004 >"$C/latest"
"$TRAIN" "${args[@]}" --load "$C" --steps 6 --save "$C" --save-every 2 >/dev/null 2>&1
echo step_00000004 >"$C/latest"
truncate -s -4 "$C/step_00000006/model_00000006.bin"
mkdir -p "$WORK/view0" "$WORK/view1"
rm -rf "$WORK/view0/ck" "$WORK/view1/ck"
cp -r "$C" "$WORK/view0/ck" && cp -r "$C" "$WORK/view1/ck"
echo step_00000002 >"$WORK/view1/ck/latest"
out=$("$MPIEXEC" -n 1 -wdir "$WORK/view0" "$TRAIN" "${args[@]}" --load ck --steps 7 : \
  -n 1 -wdir "$WORK/view1" "$TRAIN" "${args[@]}" --load ck --steps 7 2>&1)
if [ $? -eq 0 ] && grep -q "^resumed: ck/step_00000004, step 4 of 7" <<<"$out" && grep -q '^step 7/7' <<<"$out"; then
  ok "rank 1's view of latest lags: both ranks resume the step rank 0 chose (4)"
else
  bad "a lagging view on rank 1: $(grep -E 'error|note|resumed' <<<"$out")"
fi

# ---- --keep-last, and what interrupted saves left behind ----
# A cut-off save of a pid on this host that no longer runs is removed; one of another host may be
# a save in progress (on a shared file system), so it stays (tests/cli/save_lock.sh has the rest).
fresh
host=$(hostname | sed 's/[^A-Za-z0-9._-]/_/g')
sh -c 'exit 0' &
gone=$!
wait $gone
mkdir "$C/step_00000005.partial-nojob-$host-$gone" "$C/step_00000006.partial-nojob-elsewhere-1"
touch "$C/step_00000005.partial-nojob-$host-$gone/model_00000005.bin" "$C/latest.partial-nojob-$host-$gone"
echo "my notes" >"$C/step_00000002/notes.txt"
out=$("$TRAIN" "${args[@]}" --load "$C" --steps 8 --save "$C" --save-every 1 --keep-last 2 2>&1)
if [ $? -eq 0 ] &&
  [ "$(ls "$C" | tr '\n' ' ')" = "latest step_00000002 step_00000006.partial-nojob-elsewhere-1 step_00000007 step_00000008 " ] &&
  [ "$(ls "$C/step_00000002")" = notes.txt ] &&
  grep -q "^note: removed $C/step_00000005.partial-nojob-$host-$gone, a cut-off save: pid $gone no longer runs" <<<"$out" &&
  grep -q "^note: removed $C/latest.partial-nojob-$host-$gone, a cut-off save" <<<"$out" &&
  grep -q "^note: kept $C/step_00000006.partial-nojob-elsewhere-1: its writer (pid 1 on elsewhere) may still be saving" <<<"$out" &&
  grep -q "^checkpoint: removed $C/step_00000004 (--keep-last 2)" <<<"$out" &&
  grep -q "^checkpoint: $C/step_00000002 was kept: it holds files this program did not write" <<<"$out"; then
  ok "--keep-last 2 keeps steps 7 and 8, removes the rest but a user's file; a gone writer's cut-off saves removed, another host's kept"
else
  bad "--keep-last 2: $(ls "$C" | tr '\n' ' '); $(grep -E 'checkpoint:|note:' <<<"$out")"
fi

# ---- what a resume may change, and how it says so ----
fresh
resume_but --batch
out=$("$TRAIN" "${but[@]}" --batch 4 2>&1)
if [ $? -eq 0 ] && grep -q "^warning: --batch 4 --seq-len 32 differ from the checkpoint's 8 x 32: the data continue at token" <<<"$out" &&
  grep -q '^step 5/6' <<<"$out"; then
  ok "--batch changed on resume: a warning saying where the data continue, then training"
else
  bad "--batch changed on resume: $(grep -E 'warning|error' <<<"$out")"
fi
# A run that diverged resumes with a lower --lr (the divergence message says so): the schedule and
# the clipping may change, each with a warning naming the old and the new value.
fresh
out=$("$TRAIN" "${resume[@]}" --lr 0.0005 --warmup 2 --grad-clip 0.5 2>&1)
if [ $? -eq 0 ] && grep -q "^warning: --lr 0.0005 differs from the checkpoint's 0.001: the resumed run uses 0.0005 from step 5 on" <<<"$out" &&
  grep -q "^warning: --warmup 2 differs from the checkpoint's 0" <<<"$out" &&
  grep -q "^warning: --grad-clip 0.5 differs from the checkpoint's 1" <<<"$out" &&
  grep -q '^step 5/6' <<<"$out"; then
  ok "--lr, --warmup, --grad-clip changed on resume: warnings naming old and new, then training"
else
  bad "--lr changed on resume: $(grep -E 'warning|error|^step 5' <<<"$out")"
fi
out=$("$TRAIN" "${args[@]}" --steps 2 --load "$WORK/nothing_yet" --save "$WORK/nothing_yet" 2>&1)
if [ $? -eq 0 ] && grep -q "^note: --load $WORK/nothing_yet: no checkpoint yet" <<<"$out" &&
  [ "$(cat "$WORK/nothing_yet/latest")" = step_00000002 ]; then
  ok "--load of a directory without checkpoints starts a new run (the job script's first job)"
else
  bad "--load without checkpoints: $out"
fi
for again in 1 2; do
  out=$("$TRAIN" "${args[@]}" --load "$WORK/nothing_yet" --save "$WORK/nothing_yet" \
    --save-llmc "$WORK/nothing_yet.bin" 2>&1)
  if [ $? -eq 0 ] && grep -q "resumed at step 2 of --steps 2: the run is complete" <<<"$out"; then
    ok "resuming a finished run (with --save-llmc) trains nothing and exits 0 (time $again)"
  else
    bad "resuming a finished run, time $again: $out"
  fi
done
# The data are the checkpoint's unless given: a run on a text file resumes on it.
yes "a resumed run reads where the saved one read." | head -c 100000 >"$WORK/text.txt"
"$TRAIN" "${args[@]}" --data "$WORK/text.txt" --steps 2 --save "$WORK/t" >/dev/null 2>&1
out=$("$TRAIN" --load "$WORK/t" --steps 3 2>&1)
if [ $? -eq 0 ] && grep -q "^data: $WORK/text.txt " <<<"$out" && grep -q "^step 3/3" <<<"$out"; then
  ok "--data and --val-data come from the checkpoint when not given"
else
  bad "resume without --data: $(grep -E '^data|warning|error' <<<"$out")"
fi

# ---- the node-local tier: each rank's own shard, resumed from on the same layout ----
# A job killed during step 7 leaves the global checkpoint of step 4 and the local shards of step 6:
# the state a run to step 7 leaves once its last save (step 7's) is taken away, as here.
L=$WORK/local
local_run() { # local_run RANKS LOG ARGS...: the 8-step run with both tiers into $L
  local n=$1 log=$2
  shift 2
  "$MPIEXEC" -n "$n" "$TRAIN" --val-every 0 --layers 2 --dim 64 --heads 4 --seq-len 32 --batch 2 \
    --lr-decay-steps 8 --save "$L/ck" --load "$L/ck" --save-every 4 --save-local "$L/loc" \
    --save-local-every 2 "$@" >"$WORK/$log" 2>&1
}
"$MPIEXEC" -n 2 "$TRAIN" --val-every 0 --layers 2 --dim 64 --heads 4 --seq-len 32 --batch 2 \
  --steps 8 --save-llmc "$WORK/whole.bin" >"$WORK/whole.log" 2>&1 || bad "the uninterrupted run"
local_run 2 cut.log --steps 7 || bad "the run that writes local shards: $(tail -2 "$WORK/cut.log")"
rm -r "$L/ck/step_00000007" && echo step_00000004 >"$L/ck/latest" && cp -r "$L" "$WORK/local0"
shards=$(ls "$L/loc")
if [ "$(wc -l <<<"$shards")" -eq 2 ] && [ "$(grep -c 'step_00000006-rank_0000[01]$' <<<"$shards")" -eq 2 ]; then
  ok "only the newest complete local set is kept: step 6's shard of each rank"
else
  bad "local shards after the run: $shards"
fi
if local_run 2 local.log --steps 8 --save-llmc "$WORK/local.bin" &&
  grep -q "^resumed: the local shards of step 6 in $L/loc (newer than $L/ck/step_00000004), step 6 of 8" "$WORK/local.log" &&
  grep -q "^checkpoints: $L/ck, every 4 steps and at the end; each rank's shard into $L/loc on its node every 2 steps$" "$WORK/local.log" &&
  [ "$(numbers "$WORK/local.log")" = "$(numbers "$WORK/whole.log" | tail -2)" ] &&
  cmp -s "$WORK/local.bin" "$WORK/whole.bin"; then
  ok "a restart resumes from the local shards of step 6: steps 7-8 and the model bit for bit"
else
  bad "resume from local shards: $(grep -E '^(resumed|warning|error)' "$WORK/local.log")"
fi
if local_run 2 dry.log --steps 8 --dry-run &&
  grep -q "^dry run: each rank's shard into $L/loc on its node every 2 steps" "$WORK/dry.log"; then
  ok "--dry-run says where the local shards go"
else
  bad "--dry-run with --save-local: $(grep -E '^(dry run|error)' "$WORK/dry.log")"
fi
# local_fallback NAME PATTERN RANKS: from the global checkpoint of step 4, with one line saying why.
local_fallback() {
  local lines
  lines=$(grep -cE "^(warning|note): .*$L/loc" "$WORK/fallback.log")
  if [ "$rc" -eq 0 ] && [ "$lines" -eq 1 ] && grep -qE "$2" "$WORK/fallback.log" &&
    grep -q "^resumed: $L/ck/step_00000004, step 4 of 8" "$WORK/fallback.log" &&
    grep -q "^step 8/8" "$WORK/fallback.log" &&
    { [ "$3" -ne 2 ] || [ "$(numbers "$WORK/fallback.log")" = "$(numbers "$WORK/whole.log" | tail -4)" ]; }; then
    ok "$1: every rank resumes from the global checkpoint, one line says why"
  else
    bad "$1: exit $rc, $lines lines: $(grep -E '^(resumed|warning|note|error)' "$WORK/fallback.log")"
  fi
}
rm -rf "$L" && cp -r "$WORK/local0" "$L" && shard=$(ls "$L"/loc/*rank_00001) &&
  poke "$shard" $(($(stat -c %s "$shard") / 2)) 0.25
local_run 2 fallback.log --steps 8
rc=$?
local_fallback "rank 1's local shard damaged" "^warning: the local shards in $L/loc are not used: rank 1's shard of step 6 .* fails its checksum.*; every rank resumes from the global checkpoint $L/ck/step_00000004$" 2
rm -rf "$L" && cp -r "$WORK/local0" "$L" && rm "$L"/loc/*rank_00001
local_run 2 fallback.log --steps 8
rc=$?
local_fallback "rank 1's local shard missing" "^warning: the local shards in $L/loc are not used: rank 1 has no shard newer than step 4 .*\(missing\)" 2
rm -rf "$L" && cp -r "$WORK/local0" "$L"
local_run 1 fallback.log --steps 8
rc=$?
local_fallback "another layout (1 rank)" "^warning: --save-local $L/loc holds local shards of this run written by another layout.*never used to reshard" 1

# A divergence names what a restart would resume from: resumed from the local shards of step 6,
# diverged at step 7 before any save, it names them (not a global step_00000006, which does not
# exist); a run that wrote local shards of step 6 after the global step 4 names the shards too.
rm -rf "$L" && cp -r "$WORK/local0" "$L"
MPIFORMER_TEST_FAULT=7:0:inf local_run 2 div_local.log --steps 8
rc=$?
rm -rf "$L"
MPIFORMER_TEST_FAULT=7:0:inf local_run 2 div_local2.log --steps 8
rc2=$?
shards_named="newest checkpoint is the local shards of step 6 in $L/loc"
if [ "$rc" -eq 4 ] && [ "$rc2" -eq 4 ] &&
  grep -q "^error: step 7: .*training diverged.*$shards_named (newer than $L/ck/step_00000004): resume from it" "$WORK/div_local.log" &&
  grep -q "^error: step 7: .*training diverged.*$shards_named: resume from it" "$WORK/div_local2.log"; then
  ok "a divergence after local shards names them: resumed from them, and written after the global step 4"
else
  bad "a divergence after local shards: exit $rc, $rc2: $(grep -h '^error' "$WORK/div_local.log" "$WORK/div_local2.log")"
fi

# A run that goes back (--load-step) removes the local shards of the history it left at once: a
# restart before its own first local save must not return to them.
rm -rf "$L" && cp -r "$WORK/local0" "$L"
if local_run 2 back.log --steps 5 --load-step 4 && grep -q "^resumed: $L/ck/step_00000004" "$WORK/back.log" &&
  [ -z "$(ls -A "$L/loc")" ]; then
  ok "--load-step 4: the local shards of step 6 are removed at start"
else
  bad "--load-step 4 with local shards of step 6: $(grep -E '^(resumed|error)' "$WORK/back.log"); left: $(ls "$L/loc")"
fi
# With ZeRO-1 a rank holds its share of the moments only, and a pipeline stage its own blocks:
# each rank's shard is of its own sizes, all of one layout; under Muon its v holds AdamW's
# segments only, fewer floats than its m.
for layout in "--zero 1" "--pp 2 --microbatches 2" "--zero 1 --optimizer muon"; do
  read -ra lay <<<"$layout"
  "$MPIEXEC" -n 2 "$TRAIN" --val-every 0 --layers 2 --dim 64 --heads 4 --seq-len 32 --batch 2 \
    --steps 8 "${lay[@]}" >"$WORK/whole_lay.log" 2>&1 || bad "the uninterrupted $layout run"
  rm -rf "$L" && local_run 2 cut_lay.log --steps 7 "${lay[@]}" &&
    rm -r "$L/ck/step_00000007" && echo step_00000004 >"$L/ck/latest"
  if local_run 2 local_lay.log --steps 8 "${lay[@]}" &&
    grep -q "^resumed: the local shards of step 6 in $L/loc" "$WORK/local_lay.log" &&
    [ "$(numbers "$WORK/local_lay.log")" = "$(numbers "$WORK/whole_lay.log" | tail -2)" ]; then
    ok "$layout: a restart resumes from the local shards of step 6, steps 7-8 bit for bit"
  else
    bad "$layout: resume from local shards: $(grep -E '^(resumed|warning|error)' "$WORK/local_lay.log")"
  fi
done

# ---- a run that diverges stops before the update; the last checkpoint stays the newest ----
out=$("$TRAIN" "${args[@]}" --steps 6 --lr 1e6 --save "$WORK/div" --save-every 1 2>&1)
rc=$?
line=$(grep '^error:' <<<"$out")
if [ $rc -eq 4 ] && grep -qE "^error: step ([0-9]+): loss .*training diverged; the update was not applied.*newest checkpoint is $WORK/div/step_" <<<"$line"; then
  diverged=$(sed -E 's/^error: step ([0-9]+):.*/\1/' <<<"$line")
  if [ "$(cat "$WORK/div/latest")" = "$(printf 'step_%08d' $((diverged - 1)))" ] &&
    [ ! -e "$WORK/div/$(printf 'step_%08d' "$diverged")" ]; then
    ok "--lr 1e6 diverges at step $diverged: exit 4, nothing saved after step $((diverged - 1))"
  else
    bad "after divergence at step $diverged, latest is $(cat "$WORK/div/latest")"
  fi
else
  bad "--lr 1e6: exit $rc, $line"
fi
# Diverged while the background write of step 2 is in flight (2 s slow): the write is finished
# and the message names the checkpoint it published.
MPIFORMER_TEST_SAVE_DELAY=2:2 MPIFORMER_TEST_FAULT=3:0:inf "$TRAIN" "${args[@]}" --steps 4 \
  --save "$WORK/div2" --save-every 2 >"$WORK/div2.log" 2>&1
rc=$?
if [ $rc -eq 4 ] && [ "$(cat "$WORK/div2/latest")" = step_00000002 ] &&
  grep -q "^error: step 3: .*training diverged.*newest checkpoint is $WORK/div2/step_00000002: resume" "$WORK/div2.log"; then
  ok "diverged with a background write in flight: the message names the checkpoint it published"
else
  bad "diverged with a write in flight: exit $rc: $(grep '^error' "$WORK/div2.log")"
fi

finish
