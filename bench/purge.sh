#!/usr/bin/env bash
# Scenario "purge": surrogate-key purges (issue 17), Umbra alone. Per round:
#   - purge-time: PURGE_SMALL (10,000) and PURGE_BIG (100,000) objects, each set tagged
#     with one tag, purged by that tag (POST /purge on the admin listener); the time per
#     object removed at 100,000 against at 10,000 (linear: the same);
#   - purge-hits: 1 KiB hits (wrk, DURATION s) on an untagged object while a 100,000-object
#     tag purge runs in the middle of the run: the hits per second inside the purge's
#     window against the rest of the same run (purge_hits.lua counts answers per 10 ms);
#   - tagged-hit: 1 KiB hits on an object with 4 tags against hits on an untagged one
#     (separate wrk runs, alternating which goes first).
# See bench/README.md.
set -euo pipefail
# shellcheck source=bench/lib.sh
. "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

: "${PURGE_SMALL:=10000}"
: "${PURGE_BIG:=100000}"
SMALL=1024
CC_LONG="cc=max-age%3D3600"
URL_UNTAGGED="/hit/untagged?size=$SMALL&$CC_LONG"
URL_TAGGED="/hit/tagged?size=$SMALL&$CC_LONG&header=Surrogate-Key:product-17+home+shelf-3+all"
# Targets (issue 17): linear (per-object time at 100,000 within 1.5 x that at 10,000),
# hits during a purge >= 0.8 x without, tagged hits cost <= 3 %.
TARGET_LINEAR=1.5
TARGET_DURING=0.8
TARGET_TAG_COST_PCT=3

need wrk curl python3 awk timeout
bench_init
bench_uses umbra || die "the purge scenario measures Umbra alone: SERVERS must name umbra"
ensure_umbra
ensure_origin
declare -A PID
start_origin
PID[origin]=$ORIGIN_PID
ADMIN_PORT=$(free_port)
start_umbra_with "upstreams = { app = { servers = { \"http://127.0.0.1:$ORIGIN_PORT\" } } }
routes = { { path = \"/\", upstream = \"app\" } }
cache = { memory = \"1GB\", max_object = \"1MB\" }
admin = { listen = \"127.0.0.1:$ADMIN_PORT\" }"
PID[umbra]=$UMBRA_PID
wait_port admin "$UMBRA_PID" "$ADMIN_PORT" "$BENCH_TMP/umbra/umbra.log"
BASE=http://127.0.0.1:$UMBRA_PORT

# fill PREFIX N TAG: N objects /PREFIX/I tagged TAG, or die.
fill() {
    local t0 t1
    t0=$(now_s)
    timeout 400 python3 "$BENCH_DIR/purge_fill.py" "$UMBRA_PORT" "$1" "$2" "$SMALL" "$3" ||
        die "filling $2 objects /$1/ failed"
    t1=$(now_s)
    log "filled $2 objects /$1/ tagged $3 in $(awk -v a="$t0" -v b="$t1" 'BEGIN { printf "%.1f", b - a }') s"
}

# purge TAG: POST /purge {"tags": [TAG]}; sets PURGED (objects affected), PURGE_S (curl's
# time_total), PURGE_T0 and PURGE_T1 (wall-clock bounds, s.ns).
purge() {
    local out
    PURGE_T0=$(now_s)
    out=$(curl -s --max-time 120 -w ' %{time_total}' -H 'Content-Type: application/json' \
        -d "{\"tags\": [\"$1\"]}" "http://127.0.0.1:$ADMIN_PORT/purge") || die "POST /purge failed"
    PURGE_T1=$(now_s)
    [[ $out =~ \"purged\":([0-9]+).*\ ([0-9.]+)$ ]] || die "POST /purge answered '$out'"
    PURGED=${BASH_REMATCH[1]}
    PURGE_S=${BASH_REMATCH[2]}
}

# The hit objects, stored once (a hit never reaches the origin).
origin_ref "$SMALL" "$BENCH_TMP/ref.body"
for u in "$URL_UNTAGGED" "$URL_TAGGED"; do
    check_get umbra "$BASE$u" "$SMALL"
    head=$(curl -s -D - -o /dev/null "$BASE$u")
    grep -qiE '^Cache-Status:.*;[[:space:]]*hit' <<<"$head" || die "GET $u is not a hit: $head"
    ! grep -qi '^Surrogate-Key:' <<<"$head" || die "GET $u sent the tags to the client"
done
EXPECT=$(answer_bytes umbra "$BASE$URL_UNTAGGED")
EXPECT_T=$(answer_bytes umbra "$BASE$URL_TAGGED")

# shellcheck disable=SC2034 # read by name (median_of)
declare -A PER_OBJ_US PURGE_SEC DURING RATE_IN RATE_OUT RPS
FILLED=0

# purge_time time ROUND: the 10,000 and 100,000 purges.
purge_time() {
    local r=$2 n t
    for n in "$PURGE_SMALL" "$PURGE_BIG"; do
        fill "s$r-$n" "$n" "t$r-$n"
        purge "t$r-$n"
        [[ $PURGED == "$n" ]] || {
            round_bad "purge of $n objects affected $PURGED"
            return 0
        }
        t=$(awk -v s="$PURGE_S" -v n="$n" 'BEGIN { printf "%.3f", s / n * 1e6 }')
        log "purge-time round $r: $n objects in $PURGE_S s ($t us per object)"
        add_figures "$n" PER_OBJ_US="$t" PURGE_SEC="$PURGE_S"
    done
}

# purge_hits during ROUND: wrk on the untagged object, a 100,000-object purge in the middle.
purge_hits() {
    local r=$2 out=$BENCH_TMP/wrk-during-$r.txt wpid in_c in_s out_c out_s ratio
    fill "b$r" "$PURGE_BIG" "big$r"
    alive umbra
    (run_wrk "$BASE$URL_UNTAGGED" "$out" "$WRK_CONNECTIONS" "$BENCH_DIR/purge_hits.lua") &
    wpid=$!
    sleep "$(awk -v d="$DURATION" 'BEGIN { print d / 2 }')"
    purge "big$r"
    wait "$wpid" || die "wrk failed (purge-hits round $r)"
    read_wrk "$out"
    wrk_check "$EXPECT" "$WRK_CONNECTIONS"
    grep -q '^STATUS 0$' "$out" || round_bad "wrk: answers other than 200 ($(grep '^STATUS' "$out"))"
    [[ $PURGED == "$PURGE_BIG" ]] || round_bad "the purge affected $PURGED objects, not $PURGE_BIG"
    answer_check "$BASE$URL_UNTAGGED" "$BENCH_TMP/ref.body"
    [[ -n $ROUND_BAD ]] && return 0
    # Hits per second in the 10 ms buckets inside the purge's window, and in the others
    # (the first and last second of the run left out: wrk's start and end).
    read -r in_c in_s out_c out_s <<<"$(awk -v a="$PURGE_T0" -v b="$PURGE_T1" '
        # Keys as the text wrk wrote: awks differ in how they print large numbers.
        /^BUCKET / { c[$2] = $3 + 0; k = $2 + 0; if (lo == "" || k < lo) lo = k; if (k > hi) hi = k }
        END {
            pa = a * 100; pb = b * 100
            for (k = lo + 100; k <= hi - 100; k++) {
                n = c[sprintf("%.0f", k)] + 0
                if (k >= pa && k + 1 <= pb) { ic += n; is += 0.01 }
                else if (k + 1 < pa - 10 || k > pb + 10) { oc += n; os += 0.01 }
            }
            printf "%d %.2f %d %.2f\n", ic, is, oc, os
        }' "$out")"
    if awk -v s="$in_s" 'BEGIN { exit !(s < 0.02) }'; then
        warn "purge-hits round $r: the purge took $PURGE_S s, under two 10 ms buckets: no figure"
        round_bad "the purge window was too short to measure ($PURGE_S s)"
        return 0
    fi
    RATE_IN_R=$(awk -v c="$in_c" -v s="$in_s" 'BEGIN { printf "%.0f", c / s }')
    RATE_OUT_R=$(awk -v c="$out_c" -v s="$out_s" 'BEGIN { printf "%.0f", c / s }')
    ratio=$(ratio "$RATE_IN_R" "$RATE_OUT_R")
    log "purge-hits round $r: purge of $PURGE_BIG in $PURGE_S s; hits $RATE_IN_R/s during it ($in_c in $in_s s), $RATE_OUT_R/s outside it ($out_c in $out_s s): $ratio"
    add_figures during DURING="$ratio" RATE_IN="$RATE_IN_R" RATE_OUT="$RATE_OUT_R" PURGE_SEC="$PURGE_S"
}

# tagged_hit KIND ROUND: wrk on the tagged or the untagged object.
tagged_hit() {
    local k=$1 r=$2 url out o0 o1
    url=$BASE$URL_UNTAGGED
    [[ $k == tagged ]] && url=$BASE$URL_TAGGED
    out=$BENCH_TMP/wrk-$k-$r.txt
    o0=$(origin_count)
    run_wrk "$url" "$out"
    o1=$(origin_count)
    read_wrk "$out"
    if [[ $k == tagged ]]; then wrk_check "$EXPECT_T" "$WRK_CONNECTIONS"; else wrk_check "$EXPECT" "$WRK_CONNECTIONS"; fi
    ((o1 == o0)) || round_bad "the origin got $((o1 - o0)) requests during a round of hits"
    answer_check "$url" "$BENCH_TMP/ref.body"
    log "tagged-hit $k round $r: $WRK_RPS req/s"
    [[ -n $ROUND_BAD ]] && return 0
    add_figures "$k" RPS="$WRK_RPS"
}

check_idle
log "measuring: $ROUNDS rounds of purge-time ($PURGE_SMALL, $PURGE_BIG), purge-hits (${DURATION}s) and tagged-hit (2 x ${DURATION}s)"
KINDS=(untagged tagged)
for ((r = 1; r <= ROUNDS; r++)); do
    bench_round purge_time time "$r"
    bench_round purge_hits during "$r"
done
each_round KINDS tagged_hit
alive umbra origin

LIN=$(ratio "$(median_of PER_OBJ_US "$PURGE_BIG")" "$(median_of PER_OBJ_US "$PURGE_SMALL")")
DUR=$(median_of DURING during)
TAG_COST=$(awk -v a="$(median_of RPS untagged)" -v b="$(median_of RPS tagged)" \
    'BEGIN { if (b == 0) print "-"; else printf "%+.1f", (a / b - 1) * 100 }')
declare -A VERDICT=(
    [time]="per-object time at $PURGE_BIG / at $PURGE_SMALL: $LIN ($(atmost "$LIN" "$TARGET_LINEAR" met "not met"): <= $TARGET_LINEAR)"
    [during]="hits during a $PURGE_BIG-object purge / outside it: $DUR ($(atleast "$DUR" "$TARGET_DURING" met "not met"): >= $TARGET_DURING)"
    [tagged]="a hit on a tagged object costs $TAG_COST% ($(atmost "${TAG_COST#+}" "$TARGET_TAG_COST_PCT" met "not met"): <= $TARGET_TAG_COST_PCT%)"
)
md=$(results_md purge)
{
    echo "# purge: surrogate-key purges and hits on tagged objects (Umbra)"
    echo
    bench_env_md
    echo "- purge-time: $PURGE_SMALL and $PURGE_BIG objects of $SMALL bytes, each set tagged with one tag (filled with bench/purge_fill.py), purged by it with POST /purge on the admin listener; curl's time_total"
    echo "- purge-hits: wrk -t$WRK_THREADS -c$WRK_CONNECTIONS -d${DURATION}s -s bench/purge_hits.lua on GET $URL_UNTAGGED, a $PURGE_BIG-object purge started at $((DURATION / 2)) s; hits/s in the 10 ms buckets inside the purge against those outside it (the first and last second left out)"
    echo "- tagged-hit: wrk on GET $URL_TAGGED (4 tags) and on GET $URL_UNTAGGED, alternating"
    echo
    md_row measure "median" "per round" target verdict
    md_row --- ---: --- --- ---
    md_row "us per object, $PURGE_SMALL" "$(median_of PER_OBJ_US "$PURGE_SMALL")" "${PER_OBJ_US[$PURGE_SMALL]% }" "" ""
    md_row "us per object, $PURGE_BIG" "$(median_of PER_OBJ_US "$PURGE_BIG")" "${PER_OBJ_US[$PURGE_BIG]% }" "<= $TARGET_LINEAR x the $PURGE_SMALL figure" "${VERDICT[time]}"
    md_row "purge s, $PURGE_BIG (purge-hits runs)" "$(median_of PURGE_SEC during)" "${PURGE_SEC[during]% }" "" ""
    md_row "hits/s during the purge" "$(median_of RATE_IN during)" "${RATE_IN[during]% }" "" ""
    md_row "hits/s outside it" "$(median_of RATE_OUT during)" "${RATE_OUT[during]% }" "" ""
    md_row "during / outside" "$DUR" "${DURING[during]% }" ">= $TARGET_DURING" "${VERDICT[during]}"
    md_row "req/s, untagged 1 KiB hit" "$(median_of RPS untagged)" "${RPS[untagged]% }" "" ""
    md_row "req/s, tagged 1 KiB hit" "$(median_of RPS tagged)" "${RPS[tagged]% }" "cost <= $TARGET_TAG_COST_PCT%" "${VERDICT[tagged]}"
    echo
    echo "A PURGE on the site's listener runs on the worker that took it (its other connections"
    echo "wait for it); POST /purge runs on the admin thread, which is why the scenario uses it."
    echo "wrk and Umbra share the machine's CPUs: ratios within about 5 % are noise."
    repeats_md
    configs_md
} >"$md"
echo
each_verdict log "target purge" time during tagged
warn_repeats
log "results written to $md"
