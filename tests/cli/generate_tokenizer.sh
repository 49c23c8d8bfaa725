#!/usr/bin/env bash
# mpiformer-generate with a Hugging Face tokenizer.json: --prompt text is encoded as the
# independent Python reference (tests/text/compare_tokenizer.py) encodes it, the template's prefix
# (Llama 3's <|begin_of_text|>) first and not echoed, and stdout is the ids decoded; a tokenizer of
# the 256 bytes gives exactly the run with no tokenizer; mpiformer-train's samples decode with one.
# Skipped (77) without Python's regex module.
source "$(dirname "$0")/common.sh"
: "${GENERATE:?set MPIFORMER_GENERATE to the mpiformer-generate binary}"
SOURCE_DIR=${MPIFORMER_SOURCE_DIR:?set MPIFORMER_SOURCE_DIR to the source tree}
export OMP_NUM_THREADS=1
"$PY" -c "import regex" 2>/dev/null || { echo "SKIP: python3-regex is missing"; exit 77; }

PROMPT="the tokenizer's words, 123 <|endoftext|>"
# Three tokenizers: the bytes alone (256), and 299 tokens + one added token (300) in GPT-2's and
# Llama 3's styles; with each BPE one, the reference's encoding of PROMPT and decoding of ids.
"$PY" - "$WORK" "$SOURCE_DIR/tests/text" "$PROMPT" <<'PYEOF'
import json, os, sys
work, text_dir, prompt = sys.argv[1:4]
sys.path.insert(0, text_dir)
import compare_tokenizer as ref

def write(name, doc):
    with open(os.path.join(work, name), "w", encoding="utf-8") as f:
        json.dump(doc, f)

doc, _ = ref.gpt2_json({ref.BYTE_CHAR[b]: b for b in range(256)}, [], False)
doc["added_tokens"], doc["model"]["vocab"] = [], {ref.BYTE_CHAR[b]: b for b in range(256)}
write("bytes.json", doc)
for style, pattern in (("gpt2", ref.GPT2_PATTERN), ("llama3", ref.LLAMA3_PATTERN)):
    for n in range(43, 200):  # merges until the vocabulary has 299 tokens
        vocab, merges = ref.train_bpe(pattern, ref.CORPUS, n)
        if len(vocab) >= 299:
            break
    if style == "gpt2":
        doc, added = ref.gpt2_json(vocab, merges, False)
        r = ref.Reference(pattern, doc["model"]["vocab"], merges, added)
        prefix = []
    else:  # one added token, the template's prefix: <|begin_of_text|> as 299
        doc, added, prefix = ref.llama3_json(vocab, merges)
        doc["added_tokens"], added = doc["added_tokens"][:1], added[:1]
        r = ref.Reference(pattern, vocab, merges, added, ignore_merges=True)
    write(style + ".json", doc)
    with open(os.path.join(work, style + ".want"), "w") as f:
        f.write(",".join(map(str, prefix + r.encode_with_specials(prompt))))
PYEOF
[ -s "$WORK/gpt2.want" ] || { bad "writing the tokenizers"; finish; exit 1; }

"$TRAIN" --steps 2 --val-every 0 --layers 1 --dim 32 --heads 2 --save-llmc "$WORK/bytes.bin" \
  >/dev/null 2>&1 || bad "training the byte-level model"
"$TRAIN" --steps 2 --val-every 0 --layers 1 --dim 32 --heads 2 --vocab 300 --max-seq-len 64 \
  --seq-len 16 --save-llmc "$WORK/v300.bin" >/dev/null 2>&1 || bad "training the 300-token model"

gen() {  # gen NAME ARGS...: ids to $WORK/NAME.ids, text to .out
  local name=$1
  shift
  timeout 60 "$GENERATE" --tokens-out "$WORK/$name.ids" --max-new-tokens 12 "$@" \
    >"$WORK/$name.out" 2>"$WORK/$name.err" || { bad "$name: exit status $?"; cat "$WORK/$name.err"; }
}

# 1. The 256 bytes as a tokenizer.json: the same ids and text as no tokenizer (text as bytes).
gen plain --init-from "$WORK/bytes.bin" --prompt "the cat"
gen bytes_json --init-from "$WORK/bytes.bin" --prompt "the cat" --tokenizer "$WORK/bytes.json"
cmp -s "$WORK/plain.ids" "$WORK/bytes_json.ids" && cmp -s "$WORK/plain.out" "$WORK/bytes_json.out" &&
  ok "a tokenizer.json of the bytes: the ids and text of no tokenizer" ||
  bad "a tokenizer.json of the bytes changed the run"
# A NUL byte in the text is printed, not taken for the end of a C string.
gen nul --init-from "$WORK/bytes.bin" --prompt-tokens 104,0,105 --tokenizer "$WORK/bytes.json"
head -c 3 "$WORK/nul.out" | cmp -s - <(printf 'h\0i') && ok "a NUL byte in the text is printed" ||
  bad "the prompt h NUL i printed as $(head -c 3 "$WORK/nul.out" | od -An -c)"

# 2. BPE: the prompt's ids are the reference's; stdout is the ids decoded, prompt first.
for style in gpt2 llama3; do
  gen "$style" --init-from "$WORK/v300.bin" --prompt "$PROMPT" --tokenizer "$WORK/$style.json"
  want=$(cat "$WORK/$style.want")
  case "$(cat "$WORK/$style.ids")" in
    "$want",*) ok "$style: the prompt encodes as the Python reference encodes it ($want)" ;;
    *) bad "$style: prompt ids $(cat "$WORK/$style.ids"), the reference's $want" ;;
  esac
  decoded=$("$PY" - "$WORK" "$style" "$SOURCE_DIR/tests/text" <<'PYEOF'
import json, os, sys
work, style, text_dir = sys.argv[1:4]
sys.path.insert(0, text_dir)
import compare_tokenizer as ref
doc = json.load(open(os.path.join(work, style + ".json"), encoding="utf-8"))
pieces = {i: ref.from_key(k) for k, i in doc["model"]["vocab"].items()}
pieces.update({t["id"]: t["content"].encode() for t in doc["added_tokens"]})
ids = [int(x) for x in open(os.path.join(work, style + ".ids")).read().split(",")]
skip = 1 if style == "llama3" else 0  # the template's prefix is not echoed
prompt = len(open(os.path.join(work, style + ".want")).read().split(","))
eot = [t["id"] for t in doc["added_tokens"] if t["content"] == "<|endoftext|>"]
if len(ids) > prompt and ids[-1] in eot:
    ids.pop()  # generation stopped at end-of-text, which is not printed
sys.stdout.buffer.write(b"".join(pieces[i] for i in ids[skip:]) + b"\n")
PYEOF
)
  [ "$decoded" = "$(cat "$WORK/$style.out")" ] && ok "$style: stdout is the ids decoded" ||
    bad "$style: stdout '$(cat "$WORK/$style.out")', the ids decode to '$decoded'"
done
head -c ${#PROMPT} "$WORK/gpt2.out" | grep -qF -- "$PROMPT" && ok "the prompt is echoed as given" ||
  bad "the prompt echo: $(head -c 80 "$WORK/gpt2.out")"

# 3. Training samples decode through a tokenizer.json too.
"$TRAIN" --steps 2 --val-every 0 --layers 1 --dim 32 --heads 2 --vocab 300 --max-seq-len 64 \
  --seq-len 16 --sample-every 2 --sample-tokens 8 --tokenizer "$WORK/gpt2.json" \
  >"$WORK/sample.log" 2>&1 && grep -q "sample" "$WORK/sample.log" &&
  ok "mpiformer-train --sample-every decodes with a tokenizer.json" ||
  { bad "training samples with a tokenizer.json"; tail -5 "$WORK/sample.log"; }
finish
