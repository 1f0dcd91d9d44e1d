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

# node NAME LUA_EXTRA PORT: one Umbra on PORT with the origin's route; sets NODE_PID.
node() {
    local name=$1 extra=$2 port=$3 dir=$BENCH_TMP/$1
    mkdir -p "$dir"
    cat >"$dir/config.lua" <<EOC
listen = { "127.0.0.1:$port" }
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

# 1. The trace through the ring, then through one Umbra (other objects: separate prefixes).
o0=$(origin_count)
out=$(timeout 600 python3 "$TRACE" trace ring "$CLUSTER_URLS" "$CLUSTER_REQUESTS" "$CLUSTER_THREADS" "${P[@]}") ||
    die "trace through the ring: $out"
o1=$(origin_count)
out=$(timeout 600 python3 "$TRACE" trace solo "$CLUSTER_URLS" "$CLUSTER_REQUESTS" "$CLUSTER_THREADS" "$SOLO_PORT") ||
    die "trace through one Umbra: $out"
o2=$(origin_count)
ORIG_RING=$((o1 - o0))
ORIG_SOLO=$((o2 - o1))
R_ORIG=$(ratio "$ORIG_RING" "$ORIG_SOLO")
log "trace: origin requests through 3 nodes $ORIG_RING, through 1 node $ORIG_SOLO: x$R_ORIG"

# 2. Latency: objects node1 owns, asked at node0.
read -r LAT_OWNER LAT_LOCAL <<<"$(timeout 600 python3 "$TRACE" latency lat "$CLUSTER_LATENCY_OBJECTS" "${P[1]}" "${P[0]}" "${IDS[@]}")" ||
    die "latency run failed"
R_LAT=$(ratio "$LAT_OWNER" "$LAT_LOCAL")
log "latency: p50 through the owner $LAT_OWNER ms, local hit $LAT_LOCAL ms: x$R_LAT"

# 2b. The same with the client and every thread of the three nodes on CPU 0: each hop a
# switch on one CPU, not a wake-up of the other (which a VM pays in the hypervisor).
ALL_CPUS=0-$(($(nproc) - 1))
pin() { # pin CPUS: moves every thread of the three nodes
    local i
    for i in 0 1 2; do taskset -a -p -c "$1" "${PID[node$i]}" >/dev/null; done
}
pin 0
read -r LAT1_OWNER LAT1_LOCAL <<<"$(timeout 600 taskset -c 0 python3 "$TRACE" latency lat1 "$CLUSTER_LATENCY_OBJECTS" "${P[1]}" "${P[0]}" "${IDS[@]}")" ||
    die "one-CPU latency run failed"
pin "$ALL_CPUS"
R_LAT1=$(ratio "$LAT1_OWNER" "$LAT1_LOCAL")
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

# 3. Local hits, ring node vs solo, alternating rounds.
declare -A PORT=([ring]=${P[0]} [solo]=$SOLO_PORT)
for s in ring solo; do
    check_get "$s" "http://127.0.0.1:${PORT[$s]}$URL_HIT" "$SMALL" # the miss
    check_get "$s" "http://127.0.0.1:${PORT[$s]}$URL_HIT" "$SMALL" # a hit from now on
done
declare -A HRPS=()
for ((r = 1; r <= ROUNDS; r++)); do
    for s in ring solo; do
        o0=$(origin_count)
        run_wrk "http://127.0.0.1:${PORT[$s]}$URL_HIT" "$BENCH_TMP/wrk-$s-$r.txt"
        read_wrk "$BENCH_TMP/wrk-$s-$r.txt"
        o1=$(origin_count)
        ((o1 == o0)) || warn "$s round $r: the origin got $((o1 - o0)) requests (not all hits)"
        [[ $WRK_ERRS == none || $WRK_ERRS == 0 ]] || warn "$s round $r: socket errors: $WRK_ERRS"
        log "hit $s round $r/$ROUNDS: $WRK_RPS req/s p50 $WRK_P50 ms"
        HRPS[$s]+="$WRK_RPS "
    done
done
# shellcheck disable=SC2086
M_RING=$(median ${HRPS[ring]})
# shellcheck disable=SC2086
M_SOLO=$(median ${HRPS[solo]})
R_HIT=$(ratio "$M_RING" "$M_SOLO")

md=$(results_md cluster)
{
    echo "# cluster: the peer ring (3 nodes, 2 workers each, on one machine)"
    echo
    bench_env_md "-t$WRK_THREADS -c$WRK_CONNECTIONS -d${DURATION}s --latency"
    echo "- origin: $ORIGIN_BIN (test origin); objects of 1 KiB, Cache-Control: max-age=3600"
    echo "- trace: $CLUSTER_REQUESTS GETs, Zipf(1.0) over $CLUSTER_URLS objects plus each once, $CLUSTER_THREADS keep-alive clients, round-robin over the nodes"
    echo "- latency: $CLUSTER_LATENCY_OBJECTS objects owned by node1, fetched at node1, then at node0 twice (one Python keep-alive client: its own overhead is in both figures); then other objects with the client and every thread of the nodes pinned to CPU 0 (taskset)"
    echo "- floor: bench/hop.c's canned 1 KiB answer, asked directly and through its relay (poll, read, write, no HTTP work) by the same Python client, both on CPU 0; and its C client's round trip with the server on CPU 0 (same CPU) or CPU 1 (across)"
    echo
    md_row measure "ring" "compared" ratio target met
    md_row --- ---: ---: ---: --- ---
    md_row "origin requests for the trace" "$ORIG_RING (3 nodes)" "$ORIG_SOLO (1 node)" "$R_ORIG" "<= $TARGET_ORIGIN" "$(meets_cmp "<=" "$R_ORIG" "$TARGET_ORIGIN" met "not met")"
    md_row "p50 ms, hit through the owner vs local hit" "$LAT_OWNER" "$LAT_LOCAL" "$R_LAT" "<= $TARGET_LATENCY" "$(meets_cmp "<=" "$R_LAT" "$TARGET_LATENCY" met "not met")"
    md_row "the same, client and nodes on one CPU" "$LAT1_OWNER" "$LAT1_LOCAL" "$R_LAT1" "<= $TARGET_LATENCY" "$(meets_cmp "<=" "$R_LAT1" "$TARGET_LATENCY" met "not met")"
    md_row "floor, one CPU: p50 ms via a do-nothing relay vs a do-nothing server (bench/hop.c, same client)" "$FLOOR_RELAY" "$FLOOR_DIRECT" "$R_FLOOR" - -
    md_row "one round trip, C client, us: across the CPUs vs on one" "$HOP_ACROSS" "$HOP_SAME" "$(ratio "$HOP_ACROSS" "$HOP_SAME")" - -
    md_row "1 KiB local hits req/s, ring node vs no cluster (median of $ROUNDS)" "$M_RING" "$M_SOLO" "$R_HIT" ">= $TARGET_HIT" "$(atleast "$R_HIT" "$TARGET_HIT" met "not met")"
    echo
    echo "req/s per round: ring ${HRPS[ring]}; solo ${HRPS[solo]}"
} >"$md"
cat "$md" >&2
log "results written to $md"
