#!/usr/bin/python3
"""The PyTorch anchor of `make bench`: GPT-2 or Llama training steps in PyTorch on the same model,
batch and thread count as a mpiformer-bench row, timed the same way (median step after two warm-up
steps).

The model is the usual PyTorch GPT-2 (nn.Linear / nn.LayerNorm / nn.Embedding modules, causal
attention with a mask, tanh GELU, the LM head tied to the token embedding, the vocabulary padded
to 50304 as llm.c and mpiformer pad it); the step is zero_grad, forward, cross-entropy, backward,
gradient clipping to 1.0 and torch.optim.AdamW, as mpiformer's. --precision bf16 runs the
forward under torch.autocast("cpu", dtype=torch.bfloat16), PyTorch's mixed precision. PyTorch
chooses its own kernels; the result line names them. The Llama is the same in plain torch: RMSNorm,
rotary embeddings (half-split, as Hugging Face's LlamaAttention), grouped-query attention with its
K/V heads repeated over their groups, a SwiGLU MLP, no biases, the head tied as for GPT-2. Run it with Debian's /usr/bin/python3 and
the environment ci/bench_throughput.sh sets (glibc keeping freed memory, passive OpenMP waits).

Prints one line:
  torch | gpt2-124M | 4 x 64 | 2t | fp32 | 0.9512 s/step | 269.1 tok/s | kernels: ...
"""
import argparse
import ctypes
import math
import re
import statistics
import time

import torch
import torch.nn as nn
import torch.nn.functional as F

MODELS = {"gpt2-124M": dict(L=12, NH=12, C=768), "small": dict(L=4, NH=4, C=256),
          # GPT-2 124M's size as a Llama: 4 K/V heads, and an FFN of 2048 whose three matrices hold
          # what GPT-2's two of 3072 do.
          "llama-124M": dict(L=12, NH=12, C=768, KVH=4, F=2048)}
VOCAB, PADDED_VOCAB, MAX_T = 50257, 50304, 1024


class Block(nn.Module):
    def __init__(self, C, NH, T):
        super().__init__()
        self.NH = NH
        self.ln_1, self.ln_2 = nn.LayerNorm(C), nn.LayerNorm(C)
        self.c_attn, self.attn_proj = nn.Linear(C, 3 * C), nn.Linear(C, C)
        self.c_fc, self.mlp_proj = nn.Linear(C, 4 * C), nn.Linear(4 * C, C)
        self.register_buffer("mask", torch.ones(T, T, dtype=torch.bool).tril())

    def attention(self, x):
        B, T, C = x.shape
        q, k, v = (t.view(B, T, self.NH, C // self.NH).transpose(1, 2)
                   for t in self.c_attn(x).split(C, dim=2))
        att = (q @ k.transpose(-2, -1)) * (1.0 / math.sqrt(k.size(-1)))
        att = att.masked_fill(~self.mask[:T, :T], float("-inf")).softmax(dim=-1)
        return self.attn_proj((att @ v).transpose(1, 2).reshape(B, T, C))

    def forward(self, x):
        x = x + self.attention(self.ln_1(x))
        return x + self.mlp_proj(F.gelu(self.c_fc(self.ln_2(x)), approximate="tanh"))


class GPT(nn.Module):
    def __init__(self, L, NH, C, T):
        super().__init__()
        self.wte, self.wpe = nn.Embedding(PADDED_VOCAB, C), nn.Embedding(MAX_T, C)
        self.blocks = nn.ModuleList(Block(C, NH, T) for _ in range(L))
        self.ln_f = nn.LayerNorm(C)

    def forward(self, idx, targets):
        x = self.wte(idx) + self.wpe(torch.arange(idx.size(1), device=idx.device))
        for block in self.blocks:
            x = block(x)
        logits = F.linear(self.ln_f(x), self.wte.weight)  # the tied head
        return F.cross_entropy(logits.view(-1, logits.size(-1)), targets.view(-1))


class RMSNorm(nn.Module):
    def __init__(self, C, eps=1e-5):
        super().__init__()
        self.eps, self.weight = eps, nn.Parameter(torch.ones(C))

    def forward(self, x):
        return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + self.eps) * self.weight


def rotate(x, cos, sin):
    """Rotary embeddings on (B, heads, T, hs), pairs (i, i + hs/2)."""
    x1, x2 = x.chunk(2, dim=-1)
    return x * cos + torch.cat((-x2, x1), dim=-1) * sin


class LlamaBlock(nn.Module):
    def __init__(self, C, NH, KVH, F_dim, T, theta=500000.0):
        super().__init__()
        self.NH, self.KVH, self.hs = NH, KVH, C // NH
        self.ln_1, self.ln_2 = RMSNorm(C), RMSNorm(C)
        self.qkv = nn.Linear(C, (NH + 2 * KVH) * self.hs, bias=False)
        self.o = nn.Linear(C, C, bias=False)
        self.gate_up = nn.Linear(C, 2 * F_dim, bias=False)
        self.down = nn.Linear(F_dim, C, bias=False)
        inv = 1.0 / theta ** (torch.arange(0, self.hs, 2).float() / self.hs)
        angles = torch.outer(torch.arange(T).float(), inv)
        self.register_buffer("cos", torch.cat((angles, angles), -1).cos())
        self.register_buffer("sin", torch.cat((angles, angles), -1).sin())
        self.register_buffer("mask", torch.ones(T, T, dtype=torch.bool).tril())

    def attention(self, x):
        B, T, C = x.shape
        q, k, v = self.qkv(x).split([C, self.KVH * self.hs, self.KVH * self.hs], dim=2)
        q = q.view(B, T, self.NH, self.hs).transpose(1, 2)
        k, v = (t.view(B, T, self.KVH, self.hs).transpose(1, 2) for t in (k, v))
        q, k = rotate(q, self.cos[:T], self.sin[:T]), rotate(k, self.cos[:T], self.sin[:T])
        group = self.NH // self.KVH
        k, v = k.repeat_interleave(group, dim=1), v.repeat_interleave(group, dim=1)
        att = (q @ k.transpose(-2, -1)) * (1.0 / math.sqrt(self.hs))
        att = att.masked_fill(~self.mask[:T, :T], float("-inf")).softmax(dim=-1)
        return self.o((att @ v).transpose(1, 2).reshape(B, T, C))

    def forward(self, x):
        x = x + self.attention(self.ln_1(x))
        gate, up = self.gate_up(self.ln_2(x)).chunk(2, dim=-1)
        return x + self.down(F.silu(gate) * up)


class Llama(nn.Module):
    def __init__(self, L, NH, C, KVH, F, T):
        super().__init__()
        self.wte = nn.Embedding(PADDED_VOCAB, C)
        self.blocks = nn.ModuleList(LlamaBlock(C, NH, KVH, F, T) for _ in range(L))
        self.ln_f = RMSNorm(C)

    def forward(self, idx, targets):
        x = self.wte(idx)
        for block in self.blocks:
            x = block(x)
        logits = F.linear(self.ln_f(x), self.wte.weight)
        return F.cross_entropy(logits.view(-1, logits.size(-1)), targets.view(-1))


def loaded_library(pattern):
    """The path of a shared library this process has mapped, matching `pattern`."""
    for line in open("/proc/self/maps"):
        path = line.split()[-1]
        if re.search(pattern, path):
            return path
    return None


def kernels(precision):
    """What PyTorch runs here: its GEMM library for this precision and its vectorised kernels."""
    config = torch.__config__.show()
    capability = re.search(r"CPU capability usage: (\S+)", config)
    parts = [f"PyTorch {torch.__version__}",
             f"ATen kernels {capability.group(1) if capability else 'unknown'}"]
    if precision == "fp32":
        blas = loaded_library(r"libopenblas")
        if blas:
            lib = ctypes.CDLL(blas)
            lib.openblas_get_corename.restype = ctypes.c_char_p
            lib.openblas_get_config.restype = ctypes.c_char_p
            version = lib.openblas_get_config().decode().split()[1]
            parts.append(f"fp32 GEMM OpenBLAS {version} {lib.openblas_get_corename().decode()}")
        else:
            parts.append("fp32 GEMM " + re.search(r"BLAS_INFO=(\w+)", config).group(1))
    else:
        dnnl = loaded_library(r"libdnnl|libmkldnn")
        if dnnl and torch.backends.mkldnn.is_available():
            lib = ctypes.CDLL(dnnl)
            lib.dnnl_get_effective_cpu_isa.restype = ctypes.c_int
            isa = lib.dnnl_get_effective_cpu_isa()
            names = [(0x3e7, "avx512_core_amx"), (0xe7, "avx512_core_bf16"),
                     (0x67, "avx512_core_vnni"), (0x27, "avx512_core"), (0x7, "avx2")]
            name = next((n for bits, n in names if isa & bits == bits), hex(isa))
            parts.append(f"bf16 GEMM oneDNN (mkldnn, {dnnl.rsplit('/', 1)[-1]}) {name}")
        else:
            parts.append("bf16 GEMM: no oneDNN")
    return ", ".join(parts)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--model", choices=sorted(MODELS), default="gpt2-124M")
    ap.add_argument("--batch", type=int, default=4)
    ap.add_argument("--seq-len", type=int, default=64)
    ap.add_argument("--steps", type=int, default=12, help="steps, the first two untimed")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--precision", choices=("fp32", "bf16"), default="fp32")
    ap.add_argument("--device", choices=("cpu", "cuda"), default="cpu",
                    help="cuda: PyTorch eager on the GPU (fp32 without TF32; bf16 by autocast)")
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    torch.manual_seed(0)
    device = torch.device(args.device)
    if args.device == "cuda":
        # fp32 products in fp32, as mpiformer's cuBLAS fp32 GEMMs: no TF32.
        torch.backends.cuda.matmul.allow_tf32 = False
    m = MODELS[args.model]
    if "KVH" in m:
        model = Llama(m["L"], m["NH"], m["C"], m["KVH"], m["F"], args.seq_len).to(device)
    else:
        model = GPT(m["L"], m["NH"], m["C"], args.seq_len).to(device)
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-4, weight_decay=0.1)
    tokens = torch.randint(0, VOCAB, (args.batch, args.seq_len + 1), device=device)
    x, y = tokens[:, :-1].contiguous(), tokens[:, 1:].contiguous()
    times = []
    for _ in range(args.steps):
        start = time.perf_counter()
        optimizer.zero_grad(set_to_none=True)
        with torch.autocast(args.device, dtype=torch.bfloat16, enabled=args.precision == "bf16"):
            loss = model(x, y)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        optimizer.step()
        if args.device == "cuda":
            torch.cuda.synchronize()
        times.append(time.perf_counter() - start)
    s = statistics.median(times[2:])
    where = (f"{torch.cuda.get_device_name()}" if args.device == "cuda" else f"{args.threads}t")
    used = (f"PyTorch {torch.__version__} eager, CUDA {torch.version.cuda}"
            if args.device == "cuda" else kernels(args.precision))
    print(f"torch | {args.model} | {args.batch} x {args.seq_len} | {where} | "
          f"{args.precision} | {s:.4f} s/step | {args.batch * args.seq_len / s:.1f} tok/s | "
          f"kernels: {used}", flush=True)


if __name__ == "__main__":
    main()
