#!/usr/bin/env bash
# Where the time of `x12gate process` goes: fsyncs (and commits) per interchange, by target.
#
#   X12GATE_BENCH_KEEP=1 X12GATE_BENCH_FILES=200 cargo bench --bench process   # prints "kept: DIR"
#   scripts/profile-process.sh DIR [FILES]                                      # FILES: default 100
#
# Runs the release binary under `strace -f -T` over the first FILES inbound files of a kept
# bench folder, against a fresh registry and fresh output folders (DIR/profile), and prints
# per fsync target: calls, calls per interchange, and the wall time spent in them. A WAL fsync
# is one durable SQLite commit (or part of a checkpoint); the others are `write_atomic`'s
# file and folder fsyncs. Needs strace (apt-get install strace).
set -euo pipefail
dir=${1:?usage: $0 KEPT_BENCH_DIR [FILES]}
n=${2:-100}
cd "$(dirname "$0")/.."
bin=target/release/x12gate
[ -x "$bin" ] || cargo build --release --quiet
command -v strace >/dev/null || { echo "strace not found (apt-get install strace)" >&2; exit 1; }

prof="$(realpath "$dir")/profile"
rm -rf "$prof"
mkdir -p "$prof"
sed -e 's|^database = .*|database = "'"$prof"'/x12gate.db"|' \
    -e 's|^out = .*|out = "'"$prof"'/out"|' \
    -e 's|^outbox = .*|outbox = "'"$prof"'/outbox"|' \
    "$dir/gateway/partners.toml" >"$prof/partners.toml"
mapfile -t files < <(find "$dir/gateway/inbox" -name '*.x12' | sort | head -n "$n")
n=${#files[@]}

start=$(date +%s.%N)
# -ff: one trace file per thread, so no call is split by another thread's.
strace -ff -y -T -e trace=fsync,fdatasync -o "$prof/trace" \
  "$bin" --config "$prof/partners.toml" process "${files[@]}" >/dev/null
end=$(date +%s.%N)

echo "$n interchanges in $(awk "BEGIN { print $end - $start }") s under strace"
cat "$prof"/trace.* | grep -E '^f(data)?sync\(' |
  sed -E 's/.*sync\([0-9]+<([^>]*)>\).*<([0-9.]+)>$/\1 \2/' |
  awk -v n="$n" -v p="$prof/" '
    { t = $1; sub(p, "", t)
      sub(/\/\.x12gate-tmp\/.*/, "/.x12gate-tmp/* (file)", t)
      if (t == "out" || t == "outbox") t = t "/ (folder)"
      c[t]++; s[t] += $2; all++; sum += $2 }
    END {
      for (t in c) printf "%6d calls %7.3f per interchange %8.3f s  %s\n", c[t], c[t] / n, s[t], t
      printf "%6d calls %7.3f per interchange %8.3f s  %s\n", all, all / n, sum, "all fsyncs (s summed over threads)"
    }' | sort -nr
