#!/usr/bin/env python3
"""Megatron-LM's SC21 runs (Narayanan et al. 2021, Table 1) evaluated by mpiformer-plan.

The paper's layouts from its run script (examples/sc21/run_table_1.sh: TP, PP, the micro-batch,
interleaving, full recompute; seq 2,048, vocabulary 51,200) on the DGX A100 data-sheet file
(docs/machines/dgx-a100.json), the paper's FLOP formula 96 B s l h^2 (1 + s/6h + V/16lh) over the
predicted step, against the published TFLOP/s per GPU. The pipeline's messages travel in bf16 (as
Megatron's in fp16); the TP and DP sums in fp32, the trainer's fastest on a GPU (its bf16 sums run
on host copies, docs/planning.md). One source for `make bench`
(ci/bench_plan.py imports it) and for the test that docs/planning.md prints what the planner says.

  python3 ci/sc21_table1.py PLAN_BINARY            the table in docs/planning.md's form
  python3 ci/sc21_table1.py PLAN_BINARY --check DOC  exit 1 unless DOC's table holds these rows
"""
import json
import os
import re
import statistics
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
MACHINE = os.path.join(ROOT, "docs", "machines", "dgx-a100.json")
SEQ, VOCAB = 2048, 51200
# name, heads, hidden, layers, TP, PP, GPUs, batch, micro-batch, virtual stages, published TFLOP/s
ROWS = [("1.7B", 24, 2304, 24, 1, 1, 32, 512, 16, 1, 137),
        ("3.6B", 32, 3072, 30, 2, 1, 64, 512, 16, 1, 138),
        ("7.5B", 32, 4096, 36, 4, 1, 128, 512, 16, 1, 142),
        ("18.4B", 48, 6144, 40, 8, 1, 256, 1024, 8, 1, 135),
        ("39.1B", 64, 8192, 48, 8, 2, 512, 1536, 4, 1, 138),
        ("76.1B", 80, 10240, 60, 8, 4, 1024, 1792, 2, 3, 140),
        ("145.6B", 96, 12288, 80, 8, 8, 1536, 2304, 2, 2, 148),
        ("310.1B", 128, 16384, 96, 8, 16, 1920, 2160, 1, 2, 155),
        ("529.6B", 128, 20480, 105, 8, 35, 2520, 2520, 1, 3, 163),
        ("1T", 160, 25600, 128, 8, 64, 3072, 3072, 1, 1, 163)]


def evaluate(plan):
    """Each row with the planner's prediction: (row, TFLOP/s per GPU, fits, peak GB a rank)."""
    out = []
    for row in ROWS:
        name, heads, h, layers, tp, pp, gpus, batch, mbs, vp, published = row
        layout = "tp=%d,pp=%d,dp=%d,schedule=%s,vp=%d,micro_batch_size=%d,recompute=full" % (
            tp, pp, gpus // tp // pp, "interleaved" if vp > 1 else "1f1b", vp, mbs)
        cmd = [plan, "--machine", MACHINE, "--layers", str(layers), "--heads", str(heads), "--dim",
               str(h), "--vocab", str(VOCAB), "--max-seq-len", str(SEQ), "--precision", "bf16",
               "--p2p-dtype", "bf16",
               "--batch", str(batch), "--seq-len", str(SEQ), "--nodes", str(gpus // 8),
               "--ranks-per-node", "8", "--evaluate", layout, "--json"]
        res = subprocess.run(cmd, capture_output=True, text=True)
        if res.returncode != 0:
            sys.exit("sc21_table1: %s failed:\n%s" % (" ".join(cmd), res.stdout + res.stderr))
        c = json.loads(res.stdout)["candidates"][0]
        flops = 96 * batch * SEQ * layers * h * h * (1 + SEQ / (6 * h) + VOCAB / (16 * layers * h))
        tflops = flops / (c["predicted"]["step_ms"] / 1e3) / gpus / 1e12
        out.append((row, tflops, c["fits"], c["predicted"]["peak_mb_per_rank"] / 1e3))
    return out


def markdown(rows):
    lines = ["| model | TP | PP | V | GPUs | batch | b | predicted | published | error | peak GB |",
             "|---|---|---|---|---|---|---|---|---|---|---|"]
    for row, tflops, fits, peak in rows:
        name, _, _, _, tp, pp, gpus, batch, mbs, vp, published = row
        lines.append("| %s | %d | %d | %d | %d | %d | %d | %.1f | %d | %+.1f%% | %.1f |" %
                     (name, tp, pp, vp, gpus, batch, mbs, tflops, published,
                      100 * (tflops / published - 1), peak))
    errs = [abs(t / r[10] - 1) for r, t, _, _ in rows]
    lines.append("")
    lines.append("Median error %.1f%%, largest %.1f%%; %d of %d fit 80 GB." %
                 (100 * statistics.median(errs), 100 * max(errs),
                  sum(1 for _, _, fits, _ in rows if fits), len(rows)))
    return lines


def check(rows, doc):
    """The rows of doc's SC21 table against the planner's: the same figures as printed."""
    text = open(doc, encoding="utf-8").read()
    want = [l for l in markdown(rows) if l.startswith("| ") and not l.startswith("| model")]
    bad = [l for l in want if l not in text.splitlines()]
    summary = markdown(rows)[-1]
    if summary not in text:
        bad.append(summary)
    for l in bad:
        print("sc21_table1: %s lacks (the planner says): %s" % (doc, l))
    return not bad


if __name__ == "__main__":
    if len(sys.argv) < 2:
        sys.exit(__doc__)
    rows = evaluate(sys.argv[1])
    if len(sys.argv) == 4 and sys.argv[2] == "--check":
        ok = check(rows, sys.argv[3])
        print("sc21_table1: %s's %d rows are the planner's" % (sys.argv[3], len(rows)) if ok else
              "sc21_table1: update %s's table from `python3 ci/sc21_table1.py PLAN`" % sys.argv[3])
        sys.exit(0 if ok else 1)
    print("\n".join(markdown(rows)))
