#!/usr/bin/env bash
# Checks that README.md states the Go version each module needs, as its
# go.mod's go line says:
#
#   - the table under "### Go versions" has one row per public module
#     (scripts/modules.sh) with its go line, and no other module; its row
#     "every other module" gives the newest go line of the others;
#   - each "go get MODULE ... (Go X+)" line names that module's go line;
#   - "with Go X or later" (what the test suite needs) and go.work's go line
#     are the newest go line of all.
#
# It prints every disagreement and exits 1 if there is one.
set -euo pipefail
cd "$(dirname "$0")/.."
. scripts/modules.sh

readme=README.md
bad=0
fail() { echo "goversions.sh: $*"; bad=1; }

goline() { awk '$1 == "go" { print $2; exit }' "$1/go.mod"; }
newest() { sort -V | tail -n 1; }
# short 1.26.0 -> 1.26, as the README writes a release with no patch.
short() { case $1 in *.0) echo "${1%.0}" ;; *) echo "$1" ;; esac; }
is_public() { local m; for m in "${PUBLIC_MODULES[@]}"; do [ "$m" = "$1" ] && return 0; done; return 1; }
# dir_of PATH: the module directory of a module path written in full or
# as .../dir; "" if it is not one of ours.
dir_of() {
  local p=${1/#.../$MODULE_ROOT}
  case $p in
    "$MODULE_ROOT") echo . ;;
    "$MODULE_ROOT"/*) echo "${p#"$MODULE_ROOT"/}" ;;
  esac
}

all=$(all_modules)
others=$(for m in $all; do is_public "$m" || echo "$m"; done)
newest_all=$(for m in $all; do goline "$m"; done | newest)
newest_others=$(for m in $others; do goline "$m"; done | newest)

# The table: the rows between "### Go versions" and the next heading.
rows=$(awk '/^#+ / { on = ($0 == "### Go versions") ; next } on && /^\| / && !/^\|---/' "$readme" | sed 1d)
[ -n "$rows" ] || fail "$readme has no table under \"### Go versions\""
seen=" "
while IFS= read -r row; do
  [ -n "$row" ] || continue
  cell1=$(echo "$row" | cut -d'|' -f2)
  want=$(echo "$row" | cut -d'|' -f3 | tr -d ' `')
  case $cell1 in
    *"every other module"*)
      [ "$want" = "$newest_others" ] ||
        fail "$readme: the Go versions table says every other module needs $want, but the newest go line among them is $newest_others"
      continue ;;
  esac
  path=$(echo "$cell1" | sed -n 's/^[^`]*`\([^`]*\)`.*/\1/p')
  dir=$(dir_of "$path")
  if [ -z "$dir" ] || ! is_public "$dir"; then
    fail "$readme: the Go versions table names ${path:-$cell1}, which is not a public module (scripts/modules.sh)"
    continue
  fi
  seen="$seen$dir "
  have=$(goline "$dir")
  [ "$want" = "$have" ] || fail "$readme: the Go versions table says $path needs $want, but $dir/go.mod says go $have"
done <<<"$rows"
for m in "${PUBLIC_MODULES[@]}"; do
  case $seen in *" $m "*) ;; *) fail "$readme: the Go versions table has no row for $(module_path "$m")" ;; esac
done

# go get lines that name a version.
while IFS= read -r line; do
  path=$(echo "$line" | awk '{ print $3 }')
  want=$(echo "$line" | sed -n 's/.*(Go \([0-9.]*\)+).*/\1/p')
  dir=$(dir_of "$path")
  [ -n "$dir" ] && [ -f "$dir/go.mod" ] || { fail "$readme: \"go get $path\" names no module of this repository"; continue; }
  [ "$want" = "$(short "$(goline "$dir")")" ] ||
    fail "$readme: \"go get $path\" says Go $want+, but $dir/go.mod says go $(goline "$dir")"
done < <(grep -E '^go get .*\(Go [0-9.]+\+\)' "$readme" || true)

# What the test suite and the workspace need: the newest go line.
suite=$(sed -n 's/.*with Go \([0-9.]*\) or later.*/\1/p' "$readme" | head -n 1)
[ "$suite" = "$(short "$newest_all")" ] ||
  fail "$readme says the test suite runs \"with Go ${suite:-?} or later\", but the newest go line is $newest_all"
work=$(awk '$1 == "go" { print $2; exit }' go.work)
[ "$work" = "$newest_all" ] || fail "go.work says go $work, but the newest go line of its modules is $newest_all"

[ "$bad" = 0 ] || exit 1
echo "goversions.sh: README.md states the go line of each of the ${#PUBLIC_MODULES[@]} public modules and of the $(echo "$others" | wc -w) others"
