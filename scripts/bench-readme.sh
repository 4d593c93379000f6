#!/usr/bin/env bash
# Runs the node-count benchmark once and puts its tables and plot into the docs, so that
# every figure shown comes from that one run:
# - every table the bench writes (target/redquorum-bench/tables.md) replaces what lies
#   between the bench-tables markers of docs/benchmarks.md;
# - its latency table replaces what lies between the bench-summary markers of README.md;
# - the plot replaces docs/bench-nodes.svg.
#
#   bash scripts/bench-readme.sh              # the full run the docs are meant to show
#   bash scripts/bench-readme.sh --quick      # any arguments go to the bench
#
# Run it on a quiet machine: the tables say what the load was.
set -euo pipefail
cd "$(dirname "$0")/.."

out=target/redquorum-bench
tables_begin='<!-- bench-tables:begin (scripts/bench-readme.sh writes this part) -->'
tables_end='<!-- bench-tables:end -->'
summary_begin='<!-- bench-summary:begin (scripts/bench-readme.sh writes this part) -->'
summary_end='<!-- bench-summary:end -->'

# Fails unless $1 has the marker lines $2 and $3.
has_markers() {
  grep -qxF "$2" "$1" && grep -qxF "$3" "$1" || {
    echo "$1 lacks the markers $2 ... $3" >&2
    exit 1
  }
}

# Replaces what lies between the marker lines $2 and $3 of file $1 with the file $4.
splice() {
  awk -v begin="$2" -v end="$3" -v content="$4" '
    $0 == begin { print; print ""; while ((getline line < content) > 0) print line; print ""; skip = 1; next }
    $0 == end { skip = 0 }
    !skip { print }
  ' "$1" > "$1.new"
  mv "$1.new" "$1"
}

has_markers docs/benchmarks.md "$tables_begin" "$tables_end"
has_markers README.md "$summary_begin" "$summary_end"
bash scripts/ensure-redis.sh

rm -f "$out/tables.md"
cargo bench --bench nodes --all-features --locked -- --out "$out" "$@"
[ -s "$out/tables.md" ] || {
  echo "the bench wrote no $out/tables.md" >&2
  exit 1
}

# The README's summary: the rows of the table under the "### Latency" heading.
awk '/^### Latency/ { on = 1; next } on && /^\|/ { print; seen = 1; next } on && seen { exit }' \
  "$out/tables.md" > "$out/summary.md"
[ -s "$out/summary.md" ] || {
  echo "$out/tables.md has no latency table for the README" >&2
  exit 1
}

splice docs/benchmarks.md "$tables_begin" "$tables_end" "$out/tables.md"
splice README.md "$summary_begin" "$summary_end" "$out/summary.md"
cp "$out/nodes.svg" docs/bench-nodes.svg
echo "docs/benchmarks.md, README.md and docs/bench-nodes.svg now show the run in $out" >&2
