#!/usr/bin/env bash
# Scenario "compress": what on-the-fly compression costs (issue 16), in one run with the
# same wrk, in alternating rounds:
#   gzip100k  a 100 KiB application/json answer of the test origin through an uncached
#             proxy with gzip at level 6, wrk sending Accept-Encoding: gzip:
#               nginx        proxy_pass to the origin, gzip on (gzip_comp_level 6,
#                            gzip_proxied any, gzip_types application/json);
#               umbra-gzip   an upstream route with cache = false, compress = {
#                            algorithms = { "gzip" }, level = { gzip = 6 } }.
#   hit       cache hits of the same size on Umbra:
#               umbra-chit   the gzip variant of the 100 KiB answer, stored compressed;
#               umbra-ihit   an identity (application/octet-stream) answer of exactly the
#                            compressed variant's size.
# Targets: umbra-gzip >= 1.0 x nginx; umbra-chit >= 0.95 x umbra-ihit (req/s).
# With perf installed, each Umbra round also counts the instructions Umbra ran per
# request (perf stat -e instructions), a figure the machine's noise barely moves.
# The origin's body is its json=1 document: a JSON array of made-up records that gzip
# shrinks about 5:1, as an API's answers (the plain pattern would shrink 300:1 and measure
# little but per-request overhead).
# See bench/README.md.
set -euo pipefail
# shellcheck source=bench/lib.sh
. "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

SIZE=102400
CT="ct=application%2Fjson"
CC_LONG="cc=max-age%3D3600"
URL_PROXY="/nc/json?size=$SIZE&json=1&$CT"
URL_CHIT="/c/json?size=$SIZE&json=1&$CT&$CC_LONG"
TARGET_X_NGINX=1.0
TARGET_X_IHIT=0.95

need wrk curl python3 awk timeout pgrep getconf cmp gzip
bench_init
ensure_origin
if bench_uses umbra; then
    ensure_umbra
fi
start_origin
curl -s --max-time 10 -o "$BENCH_TMP/ref.body" "http://127.0.0.1:$ORIGIN_PORT/ref?size=$SIZE&json=1" ||
    die "origin: curl failed"
[[ $(stat -c %s "$BENCH_TMP/ref.body") == "$SIZE" ]] || die "origin: the json=1 body is not $SIZE bytes"

# wrk's script: every request asks for gzip.
WRK_SCRIPT=$BENCH_TMP/gzip.lua
echo 'wrk.headers["Accept-Encoding"] = "gzip"' >"$WRK_SCRIPT"

MSRV_P=()
MSRV_H=()
declare -A PORT PID WPATH REF
PID[origin]=$ORIGIN_PID
if bench_uses nginx; then
    start_nginx_with "" "$(nginx_upstream origin "$ORIGIN_PORT")
    gzip on;
    gzip_comp_level 6;
    gzip_proxied any;
    gzip_min_length 1024;
    gzip_types application/json;
    gzip_vary on;" "
        location / {
            proxy_pass http://origin;
            proxy_http_version 1.1;
            proxy_set_header Connection \"\";
        }"
    PORT[nginx]=$NGINX_PORT
    PID[nginx]=$NGINX_PID
    WPATH[nginx]=$URL_PROXY
    MSRV_P+=(nginx)
fi
if bench_uses umbra; then
    start_umbra_with "upstreams = { app = { servers = { \"http://127.0.0.1:$ORIGIN_PORT\" } } }
routes = {
  { path = \"/nc/\", upstream = \"app\", cache = false,
    compress = { algorithms = { \"gzip\" }, level = { gzip = 6 } } },
  { path = \"/c/\", upstream = \"app\",
    compress = { algorithms = { \"gzip\" }, level = { gzip = 6 } } },
  { path = \"/i/\", upstream = \"app\" },
}
cache = { memory = \"256MB\", max_object = \"64MB\" }"
    for s in umbra-gzip umbra-chit umbra-ihit; do
        PORT[$s]=$UMBRA_PORT
        PID[$s]=$UMBRA_PID
    done
    WPATH[umbra-gzip]=$URL_PROXY
    WPATH[umbra-chit]=$URL_CHIT
    MSRV_P+=(umbra-gzip)
    MSRV_H+=(umbra-chit umbra-ihit)
fi

# gunzip_check SERVER: a GET with Accept-Encoding: gzip answers 200, gzip, and decodes to
# the origin's body.
gunzip_check() {
    local s=$1 code
    code=$(curl -s --max-time 10 -H 'Accept-Encoding: gzip' -o "$BENCH_TMP/check.gz" -D "$BENCH_TMP/check.head" \
        -w '%{http_code}' "http://127.0.0.1:${PORT[$s]}${WPATH[$s]}") || die "$s: curl failed"
    [[ $code == 200 ]] || die "$s: GET ${WPATH[$s]} answered $code"
    grep -qi '^Content-Encoding: gzip' "$BENCH_TMP/check.head" || {
        cat "$BENCH_TMP/check.head" >&2
        die "$s: GET ${WPATH[$s]} with Accept-Encoding: gzip was not gzip (head above)"
    }
    gzip -dc <"$BENCH_TMP/check.gz" | cmp -s - "$BENCH_TMP/ref.body" ||
        die "$s: the gzip body of ${WPATH[$s]} does not decode to the origin's $SIZE bytes"
    log "$s: GET ${WPATH[$s]} -> 200 gzip, $(stat -c %s "$BENCH_TMP/check.gz") bytes"
}

for s in "${MSRV_P[@]}"; do gunzip_check "$s"; done
if bench_uses umbra; then
    gunzip_check umbra-chit # the fill
    gunzip_check umbra-chit # a hit
    grep -qiE '^Cache-Status:.*;[[:space:]]*hit' "$BENCH_TMP/check.head" || die "umbra-chit: not a hit"
    cp "$BENCH_TMP/check.gz" "$BENCH_TMP/chit.body"
    REF[umbra-chit]=$BENCH_TMP/chit.body
    CSIZE=$(stat -c %s "$BENCH_TMP/chit.body")
    WPATH[umbra-ihit]="/i/bin?size=$CSIZE&ct=application%2Foctet-stream&$CC_LONG"
    origin_ref "$CSIZE" "$BENCH_TMP/ihit.body"
    REF[umbra-ihit]=$BENCH_TMP/ihit.body
    curl -s -o /dev/null "http://127.0.0.1:$UMBRA_PORT${WPATH[umbra-ihit]}" # the fill
    log "umbra-chit: the stored gzip variant is $CSIZE bytes; umbra-ihit: an identity object of $CSIZE bytes"
fi

declare -A EXPECT
for s in "${MSRV_P[@]}" "${MSRV_H[@]}"; do
    EXPECT[$s]=$(answer_bytes "$s" "http://127.0.0.1:${PORT[$s]}${WPATH[$s]}" -H 'Accept-Encoding: gzip')
done

HAVE_PERF=
# (A virtual machine without a PMU answers "<not supported>": no counts then.)
if command -v perf >/dev/null && perf stat -e instructions -x, true 2>&1 | grep -q '^[0-9]'; then
    HAVE_PERF=1
else
    log "perf cannot count instructions here: instructions/req will be '-'"
fi

# shellcheck disable=SC2034 # some are read by name (medians)
declare -A RPS P50 P99 CPU_S US CPU_W CPU_O INS

# measure CASE SERVER ROUND
measure() {
    local k=$1 s=$2 r=$3 out cs cw co us ins=- perf_out=$BENCH_TMP/perf-$1-$2-$3.txt perf_pid=
    alive "$s" origin
    out=$BENCH_TMP/wrk-$k-$s-$r.txt
    round_cpu_start "${PID[$s]}"
    if [[ -n $HAVE_PERF && $s == umbra-* ]]; then
        perf stat -e instructions -x, -p "${PID[$s]}" -o "$perf_out" &
        perf_pid=$!
    fi
    run_wrk "http://127.0.0.1:${PORT[$s]}${WPATH[$s]}" "$out" "$WRK_CONNECTIONS" "$WRK_SCRIPT"
    if [[ -n $perf_pid ]]; then
        kill -INT "$perf_pid" 2>/dev/null || true
        wait "$perf_pid" 2>/dev/null || true
    fi
    round_cpu_end "$WRK_CPU" "${PID[$s]}"
    read_wrk "$out"
    wrk_check "${EXPECT[$s]}" "$WRK_CONNECTIONS"
    if [[ $k == hit ]]; then
        answer_check "http://127.0.0.1:${PORT[$s]}${WPATH[$s]}" "${REF[$s]}" -H 'Accept-Encoding: gzip'
    fi
    cs=${ROUND_PCT[0]} cw=$ROUND_CLIENT_PCT co=$ROUND_OTHER_PCT
    us=$(us_each "${ROUND_TICKS[0]}" "$WRK_REQS" 2)
    if [[ -n $perf_pid && -s $perf_out ]]; then
        ins=$(awk -F, -v n="$WRK_REQS" '$3 ~ /instructions/ && $1 ~ /^[0-9]+$/ && n > 0 { printf "%.0f", $1 / n }' "$perf_out")
        [[ -n $ins ]] || ins=-
    fi
    printf '[bench] %-9s %-11s round %d/%d: %10.2f req/s  p50 %s ms p99 %s ms  CPU %% server %s (%s us/req, %s instructions/req) wrk %s other %s  %s\n' \
        "$k" "$s" "$r" "$ROUNDS" "$WRK_RPS" "$WRK_P50" "$WRK_P99" "$cs" "$us" "$ins" "$cw" "$co" \
        "${ROUND_BAD:-answers right}" >&2
    [[ -n $ROUND_BAD ]] && return 0
    add_figures "$k,$s" RPS="$WRK_RPS" P50="$WRK_P50" P99="$WRK_P99" CPU_S="$cs" US="$us" CPU_W="$cw" \
        CPU_O="$co" INS="$ins"
    note_busy "$co" "$k" "$s" "$r"
}

check_idle
log "measuring: gzip100k x $ROUNDS rounds x ${#MSRV_P[@]} (${MSRV_P[*]}), hit x $ROUNDS x ${#MSRV_H[@]} (${MSRV_H[*]}) x ${DURATION}s"
each_round MSRV_P measure gzip100k
((${#MSRV_H[@]})) && each_round MSRV_H measure hit

md=$(results_md compress)
{
    echo "# compress: gzip on the fly beside nginx, and a compressed cache hit beside an identity one"
    echo
    bench_env_md "-t$WRK_THREADS -c$WRK_CONNECTIONS -d${DURATION}s --latency -s gzip.lua (Accept-Encoding: gzip)"
    echo "- origin: $ORIGIN_BIN -t ${ORIGIN_THREADS:-1} (test origin); body: its $SIZE-byte json=1 document (gzip -6 shrinks it about 5:1), application/json"
    echo "- gzip100k: GET $URL_PROXY; nginx proxy_pass with gzip on, gzip_comp_level 6; Umbra route /nc/, cache = false, compress gzip level 6"
    echo "- hit: umbra-chit GET $URL_CHIT (the gzip variant, stored); umbra-ihit GET ${WPATH[umbra-ihit]:-} (identity, the same size)"
    echo
    md_row case server "median req/s" compared ratio target met "p50 ms" "p99 ms" "CPU server %" "server us/req" \
        "instructions/req" "CPU wrk %" "CPU other %" "req/s per round" repeated
    md_row --- --- ---: --- ---: --- --- ---: ---: ---: ---: ---: ---: ---: --- ---
} >"$md"

declare -A VERDICT=()
declare -A MR=() MU=() HR=() HU=()
median_map MR RPS "gzip100k," "${MSRV_P[@]}"
median_map MU US "gzip100k," "${MSRV_P[@]}"
if ((${#MSRV_H[@]})); then
    # (median_map empties its map: the hit case's go to maps of their own, then join.)
    median_map HR RPS "hit," "${MSRV_H[@]}"
    median_map HU US "hit," "${MSRV_H[@]}"
    for s in "${MSRV_H[@]}"; do
        MR[$s]=${HR[$s]}
        MU[$s]=${HU[$s]}
    done
fi
fmt='%-14s %-11s %12s %-16s %6s %-8s %-8s %7s %7s %6s %8s %10s\n'
# shellcheck disable=SC2059
printf "\n$fmt" case server "median req/s" compared ratio target met "p50 ms" "p99 ms" "CPU%" "us/req" "instr/req"
printf '%s\n' "------------------------------------------------------------------------------------------------------------------"
row() {
    local k=$1 s=$2 cmpd=$3 rr=$4 tg=$5 met=$6 p50 p99 c cw co ins
    read -r p50 p99 c cw co ins <<<"$(medians "$k,$s" P50 P99 CPU_S CPU_W CPU_O INS)"
    fixed 0 c cw co
    # shellcheck disable=SC2059
    printf "$fmt" "compress/$k" "$s" "${MR[$s]}" "$cmpd" "$rr" "$tg" "$met" "$p50" "$p99" "$c" "${MU[$s]}" "$ins"
    md_row "compress/$k" "$s" "${MR[$s]}" "$cmpd" "$rr" "$tg" "$met" "$p50" "$p99" "$c" "${MU[$s]}" "$ins" "$cw" "$co" \
        "${RPS[$k,$s]% }" "$(repeated_md "$k,$s")" >>"$md"
}
for s in "${MSRV_P[@]}"; do
    if [[ $s == umbra-gzip ]] && bench_uses nginx; then
        rr=$(ratio "${MR[umbra-gzip]}" "${MR[nginx]}")
        met=$(atleast "$rr" "$TARGET_X_NGINX" met "not met")
        row gzip100k "$s" "x nginx" "$rr" ">= $TARGET_X_NGINX" "$met"
        VERDICT[gzip100k]="x nginx (gzip on, level 6) $rr ($met: >= $TARGET_X_NGINX); server CPU per request ${MU[umbra-gzip]} us (nginx ${MU[nginx]} us)"
    else
        row gzip100k "$s" - - - -
    fi
done
for s in "${MSRV_H[@]}"; do
    if [[ $s == umbra-chit ]]; then
        rr=$(ratio "${MR[umbra-chit]}" "${MR[umbra-ihit]}")
        met=$(atleast "$rr" "$TARGET_X_IHIT" met "not met")
        row hit "$s" "x umbra-ihit" "$rr" ">= $TARGET_X_IHIT" "$met"
        VERDICT[hit]="compressed hit x identity hit of the same size $rr ($met: >= $TARGET_X_IHIT)"
    else
        row hit "$s" - - - -
    fi
done
{
    echo
    echo "compared, ratio: the row's median req/s / the other's. CPU: % of one CPU during the"
    echo "wrk run, medians of the rounds (the server: all its threads; the Umbra rows are one"
    echo "Umbra). server us/req: its CPU time per request; instructions/req: instructions Umbra"
    echo "ran per request (perf stat -e instructions; - without perf), a figure that noise from"
    echo "the rest of the machine barely moves. Compare the ratios within one run only."
    busy_md
    if ((${#VERDICT[@]})); then
        echo
        echo "Targets (issue 16): gzip on the fly >= $TARGET_X_NGINX x nginx's gzip of the same"
        echo "proxied answer; a compressed hit >= $TARGET_X_IHIT x an identity hit of the same size."
        echo
        each_verdict echo "- compress" gzip100k hit
    fi
    repeats_md
    configs_md
} >>"$md"
echo
each_verdict log "target compress" gzip100k hit
warn_busy
warn_repeats
log "results written to $md"
