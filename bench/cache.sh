#!/usr/bin/env bash
# Scenario "cache": Umbra against nginx (proxy_cache) and Varnish as caching reverse proxies
# in front of one origin (the test origin, tests/origin/origin.c): hits of a small and a
# large object, a thundering herd on one cold URL, an uncacheable URL behind a slow origin,
# and the hit ratio of the store's SIEVE against LRU on a Zipf trace. See bench/README.md.
set -euo pipefail
# Every server of this scenario by default, unless SERVERS says otherwise.
: "${SERVERS:=nginx varnish umbra}"
BENCH_KNOWN_SERVERS="nginx varnish umbra"
# shellcheck source=bench/lib.sh
. "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

# The herd: that many simultaneous requests for one cold URL.
: "${HERD_REQUESTS:=200}"
# ab's run on the large object.
: "${AB_REQUESTS:=300}"
: "${AB_CONCURRENCY:=100}"
# 1: also send the herd to the origin directly, once (what the client and the machine give).
: "${BACKEND_DIRECT:=1}"
DELAY_MS=50
SMALL=1024
LARGE=$((5 * 1024 * 1024))
CC_LONG="cc=max-age%3D3600"
URL_1K="/hit1k?size=$SMALL&$CC_LONG"
URL_5M="/hit5m?size=$LARGE&$CC_LONG"
URL_NS="/nostore?size=$SMALL&delay=$DELAY_MS&cc=no-store"
# Each client connection has one request in flight, and each takes DELAY_MS at least.
NS_BOUND=$((WRK_CONNECTIONS * 1000 / DELAY_MS))

need wrk ab curl python3 awk timeout pgrep getconf cmp
for v in HERD_REQUESTS AB_REQUESTS AB_CONCURRENCY; do
    [[ ${!v} =~ ^[1-9][0-9]*$ ]] || die "$v must be a positive integer (got '${!v}')"
done
bench_init
if bench_uses umbra; then ensure_umbra; fi
ensure_origin

# The store's floor libraries (build dir's libumbra_cache.a and the floors below it) for
# the hit-ratio program: beside UMBRA_BIN when it is a build dir, else built into
# UMBRA_BUILD. Sets STORE_LIBS.
STORE_FLOORS=(cache disk compress config luavm http loop core)
ensure_store_libs() {
    local dir f
    dir=$(dirname "$UMBRA_BIN")
    if [[ ! -f $dir/libumbra_cache.a ]]; then
        need cmake
        mkdir -p "$UMBRA_BUILD"
        local blog=$UMBRA_BUILD/bench-build-store.log
        log "building umbra_cache (Release) into $UMBRA_BUILD for bench/sieve_vs_lru.c"
        if ! { cmake -S "$BENCH_ROOT" -B "$UMBRA_BUILD" -DCMAKE_BUILD_TYPE=Release &&
            cmake --build "$UMBRA_BUILD" -j2 --target umbra_cache; } >"$blog" 2>&1; then
            tail -n 40 "$blog" >&2
            die "build of umbra_cache failed (full log: $blog)"
        fi
        dir=$UMBRA_BUILD
    fi
    STORE_LIBS=()
    for f in "${STORE_FLOORS[@]}"; do
        [[ -f $dir/libumbra_$f.a ]] || die "no $dir/libumbra_$f.a"
        STORE_LIBS+=("$dir/libumbra_$f.a")
    done
}

# The hit-ratio program, built now so that a compile error stops the run before the long
# part. It measures Umbra's store: only when Umbra is among the servers.
SIM_BIN=
if bench_uses umbra; then
    need cc pkg-config
    ensure_store_libs
    SIM_BIN=$BENCH_TMP/sieve_vs_lru
    # The headers want the version CMake defines (project VERSION in CMakeLists.txt).
    sim_version=$(sed -n 's/^project(umbra VERSION \([0-9.]*\).*/\1/p' "$BENCH_ROOT/CMakeLists.txt")
    [[ -n $sim_version ]] || die "no project(umbra VERSION ...) in CMakeLists.txt"
    # shellcheck disable=SC2046
    cc -O2 -std=c11 -D_GNU_SOURCE -DUMBRA_VERSION="\"$sim_version\"" -Wall -Wextra -I"$BENCH_ROOT/include" \
        -I"$BENCH_DIR" -o "$SIM_BIN" "$BENCH_DIR/sieve_vs_lru.c" "$BENCH_DIR/store_sim.c" \
        "${STORE_LIBS[@]}" $(pkg-config --libs luajit libxxhash zlib libbrotlienc libzstd) \
        -lpthread -lm >"$BENCH_TMP/sim-build.log" 2>&1 || {
        cat "$BENCH_TMP/sim-build.log" >&2
        die "cc bench/sieve_vs_lru.c failed (against ${STORE_LIBS[*]})"
    }
fi

# wrk's and the herd's connections, the servers' client and origin sockets.
raise_nofile $((2 * (HERD_REQUESTS > WRK_CONNECTIONS ? HERD_REQUESTS : WRK_CONNECTIONS) + 512))
log "ulimit -n: $NOFILE"

start_origin
declare -A PORT PID
if bench_uses nginx; then
    # The cache on tmpfs, so that nginx's hits don't wait on a disk (Umbra's and Varnish's
    # are in memory).
    NGINX_CACHE=/dev/shm/$(basename "$BENCH_TMP")-nginx-cache
    BENCH_EXTRA_DIRS+=("$NGINX_CACHE")
    mkdir -p "$NGINX_CACHE"
    # Its workers run as nobody.
    chmod 777 "$NGINX_CACHE"
    # Its hits are files in the cache: the open file cache keeps them open.
    start_nginx_with "worker_rlimit_nofile $NOFILE;" "    $NGINX_OPEN_FILE_CACHE
    proxy_cache_path $NGINX_CACHE levels=1:2 keys_zone=bench:16m max_size=256m inactive=1h use_temp_path=off;
$(nginx_upstream app "$ORIGIN_PORT")" "
        location / {
            proxy_pass http://app;
            proxy_http_version 1.1;
            proxy_set_header Connection \"\";
            proxy_cache bench;
            proxy_cache_lock on;
            add_header X-Cache-Status \$upstream_cache_status always;
        }"
    PORT[nginx]=$NGINX_PORT
    PID[nginx]=$NGINX_PID
fi
if bench_uses varnish; then
    # Threads for the most requests in flight at once (the herd's, wrk's or ab's
    # connections), in each pool, so that no round waits for threads to be made: a
    # connection's request and its fetch from the origin take one each.
    peak=$WRK_CONNECTIONS
    for n in "$HERD_REQUESTS" "$AB_CONCURRENCY"; do
        if ((n > peak)); then peak=$n; fi
    done
    VARNISH_THREAD_POOL_MIN=$((peak > 100 ? peak : 100))
    VARNISH_THREAD_POOL_MAX=$((4 * VARNISH_THREAD_POOL_MIN > 1000 ? 4 * VARNISH_THREAD_POOL_MIN : 1000))
    start_varnish "$ORIGIN_PORT"
    PORT[varnish]=$VARNISH_PORT
    PID[varnish]=$VARNISH_PID
fi
if bench_uses umbra; then
    start_umbra_with "upstreams = { app = { servers = { \"http://127.0.0.1:$ORIGIN_PORT\" } } }
routes = { { path = \"/\", upstream = \"app\" } }
cache = { memory = \"256MB\", max_object = \"64MB\" }"
    PORT[umbra]=$UMBRA_PORT
    PID[umbra]=$UMBRA_PID
fi
PORT[origin]=$ORIGIN_PORT
PID[origin]=$ORIGIN_PID
read -r -a SRV <<<"$SERVERS"

# is_hit SERVER HEADERS-FILE: the response whose head is in the file came from the cache.
is_hit() {
    case $1 in
    umbra) grep -qiE '^Cache-Status:.*;[[:space:]]*hit([;,[:space:]]|$)' "$2" ;;
    nginx) grep -qiE '^X-Cache-Status:[[:space:]]*HIT' "$2" ;;
    varnish) grep -qiE '^X-Varnish:[[:space:]]*[0-9]+[[:space:]]+[0-9]+' "$2" ;;
    *) return 1 ;;
    esac
}

# fetch SERVER PATH BODY HEAD: one GET; the body and head to files; prints "CODE SIZE".
fetch() {
    curl -s --max-time 20 -o "$3" -D "$4" -w '%{http_code} %{size_download}' \
        "http://127.0.0.1:${PORT[$1]}$2" || die "$1: curl $2 failed (exit $?)"
}

# check_cacheable SERVER PATH BYTES: the first GET (a miss, which warms the cache) and the
# second (a hit) answer 200 with the origin's BYTES bytes, the second from the cache, and
# the two together cost the origin one request.
check_cacheable() {
    local s=$1 path=$2 want=$3 c0 c1 code size i
    c0=$(origin_count)
    for i in 1 2; do
        read -r code size <<<"$(fetch "$s" "$path" "$BENCH_TMP/check.body" "$BENCH_TMP/check.head")"
        [[ $code == 200 ]] || die "$s: GET $path (#$i) answered $code, expected 200"
        [[ $size == "$want" ]] || die "$s: GET $path (#$i) gave $size bytes, expected $want"
        cmp -s "$BENCH_TMP/check.body" "$BENCH_TMP/ref-$want.body" ||
            die "$s: GET $path (#$i): the body differs from the origin's"
    done
    is_hit "$s" "$BENCH_TMP/check.head" || {
        cat "$BENCH_TMP/check.head" >&2
        die "$s: the second GET $path was not a cache hit (head above)"
    }
    c1=$(origin_count)
    (((c1 - c0) == 1)) || die "$s: two GET $path cost the origin $((c1 - c0)) requests, expected 1"
    log "$s: GET $path -> 200, $size bytes, second one a hit ($(grep -iE '^(Cache-Status|X-Cache-Status|X-Varnish|Age):' "$BENCH_TMP/check.head" | tr -d '\r' | paste -sd' ' -))"
}

# check_uncacheable SERVER PATH BYTES: two GETs answer 200 with BYTES bytes, and both
# reach the origin.
check_uncacheable() {
    local s=$1 path=$2 want=$3 c0 c1 code size i
    c0=$(origin_count)
    for i in 1 2; do
        read -r code size <<<"$(fetch "$s" "$path" "$BENCH_TMP/check.body" "$BENCH_TMP/check.head")"
        [[ $code == 200 ]] || die "$s: GET $path (#$i) answered $code, expected 200"
        [[ $size == "$want" ]] || die "$s: GET $path (#$i) gave $size bytes, expected $want"
    done
    c1=$(origin_count)
    (((c1 - c0) == 2)) || die "$s: two GET $path (no-store) cost the origin $((c1 - c0)) requests, expected 2"
    log "$s: GET $path -> 200, $size bytes, both from the origin"
}

# The origin's own bodies, to compare with.
for n in $SMALL $LARGE; do origin_ref "$n" "$BENCH_TMP/ref-$n.body"; done
for s in "${SRV[@]}"; do
    check_cacheable "$s" "$URL_1K" $SMALL
    check_cacheable "$s" "$URL_5M" $LARGE
    check_uncacheable "$s" "$URL_NS" $SMALL
done
if bench_uses varnish; then
    # The pools and threads Varnish runs with (its counters), in the results file.
    read -r vpools vthreads <<<"$(varnish_threads)"
    [[ $vpools == "$VARNISH_THREAD_POOLS" ]] ||
        die "varnish: varnishstat counts $vpools thread pools, expected $VARNISH_THREAD_POOLS"
    VARNISH_THREADS_SEEN="Before measuring, varnishstat counted MAIN.pools $vpools and MAIN.threads $vthreads."
    log "varnish: $vpools thread pools, $vthreads threads"
fi

# ---- wrk measurements: hit1k (req/s), hit5m (MB/s), nostore (req/s, of bound) ----------

WRK_CASES=(hit1k hit5m nostore)
declare -A WPATH=([hit1k]=$URL_1K [hit5m]=$URL_5M [nostore]=$URL_NS)
declare -A WSIZE=([hit1k]=$SMALL [hit5m]=$LARGE [nostore]=$SMALL)
# What each server's answer of each case weighs (head and body), a hit for the hit cases
# (all warmed above): what wrk should read per response.
declare -A EXPECT
for s in "${SRV[@]}"; do
    for k in "${WRK_CASES[@]}"; do
        EXPECT[$k,$s]=$(answer_bytes "$s" "http://127.0.0.1:${PORT[$s]}${WPATH[$k]}")
    done
done
# shellcheck disable=SC2034 # some are read by name (medians)
declare -A RPS MBPS P50 P99 CPU_S CPU_B CPU_W CPU_O OREQ

# measure_wrk CASE SERVER ROUND
measure_wrk() {
    local k=$1 s=$2 r=$3 out o0 o1 cs cb cw co
    alive "$s" origin
    out=$BENCH_TMP/wrk-$k-$s-$r.txt
    o0=$(origin_count)
    round_cpu_start "$ORIGIN_PID" "${PID[$s]}"
    run_wrk "http://127.0.0.1:${PORT[$s]}${WPATH[$k]}" "$out"
    round_cpu_end "$WRK_CPU" "$ORIGIN_PID" "${PID[$s]}"
    o1=$(origin_count)
    read_wrk "$out"
    wrk_check "${EXPECT[$k,$s]}" "$WRK_CONNECTIONS"
    # A hit round in which requests reached the origin did not measure hits.
    if [[ $k != nostore ]] && ((o1 > o0)); then
        round_bad "the origin got $((o1 - o0)) requests during the round (hits: expected 0)"
    fi
    answer_check "http://127.0.0.1:${PORT[$s]}${WPATH[$k]}" "$BENCH_TMP/ref-${WSIZE[$k]}.body"
    cb=${ROUND_PCT[0]} cs=${ROUND_PCT[1]} cw=$ROUND_CLIENT_PCT co=$ROUND_OTHER_PCT
    printf '[bench] %-8s %-7s round %d/%d: %10.2f req/s %9.2f MB/s  p50 %s ms p99 %s ms  CPU %% server %s origin %s wrk %s other %s  origin reqs %d  %s requests, %s\n' \
        "$k" "$s" "$r" "$ROUNDS" "$WRK_RPS" "$WRK_MBPS" "$WRK_P50" "$WRK_P99" "$cs" "$cb" "$cw" "$co" $((o1 - o0)) "$WRK_REQS" \
        "${ROUND_BAD:-answers right}" >&2
    [[ -n $ROUND_BAD ]] && return 0
    add_figures "$k,$s" RPS="$WRK_RPS" MBPS="$WRK_MBPS" P50="$WRK_P50" P99="$WRK_P99" CPU_S="$cs" \
        CPU_B="$cb" CPU_W="$cw" CPU_O="$co" OREQ="$((o1 - o0))"
    note_busy "$co" "$k" "$s" "$r"
}

# ---- ab on the large object ---------------------------------------------------------------

# parse_ab FILE: prints "MBPS RPS COMPLETE KEEPALIVE" (MB = 2^20 bytes; ab's Kbytes are
# 1024 bytes).
parse_ab() {
    awk '
    /^Complete requests:/ { done = $3 }
    /^Keep-Alive requests:/ { ka = $3 }
    /^Requests per second:/ { rps = $4 }
    /^Transfer rate:/ { mbps = $3 / 1024 }
    END {
        if (rps == "" || mbps == "" || done == "") { print "parse-error"; exit 1 }
        printf "%.2f %s %s %s\n", mbps, rps, done, (ka == "" ? 0 : ka)
    }' "$1"
}

# shellcheck disable=SC2034 # AB_RPS is read by name (median_of)
declare -A AB_MBPS AB_RPS AB_KA
# measure_ab hit5m-ab SERVER ROUND (the case's name, for bench_round's messages and keys)
measure_ab() {
    local s=$2 r=$3 out rc=0 mbps rps ndone ka errs
    alive "$s" origin
    out=$BENCH_TMP/ab-$s-$r.txt
    timeout -k 5 120 ab -k -c "$AB_CONCURRENCY" -n "$AB_REQUESTS" \
        "http://127.0.0.1:${PORT[$s]}$URL_5M" >"$out" 2>&1 </dev/null || rc=$?
    if ((rc != 0)); then
        cat "$out" >&2
        die "ab exited with $rc against $s"
    fi
    read -r mbps rps ndone ka <<<"$(parse_ab "$out")" || {
        cat "$out" >&2
        die "could not parse ab's output"
    }
    errs=$(ab_check "$out" "$LARGE")
    [[ $errs == none ]] || round_bad "ab: $errs"
    ((ndone == AB_REQUESTS)) || round_bad "ab: $ndone of $AB_REQUESTS requests complete"
    answer_check "http://127.0.0.1:${PORT[$s]}$URL_5M" "$BENCH_TMP/ref-$LARGE.body"
    printf '[bench] hit5m-ab %-7s round %d/%d: %10.2f MB/s %8.2f req/s  %s complete, %s keep-alive, %s\n' \
        "$s" "$r" "$ROUNDS" "$mbps" "$rps" "$ndone" "$ka" "${ROUND_BAD:-answers right}" >&2
    [[ -n $ROUND_BAD ]] && return 0
    add_figures "$s" AB_MBPS="$mbps" AB_RPS="$rps" AB_KA="$ka"
}

# ---- the herd -------------------------------------------------------------------------------

# shellcheck disable=SC2034 # some are read by name (medians)
declare -A H_OREQ H_MED H_P90 H_MAX
# measure_herd herd SERVER ROUND: HERD_REQUESTS simultaneous GETs of a URL nobody asked for
# yet.
measure_herd() {
    local s=$2 r=$3 path cfg out o0 o1 rc=0 i stats med p90 max bad
    alive "$s" origin
    path="/herd/$s-$r-$RANDOM$RANDOM?size=$SMALL&delay=$DELAY_MS&$CC_LONG"
    cfg=$BENCH_TMP/herd-$s-$r.cfg
    out=$BENCH_TMP/herd-$s-$r.txt
    : >"$cfg"
    for ((i = 0; i < HERD_REQUESTS; i++)); do
        printf 'url = "http://127.0.0.1:%s%s"\noutput = "/dev/null"\n' "${PORT[$s]}" "$path" >>"$cfg"
    done
    o0=$(origin_count)
    timeout -k 5 60 curl -s --parallel --parallel-immediate --parallel-max "$HERD_REQUESTS" \
        --max-time 20 -w '%{http_code} %{size_download} %{time_total}\n' -K "$cfg" \
        >"$out" 2>"$out.err" </dev/null || rc=$?
    o1=$(origin_count)
    # curl's exit status is the last failure's; the per-transfer codes below tell more.
    stats=$(awk -v want="$SMALL" -v n="$HERD_REQUESTS" '
        { t[NR] = $3 * 1000; if ($1 != 200 || $2 != want) bad++ }
        END {
            if (NR != n) bad += n - NR
            m = NR; if (m == 0) { print "- - - " bad + 0; exit }
            # Sort the times (insertion sort: 200 values).
            for (i = 2; i <= m; i++) { v = t[i]; j = i - 1; while (j > 0 && t[j] > v) { t[j + 1] = t[j]; j-- } t[j + 1] = v }
            med = (m % 2) ? t[(m + 1) / 2] : (t[m / 2] + t[m / 2 + 1]) / 2
            p90 = t[int(0.9 * m + 0.999999)]
            printf "%.1f %.1f %.1f %d\n", med, p90, t[m], bad + 0
        }' "$out")
    read -r med p90 max bad <<<"$stats"
    if ((bad > 0 || rc != 0)); then
        round_bad "$bad of $HERD_REQUESTS responses not 200 with $SMALL bytes (curl exit $rc)"
    fi
    printf '[bench] herd     %-7s round %s: origin requests %d, latency median %s ms p90 %s ms max %s ms, %s\n' \
        "$s" "$([[ $s == origin ]] && echo direct || echo "$r/$ROUNDS")" $((o1 - o0)) "$med" "$p90" "$max" \
        "${ROUND_BAD:-answers right}" >&2
    [[ -n $ROUND_BAD ]] && return 0
    add_figures "$s" H_OREQ="$((o1 - o0))" H_MED="$med" H_P90="$p90" H_MAX="$max"
}

# ---- run --------------------------------------------------------------------------------------

check_idle
nw=$((${#WRK_CASES[@]} * ROUNDS * ${#SRV[@]}))
log "measuring: ${#WRK_CASES[@]} wrk cases (${WRK_CASES[*]}) x $ROUNDS rounds x ${#SRV[@]} servers x ${DURATION}s" \
    "(~$((nw * (DURATION + 2)))s), then ab, the herd and the hit-ratio trace"
for k in "${WRK_CASES[@]}"; do each_round SRV measure_wrk "$k"; done
each_round SRV measure_ab hit5m-ab
HERD_SRV=("${SRV[@]}")
each_round SRV measure_herd herd
if [[ $BACKEND_DIRECT == 1 ]]; then
    bench_round measure_herd herd origin 1
    HERD_SRV+=(origin)
fi
declare -A SIM_HITS SIM_RATIO SIM_OBJS
SIM_POLICIES=()
SIM_TRACE=
if [[ -n $SIM_BIN ]]; then
    log "hit ratio: $SIM_BIN (Zipf trace through um_cache_sim and an LRU)"
    "$SIM_BIN" >"$BENCH_TMP/sim.txt" 2>&1 || {
        cat "$BENCH_TMP/sim.txt" >&2
        die "sieve_vs_lru failed"
    }
    cat "$BENCH_TMP/sim.txt" >&2
    SIM_TRACE=$(sed -n 's/^trace: //p' "$BENCH_TMP/sim.txt")
    while read -r _ p _ hits _ ratio _ objs _; do
        SIM_POLICIES+=("$p")
        SIM_HITS[$p]=$hits
        SIM_RATIO[$p]=$ratio
        SIM_OBJS[$p]=$objs
    done < <(grep '^policy ' "$BENCH_TMP/sim.txt")
fi

# ---- report -----------------------------------------------------------------------------------

# maxof VALUES...: the largest, ignoring "-" ("-" when none is left).
maxof() { printf '%s\n' "$@" | awk '$1 != "-" && (m == "" || $1 + 0 > m + 0) { m = $1 } END { print (m == "" ? "-" : m) }'; }

md=$(results_md cache)
{
    echo "# cache: Umbra vs nginx (proxy_cache) and Varnish in front of one origin"
    echo
    bench_env_md
    echo "- ab: $(ab -V 2>&1 | head -n1 | sed 's/^This is //; s/ *<.*//'), -k -c $AB_CONCURRENCY -n $AB_REQUESTS"
    echo "- curl: $(curl --version | head -n1 | awk '{print $2}'), the herd: --parallel --parallel-max $HERD_REQUESTS, $HERD_REQUESTS GETs of one cold URL per round"
    echo "- origin: $ORIGIN_BIN -t ${ORIGIN_THREADS:-1} (test origin)"
    echo "- umbra: cache = { memory = \"256MB\", max_object = \"64MB\" } (a route to the origin; caching is on by default)"
    echo "- nginx: proxy_cache on tmpfs (/dev/shm), keys_zone 16m, max_size 256m, proxy_cache_lock on, open_file_cache, upstream keepalive $NGINX_UPSTREAM_KEEPALIVE (keepalive_requests $NGINX_UPSTREAM_KEEPALIVE_REQUESTS, keepalive_timeout $NGINX_UPSTREAM_KEEPALIVE_TIMEOUT), 2 workers"
    if bench_uses varnish; then
        echo "- varnish: varnishd -F -s malloc,256m -b (built-in VCL), thread_pools $VARNISH_THREAD_POOLS, thread_pool_min $VARNISH_THREAD_POOL_MIN, thread_pool_max $VARNISH_THREAD_POOL_MAX"
    fi
    echo "- URLs: hit1k $URL_1K; hit5m $URL_5M; nostore $URL_NS; herd /herd/UNIQUE?size=$SMALL&delay=$DELAY_MS&$CC_LONG"
    echo
    echo "## wrk (-t$WRK_THREADS -c$WRK_CONNECTIONS -d${DURATION}s --latency, keep-alive)"
    echo
    md_row case server "median req/s" "median MB/s" compared Umbra/nginx Umbra/Varnish "of bound" "p50 ms" "p99 ms" \
        "CPU server %" "CPU origin %" "CPU wrk %" "CPU other %" "origin reqs/round" "req/s per round" repeated
    md_row --- --- ---: ---: --- ---: ---: ---: ---: ---: ---: ---: ---: ---: ---: --- ---
} >"$md"

declare -A VERDICT=()
fmt='%-12s %-8s %12s %10s %8s %12s %14s %9s %8s %8s %s\n'
echo
# shellcheck disable=SC2059
printf "$fmt" case server "median req/s" "med MB/s" compared "Umbra/nginx" "Umbra/Varnish" "of bound" "p50 ms" "p99 ms" "CPU% srv/orig/wrk/other, origin reqs/round"
printf '%s\n' "------------------------------------------------------------------------------------------------------------------------------------------"
for k in "${WRK_CASES[@]}"; do
    # The medians the ratios are of: req/s, or MB/s for hit5m.
    cmp_by=rps cmp_of=MR
    [[ $k == hit5m ]] && cmp_by=mbps cmp_of=MM
    declare -A MR=() MM=()
    median_map MR RPS "$k," "${SRV[@]}"
    median_map MM MBPS "$k," "${SRV[@]}"
    for s in "${SRV[@]}"; do
        rn=$(umbra_ratio "$s" "$cmp_of" nginx)
        rv=$(umbra_ratio "$s" "$cmp_of" varnish)
        fb=-
        [[ $k == nostore ]] && fb=$(ratio "${MR[$s]}" "$NS_BOUND")
        read -r p50 p99 cs cb cw co orq <<<"$(medians "$k,$s" P50 P99 CPU_S CPU_B CPU_W CPU_O OREQ)"
        fixed 0 cs cb cw co orq
        cmpname=req/s
        [[ $cmp_by == mbps ]] && cmpname=MB/s
        # shellcheck disable=SC2059
        printf "$fmt" "cache/$k" "$s" "${MR[$s]}" "${MM[$s]}" "$cmpname" "$rn" "$rv" "$fb" "$p50" "$p99" "$cs/$cb/$cw/$co, $orq"
        per=${RPS[$k,$s]% }
        [[ $cmp_by == mbps ]] && per="${MBPS[$k,$s]% } (MB/s)"
        md_row "cache/$k" "$s" "${MR[$s]}" "${MM[$s]}" "$cmpname" "$rn" "$rv" "$fb" "$p50" "$p99" "$cs" "$cb" "$cw" "$co" \
            "$orq" "$per" "$(repeated_md "$k,$s")" >>"$md"
        if [[ $s == umbra ]]; then
            case $k in
            hit1k)
                v=
                bench_uses nginx && v="x nginx $rn ($(atleast "$rn" 1.5) >= 1.5)"
                bench_uses varnish && v="${v:+$v, }x Varnish $rv ($(atleast "$rv" 1.5) >= 1.5)"
                VERDICT[$k]=${v:-"no reference server measured"}
                ;;
            hit5m)
                best=$(maxof "${MM[nginx]:--}" "${MM[varnish]:--}")
                rb=$(ratio "${MM[umbra]}" "$best")
                VERDICT[$k]="wrk: x the better of nginx and Varnish $rb ($(atleast "$rb" 1.0) >= 1.0)"
                [[ $best == - ]] && VERDICT[$k]="wrk: no reference server measured"
                ;;
            nostore)
                VERDICT[$k]="of bound $fb ($(atleast "$fb" 0.95) >= 0.95), ${MR[$s]} req/s of $NS_BOUND"
                ;;
            esac
        fi
    done
done

{
    echo
    echo "## ab on the 5 MiB hit (ab -k -c $AB_CONCURRENCY -n $AB_REQUESTS)"
    echo
    md_row case server "median MB/s" "median req/s" Umbra/nginx Umbra/Varnish "keep-alive requests" "MB/s per round" repeated
    md_row --- --- ---: ---: ---: ---: --- --- ---
} >>"$md"
declare -A AM=()
median_map AM AB_MBPS "" "${SRV[@]}"
for s in "${SRV[@]}"; do
    rn=$(umbra_ratio "$s" AM nginx)
    rv=$(umbra_ratio "$s" AM varnish)
    if [[ $s == umbra ]]; then
        best=$(maxof "${AM[nginx]:--}" "${AM[varnish]:--}")
        rb=$(ratio "${AM[umbra]}" "$best")
        if [[ $best == - ]]; then
            VERDICT[hit5m]+="; ab: no reference server measured"
        else
            VERDICT[hit5m]+="; ab: x the better $rb ($(atleast "$rb" 1.0) >= 1.0)"
        fi
    fi
    ar=$(median_of AB_RPS "$s")
    # shellcheck disable=SC2059
    printf "$fmt" "cache/5m-ab" "$s" "$ar" "${AM[$s]}" "MB/s" "$rn" "$rv" - - - "keep-alive reqs/round: ${AB_KA[$s]% }"
    md_row cache/hit5m-ab "$s" "${AM[$s]}" "$ar" "$rn" "$rv" "${AB_KA[$s]% }" "${AB_MBPS[$s]% }" "$(repeated_md "hit5m-ab,$s")" >>"$md"
done

{
    echo
    echo "## herd: $HERD_REQUESTS simultaneous GETs of one cold URL (origin: ${DELAY_MS} ms, max-age=3600), a new URL each round"
    echo
    md_row case server "origin requests per round" "median latency ms" "p90 ms" "max ms" "median ms per round" repeated
    md_row --- --- --- ---: ---: ---: --- ---
} >>"$md"
echo
printf '%-12s %-8s %-26s %18s %8s %8s\n' case server "origin reqs per round" "median latency ms" "p90 ms" "max ms"
for s in "${HERD_SRV[@]}"; do
    read -r hm hp hx <<<"$(medians "$s" H_MED H_P90 H_MAX)"
    printf '%-12s %-8s %-26s %18s %8s %8s\n' cache/herd "$s" "${H_OREQ[$s]% }" "$hm" "$hp" "$hx"
    md_row cache/herd "$s" "${H_OREQ[$s]% }" "$hm" "$hp" "$hx" "${H_MED[$s]% }" "$(repeated_md "herd,$s")" >>"$md"
    if [[ $s == umbra ]]; then
        # shellcheck disable=SC2086
        omax=$(maxof ${H_OREQ[$s]})
        ok=below
        ((omax == 1)) && ok=meets
        VERDICT[herd]="origin requests per round ${H_OREQ[$s]% } ($ok: 1), median latency $hm ms ($(awk -v a="$hm" 'BEGIN { print (a != "-" && a <= 70 ? "meets" : "below") }') <= 70)"
    fi
done

if ((${#SIM_POLICIES[@]})); then
    {
        echo
        echo "## hit ratio: the store's SIEVE (um_cache_sim) vs LRU on one trace (bench/sieve_vs_lru.c)"
        echo
        echo "Trace: $SIM_TRACE."
        echo
        md_row policy hits "hit ratio" "/ LRU" "objects held at the end"
        md_row --- ---: ---: ---: ---:
    } >>"$md"
    echo
    printf '%-12s %10s %10s %8s %10s\n' policy hits "hit ratio" "/ LRU" objects
    for p in "${SIM_POLICIES[@]}"; do
        rl=$(ratio "${SIM_RATIO[$p]}" "${SIM_RATIO[lru]:--}")
        printf '%-12s %10s %10s %8s %10s\n' "$p" "${SIM_HITS[$p]}" "${SIM_RATIO[$p]}" "$rl" "${SIM_OBJS[$p]}"
        md_row "$p" "${SIM_HITS[$p]}" "${SIM_RATIO[$p]}" "$rl" "${SIM_OBJS[$p]}" >>"$md"
    done
    if [[ -n ${SIM_RATIO[sieve]:-} && -n ${SIM_RATIO[lru]:-} ]]; then
        VERDICT[sieve]="SIEVE ${SIM_RATIO[sieve]} vs LRU ${SIM_RATIO[lru]} ($(atleast "${SIM_RATIO[sieve]}" "${SIM_RATIO[lru]}") >= LRU)"
    fi
fi

{
    echo
    echo "MB = 2^20 bytes (wrk's Transfer/sec; ab's Kbytes/sec / 1024). compared: the figure the"
    echo "ratios are of. of bound: req/s / ($WRK_CONNECTIONS connections / ${DELAY_MS} ms = $NS_BOUND req/s)."
    echo "CPU: % of one CPU during the wrk run (200% = both CPUs of a 2-CPU machine), medians of"
    echo "the rounds: the server (all its processes and threads), the origin, wrk, and the rest of"
    echo "the machine's busy time (approximate; may come out a little below 0). origin reqs/round:"
    echo "requests the origin received during a round (0 for hits). Herd latency: curl's"
    echo "time_total of each of the $HERD_REQUESTS transfers (connect included), median over the"
    echo "transfers, then median over the rounds. The \"origin\" row sends the herd to the origin"
    echo "directly, once: every request waits its own ${DELAY_MS} ms from when it arrives, so it shows"
    echo "how spread out curl's requests arrive (a cache that coalesces answers the late ones"
    echo "when the first one's response comes, sooner). wrk, ab, curl, the servers and the origin share the"
    echo "machine's CPUs: compare the ratios, not the absolute figures, and only within one run;"
    echo "ratios within about 5-7% of each other mean \"the same\"."
    busy_md "(a server with many threads, such as Varnish, seems to lose less to other load):"
    if ((${#VERDICT[@]})); then
        echo
        echo "Targets (Umbra): hit1k >= 1.5 x nginx and >= 1.5 x Varnish (req/s); hit5m >= 1.0 x the"
        echo "better of the two (MB/s, wrk and ab); herd: 1 origin request, median <= 70 ms; nostore"
        echo ">= 0.95 of the bound; hit ratio: SIEVE >= LRU."
        echo
        each_verdict echo "- cache" hit1k hit5m herd nostore sieve
    fi
    repeats_md
    configs_md
} >>"$md"
echo
each_verdict log "target cache" hit1k hit5m herd nostore sieve
warn_busy
warn_repeats
log "results written to $md"
