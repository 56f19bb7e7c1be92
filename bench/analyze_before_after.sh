#!/usr/bin/env bash
# whyslow analyze built from two commits, alternated on the same captures:
# does a change keep analysis speed? BASE (default: the last commit before
# attribution with evidence: trace context, deduction, ambiguity) is built in
# target/before-after/ from `git archive`; the working tree is the "after".
#
# Captures (made once, in one run):
#   http     nginx loaded by wrk (bench/analyze_vs_tshark.sh, CAPTURE_ONLY=1)
#   backing  redis-benchmark and pgbench (bench/analyze_backing_vs_tshark.sh)
#   lab      the lab's orm-storm under `whyslow load -c 16` with no trace
#            context: 101 statements per checkout, 16 checkouts in flight,
#            every statement placed by deduction or declared ambiguous
# Then RUNS (default 5) rounds, each timing before then after on every
# capture; prints every round's wall seconds (a round the shared host
# disturbed shows), the median wall seconds of each and after/before (goal:
# within 1.10), and the median CPU seconds beside them.
#
#   bench/analyze_before_after.sh
#   BASE=HEAD~3 RUNS=7 MIN_MB=500 bench/analyze_before_after.sh
set -euo pipefail
cd "$(dirname "$0")/.."
BASE=${BASE:-778718c^}
RUNS=${RUNS:-5}
MIN_MB=${MIN_MB:-300}
LAB_SECS=${LAB_SECS:-20}

. bench/lib.sh
need_packages time
base_rev=$(git rev-parse --short "$BASE")
work=$PWD/target/before-after
before=$work/$base_rev/target/release/whyslow
if [ ! -x "$before" ]; then
  echo "== building $base_rev (before)"
  rm -rf "${work:?}/$base_rev" && mkdir -p "$work/$base_rev"
  git archive "$base_rev" | tar -x -C "$work/$base_rev"
  (cd "$work/$base_rev" && cargo build --release -q -p whyslow)
fi
echo "== building the working tree (after)"
cargo build --release -q -p whyslow
after=$PWD/target/release/whyslow

dir=$(mktemp -d /tmp/whyslow-before-after.XXXXXX)
lab_pid=
cleanup() {
  [ -n "$lab_pid" ] && kill "$lab_pid" 2>/dev/null
  # The peer benches' directories, kept for their captures.
  for cap in "${http:-}" "${backing:-}"; do [ -n "$cap" ] && rm -rf "$(dirname "$cap")"; done
  if [ -n "${KEEP:-}" ]; then echo "kept: $dir"; else rm -rf "$dir"; fi
}
trap cleanup EXIT

# capture_of SCRIPT: runs a peer bench in CAPTURE_ONLY mode, prints its capture.
capture_of() {
  CAPTURE_ONLY=1 MIN_MB=$MIN_MB bash "bench/$1.sh" | tee /dev/stderr | grep '^capture: ' | cut -d' ' -f2
}

echo "== capture: http"
http=$(capture_of analyze_vs_tshark)
echo "== capture: backing"
backing=$(capture_of analyze_backing_vs_tshark)
echo "== capture: lab orm-storm, 16 clients, ${LAB_SECS}s, no trace context"
start_lab "$after" orm-storm "$dir"
url=$lab_url
lab=$dir/lab.pcapng
sudo_if_needed "$after" capture -i lo -w "$lab" -- \
  "$after" load -q -c 16 --duration "${LAB_SECS}s" --trace-context off "$url" 2>&1 |
  grep -E 'written to|requests' | sed 's/^/   /' || true
kill "$lab_pid" && lab_pid=

for cap in "$http" "$backing" "$lab"; do settle "$cap"; done
names=(http backing lab)
caps=("$http" "$backing" "$lab")
for round in $(seq "$RUNS"); do
  echo "== round $round of $RUNS"
  for i in 0 1 2; do
    for side in before after; do
      bin=$before; [ "$side" = after ] && bin=$after
      # A run that failed is no sample: it is listed as FAIL, and left out
      # (exit 9, a capture cut short, still analyzed all it holds).
      status=0
      /usr/bin/time -f '%e %U %S' -o "$dir/t" "$bin" analyze "${caps[$i]}" >/dev/null 2>&1 || status=$?
      if [ "$status" = 0 ] || [ "$status" = 9 ]; then
        echo "${names[$i]} $side $round $(tail -n 1 "$dir/t")" >>"$dir/times"
      else
        echo "${names[$i]} $side $round FAIL" >>"$dir/times"
      fi
    done
  done
done

# Every round, so that a round the host disturbed shows as one.
echo
echo "wall seconds per round (before/after):"
awk -v order="${names[*]}" '
  { v[$1, $3, $2] = $4; if ($3 > rounds) rounds = $3 }
  END {
    k = split(order, name, " ")
    for (i = 1; i <= k; i++) {
      line = sprintf("%-10s", name[i])
      for (r = 1; r <= rounds; r++) line = line sprintf(" %s/%s", v[name[i], r, "before"], v[name[i], r, "after"])
      print line
    }
  }' "$dir/times"

echo
printf '%-10s %6s %11s %11s %13s %12s %12s\n' capture MB "before (s)" "after (s)" "after/before" "CPU before" "CPU after"
for i in 0 1 2; do
  mb=$(( $(stat -c %s "${caps[$i]}") / 1000000 ))
  awk -v n="${names[$i]}" -v mb="$mb" '
    function median(a, k,   i, j, t) {
      for (i = 1; i <= k; i++) for (j = i + 1; j <= k; j++) if (a[j] < a[i]) { t = a[i]; a[i] = a[j]; a[j] = t }
      return a[int((k + 1) / 2)]
    }
    $4 == "FAIL" { next }
    $1 == n && $2 == "before" { b[++nb] = $4; cb[nb] = $5 + $6 }
    $1 == n && $2 == "after" { a[++na] = $4; ca[na] = $5 + $6 }
    END {
      if (!nb || !na) { printf "%-10s %6d every run of one side failed\n", n, mb; exit }
      mb_ = median(b, nb); ma = median(a, na); cb_ = median(cb, nb); ca_ = median(ca, na)
      printf "%-10s %6d %11.2f %11.2f %12.2fx %12.2f %12.2f %s\n", n, mb, mb_, ma, ma / (mb_ > 0 ? mb_ : 0.01),
        cb_, ca_, (ma <= 1.10 * mb_ ? "(goal <= 1.10: kept)" : "(goal <= 1.10: NOT kept)")
    }' "$dir/times"
done
echo "medians over the rounds; CPU: user + system seconds"
echo "before: $base_rev  after: $(git rev-parse --short HEAD)$(git diff --quiet || echo ' + working tree')"
