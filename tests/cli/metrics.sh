#!/usr/bin/env bash
# --metrics FILE.jsonl, the record a long run is watched and plotted from: every step once with
# the step line's values, validation, memory and summary records; a SIGUSR1 save and the same
# command again (a requeued Slurm job) continue one file; a SIGKILL after the last checkpoint and
# a line cut short, requeued, drop the steps done again; a new run refuses another run's file;
# --dry-run writes nothing; a file not this run's records, or one of its inputs, is refused and
# left as it is; a record the disk refuses halfway leaves whole lines. Each chain's steps are the uninterrupted run's, bit for bit.
source "$(dirname "$0")/common.sh"

export OMP_NUM_THREADS=1
args=(--val-every 50 --layers 2 --dim 64 --heads 4 --seq-len 32 --batch 8 --steps 200 --threads 1)

# check FILE REFERENCE|- LOG|-: the file's records as this test expects them (python below).
# CUT (in the environment): steps whose validation a stop signal cut short (not reported).
check() { "$PY" - "$@" <<'PYEOF'
import json, os, re, sys
path, ref, log = sys.argv[1:4]
cut = {int(s) for s in os.environ.get("CUT", "").split()}
def records(p):
    out = []
    with open(p) as f:
        for n, line in enumerate(f, 1):
            assert line.endswith("\n"), f"{p}:{n}: no newline"
            r = json.loads(line)
            assert isinstance(r, dict) and "kind" in r and isinstance(r.get("step"), int), f"{p}:{n}: {line!r}"
            out.append(r)
    return out
recs = records(path)
steps = [r for r in recs if r["kind"] == "step"]
numbers = [r["step"] for r in steps]
assert numbers == list(range(1, 201)), f"step records: {numbers[:5]}...{numbers[-5:]} ({len(numbers)})"
for r in steps:
    for key in ("loss", "lr", "norm", "ms", "tok_s", "mfu", "tokens"):
        assert isinstance(r.get(key), (int, float)), f"step {r['step']}: {key} = {r.get(key)!r}"
    assert r["tokens"] == r["step"] * 8 * 32, f"step {r['step']}: tokens {r['tokens']}"
vals = [r["step"] for r in recs if r["kind"] == "val"]
assert sorted(set(vals)) == [s for s in (0, 50, 100, 150, 200) if s not in cut], f"val records at {vals} (cut short: {sorted(cut)})"
kinds = {r["kind"] for r in recs}
assert {"run", "summary", "memory"} <= kinds, f"kinds {sorted(kinds)}"
assert recs[0]["kind"] == "run" and recs[0]["step"] == 0, recs[0]
if log != "-":  # the log's step lines print the same values
    printed = {}
    for line in open(log):
        m = re.match(r"step (\d+)/\d+ \| loss ([0-9.]+) \| lr ([0-9.e+-]+) \| norm ([0-9.]+)", line)
        if m:
            printed[int(m.group(1))] = (m.group(2), m.group(3), m.group(4))
    assert printed, "no step lines in the log"
    def near(value, printed):  # the line rounds: within half its last digit (and a hair)
        mantissa = printed.lower().split("e")[0]
        digits = len(mantissa.split(".")[1]) if "." in mantissa else 0
        exponent = int(printed.lower().split("e")[1]) if "e" in printed.lower() else 0
        return abs(value - float(printed)) <= 0.5001 * 10.0 ** (exponent - digits)
    for r in steps:
        if r["step"] in printed:
            loss, lr, norm = printed[r["step"]]
            assert near(r["loss"], loss) and near(r["lr"], lr) and near(r["norm"], norm), \
                f"step {r['step']}: metrics {r['loss']}, {r['lr']}, {r['norm']} vs line {printed[r['step']]}"
if ref != "-":  # bit for bit the uninterrupted run's
    want = {r["step"]: (r["loss"], r["norm"]) for r in records(ref) if r["kind"] == "step"}
    got = {r["step"]: (r["loss"], r["norm"]) for r in steps}
    diff = [s for s in want if want[s] != got.get(s)]
    assert not diff, f"steps {diff[:5]} differ from the uninterrupted run's"
    runs = [r["step"] for r in recs if r["kind"] == "run"]
    print(f"{len(steps)} steps once each, as uninterrupted; runs starting after steps {runs}")
else:
    print(f"{len(steps)} steps once each, {len(vals)} validations, kinds {sorted(kinds)}")
PYEOF
}

# 1. An uninterrupted run on 2 ranks: the reference.
timeout 300 "$MPIEXEC" -n 2 "$TRAIN" "${args[@]}" --metrics "$WORK/ref.jsonl" >"$WORK/ref.log" 2>&1
rc=$?
if [ "$rc" -eq 0 ] && out=$(check "$WORK/ref.jsonl" - "$WORK/ref.log" 2>&1); then
  ok "uninterrupted: $out; the step lines' values"
else
  bad "uninterrupted (exit $rc): $out"; tail -5 "$WORK/ref.log"
fi

# 2. SIGUSR1 mid-run (saved, exit 3), then the same command again.
chain=(--save "$WORK/ck1" --load "$WORK/ck1" --metrics "$WORK/usr1.jsonl")
timeout 300 "$MPIEXEC" -n 2 "$TRAIN" "${args[@]}" "${chain[@]}" >"$WORK/usr1a.log" 2>&1 &
job=$!
wait_for "$WORK/usr1a.log" '^step 20/' && pid=$(rank_pid "$WORK/usr1.jsonl" 0) && kill -USR1 "$pid"
wait $job
first=$?
timeout 300 "$MPIEXEC" -n 2 "$TRAIN" "${args[@]}" "${chain[@]}" >"$WORK/usr1b.log" 2>&1
second=$?
# A signal that lands during a validation ends it unreported (the checkpoint was written before it),
# and the requeued run goes on after that step: one validation fewer in the chain.
cut=$(sed -nE 's/^validation at step ([0-9]+) cut short by .*/\1/p' "$WORK/usr1a.log")
if [ "$first" -eq 3 ] && [ "$second" -eq 0 ] &&
  out=$(CUT="$cut" check "$WORK/usr1.jsonl" "$WORK/ref.jsonl" - 2>&1); then
  ok "SIGUSR1, requeued: exits $first then $second; $out"
else
  bad "SIGUSR1, requeued: exits $first then $second: $out"; tail -n 3 "$WORK/usr1a.log" "$WORK/usr1b.log"
fi

# 3. SIGKILL past the last checkpoint (--save-every 20), a line cut short, then the same command.
chain=(--save "$WORK/ck2" --load "$WORK/ck2" --save-every 20 --metrics "$WORK/kill.jsonl")
timeout 300 "$MPIEXEC" -n 2 "$TRAIN" "${args[@]}" "${chain[@]}" >"$WORK/killa.log" 2>&1 &
job=$!
# Rank 0 (the writer of the file and the holder of --save's lock) killed: mpiexec ends the job.
wait_for "$WORK/killa.log" '^step 50/' && pid=$(rank_pid "$WORK/kill.jsonl" 0) && kill -KILL "$pid"
wait $job 2>/dev/null
saved=$(sed -n 's/^step_0*//p' "$WORK/ck2/latest" 2>/dev/null)
printf '{"kind":"step","step":%d,"lo' "$((saved + 1))" >>"$WORK/kill.jsonl"
timeout 300 "$MPIEXEC" -n 2 "$TRAIN" "${args[@]}" "${chain[@]}" >"$WORK/killb.log" 2>&1
rc=$?
out=
note=$(grep -c -e "--metrics .*kill.jsonl: its last line was cut short" "$WORK/killb.log")
if [ "$rc" -eq 0 ] && [ -n "$saved" ] && [ "$note" -eq 1 ] &&
  out=$(check "$WORK/kill.jsonl" "$WORK/ref.jsonl" - 2>&1); then
  ok "SIGKILL after the checkpoint of step $saved and a torn line, requeued: noted; $out"
else
  bad "SIGKILL, requeued: exit $rc, checkpoint '${saved}', $note note(s): $out"; tail -3 "$WORK/killb.log"
fi

# 4. A new run never appends to another run's file, and a dry run writes nothing.
cp "$WORK/ref.jsonl" "$WORK/before.jsonl"
expect_error "a new run on another run's file" 1 \
  "^error: --metrics .*ref.jsonl holds another run's records, and a new run never appends to another run's file; choose another file, or resume that run with --load$" \
  -- "${args[@]}" --metrics "$WORK/ref.jsonl"
cmp -s "$WORK/ref.jsonl" "$WORK/before.jsonl" && ok "the other run's file is as it was" || bad "ref.jsonl changed"
timeout 60 "$TRAIN" "${args[@]}" --dry-run --metrics "$WORK/new.jsonl" >"$WORK/dry.log" 2>&1
rc=$?
[ "$rc" -eq 0 ] && [ ! -e "$WORK/new.jsonl" ] && ok "--dry-run: exit 0, no metrics file" ||
  { bad "--dry-run: exit $rc, file: $(ls "$WORK"/new.jsonl* 2>&1)"; tail -3 "$WORK/dry.log"; }

# 5. Files that are not this run's records are refused and left as they are: a line that is no
# record (without a newline it could pass for one cut short), the run's own input under another
# name, another run's records for a resumed run.
tiny=(--layers 2 --heads 4 --dim 64 --batch 2 --seq-len 32 --val-every 0 --threads 1)
unchanged() {  # unchanged NAME FILE COPY
  cmp -s "$2" "$3" && ok "$1: the file is as it was" || bad "$1: $2 changed"
}
printf '{"accuracy": 0.91}' >"$WORK/r.json"
cp "$WORK/r.json" "$WORK/r0"
expect_error "a one-line file that is no record" 1 \
  "^error: --metrics .*r.json line 1 is not a metrics record .* choose another file$" \
  -- "${tiny[@]}" --steps 2 --metrics "$WORK/r.json"
unchanged "a one-line file that is no record" "$WORK/r.json" "$WORK/r0"
head -c 300 "$(dirname "$0")/../../README.md" | tr -d '\n' >"$WORK/text.txt"
cp "$WORK/text.txt" "$WORK/text0"
ln "$WORK/text.txt" "$WORK/hard.txt"
ln -s text.txt "$WORK/link.txt"
expect_error "--metrics a hard link to --data" 1 \
  "^error: --metrics .*hard.txt is the file --data .*text.txt reads, and a run never writes over its input" \
  -- "${tiny[@]}" --steps 2 --data "bytes:$WORK/text.txt" --metrics "$WORK/hard.txt"
expect_error "--metrics a symbolic link to --val-data" 1 \
  "^error: --metrics .*link.txt is the file --val-data .*text.txt reads" \
  -- "${tiny[@]}" --steps 2 --val-data "bytes:$WORK/text.txt" --metrics "$WORK/link.txt"
unchanged "--metrics the run's input" "$WORK/text.txt" "$WORK/text0"
[ -L "$WORK/link.txt" ] && unchanged "--metrics the run's input, its hard link" "$WORK/hard.txt" "$WORK/text0" ||
  bad "--metrics the run's input: the symbolic link was replaced"
"$TRAIN" "${tiny[@]}" --steps 2 --save "$WORK/ckA" >/dev/null 2>&1 &&
  "$TRAIN" "${tiny[@]}" --steps 4 --save "$WORK/ckB" --metrics "$WORK/b.jsonl" >/dev/null 2>&1
cp "$WORK/b.jsonl" "$WORK/b0"
expect_error "a resumed run on another run's file" 1 \
  "^error: --metrics .*b.jsonl holds the records of another run \(--save .*ckB\), not this one's \(--save .*ckA\)" \
  -- "${tiny[@]}" --steps 3 --save "$WORK/ckA" --load "$WORK/ckA" --metrics "$WORK/b.jsonl"
unchanged "a resumed run on another run's file" "$WORK/b.jsonl" "$WORK/b0"
# Its own run, through a symbolic link, after a line cut short: the target rewritten, the link kept.
ln -s b.jsonl "$WORK/b-link.jsonl"
printf '{"kind":"st' >>"$WORK/b.jsonl"
out=$("$TRAIN" "${tiny[@]}" --steps 5 --save "$WORK/ckB" --load "$WORK/ckB" \
  --metrics "$WORK/b-link.jsonl" 2>&1)
rc=$?
if [ "$rc" -eq 0 ] && grep -q "^note: --metrics .*b-link.jsonl: its last line was cut short" <<<"$out" &&
  [ -L "$WORK/b-link.jsonl" ] && [ "$(tail -c 1 "$WORK/b.jsonl" | od -An -c | tr -d ' ')" = '\n' ] &&
  [ "$(grep -c '"kind":"step"' "$WORK/b.jsonl")" -eq 5 ]; then
  ok "its own run through a link after a line cut short: the line dropped, the link kept, steps 1-5"
else
  bad "its own run through a link: exit $rc, $(ls -l "$WORK/b-link.jsonl"): $(grep -E '^(error|note)' <<<"$out")"
fi

# 6. A record the file system refuses halfway (a 1 KiB file size limit, SIGXFSZ ignored so that
# write(2) fails with EFBIG) is taken back whole: one warning, the run goes on, every line whole.
# MPI's shared memory segments are files too: one rank, over self and TCP only.
out=$(UCX_TLS=self,tcp bash -c 'trap "" XFSZ; ulimit -f 1; exec "$@"' - "$TRAIN" "${tiny[@]}" \
  --steps 10 --metrics "$WORK/full.jsonl" 2>&1 >/dev/null)
rc=$?
if [ "$rc" -eq 0 ] && [ "$(grep -c '^warning: --metrics .*could not be written' <<<"$out")" -eq 1 ] &&
  "$PY" -c 'import json, sys
text = open(sys.argv[1]).read()
assert text.endswith("\n") and all(json.loads(l)["kind"] for l in text.splitlines())' "$WORK/full.jsonl"; then
  ok "a full file: one warning, exit 0, $(wc -l <"$WORK/full.jsonl") whole records of $(wc -c <"$WORK/full.jsonl") bytes"
else
  bad "a full file: exit $rc: $out; ends $(tail -c 40 "$WORK/full.jsonl" 2>&1)"
fi
finish
