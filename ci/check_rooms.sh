#!/usr/bin/env bash
# The rooms (folders) of the project depend one way: each may include only the rooms before it in
# ROOMS (docs/design.md draws the same order). Prints every include that points up or sideways
# into a later room and exits 1 if there is one.
set -u
cd "$(dirname "$0")/.."
ROOMS=(core backends parallel model optim pipeline io text checkpoint data generate eval train plan apps)
rank() { local i; for i in "${!ROOMS[@]}"; do [ "${ROOMS[$i]}" = "$1" ] && { echo "$i"; return; }; done; echo -1; }
room_of() {  # src/model/layers/x.cpp -> model; backends/cpu/x.cpp -> backends; apps/x.cpp -> apps
  case $1 in
    src/*) local rest=${1#src/}; echo "${rest%%/*}" ;;
    *) echo "${1%%/*}" ;;
  esac
}
bad=0 files=0
while IFS= read -r file; do
  from=$(room_of "$file")
  from_rank=$(rank "$from")
  [ "$from_rank" -ge 0 ] || { echo "FAIL $file: room '$from' is not in the order"; bad=1; continue; }
  files=$((files + 1))
  while IFS= read -r inc; do
    to=${inc%%/*}
    [ "$to" = "$from" ] && continue
    to_rank=$(rank "$to")
    [ "$to_rank" -ge 0 ] || continue  # mpiformer/config.hpp (generated), system headers
    if [ "$to_rank" -gt "$from_rank" ]; then
      echo "FAIL $file ($from) includes $inc ($to comes after $from)"
      bad=1
    fi
  done < <(sed -n 's/^#include "\([^"]*\)".*/\1/p' "$file")
done < <(git ls-files 'src/*.hpp' 'src/*.cpp' 'backends/*.hpp' 'backends/*.cpp' 'backends/*.cu' 'apps/*.cpp' 'apps/*.hpp')
echo "rooms: ${ROOMS[*]}"
[ "$bad" -eq 0 ] && echo "check_rooms: $files files, every include points down" && exit 0
exit 1
