#!/usr/bin/env python3
"""Writes a multiple-choice eval file in llm.c's format (dev/data/data_common.py's write_evalfile).

  make_eval_file.py OUT EXAMPLES VOCAB SEED [DEFECT]

Each example: a context of 3-12 tokens and 4 endings of 1-6 tokens below VOCAB, a random label.
DEFECT writes a damaged file instead: "label" (a label past the endings), "truncated" (the last
example cut short), "delimiter" (an example not starting with 65535), "count" (the header claims
one example more than the file holds).
"""
import random
import struct
import sys


def main():
    out, n, vocab, seed = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4])
    defect = sys.argv[5] if len(sys.argv) > 5 else ""
    rng = random.Random(seed)
    stream, longest = [], 0
    for i in range(n):
        label = rng.randrange(4) if not (defect == "label" and i == n - 1) else 4
        ex = [65535, 0, i, label, 4]
        ctx = [rng.randrange(vocab) for _ in range(rng.randint(3, 12))]
        ex += [len(ctx)] + ctx
        for _ in range(4):
            end = [rng.randrange(vocab) for _ in range(rng.randint(1, 6))]
            ex += [len(end)] + end
        ex[1] = 2 * len(ex)
        if defect == "delimiter" and i == n - 1:
            ex[0] = 65534
        longest = max(longest, ex[1])
        stream += ex
    if defect == "truncated":
        stream = stream[:-3]
    header = [0] * 256
    header[:4] = [20240522, 1, n + (defect == "count"), longest]
    with open(out, "wb") as f:
        f.write(struct.pack("<256i", *header))
        f.write(struct.pack("<%dH" % len(stream), *stream))


if __name__ == "__main__":
    main()
