#!/usr/bin/env bash
# Makes sure a redis-server binary is available for the testkit: installs Debian's
# redis-server with apt-get when running as root, otherwise says how to get it.
# Run by scripts/demo.sh and scripts/test.sh.
set -euo pipefail

if [ -n "${REDIS_SERVER:-}" ] && [ -x "${REDIS_SERVER}" ]; then
  exit 0
fi
if command -v redis-server >/dev/null 2>&1; then
  exit 0
fi

if [ "$(id -u)" -eq 0 ] && command -v apt-get >/dev/null 2>&1; then
  echo "redis-server not found: installing Debian's redis-server with apt-get ..." >&2
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq >/dev/null
  apt-get install -y -qq --no-install-recommends redis-server >/dev/null
  command -v redis-server >/dev/null 2>&1 || {
    echo "apt-get finished but redis-server is still not on PATH" >&2
    exit 1
  }
  echo "installed $(redis-server --version)" >&2
else
  cat >&2 <<'MSG'
redis-server is required (the tests and the demo start real Redis masters on 127.0.0.1).
Install it, then run this command again:
  Debian/Ubuntu:  sudo apt-get install redis-server
  macOS:          brew install redis
Or point REDIS_SERVER at an existing binary: REDIS_SERVER=/path/to/redis-server
MSG
  exit 1
fi
