#!/usr/bin/env bash
# A publish rehearsal: serves every public module of this tree from a
# module proxy on disk, at a release-candidate version, and uses each as a
# user would, outside this workspace and with no replace line:
#
#   1. copies the tree (tracked and new files) and moves every require of a
#      sibling module to the candidate version (scripts/release.sh set-version);
#   2. writes the proxy (tools/modproxy: module zips as the go command makes
#      them);
#   3. for each public module, a fresh program in an empty directory does
#      `go get <module>@<candidate>`, `go mod tidy`, builds and runs the
#      module's snippet (scripts/rehearsal/<name>.go), and fails if a module
#      only tests use (kfake, kadm, the in-repo test kits, the OTel SDK,
#      testcontainers, chromedp) is in its `go list -m all`;
#   4. tests each public module by itself (GOWORK=off), its siblings
#      coming from the proxy, as users' builds will see them;
#   5. installs the CLI with `go install .../cmd/redeliver@<candidate>` and runs it.
#
# A module that fails steps 3 to 5 is reported and the others are still
# tried; the script exits 1 at the end, naming the modules that failed.
#
# Settings (environment):
#   REHEARSAL_VERSION   the candidate version (default: the siblings' required
#                       version with -rc.rehearsal.<UTC time>, e.g.
#                       v0.1.0-rc.rehearsal.20261125101500)
#   REHEARSAL_TESTS=0   leave step 4 out
#   REHEARSAL_MODULES   the module directories steps 3 to 5 try, e.g. "host
#                       adapters/kafkago/kafkagohost" (default: every public
#                       module; the proxy always serves them all)
#   REHEARSAL_KEEP=1    keep the work directory (its path is printed)
set -euo pipefail
cd "$(dirname "$0")/.."
repo=$PWD
. scripts/modules.sh

work=$(mktemp -d /tmp/redeliver-rehearsal.XXXXXX)
# At exit, the candidate's modules leave the module cache (nothing else
# would ever use them) and the work directory goes.
cleanup() {
  local cache
  cache=$(GOWORK=off go env GOMODCACHE)
  chmod -R u+w "$cache/github.com/redeliver-go" "$cache/cache/download/github.com/redeliver-go" 2>/dev/null || true
  rm -rf "$cache/github.com/redeliver-go" "$cache/cache/download/github.com/redeliver-go"
  if [ "${REHEARSAL_KEEP:-}" = 1 ]; then
    echo "rehearse.sh: work directory kept: $work"
  else
    chmod -R u+w "$work" 2>/dev/null; rm -rf "$work"
  fi
}
trap cleanup EXIT
say() { printf 'rehearse.sh: %s\n' "$*"; }
fail() { say "FAIL: $*"; exit 1; }

base=$(bash scripts/release.sh check 2>/dev/null || true)
case "$base" in v*) ;; *) base=v0.0.0 ;; esac
# A version no earlier run used: the module cache keeps what it fetched
# under a version for good.
version=${REHEARSAL_VERSION:-${base%%-*}-rc.rehearsal.$(date -u +%Y%m%d%H%M%S)}

# 1. The tree, as it would be tagged.
tree=$work/tree
mkdir -p "$tree"
git ls-files -z -c -o --exclude-standard | xargs -0 -I{} sh -c 'test -f "{}" && exec cp --parents "{}" "'"$tree"'"' 2>/dev/null || true
(cd "$tree" && bash scripts/release.sh set-version "$version" >/dev/null)

# 2. The proxy.
proxy=$work/proxy
dirs=()
for d in "${PUBLIC_MODULES[@]}"; do dirs+=("$tree/$d"); done
(cd "$repo/tools" && go run ./modproxy -out "$proxy" -version "$version" "${dirs[@]}") >/dev/null
say "proxy at $version: ${#dirs[@]} modules"

# The user's environment: the proxy first, then the usual one; no
# workspace; no checksum database for modules that are not published yet.
upstream=$(go env GOPROXY)
export GOWORK=off GOFLAGS=-mod=mod GOPROXY="file://$proxy,$upstream"
export GONOSUMDB="$MODULE_ROOT,$MODULE_ROOT/*" GONOSUMCHECK=1
export GOTOOLCHAIN=local
testonly='github.com/twmb/franz-go/pkg/kfake|github.com/redeliver-go/redeliver/(adapters/internal/kafkatest|adapters/franz/tests|adapters/kafkago/tests|integration|bench|host/browser|host/tests|redrive/e2e|tools)|go.opentelemetry.io/otel/sdk|github.com/testcontainers|github.com/chromedp'
# kadm is test-only too, except where adapters/franz is used: its share
# consumer reads the broker's configuration through it.
testonly_for() {
  case "$1" in
    adapters/franz | adapters/franz/*) echo "$testonly" ;;
    *) echo "$testonly|github.com/twmb/franz-go/pkg/kadm" ;;
  esac
}

# tried DIR: whether steps 3 to 5 try the module (REHEARSAL_MODULES).
tried() {
  [ -z "${REHEARSAL_MODULES:-}" ] && return 0
  case " $REHEARSAL_MODULES " in *" $1 "*) return 0 ;; esac
  return 1
}

# snippet DIR: the rehearsal program for a module directory.
snippet() {
  case "$1" in
    .) echo core ;;
    cmd/redeliver) echo "" ;;
    *) basename "$1" ;;
  esac
}

# 3. A fresh program per public module. A module that fails is reported,
# and the others are still tried; the script fails at the end.
failed=()
for d in "${PUBLIC_MODULES[@]}"; do
  tried "$d" || continue
  name=$(snippet "$d")
  [ -n "$name" ] || continue
  mod=$(module_path "$d")
  app=$work/app-$name
  mkdir -p "$app"
  cp "$repo/scripts/rehearsal/$name.go" "$app/main.go"
  sed -i '/^\/\/go:build ignore$/,+1d' "$app/main.go"
  (
    cd "$app"
    go mod init example.com/app-$name >/dev/null 2>&1
    go get "$mod@$version" >get.log 2>&1 || { cat get.log; fail "go get $mod@$version"; }
    go mod tidy >tidy.log 2>&1 || { cat tidy.log; fail "go mod tidy for $mod"; }
    go build -o app . 2>build.log || { cat build.log; fail "go build for $mod"; }
    bad=$(go list -m all | grep -E "$(testonly_for "$d")" || true)
    [ -z "$bad" ] || fail "a program that imports $mod has test-only modules in its graph:
$bad"
    out=$(./app 2>run.log) || { cat run.log; fail "the $name program failed"; }
    say "$mod@$version: $(go list -m all | wc -l) modules; $out"
  ) || failed+=("$d")
done

# 4. Each public module's own tests, by itself.
if [ "${REHEARSAL_TESTS:-1}" != 0 ]; then
  for d in "${PUBLIC_MODULES[@]}"; do
    tried "$d" || continue
    if (cd "$tree/$d" && go build ./... && go vet ./... && go test -count=1 ./...) >"$work/test.log" 2>&1; then
      say "module $d: builds and passes its tests by itself"
    else
      tail -n 40 "$work/test.log"
      say "FAIL: module $d does not build or pass its tests by itself (GOWORK=off)"
      failed+=("$d (tests)")
    fi
  done
fi

# 5. The CLI, as `go install` brings it.
cli=$(module_path cmd/redeliver)
if ! tried cmd/redeliver; then
  :
elif ! GOBIN=$work/bin go install "$cli@$version" >"$work/install.log" 2>&1; then
  cat "$work/install.log"; say "FAIL: go install $cli@$version"; failed+=(cmd/redeliver)
else
  printf '{ "version": "2.0", "checkpointRetryPolicy": { "retryCount": 3, "sleepDuration": "00:00:05" } }\n' >"$work/host.json"
  if "$work/bin/redeliver" check "$work/host.json" >"$work/check.log" 2>&1; then
    say "$cli@$version: installed; redeliver check: $(tail -n 1 "$work/check.log")"
  else
    cat "$work/check.log"; say "FAIL: redeliver check"; failed+=(cmd/redeliver)
  fi
fi
[ ${#failed[@]} = 0 ] || fail "${#failed[@]} failed: ${failed[*]}"
say "ok: every public module${REHEARSAL_MODULES:+ of $REHEARSAL_MODULES} installs at $version with no replace line"
