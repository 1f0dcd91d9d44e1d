#!/usr/bin/env bash
# Scenario "ws": WebSocket tunnels through Umbra and through nginx, in front of the same
# echo backend (bench/ws_load.c's echo: C, epoll, raw byte echo after the 101).
#   ws/throughput: one tunnel, WS_SIZE-byte binary frames (64 KiB), WS_DEPTH of them in
#                  flight, for WS_SECONDS; MB/s of payload echoed (bench/ws_load.c client,
#                  which checks every byte that comes back). Target: Umbra/nginx >= 1.0.
#   ws/idle:       WS_IDLE_TUNNELS (5,000) tunnels opened, one frame echoed on each, left
#                  idle; the growth of the proxy's RSS per tunnel (bench/ws_idle.py). Each
#                  round starts the proxy afresh. Target: Umbra <= nginx.
# The backend alone (no proxy) is measured first: it must be well above both proxies, or
# the figures measure it. See bench/README.md.
set -euo pipefail
# shellcheck source=bench/lib.sh
. "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

: "${WS_SECONDS:=$DURATION}"
: "${WS_SIZE:=65536}"
: "${WS_DEPTH:=4}"
: "${WS_IDLE_TUNNELS:=5000}"
: "${WS_IDLE_WINDOW:=64}"
for k in WS_SECONDS WS_SIZE WS_DEPTH WS_IDLE_TUNNELS WS_IDLE_WINDOW; do
    [[ ${!k} =~ ^[1-9][0-9]*$ ]] || die "$k must be a positive integer (got '${!k}')"
done

need python3 cc nginx timeout
bench_init
if bench_uses umbra; then ensure_umbra; fi
# Each tunnel is two connections at the proxy, one at the client and one at the backend.
raise_nofile $((2 * WS_IDLE_TUNNELS + 2 * WS_IDLE_WINDOW + 512))
NGINX_WORKER_CONNECTIONS=$((2 * WS_IDLE_TUNNELS + 2 * WS_IDLE_WINDOW + 512))

WS_LOAD=$BENCH_TMP/ws_load
cc -O2 -Wall -o "$WS_LOAD" "$BENCH_DIR/ws_load.c" -lcrypto >"$BENCH_TMP/cc.log" 2>&1 ||
    die "cannot build bench/ws_load.c: $(cat "$BENCH_TMP/cc.log")"

ECHO_PORT=$(free_port)
bench_start echo "$BENCH_TMP/echo.log" "$WS_LOAD" echo "$ECHO_PORT"
ECHO_PID=$BENCH_LAST_PID
wait_port echo "$ECHO_PID" "$ECHO_PORT" "$BENCH_TMP/echo.log"

declare -A PORT PID
# start NAME: starts proxy NAME afresh in front of the echo backend; sets PORT and PID.
start() {
    case $1 in
    nginx)
        start_nginx_with "worker_rlimit_nofile $NOFILE;" "    map \$http_upgrade \$connection_upgrade {
        default upgrade;
        '' close;
    }
    upstream ws_echo {
        server 127.0.0.1:$ECHO_PORT;
    }" "location / {
            proxy_pass http://ws_echo;
            proxy_http_version 1.1;
            proxy_set_header Upgrade \$http_upgrade;
            proxy_set_header Connection \$connection_upgrade;
            proxy_read_timeout 3600s;
            proxy_send_timeout 3600s;
        }"
        PORT[nginx]=$NGINX_PORT PID[nginx]=$NGINX_PID
        ;;
    umbra)
        start_umbra_with "upstreams = { echo = { servers = { \"http://127.0.0.1:$ECHO_PORT\" } } }
routes = { { path = \"/\", upstream = \"echo\" } }
limits = { max_connections = $((2 * WS_IDLE_TUNNELS + 2 * WS_IDLE_WINDOW + 512)) }
timeouts = { tunnel = 3600 }"
        PORT[umbra]=$UMBRA_PORT PID[umbra]=$UMBRA_PID
        ;;
    esac
}

# stop NAME: stops the proxy started by start (its PID only).
stop() {
    local pid=${PID[$1]} keep=() p
    stop_pid "$pid"
    for p in "${BENCH_PIDS[@]}"; do [[ $p == "$pid" ]] || keep+=("$p"); done
    BENCH_PIDS=("${keep[@]}")
}

read -r -a SRV <<<"$SERVERS"

# The backend alone: the ceiling of the throughput figures.
out=$BENCH_TMP/direct.txt
run_timed "$out" $((WS_SECONDS + 30)) "$WS_LOAD" client "$ECHO_PORT" "$WS_SECONDS" "$WS_SIZE" "$WS_DEPTH"
((TIMED_RC == 0)) || die "the echo backend alone failed: $(cat "$out")"
DIRECT=$(sed -n 's/.*mbps=\([0-9.]*\).*/\1/p' "$out")
log "echo backend alone (no proxy): $DIRECT MB/s"

# shellcheck disable=SC2034 # read by name (median_map)
declare -A MBPS BYTES
# throughput SERVER ROUND
throughput() {
    local s=$1 r=$2 out line mbps errs
    out=$BENCH_TMP/throughput-$s-$r.txt
    run_timed "$out" $((WS_SECONDS + 30)) "$WS_LOAD" client "${PORT[$s]}" "$WS_SECONDS" \
        "$WS_SIZE" "$WS_DEPTH"
    line=$(grep '^bytes=' "$out" | tail -n1 || true)
    [[ -n $line ]] || die "no result from ws_load client ($out): $(tail -n 5 "$out")"
    mbps=$(sed -n 's/.*mbps=\([0-9.]*\).*/\1/p' <<<"$line")
    errs=${line#*errors=}
    [[ $errs == none ]] || round_bad "$errs"
    printf '[bench] ws/throughput %-6s round %d/%d: %s MB/s  %s\n' "$s" "$r" "$ROUNDS" "$mbps" \
        "${ROUND_BAD:-answers right}" >&2
    [[ -n $ROUND_BAD ]] && return 0
    add_figures "throughput,$s" MBPS="$mbps"
}

# idle SERVER ROUND
idle() {
    local s=$1 r=$2 out line per before after errs
    start "$s"
    out=$BENCH_TMP/idle-$s-$r.txt
    run_timed "$out" $((WS_IDLE_TUNNELS / 20 + 300)) python3 "$BENCH_DIR/ws_idle.py" \
        --port "${PORT[$s]}" --pid "${PID[$s]}" --count "$WS_IDLE_TUNNELS" --window "$WS_IDLE_WINDOW"
    kill -0 "${PID[$s]}" 2>/dev/null || die "$s died during the run (log in $BENCH_TMP/$s/)"
    stop "$s"
    line=$(grep '^tunnels=' "$out" | tail -n1 || true)
    [[ -n $line ]] || die "no result from ws_idle.py ($out): $(tail -n 5 "$out")"
    errs=${line#*errors=}
    per=$(sed -n 's/.*per_tunnel_bytes=\([0-9.-]*\).*/\1/p' <<<"$line")
    before=$(sed -n 's/.*before_kb=\([0-9]*\).*/\1/p' <<<"$line")
    after=$(sed -n 's/.*after_kb=\([0-9]*\).*/\1/p' <<<"$line")
    [[ $errs == none ]] || round_bad "$errs"
    printf '[bench] ws/idle %-6s round %d/%d: RSS %s -> %s KiB, %s bytes per tunnel  %s\n' \
        "$s" "$r" "$ROUNDS" "$before" "$after" "$per" "${ROUND_BAD:-answers right}" >&2
    [[ -n $ROUND_BAD ]] && return 0
    add_figures "idle,$s" BYTES="$per"
}

total=$((ROUNDS * ${#SRV[@]} * (WS_SECONDS + WS_IDLE_TUNNELS / 500 + 6)))
log "measuring: throughput and idle x $ROUNDS rounds x ${#SRV[@]} servers (~${total}s)"
for s in "${SRV[@]}"; do start "$s"; done
each_round SRV throughput
for s in "${SRV[@]}"; do stop "$s"; done
each_round SRV idle

md=$(results_md ws)
{
    echo "# ws: WebSocket tunnels, Umbra vs nginx"
    echo
    bench_env_md "(not used: bench/ws_load.c and bench/ws_idle.py are the clients)"
    echo "- backend: bench/ws_load.c echo (C, one thread, epoll; 101 then a raw byte echo), $DIRECT MB/s with no proxy in front (the ceiling)"
    echo "- nginx: master + 2 workers, proxy_http_version 1.1 with the Upgrade and Connection headers passed (map \$http_upgrade), proxy_read_timeout 3600s, other settings default (its tunnel buffer is proxy_buffer_size, one page); Umbra: 2 workers, timeouts.tunnel 3600, other settings default (64 KiB per direction, given back when empty)"
    echo "- ws/throughput: one tunnel, ${WS_SIZE}-byte binary frames (masked), $WS_DEPTH in flight, ${WS_SECONDS}s per round; MB/s of payload echoed (10^6 bytes), every byte checked"
    echo "- ws/idle: $WS_IDLE_TUNNELS tunnels (one frame echoed on each, then idle; $WS_IDLE_WINDOW being opened at a time), the growth of the proxy's RSS (all its processes) per tunnel; each round starts the proxy afresh and warms it up with $WS_IDLE_WINDOW tunnels; every tunnel must echo again after the measurement"
    echo
    md_row scenario server median unit "Umbra/nginx" "per round" repeated
    md_row --- --- ---: --- ---: --- ---
} >"$md"

fmt='%-15s %-6s %12s %-12s %12s\n'
# shellcheck disable=SC2059
printf "\n$fmt" scenario server median unit Umbra/nginx
printf '%s\n' "-------------------------------------------------------------"
declare -A VERDICT=()
for k in throughput idle; do
    declare -A MED=()
    if [[ $k == throughput ]]; then
        median_map MED MBPS "$k," "${SRV[@]}"
        unit="MB/s"
    else
        median_map MED BYTES "$k," "${SRV[@]}"
        unit="bytes/tunnel"
    fi
    for s in "${SRV[@]}"; do
        rr=$(umbra_ratio "$s" MED nginx)
        if [[ $k == throughput ]]; then figs=${MBPS[$k,$s]:-}; else figs=${BYTES[$k,$s]:-}; fi
        # shellcheck disable=SC2059
        printf "$fmt" "ws/$k" "$s" "${MED[$s]}" "$unit" "$rr"
        md_row "ws/$k" "$s" "${MED[$s]}" "$unit" "$rr" "${figs% }" "$(repeated_md "$k,$s")" >>"$md"
    done
    if bench_uses umbra && bench_uses nginx; then
        if [[ $k == throughput ]]; then
            VERDICT[$k]="${MED[umbra]} MB/s, x nginx $rr ($(atleast "$rr" 1.0) >= 1.0)"
        else
            VERDICT[$k]="${MED[umbra]} bytes per tunnel, x nginx $rr ($(atmost "$rr" 1.0 meets above) <= 1.0)"
        fi
    fi
done
{
    echo
    echo "RSS counts the proxies' own memory (heap, stacks, touched pages), not the kernel's socket"
    echo "buffers. Each tunnel holds two connections at the proxy (client and backend)."
    if ((${#VERDICT[@]})); then
        echo
        echo "Targets (Umbra): ws/throughput >= nginx's MB/s; ws/idle <= nginx's bytes per tunnel."
        echo
        each_verdict echo "- ws" throughput idle
    fi
    repeats_md
    configs_md
} >>"$md"
echo
each_verdict log "target ws" throughput idle
warn_repeats
log "results written to $md"
