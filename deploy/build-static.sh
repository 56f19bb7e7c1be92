#!/usr/bin/env bash
# The static (musl) build the Containerfile copies, and a check that it runs
# as it would in that image: alone in an empty root (chroot into a directory
# holding only /whyslow and an empty /tmp), as FROM scratch gives it —
# `whyslow demo` there, its lab, capture and analysis included.
# Builds the image too where podman or buildah is installed.
#
#   deploy/build-static.sh
#
# Needs root (chroot), and fetches the musl target with rustup.
set -euo pipefail
cd "$(dirname "$0")/.."
target=x86_64-unknown-linux-musl
rustup target add "$target" >/dev/null
command -v musl-gcc >/dev/null || {
  apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends musl-tools
}
cargo build --release --target "$target" -p whyslow
bin="target/$target/release/whyslow"
file "$bin" | grep -q 'static' || { echo "$bin is not static" >&2; exit 1; }
root=$(mktemp -d)
trap 'rm -rf "$root"' EXIT
cp "$bin" "$root/whyslow"
mkdir -m 1777 "$root/tmp"
chroot "$root" /whyslow --version
chroot "$root" /whyslow demo
for builder in podman buildah; do
  if command -v "$builder" >/dev/null; then
    "$builder" build -f deploy/Containerfile -t whyslow:static .
    exit 0
  fi
done
echo "no podman or buildah here: the image itself was not built"
