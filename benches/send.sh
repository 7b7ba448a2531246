#!/usr/bin/env bash
# `send` of N of our documents (default 10,000 invoices to one partner), documents per second,
# and where the time goes, beside the disk's durable floors measured in the same run:
#   check    `send --check` of every document: read, rendered, validated, named; nothing taken
#            (validation and rendering alone)
#   shares   `send --timings` of each process, summed: reading the JSON and rendering,
#            validation and naming, the registry (claims with the final rendering, marks), files
#   send     `send` of every document, on a fresh gateway: the check, then per document the
#            claim and numbers (one registry commit), the interchange's file (written,
#            fsynced, renamed), and the mark sent (a second commit)
#   replay   `send` of every document again: each answered from its first sending
#   floors   examples/floors.rs with the bytes and count of the interchanges written: (a) the
#            log floor (appended to one file, an fdatasync per batch), (b) the per-file floor
#            (one file per document: temporary name, write, fsync, rename)
# Registry and files = send - check. Documents are passed 1,000 per process (xargs).
# BATCH_MS=60000 gives the partner `outbound_batch_ms`: each process's documents then share
# interchanges, 256 sets each; the floors stay those of one document each (the bytes and the
# count of documents, not of interchanges), so that the two runs compare.
#
#   cargo build --release && cargo build --release -p testdata --example floors
#   benches/send.sh target/release/x12gate [N]
#   BATCH_MS=60000 benches/send.sh target/release/x12gate [N]
set -euo pipefail
bin=$(realpath "$1"); n=${2:-10000}
floors=$(dirname "$bin")/examples/floors
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
mkdir -p "$work/docs"
printf '[gateway]\nid_qualifier = "ZZ"\nid = "X12GATE"\ndatabase = "data/x12gate.db"\noutbox = "data/outbox"\nout = "data/out"\n\n[[partner]]\nname = "Acme"\nid_qualifier = "ZZ"\nid = "ACME"\n' > "$work/partners.toml"
if [ -n "${BATCH_MS:-}" ]; then printf 'outbound_batch_ms = %d\n' "$BATCH_MS" >> "$work/partners.toml"; fi
for i in $(seq 1 "$n"); do
  printf '{"partner":"ZZ:ACME","set":{"st":["810",null],"schema":"004010/810","content":{"BIG":{"date_01":"20261201","invoice_number_02":"INV-%06d","purchase_order_number_04":"PO-%06d"},"N1_loop":[{"N1":{"entity_identifier_code_01":"ST","name_02":"ACME DC 7","identification_code_qualifier_03":"92","identification_code_04":"0007"}}],"IT1_loop":[{"IT1":{"assigned_identification_01":"1","quantity_invoiced_02":"120","unit_or_basis_for_measurement_code_03":"EA","unit_price_04":"4.25","product_service_id_qualifier_06":"VN","product_service_id_07":"AC-100"}},{"IT1":{"assigned_identification_01":"2","quantity_invoiced_02":"48","unit_or_basis_for_measurement_code_03":"CA","unit_price_04":"18.90","product_service_id_qualifier_06":"VN","product_service_id_07":"AC-220"}}],"TDS":{"amount_01":"141720"},"CTT":{"number_of_line_items_01":"2"}}}}\n' "$i" "$i" > "$work/docs/$i.json"
done
(cd "$work" && "$bin" init >/dev/null)
ms() { local s e; sync; s=$(date +%s%N); (cd "$work" && "$@" >/dev/null 2>&1) || true; e=$(date +%s%N); echo $(( (e - s) / 1000000 )); }
each() { find docs -name '*.json' -print0 | sort -z | xargs -0 -n 1000 "$bin" send "$@"; }
export -f each; export bin
check=$(ms bash -c 'each --check')
s=$(date +%s%N); sync
(cd "$work" && each --timings 2> "$work/timings" >/dev/null) || true
send=$(( ($(date +%s%N) - s) / 1000000 ))
replay=$(ms bash -c 'each')
# `send --timings` of each process: rendering, validation, registry, files, summed.
read -r t_render t_valid t_registry t_files < <(awk '/^x12gate: send: rendering/ {
  r += $4; v += $7; g += $10; f += $13 } END { print r+0, v+0, g+0, f+0 }' "$work/timings")
files=$(find "$work/data/outbox" -maxdepth 1 -name '*.810.x12' | wc -l)
bytes=$(find "$work/data/outbox" -maxdepth 1 -name '*.810.x12' -printf '%s\n' | awk '{s+=$1} END {print s+0}')
sync
# The floors of one document each: the log floor syncs every 256 documents, as one commit of
# `send` covers 256 documents.
fl=$("$floors" "$work" "$bytes" "$n" "$n")
log_s=$(echo "$fl" | awk '$1 == "log" {print $2}')
file_s=$(echo "$fl" | awk '$1 == "per-file" {print $2}')
rate() { echo $(( n * 1000 / ($1 > 0 ? $1 : 1) )); }
floor_ms() { awk -v s="$1" 'BEGIN { printf "%d", s * 1000 }'; }
log_ms=$(floor_ms "$log_s"); file_ms=$(floor_ms "$file_s")
echo "send of $n invoices ($files interchanges, $bytes bytes${BATCH_MS:+, outbound_batch_ms = $BATCH_MS})"
pct() { echo $(( $1 * 100 / (send > 0 ? send : 1) )); }
echo "  check (validation, rendering):  ${check} ms, $(rate "$check") documents/s, $(pct "$check")% of send"
echo "  send:                           ${send} ms, $(rate "$send") documents/s"
echo "    reading JSON and rendering:   ${t_render} ms, $(pct "$t_render")%"
echo "    validation and naming:        ${t_valid} ms, $(pct "$t_valid")%"
echo "    registry (claims, marks):     ${t_registry} ms, $(pct "$t_registry")%"
echo "    files (written, synced):      ${t_files} ms, $(pct "$t_files")%"
echo "    the rest (processes, reads):  $(( send - t_render - t_valid - t_registry - t_files )) ms"
echo "  replay (sent before):           ${replay} ms, $(rate "$replay") documents/s"
echo "  log floor:                      ${log_ms} ms; send is $(awk -v a="$send" -v b="$log_ms" 'BEGIN { printf "%.1f", a / (b > 0 ? b : 1) }')x it"
echo "  per-file floor:                 ${file_ms} ms; send is $(awk -v a="$send" -v b="$file_ms" 'BEGIN { printf "%.2f", a / (b > 0 ? b : 1) }')x it"
