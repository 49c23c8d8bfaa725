#!/usr/bin/env bash
# Every bad input stops the run with exit status 2 on every rank, one "error:" line naming the
# problem and the fix, within a timeout (no hang), and without touching the user's files.
source "$(dirname "$0")/common.sh"

make_shard "$WORK/good.bin" 4000 250
make_shard "$WORK/short.bin" 100 250
make_shard "$WORK/bigtoken.bin" 4000 300
make_shard "$WORK/version2.bin" 4000 250 20240520 2
printf 'not a shard' >"$WORK/tiny.bin"
: >"$WORK/empty.txt"
"$TRAIN" --steps 1 --val-every 0 --save-llmc "$WORK/model.bin" >/dev/null 2>&1
head -c 5000 "$WORK/model.bin" >"$WORK/truncated.bin"
cp "$WORK/good.bin" "$WORK/notamodel.bin"
"$PY" - "$WORK/model.bin" "$WORK/bf16.bin" <<'PYEOF'
import sys
data = bytearray(open(sys.argv[1], "rb").read())
data[4:8] = (5).to_bytes(4, "little")
open(sys.argv[2], "wb").write(data)
PYEOF

for n in 1 2; do
  expect_error "unknown flag" $n "unknown flag '--bogus'.*--help" -- --bogus 3
  expect_error "missing value" $n "--steps needs a value" -- --steps
  expect_error "malformed number" $n "--lr expects a number, got 'fast'" -- --lr fast
  expect_error "repeated flag" $n "--lr is given twice" -- --lr 0.1 --steps 2 --lr=0.2
  expect_error "repeated switch" $n "--recompute is given twice" -- --recompute --recompute
  expect_error "unknown recompute mode" $n "--recompute must be none, full or selective, got 'partial'" \
    -- --recompute partial
  expect_error "zero microbatches" $n "--microbatches must be >= 1, got 0" -- --microbatches 0
  expect_error "zero threads" $n "--threads must be >= 1, got 0" -- --threads 0
  expect_error "non-positive size" $n "--batch must be >= 1" -- --batch 0
  expect_error "missing data file" $n "nope.bin.*(no such file|cannot open)" -- --data "$WORK/nope.bin"
done
expect_error "short data file" 1 "needs at least .*B\*T\+1" -- --data "$WORK/short.bin" --batch 4 --seq-len 64
expect_error "token >= vocab" 1 "token 2[0-9][0-9] .*>= vocab 256.*--vocab" -- --data "$WORK/bigtoken.bin"
# The manifest.json that mpiformer-tokenize writes beside its shards gives a fresh model's
# vocabulary: a smaller --vocab, or a manifest that cannot be read, is an error naming it.
mkdir -p "$WORK/tok" "$WORK/tok_json" "$WORK/tok_key"
for d in tok tok_json tok_key; do cp "$WORK/bigtoken.bin" "$WORK/$d/data_train_000001.bin"; done
printf '{"tokenizer": {"file": "t.json", "vocab_size": 300}}\n' >"$WORK/tok/manifest.json"
printf '{"tokenizer": {"vocab_size": 300\n' >"$WORK/tok_json/manifest.json"
printf '{"tokenizer": {"vocab_size": "300"}}\n' >"$WORK/tok_key/manifest.json"
expect_error "--vocab below the manifest's" 2 "--vocab 256 is smaller than .*tok/manifest.json's tokenizer.vocab_size 300.*--vocab >= 300" -- --data "$WORK/tok/data_train_*.bin" --vocab 256
expect_error "manifest not JSON" 1 "manifest .*tok_json/manifest.json: invalid JSON" -- --data "$WORK/tok_json/data_train_000001.bin"
expect_error "manifest vocab_size" 1 "manifest .*tok_key/manifest.json: tokenizer.vocab_size is missing or not a positive integer" -- --data "$WORK/tok_key/data_train_000001.bin"
# A document token the manifest names outside the vocabulary is the manifest's, not --doc-token's.
mkdir -p "$WORK/tok_doc" && cp "$WORK/good.bin" "$WORK/tok_doc/data_train_000001.bin"
printf '{"tokenizer": {"vocab_size": 300}, "doc_token": {"text": "<|x|>", "id": 400}}\n' >"$WORK/tok_doc/manifest.json"
expect_error "the manifest's document token outside the vocabulary" 1 "the document token 400 \(.*tok_doc/manifest.json's doc_token \"<\|x\|>\"\) is outside the model's vocabulary of 300 tokens; pass --doc-token ID below 300" -- --data "$WORK/tok_doc/data_train_000001.bin" --doc-mask
# An existing file given as --tensorboard's directory is named a file (it was "a missing directory").
cp "$WORK/good.bin" "$WORK/tb_file"
expect_error "--tensorboard over a file" 1 "--tensorboard .*tb_file is a file, not a directory" -- \
  --tensorboard "$WORK/tb_file" --layers 2 --heads 4 --dim 64 --batch 2 --seq-len 32 --val-every 0 --steps 1
cmp -s "$WORK/good.bin" "$WORK/tb_file" && ok "--tensorboard over a file leaves the file as it was" ||
  bad "--tensorboard over a file changed it"
# What to pass instead is said once ("pass a .jsonl file", not "pass pass").
mkdir -p "$WORK/metrics_dir"
expect_error "--metrics of a directory" 1 "metrics_dir: is a directory, not a regular file; pass a \.jsonl file this program wrote" -- \
  --metrics "$WORK/metrics_dir" --layers 2 --heads 4 --dim 64 --batch 2 --seq-len 32 --val-every 0 --steps 1
expect_error "--tokenizer alone" 1 "--tokenizer decodes the samples of --sample-every N, encodes a JSONL --eval-data and goes into --save-hf DIR" -- --tokenizer "$WORK/tok/manifest.json"
# The tensor-core attention is a CUDA build's, and computes in bf16.
expect_error "--attention mma without CUDA" 1 "--attention mma runs on a GPU's tensor cores, and this build has no CUDA; use --attention fused or chunked" -- --attention mma --precision bf16
# bf16 messages round what fp32 products would keep exact: they come with --precision bf16 only,
# and ZeRO-2/3's block reductions are fp32.
expect_error "--grad-reduce-dtype bf16 in fp32" 2 "--grad-reduce-dtype bf16 needs --precision bf16; add it, or reduce in fp32" -- --grad-reduce-dtype bf16 --dp 2
expect_error "--p2p-dtype bf16 in fp32" 2 "--p2p-dtype bf16 needs --precision bf16; add it, or send in fp32" -- --p2p-dtype bf16 --pp 2
expect_error "--tp-comm-dtype bf16 in fp32" 2 "--tp-comm-dtype bf16 needs --precision bf16; add it, or run the TP collectives in fp32" -- --tp-comm-dtype bf16 --tp 2
expect_error "--tp-comm-dtype fp16" 2 "--tp-comm-dtype must be fp32 or bf16, got 'fp16'" -- --tp-comm-dtype fp16 --precision bf16 --tp 2
expect_error "--grad-reduce-dtype bf16 under --zero 2" 1 "--grad-reduce-dtype bf16 reduces the buckets of --zero 0 and 1, and ZeRO-2's blocks are reduced in fp32; use --zero 1" -- --grad-reduce-dtype bf16 --precision bf16 --zero 2
expect_error "shard version" 1 "version 2" -- --data "$WORK/version2.bin"
expect_error "corrupt shard" 1 "tiny.bin.*(short|corrupt)" -- --data "$WORK/tiny.bin"
expect_error "empty data" 1 "empty" -- --data "$WORK/empty.txt"
expect_error "checkpoint truncated" 1 "truncated.bin.*(size|short|truncated)" -- --init-from "$WORK/truncated.bin"
expect_error "checkpoint magic" 1 "notamodel.bin" -- --init-from "$WORK/notamodel.bin"
expect_error "checkpoint bf16" 1 "version 5.*fp32" -- --init-from "$WORK/bf16.bin"
expect_error "checkpoint plus sizes" 1 "--init-from takes the model from the checkpoint .*model.bin; drop --layers," -- --init-from "$WORK/model.bin" --layers 2
expect_error "seq-len > max_seq_len" 1 "--seq-len 300 exceeds the model's max_seq_len 256" -- --seq-len 300
expect_error "heads do not divide dim" 1 "do not divide into 3 heads" -- --heads 3
expect_error "unknown schedule" 1 "unknown --lr-schedule 'linear'" -- --lr-schedule linear
expect_error "batch over ranks" 2 "--batch 5 does not split over 2" -- --batch 5
expect_error "zero stage" 1 "--zero 4 is not a ZeRO stage.*use 0, 1, 2 or 3" -- --zero 4
# ZeRO-2/3 refuse by name what they cannot serve yet.
expect_error "zero 3 with sample-every" 2 "--zero 3 does not serve --sample-every yet \(generation reads whole blocks\); use --zero 1" -- --zero 3 --dp 2 --sample-every 1
expect_error "zero 2 with rerun-suspect" 1 "--zero 2 does not serve --rerun-suspect \(it compares each rank's whole gradients\); use --zero 1" -- --zero 2 --rerun-suspect
expect_error "zero 2 with muon" 1 "--zero 2 does not serve --optimizer muon yet.*use --zero 1" -- --zero 2 --optimizer muon
expect_error "zero 3 with save-hf" 1 "--zero 3 does not serve --save-hf yet.*--save-llmc, or use --zero 1" -- --zero 3 --save-hf "$WORK/zero3_hf"
expect_error "zero 3 with save-async 1" 1 "--zero 3 saves synchronously.*use --save-async 0" -- --zero 3 --save "$WORK/zero3_ckpt" --save-async 1
# --zero-group node (HSDP) needs ZeRO, ranks on two or more nodes and as many on each; the
# nodes are hosts named by MPIFORMER_TEST_HOST (one machine posing as several).
expect_error "zero-group node without zero" 1 "--zero-group node shards ZeRO's state within each node, and --zero 0 shards nothing; add --zero 1, 2 or 3" -- --zero-group node
expect_error "zero-group node on one node" 2 "--zero-group node needs ranks on two or more nodes; the 2 DP x CP ranks of a group are all on one node: use --zero-group all" -- --zero 1 --zero-group node
expect_error "zero-group node with ep" 1 "--zero-group node does not serve expert parallelism yet" -- --zero 1 --zero-group node --ep 2
expect_error "zero-group node with muon" 1 "--zero-group node does not serve --optimizer muon yet" -- --zero 1 --zero-group node --optimizer muon
uneven=(--steps 1 --batch 6 --zero 1 --zero-group node)
out=$(timeout 60 "$MPIEXEC" -n 2 env MPIFORMER_TEST_HOST=n1 "$TRAIN" "${uneven[@]}" : \
  -n 1 env MPIFORMER_TEST_HOST=n2 "$TRAIN" "${uneven[@]}" 2>&1 >/dev/null)
rc=$?
if [ $rc -eq 2 ] && [ "$(grep -c '^error:' <<<"$out")" -eq 1 ] &&
  grep -q "^error: --zero-group node needs each node to hold as many of the 3 DP x CP ranks of a group, and they are spread unevenly over 2 nodes" <<<"$out"; then
  ok "--zero-group node over 2 + 1 ranks on two hosts (3 ranks): $(grep '^error:' <<<"$out")"
else
  bad "--zero-group node over 2 + 1 ranks: exit $rc: $out"
fi
expect_error "muon momentum" 1 "--muon-momentum must be in \[0, 1), got 1" -- --optimizer muon --muon-momentum 1
expect_error "muon flag alone" 1 "--muon-momentum sets Muon.*pass --optimizer muon" -- --muon-momentum 0.9
expect_error "unknown optimizer" 1 "--optimizer.*sgd" -- --optimizer sgd
expect_error "negative qk-clip" 1 "--qk-clip must be >= 0, got -1" -- --qk-clip -1
expect_error "qk-clip 0 given" 1 "--qk-clip must be above 0, got 0: .*leave it out for no clipping" -- --qk-clip 0
expect_error "qk-clip with q/k norms" 1 "--qk-clip: this model's q/k norms already bound its attention logits.*drop --qk-clip" -- --arch qwen3 --kv-heads 2 --qk-clip 10
expect_error "moe-bias-update-rate without DeepSeekMoE" 1 "--moe-bias-update-rate moves the routing bias of deepseek_v3's DeepSeekMoE blocks.*drop --moe-bias-update-rate" -- --moe-bias-update-rate 0.001
expect_error "mtp on a model without prediction modules" 1 "--mtp 1 trains DeepSeek-V3's multi-token prediction modules; this model .llama. has none: drop --mtp" -- --arch llama --mtp 1
expect_error "negative mtp" 1 "--mtp must be >= 0, got -1" -- --mtp -1
expect_error "negative mtp-weight" 1 "--mtp-weight must be >= 0, got -0.5" -- --mtp-weight -0.5
expect_error "heads over tp" 3 "4 heads do not split over --tp 3" -- --tp 3
expect_error "layout vs ranks" 2 "tp 2 x dp 2 x pp 1 needs 4 ranks, but 2 were launched" -- --tp 2 --dp 2
expect_error "stages over ranks" 2 "2 ranks do not divide into tp 1 x pp 3" -- --pp 3
expect_error "more chunks than layers" 2 "4 layers cannot fill 6 pipeline chunks" -- --pp 2 --layers 4 --schedule interleaved --virtual-stages 3 --batch 4 --microbatches 2
expect_error "a stage without layers" 2 "1 layer cannot fill 2 pipeline chunks" -- --pp 2 --layers 1
expect_error "interleaved with M < P" 2 "interleaved needs --microbatches >= --pp \(got 1 < 2\)" -- --pp 2 --schedule interleaved --virtual-stages 2 --microbatches 1
expect_error "virtual stages outside interleaved" 2 "--virtual-stages 2 needs --schedule interleaved" -- --pp 2 --virtual-stages 2 --microbatches 2
expect_error "layout sum" 2 "--pp-layout '3,2' sums to 5 layers but the model has 4" -- --pp 2 --pp-layout 3,2
expect_error "layout entries" 2 "--pp-layout '4' has 1 entries for 2 chunks" -- --pp 2 --pp-layout 4
expect_error "layout empty stage" 2 "'0' is not a positive layer count" -- --pp 2 --pp-layout 4,0
expect_error "layout entry too large" 2 "'4294967297' is more than the model's 4 layers" -- --pp 2 --pp-layout 4294967297,3
expect_error "microbatch flags twice" 1 "--microbatches and --micro-batch-size both" -- --microbatches 2 --micro-batch-size 4
expect_error "micro-batch-size over rows" 2 "--micro-batch-size 3 does not divide the 8 rows" -- --dp 2 --micro-batch-size 3
expect_error "sequence rows over tp" 2 "--sequence-parallel splits the 3 rows.*over 2 TP ranks" -- --tp 2 --sequence-parallel --batch 1 --seq-len 3
expect_error "microbatches over rows" 1 "do not split into --microbatches 3" -- --batch 16 --microbatches 3
expect_error "unknown schedule name" 1 "unknown --schedule 'gpipe'" -- --schedule gpipe
expect_error "bucket size" 1 "--dp-bucket-mb must be positive" -- --dp-bucket-mb 0
expect_error "--save-every without --save" 1 "--save-every 5 needs --save DIR" -- --save-every 5
expect_error "--keep-last without --save" 1 "--keep-last 2 needs --save DIR" -- --keep-last 2
expect_error "--load-step without --load" 1 "--load-step 4 needs --load DIR" -- --load-step 4
expect_error "--save-local without --save" 1 "--save-local .*/loc needs --save DIR: a node's local shards are lost with the node" -- --save-local "$WORK/loc" --save-local-every 2
expect_error "--save-local without its period" 1 "--save-local .*/loc needs --save-local-every N" -- --save "$WORK/ck" --save-local "$WORK/loc"
expect_error "--save-local-every 0" 1 "--save-local-every must be >= 1, got 0" -- --save "$WORK/ck" --save-local "$WORK/loc" --save-local-every 0
expect_error "--save-local-every without --save-local" 1 "--save-local-every 2 needs --save-local DIR" -- --save "$WORK/ck" --save-local-every 2
expect_error "--save-local less often than --save-every" 1 "--save-local-every 4 is less often than --save-every 2.*at most 2" -- --save "$WORK/ck" --save-every 2 --save-local "$WORK/loc" --save-local-every 4
expect_error "--save-local inside --save" 1 "--save-local .*/ck/loc is or lies inside --save .*/ck, which every node reads" -- --save "$WORK/ck" --save-local "$WORK/ck/loc" --save-local-every 2
expect_error "--save-local equal to --save" 1 "--save-local .*/ck/ is or lies inside --save .*/ck," -- --save "$WORK/ck" --save-local "$WORK/ck/" --save-local-every 2
expect_error "--save-local of a file" 2 "--save-local .*model.bin: exists and is not a directory" -- --steps 1 --save "$WORK/ck" --save-local "$WORK/model.bin" --save-local-every 2
expect_error "--save-local not writable" 2 "--save-local /proc/mpiformer-local-$$: cannot create a file in /proc" -- --steps 1 --save "$WORK/ck" --save-local "/proc/mpiformer-local-$$" --save-local-every 2
# A --save-local every host sees as one directory is no node-local storage: two ranks posing as
# hosts n1 and n2 (MPIFORMER_TEST_HOST) find each other's marker; nothing is left in it.
shared=(--steps 1 --save "$WORK/ck2" --save-local "$WORK/shared" --save-local-every 1)
out=$(timeout 60 "$MPIEXEC" -n 1 env MPIFORMER_TEST_HOST=n1 "$TRAIN" "${shared[@]}" : \
  -n 1 env MPIFORMER_TEST_HOST=n2 "$TRAIN" "${shared[@]}" 2>&1 >/dev/null)
rc=$?
if [ $rc -eq 2 ] && [ "$(grep -c '^error:' <<<"$out")" -eq 1 ] &&
  grep -q "^error: --save-local $WORK/shared is one directory on host n1 and host n2 .*not node-local storage" <<<"$out" &&
  [ -z "$(ls -A "$WORK/shared")" ]; then
  ok "--save-local shared by two hosts (2 ranks): $out"
else
  bad "--save-local shared by two hosts: exit $rc: $out; left: $(ls -A "$WORK/shared")"
fi
expect_error "--load of a file" 1 "--load .*model.bin: not a directory" -- --load "$WORK/model.bin"
expect_error "--save of a file" 1 "--save .*model.bin: exists and is not a directory" -- --save "$WORK/model.bin"
expect_error "negative step timeout" 1 "--step-timeout must be >= 0" -- --step-timeout -1
expect_error "beta out of range" 1 "--beta2 must be in \[0, 1\)" -- --beta2 1.5

# An existing output is refused before training, and left exactly as it was.
before=$(sha256sum "$WORK/model.bin")
expect_error "output exists" 2 "model.bin.*already exists" -- --steps 1 --save-llmc "$WORK/model.bin"
[ "$(sha256sum "$WORK/model.bin")" = "$before" ] && ok "existing output untouched" || bad "existing output was modified"
expect_error "trace exists" 2 "--trace .*model.bin: already exists" -- --steps 1 --trace "$WORK/model.bin"
[ "$(sha256sum "$WORK/model.bin")" = "$before" ] && ok "existing trace target untouched" || bad "--trace modified an existing file"
expect_error "trace directory missing" 1 "--trace .*: directory .*/no/such does not exist" -- --steps 1 --trace "$WORK/no/such/t.json"
expect_error "trace is the checkpoint" 1 "--save-llmc .*same.bin and --trace .*same.bin are the same path" -- --steps 1 --trace "$WORK/same.bin" --save-llmc "$WORK/same.bin"

out=$("$TRAIN" --help 2>&1)
[ $? -eq 0 ] && grep -q -- "--init-from" <<<"$out" && ok "--help prints the flags" || bad "--help"
# Every exit status the trainer can return (train/exit_status.hpp) is in --help's paragraph and
# in the README's table, 128+N (a second stop signal) among them.
src=$(cd "$(dirname "$0")/../.." && pwd)
statuses=$(grep -oE '= [0-9]+,' "$src/src/train/exit_status.hpp" | tr -dc '0-9\n')
grep -q 'return 128 + signal' "$src/src/train/exit_status.hpp" && statuses="$statuses 128+N 130 143"
paragraph=" $(sed -n '/^SIGUSR1, SIGTERM or SIGINT/,$p' <<<"$out" | tr '\n(' '  ') "
listed=yes
for st in $statuses; do
  grep -qF " $st " <<<"$paragraph" || { listed=no; bad "--help's exit statuses lack $st"; }
  grep -qF "| $st |" "$src/README.md" || [[ $st =~ ^1[34] ]] ||
    { listed=no; bad "the README's exit-status table lacks $st"; }
done
[ $listed = yes ] && ok "--help and the README list the exit statuses $(tr '\n' ' ' <<<"$statuses")"
# --lr-decay-steps 0 means "follow --steps", as when not given: --help says so.
grep -A1 -- "--lr-decay-steps" <<<"$out" | grep -q "default, or 0: --steps" && ok "--help: --lr-decay-steps 0" ||
  bad "--help does not say what --lr-decay-steps 0 means"
# A mixture of experts' sizes and settings (model/config.cpp's validate, the flags).
moe=(--arch mixtral --layers 2 --heads 4 --kv-heads 2 --dim 32 --ffn-dim 48 --steps 1)
expect_error "top-k above the experts" 1 "each token's 5 experts are not 1 to the 4 experts" -- \
  "${moe[@]}" --experts 4 --experts-per-token 5
expect_error "an MoE family without experts" 1 "the number of experts must be positive" -- "${moe[@]}"
expect_error "experts in a dense family" 1 "the llama family has a dense MLP" -- \
  --arch llama --layers 2 --experts 4 --experts-per-token 2
expect_error "experts on GPT-2" 1 "--experts is a Llama-family setting" -- --experts 4
expect_error "--moe-renormalize 2" 1 "--moe-renormalize is 0 or 1, got 2" -- \
  "${moe[@]}" --experts 4 --experts-per-token 2 --moe-renormalize 2
expect_error "Mixtral not renormalised" 1 "Mixtral's gates are always renormalised" -- \
  "${moe[@]}" --experts 4 --experts-per-token 2 --moe-renormalize 0
expect_error "a negative balance coefficient" 1 "--moe-aux-coef must not be negative" -- \
  "${moe[@]}" --experts 4 --experts-per-token 2 --moe-aux-coef -0.5
expect_error "--moe-aux-coef on a dense family" 1 "--moe-aux-coef sets a mixture of experts" -- \
  --arch llama --layers 2 --moe-aux-coef 0.1
# Qwen2-MoE's shared expert: its family only, always there, split over TP.
expect_error "a shared expert on mixtral" 1 "the mixtral family has no shared expert" -- \
  "${moe[@]}" --experts 4 --experts-per-token 2 --shared-expert-dim 32
expect_error "qwen2_moe without its shared expert" 1 "the qwen2_moe family has a shared expert, of width 0" -- \
  --arch qwen2_moe --layers 2 --heads 4 --kv-heads 2 --dim 32 --ffn-dim 48 --steps 1 --experts 4 \
  --experts-per-token 2
expect_error "a shared expert that does not split over --tp" 2 "the shared expert's width 33 does not split over --tp 2" -- \
  --arch qwen2_moe --layers 2 --heads 4 --kv-heads 2 --dim 32 --ffn-dim 48 --steps 1 --experts 4 \
  --experts-per-token 2 --shared-expert-dim 33 --tp 2
# Expert parallelism: the experts must split over EP, EP over DP, and there must be experts.
expect_error "experts that do not split over --ep" 3 "4 experts do not split over --ep 3" -- \
  "${moe[@]}" --experts 4 --experts-per-token 2 --batch 3 --ep 3
expect_error "--ep not dividing dp" 2 "--ep 4 does not divide the 2 data-parallel ranks" -- \
  "${moe[@]}" --experts 4 --experts-per-token 2 --ep 4
expect_error "--ep on a dense model" 2 "--ep 2 splits a mixture of experts' experts, and this model has none" -- \
  --arch llama --layers 2 --ep 2
# --moe-a2a-chunks groups each EP rank's experts: no more groups than it holds.
expect_error "--moe-a2a-chunks over the local experts" 2 "--moe-a2a-chunks 3 is more groups than the 2 experts each of the --ep 2 ranks holds; use at most 2" -- \
  "${moe[@]}" --experts 4 --experts-per-token 2 --ep 2 --moe-a2a-chunks 3
expect_error "--moe-a2a-chunks 0" 1 "--moe-a2a-chunks must be >= 1, got 0" -- --moe-a2a-chunks 0
# mpiformer-bench builds its run as the trainer does: a layout the model does not take is one line.
if [ -n "${MPIFORMER_BENCH:-}" ]; then
  expect_error_from "$MPIFORMER_BENCH" "bench: --batch 3 over 2 ranks" 2 "--batch 3 does not split over 2" -- \
    --model small --batch 3 --peak-gflops 1
fi
finish
