#!/usr/bin/env bash
# whyslow load vs wrk, oha and hey against the same nginx (1 worker, a small
# static body on 127.0.0.1), same connections and duration, in one run.
# Each tool runs ROUNDS times, interleaved; the median of its rounds is kept.
# Requests are counted from each tool's own output and, as a cross-check, in
# nginx's access log; CPU is the tool's user+system time from /usr/bin/time.
# Prints requests/s and CPU per request, each as a ratio to wrk's.
#
#   CONNECTIONS=32 DURATION=5 ROUNDS=7 bench/load_vs_peers.sh   (about 4 minutes)
set -euo pipefail
cd "$(dirname "$0")/.."
CONNECTIONS=${CONNECTIONS:-32}
DURATION=${DURATION:-5}
ROUNDS=${ROUNDS:-7}

. bench/lib.sh
need_packages nginx-light wrk hey time python3
export PATH="$HOME/.cargo/bin:$PATH"
command -v oha >/dev/null || cargo install oha --locked
cargo build --release -q -p whyslow
whyslow=$PWD/target/release/whyslow

dir=$(mktemp -d)
port=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')
printf 'hello, world\n' >"$dir/index.html"
chmod 755 "$dir"; chmod 644 "$dir/index.html"   # nginx's worker runs as nobody
cat >"$dir/nginx.conf" <<EOF
worker_processes 1;
daemon off;
pid $dir/nginx.pid;
error_log $dir/error.log;
events { worker_connections 4096; }
http {
  access_log $dir/access.log combined buffer=256k flush=1s;
  keepalive_requests 10000000;
  server { listen 127.0.0.1:$port; root $dir; }
}
EOF
nginx -c "$dir/nginx.conf" -p "$dir" & nginx_pid=$!
trap 'kill $nginx_pid 2>/dev/null; wait $nginx_pid 2>/dev/null; rm -rf "$dir"' EXIT
url="http://127.0.0.1:$port/index.html"
for _ in $(seq 50); do curl -sf -o /dev/null "$url" && break; sleep 0.1; done

# The command line of each tool, and how to read its own count of 200 responses.
cmd_wrk() { echo wrk -t2 -c"$CONNECTIONS" -d"${DURATION}s" "$url"; }
cmd_whyslow() { echo "$whyslow" load -q --json -c "$CONNECTIONS" --duration "${DURATION}s" "$url"; }
cmd_oha() { echo oha --no-tui --output-format json -c "$CONNECTIONS" -z "${DURATION}s" "$url"; }
cmd_hey() { echo hey -c "$CONNECTIONS" -z "${DURATION}s" "$url"; }
count_wrk() { awk '/requests in/ {n = $1} /Non-2xx/ {bad = $NF} END {if (n != "") print n - bad}' "$1"; }
count_whyslow() { python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["load"]["statuses"].get("200", 0))' "$1"; }
count_oha() { python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["statusCodeDistribution"].get("200", 0))' "$1"; }
count_hey() { awk '/\[200\]/ {print $2}' "$1"; }

logged() { sleep 1.2; wc -l <"$dir/access.log"; }   # nginx flushes its log buffer every second
read -r -a tools <<<"${TOOLS:-wrk whyslow oha hey}"   # wrk first: the others are ratios to it
results=$dir/results
for round in $(seq "$ROUNDS"); do
  for tool in "${tools[@]}"; do
    before=$(logged)
    # shellcheck disable=SC2046 # the command line is split on purpose
    /usr/bin/time -f '%U %S' -o "$dir/cpu" $("cmd_$tool") >"$dir/out"
    after=$(logged)
    count=$("count_$tool" "$dir/out")
    [ -n "$count" ] || { echo "$tool: no request count in its output:" >&2; tail -20 "$dir/out" >&2; exit 1; }
    read -r user sys <"$dir/cpu"
    echo "$tool $round $count $((after - before)) $user $sys" >>"$results"
    echo "round $round: $tool $count requests (nginx logged $((after - before))), cpu ${user}u ${sys}s" >&2
  done
done

python3 - "$results" "$DURATION" "$CONNECTIONS" <<'EOF'
import statistics, sys
rows = [l.split() for l in open(sys.argv[1])]
duration, connections = float(sys.argv[2]), sys.argv[3]
tools = []
for r in rows:
    if r[0] not in tools:
        tools.append(r[0])
def med(tool, col):
    return statistics.median(float(r[col]) for r in rows if r[0] == tool)
stats = {}
for t in tools:
    runs = [r for r in rows if r[0] == t]
    rps = statistics.median(float(r[2]) / duration for r in runs)
    logged = statistics.median(float(r[3]) / duration for r in runs)
    cpu_us = statistics.median((float(r[4]) + float(r[5])) * 1e6 / max(float(r[2]), 1) for r in runs)
    stats[t] = (rps, logged, cpu_us)
w = stats["wrk"]
print(f"nginx 1 worker, {connections} connections, {duration:.0f} s per run, median of {len(rows)//len(tools)} rounds")
print(f"{'tool':<10}{'req/s':>10}{'nginx log':>11}{'vs wrk':>8}{'CPU µs/req':>12}{'vs wrk':>8}")
for t in tools:
    rps, logged, cpu = stats[t]
    print(f"{t:<10}{rps:>10.0f}{logged:>11.0f}{rps / w[0]:>7.2f}x{cpu:>12.2f}{cpu / w[2]:>7.2f}x")
EOF
