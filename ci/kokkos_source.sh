# Sourced by the CI scripts that build Kokkos 4 inline (check_kokkos4.sh, check_cuda.sh):
# sets KOKKOS_SOURCE to a Kokkos source tree or release tarball, or to "" with WHY saying why
# none was found. Looked for, in order: $MPIFORMER_KOKKOS_SOURCE; a Kokkos 4 release tarball in
# the vendor folder CI keeps beside the checkout (../shared/vendor). The project never holds one.
KOKKOS_SOURCE=${MPIFORMER_KOKKOS_SOURCE:-}
WHY=""
if [ -z "$KOKKOS_SOURCE" ]; then
  _root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
  for _candidate in "$_root"/../shared/vendor/kokkos-4.*.tar.gz; do
    [ -f "$_candidate" ] && KOKKOS_SOURCE=$(cd "$(dirname "$_candidate")" && pwd)/$(basename "$_candidate")
  done
fi
if [ -z "$KOKKOS_SOURCE" ]; then
  WHY="no Kokkos 4 source: set MPIFORMER_KOKKOS_SOURCE to a Kokkos 4 source tree or release tarball"
elif [ ! -e "$KOKKOS_SOURCE" ]; then
  WHY="MPIFORMER_KOKKOS_SOURCE=$KOKKOS_SOURCE does not exist"
  KOKKOS_SOURCE=""
fi
