#!/usr/bin/env bash
# Runs the whole test suite: formatting, vet, unit tests with the race
# detector, the examples, and the integration module. It installs what it
# needs (Go modules) by itself.
set -euo pipefail
cd "$(dirname "$0")/.."

step() { printf '\n== %s\n' "$*"; }

step "gofmt"
unformatted=$(gofmt -l $(git ls-files '*.go' 2>/dev/null || find . -name '*.go'))
if [ -n "$unformatted" ]; then
  echo "gofmt would change:"; echo "$unformatted"; exit 1
fi

step "go vet"
go vet ./...

step "go test -race (root module)"
go test -race -count=1 ./...

# The modules of their own (each heavy dependency lives in one, so that a
# user pulls only what they use), except the integration module below.
for mod in $(git ls-files '*/go.mod' | xargs -n1 dirname | grep -v '^integration$' | sort); do
  step "module $mod: go vet, go test -race"
  (cd "$mod" && go vet ./... && go test -race -count=1 ./...)
done

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
    trap 'bash integration/kafka.sh stop >/dev/null 2>&1 || true' EXIT
    line=$(bash integration/kafka.sh start)
    export "${line?}"
    # kafka.sh allows 1s session timeouts and runs KIP-848 groups with 3s.
    export REDELIVER_KAFKA_SESSION_TIMEOUT=3s REDELIVER_KAFKA_KIP848=1
    export REDELIVER_KAFKA_RESTART="bash $PWD/integration/kafka.sh restart"
    echo "$line"
  fi
  export REDELIVER_FIGURES=${REDELIVER_FIGURES:-$(mktemp)}
  : >"$REDELIVER_FIGURES"

  step "integration module (kfake${REDELIVER_KAFKA_BROKERS:+ and $REDELIVER_KAFKA_BROKERS})"
  (cd integration && go vet ./... && go test -race -count=1 -timeout 30m ./...)

  step "reliability figures (docs/RELIABILITY.md explains them)"
  cat "$REDELIVER_FIGURES"
fi
