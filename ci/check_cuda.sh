#!/usr/bin/env bash
# CUDA translation units through nvcc, without a GPU and without a CUDA-enabled Kokkos:
#   1. every .cu file that does not need Kokkos compiles (nvcc -std=c++17 -c);
#   2. tests/gpu/test_cublas_gemm.cu builds and links against cuBLAS, cudart and GoogleTest;
#   3. it runs: with a device it must pass, without one every test must report SKIPPED.
#   bash ci/check_cuda.sh       (ctest: cuda_compile; exit 77 = skipped when nvcc is absent)
# Environment: NVCC (path to nvcc), CUDA_ARCH (default sm_80).
# Prints one line per check and `check_cuda: N passed, N failed`; exits 1 if any failed.
set -u

root=$(cd "$(dirname "$0")/.." && pwd)
nvcc=${NVCC:-$(command -v nvcc || true)}
[ -n "$nvcc" ] || [ ! -x /usr/local/cuda/bin/nvcc ] || nvcc=/usr/local/cuda/bin/nvcc
if [ -z "$nvcc" ] || [ ! -x "$nvcc" ]; then
  echo "check_cuda: nvcc not found (PATH, /usr/local/cuda/bin): skipped"
  exit 77
fi
arch=${CUDA_ARCH:-sm_80}

work=$(mktemp -d "${TMPDIR:-/tmp}/mpf-cuda.XXXXXX")
trap 'rm -rf "$work"' EXIT
passed=0
failed=0
pass() { echo "PASS  $1"; passed=$((passed + 1)); }
fail() { echo "FAIL  $1"; failed=$((failed + 1)); [ $# -lt 2 ] || sed 's/^/      /' "$2" | tail -n 40; }

echo "nvcc: $nvcc ($("$nvcc" --version | sed -n 's/.*release \([0-9.]*\).*/\1/p')), -arch=$arch"
if "$nvcc" --list-gpu-arch 2>/dev/null | grep -qx "compute_${arch#sm_}"; then
  pass "nvcc supports $arch"
else
  fail "nvcc supports $arch (set CUDA_ARCH to one nvcc --list-gpu-arch lists)"
fi
nvflags=(-std=c++17 "-arch=$arch" -I"$root")

# 1. Translation units. One that includes Kokkos (directly or through src/core) needs a
# CUDA-enabled Kokkos and is compiled by the CMake build instead.
mapfile -t units < <(cd "$root" && find backends src apps -name '*.cu' 2>/dev/null | sort)
objects=()
for unit in "${units[@]}"; do
  if grep -qE '#include *[<"](Kokkos|core/)' "$root/$unit"; then
    echo "SKIP  $unit (needs a CUDA-enabled Kokkos)"
    continue
  fi
  obj="$work/$(echo "$unit" | tr / _).o"
  if "$nvcc" "${nvflags[@]}" -c "$root/$unit" -o "$obj" >"$work/out" 2>&1; then
    pass "nvcc compiles $unit"
    objects+=("$obj")
  else
    fail "nvcc compiles $unit" "$work/out"
  fi
done
[ "${#units[@]}" -gt 0 ] || fail "found CUDA translation units under backends/ src/ apps/"

# 2. The GPU test, linked against the compiled backend.
backend="$work/backends_cuda_gemm_cublas.cu.o"
test_bin="$work/test_cublas_gemm"
if [ ! -f "$backend" ]; then
  fail "build tests/gpu/test_cublas_gemm.cu (backends/cuda/gemm_cublas.cu did not compile)"
elif "$nvcc" "${nvflags[@]}" "$root/tests/gpu/test_cublas_gemm.cu" "$backend" -o "$test_bin" \
     -lcublas -lcudart -lgtest_main -lgtest -lpthread >"$work/out" 2>&1; then
  pass "build tests/gpu/test_cublas_gemm.cu (cuBLAS, cudart, GoogleTest)"
else
  fail "build tests/gpu/test_cublas_gemm.cu (cuBLAS, cudart, GoogleTest)" "$work/out"
fi

# 3. Run it. No device: gtest exits 0 with every test SKIPPED; a pass would mean it ran nothing
# real. With a device: every test must pass.
if [ -x "$test_bin" ]; then
  "$test_bin" >"$work/run" 2>&1
  status=$?
  total=$(sed -n 's/^\[==========\] \([0-9]*\) tests\{0,1\} from .* ran\..*/\1/p' "$work/run")
  skipped=$(sed -n 's/^\[  SKIPPED \] \([0-9]*\) tests\{0,1\}, listed below:.*/\1/p' "$work/run")
  passed_tests=$(sed -n 's/^\[  PASSED  \] \([0-9]*\) tests\{0,1\}\..*/\1/p' "$work/run")
  if grep -q "no CUDA device" "$work/run"; then
    reason=$(grep -m1 "^no CUDA device" "$work/run")
    if [ "$status" -eq 0 ] && [ -n "$total" ] && [ "$total" -gt 0 ] && \
       [ "${skipped:-0}" = "$total" ] && [ "${passed_tests:-0}" = 0 ]; then
      pass "GPU test skips without a device ($skipped of $total skipped: $reason)"
    else
      fail "GPU test skips without a device (all $total tests SKIPPED, none passed)" "$work/run"
    fi
  elif [ "$status" -eq 0 ] && [ -n "$total" ] && [ "${passed_tests:-0}" = "$total" ]; then
    pass "GPU test passes on the device ($total tests)"
  else
    fail "GPU test (exit $status)" "$work/run"
  fi
fi

echo "check_cuda: $passed passed, $failed failed"
[ "$failed" -eq 0 ]
