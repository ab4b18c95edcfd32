#!/usr/bin/env bash
# Runs the chaos run of docs/RELIABILITY.md in one command: starts a
# three-broker Kafka cluster (integration/kafka-cluster.sh) and a PostgreSQL
# server (integration/postgres.sh) in a run directory of its own, runs
# TestClusterChaos for DURATION, prints the summary and the per-member
# figures, and stops everything it started (also on Ctrl-C or a failure).
# It exits non-zero when a check failed.
#
#   scripts/chaos.sh DURATION        e.g. scripts/chaos.sh 30m
#
# DURATION is how long faults are injected (a whole number of s, m or h);
# the start, the members' warm-up and the final checks add a few minutes.
#
# Settings (environment):
#   REDELIVER_CHAOS_DIR      run directory: the cluster's and PostgreSQL's
#                            data, the test's log, the figures
#                            (default /tmp/redeliver-chaos); kept after the
#                            run but for the data, which stop removes
#   REDELIVER_CHAOS_SEED     repeat a run's choice of faults
#   REDELIVER_CHAOS_KINDS    only these kinds of fault, e.g. burst,sigkill,postgres
#                            (kill pause cut restart move burst sigkill postgres)
#   REDELIVER_CHAOS_MEMBERS  share: the share consumer alone, under the
#                            broker faults (PostgreSQL is not started)
#   REDELIVER_KAFKA_CLUSTER_PORT, REDELIVER_POSTGRES_PORT
#                            ports, when the defaults are taken (another
#                            cluster on the machine)
#
# When a member does not move on within 2 minutes of a fault, every
# goroutine's stack of the test process goes to $REDELIVER_CHAOS_DIR/stalls,
# where the share consumers' client logs are too; the brokers' and
# PostgreSQL's logs are copied to $REDELIVER_CHAOS_DIR/logs at the end.
set -euo pipefail
cd "$(dirname "$0")/.."
root=$(pwd)

say() { printf 'chaos.sh: %s\n' "$*" >&2; }
die() { say "$*"; exit 2; }

[ $# -eq 1 ] || die "usage: scripts/chaos.sh DURATION (e.g. 30m)"
d=$1
[[ $d =~ ^([0-9]+)(s|m|h)$ ]] || die "DURATION $d: want a whole number of s, m or h, such as 30m"
n=${BASH_REMATCH[1]}
case ${BASH_REMATCH[2]} in
  s) secs=$n ;;
  m) secs=$((n * 60)) ;;
  h) secs=$((n * 3600)) ;;
esac
[ "$secs" -gt 0 ] || die "DURATION $d: want more than 0"
# The members join within 5 minutes; restoring the cluster and the checks
# at the end take a few more.
timeout=$((secs + 30 * 60))s

run=${REDELIVER_CHAOS_DIR:-/tmp/redeliver-chaos}
mkdir -p "$run"
export REDELIVER_KAFKA_CLUSTER_DIR=$run/kafka
export REDELIVER_POSTGRES_DIR=$run/postgres
unset REDELIVER_POSTGRES_URL REDELIVER_KAFKA_CLUSTER
log=$run/test.log
figures=$run/figures.txt
: >"$figures"

started_kafka="" started_pg=""
cleanup() {
  local rc=$?
  trap - EXIT INT TERM
  if [ -n "$started_kafka" ]; then
    # The brokers' logs are removed with the data: keep them for a look
    # at what happened around a stall.
    mkdir -p "$run/logs"
    for i in 1 2 3; do
      cp "$REDELIVER_KAFKA_CLUSTER_DIR/node$i/kafka.log" "$run/logs/broker$i.log" 2>/dev/null || true
    done
    cp "$REDELIVER_KAFKA_CLUSTER_DIR/proxy.log" "$run/logs/proxy.log" 2>/dev/null || true
    say "stopping the cluster"
    integration/kafka-cluster.sh stop >&2 || true
  fi
  if [ -n "$started_pg" ]; then
    cp "$REDELIVER_POSTGRES_DIR/postgres.log" "$run/logs/postgres.log" 2>/dev/null || true
    say "stopping PostgreSQL"
    integration/postgres.sh stop >&2 || true
  fi
  say "took $((SECONDS)) s in all; load average $(cut -d' ' -f1-3 /proc/loadavg)"
  exit "$rc"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

say "load average at the start: $(cut -d' ' -f1-3 /proc/loadavg)"
t0=$SECONDS
started_kafka=1
b=$(integration/kafka-cluster.sh start) || die "the cluster did not start"
export "$b"
say "cluster ready in $((SECONDS - t0)) s"
t1=$SECONDS
if [ "${REDELIVER_CHAOS_MEMBERS:-}" != share ]; then
  started_pg=1
  u=$(integration/postgres.sh start) || die "PostgreSQL did not start"
  export "$u"
  say "PostgreSQL ready in $((SECONDS - t1)) s ($u)"
fi

say "running TestClusterChaos for $d (log: $log)"
rc=0
(
  cd integration
  REDELIVER_CHAOS=$d REDELIVER_FIGURES=$figures REDELIVER_CHAOS_DUMPS=$run/stalls \
    go test -count=1 -run '^TestClusterChaos$' -parallel 16 -timeout "$timeout" -v .
) >"$log" 2>&1 || rc=$?

echo "== figures (also in $figures)"
cat "$figures"
if [ "$rc" -ne 0 ]; then
  echo "== failures (the checks' messages are in $log, above each --- FAIL)"
  grep -E -e '--- FAIL' -e '^panic:' "$log" | head -50 || true
  say "FAILED (go test exit $rc): see $log"
  exit 1
fi
say "passed"
