#!/usr/bin/env bash
# Two coral builds and the floor side by side, one core each, cache hits with
# keep-alive (issue 27): both nodes (`--cores 1`) and the floor (`floor http
# … sendfile`, shards/examples/floor.rs) are up at once, a second floor is
# the origin, and `wrk -t4 -c64 --latency` takes them in turn every round at
# 4 KiB and at 41 KB, so a change of the machine's pace hits all three
# alike. Reported per run: answers, p99, server CPU ticks (utime + stime from
# /proc/<pid>/stat), answers per server-CPU second and per wall second.
#
# Usage: benches/onecore.sh OLD_CORAL NEW_CORAL [SECONDS] [ROUNDS]
#   FILES="4k" (default "4k 41k"): the objects measured
# Environment: FLOOR (default target/release/examples/floor), WRK (default
# from PATH), LOADGEN_LIBS (a folder of .so files wrk needs), the CPUs:
# C_OLD, C_NEW, C_FLOOR (servers), C_ORIGIN, C_LOAD (wrk's), defaults for a
# machine of 8 or more CPUs (2, 3, 1, the last CPU, 4-7); on fewer, the
# servers share CPU 0 and wrk and the origin CPU 1:
#   C_OLD=0 C_NEW=0 C_FLOOR=0 C_ORIGIN=1 C_LOAD=1
# TOGETHER=1: the three are loaded at the same time, each by its own wrk
# (`-t3 -c63`) on CPUs of its own (C_LOAD_OLD, C_LOAD_NEW, C_LOAD_FLOOR;
# defaults 4-6, 7-9, 10-12; 16 CPUs or more), so that a machine whose pace
# changes from second to second (a VM whose host is shared) slows all three
# alike; each line then also gives the steal time of the server's CPU
# (/proc/stat) during the run, in ticks.
# Run it as root in its own network namespace:
#   unshare -n sh -c 'ip link set lo up && bash benches/onecore.sh OLD NEW 4 4'
# Figures and method: benches/README.md ("Stop 31 side by side").
set -euo pipefail
OLD=${1:?old coral binary}
NEW=${2:?new coral binary}
SECS=${3:-4}
ROUNDS=${4:-3}
FLOOR=${FLOOR:-$(dirname "$0")/../target/release/examples/floor}
WRK=${WRK:-$(command -v wrk)}
if [ "$(nproc)" -ge 8 ]; then
    C_OLD=${C_OLD:-2} C_NEW=${C_NEW:-3} C_FLOOR=${C_FLOOR:-1} C_ORIGIN=${C_ORIGIN:-$(($(nproc) - 1))} C_LOAD=${C_LOAD:-4-7}
else
    L=$(($(nproc) > 1 ? 1 : 0))
    C_OLD=${C_OLD:-0} C_NEW=${C_NEW:-0} C_FLOOR=${C_FLOOR:-0} C_ORIGIN=${C_ORIGIN:-$L} C_LOAD=${C_LOAD:-$L}
fi
. "$(dirname "$0")/lib.sh"
bench_setup onecore
wrk() { env LD_LIBRARY_PATH="${LOADGEN_LIBS:-}" "$WRK" "$@"; }
mkdir "$TMP/www"
head -c 41000 /dev/zero | tr '\0' y >"$TMP/www/41k.bin"
head -c 4096 /dev/zero | tr '\0' x >"$TMP/www/4k.bin"
cpu() { sed 's/.*) //' "/proc/$1/stat" | awk '{print $12 + $13}'; }
ready() { # addr host
    for _ in $(seq 1 200); do
        if wrk -t1 -c1 -d1s -H "Host: $2" "http://$1/4k.bin" 2>/dev/null | grep -q "Requests/sec"; then return 0; fi
        sleep 0.1
    done
    echo "no answer from $1" >&2
    return 1
}
taskset -c "$C_FLOOR" "$FLOOR" http 127.0.0.1:8070 "$TMP/www" sendfile >/dev/null 2>&1 &
F=$!; PIDS+=("$F")
taskset -c "$C_ORIGIN" "$FLOOR" http 127.0.0.1:8080 "$TMP/www" sendfile >/dev/null 2>&1 &
PIDS+=("$!")
node() { # binary cpu ip n
    RUST_LOG=warn taskset -c "$2" "$1" node --cores 1 --dsht "$3:7000" --admin "$3:7080" --http "$3:8090" \
        --cache-dir "$TMP/cache$4" --state-dir "$TMP/state$4" --allow-private-origins \
        --resolve origin.test=127.0.0.1 >"$TMP/node$4.log" 2>&1 &
}
node "$OLD" "$C_OLD" 127.0.0.1 1
C1=$!; PIDS+=("$C1")
node "$NEW" "$C_NEW" 127.0.0.2 2
C2=$!; PIDS+=("$C2")
H=origin.test.8080.coral.test
ready 127.0.0.1:8070 floor.test
ready 127.0.0.1:8090 $H
ready 127.0.0.2:8090 $H
steal() { awk -v c="cpu$1" '$1 == c {print $9}' /proc/stat; }
line() { # object round who answers p99 ticks [steal]
    awk -v f="$1" -v r="$2" -v w="$3" -v a="$4" -v p="$5" -v t="$6" -v st="${7:-}" -v s="$SECS" -v hz="$(getconf CLK_TCK)" \
        'BEGIN {printf "%-3s round %d %-5s %9d answers  p99 %-8s  cpu_ticks %5d  %8.0f /server-CPU-s  %8.0f /wall-s%s\n", f, r, w, a, p, t, (t > 0 ? a / (t / hz) : 0), a / s, (st == "" ? "" : "  steal " st)}'
}
if [ -n "${TOGETHER:-}" ]; then
    C_LOAD_OLD=${C_LOAD_OLD:-4-6} C_LOAD_NEW=${C_LOAD_NEW:-7-9} C_LOAD_FLOOR=${C_LOAD_FLOOR:-10-12}
    declare -A T0 S0
    echo "together: wrk -t3 -c63 -d${SECS}s for each at once; old on CPU $C_OLD (load $C_LOAD_OLD), new on $C_NEW ($C_LOAD_NEW), floor on $C_FLOOR ($C_LOAD_FLOOR); $(nproc) CPUs"
    for f in ${FILES:-4k 41k}; do
        for r in $(seq 1 "$ROUNDS"); do

            for who in "old $C1 $C_OLD" "new $C2 $C_NEW" "floor $F $C_FLOOR"; do
                # shellcheck disable=SC2086
                set -- $who
                T0[$1]=$(cpu "$2")
                S0[$1]=$(steal "$3")
            done
            W=()
            for who in "old 127.0.0.1:8090 $H $C_LOAD_OLD" "new 127.0.0.2:8090 $H $C_LOAD_NEW" "floor 127.0.0.1:8070 floor.test $C_LOAD_FLOOR"; do
                # shellcheck disable=SC2086
                set -- $who
                taskset -c "$4" env LD_LIBRARY_PATH="${LOADGEN_LIBS:-}" "$WRK" -t3 -c63 -d"${SECS}s" --latency -H "Host: $3" "http://$2/$f.bin" >"$TMP/wrk.$1" &
                W+=("$!")
            done
            wait "${W[@]}"
            for who in "old $C1 $C_OLD" "new $C2 $C_NEW" "floor $F $C_FLOOR"; do
                # shellcheck disable=SC2086
                set -- $who
                n=$(awk '/requests in/ {r=$1} /^ +99%/ {p=$2} END {print r, p}' "$TMP/wrk.$1")
                # shellcheck disable=SC2086
                line "$f" "$r" "$1" $n $(($(cpu "$2") - ${T0[$1]})) $(($(steal "$3") - ${S0[$1]}))
            done
        done
    done
    exit 0
fi
echo "wrk -t4 -c64 -d${SECS}s on CPUs $C_LOAD; old on CPU $C_OLD, new on $C_NEW, floor on $C_FLOOR; $(nproc) CPUs"
for f in ${FILES:-4k 41k}; do
    for r in $(seq 1 "$ROUNDS"); do
        for who in "old $C1 127.0.0.1:8090 $H" "new $C2 127.0.0.2:8090 $H" "floor $F 127.0.0.1:8070 floor.test"; do
            # shellcheck disable=SC2086
            set -- $who
            c0=$(cpu "$2")
            n=$(taskset -c "$C_LOAD" env LD_LIBRARY_PATH="${LOADGEN_LIBS:-}" "$WRK" -t4 -c64 -d"${SECS}s" --latency -H "Host: $4" "http://$3/$f.bin" |
                awk '/requests in/ {r=$1} /^ +99%/ {p=$2} END {print r, p}')
            c1=$(cpu "$2")
            # shellcheck disable=SC2086
            line "$f" "$r" "$1" $n $((c1 - c0))
        done
    done
done
