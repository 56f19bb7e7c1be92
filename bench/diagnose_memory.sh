#!/usr/bin/env bash
# whyslow diagnose's memory over a long load phase: flat, as analyze's.
#
# diagnose writes its live capture to a file and reads it back through the
# one analysis path in bounded windows, so its peak RSS must not grow with
# the length of the load phase. Runs against nginx (1 worker, a small static
# body, on 127.0.0.1)
#   whyslow diagnose --rate RATE --duration SHORT URL
#   whyslow diagnose --rate RATE --duration LONG URL
# under /usr/bin/time and prints both peak RSS and their ratio (goal: LONG ≤
# 1.1× SHORT), with the requests each load phase sent and the packets each
# capture held, so a run that did not load the target shows.
#
#   bench/diagnose_memory.sh                         # 2000/s, 15 s vs 60 s
#   RATE=1000 SHORT=10s LONG=40s bench/diagnose_memory.sh
set -euo pipefail
cd "$(dirname "$0")/.."
RATE=${RATE:-2000}
SHORT=${SHORT:-15s}
LONG=${LONG:-60s}
PORT=${PORT:-18481}

. bench/lib.sh
need_packages nginx-light time
cargo build --release -q -p whyslow
bin=$PWD/target/release/whyslow

dir=$(mktemp -d /tmp/whyslow-bench.XXXXXX)
cleanup() {
  stop_nginx "$dir"
  rm -rf "$dir"
}
trap cleanup EXIT
start_nginx "$dir" "$PORT" 120
url="http://127.0.0.1:$PORT/"

# one DURATION: "rss_kb responses packets" of one diagnosis with a load phase.
one() {
  /usr/bin/time -f '%M' -o "$dir/time" \
    "$bin" diagnose --json --rate "$RATE" --duration "$1" "$url" >"$dir/out.json" 2>"$dir/err" || true
  local rss
  rss=$(tail -n 1 "$dir/time")
  python3 - "$dir/out.json" "$rss" <<'EOF'
import json, sys
d = json.load(open(sys.argv[1]))
load = d.get("load") or {}
capture = d.get("capture") or {}
print(sys.argv[2], load.get("responses", 0), capture.get("packets", 0))
EOF
}

read -r short_kb short_n short_p < <(one "$SHORT")
read -r long_kb long_n long_p < <(one "$LONG")
printf '%-8s %10s %10s %12s\n' phase "RSS MB" responses packets
printf '%-8s %10d %10d %12d\n' "$SHORT" $((short_kb / 1024)) "$short_n" "$short_p"
printf '%-8s %10d %10d %12d\n' "$LONG" $((long_kb / 1024)) "$long_n" "$long_p"
awk -v s="$short_kb" -v l="$long_kb" -v short="$SHORT" -v long="$LONG" 'BEGIN {
  r = l / s
  printf "peak RSS %s / %s: x%.2f (goal: x1.10 at most) %s\n", long, short, r, (r <= 1.10 ? "ok" : "OVER")
}'
