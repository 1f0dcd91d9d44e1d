#!/usr/bin/env bash
# Scenario "static": Umbra against nginx serving two files from disk, a small one (1 KiB:
# request handling cost) and a large one (5 MiB: the send path). See bench/README.md.
set -euo pipefail
# shellcheck source=bench/lib.sh
. "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

need wrk curl python3 awk timeout pgrep
bench_init
if bench_uses umbra; then ensure_umbra; fi

docroot=$BENCH_TMP/docroot
mkdir -p "$docroot"
chmod 755 "$docroot"
declare -A SIZE=([1k.bin]=1024 [5m.bin]=$((5 * 1024 * 1024)))
FILES=(1k.bin 5m.bin)
for f in "${FILES[@]}"; do make_file "$docroot/$f" "${SIZE[$f]}"; done

declare -A PORT
if bench_uses nginx; then
    start_nginx "$docroot"
    PORT[nginx]=$NGINX_PORT
fi
if bench_uses umbra; then
    start_umbra "$docroot"
    PORT[umbra]=$UMBRA_PORT
fi
read -r -a SRV <<<"$SERVERS"

# Each server's answer (head and body) to each file, in bytes: what wrk should read per
# response.
declare -A EXPECT
for s in "${SRV[@]}"; do
    for f in "${FILES[@]}"; do
        check_get "$s" "http://127.0.0.1:${PORT[$s]}/$f" "${SIZE[$f]}"
        EXPECT[$f,$s]=$(answer_bytes "$s" "http://127.0.0.1:${PORT[$s]}/$f")
    done
done

# shellcheck disable=SC2034 # MBPS is read by name (median_of)
declare -A RPS MBPS
# measure FILE SERVER ROUND
measure() {
    local f=$1 s=$2 r=$3 out url
    # Still up? A server that crashed mid-run must not be reported as slow.
    kill -0 "$([[ $s == nginx ]] && echo "$NGINX_PID" || echo "$UMBRA_PID")" 2>/dev/null ||
        die "$s died during the run (log in $BENCH_TMP/$s/)"
    out=$BENCH_TMP/wrk-$f-$s-$r.txt
    url="http://127.0.0.1:${PORT[$s]}/$f"
    run_wrk "$url" "$out"
    read_wrk "$out"
    wrk_check "${EXPECT[$f,$s]}" "$WRK_CONNECTIONS"
    answer_check "$url" "$docroot/$f"
    printf '[bench] %-7s %-6s round %d/%d: %10.2f req/s %10.2f MB/s  %s requests, %s\n' \
        "$f" "$s" "$r" "$ROUNDS" "$WRK_RPS" "$WRK_MBPS" "$WRK_REQS" "${ROUND_BAD:-answers right}" >&2
    [[ -n $ROUND_BAD ]] && return 0
    add_figures "$f,$s" RPS="$WRK_RPS" MBPS="$WRK_MBPS"
}

check_idle
total=$((${#FILES[@]} * ROUNDS * ${#SRV[@]} * DURATION))
log "measuring: ${#FILES[@]} files x $ROUNDS rounds x ${#SRV[@]} servers x ${DURATION}s (~${total}s)"
for f in "${FILES[@]}"; do each_round SRV measure "$f"; done

# Medians, ratios, table.
md=$(results_md static)
{
    echo "# static: Umbra vs nginx"
    echo
    bench_env_md
    echo
    md_row scenario server "median req/s" "median MB/s" "Umbra/nginx req/s" "Umbra/nginx MB/s" "req/s per round" repeated
    md_row --- --- ---: ---: ---: ---: --- ---
} >"$md"

printf '\n%-10s %-6s %14s %12s %18s %17s\n' scenario server "median req/s" "median MB/s" "Umbra/nginx req/s" "Umbra/nginx MB/s"
printf '%s\n' "-------------------------------------------------------------------------------------"
for f in "${FILES[@]}"; do
    declare -A MED_R=() MED_M=()
    median_map MED_R RPS "$f," "${SRV[@]}"
    median_map MED_M MBPS "$f," "${SRV[@]}"
    for s in "${SRV[@]}"; do
        rr=$(umbra_ratio "$s" MED_R nginx)
        rm=$(umbra_ratio "$s" MED_M nginx)
        printf '%-10s %-6s %14s %12s %18s %17s\n' "static/${f%.bin}" "$s" "${MED_R[$s]}" "${MED_M[$s]}" "$rr" "$rm"
        md_row "static/${f%.bin}" "$s" "${MED_R[$s]}" "${MED_M[$s]}" "$rr" "$rm" "${RPS[$f,$s]% }" "$(repeated_md "$f,$s")" >>"$md"
    done
done
{
    echo
    echo "MB = 2^20 bytes (wrk's Transfer/sec). wrk and both servers share the machine's CPUs:"
    echo "compare the ratios, not the absolute figures, and only within one run."
    repeats_md
    configs_md
} >>"$md"
echo
warn_repeats
log "results written to $md"
