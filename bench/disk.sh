#!/usr/bin/env bash
# Scenario "disk": the disk tier (issue 28) beside nginx's proxy_cache, whose cache is a
# folder of files on the same filesystem, and Apache Traffic Server (ats), whose disk cache
# is one store file there, as large as Umbra's, below a RAM cache of Umbra's cache.memory.
# Random hits over a working set DISK_SET_X times Umbra's memory cap (cache.memory =
# DISK_MEMORY), warm on disk (every object fetched twice before the rounds, so the page
# cache holds the stores and nginx's files alike):
#   hit16k   wrk, each request a random one of DISK_OBJECTS objects of 16 KiB; req/s;
#            target >= 1.3 x nginx (Umbra/ATS shown, no target).
#   hit1m    the same over 1 MiB objects; MB/s; target >= 1.0 x nginx.
#   memhit   one hot 1 KiB object in memory: the Umbra with the disk beside an Umbra
#            without one (umbra-nodisk), both given the working set first (their memories
#            as full); target >= 0.97 (a disk costs memory hits nothing).
#   miss     every request a new 16 KiB object (the origin asked each time): the Umbra with
#            the disk (writing behind) beside umbra-nodisk; target >= 0.95. With nginx in
#            the run, its misses with proxy_cache beside the same nginx without (anchor).
# Umbra: 2 workers, cache.memory DISK_MEMORY, cache.disk on BENCH_TMP; nginx: 2 workers,
# proxy_cache_path on BENCH_TMP (levels 1:2, keys_zone 64m), proxy_cache_valid 200 1h;
# ATS: lib.sh's start_ats (2 event threads, storage.config a file on BENCH_TMP). A
# round whose answers are wrong (status, size) or during which the origin was asked is
# refused and repeated (lib.sh's round machinery); rounds alternate which server goes
# first. See bench/README.md.
set -euo pipefail
# Every server of this scenario by default, unless SERVERS says otherwise.
: "${SERVERS:=nginx ats umbra}"
BENCH_KNOWN_SERVERS="nginx ats umbra"
# shellcheck source=bench/lib.sh
. "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

SIZE=16384
: "${DISK_MEMORY_MB:=32}"
: "${DISK_SET_X:=8}"
DISK_OBJECTS=$((DISK_MEMORY_MB * DISK_SET_X * 1024 * 1024 / SIZE))
# The disk store of Umbra and of ATS: 3 x the working set of hit16k (hit1m's as large
# again comes on top of it), room to spare for both.
DISK_STORE_MB=$((DISK_MEMORY_MB * DISK_SET_X * 3))
QUERY="size=$SIZE&cc=max-age%3D3600"
TARGET_X=1.3

need wrk curl python3 awk
bench_init
bench_uses umbra || die "the disk scenario measures Umbra: SERVERS must name umbra"
ensure_umbra
ensure_origin
start_origin

declare -A PORT PID
PID[origin]=$ORIGIN_PID
MSRV=()
if bench_uses nginx; then
    mkdir -p "$BENCH_TMP/nginx-cache"
    start_nginx_with "" "
        proxy_cache_path $BENCH_TMP/nginx-cache levels=1:2 keys_zone=disk:64m max_size=4g
                         inactive=1d use_temp_path=off;
        upstream origin { server 127.0.0.1:$ORIGIN_PORT; keepalive 64; }" "
        location / {
            proxy_pass http://origin;
            proxy_http_version 1.1;
            proxy_set_header Connection \"\";
            proxy_cache disk;
            proxy_cache_valid 200 1h;
            proxy_cache_lock on;
        }
        location /nc/ {
            proxy_pass http://origin;
            proxy_http_version 1.1;
            proxy_set_header Connection \"\";
        }"
    PORT[nginx]=$NGINX_PORT
    PID[nginx]=$NGINX_PID
    MSRV+=(nginx)
    # The miss rounds' anchor: nginx's misses with its cache (written to its files) beside
    # the same nginx proxying without one (location /nc/): what writing costs nginx.
    PORT[nginx-nocache]=$NGINX_PORT
    PID[nginx-nocache]=$NGINX_PID
fi
if bench_uses ats; then
    start_ats "$ORIGIN_PORT" "$DISK_STORE_MB" "$DISK_MEMORY_MB"
    PORT[ats]=$ATS_PORT
    PID[ats]=$ATS_PID
    MSRV+=(ats)
fi
mkdir -p "$BENCH_TMP/umbra-disk"
ADMIN_PORT=$(free_port)
start_umbra_with "upstreams = { app = { servers = { \"http://127.0.0.1:$ORIGIN_PORT\" } } }
routes = { { path = \"/\", upstream = \"app\" } }
admin = { listen = \"127.0.0.1:$ADMIN_PORT\" }
cache = { memory = \"${DISK_MEMORY_MB}MB\", max_object = \"1MB\",
          disk = { path = \"$BENCH_TMP/umbra-disk\", size = \"${DISK_STORE_MB}MB\" } }"
PORT[umbra]=$UMBRA_PORT
PID[umbra]=$UMBRA_PID
MSRV+=(umbra)
# The same Umbra without the disk, for memhit and miss.
ND=$BENCH_TMP/umbra-nodisk
mkdir -p "$ND"
PORT[umbra-nodisk]=$(free_port)
{
    echo "listen = { \"127.0.0.1:${PORT[umbra-nodisk]}\" }"
    echo "workers = 2"
    ((EUID == 0)) && echo 'user = "root" -- the bench runs as root; Umbra refuses root unless told'
    echo "upstreams = { app = { servers = { \"http://127.0.0.1:$ORIGIN_PORT\" } } }"
    echo "routes = { { path = \"/\", upstream = \"app\" } }"
    echo "cache = { memory = \"${DISK_MEMORY_MB}MB\", max_object = \"1MB\" }"
} >"$ND/config.lua"
bench_start umbra-nodisk "$ND/umbra.log" "$UMBRA_BIN" "$ND/config.lua"
PID[umbra-nodisk]=$BENCH_LAST_PID
wait_port umbra-nodisk "${PID[umbra-nodisk]}" "${PORT[umbra-nodisk]}" "$ND/umbra.log"

# warm PORT: every object fetched once on one keep-alive connection; prints the count of
# answers that were not 200 with SIZE bytes.
warm() {
    python3 - "$1" "${2:-$DISK_OBJECTS}" "${3:-$QUERY}" "${4:-$SIZE}" "${5:-/o/}" <<'EOF'
import http.client, sys
port, n, query, size = int(sys.argv[1]), int(sys.argv[2]), sys.argv[3], int(sys.argv[4])
prefix = sys.argv[5]
c = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
bad = 0
for i in range(n):
    c.request("GET", "%s%d?%s" % (prefix, i, query))
    r = c.getresponse()
    if r.status != 200 or len(r.read()) != size:
        bad += 1
print(bad)
EOF
}
for s in "${MSRV[@]}"; do
    log "warming $s: $DISK_OBJECTS objects of $SIZE bytes"
    bad=$(warm "${PORT[$s]}")
    ((bad == 0)) || die "$s: $bad of $DISK_OBJECTS warming answers were not 200 with $SIZE bytes"
done
# disk_holds WANT ARGS...: waits until Umbra's disk holds WANT objects. Umbra writes
# behind, and its bounded write queue drops writes while the kernel throttles the writer
# (dirty pages): a fill whose write was dropped is fetched again (warm ARGS..., a disk
# hit for the rest), up to 3 times.
disk_holds() {
    local want=$1 pass n
    shift
    for pass in 1 2 3 4; do
        for _ in $(seq 1 300); do
            n=$(curl -s --max-time 5 "http://127.0.0.1:$ADMIN_PORT/metrics" | awk '/^umbra_disk_objects / { print $2 }')
            ((${n:-0} >= want)) && return 0
            sleep 0.1
        done
        ((pass < 4)) || break
        log "umbra: the disk holds ${n:-0} of $want objects (writes dropped while the kernel throttled the writer): warming again"
        bad=$(warm "${PORT[umbra]}" "$@")
        ((bad == 0)) || die "umbra: $bad answers of a warm-up again were wrong"
    done
    die "umbra: the disk holds ${n:-0} of $want objects after the warm-up"
}
disk_holds "$DISK_OBJECTS"
# Warm again: the second pass reads what the first wrote (the page cache holds it).
for s in "${MSRV[@]}"; do
    bad=$(warm "${PORT[$s]}")
    ((bad == 0)) || die "$s: $bad of $DISK_OBJECTS answers of the second warm-up were wrong"
done

SCRIPT=$BENCH_TMP/random.lua
# Each wrk thread runs the script in a Lua state of its own: seeded alike (os.time() is the
# same second for both), the threads asked the same sequence, every object twice in quick
# succession, so half the requests found what the other thread had just brought into
# memory. Seeded apart, the requests are uniform over the working set.
SEED='local threads = 0
function setup(thread)
    threads = threads + 1
    thread:set("thread_no", threads)
end
function init(args)
    math.randomseed(os.time() * 1000 + thread_no * 7919)
end'
cat >"$SCRIPT" <<EOF
-- A random object of the working set per request.
$SEED
request = function()
    return wrk.format("GET", "/o/" .. math.random(0, $((DISK_OBJECTS - 1))) .. "?$QUERY")
end
EOF
declare -A EXPECT=()
for s in "${MSRV[@]}"; do
    EXPECT[$s]=$(answer_bytes "$s" "http://127.0.0.1:${PORT[$s]}/o/0?$QUERY")
done
origin_ref "$SIZE" "$BENCH_TMP/ref.body"
# shellcheck disable=SC2034
declare -A RPS P50 P99 CPU_U US CPU_O CPU_W CPU_X
measure() {
    local s=$2 r=$3 out o0 o1
    alive "$s" origin
    out=$BENCH_TMP/wrk-$s-$r.txt
    o0=$(origin_count)
    run_wrk "http://127.0.0.1:${PORT[$s]}/" "$out" "$WRK_CONNECTIONS" "$SCRIPT"
    o1=$(origin_count)
    read_wrk "$out"
    wrk_check "${EXPECT[$s]}" "$WRK_CONNECTIONS"
    ((o1 == o0)) || round_bad "the origin got $((o1 - o0)) requests during the round (expected 0)"
    answer_check "http://127.0.0.1:${PORT[$s]}/o/$((r * 7 % DISK_OBJECTS))?$QUERY" "$BENCH_TMP/ref.body"
    printf '[bench] hit16k %-6s round %d/%d: %10.2f req/s  p50 %s ms p99 %s ms  %s\n' \
        "$s" "$r" "$ROUNDS" "$WRK_RPS" "$WRK_P50" "$WRK_P99" "${ROUND_BAD:-answers right}" >&2
    [[ -n $ROUND_BAD ]] && return 0
    add_figures "hit16k,$s" RPS="$WRK_RPS" P50="$WRK_P50" P99="$WRK_P99"
}
check_idle
log "measuring: hit16k x $ROUNDS rounds x ${#MSRV[@]} (${MSRV[*]}) x ${DURATION}s"
each_round MSRV measure hit16k

# ---- hit1m: random hits over DISK_SET_X x the memory cap of 1 MiB objects (MB/s) ----
S1M=1048576
N1M=$((DISK_MEMORY_MB * DISK_SET_X))
Q1M="size=$S1M&cc=max-age%3D3600"
for s in "${MSRV[@]}"; do
    log "warming $s: $N1M objects of $S1M bytes"
    bad=$(warm "${PORT[$s]}" "$N1M" "$Q1M" "$S1M" /b/)
    ((bad == 0)) || die "$s: $bad of $N1M warming answers were not 200 with $S1M bytes"
done
disk_holds "$((DISK_OBJECTS + N1M))" "$N1M" "$Q1M" "$S1M" /b/
for s in "${MSRV[@]}"; do
    bad=$(warm "${PORT[$s]}" "$N1M" "$Q1M" "$S1M" /b/)
    ((bad == 0)) || die "$s: $bad of $N1M answers of the second 1 MiB warm-up were wrong"
done
S1M_SCRIPT=$BENCH_TMP/random1m.lua
cat >"$S1M_SCRIPT" <<EOF
-- A random 1 MiB object of the working set per request.
$SEED
request = function()
    return wrk.format("GET", "/b/" .. math.random(0, $((N1M - 1))) .. "?$Q1M")
end
EOF
for s in "${MSRV[@]}"; do
    EXPECT[1m,$s]=$(answer_bytes "$s" "http://127.0.0.1:${PORT[$s]}/b/0?$Q1M")
done
origin_ref "$S1M" "$BENCH_TMP/ref1m.body"
# shellcheck disable=SC2034
declare -A MBPS
# measure1m: MB/s = req/s x 1 MiB (each answer one object).
measure1m() {
    local s=$2 r=$3 out o0 o1
    alive "$s" origin
    out=$BENCH_TMP/wrk1m-$s-$r.txt
    o0=$(origin_count)
    run_wrk "http://127.0.0.1:${PORT[$s]}/" "$out" "$WRK_CONNECTIONS" "$S1M_SCRIPT"
    o1=$(origin_count)
    read_wrk "$out"
    wrk_check "${EXPECT[1m,$s]}" "$WRK_CONNECTIONS"
    ((o1 == o0)) || round_bad "the origin got $((o1 - o0)) requests during the round (expected 0)"
    answer_check "http://127.0.0.1:${PORT[$s]}/b/$((r * 7 % N1M))?$Q1M" "$BENCH_TMP/ref1m.body"
    printf '[bench] hit1m  %-6s round %d/%d: %10.2f MB/s  p50 %s ms p99 %s ms  %s\n' \
        "$s" "$r" "$ROUNDS" "$WRK_RPS" "$WRK_P50" "$WRK_P99" "${ROUND_BAD:-answers right}" >&2
    [[ -n $ROUND_BAD ]] && return 0
    add_figures "hit1m,$s" MBPS="$WRK_RPS"
}
log "measuring: hit1m x $ROUNDS rounds x ${#MSRV[@]} (${MSRV[*]}) x ${DURATION}s"
each_round MSRV measure1m hit1m

# ---- memhit and miss: the Umbra with the disk beside the one without ----
USRV=(umbra umbra-nodisk)
# miss: nginx with its cache beside nginx without, when nginx is in the run.
MISS_SRV=(umbra umbra-nodisk)
bench_uses nginx && MISS_SRV+=(nginx nginx-nocache)
declare -A PFX=([nginx-nocache]=/nc)
# The one without the disk is given the same working set, so that both memories are as
# full (its copy of the set lives in memory only, evicted as it comes).
log "warming umbra-nodisk: $DISK_OBJECTS objects of $SIZE bytes"
bad=$(warm "${PORT[umbra-nodisk]}")
((bad == 0)) || die "umbra-nodisk: $bad of $DISK_OBJECTS warming answers were wrong"
HOT="/hot/1k?size=1024&cc=max-age%3D3600"
for s in "${USRV[@]}"; do
    for _ in 1 2; do
        curl -s -o /dev/null --max-time 10 "http://127.0.0.1:${PORT[$s]}$HOT" || die "$s: GET $HOT failed"
    done
    EXPECT[memhit,$s]=$(answer_bytes "$s" "http://127.0.0.1:${PORT[$s]}$HOT")
done
for s in "${MISS_SRV[@]}"; do
    EXPECT[miss,$s]=$(answer_bytes "$s" "http://127.0.0.1:${PORT[$s]}${PFX[$s]:-}/m/probe-$s?$QUERY")
done
origin_ref 1024 "$BENCH_TMP/ref.hot"
# miss_script FILE SERVER ROUND: a wrk script asking a path never asked before per request
# (under the server's prefix PFX).
miss_script() {
    {
        echo 'local n = 0'
        echo 'local id = tostring({}):sub(-8)'
        echo 'request = function()'
        echo '    n = n + 1'
        echo "    return wrk.format(\"GET\", \"${PFX[$2]:-}/m/$2-$3-$RANDOM-\" .. id .. \"-\" .. n .. \"?$QUERY\")"
        echo 'end'
    } >"$1"
}
measure_u() {
    local k=$1 s=$2 r=$3 out o0 o1 script
    alive "$s" origin
    out=$BENCH_TMP/wrk-$k-$s-$r.txt
    o0=$(origin_count)
    round_cpu_start "${PID[$s]}" "${PID[origin]}"
    if [[ $k == miss ]]; then
        script=$BENCH_TMP/miss-$s-$r.lua
        miss_script "$script" "$s" "$r"
        run_wrk "http://127.0.0.1:${PORT[$s]}/" "$out" "$WRK_CONNECTIONS" "$script"
    else
        run_wrk "http://127.0.0.1:${PORT[$s]}$HOT" "$out"
    fi
    round_cpu_end "$WRK_CPU" "${PID[$s]}" "${PID[origin]}"
    o1=$(origin_count)
    read_wrk "$out"
    wrk_check "${EXPECT[$k,$s]}" "$WRK_CONNECTIONS"
    if [[ $k == memhit ]]; then
        ((o1 == o0)) || round_bad "the origin got $((o1 - o0)) requests during the round (expected 0)"
        answer_check "http://127.0.0.1:${PORT[$s]}$HOT" "$BENCH_TMP/ref.hot"
    else
        ((o1 - o0 >= WRK_REQS)) || round_bad "the origin got $((o1 - o0)) requests for $WRK_REQS misses"
    fi
    local us
    us=$(us_each "${ROUND_TICKS[0]}" "$(awk -v r="$WRK_RPS" -v t="$ROUND_SECS" 'BEGIN { printf "%d", r * t }')" 2)
    printf '[bench] %-6s %-12s round %d/%d: %10.2f req/s  p50 %s ms p99 %s ms  CPU server %s%% (%s us/req) origin %s%% wrk %s%% other %s%%  %s\n' \
        "$k" "$s" "$r" "$ROUNDS" "$WRK_RPS" "$WRK_P50" "$WRK_P99" "${ROUND_PCT[0]}" "$us" "${ROUND_PCT[1]}" \
        "$ROUND_CLIENT_PCT" "$ROUND_OTHER_PCT" "${ROUND_BAD:-answers right}" >&2
    [[ -n $ROUND_BAD ]] && return 0
    add_figures "$k,$s" RPS="$WRK_RPS" P50="$WRK_P50" P99="$WRK_P99" CPU_U="${ROUND_PCT[0]}" US="$us" \
        CPU_O="${ROUND_PCT[1]}" CPU_W="$ROUND_CLIENT_PCT" CPU_X="$ROUND_OTHER_PCT"
}
log "measuring: memhit x $ROUNDS rounds x ${#USRV[@]} (${USRV[*]}) x ${DURATION}s"
each_round USRV measure_u memhit
log "measuring: miss x $ROUNDS rounds x ${#MISS_SRV[@]} (${MISS_SRV[*]}) x ${DURATION}s"
each_round MISS_SRV measure_u miss
declare -A MH=() MM=()
median_map MH RPS "memhit," "${USRV[@]}"
median_map MM RPS "miss," "${MISS_SRV[@]}"
xh=$(ratio "${MH[umbra]}" "${MH[umbra-nodisk]}")
xm=$(ratio "${MM[umbra]}" "${MM[umbra-nodisk]}")
meth=$(atleast "$xh" 0.97 met "not met")
metm=$(atleast "$xm" 0.95 met "not met")
metrics=$(curl -s --max-time 5 "http://127.0.0.1:$ADMIN_PORT/metrics" | grep '^umbra_disk_' || true)

declare -A MR=() M1=()
median_map MR RPS "hit16k," "${MSRV[@]}"
median_map M1 MBPS "hit1m," "${MSRV[@]}"
x1=-
met1=-
if bench_uses nginx; then
    x1=$(ratio "${M1[umbra]}" "${M1[nginx]}")
    met1=$(atleast "$x1" 1.0 met "not met")
fi
x=-
met=-
if bench_uses nginx; then
    x=$(ratio "${MR[umbra]}" "${MR[nginx]}")
    met=$(atleast "$x" "$TARGET_X" met "not met")
fi
# Umbra/ATS, shown beside Umbra/nginx (the targets are nginx's).
xa=-
xa1=-
if bench_uses ats; then
    xa=$(ratio "${MR[umbra]}" "${MR[ats]}")
    xa1=$(ratio "${M1[umbra]}" "${M1[ats]}")
fi

md=$(results_md disk)
{
    echo "# disk: the disk tier beside nginx's proxy_cache and Traffic Server"
    echo
    bench_env_md
    if bench_uses ats; then echo "- ats: $(traffic_server -V 2>&1 | grep -m1 '^Traffic Server' | awk '{ print $1, $2, $3 }') (Debian's trafficserver)"; fi
    echo "- working set: $DISK_OBJECTS objects of $SIZE bytes ($((DISK_MEMORY_MB * DISK_SET_X)) MB), $DISK_SET_X x Umbra's cache.memory (${DISK_MEMORY_MB}MB); every object fetched twice before the rounds (warm on disk, page cache warm)"
    echo "- hit1m: $N1M objects of $S1M bytes ($N1M MB, paths /b/N), $DISK_SET_X x cache.memory (${DISK_MEMORY_MB}MB), fetched twice before its rounds; MB/s = req/s x 1 MiB"
    echo "- filesystem of the caches: $(df -T "$BENCH_TMP" | awk 'NR == 2 { print $2 }') ($BENCH_TMP)"
    echo "- each request a random object (wrk script); the origin asked during no round"
    echo
    md_row case server median unit "Umbra/nginx" "Umbra/ATS" target met "per round" repeated
    md_row --- --- ---: --- ---: ---: --- --- --- ---
    for s in "${MSRV[@]}"; do
        if [[ $s == umbra ]]; then
            md_row hit16k "$s" "${MR[$s]}" req/s "$x" "$xa" ">= $TARGET_X" "$met" "${RPS[hit16k,$s]% }" "$(repeated_md "hit16k,$s")"
        else
            md_row hit16k "$s" "${MR[$s]}" req/s - - - - "${RPS[hit16k,$s]% }" "$(repeated_md "hit16k,$s")"
        fi
    done
    for s in "${MSRV[@]}"; do
        if [[ $s == umbra ]]; then
            md_row hit1m "$s" "${M1[$s]}" MB/s "$x1" "$xa1" ">= 1.0" "$met1" "${MBPS[hit1m,$s]% }" "$(repeated_md "hit1m,$s")"
        else
            md_row hit1m "$s" "${M1[$s]}" MB/s - - - - "${MBPS[hit1m,$s]% }" "$(repeated_md "hit1m,$s")"
        fi
    done
    echo
    md_row case server median unit "with disk / without" target met "per round" repeated
    md_row --- --- ---: --- ---: --- --- --- ---
    md_row memhit umbra "${MH[umbra]}" req/s "$xh" ">= 0.97" "$meth" "${RPS[memhit,umbra]% }" "$(repeated_md memhit,umbra)"
    md_row memhit umbra-nodisk "${MH[umbra-nodisk]}" req/s - - - "${RPS[memhit,umbra-nodisk]% }" "$(repeated_md memhit,umbra-nodisk)"
    md_row miss umbra "${MM[umbra]}" req/s "$xm" ">= 0.95" "$metm" "${RPS[miss,umbra]% }" "$(repeated_md miss,umbra)"
    md_row miss umbra-nodisk "${MM[umbra-nodisk]}" req/s - - - "${RPS[miss,umbra-nodisk]% }" "$(repeated_md miss,umbra-nodisk)"
    if bench_uses nginx; then
        md_row miss nginx "${MM[nginx]}" req/s "$(ratio "${MM[nginx]}" "${MM[nginx-nocache]}")" "- (anchor)" - "${RPS[miss,nginx]% }" "$(repeated_md miss,nginx)"
        md_row miss nginx-nocache "${MM[nginx-nocache]}" req/s - - - "${RPS[miss,nginx-nocache]% }" "$(repeated_md miss,nginx-nocache)"
    fi
    echo
    echo "miss, nginx: the same nginx's misses with proxy_cache (each written to its cache files)"
    echo "beside its location /nc/ without a cache: what writing the fills costs the anchor."
    echo
    echo "Where the CPU went in those rounds (medians; % of one CPU, 200 % = both): the server (all its"
    echo "threads: Umbra's disk writer included; nginx's workers and cache manager), its CPU per request, the origin, wrk, and the rest of"
    echo "the machine's busy time (the kernel's writeback threads among it):"
    echo
    md_row case server "server %" "server us/req" "origin %" "wrk %" "other %"
    md_row --- --- ---: ---: ---: ---: ---:
    for k in memhit miss; do
        srvs=("${USRV[@]}")
        [[ $k == miss ]] && srvs=("${MISS_SRV[@]}")
        for s in "${srvs[@]}"; do
            md_row "$k" "$s" "$(median_of CPU_U "$k,$s")" "$(median_of US "$k,$s")" "$(median_of CPU_O "$k,$s")" \
                "$(median_of CPU_W "$k,$s")" "$(median_of CPU_X "$k,$s")"
        done
    done
    echo
    echo "Umbra's disk metrics after the rounds:"
    echo
    echo '```'
    echo "$metrics"
    echo '```'
    echo
    echo "Umbra's \`config.lua\`:"
    echo
    echo '```lua'
    cat "$BENCH_TMP/umbra/config.lua"
    echo '```'
    if [[ -f $BENCH_TMP/ats/etc/records.config ]]; then
        echo
        echo "Traffic Server's records.config (the rest at its defaults), storage.config and remap.config:"
        echo
        echo '```'
        cat "$BENCH_TMP/ats/etc/records.config" "$BENCH_TMP/ats/etc/storage.config" "$BENCH_TMP/ats/etc/remap.config"
        echo '```'
    fi
    echo
    repeats_md
} >"$md"
printf '\n%-8s %-6s %12s %8s %8s %-7s %s\n' case server req/s /nginx /ats target met
for s in "${MSRV[@]}"; do
    printf '%-8s %-6s %12s %8s %8s %-7s %s\n' hit16k "$s" "${MR[$s]}" "$([[ $s == umbra ]] && echo "$x" || echo -)" "$([[ $s == umbra ]] && echo "$xa" || echo -)" ">= $TARGET_X" "$([[ $s == umbra ]] && echo "$met" || echo -)"
done
for s in "${MSRV[@]}"; do
    printf '%-8s %-6s %12s %8s %8s %-7s %s\n' hit1m "$s" "${M1[$s]}MB/s" "$([[ $s == umbra ]] && echo "$x1" || echo -)" "$([[ $s == umbra ]] && echo "$xa1" || echo -)" ">= 1.0" "$([[ $s == umbra ]] && echo "$met1" || echo -)"
done
printf '%-8s %-12s %12s %8s %-7s %s\n' memhit umbra "${MH[umbra]}" "$xh" ">= 0.97" "$meth"
printf '%-8s %-12s %12s %8s %-7s %s\n' miss umbra "${MM[umbra]}" "$xm" ">= 0.95" "$metm"
warn_repeats
log "results written to $md"
