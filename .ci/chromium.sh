#!/usr/bin/env bash
# Makes sure Debian's chromium is installed for the dashboard's browser test
# (server/dashboard_browser_test.go) and prints its path. Safe to run again:
# it does nothing when /usr/bin/chromium is already there.
set -euo pipefail

bin=/usr/bin/chromium
if [ ! -x "$bin" ]; then
  sudo=
  if [ "$(id -u)" -ne 0 ]; then
    sudo=sudo
  fi
  export DEBIAN_FRONTEND=noninteractive
  log=$(mktemp)
  trap 'rm -f "$log"' EXIT
  if ! { $sudo apt-get update -qq && $sudo apt-get install -y -qq chromium; } >"$log" 2>&1; then
    cat "$log" >&2
    echo "chromium.sh: could not install chromium" >&2
    exit 1
  fi
  if [ ! -x "$bin" ]; then
    echo "chromium.sh: chromium installed but $bin is missing" >&2
    exit 1
  fi
fi
echo "$bin"
