#!/usr/bin/env bash
# mpiformer-plan: calibration on 1 and 2 ranks writes a machine file it reads back; --json parses
# and lists only layouts that divide and fit, best first; the command it prints for the best (and
# for each of the top five) passes the trainer's --dry-run; --evaluate predicts one layout, and
# an impossible one is an error naming why; a plan from an llm.c model file and from a Hugging Face
# config.json; bad machine files and flags are one error line, exit 2, on every rank.
source "$(dirname "$0")/common.sh"
PLAN=${MPIFORMER_PLAN:?set MPIFORMER_PLAN to the mpiformer-plan binary}

# Calibration (--quick: fewer sizes): on 1 rank, and on 2 (links and collectives measured).
for n in 1 2; do
  out=$(timeout 120 "$MPIEXEC" -n $n "$PLAN" --calibrate --quick --machine "$WORK/m$n.json" \
    --name test$n 2>&1)
  if [ $? -eq 0 ] && "$PY" - "$WORK/m$n.json" "$n" <<'PYEOF'; then
import json, sys
m = json.load(open(sys.argv[1])); n = int(sys.argv[2])
assert m["name"] == "test%d" % n and m["kind"] == "cpu" and m["devices_per_node"] >= n
r = m["device"]["precisions"]["fp32"]
assert r["peak_gflops"] > 0 and all(p["gflops"] > 0 for p in r["gemm"])
assert [p["gflop"] for p in r["gemm"]] == sorted(p["gflop"] for p in r["gemm"])
assert all(a["forward_gflops"] > 0 and a["backward_gflops"] > 0 for a in r["attention"])
assert m["device"]["memory_bandwidth_gbs"] > 0 and m["device"]["process_mb"] > 0
assert m["intra_node"]["bandwidth_gbs"] > 0 and m["intra_node"]["latency_us"] >= 0
ops = {(c["op"], c["ranks"]) for c in m["collectives"]}
assert ops == ({("allreduce", 2), ("allgather", 2), ("alltoall", 2)} if n == 2 else set()), ops
PYEOF
    ok "calibration on $n rank(s) writes a valid machine file"
  else
    bad "calibration on $n rank(s): $out"
  fi
done
expect_error_from "$PLAN" "calibrate never overwrites" 1 "m1.json.*exists" -- \
  --calibrate --quick --machine "$WORK/m1.json"
M=$WORK/m2.json

# A plan for 4 ranks of a small GPT-2: JSON, every candidate runs and fits, best first.
model=(--layers 4 --heads 4 --dim 64 --vocab 512 --max-seq-len 64)
job=(--machine "$M" "${model[@]}" --batch 8 --seq-len 64 --nodes 1 --ranks-per-node 4)
if "$PLAN" "${job[@]}" --json --top 1000 >"$WORK/plan.json" 2>"$WORK/plan.err" &&
  "$PY" - "$WORK/plan.json" >"$WORK/commands" <<'PYEOF'; then
import json, sys
p = json.load(open(sys.argv[1]))
c = p["candidates"]
assert p["machine"]["name"] == "test2" and len(c) > 10, len(c)
steps = [x["predicted"]["step_ms"] for x in c]
assert steps == sorted(steps)
for x in c:
    assert x["fits"] and x["tp"] * x["cp"] * x["pp"] * x["dp"] == 4
    assert 8 % x["dp"] == 0 and (8 // x["dp"]) == x["microbatches"] * x["micro_batch_size"]
    assert x["dp"] % x["ep"] == 0 and 4 % x["tp"] == 0 and 4 % (x["pp"] * x["virtual_stages"]) == 0
    assert not x["sequence_parallel"] or x["tp"] > 1
    pr = x["predicted"]
    assert pr["step_ms"] > 0 and pr["peak_mb_per_rank"] > 0 and 0 <= pr["bubble"] < 1
    parts = sum(pr[k] for k in ("compute_ms", "bubble_ms", "tp_ms", "cp_ms", "ep_ms", "dp_ms", "optimizer_ms"))
    assert abs(parts - pr["step_ms"]) <= 1e-4 * pr["step_ms"]  # each printed to 6 digits
    assert x["command"].startswith("mpiexec -n 4 mpiformer-train ")
assert any(x["pp"] > 1 for x in c) and any(x["tp"] > 1 for x in c) and any(x["cp"] > 1 for x in c)
# The best five layouts' commands, one a line, for --dry-run.
for x in c[:5]:
    print(x["command"].split(" mpiformer-train ", 1)[1])
PYEOF
  ok "--json lists $(grep -o '"tp"' "$WORK/plan.json" | wc -l) layouts that divide and fit, best first"
else
  bad "--json: $(cat "$WORK/plan.err") $(head -c 400 "$WORK/plan.json")"
fi
# Progress goes to a terminal's stderr only: captured, stderr stays empty.
if [ -s "$WORK/plan.err" ]; then
  bad "a search's stderr, not a terminal, is not empty: $(head -c 300 "$WORK/plan.err")"
else
  ok "no progress lines on a stderr that is not a terminal"
fi
if command -v script >/dev/null; then
  if script -qec "$(printf '%q ' "$PLAN" "${job[@]}" --top 3)" /dev/null 2>&1 | grep -q 'planning: '; then
    ok "progress on a terminal"
  else
    bad "no progress on a terminal"
  fi
fi
# The search prunes what it would not show, and says how many; --top is bounded.
if "$PLAN" "${job[@]}" --top 2 | grep -q ' not simulated (a lower bound of each step is slower'; then
  ok "the report counts the layouts a bound left unsimulated"
else
  bad "no count of unsimulated layouts"
fi
expect_error_from "$PLAN" "--top past the bound" 1 "--top 1001 is more layouts than a plan shows \(at most 1000" -- \
  "${job[@]}" --top 1001
expect_error_from "$PLAN" "--top with --evaluate" 1 "--evaluate predicts one; drop --top" -- \
  "${job[@]}" --evaluate tp=2,pp=2,dp=1,schedule=1f1b,microbatches=4 --top 3
# The printed commands pass the trainer's --dry-run.
while IFS= read -r line; do
  read -ra args <<<"$line"
  if out=$(timeout 60 "$MPIEXEC" -n 4 "$TRAIN" "${args[@]}" --steps 2 --dry-run 2>&1); then
    ok "dry run of the planned: $line"
  else
    bad "the planned command fails --dry-run: $line: $(grep error: <<<"$out")"
  fi
done <"$WORK/commands"

# The text report: a table, why #1 wins, what was excluded, the commands.
text=$("$PLAN" "${job[@]}" 2>&1)
if grep -q '^why #1' <<<"$text" && grep -q '^  mpiexec -n 4 mpiformer-train' <<<"$text" &&
  grep -q '^  srun --nodes=1 --ntasks-per-node=4' <<<"$text" && grep -q '^excluded' <<<"$text"; then
  ok "the text report explains and prints the commands"
else
  bad "text report: $text"
fi

# --evaluate: one layout's terms; an impossible one is an error naming why.
out=$("$PLAN" "${job[@]}" --evaluate tp=2,pp=2,dp=1,schedule=1f1b,microbatches=4 --json)
if "$PY" -c 'import json,sys; c=json.loads(sys.argv[1])["candidates"]; assert len(c)==1 and c[0]["tp"]==2 and c[0]["microbatches"]==4' "$out"; then
  ok "--evaluate predicts the one layout"
else
  bad "--evaluate: $out"
fi
# --optimizer muon: Newton-Schulz's products and the broadcasts add to the optimizer term (the
# formula is test_plan's MuonOptimizerTermByHand), and the command it prints runs Muon.
adamw=$("$PLAN" "${job[@]}" --evaluate dp=4 --json)
muon=$("$PLAN" "${job[@]}" --evaluate dp=4 --json --optimizer muon)
line=$("$PY" -c 'import json,sys; a=json.loads(sys.argv[1])["candidates"][0]; m=json.loads(sys.argv[2])["candidates"][0]
assert m["predicted"]["optimizer_ms"] > a["predicted"]["optimizer_ms"], (a["predicted"], m["predicted"])
assert "--optimizer muon" in m["command"] and "--optimizer" not in a["command"]
print(m["command"].split(" mpiformer-train ", 1)[1])' "$adamw" "$muon")
read -ra args <<<"$line"
if [ -n "$line" ] && timeout 60 "$MPIEXEC" -n 4 "$TRAIN" "${args[@]}" --steps 1 --dry-run >/dev/null 2>&1; then
  ok "--optimizer muon: a larger optimizer term, and its command passes --dry-run"
else
  bad "--optimizer muon: $line $muon"
fi
# --zero-group node (HSDP) on 2 nodes x 2 ranks: the shards within a node take more memory than
# over all 4; the command it prints runs on two posed hosts (MPIFORMER_TEST_HOST) under --dry-run.
two=(--machine "$M" "${model[@]}" --batch 8 --seq-len 64 --nodes 2 --ranks-per-node 2)
flat=$("$PLAN" "${two[@]}" --evaluate dp=4,zero=1 --json)
node=$("$PLAN" "${two[@]}" --evaluate dp=4,zero=1,zero_group=node --json)
line=$("$PY" -c 'import json,sys; a=json.loads(sys.argv[1])["candidates"][0]; n=json.loads(sys.argv[2])["candidates"][0]
assert a["zero_group"] == "all" and n["zero_group"] == "node", (a, n)
assert n["predicted"]["peak_mb_per_rank"] > a["predicted"]["peak_mb_per_rank"], (a["predicted"], n["predicted"])
assert "--zero-group node" in n["command"] and "--zero-group" not in a["command"]
print(n["command"].split(" mpiformer-train ", 1)[1])' "$flat" "$node")
read -ra args <<<"$line"
if [ -n "$line" ] && timeout 60 "$MPIEXEC" -n 2 env MPIFORMER_TEST_HOST=h0 "$TRAIN" "${args[@]}" \
  --steps 1 --dry-run : -n 2 env MPIFORMER_TEST_HOST=h1 "$TRAIN" "${args[@]}" --steps 1 \
  --dry-run >/dev/null 2>&1; then
  ok "--evaluate zero_group=node: more memory than over all 4, and its command passes --dry-run on 2 hosts"
else
  bad "--evaluate zero_group=node: $line $node"
fi
expect_error_from "$PLAN" "--evaluate HSDP on one node" 1 "HSDP with each DP x CP group on one node" -- \
  "${job[@]}" --evaluate dp=4,zero=1,zero_group=node
expect_error_from "$PLAN" "--muon-ns-precision without muon" 1 \
  "--muon-ns-precision sets Muon.*pass --optimizer muon too" -- "${job[@]}" --muon-ns-precision bf16
expect_error_from "$PLAN" "--evaluate a layout that does not make the world" 1 \
  "cannot run: tp x cp x dp x pp = 2 is not the 4 ranks" -- "${job[@]}" --evaluate tp=2,dp=1
expect_error_from "$PLAN" "--evaluate TP across nodes" 1 "TP across nodes" -- \
  --machine "$M" "${model[@]}" --batch 8 --seq-len 64 --nodes 2 --ranks-per-node 2 --evaluate tp=4,dp=1
expect_error_from "$PLAN" "--evaluate more chunks than blocks" 2 "4 blocks over 8 pipeline chunks" -- \
  "${job[@]}" --evaluate pp=4,vp=2,schedule=interleaved,microbatches=8
expect_error_from "$PLAN" "--evaluate an unknown key" 1 "unknown key 'tensor'" -- \
  "${job[@]}" --evaluate tensor=2
# Sizes past any job's are refused by name: 65536 x 65536 wrapped an int to 0 and divided by it.
expect_error_from "$PLAN" "--evaluate sizes whose product is past the bound" 1 \
  "tp x cp = 4294967296 ranks, more than the 1048576" -- "${job[@]}" --evaluate tp=65536,cp=65536
expect_error_from "$PLAN" "--evaluate a key given twice" 1 "tp is given twice" -- \
  "${job[@]}" --evaluate tp=2,tp=4
expect_error_from "$PLAN" "--evaluate empty items" 1 "an empty item" -- "${job[@]}" --evaluate ,,,
expect_error_from "$PLAN" "--nodes x --ranks-per-node past the bound" 1 \
  "= 4294967296 ranks, more than the 1048576" -- --machine "$M" "${model[@]}" --batch 8 \
  --seq-len 64 --nodes 65536 --ranks-per-node 65536

# Which figures the plan used: a calibrated file says so; the DGX H100 data-sheet file says so,
# and that its attention rate is not this build's (one line).
if grep -q '"source": "calibrated"' "$M" && "$PLAN" "${job[@]}" --top 1 | grep -q '^machine figures: calibrated'; then
  ok "a calibrated machine file is named so in the report"
else
  bad "a calibrated machine file's source is not reported"
fi
H100=$(dirname "$0")/../../docs/machines/dgx-h100.json
out=$("$PLAN" --machine "$H100" "${model[@]}" --batch 8 --seq-len 64 --nodes 1 --precision bf16 --top 1 2>&1)
if grep -q '^machine figures: from a data sheet, not measured' <<<"$out" &&
  [ "$(grep -c "^note: the file's attention rate, 346 TFLOP/s (bf16), is not this build's" <<<"$out")" -eq 1 ]; then
  ok "the data-sheet file is named so, with one line on its attention rate"
else
  bad "data-sheet report: $(head -5 <<<"$out")"
fi

# On a GPU the trainer sums bf16 TP payloads on host copies (over PCIe, the file's host_link):
# slower than fp32's sums over NVLink, as the trainer is; a GPU file without a host link refused.
tp2=(--machine "$H100" "${model[@]}" --batch 8 --seq-len 64 --nodes 1 --precision bf16
  --evaluate tp=2,dp=4 --json)
tp_ms() { "$PY" -c "import json,sys; print(json.load(sys.stdin)['candidates'][0]['predicted']['tp_ms'])"; }
fp32_tp=$("$PLAN" "${tp2[@]}" | tp_ms) && bf16_tp=$("$PLAN" "${tp2[@]}" --tp-comm-dtype bf16 | tp_ms) &&
  "$PY" -c "import sys; sys.exit(not $bf16_tp > $fp32_tp > 0)" &&
  ok "bf16 TP sums on a GPU cross the host link: $bf16_tp ms against fp32's $fp32_tp" ||
  bad "bf16 TP sums on a GPU: ${bf16_tp:-?} ms against fp32's ${fp32_tp:-?}"
"$PY" -c "import json; m=json.load(open('$H100')); del m['host_link']; json.dump(m, open('$WORK/nohost.json','w'))"
expect_error_from "$PLAN" "bf16 sums on a GPU file without a host link" 2 \
  "--tp-comm-dtype bf16: on a GPU the trainer sums bf16 on host copies, and machine dgx-h100 \(data sheet\) gives no host_link.*or plan --tp-comm-dtype fp32" -- \
  --machine "$WORK/nohost.json" "${model[@]}" --batch 8 --seq-len 64 --nodes 1 --precision bf16 \
  --tp-comm-dtype bf16

# Models from files: an llm.c model file (the trainer writes one) and a config.json.
if timeout 60 "$TRAIN" "${model[@]}" --batch 2 --seq-len 16 --steps 1 --val-every 0 \
    --save-llmc "$WORK/tiny.bin" >/dev/null 2>&1 &&
  "$PLAN" --machine "$M" --model "$WORK/tiny.bin" --batch 8 --seq-len 64 --nodes 1 \
    --ranks-per-node 2 | grep -q "init-from $WORK/tiny.bin"; then
  ok "plans an llm.c model file"
else
  bad "an llm.c model file"
fi
cat >"$WORK/config.json" <<'JSON'
{"model_type": "llama", "architectures": ["LlamaForCausalLM"], "hidden_size": 64,
 "intermediate_size": 160, "num_hidden_layers": 4, "num_attention_heads": 4,
 "num_key_value_heads": 2, "vocab_size": 512, "max_position_embeddings": 128,
 "rms_norm_eps": 1e-5, "rope_theta": 10000.0, "tie_word_embeddings": false}
JSON
line=$("$PLAN" --machine "$M" --model "$WORK/config.json" --batch 8 --seq-len 64 --nodes 1 \
  --ranks-per-node 2 | sed -n 's/^  mpiexec -n 2 mpiformer-train //p')
read -ra args <<<"$line"
if [ -n "$line" ] && grep -q -- "--arch llama" <<<"$line" &&
  timeout 60 "$MPIEXEC" -n 2 "$TRAIN" "${args[@]}" --steps 1 --dry-run >/dev/null 2>&1; then
  ok "plans a Hugging Face config.json; its command passes --dry-run"
else
  bad "config.json: $line"
fi

# A deepseek_v3 config.json with one multi-token prediction module (num_nextn_predict_layers 1):
# planned with it by default (the trainer's --mtp), its block, eh_proj and head pass in the step
# and its parameters, optimizer state and activations in the peak; --mtp 0 plans without it and
# says so in the command; more modules than the file's are refused.
mkdir -p "$WORK/ds"
cat >"$WORK/ds/config.json" <<'JSON'
{"model_type": "deepseek_v3", "architectures": ["DeepseekV3ForCausalLM"], "hidden_size": 64,
 "intermediate_size": 96, "moe_intermediate_size": 16, "num_hidden_layers": 3,
 "num_attention_heads": 4, "num_key_value_heads": 4, "n_shared_experts": 1,
 "n_routed_experts": 8, "routed_scaling_factor": 2.5, "q_lora_rank": 32, "kv_lora_rank": 16,
 "qk_nope_head_dim": 16, "qk_rope_head_dim": 8, "v_head_dim": 16, "n_group": 2, "topk_group": 1,
 "num_experts_per_tok": 2, "first_k_dense_replace": 1, "norm_topk_prob": true,
 "hidden_act": "silu", "max_position_embeddings": 64, "rms_norm_eps": 1e-6, "rope_theta": 10000.0,
 "vocab_size": 512, "tie_word_embeddings": false, "scoring_func": "sigmoid",
 "topk_method": "noaux_tc", "num_nextn_predict_layers": 1}
JSON
ds=(--machine "$M" --model "$WORK/ds/config.json" --batch 8 --seq-len 64 --nodes 1
  --ranks-per-node 2 --evaluate dp=2 --json)
if "$PLAN" "${ds[@]}" >"$WORK/ds1.json" && "$PLAN" "${ds[@]}" --mtp 0 >"$WORK/ds0.json" &&
  out=$("$PY" - "$WORK/ds1.json" "$WORK/ds0.json" <<'PYEOF'
import json, sys
one, zero = (json.load(open(f))["candidates"][0] for f in sys.argv[1:])
p1, p0 = one["predicted"], zero["predicted"]
assert p1["step_ms"] > p0["step_ms"] and p1["peak_mb_per_rank"] > p0["peak_mb_per_rank"], (p1, p0)
assert "--mtp 0" in zero["command"] and "--mtp" not in one["command"], (one, zero)
print("step %.3f -> %.3f ms, peak %.1f -> %.1f MB" % (p0["step_ms"], p1["step_ms"],
      p0["peak_mb_per_rank"], p1["peak_mb_per_rank"]))
PYEOF
  ); then
  ok "plans a deepseek_v3 config.json's multi-token prediction module (--mtp 0 -> 1: $out)"
else
  bad "deepseek_v3 with its module: $(head -c 300 "$WORK/ds1.json")"
fi
expect_error_from "$PLAN" "--mtp past the file's modules" 1 \
  "--mtp 2: the model has 1 multi-token prediction modules.*pass --mtp 1 or less" -- "${ds[@]}" --mtp 2
# No trainer flag sets deepseek_v3's latent attention: its commands take the model --init-from the
# config's directory, and say that the directory must hold the weights; the llama config.json above
# keeps its flags.
out=$("$PLAN" --machine "$M" --model "$WORK/ds/config.json" --batch 8 --seq-len 64 --nodes 1 \
  --ranks-per-node 2 --evaluate dp=2)
if grep -q -- "mpiformer-train --init-from $WORK/ds --batch" <<<"$out" &&
  grep -q "init-from $WORK/ds, which must hold the model's weights" <<<"$out" &&
  ! grep -q -- "--arch" <<<"$out" && grep -q -- "--arch llama" <<<"$line" &&
  ! grep -q -- "--init-from" <<<"$line"; then
  ok "a deepseek_v3 config.json is planned --init-from its directory, a llama one with flags"
else
  bad "deepseek_v3 config.json's command: $out"
fi

# Bad machine files and flags: one error line, exit 2, on every rank.
bad_machine() {  # NAME PATTERN PYTHON-EDIT [FLAGS...]
  "$PY" -c "import json,sys; m=json.load(open('$M')); $3; json.dump(m, open('$WORK/bad.json','w'))"
  expect_error_from "$PLAN" "$1" 2 "$2" -- --machine "$WORK/bad.json" "${model[@]}" --batch 8 \
    --seq-len 64 "${@:4}"
}
bad_machine "a machine file without a key" "intra_node is missing" "del m['intra_node']"
bad_machine "a negative bandwidth" "inter_node.bandwidth_gbs must be positive" "m['inter_node']['bandwidth_gbs'] = -5"
bad_machine "an unknown precision" "precisions.fp8 is not a precision" \
  "m['device']['precisions']['fp8'] = m['device']['precisions']['fp32']"
bad_machine "a curve that does not ascend" "gemm\[1\].gflop must ascend" \
  "g = m['device']['precisions']['fp32']['gemm']; g[1]['gflop'] = g[0]['gflop']"
# Each figure has a ceiling, a count is whole, and an unknown (misspelt) key is named.
bad_machine "a huge devices_per_node" "devices_per_node must be an integer in 1..1024, got 1e\+10" \
  "m['devices_per_node'] = 1e10"
bad_machine "a fractional devices_per_node" "devices_per_node must be an integer in 1..1024, got 2.5" \
  "m['devices_per_node'] = 2.5"
bad_machine "a huge process_mb" "device.process_mb must not be negative, nor more than" \
  "m['device']['process_mb'] = 1e300"
bad_machine "an unknown source" 'source must be "data sheet" or "calibrated"' "m['source'] = 'guess'"
bad_machine "a misspelt optional key" "device.proces_mb is not a key of device" \
  "m['device']['proces_mb'] = m['device'].pop('process_mb')"
# The messages name a kind and a fix once ("must be an object, not a number"; "pass a machine
# file"), not twice over.
bad_machine "a key of another kind" "intra_node must be an object, not a number; see docs" \
  "m['intra_node'] = 3"
expect_error_from "$PLAN" "a directory for a machine file" 1 \
  "is a directory, not a regular file; pass a machine file \(--calibrate writes one" -- \
  --machine "$WORK" "${model[@]}" --batch 8 --seq-len 64
printf '{"name": "x",' >"$WORK/trunc.json"
expect_error_from "$PLAN" "a truncated machine file" 1 "invalid JSON" -- \
  --machine "$WORK/trunc.json" "${model[@]}" --batch 8 --seq-len 64
expect_error_from "$PLAN" "a missing machine file" 1 "nope.json" -- \
  --machine "$WORK/nope.json" "${model[@]}" --batch 8 --seq-len 64
expect_error_from "$PLAN" "no --machine" 1 "pass --machine" -- "${model[@]}" --batch 8 --seq-len 64
bad_machine "a precision the file lacks" "gives no rates for bf16" \
  "m['device']['precisions'].pop('bf16', None)" --precision bf16
expect_error_from "$PLAN" "--model with model flags" 1 "drop --layers" -- \
  --machine "$M" --model "$WORK/config.json" --layers 2 --batch 8 --seq-len 64
expect_error_from "$PLAN" "no batch" 1 "pass --batch" -- --machine "$M" "${model[@]}"

# The SC21 comparison docs/planning.md prints is what the planner says of Megatron's layouts.
SRC=${MPIFORMER_SOURCE_DIR:-$(cd "$(dirname "$0")/../.." && pwd)}
out=$("$PY" "$SRC/ci/sc21_table1.py" "$PLAN" --check "$SRC/docs/planning.md" 2>&1) &&
  ok "docs/planning.md's SC21 table: $(tail -n 1 <<<"$out")" || bad "the SC21 table: $out"
finish
