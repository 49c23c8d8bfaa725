#!/usr/bin/env bash
# Inputs that used to hang, lose output or mislead (issue: "a long run you can trust"), each one
# exit status 2 with one error line within seconds:
#   a FIFO wherever a file is read (data, --init-from and a model directory's files, a sharded
#   index's shard, --tokenizer, the save directory's lock and `latest`, a checkpoint's state file,
#   mpiformer-tokenize --tokenizer): the type is checked before any open, which never blocks;
#   an empty value for any flag (an unset variable in a job script);
#   outputs that are one file or lie inside --save, compared as the file system resolves them;
#   a .bin whose magic is not a shard's (unless asked for as bytes:PATH);
#   an index that is a directory, named as one.
source "$(dirname "$0")/common.sh"
SOURCE_DIR=${MPIFORMER_SOURCE_DIR:-$(cd "$(dirname "$0")/../.." && pwd)}
TOKENIZE=$(dirname "$TRAIN")/mpiformer-tokenize
hf() { "$PY" "$SOURCE_DIR/tests/reference/hf_models.py" "$@"; }
export OMP_NUM_THREADS=1
make_shard "$WORK/shard.bin" 2000 299
base=(--steps 1 --val-every 0 --batch 2 --seq-len 16 --peak-gflops 1)
tiny=(--layers 1 --dim 32 --heads 2 --vocab 300)
# expect_error runs under `timeout 60`: a hang is its exit status 124, a failure.

# ---- FIFOs ---------------------------------------------------------------------------------------
mkfifo "$WORK/fifo"
expect_error "--data is a FIFO" 2 "data file .*fifo: is a FIFO" -- "${base[@]}" "${tiny[@]}" \
  --data "$WORK/fifo"
expect_error "--init-from is a FIFO" 2 "fifo: is a FIFO" -- "${base[@]}" --data "$WORK/shard.bin" \
  --init-from "$WORK/fifo"
hf write "$WORK/hf" >/dev/null
hf write "$WORK/hf_sharded" --sharded >/dev/null
for what in model.safetensors config.json; do
  cp -r "$WORK/hf" "$WORK/hf_$what"
  rm "$WORK/hf_$what/$what"
  mkfifo "$WORK/hf_$what/$what"
  expect_error "a model directory's $what is a FIFO" 2 "$what: is a FIFO" -- "${base[@]}" \
    --data "$WORK/shard.bin" --init-from "$WORK/hf_$what"
done
shard=$(ls "$WORK/hf_sharded" | grep -m1 'model-00001')
rm "$WORK/hf_sharded/$shard"
mkfifo "$WORK/hf_sharded/$shard"
expect_error "a sharded index's shard is a FIFO" 2 "$shard: is a FIFO" -- "${base[@]}" \
  --data "$WORK/shard.bin" --init-from "$WORK/hf_sharded"
expect_error "--tokenizer is a FIFO" 2 "tokenizer .*fifo: is a FIFO" -- "${base[@]}" "${tiny[@]}" \
  --data "$WORK/shard.bin" --sample-every 1 --tokenizer "$WORK/fifo"
mkdir -p "$WORK/ck_lock"
mkfifo "$WORK/ck_lock/mpiformer.lock"
expect_error "the save directory's lock is a FIFO" 1 "mpiformer.lock: is a FIFO" -- "${base[@]}" \
  "${tiny[@]}" --data "$WORK/shard.bin" --save "$WORK/ck_lock"
# A real checkpoint, then its `latest` and its state file replaced by FIFOs.
OMP_NUM_THREADS=1 timeout 60 "$TRAIN" "${base[@]}" "${tiny[@]}" --data "$WORK/shard.bin" \
  --save "$WORK/ck" >"$WORK/ck.log" 2>&1 || bad "saving a checkpoint to damage"
cp -r "$WORK/ck" "$WORK/ck_latest"
rm "$WORK/ck_latest/latest"
mkfifo "$WORK/ck_latest/latest"
expect_error "the save directory's latest is a FIFO" 1 "latest: is a FIFO" -- --steps 2 \
  --val-every 0 --data "$WORK/shard.bin" --peak-gflops 1 --load "$WORK/ck_latest"
cp -r "$WORK/ck" "$WORK/ck_state"
state=$(ls "$WORK/ck_state"/step_*/state_*.txt | head -1)
rm "$state"
mkfifo "$state"
expect_error "a checkpoint's state file is a FIFO" 1 "state_.*: is a FIFO" -- --steps 2 \
  --val-every 0 --data "$WORK/shard.bin" --peak-gflops 1 --load "$WORK/ck_state"
if [ -x "$TOKENIZE" ]; then
  mkdir -p "$WORK/corpus"
  echo "some text" >"$WORK/corpus/a.txt"
  expect_error_from "$TOKENIZE" "mpiformer-tokenize --tokenizer is a FIFO" 1 "fifo: is a FIFO" -- \
    --tokenizer "$WORK/fifo" --input "$WORK/corpus" --output-dir "$WORK/tokens"
fi

# ---- empty values --------------------------------------------------------------------------------
for flag in --save-hf --save-llmc --init-from --tokenizer --trace; do
  expect_error "$flag \"\"" 1 "$flag is given an empty value" -- "${base[@]}" "${tiny[@]}" \
    --data "$WORK/shard.bin" "$flag" ""
done
expect_error "--data \"\"" 1 "--data is given an empty value" -- "${base[@]}" "${tiny[@]}" --data ""
if [ -n "$GENERATE" ]; then
  expect_error_from "$GENERATE" "generate --tokens-out \"\"" 1 "--tokens-out is given an empty value" \
    -- --init-from "$WORK/hf" --prompt-tokens 1,2 --tokens-out ""
fi

# ---- outputs that collide, as resolved ----------------------------------------------------------
mkdir -p "$WORK/out"
collide() {  # collide NAME PATTERN FLAGS...
  local name=$1 pattern=$2
  shift 2
  expect_error "$name" 1 "$pattern" -- "${base[@]}" "${tiny[@]}" --data "$WORK/shard.bin" "$@"
}
collide "--save-hf out/./x beside --save-llmc out/x" "are the same path" \
  --save-hf "$WORK/out/./x" --save-llmc "$WORK/out/x"
collide "--save-hf X/ beside --save-llmc X" "are the same path" \
  --save-hf "$WORK/out/y/" --save-llmc "$WORK/out/y"
collide "--save-hf inside --save" "lies inside --save" \
  --save "$WORK/ck_new" --save-hf "$WORK/ck_new/step_00000002"
collide "--save-llmc as --save's latest" "lies inside --save" \
  --save "$WORK/ck_new" --save-llmc "$WORK/ck_new/latest"
ln -s "$WORK/out" "$WORK/link"
collide "the same file through a link" "are the same path" \
  --save-llmc "$WORK/link/m.bin" --trace "$WORK/out/m.bin"
[ ! -e "$WORK/ck_new" ] && ok "a refused start created no --save directory" ||
  bad "a refused start left $WORK/ck_new"

# ---- a damaged shard header ----------------------------------------------------------------------
make_shard "$WORK/off_by_one.bin" 2000 299 20240521
expect_error "a .bin whose magic is one off" 1 \
  "off_by_one.bin: not an llm.c token shard: its magic 20240521.*bytes:" -- "${base[@]}" "${tiny[@]}" \
  --data "$WORK/off_by_one.bin"
if OMP_NUM_THREADS=1 timeout 60 "$TRAIN" "${base[@]}" "${tiny[@]}" \
  --data "bytes:$WORK/off_by_one.bin" >"$WORK/bytes.log" 2>&1; then
  ok "bytes:FILE trains on the raw bytes when asked: $(grep -m1 '^data:' "$WORK/bytes.log")"
else
  bad "bytes:FILE: $(grep -m1 '^error' "$WORK/bytes.log")"
fi

# ---- messages that name the problem --------------------------------------------------------------
mkdir -p "$WORK/hf_dir_index/model.safetensors.index.json"
cp "$WORK/hf/config.json" "$WORK/hf_dir_index/"
expect_error "an index that is a directory" 1 "index.json: is a directory" -- "${base[@]}" \
  --data "$WORK/shard.bin" --init-from "$WORK/hf_dir_index"
# A lock whose pid is past any pid (it used to become -1, and kill(-1, 0) "found it running").
mkdir -p "$WORK/ck_pid"
header=$(sed -n 's/^constexpr const char\* kHeader = "\(.*\)";/\1/p' \
  "$SOURCE_DIR/src/checkpoint/save_lock.cpp")
printf '%s\nhost = %s\npid = 99999999999999999999\nstart_time = 1\nboot_id = x\npid_namespace = x\nslurm_job = \nslurm_array = \ntaken = 2026-01-01T00:00:00Z\n' \
  "$header" "$(hostname)" >"$WORK/ck_pid/mpiformer.lock"
expect_error "a lock naming an impossible pid" 1 "is not a lock this program wrote" -- \
  "${base[@]}" "${tiny[@]}" --data "$WORK/shard.bin" --save "$WORK/ck_pid"

# config.json sizes and safetensors offsets as written, not as an int cut them.
cp -r "$WORK/hf" "$WORK/hf_big"
"$PY" - "$WORK/hf_big/config.json" <<'PYEOF'
import json, sys
c = json.load(open(sys.argv[1])); c["n_layer"] = 10**12; json.dump(c, open(sys.argv[1], "w"))
PYEOF
expect_error "n_layer of 10^12" 1 "n_layer is 1000000000000, more than this trainer takes" -- \
  "${base[@]}" --data "$WORK/shard.bin" --init-from "$WORK/hf_big"
: >"$WORK/empty.safetensors"
expect_error "an empty .safetensors" 1 "safetensors file .*empty.safetensors" -- "${base[@]}" \
  --data "$WORK/shard.bin" --init-from "$WORK/empty.safetensors"

# mpiformer-tokenize: nothing in a corpus directory is skipped without a word.
if [ -x "$TOKENIZE" ]; then
  mkdir -p "$WORK/corpus_link" "$WORK/corpus_loop/sub"
  echo "text" >"$WORK/corpus_link/a.txt"
  ln -s "$WORK/nowhere.txt" "$WORK/corpus_link/b.txt"
  echo "text" >"$WORK/corpus_loop/sub/a.txt"
  ln -s "$WORK/corpus_loop" "$WORK/corpus_loop/sub/back"
  "$PY" "$SOURCE_DIR/tests/cli/make_tokenizer.py" "$WORK/tok.json" small
  expect_error_from "$TOKENIZE" "a corpus link to nothing" 1 "b.txt: a link to nothing" -- \
    --tokenizer "$WORK/tok.json" --input "$WORK/corpus_link" --output-dir "$WORK/t1"
  expect_error_from "$TOKENIZE" "a corpus directory loop" 1 "leads back to a directory above it" -- \
    --tokenizer "$WORK/tok.json" --input "$WORK/corpus_loop" --output-dir "$WORK/t2"
fi
finish
