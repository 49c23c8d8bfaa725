#!/usr/bin/env bash
# --tensorboard DIR: event files TensorBoard reads, checked by the test's own reader
# (read_tfevents.py: the framing's CRCs, the Event protobuf by hand). Every step's scalars are the
# --metrics file's values; a run killed past its last checkpoint and requeued writes a second file
# that starts with a SessionLog START, so that, purged as TensorBoard purges, each step is logged
# once, the resumed run's. A damaged record is found.
source "$(dirname "$0")/common.sh"
READ="$(dirname "$0")/read_tfevents.py"
export OMP_NUM_THREADS=1
args=(--val-every 20 --layers 2 --dim 64 --heads 4 --seq-len 32 --batch 8 --steps 200 --threads 1
  --save "$WORK/ck" --load "$WORK/ck" --save-every 20 --metrics "$WORK/m.jsonl" --tensorboard "$WORK/tb")

timeout 300 "$MPIEXEC" -n 2 "$TRAIN" "${args[@]}" >"$WORK/a.log" 2>&1 &
job=$!
wait_for "$WORK/a.log" '^step 50/' && pid=$(rank_pid "$WORK/tb" 0) && kill -KILL "$pid"
wait $job 2>/dev/null
saved=$(sed -n 's/^step_0*//p' "$WORK/ck/latest" 2>/dev/null)
timeout 300 "$MPIEXEC" -n 2 "$TRAIN" "${args[@]}" >"$WORK/b.log" 2>&1 || bad "the requeued run"

if "$PY" "$READ" "$WORK/tb" >"$WORK/tb.json" 2>"$WORK/tb.err"; then
  out=$("$PY" - "$WORK/tb.json" "$WORK/m.jsonl" "${saved:-0}" <<'PYEOF' 2>&1
import json, struct, sys
tb = json.load(open(sys.argv[1]))
saved = int(sys.argv[3])
f32 = lambda x: struct.unpack("<f", struct.pack("<f", x))[0]
metrics = [json.loads(l) for l in open(sys.argv[2])]
steps = {r["step"]: r for r in metrics if r["kind"] == "step"}
s = {tag: {int(k): v for k, v in d.items()} for tag, d in tb["scalars"].items()}
assert tb["version"] == "brain.Event:2", tb["version"]
assert tb["files"] == 2 and tb["restarts"] == [saved + 1], (tb["files"], tb["restarts"], saved)
for tag, key in (("train/loss", "loss"), ("train/lr", "lr"), ("train/grad_norm", "norm")):
    assert sorted(s[tag]) == list(range(1, 201)), f"{tag}: steps {sorted(s[tag])[:3]}..."
    # The event holds float(x); --metrics prints x to 9 digits: within one float32 step of it.
    bad = [n for n in s[tag] if abs(s[tag][n] - f32(steps[n][key])) > abs(s[tag][n]) * 2.0**-23]
    assert not bad, f"{tag} differs from --metrics at steps {bad[:5]}"
assert sorted(s["val/loss"]) == [0, 20, 40, 60, 80, 100, 120, 140, 160, 180, 200], sorted(s["val/loss"])
print(f"2 files, restart at step {saved + 1}; train/loss, lr, grad_norm at steps 1-200 once each, "
      f"as --metrics (to a float32 step); val/loss at {len(s['val/loss'])} steps")
PYEOF
  ) && ok "$out" || bad "$out"
else
  bad "the reader refused the files: $(cat "$WORK/tb.err")"
fi

# The reader checks what it reads: one byte changed in a record's data is found.
mkdir -p "$WORK/damaged"
file=$(ls "$WORK"/tb/events.out.tfevents.* | head -1)
cp "$file" "$WORK/damaged/"
copy="$WORK/damaged/$(basename "$file")"
printf '\x00' | dd of="$copy" bs=1 seek=200 conv=notrunc status=none
"$PY" "$READ" "$WORK/damaged" >/dev/null 2>"$WORK/damaged.err" && bad "a damaged file read as good" ||
  ok "a damaged record is found: $(cat "$WORK/damaged.err")"
finish
