#!/usr/bin/env bash
# Instructions per HTTP/2 request, counted by valgrind's callgrind (user space, all
# libraries: nghttp2, OpenSSL, libc): a figure that a busy machine does not move, for
# comparing two builds of Umbra where wall-clock rates are noise. Not a scenario of
# bench/run (it measures Umbra alone, under valgrind); see bench/README.md.
#
# Usage: bench/h2_instructions.sh [UMBRA_BIN]   (default: $UMBRA_BIN, else build-bench's)
# Knobs: H2I_REQUESTS (5000: requests of the echo and 1 KiB cases; the 1 MiB case makes
# H2I_REQUESTS / 125 of them), H2_CONNECTIONS, H2_STREAMS (10, 32, as the h2 scenario).
#
# One worker, under callgrind with instrumentation off until Umbra serves; per case, a
# warm-up h2load run, the counters zeroed, an h2load run of N requests over TLS (ALPN h2,
# -cH2_CONNECTIONS -mH2_STREAMS, new connections: their handshakes are counted too), the
# counters dumped; prints instructions / N.
set -euo pipefail
# shellcheck source=bench/lib.sh
. "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

: "${H2I_REQUESTS:=5000}"
: "${H2_CONNECTIONS:=10}"
: "${H2_STREAMS:=32}"
[[ $H2I_REQUESTS =~ ^[1-9][0-9]*$ ]] || die "H2I_REQUESTS must be a positive integer"
[[ -n ${1:-} ]] && UMBRA_BIN=$1
need valgrind callgrind_control h2load curl openssl awk
bench_init
ensure_umbra
ensure_origin

make_cert
cert=$BENCH_CERT
key=$BENCH_KEY
start_origin

dir=$BENCH_TMP/umbra
mkdir -p "$dir"
port=$(free_port)
cat >"$dir/config.lua" <<EOF
listen = { { "127.0.0.1:$port", tls = true } }
workers = 1
$(if ((EUID == 0)); then echo 'user = "root"'; fi)
tls = { { hosts = { "localhost" }, cert = "$cert", key = "$key" } }
upstreams = { app = { servers = { "http://127.0.0.1:$ORIGIN_PORT" } } }
cache = { memory = "256MB", max_object = "64MB" }
routes = {
  { path = "/echo", on_request = function(req) return umbra.respond(200, req.client_ip) end },
  { path = "/hit/", upstream = "app" },
}
EOF
bench_start umbra "$dir/umbra.log" valgrind --tool=callgrind --instr-atstart=no \
    --callgrind-out-file="$dir/cg.out" "$UMBRA_BIN" "$dir/config.lua"
pid=$BENCH_LAST_PID
base="https://127.0.0.1:$port"
for ((i = 0; i < 300; i++)); do
    curl -sk -o /dev/null "$base/echo" && break
    kill -0 "$pid" 2>/dev/null || die "umbra under valgrind exited (log: $dir/umbra.log)"
    sleep 0.2
done
callgrind_control -i on "$pid" >/dev/null

big=$((H2I_REQUESTS / 125))
((big > 0)) || big=1
for c in "echo /echo $H2I_REQUESTS" "hit1k /hit/1k?size=1024&cc=max-age%3D3600 $H2I_REQUESTS" \
    "hit1m /hit/1m?size=1048576&cc=max-age%3D3600 $big"; do
    read -r name path n <<<"$c"
    # Warm-up (and, for the hits, the fill).
    h2load -n $((H2_CONNECTIONS * H2_STREAMS)) -c "$H2_CONNECTIONS" -m "$H2_STREAMS" "$base$path" >/dev/null 2>&1
    callgrind_control -z "$pid" >/dev/null
    h2load -n "$n" -c "$H2_CONNECTIONS" -m "$H2_STREAMS" "$base$path" >"$BENCH_TMP/h2load.txt" 2>&1
    rm -f "$dir"/cg.out.*
    callgrind_control -d "$pid" >/dev/null
    for ((i = 0; i < 50; i++)); do
        compgen -G "$dir/cg.out.*" >/dev/null && break
        sleep 0.1
    done
    ok=$(awk '/^requests:/ { print $8 }' "$BENCH_TMP/h2load.txt")
    [[ $ok == "$n" ]] || die "$name: $ok of $n requests succeeded ($(grep -E '^(requests|status codes):' "$BENCH_TMP/h2load.txt" | tr '\n' ' '))"
    ins=$(awk '/^(summary|totals):/ && !seen { print $2; seen = 1 }' "$dir"/cg.out.*)
    printf '%-6s %12s instructions per request (%s requests, -c%s -m%s, TLS)\n' "$name" \
        "$(awk -v i="$ins" -v n="$n" 'BEGIN { printf "%.0f", i / n }')" "$n" "$H2_CONNECTIONS" "$H2_STREAMS"
done
