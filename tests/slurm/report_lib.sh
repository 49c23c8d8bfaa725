# shellcheck shell=bash
# How the Slurm tests report (sourced): TEST names the test in a skip line; ok/bad count the
# checks; now/since time them.
skip() {
  echo "$TEST: SKIP: $*"
  exit 77
}
passed=0
failed=0
ok() { passed=$((passed + 1)); echo "ok   $1"; }
bad() { failed=$((failed + 1)); echo "FAIL $1"; }
now() { date +%s.%N; }
since() { awk -v a="$1" -v b="$(now)" 'BEGIN { printf "%.1f s", b - a }'; }
