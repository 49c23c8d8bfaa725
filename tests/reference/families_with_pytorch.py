#!/usr/bin/python3
"""External reference test: the families of Llama blocks against an independent PyTorch model.

For each family this trainer adds to Llama, a tiny random model in mpiformer's Llama model file
(docs/file-formats.md: the family in header slot 8, the sliding window in slot 18), trained 5
steps by mpiformer-train on one rank, TP 2, PP 2, DP 2 and CP 2 and by the PyTorch model of
compare_llama_with_pytorch.py, extended by the family's features:
- qwen2: biases on Q, K and V (Qwen2Attention's q_proj/k_proj/v_proj with bias=True), one kv
  head, so TP 2 replicates it;
- mistral: a sliding window of 5 positions (MistralConfig.sliding_window: a query sees itself and
  the 4 positions before it), rows of 16;
- phi3: a sliding window of 7 and multi-head attention; its Hugging Face files fuse
  qkv_proj and gate_up_proj, which --save-hf must write and --init-from read back;
- qwen3: per-head RMSNorms of Q and K before the rotation (q_norm, k_norm) and a head size of 12
  apart from C / NH = 8 (head_dim), one kv head;
- olmo2: norms after the sublayers (x + norm(attn(x)), h + norm(mlp(h))) and RMSNorms over the
  whole Q and K projections, one kv head: under TP 2 each rank holds half of Q's values and the
  replicated kv head, so both norms' sums cross the ranks; also TP 2 with sequence parallelism,
  full recomputation, and generation on TP 2.
- deepseek_v3 (check_deepseek): multi-head latent attention with YaRN, every block dense, as a
  Hugging Face directory against hf_models.deepseek_logits (written from transformers'
  DeepseekV3Attention), on 1 rank, TP 2 (with SP), PP 2, DP 2, CP 2 and both recomputations:
  losses and the tensors after the last step; also a plain q_proj, rotary pairs in halves and no
  rope scaling on 1 rank and TP 2; a checkpoint resumed; greedy decoding with the KV cache on
  TP 1 and 2; what is not built refused.
- deepseek_v3 with DeepSeekMoE blocks (check_deepseek_moe): sigmoid routing with a nonzero
  e_score_correction_bias, group-limited, a shared expert, on 1 rank, TP 2 and EP 2; the bias
  read and written unchanged; each DeepSeekMoE config key it does not compute refused by name;
  --moe-bias-update-rate balancing a router made unbalanced, the bias the same on every layout.
- deepseek_v3 with its first block dense and two DeepSeekMoE blocks (check_deepseek_mixed,
  first_k_dense_replace 1): 1 rank, TP 2, PP 2 (a stage of both kinds; the dense block alone on
  a stage), EP 2, DP 2 + ZeRO-1 and both recomputations; the directory written back; a resume;
  greedy decoding on 1 rank and EP 2; with DeepSeek-V3's multi-token prediction modules
  (check_deepseek_mtp_modules): losses and mtp against the reference trained with them on 1
  rank, TP 2 + SP, PP 2, CP 2 and DP 2 + ZeRO-2, under bf16 against autocast, written back, the
  bias update of the module's valid rows, two modules, and --mtp 0 or 1 passing over the rest.
- deepseek_v3 under --optimizer muon (check_deepseek_muon): the mixed stack against a PyTorch
  Muon on the matrices Hugging Face stores (the latent attention's five, the dense and each
  expert's), on 1 rank, TP 2, EP 2 and DP 2 + ZeRO-1.
- deepseek_v3 under --precision bf16 (check_deepseek_bf16) against PyTorch's bf16 autocast: the
  latent attention on 1 rank and TP 2, the mixed stack on 1 rank (the same bits under selective
  recomputation, and under ZB-H1 as under 1F1B on PP 2).
Every step's loss within 1e-5 (relative) of the float64 reference on every layout; greedy
decoding with the KV cache gives the reference's ids; the model saved with --save-hf has the
family's config.json and tensor names and loads back to the same losses.

Run by ctest with MPIFORMER_TRAIN, MPIFORMER_GENERATE and MPIEXEC in the environment, with
Debian's /usr/bin/python3 (torch 1.13). The last line is `reference_families: N passed, M failed`.
"""
import json
import math
import os
import re
import shutil
import struct
import subprocess
import sys
import tempfile

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
try:
    import torch
    from compare_llama_with_pytorch import (MODEL, LOSS_RTOL, random_model, reference_decode,
                                            reference_run, run_generate, run_trainer, write_model)
    from compare_llama_with_pytorch import CFG, LOGITS_RTOL, NEW_TOKENS, PARAM_RTOL, PROMPT
    from compare_with_pytorch import (B, T, STEPS, BETA1, BETA2, BF16_LOSS_RTOL, EPS, MTP_RE, STEP_RE,
                                      batches, lr_at, train_reference, write_tokens)
    import muon_with_pytorch as muon_ref
    import hf_models
except ImportError as e:
    sys.exit(f"reference_families: cannot import torch ({e}); run with /usr/bin/python3. "
             "0 passed, 1 failed")

# No rope scaling (the families' own configs have none), so the original context is the default a
# config.json without rope_scaling reads back.
BASE = dict(MODEL, factor=0.0, original=8192)
FAMILIES = [
    ("qwen2", dict(BASE, arch=2, KVH=1, qkv_bias=True, tied=True),
     "Qwen2ForCausalLM", "model.layers.0.self_attn.q_proj.bias"),
    ("mistral", dict(BASE, arch=3, KVH=2, window=5, tied=False),
     "MistralForCausalLM", "model.layers.0.self_attn.k_proj.weight"),
    ("phi3", dict(BASE, arch=4, KVH=4, window=7, tied=False),
     "Phi3ForCausalLM", "model.layers.0.self_attn.qkv_proj.weight"),
    ("qwen3", dict(BASE, arch=5, KVH=1, hd=12, qk_norm=True, tied=True),
     "Qwen3ForCausalLM", "model.layers.0.self_attn.k_norm.weight"),
    ("olmo2", dict(BASE, arch=6, KVH=1, qk_norm="whole", post_norm=True, tied=False),
     "Olmo2ForCausalLM", "model.layers.0.post_feedforward_layernorm.weight"),
]
# The layouts only a family's own code paths need (OLMo-2's post-norm blocks under sequence
# parallelism and recomputation), and the TP sizes its generation runs on.
EXTRA_LAYOUTS = {"olmo2": [("tp 2 + sp", 2, ("--tp", "2", "--sequence-parallel")),
                           ("recompute", 1, ("--recompute",)),
                 ("recompute selective", 1, ("--recompute", "selective"))]}
GENERATE_RANKS = {"olmo2": (1, 2)}
# The printed norm has 5 significant digits (half a unit: 2.5e-5 relative at 2.1); a gradient
# counted twice (a replicated kv head's bias rows) moves it by 1e-2.
NORM_CHECK = 5e-5
# A mixture of experts under bf16: a token whose best experts' scores lie within bf16's rounding
# of each other may choose another expert in the trainer than in autocast, and one token of the
# 64 a step moves the mean loss by up to ~1e-3 relative (autocast itself moves 1.4e-3 from the
# float64 run at the first step of this model). Five steps may carry a few such choices.
BF16_MOE_RTOL = 5e-3
LAYOUTS = [("1 rank", 1, ()), ("tp 2", 2, ("--tp", "2")), ("pp 2", 2, ("--pp", "2")),
           ("dp 2", 2, ("--dp", "2")), ("cp 2", 2, ("--cp", "2"))]


def safetensors_names(path):
    """The tensor names in a .safetensors file's header."""
    with open(path, "rb") as f:
        n = struct.unpack("<Q", f.read(8))[0]
        return set(json.loads(f.read(n))) - {"__metadata__"}


def cache_values(stderr):
    """The KV cache's values a token a layer on a rank, from mpiformer-generate's banner."""
    mt = re.search(r"\| kv cache (\d+) values \((\d+) B\) a token a layer", stderr)
    if not mt or int(mt.group(2)) != 4 * int(mt.group(1)):
        raise ValueError(f"no cache size (values, 4 bytes each) in the banner: {stderr}")
    return int(mt.group(1))


def check_decoding(tally, gen, mpiexec, workdir, model, name, m, params0, tp_sizes, ep_sizes=()):
    """Greedy decoding with the KV cache on each TP size, and each (TP, EP) pair of ep_sizes,
    gives the reference's ids."""
    ref_ids, _ = reference_decode(params0, m)
    for tp, ep in [(tp, 1) for tp in tp_sizes] + list(ep_sizes):
        layout = f"tp {tp}" + (f" x ep {ep}" if ep > 1 else "")
        extra = ("--ep", str(ep)) if ep > 1 else ()
        log = []
        ids, _ = run_generate(gen, mpiexec, workdir, model, f"{name}_tp{tp}_ep{ep}", tp * ep,
                              extra, tp, log)
        tally.check(ids == ref_ids, f"[{name} generate {layout}] {len(ids)} greedy ids with the "
                                    f"KV cache equal torch's")
        # K and V of the rank's kv heads a token a layer (a kv head replicated when KVH < TP).
        kv_heads = m["KVH"] // tp if m["KVH"] % tp == 0 else 1
        want = 2 * kv_heads * m.get("hd", m["C"] // m["NH"])
        got = cache_values(log[0])
        tally.check(got == want, f"[{name} generate {layout}] the KV cache holds {got} values a "
                                 f"token a layer on a rank, 2 x {kv_heads} kv heads x head size "
                                 f"= {want}")


def hf_round_trip(tally, exe, workdir, model, shard, tokens, name, m, architecture, hf_tensor):
    """The trained model through a Hugging Face directory: its config.json's architectures and a
    tensor name checked, then 5 more steps from it. Returns (the reference's rows from the saved
    parameters, the trainer's from the directory)."""
    hf = os.path.join(workdir, f"{name}_hf")
    _, trained = run_trainer(exe, workdir, model, shard, "fp32", ("--save-hf", hf), m)
    config = json.load(open(os.path.join(hf, "config.json")))
    names = safetensors_names(os.path.join(hf, "model.safetensors"))
    tally.check(config.get("architectures") == [architecture] and hf_tensor in names,
                f"[{name} save-hf] config.json {config.get('architectures')}, "
                f"{hf_tensor} among its {len(names)} tensors")
    again, _ = reference_run(trained, tokens, m)
    back, _ = run_trainer(exe, workdir, hf, shard, "fp32", (), m)
    return again, back


class Tally:
    """The PASS/FAIL lines of a reference test and its last line, `NAME: N passed, M failed`."""

    def __init__(self, name):
        self.name, self.passed, self.failed = name, 0, 0

    def check(self, ok, text):
        print(f"{text}  {'PASS' if ok else 'FAIL'}")
        self.passed, self.failed = self.passed + bool(ok), self.failed + (not ok)

    def fail(self, text):
        print(text)
        self.failed += 1

    def finish(self):
        print(f"{self.name}: {self.passed} passed, {self.failed} failed")
        return 0 if self.failed == 0 else 1


def programs(name):
    """mpiformer-train and mpiformer-generate from the environment, and mpiexec; None (after the
    test's failing last line) when they are not executables."""
    exe, gen = os.environ.get("MPIFORMER_TRAIN", ""), os.environ.get("MPIFORMER_GENERATE", "")
    if not (exe and os.access(exe, os.X_OK) and gen and os.access(gen, os.X_OK)):
        print(f"{name}: MPIFORMER_TRAIN={exe!r} / MPIFORMER_GENERATE={gen!r} are not executables\n"
              f"{name}: 0 passed, 1 failed")
        return None
    return exe, gen, os.environ.get("MPIEXEC", "mpiexec")


def launch(exe, workdir, args, ranks=1, timeout=120, echo=False):
    """`exe` with `args` on `ranks` ranks (through mpiexec past one), one thread each: the finished
    process."""
    cmd = [exe, *args]
    if ranks > 1:
        cmd = [os.environ.get("MPIEXEC", "mpiexec"), "-n", str(ranks)] + cmd
    if echo:
        print("$ OMP_NUM_THREADS=1 " + " ".join(cmd), flush=True)
    return subprocess.run(cmd, cwd=workdir, env=dict(os.environ, OMP_NUM_THREADS="1"),
                          capture_output=True, text=True, timeout=timeout)


def launch_ok(exe, workdir, args, ranks=1):
    """launch, which must end with status 0: its standard output."""
    proc = launch(exe, workdir, args, ranks)
    if proc.returncode != 0:
        raise RuntimeError(f"{exe} {' '.join(args)} on {ranks} rank(s): status {proc.returncode}\n"
                           f"{proc.stdout}{proc.stderr}")
    return proc.stdout


def run_from_hf(exe, workdir, model, out, shard, extra=(), ranks=1, steps=STEPS, lr=CFG["lr"],
                wd=CFG["wd"]):
    """mpiformer-train from a Hugging Face directory with run_trainer's settings, the trained
    model saved with --save-hf `out`: (each step's loss and norm, out's tensors)."""
    args = ["--init-from", model, "--data", shard, "--batch", str(B), "--seq-len", str(T),
            "--steps", str(steps), "--lr", repr(lr), "--beta1", repr(BETA1),
            "--beta2", repr(BETA2), "--eps", repr(EPS), "--weight-decay", repr(wd),
            "--grad-clip", repr(CFG["grad_clip"]), "--warmup", str(CFG["warmup"]),
            "--lr-schedule", CFG["schedule"], "--final-lr-frac", repr(CFG["final_lr_frac"]),
            "--save-hf", out, *extra]
    proc = launch(exe, workdir, args, ranks, timeout=300, echo=True)
    rows = {int(mt.group(1)): dict(loss=float(mt.group(3)), norm=float(mt.group(5)))
            for mt in map(STEP_RE.match, proc.stdout.splitlines()) if mt}
    for line in proc.stdout.splitlines():  # a model with multi-token prediction: its MTP loss
        mt, extra = STEP_RE.match(line), MTP_RE.search(line)
        if mt and extra:
            rows[int(mt.group(1))]["mtp"] = float(extra.group(1))
    if proc.returncode != 0 or sorted(rows) != list(range(1, steps + 1)):
        print(proc.stdout + proc.stderr)
        raise RuntimeError(f"trainer exit status {proc.returncode}, steps {sorted(rows)}")
    return [rows[k] for k in sorted(rows)], hf_models.read_dir(out)


def refused(exe, workdir, model, shard, extra, key, ranks=1):
    """The trainer stops with status 2 and one `error:` line naming `key`."""
    proc = launch(exe, workdir, ["--init-from", model, "--data", shard, "--batch", str(B),
                                 "--seq-len", str(T), "--steps", "1", *extra], ranks)
    errors = [ln for ln in (proc.stdout + proc.stderr).splitlines() if ln.startswith("error:")]
    return proc.returncode == 2 and len(errors) == 1 and key in errors[0], errors


# deepseek_v3's layouts: TP splits the heads of q_b, kv_b and o_proj; under SP the replicated
# down projections read the gathered rows; PP (ZB-H1 defers W past other microbatches' B), DP;
# CP's ring passes K and V (V padded) as for any family, the rotary tables at the chunks'
# positions; full recomputation keeps the latent attention's activations for W in the W inputs; selective
# recomputation forms ln1 again in W.
DEEPSEEK_LAYOUTS = [("1 rank", 1, ()), ("tp 2", 2, ("--tp", "2")),
                    ("tp 2 + sp", 2, ("--tp", "2", "--sequence-parallel")),
                    ("pp 2 1f1b", 2, ("--pp", "2", "--microbatches", "2", "--schedule", "1f1b")),
                    ("pp 2 zb-h1", 2, ("--pp", "2", "--microbatches", "2", "--schedule", "zb-h1")),
                    ("dp 2", 2, ("--dp", "2")), ("cp 2", 2, ("--cp", "2")),
                    ("recompute", 1, ("--recompute",)),
                    ("recompute selective", 1, ("--recompute", "selective"))]


def deepseek_reference(m, seed, model, tokens):
    """A random deepseek_v3 of shape m written as a Hugging Face directory at `model`, and the
    torch reference trained on it: (params0, matrices, loss_of, ref rows, ref final tensors)."""
    params0 = hf_models.deepseek_random(m, seed=seed)
    hf_models.write_deepseek(model, m, params0)
    matrices = {k for k, v in params0.items() if v.ndim == 2}

    def loss_of(p, inputs, targets):
        logits = hf_models.deepseek_logits(p, inputs, m)
        return torch.nn.functional.cross_entropy(logits.reshape(-1, m["V"]), targets.reshape(-1))

    ref, ref_final = train_reference(params0, tokens, CFG, matrices, loss_of, torch.float64, False)
    return params0, matrices, loss_of, ref, ref_final


def against_reference(ref, ref_final, rows, final):
    """The largest relative error of a run's losses against the reference's, and of its tensors
    after the last step: (loss error, (tensor error, its name))."""
    loss = max(abs(t["loss"] - r["loss"]) / r["loss"] for r, t in zip(ref, rows))
    worst = max((np.linalg.norm(final[k] - ref_final[k]) / np.linalg.norm(ref_final[k]), k)
                for k in ref_final)
    return loss, worst


def check_resumed_at_step_2(tally, exe, workdir, model, shard, label):
    """A run from the directory `model` saving every 2 steps, and one resumed from its step 2:
    steps 3..5 as the uninterrupted run printed them."""
    ckpt = model + "_ckpt"
    whole, _ = run_from_hf(exe, workdir, model, model + "_saving", shard,
                           ("--save", ckpt, "--save-every", "2"))
    proc = launch(exe, workdir, ["--load", ckpt, "--load-step", "2", "--data", shard])
    resumed = {int(mt.group(1)): float(mt.group(3))
               for mt in map(STEP_RE.match, proc.stdout.splitlines()) if mt}
    tally.check(proc.returncode == 0 and resumed == {k: whole[k - 1]["loss"] for k in (3, 4, 5)},
                f"[{label} resumed at step 2] steps 3..5 {resumed} are the uninterrupted run's"
                f"{'' if proc.returncode == 0 else ': ' + proc.stdout + proc.stderr}")


def written_again(exe, workdir, model, shard, params0):
    """The directory `model` read and written again by a step that changes nothing (lr 0, no
    decay): (the tensors written, their config.json, the largest difference from params0)."""
    out = model + "_again"
    run_from_hf(exe, workdir, model, out, shard, steps=1, lr=0.0, wd=0.0)
    again = hf_models.read_dir(out)
    config = json.load(open(os.path.join(out, "config.json")))
    return again, config, max(float(np.abs(again[k] - v).max()) for k, v in params0.items())


def check_deepseek(tally, exe, gen, workdir, shard, tokens):
    """deepseek_v3's multi-head latent attention (hf_models.DEEPSEEK, a Hugging Face directory)
    against hf_models.deepseek_logits trained by the same steps: every loss within LOSS_RTOL and
    every tensor after the last step within PARAM_RTOL, on each of DEEPSEEK_LAYOUTS; a checkpoint
    resumed; the directory read and written again unchanged; greedy decoding with the KV cache on
    TP 1 and 2; a negative first_k_dense_replace and the keys not computed refused by name."""
    for form, m, layouts in (("", hf_models.DEEPSEEK, DEEPSEEK_LAYOUTS),
                             (" q_proj, halves, no yarn", hf_models.DEEPSEEK_PLAIN,
                              DEEPSEEK_LAYOUTS[:2])):
        model = os.path.join(workdir, "deepseek_v3" + form.replace(" ", "_").replace(",", ""))
        _, _, _, ref, ref_final = deepseek_reference(m, 300, model, tokens)
        for index, (layout, ranks, extra) in enumerate(layouts):
            out = model + f"_out{index}"
            rows, final = run_from_hf(exe, workdir, model, out, shard, extra, ranks)
            loss, worst = against_reference(ref, ref_final, rows, final)
            norm = max(abs(t["norm"] - r["norm"]) / r["norm"] for r, t in zip(ref, rows))
            tally.check(loss <= LOSS_RTOL and norm <= NORM_CHECK and worst[0] <= PARAM_RTOL,
                        f"[deepseek_v3{form} {layout}] {STEPS} losses within {loss:.1e} of "
                        f"torch's, norms within {norm:.1e}, every tensor after the last step "
                        f"within {worst[0]:.1e} ({worst[1]}; first loss {rows[0]['loss']} vs "
                        f"{ref[0]['loss']:.6f})")
    m = hf_models.DEEPSEEK
    params0 = hf_models.deepseek_random(m, seed=300)
    model = os.path.join(workdir, "deepseek_v3")
    check_resumed_at_step_2(tally, exe, workdir, model, shard, "deepseek_v3")
    again, config, worst = written_again(exe, workdir, model, shard, params0)
    tally.check(again.keys() == params0.keys() and worst <= 1e-7 and
                config["model_type"] == "deepseek_v3" and config["kv_lora_rank"] == m["kvr"] and
                config["rope_scaling"]["type"] == "yarn",
                f"[deepseek_v3 save-hf] {len(again)} tensors as read, within {worst:.1e}; "
                f"config.json {config['architectures']}, kv_lora_rank {config['kv_lora_rank']}")
    # Not built yet, or not computed: one error line naming what.
    bad = [("first_k_dense_replace", "first_k_dense_replace", dict(first_k_dense_replace=-1)),
           ("rope_scaling.factor", "rope_scaling", dict(rope_scaling=dict(
               hf_models.deepseek_config(m)["rope_scaling"], factor=2.0))),
           ("attention_bias", "attention_bias", dict(attention_bias=True))]
    for name, key, change in bad:
        d = os.path.join(workdir, f"deepseek_v3_bad_{name}")
        shutil.copytree(model, d)
        config = dict(hf_models.deepseek_config(m), **change)
        json.dump(config, open(os.path.join(d, "config.json"), "w"))
        ok, errors = refused(exe, workdir, d, shard, (), key)
        tally.check(ok, f"[deepseek_v3 {name}] refused: {errors}")
    # Greedy decoding with the latent KV cache ([c_kv | k_rope] a token) on TP 1 and 2.
    p = {k: torch.tensor(v, dtype=torch.float64) for k, v in params0.items()}
    seq, ref_rows = list(PROMPT), []
    with torch.no_grad():
        for _ in range(NEW_TOKENS):
            z = hf_models.deepseek_logits(p, torch.tensor([seq]), m)[0, -1, :m["V"]].numpy()
            ref_rows.append(z)
            seq.append(int(np.argmax(z)))
    for tp in (1, 2):
        log = []
        ids, rows = run_generate(gen, os.environ.get("MPIEXEC", "mpiexec"), workdir, model,
                                 f"deepseek_v3_generate_tp{tp}", tp, log=log)
        rel = max(np.abs(rows[i] - ref_rows[i]).max() / np.abs(ref_rows[i]).max()
                  for i in range(min(len(rows), len(ref_rows))))
        tally.check(ids == seq[len(PROMPT):] and len(rows) == NEW_TOKENS and rel <= LOGITS_RTOL,
                    f"[deepseek_v3 generate tp {tp}] {len(ids)} greedy ids with the latent KV "
                    f"cache equal torch's, logits within {rel:.1e} of the largest")
        # The latent and the rotary key a token a layer, the whole latent on every TP rank.
        got = cache_values(log[0])
        tally.check(got == m["kvr"] + m["dr"],
                    f"[deepseek_v3 generate tp {tp}] the KV cache holds {got} values a token a "
                    f"layer on a rank: kv_lora_rank {m['kvr']} + qk_rope_head_dim {m['dr']}")


def experts_load(stdout, step):
    """The busiest expert's load over the mean, by block, of `experts step N` lines."""
    for line in stdout.splitlines():
        if line.startswith(f"experts step {step} |"):
            return [float(x) for x in line.split(":")[1].split()]
    raise RuntimeError(f"no experts line for step {step}:\n{stdout}")


def check_bias_update(tally, exe, workdir, shard, m, params0):
    """--moe-bias-update-rate: a router made unbalanced on purpose (a bias of 0.5 on the first
    expert of each group, so nearly every token takes it) gets balanced over 25 steps with the
    update on (lr 0: the bias alone moves) and stays unbalanced with it off; the bias after them
    is the same bits on 1 rank, EP 2, TP 2 and DP 2 with ZeRO-1 (every rank routes with one bias:
    another bias on one rank would change its choices and the losses)."""
    model = os.path.join(workdir, "deepseek_v3_moe_unbalanced")
    params = dict(params0)
    for l in range(m["L"]):
        name = f"model.layers.{l}.mlp.gate.e_score_correction_bias"
        params[name] = params[name] + np.float32(0.5) * (np.arange(m["moe"]["E"]) % 4 == 0)
    hf_models.write_deepseek(model, m, params)
    steps, loads, biases, losses = 25, {}, {}, {}
    rate = ("--moe-bias-update-rate", "0.03")
    for layout, ranks, extra in (("off", 1, ()), ("1 rank", 1, rate),
                                 ("ep 2", 2, rate + ("--ep", "2")),
                                 ("tp 2", 2, rate + ("--tp", "2")),
                                 ("dp 2 + zero-1", 2, rate + ("--dp", "2", "--zero", "1"))):
        out = model + "_" + layout.replace(" ", "")
        stdout = launch_ok(exe, workdir, ["--init-from", model, "--data", shard, "--batch", str(B),
                                          "--seq-len", str(T), "--steps", str(steps), "--lr", "0",
                                          "--save-hf", out, *extra], ranks)
        loads[layout] = (experts_load(stdout, 1), experts_load(stdout, steps))
        losses[layout] = [float(mt.group(3)) for mt in map(STEP_RE.match, stdout.splitlines())
                          if mt]
        saved = hf_models.read_dir(out)
        biases[layout] = np.concatenate([saved[k] for k in sorted(saved)
                                         if k.endswith("e_score_correction_bias")])
    first, last = loads["1 rank"]
    # 128 choices a step over 8 experts: a balanced router's busiest expert is ~1.5x the mean.
    tally.check(min(first) > 2.5 and max(last) < 2.0 and min(loads["off"][1]) > 2.5,
                f"[deepseek_v3 moe --moe-bias-update-rate 0.03] busiest expert / mean by block "
                f"{first} at step 1, {last} at step {steps}; without the update {loads['off'][1]}")
    same = all(np.array_equal(biases[k], biases["1 rank"]) and
               max(abs(a - b) / b for a, b in zip(losses[k], losses["1 rank"])) <= LOSS_RTOL
               for k in ("ep 2", "tp 2", "dp 2 + zero-1"))
    moved = float(np.abs(biases["1 rank"] - biases["off"]).max())
    tally.check(same and moved > 0.1,
                f"[deepseek_v3 moe bias update] the bias after {steps} steps (moved up to "
                f"{moved:.2f}) the same bits on 1 rank, ep 2, tp 2 and dp 2 + zero-1, the losses "
                f"alike")


def muon_reference(params0, tokens, loss_of, matrices):
    """train_reference's step with Muon (muon_with_pytorch.py: momentum 0.95, Nesterov, five
    Newton-Schulz steps, Moonlight's 0.2·sqrt(max(rows, cols)) and decoupled decay) on every
    matrix Hugging Face stores inside the blocks (model.layers.*, each expert's its own, the
    router mlp.gate.weight excepted) and AdamW on the rest, in float64: (rows, final tensors)."""
    p = {k: torch.tensor(v, dtype=torch.float64, requires_grad=True) for k, v in params0.items()}
    muon = [k for k, v in params0.items() if v.ndim == 2 and k.startswith("model.layers.") and
            not k.endswith("mlp.gate.weight")]
    rest = [k for k in p if k not in muon]
    opt = torch.optim.AdamW(
        [dict(params=[p[k] for k in rest if k in matrices], weight_decay=CFG["wd"]),
         dict(params=[p[k] for k in rest if k not in matrices], weight_decay=0.0)],
        lr=CFG["lr"], betas=(BETA1, BETA2), eps=EPS)
    momentum = {k: torch.zeros_like(p[k]) for k in muon}
    rows = []
    for s, (inputs, targets) in enumerate(batches(tokens, STEPS)):
        opt.zero_grad(set_to_none=False)
        for t in p.values():
            if t.grad is not None:
                t.grad.zero_()
        loss, aux = loss_of(p, inputs, targets), None
        if isinstance(loss, tuple):  # (the next-token loss, the MTP loss): their sum trained
            loss, aux = loss
            (loss + aux).backward()
        else:
            loss.backward()
        norm = torch.nn.utils.clip_grad_norm_(list(p.values()), CFG["grad_clip"])
        lr = lr_at(s, CFG)
        for g in opt.param_groups:
            g["lr"] = lr
        opt.step()
        with torch.no_grad():
            for k in muon:
                w, g, buf = p[k], p[k].grad, momentum[k]
                buf.mul_(muon_ref.MU).add_(g)
                x = muon_ref.newton_schulz(g + muon_ref.MU * buf)
                w.mul_(1.0 - lr * CFG["wd"])
                w.add_(x, alpha=-lr * 0.2 * math.sqrt(max(w.shape)))
        rows.append(dict(loss=loss.item(), norm=norm.item()))
        if aux is not None:
            rows[-1]["aux"] = aux.item()
    return rows, {k: v.detach().numpy() for k, v in p.items()}


def check_deepseek_muon(tally, exe, workdir, shard, tokens):
    """--optimizer muon on deepseek_v3 (hf_models.DEEPSEEK_MIXED: latent attention, the first
    block dense, two DeepSeekMoE blocks with a shared expert) against muon_reference: q_a_proj,
    q_b_proj, kv_a_proj_with_mqa (one matrix), kv_b_proj, o_proj, the dense and each expert's
    gate, up and down projections Muon's, the router AdamW's. Losses and tensors on 1 rank, TP 2
    (the down projections whole on each rank, q_b and kv_b by heads), EP 2 and DP 2 + ZeRO-1
    (the matrices dealt out over the DP ranks)."""
    m = hf_models.DEEPSEEK_MIXED
    model = os.path.join(workdir, "deepseek_v3_muon")
    params0, matrices, loss_of, _, _ = deepseek_reference(m, 340, model, tokens)
    ref, ref_final = muon_reference(params0, tokens, loss_of, matrices)
    for layout, ranks, extra in (("1 rank", 1, ()), ("tp 2", 2, ("--tp", "2")),
                                 ("ep 2", 2, ("--ep", "2")),
                                 ("dp 2 + zero-1", 2, ("--dp", "2", "--zero", "1"))):
        rows, final = run_from_hf(exe, workdir, model, model + "_" + layout.replace(" ", ""),
                                  shard, ("--optimizer", "muon", *extra), ranks)
        loss, worst = against_reference(ref, ref_final, rows, final)
        tally.check(loss <= LOSS_RTOL and worst[0] <= PARAM_RTOL,
                    f"[deepseek_v3 muon {layout}] {STEPS} losses within {loss:.1e} of torch's "
                    f"Muon, every tensor after the last step within {worst[0]:.1e} ({worst[1]})")


def check_deepseek_bf16(tally, exe, workdir, shard, tokens):
    """deepseek_v3 under --precision bf16 against the same model under PyTorch's bf16 autocast
    (the router in fp32 in both): the latent attention (hf_models.DEEPSEEK, every block dense) on
    1 rank and TP 2, each loss within BF16_LOSS_RTOL; the first block dense and two DeepSeekMoE
    blocks (hf_models.DEEPSEEK_MIXED) on 1 rank within BF16_MOE_RTOL, the same bits under
    selective recomputation, and on PP 2 under ZB-H1 as under 1F1B. Skipped, and said so, where the CPU has no bf16 products."""
    dense = os.path.join(workdir, "deepseek_v3_bf16")
    params0, matrices, loss_of, _, _ = deepseek_reference(hf_models.DEEPSEEK, 330, dense, tokens)
    probe = launch(exe, workdir, ["--init-from", dense, "--data", shard, "--batch", str(B),
                                  "--seq-len", str(T), "--steps", "1", "--precision", "bf16"])
    if probe.returncode == 2 and "--precision bf16 needs native bf16" in probe.stderr:
        print(f"[deepseek_v3 bf16] SKIPPED, no native bf16 here: {probe.stderr.strip()}")
        return
    fp32, _ = run_from_hf(exe, workdir, dense, dense + "_fp32", shard)
    auto, _ = train_reference(params0, tokens, CFG, matrices, loss_of, torch.float32, True)
    for layout, ranks, extra in (("1 rank", 1, ()), ("tp 2", 2, ("--tp", "2"))):
        rows, _ = run_from_hf(exe, workdir, dense, dense + "_" + layout.replace(" ", ""), shard,
                              ("--precision", "bf16", *extra), ranks)
        rel = max(abs(t["loss"] - r["loss"]) / r["loss"] for r, t in zip(auto, rows))
        tally.check(rel <= BF16_LOSS_RTOL and rows != fp32,
                    f"[deepseek_v3 bf16 {layout}] {STEPS} losses within {rel:.1e} of autocast's "
                    f"(first {rows[0]['loss']} vs {auto[0]['loss']:.6f}), not the fp32 run's")
    m = hf_models.DEEPSEEK_MIXED
    mixed = os.path.join(workdir, "deepseek_v3_mixed_bf16")
    params0, matrices, loss_of, _, _ = deepseek_reference(m, 331, mixed, tokens)
    auto, _ = train_reference(params0, tokens, CFG, matrices, loss_of, torch.float32, True)
    runs = {}
    two = ("--pp", "2", "--microbatches", "2", "--schedule")
    for layout, ranks, extra in (("1 rank", 1, ()),
                                 ("recompute selective", 1, ("--recompute", "selective")),
                                 ("pp 2 1f1b", 2, (*two, "1f1b")), ("pp 2 zb-h1", 2, (*two, "zb-h1"))):
        runs[layout], _ = run_from_hf(exe, workdir, mixed, mixed + "_" + layout.replace(" ", ""),
                                      shard, ("--precision", "bf16", *extra), ranks)
    rows = runs["1 rank"]
    rel = max(abs(t["loss"] - r["loss"]) / r["loss"] for r, t in zip(auto, rows))
    # Selective recomputation forms ln1 again in W; ZB-H1 defers W past other microbatches' B
    # (another block's values in the bf16 staging by then): each the same bits as its twin.
    same = rows == runs["recompute selective"] and runs["pp 2 1f1b"] == runs["pp 2 zb-h1"]
    tally.check(rel <= BF16_MOE_RTOL and same,
                f"[deepseek_v3 first block dense bf16] {STEPS} losses within {rel:.1e} of "
                f"autocast's; selective recomputation as 1 rank and ZB-H1 as 1F1B on PP 2 "
                f"{'bit for bit' if same else 'differ: ' + str(runs)}")


def check_deepseek_moe(tally, exe, gen, workdir, shard, tokens):
    """deepseek_v3 with every block DeepSeekMoE (hf_models.DEEPSEEK_MOE) against
    hf_models.deepseek_logits with its DeepseekV3MoE: losses and the tensors after the last step on
    1 rank, TP 2 and EP 2; the routing bias (a buffer) unchanged by training and written back;
    greedy decoding on 1 rank and EP 2; the keys of routing it does not compute refused by
    name."""
    m = hf_models.DEEPSEEK_MOE
    model = os.path.join(workdir, "deepseek_v3_moe")
    params0, matrices, loss_of, ref, ref_final = deepseek_reference(m, 310, model, tokens)
    # The bias changes the choices: without it the first loss differs.
    unbiased = {k: (0 * v if k.endswith("e_score_correction_bias") else v)
                for k, v in params0.items()}
    other, _ = train_reference(unbiased, tokens, dict(CFG), matrices, loss_of, torch.float64,
                               False)
    tally.check(abs(other[0]["loss"] - ref[0]["loss"]) > 1e-5,
                f"[deepseek_v3 moe] the routing bias matters: first loss {ref[0]['loss']:.6f} "
                f"with it, {other[0]['loss']:.6f} without")
    ungrouped = hf_models.deepseek_logits(
        {k: torch.tensor(v, dtype=torch.float64) for k, v in params0.items()},
        torch.tensor(tokens[:T].reshape(1, T)), dict(m, moe=dict(m["moe"], groups=1)))
    grouped = hf_models.deepseek_logits(
        {k: torch.tensor(v, dtype=torch.float64) for k, v in params0.items()},
        torch.tensor(tokens[:T].reshape(1, T)), m)
    tally.check(float((grouped - ungrouped).abs().max()) > 1e-3,
                "[deepseek_v3 moe] the group limit matters: the logits differ without it")
    for index, (layout, ranks, extra) in enumerate((("1 rank", 1, ()), ("tp 2", 2, ("--tp", "2")),
                                                    ("ep 2", 2, ("--ep", "2")))):
        out = model + f"_out{index}"
        rows, final = run_from_hf(exe, workdir, model, out, shard, extra, ranks)
        loss, worst = against_reference(ref, ref_final, rows, final)
        bias = max(float(np.abs(final[k] - v).max()) for k, v in params0.items()
                   if k.endswith("e_score_correction_bias"))
        tally.check(loss <= LOSS_RTOL and worst[0] <= PARAM_RTOL and bias == 0.0,
                    f"[deepseek_v3 moe {layout}] {STEPS} losses within {loss:.1e} of torch's, "
                    f"every tensor after the last step within {worst[0]:.1e} ({worst[1]}), the "
                    f"routing bias as read (within {bias:.1e}; first loss {rows[0]['loss']} vs "
                    f"{ref[0]['loss']:.6f})")
    p = {k: torch.tensor(v, dtype=torch.float64) for k, v in params0.items()}
    seq = list(PROMPT)
    with torch.no_grad():
        for _ in range(NEW_TOKENS):
            seq.append(int(np.argmax(hf_models.deepseek_logits(
                p, torch.tensor([seq]), m)[0, -1, :m["V"]].numpy())))
    for ep in (1, 2):
        ids, _ = run_generate(gen, os.environ.get("MPIEXEC", "mpiexec"), workdir, model,
                              f"deepseek_v3_moe_generate_ep{ep}", ep,
                              ("--ep", str(ep)) if ep > 1 else (), 1)
        tally.check(ids == seq[len(PROMPT):],
                    f"[deepseek_v3 moe generate ep {ep}] {len(ids)} greedy ids equal torch's")
    # A checkpoint after step 2 (the bias among its tensors) resumed.
    check_resumed_at_step_2(tally, exe, workdir, model, shard, "deepseek_v3 moe")
    check_bias_update(tally, exe, workdir, shard, m, params0)
    # DeepSeek-V2's gate by DeepseekV3Config's keys (softmax, greedy, not renormalised), 1 rank.
    g = hf_models.DEEPSEEK_MOE_GREEDY
    greedy = os.path.join(workdir, "deepseek_v3_moe_greedy")
    hf_models.write_deepseek(greedy, g, params0)

    def greedy_loss(p, inputs, targets):
        logits = hf_models.deepseek_logits(p, inputs, g)
        return torch.nn.functional.cross_entropy(logits.reshape(-1, g["V"]), targets.reshape(-1))

    ref, ref_final = train_reference(params0, tokens, CFG, matrices, greedy_loss, torch.float64,
                                     False)
    rows, final = run_from_hf(exe, workdir, greedy, greedy + "_out", shard)
    loss, (worst, _) = against_reference(ref, ref_final, rows, final)
    tally.check(loss <= LOSS_RTOL and worst <= PARAM_RTOL,
                f"[deepseek_v3 moe softmax, greedy, not renormalised 1 rank] {STEPS} losses "
                f"within {loss:.1e} of torch's, every tensor within {worst:.1e}")
    bad = [("topk_method", dict(topk_method="group_limited_greedy")),
           ("scoring_func", dict(scoring_func="sqrtsoftplus")),
           ("n_group", dict(n_group=3)),
           ("topk_group", dict(topk_group=3)),
           ("num_experts_per_tok", dict(num_experts_per_tok=5)),
           ("first_k_dense_replace", dict(first_k_dense_replace=m["L"] + 1))]
    ok, errors = refused(exe, workdir, model, shard, ("--moe-aux-coef", "0.001"), "--moe-aux-coef")
    tally.check(ok, f"[deepseek_v3 moe --moe-aux-coef over sigmoid scores] refused: {errors}")
    for key, change in bad:
        d = os.path.join(workdir, f"deepseek_v3_moe_bad_{key}")
        shutil.copytree(model, d)
        json.dump(dict(hf_models.deepseek_moe_config(m), **change),
                  open(os.path.join(d, "config.json"), "w"))
        ok, errors = refused(exe, workdir, d, shard, (), key)
        tally.check(ok, f"[deepseek_v3 moe {key}] refused: {errors}")


# The mixed stack's layouts: under PP a stage of both kinds of block (2 + 1), and the dense block
# alone on the first stage (--pp-layout 1,2); the dense MLP's gradients summed over DP, the
# experts' over expert DP under EP.
MIXED_LAYOUTS = [("1 rank", 1, ()), ("tp 2", 2, ("--tp", "2")),
                 ("pp 2 1f1b", 2, ("--pp", "2", "--microbatches", "2", "--schedule", "1f1b")),
                 ("pp 2 zb-h1 layout 1,2", 2, ("--pp", "2", "--microbatches", "2", "--schedule",
                                               "zb-h1", "--pp-layout", "1,2")),
                 ("ep 2", 2, ("--ep", "2")), ("dp 2 + zero-1", 2, ("--dp", "2", "--zero", "1")),
                 ("recompute", 1, ("--recompute",)),
                 ("recompute selective", 1, ("--recompute", "selective"))]


# The multi-token prediction module's layouts (the serial run's figures: docs/testing.md).
MTP_LAYOUTS = [("1 rank", 1, ()), ("tp 2 + sp", 2, ("--tp", "2", "--sequence-parallel")),
               ("pp 2 zb-h1", 2, ("--pp", "2", "--microbatches", "2", "--schedule", "zb-h1")),
               ("cp 2", 2, ("--cp", "2")), ("dp 2 + zero 2", 2, ("--dp", "2", "--zero", "2"))]


def check_deepseek_mixed(tally, exe, gen, workdir, shard, tokens):
    """deepseek_v3 with its first block dense and the rest DeepSeekMoE (hf_models.DEEPSEEK_MIXED,
    first_k_dense_replace 1) against hf_models.deepseek_logits: losses and the tensors after the
    last step on MIXED_LAYOUTS; the Hugging Face names of both kinds of block written and read
    back unchanged; a checkpoint resumed; greedy decoding on 1 rank and EP 2."""
    m = hf_models.DEEPSEEK_MIXED
    model = os.path.join(workdir, "deepseek_v3_mixed")
    params0, _, _, ref, ref_final = deepseek_reference(m, 320, model, tokens)
    first_loss = None
    for index, (layout, ranks, extra) in enumerate(MIXED_LAYOUTS):
        out = model + f"_out{index}"
        rows, final = run_from_hf(exe, workdir, model, out, shard, extra, ranks)
        first_loss = rows[0]["loss"] if first_loss is None else first_loss
        loss, worst = against_reference(ref, ref_final, rows, final)
        tally.check(loss <= LOSS_RTOL and worst[0] <= PARAM_RTOL and final.keys() == params0.keys(),
                    f"[deepseek_v3 first block dense {layout}] {STEPS} losses within {loss:.1e} "
                    f"of torch's, every tensor after the last step within {worst[0]:.1e} "
                    f"({worst[1]}; first loss {rows[0]['loss']} vs {ref[0]['loss']:.6f})")
    # Read and written again by a step that changes nothing (lr 0, no decay): the same names
    # (mlp.gate_proj on block 0, mlp.experts.N, mlp.shared_experts, mlp.gate on blocks 1, 2).
    again, config, worst = written_again(exe, workdir, model, shard, params0)
    tally.check(again.keys() == params0.keys() and worst <= 1e-7 and
                config["first_k_dense_replace"] == 1 and config["intermediate_size"] == m["F"] and
                config["moe_intermediate_size"] == m["moe"]["F"],
                f"[deepseek_v3 first block dense save-hf] {len(again)} tensors as read, within "
                f"{worst:.1e}; config.json first_k_dense_replace "
                f"{config['first_k_dense_replace']}, intermediate_size "
                f"{config['intermediate_size']}, moe_intermediate_size "
                f"{config['moe_intermediate_size']}")
    check_deepseek_mtp_modules(tally, exe, workdir, shard, tokens, m, params0, first_loss)
    check_resumed_at_step_2(tally, exe, workdir, model, shard, "deepseek_v3 first block dense")
    p = {k: torch.tensor(v, dtype=torch.float64) for k, v in params0.items()}
    seq = list(PROMPT)
    with torch.no_grad():
        for _ in range(NEW_TOKENS):
            seq.append(int(np.argmax(hf_models.deepseek_logits(
                p, torch.tensor([seq]), m)[0, -1, :m["V"]].numpy())))
    for layout, ranks, extra, tp in (("1 rank", 1, (), 1), ("ep 2", 2, ("--ep", "2"), 1),
                                     ("tp 2", 2, (), 2)):
        ids, _ = run_generate(gen, os.environ.get("MPIEXEC", "mpiexec"), workdir, model,
                              f"deepseek_v3_mixed_generate_{ranks}{tp}", ranks, extra, tp)
        tally.check(ids == seq[len(PROMPT):],
                    f"[deepseek_v3 first block dense generate {layout}] {len(ids)} greedy ids "
                    f"equal torch's")
    # --moe-bias-update-rate moves the DeepSeekMoE blocks' biases alike on 1 rank and EP 2; the
    # dense block has no experts to count ("-").
    biases, lines = {}, {}
    for layout, ranks, extra in (("1 rank", 1, ()), ("ep 2", 2, ("--ep", "2"))):
        out = model + "_bias_" + layout.replace(" ", "")
        stdout = launch_ok(exe, workdir, ["--init-from", model, "--data", shard, "--batch", str(B),
                                          "--seq-len", str(T), "--steps", "3", "--lr", "0",
                                          "--moe-bias-update-rate", "0.01", "--save-hf", out,
                                          *extra], ranks)
        lines[layout] = [ln for ln in stdout.splitlines() if ln.startswith("experts step 3")]
        saved = hf_models.read_dir(out)
        biases[layout] = np.concatenate([saved[k] for k in sorted(saved)
                                         if k.endswith("e_score_correction_bias")])
    initial = np.concatenate([params0[k] for k in sorted(params0)
                              if k.endswith("e_score_correction_bias")])
    tally.check(np.array_equal(biases["1 rank"], biases["ep 2"]) and
                not np.array_equal(biases["1 rank"], initial) and
                lines["1 rank"][0].split(":")[1].split()[0] == "-",
                f"[deepseek_v3 first block dense bias update] the two DeepSeekMoE blocks' biases "
                f"moved, the same bits on 1 rank and ep 2; {lines['1 rank'][0]}")


def check_mtp_muon_and_tp_bf16(tally, exe, workdir, shard, tokens, model, trained, loss_of):
    """The directory `model` with its MTP module under --optimizer muon against muon_reference
    (eh_proj one Muon matrix, as Hugging Face stores it) on 1 rank, TP 2 and PP 2; and under
    --tp-comm-dtype bf16 on TP 2 the module's TP payloads travel in bf16 too: what the module
    adds to the staged MPI bytes (--mtp 1 against --mtp 0) is less than under fp32 payloads."""
    matrices = {k for k, v in trained.items() if v.ndim == 2}
    ref, ref_final = muon_reference(trained, tokens, loss_of, matrices)
    for layout, ranks, extra in (("1 rank", 1, ()), ("tp 2", 2, ("--tp", "2")),
                                 ("pp 2", 2, ("--pp", "2"))):
        rows, final = run_from_hf(exe, workdir, model, model + "_muon_" + layout.replace(" ", ""),
                                  shard, ("--optimizer", "muon", *extra), ranks)
        loss, worst = against_reference(ref, ref_final, rows, final)
        extra_loss = max(abs(t["mtp"] - r["aux"]) / r["aux"] for r, t in zip(ref, rows))
        tally.check(loss <= LOSS_RTOL and extra_loss <= LOSS_RTOL and worst[0] <= PARAM_RTOL,
                    f"[deepseek_v3 MTP 1 muon {layout}] {STEPS} losses within {loss:.1e} and MTP "
                    f"losses within {extra_loss:.1e} of torch's Muon, every tensor after the "
                    f"last step within {worst[0]:.1e} ({worst[1]})")
    staged = {}
    for depth in ("0", "1"):
        for dtype in ("fp32", "bf16"):
            out = launch(exe, workdir, ["--init-from", model, "--data", shard, "--batch", str(B),
                                        "--seq-len", str(T), "--steps", "2", "--tp", "2",
                                        "--mtp", depth, "--precision", "bf16", "--tp-comm-dtype",
                                        dtype, "--gpu-aware-mpi", "no", "--profile"], 2)
            mt = re.search(r"^\s*d2h mpi \(staged\)\s+\S+\s+([0-9.]+)", out.stdout + out.stderr, re.M)
            if out.returncode == 2 and "--precision bf16 needs native bf16" in out.stderr:
                print(f"[deepseek_v3 MTP 1 tp-comm bf16] SKIPPED, no native bf16 here")
                return
            staged[depth, dtype] = float(mt.group(1)) if out.returncode == 0 and mt else None
    if None in staged.values():
        tally.fail(f"[deepseek_v3 MTP 1 tp-comm bf16] a run failed or printed no staged bytes: "
                   f"{staged}")
        return
    module = {d: staged["1", d] - staged["0", d] for d in ("fp32", "bf16")}
    tally.check(0 < module["bf16"] < module["fp32"],
                f"[deepseek_v3 MTP 1 tp-comm bf16] the module adds {module['bf16']:.3f} MB of "
                f"staged TP traffic under bf16 payloads, {module['fp32']:.3f} MB under fp32")


def write_mtp_directory(workdir, name, m, params0, depth, seed, shared_copies):
    """A Hugging Face directory `name` of the deepseek_v3 `params0` with `depth` random
    multi-token prediction modules (model.layers.{L}.., num_nextn_predict_layers `depth`), with
    each module's copies of the shared embedding and head when `shared_copies`, as DeepSeek-V3's
    files hold them (the modules read the shared ones, so they are not the model's tensors):
    (its path, the module tensors written, the tensors the trainer trains and writes back)."""
    copy = (".embed_tokens.weight", ".shared_head.head.weight")
    rng = np.random.default_rng(seed)
    mtp = {n: (0.1 * rng.standard_normal(shape)).astype(np.float32)
           for n, shape in hf_models.deepseek_mtp_shapes(m, depth)
           if shared_copies or not n.endswith(copy)}
    model = os.path.join(workdir, name)
    os.makedirs(model)
    json.dump(dict(hf_models.deepseek_moe_config(m), num_nextn_predict_layers=depth),
              open(os.path.join(model, "config.json"), "w"))
    written = dict(params0, **mtp)
    hf_models.write_safetensors(os.path.join(model, "model.safetensors"), written, "F32",
                                {"format": "pt"})
    trained = {k: v for k, v in written.items() if not (k in mtp and k.endswith(copy))}
    return model, mtp, trained


def check_deepseek_mtp_modules(tally, exe, workdir, shard, tokens, m, params0, first_loss):
    """A deepseek_v3 directory with DeepSeek-V3's multi-token prediction module
    (num_nextn_predict_layers 1, model.layers.{L}.*) trains it by default (--mtp 1): each step's
    loss and mtp (0.3 x depth 1's mean cross-entropy over its B x (T - 1) positions) within
    LOSS_RTOL of hf_models.deepseek_logits(mtp=1) trained the same way, and every tensor after the
    last step within PARAM_RTOL, on MTP_LAYOUTS; under --precision bf16 the first step within
    BF16_LOSS_RTOL of the same under autocast, every MTP loss within BF16_MOE_RTOL; a step of lr 0 writes the module back
    (num_nextn_predict_layers 1) within 1e-7, without the file's copies of the shared embedding
    and head. With --mtp 0 the file loads with one warning line naming the key, trains to the
    first loss of the file without the module and is saved without it (num_nextn_predict_layers
    0). Refused by name: the module's tensors with the key 0, a negative key, and --mtp past the
    file's modules."""
    model, mtp, trained = write_mtp_directory(workdir, "deepseek_v3_mtp", m, params0, 1, 330,
                                              True)
    copies = set(mtp) - set(trained)

    def loss_of(p, inputs, targets):  # (the next-token loss, the MTP loss): their sum trained
        logits, depths = hf_models.deepseek_logits(p, inputs, m, mtp=1)
        return hf_models.deepseek_mtp_loss(logits, depths, targets, 0.3)

    matrices = {k for k, v in trained.items() if v.ndim == 2}
    ref, ref_final = train_reference(trained, tokens, CFG, matrices, loss_of, torch.float64,
                                     False)
    for index, (layout, ranks, extra) in enumerate(MTP_LAYOUTS):
        rows, final = run_from_hf(exe, workdir, model, model + f"_out{index}", shard, extra,
                                  ranks)
        loss, worst = against_reference(ref, ref_final, rows, final)
        extra_loss = max(abs(t["mtp"] - r["aux"]) / r["aux"] for r, t in zip(ref, rows))
        tally.check(loss <= LOSS_RTOL and extra_loss <= LOSS_RTOL and worst[0] <= PARAM_RTOL and
                    final.keys() == trained.keys(),
                    f"[deepseek_v3 MTP 1 {layout}] {STEPS} losses within {loss:.1e} and MTP "
                    f"losses within {extra_loss:.1e} of torch's, every tensor after the last "
                    f"step within {worst[0]:.1e} ({worst[1]}; first mtp {rows[0]['mtp']} vs "
                    f"{ref[0]['aux']:.6f})")
    check_mtp_muon_and_tp_bf16(tally, exe, workdir, shard, tokens, model, trained, loss_of)
    # Under --precision bf16 against the same training under PyTorch's bf16 autocast.
    probe = launch(exe, workdir, ["--init-from", model, "--data", shard, "--batch", str(B),
                                  "--seq-len", str(T), "--steps", "1", "--precision", "bf16"])
    if probe.returncode == 2 and "--precision bf16 needs native bf16" in probe.stderr:
        print(f"[deepseek_v3 MTP 1 bf16] SKIPPED, no native bf16 here: {probe.stderr.strip()}")
    else:
        # The first step's forward alone within bf16's rounding; later losses drift with the
        # experts a near-tie picks (autocast's own are 6e-3 from float64's by step 4 here), the
        # MTP losses less.
        auto, _ = train_reference(trained, tokens, CFG, matrices, loss_of, torch.float32, True)
        rows, _ = run_from_hf(exe, workdir, model, model + "_bf16", shard, ("--precision", "bf16"))
        first = max(abs(rows[0][a] - auto[0][b]) / auto[0][b] for a, b in (("loss", "loss"),
                                                                           ("mtp", "aux")))
        extra_rel = max(abs(t["mtp"] - r["aux"]) / r["aux"] for r, t in zip(auto, rows))
        tally.check(first <= BF16_LOSS_RTOL and extra_rel <= BF16_MOE_RTOL and
                    rows[0]["mtp"] != ref[0]["aux"],
                    f"[deepseek_v3 MTP 1 bf16] the first step's loss and MTP loss within "
                    f"{first:.1e} of autocast's, {STEPS} MTP losses within {extra_rel:.1e}")
    again, metrics = model + "_again", os.path.join(workdir, "deepseek_v3_mtp_metrics.jsonl")
    row, _ = run_from_hf(exe, workdir, model, again, shard, ("--metrics", metrics), steps=1,
                         lr=0.0, wd=0.0)
    back, config = hf_models.read_dir(again), json.load(open(os.path.join(again, "config.json")))
    gap = max(float(np.abs(back[k] - v).max()) for k, v in trained.items())
    step = [r for r in map(json.loads, open(metrics)) if r.get("kind") == "step"]
    tally.check(back.keys() == trained.keys() and gap <= 1e-7 and
                config.get("num_nextn_predict_layers") == 1 and
                abs(step[0].get("mtp", 0) - row[0]["mtp"]) <= 1e-6,
                f"[deepseek_v3 MTP 1 save-hf] {len(back)} tensors as read (the module's "
                f"{len(mtp) - len(copies)} among them), within {gap:.1e}; "
                f"num_nextn_predict_layers {config.get('num_nextn_predict_layers')}; --metrics' "
                f"step mtp {step[0].get('mtp')}")
    # --moe-bias-update-rate: one step of lr 0 moves each DeepSeekMoE block's bias, the module's
    # too, by γ · sign(mean − c_e) of the reference's choices, the module's over its B x (T - 1)
    # rows: its router made 30x steeper, its choices spread so that counting the rows past the
    # end too would move other biases.
    rate, steep = 0.01, dict(trained)
    gate = f"model.layers.{m['L']}.mlp.gate.weight"
    steep[gate] = steep[gate] * np.float32(30)
    biased = model + "_steep"
    os.makedirs(biased)
    shutil.copy(os.path.join(model, "config.json"), biased)
    hf_models.write_safetensors(os.path.join(biased, "model.safetensors"), steep, "F32",
                                {"format": "pt"})
    moved = {}
    for layout, ranks, extra in (("1 rank", 1, ()),):
        out = biased + "_out_" + layout.replace(" ", "")
        run_from_hf(exe, workdir, biased, out, shard,
                    ("--moe-bias-update-rate", repr(rate), *extra), ranks, steps=1, lr=0.0, wd=0.0)
        moved[layout] = hf_models.read_dir(out)
    loads = []
    with torch.no_grad():
        p = {k: torch.tensor(v, dtype=torch.float64) for k, v in steep.items()}
        row = torch.tensor(tokens[:B * T]).view(B, T)
        hf_models.deepseek_logits(p, row, dict(m, moe=dict(m["moe"], loads=loads)), mtp=1)
    names = [f"model.layers.{l}.mlp.gate.e_score_correction_bias"
             for l in range(m["moe"].get("dense", 0), m["L"] + 1)]
    want = {n: (steep[n] + np.float32(rate) * np.sign(c.double().mean() - c.double()).numpy()
                .astype(np.float32)) for n, c in zip(names, loads)}
    tally.check(len(loads) == len(names) and
                all(np.array_equal(got[n], want[n]) for got in moved.values() for n in names)
                and not np.array_equal(want[names[-1]], steep[names[-1]]),
                f"[deepseek_v3 MTP 1 bias update] {len(names)} blocks' biases (the module's last) "
                f"moved by the reference's loads, the module's over B x (T - 1) rows "
                f"({[int(c.sum()) for c in loads]} choices)")
    out = os.path.join(workdir, "deepseek_v3_mtp_out")
    proc = launch(exe, workdir, ["--init-from", model, "--data", shard, "--batch", str(B),
                                 "--seq-len", str(T), "--steps", "1", "--lr", "0",
                                 "--weight-decay", "0", "--save-hf", out, "--mtp", "0"])
    rows = [float(mt.group(3)) for mt in map(STEP_RE.match, proc.stdout.splitlines()) if mt]
    notes = [ln for ln in (proc.stdout + proc.stderr).splitlines()
             if "num_nextn_predict_layers" in ln]
    saved = hf_models.read_dir(out) if proc.returncode == 0 else {}
    config = json.load(open(os.path.join(out, "config.json"))) if proc.returncode == 0 else {}
    tally.check(proc.returncode == 0 and rows == [first_loss] and len(notes) == 1 and
                f"model.layers.{m['L']}.*" in notes[0] and saved.keys() == params0.keys() and
                config.get("num_nextn_predict_layers") == 0 and "| mtp" not in proc.stdout,
                f"[deepseek_v3 first block dense + an MTP module in the file, --mtp 0] loss "
                f"{rows} = {first_loss} without it; {len(mtp)} module tensors passed over, "
                f"{len(saved)} written back, num_nextn_predict_layers "
                f"{config.get('num_nextn_predict_layers')}; {notes}"
                f"{'' if proc.returncode == 0 else ': ' + proc.stdout + proc.stderr}")
    # The reference the module will be trained against (hf_models.deepseek_logits with mtp):
    # its report's form (depth k over T - k positions) and the form over all T rows with the
    # tokens shifted by k, the last k rows left out of the loss, give the same losses and
    # gradients; the MTP loss alone reaches the shared embedding and head and the trunk.
    p = {k: torch.tensor(v, dtype=torch.float64, requires_grad=True)
         for k, v in dict(params0, **mtp).items()}
    rows = torch.tensor(tokens[:B * T + 1])
    inputs, targets = rows[:-1].view(B, T), rows[1:].view(B, T)
    found = []
    for shifted in (False, True):
        logits, depths = hf_models.deepseek_logits(p, inputs, m, mtp=1, shifted=shifted)
        main, extra = hf_models.deepseek_mtp_loss(logits, depths, targets, 0.3)
        grads = torch.autograd.grad(extra, list(p.values()), allow_unused=True)
        found.append((float(main), float(extra),
                      {k: g for k, g in zip(p, grads) if g is not None}))
    (main0, mtp0, g0), (main1, mtp1, g1) = found
    gap = max(float((g0[k] - g1[k]).abs().max() / g0[k].abs().max()) for k in g0)
    reached = [k for k in ("model.embed_tokens.weight", "lm_head.weight",
                           "model.layers.0.self_attn.o_proj.weight") if k in g0]
    tally.check(main0 == main1 and abs(mtp0 - mtp1) <= 1e-12 * mtp0 and g0.keys() == g1.keys()
                and gap <= 1e-10 and len(reached) == 3,
                f"[deepseek_v3 MTP reference] depth 1 over T - 1 positions and over T shifted "
                f"rows: loss {main0:.6f}, 0.3 x mtp {mtp0:.9f} vs {mtp1:.9f}, gradients within "
                f"{gap:.1e}; the MTP loss reaches {reached}")
    for name, depth, key in (("key 0", 0, f"model.layers.{m['L']}."),
                             ("negative", -1, "num_nextn_predict_layers")):
        d = os.path.join(workdir, "deepseek_v3_mtp_" + name.replace(" ", "_"))
        shutil.copytree(model, d)
        json.dump(dict(hf_models.deepseek_moe_config(m), num_nextn_predict_layers=depth),
                  open(os.path.join(d, "config.json"), "w"))
        ok, errors = refused(exe, workdir, d, shard, (), key)
        tally.check(ok, f"[deepseek_v3 MTP module, num_nextn_predict_layers {depth}] refused: "
                        f"{errors}")
    ok, errors = refused(exe, workdir, model, shard, ("--mtp", "2"), "--mtp 2")
    tally.check(ok, f"[deepseek_v3 MTP module, --mtp 2] refused: {errors}")
    # The memory plan counts the module's sets and buffers (a batch large enough to show them).
    work = {}
    for depth in ("0", "1"):
        plan = launch_ok(exe, workdir, ["--init-from", model, "--data", shard, "--batch", "64",
                                        "--seq-len", str(T), "--micro-batch-size", "64",
                                        "--steps", "1", "--mtp", depth, "--dry-run"])
        found = re.search(r"workspace ([0-9.]+) GB", plan)
        work[depth] = float(found.group(1)) if found else None
    tally.check(None not in work.values() and work["1"] > work["0"],
                f"[deepseek_v3 MTP module, --dry-run] the workspace term {work['1']} GB with the "
                f"module, {work['0']} GB without")
    check_deepseek_two_mtp_modules(tally, exe, workdir, shard, tokens, m, params0)


def check_deepseek_two_mtp_modules(tally, exe, workdir, shard, tokens, m, params0):
    """Two modules (num_nextn_predict_layers 2), depth 2 reading depth 1's output: losses and mtp
    within LOSS_RTOL of hf_models.deepseek_logits(mtp=2) trained the same way on 1 rank; --mtp 1
    trains the first alone, passing over the second's tensors (model.layers.{L+1}.*) with one
    warning and saving num_nextn_predict_layers 1 without them."""
    model, _, trained = write_mtp_directory(workdir, "deepseek_v3_mtp2", m, params0, 2, 340,
                                            False)

    def loss_of(p, inputs, targets):
        logits, depths = hf_models.deepseek_logits(p, inputs, m, mtp=2)
        return hf_models.deepseek_mtp_loss(logits, depths, targets, 0.3)

    matrices = {k for k, v in trained.items() if v.ndim == 2}
    ref, _ = train_reference(trained, tokens, CFG, matrices, loss_of, torch.float64, False)
    rows, final = run_from_hf(exe, workdir, model, model + "_out", shard)
    loss = max(abs(t["loss"] - r["loss"]) / r["loss"] for r, t in zip(ref, rows))
    extra_loss = max(abs(t["mtp"] - r["aux"]) / r["aux"] for r, t in zip(ref, rows))
    tally.check(loss <= LOSS_RTOL and extra_loss <= LOSS_RTOL and final.keys() == trained.keys(),
                f"[deepseek_v3 MTP 2] {STEPS} losses within {loss:.1e} and MTP losses within "
                f"{extra_loss:.1e} of torch's (first mtp {rows[0]['mtp']} vs "
                f"{ref[0]['aux']:.6f})")
    out = model + "_first"
    proc = launch(exe, workdir, ["--init-from", model, "--data", shard, "--batch", str(B),
                                 "--seq-len", str(T), "--steps", "1", "--mtp", "1",
                                 "--save-hf", out])
    notes = [ln for ln in (proc.stdout + proc.stderr).splitlines() if "--mtp 1 trains" in ln]
    saved = hf_models.read_dir(out) if proc.returncode == 0 else {}
    second = f"model.layers.{m['L'] + 1}."
    config = json.load(open(os.path.join(out, "config.json"))) if proc.returncode == 0 else {}
    tally.check(proc.returncode == 0 and len(notes) == 1 and second + "*" in notes[0] and
                not any(k.startswith(second) for k in saved) and
                any(k.startswith(f"model.layers.{m['L']}.") for k in saved) and
                config.get("num_nextn_predict_layers") == 1,
                f"[deepseek_v3 MTP 2 in the file, --mtp 1] {notes}; "
                f"{len(saved)} tensors saved, num_nextn_predict_layers "
                f"{config.get('num_nextn_predict_layers')}"
                f"{'' if proc.returncode == 0 else ': ' + proc.stdout + proc.stderr}")


def main():
    torch.manual_seed(0)
    torch.set_num_threads(1)
    found = programs("reference_families")
    if found is None:
        return 1
    exe, gen, mpiexec = found
    workdir = tempfile.mkdtemp(prefix="mpiformer_families_ref_")
    tally = Tally("reference_families")
    check = tally.check

    def worst_loss(ref, rows):
        return max(abs(float(t["loss"]) - r["loss"]) / abs(r["loss"]) for r, t in zip(ref, rows))

    tokens = np.random.default_rng(7).integers(0, BASE["V"], 2000)
    shard = os.path.join(workdir, "tokens.bin")
    write_tokens(shard, tokens)
    for index, (name, m, architecture, hf_tensor) in enumerate(FAMILIES):
        try:
            params0 = random_model(m, seed=100 + index)
            model = os.path.join(workdir, f"{name}.bin")
            write_model(model, m, params0)
            ref, _ = reference_run(params0, tokens, m)
            for layout, ranks, extra in LAYOUTS + EXTRA_LAYOUTS.get(name, []):
                rows, _ = run_trainer(exe, workdir, model, shard, "fp32", extra, m, ranks)
                rel = worst_loss(ref, rows)
                norm = max(abs(float(t["norm"]) - r["norm"]) / r["norm"] for r, t in zip(ref, rows))
                check(rel <= LOSS_RTOL and norm <= NORM_CHECK,
                      f"[{name} {layout}] 5 losses within {rel:.1e} of torch's, norms within "
                      f"{norm:.1e} (first loss {rows[0]['loss']} vs {ref[0]['loss']:.6f})")
            if m.get("window"):
                plain, _ = reference_run(params0, tokens, dict(m, window=0))
                check(abs(plain[0]["loss"] - ref[0]["loss"]) > 1e-4,
                      f"[{name}] the window matters: first loss {ref[0]['loss']:.6f} with it, "
                      f"{plain[0]['loss']:.6f} without")
            check_decoding(tally, gen, mpiexec, workdir, model, name, m, params0,
                           GENERATE_RANKS.get(name, (1,)))
            again, back = hf_round_trip(tally, exe, workdir, model, shard, tokens, name, m,
                                        architecture, hf_tensor)
            rel = worst_loss(again, back)
            check(rel <= LOSS_RTOL, f"[{name} init-from its HF directory] 5 losses within "
                                    f"{rel:.1e} of torch's from the saved parameters")
        except (RuntimeError, ValueError, OSError, subprocess.TimeoutExpired) as e:
            tally.fail(f"[{name}] run failed: {e}")
    try:
        check_deepseek(tally, exe, gen, workdir, shard, tokens)
    except (RuntimeError, ValueError, OSError, subprocess.TimeoutExpired) as e:
        tally.fail(f"[deepseek_v3] run failed: {e}")
    try:
        check_deepseek_moe(tally, exe, gen, workdir, shard, tokens)
    except (RuntimeError, ValueError, OSError, subprocess.TimeoutExpired) as e:
        tally.fail(f"[deepseek_v3 moe] run failed: {e}")
    try:
        check_deepseek_mixed(tally, exe, gen, workdir, shard, tokens)
    except (RuntimeError, ValueError, OSError, subprocess.TimeoutExpired) as e:
        tally.fail(f"[deepseek_v3 first block dense] run failed: {e}")
    try:
        check_deepseek_muon(tally, exe, workdir, shard, tokens)
    except (RuntimeError, ValueError, OSError, subprocess.TimeoutExpired) as e:
        tally.fail(f"[deepseek_v3 muon] run failed: {e}")
    try:
        check_deepseek_bf16(tally, exe, workdir, shard, tokens)
    except (RuntimeError, ValueError, OSError, subprocess.TimeoutExpired) as e:
        tally.fail(f"[deepseek_v3 bf16] run failed: {e}")
    shutil.rmtree(workdir, ignore_errors=True)
    return tally.finish()


if __name__ == "__main__":
    sys.exit(main())
