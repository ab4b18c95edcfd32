#!/usr/bin/env bash
# Checks that a program using one client pulls only that client: it writes
# three small programs, each a module of its own outside this workspace
# (the way a user's program depends on redeliver), and reads their module
# graphs (go mod graph) for modules they must not have:
#
#   core         stream + hostconfig only: no module but hujson (and its own)
#   kafkago      the kafka-go adapter: no franz-go, no Azure SDK, no pgx, no OTel
#   franz        the franz-go adapter: no kafka-go, no Azure SDK, no pgx, no OTel
#   host         the functions host alone: no Kafka client, no Azure SDK, no pgx, no OTel
#   kafkagohost  a host on kafka-go (host + kafkagohost): no franz-go, ...
#   franzhost    a host on franz-go (host + franzhost): no kafka-go, ...
#
# It exits 1 and prints the offending edges when a graph has one.
set -euo pipefail
cd "$(dirname "$0")/.."
repo=$PWD
work=$(mktemp -d /tmp/redeliver-modgraph.XXXXXX)
trap 'rm -rf "$work"' EXIT

# program <name> <go imports...>: a main package importing them, with the
# replace directives that point redeliver's modules at this checkout.
program() {
  local name=$1 dir=$work/$1 imp
  shift
  mkdir -p "$dir"
  {
    echo "module example.com/$name"
    echo
    echo "go 1.26.0"
    echo
    for m in "" /adapters/franz /adapters/franz/franzhost /adapters/kafkago /adapters/kafkago/kafkagohost /adapters/internal/kafkatest /host; do
      echo "replace github.com/redeliver-go/redeliver$m => $repo$m"
    done
  } >"$dir/go.mod"
  {
    echo "package main"
    echo
    echo "import ("
    for imp in "$@"; do echo "	_ \"$imp\""; done
    echo ")"
    echo
    echo "func main() {}"
  } >"$dir/main.go"
  (cd "$dir" && GOWORK=off GOFLAGS=-mod=mod go mod tidy >/dev/null 2>"$dir/tidy.log") ||
    { cat "$dir/tidy.log"; echo "modgraph.sh: go mod tidy failed for the $name program"; exit 1; }
}

# check <name> <forbidden regexp>: the program's graph has no module
# matching it.
check() {
  local name=$1 forbidden=$2 bad
  bad=$(cd "$work/$name" && GOWORK=off go mod graph | grep -E -- "$forbidden" || true)
  if [ -n "$bad" ]; then
    echo "modgraph.sh: the $name program's module graph pulls what it must not:"
    echo "$bad" | head -20
    exit 1
  fi
  echo "modgraph.sh: $name: $(cd "$work/$name" && GOWORK=off go mod graph | wc -l) edges, none matching $forbidden"
}

r=github.com/redeliver-go/redeliver
program core $r/stream $r/hostconfig $r/checkpoint $r/stream/streamtest $r/redrive
program kafkago $r/adapters/kafkago $r/stream $r/hostconfig
program franz $r/adapters/franz $r/adapters/franz/share $r/stream $r/hostconfig
program host $r/host $r/hostconfig
program kafkagohost $r/host $r/adapters/kafkago/kafkagohost
program franzhost $r/host $r/adapters/franz/franzhost

# The core's graph: redeliver, hujson and what hujson requires (go-cmp for
# its tests), nothing else.
check core ' (github.com/(twmb|segmentio|Azure|jackc)|go.opentelemetry.io|modernc.org)'
others=$(cd "$work/core" && GOWORK=off go mod graph | tr ' ' '\n' | sed 's/@.*//' | sort -u |
  grep -v -E '^(example.com/core|github.com/redeliver-go/redeliver|github.com/tailscale/hujson|github.com/google/go-cmp|go|toolchain)$' || true)
if [ -n "$others" ]; then
  echo "modgraph.sh: the core program's graph has modules beyond hujson:"; echo "$others"; exit 1
fi
check kafkago ' (github.com/twmb/franz-go|github.com/Azure/|github.com/jackc/|go.opentelemetry.io|modernc.org)'
check franz ' (github.com/segmentio/kafka-go|github.com/Azure/|github.com/jackc/|go.opentelemetry.io|modernc.org)'
check host ' (github.com/(twmb|segmentio|Azure|jackc)|go.opentelemetry.io|modernc.org)'
check kafkagohost ' (github.com/twmb/franz-go|github.com/Azure/|github.com/jackc/|go.opentelemetry.io|modernc.org)'
check franzhost ' (github.com/segmentio/kafka-go|github.com/Azure/|github.com/jackc/|go.opentelemetry.io|modernc.org)'
