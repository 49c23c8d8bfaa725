#!/usr/bin/python3
"""External reference test: mpiformer-eval's multiple-choice scores against PyTorch.

Writes a random GPT-2 checkpoint in llm.c's format and 12 multiple-choice examples (3 to 5
endings each) as llm.c's eval file (HellaSwag's format: a context, its endings, the label), and a
few more as a JSONL file of text with a byte-level tokenizer.json. The independent PyTorch model of
compare_with_pytorch.py scores every ending in float64 as llm.c's HellaSwag evaluation does: the
sum of the cross-entropy losses of the ending's tokens, each predicted from everything before it
(the context's last token predicts the ending's first), and that sum over the ending's length;
the prediction is the ending with the smallest sum (acc) or mean (acc_norm). mpiformer-eval runs
on one rank, on TP 2 and on PP 2 (the eval file) and on one rank (the JSONL file); its
--eval-details must give the same sums, means, token counts and predictions, and its summary line
the same acc and acc_norm counts. A batch too small for an example's endings must be refused.

Run by ctest with MPIFORMER_EVAL (the binary) and MPIEXEC in the environment; see README.md.
Exit status 0 when every check passes; the last line is `reference_eval: N passed, M failed`.
--calibrate stands a float32 PyTorch run (reading the written files back) in for the binary.
Run with Debian's /usr/bin/python3 (python3-torch 1.13, numpy).
"""
import argparse
import importlib.util
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile

import numpy as np

try:
    import torch
    import torch.nn.functional as F
except ImportError as e:
    sys.exit(f"reference_eval: cannot import torch ({e}); install python3-torch (make deps) "
             f"and run this script with /usr/bin/python3. 0 passed, 1 failed")

from compare_with_pytorch import gpt2_logits, random_model, read_checkpoint, write_checkpoint

HERE = os.path.dirname(os.path.abspath(__file__))
MAKE_TOKENIZER = os.path.join(HERE, "..", "cli", "make_tokenizer.py")

# V = 300 pads to Vp = 384 (over two TP ranks the real vocabulary straddles the shards); 4 heads
# split over 2 ranks; 2 layers split over 2 pipeline stages. make_tokenizer.py's small tokenizer
# has 256 byte tokens, 6 merges and <|endoftext|> (263 ids), inside V.
MODEL = dict(maxT=64, V=300, L=2, NH=4, C=32, Vp=384)
MODEL_SEED = 2024

# The eval file: 12 examples with a context of 3-20 tokens and endings of 1-8 tokens, 4 endings
# each except example 3 (3 endings) and example 7 (5): NUM_COMPLETIONS varies. The longest row,
# 20 + 8 = 28 tokens, fits --seq-len 32, and 5 endings fit --batch 8.
N_EXAMPLES = 12
N_ENDINGS = {3: 3, 7: 5}
CTX_LEN, END_LEN = (3, 20), (1, 8)
DATA_SEED = 23
BATCH, SEQ_LEN = 8, 32
# The JSONL file: 6 examples of text, words of the letters below and single spaces. The letters
# leave out e, h, n, t and x, so none of the tokenizer's merges ("he", " t", " the", "en", "xx")
# can fire and every byte is its own token: the reference's ids are the UTF-8 bytes, checked
# against the tokenizer.json before it is used.
N_TEXT_EXAMPLES = 6
TEXT_ENDINGS = {2: 3, 4: 5}
LETTERS = "abcdfgijklmopqrsuvwyz"
TEXT_SEED = 13

# Tolerances. Every sum and mean within 1e-5 relative of the float64 reference: float32 rounding
# through 2 blocks and a 300-way log-softmax leaves ~1e-7 on a loss of ~6 (--calibrate prints the
# figures of a float32 PyTorch run); a loss taken one position off, a context token counted as an
# ending token, the padded vocabulary columns in the softmax or a missed TP/PP sum move a sum by
# 1e-2 and more. The token counts must be exact.
# The predictions are compared where the reference's best and second-best value differ by more
# than 1e-4 relative: each value may move by 1e-5 relative, so two values that far apart keep
# their order. The seeds above give a smallest gap of 8e-3, far above that (printed, and checked
# to exceed 1e-3), so every prediction is compared.
SCORE_RTOL = 1e-5
PRED_GAP = 1e-4

EVAL_MAGIC, EVAL_VERSION = 20240522, 1
ACC_RE = re.compile(r"\bacc\s+[^|(]*\(\s*(\d+)\s*/\s*(\d+)\s*\)")
ACC_NORM_RE = re.compile(r"\bacc_norm\s+[^|(]*\(\s*(\d+)\s*/\s*(\d+)\s*\)")


# ---- the data -----------------------------------------------------------------------------------
def random_examples(rng, n, endings_of, vocab):
    """n examples as (context ids, [ending ids, ...], label)."""
    out = []
    for i in range(n):
        ctx = [int(t) for t in rng.integers(0, vocab, rng.integers(CTX_LEN[0], CTX_LEN[1] + 1))]
        k = endings_of.get(i, 4)
        ends = [[int(t) for t in rng.integers(0, vocab, rng.integers(END_LEN[0], END_LEN[1] + 1))]
                for _ in range(k)]
        out.append((ctx, ends, int(rng.integers(0, k))))
    return out


def write_eval_file(path, examples):
    """llm.c's eval file: a header of 256 int32, then each example as uint16: 65535, its bytes,
    its index, label, number of endings, the context's length and ids, each ending's length and
    ids."""
    streams = []
    for i, (ctx, ends, label) in enumerate(examples):
        body = [i, label, len(ends), len(ctx), *ctx]
        for e in ends:
            body += [len(e), *e]
        stream = [65535, 2 * (len(body) + 2), *body]
        assert max(stream) <= 65535
        streams.append(stream)
    header = np.zeros(256, dtype="<i4")
    header[:4] = [EVAL_MAGIC, EVAL_VERSION, len(examples), max(2 * len(s) for s in streams)]
    with open(path, "wb") as f:
        f.write(header.tobytes())
        for s in streams:
            f.write(np.asarray(s, dtype="<u2").tobytes())


def read_eval_file(path):
    """Reads llm.c's eval file back (the --calibrate stand-in's reader), checking every field."""
    raw = open(path, "rb").read()
    header = np.frombuffer(raw[:1024], dtype="<i4")
    if header[0] != EVAL_MAGIC or header[1] != EVAL_VERSION:
        raise ValueError(f"{path}: bad magic/version {header[0]}/{header[1]}")
    data = np.frombuffer(raw[1024:], dtype="<u2").tolist()
    examples, pos, longest = [], 0, 0
    for i in range(int(header[2])):
        if data[pos] != 65535 or data[pos + 2] != i:
            raise ValueError(f"{path}: example {i}: delimiter {data[pos]}, index {data[pos + 2]}")
        nbytes, label, k, nctx = data[pos + 1], data[pos + 3], data[pos + 4], data[pos + 5]
        q = pos + 6
        ctx, q = data[q:q + nctx], q + nctx
        ends = []
        for _ in range(k):
            ends.append(data[q + 1:q + 1 + data[q]])
            q += 1 + data[q]
        if 2 * (q - pos) != nbytes:
            raise ValueError(f"{path}: example {i}: {2 * (q - pos)} bytes, header says {nbytes}")
        longest = max(longest, nbytes)
        examples.append((ctx, ends, label))
        pos = q
    if pos != len(data) or longest != header[3]:
        raise ValueError(f"{path}: {len(data) - pos} uint16 left over, longest {longest} vs "
                         f"header {header[3]}")
    return examples


def random_words(rng, lo, hi):
    """Text of lo..hi bytes: words of LETTERS separated by single spaces."""
    n = int(rng.integers(lo, hi + 1))
    s = "".join(rng.choice(list(LETTERS)) if rng.random() > 0.25 else " " for _ in range(n))
    s = re.sub(" +", " ", s).strip(" ")
    while len(s) < lo:  # stripping may have shortened it
        s += rng.choice(list(LETTERS))
    return s


def text_examples(rng):
    """(ctx, [ending, ...], label) as text: the context 3..20 bytes, each ending 1..7 bytes (8
    tokens with the space mpiformer-eval puts before it)."""
    out = []
    for i in range(N_TEXT_EXAMPLES):
        k = TEXT_ENDINGS.get(i, 4)
        out.append((random_words(rng, 3, 20), [random_words(rng, 1, 7) for _ in range(k)],
                    int(rng.integers(0, k))))
    return out


def byte_ids(text_example, tokenizer_json):
    """The token ids of a text example: encode(ctx) and encode(" " + ending) are the UTF-8 bytes.
    Checked, not assumed: the tokenizer's ids 0..255 are the bytes (in GPT-2's byte alphabet) and
    no merge of it can apply to these strings."""
    spec = importlib.util.spec_from_file_location("make_tokenizer", MAKE_TOKENIZER)
    mk = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mk)
    alphabet = mk.bytes_to_unicode()
    doc = json.load(open(tokenizer_json, encoding="utf-8"))
    vocab, merges = doc["model"]["vocab"], doc["model"]["merges"]
    ctx, ends, label = text_example
    strings = [ctx] + [" " + e for e in ends]
    for s in strings:
        assert s and "  " not in s and set(s) <= set(LETTERS + " "), repr(s)
        mapped = "".join(alphabet[b] for b in s.encode())
        assert all(vocab[alphabet[b]] == b for b in s.encode()), repr(s)
        # A merge "a b" can only fire where a and b are adjacent; with no byte pair of any merge
        # in the string (all merges start from such a pair) nothing merges.
        assert not any(m.replace(" ", "") in mapped for m in merges), repr(s)
    return list(ctx.encode()), [list((" " + e).encode()) for e in ends], label


# ---- the reference ------------------------------------------------------------------------------
def score(params, examples, m, dtype=torch.float64):
    """llm.c's HellaSwag scoring: per example, each ending's summed and mean loss, token count,
    and the predictions; plus the relative gap between the two best values (sum and mean)."""
    p = {k: torch.tensor(v, dtype=dtype) for k, v in params.items()}
    V, rows = m["V"], []
    with torch.no_grad():
        for ctx, ends, label in examples:
            sums, means, ntok = [], [], []
            for e in ends:
                seq = torch.tensor([list(ctx) + list(e)])
                logits = gpt2_logits(p, seq[:, :-1], m)[0, :, :V]
                losses = F.cross_entropy(logits, seq[0, 1:], reduction="none")
                s = losses[len(ctx) - 1:].sum().item()  # the positions that predict the ending
                sums.append(s)
                means.append(s / len(e))
                ntok.append(len(e))
            gaps = []
            for vals in (sums, means):
                a = np.sort(vals)
                gaps.append((a[1] - a[0]) / abs(a[0]))
            rows.append(dict(label=label, sum=sums, mean=means, tokens=ntok,
                             pred=int(np.argmin(sums)), pred_norm=int(np.argmin(means)),
                             gap=gaps[0], gap_norm=gaps[1]))
    return rows


def counts(rows):
    return (sum(r["pred"] == r["label"] for r in rows),
            sum(r["pred_norm"] == r["label"] for r in rows))


# ---- mpiformer-eval ------------------------------------------------------------------------------
def fake_eval(argv):
    """--calibrate: a float32 PyTorch run standing in for mpiformer-eval, reading the files the
    test wrote; returns (exit status, stdout, stderr) as the binary would."""
    ap = argparse.ArgumentParser(prog="fake-eval")
    for flag in ("--init-from", "--eval-data", "--tokenizer", "--eval-details"):
        ap.add_argument(flag)
    for flag in ("--batch", "--seq-len", "--tp", "--pp", "--dp", "--eval-examples"):
        ap.add_argument(flag, type=int, default=0)
    a = ap.parse_args(argv)
    if os.path.exists(a.eval_details):
        return 2, "", f"error: {a.eval_details} exists\n"
    m, params = read_checkpoint(a.init_from)
    if open(a.eval_data, "rb").read(4) == np.array([EVAL_MAGIC], "<i4").tobytes():
        examples = read_eval_file(a.eval_data)
    else:
        examples = [([int(b) for b in d["ctx"].encode()],
                     [[int(b) for b in (" " + e).encode()] for e in d["endings"]], d["label"])
                    for d in map(json.loads, open(a.eval_data, encoding="utf-8"))]
    for i, (ctx, ends, _) in enumerate(examples):
        if len(ends) > a.batch:
            return 2, "", (f"error: example {i} has {len(ends)} endings, more than --batch "
                           f"{a.batch}\n")
        if len(ctx) + max(map(len, ends)) - 1 > a.seq_len:
            return 2, "", f"error: example {i} is longer than --seq-len {a.seq_len}\n"
    rows = score(params, examples, m, dtype=torch.float32)
    with open(a.eval_details, "w") as f:
        for i, r in enumerate(rows):
            f.write(json.dumps(dict(index=i, **{k: r[k] for k in
                                                ("label", "pred", "pred_norm", "sum", "mean",
                                                 "tokens")})) + "\n")
    acc, acc_norm = counts(rows)
    n = len(rows)
    return 0, (f"eval | fake | {n} examples | acc {acc / n:.4f} ({acc}/{n}) | "
               f"acc_norm {acc_norm / n:.4f} ({acc_norm}/{n}) | 0.0 s\n"), ""


def run_eval(exe, mpiexec, args, ranks=1):
    """Runs mpiformer-eval (or the stand-in when exe is None); returns (status, stdout, stderr)."""
    if exe is None:
        print("$ [float32 torch stand-in] " + " ".join(args), flush=True)
        return fake_eval(args)
    cmd = [exe, *args]
    if ranks > 1:
        cmd = [mpiexec, "-n", str(ranks)] + cmd
    print("$ OMP_NUM_THREADS=1 " + " ".join(cmd), flush=True)
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=300,
                          env=dict(os.environ, OMP_NUM_THREADS="1"))
    return proc.returncode, proc.stdout, proc.stderr


def read_details(path):
    with open(path) as f:
        return [json.loads(line) for line in f if line.strip()]


def compare(name, details, summary, ref):
    """One row per check; returns (passed, failed)."""
    passed = failed = 0

    def check(ok, text):
        nonlocal passed, failed
        print(f"[{name}] {text}  {'PASS' if ok else 'FAIL'}")
        passed, failed = passed + bool(ok), failed + (not ok)

    # The rows: one per example in file order, its label, one value per ending, exact counts.
    problems = []
    if len(details) != len(ref):
        problems.append(f"{len(details)} rows, expected {len(ref)}")
    usable = []
    for i, (d, r) in enumerate(zip(details, ref)):
        k = len(r["tokens"])
        if not all(isinstance(d.get(key), list) and len(d[key]) == k
                   for key in ("sum", "mean", "tokens")):
            problems.append(f"example {i}: sum/mean/tokens are not lists of {k}")
            continue
        usable.append(i)
        if d.get("index") != i or d.get("label") != r["label"]:
            problems.append(f"example {i}: index {d.get('index')}, label {d.get('label')} "
                            f"(expected {i}, {r['label']})")
        if d["tokens"] != r["tokens"]:
            problems.append(f"example {i}: tokens {d['tokens']}, expected {r['tokens']}")
    check(not problems, f"--eval-details: {len(details)} rows, indexes, labels, token counts "
          + ("as expected" if not problems else "differ: " + "; ".join(problems[:3])))

    # The sums and means.
    for key in ("sum", "mean"):
        worst, where = 0.0, None
        for i in usable:
            for j, (x, y) in enumerate(zip(details[i][key], ref[i][key])):
                try:
                    rel = abs(float(x) - y) / abs(y)
                except (TypeError, ValueError):
                    rel = float("inf")
                if not rel <= worst:  # NaN becomes the worst
                    worst, where = rel, (i, j, x, y)
        ok = bool(usable) and worst <= SCORE_RTOL
        at = f" (example {where[0]} ending {where[1]}: {where[2]} vs torch {where[3]:.7f})" \
            if where else ""
        check(ok, f"{key}s: worst rel diff {worst:.1e}{at} <= {SCORE_RTOL:.0e}")

    # The predictions, where the reference's margin makes them comparable.
    for key, gap in (("pred", "gap"), ("pred_norm", "gap_norm")):
        comparable = [i for i in usable if ref[i][gap] > PRED_GAP]
        wrong = [i for i in comparable if details[i].get(key) != ref[i][key]]
        check(comparable and not wrong,
              f"{key}: {len(comparable)}/{len(ref)} comparable, "
              + ("all equal to torch's" if not wrong else
                 "differ at " + ", ".join(f"example {i} ({details[i].get(key)} vs torch "
                                          f"{ref[i][key]})" for i in wrong[:3])))

    # The summary line's counts.
    acc, acc_norm = counts(ref)
    n = len(ref)
    if summary is None:
        check(False, "no summary line with acc (k/n) and acc_norm (k/n) on stdout")
    else:
        got = (summary[0], summary[1])
        check(got == ((acc, n), (acc_norm, n)),
              f"summary: acc {got[0][0]}/{got[0][1]}, acc_norm {got[1][0]}/{got[1][1]}; "
              f"torch acc {acc}/{n}, acc_norm {acc_norm}/{n}")
    return passed, failed


def parse_summary(stdout):
    """The last stdout line with both counts: ((acc k, n), (acc_norm k, n)), or None."""
    for line in reversed(stdout.splitlines()):
        a, b = ACC_RE.search(line), ACC_NORM_RE.search(line)
        if a and b:
            return (int(a.group(1)), int(a.group(2))), (int(b.group(1)), int(b.group(2)))
    return None


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--calibrate", action="store_true",
                    help="run a float32 PyTorch stand-in instead of mpiformer-eval (shows fp32 "
                         "rounding; checks the written files by reading them back)")
    ap.add_argument("--keep", action="store_true", help="keep the temporary directory")
    args = ap.parse_args()
    torch.set_num_threads(1)
    exe = os.environ.get("MPIFORMER_EVAL", "")
    mpiexec = os.environ.get("MPIEXEC", "mpiexec")
    if args.calibrate:
        exe = None
    elif not (exe and os.access(exe, os.X_OK)):
        print(f"reference_eval: MPIFORMER_EVAL={exe!r} is not an executable\n"
              "reference_eval: 0 passed, 1 failed")
        return 1
    workdir = tempfile.mkdtemp(prefix="mpiformer_eval_ref_")
    passed = failed = 0

    def tally(ok, text):
        nonlocal passed, failed
        print(f"{text}  {'PASS' if ok else 'FAIL'}")
        passed, failed = passed + bool(ok), failed + (not ok)

    try:
        params = random_model(MODEL, seed=MODEL_SEED)
        ckpt = os.path.join(workdir, "ckpt.bin")
        write_checkpoint(ckpt, MODEL, params)

        examples = random_examples(np.random.default_rng(DATA_SEED), N_EXAMPLES, N_ENDINGS,
                                   MODEL["V"])
        data_bin = os.path.join(workdir, "eval.bin")
        write_eval_file(data_bin, examples)

        tokenizer = os.path.join(workdir, "tokenizer.json")
        subprocess.run([sys.executable, MAKE_TOKENIZER, tokenizer, "small"], check=True)
        doc = json.load(open(tokenizer, encoding="utf-8"))
        n_ids = 1 + max([*doc["model"]["vocab"].values(), *(t["id"] for t in doc["added_tokens"])])
        assert n_ids <= MODEL["V"], f"the tokenizer has {n_ids} ids, more than V = {MODEL['V']}"
        texts = text_examples(np.random.default_rng(TEXT_SEED))
        data_jsonl = os.path.join(workdir, "eval.jsonl")
        with open(data_jsonl, "w", encoding="utf-8") as f:
            for ctx, ends, label in texts:
                f.write(json.dumps(dict(ctx=ctx, endings=ends, label=label)) + "\n")
        text_ids = [byte_ids(t, tokenizer) for t in texts]

        ref_bin = score(params, examples, MODEL)
        ref_jsonl = score(params, text_ids, MODEL)
        for name, ref in (("eval file", ref_bin), ("jsonl", ref_jsonl)):
            acc, acc_norm = counts(ref)
            allv = np.concatenate([r["sum"] for r in ref])
            print(f"torch (float64), {name}: {len(ref)} examples, acc {acc}/{len(ref)}, acc_norm "
                  f"{acc_norm}/{len(ref)}; sums {allv.min():.3f}..{allv.max():.3f}; pred != "
                  f"pred_norm in {sum(r['pred'] != r['pred_norm'] for r in ref)} examples")
        # The test's own power: every prediction comparable (see PRED_GAP), and sum and mean
        # choosing differently somewhere, so acc and acc_norm cannot be swapped unnoticed.
        gap = min(min(r["gap"], r["gap_norm"]) for r in ref_bin + ref_jsonl)
        tally(gap > 10 * PRED_GAP, f"reference: smallest relative gap between the two best "
              f"endings {gap:.1e} > {10 * PRED_GAP:.0e} (every prediction comparable)")
        tally(counts(ref_bin)[0] != counts(ref_bin)[1],
              f"reference: acc {counts(ref_bin)[0]} != acc_norm {counts(ref_bin)[1]} on the "
              f"eval file (a swap of the two is visible)")

        common = ["--init-from", ckpt, "--batch", str(BATCH), "--seq-len", str(SEQ_LEN)]
        runs = [("1 rank", 1, data_bin, ref_bin, ()),
                ("tp 2", 2, data_bin, ref_bin, ("--tp", "2")),
                ("pp 2", 2, data_bin, ref_bin, ("--pp", "2")),
                ("jsonl, 1 rank", 1, data_jsonl, ref_jsonl, ("--tokenizer", tokenizer))]
        for i, (name, ranks, data, ref, extra) in enumerate(runs):
            details = os.path.join(workdir, f"details{i}.jsonl")
            try:
                rc, out, err = run_eval(exe, mpiexec, [*common, "--eval-data", data, *extra,
                                                       "--eval-details", details], ranks)
                if rc != 0:
                    raise RuntimeError(f"exit status {rc}: {out}{err}")
                rows = read_details(details)
            except (RuntimeError, OSError, ValueError, subprocess.TimeoutExpired) as e:
                print(f"[{name}] mpiformer-eval failed: {e}  FAIL")
                failed += 1
                continue
            p, f = compare(name, rows, parse_summary(out), ref)
            passed, failed = passed + p, failed + f

        # A batch smaller than an example's endings: refused with one error line.
        details = os.path.join(workdir, "details_bad.jsonl")
        try:
            rc, out, err = run_eval(exe, mpiexec, ["--init-from", ckpt, "--eval-data", data_bin,
                                                   "--batch", "2", "--seq-len", str(SEQ_LEN),
                                                   "--eval-details", details])
            errors = [ln for ln in (out + err).splitlines() if ln.startswith("error:")]
            tally(rc > 0 and len(errors) == 1,
                  f"[--batch 2, 4 endings] exit status {rc} (nonzero), {len(errors)} error line "
                  f"(exactly 1): {errors[0] if errors else (out + err).strip()[-300:]}")
        except (OSError, subprocess.TimeoutExpired) as e:
            tally(False, f"[--batch 2, 4 endings] mpiformer-eval failed: {e}")
    finally:
        if args.keep:
            print(f"kept {workdir}")
        else:
            shutil.rmtree(workdir, ignore_errors=True)
    print(f"reference_eval: {passed} passed, {failed} failed")
    return 0 if failed == 0 else 1


if __name__ == "__main__":
    sys.exit(main())
