#!/usr/bin/python3
"""External reference test: mpiformer-train's Llama against an independent PyTorch Llama.

Writes a tiny random Llama-family model (grouped-query attention with fewer kv heads than heads,
an untied LM head, Llama 3.1's rope scaling on) as an mpiformer Llama model file
(docs/file-formats.md) and a token shard, trains it 5 steps with the trainer (one process) and
with the plain PyTorch model below, then compares every step's loss and grad norm and the final
parameters. Then the same with --precision bf16 against PyTorch's bf16 autocast: every loss.
Then document masking (--doc-mask): data where a fifth of the tokens are the document token, each
query attending only from its document's start to itself, trained by both: every loss, norm and
final tensor. Then mpiformer-generate decodes the initial model greedily, with the KV cache,
without it, and on TP 2 and 4: the same ids as PyTorch and the logits before every token.

The model is written from Hugging Face's LlamaForCausalLM semantics (modeling_llama.py): RMSNorm
x * rsqrt(mean(x^2) + eps) * w; rotary embeddings on Q and K with the half-split rotate_half,
cos/sin of position * inv_freq repeated over both halves, inv_freq scaled as
_compute_llama3_parameters does; each group of NH/KVH query heads reads one kv head (repeat_kv);
MLP down(silu(gate(x)) * up(x)); no biases; the head lm_head. The data order, AdamW and the
schedule are llm.c's, shared with compare_with_pytorch.py.

Run by ctest with MPIFORMER_TRAIN and MPIFORMER_GENERATE in the environment, with Debian's /usr/bin/python3 (torch 1.13).
Exit status 0 when every check passes; the last line is `reference: N passed, M failed`.
"""
import math
import os
import subprocess
import sys
import tempfile
import shutil

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
try:
    import torch
    import torch.nn.functional as F
    from compare_with_pytorch import (B, T, STEPS, BETA1, BETA2, EPS, STEP_RE, AUX_RE, printed_ulp,
                                      train_reference, write_tokens)
except ImportError as e:
    sys.exit(f"reference: cannot import torch ({e}); run with /usr/bin/python3. 0 passed, 1 failed")

# L2, C32, NH4 with KVH2 (two query heads per kv head), hs 8, F 72 (not 4C), V 67 padded to 128.
# Rope scaling 8,1,4 over an original context of 64: with theta 1e4 and hs 8 the wavelengths
# 6.3, 63, 628, 6283 fall in all three of llama3's bands (kept, smoothed, divided by the factor).
MODEL = dict(maxT=32, V=67, L=2, NH=4, KVH=2, C=32, F=72, Vp=128, eps=1e-6, theta=10000.0,
             factor=8.0, low=1.0, high=4.0, original=64, tied=False)
CFG = dict(name="llama", n_tokens=2000, lr=1e-3, wd=0.1, grad_clip=1.0, warmup=2,
           schedule="cosine", final_lr_frac=0.1)
LLAMA_MAGIC, LLAMA_VERSION = 20251125, 1

# Tolerances. The reference runs in float64, so a difference is the trainer's float32 rounding.
# - loss: relative 1e-5 (float32 rounding of a 2-layer model moves it by ~1e-7).
# - norm: half a unit of the printed digit plus 1e-4 relative.
# - final parameters, per tensor: ||p_trainer - p_ref|| / ||p_ref|| <= 1e-5; and the update
#   (final - initial), ||u_tr - u_ref|| / ||u_ref|| <= 2e-3 (as compare_with_pytorch.py: Adam's
#   division by sqrt(v) magnifies float32 noise in elements whose gradients are tiny), which a
#   1% wrong learning rate, a missing weight decay or a wrong rotation would exceed by far.
LOSS_RTOL, NORM_RTOL, PARAM_RTOL, UPDATE_L2_RTOL = 1e-5, 1e-4, 1e-5, 2e-3
BF16_LOSS_RTOL = 1e-3  # see compare_with_pytorch.py: ~10 stages of bf16 rounding, 5x margin


def head_size(m):
    """Qwen3's head_dim when given, else C / NH."""
    return m.get("hd") or m["C"] // m["NH"]


def shapes(m):
    L, NH, KVH, C, F_, Vp = m["L"], m["NH"], m["KVH"], m["C"], m["F"], m["Vp"]
    hs = head_size(m)
    out = [("wte", (Vp, C)), ("ln1w", (L, C)), ("qkvw", (L, (NH + 2 * KVH) * hs, C))]
    if m.get("qkv_bias"):  # Qwen2: biases on Q, K and V, in the file after qkvw
        out.append(("qkvb", (L, (NH + 2 * KVH) * hs)))
    E = m.get("E", 0)  # a mixture of experts: E experts' MLPs stacked, and a router
    out += [("attprojw", (L, C, NH * hs)), ("ln2w", (L, C)), ("fcw", (L, max(E, 1) * 2 * F_, C)),
            ("fcprojw", (L, max(E, 1) * C, F_)), ("lnfw", (C,))]
    if not m["tied"]:
        out.append(("lmhead", (Vp, C)))
    if m.get("qk_norm") == "whole":  # OLMo-2: norms of the whole Q and K projections
        out += [("q_normw", (L, NH * hs)), ("k_normw", (L, KVH * hs))]
    elif m.get("qk_norm"):  # Qwen3: the per-head q and k norms, after the GPT-2 and Llama tensors
        out += [("q_normw", (L, hs)), ("k_normw", (L, hs))]
    if E:
        out.append(("routerw", (L, E, C)))
    Fs = m.get("Fs", 0)  # Qwen2-MoE's shared expert: [gate | up], down, and its gate's row
    if Fs:
        out += [("sfcw", (L, 2 * Fs, C)), ("sfcprojw", (L, C, Fs)), ("sgatew", (L, 1, C))]
    return out


MATRICES = {"wte", "qkvw", "attprojw", "fcw", "fcprojw", "lmhead", "routerw", "sfcw", "sfcprojw",
            "sgatew"}


def header(m):
    h = np.zeros(256, dtype="<i4")
    # Slot 8: the family (1 llama, 2 qwen2, 3 mistral, 4 phi3, 5 qwen3, 6 olmo2); slot 18: the sliding
    # window; slot 19: a head size apart from C / NH.
    h[:13] = [LLAMA_MAGIC, LLAMA_VERSION, m["maxT"], m["V"], m["L"], m["NH"], m["C"], m["Vp"],
              m.get("arch", 1), m["KVH"], m["F"], int(m["tied"]), m["original"]]
    h[18] = m.get("window", 0)
    h[19] = m["hd"] if m.get("hd") and m["hd"] * m["NH"] != m["C"] else 0
    # Slots 20..23: experts, experts per token, renormalised gates, the balance loss's coefficient.
    if m.get("E"):
        h[20], h[21], h[22] = m["E"], m["k"], int(m["renorm"])
        h[23] = np.array([m["aux_coef"]], dtype="<f4").view("<i4")[0]
    h[24] = m.get("Fs", 0)  # slot 24: a shared expert's width
    floats = np.array([m["eps"], m["theta"], m["factor"], m["low"], m["high"]], dtype="<f4")
    h[13:18] = floats.view("<i4")
    return h


def write_model(path, m, params):
    with open(path, "wb") as f:
        f.write(header(m).tobytes())
        for name, _ in shapes(m):
            f.write(np.ascontiguousarray(params[name], dtype="<f4").tobytes())


def read_model(path, m):
    raw = open(path, "rb").read()
    h = np.frombuffer(raw[:1024], dtype="<i4")
    if not np.array_equal(h, header(m)):
        raise ValueError(f"{path}: header differs from the model's")
    flat = np.frombuffer(raw[1024:], dtype="<f4")
    params, off = {}, 0
    for name, shape in shapes(m):
        n = int(np.prod(shape))
        params[name] = flat[off:off + n].reshape(shape).copy()
        off += n
    if off != flat.size:
        raise ValueError(f"{path}: {flat.size} floats, expected {off}")
    return params


def random_model(m, seed=4321):
    rng = np.random.default_rng(seed)
    params = {}
    for name, shape in shapes(m):
        if name in MATRICES or name == "qkvb":
            p = 0.1 * rng.standard_normal(shape)
        else:  # RMSNorm gains
            p = 1.0 + 0.1 * rng.standard_normal(shape)
        params[name] = p.astype(np.float32)
    params["wte"][m["V"]:] = 0.0
    if "lmhead" in params:
        params["lmhead"][m["V"]:] = 0.0
    return params


# ---- the reference Llama -----------------------------------------------------------------------
def inv_freq(m, dtype):
    hs = head_size(m)
    inv = 1.0 / (m["theta"] ** (torch.arange(0, hs, 2, dtype=torch.float64) / hs))
    if m["factor"] > 0:  # Llama 3.1: keep high frequencies, divide low ones, blend in between
        low_wavelen, high_wavelen = m["original"] / m["low"], m["original"] / m["high"]
        wavelen = 2 * math.pi / inv
        scaled = torch.where(wavelen > low_wavelen, inv / m["factor"], inv)
        smooth = (m["original"] / wavelen - m["low"]) / (m["high"] - m["low"])
        blended = (1 - smooth) * scaled / m["factor"] + smooth * scaled
        medium = (wavelen >= high_wavelen) & (wavelen <= low_wavelen)
        inv = torch.where(medium, blended, scaled)
    return inv.to(dtype)


def rms_norm(x, w, eps):
    return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps) * w


def rotate_half(x):
    x1, x2 = x.chunk(2, dim=-1)
    return torch.cat((-x2, x1), dim=-1)


def document_mask(inputs, doc_token):
    """(B, 1, T, T): query t sees key j when j <= t and j >= the position where t's document
    starts (the last occurrence of doc_token at or before t; 0 when none)."""
    Bb, Tt = inputs.shape
    pos = torch.arange(Tt)
    starts = torch.where(inputs == doc_token, pos, torch.zeros_like(pos)).cummax(dim=1).values
    causal = pos[None, :] <= pos[:, None]
    return (causal[None] & (pos[None, None, :] >= starts[:, :, None]))[:, None]


def moe_mlp(p, l, h, m, aux):
    """A mixture of experts, densely: every expert on every token, masked by the router's choice;
    the sequence-wise balance loss of each row appended to `aux`."""
    E, k, F_, C = m["E"], m["k"], m["F"], m["C"]
    dt = torch.float64 if h.dtype == torch.float64 else torch.float32
    with torch.autocast("cpu", enabled=False):  # the router in fp32 under bf16, as the trainer's
        probs = (h.to(dt) @ p["routerw"][l].to(dt).T).softmax(-1)
    # The k most probable, ties to the lower index (a stable sort of -p).
    top = torch.sort(-probs.detach(), dim=-1, stable=True).indices[..., :k]
    chosen = probs.gather(-1, top)
    gates = chosen / chosen.sum(-1, keepdim=True) if m["renorm"] else chosen
    out = torch.zeros_like(h)
    for e in range(E):
        w1 = p["fcw"][l][e * 2 * F_:(e + 1) * 2 * F_]
        w2 = p["fcprojw"][l][e * C:(e + 1) * C]
        gate, up = (h @ w1.T).split(F_, dim=-1)
        y = (F.silu(gate) * up) @ w2.T
        out = out + (gates * (top == e)).sum(-1, keepdim=True) * y
    if m.get("Fs"):  # the shared expert, scaled by sigmoid(h . sgatew) (the gate in fp32)
        gate, up = (h @ p["sfcw"][l].T).split(m["Fs"], dim=-1)
        y = (F.silu(gate) * up) @ p["sfcprojw"][l].T
        with torch.autocast("cpu", enabled=False):
            g = torch.sigmoid(h.to(dt) @ p["sgatew"][l].to(dt).T)
        out = out + g.to(y.dtype) * y
    counts = F.one_hot(top, E).sum(-2).sum(1).to(probs.dtype)  # (B, E): c_e of each row
    T_ = h.shape[1]
    aux.append((m["aux_coef"] * E / (k * T_ * T_) * (probs.sum(1) * counts).sum(-1)).mean())
    return out


def llama_logits(p, inputs, m, doc_token=None, aux=None):
    L, NH, KVH, C, F_ = m["L"], m["NH"], m["KVH"], m["C"], m["F"]
    Bb, Tt = inputs.shape
    hs = head_size(m)
    x = p["wte"][inputs]
    dtype = x.dtype if x.dtype != torch.bfloat16 else torch.float32
    freqs = torch.arange(Tt, dtype=torch.float64)[:, None] * inv_freq(m, torch.float64)[None, :]
    emb = torch.cat((freqs, freqs), dim=-1)
    cos, sin = emb.cos().to(p["wte"].dtype), emb.sin().to(p["wte"].dtype)
    causal = (torch.ones(Tt, Tt, dtype=torch.bool).tril() if doc_token is None
              else document_mask(inputs, doc_token))
    if m.get("window", 0) > 0:  # a query sees the last `window` positions, itself included
        pos = torch.arange(Tt)
        causal = causal & (pos[:, None] - pos[None, :] < m["window"])
    post = m.get("post_norm")  # OLMo-2: x + norm(attn(x)), then h + norm(mlp(h))
    for l in range(L):
        h = x if post else rms_norm(x, p["ln1w"][l], m["eps"])
        qkv = h @ p["qkvw"][l].T
        if "qkvb" in p:
            qkv = qkv + p["qkvb"][l]
        q, k, v = qkv.split([NH * hs, KVH * hs, KVH * hs], dim=-1)
        if m.get("qk_norm") == "whole":  # OLMo-2: over all of Q's and all of K's values
            q = rms_norm(q, p["q_normw"][l], m["eps"])
            k = rms_norm(k, p["k_normw"][l], m["eps"])
        q = q.view(Bb, Tt, NH, hs).transpose(1, 2)
        k = k.view(Bb, Tt, KVH, hs).transpose(1, 2)
        v = v.view(Bb, Tt, KVH, hs).transpose(1, 2)
        if m.get("qk_norm") is True:  # Qwen3: each head RMS-normalised before the rotation
            q = rms_norm(q, p["q_normw"][l], m["eps"])
            k = rms_norm(k, p["k_normw"][l], m["eps"])
        q = q * cos + rotate_half(q) * sin
        k = k * cos + rotate_half(k) * sin
        k = k.repeat_interleave(NH // KVH, dim=1)  # repeat_kv: query head h reads kv head h // g
        v = v.repeat_interleave(NH // KVH, dim=1)
        att = (q @ k.transpose(-2, -1)) / math.sqrt(hs)
        att = att.masked_fill(~causal, float("-inf")).softmax(-1)
        y = (att @ v).transpose(1, 2).reshape(Bb, Tt, NH * hs)
        out = y @ p["attprojw"][l].T
        x = x + (rms_norm(out, p["ln1w"][l], m["eps"]) if post else out)
        h = x if post else rms_norm(x, p["ln2w"][l], m["eps"])
        if m.get("E"):
            out = moe_mlp(p, l, h, m, aux if aux is not None else [])
        else:
            gate, up = (h @ p["fcw"][l].T).split(F_, dim=-1)
            out = (F.silu(gate) * up) @ p["fcprojw"][l].T
        x = x + (rms_norm(out, p["ln2w"][l], m["eps"]) if post else out)
    x = rms_norm(x, p["lnfw"], m["eps"])
    return x @ (p["wte"] if m["tied"] else p["lmhead"]).T


def reference_run(params0, tokens, m, dtype=torch.float64, autocast_bf16=False, doc_token=None):
    def loss_of(p, inputs, targets):
        aux = []
        logits = llama_logits(p, inputs, m, doc_token, aux)
        ce = F.cross_entropy(logits[..., :m["V"]].float().to(dtype).reshape(-1, m["V"]),
                             targets.reshape(-1))
        return (ce, sum(aux).to(ce.dtype)) if m.get("E") else ce
    return train_reference(params0, tokens, CFG, MATRICES, loss_of, dtype, autocast_bf16)


RUNS = [0]  # a new output file per run


def run_trainer(exe, workdir, model, shard, precision, extra=(), m=MODEL, ranks=1):
    RUNS[0] += 1
    out = os.path.join(workdir, f"out_{precision}_{RUNS[0]}.bin")
    cmd = [exe, "--init-from", model, "--data", shard, "--batch", str(B), "--seq-len", str(T),
           "--steps", str(STEPS), "--lr", repr(CFG["lr"]), "--beta1", repr(BETA1),
           "--beta2", repr(BETA2), "--eps", repr(EPS), "--weight-decay", repr(CFG["wd"]),
           "--grad-clip", repr(CFG["grad_clip"]), "--warmup", str(CFG["warmup"]),
           "--lr-schedule", CFG["schedule"], "--final-lr-frac", repr(CFG["final_lr_frac"]),
           "--precision", precision, "--save-llmc", out, *extra]
    if ranks > 1:
        cmd = [os.environ.get("MPIEXEC", "mpiexec"), "-n", str(ranks)] + cmd
    env = dict(os.environ, OMP_NUM_THREADS="1")
    print("$ OMP_NUM_THREADS=1 " + " ".join(cmd), flush=True)
    proc = subprocess.run(cmd, cwd=workdir, env=env, capture_output=True, text=True, timeout=300)
    if proc.returncode == 2 and "--precision bf16 needs native bf16" in proc.stderr:
        return None, None
    if proc.returncode != 0:
        print(proc.stdout + proc.stderr)
        raise RuntimeError(f"trainer exited with status {proc.returncode}")
    rows = {}
    for line in proc.stdout.splitlines():
        mt = STEP_RE.match(line.strip())
        if mt:
            rows[int(mt.group(1))] = dict(loss=mt.group(3), lr=mt.group(4), norm=mt.group(5))
            aux = AUX_RE.search(line)
            if aux:
                rows[int(mt.group(1))]["aux"] = aux.group(1)
    if sorted(rows) != list(range(1, STEPS + 1)):
        print(proc.stdout + proc.stderr)
        raise RuntimeError(f"expected step lines 1..{STEPS}, parsed {sorted(rows)}")
    return [rows[k] for k in range(1, STEPS + 1)], read_model(out, m)


# Greedy decoding of the initial model: a 6-token prompt, 16 new tokens (22 <= maxT positions).
PROMPT, NEW_TOKENS = [3, 41, 17, 5, 60, 22], 16
LOGITS_RTOL = 1e-5  # of the largest logit; float32 rounding is ~1e-6 (generate_with_pytorch.py)


def reference_decode(params0, m):
    p = {k: torch.tensor(v, dtype=torch.float64) for k, v in params0.items()}
    seq, rows = list(PROMPT), []
    with torch.no_grad():
        for _ in range(NEW_TOKENS):
            z = llama_logits(p, torch.tensor([seq]), m)[0, -1, :m["V"]].numpy()
            rows.append(z)
            seq.append(int(np.argmax(z)))
    return seq[len(PROMPT):], np.array(rows)


def run_generate(exe, mpiexec, workdir, model, name, ranks, extra=(), tp=None, log=None):
    tokens, logits = (os.path.join(workdir, f"{name}.{x}") for x in ("tokens", "logits"))
    cmd = [exe, "--init-from", model, "--prompt-tokens", ",".join(map(str, PROMPT)),
           "--max-new-tokens", str(NEW_TOKENS), "--tokens-out", tokens, "--logits-out", logits,
           *extra]
    if ranks > 1:
        cmd = [mpiexec, "-n", str(ranks)] + cmd + ["--tp", str(tp or ranks)]
    print("$ " + " ".join(cmd), flush=True)
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=300,
                          env=dict(os.environ, OMP_NUM_THREADS="1"))
    if proc.returncode != 0:
        raise RuntimeError(f"generate exit status {proc.returncode}: {proc.stdout}{proc.stderr}")
    if log is not None:  # the banner and summary lines, for a caller that reads them
        log.append(proc.stderr)
    ids = [int(x) for x in open(tokens).read().strip().split(",")]
    rows = np.fromfile(logits, dtype="<f4").reshape(-1, MODEL["V"]).astype(np.float64)
    return ids[len(PROMPT):], rows


def main():
    torch.manual_seed(0)
    torch.set_num_threads(1)
    exe = os.environ.get("MPIFORMER_TRAIN", "")
    if not (exe and os.access(exe, os.X_OK)):
        print(f"reference: MPIFORMER_TRAIN={exe!r} is not an executable trainer\n"
              "reference: 0 passed, 1 failed")
        return 1
    workdir = tempfile.mkdtemp(prefix="mpiformer_llama_ref_")
    passed = failed = 0

    def check(ok, text):
        nonlocal passed, failed
        print(f"{text}  {'PASS' if ok else 'FAIL'}")
        passed, failed = passed + bool(ok), failed + (not ok)

    def check_steps(ref, trainer, label=""):
        """Each step's loss within LOSS_RTOL and its norm within NORM_RTOL (plus the print's ulp)."""
        for k, (r, t) in enumerate(zip(ref, trainer), start=1):
            rel = abs(float(t["loss"]) - r["loss"]) / abs(r["loss"])
            ok_norm = abs(float(t["norm"]) - r["norm"]) <= printed_ulp(t["norm"]) + \
                NORM_RTOL * r["norm"]
            check(rel <= LOSS_RTOL and ok_norm,
                  f"{label}{k:>4} {t['loss']:>15} {r['loss']:>13.6f} {rel:>9.1e} "
                  f"{t['norm']:>9} {r['norm']:>10.6f}")

    try:
        params0 = random_model(MODEL)
        model = os.path.join(workdir, "llama.bin")
        write_model(model, MODEL, params0)
        tokens = np.random.default_rng(7).integers(0, MODEL["V"], CFG["n_tokens"])
        shard = os.path.join(workdir, "tokens.bin")
        write_tokens(shard, tokens)
        ref_rows, ref_final = reference_run(params0, tokens, MODEL)
        tr_rows, tr_final = run_trainer(exe, workdir, model, shard, "fp32")
        print(f"{'step':>4} {'loss (trainer)':>15} {'loss (torch)':>13} {'rel diff':>9} "
              f"{'norm tr':>9} {'norm torch':>10}")
        check_steps(ref_rows, tr_rows)
        print(f"{'tensor':>10} {'param rel':>10} {'update rel':>10}")
        for name, _ in shapes(MODEL):
            init = params0[name].astype(np.float64)
            tr = tr_final[name].astype(np.float64)
            prel = np.linalg.norm(tr - ref_final[name]) / np.linalg.norm(ref_final[name])
            u_ref = ref_final[name] - init
            urel = np.linalg.norm((tr - init) - u_ref) / np.linalg.norm(u_ref)
            check(prel <= PARAM_RTOL and urel <= UPDATE_L2_RTOL,
                  f"{name:>10} {prel:>10.1e} {urel:>10.1e}")
        # Document masking: a fifth of the tokens start a document (several per row of 16).
        doc = 0
        doc_tokens = tokens.copy()
        doc_tokens[np.random.default_rng(11).random(len(tokens)) < 0.2] = doc
        doc_shard = os.path.join(workdir, "doc_tokens.bin")
        write_tokens(doc_shard, doc_tokens)
        ref_doc, ref_doc_final = reference_run(params0, doc_tokens, MODEL, doc_token=doc)
        tr_doc, tr_doc_final = run_trainer(exe, workdir, model, doc_shard, "fp32",
                                           ("--doc-mask", "--doc-token", str(doc)))
        check_steps(ref_doc, tr_doc, "[doc-mask] ")
        worst = max(np.linalg.norm(tr_doc_final[n].astype(np.float64) - ref_doc_final[n]) /
                    np.linalg.norm(ref_doc_final[n]) for n, _ in shapes(MODEL))
        check(worst <= PARAM_RTOL, f"[doc-mask] final tensors within {worst:.1e}")
        unmasked, _ = reference_run(params0, doc_tokens, MODEL)
        check(abs(unmasked[0]["loss"] - ref_doc[0]["loss"]) > 1e-4,
              f"[doc-mask] the mask matters: first loss {ref_doc[0]['loss']:.6f} masked, "
              f"{unmasked[0]['loss']:.6f} not")
        bf16_rows, _ = run_trainer(exe, workdir, model, shard, "bf16")
        if bf16_rows is None:
            print("[bf16] SKIPPED, no native bf16 products here")
        else:
            auto_rows, _ = reference_run(params0, tokens, MODEL, dtype=torch.float32,
                                         autocast_bf16=True)
            for k, (r, t) in enumerate(zip(auto_rows, bf16_rows), start=1):
                rel = abs(float(t["loss"]) - r["loss"]) / abs(r["loss"])
                check(rel <= BF16_LOSS_RTOL,
                      f"[bf16] {k:>4} {t['loss']:>15} autocast {r['loss']:>10.6f} {rel:>9.1e}")
            check(any(t["loss"] != f["loss"] for t, f in zip(bf16_rows, tr_rows)),
                  "[bf16] losses differ from the fp32 run's (bf16 products in use)")
        gen = os.environ.get("MPIFORMER_GENERATE", "")
        if not (gen and os.access(gen, os.X_OK)):
            raise RuntimeError(f"MPIFORMER_GENERATE={gen!r} is not an executable")
        ref_ids, ref_rows = reference_decode(params0, MODEL)
        mpiexec = os.environ.get("MPIEXEC", "mpiexec")
        # The KV cache (GQA: 2 query heads per cached kv head, rotated at its position), the whole
        # prefix recomputed per token, TP 2 (a kv head per rank) and TP 4 (kv heads replicated).
        for name, ranks, extra in (("cached", 1, ()), ("recomputed", 1, ("--no-kv-cache",)),
                                   ("cached tp 2", 2, ()), ("cached tp 4", 4, ())):
            ids, rows = run_generate(gen, mpiexec, workdir, model, name.replace(" ", "_"), ranks,
                                     extra)
            rel = max(np.abs(rows[i] - ref_rows[i]).max() / np.abs(ref_rows[i]).max()
                      for i in range(min(len(rows), len(ref_rows))))
            check(ids == ref_ids and rows.shape == ref_rows.shape and rel <= LOGITS_RTOL,
                  f"[generate {name}] {len(ids)} greedy ids equal torch's, logits within "
                  f"{rel:.1e} of the largest")
    except (RuntimeError, ValueError, OSError, subprocess.TimeoutExpired) as e:
        print(f"trainer run failed: {e}")
        failed += 1
    finally:
        shutil.rmtree(workdir, ignore_errors=True)
    print(f"reference: {passed} passed, {failed} failed")
    return 0 if failed == 0 else 1


if __name__ == "__main__":
    sys.exit(main())
