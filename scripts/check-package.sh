#!/usr/bin/env bash
# Packages the crate (no upload; the packaged crate is built once to prove it is whole) and
# checks that it holds only what users need: the library's sources without the simulation,
# the README, the changelog, the licences and the manifest. The examples run on the
# workspace's testkit, which is not published with the library: they are not shipped. Run by
# .ci/run.
#
#   bash scripts/check-package.sh [cargo package options]
#   bash scripts/check-package.sh --self-test   # only the self-test of the file judgement
#
# The judgement of the file list is self-tested first, on every run.
set -euo pipefail
cd "$(dirname "$0")/.."

# Whether one packaged path is allowed: the library's Rust sources and Lua scripts (not
# the simulation), the README, the changelog, the licences, the manifest, the lock file
# and cargo's own record. Anything else is refused.
allowed() {
  case "$1" in
    src/sim/*) return 1 ;;
    src/scripts/*/*) return 1 ;;
    src/scripts/*.lua) return 0 ;;
    src/*.rs) return 0 ;; # `*` spans folders here: src/**/*.rs
    README.md | CHANGELOG.md | LICENSE-MIT | LICENSE-APACHE | Cargo.toml | Cargo.toml.orig | Cargo.lock | .cargo_vcs_info.json)
      return 0
      ;;
    *) return 1 ;;
  esac
}

# Judges a file list, one path a line on stdin: prints each problem (a file the package
# must not ship, or one it lacks) and fails if there is any.
judge() {
  local files path needed bad=0
  files=$(cat)
  while IFS= read -r path; do
    [ -z "$path" ] && continue
    if ! allowed "$path"; then
      echo "ships a file users do not need: $path"
      bad=1
    fi
  done <<<"$files"
  for needed in README.md LICENSE-MIT LICENSE-APACHE Cargo.toml src/lib.rs; do
    if ! printf '%s\n' "$files" | grep -qxF "$needed"; then
      echo "lacks $needed"
      bad=1
    fi
  done
  return "$bad"
}

# The judgement accepts the crate's package list and refuses each file it must not ship.
self_test() {
  local good bad failed=0
  good='.cargo_vcs_info.json
CHANGELOG.md
Cargo.lock
Cargo.toml
Cargo.toml.orig
LICENSE-APACHE
LICENSE-MIT
README.md
src/lib.rs
src/lock.rs
src/lease/watchdog.rs
src/quorum/tally.rs
src/scripts/acquire.lua
src/scripts/mod.rs'
  if ! printf '%s\n' "$good" | judge >/dev/null; then
    echo "self-test: a whole package list is refused:" >&2
    printf '%s\n' "$good" | judge >&2 || true
    failed=1
  fi
  for bad in src/scratch.txt src/lock.rs.orig examples/anything.sh src/sim/world.rs notes.md \
    src/scripts/extra/x.lua src/lib.lua examples/demo.rs tests/layers.rs; do
    if printf '%s\n%s\n' "$good" "$bad" | judge >/dev/null; then
      echo "self-test: $bad is accepted" >&2
      failed=1
    fi
  done
  if printf '%s\n' "$good" | grep -vx 'src/lib.rs' | judge >/dev/null; then
    echo "self-test: a package without src/lib.rs is accepted" >&2
    failed=1
  fi
  if [ "$failed" -ne 0 ]; then
    echo "the package check's self-test failed" >&2
    exit 1
  fi
  echo "package check: self-test passed"
}

self_test
if [ "${1:-}" = "--self-test" ]; then
  exit 0
fi

files=$(cargo package -p redquorum --list --locked "$@")
if ! problems=$(printf '%s\n' "$files" | judge); then
  echo "the package is not only the product:" >&2
  printf '%s\n' "$problems" | sed 's/^/  /' >&2
  exit 1
fi
echo "package: $(printf '%s\n' "$files" | wc -l) files, only the product"
cargo package -p redquorum --locked "$@" >/dev/null
echo "package: builds from its own files"
