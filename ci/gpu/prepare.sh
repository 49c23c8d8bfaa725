#!/usr/bin/env bash
# Prepares, on a Debian (bookworm) machine with its package archive, what ci/gpu/run.sh needs on a
# bare GPU machine that has nvcc, CMake and Python but no MPI, Kokkos, BLAS or network:
#   DIR/kokkos-*.tar.gz   a Kokkos 4 release (MPIFORMER_KOKKOS_SOURCE, or CI's vendor copy)
#   DIR/debs/*.deb        Debian's MPICH, OpenBLAS (OpenMP), oneDNN and GoogleTest, and the
#                         libraries they load that a bare glibc system lacks, for run.sh to unpack
#                         with dpkg -x into a prefix of its own (nothing is installed)
# Then it unpacks them here into a scratch prefix and checks that every library the programs and
# libraries there load (ELF NEEDED, recursively) is in the prefix or is part of glibc and GCC's
# run-time (which any machine with a compiler has): a missing one is named, and nothing is left
# prepared.
#   bash ci/gpu/prepare.sh [DIR]      (default DIR: gpu-inputs/ in the checkout, git-ignored)
set -euo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
out=${1:-$root/gpu-inputs}
source "$root/ci/kokkos_source.sh"
[ -n "$KOKKOS_SOURCE" ] || { echo "error: $WHY" >&2; exit 2; }
[ -f "$KOKKOS_SOURCE" ] || { echo "error: $KOKKOS_SOURCE is a tree; give a release tarball" >&2; exit 2; }
command -v apt-get >/dev/null || { echo "error: needs apt-get (a Debian machine)" >&2; exit 2; }

packages=(
  mpich libmpich12 libmpich-dev                 # mpiexec (hydra), libmpich, mpi.h
  libucx0 libibverbs1 ibverbs-providers librdmacm1 libnl-3-200 libnl-route-3-200 libnuma1  # ch4:ucx
  libhwloc15 libslurm38                         # hydra's process placement and Slurm launcher
  libgfortran5 libquadmath0                     # libmpich's and OpenBLAS's Fortran run-time
  libopenblas0-openmp libopenblas-openmp-dev    # the CPU build's BLAS and cblas.h
  libdnnl2 libdnnl-dev ocl-icd-libopencl1       # oneDNN (its library loads libOpenCL)
  libgtest-dev libgmock-dev                     # GoogleTest, prebuilt, with its CMake package
  libonig5 libonig-dev libutf8proc2 libutf8proc-dev  # the tokenizer's regex engine and Unicode tables
)
# Part of glibc and of GCC's run-time: on every machine with a compiler, never shipped (a second
# copy on the library path could shadow the system's newer one).
system_libs='^(ld-linux-x86-64|libc|libm|libdl|libpthread|librt|libresolv|libutil|libgcc_s|libstdc\+\+|libgomp|libz|libudev)\.so'

rm -rf "$out"
mkdir -p "$out/debs"
cp "$KOKKOS_SOURCE" "$out/"
(cd "$out/debs" && apt-get download "${packages[@]}" 2>&1 | grep -v '^W: Download is performed unsandboxed' || true)

# The check: unpack, then walk what the ELF files need.
scratch=$(mktemp -d)
trap 'rm -rf "$scratch"' EXIT
for deb in "$out"/debs/*.deb; do dpkg -x "$deb" "$scratch"; done
mapfile -t elves < <(find "$scratch" -type f \( -name '*.so*' -o -path '*/bin/*' \) -exec sh -c \
  'head -c 4 "$1" | grep -q ELF && echo "$1"' _ {} \;)
have=$(find "$scratch" \( -type f -o -type l \) -name 'lib*.so*' -printf '%f\n' | sort -u)
missing=""
for elf in "${elves[@]}"; do
  for lib in $(objdump -p "$elf" 2>/dev/null | awk '$1 == "NEEDED" {print $2}'); do
    grep -qxF "$lib" <<<"$have" || [[ "$lib" =~ $system_libs ]] ||
      missing+="$lib (needed by ${elf#"$scratch"})"$'\n'
  done
done
if [ -n "$missing" ]; then
  rm -rf "$out"
  echo "error: these libraries are neither prepared nor part of glibc/GCC; add their packages:" >&2
  sort -u <<<"$missing" | sed '/^$/d' >&2
  exit 1
fi
echo "prepared $out: $(basename "$KOKKOS_SOURCE") and $(ls "$out/debs" | wc -l) packages" \
  "($(du -sh "$out" | cut -f1)); every library they load is among them or glibc/GCC's"
