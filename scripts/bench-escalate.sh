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
# 1 MB, static, against /bin/true's 35 KB and the libc it loads), then
# building and signing a request without sending it; the rest is the
# mailbox and the host side. One warm-up first.
inside_cmds='run true /bin/true; run bare lazaret-escalate --help; run signed lazaret-escalate --print-request -- true; run inside lazaret-escalate -- true'
# Then, in the same session, where the client's own time goes: each traced
# round trip prints the microseconds at the end of each step (reading the
# and parsing the credential, signing, writing the request, the answer,
# printing it) on stderr, which the loop keeps and the awk below pairs up.
traced='for ((i = 0; i < ROUNDS; i++)); do LAZARET_ESCALATE_TRACE=1 lazaret-escalate -- true 2>&1 >/dev/null || exit 1; done'
traced=${traced//ROUNDS/$rounds}
# A second session holds the Domain open after the measured one ends, so
# that the coordinator log (removed with the Domain) can be read below.
dom=$(printf 'lazaret-domain-v1\0default\0%s' "$(pwd -P)" | sha256sum | cut -c1-20)
rt="${XDG_RUNTIME_DIR:+$XDG_RUNTIME_DIR/lazaret}"
rt="${rt:-/tmp/lazaret-$(id -u)}/$dom"
"$lz" run --quiet -- sleep 3600 >/dev/null 2>&1 </dev/null &
holder=$!
trap 'kill "$holder" 2>/dev/null || true; wait "$holder" 2>/dev/null || true; rm -rf "$work"' EXIT
for _ in $(seq 300); do [ -S "$rt/hc.sock" ] && break; sleep 0.1; done
all=$("$lz" run --quiet -- bash -c "lazaret-escalate -- true >/dev/null || exit 1; ${loop//CMDS/$inside_cmds}; $traced")
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
bm=$(printf '%s\n' "$bare" | median)
gm=$(printf '%s\n' "$signed" | median)
# Differences within each round, then their median: a guest exec varies by
# several milliseconds from one round to the next, so the difference of two
# medians can say little (or come out negative); a pair shares its round.
paired() { paste <(printf '%s\n' "$1") <(printf '%s\n' "$2") | awk '{ print $1 - $2 }' | median; }
beyond=$(paired "$inside" "$sandbox")
start_d=$(paired "$bare" "$sandbox")
sign_d=$(paired "$signed" "$bare")
mail_d=$(paired "$inside" "$signed")
echo "rounds: $rounds (interleaved in one session)"
awk -v v="$im" 'BEGIN { printf "lazaret-escalate -- true (auto-approved round trip): median %.1f ms\n", v / 1000 }'
awk -v v="$hm" 'BEGIN { printf "true on the host:                                   median %.1f ms\n", v / 1000 }'
awk -v v="$sm" 'BEGIN { printf "true inside the sandbox (gVisor exec cost):          median %.1f ms\n", v / 1000 }'
awk -v v="$bm" 'BEGIN { printf "lazaret-escalate --help inside (its start alone):   median %.1f ms\n", v / 1000 }'
awk -v v="$gm" 'BEGIN { printf "lazaret-escalate --print-request (start + signing): median %.1f ms\n", v / 1000 }'
awk -v a="$beyond" -v b="$start_d" -v c="$sign_d" -v d="$mail_d" 'BEGIN { printf "beyond a guest exec, median of per-round differences: %.1f ms (starting the binary %.1f, signing %.1f, mailbox and host %.1f)\n", a / 1000, b / 1000, c / 1000, d / 1000 }'
awk -v a="$im" -v b="$hm" 'BEGIN { printf "overhead vs host true: %.1f ms (target <= 20 ms)\n", (a - b) / 1000 }'
# step_medians TITLE EMPTY: reads "STEP MICROSECONDS" lines and prints
# TITLE followed by each step's median in milliseconds, steps in the order
# they first appear (or EMPTY when there are none).
step_medians() {
    awk -v title="$1" -v empty="$2" '
    { if (!($1 in seen)) { seen[$1] = 1; order[++k] = $1 } v[$1, ++n[$1]] = $2 }
    END {
        if (k == 0) { print empty; exit }
        line = sprintf(title, n[order[1]])
        for (i = 1; i <= k; i++) {
            s = order[i]; m = n[s]
            for (a = 1; a <= m; a++) x[a] = v[s, a]
            for (a = 2; a <= m; a++) { t = x[a]; for (b = a - 1; b >= 1 && x[b] > t; b--) x[b + 1] = x[b]; x[b + 1] = t }
            med = (m % 2) ? x[(m + 1) / 2] : (x[m / 2] + x[m / 2 + 1]) / 2
            line = line sprintf(" %s %.2f", s, med / 1000)
        }
        print line
    }'
}
# The client's steps over the traced rounds (each step's own microseconds,
# from the cumulative marks).
printf '%s\n' "$all" | awk '
$1 == "lazaret-escalate:" && $2 == "trace" { print $3, $4 - prev; prev = ($3 == "printed") ? 0 : $4 }' |
    step_medians "inside the client, medians over %d requests (ms):" \
        "inside the client: no trace (a build whose client prints none)"
# The host's side of the same requests: the coordinator logs one
# `escalation-steps ID verify=.. spawn=.. run=.. deliver=..` line (µs) per
# auto-approved request it answers (src/coordinator/broker/run.rs).
clog="$rt/coordinator.log"
if [ -r "$clog" ]; then
    { grep -o 'escalation-steps .*' "$clog" || true; } |
        awk '{ for (i = 3; i <= NF; i++) { split($i, kv, "="); print kv[1], kv[2] } }' |
        step_medians "on the host, medians over %d requests (ms):" \
            "on the host: no step lines (a build that logs none)"
else
    echo "on the host: no coordinator log at $clog"
fi
bench_row "escalation round trip (vs a guest exec)" "$(awk -v v="$im" 'BEGIN{printf "%.2f", v/1000}')" "$(awk -v v="$sm" 'BEGIN{printf "%.2f", v/1000}')" ms "-"
bench_row "escalation beyond a guest exec (median of per-round pairs)" "$(awk -v v="$beyond" 'BEGIN{printf "%.2f", v/1000}')" 0 ms "<=+2ms"
