#!/usr/bin/env bash
# Benchmark: a rootfs-heavy workload inside one session,
# with the State Anchor (kernel overlayfs, and fuse-overlayfs) against the
# bare prepared lower (`persist = []`: the whole rootfs is the lower under
# runsc's sandbox-local memory overlay). One invocation; prints medians of
# ROUNDS sessions and the ratios. Run as root (it switches to the test
# user) or as the user that owns the image.
#
#   [BENCH_BASELINE_BIN=DIR] scripts/bench-state.sh [ROUNDS] [N]
#
# With BENCH_BASELINE_BIN (another build's binaries, readable by the test
# user), each round also runs the bare and the kernel-overlayfs sessions
# through that build, and the kernel row is printed for it too and as this
# build against it.
#
# Workload: N (default 50) x `python3 -c 'import ...'` in one session. The
# default image has python3-minimal, which lacks json and http.client, so
# the imports are stdlib modules it does ship (email, argparse, logging,
# pathlib, subprocess, inspect, datetime, csv, configparser, ipaddress).
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
rounds=${1:-5}
n=${2:-50}
. "$here/lib.sh"

bench_as_user "$here" "$(basename "$0")" "$@"

lz=${LAZARET_BIN:-$here/../target/x86_64-unknown-linux-gnu/release/lazaret}
base=$(baseline_bin bench-state.sh)
work=$(mktemp -d /tmp/lazaret-bench-state.XXXXXX)
domains="${XDG_DATA_HOME:-$HOME/.local/share}/lazaret/domains"
cleanup() {
    local p id
    for p in anchored fuse bare; do
        id=$(XDG_CONFIG_HOME="$work/cfg" "$lz" state inspect --profile "$p" --workspace "$work/ws" --json 2>/dev/null |
            grep -o '"domain_id":"[0-9a-f]*"' | cut -d'"' -f4 || true)
        XDG_CONFIG_HOME="$work/cfg" "$lz" state reset --profile "$p" --workspace "$work/ws" --all --yes >/dev/null 2>&1 || true
        [ -n "$id" ] && rm -rf "${domains:?}/$id"
    done
    rm -rf "$work"
}
trap cleanup EXIT
mkdir -p "$work/ws" "$work/cfg/lazaret"
cat >"$work/cfg/lazaret/config.toml" <<'EOF'
[profiles.anchored]
[profiles.fuse]
[profiles.bare]
persist = []
EOF
export XDG_CONFIG_HOME="$work/cfg"
cd "$work/ws"

script='
mods="email, argparse, logging, pathlib, subprocess, inspect, datetime, csv, configparser, ipaddress"
python3 -c "import $mods" || exit 1
t0=$(date +%s%N)
i=0; while [ $i -lt @COUNT@ ]; do
    a=$(date +%s%N); python3 -c "import $mods"; b=$(date +%s%N)
    echo "i $(( (b - a) / 1000 ))"; i=$((i+1))
done
t1=$(date +%s%N)
echo "t $(( (t1 - t0) / 1000000 ))"'
script=${script//@COUNT@/$n}

median() { sort -n | awk '{a[NR]=$1} END {print (NR%2) ? a[(NR+1)/2] : (a[NR/2]+a[NR/2+1])/2}'; }

# Warm-up: prepares the lower, creates each Domain's anchor.
for p in anchored fuse bare; do
    d=kernel; [ "$p" = fuse ] && d=fuse
    LAZARET_OVERLAY_DRIVER=$d "$lz" run --quiet --profile "$p" -- true
done
if [ -n "$base" ]; then
    for p in anchored bare; do LAZARET_OVERLAY_DRIVER=kernel "$base/lazaret" run --quiet --profile "$p" -- true; done
fi

# Rounds interleave the three setups so that a change in machine load
# affects all of them alike.
: >"$work/bare"; : >"$work/kernel"; : >"$work/fuse"; : >"$work/bbare"; : >"$work/bkernel"
# The baseline build's two sessions (bare, kernel overlayfs), when there is one.
run_base() {
    [ -n "$base" ] || return 0
    LAZARET_OVERLAY_DRIVER=kernel "$base/lazaret" run --quiet --profile bare -- sh -c "$script" >>"$work/bbare"
    LAZARET_OVERLAY_DRIVER=kernel "$base/lazaret" run --quiet --profile anchored -- sh -c "$script" >>"$work/bkernel"
}
for r in $(seq "$rounds"); do
    # The baseline build goes first in odd rounds and last in even ones.
    [ $((r % 2)) -eq 0 ] || run_base
    LAZARET_OVERLAY_DRIVER=kernel "$lz" run --quiet --profile bare -- sh -c "$script" >>"$work/bare"
    LAZARET_OVERLAY_DRIVER=kernel "$lz" run --quiet --profile anchored -- sh -c "$script" >>"$work/kernel"
    LAZARET_OVERLAY_DRIVER=fuse "$lz" run --quiet --profile fuse -- sh -c "$script" >>"$work/fuse"
    [ $((r % 2)) -eq 1 ] || run_base
done
# Session totals (ms) and single invocations (us): the median of all
# invocations is the steadier figure on a busy machine.
tot() { awk '$1 == "t" {print $2}' "$work/$1" | median; }
one() { awk '$1 == "i" {print $2}' "$work/$1" | median; }
bare=$(tot bare); kernel=$(tot kernel); fuse=$(tot fuse)
bare1=$(one bare); kernel1=$(one kernel); fuse1=$(one fuse)
ratio() { awk -v a="$1" -v b="$2" 'BEGIN{printf "%.2f", a/b}'; }
drivers() { "$lz" state inspect --profile "$1" --json | grep -o '"driver":"[a-z]*"' | sort -u | cut -d'"' -f4 | tr '\n' ' '; }
drv="anchored: $(drivers anchored) fuse: $(drivers fuse)"

echo "load average: $(cut -d" " -f1-3 /proc/loadavg)"
echo "workload: $n x python3 -c 'import <10 stdlib modules>' in one session, $rounds sessions per setup"
printf '%-34s %14s %8s %16s %8s\n' "" "session median" "ratio" "one invocation" "ratio"
printf '%-34s %11s ms %8s %13s us %8s\n' "bare prepared lower (persist = [])" "$bare" "1.00" "$bare1" "1.00"
printf '%-34s %11s ms %8s %13s us %8s\n' "State Anchor, kernel overlayfs" "$kernel" "$(ratio "$kernel" "$bare")" "$kernel1" "$(ratio "$kernel1" "$bare1")"
printf '%-34s %11s ms %8s %13s us %8s\n' "State Anchor, fuse-overlayfs" "$fuse" "$(ratio "$fuse" "$bare")" "$fuse1" "$(ratio "$fuse1" "$bare1")"
echo "drivers recorded per profile: $drv"
echo "default driver: kernel overlayfs (userxattr), fuse-overlayfs as fallback; target ratio <= 1.20"
bench_row "rootfs workload, State Anchor kernel overlayfs (vs bare lower)" "$kernel" "$bare" ms "<=1.20x"
bench_row "rootfs workload, State Anchor fuse-overlayfs (vs bare lower)" "$fuse" "$bare" ms "<=1.20x"
if [ -n "$base" ]; then
    bbare=$(tot bbare); bkernel=$(tot bkernel)
    echo "baseline build: bare $bbare ms, kernel overlayfs $bkernel ms ($(ratio "$bkernel" "$bbare")x); this build / baseline build, kernel overlayfs: $(ratio "$kernel" "$bkernel")x"
    bench_row "rootfs workload, kernel overlayfs, baseline build (vs its bare lower)" "$bkernel" "$bbare" ms "-"
    bench_row "rootfs workload, kernel overlayfs (vs the baseline build)" "$kernel" "$bkernel" ms "<=1.05x"
fi
