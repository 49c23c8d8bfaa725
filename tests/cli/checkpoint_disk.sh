#!/usr/bin/env bash
# Saves that the file system refuses fail cleanly, on small tmpfs mounts (root needed: exit 77,
# which ctest reports as skipped, where a tmpfs cannot be mounted). Out of space in the middle of
# a checkpoint's data, and out of inodes just when `latest` is to be replaced: either way the run
# stops with status 6 and one error line, the new checkpoint is not in sight, the previous one
# and `latest` are intact, and the run resumes from them. A --save-local shard that does not fit
# is dropped with one warning, and the run and its global saves go on.
source "$(dirname "$0")/common.sh"

export OMP_NUM_THREADS=1
args=(--val-every 0 --layers 2 --dim 64 --heads 4 --seq-len 32 --batch 8)
disk=$WORK/disk
mkdir -p "$disk"
mount -t tmpfs -o size=4m tmpfs "$disk" 2>/dev/null || {
  echo "checkpoint_disk: SKIP: cannot mount a tmpfs here (needs root)"
  exit 77
}
umount "$disk"
trap 'umount "$disk" 2>/dev/null; rm -rf "$WORK"' EXIT

# check_failed NAME OPTIONS PATTERN: mounts a tmpfs with OPTIONS, saves steps 2 and 4 into it; the
# second save must fail matching PATTERN, leaving step 2 and `latest` as the only entries.
check_failed() {
  local name=$1 options=$2 pattern=$3 out rc
  mount -t tmpfs -o "$options" tmpfs "$disk"
  out=$("$MPIEXEC" -n 2 "$TRAIN" "${args[@]}" --steps 4 --save "$disk/ck" --save-every 2 2>&1)
  rc=$?
  if [ $rc -eq 6 ] && [ "$(grep -c '^error:' <<<"$out")" -eq 1 ] &&
    grep -qE "^error: saving the checkpoint of step 4 failed: $pattern.*Nothing of it is visible; $disk/ck/step_00000002 and $disk/ck/latest are intact" <<<"$out" &&
    [ "$(cat "$disk/ck/latest")" = step_00000002 ] &&
    [ "$(ls "$disk/ck" | tr '\n' ' ')" = "latest step_00000002 " ]; then
    ok "$name: exit 6, nothing of step 4 in sight, step 2 and latest intact"
  else
    bad "$name: exit $rc; $(grep -E 'error|checkpoint' <<<"$out"); $(ls "$disk/ck" | tr '\n' ' ')"
  fi
  if "$TRAIN" "${args[@]}" --steps 3 --load "$disk/ck" >"$WORK/after.log" 2>&1 &&
    grep -q '^step 3/3' "$WORK/after.log"; then
    ok "$name: step 2 resumes (its checksums verified)"
  else
    bad "$name: resume from step 2"; tail -3 "$WORK/after.log"
  fi
  umount "$disk"
}

# One checkpoint of this model (1.6 MB) fits in 2.6 MB, a second does not.
check_failed "full file system" size=2600k ".*No space left on device"
# 15 inodes: the root, ck, its lock, the ranks' record directory and its 2 files (the watchdog's),
# step 2 and its 3 files, latest, the partial directory and its 3 files; the temporary for the new
# `latest` is one too many.
check_failed "no inode left for latest" size=8m,nr_inodes=15 "cannot create $disk/ck/latest.partial"
# --save-local on a full disk: that local save is dropped with one warning, the run goes on, the
# global saves still happen and the older local shard stays (2 MB hold one 1.6 MB shard, not two).
mount -t tmpfs -o size=2m tmpfs "$disk"
out=$("$MPIEXEC" -n 1 "$TRAIN" "${args[@]}" --steps 5 --save "$WORK/g" --save-every 4 \
  --save-local "$disk/loc" --save-local-every 2 2>&1)
rc=$?
if [ $rc -eq 0 ] && [ "$(grep -c '^warning: the local shards' <<<"$out")" -eq 1 ] &&
  grep -qE "^warning: the local shards of step 4 were not saved \(rank 0: cannot write .*No space left on device\)\); the newest complete local set and the --save checkpoints are intact" <<<"$out" &&
  [ "$(cat "$WORK/g/latest")" = step_00000005 ] && [ -d "$WORK/g/step_00000004" ] &&
  [ "$(ls "$disk/loc" | grep -c 'step_00000002-rank_00000$')" -eq 1 ] && [ "$(ls "$disk/loc" | wc -l)" -eq 1 ]; then
  ok "a full local disk: one warning, steps 4 and 5 saved globally, step 2's local shard intact"
else
  bad "a full local disk: exit $rc; $(grep -E 'warning|error|checkpoint' <<<"$out"); $(ls "$disk/loc" | tr '\n' ' ')"
fi
umount "$disk"

finish
