#!/usr/bin/env bash
# Runs the whole test suite: formatting, vet, unit tests with the race
# detector, the examples, and the integration module. It installs what it
# needs (Go modules, the Kafka broker and a three-broker cluster from the
# same jars, PostgreSQL, Azurite, Chromium, a private Docker engine and
# its images) by itself.
#
# The slow services start in the background at once and are awaited by
# the step that needs them, so their installs and start-ups overlap the Go
# tests. Every step prints its wall time, and a table of all of them with
# the total closes the log (also when a step fails).
#
# The race detector runs where goroutines are the subject: every unit
# package and each adapter's suite. The integration module's scenario
# matrix (the same adapters, many times over) runs without it.
# REDELIVER_INTEGRATION_RACE=1 runs it under -race too (about 3x longer).
set -euo pipefail
cd "$(dirname "$0")/.."

t_total=$SECONDS
cur_step="" cur_t0=$SECONDS
step_times=()
# end_step: closes the current step, printing and recording its time.
end_step() {
  [ -n "$cur_step" ] || return 0
  local d=$((SECONDS - cur_t0))
  step_times+=("$d|$cur_step")
  printf -- '-- %s: %d s\n' "$cur_step" "$d"
  cur_step=""
}
step() {
  end_step
  cur_step=$* cur_t0=$SECONDS
  printf '\n== %s   [%s, %d s in]\n' "$*" "$(date -u +%H:%M:%S)" $((SECONDS - t_total))
}
summary() {
  end_step
  printf '\n== step times (wall clock)\n'
  local t
  for t in ${step_times[@]+"${step_times[@]}"}; do printf '%6d s  %s\n' "${t%%|*}" "${t#*|}"; done
  printf '%6d s  total\n' $((SECONDS - t_total))
}

# failures prints, from a go test -v log, each failed case's line, the
# first lines of its own output (what it logged between its "=== RUN" and
# the next case's), then the lines its test wrote (t.Log, t.Error,
# t.Fatal: "file.go:N: ...", with the lines they continue on), and any
# panic: at most 160 lines.
failures() {
  local out
  out=$(awk '
    FNR == NR {
      if (match($0, /--- FAIL: [^ ]+/)) failed[substr($0, RSTART + 10, RLENGTH - 10)] = 1
      next
    }
    /^panic: / { p = 12 }
    p > 0 { print; p--; next }
    /^(=== (RUN|CONT|PAUSE|NAME)|[ \t]*--- )/ {
      n = 0; own = 0; more = 0
      name = $0; sub(/^=== [A-Z]+ +/, "", name)
      if ($0 ~ /^=== (RUN|CONT|NAME)/ && (name in failed)) {
        if (!(name in shown)) { print "--- FAIL: " name; n = 5; shown[name] = 1 }
        own = 1
      }
      next
    }
    own && /^[ \t]+[A-Za-z0-9_.-]+\.go:[0-9]+: / { print; more = 1; next }
    own && more && /^[ \t][ \t][ \t][ \t][ \t]/ { print; next }
    { more = 0 }
    n > 0 { print; n-- }
  ' "$1" "$1" | head -n 160)
  # A log without -v has no "=== RUN" lines: the lines after each failure.
  [ -n "$out" ] || out=$(awk '/^[ \t]*--- FAIL/ {n = 8} /^panic: / {n = 12} n > 0 {print; n--}' "$1" | head -n 160)
  printf '%s\n' "$out"
}

# summarize prints a go test -v log: all of it when the run failed, else
# each top-level test's result, slowest first, and the packages' lines. A
# test whose subtests run in parallel reports about no time of its own
# (go test leaves their run out of it): its time is its longest subtest's,
# marked so.
summarize() {
  if [ "$2" != 0 ]; then
    cat "$1"
    return
  fi
  awk '
    /^(    )?--- (PASS|SKIP): .* \([0-9.]+s\)$/ {
      line = $0; sub(/^ *--- /, "", line)
      res = line; sub(/:.*/, "", res)
      name = line; sub(/^[A-Z]+: /, "", name); sub(/ \([0-9.]+s\)$/, "", name)
      t = line; sub(/.*\(/, "", t); sub(/s\)$/, "", t); t += 0
      if ($0 !~ /^    /) { top[name] = t; result[name] = res; next }
      parent = name; sub(/\/.*/, "", parent)
      if (t > longest[parent]) longest[parent] = t
    }
    END {
      for (n in top) {
        t = top[n]; note = ""
        if (longest[n] > t + 1) { t = longest[n]; note = " (parallel subtests: the longest)" }
        printf "%8.1f s  %s %s%s\n", t, result[n], n, note
      }
    }' "$1" | sort -rn
  grep -E '^(ok|FAIL|\?) ' "$1" || true
}

# Servers started below are stopped on exit, whatever happens: each start
# adds its stop command here.
on_exit=()
svc=$(mktemp -d /tmp/redeliver-services.XXXXXX)
cleanup() {
  local rc=$? c
  set +e
  [ "$rc" = 0 ] || printf '\n== FAILED (exit status %d) in: %s\n' "$rc" "${cur_step:-?}"
  summary
  # A background start still running is waited for, so that what it
  # starts is stopped below (each start is bounded by its own timeout).
  for c in "$svc"/*.pid; do [ -f "$c" ] && wait "$(cat "$c")" 2>/dev/null; done
  for c in ${on_exit[@]+"${on_exit[@]}"}; do eval "$c" >/dev/null 2>&1; done
  rm -rf "$svc"
  exit "$rc"
}
trap cleanup EXIT

# background NAME CMD...: runs CMD in the background, its stdout to
# $svc/NAME.out and stderr to $svc/NAME.err.
background() {
  local name=$1; shift
  ( t0=$SECONDS; set +e; "$@" >"$svc/$name.out" 2>"$svc/$name.err"; rc=$?
    echo "$rc $((SECONDS - t0))" >"$svc/$name.rc" ) &
  echo $! >"$svc/$name.pid"
}
# await NAME: waits for a background start, prints its stderr and how long
# it took, and returns its exit status; its stdout is in $svc/NAME.out.
await() {
  local name=$1 t0=$SECONDS rc secs
  wait "$(cat "$svc/$name.pid")" 2>/dev/null || true
  rm -f "$svc/$name.pid"
  read -r rc secs <"$svc/$name.rc"
  cat "$svc/$name.err" >&2
  echo "($name: started in the background in $secs s, waited $((SECONDS - t0)) s for it)"
  return "$rc"
}

# ---------------------------------------------------------------- services
# Each slow service starts now, in the background; the step that needs it
# awaits it. The starts that may install through apt (Chromium,
# PostgreSQL, docker.io) take turns on one lock; flock -o keeps the lock
# away from what the command leaves running (a server that inherited it
# would hold it for good).
apt_locked() { flock -o "$svc/apt.lock" "$@"; }

# Azurite, the Azure Storage emulator (installed with npm where missing),
# for the Event Hubs checkpoint-store tests and reliability scenarios.
# REDELIVER_AZURE_STORAGE set beforehand names another storage account;
# REDELIVER_NO_AZURITE=1 skips those tests.
if [ -z "${REDELIVER_AZURE_STORAGE:-}" ] && [ "${REDELIVER_NO_AZURITE:-}" != 1 ]; then
  on_exit+=("bash '$PWD/integration/azurite.sh' stop")
  background azurite bash integration/azurite.sh start
fi

# A real Apache Kafka broker (KRaft, from Maven Central jars; needs Java 17
# and Maven) for the external provider of the conformance and reliability
# suites. REDELIVER_KAFKA_BROKERS set beforehand names another broker
# instead; REDELIVER_NO_BROKER=1 runs on kfake only.
if [ -f integration/go.mod ] && [ -z "${REDELIVER_KAFKA_BROKERS:-}" ] && [ "${REDELIVER_NO_BROKER:-}" != 1 ]; then
  on_exit+=("bash '$PWD/integration/kafka.sh' stop")
  background kafka bash integration/kafka.sh start
fi

# A three-broker Kafka cluster (integration/kafka-cluster.sh: the same
# jars as the broker above, behind fault proxies) for CI's cluster step:
# one cluster scenario per adapter, run beside the integration module's
# tests. REDELIVER_KAFKA_CLUSTER set beforehand names another cluster
# (started by kafka-cluster.sh, whose REDELIVER_KAFKA_CLUSTER_DIR must be
# set too); REDELIVER_NO_CLUSTER=1 skips the step.
if [ -f integration/go.mod ] && [ -z "${REDELIVER_KAFKA_CLUSTER:-}" ] && [ "${REDELIVER_NO_CLUSTER:-}" != 1 ]; then
  on_exit+=("bash '$PWD/integration/kafka-cluster.sh' stop")
  background cluster bash integration/kafka-cluster.sh start
fi

# The status page's browser: Debian's chromium, installed where missing
# (integration/chromium.sh says how to skip it or name another browser).
[ -f host/browser/go.mod ] && background chromium apt_locked bash integration/chromium.sh

# The re-drive's PostgreSQL server, started by integration/postgres.sh
# (installing Debian's postgresql package where it is missing);
# REDELIVER_POSTGRES_URL set beforehand names another server instead;
# REDELIVER_NO_POSTGRES=1 skips the tests that need one (they say so).
if [ -z "${REDELIVER_POSTGRES_URL:-}" ] && [ "${REDELIVER_NO_POSTGRES:-}" != 1 ]; then
  export REDELIVER_POSTGRES_DIR=${REDELIVER_POSTGRES_DIR:-$(mktemp -d /tmp/redeliver-postgres.XXXXXX)}
  on_exit+=("bash '$PWD/integration/postgres.sh' stop")
  background postgres apt_locked bash integration/postgres.sh start
fi

# A private Docker engine (integration/docker.sh) and the images it runs
# (integration/images.sh, built locally and cached) for the testcontainers
# providers. DOCKER_HOST set beforehand names another engine instead (the
# images are built in it); REDELIVER_NO_DOCKER=1 skips this. Where no engine
# can start or the images cannot be built, the providers skip and say why,
# and everything else runs. Prints the environment lines the integration
# module reads.
start_docker() {
  local line log=$svc/docker-start.log
  if [ -z "${DOCKER_HOST:-}" ]; then
    if line=$(apt_locked bash integration/docker.sh start 2>"$log"); then
      echo "$line"; export "${line?}"
    else
      cat "$log" >&2
      echo "REDELIVER_TC_SKIP=integration/docker.sh could not start a Docker engine: $(tail -n 1 "$log")"
      return 0
    fi
    cat "$log" >&2
  fi
  # testcontainers' reaper image cannot be pulled: the tests remove their
  # containers themselves.
  echo "TESTCONTAINERS_RYUK_DISABLED=true"
  if ! bash integration/images.sh build 2>"$log"; then
    cat "$log" >&2
    echo "REDELIVER_TC_SKIP=integration/images.sh could not build the images: $(tail -n 1 "$log")"
  fi
  cat "$log" >&2
}
if [ -f integration/go.mod ]; then
  if [ "${REDELIVER_NO_DOCKER:-}" = 1 ]; then
    export REDELIVER_TC_SKIP="REDELIVER_NO_DOCKER=1: scripts/test.sh started no Docker engine"
  elif [ -z "${REDELIVER_TC_SKIP:-}" ]; then
    # An engine that ran before this script is not ours to stop.
    [ -n "${DOCKER_HOST:-}" ] || bash integration/docker.sh status >/dev/null 2>&1 ||
      on_exit+=("bash '$PWD/integration/docker.sh' stop")
    background docker start_docker
  fi
fi

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

# Azurite serves the Event Hubs adapter's checkpoint-store tests.
if [ -f "$svc/azurite.pid" ]; then
  step "Azurite (blob storage emulator)"
  await azurite
  line=$(cat "$svc/azurite.out")
  export "${line?}"
  echo "REDELIVER_AZURE_STORAGE=<Azurite on ${line##*BlobEndpoint=}>"
fi

# The root module and the modules of their own (each heavy dependency
# lives in one, so that a user pulls only what they use), except the
# integration module, the browser test, the examples and the re-drive's
# stores, which run below: one go vet and one go test over all their
# packages, so that test binaries run side by side across modules, not
# only within one. Each package's time is on its ok line.
mods=$(git ls-files 'go.mod' '*/go.mod' | xargs -n1 dirname | grep -v '^integration$\|^host/browser$\|^examples/\|^redrive/' | sort)
modpaths=$(for m in $mods; do awk '$1 == "module" { print $2; exit }' "$m/go.mod"; done)
pkgs=$(go list -f '{{.ImportPath}} {{.Module.Path}}' $(echo "$modpaths" | sed 's|$|/...|') |
  awk 'NR == FNR { keep[$1] = 1; next } keep[$2] { print $1 }' <(echo "$modpaths") - | sort -u)
step "go vet ($(echo "$mods" | wc -l) modules, $(echo "$pkgs" | wc -l) packages)"
go vet $pkgs

# The bench module holds benchmarks only (scripts/bench.sh runs them; go
# vet above builds them): no test of its would run. Four test binaries run
# at a time: the adapters' suites spend most of their time waiting on
# timers and the in-process broker (two left a core idle).
step "go test -race ($(echo "$mods" | wc -l) modules: $(echo $mods | tr ' ' ','))"
go test -race -count=1 -p 4 $(echo "$pkgs" | grep -v '^github.com/redeliver-go/redeliver/bench$')

step "benchmarks, once each (that they run; scripts/bench.sh measures)"
# -short leaves out what only repeats a leaf at a larger scale (10,000
# idle partitions).
go test -short -run '^$' -bench . -benchtime 1x ./checkpoint ./internal/retrystate ./stream github.com/redeliver-go/redeliver/adapters/...

# The status page in a real browser (Chromium installed in the background
# above).
if [ -f host/browser/go.mod ]; then
  step "module host/browser: the status page in headless Chromium"
  await chromium
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
  if [ -f "$svc/kafka.pid" ]; then
    step "real Kafka broker"
    await kafka
    line=$(cat "$svc/kafka.out")
    export "${line?}"
    # kafka.sh allows 1s session timeouts and runs KIP-848 groups with 3s.
    export REDELIVER_KAFKA_SESSION_TIMEOUT=3s REDELIVER_KAFKA_KIP848=1
    export REDELIVER_KAFKA_RESTART="bash $PWD/integration/kafka.sh restart"
    echo "$line"
  fi
  cluster=${REDELIVER_KAFKA_CLUSTER:-}
  [ "${REDELIVER_NO_CLUSTER:-}" != 1 ] || cluster=""
  if [ -f "$svc/cluster.pid" ]; then
    step "three-broker Kafka cluster"
    await cluster
    cluster=$(cat "$svc/cluster.out")
    cluster=${cluster#REDELIVER_KAFKA_CLUSTER=}
    echo "REDELIVER_KAFKA_CLUSTER=$cluster"
  fi
  if [ -f "$svc/docker.pid" ]; then
    step "Docker engine and images for the testcontainers providers"
    await docker
    while IFS= read -r line; do
      [ -n "$line" ] && export "${line?}"
    done <"$svc/docker.out"
    echo "${DOCKER_HOST:+DOCKER_HOST=$DOCKER_HOST }${REDELIVER_TC_SKIP:-images ready}"
  fi

  export REDELIVER_FIGURES=${REDELIVER_FIGURES:-$(mktemp)}
  : >"$REDELIVER_FIGURES"

  race=""
  [ "${REDELIVER_INTEGRATION_RACE:-}" = 1 ] && race=-race
  # Up to three go test processes side by side: the suites that need the
  # real broker (their "external" and "broker" cases, which must not
  # overlap: one restarts the broker), everything else (kfake, the
  # in-memory hubs with Azurite, the containers, PostgreSQL), and CI's
  # cluster step on the three-broker cluster. Most of their time is spent
  # waiting on rebalances and timers, not on the CPU. The cluster step
  # (REDELIVER_CLUSTER_CI=1, docs/RELIABILITY.md) runs each adapter
  # through one cluster fault, every scenario (a)-(f) once, in about 5
  # minutes; the whole TestCluster and TestClusterShare (about 31) are
  # run by hand. Only its process sees the cluster.
  step "integration module (kfake${REDELIVER_KAFKA_BROKERS:+ and $REDELIVER_KAFKA_BROKERS}${cluster:+ and the cluster step}, side by side${race:+, -race})"
  (cd integration && go vet ./... && go test $race -count=1 -run '^$' ./... >/dev/null)
  ilog=$(mktemp -d)
  cluster_pid=""
  if [ -n "$cluster" ]; then
    # A cluster this script started stops as soon as the step ends,
    # leaving the cores to the tests still running (the exit trap stops it
    # too, whatever happens).
    ( cd integration; t0=$SECONDS; s=0
      REDELIVER_KAFKA_CLUSTER=$cluster REDELIVER_CLUSTER_CI=1 go test $race -count=1 -timeout 20m -v \
        -run '^(TestCluster|TestClusterShare)$' . >"$ilog/cluster.log" 2>&1 || s=$?
      echo "$s $((SECONDS - t0))" >"$ilog/cluster.rc"
      [ ! -f "$svc/cluster.out" ] || bash kafka-cluster.sh stop >/dev/null 2>&1 || true ) &
    cluster_pid=$!
  fi
  on_broker='^(TestReliability|TestFranz|TestKafkago|TestSarama|TestConfluent|TestNetworkFaults|TestOutage|TestTransactionalTopics|TestCommittedPastEnd|TestLeaderEpochHandOver|TestShareGroupMemberKilled|TestShareBackoffPastTheLock|TestShareRecordsCountTheirOwnDeliveries|TestClientsHandOver|TestKeyed|TestReliabilityKeyed|TestRebalanceWaitsForAHeldHandler)$/^(external|broker)$'
  ( cd integration; t0=$SECONDS; s=0
    env -u REDELIVER_KAFKA_BROKERS -u REDELIVER_KAFKA_RESTART -u REDELIVER_KAFKA_CLUSTER go test $race -count=1 -timeout 30m -v ./... >"$ilog/local.log" 2>&1 || s=$?
    echo "$s $((SECONDS - t0))" >"$ilog/local.rc" ) &
  local_pid=$!
  broker_status=0
  if [ -n "${REDELIVER_KAFKA_BROKERS:-}" ]; then
    t0=$SECONDS
    (cd integration && env -u REDELIVER_KAFKA_CLUSTER go test $race -count=1 -timeout 30m -v -run "$on_broker" .) >"$ilog/broker.log" 2>&1 || broker_status=$?
    echo "-- the real broker's cases: exit $broker_status after $((SECONDS - t0)) s"
  fi
  wait "$local_pid" || true
  read -r local_status local_secs <"$ilog/local.rc"
  echo "-- everything else (kfake, in-memory hubs, containers): exit $local_status after $local_secs s"
  cluster_status=0
  if [ -n "$cluster_pid" ]; then
    wait "$cluster_pid" || true
    read -r cluster_status cluster_secs <"$ilog/cluster.rc"
    echo "-- the cluster's CI step (one scenario per adapter): exit $cluster_status after $cluster_secs s"
  fi
  [ -f "$ilog/broker.log" ] && { echo "---- the real broker's cases"; summarize "$ilog/broker.log" "$broker_status"; }
  echo "---- everything else"; summarize "$ilog/local.log" "$local_status"
  [ -f "$ilog/cluster.log" ] && { echo "---- the cluster's CI step"; cat "$ilog/cluster.log"; }
  # The logs above are long: what failed is repeated last, where a reader
  # of the log's tail sees it.
  if [ "$local_status" != 0 ] || [ "$broker_status" != 0 ] || [ "$cluster_status" != 0 ]; then
    echo "---- what failed (the logs above have each case's whole output)"
    for f in broker local cluster; do
      [ -f "$ilog/$f.log" ] && failures "$ilog/$f.log"
    done
  fi
  rm -rf "$ilog"
  [ "$local_status" = 0 ] && [ "$broker_status" = 0 ] && [ "$cluster_status" = 0 ] || exit 1

  step "reliability figures (docs/RELIABILITY.md explains them)"
  cat "$REDELIVER_FIGURES"
fi

# The re-drive's modules: both stores (the conformance suite, migrations,
# the database away at start and mid-run) and the end-to-end tests
# (through kfake and, when it runs, the real broker; several schedulers on
# one PostgreSQL; a scheduler killed mid-sweep), on the PostgreSQL server
# started in the background above.
if [ -f "$svc/postgres.pid" ]; then
  step "PostgreSQL server"
  await postgres
  line=$(cat "$svc/postgres.out")
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
