#!/usr/bin/env bash
# Builds sockio.bpf.o from sockio.bpf.c with Debian's clang and libbpf
# headers (apt-get install clang llvm libbpf-dev), CO-RE against the
# checked-in vmlinux.h. The object is checked in, so building whyslow needs
# only a Rust toolchain; CI runs `build.sh --check` to hold it to its source.
#
# vmlinux.h was generated on Linux 6.18 with
#   bpftool btf dump file /sys/kernel/btf/vmlinux format c > vmlinux.h
# CO-RE relocations make the object load on other kernels with BTF.
set -euo pipefail
cd "$(dirname "$0")"
out=sockio.bpf.o
if [ "${1:-}" = --check ]; then out=$(mktemp /tmp/sockio.XXXXXX.o); fi
# Relative paths and a fixed compilation directory: the same bytes wherever
# the repository is checked out.
clang -target bpf -D__TARGET_ARCH_x86 -O2 -g -fdebug-compilation-dir=. \
  -I. -c sockio.bpf.c -o "$out"
llvm-strip -g "$out"
if [ "${1:-}" = --check ]; then
  if cmp -s "$out" sockio.bpf.o; then
    echo "sockio.bpf.o matches its source"; rm -f "$out"
  else
    echo "sockio.bpf.o does not match sockio.bpf.c: run crates/ebpf/bpf/build.sh" >&2
    rm -f "$out"; exit 1
  fi
fi
