#!/usr/bin/env bash
# Versions and tags the repository's modules, all at one version.
#
#   scripts/release.sh check              every module requires its siblings at one
#                                         version (printed); no go.mod has a replace
#                                         directive for a sibling (a public module none
#                                         at all); no public module requires a module
#                                         that is never published; go.work replaces
#                                         each required sibling at that version with
#                                         its directory
#   scripts/release.sh set-version vX.Y.Z  moves every require of a sibling module,
#                                         in every go.mod, to vX.Y.Z, and go.work's
#                                         replaces with them
#   scripts/release.sh tag vX.Y.Z          tags every public module at HEAD: vX.Y.Z
#                                         for the root, <dir>/vX.Y.Z for the others
#
# A release, step by step:
#   1. scripts/release.sh set-version vX.Y.Z, and in CHANGELOG.md the heading
#      "## Unreleased — vX.Y.Z" becomes "## vX.Y.Z — YYYY-MM-DD" (the day of
#      the tag); commit both ("release vX.Y.Z").
#   2. scripts/release.sh tag vX.Y.Z: it checks that the tree is clean, that
#      the requires and the CHANGELOG name vX.Y.Z, runs scripts/test.sh (which
#      runs scripts/rehearse.sh: every module served from a local proxy to fresh
#      programs; SKIP_TESTS=1 runs only the rehearsal, for a commit CI has
#      passed), then tags, and prints the push command. It pushes nothing itself.
#   3. Once pushed, a new "## Unreleased" section starts at the top of
#      CHANGELOG.md.
#
# check also reads CHANGELOG.md's first section heading: "## Unreleased",
# "## Unreleased — vX.Y.Z" or "## vX.Y.Z — YYYY-MM-DD", nothing else.
#
# Between releases the requires name the last version set; go.work ties the
# modules together for development, so a change in one module is seen by the
# others at once. A workspace module's require of a sibling still makes the
# go command read that version's go.mod (the workspace sets the roots of
# the module graph, it does not replace every version of its modules), and
# before a version is published nothing serves it: so go.work also replaces
# each required sibling, at that version only, with its directory. No go.mod
# has such a replace, and scripts/tidy.sh tidies a module without one.
set -euo pipefail
cd "$(dirname "$0")/.."
. scripts/modules.sh

die() { echo "release.sh: $*" >&2; exit 1; }

semver='v(0|[1-9][0-9]*)\.(0|[1-9][0-9]*)\.(0|[1-9][0-9]*)(-[0-9A-Za-z.-]+)?'
# changelog_top: the first "## " heading of CHANGELOG.md.
changelog_top() { grep -m 1 '^## ' CHANGELOG.md 2>/dev/null || true; }

valid_version() { [[ $1 =~ ^$semver$ ]]; }

# sibling_requires DIR: "path version" of each require of a repository module.
sibling_requires() {
  (cd "$1" && go mod edit -json) |
    awk -v root="$MODULE_ROOT" '
      /"Require"/ { inreq = 1 }
      inreq && /"Path":/ { gsub(/[",]/, "", $2); path = $2 }
      inreq && /"Version":/ { gsub(/[",]/, "", $2); if (path == root || index(path, root "/") == 1) print path, $2 }
      /^\t\]/ { inreq = 0 }'
}

# replaces: "old [version] => new [version]" of each replace directive in
# the go.mod or go.work printed on stdin (go mod edit -print).
replaces() {
  awk '$1 == "replace" && $2 == "(" { block = 1; next }
       block && $1 == ")" { block = 0; next }
       block { sub(/^[ \t]+/, ""); print; next }
       $1 == "replace" { sub(/^replace[ \t]+/, ""); print }'
}

# is_sibling PATH: whether PATH is the path of one of the repository's modules.
is_sibling() { [ "$1" = "$MODULE_ROOT" ] || [ "${1#"$MODULE_ROOT"/}" != "$1" ]; }

# module_dir PATH: the directory of a module of the repository, as go.work
# names it (./ for the root).
module_dir() { if [ "$1" = "$MODULE_ROOT" ]; then echo ./; else echo "./${1#"$MODULE_ROOT"/}"; fi; }

# required_siblings: each sibling module path that some module requires, once.
required_siblings() {
  local d path v
  for d in $(all_modules); do
    sibling_requires "$d"
  done | awk '{ print $1 }' | sort -u
}

# workspace_replaces VERSION: go.work replaces each required sibling at
# VERSION with its directory, and has no other replace of a sibling.
workspace_replaces() {
  local version=$1 old args=() path
  while read -r old v _; do
    if is_sibling "$old"; then
      if [ "$v" = "=>" ]; then args+=("-dropreplace=$old"); else args+=("-dropreplace=$old@$v"); fi
    fi
  done < <(go work edit -print | replaces)
  [ ${#args[@]} = 0 ] || go work edit "${args[@]}"
  {
    echo
    echo "// Each module the others require, at the version they require, is its"
    echo "// directory: nothing serves a version before it is published (set by"
    echo "// scripts/release.sh set-version)."
    echo "replace ("
    for path in $(required_siblings); do
      echo "	$path $version => $(module_dir "$path")"
    done
    echo ")"
  } >>go.work
  go work edit -fmt
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
    if [ -n "$(cd "$d" && go mod edit -print | replaces)" ]; then
      echo "release.sh: $d/go.mod has a replace directive: a user's build ignores it, and go install refuses the module" >&2
      problems=1
    fi
  done
  for d in $(all_modules); do
    while read -r path _; do
      if is_sibling "$path"; then
        echo "release.sh: $d/go.mod replaces $path: go.work ties the modules together (scripts/tidy.sh tidies a module without a replace)" >&2
        problems=1
      fi
    done < <(cd "$d" && go mod edit -print | replaces)
  done
  local distinct
  distinct=$(echo "$versions" | tr ' ' '\n' | sed '/^$/d' | sort -u)
  if [ "$(echo "$distinct" | sed '/^$/d' | wc -l)" -gt 1 ]; then
    echo "release.sh: the modules require their siblings at more than one version:" $distinct >&2
    echo "release.sh: run scripts/release.sh set-version <version>" >&2
    problems=1
  fi
  # go.work: each required sibling replaced at the one version by its directory.
  if [ -n "$distinct" ] && [ "$problems" = 0 ]; then
    local want have
    want=$(for path in $(required_siblings); do echo "$path $distinct => $(module_dir "$path")"; done | sort)
    have=$(go work edit -print | replaces | awk -v root="$MODULE_ROOT" '$1 == root || index($1, root "/") == 1' |
      sed 's|=> \./\{0,1\}$|=> ./|; s|=> \([^.]\)|=> ./\1|' | sort)
    if [ "$want" != "$have" ]; then
      echo "release.sh: go.work must replace each module its siblings require, at $distinct, with its directory (run scripts/release.sh set-version $distinct):" >&2
      diff <(echo "$want") <(echo "$have") | sed -n 's/^< /  missing: replace /p; s/^> /  extra:   replace /p' >&2
      problems=1
    fi
  fi
  local top
  top=$(changelog_top)
  if ! [[ $top =~ ^"## Unreleased"(" — "$semver)?$ || $top =~ ^"## "$semver" — "[0-9]{4}-[0-9]{2}-[0-9]{2}$ ]]; then
    echo "release.sh: CHANGELOG.md's first section is \"${top:-none}\"; it must be \"## Unreleased\", \"## Unreleased — vX.Y.Z\" or \"## vX.Y.Z — YYYY-MM-DD\"" >&2
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
  workspace_replaces "$version"
  echo "go.work: $(required_siblings | wc -l) modules replaced at $version by their directories"
}

tag() {
  local version=$1 d t
  valid_version "$version" || die "$version is not a version (vMAJOR.MINOR.PATCH[-pre])"
  [ -z "$(git status --porcelain)" ] || die "the tree has changes; commit or stash them first"
  [ "$(check)" = "$version" ] || die "the requires do not all name $version: run scripts/release.sh set-version $version and commit"
  [[ $(changelog_top) =~ ^"## $version — "[0-9]{4}-[0-9]{2}-[0-9]{2}$ ]] ||
    die "CHANGELOG.md's first section is \"$(changelog_top)\", not \"## $version — YYYY-MM-DD\": turn \"## Unreleased — $version\" into it"
  for d in "${PUBLIC_MODULES[@]}"; do
    t=$(module_tag "$d" "$version")
    git rev-parse -q --verify "refs/tags/$t" >/dev/null && die "tag $t exists already"
  done
  if [ "${SKIP_TESTS:-}" = 1 ]; then bash scripts/rehearse.sh; else bash scripts/test.sh; fi
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
