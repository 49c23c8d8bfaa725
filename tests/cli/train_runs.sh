#!/usr/bin/env bash
# The trainer as a user runs it: the loss falls, a run is reproducible bit for bit, it
# resumes from a saved model, and text files train.
source "$(dirname "$0")/common.sh"

losses() { grep -E '^step ' "$1" | sed -E 's/.*\| loss ([0-9.]+) .*/\1/'; }
# run LOG CMD...: CMD's output into LOG; an exit other than 0 fails on its own, so no comparison
# below can pass on a run that crashed (an empty loss list differs from any other, for one).
run() {
  local log=$1 rc
  shift
  "$@" >"$log" 2>&1
  rc=$?
  [ "$rc" -eq 0 ] || { bad "$(basename "$log"): exit $rc"; tail -n 5 "$log"; }
  return "$rc"
}

# 1. The default job on 2 ranks: loss falls well below the uniform ln(256) = 5.545.
run "$WORK/default.log" timeout 300 "$MPIEXEC" -n 2 "$TRAIN" --steps 60 --val-every 30
first=$(losses "$WORK/default.log" | head -1)
last=$(losses "$WORK/default.log" | tail -1)
if "$PY" -c "import sys; sys.exit(0 if $last < $first - 1.5 else 1)"; then
  ok "default run: loss $first -> $last"
else
  bad "default run: loss $first -> $last did not fall by 1.5"; cat "$WORK/default.log"
fi
grep -q '^val step 60 | loss' "$WORK/default.log" && ok "validation logged" || bad "no val line"
grep -qE '^step 60/60 \| loss [0-9.]+ \| lr [0-9.e+-]+ \| norm [0-9.]+ \| [0-9.]+ ms \| [0-9]+ tok/s \| MFU [0-9.]+%$' \
  "$WORK/default.log" && ok "step line format" || bad "step line format"

# 2. Same seed and layout: bitwise identical losses (and thread count does not matter).
args=(--steps 6 --val-every 0 --layers 2 --dim 64 --heads 2)
run "$WORK/a.log" env OMP_NUM_THREADS=2 "$TRAIN" "${args[@]}"
run "$WORK/b.log" env OMP_NUM_THREADS=1 "$TRAIN" "${args[@]}" --threads 1
run "$WORK/c.log" env OMP_NUM_THREADS=2 "$TRAIN" "${args[@]}" --seed 7
if [ -n "$(losses "$WORK/a.log")" ] && [ "$(losses "$WORK/a.log")" = "$(losses "$WORK/b.log")" ]; then
  ok "same seed: identical losses across runs and thread counts"
else
  bad "same seed gave different losses"; paste <(losses "$WORK/a.log") <(losses "$WORK/b.log")
fi
if [ "$(losses "$WORK/c.log" | wc -l)" -eq 6 ] && [ "$(losses "$WORK/a.log")" != "$(losses "$WORK/c.log")" ]; then
  ok "another seed differs"
else
  bad "seed 7: $(losses "$WORK/c.log" | wc -l) of 6 steps, or the same losses as the default seed"
fi

# 3. A model to resume from (the layouts' equivalence to this serial run is tests/mpi/layouts.sh).
args=(--steps 5 --val-every 0 --layers 2 --dim 64 --heads 4 --batch 8 --seq-len 32)
run "$WORK/serial.log" env OMP_NUM_THREADS=1 "$TRAIN" "${args[@]}" --save-llmc "$WORK/serial.bin"

# 4. A saved model resumes: its first loss is the saved run's level, not a fresh model's.
run "$WORK/resume.log" env OMP_NUM_THREADS=2 "$TRAIN" --init-from "$WORK/serial.bin" --steps 2 --val-every 0 --batch 8 --seq-len 32
r=$(losses "$WORK/resume.log" | head -1)
s=$(losses "$WORK/serial.log" | tail -1)
if [ -n "$r" ] && "$PY" -c "import sys; sys.exit(0 if $r < 5.3 and abs($r - $s) < 0.5 else 1)"; then
  ok "resume from --save-llmc: loss $r (saved run ended at $s)"
else
  bad "resume: first loss '$r' vs saved run's $s"; cat "$WORK/resume.log"
fi

# 5. Activation lifetime: with M microbatches, 1F1B on one stage holds one microbatch's
#    activations at a time, AFAB all M.
peak() { sed -nE 's/^stage 0 \| peak in flight ([0-9.]+) microbatches.*/\1/p' "$1"; }
for sched in 1f1b afab; do
  run "$WORK/$sched.log" env OMP_NUM_THREADS=1 "$TRAIN" --steps 1 --val-every 0 --batch 8 \
    --microbatches 4 --schedule "$sched"
done
if [ "$(peak "$WORK/1f1b.log")" = 1 ] && [ "$(peak "$WORK/afab.log")" = 4 ]; then
  ok "peak activations: 1f1b 1 microbatch, afab 4"
else
  bad "peak activations: 1f1b '$(peak "$WORK/1f1b.log")', afab '$(peak "$WORK/afab.log")'"
fi

# 6. A plain text file trains byte-level.
yes "the quick brown fox jumps over the lazy dog." | head -c 200000 >"$WORK/text.txt"
run "$WORK/text.log" env OMP_NUM_THREADS=2 "$TRAIN" --data "$WORK/text.txt" --steps 30 --layers 2 --dim 64 --heads 2
first=$(losses "$WORK/text.log" | head -1)
last=$(losses "$WORK/text.log" | tail -1)
if [ -n "$last" ] && "$PY" -c "import sys; sys.exit(0 if $last < $first - 1.0 else 1)"; then
  ok "text file: loss $first -> $last"
else
  bad "text file: loss $first -> $last"; cat "$WORK/text.log"
fi
# --doc-mask takes the document token from mpiformer-tokenize's manifest beside --data: one that
# ends each document (an end-of-sequence token) masks otherwise than one that starts it.
mkdir -p "$WORK/eos"
make_shard "$WORK/eos/data_train_000000.bin" 4000 255
first_loss() { grep -m1 '^step 1/' "$1" | sed -E 's/.*loss ([0-9.]+).*/\1/'; }
for placement in before after; do
  printf '{"tokenizer": {"vocab_size": 256}, "doc_token": {"text": "</s>", "id": 2, "placement": "%s every document"}}\n' \
    "$placement" >"$WORK/eos/manifest.json"
  "$TRAIN" --data "$WORK/eos/data_train_000000.bin" --doc-mask --steps 1 --layers 2 --dim 64 \
    --heads 4 --seq-len 32 --batch 4 --val-data none --threads 1 >"$WORK/eos_$placement.log" 2>&1
done
verb() { grep -oE "a document (starts|ends) at each token 2" "$WORK/eos_$1.log"; }
if [ "$(verb before)" = "a document starts at each token 2" ] &&
  [ "$(verb after)" = "a document ends at each token 2" ] &&
  [ -n "$(first_loss "$WORK/eos_after.log")" ] &&
  [ "$(first_loss "$WORK/eos_before.log")" != "$(first_loss "$WORK/eos_after.log")" ]; then
  ok "--doc-mask from the manifest: a token before or after each document ($(first_loss "$WORK/eos_before.log") vs $(first_loss "$WORK/eos_after.log"))"
else
  bad "--doc-mask from the manifest: $(verb before) / $(verb after); losses $(first_loss "$WORK/eos_before.log") $(first_loss "$WORK/eos_after.log")"
fi
finish
