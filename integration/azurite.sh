#!/usr/bin/env bash
# Runs Azurite, Microsoft's Azure Storage emulator, for the Event Hubs
# tests: its blob service on 127.0.0.1, holding the checkpoints and
# ownership records of the SDK's blob checkpoint store. Azurite comes from
# the npm registry (installed with npm where missing, a pinned version,
# cached outside the repo); it needs Node.js and npm.
#
#   integration/azurite.sh start    start (or reuse) it; prints
#                                   REDELIVER_AZURE_STORAGE=<connection string>
#   integration/azurite.sh stop     stop it and remove its data
#   integration/azurite.sh status   print the same line and exit 0 if it answers
#   integration/azurite.sh install  only install Azurite into the cache
#
# Typical use:  s=$(integration/azurite.sh start) && export "$s"; ...; integration/azurite.sh stop
#
# The connection string uses Azurite's development account, devstoreaccount1,
# with its well-known key, which Microsoft publishes for the emulator and
# which no real storage account accepts. It is named DEV_ACCOUNT_KEY below
# and used for nothing but the emulator. To test against a real storage
# account instead, set REDELIVER_AZURE_STORAGE to its connection string and
# do not run this script.
#
# Settings (environment):
#   REDELIVER_AZURITE_VERSION  Azurite release (default 3.37.0)
#   REDELIVER_AZURITE_CACHE    install directory (default ${XDG_CACHE_HOME:-$HOME/.cache}/redeliver/azurite-<version>)
#   REDELIVER_AZURITE_DIR      run directory: pid, log, data (default /tmp/redeliver-azurite)
#   REDELIVER_AZURITE_PORT     blob port (default: a free one from 10000 up)
#   REDELIVER_AZURITE_TIMEOUT  seconds to wait for it to answer (default 60)
#
# This script's messages go to stderr; stdout carries only the
# REDELIVER_AZURE_STORAGE line.
set -euo pipefail

VERSION=${REDELIVER_AZURITE_VERSION:-3.37.0}
CACHE=${REDELIVER_AZURITE_CACHE:-${XDG_CACHE_HOME:-${HOME:-/tmp}/.cache}/redeliver/azurite-$VERSION}
RUN=${REDELIVER_AZURITE_DIR:-/tmp/redeliver-azurite}
TIMEOUT=${REDELIVER_AZURITE_TIMEOUT:-60}

# Azurite's development account and its well-known key (public, emulator only).
DEV_ACCOUNT=devstoreaccount1
DEV_ACCOUNT_KEY='Eby8vdM02xNOcqFlqUwJPLlmEtlCDXJ1OUzFT50uSRZ6IFsuFq2UVErCz4I6tq/K1SZFPTOtr/KBHBeksoGMGw=='

PIDFILE=$RUN/azurite.pid
LOG=$RUN/azurite.log
ENVFILE=$RUN/env

say() { printf 'azurite.sh: %s\n' "$*" >&2; }
die() { say "$*"; exit 1; }

BIN=$CACHE/node_modules/.bin/azurite-blob

install() {
  [ -x "$BIN" ] && return 0
  command -v npm >/dev/null || die "npm not found: install Node.js and npm (Debian: apt-get install nodejs npm)"
  mkdir -p "$CACHE"
  # One installer at a time: another process may be installing right now.
  exec 9>"$CACHE.lock"
  flock 9
  if [ ! -x "$BIN" ]; then
    say "installing azurite@$VERSION into $CACHE"
    (cd "$CACHE" && npm install --no-audit --no-fund --loglevel=error --prefix "$CACHE" "azurite@$VERSION" >&2) ||
      die "npm install azurite@$VERSION failed"
  fi
  flock -u 9
  [ -x "$BIN" ] || die "azurite-blob not found in $CACHE after the install"
}

port_in_use() { (: <"/dev/tcp/127.0.0.1/$1") 2>/dev/null; }

pick_port() {
  if [ -n "${REDELIVER_AZURITE_PORT:-}" ]; then
    port_in_use "$REDELIVER_AZURITE_PORT" && die "port $REDELIVER_AZURITE_PORT is in use (REDELIVER_AZURITE_PORT)"
    PORT=$REDELIVER_AZURITE_PORT
    return
  fi
  for p in $(seq 10000 10099); do
    if ! port_in_use "$p"; then PORT=$p; return; fi
  done
  die "no free port in 10000-10099; set REDELIVER_AZURITE_PORT"
}

conn() {
  printf 'REDELIVER_AZURE_STORAGE=DefaultEndpointsProtocol=http;AccountName=%s;AccountKey=%s;BlobEndpoint=http://127.0.0.1:%s/%s;' \
    "$DEV_ACCOUNT" "$DEV_ACCOUNT_KEY" "$1" "$DEV_ACCOUNT"
}

running() { [ -f "$PIDFILE" ] && kill -0 "$(cat "$PIDFILE")" 2>/dev/null; }

# answers <port>: the blob service answers HTTP (any status: an anonymous
# request is refused with 4xx, which is an answer).
answers() {
  local code
  code=$(curl -s -o /dev/null -w '%{http_code}' --max-time 2 "http://127.0.0.1:$1/$DEV_ACCOUNT?comp=list" 2>/dev/null || true)
  [ -n "$code" ] && [ "$code" != 000 ]
}

start() {
  if running && [ -f "$ENVFILE" ]; then
    local port; port=$(cat "$ENVFILE")
    if answers "$port"; then conn "$port"; echo; return; fi
  fi
  install
  stop_quiet
  mkdir -p "$RUN/data"
  pick_port
  say "starting azurite-blob $VERSION on 127.0.0.1:$PORT (data in $RUN/data)"
  # setsid: the emulator's own process group, so stop ends it all.
  setsid "$BIN" --blobHost 127.0.0.1 --blobPort "$PORT" --location "$RUN/data" \
    --skipApiVersionCheck --loose --silent >"$LOG" 2>&1 </dev/null &
  echo $! >"$PIDFILE"
  echo "$PORT" >"$ENVFILE"
  local deadline=$((SECONDS + TIMEOUT))
  until answers "$PORT"; do
    running || { cat "$LOG" >&2; die "azurite exited before it answered"; }
    [ $SECONDS -lt $deadline ] || { cat "$LOG" >&2; stop_quiet; die "azurite did not answer within ${TIMEOUT}s"; }
    sleep 0.2
  done
  conn "$PORT"; echo
}

stop_quiet() {
  if [ -f "$PIDFILE" ]; then
    local pid; pid=$(cat "$PIDFILE")
    if kill -0 "$pid" 2>/dev/null; then
      kill -TERM -- "-$pid" 2>/dev/null || kill -TERM "$pid" 2>/dev/null || true
      for _ in $(seq 50); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
      kill -KILL -- "-$pid" 2>/dev/null || kill -KILL "$pid" 2>/dev/null || true
    fi
    rm -f "$PIDFILE"
  fi
  rm -f "$ENVFILE"
}

stop() {
  stop_quiet
  rm -rf "$RUN/data"
  say "stopped"
}

status() {
  running && [ -f "$ENVFILE" ] && answers "$(cat "$ENVFILE")" || return 1
  conn "$(cat "$ENVFILE")"; echo
}

case "${1:-}" in
  start) start ;;
  stop) stop ;;
  status) status ;;
  install) install ;;
  *) die "usage: $0 start|stop|status|install" ;;
esac
