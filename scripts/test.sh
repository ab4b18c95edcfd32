#!/usr/bin/env bash
# Runs the whole test suite: formatting, vet, unit tests with the race
# detector, the examples, and the integration module. It installs what it
# needs (Go modules) by itself.
set -euo pipefail
cd "$(dirname "$0")/.."

step() { printf '\n== %s\n' "$*"; }

# Services started below are stopped on exit, whatever happens.
cleanups=()
cleanup() { for c in "${cleanups[@]}"; do eval "$c" || true; done; }
trap cleanup EXIT

step "gofmt"
unformatted=$(gofmt -l $(git ls-files '*.go' 2>/dev/null || find . -name '*.go'))
if [ -n "$unformatted" ]; then
  echo "gofmt would change:"; echo "$unformatted"; exit 1
fi

step "go vet"
go vet ./...

step "go test -race (root module)"
go test -race -count=1 ./...

step "examples"
for dir in examples/*/; do
  [ -f "$dir/main.go" ] || continue
  echo "-- go run ./$dir"
  timeout 120 go run "./$dir" >/tmp/redeliver-example.out 2>&1 || { cat /tmp/redeliver-example.out; exit 1; }
  tail -n 1 /tmp/redeliver-example.out
done

if [ -f integration/go.mod ]; then
  # A real Apache Kafka broker (KRaft, from Maven Central jars; needs Java 17
  # and Maven) for the external provider of the conformance and reliability
  # suites. REDELIVER_KAFKA_BROKERS set beforehand names another broker
  # instead; REDELIVER_NO_BROKER=1 runs on kfake only.
  if [ -z "${REDELIVER_KAFKA_BROKERS:-}" ] && [ "${REDELIVER_NO_BROKER:-}" != 1 ]; then
    step "real Kafka broker"
    cleanups+=("bash integration/kafka.sh stop >/dev/null 2>&1")
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
      bash integration/docker.sh status >/dev/null 2>&1 || cleanups+=("bash integration/docker.sh stop >/dev/null 2>&1")
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
