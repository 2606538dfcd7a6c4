#!/usr/bin/env bash
# What a cache hit costs in ring operations and system calls, by kind: the
# io_uring submissions by opcode (POLL_ADD, TIMEOUT, ASYNC_CANCEL, ...), the
# waits in the ring (io_uring_cqring_wait) and the system calls by number,
# for one `coral node --cores 1` under `wrk -t1` (perf record of the
# io_uring and raw_syscalls tracepoints). Divide by the requests line for
# per-hit figures. Counts, not rates: compare two builds in one session.
#
# Usage: benches/ring_ops.sh [SIZE] [SECONDS] [CONNECTIONS]
#   SIZE: 4k, 41k or 2m (default 41k); CORAL (default target/release/coral),
#   FLOOR (its examples/floor: the origin).
# Run it as root in a network namespace of its own:
#   unshare -n sh -c 'ip link set lo up && bash benches/ring_ops.sh 41k 3 32'
# System call numbers (x86-64): 40 sendfile, 44 sendto, 45 recvfrom,
# 232 epoll_wait, 324 membarrier (one per executor sleep), 426 io_uring_enter.
# The figures: benches/README.md ("Session 8, hits").
set -euo pipefail
F=${1:-41k}
SECS=${2:-3}
CONNS=${3:-32}
HERE=$(cd "$(dirname "$0")" && pwd)
CORAL=$(realpath "${CORAL:-$HERE/../target/release/coral}")
FLOOR=$(realpath "${FLOOR:-$(dirname "$CORAL")/examples/floor}")
IP=${IP:-127.14.202.1}
for t in perf wrk curl; do command -v "$t" >/dev/null || { echo "$t is required" >&2; exit 1; }; done
. "$(dirname "$0")/lib.sh"
bench_setup ring-ops
start() {
    (cd "$TMP" && exec setsid taskset -c 0 "$@" >"$TMP/server.$RANDOM.log" 2>&1) &
    PID=$!
    PGIDS+=("$PID")
}
wait_tcp() {
    for _ in $(seq 1 600); do
        if (exec 3<>"/dev/tcp/$IP/$1") 2>/dev/null; then return 0; fi
        sleep 0.05
    done
    echo "nothing listens on $IP:$1" >&2
    return 1
}
mkdir -p "$TMP/www"
head -c 4096 /dev/zero | tr '\0' x >"$TMP/www/4k.bin"
head -c 41000 /dev/zero | tr '\0' y >"$TMP/www/41k.bin"
head -c 2000000 /dev/zero | tr '\0' z >"$TMP/www/2m.bin"
start "$FLOOR" http "$IP:8080" "$TMP/www" sendfile
wait_tcp 8080
RUST_LOG=warn start "$CORAL" node --cores 1 --dsht "$IP:7000" --admin "$IP:7080" --http "$IP:8090" \
    --cache-dir "$TMP/cache" --state-dir "$TMP/state" --cache-size 200000000 \
    --allow-private-origins --resolve "origin.test=$IP"
CORAL_PID=$PID
wait_tcp 8090
HOST=origin.test.8080.coral.test
curl -sf -o /dev/null -H "Host: $HOST" "http://$IP:8090/$F.bin"
curl -sf -o /dev/null -H "Host: $HOST" "http://$IP:8090/$F.bin"
perf record -q -o "$TMP/perf.data" -e io_uring:io_uring_submit_req -e io_uring:io_uring_cqring_wait \
    -e raw_syscalls:sys_enter -p "$CORAL_PID" -- sleep "$((SECS + 1))" 2>/dev/null &
PERF_PID=$!
sleep 0.5
echo "$(basename "$CORAL") $F, $CONNS connections, $SECS s"
taskset -c 1 wrk -t1 -c "$CONNS" -d "${SECS}s" -H "Host: $HOST" "http://$IP:8090/$F.bin" \
    | awk '/requests in/ {print "requests", $1}'
wait "$PERF_PID" || true
perf script -i "$TMP/perf.data" -F event,trace 2>/dev/null >"$TMP/script.txt"
echo "submissions by opcode:"
grep submit_req "$TMP/script.txt" | grep -o 'opcode [A-Z_0-9]*' | sort | uniq -c | sort -rn
echo "waits in the ring: $(grep -c cqring_wait "$TMP/script.txt" || true)"
echo "system calls by number:"
grep sys_enter "$TMP/script.txt" | grep -o 'NR [0-9]*' | sort | uniq -c | sort -rn | head -8
