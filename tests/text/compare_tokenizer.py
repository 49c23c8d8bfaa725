#!/usr/bin/env python3
"""The C++ byte-level BPE tokenizer (src/text/) against an independent Python reference.

The reference is written here from the published algorithms, not from the C++: the split
patterns run by Python's `regex` module (which knows \\p{L}, \\p{N} and lookaheads), GPT-2's
byte-to-character alphabet, BPE as OpenAI's GPT-2 encoder.py applies merges (lowest rank first,
leftmost among equals), Llama 3's whole-word rule (Hugging Face's ignore_merges) and added tokens
split out leftmost-longest (as Hugging Face's tokenizers does).

It trains a tiny BPE on a mixed corpus (English with contractions, digit runs, Cyrillic, Greek,
CJK, Devanagari, emoji, whitespace runs, \\r\\n newlines), writes tokenizer.json files in the
styles of GPT-2 (ByteLevel pre-tokenizer, merges as "a b" strings) and Llama 3 (Split + ByteLevel,
merges as ["a", "b"] pairs, ignore_merges, special tokens after the vocabulary, a template that
puts <|begin_of_text|> first) and a third (GPT-2's with add_prefix_space), then compares the C++
pre-tokens, encode(), encode_with_specials() and decode() with the reference on hand-picked tricky
strings and a sweep of random Unicode strings.

  compare_tokenizer.py HARNESS        (ctest text_bpe_reference; HARNESS: tokenizer_harness)
"""
import collections
import json
import os
import random
import subprocess
import sys
import tempfile
import unicodedata

try:
    import regex
except ImportError:
    print("SKIP: Python's regex module is missing (Debian: apt-get install python3-regex)")
    sys.exit(77)

GPT2_PATTERN = (r"'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+")
LLAMA3_PATTERN = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}|"
                  r" ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+")


def byte_chars():
    """GPT-2's alphabet: printable Latin-1 bytes stand for themselves, the rest from U+0100."""
    keep = set(range(0x21, 0x7F)) | set(range(0xA1, 0xAD)) | set(range(0xAE, 0x100))
    table, extra = {}, 0
    for b in range(256):
        if b in keep:
            table[b] = chr(b)
        else:
            table[b] = chr(0x100 + extra)
            extra += 1
    return table


BYTE_CHAR = byte_chars()
CHAR_BYTE = {c: b for b, c in BYTE_CHAR.items()}


def to_key(text_bytes):
    return "".join(BYTE_CHAR[b] for b in text_bytes)


def from_key(key):
    return bytes(CHAR_BYTE[c] for c in key)


CORPUS = """\
The quick brown fox can't jump over the lazy dog; it's tired, isn't it? They'll say we'd've known.
I'm sure you're right: they've been here since 1999, and 2024's figures show 123456789 visitors.
Tokenizers split text into pieces. Tokenization isn't hard, but it's subtle!!! (Really...)
Привет, мир! Как дела? Это тест токенизатора на русском языке, 2024 год.
Καλημέρα κόσμε! Η γλώσσα είναι ελληνική, και οι αριθμοί είναι 3141592.
你好，世界！这是一个分词器的测试。我们今天学习机器学习和自然语言处理。
日本語のテキストも少しあります。東京は大きな都市です。
नमस्ते दुनिया! यह एक परीक्षण है। हिंदी भाषा में लिखा गया पाठ।
Emoji: 😀😀 🎉🎉🎉 👍🏽 👨‍👩‍👧 🇫🇷 ❤️ and more 🚀!
Whitespace    runs\tand\ttabs   \n\n  indented lines\r\nwindows\r\nnewlines   end
def f(x):\n    return x ** 2  # code, with 4-space indents\n\n\nclass A:\n\tpass
URLs like https://example.com/path?q=1&r=2 and emails like a.b@c.de; prices $19.99, 50%.
"""


def pretokenize(pattern, text):
    return regex.findall(pattern, text)


def train_bpe(pattern, corpus, merges_wanted):
    """Byte-level BPE training: the most frequent adjacent pair, ties by the pair itself."""
    words = collections.Counter(tuple(to_key(p.encode())) for p in pretokenize(pattern, corpus))
    words = {w: n for w, n in words.items()}
    merges = []
    for _ in range(merges_wanted):
        pairs = collections.Counter()
        for w, n in words.items():
            for a, b in zip(w, w[1:]):
                pairs[(a, b)] += n
        if not pairs:
            break
        best = max(pairs, key=lambda p: (pairs[p], p))
        merges.append(best)
        merged = {}
        for w, n in words.items():
            out, i = [], 0
            while i < len(w):
                if i + 1 < len(w) and (w[i], w[i + 1]) == best:
                    out.append(w[i] + w[i + 1])
                    i += 2
                else:
                    out.append(w[i])
                    i += 1
            merged[tuple(out)] = merged.get(tuple(out), 0) + n
        words = merged
    vocab = {BYTE_CHAR[b]: b for b in range(256)}
    for a, b in merges:
        vocab.setdefault(a + b, len(vocab))
    return vocab, merges


class Reference:
    def __init__(self, pattern, vocab, merges, added, ignore_merges=False, prefix_space=False):
        self.pattern = pattern
        self.vocab = vocab
        self.ranks = {pair: i for i, pair in reversed(list(enumerate(merges)))}
        self.ignore_merges = ignore_merges
        self.prefix_space = prefix_space
        self.added = dict(added)  # content -> id
        self.plain_added = {c for c in self.added if not c.startswith("<|")}  # not special
        self.bytes_of = {i: from_key(k) for k, i in vocab.items()}
        for content, i in added:
            self.bytes_of[i] = content.encode()
        alternation = "|".join(regex.escape(c) for c in sorted(self.added, key=len, reverse=True))
        self.added_re = regex.compile("(" + alternation + ")") if self.added else None
        plain = "|".join(regex.escape(c) for c in sorted(self.plain_added, key=len, reverse=True))
        self.plain_re = regex.compile("(" + plain + ")") if plain else None

    def bpe(self, piece):
        word = [BYTE_CHAR[b] for b in piece.encode()]
        if self.ignore_merges and "".join(word) in self.vocab:
            return [self.vocab["".join(word)]]
        while len(word) > 1:
            ranked = [(self.ranks[(a, b)], i) for i, (a, b) in enumerate(zip(word, word[1:]))
                      if (a, b) in self.ranks]
            if not ranked:
                break
            _, i = min(ranked)
            word = word[:i] + [word[i] + word[i + 1]] + word[i + 2:]
        return [self.vocab[t] for t in word]

    def encode_plain(self, text):
        if self.prefix_space and text and not text.startswith(" "):
            text = " " + text
        return [i for piece in pretokenize(self.pattern, text) for i in self.bpe(piece)]

    def encode_with_specials(self, text, specials=True):
        """Added tokens split out (every part then gets the prefix space); special ones only when
        `specials`, as Hugging Face's encode with encode_special_tokens off."""
        ids = []
        pattern = self.added_re if specials else self.plain_re
        for k, part in enumerate(pattern.split(text) if pattern else [text]):
            if k % 2:
                ids.append(self.added[part])
            elif part:
                ids.extend(self.encode_plain(part))
        return ids

    def encode(self, text):
        return self.encode_with_specials(text, specials=False)

    def decode(self, ids):
        return b"".join(self.bytes_of[i] for i in ids).decode("utf-8", errors="surrogateescape")


def added_entry(content, i, special=True):
    return {"id": i, "content": content, "single_word": False, "lstrip": False, "rstrip": False,
            "normalized": not special, "special": special}


def byte_level(prefix, use_regex):
    return {"type": "ByteLevel", "add_prefix_space": prefix, "trim_offsets": True,
            "use_regex": use_regex}


def gpt2_json(vocab, merges, prefix_space):
    eot = len(vocab)
    v = dict(vocab)
    v["<|endoftext|>"] = eot
    return {
        "version": "1.0", "truncation": None, "padding": None,
        "added_tokens": [added_entry("<|endoftext|>", eot)],
        "normalizer": None,
        "pre_tokenizer": byte_level(prefix_space, True),
        "post_processor": byte_level(True, True),
        "decoder": byte_level(True, True),
        "model": {"type": "BPE", "dropout": None, "unk_token": None,
                  "continuing_subword_prefix": "", "end_of_word_suffix": "", "fuse_unk": False,
                  "byte_fallback": False, "vocab": v, "merges": [a + " " + b for a, b in merges]},
    }, [("<|endoftext|>", eot)]


LLAMA3_SPECIALS = ["<|begin_of_text|>", "<|end_of_text|>", "<|end|>", "<|eot_id|>"]


def llama3_json(vocab, merges):
    n = len(vocab)
    added = [(s, n + k) for k, s in enumerate(LLAMA3_SPECIALS)]
    added.append(("<tool>", n + len(added)))  # an added token that is not special
    bos = added[0][1]
    template = {
        "type": "TemplateProcessing",
        "single": [{"SpecialToken": {"id": "<|begin_of_text|>", "type_id": 0}},
                   {"Sequence": {"id": "A", "type_id": 0}}],
        "pair": [{"SpecialToken": {"id": "<|begin_of_text|>", "type_id": 0}},
                 {"Sequence": {"id": "A", "type_id": 0}},
                 {"SpecialToken": {"id": "<|begin_of_text|>", "type_id": 1}},
                 {"Sequence": {"id": "B", "type_id": 1}}],
        "special_tokens": {"<|begin_of_text|>": {"id": "<|begin_of_text|>", "ids": [bos],
                                                 "tokens": ["<|begin_of_text|>"]}},
    }
    return {
        "version": "1.0", "truncation": None, "padding": None,
        "added_tokens": [added_entry(c, i, special=(c != "<tool>")) for c, i in added],
        "normalizer": None,
        "pre_tokenizer": {"type": "Sequence", "pretokenizers": [
            {"type": "Split", "pattern": {"Regex": LLAMA3_PATTERN}, "behavior": "Isolated",
             "invert": False},
            byte_level(False, False)]},
        "post_processor": {"type": "Sequence", "processors": [byte_level(True, False), template]},
        "decoder": byte_level(True, True),
        "model": {"type": "BPE", "dropout": None, "unk_token": None,
                  "continuing_subword_prefix": None, "end_of_word_suffix": None,
                  "fuse_unk": False, "byte_fallback": False, "ignore_merges": True,
                  "vocab": vocab, "merges": [[a, b] for a, b in merges]},
    }, added, [bos]


def whole_words(vocab, words):
    """Vocabulary entries BPE's merges never build: only Llama 3's whole-word rule reaches them."""
    v = dict(vocab)
    for w in words:
        v.setdefault(to_key(w.encode()), len(v))
    return v


TRICKY = [
    "", "a", " ", "  ", "   hello", "  hello", "hello  ", "a\n\n b", "\n", "\r\n", "\n\n\n",
    " \n", "\n ", "x \n\ny", "a\r\n\r\nb", "tabs\t\tand  \t spaces", "end with spaces   ",
    "'S", "'s", "'re", "'RE", "'Re", "'ll'LL'd'D'm'M't'T've'VE", "'ſ", "don't", "DON'T", "it's",
    "we've'll", "''s", "'", "''", "x'", "?'s", " 'hello", "rock'n'roll",
    "123456", "1234567890123", " 12 345", "x1y", "3.14159", "1,000,000", "٣٤٥ ١٢", "Ⅻ ⅻ ½ ²³",
    "!!!", " !!!", "!hello", "!!hello", "...\n\n", " ?\r\n", "(a)", "a.b.c", "$100",
    "Привет, мир!", "Καλημέρα", "你好，世界！", "日本語のテキスト", "नमस्ते दुनिया", "क्षत्रिय",
    "😀", "😀😀😀", " 😀", "👨‍👩‍👧", "🇫🇷🇩🇪", "❤️", "a😀b", "👍🏽",
    "\u00a0nbsp\u00a0 \u3000ideographic\u3000", "\u2028line\u2029para", "\u0085next",
    "\x0b\x0c vt ff", "\x1c\x1d\x1e\x1f info separators", "\x00\x01 controls\x7f",
    "café naïve coöperate", "ﬁ ligature", "ǅ titlecase",
    "<|endoftext|>", "a<|endoftext|>b", "<|begin_of_text|>Hello<|end_of_text|>",
    "<|end|><|end_of_text|><|end", "<tool> use <tool>", "<|eot_id|>\n\n",
    "tokenizer tokenization Hello ſtraße", " \U00011F50", "x\U00011F50\U00011F51 9",
    "a" * 300, "ab" * 150, " " * 200 + "x", "\n" * 100, "9" * 150,
    "漢字" * 60, "😀" * 40, "Привет" * 30, "!?" * 80, "Hello world " * 30,
]

# Characters the random strings are drawn from, by kind.
POOLS = {
    "ascii_letters": "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ",
    "digits": "0123456789",
    "punct": "!\"#$%&'()*+,-./:;<=>?@[\\]^_`{|}~",
    "space": " ",
    "ws": "\t\n\r\x0b\x0c\u00a0\u2003\u3000\u2028\u0085",
    "contraction": "sStTmMdDrReEvVlLſ'",
    "cyrillic": "абвгдежзийклмнопрстуфхцчшщъыьэюяАБВГДЕЁ",
    "greek": "αβγδεζηθικλμνξοπρστυφχψωΑΒΓΔΩά",
    "cjk": "的一是不了人我在有他这中大来上国个到说们为子和你地出道也时年",
    "devanagari": "अआइईउऊएऐओऔकखगघचछजझटठडढणतथदधनपफबभमयरलवशषसह\u093e\u093f\u0940\u094d\u0902",
    "emoji": "😀😃😄🎉👍🏽🚀❤\ufe0f\u200d🇫🇷",
    "numbers_other": "٠١٢٣४५६Ⅻ½²³",
    "marks": "\u0301\u0308\u20dd",
}
SPECIAL_PIECES = ["<|endoftext|>", "<|begin_of_text|>", "<|end_of_text|>", "<|end|>", "<tool>"]


def random_char(rng, agree):
    if rng.random() < 0.08:
        while True:  # anywhere in Unicode, where regex and this Python's unicodedata agree
            cp = rng.randrange(0x110000)
            if not (0xD800 <= cp <= 0xDFFF) and agree(chr(cp)):
                return chr(cp)
    return rng.choice(POOLS[rng.choice(list(POOLS))])


def random_strings(rng, count):
    letter, number = regex.compile(r"\p{L}"), regex.compile(r"\p{N}")

    def agree(c):  # the C++ tables are from unicodedata; this regex may know a later Unicode
        cat = unicodedata.category(c)
        # The C++ tables know Unicode 16.0, which assigned characters in planes 0 to 3 that an
        # older unicodedata and regex both call unassigned: neither can say what those are.
        if cat == "Cn" and ord(c) < 0x40000:
            return False
        return bool(letter.match(c)) == (cat[0] == "L") and bool(number.match(c)) == (cat[0] == "N")

    out = []
    for _ in range(count):
        parts = []
        for _ in range(rng.randrange(1, 40)):
            if rng.random() < 0.03:
                parts.append(rng.choice(SPECIAL_PIECES))
            else:
                parts.append(random_char(rng, agree) * (rng.randrange(1, 6) if rng.random() < 0.2 else 1))
        out.append("".join(parts))
    return out


def run_harness(harness, tokenizer, strings, work):
    path = os.path.join(work, "strings.json")
    with open(path, "w", encoding="utf-8") as f:
        json.dump(strings, f, ensure_ascii=False)
    proc = subprocess.run([harness, tokenizer, path], capture_output=True)
    if proc.returncode != 0:
        print(f"FAIL: tokenizer_harness {tokenizer}: exit {proc.returncode}: "
              f"{proc.stderr.decode(errors='replace').strip()}")
        sys.exit(1)
    lines = proc.stdout.decode("utf-8", errors="surrogateescape").rstrip("\n").split("\n")
    return json.loads(lines[0]), [json.loads(line) for line in lines[1:]]


def compare(name, harness, tokenizer, ref, strings, work, kind, prefix, round_trip):
    head, rows = run_harness(harness, tokenizer, strings, work)
    bad = []
    if head["pre_tokenizer"] != kind or head["prefix"] != prefix:
        bad.append(f"header {head}, expected pre_tokenizer {kind} and prefix {prefix}")
    for text, got in zip(strings, rows):
        want_pre = pretokenize(ref.pattern, " " + text if ref.prefix_space and text and
                               not text.startswith(" ") else text)
        if got["pre"] != want_pre:
            bad.append(f"pre-tokens of {text!r}:\n   C++    {got['pre']}\n   Python {want_pre}")
        # The hand-written scanner against the general path (Oniguruma), and segments.
        for key, same in (("general_pre", "pre"), ("general_ids", "ids"), ("segmented", "ids")):
            if got[key] != got[same]:
                bad.append(f"{key} of {text!r}:\n   {got[key]}\n   {same} {got[same]}")
        for key, want in (("ids", ref.encode(text)), ("special", ref.encode_with_specials(text))):
            if got[key] != want:
                bad.append(f"{key} of {text!r}:\n   C++    {got[key]}\n   Python {want}")
        for key, ids in (("decoded", "ids"), ("decoded_special", "special")):
            want = text if round_trip else ref.decode(got[ids])
            if got[key] != want:
                bad.append(f"{key} of {text!r}: C++ {got[key]!r}, expected {want!r}")
    if len(rows) != len(strings):
        bad.append(f"{len(rows)} results for {len(strings)} strings")
    for line in bad[:8]:
        print(f"FAIL {name}: {line}")
    print(f"{name}: {len(strings)} strings, {len(bad)} mismatches")
    return not bad


def main():
    harness = sys.argv[1]
    rng = random.Random(20240520)
    strings = TRICKY + random_strings(rng, 1500)
    ok = True
    with tempfile.TemporaryDirectory(prefix="mpf-bpe-") as work:
        def write(name, doc):
            path = os.path.join(work, name)
            with open(path, "w", encoding="utf-8") as f:
                json.dump(doc, f, ensure_ascii=(name == "gpt2.json"))  # \uXXXX escapes in one
            return path

        vocab, merges = train_bpe(GPT2_PATTERN, CORPUS, 400)
        doc, added = gpt2_json(vocab, merges, prefix_space=False)
        ref = Reference(GPT2_PATTERN, doc["model"]["vocab"], merges, added)
        ok &= compare("gpt2", harness, write("gpt2.json", doc), ref, strings, work, "gpt2", [],
                      True)
        doc, added = gpt2_json(vocab, merges, prefix_space=True)
        ref = Reference(GPT2_PATTERN, doc["model"]["vocab"], merges, added, prefix_space=True)
        ok &= compare("gpt2_prefix_space", harness, write("gpt2_prefix.json", doc), ref,
                      strings[:400], work, "gpt2", [], False)

        vocab, merges = train_bpe(LLAMA3_PATTERN, CORPUS, 400)
        vocab = whole_words(vocab, [" tokenizer", " tokenization", "Hello", " ſtraße", "!!!",
                                    "😀😀😀", "   "])
        doc, added, prefix = llama3_json(vocab, merges)
        ref = Reference(LLAMA3_PATTERN, vocab, merges, added, ignore_merges=True)
        ok &= compare("llama3", harness, write("llama3.json", doc), ref, strings, work, "llama3",
                      prefix, True)
    if not ok:
        sys.exit(1)
    print("text_bpe_reference: every pre-token, encoding and decoding matches the reference")


if __name__ == "__main__":
    main()
