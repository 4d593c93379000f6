#!/usr/bin/env bash
# Packages the crate (no upload; the packaged crate is built once to prove it is whole) and
# checks that it holds only what users need: the library's sources without the simulation,
# the README, the licences, the manifest and what the examples need. Run by .ci/run.
set -euo pipefail
cd "$(dirname "$0")/.."

files=$(cargo package --list --locked "$@")
unexpected=$(printf '%s\n' "$files" | grep -Ev \
  '^(src/.*|examples/.*|README\.md|LICENSE-MIT|LICENSE-APACHE|Cargo\.toml|Cargo\.toml\.orig|Cargo\.lock|\.cargo_vcs_info\.json)$' \
  || true)
if [ -n "$unexpected" ]; then
  echo "the package would ship files users do not need:" >&2
  printf '  %s\n' $unexpected >&2
  exit 1
fi
if printf '%s\n' "$files" | grep -q '^src/sim/'; then
  echo "the package would ship the simulation (src/sim), which only the crate's tests use" >&2
  exit 1
fi
for needed in README.md LICENSE-MIT LICENSE-APACHE Cargo.toml src/lib.rs; do
  if ! printf '%s\n' "$files" | grep -qx "$needed"; then
    echo "the package lacks $needed" >&2
    exit 1
  fi
done
echo "package: $(printf '%s\n' "$files" | wc -l) files, only the product"
cargo package --locked "$@" >/dev/null
echo "package: builds from its own files"
