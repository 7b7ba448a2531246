#!/usr/bin/env bash
# Deliveries per second to a local HTTP endpoint, next to `process` alone, in one run:
#   (1) `process` with no destination (document files in out/, as without this feature);
#   (2) `process --no-deliver` with an HTTP destination (the outbox filled), then
#   (3) `deliver` draining it into the erp stand-in (examples/erp.rs) on 127.0.0.1.
# Each on a fresh registry; prints wall times, documents, and documents per second.
#
#   cargo build --release --example erp && cargo build --release
#   cargo run --release -p testdata --example generate 5 7 --to X12GATE > /tmp/g5.x12
#   benches/deliveries.sh target/release/x12gate /tmp/g5.x12
set -euo pipefail
bin=$(realpath "$1"); file=$(realpath "$2")
erp=$(dirname "$bin")/examples/erp
work=$(mktemp -d)
port=$(( 20000 + RANDOM % 20000 ))
"$erp" --listen "127.0.0.1:$port" 2>/dev/null &
erp_pid=$!
trap 'kill $erp_pid 2>/dev/null; rm -rf "$work"' EXIT
# The generator's senders (ISA05*ISA06), each configured as a partner.
senders=$(grep -aoE 'ISA\*[^~]*' "$file" | cut -d'*' -f6,7 | sort -u)
config() { # DESTINATION? -> partners.toml
  {
    printf '[gateway]\nid_qualifier = "ZZ"\nid = "X12GATE"\ndatabase = "data/x12gate.db"\noutbox = "data/outbox"\nout = "data/out"\n'
    while IFS='*' read -r q id; do
      id=$(echo "$id" | sed 's/ *$//')
      printf '\n[[partner]]\nname = "%s"\nid_qualifier = "%s"\nid = "%s"\n' "$id" "$q" "$id"
      [ -n "$1" ] && printf 'destination = "erp"\n'
    done <<< "$senders"
    [ -n "$1" ] && printf '\n[[destination]]\nname = "erp"\nkind = "http"\nurl = "http://127.0.0.1:%s/edi/inbound"\nresult_ref = "/order_id"\n' "$port"
  } > "$work/partners.toml"
  (cd "$work" && rm -rf data && "$bin" init >/dev/null)
}
ms() { local s e; s=$(date +%s%N); (cd "$work" && "$@" >/dev/null 2>&1) || true; e=$(date +%s%N); echo $(( (e - s) / 1000000 )); }
config ""
alone=$(ms "$bin" process "$file")
docs=$(cd "$work" && "$bin" documents --all --json | wc -l)
config yes
queued=$(ms "$bin" process --no-deliver "$file")
sent=$(ms "$bin" deliver --drain --timeout 600)
delivered=$(cd "$work" && "$bin" deliveries --state delivered --json | wc -l)
booked=$(curl -s "http://127.0.0.1:$port/booked" || echo '?')
echo "$(basename "$file"): $docs documents"
echo "  process alone (files in out/):         ${alone} ms, $(( docs * 1000 / (alone > 0 ? alone : 1) )) documents/s"
echo "  process --no-deliver (outbox filled):  ${queued} ms, $(( docs * 1000 / (queued > 0 ? queued : 1) )) documents/s"
echo "  deliver --drain to 127.0.0.1:$port:   ${sent} ms, $(( delivered * 1000 / (sent > 0 ? sent : 1) )) deliveries/s ($delivered delivered; stand-in: $booked)"
