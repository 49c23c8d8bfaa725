#!/usr/bin/python3
"""External reference test: mpiformer-train --optimizer muon against a PyTorch Muon written from
its papers.

Muon (K. Jordan et al. 2024, "Muon: An optimizer for hidden layers in neural networks"): for each
weight matrix inside the blocks, momentum M = mu*M + G, Nesterov's U = G + mu*M, then five
Newton-Schulz iterations X <- a*X + (b*A + c*A*A)*X with A = X*X^T, (a, b, c) = (3.4445, -4.7750,
2.0315), from X = U / (||U||_F + 1e-7) (transposed when tall). Moonlight (J. Liu et al. 2025,
arXiv 2502.16982, section 2.2) scales the update to AdamW's RMS and decays the weights:
W <- W - lr * (0.2 * sqrt(max(rows, cols)) * X + wd * W). The matrices are those Hugging Face
stores: q_proj, k_proj, v_proj, o_proj, gate_proj, up_proj, down_proj, each expert's, the shared
expert's. Everything else (embeddings, the head, norms, biases, the router, the shared expert's
gate) is trained by AdamW at the same learning rate, as the trainer's other reference tests do.

A tiny Llama and a tiny Qwen2-MoE (experts, a shared expert, Q/K/V biases) train 10 steps in
float64 here and in the trainer, on one process and on DP 2, PP 2 (Llama) and EP 2 (Qwen2-MoE):
every step's loss within 1e-5 relative, the norm, and the final tensors; and on TP 2 and TP 4
(each rank gathers a matrix's blocks, fewer kv heads than ranks included), and under ZeRO-1
(DP 2, TP 2 x DP 2, EP 2 x DP 4). Then a resume: a Muon run saved at step 5 and resumed
equals the run straight through, bit for bit; one saved under ZeRO-1 on DP 2 resumes on one rank;
and an AdamW checkpoint resumes under Muon only with --reset-optimizer.

Run by ctest with MPIFORMER_TRAIN (and MPIEXEC) in the environment, with Debian's
/usr/bin/python3 (torch 1.13). The last line is `reference: N passed, M failed`.
"""
import math
import os
import shutil
import subprocess
import sys
import tempfile

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
try:
    import torch
    import torch.nn.functional as F
    from compare_with_pytorch import (B, T, BETA1, BETA2, EPS, STEP_RE, batches, printed_ulp,
                                      write_tokens)
    from compare_llama_with_pytorch import (CFG, MATRICES, MODEL, head_size, llama_logits,
                                            random_model, read_model, shapes, write_model)
except ImportError as e:
    sys.exit(f"reference: cannot import torch ({e}); run with /usr/bin/python3. 0 passed, 1 failed")

STEPS = 10
MU, NS_COEFFS, NS_STEPS = 0.95, (3.4445, -4.7750, 2.0315), 5
QWEN2_MOE = dict(MODEL, factor=0.0, original=8192, E=4, k=2, renorm=False, aux_coef=0.05, F=24,
                 arch=10, qkv_bias=True, Fs=20, tied=True)
# Float64 here against the trainer's float32: Newton-Schulz amplifies rounding a little more than
# AdamW does, but 10 steps of a 2-layer model stay near 1e-6.
LOSS_RTOL, NORM_RTOL, PARAM_RTOL = 1e-5, 1e-4, 1e-5
MUON_TENSORS = {"qkvw", "attprojw", "fcw", "fcprojw", "sfcw", "sfcprojw"}


def lr_at(s):
    """The trainer's schedule over this test's STEPS: linear warmup, then the cosine to the floor."""
    lr, warmup = CFG["lr"], CFG["warmup"]
    if s < warmup:
        return lr * (s + 1) / warmup
    floor = lr * CFG["final_lr_frac"]
    return floor + 0.5 * (1.0 + math.cos(math.pi * (s - warmup) / (STEPS - warmup))) * (lr - floor)


def muon_matrices(m):
    """(tensor, layer, first row, rows) of each matrix Hugging Face stores, in the tensors' rows."""
    NH, KVH, C, F_, hs = m["NH"], m["KVH"], m["C"], m["F"], head_size(m)
    out = []
    for l in range(m["L"]):
        out += [("qkvw", l, 0, NH * hs), ("qkvw", l, NH * hs, KVH * hs),
                ("qkvw", l, (NH + KVH) * hs, KVH * hs), ("attprojw", l, 0, C)]
        for e in range(max(m.get("E", 0), 1)):
            out += [("fcw", l, e * 2 * F_, F_), ("fcw", l, e * 2 * F_ + F_, F_),
                    ("fcprojw", l, e * C, C)]
        if m.get("Fs"):
            out += [("sfcw", l, 0, m["Fs"]), ("sfcw", l, m["Fs"], m["Fs"]),
                    ("sfcprojw", l, 0, C)]
    return out


def newton_schulz(g):
    a, b, c = NS_COEFFS
    x = g / (g.norm() + 1e-7)
    tall = x.shape[0] > x.shape[1]
    if tall:
        x = x.T
    for _ in range(NS_STEPS):
        A = x @ x.T
        x = a * x + (b * A + c * A @ A) @ x
    return x.T if tall else x


def muon_reference(params0, tokens, m, dtype=torch.float64):
    """The trainer's step with Muon on the matrices and AdamW on the rest, in float64."""
    p = {k: torch.tensor(v, dtype=dtype, requires_grad=True) for k, v in params0.items()}
    rest = [k for k in p if k not in MUON_TENSORS]
    opt = torch.optim.AdamW(
        [dict(params=[p[k] for k in rest if k in MATRICES], weight_decay=CFG["wd"]),
         dict(params=[p[k] for k in rest if k not in MATRICES], weight_decay=0.0)],
        lr=CFG["lr"], betas=(BETA1, BETA2), eps=EPS)
    mats = muon_matrices(m)
    momentum = [torch.zeros(rows, p[name].shape[-1], dtype=dtype)
                for name, _, _, rows in mats]
    rows_out = []
    for s, (inputs, targets) in enumerate(batches(tokens, STEPS)):
        opt.zero_grad(set_to_none=False)
        for t in p.values():
            if t.grad is not None:
                t.grad.zero_()
        aux = []
        logits = llama_logits(p, inputs, m, None, aux)
        loss = F.cross_entropy(logits[..., :m["V"]].reshape(-1, m["V"]), targets.reshape(-1))
        (loss + (sum(aux) if m.get("E") else 0.0)).backward()
        norm = torch.nn.utils.clip_grad_norm_(list(p.values()), CFG["grad_clip"])
        lr = lr_at(s)
        for g in opt.param_groups:
            g["lr"] = lr
        opt.step()
        with torch.no_grad():
            for (name, l, r0, n), buf in zip(mats, momentum):
                w = p[name].data[l, r0:r0 + n]
                g = p[name].grad[l, r0:r0 + n]
                buf.mul_(MU).add_(g)
                x = newton_schulz(g + MU * buf)
                w.mul_(1.0 - lr * CFG["wd"])
                w.add_(x, alpha=-lr * 0.2 * math.sqrt(max(w.shape)))
        rows_out.append(dict(loss=loss.item(), norm=norm.item()))
    return rows_out, {k: v.detach().double().numpy() for k, v in p.items()}


def run_trainer(exe, workdir, model, shard, m, ranks=1, extra=(), steps=STEPS, tag="run"):
    out = os.path.join(workdir, f"out_{tag}.bin")
    cmd = [exe, "--init-from", model, "--data", shard, "--batch", str(B), "--seq-len", str(T),
           "--steps", str(steps), "--lr", repr(CFG["lr"]), "--beta1", repr(BETA1),
           "--beta2", repr(BETA2), "--eps", repr(EPS), "--weight-decay", repr(CFG["wd"]),
           "--grad-clip", repr(CFG["grad_clip"]), "--warmup", str(CFG["warmup"]),
           "--lr-schedule", CFG["schedule"], "--final-lr-frac", repr(CFG["final_lr_frac"]),
           "--lr-decay-steps", str(STEPS), "--val-every", "0", "--save-llmc", out, *extra]
    if "--load" in extra:
        cmd = [c for c in cmd if c not in ("--init-from", model)]
    if ranks > 1:
        cmd = [os.environ.get("MPIEXEC", "mpiexec"), "-n", str(ranks)] + cmd
    print("$ OMP_NUM_THREADS=1 " + " ".join(cmd), flush=True)
    proc = subprocess.run(cmd, cwd=workdir, env=dict(os.environ, OMP_NUM_THREADS="1"),
                          capture_output=True, text=True, timeout=300)
    rows = {}
    for line in proc.stdout.splitlines():
        mt = STEP_RE.match(line.strip())
        if mt:
            rows[int(mt.group(1))] = dict(loss=mt.group(3), norm=mt.group(5))
    return proc, rows, (read_model(out, m) if proc.returncode == 0 else None)


def main():
    torch.manual_seed(0)
    torch.set_num_threads(1)
    exe = os.environ.get("MPIFORMER_TRAIN", "")
    if not (exe and os.access(exe, os.X_OK)):
        print(f"reference: MPIFORMER_TRAIN={exe!r} is not an executable trainer\n"
              "reference: 0 passed, 1 failed")
        return 1
    workdir = tempfile.mkdtemp(prefix="mpiformer_muon_ref_")
    passed = failed = 0

    def check(ok, text):
        nonlocal passed, failed
        print(f"{text}  {'PASS' if ok else 'FAIL'}")
        passed, failed = passed + bool(ok), failed + (not ok)

    try:
        adam_rows = {}
        tokens = np.random.default_rng(7).integers(0, MODEL["V"], CFG["n_tokens"])
        shard = os.path.join(workdir, "tokens.bin")
        write_tokens(shard, tokens)
        # TP 4 with 2 kv heads replicates each kv head on two ranks: K's and V's blocks are
        # gathered once each.
        cases = [("llama", MODEL, [(1, ()), (2, ("--dp", "2")), (2, ("--dp", "2", "--zero", "1")),
                                   (2, ("--pp", "2")), (2, ("--tp", "2")), (4, ("--tp", "4")),
                                   (4, ("--tp", "2", "--dp", "2", "--zero", "1"))]),
                 ("qwen2_moe", QWEN2_MOE, [(1, ()), (2, ("--dp", "2", "--ep", "2")),
                                           (4, ("--dp", "4", "--ep", "2", "--zero", "1")),
                                           (2, ("--tp", "2", "--sequence-parallel"))])]
        for name, m, layouts in cases:
            params0 = random_model(m)
            model = os.path.join(workdir, f"{name}.bin")
            write_model(model, m, params0)
            ref_rows, ref_final = muon_reference(params0, tokens, m)
            for ranks, layout in layouts:
                label = f"[{name} {' '.join(layout) or '1 rank'}]"
                proc, rows, final = run_trainer(exe, workdir, model, shard, m, ranks,
                                                ("--optimizer", "muon", *layout),
                                                tag=f"{name}_{ranks}_{'_'.join(layout)}")
                if proc.returncode != 0 or sorted(rows) != list(range(1, STEPS + 1)):
                    print(proc.stdout + proc.stderr)
                    check(False, f"{label} trained {STEPS} steps")
                    continue
                for k, r in enumerate(ref_rows):
                    print(f"{label} step {k + 1}: loss {rows[k + 1]['loss']} torch "
                          f"{r['loss']:.6f}, norm {rows[k + 1]['norm']} torch {r['norm']:.4f}")
                worst_loss = max(abs(float(rows[k + 1]["loss"]) - r["loss"]) / abs(r["loss"])
                                 for k, r in enumerate(ref_rows))
                norms_ok = all(abs(float(rows[k + 1]["norm"]) - r["norm"]) <=
                               printed_ulp(rows[k + 1]["norm"]) + NORM_RTOL * r["norm"]
                               for k, r in enumerate(ref_rows))
                check(worst_loss <= LOSS_RTOL and norms_ok,
                      f"{label} {STEPS} losses within {worst_loss:.1e} of PyTorch's, norms too")
                worst = max(np.linalg.norm(final[t].astype(np.float64) - ref_final[t]) /
                            np.linalg.norm(ref_final[t]) for t, _ in shapes(m))
                check(worst <= PARAM_RTOL, f"{label} final tensors within {worst:.1e}")
            # Without Muon the same run is another: the test would notice a Muon that did nothing.
            if name == "llama":
                _, adam_rows, _ = run_trainer(exe, workdir, model, shard, m, tag="adamw")
                check(abs(float(adam_rows[STEPS]["loss"]) - ref_rows[-1]["loss"]) > 1e-4,
                      f"[llama] AdamW's last loss {adam_rows[STEPS]['loss']} differs from "
                      f"Muon's {ref_rows[-1]['loss']:.6f}")
        # A resume: saved at step 5, resumed to 10, equals the run straight through.
        params0 = random_model(MODEL)
        model = os.path.join(workdir, "llama.bin")
        save = os.path.join(workdir, "ckpt")
        _, whole, _ = run_trainer(exe, workdir, model, shard, MODEL, tag="whole",
                                  extra=("--optimizer", "muon"))
        run_trainer(exe, workdir, model, shard, MODEL, steps=5, tag="first",
                    extra=("--optimizer", "muon", "--save", save, "--save-async", "0"))
        proc, second, _ = run_trainer(exe, workdir, model, shard, MODEL, tag="second",
                                      extra=("--load", save, "--save", save, "--save-async", "0"))
        check(proc.returncode == 0 and all(second.get(k) == whole.get(k) for k in range(6, 11)),
              "[resume] steps 6..10 resumed under Muon equal the run straight through, bit for bit")
        # Saved under ZeRO-1 on DP 2 (the momentum sharded), resumed on one rank: the momentum
        # comes back whole, in the layout-independent files.
        zsave = os.path.join(workdir, "zero_ckpt")
        run_trainer(exe, workdir, model, shard, MODEL, ranks=2, steps=5, tag="zero_first",
                    extra=("--optimizer", "muon", "--dp", "2", "--zero", "1", "--save", zsave,
                           "--save-async", "0"))
        proc, relaid, _ = run_trainer(exe, workdir, model, shard, MODEL, tag="relaid",
                                      extra=("--load", zsave))
        worst = max((abs(float(relaid[k]["loss"]) - float(whole[k]["loss"])) /
                     float(whole[k]["loss"]) for k in range(6, 11)), default=1.0) \
            if proc.returncode == 0 and sorted(relaid) == list(range(6, 11)) else 1.0
        check(worst <= LOSS_RTOL,
              f"[resume] saved under ZeRO-1 on DP 2, resumed on 1 rank: steps 6..10 within "
              f"{worst:.1e} of the run straight through")
        # An AdamW checkpoint: Muon refused without --reset-optimizer, taken with it.
        adam_save = os.path.join(workdir, "adam_ckpt")
        run_trainer(exe, workdir, model, shard, MODEL, steps=5, tag="adam_first",
                    extra=("--save", adam_save, "--save-async", "0"))
        proc, _, _ = run_trainer(exe, workdir, model, shard, MODEL, tag="refused",
                                 extra=("--load", adam_save, "--optimizer", "muon"))
        errors = [line for line in proc.stderr.splitlines() if line.startswith("error:")]
        check(proc.returncode == 2 and len(errors) == 1 and "--reset-optimizer" in errors[0],
              f"[resume] AdamW -> Muon without --reset-optimizer refused: {errors}")
        proc, switched, _ = run_trainer(exe, workdir, model, shard, MODEL, tag="switched",
                                        extra=("--load", adam_save, "--optimizer", "muon",
                                               "--reset-optimizer"))
        # Step 6's loss is the AdamW parameters' (the update comes after it), then Muon's steps.
        check(proc.returncode == 0 and sorted(switched) == list(range(6, 11)) and
              switched[6]["loss"] == adam_rows[6]["loss"] and
              switched[10]["loss"] != adam_rows[10]["loss"],
              "[resume] AdamW -> Muon with --reset-optimizer: step 6 is AdamW's parameters', "
              "then Muon's updates")
    finally:
        shutil.rmtree(workdir, ignore_errors=True)
    print(f"reference: {passed} passed, {failed} failed")
    return 0 if failed == 0 else 1


if __name__ == "__main__":
    sys.exit(main())
