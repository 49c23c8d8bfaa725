#!/usr/bin/env bash
# Keeps the documentation self-contained and its links whole, so a newcomer can follow every
# reference from a checkout alone:
#   a. no tracked file cites a document outside the repository: the design and style notes the
#      project started from, its source documents (by number or file name), or anything under the
#      shared folder beside the checkout. ci/kokkos_source.sh alone may look there: it finds the
#      Kokkos tarball CI keeps in its vendor folder (code, not a citation);
#   b. every relative link in a tracked Markdown file (README.md, docs/, ci/, tests/) names a file
#      or directory that exists, and a link to a heading (file.md#anchor) names a heading there;
#   c. the README still gives the two commands a newcomer starts with (CI runs exactly its test
#      command);
#   d. every repository file a Markdown file names in backticks (src/x/y.cpp, or a bare y.cpp)
#      exists: a rename leaves no stale name behind.
#   bash ci/check_docs.sh       (ctest: docs_references)
# Prints one line per check and `check_docs: N passed, N failed`; exits 1 if any failed, 77
# (skipped) outside a git checkout, where the tracked files are unknown.
set -u
export LC_ALL=C.UTF-8

root=$(cd "$(dirname "$0")/.." && pwd)
if ! git -C "$root" rev-parse --is-inside-work-tree >/dev/null 2>&1; then
  echo "check_docs: skipped: $root is not a git checkout"
  exit 77
fi

passed=0 failed=0
ok() { echo "ok    $1"; passed=$((passed + 1)); }
bad() { echo "FAIL  $1"; failed=$((failed + 1)); }

# ---- a. references to documents outside the repository ----
# Each pattern is written so that it does not match its own text.
outside="DESIGN[.]md|STYLE[.]md|[Ss]eeds? 0[0-9][0-9]|seeds[/]|seeds[']|[0-9]{3}_[0-9a-f]{16}[.]txt"
outside+="|[.][.]/shared|shared/(notes|seeds|vendor)"
hits=$(git -C "$root" grep -nIE -e "$outside" -- . ':(exclude)ci/kokkos_source.sh')
if [ -z "$hits" ]; then
  ok "no file cites a document outside the repository"
else
  bad "files cite documents outside the repository (name the document in docs/, or say it inline):"
  echo "$hits" | sed 's/^/      /'
fi

# ---- b. relative links in Markdown ----
# Lines outside fenced code blocks.
prose() { awk '/^[[:space:]]*```/ { fence = !fence; next } !fence' "$1"; }
# GitHub's anchor of a heading: lower case, punctuation dropped, spaces to hyphens.
anchors() {
  prose "$1" | sed -n 's/^#\{1,6\}[[:space:]]\{1,\}//p' | tr '[:upper:]' '[:lower:]' |
    sed 's/[^[:alnum:] _-]//g; s/ /-/g'
}

links=0 broken=""
while IFS= read -r md; do
  dir=$(dirname "$root/$md")
  while IFS= read -r target; do
    case "$target" in
      http://* | https://* | mailto:* | "") continue ;;
    esac
    links=$((links + 1))
    path=${target%%#*} anchor=""
    [ "$path" != "$target" ] && anchor=${target#*#}
    if [ -z "$path" ]; then file="$root/$md"; else file="$dir/$path"; fi
    if [ ! -e "$file" ]; then
      broken+="      $md: ($target): no such file"$'\n'
    elif [ -n "$anchor" ] && [ -f "$file" ] && ! anchors "$file" | grep -qxF -- "$anchor"; then
      broken+="      $md: ($target): no heading with that anchor"$'\n'
    fi
  done < <(prose "$root/$md" | grep -oE '\]\([^) ]*\)' | sed 's/^](//; s/)$//')
done < <(git -C "$root" ls-files '*.md')
if [ -z "$broken" ]; then
  ok "every relative link in the Markdown files resolves ($links links)"
else
  bad "broken links:"
  printf '%s' "$broken"
fi

# ---- d. file names in backticks ----
# A path under one of the repository's top-level directories must exist (from the root or from
# the Markdown file's directory), and a bare source or script name (x.cpp, x.hpp, x.sh, x.cmake)
# must be some tracked file's name, or the name configure makes of a tracked x.in. Names of other
# projects' files are spelled with their project's path, or listed here.
# setup-env.sh: Spack's shell set-up; mpiformerConfigVersion.cmake: written at install by CMake's
# write_basic_package_version_file.
elsewhere="setup-env.sh mpiformerConfigVersion.cmake"
tracked=$(git -C "$root" ls-files)
names=$(sed 's|.*/||; s|[.]in$||' <<<"$tracked" | sort -u)
tops=$(sed -n 's|/.*||p' <<<"$tracked" | sort -u | tr '\n' '|')
tops=${tops%|}
stale="" named=0
while IFS= read -r md; do
  dir=$(dirname "$md")
  while IFS= read -r name; do
    case "$name" in *'*'* | *'<'* | *'$'* | *'{'* | *...* | http*) continue ;; esac
    name=${name%%:*}  # file:line
    if [[ "$name" == */* ]]; then
      [[ "${name%%/*}" =~ ^($tops)$ ]] || continue
      [[ "$name" =~ [.](cpp|hpp|h|cu|sh|py|cmake|md|yaml|txt|in)$ || "$name" == */ ]] || continue
      named=$((named + 1))
      [ -e "$root/$name" ] || [ -e "$root/$dir/$name" ] || stale+="      $md: \`$name\`: no such path"$'\n'
    elif [[ "$name" =~ ^[A-Za-z0-9_.-]+[.](cpp|hpp|sh|cmake)$ ]]; then
      named=$((named + 1))
      grep -qxF -- "$name" <<<"$names" || [[ " $elsewhere " == *" $name "* ]] ||
        stale+="      $md: \`$name\`: no tracked file of that name"$'\n'
    fi
  done < <(prose "$root/$md" | grep -oE '`[^` ]+`' | tr -d '`' | sort -u)
done < <(git -C "$root" ls-files '*.md')
if [ -z "$stale" ]; then
  ok "every file named in backticks exists ($named names)"
else
  bad "files named in backticks that do not exist (renamed or deleted?):"
  printf '%s' "$stale"
fi

# ---- c. the README's two commands ----
for command in "make run" "make test"; do
  if grep -q "^$command " "$root/README.md"; then
    ok "README.md gives \`$command\`"
  else
    bad "README.md no longer gives \`$command\` at the start of a line"
  fi
done

echo "check_docs: $passed passed, $failed failed"
[ "$failed" -eq 0 ]
