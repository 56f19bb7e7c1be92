#!/usr/bin/env bash
# whyslow analyze on adversarial captures, against wall-time and memory ceilings.
#
# bench/gen_adversarial.py writes each kind (a SYN flood that never closes,
# one-packet connections, an ACK storm, a body in pathological order, many
# keep-alive exchanges) into a temporary directory; each is timed with
#   whyslow analyze FILE --json
# under /usr/bin/time (median wall seconds of RUNS=3, max RSS). A row is OVER
# when it passes a ceiling below, WRONG when whyslow's exchange count differs
# from the generator's; the exit status is 1 if any row is not ok.
#
#   bench/analyze_adversarial.sh
#   SYN_FLOOD=20000 ONE_PACKET=20000 ACK_STORM=20000 OUT_OF_ORDER=2000 MANY_EXCHANGES=20000 bench/analyze_adversarial.sh
#   TSHARK=1 bench/analyze_adversarial.sh        # also tshark -q -z conv,tcp (slow)
#   WHYSLOW=path/to/whyslow bench/analyze_adversarial.sh   # no cargo build
#   KEEP=1 bench/analyze_adversarial.sh          # keep the captures (printed path)
set -euo pipefail
cd "$(dirname "$0")/.."

# Packets (N of gen_adversarial.py) per kind; 0 skips a kind.
SYN_FLOOD=${SYN_FLOOD:-2000000}
ONE_PACKET=${ONE_PACKET:-2000000}
ACK_STORM=${ACK_STORM:-2000000}
OUT_OF_ORDER=${OUT_OF_ORDER:-200000}
MANY_EXCHANGES=${MANY_EXCHANGES:-1000000}

# Peak RSS ceiling, from the default bounds (crates/wire/src/flow/mod.rs):
#   flow table: --max-flows 10 000 × ~21 KiB (4 KiB head buffer each way,
#     64 pending request labels × 200 B, the last head each way
#     remembered, 512 B each)                                      ≈ 210 MB
#   out-of-order bytes held over all flows (DEFAULT_MAX_HELD_TOTAL)    64 MiB
#   evidence: 200 000 exchanges × 200 B + 100 000 connections × 1 KB ≈ 140 MB
#   two analysis windows (one analyzed while the next fills): 50 000
#     exchanges and their connections each                         ≈ 120 MB
# ≈ 534 MB, rounded up:
RSS_CEILING_MB=576
# Wall ceiling: 10 µs per packet, i.e. at least 100 000 packets/s on this
# machine (10 s per million packets), and never under 1 s (start-up).
WALL_US_PER_PACKET=10
WALL_FLOOR_S=1

. bench/lib.sh
need_packages time
if [ "${TSHARK:-}" = 1 ]; then need_packages tshark; fi
if [ -z "${WHYSLOW:-}" ]; then
  cargo build --release -q -p whyslow
  WHYSLOW=$PWD/target/release/whyslow
fi

dir=$(mktemp -d /tmp/whyslow-adversarial.XXXXXX)
cleanup() { if [ -n "${KEEP:-}" ]; then echo "kept: $dir"; else rm -rf "$dir"; fi; }
trap cleanup EXIT

row='%-15s %10s %8s %7s %8s %8s %8s %15s %-6s %9s %8s\n'
printf "$row" kind packets "file MB" "wall s" "RSS MB" "max s" "max MB" "exchanges/want" status "tshark s" "x faster"
fail=0
for spec in syn-flood:$SYN_FLOOD one-packet:$ONE_PACKET ack-storm:$ACK_STORM \
            out-of-order:$OUT_OF_ORDER many-exchanges:$MANY_EXCHANGES; do
  kind=${spec%%:*} n=${spec#*:}
  [ "$n" -gt 0 ] || continue
  cap=$dir/$kind.pcap
  # The generator's truth line: "KIND: packets=P connections=C exchanges=E".
  truth=$(python3 bench/gen_adversarial.py "$kind" "$cap" --count "$n" 2>&1 >/dev/null)
  packets=$(grep -oE 'packets=[0-9]+' <<<"$truth" | cut -d= -f2)
  want=$(grep -oE 'exchanges=[0-9]+' <<<"$truth" | cut -d= -f2)
  file_mb=$(awk -v b="$(stat -c %s "$cap")" 'BEGIN {printf "%.1f", b / 1e6}')

  read -r w_s w_kb < <(timed "$dir/w" "$WHYSLOW" analyze "$cap" --json)
  got=$(python3 -c 'import json, sys; print(json.load(sys.stdin)["capture"]["exchanges"])' \
        <"$dir/w.out" 2>/dev/null || echo '?')
  max_s=$(awk -v p="$packets" -v us="$WALL_US_PER_PACKET" -v f="$WALL_FLOOR_S" \
          'BEGIN {c = p * us / 1e6; printf "%.1f", (c > f ? c : f)}')
  status=ok
  if awk -v w="$w_s" -v c="$max_s" 'BEGIN {exit !(w > c)}' || [ $((w_kb / 1024)) -gt "$RSS_CEILING_MB" ]; then
    status=OVER
  elif [ "$got" != "$want" ]; then
    status=WRONG
  fi
  [ "$status" = ok ] || fail=1

  t_s=- ratio=-
  if [ "${TSHARK:-}" = 1 ]; then
    read -r t_s _ < <(RUNS=1 timed "$dir/t" tshark -r "$cap" -q -z conv,tcp)
    ratio=$(awk -v t="$t_s" -v w="$w_s" 'BEGIN {printf "%.1f", t / (w > 0 ? w : 0.01)}')
  fi
  printf "$row" "$kind" "$packets" "$file_mb" "$w_s" $((w_kb / 1024)) "$max_s" "$RSS_CEILING_MB" \
    "$got/$want" "$status" "$t_s" "$ratio"
  [ -n "${KEEP:-}" ] || rm -f "$cap"
done
exit "$fail"
