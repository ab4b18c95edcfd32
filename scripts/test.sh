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

step "examples"
for dir in examples/*/; do
  [ -f "$dir/main.go" ] || continue
  echo "-- go run ./$dir"
  timeout 120 go run "./$dir" >/tmp/redeliver-example.out 2>&1 || { cat /tmp/redeliver-example.out; exit 1; }
  tail -n 1 /tmp/redeliver-example.out
done

if [ -f integration/go.mod ]; then
  step "integration module"
  (cd integration && go vet ./... && go test -race -count=1 -timeout 20m ./...)
fi
