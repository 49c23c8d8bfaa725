#!/usr/bin/env bash
# mpiformer-tokenize's throughput: MB of text per second per rank (one rank per core), on 1 and
# on 2 ranks, the median of REPEAT runs (default 3).
#   bash ci/bench_tokenize.sh [BUILD_DIR] [SCRATCH_DIR] [MB]       (make bench; MB default 32)
# No tokenizer file ships with the project and the machine may be offline, so the tokenizer is
# made here: byte-level BPE in GPT-2's format whose merges spell every word of the corpus (each
# word ends as one token, as GPT-2's commonest words do), about 20,000 merges. The corpus is
# English prose (the licence texts Debian installs in /usr/share/common-licenses) repeated to MB
# megabytes as a JSONL file of ~2 KB documents. Repeated text favours the tokenizer's cache of
# words already seen more than web text would: read the number as an upper estimate.
# A benchmark, not a test: it exits 1 only when a run fails, never on the numbers.
set -u

root=$(cd "$(dirname "$0")/.." && pwd)
build=$(cd "${1:-$root/build}" 2>/dev/null && pwd) ||
  { echo "bench_tokenize: no build directory ${1:-$root/build}"; exit 1; }
tokenize="$build/mpiformer-tokenize"
[ -x "$tokenize" ] || { echo "bench_tokenize: $tokenize not found; build first (make build)"; exit 1; }
MB=${3:-32}
MPIEXEC=${MPIEXEC:-mpiexec}
REPEAT=${REPEAT:-3}
PY=${MPIFORMER_PYTHON:-/usr/bin/python3}
work=$(mktemp -d "${2:-${TMPDIR:-/tmp}}/mpf-bench-tok.XXXXXX")
trap 'rm -rf "$work"' EXIT
export UCX_TLS=${UCX_TLS:-self,sm} UCX_NET_DEVICES=${UCX_NET_DEVICES:-lo} OMP_NUM_THREADS=1

"$PY" - "$work" "$MB" "$root/tests/cli" <<'PYEOF' || { echo "bench_tokenize: making the corpus failed"; exit 1; }
import glob, json, re, sys
work, mb, here = sys.argv[1], int(sys.argv[2]), sys.argv[3]
sys.path.insert(0, here)
from make_tokenizer import bytes_to_unicode
text = ""
for p in sorted(glob.glob("/usr/share/common-licenses/*")):
    try:
        text += open(p, encoding="utf-8").read()
    except (UnicodeDecodeError, IsADirectoryError):
        pass
if not text:
    text = "the quick brown fox jumps over the lazy dog. " * 1000
# The corpus: ~2 KB documents until MB megabytes.
with open(f"{work}/corpus.jsonl", "w", encoding="utf-8") as f:
    written, at = 0, 0
    while written < mb * 1_000_000:
        doc = text[at:at + 2000] or text[:2000]
        at = at + 2000 if at + 2000 < len(text) else 0
        line = json.dumps({"text": doc}) + "\n"
        f.write(line)
        written += len(line.encode())
# The tokenizer: merges that build each word (with its leading space) left to right.
alphabet = bytes_to_unicode()
vocab = {alphabet[b]: b for b in range(256)}
merges = []
words = sorted(set(re.findall(r" ?[A-Za-z]+| ?[0-9]+| ?[^\sA-Za-z0-9]+", text)))
for w in words:
    chars = "".join(alphabet[b] for b in w.encode())
    for k in range(2, len(chars) + 1):
        left, right = chars[:k - 1], chars[k - 1]
        if chars[:k] not in vocab:
            vocab[chars[:k]] = len(vocab)
            merges.append(left + " " + right)
doc = {"version": "1.0", "added_tokens": [{"id": len(vocab), "content": "<|endoftext|>",
       "special": True, "single_word": False, "lstrip": False, "rstrip": False,
       "normalized": False}],
       "normalizer": None,
       "pre_tokenizer": {"type": "ByteLevel", "add_prefix_space": False, "use_regex": True},
       "model": {"type": "BPE", "dropout": None, "unk_token": None, "byte_fallback": False,
                 "vocab": vocab, "merges": merges}}
json.dump(doc, open(f"{work}/tokenizer.json", "w", encoding="utf-8"), ensure_ascii=False)
print(f"bench_tokenize: {mb} MB of JSONL, a tokenizer of {len(vocab) + 1} tokens "
      f"({len(merges)} merges)")
PYEOF

# run RANKS: REPEAT runs; prints the median MB/s per rank and the range.
run() {
  local ranks=$1 i rates=()
  for ((i = 0; i < REPEAT; i++)); do
    rm -rf "$work/out"
    "$MPIEXEC" -n "$ranks" "$tokenize" --input "$work/corpus.jsonl" --tokenizer "$work/tokenizer.json" \
      --output-dir "$work/out" --val-tokens 100000 >"$work/log" 2>&1 ||
      { echo "bench_tokenize: the run on $ranks rank(s) failed"; tail -5 "$work/log"; exit 1; }
    rates+=("$(sed -n 's/.*| \([0-9.]*\) MB\/s per rank.*/\1/p' "$work/log")")
  done
  local sorted
  sorted=$(printf '%s\n' "${rates[@]}" | sort -g)
  echo "bench_tokenize: $ranks rank(s): $(sed -n "$(((REPEAT + 1) / 2))p" <<<"$sorted") MB/s of" \
    "text per rank (median of $REPEAT; range $(head -1 <<<"$sorted")-$(tail -1 <<<"$sorted"))" \
    "| $(grep '^tokenize: done' "$work/log" | cut -d'|' -f2-3)"
}
run 1
run 2
