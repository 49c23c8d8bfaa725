#!/usr/bin/python3
"""External reference test: mpiformer-generate's greedy decoding against PyTorch.

Writes a random GPT-2 checkpoint in llm.c's format, decodes 32 tokens greedily from a prompt with
mpiformer-generate (KV cache on one rank; the whole prefix recomputed per token; tensor parallel
on two ranks) and with the independent PyTorch model of compare_with_pytorch.py in float64, then
compares the token ids and the logits before every new token.

Run by ctest with MPIFORMER_GENERATE (the binary) and MPIEXEC in the environment; see README.md.
Exit status 0 when every check passes; the last line is `reference_generate: N passed, M failed`.
Run with Debian's /usr/bin/python3 (python3-torch 1.13, numpy).
"""
import argparse
import os
import shutil
import subprocess
import sys
import tempfile

import numpy as np

try:
    import torch
except ImportError as e:
    sys.exit(f"reference_generate: cannot import torch ({e}); install python3-torch (make deps) "
             f"and run this script with /usr/bin/python3. 0 passed, 1 failed")

from compare_with_pytorch import gpt2_logits, random_model, write_checkpoint

# V = 300 pads to Vp = 384 (512 over two TP ranks, whose shards then split the real vocabulary at
# 256); 4 heads split over 2 ranks. 8 prompt tokens + 32 new ones fit maxT = 64.
MODEL = dict(maxT=64, V=300, L=2, NH=4, C=32, Vp=384)
PROMPT_LEN, NEW_TOKENS = 8, 32

# Tolerance: the logits before each new token, max |mpiformer - torch| / max |torch| <= 1e-5 (the
# issue's bound for the first token, applied to all 32). Float32 rounding through 2 blocks leaves
# ~1e-7 here (the printed figures); a wrong position offset in the cache, a wrong causal mask or a
# missed TP sum moves the logits by 1e-2 and more. The ids must be equal: the reference prints the
# smallest gap between the two best logits of its 32 steps, which has to exceed the float32
# rounding for greedy ids to be comparable at all (it does by orders of magnitude).
LOGITS_RTOL = 1e-5


def reference_greedy(params, prompt, m):
    """Float64 greedy decoding: (ids, logits before each new token (NEW_TOKENS, V), top-2 gaps)."""
    p = {k: torch.tensor(v, dtype=torch.float64) for k, v in params.items()}
    seq, rows, gaps = list(prompt), [], []
    with torch.no_grad():
        for _ in range(NEW_TOKENS):
            z = gpt2_logits(p, torch.tensor([seq]), m)[0, -1, :m["V"]].numpy()
            top = np.sort(z)[-2:]
            rows.append(z)
            gaps.append(top[1] - top[0])
            seq.append(int(np.argmax(z)))
    return seq[len(prompt):], np.array(rows), min(gaps)


def run_generate(exe, mpiexec, workdir, ckpt, prompt, name, ranks=1, extra=()):
    """Runs mpiformer-generate; returns (new ids, logits (n, V))."""
    tokens, logits = (os.path.join(workdir, f"{name}.{x}") for x in ("tokens", "logits"))
    cmd = [exe, "--init-from", ckpt, "--prompt-tokens", ",".join(map(str, prompt)),
           "--max-new-tokens", str(NEW_TOKENS), "--tokens-out", tokens, "--logits-out", logits,
           *extra]
    if ranks > 1:
        cmd = [mpiexec, "-n", str(ranks)] + cmd
    print("$ " + " ".join(cmd), flush=True)
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=300,
                          env=dict(os.environ, OMP_NUM_THREADS="1"))
    if proc.returncode != 0:
        raise RuntimeError(f"exit status {proc.returncode}: {proc.stdout}{proc.stderr}")
    ids = [int(x) for x in open(tokens).read().strip().split(",")]
    if ids[:len(prompt)] != list(prompt):
        raise RuntimeError(f"--tokens-out does not start with the prompt: {ids}")
    rows = np.fromfile(logits, dtype="<f4").reshape(-1, MODEL["V"])
    return ids[len(prompt):], rows.astype(np.float64)


def compare(name, ids, rows, ref_ids, ref_rows):
    """One row per check; returns (passed, failed)."""
    passed = failed = 0
    same = ids == ref_ids
    first_diff = next((i for i, (a, b) in enumerate(zip(ids, ref_ids)) if a != b), None)
    print(f"[{name}] ids: {len(ids)} generated, "
          + ("all equal to torch's" if same else f"first differ at token {first_diff}: "
             f"{ids[first_diff]} vs torch {ref_ids[first_diff]}") + f"  {'PASS' if same else 'FAIL'}")
    passed, failed = passed + same, failed + (not same)
    n = min(len(rows), len(ref_rows)) if same else 1  # after a different id the prefixes differ
    rel = [np.abs(rows[i] - ref_rows[i]).max() / np.abs(ref_rows[i]).max() for i in range(n)]
    ok_first = len(rows) > 0 and rel[0] <= LOGITS_RTOL
    print(f"[{name}] first new token's logits: rel diff {rel[0]:.1e} <= {LOGITS_RTOL:.0e}  "
          f"{'PASS' if ok_first else 'FAIL'}")
    passed, failed = passed + ok_first, failed + (not ok_first)
    if same:
        worst = int(np.argmax(rel))
        ok_all = rows.shape == ref_rows.shape and max(rel) <= LOGITS_RTOL
        print(f"[{name}] logits before each of the {n} tokens: worst rel diff {rel[worst]:.1e} "
              f"(token {worst}) <= {LOGITS_RTOL:.0e}  {'PASS' if ok_all else 'FAIL'}")
        passed, failed = passed + ok_all, failed + (not ok_all)
    return passed, failed


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--keep", action="store_true", help="keep the temporary directory")
    args = ap.parse_args()
    torch.set_num_threads(1)
    exe = os.environ.get("MPIFORMER_GENERATE", "")
    mpiexec = os.environ.get("MPIEXEC", "mpiexec")
    if not (exe and os.access(exe, os.X_OK)):
        print(f"reference_generate: MPIFORMER_GENERATE={exe!r} is not an executable\n"
              "reference_generate: 0 passed, 1 failed")
        return 1
    workdir = tempfile.mkdtemp(prefix="mpiformer_gen_ref_")
    passed = failed = 0
    try:
        params = random_model(MODEL, seed=2024)
        ckpt = os.path.join(workdir, "ckpt.bin")
        write_checkpoint(ckpt, MODEL, params)
        prompt = [int(x) for x in np.random.default_rng(7).integers(0, MODEL["V"], PROMPT_LEN)]
        ref_ids, ref_rows, gap = reference_greedy(params, prompt, MODEL)
        print(f"torch (float64) greedy: {ref_ids}; smallest top-2 logit gap {gap:.2e} "
              f"(largest |logit| {np.abs(ref_rows).max():.2f})")
        runs = [("kv cache, 1 rank", 1, ()), ("whole prefix per token", 1, ("--no-kv-cache",)),
                ("kv cache, tp 2", 2, ("--tp", "2"))]
        for i, (name, ranks, extra) in enumerate(runs):
            try:
                ids, rows = run_generate(exe, mpiexec, workdir, ckpt, prompt, f"run{i}", ranks,
                                         extra)
            except (RuntimeError, OSError, ValueError, subprocess.TimeoutExpired) as e:
                print(f"[{name}] mpiformer-generate failed: {e}  FAIL")
                failed += 1
                continue
            p, f = compare(name, ids, rows, ref_ids, ref_rows)
            passed, failed = passed + p, failed + f
    finally:
        if args.keep:
            print(f"kept {workdir}")
        else:
            shutil.rmtree(workdir, ignore_errors=True)
    print(f"reference_generate: {passed} passed, {failed} failed")
    return 0 if failed == 0 else 1


if __name__ == "__main__":
    sys.exit(main())
