#!/usr/bin/env bash
# The demo: starts 5 local masters and shows workers taking turns on one resource while a
# master is killed and another paused.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/ensure-servers.sh
exec cargo run --quiet --example demo
