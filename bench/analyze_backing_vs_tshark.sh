#!/usr/bin/env bash
# whyslow analyze vs tshark on a capture of backing-service traffic, one run:
# Redis (redis-benchmark, pipelined and not) and PostgreSQL (pgbench,
# simple and prepared) on 127.0.0.1, captured by `whyslow capture` until the
# file holds at least MIN_MB (default 1000) MB. Then times
#   whyslow analyze FILE                       (every analyzer on)
#   tshark -r FILE -d tcp.port==R,resp -d tcp.port==P,pgsql -q -z conv,tcp -z expert
# (median wall seconds of RUNS=3, max RSS), RSS on a quarter and half of the packets vs all,
# and the exchange counts: whyslow's per protocol vs tshark's RESP arrays
# sent and PostgreSQL CommandComplete/Error messages.
#
#   MIN_MB=300 bench/analyze_backing_vs_tshark.sh
#   KEEP=1 bench/analyze_backing_vs_tshark.sh
#   CAPTURE_ONLY=1 bench/analyze_backing_vs_tshark.sh  # make and keep the capture, time nothing
set -euo pipefail
cd "$(dirname "$0")/.."
MIN_MB=${MIN_MB:-1000}


. bench/lib.sh
need_packages redis-server postgresql postgresql-client tshark time
cargo build --release -q -p whyslow
bin=$PWD/target/release/whyslow

dir=$(mktemp -d /tmp/whyslow-bench-backing.XXXXXX)
chmod 755 "$dir"
rport=$(( 20000 + RANDOM % 10000 )); pport=$(( rport + 1 ))
pgbin=$(ls -d /usr/lib/postgresql/*/bin | sort -V | tail -1)
as_pg() { if [ "$(id -u)" -eq 0 ]; then runuser -u postgres -- "$@"; else "$@"; fi; }
cleanup() {
  [ -n "${redis_pid:-}" ] && kill "$redis_pid" 2>/dev/null
  [ -d "$dir/pg" ] && as_pg "$pgbin/pg_ctl" -D "$dir/pg" -m immediate stop >/dev/null 2>&1
  if [ -n "${KEEP:-}" ]; then echo "kept: $dir"; else rm -rf "$dir"; fi
}
trap cleanup EXIT

redis-server --port "$rport" --bind 127.0.0.1 --save '' --appendonly no >/dev/null &
redis_pid=$!
[ "$(id -u)" -eq 0 ] && chown postgres "$dir"
as_pg "$pgbin/initdb" -D "$dir/pg" --auth=trust -U postgres --no-sync >/dev/null
as_pg "$pgbin/pg_ctl" -D "$dir/pg" -w -l "$dir/pg.log" \
  -o "-p $pport -k $dir -c listen_addresses=127.0.0.1 -c fsync=off" start >/dev/null
pg=(-h 127.0.0.1 -p "$pport" -U postgres)
pgbench "${pg[@]}" -i -s 1 -q postgres >/dev/null 2>&1

cap=$dir/backing.pcapng
secs=${SECS:-8}
for _attempt in 1 2 3; do
  echo "== capture: redis-benchmark and pgbench for ${secs}s under whyslow capture"
  sudo_if_needed "$bin" capture -i lo -p "$rport" -p "$pport" -w "$cap" -- sh -c "
    timeout $secs redis-benchmark -p $rport -q -c 8 -n 100000000 -t get,set -P 8 >/dev/null &
    timeout $secs redis-benchmark -p $rport -q -c 4 -n 100000000 -t get,incr >/dev/null &
    pgbench ${pg[*]} -S -M prepared -c 4 -T $secs postgres >/dev/null 2>&1 &
    pgbench ${pg[*]} -N -M simple -c 2 -T $secs postgres >/dev/null 2>&1 &
    wait" 2>&1 | grep -E 'written to' | sed 's/^/   /' || true
  size_mb=$(( $(stat -c %s "$cap") / 1000000 ))
  echo "   capture: $size_mb MB"
  [ "$size_mb" -ge "$MIN_MB" ] && break
  secs=$(( secs * MIN_MB * 5 / (4 * (size_mb > 0 ? size_mb : 1)) + 1 ))
done

settle "$cap"
# CAPTURE_ONLY=1: make the capture, keep it, print its path, measure nothing.
if [ -n "${CAPTURE_ONLY:-}" ]; then KEEP=1; echo "capture: $cap"; exit 0; fi
decode=(-d "tcp.port==$rport,resp" -d "tcp.port==$pport,pgsql")

echo "== whyslow analyze"
read -r w_s w_kb < <(timed "$dir/w" "$bin" analyze "$cap")
packets=$(awk 'NR == 1 {print $2}' "$dir/w.out")
echo "== tshark ${decode[*]} -q -z conv,tcp -z expert"
read -r t_s t_kb < <(timed "$dir/t" tshark -r "$cap" "${decode[@]}" -q -z conv,tcp -z expert)
echo "== whyslow analyze on a quarter and a half of the packets (editcap -r)"
read -r q_s q_kb h_s h_kb < <(flatness "$bin" "$cap" "$packets" "$dir")

echo "== exchange counts (whyslow's per-server lines vs tshark fields)"
server_exchanges() { grep -oE "server 127.0.0.1:$1 \([a-z0-9/]+\): [0-9]+ connection\(s\), [0-9]+ exchange" "$dir/w.out" | grep -oE '[0-9]+ exchange' | grep -oE '[0-9]+' || echo 0; }
w_redis=$(server_exchanges "$rport")
w_pg=$(server_exchanges "$pport")
t_redis=$(tshark -r "$cap" "${decode[@]}" -Y "tcp.dstport==$rport" -T fields -E occurrence=a -E aggregator='|' \
  -e resp.array.length | tr '|' '\n' | grep -c . || true)
t_pg=$(tshark -r "$cap" "${decode[@]}" -Y "tcp.srcport==$pport" -T fields -E occurrence=a -E aggregator='|' \
  -e pgsql.type | tr '|' '\n' | grep -cE '^(Command completion|Error)$' || true)

echo
echo "capture: $(( $(stat -c %s "$cap") / 1000000 )) MB, $packets packets (Redis :$rport, PostgreSQL :$pport)"
grep -E '^(analyzed|kept)' "$dir/w.out" | sed 's/^/whyslow: /' || true
print_vs "tshark -d resp,pgsql -z conv,tcp -z expert" "$t_s" "$t_kb" "$w_s" "$w_kb" "$q_s" "$q_kb" "$h_s" "$h_kb"
echo "exchanges: redis whyslow $w_redis / tshark $t_redis; postgres whyslow $w_pg / tshark $t_pg"
