#!/usr/bin/env bash
# What one request costs, counted rather than timed (issue 14's hit): for the three answers
# of bench/hit.sh (a 1 KiB cache hit, umbra.respond of the same body, nginx's return 200 of
# it), the user-space instructions per request (valgrind's callgrind, over a wrk run) and
# the system calls per request (strace -c, over another). Counts do not depend on what else
# the machine runs, so that a change to the hit path can be judged on a busy machine; the
# kernel's own work is not in the instruction count (the system calls stand for it).
#
# Each server runs one worker (Umbra: workers = 1; nginx: master_process off), so that the
# counts of one process are the counts of every request. Knobs: DURATION (seconds of wrk
# per count, default 5), COUNT (instr, sys or both; default both), CONNECTIONS (wrk -c,
# default 20). See bench/README.md.
set -euo pipefail
: "${DURATION:=5}"
: "${COUNT:=both}"
: "${CONNECTIONS:=20}"
# shellcheck source=bench/lib.sh
. "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

[[ $COUNT =~ ^(instr|sys|both)$ ]] || die "COUNT must be instr, sys or both (got '$COUNT')"
[[ $CONNECTIONS =~ ^[1-9][0-9]*$ ]] || die "CONNECTIONS must be a positive integer"
need wrk curl python3 nginx awk
[[ $COUNT == sys ]] || need valgrind callgrind_control
[[ $COUNT == instr ]] || need strace
# shellcheck disable=SC2034 # lib.sh's knob check reads it
ROUNDS=1
bench_init
ensure_umbra
ensure_origin
start_origin
origin_ref 1024 "$BENCH_TMP/ref.body"
BODY=$(cat "$BENCH_TMP/ref.body")
[[ $BODY =~ ^[0-9a-f]+$ ]] || die "the origin's 1024-byte body is not plain hex digits"
URL_HIT="/hit/1k?size=1024&cc=max-age%3D3600"

# start_servers PREFIX...: Umbra and nginx, each started through PREFIX (empty: directly).
# Sets UPORT, NPORT, UPID, NPID.
start_servers() {
    local udir=$BENCH_TMP/umbra ndir=$BENCH_TMP/nginx
    mkdir -p "$udir" "$ndir"
    UPORT=$(free_port)
    NPORT=$(free_port)
    cat >"$udir/config.lua" <<EOF
listen = { "127.0.0.1:$UPORT" }
workers = 1
$( ((EUID == 0)) && echo 'user = "root"' || true)
upstreams = { app = { servers = { "http://127.0.0.1:$ORIGIN_PORT" } } }
routes = {
  { path = "/respond/", on_request = function(req)
      return umbra.respond(200, "$BODY", { ["Content-Type"] = "text/plain" })
    end },
  { path = "/hit/", upstream = "app" },
}
cache = { memory = "256MB", max_object = "64MB" }
EOF
    cat >"$ndir/nginx.conf" <<EOF
daemon off;
master_process off;
worker_processes 1;
pid $ndir/nginx.pid;
error_log $ndir/error.log warn;
events { worker_connections 4096; }
http {
    default_type application/octet-stream;
    $NGINX_HTTP_COMMON
    server_tokens off;
    client_body_temp_path $ndir/body;
    proxy_temp_path $ndir/proxy;
    fastcgi_temp_path $ndir/fastcgi;
    uwsgi_temp_path $ndir/uwsgi;
    scgi_temp_path $ndir/scgi;
    server {
        listen 127.0.0.1:$NPORT;
        location = /return/1k { default_type text/plain; return 200 "$BODY"; }
        location / { return 404; }
    }
}
EOF
    bench_start umbra "$udir/umbra.log" "$@" "$UMBRA_BIN" "$udir/config.lua"
    UPID=$BENCH_LAST_PID
    bench_start nginx "$ndir/stderr.log" "$@" nginx -e "$ndir/error.log" -p "$ndir" -c "$ndir/nginx.conf"
    NPID=$BENCH_LAST_PID
    wait_port umbra "$UPID" "$UPORT" "$udir/umbra.log"
    wait_port nginx "$NPID" "$NPORT" "$ndir/error.log"
    # The hit's object is stored before anything is counted; the second GET must be a hit.
    curl -s --max-time 30 -o /dev/null "http://127.0.0.1:$UPORT$URL_HIT" || die "umbra: warming GET failed"
    curl -s --max-time 30 -D - -o /dev/null "http://127.0.0.1:$UPORT$URL_HIT" | grep -qi '^Cache-Status:.*; hit' ||
        die "umbra: the second GET $URL_HIT was not a hit"
}

stop_servers() {
    stop_pid "$UPID"
    stop_pid "$NPID"
}

# run_wrk_count URL OUT: a bounded wrk run; prints the requests it completed.
run_wrk_count() {
    timeout $((DURATION + 60)) wrk -t1 -c"$CONNECTIONS" -d"${DURATION}s" "$1" >"$2" 2>&1 ||
        die "wrk $1 failed: $(tail -n 3 "$2")"
    awk '/requests in/ {print $1}' "$2"
}

declare -A IR SC TOP
NAMES=(umbra-hit umbra-respond nginx)
url_of() {
    case $1 in
    umbra-hit) echo "http://127.0.0.1:$UPORT$URL_HIT" ;;
    umbra-respond) echo "http://127.0.0.1:$UPORT/respond/1k" ;;
    nginx) echo "http://127.0.0.1:$NPORT/return/1k" ;;
    esac
}
pid_of() { [[ $1 == nginx ]] && echo "$NPID" || echo "$UPID"; }

if [[ $COUNT != sys ]]; then
    log "instructions: servers under callgrind (slow), ${DURATION}s of wrk each"
    declare -A DUMPS # callgrind numbers each process's dumps: cg.PID.1, cg.PID.2...
    start_servers valgrind --tool=callgrind --instr-atstart=no "--callgrind-out-file=$BENCH_TMP/cg.%p"
    for s in "${NAMES[@]}"; do
        pid=$(pid_of "$s")
        callgrind_control -z "$pid" >/dev/null 2>&1
        callgrind_control -i on "$pid" >/dev/null 2>&1
        n=$(run_wrk_count "$(url_of "$s")" "$BENCH_TMP/wrk-i-$s.txt")
        callgrind_control -i off "$pid" >/dev/null 2>&1
        callgrind_control -d "$s" "$pid" >/dev/null 2>&1
        sleep 1
        DUMPS[$pid]=$((${DUMPS[$pid]:-0} + 1))
        f=$BENCH_TMP/cg.$pid.${DUMPS[$pid]}
        ir=$(awk '/^totals:/ {print $2; exit}' "$f")
        [[ -n $ir && $n -gt 0 ]] || die "$s: no instruction count (dump $f, $n requests)"
        IR[$s]=$((ir / n))
        log "$s: $n requests, $ir instructions: ${IR[$s]} per request"
    done
    stop_servers
fi

if [[ $COUNT != instr ]]; then
    log "system calls: servers as they are, strace -c over ${DURATION}s of wrk each"
    start_servers
    for s in "${NAMES[@]}"; do
        pid=$(pid_of "$s")
        strace -c -f -p "$pid" -o "$BENCH_TMP/strace-$s.txt" 2>/dev/null &
        spid=$!
        BENCH_PIDS+=("$spid")
        sleep 1
        n=$(run_wrk_count "$(url_of "$s")" "$BENCH_TMP/wrk-s-$s.txt")
        kill -INT "$spid"
        wait "$spid" || true
        calls=$(awk '$NF == "total" {print $4}' "$BENCH_TMP/strace-$s.txt")
        [[ -n $calls && $n -gt 0 ]] || die "$s: no system call count"
        SC[$s]=$(awk -v c="$calls" -v n="$n" 'BEGIN {printf "%.2f", c / n}')
        TOP[$s]=$(awk -v n="$n" 'NR > 2 && $NF != "total" && $4 ~ /^[0-9]+$/ && $4 / n >= 0.01 {
                printf "%s%s %.2f", sep, $NF, $4 / n; sep = ", " }' "$BENCH_TMP/strace-$s.txt")
        log "$s: $n requests, $calls system calls: ${SC[$s]} per request (${TOP[$s]})"
    done
    stop_servers
fi

echo
printf '%-14s %14s %14s  %s\n' server "instr/request" "syscalls/req" "per request"
for s in "${NAMES[@]}"; do
    printf '%-14s %14s %14s  %s\n' "$s" "${IR[$s]:--}" "${SC[$s]:--}" "${TOP[$s]:-}"
done
