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

step "no Azure SDK in the root module's graph (a Kafka-only program pulls none)"
if go mod graph | grep -i 'github.com/Azure/azure-sdk-for-go'; then
  echo "the root module's graph has the Azure SDK"; exit 1
fi

# Azurite, the Azure Storage emulator (installed with npm where missing),
# for the Event Hubs checkpoint-store tests and reliability scenarios.
# REDELIVER_AZURE_STORAGE set beforehand names another storage account;
# REDELIVER_NO_AZURITE=1 skips those tests.
if [ -z "${REDELIVER_AZURE_STORAGE:-}" ] && [ "${REDELIVER_NO_AZURITE:-}" != 1 ]; then
  step "Azurite (blob storage emulator)"
  cleanups+=("bash integration/azurite.sh stop >/dev/null 2>&1")
  line=$(bash integration/azurite.sh start)
  export "${line?}"
  echo "REDELIVER_AZURE_STORAGE=<Azurite on ${line##*BlobEndpoint=}>"
fi

# Modules of their own (their dependencies stay out of the root module).
for mod in adapters/eventhubs; do
  step "module $mod: vet, test -race"
  (cd "$mod" && go vet ./... && go test -race -count=1 ./...)
done

step "examples"
for dir in examples/*/; do
  [ -f "$dir/main.go" ] || continue
  if [ -f "$dir/go.mod" ]; then
    # A module of its own: run it in its directory, once as it runs with
    # no setup and once with the environment the script set up.
    echo "-- (cd $dir && go vet ./... && go run .)"
    (cd "$dir" && go vet ./... && env -u REDELIVER_AZURE_STORAGE timeout 120 go run .) >/tmp/redeliver-example.out 2>&1 || { cat /tmp/redeliver-example.out; exit 1; }
    tail -n 1 /tmp/redeliver-example.out
    if [ -n "${REDELIVER_AZURE_STORAGE:-}" ]; then
      (cd "$dir" && timeout 120 go run .) >/tmp/redeliver-example.out 2>&1 || { cat /tmp/redeliver-example.out; exit 1; }
      tail -n 1 /tmp/redeliver-example.out
    fi
    continue
  fi
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
  export REDELIVER_FIGURES=${REDELIVER_FIGURES:-$(mktemp)}
  : >"$REDELIVER_FIGURES"

  step "integration module (kfake${REDELIVER_KAFKA_BROKERS:+ and $REDELIVER_KAFKA_BROKERS})"
  (cd integration && go vet ./... && go test -race -count=1 -timeout 30m ./...)

  step "reliability figures (docs/RELIABILITY.md explains them)"
  cat "$REDELIVER_FIGURES"
fi
