#!/usr/bin/env python3
"""Hugging Face's tokenizer pipeline in C++ (src/text/) against the Python reference of
pipeline_reference.py, on tokenizer.json files built here in the shapes of the families' files:
GPT-NeoX/Phi-2 (ByteLevel, NFC, added tokens for runs of spaces that are not special), Qwen2.5
(NFC, Qwen2's split), DeepSeek V3 (an empty normalizer Sequence, three Splits), Llama 2 and
Mistral 7B (Prepend and Replace, byte fallback, unk, the SentencePiece decoders), Llama 2 as newer
files write it (Metaspace, prepend_scheme first), Gemma (Replace only), SmolLM (Digits), Falcon
(Punctuation, ByteLevel, Digits, a Split), OLMo's dolma2 (Llama 3's split inverted), Mistral
Nemo's tekken pattern, and two files of the remaining components (every Split behaviour,
Whitespace, WhitespaceSplit, NFKD, Lowercase, StripAccents, Strip, Metaspace "always",
continuing_subword_prefix, end_of_word_suffix, lstrip, rstrip, single_word).

For each file and string it checks encode() (special tokens as text), encode_with_specials(),
decode(), the pre-tokens, the general (Oniguruma) path against any hand-written scanner, and the
text encoded a segment at a time where the tokenizer allows cuts.

Python's unicodedata here may be older than the C++'s Unicode 15: random characters are drawn only
where unicodedata and the regex module agree (characters assigned after unicodedata's version are
skipped, and the count is printed).

  compare_pipelines.py HARNESS        (ctest text_pipeline_reference)
"""
import collections
import json
import os
import random
import sys
import tempfile
import unicodedata

try:
    import regex
except ImportError:
    print("SKIP: Python's regex module is missing (Debian: apt-get install python3-regex)")
    sys.exit(77)

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import compare_tokenizer as base  # noqa: E402  (the strings and the harness runner)
from pipeline_reference import BYTE_CHAR, CHAR_BYTE, Tokenizer  # noqa: E402

LLAMA3 = base.LLAMA3_PATTERN
QWEN2 = LLAMA3.replace(r"\p{N}{1,3}", r"\p{N}")
TEKKEN = (r"[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]*[\p{Ll}\p{Lm}\p{Lo}\p{M}]+|"
          r"[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]+[\p{Ll}\p{Lm}\p{Lo}\p{M}]*|\p{N}|"
          r" ?[^\s\p{L}\p{N}]+[\r\n/]*|\s*[\r\n]+|\s+(?!\S)|\s+")
DEEPSEEK = [r"\p{N}{1,3}", r"[一-龥぀-ゟ゠-ヿ]+",
            r"[!\"#$%&'()*+,\-./:;<=>?@\[\\\]^_`{|}~][A-Za-z]+|[^\r\n\p{L}\p{P}\p{S}]?[\p{L}\p{M}]+|"
            r" ?[\p{P}\p{S}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+"]
SP = "\u2581"


def added(content, i, special=True, **flags):
    a = {"id": i, "content": content, "single_word": False, "lstrip": False, "rstrip": False,
         "normalized": not special, "special": special}
    a.update(flags)
    return a


def split(pattern, behavior="Isolated", invert=False, literal=False):
    return {"type": "Split", "pattern": {"String" if literal else "Regex": pattern},
            "behavior": behavior, "invert": invert}


def byte_level(prefix=False, use_regex=True):
    return {"type": "ByteLevel", "add_prefix_space": prefix, "trim_offsets": True,
            "use_regex": use_regex}


def seq(kind, key, items):
    return {"type": "Sequence", key: items}


def template(before=(), after=()):
    single = [{"SpecialToken": {"id": t, "type_id": 0}} for t, _ in before]
    single.append({"Sequence": {"id": "A", "type_id": 0}})
    single += [{"SpecialToken": {"id": t, "type_id": 0}} for t, _ in after]
    return {"type": "TemplateProcessing", "single": single, "pair": single,
            "special_tokens": {t: {"id": t, "ids": [i], "tokens": [t]}
                               for t, i in list(before) + list(after)}}


SP_DECODER = seq("d", "decoders", [
    {"type": "Replace", "pattern": {"String": SP}, "content": " "}, {"type": "ByteFallback"},
    {"type": "Fuse"}, {"type": "Strip", "content": " ", "start": 1, "stop": 0}])


def train(doc, merges_wanted=300):
    """The vocabulary and merges of a BPE trained on the corpus as the file's pipeline cuts it."""
    model = doc["model"]
    byte_level = "ByteLevel" in json.dumps(doc["pre_tokenizer"])
    prefix = model.get("continuing_subword_prefix") or ""
    suffix = model.get("end_of_word_suffix") or ""
    vocab = {}
    for a in doc["added_tokens"]:
        if a["special"] and not byte_level:
            vocab[a["content"]] = len(vocab)
    if model.get("unk_token"):
        vocab.setdefault(model["unk_token"], len(vocab))
    if byte_level:
        for b in range(256):
            vocab.setdefault(BYTE_CHAR[b], len(vocab))
    elif model.get("byte_fallback"):
        for b in range(256):
            vocab["<0x%02X>" % b] = len(vocab)
    ref = Tokenizer(dict(doc, model=dict(model, vocab={}, merges=[])))
    pieces = [p for line in base.CORPUS.split("\n")
              for p, _ in ref.pre_tokenize([(ref.normalize(line), True)])]
    words = collections.Counter()
    for p in pieces:
        words[tuple((prefix if i else "") + c + (suffix if i == len(p) - 1 else "")
                    for i, c in enumerate(p))] += 1
    chars = collections.Counter(s for w, n in words.items() for s in w for _ in range(n))
    for s, n in sorted(chars.items()):
        if byte_level or n >= 2:  # rare characters left to byte fallback or unk
            vocab.setdefault(s, len(vocab))
    words = {w: n for w, n in words.items() if all(s in vocab for s in w)}
    merges = []
    for _ in range(merges_wanted):
        pairs = collections.Counter()
        for w, n in words.items():
            for a, b in zip(w, w[1:]):
                pairs[(a, b)] += n
        if not pairs:
            break
        a, b = max(pairs, key=lambda p: (pairs[p], p))
        merges.append([a, b])
        new = a + b[len(prefix):]
        vocab.setdefault(new, len(vocab))
        merged = {}
        for w, n in words.items():
            out, i = [], 0
            while i < len(w):
                if i + 1 < len(w) and (w[i], w[i + 1]) == (a, b):
                    out.append(new)
                    i += 2
                else:
                    out.append(w[i])
                    i += 1
            merged[tuple(out)] = merged.get(tuple(out), 0) + n
        words = merged
    for a in doc["added_tokens"]:  # ids after the vocabulary, as most files number them
        if a["content"] in vocab:
            a["id"] = vocab[a["content"]]
        else:
            a["id"] = len(vocab) + 1000 + a["id"]
    model["vocab"], model["merges"] = vocab, [a + " " + b if " " not in a + b else [a, b]
                                             for a, b in merges]
    return doc


def family(name, normalizer, pre, added_tokens, post=None, decoder=None, **model):
    doc = {"version": "1.0", "truncation": None, "padding": None, "added_tokens": added_tokens,
           "normalizer": normalizer, "pre_tokenizer": pre, "post_processor": post,
           "decoder": decoder if decoder is not None else byte_level(),
           "model": dict({"type": "BPE", "dropout": None, "unk_token": None,
                          "continuing_subword_prefix": None, "end_of_word_suffix": None,
                          "fuse_unk": False, "byte_fallback": False, "ignore_merges": False},
                         **model)}
    train(doc)
    # The template's ids, now that the added tokens have theirs.
    ids = {a["content"]: a["id"] for a in doc["added_tokens"]}
    def fix(p):
        if p and p["type"] == "TemplateProcessing":
            for t, entry in p["special_tokens"].items():
                entry["ids"] = [ids[t]]
        if p and p["type"] == "Sequence":
            for q in p["processors"]:
                fix(q)
    fix(doc["post_processor"])
    return name, doc


def families():
    nfc = {"type": "NFC"}
    spaces = [added(" " * n, 900 + n, special=False) for n in (2, 3, 4, 8)] + \
             [added("\t\t", 920, special=False)]
    eot = added("<|endoftext|>", 0)
    sp_added = [added("<unk>", 0, normalized=False), added("<s>", 1, normalized=False),
                added("</s>", 2, normalized=False)]
    bos = [("<s>", 1)]
    yield family("neox_phi2", nfc, byte_level(), [eot] + spaces,
                 post=byte_level(True))
    yield family("qwen25", nfc, seq("p", "pretokenizers", [split(QWEN2), byte_level(False, False)]),
                 [eot, added("<|im_start|>", 1), added("<think>", 2, special=False)],
                 post=byte_level(False, False))
    yield family("deepseek_v3", seq("n", "normalizers", []),
                 seq("p", "pretokenizers", [split(p) for p in DEEPSEEK] +
                     [byte_level(False, False)]),
                 [added("<｜begin▁of▁sentence｜>", 0), added("<｜end▁of▁sentence｜>", 1)],
                 post=template([("<｜begin▁of▁sentence｜>", 0)]))
    yield family("llama2", seq("n", "normalizers", [{"type": "Prepend", "prepend": SP},
                                                    {"type": "Replace", "pattern": {"String": " "},
                                                     "content": SP}]),
                 None, sp_added, post=template(bos), decoder=SP_DECODER, byte_fallback=True,
                 unk_token="<unk>", fuse_unk=True)
    yield family("llama2_metaspace", None,
                 {"type": "Metaspace", "replacement": SP, "prepend_scheme": "first",
                  "split": False}, sp_added, post=template(bos, [("</s>", 2)]),
                 decoder={"type": "Metaspace", "replacement": SP, "prepend_scheme": "first",
                          "split": False}, byte_fallback=True, unk_token="<unk>", fuse_unk=True)
    yield family("gemma", {"type": "Replace", "pattern": {"String": " "}, "content": SP}, None,
                 [added("<pad>", 0), added("<eos>", 1), added("<bos>", 2), added("<unk>", 3),
                  added("<start_of_turn>", 4)], post=template([("<bos>", 2)]),
                 decoder=seq("d", "decoders", SP_DECODER["decoders"][:3]), byte_fallback=True,
                 unk_token="<unk>")
    yield family("smollm", None, seq("p", "pretokenizers", [
        {"type": "Digits", "individual_digits": True}, byte_level(False, True)]),
        [eot, added("<|im_start|>", 1)])
    yield family("falcon", None, seq("p", "pretokenizers", [
        {"type": "Punctuation", "behavior": "Contiguous"}, byte_level(False, True),
        {"type": "Digits", "individual_digits": False}, split("[0-9][0-9][0-9]")]),
        [added(">>TITLE<<", 0), eot])
    yield family("olmo_dolma2", None, seq("p", "pretokenizers", [
        split(LLAMA3, "Removed", True), byte_level(False, False)]),
        [eot, added("<|pad|>", 1)], post=template(after=[("<|endoftext|>", 0)]),
        ignore_merges=True)
    yield family("tekken", None, seq("p", "pretokenizers", [split(TEKKEN), byte_level(False, False)]),
                 [added("<unk>", 0), added("<s>", 1), added("</s>", 2)], post=template(bos))
    yield family("components_a", seq("n", "normalizers", [
        {"type": "NFKD"}, {"type": "StripAccents"}, {"type": "Lowercase"},
        {"type": "Strip", "strip_left": True, "strip_right": True}]),
        seq("p", "pretokenizers", [{"type": "Whitespace"},
                                   {"type": "Punctuation", "behavior": "MergedWithPrevious"}]),
        [added("[tok]", 0, special=False, single_word=True),
         added("<l>", 1, special=False, lstrip=True, rstrip=True), added("[CLS]", 2)],
        decoder=None, unk_token="[UNK]", continuing_subword_prefix="##",
        end_of_word_suffix="</w>")
    yield family("components_b", {"type": "NFKC"}, seq("p", "pretokenizers", [
        {"type": "WhitespaceSplit"}, split("-", "MergedWithNext", literal=True),
        split(r"\p{N}+", "Contiguous"), split("[aeiou]", "MergedWithPrevious", invert=True),
        {"type": "Metaspace", "replacement": SP, "prepend_scheme": "always", "split": True}]),
        [added("<x>", 0)], decoder=seq("d", "decoders", [
            {"type": "Metaspace", "replacement": SP, "prepend_scheme": "always", "split": True}]),
        unk_token="<unk>")


EXTRA = ["  two  spaces\t\ttabs    four        eight", " \U00011F50", "x \U00011F50\U00011F51 y",
         "Ünïcödé ÀÉÎ ﬁ ① ｆｕｌｌ", "-a-b--c- 123-456", "<think>why</think>", ">>TITLE<<x",
         "<｜begin▁of▁sentence｜>hi", "[tok] a[tok] [tok]b x [tok] ", "a <l>   b<l>c",
         "<s>Hello</s> <unk>", "  leading and trailing  ", "ΑΣ ΣΑΣ İstanbul",
         # Where the matchers of split_matchers.hpp backtrack: upper runs, titlecase, modifier
         # letters and marks in both of Tekken's classes, ASCII punctuation before letters.
         "HELLO world HELLOworld ABCdef", "ǅungla ǅ Ǆ", "A\u0301B\u0301c \u0301x", "\u02b0\u02b0A",
         "Ab\u0300\u0300CD\u0300", "5abc 12345 ٣٤٥٦", "'s 'S \"quoted\" (x) ,y", "a/b//c\n/\r\n/ x",
         "!\n/x ! \n", "日本語のテキスト、カタカナ。\u3040\u30ff\u9fa5\u9fa6", "x\u200dy \u00ad z",
         "ＡＢＣ ａｂｃ", "\tX\u2003y\u00a0Z"]


def unicode_agrees():
    """Characters the random strings may use: where this Python's unicodedata and regex agree."""
    letter, number = regex.compile(r"\p{L}"), regex.compile(r"\p{N}")
    def agree(c):
        cat = unicodedata.category(c)
        return cat != "Cn" and bool(letter.match(c)) == (cat[0] == "L") and \
            bool(number.match(c)) == (cat[0] == "N")
    return agree


def check(name, doc, harness, work, strings):
    path = os.path.join(work, name + ".json")
    with open(path, "w", encoding="utf-8") as f:
        json.dump(doc, f, ensure_ascii=False)
    ref = Tokenizer(doc)
    head, rows = base.run_harness(harness, path, strings, work)
    bad = []
    before, after = ref.template()
    if head["prefix"] != before or head["suffix"] != after:
        bad.append(f"template {head['prefix']} {head['suffix']}, expected {before} {after}")
    byte_level = "ByteLevel" in json.dumps(doc["pre_tokenizer"])
    for text, got in zip(strings, rows):
        want = ref.encode(text)
        checks = [("ids", want), ("special", ref.encode(text, True)),
                  ("general_ids", got["ids"]), ("segmented", got["ids"]),
                  ("general_pre", got["pre"])]
        if not doc.get("added_tokens") or not any(a["content"] in text for a in doc["added_tokens"]):
            normalized = ref.normalize(text)
            pre = [p for p, _ in ref.pre_tokenize([(normalized, True)] if normalized else [])]
            if byte_level:
                pre = [bytes(CHAR_BYTE[c] for c in p).decode("utf-8", "surrogateescape")
                       for p in pre]
            checks.append(("pre", pre))
        for key, w in checks:
            if got[key] != w:
                bad.append(f"{key} of {text!r}:\n   C++    {got[key]}\n   Python {w}")
        if got["decoded"] != ref.decode(got["ids"]):
            bad.append(f"decoded of {text!r}: C++ {got['decoded']!r}, "
                       f"Python {ref.decode(got['ids'])!r}")
    for line in bad[:6]:
        print(f"FAIL {name}: {line}")
    print(f"{name}: {len(strings)} strings, {len(bad)} mismatches")
    return not bad


def main():
    harness = sys.argv[1]
    rng = random.Random(20260522)
    agree = unicode_agrees()
    strings = [s for s in base.TRICKY + EXTRA if "\udc80" not in s]
    strings += base.random_strings(rng, 400)
    # Long pieces (a whole text is one where nothing splits it), which BPE merges in segments:
    # random strings run together, and English.
    strings += ["".join(base.random_strings(rng, 15)) for _ in range(20)]
    strings += [base.CORPUS * 3, base.CORPUS.replace(" ", "  ")]
    # Planes 4 to 13 are unassigned in every Unicode version; Kawi's digits are checked by name.
    skipped = [s for s in strings if not all(agree(c) or ord(c) < 0x80 or 0x40000 <= ord(c) < 0xE0000
                                             or c in "\U00011F50\U00011F51" for c in s)]
    strings = [s for s in strings if s not in skipped]
    print(f"text_pipeline_reference: Python's unicodedata is Unicode {unicodedata.unidata_version}, "
          f"the C++ Unicode 15; {len(skipped)} strings holding characters they may classify "
          f"differently skipped")
    ok = True
    with tempfile.TemporaryDirectory(prefix="mpf-pipe-") as work:
        for name, doc in families():
            ok &= check(name, doc, harness, work, strings)
    if not ok:
        sys.exit(1)
    print("text_pipeline_reference: every encoding, pre-token and decoding matches the reference")


if __name__ == "__main__":
    main()
