#!/usr/bin/env bash
# Scaling over cores (issue 27, goal 5): cache hits, DNS answers and DSHT gets
# with coral `--cores N` for each N in a list, side by side with the floor
# (shards/examples/floor.rs; for DSHT gets the bare UDP echo server of the
# dsht_udp bench) run as N processes in one reuseport group. The servers
# run on CPUs 0..N-1, the load generators on the other CPUs (taskset), all
# inside a network namespace of their own. Printed for each N: answers per
# second of wall time and per second of server CPU time (utime + stime from
# /proc), and per CPU-second against N = 1 (goal: within 10 %). For DSHT
# gets, the steering check: one load generator per core asks for a key that
# core owns, and only the owning core holds the value, so every answer that
# carries it was handled there (`steering: M of A answers on the owning core`).
#
# It runs on a bare machine with only what it is given (no package manager):
#   CORAL     the coral binary            (default target/release/coral)
#   FLOOR     the floor example           (default next to CORAL: examples/floor)
#   DSHT_UDP  the dsht_udp bench binary   (default the newest target/release/deps/dsht_udp-*)
#   WRK       wrk                         (default from PATH; hits are skipped without it)
#   DNSPERF   dnsperf                     (default from PATH; DNS is skipped without it)
#   LOADGEN_LIBS  a folder of .so files wrk and dnsperf need (set only for
#             them; LD_LIBRARY_PATH, if set, is taken as this and unset for
#             everything else, so system tools keep the system's libraries)
#   CORES     the N to run                (default 1 2 4 8 16, those the machine
#             has CPUs for; an N with no CPU left over shares them with the load)
#   SECS      seconds per run             (default 10)
#   WORKLOADS any of hits dns dsht        (default all three)
#   TOGETHER=1  DSHT gets: coral (CPUs 0..N-1) and the echo servers
#             (N..2N-1) loaded at the same time, each by half of the other
#             CPUs, so that a machine whose pace changes (a VM on a shared
#             host) slows both alike; needs 2N + 2 CPUs
#   NO_NETNS=1  do not enter a network namespace (then the servers bind
#             127.16.x addresses of the host's loopback)
#   KEEP_LOG=FILE  copy the servers' own output there on exit
# Quick mode (`benches/cores.sh --quick`): N in {1, 2}, 2 s runs; it proves
# the harness works (shards/tests/bench_harness.rs runs it) and judges
# nothing. Building what it needs:
#   cargo build --release -p coral-shards --bin coral --examples
#   cargo bench -p coral-shards --bench dsht_udp --no-run
# The figures: benches/README.md ("Scaling over cores").
set -euo pipefail

QUICK=
for a in "$@"; do [ "$a" = "--quick" ] && QUICK=1; done
HERE=$(cd "$(dirname "$0")" && pwd)
SELF="$HERE/$(basename "$0")"

# Load generators' libraries apply to them alone.
LOADGEN_LIBS=${LOADGEN_LIBS:-${LD_LIBRARY_PATH:-}}
unset LD_LIBRARY_PATH
export LOADGEN_LIBS

# Into a network namespace of our own (once), loopback up. Without a tool
# to bring its loopback up (a bare machine may lack iproute2), or without
# the right to make one, the servers bind 127.16.x addresses of the host's
# loopback instead.
if [ -z "${NO_NETNS:-}" ] && [ -z "${CORES_IN_NETNS:-}" ]; then
    if { command -v ip || command -v ifconfig; } >/dev/null 2>&1 && unshare -n true 2>/dev/null; then
        exec unshare -n env CORES_IN_NETNS=1 bash "$SELF" "$@"
    fi
    echo "(no network namespace: no ip/ifconfig or no unshare -n here; using 127.16.x addresses of the host's loopback)"
fi
if [ -n "${CORES_IN_NETNS:-}" ]; then
    if command -v ip >/dev/null 2>&1; then
        ip link set lo up
    elif command -v ifconfig >/dev/null 2>&1; then
        ifconfig lo up
    else
        echo "neither ip nor ifconfig: cannot bring loopback up in the namespace (run with NO_NETNS=1)" >&2
        exit 1
    fi
fi

abs() { if [ -n "$1" ] && [ -e "$1" ]; then realpath "$1"; else echo "$1"; fi; }
CORAL=$(abs "${CORAL:-$HERE/../target/release/coral}")
FLOOR=$(abs "${FLOOR:-$(dirname "$CORAL")/examples/floor}")
DSHT_UDP=${DSHT_UDP:-$(ls -t "$(dirname "$CORAL")"/deps/dsht_udp-* 2>/dev/null | grep -v '\.d$' | head -1 || true)}
DSHT_UDP=$(abs "$DSHT_UDP")
WRK=$(abs "${WRK:-$(command -v wrk || true)}")
DNSPERF=$(abs "${DNSPERF:-$(command -v dnsperf || true)}")
SECS=${SECS:-10}
WORKLOADS=${WORKLOADS:-hits dns dsht}
NCPU=$(nproc)
if [ -n "$QUICK" ]; then
    SECS=2
    CORES=${CORES:-1 2}
else
    CORES=${CORES:-1 2 4 8 16}
fi
IP=127.16.200.1
HZ=$(getconf CLK_TCK)
. "$(dirname "$0")/lib.sh"
bench_setup cores
# KEEP_LOG=FILE keeps the servers' own output (a node's panic or error).
bench_keep() {
    if [ -n "${KEEP_LOG:-}" ]; then cp "$TMP/servers.log" "$KEEP_LOG" 2>/dev/null || true; fi
}

[ -x "$CORAL" ] || { echo "no coral binary at $CORAL (set CORAL)" >&2; exit 1; }
loadgen() { env LD_LIBRARY_PATH="$LOADGEN_LIBS" "$@"; }

# start CPUS CMD...: runs CMD pinned to CPUS in $TMP, in a process group of
# its own; sets PID.
start() {
    local cpus=$1
    shift
    (cd "$TMP" && exec setsid taskset -c "$cpus" "$@" >>"$TMP/servers.log" 2>&1) &
    PID=$!
    PGIDS+=("$PID")
}
stop_all() {
    for g in "${PGIDS[@]}"; do kill -TERM -- "-$g" 2>/dev/null || true; done
    for g in "${PGIDS[@]}"; do wait "$g" 2>/dev/null || true; done
    PGIDS=()
}
wait_tcp() { # port
    for _ in $(seq 1 1200); do
        if (exec 3<>"/dev/tcp/$IP/$1") 2>/dev/null; then return 0; fi
        sleep 0.05
    done
    echo "nothing listens on $IP:$1" >&2
    return 1
}
ticks() { # utime + stime of the given pids, all their threads
    local t=0 p
    for p in "$@"; do
        t=$((t + $(sed 's/.*) //' "/proc/$p/stat" | awk '{print $12 + $13}')))
    done
    echo "$t"
}
# report WORKLOAD SERVER N ANSWERS WALL_SECS TICKS: one line, and the per-CPU
# figure kept for the ratio against N = 1.
declare -A BASE
report() {
    local w=$1 s=$2 n=$3 answers=$4 wall=$5 t=$6
    local cpu per_wall per_cpu ratio
    cpu=$(awk -v t="$t" -v hz="$HZ" 'BEGIN {printf "%.2f", t / hz}')
    per_wall=$(awk -v a="$answers" -v w="$wall" 'BEGIN {printf "%.0f", (w > 0 ? a / w : 0)}')
    per_cpu=$(awk -v a="$answers" -v c="$cpu" 'BEGIN {printf "%.0f", (c > 0 ? a / c : 0)}')
    if [ "$n" = 1 ] || [ -z "${BASE[$w.$s]:-}" ]; then BASE[$w.$s]=$per_cpu; fi
    ratio=$(awk -v p="$per_cpu" -v b="${BASE[$w.$s]}" 'BEGIN {printf "%.2f", (b > 0 ? p / b : 0)}')
    printf '%-5s %-6s cores %-2s  %10s answers  %9s /wall-s  %9s /server-CPU-s  server CPU %6s s  per CPU-s vs 1 core %s\n' \
        "$w" "$s" "$n" "$answers" "$per_wall" "$per_cpu" "$cpu" "$ratio"
}
# run_load WORKLOAD SERVER N PIDS -- CMD...: CMD is the load (it prints the
# answers on its last line, optionally followed by the seconds the load
# itself ran); measures the servers' CPU time around it. The wall time is
# those seconds where given, else the command's: dnsperf waits out its query
# timeout (5 s) at the end when queries were lost, and that wait is not the
# load's (a 2 s run of the floor at 2 cores read 44k answers per wall second
# for 310k answers).
run_load() {
    local w=$1 s=$2 n=$3 pids=$4
    shift 5
    local t0 t1 start end last answers wall
    # shellcheck disable=SC2086
    t0=$(ticks $pids)
    start=$(date +%s.%N)
    last=$("$@" | tail -1)
    end=$(date +%s.%N)
    # shellcheck disable=SC2086
    t1=$(ticks $pids)
    answers=${last%% *}
    if [ "$answers" != "$last" ]; then
        wall=${last#* }
    else
        wall=$(awk -v a="$start" -v b="$end" 'BEGIN {print b - a}')
    fi
    report "$w" "$s" "$n" "${answers:-0}" "$wall" $((t1 - t0))
}

# start_echos FIRST: N echo servers (the dsht_udp bench's) on CPUs FIRST..,
# one reuseport group on $IP:9000; sets echo_pids and waits until all N
# sockets are bound (/proc/net/udp, port 9000 = 2328 in hex).
start_echos() {
    local c
    echo_pids=
    for c in $(seq 0 $((n - 1))); do
        start "$(($1 + c))" "$DSHT_UDP" echo "$IP:9000" "$c"
        echo_pids="$echo_pids $PID"
    done
    for _ in $(seq 1 1200); do
        if [ "$(awk '$2 ~ /:2328$/' /proc/net/udp | wc -l)" -ge "$n" ]; then return 0; fi
        sleep 0.05
    done
    echo "the echo servers did not bind $IP:9000" >&2
    return 1
}

mkdir -p "$TMP/www"
head -c 4096 /dev/zero | tr '\0' x >"$TMP/www/4k.bin"
for i in $(seq 1 10000); do echo "www.site$i.example.com.http.L2.L1.L0.coralcdn.test A"; done >"$TMP/queries"
printf '[dnssrv]\nrrl_responses_per_sec = 0\n[proxy]\nallow_private_origins = true\nresolve = ["origin.test=%s"]\n' "$IP" >"$TMP/coral.toml"
echo "cores.sh: $NCPU CPUs, $(uname -r), $SECS s per run; servers on CPUs 0..N-1, load on N..$((NCPU - 1))"

for n in $CORES; do
    if [ "$n" -gt "$NCPU" ]; then
        echo "(cores $n skipped: $NCPU CPUs)"
        continue
    fi
    server_cpus="0-$((n - 1))"
    load_first=$n
    load_last=$((NCPU - 1))
    if [ "$n" -eq "$NCPU" ]; then
        # No CPU left over (a quick run on a small machine): the load shares
        # the servers' CPUs, and only the per-CPU figures mean anything.
        load_first=0
        echo "(cores $n: no CPU left for the load; it shares the servers' $NCPU CPUs)"
    fi
    load_n=$((load_last - load_first + 1))
    load_cpus="$load_first-$load_last"
    if [ "$load_n" -lt "$n" ]; then
        echo "(cores $n: $load_n CPUs of load for $n of server; the wall rate may be the load's)"
    fi
    # coral on N cores: hits, DNS and the DSHT at once (one node).
    RUST_LOG=warn start "$server_cpus" "$CORAL" node --cores "$n" --dsht "$IP:7000" --admin "$IP:7080" \
        --http "$IP:8090" --dns "$IP:5400" --cache-dir "$TMP/cache-$n" --state-dir "$TMP/state-$n" --config "$TMP/coral.toml"
    coral_pid=$PID
    # The origin (and the floor's HTTP row): N floors in one group.
    floor_pids=
    if [ -x "$FLOOR" ]; then
        for c in $(seq 0 $((n - 1))); do
            start "$c" "$FLOOR" http "$IP:8080" "$TMP/www" sendfile
            floor_pids="$floor_pids $PID"
        done
        for c in $(seq 0 $((n - 1))); do
            start "$c" "$FLOOR" dns "$IP:5403"
            floor_pids="$floor_pids $PID"
        done
    fi
    wait_tcp 7080
    wait_tcp 8090
    for w in $WORKLOADS; do
        case $w in
        hits)
            if [ -z "$WRK" ] || [ ! -x "$FLOOR" ]; then
                echo "(hits skipped: set WRK and FLOOR)"
                continue
            fi
            wait_tcp 8080
            host=origin.test.8080.coral.test
            # Stored once, then a hit on every core (each core's first
            # request for it finds it in the shared cache).
            for _ in 1 2; do loadgen "$WRK" -t1 -c1 -d1s -H "Host: $host" "http://$IP:8090/4k.bin" >/dev/null; done
            threads=$load_n
            conns=$((32 * n))
            [ "$conns" -lt "$threads" ] && conns=$threads
            wrk_count() { awk '/requests in/ {print $1}'; }
            run_load hits coral "$n" "$coral_pid" -- sh -c \
                "taskset -c $load_cpus env LD_LIBRARY_PATH='$LOADGEN_LIBS' '$WRK' -t$threads -c$conns -d${SECS}s -H 'Host: $host' http://$IP:8090/4k.bin | awk '/requests in/ {print \$1}'"
            run_load hits floor "$n" "$floor_pids" -- sh -c \
                "taskset -c $load_cpus env LD_LIBRARY_PATH='$LOADGEN_LIBS' '$WRK' -t$threads -c$conns -d${SECS}s -H 'Host: floor.test' http://$IP:8080/4k.bin | awk '/requests in/ {print \$1}'"
            ;;
        dns)
            if [ -z "$DNSPERF" ]; then
                echo "(dns skipped: set DNSPERF)"
                continue
            fi
            # The queries each of coral's cores answered so far (the kernel's
            # reuseport hash spreads dnsperf's clients; an uneven split
            # leaves one core drier, sleeping more per answer).
            dns_by_core() {
                "$CORAL" stats --json --node "$IP:7080" 2>/dev/null | python3 -c '
import json, sys
print(" ".join(str((c.get("dns") or {}).get("queries", 0)) for c in json.load(sys.stdin)["cores"]))' 2>/dev/null || true
            }
            for port in 5400 5403; do
                [ "$port" = 5403 ] && [ ! -x "$FLOOR" ] && continue
                server=coral pids=$coral_pid
                [ "$port" = 5403 ] && server=floor pids=$floor_pids
                [ "$port" = 5400 ] && by_core0=$(dns_by_core)
                run_load dns "$server" "$n" "$pids" -- sh -c \
                    "taskset -c $load_cpus env LD_LIBRARY_PATH='$LOADGEN_LIBS' '$DNSPERF' -s $IP -p $port -d '$TMP/queries' -l $SECS -T $load_n -c $((4 * load_n)) -q $((200 * load_n)) 2>&1 | awk '/Queries completed:/ {c = \$3} /Run time [(]s[)]:/ {t = \$4} END {print c, t}'"
                if [ "$port" = 5400 ] && [ "$n" -gt 1 ] && command -v python3 >/dev/null; then
                    by_core1=$(dns_by_core)
                    echo "dns   coral  cores $n  queries by core: $(awk -v a="$by_core0" -v b="$by_core1" 'BEGIN {
                        n = split(a, x, " "); split(b, y, " "); s = "";
                        for (i = 1; i <= n; i++) s = s (i > 1 ? " " : "") (y[i] - x[i]); print s }')"
                fi
            done
            ;;
        dsht)
            if [ -z "$DSHT_UDP" ] || [ ! -x "$DSHT_UDP" ]; then
                echo "(dsht skipped: set DSHT_UDP)"
                continue
            fi
            # One key per core, stored on it; one generator per load CPU,
            # generator j aimed at core j mod N.
            urls=()
            for c in $(seq 0 $((n - 1))); do
                url=$("$DSHT_UDP" key "$c" "$n")
                urls+=("$url")
                "$CORAL" put "url:$url" 10.1.2.3:8090 --ttl 3600 --node "$IP:7080" >/dev/null
            done
            gen() { # kind server [first count]: generators on CPUs first.. at once; prints their total, steering on stderr
                local kind=$1 server=$2 first=${3:-$load_first} count=${4:-$load_n} j outs=() total=0 with=0 without=0
                for j in $(seq 0 $((count - 1))); do
                    taskset -c $((first + j)) "$DSHT_UDP" load "$kind" "$server" "$IP" "$SECS" 64 \
                        "${urls[$((j % n))]}" >"$TMP/gen.$kind.$j" &
                    outs+=($!)
                done
                for j in "${outs[@]}"; do wait "$j"; done
                for j in $(seq 0 $((count - 1))); do
                    total=$((total + $(tail -1 "$TMP/gen.$kind.$j")))
                    if grep -q '^steering:' "$TMP/gen.$kind.$j"; then
                        with=$((with + $(awk '/^steering:/ {print $2}' "$TMP/gen.$kind.$j")))
                        without=$((without + $(awk '/^steering:/ {print $7}' "$TMP/gen.$kind.$j")))
                    fi
                done
                if [ "$kind" = get ]; then
                    echo "dsht  steering: $with of $((with + without)) answers on the key's owning core ($without elsewhere)" >&2
                fi
                echo "$total"
            }
            if [ -n "${TOGETHER:-}" ]; then
                # coral on CPUs 0..N-1 and the echo servers on N..2N-1 under
                # load at the same time, each from half of the remaining CPUs.
                half=$(((NCPU - 2 * n) / 2))
                if [ "$half" -lt 1 ]; then
                    echo "(dsht together skipped at cores $n: needs 2N + 2 CPUs)"
                    continue
                fi
                start_echos "$n"
                # shellcheck disable=SC2086
                { c0=$(ticks $coral_pid); e0=$(ticks $echo_pids); }
                t_start=$(date +%s.%N)
                gen get "$IP:7000" $((2 * n)) "$half" >"$TMP/total.get" &
                g1=$!
                gen echo "$IP:9000" $((2 * n + half)) "$half" >"$TMP/total.echo" 2>/dev/null &
                g2=$!
                wait "$g1" "$g2"
                t_end=$(date +%s.%N)
                wall=$(awk -v a="$t_start" -v b="$t_end" 'BEGIN {print b - a}')
                # shellcheck disable=SC2086
                report dsht coral "$n" "$(cat "$TMP/total.get")" "$wall" $(($(ticks $coral_pid) - c0))
                # shellcheck disable=SC2086
                report dsht echo "$n" "$(cat "$TMP/total.echo")" "$wall" $(($(ticks $echo_pids) - e0))
                continue
            fi
            run_load dsht coral "$n" "$coral_pid" -- gen get "$IP:7000"
            start_echos 0
            run_load dsht echo "$n" "$echo_pids" -- gen echo "$IP:9000"
            ;;
        esac
    done
    stop_all
done
