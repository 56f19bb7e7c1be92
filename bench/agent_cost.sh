#!/usr/bin/env bash
# The agent's own cost against the traffic it watches: CPU and peak memory
# per 1 000 requests/s of the lab's busy service (orm-storm fixed: 3 SQL
# statements a checkout, so 4 exchanges a request), next to the same
# traffic captured by tcpdump and by `whyslow capture`, then analyzed. One
# run, the same rate for each; the ratios are printed.
#   RATE=400 SECS=20 bench/agent_cost.sh
set -euo pipefail
cd "$(dirname "$0")/.."
. bench/lib.sh
need_packages tcpdump
BIN=$(whyslow_bin)
RATE=${RATE:-400}
SECS=${SECS:-20}
WINDOW=${WINDOW:-5}
dir=$(mktemp -d)
trap 'kill $lab 2>/dev/null || true; rm -rf "$dir"' EXIT

"$BIN" lab run orm-storm --fixed >"$dir/lab.out" &
lab=$!
for _ in $(seq 50); do [ -s "$dir/lab.out" ] && break; sleep 0.1; done
url=$(head -1 "$dir/lab.out")

# peak_rss PID: the highest VmRSS of a running process, sampled every
# 100 ms until it exits, in KiB (the same reading for every tool: a capture
# ring's mapped pages count as they are touched).
peak_rss() {
  local pid=$1 peak=0 kib
  while kib=$(awk '/^VmRSS:/ { print $2 }' "/proc/$pid/status" 2>/dev/null) && [ -n "$kib" ]; do
    [ "$kib" -gt "$peak" ] && peak=$kib
    sleep 0.1
  done
  echo "$peak"
}

# measure NAME COMMAND…: runs COMMAND under /usr/bin/time while the load
# runs; prints "NAME cpu_s peak_kib".
measure() {
  local name=$1; shift
  /usr/bin/time -f "%U %S" -o "$dir/$name.time" "$@" >"$dir/$name.out" 2>"$dir/$name.err" &
  local watched=$! child=""
  for _ in $(seq 50); do child=$(pgrep -P "$watched" | head -1) && [ -n "$child" ] && break; sleep 0.02; done
  # Under `timeout`, the tool is its child.
  if [ "$(cat "/proc/$child/comm" 2>/dev/null)" = timeout ]; then
    local inner=""
    for _ in $(seq 50); do inner=$(pgrep -P "$child" | head -1) && [ -n "$inner" ] && break; sleep 0.02; done
    child=$inner
  fi
  peak_rss "$child" >"$dir/$name.peak" &
  local sampler=$!
  sleep 0.5
  "$BIN" load -q --rate "$RATE" --duration "${SECS}s" -c 16 "$url" >"$dir/$name.load"
  wait "$watched" || true
  wait "$sampler"
  read -r user sys < <(tail -1 "$dir/$name.time")
  echo "$name $(echo "$user + $sys" | bc -l) $(cat "$dir/$name.peak")"
}

windows=$(( (SECS + WINDOW - 1) / WINDOW + 1 ))
agent=$(measure agent "$BIN" agent -i lo --window "${WINDOW}s" --windows "$windows" -w "$dir/ring")
capture=$(measure capture "$BIN" capture -i lo --duration "$((SECS + 2))s" -w "$dir/whyslow.pcapng")
analyze_time=$(/usr/bin/time -f "%U %S %M" "$BIN" analyze "$dir/whyslow.pcapng" 2>&1 >/dev/null | tail -1)
# (analyze's peak from its rusage: it maps no ring.)
tcpdump=$(measure tcpdump timeout -s INT "$((SECS + 2))" tcpdump -i lo -w "$dir/tcpdump.pcap" -s 262144 -B 131072 -q)

read -r _ agent_cpu agent_kib <<<"$agent"
read -r _ cap_cpu cap_kib <<<"$capture"
read -r an_user an_sys an_kib <<<"$analyze_time"
read -r _ td_cpu td_kib <<<"$tcpdump"
plain_cpu=$(echo "$cap_cpu + $an_user + $an_sys" | bc -l)
plain_kib=$(( cap_kib > an_kib ? cap_kib : an_kib ))
per=$(echo "$RATE / 1000" | bc -l)
printf '%s requests/s for %s s (windows of %s s)\n' "$RATE" "$SECS" "$WINDOW"
# Of one CPU over the run, per 1 000 requests/s.
share() { echo "$1 / $SECS / $per * 100" | bc -l; }
printf '%-28s %26s %10s\n' "" "% of a CPU per 1000 req/s" "peak MiB"
printf '%-28s %26.1f %10.1f\n' "whyslow agent" "$(share "$agent_cpu")" "$(echo "$agent_kib / 1024" | bc -l)"
printf '%-28s %26.1f %10.1f\n' "whyslow capture + analyze" "$(share "$plain_cpu")" "$(echo "$plain_kib / 1024" | bc -l)"
printf '%-28s %26.1f %10.1f\n' "tcpdump (capture only)" "$(share "$td_cpu")" "$(echo "$td_kib / 1024" | bc -l)"
printf 'agent / (capture + analyze): CPU %.2fx, memory %.2fx\n' \
  "$(echo "$agent_cpu / $plain_cpu" | bc -l)" "$(echo "$agent_kib / $plain_kib" | bc -l)"
