#!/usr/bin/env bash
# Scenario "lua": request-time Lua hooks (on_request). Umbra answering from a hook against
# nginx answering with "return": the client address echo (GET /ip) and a hello world; and
# a 1 KiB cache hit through an upstream route with a host-routing hook against the same
# hit through a route without one (the hook's cost). See bench/README.md.
set -euo pipefail
# shellcheck source=bench/lib.sh
. "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

SMALL=1024
CC_LONG="cc=max-age%3D3600"
HELLO="Hello, World!"
# What the echo answers: the client's address, wrk's and curl's (127.0.0.1).
CLIENT_ADDR=127.0.0.1
# The hook-hit URLs: the same object (1 KiB, max-age=3600) through a route without a hook
# and through one with a host-routing on_request hook.
URL_NOHOOK="/nohook/hit1k?size=$SMALL&$CC_LONG"
URL_HOOK="/hook/hit1k?size=$SMALL&$CC_LONG"
# Targets (issue 5): echo and hello >= 1.2 x nginx; the hook costs <= 10% on the hit.
TARGET_X_NGINX=1.2
TARGET_HOOK_COST_PCT=10

need wrk curl python3 awk timeout pgrep getconf cmp
bench_init
if bench_uses umbra; then
    ensure_umbra
    ensure_origin
fi
read -r -a SRV <<<"$SERVERS"

# The measurements: echo and hello compare the servers of SERVERS; hook-hit compares one
# Umbra with itself (two routes), so it runs only when Umbra is among SERVERS.
CASES=(echo hello)
declare -A CSRV WPATH
CSRV[echo]="${SRV[*]}"
CSRV[hello]="${SRV[*]}"
if bench_uses umbra; then
    CASES+=(hook-hit)
    CSRV[hook-hit]="umbra umbra+hook"
else
    log "no umbra in SERVERS: skipping hook-hit (it measures Umbra against itself)"
fi
declare -A PORT PID
# The path each (case, server) requests.
WPATH[echo,nginx]=/ip
WPATH[echo,umbra]=/ip
WPATH[hello,nginx]=/hello
WPATH[hello,umbra]=/hello
WPATH[hook-hit,umbra]=$URL_NOHOOK
WPATH[hook-hit,umbra+hook]=$URL_HOOK

if bench_uses umbra; then
    start_origin
    PID[origin]=$ORIGIN_PID
fi
if bench_uses nginx; then
    start_nginx_with "" "" "
        location = /ip {
            default_type text/plain;
            return 200 \"\$remote_addr\";
        }
        location = /hello {
            default_type text/plain;
            return 200 \"$HELLO\";
        }
        location / {
            return 404;
        }"
    PORT[nginx]=$NGINX_PORT
    PID[nginx]=$NGINX_PID
fi
if bench_uses umbra; then
    # /ip is config/ip.lua's hook and /hello config/hello.lua's (there a global on_request:
    # here each is its route's, so that the other routes run no hook). /nohook/ and /hook/
    # are the same upstream route, cached (the default), the second with a host-routing
    # hook in the style of config/host-routing.lua: wrk's Host (127.0.0.1:PORT) is none
    # of the names, so each request makes every comparison and takes the last branch. The
    # three upstreams are the one origin. The hook runs on every request, hits included
    # (on_request comes before the cache lookup); the hooks' origin wrapper is below the
    # cache, so a hit through /nohook/ does what it does in a config without hooks.
    o="http://127.0.0.1:$ORIGIN_PORT"
    start_umbra_with "upstreams = {
  app = { servers = { \"$o\" } },
  blog = { servers = { \"$o\" } },
  shop = { servers = { \"$o\" } },
  api = { servers = { \"$o\" } },
}
routes = {
  { path = \"/ip\", on_request = function(req)
      if req.path ~= \"/ip\" then
        return umbra.respond(404, \"not found\\n\")
      end
      if req.method ~= \"GET\" and req.method ~= \"HEAD\" then
        return umbra.respond(405, \"use GET\\n\", { Allow = \"GET, HEAD\" })
      end
      return umbra.respond(200, req.client_ip)
    end },
  { path = \"/hello\", on_request = function(req)
      return umbra.respond(200, \"$HELLO\")
    end },
  { path = \"/nohook/\", upstream = \"app\" },
  { path = \"/hook/\", upstream = \"app\", on_request = function(req)
      local host = req.hostname
      if host == \"blog.example.com\" then
        req.upstream = \"blog\"
      elseif host == \"shop.example.com\" then
        req.upstream = \"shop\"
      elseif host == \"api.example.com\" then
        req.upstream = \"api\"
      else
        req.upstream = \"app\"
      end
    end },
}
cache = { memory = \"256MB\", max_object = \"64MB\" }"
    PORT[umbra]=$UMBRA_PORT
    PID[umbra]=$UMBRA_PID
    PORT[umbra+hook]=$UMBRA_PORT
    PID[umbra+hook]=$UMBRA_PID
fi

# fetch SERVER PATH BODY HEAD: one GET; the body and head to files; prints "CODE SIZE".
fetch() {
    curl -s --max-time 10 -o "$3" -D "$4" -w '%{http_code} %{size_download}' \
        "http://127.0.0.1:${PORT[$1]}$2" || die "$1: curl $2 failed (exit $?)"
}

# check_text SERVER PATH TEXT: GET PATH answers 200 with exactly TEXT as its body.
check_text() {
    local s=$1 path=$2 want=$3 code size
    printf '%s' "$want" >"$BENCH_TMP/want.body"
    read -r code size <<<"$(fetch "$s" "$path" "$BENCH_TMP/check.body" "$BENCH_TMP/check.head")"
    [[ $code == 200 ]] || die "$s: GET $path answered $code, expected 200"
    cmp -s "$BENCH_TMP/check.body" "$BENCH_TMP/want.body" ||
        die "$s: GET $path answered '$(head -c 100 "$BENCH_TMP/check.body")', expected '$want'"
    log "$s: GET $path -> 200, '$want' ($(grep -i '^Content-Type:' "$BENCH_TMP/check.head" | tr -d '\r'))"
}

# check_hit SERVER PATH: the first GET (a miss, which warms the cache) and the second (a hit:
# Cache-Status with "hit") answer 200 with the origin's SMALL bytes, at the cost of one
# origin request.
check_hit() {
    local s=$1 path=$2 c0 c1 code size i
    c0=$(origin_count)
    for i in 1 2; do
        read -r code size <<<"$(fetch "$s" "$path" "$BENCH_TMP/check.body" "$BENCH_TMP/check.head")"
        [[ $code == 200 ]] || die "$s: GET $path (#$i) answered $code, expected 200"
        cmp -s "$BENCH_TMP/check.body" "$BENCH_TMP/ref.body" ||
            die "$s: GET $path (#$i): $size bytes that differ from the origin's $SMALL"
    done
    grep -qiE '^Cache-Status:.*;[[:space:]]*hit([;,[:space:]]|$)' "$BENCH_TMP/check.head" || {
        cat "$BENCH_TMP/check.head" >&2
        die "$s: the second GET $path was not a cache hit (head above)"
    }
    c1=$(origin_count)
    (((c1 - c0) == 1)) || die "$s: two GET $path cost the origin $((c1 - c0)) requests, expected 1"
    log "$s: GET $path -> 200, $size bytes, second one a hit ($(grep -i '^Cache-Status:' "$BENCH_TMP/check.head" | tr -d '\r'))"
}

for s in "${SRV[@]}"; do
    check_text "$s" /ip "$CLIENT_ADDR"
    check_text "$s" /hello "$HELLO"
done
if bench_uses umbra; then
    origin_ref "$SMALL" "$BENCH_TMP/ref.body"
    check_hit umbra "$URL_NOHOOK"
    check_hit umbra+hook "$URL_HOOK"
    # The hook really routes: a name it knows reaches the origin through the hook's pick.
    code=$(curl -s -o /dev/null --max-time 10 -w '%{http_code}' -H "Host: shop.example.com" \
        "http://127.0.0.1:$UMBRA_PORT/hook/routed?size=16") || die "umbra+hook: curl failed"
    [[ $code == 200 ]] || die "umbra+hook: GET /hook/routed with Host: shop.example.com answered $code"
fi

# The right answer of each (case, server), as a file (REF), and what it weighs (head and
# body, EXPECT): what wrk should read per response.
printf '%s' "$CLIENT_ADDR" >"$BENCH_TMP/echo.body"
printf '%s' "$HELLO" >"$BENCH_TMP/hello.body"
declare -A REF EXPECT
for k in "${CASES[@]}"; do
    read -r -a csrv <<<"${CSRV[$k]}"
    for s in "${csrv[@]}"; do
        case $k in
        echo) REF[$k,$s]=$BENCH_TMP/echo.body ;;
        hello) REF[$k,$s]=$BENCH_TMP/hello.body ;;
        hook-hit) REF[$k,$s]=$BENCH_TMP/ref.body ;;
        esac
        EXPECT[$k,$s]=$(answer_bytes "$s" "http://127.0.0.1:${PORT[$s]}${WPATH[$k,$s]}")
    done
done

# shellcheck disable=SC2034 # some are read by name (medians)
declare -A RPS P50 P99 CPU_S US CPU_W CPU_O OREQ

# measure CASE SERVER ROUND
measure() {
    local k=$1 s=$2 r=$3 out o0=0 o1=0 cs cw co us orq=-
    alive "$s"
    if [[ $k == hook-hit ]]; then
        alive origin
        o0=$(origin_count)
    fi
    out=$BENCH_TMP/wrk-$k-$s-$r.txt
    round_cpu_start "${PID[$s]}"
    run_wrk "http://127.0.0.1:${PORT[$s]}${WPATH[$k,$s]}" "$out"
    round_cpu_end "$WRK_CPU" "${PID[$s]}"
    if [[ $k == hook-hit ]]; then
        o1=$(origin_count)
        orq=$((o1 - o0))
    fi
    read_wrk "$out"
    wrk_check "${EXPECT[$k,$s]}" "$WRK_CONNECTIONS"
    # A hit that reached the origin is not a hit: the round does not measure the hook's cost.
    if [[ $orq != - ]] && ((orq > 0)); then
        round_bad "the origin got $orq requests during the round (hits: expected 0)"
    fi
    answer_check "http://127.0.0.1:${PORT[$s]}${WPATH[$k,$s]}" "${REF[$k,$s]}"
    cs=${ROUND_PCT[0]} cw=$ROUND_CLIENT_PCT co=$ROUND_OTHER_PCT
    # The server's CPU time per request, in microseconds.
    us=$(us_each "${ROUND_TICKS[0]}" "$WRK_REQS" 2)
    printf '[bench] %-8s %-10s round %d/%d: %10.2f req/s  p50 %s ms p99 %s ms  CPU %% server %s (%s us/req) wrk %s other %s  origin reqs %s  %s requests, %s\n' \
        "$k" "$s" "$r" "$ROUNDS" "$WRK_RPS" "$WRK_P50" "$WRK_P99" "$cs" "$us" "$cw" "$co" "$orq" "$WRK_REQS" \
        "${ROUND_BAD:-answers right}" >&2
    [[ -n $ROUND_BAD ]] && return 0
    add_figures "$k,$s" RPS="$WRK_RPS" P50="$WRK_P50" P99="$WRK_P99" CPU_S="$cs" US="$us" CPU_W="$cw" \
        CPU_O="$co" OREQ="$orq"
    note_busy "$co" "$k" "$s" "$r"
}

check_idle
nw=0
for k in "${CASES[@]}"; do
    read -r -a csrv <<<"${CSRV[$k]}"
    nw=$((nw + ROUNDS * ${#csrv[@]}))
done
log "measuring: ${#CASES[@]} cases (${CASES[*]}) x $ROUNDS rounds x ${#SRV[@]} servers$(bench_uses umbra && echo " (hook-hit: Umbra without and with the hook)")" \
    "x ${DURATION}s (~$((nw * (DURATION + 2)))s)"
for k in "${CASES[@]}"; do
    read -r -a csrv <<<"${CSRV[$k]}"
    each_round csrv measure "$k"
done

# cost_pct BASE WITH: how much more WITH costs than BASE, in %: BASE/WITH - 1 for rates.
cost_pct() {
    if [[ -z $1 || -z $2 || $1 == - || $2 == - ]]; then
        echo -
        return
    fi
    awk -v a="$1" -v b="$2" 'BEGIN { if (b == 0) print "-"; else printf "%+.1f\n", (a / b - 1) * 100 }'
}

md=$(results_md lua)
{
    echo "# lua: request-time Lua hooks (Umbra vs nginx; Umbra with and without a hook)"
    echo
    bench_env_md "-t$WRK_THREADS -c$WRK_CONNECTIONS -d${DURATION}s --latency"
    if bench_uses umbra; then echo "- origin (hook-hit): $ORIGIN_BIN -t ${ORIGIN_THREADS:-1} (test origin)"; fi
    echo "- echo: GET /ip; nginx: location = /ip { default_type text/plain; return 200 \"\$remote_addr\"; }; Umbra: config/ip.lua's on_request on the route /ip"
    echo "- hello: GET /hello; nginx: location = /hello { default_type text/plain; return 200 \"$HELLO\"; }; Umbra: on_request returning umbra.respond(200, \"$HELLO\") on the route /hello"
    echo "- hook-hit: one Umbra, cache = { memory = \"256MB\" }; umbra: GET $URL_NOHOOK (route /nohook/, upstream app, no hook); umbra+hook: GET $URL_HOOK (route /hook/, upstream app, on_request: host lower-cased, port dropped, compared with 3 names, req.upstream set); both hits"
    echo
    md_compare_head
} >"$md"

declare -A VERDICT=()
fmt='%-13s %-10s %12s %-16s %6s %-12s %-8s %7s %7s %6s %8s %5s %6s\n'
# shellcheck disable=SC2059
printf "\n$fmt" case server "median req/s" compared ratio target met "p50 ms" "p99 ms" "CPU%" "us/req" wrk other
printf '%s\n' "----------------------------------------------------------------------------------------------------------------------"
for k in "${CASES[@]}"; do
    read -r -a csrv <<<"${CSRV[$k]}"
    declare -A MR=() MU=()
    median_map MR RPS "$k," "${csrv[@]}"
    median_map MU US "$k," "${csrv[@]}"
    for s in "${csrv[@]}"; do
        cmpd=- rr=- tg=- met=-
        if [[ $k == hook-hit && $s == umbra+hook ]]; then
            # The hook's cost: req/s without / req/s with - 1.
            cmpd="cost vs umbra"
            rr="$(cost_pct "${MR[umbra]}" "${MR[umbra+hook]}")%"
            tg="<= $TARGET_HOOK_COST_PCT%"
            met=$(atmost "${rr%\%}" "$TARGET_HOOK_COST_PCT" met "not met")
            ucost=$(cost_pct "${MU[umbra+hook]}" "${MU[umbra]}")
            VERDICT[$k]="the hook costs ${rr} in req/s ($met: $tg); server CPU per request $ucost% (${MU[umbra]} -> ${MU[umbra+hook]} us)"
        elif [[ $k != hook-hit && $s == umbra ]] && bench_uses nginx; then
            cmpd="x nginx"
            rr=$(ratio "${MR[umbra]}" "${MR[nginx]}")
            tg=">= $TARGET_X_NGINX"
            met=$(atleast "$rr" "$TARGET_X_NGINX" met "not met")
            VERDICT[$k]="x nginx $rr ($met: $tg); server CPU per request ${MU[umbra]} us vs nginx ${MU[nginx]} us"
        fi
        read -r p50 p99 c cw co orq <<<"$(medians "$k,$s" P50 P99 CPU_S CPU_W CPU_O OREQ)"
        fixed 0 c cw co orq
        # shellcheck disable=SC2059
        printf "$fmt" "lua/$k" "$s" "${MR[$s]}" "$cmpd" "$rr" "$tg" "$met" "$p50" "$p99" "$c" "${MU[$s]}" "$cw" "$co"
        md_row "lua/$k" "$s" "${MR[$s]}" "$cmpd" "$rr" "$tg" "$met" "$p50" "$p99" "$c" "${MU[$s]}" "$cw" "$co" "$orq" \
            "${RPS[$k,$s]% }" "$(repeated_md "$k,$s")" >>"$md"
    done
done
{
    echo
    echo "compared, ratio: echo and hello, Umbra's median req/s / nginx's; hook-hit, the hook's"
    echo "cost: umbra's median req/s (no hook) / umbra+hook's - 1, in %. CPU: % of one CPU during"
    echo "the wrk run (200% = both CPUs of a 2-CPU machine), medians of the rounds: the server"
    echo "(all its processes and threads; for hook-hit the same Umbra), wrk, and the rest of the"
    echo "machine's busy time (approximate; may come out a little below 0). server us/req: the"
    echo "server's CPU time per request, median of the rounds. origin reqs/round: requests the"
    echo "origin got during a hook-hit round (0: every request was a hit). wrk and the server"
    echo "share the machine's CPUs: compare the ratios, not the absolute figures, and only within"
    echo "one run; ratios within about 5-7% of each other mean \"the same\" (so a hook cost below"
    echo "about 5% is within the noise; the CPU per request tells it better)."
    busy_md
    if ((${#VERDICT[@]})); then
        echo
        echo "Targets (issue 5): echo and hello >= $TARGET_X_NGINX x nginx (req/s); a 1 KiB cache hit"
        echo "through a route with a host-routing hook costs <= $TARGET_HOOK_COST_PCT% more than without it."
        echo
        each_verdict echo "- lua" "${CASES[@]}"
    fi
    repeats_md
    configs_md
} >>"$md"
echo
each_verdict log "target lua" "${CASES[@]}"
warn_busy
warn_repeats
log "results written to $md"
