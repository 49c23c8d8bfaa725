#!/usr/bin/python3
"""Hugging Face model directories for tests/cli/hf_checkpoints.sh, written and read here with
plain numpy (transformers is not needed): a safetensors writer and reader from the format's
specification (github.com/huggingface/safetensors), GPT2LMHeadModel's tensor names, whose linear
weights are Conv1D, stored (in, out), and LlamaForCausalLM's, whose q/k/v and gate/up projections
this trainer stacks into one tensor each.

  hf_models.py write DIR [--dtype F32|BF16|F16] [--sharded] [--bare] [--lm-head|--lm-head-differs]
                         [--no-config]
      a random tiny GPT-2 (the model of compare_with_pytorch.py's tests) as a model directory
  hf_models.py write-llama DIR [--dtype ...] [--tied]
      a random tiny Llama (GQA, llama3 rope scaling; compare_llama_with_pytorch.py's model)
  hf_models.py loss SHARD B T DIR...     each model's float64 PyTorch loss of the first batch
  hf_models.py same DIR FILE [--bf16]    DIR's tensors equal an llm.c (or mpiformer Llama) model
                                         file's, bit for bit (--bf16: the file's values rounded
                                         to bf16), and its config.json the file's sizes
  hf_models.py bad DIR OUT KIND...       OUT_KIND/: DIR's config.json and a copy of its
                                         model.safetensors with one defect
  hf_models.py config DIR KEY VALUE      set one key of DIR/config.json (VALUE is JSON)

Run with Debian's /usr/bin/python3 (numpy; torch for `loss`)."""
import json
import math
import os
import shutil
import struct
import sys

import numpy as np

MODEL = dict(maxT=32, V=300, L=2, NH=4, C=32)


def param_shapes(m):
    """llm.c's tensors (unpadded wte) in file order."""
    L, C = m["L"], m["C"]
    return [("wte", (m["V"], C)), ("wpe", (m["maxT"], C)), ("ln1w", (L, C)), ("ln1b", (L, C)),
            ("qkvw", (L, 3 * C, C)), ("qkvb", (L, 3 * C)), ("attprojw", (L, C, C)),
            ("attprojb", (L, C)), ("ln2w", (L, C)), ("ln2b", (L, C)), ("fcw", (L, 4 * C, C)),
            ("fcb", (L, 4 * C)), ("fcprojw", (L, C, 4 * C)), ("fcprojb", (L, C)),
            ("lnfw", (C,)), ("lnfb", (C,))]


# llm.c's per-layer tensors as GPT2LMHeadModel's; True: a Conv1D weight, stored transposed.
LAYER_NAMES = {"ln1w": ("ln_1.weight", False), "ln1b": ("ln_1.bias", False),
               "qkvw": ("attn.c_attn.weight", True), "qkvb": ("attn.c_attn.bias", False),
               "attprojw": ("attn.c_proj.weight", True), "attprojb": ("attn.c_proj.bias", False),
               "ln2w": ("ln_2.weight", False), "ln2b": ("ln_2.bias", False),
               "fcw": ("mlp.c_fc.weight", True), "fcb": ("mlp.c_fc.bias", False),
               "fcprojw": ("mlp.c_proj.weight", True), "fcprojb": ("mlp.c_proj.bias", False)}
TOP_NAMES = {"wte": "wte.weight", "wpe": "wpe.weight", "lnfw": "ln_f.weight",
             "lnfb": "ln_f.bias"}


def to_hf(params, m, prefix="transformer."):
    out = {}
    for name, _ in param_shapes(m):
        if name in TOP_NAMES:
            out[prefix + TOP_NAMES[name]] = params[name]
            continue
        hf, conv1d = LAYER_NAMES[name]
        for l in range(m["L"]):
            out[f"{prefix}h.{l}.{hf}"] = params[name][l].T if conv1d else params[name][l]
    return out


def from_hf(tensors, m):
    prefix = "transformer." if "transformer.wte.weight" in tensors else ""
    params = {}
    for name, _ in param_shapes(m):
        if name in TOP_NAMES:
            params[name] = tensors[prefix + TOP_NAMES[name]]
            continue
        hf, conv1d = LAYER_NAMES[name]
        layers = [tensors[f"{prefix}h.{l}.{hf}"] for l in range(m["L"])]
        params[name] = np.stack([t.T if conv1d else t for t in layers])
    return params


# ---- safetensors -------------------------------------------------------------------------------
def to_bf16_bits(x):
    """float32 -> bf16 bits, round to nearest, ties to even."""
    u = np.ascontiguousarray(x, dtype="<f4").view("<u4").astype(np.uint64)
    return ((u + 0x7FFF + ((u >> 16) & 1)) >> 16).astype("<u2")


def from_bf16_bits(b):
    return (b.astype("<u4") << 16).view("<f4")


def encode(x, dtype):
    if dtype == "F32":
        return np.ascontiguousarray(x, dtype="<f4").tobytes()
    if dtype == "F16":
        return np.ascontiguousarray(x, dtype="<f2").tobytes()
    return to_bf16_bits(x).tobytes()


def write_safetensors(path, tensors, dtype="F32", metadata=None):
    header, blobs, at = {}, [], 0
    if metadata:
        header["__metadata__"] = metadata
    for name, x in tensors.items():
        blob = encode(x, dtype)
        header[name] = dict(dtype=dtype, shape=list(x.shape), data_offsets=[at, at + len(blob)])
        blobs.append(blob)
        at += len(blob)
    text = json.dumps(header).encode()
    text += b" " * (-len(text) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(text)) + text + b"".join(blobs))


def read_safetensors(path):
    raw = open(path, "rb").read()
    (n,) = struct.unpack("<Q", raw[:8])
    header = json.loads(raw[8:8 + n])
    data = raw[8 + n:]
    out = {}
    for name, h in header.items():
        if name == "__metadata__":
            continue
        b, e = h["data_offsets"]
        chunk = np.frombuffer(data[b:e], dtype={"F32": "<f4", "F16": "<f2", "BF16": "<u2"}[
            h["dtype"]])
        x = from_bf16_bits(chunk) if h["dtype"] == "BF16" else chunk.astype("<f4")
        out[name] = x.reshape(h["shape"])
    return header, out


def read_dir(d):
    if os.path.isfile(d):
        return read_safetensors(d)[1]
    if os.path.exists(os.path.join(d, "model.safetensors.index.json")):
        index = json.load(open(os.path.join(d, "model.safetensors.index.json")))
        tensors = {}
        for f in sorted(set(index["weight_map"].values())):
            tensors.update(read_safetensors(os.path.join(d, f))[1])
        return tensors
    return read_safetensors(os.path.join(d, "model.safetensors"))[1]


def gpt2_config(m):
    return dict(architectures=["GPT2LMHeadModel"], model_type="gpt2", vocab_size=m["V"],
                n_positions=m["maxT"], n_embd=m["C"], n_layer=m["L"], n_head=m["NH"],
                n_inner=None, activation_function="gelu_new", layer_norm_epsilon=1e-5,
                tie_word_embeddings=True)


def random_params(m, seed=1234):
    """Weights large enough that attention and GELU are far from linear (as compare_with_pytorch)."""
    rng = np.random.default_rng(seed)
    params = {}
    for name, shape in param_shapes(m):
        if name in ("ln1w", "ln2w", "lnfw"):
            p = 1.0 + 0.1 * rng.standard_normal(shape)
        elif name in ("wte", "wpe", "qkvw", "attprojw", "fcw", "fcprojw"):
            p = 0.1 * rng.standard_normal(shape)
        else:
            p = 0.05 * rng.standard_normal(shape)
        params[name] = p.astype(np.float32)
    return params


# ---- Llama --------------------------------------------------------------------------------------
# compare_llama_with_pytorch.py's model with a vocabulary whose real rows straddle TP shards.
LLAMA = dict(maxT=32, V=300, L=2, NH=4, KVH=2, C=32, F=72, eps=1e-6, theta=10000.0, factor=8.0,
             low=1.0, high=4.0, original=64, tied=False)
LLAMA_MAGIC = 20251125


def llama_shapes(m):
    L, NH, KVH, C, F = m["L"], m["NH"], m["KVH"], m["C"], m["F"]
    hs = C // NH
    out = [("wte", (m["V"], C)), ("ln1w", (L, C)), ("qkvw", (L, (NH + 2 * KVH) * hs, C)),
           ("attprojw", (L, C, C)), ("ln2w", (L, C)), ("fcw", (L, 2 * F, C)),
           ("fcprojw", (L, C, F)), ("lnfw", (C,))]
    return out if m["tied"] else out + [("lmhead", (m["V"], C))]


def llama_random(m, seed=4321):
    rng = np.random.default_rng(seed)
    return {name: ((1.0 if name in ("ln1w", "ln2w", "lnfw") else 0.0) +
                   0.1 * rng.standard_normal(shape)).astype(np.float32)
            for name, shape in llama_shapes(m)}


def llama_to_hf(p, m):
    hs = m["C"] // m["NH"]
    q, kv = m["NH"] * hs, m["KVH"] * hs
    out = {"model.embed_tokens.weight": p["wte"], "model.norm.weight": p["lnfw"]}
    for l in range(m["L"]):
        pre = f"model.layers.{l}."
        out[pre + "input_layernorm.weight"] = p["ln1w"][l]
        out[pre + "self_attn.q_proj.weight"] = p["qkvw"][l][:q]
        out[pre + "self_attn.k_proj.weight"] = p["qkvw"][l][q:q + kv]
        out[pre + "self_attn.v_proj.weight"] = p["qkvw"][l][q + kv:]
        out[pre + "self_attn.o_proj.weight"] = p["attprojw"][l]
        out[pre + "post_attention_layernorm.weight"] = p["ln2w"][l]
        out[pre + "mlp.gate_proj.weight"] = p["fcw"][l][:m["F"]]
        out[pre + "mlp.up_proj.weight"] = p["fcw"][l][m["F"]:]
        out[pre + "mlp.down_proj.weight"] = p["fcprojw"][l]
    if not m["tied"]:
        out["lm_head.weight"] = p["lmhead"]
    return out


def llama_from_hf(t, m):
    layer = lambda name: [t[f"model.layers.{l}.{name}"] for l in range(m["L"])]
    stack = lambda *names: np.stack([np.concatenate(rows) for rows in zip(*map(layer, names))])
    p = {"wte": t["model.embed_tokens.weight"], "lnfw": t["model.norm.weight"],
         "ln1w": np.stack(layer("input_layernorm.weight")),
         "qkvw": stack("self_attn.q_proj.weight", "self_attn.k_proj.weight",
                       "self_attn.v_proj.weight"),
         "attprojw": np.stack(layer("self_attn.o_proj.weight")),
         "ln2w": np.stack(layer("post_attention_layernorm.weight")),
         "fcw": stack("mlp.gate_proj.weight", "mlp.up_proj.weight"),
         "fcprojw": np.stack(layer("mlp.down_proj.weight"))}
    if not m["tied"]:
        p["lmhead"] = t["lm_head.weight"]
    return p


def llama_config(m):
    scaling = dict(rope_type="llama3", factor=m["factor"], low_freq_factor=m["low"],
                   high_freq_factor=m["high"], original_max_position_embeddings=m["original"])
    return dict(architectures=["LlamaForCausalLM"], model_type="llama", vocab_size=m["V"],
                hidden_size=m["C"], intermediate_size=m["F"], num_hidden_layers=m["L"],
                num_attention_heads=m["NH"], num_key_value_heads=m["KVH"],
                max_position_embeddings=m["maxT"], rms_norm_eps=m["eps"],
                rope_theta=m["theta"], rope_scaling=scaling if m["factor"] else None,
                hidden_act="silu", tie_word_embeddings=m["tied"])


def llama_m(cfg):
    s = cfg.get("rope_scaling") or {}
    return dict(maxT=cfg["max_position_embeddings"], V=cfg["vocab_size"],
                L=cfg["num_hidden_layers"], NH=cfg["num_attention_heads"],
                KVH=cfg["num_key_value_heads"], C=cfg["hidden_size"], F=cfg["intermediate_size"],
                eps=cfg["rms_norm_eps"], theta=cfg["rope_theta"], factor=s.get("factor", 0.0),
                low=s.get("low_freq_factor", 1.0), high=s.get("high_freq_factor", 4.0),
                original=s.get("original_max_position_embeddings", 8192),
                tied=cfg["tie_word_embeddings"])


# ---- DeepSeek-V3 (multi-head latent attention, dense blocks) -------------------------------------
# A tiny DeepseekV3ForCausalLM whose blocks are all dense (first_k_dense_replace = L): q_lora_rank
# 32, kv_lora_rank 16, QK heads of 16 + 8 (rotary) values, V heads of 16, YaRN over an original
# context of 8 (factor 4 = 32 / 8; mscale 1, mscale_all_dim 0.8, so both the rotary tables and the
# softmax are scaled), the rotary weights interleaved (rope_interleave).
DEEPSEEK = dict(maxT=32, V=67, L=2, C=64, NH=4, F=96, qr=32, kvr=16, dn=16, dr=8, dv=16, eps=1e-6,
                theta=10000.0, factor=4.0, original=8, beta_fast=32.0, beta_slow=1.0, mscale=1.0,
                mscale_all_dim=0.8, interleave=True, tied=False)


# The other forms: a plain q_proj (q_lora_rank null), the rotary pairs in halves
# (rope_interleave false), no rope_scaling.
DEEPSEEK_PLAIN = dict(DEEPSEEK, qr=0, interleave=False, factor=0.0)

# Every block DeepSeekMoE (first_k_dense_replace 0): 8 routed experts of width 16 in 2 groups of
# 4, a token keeping 1 group and 2 experts in it, 1 shared expert, gates renormalised and scaled
# by 2.5, and a nonzero e_score_correction_bias (moe_bias: its std) that changes the choices.
DEEPSEEK_MOE = dict(DEEPSEEK, moe=dict(E=8, k=2, F=16, shared=1, groups=2, topk_groups=1,
                                       scale=2.5, bias=0.05))
# DeepSeek-V3's own stack, smaller: the first block dense (first_k_dense_replace 1, its MLP of
# intermediate_size F), the other two DeepSeekMoE blocks as DEEPSEEK_MOE's.
DEEPSEEK_MIXED = dict(DEEPSEEK, L=3, moe=dict(DEEPSEEK_MOE["moe"], dense=1))
# DeepSeek-V2's gate as DeepseekV3Config's keys name it: softmax scores, the k best of all experts
# (topk_method greedy: no groups, no bias), gates not renormalised (norm_topk_prob false).
DEEPSEEK_MOE_GREEDY = dict(DEEPSEEK, moe=dict(DEEPSEEK_MOE["moe"], scoring="softmax",
                                              method="greedy", norm=False))


def deepseek_shapes(m):
    """DeepseekV3ForCausalLM's tensors (names, shapes) for m."""
    C, NH, hs = m["C"], m["NH"], m["dn"] + m["dr"]
    out = [("model.embed_tokens.weight", (m["V"], C)), ("model.norm.weight", (C,))]
    for l in range(m["L"]):
        a = f"model.layers.{l}."
        out += [(a + "input_layernorm.weight", (C,)),
                (a + "post_attention_layernorm.weight", (C,))]
        if m["qr"]:
            out += [(a + "self_attn.q_a_proj.weight", (m["qr"], C)),
                    (a + "self_attn.q_a_layernorm.weight", (m["qr"],)),
                    (a + "self_attn.q_b_proj.weight", (NH * hs, m["qr"]))]
        else:
            out.append((a + "self_attn.q_proj.weight", (NH * hs, C)))
        out += [(a + "self_attn.kv_a_proj_with_mqa.weight", (m["kvr"] + m["dr"], C)),
                (a + "self_attn.kv_a_layernorm.weight", (m["kvr"],)),
                (a + "self_attn.kv_b_proj.weight", (NH * (m["dn"] + m["dv"]), m["kvr"])),
                (a + "self_attn.o_proj.weight", (C, NH * m["dv"]))]
        if m.get("moe") and l >= m["moe"].get("dense", 0):
            e = m["moe"]
            out += [(a + "mlp.gate.weight", (e["E"], C)),
                    (a + "mlp.gate.e_score_correction_bias", (e["E"],))]
            for j in range(e["E"]):
                out += [(a + f"mlp.experts.{j}.gate_proj.weight", (e["F"], C)),
                        (a + f"mlp.experts.{j}.up_proj.weight", (e["F"], C)),
                        (a + f"mlp.experts.{j}.down_proj.weight", (C, e["F"]))]
            if e["shared"]:
                Fs = e["shared"] * e["F"]
                out += [(a + "mlp.shared_experts.gate_proj.weight", (Fs, C)),
                        (a + "mlp.shared_experts.up_proj.weight", (Fs, C)),
                        (a + "mlp.shared_experts.down_proj.weight", (C, Fs))]
            continue
        out += [(a + "mlp.gate_proj.weight", (m["F"], C)), (a + "mlp.up_proj.weight", (m["F"], C)),
                (a + "mlp.down_proj.weight", (C, m["F"]))]
    if not m["tied"]:
        out.append(("lm_head.weight", (m["V"], C)))
    return out


def deepseek_mtp_shapes(m, depth):
    """The tensors (names, shapes) of the `depth` multi-token prediction modules DeepSeek-V3's
    files carry after the L blocks, as model.layers.{L+k-1}: the block (the last block's kind),
    enorm, hnorm, eh_proj, shared_head.norm, and the copies of the embedding and the head."""
    C, L = m["C"], m["L"]
    more = [(n, s) for n, s in deepseek_shapes(dict(m, L=L + depth))
            if n.startswith("model.layers.") and int(n.split(".")[2]) >= L]
    for l in range(L, L + depth):
        a = f"model.layers.{l}."
        more += [(a + "enorm.weight", (C,)), (a + "hnorm.weight", (C,)),
                 (a + "eh_proj.weight", (C, 2 * C)), (a + "shared_head.norm.weight", (C,)),
                 (a + "shared_head.head.weight", (m["V"], C)),
                 (a + "embed_tokens.weight", (m["V"], C))]
    return more


def deepseek_random(m, seed=4321):
    """Norm gains near 1, matrices of std 0.1: attention and SwiGLU far from linear."""
    rng = np.random.default_rng(seed)
    out = {name: ((1.0 if len(shape) == 1 else 0.0) + 0.1 * rng.standard_normal(shape))
           .astype(np.float32) for name, shape in deepseek_shapes(m)}
    for name in out:  # DeepSeekMoE's routing bias: centred on 0
        if name.endswith("e_score_correction_bias"):
            out[name] = (m["moe"]["bias"] * rng.standard_normal(out[name].shape)).astype(np.float32)
    return out


def deepseek_config(m):
    return dict(architectures=["DeepseekV3ForCausalLM"], model_type="deepseek_v3",
                vocab_size=m["V"], hidden_size=m["C"], intermediate_size=m["F"],
                moe_intermediate_size=8, num_hidden_layers=m["L"], num_attention_heads=m["NH"],
                num_key_value_heads=m["NH"], n_shared_experts=1, n_routed_experts=8,
                routed_scaling_factor=2.5, q_lora_rank=m["qr"] or None,
                kv_lora_rank=m["kvr"], qk_nope_head_dim=m["dn"], qk_rope_head_dim=m["dr"],
                v_head_dim=m["dv"], head_dim=m["dr"], n_group=1, topk_group=1,
                num_experts_per_tok=2, first_k_dense_replace=m["L"], norm_topk_prob=True,
                hidden_act="silu", max_position_embeddings=m["maxT"], rms_norm_eps=m["eps"],
                rope_theta=m["theta"], rope_interleave=m["interleave"],
                rope_scaling=dict(type="yarn", factor=m["factor"],
                                  original_max_position_embeddings=m["original"],
                                  beta_fast=m["beta_fast"], beta_slow=m["beta_slow"],
                                  mscale=m["mscale"], mscale_all_dim=m["mscale_all_dim"])
                if m["factor"] else None,
                attention_bias=False, tie_word_embeddings=m["tied"])


def deepseek_moe_config(m):
    """DeepseekV3Config's keys for m: the blocks past moe's "dense" (0 if absent) DeepSeekMoE
    when m has "moe"."""
    c = deepseek_config(m)
    e = m.get("moe")
    if e:
        c.update(first_k_dense_replace=e.get("dense", 0), n_routed_experts=e["E"], num_experts_per_tok=e["k"],
                 moe_intermediate_size=e["F"], n_shared_experts=e["shared"], n_group=e["groups"],
                 topk_group=e["topk_groups"], routed_scaling_factor=e["scale"],
                 scoring_func=e.get("scoring", "sigmoid"), topk_method=e.get("method", "noaux_tc"),
                 norm_topk_prob=e.get("norm", True))
    return c


def write_deepseek(d, m, params):
    os.makedirs(d)
    json.dump(deepseek_moe_config(m), open(os.path.join(d, "config.json"), "w"), indent=2)
    write_safetensors(os.path.join(d, "model.safetensors"), params, "F32", {"format": "pt"})


def yarn_mscale(scale, mscale=1.0):
    return 1.0 if scale <= 1 else 0.1 * mscale * math.log(scale) + 1.0


def yarn_parameters(m, torch):
    """transformers' _compute_yarn_parameters for the rotary part (dim qk_rope_head_dim):
    inv_freq blended by the linear ramp over the rounded correction range, and the attention
    factor the cos and sin tables are multiplied by."""
    dim, base, factor = m["dr"], m["theta"], m["factor"]
    if not factor:  # no rope_scaling: theta's frequencies, tables unscaled
        return 1.0 / base ** (torch.arange(0, dim, 2, dtype=torch.float64) / dim), 1.0
    if m["mscale"] and m["mscale_all_dim"]:
        attention_factor = yarn_mscale(factor, m["mscale"]) / yarn_mscale(factor, m["mscale_all_dim"])
    else:
        attention_factor = yarn_mscale(factor)

    def correction_dim(rotations):
        return dim * math.log(m["original"] / (rotations * 2 * math.pi)) / (2 * math.log(base))

    low = max(math.floor(correction_dim(m["beta_fast"])), 0)
    high = min(math.ceil(correction_dim(m["beta_slow"])), dim - 1)
    if low == high:
        high += 0.001
    pos_freqs = base ** (torch.arange(0, dim, 2, dtype=torch.float64) / dim)
    extrapolation, interpolation = 1.0 / pos_freqs, 1.0 / (factor * pos_freqs)
    ramp = ((torch.arange(dim // 2, dtype=torch.float64) - low) / (high - low)).clamp(0, 1)
    keep = 1 - ramp  # inv_freq_extrapolation_factor
    return interpolation * (1 - keep) + extrapolation * keep, attention_factor


def deepseek_moe(p, a, h, e):
    """DeepseekV3MoE (modeling_deepseek_v3.py) on h (B, T, C): DeepseekV3TopkRouter's sigmoid
    scores, the k chosen on scores + e_score_correction_bias (no gradient) inside the topk_group
    groups with the largest sums of their two best biased scores (the other groups' experts
    masked to 0), the chosen scores renormalised and scaled as gates; plus the shared experts'
    SwiGLU, ungated. With e["scoring"] softmax and e["method"] greedy, DeepSeek-V2's gate
    (modeling_deepseek.py's MoEGate): softmax scores, the k best of all experts."""
    import torch
    import torch.nn.functional as F
    x = h.reshape(-1, h.shape[-1])
    E, G = e["E"], e["groups"]
    # The router in fp32 under autocast too, as DeepseekV3TopkRouter casts to float32 and the
    # trainer's router is an fp32 product.
    with torch.autocast("cpu", enabled=False):
        logits = x.to(p[a + "mlp.gate.weight"].dtype) @ p[a + "mlp.gate.weight"].T
    greedy = e.get("method") == "greedy"
    scores = logits.softmax(-1) if e.get("scoring") == "softmax" else logits.sigmoid()
    with torch.no_grad():
        biased = scores + p[a + "mlp.gate.e_score_correction_bias"].detach()
        group = biased.view(-1, G, E // G).topk(2, dim=-1)[0].sum(-1)
        keep = torch.zeros_like(group).scatter_(1, group.topk(e["topk_groups"], dim=-1)[1], 1)
        keep = keep.unsqueeze(-1).expand(-1, G, E // G).reshape(-1, E).bool()
        chosen = biased.masked_fill(~keep, 0.0).topk(e["k"], dim=-1)[1]
        if greedy:
            chosen = scores.topk(e["k"], dim=-1)[1]
    if "loads" in e:  # a caller's record of each block's choices per expert, in block order
        e["loads"].append(torch.bincount(chosen.flatten(), minlength=E))
    w = scores.gather(1, chosen)
    if e.get("norm", True):
        w = w / (w.sum(-1, keepdim=True) + 1e-20)
    w = w * e["scale"]
    gates = torch.zeros_like(scores).scatter(1, chosen, w)

    def swiglu(x, pre):
        return (F.silu(x @ p[pre + "gate_proj.weight"].T) * (x @ p[pre + "up_proj.weight"].T)) @ \
            p[pre + "down_proj.weight"].T

    y = sum(gates[:, j:j + 1] * swiglu(x, a + f"mlp.experts.{j}.") for j in range(E))
    if e["shared"]:
        y = y + swiglu(x, a + "mlp.shared_experts.")
    return y.view(h.shape)


def deepseek_logits(p, inputs, m, mtp=0, shifted=False):
    """DeepseekV3ForCausalLM's forward (modeling_deepseek_v3.py), every block dense: RMSNorm,
    DeepseekV3Attention (the low-rank query path, the latent with its norm, the rotary key shared
    by the heads, apply_rotary_pos_emb_interleave's de-interleaving before rotate_half, the
    softmax scaled by qk_head_dim^-0.5 times mscale(factor, mscale_all_dim)^2), SwiGLU MLP.

    With mtp = D > 0, (the logits, [each depth's logits]) with DeepSeek-V3's multi-token
    prediction modules (the report, arXiv 2412.19437, section 2.2), module k the tensors of
    model.layers.{L+k-1}: h_k = Block_k(eh_proj([enorm(emb(t_{i+k})) ; hnorm(h_{k-1,i})])) over
    positions i < T - k, h_0 the last block's output before model.norm, its logits
    shared_head.norm(h_k) times the shared head; depth k's row i predicts t_{i+k+1}. shifted: the
    same over all T rows, the tokens shifted by k (token 0 past the end), whose last k rows a loss
    must leave out (causal attention: the others never read them)."""
    import torch
    import torch.nn.functional as F

    def rms(x, w):
        return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + m["eps"]) * w

    def rotate_half(x):
        x1, x2 = x.chunk(2, dim=-1)
        return torch.cat((-x2, x1), dim=-1)

    def rope(x, cos, sin):
        if m["interleave"]:
            b, h, s, d = x.shape
            x = x.view(b, h, s, d // 2, 2).transpose(4, 3).reshape(b, h, s, d)
        return x * cos + rotate_half(x) * sin

    NH, dn, dr, dv, kvr = m["NH"], m["dn"], m["dr"], m["dv"], m["kvr"]
    inv, attention_factor = yarn_parameters(m, torch)
    dtype = p["model.embed_tokens.weight"].dtype
    scaling = (dn + dr) ** -0.5
    if m["factor"] and m["mscale_all_dim"]:
        scaling *= yarn_mscale(m["factor"], m["mscale_all_dim"]) ** 2

    def block(x, l):
        Bb, Tt = x.shape[:2]
        freqs = torch.arange(Tt, dtype=torch.float64)[:, None] * inv[None, :]
        emb = torch.cat((freqs, freqs), dim=-1)
        cos, sin = (emb.cos() * attention_factor).to(dtype), (emb.sin() * attention_factor).to(dtype)
        causal = torch.ones(Tt, Tt, dtype=torch.bool).tril()
        a = f"model.layers.{l}."
        w = lambda name: p[a + name]
        h = rms(x, w("input_layernorm.weight"))
        if m["qr"]:
            q = rms(h @ w("self_attn.q_a_proj.weight").T, w("self_attn.q_a_layernorm.weight"))
            q = q @ w("self_attn.q_b_proj.weight").T
        else:
            q = h @ w("self_attn.q_proj.weight").T
        q = q.view(Bb, Tt, NH, dn + dr).transpose(1, 2)
        q_pass, q_rot = q.split([dn, dr], dim=-1)
        ckv = h @ w("self_attn.kv_a_proj_with_mqa.weight").T
        k_pass, k_rot = ckv.split([kvr, dr], dim=-1)
        k_pass = rms(k_pass, w("self_attn.kv_a_layernorm.weight")) @ w("self_attn.kv_b_proj.weight").T
        k_pass = k_pass.view(Bb, Tt, NH, dn + dv).transpose(1, 2)
        k_pass, v = k_pass.split([dn, dv], dim=-1)
        k_rot = k_rot.view(Bb, 1, Tt, dr)
        q_rot, k_rot = rope(q_rot, cos, sin), rope(k_rot, cos, sin)
        k_rot = k_rot.expand(*k_pass.shape[:-1], -1)
        q, k = torch.cat((q_pass, q_rot), dim=-1), torch.cat((k_pass, k_rot), dim=-1)
        att = (q @ k.transpose(-2, -1)) * scaling
        att = att.masked_fill(~causal, float("-inf")).softmax(-1)
        y = (att @ v).transpose(1, 2).reshape(Bb, Tt, NH * dv)
        x = x + y @ w("self_attn.o_proj.weight").T
        h = rms(x, w("post_attention_layernorm.weight"))
        # The prediction modules' blocks are the last block's kind (DeepSeekMoE in DeepSeek-V3).
        if m.get("moe") and min(l, m["L"] - 1) >= m["moe"].get("dense", 0):
            return x + deepseek_moe(p, a, h, m["moe"])
        return x + (F.silu(h @ w("mlp.gate_proj.weight").T) * (h @ w("mlp.up_proj.weight").T)) @ \
            w("mlp.down_proj.weight").T

    embed = p["model.embed_tokens.weight"]
    head = p["model.embed_tokens.weight" if m["tied"] else "lm_head.weight"]
    x = embed[inputs]
    for l in range(m["L"]):
        x = block(x, l)
    logits = rms(x, p["model.norm.weight"]) @ head.T
    if not mtp:
        return logits
    Tt, depths = inputs.shape[1], []
    for k in range(1, mtp + 1):
        a = f"model.layers.{m['L'] + k - 1}."
        if shifted:
            ahead = torch.cat((inputs[:, k:], torch.zeros_like(inputs[:, :k])), dim=1)
        else:
            ahead, x = inputs[:, k:], x[:, :Tt - k]
        joined = torch.cat((rms(embed[ahead], p[a + "enorm.weight"]),
                            rms(x, p[a + "hnorm.weight"])), dim=-1)
        x = block(joined @ p[a + "eh_proj.weight"].T, m["L"] + k - 1)
        depths.append(rms(x, p[a + "shared_head.norm.weight"]) @ head.T)
    return logits, depths


def deepseek_mtp_loss(logits, depths, targets, weight):
    """(the next-token cross-entropy, the MTP loss weight / D · sum over depths k of the mean
    cross-entropy over the B x (T - k) positions of depth k, whose row i predicts
    targets[:, i + k]); depths' logits over T - k rows, or over T rows (shifted), the last k left
    out."""
    import torch.nn.functional as F
    V = logits.shape[-1]
    main = F.cross_entropy(logits.reshape(-1, V), targets.reshape(-1))
    Tt, terms = targets.shape[1], []
    for k, z in enumerate(depths, start=1):
        terms.append(F.cross_entropy(z[:, :Tt - k].reshape(-1, V), targets[:, k:].reshape(-1)))
    return main, weight * sum(terms) / len(terms)


# ---- llm.c's model file (and mpiformer's Llama model file) --------------------------------------
def read_model_file(path):
    """(family, m, params) of a model file; padded vocabulary rows checked zero and dropped."""
    raw = open(path, "rb").read()
    h = np.frombuffer(raw[:1024], dtype="<i4")
    if h[0] != LLAMA_MAGIC:
        m, params = read_llmc(path)
        return "gpt2", m, params
    f = h[13:18].view("<f4")
    m = dict(maxT=int(h[2]), V=int(h[3]), L=int(h[4]), NH=int(h[5]), C=int(h[6]), KVH=int(h[9]),
             F=int(h[10]), tied=bool(h[11]), original=int(h[12]), eps=float(f[0]),
             theta=float(f[1]), factor=float(f[2]), low=float(f[3]), high=float(f[4]))
    Vp = int(h[7])
    flat = np.frombuffer(raw[1024:], dtype="<f4")
    params, off = {}, 0
    for name, shape in llama_shapes(m):
        if name in ("wte", "lmhead"):
            shape = (Vp, m["C"])
        n = int(np.prod(shape))
        params[name] = flat[off:off + n].reshape(shape)
        off += n
        if name in ("wte", "lmhead"):
            assert not params[name][m["V"]:].any(), f"{path}: padded rows of {name} not zero"
            params[name] = params[name][:m["V"]]
    assert off == flat.size, f"{path}: {flat.size} floats, expected {off}"
    return "llama", m, params


def read_llmc(path):
    raw = open(path, "rb").read()
    h = np.frombuffer(raw[:1024], dtype="<i4")
    assert h[0] == 20240326 and h[1] == 3, f"{path}: not an llm.c fp32 model file"
    m = dict(maxT=int(h[2]), V=int(h[3]), L=int(h[4]), NH=int(h[5]), C=int(h[6]))
    Vp = int(h[7])
    flat = np.frombuffer(raw[1024:], dtype="<f4")
    params, off = {}, 0
    for name, shape in param_shapes(m):
        if name == "wte":
            shape = (Vp, m["C"])
        n = int(np.prod(shape))
        params[name] = flat[off:off + n].reshape(shape)
        off += n
    assert off == flat.size, f"{path}: {flat.size} floats, expected {off}"
    assert not params["wte"][m["V"]:].any(), f"{path}: padded vocabulary rows are not zero"
    params["wte"] = params["wte"][:m["V"]]
    return m, params


# ---- commands ----------------------------------------------------------------------------------
def cmd_write(d, opts):
    dtype = opts.get("--dtype", "F32")
    os.makedirs(d)
    m = MODEL
    tensors = to_hf(random_params(m), m, prefix="" if "--bare" in opts else "transformer.")
    if "--lm-head" in opts or "--lm-head-differs" in opts:
        wte = tensors[("" if "--bare" in opts else "transformer.") + "wte.weight"]
        tensors["lm_head.weight"] = wte + (1e-3 if "--lm-head-differs" in opts else 0.0)
    if "--no-config" not in opts:
        json.dump(gpt2_config(m), open(os.path.join(d, "config.json"), "w"), indent=2)
    if "--sharded" not in opts:
        write_safetensors(os.path.join(d, "model.safetensors"), tensors, dtype, {"format": "pt"})
        return
    names = list(tensors)
    parts = [names[:len(names) // 2], names[len(names) // 2:]]
    weight_map = {}
    for i, part in enumerate(parts):
        f = f"model-{i + 1:05d}-of-{len(parts):05d}.safetensors"
        write_safetensors(os.path.join(d, f), {n: tensors[n] for n in part}, dtype,
                          {"format": "pt"})
        weight_map.update({n: f for n in part})
    json.dump(dict(metadata=dict(total_size=0), weight_map=weight_map),
              open(os.path.join(d, "model.safetensors.index.json"), "w"), indent=2)


def cmd_write_llama(d, opts):
    m = dict(LLAMA, tied="--tied" in opts)
    os.makedirs(d)
    json.dump(llama_config(m), open(os.path.join(d, "config.json"), "w"), indent=2)
    write_safetensors(os.path.join(d, "model.safetensors"), llama_to_hf(llama_random(m), m),
                      opts.get("--dtype", "F32"), {"format": "pt"})


def cmd_loss(shard, B, T, dirs):
    for d in dirs:
        print(f"{loss_of(d, shard, B, T):.9f}")


def loss_of(d, shard, B, T):
    import torch
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    cfg = json.load(open(os.path.join(d, "config.json")))
    raw = open(shard, "rb").read()
    tokens = np.frombuffer(raw[1024:], dtype="<u2").astype(np.int64)
    buf = torch.as_tensor(tokens[:B * T + 1])
    inputs, targets = buf[:-1].view(B, T), buf[1:].view(B, T)
    if cfg["model_type"] == "llama":
        import compare_llama_with_pytorch as ref
        m = llama_m(cfg)
        p = {k: torch.tensor(v, dtype=torch.float64)
             for k, v in llama_from_hf(read_dir(d), m).items()}
        logits = ref.llama_logits(p, inputs, m)
    else:
        import compare_with_pytorch as ref
        m = dict(maxT=cfg["n_positions"], V=cfg["vocab_size"], L=cfg["n_layer"],
                 NH=cfg["n_head"], C=cfg["n_embd"])
        p = {k: torch.tensor(v, dtype=torch.float64) for k, v in from_hf(read_dir(d), m).items()}
        logits = ref.gpt2_logits(p, inputs, m)
    loss = torch.nn.functional.cross_entropy(logits.reshape(-1, m["V"]), targets.reshape(-1))
    return loss.item()


def alike(a, b):
    """Equal, floats within float32 rounding (a model file keeps them as float32)."""
    if isinstance(a, dict) and isinstance(b, dict):
        return a.keys() == b.keys() and all(alike(a[k], b[k]) for k in a)
    if isinstance(a, float) or isinstance(b, float):
        return isinstance(a, (int, float)) and abs(a - b) <= 1e-6 * abs(b)
    return a == b


def cmd_same(d, llmc, bf16):
    family, m, params = read_model_file(llmc)
    llama = family == "llama"
    hf = (llama_from_hf if llama else from_hf)(read_dir(d), m)
    config = os.path.join(d, "config.json")
    if os.path.isdir(d) and os.path.exists(config):
        cfg, want = json.load(open(config)), (llama_config if llama else gpt2_config)(m)
        wrong = [k for k in want if not alike(cfg.get(k), want[k])]
        if wrong:
            sys.exit(f"{config}: {wrong} differ from the model's {[want[k] for k in wrong]}")
    for name, _ in (llama_shapes if llama else param_shapes)(m):
        want = params[name]
        if bf16:
            want = from_bf16_bits(to_bf16_bits(want)).reshape(want.shape)
        got = hf[name]
        if got.shape != want.shape or not np.array_equal(got.view("<u4"), want.view("<u4")):
            diff = "shape" if got.shape != want.shape else f"max |diff| {np.abs(got - want).max()}"
            sys.exit(f"{name}: {d} differs from {llmc} ({diff})")
    print(f"{d} equals {llmc}: {len(params)} tensors, bit for bit")


def cmd_bad(kind, d, out):
    """A copy of DIR/model.safetensors with one defect, each one a check of the reader."""
    raw = open(os.path.join(d, "model.safetensors"), "rb").read()
    (n,) = struct.unpack("<Q", raw[:8])
    header = json.loads(raw[8:8 + n])
    data = raw[8 + n:]
    names = [k for k in header if k != "__metadata__"]
    first = min(names, key=lambda k: header[k]["data_offsets"][0])
    second = sorted(names, key=lambda k: header[k]["data_offsets"][0])[1]
    if kind == "header_length":  # the length runs past the end of the file
        open(out, "wb").write(struct.pack("<Q", len(raw)) + raw[8:])
        return
    if kind == "overlap":  # the second tensor starts inside the first
        b, e = header[second]["data_offsets"]
        header[second]["data_offsets"] = [b - 4, e - 4]
    elif kind == "out_of_range":  # the last tensor ends past the data
        last = max(names, key=lambda k: header[k]["data_offsets"][1])
        b, e = header[last]["data_offsets"]
        header[last]["data_offsets"] = [b + 8, e + 8]
    elif kind == "dtype":
        header[first]["dtype"] = "F17"
    elif kind == "missing":
        del header["transformer.h.1.mlp.c_fc.bias"]
    elif kind == "nan":  # element (0, 33) of a Conv1D weight, stored (in, out)
        b = header["transformer.h.0.mlp.c_fc.weight"]["data_offsets"][0] + 4 * 33
        data = data[:b] + struct.pack("<f", float("nan")) + data[b + 4:]
    elif kind == "shape":  # shape and bytes agree, but not with the model
        h = header["transformer.h.0.attn.c_proj.weight"]
        h["shape"] = [h["shape"][1] // 2, h["shape"][0] * 2]
    text = json.dumps(header).encode()
    text += b" " * (-len(text) % 8)
    open(out, "wb").write(struct.pack("<Q", len(text)) + text + data)


def cmd_config(d, key, value):
    path = os.path.join(d, "config.json")
    cfg = json.load(open(path))
    cfg[key] = json.loads(value)
    json.dump(cfg, open(path, "w"), indent=2)


def main(argv):
    cmd, args = argv[1], argv[2:]
    positional, opts, i = [], {}, 0
    while i < len(args):
        if args[i] == "--dtype":
            opts["--dtype"] = args[i + 1]
            i += 1
        elif args[i].startswith("--"):
            opts[args[i]] = True
        else:
            positional.append(args[i])
        i += 1
    if cmd == "write":
        cmd_write(positional[0], opts)
    elif cmd == "write-llama":
        cmd_write_llama(positional[0], opts)
    elif cmd == "loss":
        cmd_loss(positional[0], int(positional[1]), int(positional[2]), positional[3:])
    elif cmd == "same":
        cmd_same(positional[0], positional[1], "--bf16" in opts)
    elif cmd == "bad":  # bad DIR OUT_PREFIX KIND...: OUT_PREFIX_KIND/ with config.json
        d, prefix = positional[:2]
        for kind in positional[2:]:
            os.makedirs(f"{prefix}_{kind}")
            shutil.copy(os.path.join(d, "config.json"), f"{prefix}_{kind}")
            cmd_bad(kind, d, os.path.join(f"{prefix}_{kind}", "model.safetensors"))
    elif cmd == "config":
        cmd_config(*positional[:3])
    else:
        sys.exit(f"unknown command {cmd}")


if __name__ == "__main__":
    main(sys.argv)
