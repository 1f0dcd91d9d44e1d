#!/usr/bin/env bash
# Scenario "tls": Umbra against nginx terminating TLS with the same ECDSA P-256 certificate
# and settings: a 1 KiB file over keep-alive TLS connections (wrk), new connections with a
# full handshake each (ab), and new connections resuming a session (h2load). See
# bench/README.md.
set -euo pipefail
# shellcheck source=bench/lib.sh
. "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

# Concurrent connections of the handshake measurements.
: "${TLS_HANDSHAKE_CONNECTIONS:=50}"
# Requests (= connections) of each h2load run of the resumption measurement; 0 skips it.
: "${TLS_RESUME_REQUESTS:=$((3000 * DURATION))}"

need wrk curl ab openssl python3 awk timeout pgrep getconf
[[ $TLS_HANDSHAKE_CONNECTIONS =~ ^[1-9][0-9]*$ ]] ||
    die "TLS_HANDSHAKE_CONNECTIONS must be a positive integer (got '$TLS_HANDSHAKE_CONNECTIONS')"
[[ $TLS_RESUME_REQUESTS =~ ^[0-9]+$ ]] ||
    die "TLS_RESUME_REQUESTS must be a number (got '$TLS_RESUME_REQUESTS')"
if ((TLS_RESUME_REQUESTS > 0)) && ! command -v h2load >/dev/null 2>&1; then
    warn "h2load not found (Debian: apt-get install -y nghttp2-client): skipping tls/resume"
    TLS_RESUME_REQUESTS=0
fi
bench_init
if bench_uses umbra; then ensure_umbra; fi
raise_nofile $((4 * WRK_CONNECTIONS + 4 * TLS_HANDSHAKE_CONNECTIONS + 512))

docroot=$BENCH_TMP/docroot
mkdir -p "$docroot"
chmod 755 "$docroot"
make_file "$docroot/1k.bin" 1024

# One certificate for both servers.
make_cert
cert=$BENCH_CERT
key=$BENCH_KEY

declare -A PORT PID
# The servers keep the plain listener that lib.sh's start functions wait for; the TLS
# listener is added beside it.
if bench_uses nginx; then
    NGINX_TLS_PORT=$(free_port)
    # A second TLS server logs whether each session was resumed: the check below that ab
    # makes full handshakes and h2load resumes.
    NGINX_CHECK_PORT=$(free_port)
    start_nginx_with "worker_rlimit_nofile $NOFILE;" "    $NGINX_OPEN_FILE_CACHE
    ssl_certificate $cert;
    ssl_certificate_key $key;
    ssl_protocols TLSv1.2 TLSv1.3;
    ssl_session_tickets on;
    log_format reuse '\$ssl_session_reused \$ssl_protocol';
    server {
        listen 127.0.0.1:$NGINX_TLS_PORT ssl;
        root $docroot;
    }
    server {
        listen 127.0.0.1:$NGINX_CHECK_PORT ssl;
        root $docroot;
        access_log $BENCH_TMP/nginx/reuse.log reuse;
    }" "root $docroot;"
    wait_port nginx "$NGINX_PID" "$NGINX_TLS_PORT" "$BENCH_TMP/nginx/error.log"
    wait_port nginx "$NGINX_PID" "$NGINX_CHECK_PORT" "$BENCH_TMP/nginx/error.log"
    PORT[nginx]=$NGINX_TLS_PORT
    PID[nginx]=$NGINX_PID
fi
if bench_uses umbra; then
    UMBRA_TLS_PORT=$(free_port)
    start_umbra_with "listen[#listen + 1] = { \"127.0.0.1:$UMBRA_TLS_PORT\", tls = true }
tls = { { hosts = { \"localhost\" }, cert = \"$cert\", key = \"$key\" } }
routes = { { path = \"/\", root = \"$docroot\" } }"
    wait_port umbra "$UMBRA_PID" "$UMBRA_TLS_PORT" "$BENCH_TMP/umbra/umbra.log"
    PORT[umbra]=$UMBRA_TLS_PORT
    PID[umbra]=$UMBRA_PID
fi
read -r -a SRV <<<"$SERVERS"

# tls_check NAME PORT: 1024 bytes over TLS 1.3 and TLS 1.2, the chain verifies against the
# certificate, a session resumes; prints what a default client negotiates.
tls_check() {
    python3 - "$1" "$2" "$cert" <<'EOF' || die "$1: TLS check failed"
import socket, ssl, sys
name, port, cafile = sys.argv[1], int(sys.argv[2]), sys.argv[3]

def get(ctx, session=None):
    with socket.create_connection(("127.0.0.1", port), timeout=10) as raw:
        with ctx.wrap_socket(raw, server_hostname="localhost", session=session) as s:
            s.sendall(b"GET /1k.bin HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n\r\n")
            data = b""
            while True:
                try:
                    chunk = s.recv(65536)
                except ssl.SSLEOFError:
                    break
                if not chunk:
                    break
                data += chunk
            head, _, body = data.partition(b"\r\n\r\n")
            if not head.startswith(b"HTTP/1.1 200") or len(body) != 1024:
                sys.exit("%s: GET /1k.bin over %s: %r, %d body bytes" % (name, s.version(), head[:40], len(body)))
            return s.version(), s.cipher()[0], s.session, s.session_reused

for v in (ssl.TLSVersion.TLSv1_2, ssl.TLSVersion.TLSv1_3):
    ctx = ssl.create_default_context(cafile=cafile)
    ctx.minimum_version = ctx.maximum_version = v
    version, cipher, sess, _ = get(ctx)
    if get(ctx, sess)[3] is not True:
        sys.exit("%s: %s session not resumed" % (name, version))
ctx = ssl.create_default_context(cafile=cafile)
version, cipher, _, _ = get(ctx)
print("%s %s" % (version, cipher))
EOF
}

# EXPECT: each server's answer to GET /1k.bin over TLS (head and body), in bytes: what wrk
# should read per response.
declare -A NEGOTIATED EXPECT
for s in "${SRV[@]}"; do
    NEGOTIATED[$s]=$(tls_check "$s" "${PORT[$s]}")
    log "$s: TLS 1.2 and 1.3 serve 1k.bin, sessions resume; a default client gets ${NEGOTIATED[$s]}"
    EXPECT[$s]=$(answer_bytes "$s" "https://127.0.0.1:${PORT[$s]}/1k.bin" --cacert "$cert")
done

# reuse_counts: "FULL RESUMED" handshakes in nginx's check log so far, then empties it.
reuse_counts() {
    local logf=$BENCH_TMP/nginx/reuse.log
    awk '$1 == "r" { r++ } $1 == "." { f++ } END { printf "%d %d\n", f, r }' "$logf" 2>/dev/null || echo "0 0"
    : >"$logf"
}

# run_client OUT LIMIT CMD...: one bounded client run (timeout LIMIT s), output to OUT.
# Sets CLIENT_CPU to the CPU time (user + system, seconds) the client used.
run_client() {
    local out=$1
    run_timed "$@"
    if ((TIMED_RC != 0)); then
        tail -n 30 "$out" >&2
        die "client exited with $TIMED_RC: ${*:3}"
    fi
    CLIENT_CPU=$TIMED_CPU
}

# parse_ab FILE: "CONN_PER_S COMPLETE ERRORS" (ERRORS: ab_check's, for 1024-byte bodies).
parse_ab() {
    local rate ndone
    read -r rate ndone <<<"$(awk '
    /^Requests per second:/ { rps = $4 }
    /^Complete requests:/ { done = $3 }
    END {
        if (rps == "" || done == "") { print "parse-error"; exit 1 }
        printf "%s %s\n", rps, done
    }' "$1")" || return 1
    [[ $rate != parse-error ]] || return 1
    echo "$rate $ndone $(ab_check "$1" 1024)"
}

# parse_h2load FILE: "REQ_PER_S DONE ERRORS": DONE the requests that succeeded; ERRORS
# "none", or failed, errored or timed-out requests, statuses other than 2xx, and body
# bytes ("data") other than DONE x 1024.
parse_h2load() {
    awk '
    /^finished in/ { for (i = 1; i <= NF; i++) if ($(i + 1) == "req/s,") rps = $i }
    /^requests:/ {
        done = $8
        if ($10 > 0) err = err (err ? "; " : "") "failed: " $10
        if ($12 > 0) err = err (err ? "; " : "") "errored: " $12
        if ($14 > 0) err = err (err ? "; " : "") "timeout: " $14
    }
    /^status codes:/ {
        ok = $3
        if ($5 > 0 || $7 > 0 || $9 > 0) err = err (err ? "; " : "") "non-2xx: " $0
    }
    /^traffic:/ { if ($NF == "data") { data = $(NF - 1); gsub(/[()]/, "", data) } }
    END {
        if (rps == "") { print "parse-error"; exit 1 }
        if (ok != done) err = err (err ? "; " : "") ok " 2xx of " done " succeeded"
        if (data != done * 1024) err = err (err ? "; " : "") "body bytes " data ", expected " done " x 1024"
        printf "%s %s %s\n", rps, done, (err ? err : "none")
    }' "$1"
}

# The measurements.
CASES=(1k handshake)
if ((TLS_RESUME_REQUESTS > 0)); then CASES+=(resume); fi
declare -A UNIT=([1k]="req/s" [handshake]="conn/s" [resume]="conn/s")
declare -A WHAT=(
    [1k]="wrk -t$WRK_THREADS -c$WRK_CONNECTIONS -d${DURATION}s: GET /1k.bin on keep-alive TLS connections"
    [handshake]="ab -t $DURATION -c $TLS_HANDSHAKE_CONNECTIONS: one GET /1k.bin (HTTP/1.0) per new TLS connection, full handshake each"
    [resume]="h2load --h1 -c $TLS_HANDSHAKE_CONNECTIONS -m 1 -n $TLS_RESUME_REQUESTS -H 'Connection: close': one GET /1k.bin per TLS connection, resuming the client's session (ticket)"
)

# What the clients do: ab never offers a session; h2load offers its last one when it
# reconnects. Checked against nginx's logging server.
if bench_uses nginx; then
    reuse_counts >/dev/null
    run_client "$BENCH_TMP/check-ab.txt" 60 ab -q -n 200 -c 10 "https://127.0.0.1:$NGINX_CHECK_PORT/1k.bin"
    sleep 0.5
    read -r full resumed <<<"$(reuse_counts)"
    ((full == 200 && resumed == 0)) ||
        die "ab: expected 200 full handshakes, nginx logged $full full and $resumed resumed"
    log "ab: 200 connections, $full full handshakes (nginx's \$ssl_session_reused)"
    if ((TLS_RESUME_REQUESTS > 0)); then
        run_client "$BENCH_TMP/check-h2load.txt" 60 h2load --h1 -c 10 -m 1 -n 400 \
            -H "Connection: close" "https://127.0.0.1:$NGINX_CHECK_PORT/1k.bin"
        sleep 0.5
        read -r full resumed <<<"$(reuse_counts)"
        ((resumed >= 380)) ||
            die "h2load: expected >= 380 of 400 connections resumed, nginx logged $full full and $resumed resumed"
        log "h2load: 400 connections, $resumed resumed, $full full (one per client)"
    fi
fi

# shellcheck disable=SC2034 # some are read by name (medians)
declare -A RATE CPU_S CPU_C US
# measure CASE SERVER ROUND
measure() {
    local k=$1 s=$2 r=$3 url out rate n errs cs cc us
    kill -0 "${PID[$s]}" 2>/dev/null || die "$s died during the run (log in $BENCH_TMP/$s/)"
    url="https://127.0.0.1:${PORT[$s]}/1k.bin"
    out=$BENCH_TMP/$k-$s-$r.txt
    round_cpu_start "${PID[$s]}"
    case $k in
    1k)
        run_wrk "$url" "$out"
        CLIENT_CPU=$WRK_CPU
        read_wrk "$out"
        rate=$WRK_RPS n=$WRK_REQS errs=none
        wrk_check "${EXPECT[$s]}" "$WRK_CONNECTIONS"
        ;;
    handshake)
        # -t before -n: ab's -t resets the request count to 50000.
        run_client "$out" $((DURATION + 30)) ab -q -t "$DURATION" -n 1000000 \
            -c "$TLS_HANDSHAKE_CONNECTIONS" "$url"
        read -r rate n errs <<<"$(parse_ab "$out")" || die "could not parse ab's output ($out)"
        # ab stops at -n: a round that got there measured the cap, not the server.
        ((n < 1000000)) || round_bad "ab reached its request cap (-n 1000000)"
        ;;
    resume)
        run_client "$out" $((DURATION * 10 + 30)) h2load --h1 -c "$TLS_HANDSHAKE_CONNECTIONS" \
            -m 1 -n "$TLS_RESUME_REQUESTS" -H "Connection: close" "$url"
        read -r rate n errs <<<"$(parse_h2load "$out")" || die "could not parse h2load's output ($out)"
        ;;
    esac
    round_cpu_end "$CLIENT_CPU" "${PID[$s]}"
    [[ $errs == none ]] || round_bad "$errs"
    answer_check "$url" "$docroot/1k.bin" --cacert "$cert"
    cs=${ROUND_PCT[0]} cc=$ROUND_CLIENT_PCT
    # Server CPU per request (or connection), in microseconds.
    us=$(us_each "${ROUND_TICKS[0]}" "$n" 1)
    printf '[bench] tls/%-9s %-6s round %d/%d: %10.2f %s  %s done  server CPU %s%% (%s us each)  client CPU %s%%  %s\n' \
        "$k" "$s" "$r" "$ROUNDS" "$rate" "${UNIT[$k]}" "$n" "$cs" "$us" "$cc" "${ROUND_BAD:-answers right}" >&2
    [[ -n $ROUND_BAD ]] && return 0
    add_figures "$k,$s" RATE="$rate" CPU_S="$cs" CPU_C="$cc" US="$us"
}

check_idle
total=$((${#CASES[@]} * ROUNDS * ${#SRV[@]} * (DURATION + 2)))
log "measuring: ${#CASES[@]} cases (${CASES[*]}) x $ROUNDS rounds x ${#SRV[@]} servers x ~${DURATION}s (~${total}s)"
for k in "${CASES[@]}"; do each_round SRV measure "$k"; done

md=$(results_md tls)
{
    echo "# tls: Umbra vs nginx terminating TLS"
    echo
    bench_env_md "(arguments: tls/1k below)"
    echo "- ab: $(ab -V 2>&1 | head -n1 | sed 's/^This is //'); h2load: $(h2load --version 2>/dev/null | head -n1 || echo "not installed"); $(openssl version)"
    echo "- certificate: self-signed ECDSA P-256 (the same file for both); TLS 1.2 and 1.3; session tickets on; no session cache (Umbra has none, nginx's default ssl_session_cache none)"
    echo "- nginx: master + 2 workers, ssl_protocols TLSv1.2 TLSv1.3, ssl_session_tickets on, keepalive_requests $NGINX_KEEPALIVE_REQUESTS, open_file_cache, other TLS settings default; Umbra: 2 workers, tls defaults"
    for s in "${SRV[@]}"; do echo "- $s negotiates with a default client: ${NEGOTIATED[$s]}"; done
    for k in "${CASES[@]}"; do echo "- tls/$k: ${WHAT[$k]}"; done
    echo
    md_row scenario server median unit Umbra/nginx "server CPU %" "server CPU us per req/conn" "client CPU %" \
        "per round" repeated
    md_row --- --- ---: --- ---: ---: ---: ---: --- ---
} >"$md"

fmt='%-14s %-6s %11s %-7s %11s %11s %14s %11s\n'
# shellcheck disable=SC2059
printf "\n$fmt" scenario server median unit Umbra/nginx "server CPU%" "server us/each" "client CPU%"
printf '%s\n' "-------------------------------------------------------------------------------------------"
declare -A VERDICT=()
for k in "${CASES[@]}"; do
    declare -A MED=()
    median_map MED RATE "$k," "${SRV[@]}"
    for s in "${SRV[@]}"; do
        rr=$(umbra_ratio "$s" MED nginx)
        read -r cs cc us <<<"$(medians "$k,$s" CPU_S CPU_C US)"
        fixed 0 cs cc
        fixed 1 us
        # shellcheck disable=SC2059
        printf "$fmt" "tls/$k" "$s" "${MED[$s]}" "${UNIT[$k]}" "$rr" "$cs" "$us" "$cc"
        md_row "tls/$k" "$s" "${MED[$s]}" "${UNIT[$k]}" "$rr" "$cs" "$us" "$cc" "${RATE[$k,$s]% }" "$(repeated_md "$k,$s")" >>"$md"
        if [[ $s == umbra && $rr != - && $k != resume ]]; then
            VERDICT[$k]="x nginx $rr ($(atleast "$rr" 1.0) >= 1.0)"
        fi
    done
done
{
    echo
    echo "server CPU: % of one CPU over the client's run (200% = both CPUs of a 2-CPU machine) and"
    echo "CPU time per request (1k) or per connection (handshake, resume), medians of the rounds;"
    echo "client CPU: wrk's, ab's or h2load's. The clients and the servers share the machine's"
    echo "CPUs; ab is single-threaded and a full handshake costs the client more than the server"
    echo "(it verifies an ECDSA signature), so when the client nears 100% the handshake rates"
    echo "measure the client and the ratio tends to 1: then compare the servers' CPU per"
    echo "connection. Compare ratios, not absolute figures, and only within one run; ratios"
    echo "within about 5-7% of each other mean \"the same\"."
    if ((${#VERDICT[@]})); then
        echo
        echo "Targets (Umbra): tls/1k >= 1.0 x nginx; tls/handshake (full handshakes) >= 1.0 x nginx."
        echo
        each_verdict echo "- tls" "${CASES[@]}"
    fi
    repeats_md
    configs_md
} >>"$md"
echo
each_verdict log "target tls" "${CASES[@]}"
warn_repeats
log "results written to $md"
