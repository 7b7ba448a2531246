#!/usr/bin/env bash
# The cost of the business-document bookkeeping: `process` of the same files by two builds,
# alternated in one run, each on a fresh registry; prints the median wall time of each.
#
#   benches/documents.sh OLD_X12GATE NEW_X12GATE FILE... [RUNS=5]
#
# For example, before and after the documents work:
#   git worktree add /tmp/before 4bb1aa1 && (cd /tmp/before && cargo build --release)
#   cargo build --release && cargo run --release -p testdata --example generate 20 7 --to X12GATE > /tmp/g20.x12
#   benches/documents.sh /tmp/before/target/release/x12gate target/release/x12gate /tmp/g20.x12
set -euo pipefail
old=$(realpath "$1"); new=$(realpath "$2"); shift 2
runs=${RUNS:-5}
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
cat > "$work/partners.toml" <<'TOML'
[gateway]
id_qualifier = "ZZ"
id = "X12GATE"
unknown_partners = "accept"
database = "data/x12gate.db"
outbox = "data/outbox"
out = "data/out"
TOML
once() { # BIN FILE -> seconds
  (cd "$work" && rm -rf data && "$1" init >/dev/null 2>&1)
  local s e
  s=$(date +%s%N)
  (cd "$work" && "$1" process "$2" >/dev/null 2>&1) || true
  e=$(date +%s%N)
  echo $(( (e - s) / 1000000 ))
}
median() { sort -n | awk '{a[NR]=$1} END {print a[int((NR+1)/2)]}'; }
for f in "$@"; do
  f=$(realpath "$f")
  o=(); n=()
  for _ in $(seq "$runs"); do
    o+=("$(once "$old" "$f")"); n+=("$(once "$new" "$f")")
  done
  om=$(printf '%s\n' "${o[@]}" | median); nm=$(printf '%s\n' "${n[@]}" | median)
  ics=$(grep -o 'ISA.00' "$f" | wc -l); sets=$(grep -oE '(^|[~\n])ST[*|]' "$f" | wc -l)
  echo "$(basename "$f"): $ics interchanges, $sets sets; old ${om} ms, new ${nm} ms (median of $runs);" \
       "old $(( ics * 1000 / (om > 0 ? om : 1) )) interchanges/s, new $(( ics * 1000 / (nm > 0 ? nm : 1) )) interchanges/s"
done
