#!/usr/bin/env bash
# The public API of every public module, kept under api/ (one file per
# module, one exported feature a line; tools/apitxt writes them), so that
# every change to it is deliberate and shows in review.
#
#   scripts/api.sh check    fails, with the difference, when the code's API and
#                           api/ differ, or when docs/API.md (the API review)
#                           does not name every exported name in its package's
#                           section, or names one that is gone (CI runs this)
#   scripts/api.sh update   rewrites api/ from the code: run it after a
#                           deliberate change, and commit the result with it
set -euo pipefail
cd "$(dirname "$0")/.."
repo=$PWD
. scripts/modules.sh

work=$(mktemp -d /tmp/redeliver-api.XXXXXX)
trap 'rm -rf "$work"' EXIT
(cd tools && go build -o "$work/apitxt" ./apitxt && go build -o "$work/apidoc" ./apidoc)

# file DIR: the api/ file of a module directory.
file() { if [ "$1" = . ]; then echo api/redeliver.txt; else echo "api/$(echo "$1" | tr / -).txt"; fi; }

mkdir -p "$work/api"
for d in "${PUBLIC_MODULES[@]}"; do
  [ "$d" = cmd/redeliver ] && continue # a command: its interface is its flags (cmd/redeliver/README.md)
  (cd "$d" && "$work/apitxt" ./...) >"$work/$(file "$d")"
done

case "${1:-}" in
  update)
    rm -rf api && mkdir -p api && cp "$work"/api/*.txt api/
    echo "api.sh: api/ rewritten: $(cat api/*.txt | wc -l) exported features in ${#PUBLIC_MODULES[@]} modules"
    ;;
  check)
    if ! diff -ru api "$work/api" >"$work/diff"; then
      cat "$work/diff"
      echo
      echo "api.sh: the public API differs from api/ (lines with + are new in the code, - are gone)."
      echo "api.sh: if the change is deliberate, run 'bash scripts/api.sh update', review api/ and commit it with the change."
      exit 1
    fi
    echo "api.sh: the public API matches api/ ($(cat api/*.txt | wc -l) features)"
    # The API review names every exported name, and nothing else.
    if ! "$work/apidoc" -doc docs/API.md -module "$MODULE_ROOT" api/*.txt; then
      echo "api.sh: docs/API.md and the public API differ: name each exported name in its package's section, and remove what is gone"
      exit 1
    fi
    echo "api.sh: docs/API.md names every exported name of the $(ls api/*.txt | wc -l) public modules"
    ;;
  *) sed -n '2,9p' "$0" | sed 's/^# \{0,1\}//'; exit 2 ;;
esac
