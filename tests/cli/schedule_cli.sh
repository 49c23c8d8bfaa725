#!/usr/bin/env bash
# mpiformer-schedule as a user runs it: its last line is the summary, whose bubble matches the
# textbook formulas (computed here, not copied from a run); the trace is valid JSON; bad input
# exits 2 with one "error:" line.
source "$(dirname "$0")/common.sh"
SCHED=${MPIFORMER_SCHEDULE:?set MPIFORMER_SCHEDULE to the mpiformer-schedule binary}

# percent NUM DEN: 100·NUM/DEN with 2 decimals, as the summary prints it
percent() { "$PY" -c "import sys; print('%.2f%%' % (100.0 * $1 / $2))"; }

# expect_summary NAME EXPECTED -- ARGS...: the last line of a successful run is EXPECTED
expect_summary() {
  local name=$1 expected=$2
  shift 3
  local out rc last
  out=$(timeout 60 "$SCHED" "$@" 2>&1)
  rc=$?
  last=$(tail -n 1 <<<"$out")
  if [ "$rc" -ne 0 ]; then
    bad "$name: exit status $rc: $out"
  elif [ "$last" != "$expected" ]; then
    bad "$name: last line '$last', expected '$expected'"
  else
    ok "$name: $last"
  fi
}

# 1F1B, P = 4, M = 8: (P-1)/(M+P-1) = 3/11; rank 0 holds P microbatches.
P=4 M=8
expect_summary "1f1b P=$P M=$M" "bubble $(percent $((P - 1)) $((M + P - 1))) | peak in-flight $P mb" \
  -- --schedule 1f1b --pp $P --microbatches $M
# AFAB: the same bubble, all M microbatches in flight.
expect_summary "afab P=$P M=$M" "bubble $(percent $((P - 1)) $((M + P - 1))) | peak in-flight $M mb" \
  -- --schedule afab --pp $P --microbatches $M

# Interleaved with M not a multiple of P keeps (P-1)/(V*M+P-1). Peak in flight on rank 0: its
# warmup 2(P-1) + (V-1)(P + M mod P) forwards plus one, capped at M*V, over V chunks (2 decimals).
for P in 2 4; do
  for V in 2 3; do
    for M in $((P + 1)) $((2 * P + 1)); do
      peak=$("$PY" -c "
w = min(2 * ($P - 1) + ($V - 1) * ($P + $M % $P) + 1, $M * $V)
print(('%.2f' % (w / $V)).rstrip('0').rstrip('.'))")
      expect_summary "interleaved P=$P V=$V M=$M" \
        "bubble $(percent $((P - 1)) $((V * M + P - 1))) | peak in-flight $peak mb" \
        -- --schedule interleaved --pp $P --virtual-stages $V --microbatches $M
    done
  done
done

# One line per rank, each a timeline in cells.
out=$("$SCHED" --schedule 1f1b --pp 4 --microbatches 8)
if [ "$(grep -c '^rank [0-3] | [.F]' <<<"$out")" -eq 4 ] &&
  grep -q '^rank 3 | \.  \.  \.  F0 B0 -- F1' <<<"$out"; then
  ok "timelines: one per rank, idle cells as '.'"
else
  bad "timelines: $out"
fi

# The trace is JSON with one complete event per F and B (W costs nothing by default).
if "$SCHED" --schedule interleaved --pp 4 --virtual-stages 2 --microbatches 5 \
  --trace "$WORK/trace.json" >/dev/null && "$PY" -m json.tool "$WORK/trace.json" >/dev/null; then
  n=$("$PY" -c "
import json, sys
print(sum(e['ph'] == 'X' for e in json.load(open(sys.argv[1]))['traceEvents']))" "$WORK/trace.json")
  if [ "$n" -eq $((2 * 4 * 2 * 5)) ]; then ok "trace: valid JSON, $n events"; else bad "trace: $n events"; fi
else
  bad "trace: not written or not JSON"
fi

# A measured profile: per-stage costs. With 1F1B on 2 stages the slower stage 1 (F 1.5, B 3)
# works without a break from the end of rank 0's first forward until its last backward, then
# rank 0 runs that microbatch's backward: makespan = F0 + M(F1 + B1) + B0 = 1 + 4 x 4.5 + 2 = 21,
# busy 4 x 3 + 4 x 4.5 = 30 of 2 x 21, so the bubble is 12/42 = 28.57%.
out=$("$SCHED" --pp 2 --microbatches 4 --f 1,1.5 --b 2,3)
if grep -q "^makespan 21 | bubble 28.57%" <<<"$out"; then
  ok "per-stage costs: makespan 21, bubble 28.57%"
else
  bad "per-stage costs: $(tail -2 <<<"$out")"
fi

# expect_error NAME PATTERN -- ARGS...
expect_error() {
  local name=$1 pattern=$2
  shift 3
  local out rc lines
  out=$(timeout 60 "$SCHED" "$@" 2>&1 >/dev/null)
  rc=$?
  lines=$(grep -c '^error:' <<<"$out")
  if [ "$rc" -ne 2 ]; then
    bad "$name: exit status $rc, expected 2; output: $out"
  elif [ "$lines" -ne 1 ] || [ "$(wc -l <<<"$out")" -ne 1 ]; then
    bad "$name: expected exactly one error line: $out"
  elif ! grep -qiE -- "$pattern" <<<"$out"; then
    bad "$name: message does not match /$pattern/: $out"
  else
    ok "$name: $out"
  fi
}

expect_error "unknown schedule" "unknown --schedule 'gpipe'.*afab, 1f1b, interleaved, zb-h1, zb-h2, zb-v or zb-auto" -- --schedule gpipe
expect_error "unknown flag" "unknown flag '--bogus'.*--help" -- --bogus 1
expect_error "missing value" "--pp needs a value" -- --pp
expect_error "not a number" "--microbatches expects an integer, got 'many'" -- --microbatches many
expect_error "interleaved M < P" "--microbatches >= --pp" -- --schedule interleaved --pp 4 --microbatches 3
expect_error "chunks without interleaving" "--virtual-stages 2 needs --schedule interleaved" \
  -- --schedule 1f1b --virtual-stages 2
expect_error "zero stages" "--pp must be >= 1" -- --pp 0
expect_error "negative cost" "--p2p must be >= 0" -- --p2p -1
expect_error "zero forward cost" "--f must be positive" -- --f 0
expect_error "unwritable trace" "cannot write --trace" -- --trace "$WORK/no/such/dir/t.json"
expect_error "trace exists" "--trace .*trace.json: already exists" -- --trace "$WORK/trace.json"
expect_error "costs per stage vs stages" "--b lists 3 costs for --pp 2" -- --pp 2 --b 1,2,3

if "$SCHED" --help | grep -q -- "--schedule S"; then ok "--help"; else bad "--help"; fi

finish
