#!/usr/bin/env bash
# mpiformer-tokenize as users run it: a corpus of .txt files and a .jsonl (unicode, empty
# documents, a blank line, a document longer than a shard) gives byte-identical shards and
# manifest on 1, 2 and 3 ranks; an independent Python reader decodes the shards back into the
# documents, each behind the document token, and checks the counts and SHA-256s; a tokenizer of
# more than 65,536 tokens gives uint32 shards that the trainer trains on; bad input is one error
# line and exit status 2, leaving nothing behind.
source "$(dirname "$0")/common.sh"
TOKENIZE=${MPIFORMER_TOKENIZE:?set MPIFORMER_TOKENIZE to the mpiformer-tokenize binary}
HERE=$(cd "$(dirname "$0")" && pwd)

"$PY" "$HERE/make_tokenizer.py" "$WORK/small.json" small
"$PY" "$HERE/make_tokenizer.py" "$WORK/large.json" large
mkdir -p "$WORK/in/sub"
# The documents, in corpus order: in/a.txt, in/b.txt, in/docs.jsonl's lines, in/sub/long.txt.
"$PY" - "$WORK" <<'PYEOF'
import json, sys
work = sys.argv[1]
long_doc = "the quick brown fox " * 40 + "xxxxxxxx then the end"
docs = ["hello the world\n", "", "h\u00e9llo \u20ac \U0001F600 then", "",
        "line \"two\"\nwith\ttab <|endoftext|> inside", long_doc]
open(f"{work}/in/a.txt", "w", encoding="utf-8").write(docs[0])
open(f"{work}/in/b.txt", "w", encoding="utf-8").write(docs[1])
with open(f"{work}/in/docs.jsonl", "w", encoding="utf-8") as f:
    f.write(json.dumps({"text": docs[2], "id": 1}) + "\n\n")
    f.write(json.dumps({"id": 2, "text": docs[3]}) + "\n")
    f.write(json.dumps({"text": docs[4]}, ensure_ascii=False))  # no final newline
open(f"{work}/in/sub/long.txt", "w", encoding="utf-8").write(docs[5])
json.dump(docs, open(f"{work}/docs.json", "w"))
PYEOF

ARGS=(--input "$WORK/in/a.txt,$WORK/in/b.txt,$WORK/in/docs.jsonl,$WORK/in/sub"
      --tokenizer "$WORK/small.json" --name corpus --shard-tokens 200 --val-tokens 30
      --unit-bytes 64)
for n in 1 2 3; do
  if "$MPIEXEC" -n "$n" "$TOKENIZE" "${ARGS[@]}" --output-dir "$WORK/out$n" >"$WORK/log$n" 2>&1 &&
    grep -q "^tokenize: done" "$WORK/log$n"; then
    ok "$n rank(s): $(grep '^tokenize: done' "$WORK/log$n" | cut -d'|' -f2-5)"
  else
    bad "$n rank(s): $(cat "$WORK/log$n")"
  fi
done
for n in 2 3; do
  if diff -r "$WORK/out1" "$WORK/out$n" >/dev/null; then
    ok "1 and $n ranks: byte-identical shards and manifest ($(ls "$WORK/out1" | tr '\n' ' '))"
  else
    bad "1 and $n ranks differ: $(diff -rq "$WORK/out1" "$WORK/out$n")"
  fi
done
check() {  # check NAME DIR TOKENIZER DOC_TOKEN VAL SHARD
  local out
  if out=$(cd "$HERE" && "$PY" check_shards.py "$2" "$3" "$4" "$5" "$6" "$WORK/docs.json" 2>&1); then
    ok "$1: $(tail -1 <<<"$out")"
  else
    bad "$1: $out"
  fi
}
check "independent decode (uint16, <|endoftext|>)" "$WORK/out1" "$WORK/small.json" \
  "<|endoftext|>" 30 200
[ -f "$WORK/out1/corpus_val_000000.bin" ] && [ -f "$WORK/out1/corpus_train_000001.bin" ] &&
  ok "llm.c's names: $(ls "$WORK/out1" | head -2 | tr '\n' ' ')" || bad "shard names: $(ls "$WORK/out1")"

# A vocabulary above 65,536: uint32 shards (llm.c's Llama 3 header), <|begin_of_text|> by default.
if "$MPIEXEC" -n 2 "$TOKENIZE" --input "$WORK/in/a.txt,$WORK/in/b.txt,$WORK/in/docs.jsonl,$WORK/in/sub" \
  --tokenizer "$WORK/large.json" --output-dir "$WORK/wide" --shard-tokens 100000 \
  --unit-bytes 100 >"$WORK/logw" 2>&1; then
  check "independent decode (uint32, <|begin_of_text|>)" "$WORK/wide" "$WORK/large.json" \
    "<|begin_of_text|>" 0 100000
else
  bad "uint32 run: $(cat "$WORK/logw")"
fi
vocab=$("$PY" -c "import json; print(json.load(open('$WORK/wide/manifest.json'))['tokenizer']['vocab_size'])")
if "$MPIEXEC" -n 1 "$TRAIN" --data "$WORK/wide/data_train_000000.bin" --val-data none \
  --vocab "$vocab" --layers 1 --heads 2 --dim 32 --batch 2 --seq-len 16 --steps 3 \
  >"$WORK/train.log" 2>&1 && grep -q "^summary" "$WORK/train.log"; then
  ok "the trainer trains on the uint32 shard (vocab $vocab): $(grep '^step 3/' "$WORK/train.log" | cut -d'|' -f1-2)"
else
  bad "training on the uint32 shard: $(tail -5 "$WORK/train.log")"
fi

# Bad input: one error line, exit status 2 on every rank, nothing left behind.
printf '{"text": "ok"}\n{"text": broken}\n' >"$WORK/bad.jsonl"
printf '{"text": "ok"}\n{"body": "no text"}\n' >"$WORK/nofield.jsonl"
T=(--tokenizer "$WORK/small.json" --unit-bytes 8)
expect_error_from "$TOKENIZE" "bad JSONL line" 2 "bad.jsonl:2: invalid JSON" -- \
  --input "$WORK/in/a.txt,$WORK/bad.jsonl" "${T[@]}" --output-dir "$WORK/e1"
expect_error_from "$TOKENIZE" "missing text field" 2 "nofield.jsonl:2: no \"text\" field.*--text-field" -- \
  --input "$WORK/nofield.jsonl" "${T[@]}" --output-dir "$WORK/e2"
expect_error_from "$TOKENIZE" "text field renamed" 2 "nofield.jsonl:1: no \"body\" field" -- \
  --input "$WORK/nofield.jsonl" "${T[@]}" --text-field body --output-dir "$WORK/e3"
expect_error_from "$TOKENIZE" "output exists" 3 "out1 already holds corpus_train_000001.bin" -- \
  "${ARGS[@]}" --output-dir "$WORK/out1"
expect_error_from "$TOKENIZE" "unknown doc token" 2 "--doc-token <\|nope\|>.*no such token" -- \
  --input "$WORK/in/a.txt" "${T[@]}" --doc-token "<|nope|>" --output-dir "$WORK/e4"
expect_error_from "$TOKENIZE" "all in validation" 2 "leaving none to train on" -- \
  --input "$WORK/in/a.txt" "${T[@]}" --val-tokens 1000 --output-dir "$WORK/e5"
leftovers=$(find "$WORK"/e? -type f 2>/dev/null | head -3)
[ -z "$leftovers" ] && ok "failed runs left no files" || bad "failed runs left: $leftovers"
diff -r "$WORK/out1" "$WORK/out2" >/dev/null && ok "the refused run left out1 as it was" ||
  bad "out1 changed: $(diff -rq "$WORK/out1" "$WORK/out2")"
finish
