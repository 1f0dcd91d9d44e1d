#!/usr/bin/env bash
# Scenario "cgi": Umbra's CGI origin against Apache httpd's mod_cgi (prefork), both
# running the same two shell scripts: one that prints only its head (the cost of a
# process per request) and one that prints its environment (the meta-variables and
# a body). See bench/README.md.
set -euo pipefail
# This scenario compares Umbra with Apache, whatever SERVERS says for the others
# (CGI_SERVERS chooses here).
SERVERS=${CGI_SERVERS:-apache umbra}
# shellcheck disable=SC2034 # read by lib.sh (check_knobs)
BENCH_KNOWN_SERVERS="apache umbra"
# A process per request on 2 shared CPUs: fewer connections than the other scenarios
# (each keeps one script running), CGI_CONNECTIONS of them.
: "${CGI_CONNECTIONS:=32}"
# shellcheck source=bench/lib.sh
. "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
WRK_CONNECTIONS=$CGI_CONNECTIONS
# Target (issue 16): at least 1.2 x Apache's requests per second on both scripts.
TARGET_X_APACHE=1.2

need wrk curl python3 awk timeout pgrep
bench_init
if bench_uses umbra; then ensure_umbra; fi

cgidir=$BENCH_TMP/cgi-bin
mkdir -p "$cgidir"
chmod 755 "$cgidir"
printf '#!/bin/sh\nprintf '"'"'Content-Type: text/plain\\n\\n'"'"'\n' >"$cgidir/empty.sh"
printf '#!/bin/sh\nprintf '"'"'Content-Type: text/plain\\n\\n'"'"'\nexec env\n' >"$cgidir/env.sh"
chmod 755 "$cgidir/empty.sh" "$cgidir/env.sh"
SCRIPTS=(empty env)

# start_apache: httpd with mod_cgi under the prefork MPM (the pairing Debian's apache2
# uses for CGI; mod_cgid is the threaded MPMs' one), its own minimal config in the temp
# dir, as many processes as wrk has connections, keep-alive without a request limit. Sets
# APACHE_PORT and APACHE_PID.
start_apache() {
    local dir=$BENCH_TMP/apache mods=/usr/lib/apache2/modules user=""
    need apache2
    mkdir -p "$dir"
    APACHE_PORT=$(free_port)
    if [[ $(id -u) == 0 ]]; then user=$'User www-data\nGroup www-data'; fi
    cat >"$dir/httpd.conf" <<EOF
ServerRoot $dir
ServerName 127.0.0.1
Listen 127.0.0.1:$APACHE_PORT
PidFile $dir/httpd.pid
ErrorLog $dir/error.log
LogLevel warn
$user
LoadModule mpm_prefork_module $mods/mod_mpm_prefork.so
LoadModule authz_core_module $mods/mod_authz_core.so
LoadModule alias_module $mods/mod_alias.so
LoadModule cgi_module $mods/mod_cgi.so
StartServers $WRK_CONNECTIONS
MinSpareServers $WRK_CONNECTIONS
MaxSpareServers $((WRK_CONNECTIONS * 2))
ServerLimit $((WRK_CONNECTIONS * 2))
MaxRequestWorkers $((WRK_CONNECTIONS * 2))
MaxConnectionsPerChild 0
KeepAlive On
MaxKeepAliveRequests 0
KeepAliveTimeout 15
Timeout 30
ScriptAlias /cgi-bin/ $cgidir/
<Directory $cgidir>
    Require all granted
</Directory>
EOF
    # In a session of its own: prefork's parent signals its whole process group when it
    # stops, which would otherwise be bench/run's and end the run with it.
    bench_start apache "$dir/stderr.log" setsid apache2 -f "$dir/httpd.conf" -DFOREGROUND
    APACHE_PID=$BENCH_LAST_PID
    wait_port apache "$APACHE_PID" "$APACHE_PORT" "$dir/error.log"
}

declare -A PORT PID
if bench_uses apache; then
    start_apache
    PORT[apache]=$APACHE_PORT
    PID[apache]=$APACHE_PID
fi
if bench_uses umbra; then
    start_umbra_with "cgi = { max_children = $((WRK_CONNECTIONS * 2)), timeout = 30 }
routes = { { path = \"/cgi-bin/\", cgi = \"$cgidir\" } }"
    PORT[umbra]=$UMBRA_PORT
    PID[umbra]=$UMBRA_PID
fi
read -r -a SRV <<<"$SERVERS"

# script_check SERVER SCRIPT: one GET answers 200 with the script's body: nothing for
# empty, the meta-variables for env. Prints "" when right, else what is wrong.
script_check() {
    local s=$1 sc=$2 out code
    out=$(curl -s -o "$BENCH_TMP/answer.body" --max-time 20 -w '%{http_code}' \
        "http://127.0.0.1:${PORT[$s]}/cgi-bin/$sc.sh") || {
        echo "curl failed"
        return 0
    }
    code=$out
    if [[ $code != 200 ]]; then
        echo "GET /cgi-bin/$sc.sh answered $code"
    elif [[ $sc == empty && -s $BENCH_TMP/answer.body ]]; then
        echo "GET /cgi-bin/empty.sh gave a body"
    elif [[ $sc == env ]] && ! grep -q '^GATEWAY_INTERFACE=CGI/1.1$' "$BENCH_TMP/answer.body"; then
        echo "GET /cgi-bin/env.sh gave no GATEWAY_INTERFACE=CGI/1.1"
    fi
}

declare -A EXPECT
for s in "${SRV[@]}"; do
    for sc in "${SCRIPTS[@]}"; do
        bad=$(script_check "$s" "$sc")
        [[ -z $bad ]] || die "$s: $bad"
        # With wrk's request fields only (Host): env prints each field it gets.
        EXPECT[$sc,$s]=$(answer_bytes "$s" "http://127.0.0.1:${PORT[$s]}/cgi-bin/$sc.sh" \
            -H "User-Agent:" -H "Accept:")
        log "$s: /cgi-bin/$sc.sh answers ${EXPECT[$sc,$s]} bytes (head and body)"
    done
done

declare -A RPS
# measure SCRIPT SERVER ROUND
measure() {
    local sc=$1 s=$2 r=$3 out url bad
    kill -0 "${PID[$s]}" 2>/dev/null || die "$s died during the run (log in $BENCH_TMP/$s/)"
    out=$BENCH_TMP/wrk-$sc-$s-$r.txt
    url="http://127.0.0.1:${PORT[$s]}/cgi-bin/$sc.sh"
    run_wrk "$url" "$out"
    read_wrk "$out"
    wrk_check "${EXPECT[$sc,$s]}" "$WRK_CONNECTIONS"
    bad=$(script_check "$s" "$sc")
    [[ -z $bad ]] || round_bad "after the round, $bad"
    printf '[bench] %-6s %-7s round %d/%d: %10.2f req/s  %s requests, %s\n' \
        "$sc" "$s" "$r" "$ROUNDS" "$WRK_RPS" "$WRK_REQS" "${ROUND_BAD:-answers right}" >&2
    [[ -n $ROUND_BAD ]] && return 0
    add_figures "$sc,$s" RPS="$WRK_RPS"
}

check_idle
total=$((${#SCRIPTS[@]} * ROUNDS * ${#SRV[@]} * DURATION))
log "measuring: ${#SCRIPTS[@]} scripts x $ROUNDS rounds x ${#SRV[@]} servers x ${DURATION}s (~${total}s)"
for sc in "${SCRIPTS[@]}"; do each_round SRV measure "$sc"; done

md=$(results_md cgi)
{
    echo "# cgi: Umbra vs Apache httpd mod_cgi"
    echo
    bench_env_md
    echo "- apache: $(apache2 -v 2>/dev/null | head -n1 | sed 's/.*: //'), prefork + mod_cgi"
    echo
    md_row scenario server "median req/s" "Umbra/Apache req/s" "target" "req/s per round" repeated
    md_row --- --- ---: ---: --- --- ---
} >"$md"

printf '\n%-10s %-7s %14s %19s %8s\n' scenario server "median req/s" "Umbra/Apache req/s" target
printf '%s\n' "---------------------------------------------------------------"
for sc in "${SCRIPTS[@]}"; do
    declare -A MED=()
    median_map MED RPS "$sc," "${SRV[@]}"
    for s in "${SRV[@]}"; do
        rr=$(umbra_ratio "$s" MED apache)
        verdict=-
        [[ $rr != - ]] && verdict=$(atleast "$rr" "$TARGET_X_APACHE")
        printf '%-10s %-7s %14s %19s %8s\n' "cgi/$sc" "$s" "${MED[$s]}" "$rr" "$verdict"
        md_row "cgi/$sc" "$s" "${MED[$s]}" "$rr" "$verdict (>= $TARGET_X_APACHE)" "${RPS[$sc,$s]% }" "$(repeated_md "$sc,$s")" >>"$md"
    done
done
{
    echo
    echo "Each request runs a /bin/sh script in a new process on both servers. wrk and both"
    echo "servers share the machine's CPUs: compare the ratios, not the absolute figures, and"
    echo "only within one run."
    repeats_md
    configs_md
    if [[ -f $BENCH_TMP/apache/httpd.conf ]]; then
        echo
        echo "Apache httpd, \`httpd.conf\`:"
        echo
        echo '```apache'
        cat "$BENCH_TMP/apache/httpd.conf"
        echo '```'
    fi
} >>"$md"
echo
warn_repeats
log "results written to $md"
