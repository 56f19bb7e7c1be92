#!/usr/bin/env bash
# Production-shaped captures: long, of a service that was never idle and had
# warmed up before the capture began. The lab's orm-storm under `whyslow
# load -c 16 --trace-context off` (16 checkouts always in flight, statements
# prepared by name before the captures), captured for SECS seconds each,
# one after the other, in one run (default 10 40 160). Then, per capture,
# whyslow analyze and tshark -q -z conv,tcp on the same file (RUNS rounds,
# median wall, largest RSS), and three ratios:
#   time   longest / shortest capture's analysis time   (goal: <= 20x for 16x the traffic)
#   memory longest / second capture's peak RSS          (goal: <= 1.2x)
#   speed  tshark / whyslow on each capture             (goal: >= 3x)
# and the named causes of each capture, which must agree.
#
#   bench/analyze_long_captures.sh
#   BIN=target/debug/whyslow SECS="1 3" RUNS=1 CHECK_ONLY=1 bench/analyze_long_captures.sh
#     (CI: the same steps, short, with the test build and no tshark; fails
#     when an analysis fails or finds no exchange, asserts nothing about time)
set -euo pipefail
cd "$(dirname "$0")/.."
SECS=${SECS:-10 40 160}
RUNS=${RUNS:-3}
export RUNS

. bench/lib.sh
need_packages time tshark
bin=$(whyslow_bin)

dir=$(mktemp -d /tmp/whyslow-long.XXXXXX)
lab_pid=
cleanup() {
  [ -n "$lab_pid" ] && kill "$lab_pid" 2>/dev/null
  if [ -n "${KEEP:-}" ]; then echo "kept: $dir"; else rm -rf "$dir"; fi
}
trap cleanup EXIT

start_lab "$bin" orm-storm "$dir"
url=$lab_url
# Warm-up: the pool's connections open and every statement is prepared by
# name before any capture begins, as in production.
"$bin" load -q -c 16 --duration 3s --trace-context off "$url" >/dev/null 2>&1
for s in $SECS; do
  echo "== capture: ${s}s of orm-storm at 16 clients, mid-life"
  sudo_if_needed "$bin" capture -i lo -w "$dir/c$s.pcapng" -- \
    "$bin" load -q -c 16 --duration "${s}s" --trace-context off "$url" 2>&1 |
    grep -E 'written to' | sed 's/^/   /' || true
done
kill "$lab_pid" && lab_pid=

printf '\n%-8s %8s %10s %10s %10s %10s %8s  %s\n' capture MB "whyslow s" "RSS MB" "tshark s" "RSS MB" "x faster" "named"
declare -A w_s w_kb
first= second= last=
for s in $SECS; do
  cap=$dir/c$s.pcapng
  settle "$cap"
  read -r ws wkb < <(timed "$dir/w$s" "$bin" analyze --json "$cap")
  if [ -n "${CHECK_ONLY:-}" ]; then
    "$bin" analyze --json "$cap" >"$dir/w$s.out" ||
      { echo "analyze ${s}s failed: $(cat "$dir/w$s.err")" >&2; exit 1; }
  fi
  if [ -n "${CHECK_ONLY:-}" ]; then
    ts=- tkb=0
  else
    read -r ts tkb < <(timed "$dir/t$s" tshark -r "$cap" -q -z conv,tcp)
  fi
  named=$(python3 -c '
import json, sys
d = json.load(open(sys.argv[1]))
c = d["capture"]
kinds = [f["kind"] for f in d["findings"] if not f.get("background")]
if c["exchanges"] == 0:
    sys.exit("no exchange analyzed")
print(",".join(kinds) or "nothing", "(%d exchanges, %d windows, %d forced)" % (c["exchanges"], c["windows"], c["windows_forced"]))
' "$dir/w$s.out")
  mb=$(($(stat -c %s "$cap") / 1048576))
  faster=$(awk -v t="$ts" -v w="$ws" 'BEGIN { if (t == "-") print "-"; else printf "%.1f", t / (w > 0 ? w : 0.01) }')
  printf '%-8s %8d %10s %10d %10s %10d %8s  %s\n' "${s}s" "$mb" "$ws" $((wkb / 1024)) "$ts" $((tkb / 1024)) "$faster" "$named"
  w_s[$s]=$ws w_kb[$s]=$wkb
  [ -z "$first" ] && first=$s || { [ -z "$second" ] && second=$s; }
  last=$s
done
if [ -n "$second" ]; then
  awk -v a="${w_s[$first]}" -v b="${w_s[$last]}" -v f="$first" -v l="$last" 'BEGIN {
    printf "time: %ss analyzed in %.2f s, %ss in %.2f s: x%.1f for x%.0f the traffic (goal <= 20x)\n", l, b, f, a, b / (a > 0 ? a : 0.01), l / f }'
  awk -v a="${w_kb[$second]}" -v b="${w_kb[$last]}" -v s="$second" -v l="$last" 'BEGIN {
    printf "memory: peak RSS %d MB at %ss, %d MB at %ss: x%.2f (goal <= 1.2)\n", b / 1024, l, a / 1024, s, b / a }'
fi
