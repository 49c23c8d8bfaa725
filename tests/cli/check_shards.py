#!/usr/bin/env python3
"""Checks mpiformer-tokenize's output independently of it: reads the shards (llm.c's header,
uint16 or uint32 tokens), decodes them with the tokenizer.json's vocabulary, and compares the
documents, the document token before each, the token counts and the SHA-256s with the inputs and
the manifest.

  check_shards.py DIR TOKENIZER DOC_TOKEN VAL_TOKENS SHARD_TOKENS DOCS.json
DOCS.json: the expected documents, in order, as a JSON list of strings.
Prints one line per problem and exits 1 if there is any.
"""
import hashlib
import json
import os
import struct
import sys

from make_tokenizer import bytes_to_unicode


def main():
    out, tok_path, doc_token, val_tokens, shard_tokens, docs_path = sys.argv[1:7]
    val_tokens, shard_tokens = int(val_tokens), int(shard_tokens)
    docs = [d.encode("utf-8") for d in json.load(open(docs_path, encoding="utf-8"))]
    tok = json.load(open(tok_path, encoding="utf-8"))
    decode_char = {c: b for b, c in bytes_to_unicode().items()}
    id_bytes = {i: bytes(decode_char[c] for c in key) for key, i in tok["model"]["vocab"].items()}
    added = {t["content"]: t["id"] for t in tok["added_tokens"]}
    for content, i in added.items():
        id_bytes[i] = content.encode()
    vocab = max(id_bytes) + 1
    doc_id = added[doc_token]
    width = 2 if vocab <= 65536 else 4
    problems = []

    manifest = json.load(open(os.path.join(out, "manifest.json"), encoding="utf-8"))
    stream, val_count = [], None
    for sh in manifest["shards"]:
        path = os.path.join(out, sh["file"])
        data = open(path, "rb").read()
        if hashlib.sha256(data).hexdigest() != sh["sha256"]:
            problems.append(f"{sh['file']}: sha256 differs from the manifest's")
        magic, version, n = struct.unpack_from("<3i", data)
        want = (20240520, 1) if width == 2 else (20240801, 7)
        if (magic, version) != want:
            problems.append(f"{sh['file']}: header {magic}, {version}, expected {want}")
        if len(data) != 1024 + width * n or n != sh["tokens"]:
            problems.append(f"{sh['file']}: {len(data)} bytes for {n} tokens "
                            f"(manifest {sh['tokens']})")
        tokens = struct.unpack_from(f"<{n}{'H' if width == 2 else 'I'}", data, 1024)
        if sh["split"] == "val":
            val_count = n
        elif n > shard_tokens:
            problems.append(f"{sh['file']}: {n} tokens, more than --shard-tokens {shard_tokens}")
        stream.extend(tokens)

    # Documents: each starts with the document token; decoding what follows gives its text.
    starts = [i for i, t in enumerate(stream) if t == doc_id]
    if not stream or stream[0] != doc_id:
        problems.append("the stream does not start with the document token")
    got = []
    for k, s in enumerate(starts):
        e = starts[k + 1] if k + 1 < len(starts) else len(stream)
        got.append(b"".join(id_bytes[t] for t in stream[s + 1:e]))
    if got != docs:
        problems.append(f"decoded {len(got)} documents, expected {len(docs)}; first difference at "
                        f"{next((i for i, (a, b) in enumerate(zip(got, docs)) if a != b), None)}")
    if manifest["documents"] != len(docs) or manifest["tokens"] != len(stream):
        problems.append(f"manifest counts {manifest['documents']} documents, "
                        f"{manifest['tokens']} tokens; the shards hold {len(docs)}, {len(stream)}")
    if manifest["doc_token"]["id"] != doc_id:
        problems.append(f"manifest doc token {manifest['doc_token']}, expected {doc_id}")
    if val_tokens > 0:
        # The validation split is whole documents: through the first that ends at or past
        # token val_tokens (the one holding token val_tokens - 1).
        ends = starts[1:] + [len(stream)]
        expected_val = next(e for e in ends if e >= val_tokens)
        if val_count != expected_val:
            problems.append(f"validation shard holds {val_count} tokens, expected {expected_val}")
    for p in problems:
        print("problem:", p)
    print(f"check_shards: {len(got)} documents, {len(stream)} tokens in "
          f"{len(manifest['shards'])} shards (uint{8 * width})")
    sys.exit(1 if problems else 0)


if __name__ == "__main__":
    main()
