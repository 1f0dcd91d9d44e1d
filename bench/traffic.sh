#!/usr/bin/env bash
# Scenario "traffic": what traffic control costs (issue 29). On one Umbra, a route answering
# "ok" from its hook against the same route with a rate limit it never reaches
# (limit-never), with basic auth and the right password (auth-ok), and with a shared
# dictionary incr in the hook (shared-incr); and a rate limit of 1000 r/s, burst 100, beside
# nginx's limit_req with the same figures under the same load (limit-vs-nginx): how exactly
# each lets the rate through, and at what throughput. See bench/README.md.
set -euo pipefail
# shellcheck source=bench/lib.sh
. "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

BODY=ok
# The limit that is never reached: far above what 2 cores can send in any round.
BIG_RATE=10000000
# The limit both servers enforce in limit-vs-nginx: requests a second and burst, per client
# address (all of wrk's connections come from 127.0.0.1: one bucket).
Z_RATE=1000
Z_BURST=100
# The basic-auth user; the htpasswd line is bcrypt (htpasswd -B) of this password.
AUTH_USER=bench
AUTH_PASS=bench-secret
# Targets (issue 29): a limit never reached and a right password each >= 0.95 x the route
# without; incr costs <= 10%; the limiter as accurate as nginx's (accepted / (rate x
# seconds + burst) within ACC_TOL_PCT points of 100%) and >= 1.0 x its accepted requests/s.
TARGET_SAME=0.95
TARGET_INCR_COST_PCT=10
TARGET_X_NGINX=1.0
ACC_TOL_PCT=5

need wrk curl python3 awk timeout pgrep getconf cmp htpasswd base64
bench_init
bench_uses umbra || die "the traffic scenario measures Umbra's traffic control: put umbra in SERVERS"
ensure_umbra
read -r -a SRV <<<"$SERVERS"

# The cases and their rows: the first three compare one Umbra with itself (two routes);
# limit-vs-nginx compares the servers of SERVERS.
CASES=(limit-never auth-ok shared-incr limit-vs-nginx)
declare -A CSRV WPATH PORT PID
CSRV[limit-never]="umbra umbra+limit"
CSRV[auth-ok]="umbra umbra+auth"
CSRV[shared-incr]="umbra umbra+incr"
CSRV[limit-vs-nginx]="${SRV[*]}"
WPATH[limit-never,umbra]=/plain
WPATH[limit-never,umbra+limit]=/limited
WPATH[auth-ok,umbra]=/plain
WPATH[auth-ok,umbra+auth]=/auth
WPATH[shared-incr,umbra]=/plain
WPATH[shared-incr,umbra+incr]=/incr
WPATH[limit-vs-nginx,umbra]=/z
WPATH[limit-vs-nginx,nginx]=/z

# The password file, and wrk's script that sends the right password on every request (to
# both rows of auth-ok: the same requests, only the route differs).
htpasswd -nbB "$AUTH_USER" "$AUTH_PASS" | sed '/^$/d' >"$BENCH_TMP/users.htpasswd"
AUTH_HEADER="Basic $(printf '%s:%s' "$AUTH_USER" "$AUTH_PASS" | base64 -w0)"
AUTH_LUA=$BENCH_TMP/auth.lua
printf 'wrk.headers["Authorization"] = "%s"\n' "$AUTH_HEADER" >"$AUTH_LUA"

# nginx answers /z from a file of BODY (with its open file cache): its "return" runs in the
# rewrite phase, before limit_req's (preaccess), so a location that returns is never limited.
if bench_uses nginx; then
    mkdir -p "$BENCH_TMP/www"
    printf '%s' "$BODY" >"$BENCH_TMP/www/z"
    chmod 755 "$BENCH_TMP/www"
    chmod 644 "$BENCH_TMP/www/z"
    start_nginx_with "" "    $NGINX_OPEN_FILE_CACHE
    limit_req_zone \$binary_remote_addr zone=z:10m rate=${Z_RATE}r/s;" "
        location = /z {
            limit_req zone=z burst=$Z_BURST nodelay;
            limit_req_status 429;
            default_type text/plain;
            root $BENCH_TMP/www;
        }
        location / {
            return 404;
        }"
    PORT[nginx]=$NGINX_PORT
    PID[nginx]=$NGINX_PID
fi
# Every route answers from the same hook; /limited, /auth and /z add the route's check
# (before the hook), /incr a shared-dictionary incr in the hook. All of wrk's requests to
# /incr add to one key: every worker takes the same stripe's lock (the worst case).
start_umbra_with "rate_limits = {
  big = { rate = $BIG_RATE, burst = $BIG_RATE, key = \"client\" },
  z = { rate = $Z_RATE, burst = $Z_BURST, key = \"client\" },
}
shared = { counters = \"1MB\" }
local function ok(req)
  return umbra.respond(200, \"$BODY\")
end
routes = {
  { path = \"/plain\", on_request = ok },
  { path = \"/limited\", rate_limit = \"big\", on_request = ok },
  { path = \"/auth\", auth = { basic = \"$BENCH_TMP/users.htpasswd\" }, on_request = ok },
  { path = \"/incr\", on_request = function(req)
      umbra.shared.counters:incr(\"k\", 1, 0)
      return umbra.respond(200, \"$BODY\")
    end },
  { path = \"/z\", rate_limit = \"z\", on_request = ok },
  { path = \"/count\", on_request = function(req)
      return umbra.respond(200, tostring(umbra.shared.counters:get(\"k\")))
    end },
}"
for s in umbra umbra+limit umbra+auth umbra+incr; do
    PORT[$s]=$UMBRA_PORT
    PID[$s]=$UMBRA_PID
done

# code SERVER PATH [CURL_OPTION...]: the status of one GET, the body to BENCH_TMP/check.body.
code() {
    local s=$1 path=$2
    shift 2
    curl -s --max-time 10 -o "$BENCH_TMP/check.body" -w '%{http_code}' "$@" \
        "http://127.0.0.1:${PORT[$s]}$path" || die "$s: curl $path failed (exit $?)"
}

# check_ok SERVER PATH [CURL_OPTION...]: GET PATH answers 200 with exactly BODY.
check_ok() {
    local s=$1 path=$2 c
    shift 2
    c=$(code "$s" "$path" "$@")
    [[ $c == 200 ]] || die "$s: GET $path answered $c, expected 200"
    [[ $(cat "$BENCH_TMP/check.body") == "$BODY" ]] ||
        die "$s: GET $path answered '$(head -c 100 "$BENCH_TMP/check.body")', expected '$BODY'"
    log "$s: GET $path -> 200, '$BODY'"
}

printf '%s' "$BODY" >"$BENCH_TMP/ok.body"
check_ok umbra /plain
check_ok umbra+limit /limited
check_ok umbra+incr /incr
check_ok umbra+auth /auth -H "Authorization: $AUTH_HEADER"
# The auth route does check: no password and a wrong one get 401.
for opt in "" "-uwrong:$AUTH_PASS" "-u$AUTH_USER:wrong"; do
    c=$(code umbra+auth /auth ${opt:+"$opt"})
    [[ $c == 401 ]] || die "umbra+auth: GET /auth ${opt:-without a password} answered $c, expected 401"
done
log "umbra+auth: GET /auth without a password or with a wrong one -> 401"
# The incr does count: after the one GET /incr above, the key is 1; one more makes it 2
# (/count, a route no round requests, answers the key's value).
c=$(code umbra /count)
[[ $c == 200 && $(cat "$BENCH_TMP/check.body") == 1 ]] || die "umbra: GET /count after one GET /incr: $c '$(cat "$BENCH_TMP/check.body")', expected 200 '1'"
check_ok umbra+incr /incr
c=$(code umbra /count)
[[ $c == 200 && $(cat "$BENCH_TMP/check.body") == 2 ]] || die "umbra: GET /count after two GET /incr: $c '$(cat "$BENCH_TMP/check.body")', expected 200 '2'"
log "umbra+incr: each GET /incr adds 1 to umbra.shared.counters k (GET /count: 1, then 2)"
# The limiter does limit: Z_BURST + 400 requests, 20 at a time (curl -Z), are more than the
# bucket holds while they last; only 200 and 429 come back, and some 429.
for s in "${SRV[@]}"; do
    sleep 0.5
    urls=()
    for ((i = 0; i < Z_BURST + 400; i++)); do urls+=(-o /dev/null "http://127.0.0.1:${PORT[$s]}/z"); done
    codes=$(curl -s --no-progress-meter -Z --parallel-max 20 --max-time 30 -w '%{http_code}\n' "${urls[@]}") || die "$s: curl /z failed"
    n200=$(grep -c '^200$' <<<"$codes" || true)
    n429=$(grep -c '^429$' <<<"$codes" || true)
    ((n200 + n429 == Z_BURST + 400)) || die "$s: GET /z x $((Z_BURST + 400)): codes other than 200 and 429: $(sort <<<"$codes" | uniq -c | tr -s ' \n' ' ')"
    ((n429 > 0)) || die "$s: GET /z x $((Z_BURST + 400)) 20 at a time: no 429 (the limit of $Z_RATE r/s, burst $Z_BURST does not apply)"
    ((n200 >= Z_BURST)) || die "$s: GET /z x $((Z_BURST + 400)) 20 at a time: $n200 answered 200, fewer than the burst of $Z_BURST"
    log "$s: GET /z x $((Z_BURST + 400)), 20 at a time: $n200 x 200, $n429 x 429"
done

# What each (case, server) should read per response (the 200's head and body); the 429s
# of limit-vs-nginx are of another size, so that case's bytes are not checked.
declare -A EXPECT CURLOPT
CURLOPT[auth-ok]="Authorization: $AUTH_HEADER"
sleep 0.5
for k in "${CASES[@]}"; do
    read -r -a csrv <<<"${CSRV[$k]}"
    for s in "${csrv[@]}"; do
        if [[ -n ${CURLOPT[$k]:-} ]]; then
            EXPECT[$k,$s]=$(answer_bytes "$s" "http://127.0.0.1:${PORT[$s]}${WPATH[$k,$s]}" -H "${CURLOPT[$k]}")
        else
            EXPECT[$k,$s]=$(answer_bytes "$s" "http://127.0.0.1:${PORT[$s]}${WPATH[$k,$s]}")
        fi
    done
done

# wrk_secs FILE: the length of wrk's run ("N requests in 10.00s, ..."), in seconds.
wrk_secs() {
    awk '/ requests in .* read$/ { v = $4; sub(/,$/, "", v)
            n = v + 0; u = v; sub(/^[0-9.]+/, "", u)
            if (u == "ms") n /= 1000; else if (u == "m") n *= 60; else if (u == "us") n /= 1e6
            printf "%.3f\n", n }' "$1"
}

# wrk_non2xx FILE: responses of status 400 or more wrk counted (0 when none).
wrk_non2xx() {
    awk '/Non-2xx or 3xx responses:/ { n = $NF } END { print n + 0 }' "$1"
}

# shellcheck disable=SC2034 # some are read by name (medians)
declare -A RPS P50 P99 CPU_S US CPU_W CPU_O ACC_RPS LIM_RPS ACC

# measure CASE SERVER ROUND
measure() {
    local k=$1 s=$2 r=$3 out cs cw co us script="" secs n4 acc_rps lim_rps acc extra=""
    alive "$s"
    [[ $k == auth-ok ]] && script=$AUTH_LUA
    out=$BENCH_TMP/wrk-$k-$s-$r.txt
    # limit-vs-nginx: the bucket full again (it refills in Z_BURST / Z_RATE s) for every round.
    [[ $k == limit-vs-nginx ]] && sleep 0.5
    round_cpu_start "${PID[$s]}"
    run_wrk "http://127.0.0.1:${PORT[$s]}${WPATH[$k,$s]}" "$out" "$WRK_CONNECTIONS" "$script"
    round_cpu_end "$WRK_CPU" "${PID[$s]}"
    read_wrk "$out"
    if [[ $k == limit-vs-nginx ]]; then
        # Its 429s are what it measures: only socket errors and the servers' limits refuse it.
        secs=$(wrk_secs "$out")
        n4=$(wrk_non2xx "$out")
        if [[ $WRK_ERRS == *"socket errors"* ]]; then round_bad "wrk: ${WRK_ERRS%%; non-2xx*}"; fi
        if ((WRK_REQS == 0)); then round_bad "wrk: no complete response"; else round_limits "$WRK_REQS" "$WRK_CONNECTIONS"; fi
        ((n4 > 0)) || round_bad "no 429 in $WRK_REQS requests: the limit did not apply"
        read -r acc_rps lim_rps acc <<<"$(awk -v t="$WRK_REQS" -v n="$n4" -v d="$secs" -v rt="$Z_RATE" -v b="$Z_BURST" \
            'BEGIN { printf "%.2f %.2f %.2f\n", (t - n) / d, n / d, (t - n) / (rt * d + b) * 100 }')"
        extra=" accepted $((WRK_REQS - n4)) ($acc_rps/s) 429: $n4 ($lim_rps/s) in ${secs}s accuracy $acc%"
    else
        wrk_check "${EXPECT[$k,$s]}" "$WRK_CONNECTIONS"
        acc_rps=- lim_rps=- acc=-
    fi
    sleep 0.2
    if [[ -n ${CURLOPT[$k]:-} ]]; then
        answer_check "http://127.0.0.1:${PORT[$s]}${WPATH[$k,$s]}" "$BENCH_TMP/ok.body" -H "${CURLOPT[$k]}"
    else
        answer_check "http://127.0.0.1:${PORT[$s]}${WPATH[$k,$s]}" "$BENCH_TMP/ok.body"
    fi
    cs=${ROUND_PCT[0]} cw=$ROUND_CLIENT_PCT co=$ROUND_OTHER_PCT
    us=$(us_each "${ROUND_TICKS[0]}" "$WRK_REQS" 2)
    printf '[bench] %-14s %-11s round %d/%d: %10.2f req/s  p50 %s ms p99 %s ms  CPU %% server %s (%s us/req) wrk %s other %s  %s requests%s, %s\n' \
        "$k" "$s" "$r" "$ROUNDS" "$WRK_RPS" "$WRK_P50" "$WRK_P99" "$cs" "$us" "$cw" "$co" "$WRK_REQS" "$extra" \
        "${ROUND_BAD:-answers right}" >&2
    [[ -n $ROUND_BAD ]] && return 0
    add_figures "$k,$s" RPS="$WRK_RPS" P50="$WRK_P50" P99="$WRK_P99" CPU_S="$cs" US="$us" CPU_W="$cw" \
        CPU_O="$co" ACC_RPS="$acc_rps" LIM_RPS="$lim_rps" ACC="$acc"
    note_busy "$co" "$k" "$s" "$r"
}

check_idle
nw=0
for k in "${CASES[@]}"; do
    read -r -a csrv <<<"${CSRV[$k]}"
    nw=$((nw + ROUNDS * ${#csrv[@]}))
done
log "measuring: ${#CASES[@]} cases (${CASES[*]}) x $ROUNDS rounds x 2 rows x ${DURATION}s (~$((nw * (DURATION + 3)))s)"
for k in "${CASES[@]}"; do
    read -r -a csrv <<<"${CSRV[$k]}"
    each_round csrv measure "$k"
done

# cost_pct BASE WITH: how much more WITH costs than BASE, in %: BASE/WITH - 1 for rates.
cost_pct() {
    if [[ -z $1 || -z $2 || $1 == - || $2 == - ]]; then
        echo -
        return
    fi
    awk -v a="$1" -v b="$2" 'BEGIN { if (b == 0) print "-"; else printf "%+.1f\n", (a / b - 1) * 100 }'
}

# near_one X: "met" when X (in %) is within ACC_TOL_PCT points of 100, else "not met" ("-" for none).
near_one() {
    if [[ $1 == - ]]; then
        echo -
        return
    fi
    awk -v x="$1" -v t="$ACC_TOL_PCT" 'BEGIN { d = x - 100; if (d < 0) d = -d; print (d <= t ? "met" : "not met") }'
}

md=$(results_md traffic)
{
    echo "# traffic: what rate limits, basic auth and shared dictionaries cost (issue 29)"
    echo
    bench_env_md "-t$WRK_THREADS -c$WRK_CONNECTIONS -d${DURATION}s --latency"
    echo "- every Umbra route answers \"$BODY\" from the same on_request hook (return umbra.respond(200, \"$BODY\")); the row umbra is GET /plain, that route alone"
    echo "- limit-never: umbra+limit, GET /limited: the route with rate_limit = \"big\" (rate $BIG_RATE, burst $BIG_RATE, key \"client\"), never reached"
    echo "- auth-ok: umbra+auth, GET /auth: the route with auth = { basic = FILE } (one bcrypt line, htpasswd -nbB); every request of both rows carries the right Authorization: Basic (wrk -s, wrk.headers)"
    echo "- shared-incr: umbra+incr, GET /incr: the hook does umbra.shared.counters:incr(\"k\", 1, 0) (shared = { counters = \"1MB\" }; one key for every request and worker) before it answers"
    echo "- limit-vs-nginx: GET /z with a limit of $Z_RATE r/s, burst $Z_BURST per client address (wrk's one address: one bucket). nginx: limit_req_zone \$binary_remote_addr zone=z:10m rate=${Z_RATE}r/s; limit_req zone=z burst=$Z_BURST nodelay; limit_req_status 429; the file /z of \"$BODY\" (root, open_file_cache: nginx's return runs before limit_req and is never limited). Umbra: rate_limits.z = { rate = $Z_RATE, burst = $Z_BURST, key = \"client\" } on /z (rate_limit = \"z\"). The bucket is full at each round's start (0.5 s idle)"
    echo
    md_row case server "median req/s" compared ratio target met "p50 ms" "p99 ms" "CPU server %" "server us/req" \
        "CPU wrk %" "CPU other %" "accepted/s" "429/s" "accuracy %" "req/s per round" repeated
    md_row --- --- ---: --- ---: --- --- ---: ---: ---: ---: ---: ---: ---: ---: ---: --- ---
} >"$md"

# shellcheck disable=SC2034 # read by each_verdict
declare -A VERDICT=()
fmt='%-22s %-11s %12s %-16s %7s %-14s %-8s %7s %7s %5s %7s %5s %6s %10s %9s %8s\n'
# shellcheck disable=SC2059
printf "\n$fmt" case server "median req/s" compared ratio target met "p50 ms" "p99 ms" "CPU%" "us/req" wrk other \
    "accepted/s" "429/s" "accur. %"
printf '%s\n' "--------------------------------------------------------------------------------------------------------------------------------------------------------"
for k in "${CASES[@]}"; do
    read -r -a csrv <<<"${CSRV[$k]}"
    declare -A MR=() MU=() MA=() MC=()
    median_map MR RPS "$k," "${csrv[@]}"
    median_map MU US "$k," "${csrv[@]}"
    median_map MA ACC_RPS "$k," "${csrv[@]}"
    median_map MC ACC "$k," "${csrv[@]}"
    for s in "${csrv[@]}"; do
        cmpd=- rr=- tg=- met=-
        case $k,$s in
        limit-never,umbra+limit | auth-ok,umbra+auth)
            cmpd="x umbra"
            rr=$(ratio "${MR[$s]}" "${MR[umbra]}")
            tg=">= $TARGET_SAME"
            met=$(atleast "$rr" "$TARGET_SAME" met "not met")
            VERDICT[$k]="x the route without: $rr ($met: $tg); server CPU per request ${MU[umbra]} -> ${MU[$s]} us ($(cost_pct "${MU[$s]}" "${MU[umbra]}")%)"
            ;;
        shared-incr,umbra+incr)
            cmpd="cost vs umbra"
            rr="$(cost_pct "${MR[umbra]}" "${MR[$s]}")%"
            tg="<= $TARGET_INCR_COST_PCT%"
            met=$(atmost "${rr%\%}" "$TARGET_INCR_COST_PCT" met "not met")
            VERDICT[$k]="the incr costs $rr in req/s ($met: $tg); server CPU per request ${MU[umbra]} -> ${MU[$s]} us ($(cost_pct "${MU[$s]}" "${MU[umbra]}")%)"
            ;;
        limit-vs-nginx,umbra)
            if bench_uses nginx; then
                cmpd="accepted x nginx"
                rr=$(ratio "${MA[umbra]}" "${MA[nginx]}")
                tg=">= $TARGET_X_NGINX"
                met=$(atleast "$rr" "$TARGET_X_NGINX" met "not met")
                VERDICT[$k]="accepted/s x nginx $rr ($met: $tg); accuracy Umbra ${MC[umbra]}% ($(near_one "${MC[umbra]}"): 100 +- $ACC_TOL_PCT %), nginx ${MC[nginx]}% ($(near_one "${MC[nginx]}")); all answers (200 and 429) x nginx $(ratio "${MR[umbra]}" "${MR[nginx]}") (${MR[umbra]} vs ${MR[nginx]} req/s; server CPU per request ${MU[umbra]} vs ${MU[nginx]} us)"
            else
                VERDICT[$k]="accuracy Umbra ${MC[umbra]}% ($(near_one "${MC[umbra]}"): 100 +- $ACC_TOL_PCT %); no nginx in SERVERS"
            fi
            ;;
        esac
        read -r p50 p99 c cw co lr <<<"$(medians "$k,$s" P50 P99 CPU_S CPU_W CPU_O LIM_RPS)"
        fixed 0 c cw co
        # shellcheck disable=SC2059
        printf "$fmt" "traffic/$k" "$s" "${MR[$s]}" "$cmpd" "$rr" "$tg" "$met" "$p50" "$p99" "$c" "${MU[$s]}" "$cw" "$co" \
            "${MA[$s]}" "$lr" "${MC[$s]}"
        md_row "traffic/$k" "$s" "${MR[$s]}" "$cmpd" "$rr" "$tg" "$met" "$p50" "$p99" "$c" "${MU[$s]}" "$cw" "$co" \
            "${MA[$s]}" "$lr" "${MC[$s]}" "${RPS[$k,$s]% }" "$(repeated_md "$k,$s")" >>"$md"
    done
done
{
    echo
    echo "compared, ratio: limit-never and auth-ok, the route's median req/s / umbra's (the same"
    echo "route without the limit or the password); shared-incr, the incr's cost: umbra's median"
    echo "req/s / umbra+incr's - 1, in %; limit-vs-nginx, Umbra's median accepted requests/s /"
    echo "nginx's. limit-vs-nginx: median req/s counts every answer, 200 and 429 (the throughput"
    echo "each sustains under the limit); accepted/s = (wrk's responses - its \"Non-2xx or 3xx\")"
    echo "/ wrk's run length; 429/s the rest; accuracy = accepted / ($Z_RATE x run length + $Z_BURST)"
    echo "in %, 100 for a bucket that lets exactly the rate and the burst through (target: within $ACC_TOL_PCT"
    echo "points of 100; the 200 answers' bytes are not checked in that case, as 429s of another size are"
    echo "mixed in: a round is refused for socket errors, no 429, or a server's limit reached)."
    echo "CPU: % of one CPU during the wrk run (200% = both CPUs), medians of the rounds: the"
    echo "server, wrk, and the rest of the machine's busy time (approximate). server us/req: the"
    echo "server's CPU time per request (for limit-vs-nginx, per answer of either status). wrk and"
    echo "the server share the machine's 2 CPUs: compare the ratios, only within one run; ratios"
    echo "within about 5-7% of each other mean \"the same\" (the CPU per request tells a small cost"
    echo "better)."
    busy_md
    echo
    echo "Targets (issue 29): a route with a rate limit it never reaches, and one with basic auth"
    echo "and the right password, each >= $TARGET_SAME x the same route without; a shared dictionary"
    echo "incr from a hook costs <= $TARGET_INCR_COST_PCT% of a hook that answers alone; beside nginx's"
    echo "limit_req (same rate, burst and load), the same accuracy and >= $TARGET_X_NGINX x its"
    echo "accepted requests/s."
    echo
    each_verdict echo "- traffic" "${CASES[@]}"
    repeats_md
    echo
    echo "The password file (users.htpasswd) is one line, \`$AUTH_USER:\$2y\$05\$...\` (htpasswd -nbB)."
    configs_md
} >>"$md"
echo
each_verdict log "target traffic" "${CASES[@]}"
warn_busy
warn_repeats
log "results written to $md"
