#!/usr/bin/env bash
# What one uprobe hit costs on this machine, by the instruction it sits on:
# a Go program (bench/apps/trapcost) calls a function N times whose body
# is one instruction of each kind — NOP, PUSHQ BP, MOVQ SP,BP, CMPQ
# SP,16(R14) (a Go function's usual first instruction), POPQ BP, RET — and
# a uprobe (tracefs's uprobe_events, tracing off: the trap and the kernel's
# handling of it, no event written) is put on each in turn. x86's uprobes
# emulate some probed instructions and single-step the others out of line
# (a second trap; under a hypervisor, each one a VM exit): the ns per hit
# say which is which here. Rounds alternate the placements; the minimum of
# RUNS rounds is printed, with the bare call's ns beside.
#
#   bench/uprobe_trap_cost.sh
#   RUNS=5 CALLS=400000 bench/uprobe_trap_cost.sh
#
# Needs root (uprobe_events) and Go.
set -euo pipefail
cd "$(dirname "$0")/.."

RUNS=${RUNS:-3}
CALLS=${CALLS:-200000}
T=/sys/kernel/tracing
[ -d "$T/events" ] || mount -t tracefs nodev "$T"
work=$(mktemp -d)
bin="$work/trapcost"
(cd bench/apps/trapcost && go build -o "$bin" .)

# The function's instructions: "offset-in-file name" lines.
symbol=$(go tool nm "$bin" | awk '$3 == "main.probeMe.abi0" { print $1 }')
read -r seg_vaddr seg_off < <(readelf -lW "$bin" | awk '$1 == "LOAD" && / R?E / { print $3, $2; exit }')
base=$(( 0x$symbol - seg_vaddr + seg_off ))
placements=$(go tool objdump -s 'main.probeMe' "$bin" | awk 'NR > 1 { print $2, $4 }' |
  while read -r addr op; do
    printf '%d %s\n' $(( addr - 0x$symbol + base )) "$op"
  done)

cleanup() {
  { echo 0 > "$T/events/trapcost/probe/enable"; } 2>/dev/null || true
  { echo '-:trapcost/probe' >> "$T/uprobe_events"; } 2>/dev/null || true
  echo 1 > "$T/tracing_on"
  rm -rf "$work"
}
trap cleanup EXIT

bare() { "$bin" "$CALLS"; }
probed() { # OFFSET
  echo "p:trapcost/probe $bin:$1" >> "$T/uprobe_events"
  echo 1 > "$T/events/trapcost/probe/enable"
  "$bin" "$CALLS"
  echo 0 > "$T/events/trapcost/probe/enable"
  echo '-:trapcost/probe' >> "$T/uprobe_events"
}

echo 0 > "$T/tracing_on"
declare -A best
for run in $(seq "$RUNS"); do
  ns=$(bare); best[bare]=$(printf '%s\n' "$ns" "${best[bare]:-1e18}" | sort -g | head -1)
  while read -r off op; do
    ns=$(probed "$off")
    best[$op]=$(printf '%s\n' "$ns" "${best[$op]:-1e18}" | sort -g | head -1)
  done <<< "$placements"
done

echo "uprobe hit cost, $CALLS calls, best of $RUNS rounds ($(uname -r), $(nproc) CPUs$(systemd-detect-virt 2>/dev/null | sed 's/^/, /' || true))"
printf '%-8s %10s %12s\n' probed "ns/call" "ns/hit"
printf '%-8s %10s %12s\n' none "${best[bare]}" -
while read -r off op; do
  printf '%-8s %10s %12.0f\n' "$op" "${best[$op]}" "$(echo "${best[$op]} - ${best[bare]}" | bc -l)"
done <<< "$placements"
