#!/usr/bin/env bash
# Counts per answer, not rates: what a server spends per cache hit, per DNS
# answer and per DSHT get, in events a loaded machine does not change much —
# system calls (all, and io_uring_enter, epoll_wait, recv*, send*, sendfile
# each), io_uring submissions, context switches, reschedule IPIs, and the
# server's CPU time per answer — for coral (`--cores 1`), the floor
# (shards/examples/floor.rs) and, for hits, nginx static.
#
# Each server runs pinned to SERVER_CPU; the load generator (wrk -t1,
# dnsperf, the dsht_udp bench's `load` mode) to CLIENT_CPU. `perf stat -p`
# counts the server's events while the load runs; each figure is the count
# divided by the answers the load generator saw.
#
# Usage: benches/counts.sh [SECONDS] [WORKLOADS...]
#   WORKLOADS: any of hits4k hits41k hits2m hits50m dns dsht (default: all)
#   QUICK=1: one second per run, one round (the CI check that the harness
#   works; it judges nothing).
#   CORES=N (DNS only, default 1): coral --cores N and N floors on CPUs
#   SERVER_CPU..SERVER_CPU+N-1, 4 dnsperf clients a core, the queries each
#   of coral's cores answered printed after its line (issue 27 goal 5).
# Binaries: CORAL (default target/release/coral), FLOOR (its examples/floor),
#   DSHT_UDP (the dsht_udp bench binary, default: the newest in
#   target/release/deps), WRK, DNSPERF, NGINX (default: from PATH or
#   /usr/sbin). A server or load generator that is missing is skipped with a
#   line saying so.
# Run it in a network namespace of its own, as root (tracepoints):
#   unshare -n sh -c 'ip link set lo up && bash benches/counts.sh 5'
# The figures and their history: benches/README.md ("Counts per answer").
set -euo pipefail

SECS=${1:-5}
shift || true
WORKLOADS=("$@")
if [ ${#WORKLOADS[@]} -eq 0 ]; then WORKLOADS=(hits4k hits41k hits2m hits50m dns dsht); fi
if [ -n "${QUICK:-}" ]; then SECS=1; fi
HERE=$(cd "$(dirname "$0")" && pwd)
SERVER_CPU=${SERVER_CPU:-0}
CLIENT_CPU=${CLIENT_CPU:-1}
IP=${IP:-127.14.200.1}
CORAL=${CORAL:-$HERE/../target/release/coral}
FLOOR=${FLOOR:-$(dirname "$CORAL")/examples/floor}
DSHT_UDP=${DSHT_UDP:-$(ls -t "$(dirname "$CORAL")"/deps/dsht_udp-* 2>/dev/null | grep -v '\.d$' | head -1 || true)}
WRK=${WRK:-$(command -v wrk || true)}
DNSPERF=${DNSPERF:-$(command -v dnsperf || true)}
NGINX=${NGINX:-$(command -v nginx || echo /usr/sbin/nginx)}
PERF=${PERF:-$(command -v perf || true)}
. "$(dirname "$0")/lib.sh"
bench_setup counts

abs() { if [ -n "$1" ] && [ -e "$1" ]; then realpath "$1"; else echo "$1"; fi; }
CORAL=$(abs "$CORAL") FLOOR=$(abs "$FLOOR") DSHT_UDP=$(abs "$DSHT_UDP")
[ -x "$CORAL" ] || { echo "no coral binary at $CORAL (cargo build --release -p coral-shards)" >&2; exit 1; }
[ -n "$PERF" ] || { echo "perf is required" >&2; exit 1; }

# The events counted. Tracepoints a kernel lacks are dropped (checked once).
EVENTS=()
for e in raw_syscalls:sys_enter syscalls:sys_enter_io_uring_enter syscalls:sys_enter_epoll_wait \
         syscalls:sys_enter_recvfrom syscalls:sys_enter_recvmmsg syscalls:sys_enter_sendto \
         syscalls:sys_enter_sendmsg syscalls:sys_enter_sendmmsg syscalls:sys_enter_sendfile64 \
         io_uring:io_uring_submit_req context-switches irq_vectors:reschedule_entry task-clock \
         syscalls:sys_enter_membarrier syscalls:sys_enter_write irq_vectors:call_function_entry \
         irq_vectors:call_function_single_entry; do
    if "$PERF" stat -e "$e" -- true >/dev/null 2>&1; then EVENTS+=("$e"); fi
done
EVLIST=$(IFS=,; echo "${EVENTS[*]}")
# recvmmsg calls that brought datagrams (a filtered tracepoint: its own -e),
# for the datagrams per call ("rx-batch": answers / such calls).
RXARGS=()
if "$PERF" stat -e syscalls:sys_exit_recvmmsg --filter 'ret > 0' -- true >/dev/null 2>&1; then
    RXARGS=(-e syscalls:sys_exit_recvmmsg --filter 'ret > 0')
fi

# Starts "$@" pinned to SERVER_CPU in a process group of its own, in $TMP
# (a node keeps its state under its working directory); sets PID.
start() {
    (cd "$TMP" && exec setsid taskset -c "$SERVER_CPU" "$@" >"$TMP/server.$RANDOM.log" 2>&1) &
    PID=$!
    PGIDS+=("$PID")
}
stop() { # pid
    kill -TERM -- "-$1" 2>/dev/null || true
    wait "$1" 2>/dev/null || true
}
wait_tcp() { # port
    for _ in $(seq 1 600); do
        if (exec 3<>"/dev/tcp/$IP/$1") 2>/dev/null; then return 0; fi
        sleep 0.05
    done
    echo "nothing listens on $IP:$1" >&2
    return 1
}

# counts NAME ANSWERS: prints one line from $TMP/perf.csv.
counts() {
    local name=$1 answers=$2
    awk -F, -v n="$name" -v a="$answers" '
        function short(e) { sub(/^syscalls:sys_enter_/, "", e); sub(/^raw_syscalls:sys_enter$/, "syscalls", e);
                            sub(/^io_uring:io_uring_submit_req$/, "sqes", e); sub(/^irq_vectors:reschedule_entry$/, "resched-IPIs", e);
                            sub(/^context-switches$/, "ctx-sw", e); sub(/^irq_vectors:call_function_entry$/, "call-IPIs", e);
                            sub(/^irq_vectors:call_function_single_entry$/, "call1-IPIs", e); return e }
        $3 != "" && $1 ~ /^[0-9.]+$/ {
            if ($3 == "task-clock") { line = line sprintf("  cpu-us %.2f", ($1 * 1000) / a) }
            else if ($3 == "syscalls:sys_exit_recvmmsg") { if ($1 > 0) line = line sprintf("  rx-batch %.1f", a / $1) }
            else if ($1 > 0) { line = line sprintf("  %s %.3f", short($3), $1 / a) }
        }
        END { printf "%-22s %9d answers%s\n", n, a, line }' "$TMP/perf.csv"
}

# measure NAME PID -- LOAD COMMAND...: runs the load while perf counts PID
# and its child processes (nginx's worker); the load command prints the
# number of answers on its last line.
measure() {
    local name=$1 pid=$2 pids=$2 c
    shift 3
    for c in $(pgrep -P "$pid" || true); do pids="$pids,$c"; done
    "$PERF" stat -x, -e "$EVLIST" "${RXARGS[@]}" -p "$pids" -o "$TMP/perf.csv" -- sleep "$((SECS + 1))" &
    local perf_pid=$!
    sleep 0.5
    local answers t0 t1
    t0=$(user_sys_ticks "$pids")
    answers=$("$@" | tail -1)
    t1=$(user_sys_ticks "$pids")
    wait "$perf_pid" || true
    if [ -z "$answers" ] || [ "$answers" = 0 ]; then
        echo "$name: no answers in $SECS s"
        return 0
    fi
    # The server's CPU split between user space and the kernel, per answer
    # (from /proc's utime and stime over the load's run).
    local split
    split=$(awk -v a="$t0" -v b="$t1" -v n="$answers" -v hz="$HZ" 'BEGIN {
        split(a, x, " "); split(b, y, " ");
        printf "  user-us %.2f  sys-us %.2f", (y[1] - x[1]) * 1e6 / hz / n, (y[2] - x[2]) * 1e6 / hz / n }')
    echo "$(counts "$name" "$answers")$split"
}
HZ=$(getconf CLK_TCK)
user_sys_ticks() { # pids,comma,separated: prints "utime stime" summed over all their threads
    local p t u=0 s=0 f
    for p in ${1//,/ }; do
        for t in /proc/"$p"/task/*/stat; do
            f=$(cat "$t" 2>/dev/null) || continue
            f=${f##*) }
            # shellcheck disable=SC2086
            set -- $f
            u=$((u + ${12})) s=$((s + ${13}))
        done
    done
    echo "$u $s"
}

wrk_requests() { # url host conns: prints the requests wrk completed
    taskset -c "$CLIENT_CPU" "$WRK" -t1 -c "$3" -d "${SECS}s" -H "Host: $2" "$1" \
        | awk '/requests in/ {print $1}'
}
dnsperf_answers() { # port
    taskset -c "$DNS_CLIENT_CPUS" "$DNSPERF" -s "$IP" -p "$1" -d "$TMP/queries" -l "$SECS" \
        -c "$DNS_CLIENTS" -q 200 2>&1 | awk '/Queries completed:/ {print $3}'
}
# DNS on several cores (issue 27 goal 5): CORES=N runs `coral node --cores N`
# on CPUs SERVER_CPU..SERVER_CPU+N-1 and N floors, one pinned to each of
# them, in one reuseport group; dnsperf then uses 4 clients (source ports)
# per core and, on a machine with no CPU left over, shares the servers' CPUs
# (DNS_CLIENT_CPUS; compare counts, not rates). CORES=1 is the default and
# the workload as it always was.
CORES=${CORES:-1}
DNS_SERVER_CPUS=$SERVER_CPU
[ "$CORES" -gt 1 ] && DNS_SERVER_CPUS="$SERVER_CPU-$((SERVER_CPU + CORES - 1))"
DNS_CLIENTS=$((4 * CORES))
if [ "$CORES" -gt 1 ] && [ "$CLIENT_CPU" -ge "$SERVER_CPU" ] && [ "$CLIENT_CPU" -lt $((SERVER_CPU + CORES)) ]; then
    DNS_CLIENT_CPUS=${DNS_CLIENT_CPUS:-0-$(($(nproc) - 1))}
else
    DNS_CLIENT_CPUS=${DNS_CLIENT_CPUS:-$CLIENT_CPU}
fi
# start_on CPUS COMMAND...: as `start`, pinned to CPUS.
start_on() {
    local cpus=$1
    shift
    (cd "$TMP" && exec setsid taskset -c "$cpus" "$@" >"$TMP/server.$RANDOM.log" 2>&1) &
    PID=$!
    PGIDS+=("$PID")
}
# dns_split ADMIN_PORT: the queries each of coral's cores answered, as
# "core 0: A, core 1: B" (the kernel's reuseport hash spreads the clients).
dns_split() {
    "$CORAL" stats --json --node "$IP:$1" 2>/dev/null | python3 -c '
import json, sys
cores = json.load(sys.stdin)["cores"]
print(", ".join("core %d: %s" % (i, (c.get("dns") or {}).get("queries")) for i, c in enumerate(cores)))' || true
}

mkdir -p "$TMP/www"
want() { local w; for w in "${WORKLOADS[@]}"; do [ "$w" = "$1" ] && return 0; done; return 1; }
http_any=
for w in hits4k hits41k hits2m hits50m; do want $w && http_any=1; done
echo "counts per answer: server on CPU $SERVER_CPU, load on CPU $CLIENT_CPU, $SECS s per run, $(uname -r)"

if [ -n "$http_any" ]; then
    if [ -z "$WRK" ]; then
        echo "(hits skipped: no wrk; set WRK)"
    else
        head -c 4096 /dev/zero | tr '\0' x >"$TMP/www/4k.bin"
        head -c 41000 /dev/zero | tr '\0' y >"$TMP/www/41k.bin"
        head -c 2000000 /dev/zero | tr '\0' z >"$TMP/www/2m.bin"
        head -c 50000000 /dev/zero | tr '\0' w >"$TMP/www/50m.bin"
        chmod 755 "$TMP" "$TMP/www"
        chmod 644 "$TMP"/www/*.bin
        nginx_static_conf "$TMP/nginx" "$IP:8080" "$TMP/www"
        # The origin coral fetches from, and nginx static's row.
        if [ -x "$NGINX" ]; then
            start "$NGINX" -p "$TMP/nginx" -c "$TMP/nginx/nginx.conf" -g 'daemon off;'
            NGINX_PID=$PID
        else
            # Without nginx the floor is the origin (and no nginx row).
            start "$FLOOR" http "$IP:8080" "$TMP/www" sendfile
            NGINX_PID=
        fi
        wait_tcp 8080
        RUST_LOG=warn start "$CORAL" node --cores 1 --dsht "$IP:7000" --admin "$IP:7080" \
            --http "$IP:8090" --cache-dir "$TMP/coral-cache" --state-dir "$TMP/state-hits" --cache-size 200000000 \
            --allow-private-origins --resolve "origin.test=$IP"
        CORAL_PID=$PID
        wait_tcp 8090
        FLOOR_PID=
        if [ -x "$FLOOR" ]; then
            start "$FLOOR" http "$IP:8070" "$TMP/www" sendfile
            FLOOR_PID=$PID
            wait_tcp 8070
        fi
        HOST=origin.test.8080.coral.test
        for f in 4k 41k 2m 50m; do
            # Twice: the first fetch stores the object, the second is a hit.
            curl -sf -o /dev/null -H "Host: $HOST" "http://$IP:8090/$f.bin"
            curl -sf -o /dev/null -H "Host: $HOST" "http://$IP:8090/$f.bin"
        done
        for w in hits4k hits41k hits2m hits50m; do
            want $w || continue
            f=${w#hits}
            conns=32
            case $f in 2m) conns=8 ;; 50m) conns=2 ;; esac
            measure "coral $f" "$CORAL_PID" -- wrk_requests "http://$IP:8090/$f.bin" "$HOST" "$conns"
            if [ -n "$FLOOR_PID" ]; then
                measure "floor $f" "$FLOOR_PID" -- wrk_requests "http://$IP:8070/$f.bin" floor.test "$conns"
            fi
            if [ -n "$NGINX_PID" ]; then
                measure "nginx $f" "$NGINX_PID" -- wrk_requests "http://$IP:8080/$f.bin" origin.test "$conns"
            fi
        done
        stop "$CORAL_PID"
        [ -n "$FLOOR_PID" ] && stop "$FLOOR_PID"
        [ -n "$NGINX_PID" ] && stop "$NGINX_PID"
    fi
fi

if want dns; then
    if [ -z "$DNSPERF" ]; then
        echo "(dns skipped: no dnsperf; set DNSPERF)"
    else
        for i in $(seq 1 10000); do echo "www.site$i.example.com.http.L2.L1.L0.coralcdn.test A"; done >"$TMP/queries"
        printf 'http = "%s:8091"\n[dnssrv]\nrrl_responses_per_sec = 0\n' "$IP" >"$TMP/coral-dns.toml"
        echo "dns: $CORES core(s) on CPUs $DNS_SERVER_CPUS, dnsperf -c $DNS_CLIENTS on CPUs $DNS_CLIENT_CPUS"
        RUST_LOG=warn start_on "$DNS_SERVER_CPUS" "$CORAL" node --cores "$CORES" --dsht "$IP:7001" --admin "$IP:7081" \
            --dns "$IP:5400" --state-dir "$TMP/state-dns" --config "$TMP/coral-dns.toml"
        CORAL_PID=$PID
        wait_tcp 7081
        [ "$CORES" -gt 1 ] && before=$(dns_split 7081)
        measure "coral dns" "$CORAL_PID" -- dnsperf_answers 5400
        [ "$CORES" -gt 1 ] && echo "  coral's queries by core: before $before; after $(dns_split 7081)"
        stop "$CORAL_PID"
        if [ -x "$FLOOR" ]; then
            FLOOR_PIDS=()
            for c in $(seq 0 $((CORES - 1))); do
                start_on "$((SERVER_CPU + c))" "$FLOOR" dns "$IP:5403"
                FLOOR_PIDS+=("$PID")
            done
            # Until all the floors' sockets are bound (port 5403 is 151B in hex).
            for _ in $(seq 1 1200); do
                [ "$(awk '$2 ~ /:151B$/' /proc/net/udp | wc -l)" -ge "$CORES" ] && break
                sleep 0.05
            done
            measure "floor dns" "$(IFS=,; echo "${FLOOR_PIDS[*]}")" -- dnsperf_answers 5403
            for p in "${FLOOR_PIDS[@]}"; do stop "$p"; done
        fi
    fi
fi

if want dsht; then
    if [ -z "$DSHT_UDP" ] || [ ! -x "$DSHT_UDP" ]; then
        echo "(dsht skipped: no dsht_udp bench binary; cargo bench -p coral-shards --bench dsht_udp --no-run, set DSHT_UDP)"
    else
        RUST_LOG=warn start "$CORAL" node --cores 1 --dsht "$IP:7002" --admin "$IP:7082" --state-dir "$TMP/state-dsht"
        CORAL_PID=$PID
        wait_tcp 7082
        "$CORAL" put url:http://www.x.com/y.jpg 10.1.2.3:8090 --ttl 3600 --node "$IP:7082" >/dev/null
        measure "coral dsht get" "$CORAL_PID" -- \
            taskset -c "$CLIENT_CPU" "$DSHT_UDP" load get "$IP:7002" "$IP" "$SECS" 256
        stop "$CORAL_PID"
        start "$DSHT_UDP" echo "$IP:9000" "$SERVER_CPU"
        ECHO_PID=$PID
        # Until its socket is bound (/proc/net/udp: port 9000 is 2328 in hex).
        for _ in $(seq 1 1200); do
            if awk '$2 ~ /:2328$/ {found = 1} END {exit !found}' /proc/net/udp; then break; fi
            sleep 0.05
        done
        measure "echo" "$ECHO_PID" -- \
            taskset -c "$CLIENT_CPU" "$DSHT_UDP" load echo "$IP:9000" "$IP" "$SECS" 256
        stop "$ECHO_PID"
    fi
fi
