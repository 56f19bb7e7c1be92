#!/usr/bin/env bash
# The whole test suite, on a fresh Debian machine or this one: installs what
# the tests need (Debian packages, cargo tools), then checks format, lints,
# runs every test and a short fuzzing pass.
set -euo pipefail
cd "$(dirname "$0")/.."

sudo_if_needed() { if [ "$(id -u)" -eq 0 ]; then "$@"; else sudo "$@"; fi; }

# Real peers the tests run against or compare with: capture and HTTP peers,
# the backing servers of the wire tests and the client libraries their apps
# use; clang, llvm and libbpf's headers rebuild the checked-in eBPF object;
# dnsmasq and nftables make a resolver (and its lost queries) in a namespace;
# editcap (wireshark-common) removes packets from a capture as a lossy one lost them.
packages=(tcpdump tshark wireshark-common nginx-light curl openssl python3 libcap2-bin dnsmasq-base nftables iproute2
  redis-server memcached postgresql postgresql-client mariadb-server nghttp2-server nghttp2-client
  chromium man-db python3-venv clang llvm libbpf-dev python3-redis python3-psycopg2 python3-pg8000 python3-pymemcache python3-requests python3-sqlalchemy python3-pymysql)
missing=()
for p in "${packages[@]}"; do dpkg -s "$p" >/dev/null 2>&1 || missing+=("$p"); done
# The JVM and Go test apps: a JDK and Maven (which fetches pgJDBC from Maven
# Central), Go (which fetches pgx from the module proxy; go.mod asks for
# 1.26 or later: grpc-go asks for it). Taken from Debian only where none is on PATH.
command -v javac >/dev/null || missing+=(default-jdk-headless)
command -v mvn >/dev/null || missing+=(maven)
command -v go >/dev/null || missing+=(golang-go)
# Node.js resolves names through glibc and through c-ares in the DNS tests.
command -v node >/dev/null || missing+=(nodejs)
if [ "${#missing[@]}" -gt 0 ]; then
  echo "== installing ${missing[*]}"
  sudo_if_needed apt-get update -qq
  sudo_if_needed env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${missing[@]}"
fi
rustup component add rustfmt clippy >/dev/null 2>&1 || true

# OpenTelemetry, for the instrumented test app and the reference protobuf
# definitions spans written with --otlp are decoded with, and psycopg2-binary (its
# libpq brings its own libssl, which the eBPF source must find) come from
# PyPI: into a virtual environment over Debian's Python, which brings the rest;
# so does MySQL Connector/Python (prepared statements on the binary protocol),
# which Debian does not package, grpcio (a real gRPC server and client), and
# the asyncio app's aiohttp, asyncpg and redis-py (apps/asyncio_app.py), and
# kubernetes-validate, whose Kubernetes schemas (vendored in the package)
# check deploy/kubernetes offline.
otel=(opentelemetry-sdk==1.45.1 opentelemetry-instrumentation-requests==0.66b1
  opentelemetry-instrumentation-psycopg2==0.66b1 opentelemetry-instrumentation-threading==0.66b1
  opentelemetry-proto==1.45.1 opentelemetry-exporter-otlp-proto-http==1.45.1
  opentelemetry-exporter-otlp-proto-grpc==1.45.1
  opentelemetry-instrumentation-sqlalchemy==0.66b1 psycopg2-binary==2.9.10
  mysql-connector-python==9.1.0 grpcio==1.85.1
  aiohttp==3.14.5 asyncpg==0.32.0 redis==8.2.0 kubernetes-validate==1.31.0)
if ! target/pyenv/bin/python -c "import opentelemetry.instrumentation.psycopg2, opentelemetry.instrumentation.requests, opentelemetry.instrumentation.threading, opentelemetry.proto, opentelemetry.exporter.otlp.proto.http, opentelemetry.exporter.otlp.proto.grpc, opentelemetry.instrumentation.sqlalchemy, mysql.connector, grpc, aiohttp, asyncpg, redis.asyncio, kubernetes_validate" 2>/dev/null \
  || ! target/pyenv/bin/pip show -q psycopg2-binary >/dev/null 2>&1; then
  echo "== installing ${otel[*]} into target/pyenv"
  mkdir -p target
  /usr/bin/python3 -m venv --system-site-packages target/pyenv
  target/pyenv/bin/pip install -q "${otel[@]}"
fi

# The Node.js app's pg and ioredis (apps/node), from the npm registry at
# the versions its lock file pins, into target/nodeapp.
if [ ! -d target/nodeapp/node_modules/ioredis ] \
  || ! cmp -s crates/whyslow/tests/apps/node/package-lock.json target/nodeapp/package-lock.json; then
  echo "== installing the Node app's packages into target/nodeapp"
  mkdir -p target/nodeapp
  cp crates/whyslow/tests/apps/node/package.json crates/whyslow/tests/apps/node/package-lock.json target/nodeapp/
  (cd target/nodeapp && npm ci --no-audit --no-fund --loglevel=error)
fi

# The tokio app's crates (apps/tokio, its own lock file), from crates.io:
# the tests build it.
echo "== fetching the tokio app's crates"
cargo fetch --locked --manifest-path crates/whyslow/tests/apps/tokio/Cargo.toml

echo "== eBPF object"
crates/ebpf/bpf/build.sh --check
echo "== cargo fmt"
cargo fmt --all -- --check
echo "== cargo clippy"
cargo clippy --workspace --all-targets -- -D warnings
# Every test's files (captures, servers' data directories, sockets) go into
# one directory removed when the run ends, whatever its result: left behind,
# they filled the disk in a few dozen runs. Readable by all: PostgreSQL runs
# as its own user inside it.
TMPDIR="$(mktemp -d "${TMPDIR:-/tmp}/whyslow-test.XXXXXX")"
export TMPDIR
chmod 0755 "$TMPDIR"
trap 'rm -rf "$TMPDIR"' EXIT
echo "== cargo test"
# Every test binary runs, whatever failed before it: the closing line counts them all.
cargo test --workspace --no-fail-fast 2>&1 | tee target/test.log
echo "== long captures (short): the bench's steps on the test build"
BIN=target/debug/whyslow SECS="1 3" RUNS=1 CHECK_ONLY=1 bench/analyze_long_captures.sh
if [ -d fuzz ]; then
  echo "== fuzz (short)"
  scripts/fuzz-smoke.sh
fi

# One closing line over every test binary (cargo prints one per binary).
awk '/^test result:/ { p += $4; f += $6 } END { printf "whyslow: %d passed, %d failed\n", p, f }' target/test.log
