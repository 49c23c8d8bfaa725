"""PyTorch's causal attention, forward and backward, timed as tests/perf/attention_rate.cpp times
mpiformer's fused kernel (make bench: ci/bench_attention.sh; on a GPU: ci/gpu/run.sh).

On CUDA it is torch.nn.functional.scaled_dot_product_attention with is_causal (FlashAttention's
kernel where the dtype allows it, bf16; fp32 takes PyTorch's memory-efficient one). On the CPU,
where this machine's PyTorch (1.13) has no fused attention, it is attention as PyTorch users
write it: the (T x T) scores, a causal mask, softmax, and the product with V.

    python3 ci/bench_attention_torch.py [--device cpu|cuda] [--batch B] [--heads NH]
        [--kv-heads KVH] [--head-size hs] [--precision fp32|bf16] [--reps N] T...
GFLOP/s as causal attention needs them: forward 4·B·NH·hs·T²/2, backward twice that.
"""
import argparse
import math
import statistics
import time

import torch


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--device", default="cpu")
    p.add_argument("--batch", type=int, default=1)
    p.add_argument("--heads", type=int, default=12)
    p.add_argument("--kv-heads", type=int, default=4)
    p.add_argument("--head-size", type=int, default=64)
    p.add_argument("--precision", default="fp32")
    p.add_argument("--reps", type=int, default=3)
    p.add_argument("lengths", type=int, nargs="*", default=[1024, 4096])
    a = p.parse_args()
    dev = torch.device(a.device)
    dtype = torch.bfloat16 if a.precision == "bf16" else torch.float32
    B, NH, KVH, hs = a.batch, a.heads, a.kv_heads, a.head_size
    fused = dev.type == "cuda" and hasattr(torch.nn.functional, "scaled_dot_product_attention")

    def sync():
        if dev.type == "cuda":
            torch.cuda.synchronize()

    def attend(q, k, v):
        if fused:
            return torch.nn.functional.scaled_dot_product_attention(
                q, k, v, is_causal=True, enable_gqa=KVH != NH)
        g = NH // KVH
        k, v = k.repeat_interleave(g, dim=1), v.repeat_interleave(g, dim=1)
        T = q.shape[2]
        s = (q @ k.transpose(-2, -1)) / math.sqrt(hs)
        mask = torch.ones(T, T, dtype=torch.bool, device=dev).triu(1)
        return torch.softmax(s.masked_fill(mask, float("-inf")), dim=-1) @ v

    def median_seconds(f):
        f()
        sync()
        times = []
        for _ in range(a.reps):
            t0 = time.perf_counter()
            f()
            sync()
            times.append(time.perf_counter() - t0)
        return statistics.median(times)

    kind = "scaled_dot_product_attention" if fused else "matmul, mask, softmax, matmul"
    print(f"torch attention | B {B} | {NH} heads, {KVH} kv heads, head size {hs} | {a.precision} | "
          f"{torch.get_num_threads()} threads | {dev.type}: {kind} | PyTorch {torch.__version__}")
    for T in a.lengths:
        q = torch.randn(B, NH, T, hs, device=dev, dtype=dtype, requires_grad=True)
        k = torch.randn(B, KVH, T, hs, device=dev, dtype=dtype, requires_grad=True)
        v = torch.randn(B, KVH, T, hs, device=dev, dtype=dtype, requires_grad=True)
        dy = torch.randn(B, NH, T, hs, device=dev, dtype=dtype)
        flops = 4.0 * B * NH * hs * T * T / 2
        try:
            with torch.no_grad():
                fwd = median_seconds(lambda: attend(q, k, v))
            out = attend(q, k, v)
            bwd = median_seconds(lambda: torch.autograd.grad(out, (q, k, v), dy, retain_graph=True))
            print(f"{T:<7d} fwd {flops / fwd / 1e9:10.1f} bwd {2 * flops / bwd / 1e9:10.1f} "
                  f"GFLOP/s (causal count); {fwd * 1e3:.1f} + {bwd * 1e3:.1f} ms")
        except RuntimeError as e:  # out of memory: the T x T scores
            print(f"{T:<7d} does not run: {str(e).splitlines()[0][:100]}")
        del q, k, v, dy


if __name__ == "__main__":
    main()
