#!/usr/bin/env bash
# The whole CUDA build, compiled where there is no GPU: Kokkos 4 CUDA built inline (with the CUDA
# 13 patch it needs) through nvcc_wrapper, nvcc from /usr/local/cuda or PATH, for sm_90 (H100,
# H200) in BUILD_DIR/cuda-sm90:
#   1. it configures and every library source, app, test and GPU test compiles and links;
#   2. the trainer holds sm_90 machine code (where cuobjdump is there to list it);
#   3. its GPU tests (ctest -L gpu) run: on a machine without a GPU each must skip, saying why;
#      with one, each must pass.
# Each further architecture in CUDA_ARCHS (CUDA_ARCHS="90 80" adds sm_80, A100: about 7 minutes
# more on 2 cores, so the suite leaves it out) builds the library, the trainer and the GPU tests
# in BUILD_DIR/cuda-smNN. Unity builds (MPIFORMER_UNITY_BUILD: nvcc parses Kokkos once per batch
# of sources, not once per file: half the time).
#   bash ci/check_cuda.sh BUILD_DIR     (ctest: cuda_build; 77 = skipped: no nvcc or no Kokkos)
# Environment: NVCC (nvcc), CUDA_ARCHS (default "90"; the first gets the whole build).
# Prints one line per check and `check_cuda: N passed, N failed`; exits 1 if any failed.
set -u

build=${1:?usage: check_cuda.sh BUILD_DIR}
build=$(cd "$build" && pwd) || exit 1
root=$(cd "$(dirname "$0")/.." && pwd)
nvcc=${NVCC:-$(command -v nvcc || true)}
[ -n "$nvcc" ] || [ ! -x /usr/local/cuda/bin/nvcc ] || nvcc=/usr/local/cuda/bin/nvcc
if [ -z "$nvcc" ] || [ ! -x "$nvcc" ]; then
  echo "check_cuda: skipped: nvcc not found (PATH, /usr/local/cuda/bin; or set NVCC)"
  exit 77
fi
source "$root/ci/kokkos_source.sh"
if [ -z "$KOKKOS_SOURCE" ]; then
  echo "check_cuda: skipped: $WHY"
  exit 77
fi
read -ra archs <<<"${CUDA_ARCHS:-90}"
declare -A kokkos_arch=([70]=VOLTA70 [75]=TURING75 [80]=AMPERE80 [86]=AMPERE86 [89]=ADA89
  [90]=HOPPER90 [100]=BLACKWELL100 [120]=BLACKWELL120)
work=$(mktemp -d "${TMPDIR:-/tmp}/mpf-cuda.XXXXXX")
trap 'rm -rf "$work"' EXIT
passed=0
failed=0
pass() { echo "PASS  $1"; passed=$((passed + 1)); }
fail() { echo "FAIL  $1"; failed=$((failed + 1)); [ $# -lt 2 ] || sed 's/^/      /' "$2" | tail -n 40; }
jobs=$(nproc 2>/dev/null || echo 2)
echo "nvcc: $nvcc ($("$nvcc" --version | sed -n 's/.*release \([0-9.]*\).*/\1/p')); Kokkos: $KOKKOS_SOURCE"

for arch in "${archs[@]}"; do
  name=${kokkos_arch[$arch]:-}
  if [ -z "$name" ]; then
    fail "sm_$arch: no Kokkos architecture option known for it (CUDA_ARCHS)"
    continue
  fi
  tree="$build/cuda-sm$arch"
  whole=$([ "$arch" = "${archs[0]}" ] && echo 1 || echo 0)
  # The first architecture gets every target; the others the library and the GPU tests.
  targets=()
  [ "$whole" = 1 ] ||
    targets=(--target mpiformer mpiformer-train test_kernels test_attention test_layers test_cublas_gemm)
  start=$SECONDS
  if cmake -S "$root" -B "$tree" -DCMAKE_BUILD_TYPE=Release -DMPIFORMER_KOKKOS_SOURCE="$KOKKOS_SOURCE" \
    -DKokkos_ENABLE_CUDA=ON -DKokkos_ENABLE_SERIAL=ON -DKokkos_ARCH_"$name"=ON \
    -DMPIFORMER_ENABLE_CUDA=ON -DMPIFORMER_NVCC="$nvcc" -DMPIFORMER_UNITY_BUILD=ON \
    >"$work/configure.log" 2>&1 &&
    cmake --build "$tree" -j "$jobs" "${targets[@]}" >"$work/build.log" 2>&1; then
    what=$([ "$whole" = 1 ] && echo "every library source, app, test and GPU test" ||
      echo "the library, the trainer and the GPU tests")
    pass "sm_$arch ($name): $what compiled and linked in $((SECONDS - start)) s"
  else
    fail "sm_$arch ($name): configure and build" "$work/build.log"
    tail -n 20 "$work/configure.log"
    continue
  fi
  # Every program and the test binaries were made, and the objects carry code for this GPU.
  if [ "$whole" = 1 ]; then
    programs=$(cd "$tree" && ls mpiformer-train mpiformer-generate mpiformer-bench mpiformer-schedule \
      mpiformer-tokenize 2>/dev/null | wc -l)
    tests=$(find "$tree/tests" -maxdepth 1 -type f -executable -name 'test_*' | wc -l)
    [ "$programs" -eq 5 ] && [ "$tests" -gt 0 ] &&
      pass "sm_$arch: the 5 programs and $tests test binaries" ||
      fail "sm_$arch: $programs of 5 programs, $tests test binaries"
  fi
  dump=$(command -v cuobjdump || echo "$(dirname "$nvcc")/cuobjdump")
  if [ -x "$dump" ]; then
    "$dump" --list-elf "$tree/mpiformer-train" >"$work/elf" 2>&1
    elves=$(grep -c "sm_$arch" "$work/elf")
    [ "$elves" -gt 0 ] && pass "sm_$arch: mpiformer-train holds $elves sm_$arch code objects" ||
      fail "sm_$arch: no sm_$arch code in mpiformer-train" "$work/elf"
  else
    echo "note: no cuobjdump beside nvcc: the code objects' architecture is not checked"
  fi
  # 3. The GPU tests: skip with their reason without a GPU, pass with one.
  (cd "$tree" && ctest -L gpu --output-on-failure >"$work/gpu.log" 2>&1)
  status=$?
  total=$(grep -cE 'Test +#' "$work/gpu.log")
  skipped=$(grep -cE 'Test +#[0-9]+: .*\*\*\*(Skipped|Not Run)' "$work/gpu.log")
  reason=$(grep -m1 -E '^(skipped|no CUDA device|check_[a-z_]*: skipped)' "$work/gpu.log")
  if [ "$total" -eq 0 ]; then
    fail "sm_$arch: no GPU tests registered (ctest -L gpu)" "$work/gpu.log"
  elif [ "$status" -eq 0 ] && [ "$skipped" -eq "$total" ]; then
    pass "sm_$arch: all $total GPU tests skip here, saying why: ${reason:-(see ctest -L gpu -V)}"
  elif [ "$status" -eq 0 ] && [ "$skipped" -eq 0 ]; then
    pass "sm_$arch: all $total GPU tests pass on this machine's GPU"
  else
    fail "sm_$arch: GPU tests (ctest -L gpu: $total, $skipped skipped, exit $status)" "$work/gpu.log"
  fi
done

echo "check_cuda: $passed passed, $failed failed"
[ "$failed" -eq 0 ]
