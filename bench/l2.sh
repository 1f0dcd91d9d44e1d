#!/usr/bin/env bash
# Scenario "l2": the second-level cache on Redis (issue 18), Umbra alone (no anchor keeps
# a shared second level the same way). Two measurements, in one run:
#   latency     p50 of an L2 hit (memory empty for the key, Redis has it: the object is
#               rebuilt from Redis) beside p50 of a memory hit of the same object, one
#               keep-alive connection, sequential requests (bench/l2_latency.py);
#               target: L2 hit p50 <= 3 x memory hit p50.
#   throughput  req/s of a memory hit (wrk, one hot 1 KiB URL) on an Umbra with cache.l2
#               beside one without; target: >= 0.95 (not slower: the hit path never looks
#               at Redis).
# Servers: one redis-server (no persistence) and three Umbras: "writer" and "reader" share
# the Redis, "plain" has no L2. Both measurements go through lib.sh's round machinery: a
# round with a wrong answer (status, size, the kind of hit, a request that reached the
# origin during hits) or that reached a limit is refused and repeated; the throughput
# rounds alternate which node goes first; each round's figures are in the results file.
# See bench/README.md.
set -euo pipefail
# shellcheck source=bench/lib.sh
. "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

SMALL=1024
URL_HIT="/hit/1k?size=$SMALL&cc=max-age%3D3600"
: "${L2_KEYS:=300}"
TARGET_LAT_X=3
TARGET_RPS_X=0.95

need wrk curl python3 awk redis-server redis-cli
bench_init
bench_uses umbra || die "the l2 scenario measures Umbra only: SERVERS must name umbra"
ensure_umbra
ensure_origin
start_origin

REDIS_PORT=$(free_port)
mkdir -p "$BENCH_TMP/redis"
bench_start redis "$BENCH_TMP/redis/redis.log" redis-server --port "$REDIS_PORT" --save "" \
    --appendonly no --bind 127.0.0.1 --dir "$BENCH_TMP/redis"
REDIS_PID=$BENCH_LAST_PID
wait_port redis "$REDIS_PID" "$REDIS_PORT" "$BENCH_TMP/redis/redis.log"

# start_node NAME L2 (true/false): an Umbra of its own dir; sets PORT[NAME], PID[NAME].
declare -A PORT PID
start_node() {
    local name=$1 dir=$BENCH_TMP/umbra-$1 l2=
    [[ $2 == true ]] && l2=", l2 = { redis = \"redis://127.0.0.1:$REDIS_PORT\", timeout = 0.05 }"
    mkdir -p "$dir"
    PORT[$name]=$(free_port)
    cat >"$dir/config.lua" <<EOF
listen = { "127.0.0.1:${PORT[$name]}" }
workers = 2
$( ((EUID == 0)) && echo 'user = "root" -- the bench runs as root; Umbra refuses root unless told' || true)
upstreams = { app = { servers = { "http://127.0.0.1:$ORIGIN_PORT" } } }
routes = { { path = "/", upstream = "app" } }
cache = { memory = "256MB"$l2 }
EOF
    bench_start "umbra-$name" "$dir/umbra.log" "$UMBRA_BIN" "$dir/config.lua"
    PID[$name]=$BENCH_LAST_PID
    wait_port "umbra-$name" "${PID[$name]}" "${PORT[$name]}" "$dir/umbra.log"
}
start_node writer true
start_node reader true
start_node plain false
PID[origin]=$ORIGIN_PID
sleep 0.5 # the workers' Redis connections

# ---- latency: L2 hit vs memory hit ----
declare -A LAT
lat_round() {
    local s=$2 r=$3 out
    alive writer reader origin
    # Keys of this attempt's own (a repeated round must not find the last attempt's in memory).
    out=$(python3 "$BENCH_DIR/l2_latency.py" "${PORT[writer]}" "${PORT[reader]}" "$((r * 100000 + RANDOM))" \
        "$L2_KEYS" "$SMALL") ||
        die "l2_latency.py failed"
    read -r l2p50 memp50 l2p99 memp99 wrong <<<"$out"
    if ((wrong > 0)); then
        round_bad "$wrong answers were not the expected 200 with the expected kind of hit"
        return 0
    fi
    printf '[bench] latency round %d/%d: L2 hit p50 %s ms p99 %s ms; memory hit p50 %s ms p99 %s ms (%d keys)\n' \
        "$r" "$ROUNDS" "$l2p50" "$l2p99" "$memp50" "$memp99" "$L2_KEYS" >&2
    LAT[l2p50]+="$l2p50 " LAT[memp50]+="$memp50 " LAT[l2p99]+="$l2p99 " LAT[memp99]+="$memp99 "
}
# shellcheck disable=SC2034 # read by each_round, by name
LATS=(latency)
log "measuring: latency x $ROUNDS rounds x $L2_KEYS keys"
each_round LATS lat_round latency

# ---- throughput: memory hits with and without cache.l2 ----
MSRV=(umbra-l2 umbra-plain)
declare -A NODE=([umbra-l2]=reader [umbra-plain]=plain)
for s in "${MSRV[@]}"; do
    for i in 1 2; do
        curl -s -o /dev/null --max-time 10 "http://127.0.0.1:${PORT[${NODE[$s]}]}$URL_HIT" ||
            die "$s: GET $URL_HIT failed"
    done
    curl -s -D - -o /dev/null "http://127.0.0.1:${PORT[${NODE[$s]}]}$URL_HIT" |
        grep -qiE '^Cache-Status:.*;[[:space:]]*hit' || die "$s: $URL_HIT is not a hit"
    check_get "$s" "http://127.0.0.1:${PORT[${NODE[$s]}]}$URL_HIT" "$SMALL"
done
# What each answer must be: wrk's bytes per response (head and body, wrk_check) and, after
# each round, one GET with exactly the origin's bytes (answer_check).
declare -A EXPECT=()
for s in "${MSRV[@]}"; do
    EXPECT[$s]=$(answer_bytes "$s" "http://127.0.0.1:${PORT[${NODE[$s]}]}$URL_HIT")
done
origin_ref "$SMALL" "$BENCH_TMP/ref.hit"
# shellcheck disable=SC2034
declare -A RPS P50 P99
measure() {
    local s=$2 r=$3 out o0 o1 n=${NODE[$2]}
    alive "$n" origin
    out=$BENCH_TMP/wrk-$s-$r.txt
    o0=$(origin_count)
    run_wrk "http://127.0.0.1:${PORT[$n]}$URL_HIT" "$out"
    o1=$(origin_count)
    read_wrk "$out"
    wrk_check "${EXPECT[$s]}" "$WRK_CONNECTIONS"
    ((o1 == o0)) || round_bad "the origin got $((o1 - o0)) requests during the round (expected 0)"
    answer_check "http://127.0.0.1:${PORT[$n]}$URL_HIT" "$BENCH_TMP/ref.hit"
    printf '[bench] hit1k %-11s round %d/%d: %10.2f req/s  p50 %s ms p99 %s ms  %s\n' \
        "$s" "$r" "$ROUNDS" "$WRK_RPS" "$WRK_P50" "$WRK_P99" "${ROUND_BAD:-answers right}" >&2
    [[ -n $ROUND_BAD ]] && return 0
    add_figures "hit1k,$s" RPS="$WRK_RPS" P50="$WRK_P50" P99="$WRK_P99"
}
check_idle
log "measuring: hit1k x $ROUNDS rounds x ${#MSRV[@]} (${MSRV[*]}) x ${DURATION}s"
each_round MSRV measure hit1k

# ---- results ----
med() { tr ' ' '\n' <<<"$1" | grep -v '^$' | sort -g | awk '{a[NR]=$1} END {print NR ? (NR % 2 ? a[(NR+1)/2] : (a[NR/2]+a[NR/2+1])/2) : "-"}'; }
l2p50=$(med "${LAT[l2p50]}") memp50=$(med "${LAT[memp50]}")
l2p99=$(med "${LAT[l2p99]}") memp99=$(med "${LAT[memp99]}")
latx=$(awk -v a="$l2p50" -v b="$memp50" 'BEGIN { printf "%.2f", (b > 0 ? a / b : 0) }')
latmet=$(atmost "$latx" "$TARGET_LAT_X" met "not met")
declare -A MR=()
median_map MR RPS "hit1k," "${MSRV[@]}"
rpsx=$(ratio "${MR[umbra-l2]}" "${MR[umbra-plain]}")
rpsmet=$(atleast "$rpsx" "$TARGET_RPS_X" met "not met")

md=$(results_md l2)
{
    echo "# l2: the second-level cache on Redis"
    echo
    bench_env_md
    echo "- redis: $(redis-server --version | awk '{print $3}') on 127.0.0.1, no persistence"
    echo "- latency: $L2_KEYS keys of $SMALL bytes per round through the writer node, then each"
    echo "  asked twice of the reader node on one keep-alive connection (python http.client):"
    echo "  first an L2 hit, then a memory hit"
    echo "- throughput: wrk on $URL_HIT, a memory hit, on the reader node (cache.l2 set) and on"
    echo "  a node without cache.l2; each Umbra 2 workers"
    echo
    md_row case "p50 / req/s" compared ratio target met
    md_row --- ---: --- ---: --- ---
    md_row "l2 hit latency" "$l2p50 ms (p99 $l2p99)" "memory hit $memp50 ms (p99 $memp99)" "$latx" "<= $TARGET_LAT_X" "$latmet"
    md_row "hit1k with l2" "${MR[umbra-l2]}" "without l2 ${MR[umbra-plain]}" "$rpsx" ">= $TARGET_RPS_X" "$rpsmet"
    echo
    echo "Medians of the rounds; each round's figures (the throughput rounds alternate which node"
    echo "goes first):"
    echo
    md_row measure "per round" repeated
    md_row --- --- ---
    md_row "L2 hit p50 ms" "${LAT[l2p50]% }" "$(repeated_md latency,latency)"
    md_row "memory hit p50 ms" "${LAT[memp50]% }" "$(repeated_md latency,latency)"
    md_row "L2 hit p99 ms" "${LAT[l2p99]% }" "$(repeated_md latency,latency)"
    md_row "memory hit p99 ms" "${LAT[memp99]% }" "$(repeated_md latency,latency)"
    md_row "hit1k req/s with l2" "${RPS[hit1k,umbra-l2]% }" "$(repeated_md hit1k,umbra-l2)"
    md_row "hit1k req/s without l2" "${RPS[hit1k,umbra-plain]% }" "$(repeated_md hit1k,umbra-plain)"
    md_row "hit1k p50 ms with l2" "${P50[hit1k,umbra-l2]% }" "$(repeated_md hit1k,umbra-l2)"
    md_row "hit1k p50 ms without l2" "${P50[hit1k,umbra-plain]% }" "$(repeated_md hit1k,umbra-plain)"
    echo
    for n in writer reader plain; do
        echo "Umbra $n, \`config.lua\`:"
        echo
        echo '```lua'
        cat "$BENCH_TMP/umbra-$n/config.lua"
        echo '```'
        echo
    done
    repeats_md
} >"$md"
printf '\n%-16s %-26s %-36s %6s %-7s %s\n' case "p50 / req/s" compared ratio target met
printf '%-16s %-26s %-36s %6s %-7s %s\n' "l2 hit latency" "$l2p50 ms (p99 $l2p99)" "memory hit $memp50 ms (p99 $memp99)" "$latx" "<= $TARGET_LAT_X" "$latmet"
printf '%-16s %-26s %-36s %6s %-7s %s\n' "hit1k with l2" "${MR[umbra-l2]}" "without l2 ${MR[umbra-plain]}" "$rpsx" ">= $TARGET_RPS_X" "$rpsmet"
warn_repeats
log "results written to $md"
