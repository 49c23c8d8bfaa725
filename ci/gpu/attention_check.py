"""Each attention path of mpiformer against PyTorch on the same inputs.

tests/perf/attention_dump (a build's tests/attention_dump) writes, for one causal grouped-query
shape, the inputs and every path's output, logsumexp and input gradients; this script computes the
same in float64 (plain PyTorch: softmax(Q·Kᵀ/√hs + causal mask)·V and its autograd) and, where a
GPU and PyTorch's scaled_dot_product_attention are there, with SDPA in the run's precision, and
prints one row per path and quantity: the largest error over the largest reference value.

    python3 ci/gpu/attention_check.py BUILD_DIR [--seq-len T ...] [--precision fp32|bf16]
                                      [--library-path DIRS]

--library-path sets LD_LIBRARY_PATH for the build's program only (ci/gpu/run.sh: the unpacked
MPICH and BLAS, which PyTorch's own libraries must not see).

Exits 1 when a path is off by more than its precision allows (fp32: 1e-5 of the largest value
against float64; bf16: 2e-2, the inputs and P and dS rounded to bf16 as the build's products
round them), 2 on a usage error. T defaults to 1000 and 1500: not multiples of any tile.
"""

import argparse
import os
import subprocess
import sys
import tempfile

import numpy as np
import torch

TOLERANCE = {"fp32": 1e-5, "bf16": 2e-2}


def load(directory, name, shape):
    return torch.from_numpy(np.fromfile(os.path.join(directory, name), dtype=np.float32)).reshape(shape)


def split_qkv(qkv, B, T, NH, KVH, hs):
    q = qkv[..., : NH * hs].reshape(B, T, NH, hs).transpose(1, 2)
    k = qkv[..., NH * hs : (NH + KVH) * hs].reshape(B, T, KVH, hs).transpose(1, 2)
    v = qkv[..., (NH + KVH) * hs :].reshape(B, T, KVH, hs).transpose(1, 2)
    return q, k, v


def join_qkv(dq, dk, dv, B, T):
    return torch.cat([g.transpose(1, 2).reshape(B, T, -1) for g in (dq, dk, dv)], dim=-1)


def reference(qkv, dout, B, T, NH, KVH, hs, bf16):
    """Float64 attention on the inputs (rounded to bf16 first when the run was bf16)."""
    x = qkv.to(torch.bfloat16).double() if bf16 else qkv.double()
    go = dout.to(torch.bfloat16).double() if bf16 else dout.double()
    q, k, v = (t.detach().requires_grad_(True) for t in split_qkv(x, B, T, NH, KVH, hs))
    g = NH // KVH
    kk, vv = k.repeat_interleave(g, dim=1), v.repeat_interleave(g, dim=1)
    s = q @ kk.transpose(-1, -2) / hs**0.5
    mask = torch.ones(T, T, dtype=torch.bool).triu(1)
    s = s.masked_fill(mask, float("-inf"))
    lse = torch.logsumexp(s, dim=-1)
    out = torch.softmax(s, dim=-1) @ vv
    out2 = out.transpose(1, 2).reshape(B, T, NH * hs)
    out2.backward(go)
    return out2.detach(), lse.detach(), join_qkv(q.grad, k.grad, v.grad, B, T)


def sdpa(qkv, dout, B, T, NH, KVH, hs, bf16):
    """PyTorch's scaled_dot_product_attention on the GPU in the run's precision, or None."""
    f = getattr(torch.nn.functional, "scaled_dot_product_attention", None)
    if f is None or not torch.cuda.is_available():
        return None
    dtype = torch.bfloat16 if bf16 else torch.float32
    x = qkv.to("cuda", dtype)
    q, k, v = (t.detach().contiguous().requires_grad_(True) for t in split_qkv(x, B, T, NH, KVH, hs))
    g = NH // KVH
    out = f(q, k.repeat_interleave(g, dim=1), v.repeat_interleave(g, dim=1), is_causal=True)
    out2 = out.transpose(1, 2).reshape(B, T, NH * hs)
    out2.backward(dout.to("cuda", dtype))
    grads = join_qkv(q.grad, k.grad, v.grad, B, T)
    return out2.detach().double().cpu(), grads.detach().double().cpu()


def error(got, want):
    scale = want.abs().max().item() or 1.0
    return (got.double() - want).abs().max().item() / scale


def check(build, T, precision, rows, library_path):
    bf16 = precision == "bf16"
    with tempfile.TemporaryDirectory() as d:
        cmd = [os.path.join(build, "tests", "attention_dump"), d, "--seq-len", str(T), "--precision", precision]
        env = dict(os.environ)
        if library_path:
            env["LD_LIBRARY_PATH"] = library_path
        run = subprocess.run(cmd, capture_output=True, text=True, env=env)
        if run.returncode != 0:
            print(f"error: {' '.join(cmd)} failed: {run.stderr.strip()}", file=sys.stderr)
            return False
        B, T, NH, KVH, hs = (int(v) for v in open(os.path.join(d, "shape.txt")).read().split()[:5])
        W = (NH + 2 * KVH) * hs
        qkv = load(d, "qkv.f32", (B, T, W))
        dout = load(d, "dout.f32", (B, T, NH * hs))
        ref_out, ref_lse, ref_dqkv = reference(qkv, dout, B, T, NH, KVH, hs, bf16)
        theirs = sdpa(qkv, dout, B, T, NH, KVH, hs, bf16)
        ok = True
        for path in open(os.path.join(d, "paths.txt")).read().split():
            out = load(d, f"{path}.out.f32", (B, T, NH * hs))
            lse = load(d, f"{path}.lse.f32", (B, NH, T))
            dqkv = load(d, f"{path}.dqkv.f32", (B, T, W))
            parts = {"O": (out, ref_out, 0), "lse": (lse, ref_lse, None)}
            for name, lo, hi in (("dQ", 0, NH * hs), ("dK", NH * hs, (NH + KVH) * hs), ("dV", (NH + KVH) * hs, W)):
                parts[name] = (dqkv[..., lo:hi], ref_dqkv[..., lo:hi], (lo, hi))
            for name, (got, want, where) in parts.items():
                e = error(got, want)
                vs_sdpa = "-"
                if theirs is not None and where is not None:
                    other = theirs[0] if name == "O" else theirs[1][..., where[0] : where[1]]
                    vs_sdpa = f"{error(got, other):.2e}"
                passed = e <= TOLERANCE[precision]
                ok = ok and passed
                rows.append(f"{precision:5} {T:6} {path:8} {name:4} {e:12.2e} {vs_sdpa:>12} {'ok' if passed else 'FAIL'}")
        return ok


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("build")
    p.add_argument("--seq-len", type=int, nargs="+", default=[1000, 1500])
    p.add_argument("--precision", choices=["fp32", "bf16"], nargs="+", default=["fp32", "bf16"])
    p.add_argument("--library-path", default="")
    a = p.parse_args()
    if not os.path.exists(os.path.join(a.build, "tests", "attention_dump")):
        print(f"error: {a.build}/tests/attention_dump not found: build the tests first", file=sys.stderr)
        sys.exit(2)
    rows = []
    ok = True
    for precision in a.precision:
        for T in a.seq_len:
            ok = check(a.build, T, precision, rows, a.library_path) and ok
    where = "SDPA on " + torch.cuda.get_device_name(0) if torch.cuda.is_available() else "no GPU: SDPA not run"
    print(f"attention paths against float64 PyTorch and {where} (largest error / largest value)")
    print(f"{'prec':5} {'T':>6} {'path':8} {'of':4} {'vs float64':>12} {'vs SDPA':>12}")
    print("\n".join(rows))
    print(f"attention_check: {'every path within its tolerance' if ok else 'a path is off'}")
    sys.exit(0 if ok else 1)


if __name__ == "__main__":
    main()
