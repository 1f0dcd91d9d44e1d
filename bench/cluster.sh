#!/usr/bin/env bash
# Scenario "cluster": the peer ring (issue 18), Umbra alone. Three measurements:
#   - trace: origin requests for one Zipf-like trace (CLUSTER_REQUESTS GETs over
#     CLUSTER_URLS 1 KiB objects, every object at least once) sent round-robin through 3
#     ring nodes, against the same trace through 1 Umbra (target: <= 1.05 x);
#   - latency: p50 of a hit fetched through the key's owner (a miss at the asking node,
#     a hit at the owner) against a local hit at the same node, CLUSTER_LATENCY_OBJECTS
#     objects, one keep-alive client (target: <= 2 x); once as the scheduler places the
#     processes, once with the client and the nodes on one CPU; and the floor under both
#     (bench/hop.c): what a do-nothing relay costs against a do-nothing server for the
#     same client, and one round trip on one CPU against one across CPUs;
#   - throughput: 1 KiB local hits (wrk, alternating rounds) on a ring node against an
#     Umbra without cluster (target: not slower, >= 0.95 x given the noise).
# Each is measured in ROUNDS rounds through lib.sh's round machinery (each_round,
# bench_round): the order alternates between rounds, a round with a wrong answer (status,
# size, a hit that was not one, a fill that did not come from the owner, a request that
# reached the origin during hits) or that reached a limit is refused and repeated, and the
# figures are medians of the rounds, each round's in the results file.
# See bench/README.md.
set -euo pipefail
# shellcheck source=bench/lib.sh
. "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

: "${CLUSTER_URLS:=2000}"
: "${CLUSTER_REQUESTS:=20000}"
: "${CLUSTER_THREADS:=8}"
: "${CLUSTER_LATENCY_OBJECTS:=300}"
SECRET=bench-cluster-secret-0123456789
SMALL=1024
URL_HIT="/hit/1k?size=$SMALL&cc=max-age%3D3600"
TARGET_ORIGIN=1.05
TARGET_LATENCY=2.0
TARGET_HIT=0.95

need wrk curl python3 awk timeout taskset cc
bench_init
bench_uses umbra || die "the cluster scenario measures Umbra alone: SERVERS must name umbra"
ensure_umbra
ensure_origin
start_origin
TRACE=$BENCH_DIR/cluster_trace.py

# node NAME LUA_EXTRA PORT: one Umbra on PORT with the origin's route and an admin listener
# (its metrics: the latency rounds count its fills from peers); sets NODE_PID and ADMIN[NAME].
declare -A ADMIN
node() {
    local name=$1 extra=$2 port=$3 dir=$BENCH_TMP/$1
    mkdir -p "$dir"
    ADMIN[$name]=$(free_port)
    cat >"$dir/config.lua" <<EOC
listen = { "127.0.0.1:$port" }
admin = { listen = "127.0.0.1:${ADMIN[$name]}" }
workers = 2
$( ((EUID == 0)) && echo 'user = "root" -- the bench runs as root; Umbra refuses root unless told' || true)
upstreams = { app = { servers = { "http://127.0.0.1:$ORIGIN_PORT" } } }
routes = { { path = "/", upstream = "app" } }
cache = { memory = "256MB", max_object = "8MB" }
$extra
EOC
    bench_start "$name" "$dir/umbra.log" "$UMBRA_BIN" "$dir/config.lua"
    NODE_PID=$BENCH_LAST_PID
    wait_port "$name" "$NODE_PID" "$port" "$dir/umbra.log"
    wait_port "$name admin" "$NODE_PID" "${ADMIN[$name]}" "$dir/umbra.log"
}

P=("$(free_port)" "$(free_port)" "$(free_port)")
while [[ ${P[0]} == "${P[1]}" || ${P[1]} == "${P[2]}" || ${P[0]} == "${P[2]}" ]]; do
    P=("$(free_port)" "$(free_port)" "$(free_port)")
done
PEERS=$(printf '"127.0.0.1:%s", ' "${P[@]}")
IDS=()
declare -A PID
for i in 0 1 2; do
    node "node$i" "cluster = { self = \"127.0.0.1:${P[$i]}\", peers = { ${PEERS%, } }, secret = \"$SECRET\" }" "${P[$i]}"
    PID[node$i]=$NODE_PID
    IDS+=("http://127.0.0.1:${P[$i]}")
done
SOLO_PORT=$(free_port)
node solo "" "$SOLO_PORT"
PID[solo]=$NODE_PID

PID[origin]=$ORIGIN_PID

# med4 VALUES...: the median with 4 decimals (the latencies are tenths of a millisecond).
med4() { printf '%s\n' "$@" | sort -g | awk '{ v[NR] = $1 } END { if (NR == 0) { print "-"; exit }
    printf "%.4f\n", (NR % 2 ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2) }'; }

# 1. The trace through the ring and through one Umbra, in alternating rounds, each round on
# objects of its own (its prefix): the origin requests of each round are its figure.
declare -A TRACE_PORTS=([ring]="${P[*]}" [solo]=$SOLO_PORT)
declare -A ORIG=()
trace_round() {
    local s=$2 r=$3 o0 o1 out
    alive node0 node1 node2 solo origin
    o0=$(origin_count)
    # shellcheck disable=SC2086 # the ports, one word each
    out=$(timeout 600 python3 "$TRACE" trace "trace-$s-r$r-a$RANDOM" "$CLUSTER_URLS" "$CLUSTER_REQUESTS" \
        "$CLUSTER_THREADS" ${TRACE_PORTS[$s]} 2>&1) || true
    o1=$(origin_count)
    [[ $out == ok* ]] || round_bad "trace: ${out:0:300}"
    printf '[bench] trace %-4s round %d/%d: %d origin requests  %s\n' "$s" "$r" "$ROUNDS" \
        "$((o1 - o0))" "${ROUND_BAD:-answers right}" >&2
    [[ -n $ROUND_BAD ]] && return 0
    ORIG[$s]+="$((o1 - o0)) "
}
TRACE_SRV=(ring solo)
log "measuring: trace ($CLUSTER_REQUESTS GETs) x $ROUNDS rounds x ${TRACE_SRV[*]}"
each_round TRACE_SRV trace_round trace
# shellcheck disable=SC2086
ORIG_RING=$(median ${ORIG[ring]})
# shellcheck disable=SC2086
ORIG_SOLO=$(median ${ORIG[solo]})
fixed 0 ORIG_RING ORIG_SOLO
R_ORIG=$(ratio "$ORIG_RING" "$ORIG_SOLO")
log "trace: origin requests through 3 nodes $ORIG_RING, through 1 node $ORIG_SOLO (medians): x$R_ORIG"

# 2. Latency: objects node1 owns, asked at node0, in rounds alternating between the
# processes as the scheduler places them ("placed") and the client and every thread of the
# three nodes on CPU 0 ("onecpu": each hop a switch on one CPU, not a wake-up of the other,
# which a VM pays in the hypervisor). Each round on objects of its own.
ALL_CPUS=0-$(($(nproc) - 1))
pin() { # pin CPUS: moves every thread of the three nodes
    local i
    for i in 0 1 2; do taskset -a -p -c "$1" "${PID[node$i]}" >/dev/null; done
}
declare -A LAT_OWNER=() LAT_LOCAL=()
lat_round() {
    local k=$2 r=$3 out owner loc wrong pre=()
    alive node0 node1 node2 origin
    if [[ $k == onecpu ]]; then
        pin 0
        pre=(taskset -c 0)
    fi
    out=$(timeout 600 "${pre[@]}" python3 "$TRACE" latency "lat-$k-r$r-a$RANDOM" "$CLUSTER_LATENCY_OBJECTS" \
        "${P[1]}" "${P[0]}" "${ADMIN[node0]}" "$ORIGIN_PORT" "${IDS[@]}" 2>&1) || true
    [[ $k == onecpu ]] && pin "$ALL_CPUS"
    read -r owner loc wrong <<<"$out"
    if [[ ! $owner =~ ^[0-9.]+$ || ! $loc =~ ^[0-9.]+$ ]]; then
        round_bad "latency run failed: ${out:0:300}"
    elif [[ $wrong != none ]]; then
        round_bad "latency: $wrong"
    fi
    printf '[bench] latency %-7s round %d/%d: p50 through the owner %s ms, local hit %s ms  %s\n' \
        "$k" "$r" "$ROUNDS" "$owner" "$loc" "${ROUND_BAD:-answers right}" >&2
    [[ -n $ROUND_BAD ]] && return 0
    LAT_OWNER[$k]+="$owner " LAT_LOCAL[$k]+="$loc "
}
LAT_KINDS=(placed onecpu)
log "measuring: latency ($CLUSTER_LATENCY_OBJECTS objects) x $ROUNDS rounds x ${LAT_KINDS[*]}"
# (each_round passes the "server" as the kind: placed or onecpu.)
each_round LAT_KINDS lat_round latency
# shellcheck disable=SC2086
LAT_OWNER_M=$(med4 ${LAT_OWNER[placed]})
# shellcheck disable=SC2086
LAT_LOCAL_M=$(med4 ${LAT_LOCAL[placed]})
# shellcheck disable=SC2086
LAT1_OWNER=$(med4 ${LAT_OWNER[onecpu]})
# shellcheck disable=SC2086
LAT1_LOCAL=$(med4 ${LAT_LOCAL[onecpu]})
R_LAT=$(ratio "$LAT_OWNER_M" "$LAT_LOCAL_M")
R_LAT1=$(ratio "$LAT1_OWNER" "$LAT1_LOCAL")
log "latency: p50 through the owner $LAT_OWNER_M ms, local hit $LAT_LOCAL_M ms: x$R_LAT"
log "latency on one CPU: p50 through the owner $LAT1_OWNER ms, local hit $LAT1_LOCAL ms: x$R_LAT1"

# 2c. The floor: bench/hop.c's canned server, and its relay (poll, read, write) before it.
HOP=$BENCH_TMP/hop
cc -O2 -Wall -o "$HOP" "$BENCH_DIR/hop.c" >"$BENCH_TMP/cc.log" 2>&1 ||
    die "cannot build bench/hop.c: $(cat "$BENCH_TMP/cc.log")"
HOP_S=$(free_port)
bench_start hop-server "$BENCH_TMP/hop-server.log" "$HOP" server "$HOP_S"
HOP_SPID=$BENCH_LAST_PID
wait_port hop-server "$HOP_SPID" "$HOP_S" "$BENCH_TMP/hop-server.log"
HOP_R=$(free_port)
bench_start hop-relay "$BENCH_TMP/hop-relay.log" "$HOP" relay "$HOP_R" "$HOP_S"
HOP_RPID=$BENCH_LAST_PID
wait_port hop-relay "$HOP_RPID" "$HOP_R" "$BENCH_TMP/hop-relay.log"
taskset -p -c 0 "$HOP_SPID" >/dev/null
taskset -p -c 0 "$HOP_RPID" >/dev/null
N_HOP=$((CLUSTER_LATENCY_OBJECTS * 10))
FLOOR_DIRECT=$(timeout 120 taskset -c 0 python3 "$TRACE" p50 "$HOP_S" "$N_HOP") || die "hop: direct"
FLOOR_RELAY=$(timeout 120 taskset -c 0 python3 "$TRACE" p50 "$HOP_R" "$N_HOP") || die "hop: relay"
R_FLOOR=$(ratio "$FLOOR_RELAY" "$FLOOR_DIRECT")
HOP_SAME=$(timeout 120 taskset -c 0 "$HOP" client "$HOP_S" "$N_HOP") || die "hop: one CPU"
taskset -p -c 1 "$HOP_SPID" >/dev/null
HOP_ACROSS=$(timeout 120 taskset -c 0 "$HOP" client "$HOP_S" "$N_HOP") || die "hop: across CPUs"
stop_pid "$HOP_RPID"
stop_pid "$HOP_SPID"
log "floor on one CPU: do-nothing relay $FLOOR_RELAY ms vs server $FLOOR_DIRECT ms: x$R_FLOOR"
log "one round trip: $HOP_SAME us on one CPU, $HOP_ACROSS us across CPUs"

# 3. Local hits, ring node vs solo, alternating rounds (wrk; every answer checked: status and
# size by wrk_check, no request to the origin).
declare -A PORT=([ring]=${P[0]} [solo]=$SOLO_PORT) NODE_OF=([ring]=node0 [solo]=solo)
declare -A EXPECT=()
for s in ring solo; do
    check_get "$s" "http://127.0.0.1:${PORT[$s]}$URL_HIT" "$SMALL" # the miss
    check_get "$s" "http://127.0.0.1:${PORT[$s]}$URL_HIT" "$SMALL" # a hit from now on
    EXPECT[$s]=$(answer_bytes "$s" "http://127.0.0.1:${PORT[$s]}$URL_HIT")
done
origin_ref "$SMALL" "$BENCH_TMP/ref.hit"
# shellcheck disable=SC2034 # read by name (add_figures, median_of)
declare -A HRPS=() HP50=()
hit_round() {
    local s=$2 r=$3 o0 o1 out=$BENCH_TMP/wrk-$2-$3.txt
    alive "${NODE_OF[$s]}" origin
    o0=$(origin_count)
    run_wrk "http://127.0.0.1:${PORT[$s]}$URL_HIT" "$out"
    o1=$(origin_count)
    read_wrk "$out"
    wrk_check "${EXPECT[$s]}" "$WRK_CONNECTIONS"
    ((o1 == o0)) || round_bad "the origin got $((o1 - o0)) requests during the round (expected 0: every request a hit)"
    answer_check "http://127.0.0.1:${PORT[$s]}$URL_HIT" "$BENCH_TMP/ref.hit"
    printf '[bench] hit %-4s round %d/%d: %10.2f req/s  p50 %s ms  %s\n' "$s" "$r" "$ROUNDS" \
        "$WRK_RPS" "$WRK_P50" "${ROUND_BAD:-answers right}" >&2
    [[ -n $ROUND_BAD ]] && return 0
    add_figures "hit1k,$s" HRPS="$WRK_RPS" HP50="$WRK_P50"
}
HIT_SRV=(ring solo)
check_idle
log "measuring: hit1k x $ROUNDS rounds x ${HIT_SRV[*]} x ${DURATION}s"
each_round HIT_SRV hit_round hit1k
M_RING=$(median_of HRPS hit1k,ring)
M_SOLO=$(median_of HRPS hit1k,solo)
R_HIT=$(ratio "$M_RING" "$M_SOLO")

md=$(results_md cluster)
{
    echo "# cluster: the peer ring (3 nodes, 2 workers each, on one machine)"
    echo
    bench_env_md "-t$WRK_THREADS -c$WRK_CONNECTIONS -d${DURATION}s --latency"
    echo "- origin: $ORIGIN_BIN (test origin); objects of 1 KiB, Cache-Control: max-age=3600"
    echo "- trace: $CLUSTER_REQUESTS GETs, Zipf(1.0) over $CLUSTER_URLS objects plus each once, $CLUSTER_THREADS keep-alive clients, round-robin over the nodes; each round on objects of its own, ring and one node alternating; every answer 200 with 1 KiB"
    echo "- latency: $CLUSTER_LATENCY_OBJECTS objects owned by node1, fetched at node1, then at node0 twice (one Python keep-alive client: its own overhead is in both figures), checked: the first at node0 a miss filled from node1 (node0's umbra_cluster_peer_fetches_total rises by $CLUSTER_LATENCY_OBJECTS, the origin gets no request), the second a hit (Cache-Status); rounds alternate between the processes as the scheduler places them and the client and every thread of the nodes pinned to CPU 0 (taskset), each round on objects of its own"
    echo "- floor (measured once, not in rounds: no Umbra in it): bench/hop.c's canned 1 KiB answer, asked directly and through its relay (poll, read, write, no HTTP work) by the same Python client, both on CPU 0; and its C client's round trip with the server on CPU 0 (same CPU) or CPU 1 (across)"
    echo "- hits: wrk on $URL_HIT at node0 and at an Umbra without cluster, alternating; a round is refused when wrk saw an error, a status of 400 or more or answers of another size, the origin got a request, or a limit was reached (bench/README.md, Method)"
    echo
    md_row measure "ring" "compared" ratio target met
    md_row --- ---: ---: ---: --- ---
    md_row "origin requests for the trace" "$ORIG_RING (3 nodes)" "$ORIG_SOLO (1 node)" "$R_ORIG" "<= $TARGET_ORIGIN" "$(meets_cmp "<=" "$R_ORIG" "$TARGET_ORIGIN" met "not met")"
    md_row "p50 ms, hit through the owner vs local hit" "$LAT_OWNER_M" "$LAT_LOCAL_M" "$R_LAT" "<= $TARGET_LATENCY" "$(meets_cmp "<=" "$R_LAT" "$TARGET_LATENCY" met "not met")"
    md_row "the same, client and nodes on one CPU" "$LAT1_OWNER" "$LAT1_LOCAL" "$R_LAT1" "<= $TARGET_LATENCY" "$(meets_cmp "<=" "$R_LAT1" "$TARGET_LATENCY" met "not met")"
    md_row "floor, one CPU: p50 ms via a do-nothing relay vs a do-nothing server (bench/hop.c, same client)" "$FLOOR_RELAY" "$FLOOR_DIRECT" "$R_FLOOR" - -
    md_row "one round trip, C client, us: across the CPUs vs on one" "$HOP_ACROSS" "$HOP_SAME" "$(ratio "$HOP_ACROSS" "$HOP_SAME")" - -
    md_row "1 KiB local hits req/s, ring node vs no cluster (median of $ROUNDS)" "$M_RING" "$M_SOLO" "$R_HIT" ">= $TARGET_HIT" "$(atleast "$R_HIT" "$TARGET_HIT" met "not met")"
    echo
    echo "Medians of the rounds; each round's figures:"
    echo
    md_row measure "per round" repeated
    md_row --- --- ---
    md_row "trace, origin requests, ring" "${ORIG[ring]% }" "$(repeated_md trace,ring)"
    md_row "trace, origin requests, one node" "${ORIG[solo]% }" "$(repeated_md trace,solo)"
    md_row "latency p50 ms through the owner, as placed" "${LAT_OWNER[placed]% }" "$(repeated_md latency,placed)"
    md_row "latency p50 ms local hit, as placed" "${LAT_LOCAL[placed]% }" "$(repeated_md latency,placed)"
    md_row "latency p50 ms through the owner, one CPU" "${LAT_OWNER[onecpu]% }" "$(repeated_md latency,onecpu)"
    md_row "latency p50 ms local hit, one CPU" "${LAT_LOCAL[onecpu]% }" "$(repeated_md latency,onecpu)"
    md_row "hit1k req/s, ring node" "${HRPS[hit1k,ring]% }" "$(repeated_md hit1k,ring)"
    md_row "hit1k req/s, no cluster" "${HRPS[hit1k,solo]% }" "$(repeated_md hit1k,solo)"
    md_row "hit1k p50 ms, ring node" "${HP50[hit1k,ring]% }" "$(repeated_md hit1k,ring)"
    md_row "hit1k p50 ms, no cluster" "${HP50[hit1k,solo]% }" "$(repeated_md hit1k,solo)"
    repeats_md
} >"$md"
cat "$md" >&2
warn_repeats
log "results written to $md"
