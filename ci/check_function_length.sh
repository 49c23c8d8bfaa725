#!/usr/bin/env bash
# No function in the training run's room (src/train/), or in the room of the settings and the
# memory plan it shares (src/layout/), runs past 80 lines: the run is split into parts
# (docs/design.md, "The training run") and each reads as a page. A definition runs from its
# unindented first line (a name and "(") to the next unindented "}". Prints each one too long and
# exits 1 if there is one.
set -u
cd "$(dirname "$0")/.."
LIMIT=${LIMIT:-80} python3 - $(git ls-files 'src/train/*.cpp' 'src/layout/*.cpp') <<'PYEOF'
import os, re, sys
limit = int(os.environ["LIMIT"])
skip = re.compile(r"^(namespace|struct|class|enum|extern|using|template)\b")
bad = functions = 0
for path in sys.argv[1:]:
    lines = open(path, encoding="utf-8").read().split("\n")
    head = body = None
    for n, line in enumerate(lines, 1):
        if body is None:
            if head is None and re.match(r"^[A-Za-z].*\(", line) and not skip.match(line):
                head = n
            if head is not None and line.rstrip().endswith(";"):
                head = None  # a declaration or a statement, not a definition
            elif head is not None and line.rstrip().endswith("{"):
                body = head
        elif line.startswith("}"):
            functions += 1
            if n - body + 1 > limit:
                bad += 1
                print(f"FAIL {path}:{body}: {n - body + 1} lines: {lines[body - 1][:60]}")
            head = body = None
print(f"check_function_length: {functions} functions in {len(sys.argv) - 1} files of src/train and src/layout, "
      f"{bad} over {limit} lines")
sys.exit(1 if bad or functions == 0 else 0)
PYEOF
