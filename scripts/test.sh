#!/usr/bin/env bash
# The whole test suite: unit, integration and chaos tests against real redis-server
# processes, then the doc tests. Installs redis-server and PostgreSQL first when missing.
#
# The chaos scenarios each append one line to target/redquorum-chaos/report.txt, printed at
# the end (also when a test failed). REDQUORUM_CHAOS_SECONDS=N runs each scenario's fault
# phase for N seconds (a soak); REDQUORUM_CHAOS_SEED=S replays a run's schedules.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/ensure-servers.sh

report=target/redquorum-chaos/report.txt
rm -f "$report"
print_report() {
  if [ -s "$report" ]; then
    echo
    echo "== chaos report (expected HOLD: checkers clean; DETECT: a known-unsafe scenario the checkers must catch)"
    sort -V "$report"
  fi
}
trap print_report EXIT

if cargo nextest --version >/dev/null 2>&1; then
  cargo nextest run --all-features --locked
else
  echo "cargo-nextest not found: running the suite with cargo test" >&2
  cargo test --all-features --locked
fi
cargo test --doc --all-features --locked
