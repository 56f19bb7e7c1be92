#!/usr/bin/env bash
# whyslow analyze vs tshark on a capture of MySQL traffic, one run: a MariaDB
# from Debian's packages on 127.0.0.1 under mariadb-slap (8 clients, mixed
# reads and writes of generated SQL, text protocol), captured by `whyslow
# capture` for SECS seconds (default 1, about 330 MB here; longer until the
# file holds at least MIN_MB, default 300). Then times
#   whyslow analyze FILE
#   tshark -r FILE -d tcp.port==P,mysql -q -z conv,tcp
# (median wall seconds of RUNS=3, max RSS), RSS on a quarter and half of the
# packets vs all, and the command counts: whyslow's MySQL exchanges vs the
# commands tshark's dissector reads (less COM_QUIT, COM_STMT_CLOSE and
# COM_STMT_SEND_LONG_DATA, which have no answer).
#
#   bench/analyze_mysql_vs_tshark.sh
#   MIN_MB=50 KEEP=1 bench/analyze_mysql_vs_tshark.sh
set -euo pipefail
cd "$(dirname "$0")/.."
MIN_MB=${MIN_MB:-300}

. bench/lib.sh
need_packages mariadb-server mariadb-client tshark time wireshark-common
cargo build --release -q -p whyslow
bin=$PWD/target/release/whyslow

dir=$(mktemp -d /tmp/whyslow-bench-mysql.XXXXXX)
port=$(( 20000 + RANDOM % 10000 ))
cleanup() {
  [ -f "$dir/pid" ] && kill "$(cat "$dir/pid")" 2>/dev/null
  sleep 1
  if [ -n "${KEEP:-}" ]; then echo "kept: $dir"; else rm -rf "$dir"; fi
}
trap cleanup EXIT

mariadb-install-db --no-defaults --auth-root-authentication-method=socket \
  --datadir="$dir/data" --user=root --skip-test-db >/dev/null
mariadbd --no-defaults --datadir="$dir/data" --socket="$dir/sock" --pid-file="$dir/pid" \
  --user=root --bind-address=127.0.0.1 --port="$port" --skip-name-resolve \
  --innodb-flush-log-at-trx-commit=0 --skip-log-bin >"$dir/mariadb.log" 2>&1 &
for _ in $(seq 100); do mariadb --socket="$dir/sock" -u root -e 'SELECT 1' >/dev/null 2>&1 && break; sleep 0.1; done
mariadb --socket="$dir/sock" -u root -e \
  "CREATE USER 'app'@'%' IDENTIFIED BY 'app'; GRANT ALL ON *.* TO 'app'@'%';"

cap=$dir/mysql.pcapng
secs=${SECS:-1}
slap=(mariadb-slap -h 127.0.0.1 -P "$port" -u app -papp --concurrency=8 --iterations=1000000
  --auto-generate-sql --auto-generate-sql-load-type=mixed --number-of-queries=100000000)
for _attempt in 1 2 3; do
  echo "== capture: mariadb-slap for ${secs}s under whyslow capture"
  sudo_if_needed "$bin" capture -i lo -p "$port" -w "$cap" -- \
    timeout "$secs" "${slap[@]}" 2>&1 | grep -E 'written to' | sed 's/^/   /' || true
  size_mb=$(( $(stat -c %s "$cap") / 1000000 ))
  echo "   capture: $size_mb MB"
  [ "$size_mb" -ge "$MIN_MB" ] && break
  secs=$(( secs * MIN_MB * 5 / (4 * (size_mb > 0 ? size_mb : 1)) + 1 ))
done

settle "$cap"
decode=(-d "tcp.port==$port,mysql")
echo "== whyslow analyze"
read -r w_s w_kb < <(timed "$dir/w" "$bin" analyze "$cap")
packets=$(awk 'NR == 1 {print $2}' "$dir/w.out")
echo "== tshark ${decode[*]} -q -z conv,tcp"
read -r t_s t_kb < <(timed "$dir/t" tshark -r "$cap" "${decode[@]}" -q -z conv,tcp)
echo "== whyslow analyze on a quarter and a half of the packets (editcap -r)"
read -r q_s q_kb h_s h_kb < <(flatness "$bin" "$cap" "$packets" "$dir")

echo "== command counts (whyslow's server line vs tshark's mysql.command)"
w_my=$(grep -aoE "server 127.0.0.1:$port \(mysql\): [0-9]+ connection\(s\), [0-9]+ exchange" "$dir/w.out" |
  grep -oE '[0-9]+ exchange' | grep -oE '[0-9]+' || echo 0)
t_my=$(tshark -r "$cap" "${decode[@]}" -Y "tcp.dstport==$port && mysql.command" -T fields \
  -E occurrence=a -E aggregator='|' -e mysql.command | tr '|' '\n' | grep -vcE '^(1|24|25)?$' || true)

echo
echo "capture: $(( $(stat -c %s "$cap") / 1000000 )) MB, $packets packets (MariaDB :$port)"
grep -aE '^(analyzed|kept)' "$dir/w.out" | sed 's/^/whyslow: /' || true
print_vs "tshark -d mysql -z conv,tcp" "$t_s" "$t_kb" "$w_s" "$w_kb" "$q_s" "$q_kb" "$h_s" "$h_kb"
echo "commands answered: whyslow $w_my / tshark $t_my"
