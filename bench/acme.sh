#!/usr/bin/env bash
# Scenario "acme": automatic certificates (issue 30) against Debian's pebble, on 127.0.0.1.
# first-cert: the time from a server's start to the first verified TLS handshake for both
# of two names, Umbra (http-01) beside Caddy, each round with a fresh pebble and an empty
# storage. handshake: Umbra's full TLS handshakes per second (ab, a new connection each)
# while its ACME thread is ordering certificates, against the same Umbra with no order
# running. See bench/README.md.
set -euo pipefail
# shellcheck source=bench/lib.sh
. "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

# The two names of first-cert; challtestsrv answers every name with 127.0.0.1.
NAMES=(a.test b.test)
# Seconds a server gets for its first two certificates.
: "${ACME_TIMEOUT:=120}"
# handshake: ab's concurrent connections, and the acme = true entries (two names each)
# that the ordering Umbra renews without end (renew_before longer than their lifetime): as
# many as keep its ACME thread ordering through a whole round (each entry is due again
# 15 s after its certificate, and an order takes about 0.1 s: 40 entries kept it busy 23 %
# of a round; the results give the share of each round an order ran).
: "${ACME_HANDSHAKE_CONNECTIONS:=50}"
: "${ACME_ENTRIES:=200}"
# handshake: ab processes run at once, each with ACME_HANDSHAKE_CONNECTIONS / ACME_AB_PROCS
# connections (one ab, single-threaded, was the bottleneck: 98 % of a CPU).
: "${ACME_AB_PROCS:=2}"
# handshake, ordering: the pebble that keeps a CA's pace waits a random 0 to ACME_CA_SLEEP
# seconds before each validation (pebble's own default is 5).
: "${ACME_CA_SLEEP:=5}"
# Targets (issue 30): first-cert Umbra <= Caddy; handshakes while ordering >= 0.95 x without.
TARGET_FIRST=1.0
TARGET_HS=0.95

need pebble pebble-challtestsrv caddy openssl curl ab python3 awk timeout pgrep getconf
[[ $ACME_ENTRIES =~ ^[1-9][0-9]*$ ]] || die "ACME_ENTRIES must be a positive integer (got '$ACME_ENTRIES')"
[[ $ACME_CA_SLEEP =~ ^[0-9]+$ ]] || die "ACME_CA_SLEEP must be a whole number of seconds (got '$ACME_CA_SLEEP')"
[[ $ACME_AB_PROCS =~ ^[1-9][0-9]*$ ]] || die "ACME_AB_PROCS must be a positive integer (got '$ACME_AB_PROCS')"
AB_CONNS=$((ACME_HANDSHAKE_CONNECTIONS / ACME_AB_PROCS))
((AB_CONNS >= 1)) || die "ACME_HANDSHAKE_CONNECTIONS must be at least ACME_AB_PROCS"
bench_init
ensure_umbra
TOOL=$BENCH_DIR/acme_tool.py

# ---- pebble -------------------------------------------------------------------------

# pebble's own TLS certificate (for 127.0.0.1), made once.
PEBBLE_DIR=$BENCH_TMP/pebble
mkdir -p "$PEBBLE_DIR"
openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -days 2 -subj "/CN=pebble bench" \
    -addext "subjectAltName=IP:127.0.0.1,DNS:localhost" -keyout "$PEBBLE_DIR/pebble.key" \
    -out "$PEBBLE_DIR/pebble.crt" >"$PEBBLE_DIR/openssl.log" 2>&1 || die "openssl: $(cat "$PEBBLE_DIR/openssl.log")"
PEBBLE_PIDS=()

# start_pebble HTTP_PORT TLS_PORT [TAG [PACE]]: challtestsrv and pebble (nonce rejections
# at pebble's default) validating against those ports of 127.0.0.1; PACE "ca" lets pebble
# wait a random 0 to ACME_CA_SLEEP s before each validation (PEBBLE_VA_SLEEPTIME), as a
# CA does, else it validates at once (PEBBLE_VA_NOSLEEP=1). Its files are
# PEBBLE_DIR/pebble[-TAG].*; sets PEBBLE_DIRECTORY, PEBBLE_PID and PEBBLE_ROOT (its root,
# from the management API).
start_pebble() {
    local acme mgmt dns chall i f=$PEBBLE_DIR/pebble${3:+-$3} pace=(PEBBLE_VA_NOSLEEP=1)
    [[ ${4:-} == ca ]] && pace=(PEBBLE_VA_SLEEPTIME="$ACME_CA_SLEEP")
    acme=$(free_port) mgmt=$(free_port) dns=$(free_port) chall=$(free_port)
    cat >"$f.json" <<EOF
{"pebble": {"listenAddress": "127.0.0.1:$acme", "managementListenAddress": "127.0.0.1:$mgmt",
 "certificate": "$PEBBLE_DIR/pebble.crt", "privateKey": "$PEBBLE_DIR/pebble.key",
 "httpPort": $1, "tlsPort": $2, "ocspResponderURL": "", "externalAccountBindingRequired": false}}
EOF
    bench_start challtestsrv "$f-challtestsrv.log" pebble-challtestsrv -dns01 "127.0.0.1:$dns" \
        -http01 "" -https01 "" -tlsalpn01 "" -management "127.0.0.1:$chall" -defaultIPv4 127.0.0.1 -defaultIPv6 ""
    PEBBLE_PIDS+=("$BENCH_LAST_PID")
    wait_port challtestsrv "$BENCH_LAST_PID" "$chall" "$f-challtestsrv.log"
    bench_start pebble "$f.log" env "${pace[@]}" pebble -config "$f.json" -dnsserver "127.0.0.1:$dns"
    PEBBLE_PIDS+=("$BENCH_LAST_PID")
    PEBBLE_PID=$BENCH_LAST_PID
    wait_port pebble "$BENCH_LAST_PID" "$acme" "$f.log"
    PEBBLE_DIRECTORY=https://127.0.0.1:$acme/dir
    PEBBLE_ROOT=$f-root.pem
    for ((i = 0; i < 50; i++)); do
        curl -sf --max-time 5 --cacert "$PEBBLE_DIR/pebble.crt" -o "$PEBBLE_ROOT" "https://127.0.0.1:$mgmt/roots/0" &&
            curl -sf --max-time 5 --cacert "$PEBBLE_DIR/pebble.crt" -o /dev/null "$PEBBLE_DIRECTORY" && return 0
        sleep 0.1
    done
    tail -n 20 "$f.log" >&2
    die "pebble: no root or directory at 127.0.0.1:$mgmt, $acme"
}

stop_pebble() {
    local p
    for p in "${PEBBLE_PIDS[@]}"; do stop_pid "$p"; done
    PEBBLE_PIDS=()
}

# ---- the servers ----------------------------------------------------------------------

# umbra_config FILE HTTP_PORT TLS_PORT STORAGE ENTRIES [ACME_EXTRA]: Umbra's config.lua.
umbra_config() {
    cat >"$1" <<EOF
listen = { "127.0.0.1:$2", { "127.0.0.1:$3", tls = true } }
workers = 2
$( ((EUID == 0)) && echo 'user = "root" -- the bench runs as root; Umbra refuses root unless told' || true)
tls = {
$5
  acme = { directory = "$PEBBLE_DIRECTORY", email = "ops@example.com", storage = "$4",
           ca_file = "$PEBBLE_DIR/pebble.crt"${6:-} },
}
routes = { { path = "/", on_request = function(req) return umbra.respond(200, "ok") end } }
${UMBRA_EXTRA_CONFIG:-}
EOF
}

# start_server NAME HTTP_PORT TLS_PORT DIR: NAME (umbra, caddy) for NAMES with an empty
# storage in DIR; sets SERVER_PID.
start_server() {
    local s=$1 hp=$2 tp=$3 d=$4
    mkdir -p "$d/storage"
    case $s in
    umbra)
        umbra_config "$d/config.lua" "$hp" "$tp" "$d/storage" "  { hosts = { \"${NAMES[0]}\", \"${NAMES[1]}\" }, acme = true },"
        mkdir -p "$BENCH_TMP/umbra"
        cp "$d/config.lua" "$BENCH_TMP/umbra/config.lua"
        bench_start umbra "$d/server.log" "$UMBRA_BIN" "$d/config.lua"
        ;;
    caddy)
        cat >"$d/Caddyfile" <<EOF
{
	admin off
	http_port $hp
	https_port $tp
	storage file_system {
		root $d/storage
	}
	acme_ca $PEBBLE_DIRECTORY
	acme_ca_root $PEBBLE_DIR/pebble.crt
	email ops@example.com
	skip_install_trust
	ocsp_stapling off
}
${NAMES[0]}, ${NAMES[1]} {
	respond "ok"
}
EOF
        cp "$d/Caddyfile" "$BENCH_TMP/Caddyfile"
        bench_start caddy "$d/server.log" env HOME="$d" XDG_DATA_HOME="$d/data" XDG_CONFIG_HOME="$d/config" \
            caddy run --config "$d/Caddyfile" --adapter caddyfile
        ;;
    esac
    SERVER_PID=$BENCH_LAST_PID
}

# ---- first-cert ---------------------------------------------------------------------

# shellcheck disable=SC2034 # read by name (median_of)
declare -A SECS HS US CPU_S CPU_P CPU_C ORD BUSYP

# first_cert SERVER ROUND: a fresh pebble for SERVER's ports, SERVER started with an empty
# storage, then the seconds until a verified handshake for each of NAMES.
first_cert() {
    local s=$1 r=$2 hp tp d t0 secs
    hp=$(free_port) tp=$(free_port)
    d=$BENCH_TMP/first-$s-$r
    mkdir -p "$d"
    start_pebble "$hp" "$tp"
    t0=$(date '+%s.%N')
    start_server "$s" "$hp" "$tp" "$d"
    secs=$(python3 "$TOOL" first "$tp" "$PEBBLE_ROOT" "$t0" "$ACME_TIMEOUT" "${NAMES[@]}") || secs=
    kill -0 "$SERVER_PID" 2>/dev/null || round_bad "$s exited"
    stop_pid "$SERVER_PID"
    stop_pebble
    # The last round's log, for the results file (where the time went).
    cp "$d/server.log" "$BENCH_TMP/first-$s.log"
    if [[ -z $secs ]]; then
        tail -n 20 "$d/server.log" >&2
        round_bad "no verified handshake for both names within $ACME_TIMEOUT s"
    fi
    printf '[bench] acme/first-cert %-5s round %d/%d: %s s  %s\n' "$s" "$r" "$ROUNDS" "${secs:--}" \
        "${ROUND_BAD:-both names verified}" >&2
    [[ -n $ROUND_BAD ]] && return 0
    add_figures "first,$s" SECS="$secs"
}

# ---- handshake ----------------------------------------------------------------------

# One pebble and one storage for every handshake round: ACME_ENTRIES entries of two
# names, and a static certificate for localhost (the default, which ab's handshakes get).
HS_DIR=$BENCH_TMP/hs
mkdir -p "$HS_DIR/storage"
make_cert
HP=$(free_port)
TP=$(free_port)
HS_ENTRIES="  { hosts = { \"localhost\" }, cert = \"$BENCH_CERT\", key = \"$BENCH_KEY\" },"
for ((i = 1; i <= ACME_ENTRIES; i++)); do
    HS_ENTRIES+=$'\n'"  { hosts = { \"e$i-a.test\", \"e$i-b.test\" }, acme = true },"
done
printf 'ok' >"$BENCH_TMP/ok.body"

# start_hs CASE: Umbra for the handshake rounds; CASE ordering renews every entry without
# end (renew_before longer than the lifetime) from the pebble that keeps a CA's pace,
# stress the same from the one that validates at once (orders back to back), idle serves
# the stored certificates (due in years: no order). Sets PID[umbra] and PEBBLE_PID.
declare -A PID
start_hs() {
    local extra=
    [[ $1 != idle ]] && extra=', renew_before = "100000d"'
    PEBBLE_DIRECTORY=$DIR_FAST PEBBLE_PID=$PID_FAST
    [[ $1 == ordering ]] && PEBBLE_DIRECTORY=$DIR_CA PEBBLE_PID=$PID_CA
    umbra_config "$HS_DIR/config-$1.lua" "$HP" "$TP" "$HS_DIR/storage" "$HS_ENTRIES" "$extra"
    bench_start umbra "$HS_DIR/umbra-$1.log" "$UMBRA_BIN" "$HS_DIR/config-$1.lua"
    PID[umbra]=$BENCH_LAST_PID
    wait_port umbra "$BENCH_LAST_PID" "$TP" "$HS_DIR/umbra-$1.log"
}

# handshake CASE ROUND: one ab run against an Umbra started for CASE; for ordering, the
# orders that ended during the run and the share of it an order was running.
handshake() {
    local k=$1 r=$2 out rate n errs t0 t1 ord=- busy=- lg=$HS_DIR/umbra-$1.log us
    start_hs "$k"
    if [[ $k != idle ]]; then
        # Its first orders begin at once; wait for the first to end (pebble warmed).
        timeout 60 bash -c "until grep -q 'certificate issued' '$lg'; do sleep 0.1; done" ||
            die "ordering Umbra: no certificate issued within 60 s (log $lg)"
    fi
    answer_check "https://127.0.0.1:$TP/" "$BENCH_TMP/ok.body" --cacert "$BENCH_CERT"
    out=$HS_DIR/ab-$k-$r.txt
    t0=$(date '+%s.%N')
    round_cpu_start "${PID[umbra]}" "$PEBBLE_PID"
    # ACME_AB_PROCS ab processes at once, each writing $out.I; their rates add up.
    run_timed "$out" $((DURATION + 30)) bash -c 'pids=(); for ((i = 1; i <= $1; i++)); do
            ab -q -t "$2" -n 1000000 -c "$3" "$4" >"$5.$i" 2>&1 &
            pids+=($!)
        done; rc=0; for p in "${pids[@]}"; do wait "$p" || rc=$?; done; exit $rc' \
        ab-many "$ACME_AB_PROCS" "$DURATION" "$AB_CONNS" "https://127.0.0.1:$TP/" "$out"
    ((TIMED_RC == 0)) || die "ab exited with $TIMED_RC: $(tail -n 5 "$out".*)"
    round_cpu_end "$TIMED_CPU" "${PID[umbra]}" "$PEBBLE_PID"
    t1=$(date '+%s.%N')
    read -r rate n <<<"$(awk '/^Requests per second:/ { r += $4; k++ } /^Complete requests:/ { c += $3 }
        END { if (k) printf "%.2f %d\n", r, c }' "$out".*)"
    [[ -n $rate && -n $n ]] || die "could not parse ab's output ($out.*)"
    for ((i = 1; i <= ACME_AB_PROCS; i++)); do
        errs=$(ab_check "$out.$i" 2)
        [[ $errs == none ]] || round_bad "ab $i: $errs"
        (($(awk '/^Complete requests:/ { print $3 }' "$out.$i") < 1000000)) ||
            round_bad "ab $i reached its request cap (-n 1000000)"
    done
    answer_check "https://127.0.0.1:$TP/" "$BENCH_TMP/ok.body" --cacert "$BENCH_CERT"
    read -r ord busy <<<"$(python3 "$TOOL" busy "$lg" "$t0" "$t1")"
    if [[ $k == idle ]]; then
        ((ord == 0 && busy == 0)) || round_bad "the idle Umbra ran orders ($ord ended, ${busy}% of the run)"
        grep -q 'acme: .*\(ordering\|renewing\)' "$lg" && round_bad "the idle Umbra ordered a certificate"
    else
        ((busy > 0)) || round_bad "no order ran during the round"
    fi
    stop_pid "${PID[umbra]}"
    us=$(us_each "${ROUND_TICKS[0]}" "$n" 1)
    printf '[bench] acme/handshake %-8s round %d/%d: %10.2f conn/s  %s done  Umbra CPU %s%% (%s us each) pebble %s%% ab %s%%  orders ended %s, ordering %s%% of the run  %s\n' \
        "$k" "$r" "$ROUNDS" "$rate" "$n" "${ROUND_PCT[0]}" "$us" "${ROUND_PCT[1]}" "$ROUND_CLIENT_PCT" "$ord" "$busy" \
        "${ROUND_BAD:-answers right}" >&2
    [[ -n $ROUND_BAD ]] && return 0
    add_figures "hs,$k" HS="$rate" US="$us" CPU_S="${ROUND_PCT[0]}" CPU_P="${ROUND_PCT[1]}" CPU_C="$ROUND_CLIENT_PCT" \
        ORD="$ord" BUSYP="$busy"
}

check_idle
log "measuring: first-cert $ROUNDS rounds x 2 servers; handshake $ROUNDS rounds x 3 cases (idle ordering stress) x ${DURATION}s"
# shellcheck disable=SC2034 # read by each_round (a nameref)
FIRST_SRV=(caddy umbra)
each_round FIRST_SRV first_cert

start_pebble "$HP" "$TP" fast
DIR_FAST=$PEBBLE_DIRECTORY PID_FAST=$PEBBLE_PID
start_pebble "$HP" "$TP" ca ca
DIR_CA=$PEBBLE_DIRECTORY PID_CA=$PEBBLE_PID
# The storage filled once (every entry issued), so that the idle Umbra has every
# certificate and the ordering one renews from its start.
start_hs stress
n=0
for ((i = 0; i < ACME_TIMEOUT * 10 && n < ACME_ENTRIES; i++)); do
    n=$(grep -c 'certificate issued' "$HS_DIR/umbra-stress.log" || true)
    sleep 0.1
done
((n >= ACME_ENTRIES)) || die "handshake: $n of $ACME_ENTRIES entries issued within $ACME_TIMEOUT s"
FILL_SECS=$(python3 "$TOOL" busy "$HS_DIR/umbra-stress.log" 0 "$(date '+%s.%N')" | awk '{ print $1 }')
stop_pid "${PID[umbra]}"
log "handshake: $ACME_ENTRIES entries issued ($FILL_SECS orders ended)"
rm -f "$HS_DIR/umbra-stress.log"
# shellcheck disable=SC2034 # read by each_round (a nameref)
HS_CASES=(idle ordering stress)
# Each Umbra log is appended to by the rounds' Umbras: empty them per round.
hs_round() {
    rm -f "$HS_DIR/umbra-$1.log"
    handshake "$@"
}
each_round HS_CASES hs_round
stop_pebble

# ---- results --------------------------------------------------------------------------

md=$(results_md acme)
read -r mc <<<"$(median_of SECS first,caddy)"
read -r mu <<<"$(median_of SECS first,umbra)"
rf=$(ratio "$mu" "$mc")
mf=$(atmost "$rf" "$TARGET_FIRST" met "not met")
read -r hi ui ci pi wi <<<"$(medians hs,idle HS US CPU_S CPU_P CPU_C)"
read -r ho uo co po wo oo bo <<<"$(medians hs,ordering HS US CPU_S CPU_P CPU_C ORD BUSYP)"
read -r hx ux cx px wx ox bx <<<"$(medians hs,stress HS US CPU_S CPU_P CPU_C ORD BUSYP)"
rx=$(ratio "$hx" "$hi")
rh=$(ratio "$ho" "$hi")
mh=$(atleast "$rh" "$TARGET_HS" met "not met")
{
    echo "# acme: automatic certificates against pebble (issue 30)"
    echo
    echo "- date: $(date -u '+%Y-%m-%d %H:%M:%S UTC')"
    echo "- machine: $(bench_machine)"
    echo "- umbra: $UMBRA_BIN, commit $(bench_commit)"
    echo "- caddy: $(caddy version 2>&1 | head -n1); pebble: Debian $(dpkg-query -W -f='${Version}' pebble 2>/dev/null || echo '?') (first-cert and the handshake's stress: PEBBLE_VA_NOSLEEP=1; the handshake's ordering: PEBBLE_VA_SLEEPTIME=$ACME_CA_SLEEP; nonce rejections at its default), pebble-challtestsrv answering every name with 127.0.0.1"
    echo "- ab: $(ab -V 2>&1 | head -n1 | sed 's/^This is //; s/ *<.*//'), $ACME_AB_PROCS processes at once, each -t $DURATION -c $AB_CONNS"
    echo "- rounds: $ROUNDS, alternating which goes first; figures are medians of the rounds; repeated rounds: ${#REPEATS[@]} (listed at the end)"
    echo "- load average at the end: $(cut -d" " -f1-3 /proc/loadavg) (other processes on the machine skew the figures)"
    echo
    echo "first-cert: each round starts a fresh pebble and challtestsrv whose httpPort and tlsPort are"
    echo "the measured server's plain and TLS listeners, then the server with an empty storage (a new"
    echo "account), and polls its TLS listener every 50 ms with a handshake for ${NAMES[*]} (SNI each"
    echo "name, verified against pebble's root from its management API /roots/0 and the name): the"
    echo "seconds from the server's start until both names have had one. Umbra: one entry"
    echo "{ hosts = { \"${NAMES[0]}\", \"${NAMES[1]}\" }, acme = true }, http-01 (its default); Caddy: a"
    echo "site of both names, acme_ca pebble (its own choice of challenges, http-01 or tls-alpn-01)."
    echo
    md_row case server "median s" "s per round" ratio target met repeated
    md_row --- --- ---: --- ---: --- --- ---
    md_row acme/first-cert caddy "$mc" "${SECS[first,caddy]% }" - - - "$(repeated_md caddy)"
    md_row acme/first-cert umbra "$mu" "${SECS[first,umbra]% }" "$rf" "<= $TARGET_FIRST x caddy" "$mf" "$(repeated_md umbra)"
    echo
    echo "handshake: two pebbles validating against the same ports, one at a CA's pace (a random"
    echo "0 to $ACME_CA_SLEEP s before each validation) and one at once; Umbra with a static certificate for localhost (the default entry,"
    echo "the one ab's handshakes get: no SNI) and $ACME_ENTRIES acme = true entries of two names each,"
    echo "whose certificates were issued once before the rounds. Each round starts Umbra afresh on"
    echo "that storage: idle with renew_before unset (the stored certificates are years from"
    echo "renewal: no order; checked in its log); ordering and stress with renew_before = \"100000d\""
    echo "(longer than the lifetime: every entry is due at start and again 15 s after each renewal,"
    echo "so the ACME thread orders one entry after another; the round starts once its first order"
    echo "ended), ordering from the pebble at a CA's pace (an order in progress through the round,"
    echo "mostly waiting on the CA, as with a real one: the target's case), stress from the one that"
    echo "validates at once (orders back to back, many a second: far beyond any real renewal load;"
    echo "reported for what an order costs, no target). Then $ACME_AB_PROCS ab processes at once, each ab -t $DURATION -c $AB_CONNS https://127.0.0.1:PORT/"
    echo "(HTTP/1.0, a new connection and full handshake each; 200 \"ok\"); conn/s: their rates added."
    echo "orders: orders that ended during the round; ordering %: share of the round during which an order"
    echo "was in progress (from Umbra's log: each \"ordering\"/\"renewing\" line to its \"certificate issued\")."
    echo "pebble (and challtestsrv) run on the same 2 CPUs: their CPU during ordering rounds is taken"
    echo "from Umbra and ab; Umbra's CPU per handshake shows what the orders cost Umbra itself."
    echo
    md_row case "median conn/s" "conn/s per round" ratio target met "Umbra CPU %" "Umbra us/conn" "pebble CPU %" "ab CPU %" orders "ordering %" repeated
    md_row --- ---: --- ---: --- --- ---: ---: ---: ---: ---: ---: ---
    md_row acme/handshake-idle "$hi" "${HS[hs,idle]% }" - - - "$ci" "$ui" "$pi" "$wi" "${ORD[hs,idle]% }" "${BUSYP[hs,idle]% }" "$(repeated_md idle)"
    md_row acme/handshake-ordering "$ho" "${HS[hs,ordering]% }" "$rh" ">= $TARGET_HS x idle" "$mh" "$co" "$uo" "$po" "$wo" "${ORD[hs,ordering]% }" "${BUSYP[hs,ordering]% }" "$(repeated_md ordering)"
    md_row acme/handshake-stress "$hx" "${HS[hs,stress]% }" "$rx" "- (no target)" - "$cx" "$ux" "$px" "$wx" "${ORD[hs,stress]% }" "${BUSYP[hs,stress]% }" "$(repeated_md stress)"
    echo
    echo "Targets (issue 30): Umbra's time to the first verified handshake for two names <= Caddy's"
    echo "against the same pebble; handshakes per second while an order is in progress >= $TARGET_HS x without."
    echo
    echo "- acme/first-cert: Umbra $mu s, Caddy $mc s: $rf x Caddy ($mf: <= $TARGET_FIRST)"
    echo "- acme/handshake: ordering $ho conn/s vs idle $hi: $rh ($mh: >= $TARGET_HS); Umbra CPU per handshake $ui -> $uo us; ordering ${bo}% of the rounds, $oo orders ended in each (medians)"
    echo "- acme/handshake, stress (no target): $hx conn/s, $rx x idle; Umbra CPU per handshake $ux us; ordering ${bx}% of the rounds, $ox orders ended in each (medians)"
    repeats_md
    echo
    echo "## Settings of the servers"
    echo
    echo "Exactly as this run used them (ports and temp paths are this run's)."
    echo
    echo "Caddy's Caddyfile (first-cert, last round):"
    echo
    echo '```'
    cat "$BENCH_TMP/Caddyfile"
    echo '```'
    echo
    echo "Umbra's config.lua (first-cert, last round):"
    echo
    echo '```lua'
    cat "$BENCH_TMP/umbra/config.lua"
    echo '```'
    echo
    echo "Umbra's config.lua (handshake, ordering; stress differs in its directory, idle has no renew_before; entries e3 to e$ACME_ENTRIES cut):"
    echo
    echo '```lua'
    grep -v '"e\([3-9]\|[1-9][0-9]\+\)-a.test"' "$HS_DIR/config-ordering.lua"
    echo '```'
    echo
    echo "Umbra's ACME log lines of the last first-cert round (where its time went; UTC, ms):"
    echo
    echo '```'
    grep 'acme' "$BENCH_TMP/first-umbra.log" | cut -c1-200 || true
    echo '```'
    echo
    echo "pebble's config (handshake, ordering; stress's differs in its ports):"
    echo
    echo '```json'
    cat "$PEBBLE_DIR/pebble-ca.json"
    echo '```'
} >"$md"
cat >&2 <<EOF

acme/first-cert   caddy $mc s  umbra $mu s  ratio $rf ($mf: <= $TARGET_FIRST)
acme/handshake    idle $hi conn/s  ordering $ho conn/s  ratio $rh ($mh: >= $TARGET_HS)  ordering ${bo}% of the rounds, pebble CPU $po%
acme/handshake    stress $hx conn/s  ratio $rx (no target)  ordering ${bx}% of the rounds, $ox orders
EOF
warn_repeats
log "results written to $md"
