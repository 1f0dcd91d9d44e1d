#!/usr/bin/env bash
# Scenario "hit": what a cache hit costs beside a direct answer (issue 14). The same 1 KiB
# body three ways, measured in one run with the same wrk, in alternating rounds:
#   nginx          nginx's `return 200` of the body (the anchor);
#   umbra-respond  Umbra answering it from an on_request hook with umbra.respond;
#   umbra-hit      Umbra answering it from its cache (a hit of an upstream route; the
#                  origin is asked once, before the rounds).
# Targets: the hit >= 1.0 x nginx's return 200, and >= 0.95 x Umbra's umbra.respond.
# See bench/README.md.
set -euo pipefail
# shellcheck source=bench/lib.sh
. "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

SMALL=1024
CC_LONG="cc=max-age%3D3600"
URL_HIT="/hit/1k?size=$SMALL&$CC_LONG"
URL_RESPOND=/respond/1k
URL_RETURN=/return/1k
TARGET_X_NGINX=1.0
TARGET_X_RESPOND=0.95

need wrk curl python3 awk timeout pgrep getconf cmp
bench_init
read -r -a SRV <<<"$SERVERS"
if bench_uses umbra; then
    ensure_umbra
fi
# The body comes from the test origin (the hit's origin), so that the three answers carry
# the same bytes; without Umbra it is still needed for nginx's.
ensure_origin
start_origin
origin_ref "$SMALL" "$BENCH_TMP/ref.body"
BODY=$(cat "$BENCH_TMP/ref.body")
# It is written into nginx's and Lua's string literals as it is: it must need no escaping.
[[ $BODY =~ ^[0-9a-f]+$ ]] || die "the origin's $SMALL-byte body is not plain hex digits"

# The measured "servers": nginx, and Umbra's two ways (one Umbra process, two routes).
MSRV=()
declare -A PORT PID WPATH
PID[origin]=$ORIGIN_PID
if bench_uses nginx; then
    start_nginx_with "" "" "
        location = $URL_RETURN {
            default_type text/plain;
            return 200 \"$BODY\";
        }
        location / {
            return 404;
        }"
    PORT[nginx]=$NGINX_PORT
    PID[nginx]=$NGINX_PID
    WPATH[nginx]=$URL_RETURN
    MSRV+=(nginx)
fi
if bench_uses umbra; then
    # /respond/ answers from its route's hook; /hit/ is an upstream route over the origin,
    # cached (the default), with no hook, so that a hit there does what a hit does in a
    # config without hooks.
    start_umbra_with "upstreams = { app = { servers = { \"http://127.0.0.1:$ORIGIN_PORT\" } } }
routes = {
  { path = \"/respond/\", on_request = function(req)
      return umbra.respond(200, \"$BODY\", { [\"Content-Type\"] = \"text/plain\" })
    end },
  { path = \"/hit/\", upstream = \"app\" },
}
cache = { memory = \"256MB\", max_object = \"64MB\" }"
    for s in umbra-respond umbra-hit; do
        PORT[$s]=$UMBRA_PORT
        PID[$s]=$UMBRA_PID
        MSRV+=("$s")
    done
    WPATH[umbra-respond]=$URL_RESPOND
    WPATH[umbra-hit]=$URL_HIT
fi

# fetch SERVER BODY HEAD: one GET of the server's path; the body and head to files; prints
# "CODE SIZE".
fetch() {
    curl -s --max-time 10 -o "$2" -D "$3" -w '%{http_code} %{size_download}' \
        "http://127.0.0.1:${PORT[$1]}${WPATH[$1]}" || die "$1: curl ${WPATH[$1]} failed (exit $?)"
}

# check SERVER: GET answers 200 with the body; for umbra-hit, the first GET (a miss, which
# warms the cache) and the second (a hit) cost the origin one request.
check() {
    local s=$1 c0 c1 code size i n=1
    [[ $s == umbra-hit ]] && n=2
    c0=$(origin_count)
    for ((i = 1; i <= n; i++)); do
        read -r code size <<<"$(fetch "$s" "$BENCH_TMP/check.body" "$BENCH_TMP/check.head")"
        [[ $code == 200 ]] || die "$s: GET ${WPATH[$s]} (#$i) answered $code, expected 200"
        cmp -s "$BENCH_TMP/check.body" "$BENCH_TMP/ref.body" ||
            die "$s: GET ${WPATH[$s]} (#$i): $size bytes that differ from the origin's $SMALL"
    done
    c1=$(origin_count)
    if [[ $s == umbra-hit ]]; then
        grep -qiE '^Cache-Status:.*;[[:space:]]*hit([;,[:space:]]|$)' "$BENCH_TMP/check.head" || {
            cat "$BENCH_TMP/check.head" >&2
            die "$s: the second GET ${WPATH[$s]} was not a cache hit (head above)"
        }
        (((c1 - c0) == 1)) || die "$s: two GET ${WPATH[$s]} cost the origin $((c1 - c0)) requests, expected 1"
    else
        (((c1 - c0) == 0)) || die "$s: GET ${WPATH[$s]} reached the origin"
    fi
    log "$s: GET ${WPATH[$s]} -> 200, $size bytes ($(grep -iE '^(Content-Type|Cache-Status|Age):' "$BENCH_TMP/check.head" | tr -d '\r' | paste -sd' ' -))"
}

for s in "${MSRV[@]}"; do check "$s"; done

# What each answer weighs (head and body): what wrk should read per response.
declare -A EXPECT
for s in "${MSRV[@]}"; do
    EXPECT[$s]=$(answer_bytes "$s" "http://127.0.0.1:${PORT[$s]}${WPATH[$s]}")
done

# shellcheck disable=SC2034 # some are read by name (medians)
declare -A RPS P50 P99 CPU_S US CPU_W CPU_O OREQ

# measure hit1k SERVER ROUND
measure() {
    local k=$1 s=$2 r=$3 out o0 o1 cs cw co us
    alive "$s" origin
    out=$BENCH_TMP/wrk-$k-$s-$r.txt
    o0=$(origin_count)
    round_cpu_start "${PID[$s]}"
    run_wrk "http://127.0.0.1:${PORT[$s]}${WPATH[$s]}" "$out"
    round_cpu_end "$WRK_CPU" "${PID[$s]}"
    o1=$(origin_count)
    read_wrk "$out"
    wrk_check "${EXPECT[$s]}" "$WRK_CONNECTIONS"
    # A hit round in which requests reached the origin did not measure hits; nothing else
    # of this scenario asks the origin.
    if ((o1 > o0)); then
        round_bad "the origin got $((o1 - o0)) requests during the round (expected 0)"
    fi
    answer_check "http://127.0.0.1:${PORT[$s]}${WPATH[$s]}" "$BENCH_TMP/ref.body"
    cs=${ROUND_PCT[0]} cw=$ROUND_CLIENT_PCT co=$ROUND_OTHER_PCT
    # The server's CPU time per request, in microseconds.
    us=$(us_each "${ROUND_TICKS[0]}" "$WRK_REQS" 2)
    printf '[bench] %-6s %-13s round %d/%d: %10.2f req/s  p50 %s ms p99 %s ms  CPU %% server %s (%s us/req) wrk %s other %s  %s requests, %s\n' \
        "$k" "$s" "$r" "$ROUNDS" "$WRK_RPS" "$WRK_P50" "$WRK_P99" "$cs" "$us" "$cw" "$co" "$WRK_REQS" \
        "${ROUND_BAD:-answers right}" >&2
    [[ -n $ROUND_BAD ]] && return 0
    add_figures "$k,$s" RPS="$WRK_RPS" P50="$WRK_P50" P99="$WRK_P99" CPU_S="$cs" US="$us" CPU_W="$cw" \
        CPU_O="$co" OREQ="$((o1 - o0))"
    note_busy "$co" "$k" "$s" "$r"
}

check_idle
log "measuring: hit1k x $ROUNDS rounds x ${#MSRV[@]} (${MSRV[*]}) x ${DURATION}s" \
    "(~$((ROUNDS * ${#MSRV[@]} * (DURATION + 2)))s)"
each_round MSRV measure hit1k

md=$(results_md hit)
{
    echo "# hit: a 1 KiB cache hit beside a direct answer of the same body"
    echo
    bench_env_md "-t$WRK_THREADS -c$WRK_CONNECTIONS -d${DURATION}s --latency"
    echo "- origin: $ORIGIN_BIN -t ${ORIGIN_THREADS:-1} (test origin; asked once, before the rounds)"
    echo "- body: the origin's $SMALL bytes (/ref?size=$SMALL), the same in the three answers"
    echo "- nginx: GET $URL_RETURN; location = $URL_RETURN { default_type text/plain; return 200 \"BODY\"; }"
    echo "- umbra-respond: GET $URL_RESPOND; on_request returning umbra.respond(200, BODY, { [\"Content-Type\"] = \"text/plain\" }) on the route /respond/"
    echo "- umbra-hit: GET $URL_HIT; route /hit/, upstream app (the origin), cache = { memory = \"256MB\" }, no hook; every request a hit"
    echo "- umbra-respond and umbra-hit are one Umbra (2 workers), measured in turn"
    echo
    md_compare_head
} >"$md"

declare -A VERDICT=()
declare -A MR=() MU=()
median_map MR RPS "hit1k," "${MSRV[@]}"
median_map MU US "hit1k," "${MSRV[@]}"
fmt='%-10s %-13s %12s %-14s %6s %-8s %-8s %7s %7s %6s %8s %5s %6s\n'
# shellcheck disable=SC2059
printf "\n$fmt" case server "median req/s" compared ratio target met "p50 ms" "p99 ms" "CPU%" "us/req" wrk other
printf '%s\n' "-------------------------------------------------------------------------------------------------------------------"
verdict=
for s in "${MSRV[@]}"; do
    read -r p50 p99 c cw co orq <<<"$(medians "hit1k,$s" P50 P99 CPU_S CPU_W CPU_O OREQ)"
    fixed 0 c cw co orq
    rows=()
    if [[ $s == umbra-hit ]]; then
        if bench_uses nginx; then
            rr=$(ratio "${MR[umbra-hit]}" "${MR[nginx]}")
            met=$(atleast "$rr" "$TARGET_X_NGINX" met "not met")
            rows+=("x nginx|$rr|>= $TARGET_X_NGINX|$met")
            verdict+="${verdict:+; }x nginx's return 200 $rr ($met: >= $TARGET_X_NGINX)"
        fi
        rr=$(ratio "${MR[umbra-hit]}" "${MR[umbra-respond]}")
        met=$(atleast "$rr" "$TARGET_X_RESPOND" met "not met")
        rows+=("x umbra-respond|$rr|>= $TARGET_X_RESPOND|$met")
        verdict+="${verdict:+; }x umbra.respond $rr ($met: >= $TARGET_X_RESPOND); server CPU per request ${MU[umbra-hit]} us (umbra.respond ${MU[umbra-respond]} us${MU[nginx]:+, nginx ${MU[nginx]} us})"
    fi
    ((${#rows[@]})) || rows=("-|-|-|-")
    for row in "${rows[@]}"; do
        IFS='|' read -r cmpd rr tg met <<<"$row"
        # shellcheck disable=SC2059
        printf "$fmt" hit/hit1k "$s" "${MR[$s]}" "$cmpd" "$rr" "$tg" "$met" "$p50" "$p99" "$c" "${MU[$s]}" "$cw" "$co"
        md_row hit/hit1k "$s" "${MR[$s]}" "$cmpd" "$rr" "$tg" "$met" "$p50" "$p99" "$c" "${MU[$s]}" "$cw" "$co" "$orq" \
            "${RPS[hit1k,$s]% }" "$(repeated_md "hit1k,$s")" >>"$md"
    done
done
[[ -n $verdict ]] && VERDICT[hit1k]=$verdict
{
    echo
    echo "compared, ratio: umbra-hit's median req/s / the other's. CPU: % of one CPU during the"
    echo "wrk run (200% = both CPUs of a 2-CPU machine), medians of the rounds: the server (all"
    echo "its processes and threads; umbra-respond and umbra-hit are the same Umbra), wrk, and the"
    echo "rest of the machine's busy time (approximate; may come out a little below 0). server"
    echo "us/req: the server's CPU time per request, median of the rounds. origin reqs/round:"
    echo "requests the origin got during a round (0: every umbra-hit request was a hit). wrk and"
    echo "the server share the machine's CPUs: compare the ratios, not the absolute figures, and"
    echo "only within one run; ratios within about 5-7% of each other mean \"the same\"."
    busy_md
    if ((${#VERDICT[@]})); then
        echo
        echo "Targets (issue 14): a 1 KiB hit >= $TARGET_X_NGINX x nginx's return 200 of the same body,"
        echo "and >= $TARGET_X_RESPOND x Umbra's umbra.respond of it (req/s)."
        echo
        each_verdict echo "- hit" hit1k
    fi
    repeats_md
    configs_md
} >>"$md"
echo
each_verdict log "target hit" hit1k
warn_busy
warn_repeats
log "results written to $md"
