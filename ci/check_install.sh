#!/usr/bin/env bash
# The install tree as a user gets it: `cmake --install` from a built tree into a fresh prefix, then
# the installed programs, headers and CMake package are used the way another project would.
#   bash ci/check_install.sh BUILD_DIR       (ctest: install_tree)
# Prints one line per check and `check_install: N passed, N failed`; exits 1 if any failed.
set -u

build=${1:?usage: check_install.sh BUILD_DIR}
build=$(cd "$build" && pwd) || exit 1
root=$(cd "$(dirname "$0")/.." && pwd)
cache="$build/CMakeCache.txt"
[ -f "$cache" ] || { echo "check_install: $build is not a configured build tree"; exit 1; }

cache_value() { sed -n "s/^$1:[A-Z]*=//p" "$cache" | head -n 1; }
cmake_cmd=$(cache_value CMAKE_COMMAND)
[ -x "$cmake_cmd" ] || cmake_cmd=cmake

work=$(mktemp -d "${TMPDIR:-/tmp}/mpf-install.XXXXXX")
trap 'rm -rf "$work"' EXIT
prefix="$work/prefix"
passed=0
failed=0
pass() { echo "PASS  $1"; passed=$((passed + 1)); }
fail() { echo "FAIL  $1"; failed=$((failed + 1)); [ $# -lt 2 ] || sed 's/^/      /' "$2" | tail -n 30; }
check() {  # check NAME CMD...: passes when CMD exits 0
  local name=$1; shift
  if "$@" >"$work/out" 2>&1; then pass "$name"; else fail "$name" "$work/out"; fi
}
export OMP_NUM_THREADS=1 UCX_TLS=self,sm UCX_NET_DEVICES=lo

# 1. Install.
if ! "$cmake_cmd" --install "$build" --prefix "$prefix" >"$work/install.log" 2>&1; then
  fail "cmake --install $build --prefix <tmp>" "$work/install.log"
  echo "check_install: $passed passed, $failed failed"
  exit 1
fi
pass "cmake --install into a fresh prefix"

# 2. Programs.
check "bin/mpiformer-train --help" "$prefix/bin/mpiformer-train" --help
grep -q "usage:" "$work/out" || fail "bin/mpiformer-train --help prints the usage"
check "bin/mpiformer-bench is installed and executable" test -x "$prefix/bin/mpiformer-bench"
check "bin/mpiformer-generate --help" "$prefix/bin/mpiformer-generate" --help
grep -q "usage:" "$work/out" || fail "bin/mpiformer-generate --help prints the usage"
check "bin/mpiformer-eval --help" "$prefix/bin/mpiformer-eval" --help
grep -q "usage:" "$work/out" || fail "bin/mpiformer-eval --help prints the usage"
check "bin/mpiformer-tokenize --help" "$prefix/bin/mpiformer-tokenize" --help
grep -q "usage:" "$work/out" || fail "bin/mpiformer-tokenize --help prints the usage"
check "bin/mpiformer-plan --help" "$prefix/bin/mpiformer-plan" --help
grep -q "usage:" "$work/out" || fail "bin/mpiformer-plan --help prints the usage"
check "share/mpiformer/machines/dgx-h100.json plans" "$prefix/bin/mpiformer-plan" \
  --machine "$prefix/share/mpiformer/machines/dgx-h100.json" --layers 4 --heads 4 --dim 128 \
  --batch 16 --seq-len 64 --nodes 2 --top 3
check "bin/mpiformer-plot --help" "$prefix/bin/mpiformer-plot" --help
grep -q "usage:" "$work/out" || fail "bin/mpiformer-plot --help prints the usage"
check "installed mpiformer-train trains 2 steps" \
  "$prefix/bin/mpiformer-train" --steps 2 --val-every 0 --batch 4 --seq-len 32

# The installed programs keep the RPATH to the OpenBLAS they were linked with (Debian installs the
# OpenMP and pthread builds under one soname; without it the loader picks the alternative).
blas=$(cache_value MPIFORMER_OPENBLAS_LIBRARY)
blas_dir=$(dirname "$blas")
if ! command -v readelf >/dev/null; then
  echo "SKIP  RPATH check (no readelf)"
else
  case "$blas_dir" in
    /lib | /lib64 | /usr/lib | /usr/lib64 | /usr/lib/$(uname -m)-linux-gnu)
      echo "SKIP  RPATH check (OpenBLAS in a default search directory: $blas_dir)" ;;
    *)
      readelf -d "$prefix/bin/mpiformer-train" >"$work/out" 2>&1
      if grep -E "R(UN)?PATH" "$work/out" | grep -qF "$blas_dir"; then
        pass "installed mpiformer-train keeps the RPATH to $blas_dir"
      else
        fail "installed mpiformer-train keeps the RPATH to $blas_dir" "$work/out"
      fi ;;
  esac
fi

# 3. Headers, in the source layout under include/mpiformer.
inc="$prefix/include/mpiformer"
for h in model/gpt.hpp model/config.hpp core/types.hpp train/trainer.hpp backends/gemm.hpp \
         mpiformer/config.hpp; do
  check "include/mpiformer/$h" test -f "$inc/$h"
done

# 4. CMake package files and the static library.
cfg=$(find "$prefix" -path "*/cmake/mpiformer/mpiformerConfig.cmake" | head -n 1)
if [ -n "$cfg" ]; then
  pass "${cfg#"$prefix"/}"
  cfgdir=$(dirname "$cfg")
  check "mpiformerConfigVersion.cmake" test -f "$cfgdir/mpiformerConfigVersion.cmake"
  check "mpiformerTargets.cmake" test -f "$cfgdir/mpiformerTargets.cmake"
else
  fail "lib*/cmake/mpiformer/mpiformerConfig.cmake"
fi
check "libmpiformer.a" sh -c "find '$prefix' -name libmpiformer.a | grep -q ."

# 5. Another project: find_package(mpiformer) + mpiformer::mpiformer, built and run.
consumer_args=(-S "$root/tests/install/consumer" -B "$work/consumer"
               "-DCMAKE_PREFIX_PATH=$prefix")
# Same compiler (nvcc_wrapper for CUDA Kokkos) and build type; Kokkos is found by the package
# config itself (it records the Kokkos_DIR it was built with).
for var in CMAKE_CXX_COMPILER CMAKE_BUILD_TYPE; do
  value=$(cache_value "$var")
  [ -z "$value" ] || consumer_args+=("-D$var=$value")
done
if "$cmake_cmd" "${consumer_args[@]}" >"$work/consumer.log" 2>&1; then
  pass "consumer: find_package(mpiformer CONFIG REQUIRED)"
  if "$cmake_cmd" --build "$work/consumer" >>"$work/consumer.log" 2>&1; then
    pass "consumer: builds against mpiformer::mpiformer"
    check "consumer: runs (pad_vocab, config.hpp, backend)" "$work/consumer/consumer"
  else
    fail "consumer: builds against mpiformer::mpiformer" "$work/consumer.log"
  fi
else
  fail "consumer: find_package(mpiformer CONFIG REQUIRED)" "$work/consumer.log"
fi

echo "check_install: $passed passed, $failed failed"
[ "$failed" -eq 0 ]
