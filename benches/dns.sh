#!/usr/bin/env bash
# dnssrv against Knot DNS and NSD, side by side in one run (issue 12).
#
# Each server answers A queries for names under http.L2.L1.L0.coralcdn.test
# on 127.13.200.1, pinned to one CPU (taskset -c $SERVER_CPU); dnsperf runs
# pinned to another ($CLIENT_CPU). Knot and NSD serve an equivalent static
# zone (SOA, NS with glue, a wildcard A under http.L2.L1.L0, and the L0,
# L1 and L2 delegations' NS sets as in-zone records), with one UDP worker
# (Knot: udp-workers 1, background-workers 1; NSD: server-count 1,
# rrl-ratelimit 0). coral runs `--cores 1` with response rate limiting off.
#
# Reported per server: queries answered per second of wall time (dnsperf)
# and per second of server CPU time (utime + stime of all the server's
# processes from /proc/<pid>/stat, before and after the run).
#
# With shards/examples/floor.rs built (`cargo build --release -p coral-shards --examples`),
# a fourth row: the floor, a bare recvmmsg/sendmmsg loop that answers every
# query with its question and one canned A record and does nothing else —
# the least server CPU an answer can cost on this kernel.
#
# Usage: benches/dns.sh [seconds per run] [rounds]
# TOGETHER=1: the four answer at the same time, each on a CPU of its own
# (CORAL_CPU, KNOT_CPU, NSD_CPU, FLOOR_CPU; defaults 1, 2, 3, 4) under its own
# dnsperf on its own CPU (defaults 5, 6, 7, 8), so that a machine whose pace
# changes from second to second (a VM on a shared host) slows all four alike;
# each line then also gives the steal time of the server's CPU (/proc/stat).
#
# Needs: knotd (knot), nsd, dnsperf; `cargo build --release --workspace --bins
# --examples` first (the root's default build is the core crate only).
# Run it in a network namespace on an idle machine:
#   unshare -n sh -c 'ip link set lo up && bash benches/dns.sh 10 3'
# The figures, the method and their history: benches/README.md ("dnssrv
# against Knot and NSD").
set -euo pipefail

SECS=${1:-10}
ROUNDS=${2:-2}
SERVER_CPU=${SERVER_CPU:-0}
CLIENT_CPU=${CLIENT_CPU:-1}
if [ -n "${TOGETHER:-}" ]; then
    CORAL_CPU=${CORAL_CPU:-1} KNOT_CPU=${KNOT_CPU:-2} NSD_CPU=${NSD_CPU:-3} FLOOR_CPU=${FLOOR_CPU:-4}
    CORAL_LOAD=${CORAL_LOAD:-5} KNOT_LOAD=${KNOT_LOAD:-6} NSD_LOAD=${NSD_LOAD:-7} FLOOR_LOAD=${FLOOR_LOAD:-8}
else
    CORAL_CPU=$SERVER_CPU KNOT_CPU=$SERVER_CPU NSD_CPU=$SERVER_CPU FLOOR_CPU=$SERVER_CPU
    CORAL_LOAD=$CLIENT_CPU KNOT_LOAD=$CLIENT_CPU NSD_LOAD=$CLIENT_CPU FLOOR_LOAD=$CLIENT_CPU
fi
IP=127.13.200.1
CORAL=${CORAL:-$(dirname "$0")/../target/release/coral}
FLOOR=${FLOOR:-$(dirname "$CORAL")/examples/floor}
. "$(dirname "$0")/lib.sh"
bench_setup dns-bench

# The queries: 10,000 distinct Coralized names.
for i in $(seq 1 10000); do
    echo "www.site$i.example.com.http.L2.L1.L0.coralcdn.test A"
done > "$TMP/queries"

# The static zone for Knot and NSD.
cat > "$TMP/coralcdn.test.zone" <<EOF
\$ORIGIN coralcdn.test.
\$TTL 3600
@                 SOA  ns-7fc80001.coralcdn.test. hostmaster.coralcdn.test. 1 3600 600 604800 30
@                 NS   ns-7fc80001.coralcdn.test.
ns-7fc80001       A    $IP
*.http.L2.L1.L0   30 A $IP
EOF

cpu_ticks() { # utime + stime of the given pids (all their threads)
    local t=0
    for p in "$@"; do
        # Fields after "pid (comm) ": comm may hold spaces ("nsd: main").
        t=$((t + $(sed 's/.*) //' "/proc/$p/stat" | awk '{print $12 + $13}')))
    done
    echo "$t"
}

wait_dns() { # port
    for _ in $(seq 1 200); do
        if kdig @"$IP" -p "$1" +timeout=1 +retry=0 coralcdn.test SOA 2>/dev/null | grep -q NOERROR; then return 0; fi
        sleep 0.05
    done
    echo "server on port $1 did not answer" >&2
    return 1
}

run_one() { # name port pids...
    local name=$1 port=$2
    shift 2
    local hz
    hz=$(getconf CLK_TCK)
    local before after
    before=$(cpu_ticks "$@")
    local out
    out=$(taskset -c "${RUN_LOAD:-$CLIENT_CPU}" dnsperf -s "$IP" -p "$port" -d "$TMP/queries" -l "$SECS" -c 4 -q 200 2>&1)
    after=$(cpu_ticks "$@")
    local done qps cpu
    done=$(echo "$out" | awk '/Queries completed:/ {print $3}')
    qps=$(echo "$out" | awk '/Queries per second:/ {print $4}')
    cpu=$(awk -v a="$after" -v b="$before" -v hz="$hz" 'BEGIN {printf "%.2f", (a - b) / hz}')
    awk -v n="$name" -v d="$done" -v q="$qps" -v c="$cpu" \
        'BEGIN {printf "%-6s answered %9d  wall %9.0f q/s  server CPU %6.2f s  %9.0f q/CPU-s\n", n, d, q, c, (c > 0 ? d / c : 0)}'
}

# coral
cat > "$TMP/coral.toml" <<EOF
http = "$IP:8080"
[dnssrv]
rrl_responses_per_sec = 0
EOF
RUST_LOG=warn taskset -c "$CORAL_CPU" "$CORAL" node --cores 1 --dsht "$IP:7000" --admin "$IP:7080" \
    --dns "$IP:5400" --state-dir "$TMP/state" --config "$TMP/coral.toml" >/dev/null 2>&1 &
CORAL_PID=$!
PIDS+=("$CORAL_PID")

# Knot
mkdir -p "$TMP/knot"
cat > "$TMP/knot.conf" <<EOF
server:
    listen: $IP@5401
    rundir: "$TMP/knot"
    udp-workers: 1
    tcp-workers: 1
    background-workers: 1
database:
    storage: "$TMP/knot"
log:
  - target: stderr
    any: error
zone:
  - domain: coralcdn.test
    file: "$TMP/coralcdn.test.zone"
EOF
taskset -c "$KNOT_CPU" knotd -c "$TMP/knot.conf" >/dev/null 2>&1 &
KNOT_PID=$!
PIDS+=("$KNOT_PID")

# NSD
mkdir -p "$TMP/nsd"
cat > "$TMP/nsd.conf" <<EOF
server:
    ip-address: $IP@5402
    server-count: 1
    rrl-ratelimit: 0
    username: ""
    chroot: ""
    zonesdir: "$TMP"
    database: ""
    pidfile: "$TMP/nsd/nsd.pid"
    xfrdfile: "$TMP/nsd/xfrd.state"
    zonelistfile: "$TMP/nsd/zone.list"
    logfile: "$TMP/nsd/log"
    verbosity: 0
remote-control:
    control-enable: no
zone:
    name: coralcdn.test
    zonefile: "$TMP/coralcdn.test.zone"
EOF
taskset -c "$NSD_CPU" nsd -d -c "$TMP/nsd.conf" >/dev/null 2>&1 &
NSD_PID=$!
PIDS+=("$NSD_PID")

FLOOR_PID=
if [ -x "$FLOOR" ]; then
    taskset -c "$FLOOR_CPU" "$FLOOR" dns "$IP:5403" >/dev/null 2>&1 &
    FLOOR_PID=$!
    PIDS+=("$FLOOR_PID")
else
    echo "(no floor row: build it with \`cargo build --release -p coral-shards --examples\`)"
fi

wait_dns 5400
wait_dns 5401
wait_dns 5402
if [ -n "$FLOOR_PID" ]; then wait_dns 5403; fi
# NSD forks its xfrd and server processes (and re-forks the servers on a
# reload): every process whose command line names our config.
nsd_pids() { pgrep -f "nsd -d -c $TMP/nsd.conf" | tr '\n' ' '; }

steal() { awk -v c="cpu$1" '$1 == c {print $9}' /proc/stat; }
if [ -n "${TOGETHER:-}" ]; then
    echo "together: dnsperf -l $SECS -c 4 -q 200 for each at once; coral on CPU $CORAL_CPU (dnsperf $CORAL_LOAD), knot $KNOT_CPU ($KNOT_LOAD), nsd $NSD_CPU ($NSD_LOAD), floor $FLOOR_CPU ($FLOOR_LOAD); $(nproc) CPUs"
    for r in $(seq 1 "$ROUNDS"); do
        echo "round $r"
        W=()
        for who in coral knot nsd floor; do
            case $who in
            coral) port=5400 cpu=$CORAL_CPU load=$CORAL_LOAD pids=$CORAL_PID ;;
            knot) port=5401 cpu=$KNOT_CPU load=$KNOT_LOAD pids=$KNOT_PID ;;
            nsd) port=5402 cpu=$NSD_CPU load=$NSD_LOAD pids=$(nsd_pids) ;;
            floor) [ -n "$FLOOR_PID" ] || continue; port=5403 cpu=$FLOOR_CPU load=$FLOOR_LOAD pids=$FLOOR_PID ;;
            esac
            s0=$(steal "$cpu")
            # shellcheck disable=SC2086
            (out=$(RUN_LOAD=$load run_one "$who" "$port" $pids) && echo "$out  steal $(($(steal "$cpu") - s0))") >"$TMP/line.$who" &
            W+=("$!")
        done
        wait "${W[@]}"
        for who in coral knot nsd floor; do [ -f "$TMP/line.$who" ] && cat "$TMP/line.$who"; done
        rm -f "$TMP"/line.*
    done
    exit 0
fi
echo "dnsperf -l $SECS -c 4 -q 200, server on CPU $SERVER_CPU, dnsperf on CPU $CLIENT_CPU, $(nproc) CPUs"
for r in $(seq 1 "$ROUNDS"); do
    echo "round $r"
    run_one coral 5400 "$CORAL_PID"
    run_one knot 5401 "$KNOT_PID"
    # shellcheck disable=SC2046
    run_one nsd 5402 $(nsd_pids)
    if [ -n "$FLOOR_PID" ]; then run_one floor 5403 "$FLOOR_PID"; fi
done
