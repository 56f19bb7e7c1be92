#!/usr/bin/env bash
# What tracing costs the traced: wrk against a server untraced, under
# `whyslow capture` (packets only),
# and under `whyslow capture --ebpf` with --pid (the server's processes) and
# with no filter (every process on the machine), in alternated rounds on
# the same server. Prints wrk's requests/s and mean latency per mode, each
# as a ratio to the untraced run, and whyslow's own CPU seconds.
# TARGET=nginx (default): one nginx worker serving a small static body,
# keep-alive, tens of thousands of requests/s: the worst case, almost all
# of a request's cost is the socket calls that are traced.
# TARGET=service: a Python service that reads Redis and PostgreSQL for each
# request (bench/apps/item_service.py), as the services whyslow is for.
# TARGET=go: an HTTPS service in Go's own TLS (bench/apps/gotls), built
# with the machine's Go: eBPF hooks crypto/tls's Read and Write and the
# runtime's goroutine starts and ends (net/http starts one per request).
# TARGET=gopage: a Go service on PostgreSQL over TLS (pgx, sslmode=require;
# crates/whyslow/tests/apps/go/gopage, 7 statements a page), the Go
# service as whyslow is for it.
#
#   bench/ebpf_overhead.sh
#   TARGET=service bench/ebpf_overhead.sh
#   TARGET=go bench/ebpf_overhead.sh
#   TARGET=gopage bench/ebpf_overhead.sh
#   RUNS=5 DURATION=10 CONNECTIONS=32 bench/ebpf_overhead.sh
#   WHYSLOW=path/to/whyslow bench/ebpf_overhead.sh   # no cargo build
#
# Needs root (eBPF and packet capture). Loopback only.
set -euo pipefail
cd "$(dirname "$0")/.."
. bench/lib.sh

RUNS=${RUNS:-3}
DURATION=${DURATION:-5}
CONNECTIONS=${CONNECTIONS:-16}
PORT=${PORT:-18093}
TARGET=${TARGET:-nginx}
case $TARGET in
  nginx) need_packages nginx-light wrk time curl ;;
  service) need_packages wrk time curl redis-server postgresql python3-redis python3-psycopg2 ;;
  go|gopage) need_packages wrk time curl postgresql openssl bpftool
      command -v go >/dev/null || { echo "TARGET=$TARGET needs Go (https://go.dev/dl)" >&2; exit 2; } ;;
  *) echo "TARGET is nginx, service, go or gopage" >&2; exit 2 ;;
esac

bin=${WHYSLOW:-}
if [ -z "$bin" ]; then
  cargo build --release -q -p whyslow
  bin=target/release/whyslow
fi
dir=$(mktemp -d /tmp/whyslow-ebpf-bench.XXXXXX)
if [ "$TARGET" = nginx ]; then
  trap 'stop_nginx "$dir"; rm -rf "$dir"' EXIT
  start_nginx "$dir" "$PORT" 512
  master=$(cat "$dir/nginx.pid")
  pids=("$master" $(pgrep -P "$master"))
  url="http://127.0.0.1:$PORT/"
  served="nginx (one worker, 512-byte body)"
elif [ "$TARGET" = go ]; then
  (cd bench/apps/gotls && go build -o "$dir/gotls" .)
  "$dir/gotls" "$PORT" & gopid=$!
  trap 'kill "$gopid" 2>/dev/null; rm -rf "$dir"' EXIT
  for _ in $(seq 50); do curl -skf "https://127.0.0.1:$PORT/" >/dev/null && break; sleep 0.1; done
  pids=("$gopid")
  url="https://127.0.0.1:$PORT/"
  served="gotls (Go's crypto/tls, a 40-byte JSON body)"
elif [ "$TARGET" = gopage ]; then
  trap 'kill "$gopid" 2>/dev/null; stop_backed_service "$dir"; rm -rf "$dir"' EXIT
  start_tls_postgres "$dir" "$((PORT + 2))"
  (cd crates/whyslow/tests/apps/go/gopage && go build -o "$dir/gopage" .)
  "$dir/gopage" "$PORT" "$((PORT + 2))" 6 16 broken & gopid=$!
  for _ in $(seq 100); do curl -sf "http://127.0.0.1:$PORT/orders" >/dev/null && break; sleep 0.1; done
  pids=("$gopid")
  url="http://127.0.0.1:$PORT/orders"
  served="gopage (Go, pgx on PostgreSQL over TLS, 7 statements a page)"
else
  trap 'stop_backed_service "$dir"; rm -rf "$dir"' EXIT
  start_backed_service "$dir" "$PORT"
  pids=("$(cat "$dir/service.pid")")
  url="http://127.0.0.1:$PORT/item/7"
  served="item_service.py (Redis + PostgreSQL per request)"
fi
pid_flags=()
for p in "${pids[@]}"; do pid_flags+=(--pid "$p"); done

# run MODE ROUND: one wrk run under MODE; appends "mode req_s latency_ms cpu_s".
run() {
  local mode=$1 round=$2 cap="$dir/cap$round.pcapng" tracer=()
  case $mode in
    none) ;;
    packets) tracer=("$bin" capture -p "$PORT" -w "$cap" --duration "$((DURATION + 2))s") ;;
    ebpf-pid) tracer=("$bin" capture -p "$PORT" -w "$cap" --duration "$((DURATION + 2))s" --ebpf "${pid_flags[@]}") ;;
    ebpf-all) tracer=("$bin" capture -p "$PORT" -w "$cap" --duration "$((DURATION + 2))s" --ebpf) ;;
  esac
  local tpid=
  if [ "${#tracer[@]}" -gt 0 ]; then
    /usr/bin/time -f '%U %S' -o "$dir/cpu" "${tracer[@]}" >"$dir/tracer.out" 2>&1 &
    tpid=$!
    sleep 1
  fi
  wrk -t2 -c"$CONNECTIONS" -d"${DURATION}s" --latency "$url" >"$dir/wrk.out"
  local cpu=0
  if [ -n "$tpid" ]; then
    # Uprobe hits a request, read from the kernel's BPF statistics while
    # the tracer still holds its programs (it runs a second past wrk).
    if [ "$mode" = ebpf-pid ] && command -v bpftool >/dev/null; then
      local requests
      requests=$(awk '/requests in/ {print $1}' "$dir/wrk.out")
      bpftool -j prog show 2>/dev/null | python3 -c '
import json, sys
requests = int(sys.argv[1])
hits = {}
for p in json.load(sys.stdin):
    if p.get("type") == "kprobe" and p.get("run_cnt"):
        hits[p["name"]] = hits.get(p["name"], 0) + p["run_cnt"]
go = sum(n for name, n in hits.items() if name.startswith("go_"))
other = sum(hits.values()) - go
print(f"{go / max(requests, 1):.2f} {other / max(requests, 1):.2f}")' "$requests" >>"$dir/hits" || true
    fi
    wait "$tpid"
    cpu=$(awk '{print $1 + $2}' "$dir/cpu")
    # What is measured must be what is hooked.
    if [[ $TARGET = go* ]] && [ "$mode" = ebpf-pid ] && ! grep -q "(Go: crypto/tls, goroutines" "$dir/tracer.out"; then
      echo "Go's TLS was not hooked:" >&2; cat "$dir/tracer.out" >&2; exit 1
    fi
  fi
  local rps lat
  rps=$(awk '/Requests\/sec/ {print $2}' "$dir/wrk.out")
  lat=$(awk '$1 == "Latency" && !seen {v = $2; seen = 1} END {
    if (v ~ /us$/) v = v / 1000; else if (v ~ /ms$/) v = v + 0; else if (v ~ /s$/) v = v * 1000
    print v}' "$dir/wrk.out")
  echo "$mode $rps $lat $cpu" >>"$dir/results"
  rm -f "$cap" "$cap.events"
}

modes=(none packets ebpf-pid ebpf-all)
# run_cnt per program, for the uprobe hits counted above.
sysctl -qw kernel.bpf_stats_enabled=1
# Warm up (connections opened, caches filled) before anything is measured.
wrk -t2 -c"$CONNECTIONS" -d2s "$url" >/dev/null
for round in $(seq "$RUNS"); do
  for mode in "${modes[@]}"; do run "$mode" "$round"; done
done

echo "$served on 127.0.0.1:$PORT, wrk -t2 -c$CONNECTIONS -d${DURATION}s, $RUNS alternated rounds (medians)"
python3 - "$dir/results" <<'EOF'
import statistics, sys
rows = {}
for line in open(sys.argv[1]):
    mode, rps, lat, cpu = line.split()
    rows.setdefault(mode, []).append((float(rps), float(lat), float(cpu)))
med = {m: tuple(statistics.median(r[i] for r in v) for i in range(3)) for m, v in rows.items()}
base_rps, base_lat, _ = med["none"]
print(f"{'mode':<10}{'req/s':>10}{'vs none':>9}{'latency':>10}{'added':>9}{'whyslow CPU':>13}")
for m in ("none", "packets", "ebpf-pid", "ebpf-all"):
    rps, lat, cpu = med[m]
    print(f"{m:<10}{rps:>10.0f}{rps / base_rps:>8.3f}×{lat:>8.3f}ms{lat - base_lat:>+7.3f}ms{cpu:>12.2f}s")
pid_rps = med["ebpf-pid"][0]
pkt_rps = med["packets"][0]
print(f"throughput lost to eBPF with --pid: {100 * (1 - pid_rps / base_rps):.1f}% "
      f"of untraced, {100 * (1 - pid_rps / pkt_rps):.1f}% beyond packet capture alone")
EOF
if [ -s "$dir/hits" ]; then
  sort -n "$dir/hits" | awk '{ go[NR] = $1; other[NR] = $2 } END {
    m = int((NR + 1) / 2)
    printf "uprobe hits a request with --pid (median of %d): %.2f in the Go programs, %.2f in the others (libssl, any process)\n", NR, go[m], other[m] }'
fi
