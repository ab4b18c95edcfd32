#!/usr/bin/env bash
# Installs Debian's chromium for the status page's browser test
# (host/browser), where no Chromium is installed yet. Does nothing when
# REDELIVER_NO_BROWSER=1 (the test then skips unless a Chromium is there)
# or when REDELIVER_CHROMIUM names another browser. apt may be locked for a
# while by another install: it waits for the lock and tries again.
set -euo pipefail
if [ "${REDELIVER_NO_BROWSER:-}" = 1 ] || [ -n "${REDELIVER_CHROMIUM:-}" ] ||
   command -v chromium >/dev/null 2>&1 || command -v chromium-browser >/dev/null 2>&1; then
  exit 0
fi
echo "chromium.sh: installing Debian's chromium" >&2
sudo=""
[ "$(id -u)" = 0 ] || sudo=sudo
log=$(mktemp)
trap 'rm -f "$log"' EXIT
for try in 1 2 3 4 5 6; do
  if $sudo apt-get -o DPkg::Lock::Timeout=120 update -qq >"$log" 2>&1 &&
     DEBIAN_FRONTEND=noninteractive $sudo apt-get -o DPkg::Lock::Timeout=120 install -y -qq chromium >>"$log" 2>&1; then
    exit 0
  fi
  [ "$try" = 6 ] && { cat "$log" >&2; echo "chromium.sh: could not install chromium" >&2; exit 1; }
  sleep 10
done
