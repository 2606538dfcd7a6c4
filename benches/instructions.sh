#!/usr/bin/env bash
# User-space instructions per answer, not rates: `coral node --cores 1` runs
# under callgrind while a load generator pushes answers through the real
# server (the ring, the readiness set, the parse, the cache lookup, the head
# write; the UDP loops; the DSHT receive/answer loop). The counters are
# zeroed once the node is warm (`callgrind_control -z`), the load runs, the
# counters are dumped (`-d`): instructions in the dump / answers the load
# generator saw. The kernel's part is not counted (the same for every
# server). Deterministic up to how many answers share a turn of the
# executor (a loaded machine batches fewer): compare two builds in one run.
#
# Usage: benches/instructions.sh [SECONDS] [WORKLOADS...]
#   WORKLOADS: any of hits4k hits41k dns dsht (default: all)
#   CORAL (default target/release/coral), FLOOR (its examples/floor, the
#   origin), DSHT_UDP (the dsht_udp bench binary, default: the newest in
#   target/release/deps), TOP (functions listed per workload, default 25),
#   KEEP (a folder the callgrind dumps are copied to, for callgrind_annotate).
# Run it as root in a network namespace of its own:
#   unshare -n sh -c 'ip link set lo up && bash benches/instructions.sh 10'
# CORES=N (default 1): the DNS node runs `--cores N` (issue 27 goal 5), and
# dnsperf uses 4 clients (source ports) per core, spread over the cores by
# the kernel's reuseport hash; callgrind counts every thread, so the figure
# is all cores' instructions per answer (valgrind runs the threads one at a
# time under its own lock, so at N > 1 an idle executor's spinning turns
# fill the other's slices: measured at N = 2, 5,583 answers in 8 s and
# 8,026 instructions an answer, mostly glommio's turn, against 594,005 and
# 1,484 at N = 1; the figure at N > 1 is valgrind's scheduling, not the
# answer's). The queries each core answered are printed beside it.
# Two builds: CORAL=old/coral bash benches/instructions.sh 10 hits4k, then
# the new one. The figures: benches/README.md ("User-space instructions per
# answer").
set -euo pipefail

SECS=${1:-10}
shift || true
WORKLOADS=("$@")
if [ ${#WORKLOADS[@]} -eq 0 ]; then WORKLOADS=(hits4k hits41k dns dsht); fi
HERE=$(cd "$(dirname "$0")" && pwd)
IP=${IP:-127.14.201.1}
TOP=${TOP:-25}
abs() { if [ -n "$1" ] && [ -e "$1" ]; then realpath "$1"; else echo "$1"; fi; }
CORAL=$(abs "${CORAL:-$HERE/../target/release/coral}")
FLOOR=$(abs "${FLOOR:-$(dirname "$CORAL")/examples/floor}")
DSHT_UDP=$(abs "${DSHT_UDP:-$(ls -t "$(dirname "$CORAL")"/deps/dsht_udp-* 2>/dev/null | grep -v '\.d$' | head -1 || true)}")
for t in valgrind callgrind_control python3; do
    command -v "$t" >/dev/null || { echo "$t is required" >&2; exit 1; }
done
[ -x "$CORAL" ] || { echo "no coral binary at $CORAL" >&2; exit 1; }
. "$(dirname "$0")/lib.sh"
bench_setup instr
bench_keep() {
    if [ -n "${KEEP:-}" ]; then mkdir -p "$KEEP" && cp "$TMP"/*.cg.* "$KEEP"/ 2>/dev/null || true; fi
}

start() { # LOG COMMAND...: in $TMP, a process group of its own; sets PID
    local log=$1
    shift
    (cd "$TMP" && exec setsid "$@" >"$log" 2>&1) &
    PID=$!
    PGIDS+=("$PID")
}
stop() { kill -TERM -- "-$1" 2>/dev/null || true; wait "$1" 2>/dev/null || true; }
wait_tcp() {
    for _ in $(seq 1 1200); do
        if (exec 3<>"/dev/tcp/$IP/$1") 2>/dev/null; then return 0; fi
        sleep 0.1
    done
    echo "nothing listens on $IP:$1" >&2
    return 1
}
CORES=${CORES:-1}
under_callgrind() { # NAME ADMIN_PORT ARGS...: starts the node under callgrind
    local name=$1 port=$2 cores=1
    shift 2
    [ "$name" = dns ] && cores=$CORES
    RUST_LOG=warn start "$TMP/$name.log" valgrind --tool=callgrind --dump-instr=no \
        --callgrind-out-file="$TMP/$name.cg.%p" "$CORAL" node --cores "$cores" "$@"
    NODE=$PID
    wait_tcp "$port"
}
# report NAME ANSWERS [LABEL]: instructions per answer and the top functions (self).
report() {
    local name=$1 answers=$2 label=${3:-$1} f
    f=$(ls "$TMP/$name".cg.*.1 2>/dev/null | head -1)
    if [ -z "$f" ] || [ -z "$answers" ] || [ "$answers" = 0 ]; then
        echo "$name: no dump or no answers"
        return 0
    fi
    python3 - "$f" "$answers" "$label" "$TOP" <<'EOF'
import collections, re, sys
path, answers, name, top = sys.argv[1], float(sys.argv[2]), sys.argv[3], int(sys.argv[4])
names, cost, cur, pending = {}, collections.Counter(), None, False
def nm(tok):
    m = re.match(r'\((\d+)\)\s*(.*)', tok)
    if not m:
        return tok
    if m.group(2):
        names[m.group(1)] = m.group(2)
    return names.get(m.group(1), '?')
for line in open(path):
    if line.startswith('fn='):
        cur = nm(line[3:].strip())
    elif line.startswith('cfn='):
        nm(line[4:].strip())
    elif line.startswith('calls='):
        pending = True
    elif line[:1].isdigit() or line[:1] in '+-*':
        parts = line.split()
        if pending:
            pending = False
        elif len(parts) > 1:
            cost[cur] += int(parts[1])
total = sum(cost.values())
print(f"{name}: {int(answers)} answers, {total / answers:,.0f} user-space instructions per answer")
for f, c in cost.most_common(top):
    print(f"  {c / answers:8.1f}  {f[:110]}")
EOF
}
want() { local w; for w in "${WORKLOADS[@]}"; do [ "$w" = "$1" ] && return 0; done; return 1; }
echo "user-space instructions per answer (callgrind), $SECS s of load each, $(uname -r), $CORAL"

if want hits4k || want hits41k; then
    WRK=${WRK:-$(command -v wrk || true)}
    if [ -z "$WRK" ] || [ ! -x "$FLOOR" ]; then
        echo "(hits skipped: needs wrk and the floor as the origin: cargo build --release -p coral-shards --examples)"
    else
        mkdir -p "$TMP/www"
        head -c 4096 /dev/zero | tr '\0' x >"$TMP/www/4k.bin"
        head -c 41000 /dev/zero | tr '\0' y >"$TMP/www/41k.bin"
        start "$TMP/origin.log" "$FLOOR" http "$IP:8080" "$TMP/www" sendfile
        ORIGIN=$PID
        wait_tcp 8080
        HOST=origin.test.8080.coral.test
        for w in hits4k hits41k; do
            want $w || continue
            f=${w#hits}
            under_callgrind "$w" 8090 --dsht "$IP:7000" --admin "$IP:7080" --http "$IP:8090" \
                --cache-dir "$TMP/cache-$w" --cache-size 200000000 --allow-private-origins \
                --resolve "origin.test=$IP"
            for _ in 1 2 3 4; do curl -sf -o /dev/null -H "Host: $HOST" "http://$IP:8090/$f.bin"; done
            "$WRK" -t1 -c8 -d1s -H "Host: $HOST" "http://$IP:8090/$f.bin" >/dev/null
            callgrind_control -z "$NODE" >/dev/null 2>&1
            n=$("$WRK" -t1 -c8 -d"${SECS}s" -H "Host: $HOST" "http://$IP:8090/$f.bin" | awk '/requests in/ {print $1}')
            callgrind_control -d "$NODE" >/dev/null 2>&1
            sleep 1
            stop "$NODE"
            report "$w" "$n"
        done
        stop "$ORIGIN"
    fi
fi

if want dns; then
    DNSPERF=${DNSPERF:-$(command -v dnsperf || true)}
    if [ -z "$DNSPERF" ]; then
        echo "(dns skipped: no dnsperf)"
    else
        for i in $(seq 1 10000); do echo "www.site$i.example.com.http.L2.L1.L0.coralcdn.test A"; done >"$TMP/queries"
        printf 'http = "%s:8091"\n[dnssrv]\nrrl_responses_per_sec = 0\n' "$IP" >"$TMP/dns.toml"
        under_callgrind dns 7081 --dsht "$IP:7001" --admin "$IP:7081" --dns "$IP:5400" --config "$TMP/dns.toml"
        clients=$((4 * CORES))
        "$DNSPERF" -s "$IP" -p 5400 -d "$TMP/queries" -l 2 -c "$clients" -q 200 >/dev/null 2>&1
        callgrind_control -z "$NODE" >/dev/null 2>&1
        n=$("$DNSPERF" -s "$IP" -p 5400 -d "$TMP/queries" -l "$SECS" -c "$clients" -q 200 2>&1 | awk '/Queries completed:/ {print $3}')
        callgrind_control -d "$NODE" >/dev/null 2>&1
        sleep 1
        split=$("$CORAL" stats --json --node "$IP:7081" 2>/dev/null | python3 -c '
import json, sys
print(", ".join("core %d: %s" % (i, (c.get("dns") or {}).get("queries")) for i, c in enumerate(json.load(sys.stdin)["cores"])))' 2>/dev/null || echo "not read")
        stop "$NODE"
        report dns "$n" "dns ($CORES core(s); queries answered by core, warm-up included: $split)"
    fi
fi

if want dsht; then
    if [ -z "$DSHT_UDP" ] || [ ! -x "$DSHT_UDP" ]; then
        echo "(dsht skipped: cargo bench -p coral-shards --bench dsht_udp --no-run, or set DSHT_UDP)"
    else
        under_callgrind dsht 7082 --dsht "$IP:7002" --admin "$IP:7082"
        "$CORAL" put url:http://www.x.com/y.jpg 10.1.2.3:8090 --ttl 3600 --node "$IP:7082" >/dev/null
        "$DSHT_UDP" load get "$IP:7002" "$IP" 1 64 >/dev/null 2>&1
        # Gets the node served, read before the counters are zeroed and
        # after they are dumped: the load generator counts only the answers
        # of its measured seconds, not those of its one-second warm-up,
        # which the dump includes.
        served() { "$CORAL" stats --json --node "$IP:7082" | python3 -c 'import json,sys; print(sum(c["gets_served"] for c in json.load(sys.stdin)["cores"]))'; }
        s0=$(served)
        callgrind_control -z "$NODE" >/dev/null 2>&1
        n=$("$DSHT_UDP" load get "$IP:7002" "$IP" "$SECS" 64 2>/dev/null | tail -1)
        callgrind_control -d "$NODE" >/dev/null 2>&1
        sleep 1
        s1=$(served)
        stop "$NODE"
        report dsht "$n"
        # The same dump per get served (every get of the run, warm-up
        # included): the figure to compare two builds by.
        TOP=0 report dsht "$((s1 - s0))" "dsht (per get served)"
    fi
fi
