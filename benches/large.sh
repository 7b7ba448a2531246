#!/usr/bin/env bash
# Large-file benchmark (issue 11, bounded memory): throughput and peak memory of `x12gate
# validate` and `x12gate process` on big generated files, next to two floors measured in the
# same run on the same files.
#
#   benches/large.sh                                              # 100 MB, 1 GB, 200 MB small sets
#   BENCH_SIZES="100" BENCH_SMALL_MB=50 BENCH_RUNS=1 benches/large.sh   # a quick run
#   X12PP=/tmp/x12pp/bin/x12pp benches/large.sh                   # with x12pp (cargo install x12pp)
#
# What it does:
# 1. Builds the release binary and the examples of crates/testdata (`generate`,
#    `count_terminators`, `edi_parse`); honours CARGO_TARGET_DIR.
# 2. Generates into $BENCH_DIR (default: a fresh `mktemp -d` under /tmp; never inside the
#    repository) with seed $BENCH_SEED (default 1), all addressed to the gateway with
#    `--to 6123456789`:
#    - realistic-SIZE.x12, for each SIZE (MB, 10^6 bytes) in $BENCH_SIZES (default "100 1000"):
#      many interchanges of 850, 810 and 856 in 004010 and 005010;
#    - small-sets-SIZE.x12, SIZE = $BENCH_SMALL_MB (default 200; 0 skips it): one 004010
#      interchange of tiny 850s (about 180 bytes each, 1,000,000 sets in 186 MB), at most
#      100,000 to a group.
#    A file already there (from an earlier run with the same $BENCH_DIR) is reused: the
#    generator gives the same bytes for the same arguments.
# 3. Writes $BENCH_DIR/partners.toml: gateway ZZ:6123456789, unknown_partners = "accept" (the
#    partner defaults apply: schema validation, 997, structured translation), every folder under
#    $BENCH_DIR/data.
# 4. For each file, measures with `/usr/bin/time -f '%e %M'` (peak RSS; the wall time is taken
#    around it in microseconds, as %e has only two decimals), each $BENCH_RUNS times (default 3):
#    - memchr floor: `count_terminators FILE`, the segment terminators counted in 1 MiB blocks
#      (read every byte once, find every segment end: the least work any reader does);
#    - x12pp (a tokeniser-only pretty printer, crates.io `x12pp`), if `x12pp` is on PATH or
#      $X12PP names it: `x12pp FILE > /dev/null`; skipped with a line saying so when absent;
#    - edi (crates.io `edi`, a parser that builds the whole document; `examples/edi_parse`
#      of crates/testdata, `edi::loose_parse`): it needs about nine times the file in memory,
#      files over $BENCH_EDI_MAX_MB (default 2000) MB are skipped, with a line saying so
#      (the 1 GB file takes it about 9 GB);
#    - `x12gate validate --envelope FILE`, `x12gate validate FILE`;
#    - `x12gate process FILE` against a fresh registry and fresh folders each run (`x12gate
#      init` first, not timed; every run's folders are removed at the end of the script, not
#      between runs, see `write_config`); BENCH_PROCESS=0 leaves it out (the readers alone,
#      in a minute rather than an hour).
#    `validate` exits 3 when it has findings and `process` when anything was not accepted: both
#    count as a measurement, with a warning (these files should be clean); any other non-zero
#    exit fails the benchmark.
# 5. Prints a markdown table: file, size MB, command, median wall time over the runs, MB/s
#    (10^6 bytes per second of that median), and the highest peak RSS of the runs in MiB.
#
# The files are read from the page cache (they were just written, or read by the previous
# command): the figures are CPU and memory, not disk. `process` also writes its translations
# and acknowledgments (several times the input's size) under $BENCH_DIR/data, so it measures a
# disk's writes too; the file system type of $BENCH_DIR is printed. $BENCH_DIR is kept at the
# end (remove it yourself). The outputs of every `process` run are kept until the script ends:
# about 5 GB a run of the 1 GB file.
set -euo pipefail
# A decimal point in $EPOCHREALTIME, sort -g and awk, whatever the caller's locale.
export LC_ALL=C

repo=$(cd "$(dirname "$0")/.." && pwd)
sizes=${BENCH_SIZES:-100 1000}
small_mb=${BENCH_SMALL_MB:-200}
runs=${BENCH_RUNS:-3}
seed=${BENCH_SEED:-1}
gateway_id=6123456789

die() {
  echo "large.sh: $*" >&2
  exit 1
}
[ -x /usr/bin/time ] || die "/usr/bin/time not found (apt-get install time)"
[[ $runs =~ ^[1-9][0-9]*$ ]] || die "BENCH_RUNS=$runs: expected a positive whole number"
[ -n "${EPOCHREALTIME:-}" ] || die "needs bash 5 (EPOCHREALTIME)"

if [ -n "${BENCH_DIR:-}" ]; then
  dir=$BENCH_DIR
  mkdir -p "$dir"
else
  dir=$(mktemp -d /tmp/x12gate-large.XXXXXX)
fi
dir=$(cd "$dir" && pwd -P)
case "$dir/" in
"$(cd "$repo" && pwd -P)"/*) die "BENCH_DIR $dir is inside the repository" ;;
esac

echo "building release binaries..." >&2
(cd "$repo" && cargo build --release --quiet --bin x12gate &&
  cargo build --release --quiet -p testdata --example generate --example count_terminators \
    --example edi_parse)
target=${CARGO_TARGET_DIR:-$repo/target}
case "$target" in /*) ;; *) target=$repo/$target ;; esac
x12gate=$target/release/x12gate
generate=$target/release/examples/generate
count_terminators=$target/release/examples/count_terminators
edi_parse=$target/release/examples/edi_parse
edi_max_mb=${BENCH_EDI_MAX_MB:-2000}

x12pp=${X12PP:-$(command -v x12pp || true)}
if [ -n "$x12pp" ] && [ ! -x "$x12pp" ]; then
  die "X12PP=$x12pp is not an executable"
fi

# Writes $dir/$1 with every folder under $dir/$2.
write_config() {
  cat >"$dir/$1" <<EOF
# Written by benches/large.sh; every path is relative to this file.
[gateway]
id_qualifier = "ZZ"
id = "$gateway_id"
unknown_partners = "accept"
inbox = "$2/inbox"
outbox = "$2/outbox"
out = "$2/out"
archive = "$2/archive"
rejected = "$2/rejected"
database = "$2/x12gate.db"
work = "$2/work"
EOF
}
write_config partners.toml data
config=$dir/partners.toml
# Each `process` run writes into folders of its own, all removed only at the end: on ext4, a
# file created within minutes of many deletions in its block group waits while the allocator
# skips every recently freed inode (perf: `recently_deleted`), which made `process` look up
# to 3 times slower when each run followed the removal of the last one's outputs.
process_runs=0
cleanup() {
  for ((i = 1; i <= process_runs; i++)); do
    rm -rf "$dir/data-$i" "$dir/partners-$i.toml"
  done
}
trap cleanup EXIT

echo "bench folder: $dir ($(stat -f -c %T "$dir")), $runs run(s) each, $(nproc) cores" >&2

# Generates $1 (a file name in $dir) with the generator arguments that follow, unless it exists.
gen() {
  local name=$1
  shift
  if [ -s "$dir/$name" ]; then
    echo "reusing $name" >&2
    return
  fi
  echo "generating $name: generate $*" >&2
  "$generate" "$@" --to "$gateway_id" >"$dir/$name.part"
  mv "$dir/$name.part" "$dir/$name"
}

files=()
for mb in $sizes; do
  gen "realistic-$mb.x12" "$mb" "$seed"
  files+=("realistic-$mb.x12")
done
if [ "$small_mb" != 0 ]; then
  gen "small-sets-$small_mb.x12" "$small_mb" "$seed" --small-sets
  files+=("small-sets-$small_mb.x12")
fi

rows=()
warnings=()

# measure FILE LABEL OK_CODES COMMAND...: runs COMMAND $runs times (stdout to $stdout_to,
# default $dir/last.out, and stderr to $dir/last.err), then adds a row. OK_CODES: the exit codes that count as a
# measurement, "0" or "0 3" (3: ran, with findings or rejections: a warning).
measure() {
  local file=$1 label=$2 ok=$3
  shift 3
  local bytes times=() peak=0 i rc start end wall rss
  bytes=$(stat -c %s "$dir/$file")
  for ((i = 1; i <= runs; i++)); do
    local run=("$@")
    if [ "$label" = process ]; then
      process_runs=$((process_runs + 1))
      rm -rf "$dir/data-$process_runs"
      write_config "partners-$process_runs.toml" "data-$process_runs"
      # The command as given, with this run's configuration for the shared one.
      run=()
      for arg in "$@"; do
        if [ "$arg" = "$config" ]; then
          run+=("$dir/partners-$process_runs.toml")
        else
          run+=("$arg")
        fi
      done
      "$x12gate" --config "$dir/partners-$process_runs.toml" init >/dev/null 2>"$dir/init.err" ||
        die "x12gate init failed: $(cat "$dir/init.err")"
    fi
    set +e
    start=$EPOCHREALTIME
    /usr/bin/time -f '%e %M' -o "$dir/time.txt" "${run[@]}" >"${stdout_to:-$dir/last.out}" 2>"$dir/last.err"
    rc=$?
    end=$EPOCHREALTIME
    set -e
    if [[ " $ok " != *" $rc "* ]]; then
      echo "large.sh: $label on $file exited $rc:" >&2
      tail -n 5 "$dir/last.err" "$dir/last.out" >&2
      exit 1
    fi
    if [ "$rc" != 0 ] && [ "$i" = 1 ]; then
      warnings+=("$label on $file exited $rc (the file should be clean): $(grep -v ' accepted$' "$dir/last.out" | head -n 3 | tr '\n' ' ')")
    fi
    # The last line ("Command exited with non-zero status 3" may come first). %e has only
    # two decimals, so the wall time is taken around it in microseconds (the fork and exec of
    # /usr/bin/time add about a millisecond); %M is the peak RSS in KiB.
    read -r _ rss < <(tail -n 1 "$dir/time.txt")
    wall=$(awk -v a="$start" -v b="$end" 'BEGIN { printf "%.3f", b - a }')
    times+=("$wall")
    if ((rss > peak)); then peak=$rss; fi
    echo "  $file $label run $i: ${wall} s, $((rss / 1024)) MiB" >&2
  done
  rows+=("$(printf '%s\n' "${times[@]}" | sort -g | awk -v f="$file" -v b="$bytes" -v l="$label" -v p="$peak" '
    { t[NR] = $1 }
    END {
      m = NR % 2 ? t[(NR + 1) / 2] : (t[NR / 2] + t[NR / 2 + 1]) / 2
      rate = m > 0 ? sprintf("%.0f", b / 1e6 / m) : "-"
      printf "| %s | %.0f | %s | %.3f | %s | %.1f |", f, b / 1e6, l, m, rate, p / 1024
    }')")
}

for f in "${files[@]}"; do
  path=$dir/$f
  echo "$f:" >&2
  measure "$f" "memchr floor" 0 "$count_terminators" "$path"
  if [ -n "$x12pp" ]; then
    stdout_to=/dev/null measure "$f" x12pp 0 "$x12pp" "$path"
  else
    echo "  x12pp: not on PATH and X12PP not set, skipped" >&2
  fi
  measure "$f" "validate --envelope" "0 3" "$x12gate" --config "$config" validate --envelope "$path"
  measure "$f" validate "0 3" "$x12gate" --config "$config" validate "$path"
  if [ "${BENCH_PROCESS:-1}" != 0 ]; then
    measure "$f" process "0 3" "$x12gate" --config "$config" process "$path"
  fi
  # edi holds the whole document as a tree, about nine times the file: last, so that the
  # page cache it pushes out is not what the others read from.
  if (($(stat -c %s "$path") <= edi_max_mb * 1000000)); then
    measure "$f" edi 0 "$edi_parse" "$path"
  else
    echo "  edi: $f is over BENCH_EDI_MAX_MB=$edi_max_mb, skipped" >&2
  fi
done

echo
echo "$(uname -m), $(nproc) cores, $runs run(s) each, median wall time, peak RSS the highest of the runs"
[ -n "$x12pp" ] || echo "x12pp: not on PATH and X12PP not set, skipped"
echo
echo "| file | size MB | command | median s | MB/s | peak RSS MiB |"
echo "|---|---:|---|---:|---:|---:|"
printf '%s\n' "${rows[@]}"
if [ "${#warnings[@]}" -gt 0 ]; then
  echo
  printf 'warning: %s\n' "${warnings[@]}"
fi
echo
echo "files and config kept in $dir (each run's process folders are removed on exit)"
