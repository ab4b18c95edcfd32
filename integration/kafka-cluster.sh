#!/usr/bin/env bash
# Runs a three-broker Apache Kafka cluster for the integration tests: three
# KRaft nodes on 127.0.0.1, each broker and controller (a controller quorum
# of three), from the same jars as integration/kafka.sh (whose functions it
# sources: the jar fetch, the storage template, the JVM flags). Each broker
# advertises its client listener through a toxiproxy proxy of its own, so a
# test can cut one broker off from the clients while the brokers still talk
# to each other on their internal listener. See integration/KAFKA.md.
#
#   integration/kafka-cluster.sh start      start (or reuse) the cluster; prints
#                                           REDELIVER_KAFKA_CLUSTER=<proxy1>,<proxy2>,<proxy3>
#   integration/kafka-cluster.sh stop       stop the brokers and the proxies, remove the data
#   integration/kafka-cluster.sh status     print the same line, exit 0 if the cluster is ready
#   integration/kafka-cluster.sh kill N     SIGKILL broker N (it stays down until restart N)
#   integration/kafka-cluster.sh pause N    SIGSTOP broker N
#   integration/kafka-cluster.sh resume N   SIGCONT broker N
#   integration/kafka-cluster.sh restart N [kill]
#                                           stop broker N (SIGTERM, SIGKILL with "kill"; nothing if
#                                           it is down), start it on the same data, wait until every
#                                           partition is in sync again
#   integration/kafka-cluster.sh cut N      cut broker N off from the clients (its proxy holds every byte)
#   integration/kafka-cluster.sh heal N     undo cut N
#   integration/kafka-cluster.sh leader TOPIC PARTITION
#                                           print the node id of the partition's leader
#   integration/kafka-cluster.sh move TOPIC PARTITION
#                                           move the partition's leadership to another in-sync replica
#                                           (reorder its replicas, elect the preferred one); prints "OLD NEW"
#   integration/kafka-cluster.sh coordinator GROUP
#                                           print the node id of the group's coordinator
#   integration/kafka-cluster.sh pid N      print broker N's pid
#   integration/kafka-cluster.sh logs N     print broker N's log
#   integration/kafka-cluster.sh env        print the cluster's addresses as export lines
#
# Settings (environment), besides kafka.sh's REDELIVER_KAFKA_VERSION and
# REDELIVER_KAFKA_CACHE:
#   REDELIVER_KAFKA_CLUSTER_DIR       run directory (default /tmp/redeliver-kafka-cluster)
#   REDELIVER_KAFKA_CLUSTER_PORT      base port (default 29300): node N listens on base+N
#                                     (internal), base+10+N (external), base+20+N (controller);
#                                     its proxy on base+30+N; the proxy API on base+40.
#                                     Keep it below the ephemeral port range
#                                     (/proc/sys/net/ipv4/ip_local_port_range, 32768 up
#                                     here): there, a client connection can take a killed
#                                     broker's port, and its restart cannot bind it
#   REDELIVER_KAFKA_CLUSTER_HEAP      JVM heap per broker (default 384m)
#   REDELIVER_KAFKA_CLUSTER_JVM_OPTS  extra JVM flags per broker (default: one GC thread each)
#   REDELIVER_KAFKA_TIMEOUT           seconds to wait for readiness (default 240)
set -euo pipefail

HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
CLUSTER_RUN=${REDELIVER_KAFKA_CLUSTER_DIR:-/tmp/redeliver-kafka-cluster}
ME=kafka-cluster.sh
REDELIVER_KAFKA_DIR=$CLUSTER_RUN
REDELIVER_KAFKA_HEAP=${REDELIVER_KAFKA_CLUSTER_HEAP:-384m}
REDELIVER_KAFKA_TIMEOUT=${REDELIVER_KAFKA_TIMEOUT:-240}
REDELIVER_KAFKA_JVM_OPTS=${REDELIVER_KAFKA_CLUSTER_JVM_OPTS:--XX:ParallelGCThreads=1 -XX:ConcGCThreads=1}
# shellcheck source=integration/kafka.sh
. "$HERE/kafka.sh"

NODES=3
BASE=${REDELIVER_KAFKA_CLUSTER_PORT:-29300}
API=127.0.0.1:$((BASE + 40))
ENVFILE=$RUN/cluster.env

iport() { echo $((BASE + $1)); }      # INTERNAL: between brokers, and the tests' admin client
eport() { echo $((BASE + 10 + $1)); } # EXTERNAL: behind the proxy
cport() { echo $((BASE + 20 + $1)); } # CONTROLLER
pport() { echo $((BASE + 30 + $1)); } # the proxy the broker advertises

node_dir() { echo "$RUN/node$1"; }
node_pidfile() { echo "$RUN/node$1/kafka.pid"; }
node_props() { echo "$RUN/node$1/server.properties"; }

addrs() { # addrs <port function>: the nodes' addresses, comma-separated
  local i out=
  for ((i = 1; i <= NODES; i++)); do out+=${out:+,}127.0.0.1:$("$1" "$i"); done
  echo "$out"
}

check_node() {
  case ${1:-} in [1-9]) ((${1} <= NODES)) && return 0 ;; esac
  die "no broker '${1:-}': give a node id from 1 to $NODES"
}

# node_pid N prints broker N's pid if it exists (running or stopped).
node_pid() {
  local f pid
  f=$(node_pidfile "$1")
  [ -f "$f" ] || return 1
  pid=$(cat "$f" 2>/dev/null) || return 1
  [ -n "$pid" ] && kill -0 "$pid" 2>/dev/null || return 1
  tr '\0' ' ' <"/proc/$pid/cmdline" 2>/dev/null | grep -qF -- "$(node_props "$1")" || return 1
  printf '%s\n' "$pid"
}

proxy_pid() {
  [ -f "$RUN/proxy.pid" ] || return 1
  local pid
  pid=$(cat "$RUN/proxy.pid" 2>/dev/null) || return 1
  [ -n "$pid" ] && kill -0 "$pid" 2>/dev/null || return 1
  tr '\0' ' ' <"/proc/$pid/cmdline" 2>/dev/null | grep -qF -- "kafkacluster" || return 1
  printf '%s\n' "$pid"
}

# build_helper compiles integration/cmd/kafkacluster once per version of
# its source and of integration/kcluster, into the jar cache.
build_helper() {
  command -v go >/dev/null || die "go is needed for the cluster's helper (integration/cmd/kafkacluster)"
  local sum
  sum=$(cat "$HERE/cmd/kafkacluster/main.go" "$HERE/kcluster/"*.go "$HERE/go.sum" | sha256sum | cut -c1-12)
  HELPER=$CACHE/bin/kafkacluster-$sum
  if [ ! -x "$HELPER" ]; then
    mkdir -p "$CACHE/bin"
    (cd "$HERE" && go build -o "$HELPER.tmp.$$" ./cmd/kafkacluster) >"$RUN/helper-build.log" 2>&1 || {
      cat "$RUN/helper-build.log" >&2
      die "could not build integration/cmd/kafkacluster"
    }
    mv -f "$HELPER.tmp.$$" "$HELPER"
  fi
}

# write_node_config N writes broker N's server.properties.
write_node_config() {
  local i=$1 voters= j
  for ((j = 1; j <= NODES; j++)); do voters+=${voters:+,}$j@127.0.0.1:$(cport "$j"); done
  {
    cat <<EOF
# Generated by integration/kafka-cluster.sh (Kafka $VERSION): node $i of $NODES, broker and controller.
process.roles=broker,controller
node.id=$i
controller.quorum.voters=$voters
listeners=INTERNAL://127.0.0.1:$(iport "$i"),EXTERNAL://127.0.0.1:$(eport "$i"),CONTROLLER://127.0.0.1:$(cport "$i")
advertised.listeners=INTERNAL://127.0.0.1:$(iport "$i"),EXTERNAL://127.0.0.1:$(pport "$i")
controller.listener.names=CONTROLLER
inter.broker.listener.name=INTERNAL
listener.security.protocol.map=CONTROLLER:PLAINTEXT,INTERNAL:PLAINTEXT,EXTERNAL:PLAINTEXT
log.dirs=$(node_dir "$i")/data

# Three nodes: every topic, internal ones too, replicated three times, a
# write acknowledged by all (acks=all) needs two replicas in sync.
num.partitions=3
default.replication.factor=3
min.insync.replicas=2
offsets.topic.replication.factor=3
offsets.topic.num.partitions=6
transaction.state.log.replication.factor=3
transaction.state.log.min.isr=2
transaction.state.log.num.partitions=3
share.coordinator.state.topic.replication.factor=3
share.coordinator.state.topic.min.isr=2
share.coordinator.state.topic.num.partitions=3
unclean.leader.election.enable=false
# A follower that stops fetching leaves the in-sync set after 10 s (default
# 30 s), so writes with acks=all go on sooner while a broker is paused.
replica.lag.time.max.ms=10000

EOF
    shared_config
  } >"$(node_props "$i")"
}

# launch_node N starts broker N on its configuration and data.
launch_node() {
  local i=$1 jvm d
  d=$(node_dir "$i")
  jvm_args
  setsid "$JAVA" "${jvm[@]}" -cp "$CACHE/libs/*" kafka.Kafka "$(node_props "$i")" >>"$d/kafka.log" 2>&1 </dev/null 9>&- &
  echo "$!" >"$(node_pidfile "$i")"
}

launch_proxy() {
  local i specs=()
  for ((i = 1; i <= NODES; i++)); do
    specs+=("broker$i=127.0.0.1:$(pport "$i")=127.0.0.1:$(eport "$i")")
  done
  setsid "$HELPER" proxy -api "$API" "${specs[@]}" >>"$RUN/proxy.log" 2>&1 </dev/null 9>&- &
  echo "$!" >"$RUN/proxy.pid"
}

cluster_fail() {
  say "$1"
  local i
  for ((i = 1; i <= NODES; i++)); do
    if [ -f "$(node_dir "$i")/kafka.log" ]; then
      say "last lines of node $i's log:"
      tail -n 30 "$(node_dir "$i")/kafka.log" >&2
    fi
  done
  stop_all >/dev/null 2>&1 || true
  exit 1
}

# ready: every broker answers through its proxy, the group coordinator is
# found (which creates __consumer_offsets) and every partition is in sync.
ready_cluster() {
  "$HELPER" ready -brokers "$(addrs pport)" -n "$NODES" -timeout 5s 2>>"$RUN/ready.log"
}

wait_cluster() { # what
  local t0=$SECONDS i
  while ((SECONDS - t0 < TIMEOUT)); do
    for ((i = 1; i <= NODES; i++)); do
      [ -f "$RUN/node$i/.down" ] && continue
      node_pid "$i" >/dev/null || cluster_fail "broker $i exited during $1"
    done
    if ready_cluster; then return 0; fi
    sleep 1
  done
  say "last readiness error: $(tail -n 1 "$RUN/ready.log" 2>/dev/null)"
  cluster_fail "the cluster was not ready within $TIMEOUT s ($1)"
}

print_cluster() { echo "REDELIVER_KAFKA_CLUSTER=$(addrs pport)"; }

start() {
  mkdir -p "$RUN"
  exec 9>"$RUN/.lock"
  flock 9
  build_helper
  if node_pid 1 >/dev/null && node_pid 2 >/dev/null && node_pid 3 >/dev/null && proxy_pid >/dev/null && ready_cluster; then
    say "reusing the cluster already running"
    print_cluster
    return 0
  fi
  stop_all 2>/dev/null
  command -v "$JAVA" >/dev/null || die "java not found (Kafka 4.x needs Java 17+)"
  local lo _
  if read -r lo _ </proc/sys/net/ipv4/ip_local_port_range 2>/dev/null && ((BASE + 40 >= lo)); then
    say "warning: ports $((BASE + 1))-$((BASE + 40)) reach the ephemeral range (from $lo): a broker restarted after a kill may find its port taken by a client connection; set REDELIVER_KAFKA_CLUSTER_PORT below $((lo - 40))"
  fi
  fetch
  local t0=$SECONDS i p
  for p in $(seq $((BASE + 1)) $((BASE + 3))) $(seq $((BASE + 11)) $((BASE + 13))) \
    $(seq $((BASE + 21)) $((BASE + 23))) $(seq $((BASE + 31)) $((BASE + 33))) $((BASE + 40)); do
    port_in_use "$p" && die "port $p is in use (set REDELIVER_KAFKA_CLUSTER_PORT)"
  done
  # The storage template is formatted for node 1; each node copies it and
  # takes its own node id and directory id (the cluster id is shared).
  PORT=$((BASE + 50)) CPORT=$((BASE + 51))
  write_log_config
  ensure_template
  rm -f "$RUN/ready.log"
  : >"$RUN/proxy.log"
  launch_proxy
  for ((i = 1; i <= NODES; i++)); do
    rm -rf "$(node_dir "$i")"
    mkdir -p "$(node_dir "$i")"
    write_node_config "$i"
    cp -a "$TEMPLATE" "$(node_dir "$i")/data"
    sed -i -e "s/^node\.id=.*/node.id=$i/" -e "s/^directory\.id=.*/directory.id=$(random_cluster_id)/" \
      "$(node_dir "$i")/data/meta.properties"
    launch_node "$i"
  done
  say "started Kafka $VERSION: brokers $(addrs iport) (internal), $(addrs pport) (through the proxies), controllers $(addrs cport); logs in $RUN/node*/kafka.log"
  wait_cluster "startup"
  {
    echo "$(print_cluster)"
    echo "REDELIVER_KAFKA_CLUSTER_DIRECT=$(addrs iport)"
    echo "REDELIVER_KAFKA_CLUSTER_PROXY_API=$API"
    echo "REDELIVER_KAFKA_CLUSTER_DIR=$RUN"
  } >"$ENVFILE"
  say "ready in $((SECONDS - t0)) s"
  print_cluster
}

# stop_node N [signal]: stops broker N and waits until it is gone.
stop_node() {
  local pid sig=${2:-TERM}
  pid=$(node_pid "$1") || return 0
  kill -CONT "$pid" 2>/dev/null || true
  kill -"$sig" "$pid" 2>/dev/null || true
  if ! wait_gone "$pid" 30; then
    say "broker $1 (pid $pid) still up after 30 s: killing it"
    kill -KILL "$pid" 2>/dev/null || true
    wait_gone "$pid" 10 || die "could not stop broker $1 (pid $pid)"
  fi
}

stop_all() {
  local i pids=() pid
  # All at once: a broker stopping alone waits for the others to take its
  # partitions; stopped together they only flush.
  for ((i = 1; i <= NODES; i++)); do
    if pid=$(node_pid "$i"); then
      kill -CONT "$pid" 2>/dev/null || true
      kill -TERM "$pid" 2>/dev/null || true
      pids+=("$i:$pid")
    fi
  done
  for p in "${pids[@]}"; do
    if ! wait_gone "${p#*:}" 30; then
      say "broker ${p%%:*} still up after 30 s: killing it"
      kill -KILL "${p#*:}" 2>/dev/null || true
      wait_gone "${p#*:}" 10 || true
    fi
  done
  if pid=$(proxy_pid); then
    kill -TERM "$pid" 2>/dev/null || true
    wait_gone "$pid" 10 || kill -KILL "$pid" 2>/dev/null || true
  fi
  rm -f "$RUN/proxy.pid" "$ENVFILE"
  for ((i = 1; i <= NODES; i++)); do rm -rf "$(node_dir "$i")/data" "$(node_dir "$i")/kafka.pid" "$(node_dir "$i")/.down"; done
  say "stopped the cluster"
}

stop() {
  mkdir -p "$RUN"
  exec 9>"$RUN/.lock"
  flock 9
  stop_all
}

# proxy_reachable N up|down opens or closes broker N's proxy: while the
# broker is down its proxy is closed, so that clients find the connection
# refused, as they would without a proxy (an open proxy would accept and
# reset it, which some clients take for a live broker).
proxy_reachable() {
  build_helper
  "$HELPER" "$2" -api "$API" "$1" || say "could not set broker $1's proxy $2"
}

signal_node() { # N signal what
  check_node "$1"
  local pid
  pid=$(node_pid "$1") || die "broker $1 is not running"
  kill -"$2" "$pid"
  case $2 in
    KILL)
      touch "$RUN/node$1/.down"
      wait_gone "$pid" 10 || die "broker $1 (pid $pid) survived SIGKILL"
      proxy_reachable "$1" down
      ;;
  esac
  say "$3 broker $1 (pid $pid)"
}

restart_node() { # N [kill]
  check_node "$1"
  mkdir -p "$RUN"
  exec 9>"$RUN/.lock"
  flock 9
  build_helper
  local t0=$SECONDS sig=TERM
  [ "${2:-}" = kill ] && sig=KILL
  proxy_reachable "$1" down
  stop_node "$1" "$sig"
  write_log_config
  launch_node "$1"
  rm -f "$RUN/node$1/.down"
  # The proxy opens once the broker listens: before, it would accept the
  # clients' connections and reset them.
  local pid
  pid=$(cat "$(node_pidfile "$1")")
  while ! port_in_use "$(eport "$1")"; do
    kill -0 "$pid" 2>/dev/null || die "broker $1 exited during its restart (kafka-cluster.sh logs $1)"
    ((SECONDS - t0 < TIMEOUT)) || die "broker $1 did not listen within $TIMEOUT s (kafka-cluster.sh logs $1)"
    sleep 0.2
  done
  proxy_reachable "$1" up
  wait_cluster "the restart of broker $1"
  say "restarted broker $1 (pid $(node_pid "$1")), all partitions in sync, in $((SECONDS - t0)) s"
}

status() {
  local i ok=0 pid
  for ((i = 1; i <= NODES; i++)); do
    if pid=$(node_pid "$i"); then
      say "broker $i: pid $pid, $(awk '{print $3}' "/proc/$pid/stat" | sed 's/T/stopped (paused)/; s/[SRD]/running/')"
    else
      say "broker $i: down"
      ok=1
    fi
  done
  proxy_pid >/dev/null || { say "proxies: down"; return 1; }
  build_helper
  if ready_cluster; then print_cluster; else say "not ready: $(tail -n 1 "$RUN/ready.log" 2>/dev/null)"; return 1; fi
  return "$ok"
}

case ${1:-} in
  start) start ;;
  stop) stop ;;
  status) status ;;
  kill) signal_node "${2:-}" KILL killed ;;
  pause) signal_node "${2:-}" STOP paused ;;
  resume) signal_node "${2:-}" CONT resumed ;;
  restart) restart_node "${2:-}" "${3:-}" ;;
  cut | heal)
    check_node "${2:-}"
    build_helper
    "$HELPER" "$1" -api "$API" "$2"
    case $1 in cut) say "cut broker $2 off from the clients" ;; heal) say "broker $2 reaches the clients again" ;; esac
    ;;
  leader)
    [ $# = 3 ] || die "usage: leader TOPIC PARTITION"
    build_helper
    "$HELPER" leader -brokers "$(addrs iport)" "$2" "$3"
    ;;
  move)
    [ $# = 3 ] || die "usage: move TOPIC PARTITION"
    build_helper
    "$HELPER" move -brokers "$(addrs iport)" "$2" "$3"
    ;;
  coordinator)
    [ $# = 2 ] || die "usage: coordinator GROUP"
    build_helper
    "$HELPER" coordinator -brokers "$(addrs iport)" "$2"
    ;;
  pid) check_node "${2:-}"; node_pid "$2" ;;
  logs) check_node "${2:-}"; cat "$(node_dir "$2")/kafka.log" ;;
  env) [ -f "$ENVFILE" ] && sed 's/^/export /' "$ENVFILE" ;;
  *)
    sed -n '2,/^set -euo/p' "$0" | sed '$d; s/^# \{0,1\}//' >&2
    exit 2
    ;;
esac
