#!/usr/bin/env bash
# Short fuzzing pass over every cargo-fuzz target (fuzz/): ~15 s each (24
# targets: six minutes, so that the whole CI run stays well under 40), seeded
# from fuzz/seeds/TARGET (tiny valid inputs, see fuzz/seeds/make_seeds.py).
# Fails on a crash, a leak or a timeout and prints the input that caused it.
#
#   FUZZ_SECONDS=60 scripts/fuzz-smoke.sh        # longer
#   scripts/fuzz-smoke.sh read_capture            # one target
set -euo pipefail
cd "$(dirname "$0")/.."

seconds="${FUZZ_SECONDS:-15}"

if ! cargo fuzz --version >/dev/null 2>&1; then
  echo "== installing cargo-fuzz"
  cargo install cargo-fuzz --locked
fi

# cargo-fuzz needs nightly flags (-Z sanitizer, coverage): a nightly toolchain
# when there is one, else stable told to accept them.
if rustup toolchain list 2>/dev/null | grep -q '^nightly'; then
  fuzz=(cargo +nightly fuzz)
else
  fuzz=(cargo fuzz)
  export RUSTC_BOOTSTRAP=1
fi

targets=("$@")
if [ "${#targets[@]}" -eq 0 ]; then
  mapfile -t targets < <("${fuzz[@]}" list)
fi

echo "== building fuzz targets (${fuzz[*]})"
"${fuzz[@]}" build

failed=0
for t in "${targets[@]}"; do
  corpus="fuzz/corpus/$t"   # new inputs go here (git-ignored)
  seeds="fuzz/seeds/$t"     # read only
  artifacts="fuzz/artifacts/$t"
  mkdir -p "$corpus" "$seeds" "$artifacts"
  marker="$(mktemp)"
  log="$(mktemp)"
  echo "== fuzz $t for ${seconds}s"
  if "${fuzz[@]}" run "$t" "$corpus" "$seeds" -- \
    -max_total_time="$seconds" -rss_limit_mb=2048 -print_final_stats=1 >"$log" 2>&1; then
    grep -E '^stat::number_of_executed_units|^Done ' "$log" | sed "s/^/   $t: /" || true
  else
    failed=1
    tail -n 40 "$log"
    echo "!! $t failed; the input that triggered it:"
    found=0
    while IFS= read -r -d '' f; do
      echo "   $f"
      echo "   reproduce: ${fuzz[*]} run $t $f"
      found=1
    done < <(find "$artifacts" -type f -newer "$marker" -print0)
    if [ "$found" -eq 0 ]; then
      grep -E 'Test unit written to|artifact' "$log" || echo "   (no artifact written; full log: $log)"
    fi
  fi
  rm -f "$marker"
  if [ "$failed" -eq 0 ]; then rm -f "$log"; fi
done

if [ "$failed" -ne 0 ]; then
  echo "fuzz: FAILED"
  exit 1
fi
echo "fuzz: ${#targets[@]} targets, ${seconds}s each, no crash"
