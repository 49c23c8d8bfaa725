#!/usr/bin/env bash
# Where the ranks run and --dry-run: the start-up table has a row per rank with the grid's
# coordinates (world rank = tp + T*(dp + D*pp)), the node's rank count and the threads that
# follow from it; --dry-run checks a layout as a run would, prints the table and a summary,
# exits 0 quickly and writes nothing; a bad layout under --dry-run is the run's one error line.
source "$(dirname "$0")/common.sh"

# check_rows NAME LOG RANKS T D P THREADS: the log's table has one row per rank, each with the
# coordinates the grid's rule gives, on one host, local rank = rank (one node), THREADS threads.
check_rows() {
  local name=$1 log=$2 n=$3 T=$4 D=$5 P=$6 threads=$7
  local rows wrong
  rows=$(grep -E '^ +[0-9]+ +[^ ]+ +[0-9]+/[0-9]+ +[0-9]+ +[0-9]+ +[0-9]+ +[0-9]+$' "$log")
  wrong=$(awk -v n="$n" -v T="$T" -v D="$D" -v P="$P" -v th="$threads" '
    { r = $1; want = sprintf("%d/%d %d %d %d %d", r, n, r % T, int(r / (T * D)), int(r / T) % D, th)
      got = $3 " " $4 " " $5 " " $6 " " $7
      if (got != want || r != NR - 1) print "rank " r ": " got " (expected " want ")"
      host[$2] = 1 }
    END { if (NR != n) print NR " rows for " n " ranks"; if (length(host) != 1) print "several hosts" }' <<<"$rows")
  if grep -qE "^grid: world $n = tp $T x dp $D x pp $P \(tp fastest\) \| 1 node$" "$log" && [ -z "$wrong" ]; then
    ok "$name: a row per rank, coordinates by the grid's rule, $threads thread(s) each"
  else
    bad "$name: ${wrong:-no grid line}"; cat "$log"
  fi
}

# 1. --dry-run on 1, 2 and 4 ranks, over layouts; OMP_NUM_THREADS unset, so each rank takes the
#    node's cores over the ranks on it.
cores=$(env -u OMP_NUM_THREADS -u OMP_THREAD_LIMIT nproc)  # the CPUs this process may use
tiny=(--layers 4 --heads 4 --dim 32 --batch 8 --seq-len 16)
for layout in "1 1 1 1" "2 2 1 1" "2 1 1 2" "4 2 1 2" "4 2 2 1" "4 1 2 2" "4 4 1 1"; do
  read -r n T D P <<<"$layout"
  threads=$((cores / n > 0 ? cores / n : 1))
  env -u OMP_NUM_THREADS timeout 60 "$MPIEXEC" -n "$n" "$TRAIN" --dry-run "${tiny[@]}" \
    --tp "$T" --pp "$P" --microbatches 2 >"$WORK/dry.log" 2>&1
  rc=$?
  [ "$rc" -eq 0 ] || bad "dry run tp $T dp $D pp $P: exit $rc"
  check_rows "dry run on $n ranks, tp $T dp $D pp $P" "$WORK/dry.log" "$n" "$T" "$D" "$P" "$threads"
done
grep -q "^dry run: layout tp 4 x dp 1 x pp 1 on 4 ranks, 1 node; schedule 1f1b, 2 microbatches of 4 rows per DP rank" \
  "$WORK/dry.log" && ok "dry run summary: the layout and schedule" || { bad "dry run summary"; cat "$WORK/dry.log"; }

# 2. GPT-2 124M shapes on 4 ranks (tp 2 x pp 2), saving and resuming into a new directory: exit
#    0, the summary, no --save directory and no file left (--save's check that its folder is
#    writable creates and removes one), and no memory for weights (each rank would hold ~124 MB
#    of parameters alone).
gpt2=(--layers 12 --heads 12 --dim 768 --vocab 50257 --max-seq-len 1024 --seq-len 1024 --batch 8)
mkdir "$WORK/out"
before=$(find "$WORK/out" | sort)
start=$(date +%s.%N)
timeout 60 "$MPIEXEC" -n 4 /usr/bin/time -f 'maxrss %M KB' "$TRAIN" --dry-run "${gpt2[@]}" \
  --tp 2 --pp 2 --microbatches 4 --save "$WORK/out/ckpt" --load "$WORK/out/ckpt" --save-every 100 \
  --save-llmc "$WORK/out/model.bin" --trace "$WORK/out/trace.json" >"$WORK/gpt2.log" 2>&1
rc=$?
dry_s=$(echo "$(date +%s.%N) - $start" | bc)
rss=$(sed -nE 's/^maxrss ([0-9]+) KB$/\1/p' "$WORK/gpt2.log" | sort -n | tail -1)
if [ "$rc" -eq 0 ] && grep -q '^dry run: model L12 H12 C768 V50257 (padded 50304) maxT 1024, 124.48M parameters' "$WORK/gpt2.log" &&
  grep -q '^note: --load .*ckpt: no checkpoint yet' "$WORK/gpt2.log" &&
  grep -q "^dry run: layout tp 2 x dp 1 x pp 2 on 4 ranks, 1 node; schedule 1f1b, 4 microbatches of 2 rows per DP rank; stage 0: blocks 0-5 + embedding | stage 1: blocks 6-11 + head" "$WORK/gpt2.log"; then
  ok "dry run of GPT-2 124M on tp 2 x pp 2: exit 0, the model, the layout, the resume note (${dry_s} s)"
else
  bad "dry run of GPT-2 124M: exit $rc"; cat "$WORK/gpt2.log"
fi
after=$(find "$WORK/out" | sort)
[ "$after" = "$before" ] && ok "dry run wrote nothing: no --save directory, no --save-llmc or --trace file" ||
  bad "dry run changed $WORK/out: $(comm -13 <(echo "$before") <(echo "$after") | tr '\n' ' ')"
if [ -n "$rss" ] && [ "$rss" -lt 100000 ]; then
  ok "dry run allocated no weights: at most $((rss / 1024)) MB resident per rank"
else
  bad "dry run's ranks held up to '${rss:-?}' KB"
fi

# 3. It takes a fraction of a real run's time: the same small job, dry and for 30 steps (on a
#    text file: the built-in corpus takes both as long to generate).
yes "the quick brown fox jumps over the lazy dog." | head -c 100000 >"$WORK/text.txt"
small=(--layers 2 --heads 2 --dim 64 --steps 30 --val-every 0 --tp 2 --data "$WORK/text.txt")
start=$(date +%s.%N)
timeout 120 "$MPIEXEC" -n 2 "$TRAIN" "${small[@]}" >"$WORK/real.log" 2>&1
real_s=$(echo "$(date +%s.%N) - $start" | bc)
start=$(date +%s.%N)
timeout 60 "$MPIEXEC" -n 2 "$TRAIN" "${small[@]}" --dry-run >"$WORK/small_dry.log" 2>&1
small_dry_s=$(echo "$(date +%s.%N) - $start" | bc)
if [ "$(echo "$small_dry_s * 4 < $real_s" | bc)" = 1 ] && ! grep -q '^step ' "$WORK/small_dry.log"; then
  ok "dry run took ${small_dry_s} s, the real run ${real_s} s"
else
  bad "dry run took ${small_dry_s} s against the real run's ${real_s} s"
fi

# 4. The start-up banner of that real run has the same table.
check_rows "real run's banner, tp 2" "$WORK/real.log" 2 2 1 1 1

# 5. Resuming: the dry run names the checkpoint from its state file and leaves its files as they
#    were (only --save's check that it can write, a file created and removed, touches the folder).
"$MPIEXEC" -n 2 "$TRAIN" "${tiny[@]}" --steps 2 --val-every 0 --save "$WORK/ck" >/dev/null 2>&1
before=$(find "$WORK/ck" -type f -printf '%p %s %T@\n' | sort)
"$MPIEXEC" -n 4 "$TRAIN" "${tiny[@]}" --steps 6 --tp 2 --dry-run --save "$WORK/ck" --load "$WORK/ck" \
  >"$WORK/resume.log" 2>&1
rc=$?
if [ "$rc" -eq 0 ] && grep -q "^dry run: .*resumes from $WORK/ck/step_00000002 (step 2, saved by tp 1 x dp 2 x pp 1" "$WORK/resume.log" &&
  grep -q '^dry run: steps 3 to 6,' "$WORK/resume.log" &&
  [ "$(find "$WORK/ck" -type f -printf '%p %s %T@\n' | sort)" = "$before" ]; then
  ok "dry run of a resume: names step 2, would train steps 3 to 6, the checkpoint untouched"
else
  bad "dry run of a resume: exit $rc"; cat "$WORK/resume.log"
fi

# 6. A bad layout is the same one error line and exit 2 under --dry-run as in a run.
expect_error "dry run: ranks not a multiple of tp*pp" 4 "4 ranks do not divide into tp 3" -- --dry-run --tp 3
expect_error "dry run: batch over dp" 2 "--batch 3 does not split over 2 data-parallel ranks" -- --dry-run --batch 3
expect_error "dry run: layers over stages" 2 "1 layer cannot fill 2 pipeline chunks" -- --dry-run --layers 1 --pp 2
expect_error "dry run: microbatches" 2 "do not split into --microbatches 3" -- --dry-run --batch 8 --microbatches 3
expect_error "dry run: missing data" 2 "nope.bin" -- --dry-run --data "$WORK/nope.bin"
finish
