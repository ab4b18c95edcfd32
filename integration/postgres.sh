#!/usr/bin/env bash
# Runs a real PostgreSQL server for the re-drive tests: Debian's server
# binaries (installed with apt-get where /usr/lib/postgresql/*/bin is
# missing), initdb and pg_ctl run as the postgres user when this script runs
# as root, on a free port of 127.0.0.1, with its data in a run directory
# that stop removes.
#
#   integration/postgres.sh start    start (or reuse) the server; prints
#                                    REDELIVER_POSTGRES_URL=postgres://...
#   integration/postgres.sh stop     stop it and remove its run directory
#   integration/postgres.sh status   print the same line and exit 0 if it
#                                    answers, exit 1 otherwise
#   integration/postgres.sh restart  restart the server this script started
#                                    (a fast shutdown: open connections are
#                                    cut), on the same port and data
#   integration/postgres.sh logs     print the server's log
#
# Typical use:  u=$(integration/postgres.sh start) && export "$u"; ...; integration/postgres.sh stop
#
# Settings (environment):
#   REDELIVER_POSTGRES_URL    an existing server: start and status only check
#                             that it answers and print it; stop does nothing
#   REDELIVER_POSTGRES_DIR    run directory: data, log, socket (default /tmp/redeliver-postgres)
#   REDELIVER_POSTGRES_PORT   port (default: the first free of 25432, 25433, ...:
#                             below the ephemeral port range)
#   REDELIVER_POSTGRES_OPTS   extra server settings, e.g. "-c fsync=off"
#
# This script's messages go to stderr; stdout carries only the
# REDELIVER_POSTGRES_URL line.
set -euo pipefail

RUN=${REDELIVER_POSTGRES_DIR:-/tmp/redeliver-postgres}
DATA=$RUN/data
LOG=$RUN/postgres.log
ENVFILE=$RUN/env

say() { printf 'postgres.sh: %s\n' "$*" >&2; }
die() { say "$*"; exit 1; }

# as_pg runs a command as the postgres user when we are root (initdb
# refuses to run as root), else as ourselves.
as_pg() {
  if [ "$(id -u)" = 0 ]; then
    runuser -u postgres -- "$@"
  else
    "$@"
  fi
}

# bindir prints the newest /usr/lib/postgresql/<version>/bin with initdb.
bindir() {
  local d best=""
  for d in /usr/lib/postgresql/*/bin; do
    [ -x "$d/initdb" ] && [ -x "$d/pg_ctl" ] && best=$d
  done
  [ -n "$best" ] && printf '%s\n' "$best"
}

install_server() {
  [ "$(id -u)" = 0 ] || die "PostgreSQL's server binaries are missing and installing them needs root: apt-get install postgresql"
  command -v apt-get >/dev/null || die "PostgreSQL's server binaries are missing and there is no apt-get to install them"
  say "installing Debian's postgresql package (apt-get update first)"
  apt-get update >&2
  DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends postgresql >&2
}

port_in_use() { (: <"/dev/tcp/127.0.0.1/$1") 2>/dev/null; }

url_for() { printf 'postgres://postgres@127.0.0.1:%s/postgres?sslmode=disable\n' "$1"; }

# answers <url>: does a server answer there?
answers() {
  local b
  b=$(bindir) || return 1
  local hostport=${1#*@}
  hostport=${hostport%%/*}
  "$b/pg_isready" -q -h "${hostport%:*}" -p "${hostport##*:}" -t 5
}

running() {
  [ -f "$DATA/postmaster.pid" ] && [ -f "$ENVFILE" ] || return 1
  local b
  b=$(bindir) || return 1
  as_pg "$b/pg_ctl" -D "$DATA" status >/dev/null 2>&1
}

start() {
  if [ -n "${REDELIVER_POSTGRES_URL:-}" ]; then
    answers "$REDELIVER_POSTGRES_URL" || say "warning: the server named by REDELIVER_POSTGRES_URL does not answer to pg_isready"
    printf 'REDELIVER_POSTGRES_URL=%s\n' "$REDELIVER_POSTGRES_URL"
    return
  fi
  local b
  if ! b=$(bindir); then
    install_server
    b=$(bindir) || die "no initdb under /usr/lib/postgresql/*/bin after installing postgresql"
  fi
  if running; then
    say "reusing the server in $RUN"
    cat "$ENVFILE"
    return
  fi
  mkdir -p "$RUN"
  if [ "$(id -u)" = 0 ]; then chown postgres: "$RUN"; fi
  chmod 700 "$RUN"
  if [ ! -f "$DATA/PG_VERSION" ]; then
    say "initdb in $DATA"
    as_pg "$b/initdb" -D "$DATA" -U postgres --auth=trust -E UTF8 --locale=C.UTF-8 >"$RUN/initdb.log" 2>&1 ||
      { cat "$RUN/initdb.log" >&2; die "initdb failed"; }
  fi
  local port=${REDELIVER_POSTGRES_PORT:-}
  if [ -z "$port" ]; then
    for p in $(seq 25432 25531); do
      if ! port_in_use "$p"; then port=$p; break; fi
    done
    [ -n "$port" ] || die "no free port in 25432-25531; set REDELIVER_POSTGRES_PORT"
  elif port_in_use "$port"; then
    die "port $port is in use (REDELIVER_POSTGRES_PORT)"
  fi
  say "starting PostgreSQL ($("$b/postgres" --version)) on 127.0.0.1:$port"
  if ! as_pg "$b/pg_ctl" -D "$DATA" -l "$LOG" -w -t 60 \
    -o "-c listen_addresses=127.0.0.1 -p $port -c unix_socket_directories=$RUN -c max_connections=200 ${REDELIVER_POSTGRES_OPTS:-}" start >&2; then
    tail -n 30 "$LOG" >&2 || true
    die "pg_ctl start failed"
  fi
  url_for "$port" | sed 's/^/REDELIVER_POSTGRES_URL=/' >"$ENVFILE"
  cat "$ENVFILE"
}

stop() {
  if [ -n "${REDELIVER_POSTGRES_URL:-}" ] && [ ! -f "$ENVFILE" ]; then
    say "REDELIVER_POSTGRES_URL names a server this script did not start: leaving it"
    return
  fi
  local b
  if [ -d "$DATA" ] && b=$(bindir); then
    as_pg "$b/pg_ctl" -D "$DATA" -m fast -w -t 30 stop >&2 2>/dev/null || true
  fi
  rm -rf "$RUN"
}

status() {
  local line
  if [ -n "${REDELIVER_POSTGRES_URL:-}" ]; then
    line="REDELIVER_POSTGRES_URL=$REDELIVER_POSTGRES_URL"
  elif running; then
    line=$(cat "$ENVFILE")
  else
    say "not running"
    exit 1
  fi
  answers "${line#REDELIVER_POSTGRES_URL=}" || { say "does not answer"; exit 1; }
  printf '%s\n' "$line"
}

restart() {
  running || die "no server of this script is running in $RUN"
  local b
  b=$(bindir) || die "no PostgreSQL server binaries"
  as_pg "$b/pg_ctl" -D "$DATA" -l "$LOG" -m fast -w -t 60 restart >&2 || { tail -n 30 "$LOG" >&2; die "pg_ctl restart failed"; }
}

case "${1:-}" in
  start) start ;;
  restart) restart ;;
  stop) stop ;;
  status) status ;;
  logs) cat "$LOG" ;;
  *) die "usage: $0 start|stop|status|restart|logs" ;;
esac
