#!/usr/bin/env bash
# Scenario "disk_restart": the disk tier's restart (issue 28): with RESTART_OBJECTS objects
# (default 1,000,000) of RESTART_BODY bytes on disk, the time from the exec of Umbra to
# the first 200 answered from disk (Cache-Status detail=disk) for a stored object, after a
# clean stop (SIGTERM: the index snapshot is written at exit; target <= 2 s) and after
# kill -9 (the index from the last periodic snapshot plus a scan); and the index's memory
# per object (umbra_disk_index_bytes / umbra_disk_objects; target <= 64 bytes).
# RESTART_TIMES restarts of each kind; medians. cache.memory is small (RESTART_MEMORY_MB)
# so that the disk, not memory, answers. See bench/README.md.
set -euo pipefail
# shellcheck source=bench/lib.sh
. "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

: "${RESTART_OBJECTS:=1000000}"
: "${RESTART_BODY:=200}"
: "${RESTART_TIMES:=3}"
: "${RESTART_MEMORY_MB:=64}"
: "${RESTART_DISK_MB:=$((RESTART_OBJECTS * 6 / 1000 + 64))}"
QUERY="size=$RESTART_BODY&cc=max-age%3D86400"

need curl python3 awk df
bench_init
ensure_umbra
ensure_origin
start_origin
STORE=$BENCH_TMP/umbra-disk
mkdir -p "$STORE"
free_mb=$(df -Pm "$STORE" | awk 'NR == 2 { print $4 }')
((free_mb > RESTART_DISK_MB + 512)) ||
    die "$STORE: $free_mb MB free, the store needs $RESTART_DISK_MB MB plus 512 MB of slack"
ADMIN_PORT=$(free_port)
start_umbra_with "upstreams = { app = { servers = { \"http://127.0.0.1:$ORIGIN_PORT\" } } }
routes = { { path = \"/\", upstream = \"app\" } }
admin = { listen = \"127.0.0.1:$ADMIN_PORT\" }
cache = { memory = \"${RESTART_MEMORY_MB}MB\", max_object = \"1MB\",
          disk = { path = \"$STORE\", size = \"${RESTART_DISK_MB}MB\" } }"
CONF=$BENCH_TMP/umbra/config.lua

disk_metric() {
    curl -s --max-time 5 "http://127.0.0.1:$ADMIN_PORT/metrics" | awk -v m="$1" '$1 == m { print $2 }'
}

# Fill: 4 keep-alive clients, each a quarter of the paths /r/0 .. /r/N-1.
log "filling: $RESTART_OBJECTS objects of $RESTART_BODY bytes"
t0=$(date +%s)
bad=$(python3 - "$UMBRA_PORT" "$RESTART_OBJECTS" "$QUERY" <<'EOF'
import http.client, sys, threading
port, n, query = int(sys.argv[1]), int(sys.argv[2]), sys.argv[3]
bad = [0] * 4
def fill(k):
    c = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
    for i in range(k, n, 4):
        c.request("GET", "/r/%d?%s" % (i, query))
        r = c.getresponse()
        r.read()
        if r.status != 200:
            bad[k] += 1
ts = [threading.Thread(target=fill, args=(k,)) for k in range(4)]
for t in ts: t.start()
for t in ts: t.join()
print(sum(bad))
EOF
)
((bad == 0)) || die "umbra: $bad of $RESTART_OBJECTS fill answers were not 200"
log "filled in $(($(date +%s) - t0)) s; waiting for the disk to hold them"
n=0
last=-1
for _ in $(seq 1 1200); do
    n=$(disk_metric umbra_disk_objects)
    ((${n:-0} >= RESTART_OBJECTS)) && break
    # The store may hold fewer (its size): stop once the count no longer grows.
    [[ ${n:-0} == "$last" ]] && ((${n:-0} > 0)) && break
    last=${n:-0}
    sleep 0.5
done
HELD=${n:-0}
((HELD > 0)) || die "umbra: the disk holds no object after the fill"
IDX=$(disk_metric umbra_disk_index_bytes)
BPO=$(awk -v b="${IDX:-0}" -v n="$HELD" 'BEGIN { printf "%.1f", b / n }')
log "disk holds $HELD objects; index $IDX bytes: $BPO bytes per object"
METRICS=$(curl -s --max-time 5 "http://127.0.0.1:$ADMIN_PORT/metrics" | grep '^umbra_disk_' || true)

# restart_time SIGNAL (run in $(...), so the caller reads the new PID from PIDFILE): stops Umbra with SIGNAL, starts it again and prints the seconds from
# the exec to the first 200 with detail=disk for /r/0 (a stored object).
restart_time() {
    local sig=$1 t
    kill "-$sig" "$UMBRA_PID" 2>/dev/null || true
    for _ in $(seq 1 600); do
        kill -0 "$UMBRA_PID" 2>/dev/null || break
        sleep 0.1
    done
    kill -0 "$UMBRA_PID" 2>/dev/null && die "umbra (PID $UMBRA_PID) did not exit on SIG$sig"
    wait "$UMBRA_PID" 2>/dev/null || true
    t=$(python3 - "$UMBRA_BIN" "$CONF" "$UMBRA_PORT" "/r/0?$QUERY" "$BENCH_TMP/umbra/umbra.log" <<'EOF'
import http.client, os, subprocess, sys, time
binp, conf, port, path, logf = sys.argv[1], sys.argv[2], int(sys.argv[3]), sys.argv[4], sys.argv[5]
out = open(logf, "ab")
t0 = time.monotonic()
p = subprocess.Popen([binp, conf], stdout=out, stderr=out, stdin=subprocess.DEVNULL)
sys.stderr.write("pid %d\n" % p.pid)
open(os.environ["PIDFILE"], "w").write(str(p.pid))
deadline = t0 + 120
while time.monotonic() < deadline:
    if p.poll() is not None:
        print("exited"); sys.exit(0)
    try:
        c = http.client.HTTPConnection("127.0.0.1", port, timeout=2)
        c.request("GET", path)
        r = c.getresponse()
        r.read()
        cs = r.getheader("Cache-Status") or ""
        c.close()
        if r.status == 200 and "detail=disk" in cs:
            print("%.3f" % (time.monotonic() - t0)); sys.exit(0)
    except OSError:
        pass
    time.sleep(0.01)
print("timeout")
EOF
)
    [[ $t =~ ^[0-9.]+$ ]] || die "umbra: no 200 from disk after the restart ($t); see $BENCH_TMP/umbra/umbra.log"
    echo "$t"
}
export PIDFILE=$BENCH_TMP/umbra.pid
declare -a TERM_T=() KILL_T=()
# restarts HOW ARRAY WHAT: RESTART_TIMES restarts after HOW (TERM, KILL), their times in
# the array named ARRAY.
restarts() {
    local -n times=$2
    local k t
    for k in $(seq 1 "$RESTART_TIMES"); do
        t=$(restart_time "$1")
        UMBRA_PID=$(cat "$PIDFILE")
        BENCH_PIDS+=("$UMBRA_PID")
        log "restart $k after $3: first disk hit after $t s"
        times+=("$t")
    done
}
restarts TERM TERM_T SIGTERM
restarts KILL KILL_T "kill -9"
median_of() { printf '%s\n' "$@" | sort -g | awk '{ a[NR] = $1 } END { print (NR % 2) ? a[(NR + 1) / 2] : (a[NR / 2] + a[NR / 2 + 1]) / 2 }'; }
MT=$(median_of "${TERM_T[@]}")
MK=$(median_of "${KILL_T[@]}")
metT=$(awk -v t="$MT" 'BEGIN { print (t <= 2) ? "met" : "not met" }')
metB=$(awk -v b="$BPO" 'BEGIN { print (b <= 64) ? "met" : "not met" }')

md=$(results_md disk_restart)
{
    echo "# disk_restart: the disk tier's restart and index memory"
    echo
    bench_env_md
    echo "- objects: $RESTART_OBJECTS asked (paths /r/N, $RESTART_BODY-byte bodies), $HELD held by the disk (umbra_disk_objects)"
    echo "- filesystem of the store: $(df -T "$STORE" | awk 'NR == 2 { print $2 }') ($STORE)"
    echo "- restart time: from the exec of Umbra to the first 200 with Cache-Status detail=disk for /r/0, polled every 10 ms; $RESTART_TIMES restarts of each kind"
    echo
    md_row figure median target met "each"
    md_row --- ---: --- --- ---
    md_row "restart after SIGTERM (s)" "$MT" "<= 2" "$metT" "${TERM_T[*]}"
    md_row "restart after kill -9 (s)" "$MK" - - "${KILL_T[*]}"
    md_row "index bytes per object" "$BPO" "<= 64" "$metB" "$IDX / $HELD"
    echo
    echo "Umbra's disk metrics after the fill:"
    echo
    echo '```'
    echo "$METRICS"
    echo '```'
    echo
    echo "Umbra's \`config.lua\`:"
    echo
    echo '```lua'
    cat "$CONF"
    echo '```'
} >"$md"
printf '\n%-28s %10s %-7s %s\n' figure median target met
printf '%-28s %10s %-7s %s\n' "restart after SIGTERM (s)" "$MT" "<= 2" "$metT"
printf '%-28s %10s %-7s %s\n' "restart after kill -9 (s)" "$MK" - -
printf '%-28s %10s %-7s %s\n' "index bytes per object" "$BPO" "<= 64" "$metB"
log "results written to $md"
