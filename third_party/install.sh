#!/bin/sh
# Installs Umbra's build and test dependencies from Debian's packages when any is missing.
# Usage: third_party/install.sh [--bench]
set -eu
pkgs="build-essential cmake pkg-config libluajit-5.1-dev libcurl4-openssl-dev libssl-dev
libnghttp2-dev zlib1g-dev libbrotli-dev libzstd-dev libhiredis-dev libxxhash-dev libcrypt-dev libcmocka-dev python3 curl
openssl apache2-utils nghttp2-client nghttp2-server python3-h2 python3-grpcio clang prometheus chromium brotli zstd redis-server man-db groff-base pebble"
if [ "${1:-}" = "--bench" ]; then
    pkgs="$pkgs wrk apache2 nginx-light varnish trafficserver caddy haproxy"
fi
missing=""
for p in $pkgs; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing="$missing $p"
done
[ -z "$missing" ] && exit 0
echo "installing:$missing" >&2
if [ "$(id -u)" -eq 0 ]; then as_root=""; else as_root="sudo"; fi
$as_root apt-get update -qq
# shellcheck disable=SC2086
DEBIAN_FRONTEND=noninteractive $as_root apt-get install -y -qq --no-install-recommends $missing >&2
