#!/usr/bin/env bash
# whyslow analyze vs tshark on a capture of at least MIN_QUERIES DNS queries
# (default 1000000), one run: dnsmasq from Debian's packages answering from
# its own records in a network namespace, dnsperf (Debian's package) sending
# a Kubernetes-like mix (names under a search list answered NXDOMAIN, the
# names that answer, A and AAAA) from 4 clients, captured by `whyslow
# capture` for SECS seconds (longer until MIN_QUERIES). Then times
#   whyslow analyze FILE
#   tshark -r FILE -Y dns -q
# (median wall seconds of RUNS=3, max RSS), RSS on a quarter and half of the
# packets vs all, and the counts: whyslow's DNS exchanges vs tshark's
# queries (dns.flags.response == 0).
#
#   bench/analyze_dns_vs_tshark.sh
#   MIN_QUERIES=100000 KEEP=1 bench/analyze_dns_vs_tshark.sh
set -euo pipefail
cd "$(dirname "$0")/.."
MIN_QUERIES=${MIN_QUERIES:-1000000}

. bench/lib.sh
# DNS is dissected row by row by tshark too: the goal is 10x, not 20x.
SPEED_GOAL=10
need_packages dnsmasq-base dnsperf tshark time wireshark-common iproute2
cargo build --release -q -p whyslow
bin=$PWD/target/release/whyslow

dir=$(mktemp -d /tmp/whyslow-bench-dns.XXXXXX)
ns=whyslow-bench-dns-$$
cleanup() {
  [ -f "$dir/dnsmasq.pid" ] && kill "$(cat "$dir/dnsmasq.pid")" 2>/dev/null
  # The pid above is the backgrounded function's shell: what runs in the
  # namespace (dnsmasq) is ended by the namespace's own list.
  for p in $(sudo_if_needed ip netns pids "$ns" 2>/dev/null); do
    sudo_if_needed kill "$p" 2>/dev/null || true
  done
  sudo_if_needed ip netns del "$ns" 2>/dev/null || true
  if [ -n "${KEEP:-}" ]; then echo "kept: $dir"; else rm -rf "$dir"; fi
}
trap cleanup EXIT

sudo_if_needed ip netns add "$ns"
sudo_if_needed ip -n "$ns" link set lo up
in_ns() { sudo_if_needed ip netns exec "$ns" "$@"; }
in_ns dnsmasq --keep-in-foreground --port=53 --listen-address=127.0.0.1 --bind-interfaces \
  --no-resolv --no-hosts --user=root --pid-file= --cache-size=10000 \
  --local=/cluster.local/ --local=/internal/ \
  --address=/api.internal/10.0.0.1 --address=/db.internal/10.0.0.2 \
  --address=/cache.internal/10.0.0.3 >/dev/null 2>&1 &
echo $! >"$dir/dnsmasq.pid"
sleep 0.5

# What a pod with ndots:5 asks for each lookup of three services.
for name in api db cache; do
  for t in A AAAA; do
    echo "$name.internal.svc.cluster.local $t"
    echo "$name.internal.cluster.local $t"
    echo "$name.internal $t"
  done
done >"$dir/queries.txt"

cap=$dir/dns.pcapng
secs=${SECS:-10}
for _attempt in 1 2 3; do
  echo "== capture: dnsperf for ${secs}s under whyslow capture"
  in_ns "$bin" capture -i lo -w "$cap" -- \
    dnsperf -s 127.0.0.1 -d "$dir/queries.txt" -c 4 -q 200 -l "$secs" 2>&1 |
    grep -E 'Queries sent|Queries completed|written to' | sed 's/^/   /' || true
  queries=$(tshark -r "$cap" -Y 'dns.flags.response == 0' -T fields -e dns.id | wc -l)
  echo "   queries captured: $queries"
  [ "$queries" -ge "$MIN_QUERIES" ] && break
  secs=$(( secs * MIN_QUERIES * 5 / (4 * (queries > 0 ? queries : 1)) + 1 ))
done

settle "$cap"
echo "== whyslow analyze"
read -r w_s w_kb < <(timed "$dir/w" "$bin" analyze "$cap")
packets=$(awk 'NR == 1 {print $2}' "$dir/w.out")
echo "== tshark -Y dns -q"
read -r t_s t_kb < <(timed "$dir/t" tshark -r "$cap" -Y dns -q)
echo "== whyslow analyze on a quarter and a half of the packets (editcap -r)"
read -r q_s q_kb h_s h_kb < <(flatness "$bin" "$cap" "$packets" "$dir")

w_dns=$(grep -aoE "server 127.0.0.1:53 \(dns\): [0-9]+ connection\(s\), [0-9]+ exchange" "$dir/w.out" |
  grep -oE '[0-9]+ exchange' | grep -oE '[0-9]+' || echo 0)

echo
echo "capture: $(( $(stat -c %s "$cap") / 1000000 )) MB, $packets packets, $queries DNS queries"
grep -aE '^(analyzed|kept)' "$dir/w.out" | sed 's/^/whyslow: /' || true
print_vs "tshark -Y dns -q" "$t_s" "$t_kb" "$w_s" "$w_kb" "$q_s" "$q_kb" "$h_s" "$h_kb"
echo "queries: whyslow $w_dns / tshark $queries"
grep -aE '^  [0-9]+\. ' "$dir/w.out" | sed 's/^/finding: /' || true
