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

# ---- one writer per directory, and shards only together with their manifest ----
HOST=$(hostname)
BOOT=$(cat /proc/sys/kernel/random/boot_id)
PIDNS=$(readlink /proc/self/ns/pid)
start_of() { sed 's/.*) //' "/proc/$1/stat" | awk '{print $20}'; }
header=$(sed -n 's/^constexpr const char\* kHeader = "\(.*\)";/\1/p' \
  "$HERE/../../src/checkpoint/save_lock.cpp")
write_lock() {  # write_lock DIR PID START: the lock a run with that identity on this host takes
  mkdir -p "$1"
  printf '%s\n' "$header" "host = $HOST" "pid = $2" "start_time = $3" "boot_id = $BOOT" \
    "pid_namespace = $PIDNS" "slurm_job = " "slurm_array = " "taken = 2026-01-02T03:04:05Z" \
    >"$1/mpiformer.lock"
}
sleep 600 &
live=$!
write_lock "$WORK/busy" "$live" "$(start_of $live)"
expect_error_from "$TOKENIZE" "a directory a live run writes into" 2 \
  "--output-dir $WORK/busy is in use by the run on host $HOST \(pid $live\)" -- "${ARGS[@]}" \
  --output-dir "$WORK/busy"
[ "$(ls "$WORK/busy")" = mpiformer.lock ] && grep -qx "pid = $live" "$WORK/busy/mpiformer.lock" &&
  ok "the refused run left the live run's directory and lock as they were" ||
  bad "the busy directory changed: $(ls "$WORK/busy" | tr '\n' ' ')"
kill "$live" 2>/dev/null
wait "$live" 2>/dev/null

# Two runs into one directory at once: one writes the data set, the other is refused (the lock,
# or the finished data set), and nothing of the second is left beside the first's.
"$MPIEXEC" -n 1 "$TOKENIZE" "${ARGS[@]}" --output-dir "$WORK/race" >"$WORK/race1" 2>&1 &
first=$!
sleep 0.1
"$MPIEXEC" -n 1 "$TOKENIZE" "${ARGS[@]}" --output-dir "$WORK/race" >"$WORK/race2" 2>&1 &
second=$!
wait "$first"
rc1=$?
wait "$second"
rc2=$?
if [ "$(printf '%s\n' $rc1 $rc2 | sort | tr '\n' ' ')" = "0 2 " ] &&
  grep -qE "^error: --output-dir $WORK/race (is in use by|already holds)" "$WORK/race1" "$WORK/race2" &&
  diff -r "$WORK/out1" "$WORK/race" >/dev/null; then
  ok "two runs 0.1 s apart: exits $rc1 and $rc2, one data set, byte-identical to out1"
else
  bad "two runs at once: exits $rc1 $rc2: $(cat "$WORK/race1" "$WORK/race2" | grep -E 'error|done'); $(diff -rq "$WORK/out1" "$WORK/race")"
fi

# What a run SIGKILLed while moving its shards into place leaves: its lock, a moved shard, the
# others' partials and the manifest partial listing them all. The next run removes exactly those,
# with a note, takes the lock over and writes the data set.
sh -c 'exit 0' &
dead=$!
wait $dead
write_lock "$WORK/cut" "$dead" 12345
cp "$WORK/out1/corpus_val_000000.bin" "$WORK/cut/"
for f in "$WORK"/out1/corpus_train_*.bin; do cp "$f" "$WORK/cut/$(basename "$f").partial"; done
cp "$WORK/out1/manifest.json" "$WORK/cut/manifest.json.partial-$dead"
echo "kept" >"$WORK/cut/notes.txt"
out=$("$MPIEXEC" -n 2 "$TOKENIZE" "${ARGS[@]}" --output-dir "$WORK/cut" 2>&1)
rc=$?
if [ $rc -eq 0 ] && grep -q "^note: --output-dir $WORK/cut: took over the lock of the run on host $HOST (pid $dead)" <<<"$out" &&
  grep -qE "^note: --output-dir $WORK/cut: removed [0-9]+ file\(s\) a run left when it stopped before publishing its data set: corpus_train_000001.bin.partial, .*corpus_val_000000.bin, manifest.json.partial-$dead$" <<<"$out" &&
  [ "$(cat "$WORK/cut/notes.txt")" = kept ] && rm "$WORK/cut/notes.txt" &&
  diff -r "$WORK/out1" "$WORK/cut" >/dev/null; then
  ok "a cut-off run's leftovers removed with a note; the data set written whole; other files kept"
else
  bad "after a cut-off run: exit $rc: $out; $(ls "$WORK/cut" | tr '\n' ' ')"
fi

# A disk with room for the shards but not the manifest (a tmpfs of that many pages): exit 2, and
# no shard is left that looks finished.
pages=$(($(ls "$WORK/out1" | grep -c '\.bin$') + 1))  # the shards and the lock, a page each
mkdir -p "$WORK/full"
if mount -t tmpfs -o size=$((pages * 4096)) tmpfs "$WORK/full" 2>/dev/null; then
  expect_error_from "$TOKENIZE" "no room for the manifest" 2 \
    "manifest .*manifest.json: write failed \(No space left on device\); no shard was published" \
    -- "${ARGS[@]}" --output-dir "$WORK/full/out"
  [ -z "$(ls -A "$WORK/full/out")" ] && ok "the full disk holds nothing afterwards" ||
    bad "the full disk holds: $(ls -A "$WORK/full/out" | tr '\n' ' ')"
  umount "$WORK/full"
else
  echo "skip a disk too small for the manifest: cannot mount a tmpfs here (needs root)"
fi

# A large document is read and encoded a chunk at a time: its memory is its tokens, not some 20
# times its text. A document with no place to cut (one run of digits) is refused with one error
# line once the bound (64 MiB) is passed, not encoded whole.
"$PY" - "$WORK/big" <<'PYEOF'
import os, random, sys
os.makedirs(sys.argv[1])
rng = random.Random(5)
words = ["the", "quick", "brown", "fox", "hello", "world", "then", "end", "xxxxxxxx", "\u00e9t\u00e9"]
with open(sys.argv[1] + "/large.txt", "w", encoding="utf-8") as f:
    for _ in range(96):  # 96 blocks of ~0.5 MB
        f.write(" ".join(rng.choice(words) for _ in range(90000)) + ".\n")
with open(sys.argv[1] + "/digits.txt", "w") as f:
    f.write("7" * (70 << 20))
PYEOF
big_mb=$(($(stat -c %s "$WORK/big/large.txt") >> 20))
# peak_rss_mb CMD...: runs CMD; prints its exit status and the largest resident set of its
# processes, in MB.
peak_rss_mb() {
  "$PY" -c 'import resource, subprocess, sys
rc = subprocess.call(sys.argv[1:], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
print(rc, resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss // 1024)' "$@"
}
read -r rc rss < <(peak_rss_mb "$MPIEXEC" -n 1 "$TOKENIZE" --input "$WORK/big/large.txt" \
  --tokenizer "$WORK/small.json" --output-dir "$WORK/bigout")
tokens=$("$PY" -c "import json; print(json.load(open('$WORK/bigout/manifest.json'))['tokens'])" 2>/dev/null || echo 0)
read -r _ small_rss < <(peak_rss_mb "$MPIEXEC" -n 1 "$TOKENIZE" --input "$WORK/in/a.txt" \
  --tokenizer "$WORK/small.json" --output-dir "$WORK/smallout")
# Bound: the program on a tiny document and 48 MB more (a few MB of the unit's tokens, the rest
# waiting in a spool file; a MB of text; a piece of the shard being written), well below the
# document's tokens as int32.
bound=$((small_rss + 48))
if [ "$rc" -eq 0 ] && [ "$rss" -le "$bound" ] && [ $((bound * 2)) -lt $((tokens * 4 / 1000000)) ]; then
  ok "a ${big_mb} MB document ($tokens tokens, $((tokens * 4 / 1000000)) MB as int32): peak resident ${rss} MB (bound ${bound} MB)"
else
  bad "a ${big_mb} MB document ($tokens tokens): exit $rc, peak resident ${rss} MB, bound ${bound} MB"
fi
[ -z "$(ls -A "$WORK/bigout" | grep -v -e '\.bin$' -e '^manifest.json$' -e '^mpiformer.lock$')" ] &&
  ok "no spool file is left beside the shards" || bad "left in the output: $(ls -A "$WORK/bigout")"
expect_error_from "$TOKENIZE" "70 MB of digits, no place to cut" 1 \
  "input $WORK/big/digits.txt: a document holds 65 MiB of text with no place to cut it" -- \
  --input "$WORK/big/digits.txt" --tokenizer "$WORK/small.json" --output-dir "$WORK/digits"
[ -z "$(ls -A "$WORK/digits" 2>/dev/null)" ] && ok "the refused document left nothing" ||
  bad "the refused document left: $(ls -A "$WORK/digits")"

# ---- text a vocabulary lacks, and bytes that are not UTF-8 ----
# A vocabulary without some control bytes and 0xF5-0xFF (SmolLM's, Falcon's, GPT-NeoX-style
# ones); a UTF-8 document holding three of those control bytes, a Latin-1 one, a plain one. By
# default, as Hugging Face: the control bytes left out, each ill-formed sequence read as U+FFFD.
"$PY" "$HERE/make_tokenizer.py" "$WORK/gapped.json" gapped
mkdir -p "$WORK/rep"
printf 'ctrl\x1d a\x0bb\x03 end\n' >"$WORK/rep/1_ctrl.txt"
printf 'caf\xe9 cr\xe8me \xff\n' >"$WORK/rep/2_latin1.txt"
printf 'plain text\n' >"$WORK/rep/3_plain.txt"
docs_json() { "$PY" -c 'import json, sys; print(json.dumps(sys.argv[1:]))' "$@" >"$WORK/rep.json"; }
R=(--input "$WORK/rep" --tokenizer "$WORK/gapped.json" --unit-bytes 8)
manifest() { "$PY" -c "import json, sys; m = json.load(open(sys.argv[1])); print($2)" "$1/manifest.json"; }
for n in 1 2; do
  "$MPIEXEC" -n $n "$TOKENIZE" "${R[@]}" --output-dir "$WORK/rep$n" >"$WORK/rep$n.log" 2>&1 ||
    bad "$n rank(s) on the repaired corpus: $(cat "$WORK/rep$n.log")"
done
docs_json $'ctrl ab end\n' $'caf\ufffd cr\ufffdme \ufffd\n' $'plain text\n'
(cd "$HERE" && "$PY" check_shards.py "$WORK/rep1" "$WORK/gapped.json" "<|endoftext|>" 0 100000000 \
  "$WORK/rep.json" >/dev/null 2>&1) &&
  ok "defaults: the lacking control bytes dropped, Latin-1 bytes read as U+FFFD (shards decoded)" ||
  bad "defaults: the shards are not the repaired documents: $(cd "$HERE" && "$PY" check_shards.py "$WORK/rep1" "$WORK/gapped.json" "<|endoftext|>" 0 100000000 "$WORK/rep.json" 2>&1 | head -3)"
got=$(manifest "$WORK/rep1" "m['unknown_bytes'], m['invalid_utf8'], m['repairs'], [(d['input'].split('/')[-1], d['byte'], d['unknown_dropped'], d['invalid_utf8_replaced'], d['skipped']) for d in m['repaired_documents']]")
want="drop replace {'documents': 2, 'unknown_dropped': 3, 'unknown_replaced': 0, 'invalid_utf8_replaced': 3, 'skipped_documents': 0, 'listed': 2} [('1_ctrl.txt', 0, 3, 0, False), ('2_latin1.txt', 0, 0, 3, False)]"
[ "$got" = "$want" ] && ok "the manifest counts what each document lost or had replaced" ||
  bad "the manifest's repairs: $got"
grep -q "^tokenize: done .*| unknown bytes (drop): 3 dropped, 0 replaced | invalid UTF-8 (replace): 3 replaced, 0 documents skipped$" "$WORK/rep1.log" &&
  ok "the summary line counts them" || bad "the summary line: $(grep '^tokenize: done' "$WORK/rep1.log")"
diff -r "$WORK/rep1" "$WORK/rep2" >/dev/null && ok "1 and 2 ranks: the same shards and manifest" ||
  bad "1 and 2 ranks differ: $(diff "$WORK/rep1/manifest.json" "$WORK/rep2/manifest.json")"
manifest "$WORK/rep1" "m['unicode']" | grep -q "^15.0.0 (utf8proc), with .* 15.1 and 16.0$" &&
  ok "the manifest names the Unicode data: $(manifest "$WORK/rep1" "m['unicode']")" ||
  bad "the manifest's unicode: $(manifest "$WORK/rep1" "m.get('unicode')")"
"$MPIEXEC" -n 1 "$TOKENIZE" --help | grep -q "^15.0.0 data of utf8proc and the characters Unicode 15.1 and 16.0" &&
  ok "--help names the Unicode version" || bad "--help does not name the Unicode version"

"$MPIEXEC" -n 2 "$TOKENIZE" "${R[@]}" --unknown-bytes replace --output-dir "$WORK/rep_replace" \
  >"$WORK/rep_replace.log" 2>&1 || bad "--unknown-bytes replace: $(cat "$WORK/rep_replace.log")"
docs_json $'ctrl\ufffd a\ufffdb\ufffd end\n' $'caf\ufffd cr\ufffdme \ufffd\n' $'plain text\n'
(cd "$HERE" && "$PY" check_shards.py "$WORK/rep_replace" "$WORK/gapped.json" "<|endoftext|>" 0 \
  100000000 "$WORK/rep.json" >/dev/null 2>&1) &&
  [ "$(manifest "$WORK/rep_replace" "m['repairs']['unknown_replaced']")" = 3 ] &&
  ok "--unknown-bytes replace: U+FFFD's tokens in place of each lacking byte, 3 counted" ||
  bad "--unknown-bytes replace: $(manifest "$WORK/rep_replace" "m['repairs']")"
"$MPIEXEC" -n 2 "$TOKENIZE" "${R[@]}" --invalid-utf8 skip-document --output-dir "$WORK/rep_skip" \
  >"$WORK/rep_skip.log" 2>&1 || bad "--invalid-utf8 skip-document: $(cat "$WORK/rep_skip.log")"
docs_json $'ctrl ab end\n' $'plain text\n'
(cd "$HERE" && "$PY" check_shards.py "$WORK/rep_skip" "$WORK/gapped.json" "<|endoftext|>" 0 \
  100000000 "$WORK/rep.json" >/dev/null 2>&1) &&
  [ "$(manifest "$WORK/rep_skip" "m['documents'], m['repairs']['skipped_documents'], m['repaired_documents'][1]['skipped']")" = "2 1 True" ] &&
  ok "--invalid-utf8 skip-document: the Latin-1 document left out, and listed as skipped" ||
  bad "--invalid-utf8 skip-document: $(manifest "$WORK/rep_skip" "m['documents'], m['repairs']")"
expect_error_from "$TOKENIZE" "--unknown-bytes error" 2 \
  "input $WORK/rep/1_ctrl.txt: tokenizer .*gapped.json: model.vocab has no token for the byte 0x1D, which the text holds; pass --unknown-bytes drop" \
  -- "${R[@]}" --unknown-bytes error --output-dir "$WORK/rep_e1"
expect_error_from "$TOKENIZE" "--invalid-utf8 error" 2 \
  "input $WORK/rep/2_latin1.txt: the text is not UTF-8: byte 3 begins 0xE9; pass --invalid-utf8 replace" \
  -- "${R[@]}" --invalid-utf8 error --output-dir "$WORK/rep_e2"
# The settings table's words (layout/settings.hpp), as mpiformer-train's for its choices.
expect_error_from "$TOKENIZE" "a misspelt choice" 1 "^error: --invalid-utf8 must be replace, skip-document or error, got 'skip'$" \
  -- "${R[@]}" --invalid-utf8 skip --output-dir "$WORK/rep_e3"
[ -z "$(find "$WORK"/rep_e? -type f 2>/dev/null)" ] && ok "the refused corpora left no files" ||
  bad "the refused corpora left: $(find "$WORK"/rep_e? -type f)"
# The flags are rows of the settings table: --help lists what the parser takes, a value may follow
# an `=`, and a number outside a row's bounds is refused in the table's words.
help_rows_are_flags "$TOKENIZE"
expect_error_from "$TOKENIZE" "--flag=value, below the least value" 1 "^error: --shard-tokens must be >= 1, got 0$" \
  -- "${R[@]}" --shard-tokens=0 --output-dir "$WORK/rep_e4"
expect_error_from "$TOKENIZE" "above the most value" 1 "^error: --val-tokens must be <= 2147483647, got 2147483648$" \
  -- "${R[@]}" --val-tokens 2147483648 --output-dir "$WORK/rep_e4"
finish
