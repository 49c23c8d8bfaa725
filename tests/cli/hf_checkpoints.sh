#!/usr/bin/env bash
# Hugging Face checkpoints in and out (src/checkpoint/hf_checkpoint.hpp): a GPT-2 and a Llama
# model directory written by the tests' own writer (tests/reference/hf_models.py: numpy, no
# transformers) load with --init-from and give the float64 PyTorch references' losses; what every
# layout loads (serial, TP 2, TP 2 x PP 2) is the directory's tensors bit for bit, in F32, BF16
# and F16, from one file, a sharded index or a bare .safetensors file; --save-hf writes what the
# model file of the same run holds (F32 bit for bit, BF16 rounded), from any layout, and loads
# back; every bad file stops with one error line naming the file and the tensor, exit 2; the model
# flags not given take a Mixtral directory's config.json values; and a Qwen2-MoE config.json of
# qkv_bias false makes a model without attention biases, as transformers does.
source "$(dirname "$0")/common.sh"
SOURCE_DIR=${MPIFORMER_SOURCE_DIR:?set MPIFORMER_SOURCE_DIR to the source tree}
export OMP_NUM_THREADS=1
hf() { "$PY" "$SOURCE_DIR/tests/reference/hf_models.py" "$@"; }

make_shard "$WORK/shard.bin" 2000 299
# --peak-gflops: no GEMM measurement at start-up (MFU is not what this test looks at).
DATA=(--data "$WORK/shard.bin" --val-data none --batch 4 --seq-len 16 --peak-gflops 1)
# One step at lr 0 leaves the parameters as loaded, so --save-llmc writes what was loaded.
ARGS=("${DATA[@]}" --steps 1 --lr 0)
# train NAME RANKS ARGS...: the trainer's output in NAME.log.
train() {
  local name=$1 ranks=$2
  shift 2
  timeout 120 "$MPIEXEC" -n "$ranks" "$TRAIN" "${DATA[@]}" "$@" >"$WORK/$name.log" 2>&1 ||
    { bad "$name: exit status $?"; cat "$WORK/$name.log"; }
}
loss_of() { sed -nE 's/^step 1\/1 \| loss ([0-9.]+) .*/\1/p' "$WORK/$1.log"; }
# same WHAT DIR LLMC [--bf16]: the directory's tensors are the llm.c file's.
same() {
  local what=$1
  shift
  if out=$(hf same "$@" 2>&1); then ok "$what: $out"; else bad "$what: $out"; fi
}

# near WHAT GOT REF: the reference is float64; the trainer's float32 sums and printed 6 decimals
# stay within 1e-5 of it.
near() {
  if "$PY" -c "import sys; a, b = float('$2'), float('$3'); sys.exit(abs(a - b) > 1e-5 * b)"; then
    ok "$1: loss from the Hugging Face directory $2, PyTorch float64 $3"
  else
    bad "$1: loss from the Hugging Face directory $2, PyTorch float64 $3"
  fi
}

# 1. A directory (config.json, model.safetensors) against the PyTorch reference, then layouts.
hf write "$WORK/gpt"
hf write-llama "$WORK/llama"
refs=($(hf loss "$WORK/shard.bin" 4 16 "$WORK/gpt" "$WORK/llama"))
train serial 1 --steps 1 --lr 0 --init-from "$WORK/gpt" --save-llmc "$WORK/serial.bin"
got=$(loss_of serial)
near "GPT-2" "$got" "${refs[0]}"
same "serial load" "$WORK/gpt" "$WORK/serial.bin"
train tp2 2 --steps 1 --lr 0 --init-from "$WORK/gpt" --tp 2 --save-llmc "$WORK/tp2.bin"
same "TP 2 load" "$WORK/gpt" "$WORK/tp2.bin"
# TP 2 x PP 2 loads and saves (bf16) in one run.
train tp2pp2 4 --steps 1 --lr 0 --init-from "$WORK/gpt" --tp 2 --pp 2 --save-llmc "$WORK/tp2pp2.bin" \
  --save-hf "$WORK/saved_bf16" --save-hf-dtype bf16
same "TP 2 x PP 2 load" "$WORK/gpt" "$WORK/tp2pp2.bin"
[ "$(loss_of tp2)" = "$got" ] && [ "$(loss_of tp2pp2)" = "$got" ] &&
  ok "TP 2 and TP 2 x PP 2 give the serial loss $got" ||
  bad "losses differ: serial $got, TP 2 $(loss_of tp2), TP 2 x PP 2 $(loss_of tp2pp2)"

# 2. Other dtypes and forms: BF16 sharded without the "transformer." prefix and with a tied
# lm_head.weight; F16; a bare .safetensors file with its sizes given as flags.
hf write "$WORK/bf16" --dtype BF16 --sharded --bare --lm-head
train bf16 2 --steps 1 --lr 0 --init-from "$WORK/bf16" --tp 2 --save-llmc "$WORK/bf16.bin"
same "BF16 sharded index, bare names, lm_head (TP 2)" "$WORK/bf16" "$WORK/bf16.bin"
hf write "$WORK/f16" --dtype F16
train f16 1 --steps 1 --lr 0 --init-from "$WORK/f16/model.safetensors" --save-llmc "$WORK/f16.bin"
same "F16 .safetensors file, config.json beside it" "$WORK/f16" "$WORK/f16.bin"
mkdir "$WORK/bare" && cp "$WORK/gpt/model.safetensors" "$WORK/bare/"
train bare 1 --steps 1 --lr 0 --init-from "$WORK/bare/model.safetensors" --layers 2 --heads 4 --dim 32 --vocab 300 \
  --max-seq-len 32 --save-llmc "$WORK/bare.bin"
cmp -s "$WORK/bare.bin" "$WORK/serial.bin" && ok "a .safetensors file without config.json, sizes from flags" ||
  bad "a .safetensors file with flags loads other values"

# 3. --save-hf from TP 2 after training (F32) and from TP 2 x PP 2 (BF16, above), checked against
# the run's llm.c file; the saved directory loads back to the same model.
train save_tp2 2 --init-from "$WORK/gpt" --tp 2 --steps 2 --lr 1e-2 --save-llmc "$WORK/trained.bin" \
  --save-hf "$WORK/saved"
same "--save-hf f32 (TP 2)" "$WORK/saved" "$WORK/trained.bin"
same "--save-hf bf16 (TP 2 x PP 2)" "$WORK/saved_bf16" "$WORK/tp2pp2.bin" --bf16
train reload 1 --steps 1 --lr 0 --init-from "$WORK/saved" --save-llmc "$WORK/reloaded.bin"
cmp -s "$WORK/reloaded.bin" "$WORK/trained.bin" && ok "the saved directory loads back bit for bit" ||
  bad "the saved directory loads back other values"
grep -q '"_from_model_config": true' "$WORK/saved/generation_config.json" &&
  ok "generation_config.json written" || bad "generation_config.json missing"
if [ -n "$GENERATE" ]; then
  for src in saved trained.bin; do
    timeout 60 "$GENERATE" --init-from "$WORK/$src" --prompt-tokens 1,2,3 --max-new-tokens 4 \
      --logits-out "$WORK/$src.logits" >/dev/null 2>"$WORK/$src.gen" || cat "$WORK/$src.gen"
  done
  cmp -s "$WORK/saved.logits" "$WORK/trained.bin.logits" &&
    ok "mpiformer-generate: the saved directory's logits are the llm.c file's" ||
    bad "mpiformer-generate: logits differ between the directory and the llm.c file"
fi

# 4. Llama (LlamaForCausalLM's names; GQA; llama3 rope scaling): untied on one rank against the
# PyTorch reference, saved and compared; tied, BF16, on TP 4 (each of the 2 kv heads on 2 ranks).
train llama 1 --steps 1 --lr 0 --init-from "$WORK/llama" --save-llmc "$WORK/llama.bin" \
  --save-hf "$WORK/llama_saved"
near "Llama" "$(loss_of llama)" "${refs[1]}"
same "Llama load" "$WORK/llama" "$WORK/llama.bin"
same "Llama --save-hf" "$WORK/llama_saved" "$WORK/llama.bin"
hf write-llama "$WORK/llama_tied" --tied --dtype BF16
train llama_tied 4 --steps 1 --lr 0 --tp 4 --init-from "$WORK/llama_tied" \
  --save-llmc "$WORK/llama_tied.bin" --save-hf "$WORK/llama_tied_saved" --save-hf-dtype bf16
same "tied Llama, BF16, TP 4 load (kv heads replicated)" "$WORK/llama_tied" "$WORK/llama_tied.bin"
same "tied Llama, TP 4 --save-hf bf16" "$WORK/llama_tied_saved" "$WORK/llama_tied.bin" --bf16

# 5. Bad files and configs: one error line naming the file and the tensor (or key), exit 2.
hf bad "$WORK/gpt" "$WORK/bad" header_length overlap out_of_range dtype missing shape nan
st="bad_[a-z_]+/model.safetensors"
expect_error "header length past the end" 2 "$st: the header length [0-9]+ runs past the end" -- \
  --init-from "$WORK/bad_header_length" "${ARGS[@]}"
expect_error "overlapping offsets" 1 "$st: tensor transformer.wpe.weight: its data_offsets overlap" -- \
  --init-from "$WORK/bad_overlap" "${ARGS[@]}"
expect_error "offsets past the data" 1 "$st: tensor transformer.ln_f.bias: data_offsets .* run past" -- \
  --init-from "$WORK/bad_out_of_range" "${ARGS[@]}"
expect_error "unknown dtype" 1 "$st: tensor transformer.wte.weight: unknown dtype \"F17\"" -- \
  --init-from "$WORK/bad_dtype" "${ARGS[@]}"
expect_error "tensor missing" 2 "bad_missing: tensor transformer.h.1.mlp.c_fc.bias is missing" -- \
  --init-from "$WORK/bad_missing" "${ARGS[@]}"
expect_error "wrong shape" 1 "$st: tensor transformer.h.0.attn.c_proj.weight has shape \(16, 64\)" -- \
  --init-from "$WORK/bad_shape" "${ARGS[@]}"
expect_error "a NaN weight (TP 2: one rank reads it)" 2 \
  "$st: tensor transformer.h.0.mlp.c_fc.weight: element \(0, 33\) is not finite" -- \
  --init-from "$WORK/bad_nan" --tp 2 "${ARGS[@]}"
cp -r "$WORK/gpt" "$WORK/bad_config" && hf config "$WORK/bad_config" n_embd 64
expect_error "config disagrees with the tensors" 2 \
  "bad_config/model.safetensors: tensor transformer.wte.weight has shape \(300, 32\) but config .*bad_config/config.json" -- \
  --init-from "$WORK/bad_config" "${ARGS[@]}"
# A config of fewer layers than the file holds: refused, not loaded as the first layer alone.
cp -r "$WORK/gpt" "$WORK/bad_layers" && hf config "$WORK/bad_layers" n_layer 1
expect_error "config of fewer layers than the file" 1 \
  "bad_layers/model.safetensors: tensor transformer.h.1.[a-z_.]+ is not a tensor of the model of config" -- \
  --init-from "$WORK/bad_layers" "${ARGS[@]}"
cp -r "$WORK/gpt" "$WORK/bad_act" && hf config "$WORK/bad_act" activation_function '"relu"'
expect_error "config of another activation" 1 "bad_act/config.json: activation_function is \"relu\"" -- \
  --init-from "$WORK/bad_act" "${ARGS[@]}"
expect_error "flags disagree with config.json" 1 "--dim 64 disagrees with config .*config.json's n_embd 32" -- \
  --init-from "$WORK/gpt" --dim 64 "${ARGS[@]}"
hf write "$WORK/bad_head" --lm-head-differs
expect_error "untied lm_head.weight" 2 "bad_head/model.safetensors: tensor lm_head.weight differs from transformer.wte.weight" -- \
  --init-from "$WORK/bad_head" "${ARGS[@]}"
cp -r "$WORK/llama" "$WORK/bad_rope" && hf config "$WORK/bad_rope" rope_scaling '{"rope_type": "linear", "factor": 2.0}'
expect_error "Llama: a rope scaling other than llama3" 1 "bad_rope/config.json: rope_scaling's rope_type is \"linear\"; this trainer computes" -- \
  --init-from "$WORK/bad_rope" "${ARGS[@]}"
# Keys that change the maths and are not computed here are refused by name.
cp -r "$WORK/llama" "$WORK/softcap" && hf config "$WORK/softcap" final_logit_softcapping 30.0
expect_error "a config key this trainer does not compute" 1 "softcap/config.json: final_logit_softcapping is set; this trainer does not compute it" -- \
  --init-from "$WORK/softcap" "${ARGS[@]}"
cp -r "$WORK/llama" "$WORK/qwen_window" && hf config "$WORK/qwen_window" model_type '"qwen2"' &&
  hf config "$WORK/qwen_window" use_sliding_window true
expect_error "Qwen2 with its sliding window on" 1 "qwen_window/config.json: use_sliding_window is true" -- \
  --init-from "$WORK/qwen_window" "${ARGS[@]}"
cp -r "$WORK/llama" "$WORK/gemma" && hf config "$WORK/gemma" model_type '"gemma"'
expect_error "a family this trainer does not run" 1 "gemma/config.json: model_type is \"gemma\"; this trainer runs these model_types: gpt2,llama,qwen2,mistral,phi3,qwen3,olmo2" -- \
  --init-from "$WORK/gemma" "${ARGS[@]}"
expect_error "Llama: --kv-heads disagrees with config.json" 1 "--kv-heads 4 disagrees with config .*num_key_value_heads 2" -- \
  --init-from "$WORK/llama" --arch llama --kv-heads 4 "${ARGS[@]}"
expect_error "--save-hf over an existing directory" 1 "--save-hf .*saved: already exists" -- \
  --init-from "$WORK/gpt" --save-hf "$WORK/saved" "${ARGS[@]}"
cp -r "$WORK/gpt" "$WORK/far_bos" && hf config "$WORK/far_bos" bos_token_id 400
expect_error "config.json's bos_token_id outside the vocabulary" 1 \
  "the document token 400 \(config.json's bos_token_id\) is outside the model's vocabulary of 300" -- \
  --init-from "$WORK/far_bos" --doc-mask "${ARGS[@]}"

# 6. A Mixtral directory: the model flags not given take its config.json's values, so a flag given
# is read against its family (--moe-aux-coef needs no --arch, --arch mixtral no --experts).
train mixtral 1 --steps 1 --arch mixtral --layers 2 --heads 4 --kv-heads 2 --dim 32 --ffn-dim 48 \
  --vocab 300 --max-seq-len 32 --experts 4 --experts-per-token 2 --save-hf "$WORK/mixtral"
# mpiformer-bench --init-from times the directory's model (ci/bench_deepseek.sh's way): its line
# names the directory and gives its FLOP/token (a tiny model's, not the 124M preset's ~700 M).
if [ -n "${MPIFORMER_BENCH:-}" ]; then
  line=$(timeout 60 "$MPIFORMER_BENCH" --init-from "$WORK/mixtral" --batch 2 --seq-len 16 \
    --steps 3 --peak-gflops 1 2>&1 | grep -m1 '^mpiformer |')
  grep -qE '^mpiformer \| mixtral \| 2 x 16 \| .* \| 0\.[0-9] MFLOP/token$' <<<"$line" &&
    ok "bench --init-from a Mixtral directory: ${line%% | MFU*} ... ${line##* | }" ||
    bad "bench --init-from: $line"
  # --moe-a2a-chunks as the trainer takes it: the EP ranks' experts in groups, at most their count.
  line=$(timeout 60 "$MPIEXEC" -n 2 "$MPIFORMER_BENCH" --init-from "$WORK/mixtral" --batch 2 \
    --seq-len 16 --steps 3 --peak-gflops 1 --ep 2 --moe-a2a-chunks 2 2>&1 | grep -m1 '^mpiformer |')
  grep -qE '^mpiformer \| mixtral \| 2 x 16 \| ep2 x ' <<<"$line" &&
    ok "bench --ep 2 --moe-a2a-chunks 2: ${line%% | MFU*}" || bad "bench --moe-a2a-chunks 2: $line"
  expect_error_from "$MPIFORMER_BENCH" "bench: --moe-a2a-chunks over the local experts" 2 \
    "--moe-a2a-chunks 3 is more groups than the 2 experts each of the --ep 2 ranks holds; use at most 2" -- \
    --init-from "$WORK/mixtral" --batch 2 --seq-len 16 --steps 3 --peak-gflops 1 --ep 2 --moe-a2a-chunks 3
fi
for flags in "--moe-aux-coef 0.5" "--arch mixtral --moe-aux-coef 0.5"; do
  train mixtral_aux 1 --steps 1 --init-from "$WORK/mixtral" $flags
  grep -q "balance coefficient 0.5" "$WORK/mixtral_aux.log" &&
    ok "a Mixtral directory with $flags" || bad "a Mixtral directory with $flags: $(grep -m1 error: "$WORK/mixtral_aux.log")"
done
expect_error "--arch of another family than config.json's" 1 \
  "--arch llama disagrees with --init-from .*mixtral's model_type mixtral; drop --arch" -- \
  --init-from "$WORK/mixtral" --arch llama "${ARGS[@]}"
expect_error "Mixtral: --experts disagrees with config.json" 1 \
  "--experts 8 disagrees with config .*num_local_experts 4" -- \
  --init-from "$WORK/mixtral" --arch mixtral --experts 8 "${ARGS[@]}"
# 7. Qwen2-MoE's qkv_bias false: transformers builds the attention without biases and leaves a
# file's bias tensors unused; so does the trainer (one warning naming them), and the model it
# saves (--save-hf, --save-llmc) has none: each loads back to the same loss, and the model with the
# biases (qkv_bias true, trained 2 steps so they are not zero) gives another.
train qwen2_moe 1 --steps 2 --lr 1e-2 --arch qwen2_moe --layers 2 --heads 4 --kv-heads 2 --dim 32 \
  --ffn-dim 48 --experts 4 --experts-per-token 2 --shared-expert-dim 40 --vocab 300 \
  --max-seq-len 32 --save-hf "$WORK/qwen2_moe"
cp -r "$WORK/qwen2_moe" "$WORK/no_bias" && hf config "$WORK/no_bias" qkv_bias false
train no_bias 2 --steps 1 --lr 0 --dp 2 --init-from "$WORK/no_bias" --save-hf "$WORK/no_bias_saved" \
  --save-llmc "$WORK/no_bias.bin"
train no_bias_hf 1 --steps 1 --lr 0 --init-from "$WORK/no_bias_saved"
train no_bias_llmc 1 --steps 1 --lr 0 --init-from "$WORK/no_bias.bin"
train with_bias 1 --steps 1 --lr 0 --init-from "$WORK/qwen2_moe"
[ "$(grep -c "config.json's qkv_bias is false, so the file's 6 Q, K and V bias tensors .* are not used" "$WORK/no_bias.log")" = 1 ] &&
  ok "qkv_bias false: one warning, the file's biases not used" || bad "qkv_bias false: $(grep -E '^(warning|error)' "$WORK/no_bias.log")"
grep -q '"qkv_bias": false' "$WORK/no_bias_saved/config.json" && ! grep -q 'q_proj.bias' "$WORK/no_bias_saved/model.safetensors" &&
  ! grep -q '^warning' "$WORK/no_bias_hf.log" && ok "qkv_bias false: --save-hf writes it and no biases" ||
  bad "qkv_bias false: the saved directory"
nb=$(loss_of no_bias)
[ -n "$nb" ] && [ "$(loss_of no_bias_hf)" = "$nb" ] && [ "$(loss_of no_bias_llmc)" = "$nb" ] &&
  [ "$(loss_of with_bias)" != "$nb" ] &&
  ok "qkv_bias false: loss $nb from the directory, its --save-hf and --save-llmc; $(loss_of with_bias) with the biases" ||
  bad "qkv_bias false: losses $nb, $(loss_of no_bias_hf) (--save-hf), $(loss_of no_bias_llmc) (--save-llmc), $(loss_of with_bias) (with the biases)"
if [ -n "$GENERATE" ]; then
  expect_error_from "$GENERATE" "generate: a .safetensors file without config.json" 1 \
    "bare/model.safetensors has no config.json beside it" -- --init-from "$WORK/bare/model.safetensors"
fi
finish
