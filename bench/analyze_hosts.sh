#!/usr/bin/env bash
# Several hosts' captures analyzed together against each alone. The lab's
# three-tier scenario on three hosts (network namespaces: front, API,
# database; `whyslow lab hosts`) under 8 clients for SECS seconds, each
# host captured apart; then `analyze front api db` (joined) and each capture
# alone, RUNS rounds each (median wall, largest RSS), and tshark on the
# largest capture as today's one-capture peer:
#   time    joined / (sum of the three alone)      (goal: <= 1.3x)
#   memory  joined / largest alone                 (goal: <= 1.2x)
#   speed   tshark / whyslow on the largest alone  (today's one-capture ratio)
# and what the joined analysis named (n_plus_one first, the three clocks placed).
#
#   sudo bench/analyze_hosts.sh            (root: namespaces)
#   SECS=10 RUNS=1 bench/analyze_hosts.sh
set -euo pipefail
cd "$(dirname "$0")/.."
SECS=${SECS:-40}
RUNS=${RUNS:-3}
export RUNS

. bench/lib.sh
need_packages time tshark
bin=$(whyslow_bin)
[ "$(id -u)" -eq 0 ] || { echo "needs root (network namespaces)" >&2; exit 1; }

dir=$(mktemp -d /tmp/whyslow-hosts.XXXXXX)
cleanup() { if [ -n "${KEEP:-}" ]; then echo "kept: $dir"; else rm -rf "$dir"; fi; }
trap cleanup EXIT

echo "== three-tier on 3 hosts, 8 clients, ${SECS}s"
"$bin" lab hosts three-tier -c 8 -n 100000000 --duration "${SECS}s" -w "$dir" >/dev/null
caps=("$dir/front.pcapng" "$dir/api.pcapng" "$dir/db.pcapng")
for c in "${caps[@]}"; do settle "$c"; done

printf '\n%-10s %8s %10s %10s\n' capture MB "whyslow s" "RSS MB"
sum=0 largest_kb=0 largest=
for c in "${caps[@]}"; do
  name=$(basename "$c" .pcapng)
  read -r ws wkb < <(timed "$dir/w-$name" "$bin" analyze --json "$c")
  mb=$(($(stat -c %s "$c") / 1048576))
  printf '%-10s %8s %10s %10s\n' "$name" "$mb" "$ws" "$((wkb / 1024))"
  sum=$(awk -v a="$sum" -v b="$ws" 'BEGIN { print a + b }')
  if [ "$wkb" -gt "$largest_kb" ]; then largest_kb=$wkb largest=$c; fi
done
read -r js jkb < <(timed "$dir/joined" "$bin" analyze --json "${caps[@]}")
printf '%-10s %8s %10s %10s\n' joined - "$js" "$((jkb / 1024))"
read -r ts tkb < <(timed "$dir/tshark" tshark -r "$largest" -q -z conv,tcp)
read -r ls _ < <(timed "$dir/w-largest" "$bin" analyze --json "$largest")

python3 - "$dir/joined.out" <<'PY'
import json, sys
d = json.load(open(sys.argv[1]))
hosts = d["capture"]["hosts"]
kinds = [f["kind"] for f in d["findings"] if not f.get("background")]
placed = ", ".join("%s %+.3f ms ± %.3f" % (h["name"], h.get("clock_offset_us", 0) / 1e3,
                   h.get("clock_offset_bound_us", 0) / 1e3) for h in hosts)
print("joined: %d exchanges; named: %s; clocks: %s" % (d["capture"]["exchanges"], ",".join(kinds) or "nothing", placed))
PY
awk -v j="$js" -v s="$sum" 'BEGIN { printf "time: joined %.2f s, alone one by one %.2f s: x%.2f (goal <= 1.3)\n", j, s, j / s }'
awk -v j="$jkb" -v l="$largest_kb" 'BEGIN { printf "memory: joined %d MB, largest alone %d MB: x%.2f (goal <= 1.2)\n", j / 1024, l / 1024, j / l }'
awk -v t="$ts" -v w="$ls" -v tk="$tkb" -v lk="$largest_kb" -v n="$(basename "$largest")" \
  'BEGIN { printf "speed: %s alone %.2f s, tshark %.2f s: %.1fx faster, %.1fx less memory\n", n, w, t, t / w, tk / lk }'
