#!/usr/bin/env bash
# Tidies the repository's modules (go mod tidy), as a developer needs:
#
#   scripts/tidy.sh [MODULE_DIR...]        tidies the modules (default: every one)
#   scripts/tidy.sh -diff [MODULE_DIR...]  changes nothing; prints what tidying
#                                          would change and exits 1 if a module
#                                          is not tidy
#
# go mod tidy works on one module and ignores go.work, so it would fetch
# each sibling the module requires (say github.com/redeliver-go/redeliver
# v0.1.0) from the module proxy: before that version is published nothing
# serves it, and after, it is not this tree. For the time of the tidy the
# module's go.mod therefore replaces every sibling with its directory, as
# go.work does for the workspace; the replaces are removed again afterwards
# (also when the tidy fails, or is interrupted: the go.mod and go.sum are
# then as they were). The requires of siblings keep their version, and
# go.sum gets no lines for the siblings (the workspace needs none).
set -euo pipefail
cd "$(dirname "$0")/.."
repo=$PWD
. scripts/modules.sh

diff=0
if [ "${1:-}" = -diff ]; then diff=1; shift; fi
case "${1:-}" in -*) sed -n '2,17p' "$0" | sed 's/^# \{0,1\}//'; exit 2 ;; esac
if [ $# = 0 ]; then set -- $(all_modules); fi

saved=$(mktemp -d /tmp/redeliver-tidy.XXXXXX)
current=""
# restore: the go.mod and go.sum of the module being tidied, as they were.
restore() {
  [ -n "$current" ] || return 0
  cp "$saved/go.mod" "$repo/$current/go.mod"
  if [ -f "$saved/go.sum" ]; then cp "$saved/go.sum" "$repo/$current/go.sum"; else rm -f "$repo/$current/go.sum"; fi
}
trap 'restore; rm -rf "$saved"' EXIT
trap 'exit 130' INT TERM

export GOWORK=off
untidy=()
for d in "$@"; do
  d=${d%/}; d=${d#./}; [ -n "$d" ] || d=.
  [ -f "$d/go.mod" ] || { echo "tidy.sh: $d has no go.mod" >&2; exit 2; }
  cp "$d/go.mod" "$saved/go.mod"
  rm -f "$saved/go.sum"; [ -f "$d/go.sum" ] && cp "$d/go.sum" "$saved/go.sum"
  current=$d
  self=$(module_path "$d")
  add=() drop=()
  for s in $(all_modules); do
    path=$(module_path "$s")
    [ "$path" = "$self" ] && continue
    rel=$(realpath --relative-to="$d" "$s")
    case $rel in ../*) ;; *) rel=./$rel ;; esac
    add+=("-replace=$path=$rel")
    drop+=("-dropreplace=$path")
  done
  (cd "$d" && go mod edit "${add[@]}")
  if [ "$diff" = 1 ]; then
    if ! out=$(cd "$d" && go mod tidy -diff 2>&1); then
      echo "tidy.sh: $d is not tidy:"; echo "$out"
      untidy+=("$d")
    fi
    restore
  else
    if ! (cd "$d" && go mod tidy); then
      restore
      echo "tidy.sh: go mod tidy failed in $d; its go.mod and go.sum are as they were" >&2
      exit 1
    fi
    (cd "$d" && go mod edit "${drop[@]}")
    if cmp -s "$saved/go.mod" "$d/go.mod" && { [ ! -f "$d/go.sum" ] || cmp -s "$saved/go.sum" "$d/go.sum"; }; then
      echo "tidy.sh: $d: tidy"
    else
      echo "tidy.sh: $d: tidied"
    fi
  fi
  current=""
done
if [ ${#untidy[@]} -gt 0 ]; then
  echo "tidy.sh: not tidy: ${untidy[*]} (run scripts/tidy.sh ${untidy[*]})"
  exit 1
fi
[ "$diff" = 0 ] || echo "tidy.sh: every module of $# is tidy"
