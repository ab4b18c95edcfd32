#!/usr/bin/env bash
# Versions and tags the repository's modules, all at one version.
#
#   scripts/release.sh check              every module requires its siblings at one
#                                         version (printed), no public module has a
#                                         replace directive or requires a module that
#                                         is never published
#   scripts/release.sh set-version vX.Y.Z  moves every require of a sibling module,
#                                         in every go.mod, to vX.Y.Z
#   scripts/release.sh tag vX.Y.Z          tags every public module at HEAD: vX.Y.Z
#                                         for the root, <dir>/vX.Y.Z for the others
#
# A release, step by step:
#   1. scripts/release.sh set-version vX.Y.Z, and a "## vX.Y.Z" section at the
#      top of CHANGELOG.md; commit both ("release vX.Y.Z").
#   2. scripts/release.sh tag vX.Y.Z: it checks that the tree is clean, that
#      the requires and the CHANGELOG name vX.Y.Z, runs scripts/rehearse.sh (every
#      module served from a local proxy to fresh programs) and scripts/test.sh
#      (SKIP_TESTS=1 leaves the test suite out, for a commit CI has passed), then
#      tags, and prints the push command. It pushes nothing itself.
#
# Between releases the requires name the last version set; go.work ties the
# modules together for development, so a change in one module is seen by the
# others at once.
set -euo pipefail
cd "$(dirname "$0")/.."
. scripts/modules.sh

die() { echo "release.sh: $*" >&2; exit 1; }

valid_version() { [[ $1 =~ ^v(0|[1-9][0-9]*)\.(0|[1-9][0-9]*)\.(0|[1-9][0-9]*)(-[0-9A-Za-z.-]+)?$ ]]; }

# sibling_requires DIR: "path version" of each require of a repository module.
sibling_requires() {
  (cd "$1" && go mod edit -json) |
    awk -v root="$MODULE_ROOT" '
      /"Require"/ { inreq = 1 }
      inreq && /"Path":/ { gsub(/[",]/, "", $2); path = $2 }
      inreq && /"Version":/ { gsub(/[",]/, "", $2); if (path == root || index(path, root "/") == 1) print path, $2 }
      /^\t\]/ { inreq = 0 }'
}

is_public_path() {
  local d
  for d in "${PUBLIC_MODULES[@]}"; do [ "$(module_path "$d")" = "$1" ] && return 0; done
  return 1
}

check() {
  local versions="" problems=0 d path v
  for d in $(all_modules); do
    while read -r path v; do
      [ -n "$path" ] || continue
      versions="$versions $v"
      if is_public_path "$(module_path "$d")" && ! is_public_path "$path"; then
        echo "release.sh: $d/go.mod requires $path, which is never published" >&2; problems=1
      fi
    done < <(sibling_requires "$d")
  done
  for d in "${PUBLIC_MODULES[@]}"; do
    if (cd "$d" && go mod edit -json) | grep -q '"Replace": \['; then
      echo "release.sh: $d/go.mod has a replace directive: a user's build ignores it, and go install refuses the module" >&2
      problems=1
    fi
  done
  local distinct
  distinct=$(echo "$versions" | tr ' ' '\n' | sed '/^$/d' | sort -u)
  if [ "$(echo "$distinct" | sed '/^$/d' | wc -l)" -gt 1 ]; then
    echo "release.sh: the modules require their siblings at more than one version:" $distinct >&2
    echo "release.sh: run scripts/release.sh set-version <version>" >&2
    problems=1
  fi
  [ "$problems" = 0 ] || exit 1
  echo "${distinct:-none}"
}

set_version() {
  local version=$1 d path v args
  valid_version "$version" || die "$version is not a version (vMAJOR.MINOR.PATCH[-pre])"
  for d in $(all_modules); do
    args=()
    while read -r path v; do
      [ -n "$path" ] && [ "$v" != "$version" ] && args+=("-require=$path@$version")
    done < <(sibling_requires "$d")
    if [ ${#args[@]} -gt 0 ]; then
      (cd "$d" && go mod edit "${args[@]}")
      echo "$d/go.mod: ${#args[@]} requires set to $version"
    fi
  done
}

tag() {
  local version=$1 d t
  valid_version "$version" || die "$version is not a version (vMAJOR.MINOR.PATCH[-pre])"
  [ -z "$(git status --porcelain)" ] || die "the tree has changes; commit or stash them first"
  [ "$(check)" = "$version" ] || die "the requires do not all name $version: run scripts/release.sh set-version $version and commit"
  grep -qE "^## \[?$version\]?( |$)" CHANGELOG.md || die "CHANGELOG.md has no \"## $version\" section"
  for d in "${PUBLIC_MODULES[@]}"; do
    t=$(module_tag "$d" "$version")
    git rev-parse -q --verify "refs/tags/$t" >/dev/null && die "tag $t exists already"
  done
  bash scripts/rehearse.sh
  [ "${SKIP_TESTS:-}" = 1 ] || bash scripts/test.sh
  local tags=()
  for d in "${PUBLIC_MODULES[@]}"; do
    t=$(module_tag "$d" "$version")
    git tag -a "$t" -m "$(module_path "$d") $version"
    tags+=("$t")
  done
  echo "tagged ${#tags[@]} modules at $(git rev-parse --short HEAD). To publish:"
  echo "  git push origin ${tags[*]}"
}

case "${1:-}" in
  check) check ;;
  set-version) [ $# = 2 ] || die "usage: scripts/release.sh set-version vX.Y.Z"; set_version "$2" ;;
  tag) [ $# = 2 ] || die "usage: scripts/release.sh tag vX.Y.Z"; tag "$2" ;;
  *) sed -n '2,25p' "$0" | sed 's/^# \{0,1\}//'; exit 2 ;;
esac
