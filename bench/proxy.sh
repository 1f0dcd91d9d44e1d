#!/usr/bin/env bash
# Scenario "proxy": Umbra against nginx as reverse proxies in front of one backend (the
# test origin, tests/origin/origin.c): a slow backend (50 ms per response, many
# connections: does the proxy keep every request in flight?) and a fast one (the cost of
# one proxied request). See bench/README.md.
set -euo pipefail
# shellcheck source=bench/lib.sh
. "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

# Client connections of the slow-backend measurements (one each) and of the fast one.
: "${PROXY_SLOW_CONNECTIONS:=200 1000}"
: "${PROXY_FAST_CONNECTIONS:=100}"
# 1: also measure the backend directly, once per measurement (where it is the bottleneck).
: "${BACKEND_DIRECT:=1}"
SIZE=1024
DELAY_MS=50

need wrk curl python3 awk timeout pgrep getconf cmp
bench_init
for c in $PROXY_SLOW_CONNECTIONS $PROXY_FAST_CONNECTIONS; do
    [[ $c =~ ^[1-9][0-9]*$ ]] || die "PROXY_SLOW_CONNECTIONS/PROXY_FAST_CONNECTIONS: '$c' is not a positive integer"
done
if bench_uses umbra; then ensure_umbra; fi
ensure_origin

# The measurements: name -> connections, request path (or wrk script), bound.
CASES=()
# CHECKPATH: a request like the case's, for one curl GET (the bytes per response that wrk
# should read, and the answer after each round).
declare -A CONNS SCRIPT URLPATH CHECKPATH BOUND
script=$BENCH_TMP/unique.lua
cat >"$script" <<EOF
-- Every request has a path of its own (/r/THREAD-N), so that no cache could answer it.
local threads = 0
function setup(thread)
    threads = threads + 1
    thread:set("tid", threads)
end
n = 0
request = function()
    n = n + 1
    return wrk.format(nil, "/r/" .. tid .. "-" .. n .. "?size=$SIZE&delay=$DELAY_MS")
end
EOF
max_conns=0
for c in $PROXY_SLOW_CONNECTIONS; do
    k=slow-c$c
    CASES+=("$k")
    CONNS[$k]=$c
    SCRIPT[$k]=$script
    URLPATH[$k]="/"
    CHECKPATH[$k]="/r/check?size=$SIZE&delay=$DELAY_MS"
    # Each connection has at most one request in flight, and each takes DELAY_MS at least.
    BOUND[$k]=$((c * 1000 / DELAY_MS))
    if ((c > max_conns)); then max_conns=$c; fi
done
for c in $PROXY_FAST_CONNECTIONS; do
    k=fast-c$c
    CASES+=("$k")
    CONNS[$k]=$c
    SCRIPT[$k]=
    URLPATH[$k]="/r?size=$SIZE"
    CHECKPATH[$k]="/r?size=$SIZE"
    BOUND[$k]=-
    if ((c > max_conns)); then max_conns=$c; fi
done

# A proxy holds a client and a backend socket per connection; wrk one each.
raise_nofile $((2 * max_conns + 512))
log "ulimit -n: $NOFILE"

start_origin
declare -A PORT PID
if bench_uses nginx; then
    start_nginx_with "worker_rlimit_nofile $NOFILE;" "$(nginx_upstream app "$ORIGIN_PORT")" "
        location / {
            proxy_pass http://app;
            proxy_http_version 1.1;
            proxy_set_header Connection \"\";
            proxy_buffering on;
        }"
    PORT[nginx]=$NGINX_PORT
    PID[nginx]=$NGINX_PID
fi
if bench_uses umbra; then
    start_umbra_with "upstreams = { app = { servers = { \"http://127.0.0.1:$ORIGIN_PORT\" } } }
routes = { { path = \"/\", upstream = \"app\", cache = false } }"
    PORT[umbra]=$UMBRA_PORT
    PID[umbra]=$UMBRA_PID
fi
PORT[backend]=$ORIGIN_PORT
PID[backend]=$ORIGIN_PID
read -r -a SRV <<<"$SERVERS"
MEASURED=("${SRV[@]}")
if [[ $BACKEND_DIRECT == 1 ]]; then MEASURED+=(backend); fi

# Each server answers 200 with SIZE bytes, the same bytes as the backend gives.
curl -s -o "$BENCH_TMP/ref.body" --max-time 10 "http://127.0.0.1:$ORIGIN_PORT/r/check?size=$SIZE" ||
    die "backend: curl failed"
for s in "${MEASURED[@]}"; do
    for q in "size=$SIZE" "size=$SIZE&delay=$DELAY_MS"; do
        url="http://127.0.0.1:${PORT[$s]}/r/check?$q"
        check_get "$s" "$url" "$SIZE"
        curl -s -o "$BENCH_TMP/check.body" --max-time 10 "$url" || die "$s: curl $url failed"
        cmp -s "$BENCH_TMP/check.body" "$BENCH_TMP/ref.body" ||
            die "$s: GET $url: the body differs from the backend's"
    done
done
# What each server's answer of each case weighs (head and body): what wrk should read per
# response.
declare -A EXPECT
for s in "${MEASURED[@]}"; do
    for k in "${CASES[@]}"; do
        EXPECT[$k,$s]=$(answer_bytes "$s" "http://127.0.0.1:${PORT[$s]}${CHECKPATH[$k]}")
    done
done

# backend_accepted: connections the backend has accepted so far (/__stats counts the
# connection that asks, not the request).
backend_accepted() {
    curl -s --max-time 5 "http://127.0.0.1:$ORIGIN_PORT/__stats" | awk '$1 == "accepted" { print $2 }'
}

# shellcheck disable=SC2034 # some are read by name (medians)
declare -A RPS P50 P99 CPU_S CPU_B CPU_W CPU_O NEWC
# measure CASE SERVER ROUND (SERVER backend: the backend directly)
measure() {
    local k=$1 s=$2 r=$3 out acc0 acc1 spid='' p cs cb cw co newc
    # Still up? A server that crashed mid-run must not be reported as slow.
    for p in "$s" backend; do
        kill -0 "${PID[$p]}" 2>/dev/null || die "$p died during the run (log in $BENCH_TMP/)"
    done
    out=$BENCH_TMP/wrk-$k-$s-$r.txt
    if [[ $s != backend ]]; then spid=${PID[$s]}; fi
    acc0=$(backend_accepted)
    round_cpu_start "$ORIGIN_PID" "$spid"
    run_wrk "http://127.0.0.1:${PORT[$s]}${URLPATH[$k]}" "$out" "${CONNS[$k]}" "${SCRIPT[$k]}"
    round_cpu_end "$WRK_CPU" "$ORIGIN_PID" "$spid"
    acc1=$(backend_accepted)
    read_wrk "$out"
    wrk_check "${EXPECT[$k,$s]}" "${CONNS[$k]}"
    answer_check "http://127.0.0.1:${PORT[$s]}${CHECKPATH[$k]}" "$BENCH_TMP/ref.body"
    cb=${ROUND_PCT[0]} cs=${ROUND_PCT[1]} cw=$ROUND_CLIENT_PCT co=$ROUND_OTHER_PCT
    # Less the connection of the second /__stats request.
    newc=-
    if [[ -n $acc0 && -n $acc1 ]]; then newc=$((acc1 - acc0 - 1)); fi
    printf '[bench] %-11s %-7s round %s: %9.2f req/s  p50 %s ms p99 %s ms  CPU %% proxy %s backend %s wrk %s other %s  backend conns %s  %s requests, %s\n' \
        "$k" "$s" "$([[ $s == backend ]] && echo direct || echo "$r/$ROUNDS")" "$WRK_RPS" "$WRK_P50" "$WRK_P99" \
        "$cs" "$cb" "$cw" "$co" "$newc" "$WRK_REQS" "${ROUND_BAD:-answers right}" >&2
    [[ -n $ROUND_BAD ]] && return 0
    add_figures "$k,$s" RPS="$WRK_RPS" P50="$WRK_P50" P99="$WRK_P99" CPU_S="$cs" CPU_B="$cb" \
        CPU_W="$cw" CPU_O="$co" NEWC="$newc"
}

check_idle
nrounds=$((${#CASES[@]} * ROUNDS * ${#SRV[@]}))
if [[ $BACKEND_DIRECT == 1 ]]; then nrounds=$((nrounds + ${#CASES[@]})); fi
log "measuring: ${#CASES[@]} cases (${CASES[*]}) x $ROUNDS rounds x ${#SRV[@]} servers" \
    "$([[ $BACKEND_DIRECT == 1 ]] && echo "+ the backend directly once per case") x ${DURATION}s (~$((nrounds * (DURATION + 2)))s)"
for k in "${CASES[@]}"; do
    each_round SRV measure "$k"
    if [[ $BACKEND_DIRECT == 1 ]]; then
        bench_round measure "$k" backend $((ROUNDS + 1))
        sleep 1
    fi
done

md=$(results_md proxy)
wrkdesc="-t$WRK_THREADS -d${DURATION}s --latency; -c per measurement (below)"
{
    echo "# proxy: Umbra vs nginx in front of one backend"
    echo
    bench_env_md "$wrkdesc"
    echo "- backend: $ORIGIN_BIN -t ${ORIGIN_THREADS:-1} (test origin); the rows \"backend\" measure it directly, once"
    echo "- slow-cN: N connections, each GET /r/THREAD-COUNT?size=$SIZE&delay=$DELAY_MS (a new path every request); bound = N / ${DELAY_MS} ms"
    echo "- fast-cN: N connections, GET /r?size=$SIZE"
    echo "- nginx: upstream keepalive $NGINX_UPSTREAM_KEEPALIVE, keepalive_requests $NGINX_UPSTREAM_KEEPALIVE_REQUESTS, keepalive_timeout $NGINX_UPSTREAM_KEEPALIVE_TIMEOUT, proxy_http_version 1.1, Connection \"\", proxy_buffering on, worker_rlimit_nofile $NOFILE; ulimit -n $NOFILE"
    echo
    md_row scenario server "median req/s" Umbra/nginx "of bound" "p50 ms" "p99 ms" "CPU proxy %" "CPU backend %" \
        "CPU wrk %" "CPU other %" "backend conns/round" "req/s per round" repeated
    md_row --- --- ---: ---: ---: ---: ---: ---: ---: ---: ---: ---: --- ---
} >"$md"

fmt='%-17s %-7s %12s %11s %8s %8s %8s %6s %8s %5s %6s %9s\n'
# shellcheck disable=SC2059
printf "\n$fmt" scenario server "median req/s" Umbra/nginx "of bound" "p50 ms" "p99 ms" "CPU%:" backend wrk other "be conns"
# shellcheck disable=SC2059
printf "$fmt" "" "" "" "" "" "" "" proxy "" "" "" "/round"
printf '%s\n' "--------------------------------------------------------------------------------------------------------------"
declare -A VERDICT=()
for k in "${CASES[@]}"; do
    declare -A MED=()
    median_map MED RPS "$k," "${MEASURED[@]}"
    for s in "${MEASURED[@]}"; do
        rr=$(umbra_ratio "$s" MED nginx)
        fb=-
        if [[ ${BOUND[$k]} != - ]]; then fb=$(ratio "${MED[$s]}" "${BOUND[$k]}"); fi
        read -r p50 p99 cs cb cw co nc <<<"$(medians "$k,$s" P50 P99 CPU_S CPU_B CPU_W CPU_O NEWC)"
        # CPU and connection medians as integers.
        fixed 0 cs cb cw co nc
        # shellcheck disable=SC2059
        printf "$fmt" "proxy/$k" "$s" "${MED[$s]}" "$rr" "$fb" "$p50" "$p99" "$cs" "$cb" "$cw" "$co" "$nc"
        md_row "proxy/$k" "$s" "${MED[$s]}" "$rr" "$fb" "$p50" "$p99" "$cs" "$cb" "$cw" "$co" "$nc" "${RPS[$k,$s]% }" \
            "$(repeated_md "$k,$s")" >>"$md"
        if [[ $s == umbra ]]; then
            v=
            if [[ $fb != - ]]; then
                v="of bound $fb ($(atleast "$fb" 0.95) >= 0.95)"
            fi
            if [[ $rr != - ]]; then
                v="${v:+$v, }x nginx $rr ($(atleast "$rr" 1.0) >= 1.0)"
            fi
            VERDICT[$k]=$v
        fi
    done
done
{
    echo
    echo "of bound: median req/s / (connections / ${DELAY_MS} ms), the most the clients can ask for."
    echo "CPU: % of one CPU during the wrk run (200% = both CPUs of a 2-CPU machine), medians"
    echo "of the rounds: the proxy (all its processes and threads), the backend, wrk, and the"
    echo "rest of the machine's busy time (other processes, interrupts; approximate: the kernel"
    echo "counts the processes' and the machine's time apart, so it may come out a little below"
    echo "0). backend conns/round: connections the backend accepted during a round (a proxy that"
    echo "reuses its backend connections opens about one per client connection or fewer; one"
    echo "per request means no reuse). wrk and the servers share the machine's CPUs: compare the"
    echo "ratios, not the absolute figures, and only within one run; ratios within about 5-7% of"
    echo "each other mean \"the same\"."
    if ((${#VERDICT[@]})); then
        echo
        echo "Targets (Umbra): slow backend >= 0.95 of the bound and >= nginx; fast backend >= 1.0 x nginx."
        echo
        each_verdict echo "- proxy" "${CASES[@]}"
    fi
    repeats_md
    configs_md
} >>"$md"
echo
each_verdict log "target proxy" "${CASES[@]}"
warn_repeats
log "results written to $md"
