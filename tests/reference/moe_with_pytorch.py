#!/usr/bin/python3
"""External reference test: mixtures of experts against an independent PyTorch model.

The PyTorch model of compare_llama_with_pytorch.py with its MLP replaced by a dense loop over the
experts, each masked by the router's choice (moe_mlp there): p = softmax of the router's logits,
the k most probable experts (ties to the lower index), gates renormalised over them or not, and
the sequence-wise balance loss coef · E / (k · T²) · Σ_e (Σ_t p_te) · c_e of each row, averaged
over the rows, summed over the blocks and added to the objective. Three families, each a tiny
random model in mpiformer's Llama model file (docs/file-formats.md, slots 20..23):
- mixtral: 4 experts, top-2, renormalised; also TP 2 with sequence parallelism, recomputation,
  PP 2 under 1F1B and ZB-H1 with 2 microbatches; expert parallelism on EP 2 (also staged through
  host buffers), EP 4, EP 2 x TP 2 with SP, EP 2 x PP 2 under 1F1B and ZB-H1, EP 2 x DP 2 with
  ZeRO-1 and small overlapped buckets, EP 2 x CP 2 with recomputation (EP 2 twice: the same
  bits); a checkpoint saved on EP 2 resumed on EP 1, 2 and 4; and a router of zeros (also on EP 2,
  where one rank's experts receive no row) (every token's experts
  are 0 and 1 by the tie rule, experts 2 and 3 get no token, and the step's expert load line
  says each block's busiest expert took twice the mean);
- qwen3_moe: per-head q/k norms, a head size of 12, renormalised;
- olmoe: q/k norms over the whole projections, gates not renormalised, 1 kv head; also EP 2;
- qwen2_moe: Q, K, V biases, gates not renormalised, and a shared expert every token goes
  through, scaled by sigmoid(x . sgatew); on 1 rank, TP 2, DP 2, with recomputation and on EP 2 x
  TP 2 with SP.
Trained 5 steps by mpiformer-train on 1 rank, TP 2, PP 2, DP 2 and CP 2 (but qwen2_moe): every step's loss and
balance loss within 1e-5 (relative) of the float64 reference (mixtral's losses with bf16
products and activations, on 1 rank, EP 2 (also staged), recomputation, EP 2 x TP 2 with SP and
EP 2 x PP 2 under ZB-H1, and qwen2_moe's on 1 rank and with recomputation, within 1e-3 of
PyTorch's bf16 autocast); greedy decoding with the KV cache
gives the reference's ids (mixtral's also on EP 2 and EP 2 x TP 2); --save-hf writes the
family's names and loads back to the same losses (mixtral's also read on EP 2, and written on
EP 2 and read on 1 rank).

Run by ctest with MPIFORMER_TRAIN, MPIFORMER_GENERATE and MPIEXEC in the environment, with
Debian's /usr/bin/python3 (torch 1.13). The last line is `reference_moe: N passed, M failed`.
"""
import os
import shutil
import subprocess
import sys
import tempfile

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
try:
    import torch
    from compare_llama_with_pytorch import (MODEL, LOSS_RTOL, BF16_LOSS_RTOL, random_model,
                                            reference_run, run_trainer, write_model)
    from compare_with_pytorch import write_tokens
    from families_with_pytorch import Tally, check_decoding, hf_round_trip, programs
except ImportError as e:
    sys.exit(f"reference_moe: cannot import torch ({e}); run with /usr/bin/python3. "
             "0 passed, 1 failed")

BASE = dict(MODEL, factor=0.0, original=8192, E=4, k=2, renorm=True, aux_coef=0.05, F=24)
FAMILIES = [
    ("mixtral", dict(BASE, arch=7, tied=False), "MixtralForCausalLM",
     "model.layers.0.block_sparse_moe.experts.3.w2.weight"),
    ("qwen3_moe", dict(BASE, arch=8, hd=12, qk_norm=True, tied=True), "Qwen3MoeForCausalLM",
     "model.layers.1.mlp.experts.2.up_proj.weight"),
    ("olmoe", dict(BASE, arch=9, KVH=1, qk_norm="whole", renorm=False, tied=False),
     "OlmoeForCausalLM", "model.layers.0.mlp.gate.weight"),
    ("qwen2_moe", dict(BASE, arch=10, qkv_bias=True, Fs=20, renorm=False, tied=True),
     "Qwen2MoeForCausalLM", "model.layers.1.mlp.shared_expert_gate.weight"),
]
LAYOUTS = [("1 rank", 1, ()), ("tp 2", 2, ("--tp", "2")), ("pp 2", 2, ("--pp", "2")),
           ("dp 2", 2, ("--dp", "2")), ("cp 2", 2, ("--cp", "2"))]
EXTRA_LAYOUTS = {"mixtral": [
    ("tp 2 + sp", 2, ("--tp", "2", "--sequence-parallel")),
    ("recompute", 1, ("--recompute",)),
    ("pp 2 1f1b", 2, ("--pp", "2", "--microbatches", "2", "--schedule", "1f1b")),
    ("pp 2 zb-h1", 2, ("--pp", "2", "--microbatches", "2", "--schedule", "zb-h1")),
    # Expert parallelism: the experts split over EP ranks carved out of DP, tokens exchanged by
    # all-to-all (staged through host buffers in one, as without a CUDA-aware MPI).
    ("ep 2", 2, ("--ep", "2")),
    ("ep 2 staged", 2, ("--ep", "2", "--gpu-aware-mpi", "no")),
    ("ep 4", 4, ("--ep", "4")),
    ("ep 2 x tp 2 + sp", 4, ("--ep", "2", "--tp", "2", "--sequence-parallel")),
    ("ep 2 x pp 2 1f1b", 4, ("--ep", "2", "--pp", "2", "--microbatches", "2", "--schedule",
                             "1f1b")),
    ("ep 2 x pp 2 zb-h1", 4, ("--ep", "2", "--pp", "2", "--microbatches", "2", "--schedule",
                              "zb-h1")),
    ("ep 2 x dp 2 zero-1", 4, ("--ep", "2", "--zero", "1", "--overlap-grad-reduce",
                               "--dp-bucket-mb", "0.001")),
    ("ep 2 x cp 2 recompute", 4, ("--ep", "2", "--cp", "2", "--recompute")),
], "olmoe": [("ep 2", 2, ("--ep", "2"))],
   "qwen2_moe": [("recompute", 1, ("--recompute",)),
                 ("ep 2 x tp 2 + sp", 4, ("--ep", "2", "--tp", "2", "--sequence-parallel"))]}
# The families run in bf16 and their layouts beside 1 rank, each against PyTorch's bf16 autocast.
BF16_LAYOUTS = {"mixtral": [("ep 2", 2, ("--ep", "2")),
                            ("ep 2 staged", 2, ("--ep", "2", "--gpu-aware-mpi", "no")),
                            ("recompute", 1, ("--recompute",)),
                            ("ep 2 x tp 2 + sp", 4, ("--ep", "2", "--tp", "2",
                                                     "--sequence-parallel")),
                            ("ep 2 x pp 2 zb-h1", 4, ("--ep", "2", "--pp", "2", "--microbatches",
                                                      "2", "--schedule", "zb-h1"))],
                "qwen2_moe": [("recompute", 1, ("--recompute",))]}
NORM_CHECK = 5e-5  # the printed norm's 5 significant digits
AUX_CHECK = 2e-5   # the printed balance loss's 6 decimals, relative to ~0.1


def resume_across_ep(tally, exe, workdir, model, shard, m, ref, earlier):
    """Saves on EP 2 after step 2, resumes on EP 1, 2 and 4: steps 3..5 on EP 2 are the
    uninterrupted run's bit for bit (the printed values), on EP 1 and 4 within the reference's
    tolerance of torch's. The saving run itself gives the same bits as an earlier EP 2 run
    (`earlier`): the dispatch's order does not depend on timing."""
    ckpt = os.path.join(workdir, "ep_checkpoint")
    whole, _ = run_trainer(exe, workdir, model, shard, "fp32",
                           ("--ep", "2", "--save", ckpt, "--save-every", "2"), m, 2)
    tally.check(whole == earlier, "[mixtral ep 2 again] every step's loss, aux, lr and norm as "
                                  "printed equal the earlier EP 2 run's")
    for ep in (1, 2, 4):
        # run_trainer's command with --load in front; it wants steps 1..5, so parse here.
        cmd = [os.environ.get("MPIEXEC", "mpiexec"), "-n", str(ep), exe, "--load", ckpt,
               "--load-step", "2", "--data", shard, "--ep", str(ep)]
        proc = subprocess.run(cmd, cwd=workdir, env=dict(os.environ, OMP_NUM_THREADS="1"),
                              capture_output=True, text=True, timeout=300)
        steps = {int(ln.split("/")[0].split()[1]): ln.split(" | ")[1:5:3]
                 for ln in proc.stdout.splitlines() if ln.startswith("step ")}
        if proc.returncode != 0 or sorted(steps) != [3, 4, 5]:
            tally.fail(f"[mixtral resume on ep {ep}] exit {proc.returncode}, steps {sorted(steps)}"
                       f"\n{proc.stdout}{proc.stderr}")
            continue
        losses = [float(steps[k][0].split()[1]) for k in (3, 4, 5)]
        if ep == 2:
            same = all(steps[k][0] == f"loss {whole[k - 1]['loss']}" for k in (3, 4, 5))
            tally.check(same, f"[mixtral resume on ep 2] steps 3..5 are the uninterrupted run's: "
                              f"{losses}")
        else:
            rel = max(abs(x - r["loss"]) / r["loss"] for x, r in zip(losses, ref[2:]))
            tally.check(rel <= LOSS_RTOL, f"[mixtral saved on ep 2, resumed on ep {ep}] steps "
                                          f"3..5 within {rel:.1e} of torch's")


def main():
    torch.manual_seed(0)
    torch.set_num_threads(1)
    found = programs("reference_moe")
    if found is None:
        return 1
    exe, gen, mpiexec = found
    workdir = tempfile.mkdtemp(prefix="mpiformer_moe_ref_")
    tally = Tally("reference_moe")
    check = tally.check

    def compare(name, layout, ref, rows):
        loss = max(abs(float(t["loss"]) - r["loss"]) / r["loss"] for r, t in zip(ref, rows))
        norm = max(abs(float(t["norm"]) - r["norm"]) / r["norm"] for r, t in zip(ref, rows))
        aux = max(abs(float(t["aux"]) - r["aux"]) / r["aux"] for r, t in zip(ref, rows))
        check(loss <= LOSS_RTOL and norm <= NORM_CHECK and aux <= AUX_CHECK,
              f"[{name} {layout}] 5 losses within {loss:.1e} of torch's, balance losses within "
              f"{aux:.1e}, norms within {norm:.1e} (first aux {rows[0]['aux']} vs "
              f"{ref[0]['aux']:.6f})")

    tokens = np.random.default_rng(11).integers(0, BASE["V"], 2000)
    shard = os.path.join(workdir, "tokens.bin")
    write_tokens(shard, tokens)
    for index, (name, m, architecture, hf_tensor) in enumerate(FAMILIES):
        try:
            params0 = random_model(m, seed=200 + index)
            model = os.path.join(workdir, f"{name}.bin")
            write_model(model, m, params0)
            ref, _ = reference_run(params0, tokens, m)
            seen = {}
            # qwen2_moe's shared expert is per row: PP and CP are the other families' tests.
            layouts = LAYOUTS[:2] + LAYOUTS[3:4] if name == "qwen2_moe" else LAYOUTS
            for layout, ranks, extra in layouts + EXTRA_LAYOUTS.get(name, []):
                rows, _ = run_trainer(exe, workdir, model, shard, "fp32", extra, m, ranks)
                compare(name, layout, ref, rows)
                seen[layout] = rows
            if name == "mixtral":  # saved on EP 2 at step 2, resumed on EP 1, 2 and 4
                resume_across_ep(tally, exe, workdir, model, shard, m, ref, seen["ep 2"])
            if name == "mixtral":  # a router of zeros: experts 0 and 1 for every token at step 1
                zeros = dict(params0, routerw=np.zeros_like(params0["routerw"]))
                tied = os.path.join(workdir, f"{name}_tied.bin")
                write_model(tied, m, zeros)
                ref_zero, _ = reference_run(zeros, tokens, m)
                # On EP 2 rank 1's experts (2 and 3) receive no row at step 1.
                for layout, ranks, extra in LAYOUTS[:2] + [("ep 2", 2, ("--ep", "2"))]:
                    rows, _ = run_trainer(exe, workdir, tied, shard, "fp32", extra, m, ranks)
                    compare(name, f"router of zeros, {layout}", ref_zero, rows)
                # Every token's choices at step 1 are experts 0 and 1: each takes twice the mean.
                out = subprocess.run([exe, "--init-from", tied, "--data", shard, "--steps", "1",
                                      "--batch", "4", "--seq-len", "16"], capture_output=True,
                                     text=True, timeout=120).stdout
                load = [ln for ln in out.splitlines() if ln.startswith("experts step 1 |")]
                check(load and load[0].endswith("by block: 2.00 2.00"),
                      f"[{name} router of zeros] the expert load line: {load}")
            if name in BF16_LAYOUTS:  # bf16 products against PyTorch's bf16 autocast
                rows, _ = run_trainer(exe, workdir, model, shard, "bf16", (), m)
                if rows is None:
                    print("[bf16] SKIPPED, no native bf16 products here")
                else:
                    auto, _ = reference_run(params0, tokens, m, dtype=torch.float32,
                                            autocast_bf16=True)
                    # The experts' inputs, [gate | up] and outputs kept in bf16 (a shared
                    # expert's [gate | up] and output too): through EP's dispatch in bf16 (also
                    # staged), TP's partial outputs, recomputation and zero-bubble's deferred W
                    # (SwiGLU's output formed again).
                    runs = [("1 rank", rows)]
                    for layout, ranks, extra in BF16_LAYOUTS[name]:
                        got, _ = run_trainer(exe, workdir, model, shard, "bf16", extra, m, ranks)
                        runs.append((layout, got))
                    for layout, got in runs:
                        rel = max(abs(float(t["loss"]) - r["loss"]) / r["loss"]
                                  for r, t in zip(auto, got))
                        check(rel <= BF16_LOSS_RTOL, f"[{name} bf16, {layout}] 5 losses within "
                                                     f"{rel:.1e} of torch's autocast")
            check_decoding(tally, gen, mpiexec, workdir, model, name, m, params0, (1, 2),
                           [(1, 2), (2, 2)] if name == "mixtral" else [])
            again, back = hf_round_trip(tally, exe, workdir, model, shard, tokens, name, m,
                                        architecture, hf_tensor)
            compare(name, "init-from its HF directory", again, back)
            if name == "mixtral":  # the HF directory read on EP 2; one written on EP 2
                rows, _ = run_trainer(exe, workdir, os.path.join(workdir, f"{name}_hf"), shard,
                                      "fp32", ("--ep", "2"), m, 2)
                compare(name, "init-from its HF directory on ep 2", again, rows)
                hf = os.path.join(workdir, f"{name}_hf_ep2")
                _, trained = run_trainer(exe, workdir, model, shard, "fp32",
                                         ("--ep", "2", "--save-hf", hf), m, 2)
                rows, _ = run_trainer(exe, workdir, hf, shard, "fp32", (), m)
                compare(name, "saved to HF on ep 2, read on 1 rank",
                        reference_run(trained, tokens, m)[0], rows)
        except (RuntimeError, ValueError, OSError, subprocess.TimeoutExpired) as e:
            tally.fail(f"[{name}] run failed: {e}")
    shutil.rmtree(workdir, ignore_errors=True)
    return tally.finish()


if __name__ == "__main__":
    sys.exit(main())
