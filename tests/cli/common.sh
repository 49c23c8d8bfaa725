# Shared by the CLI tests: the trainer (and the generator, where the test uses it), a scratch dir,
# and counters that end in the plain "N passed, N failed" line.
set -u
TRAIN=${MPIFORMER_TRAIN:?set MPIFORMER_TRAIN to the mpiformer-train binary}
GENERATE=${MPIFORMER_GENERATE:-}
MPIEXEC=${MPIEXEC:-mpiexec}
# Debian's python3 (numpy, PyTorch); MPIFORMER_PYTHON where another holds them (a GPU machine).
PY=${MPIFORMER_PYTHON:-/usr/bin/python3}
WORK=$(mktemp -d)
trap 'rm -rf "$WORK"' EXIT
passed=0
failed=0
ok() { passed=$((passed + 1)); echo "ok   $1"; }
bad() { failed=$((failed + 1)); echo "FAIL $1"; }
finish() {
  echo "$(basename "$0" .sh): $passed passed, $failed failed"
  [ "$failed" -eq 0 ]
}
# Writes an llm.c token shard: make_shard FILE COUNT MAX_ID [MAGIC] [VERSION]
make_shard() {
  "$PY" - "$@" <<'PYEOF'
import struct, sys
path, n, hi = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
magic = int(sys.argv[4]) if len(sys.argv) > 4 else 20240520
version = int(sys.argv[5]) if len(sys.argv) > 5 else 1
header = [0] * 256
header[0], header[1], header[2] = magic, version, n
with open(path, "wb") as f:
    f.write(struct.pack("<256i", *header))
    f.write(struct.pack("<%dH" % n, *[(i * 7919) % (hi + 1) for i in range(n)]))
PYEOF
}
# expect_error NAME RANKS PATTERN -- ARGS...: the trainer must exit with status 2 within 60 s,
# printing exactly one "error:" line that matches PATTERN.
expect_error() { expect_error_from "$TRAIN" "$@"; }
# expect_error_from PROGRAM NAME RANKS PATTERN -- ARGS...: the same for another program.
expect_error_from() {
  local program=$1 name=$2 ranks=$3 pattern=$4
  shift 5
  local out rc
  out=$(timeout 60 "$MPIEXEC" -n "$ranks" "$program" "$@" 2>&1 >/dev/null)
  rc=$?
  local lines
  lines=$(grep -c '^error:' <<<"$out")
  if [ "$rc" -eq 124 ]; then
    bad "$name: hung (timeout)"
  elif [ "$rc" -ne 2 ]; then
    bad "$name: exit status $rc, expected 2; output: $out"
  elif [ "$lines" -ne 1 ]; then
    bad "$name: $lines error lines, expected exactly 1: $out"
  elif ! grep -qiE -- "$pattern" <<<"$out"; then
    bad "$name: message does not match /$pattern/: $out"
  else
    ok "$name ($ranks ranks): $(head -1 <<<"$out")"
  fi
}
# The loss, lr and norm of every step line (the timings differ from run to run).
numbers() { grep -hE '^step [0-9]+/' "$@" | sed -E 's/^(step [0-9]+)\/[0-9]+ \| (loss [^|]*\| lr [^|]*\| norm [^|]*)\|.*/\1 | \2/'; }
# The pid of one rank of the job whose command line contains MARKER (MPICH gives each PMI_RANK).
rank_pid() {
  local p
  for p in $(pgrep -f -- "$1"); do
    tr '\0' '\n' <"/proc/$p/environ" 2>/dev/null | grep -qx "PMI_RANK=$2" && { echo "$p"; return 0; }
  done
  return 1
}
# Waits up to 60 s for a line matching PATTERN in FILE.
wait_for() {
  local i
  for ((i = 0; i < 1200; i++)); do
    grep -qE "$2" "$1" 2>/dev/null && return 0
    sleep 0.05
  done
  return 1
}
# help_rows_are_flags PROGRAM: the flags PROGRAM's --help lists and those its parser takes are
# one table's rows (layout/settings.hpp): each listed flag, given a value, is never an unknown
# flag (a bad value or a later check refuses it, in the program's error line), and one --help
# does not list is.
help_rows_are_flags() {
  local program=$1 flags flag out unknown=""
  flags=$(cd "$WORK" && "$program" --help | sed -nE 's/^  (--[a-z0-9-]+).*/\1/p' | grep -vx -- --help)
  for flag in $flags; do
    out=$(cd "$WORK" && timeout 30 "$program" "$flag" x 2>&1 >/dev/null)
    grep -q "^error: unknown flag '$flag'" <<<"$out" && unknown+=" $flag"
  done
  out=$(cd "$WORK" && timeout 30 "$program" --not-listed x 2>&1 >/dev/null)
  if [ -n "$flags" ] && [ -z "$unknown" ] && grep -q "^error: unknown flag '--not-listed'" <<<"$out"; then
    ok "$(basename "$program"): the $(wc -w <<<"$flags") flags --help lists are the ones it parses"
  else
    bad "$(basename "$program"): --help lists flags it does not parse:${unknown:- (none listed)}"
  fi
}
