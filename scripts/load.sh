#!/usr/bin/env bash
# Load run (not part of the test suite): many clients joining and leaving
# at once, then several Domains at once. Every join must print its output
# and its exit status; a failure is any other outcome.
#
#   scripts/load.sh [SECONDS] [LOOPS] [DOMAINS]     (defaults 120 30 6)
#
# Phase 1: LOOPS concurrent join/leave loops against one Domain for
# SECONDS. Phase 2: LOOPS loops spread over DOMAINS Domains (each started
# by its first join, torn down after its last) for SECONDS.
# Prints joins, failures, p50/p95/max time-to-output (ms; the joined
# command only prints, so output and exit arrive together), and the
# phase-1 coordinator's RSS and fd count at start and end. Run as root (it
# switches to the test user) or as the user that owns the image.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
. "$here/lib.sh"

bench_as_user "$here" "$(basename "$0")" "$@"

secs=${1:-120}
loops=${2:-30}
domains=${3:-6}
lz=${LAZARET_BIN:-$here/../target/x86_64-unknown-linux-gnu/release/lazaret}
work=$(mktemp -d /tmp/lazaret-load.XXXXXX)
holder=""
cleanup() {
    [ -n "$holder" ] && kill "$holder" 2>/dev/null || true
    for ws in "$work"/ws*; do [ -d "$ws" ] && (cd "$ws" && "$lz" stop >/dev/null 2>&1 || true); done
    rm -rf "$work"
}
trap cleanup EXIT

now_ms() { echo $(( ${EPOCHREALTIME/./} / 1000 )); }

# loop WS N END OUT: join/leave until END (ms), one line per join:
# "ok MS" or "fail RC".
loop() {
    local ws=$1 n=$2 end=$3 out=$4 i=0 t0 t1 got rc
    cd "$ws"
    while [ "$(now_ms)" -lt "$end" ]; do
        i=$((i + 1))
        t0=$(now_ms)
        set +e
        got=$("$lz" run --quiet -- sh -c "echo tok-$n-$i; exit 7" 2>>"$out.err")
        rc=$?
        set -e
        t1=$(now_ms)
        if [ "$rc" -eq 7 ] && [ "$got" = "tok-$n-$i" ]; then
            echo "ok $((t1 - t0))" >>"$out"
        else
            echo "fail $rc" >>"$out"
            echo "loop $n join $i: rc $rc, output '${got:0:80}'" >>"$out.err"
        fi
    done
}

summary() { # NAME FILES...
    local name=$1; shift
    cat "$@" >"$work/all.$name"
    local joins fails
    joins=$(wc -l <"$work/all.$name")
    fails=$(grep -c '^fail' "$work/all.$name" || true)
    grep '^ok' "$work/all.$name" | cut -d' ' -f2 | sort -n >"$work/ms.$name" || true
    awk -v name="$name" -v joins="$joins" -v fails="$fails" '
        { a[NR] = $1 }
        END {
            p50 = NR ? a[int((NR - 1) * 0.50) + 1] : 0
            p95 = NR ? a[int((NR - 1) * 0.95) + 1] : 0
            max = NR ? a[NR] : 0
            printf "%s: joins %d  failures %d  time-to-output p50 %d ms  p95 %d ms  max %d ms\n", name, joins, fails, p50, p95, max
        }' "$work/ms.$name"
    if [ "$fails" -gt 0 ]; then
        echo "  first failures:"
        cat "$work"/*.err 2>/dev/null | grep -v '^$' | sort | uniq -c | sort -rn | head -n 5 | sed 's/^/    /'
    fi
}

coord_stats() { # PID -> "RSS_KB FDS"
    local rss fds
    rss=$(awk '/^VmRSS:/ {print $2}' "/proc/$1/status" 2>/dev/null || echo 0)
    fds=$(ls "/proc/$1/fd" 2>/dev/null | wc -l)
    echo "$rss $fds"
}

echo "load: $loops loops, ${secs}s per phase, $domains Domains in phase 2; $(nproc) CPUs; load average $(cut -d' ' -f1-3 /proc/loadavg)"

# ---- phase 1: one Domain, held open, LOOPS concurrent join/leave loops ----
mkdir -p "$work/ws0"
(cd "$work/ws0" && "$lz" run --quiet -- sleep $((secs + 120)) >/dev/null 2>&1) &
holder=$!
hc=""
for _ in $(seq 600); do
    hc=$(cd "$work/ws0" && "$lz" ps --json 2>/dev/null | grep -o '"coordinator_pid":[0-9]*' | head -n1 | cut -d: -f2 || true)
    [ -n "$hc" ] && break
    sleep 0.2
done
[ -n "$hc" ] || { echo "load: the Domain never started" >&2; exit 1; }
read -r rss0 fd0 < <(coord_stats "$hc")
end=$(( $(now_ms) + secs * 1000 ))
pids=()
for n in $(seq "$loops"); do
    loop "$work/ws0" "$n" "$end" "$work/p1.$n" &
    pids+=($!)
done
wait "${pids[@]}"
read -r rss1 fd1 < <(coord_stats "$hc")
summary "one Domain, $loops loops" "$work"/p1.[0-9]*
echo "  coordinator (pid $hc): RSS ${rss0} kB -> ${rss1} kB, fds ${fd0} -> ${fd1}; load average $(cut -d' ' -f1-3 /proc/loadavg)"
kill "$holder" 2>/dev/null || true
wait "$holder" 2>/dev/null || true
holder=""
rm -f "$work"/*.err

# ---- phase 2: DOMAINS Domains at once, loops spread over them ----
for d in $(seq "$domains"); do mkdir -p "$work/ws$d"; done
end=$(( $(now_ms) + secs * 1000 ))
pids=()
for n in $(seq "$loops"); do
    d=$(( (n - 1) % domains + 1 ))
    loop "$work/ws$d" "$n" "$end" "$work/p2.$n" &
    pids+=($!)
done
wait "${pids[@]}"
summary "$domains Domains, $loops loops" "$work"/p2.[0-9]*
echo "load: done; load average $(cut -d' ' -f1-3 /proc/loadavg)"
fails=$(cat "$work"/all.* | grep -c '^fail' || true)
[ "$fails" -eq 0 ]
