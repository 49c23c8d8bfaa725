#!/usr/bin/env bash
# The Kokkos 4 OpenMP configuration, as a site's Spack builds it (kokkos+openmp: OpenMP on,
# Serial off), beside the Debian build (Kokkos 3.4, Serial, kernels split over OpenMP threads):
#   1. Kokkos built inline from its source (MPIFORMER_KOKKOS_SOURCE), with the project, in
#      BUILD_DIR/kokkos4-openmp (kept there: a later run builds incrementally);
#   2. its unit tests, the PyTorch references and the layout, context-parallel, checkpoint and
#      GPU-path parity tests pass (the bf16 repeats and the pipeline schedules are left to the
#      Debian build: the same code, and most of the time);
#   3. training runs give the Debian build's losses and gradient norms, bit for bit: 2 ranks x 1
#      thread, 1 rank x 2 threads, and TP 2 with sequence parallelism;
#   4. no Kokkos warning on a run with the OpenMP placement the job scripts set, and the banner
#      names the execution space and its threads.
#   bash ci/check_kokkos4.sh BUILD_DIR     (ctest: kokkos4_openmp; 77 = skipped, no Kokkos source)
# Prints one line per check and `check_kokkos4: N passed, N failed`; exits 1 if any failed.
set -u

build=${1:?usage: check_kokkos4.sh BUILD_DIR (the Debian build, for its trainer)}
build=$(cd "$build" && pwd) || exit 1
root=$(cd "$(dirname "$0")/.." && pwd)
source "$root/ci/kokkos_source.sh"
if [ -z "$KOKKOS_SOURCE" ]; then
  echo "check_kokkos4: skipped: $WHY"
  exit 77
fi
tree="$build/kokkos4-openmp"
work=$(mktemp -d "${TMPDIR:-/tmp}/mpf-kokkos4.XXXXXX")
trap 'rm -rf "$work"' EXIT
passed=0
failed=0
pass() { echo "PASS  $1"; passed=$((passed + 1)); }
fail() { echo "FAIL  $1"; failed=$((failed + 1)); [ $# -lt 2 ] || sed 's/^/      /' "$2" | tail -n 40; }
done_now() {
  echo "check_kokkos4: $passed passed, $failed failed"
  [ "$failed" -eq 0 ]
  exit
}

# 1. Configure and build (Kokkos itself takes a few minutes, once).
jobs=$(nproc 2>/dev/null || echo 2)
start=$SECONDS
if cmake -S "$root" -B "$tree" -DCMAKE_BUILD_TYPE=Release -DMPIFORMER_KOKKOS_SOURCE="$KOKKOS_SOURCE" \
  -DKokkos_ENABLE_OPENMP=ON -DKokkos_ENABLE_SERIAL=OFF -DMPIFORMER_UNITY_BUILD=ON \
  >"$work/configure.log" 2>&1 &&
  cmake --build "$tree" -j "$jobs" >"$work/build.log" 2>&1; then
  pass "Kokkos $(sed -n 's/.*Kokkos \([0-9.]*\) built inline.*/\1/p' "$work/configure.log" | head -1) OpenMP (Serial off) built inline with the project in $((SECONDS - start)) s ($KOKKOS_SOURCE)"
else
  fail "configure and build $tree" "$work/build.log"
  tail -n 20 "$work/configure.log"
  done_now
fi

# 2. The tests of that build. OMP_PROC_BIND=false, Kokkos' advice for tests (no binding, no
# warning); the test environment sets the thread counts. mpi_pipeline is left to the Debian build
# too: its schedules are host loops, the same in both, over the kernels and P2P paths the layout,
# checkpoint (pipeline resumes) and GPU-path tests run here; it would add 3 minutes.
if (cd "$tree" && OMP_PROC_BIND=false ctest --output-on-failure -LE 'cli|slurm|delivery|config' \
  -E '_bf16$|^mpi_pipeline$' >"$work/ctest.log" 2>&1); then
  pass "its tests: $(grep -E '^[0-9]+% tests passed' "$work/ctest.log") ($(grep -cE 'Test +#' "$work/ctest.log") tests: unit, reference, layouts, context parallel, checkpoint, GPU paths)"
else
  fail "its tests" "$work/ctest.log"
fi

# 3. The same losses and norms as the Debian build.
export UCX_TLS=self,sm UCX_NET_DEVICES=lo OMP_PROC_BIND=false
run() {  # run BUILD NAME RANKS THREADS ARGS...: the step lines of a 20-step run of the default model
  local b=$1 name=$2 ranks=$3 threads=$4
  shift 4
  OMP_NUM_THREADS=$threads timeout 300 mpiexec -n "$ranks" "$b/mpiformer-train" --steps 20 \
    --val-every 10 --peak-gflops 100 "$@" >"$work/$name.log" 2>&1
  grep -E '^(step|val step) ' "$work/$name.log" | cut -d'|' -f1-4
}
for layout in "2 1" "1 2" "2 1 --tp 2 --sequence-parallel"; do
  read -ra l <<<"$layout"
  debian=$(run "$build" debian "${l[@]}")
  kokkos4=$(run "$tree" kokkos4 "${l[@]}")
  what="${l[0]} rank(s) x ${l[1]} thread(s) ${l[*]:2}"
  if [ -n "$debian" ] && [ "$debian" = "$kokkos4" ]; then
    pass "$what: losses and norms equal the Debian build's, bit for bit ($(echo "$kokkos4" | grep -c ^step) steps, final $(echo "$kokkos4" | grep '^step 20' | cut -d'|' -f2 | xargs))"
  else
    diff <(echo "$debian") <(echo "$kokkos4") >"$work/diff"
    cat "$work/kokkos4.log" >>"$work/diff"
    fail "$what: losses differ from the Debian build's" "$work/diff"
  fi
done

# 4. The banner, and no Kokkos warning under the job scripts' OpenMP placement. (A peak no CPU
#    reaches, so that a fast first step draws no MFU warning: only the placement's are looked for.)
OMP_PROC_BIND=spread OMP_PLACES=threads OMP_NUM_THREADS=2 "$tree/mpiformer-train" --steps 1 \
  --val-every 0 --peak-gflops 100000 >"$work/banner.log" 2>&1
banner=$(grep -m1 '^mpiformer ' "$work/banner.log")
if [[ "$banner" == *"Kokkos 4."*" OpenMP, 2 thread(s)"* ]] && ! grep -qi 'warning' "$work/banner.log"; then
  pass "banner: $banner; no warning with OMP_PROC_BIND=spread OMP_PLACES=threads"
else
  fail "banner or warnings" "$work/banner.log"
fi
done_now
