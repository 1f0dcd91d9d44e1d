#!/usr/bin/env bash
# Scenario "h2up": HTTP/2 to the backend (issue 31). Umbra with upstreams.NAME.protocol =
# "h2" against HAProxy 2.6 with `server ... proto h2`, both uncached, 2 workers / threads,
# in front of one HTTP/2 backend (nghttpd, prior knowledge), h2load speaking HTTP/2 with
# prior knowledge to each proxy, in alternating rounds:
#   1k    GET of a 1 KiB file: req/s, and the backend connections each proxy used;
#   grpc  unary gRPC calls (POST of a 5-byte-prefixed message, content-type
#         application/grpc, te: trailers; the answer a message and a grpc-status trailer),
#         measured only when every proxy carries the trailer (H2UP_GRPC).
# The backend alone (h2load straight to nghttpd) is measured first, once per case.
# Targets (Umbra / HAProxy): 1k >= 1.0 with at most 2 backend connections per worker;
# grpc >= 1.0. See bench/README.md.
set -euo pipefail
# Every server of this scenario by default, unless SERVERS says otherwise.
: "${SERVERS:=haproxy umbra}"
BENCH_KNOWN_SERVERS="haproxy umbra"
# shellcheck source=bench/lib.sh
. "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

# h2load's connections and streams per connection (the h2 scenario's knobs).
: "${H2_CONNECTIONS:=10}"
: "${H2_STREAMS:=32}"
# The backend: nghttpd's worker threads and its SETTINGS_MAX_CONCURRENT_STREAMS (its own
# default, 100: a proxy with more streams in flight to it than that needs a second
# connection).
: "${H2UP_BACKEND_WORKERS:=1}"
: "${H2UP_BACKEND_STREAMS:=100}"
# auto: the grpc case runs when every proxy measured passes its trailer on (else it is
# skipped, and the results file says why); 0: never.
: "${H2UP_GRPC:=auto}"
# HAProxy's http-reuse: "always" lets any request share an HTTP/2 backend connection, the
# first of a client connection too, as Umbra's client does ("safe", HAProxy's default,
# gives the first request of each client connection a backend connection of its own).
: "${HAPROXY_HTTP_REUSE:=always}"
# 1: also measure the backend directly, once per case, before the proxies.
: "${BACKEND_DIRECT:=1}"
# Both proxies' limit of concurrent streams per client connection (as in h2.sh).
H2_MAX_STREAMS=$((H2_STREAMS > 128 ? H2_STREAMS : 128))
INFLIGHT=$((H2_CONNECTIONS * H2_STREAMS))
# How often the backend connections are sampled during a round (seconds).
CONNS_INTERVAL=0.5
WORKERS=2

SMALL=1024
GRPC_PATH=/bench.Echo/Unary.grpc
declare -A URLPATH=([1k]=/1k.bin [grpc]=$GRPC_PATH)
declare -A TARGET=([1k]=1.0 [grpc]=1.0)
CASES=(1k grpc)

need h2load nghttp nghttpd haproxy curl python3 awk timeout pgrep getconf cmp
[[ $H2_CONNECTIONS =~ ^[1-9][0-9]*$ ]] || die "H2_CONNECTIONS must be a positive integer (got '$H2_CONNECTIONS')"
[[ $H2_STREAMS =~ ^[1-9][0-9]*$ ]] || die "H2_STREAMS must be a positive integer (got '$H2_STREAMS')"
[[ $H2UP_BACKEND_WORKERS =~ ^[1-9][0-9]*$ ]] || die "H2UP_BACKEND_WORKERS must be a positive integer"
[[ $H2UP_BACKEND_STREAMS =~ ^[1-9][0-9]*$ ]] || die "H2UP_BACKEND_STREAMS must be a positive integer"
[[ $H2UP_GRPC == auto || $H2UP_GRPC == 0 ]] || die "H2UP_GRPC must be auto or 0 (got '$H2UP_GRPC')"
[[ $HAPROXY_HTTP_REUSE =~ ^(never|safe|aggressive|always)$ ]] || die "HAPROXY_HTTP_REUSE: never, safe, aggressive or always"
bench_init
if bench_uses umbra; then ensure_umbra; fi
raise_nofile $((4 * H2_CONNECTIONS + 1024))
read -r -a SRV <<<"$SERVERS"

# ---- the backend: nghttpd, one for each case ------------------------------------------
#
# nghttpd serves files and answers a POST with the file at its path, so the grpc case is a
# unary call to a service that always answers the same message: its file is one gRPC
# message (flag 0, a 4-byte length, the bytes), served as application/grpc (a mime.types
# of its own: nghttpd takes the type from the extension) with a grpc-status trailer
# (--trailer, on every answer with a body). nghttpd speaks HTTP/2 only: an answer through a
# proxy shows that the proxy spoke HTTP/2 to it.
DOC=$BENCH_TMP/docroot
mkdir -p "$DOC/1k" "$DOC/grpc/bench.Echo"
make_file "$DOC/1k/1k.bin" "$SMALL"
cp "$DOC/1k/1k.bin" "$BENCH_TMP/ref.1k"
# grpc_frame TEXT: TEXT as one uncompressed gRPC message.
grpc_frame() { printf '\0'; printf '%08x' "${#1}" | xxd -r -p; printf '%s' "$1"; }
need xxd
grpc_frame "a unary request of the bench" >"$BENCH_TMP/grpc.req"
grpc_frame "the answer of the bench's unary call, a little longer than the request" >"$DOC/grpc/bench.Echo/Unary.grpc"
cp "$DOC/grpc/bench.Echo/Unary.grpc" "$BENCH_TMP/ref.grpc"
echo "application/grpc grpc" >"$BENCH_TMP/grpc.mime.types"
declare -A SIZE=([1k]=$SMALL [grpc]=$(stat -c %s "$BENCH_TMP/ref.grpc"))

declare -A PORT PID BPORT BPID BACKEND_CMD
# start_backend CASE ARG...: nghttpd for CASE (its docroot TMP/docroot/CASE), with ARG...
start_backend() {
    local k=$1 dir=$BENCH_TMP/backend-$1 p
    shift
    mkdir -p "$dir"
    p=$(free_port)
    local args=(--no-tls -a 127.0.0.1 -n "$H2UP_BACKEND_WORKERS" -m "$H2UP_BACKEND_STREAMS" -d "$DOC/$k" "$@" "$p")
    BACKEND_CMD[$k]="nghttpd$(printf ' %q' "${args[@]}")"
    bench_start "backend-$k" "$dir/nghttpd.log" nghttpd "${args[@]}"
    wait_port "backend-$k" "$BENCH_LAST_PID" "$p" "$dir/nghttpd.log"
    BPORT[$k]=$p
    BPID[$k]=$BENCH_LAST_PID
}
start_backend 1k
start_backend grpc --mime-types-file="$BENCH_TMP/grpc.mime.types" --trailer "grpc-status: 0"

# url SERVER CASE: the case's URL at SERVER (backend: the case's nghttpd).
url() {
    if [[ $1 == backend ]]; then
        echo "http://127.0.0.1:${BPORT[$2]}${URLPATH[$2]}"
    else
        echo "http://127.0.0.1:${PORT[$1]}${URLPATH[$2]}"
    fi
}

# get_problem SERVER: "" when a GET of the 1 KiB file answers HTTP/2 200 with its bytes,
# else what was wrong.
get_problem() {
    local out
    out=$(curl -s --http2-prior-knowledge --max-time 20 -o "$BENCH_TMP/check.body" \
        -w '%{http_version} %{http_code}' "$(url "$1" 1k)") || {
        echo "curl $(url "$1" 1k) failed"
        return 0
    }
    if [[ $out != "2 200" ]]; then
        echo "GET ${URLPATH[1k]} answered HTTP/$out, not HTTP/2 200"
    elif ! cmp -s "$BENCH_TMP/check.body" "$BENCH_TMP/ref.1k"; then
        echo "GET ${URLPATH[1k]}: a body that is not the backend's file"
    fi
}

# grpc_problem SERVER: "" when a unary call answers HTTP/2 200, content-type
# application/grpc, the backend's message and a trailer grpc-status 0, else what was wrong.
# (curl for the head and body; nghttp -v, which prints every field it receives, for the
# trailer, which curl does not show.)
grpc_problem() {
    local u out
    u=$(url "$1" grpc)
    out=$(curl -s --http2-prior-knowledge --max-time 20 -o "$BENCH_TMP/grpc.body" -D "$BENCH_TMP/grpc.head" \
        -H 'content-type: application/grpc' -H 'te: trailers' --data-binary "@$BENCH_TMP/grpc.req" \
        -w '%{http_version} %{http_code}' "$u") || {
        echo "curl $u failed"
        return 0
    }
    if [[ $out != "2 200" ]]; then
        echo "POST $GRPC_PATH answered HTTP/$out, not HTTP/2 200"
    elif ! grep -qi '^content-type: application/grpc' "$BENCH_TMP/grpc.head"; then
        echo "POST $GRPC_PATH: no content-type application/grpc"
    elif ! cmp -s "$BENCH_TMP/grpc.body" "$BENCH_TMP/ref.grpc"; then
        echo "POST $GRPC_PATH: a body that is not the backend's message"
    elif ! timeout 20 nghttp -v -d "$BENCH_TMP/grpc.req" -H 'content-type: application/grpc' -H 'te: trailers' "$u" 2>&1 |
        grep -a -q -E '^\[ *[0-9.]+\] recv \(stream_id=[0-9]+\) grpc-status: 0$'; then
        echo "POST $GRPC_PATH: no grpc-status trailer in the answer"
    fi
}

# ---- the rounds' function ------------------------------------------------------------

# h2load_args CASE: what h2load sends besides the URL.
h2load_args() {
    if [[ $1 == grpc ]]; then
        printf '%s\n' -d "$BENCH_TMP/grpc.req" -H 'content-type: application/grpc' -H 'te: trailers'
    fi
}

# shellcheck disable=SC2034 # some are read by name (medians)
declare -A RATE CPU_S CPU_B CPU_C CPU_O US SEEN NEWC MAXOPEN MAXONE SPLIT
# The backend's CPU time per request when asked directly, per case (its round sets it).
declare -A BACKEND_US=()
# measure CASE SERVER ROUND (SERVER backend: the backend directly)
measure() {
    local k=$1 s=$2 r=$3 out spid='' cs cb cc co us rate n errs p i ready conns
    local seen=- newc=- maxopen=- maxone=- split=-
    [[ $s == backend ]] || alive "$s"
    kill -0 "${BPID[$k]}" 2>/dev/null || die "the backend of $k died during the run (logs in $BENCH_TMP/)"
    out=$BENCH_TMP/$k-$s-$r.txt
    if [[ $s != backend ]]; then
        spid=${PID[$s]}
        # The backend connections, sampled through the round (bench/h2up_conns.py).
        ready=$BENCH_TMP/conns.ready
        conns=$BENCH_TMP/conns-$k-$s-$r.txt
        rm -f "$ready"
        python3 "$BENCH_DIR/h2up_conns.py" "${BPORT[$k]}" "$spid" "$DURATION" "$CONNS_INTERVAL" "$ready" >"$conns" 2>&1 &
        BENCH_SAMPLER_PID=$!
        for ((i = 0; i < 100; i++)); do
            [[ -e $ready ]] && break
            kill -0 "$BENCH_SAMPLER_PID" 2>/dev/null || break
            sleep 0.05
        done
        [[ -e $ready ]] || die "bench/h2up_conns.py took no sample ($(cat "$conns"))"
    fi
    local extra=()
    mapfile -t extra < <(h2load_args "$k")
    round_cpu_start "${BPID[$k]}" "$spid"
    conn_watch_start "$([[ $s == backend ]] && echo "${BPORT[$k]}" || echo "${PORT[$s]}")"
    run_timed "$out" $((DURATION + 60)) h2load -t "$WRK_THREADS" -c "$H2_CONNECTIONS" -m "$H2_STREAMS" \
        -D "$DURATION" "${extra[@]}" "$(url "$s" "$k")"
    conn_watch_end
    if ((TIMED_RC != 0)); then
        tail -n 30 "$out" >&2
        die "h2load exited with $TIMED_RC against $(url "$s" "$k")"
    fi
    round_cpu_end "$TIMED_CPU" "${BPID[$k]}" "$spid"
    if [[ -n $spid ]]; then
        wait "$BENCH_SAMPLER_PID" || die "bench/h2up_conns.py failed: $(cat "$conns")"
        BENCH_SAMPLER_PID=
        read -r seen newc maxopen maxone split <"$conns" || die "bench/h2up_conns.py: '$(cat "$conns")'"
    fi
    read -r rate n errs <<<"$(parse_h2load "$out" "${SIZE[$k]}" "$INFLIGHT")" ||
        die "could not parse h2load's output ($out)"
    [[ $errs == none ]] || round_bad "$errs"
    # h2load does not reopen a connection that the server ends.
    round_limits "$n" "$H2_CONNECTIONS"
    # After the round, the server still answers right.
    if [[ $k == grpc ]]; then p=$(grpc_problem "$s"); else p=$(get_problem "$s"); fi
    [[ -z $p ]] || round_bad "after the round, $p"
    # Uncached: every answer came from the backend, which must have worked for each about
    # as much as when it is asked directly (at least a quarter of its CPU time per request
    # in the backend round; without that round, some CPU time at all).
    local bus
    bus=$(us_each "${ROUND_TICKS[0]}" "$n" 3)
    if [[ $s == backend ]]; then
        BACKEND_US[$k]=$bus
    elif [[ -n ${BACKEND_US[$k]:-} && $bus != - ]]; then
        awk -v a="$bus" -v b="${BACKEND_US[$k]}" 'BEGIN { exit !(a >= b / 4) }' ||
            round_bad "the backend used $bus us of CPU per request, under a quarter of its $(printf '%s' "${BACKEND_US[$k]}") us when asked directly: answers from elsewhere (a cache?)"
    elif ((ROUND_TICKS[0] <= 0)); then
        round_bad "the backend used no CPU during the round: answers from elsewhere (a cache?)"
    fi
    cb=${ROUND_PCT[0]} cs=${ROUND_PCT[1]} cc=$ROUND_CLIENT_PCT co=$ROUND_OTHER_PCT
    us=-
    [[ -n $spid ]] && us=$(us_each "${ROUND_TICKS[1]}" "$n" 1)
    printf '[bench] h2up/%-4s %-7s round %s: %10.2f req/s  %s done  CPU %% proxy %s backend %s h2load %s other %s  backend conns %s (new %s, at once %s, most in one %s: %s)  %s\n' \
        "$k" "$s" "$([[ $s == backend ]] && echo direct || echo "$r/$ROUNDS")" "$rate" "$n" "$cs" "$cb" "$cc" "$co" \
        "$seen" "$newc" "$maxopen" "$maxone" "$split" "${ROUND_BAD:-answers right}" >&2
    note_busy "$co" "h2up/$k" "$s" "$r"
    [[ -n $ROUND_BAD ]] && return 0
    add_figures "$k,$s" RATE="$rate" CPU_S="$cs" CPU_B="$cb" CPU_C="$cc" CPU_O="$co" US="$us" SEEN="$seen" \
        NEWC="$newc" MAXOPEN="$maxopen" MAXONE="$maxone" SPLIT="$split"
}

# The backend answers both cases right, alone.
for i in 1 2; do
    p=$(get_problem backend)
    [[ -z $p ]] || die "backend: $p"
done
log "backend: GET ${URLPATH[1k]} over HTTP/2 (prior knowledge) -> 200, the file's $SMALL bytes"
p=$(grpc_problem backend)
[[ -z $p ]] || die "backend: $p"
log "backend: a unary gRPC call -> 200, application/grpc, its message, grpc-status 0"
if [[ $H2UP_GRPC == 0 ]]; then CASES=(1k); fi

# ---- the backend alone ---------------------------------------------------------------------
#
# First, before any proxy runs (none holds a connection to it): what h2load gets from the
# backend directly, once per case. The proxies' rounds compare the backend's CPU time per
# request with this one's (measure).
check_idle
if [[ $BACKEND_DIRECT == 1 ]]; then
    log "the backend alone: ${#CASES[@]} case(s) (${CASES[*]}) x ${DURATION}s"
    for k in "${CASES[@]}"; do
        bench_round measure "$k" backend direct
        sleep 1
    done
fi

# ---- the proxies -------------------------------------------------------------------------

if bench_uses haproxy; then
    dir=$BENCH_TMP/haproxy
    mkdir -p "$dir"
    PORT[haproxy]=$(free_port)
    # HAProxy wants about 2 descriptors per connection.
    maxconn=$(((NOFILE - 1024) / 2))
    if ((maxconn > 10000)); then maxconn=10000; fi
    cat >"$dir/haproxy.cfg" <<EOF
global
    nbthread $WORKERS
    maxconn $maxconn
    tune.h2.max-concurrent-streams $H2_MAX_STREAMS

defaults
    mode http
    timeout connect 5s
    timeout client 3600s
    timeout server 3600s
    timeout http-keep-alive 3600s

frontend bench
    # HTTP/2 with prior knowledge from the client, as Umbra's plain listener takes it.
    bind 127.0.0.1:${PORT[haproxy]} proto h2
    use_backend grpc if { path_beg /bench.Echo/ }
    default_backend app

backend app
    http-reuse $HAPROXY_HTTP_REUSE
    server backend 127.0.0.1:${BPORT[1k]} proto h2

backend grpc
    http-reuse $HAPROXY_HTTP_REUSE
    server backend 127.0.0.1:${BPORT[grpc]} proto h2
EOF
    bench_start haproxy "$dir/haproxy.log" haproxy -db -f "$dir/haproxy.cfg"
    PID[haproxy]=$BENCH_LAST_PID
    wait_port haproxy "${PID[haproxy]}" "${PORT[haproxy]}" "$dir/haproxy.log"
fi
if bench_uses umbra; then
    start_umbra_with "upstreams = {
  app = { servers = { \"http://127.0.0.1:${BPORT[1k]}\" }, protocol = \"h2\" },
  grpc = { servers = { \"http://127.0.0.1:${BPORT[grpc]}\" }, protocol = \"h2\" },
}
http2 = { max_concurrent_streams = $H2_MAX_STREAMS }
routes = {
  { path = \"/bench.Echo/\", upstream = \"grpc\", cache = false },
  { path = \"/\", upstream = \"app\", cache = false },
}"
    PORT[umbra]=$UMBRA_PORT
    PID[umbra]=$UMBRA_PID
fi
MEASURED=("${SRV[@]}")

# Before measuring: every proxy answers the 1 KiB GET right, twice.
for s in "${MEASURED[@]}"; do
    for i in 1 2; do
        p=$(get_problem "$s")
        [[ -z $p ]] || die "$s: $p"
    done
    log "$s: GET ${URLPATH[1k]} over HTTP/2 (prior knowledge) -> 200, the file's $SMALL bytes"
done
# The grpc case, when every proxy passes the call on with its trailer.
GRPC_SKIP=
if [[ $H2UP_GRPC == 0 ]]; then
    GRPC_SKIP="H2UP_GRPC=0"
else
    for s in "${MEASURED[@]}"; do
        p=$(grpc_problem "$s")
        if [[ -n $p ]]; then GRPC_SKIP+="${GRPC_SKIP:+; }$s: $p"; fi
    done
fi
# The backend's own figure of a skipped grpc case, for the results file.
GRPC_DIRECT=
if [[ -n $GRPC_SKIP ]]; then
    warn "the grpc case is skipped: $GRPC_SKIP"
    if [[ -n ${RATE[grpc,backend]:-} ]]; then GRPC_DIRECT=$(median_of RATE grpc,backend); fi
    CASES=(1k)
else
    log "every proxy passes a unary gRPC call on, its grpc-status trailer too"
fi

# ---- rounds -------------------------------------------------------------------------------

nrounds=$((${#CASES[@]} * ROUNDS * ${#SRV[@]}))
log "measuring: ${#CASES[@]} cases (${CASES[*]}) x $ROUNDS rounds x ${#SRV[@]} servers x ${DURATION}s (~$((nrounds * (DURATION + 3)))s)"
ROWS=("${SRV[@]}")
if [[ $BACKEND_DIRECT == 1 ]]; then ROWS=(backend "${SRV[@]}"); fi
for k in "${CASES[@]}"; do each_round SRV measure "$k"; done

# ---- results ---------------------------------------------------------------------------

# most VALUES...: the largest, "-" when one is missing.
most() {
    local v top=
    for v in "$@"; do
        if [[ $v == - ]]; then
            echo -
            return
        fi
        if [[ -z $top ]] || ((v > top)); then top=$v; fi
    done
    echo "${top:--}"
}

HOW="h2load -t$WRK_THREADS -c$H2_CONNECTIONS -m$H2_STREAMS -D$DURATION, cleartext HTTP/2 with prior knowledge (no TLS)"
md=$(results_md h2up)
{
    echo "# h2up: Umbra vs HAProxy speaking HTTP/2 to the backend"
    echo
    bench_env_md "(not used: $HOW)"
    echo "- h2load: $(h2load --version 2>/dev/null | head -n1)"
    echo "- backend: one nghttpd per case ($(nghttpd --version 2>/dev/null | head -n1)), $H2UP_BACKEND_WORKERS worker thread(s), SETTINGS_MAX_CONCURRENT_STREAMS $H2UP_BACKEND_STREAMS, cleartext, prior knowledge; 1k: \`${BACKEND_CMD[1k]}\`; grpc: \`${BACKEND_CMD[grpc]}\`"
    echo "- each case: $HOW, to each proxy and (the backend rows, once per case, before the proxies) to the backend directly"
    echo "- 1k: GET ${URLPATH[1k]} (1024 bytes; nghttpd says cache-control: max-age=3600, which neither proxy acts on: Umbra's routes have cache = false, HAProxy has no cache)"
    echo "- grpc: POST $GRPC_PATH, a gRPC message of $(stat -c %s "$BENCH_TMP/grpc.req") bytes, content-type application/grpc, te: trailers; the answer a message of ${SIZE[grpc]} bytes, content-type application/grpc, trailer grpc-status: 0$([[ -n $GRPC_SKIP ]] && echo "; **not measured**: $GRPC_SKIP")"
    echo "- proxies: $WORKERS workers (Umbra) / nbthread $WORKERS (HAProxy), uncached; HAProxy: server ... proto h2, http-reuse $HAPROXY_HTTP_REUSE, bind ... proto h2; Umbra: upstreams protocol = \"h2\""
    echo "- limits out of reach: neither proxy limits the requests of an HTTP/2 connection; both allow $H2_MAX_STREAMS concurrent streams per client connection; a round is refused when fewer than $H2_CONNECTIONS client connections are open at 3/4 of it"
    echo "- backend conns: sampled every $CONNS_INTERVAL s through each round from /proc/net/tcp (bench/h2up_conns.py): seen (distinct), new (not open as the round began), at once (most), in one (most in one worker's / thread's epoll set; the worst round)"
    echo
    md_row case server "median req/s" Umbra/HAProxy target met "be conns seen" "be new" "be at once" \
        "be in one worker" "CPU proxy %" "proxy us/req" "CPU backend %" "CPU h2load %" "CPU other %" \
        "req/s per round" "be conns per round" repeated
    md_row --- --- ---: ---: --- --- ---: ---: ---: ---: ---: ---: ---: ---: ---: --- --- ---
} >"$md"

fmt='%-10s %-8s %12s %13s %-7s %-8s %5s %4s %7s %6s %6s %7s %7s %7s %6s\n'
# shellcheck disable=SC2059
printf "\n$fmt" case server "median req/s" Umbra/HAProxy target met "be:" new "at once" "in one" "CPU%:" \
    "us/req" backend h2load other
# shellcheck disable=SC2059
printf "$fmt" "" "" "" "" "" "" seen "" "" worker proxy "" "" "" ""
printf '%s\n' "------------------------------------------------------------------------------------------------------------------------"
declare -A VERDICT=()
for k in "${CASES[@]}"; do
    declare -A MED=()
    median_map MED RATE "$k," "${ROWS[@]}"
    for s in "${ROWS[@]}"; do
        rr=$(umbra_ratio "$s" MED haproxy)
        tg=- met=-
        read -r cs cb cc co us seen newc maxopen <<<"$(medians "$k,$s" CPU_S CPU_B CPU_C CPU_O US SEEN NEWC MAXOPEN)"
        fixed 0 cs cb cc co seen newc maxopen
        fixed 1 us
        ref="MAXONE[$k,$s]"
        # shellcheck disable=SC2086
        maxone=$(most ${!ref})
        if [[ $s == umbra ]]; then
            tg=">= ${TARGET[$k]}"
            met=$(atleast "$rr" "${TARGET[$k]}" met "not met")
            if [[ $k == 1k ]]; then
                tg+=", <= 2/worker"
                # Per worker when the epoll sets told (bench/h2up_conns.py), else all of them
                # against 2 per worker.
                if [[ $maxone != - ]]; then
                    cm=$(atmost "$maxone" 2 met "not met")
                else
                    cm=$(atmost "$seen" $((2 * WORKERS)) met "not met")
                fi
                [[ $cm == - ]] || met+=", conns $cm"
            fi
        fi
        # shellcheck disable=SC2059
        printf "$fmt" "h2up/$k" "$s" "${MED[$s]}" "$rr" "$tg" "$met" "$seen" "$newc" "$maxopen" "$maxone" "$cs" \
            "$us" "$cb" "$cc" "$co"
        ref="SEEN[$k,$s]"
        md_row "h2up/$k" "$s" "${MED[$s]}" "$rr" "$tg" "$met" "$seen" "$newc" "$maxopen" "$maxone" "$cs" "$us" "$cb" \
            "$cc" "$co" "${RATE[$k,$s]% }" "${!ref% }" "$(repeated_md "$k,$s")" >>"$md"
        if [[ $s == umbra && $rr != - ]]; then
            VERDICT[$k]="x HAProxy $rr ($met: ${tg})"
            if [[ $k == 1k ]]; then VERDICT[$k]+="; backend connections seen $seen, most in one worker $maxone"; fi
        fi
    done
done
{
    echo
    echo "CPU: % of one CPU over h2load's run (200% = both CPUs of a 2-CPU machine), medians of"
    echo "the rounds: the proxy (all its threads), the backend, h2load, and the rest of the"
    echo "machine; proxy us/req: the proxy's CPU time per request. h2load, the backend and the"
    echo "proxy share the machine's CPUs: compare the ratios, not the absolute figures, and only"
    echo "within one run; ratios within about 5-7% of each other mean \"the same\". The backend"
    echo "rows are the most these clients get from the backend alone on this machine."
    if [[ -n $GRPC_SKIP ]]; then
        echo
        echo "The grpc case was not measured: $GRPC_SKIP.${GRPC_DIRECT:+ The backend alone answered $GRPC_DIRECT calls/s (h2load straight to it, before the proxies ran).}"
    fi
    if ((${#VERDICT[@]})); then
        echo
        echo "Targets (issue 31): h2up/1k >= 1.0 x HAProxy with at most 2 backend connections per Umbra worker; h2up/grpc >= 1.0 x HAProxy."
        echo
        each_verdict echo "- h2up" "${CASES[@]}"
    fi
    busy_md
    repeats_md
    configs_md
} >>"$md"
echo
each_verdict log "target h2up" "${CASES[@]}"
[[ -z $GRPC_SKIP ]] || warn "h2up/grpc not measured: $GRPC_SKIP${GRPC_DIRECT:+ (the backend alone: $GRPC_DIRECT calls/s)}"
warn_busy
warn_repeats
log "results written to $md"
