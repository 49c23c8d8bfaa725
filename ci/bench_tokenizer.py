#!/usr/bin/env python3
"""The BPE tokenizer's encode throughput on one core, beside Python's.

English text (this repository's documentation, repeated to 2 MB) is encoded by the C++
tokenizer (src/text/, through the test harness tests/text/tokenizer_harness) and by the Python
reference of tests/text/compare_tokenizer.py (Python's regex module for the split pattern and a
dict-based BPE with a cache of words, the way OpenAI's GPT-2 encoder.py runs), with a BPE of 1000
merges trained on part of the same text, in GPT-2's and Llama 3's styles. Hugging Face's tokenizers and
tiktoken are named when importable (Python at large) and timed on the same file.

  python3 ci/bench_tokenizer.py BUILD_DIR      (make bench)
A benchmark, not a test: it prints figures and exits 1 only when a run fails.
"""
import glob
import json
import os
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "tests", "text"))
try:
    import regex  # noqa: F401
except ImportError:
    print("bench_tokenizer: SKIP: Python's regex module is missing (Debian: python3-regex)")
    sys.exit(0)
import compare_tokenizer as ref  # noqa: E402  (the reference and its trainer)
import compare_pipelines as shapes  # noqa: E402  (files in the families' shapes)


def python_mb_s(reference, text):
    cache = {}

    def encode(t):
        ids = []
        for piece in ref.regex.findall(reference.pattern, t):
            got = cache.get(piece)
            if got is None:
                got = cache[piece] = reference.bpe(piece)
            ids.extend(got)
        return ids

    best = 1e30
    for _ in range(2):
        start = time.perf_counter()
        encode(text)
        best = min(best, time.perf_counter() - start)
    return len(text.encode()) / best / 1e6


def others(path, text):
    """Hugging Face tokenizers on the same tokenizer.json, where installed."""
    out = []
    try:
        import tokenizers  # noqa: F401
        tok = tokenizers.Tokenizer.from_file(path)
        start = time.perf_counter()
        tok.encode(text, add_special_tokens=False)
        out.append(f"HF tokenizers {len(text.encode()) / (time.perf_counter() - start) / 1e6:.1f}")
    except ImportError:
        out.append("HF tokenizers: not installed")
    except Exception as e:  # a version that reads the file otherwise
        out.append(f"HF tokenizers: {e}")
    return out


def main():
    build = sys.argv[1] if len(sys.argv) > 1 else os.path.join(ROOT, "build")
    harness = os.path.join(build, "tests", "tokenizer_harness")
    if not os.access(harness, os.X_OK):
        print(f"bench_tokenizer: {harness} not found; build first (make build)")
        sys.exit(1)
    docs = "".join(open(p, encoding="utf-8").read()
                   for p in sorted(glob.glob(os.path.join(ROOT, "docs", "*.md"))) +
                   [os.path.join(ROOT, "README.md")])
    text = (docs * (2_000_000 // len(docs.encode()) + 1))[:2_000_000]
    print(f"mpiformer bench_tokenizer | encode on one thread | {len(text.encode()) / 1e6:.1f} MB of "
          f"English (docs/) | BPE of 1000 merges trained on part of it (the families' shapes: 300 on a "
          f"small mixed corpus)")
    with tempfile.TemporaryDirectory(prefix="mpf-bench-tok-") as work:
        corpus = os.path.join(work, "corpus.txt")
        with open(corpus, "w", encoding="utf-8") as f:
            f.write(text)
        for style in ("gpt2", "llama3"):
            pattern = ref.GPT2_PATTERN if style == "gpt2" else ref.LLAMA3_PATTERN
            vocab, merges = ref.train_bpe(pattern, docs[:50000], 1000)
            if style == "gpt2":
                doc, added = ref.gpt2_json(vocab, merges, prefix_space=False)
                reference = ref.Reference(pattern, doc["model"]["vocab"], merges, added)
            else:
                doc, added, _ = ref.llama3_json(vocab, merges)
                reference = ref.Reference(pattern, vocab, merges, added, ignore_merges=True)
            path = os.path.join(work, style + ".json")
            with open(path, "w", encoding="utf-8") as f:
                json.dump(doc, f)
            proc = subprocess.run([harness, "--bench", path, corpus], capture_output=True,
                                  text=True)
            if proc.returncode != 0:
                print(f"bench_tokenizer: the harness failed: {proc.stderr.strip()}")
                sys.exit(1)
            cpp = json.loads(proc.stdout)
            py = python_mb_s(reference, text)
            print(f"tokenizer {style:6} | mpiformer {cpp['mb_s']:6.1f} MB/s (first pass "
                  f"{cpp['first_mb_s']:.1f}) | Python regex + BPE {py:5.2f} MB/s | "
                  f"{cpp['mb_s'] / py:5.1f}x | {cpp['bytes'] / cpp['tokens']:.2f} bytes/token | "
                  + " | ".join(others(path, text)))
    # Every other family's shape (compare_pipelines.py's files, trained on its small corpus), and
    # the time to load a vocabulary of Llama 3's size.
    with tempfile.TemporaryDirectory(prefix="mpf-bench-tok-") as work:
        corpus = os.path.join(work, "corpus.txt")
        with open(corpus, "w", encoding="utf-8") as f:
            f.write(text)
        for name, doc in shapes.families():
            if name.startswith("components"):
                continue
            path = os.path.join(work, name + ".json")
            with open(path, "w", encoding="utf-8") as f:
                json.dump(doc, f, ensure_ascii=False)
            cpp = run_harness(harness, path, corpus)
            print(f"tokenizer {name:16} | mpiformer {cpp['mb_s']:6.1f} MB/s (first pass "
                  f"{cpp['first_mb_s']:.1f}) | {cpp['bytes'] / cpp['tokens']:.2f} bytes/token")
        path = os.path.join(work, "vocab128k.json")
        write_large_vocabulary(path, 128256)
        cpp = run_harness(harness, path, corpus)
        print(f"tokenizer load       | 128,256-token byte-level file ({os.path.getsize(path) / 1e6:.1f}"
              f" MB, 128,000 merges) loads in {cpp['load_s']:.3f} s")


def run_harness(harness, path, corpus):
    proc = subprocess.run([harness, "--bench", path, corpus], capture_output=True, text=True)
    if proc.returncode != 0:
        print(f"bench_tokenizer: the harness failed on {path}: {proc.stderr.strip()}")
        sys.exit(1)
    return json.loads(proc.stdout)


def write_large_vocabulary(path, size):
    """A byte-level BPE of `size` tokens whose merges build random words letter by letter."""
    import random
    rng = random.Random(5)
    alphabet = ref.BYTE_CHAR
    vocab = {alphabet[b]: b for b in range(256)}
    merges = []
    letters = "abcdefghijklmnopqrstuvwxyz"
    while len(vocab) < size:
        word = alphabet[0x20] + "".join(rng.choice(letters) for _ in range(rng.randrange(2, 12)))
        for k in range(2, len(word) + 1):
            if word[:k] not in vocab and len(vocab) < size:
                vocab[word[:k]] = len(vocab)
                merges.append([word[:k - 1], word[k - 1]])
    doc = {"version": "1.0", "added_tokens": [], "normalizer": None,
           "pre_tokenizer": {"type": "Sequence", "pretokenizers": [
               {"type": "Split", "pattern": {"Regex": ref.LLAMA3_PATTERN}, "behavior": "Isolated",
                "invert": False},
               {"type": "ByteLevel", "add_prefix_space": False, "use_regex": False}]},
           "post_processor": None, "decoder": {"type": "ByteLevel"},
           "model": {"type": "BPE", "ignore_merges": True, "vocab": vocab, "merges": merges}}
    with open(path, "w", encoding="utf-8") as f:
        json.dump(doc, f, ensure_ascii=False)


if __name__ == "__main__":
    main()
