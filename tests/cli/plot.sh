#!/usr/bin/env bash
# mpiformer-plot draws two runs' --metrics files into one PNG of the size asked (its header read
# here, not by matplotlib); it never writes over a file unless told to, and each bad input is one
# error line with exit 2.
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
"$PLOT" "$WORK/a.jsonl" --out "$WORK/curves.png" --overwrite --size 640x480 >/dev/null 2>&1 &&
  [ "$(size "$WORK/curves.png")" = 640x480 ] && ok "--overwrite redraws it (640x480)" || bad "--overwrite"

printf 'step 1/20 | loss 5.5\n' >"$WORK/log.txt"
expect_plot_error "a log, not a metrics file" "^error: .*log.txt:1: not JSON; pass a file mpiformer-train --metrics wrote$" \
  "$WORK/log.txt" --out "$WORK/x.png"
expect_plot_error "a missing file" "^error: .*nope.jsonl: cannot read it" "$WORK/nope.jsonl" --out "$WORK/x.png"
expect_plot_error "labels for the wrong number of runs" "^error: --labels gives 1 names for 2 runs" \
  "$WORK/a.jsonl" "$WORK/b.jsonl" --labels one --out "$WORK/x.png"
expect_plot_error "no --out" "^error: the following arguments are required: --out" "$WORK/a.jsonl"
[ ! -e "$WORK/x.png" ] && ok "the refused plots wrote nothing" || bad "x.png written"
finish
