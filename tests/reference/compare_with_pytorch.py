#!/usr/bin/python3
"""External reference test: mpiformer-train against an independent PyTorch GPT-2.

Writes a tiny random GPT-2 checkpoint and token shard in llm.c's formats, trains it for a few
steps with the trainer (one process) and with a PyTorch re-implementation of llm.c's
train_gpt2.c model, data order, AdamW, gradient clipping and learning-rate schedule, then
compares every step's loss, grad norm and lr and the final parameters. Then the same with
--precision bf16 against PyTorch's bf16 autocast: every step's loss.

Run by ctest with MPIFORMER_TRAIN (trainer binary) and MPIEXEC in the environment; see README.md.
Exit status 0 when every check passes, 1 otherwise. The last line is `reference: N passed, M failed`.

Run with Debian's /usr/bin/python3 (python3-torch 1.13, numpy).
"""
import argparse
import math
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
except ImportError as e:  # ctest counts a skip as a failure anyway: fail loudly instead
    sys.exit(f"reference: cannot import torch ({e}); install python3-torch (make deps) and run "
             f"this script with /usr/bin/python3. 0 passed, 1 failed")

# ---- the model and the runs -------------------------------------------------------------------
# V = 67 pads to Vp = 128, so the padded-vocab handling (zero rows, loss over V only) is exercised.
MODEL = dict(maxT=32, V=67, L=2, NH=2, C=32, Vp=128)
B, T, STEPS = 4, 16, 5

# Two configurations. "clipped": weight decay on and max-norm 1.8, which clips steps 1, 2 and 4
# (norms 2.10, 1.93, 1.87) but not 3 and 5 (1.72, 1.74), so both branches run; warmup 2 then
# cosine; a 2000-token shard. "plain": no clipping, no decay, no warmup, constant lr, and a shard of
# exactly 3*B*T + 1 tokens: batch 3 ends on the last token and batch 4 wraps to the start (the
# `pos + B*T + 1 > n` edge).
CONFIGS = [
    dict(name="clipped", n_tokens=2000, lr=1e-3, wd=0.1, grad_clip=1.8, warmup=2,
         schedule="cosine", final_lr_frac=0.1),
    dict(name="plain", n_tokens=3 * B * T + 1, lr=1e-3, wd=0.0, grad_clip=0.0, warmup=0,
         schedule="constant", final_lr_frac=0.1),
]
BETA1, BETA2, EPS = 0.9, 0.95, 1e-8

# Tolerances. The reference runs in float64 (see reference_run), so the difference measures the
# trainer's float32 rounding, not two rounding errors that might cancel. Numbers in [] are what
# --calibrate measures for a float32 PyTorch run against this float64 one.
# - loss: float32 sums over 64 tokens x 67 logits, and 5 steps of parameter drift [<2e-7
#   relative]. 1e-5 is 50x that; resetting any one tensor to 0 (LayerNorm gains to 1) moves the
#   step-1 loss by 4e-5 (ln2b) .. 4e-2 (wte), a wrong attention scale or GELU by far more.
# - norm, lr: half a unit in the last printed digit, plus 1e-4 relative for the float32 norm.
# - parameters are compared as updates u = final - initial (what training changed), per tensor:
#   ||u_trainer - u_ref|| / ||u_ref|| <= 2e-3 [worst tensor 1.5e-4]. The bugs it must catch are
#   >= 1e-2: lr 1% off, weight decay missing or on the wrong tensors (2e-2 .. 2e-1), clipping
#   ignored (3e-2), warmup off by one step (>1e-1).
#   And element-wise max |u_trainer - u_ref| <= 5e-2 * max |u_ref| [worst 5e-3]: looser because
#   Adam divides by sqrt(v): an element whose gradients were near zero on every step (e.g. a wpe
#   row summed over only B tokens) turns float32 gradient noise into a visible update difference.
# - The K block of qkvb is left out: its gradient is exactly zero in exact arithmetic (a bias on
#   the keys adds the same q.b to every score of a query, which softmax ignores), so float32
#   noise alone drives Adam there. It is only checked to have moved less than sum(lr).
LOSS_RTOL = 1e-5
NORM_RTOL = 1e-4
UPDATE_L2_RTOL, UPDATE_MAX_RTOL = 2e-3, 5e-2

# bf16 (--precision bf16) against PyTorch's torch.autocast("cpu", dtype=torch.bfloat16) on the same
# checkpoint and tokens, the "clipped" configuration. Both round the inputs of every product to
# bf16, whose 8 significant bits leave a relative error of up to 2^-8 = 3.9e-3 per rounding
# (uniform in +-2^-8, standard deviation 2^-8/sqrt(3) = 2.3e-3); autocast also rounds each
# product's output to bf16 (attention scores and probabilities, logits), which the trainer keeps
# in fp32. A token's loss, logsumexp(z) - z_target, moves by about the rounding error of its
# logits: 2.3e-3 * mean|z| (0.48 here) ~ 1e-3, and the mean over 64 tokens by ~1e-3 / 8 = 1.4e-4,
# 3e-5 relative, per stage of roundings; the ~10 stages of this 2-layer model add in quadrature to
# ~1e-4 relative, and five steps of updates carry it along (measured: <= 2e-4 between the trainer
# and autocast, each <= 3e-4 from the float64 run). Each of the 5 losses must agree within 1e-3
# relative, five times that. Trained on stale bf16 weights (the copy not refreshed after an
# update) the losses are 1.4e-3 .. 5.3e-3 off from step 2 on; the rounding itself (to nearest,
# ties to even) is tested exactly in tests/unit/test_gemm.cpp.
BF16_LOSS_RTOL = 1e-3


def param_shapes(maxT, V, L, NH, C, Vp):
    """llm.c's ParameterTensors, in file order."""
    return [("wte", (Vp, C)), ("wpe", (maxT, C)), ("ln1w", (L, C)), ("ln1b", (L, C)),
            ("qkvw", (L, 3 * C, C)), ("qkvb", (L, 3 * C)), ("attprojw", (L, C, C)),
            ("attprojb", (L, C)), ("ln2w", (L, C)), ("ln2b", (L, C)), ("fcw", (L, 4 * C, C)),
            ("fcb", (L, 4 * C)), ("fcprojw", (L, C, 4 * C)), ("fcprojb", (L, C)),
            ("lnfw", (C,)), ("lnfb", (C,))]


MATRICES = {"wte", "wpe", "qkvw", "attprojw", "fcw", "fcprojw"}  # weight-decayed tensors


# ---- llm.c file formats -----------------------------------------------------------------------
def write_checkpoint(path, m, params):
    header = np.zeros(256, dtype="<i4")
    header[:8] = [20240326, 3, m["maxT"], m["V"], m["L"], m["NH"], m["C"], m["Vp"]]
    with open(path, "wb") as f:
        f.write(header.tobytes())
        for name, _ in param_shapes(**m):
            f.write(np.ascontiguousarray(params[name], dtype="<f4").tobytes())


def read_checkpoint(path):
    raw = open(path, "rb").read()
    header = np.frombuffer(raw[:1024], dtype="<i4")
    if header[0] != 20240326 or header[1] != 3:
        raise ValueError(f"{path}: bad magic/version {header[0]}/{header[1]}")
    m = dict(zip(["maxT", "V", "L", "NH", "C", "Vp"], (int(x) for x in header[2:8])))
    flat = np.frombuffer(raw[1024:], dtype="<f4")
    params, off = {}, 0
    for name, shape in param_shapes(**m):
        n = int(np.prod(shape))
        params[name] = flat[off:off + n].reshape(shape).copy()
        off += n
    if off != flat.size:
        raise ValueError(f"{path}: {flat.size} floats, expected {off}")
    return m, params


def write_tokens(path, tokens):
    header = np.zeros(256, dtype="<i4")
    header[:3] = [20240520, 1, len(tokens)]
    with open(path, "wb") as f:
        f.write(header.tobytes())
        f.write(np.asarray(tokens, dtype="<u2").tobytes())


def random_model(m, seed=1234):
    """Random weights large enough that attention and GELU are far from their linear regime
    (std 0.1: attention scores ~O(1)), LayerNorm gains 1 + noise and nonzero biases, so that every
    tensor changes the loss well beyond LOSS_RTOL. Padded wte rows are zero, as llm.c writes them."""
    rng = np.random.default_rng(seed)
    params = {}
    for name, shape in param_shapes(**m):
        if name in ("ln1w", "ln2w", "lnfw"):
            p = 1.0 + 0.1 * rng.standard_normal(shape)
        elif name in MATRICES:
            p = 0.1 * rng.standard_normal(shape)
        else:  # biases, including LayerNorm biases
            p = 0.05 * rng.standard_normal(shape)
        params[name] = p.astype(np.float32)
    params["wte"][m["V"]:] = 0.0
    return params


# ---- the reference: llm.c's train_gpt2.c in PyTorch -------------------------------------------
def batches(tokens, steps):
    """llm.c DataLoader, shuffle off: batch = B*T+1 consecutive tokens from pos; pos += B*T; back
    to 0 when the next batch would run past the end."""
    pos, n = 0, len(tokens)
    for _ in range(steps):
        buf = torch.as_tensor(tokens[pos:pos + B * T + 1].astype(np.int64))
        yield buf[:-1].view(B, T), buf[1:].view(B, T)
        pos += B * T
        if pos + B * T + 1 > n:
            pos = 0


def layernorm(x, w, b):
    mean = x.mean(-1, keepdim=True)
    var = ((x - mean) ** 2).mean(-1, keepdim=True)  # biased variance, as llm.c
    return (x - mean) / torch.sqrt(var + 1e-5) * w + b


def gelu_tanh(x):
    return 0.5 * x * (1.0 + torch.tanh(math.sqrt(2.0 / math.pi) * (x + 0.044715 * x ** 3)))


def gpt2_logits(p, inputs, m):
    """The logits (B,T,Vp) of llm.c's GPT-2 forward; columns >= V are padding."""
    L, NH, C = m["L"], m["NH"], m["C"]
    Bb, Tt = inputs.shape
    hs = C // NH
    x = p["wte"][inputs] + p["wpe"][:Tt]  # (B,T,C)
    causal = torch.ones(Tt, Tt, dtype=torch.bool).tril()
    for l in range(L):
        h = layernorm(x, p["ln1w"][l], p["ln1b"][l])
        qkv = h @ p["qkvw"][l].T + p["qkvb"][l]  # (B,T,3C): [Q | K | V] blocks of C
        q, k, v = (t.view(Bb, Tt, NH, hs).transpose(1, 2) for t in qkv.split(C, dim=-1))
        att = (q @ k.transpose(-2, -1)) / math.sqrt(hs)  # (B,NH,T,T)
        att = att.masked_fill(~causal, float("-inf")).softmax(-1)
        y = (att @ v).transpose(1, 2).reshape(Bb, Tt, C)
        x = x + y @ p["attprojw"][l].T + p["attprojb"][l]
        h = layernorm(x, p["ln2w"][l], p["ln2b"][l])
        h = gelu_tanh(h @ p["fcw"][l].T + p["fcb"][l])
        x = x + h @ p["fcprojw"][l].T + p["fcprojb"][l]
    x = layernorm(x, p["lnfw"], p["lnfb"])
    return x @ p["wte"].T  # (B,T,Vp); tied head


def gpt2_loss(p, inputs, targets, m):
    V = m["V"]
    logits = gpt2_logits(p, inputs, m)  # padded columns are ignored
    return F.cross_entropy(logits[..., :V].reshape(-1, V), targets.reshape(-1))


def lr_at(s, cfg):
    lr, warmup = cfg["lr"], cfg["warmup"]
    if s < warmup:
        return lr * (s + 1) / warmup
    if cfg["schedule"] == "constant":
        return lr
    min_lr = lr * cfg["final_lr_frac"]
    coeff = 0.5 * (1.0 + math.cos(math.pi * (s - warmup) / (STEPS - warmup)))
    return min_lr + coeff * (lr - min_lr)


def reference_run(params0, tokens, cfg, m, dtype=torch.float64, autocast_bf16=False):
    """Float64 by default: its rounding error (~1e-16) is negligible, so any difference to the
    float32 trainer is the trainer's own rounding (bounded, see the tolerances) or a bug. With
    dtype=float32 it stands in for the trainer (--calibrate) to measure float32 rounding. With
    autocast_bf16 (float32 parameters) the forward runs under torch.autocast's bf16: PyTorch's
    mixed precision, the anchor for --precision bf16."""
    return train_reference(params0, tokens, cfg, MATRICES, lambda p, x, y: gpt2_loss(p, x, y, m),
                           dtype, autocast_bf16)


def train_reference(params0, tokens, cfg, matrices, loss_of, dtype, autocast_bf16):
    """The trainer's step in PyTorch for any model: llm.c's batches, loss_of(params, inputs,
    targets), gradient clipping, AdamW decaying the tensors named in `matrices` and the learning
    rate schedule. Returns each step's loss, norm and lr, and the final parameters (float64)."""
    p = {k: torch.tensor(v, dtype=dtype, requires_grad=True) for k, v in params0.items()}
    groups = [dict(params=[p[k] for k in p if k in matrices], weight_decay=cfg["wd"]),
              dict(params=[p[k] for k in p if k not in matrices], weight_decay=0.0)]
    opt = torch.optim.AdamW(groups, lr=cfg["lr"], betas=(BETA1, BETA2), eps=EPS)
    rows = []
    for s, (inputs, targets) in enumerate(batches(tokens, STEPS)):
        opt.zero_grad(set_to_none=False)
        with torch.autocast("cpu", dtype=torch.bfloat16, enabled=autocast_bf16):
            loss = loss_of(p, inputs, targets)
        # A mixture of experts' loss_of gives (cross-entropy, balance loss): the objective is
        # their sum, the loss reported the cross-entropy.
        aux = None
        if isinstance(loss, tuple):
            loss, aux = loss
            (loss + aux).backward()
        else:
            loss.backward()
        if cfg["grad_clip"] > 0:  # coef = clip / (norm + 1e-6), applied when < 1
            norm = torch.nn.utils.clip_grad_norm_(list(p.values()), cfg["grad_clip"])
        else:
            norm = torch.sqrt(sum((t.grad.double() ** 2).sum() for t in p.values()))
        lr = lr_at(s, cfg)
        for g in opt.param_groups:
            g["lr"] = lr
        opt.step()
        rows.append(dict(loss=loss.item(), norm=norm.item(), lr=lr))
        if aux is not None:
            rows[-1]["aux"] = aux.item()
    return rows, {k: v.detach().double().numpy() for k, v in p.items()}


# ---- the trainer -------------------------------------------------------------------------------
# A mixture of experts' line has its balance loss after the loss (`| aux X`), and a model with
# multi-token prediction modules its MTP loss after that (`| mtp X`).
STEP_RE = re.compile(r"^step\s+(\d+)/(\d+)\s*\|\s*loss\s+(\S+)(?:\s*\|\s*aux\s+\S+)?"
                     r"(?:\s*\|\s*mtp\s+\S+)?\s*\|\s*lr\s+(\S+)\s*\|\s*norm\s+(\S+)")
AUX_RE = re.compile(r"\|\s*aux\s+(\S+)")
MTP_RE = re.compile(r"\|\s*mtp\s+(\S+)")


class NoNativeBf16(Exception):
    """The trainer refused --precision bf16: this CPU (or library) has no native bf16 products."""


def run_trainer(exe, workdir, ckpt, shard, cfg, precision="fp32"):
    out = os.path.join(workdir, f"out_{cfg['name']}_{precision}.bin")
    cmd = [exe, "--init-from", ckpt, "--data", shard, "--batch", str(B), "--seq-len", str(T),
           "--steps", str(STEPS), "--lr", repr(cfg["lr"]), "--beta1", repr(BETA1),
           "--beta2", repr(BETA2), "--eps", repr(EPS), "--weight-decay", repr(cfg["wd"]),
           "--grad-clip", repr(cfg["grad_clip"]), "--warmup", str(cfg["warmup"]),
           "--lr-schedule", cfg["schedule"], "--final-lr-frac", repr(cfg["final_lr_frac"]),
           "--seed", "1", "--precision", precision, "--save-llmc", out]
    # One thread through the environment rather than --threads: Kokkos::initialize also parses
    # argv and rejects `--threads 1` (it wants its own `--threads=N`).
    env = dict(os.environ, OMP_NUM_THREADS="1")
    print("$ OMP_NUM_THREADS=1 " + " ".join(cmd), flush=True)
    proc = subprocess.run(cmd, cwd=workdir, env=env, capture_output=True, text=True, timeout=300)
    if proc.returncode == 2 and "--precision bf16 needs native bf16" in proc.stderr:
        raise NoNativeBf16(proc.stderr.strip())
    if proc.returncode != 0:
        print(proc.stdout + proc.stderr)
        raise RuntimeError(f"trainer exited with status {proc.returncode}")
    rows = {}
    for line in proc.stdout.splitlines():
        mt = STEP_RE.match(line.strip())
        if mt:  # keep the printed strings: their digits set the norm and lr tolerances
            rows[int(mt.group(1))] = dict(loss=mt.group(3), lr=mt.group(4), norm=mt.group(5))
    if sorted(rows) != list(range(1, STEPS + 1)):
        print(proc.stdout + proc.stderr)
        raise RuntimeError(f"expected step lines 1..{STEPS}, parsed steps {sorted(rows)}")
    return [rows[k] for k in range(1, STEPS + 1)], read_checkpoint(out)


def fake_trainer(params0, tokens, cfg, m):
    """--calibrate: a float32 PyTorch run, printed as the trainer prints, stands in for it."""
    rows, final = reference_run(params0, tokens, cfg, m, dtype=torch.float32)
    rows = [dict(loss=f"{r['loss']:.6f}", lr=f"{r['lr']:.1e}", norm=f"{r['norm']:.4f}") for r in rows]
    return rows, (m, final)


def printed_ulp(s):
    """Half a unit in the last printed digit of s ('0.1234' -> 5e-5, '3.0e-04' -> 5e-6)."""
    mant, _, exp = s.lower().partition("e")
    decimals = len(mant.partition(".")[2])
    return 0.5 * 10.0 ** (int(exp or 0) - decimals)


# ---- comparison ---------------------------------------------------------------------------------
def compare(cfg, ref_rows, ref_final, tr_rows, tr_m, tr_final, params0, m):
    """Prints the step and tensor tables; returns (passed, failed) counts (one per row)."""
    passed = failed = 0
    first_bad = None
    print(f"\n[{cfg['name']}] {'step':>4} {'loss (trainer)':>15} {'loss (torch)':>13} "
          f"{'rel diff':>9} {'norm tr':>9} {'norm torch':>10} {'lr tr':>9} {'lr torch':>10}")
    for k, (r, t) in enumerate(zip(ref_rows, tr_rows), start=1):
        loss_rel = abs(float(t["loss"]) - r["loss"]) / abs(r["loss"])
        ok_loss = loss_rel <= LOSS_RTOL
        ok_norm = abs(float(t["norm"]) - r["norm"]) <= printed_ulp(t["norm"]) + NORM_RTOL * r["norm"]
        ok_lr = abs(float(t["lr"]) - r["lr"]) <= printed_ulp(t["lr"]) + 1e-6 * r["lr"]
        bad = [q for q, ok in (("loss", ok_loss), ("norm", ok_norm), ("lr", ok_lr)) if not ok]
        print(f"[{cfg['name']}] {k:>4} {t['loss']:>15} {r['loss']:>13.6f} {loss_rel:>9.1e} "
              f"{t['norm']:>9} {r['norm']:>10.6f} {t['lr']:>9} {r['lr']:>10.3e}  "
              + ("PASS" if not bad else "FAIL (" + ", ".join(bad) + ")"))
        passed, failed = passed + (not bad), failed + bool(bad)
        if bad and first_bad is None:
            first_bad = f"step {k} {bad[0]}"
    if tr_m != m:
        print(f"[{cfg['name']}] saved checkpoint header {tr_m} != {m}  FAIL")
        return passed, failed + 1
    print(f"[{cfg['name']}] {'tensor':>10} {'||u_ref||':>10} {'L2 rel diff':>11} "
          f"{'max rel diff':>12}")
    C = m["C"]
    for name, _ in param_shapes(**m):
        init = params0[name].astype(np.float64)
        u_ref, u_tr = ref_final[name] - init, tr_final[name].astype(np.float64) - init
        if name == "qkvb":  # the zero-gradient K block, see the tolerances
            k_moved = np.abs(u_tr[:, C:2 * C]).max()
            ok = bool(np.isfinite(k_moved)) and k_moved <= sum(r["lr"] for r in ref_rows)
            print(f"[{cfg['name']}] {'qkvb[K]':>10} max |update| {k_moved:.2e} <= sum(lr)  "
                  f"{'PASS' if ok else 'FAIL'}")
            passed, failed = passed + ok, failed + (not ok)
            u_ref, u_tr = np.delete(u_ref, np.s_[C:2 * C], 1), np.delete(u_tr, np.s_[C:2 * C], 1)
        diff = np.abs(u_tr - u_ref)
        l2 = np.linalg.norm(diff) / np.linalg.norm(u_ref)
        mx = diff.max() / np.abs(u_ref).max()
        ok = bool(l2 <= UPDATE_L2_RTOL and mx <= UPDATE_MAX_RTOL)  # NaN fails both
        label = "qkvb[Q,V]" if name == "qkvb" else name
        print(f"[{cfg['name']}] {label:>10} {np.linalg.norm(u_ref):>10.3e} {l2:>11.1e} {mx:>12.1e}"
              f"  {'PASS' if ok else 'FAIL'}")
        if not ok and first_bad is None:
            idx = np.unravel_index(diff.argmax(), diff.shape)
            first_bad = (f"tensor {name} (largest difference at {tuple(int(i) for i in idx)}: "
                         f"update trainer {u_tr[idx]:.6g}, torch {u_ref[idx]:.6g})")
        passed, failed = passed + ok, failed + (not ok)
    if first_bad:
        print(f"[{cfg['name']}] first mismatch: {first_bad}")
    return passed, failed


def compare_bf16(cfg, torch_rows, fp64_rows, tr_rows, tr_fp32_rows):
    """--precision bf16 against autocast: each loss within BF16_LOSS_RTOL. Returns (passed,
    failed)."""
    passed = failed = 0
    print(f"\n[{cfg['name']} bf16] {'step':>4} {'loss (trainer)':>15} {'loss (autocast)':>16} "
          f"{'rel diff':>9} {'float64':>9} {'trainer-f64':>11} {'autocast-f64':>12}")
    for k, (r, t, f) in enumerate(zip(torch_rows, tr_rows, fp64_rows), start=1):
        rel = abs(float(t["loss"]) - r["loss"]) / abs(r["loss"])
        ok = rel <= BF16_LOSS_RTOL
        print(f"[{cfg['name']} bf16] {k:>4} {t['loss']:>15} {r['loss']:>16.6f} {rel:>9.1e} "
              f"{f['loss']:>9.6f} {abs(float(t['loss']) - f['loss']) / f['loss']:>11.1e} "
              f"{abs(r['loss'] - f['loss']) / f['loss']:>12.1e}  {'PASS' if ok else 'FAIL'}")
        passed, failed = passed + ok, failed + (not ok)
    # The flag must change the arithmetic: the bf16 run's losses are not the fp32 run's.
    differs = any(t["loss"] != f["loss"] for t, f in zip(tr_rows, tr_fp32_rows))
    print(f"[{cfg['name']} bf16] losses differ from the trainer's fp32 run (bf16 products in use)  "
          f"{'PASS' if differs else 'FAIL'}")
    return passed + differs, failed + (not differs)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--calibrate", action="store_true",
                    help="compare a float32 PyTorch run instead of the trainer (shows fp32 rounding)")
    ap.add_argument("--keep", action="store_true", help="keep the temporary directory")
    args = ap.parse_args()
    torch.manual_seed(0)
    torch.set_num_threads(1)

    exe = os.environ.get("MPIFORMER_TRAIN", "")
    if not args.calibrate and not (exe and os.access(exe, os.X_OK)):
        print(f"reference: MPIFORMER_TRAIN={exe!r} is not an executable trainer\n"
              "reference: 0 passed, 1 failed")
        return 1

    workdir = tempfile.mkdtemp(prefix="mpiformer_ref_")
    passed = failed = 0
    try:
        params0 = random_model(MODEL)
        ckpt = os.path.join(workdir, "ckpt.bin")
        write_checkpoint(ckpt, MODEL, params0)
        for i, cfg in enumerate(CONFIGS):
            tokens = np.random.default_rng(100 + i).integers(0, MODEL["V"], cfg["n_tokens"])
            shard = os.path.join(workdir, f"tokens_{cfg['name']}.bin")
            write_tokens(shard, tokens)
            ref_rows, ref_final = reference_run(params0, tokens, cfg, MODEL)
            try:
                if args.calibrate:
                    tr_rows, (tr_m, tr_final) = fake_trainer(params0, tokens, cfg, MODEL)
                else:
                    tr_rows, (tr_m, tr_final) = run_trainer(exe, workdir, ckpt, shard, cfg)
            except (RuntimeError, ValueError, OSError, subprocess.TimeoutExpired) as e:
                print(f"[{cfg['name']}] trainer run failed: {e}  FAIL")
                failed += 1
                continue
            p, f = compare(cfg, ref_rows, ref_final, tr_rows, tr_m, tr_final, params0, MODEL)
            passed, failed = passed + p, failed + f
            if cfg["name"] != "clipped" or args.calibrate:
                continue
            torch_bf16_rows, _ = reference_run(params0, tokens, cfg, MODEL, dtype=torch.float32,
                                               autocast_bf16=True)
            try:
                tr16_rows, _ = run_trainer(exe, workdir, ckpt, shard, cfg, precision="bf16")
            except NoNativeBf16 as e:  # not a pass: reported, and counted in neither column
                print(f"[{cfg['name']} bf16] SKIPPED, no native bf16 here: {e}")
                continue
            except (RuntimeError, ValueError, OSError, subprocess.TimeoutExpired) as e:
                print(f"[{cfg['name']} bf16] trainer run failed: {e}  FAIL")
                failed += 1
                continue
            p, f = compare_bf16(cfg, torch_bf16_rows, ref_rows, tr16_rows, tr_rows)
            passed, failed = passed + p, failed + f
    finally:
        if args.keep:
            print(f"kept {workdir}")
        else:
            shutil.rmtree(workdir, ignore_errors=True)
    print(f"reference: {passed} passed, {failed} failed")
    return 0 if failed == 0 else 1


if __name__ == "__main__":
    sys.exit(main())
