# shellcheck shell=bash
# Common helpers for Umbra's benchmark scenarios. Sourced by bench/run and bench/<scenario>.sh.
#
# Conventions: every server is started in the background by bench_start, which records its
# PID; bench_cleanup (installed on EXIT by bench_init) stops exactly those PIDs (and the
# children they had), then removes the scenario's temp dir. Nothing is ever killed by name.

BENCH_DIR=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
BENCH_ROOT=$(cd "$BENCH_DIR/.." && pwd)
BENCH_RESULTS=${BENCH_RESULTS:-$BENCH_DIR/results}

: "${ROUNDS:=5}"
: "${DURATION:=10}"
: "${WRK_THREADS:=2}"
: "${WRK_CONNECTIONS:=100}"
: "${SERVERS:=nginx umbra}"
# The servers SERVERS may name (the cache scenario adds varnish).
: "${BENCH_KNOWN_SERVERS:=nginx umbra}"
: "${UMBRA_BUILD:=$BENCH_ROOT/build-bench}"
# A round whose answers are wrong is not a figure: it is repeated up to this many times,
# then the scenario fails (bench_round).
: "${BENCH_RETRIES:=2}"
# wrk's limit for one answer (its default, 2 s, is less than a 5 MiB answer can take on 2
# shared cores with 100 connections; a request past it is a socket error, so a bad round).
: "${WRK_TIMEOUT:=10}"

BENCH_PIDS=()
BENCH_TMP=
# Dirs outside BENCH_TMP that the scenario made (e.g. nginx's cache on /dev/shm): removed
# with it by bench_cleanup.
BENCH_EXTRA_DIRS=()

log() { printf '[bench] %s\n' "$*" >&2; }
warn() { printf '[bench] WARNING: %s\n' "$*" >&2; }
die() {
    printf '[bench] ERROR: %s\n' "$*" >&2
    exit 1
}

need() {
    local t
    for t in "$@"; do
        command -v "$t" >/dev/null 2>&1 || die "$t not found: run third_party/install.sh --bench"
    done
}

# True when server $1 is in $SERVERS.
bench_uses() { [[ " $SERVERS " == *" $1 "* ]]; }

check_knobs() {
    [[ $ROUNDS =~ ^[1-9][0-9]*$ ]] || die "ROUNDS must be a positive integer (got '$ROUNDS')"
    [[ $DURATION =~ ^[1-9][0-9]*$ ]] || die "DURATION must be a positive number of seconds (got '$DURATION')"
    [[ $BENCH_RETRIES =~ ^[0-9]+$ ]] || die "BENCH_RETRIES must be a number (got '$BENCH_RETRIES')"
    [[ $WRK_TIMEOUT =~ ^[1-9][0-9]*$ ]] || die "WRK_TIMEOUT must be a positive number of seconds (got '$WRK_TIMEOUT')"
    local s
    for s in $SERVERS; do
        [[ " $BENCH_KNOWN_SERVERS " == *" $s "* ]] ||
            die "SERVERS: unknown server '$s' (${BENCH_KNOWN_SERVERS// /, })"
    done
    [[ -n ${SERVERS// /} ]] || die "SERVERS is empty"
}

# Warns when the machine is busy before measuring: other load skews the figures (the
# alternation spreads it over both servers, but it widens the spread).
check_idle() {
    local la
    la=$(cut -d' ' -f1 /proc/loadavg)
    if awk -v l="$la" -v n="$(nproc)" 'BEGIN { exit !(l > n / 2) }'; then
        warn "load average is $la on $(nproc) CPUs: other processes will skew the figures"
    fi
}

# Makes the scenario's temp dir and installs the cleanup traps.
bench_init() {
    check_knobs
    BENCH_TMP=$(mktemp -d -t umbra-bench.XXXXXX)
    # nginx's workers run as nobody: they must be able to traverse into the docroot.
    chmod 755 "$BENCH_TMP"
    trap bench_cleanup EXIT
    trap 'exit 130' INT
    trap 'exit 143' TERM
}

# Stops one PID: SIGTERM, up to 5 s for it to exit, then SIGKILL. Children it had (e.g.
# nginx's workers) are collected first and get the same treatment if they outlive it.
stop_pid() {
    local pid=$1 kids i p
    kill -0 "$pid" 2>/dev/null || return 0
    kids=$(pgrep -P "$pid" 2>/dev/null || true)
    kill -TERM "$pid" 2>/dev/null || true
    for ((i = 0; i < 50; i++)); do
        kill -0 "$pid" 2>/dev/null || break
        sleep 0.1
    done
    if kill -0 "$pid" 2>/dev/null; then
        warn "PID $pid did not exit on SIGTERM: SIGKILL"
        kill -KILL "$pid" 2>/dev/null || true
    fi
    wait "$pid" 2>/dev/null || true
    for p in $kids; do
        for ((i = 0; i < 20; i++)); do
            kill -0 "$p" 2>/dev/null || break
            sleep 0.1
        done
        kill -0 "$p" 2>/dev/null && kill -KILL "$p" 2>/dev/null
    done
    return 0
}

bench_cleanup() {
    local rc=$? pid d
    trap - EXIT INT TERM
    [[ -n ${BENCH_WRK_PID:-} ]] && stop_pid "$BENCH_WRK_PID"
    [[ -n ${CONN_WATCH_PID:-} ]] && stop_pid "$CONN_WATCH_PID"
    # A scenario's own sampler during a round (h2up's backend connections), when one runs.
    [[ -n ${BENCH_SAMPLER_PID:-} ]] && stop_pid "$BENCH_SAMPLER_PID"
    for pid in "${BENCH_PIDS[@]}"; do
        stop_pid "$pid"
    done
    BENCH_PIDS=()
    if [[ -n $BENCH_TMP && -d $BENCH_TMP ]]; then
        if ((rc != 0)) && [[ -n ${BENCH_KEEP_TMP:-} ]]; then
            log "keeping $BENCH_TMP (BENCH_KEEP_TMP)"
        else
            rm -rf "$BENCH_TMP"
        fi
    fi
    for d in "${BENCH_EXTRA_DIRS[@]}"; do
        if ((rc != 0)) && [[ -n ${BENCH_KEEP_TMP:-} ]]; then
            log "keeping $d (BENCH_KEEP_TMP)"
        else
            rm -rf "$d"
        fi
    done
    exit "$rc"
}

# A TCP port on 127.0.0.1 that nothing listens on right now.
free_port() {
    python3 -c 'import socket
s = socket.socket()
s.bind(("127.0.0.1", 0))
print(s.getsockname()[1])'
}

# port_open PORT: true when 127.0.0.1:PORT accepts a connection.
port_open() { (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null; }

# wait_port NAME PID PORT LOG: polls up to 10 s for the port; fails (showing the log) if
# the process dies or the port never opens.
wait_port() {
    local name=$1 pid=$2 port=$3 logf=$4 i
    for ((i = 0; i < 100; i++)); do
        if ! kill -0 "$pid" 2>/dev/null; then
            [[ -f $logf ]] && tail -n 20 "$logf" >&2
            die "$name (PID $pid) exited before listening on 127.0.0.1:$port"
        fi
        port_open "$port" && return 0
        sleep 0.1
    done
    [[ -f $logf ]] && tail -n 20 "$logf" >&2
    die "$name (PID $pid) is not accepting connections on 127.0.0.1:$port after 10 s"
}

# make_cert: one self-signed ECDSA P-256 certificate for 127.0.0.1 and localhost, shared
# by every server of the scenario; sets BENCH_CERT and BENCH_KEY (readable by nginx's
# workers).
make_cert() {
    BENCH_CERT=$BENCH_TMP/cert.pem
    BENCH_KEY=$BENCH_TMP/key.pem
    openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -days 2 \
        -subj /CN=localhost -addext "subjectAltName=DNS:localhost,IP:127.0.0.1" \
        -keyout "$BENCH_KEY" -out "$BENCH_CERT" >"$BENCH_TMP/openssl.log" 2>&1 ||
        die "openssl could not make the certificate: $(cat "$BENCH_TMP/openssl.log")"
    chmod 644 "$BENCH_CERT" "$BENCH_KEY"
}

# bench_start NAME LOG CMD...: runs CMD in the background; sets BENCH_LAST_PID.
bench_start() {
    local name=$1 logf=$2
    shift 2
    "$@" >"$logf" 2>&1 </dev/null &
    BENCH_LAST_PID=$!
    BENCH_PIDS+=("$BENCH_LAST_PID")
    log "started $name: PID $BENCH_LAST_PID ($*)"
}

# Builds Umbra in Release into $UMBRA_BUILD unless UMBRA_BIN is set; exports UMBRA_BIN.
ensure_umbra() {
    if [[ -n ${UMBRA_BIN:-} ]]; then
        [[ -x $UMBRA_BIN ]] || die "UMBRA_BIN=$UMBRA_BIN is not an executable"
        UMBRA_BIN=$(cd "$(dirname "$UMBRA_BIN")" && pwd)/$(basename "$UMBRA_BIN")
        export UMBRA_BIN
        return 0
    fi
    need cmake
    mkdir -p "$UMBRA_BUILD"
    local blog=$UMBRA_BUILD/bench-build.log
    # The test origin (the proxy scenario's backend) is built with it, when its source is
    # in the tree.
    local targets=(umbra) what="Umbra"
    if [[ -z ${ORIGIN_BIN:-} && -f $BENCH_ROOT/tests/origin/origin.c ]]; then
        targets+=(umbra-test-origin)
        what="Umbra and umbra-test-origin"
    fi
    log "building $what (Release) into $UMBRA_BUILD"
    if ! { cmake -S "$BENCH_ROOT" -B "$UMBRA_BUILD" -DCMAKE_BUILD_TYPE=Release &&
        cmake --build "$UMBRA_BUILD" -j2 --target "${targets[@]}"; } >"$blog" 2>&1; then
        tail -n 40 "$blog" >&2
        die "build failed (full log: $blog)"
    fi
    [[ -x $UMBRA_BUILD/umbra ]] || die "build produced no $UMBRA_BUILD/umbra"
    UMBRA_BIN=$UMBRA_BUILD/umbra
    export UMBRA_BIN
    if [[ ${targets[*]} == *umbra-test-origin* ]]; then
        [[ -x $UMBRA_BUILD/tests/umbra-test-origin ]] ||
            die "build produced no $UMBRA_BUILD/tests/umbra-test-origin"
        ORIGIN_BIN=$UMBRA_BUILD/tests/umbra-test-origin
        export ORIGIN_BIN
    fi
}

# The test origin (tests/origin/origin.c), the backend of the proxy scenario; exports
# ORIGIN_BIN. Taken from ORIGIN_BIN if set (or already built by ensure_umbra), else from
# beside a given UMBRA_BIN (its build dir's tests/), else built (Release) into $UMBRA_BUILD.
ensure_origin() {
    if [[ -n ${ORIGIN_BIN:-} ]]; then
        [[ -x $ORIGIN_BIN ]] || die "ORIGIN_BIN=$ORIGIN_BIN is not an executable"
        ORIGIN_BIN=$(cd "$(dirname "$ORIGIN_BIN")" && pwd)/$(basename "$ORIGIN_BIN")
        export ORIGIN_BIN
        return 0
    fi
    if [[ -n ${UMBRA_BIN:-} && -x $(dirname "$UMBRA_BIN")/tests/umbra-test-origin ]]; then
        ORIGIN_BIN=$(cd "$(dirname "$UMBRA_BIN")/tests" && pwd)/umbra-test-origin
        export ORIGIN_BIN
        return 0
    fi
    [[ -f $BENCH_ROOT/tests/origin/origin.c ]] ||
        die "no tests/origin/origin.c to build the test origin from: set ORIGIN_BIN"
    need cmake
    mkdir -p "$UMBRA_BUILD"
    local blog=$UMBRA_BUILD/bench-build-origin.log
    log "building umbra-test-origin (Release) into $UMBRA_BUILD"
    if ! { cmake -S "$BENCH_ROOT" -B "$UMBRA_BUILD" -DCMAKE_BUILD_TYPE=Release &&
        cmake --build "$UMBRA_BUILD" -j2 --target umbra-test-origin; } >"$blog" 2>&1; then
        tail -n 40 "$blog" >&2
        die "build of the test origin failed (full log: $blog)"
    fi
    [[ -x $UMBRA_BUILD/tests/umbra-test-origin ]] ||
        die "build produced no $UMBRA_BUILD/tests/umbra-test-origin"
    ORIGIN_BIN=$UMBRA_BUILD/tests/umbra-test-origin
    export ORIGIN_BIN
}

# start_origin: the test origin with one thread (ORIGIN_THREADS); sets ORIGIN_PORT and
# ORIGIN_PID. It picks its own port and prints "listening on HOST:PORT" once ready.
start_origin() {
    local dir=$BENCH_TMP/origin i
    [[ -n ${ORIGIN_BIN:-} ]] || die "internal: ORIGIN_BIN not set (ensure_origin)"
    mkdir -p "$dir"
    bench_start origin "$dir/origin.log" "$ORIGIN_BIN" -l 127.0.0.1:0 -t "${ORIGIN_THREADS:-1}"
    ORIGIN_PID=$BENCH_LAST_PID
    ORIGIN_PORT=
    for ((i = 0; i < 100; i++)); do
        # (The log may not exist yet: the shell that starts the origin creates it.)
        ORIGIN_PORT=$(sed -n 's/^listening on 127\.0\.0\.1:\([0-9][0-9]*\)$/\1/p' "$dir/origin.log" 2>/dev/null || true)
        [[ -n $ORIGIN_PORT ]] && break
        if ! kill -0 "$ORIGIN_PID" 2>/dev/null; then
            tail -n 20 "$dir/origin.log" >&2
            die "origin (PID $ORIGIN_PID) exited before listening"
        fi
        sleep 0.1
    done
    [[ -n $ORIGIN_PORT ]] || die "origin (PID $ORIGIN_PID) did not say where it listens after 10 s"
    wait_port origin "$ORIGIN_PID" "$ORIGIN_PORT" "$dir/origin.log"
    log "origin listening on 127.0.0.1:$ORIGIN_PORT"
}

# alive NAME...: each (its PID in the scenario's PID array) is still running, or die (a
# crashed server must not be reported slow).
alive() {
    local p
    for p in "$@"; do
        kill -0 "${PID[$p]}" 2>/dev/null || die "$p died during the run (logs in $BENCH_TMP/)"
    done
}

# origin_count: requests the test origin has received so far.
origin_count() {
    local n
    n=$(curl -s --max-time 5 "http://127.0.0.1:$ORIGIN_PORT/__count") || die "origin: /__count failed"
    [[ $n =~ ^[0-9]+$ ]] || die "origin: /__count answered '$n'"
    echo "$n"
}

# origin_ref BYTES FILE: the test origin's own body of BYTES bytes (/ref) into FILE, or die.
origin_ref() {
    curl -s --max-time 10 -o "$2" "http://127.0.0.1:$ORIGIN_PORT/ref?size=$1" || die "origin: curl failed"
    [[ $(stat -c %s "$2") == "$1" ]] || die "origin: /ref?size=$1 is not $1 bytes"
}

# raise_nofile NEED: raises the soft open-files limit of this shell (inherited by wrk and
# the servers it starts) to the hard limit, at most 65536; fails if that is below NEED.
# Sets NOFILE to the new limit.
raise_nofile() {
    local need=$1 hard
    hard=$(ulimit -Hn)
    if [[ $hard == unlimited ]] || ((hard > 65536)); then hard=65536; fi
    if (($(ulimit -Sn) < hard)); then ulimit -Sn "$hard" || die "cannot raise ulimit -n to $hard"; fi
    NOFILE=$(ulimit -Sn)
    ((NOFILE >= need)) ||
        die "ulimit -n is $NOFILE (hard limit $(ulimit -Hn)), this scenario needs $need open files"
}

# make_file PATH BYTES: random content.
make_file() {
    head -c "$2" /dev/urandom >"$1"
    chmod 644 "$1"
}

# ---- the servers' own limits, beyond any round's reach (issue 26) ---------------------
#
# A server that reaches one of its configured limits during a round measures the limit, not
# itself: nginx 1.22's keepalive_requests also caps the requests of an HTTP/2 connection
# (http2_max_requests is obsolete since 1.19.7), and at 100000 it made every h2 echo round
# of nginx 10 connections x 100000 requests, whatever the round's length. Every limit on
# requests, connections or time that a round could meet is therefore set far beyond what a
# round can reach (the largest round: proxy's -c1000 for 10 s, about 2000 connections and
# a few hundred thousand requests per connection at most), and the round machinery refuses
# a round that reaches one anyway (round_limits: requests per connection near the cap,
# connections the server closed and the client did not reopen). The limits, per server:
#   nginx    keepalive_requests, keepalive_time, keepalive_timeout, worker_connections and
#            worker_rlimit_nofile (here), http2_max_concurrent_streams (h2.sh), the upstream
#            pool's keepalive_requests and keepalive_timeout (NGINX_UPSTREAM_*);
#   Varnish  no limit of requests per connection; timeout_idle (5 s) closes only a
#            connection idle that long, which no round leaves; its threads are sized from the
#            round's connections (cache.sh: thread_pool_min/max);
#   Apache   MaxKeepAliveRequests 0 (no limit), processes for twice the connections (cgi.sh);
#   ATS      no limit of requests per HTTP/1.1 connection (ATS 9 has none); connections
#            up to 10000 (as Umbra), keep-alive idle timeouts of an hour (start_ats);
#   Umbra    no limit of requests per connection; limits.max_connections 10000 (5 x the
#            largest round's; idle.sh and ws.sh raise it for theirs), timeouts.idle 60 s,
#            http2.max_concurrent_streams (h2.sh, the same as nginx's);
#   Redis    maxclients 10000 (l2.sh: 2 workers x 2 Umbras connect);
#   HAProxy  (h2up.sh) no limit of requests per HTTP/2 connection in 2.6, either side
#            (tune.h2.fe.max-total-streams is 2.9's); maxconn 10000 or what the open-files
#            limit allows; client, server and keep-alive timeouts of an hour; its
#            tune.h2.max-concurrent-streams the same as Umbra's http2.max_concurrent_streams.
#
# NGINX_KEEPALIVE_REQUESTS: requests per client connection, HTTP/1.1 and HTTP/2 (a knob only
# so that a scratch run can show a capped round refused; never lower it for figures).
: "${NGINX_KEEPALIVE_REQUESTS:=1000000000}"
# nginx's worker_connections (client and upstream connections per worker; the largest round
# needs 2000 if one worker takes them all) and the descriptors its workers may open.
: "${NGINX_WORKER_CONNECTIONS:=16384}"
NGINX_RLIMIT_NOFILE=$((2 * NGINX_WORKER_CONNECTIONS + 1024))

# The settings of every nginx's http block that a user would tune for speed (the block has
# also its temp paths and default type; start_nginx_with). Clients' connections are kept
# alive for as many requests and as long as any round lasts: keepalive_time (the longest a
# connection lives, 1 h by default) a day, keepalive_timeout (idle between two requests) an
# hour.
NGINX_HTTP_COMMON="access_log off;
    sendfile on;
    tcp_nopush on;
    keepalive_requests $NGINX_KEEPALIVE_REQUESTS;
    keepalive_time 24h;
    keepalive_timeout 3600s;"
# nginx as its users would tune it for these jobs. The scenarios that serve files (static,
# tls, and cache's hits, which nginx reads from its cache files) keep the files' descriptors
# and sizes open: NGINX_OPEN_FILE_CACHE goes into their http block.
NGINX_OPEN_FILE_CACHE="open_file_cache max=10000 inactive=60s;
    open_file_cache_valid 60s;"
# Its upstream connections (proxy, cache) as Umbra's own HTTP/1.1 client keeps its own: up
# to 1024 idle connections per server and worker (nginx's keepalive is per worker too),
# closed after 60 s idle (no round leaves one idle that long). Umbra has no limit of
# requests per connection; nginx's default keepalive_requests would close one after 1000,
# so it is as far out of reach as the clients' (NGINX_KEEPALIVE_REQUESTS).
NGINX_UPSTREAM_KEEPALIVE=1024
NGINX_UPSTREAM_KEEPALIVE_REQUESTS=1000000000
NGINX_UPSTREAM_KEEPALIVE_TIMEOUT=60s

# nginx_upstream NAME PORT: an upstream block for the server at 127.0.0.1:PORT with the
# keep-alive settings above (the location that uses it needs proxy_http_version 1.1 and an
# empty Connection header for them to apply).
nginx_upstream() {
    cat <<EOF
    upstream $1 {
        server 127.0.0.1:$2;
        keepalive $NGINX_UPSTREAM_KEEPALIVE;
        keepalive_requests $NGINX_UPSTREAM_KEEPALIVE_REQUESTS;
        keepalive_timeout $NGINX_UPSTREAM_KEEPALIVE_TIMEOUT;
    }
EOF
}

# start_nginx DOCROOT: master + 2 workers serving DOCROOT, with the open file cache; sets
# NGINX_PORT and NGINX_PID.
start_nginx() {
    start_nginx_with "" "    $NGINX_OPEN_FILE_CACHE" "root $1;"
}

# start_nginx_with MAIN HTTP SERVER: the same nginx (master + 2 workers, the common http
# settings below) with MAIN added at the top level, HTTP in the http block and SERVER as
# the body of the one server block (after its listen). Sets NGINX_PORT and NGINX_PID.
start_nginx_with() {
    local main=$1 http=$2 server=$3 dir=$BENCH_TMP/nginx
    need nginx
    mkdir -p "$dir"
    NGINX_PORT=$(free_port)
    cat >"$dir/nginx.conf" <<EOF
daemon off;
master_process on;
worker_processes 2;
pid $dir/nginx.pid;
error_log $dir/error.log warn;
$main
$([[ $main == *worker_rlimit_nofile* ]] || echo "worker_rlimit_nofile $NGINX_RLIMIT_NOFILE;")

events {
    worker_connections $NGINX_WORKER_CONNECTIONS;
}

http {
    default_type application/octet-stream;
    $NGINX_HTTP_COMMON
    server_tokens off;
    client_body_temp_path $dir/body;
    proxy_temp_path $dir/proxy;
    fastcgi_temp_path $dir/fastcgi;
    uwsgi_temp_path $dir/uwsgi;
    scgi_temp_path $dir/scgi;
$http

    server {
        listen 127.0.0.1:$NGINX_PORT;
        $server
    }
}
EOF
    bench_start nginx "$dir/stderr.log" nginx -e "$dir/error.log" -p "$dir" -c "$dir/nginx.conf"
    NGINX_PID=$BENCH_LAST_PID
    wait_port nginx "$NGINX_PID" "$NGINX_PORT" "$dir/error.log"
}

# start_umbra DOCROOT: Umbra serving DOCROOT; sets UMBRA_PORT and UMBRA_PID.
start_umbra() {
    start_umbra_with "routes = { { path = \"/\", root = \"$1\" } }"
}

# start_umbra_with LUA: Umbra with a generated config.lua: its listen address, 2 workers,
# then LUA (the routes, upstreams...), then UMBRA_EXTRA_CONFIG (Lua text). Sets UMBRA_PORT
# and UMBRA_PID.
start_umbra_with() {
    local lua=$1 dir=$BENCH_TMP/umbra
    [[ -n ${UMBRA_BIN:-} ]] || die "internal: UMBRA_BIN not set (ensure_umbra)"
    mkdir -p "$dir"
    UMBRA_PORT=$(free_port)
    cat >"$dir/config.lua" <<EOF
listen = { "127.0.0.1:$UMBRA_PORT" }
workers = 2
$( ((EUID == 0)) && echo 'user = "root" -- the bench runs as root; Umbra refuses root unless told' || true)
$lua
${UMBRA_EXTRA_CONFIG:-}
EOF
    bench_start umbra "$dir/umbra.log" "$UMBRA_BIN" "$dir/config.lua"
    UMBRA_PID=$BENCH_LAST_PID
    wait_port umbra "$UMBRA_PID" "$UMBRA_PORT" "$dir/umbra.log"
}

# Varnish's worker threads, as its users size them for the load: one pool per CPU (2, as
# Umbra's and nginx's 2 workers; Varnish's default is 2 as well), each with
# VARNISH_THREAD_POOL_MIN threads made at start, so that no round waits for threads to be
# made, and at most VARNISH_THREAD_POOL_MAX. The scenario sets these two from its
# connection counts before start_varnish (the values below are Varnish's defaults).
VARNISH_THREAD_POOLS=2
VARNISH_THREAD_POOL_MIN=100
VARNISH_THREAD_POOL_MAX=5000

# start_varnish BACKEND_PORT [VCL]: Varnish in the foreground (-F: its manager process is
# the PID recorded; the cache process is its child) in front of 127.0.0.1:BACKEND_PORT,
# with 256 MB of malloc storage, the thread pools above and its working dir in the temp
# dir; no management port (-T none). Without VCL (text), the built-in VCL (-b): it caches
# GET/HEAD responses without Set-Cookie for their max-age and passes requests with Cookie
# or Authorization. Sets VARNISH_PORT and VARNISH_PID; its command line is kept in
# TMP/varnish/cmdline (for the results file, configs_md).
start_varnish() {
    local backend=$1 vcl=${2:-} dir=$BENCH_TMP/varnish
    need varnishd
    mkdir -p "$dir"
    chmod 755 "$dir"
    VARNISH_PORT=$(free_port)
    local args=(-F -a "127.0.0.1:$VARNISH_PORT" -T none -s "malloc,256m" -n "$dir/work"
        -p "thread_pools=$VARNISH_THREAD_POOLS" -p "thread_pool_min=$VARNISH_THREAD_POOL_MIN"
        -p "thread_pool_max=$VARNISH_THREAD_POOL_MAX")
    if [[ -n $vcl ]]; then
        printf '%s\n' "$vcl" >"$dir/bench.vcl"
        chmod 644 "$dir/bench.vcl"
        args+=(-f "$dir/bench.vcl")
    else
        args+=(-b "127.0.0.1:$backend")
    fi
    printf '%s\n' "varnishd ${args[*]}" >"$dir/cmdline"
    bench_start varnish "$dir/varnishd.log" varnishd "${args[@]}"
    VARNISH_PID=$BENCH_LAST_PID
    wait_port varnish "$VARNISH_PID" "$VARNISH_PORT" "$dir/varnishd.log"
}

# varnish_threads: "POOLS THREADS", Varnish's counters MAIN.pools and MAIN.threads now
# (varnishstat reads them from its working dir), or "- -".
varnish_threads() {
    local out
    out=$(varnishstat -n "$BENCH_TMP/varnish/work" -1 -f MAIN.pools -f MAIN.threads 2>/dev/null) || {
        echo "- -"
        return 0
    }
    awk '$1 == "MAIN.pools" { p = $2 } $1 == "MAIN.threads" { t = $2 }
        END { printf "%s %s\n", (p == "" ? "-" : p), (t == "" ? "-" : t) }' <<<"$out"
}

# Apache Traffic Server (Debian's trafficserver, 9.2) as a caching reverse proxy, as its
# users tune it for a disk cache beside a RAM cache. ATS_THREADS event threads (2, as
# Umbra's and nginx's 2 workers; autoconfig off so that the count does not follow the
# CPUs). Its limits out of any round's reach: HTTP/1.1 has no limit of requests per
# connection in ATS 9; connections_throttle and max_connections_in 10000 (as Umbra's
# limits.max_connections, 5 x the largest round's connections; its default 30000 is above
# the descriptors it may open here, and it lowers it with a warning), max_requests_in 0 (no
# limit of requests in flight), per_server.connection.max 0 (no limit of origin
# connections); clients' and origin connections stay open ATS_KEEPALIVE_TIMEOUT idle (no
# round leaves one idle that long).
ATS_THREADS=2
ATS_KEEPALIVE_TIMEOUT=3600

# start_ats ORIGIN_PORT DISK_MB RAM_MB: traffic_server in the foreground (the PID recorded
# is the server's own: no traffic_manager, no service) mapping every request to
# 127.0.0.1:ORIGIN_PORT, with a disk cache of DISK_MB in one file of TMP/ats/cache (the
# scenario's filesystem) and a RAM cache of RAM_MB above it. Nothing of the system's
# /etc/trafficserver, /run or /var/log is used: a runroot (TMP/ats/runroot.yaml) puts its
# config, runtime and log dirs in TMP/ats, the binaries and plugins where Debian installs
# them. ATS refuses to serve as root: when the bench runs as root, it switches to the
# package's user (trafficserver), which owns TMP/ats. Sets ATS_PORT and ATS_PID; its
# records.config, storage.config and remap.config are in TMP/ats/etc (configs_md).
start_ats() {
    local origin=$1 disk_mb=$2 ram_mb=$3 dir=$BENCH_TMP/ats user libdir plugdir f
    need traffic_server traffic_layout
    mkdir -p "$dir/etc" "$dir/run" "$dir/log" "$dir/cache" "$dir/var"
    ATS_PORT=$(free_port)
    libdir=$(traffic_layout info 2>/dev/null | awk '$1 == "LIBDIR:" { print $2 }')
    plugdir=$(traffic_layout info 2>/dev/null | awk '$1 == "PLUGINDIR:" { print $2 }')
    [[ -n $libdir && -n $plugdir ]] || die "traffic_layout info names no LIBDIR or PLUGINDIR"
    cat >"$dir/runroot.yaml" <<EOF
prefix: $dir
exec_prefix: $(dirname "$(dirname "$(command -v traffic_server)")")
bindir: $(dirname "$(command -v traffic_server)")
sbindir: $(dirname "$(command -v traffic_server)")
sysconfdir: $dir/etc
datadir: $dir/var
includedir: $dir/var
libdir: $libdir
libexecdir: $plugdir
localstatedir: $dir/var
runtimedir: $dir/run
logdir: $dir/log
cachedir: $dir/cache
EOF
    user=
    if ((EUID == 0)); then
        user=trafficserver
        id "$user" >/dev/null 2>&1 || user=nobody
    fi
    local asuser=
    # ATS refuses to serve as root: as root, the bench runs it as the package user.
    [[ -n $user ]] && asuser="CONFIG proxy.config.admin.user_id STRING $user"
    cat >"$dir/etc/records.config" <<EOF
# Only 127.0.0.1, on the port the bench chose.
CONFIG proxy.config.http.server_ports STRING $ATS_PORT:ipv4:ip-in=127.0.0.1
$asuser
# $ATS_THREADS event threads, as Umbra and nginx have $ATS_THREADS workers (not one per CPU).
CONFIG proxy.config.exec_thread.autoconfig INT 0
CONFIG proxy.config.exec_thread.limit INT $ATS_THREADS
# A reverse proxy: every request through remap.config (map / to the origin).
CONFIG proxy.config.reverse_proxy.enabled INT 1
CONFIG proxy.config.url_remap.remap_required INT 1
# Cache, URLs with a query too (the origin takes size= and cc=), what has a max-age; the
# port opens once the cache is up, and ATS exits if a store cannot be used.
CONFIG proxy.config.http.cache.http INT 1
CONFIG proxy.config.http.cache.cache_urls_that_look_dynamic INT 1
CONFIG proxy.config.http.cache.required_headers INT 2
CONFIG proxy.config.http.wait_for_cache INT 3
# The RAM cache above the disk store: as large as Umbra cache.memory.
CONFIG proxy.config.cache.ram_cache.size INT $((ram_mb * 1024 * 1024))
# Keep-alive with clients and the origin, idle up to $ATS_KEEPALIVE_TIMEOUT s; no limit of
# connections or requests in flight that a round could reach.
CONFIG proxy.config.http.keep_alive_enabled_in INT 1
CONFIG proxy.config.http.keep_alive_enabled_out INT 1
CONFIG proxy.config.http.keep_alive_no_activity_timeout_in INT $ATS_KEEPALIVE_TIMEOUT
CONFIG proxy.config.http.keep_alive_no_activity_timeout_out INT $ATS_KEEPALIVE_TIMEOUT
CONFIG proxy.config.net.connections_throttle INT 10000
CONFIG proxy.config.net.max_connections_in INT 10000
CONFIG proxy.config.net.max_requests_in INT 0
CONFIG proxy.config.http.per_server.connection.max INT 0
# Errors only (nginx: access_log off), in the temp dir.
CONFIG proxy.config.log.logging_enabled INT 1
CONFIG proxy.config.log.logfile_dir STRING $dir/log
EOF
    echo "$dir/cache $((disk_mb))M" >"$dir/etc/storage.config"
    echo "map / http://127.0.0.1:$origin/" >"$dir/etc/remap.config"
    cat >"$dir/etc/ip_allow.yaml" <<EOF
ip_allow:
  - apply: in
    ip_addrs: 127.0.0.1
    action: allow
    methods: ALL
EOF
    for f in plugin.config volume.config hosting.config cache.config parent.config ssl_multicert.config; do : >"$dir/etc/$f"; done
    if [[ -n $user ]]; then chown -R "$user" "$dir"; fi
    bench_start ats "$dir/traffic.out" traffic_server --run-root="$dir/runroot.yaml"
    ATS_PID=$BENCH_LAST_PID
    wait_port ats "$ATS_PID" "$ATS_PORT" "$dir/traffic.out"
}

# check_get NAME URL BYTES: the URL answers 200 with exactly BYTES of body, or die.
check_get() {
    local name=$1 url=$2 want=$3 out code size
    out=$(curl -s -o /dev/null --max-time 10 -w '%{http_code} %{size_download}' "$url") ||
        die "$name: curl $url failed (exit $?)"
    read -r code size <<<"$out"
    [[ $code == 200 ]] || die "$name: GET $url answered $code, expected 200"
    [[ $size == "$want" ]] || die "$name: GET $url gave $size bytes, expected $want"
    log "$name: GET $url -> 200, $size bytes"
}

# parse_wrk FILE: prints "RPS MBPS REQUESTS BYTES ERRORS" where MBPS is in MB/s (MB = 2^20
# bytes, as wrk counts), REQUESTS the complete responses, BYTES what wrk read (heads and
# bodies, and the part of the responses in flight when it stopped; wrk prints it with 2
# decimals of its unit, so within 0.5%) and ERRORS a short text: "none", or what wrk
# reported (socket errors, and responses with a status of 400 or more, which it calls
# "Non-2xx or 3xx").
parse_wrk() {
    awk '
    function bytes(v,   n, unit, m) {
        n = v + 0; unit = v; sub(/^[0-9.]+/, "", unit)
        m = 1
        if (unit == "KB") m = 1024
        else if (unit == "MB") m = 1024 ^ 2
        else if (unit == "GB") m = 1024 ^ 3
        else if (unit == "TB") m = 1024 ^ 4
        else if (unit != "B") { bad = "unknown unit " v; return -1 }
        return n * m
    }
    /^Requests\/sec:/ { rps = $2 }
    /^Transfer\/sec:/ { mbps = bytes($2) / 1024 ^ 2 }
    / requests in .* read$/ { reqs = $1; read = bytes($5) }
    /Socket errors:/ {
        s = $0; sub(/^ *Socket errors: */, "", s)
        split(s, parts, /, */); tot = 0
        for (i in parts) { split(parts[i], kv, " "); tot += kv[2] }
        if (tot > 0) err = err (err ? "; " : "") "socket errors: " s
    }
    /Non-2xx or 3xx responses:/ { err = err (err ? "; " : "") "non-2xx/3xx: " $NF }
    END {
        if (bad) err = err (err ? "; " : "") bad
        if (rps == "" || mbps == "" || read == "") { print "parse-error"; exit 1 }
        printf "%s %.2f %s %.0f %s\n", rps, mbps, (reqs == "" ? 0 : reqs), read, (err ? err : "none")
    }' "$1"
}

# parse_wrk_latency FILE: prints "P50 P99" in ms from wrk's --latency distribution ("-"
# for a missing one).
parse_wrk_latency() {
    awk '
    function ms(v,   n, u) {
        n = v + 0; u = v; sub(/^[0-9.]+/, "", u)
        if (u == "us") return n / 1000
        if (u == "ms") return n
        if (u == "s") return n * 1000
        if (u == "m") return n * 60000
        return -1
    }
    /^ *50% / { p50 = ms($2) }
    /^ *99% / { p99 = ms($2) }
    END {
        printf "%s %s\n", (p50 == "" || p50 < 0 ? "-" : sprintf("%.2f", p50)),
                          (p99 == "" || p99 < 0 ? "-" : sprintf("%.2f", p99))
    }' "$1"
}

# run_timed OUT LIMIT CMD...: one client run, bounded by timeout LIMIT s, its output to OUT.
# Sets TIMED_RC to its exit status and, when that is 0, TIMED_CPU to the CPU time (user +
# system, seconds) it used ("-" otherwise).
run_timed() {
    local out=$1 limit=$2
    shift 2
    rm -f "$out.cpu"
    # In the background so that a signal's trap runs at once (and stops it) instead of
    # after the client's run. The subshell passes a SIGTERM on to timeout (which passes it
    # on to the client), and reports the CPU time of its children (timeout and the client)
    # with `times`.
    (
        p=
        trap '[[ -n $p ]] && kill -TERM "$p" 2>/dev/null; wait; exit 143' TERM
        timeout -k 5 "$limit" "$@" >"$out" 2>&1 </dev/null &
        p=$!
        c=0
        wait "$p" || c=$?
        times >"$out.cpu"
        exit "$c"
    ) &
    BENCH_WRK_PID=$!
    TIMED_RC=0
    wait "$BENCH_WRK_PID" || TIMED_RC=$?
    BENCH_WRK_PID=
    TIMED_CPU=-
    ((TIMED_RC == 0)) || return 0
    # The second line of `times`: the children's user and system time, as 1m2.345s.
    TIMED_CPU=$(awk 'function s(v,   m) { m = v; sub(/m.*/, "", m); sub(/^[0-9]+m/, "", v); sub(/s$/, "", v); return m * 60 + v }
        NR == 2 { printf "%.3f\n", s($1) + s($2) }' "$out.cpu" 2>/dev/null)
    [[ -n $TIMED_CPU ]] || TIMED_CPU=-
}

# run_wrk URL OUTFILE [CONNECTIONS [SCRIPT]]: one bounded wrk run (WRK_CONNECTIONS
# connections unless given; SCRIPT is a wrk Lua script); its raw output goes to OUTFILE.
# Sets WRK_CPU to the CPU time (user + system, seconds) that wrk used.
run_wrk() {
    local url=$1 out=$2 conns=${3:-$WRK_CONNECTIONS} script=${4:-}
    local args=(-t"$WRK_THREADS" -c"$conns" -d"${DURATION}s" --timeout "${WRK_TIMEOUT}s" --latency)
    [[ -n $script ]] && args+=(-s "$script")
    [[ $url =~ ^https?://[^/]*:([0-9]+)(/|$) ]] || die "internal: run_wrk: no port in $url"
    conn_watch_start "${BASH_REMATCH[1]}"
    run_timed "$out" $((DURATION + 30)) wrk "${args[@]}" "$url"
    conn_watch_end
    if ((TIMED_RC != 0)); then
        cat "$out" >&2
        die "wrk exited with $TIMED_RC against $url"
    fi
    # shellcheck disable=SC2034 # read by the scenarios
    WRK_CPU=$TIMED_CPU
}

# read_wrk FILE: wrk's figures (parse_wrk, parse_wrk_latency) into WRK_RPS, WRK_MBPS,
# WRK_REQS, WRK_BYTES, WRK_ERRS, WRK_P50 and WRK_P99.
read_wrk() {
    # shellcheck disable=SC2034 # read by the scenarios
    read -r WRK_RPS WRK_MBPS WRK_REQS WRK_BYTES WRK_ERRS <<<"$(parse_wrk "$1")" || {
        cat "$1" >&2
        die "could not parse wrk's output"
    }
    # shellcheck disable=SC2034
    read -r WRK_P50 WRK_P99 <<<"$(parse_wrk_latency "$1")"
}

# cpu_ticks PID...: CPU time (user + system, in clock ticks) used so far by the PIDs and
# their children (all threads of each: e.g. nginx's master and workers).
cpu_ticks() {
    local p pids=() t=0
    for p in "$@"; do
        pids+=("$p")
        # shellcheck disable=SC2207
        pids+=($(pgrep -P "$p" 2>/dev/null || true))
    done
    for p in "${pids[@]}"; do
        # Fields after the command name (which may hold spaces): utime is the 12th, stime
        # the 13th.
        local st
        st=$(cat "/proc/$p/stat" 2>/dev/null) || continue
        st=${st##*) }
        read -r -a f <<<"$st"
        t=$((t + f[11] + f[12]))
    done
    echo "$t"
}

# machine_busy_ticks: CPU time (ticks, all CPUs) the machine spent working so far (user,
# nice, system, irq, softirq: not idle, iowait or steal).
machine_busy_ticks() {
    awk '/^cpu / { print $2 + $3 + $4 + $7 + $8; exit }' /proc/stat
}

# cpu_pct TICKS SECONDS: TICKS as a percentage of one CPU over SECONDS (2 CPUs = 200%).
cpu_pct() {
    awk -v t="$1" -v s="$2" -v hz="$(getconf CLK_TCK)" \
        'BEGIN { if (s <= 0) print "-"; else printf "%.0f\n", t / hz / s * 100 }'
}

# now_s: wall-clock time in seconds with decimals.
now_s() { date '+%s.%N'; }

# busy_md [NOTE]: for the results file, the rounds in BUSY (nothing when none) after an
# explanation, and NOTE (a line) after it.
# shellcheck disable=SC2120 # NOTE is optional
busy_md() {
    local b
    ((${#BUSY[@]})) || return 0
    echo
    echo "Rounds during which the rest of the machine (other processes) used more than"
    if [[ -n ${1:-} ]]; then
        echo "$BUSY_OTHER_PCT% of a CPU: they measure the sharing with that load as much as the servers"
        echo "$1"
    else
        echo "$BUSY_OTHER_PCT% of a CPU: they measure the sharing with that load as much as the servers:"
    fi
    echo
    for b in "${BUSY[@]}"; do echo "- $b"; done
}

# each_round NAMES CMD [ARG...]: ROUNDS rounds of CMD ARG... NAME ROUND for each name of
# the array NAMES (each through bench_round), a second's pause after each; the order
# rotates by one each round, so that each name goes first in turn (with two, the first in
# odd rounds).
each_round() {
    local -n _er_names=$1
    local _er_n=${#_er_names[@]} _er_r _er_i
    shift
    for ((_er_r = 1; _er_r <= ROUNDS; _er_r++)); do
        for ((_er_i = 0; _er_i < _er_n; _er_i++)); do
            bench_round "$@" "${_er_names[$(((_er_i + _er_r - 1) % _er_n))]}" "$_er_r"
            sleep 1
        done
    done
}

# ---- rounds with wrong answers --------------------------------------------------------
#
# A round is a figure only if every answer in it was right (bench/README.md, "Method"). A
# scenario's round function (bench_round's CMD) checks the answers of its round and, when
# some are wrong, calls round_bad instead of recording the round's figures. bench_round
# then runs the round again, at most BENCH_RETRIES times, and fails the scenario (die: no
# figure, non-zero exit) when the last attempt was wrong too. Each rejected attempt is
# printed, listed at the end of the results file (REPEATS, repeats_md) and noted in its
# row's "repeated" column (REPEATED).

REPEATS=()
declare -A REPEATED=()
ROUND_BAD=
# The server of the round being run (bench_round's SERVER), for round_limits.
ROUND_SERVER=

# round_bad TEXT: the round being run has wrong answers, TEXT says which (appended to
# ROUND_BAD). The round function must then not record its figures.
round_bad() { ROUND_BAD+="${ROUND_BAD:+; }$1"; }

# bench_round CMD [CASE...] SERVER ROUND: runs CMD [CASE...] SERVER ROUND until it does not
# call round_bad, at most 1 + BENCH_RETRIES times, or dies. The repeats are noted in
# REPEATED under CASE...,SERVER (joined by commas: the scenarios' keys of their figures).
bench_round() {
    local a=("$@") n=$# try key label
    local r=${a[n - 1]}
    key=$(
        IFS=,
        echo "${a[*]:1:n-2}"
    )
    label="$(basename "$0" .sh) ${a[*]:1:n-2} round $r"
    ROUND_SERVER=${a[n - 2]}
    for ((try = 0; ; try++)); do
        ROUND_BAD=
        CONN_SEEN=
        "$@"
        [[ -z $ROUND_BAD ]] && return 0
        ((try < BENCH_RETRIES)) ||
            die "$label: refused ($ROUND_BAD), $((try + 1)) attempts in a row: no figure, the scenario fails"
        warn "$label: refused ($ROUND_BAD): not a figure; repeating the round (repeat $((try + 1)) of at most $BENCH_RETRIES)"
        REPEATS+=("$label, attempt $((try + 1)) of at most $((BENCH_RETRIES + 1)): $ROUND_BAD")
        REPEATED[$key]+="r$r: $ROUND_BAD. "
        sleep 1
    done
}

# repeated_md KEY: a row's "repeated" column: its rejected attempts, or "none".
repeated_md() {
    local v=${REPEATED[$1]:-none}
    echo "${v% }"
}

# repeats_md: for the end of the results file, the rounds that were repeated because of
# wrong answers (or a line saying that none was).
repeats_md() {
    local b
    echo
    if ((${#REPEATS[@]} == 0)); then
        echo "Wrong answers: none; no round was repeated (a round with wrong answers is repeated up to"
        echo "BENCH_RETRIES=$BENCH_RETRIES times, and the scenario fails when it stays wrong)."
        return 0
    fi
    echo "Rounds repeated because they were refused: wrong answers, or a limit of the server reached"
    echo "(these attempts are not in the figures; each round is repeated up to BENCH_RETRIES=$BENCH_RETRIES"
    echo "times, and the scenario fails when it stays refused):"
    echo
    for b in "${REPEATS[@]}"; do echo "- $b"; done
}

# warn_repeats: at the end, a warning when rounds were repeated.
warn_repeats() {
    if ((${#REPEATS[@]})); then
        warn "${#REPEATS[@]} round attempts had wrong answers and were repeated (listed in the results file)"
    fi
}

# ---- rounds that reach a limit of the server -------------------------------------------
#
# A round that reaches a limit of the server (its requests per connection, its connections)
# measures that limit: it is refused like a round with wrong answers (round_bad: repeated,
# then the scenario fails), whatever its figure. The limits are set far out of reach (the
# top of this file); these checks make sure that they stayed there.

# req_cap SERVER: the requests per client connection that SERVER (a round's server name)
# allows before it closes the connection, 0 for no limit: nginx's keepalive_requests (the
# rows named nginx...); Umbra, Varnish, ATS and Apache (MaxKeepAliveRequests 0) have none.
req_cap() {
    case $1 in
    nginx*) echo "$NGINX_KEEPALIVE_REQUESTS" ;;
    *) echo 0 ;;
    esac
}

# conn_watch_start PORT: while a client runs its round against 127.0.0.1:PORT, counts its
# established connections to PORT (ss, the sockets whose destination is PORT) three times,
# 0.1 s apart, from 3/4 of DURATION, keeping the largest count, for conn_watch_end. A
# client that reopens what the server closed (wrk) keeps its count; one that does not
# (h2load after a GOAWAY) shows fewer.
CONN_WATCH_PID=
CONN_SEEN=
conn_watch_start() {
    local port=$1
    command -v ss >/dev/null 2>&1 || die "ss not found (iproute2): the rounds' connection check needs it"
    CONN_WATCH_OUT=$BENCH_TMP/conn-watch.$port
    CONN_WATCH_AT=$(awk -v d="$DURATION" 'BEGIN { printf "%.1f\n", d * 0.75 }')
    rm -f "$CONN_WATCH_OUT"
    (
        sleep "$CONN_WATCH_AT"
        best=0
        for i in 1 2 3; do
            n=$(ss -Htn state established "( dport = :$port )" 2>/dev/null | wc -l)
            ((n > best)) && best=$n
            ((i < 3)) && sleep 0.1
        done
        echo "$best" >"$CONN_WATCH_OUT"
    ) &
    CONN_WATCH_PID=$!
}

# conn_watch_end: after the client's run, CONN_SEEN: the largest count of conn_watch_start
# ("-" when the client ended before the count was taken).
conn_watch_end() {
    [[ -n $CONN_WATCH_PID ]] || return 0
    # A client that stopped early: the count is not waited for.
    if kill -0 "$CONN_WATCH_PID" 2>/dev/null && [[ ! -s $CONN_WATCH_OUT ]]; then
        local i
        for ((i = 0; i < 10; i++)); do
            kill -0 "$CONN_WATCH_PID" 2>/dev/null || break
            sleep 0.1
        done
    fi
    stop_pid "$CONN_WATCH_PID"
    CONN_WATCH_PID=
    CONN_SEEN=$(cat "$CONN_WATCH_OUT" 2>/dev/null || true)
    [[ $CONN_SEEN =~ ^[0-9]+$ ]] || CONN_SEEN=-
}

# round_limits DONE CONNS: after a round of DONE successful requests on CONNS client
# connections to the round's server (ROUND_SERVER), round_bad when
#   - DONE reaches half of CONNS x the server's requests per connection (req_cap): one
#     connection may have met the limit, and at CONNS x the limit exactly the figure is the
#     limit over the round's length;
#   - fewer than CONNS client connections were open near the end of the round (CONN_SEEN,
#     conn_watch_start): the server closed some and the client did not reopen them.
round_limits() {
    local done=$1 conns=$2 cap
    cap=$(req_cap "$ROUND_SERVER")
    if ((cap > 0 && done * 2 >= conns * cap)); then
        if ((done == conns * cap)); then
            round_bad "$done requests = $conns connections x $ROUND_SERVER's limit of $cap requests per connection: the figure is the limit"
        else
            round_bad "$done requests on $conns connections reach half of $ROUND_SERVER's limit of $cap requests per connection: the figure may be the limit's"
        fi
    fi
    if [[ -n $CONN_SEEN && $CONN_SEEN != - ]] && ((CONN_SEEN < conns)); then
        round_bad "$CONN_SEEN of $conns client connections open at ${CONN_WATCH_AT} s: the server closed the others and the client did not reopen them"
    fi
}

# The bytes per complete response that a wrk round read (wrk_check) may be below what one
# curl GET got (answer_bytes) by RESP_TOL (wrk rounds its count), and above it by RESP_TOL
# and RESP_SLACK bytes per response (heads that grow during a run: Age, X-Varnish's ids,
# the test origin's request counter), plus one response per connection: those in flight
# when wrk stopped, which it read in part.
RESP_TOL=0.02
RESP_SLACK=32

# answer_bytes NAME URL [CURL_OPTION...]: prints the bytes (head and body) of URL's answer
# to one GET, or dies (for wrk_check's EXPECT).
answer_bytes() {
    local name=$1 url=$2 out
    shift 2
    out=$(curl -s -o /dev/null --max-time 20 -w '%{size_header} %{size_download}' "$@" "$url") ||
        die "$name: curl $url failed"
    [[ $out =~ ^([1-9][0-9]*)\ ([0-9]+)$ ]] || die "$name: curl $url: head and body sizes '$out'"
    echo $((BASH_REMATCH[1] + BASH_REMATCH[2]))
}

# wrk_check EXPECT CONNS: after read_wrk, round_bad when wrk counted socket errors or
# responses with a status of 400 or more, completed no response, or read a number of bytes
# that does not fit EXPECT bytes per response (head and body, answer_bytes) with CONNS
# connections: answers of another size (an error page, a redirect, a short body) with
# the right framing. (A body that does not match its framing makes a socket error.) Also
# round_limits: the server's limits out of the round's reach.
wrk_check() {
    local expect=$1 conns=$2 v
    [[ $WRK_ERRS == none ]] || round_bad "wrk: $WRK_ERRS"
    if ((WRK_REQS == 0)); then
        round_bad "wrk: no complete response"
        return 0
    fi
    round_limits "$WRK_REQS" "$conns"
    v=$(awk -v b="$WRK_BYTES" -v n="$WRK_REQS" -v e="$expect" -v c="$conns" -v t="$RESP_TOL" -v sl="$RESP_SLACK" '
        BEGIN { if (b < n * e * (1 - t) || b > n * (e * (1 + t) + sl) + c * e)
                    printf "%.1f bytes per response where one GET got %d", b / n, e }')
    [[ -z $v ]] || round_bad "wrk read $WRK_BYTES bytes in $WRK_REQS responses, $v"
}

# answer_check URL REF [CURL_OPTION...]: after a round, one GET of URL must answer 200 with
# exactly the bytes of the file REF; else round_bad.
answer_check() {
    local url=$1 ref=$2 out code size
    shift 2
    out=$(curl -s -o "$BENCH_TMP/answer.body" --max-time 20 -w '%{http_code} %{size_download}' "$@" "$url") || {
        round_bad "after the round, curl $url failed"
        return 0
    }
    read -r code size <<<"$out"
    if [[ $code != 200 ]] || ! cmp -s "$BENCH_TMP/answer.body" "$ref"; then
        round_bad "after the round, GET $url answered $code with $size bytes, not 200 with the $(stat -c %s "$ref") expected bytes"
    fi
}

# ab_check FILE BYTES: the answers of an ab run (its output in FILE) whose responses
# should each have a body of BYTES: prints "none", or what was wrong: failed requests
# (connect, receive, length: a body whose length differs from the first one's, exceptions),
# non-2xx responses, a first body (Document Length) of another size, or body bytes (HTML
# transferred) that are not BYTES for each complete request (with -t, ab also counts the
# bodies of up to one request per connection that it did not count as complete).
ab_check() {
    awk -v want="$2" '
    /^Concurrency Level:/ { conc = $3 }
    /^Document Length:/ { dl = $3 }
    /^Complete requests:/ { done = $3 }
    /^Failed requests:/ { if ($3 + 0 > 0) { err = err (err ? "; " : "") "failed: " $3; fail = 1 } }
    /^ *\(Connect:/ { if (fail) { s = $0; sub(/^ */, "", s); err = err " " s } }
    /^Non-2xx responses:/ { err = err (err ? "; " : "") "non-2xx: " $3 }
    /^HTML transferred:/ { html = $3 }
    END {
        if (dl != want) err = err (err ? "; " : "") "document length " dl ", expected " want
        if (html == "" || html < done * want || html > (done + conc) * want)
            err = err (err ? "; " : "") "body bytes " html " for " done " complete requests of " want
        print (err ? err : "none")
    }' "$1"
}

# parse_h2load FILE BYTES INFLIGHT: "REQ_PER_S DONE ERRORS" of one timed h2load run (-D)
# whose responses each carry BYTES of body, with at most INFLIGHT streams in flight (its -c
# x -m); ERRORS "none", or what was wrong: more failed or errored requests than the streams
# in flight when h2load stopped (it may count those as both), timed-out requests, statuses
# other than 2xx, 2xx heads or body bytes ("data") below DONE (x BYTES) or above it by more
# than the streams in flight (their heads and partial bodies count). (h2 and h2up.)
parse_h2load() {
    awk -v want="$2" -v inflight="$3" '
    /^finished in/ { for (i = 1; i <= NF; i++) if ($(i + 1) == "req/s,") rps = $i }
    /^requests:/ {
        done = $8
        if ($10 > inflight) err = err (err ? "; " : "") "failed: " $10
        if ($12 > inflight) err = err (err ? "; " : "") "errored: " $12
        if ($14 > 0) err = err (err ? "; " : "") "timeout: " $14
    }
    /^status codes:/ {
        ok = $3
        if ($5 > 0 || $7 > 0 || $9 > 0) err = err (err ? "; " : "") "non-2xx: " $0
    }
    /^traffic:/ { if ($NF == "data") { data = $(NF - 1); gsub(/[()]/, "", data); data += 0 } }
    END {
        if (rps == "") { print "parse-error"; exit 1 }
        if (done == 0) err = err (err ? "; " : "") "no request done"
        if (ok < done || ok > done + inflight) err = err (err ? "; " : "") ok " 2xx of " done " succeeded"
        if (data < done * want || data > (done + inflight) * want)
            err = err (err ? "; " : "") "body bytes " data ", expected " done " x " want
        printf "%s %s %s\n", rps, done, (err ? err : "none")
    }' "$1"
}

# round_cpu_start PID...: before a round, the CPU ticks of each PID ("" for none), the
# machine's busy ticks and the time, for round_cpu_end.
round_cpu_start() {
    local p
    ROUND_T0=()
    for p in "$@"; do
        if [[ -n $p ]]; then ROUND_T0+=("$(cpu_ticks "$p")"); else ROUND_T0+=(0); fi
    done
    ROUND_M0=$(machine_busy_ticks)
    ROUND_W0=$(now_s)
}

# round_cpu_end CLIENT_CPU PID...: after the round (the PIDs of round_cpu_start; CLIENT_CPU
# the client's CPU seconds, e.g. WRK_CPU, or "-"). Sets ROUND_SECS, ROUND_TICKS and
# ROUND_PCT (each PID's ticks in the round, and as % of one CPU: 0 and "-" for ""),
# ROUND_CLIENT_PCT, and ROUND_OTHER_PCT: the rest of the machine's busy time, less the
# client's and the PIDs' ("-" when the client's is unknown).
round_cpu_end() {
    local client=$1 w1 m1 i=0 p t
    shift
    w1=$(now_s)
    m1=$(machine_busy_ticks)
    ROUND_TICKS=()
    ROUND_PCT=()
    for p in "$@"; do
        t=0
        if [[ -n $p ]]; then t=$(($(cpu_ticks "$p") - ROUND_T0[i])); fi
        ROUND_TICKS+=("$t")
        i=$((i + 1))
    done
    ROUND_SECS=$(awk -v a="$ROUND_W0" -v b="$w1" 'BEGIN { print b - a }')
    i=0
    for p in "$@"; do
        if [[ -n $p ]]; then ROUND_PCT+=("$(cpu_pct "${ROUND_TICKS[i]}" "$ROUND_SECS")"); else ROUND_PCT+=(-); fi
        i=$((i + 1))
    done
    ROUND_CLIENT_PCT=$(awk -v c="$client" -v s="$ROUND_SECS" 'BEGIN { if (c == "-" || s <= 0) print "-"; else printf "%.0f\n", c / s * 100 }')
    # A "-" counts as 0 here.
    # shellcheck disable=SC2034 # read by the scenarios
    ROUND_OTHER_PCT=$(awk -v m="$(cpu_pct $((m1 - ROUND_M0)) "$ROUND_SECS")" -v w="$ROUND_CLIENT_PCT" -v rest="${ROUND_PCT[*]}" '
        BEGIN { if (w == "-") { print "-"; exit }
                n = split(rest, p, " "); o = m - w; for (i = 1; i <= n; i++) o -= p[i]
                printf "%.0f\n", o }')
}

# us_each TICKS COUNT DECIMALS: TICKS of CPU time per one of COUNT (requests, connections),
# in microseconds ("-" for no COUNT).
us_each() {
    awk -v t="$1" -v n="$2" -v d="$3" -v hz="$(getconf CLK_TCK)" \
        'BEGIN { if (n <= 0) print "-"; else printf "%." d "f\n", t / hz / n * 1e6 }'
}

# add_figures KEY ARRAY=VALUE...: appends VALUE and a space to ARRAY[KEY] (a round's figure).
add_figures() {
    local key=$1 a ref
    shift
    for a in "$@"; do
        ref="${a%%=*}[$key]"
        printf -v "$ref" '%s%s ' "${!ref:-}" "${a#*=}"
    done
}

# Rounds during which the rest of the machine was busier than this (% of one CPU) are
# listed in BUSY by note_busy.
BUSY_OTHER_PCT=50
BUSY=()

# note_busy OTHER_PCT CASE SERVER ROUND: other processes took a large share of the CPUs
# (the round measures them too): a warning and an entry in BUSY.
note_busy() {
    if [[ $1 != - ]] && (($1 > BUSY_OTHER_PCT)); then
        warn "$3 $2 round $4: the rest of the machine used $1% of a CPU during the round"
        BUSY+=("$2 $3 round $4: other $1%")
    fi
}

# warn_busy: at the end, a warning when note_busy listed rounds.
warn_busy() {
    if ((${#BUSY[@]})); then
        warn "${#BUSY[@]} wrk rounds ran while other processes used more than $BUSY_OTHER_PCT% of a CPU (listed in the results file)"
    fi
}

# median NUMBERS...: the median (mean of the two middle values for an even count).
median() {
    printf '%s\n' "$@" | sort -g | awk '{ v[NR] = $1 }
        END { if (NR == 0) exit 1
              if (NR % 2) printf "%.2f\n", v[(NR + 1) / 2]
              else printf "%.2f\n", (v[NR / 2] + v[NR / 2 + 1]) / 2 }'
}

# medianx VALUES...: the median, or "-" when any value is missing.
medianx() {
    local v
    for v in "$@"; do
        if [[ $v == - ]]; then
            echo -
            return
        fi
    done
    median "$@"
}

# median_of ARRAY KEY: the medianx of ARRAY[KEY]'s figures (add_figures' list).
median_of() {
    local ref="$1[$2]"
    # shellcheck disable=SC2086
    medianx ${!ref}
}

# medians KEY ARRAY...: median_of ARRAY KEY of each ARRAY, on one line (for read).
medians() {
    local key=$1 a m=()
    shift
    for a in "$@"; do m+=("$(median_of "$a" "$key")"); done
    echo "${m[*]}"
}

# median_map DEST ARRAY PREFIX NAME...: empties the associative array DEST, then sets
# DEST[NAME] to median_of ARRAY PREFIXNAME for each NAME (e.g. each server's median req/s).
median_map() {
    local -n _mm_dest=$1
    local _mm_src=$2 _mm_pre=$3 _mm_s
    shift 3
    _mm_dest=()
    for _mm_s in "$@"; do _mm_dest["$_mm_s"]=$(median_of "$_mm_src" "$_mm_pre$_mm_s"); done
}

# fixed DECIMALS VAR...: rounds each variable to DECIMALS decimals, unless it is "-".
fixed() {
    local _f_d=$1 _f_v
    shift
    for _f_v in "$@"; do
        if [[ ${!_f_v} != - ]]; then printf -v "$_f_v" '%.*f' "$_f_d" "${!_f_v}"; fi
    done
}

# ratio A B: A/B with 2 decimals, "-" when either is missing or B is 0.
ratio() {
    if [[ -z $1 || -z $2 || $1 == - || $2 == - ]]; then
        echo -
        return
    fi
    awk -v a="$1" -v b="$2" 'BEGIN { if (b == 0) print "-"; else printf "%.2f\n", a / b }'
}

# umbra_ratio SERVER ARRAY REF: for SERVER umbra, when REF is among SERVERS, the ratio of
# ARRAY[umbra] to ARRAY[REF]; else "-".
umbra_ratio() {
    local a="$2[umbra]" b="$2[$3]"
    if [[ $1 == umbra ]] && bench_uses "$3"; then ratio "${!a}" "${!b}"; else echo -; fi
}

# atleast A B [YES NO]: YES ("meets") when A >= B, else NO ("below"); "-" for a missing A.
atleast() { meets_cmp ">=" "$@"; }

# atmost A B [YES NO]: the same for A <= B.
atmost() { meets_cmp "<=" "$@"; }

# meets_cmp OP A B [YES NO]: atleast's (OP >=) and atmost's (OP <=) comparison.
meets_cmp() {
    if [[ $2 == - ]]; then
        echo -
        return
    fi
    awk -v op="$1" -v a="$2" -v b="$3" -v y="${4:-meets}" -v n="${5:-below}" \
        'BEGIN { print ((op == ">=" ? a >= b : a <= b) ? y : n) }'
}

# md_row FIELD...: one row of a Markdown table: "| FIELD | FIELD ... |".
md_row() {
    local row="|" f
    for f in "$@"; do row+=" $f |"; done
    printf '%s\n' "$row"
}

# md_compare_head: the head of the table of the scenarios that compare cases with a
# target (hit, lua, compress): one row per case and server.
md_compare_head() {
    md_row case server "median req/s" compared ratio target met "p50 ms" "p99 ms" "CPU server %" "server us/req" \
        "CPU wrk %" "CPU other %" "origin reqs/round" "req/s per round" repeated
    md_row --- --- ---: --- ---: --- --- ---: ---: ---: ---: ---: ---: ---: --- ---
}

# results_md NAME: the path of a new results file of scenario NAME (BENCH_RESULTS made).
# When BENCH_RESULTS_LIST names a file (bench/run sets it), the path is also appended to it.
results_md() {
    local f
    mkdir -p "$BENCH_RESULTS"
    f=$BENCH_RESULTS/$1-$(date '+%Y-%m-%d-%H%M%S').md
    if [[ -n ${BENCH_RESULTS_LIST:-} ]]; then echo "$f" >>"$BENCH_RESULTS_LIST"; fi
    echo "$f"
}

# each_verdict CMD PREFIX KEY...: CMD "PREFIX/KEY: VERDICT[KEY]" for each KEY that has one
# in the scenario's VERDICT array (CMD: echo for the results file, log).
each_verdict() {
    local cmd=$1 prefix=$2 k
    shift 2
    for k in "$@"; do
        if [[ -n ${VERDICT[$k]:-} ]]; then "$cmd" "$prefix/$k: ${VERDICT[$k]}"; fi
    done
}

# bench_env_md [WRK]: describes the run (for the results file); WRK replaces the wrk
# arguments shown (default: -tWRK_THREADS -cWRK_CONNECTIONS -dDURATIONs).
# shellcheck disable=SC2120 # WRK is optional
bench_env_md() {
    echo "- date: $(date -u '+%Y-%m-%d %H:%M:%S UTC')"
    echo "- machine: $(bench_machine)"
    echo "- umbra: ${UMBRA_BIN:-not run}, commit $(bench_commit)"
    if bench_uses nginx; then echo "- nginx: $(nginx -v 2>&1 | sed 's/.*: //')"; fi
    if bench_uses haproxy; then echo "- haproxy: $(haproxy -v 2>&1 | head -n1)"; fi
    if bench_uses varnish; then echo "- varnish: $(varnishd -V 2>&1 | head -n1)"; fi
    echo "- wrk: $(wrk --version 2>&1 | head -n1 | awk '{print $2}') ${1:-"-t$WRK_THREADS -c$WRK_CONNECTIONS -d${DURATION}s"}"
    echo "- rounds: $ROUNDS, alternating which server goes first; figures are medians of the rounds"
    echo "- wrong answers: a round with any (or that reached a limit of the server) is refused and repeated, up to $BENCH_RETRIES times, then the scenario fails; repeated here: ${#REPEATS[@]} (listed at the end)"
    echo "- servers: $SERVERS; their exact settings at the end"
    echo "- load average at the end: $(cut -d" " -f1-3 /proc/loadavg) (other processes on the machine skew the figures)"
}

# bench_commit: the commit measured, "HASH (clean tree)" or "HASH (dirty tree: N files
# changed or untracked)"; BENCH_COMMIT instead when it is set (bench/run sets it as the run
# starts, for all its scenarios).
bench_commit() {
    local rev n
    if [[ -n ${BENCH_COMMIT:-} ]]; then
        echo "$BENCH_COMMIT"
        return 0
    fi
    rev=$(git -C "$BENCH_ROOT" rev-parse --short HEAD 2>/dev/null) || {
        echo "unknown (not a git checkout)"
        return 0
    }
    n=$(git -C "$BENCH_ROOT" status --porcelain 2>/dev/null | wc -l)
    if ((n > 0)); then
        echo "$rev (dirty tree: $n files changed or untracked)"
    else
        echo "$rev (clean tree)"
    fi
}

# bench_machine: one line: CPUs, CPU model, memory, kernel.
bench_machine() {
    printf '%s CPUs (%s), %s RAM, %s\n' "$(nproc)" \
        "$(grep -m1 'model name' /proc/cpuinfo 2>/dev/null | sed 's/.*: //')" \
        "$(awk '$1 == "MemTotal:" { printf "%.1f GiB", $2 / 1048576 }' /proc/meminfo)" "$(uname -sr)"
}

# configs_md: for the end of the results file, the exact settings of the servers the
# scenario ran (those it started are in its temp dir): nginx's nginx.conf, HAProxy's
# haproxy.cfg, Umbra's config.lua, Varnish's command line and the threads it had before measuring
# (VARNISH_THREADS_SEEN, when the scenario set it), Traffic Server's config files.
configs_md() {
    echo
    echo "## Settings of the servers"
    echo
    echo "Exactly as this run used them (ports and temp paths are this run's)."
    if [[ -f $BENCH_TMP/nginx/nginx.conf ]]; then
        echo
        echo "nginx $(nginx -v 2>&1 | sed 's/.*: //'), \`nginx.conf\`:"
        echo
        echo '```nginx'
        cat "$BENCH_TMP/nginx/nginx.conf"
        echo '```'
    fi
    if [[ -f $BENCH_TMP/varnish/cmdline ]]; then
        echo
        echo "$(varnishd -V 2>&1 | head -n1), its command line (other parameters at their defaults):"
        echo
        echo '```sh'
        cat "$BENCH_TMP/varnish/cmdline"
        echo '```'
        if [[ -n ${VARNISH_THREADS_SEEN:-} ]]; then echo; echo "$VARNISH_THREADS_SEEN"; fi
    fi
    if [[ -f $BENCH_TMP/ats/etc/records.config ]]; then
        echo
        echo "$(traffic_server -V 2>&1 | grep -m1 '^Traffic Server' | awk '{ print $1, $2, $3 }'), its records.config (the rest at its defaults), storage.config and remap.config:"
        echo
        echo '```'
        cat "$BENCH_TMP/ats/etc/records.config" "$BENCH_TMP/ats/etc/storage.config" "$BENCH_TMP/ats/etc/remap.config"
        echo '```'
    fi
    if [[ -f $BENCH_TMP/haproxy/haproxy.cfg ]]; then
        echo
        echo "$(haproxy -v 2>&1 | head -n1 | awk '{ print $1, $2, $3 }'), \`haproxy.cfg\` (other settings at their defaults):"
        echo
        echo '```'
        cat "$BENCH_TMP/haproxy/haproxy.cfg"
        echo '```'
    fi
    if [[ -f $BENCH_TMP/umbra/config.lua ]]; then
        echo
        echo "Umbra ($UMBRA_BIN), \`config.lua\` (other settings at their defaults):"
        echo
        echo '```lua'
        cat "$BENCH_TMP/umbra/config.lua"
        echo '```'
    fi
}
