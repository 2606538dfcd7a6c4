#!/usr/bin/env bash
# Two coral builds side by side against nginx static, cache hits with
# keep-alive (issue 11): both nodes and nginx are up at once, each pinned to
# CPU 0 (`taskset`), and `wrk -t1 -c32` on CPU 1 takes them in turn every
# round, so a change of the machine's pace hits all three alike. Reported
# per round: hits per second of server CPU time (utime + stime from
# /proc/<pid>/stat) of each, each build against nginx, and B against A.
#
# Usage: benches/proxy_ab.sh OLD_CORAL NEW_CORAL [FILE_BYTES] [SECONDS] [ROUNDS]
#   e.g. benches/proxy_ab.sh /tmp/coral-old target/release/coral 4096 4 6
# Needs nginx and wrk; run it inside `unshare -n sh -c 'ip link set lo up && ...'`.
# The figures it gave, and the method: benches/README.md ("Cache hits against
# nginx").
set -euo pipefail

A_BIN=${1:?old coral binary}
B_BIN=${2:?new coral binary}
BYTES=${3:-4096}
SECS=${4:-4}
ROUNDS=${5:-6}
IP=127.11.201.1
SERVER_CPU=${SERVER_CPU:-0}
CLIENT_CPU=${CLIENT_CPU:-1}
. "$(dirname "$0")/lib.sh"
bench_setup proxy-ab

mkdir -p "$TMP/www" "$TMP/nginx"
head -c "$BYTES" /dev/zero | tr '\0' x > "$TMP/www/object.bin"
# nginx's worker runs as another user: it must read the file.
chmod 755 "$TMP" "$TMP/www"
chmod 644 "$TMP/www/object.bin"
nginx_static_conf "$TMP/nginx" "$IP:8080" "$TMP/www"
taskset -c "$SERVER_CPU" nginx -p "$TMP/nginx" -c "$TMP/nginx/nginx.conf" -g 'daemon off;' &
PIDS+=($!)
NGINX_MASTER=$!

# Each node on addresses of its own: with the default DNS address both would
# ask for the same one, and the second to start refuses to (it once did).
start_node() { # binary n -> pid
    RUST_LOG=warn taskset -c "$SERVER_CPU" "$1" node --cores 1 --dsht "$IP:$((7000 + $2))" \
        --admin "$IP:$((7080 + $2))" --http "$IP:$((8090 + $2))" --dns "$IP:$((5300 + $2))" \
        --cache-dir "$TMP/cache$2" --state-dir "$TMP/state$2" \
        --allow-private-origins --resolve "origin.test=$IP" >"$TMP/node$2.log" 2>&1 &
    echo $!
}
A=$(start_node "$A_BIN" 0)
PIDS+=("$A")
B=$(start_node "$B_BIN" 1)
PIDS+=("$B")

wait_http() { # port host: waits up to 60 s (a loaded machine starts a node slowly)
    local until=$((SECONDS + 60))
    while [ "$SECONDS" -lt "$until" ]; do
        if curl -s -o /dev/null -m 1 -H "Host: $2" "http://$IP:$1/object.bin"; then return 0; fi
        sleep 0.05
    done
    echo "nothing answers on port $1 in 60 s" >&2
    local n=$(($1 - 8090))
    if [ "$n" -ge 0 ] && [ -f "$TMP/node$n.log" ]; then
        echo "node $n's output:" >&2
        tail -20 "$TMP/node$n.log" >&2
    fi
    return 1
}
CORAL_HOST=origin.test.8080.coral.test
wait_http 8080 origin.test
wait_http 8090 "$CORAL_HOST"
wait_http 8091 "$CORAL_HOST"
# The second request of each node is a hit; the rounds measure hits only.
for port in 8090 8091; do
    status=$(curl -s -o /dev/null -D - -H "Host: $CORAL_HOST" "http://$IP:$port/object.bin" |
        tr -d '\r' | awk 'NR == 1 {print $2} /^[Cc]ache-[Ss]tatus:/ {print}')
    case "$status" in
        200*hit*) ;;
        *) echo "port $port: not a cache hit: $status" >&2; exit 1 ;;
    esac
done
NGINX=$(pgrep -P "$NGINX_MASTER" | head -1)

ticks() { sed 's/.*) //' "/proc/$1/stat" | awk '{print $12 + $13}'; }
hz=$(getconf CLK_TCK)
per_cpu() { # pid port host -> hits per server-CPU second
    local before after n
    before=$(ticks "$1")
    n=$(taskset -c "$CLIENT_CPU" wrk -t1 -c32 -d"${SECS}s" -H "Host: $3" "http://$IP:$2/object.bin" |
        awk '/requests in/ {print $1}')
    after=$(ticks "$1")
    awk -v n="$n" -v t=$((after - before)) -v hz="$hz" 'BEGIN {printf "%.0f", (t > 0 ? n / (t / hz) : 0)}'
}

echo "object $BYTES bytes, $SECS s x $ROUNDS rounds, servers on CPU $SERVER_CPU, wrk on CPU $CLIENT_CPU"
echo "hits per server-CPU second: nginx static, A ($A_BIN), B ($B_BIN)"
for r in $(seq 1 "$ROUNDS"); do
    n=$(per_cpu "$NGINX" 8080 origin.test)
    a=$(per_cpu "$A" 8090 "$CORAL_HOST")
    b=$(per_cpu "$B" 8091 "$CORAL_HOST")
    awk -v r="$r" -v n="$n" -v a="$a" -v b="$b" 'BEGIN {
        printf "round %d: nginx %7d  A %7d (%.2fx)  B %7d (%.2fx)  B/A %.2f\n",
            r, n, a, (n > 0 ? a / n : 0), b, (n > 0 ? b / n : 0), (a > 0 ? b / a : 0)}'
done
