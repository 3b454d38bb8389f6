#!/usr/bin/env bash
# Benchmark: round trip of an auto-approved `true` through lazaret-escalate
# (sandbox → mailbox → coordinator → host → result) against running `true`
# on the host directly, in one invocation. Prints medians and the overhead.
#
#   scripts/bench-escalate.sh [ROUNDS]
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
rounds=${1:-31}
. "$here/lib.sh"

bench_as_user "$here" "$(basename "$0")" "$@"

lz=${LAZARET_BIN:-$here/../target/x86_64-unknown-linux-gnu/release/lazaret}
work=$(mktemp -d /tmp/lazaret-bench-esc.XXXXXX)
trap 'rm -rf "$work"' EXIT
mkdir -p "$work/ws" "$work/cfg/lazaret"
cat > "$work/cfg/lazaret/config.toml" <<'TOML'
[escalation]
enabled = true
[[escalation.auto_approve]]
argv = ["true"]
TOML
cd "$work/ws"
export XDG_CONFIG_HOME="$work/cfg"

median() { sort -n | awk '{a[NR]=$1} END {print (NR%2) ? a[(NR+1)/2] : (a[NR/2]+a[NR/2+1])/2}'; }

# One bash loop, used inside the sandbox and on the host alike: each round
# runs every command once, in turn, and reads bash's $EPOCHREALTIME around
# each command alone, so the harness forks nothing else (a `date` costs a
# whole guest exec inside gVisor) and the commands are compared under the
# same conditions (interleaved, one session). Prints "NAME MICROSECONDS"
# per command and round; a failing command fails the benchmark rather than
# counting as a fast round.
loop='
    run() { local n=$1; shift; t0=$EPOCHREALTIME; "$@" >/dev/null || { echo "failed: $*" >&2; exit 1; }; t1=$EPOCHREALTIME
        echo "$n $(( ${t1/[.,]/} - ${t0/[.,]/} ))"; }
    for ((i = 0; i < ROUNDS; i++)); do
        CMDS
    done'
loop=${loop//ROUNDS/$rounds}
# Inside one session, interleaved: the auto-approved round trip; /bin/true
# (what gVisor itself costs per process); and where the round trip's time
# beyond a guest exec goes: starting the escalate binary itself (about
# 6 MB, static, with OpenSSL, against /bin/true's 35 KB; gVisor pays for
# each page it maps), then building and signing a request without sending
# it; the rest is the mailbox and the host side. One warm-up first.
inside_cmds='run true /bin/true; run bare lazaret-escalate --help; run signed lazaret-escalate --print-request -- true; run inside lazaret-escalate -- true'
all=$("$lz" run --quiet -- bash -c "lazaret-escalate -- true >/dev/null || exit 1; ${loop//CMDS/$inside_cmds}")
host_all=$(bash -c "${loop//CMDS/run host /bin/true}")
pick() { printf '%s\n' "$all" "$host_all" | awk -v n="$1" '$1 == n && $2 ~ /^[0-9]+$/ { print $2 }'; }
inside=$(pick inside); sandbox=$(pick true); host=$(pick host); bare=$(pick bare); signed=$(pick signed)
for v in inside sandbox host bare signed; do
    n=$(printf '%s\n' "${!v}" | grep -c '^[0-9][0-9]*$' || true)
    if [ "$n" -ne "$rounds" ]; then
        echo "bench-escalate: $v loop gave $n of $rounds rounds" >&2
        exit 1
    fi
done
im=$(printf '%s\n' "$inside" | median)
hm=$(printf '%s\n' "$host" | median)
sm=$(printf '%s\n' "$sandbox" | median)
echo "rounds: $rounds (interleaved in one session)"
awk -v v="$im" 'BEGIN { printf "lazaret-escalate -- true (auto-approved round trip): median %.1f ms\n", v / 1000 }'
awk -v v="$hm" 'BEGIN { printf "true on the host:                                   median %.1f ms\n", v / 1000 }'
awk -v v="$sm" 'BEGIN { printf "true inside the sandbox (gVisor exec cost):          median %.1f ms\n", v / 1000 }'
bm=$(printf '%s\n' "$bare" | median)
gm=$(printf '%s\n' "$signed" | median)
awk -v v="$bm" 'BEGIN { printf "lazaret-escalate --help inside (its start alone):   median %.1f ms\n", v / 1000 }'
awk -v v="$gm" 'BEGIN { printf "lazaret-escalate --print-request (start + signing): median %.1f ms\n", v / 1000 }'
awk -v a="$im" -v b="$bm" -v c="$gm" -v s="$sm" 'BEGIN { printf "beyond a guest exec: %.1f ms starting the binary, %.1f ms signing, %.1f ms mailbox and host\n", (b - s) / 1000, (c - b) / 1000, (a - c) / 1000 }'
awk -v a="$im" -v b="$hm" -v c="$sm" 'BEGIN { printf "overhead vs host true: %.1f ms (target <= 20 ms); of it, mailbox path beyond a guest exec: %.1f ms\n", (a - b) / 1000, (a - c) / 1000 }'
bench_row "escalation round trip (vs a guest exec)" "$(awk -v v="$im" 'BEGIN{printf "%.2f", v/1000}')" "$(awk -v v="$sm" 'BEGIN{printf "%.2f", v/1000}')" ms "<=+2ms"
