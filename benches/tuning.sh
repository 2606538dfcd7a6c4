#!/usr/bin/env bash
# The effect of each of tuning/'s recommendations (issue 27, goal 7),
# measured: one setting at a time, the "before" value and the "after" (the
# recommendation) run alternately, round by round, with the same load, in
# a network namespace of their own; then one table (min/median/max over the
# rounds, and the ratio of the medians after/before).
#
#   benches/tuning.sh [--quick] [SECONDS [ROUNDS]]      (as root)
#
# The experiments (EXPERIMENTS picks; default all of them):
#   bufs     net.core.rmem_max and wmem_max 212992 (the kernel's default,
#            208 KiB) -> 8388608: DSHT gets (the dsht_udp bench's load
#            generator, WINDOW, then DEEP_WINDOW gets in flight) and DNS (dnsperf as
#            benches/dns.sh runs it, and a heavier burst) at saturation
#            against coral --cores 1: Udp RcvbufErrors, answers per
#            server-CPU second
#   backlog  net.core.netdev_max_backlog 1000 -> 16384: the same loads;
#            softnet drops (/proc/net/softnet_stat, host-wide)
#   accept   net.core.somaxconn + net.ipv4.tcp_max_syn_backlog 128/128 ->
#            4096/8192: cache hits by CONNS connections without keep-alive
#            (wrk, "Connection: close"): failed connects, ListenOverflows,
#            SYN cookies sent, p99
#   somaxconn    the same with net.core.somaxconn alone 128 -> 4096
#   synbacklog   the same with net.ipv4.tcp_max_syn_backlog alone 128 -> 8192
#   ports    net.ipv4.ip_local_port_range 32768-60999 -> 10240-65535, with
#            tcp_tw_reuse = 0 (what the default 2 means toward an origin
#            that is not on loopback): a miss-heavy load (every request a
#            new URL, 64 at once, so coral opens origin connections beyond
#            its pool of 8 per origin and closes them): failed fetches,
#            TIME_WAIT sockets
#   twreuse  net.ipv4.tcp_tw_reuse 0 -> 1 under the same miss-heavy load
#   memlock  LimitMEMLOCK 8 MiB -> 64 MiB for coral --cores 2 as user
#            65534 (prlimit, setpriv): glommio's "Skipping" lines for
#            registered buffers, hits per server-CPU second
#   nofile   LimitNOFILE 1024 (a common default soft limit) -> 1048576
#            (capped at this process's hard limit): NOFILE_CONNS (default
#            2000) keep-alive clients at once: socket errors, requests
#   thp      transparent_hugepage always -> madvise: p99 of cache hits
#   cpufreq  scaling_governor (this host's) -> performance: p99 of hits at
#            low load (only where the host has cpufreq)
#
# What it changes and how it restores: settings a network namespace has of
# its own (somaxconn, tcp_max_syn_backlog, ip_local_port_range,
# tcp_tw_reuse) are set inside the namespace of the run and die with it.
# The others are the host's: rmem_max/wmem_max (a child namespace shows the
# first namespace's values, read-only: kernel 6.18 here), netdev_max_backlog
# (absent in a child namespace), transparent_hugepage and the cpufreq
# governor are set for one run and put back after it, and an EXIT trap puts
# every one of them back also when a run fails or the script is stopped.
# While a "before" run lasts, the host has the smaller value.
#
# It runs on a bare machine with only what it is given (no package manager,
# no iproute2):
#   CORAL     the coral binary            (default target/release/coral)
#   FLOOR     the floor example           (default next to CORAL: examples/floor)
#   DSHT_UDP  the dsht_udp bench binary   (default the newest target/release/deps/dsht_udp-*)
#   WRK       wrk                         (default from PATH; HTTP loads skipped without it)
#   DNSPERF   dnsperf                     (default from PATH; DNS skipped without it)
#   LOADGEN_LIBS  a folder of .so files wrk and dnsperf need (only for them)
#   EXPERIMENTS   any of bufs backlog accept somaxconn synbacklog ports twreuse
#             memlock nofile thp cpufreq
#   OUT       where each run's `tuning/check` output and logs are kept
#             (default a new /tmp/coral-tuning.XXXXXX, printed at the end)
#   SERVER_CPU, LOAD_CPU   (default 0 and 1)
#   WINDOW    DSHT gets in flight (default 256, as `dsht_udp -- 5 256`)
#   DEEP_WINDOW   and then a deeper burst (default 4096)
#   CONNS     connections of the accept burst (default 512)
#   NOFILE_CONNS  keep-alive connections of the nofile runs (default 2000)
#   RUN_AS    the unprivileged user of the memlock runs (default 65534)
#   NO_NETNS=1    run on the host's loopback (127.16.210.1), no namespace
# Loopback in the namespace is brought up with ip, ifconfig, python3 or
# perl, the first there is; with none (or no unshare -n, or NO_NETNS) it
# runs on the host's loopback and sets the per-namespace settings on the
# host, putting them back as the others.
# Quick mode (--quick): 1 s runs, one round; it proves the harness works
# (shards/tests/deploy.rs runs it) and judges nothing.
# The figures: tuning/README.md and benches/README.md ("Host tuning").
set -euo pipefail

HERE=$(cd "$(dirname "$0")" && pwd)
SELF="$HERE/$(basename "$0")"
REPO=$(cd "$HERE/.." && pwd)

LOADGEN_LIBS=${LOADGEN_LIBS:-${LD_LIBRARY_PATH:-}}
unset LD_LIBRARY_PATH
export LOADGEN_LIBS

abs() { if [ -n "$1" ] && [ -e "$1" ]; then realpath "$1"; else echo "$1"; fi; }
CORAL=$(abs "${CORAL:-$HERE/../target/release/coral}")
FLOOR=$(abs "${FLOOR:-$(dirname "$CORAL")/examples/floor}")
DSHT_UDP=${DSHT_UDP:-$(ls -t "$(dirname "$CORAL")"/deps/dsht_udp-* 2>/dev/null | grep -v '\.d$' | head -1 || true)}
DSHT_UDP=$(abs "$DSHT_UDP")
WRK=$(abs "${WRK:-$(command -v wrk || true)}")
DNSPERF=$(abs "${DNSPERF:-$(command -v dnsperf || true)}")
export CORAL FLOOR DSHT_UDP WRK DNSPERF
NCPU=$(nproc)
SERVER_CPU=${SERVER_CPU:-0}
if [ -z "${LOAD_CPU:-}" ]; then
    if [ "$NCPU" -gt 1 ]; then LOAD_CPU=1; else LOAD_CPU=0; fi
fi
WINDOW=${WINDOW:-256}
DEEP_WINDOW=${DEEP_WINDOW:-4096}
CONNS=${CONNS:-512}
NOFILE_CONNS=${NOFILE_CONNS:-2000}
RUN_AS=${RUN_AS:-65534}
export SERVER_CPU LOAD_CPU WINDOW DEEP_WINDOW CONNS NOFILE_CONNS RUN_AS
IP=127.16.210.1
HZ=$(getconf CLK_TCK)

# ---------------------------------------------------------------------------
# Helpers shared by both modes.

loadgen() { env LD_LIBRARY_PATH="$LOADGEN_LIBS" "$@"; }

# sysctl_path KEY: its file under /proc/sys.
sysctl_path() { echo "/proc/sys/${1//./\/}"; }
get_sysctl() { xargs <"$(sysctl_path "$1")"; }
set_sysctl() { echo "$2" >"$(sysctl_path "$1")"; }

THP=/sys/kernel/mm/transparent_hugepage/enabled
GOV=/sys/devices/system/cpu/cpu0/cpufreq/scaling_governor
thp_now() { sed 's/.*\[\(.*\)\].*/\1/' "$THP"; }

# lo_up: brings loopback up in this network namespace with what there is.
lo_up() {
    if command -v ip >/dev/null 2>&1; then
        ip link set lo up
    elif command -v ifconfig >/dev/null 2>&1; then
        ifconfig lo up
    elif command -v python3 >/dev/null 2>&1; then
        python3 -c '
import fcntl, socket, struct
s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
f = struct.unpack("16sH14x", fcntl.ioctl(s, 0x8913, struct.pack("16sH14x", b"lo", 0)))[1]
fcntl.ioctl(s, 0x8914, struct.pack("16sH14x", b"lo", f | 1))'
    elif command -v perl >/dev/null 2>&1; then
        perl -e 'use Socket; socket(my $s, PF_INET, SOCK_DGRAM, 0) or die "socket: $!";
            my $r = pack("a16 S x22", "lo", 0); ioctl($s, 0x8913, $r) or die "SIOCGIFFLAGS: $!";
            my (undef, $f) = unpack("a16 S", $r);
            ioctl($s, 0x8914, pack("a16 S x22", "lo", $f | 1)) or die "SIOCSIFFLAGS: $!";'
    else
        return 1
    fi
}
can_lo_up() {
    command -v ip >/dev/null 2>&1 || command -v ifconfig >/dev/null 2>&1 ||
        command -v python3 >/dev/null 2>&1 || command -v perl >/dev/null 2>&1
}

# The per-namespace settings an experiment's value sets: "KEY=VALUE ...".
netns_settings() { # experiment value
    case "$1.$2" in
    accept.before) echo "net.core.somaxconn=128 net.ipv4.tcp_max_syn_backlog=128" ;;
    accept.after) echo "net.core.somaxconn=4096 net.ipv4.tcp_max_syn_backlog=8192" ;;
    somaxconn.before) echo "net.core.somaxconn=128" ;;
    somaxconn.after) echo "net.core.somaxconn=4096" ;;
    synbacklog.before) echo "net.ipv4.tcp_max_syn_backlog=128" ;;
    synbacklog.after) echo "net.ipv4.tcp_max_syn_backlog=8192" ;;
    ports.before) echo "net.ipv4.ip_local_port_range=32768_60999 net.ipv4.tcp_tw_reuse=0" ;;
    ports.after) echo "net.ipv4.ip_local_port_range=10240_65535 net.ipv4.tcp_tw_reuse=0" ;;
    twreuse.before) echo "net.ipv4.tcp_tw_reuse=0" ;;
    twreuse.after) echo "net.ipv4.tcp_tw_reuse=1" ;;
    esac
}
# nofile_after: LimitNOFILE's 1048576, or this process's hard limit if lower
# (raising it needs CAP_SYS_RESOURCE).
nofile_after() {
    local hard
    hard=$(ulimit -Hn)
    if [ "$hard" = unlimited ] || [ "$hard" -ge 1048576 ]; then echo 1048576; else echo "$hard"; fi
}
# What "before" and "after" are, for the table.
describe() { # experiment value
    case "$1.$2" in
    bufs.before) echo "rmem/wmem_max 212992" ;;
    bufs.after) echo "rmem/wmem_max 8388608" ;;
    backlog.before) echo "netdev_max_backlog 1000" ;;
    backlog.after) echo "netdev_max_backlog 16384" ;;
    accept.before) echo "somaxconn 128, syn_backlog 128" ;;
    accept.after) echo "somaxconn 4096, syn_backlog 8192" ;;
    somaxconn.before) echo "somaxconn 128" ;;
    somaxconn.after) echo "somaxconn 4096" ;;
    synbacklog.before) echo "syn_backlog 128" ;;
    synbacklog.after) echo "syn_backlog 8192" ;;
    ports.before) echo "ports 32768-60999 (tw_reuse 0)" ;;
    ports.after) echo "ports 10240-65535 (tw_reuse 0)" ;;
    twreuse.before) echo "tcp_tw_reuse 0" ;;
    twreuse.after) echo "tcp_tw_reuse 1" ;;
    nofile.before) echo "nofile 1024" ;;
    nofile.after) echo "nofile $(nofile_after)" ;;
    memlock.before) echo "memlock 8M, uid $RUN_AS" ;;
    memlock.after)
        local hard
        hard=$(ulimit -Hl)
        if [ "$hard" = unlimited ] || [ "$hard" -ge 65536 ]; then echo "memlock 64M, uid $RUN_AS"; else echo "root: no limit (stand-in)"; fi ;;
    thp.before) echo "transparent_hugepage always" ;;
    thp.after) echo "transparent_hugepage madvise" ;;
    cpufreq.before) echo "governor ${ORIG_GOV:-?}" ;;
    cpufreq.after) echo "governor performance" ;;
    esac
}

# ---------------------------------------------------------------------------
# Inner mode: one run (experiment, value, round) in its own namespace.
# Prints "RESULT metric value" lines on stdout.

if [ "${1:-}" = --case ]; then
    EXP=$2 VAL=$3 ROUND=$4 SECS=$5 CASE_OUT=$6 IN_NETNS=$7 PORT_SECS=$8
    TMP=$(mktemp -d /tmp/coral-tuning-case.XXXXXX)
    chmod 755 "$TMP"
    PGIDS=()
    cleanup() {
        for g in "${PGIDS[@]}"; do kill -TERM -- "-$g" 2>/dev/null || true; done
        for g in "${PGIDS[@]}"; do wait "$g" 2>/dev/null || true; done
        rm -rf "$TMP"
    }
    trap cleanup EXIT
    trap 'exit 143' TERM INT HUP
    if [ "$IN_NETNS" = 1 ]; then lo_up; fi
    : >"$CASE_OUT.log"
    for kv in $(netns_settings "$EXP" "$VAL"); do
        set_sysctl "${kv%%=*}" "$(echo "${kv#*=}" | tr _ ' ')"
    done

    # start CPUS CMD...: CMD pinned to CPUS, in a process group of its own,
    # its output in $CASE_OUT.log; sets PID.
    start() {
        local cpus=$1
        shift
        (cd "$TMP/work" && exec setsid taskset -c "$cpus" "$@" >>"$CASE_OUT.log" 2>&1) &
        PID=$!
        PGIDS+=("$PID")
    }
    wait_tcp() { # port [pid that must be alive meanwhile]
        for _ in $(seq 1 1200); do
            if (exec 3<>"/dev/tcp/$IP/$1") 2>/dev/null; then return 0; fi
            if [ -n "${2:-}" ] && ! kill -0 "$2" 2>/dev/null; then
                echo "the server for $IP:$1 exited:" >&2
                tail -5 "$CASE_OUT.log" >&2
                return 1
            fi
            sleep 0.05
        done
        echo "nothing listens on $IP:$1" >&2
        return 1
    }
    ticks() {
        local t=0 p
        for p in "$@"; do t=$((t + $(sed 's/.*) //' "/proc/$p/stat" | awk '{print $12 + $13}'))); done
        echo "$t"
    }
    cpu_s() { awk -v t="$1" -v hz="$HZ" 'BEGIN {printf "%.3f", t / hz}'; }
    per() { awk -v a="$1" -v b="$2" 'BEGIN {printf "%.0f", (b > 0 ? a / b : 0)}'; }
    # snmp FILE GROUP FIELD: a counter of /proc/net/snmp or netstat (this
    # namespace's).
    snmp() {
        awk -v g="$2:" -v f="$3" '$1 == g { if (!h) { for (i = 2; i <= NF; i++) n[i] = $i; h = 1 }
            else { for (i = 2; i <= NF; i++) if (n[i] == f) print $i } }' "$1"
    }
    softnet_drops() {
        local d=0 x
        while read -r _ x _; do d=$((d + 16#$x)); done </proc/net/softnet_stat
        echo "$d"
    }
    result() { echo "RESULT $1 $2"; }
    # time_wait: TIME_WAIT sockets (state 06) toward the origin, $IP:8080
    # (/proc/net/tcp's remote address: the IPv4 address little-endian).
    time_wait() {
        local hex
        hex=$(echo "$IP" | awk -F. '{printf "%02X%02X%02X%02X:1F90", $4, $3, $2, $1}')
        awk -v r="$hex" '$4 == "06" && $3 == r' /proc/net/tcp | wc -l
    }
    # udp_drops PORT: datagrams dropped at this namespace's UDP sockets
    # bound to PORT (the "drops" column of /proc/net/udp), and "other":
    # at every other socket (the load generators').
    udp_drops() {
        awk -v p="$(printf ':%04X' "$1")" 'NR > 1 { if (substr($2, length($2) - 4) == p) mine += $NF; else other += $NF }
            END { printf "%d %d\n", mine, other }' /proc/net/udp
    }

    "$REPO/tuning/check" --dev lo >"$CASE_OUT.check" 2>&1 || true

    # The node's working directory (its DSHT state) and cache: writable by
    # the unprivileged user of the memlock runs.
    mkdir -p "$TMP/www" "$TMP/cache" "$TMP/work"
    chmod 777 "$TMP/cache" "$TMP/work"
    head -c 4096 /dev/zero | tr '\0' x >"$TMP/www/4k.bin"
    printf '[dnssrv]\nrrl_responses_per_sec = 0\n[proxy]\nallow_private_origins = true\nresolve = ["origin.test=%s"]\n' "$IP" >"$TMP/coral.toml"
    chmod 644 "$TMP/coral.toml"
    host=origin.test.8080.coral.test

    cores=1 cpus=$SERVER_CPU wrap=()
    if [ "$EXP" = memlock ]; then
        cores=2
        second=$(((SERVER_CPU + 1) % NCPU))
        [ "$second" = "$LOAD_CPU" ] && [ "$NCPU" -gt 2 ] && second=$(((LOAD_CPU + 1) % NCPU))
        cpus=$SERVER_CPU,$second
        mem=$((8 << 20))
        [ "$VAL" = after ] && mem=$((64 << 20))
        hard=$(ulimit -Hl)
        [ "$hard" = unlimited ] || hard=$((hard * 1024))
        if [ "$hard" != unlimited ] && [ "$hard" -lt "$mem" ]; then
            # Raising the hard limit needs CAP_SYS_RESOURCE, which this root
            # lacks: the stand-in for "enough" is root itself, whose
            # CAP_IPC_LOCK exempts io_uring from the locked-memory limit.
            echo "(memlock $VAL: the hard limit here is $hard bytes and this root cannot raise it (no CAP_SYS_RESOURCE): run as root with CAP_IPC_LOCK, no limit counted, in place of $mem as uid $RUN_AS)" >&2
        else
            wrap=(prlimit --memlock="$mem:$mem" setpriv --reuid="$RUN_AS" --regid="$RUN_AS" --clear-groups)
        fi
    fi
    if [ "$EXP" = nofile ]; then
        files=1024
        [ "$VAL" = after ] && files=$(nofile_after)
        wrap=(prlimit --nofile="$files:$files")
    fi
    RUST_LOG=warn start "$cpus" "${wrap[@]}" "$CORAL" node --cores "$cores" --dsht "$IP:7000" \
        --admin "$IP:7080" --http "$IP:8090" --dns "$IP:5400" --cache-dir "$TMP/cache" --config "$TMP/coral.toml"
    coral_pid=$PID
    wait_tcp 7080 "$coral_pid"
    wait_tcp 8090 "$coral_pid"
    if [ -x "$FLOOR" ]; then
        start "$LOAD_CPU" "$FLOOR" http "$IP:8080" "$TMP/www" sendfile
        wait_tcp 8080 "$PID"
    fi

    # wrk_run ARGS...: wrk's output, pinned to the load CPU.
    wrk_run() { taskset -c "$LOAD_CPU" env LD_LIBRARY_PATH="$LOADGEN_LIBS" "$WRK" "$@" 2>&1; }
    # wrk_results OUT T0 T1: requests, per CPU-s, errors, p99.
    wrk_results() {
        local out=$1 t=$(($3 - $2)) n errs p99 non2xx
        n=$(echo "$out" | awk '/requests in/ {print $1}')
        errs=$(echo "$out" | awk '/Socket errors:/ {gsub(",", ""); print $4 + $6 + $8 + $10}')
        non2xx=$(echo "$out" | awk '/Non-2xx or 3xx/ {print $NF}')
        p99=$(echo "$out" | awk '$1 == "99%" {v = $2; if (v ~ /us$/) {sub("us", "", v); v /= 1000}
            else if (v ~ /ms$/) sub("ms", "", v); else if (v ~ /s$/) {sub("s", "", v); v *= 1000}; print v}')
        result requests "${n:-0}"
        result "requests/server-CPU-s" "$(per "${n:-0}" "$(cpu_s "$t")")"
        result "socket errors" "${errs:-0}"
        result "non-2xx" "${non2xx:-0}"
        [ -n "$p99" ] && result "p99 ms" "$p99"
        echo "$out" >>"$CASE_OUT.log"
    }
    have_wrk() { [ -n "$WRK" ] && [ -x "$WRK" ] && [ -x "$FLOOR" ]; }
    # Stored once, so that the loads below are hits.
    warm() { have_wrk && for _ in 1 2; do wrk_run -t1 -c1 -d1s -H "Host: $host" "http://$IP:8090/4k.bin" >/dev/null; done; }

    hits_p99() { # connections
        have_wrk || { echo "(hits skipped: set WRK and FLOOR)" >&2; return 0; }
        warm
        local t0 t1 out
        t0=$(ticks "$coral_pid")
        out=$(wrk_run -t1 -c"$1" -d"${SECS}s" --latency -H "Host: $host" "http://$IP:8090/4k.bin")
        t1=$(ticks "$coral_pid")
        wrk_results "$out" "$t0" "$t1"
    }

    case $EXP in
    bufs | backlog)
        if [ -x "$DSHT_UDP" ]; then
            url=$("$DSHT_UDP" key 0 1)
            "$CORAL" put "url:$url" 10.1.2.3:8090 --ttl 3600 --node "$IP:7080" >/dev/null
            # The bench's window, then one that overfills a 208 KiB buffer.
            for w in "$WINDOW" "$DEEP_WINDOW"; do
                read -r m0 _ < <(udp_drops 7000)
                r0=$(snmp /proc/net/snmp Udp RcvbufErrors) s0=$(softnet_drops) t0=$(ticks "$coral_pid")
                out=$(taskset -c "$LOAD_CPU" "$DSHT_UDP" load get "$IP:7000" "$IP" "$SECS" "$w" "$url" 2>&1)
                t1=$(ticks "$coral_pid") r1=$(snmp /proc/net/snmp Udp RcvbufErrors) s1=$(softnet_drops)
                read -r m1 _ < <(udp_drops 7000)
                n=$(echo "$out" | tail -1)
                echo "$out" >>"$CASE_OUT.log"
                result "dsht w$w gets" "$n"
                result "dsht w$w gets/server-CPU-s" "$(per "$n" "$(cpu_s $((t1 - t0)))")"
                result "dsht w$w RcvbufErrors (all)" $((r1 - r0))
                result "dsht w$w drops at coral's socket" $((m1 - m0))
                result "dsht w$w softnet drops" $((s1 - s0))
            done
        else
            echo "(dsht skipped: set DSHT_UDP)" >&2
        fi
        if [ -n "$DNSPERF" ] && [ -x "$DNSPERF" ]; then
            for i in $(seq 1 10000); do echo "www.site$i.example.com.http.L2.L1.L0.coralcdn.test A"; done >"$TMP/queries"
            # As benches/dns.sh (-c 4 -q 200), then a burst ten times deeper.
            for q in 200 2000; do
                read -r m0 _ < <(udp_drops 5400)
                r0=$(snmp /proc/net/snmp Udp RcvbufErrors) s0=$(softnet_drops) t0=$(ticks "$coral_pid")
                out=$(taskset -c "$LOAD_CPU" env LD_LIBRARY_PATH="$LOADGEN_LIBS" "$DNSPERF" -s "$IP" -p 5400 \
                    -d "$TMP/queries" -l "$SECS" -c 4 -q "$q" 2>&1)
                t1=$(ticks "$coral_pid") r1=$(snmp /proc/net/snmp Udp RcvbufErrors) s1=$(softnet_drops)
                read -r m1 _ < <(udp_drops 5400)
                n=$(echo "$out" | awk '/Queries completed:/ {print $3}')
                lost=$(echo "$out" | awk '/Queries lost:/ {print $3}')
                echo "$out" >>"$CASE_OUT.log"
                result "dns -q $q answers" "${n:-0}"
                result "dns -q $q answers/server-CPU-s" "$(per "${n:-0}" "$(cpu_s $((t1 - t0)))")"
                result "dns -q $q lost" "${lost:-0}"
                result "dns -q $q RcvbufErrors (all)" $((r1 - r0))
                result "dns -q $q drops at coral's socket" $((m1 - m0))
                result "dns -q $q softnet drops" $((s1 - s0))
            done
        else
            echo "(dns skipped: set DNSPERF)" >&2
        fi
        ;;
    accept | somaxconn | synbacklog)
        have_wrk || { echo "($EXP skipped: set WRK and FLOOR)" >&2; exit 0; }
        warm
        o0=$(snmp /proc/net/netstat TcpExt ListenOverflows) d0=$(snmp /proc/net/netstat TcpExt ListenDrops)
        c0=$(snmp /proc/net/netstat TcpExt SyncookiesSent)
        t0=$(ticks "$coral_pid")
        out=$(wrk_run -t1 -c"$CONNS" -d"${SECS}s" --latency -H "Host: $host" -H "Connection: close" \
            "http://$IP:8090/4k.bin")
        t1=$(ticks "$coral_pid")
        o1=$(snmp /proc/net/netstat TcpExt ListenOverflows) d1=$(snmp /proc/net/netstat TcpExt ListenDrops)
        c1=$(snmp /proc/net/netstat TcpExt SyncookiesSent)
        wrk_results "$out" "$t0" "$t1"
        result "connect errors" "$(echo "$out" | awk '/Socket errors:/ {gsub(",", ""); print $4}' | grep . || echo 0)"
        result ListenOverflows $((o1 - o0))
        result ListenDrops $((d1 - d0))
        result SyncookiesSent $((c1 - c0))
        ;;
    ports | twreuse)
        have_wrk || { echo "($EXP skipped: set WRK and FLOOR)" >&2; exit 0; }
        # Every request a new URL: a miss, fetched from the origin (the floor).
        cat >"$TMP/miss.lua" <<'EOF'
local n = 0
math.randomseed(os.time() + math.floor(os.clock() * 1e6))
local tag = math.random(1, 1e9)
request = function()
  n = n + 1
  return wrk.format(nil, "/4k.bin?t" .. tag .. "n" .. n)
end
EOF
        if [ "$IN_NETNS" = 0 ]; then
            # On the host's loopback the runs before left their TIME_WAIT
            # sockets (60 s): wait until they are gone.
            for _ in $(seq 1 150); do [ "$(time_wait)" = 0 ] && break; sleep 0.5; done
        fi
        t0=$(ticks "$coral_pid")
        out=$(wrk_run -t1 -c64 -d"${PORT_SECS}s" -s "$TMP/miss.lua" -H "Host: $host" "http://$IP:8090/")
        t1=$(ticks "$coral_pid")
        wrk_results "$out" "$t0" "$t1"
        tw=$(time_wait)
        result "TIME_WAIT to origin" "$tw"
        result "fetch connect failures (log)" "$(grep -ci 'cannot assign\|address not available\|AddrNotAvailable' "$CASE_OUT.log" || true)"
        ;;
    memlock)
        hits_p99 32
        # Counted after the load: by then both cores' executors have started.
        result "Skipping lines" "$(grep -c 'Skipping' "$CASE_OUT.log" || true)"
        ;;
    nofile)
        have_wrk || { echo "(nofile skipped: set WRK and FLOOR)" >&2; exit 0; }
        warm
        # wrk counts no error for a connection that waits unaccepted (it is
        # established in the listen queue): the node's descriptors half-way
        # through and its "Too many open files" lines show who was served.
        t0=$(ticks "$coral_pid")
        wrk_run -t1 -c"$NOFILE_CONNS" -d"${SECS}s" --latency -H "Host: $host" "http://$IP:8090/4k.bin" >"$TMP/wrk.out" &
        w=$!
        sleep "$(awk -v s="$SECS" 'BEGIN {print s / 2}')"
        fds=$(find "/proc/$coral_pid/fd" -mindepth 1 -maxdepth 1 | wc -l)
        wait "$w"
        t1=$(ticks "$coral_pid")
        wrk_results "$(cat "$TMP/wrk.out")" "$t0" "$t1"
        result "coral's descriptors mid-run" "$fds"
        result "accept EMFILE log lines" "$(grep -c 'Too many open files' "$CASE_OUT.log" || true)"
        ;;
    thp)
        hits_p99 32
        ;;
    cpufreq)
        hits_p99 1
        ;;
    esac
    exit 0
fi

# ---------------------------------------------------------------------------
# Outer mode: the experiments, the host's settings saved and put back.

QUICK=
ARGS=()
for a in "$@"; do
    if [ "$a" = --quick ]; then QUICK=1; else ARGS+=("$a"); fi
done
SECS=${ARGS[0]:-5}
ROUNDS=${ARGS[1]:-3}
# The miss-heavy load runs long enough to use the ports up (TIME_WAIT
# lasts 60 s; at a few thousand misses a second, 28,232 ports last ~10 s).
PORT_SECS=${PORT_SECS:-20}
if [ -n "$QUICK" ]; then SECS=1 ROUNDS=1 PORT_SECS=1; fi
EXPERIMENTS=${EXPERIMENTS:-bufs backlog accept somaxconn synbacklog ports twreuse memlock nofile thp cpufreq}

[ "$(id -u)" = 0 ] || { echo "benches/tuning.sh: run it as root (it sets kernel settings)" >&2; exit 1; }
[ -x "$CORAL" ] || { echo "no coral binary at $CORAL (set CORAL)" >&2; exit 1; }

NETNS=0
if [ -z "${NO_NETNS:-}" ] && unshare -n true 2>/dev/null && can_lo_up; then NETNS=1; fi

# One run at a time on a host: two would each put back what the other set.
if command -v flock >/dev/null 2>&1; then
    exec 9>/tmp/coral-tuning.lock
    flock -n 9 || { echo "benches/tuning.sh: another run holds /tmp/coral-tuning.lock; waiting" >&2; flock 9; }
fi

OUT=${OUT:-$(mktemp -d /tmp/coral-tuning.XXXXXX)}
mkdir -p "$OUT"
RESULTS="$OUT/results"
: >"$RESULTS"
: >"$OUT/notes"

# The host's values, put back on exit (whatever happened).
HOST_KEYS="net.core.rmem_max net.core.wmem_max net.core.netdev_max_backlog"
if [ "$NETNS" = 0 ]; then
    HOST_KEYS="$HOST_KEYS net.core.somaxconn net.ipv4.tcp_max_syn_backlog net.ipv4.ip_local_port_range net.ipv4.tcp_tw_reuse"
fi
declare -A ORIG
for k in $HOST_KEYS; do ORIG[$k]=$(get_sysctl "$k"); done
ORIG_THP=
[ -w "$THP" ] && ORIG_THP=$(thp_now)
ORIG_GOV=
[ -w "$GOV" ] && ORIG_GOV=$(cat "$GOV")
CHILD=
restore() {
    [ -n "$CHILD" ] && kill -TERM "$CHILD" 2>/dev/null && wait "$CHILD" 2>/dev/null
    for k in "${!ORIG[@]}"; do
        [ "$(get_sysctl "$k")" = "${ORIG[$k]}" ] || set_sysctl "$k" "${ORIG[$k]}" || true
    done
    if [ -n "$ORIG_THP" ] && [ "$(thp_now)" != "$ORIG_THP" ]; then echo "$ORIG_THP" >"$THP" || true; fi
    if [ -n "$ORIG_GOV" ]; then
        for g in /sys/devices/system/cpu/cpu*/cpufreq/scaling_governor; do
            [ "$(cat "$g")" = "$ORIG_GOV" ] || echo "$ORIG_GOV" >"$g" || true
        done
    fi
}
trap restore EXIT
trap 'exit 143' TERM INT HUP

# host_set EXPERIMENT VALUE: the host-wide settings of this run.
host_set() {
    case "$1.$2" in
    bufs.before) set_sysctl net.core.rmem_max 212992; set_sysctl net.core.wmem_max 212992 ;;
    bufs.after) set_sysctl net.core.rmem_max 8388608; set_sysctl net.core.wmem_max 8388608 ;;
    backlog.before) set_sysctl net.core.netdev_max_backlog 1000 ;;
    backlog.after) set_sysctl net.core.netdev_max_backlog 16384 ;;
    thp.before) echo always >"$THP" ;;
    thp.after) echo madvise >"$THP" ;;
    cpufreq.before) for g in /sys/devices/system/cpu/cpu*/cpufreq/scaling_governor; do echo "$ORIG_GOV" >"$g"; done ;;
    cpufreq.after) for g in /sys/devices/system/cpu/cpu*/cpufreq/scaling_governor; do echo performance >"$g"; done ;;
    esac
    if [ "$NETNS" = 0 ]; then
        for kv in $(netns_settings "$1" "$2"); do
            set_sysctl "${kv%%=*}" "$(echo "${kv#*=}" | tr _ ' ')"
        done
    fi
}

# run_case EXPERIMENT VALUE ROUND: one run; its RESULT lines into $RESULTS.
run_case() {
    local e=$1 v=$2 r=$3 case_out="$OUT/$1-$2-$3"
    host_set "$e" "$v"
    if [ "$NETNS" = 1 ]; then
        unshare -n bash "$SELF" --case "$e" "$v" "$r" "$SECS" "$case_out" 1 "$PORT_SECS" >"$case_out.out" 2>&1 9>&- &
    else
        bash "$SELF" --case "$e" "$v" "$r" "$SECS" "$case_out" 0 "$PORT_SECS" >"$case_out.out" 2>&1 9>&- &
    fi
    CHILD=$!
    local rc=0
    wait "$CHILD" || rc=$?
    CHILD=
    restore
    if [ "$rc" != 0 ]; then
        echo "benches/tuning.sh: $e $v round $r failed ($rc):" >&2
        tail -20 "$case_out.out" >&2
        return 1
    fi
    # Each note (a skipped load, a stand-in) once.
    grep '^(' "$case_out.out" | sort -u | while IFS= read -r note; do
        grep -qxF -- "$note" "$OUT/notes" 2>/dev/null && continue
        echo "$note" | tee -a "$OUT/notes" >&2
    done || true
    awk -v e="$e" -v v="$v" '/^RESULT / { $1 = ""; sub(/^ /, ""); n = $NF; $NF = ""; sub(/ $/, "");
        printf "%s\t%s\t%s\t%s\n", e, v, $0, n }' "$case_out.out" >>"$RESULTS"
}

echo "benches/tuning.sh: $NCPU CPUs, $(uname -r), $SECS s per run, $ROUNDS round(s), before/after alternating;"
echo "  coral on CPU $SERVER_CPU (memlock: --cores 2), load on CPU $LOAD_CPU; $([ "$NETNS" = 1 ] && echo "each run in a network namespace of its own" || echo "on the host's loopback (no network namespace)")"
echo "  host before: $(for k in $HOST_KEYS; do printf '%s=%s ' "$k" "${ORIG[$k]}"; done)thp=${ORIG_THP:-none} governor=${ORIG_GOV:-none}"
"$REPO/tuning/check" >"$OUT/host.check" 2>&1 || true

FAILED=()
for e in $EXPERIMENTS; do
    case $e in
    thp) [ -n "$ORIG_THP" ] || { echo "(thp: this host has no writable $THP: not measured)"; continue; } ;;
    cpufreq) [ -n "$ORIG_GOV" ] || { echo "(cpufreq: this host has no cpufreq ($GOV): not measured)"; continue; } ;;
    memlock)
        [ "$NCPU" -ge 2 ] || { echo "(memlock: needs 2 CPUs: not measured)"; continue; }
        command -v prlimit >/dev/null && command -v setpriv >/dev/null ||
            { echo "(memlock: needs prlimit and setpriv (util-linux): not measured)"; continue; }
        setpriv --reuid="$RUN_AS" --regid="$RUN_AS" --clear-groups test -x "$CORAL" ||
            { echo "(memlock: user $RUN_AS cannot run $CORAL (a directory above it closed to others?): not measured)"; continue; } ;;
    nofile)
        [ "$(ulimit -n)" = unlimited ] || [ "$(ulimit -n)" -gt $((NOFILE_CONNS + 64)) ] ||
            { echo "(nofile: wrk needs $NOFILE_CONNS descriptors and ulimit -n here is $(ulimit -n): not measured)"; continue; }
        command -v prlimit >/dev/null || { echo "(nofile: needs prlimit (util-linux): not measured)"; continue; } ;;
    bufs | backlog | accept | somaxconn | synbacklog | ports | twreuse) ;;
    *) echo "benches/tuning.sh: no experiment $e" >&2; exit 2 ;;
    esac
    # A failed run ends its experiment (the others still run) and the
    # script's status.
    for r in $(seq 1 "$ROUNDS"); do
        ok=1
        for v in before after; do run_case "$e" "$v" "$r" || { ok=0; break; }; done
        [ "$ok" = 1 ] || { FAILED+=("$e"); break; }
    done
done

# The table: per experiment and metric, min/median/max over the rounds of
# before and after, and the ratio of the medians.
echo
printf '%-8s %-34s %-32s %-26s %-32s %-26s %s\n' experiment metric before "min/median/max" after "min/median/max" "after/before"
for e in $EXPERIMENTS; do
    awk -F'\t' -v e="$e" '$1 == e { print $3 }' "$RESULTS" | awk '!seen[$0]++' | while IFS= read -r m; do
        stats() { # value
            awk -F'\t' -v e="$e" -v v="$1" -v m="$m" '$1 == e && $2 == v && $3 == m { print $4 }' "$RESULTS" |
                sort -g | awk '{ a[NR] = $1 } END { if (NR == 0) { print "-"; exit }
                    med = (NR % 2) ? a[(NR + 1) / 2] : (a[NR / 2] + a[NR / 2 + 1]) / 2
                    printf "%s/%s/%s %s\n", a[1], med, a[NR], med }'
        }
        b=$(stats before) a=$(stats after)
        ratio=$(awk -v x="${b##* }" -v y="${a##* }" 'BEGIN { if (x + 0 > 0) printf "%.2f", y / x; else print "-" }')
        printf '%-8s %-34s %-32s %-26s %-32s %-26s %s\n' "$e" "$m" "$(describe "$e" before)" "${b% *}" \
            "$(describe "$e" after)" "${a% *}" "$ratio"
    done
done
echo
echo "benches/tuning.sh: each run's tuning/check output and logs: $OUT (host.check: the host before the runs)"
if [ ${#FAILED[@]} -gt 0 ]; then
    echo "benches/tuning.sh: failed: ${FAILED[*]} (their tables hold the rounds before the failure)" >&2
    exit 1
fi
