#!/usr/bin/env bash
# `make run` and `make test` on a fresh machine install their Debian packages first: apt-get's
# output (about a thousand lines of dpkg's) goes to a log file in the build folder and the user sees
# one line; a failed install shows the log's end and one error line. A stand-in apt-get on PATH
# plays apt's part, and a package name no machine has plays the missing package.
source "$(dirname "$0")/common.sh"
SRC=${MPIFORMER_SOURCE_DIR:?set MPIFORMER_SOURCE_DIR to the source tree}

mkdir "$WORK/bin"
cat >"$WORK/bin/apt-get" <<'SH'
#!/bin/sh
# update prints nothing; install prints as much as dpkg does, and fails if asked to.
[ "$1" = update ] && exit 0
for i in $(seq 1000); do echo "Unpacking package-$i (1.0) ..."; done
[ -n "${FAIL_INSTALL:-}" ] && { echo "E: Unable to locate package"; exit 100; }
exit 0
SH
chmod +x "$WORK/bin/apt-get"
pkg=mpiformer-test-package-that-does-not-exist

out=$(PATH="$WORK/bin:$PATH" make -s -C "$SRC" deps SUDO= BUILD="$WORK/build" \
  DEBIAN_PACKAGES=$pkg 2>&1)
rc=$?
if [ "$rc" -eq 0 ] && [ "$(wc -l <<<"$out")" -eq 1 ] && grep -q "installing Debian packages: $pkg" <<<"$out" &&
  [ "$(grep -c Unpacking "$WORK/build/apt-get.log")" -eq 1000 ]; then
  ok "an install prints one line, apt-get's output in the log: $out"
else
  bad "an install printed $(wc -l <<<"$out") line(s), status $rc: $(head -3 <<<"$out")"
fi

out=$(PATH="$WORK/bin:$PATH" FAIL_INSTALL=1 make -s -C "$SRC" deps SUDO= BUILD="$WORK/build" \
  DEBIAN_PACKAGES=$pkg 2>&1)
rc=$?
if [ "$rc" -ne 0 ] && [ "$(grep -c '^error:' <<<"$out")" -eq 1 ] && grep -q 'Unable to locate' <<<"$out" &&
  [ "$(wc -l <<<"$out")" -le 25 ]; then
  ok "a failed install: status $rc, the log's end and one error line"
else
  bad "a failed install: status $rc, $(wc -l <<<"$out") line(s): $(tail -2 <<<"$out")"
fi

finish
