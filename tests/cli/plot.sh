#!/usr/bin/env bash
# mpiformer-plot draws two runs' --metrics files into one PNG of the size asked (its header read
# here, not by matplotlib); it never writes over a file unless told to, and each bad input (a FIFO
# or directory, a file not UTF-8, a record with a field of the wrong type) is one error line with
# exit 2.
source "$(dirname "$0")/common.sh"
PLOT=${MPIFORMER_PLOT:?set MPIFORMER_PLOT to the mpiformer-plot script}
if ! /usr/bin/python3 -c 'import matplotlib' 2>/dev/null; then
  echo "plot: skipped: /usr/bin/python3 (the script's interpreter) has no matplotlib (Debian: python3-matplotlib)"
  exit 77
fi
export OMP_NUM_THREADS=1
tiny=(--steps 20 --val-every 10 --layers 2 --dim 64 --heads 2 --batch 4 --seq-len 32)
"$TRAIN" "${tiny[@]}" --metrics "$WORK/a.jsonl" >"$WORK/a.log" 2>&1 || bad "run a"
"$TRAIN" "${tiny[@]}" --lr 1e-3 --metrics "$WORK/b.jsonl" >"$WORK/b.log" 2>&1 || bad "run b"

# size FILE: the PNG's width x height from its IHDR chunk.
size() { "$PY" -c '
import struct, sys
head = open(sys.argv[1], "rb").read(24)
assert head[:8] == b"\x89PNG\r\n\x1a\n" and head[12:16] == b"IHDR", "not a PNG"
print("%dx%d" % struct.unpack(">II", head[16:24]))' "$1"; }

out=$("$PLOT" "$WORK/a.jsonl" "$WORK/b.jsonl" --labels "lr 3e-4,lr 1e-3" --size 1200x800 \
  --out "$WORK/curves.png" 2>&1)
rc=$?
got=$(size "$WORK/curves.png" 2>&1)
if [ "$rc" -eq 0 ] && [ "$got" = 1200x800 ] && [ -z "$(ls -A "$WORK" | grep partial)" ]; then
  ok "two runs: $out (PNG header: $got)"
else
  bad "two runs: exit $rc, size '$got': $out"
fi

# A plot is not redrawn over a file without --overwrite; with it, it is.
cp "$WORK/curves.png" "$WORK/before.png"
expect_plot_error() {  # NAME PATTERN ARGS...
  local name=$1 pattern=$2 out rc
  shift 2
  out=$(timeout 60 "$PLOT" "$@" 2>&1 >/dev/null)
  rc=$?
  if [ "$rc" -eq 2 ] && [ "$(grep -c '^error:' <<<"$out")" -eq 1 ] && grep -qE -- "$pattern" <<<"$out"; then
    ok "$name: $out"
  else
    bad "$name: exit $rc: $out"
  fi
}
expect_plot_error "an existing --out" "^error: --out .*curves.png exists; choose another path, or pass --overwrite$" \
  "$WORK/a.jsonl" --out "$WORK/curves.png"
cmp -s "$WORK/curves.png" "$WORK/before.png" && ok "the existing PNG is as it was" || bad "curves.png changed"
# The same run with a step the trainer logged as not finite (null, as it writes one), and a label
# that would be a bad formula to matplotlib's math mode.
cp "$WORK/a.jsonl" "$WORK/odd.jsonl"
echo '{"kind":"step","step":21,"loss":null,"lr":0.0003,"norm":1e999,"tok_s":1000}' >>"$WORK/odd.jsonl"
"$PLOT" "$WORK/odd.jsonl" --labels '$\frac$' --out "$WORK/curves.png" --overwrite --size 640x480 \
  >/dev/null 2>&1 && [ "$(size "$WORK/curves.png")" = 640x480 ] &&
  ok "--overwrite redraws it (640x480; a null loss, a \$ label)" || bad "--overwrite"

printf 'step 1/20 | loss 5.5\n' >"$WORK/log.txt"
expect_plot_error "a log, not a metrics file" "^error: .*log.txt:1: not JSON; pass a file mpiformer-train --metrics wrote$" \
  "$WORK/log.txt" --out "$WORK/x.png"
expect_plot_error "a missing file" "^error: .*nope.jsonl: cannot read it" "$WORK/nope.jsonl" --out "$WORK/x.png"
# Not a regular file: refused before it is opened (reading a FIFO waits for a writer forever).
mkfifo "$WORK/fifo"
expect_plot_error "a FIFO" "^error: .*fifo: not a regular file" "$WORK/fifo" --out "$WORK/x.png"
expect_plot_error "a directory" "^error: .*: not a regular file" "$WORK" --out "$WORK/x.png"
printf '{"kind":"step","step":1,"loss":5}\n\xff\xfe\n' >"$WORK/latin.jsonl"
expect_plot_error "a file not UTF-8" "^error: .*latin.jsonl:2: not UTF-8 text" "$WORK/latin.jsonl" \
  --out "$WORK/x.png"
# Records the trainer would not write: one error line naming the line and the key, not a traceback.
n=0
for record in '"step":1,"loss":"abc"' '"step":null,"loss":5' '"step":[1],"loss":5' \
  '"step":{"a":1},"loss":5' '"step":1.5' '"step":1,"loss":true' '"step":1,"lr":[0.1]'; do
  n=$((n + 1))
  printf '{"kind":"step","step":0,"loss":6}\n{"kind":"step",%s}\n' "$record" >"$WORK/odd$n.jsonl"
  expect_plot_error "a record {$record}" "^error: .*odd$n.jsonl:2: \"(step|loss|lr)\" is .*, not a" \
    "$WORK/odd$n.jsonl" --out "$WORK/x.png"
done
echo '{"kind":{"a":1},"step":1}' >"$WORK/kind.jsonl"
expect_plot_error "a kind not a string" '^error: .*kind.jsonl:1: "kind" is \{"a": 1\}, not a string' \
  "$WORK/kind.jsonl" --out "$WORK/x.png"
expect_plot_error "labels for the wrong number of runs" "^error: --labels gives 1 names for 2 runs" \
  "$WORK/a.jsonl" "$WORK/b.jsonl" --labels one --out "$WORK/x.png"
expect_plot_error "no --out" "^error: the following arguments are required: --out" "$WORK/a.jsonl"
[ ! -e "$WORK/x.png" ] && ok "the refused plots wrote nothing" || bad "x.png written"
finish
