#!/usr/bin/env bash
# Evaluation in the loop (--eval-data, --eval-every) and mpiformer-eval: the eval lines at step 0,
# every N steps and after the last, in the log and --metrics; the trained model's scores the same
# when mpiformer-eval reads the saved file, on one rank, TP 2, PP 2, CP 2 and DP 2, and in a PP 2
# training run; mpiformer-eval's memory plan without gradients or optimizer state; a model with a
# vocabulary under 256 scored without reading any training data; and every bad eval input refused
# with one error line.
source "$(dirname "$0")/common.sh"
EVAL=${MPIFORMER_EVAL:?set MPIFORMER_EVAL to the mpiformer-eval binary}
export OMP_NUM_THREADS=1
HERE=$(dirname "$0")
"$PY" "$HERE/make_eval_file.py" "$WORK/eval.bin" 10 256 5
args=(--layers 2 --dim 64 --heads 4 --seq-len 32 --batch 8 --steps 4 --val-every 0 --threads 1
      --eval-data "$WORK/eval.bin" --eval-every 2)

# The "(k/n)" counts of an eval line at STEP in a log.
counts() { grep -E "^eval step $2 \|" "$1" | grep -oE '\([0-9]+/[0-9]+\)' | tr '\n' ' '; }

"$TRAIN" "${args[@]}" --metrics "$WORK/m.jsonl" --save-llmc "$WORK/model.bin" >"$WORK/train.log" 2>&1
rc=$?
steps=$(grep -oE '^eval step [0-9]+' "$WORK/train.log" | awk '{print $3}' | tr '\n' ' ')
if [ "$rc" -eq 0 ] && [ "$steps" = "0 2 4 " ]; then
  ok "eval lines at steps 0, 2 and 4: $(grep -m1 '^eval step 4' "$WORK/train.log")"
else
  bad "training with --eval-data: exit $rc, eval lines at steps '$steps'"
fi
records=$("$PY" -c '
import json, sys
r = [json.loads(l) for l in open(sys.argv[1]) if "\"eval\"" in l]
print(" ".join("%d:%d:%.4f:%.4f" % (x["step"], x["examples"], x["acc"], x["acc_norm"]) for x in r if x["kind"] == "eval"))' "$WORK/m.jsonl")
[ "$(wc -w <<<"$records")" -eq 3 ] && grep -q '^0:10:' <<<"$records" &&
  ok "--metrics: eval records $records" || bad "--metrics eval records: '$records'"

# The saved model scores as the run's last eval did, on every layout.
want=$(counts "$WORK/train.log" 4)
for layout in "1" "2 --tp 2" "2 --pp 2" "2 --cp 2" "2 --dp 2"; do
  read -r ranks extra <<<"$layout"
  # shellcheck disable=SC2086
  out=$(timeout 120 "$MPIEXEC" -n "$ranks" "$EVAL" --init-from "$WORK/model.bin" --batch 8 \
        --seq-len 32 --eval-data "$WORK/eval.bin" $extra --threads 1 2>&1)
  got=$(counts <(echo "$out") 0)
  [ -n "$want" ] && [ "$got" = "$want" ] && ok "mpiformer-eval ($ranks rank(s) $extra): $got" ||
    bad "mpiformer-eval ($ranks rank(s) $extra): '$got', the run's last eval '$want': $out"
done

# mpiformer-eval builds the model alone: its memory plan (shown by a refusal) holds the parameters
# and no gradients or optimizer state, where a training run's of the same model holds both.
plan_of() { grep -oE 'predicted peak .*' <<<"$1"; }
ev=$("$EVAL" --init-from "$WORK/model.bin" --batch 8 --seq-len 32 --eval-data "$WORK/eval.bin" \
     --threads 1 --memory-per-rank 0.001 2>&1)
tr=$("$TRAIN" "${args[@]}" --memory-per-rank 0.001 2>&1)
if plan_of "$ev" | grep -q 'parameters' && ! plan_of "$ev" | grep -qE 'gradients|optimizer' &&
  plan_of "$tr" | grep -q 'gradients .* optimizer'; then
  ok "mpiformer-eval's memory plan, the model alone: $(plan_of "$ev")"
else
  bad "mpiformer-eval's memory plan: '$(plan_of "$ev")'; training's: '$(plan_of "$tr")'"
fi

# The same run on PP 2 scores the same at every eval.
timeout 120 "$MPIEXEC" -n 2 "$TRAIN" "${args[@]}" --pp 2 >"$WORK/pp.log" 2>&1
for s in 0 2 4; do
  a=$(counts "$WORK/train.log" $s) b=$(counts "$WORK/pp.log" $s)
  [ -n "$a" ] && [ "$a" = "$b" ] && ok "--pp 2 eval at step $s: $b" ||
    bad "--pp 2 eval at step $s: '$b', one rank '$a'"
done

# mpiformer-eval reads the model and the task alone, never training data: a model whose
# vocabulary (67 tokens) is smaller than the built-in corpus's byte values scores a task encoded
# for it, from its llm.c file and from a checkpoint whose --data is gone; a task holding a token
# past that vocabulary is one error line naming the file. mpiformer-train keeps its data check.
make_shard "$WORK/small.bin" 4096 66
"$TRAIN" --layers 2 --dim 64 --heads 4 --seq-len 32 --batch 2 --steps 1 --val-every 0 --threads 1 \
  --vocab 67 --data "$WORK/small.bin" --save-llmc "$WORK/small_model.bin" --save "$WORK/small_ck" \
  >"$WORK/small.log" 2>&1 || bad "training a 67-token model: $(tail -3 "$WORK/small.log")"
rm -f "$WORK/small.bin"
"$PY" "$HERE/make_eval_file.py" "$WORK/eval67.bin" 6 67 3
for model in "--init-from $WORK/small_model.bin" "--load $WORK/small_ck"; do
  # shellcheck disable=SC2086
  out=$("$EVAL" $model --batch 4 --seq-len 32 --eval-data "$WORK/eval67.bin" --threads 1 2>&1)
  rc=$?
  [ "$rc" -eq 0 ] && grep -qE '^eval step [0-9]+ \| eval67.bin \| 6 examples \| acc ' <<<"$out" &&
    ok "mpiformer-eval $model (vocabulary 67): $(grep '^eval step' <<<"$out")" ||
    bad "mpiformer-eval $model (vocabulary 67): exit $rc: $out"
done
"$PY" "$HERE/make_eval_file.py" "$WORK/eval80.bin" 20 80 3
expect_error_from "$EVAL" "mpiformer-eval, a task token past the model's vocabulary" 2 \
  "eval file eval80.bin holds token [0-9]+, outside the model's vocabulary of 67.*encode the task with this model's tokenizer" \
  -- --init-from "$WORK/small_model.bin" --eval-data "$WORK/eval80.bin" --batch 4 --seq-len 32 --tp 2 --threads 1
expect_error "mpiformer-train --vocab 67 on the built-in corpus" 1 "builtin:train: token [0-9]+ .*>= vocab 67.*--vocab" \
  -- --vocab 67 --steps 1 --val-every 0 --threads 1

# Bad inputs: one error line each, exit 2.
for defect in label truncated delimiter count; do
  "$PY" "$HERE/make_eval_file.py" "$WORK/$defect.bin" 6 256 1 "$defect"
done
expect_error "label past the endings" 1 "label 4 of 4 endings" -- --steps 1 --eval-data "$WORK/label.bin"
expect_error "truncated eval file" 2 "truncated|past the file|runs past" -- --steps 1 --eval-data "$WORK/truncated.bin"
expect_error "bad delimiter" 1 "65535" -- --steps 1 --eval-data "$WORK/delimiter.bin"
expect_error "header count too large" 1 "cut short|truncated" -- --steps 1 --eval-data "$WORK/count.bin"
printf 'not an eval file\n' >"$WORK/text.txt"
expect_error "neither format" 1 "neither llm.c's eval file" -- --steps 1 --eval-data "$WORK/text.txt"
printf '{"ctx": "a b", "endings": ["c"], "label": 0}\n' >"$WORK/e.jsonl"
expect_error "JSONL without --tokenizer" 1 "pass --tokenizer" -- --steps 1 --eval-data "$WORK/e.jsonl"
"$PY" "$HERE/make_tokenizer.py" "$WORK/tok.json" small
printf '{"ctx": "a b", "endings": ["c", "d"], "label": 2}\n' >"$WORK/l.jsonl"
expect_error "JSONL label" 1 "line 1.*label" -- --steps 1 --eval-data "$WORK/l.jsonl" --tokenizer "$WORK/tok.json"
# A UTF-8 byte order mark before the first line is passed over: the file is read as JSONL.
printf '\xef\xbb\xbf{"ctx": "a b", "endings": ["c", "d"], "label": 2}\n' >"$WORK/bom.jsonl"
expect_error "JSONL after a byte order mark" 1 "bom.jsonl line 1.*label" -- --steps 1 --eval-data "$WORK/bom.jsonl" --tokenizer "$WORK/tok.json"
expect_error "seq-len too short" 1 "more than --seq-len 8: use --seq-len 16" -- --steps 1 --seq-len 8 --eval-data "$WORK/eval.bin"
"$PY" "$HERE/make_eval_file.py" "$WORK/big.bin" 4 300 1
expect_error "tokens outside the vocabulary" 1 "outside the model's vocabulary" -- --steps 1 --eval-data "$WORK/big.bin"
expect_error "--eval-every alone" 1 "--eval-every applies to --eval-data" -- --steps 1 --eval-every 2
mkfifo "$WORK/fifo"
expect_error "a FIFO as --eval-data" 2 "not a regular file|FIFO" -- --steps 1 --eval-data "$WORK/fifo"
expect_error_from "$EVAL" "mpiformer-eval without a model" 1 "--init-from" -- --eval-data "$WORK/eval.bin"
expect_error_from "$EVAL" "mpiformer-eval refuses a training flag" 1 "--lr" -- --init-from "$WORK/model.bin" --eval-data "$WORK/eval.bin" --lr 0.1
touch "$WORK/taken.jsonl"
expect_error_from "$EVAL" "--eval-details over a file" 1 "taken.jsonl" -- --init-from "$WORK/model.bin" --eval-data "$WORK/eval.bin" --eval-details "$WORK/taken.jsonl" --seq-len 32
# --load without a checkpoint would score a random model: refused, as mpiformer-generate does; and
# two models (a training run's resume-else-start pair) leave open which one a score is of.
mkdir "$WORK/no_checkpoints"
expect_error_from "$EVAL" "mpiformer-eval --load of a missing directory" 2 "--load .*/gone: no such directory" -- --load "$WORK/gone" --eval-data "$WORK/eval.bin" --seq-len 32
expect_error_from "$EVAL" "mpiformer-eval --load of an empty directory" 1 "--load .*/no_checkpoints: holds no checkpoint" -- --load "$WORK/no_checkpoints" --eval-data "$WORK/eval.bin" --seq-len 32
expect_error_from "$EVAL" "mpiformer-eval --init-from and --load" 1 "--init-from and --load both name a model" -- --init-from "$WORK/model.bin" --load "$WORK/no_checkpoints" --eval-data "$WORK/eval.bin" --seq-len 32

# A stop signal to one rank (SIGUSR1, Slurm's warning) ends the scoring at the next batch, as it
# stops training: a line saying so, no score and no --eval-details, status 3.
"$PY" "$HERE/make_eval_file.py" "$WORK/long.bin" 20000 256 5
timeout 60 "$MPIEXEC" -n 2 "$EVAL" --init-from "$WORK/model.bin" --eval-data "$WORK/long.bin" --batch 8 \
  --seq-len 32 --dp 2 --threads 1 --eval-details "$WORK/long.jsonl" >"$WORK/long.log" 2>&1 &
job=$!
wait_for "$WORK/long.log" '^scoring ' && pid=$(rank_pid "$WORK/long.bin" 1) && kill -USR1 "$pid"
wait $job
status=$?
if [ "$status" -eq 3 ] && grep -qE '^SIGUSR1 received: scoring stopped after [0-9]+ of 20000 examples; no score' "$WORK/long.log" &&
  ! grep -q '^eval step' "$WORK/long.log" && [ ! -e "$WORK/long.jsonl" ]; then
  ok "mpiformer-eval, SIGUSR1 to rank 1 while scoring: $(grep '^SIGUSR1' "$WORK/long.log")"
else
  bad "mpiformer-eval, SIGUSR1 while scoring: exit $status: $(tail -3 "$WORK/long.log")"
fi
finish
