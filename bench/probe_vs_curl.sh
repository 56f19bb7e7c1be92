#!/usr/bin/env bash
# whyslow probe vs curl -w on the same local server, same request count, one run.
# Prints each tool's median time_total and the ratio whyslow/curl: whyslow must
# not add overhead curl doesn't (ratio ≈ 1 or below).
set -euo pipefail
cd "$(dirname "$0")/.."
N=${N:-200}
cargo build --release -q -p whyslow
bin=target/release/whyslow
log=$(mktemp); trap 'kill $lab 2>/dev/null; rm -f $log' EXIT
$bin lab run healthy >"$log" 2>&1 & lab=$!
for _ in $(seq 50); do url=$(head -1 "$log"); [[ $url == http* ]] && break; sleep 0.1; done
median() { sort -n | awk '{a[NR]=$1} END {print (NR%2 ? a[(NR+1)/2] : (a[NR/2]+a[NR/2+1])/2)}'; }
fmt='%{time_total}\n'
urls=(); for _ in $(seq "$N"); do urls+=("$url"); done

# One reused connection: curl with N URLs keeps the connection alive.
c_reused=$(curl -s -o /dev/null -w "$fmt" "${urls[@]}" | median)
w_reused=$($bin probe -n "$N" -w "$fmt" "$url" | median)
# A fresh connection per request.
c_fresh=$(for _ in $(seq "$N"); do curl -s -o /dev/null -w "$fmt" "$url"; done | median)
w_fresh=$($bin probe --fresh -n "$N" -w "$fmt" "$url" | median)

printf '%-22s %12s %12s %8s\n' "median time_total" "curl (s)" "whyslow (s)" "ratio"
awk -v c="$c_reused" -v w="$w_reused" 'BEGIN {printf "%-22s %12.6f %12.6f %7.2fx\n", "reused connection", c, w, w/c}'
awk -v c="$c_fresh" -v w="$w_fresh" 'BEGIN {printf "%-22s %12.6f %12.6f %7.2fx\n", "fresh connections", c, w, w/c}'
