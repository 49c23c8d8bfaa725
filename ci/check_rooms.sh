#!/usr/bin/env bash
# The rooms (folders) of the project depend one way: each may include only the rooms before it.
# The order has one source, the line `core -> backends -> ... -> apps` of docs/design.md, read
# here; the doc's table of rooms must list the same rooms in the same order. Prints every include
# that points up or sideways into a later room and exits 1 if there is one.
set -u
cd "$(dirname "$0")/.."
DESIGN=docs/design.md
order=$(grep -m1 -E '^[a-z]+( -> [a-z]+)+$' "$DESIGN")
if [ -z "$order" ]; then
  echo "FAIL $DESIGN has no line of rooms 'core -> backends -> ... -> apps' (the order this check reads)"
  exit 1
fi
read -ra ROOMS <<<"${order// -> / }"
# The table's rows (| `room/` | holds |), in order, against the line.
table=$(sed -n 's/^| `\([a-z]*\)\/` |.*/\1/p' "$DESIGN" | tr '\n' ' ')
if [ "$table" != "${ROOMS[*]} " ]; then
  echo "FAIL $DESIGN: its table of rooms lists '${table% }', its order line '${ROOMS[*]}'"
  exit 1
fi
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
