#!/usr/bin/env bash
# Runs the node-count benchmark once and puts its tables and plot into the README: the
# tables the bench writes (target/redquorum-bench/tables.md) replace everything between
# the README's bench-tables markers, and the plot replaces docs/bench-nodes.svg. All the
# figures then come from that one run.
#
#   bash scripts/bench-readme.sh              # the full run the README is meant to show
#   bash scripts/bench-readme.sh --quick      # any arguments go to the bench
#
# Run it on a quiet machine: the tables say what the load was.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/ensure-redis.sh

out=target/redquorum-bench
begin='<!-- bench-tables:begin (scripts/bench-readme.sh writes this part) -->'
end='<!-- bench-tables:end -->'
grep -qxF "$begin" README.md && grep -qxF "$end" README.md || {
  echo "README.md lacks the bench-tables markers" >&2
  exit 1
}

rm -f "$out/tables.md"
cargo bench --bench nodes --all-features --locked -- --out "$out" "$@"
[ -s "$out/tables.md" ] || {
  echo "the bench wrote no $out/tables.md" >&2
  exit 1
}

awk -v begin="$begin" -v end="$end" -v tables="$out/tables.md" '
  $0 == begin { print; print ""; while ((getline line < tables) > 0) print line; print ""; skip = 1; next }
  $0 == end { skip = 0 }
  !skip { print }
' README.md > README.md.new
mv README.md.new README.md
cp "$out/nodes.svg" docs/bench-nodes.svg
echo "README.md and docs/bench-nodes.svg now show the run in $out" >&2
