#!/usr/bin/env bash
# The runbook for a bare CUDA machine: one that has a GPU, nvcc, CMake and Python with PyTorch, but
# no MPI, no Kokkos, no BLAS and no network. From the inputs ci/gpu/prepare.sh made on a Debian
# machine (a Kokkos release tarball and Debian's MPICH, OpenBLAS, oneDNN and GoogleTest packages)
# it:
#   build  unpacks the packages into a prefix with dpkg -x (nothing is installed) and builds the
#          project twice, Kokkos inline in both: WORK/cuda (Kokkos CUDA for this GPU's
#          architecture, cuBLAS) and WORK/cpu (Kokkos OpenMP, oneDNN/OpenBLAS), the CPU build the
#          GPU tests compare with;
#   test   runs the GPU tests (ctest -L gpu: tests/gpu/tests.cmake says what each checks);
#   attention  checks each attention path (O, logsumexp, dQ, dK, dV; T not a multiple of a tile)
#          against float64 PyTorch and PyTorch's scaled_dot_product_attention on this GPU
#          (ci/gpu/attention_check.py);
#   bench  runs GPT-2 124M and llama-124M against PyTorch eager on the same GPU, the attention's
#          rates against SDPA's, and one step's profile (ci/gpu/bench.sh).
# The tables of the attention and bench steps are also kept in WORK/tables.txt (and OUT).
#
#   bash ci/gpu/run.sh [INPUTS [WORK]]     INPUTS: default gpu-inputs/, WORK: default build-gpu/
#   STEPS="build test" bash ci/gpu/run.sh  only some of the steps (default: build test attention bench)
# Environment: CUDA_ARCH (e.g. 90; default: the first GPU's, from nvidia-smi), JOBS (default: the
# cores), OUT (a folder the logs are copied to, if set).
set -euo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
inputs=$(cd "${1:-$root/gpu-inputs}" && pwd)
work=${2:-$root/build-gpu}
steps=${STEPS:-build test attention bench}
jobs=${JOBS:-$(nproc)}
mkdir -p "$work"
work=$(cd "$work" && pwd)
log="$work/run.log"
say() { echo "== $*" | tee -a "$log"; }

# ---- the dependencies, unpacked into a prefix ----------------------------------------------------
deps="$work/deps"
# Unpacked again when the prepared packages change (the marker holds their list).
packages=$(cd "$inputs/debs" && ls *.deb)
if [ "$(cat "$deps/.unpacked" 2>/dev/null)" != "$packages" ]; then
  rm -rf "$deps"
  for deb in "$inputs"/debs/*.deb; do dpkg -x "$deb" "$deps"; done
  echo "$packages" >"$deps/.unpacked"
fi
lib="$deps/usr/lib/x86_64-linux-gnu"
# Debian points mpiexec at MPICH's hydra through /etc/alternatives, which dpkg -x does not make.
mkdir -p "$work/bin"
ln -sf "$deps/usr/bin/mpiexec.hydra" "$work/bin/mpiexec"
export PATH="$work/bin:$deps/usr/bin:$PATH"
export LD_LIBRARY_PATH="$lib:$lib/openblas-openmp${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
export UCX_MODULE_DIR="$lib/ucx"  # UCX's transports, where dpkg -x put them
export UCX_TLS=self,sm             # ranks on this one machine: shared memory
kokkos=$(ls "$inputs"/kokkos-*.tar.gz | head -n 1)
# MPI from the prefix without its compiler wrapper (mpicxx names Debian's install paths).
mpi_args=(-DMPI_SKIP_COMPILER_WRAPPER=ON -DMPI_CXX_HEADER_DIR="$deps/usr/include/x86_64-linux-gnu/mpich"
  -DMPI_CXX_LIB_NAMES=mpich -DMPI_mpich_LIBRARY="$lib/libmpich.so"
  -DMPIEXEC_EXECUTABLE="$deps/usr/bin/mpiexec.hydra" -DCMAKE_PREFIX_PATH="$deps/usr")
generator=()
command -v ninja >/dev/null && generator=(-G Ninja)
# CMake's FindMPI asks pkg-config for mpi-cxx before it takes the hints above, so a machine with an
# MPI of its own (Ubuntu's Open MPI on the CUDA images) would link that one, and hydra would then
# start every rank as a one-rank job: pkg-config sees only the prefix.
export PKG_CONFIG_LIBDIR="$lib/pkgconfig:$deps/usr/share/pkgconfig"
# Its .pc files name /usr; the sysroot makes their -I and -L paths the prefix's (Oniguruma, utf8proc).
export PKG_CONFIG_SYSROOT_DIR="$deps"

if [ -z "${CUDA_ARCH:-}" ]; then
  capability=$(nvidia-smi --query-gpu=compute_cap --format=csv,noheader 2>/dev/null | head -n 1)
  CUDA_ARCH=${capability/./}
fi
declare -A kokkos_arch=([70]=VOLTA70 [75]=TURING75 [80]=AMPERE80 [86]=AMPERE86 [89]=ADA89
  [90]=HOPPER90 [100]=BLACKWELL100 [120]=BLACKWELL120)
arch_option=${kokkos_arch[${CUDA_ARCH:-none}]:-}
[ -n "$arch_option" ] || { say "error: no GPU architecture (set CUDA_ARCH, e.g. 90)"; exit 2; }

# ---- build ---------------------------------------------------------------------------------------
# The CUDA build compiles its sources in batches (nvcc parses Kokkos once per batch, not per file):
# minutes of a lease saved.
if [[ " $steps " == *" build "* ]]; then
  say "building for sm_$CUDA_ARCH ($arch_option) with $kokkos, $jobs jobs"
  start=$SECONDS
  cmake -S "$root" -B "$work/cpu" "${generator[@]}" -DCMAKE_BUILD_TYPE=Release \
    -DMPIFORMER_KOKKOS_SOURCE="$kokkos" -DKokkos_ENABLE_OPENMP=ON -DKokkos_ENABLE_SERIAL=OFF \
    "${mpi_args[@]}" -DMPIFORMER_OPENBLAS_LIBRARY="$lib/openblas-openmp/libopenblas.so" \
    -DMPIFORMER_CBLAS_INCLUDE_DIR="$deps/usr/include/x86_64-linux-gnu/openblas-openmp" \
    -DMPIFORMER_ONEDNN_INCLUDE_DIR="$deps/usr/include" -DMPIFORMER_ONEDNN_LIBRARY="$lib/libdnnl.so" \
    >>"$log" 2>&1
  cmake --build "$work/cpu" -j "$jobs" >>"$log" 2>&1
  say "CPU build done ($((SECONDS - start)) s)"
  start=$SECONDS
  cmake -S "$root" -B "$work/cuda" "${generator[@]}" -DCMAKE_BUILD_TYPE=Release \
    -DMPIFORMER_KOKKOS_SOURCE="$kokkos" -DKokkos_ENABLE_CUDA=ON -DKokkos_ENABLE_SERIAL=ON \
    -DKokkos_ARCH_"$arch_option"=ON -DMPIFORMER_ENABLE_CUDA=ON -DMPIFORMER_UNITY_BUILD=ON \
    "${mpi_args[@]}" >>"$log" 2>&1
  cmake --build "$work/cuda" -j "$jobs" >>"$log" 2>&1
  say "CUDA build done ($((SECONDS - start)) s)"
  for build in cpu cuda; do
    mpi=$(ldd "$work/$build/mpiformer-train" | awk '/libmpi/ {print $1 " => " $3}')
    [[ "$mpi" == *"$deps/"*libmpich* ]] ||
      { say "error: $build/mpiformer-train links ${mpi:-no MPI}, not the prefix's MPICH that mpiexec.hydra starts"; exit 2; }
  done
fi

# ---- test ----------------------------------------------------------------------------------------
status=0
if [[ " $steps " == *" test "* ]]; then
  nvidia-smi -L 2>&1 | tee -a "$log" || true
  say "GPU tests (ctest -L gpu)"
  (cd "$work/cuda" && MPIFORMER_CPU_TRAIN="$work/cpu/mpiformer-train" MPIFORMER_PYTHON=python3 \
    ctest -L gpu --output-on-failure -V) >"$work/gpu-tests.log" 2>&1 || status=1
  grep -E '^ *[0-9]+/[0-9]+ Test|tests passed|(ok|FAIL|PASS) ' "$work/gpu-tests.log" | tee -a "$log"
fi

# ---- attention -----------------------------------------------------------------------------------
tables="$work/tables.txt"
[[ " $steps " == *" attention "* || " $steps " == *" bench "* ]] && : >"$tables"
if [[ " $steps " == *" attention "* ]]; then
  say "each attention path against PyTorch (float64, and SDPA on this GPU)"
  env -u LD_LIBRARY_PATH python3 "$root/ci/gpu/attention_check.py" "$work/cuda" \
    --library-path "$LD_LIBRARY_PATH" 2>&1 | tee -a "$log" "$tables" || status=1
fi

# ---- bench ---------------------------------------------------------------------------------------
if [[ " $steps " == *" bench "* ]]; then
  say "GPT-2 124M and llama-124M against PyTorch eager on this GPU"
  bash "$root/ci/gpu/bench.sh" "$work/cuda" 2>&1 | tee -a "$log" "$tables"
fi

if [ -n "${OUT:-}" ]; then
  mkdir -p "$OUT"
  cp "$log" "$OUT/" 2>/dev/null || true
  cp "$work"/*.log "$work"/tables.txt "$OUT/" 2>/dev/null || true
fi
exit "$status"
