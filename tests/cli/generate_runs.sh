#!/usr/bin/env bash
# mpiformer-generate as a user runs it: the KV cache gives the ids of recomputing the whole prefix,
# tensor parallel those of one rank, a seed its own draw; the text on stdout is the ids decoded
# (bytes, or a tokenizer's pieces), generation stops at end-of-text and at max_seq_len; --load
# reads a training checkpoint; a model trained by `make run`'s configuration writes words of the
# built-in corpus, and mpiformer-train --sample-every prints such samples without changing a
# single training number.
source "$(dirname "$0")/common.sh"
: "${GENERATE:?set MPIFORMER_GENERATE to the mpiformer-generate binary}"
SOURCE_DIR=${MPIFORMER_SOURCE_DIR:?set MPIFORMER_SOURCE_DIR to the source tree}
export OMP_NUM_THREADS=1

# gen NAME ARGS...: runs the generator (ids to $WORK/NAME.ids, text to .out, notes to .err).
gen() {
  local name=$1
  shift
  timeout 120 "$GENERATE" --tokens-out "$WORK/$name.ids" "$@" >"$WORK/$name.out" 2>"$WORK/$name.err" ||
    { bad "$name: exit status $?"; cat "$WORK/$name.err"; }
}
same_ids() {  # same_ids WHAT A B
  if [ -s "$WORK/$2.ids" ] && cmp -s "$WORK/$2.ids" "$WORK/$3.ids"; then
    ok "$1: $(tr ',' '\n' <"$WORK/$2.ids" | wc -l) ids equal"
  else
    bad "$1: ids differ"; cat "$WORK/$2.ids" "$WORK/$3.ids"
  fi
}

# 1. A small model after 20 steps (not yet fluent, so its choices are not all alike).
"$TRAIN" --steps 20 --val-every 0 --layers 2 --dim 64 --heads 4 --save-llmc "$WORK/m20.bin" \
  >"$WORK/m20.log" 2>&1 || { bad "training the small model"; cat "$WORK/m20.log"; }
base=(--init-from "$WORK/m20.bin" --prompt "the " --max-new-tokens 48)
sample=(--temperature 1 --top-k 20 --seed 5)
gen greedy "${base[@]}"
gen greedy_nocache "${base[@]}" --no-kv-cache
same_ids "greedy: kv cache vs the whole prefix per token" greedy greedy_nocache
gen sampled "${base[@]}" "${sample[@]}"
gen sampled_nocache "${base[@]}" "${sample[@]}" --no-kv-cache
same_ids "sampled: kv cache vs the whole prefix per token" sampled sampled_nocache
GENERATE_TP=("$MPIEXEC" -n 2 "$GENERATE")
timeout 120 "${GENERATE_TP[@]}" --tp 2 "${base[@]}" --tokens-out "$WORK/greedy_tp2.ids" >/dev/null 2>&1
same_ids "greedy: tp 2 vs one rank" greedy greedy_tp2
timeout 120 "${GENERATE_TP[@]}" --tp 2 "${base[@]}" "${sample[@]}" --tokens-out "$WORK/sampled_tp2.ids" \
  >/dev/null 2>&1
same_ids "sampled: tp 2 vs one rank" sampled sampled_tp2
gen sampled_again "${base[@]}" "${sample[@]}"
same_ids "sampled: the same seed again" sampled sampled_again
gen sampled_seed6 "${base[@]}" --temperature 1 --top-k 20 --seed 6
cmp -s "$WORK/sampled.ids" "$WORK/sampled_seed6.ids" && bad "another seed drew the same ids" ||
  ok "another seed draws other ids"
cmp -s "$WORK/greedy.ids" "$WORK/sampled.ids" && bad "sampling gave the greedy ids" ||
  ok "sampling differs from greedy"

# 2. What stdout shows: the prompt and the new tokens as bytes; with a tokenizer, its pieces (here
#    each byte b printed as "<b>"); and a tokenizer's end-of-text stops generation.
# write_tokenizer FILE EOT: version 2, 256 tokens, token b = "<b>".
write_tokenizer() {
  "$PY" - "$@" <<'PYEOF'
import struct, sys
pieces = [f"<{b}>".encode() for b in range(256)]
with open(sys.argv[1], "wb") as f:
    f.write(struct.pack("<256i", 20240328, 2, 256, int(sys.argv[2]), *[0] * 252))
    for p in pieces:
        f.write(bytes([len(p)]) + p)
PYEOF
}
# decoded IDS_FILE MODE [STOP_ID]: what stdout must be (bytes, or "<b>" pieces); a last id equal
# to STOP_ID (end-of-text) is not printed.
decoded() {
  "$PY" - "$@" <<'PYEOF'
import sys
ids = [int(x) for x in open(sys.argv[1]).read().split(",")]
if len(sys.argv) > 3 and ids[-1] == int(sys.argv[3]):
    ids = ids[:-1]
out = b"".join(bytes([i]) if sys.argv[2] == "bytes" else f"<{i}>".encode() for i in ids)
sys.stdout.buffer.write(out + b"\n")
PYEOF
}
decoded "$WORK/greedy.ids" bytes >"$WORK/greedy.expected"
cmp -s "$WORK/greedy.out" "$WORK/greedy.expected" && ok "stdout: the prompt and new tokens as bytes" ||
  bad "stdout is not the ids as bytes: $(head -c 200 "$WORK/greedy.out")"
write_tokenizer "$WORK/tok.bin" 255
gen pieces "${base[@]}" --tokenizer "$WORK/tok.bin"
decoded "$WORK/pieces.ids" pieces >"$WORK/pieces.expected"
if cmp -s "$WORK/pieces.ids" "$WORK/greedy.ids" && cmp -s "$WORK/pieces.out" "$WORK/pieces.expected"; then
  ok "stdout: the tokenizer's pieces of the same ids"
else
  bad "tokenizer decoding: $(head -c 200 "$WORK/pieces.out")"
fi
# End-of-text: a token the sampled run first drew as its 3rd new token or later; the same draws
# with it as end-of-text must stop right there (the sequence ends with it).
read -r eot first < <(tr ',' '\n' <"$WORK/sampled.ids" |
  awk 'NR > 4 && !($1 in seen) { seen[$1] = NR; if (NR >= 7) { print $1, NR; exit } }')
write_tokenizer "$WORK/tok_eot.bin" "${eot:?no token to stop at in the sampled run}"
gen stops "${base[@]}" "${sample[@]}" --tokenizer "$WORK/tok_eot.bin"
expected_ids=$(tr ',' '\n' <"$WORK/sampled.ids" | head -n "$first" | paste -sd,)
decoded "$WORK/stops.ids" pieces "$eot" >"$WORK/stops.expected"
if [ "$(cat "$WORK/stops.ids")" = "$expected_ids" ] && grep -q "stopped at end-of-text (token $eot)" "$WORK/stops.err" &&
   cmp -s "$WORK/stops.out" "$WORK/stops.expected"; then
  ok "end-of-text (token $eot) stops generation after $((first - 4)) new tokens, its text not printed"
else
  bad "end-of-text: ids $(cat "$WORK/stops.ids") vs $expected_ids; $(cat "$WORK/stops.err")"
fi

# 3. max_seq_len: a 32-position model, a 30-token prompt: 3 new tokens fill it (the last one is
#    never fed), then a note; exit 0.
"$TRAIN" --steps 1 --val-every 0 --layers 1 --dim 32 --heads 2 --max-seq-len 32 --seq-len 32 \
  --save-llmc "$WORK/short.bin" >/dev/null 2>&1
gen full --init-from "$WORK/short.bin" --prompt "the small cat sees the old dog" --max-new-tokens 10
n=$(tr ',' '\n' <"$WORK/full.ids" | wc -l)
if [ "$n" -eq 33 ] && grep -q "stopped at the model's max_seq_len: the sequence fills its 32 positions" "$WORK/full.err"; then
  ok "max_seq_len 32: 30-token prompt + 3 new tokens, then a note"
else
  bad "max_seq_len: $n ids; $(cat "$WORK/full.err")"
fi

# 4. --load DIR: a training checkpoint directory resolves to the model file of its `latest` step
#    (or of --load-step N), which loads as --init-from loads an llm.c file: the same ids.
"$TRAIN" --steps 4 --save-every 2 --val-every 0 --layers 2 --dim 64 --heads 4 --save "$WORK/ckpt" \
  --save-llmc "$WORK/ckpt.bin" >"$WORK/ckpt.log" 2>&1 || { bad "training with --save"; cat "$WORK/ckpt.log"; }
short=(--prompt "the " --max-new-tokens 24)
gen from_dir --load "$WORK/ckpt" "${short[@]}"
gen from_file --init-from "$WORK/ckpt/step_00000004/model_00000004.bin" "${short[@]}"
same_ids "--load DIR vs --init-from its latest model file" from_dir from_file
gen from_llmc --init-from "$WORK/ckpt.bin" "${short[@]}"
same_ids "--load DIR vs the run's --save-llmc file" from_dir from_llmc
gen from_step --load "$WORK/ckpt/" --load-step 2 "${short[@]}"
gen from_step_file --init-from "$WORK/ckpt/step_00000002/model_00000002.bin" "${short[@]}"
same_ids "--load DIR --load-step 2 vs --init-from step 2's model file" from_step from_step_file
grep -q "from $WORK/ckpt/step_00000004 " "$WORK/from_dir.err" &&
  grep -q "from $WORK/ckpt/step_00000002 " "$WORK/from_step.err" &&
  ok "--load names the checkpoint it read (latest: step 4; --load-step 2)" ||
  bad "--load banner: $(cat "$WORK/from_dir.err" "$WORK/from_step.err")"
timeout 120 "$MPIEXEC" -n 2 "$GENERATE" --tp 2 --load "$WORK/ckpt" "${short[@]}" \
  --tokens-out "$WORK/from_dir_tp2.ids" >/dev/null 2>&1
same_ids "--load DIR on tp 2 vs one rank" from_dir from_dir_tp2
# `latest` still naming step 2 (a save cut off before updating it): the complete step 4 is read,
# with the trainer's note.
cp -r "$WORK/ckpt" "$WORK/ckpt_cut" && echo step_00000002 >"$WORK/ckpt_cut/latest"
gen from_cut --load "$WORK/ckpt_cut" "${short[@]}"
same_ids "--load DIR whose latest lags: the newer complete checkpoint" from_cut from_dir
grep -q "^note: $WORK/ckpt_cut/step_00000004 is newer than the step_00000002 .latest. names" \
  "$WORK/from_cut.err" && ok "--load says when it passes over latest" ||
  bad "no note on a lagging latest: $(cat "$WORK/from_cut.err")"

# 5. `make run`'s configuration for 200 steps (2 ranks) writes words of the built-in corpus; a model
#    after one step does not. Positions past the training --seq-len 64 were never trained, so each
#    text stays within 64 positions. The vocabulary is read from the corpus' source.
timeout 300 "$MPIEXEC" -n 2 "$TRAIN" --save-llmc "$WORK/trained.bin" --sample-every 200 --sample-tokens 63 \
  >"$WORK/trained.log" 2>&1 || { bad "the make run configuration"; tail "$WORK/trained.log"; }
"$TRAIN" --steps 1 --val-every 0 --save-llmc "$WORK/untrained.bin" >/dev/null 2>&1
# texts MODEL N: the generated text (the prompt removed) of N greedy and N sampled continuations
# (N <= 8).
texts() {
  local p i n=0
  for p in "the " "the small " "count:" "two plus " "the old " "the red " "count: four" "one plus "; do
    [ $((n += 1)) -le "$2" ] || break
    "$GENERATE" --init-from "$1" --prompt "$p" --max-new-tokens $((64 - ${#p})) 2>/dev/null | tail -c +$((${#p} + 1))
  done
  for i in $(seq "$2"); do
    "$GENERATE" --init-from "$1" --prompt "the " --max-new-tokens 60 --temperature 0.5 --seed "$i" 2>/dev/null |
      tail -c +5
  done
}
# corpus_words LABEL MIN_FRACTION MAX_FRACTION MIN_DISTINCT < TEXT
corpus_words() { "$PY" "$WORK/corpus_words.py" "$SOURCE_DIR/src/data/builtin_corpus.cpp" "$@"; }
cat >"$WORK/corpus_words.py" <<'PYEOF'
import re, sys
source, label, lo, hi, distinct = sys.argv[1], sys.argv[2], float(sys.argv[3]), float(sys.argv[4]), int(sys.argv[5])
# Every word of the string literals of the corpus' grammar (escapes like \n dropped).
code = "".join(l for l in open(source) if not l.lstrip().startswith("#include"))
literals = re.findall(r'"((?:[^"\\\n]|\\.)*)"', code)
vocab = {w for lit in literals for w in re.findall(r"[a-z]+", re.sub(r"\\.", " ", lit))}
words = re.findall(r"[a-z]+", sys.stdin.read())
known = [w for w in words if w in vocab]
frac = len(known) / max(1, len(words))
ok = (lo == 0 or len(words) >= 20) and lo <= frac <= hi and len(set(known)) >= distinct
print(f"{label}: {len(known)} of {len(words)} words ({frac:.0%}) are corpus words, "
      f"{len(set(known))} distinct: {' '.join(sorted(set(known)))}")
sys.exit(0 if ok else 1)
PYEOF
# Measured here: about half of the words (47-52%), 15-18 distinct; a model after one step: none.
msg=$(texts "$WORK/trained.bin" 8 | corpus_words "trained 200 steps" 0.35 1.0 8) && ok "$msg" || bad "$msg"
msg=$(texts "$WORK/untrained.bin" 2 | corpus_words "after 1 step" 0.0 0.1 0) && ok "$msg" || bad "$msg"
# The trainer's sample at step 200 is the generator's greedy text from the saved model, started
# from a newline (byte 10) like the trainer's.
sampled=$(awk '/^sample after step 200/ { f = 1; next } f && /^---$/ { if (++n == 2) exit; next } n == 1' \
  "$WORK/trained.log")
generated=$("$GENERATE" --init-from "$WORK/trained.bin" --prompt-tokens 10 --max-new-tokens 63 2>/dev/null)
if [ -n "$sampled" ] && [ "$sampled" = "${generated#$'\n'}" ]; then
  ok "--sample-every's sample at step 200 is mpiformer-generate's greedy text: $(head -1 <<<"$sampled")"
else
  bad "--sample-every's sample: '$sampled' vs mpiformer-generate's '$generated'"
fi

# 6. --sample-every leaves training bit for bit as it was: TP (the TP group samples) and DP (only
#    DP rank 0's group samples).
numbers() { grep -E '^(step|val step) ' "$1" | sed -E 's/ \| [0-9.]+ ms \|.*//'; }
for layout in "--tp 2" "--dp 2"; do
  args=(--steps 4 --val-every 2 --val-steps 2 --layers 2 --dim 64 --heads 4 --batch 8 $layout)
  tag=${layout// /}
  "$MPIEXEC" -n 2 "$TRAIN" "${args[@]}" >"$WORK/plain$tag.log" 2>&1
  "$MPIEXEC" -n 2 "$TRAIN" "${args[@]}" --sample-every 2 --sample-tokens 20 >"$WORK/sampling$tag.log" 2>&1
  samples=$(grep -c '^sample after step' "$WORK/sampling$tag.log")
  if [ -n "$(numbers "$WORK/plain$tag.log")" ] && [ "$(numbers "$WORK/plain$tag.log")" = "$(numbers "$WORK/sampling$tag.log")" ] &&
     [ "$samples" -eq 2 ]; then
    ok "$layout: losses, norms and val losses identical with --sample-every 2 (2 samples printed)"
  else
    bad "$layout: --sample-every changed training or printed $samples samples"
    diff <(numbers "$WORK/plain$tag.log") <(numbers "$WORK/sampling$tag.log")
  fi
done
finish
