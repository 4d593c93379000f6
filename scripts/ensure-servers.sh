#!/usr/bin/env bash
# Makes sure the servers the testkit starts are installed: redis-server (ensure-redis.sh)
# and PostgreSQL's server binaries (initdb, postgres) for the fencing tests of the
# `postgres` feature. As root on Debian, installs what is missing with apt-get; otherwise
# says how. Run by scripts/test.sh, scripts/demo.sh and .ci/run.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/ensure-redis.sh

# The folder of initdb and postgres, found as the testkit finds it (testkit::Postgres):
# REDQUORUM_PG_BINDIR, then pg_config --bindir, then Debian's newest
# /usr/lib/postgresql/*/bin, then PATH. pg_config may come from libpq-dev and name a
# folder without the server, so each candidate is checked for both binaries.
has_server() { [ -n "$1" ] && [ -x "$1/initdb" ] && [ -x "$1/postgres" ]; }
find_bindir() {
  if [ -n "${REDQUORUM_PG_BINDIR:-}" ]; then
    has_server "$REDQUORUM_PG_BINDIR" && echo "$REDQUORUM_PG_BINDIR"
    return
  fi
  local dir
  if command -v pg_config >/dev/null 2>&1; then
    dir="$(pg_config --bindir 2>/dev/null || true)"
    if has_server "$dir"; then echo "$dir"; return; fi
  fi
  for dir in $(ls -d /usr/lib/postgresql/*/bin 2>/dev/null | sort -V -r); do
    if has_server "$dir"; then echo "$dir"; return; fi
  done
  dir="$(dirname "$(command -v postgres 2>/dev/null || echo /nonexistent/postgres)")"
  if has_server "$dir"; then echo "$dir"; fi
}

if [ -n "$(find_bindir)" ]; then
  exit 0
fi
if [ -n "${REDQUORUM_PG_BINDIR:-}" ]; then
  echo "REDQUORUM_PG_BINDIR=$REDQUORUM_PG_BINDIR holds no initdb and postgres" >&2
  exit 1
fi

if [ "$(id -u)" -eq 0 ] && command -v apt-get >/dev/null 2>&1; then
  echo "PostgreSQL's server not found: installing Debian's postgresql with apt-get ..." >&2
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq >/dev/null
  apt-get install -y -qq --no-install-recommends postgresql >/dev/null
  dir="$(find_bindir)"
  [ -n "$dir" ] || {
    echo "apt-get finished but initdb and postgres are still not found" >&2
    exit 1
  }
  echo "installed $("$dir/postgres" --version)" >&2
else
  cat >&2 <<'MSG'
PostgreSQL's server binaries (initdb, postgres) are required: the fencing tests of the
`postgres` feature start a real PostgreSQL on 127.0.0.1. Install them, then run this
command again:
  Debian/Ubuntu:  sudo apt-get install postgresql
  macOS:          brew install postgresql
Or point REDQUORUM_PG_BINDIR at the folder that holds initdb and postgres.
MSG
  exit 1
fi
