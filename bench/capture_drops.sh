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

sudo_if_needed() { if [ "$(id -u)" -eq 0 ]; then "$@"; else sudo "$@"; fi; }
need=()
for p in nginx-light wrk tcpdump; do dpkg -s "$p" >/dev/null 2>&1 || need+=("$p"); done
if [ "${#need[@]}" -gt 0 ]; then
  sudo_if_needed apt-get update -qq
  sudo_if_needed env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${need[@]}"
fi
cargo build --release -q -p whyslow
bin=$PWD/target/release/whyslow

dir=$(mktemp -d /tmp/whyslow-drops.XXXXXX)
chmod 755 "$dir"
cleanup() {
  [ -f "$dir/nginx.pid" ] && kill "$(cat "$dir/nginx.pid")" 2>/dev/null
  sleep 0.2
  rm -rf "$dir"
}
trap cleanup EXIT

mkdir -p "$dir/www" "$dir/logs"
head -c 120 /dev/zero | tr '\0' 'x' >"$dir/www/index.html"
chmod -R a+rX "$dir/www"
cat >"$dir/nginx.conf" <<EOF
worker_processes 1;
daemon on;
pid $dir/nginx.pid;
error_log $dir/logs/error.log;
events { worker_connections 1024; }
http {
  access_log off;
  keepalive_timeout 60s;
  server {
    listen 127.0.0.1:$PORT;
    location / { root $dir/www; }
  }
}
EOF
nginx -p "$dir/" -c "$dir/nginx.conf" -e "$dir/logs/error.log"
for _ in $(seq 50); do curl -sf -o /dev/null "http://127.0.0.1:$PORT/" && break; sleep 0.1; done

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
