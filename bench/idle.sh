#!/usr/bin/env bash
# Scenario "idle": what a server's memory grows by to hold idle keep-alive connections.
# IDLE_CONNECTIONS (9,000) connections to Umbra and to nginx (2 workers each), each having
# made one request (so a real keep-alive connection), left idle; the growth of the
# server's RSS (all its processes, from /proc) divided by the count. Plain HTTP, then TLS.
# The load generator is bench/idle_clients.py (epoll, bounded in count and time). Each
# round starts the server anew: memory a server freed after an earlier round would be
# reused and hide the cost. See bench/README.md.
set -euo pipefail
# shellcheck source=bench/lib.sh
. "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

: "${IDLE_CONNECTIONS:=9000}"
# Connections in progress at a time while opening them (and of the warm-up before the
# first measurement).
: "${IDLE_WINDOW:=64}"

need python3 openssl curl nginx
[[ $IDLE_CONNECTIONS =~ ^[1-9][0-9]*$ ]] || die "IDLE_CONNECTIONS must be a positive integer (got '$IDLE_CONNECTIONS')"
[[ $IDLE_WINDOW =~ ^[1-9][0-9]*$ ]] || die "IDLE_WINDOW must be a positive integer (got '$IDLE_WINDOW')"
bench_init
if bench_uses umbra; then ensure_umbra; fi
# The client and each server hold every connection: one descriptor each, and some more.
raise_nofile $((IDLE_CONNECTIONS + IDLE_WINDOW + 512))
# Both servers must accept them all (nginx: per worker, and the two may not share evenly).
NGINX_WORKER_CONNECTIONS=$((IDLE_CONNECTIONS + IDLE_WINDOW + 512))

docroot=$BENCH_TMP/docroot
mkdir -p "$docroot"
chmod 755 "$docroot"
make_file "$docroot/1k.bin" 1024

make_cert
tls_cert=$BENCH_CERT
tls_key=$BENCH_KEY

# Idle connections must outlive the measurement: both servers keep them 300 s.
declare -A PORT TLS_PORT PID
# start NAME: starts server NAME afresh; sets PORT, TLS_PORT and PID for it.
start() {
    case $1 in
    nginx)
        NGINX_TLS_PORT=$(free_port)
        start_nginx_with "worker_rlimit_nofile $NOFILE;" "    ssl_certificate $tls_cert;
    ssl_certificate_key $tls_key;
    ssl_protocols TLSv1.2 TLSv1.3;
    server {
        listen 127.0.0.1:$NGINX_TLS_PORT ssl;
        keepalive_timeout 300s;
        root $docroot;
    }" "keepalive_timeout 300s;
        root $docroot;"
        wait_port nginx "$NGINX_PID" "$NGINX_TLS_PORT" "$BENCH_TMP/nginx/error.log"
        PORT[nginx]=$NGINX_PORT TLS_PORT[nginx]=$NGINX_TLS_PORT PID[nginx]=$NGINX_PID
        ;;
    umbra)
        UMBRA_TLS_PORT=$(free_port)
        start_umbra_with "listen[#listen + 1] = { \"127.0.0.1:$UMBRA_TLS_PORT\", tls = true }
tls = { { hosts = { \"localhost\" }, cert = \"$tls_cert\", key = \"$tls_key\" } }
limits = { max_connections = $((IDLE_CONNECTIONS + IDLE_WINDOW + 512)) }
timeouts = { idle = 300 }
routes = { { path = \"/\", root = \"$docroot\" } }"
        wait_port umbra "$UMBRA_PID" "$UMBRA_TLS_PORT" "$BENCH_TMP/umbra/umbra.log"
        PORT[umbra]=$UMBRA_PORT TLS_PORT[umbra]=$UMBRA_TLS_PORT PID[umbra]=$UMBRA_PID
        ;;
    esac
}

# stop NAME: stops the server started by start (its PID only).
stop() {
    local pid=${PID[$1]} keep=() p
    stop_pid "$pid"
    for p in "${BENCH_PIDS[@]}"; do [[ $p == "$pid" ]] || keep+=("$p"); done
    BENCH_PIDS=("${keep[@]}")
}

read -r -a SRV <<<"$SERVERS"
CASES=(plain tls)
declare -A WHAT=(
    [plain]="$IDLE_CONNECTIONS idle keep-alive connections over plain HTTP, one GET /1k.bin each"
    [tls]="$IDLE_CONNECTIONS idle keep-alive connections over TLS (the client's default: TLS 1.3), one GET /1k.bin each"
)

# shellcheck disable=SC2034 # read by name (medians)
declare -A BYTES
# measure CASE SERVER ROUND
measure() {
    local k=$1 s=$2 r=$3 out line port flag=() errs per before after
    start "$s"
    port=${PORT[$s]}
    if [[ $k == tls ]]; then
        port=${TLS_PORT[$s]}
        flag=(--tls)
    fi
    out=$BENCH_TMP/$k-$s-$r.txt
    run_timed "$out" $((IDLE_CONNECTIONS / 20 + 300)) python3 "$BENCH_DIR/idle_clients.py" \
        --port "$port" --pid "${PID[$s]}" --count "$IDLE_CONNECTIONS" --window "$IDLE_WINDOW" \
        --path /1k.bin --body-bytes 1024 "${flag[@]}"
    kill -0 "${PID[$s]}" 2>/dev/null || die "$s died during the run (log in $BENCH_TMP/$s/)"
    answer_check "http://127.0.0.1:${PORT[$s]}/1k.bin" "$docroot/1k.bin"
    stop "$s"
    if ((TIMED_RC != 0)); then
        tail -n 20 "$out" >&2
        die "idle_clients.py exited with $TIMED_RC"
    fi
    line=$(grep '^conns=' "$out" | tail -n1)
    [[ -n $line ]] || die "no result from idle_clients.py ($out)"
    errs=${line#*errors=}
    per=$(sed -n 's/.*per_conn_bytes=\([0-9.-]*\).*/\1/p' <<<"$line")
    before=$(sed -n 's/.*before_kb=\([0-9]*\).*/\1/p' <<<"$line")
    after=$(sed -n 's/.*after_kb=\([0-9]*\).*/\1/p' <<<"$line")
    [[ $errs == none ]] || round_bad "$errs"
    printf '[bench] idle/%-5s %-6s round %d/%d: RSS %s -> %s KiB, %s bytes per connection  %s\n' \
        "$k" "$s" "$r" "$ROUNDS" "$before" "$after" "$per" "${ROUND_BAD:-answers right}" >&2
    [[ -n $ROUND_BAD ]] && return 0
    add_figures "$k,$s" BYTES="$per"
}

# answer_check and run_timed need a server up: one check that both serve before the rounds.
for s in "${SRV[@]}"; do
    start "$s"
    check_get "$s" "http://127.0.0.1:${PORT[$s]}/1k.bin" 1024
    code=$(curl -s -o /dev/null --max-time 10 -w '%{http_code} %{size_download}' --cacert "$tls_cert" \
        "https://localhost:${TLS_PORT[$s]}/1k.bin" --resolve "localhost:${TLS_PORT[$s]}:127.0.0.1") ||
        die "$s: curl over TLS failed"
    [[ $code == "200 1024" ]] || die "$s: GET /1k.bin over TLS gave '$code', expected '200 1024'"
    stop "$s"
done

total=$((${#CASES[@]} * ROUNDS * ${#SRV[@]} * 10))
log "measuring: ${#CASES[@]} cases (${CASES[*]}) x $ROUNDS rounds x ${#SRV[@]} servers (~${total}s)"
for k in "${CASES[@]}"; do each_round SRV measure "$k"; done

md=$(results_md idle)
{
    echo "# idle: memory per idle keep-alive connection, Umbra vs nginx"
    echo
    bench_env_md "(not used: bench/idle_clients.py opens the connections)"
    echo "- $(openssl version); certificate: self-signed ECDSA P-256 (the same file for both)"
    echo "- nginx: master + 2 workers, keepalive_timeout 300s, worker_connections $NGINX_WORKER_CONNECTIONS, other settings default; Umbra: 2 workers, timeouts.idle 300, limits.max_connections raised, other settings default"
    echo "- each round starts the server afresh, warms it up with $IDLE_WINDOW connections (one request each, closed), reads its RSS (VmRSS of every process of the server), opens the connections ($IDLE_WINDOW in progress at a time), waits 1 s, reads the RSS again, then sends a second request on every connection (each must be answered: the server kept it)"
    for k in "${CASES[@]}"; do echo "- idle/$k: ${WHAT[$k]}"; done
    echo
    md_row scenario server "median bytes per connection" "KiB" "Umbra/nginx" "per round" repeated
    md_row --- --- ---: ---: ---: --- ---
} >"$md"

fmt='%-11s %-6s %14s %9s %12s\n'
# shellcheck disable=SC2059
printf "\n$fmt" scenario server "bytes/conn" KiB Umbra/nginx
printf '%s\n' "-------------------------------------------------------"
declare -A VERDICT=()
for k in "${CASES[@]}"; do
    declare -A MED=()
    median_map MED BYTES "$k," "${SRV[@]}"
    for s in "${SRV[@]}"; do
        rr=$(umbra_ratio "$s" MED nginx)
        kib=$(awk -v b="${MED[$s]}" 'BEGIN { if (b == "-") print "-"; else printf "%.2f\n", b / 1024 }')
        # shellcheck disable=SC2059
        printf "$fmt" "idle/$k" "$s" "${MED[$s]}" "$kib" "$rr"
        md_row "idle/$k" "$s" "${MED[$s]}" "$kib" "$rr" "${BYTES[$k,$s]% }" "$(repeated_md "$k,$s")" >>"$md"
    done
    if bench_uses umbra; then
        v="$kib KiB per connection"
        if bench_uses nginx; then
            v+=", x nginx $rr ($(atmost "$rr" 1.0 meets above) <= 1.0)"
        fi
        if [[ $k == plain ]]; then v+=", $(atmost "$kib" 1.0 meets above) <= 1 KiB"; fi
        VERDICT[$k]=$v
    fi
done
{
    echo
    echo "RSS counts the servers' own memory (heap, stacks, touched pages), not the kernel's"
    echo "socket buffers; figures are not affected by CPU load. nginx allocates its connection"
    echo "and event arrays at start (worker_connections entries) and touches an entry when a"
    echo "connection uses it; Umbra allocates a connection when it is accepted."
    if ((${#VERDICT[@]})); then
        echo
        echo "Targets (Umbra): idle/plain <= 1 KiB per connection and <= nginx's; idle/tls <= nginx's."
        echo
        each_verdict echo "- idle" "${CASES[@]}"
    fi
    repeats_md
    configs_md
} >>"$md"
echo
each_verdict log "target idle" "${CASES[@]}"
warn_repeats
log "results written to $md"
