#!/usr/bin/env bash
# The whole test suite: unit, integration and chaos tests against real redis-server
# processes, then the doc tests. Installs redis-server first when it is missing.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/ensure-redis.sh

if cargo nextest --version >/dev/null 2>&1; then
  cargo nextest run --all-features --locked
else
  echo "cargo-nextest not found: running the suite with cargo test" >&2
  cargo test --all-features --locked
fi
cargo test --doc --all-features --locked
