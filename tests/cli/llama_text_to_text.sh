#!/usr/bin/env bash
# The README's Llama example at tiny scale, as a user runs it: text files and a .jsonl tokenized
# with a byte-level BPE tokenizer.json (validation split, 2 ranks), an independent reader decoding
# the shards back into the corpus; a small Llama (GQA, untied head) trained on TP 2 x PP 2 with
# --val-data, --save and --save-hf, its vocabulary taken from the tokenizer's manifest.json, its
# losses falling and equal to the serial run's (within the layout tolerance of
# tests/mpi/serial_reference.sh); the Hugging Face directory (holding a copy of the tokenizer.json)
# and the checkpoint generating from a text prompt: the text is the prompt, then the decode of
# valid ids.
source "$(dirname "$0")/common.sh"
TOKENIZE=${MPIFORMER_TOKENIZE:?set MPIFORMER_TOKENIZE to the mpiformer-tokenize binary}
GENERATE=${MPIFORMER_GENERATE:?set MPIFORMER_GENERATE to the mpiformer-generate binary}
HERE=$(cd "$(dirname "$0")" && pwd)
cd "$WORK" || exit 1

# A tokenizer.json in Hugging Face's format (a user takes a model repository's).
"$PY" "$HERE/make_tokenizer.py" tokenizer.json small
# The corpus: a directory of .txt files and a .jsonl, documents in path order.
mkdir -p corpus/books
"$PY" - <<'PYEOF'
import json
lines = ["the cat sat on the mat", "then the hen went to the den", "the end is near then",
         "when the sun sets the sky turns red"]
def doc(i, n):
    return " ".join(lines[(i + j) % 4] for j in range(n))
docs = []
with open("corpus/articles.jsonl", "w", encoding="utf-8") as f:  # first in path order
    for i in range(24):
        docs.append(doc(i, 6) + ("\n" if i % 2 else ""))
        f.write(json.dumps({"id": i, "text": docs[-1]}) + "\n")
for i in range(4):
    docs.append(doc(i, 12) + "\n")
    open(f"corpus/books/book{i}.txt", "w", encoding="utf-8").write(docs[-1])
json.dump(docs, open("docs.json", "w"))
PYEOF

# 1. Tokenize, with a validation split.
if "$MPIEXEC" -n 2 "$TOKENIZE" --input corpus --tokenizer tokenizer.json --output-dir data \
  --val-tokens 300 >tokenize.log 2>&1; then
  ok "tokenize: $(grep '^tokenize: done' tokenize.log | cut -d'|' -f2-4)"
else
  bad "tokenize: $(cat tokenize.log)"
fi
if out=$(cd "$HERE" && "$PY" check_shards.py "$WORK/data" "$WORK/tokenizer.json" "<|endoftext|>" \
  300 100000000 "$WORK/docs.json" 2>&1); then
  ok "the shards decode back into the corpus: $(tail -1 <<<"$out")"
else
  bad "shards: $out"
fi
vocab=$("$PY" -c "import json; print(json.load(open('data/manifest.json'))['tokenizer']['vocab_size'])")

# 2. Train a small Llama on TP 2 x PP 2, and the same run on one rank; no --vocab: the manifest's.
# (--peak-gflops: MFU plays no part here, and measuring the GEMM peak would be most of the time.)
args=(--arch llama --layers 2 --heads 4 --kv-heads 2 --dim 32 --ffn-dim 64 --tie-embeddings 0
  --data "data/data_train_*.bin" --val-data data/data_val_000000.bin
  --steps 8 --batch 4 --seq-len 16 --lr 1e-2 --val-every 4 --val-steps 2 --peak-gflops 100)
if "$MPIEXEC" -n 4 "$TRAIN" "${args[@]}" --tp 2 --pp 2 --microbatches 2 --save ckpt \
  --save-hf hf --tokenizer tokenizer.json >tp2pp2.log 2>&1; then
  ok "TP 2 x PP 2: $(grep '^summary' tp2pp2.log | cut -d'|' -f2-3)"
else
  bad "TP 2 x PP 2: $(tail -5 tp2pp2.log)"
fi
"$TRAIN" "${args[@]}" >serial.log 2>&1 || bad "serial: $(tail -5 serial.log)"
if out=$("$PY" - serial.log tp2pp2.log <<'PYEOF'
import re, sys
def losses(path, kind):
    text = open(path).read()
    return [float(m) for m in re.findall(rf"^{kind}\d+(?:/\d+)? \| loss ([0-9.]+)", text, re.M)]
train = [losses(p, "step ") for p in sys.argv[1:3]]
val = [losses(p, "val step ") for p in sys.argv[1:3]]
assert len(train[0]) == 8 and len(val[0]) == 3, (train[0], val[0])
# Layout tolerance (tests/mpi/serial_reference.sh): only the order of fp32 sums differs.
for a, b in (train, val):
    assert len(a) == len(b), (a, b)
    worst = max(abs(x - y) / x for x, y in zip(a, b))
    assert worst <= 1e-5, f"TP 2 x PP 2 differs from serial by {worst:.1e}: {a} vs {b}"
assert train[1][-1] < 0.8 * train[1][0], f"training loss does not fall: {train[1]}"
assert val[1][-1] < 0.8 * val[1][0], f"validation loss does not fall: {val[1]}"
print(f"loss {train[1][0]:.3f} -> {train[1][-1]:.3f}, val {val[1][0]:.3f} -> {val[1][-1]:.3f}")
PYEOF
); then
  ok "losses fall and equal the serial run's: $out"
else
  bad "losses: $out"
fi
grep -q "^note: --vocab $vocab: data/manifest.json's tokenizer.vocab_size $vocab" tp2pp2.log &&
  grep -q "^note: --vocab $vocab" serial.log && [ "$(grep -c '^note: --vocab' tp2pp2.log)" = 1 ] &&
  ok "the vocabulary from the manifest: $(grep '^note: --vocab' tp2pp2.log)" ||
  bad "the manifest's vocabulary $vocab: $(grep '^note' tp2pp2.log)"
missing=""
for f in config.json generation_config.json model.safetensors; do [ -s "hf/$f" ] || missing+=" $f"; done
[ -z "$missing" ] && grep -q '"model_type": "llama"' hf/config.json &&
  ok "--save-hf: $(ls hf | tr '\n' ' ')" || bad "--save-hf lacks$missing: $(ls hf)"

# 3. Generate from a text prompt: the Hugging Face directory, and the checkpoint on TP 2.
prompt="the cat"
gen() {  # gen NAME RANKS ARGS...
  local name=$1 n=$2
  shift 2
  "$MPIEXEC" -n "$n" "$GENERATE" "$@" --prompt "$prompt" \
    --max-new-tokens 12 --tokens-out "$name.ids" >"$name.txt" 2>"$name.err" ||
    bad "generate $name: $(cat "$name.err")"
}
gen hf 1 --init-from hf --tokenizer tokenizer.json
gen ckpt 2 --tp 2 --load ckpt --tokenizer tokenizer.json
# The directory holds a copy of the tokenizer.json, as a model repository does: no --tokenizer.
cmp -s tokenizer.json hf/tokenizer.json && ok "--save-hf copied --tokenizer's bytes into hf/tokenizer.json" ||
  bad "hf/tokenizer.json is not tokenizer.json's copy: $(ls hf)"
gen beside 1 --init-from hf
# A tokenizer with more ids than the model: refused at start-up, not at the end of the run.
out=$("$TRAIN" --steps 1 --save-hf hf_small --tokenizer tokenizer.json 2>&1)
[ $? = 2 ] && [ ! -e hf_small ] && grep -q "^error: --tokenizer tokenizer.json has $vocab tokens but the model's vocabulary is 256" <<<"$out" &&
  ok "a tokenizer larger than the model: $out" || bad "a tokenizer larger than the model: $out"
decode='
import json, sys
sys.path.insert(0, sys.argv[1])
from make_tokenizer import bytes_to_unicode
tok = json.load(open("tokenizer.json", encoding="utf-8"))
byte = {c: b for b, c in bytes_to_unicode().items()}
text = {i: bytes(byte[c] for c in key) for key, i in tok["model"]["vocab"].items()}
ids = [int(x) for x in open(sys.argv[2]).read().split(",")]
eot = {t["id"] for t in tok["added_tokens"]}
if ids[-1] in eot:  # generation stopped at end-of-text, which is not printed
    ids.pop()
printed = open(sys.argv[3], "rb").read()
prompt, vocab = sys.argv[4].encode(), int(sys.argv[5])
assert all(0 <= i < vocab and i in text for i in ids), f"ids outside the vocabulary: {ids}"
decoded = b"".join(text[i] for i in ids)  # the generator ends its text with a newline
assert printed == decoded + b"\n", f"printed {printed!r}, the ids decode to {decoded!r}"
assert printed.startswith(prompt) and len(printed) > len(prompt), printed
print(repr(printed.decode()))
'
for name in hf ckpt beside; do
  if out=$("$PY" -c "$decode" "$HERE" "$name.ids" "$name.txt" "$prompt" "$vocab" 2>&1); then
    ok "generate ($name): the prompt, then valid ids: $out"
  else
    bad "generate ($name): $out"
  fi
done
cmp -s hf.ids ckpt.ids && ok "the Hugging Face directory and the checkpoint on TP 2 write the same ids" ||
  bad "hf and checkpoint ids differ: $(cat hf.ids) vs $(cat ckpt.ids)"
cmp -s hf.ids beside.ids && grep -q "^note: --tokenizer hf/tokenizer.json" beside.err &&
  ok "the directory's own tokenizer.json by default: $(grep '^note' beside.err)" ||
  bad "the directory's tokenizer.json: $(cat beside.err)"
finish
