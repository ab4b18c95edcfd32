#!/usr/bin/env bash
# Runs a private Docker engine for the testcontainers providers: a dockerd
# of its own (data root, exec root, socket and pid file in directories of
# its own), with no bridge network and no iptables rules, so that no bridge
# and no private-range address is ever created; containers run with host
# networking on 127.0.0.1. It never touches a Docker daemon it did not
# start. Installs Debian's docker.io where dockerd is missing. Needs root.
# See integration/README.md.
#
#   integration/docker.sh start    start (or reuse) the engine; prints
#                                  DOCKER_HOST=unix://<run dir>/docker.sock
#   integration/docker.sh stop     remove the engine's containers and stop it
#                                  (only the dockerd whose pid file is ours)
#   integration/docker.sh status   print the same line and exit 0 if it
#                                  answers, exit 1 otherwise
#   integration/docker.sh env      print "export DOCKER_HOST=..." if it runs
#   integration/docker.sh logs     print dockerd's log
#
# Typical use:  h=$(integration/docker.sh start) && export "$h"; ...; integration/docker.sh stop
#
# Settings (environment):
#   REDELIVER_DOCKER_DIR      run directory: socket, pid file, exec root, log
#                             (default /tmp/redeliver-docker; keep it short:
#                             containerd's sockets live under it)
#   REDELIVER_DOCKER_DATA     data root: images and containers, kept between
#                             runs so that built images are reused (default
#                             ${XDG_CACHE_HOME:-$HOME/.cache}/redeliver/docker)
#   REDELIVER_DOCKER_TIMEOUT  seconds to wait for the engine to answer (default 60)
#   REDELIVER_DOCKER_INSTALL  0: do not install docker.io when dockerd is missing
#
# stdout carries only the DOCKER_HOST line; messages go to stderr.
set -euo pipefail

RUN=${REDELIVER_DOCKER_DIR:-/tmp/redeliver-docker}
DATA=${REDELIVER_DOCKER_DATA:-${XDG_CACHE_HOME:-${HOME:-/tmp}/.cache}/redeliver/docker}
TIMEOUT=${REDELIVER_DOCKER_TIMEOUT:-60}

SOCK=$RUN/docker.sock
PIDFILE=$RUN/docker.pid
LOG=$RUN/dockerd.log

say() { printf 'docker.sh: %s\n' "$*" >&2; }
die() { say "$*"; exit 1; }

# The engine's own client (Debian's docker.io ships it beside dockerd and
# speaks its API version); any other docker client on PATH otherwise.
docker_cli() {
  if [ -x /usr/bin/docker ]; then /usr/bin/docker "$@"; else docker "$@"; fi
}
dk() { DOCKER_HOST=unix://$SOCK docker_cli "$@"; }

# pid of our dockerd if it runs (exit 1 otherwise): the pid file's process
# must be a dockerd started on our socket, so a recycled pid or another
# engine is never taken for ours.
running_pid() {
  [ -f "$PIDFILE" ] || return 1
  local pid
  pid=$(cat "$PIDFILE" 2>/dev/null) || return 1
  [ -n "$pid" ] && kill -0 "$pid" 2>/dev/null || return 1
  tr '\0' ' ' <"/proc/$pid/cmdline" 2>/dev/null | grep -qF -- "--host unix://$SOCK" || return 1
  printf '%s\n' "$pid"
}

answers() { dk version --format '{{.Server.Version}}' >/dev/null 2>&1; }

# data_root_user prints the pid of another dockerd using our data root.
data_root_user() {
  local p
  for p in $(pgrep -x dockerd 2>/dev/null); do
    [ "$p" = "${1:-}" ] && continue
    if tr '\0' ' ' <"/proc/$p/cmdline" 2>/dev/null | grep -qF -- "--data-root $DATA "; then
      printf '%s\n' "$p"
      return 0
    fi
  done
  return 1
}

install() {
  command -v dockerd >/dev/null && return 0
  [ "${REDELIVER_DOCKER_INSTALL:-1}" != 0 ] || die "dockerd not found (and REDELIVER_DOCKER_INSTALL=0)"
  [ "$(id -u)" = 0 ] || die "dockerd not found, and installing Debian's docker.io needs root (uid $(id -u))"
  command -v apt-get >/dev/null || die "dockerd not found, and no apt-get to install Debian's docker.io"
  say "installing Debian's docker.io"
  local t0=$SECONDS i
  # Another process may hold apt's lock for a while: wait for it, and try
  # a few times.
  for i in 1 2 3; do
    if apt-get -q -o DPkg::Lock::Timeout=120 update >"$RUN/apt.log" 2>&1 &&
      DEBIAN_FRONTEND=noninteractive apt-get -q -y -o DPkg::Lock::Timeout=120 \
        install --no-install-recommends docker.io >>"$RUN/apt.log" 2>&1; then
      say "installed docker.io in $((SECONDS - t0)) s"
      return 0
    fi
    say "apt-get failed (try $i of 3); see $RUN/apt.log"
    sleep $((i * 5))
  done
  tail -n 20 "$RUN/apt.log" >&2
  die "could not install docker.io"
}

print_host() { printf 'DOCKER_HOST=unix://%s\n' "$SOCK"; }

start() {
  mkdir -p "$RUN"
  exec 9>"$RUN/.lock"
  flock 9
  local pid
  if pid=$(running_pid); then
    wait_answers "$pid"
    say "reusing the engine already running (pid $pid)"
    print_host
    return 0
  fi
  [ "$(id -u)" = 0 ] || die "a private dockerd needs root (uid $(id -u)); testcontainers providers skip"
  install
  if pid=$(data_root_user); then
    die "data root $DATA is in use by another dockerd (pid $pid); set REDELIVER_DOCKER_DATA or REDELIVER_DOCKER_DIR to that engine's"
  fi
  mkdir -p "$DATA" "$RUN/exec"
  rm -f "$SOCK" "$PIDFILE"
  # An empty configuration file, so that /etc/docker/daemon.json (another
  # engine's) is not read.
  echo '{}' >"$RUN/daemon.json"
  : >"$LOG"
  local t0=$SECONDS
  # --bridge=none and --iptables/--ip6tables/--ip-forward/--ip-masq=false:
  # no docker0 bridge, no address, no firewall rule, no sysctl change.
  # containerd: dockerd starts its own under the exec root (there is no
  # system containerd here); the namespace keeps its objects apart from any
  # other engine's if there were one.
  setsid dockerd \
    --config-file "$RUN/daemon.json" \
    --data-root "$DATA" \
    --exec-root "$RUN/exec" \
    --host "unix://$SOCK" \
    --pidfile "$PIDFILE" \
    --bridge=none --iptables=false --ip6tables=false --ip-forward=false --ip-masq=false \
    --containerd-namespace redeliver --containerd-plugins-namespace redeliver-plugins \
    >>"$LOG" 2>&1 </dev/null 9>&- &
  local launched=$!
  # dockerd writes the pid file itself once it runs; until then, ours.
  local i
  for ((i = 0; i < 50; i++)); do
    [ -s "$PIDFILE" ] && break
    kill -0 "$launched" 2>/dev/null || break
    sleep 0.1
  done
  [ -s "$PIDFILE" ] || echo "$launched" >"$PIDFILE"
  wait_answers "$launched"
  say "dockerd $(dk version --format '{{.Server.Version}}') (pid $(cat "$PIDFILE")) answers on $SOCK after $((SECONDS - t0)) s; data root $DATA; log $LOG"
  print_host
}

wait_answers() {
  local pid=$1 t0=$SECONDS
  while ((SECONDS - t0 < TIMEOUT)); do
    kill -0 "$pid" 2>/dev/null || fail_start "dockerd exited during startup"
    answers && return 0
    sleep 0.2
  done
  fail_start "dockerd did not answer within $TIMEOUT s"
}

fail_start() {
  say "$1"
  if [ -s "$LOG" ]; then
    say "last lines of $LOG:"
    tail -n 30 "$LOG" >&2
  fi
  local pid
  if pid=$(running_pid); then
    kill -TERM "$pid" 2>/dev/null || true
    wait_gone "$pid" 20 || kill -KILL "$pid" 2>/dev/null || true
  fi
  rm -f "$PIDFILE"
  exit 1
}

wait_gone() { # pid seconds
  local i
  for ((i = 0; i < $2 * 10; i++)); do
    kill -0 "$1" 2>/dev/null || return 0
    sleep 0.1
  done
  return 1
}

stop() {
  mkdir -p "$RUN"
  exec 9>"$RUN/.lock"
  flock 9
  local pid
  if ! pid=$(running_pid); then
    rm -f "$PIDFILE"
    say "no engine of ours running"
    return 0
  fi
  # Every container of this engine is a test's: remove them all, so that
  # none is left in the data root for the next start.
  local ids
  ids=$(dk ps -aq 2>/dev/null || true)
  if [ -n "$ids" ]; then
    say "removing $(echo "$ids" | wc -l) container(s) left running"
    # shellcheck disable=SC2086 # one id per word
    dk rm -f $ids >/dev/null 2>&1 || true
  fi
  # Likewise its networks (a bridge one would hold a private-range address).
  dk network prune -f >/dev/null 2>&1 || true
  kill -TERM "$pid" 2>/dev/null || true
  if ! wait_gone "$pid" 30; then
    say "dockerd (pid $pid) still up after 30 s: killing it"
    kill -KILL "$pid" 2>/dev/null || true
    wait_gone "$pid" 10 || die "could not stop pid $pid"
  fi
  rm -f "$PIDFILE" "$SOCK"
  say "stopped dockerd (pid $pid)"
}

status() {
  local pid
  if pid=$(running_pid) && answers; then
    print_host
    return 0
  fi
  say "no engine of ours answers (run dir $RUN)"
  return 1
}

case ${1:-} in
start) start ;;
stop) stop ;;
status) status ;;
env) if running_pid >/dev/null; then printf 'export '; print_host; fi ;;
logs) cat "$LOG" ;;
*)
  sed -n '2,/^set -euo/p' "$0" | sed '$d' | sed 's/^# \{0,1\}//' >&2
  exit 2
  ;;
esac
