#!/usr/bin/env bash
# Live capture at the highest loopback rate wrk drives (wrk -t2 -c64 against
# nginx with one worker and a small static body): packets captured and
# dropped by the kernel, whyslow capture vs tcpdump, one after the other on
# the same load for the same duration.
#
#   SECS=20 bench/capture_drops.sh
set -euo pipefail
cd "$(dirname "$0")/.."
SECS=${SECS:-10}
PORT=${PORT:-18481}

. bench/lib.sh
need_packages nginx-light wrk tcpdump
cargo build --release -q -p whyslow
bin=$PWD/target/release/whyslow

dir=$(mktemp -d /tmp/whyslow-drops.XXXXXX)
cleanup() {
  stop_nginx "$dir"
  rm -rf "$dir"
}
trap cleanup EXIT

start_nginx "$dir" "$PORT" 120

load=(wrk -t2 -c64 -d"${SECS}s" "http://127.0.0.1:$PORT/")
rps() { awk '/Requests\/sec/ {print $2}' "$1"; }

echo "== whyslow capture, ${load[*]}"
sudo_if_needed "$bin" capture -i lo -p "$PORT" -w "$dir/w.pcapng" -- "${load[@]}" >"$dir/w.wrk" 2>"$dir/w.err"
# "N packets (B bytes) written to FILE; D dropped by the kernel"
w_pkts=$(grep -oE '^[0-9]+ packets' "$dir/w.err" | grep -oE '[0-9]+')
w_drop=$(grep -oE '[0-9]+ dropped by the kernel' "$dir/w.err" | grep -oE '^[0-9]+')
w_rps=$(rps "$dir/w.wrk")
rm -f "$dir/w.pcapng"

echo "== tcpdump, ${load[*]}"
# Started directly (not through a function) so that $! is tcpdump itself
# (or sudo, which passes signals on); TERM, as background jobs ignore INT.
sudo_cmd=(); [ "$(id -u)" -eq 0 ] || sudo_cmd=(sudo)
"${sudo_cmd[@]}" tcpdump -Z root -i lo -s 0 -w "$dir/t.pcap" "tcp port $PORT" 2>"$dir/t.err" &
tcpdump_pid=$!
for _ in $(seq 100); do grep -q listening "$dir/t.err" 2>/dev/null && break; sleep 0.05; done
"${load[@]}" >"$dir/t.wrk"
sleep 0.2
kill -TERM "$tcpdump_pid"
wait "$tcpdump_pid" || true
t_pkts=$(awk '/packets captured/ {print $1}' "$dir/t.err")
t_drop=$(awk '/packets dropped by kernel/ {print $1}' "$dir/t.err")
t_rps=$(rps "$dir/t.wrk")

echo
printf '%-18s %14s %12s %14s %8s\n' "${SECS}s of wrk" "wrk req/s" "captured" "kernel drops" "drop %"
for row in "whyslow capture|$w_rps|$w_pkts|$w_drop" "tcpdump|$t_rps|$t_pkts|$t_drop"; do
  IFS='|' read -r name r p d <<<"$row"
  awk -v n="$name" -v r="$r" -v p="$p" -v d="$d" 'BEGIN {
    printf "%-18s %14s %12d %14d %7.2f%%\n", n, r, p, d, (p + d > 0 ? 100 * d / (p + d) : 0) }'
done
