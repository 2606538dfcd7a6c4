#!/usr/bin/env bash
# Two coral builds' simulators side by side (issue 27 goal 6): both run
# `coral sim hotspot ARGS --json` at once, each pinned to a CPU of its own
# (`taskset`), the CPUs swapped every round, so that a change of the
# machine's pace hits both alike. Reported per round: each build's user CPU
# seconds (bash's `times` once it exited), wall seconds (the report's
# `wall_seconds`) and peak RSS (the report's `peak_rss_kb`, from getrusage;
# `?` for a build older than it), the new build's user CPU against the
# old's, and whether the two reports are the same in every field but those
# and `events_per_second`; then the ratio's min / median /
# max over the rounds. On a machine of 2 cores this was the only fair
# comparison of two builds: run one after the other, the host's pace moved
# the wall time by 10 % (benches/README.md, "Session 19").
#
# Usage: benches/sim_ab.sh OLD_CORAL NEW_CORAL [ROUNDS [HOTSPOT ARGS...]]
#   e.g. benches/sim_ab.sh /tmp/coral-old target/sim/coral 2 \
#            --nodes 100000 --rate 1 --minutes 2 --no-baseline --seed 1
# HOTSPOT ARGS default to a quick run: --nodes 300 --minutes 1 --no-baseline.
# CPU_A and CPU_B (default 0 and the last CPU) are the two CPUs. Exits 2
# if a round's reports differ (a change meant to keep behaviour did not),
# unless SAME=0.
set -euo pipefail

OLD=${1:?old coral binary}
NEW=${2:?new coral binary}
ROUNDS=${3:-2}
shift $(($# < 3 ? $# : 3))
if [ $# -eq 0 ]; then
    set -- --nodes 300 --minutes 1 --no-baseline
fi
CPU_A=${CPU_A:-0}
CPU_B=${CPU_B:-$(($(nproc) - 1))}
SAME=${SAME:-1}
. "$(dirname "$0")/lib.sh"
bench_setup sim-ab

# field FILE NAME: a number of the report (its first line naming NAME), or ?.
field() {
    grep -m1 "\"$2\":" "$1" | sed -E 's/.*: *([0-9.eE+-]+).*/\1/' | grep . || echo '?'
}

# run WHO CPU BINARY ARGS...: the binary's run on CPU, its report in
# $TMP/WHO.json, its errors in WHO.err and its user CPU seconds (its
# shell's children's, from `times`) in WHO.times. The shell stops the run
# when it is stopped (this script's cleanup signals the shell).
run() {
    local who=$1 cpu=$2
    shift 2
    exec taskset -c "$cpu" bash -c '
        "${@:2}" >"$1.json" 2>"$1.err" &
        c=$!
        trap "kill \$c 2>/dev/null; wait \$c; exit 143" TERM INT HUP
        wait $c
        s=$?
        times >"$1.times"
        exit $s' run "$TMP/$who" "$@"
}

# user WHO: WHO's user CPU seconds, from the second line (the children's)
# of its shell's `times` (`1m2.345s 0m0.010s`).
user() {
    sed -n 2p "$TMP/$1.times" | awk '{ split($1, t, /[ms]/); printf "%.2f\n", 60 * t[1] + t[2] }'
}

# The report without what depends on the run's pace.
report() {
    grep -v -E '"(wall_seconds|events_per_second|user_cpu_seconds|peak_rss_kb)":' "$1"
}

ratios=()
differ=0
for r in $(seq 1 "$ROUNDS"); do
    if [ $((r % 2)) -eq 1 ]; then co=$CPU_A cn=$CPU_B; else co=$CPU_B cn=$CPU_A; fi
    run old "$co" "$OLD" sim hotspot "$@" --json &
    po=$!
    PIDS+=("$po")
    run new "$cn" "$NEW" sim hotspot "$@" --json &
    pn=$!
    PIDS+=("$pn")
    for who in old new; do
        pid=$po
        [ "$who" = new ] && pid=$pn
        if ! wait "$pid"; then
            echo "round $r: the $who build failed:" >&2
            cat "$TMP/$who.err" >&2
            exit 1
        fi
    done
    PIDS=()
    uo=$(user old)
    un=$(user new)
    ratio=$(awk -v a="$un" -v b="$uo" 'BEGIN { printf "%.3f", (b > 0 ? a / b : 0) }')
    ratios+=("$ratio")
    if diff <(report "$TMP/old.json") <(report "$TMP/new.json") >"$TMP/diff"; then
        same="reports same"
    else
        same="reports DIFFERENT"
        differ=1
        head -20 "$TMP/diff" >&2
    fi
    echo "round $r: old (CPU $co) user $uo s wall $(field "$TMP/old.json" wall_seconds) s peak RSS $(field "$TMP/old.json" peak_rss_kb) KB; new (CPU $cn) user $un s wall $(field "$TMP/new.json" wall_seconds) s peak RSS $(field "$TMP/new.json" peak_rss_kb) KB; new/old user CPU $ratio; $same"
done
printf '%s\n' "${ratios[@]}" | sort -n | awk '
    { v[NR] = $1 }
    END { printf "new/old user CPU over %d rounds: min %s median %s max %s\n", NR, v[1], (NR % 2 ? v[(NR + 1) / 2] : sprintf("%.3f", (v[NR / 2] + v[NR / 2 + 1]) / 2)), v[NR] }'
if [ "$differ" -eq 1 ] && [ "$SAME" != 0 ]; then
    echo "the reports differ (SAME=0 allows it)" >&2
    exit 2
fi
