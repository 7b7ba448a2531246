#!/usr/bin/env bash
# Throughput against the durable floor (issue 40 item 6): `process` in each configuration, next
# to two floors of the same disk measured in the same run, and the readers against the memchr
# floor; one table, every figure also a ratio to its floor.
#
#   cargo build --release
#   benches/throughput.sh target/release/x12gate                 # the default corpora
#   benches/throughput.sh target/release/x12gate FILE...         # your own files
#   BENCH_RUNS=1 benches/throughput.sh target/release/x12gate /tmp/g2.x12   # a quick run
#   X12PP=/tmp/x12pp/bin/x12pp benches/throughput.sh ...         # with x12pp, as large.sh
#
# BIN is the binary measured (it may be another build's: the script measures configurations,
# not internals). The helpers come from this repository, built here (honours CARGO_TARGET_DIR):
# the examples `generate`, `floors` and `count_terminators` of crates/testdata and `erp`.
#
# Corpora (generated into $BENCH_DIR, default a fresh `mktemp -d` under /tmp, reused when
# already there: the generator gives the same bytes for the same arguments), unless FILEs:
#   realistic-20.x12   generate 20 7 --to X12GATE
#   realistic-100.x12  generate 100 1 --to X12GATE
#   small-sets-10.x12  generate 10 3 --one-interchange --small-sets --to X12GATE (58,830 sets)
# The gateway is ZZ:$BENCH_GATEWAY (default X12GATE); each sender found in a file's ISAs is a
# partner (schema validation, 997, structured translation: the defaults).
#
# For each corpus, $BENCH_RUNS rounds (default 3), each on fresh data folders, alternating:
#   process            no [[destination]]: documents in out/ (the default)
#   --no-deliver       the same, `process --no-deliver`
#   http --no-deliver  an HTTP destination (examples/erp.rs on 127.0.0.1, a fresh one each run)
#   http               the same, delivering before it exits
#   folder             a `folder` destination with a `path` of its own
#   floors             examples/floors.rs with the bytes and count of every file under out/
#                      of the round's first run: (a) the log floor, the same bytes appended to
#                      one file with an fdatasync per 256 interchanges' worth of documents, and
#                      (b) the per-file floor, one file per document (temporary name, write,
#                      fsync, rename), serially.
# Each run starts after a `sync`. Each run: wall seconds (median of the rounds), MB/s of input, documents/s (the documents of
# out/), peak RSS (/usr/bin/time %M, the highest of the rounds), and documents/s as a ratio to
# each floor. The rounds' folders are removed after each round (an ext4 file created right
# after many deletions nearby is slower: see benches/large.sh).
# Then, on the largest file: the memchr floor (count_terminators), x12pp if $X12PP or on PATH,
# `validate --envelope` and `validate`, each with its ratio to the memchr floor.
# `process` and `validate` exiting 3 (findings, rejections) count, with a warning.
set -euo pipefail
export LC_ALL=C

die() {
  echo "throughput.sh: $*" >&2
  exit 1
}
[ $# -ge 1 ] || die "usage: benches/throughput.sh BIN [FILE...]"
bin=$(realpath "$1")
shift
[ -x "$bin" ] || die "$bin is not an executable"
[ -x /usr/bin/time ] || die "/usr/bin/time not found (apt-get install time)"
[ -n "${EPOCHREALTIME:-}" ] || die "needs bash 5 (EPOCHREALTIME)"
runs=${BENCH_RUNS:-3}
[[ $runs =~ ^[1-9][0-9]*$ ]] || die "BENCH_RUNS=$runs: expected a positive whole number"
gateway=${BENCH_GATEWAY:-X12GATE}

repo=$(cd "$(dirname "$0")/.." && pwd)
echo "building the helpers..." >&2
(cd "$repo" && cargo build --release --quiet -p testdata --example generate --example floors \
  --example count_terminators && cargo build --release --quiet --example erp)
target=${CARGO_TARGET_DIR:-$repo/target}
case "$target" in /*) ;; *) target=$repo/$target ;; esac
examples=$target/release/examples
x12pp=${X12PP:-$(command -v x12pp || true)}
[ -z "$x12pp" ] || [ -x "$x12pp" ] || die "X12PP=$x12pp is not an executable"

if [ -n "${BENCH_DIR:-}" ]; then
  dir=$BENCH_DIR
  mkdir -p "$dir"
else
  dir=$(mktemp -d /tmp/x12gate-throughput.XXXXXX)
fi
dir=$(cd "$dir" && pwd -P)
erp_pid=
cleanup() {
  [ -z "$erp_pid" ] || kill "$erp_pid" 2>/dev/null || true
  rm -rf "$dir/runs"
}
trap cleanup EXIT

files=()
if [ $# -gt 0 ]; then
  for f in "$@"; do files+=("$(realpath "$f")"); done
else
  gen() { # NAME ARGS...
    local name=$1
    shift
    if [ ! -s "$dir/$name" ]; then
      echo "generating $name: generate $* --to $gateway" >&2
      "$examples/generate" "$@" --to "$gateway" >"$dir/$name.part"
      mv "$dir/$name.part" "$dir/$name"
    fi
    files+=("$dir/$name")
  }
  gen realistic-20.x12 20 7
  gen realistic-100.x12 100 1
  gen small-sets-10.x12 10 3 --one-interchange --small-sets
fi
echo "bench folder: $dir ($(stat -f -c %T "$dir")), $runs round(s), $(nproc) cores" >&2

# config FOLDER KIND FILE: FOLDER/partners.toml with every folder under FOLDER/data; KIND is
# none, http:PORT or folder.
config() {
  local folder=$1 kind=$2 file=$3 destination=
  mkdir -p "$folder"
  case "$kind" in http:* | folder) destination=sink ;; esac
  {
    printf '[gateway]\nid_qualifier = "ZZ"\nid = "%s"\n' "$gateway"
    printf 'database = "data/x12gate.db"\noutbox = "data/outbox"\nout = "data/out"\n'
    printf 'inbox = "data/inbox"\narchive = "data/archive"\nrejected = "data/rejected"\nwork = "data/work"\n'
    grep -aoE 'ISA\*[^*]*\*[^*]*\*[^*]*\*[^*]*\*[^*]*\*[^*]*' "$file" | cut -d'*' -f6,7 | sort -u |
      while IFS='*' read -r q id; do
        id=${id%"${id##*[! ]}"}
        printf '\n[[partner]]\nname = "%s"\nid_qualifier = "%s"\nid = "%s"\n' "$id" "$q" "$id"
        [ -z "$destination" ] || printf 'destination = "%s"\n' "$destination"
      done
    case "$kind" in
    http:*)
      printf '\n[[destination]]\nname = "sink"\nkind = "http"\nurl = "http://127.0.0.1:%s/edi/inbound"\nresult_ref = "/order_id"\n' "${kind#http:}"
      ;;
    folder)
      printf '\n[[destination]]\nname = "sink"\nkind = "folder"\npath = "data/files"\n'
      ;;
    esac
  } >"$folder/partners.toml"
  "$bin" --config "$folder/partners.toml" init >/dev/null 2>"$folder/init.err" ||
    die "init failed: $(cat "$folder/init.err")"
}

# timed LOG COMMAND...: runs it under /usr/bin/time; sets $wall (s) and $rss (KiB); exit 0 or 3.
timed() {
  local log=$1 rc start end
  shift
  # The dirty pages of the runs before are written back first: on ext4 a commit's fsync
  # otherwise waits for them, and a run would pay for the one before it.
  sync
  set +e
  start=$EPOCHREALTIME
  /usr/bin/time -f '%e %M' -o "$log.time" "$@" >"$log.out" 2>"$log.err"
  rc=$?
  end=$EPOCHREALTIME
  set -e
  if [ "$rc" != 0 ] && [ "$rc" != 3 ]; then
    echo "throughput.sh: $* exited $rc:" >&2
    tail -n 5 "$log.err" "$log.out" >&2
    exit 1
  fi
  [ "$rc" = 0 ] || warnings+=("$(basename "$(dirname "$log")") $(basename "$log"): exited $rc: $(grep -v ' accepted$' "$log.out" | head -n 2 | tr '\n' ' ')")
  read -r _ rss < <(tail -n 1 "$log.time")
  wall=$(awk -v a="$start" -v b="$end" 'BEGIN { printf "%.3f", b - a }')
}

# process_run FOLDER KIND FILE ARGS...: one `process` run on fresh folders.
process_run() {
  local folder=$1 kind=$2 file=$3 port
  shift 3
  if [ "$kind" = http ]; then
    port=$((20000 + RANDOM % 20000))
    kind=http:$port
    "$examples/erp" --listen "127.0.0.1:$port" 2>/dev/null &
    erp_pid=$!
    for _ in $(seq 100); do
      curl -s -o /dev/null "http://127.0.0.1:$port/booked" && break
      sleep 0.05
    done
  fi
  config "$folder" "$kind" "$file"
  timed "$folder/process" "$bin" --config "$folder/partners.toml" process "$@" "$file"
  if [ -n "$erp_pid" ] && [ "$*" != --no-deliver ]; then
    # A run whose ERP booked less than every document timed something else (an ERP that did
    # not come up, a circuit opened): said with the figures.
    local booked want=${documents[$(basename "$file")]:-0}
    booked=$(curl -s "http://127.0.0.1:$port/booked" | grep -oE '"booked": *[0-9]+' | grep -oE '[0-9]+$' || echo 0)
    [ "${booked:-0}" -ge "$want" ] ||
      warnings+=("$(basename "$file") http: the ERP booked ${booked:-0} of $want documents")
  fi
  if [ -n "$erp_pid" ]; then
    kill "$erp_pid" 2>/dev/null || true
    wait "$erp_pid" 2>/dev/null || true
    erp_pid=
  fi
}

# Per corpus and configuration: the walls of the rounds, one per line, and the peak RSS.
declare -A walls peaks
warnings=()
labels=(process --no-deliver "http --no-deliver" http folder)
declare -A kinds=([process]=none [--no-deliver]=none ["http --no-deliver"]=http [http]=http [folder]=folder)
declare -A flags=([process]="" [--no-deliver]=--no-deliver ["http --no-deliver"]=--no-deliver [http]="" [folder]="")
declare -A documents out_bytes interchanges

for file in "${files[@]}"; do
  name=$(basename "$file")
  interchanges[$name]=$(grep -aoE 'ISA\*' "$file" | wc -l)
  for ((round = 1; round <= runs; round++)); do
    for label in "${labels[@]}"; do
      folder=$dir/runs/$round-${label//[ -]/}
      # shellcheck disable=SC2086 # the flag is one word or none
      process_run "$folder" "${kinds[$label]}" "$file" ${flags[$label]}
      walls[$name/$label]+="$wall "
      ((rss > ${peaks[$name/$label]:-0})) && peaks[$name/$label]=$rss
      echo "  $name $label, round $round: $wall s, $((rss / 1024)) MiB" >&2
      if [ "$label" = process ]; then
        out=$folder/data/out
        documents[$name]=$(find "$out" -type f | wc -l)
        out_bytes[$name]=$(find "$out" -type f -printf '%s\n' | awk '{ s += $1 } END { print s + 0 }')
      fi
    done
    sync
    "$examples/floors" "$dir/runs" "${out_bytes[$name]}" "${documents[$name]}" "${interchanges[$name]}" >"$dir/floors.out"
    while read -r floor seconds _; do
      walls[$name/$floor floor]+="$seconds "
      echo "  $name $floor floor, round $round: $seconds s" >&2
    done <"$dir/floors.out"
    rm -rf "$dir/runs"
  done
done

median() { tr ' ' '\n' | grep . | sort -g | awk '{ t[NR] = $1 } END { print NR % 2 ? t[(NR + 1) / 2] : (t[NR / 2] + t[NR / 2 + 1]) / 2 }'; }

echo
echo "$(uname -m), $(nproc) cores, load average $(cut -d' ' -f1-3 /proc/loadavg), $runs round(s), median wall time, peak RSS the highest of the rounds"
echo "BIN: $bin ($("$bin" --version 2>/dev/null || echo '?'))"
echo
echo "| corpus | run | s | MB/s | documents/s | peak RSS MiB | x log floor | x per-file floor |"
echo "|---|---|---:|---:|---:|---:|---:|---:|"
for file in "${files[@]}"; do
  name=$(basename "$file")
  bytes=$(stat -c %s "$file")
  docs=${documents[$name]}
  log=$(median <<<"${walls[$name/log floor]}")
  per_file=$(median <<<"${walls[$name/per-file floor]}")
  echo "| $name: $(awk -v b="$bytes" 'BEGIN { printf "%.1f MB", b / 1e6 }'), ${interchanges[$name]} interchanges, $docs documents | | | | | | | |"
  for floor in log per-file; do
    m=$(median <<<"${walls[$name/$floor floor]}")
    awk -v f="$floor" -v m="$m" -v b="${out_bytes[$name]}" -v d="$docs" -v l="$log" -v p="$per_file" \
      -v n="$((docs / interchanges[$name] * 256 > 0 ? docs / interchanges[$name] * 256 : 1))" 'BEGIN {
        what = f == "log" ? sprintf("(a) log floor: %.0f MB appended, fdatasync per %d documents", b / 1e6, n) : sprintf("(b) per-file floor: %d files, fsync each", d)
        printf "| | %s | %.3f | %.1f out | %.0f | | %.2f | %.2f |\n", what, m, b / 1e6 / m, d / m, l / m, p / m
      }'
  done
  for label in "${labels[@]}"; do
    m=$(median <<<"${walls[$name/$label]}")
    awk -v what="$label" -v m="$m" -v b="$bytes" -v d="$docs" -v r="${peaks[$name/$label]}" -v l="$log" -v p="$per_file" 'BEGIN {
        printf "| | process %s | %.3f | %.1f in | %.0f | %.1f | %.2f | %.2f |\n", what == "process" ? "" : what, m, b / 1e6 / m, d / m, r / 1024, l / m, p / m
      }'
  done
done

# The readers, on the largest file.
largest=$(for f in "${files[@]}"; do echo "$(stat -c %s "$f") $f"; done | sort -n | tail -n 1 | cut -d' ' -f2-)
name=$(basename "$largest")
bytes=$(stat -c %s "$largest")
config "$dir/runs/validate" none "$largest"
readers=("memchr floor")
[ -z "$x12pp" ] || readers+=(x12pp)
readers+=("validate --envelope" validate)
declare -A reader_walls reader_peaks
for ((round = 1; round <= runs; round++)); do
  for reader in "${readers[@]}"; do
    case "$reader" in
    "memchr floor") cmd=("$examples/count_terminators" "$largest") ;;
    x12pp) cmd=("$x12pp" "$largest") ;;
    "validate --envelope") cmd=("$bin" --config "$dir/runs/validate/partners.toml" validate --envelope "$largest") ;;
    validate) cmd=("$bin" --config "$dir/runs/validate/partners.toml" validate "$largest") ;;
    esac
    timed "$dir/runs/validate/reader" "${cmd[@]}"
    reader_walls[$reader]+="$wall "
    ((rss > ${reader_peaks[$reader]:-0})) && reader_peaks[$reader]=$rss
    echo "  $name $reader, round $round: $wall s, $((rss / 1024)) MiB" >&2
  done
done
floor=$(median <<<"${reader_walls[memchr floor]}")
envelope=$(median <<<"${reader_walls[validate --envelope]}")
echo
echo "| $name: $(awk -v b="$bytes" 'BEGIN { printf "%.1f MB", b / 1e6 }') | s | MB/s | peak RSS MiB | x memchr floor | x validate --envelope |"
echo "|---|---:|---:|---:|---:|---:|"
for reader in "${readers[@]}"; do
  m=$(median <<<"${reader_walls[$reader]}")
  awk -v what="$reader" -v m="$m" -v b="$bytes" -v r="${reader_peaks[$reader]}" -v f="$floor" -v e="$envelope" 'BEGIN {
      printf "| %s | %.3f | %.0f | %.1f | %.3f | %.2f |\n", what, m, b / 1e6 / m, r / 1024, f / m, e / m
    }'
done
[ -n "$x12pp" ] || echo "(x12pp: not on PATH and X12PP not set, skipped)"
if [ "${#warnings[@]}" -gt 0 ]; then
  echo
  printf 'warning: %s\n' "${warnings[@]}" | sort -u
fi
echo
echo "corpora kept in $dir"
