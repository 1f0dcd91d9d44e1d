#!/usr/bin/env bash
# Scenario "h2": HTTP/2 over TLS, Umbra against nginx with http2 on and the same ECDSA
# P-256 certificate, h2load with several streams per connection (issue 15), measured in
# one run in alternating rounds:
#   echo    the client's address: umbra.respond(200, req.client_ip) from an on_request hook
#           against nginx's `return 200 $remote_addr`;
#   hit1k   a 1 KiB cache hit (Umbra's cache against nginx's proxy_cache, on tmpfs);
#   hit1m   a 1 MiB cache hit, in MB/s.
# Targets (Umbra / nginx): echo >= 1.2, hit1k >= 1.5, hit1m >= 1.0. See bench/README.md.
set -euo pipefail
# shellcheck source=bench/lib.sh
. "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

# h2load's connections and streams per connection.
: "${H2_CONNECTIONS:=10}"
: "${H2_STREAMS:=32}"
# Both servers' limit of concurrent streams per connection, the same for both: their
# default (128) unless the client asks for more (then as many as it asks), so that no
# server refuses a stream the client opens (lib.sh, "the servers' own limits").
H2_MAX_STREAMS=$((H2_STREAMS > 128 ? H2_STREAMS : 128))

SMALL=1024
BIG=1048576
CC_LONG="cc=max-age%3D3600"
declare -A URLPATH=([echo]=/echo [hit1k]="/hit/1k?size=$SMALL&$CC_LONG" [hit1m]="/hit/1m?size=$BIG&$CC_LONG")
declare -A SIZE=([hit1k]=$SMALL [hit1m]=$BIG)
declare -A TARGET=([echo]=1.2 [hit1k]=1.5 [hit1m]=1.0)
declare -A UNIT=([echo]="req/s" [hit1k]="req/s" [hit1m]="MB/s")
CASES=(echo hit1k hit1m)

need h2load curl openssl python3 awk timeout pgrep getconf cmp
[[ $H2_CONNECTIONS =~ ^[1-9][0-9]*$ ]] || die "H2_CONNECTIONS must be a positive integer (got '$H2_CONNECTIONS')"
[[ $H2_STREAMS =~ ^[1-9][0-9]*$ ]] || die "H2_STREAMS must be a positive integer (got '$H2_STREAMS')"
bench_init
if bench_uses umbra; then ensure_umbra; fi
ensure_origin
raise_nofile $((4 * H2_CONNECTIONS + 512))
read -r -a SRV <<<"$SERVERS"

# One certificate for both servers.
make_cert
cert=$BENCH_CERT
key=$BENCH_KEY

start_origin
origin_ref "$SMALL" "$BENCH_TMP/ref.hit1k"
origin_ref "$BIG" "$BENCH_TMP/ref.hit1m"
printf '127.0.0.1' >"$BENCH_TMP/ref.echo"

declare -A PORT PID
PID[origin]=$ORIGIN_PID
if bench_uses nginx; then
    nginx -V 2>&1 | grep -q -- --with-http_v2_module || die "this nginx has no http_v2 module"
    NGINX_CACHE=/dev/shm/$(basename "$BENCH_TMP")-nginx-cache
    BENCH_EXTRA_DIRS+=("$NGINX_CACHE")
    mkdir -p "$NGINX_CACHE"
    chmod 777 "$NGINX_CACHE"
    NGINX_TLS_PORT=$(free_port)
    # nginx 1.22 (Debian 12) turns HTTP/2 on with the listen parameter (`http2 on;` is 1.25's).
    start_nginx_with "worker_rlimit_nofile $NOFILE;" "    $NGINX_OPEN_FILE_CACHE
    ssl_certificate $cert;
    ssl_certificate_key $key;
    ssl_protocols TLSv1.2 TLSv1.3;
    ssl_session_tickets on;
    http2_max_concurrent_streams $H2_MAX_STREAMS;
    proxy_cache_path $NGINX_CACHE levels=1:2 keys_zone=bench:16m max_size=256m inactive=1h use_temp_path=off;
$(nginx_upstream app "$ORIGIN_PORT")
    server {
        listen 127.0.0.1:$NGINX_TLS_PORT ssl http2;
        location = /echo {
            default_type text/plain;
            return 200 \$remote_addr;
        }
        location /hit/ {
            proxy_pass http://app;
            proxy_http_version 1.1;
            proxy_set_header Connection \"\";
            proxy_cache bench;
            proxy_cache_lock on;
            add_header X-Cache-Status \$upstream_cache_status always;
        }
    }" "location / { return 404; }"
    wait_port nginx "$NGINX_PID" "$NGINX_TLS_PORT" "$BENCH_TMP/nginx/error.log"
    PORT[nginx]=$NGINX_TLS_PORT
    PID[nginx]=$NGINX_PID
fi
if bench_uses umbra; then
    UMBRA_TLS_PORT=$(free_port)
    start_umbra_with "listen[#listen + 1] = { \"127.0.0.1:$UMBRA_TLS_PORT\", tls = true }
tls = { { hosts = { \"localhost\" }, cert = \"$cert\", key = \"$key\" } }
upstreams = { app = { servers = { \"http://127.0.0.1:$ORIGIN_PORT\" } } }
cache = { memory = \"256MB\", max_object = \"64MB\" }
http2 = { max_concurrent_streams = $H2_MAX_STREAMS }
routes = {
  { path = \"/echo\", on_request = function(req) return umbra.respond(200, req.client_ip) end },
  { path = \"/hit/\", upstream = \"app\" },
}"
    wait_port umbra "$UMBRA_PID" "$UMBRA_TLS_PORT" "$BENCH_TMP/umbra/umbra.log"
    PORT[umbra]=$UMBRA_TLS_PORT
    PID[umbra]=$UMBRA_PID
fi

url() { echo "https://127.0.0.1:${PORT[$1]}${URLPATH[$2]}"; }

# check SERVER CASE: two GETs over HTTP/2 answer 200 with the expected body; for the hits,
# the second one is a hit of the server's cache (warming it before the rounds).
check() {
    local s=$1 k=$2 i head out
    head=$BENCH_TMP/check.head
    for i in 1 2; do
        out=$(curl -s --http2 --cacert "$cert" --max-time 20 -o "$BENCH_TMP/check.body" -D "$head" \
            -w '%{http_version} %{http_code}' "$(url "$s" "$k")") || die "$s: curl $(url "$s" "$k") failed"
        [[ $out == "2 200" ]] || die "$s: GET ${URLPATH[$k]} (#$i): HTTP/$out, expected HTTP/2 200"
        cmp -s "$BENCH_TMP/check.body" "$BENCH_TMP/ref.$k" ||
            die "$s: GET ${URLPATH[$k]} (#$i): a body that is not the expected one"
    done
    if [[ $k == hit* ]]; then
        grep -qiE '^(Cache-Status:.*;[[:space:]]*hit([;,[:space:]]|$)|X-Cache-Status: HIT)' "$head" || {
            cat "$head" >&2
            die "$s: the second GET ${URLPATH[$k]} was not a cache hit (head above)"
        }
    fi
}
for s in "${SRV[@]}"; do
    for k in "${CASES[@]}"; do check "$s" "$k"; done
    log "$s: HTTP/2 over TLS answers /echo, and 1 KiB and 1 MiB cache hits"
done

# shellcheck disable=SC2034 # some are read by name (medians)
declare -A RATE CPU_S CPU_C US OREQ
# measure CASE SERVER ROUND
measure() {
    local k=$1 s=$2 r=$3 out rate n errs cs cc us o0 o1 bytes
    alive "$s" origin
    out=$BENCH_TMP/$k-$s-$r.txt
    bytes=${SIZE[$k]:-9}
    o0=$(origin_count)
    round_cpu_start "${PID[$s]}"
    conn_watch_start "${PORT[$s]}"
    run_timed "$out" $((DURATION + 60)) h2load -t "$WRK_THREADS" -c "$H2_CONNECTIONS" -m "$H2_STREAMS" \
        -D "$DURATION" "$(url "$s" "$k")"
    conn_watch_end
    if ((TIMED_RC != 0)); then
        tail -n 30 "$out" >&2
        die "h2load exited with $TIMED_RC against $(url "$s" "$k")"
    fi
    round_cpu_end "$TIMED_CPU" "${PID[$s]}"
    o1=$(origin_count)
    read -r rate n errs <<<"$(parse_h2load "$out" "$bytes" $((H2_CONNECTIONS * H2_STREAMS)))" || die "could not parse h2load's output ($out)"
    [[ $errs == none ]] || round_bad "$errs"
    # h2load does not reopen a connection the server ends (GOAWAY at nginx's
    # keepalive_requests): the round's requests would be the limit's.
    round_limits "$n" "$H2_CONNECTIONS"
    ((o1 == o0)) || round_bad "the origin got $((o1 - o0)) requests during the round (expected 0)"
    # The MB/s of the big hit: body bytes per second, in units of 10^6 bytes.
    if [[ $k == hit1m ]]; then rate=$(awk -v r="$rate" -v b="$BIG" 'BEGIN { printf "%.2f\n", r * b / 1e6 }'); fi
    cs=${ROUND_PCT[0]} cc=$ROUND_CLIENT_PCT
    us=$(us_each "${ROUND_TICKS[0]}" "$n" 1)
    printf '[bench] h2/%-6s %-6s round %d/%d: %10.2f %-5s  %s done  server CPU %s%% (%s us/req)  h2load CPU %s%%  %s\n' \
        "$k" "$s" "$r" "$ROUNDS" "$rate" "${UNIT[$k]}" "$n" "$cs" "$us" "$cc" "${ROUND_BAD:-answers right}" >&2
    [[ -n $ROUND_BAD ]] && return 0
    add_figures "$k,$s" RATE="$rate" CPU_S="$cs" CPU_C="$cc" US="$us" OREQ="$((o1 - o0))"
}

check_idle
total=$((${#CASES[@]} * ROUNDS * ${#SRV[@]} * (DURATION + 2)))
log "measuring: ${#CASES[@]} cases (${CASES[*]}) x $ROUNDS rounds x ${#SRV[@]} servers x ${DURATION}s (~${total}s)"
for k in "${CASES[@]}"; do each_round SRV measure "$k"; done

HOW="h2load -t$WRK_THREADS -c$H2_CONNECTIONS -m$H2_STREAMS -D$DURATION, TLS (ALPN h2)"
md=$(results_md h2)
{
    echo "# h2: Umbra vs nginx speaking HTTP/2 over TLS"
    echo
    bench_env_md "(not used: $HOW)"
    echo "- h2load: $(h2load --version 2>/dev/null | head -n1); $(openssl version)"
    echo "- certificate: self-signed ECDSA P-256 (the same file for both); TLS 1.2 and 1.3; the protocol is what h2load and each server agree on"
    echo "- nginx: master + 2 workers, listen ... ssl http2, return 200 \$remote_addr; proxy_cache on tmpfs (keys_zone 16m, proxy_cache_lock on), open_file_cache, upstream keepalive; Umbra: 2 workers, an on_request hook with umbra.respond(200, req.client_ip) and an upstream route with the cache"
    echo "- each case: $HOW; hits warmed before the rounds (the origin is asked during no round)"
    echo "- limits out of reach: nginx keepalive_requests $NGINX_KEEPALIVE_REQUESTS (in nginx 1.22 also the requests of an HTTP/2 connection), Umbra none; both http2 max concurrent streams $H2_MAX_STREAMS; a round is refused when its requests reach half of connections x keepalive_requests, or when fewer than $H2_CONNECTIONS client connections are open at 3/4 of the round (the server closed them; h2load does not reopen)"
    echo
    md_row case server median unit Umbra/nginx target met "server CPU %" "server us/req" "h2load CPU %" \
        "per round" repeated
    md_row --- --- ---: --- ---: --- --- ---: ---: ---: --- ---
} >"$md"

fmt='%-9s %-6s %12s %-6s %11s %-7s %-6s %11s %13s %11s\n'
# shellcheck disable=SC2059
printf "\n$fmt" case server median unit Umbra/nginx target met "server CPU%" "server us/req" "h2load CPU%"
printf '%s\n' "--------------------------------------------------------------------------------------------------------"
declare -A VERDICT=()
for k in "${CASES[@]}"; do
    declare -A MED=()
    median_map MED RATE "$k," "${SRV[@]}"
    for s in "${SRV[@]}"; do
        rr=$(umbra_ratio "$s" MED nginx)
        tg=- met=-
        if [[ $s == umbra ]]; then
            tg=">= ${TARGET[$k]}"
            met=$(atleast "$rr" "${TARGET[$k]}" met "not met")
        fi
        read -r cs cc us <<<"$(medians "$k,$s" CPU_S CPU_C US)"
        fixed 0 cs cc
        fixed 1 us
        # shellcheck disable=SC2059
        printf "$fmt" "h2/$k" "$s" "${MED[$s]}" "${UNIT[$k]}" "$rr" "$tg" "$met" "$cs" "$us" "$cc"
        md_row "h2/$k" "$s" "${MED[$s]}" "${UNIT[$k]}" "$rr" "$tg" "$met" "$cs" "$us" "$cc" \
            "${RATE[$k,$s]% }" "$(repeated_md "$k,$s")" >>"$md"
        if [[ $s == umbra && $rr != - ]]; then
            VERDICT[$k]="x nginx $rr ($met: >= ${TARGET[$k]})"
        fi
    done
done
{
    echo
    echo "server CPU: % of one CPU over h2load's run (200% = both CPUs of a 2-CPU machine) and"
    echo "CPU time per request, medians of the rounds; h2load CPU: the client's. The client and"
    echo "the servers share the machine's CPUs: compare the ratios, not the absolute figures, and"
    echo "only within one run; ratios within about 5-7% of each other mean \"the same\"."
    if ((${#VERDICT[@]})); then
        echo
        echo "Targets (issue 15): h2/echo >= 1.2 x nginx; h2/hit1k >= 1.5 x nginx; h2/hit1m (MB/s) >= 1.0 x nginx."
        echo
        each_verdict echo "- h2" "${CASES[@]}"
    fi
    repeats_md
    configs_md
} >>"$md"
echo
each_verdict log "target h2" "${CASES[@]}"
warn_repeats
log "results written to $md"
