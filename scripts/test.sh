#!/usr/bin/env bash
# Runs the whole test suite: formatting, vet, unit tests with the race
# detector, the examples, and the integration module. It installs what it
# needs (Go modules) by itself.
set -euo pipefail
cd "$(dirname "$0")/.."

step() { printf '\n== %s\n' "$*"; }

# Servers started below are stopped on exit, whatever happens: each start
# adds its stop command here.
on_exit=()
cleanup() { local c; for c in "${on_exit[@]}"; do eval "$c" >/dev/null 2>&1 || true; done; }
trap cleanup EXIT

step "gofmt"
unformatted=$(gofmt -l $(git ls-files '*.go' 2>/dev/null || find . -name '*.go'))
if [ -n "$unformatted" ]; then
  echo "gofmt would change:"; echo "$unformatted"; exit 1
fi

step "go.work names every module"
# go.work ties the modules together for development (go run ./cmd/redeliver
# from the top works); a module it does not name cannot be built in place.
for mod in $(git ls-files '*/go.mod' | xargs -n1 dirname); do
  go work edit -json | grep -qF "\"DiskPath\": \"./$mod\"" ||
    { echo "go.work does not use ./$mod: run go work use ./$mod"; exit 1; }
done

step "module versions and tidiness"
# Every module requires its siblings at the one version a release
# publishes, with no replace line (go.work ties them for development), and
# every go.mod and go.sum is as go mod tidy leaves it.
bash scripts/release.sh check
bash scripts/tidy.sh -diff

step "README's Go versions agree with the go.mod files"
bash scripts/goversions.sh

step "the public API: api/ and docs/API.md agree with the code"
# A change to an exported name fails here until api/ and the API review
# (docs/API.md) are updated with it: bash scripts/api.sh update.
bash scripts/api.sh check

step "go vet"
go vet ./...

step "go test -race (root module)"
go test -race -count=1 ./...

# Azurite, the Azure Storage emulator (installed with npm where missing),
# for the Event Hubs checkpoint-store tests and reliability scenarios.
# REDELIVER_AZURE_STORAGE set beforehand names another storage account;
# REDELIVER_NO_AZURITE=1 skips those tests.
if [ -z "${REDELIVER_AZURE_STORAGE:-}" ] && [ "${REDELIVER_NO_AZURITE:-}" != 1 ]; then
  step "Azurite (blob storage emulator)"
  on_exit+=("bash '$PWD/integration/azurite.sh' stop")
  line=$(bash integration/azurite.sh start)
  export "${line?}"
  echo "REDELIVER_AZURE_STORAGE=<Azurite on ${line##*BlobEndpoint=}>"
fi

# The modules of their own (each heavy dependency lives in one, so that a
# user pulls only what they use), except the integration module, the
# browser test, the examples and the re-drive's stores, which run below.
for mod in $(git ls-files '*/go.mod' | xargs -n1 dirname | grep -v '^integration$\|^host/browser$\|^examples/\|^redrive/' | sort); do
  step "module $mod: go vet, go test -race"
  (cd "$mod" && go vet ./... && go test -race -count=1 ./...)
done

step "benchmarks, once each (that they run; scripts/bench.sh measures)"
go test -run '^$' -bench . -benchtime 1x ./checkpoint ./stream github.com/redeliver-go/redeliver/adapters/...

# The status page in a real browser: Debian's chromium, installed where
# missing (REDELIVER_NO_BROWSER=1 installs nothing: the test then skips
# unless a Chromium is there; REDELIVER_CHROMIUM names another browser).
if [ -f host/browser/go.mod ]; then
  step "module host/browser: the status page in headless Chromium"
  if [ "${REDELIVER_NO_BROWSER:-}" != 1 ] && [ -z "${REDELIVER_CHROMIUM:-}" ] &&
     ! command -v chromium >/dev/null 2>&1 && ! command -v chromium-browser >/dev/null 2>&1; then
    echo "installing Debian's chromium"
    sudo=""; [ "$(id -u)" = 0 ] || sudo=sudo
    # apt may be locked for a moment by another install: try again.
    for try in 1 2 3 4 5 6; do
      if $sudo apt-get update -qq && $sudo apt-get install -y -qq chromium >/tmp/redeliver-apt.log 2>&1; then
        break
      fi
      [ "$try" = 6 ] && { cat /tmp/redeliver-apt.log; echo "could not install chromium"; exit 1; }
      sleep 10
    done
  fi
  (cd host/browser && go vet ./... && go test -count=1 -v ./...)
fi

step "examples"
for dir in examples/*/; do
  [ -f "$dir/main.go" ] || continue
  if [ -f "$dir/go.mod" ]; then
    # An example with a module of its own (its driver stays out of the
    # root module) runs from its directory.
    echo "-- (cd $dir && go vet . && go run .)"
    (cd "$dir" && go vet . && timeout 120 go run .) >/tmp/redeliver-example.out 2>&1 || { cat /tmp/redeliver-example.out; exit 1; }
  else
    echo "-- go run ./$dir"
    timeout 120 go run "./$dir" >/tmp/redeliver-example.out 2>&1 || { cat /tmp/redeliver-example.out; exit 1; }
  fi
  tail -n 1 /tmp/redeliver-example.out
done
# An operator who looks at the status page with -hold and then presses
# Ctrl-C gets a clean shutdown and exit status 0. (Job control is on so
# that the program starts with SIGINT not ignored, as from a terminal.)
echo "-- functionshost -hold, then Ctrl-C"
(cd examples/functionshost && go build -o /tmp/redeliver-functionshost .)
out=/tmp/redeliver-functionshost.out
status=$(set -m
  timeout 180 /tmp/redeliver-functionshost -hold 2m >"$out" 2>&1 &
  pid=$!
  for _ in $(seq 120); do grep -q '^holding' "$out" && break; kill -0 "$pid" 2>/dev/null || break; sleep 1; done
  sleep 1
  kill -INT "$pid" 2>/dev/null || true
  s=0; wait "$pid" || s=$?
  echo "$s")
[ "$status" = 0 ] && grep -q '^holding' "$out" && grep -q '^ok' "$out" || { cat "$out"; echo "functionshost: exit status $status after Ctrl-C during -hold"; exit 1; }
tail -n 1 "$out"

if [ -f integration/go.mod ]; then
  # A real Apache Kafka broker (KRaft, from Maven Central jars; needs Java 17
  # and Maven) for the external provider of the conformance and reliability
  # suites. REDELIVER_KAFKA_BROKERS set beforehand names another broker
  # instead; REDELIVER_NO_BROKER=1 runs on kfake only.
  if [ -z "${REDELIVER_KAFKA_BROKERS:-}" ] && [ "${REDELIVER_NO_BROKER:-}" != 1 ]; then
    step "real Kafka broker"
    on_exit+=("bash '$PWD/integration/kafka.sh' stop")
    line=$(bash integration/kafka.sh start)
    export "${line?}"
    # kafka.sh allows 1s session timeouts and runs KIP-848 groups with 3s.
    export REDELIVER_KAFKA_SESSION_TIMEOUT=3s REDELIVER_KAFKA_KIP848=1
    export REDELIVER_KAFKA_RESTART="bash $PWD/integration/kafka.sh restart"
    echo "$line"
  fi
  # A private Docker engine (integration/docker.sh) and the images it runs
  # (integration/images.sh, built locally and cached) for the testcontainers
  # providers. DOCKER_HOST set beforehand names another engine instead
  # (the images are built in it); REDELIVER_NO_DOCKER=1 skips this. Where no
  # engine can start or the images cannot be built, the providers skip and
  # say why, and everything else runs.
  if [ "${REDELIVER_NO_DOCKER:-}" = 1 ]; then
    export REDELIVER_TC_SKIP="REDELIVER_NO_DOCKER=1: scripts/test.sh started no Docker engine"
  elif [ -z "${REDELIVER_TC_SKIP:-}" ]; then
    step "Docker engine and images for the testcontainers providers"
    docker_t0=$SECONDS
    docker_log=$(mktemp)
    if [ -z "${DOCKER_HOST:-}" ]; then
      # An engine that ran before this script is not ours to stop.
      bash integration/docker.sh status >/dev/null 2>&1 || on_exit+=("bash '$PWD/integration/docker.sh' stop")
      if line=$(bash integration/docker.sh start 2>"$docker_log"); then
        export "${line?}"
      else
        export REDELIVER_TC_SKIP="integration/docker.sh could not start a Docker engine: $(tail -n 1 "$docker_log")"
      fi
      cat "$docker_log" >&2
    fi
    if [ -z "${REDELIVER_TC_SKIP:-}" ]; then
      # testcontainers' reaper image cannot be pulled: the tests remove
      # their containers themselves.
      export TESTCONTAINERS_RYUK_DISABLED=true
      if images=$(bash integration/images.sh build 2>"$docker_log"); then
        for line in $images; do export "${line?}"; done
      else
        export REDELIVER_TC_SKIP="integration/images.sh could not build the images: $(tail -n 1 "$docker_log")"
      fi
      cat "$docker_log" >&2
    fi
    rm -f "$docker_log"
    echo "${DOCKER_HOST:+DOCKER_HOST=$DOCKER_HOST }${REDELIVER_TC_SKIP:-images ready} ($((SECONDS - docker_t0)) s)"
  fi

  export REDELIVER_FIGURES=${REDELIVER_FIGURES:-$(mktemp)}
  : >"$REDELIVER_FIGURES"

  step "integration module (kfake${REDELIVER_KAFKA_BROKERS:+ and $REDELIVER_KAFKA_BROKERS})"
  (cd integration && go vet ./... && go test -race -count=1 -timeout 30m ./...)

  step "reliability figures (docs/RELIABILITY.md explains them)"
  cat "$REDELIVER_FIGURES"
fi

# The re-drive's modules: both stores (the conformance suite, migrations,
# the database away at start and mid-run) and the end-to-end tests
# (through kfake and, when it runs, the real broker; several schedulers on
# one PostgreSQL; a scheduler killed mid-sweep). A real PostgreSQL server
# is started by integration/postgres.sh (installing Debian's postgresql
# package where it is missing); REDELIVER_POSTGRES_URL set beforehand names
# another server instead; REDELIVER_NO_POSTGRES=1 skips the tests that need
# one (they say so).
if [ -z "${REDELIVER_POSTGRES_URL:-}" ] && [ "${REDELIVER_NO_POSTGRES:-}" != 1 ]; then
  step "PostgreSQL server"
  export REDELIVER_POSTGRES_DIR=${REDELIVER_POSTGRES_DIR:-$(mktemp -d /tmp/redeliver-postgres.XXXXXX)}
  on_exit+=("bash '$PWD/integration/postgres.sh' stop")
  line=$(bash integration/postgres.sh start)
  export "${line?}"
  echo "$line"
fi
for mod in redrive/sqlitestore redrive/pgstore redrive/e2e; do
  step "$mod module${REDELIVER_POSTGRES_URL:+ (PostgreSQL at ${REDELIVER_POSTGRES_URL#*@})}"
  (cd "$mod" && go vet ./... && go test -race -count=1 -timeout 15m ./...)
done

# The publish rehearsal (scripts/rehearse.sh): every public module served
# from a module proxy on disk at a release-candidate version; for each, a
# fresh program outside the workspace with no replace line gets it, tidies,
# builds and runs, with no test-only module in its build list and no other
# client, SDK or driver in its module graph; each module's own tests by
# itself (GOWORK=off), building the same dependency versions as the
# workspace, with the very Go release its go line names when that is older
# than the workspace's; and the CLI installed with go install. It runs here,
# with the servers above still up, so that the stores' and the Event Hubs
# adapter's tests by themselves reach them too.
step "publish rehearsal: every public module as a user gets it"
bash scripts/rehearse.sh

# hostconfig's tests with the newest hujson, which refuses a line separator
# in a // comment itself: a program's build may select it, and hostconfig
# must read every host.json the same with it as with the older one the core
# requires.
step "hostconfig with the newest hujson"
hujson=github.com/tailscale/hujson@v0.0.0-20260727124030-b80ff77dac4f
modfile=$(mktemp -d)
cp go.mod go.sum "$modfile"
GOWORK=off go get -modfile="$modfile/go.mod" "$hujson"
GOWORK=off go test -modfile="$modfile/go.mod" -count=1 ./hostconfig
rm -rf "$modfile"
