#!/usr/bin/env bash
# Benchmark: `lazaret run -- true` (image prepared, Domain cold) against raw
# `runsc run` of an equivalent bundle in an equivalent user namespace, in
# one invocation: with the network off on both sides, and with Lazaret's
# network against raw runsc with gVisor's netstack on one veth. Prints medians and the ratio. Run as root (it switches to
# the test user) or as the user that owns the image.
#
# With BENCH_BASELINE_BIN=DIR (another build's lazaret, lazaret-init and
# lazaret-escalate, readable by the test user) the cold starts of that
# build are timed in the same rounds, interleaved, and printed against raw
# runsc and as this build against it.
#
#   [BENCH_BASELINE_BIN=DIR] scripts/bench-run.sh [ROUNDS]
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
rounds=${1:-15}
. "$here/lib.sh"

bench_as_user "$here" "$(basename "$0")" "$@"

lz=${LAZARET_BIN:-$here/../target/x86_64-unknown-linux-gnu/release/lazaret}
base=$(baseline_bin bench-run.sh)
work=$(mktemp -d /tmp/lazaret-bench.XXXXXX)
trap 'rm -rf "$work"' EXIT
ws="$work/ws"; mkdir -p "$ws"
cd "$ws"

# Warm up: prepares the lower for this image once.
"$lz" run --quiet -- true
[ -z "$base" ] || "$base/lazaret" run --quiet -- true

ms() { date +%s%N; }
# A cold start is measured from an absent Domain: wait out the previous
# generation's teardown so it is not counted (this workspace's coordinator;
# another benchmark of the same user may hold Domains of its own).
settle() { while pgrep -u "$(id -u)" -f -- "--workspace $ws( |\$)" >/dev/null; do sleep 0.01; done; }
median() { sort -n | awk '{a[NR]=$1} END {print (NR%2) ? a[(NR+1)/2] : (a[NR/2]+a[NR/2+1])/2}'; }

# Baseline bundle: the same prepared lower and the same config.json Lazaret
# generates (captured from a live generation), with our own state root.
"$lz" run --quiet -- sleep 3 & bgpid=$!
gen=$(domain_bundle "$lz" "$ws")
mkdir -p "$work/bundle" "$work/root"
# The raw equivalent: the same rootfs and mounts, with the workspace bound
# directly (no Git Sentry view), no network namespace (raw runs with
# --network=none) and a root process that exits at once.
/usr/bin/python3 - "$gen/config.json" "$work/bundle/config.json" "$ws" "$(dirname "$gen")" <<'PY'
import json, sys
src, dst, ws, gen = sys.argv[1:]
c = json.load(open(src))
mounts = []
for m in c["mounts"]:
    # The workspace view (bound at the workspace's own path inside)
    # becomes a plain bind at /workspace, a mount point the image has.
    if m["source"].endswith("/gen/view-workspace"):
        m["source"] = ws
        m["destination"] = "/workspace"
    elif m.get("source", "").startswith(gen) or "/mailbox/" in m.get("source", ""):
        continue
    mounts.append(m)
c["mounts"] = mounts
c["linux"]["namespaces"] = [n for n in c["linux"]["namespaces"] if n["type"] != "network"]
c["process"]["args"] = ["/bin/true"]
json.dump(c, open(dst, "w"))
# For the netstack baseline: the same, joined to the network namespace the
# run makes (runsc takes a spec without one for the host's).
c["linux"]["namespaces"].append({"type": "network", "path": "@NETNS@"})
json.dump(c, open(dst.replace("bundle/config.json", "bundle-net.json"), "w"))
PY
wait "$bgpid"

raw_once() {
    unshare --map-auto --map-root-user --mount --net --fork -- sh -c '
        mount -t tmpfs -o size=16k lzmask /proc/sys/net/core &&
        runsc --root="$1/root" --ignore-cgroups --network=none --overlay2=root:memory run --bundle "$1/bundle" "bench-$2" >/dev/null' sh "$work" "$1"
}
# The same with gVisor's own network stack: a fresh network namespace
# holding one veth with an address and a default route (what runsc copies
# into its netstack), set up inside the timed call. No packet is sent.
raw_net_once() {
    unshare --map-auto --map-root-user --mount --net --fork -- sh -c '
        mount -t tmpfs -o size=16k lzmask /proc/sys/net/core &&
        ip link add lzb0 type veth peer name lzb1 &&
        ip addr add 10.0.2.100/24 dev lzb0 &&
        ip link set lzb0 up && ip link set lzb1 up &&
        ip route add default via 10.0.2.2 dev lzb0 &&
        mkdir -p "$1/bundle-net-$2" &&
        sed "s|@NETNS@|/proc/$$/ns/net|" "$1/bundle-net.json" > "$1/bundle-net-$2/config.json" &&
        ln -s "$1/bundle/rootfs" "$1/bundle-net-$2/rootfs" 2>/dev/null
        runsc --root="$1/root" --ignore-cgroups --network=sandbox --overlay2=root:memory run --bundle "$1/bundle-net-$2" "bench-net-$2" >/dev/null' sh "$work" "$1"
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
settle

mkdir -p "$work/nonet/lazaret"
printf '[profiles.default.network]\nmode = "none"\n' > "$work/nonet/lazaret/config.toml"
lz_times=(); raw_times=(); nonet_times=(); rawnet_times=(); base_times=(); base_nonet=()
for i in $(seq "$rounds"); do
    settle
    t0=$(ms); "$lz" run --quiet -- true; t1=$(ms)
    lz_times+=($(( (t1 - t0) / 1000000 )))
    settle
    t0=$(ms); XDG_CONFIG_HOME="$work/nonet" "$lz" run --quiet -- true; t1=$(ms)
    nonet_times+=($(( (t1 - t0) / 1000000 )))
    if [ -n "$base" ]; then
        settle
        t0=$(ms); "$base/lazaret" run --quiet -- true; t1=$(ms)
        base_times+=($(( (t1 - t0) / 1000000 )))
        settle
        t0=$(ms); XDG_CONFIG_HOME="$work/nonet" "$base/lazaret" run --quiet -- true; t1=$(ms)
        base_nonet+=($(( (t1 - t0) / 1000000 )))
    fi
    t0=$(ms); raw_once "$i"; t1=$(ms)
    raw_times+=($(( (t1 - t0) / 1000000 )))
    t0=$(ms); raw_net_once "$i"; t1=$(ms)
    rawnet_times+=($(( (t1 - t0) / 1000000 )))
done
rawnetm=$(printf '%s\n' "${rawnet_times[@]}" | median)
lzm=$(printf '%s\n' "${lz_times[@]}" | median)
rawm=$(printf '%s\n' "${raw_times[@]}" | median)
jl=$(printf '%s\n' "${join_lz[@]}" | median)
jr=$(printf '%s\n' "${join_raw[@]}" | median)
echo "rounds: $rounds"
echo "join: lazaret run -- true into a running Domain: median ${jl} ms"
echo "join: raw runsc exec true on the same sandbox:   median ${jr} ms"
awk -v a="$jl" -v b="$jr" 'BEGIN { printf "join ratio lazaret/raw: %.2fx (target <= 1.3x)\n", a / b }'
bench_row "join a running Domain (vs runsc exec)" "$jl" "$jr" ms "<=1.3x"
nnm=$(printf '%s\n' "${nonet_times[@]}" | median)
echo "lazaret run -- true (cold Domain, default profile with network): median ${lzm} ms"
echo "lazaret run -- true (cold Domain, network.mode = none):          median ${nnm} ms"
echo "raw runsc run (same bundle, userns): median ${rawm} ms"
awk -v a="$nnm" -v b="$rawm" 'BEGIN { printf "cold ratio lazaret(no network)/raw: %.2fx (target <= 1.5x)\n", a / b }'
awk -v a="$lzm" -v b="$rawm" 'BEGIN { printf "cold ratio lazaret(network)/raw(no network): %.2fx\n", a / b }'
bench_row "cold start, no network (vs runsc run)" "$nnm" "$rawm" ms "<=1.25x"
bench_row "cold start, network (vs runsc run, no network)" "$lzm" "$rawm" ms "-"
echo "raw runsc run, gVisor netstack (same bundle, veth in a fresh netns): median ${rawnetm} ms"
awk -v a="$lzm" -v b="$rawnetm" 'BEGIN { printf "cold ratio lazaret(network)/raw(netstack): %.2fx (target <= 1.2x)\n", a / b }'
bench_row "cold start, network (vs runsc run, netstack)" "$lzm" "$rawnetm" ms "<=1.2x"
if [ -n "$base" ]; then
    bm=$(printf '%s\n' "${base_times[@]}" | median)
    bnm=$(printf '%s\n' "${base_nonet[@]}" | median)
    echo "baseline build: cold, network: median ${bm} ms; cold, network.mode = none: median ${bnm} ms"
    awk -v a="$bnm" -v b="$rawm" 'BEGIN { printf "baseline build: cold ratio (no network)/raw: %.2fx\n", a / b }'
    awk -v a="$bm" -v b="$rawnetm" 'BEGIN { printf "baseline build: cold ratio (network)/raw(netstack): %.2fx\n", a / b }'
    awk -v a="$nnm" -v b="$bnm" 'BEGIN { printf "this build / baseline build, cold, no network: %.3fx\n", a / b }'
    awk -v a="$lzm" -v b="$bm" 'BEGIN { printf "this build / baseline build, cold, network:    %.3fx\n", a / b }'
    bench_row "cold start, no network (vs the baseline build)" "$nnm" "$bnm" ms "<=1.0x"
    bench_row "cold start, network (vs the baseline build)" "$lzm" "$bm" ms "<=1.0x"
fi

# Resource limits: the same cold start inside a delegated cgroup, with
# explicit limits (a per-generation cgroup is created, written, joined and
# removed), against the same start where no cgroup is available (limits
# off, one warning). cgroup v1 only: the user moves its own process in.
if [ -n "${LAZARET_BENCH_CGROUPS:-}" ]; then
    mkdir -p "$work/lim/lazaret"
    printf '[profiles.default.limits]\nmemory = "2GiB"\npids = 4096\ncpus = 2.0\n' > "$work/lim/lazaret/config.toml"
    in_cgroup() { (for d in $LAZARET_BENCH_CGROUPS; do echo "$BASHPID" > "$d/cgroup.procs"; done; exec "$@"); }
    lim=(); nolim=()
    for i in $(seq "$rounds"); do
        settle
        t0=$(ms); in_cgroup env XDG_CONFIG_HOME="$work/lim" "$lz" run --quiet -- true; t1=$(ms)
        lim+=($(( (t1 - t0) / 1000000 )))
        settle
        t0=$(ms); "$lz" run --quiet -- true 2>/dev/null; t1=$(ms)
        nolim+=($(( (t1 - t0) / 1000000 )))
    done
    limm=$(printf '%s\n' "${lim[@]}" | median)
    nolimm=$(printf '%s\n' "${nolim[@]}" | median)
    echo "lazaret run -- true (cold, limits in a delegated cgroup): median ${limm} ms"
    echo "lazaret run -- true (cold, no cgroup, no limits):         median ${nolimm} ms"
    awk -v a="$limm" -v b="$nolimm" 'BEGIN { printf "cold ratio limits/no limits: %.3fx (target < 1.05x)\n", a / b }'
else
    echo "limits: no delegated cgroup for this user (run as root so bench_as_user prepares one); skipped"
fi

# Where one more cold start spends its time (src/trace.rs).
settle
echo "one cold start, step by step (LAZARET_TRACE_STARTUP=1):"
LAZARET_TRACE_STARTUP=1 "$lz" run --quiet -- true 2>&1 | sed 's/^/  /'
