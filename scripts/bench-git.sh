#!/usr/bin/env bash
# Benchmark of the workspace view (Git Sentry + ignored state, src/view/fs/)
# against a raw runsc sandbox whose /workspace is a plain bind of the host
# directory (bundle = the config.json Lazaret generated, workspace source
# swapped back to the host path). Rows, each timed inside the sandbox (so
# sandbox start-up is not counted):
#   - read 1,100 small tracked files (first access in the sandbox);
#   - `git status` on a repository of ~20,000 tracked files (warm);
#   - unpack 5,000 small files into a tracked (not ignored) directory;
#   - the same into an ignored directory;
#   - write 200 MiB and fsync it;
#   - `ls -f` of a directory of 100,000 entries the host made, the first
#     listing in a new sandbox (extra rounds, the directory present only
#     for them so the other rows do not see it), and the same listing
#     through fuse-overlayfs over the host directory in the raw sandbox:
#     the floor any FUSE view pays before doing anything of its own;
#   - the same floor for the other rows: a third sandbox per round whose
#     /workspace is fuse-overlayfs over the host workspace with an upper
#     directory on the host disk (so creates and writes go through a C
#     FUSE passthrough to the same disk as the bind's).
# Method: one sandbox (and for Lazaret one new Domain) per side and round,
# Lazaret and raw rounds
# interleaved (the side going first alternates), every workload in a
# directory of its own that is removed at the end of the run, and `sync`
# before every run so no side pays for the other's dirty pages. Prints
# per-row medians and the ratio Lazaret/raw, then the view's FUSE requests
# per created and per read file (LAZARET_VIEW_COUNTS, src/view/counts.rs),
# counted in extra runs against a run that does nothing.
#
# With BENCH_BASELINE_BIN=DIR (another build's lazaret, lazaret-init and
# lazaret-escalate, readable by the test user), every round also runs the
# workloads through that build, interleaved with the others, and each row
# is printed for it too and as this build against it ("vs the baseline
# build"): a before/after of a change on the same machine under the same
# load.
#
#   [BENCH_BASELINE_BIN=DIR] scripts/bench-git.sh [ROUNDS] [FILES]
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
rounds=${1:-5}
files=${2:-20000}
. "$here/lib.sh"

bench_as_user "$here" "$(basename "$0")" "$@"

lz=${LAZARET_BIN:-$here/../target/x86_64-unknown-linux-gnu/release/lazaret}
base=$(baseline_bin bench-git.sh)
work=$(mktemp -d "$HOME/lazaret-bench-git.XXXXXX")
trap 'rm -rf "$work"' EXIT
ws="$work/ws"; mkdir -p "$ws"
cd "$ws"

echo "generating a repository of $files tracked files" >&2
export GIT_CONFIG_NOSYSTEM=1 GIT_CONFIG_GLOBAL=/dev/null
git init -q -b main
git config user.name bench; git config user.email bench@example.test
per_dir=100
for d in $(seq 0 $(( files / per_dir - 1 ))); do
    mkdir -p "src/d$d"
    for f in $(seq 0 $(( per_dir - 1 ))); do echo "$d $f" > "src/d$d/f$f.txt"; done
done
printf 'ign/\n' > .gitignore
# .bench.sh SIDE ROUND [ONLY]: the workloads, timed with bash's clock (no
# process started per reading). ONLY (read, unpack, unpack-ign, write, none) runs
# one workload untimed, for the request counts.
cat > .bench.sh <<'EOF'
export HOME=/root PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin
ms() { local t=${EPOCHREALTIME/./}; echo $(( t / 1000 )); }
tag=$1$2 only=${3:-}
rm -rf /tmp/src /tmp/files.tar; mkdir -p /tmp/src && cd /tmp/src
for d in $(seq 0 49); do mkdir d$d; for f in $(seq 0 99); do echo $d$f > d$d/f$f; done; done
tar -cf /tmp/files.tar . && cd /workspace
reads=$(for d in $(seq 100 110); do echo src/d$d/*; done)
case $only in
    none) exit 0 ;;
    read) cat $reads >/dev/null; exit 0 ;;
    unpack) mkdir -p trk/$tag && tar -xf /tmp/files.tar -C trk/$tag; exit 0 ;;
    unpack-ign) mkdir -p ign/$tag && tar -xf /tmp/files.tar -C ign/$tag; exit 0 ;;
    write) mkdir -p wr && dd if=/dev/zero of=wr/$tag bs=1M count=200 conv=fsync status=none; exit 0 ;;
    lsf) t0=$(ms); n=$(ls -f big | wc -l); t1=$(ms); echo "lsf $((t1 - t0)) $n"; exit 0 ;;
esac
t0=$(ms); cat $reads >/dev/null; t1=$(ms); echo "read $((t1 - t0))"
git status --porcelain >/dev/null
t0=$(ms); git status --porcelain >/dev/null; t1=$(ms); echo "status $((t1 - t0))"
mkdir -p trk/$tag ign/$tag wr/$tag wu/$tag
# Untimed: the first unpack in a new sandbox pays gVisor a one-time cost
# (2-4 s here, whatever the directory), which would fall on whichever row
# came first.
tar -xf /tmp/files.tar -C wu/$tag
t0=$(ms); tar -xf /tmp/files.tar -C trk/$tag; t1=$(ms); echo "unpack $((t1 - t0))"
t0=$(ms); tar -xf /tmp/files.tar -C ign/$tag; t1=$(ms); echo "unpack-ign $((t1 - t0))"
t0=$(ms); dd if=/dev/zero of=wr/$tag/f bs=1M count=200 conv=fsync status=none; t1=$(ms); echo "write $((t1 - t0))"
# Removed here, untimed, on both sides alike.
rm -rf trk ign wr wu
EOF
git add -A && git commit -q -m bench

median() { sort -n | awk '{a[NR]=$1} END {if (NR == 0) print "nan"; else print (NR%2) ? a[(NR+1)/2] : (a[NR/2]+a[NR/2+1])/2}'; }

# Every timed run starts in a Domain of its own: the previous one is
# removed first (untimed). Two Domains of the same build were seen to
# differ by up to 50 % in `git status` while the runs within one Domain
# stayed within 10 %, so a Domain kept for every round made one side's
# luck the whole invocation's. BENCH_SAME_DOMAIN=1 keeps one Domain.
fresh() {
    [ -z "${BENCH_SAME_DOMAIN:-}" ] || return 0
    local err
    err=$("$lz" rm --yes 2>&1 >/dev/null) && return 0
    case $err in *"has no state to remove"*) return 0 ;; esac
    echo "bench-git: could not remove the Domain: $err" >&2
    exit 1
}
run_lz() { fresh; sync; "$lz" run --quiet -- bash /workspace/.bench.sh "$@"; }
# The baseline build, when there is one (a no-op without).
run_base() { [ -z "$base" ] || { fresh; sync; "$base/lazaret" run --quiet -- bash /workspace/.bench.sh "$@"; }; }

echo "warm-up run inside lazaret" >&2
run_lz lz 0 > /dev/null &
lzpid=$!
# Capture the bundle Lazaret generated while the Domain is up.
gen=$(domain_bundle "$lz" "$ws")
mkdir -p "$work/bundle" "$work/root"
cp "$gen/config.json" "$work/bundle/template.json"
wait "$lzpid"
[ -z "$base" ] || { echo "warm-up run inside the baseline build" >&2; run_base base 0 >/dev/null; }

run_raw() {
    # Baseline: plain bind of the host workspace, the bench script as the
    # root process.
    python3 - "$work/bundle/template.json" "$work/bundle/config.json" "$ws" "$@" <<'EOF'
import json, sys
src, dst, ws, args = sys.argv[1], sys.argv[2], sys.argv[3], sys.argv[4:]
c = json.load(open(src))
for m in c["mounts"]:
    # The workspace view (bound at the workspace's own path inside)
    # becomes a plain bind at /workspace, a mount point the image has.
    if m["source"].endswith("/gen/view-workspace"):
        m["source"] = ws
        m["destination"] = "/workspace"
# The generation's files (State Anchor overlays, which only exist in the
# supervisor's mount namespace, resolv.conf) are gone once Lazaret exits:
# the raw sandbox takes /usr, /etc, ... from the image rootfs instead.
c["mounts"] = [m for m in c["mounts"] if "/gen/" not in m["source"] or m["destination"] == "/workspace"]
c["process"]["args"] = ["/bin/bash", "/workspace/.bench.sh"] + args
c["process"]["cwd"] = "/workspace"
json.dump(c, open(dst, "w"))
EOF
    sync
    # FLOOR=1: /workspace is the host workspace through fuse-overlayfs (a
    # C FUSE passthrough: the workspace as its lower, writes to an upper
    # directory on the same disk), mounted in the same namespace: what any
    # FUSE view costs before it does anything of its own.
    unshare --map-auto --map-root-user --mount --net --fork -- sh -c '
        mount -t tmpfs -o size=16k lzmask /proc/sys/net/core || exit 1
        if [ "$3" = 1 ]; then
            rm -rf "$1/fup" "$1/fwk"
            mkdir -p "$1/floor" "$1/fup" "$1/fwk" &&
                fuse-overlayfs -o "lowerdir=$4,upperdir=$1/fup,workdir=$1/fwk" "$1/floor" || exit 1
            sed "s|\"source\": *\"$4\"|\"source\": \"$1/floor\"|" "$1/bundle/config.json" > "$1/bundle/floor.json" &&
                mv "$1/bundle/floor.json" "$1/bundle/config.json"
        fi
        runsc --root="$1/root" --ignore-cgroups --network=none --overlay2=root:memory run --bundle "$1/bundle" "bench-git-$2"
        rc=$?
        [ "$3" != 1 ] || { umount "$1/floor" && rm -rf "$1/fup" "$1/fwk"; } || rc=1
        exit $rc' \
        sh "$work" "$1$2" "${FLOOR:-0}" "$ws" | tr -d '\r'
}

: > "$work/lz.out"; : > "$work/raw.out"; : > "$work/base.out"
floor=false
command -v fuse-overlayfs >/dev/null && floor=true
for r in $(seq "$rounds"); do
    echo "round $r of $rounds" >&2
    if [ $((r % 2)) -eq 1 ]; then
        run_lz lz "$r" >> "$work/lz.out"; run_base base "$r" >> "$work/base.out"; run_raw raw "$r" >> "$work/raw.out"
        ! $floor || FLOOR=1 run_raw floor "$r" | sed 's/^/floor-/' >> "$work/lz.out"
    else
        ! $floor || FLOOR=1 run_raw floor "$r" | sed 's/^/floor-/' >> "$work/lz.out"
        run_raw raw "$r" >> "$work/raw.out"; run_base base "$r" >> "$work/base.out"; run_lz lz "$r" >> "$work/lz.out"
    fi
done

# The cold listing: 100,000 empty files the host makes, listed once per
# new sandbox, sides interleaved as above.
echo "making 100000 entries for the cold listing" >&2
python3 -c 'import os, sys
os.mkdir(sys.argv[1])
for i in range(100000):
    os.close(os.open(os.path.join(sys.argv[1], "e%06d" % i), os.O_CREAT | os.O_WRONLY, 0o644))' "$ws/big"
for r in $(seq "$rounds"); do
    if [ $((r % 2)) -eq 1 ]; then
        run_lz lz "$r" lsf >> "$work/lz.out"; run_base base "$r" lsf >> "$work/base.out"; run_raw raw "$r" lsf >> "$work/raw.out"
        ! $floor || FLOOR=1 run_raw floor "$r" lsf | sed 's/^lsf/floor/' >> "$work/lz.out"
    else
        ! $floor || FLOOR=1 run_raw floor "$r" lsf | sed 's/^lsf/floor/' >> "$work/lz.out"
        run_raw raw "$r" lsf >> "$work/raw.out"; run_base base "$r" lsf >> "$work/base.out"; run_lz lz "$r" lsf >> "$work/lz.out"
    fi
done
grep -h '^lsf \|^floor ' "$work/lz.out" "$work/raw.out" "$work/base.out" | awk '$3 != 100002 {print "bench-git: a listing saw " $3 " entries, not 100002" > "/dev/stderr"; bad = 1} END {exit bad}'
rm -rf "$ws/big"

# FUSE requests: each workload alone, minus a run that does nothing.
count() {
    local f="$work/counts.$1"
    LAZARET_VIEW_COUNTS=$f run_lz count "$1" "$1" >/dev/null
}
echo "counting FUSE requests" >&2
for w in none unpack unpack-ign read write; do count "$w"; done
ops() {
    awk 'FNR == NR {b[$2] += $3; next} {a[$2] += $3} END {for (o in a) if (a[o] - b[o] > 0) printf " %s %d", o, a[o] - b[o]}' \
        "$work/counts.none" "$work/counts.$1" 2>/dev/null
}

# each WORKLOAD FILE: that workload's value in every round, in order.
each() { awk -v w="$1" '$1 == w {printf " %s", $2}' "$2"; }
row() {
    local what=$1 label=$2 target=$3 against=${4:-$1} a b c
    a=$(awk -v w="$what" '$1 == w {print $2}' "$work/lz.out" | median)
    b=$(awk -v w="$against" '$1 == w {print $2}' "$work/raw.out" | median)
    awk -v a="$a" -v b="$b" -v l="$label" -v t="$target" \
        'BEGIN { printf "%-44s lazaret %6s ms  raw %6s ms  ratio %.2fx (target <= %s)\n", l, a, b, (b > 0 ? a / b : 0), t }'
    # Every round's value (ms), so the spread behind each median shows.
    local others=""
    [ -z "$base" ] || [ "$what" != "$against" ] || others="; baseline build$(each "$what" "$work/base.out")"
    echo "  rounds: this build$(each "$what" "$work/lz.out"); raw$(each "$against" "$work/raw.out")$others"
    local goal="<=$target"
    [ "$target" != - ] || goal=-
    bench_row "view: $label" "$a" "$b" ms "$goal"
    # The baseline build's own row, and this build against it.
    [ -n "$base" ] && [ "$what" = "$against" ] || return 0
    c=$(awk -v w="$what" '$1 == w {print $2}' "$work/base.out" | median)
    awk -v a="$a" -v c="$c" -v b="$b" -v l="$label" \
        'BEGIN { printf "%-44s baseline build %6s ms (%.2fx raw); this build / baseline build %.3fx\n", l, c, (b > 0 ? c / b : 0), (c > 0 ? a / c : 0) }'
    bench_row "view, baseline build: $label" "$c" "$b" ms "-"
    bench_row "view: $label (vs the baseline build)" "$a" "$c" ms "<=1.05x"
}
echo "rounds: $rounds (interleaved), tracked files: $files; load: $(uptime | sed 's/.*load average: //')"
"$lz" run --quiet -- rm -rf /workspace/ign /workspace/trk /workspace/wr >/dev/null 2>&1 || true
row status "git status (~$files tracked files)" 1.1x
row unpack "unpack 5000 files into a tracked dir" 2.0x
row unpack-ign "unpack 5000 files into an ignored dir" 1.5x
row write "write 200 MiB with fsync" 1.2x
row read "read 1100 small tracked files" 1.1x
row lsf "cold ls -f of 100000 entries" 2.0x
! $floor || row floor "the same through fuse-overlayfs (FUSE floor)" - lsf
if $floor; then
    row floor-status "git status through fuse-overlayfs (FUSE floor)" - status
    row floor-unpack "unpack 5000 files through fuse-overlayfs (FUSE floor)" - unpack
    row floor-unpack-ign "the ignored-dir unpack through fuse-overlayfs (FUSE floor)" - unpack-ign
    row floor-write "write 200 MiB with fsync through fuse-overlayfs (FUSE floor)" - write
    row floor-read "read 1100 small files through fuse-overlayfs (FUSE floor)" - read
fi
# Requests a workload added over the run that does nothing.
total() { awk 'FNR == NR {b += $3; next} {a += $3} END {print a - b}' "$work/counts.none" "$work/counts.$1" 2>/dev/null || echo 0; }
awk -v u="$(total unpack)" -v i="$(total unpack-ign)" -v r="$(total read)" -v w="$(total write)" 'BEGIN {
    printf "FUSE requests per created file: tracked %.2f, ignored %.2f; per read file: %.2f; per MiB written: %.2f\n", u / 5000, i / 5000, r / 1100, w / 200 }'
echo "  tracked unpack:$(ops unpack)"
echo "  ignored unpack:$(ops unpack-ign)"
echo "  reads:$(ops read)"
echo "  200 MiB write:$(ops write)"
