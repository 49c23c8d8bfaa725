#!/usr/bin/env python3
"""Writes a small byte-level BPE tokenizer.json in Hugging Face's format, for the tokenize tests.

  make_tokenizer.py OUT small   256 byte tokens, a few merges, <|endoftext|>  (vocab < 65,536)
  make_tokenizer.py OUT large   the same plus every two-byte token and <|begin_of_text|> at the
                                end (vocab > 65,536: uint32 shards)
  make_tokenizer.py OUT gapped  small without the bytes 0x03, 0x0B, 0x1D and 0xF5-0xFF, as
                                SmolLM's, Falcon's and GPT-NeoX-style vocabularies lack some

Vocabulary keys are written in GPT-2's byte-to-character alphabet, as Hugging Face's ByteLevel
pre-tokenizer expects (openai/gpt-2 encoder.py's bytes_to_unicode).
"""
import json
import sys


def bytes_to_unicode():
    printable = list(range(ord("!"), ord("~") + 1)) + list(range(ord("¡"), ord("¬") + 1)) + \
        list(range(ord("®"), ord("ÿ") + 1))
    chars = printable[:]
    n = 0
    for b in range(256):
        if b not in printable:
            printable.append(b)
            chars.append(256 + n)
            n += 1
    return dict(zip(printable, map(chr, chars)))


def main():
    out, kind = sys.argv[1], sys.argv[2]
    alphabet = bytes_to_unicode()
    lacking = {0x03, 0x0B, 0x1D} | set(range(0xF5, 0x100)) if kind == "gapped" else set()
    kept = [b for b in range(256) if b not in lacking]
    vocab = {alphabet[b]: i for i, b in enumerate(kept)}
    merges = [("h", "e"), ("Ġ", "t"), ("Ġt", "he"), ("e", "n"), ("x", "x"), ("xx", "xx")]
    for a, b in merges:
        vocab.setdefault(a + b, len(vocab))
    if kind == "large":
        for x in range(256):
            for y in range(256):
                vocab.setdefault(alphabet[x] + alphabet[y], len(vocab))
    added = [{"id": len(vocab), "content": "<|endoftext|>", "single_word": False, "lstrip": False,
              "rstrip": False, "normalized": False, "special": True}]
    if kind == "large":
        added.append(dict(added[0], id=len(vocab) + 1, content="<|begin_of_text|>"))
    doc = {
        "version": "1.0",
        "truncation": None,
        "padding": None,
        "added_tokens": added,
        "normalizer": None,
        "pre_tokenizer": {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": True,
                          "use_regex": True},
        "post_processor": None,
        "decoder": {"type": "ByteLevel", "add_prefix_space": True, "trim_offsets": True,
                    "use_regex": True},
        "model": {"type": "BPE", "dropout": None, "unk_token": None,
                  "continuing_subword_prefix": "", "end_of_word_suffix": "",
                  "fuse_unk": False, "byte_fallback": False, "vocab": vocab,
                  "merges": [a + " " + b for a, b in merges]},
    }
    with open(out, "w", encoding="utf-8") as f:
        json.dump(doc, f, ensure_ascii=False)


if __name__ == "__main__":
    main()
