#!/usr/bin/env bash
# Every bad input to mpiformer-generate stops it with exit status 2 on every rank, one "error:"
# line naming the problem and the fix, within a timeout, and without touching the user's files:
# flags, models and checkpoint directories, prompts (ids outside the vocabulary, text for a model
# that is not byte-level without a tokenizer.json, longer than max_seq_len), tokenizer files (llm.c's
# and tokenizer.json), layouts.
source "$(dirname "$0")/common.sh"
: "${GENERATE:?set MPIFORMER_GENERATE to the mpiformer-generate binary}"
export OMP_NUM_THREADS=1
expect() { expect_error_from "$GENERATE" "$@"; }

"$TRAIN" --steps 1 --val-every 0 --save-llmc "$WORK/model.bin" >/dev/null 2>&1
"$TRAIN" --steps 1 --val-every 0 --layers 1 --dim 32 --heads 2 --vocab 300 --max-seq-len 16 \
  --seq-len 16 --save-llmc "$WORK/v300.bin" >/dev/null 2>&1
head -c 5000 "$WORK/model.bin" >"$WORK/truncated.bin"
mkdir "$WORK/empty_dir"
# tokenizer FILE VOCAB [MAGIC VERSION EOT TRAILER CUT]: an llm.c tokenizer file, or a damaged one.
tokenizer() {
  "$PY" - "$@" <<'PYEOF'
import struct, sys
a = sys.argv[1:] + [None] * 6
path, n = a[0], int(a[1])
magic, version, eot = int(a[2] or 20240328), int(a[3] or 2), int(a[4] or 0)
trailer, cut = (a[5] or "").encode(), int(a[6] or 0)
data = struct.pack("<256i", magic, version, n, eot, *[0] * 252)
data += b"".join(bytes([1, i % 256]) for i in range(n)) + trailer
open(path, "wb").write(data[:len(data) - cut])
PYEOF
}
tokenizer "$WORK/tok256.bin" 256
tokenizer "$WORK/tok300.bin" 300
tokenizer "$WORK/tok_magic.bin" 256 20240326
tokenizer "$WORK/tok_version.bin" 256 20240328 3
tokenizer "$WORK/tok_eot.bin" 256 20240328 2 256
tokenizer "$WORK/tok_trailer.bin" 256 20240328 2 0 junk
tokenizer "$WORK/tok_cut.bin" 256 20240328 2 0 "" 1
model=(--init-from "$WORK/model.bin")

for n in 1 2; do
  expect "unknown flag" $n "unknown flag '--bogus'.*mpiformer-generate --help" -- "${model[@]}" --bogus 3
  expect "prompt too long" $n "the prompt has 300 tokens, more than the model's max_seq_len 256.*shorten it" \
    -- "${model[@]}" --prompt "$(head -c 300 /dev/zero | tr '\0' 'a')"
done
expect "repeated flag" 1 "--max-new-tokens is given twice" -- "${model[@]}" --max-new-tokens 3 --max-new-tokens 4
expect "missing value" 1 "--max-new-tokens needs a value" -- "${model[@]}" --max-new-tokens
expect "no model" 1 "no model: pass --init-from FILE.*or --load DIR" -- --prompt hi
expect "malformed number" 1 "--temperature expects a number, got 'hot'" -- "${model[@]}" --temperature hot
expect "ranks without --tp" 2 "--tp 1 x --ep 1 needs 1 ranks, but 2 were launched" -- "${model[@]}" --prompt hi
# The layout in the generator's flags: --ep, not a dp it does not take.
expect "--ep over the ranks" 1 "--tp 1 x --ep 2 needs 2 ranks, but 1 were launched; change --tp or --ep" -- "${model[@]}" --prompt hi --ep 2
expect "heads over tp" 3 "4 heads do not split over --tp 3" -- "${model[@]}" --prompt hi --tp 3
expect "pipeline" 1 "--pp 2: mpiformer-generate runs tensor parallel only.*drop --pp" -- "${model[@]}" --pp 2
expect "two models" 1 "--init-from and --load both name a model" -- "${model[@]}" --load "$WORK/empty_dir"
expect "load-step alone" 1 "--load-step 3 needs --load DIR" -- "${model[@]}" --load-step 3
expect "two prompts" 1 "--prompt and --prompt-tokens both give the prompt" -- "${model[@]}" --prompt a --prompt-tokens 1
expect "empty prompt" 1 "--prompt is given an empty value" -- "${model[@]}" --prompt ""
expect "malformed ids" 1 "--prompt-tokens expects an integer, got 'x'" -- "${model[@]}" --prompt-tokens 1,x,3
expect "negative id" 1 "--prompt-tokens token ids are non-negative, got -3" -- "${model[@]}" --prompt-tokens 1,-3
expect "id >= vocab" 1 "token 256 is outside the model's vocabulary of 256 tokens; give ids below 256, or encode the prompt with this model's tokenizer" -- "${model[@]}" --prompt-tokens 5,256
expect "no prompt, no end-of-text" 1 "no prompt: pass --prompt TEXT or --prompt-tokens IDS" -- "${model[@]}"
expect "text for a BPE model" 1 "--prompt text needs a tokenizer.json.*vocabulary is 300.*--tokenizer tokenizer.json.*--prompt-tokens" \
  -- --init-from "$WORK/v300.bin" --prompt hi
expect "text with llm.c's decoder" 1 "--prompt text needs a tokenizer.json.*tok300.bin \(llm.c's\) only decodes" \
  -- --init-from "$WORK/v300.bin" --prompt hi --tokenizer "$WORK/tok300.bin"
expect "negative temperature" 1 "--temperature must be >= 0 \(0 is greedy\), got -1" -- "${model[@]}" --temperature -1
expect "negative top-k" 1 "--top-k must be >= 0" -- "${model[@]}" --top-k -2
expect "no new tokens" 1 "--max-new-tokens must be >= 1, got 0" -- "${model[@]}" --max-new-tokens 0
expect "negative seed" 1 "--seed must be non-negative" -- "${model[@]}" --seed -1
expect "model missing" 1 "nope.bin.*cannot open" -- --init-from "$WORK/nope.bin" --prompt hi
expect "model truncated" 1 "truncated.bin.*(size|truncated)" -- --init-from "$WORK/truncated.bin" --prompt hi
expect "load: no such directory" 1 "--load .*/nodir: no such directory" -- --load "$WORK/nodir" --prompt hi
expect "load: no checkpoint" 1 "--load .*/empty_dir: holds no checkpoint" -- --load "$WORK/empty_dir" --prompt hi
# A damaged checkpoint stops the generator with the trainer's own error line (the same reader):
# the file, the problem, and the newest intact checkpoint to use instead.
"$TRAIN" --steps 4 --save-every 2 --val-every 0 --layers 2 --dim 64 --heads 4 --save "$WORK/good" \
  >"$WORK/good.log" 2>&1 || { bad "the run that makes the checkpoints"; cat "$WORK/good.log"; }
C=$WORK/c
M4=$C/step_00000004/model_00000004.bin
fresh() { rm -rf "$C" && cp -r "$WORK/good" "$C"; }
poke() {  # poke FILE BYTE_OFFSET FLOAT: overwrites one float of a binary file
  "$PY" -c "
import struct, sys
with open(sys.argv[1], 'r+b') as f:
    f.seek(int(sys.argv[2])); f.write(struct.pack('<f', float(sys.argv[3])))" "$@"
}
# same_as_trainer NAME RANKS PATTERN -- ARGS...: the generator's error (checked as expect does)
# is word for word the trainer's on the same --load arguments.
same_as_trainer() {
  local name=$1 ranks=$2 pattern=$3
  shift 4
  expect "$name" "$ranks" "$pattern" -- "$@" --prompt hi
  local mine theirs
  mine=$(timeout 60 "$MPIEXEC" -n "$ranks" "$GENERATE" "$@" --prompt hi 2>&1 >/dev/null | grep '^error:')
  theirs=$(timeout 60 "$MPIEXEC" -n "$ranks" "$TRAIN" --steps 6 --val-every 0 "$@" 2>&1 >/dev/null | grep '^error:')
  [ -n "$mine" ] && [ "$mine" = "$theirs" ] && ok "$name: the trainer's error line" ||
    bad "$name: generator '$mine' vs trainer '$theirs'"
}
intact="newest intact checkpoint is $C/step_00000002: resume from it with --load $C --load-step 2"
qkvw=$((1024 + 4 * (256 * 64 * 2 + 4 * 64)))  # after wte, wpe (256 x 64 each), ln1w, ln1b
fresh && truncate -s -4 "$M4"
same_as_trainer "checkpoint: truncated model file" 2 "model_00000004.bin: size mismatch.*$intact" -- --load "$C" --tp 2
fresh && poke "$M4" "$qkvw" 0.5
same_as_trainer "checkpoint: parameters fail their checksum" 2 "model_00000004.bin: tensor qkvw fails its checksum.*$intact" -- --load "$C" --tp 2
fresh && poke "$M4" $((qkvw + 4 * (3 * 64 * 64 + 5))) nan
same_as_trainer "checkpoint: a NaN parameter" 1 "qkvw \(layer 1\) element 5 is not finite.*$intact" -- --load "$C"
fresh && echo step_00000099 >"$C/latest"
same_as_trainer "checkpoint: latest names a missing step" 1 "latest names step_00000099, which does not exist" -- --load "$C"
fresh && echo garbage >"$C/latest"
same_as_trainer "checkpoint: latest is garbage" 1 "latest: does not name a checkpoint" -- --load "$C"
fresh
same_as_trainer "checkpoint: --load-step of a missing step" 2 "--load-step 3: .*step_00000003 does not exist; .* holds the steps 2, 4" -- --load "$C" --load-step 3 --tp 2
fresh && sed -i 's/^model.channels = 64$/model.channels = 32/' "$C/step_00000004/state_00000004.txt"
same_as_trainer "checkpoint: state file disagrees with the model file" 1 "holds model .*C64.*state file .*C32.*$intact" -- --load "$C"
expect "load: a file, not a directory" 1 "--load .*/model.bin: not a directory; pass a checkpoint directory" -- --load "$WORK/model.bin" --prompt hi
expect "tokenizer missing" 1 "tokenizer .*/none.bin: cannot open" -- "${model[@]}" --prompt hi --tokenizer "$WORK/none.bin"
expect "tokenizer magic" 1 "tok_magic.bin: bad magic 20240326.*an llm.c model file" -- "${model[@]}" --prompt hi --tokenizer "$WORK/tok_magic.bin"
expect "tokenizer version" 1 "tok_version.bin: unsupported version 3" -- "${model[@]}" --prompt hi --tokenizer "$WORK/tok_version.bin"
expect "tokenizer end-of-text" 1 "tok_eot.bin: end-of-text id 256 is outside the vocabulary" -- "${model[@]}" --prompt hi --tokenizer "$WORK/tok_eot.bin"
expect "tokenizer trailing bytes" 1 "tok_trailer.bin: 4 bytes after the last of its 256 tokens" -- "${model[@]}" --prompt hi --tokenizer "$WORK/tok_trailer.bin"
expect "tokenizer truncated" 1 "tok_cut.bin: token 255 \(1 bytes\) runs past the end" -- "${model[@]}" --prompt hi --tokenizer "$WORK/tok_cut.bin"
expect "tokenizer vocabulary" 1 "tokenizer .*tok300.bin has 300 tokens but the model's vocabulary is 256" -- "${model[@]}" --prompt hi --tokenizer "$WORK/tok300.bin"
printf '{"model": {"type": "BPE", "vocab": {' >"$WORK/broken.json"
expect "tokenizer.json broken" 1 "tokenizer .*broken.json: invalid JSON at line 1" -- "${model[@]}" --prompt hi --tokenizer "$WORK/broken.json"
printf '{"model": {"type": "Unigram", "vocab": []}}' >"$WORK/unigram.json"
expect "tokenizer.json not BPE" 1 "tokenizer .*unigram.json: model.type \"Unigram\" is not supported; only BPE" -- "${model[@]}" --prompt hi --tokenizer "$WORK/unigram.json"
expect "tokenizer not a file" 2 "tokenizer .*: is a directory, not a regular file" -- "${model[@]}" --prompt hi --tokenizer "$WORK/empty_dir" --tp 2

# Outputs never replace a file, which stays as it was.
echo "keep me" >"$WORK/existing.txt"
expect "tokens-out exists" 2 "--tokens-out .*existing.txt: already exists" -- "${model[@]}" --prompt hi --tp 2 --tokens-out "$WORK/existing.txt"
expect "logits-out exists" 1 "--logits-out .*existing.txt: already exists" -- "${model[@]}" --prompt hi --logits-out "$WORK/existing.txt"
[ "$(cat "$WORK/existing.txt")" = "keep me" ] && ok "existing output untouched" || bad "an existing output was modified"
expect "one file for both" 1 "--tokens-out .*x and --logits-out .*x are the same path" -- "${model[@]}" --prompt hi --tokens-out "$WORK/x" --logits-out "$WORK/x"
expect "output directory missing" 1 "--tokens-out .*: directory .*/no/such does not exist" -- "${model[@]}" --prompt hi --tokens-out "$WORK/no/such/ids"

# The trainer's side: samples need the whole model on a rank's TP group, and a matching tokenizer.
expect_error "sample under pipeline" 2 "--sample-every needs --pp 1.*mpiformer-generate" -- --pp 2 --sample-every 10
expect_error "sample tokenizer vocabulary" 1 "--tokenizer .*tok300.bin has 300 tokens but the model's vocabulary is 256" \
  -- --sample-every 10 --tokenizer "$WORK/tok300.bin"
expect_error "tokenizer without samples" 1 "--tokenizer decodes the samples of --sample-every N" -- --tokenizer "$WORK/tok256.bin"
expect_error "sample tokens" 1 "--sample-tokens must be >= 1" -- --sample-every 10 --sample-tokens 0

out=$("$GENERATE" --help 2>&1)
[ $? -eq 0 ] && grep -q -- "--prompt-tokens" <<<"$out" && ok "--help prints the flags" || bad "--help"
# The flags are rows of mpiformer-train's settings table (layout/settings.hpp): --help lists what
# the parser takes, with each row's default added as mpiformer-train's --help adds it, a value
# may follow an `=`, and a bad value of a flag both programs take is refused in the same words.
help_rows_are_flags "$GENERATE"
grep -A1 -- "^  --gpu-aware-mpi M" <<<"$out" | tr -s ' \n' ' ' | grep -q "(default auto)" &&
  ok "--help shows the table's default of --gpu-aware-mpi" || bad "--help: $(grep -A1 -- --gpu-aware-mpi <<<"$out")"
expect "--flag=value, below the least value" 1 "^error: --max-new-tokens must be >= 1, got 0$" -- "${model[@]}" --max-new-tokens=0
for given in --gpu-aware-mpi=maybe --tp=0 --threads=x; do
  mine=$("$GENERATE" "${model[@]}" "$given" 2>&1 | grep '^error:')
  theirs=$("$TRAIN" "$given" 2>&1 | grep '^error:')
  [ -n "$mine" ] && [ "$mine" = "$theirs" ] && ok "$given: the trainer's error line: $mine" ||
    bad "$given: generator '$mine' vs trainer '$theirs'"
done
finish
