#!/usr/bin/env bash
# Benchmark: `lazaret run -- true` (image prepared, Domain cold) against raw
# `runsc run` of an equivalent bundle in an equivalent user namespace, in
# one invocation. Prints medians and the ratio. Run as root (it switches to
# the test user) or as the user that owns the image.
#
#   scripts/bench-run.sh [ROUNDS]
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
rounds=${1:-15}
. "$here/lib.sh"

if [ "$(id -u)" -eq 0 ]; then
    cd "$here/.."
    user=${LAZARET_TEST_USER:-lazaret-test}
    ensure_user "$user" >/dev/null
    cargo build --release --locked 2>&1 | tail -n 1
    bindir=$(stage_binaries "$user")
    install -m 0755 scripts/bench-run.sh "$bindir/bench-run.sh"
    install -m 0644 scripts/lib.sh "$bindir/lib.sh"
    run_as "$user" "$bindir/lazaret" image build --quiet --if-missing
    exec setpriv --reuid="$user" --regid="$(id -g "$user")" --init-groups -- \
        env -i HOME="$(getent passwd "$user" | cut -d: -f6)" USER="$user" PATH=/usr/local/bin:/usr/bin:/bin:/usr/sbin:/sbin \
        LAZARET_BIN="$bindir/lazaret" bash "$bindir/bench-run.sh" "$rounds"
fi

lz=${LAZARET_BIN:-$here/../target/x86_64-unknown-linux-gnu/release/lazaret}
work=$(mktemp -d /tmp/lazaret-bench.XXXXXX)
trap 'rm -rf "$work"' EXIT
ws="$work/ws"; mkdir -p "$ws"
cd "$ws"

# Warm up: prepares the lower for this image once.
"$lz" run --quiet -- true

ms() { date +%s%N; }
median() { sort -n | awk '{a[NR]=$1} END {print (NR%2) ? a[(NR+1)/2] : (a[NR/2]+a[NR/2+1])/2}'; }

# Baseline bundle: the same prepared lower and the same config.json Lazaret
# generates (captured from a live generation), with our own state root.
"$lz" run --quiet -- sleep 3 & bgpid=$!
gen=""
for _ in $(seq 100); do
    gen=$(ls -d /tmp/lazaret-"$(id -u)"/*/gen/bundle 2>/dev/null | head -n1 || true)
    [ -n "$gen" ] && [ -f "$gen/config.json" ] && break
    sleep 0.05
done
mkdir -p "$work/bundle" "$work/root"
cp "$gen/config.json" "$work/bundle/config.json"
wait "$bgpid"
# The raw baseline root process exits at once instead of Lazaret's init.
sed -i 's#"args":\["/.lazaret/init"\]#"args":["/bin/true"]#' "$work/bundle/config.json"

raw_once() {
    unshare --map-auto --map-root-user --mount --net --fork -- sh -c '
        mount -t tmpfs -o size=16k lzmask /proc/sys/net/core &&
        runsc --root="$1/root" --ignore-cgroups --network=none --overlay2=root:memory run --bundle "$1/bundle" "bench-$2" >/dev/null' sh "$work" "$1"
}

# Join latency: a keeper session holds the Domain; `lazaret run -- true`
# joins it, against raw `runsc exec` on the same sandbox entered the same
# way Lazaret does (the supervisor's user and mount namespaces).
"$lz" run --quiet -- sleep 600 & keeper=$!
info=""
for _ in $(seq 200); do
    info=$("$lz" ps --json | /usr/bin/python3 -c '
import json, sys
for d in json.load(sys.stdin):
    if d["workspace"] == sys.argv[1] and d["phase"] == "ready":
        print(d["supervisor_pid"], d["sandbox_id"])' "$(realpath "$ws")")
    [ -n "$info" ] && break
    sleep 0.05
done
read -r sup id <<<"$info"
sroot=$(tr '\0' '\n' < /proc/"$sup"/cmdline | sed -n '/--runsc-root/{n;p}')
join_lz=(); join_raw=()
for i in $(seq "$rounds"); do
    t0=$(ms); "$lz" run --quiet -- true; t1=$(ms)
    join_lz+=($(( (t1 - t0) / 1000000 )))
    t0=$(ms)
    nsenter --preserve-credentials -U -m -t "$sup" -- runsc --root="$sroot" --ignore-cgroups --network=none --overlay2=root:memory exec "$id" /bin/true
    t1=$(ms)
    join_raw+=($(( (t1 - t0) / 1000000 )))
done
kill "$keeper"; wait "$keeper" 2>/dev/null || true
sleep 1

lz_times=(); raw_times=()
for i in $(seq "$rounds"); do
    t0=$(ms); "$lz" run --quiet -- true; t1=$(ms)
    lz_times+=($(( (t1 - t0) / 1000000 )))
    t0=$(ms); raw_once "$i"; t1=$(ms)
    raw_times+=($(( (t1 - t0) / 1000000 )))
done
lzm=$(printf '%s\n' "${lz_times[@]}" | median)
rawm=$(printf '%s\n' "${raw_times[@]}" | median)
jl=$(printf '%s\n' "${join_lz[@]}" | median)
jr=$(printf '%s\n' "${join_raw[@]}" | median)
echo "rounds: $rounds"
echo "join: lazaret run -- true into a running Domain: median ${jl} ms"
echo "join: raw runsc exec true on the same sandbox:   median ${jr} ms"
awk -v a="$jl" -v b="$jr" 'BEGIN { printf "join ratio lazaret/raw: %.2fx (target <= 1.3x)\n", a / b }'
echo "lazaret run -- true (cold Domain): median ${lzm} ms"
echo "raw runsc run (same bundle, userns): median ${rawm} ms"
awk -v a="$lzm" -v b="$rawm" 'BEGIN { printf "ratio lazaret/raw: %.2fx (target <= 1.5x)\n", a / b }'
