#!/usr/bin/env bash
# The CPU backend without oneDNN (where it is absent, or -DMPIFORMER_ENABLE_ONEDNN=OFF): a fresh
# configure of this checkout with oneDNN off builds the backend library, and a program linked
# against it finds OpenBLAS as the only GEMM library, multiplies correctly and reports no bf16.
# Only the backend is built (seconds, not the minutes of the whole project); the rest of the code
# sees the same seam either way.
#   bash ci/check_openblas_only.sh BUILD_DIR       (ctest: openblas_only)
# Prints one line per check and `check_openblas_only: N passed, N failed`; exits 1 if any failed.
set -u

build=${1:?usage: check_openblas_only.sh BUILD_DIR}
cache="$build/CMakeCache.txt"
[ -f "$cache" ] || { echo "check_openblas_only: $build is not a configured build tree"; exit 1; }
root=$(cd "$(dirname "$0")/.." && pwd)
cache_value() { sed -n "s/^$1:[A-Z]*=//p" "$cache" | head -n 1; }
cmake_cmd=$(cache_value CMAKE_COMMAND)
[ -x "$cmake_cmd" ] || cmake_cmd=cmake
cxx=$(cache_value CMAKE_CXX_COMPILER)

work=$(mktemp -d "${TMPDIR:-/tmp}/mpf-openblas-only.XXXXXX")
trap 'rm -rf "$work"' EXIT
passed=0
failed=0
pass() { echo "PASS  $1"; passed=$((passed + 1)); }
fail() { echo "FAIL  $1"; failed=$((failed + 1)); [ $# -lt 2 ] || sed 's/^/      /' "$2" | tail -n 30; }

if "$cmake_cmd" -S "$root" -B "$work/build" -DCMAKE_BUILD_TYPE=Release -DMPIFORMER_ENABLE_ONEDNN=OFF \
  -DMPIFORMER_ENABLE_TESTS=OFF >"$work/configure.log" 2>&1 &&
  grep -q "OpenBLAS" "$work/configure.log" && ! grep -q "oneDNN .*default GEMM" "$work/configure.log"; then
  pass "configure with -DMPIFORMER_ENABLE_ONEDNN=OFF: OpenBLAS only"
else
  fail "configure with -DMPIFORMER_ENABLE_ONEDNN=OFF" "$work/configure.log"
fi
if "$cmake_cmd" --build "$work/build" --target mpiformer_backend >"$work/build.log" 2>&1; then
  pass "the backend library builds without oneDNN"
else
  fail "the backend library builds without oneDNN" "$work/build.log"
fi

cat >"$work/check.cpp" <<'CPP'
#include <cstdio>
#include "backends/gemm.hpp"
int main() {
  using namespace mpf::backend;
  const auto all = available();
  const float a[4] = {1, 2, 3, 4}, b[4] = {5, 6, 7, 8};
  float c[4] = {};
  gemm(Op::N, Op::N, 2, 2, 2, 1.0f, a, 2, b, 2, 0.0f, c, 2);  // [[19, 22], [43, 50]]
  const Kernels k = kernels();
  std::printf("libraries: %zu (%s) | %s %s | bf16: %s | c = %g %g %g %g\n", all.size(),
              all.empty() ? "" : all[0].c_str(), k.library.c_str(), k.isa.c_str(),
              k.bf16_missing.c_str(), c[0], c[1], c[2], c[3]);
  const bool ok = all.size() == 1 && all[0] == "openblas" && !select("onednn") &&
                  k.library.rfind("OpenBLAS", 0) == 0 && !k.bf16_missing.empty() && c[0] == 19 &&
                  c[1] == 22 && c[2] == 43 && c[3] == 50;
  return ok ? 0 : 1;
}
CPP
blas=$(cache_value MPIFORMER_OPENBLAS_LIBRARY)
if "$cxx" -std=c++17 -fopenmp -I"$root" -I"$root/src" "$work/check.cpp" "$work/build/libmpiformer_backend.a" \
  "$blas" -Wl,-rpath,"$(dirname "$blas")" -o "$work/check" >"$work/link.log" 2>&1; then
  pass "a program links against the OpenBLAS-only backend"
  if "$work/check" >"$work/run.log" 2>&1; then
    pass "OpenBLAS is the only library, products are right, no bf16: $(cat "$work/run.log")"
  else
    fail "the OpenBLAS-only backend" "$work/run.log"
  fi
else
  fail "a program links against the OpenBLAS-only backend" "$work/link.log"
fi
echo "check_openblas_only: $passed passed, $failed failed"
[ "$failed" -eq 0 ]
