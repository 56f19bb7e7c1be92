#!/usr/bin/env bash
# whyslow analyze vs tshark on the same capture, one run.
#
# Makes a capture of at least MIN_MB (default 1000) MB of small keep-alive HTTP
# requests itself (nginx, 1 worker, on 127.0.0.1, loaded by wrk while
# `whyslow capture` writes it), then times
#   whyslow analyze FILE
#   tshark -r FILE -d tcp.port==PORT,http -q -z conv,tcp -z expert
# with /usr/bin/time (median wall seconds of RUNS=3, max RSS) and prints the ratio (goal:
# whyslow ≥ 20× faster). Memory flatness: whyslow's RSS on the first quarter
# and half of the packets vs on all of them (goal: all ≤ 1.1× a quarter).
# Agreement: TCP connections, and whyslow's exchanges vs tshark's http.request.
#
#   MIN_MB=500 bench/analyze_vs_tshark.sh
#   KEEP=1 bench/analyze_vs_tshark.sh      # keep the capture (printed path)
#   CAPTURE_ONLY=1 bench/analyze_vs_tshark.sh # make and keep the capture, time nothing
#   CAPTURE=FILE bench/analyze_vs_tshark.sh # measure an existing capture
set -euo pipefail
cd "$(dirname "$0")/.."
MIN_MB=${MIN_MB:-1000}
PORT=${PORT:-18480}

. bench/lib.sh
need_packages nginx-light wrk tshark time
cargo build --release -q -p whyslow
bin=$PWD/target/release/whyslow

dir=$(mktemp -d /tmp/whyslow-bench.XXXXXX)
cleanup() {
  stop_nginx "$dir"
  if [ -n "${KEEP:-}" ]; then echo "kept: $dir"; else rm -rf "$dir"; fi
}
trap cleanup EXIT

make_capture() {
  # nginx: one worker, a small static body, keep-alive (nginx's default of
  # 1000 requests per connection, so connections also open and close).
  start_nginx "$dir" "$PORT" 120

secs=${SECS:-10}
size_mb=0
for _attempt in 1 2 3; do
  echo "== capture: wrk -t2 -c32 -d${secs}s under whyslow capture"
  sudo_if_needed "$bin" capture -i lo -p "$PORT" -w "$cap" -- \
    wrk -t2 -c32 -d"${secs}s" "http://127.0.0.1:$PORT/" 2>&1 | grep -E 'Requests/sec|written to' | sed 's/^/   /'
  size_mb=$(( $(stat -c %s "$cap") / 1000000 ))
  echo "   capture: $size_mb MB"
  [ "$size_mb" -ge "$MIN_MB" ] && break
  # Too short: scale the duration to the shortfall, with 25% to spare.
  secs=$(( secs * MIN_MB * 5 / (4 * (size_mb > 0 ? size_mb : 1)) + 1 ))
done
if [ "$size_mb" -lt "$MIN_MB" ]; then
  echo "could not make a capture of $MIN_MB MB (got $size_mb MB)" >&2
  exit 1
fi
}

if [ -n "${CAPTURE:-}" ]; then
  cap=$CAPTURE
else
  cap=$dir/load.pcapng
  make_capture
fi

settle "$cap"
# CAPTURE_ONLY=1: make the capture, keep it, print its path, measure nothing.
if [ -n "${CAPTURE_ONLY:-}" ]; then KEEP=1; echo "capture: $cap"; exit 0; fi

echo "== whyslow analyze"
read -r w_s w_kb < <(timed "$dir/w" "$bin" analyze "$cap")
packets=$(awk 'NR == 1 {print $2}' "$dir/w.out")
# tshark picks a dissector by port: an ephemeral client port that some
# dissector registered (57000 is IRC's) wins over the unregistered server
# port, and that connection's requests go uncounted. Decode-as the server.
server_port=$(grep -oE 'server 127\.0\.0\.1:[0-9]+' "$dir/w.out" | head -1 | cut -d: -f2)
decode=(-d "tcp.port==${server_port:-80},http")
echo "== tshark ${decode[*]} -q -z conv,tcp -z expert"
read -r t_s t_kb < <(timed "$dir/t" tshark -r "$cap" "${decode[@]}" -q -z conv,tcp -z expert)
echo "== whyslow analyze on a quarter and a half of the packets (editcap -r)"
read -r q_s q_kb h_s h_kb < <(flatness "$bin" "$cap" "$packets" "$dir")
echo "== tshark -Y http.request (the request count)"
t_requests=$(tshark -r "$cap" "${decode[@]}" -Y http.request -T fields -e frame.number | wc -l)

# Counts: whyslow's summary lines vs tshark's conversation rows and requests.
w_conns=$(grep -oE '^ *[0-9]+ TCP connections' "$dir/w.out" | grep -oE '[0-9]+')
w_exchanges=$(grep -oE 'analyzed every exchange \([0-9]+\)' "$dir/w.out" | grep -oE '[0-9]+')
t_conns=$(awk '/TCP Conversations/ {on = 1} on && /<->/ {n++} on && /^=+$/ && n {on = 0} END {print n + 0}' "$dir/t.out")

echo
echo "capture: $(( $(stat -c %s "$cap") / 1000000 )) MB, $packets packets, $w_conns TCP connections"
grep -E '^(analyzed|kept)' "$dir/w.out" | sed 's/^/whyslow: /' || true
print_vs "tshark -d http -q -z conv,tcp -z expert" "$t_s" "$t_kb" "$w_s" "$w_kb" "$q_s" "$q_kb" "$h_s" "$h_kb"
agree() { if [ "$2" = "$3" ]; then echo "$1: whyslow $2, $4 $3: agree"; else echo "$1: whyslow $2, $4 $3: DIFFER"; fi; }
agree connections "$w_conns" "$t_conns" "tshark conv,tcp"
agree exchanges "$w_exchanges" "$t_requests" "tshark http.request"

# The second run: backing-service traffic with every protocol analyzer on.
if [ -z "${SKIP_BACKING:-}" ] && [ -z "${CAPTURE:-}" ]; then
  echo
  echo "== second run: Redis and PostgreSQL traffic (bench/analyze_backing_vs_tshark.sh)"
  bash bench/analyze_backing_vs_tshark.sh
fi
