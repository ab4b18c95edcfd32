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
#      module's snippet (scripts/rehearsal/<name>.go), and fails
#        - if a module only tests use (kfake, kadm, the in-repo test kits,
#          the OTel SDK, testcontainers, chromedp) is in its `go list -m all`;
#        - if its module graph (`go mod graph`) has a client, SDK or driver
#          the module does not use: the core's and the host's hold nothing
#          but redeliver's modules and hujson; a kafka-go program (with or
#          without the host) has no franz-go, a franz-go program no kafka-go;
#          none has the Azure SDK, pgx, SQLite or OpenTelemetry unless its
#          module is the one that uses it;
#   4. tests each public module by itself (GOWORK=off), its siblings coming
#      from the proxy, as users' builds will see them: every dependency its
#      packages and tests build must be at the version the workspace tests
#      (align it in the module's go.mod otherwise); then go build, go vet
#      and go test (without -race: the workspace's tests have it), with the
#      very Go release the module's go line names when that is older than
#      go.work's (GOTOOLCHAIN=goX.Y.Z: the go command fetches it once), so
#      that the oldest Go a module claims is one it works with; a module
#      whose go line is go.work's builds its tests without running them
#      (the workspace ran them, with the same Go and the same versions);
#   5. installs the CLI with `go install .../cmd/redeliver@<candidate>` and runs it.
#
# A module that fails steps 3 to 5 is reported and the others are still
# tried; the script exits 1 at the end, naming the modules that failed.
# Each step prints how long it took.
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
t0=$SECONDS
# took SINCE: seconds since SINCE, as "12 s".
took() { echo "$((SECONDS - $1)) s"; }
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
say "proxy at $version: ${#dirs[@]} modules ($(took $t0))"

# What the workspace builds and tests: "path version" of every module in
# its build list (step 4 compares each public module's with it).
workspace=$(GOWORK=$repo/go.work go list -m -f '{{if .Version}}{{.Path}} {{.Version}}{{end}}' all)
# The workspace's go line: the Go this suite runs with; older go lines are
# tried with their own release in step 4.
newest=$(awk '$1 == "go" { print $2; exit }' go.work)

# The user's environment: the proxy first, then the usual one; no
# workspace; no checksum database for modules that are not published yet.
upstream=$(go env GOPROXY)
export GOWORK=off GOFLAGS=-mod=mod GOPROXY="file://$proxy,$upstream"
export GONOSUMDB="$MODULE_ROOT,$MODULE_ROOT/*"
export GOTOOLCHAIN=local
testonly='github.com/twmb/franz-go/pkg/kfake|github.com/redeliver-go/redeliver/(adapters/internal/kafkatest|adapters/franz/tests|adapters/kafkago/tests|adapters/sarama/tests|adapters/confluent/tests|integration|bench|host/browser|host/tests|redrive/e2e|tools)|go.opentelemetry.io/otel/sdk|github.com/testcontainers|github.com/chromedp'
# kadm is test-only too, except where adapters/franz is used: its share
# consumer reads the broker's configuration through it. confluent-kafka-go's
# go.mod requires testcontainers and OpenTelemetry's SDK (for its own tests
# and examples) and the Azure SDK (for its schema registry's packages):
# they are in the module graph of every program that uses it, though a
# build of the adapter compiles none of them (only its kafka package and
# librdkafka), so the checks of adapters/confluent leave them out.
testonly_ours='github.com/twmb/franz-go/pkg/kfake|github.com/redeliver-go/redeliver/(adapters/internal/kafkatest|adapters/franz/tests|adapters/kafkago/tests|adapters/sarama/tests|adapters/confluent/tests|integration|bench|host/browser|host/tests|redrive/e2e|tools)|github.com/chromedp'
testonly_for() {
  case "$1" in
    adapters/franz | adapters/franz/*) echo "$testonly" ;;
    adapters/confluent | adapters/confluent/*) echo "$testonly_ours|github.com/twmb/franz-go/pkg/kadm" ;;
    *) echo "$testonly|github.com/twmb/franz-go/pkg/kadm" ;;
  esac
}

# Modules a program of each public module must not have in its module
# graph, as a regexp on module paths (clients, SDKs, drivers). The core and
# the host are held to a list of what they may have instead (graph_only).
clients='github.com/twmb/franz-go|github.com/segmentio/kafka-go|github.com/IBM/sarama|github.com/confluentinc/|github.com/Azure/|github.com/jackc/|go.opentelemetry.io|modernc.org'
graph_forbidden() {
  case "$1" in
    adapters/kafkago | adapters/kafkago/kafkagohost) echo 'github.com/twmb/franz-go|github.com/IBM/sarama|github.com/confluentinc/|github.com/Azure/|github.com/jackc/|go.opentelemetry.io|modernc.org' ;;
    adapters/franz | adapters/franz/franzhost) echo 'github.com/segmentio/kafka-go|github.com/IBM/sarama|github.com/confluentinc/|github.com/Azure/|github.com/jackc/|go.opentelemetry.io|modernc.org' ;;
    adapters/confluent | adapters/confluent/confluenthost) echo 'github.com/twmb/franz-go|github.com/segmentio/kafka-go|github.com/IBM/sarama|github.com/jackc/|modernc.org' ;; # not Azure or OpenTelemetry: see testonly_for
    adapters/sarama | adapters/sarama/saramahost) echo 'github.com/twmb/franz-go|github.com/segmentio/kafka-go|github.com/confluentinc/|github.com/Azure/|github.com/jackc/|go.opentelemetry.io|modernc.org' ;;
    adapters/eventhubs) echo 'github.com/twmb/franz-go|github.com/segmentio/kafka-go|github.com/jackc/|modernc.org' ;;
    redrive/pgstore) echo 'github.com/twmb/franz-go|github.com/segmentio/kafka-go|github.com/Azure/|go.opentelemetry.io|modernc.org' ;;
    redrive/sqlitestore) echo 'github.com/twmb/franz-go|github.com/segmentio/kafka-go|github.com/Azure/|github.com/jackc/|go.opentelemetry.io' ;;
    rdotel) echo 'github.com/twmb/franz-go|github.com/segmentio/kafka-go|github.com/Azure/|github.com/jackc/|modernc.org' ;;
    *) echo "$clients" ;;
  esac
}
# graph_only DIR: for the core and the host, the only modules their
# programs' graphs may hold: redeliver's, hujson and what hujson requires
# (go-cmp, for its tests), the go and toolchain lines.
graph_only() {
  case "$1" in
    . | host) echo "example.com/app-.*|$MODULE_ROOT(/.*)?|github.com/tailscale/hujson|github.com/google/go-cmp|go|toolchain" ;;
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
t3=$SECONDS
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
    nodes=$(go mod graph | tr ' ' '\n' | sed 's/@.*//' | sort -u)
    bad=$(echo "$nodes" | grep -E "^($(graph_forbidden "$d"))" || true)
    [ -z "$bad" ] || fail "the module graph of a program that imports $mod has what it must not:
$bad"
    only=$(graph_only "$d")
    bad=$([ -z "$only" ] || echo "$nodes" | grep -vxE "$only" || true)
    [ -z "$bad" ] || fail "the module graph of a program that imports $mod has modules beyond redeliver's and hujson:
$bad"
    out=$(./app 2>run.log) || { cat run.log; fail "the $name program failed"; }
    say "$mod@$version: $(go list -m all | wc -l) modules, $(echo "$nodes" | wc -l) in its graph; $out"
  ) || failed+=("$d")
done
say "step 3, a program per module: $(took $t3)"

# 4. Each public module's own tests, by itself, with the oldest Go it claims.
if [ "${REHEARSAL_TESTS:-1}" != 0 ]; then
  t4=$SECONDS
  for d in "${PUBLIC_MODULES[@]}"; do
    tried "$d" || continue
    ts=$SECONDS
    # The versions its packages and tests build, against the workspace's.
    if ! (cd "$tree/$d" && go list -deps -test -f '{{with .Module}}{{if .Version}}{{.Path}} {{.Version}}{{end}}{{end}}' ./...) >"$work/deps.txt" 2>"$work/list.log"; then
      cat "$work/list.log"; say "FAIL: go list in module $d (GOWORK=off)"; failed+=("$d (tests)"); continue
    fi
    other=$(sort -u "$work/deps.txt" | grep -vE "^$MODULE_ROOT(/[^ ]*)? " | grep -vxF "$workspace" || true)
    if [ -n "$other" ]; then
      echo "$other"
      say "FAIL: module $d by itself builds other versions than the workspace tests (above): align them in $d/go.mod"
      failed+=("$d (versions)"); continue
    fi
    v=$(awk '$1 == "go" { print $2; exit }' "$tree/$d/go.mod")
    toolchain=local
    if [ "$v" != "$newest" ]; then
      case $v in *.*.*) ;; *) v=$v.0 ;; esac # go 1.25 is the release go1.25.0
      toolchain=go$v
    fi
    # With the workspace's Go and, as checked above, the very versions
    # the workspace builds, the module's tests are the ones the workspace
    # ran (under -race): here they are built by themselves, not run again.
    # With an older Go they run.
    run=.
    [ "$toolchain" = local ] && run='^$'
    if (cd "$tree/$d" && export GOTOOLCHAIN=$toolchain && go version && go build -o /dev/null ./... &&
      go vet ./... && go test -count=1 -timeout 15m -run "$run" ./...) >"$work/test.log" 2>&1; then
      what="passes its tests"
      [ "$run" = . ] || what="builds its tests (the workspace ran them with these versions)"
      say "module $d: builds, vets and $what by itself with $(grep -m 1 '^go version ' "$work/test.log" | awk '{ print $3 }') ($(took $ts))"
    else
      tail -n 40 "$work/test.log"
      say "FAIL: module $d does not build or pass its tests by itself (GOWORK=off, GOTOOLCHAIN=$toolchain)"
      failed+=("$d (tests)")
    fi
  done
  say "step 4, each module's tests by itself: $(took $t4)"
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
[ ${#failed[@]} = 0 ] || fail "${#failed[@]} failed: ${failed[*]} ($(took $t0))"
say "ok: every public module${REHEARSAL_MODULES:+ of $REHEARSAL_MODULES} installs at $version with no replace line ($(took $t0))"
