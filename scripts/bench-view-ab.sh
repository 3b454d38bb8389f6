#!/usr/bin/env bash
# A/B of two or more builds on the view's per-file rows, with the view's
# own CPU time: the noise of a shared machine moves wall time by ±15 %
# between rounds, while the CPU the supervisor (the view's threads) spends
# on a workload moves by a few percent, and it is the only cost a change
# to the view can add.
#
# Each run starts in a new Domain (the previous one removed, untimed) and,
# inside the sandbox: reads 1,100 small tracked files (first access),
# unpacks 5,000 files once untimed (gVisor's first-unpack cost), then
# unpacks them into an ignored and into a tracked directory, timed. Around
# the read and the ignored unpack the guest waits on handshake files while
# the host reads the supervisor's utime+stime from /proc. Builds run
# interleaved, the order reversed every other round. Prints every run and
# per build the medians (ranges), then each build against the first.
#
#   scripts/bench-view-ab.sh ROUNDS DIR [DIR...]
#
# DIR holds a build's lazaret, lazaret-init and lazaret-escalate, readable
# by the test user. Run as root (it switches to the test user) or as the
# user that owns the default image.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
. "$here/lib.sh"
[ $# -ge 2 ] || { echo "usage: $0 ROUNDS DIR [DIR...]" >&2; exit 2; }
rounds=$1; shift
case $rounds in '' | *[!0-9]*) echo "bench-view-ab: ROUNDS=$rounds: expected a number" >&2; exit 2 ;; esac
for d in "$@"; do
    [ -x "$d/lazaret" ] && [ -x "$d/lazaret-init" ] ||
        { echo "bench-view-ab: $d: expected a directory with lazaret and lazaret-init" >&2; exit 2; }
done
if [ "$(id -u)" -eq 0 ]; then
    user=${LAZARET_TEST_USER:-lazaret-test}
    ensure_user "$user" >/dev/null
    run_as "$user" "$1/lazaret" image build --quiet --if-missing
    exec setpriv --reuid="$user" --regid="$(id -g "$user")" --init-groups -- \
        env -i HOME="$(getent passwd "$user" | cut -d: -f6)" USER="$user" PATH=/usr/local/bin:/usr/bin:/bin:/usr/sbin:/sbin \
        bash "$here/bench-view-ab.sh" "$rounds" "$@"
fi

work=$(mktemp -d "$HOME/lazaret-bench-view-ab.XXXXXX")
trap 'rm -rf "$work"' EXIT
ws=$work/ws; mkdir -p "$ws"; cd "$ws"
export GIT_CONFIG_NOSYSTEM=1 GIT_CONFIG_GLOBAL=/dev/null
git init -q -b main; git config user.name bench; git config user.email bench@example.test
for d in $(seq 0 10); do
    mkdir -p "src/d$d"
    for f in $(seq 0 99); do echo "$d $f" > "src/d$d/f$f.txt"; done
done
printf 'ign/\n' > .gitignore
cat > .bench.sh <<'EOF'
export PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin
ms() { local t=${EPOCHREALTIME/./}; echo $(( t / 1000 )); }
# hand N: the host reads the view's CPU, then answers.
hand() { : > /workspace/.m$1; while [ ! -e /workspace/.a$1 ]; do sleep 0.02; done; }
rm -rf /tmp/src /tmp/f.tar; mkdir -p /tmp/src && cd /tmp/src
for d in $(seq 0 49); do mkdir d$d; for f in $(seq 0 99); do echo $d$f > d$d/f$f; done; done
tar -cf /tmp/f.tar . && cd /workspace
reads=$(for d in $(seq 0 10); do echo src/d$d/*; done)
hand 1; t0=$(ms); cat $reads >/dev/null; t1=$(ms); hand 2
mkdir -p wu ign/x trk/x; tar -xf /tmp/f.tar -C wu
hand 3; t2=$(ms); tar -xf /tmp/f.tar -C ign/x; t3=$(ms); hand 4
t4=$(ms); tar -xf /tmp/f.tar -C trk/x; t5=$(ms)
echo "$((t1 - t0)) $((t3 - t2)) $((t5 - t4))"
rm -rf wu ign trk .m? .a?
EOF
git add -A && git commit -q -m bench

# The supervisor's CPU (utime + stime) in ms; one Domain runs at a time.
cpu() {
    local p
    p=$(pgrep -u "$(id -u)" -f '^lazaret:\[supervisor\]' | head -1)
    [ -n "$p" ] || { echo "bench-view-ab: no supervisor running" >&2; exit 1; }
    awk -v hz="$(getconf CLK_TCK)" '{print int(($14 + $15) * 1000 / hz)}' "/proc/$p/stat"
}
one() {
    local b=$1 err pid c1 c2 c3 c4
    err=$("$b/lazaret" rm --yes 2>&1 >/dev/null) ||
        case $err in *"has no state to remove"*) ;; *) echo "bench-view-ab: rm: $err" >&2; exit 1 ;; esac
    sync
    "$b/lazaret" run --quiet -- bash /workspace/.bench.sh > "$work/out" &
    pid=$!
    for i in 1 2 3 4; do
        while [ ! -e "$ws/.m$i" ]; do
            kill -0 "$pid" 2>/dev/null || { echo "bench-view-ab: the run through $b ended early" >&2; exit 1; }
            sleep 0.02
        done
        eval "c$i=\$(cpu)"
        : > "$ws/.a$i"
    done
    wait "$pid"
    read -r rd ig tr < "$work/out"
    echo "$b $rd $((c2 - c1)) $ig $((c4 - c3)) $tr"
}
echo "warm-up" >&2
for b in "$@"; do one "$b" > /dev/null; done
echo "rounds: $rounds; load: $(cut -d' ' -f1-3 /proc/loadavg)"
echo "build read_ms read_view_cpu_ms ignored_ms ignored_view_cpu_ms tracked_ms"
: > "$work/runs"
for r in $(seq "$rounds"); do
    echo "round $r of $rounds" >&2
    if [ $((r % 2)) -eq 1 ]; then order=("$@"); else order=(); for ((i = $#; i >= 1; i--)); do order+=("${!i}"); done; fi
    for b in "${order[@]}"; do one "$b" | tee -a "$work/runs"; done
done
echo "load at the end: $(cut -d' ' -f1-3 /proc/loadavg)"
python3 - "$work/runs" "$@" <<'EOF'
import statistics, sys
runs, builds = sys.argv[1], sys.argv[2:]
cols = ["read", "read, view CPU", "ignored unpack", "ignored unpack, view CPU", "tracked unpack"]
by = {b: [] for b in builds}
for line in open(runs):
    b, *v = line.split()
    by[b].append([int(x) for x in v])
med = {b: [statistics.median(r[k] for r in by[b]) for k in range(len(cols))] for b in builds}
for b in builds:
    print(b + ":")
    for k, c in enumerate(cols):
        vals = [r[k] for r in by[b]]
        print(f"  {c:26} {med[b][k]:8.0f} ms ({min(vals)}-{max(vals)})")
for b in builds[1:]:
    print(f"{builds[0]} / {b}:")
    for k, c in enumerate(cols):
        ratio = med[builds[0]][k] / med[b][k] if med[b][k] else float("nan")
        print(f"  {c:26} {ratio:.3f}x")
EOF
